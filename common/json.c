/* json.c — see json.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "json.h"
#include "strutil.h"

/* Largest integer a double holds such that no other integer rounds to it. */
#define JSON_EXACT_INT_MAX ((INT64_C(1) << 53) - 1)
/* cJSON prints doubles with "%1.15g" and accepts the result when it compares
 * equal within DBL_EPSILON relative error, so 16+ digit integers come out
 * rounded ("9.00719925474099e+15"). Beyond 15 digits we emit raw digits. */
#define JSON_PRINT_EXACT_MAX INT64_C(999999999999999)

static bool is_json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* What cJSON does not check (it treats every byte <= 0x20 as whitespace,
 * passes raw control bytes in strings and turns \u0000 into a C string end)
 * plus the nesting and value limits, in one pass before cJSON allocates.
 * Values are bounded from above by 1 + containers + commas outside strings:
 * every value but the first starts a container or follows a comma. */
static int prescan(const char *buf, size_t len, int max_depth, size_t max_values, struct err *err) {
        size_t bad = utf8_first_invalid(buf, len), values = 1;
        bool in_str = false, esc = false;
        int depth = 0;

        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) buf[i];

                if (i == bad)
                        goto invalid_utf8;
                if (in_str) {
                        if (esc) {
                                esc = false;
                                if (c == 'u' && len - i > 4 && memcmp(buf + i + 1, "0000", 4) == 0)
                                        return err_set(err, -EINVAL, "Malformed JSON at byte %zu: \\u0000 is not allowed", i - 1);
                        } else if (c == '\\')
                                esc = true;
                        else if (c == '"')
                                in_str = false;
                        else if (c < 0x20) {
                                return err_set(err, -EINVAL, "Malformed JSON at byte %zu: control character in string", i);
                        }
                        continue;
                }
                if ((c == ',' || c == '[' || c == '{') && ++values > max_values)
                        return err_set(err, -EINVAL, "JSON document has more than %zu values (at byte %zu); the limit is %zu",
                                       max_values, i, max_values);
                if (c == '"')
                        in_str = true;
                else if (c == '[' || c == '{') {
                        if (++depth > max_depth)
                                return err_set(err, -EINVAL, "JSON nested too deeply (max %d)", max_depth);
                } else if (c == ']' || c == '}') {
                        if (depth > 0)
                                depth--;
                } else if (c < 0x20 && !is_json_ws((char) c)) {
                        return err_set(err, -EINVAL, "Malformed JSON at byte %zu", i);
                }
        }
        return 0;

invalid_utf8:
        return err_set(err, -EINVAL, "Malformed JSON at byte %zu: invalid UTF-8", bad);
}

int json_parse(const char *buf, size_t len, size_t max_len, int max_depth, cJSON **ret, struct err *err) {
        return json_parse_n(buf, len, max_len, max_depth, JSON_MAX_VALUES, ret, err);
}

int json_parse_n(const char *buf, size_t len, size_t max_len, int max_depth, size_t max_values, cJSON **ret,
                 struct err *err) {
        const char *end = NULL;
        cJSON *j;
        int r;

        err_clear(err);
        if (len > max_len)
                return err_set(err, -EMSGSIZE, "JSON document too large (%zu bytes, max %zu)", len, max_len);
        if (max_depth > CJSON_NESTING_LIMIT)
                max_depth = CJSON_NESTING_LIMIT;
        r = prescan(buf, len, max_depth, max_values, err);
        if (r < 0)
                return r;
        if (len == 0)
                return err_set(err, -EINVAL, "Malformed JSON at byte 0: empty document");
        j = cJSON_ParseWithLengthOpts(buf, len, &end, false);
        if (!j) {
                /* cJSON also returns NULL when malloc fails; we cannot tell,
                 * and a syntax error is by far the likelier cause. */
                size_t pos = end && end >= buf && end <= buf + len ? (size_t) (end - buf) : 0;
                return err_set(err, -EINVAL, "Malformed JSON at byte %zu", pos);
        }
        for (size_t pos = (size_t) (end - buf); pos < len; pos++)
                if (!is_json_ws(buf[pos])) {
                        cJSON_Delete(j);
                        return err_set(err, -EINVAL, "Malformed JSON at byte %zu: trailing data", pos);
                }
        *ret = j;
        return 0;
}

char *json_print(const cJSON *j) {
        char *s;

        if (!j)
                return xstrdup("null");
        s = xnonnull(cJSON_PrintUnformatted(j));
        return s;
}

static cJSON *checked(cJSON *item) {
        if (!item)
                oom();
        return item;
}

cJSON *json_add_str(cJSON *o, const char *k, const char *v) {
        if (!v)
                return checked(cJSON_AddNullToObject(o, k));
        return checked(cJSON_AddStringToObject(o, k, v));
}

cJSON *json_add_strn(cJSON *o, const char *k, const char *v, size_t len) {
        if (!len || !memchr(v, 0, len)) {
                _cleanup_free_ char *copy = xstrndup(len ? v : "", len);
                return checked(cJSON_AddStringToObject(o, k, copy));
        }
        /* Escapes as cJSON's printer does: ", \\ and control characters; the rest verbatim. */
        struct strbuf b;
        strbuf_init(&b, 0);
        strbuf_append(&b, "\"", 1);
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char) v[i];
                const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\b' ? "\\b" : c == '\f' ? "\\f" :
                                c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
                if (e)
                        strbuf_append(&b, e, 2);
                else if (c < 0x20)
                        strbuf_printf(&b, "\\u%04x", c);
                else
                        strbuf_append(&b, v + i, 1);
        }
        strbuf_append(&b, "\"", 1);
        _cleanup_free_ char *raw = strbuf_steal(&b);
        return checked(cJSON_AddRawToObject(o, k, raw));
}

cJSON *json_add_int(cJSON *o, const char *k, int64_t v) {
        if (v > JSON_PRINT_EXACT_MAX || v < -JSON_PRINT_EXACT_MAX) {
                char digits[32];
                snprintf(digits, sizeof(digits), "%" PRId64, v);
                return checked(cJSON_AddRawToObject(o, k, digits));
        }
        return checked(cJSON_AddNumberToObject(o, k, (double) v));
}

cJSON *json_add_bool(cJSON *o, const char *k, bool v) {
        return checked(cJSON_AddBoolToObject(o, k, v));
}

const char *json_get_str(const cJSON *o, const char *k) {
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsString(i) ? i->valuestring : NULL;
}

bool json_get_int(const cJSON *o, const char *k, int64_t *ret) {
        const cJSON *i = cJSON_GetObjectItemCaseSensitive(o, k);
        double d;

        if (cJSON_IsRaw(i)) {
                int64_t v;
                if (!i->valuestring || safe_atoi64(i->valuestring, &v) < 0)
                        return false;
                *ret = v;
                return true;
        }
        if (!cJSON_IsNumber(i))
                return false;
        d = i->valuedouble;
        if (!isfinite(d) || d != trunc(d) || d > (double) JSON_EXACT_INT_MAX || d < -(double) JSON_EXACT_INT_MAX)
                return false;
        *ret = (int64_t) d;
        return true;
}

void json_add_time(cJSON *o, const char *k, int64_t ms) {
        if (ms) {
                char buf[32];
                format_rfc3339_ms(ms, buf);
                json_add_str(o, k, buf);
        } else
                cJSON_AddNullToObject(o, k);
}

void json_add_members(cJSON *o, const void *rec, const struct json_member *m, size_t n) {
        const char *base = rec;
        for (size_t i = 0; i < n; i++) {
                const void *f = base + m[i].off;
                int64_t v = 0;
                switch (m[i].kind) {
                case JSON_STR:
                        json_add_str(o, m[i].key, *(char *const *) f);
                        break;
                case JSON_CHARS:
                        json_add_str(o, m[i].key, (const char *) f);
                        break;
                case JSON_INT:
                        memcpy(&v, f, sizeof(v));
                        json_add_int(o, m[i].key, v);
                        break;
                case JSON_BOOL:
                        json_add_bool(o, m[i].key, *(const bool *) f);
                        break;
                case JSON_TIME:
                        memcpy(&v, f, sizeof(v));
                        json_add_time(o, m[i].key, v);
                        break;
                case JSON_SIZE:
                        memcpy(&v, f, sizeof(v));
                        if (v >= 0)
                                json_add_int(o, m[i].key, v);
                        else
                                cJSON_AddNullToObject(o, m[i].key);
                        break;
                }
        }
}
