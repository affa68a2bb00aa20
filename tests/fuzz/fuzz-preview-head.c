/* The preview listener's request head (controld/preview.c, through preview_head_check): the
 * parser, the router (<port>-<id>.<domain> and the opt-in path form), the token and cookie
 * lookups, the rewrite and the body framing, on the bytes a client sends first. Input: byte 0
 * picks the path form (bit 0) and the domain (bit 1: "preview.test", else
 * "localhost:8082"), the rest is what the client sent. Properties:
 *   - the answer is 0 (forwarded) or a status a client is told: 400, 404 or 431;
 *   - forwarded: the head the app gets is one request line and header lines, each ending in
 *     CRLF with no other CR or LF and no NUL, then one blank line, and nothing after it;
 *   - none of the client's X-Forwarded-* / Forwarded / token / E2B traffic token headers and
 *     none of our cookies is in it: exactly one X-Forwarded-For, -Proto and at most one
 *     -Host, the ones we wrote;
 *   - the Host the app sees is localhost:<port> unless the path form keeps the client's. */
#include <stdbool.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "fuzz.h"
#include "preview.h"

/* Header lines of head starting with prefix; the request line is no header (a method may be
 * any token, "X-Forwarded-ProtoGET" included). */
static size_t count_lines(const char *head, const char *prefix) {
        size_t n = 0, pl = strlen(prefix);
        const char *first = strstr(head, "\r\n");
        if (!first)
                return 0;
        for (const char *l = first + 2; *l; l = strstr(l, "\r\n") + 2) {
                if (!strncasecmp(l, prefix, pl))
                        n++;
                if (!strstr(l, "\r\n"))
                        break;
        }
        return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1 || size > 300 * 1024)
                return 0;
        bool path_form = data[0] & 1;
        const char *domain = data[0] & 2 ? "preview.test" : "localhost:8082";
        char *head = NULL;
        int st = preview_head_check(data + 1, size - 1, domain, path_form, &head);
        FUZZ_ASSERT(st == 0 || st == 400 || st == 404 || st == 431, "status %d", st);
        if (st != 0) {
                FUZZ_ASSERT(!head, "a head for a refused request");
                return 0;
        }
        FUZZ_ASSERT(head, "forwarded without a head");
        size_t n = strlen(head);
        FUZZ_ASSERT(n >= 4 && !strcmp(head + n - 4, "\r\n\r\n"), "the head does not end in a blank line");
        const char *blank = strstr(head, "\r\n\r\n");
        FUZZ_ASSERT(blank == head + n - 4, "a blank line inside the head (a second request)");
        for (size_t i = 0; i < n; i++) {
                if (head[i] == '\r')
                        FUZZ_ASSERT(i + 1 < n && head[i + 1] == '\n', "a bare CR at %zu", i);
                if (head[i] == '\n')
                        FUZZ_ASSERT(i > 0 && head[i - 1] == '\r', "a bare LF at %zu", i);
        }
        FUZZ_ASSERT(count_lines(head, "X-Forwarded-For:") == 1, "X-Forwarded-For lines: %zu", count_lines(head, "X-Forwarded-For:"));
        FUZZ_ASSERT(count_lines(head, "X-Forwarded-Proto:") == 1, "X-Forwarded-Proto lines");
        FUZZ_ASSERT(count_lines(head, "X-Forwarded-Host:") <= 1, "X-Forwarded-Host lines");
        FUZZ_ASSERT(count_lines(head, "X-Forwarded-") == 2 + count_lines(head, "X-Forwarded-Host:"), "a client's X-Forwarded-*");
        FUZZ_ASSERT(count_lines(head, "Forwarded:") == 0, "a client's Forwarded");
        FUZZ_ASSERT(count_lines(head, "X-Paddock-Preview-Token:") == 0, "the preview token reached the app");
        FUZZ_ASSERT(count_lines(head, "e2b-traffic-access-token:") == 0, "E2B's traffic token reached the app");
        FUZZ_ASSERT(count_lines(head, "Host:") == 1, "Host lines: %zu", count_lines(head, "Host:"));
        if (!path_form)
                FUZZ_ASSERT(count_lines(head, "Host: localhost:") == 1, "the app's Host is not localhost:<port>");
        for (const char *l = head; (l = strcasestr(l, "\r\nCookie:")); l += 9) {
                const char *e = strstr(l + 2, "\r\n");
                _cleanup_free_ char *line = strndup(l + 9, (size_t) (e - l - 9));
                /* each "name=value" pair: no name of ours (paddock_preview_*, __Host- or not) */
                for (char *save = NULL, *pair = strtok_r(line, ";", &save); pair; pair = strtok_r(NULL, ";", &save)) {
                        pair += strspn(pair, " ");
                        if (!strncmp(pair, "__Host-", 7))
                                pair += 7;
                        FUZZ_ASSERT(strncmp(pair, "paddock_preview_", 16), "our cookie reached the app: %s", pair);
                }
        }
        free(head);
        return 0;
}
