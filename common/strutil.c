/* strutil.c — see strutil.h. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "cleanup.h"
#include "strutil.h"

int strscpy(char *dst, const char *src, size_t size) {
        size_t n;

        if (size == 0)
                return -E2BIG;
        n = strnlen(src, size);
        if (n == size) {
                memcpy(dst, src, size - 1);
                dst[size - 1] = 0;
                return -E2BIG;
        }
        memcpy(dst, src, n + 1);
        return n > INT_MAX ? INT_MAX : (int) n;
}

bool startswith(const char *s, const char *prefix) {
        return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool endswith(const char *s, const char *suffix) {
        size_t ls = strlen(s), lx = strlen(suffix);
        return ls >= lx && memcmp(s + ls - lx, suffix, lx) == 0;
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

/* Leading decimal digits of s into *ret; *end points past them. At least one
 * digit required. -ERANGE on uint64 overflow. */
static int parse_u64_prefix(const char *s, uint64_t *ret, const char **end) {
        uint64_t v = 0;
        const char *p = s;

        if (!is_digit(*p))
                return -EINVAL;
        for (; is_digit(*p); p++) {
                unsigned d = (unsigned) (*p - '0');
                if (v > (UINT64_MAX - d) / 10)
                        return -ERANGE;
                v = v * 10 + d;
        }
        *ret = v;
        *end = p;
        return 0;
}

int safe_atoi64(const char *s, int64_t *ret) {
        bool neg = false;
        const char *end;
        uint64_t u;
        int r;

        if (!s)
                return -EINVAL;
        if (*s == '-') {
                neg = true;
                s++;
        }
        r = parse_u64_prefix(s, &u, &end);
        if (r == -ERANGE) {
                /* Still junk-check so "999...9x" is -EINVAL, not -ERANGE. */
                while (is_digit(*s))
                        s++;
                return *s ? -EINVAL : -ERANGE;
        }
        if (r < 0)
                return r;
        if (*end)
                return -EINVAL;
        if (neg) {
                if (u > (uint64_t) INT64_MAX + 1)
                        return -ERANGE;
                *ret = u == (uint64_t) INT64_MAX + 1 ? INT64_MIN : -(int64_t) u;
        } else {
                if (u > (uint64_t) INT64_MAX)
                        return -ERANGE;
                *ret = (int64_t) u;
        }
        return 0;
}

static int mul_u64(uint64_t a, uint64_t b, uint64_t *ret) {
        if (b != 0 && a > UINT64_MAX / b)
                return -ERANGE;
        *ret = a * b;
        return 0;
}

static int parse_with_units(const char *s, uint64_t *ret, const char *const *names,
                            const uint64_t *factors, size_t n_units, uint64_t bare_factor) {
        const char *end;
        uint64_t v = 0, f = 0, out;
        int r;

        if (!s)
                return -EINVAL;
        r = parse_u64_prefix(s, &v, &end);
        if (r == -ERANGE) {
                /* Overflow, unless the rest is junk anyway (checked below). */
                for (end = s; is_digit(*end); end++)
                        ;
        } else if (r < 0)
                return r;
        if (*end == 0)
                f = bare_factor;
        else
                for (size_t i = 0; i < n_units; i++)
                        if (strcasecmp(end, names[i]) == 0) {
                                f = factors[i];
                                break;
                        }
        if (f == 0)
                return -EINVAL;
        if (r == -ERANGE)
                return r;
        r = mul_u64(v, f, &out);
        if (r < 0)
                return r;
        *ret = out;
        return 0;
}

int parse_size(const char *s, uint64_t *ret) {
        static const char *const names[] = { "K", "M", "G", "T" };
        static const uint64_t factors[] = { 1ULL << 10, 1ULL << 20, 1ULL << 30, 1ULL << 40 };
        return parse_with_units(s, ret, names, factors, ELEMENTSOF(names), 1);
}

int parse_duration_ms(const char *s, uint64_t *ret) {
        static const char *const names[] = { "ms", "s", "m", "h", "d" };
        static const uint64_t factors[] = { 1, 1000, 60 * 1000, 3600 * 1000, 86400 * 1000 };
        return parse_with_units(s, ret, names, factors, ELEMENTSOF(names), 1000);
}

int unhexchar(char c) {
        if (is_digit(c))
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

/* The n bytes at s are all lowercase hex digits. */
static bool lowerhex_n(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!(is_digit(s[i]) || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

bool hex_exactly(const char *s, size_t n) {
        return s && strnlen(s, n + 1) == n && lowerhex_n(s, n);
}

bool hexid_valid_n(const char *s, size_t len) {
        return s && len == HEXID_LEN && lowerhex_n(s, len);
}

bool hexid_valid(const char *s) {
        return s && hexid_valid_n(s, strnlen(s, HEXID_LEN + 1));
}

/* getrandom() blocks only until the pool is initialised once after boot;
 * afterwards it cannot fail for sizes we use except on EINTR. */
void random_fill(void *p, size_t n) {
        uint8_t *b = p;
        while (n > 0) {
                ssize_t k = getrandom(b, n, 0);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        abort();
                }
                b += k;
                n -= (size_t) k;
        }
}

void hex_encode(const uint8_t *in, size_t n, char *out) {
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < n; i++) {
                out[2 * i] = hex[in[i] >> 4];
                out[2 * i + 1] = hex[in[i] & 15];
        }
        out[2 * n] = 0;
}

void hexid_new(char out[HEXID_LEN + 1]) {
        uint8_t b[HEXID_LEN / 2];
        random_fill(b, sizeof(b));
        hex_encode(b, sizeof(b), out);
}

void random_token(char *out, size_t nbytes_of_entropy) {
        _cleanup_free_ uint8_t *b = xmalloc(nbytes_of_entropy);
        random_fill(b, nbytes_of_entropy);
        hex_encode(b, nbytes_of_entropy, out);
        OPENSSL_cleanse(b, nbytes_of_entropy);
}

void sha256_hex(const void *data, size_t len, char out[65]) {
        uint8_t md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;

        /* Fails only on allocation failure inside libcrypto. */
        if (EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
                oom();
        hex_encode(md, 32, out);
}

bool streq_const(const char *a, const char *b) {
        size_t la, lb;

        if (!a || !b)
                return false;
        la = strlen(a);
        lb = strlen(b);
        if (la != lb)
                return false;
        return CRYPTO_memcmp(a, b, la) == 0;
}

void strv_free(char **v) {
        if (!v)
                return;
        for (char **p = v; *p; p++)
                free(*p);
        free(v);
}

size_t strv_length(char *const *v) {
        size_t n = 0;
        if (v)
                while (v[n])
                        n++;
        return n;
}

char **strv_copy(char *const *v) {
        size_t n;
        char **c;

        if (!v)
                return NULL;
        n = strv_length(v);
        c = xnew0(char *, n + 1);
        for (size_t i = 0; i < n; i++)
                c[i] = xstrdup(v[i]);
        return c;
}

void strbuf_init(struct strbuf *b, size_t max) {
        *b = (struct strbuf) { .max = max };
}

int strbuf_append(struct strbuf *b, const void *data, size_t len) {
        size_t room = SIZE_MAX - 1 - b->len, want;
        int r = 0;

        if (b->truncated)
                return -ENOBUFS;
        if (b->max > 0)
                room = b->max > b->len ? b->max - b->len : 0;
        if (len > room) {
                len = room;
                b->truncated = true;
                r = -ENOBUFS;
        }
        want = b->len + len + 1;
        if (want > b->cap) {
                size_t ncap = b->cap ? b->cap : 64;
                while (ncap < want)
                        ncap = ncap > SIZE_MAX / 2 ? want : ncap * 2;
                if (b->max > 0 && ncap > b->max + 1)
                        ncap = b->max + 1;
                b->buf = xrealloc(b->buf, ncap);
                b->cap = ncap;
        }
        if (len > 0)
                memcpy(b->buf + b->len, data, len);
        b->len += len;
        b->buf[b->len] = 0;
        return r;
}

int strbuf_printf(struct strbuf *b, const char *fmt, ...) {
        _cleanup_free_ char *s = NULL;
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (n < 0)
                oom();
        return strbuf_append(b, s, (size_t) n);
}

void strbuf_reset(struct strbuf *b) {
        b->len = 0;
        b->truncated = false;
        if (b->buf)
                b->buf[0] = 0;
}

void strbuf_done(struct strbuf *b) {
        if (!b)
                return;
        free(b->buf);
        strbuf_init(b, b->max);
}

size_t strbuf_drain(struct strbuf *b, size_t *off, char *buf, size_t max) {
        size_t n = b->len - *off;
        if (n > max)
                n = max;
        memcpy(buf, b->buf + *off, n);
        *off += n;
        if (*off == b->len)
                b->len = *off = 0;
        return n;
}

char *strbuf_steal(struct strbuf *b) {
        char *s = b->buf ? b->buf : xstrdup("");
        b->buf = NULL;
        strbuf_init(b, b->max);
        return s;
}

static const char b64chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const void *data, size_t len, size_t *ret_len) {
        const uint8_t *in = data;
        size_t olen, i, o = 0;
        char *out;

        if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
                oom();
        olen = (len + 2) / 3 * 4;
        out = xmalloc(olen + 1);
        for (i = 0; i + 2 < len; i += 3) {
                uint32_t v = (uint32_t) in[i] << 16 | (uint32_t) in[i + 1] << 8 | in[i + 2];
                out[o++] = b64chars[v >> 18];
                out[o++] = b64chars[(v >> 12) & 63];
                out[o++] = b64chars[(v >> 6) & 63];
                out[o++] = b64chars[v & 63];
        }
        if (i < len) {
                uint32_t v = (uint32_t) in[i] << 16 | (i + 1 < len ? (uint32_t) in[i + 1] << 8 : 0);
                out[o++] = b64chars[v >> 18];
                out[o++] = b64chars[(v >> 12) & 63];
                out[o++] = i + 1 < len ? b64chars[(v >> 6) & 63] : '=';
                out[o++] = '=';
        }
        out[o] = 0;
        if (ret_len)
                *ret_len = o;
        return out;
}

int base64_char_value(char c) {
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

/* Number of trailing '=' that count as padding: at most two. */
static size_t base64_pad(const char *s, size_t len) {
        size_t pad = 0;
        while (pad < 2 && pad < len && s[len - 1 - pad] == '=')
                pad++;
        return pad;
}

size_t base64_decoded_size(const char *s, size_t len, unsigned flags) {
        size_t pad = base64_pad(s, len), body;

        if ((pad > 0 || !(flags & BASE64_PAD_OPTIONAL)) && len % 4 != 0)
                return SIZE_MAX;
        body = len - pad;
        if (body % 4 == 1)
                return SIZE_MAX;
        return body / 4 * 3 + (body % 4 == 0 ? 0 : body % 4 - 1);
}

int base64_decode_flags(const char *s, size_t len, unsigned flags, uint8_t **ret, size_t *ret_len) {
        _cleanup_free_ uint8_t *out = NULL;
        size_t out_len = base64_decoded_size(s, len, flags), body = len - base64_pad(s, len), o = 0;
        uint32_t acc = 0;
        int bits = 0;

        if (out_len == SIZE_MAX)
                return -EINVAL;
        out = xmalloc(out_len + 1);
        for (size_t i = 0; i < body; i++) {
                int v = base64_char_value(s[i]);
                if (v < 0)
                        return -EINVAL;
                acc = acc << 6 | (uint32_t) v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[o++] = (uint8_t) (acc >> bits);
                        acc &= (1u << bits) - 1;
                }
        }
        /* Non-zero unused bits mean a second spelling of the same bytes. */
        if (acc != 0 && !(flags & BASE64_PAD_OPTIONAL))
                return -EINVAL;
        out[o] = 0;
        *ret = TAKE_PTR(out);
        if (ret_len)
                *ret_len = o;
        return 0;
}

size_t utf8_decode(const char *str, size_t n, uint32_t *ret_cp) {
        const uint8_t *s = (const uint8_t *) str;
        uint8_t c, lo = 0x80, hi = 0xbf;
        size_t len;
        uint32_t v;

        if (n == 0)
                return 0;
        c = s[0];
        if (c < 0x80) {
                *ret_cp = c;
                return 1;
        }
        /* Table 3-7 of the Unicode standard: the second byte's range rules
         * out overlongs (e0, f0), surrogates (ed) and > U+10FFFF (f4). */
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
        if (n < len || s[1] < lo || s[1] > hi)
                return 0;
        for (size_t i = 2; i < len; i++)
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
        v = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
        for (size_t i = 1; i < len; i++)
                v = v << 6 | (s[i] & 0x3f);
        *ret_cp = v;
        return len;
}

size_t utf8_encode(uint32_t cp, char out[static 4]) {
        if (cp < 0x80) {
                out[0] = (char) cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char) (0xc0 | cp >> 6);
                out[1] = (char) (0x80 | (cp & 0x3f));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char) (0xe0 | cp >> 12);
                out[1] = (char) (0x80 | (cp >> 6 & 0x3f));
                out[2] = (char) (0x80 | (cp & 0x3f));
                return 3;
        }
        out[0] = (char) (0xf0 | cp >> 18);
        out[1] = (char) (0x80 | (cp >> 12 & 0x3f));
        out[2] = (char) (0x80 | (cp >> 6 & 0x3f));
        out[3] = (char) (0x80 | (cp & 0x3f));
        return 4;
}

bool utf8_valid(const char *s, size_t len) {
        return utf8_first_invalid(s, len) == len;
}

size_t utf8_first_invalid(const char *s, size_t len) {
        size_t i = 0;

        while (i < len) {
                uint32_t cp;
                size_t n = (uint8_t) s[i] < 0x80 ? 1 : utf8_decode(s + i, len - i, &cp);
                if (n == 0)
                        return i;
                i += n;
        }
        return len;
}

size_t utf8_copy_trunc(char *dst, size_t size, const char *src) {
        size_t len = strnlen(src, size);
        if (len == size) {
                /* Too long: keep whole characters only, at most size - 1 bytes. */
                len = size - 1;
                size_t keep = utf8_first_invalid(src, len);
                if (keep < len) {
                        /* The sequence that starts at keep is cut by the limit (or invalid). */
                        len = keep;
                }
        }
        memcpy(dst, src, len);
        dst[len] = 0;
        return len;
}

void format_rfc3339_ms(int64_t ms, char out[32]) {
        const int64_t max = INT64_C(253402300799999); /* 9999-12-31T23:59:59.999Z */
        struct tm tm;
        time_t t;

        if (ms < 0)
                ms = 0;
        if (ms > max)
                ms = max;
        t = (time_t) (ms / 1000);
        gmtime_r(&t, &tm);
        snprintf(out, 32, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (ms % 1000));
}

static int64_t clock_ms(clockid_t id) {
        struct timespec ts;
        clock_gettime(id, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t now_ms(void) { return clock_ms(CLOCK_REALTIME); }
int64_t mono_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

void cond_init_monotonic(pthread_cond_t *cond) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(cond, &ca);
        pthread_condattr_destroy(&ca);
}

char *path_beside_self(const char *name) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
                return NULL;
        self[n] = 0;
        char *slash = strrchr(self, '/');
        return slash ? xasprintf("%.*s/%s", (int) (slash - self), self, name) : NULL;
}
