/* pj_egress_rules.c — a policy's lifetime (done, copy) and its egress rules: per host, the headers the node's egress proxy puts into a
 * sandbox's requests on the way out (secrets by placeholder, so the sandbox never holds them).
 *
 * Everything here is untrusted input with a limit: hosts (PJ_EGRESS_MAX_RULES, each a hostname
 * pj_allow_entry_parse accepts), headers per host, name and value sizes, placeholders per
 * value. Names are HTTP tokens; values hold no control characters (a CR or LF would let a value
 * add headers of its own on the wire). A placeholder is ${secrets.<name>} with a secret name
 * pj_secret_name_ok accepts; whether the account has that secret is the caller's check.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cleanup.h"
#include "json.h"
#include "pj.h"
#include "pj_egress.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "pj_secret.h"
#include "strutil.h"

static const char placeholder_open[] = "${secrets.";
static const char e2b_placeholder_open[] = "${e2b.secrets.";

static void rule_done(struct pj_egress_rule *r) {
        for (size_t i = 0; i < r->n_headers; i++) {
                free(r->headers[i].name);
                free(r->headers[i].value);
        }
        free(r->headers);
        r->headers = NULL;
        r->n_headers = 0;
}

void pj_egress_rules_done(struct pj_egress *e) {
        for (size_t i = 0; i < e->n_rules; i++)
                rule_done(&e->rules[i]);
        free(e->rules);
        e->rules = NULL;
        e->n_rules = 0;
}

void pj_egress_rules_copy(struct pj_egress *dst, const struct pj_egress *src) {
        dst->rules_open = src->rules_open;
        dst->n_rules = src->n_rules;
        dst->rules = src->n_rules ? xnew0(struct pj_egress_rule, src->n_rules) : NULL;
        for (size_t i = 0; i < src->n_rules; i++) {
                const struct pj_egress_rule *s = &src->rules[i];
                struct pj_egress_rule *d = &dst->rules[i];
                memcpy(d->host, s->host, sizeof(d->host));
                d->n_headers = s->n_headers;
                d->headers = xnew0(struct pj_egress_header, s->n_headers ? s->n_headers : 1);
                for (size_t k = 0; k < s->n_headers; k++)
                        d->headers[k] = (struct pj_egress_header) { xstrdup(s->headers[k].name), xstrdup(s->headers[k].value) };
        }
}

/* ---- a whole policy: its allowlist and its rules ---- */

void pj_egress_done(struct pj_egress *e) {
        if (!e)
                return;
        for (size_t i = 0; i < e->n_allow; i++)
                free(e->allow[i]);
        free(e->allow);
        e->allow = NULL;
        e->n_allow = 0;
        e->mode = PJ_EGRESS_OPEN;
        pj_egress_rules_done(e);
        e->rules_open = false;
}

void pj_egress_copy(struct pj_egress *dst, const struct pj_egress *src) {
        dst->mode = src->mode;
        dst->n_allow = src->n_allow;
        dst->allow = src->n_allow ? xnew0(char *, src->n_allow) : NULL;
        for (size_t i = 0; i < src->n_allow; i++)
                dst->allow[i] = xstrdup(src->allow[i]);
        pj_egress_rules_copy(dst, src);
}

void pj_egress_rules_wipe(struct pj_egress *e) {
        for (size_t i = 0; i < e->n_rules; i++)
                for (size_t k = 0; k < e->rules[i].n_headers; k++)
                        if (e->rules[i].headers[k].value)
                                explicit_bzero(e->rules[i].headers[k].value, strlen(e->rules[i].headers[k].value));
}

void pj_egress_rules_json_wipe(cJSON *j) {
        cJSON *h, *x, *hd, *v;
        cJSON_ArrayForEach(h, j) cJSON_ArrayForEach(x, h) if ((hd = cJSON_GetObjectItem(x, "headers")))
                cJSON_ArrayForEach(v, hd) if (cJSON_IsString(v)) explicit_bzero(v->valuestring, strlen(v->valuestring));
}

int pj_egress_placeholders(const char *value, int (*fn)(const char *name, size_t n, void *ud), void *ud) {
        for (const char *p = strstr(value, placeholder_open); p; p = strstr(p, placeholder_open)) {
                const char *name = p + sizeof(placeholder_open) - 1, *end = strchr(name, '}');
                if (!end)
                        return 0;
                int r = fn(name, (size_t) (end - name), ud);
                if (r < 0)
                        return r;
                p = end + 1;
        }
        return 0;
}

/* The value as stored: E2B's placeholders rewritten to ours, each placeholder's name checked.
 * NULL with err on a bad one. */
static char *value_normalise(const struct pj_json *v, const char *path, bool resolved, struct err *err) {
        if (v->type != PJ_JSON_STRING) {
                pj_error_set(err, path, "%s must be a string", path);
                return NULL;
        }
        if (v->str_len > (resolved ? PJ_EGRESS_RESOLVED_VALUE_MAX : PJ_EGRESS_HEADER_VALUE_MAX)) {
                pj_error_set(err, path, "%s is longer than %d bytes", path,
                             resolved ? PJ_EGRESS_RESOLVED_VALUE_MAX : PJ_EGRESS_HEADER_VALUE_MAX);
                return NULL;
        }
        for (size_t i = 0; i < v->str_len; i++) {
                unsigned char c = (unsigned char) v->str[i];
                if ((c < 0x20 && c != '\t') || c == 0x7f) {
                        pj_error_set(err, path, "%s must not contain control characters (CR, LF, NUL)", path);
                        return NULL;
                }
        }
        if (resolved)           /* a value the node puts in as it is */
                return xstrndup(v->str, v->str_len);
        /* E2B's ${e2b.secrets.x} is our ${secrets.x}: drop the "e2b." of each. */
        _cleanup_free_ char *out = xnew0(char, v->str_len + 1);
        size_t o = 0;
        for (size_t i = 0; i < v->str_len;) {
                if (v->str_len - i >= sizeof(e2b_placeholder_open) - 1 &&
                    !memcmp(v->str + i, e2b_placeholder_open, sizeof(e2b_placeholder_open) - 1)) {
                        memcpy(out + o, placeholder_open, sizeof(placeholder_open) - 1);
                        o += sizeof(placeholder_open) - 1;
                        i += sizeof(e2b_placeholder_open) - 1;
                        continue;
                }
                out[o++] = v->str[i++];
        }
        out[o] = 0;
        size_t n = 0;
        for (const char *p = strstr(out, placeholder_open); p; p = strstr(p, placeholder_open)) {
                const char *name = p + sizeof(placeholder_open) - 1, *end = strchr(name, '}');
                char nm[PJ_SECRET_NAME_MAX + 1];
                size_t len = end ? (size_t) (end - name) : 0;
                if (!end || len == 0 || len > PJ_SECRET_NAME_MAX) {
                        pj_error_set(err, path, "%s has a placeholder that is not ${secrets.<name>} with a secret's name", path);
                        return NULL;
                }
                memcpy(nm, name, len);
                nm[len] = 0;
                if (!pj_secret_name_ok(nm)) {
                        pj_error_set(err, path, "%s names a secret \"%s\" that no secret can be called", path, nm);
                        return NULL;
                }
                if (++n > PJ_EGRESS_MAX_PLACEHOLDERS) {
                        pj_error_set(err, path, "%s has more than %d placeholders", path, PJ_EGRESS_MAX_PLACEHOLDERS);
                        return NULL;
                }
                p = end + 1;
        }
        return TAKE_PTR(out);
}

static int headers_parse(const struct pj_json *h, const char *path, bool resolved, struct pj_egress_rule *rule,
                         struct err *err) {
        char hp[PJ_PATH_MAX], q[160];
        if (h->type != PJ_JSON_OBJECT)
                return pj_error_set(err, path, "%s must be an object of header names to values", path);
        for (const struct pj_json *m = h->child; m; m = m->next) {
                pj_mkpath(hp, path, pj_sanitize(q, sizeof(q), m->key, m->key_len, 64));
                if (m->key_len == 0 || m->key_len > PJ_EGRESS_HEADER_NAME_MAX)
                        return pj_error_set(err, hp, "%s: a header name is 1 to %d characters", hp, PJ_EGRESS_HEADER_NAME_MAX);
                for (size_t i = 0; i < m->key_len; i++)
                        if (!http_tchar((unsigned char) m->key[i]))
                                return pj_error_set(err, hp, "%s: a header name is made of letters, digits and !#$%%&'*+-.^_`|~", hp);
                char name[PJ_EGRESS_HEADER_NAME_MAX + 1];
                for (size_t i = 0; i < m->key_len; i++)
                        name[i] = (char) (m->key[i] >= 'A' && m->key[i] <= 'Z' ? m->key[i] + 32 : m->key[i]);
                name[m->key_len] = 0;
                if (!strcmp(name, "host") || !strcmp(name, "content-length") || !strcmp(name, "transfer-encoding") ||
                    !strcmp(name, "connection") || !strcmp(name, "upgrade"))
                        return pj_error_set(err, hp, "%s: the header %s frames the request and cannot be set by a rule", hp, name);
                char *value = value_normalise(m, hp, resolved, err);
                if (!value)
                        return -EINVAL;
                size_t k;
                for (k = 0; k < rule->n_headers; k++)
                        if (!strcmp(rule->headers[k].name, name))
                                break;
                if (k < rule->n_headers) {
                        free(rule->headers[k].value);
                        rule->headers[k].value = value;
                        continue;
                }
                if (rule->n_headers >= PJ_EGRESS_MAX_HEADERS) {
                        free(value);
                        return pj_error_set(err, path, "%s: at most %d headers per host", path, PJ_EGRESS_MAX_HEADERS);
                }
                rule->headers = xrealloc(rule->headers, (rule->n_headers + 1) * sizeof(*rule->headers));
                rule->headers[rule->n_headers++] = (struct pj_egress_header) { xstrdup(name), value };
        }
        return 0;
}

static int rules_parse(const struct pj_json *obj, const char *path, bool e2b_shape, bool resolved, struct pj_egress *e,
                       struct err *err) {
        char hpath[PJ_PATH_MAX], ipath[PJ_PATH_MAX], q[300];
        if (obj->type != PJ_JSON_OBJECT)
                return pj_error_set(err, path, "%s must be an object of hostnames to lists of rules", path);
        if (obj->n > PJ_EGRESS_MAX_RULES)
                return pj_error_set(err, path, "%s must name at most %d hosts", path, PJ_EGRESS_MAX_RULES);
        _cleanup_(pj_egress_rules_done) struct pj_egress n = { 0 };
        n.rules = xnew0(struct pj_egress_rule, obj->n ? obj->n : 1);
        for (const struct pj_json *h = obj->child; h; h = h->next) {
                pj_mkpath(hpath, path, pj_sanitize(q, sizeof(q), h->key, h->key_len, 64));
                struct pj_allow_entry a;
                struct err why = { 0 };
                if (memchr(h->key, 0, h->key_len) || pj_allow_entry_parse(h->key, &a, NULL, 0, &why) < 0)
                        return pj_error_set(err, hpath, "%s: \"%s\" %s", hpath, q, why.message[0] ? why.message : "is not a hostname");
                if (a.kind != PJ_ALLOW_HOSTNAME)
                        return pj_error_set(err, hpath, "%s: rules are per hostname (the proxy matches TLS SNI and Host), "
                                                        "not per address", hpath);
                size_t k;
                for (k = 0; k < n.n_rules; k++)
                        if (!strcmp(n.rules[k].host, a.host))
                                break;
                struct pj_egress_rule *rule = &n.rules[k];
                if (k == n.n_rules) {
                        n.n_rules++;
                        snprintf(rule->host, sizeof(rule->host), "%s", a.host);
                }
                if (h->type != PJ_JSON_ARRAY)
                        return pj_error_set(err, hpath, "%s must be an array of rules", hpath);
                if (h->n > PJ_EGRESS_MAX_HEADERS)
                        return pj_error_set(err, hpath, "%s must have at most %d rules", hpath, PJ_EGRESS_MAX_HEADERS);
                size_t i = 0;
                for (const struct pj_json *r = h->child; r; r = r->next, i++) {
                        pj_mkindex(ipath, hpath, i);
                        static const char *const ours[] = { "headers" }, *const theirs[] = { "transform" };
                        if (r->type != PJ_JSON_OBJECT)
                                return pj_error_set(err, ipath, "%s must be an object", ipath);
                        int x = pj_check_fields(r, ipath, e2b_shape ? theirs : ours, 1, err);
                        if (x < 0)
                                return x;
                        const struct pj_json *t = r;
                        char tpath[PJ_PATH_MAX];
                        snprintf(tpath, sizeof(tpath), "%s", ipath);
                        if (e2b_shape) {
                                t = pj_json_member(r, "transform");
                                if (!t)
                                        continue;
                                pj_mkpath(tpath, ipath, "transform");
                                static const char *const tf[] = { "headers" };
                                if (t->type != PJ_JSON_OBJECT)
                                        return pj_error_set(err, tpath, "%s must be an object", tpath);
                                if ((x = pj_check_fields(t, tpath, tf, 1, err)) < 0)
                                        return x;
                        }
                        const struct pj_json *hd = pj_json_member(t, "headers");
                        if (!hd)
                                continue;
                        char hdpath[PJ_PATH_MAX];
                        pj_mkpath(hdpath, tpath, "headers");
                        if ((x = headers_parse(hd, hdpath, resolved, rule, err)) < 0)
                                return x;
                }
        }
        pj_egress_rules_done(e);
        e->rules = TAKE_PTR(n.rules);
        e->n_rules = n.n_rules;
        n.n_rules = 0;
        return 0;
}

int pj_egress_rules_parse(const struct pj_json *obj, const char *path, bool e2b_shape, struct pj_egress *e,
                          struct err *err) {
        return rules_parse(obj, path, e2b_shape, false, e, err);
}

cJSON *pj_egress_rules_json(const struct pj_egress *e, bool e2b_shape) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i < e->n_rules; i++) {
                cJSON *arr = cJSON_AddArrayToObject(o, e->rules[i].host), *r = cJSON_CreateObject(), *h;
                cJSON_AddItemToArray(arr, r);
                h = cJSON_AddObjectToObject(e2b_shape ? cJSON_AddObjectToObject(r, "transform") : r, "headers");
                for (size_t k = 0; k < e->rules[i].n_headers; k++) {
                        const char *v = e->rules[i].headers[k].value;
                        if (!e2b_shape || !strstr(v, placeholder_open)) {
                                json_add_str(h, e->rules[i].headers[k].name, v);
                                continue;
                        }
                        /* E2B's own spelling of a placeholder: ${e2b.secrets.<name>} */
                        struct strbuf b = STRBUF_INIT(0);
                        for (const char *p = v, *q; *p; p = q + sizeof(placeholder_open) - 1) {
                                q = strstr(p, placeholder_open);
                                if (!q) {
                                        strbuf_append(&b, p, strlen(p));
                                        break;
                                }
                                strbuf_append(&b, p, (size_t) (q - p));
                                strbuf_append(&b, e2b_placeholder_open, sizeof(e2b_placeholder_open) - 1);
                        }
                        json_add_strn(h, e->rules[i].headers[k].name, b.buf ? b.buf : "", b.len);
                        strbuf_done(&b);
                }
        }
        return o;
}

int pj_egress_rules_from_json(const cJSON *j, bool resolved, struct pj_egress *e, struct err *err) {
        _cleanup_free_ char *text = cJSON_PrintUnformatted(j);
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        if (!text || pj_json_parse(text, strlen(text), 4096, &root, err) < 0)
                return -EINVAL;
        int r = rules_parse(root, "rules", false, resolved, e, err);
        explicit_bzero(text, strlen(text));
        return r;
}
