/* pj_e2b.c — E2B's request bodies and envd's Connect messages (pj_e2b.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "json.h"
#include "pj_e2b.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "strutil.h"

/* ---- shared checks ---- */

static bool env_name_ok(const char *s, size_t n) {
        if (n == 0 || n > 256 || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '_'))
                        return false;
        return true;
}

/* An object of strings: at most max entries; keys checked by env rules (env) or as 1..max_key
 * bytes without NUL; values up to max_value bytes without NUL. Into canonical JSON text
 * (*ret_json, NULL when obj is absent) and, when asked, parallel arrays. */
static int string_map(const struct pj_json *obj, const char *field, bool env, size_t max, size_t max_key, size_t max_value,
                      char **ret_json, char ***ret_keys, char ***ret_values, size_t *ret_n, struct pj_error *err) {
        char path[PJ_PATH_MAX], q[300];
        if (obj->type != PJ_JSON_OBJECT)
                return pj_error_set(err, field, "%s must be an object of strings", field);
        if (obj->n > max)
                return pj_error_set(err, field, "%s must have at most %zu entries", field, max);
        _cleanup_(cJSON_Deletep) cJSON *out = cJSON_CreateObject();
        for (const struct pj_json *m = obj->child; m; m = m->next) {
                pj_sanitize(q, sizeof(q), m->key, m->key_len, 64);
                pj_mkpath(path, field, q);
                if (memchr(m->key, 0, m->key_len) || m->key_len == 0 || m->key_len > max_key ||
                    (env && !env_name_ok(m->key, m->key_len)))
                        return pj_error_set(err, path,
                                            env ? "%s: a variable name is 1..256 characters of [A-Za-z0-9_], not starting "
                                                  "with a digit"
                                                : "%s: a key is 1..%zu bytes",
                                            path, max_key);
                if (m->type != PJ_JSON_STRING)
                        return pj_error_set(err, path, "%s must be a string", path);
                if (memchr(m->str, 0, m->str_len) || m->str_len > max_value)
                        return pj_error_set(err, path, "%s must be at most %zu bytes, without NUL", path, max_value);
                if (cJSON_GetObjectItemCaseSensitive(out, m->key))
                        return pj_error_set(err, path, "Duplicate key %s", path);
                cJSON_AddItemToObject(out, m->key, cJSON_CreateString(m->str));
        }
        if (ret_keys) {
                size_t n = obj->n, i = 0;
                char **k = xnew0(char *, n + 1), **v = xnew0(char *, n + 1);
                for (const struct pj_json *m = obj->child; m; m = m->next, i++) {
                        k[i] = xstrndup(m->key, m->key_len);
                        v[i] = xstrndup(m->str, m->str_len);
                }
                *ret_keys = k;
                *ret_values = v;
                *ret_n = n;
        }
        if (ret_json)
                *ret_json = json_print(out);
        return 0;
}

static int int_member(const struct pj_json *obj, const char *key, int64_t min, int64_t max, bool *ret_has, int64_t *ret,
                      struct pj_error *err) {
        const struct pj_json *m = pj_json_member(obj, key);
        int64_t x;
        if (!m)
                return 0;
        if (m->type != PJ_JSON_NUMBER || !pj_number_to_int(m, &x) || x < min || x > max)
                return pj_error_set(err, key, "%s must be an integer from %lld to %lld", key, (long long) min, (long long) max);
        if (ret_has)
                *ret_has = true;
        *ret = x;
        return 1;
}

/* Refuses a member that is present and not one of the values Paddock does by default. */
static int refuse_present(const struct pj_json *obj, const char *key, const char *why, struct pj_error *err) {
        const struct pj_json *m = pj_json_member(obj, key);
        if (!m)
                return 0;
        return pj_error_set(err, key, "%s is not supported on this server: %s", key, why);
}

/* ---- POST /sandboxes ---- */

void pj_e2b_create_done(struct pj_e2b_create *c) {
        if (!c)
                return;
        free_many(c->template_id, c->metadata_json, c->env_json);
        pj_egress_done(&c->egress);
        *c = (struct pj_e2b_create) { 0 };
}

static bool all_traffic(const char *s, size_t n) {
        return (n == 9 && !memcmp(s, "0.0.0.0/0", 9));
}

/* The policy of a create's network or an updateNetwork: E2B's allowOut entries win over its
 * denyOut; without a deny everything is allowed anyway (the entries are dropped). */
static void egress_settle(struct pj_egress *e, bool deny_all) {
        e->mode = deny_all ? (e->n_allow ? PJ_EGRESS_RESTRICTED : PJ_EGRESS_DENY_ALL) : PJ_EGRESS_OPEN;
        if (!deny_all && e->n_allow) {
                for (size_t i = 0; i < e->n_allow; i++)
                        free(e->allow[i]);
                e->n_allow = 0;
        }
}

/* update: the body of updateNetwork (its own fields were checked by the caller). */
static int parse_network(const struct pj_json *net, struct pj_e2b_create *c, bool *ret_deny_all, bool update,
                         struct pj_error *err) {
        static const char *const fields[] = { "allowOut", "denyOut", "allowPublicTraffic", "maskRequestHost", "egressProxy",
                                              "rules", "httpsPorts" };
        char path[PJ_PATH_MAX], q[300], why[256];
        if (net->type != PJ_JSON_OBJECT)
                return pj_error_set(err, "network", "network must be an object");
        int r = update ? 0 : pj_check_fields(net, "network", fields, ELEMENTSOF(fields), err);
        if (r < 0)
                return r;
        if (pj_json_member(net, "maskRequestHost"))
                return pj_error_set(err, "network.maskRequestHost",
                                    "network.maskRequestHost is not supported on this server: requests reach the sandbox "
                                    "with Host localhost:<port>");
        if (pj_json_member(net, "httpsPorts"))
                return pj_error_set(err, "network.httpsPorts",
                                    "network.httpsPorts is not supported on this server: a sandbox's ports are reached "
                                    "over the listener's own TLS (or plain HTTP), as the sandbox serves them");
        if (pj_json_member(net, "egressProxy"))
                return pj_error_set(err, "network.egressProxy", "network.egressProxy is not supported on this server");
        const struct pj_json *rules = pj_json_member(net, "rules");
        if (rules && !(rules->type == PJ_JSON_OBJECT && rules->n == 0))
                return pj_error_set(err, "network.rules",
                                    "network.rules (header transforms) are not supported on this server");
        bool has_pub = false, pub = true;
        if ((r = pj_get_bool(net, "network", "allowPublicTraffic", &has_pub, &pub, err)) < 0)
                return r;
        c->public_traffic = pub;
        const struct pj_json *deny = pj_json_member(net, "denyOut");
        bool deny_all = false;
        if (deny) {
                if (deny->type != PJ_JSON_ARRAY)
                        return pj_error_set(err, "network.denyOut", "network.denyOut must be an array of strings");
                size_t i = 0;
                for (const struct pj_json *d = deny->child; d; d = d->next, i++) {
                        pj_mkindex(path, "network.denyOut", i);
                        if (d->type != PJ_JSON_STRING)
                                return pj_error_set(err, path, "%s must be a string", path);
                        if (!all_traffic(d->str, d->str_len))
                                return pj_error_set(err, path,
                                                    "%s (\"%s\"): only 0.0.0.0/0 (all traffic) can be denied on this server; "
                                                    "deny everything and list what is allowed in network.allowOut",
                                                    path, pj_sanitize(q, sizeof(q), d->str, d->str_len, 64));
                        deny_all = true;
                }
        }
        const struct pj_json *allow = pj_json_member(net, "allowOut");
        if (allow) {
                if (allow->type != PJ_JSON_ARRAY)
                        return pj_error_set(err, "network.allowOut", "network.allowOut must be an array of strings");
                if (allow->n > PJ_EGRESS_MAX_ALLOW)
                        return pj_error_set(err, "network.allowOut", "network.allowOut must have at most %d entries",
                                            PJ_EGRESS_MAX_ALLOW);
                size_t i = 0;
                for (const struct pj_json *a = allow->child; a; a = a->next, i++) {
                        pj_mkindex(path, "network.allowOut", i);
                        if (a->type != PJ_JSON_STRING || memchr(a->str, 0, a->str_len))
                                return pj_error_set(err, path, "%s must be a string", path);
                        const char *s = a->str;
                        if (s[0] == '*' && s[1] == '.')
                                s += 2;   /* "*.example.com": our hostname entries cover subdomains */
                        r = pj_egress_add_allow(&c->egress, s, why, sizeof(why));
                        if (r == -EINVAL)
                                return pj_error_set(err, path, "%s (\"%s\") %s", path,
                                                    pj_sanitize(q, sizeof(q), a->str, a->str_len, 64), why);
                        if (r < 0)
                                return pj_error_set(err, "network.allowOut", "network.allowOut must have at most %d entries",
                                                    PJ_EGRESS_MAX_ALLOW);
                }
        }
        *ret_deny_all = deny_all;
        return 0;
}

int pj_e2b_create_parse(const char *body, size_t len, struct pj_e2b_create *ret, struct pj_error *err) {
        static const char *const fields[] = { "templateID", "timeout", "autoPause", "autoPauseMemory", "autoResume", "secure",
                                              "allow_internet_access", "network", "metadata", "envVars", "mcp", "iam",
                                              "volumeMounts" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { .timeout_s = PJ_E2B_DEFAULT_TIMEOUT_S, .public_traffic = true };
        int r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err);
        if (r < 0)
                return r;
        const struct pj_json *t;
        if ((r = pj_get_str(root, "", "templateID", &t, err)) < 0)
                return r;
        if (!t)
                return pj_error_set(err, "templateID", "templateID is required (for example \"base\")");
        if (t->str_len == 0 || t->str_len > 128 ||
            strspn(t->str, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/:-") != t->str_len)
                return pj_error_set(err, "templateID", "templateID must be 1..128 characters of [A-Za-z0-9._/:-]");
        c.template_id = xstrndup(t->str, t->str_len);
        if ((r = int_member(root, "timeout", 0, PJ_E2B_MAX_TIMEOUT_S, &c.timeout_set, &c.timeout_s, err)) < 0)
                return r;
        bool v = false, has = false;
        if ((r = pj_get_bool(root, "", "autoPause", &has, &v, err)) < 0)
                return r;
        if (v)
                return pj_error_set(err, "autoPause",
                                    "autoPause is not supported on this server: a sandbox is destroyed at its timeout");
        if ((r = refuse_present(root, "autoPauseMemory", "there is no auto-pause", err)) < 0)
                return r;
        const struct pj_json *ar = pj_json_member(root, "autoResume");
        if (ar) {
                const struct pj_json *en = ar->type == PJ_JSON_OBJECT ? pj_json_member(ar, "enabled") : NULL;
                if (ar->type != PJ_JSON_OBJECT || ar->n > 1 || (ar->n == 1 && !en) ||
                    (en && en->type != PJ_JSON_FALSE))
                        return pj_error_set(err, "autoResume", "autoResume is not supported on this server: resume a paused "
                                                               "sandbox with connect");
        }
        has = false;
        v = true;
        if ((r = pj_get_bool(root, "", "secure", &has, &v, err)) < 0)
                return r;
        if (has && !v)
                return pj_error_set(err, "secure",
                                    "secure: false is not supported on this server: every sandbox's envd needs its access "
                                    "token");
        bool inet = true;
        if ((r = pj_get_bool(root, "", "allow_internet_access", &c.allow_internet_set, &inet, err)) < 0)
                return r;
        c.allow_internet = inet;
        const struct pj_json *mcp = pj_json_member(root, "mcp");
        if (mcp)
                return pj_error_set(err, "mcp", "mcp (the MCP gateway) is not supported on this server");
        const struct pj_json *iam = pj_json_member(root, "iam");
        if (iam && !(iam->type == PJ_JSON_OBJECT && (iam->n == 0 || (iam->n == 1 && pj_json_member(iam, "tokens") &&
                                                                          pj_json_member(iam, "tokens")->n == 0))))
                return pj_error_set(err, "iam", "iam (workload identity tokens) is not supported on this server");
        const struct pj_json *vm = pj_json_member(root, "volumeMounts");
        if (vm && !(vm->type == PJ_JSON_ARRAY && vm->n == 0))
                return pj_error_set(err, "volumeMounts", "volumeMounts is not supported through this API: use Paddock's "
                                                         "volumes (the Brimble API)");
        bool deny_all = false;
        const struct pj_json *net = pj_json_member(root, "network");
        if (net && (r = parse_network(net, &c, &deny_all, false, err)) < 0)
                return r;
        if (!inet)
                deny_all = true;
        egress_settle(&c.egress, deny_all);
        const struct pj_json *md = pj_json_member(root, "metadata");
        if (md && (r = string_map(md, "metadata", false, PJ_E2B_MAX_METADATA, PJ_E2B_MAX_METADATA_KEY,
                                  PJ_E2B_MAX_METADATA_VALUE, &c.metadata_json, NULL, NULL, NULL, err)) < 0)
                return r;
        const struct pj_json *ev = pj_json_member(root, "envVars");
        if (ev && (r = string_map(ev, "envVars", true, PJ_E2B_MAX_ENV, 256, 32768, &c.env_json, NULL, NULL, NULL, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(c);
        return 0;
}

/* {"timeout": N} and, for connect, "memory" (only false: a paused sandbox resumes from its
 * filesystem). */
static int timeout_body(const char *body, size_t len, bool connect, bool v2, int64_t *ret_timeout_s, struct pj_error *err) {
        static const char *const fields[] = { "timeout", "memory" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = pj_parse_body(body, len, v2, fields, connect ? 2 : 1, &root, err);
        if (r < 0)
                return r;
        bool has = false, mem = true;
        if (connect && (r = pj_get_bool(root, "", "memory", &has, &mem, err)) < 0)
                return r;
        if (has && mem)
                return pj_error_set(err, "memory",
                                    "memory: true is not supported on this server: a paused sandbox resumes from its "
                                    "filesystem (its processes start afresh)");
        has = false;
        if ((r = int_member(root, "timeout", 0, PJ_E2B_MAX_TIMEOUT_S, &has, ret_timeout_s, err)) < 0)
                return r;
        if (!has && v2)
                *ret_timeout_s = PJ_E2B_V2_DEFAULT_TIMEOUT_S;
        else if (!has)
                return pj_error_set(err, "timeout", "timeout is required: seconds from now");
        return 0;
}

int pj_e2b_timeout_parse(const char *body, size_t len, int64_t *ret_timeout_s, struct pj_error *err) {
        return timeout_body(body, len, false, false, ret_timeout_s, err);
}

int pj_e2b_connect_parse(const char *body, size_t len, bool v2, int64_t *ret_timeout_s, struct pj_error *err) {
        return timeout_body(body, len, true, v2, ret_timeout_s, err);
}

int pj_e2b_network_update_parse(const char *body, size_t len, struct pj_egress *ret, struct pj_error *err) {
        static const char *const fields[] = { "allowOut", "denyOut", "egressProxy", "rules", "allow_internet_access" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { 0 };
        int r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err);
        if (r < 0)
                return r;
        bool deny_all = false, has = false, inet = true;
        if ((r = parse_network(root, &c, &deny_all, true, err)) < 0)
                return r;
        if ((r = pj_get_bool(root, "", "allow_internet_access", &has, &inet, err)) < 0)
                return r;
        if (has && !inet)
                deny_all = true;
        egress_settle(&c.egress, deny_all);
        *ret = c.egress;
        c.egress = (struct pj_egress) { 0 };
        return 0;
}

int pj_e2b_snapshot_parse(const char *body, size_t len, char **ret_name, struct pj_error *err) {
        static const char *const fields[] = { "name" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = pj_parse_body(body, len, true, fields, ELEMENTSOF(fields), &root, err);
        if (r < 0)
                return r;
        const struct pj_json *n;
        if ((r = pj_get_str(root, "", "name", &n, err)) < 0)
                return r;
        if (!n) {
                *ret_name = xstrdup("snapshot");
                return 0;
        }
        if (n->str_len < 1 || n->str_len > 40 || strspn(n->str, "abcdefghijklmnopqrstuvwxyz0123456789._-") != n->str_len)
                return pj_error_set(err, "name", "name must be 1 to 40 characters of a-z, 0-9, '.', '_' and '-'");
        *ret_name = xstrndup(n->str, n->str_len);
        return 0;
}

int pj_e2b_pause_parse(const char *body, size_t len, bool *ret_memory, struct pj_error *err) {
        static const char *const fields[] = { "memory" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = pj_parse_body(body, len, true, fields, ELEMENTSOF(fields), &root, err);
        if (r < 0)
                return r;
        bool has = false, mem = true;
        if ((r = pj_get_bool(root, "", "memory", &has, &mem, err)) < 0)
                return r;
        *ret_memory = mem;
        return 0;
}

/* ---- list query ---- */

static int hexv(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decodes s[0..n) ('+' is a space); NULL when it holds a bad escape or a NUL. */
static char *pct_decode(const char *s, size_t n) {
        char *o = xmalloc(n + 1), *w = o;
        for (size_t i = 0; i < n; i++) {
                if (s[i] == '%') {
                        if (i + 2 >= n) {
                                free(o);
                                return NULL;
                        }
                        int a = hexv(s[i + 1]), b = hexv(s[i + 2]);
                        if (a < 0 || b < 0 || (a | b) == 0) {
                                free(o);
                                return NULL;
                        }
                        *w++ = (char) (a * 16 + b);
                        i += 2;
                } else
                        *w++ = s[i] == '+' ? ' ' : s[i];
        }
        *w = 0;
        return o;
}

void pj_e2b_kv_free(struct pj_e2b_kv *v, size_t n) {
        for (size_t i = 0; v && i < n; i++)
                free_many(v[i].key, v[i].value);
        free(v);
}

int pj_e2b_metadata_query_parse(const char *q, struct pj_e2b_kv **ret, size_t *ret_n, struct pj_error *err) {
        struct pj_e2b_kv *v = NULL;
        size_t n = 0;
        /* libmicrohttpd hands the parameter decoded once: "user=abc&app=prod", each key and
         * value still URL-encoded (the SDK encodes them before joining) */
        const char *p = q;
        while (*p) {
                const char *e = strchrnul(p, '&'), *eq = memchr(p, '=', (size_t) (e - p));
                if (e == p) {
                        p = *e ? e + 1 : e;
                        continue;
                }
                if (n == PJ_E2B_MAX_METADATA) {
                        pj_e2b_kv_free(v, n);
                        return pj_error_set(err, "metadata", "metadata must have at most %d pairs", PJ_E2B_MAX_METADATA);
                }
                char *k = eq ? pct_decode(p, (size_t) (eq - p)) : NULL;
                char *val = eq ? pct_decode(eq + 1, (size_t) (e - eq - 1)) : NULL;
                if (!k || !val || !*k || strlen(k) > PJ_E2B_MAX_METADATA_KEY || strlen(val) > PJ_E2B_MAX_METADATA_VALUE) {
                        free_many(k, val);
                        pj_e2b_kv_free(v, n);
                        return pj_error_set(err, "metadata",
                                            "metadata must be key=value pairs joined by '&', each key and value URL-encoded");
                }
                v = xrealloc(v, (n + 1) * sizeof(*v));
                v[n++] = (struct pj_e2b_kv) { k, val };
                p = *e ? e + 1 : e;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

/* ---- the Connect protocol ---- */

static const char *const code_names[] = {
        [PJ_CONNECT_CANCELED] = "canceled",
        [PJ_CONNECT_UNKNOWN] = "unknown",
        [PJ_CONNECT_INVALID_ARGUMENT] = "invalid_argument",
        [PJ_CONNECT_DEADLINE_EXCEEDED] = "deadline_exceeded",
        [PJ_CONNECT_NOT_FOUND] = "not_found",
        [PJ_CONNECT_ALREADY_EXISTS] = "already_exists",
        [PJ_CONNECT_PERMISSION_DENIED] = "permission_denied",
        [PJ_CONNECT_RESOURCE_EXHAUSTED] = "resource_exhausted",
        [PJ_CONNECT_FAILED_PRECONDITION] = "failed_precondition",
        [PJ_CONNECT_ABORTED] = "aborted",
        [PJ_CONNECT_OUT_OF_RANGE] = "out_of_range",
        [PJ_CONNECT_UNIMPLEMENTED] = "unimplemented",
        [PJ_CONNECT_INTERNAL] = "internal",
        [PJ_CONNECT_UNAVAILABLE] = "unavailable",
        [PJ_CONNECT_DATA_LOSS] = "data_loss",
        [PJ_CONNECT_UNAUTHENTICATED] = "unauthenticated",
};

const char *pj_connect_code_name(enum pj_connect_code c) {
        return (size_t) c < ELEMENTSOF(code_names) && code_names[c] ? code_names[c] : "unknown";
}

int pj_connect_code_http(enum pj_connect_code c) {
        switch (c) {
        case PJ_CONNECT_CANCELED: return 499;
        case PJ_CONNECT_INVALID_ARGUMENT: return 400;
        case PJ_CONNECT_DEADLINE_EXCEEDED: return 504;
        case PJ_CONNECT_NOT_FOUND: return 404;
        case PJ_CONNECT_ALREADY_EXISTS: return 409;
        case PJ_CONNECT_PERMISSION_DENIED: return 403;
        case PJ_CONNECT_RESOURCE_EXHAUSTED: return 429;
        case PJ_CONNECT_FAILED_PRECONDITION: return 400;
        case PJ_CONNECT_ABORTED: return 409;
        case PJ_CONNECT_OUT_OF_RANGE: return 400;
        case PJ_CONNECT_UNIMPLEMENTED: return 501;
        case PJ_CONNECT_UNAVAILABLE: return 503;
        case PJ_CONNECT_UNAUTHENTICATED: return 401;
        case PJ_CONNECT_UNKNOWN:
        case PJ_CONNECT_INTERNAL:
        case PJ_CONNECT_DATA_LOSS:
                return 500;
        }
        return 500;
}

int pj_connect_envelope_decode(const uint8_t *buf, size_t len, size_t max, uint8_t *ret_flags, const uint8_t **ret_msg,
                               size_t *ret_msg_len, size_t *ret_used) {
        if (len < 5)
                return 0;
        uint32_t n = (uint32_t) buf[1] << 24 | (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 8 | buf[4];
        if (buf[0] & PJ_CONNECT_FLAG_COMPRESSED)
                return -EPROTO;
        if (n > max)
                return -EMSGSIZE;
        if (len - 5 < n)
                return 0;
        *ret_flags = buf[0];
        *ret_msg = buf + 5;
        *ret_msg_len = n;
        *ret_used = 5 + (size_t) n;
        return 1;
}

void pj_connect_envelope_header(uint8_t out[5], uint8_t flags, uint32_t len) {
        out[0] = flags;
        out[1] = (uint8_t) (len >> 24);
        out[2] = (uint8_t) (len >> 16);
        out[3] = (uint8_t) (len >> 8);
        out[4] = (uint8_t) len;
}

/* ---- envd's messages ---- */

/* A message object (an empty message is {}). */
static int message(const char *msg, size_t len, struct pj_json **ret, struct pj_error *err) {
        int r = pj_json_parse_object(msg, len, true, ret, err);
        if (r < 0)
                return r;
        return 0;
}

/* Member by JSON name or proto name (not both). */
static const struct pj_json *field(const struct pj_json *obj, const char *json_name, const char *proto_name) {
        const struct pj_json *m = pj_json_member(obj, json_name);
        if (!m && proto_name)
                m = pj_json_member(obj, proto_name);
        return m;
}

static int check_message(const struct pj_json *obj, const char *prefix, const char *const *names, size_t n,
                         struct pj_error *err) {
        int r = pj_check_fields(obj, prefix, names, n, err);
        if (r < 0)
                return r;
        /* both spellings of one field: names[] lists them in pairs where they differ */
        for (size_t i = 0; i + 1 < n; i++) {
                if (!strchr(names[i + 1], '_'))
                        continue;
                if (pj_json_member(obj, names[i]) && pj_json_member(obj, names[i + 1]))
                        return pj_error_set(err, names[i], "%s is given twice (as %s and %s)", names[i], names[i],
                                            names[i + 1]);
        }
        return 0;
}

static int string_field(const struct pj_json *m, const char *path, size_t max, bool empty_ok, char **ret,
                        struct pj_error *err) {
        if (!m)
                return 0;
        if (m->type != PJ_JSON_STRING || memchr(m->str, 0, m->str_len))
                return pj_error_set(err, path, "%s must be a string without NUL", path);
        if (m->str_len > max || (!empty_ok && m->str_len == 0))
                return pj_error_set(err, path, "%s must be %s%zu bytes", path, empty_ok ? "at most " : "1..", max);
        *ret = xstrndup(m->str, m->str_len);
        return 1;
}

/* uint32 in proto3 JSON: a number or a decimal string. */
static int u32_field(const struct pj_json *m, const char *path, uint32_t max, uint32_t *ret, struct pj_error *err) {
        if (!m)
                return 0;
        int64_t x = -1;
        if (m->type == PJ_JSON_NUMBER)
                (void) pj_number_to_int(m, &x);
        else if (m->type == PJ_JSON_STRING && m->str_len > 0 && m->str_len <= 10 &&
                 strspn(m->str, "0123456789") == m->str_len)
                x = strtoll(m->str, NULL, 10);
        if (x < 0 || x > (int64_t) max)
                return pj_error_set(err, path, "%s must be an integer from 0 to %u", path, max);
        *ret = (uint32_t) x;
        return 1;
}

static int bool_field(const struct pj_json *m, const char *path, bool *ret, struct pj_error *err) {
        if (!m)
                return 0;
        if (m->type != PJ_JSON_TRUE && m->type != PJ_JSON_FALSE)
                return pj_error_set(err, path, "%s must be true or false", path);
        *ret = m->type == PJ_JSON_TRUE;
        return 1;
}

static int selector(const struct pj_json *obj, const char *path, struct pj_envd_selector *ret, struct pj_error *err) {
        static const char *const names[] = { "pid", "tag" };
        if (!obj)
                return pj_error_set(err, path, "%s is required: {\"pid\": N} or {\"tag\": \"...\"}", path);
        if (obj->type != PJ_JSON_OBJECT)
                return pj_error_set(err, path, "%s must be an object", path);
        int r = pj_check_fields(obj, path, names, ELEMENTSOF(names), err);
        if (r < 0)
                return r;
        char p[PJ_PATH_MAX];
        const struct pj_json *pid = pj_json_member(obj, "pid"), *tag = pj_json_member(obj, "tag");
        if ((pid != NULL) == (tag != NULL))
                return pj_error_set(err, path, "%s must have exactly one of pid and tag", path);
        if ((r = u32_field(pid, pj_mkpath(p, path, "pid"), 0x7fffffff, &ret->pid, err)) < 0)
                return r;
        if (pid && ret->pid == 0)
                return pj_error_set(err, p, "%s must be a process id (1 or more)", p);
        if ((r = string_field(tag, pj_mkpath(p, path, "tag"), PJ_E2B_MAX_TAG, false, &ret->tag, err)) < 0)
                return r;
        return 0;
}

/* A message on one process: only the fields in names[], "process" (the selector) among them. */
static int process_message(const char *msg, size_t len, const char *const *names, size_t n, struct pj_json **root,
                           struct pj_envd_selector *sel, struct pj_error *err) {
        int r = message(msg, len, root, err);
        if (r < 0 || (r = check_message(*root, "", names, n, err)) < 0)
                return r;
        return selector(pj_json_member(*root, "process"), "process", sel, err);
}

void pj_envd_selector_done(struct pj_envd_selector *s) {
        if (!s)
                return;
        free(s->tag);
        *s = (struct pj_envd_selector) { 0 };
}

void pj_envd_start_done(struct pj_envd_start *s) {
        if (!s)
                return;
        strv_free(s->args);
        strv_free(s->env_keys);
        strv_free(s->env_values);
        free_many(s->cmd, s->cwd, s->tag);
        *s = (struct pj_envd_start) { 0 };
}

/* pty: {size: {cols, rows}} */
static int pty_field(const struct pj_json *pty, const char *path, uint32_t *rows, uint32_t *cols, struct pj_error *err) {
        static const char *const names[] = { "size" }, *const size_names[] = { "cols", "rows" };
        char p[PJ_PATH_MAX], q[PJ_PATH_MAX];
        if (pty->type != PJ_JSON_OBJECT)
                return pj_error_set(err, path, "%s must be an object", path);
        int r = pj_check_fields(pty, path, names, ELEMENTSOF(names), err);
        if (r < 0)
                return r;
        const struct pj_json *size = pj_json_member(pty, "size");
        pj_mkpath(p, path, "size");
        if (!size || size->type != PJ_JSON_OBJECT)
                return pj_error_set(err, p, "%s is required: {\"cols\": N, \"rows\": N}", p);
        if ((r = pj_check_fields(size, p, size_names, ELEMENTSOF(size_names), err)) < 0)
                return r;
        *rows = *cols = 0;
        if ((r = u32_field(pj_json_member(size, "cols"), pj_mkpath(q, p, "cols"), 65535, cols, err)) < 0 ||
            (r = u32_field(pj_json_member(size, "rows"), pj_mkpath(q, p, "rows"), 65535, rows, err)) < 0)
                return r;
        if (*rows == 0 || *cols == 0)
                return pj_error_set(err, p, "%s needs cols and rows from 1 to 65535", p);
        return 0;
}

int pj_envd_start_parse(const char *msg, size_t len, struct pj_envd_start *ret, struct pj_error *err) {
        static const char *const names[] = { "process", "pty", "tag", "stdin" };
        static const char *const pnames[] = { "cmd", "args", "envs", "cwd" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_start_done) struct pj_envd_start s = { 0 };
        int r = message(msg, len, &root, err);
        if (r < 0)
                return r;
        if ((r = check_message(root, "", names, ELEMENTSOF(names), err)) < 0)
                return r;
        const struct pj_json *proc = pj_json_member(root, "process");
        if (!proc || proc->type != PJ_JSON_OBJECT)
                return pj_error_set(err, "process", "process is required: {\"cmd\": ..., \"args\": [...]}");
        if ((r = pj_check_fields(proc, "process", pnames, ELEMENTSOF(pnames), err)) < 0)
                return r;
        if ((r = string_field(pj_json_member(proc, "cmd"), "process.cmd", PJ_E2B_MAX_ARG, false, &s.cmd, err)) < 0)
                return r;
        if (!s.cmd)
                return pj_error_set(err, "process.cmd", "process.cmd is required");
        const struct pj_json *args = pj_json_member(proc, "args");
        if (args && args->type != PJ_JSON_ARRAY)
                return pj_error_set(err, "process.args", "process.args must be an array of strings");
        if (args && args->n > PJ_E2B_MAX_ARGS - 1)
                return pj_error_set(err, "process.args", "process.args must have at most %d entries", PJ_E2B_MAX_ARGS - 1);
        s.args = xnew0(char *, (args ? args->n : 0) + 1);
        size_t i = 0;
        char p[PJ_PATH_MAX];
        for (const struct pj_json *a = args ? args->child : NULL; a; a = a->next, i++) {
                pj_mkindex(p, "process.args", i);
                if ((r = string_field(a, p, PJ_E2B_MAX_ARG, true, &s.args[i], err)) < 0)
                        return r;
                s.n_args = i + 1;
        }
        const struct pj_json *envs = pj_json_member(proc, "envs");
        if (envs && (r = string_map(envs, "process.envs", true, PJ_E2B_MAX_ENV, 256, 32768, NULL, &s.env_keys, &s.env_values,
                                    &s.n_env, err)) < 0)
                return r;
        if ((r = string_field(pj_json_member(proc, "cwd"), "process.cwd", PJ_E2B_MAX_PATH, false, &s.cwd, err)) < 0)
                return r;
        const struct pj_json *pty = pj_json_member(root, "pty");
        if (pty) {
                if ((r = pty_field(pty, "pty", &s.rows, &s.cols, err)) < 0)
                        return r;
                s.pty = true;
        }
        if ((r = string_field(pj_json_member(root, "tag"), "tag", PJ_E2B_MAX_TAG, false, &s.tag, err)) < 0)
                return r;
        if ((r = bool_field(pj_json_member(root, "stdin"), "stdin", &s.stdin_open, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_selector_parse(const char *msg, size_t len, struct pj_envd_selector *ret, struct pj_error *err) {
        static const char *const names[] = { "process" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s, err);
        if (r < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

void pj_envd_input_done(struct pj_envd_input *s) {
        if (!s)
                return;
        pj_envd_selector_done(&s->process);
        free(s->data);
        *s = (struct pj_envd_input) { 0 };
}

/* proto3 bytes: base64, standard or URL-safe alphabet, padding optional. */
static int bytes_field(const struct pj_json *m, const char *path, size_t max, uint8_t **ret, size_t *ret_len,
                       struct pj_error *err) {
        if (m->type != PJ_JSON_STRING)
                return pj_error_set(err, path, "%s must be base64 text", path);
        if (m->str_len > (max / 3 + 1) * 4 + 4)
                return pj_error_set(err, path, "%s must be at most %zu bytes", path, max);
        _cleanup_free_ char *std = xstrndup(m->str, m->str_len);
        for (char *c = std; *c; c++)
                *c = *c == '-' ? '+' : *c == '_' ? '/' : *c;
        if (base64_decode_flags(std, m->str_len, BASE64_PAD_OPTIONAL, ret, ret_len) < 0)
                return pj_error_set(err, path, "%s must be base64 text", path);
        if (*ret_len > max) {
                free(*ret);
                *ret = NULL;
                return pj_error_set(err, path, "%s must be at most %zu bytes", path, max);
        }
        return 0;
}

/* input: {stdin: base64} or {pty: base64}, at prefix. */
static int input_field(const struct pj_json *in, const char *prefix, struct pj_envd_input *s, struct pj_error *err) {
        static const char *const inames[] = { "stdin", "pty" };
        char p[PJ_PATH_MAX];
        if (!in || in->type != PJ_JSON_OBJECT)
                return pj_error_set(err, prefix, "%s is required: {\"stdin\": base64} or {\"pty\": base64}", prefix);
        int r = pj_check_fields(in, prefix, inames, ELEMENTSOF(inames), err);
        if (r < 0)
                return r;
        const struct pj_json *sd = pj_json_member(in, "stdin"), *pt = pj_json_member(in, "pty");
        if ((sd != NULL) == (pt != NULL))
                return pj_error_set(err, prefix, "%s must have exactly one of stdin and pty", prefix);
        s->pty = pt != NULL;
        return bytes_field(sd ? sd : pt, pj_mkpath(p, prefix, sd ? "stdin" : "pty"), PJ_E2B_MAX_INPUT, &s->data, &s->len, err);
}

int pj_envd_input_parse(const char *msg, size_t len, struct pj_envd_input *ret, struct pj_error *err) {
        static const char *const names[] = { "process", "input" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_input_done) struct pj_envd_input s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s.process, err);
        if (r < 0 || (r = input_field(pj_json_member(root, "input"), "input", &s, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_stream_input_parse(const char *msg, size_t len, enum pj_envd_stream_kind *ret_kind, struct pj_envd_input *ret,
                               struct pj_error *err) {
        static const char *const names[] = { "start", "data", "keepalive" }, *const start_names[] = { "process" },
                                 *const data_names[] = { "input" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_input_done) struct pj_envd_input s = { 0 };
        int r = message(msg, len, &root, err);
        if (r < 0 || (r = pj_check_fields(root, "", names, ELEMENTSOF(names), err)) < 0)
                return r;
        if (root->n != 1)
                return pj_error_set(err, "", "A StreamInputRequest has exactly one of start, data and keepalive");
        const struct pj_json *m = root->child;
        if (m->type != PJ_JSON_OBJECT)
                return pj_error_set(err, m->key, "%s must be an object", m->key);
        enum pj_envd_stream_kind kind;
        if (pj_json_key_is(m, "start")) {
                kind = PJ_ENVD_STREAM_START;
                if ((r = pj_check_fields(m, "start", start_names, ELEMENTSOF(start_names), err)) < 0 ||
                    (r = selector(pj_json_member(m, "process"), "start.process", &s.process, err)) < 0)
                        return r;
        } else if (pj_json_key_is(m, "data")) {
                kind = PJ_ENVD_STREAM_DATA;
                if ((r = pj_check_fields(m, "data", data_names, ELEMENTSOF(data_names), err)) < 0 ||
                    (r = input_field(pj_json_member(m, "input"), "data.input", &s, err)) < 0)
                        return r;
        } else {
                kind = PJ_ENVD_STREAM_KEEPALIVE;
                if ((r = pj_check_fields(m, "keepalive", NULL, 0, err)) < 0)
                        return r;
        }
        *ret_kind = kind;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_signal_parse(const char *msg, size_t len, struct pj_envd_selector *ret, int *ret_signo, struct pj_error *err) {
        static const char *const names[] = { "process", "signal" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s, err);
        if (r < 0)
                return r;
        const struct pj_json *sig = pj_json_member(root, "signal");
        int64_t n = 0;
        if (sig && sig->type == PJ_JSON_STRING && !strcmp(sig->str, "SIGNAL_SIGKILL"))
                n = 9;
        else if (sig && sig->type == PJ_JSON_STRING && !strcmp(sig->str, "SIGNAL_SIGTERM"))
                n = 15;
        else if (sig && sig->type == PJ_JSON_NUMBER && pj_number_to_int(sig, &n) && (n == 9 || n == 15))
                ;
        else
                return pj_error_set(err, "signal", "signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL");
        *ret_signo = (int) n;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_update_parse(const char *msg, size_t len, struct pj_envd_selector *ret, uint32_t *ret_rows, uint32_t *ret_cols,
                         struct pj_error *err) {
        static const char *const names[] = { "process", "pty" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s, err);
        if (r < 0)
                return r;
        const struct pj_json *pty = pj_json_member(root, "pty");
        *ret_rows = *ret_cols = 0;
        if (pty && (r = pty_field(pty, "pty", ret_rows, ret_cols, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_empty_parse(const char *msg, size_t len, struct pj_error *err) {
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = message(msg, len, &root, err);
        if (r < 0)
                return r;
        return pj_check_fields(root, "", NULL, 0, err);
}

void pj_envd_fs_done(struct pj_envd_fs *f) {
        if (!f)
                return;
        free_many(f->path, f->to);
        *f = (struct pj_envd_fs) { 0 };
}

int pj_envd_fs_parse(const char *msg, size_t len, enum pj_envd_fs_kind kind, struct pj_envd_fs *ret, struct pj_error *err) {
        static const char *const path_names[] = { "path" }, *const move_names[] = { "source", "destination" },
                                 *const list_names[] = { "path", "depth" },
                                 *const watch_names[] = { "path", "recursive", "includeEntry", "include_entry",
                                                          "allowNetworkMounts", "allow_network_mounts" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs f = { .depth = 1 };
        int r = message(msg, len, &root, err);
        if (r < 0)
                return r;
        switch (kind) {
        case PJ_ENVD_FS_PATH: r = check_message(root, "", path_names, ELEMENTSOF(path_names), err); break;
        case PJ_ENVD_FS_MOVE: r = check_message(root, "", move_names, ELEMENTSOF(move_names), err); break;
        case PJ_ENVD_FS_LISTDIR: r = check_message(root, "", list_names, ELEMENTSOF(list_names), err); break;
        case PJ_ENVD_FS_WATCH: r = check_message(root, "", watch_names, ELEMENTSOF(watch_names), err); break;
        }
        if (r < 0)
                return r;
        const char *pname = kind == PJ_ENVD_FS_MOVE ? "source" : "path";
        if ((r = string_field(pj_json_member(root, pname), pname, PJ_E2B_MAX_PATH, false, &f.path, err)) < 0)
                return r;
        if (!f.path)
                return pj_error_set(err, pname, "%s is required", pname);
        if (kind == PJ_ENVD_FS_MOVE) {
                if ((r = string_field(pj_json_member(root, "destination"), "destination", PJ_E2B_MAX_PATH, false, &f.to, err)) < 0)
                        return r;
                if (!f.to)
                        return pj_error_set(err, "destination", "destination is required");
        }
        if (kind == PJ_ENVD_FS_LISTDIR && (r = u32_field(pj_json_member(root, "depth"), "depth", 64, &f.depth, err)) < 0)
                return r;
        if (kind == PJ_ENVD_FS_LISTDIR && f.depth == 0)
                f.depth = 1;
        if (kind == PJ_ENVD_FS_WATCH) {
                if ((r = bool_field(pj_json_member(root, "recursive"), "recursive", &f.recursive, err)) < 0)
                        return r;
                bool inc = false, net = false;
                if ((r = bool_field(field(root, "includeEntry", "include_entry"), "includeEntry", &inc, err)) < 0 ||
                    (r = bool_field(field(root, "allowNetworkMounts", "allow_network_mounts"), "allowNetworkMounts", &net,
                                    err)) < 0)
                        return r;
                if (inc)
                        return pj_error_set(err, "includeEntry",
                                            "includeEntry is not supported on this server (envd %s): list the directory "
                                            "for the entries",
                                            PJ_E2B_ENVD_VERSION);
        }
        *ret = TAKE_STRUCT(f);
        return 0;
}
