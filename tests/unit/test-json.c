/* Unit tests for common/json.c: hostile input to json_parse, exact ints. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "cleanup.h"
#include "json.h"
#include "testlib.h"

/* Parse from an exactly-sized heap copy so ASan catches any read past len. */
static int parse(const char *s, size_t len, size_t max_len, int depth, cJSON **ret, struct err *err) {
        _cleanup_free_ char *copy = xmalloc(len ? len : 1);
        memcpy(copy, s, len);
        return json_parse(copy, len, max_len, depth, ret, err);
}
#define PARSE_OK(lit, jp)  ASSERT_EQ(parse(lit, strlen(lit), 1 << 20, 64, jp, &err), 0)
#define PARSE_BAD(lit)                                                                      \
        do {                                                                                \
                cJSON *_j = NULL;                                                           \
                int _r = parse(lit, sizeof(lit) - 1, 1 << 20, 64, &_j, &err);               \
                if (_r != -EINVAL)                                                          \
                        test_fail(__FILE__, __LINE__, "accepted %s (r=%d)", #lit, _r);     \
                ASSERT_NULL(_j);                                                            \
                ASSERT_TRUE(strncmp(err.message, "Malformed JSON at byte ", 23) == 0 ||     \
                            strncmp(err.message, "JSON nested too deeply", 22) == 0);       \
        } while (0)

/* text[0..len) parsed with a max_len limit is refused with r, no tree, and a message equal to
 * err (or containing it when !exact). */
static void check_refused(const char *text, size_t len, size_t max_len, int r, const char *err, bool exact, int line) {
        struct err msg = { 0 };
        cJSON *j = NULL;
        int k = parse(text, len, max_len, 8, &j, &msg);
        if (k != r || j)
                test_fail(__FILE__, line, "%.40s: r=%d (want %d), tree %p", text, k, r, (void *) j);
        if (exact ? strcmp(msg.message, err) != 0 : !strstr(msg.message, err))
                test_fail(__FILE__, line, "%.40s: message \"%s\" %s \"%s\"", text, msg.message, exact ? "!=" : "lacks", err);
}
#define REFUSED(text, len, max_len, r, err) check_refused(text, len, max_len, r, err, true, __LINE__)
#define REFUSED_HAS(text, len, r, err)      check_refused(text, len, 100, r, err, false, __LINE__)

struct rec {
        char id[8];
        char *name, *none;
        int64_t n, at, size, zero;
        bool on;
};

TEST(members_by_table_in_table_order) {
        static const struct json_member m[] = {
                JSON_MEMBER(JSON_CHARS, "id", struct rec, id),   JSON_MEMBER(JSON_STR, "name", struct rec, name),
                JSON_MEMBER(JSON_STR, "none", struct rec, none), JSON_MEMBER(JSON_INT, "n", struct rec, n),
                JSON_MEMBER(JSON_BOOL, "on", struct rec, on),    JSON_MEMBER(JSON_TIME, "at", struct rec, at),
                JSON_MEMBER(JSON_TIME, "never", struct rec, zero),  JSON_MEMBER(JSON_SIZE, "size", struct rec, size),
        };
        struct rec r = { .id = "abc", .name = (char *) "x", .n = -3, .at = 1000, .size = -1, .on = true };
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        json_add_members(o, &r, m, 7);
        json_add_members(o, &r, m + 7, 1);
        _cleanup_free_ char *s = json_print(o);
        ASSERT_STREQ(s, "{\"id\":\"abc\",\"name\":\"x\",\"none\":null,\"n\":-3,\"on\":true,"
                        "\"at\":\"1970-01-01T00:00:01.000Z\",\"never\":null,\"size\":null}");
}

TEST(parse_happy) {
        struct err err = { 0 };
        _cleanup_json_ cJSON *j = NULL;
        PARSE_OK(" {\"name\": \"x\", \"n\": 42, \"neg\": -7, \"f\": 1.5, \"b\": true, \"z\": null, \"s\": \"caf\\u00e9 \xe2\x82\xac\"}\r\n", &j);
        ASSERT_STREQ(json_get_str(j, "name"), "x");
        ASSERT_STREQ(json_get_str(j, "s"), "caf\xc3\xa9 \xe2\x82\xac");
        ASSERT_NULL(json_get_str(j, "n"));
        ASSERT_NULL(json_get_str(j, "missing"));
        ASSERT_NULL(json_get_str(j, "NAME")); /* case-sensitive */
        int64_t v = 5;
        ASSERT_TRUE(json_get_int(j, "n", &v));
        ASSERT_EQ(v, 42);
        ASSERT_TRUE(json_get_int(j, "neg", &v));
        ASSERT_EQ(v, -7);
        v = 5;
        ASSERT_FALSE(json_get_int(j, "f", &v));
        ASSERT_FALSE(json_get_int(j, "b", &v));
        ASSERT_FALSE(json_get_int(j, "name", &v));
        ASSERT_FALSE(json_get_int(j, "missing", &v));
        ASSERT_EQ(v, 5);
        ASSERT_FALSE(json_get_int(NULL, "n", &v));
        ASSERT_NULL(json_get_str(NULL, "n"));

        _cleanup_json_ cJSON *s = NULL;
        PARSE_OK("\"just a string\"", &s);
        ASSERT_TRUE(cJSON_IsString(s));
        _cleanup_json_ cJSON *a = NULL;
        PARSE_OK("[]", &a);
        ASSERT_TRUE(cJSON_IsArray(a));
}

TEST(parse_malformed_positions) {
        struct err err = { 0 };
        cJSON *j = NULL;
        REFUSED("{\"a\":}", 6, 100, -EINVAL, "Malformed JSON at byte 5");
        REFUSED("{\"a\":1} x", 9, 100, -EINVAL, "Malformed JSON at byte 8: trailing data");
        REFUSED_HAS("{\"a\":1}{}", 9, -EINVAL, "at byte 7");
        REFUSED_HAS("", 0, -EINVAL, "Malformed JSON at byte 0");
        REFUSED_HAS("   ", 3, -EINVAL, "");
        /* NULL err buffer is fine. */
        ASSERT_EQ(json_parse("{", 1, 100, 8, &j, NULL), -EINVAL);

        PARSE_BAD("{");
        PARSE_BAD("[1,]");
        PARSE_BAD("{\"a\" 1}");
        PARSE_BAD("{'a':1}");
        PARSE_BAD("\"unterminated");
        PARSE_BAD("tru");
        PARSE_BAD("nul");
        PARSE_BAD("01x");
        PARSE_BAD("\"\\x41\"");
        PARSE_BAD("\"\\ud800\"");             /* lone surrogate escape */
        PARSE_BAD("\"a\\u0000b\"");           /* would cut the C string */
        PARSE_BAD("\"tab\there\"");           /* raw control byte in string */
        PARSE_BAD("\x01{}");                  /* cJSON would call this whitespace */
        PARSE_BAD("{}\x0b");
        PARSE_BAD("\"\xc3\x28\"");            /* invalid UTF-8 */
        PARSE_BAD("\"\xed\xa0\x80\"");        /* UTF-8 encoded surrogate */
        PARSE_BAD("\"\xc0\xaf\"");            /* overlong */
        PARSE_BAD("{\"a\":1}\xff");
        REFUSED("\"\xc3\x28\"", 4, 100, -EINVAL, "Malformed JSON at byte 1: invalid UTF-8");
}

TEST(parse_embedded_nul) {
        struct err err = { 0 };
        static const char a[] = "{\"a\":1}\0garbage";
        REFUSED(a, sizeof(a) - 1, 100, -EINVAL, "Malformed JSON at byte 7");
        static const char b[] = "{\"a\":\"x\0y\"}";
        REFUSED(b, sizeof(b) - 1, 100, -EINVAL, "Malformed JSON at byte 7: control character in string");
        static const char c[] = "{\"a\":1}\0";
        REFUSED_HAS(c, sizeof(c) - 1, -EINVAL, "");
        /* Not NUL-terminated at all: fine, len rules. */
        _cleanup_json_ cJSON *ok = NULL;
        ASSERT_EQ(parse("[1,2]", 5, 100, 8, &ok, &err), 0);
        ASSERT_EQ(cJSON_GetArraySize(ok), 2);
        _cleanup_json_ cJSON *n = NULL;
        ASSERT_EQ(parse("12", 2, 100, 8, &n, &err), 0); /* number at the very end */
        ASSERT_TRUE(cJSON_IsNumber(n));
}

TEST(parse_size_limit) {
        struct err err = { 0 };
        REFUSED("[1,2,3]", 7, 6, -EMSGSIZE, "JSON document too large (7 bytes, max 6)");
        _cleanup_json_ cJSON *k = NULL;
        ASSERT_EQ(parse("[1,2,3]", 7, 7, 8, &k, &err), 0);
}

TEST(parse_deep_nesting) {
        struct err err = { 0 };
        cJSON *j = NULL;
        size_t n = 100000;
        _cleanup_free_ char *deep = xmalloc(2 * n);
        memset(deep, '[', n);
        memset(deep + n, ']', n);
        ASSERT_EQ(parse(deep, 2 * n, 1 << 20, 64, &j, &err), -EINVAL);
        ASSERT_STREQ(err.message, "JSON nested too deeply (max 64)");
        ASSERT_EQ(parse(deep, n, 1 << 20, 100000, &j, &err), -EINVAL); /* capped at cJSON's 1000 */
        ASSERT_STREQ(err.message, "JSON nested too deeply (max 1000)");
        /* Exactly at the limit is fine; one more is not. Brackets in strings don't count. */
        _cleanup_json_ cJSON *ok = NULL;
        ASSERT_EQ(parse("[[[{\"a\":\"[[[[[[\"}]]]", 20, 100, 4, &ok, &err), 0);
        ASSERT_EQ(parse("[[[[[]]]]]", 10, 100, 4, &j, &err), -EINVAL);
        _cleanup_json_ cJSON *ok2 = NULL;
        ASSERT_EQ(parse(deep + n - 1000, 2000, 1 << 20, 1000, &ok2, &err), 0);
        /* Many '{' */
        memset(deep, '{', n);
        ASSERT_EQ(parse(deep, n, 1 << 20, 64, &j, &err), -EINVAL);
        ASSERT_NULL(j);
}

TEST(huge_numbers) {
        struct err err = { 0 };
        _cleanup_json_ cJSON *j = NULL;
        PARSE_OK("{\"big\": 99999999999999999999, \"inf\": 1e400, \"max\": 9007199254740991, "
                 "\"over\": 9007199254740993, \"p53\": 9007199254740992, \"min\": -9007199254740991, \"e\": 1e3, \"frac\": 1.0000001, "
                 "\"tiny\": 1e-400, \"negz\": -0}", &j);
        int64_t v = 1;
        ASSERT_FALSE(json_get_int(j, "big", &v));
        ASSERT_FALSE(json_get_int(j, "inf", &v));
        ASSERT_FALSE(json_get_int(j, "over", &v)); /* rounds to 2^53 as a double: refuse, don't guess */
        ASSERT_FALSE(json_get_int(j, "p53", &v));  /* same double as "over" */
        ASSERT_FALSE(json_get_int(j, "frac", &v));
        ASSERT_EQ(v, 1);
        ASSERT_TRUE(json_get_int(j, "max", &v));
        ASSERT_TRUE(v == INT64_C(9007199254740991));
        ASSERT_TRUE(json_get_int(j, "min", &v));
        ASSERT_TRUE(v == -INT64_C(9007199254740991));
        ASSERT_TRUE(json_get_int(j, "e", &v));
        ASSERT_EQ(v, 1000);
        ASSERT_TRUE(json_get_int(j, "tiny", &v));
        ASSERT_EQ(v, 0);
        ASSERT_TRUE(json_get_int(j, "negz", &v));
        ASSERT_EQ(v, 0);
        /* A long run of digits must not crash either. */
        _cleanup_free_ char *num = xmalloc(5000);
        memset(num, '9', 5000);
        _cleanup_json_ cJSON *k = NULL;
        ASSERT_EQ(parse(num, 5000, 1 << 20, 8, &k, &err), 0);
        ASSERT_FALSE(json_get_int(k, "x", &v));
}

TEST(build_and_print) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        ASSERT_NOT_NULL(o);
        ASSERT_NOT_NULL(json_add_str(o, "s", "a\"b\n"));
        ASSERT_NOT_NULL(json_add_str(o, "n", NULL));
        ASSERT_NOT_NULL(json_add_int(o, "i", 42));
        ASSERT_NOT_NULL(json_add_int(o, "max", INT64_MAX));
        ASSERT_NOT_NULL(json_add_int(o, "min", INT64_MIN));
        ASSERT_NOT_NULL(json_add_int(o, "edge", INT64_C(9007199254740992)));
        ASSERT_NOT_NULL(json_add_int(o, "d15", INT64_C(999999999999999)));
        ASSERT_NOT_NULL(json_add_int(o, "ms", INT64_C(1796210093123)));
        ASSERT_NOT_NULL(json_add_bool(o, "t", true));
        ASSERT_NOT_NULL(json_add_bool(o, "f", false));
        _cleanup_free_ char *s = json_print(o);
        ASSERT_STREQ(s, "{\"s\":\"a\\\"b\\n\",\"n\":null,\"i\":42,\"max\":9223372036854775807,"
                        "\"min\":-9223372036854775808,\"edge\":9007199254740992,\"d15\":999999999999999,"
                        "\"ms\":1796210093123,\"t\":true,\"f\":false}");
        int64_t v;
        ASSERT_TRUE(json_get_int(o, "max", &v));
        ASSERT_TRUE(v == INT64_MAX);
        ASSERT_TRUE(json_get_int(o, "min", &v));
        ASSERT_TRUE(v == INT64_MIN);
        ASSERT_NULL(json_get_str(o, "n"));

        /* Round trip through the strict parser. */
        struct err err = { 0 };
        _cleanup_json_ cJSON *back = NULL;
        ASSERT_EQ(json_parse(s, strlen(s), 4096, 4, &back, &err), 0);
        ASSERT_STREQ(json_get_str(back, "s"), "a\"b\n");
        ASSERT_TRUE(json_get_int(back, "i", &v));
        ASSERT_EQ(v, 42);
        ASSERT_TRUE(json_get_int(back, "ms", &v));
        ASSERT_TRUE(v == INT64_C(1796210093123));
        ASSERT_TRUE(json_get_int(back, "d15", &v));
        ASSERT_TRUE(v == INT64_C(999999999999999));
        ASSERT_FALSE(json_get_int(back, "max", &v)); /* > 2^53 once it is a double */

        _cleanup_free_ char *nul = json_print(NULL);
        ASSERT_STREQ(nul, "null");
}

TEST(random_bytes_never_crash) {
        struct err err = { 0 };
        unsigned seed = test_seed(12345);
        static const char alphabet[] = "{}[]\":,\\u0123456789abcdefnulltruefalse-+.eE \t\r\n\x01\x80\xc3\xff";
        for (int iter = 0; iter < 20000; iter++) {
                size_t len;
                _cleanup_free_ char *b = test_random_input(&seed, 64, iter & 1, alphabet, &len);
                cJSON *j = NULL;
                int r = json_parse(b, len, 1024, 16, &j, &err);
                ASSERT_TRUE(r == 0 || r == -EINVAL);
                if (r == 0) {
                        ASSERT_NOT_NULL(j);
                        free(json_print(j));
                        cJSON_Delete(j);
                } else
                        ASSERT_TRUE(strncmp(err.message, "Malformed JSON at byte ", 23) == 0 ||
                                    strncmp(err.message, "JSON nested too deeply", 22) == 0);
        }
}

TEST(value_cap_before_cjson_allocates) {
        struct err err = { 0 };
        size_t n = 1000000, len = 2 * n + 8, o = 0;
        _cleanup_free_ char *b = xmalloc(len);
        cJSON *j = NULL;

        o += (size_t) snprintf(b, len, "{\"a\":[");
        for (size_t i = 0; i < n; i++) {
                b[o++] = '0';
                b[o++] = i + 1 < n ? ',' : ']';
        }
        b[o++] = '}';
        ASSERT_EQ(json_parse(b, o, o, 64, &j, &err), -EINVAL);
        ASSERT_NULL(j);
        ASSERT_CONTAINS(err.message, "more than 10000 values");

        /* Exactly at the cap: 1 object + 1 array + 9998 elements. */
        o = (size_t) snprintf(b, len, "{\"a\":[");
        for (size_t i = 0; i < JSON_MAX_VALUES - 2; i++) {
                b[o++] = '0';
                b[o++] = i + 1 < JSON_MAX_VALUES - 2 ? ',' : ']';
        }
        b[o++] = '}';
        ASSERT_EQ(json_parse(b, o, o, 64, &j, &err), 0);
        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(j, "a")), JSON_MAX_VALUES - 2);
        cJSON_Delete(j);
        j = NULL;
        /* One more is refused. */
        b[o - 2] = ',';
        b[o - 1] = '0';
        b[o++] = ']';
        b[o++] = '}';
        ASSERT_EQ(json_parse(b, o, o, 64, &j, &err), -EINVAL);
        ASSERT_NULL(j);

        /* Commas and brackets inside strings are not values. */
        char s[20008];
        s[0] = '"';
        memset(s + 1, ',', 20000);
        s[20001] = '"';
        ASSERT_EQ(json_parse(s, 20002, 20002, 64, &j, &err), 0);
        cJSON_Delete(j);
}

TEST(strn_keeps_nul_bytes) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_strn(o, "plain", "ab\"c\n", 5);
        json_add_strn(o, "nul", "a\0b\"\\\n\x01\x7f\xc3\xa9\0", 11);
        json_add_strn(o, "empty", NULL, 0);
        _cleanup_free_ char *s = json_print(o);
        ASSERT_STREQ(s, "{\"plain\":\"ab\\\"c\\n\",\"nul\":\"a\\u0000b\\\"\\\\\\n\\u0001\x7f\xc3\xa9\\u0000\",\"empty\":\"\"}");
        /* Without a NUL it stays a plain string item. */
        ASSERT_STREQ(json_get_str(o, "plain"), "ab\"c\n");
        ASSERT_TRUE(cJSON_IsRaw(cJSON_GetObjectItemCaseSensitive(o, "nul")));
        /* The text is valid JSON that cJSON reads back (up to the NUL, its limit). */
        _cleanup_json_ cJSON *back = cJSON_Parse(s);
        ASSERT_NOT_NULL(back);
        ASSERT_STREQ(json_get_str(back, "nul"), "a");
}
