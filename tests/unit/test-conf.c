/* Unit tests for common/conf.c: every getter, and hostile files. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>

#include "cleanup.h"
#include "conf.h"
#include "strutil.h"
#include "testlib.h"

static struct conf *parse_ok(const char *text) {
        struct err err = { 0 };
        struct conf *c = NULL;
        int r = conf_parse_string(text, strlen(text), "t.conf", &c, &err);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "parse failed: %s", err.message);
        return c;
}

/* Parses len bytes, expects failure with "t.conf:LINE: " + msg_part. */
static void expect_parse_error_len(const char *text, size_t len, unsigned line, const char *msg_part, int src_line) {
        char prefix[64];
        struct err err = { 0 };
        struct conf *c = NULL;
        int r = conf_parse_string(text, len, "t.conf", &c, &err);
        if (r != -EINVAL)
                test_fail(__FILE__, src_line, "expected -EINVAL, got %d", r);
        if (c)
                test_fail(__FILE__, src_line, "ret set on failure");
        snprintf(prefix, sizeof(prefix), "t.conf:%u: ", line);
        if (!startswith(err.message, prefix) || !strstr(err.message, msg_part))
                test_fail(__FILE__, src_line, "error \"%s\" lacks \"%s\" + \"%s\"", err.message, prefix, msg_part);
}
#define EXPECT_PARSE_ERROR(text, line, msg) expect_parse_error_len(text, strlen(text), line, msg, __LINE__)

#define ASSERT_ERR(r, err, line, part)                                                   \
        do {                                                                             \
                char _p[64];                                                             \
                ASSERT_EQ(r, -EINVAL);                                                   \
                snprintf(_p, sizeof(_p), "t.conf:%u: ", (unsigned) (line));             \
                if (!startswith(err, _p) || !strstr(err, part))                          \
                        test_fail(__FILE__, __LINE__, "error \"%s\" lacks \"%s\" + \"%s\"", err, _p, part); \
        } while (0)

static const char sample[] =
        "# Paddock controld\n"
        "; another comment style\n"
        "\n"
        "[server]\n"
        "listen = 127.0.0.1:8080   \n"
        "\tworkers=8\n"
        "debug = yes\n"
        "max_body = 64K\n"
        "timeout = 250ms\n"
        "motd = \"  hello # not a comment \\\"quoted\\\" \\\\ \"  # trailing comment\n"
        "empty =\n"
        "url = http://x/#frag # comment\n"
        "regions = eu-1 , us-2,ap-3\n"
        "\n"
        "[plan \"free\"]\n"
        "cpu = 1\n"
        "[plan \"pro.v2\"]\n"
        "cpu = 4\n"
        "[server]\n"
        "merged = 1\n";

TEST(getters_happy_path) {
        _cleanup_conf_free_ struct conf *c = parse_ok(sample);
        struct err err = { 0 };
        const char *s = NULL;
        int64_t i = 0;
        bool b = false;
        uint64_t u = 0;

        ASSERT_EQ(conf_get_string(c, "server", NULL, "listen", "x", 255, &s, &err), 0);
        ASSERT_STREQ(s, "127.0.0.1:8080");
        ASSERT_EQ(conf_get_int(c, "server", NULL, "workers", 1, 1, 64, &i, &err), 0);
        ASSERT_EQ(i, 8);
        ASSERT_EQ(conf_get_bool(c, "server", NULL, "debug", false, &b, &err), 0);
        ASSERT_TRUE(b);
        ASSERT_EQ(conf_get_size(c, "server", NULL, "max_body", 0, 0, UINT64_MAX, &u, &err), 0);
        ASSERT_EQ(u, 65536);
        ASSERT_EQ(conf_get_duration_ms(c, "server", NULL, "timeout", 0, 0, UINT64_MAX, &u, &err), 0);
        ASSERT_EQ(u, 250);
        ASSERT_EQ(conf_get_string(c, "server", NULL, "motd", NULL, 255, &s, &err), 0);
        ASSERT_STREQ(s, "  hello # not a comment \"quoted\" \\ ");
        ASSERT_EQ(conf_get_string(c, "server", NULL, "empty", "def", 255, &s, &err), 0);
        ASSERT_STREQ(s, "");
        ASSERT_EQ(conf_get_string(c, "server", NULL, "url", NULL, 255, &s, &err), 0);
        ASSERT_STREQ(s, "http://x/#frag");
        _cleanup_strv_free_ char **l = NULL;
        ASSERT_EQ(conf_get_list(c, "server", NULL, "regions", 8, 16, &l, &err), 3);
        ASSERT_STREQ(l[0], "eu-1");
        ASSERT_STREQ(l[1], "us-2");
        ASSERT_STREQ(l[2], "ap-3");
        ASSERT_NULL(l[3]);
        ASSERT_EQ(conf_get_int(c, "server", NULL, "merged", 0, 0, 1, &i, &err), 0);
        ASSERT_EQ(i, 1);

        _cleanup_strv_free_ char **subs = NULL;
        ASSERT_EQ(conf_subsections(c, "plan", &subs), 2);
        ASSERT_STREQ(subs[0], "free");
        ASSERT_STREQ(subs[1], "pro.v2");
        ASSERT_NULL(subs[2]);
        ASSERT_EQ(conf_get_int(c, "plan", "free", "cpu", 0, 0, 8, &i, &err), 0);
        ASSERT_EQ(i, 1);
        ASSERT_EQ(conf_get_int(c, "plan", "pro.v2", "cpu", 0, 0, 8, &i, &err), 0);
        ASSERT_EQ(i, 4);
        ASSERT_TRUE(conf_has_section(c, "server", NULL));
        ASSERT_TRUE(conf_has_section(c, "plan", "free"));
        ASSERT_FALSE(conf_has_section(c, "plan", NULL));
        ASSERT_FALSE(conf_has_section(c, "plan", "nope"));
        _cleanup_strv_free_ char **none = NULL;
        ASSERT_EQ(conf_subsections(c, "server", &none), 0);
        ASSERT_NOT_NULL(none);
        ASSERT_NULL(none[0]);

        ASSERT_EQ(conf_check_unused(c, &err), 0);
}

TEST(defaults_when_absent) {
        _cleanup_conf_free_ struct conf *c = parse_ok("[server]\n");
        struct err err = { 0 };
        const char *s = NULL;
        int64_t i = 0;
        bool b = false;
        uint64_t u = 0;
        char **l = (char **) 0x1;

        ASSERT_EQ(conf_get_string(c, "server", NULL, "listen", "0.0.0.0:80", 255, &s, &err), 0);
        ASSERT_STREQ(s, "0.0.0.0:80");
        ASSERT_EQ(conf_get_string(c, "nosuch", NULL, "listen", NULL, 255, &s, &err), 0);
        ASSERT_NULL(s);
        ASSERT_EQ(conf_get_int(c, "server", NULL, "workers", -3, -10, 10, &i, &err), 0);
        ASSERT_EQ(i, -3);
        ASSERT_EQ(conf_get_bool(c, "server", "sub", "debug", true, &b, &err), 0);
        ASSERT_TRUE(b);
        ASSERT_EQ(conf_get_size(c, "server", NULL, "max", 123, 0, 1000, &u, &err), 0);
        ASSERT_EQ(u, 123);
        ASSERT_EQ(conf_get_duration_ms(c, "server", NULL, "t", 5000, 0, 10000, &u, &err), 0);
        ASSERT_EQ(u, 5000);
        ASSERT_EQ(conf_get_list(c, "server", NULL, "l", 4, 4, &l, &err), 0);
        ASSERT_NULL(l);
        ASSERT_EQ(conf_check_unused(c, &err), 0);
}

TEST(empty_and_comment_only_files) {
        struct err err = { 0 };
        _cleanup_conf_free_ struct conf *a = parse_ok("");
        ASSERT_EQ(conf_check_unused(a, &err), 0);
        _cleanup_conf_free_ struct conf *b = parse_ok("# only\n;comments\n\n   \n\t\n");
        ASSERT_EQ(conf_check_unused(b, &err), 0);
        _cleanup_conf_free_ struct conf *d = parse_ok("[s]\nk = v"); /* no final newline */
        const char *s = NULL;
        ASSERT_EQ(conf_get_string(d, "s", NULL, "k", NULL, 10, &s, &err), 0);
        ASSERT_STREQ(s, "v");
}

TEST(all_units_and_bools) {
        _cleanup_conf_free_ struct conf *c = parse_ok(
                "[u]\ns1 = 512\ns2 = 64K\ns3 = 50M\ns4 = 2G\ns5 = 1T\ns6 = 0\n"
                "d1 = 250ms\nd2 = 30s\nd3 = 5m\nd4 = 2h\nd5 = 1d\nd6 = 45\n"
                "b1 = true\nb2 = FALSE\nb3 = yes\nb4 = no\nb5 = on\nb6 = off\nb7 = 1\nb8 = 0\n");
        char key[8];
        struct err err = { 0 };
        uint64_t u;
        bool b;
        const uint64_t sizes[] = { 512, 64ULL << 10, 50ULL << 20, 2ULL << 30, 1ULL << 40, 0 };
        const uint64_t durs[] = { 250, 30000, 300000, 7200000, 86400000, 45000 };
        for (int i = 0; i < 6; i++) {
                snprintf(key, sizeof(key), "s%d", i + 1);
                ASSERT_EQ(conf_get_size(c, "u", NULL, key, 7, 0, UINT64_MAX, &u, &err), 0);
                ASSERT_EQ(u, sizes[i]);
                snprintf(key, sizeof(key), "d%d", i + 1);
                ASSERT_EQ(conf_get_duration_ms(c, "u", NULL, key, 7, 0, UINT64_MAX, &u, &err), 0);
                ASSERT_EQ(u, durs[i]);
        }
        for (int i = 0; i < 8; i++) {
                snprintf(key, sizeof(key), "b%d", i + 1);
                b = !(i % 2 == 0);
                ASSERT_EQ(conf_get_bool(c, "u", NULL, key, b, &b, &err), 0);
                ASSERT_EQ(b, i % 2 == 0);
        }
        ASSERT_EQ(conf_check_unused(c, &err), 0);
}

TEST(typed_values_rejected_with_line) {
        _cleanup_conf_free_ struct conf *c = parse_ok(
                "[s]\n"                              /* 1 */
                "i1 = 12abc\n"                       /* 2 */
                "i2 = 99999999999999999999\n"        /* 3 */
                "i3 = 70000\n"                       /* 4 */
                "i4 = -1\n"                          /* 5 */
                "i5 = \n"                            /* 6 */
                "i6 = 0x10\n"                        /* 7 */
                "z1 = -5M\n"                         /* 8 */
                "z2 = 2P\n"                          /* 9 */
                "z3 = 99999999999999999999G\n"       /* 10 */
                "z4 = 1.5G\n"                        /* 11 */
                "z5 = 2G\n"                          /* 12 */
                "d1 = 213503982335d\n"               /* 13 */
                "d2 = 10 s\n"                        /* 14 */
                "d3 = 1w\n"                          /* 15 */
                "d4 = 2h\n"                          /* 16 */
                "b1 = maybe\n"                       /* 17 */
                "b2 = \n"                            /* 18 */
                "listen = 0123456789abcdef\n"        /* 19 */
                "l1 = a,,b\n"                        /* 20 */
                "l2 = a,b,c\n"                       /* 21 */
                "l3 = a, toolongitem\n"              /* 22 */
                "l4 = a,\n"                          /* 23 */
                "l5 =   \n"                          /* 24 */
        );
        struct err err = { 0 };
        int64_t i = 42;
        uint64_t u = 42;
        bool b = true;
        const char *s = "keep";
        char **l = NULL;

        ASSERT_ERR(conf_get_int(c, "s", NULL, "i1", 0, 0, 100, &i, &err), err.message, 2,
                   "i1: '12abc' is not an integer (expected an integer from 0 to 100)");
        ASSERT_ERR(conf_get_int(c, "s", NULL, "i2", 0, INT64_MIN, INT64_MAX, &i, &err), err.message, 3,
                   "i2: 99999999999999999999 is out of range");
        ASSERT_ERR(conf_get_int(c, "s", NULL, "i3", 0, 1, 65535, &i, &err), err.message, 4,
                   "i3: 70000 is out of range (expected an integer from 1 to 65535)");
        ASSERT_ERR(conf_get_int(c, "s", NULL, "i4", 0, 0, 10, &i, &err), err.message, 5, "out of range");
        ASSERT_ERR(conf_get_int(c, "s", NULL, "i5", 0, 0, 10, &i, &err), err.message, 6, "is not an integer");
        ASSERT_ERR(conf_get_int(c, "s", NULL, "i6", 0, 0, 100, &i, &err), err.message, 7, "is not an integer");
        ASSERT_EQ(i, 42); /* untouched */
        ASSERT_ERR(conf_get_size(c, "s", NULL, "z1", 0, 0, UINT64_MAX, &u, &err), err.message, 8,
                   "z1: '-5M' is not a size");
        ASSERT_ERR(conf_get_size(c, "s", NULL, "z2", 0, 0, UINT64_MAX, &u, &err), err.message, 9, "is not a size");
        ASSERT_ERR(conf_get_size(c, "s", NULL, "z3", 0, 0, UINT64_MAX, &u, &err), err.message, 10, "out of range");
        ASSERT_ERR(conf_get_size(c, "s", NULL, "z4", 0, 0, UINT64_MAX, &u, &err), err.message, 11, "is not a size");
        ASSERT_ERR(conf_get_size(c, "s", NULL, "z5", 0, 4096, 1ULL << 30, &u, &err), err.message, 12,
                   "z5: 2G is out of range (expected a size from 4K to 1G)");
        ASSERT_ERR(conf_get_duration_ms(c, "s", NULL, "d1", 0, 0, UINT64_MAX, &u, &err), err.message, 13,
                   "out of range");
        ASSERT_ERR(conf_get_duration_ms(c, "s", NULL, "d2", 0, 0, UINT64_MAX, &u, &err), err.message, 14,
                   "d2: '10 s' is not a duration");
        ASSERT_ERR(conf_get_duration_ms(c, "s", NULL, "d3", 0, 0, UINT64_MAX, &u, &err), err.message, 15,
                   "is not a duration");
        ASSERT_ERR(conf_get_duration_ms(c, "s", NULL, "d4", 0, 1000, 3600000, &u, &err), err.message, 16,
                   "d4: 2h is out of range (expected a duration from 1s to 1h)");
        ASSERT_EQ(u, 42);
        ASSERT_ERR(conf_get_bool(c, "s", NULL, "b1", false, &b, &err), err.message, 17,
                   "b1: 'maybe' is not a boolean (expected true/false, yes/no, on/off or 1/0)");
        ASSERT_ERR(conf_get_bool(c, "s", NULL, "b2", false, &b, &err), err.message, 18, "not a boolean");
        ASSERT_TRUE(b);
        ASSERT_ERR(conf_get_string(c, "s", NULL, "listen", NULL, 15, &s, &err), err.message, 19,
                   "listen: value too long (max 15 bytes)");
        ASSERT_STREQ(s, "keep");
        ASSERT_EQ(conf_get_string(c, "s", NULL, "listen", NULL, 16, &s, &err), 0); /* exact fit */
        ASSERT_ERR(conf_get_list(c, "s", NULL, "l1", 8, 8, &l, &err), err.message, 20, "l1: empty item 2 in list");
        ASSERT_ERR(conf_get_list(c, "s", NULL, "l2", 2, 8, &l, &err), err.message, 21, "l2: too many items (max 2)");
        ASSERT_ERR(conf_get_list(c, "s", NULL, "l3", 8, 8, &l, &err), err.message, 22, "l3: item 2 too long (max 8 bytes)");
        ASSERT_ERR(conf_get_list(c, "s", NULL, "l4", 8, 8, &l, &err), err.message, 23, "empty item 2");
        ASSERT_NULL(l);
        ASSERT_EQ(conf_get_list(c, "s", NULL, "l5", 8, 8, &l, &err), 0);
        ASSERT_NOT_NULL(l);
        ASSERT_NULL(l[0]);
        strv_free(l);
        ASSERT_EQ(conf_get_list(c, "s", NULL, "l2", 3, 1, &l, &err), 3); /* exact fit */
        strv_free(l);
}

TEST(syntax_errors) {
        EXPECT_PARSE_ERROR("[s]\njust some words\n", 2, "expected 'key = value'");
        EXPECT_PARSE_ERROR("[s]\n\n\n# c\nlisten\n", 5, "expected 'key = value'");
        EXPECT_PARSE_ERROR("[s\n", 1, "invalid section header");
        EXPECT_PARSE_ERROR("[]\n", 1, "invalid section name ''");
        EXPECT_PARSE_ERROR("[S]\n", 1, "invalid section header");
        EXPECT_PARSE_ERROR("[s] x\n", 1, "invalid section header");
        EXPECT_PARSE_ERROR("[s \"\"]\n", 1, "invalid subsection name ''");
        EXPECT_PARSE_ERROR("[s \"a b\"]\n", 1, "invalid subsection name 'a b'");
        EXPECT_PARSE_ERROR("[s \"a/b\"]\n", 1, "invalid subsection name");
        EXPECT_PARSE_ERROR("[s \"ab\"\n", 1, "invalid section header");
        EXPECT_PARSE_ERROR("[s \"ab]\n", 1, "invalid section header");
        EXPECT_PARSE_ERROR("[s \"ab\" ]\n", 1, "invalid section header");
        EXPECT_PARSE_ERROR("[s ab]\n", 1, "invalid section header");
        EXPECT_PARSE_ERROR("[s]\n = v\n", 2, "invalid key ''");
        EXPECT_PARSE_ERROR("[s]\nKey = v\n", 2, "invalid key 'Key'");
        EXPECT_PARSE_ERROR("[s]\nmy key = v\n", 2, "invalid key 'my key'");
        EXPECT_PARSE_ERROR("[s]\nk-1 = v\n", 2, "invalid key 'k-1'");
        EXPECT_PARSE_ERROR("k = v\n", 1, "key 'k' outside of a section");
        EXPECT_PARSE_ERROR("[s]\nk = \"abc\n", 2, "unterminated quoted value for 'k'");
        EXPECT_PARSE_ERROR("[s]\nk = \"abc\\\"\n", 2, "unterminated quoted value");
        EXPECT_PARSE_ERROR("[s]\nk = \"abc\\\n", 2, "unterminated quoted value");
        EXPECT_PARSE_ERROR("[s]\nk = \"a\\nb\"\n", 2, "invalid escape");
        EXPECT_PARSE_ERROR("[s]\nk = \"a\" b\n", 2, "unexpected text after closing quote of 'k'");
        EXPECT_PARSE_ERROR("[s]\na = 1\nb = 2\na = 3\n", 4, "duplicate key 'a' (first set on line 2)");
        /* Same key in a merged repeat of the section is still a duplicate. */
        EXPECT_PARSE_ERROR("[s]\na = 1\n[t]\na = 1\n[s]\na = 2\n", 6, "duplicate key 'a'");
        /* ... but the same key in different subsections is not. */
        _cleanup_conf_free_ struct conf *c = parse_ok("[p \"x\"]\na = 1\n[p \"y\"]\na = 2\n[p]\na = 3\n");
}

TEST(long_names_and_lines) {
        char buf[8192];
        /* 64-char key is fine, 65 is not. */
        snprintf(buf, sizeof(buf), "[s]\n%s = 1\n", "k123456789012345678901234567890123456789012345678901234567890123");
        _cleanup_conf_free_ struct conf *c = parse_ok(buf);
        snprintf(buf, sizeof(buf), "[s]\n%s = 1\n", "k1234567890123456789012345678901234567890123456789012345678901234");
        EXPECT_PARSE_ERROR(buf, 2, "invalid key 'k123456789012345678901234567890123456789012345678901234567890123' (expected");
        snprintf(buf, sizeof(buf), "[%s]\n", "s1234567890123456789012345678901234567890123456789012345678901234");
        EXPECT_PARSE_ERROR(buf, 1, "invalid section name");
        snprintf(buf, sizeof(buf), "[s \"%s\"]\n", "N1234567890123456789012345678901234567890123456789012345678901234");
        EXPECT_PARSE_ERROR(buf, 1, "invalid subsection name");

        /* A line of exactly 4096 bytes (plus CRLF) is fine; 4097 is not. */
        size_t off = (size_t) snprintf(buf, sizeof(buf), "[s]\nk = ");
        memset(buf + off, 'v', 4096 - 4);
        strcpy(buf + off + 4092, "\r\n");
        _cleanup_conf_free_ struct conf *d = parse_ok(buf);
        const char *s = NULL;
        struct err err = { 0 };
        ASSERT_EQ(conf_get_string(d, "s", NULL, "k", NULL, 4092, &s, &err), 0);
        ASSERT_EQ(strlen(s), 4092);
        ASSERT_ERR(conf_get_string(d, "s", NULL, "k", NULL, 255, &s, &err), err.message, 2,
                   "k: value too long (max 255 bytes)");
        memset(buf + off, 'v', 4096 - 3);
        strcpy(buf + off + 4093, "\n[t]\n");
        EXPECT_PARSE_ERROR(buf, 2, "line too long (max 4096 bytes)");
        /* A huge comment line is still a line. */
        memset(buf, '#', 5000);
        buf[5000] = 0;
        EXPECT_PARSE_ERROR(buf, 1, "line too long");
}

TEST(too_many_entries) {
        struct strbuf b;
        strbuf_init(&b, 0);
        strbuf_printf(&b, "[s]\n");
        for (int i = 0; i < CONF_MAX_ENTRIES; i++)
                strbuf_printf(&b, "k%d = %d\n", i, i);
        {
                _cleanup_conf_free_ struct conf *c = parse_ok(b.buf);
                struct err err = { 0 };
                int64_t v = 0;
                ASSERT_EQ(conf_get_int(c, "s", NULL, "k9999", 0, 0, 100000, &v, &err), 0);
                ASSERT_EQ(v, 9999);
        }
        strbuf_printf(&b, "one_more = 1\n");
        EXPECT_PARSE_ERROR(b.buf, CONF_MAX_ENTRIES + 2, "too many entries (max 10000)");
        strbuf_done(&b);

        /* Sections count too, and repeated headers merge without counting. */
        strbuf_init(&b, 0);
        for (int i = 0; i <= CONF_MAX_ENTRIES; i++)
                strbuf_printf(&b, "[s \"n%d\"]\n", i);
        EXPECT_PARSE_ERROR(b.buf, CONF_MAX_ENTRIES + 1, "too many sections (max 10000)");
        strbuf_done(&b);
        strbuf_init(&b, 0);
        for (int i = 0; i < 50000; i++)
                strbuf_printf(&b, "[s]\n");
        _cleanup_conf_free_ struct conf *m = parse_ok(b.buf);
        ASSERT_TRUE(conf_has_section(m, "s", NULL));
        strbuf_done(&b);
}

TEST(nul_and_control_bytes) {
        /* Each case with its own source line for the report; lengths count embedded NULs. */
#define BAD(t, l, m) { __LINE__, t, sizeof(t) - 1, l, m }
        static const struct { int src; const char *text; size_t len; unsigned line; const char *msg; } bad[] = {
                BAD("[s]\nk = a\0b\n", 2, "NUL byte"),
                BAD("[s]\n\n\n\0", 4, "NUL byte"),
                BAD("[s]\nk = a\x1b[31mred\n", 2, "control character 0x1b"),
                BAD("[s]\nk = a\rb\n", 2, "control character 0x0d"),
                BAD("[s]\nk = \x7f\n", 2, "control character 0x7f"),
                BAD("[s]\nk = caf\xc3\n", 2, "invalid UTF-8"),
                BAD("[s]\n# \xff\xfe comment\n", 2, "invalid UTF-8"),
        };
#undef BAD
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                expect_parse_error_len(bad[i].text, bad[i].len, bad[i].line, bad[i].msg, bad[i].src);
        _cleanup_conf_free_ struct conf *c = parse_ok("[s]\nk = caf\xc3\xa9\t\n");
        const char *s;
        struct err err = { 0 };
        ASSERT_EQ(conf_get_string(c, "s", NULL, "k", NULL, 10, &s, &err), 0);
        ASSERT_STREQ(s, "caf\xc3\xa9");
}

TEST(crlf_accepted) {
        _cleanup_conf_free_ struct conf *c = parse_ok("# c\r\n[s \"x\"]\r\nk = v\r\nq = \"a b\"\r\n\r\nn = 5\r\n");
        const char *s;
        int64_t n;
        struct err err = { 0 };
        ASSERT_EQ(conf_get_string(c, "s", "x", "k", NULL, 10, &s, &err), 0);
        ASSERT_STREQ(s, "v");
        ASSERT_EQ(conf_get_string(c, "s", "x", "q", NULL, 10, &s, &err), 0);
        ASSERT_STREQ(s, "a b");
        ASSERT_EQ(conf_get_int(c, "s", "x", "n", 0, 0, 10, &n, &err), 0);
        ASSERT_EQ(n, 5);
        ASSERT_EQ(conf_check_unused(c, &err), 0);
}

TEST(unknown_keys_and_sections) {
        struct err err = { 0 };
        const char *s;
        {
                _cleanup_conf_free_ struct conf *c = parse_ok("[server]\nlisten = x\nlsiten = y\n");
                ASSERT_EQ(conf_get_string(c, "server", NULL, "listen", NULL, 10, &s, &err), 0);
                ASSERT_ERR(conf_check_unused(c, &err), err.message, 3, "unknown key 'lsiten' in [server]");
        }
        {
                _cleanup_conf_free_ struct conf *c = parse_ok("[server]\nlisten = x\n[sever]\nlisten = y\n");
                ASSERT_EQ(conf_get_string(c, "server", NULL, "listen", NULL, 10, &s, &err), 0);
                ASSERT_ERR(conf_check_unused(c, &err), err.message, 3, "unknown section [sever]");
        }
        {
                /* Empty unknown section, and subsection key typo. */
                _cleanup_conf_free_ struct conf *c = parse_ok("[plan \"a\"]\ncpu = 1\ncpus = 2\n[extra]\n");
                ASSERT_EQ(conf_get_string(c, "plan", "a", "cpu", NULL, 10, &s, &err), 0);
                ASSERT_ERR(conf_check_unused(c, &err), err.message, 3, "unknown key 'cpus' in [plan \"a\"]");
        }
        {
                _cleanup_conf_free_ struct conf *c = parse_ok("[a]\n[b]\n");
                ASSERT_TRUE(conf_has_section(c, "a", NULL));
                ASSERT_ERR(conf_check_unused(c, &err), err.message, 2, "unknown section [b]");
        }
        ASSERT_EQ(conf_check_unused(NULL, &err), 0);
}

TEST(parse_file_limits) {
        char path[512];
        struct err err = { 0 };
        struct conf *c = NULL;
        int fd;

        snprintf(path, sizeof(path), "%s/controld.conf", test_tmpdir());
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ASSERT_TRUE(fd >= 0);
        static const char text[] = "[server]\nlisten = 0123456789\nport = 99999999999999999999\n";
        ASSERT_EQ(write(fd, text, sizeof(text) - 1), (ssize_t) sizeof(text) - 1);
        close(fd);
        ASSERT_EQ(conf_parse_file(path, &c, &err), 0);
        const char *s;
        int64_t p;
        char want[600];
        ASSERT_EQ(conf_get_string(c, "server", NULL, "listen", NULL, 5, &s, &err), -EINVAL);
        snprintf(want, sizeof(want), "%s:2: listen: value too long (max 5 bytes)", path);
        ASSERT_STREQ(err.message, want);
        ASSERT_EQ(conf_get_int(c, "server", NULL, "port", 0, 1, 65535, &p, &err), -EINVAL);
        snprintf(want, sizeof(want), "%s:3: port: 99999999999999999999 is out of range (expected an integer from 1 to 65535)", path);
        ASSERT_STREQ(err.message, want);
        c = conf_free(c);
        ASSERT_NULL(conf_free(NULL));

        /* 2 MiB file of valid comment lines: rejected, with the line where 1 MiB is crossed. */
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ASSERT_TRUE(fd >= 0);
        char line[64];
        memset(line, '#', 63);
        line[63] = '\n';
        for (int i = 0; i < 2 * 1024 * 1024 / 64; i++)
                ASSERT_EQ(write(fd, line, 64), 64);
        close(fd);
        ASSERT_EQ(conf_parse_file(path, &c, &err), -EINVAL);
        ASSERT_NULL(c);
        snprintf(want, sizeof(want), "%s:16385: file too large (max 1048576 bytes)", path);
        ASSERT_STREQ(err.message, want);

        ASSERT_EQ(conf_parse_file("/nonexistent/x.conf", &c, &err), -ENOENT);
        ASSERT_STREQ(err.message, "/nonexistent/x.conf: No such file or directory");
        ASSERT_EQ(conf_parse_file(test_tmpdir(), &c, &err), -EINVAL);
        ASSERT_CONTAINS(err.message, "not a regular file");
        ASSERT_NULL(c);
}

static void fuzz_one(const char *buf, size_t len) {
        struct err err = { 0 };
        struct conf *c = NULL;
        int r = conf_parse_string(buf, len, "t.conf", &c, &err);
        if (r < 0) {
                ASSERT_NULL(c);
                ASSERT_TRUE(startswith(err.message, "t.conf:"));
                return;
        }
        /* Exercise getters on whatever parsed. */
        _cleanup_strv_free_ char **subs = NULL;
        const char *s;
        int64_t i;
        uint64_t u;
        bool b;
        char **l = NULL;
        conf_subsections(c, "a", &subs);
        (void) conf_get_string(c, "a", NULL, "k", NULL, 8, &s, &err);
        (void) conf_get_int(c, "a", NULL, "k", 0, -5, 5, &i, &err);
        (void) conf_get_size(c, "a", NULL, "k", 0, 0, 1000, &u, &err);
        (void) conf_get_duration_ms(c, "a", NULL, "k", 0, 0, 1000, &u, &err);
        (void) conf_get_bool(c, "a", NULL, "k", false, &b, &err);
        if (conf_get_list(c, "a", NULL, "k", 3, 3, &l, &err) >= 0)
                strv_free(l);
        (void) conf_check_unused(c, &err);
        conf_free(c);
}

TEST_FULL(random_bytes_never_crash, 300) {
        unsigned seed = test_seed(4242);
        static const char alphabet[] = "[]\"=#;\\ \t\r\n,akK1-0_.msMG\x01\xc3\xa9\xff";
        for (int iter = 0; iter < 30000; iter++) {
                size_t len;
                _cleanup_free_ char *b = test_random_input(&seed, 200, iter & 1, alphabet, &len);
                fuzz_one(b, len);
        }
        /* Structured mutations of a valid file. */
        size_t n = sizeof(sample) - 1;
        for (int iter = 0; iter < 5000; iter++) {
                _cleanup_free_ char *b = xmalloc(n);
                memcpy(b, sample, n);
                for (int k = 0; k < 4; k++)
                        b[rand_r(&seed) % n] = alphabet[rand_r(&seed) % (sizeof(alphabet) - 1)];
                fuzz_one(b, (size_t) (rand_r(&seed) % (n + 1)));
        }
}
