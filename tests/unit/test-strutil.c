/* Unit tests for common/strutil.c. */
#include <errno.h>
#include <stdlib.h>

#include "cleanup.h"
#include "strutil.h"
#include "testlib.h"

TEST(strscpy_fits_truncates_terminates) {
        char b[6];
        ASSERT_EQ(strscpy(b, "hello", sizeof(b)), 5); /* exact fit */
        ASSERT_STREQ(b, "hello");
        ASSERT_EQ(strscpy(b, "hello!", sizeof(b)), -E2BIG);
        ASSERT_STREQ(b, "hello");
        ASSERT_EQ(strscpy(b, "", sizeof(b)), 0);
        ASSERT_STREQ(b, "");
        b[0] = 'x';
        ASSERT_EQ(strscpy(b, "abc", 1), -E2BIG);
        ASSERT_STREQ(b, "");
        b[0] = 'x';
        ASSERT_EQ(strscpy(b, "abc", 0), -E2BIG);
        ASSERT_EQ(b[0], 'x'); /* size 0: nothing written */
}

/* Cases of a two-string predicate and what it must answer. */
struct pred_case { const char *a, *b; bool want; };

static void check_pred(const char *name, bool (*pred)(const char *, const char *), const struct pred_case *c, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (pred(c[i].a, c[i].b) != c[i].want)
                        test_fail(__FILE__, __LINE__, "%s(%s%s%s, %s%s%s) is not %s", name, c[i].a ? "\"" : "",
                                  c[i].a ? c[i].a : "NULL", c[i].a ? "\"" : "", c[i].b ? "\"" : "", c[i].b ? c[i].b : "NULL",
                                  c[i].b ? "\"" : "", c[i].want ? "true" : "false");
}

TEST(starts_ends_with) {
        static const struct pred_case starts[] = {
                { "foobar", "foo", true }, { "foo", "foo", true }, { "foo", "", true },
                { "fo", "foo", false },    { "", "a", false },
        };
        static const struct pred_case ends[] = {
                { "foobar", "bar", true }, { "bar", "bar", true }, { "", "", true },
                { "ar", "bar", false },    { "barx", "bar", false },
        };
        check_pred("startswith", startswith, starts, ELEMENTSOF(starts));
        check_pred("endswith", endswith, ends, ELEMENTSOF(ends));
}

TEST(safe_atoi64_strict) {
        int64_t v = 7;
        ASSERT_EQ(safe_atoi64("0", &v), 0);
        ASSERT_EQ(v, 0);
        ASSERT_EQ(safe_atoi64("-42", &v), 0);
        ASSERT_EQ(v, -42);
        ASSERT_EQ(safe_atoi64("9223372036854775807", &v), 0);
        ASSERT_TRUE(v == INT64_MAX);
        ASSERT_EQ(safe_atoi64("-9223372036854775808", &v), 0);
        ASSERT_TRUE(v == INT64_MIN);
        v = 7;
        ASSERT_EQ(safe_atoi64("9223372036854775808", &v), -ERANGE);
        ASSERT_EQ(safe_atoi64("-9223372036854775809", &v), -ERANGE);
        ASSERT_EQ(safe_atoi64("99999999999999999999", &v), -ERANGE);
        ASSERT_EQ(safe_atoi64("99999999999999999999x", &v), -EINVAL);
        ASSERT_EQ(v, 7); /* untouched on failure */
        const char *bad[] = { "", "-", "+1", " 1", "1 ", "1x", "0x10", "1.0", "--1", "1e3", NULL };
        for (int i = 0; bad[i]; i++)
                ASSERT_EQ(safe_atoi64(bad[i], &v), -EINVAL);
        ASSERT_EQ(safe_atoi64(NULL, &v), -EINVAL);
        ASSERT_EQ(v, 7);
}

struct unit_case { const char *text; uint64_t want; };

/* Each text parses (0) to its value; each of erange is -ERANGE and each of einval -EINVAL,
 * and those leave the out value untouched. */
static void check_units(int (*parse)(const char *, uint64_t *), const struct unit_case *ok, size_t n_ok,
                        const char *const *erange, const char *const *einval) {
        uint64_t v = 1;
        for (size_t i = 0; i < n_ok; i++) {
                int r = parse(ok[i].text, &v);
                if (r != 0 || v != ok[i].want)
                        test_fail(__FILE__, __LINE__, "\"%s\": %d, %llu; want 0, %llu", ok[i].text, r,
                                  (unsigned long long) v, (unsigned long long) ok[i].want);
        }
        v = 9;
        for (int i = 0; erange[i]; i++)
                ASSERT_EQ(parse(erange[i], &v), -ERANGE);
        for (int i = 0; einval[i]; i++)
                ASSERT_EQ(parse(einval[i], &v), -EINVAL);
        ASSERT_EQ(v, 9);
}

TEST(parse_size_units) {
        static const struct unit_case ok[] = {
                { "512", 512 },          { "64K", 65536 },       { "64k", 65536 },
                { "50M", 50ULL << 20 },  { "2G", 2ULL << 30 },   { "3T", 3ULL << 40 },
                { "0", 0 },              { "18446744073709551615", UINT64_MAX },
        };
        static const char *const erange[] = { "18446744073709551616", "16777216T" /* 2^64 */,
                                              "99999999999999999999G", NULL };
        static const char *const bad[] = { "", "K", "-1", "-1K", "+1", "1.5G", "1 K", " 1", "1KB", "1KiB", "1X", "1GG", "99999999999999999999Q", NULL };
        check_units(parse_size, ok, ELEMENTSOF(ok), erange, bad);
}

TEST(parse_duration_units) {
        static const struct unit_case ok[] = {
                { "250ms", 250 },   { "30s", 30000 },    { "30", 30000 },   { "5m", 300000 },
                { "2h", 7200000 },  { "1d", 86400000 },  { "0ms", 0 },
        };
        static const char *const erange[] = { "18446744073709551615s", "213503982335d", "18446744073709551616", NULL };
        static const char *const bad[] = { "", "s", "-1s", "1.5s", "1 s", "1w", "1sec", "1msx", "1mm", NULL };
        check_units(parse_duration_ms, ok, ELEMENTSOF(ok), erange, bad);
}

TEST(hexid) {
        char a[HEXID_LEN + 1], b[HEXID_LEN + 1];
        hexid_new(a);
        hexid_new(b);
        ASSERT_EQ(strlen(a), 24);
        ASSERT_TRUE(hexid_valid(a));
        ASSERT_TRUE(strcmp(a, b) != 0);
        ASSERT_TRUE(hexid_valid("0123456789abcdef01234567"));
        ASSERT_FALSE(hexid_valid("0123456789ABCDEF01234567"));
        ASSERT_FALSE(hexid_valid("0123456789abcdef0123456"));
        ASSERT_FALSE(hexid_valid("0123456789abcdef012345678"));
        ASSERT_FALSE(hexid_valid("0123456789abcdef0123456g"));
        ASSERT_FALSE(hexid_valid(""));
        ASSERT_FALSE(hexid_valid(NULL));
}

TEST(random_token_hex) {
        char t[65], u[65];
        memset(t, 'x', sizeof(t));
        random_token(t, 32);
        random_token(u, 32);
        ASSERT_EQ(strlen(t), 64);
        for (int i = 0; i < 64; i++)
                ASSERT_TRUE(strchr("0123456789abcdef", t[i]) != NULL);
        ASSERT_TRUE(strcmp(t, u) != 0);
        char z[1] = { 'x' };
        random_token(z, 0);
        ASSERT_EQ(z[0], 0);
}

TEST(sha256) {
        char h[65];
        sha256_hex("", 0, h);
        ASSERT_STREQ(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        sha256_hex("abc", 3, h);
        ASSERT_STREQ(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(streq_const_semantics) {
        static const struct pred_case cases[] = {
                { "secret", "secret", true },   { "", "", true },    { "secret", "secreT", false },
                { "secret", "secret2", false }, { "", "x", false },  { NULL, "x", false },
                { NULL, NULL, false },
        };
        check_pred("streq_const", streq_const, cases, ELEMENTSOF(cases));
}

TEST(strv) {
        char *src[] = { "a", "", "ccc", NULL };
        char **c = strv_copy(src);
        ASSERT_EQ(strv_length(c), 3);
        ASSERT_STREQ(c[2], "ccc");
        ASSERT_TRUE(c[0] != src[0]);
        ASSERT_NULL(c[3]);
        strv_free(c);
        ASSERT_EQ(strv_length(NULL), 0);
        ASSERT_NULL(strv_copy(NULL));
        strv_free(NULL);
        char *empty[] = { NULL };
        _cleanup_strv_free_ char **e = strv_copy(empty);
        ASSERT_NOT_NULL(e);
        ASSERT_EQ(strv_length(e), 0);
}

TEST(strbuf_cap_and_steal) {
        struct strbuf b;
        strbuf_init(&b, 10);
        ASSERT_EQ(strbuf_append(&b, "hello", 5), 0);
        ASSERT_EQ(strbuf_printf(&b, "%d", 12345), 0); /* exactly max */
        ASSERT_EQ(b.len, 10);
        ASSERT_FALSE(b.truncated);
        ASSERT_STREQ(b.buf, "hello12345");
        ASSERT_EQ(strbuf_append(&b, "x", 1), -ENOBUFS);
        ASSERT_TRUE(b.truncated);
        ASSERT_STREQ(b.buf, "hello12345");
        strbuf_done(&b);
        ASSERT_NULL(b.buf);

        strbuf_init(&b, 8);
        ASSERT_EQ(strbuf_append(&b, "abcdef", 6), 0);
        ASSERT_EQ(strbuf_printf(&b, "%s", "ghijkl"), -ENOBUFS); /* keeps what fits */
        ASSERT_STREQ(b.buf, "abcdefgh");
        ASSERT_EQ(strbuf_append(&b, "", 0), -ENOBUFS); /* sticky */
        char *s = strbuf_steal(&b);
        ASSERT_STREQ(s, "abcdefgh");
        free(s);
        ASSERT_NULL(b.buf);
        ASSERT_FALSE(b.truncated);
        ASSERT_EQ(b.max, 8);
        s = strbuf_steal(&b); /* never appended: empty string, not NULL */
        ASSERT_STREQ(s, "");
        free(s);

        /* Unlimited, growing well past the first allocation, binary data. */
        strbuf_init(&b, 0);
        for (int i = 0; i < 10000; i++)
                ASSERT_EQ(strbuf_append(&b, "\0z", 2), 0);
        ASSERT_EQ(b.len, 20000);
        ASSERT_EQ(b.buf[19999], 'z');
        ASSERT_EQ(b.buf[20000], 0);
        strbuf_done(&b);
}

TEST(base64_round_trip_all_lengths) {
        uint8_t data[64];
        for (size_t i = 0; i < sizeof(data); i++)
                data[i] = (uint8_t) (i * 37 + 250);
        for (size_t len = 0; len <= 64; len++) {
                size_t elen = 99, dlen = 99;
                _cleanup_free_ char *e = base64_encode(data, len, &elen);
                _cleanup_free_ uint8_t *d = NULL;
                ASSERT_EQ(elen, (len + 2) / 3 * 4);
                ASSERT_EQ(strlen(e), elen);
                ASSERT_EQ(base64_decode(e, elen, &d, &dlen), 0);
                ASSERT_EQ(dlen, len);
                ASSERT_TRUE(memcmp(d, data, len) == 0);
                ASSERT_EQ(d[dlen], 0);
        }
        _cleanup_free_ char *e = base64_encode("foobar", 6, NULL);
        ASSERT_STREQ(e, "Zm9vYmFy");
        _cleanup_free_ char *e2 = base64_encode("fo", 2, NULL);
        ASSERT_STREQ(e2, "Zm8=");
        _cleanup_free_ char *e3 = base64_encode("\xfb\xff", 2, NULL);
        ASSERT_STREQ(e3, "+/8=");
}

TEST(base64_rejects_bad_input) {
        const char *bad[] = { "Zm9", "Zm9vY", "Zm9v\n", " Zm9v", "Zm9vYmF=y", "Zm==Zm9v", "Z===", "====",
                              "Zm9-", "Zm9_", "Zm9v YmFy", "Zm9=", "Zm8/", "Zn==", "Zm9vYm==", NULL };
        uint8_t *d = (uint8_t *) 0x1;
        size_t n = 77;
        for (int i = 0; bad[i]; i++) {
                if (strcmp(bad[i], "Zm8/") == 0) {
                        /* valid: 3 bytes */
                        _cleanup_free_ uint8_t *ok = NULL;
                        ASSERT_EQ(base64_decode(bad[i], strlen(bad[i]), &ok, NULL), 0);
                        continue;
                }
                if (base64_decode(bad[i], strlen(bad[i]), &d, &n) != -EINVAL)
                        test_fail(__FILE__, __LINE__, "accepted '%s'", bad[i]);
        }
        ASSERT_TRUE(d == (uint8_t *) 0x1);
        ASSERT_EQ(n, 77);
        /* Embedded NUL within the given length is just a bad character. */
        ASSERT_EQ(base64_decode("Zm\0v", 4, &d, &n), -EINVAL);
        /* Empty is the empty string. */
        _cleanup_free_ uint8_t *z = NULL;
        ASSERT_EQ(base64_decode("", 0, &z, &n), 0);
        ASSERT_EQ(n, 0);
}

TEST(utf8_validation) {
        ASSERT_TRUE(utf8_valid("", 0));
        ASSERT_TRUE(utf8_valid("plain", 5));
        ASSERT_TRUE(utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80", 15));
        ASSERT_TRUE(utf8_valid("\xef\xbf\xbf", 3));        /* U+FFFF */
        ASSERT_TRUE(utf8_valid("\xf4\x8f\xbf\xbf", 4));    /* U+10FFFF */
        ASSERT_TRUE(utf8_valid("a\0b", 3));
        ASSERT_FALSE(utf8_valid("\xc0\xaf", 2));           /* overlong '/' */
        ASSERT_FALSE(utf8_valid("\xe0\x80\xaf", 3));       /* overlong */
        ASSERT_FALSE(utf8_valid("\xf0\x80\x80\xaf", 4));   /* overlong */
        ASSERT_FALSE(utf8_valid("\xed\xa0\x80", 3));       /* surrogate */
        ASSERT_FALSE(utf8_valid("\xf4\x90\x80\x80", 4));   /* > U+10FFFF */
        ASSERT_FALSE(utf8_valid("\xf8\x88\x80\x80\x80", 5));
        ASSERT_FALSE(utf8_valid("\x80", 1));               /* lone continuation */
        ASSERT_FALSE(utf8_valid("\xc3", 1));               /* truncated */
        ASSERT_FALSE(utf8_valid("\xe2\x82", 2));
        ASSERT_FALSE(utf8_valid("\xe2\x82\xac", 2));       /* cut by len */
        ASSERT_FALSE(utf8_valid("\xc3(", 2));
        ASSERT_FALSE(utf8_valid("\xff", 1));
        ASSERT_EQ(utf8_first_invalid("ab\xff", 3), 2);
        ASSERT_EQ(utf8_first_invalid("ab", 2), 2);
}

TEST(rfc3339) {
        char b[32];
        format_rfc3339_ms(0, b);
        ASSERT_STREQ(b, "1970-01-01T00:00:00.000Z");
        format_rfc3339_ms(INT64_C(1796210093123), b);
        ASSERT_STREQ(b, "2026-12-02T11:14:53.123Z");
        format_rfc3339_ms(INT64_C(951782400999), b); /* leap day */
        ASSERT_STREQ(b, "2000-02-29T00:00:00.999Z");
        format_rfc3339_ms(-5, b);
        ASSERT_STREQ(b, "1970-01-01T00:00:00.000Z");
        format_rfc3339_ms(INT64_MAX, b);
        ASSERT_STREQ(b, "9999-12-31T23:59:59.999Z");
}

TEST(clocks) {
        int64_t a = now_ms(), m = mono_ms();
        ASSERT_TRUE(a > INT64_C(1600000000000));
        ASSERT_TRUE(m >= 0);
        usleep(20000);
        ASSERT_GE(mono_ms() - m, 15);
}

TEST(unhexchar_both_cases) {
        const char *digits = "0123456789abcdef", *upper = "ABCDEF";
        for (int i = 0; i < 16; i++)
                ASSERT_EQ(unhexchar(digits[i]), i);
        for (int i = 0; i < 6; i++)
                ASSERT_EQ(unhexchar(upper[i]), 10 + i);
        ASSERT_EQ(unhexchar('g'), -1);
        ASSERT_EQ(unhexchar('G'), -1);
        ASSERT_EQ(unhexchar('/'), -1); /* just below '0' */
        ASSERT_EQ(unhexchar(':'), -1); /* just above '9' */
        ASSERT_EQ(unhexchar('@'), -1);
        ASSERT_EQ(unhexchar('`'), -1);
        ASSERT_EQ(unhexchar('\0'), -1);
        ASSERT_EQ(unhexchar((char) 0xe0), -1);
}

TEST(hexid_valid_n_counts_bytes) {
        ASSERT_TRUE(hexid_valid_n("0123456789abcdef01234567", 24));
        /* Not NUL-terminated: only len bytes are looked at. */
        ASSERT_TRUE(hexid_valid_n("0123456789abcdef01234567zz", 24));
        ASSERT_FALSE(hexid_valid_n("0123456789abcdef0123456", 23));
        ASSERT_FALSE(hexid_valid_n("0123456789abcdef012345678", 25));
        ASSERT_FALSE(hexid_valid_n("0123456789abcdef012345\0" "7", 24)); /* embedded NUL */
        ASSERT_FALSE(hexid_valid_n("0123456789abcdef0123456A", 24));
        ASSERT_FALSE(hexid_valid_n(NULL, 24));
}

/* A content reader drains a buffer in pieces; once it is all out the buffer is empty again
 * for the next chunk, its allocation kept. */
TEST(strbuf_drain_in_pieces_then_empty) {
        _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(0);
        char out[8];
        size_t off = 0;
        ASSERT_EQ(strbuf_append(&b, "hello world", 11), 0);
        ASSERT_EQ(strbuf_drain(&b, &off, out, 5), 5);
        ASSERT_TRUE(!memcmp(out, "hello", 5));
        ASSERT_EQ(off, 5);
        ASSERT_EQ(b.len, 11);
        ASSERT_EQ(strbuf_drain(&b, &off, out, sizeof(out)), 6);
        ASSERT_TRUE(!memcmp(out, " world", 6));
        ASSERT_EQ(b.len, 0);
        ASSERT_EQ(off, 0);
        ASSERT_NOT_NULL(b.buf);
        ASSERT_EQ(strbuf_drain(&b, &off, out, sizeof(out)), 0);
        ASSERT_EQ(strbuf_append(&b, "ab", 2), 0);
        ASSERT_EQ(strbuf_drain(&b, &off, out, sizeof(out)), 2);
        ASSERT_TRUE(!memcmp(out, "ab", 2));
}

TEST(strbuf_cleanup_and_exact_cap) {
        {
                _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(4);
                ASSERT_EQ(strbuf_append(&b, "ab", 2), 0);
                ASSERT_EQ(strbuf_append(&b, "cd", 2), 0); /* cap exactly hit: no overflow */
                ASSERT_FALSE(b.truncated);
                ASSERT_EQ(b.len, 4);
                ASSERT_EQ(strbuf_append(&b, "", 0), 0);   /* nothing more: still fine */
                ASSERT_EQ(strbuf_append(&b, "e", 1), -ENOBUFS);
                ASSERT_TRUE(b.truncated);
                ASSERT_STREQ(b.buf, "abcd");
                ASSERT_TRUE(b.cap <= 5); /* never allocates past max + NUL */
        } /* freed by the cleanup helper; ASan would report a leak */
        strbuf_done(NULL);
        {
                /* reset: empty and not truncated again, allocation kept. */
                _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(4);
                strbuf_reset(&b); /* before any append: nothing to clear */
                ASSERT_NULL(b.buf);
                ASSERT_EQ(strbuf_append(&b, "abcdef", 6), -ENOBUFS);
                char *before = b.buf;
                strbuf_reset(&b);
                ASSERT_FALSE(b.truncated);
                ASSERT_EQ(b.len, 0);
                ASSERT_STREQ(b.buf, "");
                ASSERT_EQ(strbuf_append(&b, "xy", 2), 0);
                ASSERT_TRUE(b.buf == before);
                ASSERT_STREQ(b.buf, "xy");
        }
        /* One append larger than the cap keeps the prefix. */
        _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(3);
        ASSERT_EQ(strbuf_append(&b, "\0\1\2\3", 4), -ENOBUFS);
        ASSERT_EQ(b.len, 3);
        ASSERT_EQ(b.buf[2], 2);
        ASSERT_EQ(b.buf[3], 0);
}

TEST(base64_padding_optional_flag) {
        static const struct {
                const char *in;
                const char *out; /* NULL: refused */
        } cases[] = {
                { "aGVsbG8=", "hello" }, { "aGVsbG8", "hello" }, { "YQ==", "a" }, { "YQ", "a" },
                { "YWI", "ab" }, { "YWJj", "abc" }, { "", "" },
                { "a", NULL },          /* one char cannot hold a byte */
                { "YWJjZ", NULL },      /* 4n+1 chars */
                { "YQ=", NULL },        /* padding present but group incomplete */
                { "aGVsbG8===", NULL }, /* too much padding */
                { "YQ=a", NULL },       /* '=' inside */
                { "=YQ=", NULL },
                { "-_8=", NULL },       /* URL-safe alphabet */
                { "aGVs bG8=", NULL }, { "aGVsbG8=\n", NULL }, { "aGVs!G8=", NULL },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ uint8_t *d = NULL;
                size_t n = 99;
                int r = base64_decode_flags(cases[i].in, strlen(cases[i].in), BASE64_PAD_OPTIONAL, &d, &n);
                if (!cases[i].out) {
                        if (r != -EINVAL)
                                test_fail(__FILE__, __LINE__, "accepted '%s'", cases[i].in);
                        ASSERT_NULL(d);
                        ASSERT_EQ(n, 99);
                        ASSERT_EQ(base64_decoded_size(cases[i].in, strlen(cases[i].in), BASE64_PAD_OPTIONAL) == SIZE_MAX ||
                                          r == -EINVAL,
                                  1);
                        continue;
                }
                if (r != 0)
                        test_fail(__FILE__, __LINE__, "refused '%s'", cases[i].in);
                ASSERT_EQ(n, strlen(cases[i].out));
                ASSERT_TRUE(memcmp(d, cases[i].out, n) == 0);
                ASSERT_EQ(d[n], 0);
                ASSERT_EQ(base64_decoded_size(cases[i].in, strlen(cases[i].in), BASE64_PAD_OPTIONAL), n);
        }
        /* Strict mode refuses what the flag allows. */
        _cleanup_free_ uint8_t *d = NULL;
        ASSERT_EQ(base64_decode("aGVsbG8", 7, &d, NULL), -EINVAL);
        ASSERT_EQ(base64_decoded_size("aGVsbG8", 7, 0), SIZE_MAX);
        ASSERT_EQ(base64_decoded_size("aGVsbG8=", 8, 0), 5);
        /* Non-zero unused bits: strict refuses, the lenient flag ignores them. */
        ASSERT_EQ(base64_decode("YR==", 4, &d, NULL), -EINVAL);
        ASSERT_EQ(base64_decode_flags("YR==", 4, BASE64_PAD_OPTIONAL, &d, NULL), 0);
        ASSERT_EQ(d[0], 'a');
}

TEST(utf8_decode_encode) {
        uint32_t cp = 7;
        char out[4];
        static const uint32_t samples[] = { 0, 0x41, 0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfffd, 0xffff,
                                            0x10000, 0x1f600, 0x10ffff };
        for (size_t i = 0; i < ELEMENTSOF(samples); i++) {
                size_t n = utf8_encode(samples[i], out);
                ASSERT_EQ(utf8_decode(out, n, &cp), n);
                ASSERT_EQ(cp, samples[i]);
                ASSERT_TRUE(utf8_valid(out, n));
                /* Every shorter prefix of a multi-byte sequence is truncated. */
                for (size_t k = 1; k < n; k++)
                        ASSERT_EQ(utf8_decode(out, k, &cp), 0);
        }
        cp = 7;
        ASSERT_EQ(utf8_decode("", 0, &cp), 0);
        ASSERT_EQ(utf8_decode("\xc1\xbf", 2, &cp), 0);         /* overlong 2-byte */
        ASSERT_EQ(utf8_decode("\xe0\x9f\xbf", 3, &cp), 0);     /* overlong 3-byte */
        ASSERT_EQ(utf8_decode("\xf0\x8f\xbf\xbf", 4, &cp), 0); /* overlong 4-byte */
        ASSERT_EQ(utf8_decode("\xed\xa0\x80", 3, &cp), 0);     /* U+D800 */
        ASSERT_EQ(utf8_decode("\xed\xbf\xbf", 3, &cp), 0);     /* U+DFFF */
        ASSERT_EQ(utf8_decode("\xf4\x90\x80\x80", 4, &cp), 0); /* U+110000 */
        ASSERT_EQ(utf8_decode("\xf5\x80\x80\x80", 4, &cp), 0);
        ASSERT_EQ(utf8_decode("\xbf", 1, &cp), 0);             /* stray continuation */
        ASSERT_EQ(utf8_decode("\xe2\x28\xa1", 3, &cp), 0);     /* bad continuation */
        ASSERT_EQ(utf8_decode("\xe2\x82\x28", 3, &cp), 0);
        ASSERT_EQ(cp, 7);                                       /* untouched on failure */
        ASSERT_EQ(utf8_decode("\xe2\x82\xac!", 4, &cp), 3);    /* stops after one sequence */
        ASSERT_EQ(cp, 0x20ac);
        /* first_invalid points at a truncated sequence at the very end. */
        ASSERT_EQ(utf8_first_invalid("ok\xf0\x9f\x98", 5), 2);
        ASSERT_EQ(utf8_first_invalid("\xed\xa0\x80ok", 5), 0);
}

TEST(utf8_copy_trunc_never_cuts_a_character) {
        char d[6];
        ASSERT_EQ(utf8_copy_trunc(d, sizeof(d), "abc"), 3);
        ASSERT_STREQ(d, "abc");
        ASSERT_EQ(utf8_copy_trunc(d, sizeof(d), "abcde"), 5);   /* exactly fits */
        ASSERT_STREQ(d, "abcde");
        ASSERT_EQ(utf8_copy_trunc(d, sizeof(d), "abcdef"), 5);  /* ASCII cut anywhere */
        ASSERT_STREQ(d, "abcde");
        /* "abc€": the 3-byte euro sign would be cut after 2 bytes: dropped whole. */
        ASSERT_EQ(utf8_copy_trunc(d, sizeof(d), "abc\xe2\x82\xac"), 3);
        ASSERT_STREQ(d, "abc");
        ASSERT_TRUE(utf8_valid(d, strlen(d)));
        /* "ab€" fits exactly in 5 bytes. */
        ASSERT_EQ(utf8_copy_trunc(d, sizeof(d), "ab\xe2\x82\xac" "x"), 5);
        ASSERT_STREQ(d, "ab\xe2\x82\xac");
        char one[1];
        ASSERT_EQ(utf8_copy_trunc(one, sizeof(one), "x"), 0);
        ASSERT_STREQ(one, "");
}
