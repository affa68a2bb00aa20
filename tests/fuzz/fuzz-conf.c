/* The INI parser (common/conf.c) that reads controld's and nodeagent's configuration.
 * Properties: any bytes parse or fail with a "name:line: message" error, never crash;
 * on success every getter behaves (typed reads of keys that may or may not exist,
 * subsection listing, the unused-key check) and errors name the file. */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "conf.h"
#include "fuzz.h"
#include "strutil.h"

static const char *const sections[] = { "server", "store", "scheduler", "driver", "plan", "template", "region", "amqp", "egress", "a" };
static const char *const keys[] = { "listen", "path", "driver", "max_concurrent", "image", "enabled", "timeout", "size", "regions", "a", "b" };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        _cleanup_conf_free_ struct conf *c = NULL;
        struct err err = { 0 };

        int r = conf_parse_string((const char *) data, size, "fuzz.conf", &c, &err);
        if (r < 0) {
                FUZZ_ASSERT(!strncmp(err.message, "fuzz.conf:", 10), "error does not name the file: %s", err.message);
                FUZZ_ASSERT(c == NULL, "conf set on failure");
                return 0;
        }
        FUZZ_ASSERT(c != NULL, "success without a conf");
        for (size_t s = 0; s < ELEMENTSOF(sections); s++) {
                _cleanup_strv_free_ char **subs = NULL;
                int n = conf_subsections(c, sections[s], &subs);
                FUZZ_ASSERT(n >= 0 && (size_t) n == strv_length(subs), "subsections %d", n);
                const char *names[2] = { NULL, n > 0 ? subs[0] : NULL };
                for (size_t ni = 0; ni < 2; ni++) {
                        const char *name = names[ni];
                        (void) conf_has_section(c, sections[s], name);
                        for (size_t k = 0; k < ELEMENTSOF(keys); k++) {
                                const char *sv;
                                int64_t iv;
                                uint64_t uv;
                                bool bv;
                                _cleanup_strv_free_ char **lv = NULL;
                                /* Each getter marks the key used; different keys get different
                                 * getters so every getter sees values of every shape. */
                                switch ((k + s) % 6) {
                                case 0:
                                        r = conf_get_string(c, sections[s], name, keys[k], "d", 255, &sv, &err);
                                        FUZZ_ASSERT(r < 0 || (sv && strlen(sv) <= 255), "string");
                                        break;
                                case 1:
                                        r = conf_get_int(c, sections[s], name, keys[k], 1, -5, 1000, &iv, &err);
                                        FUZZ_ASSERT(r < 0 || (iv >= -5 && iv <= 1000), "int %lld", (long long) iv);
                                        break;
                                case 2:
                                        r = conf_get_bool(c, sections[s], name, keys[k], false, &bv, &err);
                                        break;
                                case 3:
                                        r = conf_get_size(c, sections[s], name, keys[k], 1, 1, UINT64_C(1) << 40, &uv, &err);
                                        FUZZ_ASSERT(r < 0 || (uv >= 1 && uv <= UINT64_C(1) << 40), "size");
                                        break;
                                case 4:
                                        r = conf_get_duration_ms(c, sections[s], name, keys[k], 1000, 1, 86400000, &uv, &err);
                                        FUZZ_ASSERT(r < 0 || (uv >= 1 && uv <= 86400000), "duration");
                                        break;
                                default:
                                        r = conf_get_list(c, sections[s], name, keys[k], 8, 64, &lv, &err);
                                        FUZZ_ASSERT(r < 0 || (size_t) r == strv_length(lv), "list %d", r);
                                        break;
                                }
                                if (r < 0)
                                        FUZZ_ASSERT(!strncmp(err.message, "fuzz.conf:", 10), "getter error does not name the file: %s", err.message);
                        }
                }
        }
        r = conf_check_unused(c, &err);
        FUZZ_ASSERT(r == 0 || (r == -EINVAL && !strncmp(err.message, "fuzz.conf:", 10)), "check_unused %d: %s", r, err.message);
        return 0;
}
