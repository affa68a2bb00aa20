/* pj_api.c — strict parsing and validation of public-API request bodies.
 *
 * The bytes are read by the strict reader in pj_json.c; the validators below
 * walk its tree with the field path at hand for error messages.
 *
 * Every body of the Brimble API goes through the field-path helpers of pj_fields.c, which
 * E2B's bodies (pj_e2b.c) share.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "cron.h"
#include "pj_api.h"
#include "pj_json.h"
#include "strutil.h"

#include "pj_fields.h"

/* ---- value checks ------------------------------------------------------ */

static bool all_chars_in(const char *s, size_t n, const char *set) {
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c && strchr(set, c));
                if (!ok)
                        return false;
        }
        return true;
}

static int get_hex24(const struct pj_json *obj, const char *key, char **ret, struct pj_error *err) {
        const struct pj_json *v;
        int r = pj_get_str(obj, "", key, &v, err);
        if (r <= 0)
                return r;
        if (!hexid_valid_n(v->str, v->str_len))
                return pj_error_set(err, key, "%s must be a 24-character lowercase hex id", key);
        *ret = xstrndup(v->str, v->str_len);
        return 1;
}

/* A string member that must be dflt (also when absent) or other. */
static int get_word(const struct pj_json *obj, const char *key, const char *dflt, const char *other, char **ret,
                    struct pj_error *err) {
        const struct pj_json *v;
        int r = pj_get_str(obj, "", key, &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, dflt) != 0 && strcmp(v->str, other) != 0)
                return pj_error_set(err, key, "%s must be one of %s, %s", key, dflt, other);
        *ret = xstrdup(v ? v->str : dflt);
        return 0;
}

/* Display names: 1..64 code points, no C0/DEL/C1 controls and no bidi
 * override/isolate characters (they make names render misleadingly). */
static bool display_name_ok(const struct pj_json *v) {
        size_t chars = 0;
        if (v->str_len == 0 || v->str_len > 256)
                return false;
        for (size_t i = 0; i < v->str_len;) {
                uint32_t cp;
                size_t l = utf8_decode(v->str + i, v->str_len - i, &cp);
                if (l == 0 || cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || (cp >= 0x202a && cp <= 0x202e) ||
                    (cp >= 0x2066 && cp <= 0x2069) || cp == 0x2028 || cp == 0x2029)
                        return false;
                i += l;
                chars++;
        }
        return chars <= 64;
}

int pj_sandbox_path_check(const char *path, struct pj_error *err, const char *field) {
        const char *f = field ? field : "path";
        if (!path)
                return pj_error_set(err, f, "%s is required", f);
        size_t n = strnlen(path, 4097);
        if (n > 4096)
                return pj_error_set(err, f, "%s must be at most 4096 bytes", f);
        if (path[0] != '/')
                return pj_error_set(err, f, "%s must be an absolute path (starting with '/')", f);
        if (n == 1)
                return pj_error_set(err, f, "%s must not be the root directory '/'", f);
        for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t l = utf8_decode(path + i, n - i, &cp);
                if (l == 0)
                        return pj_error_set(err, f, "%s must be valid UTF-8", f);
                if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f))
                        return pj_error_set(err, f, "%s must not contain control characters", f);
                i += l;
        }
        for (const char *c = path + 1;;) {
                const char *slash = strchr(c, '/');
                size_t l = slash ? (size_t) (slash - c) : strlen(c);
                if (l == 0)
                        return pj_error_set(err, f, "%s must not contain empty components ('//' or a trailing '/')", f);
                if ((l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
                        return pj_error_set(err, f, "%s must not contain '.' or '..' components", f);
                if (l > 255)
                        return pj_error_set(err, f, "%s has a component longer than 255 bytes", f);
                if (!slash)
                        break;
                c = slash + 1;
        }
        return 0;
}

static int mount_path_check(const char *p, size_t n, struct pj_error *err) {
        const char *f = "mountPath";
        if (n > 255)
                return pj_error_set(err, f, "mountPath must be at most 255 characters");
        if (memchr(p, '\0', n) || p[0] != '/')
                return pj_error_set(err, f, "mountPath must be an absolute path (starting with '/')");
        if (n == 1)
                return pj_error_set(err, f, "mountPath must not be '/'");
        for (size_t i = 0; i < n; i++) {
                char c = p[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                      c == '.' || c == '_' || c == '-' || c == '@' || c == '+'))
                        return pj_error_set(err, f,
                                    "mountPath may only contain letters, digits, '/', '.', '_', '-', '@' and '+'");
        }
        int r = pj_sandbox_path_check(p, err, f);
        if (r < 0)
                return r;
        static const char *const reserved[] = { "/proc", "/sys", "/dev" };
        for (size_t i = 0; i < ELEMENTSOF(reserved); i++) {
                size_t l = strlen(reserved[i]);
                if (strncmp(p, reserved[i], l) == 0 && (p[l] == '\0' || p[l] == '/'))
                        return pj_error_set(err, f, "mountPath must not be %s or below it", reserved[i]);
        }
        return 0;
}

/* snapshotFrequency: the grammar is common/cron.c's, which the scheduler fires by; the
 * value is stored with single spaces between the fields. */
static int cron_check(const char *s, size_t n, char **ret_norm, struct pj_error *err) {
        const char *f = "snapshotFrequency";
        struct cron_error ce;
        struct cron c;
        if (n > 128)
                return pj_error_set(err, f, "snapshotFrequency must be at most 128 characters");
        if (cron_parse_detail(s, &c, &ce) < 0) {
                if (ce.field < 0)
                        return pj_error_set(err, f,
                                    "snapshotFrequency must be a 5-field cron expression (minute hour day-of-month month day-of-week), e.g. \"0 */2 * * *\"");
                return pj_error_set(err, f, "snapshotFrequency is not a valid cron expression: %s field: %s",
                            cron_field_names[ce.field], ce.why);
        }
        char norm[130];
        size_t o = 0;
        for (size_t i = 0; i < n;) {
                size_t l = strcspn(s + i, " \t");
                if (l && o)
                        norm[o++] = ' ';
                memcpy(norm + o, s + i, l);
                o += l;
                i += l + (i + l < n);
        }
        norm[o] = '\0';
        *ret_norm = xstrdup(norm);
        return 0;
}

/* ---- egress ------------------------------------------------------------ */

/* prefix: "egress" inside create, "" for the update body. */
static int parse_egress(const struct pj_json *obj, const char *prefix, bool update, struct pj_egress *ret,
                        struct pj_error *err) {
        static const char *const fields[] = { "mode", "allow" };
        char path[PJ_PATH_MAX], mpath[PJ_PATH_MAX];
        _cleanup_(pj_egress_done) struct pj_egress e = {};

        if (obj->type != PJ_JSON_OBJECT)
                return pj_error_set(err, prefix, "%s must be an object with mode and allow", prefix);
        int r = pj_check_fields(obj, prefix, fields, ELEMENTSOF(fields), err);
        if (r < 0)
                return r;

        const struct pj_json *mode;
        pj_mkpath(mpath, prefix, "mode");
        r = pj_get_str(obj, prefix, "mode", &mode, err);
        if (r < 0)
                return r;
        if (r == 0)
                return pj_error_set(err, mpath, "%s is required (open, restricted or deny_all)", mpath);
        if (pj_egress_mode_from_string(mode->str, &e.mode) < 0)
                return pj_error_set(err, mpath, "%s must be one of open, restricted, deny_all", mpath);

        pj_mkpath(path, prefix, "allow");
        const struct pj_json *allow = pj_json_member(obj, "allow");
        if (allow && allow->type != PJ_JSON_ARRAY)
                return pj_error_set(err, path, "%s must be an array of strings", path);
        if (allow && allow->n > PJ_EGRESS_MAX_ALLOW)
                return pj_error_set(err, path, "%s must have at most %d entries", path, PJ_EGRESS_MAX_ALLOW);
        if (e.mode != PJ_EGRESS_RESTRICTED) {
                if (allow && (update || allow->n > 0))
                        return pj_error_set(err, path, "%s must be omitted unless %s is restricted", path, mpath);
        } else if (update && (!allow || allow->n == 0))
                return pj_error_set(err, path, "%s is required with at least one entry when %s is restricted", path, mpath);

        size_t idx = 0;
        for (const struct pj_json *a = allow ? allow->child : NULL; a; a = a->next, idx++) {
                char ipath[PJ_PATH_MAX], why[256], q[300];
                pj_mkindex(ipath, path, idx);
                if (a->type != PJ_JSON_STRING)
                        return pj_error_set(err, ipath, "%s must be a string", ipath);
                if (memchr(a->str, '\0', a->str_len))
                        return pj_error_set(err, ipath, "%s must not contain NUL characters", ipath);
                r = pj_egress_add_allow(&e, a->str, why, sizeof(why));
                if (r == -EINVAL)
                        return pj_error_set(err, ipath, "%s (\"%s\") %s", ipath,
                                    pj_sanitize(q, sizeof(q), a->str, a->str_len, 64), why);
                if (r < 0) /* cannot happen: length was checked above */
                        return pj_error_set(err, path, "%s must have at most %d entries", path, PJ_EGRESS_MAX_ALLOW);
        }
        *ret = TAKE_STRUCT(e);
        return 0;
}

/* ---- POST /sandboxes --------------------------------------------------- */

void pj_sandbox_create_done(struct pj_sandbox_create *c) {
        if (!c)
                return;
        pj_egress_done(&c->egress);
        free_many(c->name, c->template_name, c->team_id, c->environment_id, c->volume_id, c->from_snapshot,
                  c->region, c->destroy_timeout, c->mount_path, c->snapshot_mode, c->snapshot_frequency, c->metadata_json,
                  c->env_json, c->e2b_json);
        *c = (struct pj_sandbox_create) {};
}

static const struct {
        const char *name;
        int64_t seconds;
} destroy_timeouts[] = {
        { "30m", 30 * 60 }, { "1h", 3600 }, { "3h", 3 * 3600 }, { "6h", 6 * 3600 }, { "12h", 12 * 3600 }, { "18h", 18 * 3600 },
};

int pj_sandbox_create_parse(const char *body, size_t len, struct pj_sandbox_create *ret, struct pj_error *err) {
        static const char *const fields[] = {
                "name",         "template",   "teamId",           "environmentId", "region",
                "specs",        "autoDestroy", "destroyTimeout",  "oneShot",       "blockOutbound",
                "egress",       "persistent", "persistentDiskGB", "volumeId",      "fromSnapshot",
                "snapshotMode", "snapshotFrequency", "mountPath",
        };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c = {};
        const struct pj_json *v;
        int r;

        r = pj_json_parse_object(body, len, true, &root, err);
        if (r < 0)
                return r;
        r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err);
        if (r < 0)
                return r;

        r = pj_get_str(root, "", "name", &v, err);
        if (r < 0)
                return r;
        if (v) {
                if (!display_name_ok(v))
                        return pj_error_set(err, "name", "name must be 1 to 64 characters without control characters");
                c.name = xstrdup(v->str);
        }

        r = pj_get_str(root, "", "template", &v, err);
        if (r < 0)
                return r;
        if (v) {
                if (v->str_len < 1 || v->str_len > 64 || !all_chars_in(v->str, v->str_len, "._-"))
                        return pj_error_set(err, "template",
                                    "template must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-'");
                c.template_name = xstrdup(v->str);
        }

        if ((r = get_hex24(root, "teamId", &c.team_id, err)) < 0 ||
            (r = get_hex24(root, "environmentId", &c.environment_id, err)) < 0 ||
            (r = get_hex24(root, "volumeId", &c.volume_id, err)) < 0 ||
            (r = get_hex24(root, "fromSnapshot", &c.from_snapshot, err)) < 0)
                return r;

        r = pj_get_str(root, "", "region", &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, "auto") != 0) {
                if (v->str_len < 1 || v->str_len > 64 || !all_chars_in(v->str, v->str_len, "-"))
                        return pj_error_set(err, "region",
                                    "region must be \"auto\", a region id or a region name (1 to 64 characters of a-z, 0-9 and '-')");
                c.region = xstrdup(v->str);
        }

        const struct pj_json *specs = pj_json_member(root, "specs");
        if (specs) {
                static const char *const spec_fields[] = { "cpu", "memory", "disk" };
                if (specs->type != PJ_JSON_OBJECT)
                        return pj_error_set(err, "specs", "specs must be an object with cpu, memory and disk");
                if ((r = pj_check_fields(specs, "specs", spec_fields, ELEMENTSOF(spec_fields), err)) < 0 ||
                    (r = pj_get_int(specs, "specs", "cpu", 1, 2000, &c.has_cpu, &c.cpu, err)) < 0 ||
                    (r = pj_get_int(specs, "specs", "memory", 1, 2048, &c.has_memory, &c.memory, err)) < 0 ||
                    (r = pj_get_int(specs, "specs", "disk", 1, 5, &c.has_disk, &c.disk, err)) < 0)
                        return r;
        }

        if ((r = pj_get_bool(root, "", "autoDestroy", NULL, &c.auto_destroy, err)) < 0)
                return r;
        r = pj_get_str(root, "", "destroyTimeout", &v, err);
        if (r < 0)
                return r;
        if (c.auto_destroy) {
                if (!v)
                        return pj_error_set(err, "destroyTimeout", "destroyTimeout is required when autoDestroy is true");
                for (size_t i = 0; i < ELEMENTSOF(destroy_timeouts); i++)
                        if (strcmp(v->str, destroy_timeouts[i].name) == 0) {
                                c.destroy_timeout = xstrdup(v->str);
                                c.destroy_timeout_s = destroy_timeouts[i].seconds;
                        }
                if (!c.destroy_timeout)
                        return pj_error_set(err, "destroyTimeout", "destroyTimeout must be one of 30m, 1h, 3h, 6h, 12h, 18h");
        }

        if ((r = pj_get_bool(root, "", "oneShot", NULL, &c.one_shot, err)) < 0 ||
            (r = pj_get_bool(root, "", "blockOutbound", &c.block_outbound_set, &c.block_outbound, err)) < 0)
                return r;

        const struct pj_json *egress = pj_json_member(root, "egress");
        if (egress && c.block_outbound_set)
                return pj_error_set(err, "egress",
                            "Cannot set both egress and blockOutbound; use egress.mode = \"deny_all\" instead of blockOutbound");
        if (egress) {
                r = parse_egress(egress, "egress", false, &c.egress, err);
                if (r < 0)
                        return r;
                c.egress_set = true;
        } else
                c.egress.mode = c.block_outbound ? PJ_EGRESS_DENY_ALL : PJ_EGRESS_OPEN;

        if ((r = pj_get_bool(root, "", "persistent", NULL, &c.persistent, err)) < 0 ||
            (r = pj_get_int(root, "", "persistentDiskGB", 10, 50, &c.has_persistent_disk_gb, &c.persistent_disk_gb,
                         err)) < 0)
                return r;
        if (c.volume_id && c.persistent)
                return pj_error_set(err, "persistent",
                            "Cannot set both volumeId and persistent; volumeId attaches an existing volume, persistent creates a new one");
        if (c.volume_id && c.has_persistent_disk_gb)
                return pj_error_set(err, "persistentDiskGB",
                            "Cannot set both volumeId and persistentDiskGB; the size of an existing volume is fixed");
        if (c.has_persistent_disk_gb && !c.persistent)
                return pj_error_set(err, "persistentDiskGB", "persistentDiskGB requires persistent to be true");
        if (c.persistent && !c.has_persistent_disk_gb)
                return pj_error_set(err, "persistentDiskGB",
                            "persistentDiskGB is required when persistent is true (an integer between 10 and 50)");

        r = pj_get_str(root, "", "mountPath", &v, err);
        if (r < 0)
                return r;
        if (v) {
                r = mount_path_check(v->str, v->str_len, err);
                if (r < 0)
                        return r;
                c.mount_path = xstrdup(v->str);
        } else
                c.mount_path = xstrdup("/workspace");

        if ((r = get_word(root, "snapshotMode", "manual", "automatic", &c.snapshot_mode, err)) < 0)
                return r;
        bool automatic = strcmp(c.snapshot_mode, "automatic") == 0;

        r = pj_get_str(root, "", "snapshotFrequency", &v, err);
        if (r < 0)
                return r;
        if (automatic && !v)
                return pj_error_set(err, "snapshotFrequency",
                            "snapshotFrequency is required when snapshotMode is automatic (a 5-field cron expression, e.g. \"0 */2 * * *\")");
        if (!automatic && v)
                return pj_error_set(err, "snapshotFrequency",
                            "snapshotFrequency is only allowed when snapshotMode is automatic");
        if (v) {
                r = cron_check(v->str, v->str_len, &c.snapshot_frequency, err);
                if (r < 0)
                        return r;
        }

        *ret = TAKE_STRUCT(c);
        return 0;
}

/* ---- exec and code ----------------------------------------------------- */

static void env_free(char **keys, char **values, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free_many(keys[i], values[i]);
        }
        free_many(keys, values);
}

static bool env_key_ok(const struct pj_json *m) {
        if (m->key_len < 1 || m->key_len > 256)
                return false;
        for (size_t i = 0; i < m->key_len; i++) {
                char c = m->key[i];
                bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
                if (!ok)
                        return false;
        }
        return true;
}

static void run_done(struct pj_run *run) {
        free(run->cwd);
        env_free(run->env_keys, run->env_values, run->n_env);
        *run = (struct pj_run) {};
}

/* timeout_seconds, cwd, env, stream: shared by exec and code. */
static int parse_run(const struct pj_json *root, struct pj_run *ret, struct pj_error *err) {
        _cleanup_(run_done) struct pj_run run = { .timeout_s = 30 };
        const struct pj_json *v;
        int r;

        if ((r = pj_get_int(root, "", "timeout_seconds", 1, 300, NULL, &run.timeout_s, err)) < 0)
                return r;

        r = pj_get_str(root, "", "cwd", &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, "/") != 0) {
                r = pj_sandbox_path_check(v->str, err, "cwd");
                if (r < 0)
                        return r;
        }
        run.cwd = xstrdup(v ? v->str : "/");

        const struct pj_json *env = pj_json_member(root, "env");
        if (env) {
                if (env->type != PJ_JSON_OBJECT)
                        return pj_error_set(err, "env", "env must be an object mapping variable names to string values");
                if (env->n > 128)
                        return pj_error_set(err, "env", "env must have at most 128 entries");
                run.env_keys = xnew0(char *, env->n);
                run.env_values = xnew0(char *, env->n);
                for (const struct pj_json *m = env->child; m; m = m->next) {
                        char path[PJ_PATH_MAX], q[300];
                        if (!env_key_ok(m))
                                return pj_error_set(err, "env",
                                            "env key '%s' is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, at most 256 characters)",
                                            pj_sanitize(q, sizeof(q), m->key, m->key_len, 64));
                        pj_mkpath(path, "env", m->key);
                        for (size_t i = 0; i < run.n_env; i++)
                                if (strcmp(run.env_keys[i], m->key) == 0)
                                        return pj_error_set(err, path, "Duplicate field '%s'", path);
                        if (m->type != PJ_JSON_STRING)
                                return pj_error_set(err, path, "%s must be a string", path);
                        if (m->str_len > 32768)
                                return pj_error_set(err, path, "%s must be at most 32768 bytes", path);
                        if (memchr(m->str, '\0', m->str_len))
                                return pj_error_set(err, path, "%s must not contain NUL characters", path);
                        run.env_keys[run.n_env] = xstrdup(m->key);
                        run.env_values[run.n_env] = xstrdup(m->str);
                        run.n_env++;
                }
        }

        if ((r = pj_get_bool(root, "", "stream", NULL, &run.stream, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(run);
        return 0;
}

void pj_exec_done(struct pj_exec *e) {
        if (!e)
                return;
        free(e->cmd);
        free(e->stdin_data);
        run_done(&e->run);
        *e = (struct pj_exec) {};
}

/* The required, non-empty text member key (cmd, code) of at most max bytes. */
static int get_text(const struct pj_json *root, const char *key, size_t max, const char *max_note,
                    const struct pj_json **ret, struct pj_error *err) {
        int r = pj_get_str(root, "", key, ret, err);
        if (r < 0)
                return r;
        if (!*ret)
                return pj_error_set(err, key, "%s is required", key);
        if ((*ret)->str_len == 0)
                return pj_error_set(err, key, "%s must not be empty", key);
        if ((*ret)->str_len > max)
                return pj_error_set(err, key, "%s must be at most %zu bytes%s", key, max, max_note);
        return 0;
}

int pj_exec_parse(const char *body, size_t len, struct pj_exec *ret, struct pj_error *err) {
        static const char *const fields[] = { "cmd", "timeout_seconds", "cwd", "env", "stream", "stdin" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_run run;
        const struct pj_json *cmd, *in;
        int r;

        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = get_text(root, "cmd", 65536, "", &cmd, err)) < 0 || (r = pj_get_str(root, "", "stdin", &in, err)) < 0)
                return r;
        if (in && in->str_len > 1024 * 1024)
                return pj_error_set(err, "stdin", "stdin must be at most 1048576 bytes (1 MiB)");
        if ((r = parse_run(root, &run, err)) < 0)
                return r;

        *ret = (struct pj_exec) { .cmd = xstrdup(cmd->str), .run = run };
        if (in) {
                ret->stdin_data = xstrndup(in->str, in->str_len);
                ret->stdin_len = in->str_len;
        }
        return 0;
}

/* ---- processes ----------------------------------------------------------- */

void pj_process_start_done(struct pj_process_start *p) {
        if (!p)
                return;
        free_many(p->cmd, p->cwd, p->tag);
        env_free(p->env_keys, p->env_values, p->n_env);
        *p = (struct pj_process_start) {};
}

int pj_process_start_parse(const char *body, size_t len, struct pj_process_start *ret, struct pj_error *err) {
        static const char *const fields[] = { "cmd", "cwd", "env", "tag", "stdin", "pty" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(run_done) struct pj_run run = { 0 };
        const struct pj_json *cmd, *tag, *pty;
        bool in = false;
        int r, rows = 0, cols = 0;

        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = get_text(root, "cmd", 65536, "", &cmd, err)) < 0 || (r = pj_get_str(root, "", "tag", &tag, err)) < 0 ||
            (r = pj_get_bool(root, "", "stdin", NULL, &in, err)) < 0)
                return r;
        if (tag) {
                if (tag->str_len == 0 || tag->str_len > PJ_PROCESS_TAG_MAX)
                        return pj_error_set(err, "tag", "tag must be 1..%d bytes", PJ_PROCESS_TAG_MAX);
                for (size_t i = 0; i < tag->str_len; i++)
                        if ((unsigned char) tag->str[i] < 0x20 || tag->str[i] == 0x7f)
                                return pj_error_set(err, "tag", "tag must not contain control characters");
                if (!utf8_valid(tag->str, tag->str_len))
                        return pj_error_set(err, "tag", "tag must be valid UTF-8");
        }
        pty = pj_json_member(root, "pty");
        if (pty) {
                static const char *const pf[] = { "rows", "cols" };
                if (pty->type != PJ_JSON_OBJECT)
                        return pj_error_set(err, "pty", "pty must be an object {\"rows\": N, \"cols\": N}");
                if ((r = pj_check_fields(pty, "pty", pf, ELEMENTSOF(pf), err)) < 0 ||
                    (r = pj_get_int(pty, "pty", "rows", 1, 1000, NULL, &rows, err)) < 0 ||
                    (r = pj_get_int(pty, "pty", "cols", 1, 1000, NULL, &cols, err)) < 0)
                        return r;
                if (!rows)
                        rows = 24;
                if (!cols)
                        cols = 80;
        }
        if ((r = parse_run(root, &run, err)) < 0)
                return r;
        *ret = (struct pj_process_start) { .cmd = xstrdup(cmd->str), .cwd = TAKE_PTR(run.cwd),
                                           .env_keys = TAKE_PTR(run.env_keys), .env_values = TAKE_PTR(run.env_values),
                                           .n_env = run.n_env, .tag = tag ? xstrdup(tag->str) : NULL,
                                           .stdin_open = in, .rows = rows, .cols = cols };
        run.n_env = 0;
        return 0;
}

void pj_process_stdin_done(struct pj_process_stdin *p) {
        if (!p)
                return;
        free(p->data);
        *p = (struct pj_process_stdin) {};
}

int pj_process_stdin_parse(const char *body, size_t len, struct pj_process_stdin *ret, struct pj_error *err) {
        static const char *const fields[] = { "data", "close" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        const struct pj_json *d;
        bool close = false, has_close = false;
        int r;
        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 || (r = pj_get_str(root, "", "data", &d, err)) < 0 ||
            (r = pj_get_bool(root, "", "close", &has_close, &close, err)) < 0)
                return r;
        if (!d && !close)
                return pj_error_set(err, "data", "data is required (or close: true)");
        if (d && d->str_len > 1024 * 1024)
                return pj_error_set(err, "data", "data must be at most 1048576 bytes (1 MiB)");
        *ret = (struct pj_process_stdin) { .data = xstrndup(d ? d->str : "", d ? d->str_len : 0),
                                           .len = d ? d->str_len : 0, .close = close };
        return 0;
}

int pj_pause_parse(const char *body, size_t len, bool *ret_keep_memory, struct pj_error *err) {
        static const char *const fields[] = { "keepMemory" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        bool has = false, keep = false;
        int r;
        if ((r = pj_json_parse_object(body, len, true, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_bool(root, "", "keepMemory", &has, &keep, err)) < 0)
                return r;
        *ret_keep_memory = has && keep;
        return 0;
}

int pj_process_signal_parse(const char *body, size_t len, int *ret_signo, struct pj_error *err) {
        static const char *const fields[] = { "signal" };
        static const struct { const char *name; int no; } names[] = {
                { "HUP", 1 }, { "INT", 2 }, { "QUIT", 3 }, { "KILL", 9 }, { "USR1", 10 }, { "USR2", 12 },
                { "PIPE", 13 }, { "ALRM", 14 }, { "TERM", 15 }, { "CONT", 18 }, { "STOP", 19 }, { "TSTP", 20 },
                { "WINCH", 28 },
        };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r;
        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0)
                return r;
        const struct pj_json *m = pj_json_member(root, "signal");
        if (!m)
                return pj_error_set(err, "signal", "signal is required: a name such as SIGINT or SIGTERM, or a number 1..64");
        if (m->type == PJ_JSON_NUMBER) {
                int no = 0;
                if ((r = pj_get_int(root, "", "signal", 1, 64, NULL, &no, err)) < 0)
                        return r;
                *ret_signo = no;
                return 0;
        }
        if (m->type == PJ_JSON_STRING) {
                const char *s = m->str;
                if (!strncmp(s, "SIG", 3))
                        s += 3;
                for (size_t i = 0; i < ELEMENTSOF(names); i++)
                        if (!strcmp(s, names[i].name)) {
                                *ret_signo = names[i].no;
                                return 0;
                        }
        }
        char q[80];
        return pj_error_set(err, "signal",
                            "signal '%s' is not one we send: use HUP, INT, QUIT, KILL, USR1, USR2, PIPE, ALRM, TERM, CONT, STOP, "
                            "TSTP or WINCH (with or without SIG), or a number 1..64",
                            m->type == PJ_JSON_STRING ? pj_sanitize(q, sizeof(q), m->str, m->str_len, 32) : "(not a string)");
}

int pj_preview_create_parse(const char *body, size_t len, struct pj_preview_create *ret, struct pj_error *err) {
        static const char *const fields[] = { "port", "expiresIn", "public", "keepHost" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_preview_create p = { 0 };
        int r;
        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0)
                return r;
        if (!pj_json_member(root, "port"))
                return pj_error_set(err, "port", "port is required: the TCP port (1..65535) a server listens on inside the sandbox");
        if ((r = pj_get_int(root, "", "port", 1, 65535, NULL, &p.port, err)) < 0 ||
            (r = pj_get_int(root, "", "expiresIn", 1, 31536000, NULL, &p.expires_in_s, err)) < 0 ||
            (r = pj_get_bool(root, "", "public", NULL, &p.public_, err)) < 0 ||
            (r = pj_get_bool(root, "", "keepHost", NULL, &p.keep_host, err)) < 0)
                return r;
        *ret = p;
        return 0;
}

int pj_process_resize_parse(const char *body, size_t len, int *ret_rows, int *ret_cols, struct pj_error *err) {
        static const char *const fields[] = { "rows", "cols" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        bool hr = false, hc = false;
        int r;
        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_int(root, "", "rows", 1, 1000, &hr, ret_rows, err)) < 0 ||
            (r = pj_get_int(root, "", "cols", 1, 1000, &hc, ret_cols, err)) < 0)
                return r;
        if (!hr || !hc)
                return pj_error_set(err, hr ? "cols" : "rows", "%s is required (1..1000)", hr ? "cols" : "rows");
        return 0;
}

void pj_code_done(struct pj_code *c) {
        if (!c)
                return;
        free_many(c->language, c->code);
        run_done(&c->run);
        *c = (struct pj_code) {};
}

int pj_code_parse(const char *body, size_t len, struct pj_code *ret, struct pj_error *err) {
        static const char *const fields[] = { "language", "code", "timeout_seconds", "cwd", "env", "stream" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_run run;
        const struct pj_json *lang, *code;
        int r;

        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0)
                return r;
        r = pj_get_str(root, "", "language", &lang, err);
        if (r < 0)
                return r;
        if (!lang)
                return pj_error_set(err, "language", "language is required (python or node)");
        if (strcmp(lang->str, "python") != 0 && strcmp(lang->str, "node") != 0)
                return pj_error_set(err, "language", "language must be one of python, node");
        if ((r = get_text(root, "code", 1024 * 1024, " (1 MiB)", &code, err)) < 0 ||
            (r = parse_run(root, &run, err)) < 0)
                return r;

        *ret = (struct pj_code) { .language = xstrdup(lang->str), .code = xstrdup(code->str), .run = run };
        return 0;
}

/* ---- PUT /sandboxes/{id}/egress ---------------------------------------- */

void pj_egress_update_done(struct pj_egress_update *u) {
        if (!u)
                return;
        pj_egress_done(&u->egress);
}

int pj_egress_update_parse(const char *body, size_t len, struct pj_egress_update *ret, struct pj_error *err) {
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_egress e = {};
        int r;

        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = parse_egress(root, "", true, &e, err)) < 0)
                return r;
        ret->egress = e;
        return 0;
}

/* ---- snapshots and volumes --------------------------------------------- */

static int get_slug40(const struct pj_json *root, char **ret, struct pj_error *err) {
        const struct pj_json *v;
        int r = pj_get_str(root, "", "name", &v, err);
        if (r < 0)
                return r;
        if (!v)
                return pj_error_set(err, "name", "name is required");
        if (v->str_len < 1 || v->str_len > 40 || !all_chars_in(v->str, v->str_len, "-"))
                return pj_error_set(err, "name", "name must be 1 to 40 characters of lowercase letters, digits and '-'");
        *ret = xstrdup(v->str);
        return 0;
}

void pj_snapshot_create_done(struct pj_snapshot_create *s) {
        if (!s)
                return;
        free(s->name);
        s->name = NULL;
}

int pj_snapshot_create_parse(const char *body, size_t len, struct pj_snapshot_create *ret, struct pj_error *err) {
        static const char *const fields[] = { "name" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        char *name = NULL;
        int r;

        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 || (r = get_slug40(root, &name, err)) < 0)
                return r;
        ret->name = name;
        return 0;
}

void pj_volume_create_done(struct pj_volume_create *v) {
        if (!v)
                return;
        free_many(v->name, v->region, v->type, v->team_id);
        *v = (struct pj_volume_create) {};
}

int pj_volume_create_parse(const char *body, size_t len, struct pj_volume_create *ret, struct pj_error *err) {
        static const char *const fields[] = { "name", "sizeGB", "region", "type", "teamId" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_volume_create_done) struct pj_volume_create c = {};
        int r;

        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 || (r = get_slug40(root, &c.name, err)) < 0)
                return r;
        r = pj_get_int(root, "", "sizeGB", 10, 50, NULL, &c.size_gb, err);
        if (r < 0)
                return r;
        if (r == 0)
                return pj_error_set(err, "sizeGB", "sizeGB is required (an integer between 10 and 50)");
        r = get_hex24(root, "region", &c.region, err);
        if (r < 0)
                return r;
        if (r == 0)
                return pj_error_set(err, "region", "region is required (a region id from GET /sandboxes/regions)");
        if ((r = get_word(root, "type", "web", "sandbox", &c.type, err)) < 0 ||
            (r = get_hex24(root, "teamId", &c.team_id, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(c);
        return 0;
}

/* ---- POST /sandboxes/{id}/files/batch ---------------------------------- */

void pj_files_batch_done(struct pj_files_batch *b) {
        if (!b)
                return;
        for (size_t i = 0; i < b->n_files; i++) {
                free_many(b->files[i].path, b->files[i].data, b->file_errors[i]);
        }
        free_many(b->files, b->file_errors);
        *b = (struct pj_files_batch) {};
}

/* Fills f from one entry; returns a per-file error message (allocated) or NULL. */
static char *batch_entry(const struct pj_json *ent, const char *ipath, size_t max_file_bytes, struct pj_batch_file *f) {
        static const char *const fields[] = { "path", "content_base64" };
        struct pj_error e = {};
        const struct pj_json *path, *content;

        if (ent->type != PJ_JSON_OBJECT)
                return xasprintf("%s must be an object with path and content_base64", ipath);
        /* Echo the path back in results even when something else is wrong. */
        path = pj_json_member(ent, "path");
        if (path && path->type == PJ_JSON_STRING && !memchr(path->str, '\0', path->str_len))
                f->path = xstrdup(path->str);

        if (pj_check_fields(ent, ipath, fields, ELEMENTSOF(fields), &e) < 0 || pj_get_str(ent, ipath, "path", &path, &e) < 0)
                return xstrdup(e.message);
        char p[PJ_PATH_MAX];
        pj_mkpath(p, ipath, "path");
        if (!path)
                return xasprintf("%s is required", p);
        if (pj_sandbox_path_check(path->str, &e, p) < 0)
                return xstrdup(e.message);

        pj_mkpath(p, ipath, "content_base64");
        if (pj_get_str(ent, ipath, "content_base64", &content, &e) < 0)
                return xstrdup(e.message);
        if (!content)
                return xasprintf("%s is required", p);
        size_t size = base64_decoded_size(content->str, content->str_len, BASE64_PAD_OPTIONAL);
        if (size != SIZE_MAX && size > max_file_bytes)
                return xasprintf("%s is %zu bytes; the limit is %zu bytes per file", ipath, size, max_file_bytes);
        if (base64_decode_flags(content->str, content->str_len, BASE64_PAD_OPTIONAL, &f->data, &f->len) < 0)
                return xasprintf("%s is not valid base64 (standard alphabet A-Z a-z 0-9 + /, '=' padding, no line breaks)",
                                 p);
        if (f->len == 0) { /* the contract: empty files carry no buffer */
                free(f->data);
                f->data = NULL;
        }
        return NULL;
}

int pj_files_batch_parse(const char *body, size_t len, size_t max_file_bytes, size_t max_total_bytes,
                         struct pj_files_batch *ret, struct pj_error *err) {
        static const char *const fields[] = { "files" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_files_batch_done) struct pj_files_batch b = {};
        int r;

        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0)
                return r;
        const struct pj_json *files = pj_json_member(root, "files");
        if (!files)
                return pj_error_set(err, "files", "files is required (an array of {path, content_base64})");
        if (files->type != PJ_JSON_ARRAY)
                return pj_error_set(err, "files", "files must be an array of {path, content_base64}");
        if (files->n < 1 || files->n > 100)
                return pj_error_set(err, "files", "files must contain between 1 and 100 entries");

        b.files = xnew0(struct pj_batch_file, files->n);
        b.file_errors = xnew0(char *, files->n);
        b.n_files = files->n;
        size_t total = 0, i = 0;
        for (const struct pj_json *ent = files->child; ent; ent = ent->next, i++) {
                char ipath[PJ_PATH_MAX];
                struct pj_batch_file *f = &b.files[i];
                pj_mkindex(ipath, "files", i);
                b.file_errors[i] = batch_entry(ent, ipath, max_file_bytes, f);
                if (!b.file_errors[i])
                        for (size_t j = 0; j < i; j++)
                                if (!b.file_errors[j] && strcmp(b.files[j].path, f->path) == 0) {
                                        b.file_errors[i] = xasprintf("files[%zu].path duplicates files[%zu].path", i, j);
                                        break;
                                }
                if (b.file_errors[i]) {
                        free(f->data);
                        f->data = NULL;
                        f->len = 0;
                        continue;
                }
                total += f->len;
                if (total > max_total_bytes)
                        return pj_error_set(err, "files", "files add up to more than %zu bytes; the limit is %zu bytes per batch",
                                    max_total_bytes, max_total_bytes);
        }
        *ret = TAKE_STRUCT(b);
        return 0;
}

/* ---- the terminal's control frames ---- */

int pj_terminal_resize_parse(const char *msg, size_t len, uint32_t *ret_rows, uint32_t *ret_cols, struct pj_error *err) {
        static const char *const fields[] = { "type", "rows", "cols" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_error ignored = { 0 };
        if (len == 0 || msg[0] != '{' || pj_json_parse_object(msg, len, false, &root, &ignored) < 0)
                return 0;
        const struct pj_json *t = pj_json_member(root, "type");
        if (!t || t->type != PJ_JSON_STRING || t->str_len != 6 || memcmp(t->str, "resize", 6))
                return 0;
        int rows = 0, cols = 0, r;
        if ((r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_int(root, "", "rows", 1, 1000, NULL, &rows, err)) < 0 ||
            (r = pj_get_int(root, "", "cols", 1, 1000, NULL, &cols, err)) < 0)
                return r;
        if (!rows || !cols)
                return pj_error_set(err, rows ? "cols" : "rows", "%s is required: 1 to 1000", rows ? "cols" : "rows");
        *ret_rows = (uint32_t) rows;
        *ret_cols = (uint32_t) cols;
        return 1;
}

/* ---- templates users build ---- */

bool pj_template_name_ok(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > PJ_TEMPLATE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
                if (!alnum && (ch != '-' || i == 0 || i == n - 1))
                        return false;
        }
        return true;
}

bool pj_template_path_ok(const char *p, size_t n) {
        if (n == 0 || n > PJ_TEMPLATE_PATH_MAX || p[0] == '/')
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\')
                        return false;
        for (const char *c = p, *end = p + n; c < end;) {
                const char *e = memchr(c, '/', (size_t) (end - c));
                if (!e)
                        e = end;
                size_t k = (size_t) (e - c);
                if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c = e < end ? e + 1 : e;
                if (e < end && c == end)
                        return false;   /* a trailing '/': an empty last component */
        }
        return true;
}

void pj_template_build_done(struct pj_template_build *b) {
        if (!b)
                return;
        for (size_t i = 0; i < b->n_files; i++)
                free_many(b->files[i].path, b->files[i].data);
        free_many(b->name, b->dockerfile, b->files);
        *b = (struct pj_template_build) {};
}

static int template_file_parse(const struct pj_json *it, size_t i, struct pj_template_build *b, struct pj_error *err) {
        static const char *const fields[] = { "path", "content", "encoding", "mode" };
        char ipath[PJ_PATH_MAX], p[PJ_PATH_MAX];
        const struct pj_json *path = NULL, *content = NULL, *enc = NULL;
        int r, mode = -1;
        bool has_mode = false;
        pj_mkindex(ipath, "files", i);
        if (it->type != PJ_JSON_OBJECT)
                return pj_error_set(err, ipath, "%s: an object {path, content, encoding?, mode?}", ipath);
        if ((r = pj_check_fields(it, ipath, fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_str(it, ipath, "path", &path, err)) < 0 || (r = pj_get_str(it, ipath, "encoding", &enc, err)) < 0 ||
            (r = pj_get_int(it, ipath, "mode", 0, 0777, &has_mode, &mode, err)) < 0)
                return r;
        pj_mkpath(p, ipath, "path");
        if (!path || memchr(path->str, 0, path->str_len) || !pj_template_path_ok(path->str, path->str_len))
                return pj_error_set(err, p, "%s: a relative path of at most %d bytes, without '.', '..' or empty components",
                                    p, PJ_TEMPLATE_PATH_MAX);
        if (!strcmp(path->str, "Dockerfile"))
                return pj_error_set(err, p, "%s: the Dockerfile comes from 'dockerfile'", p);
        for (size_t k = 0; k < i; k++)
                if (!strcmp(b->files[k].path, path->str))
                        return pj_error_set(err, p, "%s: '%s' is given twice", p, path->str);
        /* a file's text may hold any character, NUL included (pj_get_str refuses those) */
        pj_mkpath(p, ipath, "content");
        content = pj_json_member(it, "content");
        if (!content || content->type != PJ_JSON_STRING)
                return pj_error_set(err, p, "%s: required (a string)", p);
        struct pj_template_file *f = &b->files[i];
        f->path = xstrndup(path->str, path->str_len);
        f->mode = has_mode ? mode : -1;
        b->n_files = i + 1;     /* owned by b from here, whatever follows */
        if (enc && enc->str_len == 6 && !memcmp(enc->str, "base64", 6)) {
                if (base64_decode_flags(content->str, content->str_len, BASE64_PAD_OPTIONAL, &f->data, &f->len) < 0)
                        return pj_error_set(err, p, "%s: not valid base64", p);
        } else if (!enc || (enc->str_len == 5 && !memcmp(enc->str, "utf-8", 5))) {
                f->len = content->str_len;
                f->data = xmalloc(f->len + 1);
                memcpy(f->data, content->str, f->len);
                f->data[f->len] = 0;
        } else {
                pj_mkpath(p, ipath, "encoding");
                return pj_error_set(err, p, "%s: utf-8 (default) or base64", p);
        }
        return 0;
}

int pj_template_build_parse(const char *body, size_t len, size_t max_context, bool (*taken)(const char *name, void *ud),
                            void *ud, struct pj_template_build *ret, struct pj_error *err) {
        static const char *const fields[] = { "name", "dockerfile", "files" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_template_build_done) struct pj_template_build b = {};
        const struct pj_json *name = NULL, *df = NULL;
        int r;
        if ((r = pj_json_parse_object(body, len, false, &root, err)) < 0 ||
            (r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_str(root, "", "name", &name, err)) < 0 || (r = pj_get_str(root, "", "dockerfile", &df, err)) < 0)
                return r;
        if (name && taken && taken(name->str, ud)) {
                pj_error_set(err, "name", "name: '%.64s' is a template of this server; pick another name", name->str);
                return -EEXIST;
        }
        if (!name || memchr(name->str, 0, name->str_len) || !pj_template_name_ok(name->str))
                return pj_error_set(err, "name",
                                    "name: 1 to %d characters of a-z, 0-9 and '-', starting and ending with a letter or digit",
                                    PJ_TEMPLATE_NAME_MAX);
        if (!df || df->str_len == 0)
                return pj_error_set(err, "dockerfile", "dockerfile: required, the Dockerfile's text");
        if (memchr(df->str, 0, df->str_len))
                return pj_error_set(err, "dockerfile", "dockerfile: text without NUL bytes");
        size_t total = df->str_len;
        if (total > max_context) {
                pj_error_set(err, "dockerfile", "dockerfile: over the build context limit of %zu bytes", max_context);
                return -EFBIG;
        }
        b.name = xstrndup(name->str, name->str_len);
        b.dockerfile = xstrndup(df->str, df->str_len);
        b.dockerfile_len = df->str_len;
        const struct pj_json *files = pj_json_member(root, "files");
        if (files) {
                if (files->type != PJ_JSON_ARRAY)
                        return pj_error_set(err, "files", "files: an array of {path, content, encoding?, mode?}");
                if (files->n > PJ_TEMPLATE_MAX_FILES)
                        return pj_error_set(err, "files", "files: at most %d files", PJ_TEMPLATE_MAX_FILES);
                b.files = xnew0(struct pj_template_file, files->n + 1);
                size_t i = 0;
                for (const struct pj_json *it = files->child; it; it = it->next, i++) {
                        if ((r = template_file_parse(it, i, &b, err)) < 0)
                                return r;
                        total += b.files[i].len;
                        if (total > max_context) {
                                pj_error_set(err, "files", "files: the build context is over its limit of %zu bytes", max_context);
                                return -EFBIG;
                        }
                }
        }
        *ret = b;
        b = (struct pj_template_build) {};
        return 0;
}

/* ---- docker save's manifest, from a tenant's build sandbox ---- */

bool pj_saved_path_ok(const char *p, size_t n) {
        if (n == 0 || n > 200 || p[0] == '/' || memmem(p, n, "..", 2))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9') ||
                      p[i] == '/' || p[i] == '.' || p[i] == '_' || p[i] == '-'))
                        return false;
        return true;
}

void pj_saved_manifest_done(struct pj_saved_manifest *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n_layers; i++)
                free(m->layers[i]);
        free_many(m->config, m->layers);
        *m = (struct pj_saved_manifest) {};
}

int pj_saved_manifest_parse(const char *text, size_t len, struct pj_saved_manifest *ret, struct pj_error *err) {
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_saved_manifest_done) struct pj_saved_manifest m = {};
        int r = pj_json_parse(text, len, PJ_JSON_MAX_NODES, &root, err);
        if (r < 0)
                return r;
        if (root->type != PJ_JSON_ARRAY || root->n != 1 || root->child->type != PJ_JSON_OBJECT)
                return pj_error_set(err, "", "manifest.json: one image (an array of one object)");
        const struct pj_json *one = root->child, *config = NULL, *layers = pj_json_member(one, "Layers");
        if ((r = pj_get_str(one, "[0]", "Config", &config, err)) < 0)
                return r;
        if (!config || !pj_saved_path_ok(config->str, config->str_len))
                return pj_error_set(err, "[0].Config", "manifest.json: [0].Config is not a path we read");
        if (!layers || layers->type != PJ_JSON_ARRAY || layers->n > PJ_SAVED_MAX_LAYERS)
                return pj_error_set(err, "[0].Layers", "manifest.json: [0].Layers: an array of at most %d paths",
                                    PJ_SAVED_MAX_LAYERS);
        m.config = xstrndup(config->str, config->str_len);
        m.layers = xnew0(char *, layers->n + 1);
        size_t i = 0;
        for (const struct pj_json *l = layers->child; l; l = l->next, i++) {
                char p[PJ_PATH_MAX];
                pj_mkindex(p, "[0].Layers", i);
                if (l->type != PJ_JSON_STRING || !pj_saved_path_ok(l->str, l->str_len))
                        return pj_error_set(err, p, "manifest.json: %s is not a path we read", p);
                m.layers[m.n_layers++] = xstrndup(l->str, l->str_len);
        }
        *ret = m;
        m = (struct pj_saved_manifest) {};
        return 0;
}
