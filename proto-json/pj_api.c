/* pj_api.c — strict parsing and validation of public-API request bodies.
 *
 * We carry our own small JSON reader instead of cJSON here because the
 * checks we promise users need information cJSON throws away: whether a
 * number was written as an integer (2 vs 2.0 vs 2e0), whether a string was
 * valid UTF-8, duplicate keys (a classic parser-differential trick), and the
 * byte offset of a syntax error. The reader builds a small tree; the
 * validators below walk it with the field path at hand for error messages.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "pj_api.h"
#include "strutil.h"

/* ---- errors ------------------------------------------------------------ */

_printf_(3, 4) static int fail(struct pj_error *err, const char *field, const char *fmt, ...) {
        if (err) {
                snprintf(err->field, sizeof(err->field), "%s", field ? field : "");
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err->message, sizeof(err->message), fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

/* Renders untrusted bytes for a message: printable ASCII as is (quotes and
 * backslashes escaped), anything else as \xNN, at most max_in input bytes
 * followed by "..." when cut. */
static const char *sanitize(char *buf, size_t size, const char *s, size_t n, size_t max_in) {
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

/* ---- UTF-8 ------------------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at s (at most n bytes available),
 * with its code point in *cp; 0 when ill-formed (overlong, surrogate, > U+10FFFF,
 * truncated). */
static size_t utf8_decode(const uint8_t *s, size_t n, uint32_t *cp) {
        if (n == 0)
                return 0;
        uint8_t c = s[0];
        if (c < 0x80) {
                *cp = c;
                return 1;
        }
        size_t len;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
                len = 2;
        else if (c >= 0xe0 && c <= 0xef) {
                len = 3;
                if (c == 0xe0)
                        lo = 0xa0;
                else if (c == 0xed)
                        hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
                len = 4;
                if (c == 0xf0)
                        lo = 0x90;
                else if (c == 0xf4)
                        hi = 0x8f;
        } else
                return 0;
        if (n < len)
                return 0;
        if (s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < len; i++)
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
        uint32_t v = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
        for (size_t i = 1; i < len; i++)
                v = (v << 6) | (s[i] & 0x3f);
        *cp = v;
        return len;
}

static size_t utf8_encode(uint32_t cp, char *out) {
        if (cp < 0x80) {
                out[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char) (0xc0 | (cp >> 6));
                out[1] = (char) (0x80 | (cp & 0x3f));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char) (0xe0 | (cp >> 12));
                out[1] = (char) (0x80 | ((cp >> 6) & 0x3f));
                out[2] = (char) (0x80 | (cp & 0x3f));
                return 3;
        }
        out[0] = (char) (0xf0 | (cp >> 18));
        out[1] = (char) (0x80 | ((cp >> 12) & 0x3f));
        out[2] = (char) (0x80 | ((cp >> 6) & 0x3f));
        out[3] = (char) (0x80 | (cp & 0x3f));
        return 4;
}

/* ---- the JSON reader --------------------------------------------------- */

enum jv_type { JV_NULL, JV_FALSE, JV_TRUE, JV_NUMBER, JV_STRING, JV_ARRAY, JV_OBJECT };

struct jv {
        enum jv_type type;
        char *key; /* object members: decoded key (may hold NUL; see key_len) */
        size_t key_len;
        char *str; /* strings: decoded, NUL-terminated; numbers: the literal text */
        size_t str_len;
        struct jv *child, *last, *next; /* arrays and objects: members in order */
        size_t n;                       /* number of members */
};

static void jv_free(struct jv *v) {
        /* Siblings iteratively, children recursively: depth is bounded by
         * PJ_JSON_MAX_DEPTH, width is not. */
        while (v) {
                struct jv *next = v->next;
                jv_free(v->child);
                free(v->key);
                free(v->str);
                free(v);
                v = next;
        }
}
DEFINE_TRIVIAL_CLEANUP_FUNC(struct jv *, jv_free)

struct jp {
        const uint8_t *s;
        size_t len, pos;
        struct pj_error *err;
};

static int jp_fail(struct jp *p, size_t at, const char *what) {
        return fail(p->err, "", "Malformed JSON at byte %zu: %s", at, what);
}

static void jp_ws(struct jp *p) {
        while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                                   p->s[p->pos] == '\r'))
                p->pos++;
}

static int hex4(const uint8_t *s, uint32_t *ret) {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
                uint8_t c = s[i];
                v <<= 4;
                if (c >= '0' && c <= '9')
                        v |= (uint32_t) (c - '0');
                else if (c >= 'a' && c <= 'f')
                        v |= (uint32_t) (c - 'a' + 10);
                else if (c >= 'A' && c <= 'F')
                        v |= (uint32_t) (c - 'A' + 10);
                else
                        return -EINVAL;
        }
        *ret = v;
        return 0;
}

/* At p->pos there is a '"'. */
static int jp_string(struct jp *p, char **ret, size_t *ret_len) {
        size_t start = p->pos + 1, end = start;
        while (end < p->len && p->s[end] != '"')
                end += p->s[end] == '\\' ? 2 : 1;
        if (end >= p->len)
                return jp_fail(p, p->pos, "unterminated string");

        _cleanup_free_ char *buf = xmalloc(end - start + 1);
        size_t o = 0;
        for (size_t i = start; i < end;) {
                uint8_t c = p->s[i];
                if (c < 0x20)
                        return jp_fail(p, i, "control character in string (it must be escaped)");
                if (c >= 0x80) {
                        uint32_t cp;
                        size_t l = utf8_decode(p->s + i, end - i, &cp);
                        if (l == 0)
                                return fail(p->err, "", "Invalid UTF-8 in string at byte %zu; request bodies must be UTF-8", i);
                        memcpy(buf + o, p->s + i, l);
                        o += l;
                        i += l;
                        continue;
                }
                if (c != '\\') {
                        buf[o++] = (char) c;
                        i++;
                        continue;
                }
                /* i + 1 < end holds: the scan above never ends on a backslash */
                uint8_t e = p->s[i + 1];
                switch (e) {
                case '"': case '\\': case '/':
                        buf[o++] = (char) e;
                        break;
                case 'b': buf[o++] = '\b'; break;
                case 'f': buf[o++] = '\f'; break;
                case 'n': buf[o++] = '\n'; break;
                case 'r': buf[o++] = '\r'; break;
                case 't': buf[o++] = '\t'; break;
                case 'u': {
                        uint32_t cp, lo;
                        if (end - i < 6 || hex4(p->s + i + 2, &cp) < 0)
                                return jp_fail(p, i, "invalid \\u escape");
                        if (cp >= 0xdc00 && cp <= 0xdfff)
                                return jp_fail(p, i, "unpaired UTF-16 surrogate in \\u escape");
                        if (cp >= 0xd800 && cp <= 0xdbff) {
                                if (end - i < 12 || p->s[i + 6] != '\\' || p->s[i + 7] != 'u' ||
                                    hex4(p->s + i + 8, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                                        return jp_fail(p, i, "unpaired UTF-16 surrogate in \\u escape");
                                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                                i += 6;
                        }
                        o += utf8_encode(cp, buf + o);
                        i += 6;
                        continue;
                }
                default:
                        return jp_fail(p, i, "invalid escape in string");
                }
                i += 2;
        }
        buf[o] = '\0';
        p->pos = end + 1;
        *ret_len = o;
        *ret = TAKE_PTR(buf);
        return 0;
}

static bool is_digit(uint8_t c) {
        return c >= '0' && c <= '9';
}

static int jp_number(struct jp *p, struct jv *v) {
        size_t start = p->pos, i = p->pos;
        if (i < p->len && p->s[i] == '-')
                i++;
        if (i >= p->len || !is_digit(p->s[i]))
                return jp_fail(p, start, "invalid number");
        if (p->s[i] == '0')
                i++;
        else
                while (i < p->len && is_digit(p->s[i]))
                        i++;
        if (i < p->len && p->s[i] == '.') {
                i++;
                if (i >= p->len || !is_digit(p->s[i]))
                        return jp_fail(p, start, "invalid number");
                while (i < p->len && is_digit(p->s[i]))
                        i++;
        }
        if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
                i++;
                if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
                        i++;
                if (i >= p->len || !is_digit(p->s[i]))
                        return jp_fail(p, start, "invalid number");
                while (i < p->len && is_digit(p->s[i]))
                        i++;
        }
        v->type = JV_NUMBER;
        v->str = xstrndup((const char *) p->s + start, i - start);
        v->str_len = i - start;
        p->pos = i;
        return 0;
}

static int jp_literal(struct jp *p, const char *lit, enum jv_type t, struct jv *v) {
        size_t n = strlen(lit);
        if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n) != 0)
                return jp_fail(p, p->pos, "invalid literal (expected true, false or null)");
        v->type = t;
        p->pos += n;
        return 0;
}

static void jv_append(struct jv *parent, struct jv *child) {
        if (parent->last)
                parent->last->next = child;
        else
                parent->child = child;
        parent->last = child;
        parent->n++;
}

/* depth = number of containers enclosing the value about to be read. */
static int jp_value(struct jp *p, int depth, struct jv **ret) {
        jp_ws(p);
        if (p->pos >= p->len)
                return jp_fail(p, p->pos, "unexpected end of input");

        _cleanup_(jv_freep) struct jv *v = xnew0(struct jv, 1);
        uint8_t c = p->s[p->pos];
        int r;
        if (c == '{' || c == '[') {
                bool obj = c == '{';
                if (depth + 1 > PJ_JSON_MAX_DEPTH)
                        return fail(p->err, "", "JSON nesting deeper than %d levels at byte %zu",
                                    PJ_JSON_MAX_DEPTH, p->pos);
                v->type = obj ? JV_OBJECT : JV_ARRAY;
                p->pos++;
                jp_ws(p);
                if (p->pos < p->len && p->s[p->pos] == (obj ? '}' : ']')) {
                        p->pos++;
                        *ret = TAKE_PTR(v);
                        return 0;
                }
                for (;;) {
                        _cleanup_free_ char *key = NULL;
                        size_t key_len = 0;
                        if (obj) {
                                jp_ws(p);
                                if (p->pos >= p->len || p->s[p->pos] != '"')
                                        return jp_fail(p, p->pos, "expected a string key");
                                r = jp_string(p, &key, &key_len);
                                if (r < 0)
                                        return r;
                                jp_ws(p);
                                if (p->pos >= p->len || p->s[p->pos] != ':')
                                        return jp_fail(p, p->pos, "expected ':'");
                                p->pos++;
                        }
                        struct jv *child = NULL;
                        r = jp_value(p, depth + 1, &child);
                        if (r < 0)
                                return r;
                        child->key = TAKE_PTR(key);
                        child->key_len = key_len;
                        jv_append(v, child);
                        jp_ws(p);
                        if (p->pos < p->len && p->s[p->pos] == ',') {
                                p->pos++;
                                continue;
                        }
                        if (p->pos < p->len && p->s[p->pos] == (obj ? '}' : ']')) {
                                p->pos++;
                                break;
                        }
                        return jp_fail(p, p->pos, obj ? "expected ',' or '}'" : "expected ',' or ']'");
                }
        } else if (c == '"') {
                v->type = JV_STRING;
                r = jp_string(p, &v->str, &v->str_len);
                if (r < 0)
                        return r;
        } else if (c == '-' || is_digit(c)) {
                r = jp_number(p, v);
                if (r < 0)
                        return r;
        } else if (c == 't') {
                r = jp_literal(p, "true", JV_TRUE, v);
                if (r < 0)
                        return r;
        } else if (c == 'f') {
                r = jp_literal(p, "false", JV_FALSE, v);
                if (r < 0)
                        return r;
        } else if (c == 'n') {
                r = jp_literal(p, "null", JV_NULL, v);
                if (r < 0)
                        return r;
        } else
                return jp_fail(p, p->pos, "unexpected character");
        *ret = TAKE_PTR(v);
        return 0;
}

/* Parses a whole body that must be one JSON object. empty_ok: len 0 reads as {}. */
static int parse_body(const char *body, size_t len, bool empty_ok, struct jv **ret, struct pj_error *err) {
        if (len == 0 || !body) {
                if (!empty_ok)
                        return fail(err, "", "Request body must be a JSON object");
                struct jv *v = xnew0(struct jv, 1);
                v->type = JV_OBJECT;
                *ret = v;
                return 0;
        }
        struct jp p = { .s = (const uint8_t *) body, .len = len, .err = err };
        _cleanup_(jv_freep) struct jv *root = NULL;
        int r = jp_value(&p, 0, &root);
        if (r < 0)
                return r;
        jp_ws(&p);
        if (p.pos != p.len)
                return jp_fail(&p, p.pos, "unexpected data after the JSON value");
        if (root->type != JV_OBJECT)
                return fail(err, "", "Request body must be a JSON object");
        *ret = TAKE_PTR(root);
        return 0;
}

/* ---- tree access with field paths -------------------------------------- */

#define PATH_MAX_LEN 128

static const char *mkpath(char buf[static PATH_MAX_LEN], const char *prefix, const char *key) {
        if (!prefix || !*prefix)
                snprintf(buf, PATH_MAX_LEN, "%s", key);
        else
                snprintf(buf, PATH_MAX_LEN, "%s.%s", prefix, key);
        return buf;
}

static const char *mkindex(char buf[static PATH_MAX_LEN], const char *prefix, size_t i) {
        snprintf(buf, PATH_MAX_LEN, "%s[%zu]", prefix, i);
        return buf;
}

static bool key_is(const struct jv *m, const char *key) {
        size_t n = strlen(key);
        return m->key_len == n && memcmp(m->key, key, n) == 0;
}

/* The member named key, or NULL when absent or JSON null. */
static const struct jv *member(const struct jv *obj, const char *key) {
        for (const struct jv *m = obj->child; m; m = m->next)
                if (key_is(m, key))
                        return m->type == JV_NULL ? NULL : m;
        return NULL;
}

/* Lowercase with '_' and '-' dropped: "destroy_timeout" ~ "destroyTimeout". */
static bool loosely_equal(const char *a, size_t an, const char *b) {
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
static int check_fields(const struct jv *obj, const char *prefix, const char *const *allowed, size_t n_allowed,
                        struct pj_error *err) {
        uint64_t seen = 0;
        for (const struct jv *m = obj->child; m; m = m->next) {
                size_t i;
                for (i = 0; i < n_allowed; i++)
                        if (key_is(m, allowed[i]))
                                break;
                char k[300], path[PATH_MAX_LEN];
                if (i == n_allowed) {
                        sanitize(k, sizeof(k), m->key, m->key_len, 64);
                        mkpath(path, prefix, k);
                        const char *hint = NULL;
                        if (m->key_len < 64)
                                for (size_t j = 0; j < n_allowed && !hint; j++)
                                        if (loosely_equal(m->key, m->key_len, allowed[j]))
                                                hint = allowed[j];
                        if (hint) {
                                char h[PATH_MAX_LEN];
                                return fail(err, path, "Unknown field '%s'; did you mean '%s'?", path,
                                            mkpath(h, prefix, hint));
                        }
                        return fail(err, path, "Unknown field '%s'", path);
                }
                if (seen & (UINT64_C(1) << i))
                        return fail(err, mkpath(path, prefix, allowed[i]), "Duplicate field '%s'", path);
                seen |= UINT64_C(1) << i;
        }
        return 0;
}

/* String member. 0 absent (*ret NULL), 1 present, -EINVAL. Never contains NUL. */
static int get_str(const struct jv *obj, const char *prefix, const char *key, const struct jv **ret,
                   struct pj_error *err) {
        char path[PATH_MAX_LEN];
        const struct jv *m = member(obj, key);
        *ret = NULL;
        if (!m)
                return 0;
        if (m->type != JV_STRING)
                return fail(err, mkpath(path, prefix, key), "%s must be a string", path);
        if (memchr(m->str, '\0', m->str_len))
                return fail(err, mkpath(path, prefix, key), "%s must not contain NUL characters", path);
        *ret = m;
        return 1;
}

/* Strict integer literal (no fraction, no exponent) to int64; false when not
 * an integer or outside ±10^18. */
static bool number_to_int(const struct jv *v, int64_t *ret) {
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

static int get_int(const struct jv *obj, const char *prefix, const char *key, int min, int max, bool *ret_has,
                   int *ret, struct pj_error *err) {
        char path[PATH_MAX_LEN];
        const struct jv *m = member(obj, key);
        int64_t x;
        if (!m)
                return 0;
        if (m->type != JV_NUMBER || !number_to_int(m, &x) || x < min || x > max)
                return fail(err, mkpath(path, prefix, key), "%s must be an integer between %d and %d", path, min,
                            max);
        if (ret_has)
                *ret_has = true;
        *ret = (int) x;
        return 1;
}

static int get_bool(const struct jv *obj, const char *prefix, const char *key, bool *ret_has, bool *ret,
                    struct pj_error *err) {
        char path[PATH_MAX_LEN];
        const struct jv *m = member(obj, key);
        if (!m)
                return 0;
        if (m->type != JV_TRUE && m->type != JV_FALSE)
                return fail(err, mkpath(path, prefix, key), "%s must be true or false", path);
        if (ret_has)
                *ret_has = true;
        *ret = m->type == JV_TRUE;
        return 1;
}

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

static bool is_hex24(const struct jv *v) {
        if (v->str_len != 24)
                return false;
        for (size_t i = 0; i < 24; i++)
                if (!((v->str[i] >= '0' && v->str[i] <= '9') || (v->str[i] >= 'a' && v->str[i] <= 'f')))
                        return false;
        return true;
}

static int get_hex24(const struct jv *obj, const char *key, char **ret, struct pj_error *err) {
        const struct jv *v;
        int r = get_str(obj, "", key, &v, err);
        if (r <= 0)
                return r;
        if (!is_hex24(v))
                return fail(err, key, "%s must be a 24-character lowercase hex id", key);
        *ret = xstrndup(v->str, v->str_len);
        return 1;
}

/* Display names: 1..64 code points, no C0/DEL/C1 controls and no bidi
 * override/isolate characters (they make names render misleadingly). */
static bool display_name_ok(const struct jv *v) {
        size_t chars = 0;
        if (v->str_len == 0 || v->str_len > 256)
                return false;
        for (size_t i = 0; i < v->str_len;) {
                uint32_t cp;
                size_t l = utf8_decode((const uint8_t *) v->str + i, v->str_len - i, &cp);
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
                return fail(err, f, "%s is required", f);
        size_t n = strnlen(path, 4097);
        if (n > 4096)
                return fail(err, f, "%s must be at most 4096 bytes", f);
        if (path[0] != '/')
                return fail(err, f, "%s must be an absolute path (starting with '/')", f);
        if (n == 1)
                return fail(err, f, "%s must not be the root directory '/'", f);
        for (size_t i = 0; i < n;) {
                uint32_t cp;
                size_t l = utf8_decode((const uint8_t *) path + i, n - i, &cp);
                if (l == 0)
                        return fail(err, f, "%s must be valid UTF-8", f);
                if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f))
                        return fail(err, f, "%s must not contain control characters", f);
                i += l;
        }
        for (const char *c = path + 1;;) {
                const char *slash = strchr(c, '/');
                size_t l = slash ? (size_t) (slash - c) : strlen(c);
                if (l == 0)
                        return fail(err, f, "%s must not contain empty components ('//' or a trailing '/')", f);
                if ((l == 1 && c[0] == '.') || (l == 2 && c[0] == '.' && c[1] == '.'))
                        return fail(err, f, "%s must not contain '.' or '..' components", f);
                if (l > 255)
                        return fail(err, f, "%s has a component longer than 255 bytes", f);
                if (!slash)
                        break;
                c = slash + 1;
        }
        return 0;
}

static int mount_path_check(const char *p, size_t n, struct pj_error *err) {
        const char *f = "mountPath";
        if (n > 255)
                return fail(err, f, "mountPath must be at most 255 characters");
        if (memchr(p, '\0', n) || p[0] != '/')
                return fail(err, f, "mountPath must be an absolute path (starting with '/')");
        if (n == 1)
                return fail(err, f, "mountPath must not be '/'");
        for (size_t i = 0; i < n; i++) {
                char c = p[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                      c == '.' || c == '_' || c == '-' || c == '@' || c == '+'))
                        return fail(err, f,
                                    "mountPath may only contain letters, digits, '/', '.', '_', '-', '@' and '+'");
        }
        int r = pj_sandbox_path_check(p, err, f);
        if (r < 0)
                return r;
        static const char *const reserved[] = { "/proc", "/sys", "/dev" };
        for (size_t i = 0; i < ELEMENTSOF(reserved); i++) {
                size_t l = strlen(reserved[i]);
                if (strncmp(p, reserved[i], l) == 0 && (p[l] == '\0' || p[l] == '/'))
                        return fail(err, f, "mountPath must not be %s or below it", reserved[i]);
        }
        return 0;
}

/* Cron: one field of "*", "*" "/" n, "a", "a-b", "a-b/n" items, comma
 * separated. Returns NULL when valid, else the reason (possibly in why). */
static const char *cron_field_check(const char *s, size_t n, int min, int max, char *why, size_t why_len) {
        size_t i = 0;
        if (n == 0)
                return "empty field";
        for (;;) {
                int a = min, b = max;
                bool range = false;
                if (i < n && s[i] == '*') {
                        range = true;
                        i++;
                } else {
                        for (int k = 0; k < 2; k++) {
                                size_t d = 0;
                                int v = 0;
                                while (i < n && s[i] >= '0' && s[i] <= '9' && d < 3) {
                                        v = v * 10 + (s[i] - '0');
                                        i++;
                                        d++;
                                }
                                if (d == 0 || d > 2)
                                        return "expected a number, '*' or a range";
                                if (v < min || v > max) {
                                        snprintf(why, why_len, "value %d is outside %d-%d", v, min, max);
                                        return why;
                                }
                                if (k == 1) {
                                        b = v;
                                        break;
                                }
                                a = b = v;
                                if (i < n && s[i] == '-') {
                                        range = true;
                                        i++;
                                } else
                                        break;
                        }
                        if (a > b) {
                                snprintf(why, why_len, "range %d-%d is backwards", a, b);
                                return why;
                        }
                }
                if (i < n && s[i] == '/') {
                        if (!range)
                                return "a step needs '*' or a range before '/'";
                        i++;
                        size_t d = 0;
                        int v = 0;
                        while (i < n && s[i] >= '0' && s[i] <= '9' && d < 3) {
                                v = v * 10 + (s[i] - '0');
                                i++;
                                d++;
                        }
                        if (d == 0 || d > 2 || v < 1 || v > max - min + 1)
                                return "the step after '/' must be a number within the field's range";
                }
                if (i == n)
                        return NULL;
                if (s[i] != ',')
                        return "unexpected character";
                i++;
        }
}

static int cron_check(const char *s, size_t n, char **ret_norm, struct pj_error *err) {
        static const struct {
                const char *name;
                int min, max;
        } fields[5] = {
                { "minute", 0, 59 }, { "hour", 0, 23 }, { "day-of-month", 1, 31 }, { "month", 1, 12 }, { "day-of-week", 0, 7 },
        };
        const char *f = "snapshotFrequency";
        if (n > 128)
                return fail(err, f, "snapshotFrequency must be at most 128 characters");
        char norm[130];
        size_t o = 0, i = 0;
        int k = 0;
        for (;;) {
                while (i < n && (s[i] == ' ' || s[i] == '\t'))
                        i++;
                if (i == n || k == 5)
                        break;
                size_t start = i;
                while (i < n && s[i] != ' ' && s[i] != '\t')
                        i++;
                char buf[80];
                const char *why = cron_field_check(s + start, i - start, fields[k].min, fields[k].max, buf,
                                                   sizeof(buf));
                if (why)
                        return fail(err, f, "snapshotFrequency is not a valid cron expression: %s field: %s",
                                    fields[k].name, why);
                if (o)
                        norm[o++] = ' ';
                memcpy(norm + o, s + start, i - start);
                o += i - start;
                k++;
        }
        if (k != 5 || i != n)
                return fail(err, f,
                            "snapshotFrequency must be a 5-field cron expression (minute hour day-of-month month day-of-week), e.g. \"0 */2 * * *\"");
        norm[o] = '\0';
        *ret_norm = xstrdup(norm);
        return 0;
}

/* ---- egress ------------------------------------------------------------ */

/* prefix: "egress" inside create, "" for the update body. */
static int parse_egress(const struct jv *obj, const char *prefix, bool update, struct pj_egress *ret,
                        struct pj_error *err) {
        static const char *const fields[] = { "mode", "allow" };
        char path[PATH_MAX_LEN], mpath[PATH_MAX_LEN];
        _cleanup_(pj_egress_done) struct pj_egress e = {};

        if (obj->type != JV_OBJECT)
                return fail(err, prefix, "%s must be an object with mode and allow", prefix);
        int r = check_fields(obj, prefix, fields, ELEMENTSOF(fields), err);
        if (r < 0)
                return r;

        const struct jv *mode;
        mkpath(mpath, prefix, "mode");
        r = get_str(obj, prefix, "mode", &mode, err);
        if (r < 0)
                return r;
        if (r == 0)
                return fail(err, mpath, "%s is required (open, restricted or deny_all)", mpath);
        if (pj_egress_mode_from_string(mode->str, &e.mode) < 0)
                return fail(err, mpath, "%s must be one of open, restricted, deny_all", mpath);

        mkpath(path, prefix, "allow");
        const struct jv *allow = member(obj, "allow");
        if (allow && allow->type != JV_ARRAY)
                return fail(err, path, "%s must be an array of strings", path);
        if (allow && allow->n > PJ_EGRESS_MAX_ALLOW)
                return fail(err, path, "%s must have at most %d entries", path, PJ_EGRESS_MAX_ALLOW);
        if (e.mode != PJ_EGRESS_RESTRICTED) {
                if (allow && (update || allow->n > 0))
                        return fail(err, path, "%s must be omitted unless %s is restricted", path, mpath);
        } else if (update && (!allow || allow->n == 0))
                return fail(err, path, "%s is required with at least one entry when %s is restricted", path, mpath);

        size_t idx = 0;
        for (const struct jv *a = allow ? allow->child : NULL; a; a = a->next, idx++) {
                char ipath[PATH_MAX_LEN], why[256], q[300];
                mkindex(ipath, path, idx);
                if (a->type != JV_STRING)
                        return fail(err, ipath, "%s must be a string", ipath);
                if (memchr(a->str, '\0', a->str_len))
                        return fail(err, ipath, "%s must not contain NUL characters", ipath);
                r = pj_egress_add_allow(&e, a->str, why, sizeof(why));
                if (r == -EINVAL)
                        return fail(err, ipath, "%s (\"%s\") %s", ipath,
                                    sanitize(q, sizeof(q), a->str, a->str_len, 64), why);
                if (r < 0) /* cannot happen: length was checked above */
                        return fail(err, path, "%s must have at most %d entries", path, PJ_EGRESS_MAX_ALLOW);
        }
        *ret = e;
        e = (struct pj_egress) {};
        return 0;
}

/* ---- POST /sandboxes --------------------------------------------------- */

void pj_sandbox_create_done(struct pj_sandbox_create *c) {
        if (!c)
                return;
        free(c->name);
        free(c->template_name);
        free(c->team_id);
        free(c->environment_id);
        free(c->volume_id);
        free(c->from_snapshot);
        free(c->region);
        free(c->destroy_timeout);
        pj_egress_done(&c->egress);
        free(c->mount_path);
        free(c->snapshot_mode);
        free(c->snapshot_frequency);
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
        _cleanup_(jv_freep) struct jv *root = NULL;
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c = {};
        const struct jv *v;
        int r;

        r = parse_body(body, len, true, &root, err);
        if (r < 0)
                return r;
        r = check_fields(root, "", fields, ELEMENTSOF(fields), err);
        if (r < 0)
                return r;

        r = get_str(root, "", "name", &v, err);
        if (r < 0)
                return r;
        if (v) {
                if (!display_name_ok(v))
                        return fail(err, "name", "name must be 1 to 64 characters without control characters");
                c.name = xstrdup(v->str);
        }

        r = get_str(root, "", "template", &v, err);
        if (r < 0)
                return r;
        if (v) {
                if (v->str_len < 1 || v->str_len > 64 || !all_chars_in(v->str, v->str_len, "._-"))
                        return fail(err, "template",
                                    "template must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-'");
                c.template_name = xstrdup(v->str);
        }

        if ((r = get_hex24(root, "teamId", &c.team_id, err)) < 0 ||
            (r = get_hex24(root, "environmentId", &c.environment_id, err)) < 0 ||
            (r = get_hex24(root, "volumeId", &c.volume_id, err)) < 0 ||
            (r = get_hex24(root, "fromSnapshot", &c.from_snapshot, err)) < 0)
                return r;

        r = get_str(root, "", "region", &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, "auto") != 0) {
                if (v->str_len < 1 || v->str_len > 64 || !all_chars_in(v->str, v->str_len, "-"))
                        return fail(err, "region",
                                    "region must be \"auto\", a region id or a region name (1 to 64 characters of a-z, 0-9 and '-')");
                c.region = xstrdup(v->str);
        }

        const struct jv *specs = member(root, "specs");
        if (specs) {
                static const char *const spec_fields[] = { "cpu", "memory", "disk" };
                if (specs->type != JV_OBJECT)
                        return fail(err, "specs", "specs must be an object with cpu, memory and disk");
                if ((r = check_fields(specs, "specs", spec_fields, ELEMENTSOF(spec_fields), err)) < 0 ||
                    (r = get_int(specs, "specs", "cpu", 1, 2000, &c.has_cpu, &c.cpu, err)) < 0 ||
                    (r = get_int(specs, "specs", "memory", 1, 2048, &c.has_memory, &c.memory, err)) < 0 ||
                    (r = get_int(specs, "specs", "disk", 1, 5, &c.has_disk, &c.disk, err)) < 0)
                        return r;
        }

        if ((r = get_bool(root, "", "autoDestroy", NULL, &c.auto_destroy, err)) < 0)
                return r;
        r = get_str(root, "", "destroyTimeout", &v, err);
        if (r < 0)
                return r;
        if (c.auto_destroy) {
                if (!v)
                        return fail(err, "destroyTimeout", "destroyTimeout is required when autoDestroy is true");
                for (size_t i = 0; i < ELEMENTSOF(destroy_timeouts); i++)
                        if (strcmp(v->str, destroy_timeouts[i].name) == 0) {
                                c.destroy_timeout = xstrdup(v->str);
                                c.destroy_timeout_s = destroy_timeouts[i].seconds;
                        }
                if (!c.destroy_timeout)
                        return fail(err, "destroyTimeout", "destroyTimeout must be one of 30m, 1h, 3h, 6h, 12h, 18h");
        }

        if ((r = get_bool(root, "", "oneShot", NULL, &c.one_shot, err)) < 0 ||
            (r = get_bool(root, "", "blockOutbound", &c.block_outbound_set, &c.block_outbound, err)) < 0)
                return r;

        const struct jv *egress = member(root, "egress");
        if (egress && c.block_outbound_set)
                return fail(err, "egress",
                            "Cannot set both egress and blockOutbound; use egress.mode = \"deny_all\" instead of blockOutbound");
        if (egress) {
                r = parse_egress(egress, "egress", false, &c.egress, err);
                if (r < 0)
                        return r;
                c.egress_set = true;
        } else
                c.egress.mode = c.block_outbound ? PJ_EGRESS_DENY_ALL : PJ_EGRESS_OPEN;

        if ((r = get_bool(root, "", "persistent", NULL, &c.persistent, err)) < 0 ||
            (r = get_int(root, "", "persistentDiskGB", 10, 50, &c.has_persistent_disk_gb, &c.persistent_disk_gb,
                         err)) < 0)
                return r;
        if (c.volume_id && c.persistent)
                return fail(err, "persistent",
                            "Cannot set both volumeId and persistent; volumeId attaches an existing volume, persistent creates a new one");
        if (c.volume_id && c.has_persistent_disk_gb)
                return fail(err, "persistentDiskGB",
                            "Cannot set both volumeId and persistentDiskGB; the size of an existing volume is fixed");
        if (c.has_persistent_disk_gb && !c.persistent)
                return fail(err, "persistentDiskGB", "persistentDiskGB requires persistent to be true");
        if (c.persistent && !c.has_persistent_disk_gb)
                return fail(err, "persistentDiskGB",
                            "persistentDiskGB is required when persistent is true (an integer between 10 and 50)");

        r = get_str(root, "", "mountPath", &v, err);
        if (r < 0)
                return r;
        if (v) {
                r = mount_path_check(v->str, v->str_len, err);
                if (r < 0)
                        return r;
                c.mount_path = xstrdup(v->str);
        } else
                c.mount_path = xstrdup("/workspace");

        r = get_str(root, "", "snapshotMode", &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, "manual") != 0 && strcmp(v->str, "automatic") != 0)
                return fail(err, "snapshotMode", "snapshotMode must be one of manual, automatic");
        c.snapshot_mode = xstrdup(v ? v->str : "manual");
        bool automatic = strcmp(c.snapshot_mode, "automatic") == 0;

        r = get_str(root, "", "snapshotFrequency", &v, err);
        if (r < 0)
                return r;
        if (automatic && !v)
                return fail(err, "snapshotFrequency",
                            "snapshotFrequency is required when snapshotMode is automatic (a 5-field cron expression, e.g. \"0 */2 * * *\")");
        if (!automatic && v)
                return fail(err, "snapshotFrequency",
                            "snapshotFrequency is only allowed when snapshotMode is automatic");
        if (v) {
                r = cron_check(v->str, v->str_len, &c.snapshot_frequency, err);
                if (r < 0)
                        return r;
        }

        *ret = c;
        c = (struct pj_sandbox_create) {};
        return 0;
}

/* ---- exec and code ----------------------------------------------------- */

static void env_free(char **keys, char **values, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free(keys[i]);
                free(values[i]);
        }
        free(keys);
        free(values);
}

static bool env_key_ok(const struct jv *m) {
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

struct run_common {
        int timeout_s;
        char *cwd;
        char **env_keys, **env_values;
        size_t n_env;
        bool stream;
};

static void run_common_done(struct run_common *rc) {
        free(rc->cwd);
        env_free(rc->env_keys, rc->env_values, rc->n_env);
        *rc = (struct run_common) {};
}

/* timeout_seconds, cwd, env, stream: shared by exec and code. */
static int parse_run_common(const struct jv *root, struct run_common *ret, struct pj_error *err) {
        _cleanup_(run_common_done) struct run_common rc = { .timeout_s = 30 };
        const struct jv *v;
        int r;

        if ((r = get_int(root, "", "timeout_seconds", 1, 300, NULL, &rc.timeout_s, err)) < 0)
                return r;

        r = get_str(root, "", "cwd", &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, "/") != 0) {
                r = pj_sandbox_path_check(v->str, err, "cwd");
                if (r < 0)
                        return r;
        }
        rc.cwd = xstrdup(v ? v->str : "/");

        const struct jv *env = member(root, "env");
        if (env) {
                if (env->type != JV_OBJECT)
                        return fail(err, "env", "env must be an object mapping variable names to string values");
                if (env->n > 128)
                        return fail(err, "env", "env must have at most 128 entries");
                rc.env_keys = xnew0(char *, env->n);
                rc.env_values = xnew0(char *, env->n);
                for (const struct jv *m = env->child; m; m = m->next) {
                        char path[PATH_MAX_LEN], q[300];
                        if (!env_key_ok(m))
                                return fail(err, "env",
                                            "env key '%s' is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, at most 256 characters)",
                                            sanitize(q, sizeof(q), m->key, m->key_len, 64));
                        mkpath(path, "env", m->key);
                        for (size_t i = 0; i < rc.n_env; i++)
                                if (strcmp(rc.env_keys[i], m->key) == 0)
                                        return fail(err, path, "Duplicate field '%s'", path);
                        if (m->type != JV_STRING)
                                return fail(err, path, "%s must be a string", path);
                        if (m->str_len > 32768)
                                return fail(err, path, "%s must be at most 32768 bytes", path);
                        if (memchr(m->str, '\0', m->str_len))
                                return fail(err, path, "%s must not contain NUL characters", path);
                        rc.env_keys[rc.n_env] = xstrdup(m->key);
                        rc.env_values[rc.n_env] = xstrdup(m->str);
                        rc.n_env++;
                }
        }

        if ((r = get_bool(root, "", "stream", NULL, &rc.stream, err)) < 0)
                return r;
        *ret = rc;
        rc = (struct run_common) {};
        return 0;
}

void pj_exec_done(struct pj_exec *e) {
        if (!e)
                return;
        free(e->cmd);
        free(e->cwd);
        env_free(e->env_keys, e->env_values, e->n_env);
        *e = (struct pj_exec) {};
}

int pj_exec_parse(const char *body, size_t len, struct pj_exec *ret, struct pj_error *err) {
        static const char *const fields[] = { "cmd", "timeout_seconds", "cwd", "env", "stream" };
        _cleanup_(jv_freep) struct jv *root = NULL;
        _cleanup_(run_common_done) struct run_common rc = {};
        const struct jv *cmd;
        int r;

        if ((r = parse_body(body, len, false, &root, err)) < 0 ||
            (r = check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0)
                return r;
        r = get_str(root, "", "cmd", &cmd, err);
        if (r < 0)
                return r;
        if (!cmd)
                return fail(err, "cmd", "cmd is required");
        if (cmd->str_len == 0)
                return fail(err, "cmd", "cmd must not be empty");
        if (cmd->str_len > 65536)
                return fail(err, "cmd", "cmd must be at most 65536 bytes");
        if ((r = parse_run_common(root, &rc, err)) < 0)
                return r;

        *ret = (struct pj_exec) {
                .cmd = xstrdup(cmd->str),
                .timeout_s = rc.timeout_s,
                .cwd = TAKE_PTR(rc.cwd),
                .env_keys = TAKE_PTR(rc.env_keys),
                .env_values = TAKE_PTR(rc.env_values),
                .n_env = rc.n_env,
                .stream = rc.stream,
        };
        rc.n_env = 0;
        return 0;
}

void pj_code_done(struct pj_code *c) {
        if (!c)
                return;
        free(c->language);
        free(c->code);
        free(c->cwd);
        env_free(c->env_keys, c->env_values, c->n_env);
        *c = (struct pj_code) {};
}

int pj_code_parse(const char *body, size_t len, struct pj_code *ret, struct pj_error *err) {
        static const char *const fields[] = { "language", "code", "timeout_seconds", "cwd", "env", "stream" };
        _cleanup_(jv_freep) struct jv *root = NULL;
        _cleanup_(run_common_done) struct run_common rc = {};
        const struct jv *lang, *code;
        int r;

        if ((r = parse_body(body, len, false, &root, err)) < 0 ||
            (r = check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0)
                return r;
        r = get_str(root, "", "language", &lang, err);
        if (r < 0)
                return r;
        if (!lang)
                return fail(err, "language", "language is required (python or node)");
        if (strcmp(lang->str, "python") != 0 && strcmp(lang->str, "node") != 0)
                return fail(err, "language", "language must be one of python, node");
        r = get_str(root, "", "code", &code, err);
        if (r < 0)
                return r;
        if (!code)
                return fail(err, "code", "code is required");
        if (code->str_len == 0)
                return fail(err, "code", "code must not be empty");
        if (code->str_len > 1024 * 1024)
                return fail(err, "code", "code must be at most 1048576 bytes (1 MiB)");
        if ((r = parse_run_common(root, &rc, err)) < 0)
                return r;

        *ret = (struct pj_code) {
                .language = xstrdup(lang->str),
                .code = xstrdup(code->str),
                .timeout_s = rc.timeout_s,
                .cwd = TAKE_PTR(rc.cwd),
                .env_keys = TAKE_PTR(rc.env_keys),
                .env_values = TAKE_PTR(rc.env_values),
                .n_env = rc.n_env,
                .stream = rc.stream,
        };
        rc.n_env = 0;
        return 0;
}

/* ---- PUT /sandboxes/{id}/egress ---------------------------------------- */

void pj_egress_update_done(struct pj_egress_update *u) {
        if (!u)
                return;
        pj_egress_done(&u->egress);
}

int pj_egress_update_parse(const char *body, size_t len, struct pj_egress_update *ret, struct pj_error *err) {
        _cleanup_(jv_freep) struct jv *root = NULL;
        struct pj_egress e = {};
        int r;

        if ((r = parse_body(body, len, false, &root, err)) < 0 ||
            (r = parse_egress(root, "", true, &e, err)) < 0)
                return r;
        ret->egress = e;
        return 0;
}

/* ---- snapshots and volumes --------------------------------------------- */

static int get_slug40(const struct jv *root, char **ret, struct pj_error *err) {
        const struct jv *v;
        int r = get_str(root, "", "name", &v, err);
        if (r < 0)
                return r;
        if (!v)
                return fail(err, "name", "name is required");
        if (v->str_len < 1 || v->str_len > 40 || !all_chars_in(v->str, v->str_len, "-"))
                return fail(err, "name", "name must be 1 to 40 characters of lowercase letters, digits and '-'");
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
        _cleanup_(jv_freep) struct jv *root = NULL;
        char *name = NULL;
        int r;

        if ((r = parse_body(body, len, false, &root, err)) < 0 ||
            (r = check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 || (r = get_slug40(root, &name, err)) < 0)
                return r;
        ret->name = name;
        return 0;
}

void pj_volume_create_done(struct pj_volume_create *v) {
        if (!v)
                return;
        free(v->name);
        free(v->region);
        free(v->type);
        free(v->team_id);
        *v = (struct pj_volume_create) {};
}

int pj_volume_create_parse(const char *body, size_t len, struct pj_volume_create *ret, struct pj_error *err) {
        static const char *const fields[] = { "name", "sizeGB", "region", "type", "teamId" };
        _cleanup_(jv_freep) struct jv *root = NULL;
        _cleanup_(pj_volume_create_done) struct pj_volume_create c = {};
        const struct jv *v;
        int r;

        if ((r = parse_body(body, len, false, &root, err)) < 0 ||
            (r = check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 || (r = get_slug40(root, &c.name, err)) < 0)
                return r;
        r = get_int(root, "", "sizeGB", 10, 50, NULL, &c.size_gb, err);
        if (r < 0)
                return r;
        if (r == 0)
                return fail(err, "sizeGB", "sizeGB is required (an integer between 10 and 50)");
        r = get_hex24(root, "region", &c.region, err);
        if (r < 0)
                return r;
        if (r == 0)
                return fail(err, "region", "region is required (a region id from GET /sandboxes/regions)");
        r = get_str(root, "", "type", &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, "web") != 0 && strcmp(v->str, "sandbox") != 0)
                return fail(err, "type", "type must be one of web, sandbox");
        c.type = xstrdup(v ? v->str : "web");
        if ((r = get_hex24(root, "teamId", &c.team_id, err)) < 0)
                return r;
        *ret = c;
        c = (struct pj_volume_create) {};
        return 0;
}

/* ---- POST /sandboxes/{id}/files/batch ---------------------------------- */


/* Decoded size of standard base64 text of n bytes (padded or not), or
 * SIZE_MAX when no valid base64 text has that shape. */
static size_t b64_decoded_size(const char *s, size_t n) {
        size_t pad = 0;
        if (n > 0 && s[n - 1] == '=')
                pad++;
        if (n > 1 && s[n - 2] == '=')
                pad++;
        if (pad > 0 && n % 4 != 0)
                return SIZE_MAX;
        size_t body = n - pad;
        if (body % 4 == 1)
                return SIZE_MAX;
        return body / 4 * 3 + (body % 4 == 0 ? 0 : body % 4 - 1);
}

/* Standard alphabet, '=' padding optional but only at the end, no whitespace. */
static int b64_decode(const char *s, size_t n, uint8_t **ret, size_t *ret_len) {
        size_t out_len = b64_decoded_size(s, n);
        if (out_len == SIZE_MAX)
                return -EINVAL;
        size_t body = n;
        while (body > 0 && s[body - 1] == '=')
                body--;
        _cleanup_free_ uint8_t *out = out_len ? xmalloc(out_len) : NULL;
        size_t o = 0;
        uint32_t acc = 0;
        int bits = 0;
        for (size_t i = 0; i < body; i++) {
                int v = base64_char_value(s[i]);
                if (v < 0)
                        return -EINVAL;
                acc = (acc << 6) | (uint32_t) v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[o++] = (uint8_t) (acc >> bits);
                        acc &= (1u << bits) - 1;
                }
        }
        *ret_len = o;
        *ret = TAKE_PTR(out);
        return 0;
}

void pj_files_batch_done(struct pj_files_batch *b) {
        if (!b)
                return;
        for (size_t i = 0; i < b->n_files; i++) {
                free(b->files[i].path);
                free(b->files[i].data);
                free(b->file_errors[i]);
        }
        free(b->files);
        free(b->file_errors);
        *b = (struct pj_files_batch) {};
}

/* Fills f from one entry; returns a per-file error message (allocated) or NULL. */
static char *batch_entry(const struct jv *ent, const char *ipath, size_t max_file_bytes, struct pj_batch_file *f) {
        static const char *const fields[] = { "path", "content_base64" };
        struct pj_error e = {};
        const struct jv *path, *content;

        if (ent->type != JV_OBJECT)
                return xasprintf("%s must be an object with path and content_base64", ipath);
        /* Echo the path back in results even when something else is wrong. */
        path = member(ent, "path");
        if (path && path->type == JV_STRING && !memchr(path->str, '\0', path->str_len))
                f->path = xstrdup(path->str);

        if (check_fields(ent, ipath, fields, ELEMENTSOF(fields), &e) < 0 || get_str(ent, ipath, "path", &path, &e) < 0)
                return xstrdup(e.message);
        char p[PATH_MAX_LEN];
        mkpath(p, ipath, "path");
        if (!path)
                return xasprintf("%s is required", p);
        if (pj_sandbox_path_check(path->str, &e, p) < 0)
                return xstrdup(e.message);

        mkpath(p, ipath, "content_base64");
        if (get_str(ent, ipath, "content_base64", &content, &e) < 0)
                return xstrdup(e.message);
        if (!content)
                return xasprintf("%s is required", p);
        size_t size = b64_decoded_size(content->str, content->str_len);
        if (size != SIZE_MAX && size > max_file_bytes)
                return xasprintf("%s is %zu bytes; the limit is %zu bytes per file", ipath, size, max_file_bytes);
        if (b64_decode(content->str, content->str_len, &f->data, &f->len) < 0)
                return xasprintf("%s is not valid base64 (standard alphabet A-Z a-z 0-9 + /, '=' padding, no line breaks)",
                                 p);
        return NULL;
}

int pj_files_batch_parse(const char *body, size_t len, size_t max_file_bytes, size_t max_total_bytes,
                         struct pj_files_batch *ret, struct pj_error *err) {
        static const char *const fields[] = { "files" };
        _cleanup_(jv_freep) struct jv *root = NULL;
        _cleanup_(pj_files_batch_done) struct pj_files_batch b = {};
        int r;

        if ((r = parse_body(body, len, false, &root, err)) < 0 ||
            (r = check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0)
                return r;
        const struct jv *files = member(root, "files");
        if (!files)
                return fail(err, "files", "files is required (an array of {path, content_base64})");
        if (files->type != JV_ARRAY)
                return fail(err, "files", "files must be an array of {path, content_base64}");
        if (files->n < 1 || files->n > 100)
                return fail(err, "files", "files must contain between 1 and 100 entries");

        b.files = xnew0(struct pj_batch_file, files->n);
        b.file_errors = xnew0(char *, files->n);
        b.n_files = files->n;
        size_t total = 0, i = 0;
        for (const struct jv *ent = files->child; ent; ent = ent->next, i++) {
                char ipath[PATH_MAX_LEN];
                struct pj_batch_file *f = &b.files[i];
                mkindex(ipath, "files", i);
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
                        return fail(err, "files", "files add up to more than %zu bytes; the limit is %zu bytes per batch",
                                    max_total_bytes, max_total_bytes);
        }
        *ret = b;
        b = (struct pj_files_batch) {};
        return 0;
}
