/* The strict JSON reader (common/json.c json_parse) that proto-json's node codecs and
 * controld's bus use. Properties: never crashes on any bytes; errors are -EINVAL or
 * -EMSGSIZE with a message; printing an accepted document and reading that back
 * succeeds and prints the same text (print is a fixed point after one round). */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_json_ cJSON *j = NULL;
        struct err err = { 0 };

        int r = json_parse((const char *) data, size, 1 << 20, 32, &j, &err);
        if (r < 0) {
                FUZZ_ASSERT(r == -EINVAL || r == -EMSGSIZE, "unexpected error %d", r);
                FUZZ_ASSERT(err.message[0] && memchr(err.message, 0, sizeof(err.message)), "error without a message");
                return 0;
        }
        FUZZ_ASSERT(j != NULL, "success without a document");
        _cleanup_free_ char *p1 = json_print(j);
        _cleanup_json_ cJSON *j2 = NULL;
        r = json_parse(p1, strlen(p1), 1 << 22, 32, &j2, &err);
        FUZZ_ASSERT(r == 0, "its own output is refused (%s): %s", err.message, p1);
        _cleanup_free_ char *p2 = json_print(j2);
        FUZZ_ASSERT(!strcmp(p1, p2), "print not stable: %s vs %s", p1, p2);
        return 0;
}
