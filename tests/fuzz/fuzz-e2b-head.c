/* The E2B listener's routing of a connection by its first request head (controld/e2b.c,
 * e2b_head_target): the Host <port>-<id>.<domain> parse and the E2b-Sandbox-Id/-Port headers,
 * on a peeked head of any bytes. Input: byte 0 picks the domain (bit 0: "e2b.test", else
 * "localhost:3000"), the rest is the head. Properties:
 *   - the answer is -1, 0 or 1, the same on a second call (no state);
 *   - 1: id is 24 lowercase hex characters and the port is 1..65535; without an
 *     E2b-Sandbox-Id header the Host names exactly that port and id under the domain;
 *   - a head without '-' and without "E2b-Sandbox-Id" names no sandbox (0). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "e2b.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1 || size > 70000)
                return 0;
        const char *domain = data[0] & 1 ? "e2b.test" : "localhost:3000";
        const char *head = (const char *) data + 1;
        size_t n = size - 1;
        char id[25] = "", id2[25] = "";
        int port = 0, port2 = 0;
        int t = e2b_head_target(head, n, domain, id, &port);
        FUZZ_ASSERT(t >= -1 && t <= 1, "answer %d", t);
        int t2 = e2b_head_target(head, n, domain, id2, &port2);
        FUZZ_ASSERT(t == t2, "%d then %d", t, t2);
        /* the head as text for the searches below, a NUL read as a space */
        _cleanup_free_ char *text = malloc(n + 1);
        for (size_t i = 0; i < n; i++)
                text[i] = head[i] ? head[i] : ' ';
        text[n] = 0;
        bool named = strcasestr(text, "E2b-Sandbox-Id") != NULL;
        if (t == 1) {
                FUZZ_ASSERT(!strcmp(id, id2) && port == port2, "two answers");
                FUZZ_ASSERT(strlen(id) == 24 && strspn(id, "0123456789abcdef") == 24, "id '%s'", id);
                FUZZ_ASSERT(port >= 1 && port <= 65535, "port %d", port);
                if (!named) {
                        char want[64];
                        snprintf(want, sizeof(want), "%d-%s.", port, id);
                        FUZZ_ASSERT(strstr(text, want) != NULL, "Host does not name %s", want);
                }
        }
        if (!memchr(head, '-', n))
                FUZZ_ASSERT(t == 0, "a sandbox named without '-' in the head: %d", t);
        return 0;
}
