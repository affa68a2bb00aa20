/* strutil.h — bounded string helpers, number/unit parsing, ids, tokens, base64, time.
 *
 * Conventions: int returns are >= 0 on success and -errno on failure; out
 * parameters (ret*) are left untouched on failure. Anything returned as a
 * pointer is heap memory owned by the caller unless stated otherwise; all
 * allocation aborts on OOM (see cleanup.h).
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>

/* Copies src into dst (size bytes) and always NUL-terminates when size > 0.
 * Returns strlen(src) when it fit, -E2BIG when truncated (or size == 0). */
int strscpy(char *dst, const char *src, size_t size);

bool startswith(const char *s, const char *prefix);
bool endswith(const char *s, const char *suffix);

/* Whole string in base 10: optional '-', then digits. No whitespace, no '+',
 * no trailing junk -> -EINVAL; out of int64 range -> -ERANGE. */
int safe_atoi64(const char *s, int64_t *ret);

/* "512", "64K", "50M", "2G", "1T" (binary units, suffix case-insensitive).
 * No sign, no fraction, no whitespace -> -EINVAL; overflow -> -ERANGE. */
int parse_size(const char *s, uint64_t *ret);

/* "250ms", "30s", "5m", "2h", "1d"; a bare number is seconds.
 * Same strictness as parse_size; result in milliseconds. */
int parse_duration_ms(const char *s, uint64_t *ret);

/* s is exactly n lowercase hex digits (NULL -> false): Docker's container ids (64), ... */
bool hex_exactly(const char *s, size_t n);
/* Our object ids: exactly 24 lowercase hex characters (12 random bytes).
 * hexid_valid is the one check for them (NULL -> false); hexid_valid_n
 * checks len bytes that need not be NUL-terminated. */
#define HEXID_LEN 24
bool hexid_valid(const char *s);
bool hexid_valid_n(const char *s, size_t len);
void hexid_new(char out[HEXID_LEN + 1]);

/* [A-Za-z0-9], whatever the locale says. */
static inline bool ascii_alnum(char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* An HTTP token character (RFC 9110 tchar): field names, methods. Never NUL. */
static inline bool http_tchar(unsigned char c) {
        return ascii_alnum((char) c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Value 0..15 of a hex digit (either case), -1 for anything else. */
int unhexchar(char c);
/* Lowercase hex of in[0..n) into out (2n + 1 bytes, NUL-terminated). */
void hex_encode(const uint8_t *in, size_t n, char *out);

/* Fills p with n bytes from getrandom(), retrying on EINTR; aborts on any other
 * failure (none is possible once the pool is initialised), so it never fails. */
void random_fill(void *p, size_t n);

/* Lowercase hex of nbytes_of_entropy bytes from getrandom(); out must hold
 * 2 * nbytes_of_entropy + 1 bytes. Hex is url-safe and never needs escaping. */
void random_token(char *out, size_t nbytes_of_entropy);
/* "<the directory of this process's executable>/<name>" (xmalloc'd), or NULL when
 * /proc/self/exe cannot be read: what a build tree keeps beside its binaries. */
char *path_beside_self(const char *name);

/* Lowercase hex SHA-256 of data. */
void sha256_hex(const void *data, size_t len, char out[65]);

/* Equality of two secrets. Different lengths return false at once (the length
 * is not secret); equal lengths are compared in constant time. NULL never
 * equals anything. */
bool streq_const(const char *a, const char *b);

/* NULL-terminated string vectors. strv_free and strv_length accept NULL. */
void strv_free(char **v);
size_t strv_length(char *const *v);
char **strv_copy(char *const *v);   /* NULL in -> NULL out */
static inline void strv_freep(char ***v) { strv_free(*v); }
#define _cleanup_strv_free_ __attribute__((cleanup(strv_freep)))

/* The one growable byte buffer with a hard cap; use it wherever output of
 * untrusted size is collected. buf is NULL until the first append and is
 * always NUL-terminated afterwards; max counts content bytes (0 = unlimited).
 * The buffer owns buf; declare it _cleanup_strbuf_ (or call strbuf_done) and
 * take the text out with strbuf_steal. */
struct strbuf {
        char *buf;
        size_t len, cap, max;
        bool truncated;
};
#define STRBUF_INIT(m) ((struct strbuf) { .max = (m) })
void strbuf_init(struct strbuf *b, size_t max);
/* Past max: keeps what fits, sets truncated, returns -ENOBUFS (and keeps
 * returning it for later appends). Otherwise 0. Exactly reaching max is not
 * an overflow. */
int strbuf_append(struct strbuf *b, const void *data, size_t len);
int strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Empties b (len 0, not truncated) but keeps its allocation for reuse. */
void strbuf_reset(struct strbuf *b);
/* Frees the content; b stays usable (empty, same max). NULL-safe. */
void strbuf_done(struct strbuf *b);
#define _cleanup_strbuf_ __attribute__((cleanup(strbuf_done)))
/* NUL-terminated content (never NULL), ownership moves to the caller; b is
 * reset to empty with the same max. */
char *strbuf_steal(struct strbuf *b);
/* A reader's step through b: copies up to max bytes from *off into buf; once all of b is out,
 * b is emptied (kept allocated) for the next chunk. Returns the bytes copied. */
size_t strbuf_drain(struct strbuf *b, size_t *off, char *buf, size_t max);

/* Standard alphabet, padded. Result is NUL-terminated; *ret_len (optional)
 * excludes the NUL. */
char *base64_encode(const void *data, size_t len, size_t *ret_len);
/* Value 0..63 of a standard-alphabet base64 character, -1 for anything else ('=' included). */
int base64_char_value(char c);

/* The one base64 decoder (standard alphabet A-Z a-z 0-9 + /, no whitespace,
 * no URL-safe characters, '=' only at the end).
 *   flags 0: strict RFC 4648: length a multiple of 4, padding required, the
 *            unused bits of the last character zero.
 *   BASE64_PAD_OPTIONAL: padding may be left out ("aGVsbG8" = "aGVsbG8="),
 *            and, as common encoders' peers do, unused bits are ignored. If
 *            padding is present it must still complete a group of 4.
 * -EINVAL on anything else; *ret untouched then. *ret gets one extra NUL byte
 * past *ret_len so text payloads can be used as strings. */
#define BASE64_PAD_OPTIONAL 1u
int base64_decode_flags(const char *s, size_t len, unsigned flags, uint8_t **ret, size_t *ret_len);
static inline int base64_decode(const char *s, size_t len, uint8_t **ret, size_t *ret_len) {
        return base64_decode_flags(s, len, 0, ret, ret_len);
}
/* Decoded size of base64 text of len bytes under flags, judged from its
 * length and padding only (characters are not checked), or SIZE_MAX when no
 * valid text has that shape. Lets a caller enforce a size limit before
 * anything is allocated. */
size_t base64_decoded_size(const char *s, size_t len, unsigned flags);

/* The one UTF-8 decoder: RFC 3629, no overlong forms, no surrogates, nothing
 * above U+10FFFF. NUL bytes count as valid (U+0000); callers that need C
 * strings check that. */
/* Length (1..4) of the well-formed sequence at the start of s (n bytes
 * available) with its code point in *ret_cp; 0 when ill-formed or truncated
 * (or n == 0), *ret_cp untouched then. */
size_t utf8_decode(const char *s, size_t n, uint32_t *ret_cp);
/* Writes cp (at most U+10FFFF, not a surrogate) to out; returns 1..4. */
size_t utf8_encode(uint32_t cp, char out[static 4]);
bool utf8_valid(const char *s, size_t len);
/* Offset of the first byte that starts an invalid sequence, or len. */
size_t utf8_first_invalid(const char *s, size_t len);
/* Copies the C string src into dst (size > 0), cut if it does not fit, but never inside a
 * character: a partial UTF-8 sequence at the cut is dropped. Returns the bytes copied. */
size_t utf8_copy_trunc(char *dst, size_t size, const char *src);

/* "2026-12-02T11:14:53.123Z". ms is clamped to years 1970..9999. */
void format_rfc3339_ms(int64_t ms, char out[32]);
int64_t now_ms(void);   /* CLOCK_REALTIME */
int64_t mono_ms(void);  /* CLOCK_MONOTONIC */
/* pthread_cond_init with CLOCK_MONOTONIC as the clock of its timed waits, so deadlines built
 * from clock_gettime(CLOCK_MONOTONIC) survive wall-clock jumps. */
void cond_init_monotonic(pthread_cond_t *cond);
