/* pj_e2b.c — E2B's control-plane request bodies (pj_e2b.h); envd's Connect messages are
 * pj_envd.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pj_api.h"
#include "pj_e2b.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "strutil.h"

/* ---- shared checks ---- */

static int int_member(const struct pj_json *obj, const char *key, int64_t min, int64_t max, bool *ret_has, int64_t *ret,
                      struct err *err) {
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

/* ---- POST /sandboxes ---- */

void pj_e2b_create_done(struct pj_e2b_create *c) {
        if (!c)
                return;
        free_many(c->template_id, c->metadata_json, c->env_json);
        pj_egress_done(&c->egress);
        free_many(c->volume_name, c->volume_path);
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
                         struct err *err) {
        static const char *const fields[] = { "allowOut", "denyOut", "allowPublicTraffic", "maskRequestHost", "egressProxy",
                                              "rules", "httpsPorts" };
        char path[PJ_PATH_MAX], q[300];
        struct err why = { 0 };
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
        c->egress.rules_open = false;   /* E2B: a host with rules is not allowed by them */
        if (rules && (r = pj_egress_rules_parse(rules, update ? "rules" : "network.rules", true, &c->egress, err)) < 0)
                return r;
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
                        r = pj_egress_add_allow(&c->egress, s, &why);
                        if (r == -EINVAL)
                                return pj_error_set(err, path, "%s (\"%s\") %s", path,
                                                    pj_sanitize(q, sizeof(q), a->str, a->str_len, 64), why.message);
                        if (r < 0)
                                return pj_error_set(err, "network.allowOut", "network.allowOut must have at most %d entries",
                                                    PJ_EGRESS_MAX_ALLOW);
                }
        }
        *ret_deny_all = deny_all;
        return 0;
}

int pj_e2b_create_parse(const char *body, size_t len, struct pj_e2b_create *ret, struct err *err) {
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
        if ((r = pj_get_bool(root, "", "autoPause", &has, &c.auto_pause, err)) < 0)
                return r;
        c.auto_pause_memory = true;
        has = false;
        if ((r = pj_get_bool(root, "", "autoPauseMemory", &has, &c.auto_pause_memory, err)) < 0)
                return r;
        if (has && !c.auto_pause)
                return pj_error_set(err, "autoPauseMemory", "autoPauseMemory applies to an auto-pause: set autoPause: true");
        if (!c.auto_pause)
                c.auto_pause_memory = false;
        const struct pj_json *ar = pj_json_member(root, "autoResume");
        if (ar) {
                static const char *const ar_fields[] = { "enabled" };
                if (ar->type != PJ_JSON_OBJECT)
                        return pj_error_set(err, "autoResume", "autoResume must be an object: {\"enabled\": true}");
                if ((r = pj_check_fields(ar, "autoResume", ar_fields, ELEMENTSOF(ar_fields), err)) < 0 ||
                    (r = pj_get_bool(ar, "autoResume", "enabled", NULL, &c.auto_resume, err)) < 0)
                        return r;
                if (c.auto_resume && !c.auto_pause_memory)
                        return pj_error_set(err, "autoResume",
                                            "autoResume wakes a sandbox paused with its memory: it needs autoPause: true and "
                                            "autoPauseMemory left true");
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
        if (vm && vm->type != PJ_JSON_ARRAY)
                return pj_error_set(err, "volumeMounts", "volumeMounts must be an array of {name, path}");
        if (vm && vm->n > 1)
                return pj_error_set(err, "volumeMounts[1]", "volumeMounts: a sandbox mounts at most one volume on this server");
        if (vm && vm->n == 1) {
                static const char *const vf[] = { "name", "path" };
                const struct pj_json *m = vm->child, *nm, *pa;
                if (m->type != PJ_JSON_OBJECT)
                        return pj_error_set(err, "volumeMounts[0]", "volumeMounts[0] must be an object with name and path");
                if ((r = pj_check_fields(m, "volumeMounts[0]", vf, ELEMENTSOF(vf), err)) < 0 ||
                    (r = pj_get_str(m, "volumeMounts[0]", "name", &nm, err)) < 0 ||
                    (r = pj_get_str(m, "volumeMounts[0]", "path", &pa, err)) < 0)
                        return r;
                if (!nm || !pj_e2b_volume_name_ok(nm->str, nm->str_len))
                        return pj_error_set(err, "volumeMounts[0].name", "volumeMounts[0].name must be a volume's name "
                                                                         "(1 to 40 of letters, digits, '_' and '-')");
                if (!pa)
                        return pj_error_set(err, "volumeMounts[0].path", "volumeMounts[0].path is required");
                if ((r = pj_mount_path_check(pa->str, pa->str_len, "volumeMounts[0].path", err)) < 0)
                        return r;
                c.volume_name = xstrndup(nm->str, nm->str_len);
                c.volume_path = xstrndup(pa->str, pa->str_len);
        }
        bool deny_all = false;
        const struct pj_json *net = pj_json_member(root, "network");
        if (net && (r = parse_network(net, &c, &deny_all, false, err)) < 0)
                return r;
        if (!inet)
                deny_all = true;
        egress_settle(&c.egress, deny_all);
        const struct pj_json *md = pj_json_member(root, "metadata");
        if (md && (r = pj_string_map(md, "metadata", false, PJ_E2B_MAX_METADATA, PJ_E2B_MAX_METADATA_KEY,
                                  PJ_E2B_MAX_METADATA_VALUE, &c.metadata_json, NULL, NULL, NULL, err)) < 0)
                return r;
        const struct pj_json *ev = pj_json_member(root, "envVars");
        if (ev && (r = pj_string_map(ev, "envVars", true, PJ_E2B_MAX_ENV, 256, 32768, &c.env_json, NULL, NULL, NULL, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(c);
        return 0;
}

/* {"timeout": N} and, for connect, "memory" (only false: a paused sandbox resumes from its
 * filesystem). */
static int timeout_body(const char *body, size_t len, bool connect, bool v2, int64_t *ret_timeout_s, struct err *err) {
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

int pj_e2b_timeout_parse(const char *body, size_t len, int64_t *ret_timeout_s, struct err *err) {
        return timeout_body(body, len, false, false, ret_timeout_s, err);
}

int pj_e2b_connect_parse(const char *body, size_t len, bool v2, int64_t *ret_timeout_s, struct err *err) {
        return timeout_body(body, len, true, v2, ret_timeout_s, err);
}

int pj_e2b_network_update_parse(const char *body, size_t len, struct pj_egress *ret, struct err *err) {
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

int pj_e2b_snapshot_parse(const char *body, size_t len, char **ret_name, struct err *err) {
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

int pj_e2b_pause_parse(const char *body, size_t len, bool *ret_memory, struct err *err) {
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

int pj_e2b_metadata_query_parse(const char *q, struct pj_e2b_kv **ret, size_t *ret_n, struct err *err) {
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

bool pj_e2b_volume_name_ok(const char *s, size_t n) {
        if (n < 1 || n > 40 || memchr(s, 0, n))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '_' || s[i] == '-'))
                        return false;
        return true;
}

int pj_e2b_volume_parse(const char *body, size_t len, char **ret_name, struct err *err) {
        static const char *const fields[] = { "name" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err);
        if (r < 0)
                return r;
        const struct pj_json *n;
        if ((r = pj_get_str(root, "", "name", &n, err)) < 0)
                return r;
        if (!n)
                return pj_error_set(err, "name", "name is required");
        if (!pj_e2b_volume_name_ok(n->str, n->str_len))
                return pj_error_set(err, "name", "name must be 1 to 40 of letters, digits, '_' and '-'");
        *ret_name = xstrndup(n->str, n->str_len);
        return 0;
}
