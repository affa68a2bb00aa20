/* pj_json.c — the strict JSON reader. See pj_json.h. */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "cleanup.h"
#include "pj_json.h"
#include "strutil.h"

struct pj_json *pj_json_free(struct pj_json *v) {
        /* Siblings iteratively, children recursively: depth is bounded by
         * PJ_JSON_MAX_DEPTH, width is not. */
        while (v) {
                struct pj_json *next = v->next;
                pj_json_free(v->child);
                free(v->key);
                free(v->str);
                free(v);
                v = next;
        }
        return NULL;
}

struct jp {
        const uint8_t *s;
        size_t len, pos;
        size_t nodes, max_nodes;
        struct err *err;
};

static int jp_fail(struct jp *p, size_t at, const char *what) {
        return pj_error_set(p->err, "", "Malformed JSON at byte %zu: %s", at, what);
}

static void jp_ws(struct jp *p) {
        while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
                                   p->s[p->pos] == '\r'))
                p->pos++;
}

static int hex4(const uint8_t *s, uint32_t *ret) {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
                int d = unhexchar((char) s[i]);
                if (d < 0)
                        return -EINVAL;
                v = v << 4 | (uint32_t) d;
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
                        size_t l = utf8_decode((const char *) p->s + i, end - i, &cp);
                        if (l == 0)
                                return pj_error_set(p->err, "", "Invalid UTF-8 in string at byte %zu; request bodies must be UTF-8", i);
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

static int jp_number(struct jp *p, struct pj_json *v) {
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
        v->type = PJ_JSON_NUMBER;
        v->str = xstrndup((const char *) p->s + start, i - start);
        v->str_len = i - start;
        p->pos = i;
        return 0;
}

static int jp_literal(struct jp *p, const char *lit, enum pj_json_type t, struct pj_json *v) {
        size_t n = strlen(lit);
        if (p->len - p->pos < n || memcmp(p->s + p->pos, lit, n) != 0)
                return jp_fail(p, p->pos, "invalid literal (expected true, false or null)");
        v->type = t;
        p->pos += n;
        return 0;
}

static void json_append(struct pj_json *parent, struct pj_json *child) {
        if (parent->last)
                parent->last->next = child;
        else
                parent->child = child;
        parent->last = child;
        parent->n++;
}

/* depth = number of containers enclosing the value about to be read. */
static int jp_value(struct jp *p, int depth, struct pj_json **ret) {
        jp_ws(p);
        if (p->pos >= p->len)
                return jp_fail(p, p->pos, "unexpected end of input");

        /* Counted before the node exists: a body of a million tiny values
         * stops here after max_nodes small allocations. */
        if (p->nodes >= p->max_nodes)
                return pj_error_set(p->err, "",
                               "JSON document has more than %zu values (at byte %zu); the limit is %zu values per request body",
                               p->max_nodes, p->pos, p->max_nodes);
        p->nodes++;

        _cleanup_(pj_json_freep) struct pj_json *v = xnew0(struct pj_json, 1);
        uint8_t c = p->s[p->pos];
        int r = 0;
        if (c == '{' || c == '[') {
                bool obj = c == '{';
                if (depth + 1 > PJ_JSON_MAX_DEPTH)
                        return pj_error_set(p->err, "", "JSON nesting deeper than %d levels at byte %zu",
                                    PJ_JSON_MAX_DEPTH, p->pos);
                v->type = obj ? PJ_JSON_OBJECT : PJ_JSON_ARRAY;
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
                        struct pj_json *child = NULL;
                        r = jp_value(p, depth + 1, &child);
                        if (r < 0)
                                return r;
                        child->key = TAKE_PTR(key);
                        child->key_len = key_len;
                        json_append(v, child);
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
                v->type = PJ_JSON_STRING;
                r = jp_string(p, &v->str, &v->str_len);
        } else if (c == '-' || is_digit(c))
                r = jp_number(p, v);
        else if (c == 't')
                r = jp_literal(p, "true", PJ_JSON_TRUE, v);
        else if (c == 'f')
                r = jp_literal(p, "false", PJ_JSON_FALSE, v);
        else if (c == 'n')
                r = jp_literal(p, "null", PJ_JSON_NULL, v);
        else
                return jp_fail(p, p->pos, "unexpected character");
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        return 0;
}

int pj_json_parse(const char *buf, size_t len, size_t max_nodes, struct pj_json **ret, struct err *err) {
        struct jp p = { .s = (const uint8_t *) buf, .len = buf ? len : 0, .max_nodes = max_nodes, .err = err };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = jp_value(&p, 0, &root);
        if (r < 0)
                return r;
        jp_ws(&p);
        if (p.pos != p.len)
                return jp_fail(&p, p.pos, "unexpected data after the JSON value");
        *ret = TAKE_PTR(root);
        return 0;
}

int pj_json_parse_object(const char *body, size_t len, bool empty_ok, struct pj_json **ret, struct err *err) {
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r;

        if (len == 0 || !body) {
                if (!empty_ok)
                        return pj_error_set(err, "", "Request body must be a JSON object");
                root = xnew0(struct pj_json, 1);
                root->type = PJ_JSON_OBJECT;
                *ret = TAKE_PTR(root);
                return 0;
        }
        r = pj_json_parse(body, len, PJ_JSON_MAX_NODES, &root, err);
        if (r < 0)
                return r;
        if (root->type != PJ_JSON_OBJECT)
                return pj_error_set(err, "", "Request body must be a JSON object");
        *ret = TAKE_PTR(root);
        return 0;
}

bool pj_json_key_is(const struct pj_json *m, const char *key) {
        size_t n = strlen(key);
        return m->key_len == n && memcmp(m->key, key, n) == 0;
}

const struct pj_json *pj_json_member(const struct pj_json *obj, const char *key) {
        for (const struct pj_json *m = obj->child; m; m = m->next)
                if (pj_json_key_is(m, key))
                        return m->type == PJ_JSON_NULL ? NULL : m;
        return NULL;
}

