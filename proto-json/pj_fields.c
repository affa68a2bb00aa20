/* pj_fields.c — the field-path helpers of the public-API body parsers (pj_fields.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "json.h"
#include "pj_fields.h"
#include "strutil.h"

/* ---- quoting user text in messages ------------------------------------ */

/* Renders untrusted bytes for a message: printable ASCII as is (quotes and
 * backslashes escaped), anything else as \xNN, at most max_in input bytes
 * followed by "..." when cut. */
const char *pj_sanitize(char *buf, size_t size, const char *s, size_t n, size_t max_in) {
        size_t o = 0;
        bool cut = n > max_in;
        if (cut)
                n = max_in;
        for (size_t i = 0; i < n && o + 8 < size; i++) {
                unsigned char c = (unsigned char) s[i];
                if (c == '"' || c == '\\' || c == '\'') {
                        buf[o++] = '\\';
                        buf[o++] = (char) c;
                } else if (c >= 0x20 && c < 0x7f)
                        buf[o++] = (char) c;
                else
                        o += (size_t) snprintf(buf + o, size - o, "\\x%02x", c);
        }
        if (cut && o + 4 < size) {
                memcpy(buf + o, "...", 3);
                o += 3;
        }
        buf[o < size ? o : size - 1] = '\0';
        return buf;
}

/* ---- tree access with field paths -------------------------------------- */


const char *pj_mkpath(char buf[static PJ_PATH_MAX], const char *prefix, const char *key) {
        if (!prefix || !*prefix)
                snprintf(buf, PJ_PATH_MAX, "%s", key);
        else
                snprintf(buf, PJ_PATH_MAX, "%s.%s", prefix, key);
        return buf;
}

const char *pj_mkindex(char buf[static PJ_PATH_MAX], const char *prefix, size_t i) {
        snprintf(buf, PJ_PATH_MAX, "%s[%zu]", prefix, i);
        return buf;
}

/* Lowercase with '_' and '-' dropped: "destroy_timeout" ~ "destroyTimeout". */
static bool pj_loosely_equal(const char *a, size_t an, const char *b) {
        char x[80], y[80];
        size_t xn = 0, yn = 0;
        for (size_t i = 0; i < an && xn < sizeof(x); i++)
                if (a[i] != '_' && a[i] != '-')
                        x[xn++] = (char) ((a[i] >= 'A' && a[i] <= 'Z') ? a[i] - 'A' + 'a' : a[i]);
        for (size_t i = 0; b[i] && yn < sizeof(y); i++)
                if (b[i] != '_' && b[i] != '-')
                        y[yn++] = (char) ((b[i] >= 'A' && b[i] <= 'Z') ? b[i] - 'A' + 'a' : b[i]);
        return xn == yn && memcmp(x, y, xn) == 0;
}

/* Rejects members not in allowed[] and members given twice. */
int pj_check_fields(const struct pj_json *obj, const char *prefix, const char *const *allowed, size_t n_allowed,
                        struct err *err) {
        uint64_t seen = 0;
        for (const struct pj_json *m = obj->child; m; m = m->next) {
                size_t i;
                for (i = 0; i < n_allowed; i++)
                        if (pj_json_key_is(m, allowed[i]))
                                break;
                char k[300], path[PJ_PATH_MAX];
                if (i == n_allowed) {
                        pj_sanitize(k, sizeof(k), m->key, m->key_len, 64);
                        pj_mkpath(path, prefix, k);
                        const char *hint = NULL;
                        if (m->key_len < 64)
                                for (size_t j = 0; j < n_allowed && !hint; j++)
                                        if (pj_loosely_equal(m->key, m->key_len, allowed[j]))
                                                hint = allowed[j];
                        if (hint) {
                                char h[PJ_PATH_MAX];
                                return pj_error_set(err, path, "Unknown field '%s'; did you mean '%s'?", path,
                                            pj_mkpath(h, prefix, hint));
                        }
                        return pj_error_set(err, path, "Unknown field '%s'", path);
                }
                if (seen & (UINT64_C(1) << i))
                        return pj_error_set(err, pj_mkpath(path, prefix, allowed[i]), "Duplicate field '%s'", path);
                seen |= UINT64_C(1) << i;
        }
        return 0;
}

/* String member. 0 absent (*ret NULL), 1 present, -EINVAL. Never contains NUL. */
int pj_get_str(const struct pj_json *obj, const char *prefix, const char *key, const struct pj_json **ret,
                   struct err *err) {
        char path[PJ_PATH_MAX];
        const struct pj_json *m = pj_json_member(obj, key);
        *ret = NULL;
        if (!m)
                return 0;
        if (m->type != PJ_JSON_STRING)
                return pj_error_set(err, pj_mkpath(path, prefix, key), "%s must be a string", path);
        if (memchr(m->str, '\0', m->str_len))
                return pj_error_set(err, pj_mkpath(path, prefix, key), "%s must not contain NUL characters", path);
        *ret = m;
        return 1;
}

/* Strict integer literal (no fraction, no exponent) to int64; false when not
 * an integer or outside ±10^18. */
bool pj_number_to_int(const struct pj_json *v, int64_t *ret) {
        const char *s = v->str;
        bool neg = *s == '-';
        if (neg)
                s++;
        if (strspn(s, "0123456789") != strlen(s) || strlen(s) > 18)
                return false;
        int64_t x = 0;
        for (; *s; s++)
                x = x * 10 + (*s - '0');
        *ret = neg ? -x : x;
        return true;
}

int pj_get_int(const struct pj_json *obj, const char *prefix, const char *key, int min, int max, bool *ret_has,
                   int *ret, struct err *err) {
        char path[PJ_PATH_MAX];
        const struct pj_json *m = pj_json_member(obj, key);
        int64_t x;
        if (!m)
                return 0;
        if (m->type != PJ_JSON_NUMBER || !pj_number_to_int(m, &x) || x < min || x > max)
                return pj_error_set(err, pj_mkpath(path, prefix, key), "%s must be an integer between %d and %d", path, min,
                            max);
        if (ret_has)
                *ret_has = true;
        *ret = (int) x;
        return 1;
}

int pj_get_bool(const struct pj_json *obj, const char *prefix, const char *key, bool *ret_has, bool *ret,
                    struct err *err) {
        char path[PJ_PATH_MAX];
        const struct pj_json *m = pj_json_member(obj, key);
        if (!m)
                return 0;
        if (m->type != PJ_JSON_TRUE && m->type != PJ_JSON_FALSE)
                return pj_error_set(err, pj_mkpath(path, prefix, key), "%s must be true or false", path);
        if (ret_has)
                *ret_has = true;
        *ret = m->type == PJ_JSON_TRUE;
        return 1;
}

int pj_parse_body(const char *body, size_t len, bool empty_ok, const char *const *allowed, size_t n_allowed,
                  struct pj_json **ret, struct err *err) {
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = pj_json_parse_object(body, len, empty_ok, &root, err);
        if (r < 0)
                return r;
        if ((r = pj_check_fields(root, "", allowed, n_allowed, err)) < 0)
                return r;
        *ret = TAKE_PTR(root);
        return 0;
}

/* ---- an object of strings (metadata, environment) --------------------- */

static bool env_name_ok(const char *s, size_t n) {
        if (n == 0 || n > 256 || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
                      s[i] == '_'))
                        return false;
        return true;
}

int pj_string_map(const struct pj_json *obj, const char *field, bool env, size_t max, size_t max_key, size_t max_value,
                  char **ret_json, char ***ret_keys, char ***ret_values, size_t *ret_n, struct err *err) {
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
