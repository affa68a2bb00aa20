/* Parsers in common/strutil.c that take user or config text: base64 (batch uploads),
 * UTF-8 validation (every JSON string), sizes and durations (config, API). Properties:
 * decode(encode(x)) == x and encode(decode(s)) == s for every s decode accepts (strict,
 * padded: one text per byte string); utf8_valid agrees with utf8_first_invalid; an
 * accepted size or duration prints back to a value the parser reads the same. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "strutil.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *s = (const char *) data;

        /* base64 both ways. */
        {
                size_t elen = 0;
                _cleanup_free_ char *enc = base64_encode(data, size, &elen);
                FUZZ_ASSERT(elen == strlen(enc) && elen % 4 == 0, "encoded length %zu", elen);
                _cleanup_free_ uint8_t *dec = NULL;
                size_t dlen = 0;
                FUZZ_ASSERT(base64_decode(enc, elen, &dec, &dlen) == 0, "own encoding refused");
                FUZZ_ASSERT(dlen == size && (!size || !memcmp(dec, data, size)), "round trip lost bytes");
        }
        {
                _cleanup_free_ uint8_t *dec = NULL;
                size_t dlen = 0;
                int r = base64_decode(s, size, &dec, &dlen);
                if (r == 0) {
                        FUZZ_ASSERT(dec[dlen] == 0, "no NUL past the data");
                        size_t elen = 0;
                        _cleanup_free_ char *enc = base64_encode(dec, dlen, &elen);
                        FUZZ_ASSERT(elen == size && !memcmp(enc, s, size), "decoder accepted a non-canonical text");
                } else
                        FUZZ_ASSERT(r == -EINVAL, "decode returned %d", r);
        }

        /* UTF-8. */
        size_t bad = utf8_first_invalid(s, size);
        FUZZ_ASSERT(bad <= size, "offset %zu past %zu", bad, size);
        FUZZ_ASSERT(utf8_valid(s, size) == (bad == size), "utf8_valid and utf8_first_invalid disagree");
        FUZZ_ASSERT(utf8_valid(s, bad), "prefix before the first invalid byte is invalid");

        /* Sizes, durations, integers on the input as a C string. */
        if (size <= 64 && !memchr(data, 0, size)) {
                _cleanup_free_ char *t = strndup(s, size);
                uint64_t v, v2;
                int64_t i, i2;
                char buf[32];
                if (parse_size(t, &v) == 0) {
                        snprintf(buf, sizeof(buf), "%" PRIu64, v);
                        FUZZ_ASSERT(parse_size(buf, &v2) == 0 && v == v2, "size %s -> %" PRIu64, t, v);
                }
                if (parse_duration_ms(t, &v) == 0) {
                        snprintf(buf, sizeof(buf), "%" PRIu64 "ms", v);
                        FUZZ_ASSERT(parse_duration_ms(buf, &v2) == 0 && v == v2, "duration %s -> %" PRIu64, t, v);
                }
                if (safe_atoi64(t, &i) == 0) {
                        snprintf(buf, sizeof(buf), "%" PRId64, i);
                        FUZZ_ASSERT(safe_atoi64(buf, &i2) == 0 && i == i2, "int %s", t);
                }
        }
        return 0;
}
