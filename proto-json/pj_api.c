/* pj_api.c — strict parsing and validation of public-API request bodies: the value checks,
 * egress, POST /sandboxes, PUT egress, snapshots and volumes. What runs something is
 * pj_api_run.c's, what carries files pj_api_files.c's (one header, pj_api.h).
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

static int get_hex24(const struct pj_json *obj, const char *key, char **ret, struct err *err) {
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
                    struct err *err) {
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

int pj_sandbox_path_check(const char *path, struct err *err, const char *field) {
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

int pj_mount_path_check(const char *p, size_t n, const char *f, struct err *err) {
        if (n > 255)
                return pj_error_set(err, f, "%s must be at most 255 characters", f);
        if (memchr(p, '\0', n) || p[0] != '/')
                return pj_error_set(err, f, "%s must be an absolute path (starting with '/')", f);
        if (n == 1)
                return pj_error_set(err, f, "%s must not be '/'", f);
        for (size_t i = 0; i < n; i++) {
                char c = p[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                      c == '.' || c == '_' || c == '-' || c == '@' || c == '+'))
                        return pj_error_set(err, f,
                                    "%s may only contain letters, digits, '/', '.', '_', '-', '@' and '+'", f);
        }
        int r = pj_sandbox_path_check(p, err, f);
        if (r < 0)
                return r;
        static const char *const reserved[] = { "/proc", "/sys", "/dev" };
        for (size_t i = 0; i < ELEMENTSOF(reserved); i++) {
                size_t l = strlen(reserved[i]);
                if (strncmp(p, reserved[i], l) == 0 && (p[l] == '\0' || p[l] == '/'))
                        return pj_error_set(err, f, "%s must not be %s or below it", f, reserved[i]);
        }
        return 0;
}

/* snapshotFrequency: the grammar is common/cron.c's, which the scheduler fires by; the
 * value is stored with single spaces between the fields. */
static int cron_check(const char *s, size_t n, char **ret_norm, struct err *err) {
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
                        struct err *err) {
        static const char *const fields[] = { "mode", "allow", "rules" };
        char path[PJ_PATH_MAX], mpath[PJ_PATH_MAX];
        _cleanup_(pj_egress_done) struct pj_egress e = { .rules_open = true };

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

        const struct pj_json *rules = pj_json_member(obj, "rules");
        if (rules) {
                pj_mkpath(path, prefix, "rules");
                if (e.mode == PJ_EGRESS_DENY_ALL)
                        return pj_error_set(err, path, "%s cannot be used when %s is deny_all: nothing leaves the sandbox",
                                            path, mpath);
                if ((r = pj_egress_rules_parse(rules, path, false, &e, err)) < 0)
                        return r;
        }

        pj_mkpath(path, prefix, "allow");
        const struct pj_json *allow = pj_json_member(obj, "allow");
        if (allow && allow->type != PJ_JSON_ARRAY)
                return pj_error_set(err, path, "%s must be an array of strings", path);
        if (allow && allow->n > PJ_EGRESS_MAX_ALLOW)
                return pj_error_set(err, path, "%s must have at most %d entries", path, PJ_EGRESS_MAX_ALLOW);
        if (e.mode != PJ_EGRESS_RESTRICTED) {
                if (allow && (update || allow->n > 0))
                        return pj_error_set(err, path, "%s must be omitted unless %s is restricted", path, mpath);
        } else if (update && (!allow || allow->n == 0) && e.n_rules == 0)
                return pj_error_set(err, path, "%s is required with at least one entry when %s is restricted (or rules naming "
                                               "the hosts allowed)", path, mpath);

        size_t idx = 0;
        for (const struct pj_json *a = allow ? allow->child : NULL; a; a = a->next, idx++) {
                char ipath[PJ_PATH_MAX], q[300];
                struct err why = { 0 };
                pj_mkindex(ipath, path, idx);
                if (a->type != PJ_JSON_STRING)
                        return pj_error_set(err, ipath, "%s must be a string", ipath);
                if (memchr(a->str, '\0', a->str_len))
                        return pj_error_set(err, ipath, "%s must not contain NUL characters", ipath);
                r = pj_egress_add_allow(&e, a->str, &why);
                if (r == -EINVAL)
                        return pj_error_set(err, ipath, "%s (\"%s\") %s", ipath,
                                    pj_sanitize(q, sizeof(q), a->str, a->str_len, 64), why.message);
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

static int parse_lifecycle(const struct pj_json *lc, struct pj_sandbox_create *c, struct err *err) {
        static const char *const fields[] = { "onTimeout", "keepMemory", "autoResume" };
        const struct pj_json *on;
        bool has_keep = false;
        int r;
        if (lc->type != PJ_JSON_OBJECT)
                return pj_error_set(err, "lifecycle", "lifecycle must be an object: {\"onTimeout\": \"pause\", \"keepMemory\": true}");
        if ((r = pj_check_fields(lc, "lifecycle", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_str(lc, "lifecycle", "onTimeout", &on, err)) < 0 ||
            (r = pj_get_bool(lc, "lifecycle", "keepMemory", &has_keep, &c->pause_keep_memory, err)) < 0 ||
            (r = pj_get_bool(lc, "lifecycle", "autoResume", NULL, &c->auto_resume, err)) < 0)
                return r;
        if (on && on->str_len == 5 && !memcmp(on->str, "pause", 5))
                c->pause_at_end = true;
        else if (on && !(on->str_len == 7 && !memcmp(on->str, "destroy", 7)))
                return pj_error_set(err, "lifecycle.onTimeout", "lifecycle.onTimeout must be \"destroy\" or \"pause\"");
        if (c->pause_keep_memory && !c->pause_at_end)
                return pj_error_set(err, "lifecycle.keepMemory",
                                    "lifecycle.keepMemory applies to a pause: set lifecycle.onTimeout to \"pause\"");
        if (c->auto_resume && !c->pause_keep_memory)
                return pj_error_set(err, "lifecycle.autoResume",
                                    "lifecycle.autoResume wakes a sandbox paused with its memory: set lifecycle.onTimeout "
                                    "to \"pause\" and lifecycle.keepMemory to true");
        return 0;
}

int pj_sandbox_create_parse(const char *body, size_t len, struct pj_sandbox_create *ret, struct err *err) {
        static const char *const fields[] = {
                "name",         "template",   "teamId",           "environmentId", "region",
                "specs",        "autoDestroy", "destroyTimeout",  "oneShot",       "blockOutbound",
                "egress",       "persistent", "persistentDiskGB", "volumeId",      "fromSnapshot",
                "snapshotMode", "snapshotFrequency", "mountPath", "lifecycle",
        };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c = {};
        const struct pj_json *v;
        int r;

        r = pj_parse_body(body, len, true, fields, ELEMENTSOF(fields), &root, err);
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

        const struct pj_json *lc = pj_json_member(root, "lifecycle");
        if (lc && (r = parse_lifecycle(lc, &c, err)) < 0)
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
                r = pj_mount_path_check(v->str, v->str_len, "mountPath", err);
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

/* ---- PUT /sandboxes/{id}/egress ---------------------------------------- */

void pj_egress_update_done(struct pj_egress_update *u) {
        if (!u)
                return;
        pj_egress_done(&u->egress);
}

int pj_egress_update_parse(const char *body, size_t len, struct pj_egress_update *ret, struct err *err) {
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

static int get_slug40(const struct pj_json *root, char **ret, struct err *err) {
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

int pj_snapshot_create_parse(const char *body, size_t len, struct pj_snapshot_create *ret, struct err *err) {
        static const char *const fields[] = { "name" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        char *name = NULL;
        int r;

        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = get_slug40(root, &name, err)) < 0)
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

int pj_volume_create_parse(const char *body, size_t len, struct pj_volume_create *ret, struct err *err) {
        static const char *const fields[] = { "name", "sizeGB", "region", "type", "teamId" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_volume_create_done) struct pj_volume_create c = {};
        int r;

        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = get_slug40(root, &c.name, err)) < 0)
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
