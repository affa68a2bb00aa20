/* Every public-API request validator in proto-json/pj_api.h and pj_e2b.h (E2B's bodies and
 * envd's Connect messages; pj_secret.h, /secrets), and through them
 * proto-json's own strict JSON reader (static in pj_api.c; every validator starts with
 * it). Each input goes through all of them, so an input that is good for one validator
 * is explored for all. Properties, from the contract in pj_api.h:
 *   - failure returns -EINVAL, leaves *ret untouched, names a field in a non-empty message;
 *   - success gives values inside their documented ranges, and *_done() is idempotent;
 *   - pj_sandbox_path_check never accepts "//", "." or ".." components, a relative path
 *     or a trailing '/'. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "pj_api.h"
#include "pj_e2b.h"
#include "pj_secret.h"

#define MAX_FILE 4096
#define MAX_TOTAL 65536

static void check_error(int r, const struct err *e, const void *ret, const void *pristine, size_t n, const char *what) {
        FUZZ_ASSERT(r == -EINVAL, "%s: unexpected return %d", what, r);
        FUZZ_ASSERT(memchr(e->message, 0, sizeof(e->message)) && e->message[0], "%s: empty message", what);
        FUZZ_ASSERT(memchr(e->field, 0, sizeof(e->field)), "%s: field not terminated", what);
        FUZZ_ASSERT(!memcmp(ret, pristine, n), "%s: *ret touched on failure", what);
}

static void check_path(const char *p) {
        size_t n = strlen(p);
        FUZZ_ASSERT(p[0] == '/', "relative path accepted: %s", p);
        FUZZ_ASSERT(n <= 4096, "path of %zu bytes accepted", n);
        FUZZ_ASSERT(!strstr(p, "//") && !strstr(p, "/./") && !strstr(p, "/../"), "bad component accepted: %s", p);
        FUZZ_ASSERT(n < 2 || (strcmp(p + n - 2, "/.") && (n < 3 || strcmp(p + n - 3, "/..")) && p[n - 1] != '/'),
                    "bad ending accepted: %s", p);
        for (size_t i = 0; i < n; i++)
                FUZZ_ASSERT((unsigned char) p[i] >= 0x20 && p[i] != 0x7f, "control byte accepted: %s", p);
}

static void check_egress(const struct pj_egress *e) {
        FUZZ_ASSERT(e->n_allow <= PJ_EGRESS_MAX_ALLOW, "%zu allow entries", e->n_allow);
        FUZZ_ASSERT(e->n_allow == 0 || e->mode == PJ_EGRESS_RESTRICTED, "allow entries with mode %d", e->mode);
        for (size_t i = 0; i < e->n_allow; i++) {
                char norm[PJ_ALLOW_NORM_MAX];
                FUZZ_ASSERT(pj_allow_entry_parse(e->allow[i], NULL, norm, sizeof(norm), NULL) == 0 &&
                                    !strcmp(norm, e->allow[i]),
                            "stored entry not normalised: %s", e->allow[i]);
                for (size_t k = 0; k < i; k++)
                        FUZZ_ASSERT(strcmp(e->allow[k], e->allow[i]), "duplicate entry %s", e->allow[i]);
        }
}

static void check_env(char **keys, char **values, size_t n) {
        FUZZ_ASSERT(n <= 128, "%zu env entries", n);
        for (size_t i = 0; i < n; i++) {
                FUZZ_ASSERT(keys[i] && values[i], "env entry %zu missing", i);
                FUZZ_ASSERT(strlen(values[i]) <= 32768, "env value too long");
                for (size_t k = 0; k < i; k++)
                        FUZZ_ASSERT(strcmp(keys[k], keys[i]), "duplicate env key %s", keys[i]);
        }
}

#define RUN(type, parse, done, check)                                                   \
        do {                                                                            \
                struct type v, pristine;                                                \
                struct err e = { 0 }; /* not a previous RUN's message */           \
                memset(&v, 0xa5, sizeof(v));                                            \
                memset(&pristine, 0xa5, sizeof(pristine));                              \
                int r = parse;                                                          \
                if (r < 0)                                                              \
                        check_error(r, &e, &v, &pristine, sizeof(v), #parse);           \
                else {                                                                  \
                        FUZZ_ASSERT(r == 0, "%s returned %d", #parse, r);               \
                        check;                                                          \
                        done(&v);                                                       \
                        done(&v);                                                       \
                }                                                                       \
        } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *b = (const char *) data;

        RUN(pj_sandbox_create, pj_sandbox_create_parse(b, size, &v, &e), pj_sandbox_create_done, {
                FUZZ_ASSERT(v.mount_path && v.snapshot_mode, "defaults not set");
                check_path(v.mount_path);
                FUZZ_ASSERT(!v.has_cpu || (v.cpu >= 1 && v.cpu <= 2000), "cpu %d", v.cpu);
                FUZZ_ASSERT(!v.has_memory || (v.memory >= 1 && v.memory <= 2048), "memory %d", v.memory);
                FUZZ_ASSERT(!v.has_disk || (v.disk >= 1 && v.disk <= 5), "disk %d", v.disk);
                FUZZ_ASSERT(!v.auto_destroy || v.destroy_timeout_s > 0, "autoDestroy without a timeout");
                FUZZ_ASSERT(!strcmp(v.snapshot_mode, "manual") == !v.snapshot_frequency, "frequency and mode disagree");
                FUZZ_ASSERT(!v.name || (v.name[0] && strlen(v.name) <= 256), "name");
                check_egress(&v.egress);
        });
        RUN(pj_exec, pj_exec_parse(b, size, &v, &e), pj_exec_done, {
                FUZZ_ASSERT(v.cmd && v.cmd[0] && strlen(v.cmd) <= 65536, "cmd");
                FUZZ_ASSERT(v.run.timeout_s >= 1 && v.run.timeout_s <= 300, "timeout %d", v.run.timeout_s);
                FUZZ_ASSERT(v.run.cwd && v.run.cwd[0] == '/', "cwd");
                if (strcmp(v.run.cwd, "/"))
                        check_path(v.run.cwd);
                check_env(v.run.env_keys, v.run.env_values, v.run.n_env);
        });
        RUN(pj_code, pj_code_parse(b, size, &v, &e), pj_code_done, {
                FUZZ_ASSERT(v.language && (!strcmp(v.language, "python") || !strcmp(v.language, "node")), "language");
                FUZZ_ASSERT(v.code && v.code[0] && strlen(v.code) <= 1 << 20, "code");
                FUZZ_ASSERT(v.run.timeout_s >= 1 && v.run.timeout_s <= 300, "timeout %d", v.run.timeout_s);
                FUZZ_ASSERT(v.run.cwd && v.run.cwd[0] == '/', "cwd");
                check_env(v.run.env_keys, v.run.env_values, v.run.n_env);
        });
        RUN(pj_egress_update, pj_egress_update_parse(b, size, &v, &e), pj_egress_update_done, {
                check_egress(&v.egress);
                FUZZ_ASSERT(v.egress.mode != PJ_EGRESS_RESTRICTED || v.egress.n_allow > 0, "restricted without entries");
        });
        RUN(pj_snapshot_create, pj_snapshot_create_parse(b, size, &v, &e), pj_snapshot_create_done, {
                FUZZ_ASSERT(v.name && strlen(v.name) >= 1 && strlen(v.name) <= 40 &&
                                    strspn(v.name, "abcdefghijklmnopqrstuvwxyz0123456789-") == strlen(v.name),
                            "snapshot name");
        });
        RUN(pj_volume_create, pj_volume_create_parse(b, size, &v, &e), pj_volume_create_done, {
                FUZZ_ASSERT(v.name && v.region && v.type, "volume fields");
                FUZZ_ASSERT(v.size_gb >= 10 && v.size_gb <= 50, "sizeGB %d", v.size_gb);
                FUZZ_ASSERT(strlen(v.region) == 24 && strspn(v.region, "0123456789abcdef") == 24, "region");
                FUZZ_ASSERT(!strcmp(v.type, "web") || !strcmp(v.type, "sandbox"), "type");
        });
        RUN(pj_files_batch, pj_files_batch_parse(b, size, MAX_FILE, MAX_TOTAL, &v, &e), pj_files_batch_done, {
                FUZZ_ASSERT(v.n_files >= 1 && v.n_files <= 100, "%zu files", v.n_files);
                size_t total = 0;
                for (size_t i = 0; i < v.n_files; i++) {
                        if (v.file_errors[i]) {
                                FUZZ_ASSERT(v.file_errors[i][0], "empty per-file error");
                                continue;
                        }
                        FUZZ_ASSERT(v.files[i].path, "good entry without a path");
                        check_path(v.files[i].path);
                        FUZZ_ASSERT(v.files[i].len <= MAX_FILE, "file of %zu bytes", v.files[i].len);
                        FUZZ_ASSERT(v.files[i].len == 0 || v.files[i].data, "data missing");
                        total += v.files[i].len;
                        for (size_t k = 0; k < i; k++)
                                FUZZ_ASSERT(v.file_errors[k] || strcmp(v.files[k].path, v.files[i].path),
                                            "two good entries for %s", v.files[i].path);
                }
                FUZZ_ASSERT(total <= MAX_TOTAL, "total %zu", total);
        });

        /* E2B's bodies and envd's messages */
        RUN(pj_e2b_create, pj_e2b_create_parse(b, size, &v, &e), pj_e2b_create_done, {
                FUZZ_ASSERT(v.template_id && v.template_id[0] && strlen(v.template_id) <= 128, "templateID");
                FUZZ_ASSERT(v.timeout_s >= 0 && v.timeout_s <= PJ_E2B_MAX_TIMEOUT_S, "timeout %lld", (long long) v.timeout_s);
                check_egress(&v.egress);
        });
        RUN(pj_envd_start, pj_envd_start_parse(b, size, &v, &e), pj_envd_start_done, {
                FUZZ_ASSERT(v.cmd && v.cmd[0], "cmd");
                FUZZ_ASSERT(v.args && !v.args[v.n_args] && v.n_args < PJ_E2B_MAX_ARGS, "%zu args", v.n_args);
                FUZZ_ASSERT(!v.pty || (v.rows >= 1 && v.rows <= 65535 && v.cols >= 1 && v.cols <= 65535), "pty size");
                check_env(v.env_keys, v.env_values, v.n_env);
        });
        RUN(pj_envd_input, pj_envd_input_parse(b, size, &v, &e), pj_envd_input_done, {
                FUZZ_ASSERT(v.len <= PJ_E2B_MAX_INPUT, "input of %zu bytes", v.len);
                FUZZ_ASSERT(!v.process.pid != !v.process.tag, "selector");
        });
        for (int k = PJ_ENVD_FS_PATH; k <= PJ_ENVD_FS_WATCH; k++)
                RUN(pj_envd_fs, pj_envd_fs_parse(b, size, (enum pj_envd_fs_kind) k, &v, &e), pj_envd_fs_done, {
                        FUZZ_ASSERT(v.path && v.path[0] && strlen(v.path) <= PJ_E2B_MAX_PATH, "path");
                        FUZZ_ASSERT((k == PJ_ENVD_FS_MOVE) == (v.to != NULL), "destination");
                        FUZZ_ASSERT(v.depth >= 1 && v.depth <= 64, "depth %u", v.depth);
                });

        for (int with_name = 0; with_name <= 1; with_name++)
                RUN(pj_secret_put, pj_secret_parse(b, size, with_name, 64, &v, &e), pj_secret_put_done, {
                        FUZZ_ASSERT(!with_name == !v.name && (!v.name || pj_secret_name_ok(v.name)), "name");
                        FUZZ_ASSERT(v.value && v.value_len >= 1 && v.value_len <= 64 && strlen(v.value) == v.value_len, "value");
                });

        /* The path check on the input as a C string. */
        if (size <= 8192 && !memchr(data, 0, size)) {
                _cleanup_free_ char *p = strndup(b, size);
                struct err e;
                if (pj_sandbox_path_check(p, &e, "path") == 0)
                        check_path(p);
                else
                        FUZZ_ASSERT(e.message[0], "path error without a message");
        }
        return 0;
}
