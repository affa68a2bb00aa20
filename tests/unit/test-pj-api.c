/* Unit tests for proto-json/pj_api.c: public-API request bodies.
 *
 * Table bodies are written with ' for " to stay readable; q() converts them.
 * Every rejection is checked for the exact field path, a message fragment,
 * and that the message itself names the field. */
#include <errno.h>
#include <stdlib.h>

#include "cleanup.h"
#include "pj_api.h"
#include "testlib.h"
#include "sandbox.h"
#include "snapshot.h"

/* ' -> " (a fresh copy each call; bodies in tables never need a literal '). */
static char *q(const char *s) {
        char *r = xstrdup(s);
        for (char *p = r; *p; p++)
                if (*p == '\'')
                        *p = '"';
        return r;
}

typedef int (*parse_fn)(const char *body, size_t len, struct err *err);

static int do_create(const char *b, size_t l, struct err *e) {
        struct pj_sandbox_create c = {};
        int r = pj_sandbox_create_parse(b, l, &c, e);
        if (r == 0) {
                ASSERT_NOT_NULL(c.mount_path);
                ASSERT_NOT_NULL(c.snapshot_mode);
        }
        pj_sandbox_create_done(&c);
        return r;
}
/* do_<name>: parse a body into a struct pj_<name> and release it, for the tables. */
#define DEFINE_DO(name, type)                                              \
        static int do_##name(const char *b, size_t l, struct err *e) { \
                struct type x = {};                                         \
                int r = type##_parse(b, l, &x, e);                          \
                type##_done(&x);                                            \
                return r;                                                   \
        }
DEFINE_DO(exec, pj_exec)
DEFINE_DO(code, pj_code)
DEFINE_DO(egress, pj_egress_update)
DEFINE_DO(snapshot, pj_snapshot_create)
DEFINE_DO(volume, pj_volume_create)
static int do_batch(const char *b, size_t l, struct err *e) {
        struct pj_files_batch x = {};
        int r = pj_files_batch_parse(b, l, 1 << 20, 4 << 20, &x, e);
        pj_files_batch_done(&x);
        return r;
}

struct bad_case {
        const char *body;
        const char *field;
        const char *msg;
};

static void check_bad_raw(parse_fn fn, const char *body, size_t len, const char *field, const char *msg, int line) {
        struct err e = {};
        int r = fn(body, len, &e);
        if (r != -EINVAL)
                test_fail(__FILE__, line, "body %.200s: expected -EINVAL, got %d", body, r);
        if (strcmp(e.field, field) != 0)
                test_fail(__FILE__, line, "body %.200s: field \"%s\" != \"%s\" (message: %s)", body, e.field, field,
                          e.message);
        if (!strstr(e.message, msg))
                test_fail(__FILE__, line, "body %.200s: message \"%s\" lacks \"%s\"", body, e.message, msg);
        if (!strstr(e.message, field))
                test_fail(__FILE__, line, "body %.200s: message \"%s\" does not name field \"%s\"", body, e.message,
                          field);
}

static void check_bad_table(parse_fn fn, const struct bad_case *t, size_t n, int line) {
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *b = q(t[i].body);
                check_bad_raw(fn, b, strlen(b), t[i].field, t[i].msg, line);
        }
}
#define CHECK_BAD(fn, table) check_bad_table(fn, table, ELEMENTSOF(table), __LINE__)

static void check_good_table(parse_fn fn, const char *const *t, size_t n, int line) {
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *b = q(t[i]);
                struct err e = {};
                int r = fn(b, strlen(b), &e);
                if (r != 0)
                        test_fail(__FILE__, line, "good[%zu] %.200s rejected: [%s] %s", i, b, e.field, e.message);
        }
}
#define CHECK_GOOD(fn, table) check_good_table(fn, table, ELEMENTSOF(table), __LINE__)

static int create(const char *body, struct pj_sandbox_create *c) {
        _cleanup_free_ char *b = q(body);
        struct err e = {};
        int r = pj_sandbox_create_parse(b, strlen(b), c, &e);
        if (r < 0)
                fprintf(stderr, "create %s: [%s] %s\n", b, e.field, e.message);
        return r;
}

/* ---- JSON syntax, shared by every parser -------------------------------- */

static const struct bad_case bad_syntax[] = {
        { "[]", "", "Request body must be a JSON object" },
        { "'x'", "", "Request body must be a JSON object" },
        { "1", "", "Request body must be a JSON object" },
        { "null", "", "Request body must be a JSON object" },
        { "true", "", "Request body must be a JSON object" },
        { "{", "", "Malformed JSON at byte 1" },
        { "{'name':}", "", "Malformed JSON at byte 8" },
        { "{'name':'x',}", "", "Malformed JSON at byte 12" },
        { "{'name' 'x'}", "", "Malformed JSON at byte 8: expected ':'" },
        { "{name:'x'}", "", "Malformed JSON at byte 1: expected a string key" },
        { "{'name':'x'} {}", "", "Malformed JSON at byte 13: unexpected data" },
        { "{'name':'x'}x", "", "unexpected data after the JSON value" },
        { "{'name':'x'", "", "Malformed JSON at byte 11" },
        { "{'name':'x", "", "unterminated string" },
        { "{'name':'x\\", "", "unterminated string" },
        { "{'name':'\\x41'}", "", "invalid escape" },
        { "{'name':'\\u00'}", "", "invalid \\u escape" },
        { "{'name':'\\u00zz'}", "", "invalid \\u escape" },
        { "{'name':'\\ud800'}", "", "unpaired UTF-16 surrogate" },
        { "{'name':'\\udc00'}", "", "unpaired UTF-16 surrogate" },
        { "{'name':'\\ud800\\u0041'}", "", "unpaired UTF-16 surrogate" },
        { "{'name':'\\ud800x'}", "", "unpaired UTF-16 surrogate" },
        { "{'name':'a\tb'}", "", "control character in string" },
        { "{'name':'a\nb'}", "", "control character in string" },
        { "{'name':'\xff'}", "", "Invalid UTF-8 in string at byte 9" },
        { "{'name':'\xc0\xaf'}", "", "Invalid UTF-8" },          /* overlong '/' */
        { "{'name':'\xe0\x80\xaf'}", "", "Invalid UTF-8" },      /* overlong */
        { "{'name':'\xed\xa0\x80'}", "", "Invalid UTF-8" },      /* encoded surrogate */
        { "{'name':'\xf4\x90\x80\x80'}", "", "Invalid UTF-8" },  /* > U+10FFFF */
        { "{'name':'\xf8\x88\x80\x80\x80'}", "", "Invalid UTF-8" },
        { "{'name':'\xc3'}", "", "Invalid UTF-8" },              /* truncated */
        { "{'name':'\xe2\x82'}", "", "Invalid UTF-8" },
        { "{'\xff':1}", "", "Invalid UTF-8" },                   /* in a key */
        { "{'name':tru}", "", "invalid literal" },
        { "{'name':nul}", "", "invalid literal" },
        { "{'name':True}", "", "unexpected character" },
        { "{'specs':{'cpu':01}}", "", "Malformed JSON" },
        { "{'specs':{'cpu':-}}", "", "invalid number" },
        { "{'specs':{'cpu':1.}}", "", "invalid number" },
        { "{'specs':{'cpu':.5}}", "", "unexpected character" },
        { "{'specs':{'cpu':+1}}", "", "unexpected character" },
        { "{'specs':{'cpu':1e}}", "", "invalid number" },
        { "{'specs':{'cpu':1e+}}", "", "invalid number" },
        { "{'specs':{'cpu':NaN}}", "", "unexpected character" },
        { "{'specs':{'cpu':Infinity}}", "", "unexpected character" },
        { "{'specs':{'cpu':0x10}}", "", "Malformed JSON" },
        { "{/*c*/}", "", "Malformed JSON at byte 1" },
        { "\xef\xbb\xbf{}", "", "Malformed JSON at byte 0" },
        { " ", "", "Malformed JSON at byte 1: unexpected end of input" },
        { "{'a':[1,2}", "", "expected ',' or ']'" },
        { "{'a':{'b':1]}", "", "expected ',' or '}'" },
};

TEST(json_syntax_all_parsers) {
        parse_fn fns[] = { do_create, do_exec, do_code, do_egress, do_snapshot, do_volume, do_batch };
        for (size_t i = 0; i < ELEMENTSOF(fns); i++)
                CHECK_BAD(fns[i], bad_syntax);
}

TEST(json_embedded_nul_bytes) {
        static const char b1[] = "{\"name\":\"a\0b\"}";
        static const char b2[] = "{\"name\":\"ab\"}\0";
        static const char b3[] = "{\0}";
        check_bad_raw(do_create, b1, sizeof(b1) - 1, "", "control character in string", __LINE__);
        check_bad_raw(do_create, b2, sizeof(b2) - 1, "", "Malformed JSON at byte 13", __LINE__);
        check_bad_raw(do_create, b3, sizeof(b3) - 1, "", "Malformed JSON at byte 1", __LINE__);
        /* body not NUL-terminated: only len bytes are read */
        char buf[8];
        memcpy(buf, "{}xxxxxx", 8);
        struct pj_sandbox_create c = {};
        struct err e = {};
        ASSERT_EQ(pj_sandbox_create_parse(buf, 2, &c, &e), 0);
        pj_sandbox_create_done(&c);
        /* an escaped NUL is valid JSON but never a valid value */
        check_bad_raw(do_create, "{\"name\":\"a\\u0000b\"}", 19, "name", "must not contain NUL", __LINE__);
        check_bad_raw(do_exec, "{\"cmd\":\"ls\\u0000 -l\"}", 21, "cmd", "must not contain NUL", __LINE__);
}

TEST(json_single_quotes_rejected) {
        const char *b = "{'name':'x'}";
        check_bad_raw(do_create, b, strlen(b), "", "Malformed JSON at byte 1", __LINE__);
}

TEST(json_nesting_limit) {
        /* root(1) + specs(2) + 30 arrays = 32 levels: JSON is fine, the value is not */
        char body[512];
        for (int extra = 29; extra <= 31; extra++) {
                int o = snprintf(body, sizeof(body), "{\"specs\":{\"cpu\":");
                for (int i = 0; i < extra; i++)
                        body[o++] = '[';
                for (int i = 0; i < extra; i++)
                        body[o++] = ']';
                o += snprintf(body + o, sizeof(body) - (size_t) o, "}}");
                if (extra <= 30)
                        check_bad_raw(do_create, body, (size_t) o, "specs.cpu", "must be an integer", __LINE__);
                else
                        check_bad_raw(do_create, body, (size_t) o, "", "JSON nesting deeper than 32 levels",
                                      __LINE__);
        }
        /* a very deep document must not recurse unboundedly */
        size_t n = 1000000;
        char *deep = xmalloc(n);
        memset(deep, '[', n);
        check_bad_raw(do_create, deep, n, "", "nesting deeper than 32", __LINE__);
        deep[0] = '{';
        check_bad_raw(do_create, deep, n, "", "Malformed JSON at byte 1", __LINE__);
        memcpy(deep, "{\"a\":", 5);
        check_bad_raw(do_exec, deep, n, "", "nesting deeper than 32", __LINE__);
        free(deep);
}

TEST(json_unicode_escapes_decoded) {
        struct pj_sandbox_create c = {};
        /* "é" via escape, an astral char via surrogate pair, raw UTF-8, \/ */
        ASSERT_EQ(create("{'name':'caf\\u00e9 \\ud83d\\ude00 \xe2\x82\xac \\/'}", &c), 0);
        ASSERT_STREQ(c.name, "caf\xc3\xa9 \xf0\x9f\x98\x80 \xe2\x82\xac /");
        pj_sandbox_create_done(&c);
}

TEST(json_huge_bodies) {
        /* Each hostile shape twice: below PJ_JSON_MAX_NODES the validators
         * name the rule it breaks; above it the reader refuses it first, by
         * the value count (issue 12: the tree of a body stays small). */
        static const int below = 4000, above = 200000;
        size_t cap = 200000 * 16 + 16, o = 0;
        char *b = xmalloc(cap);
        for (int pass = 0; pass < 2; pass++) {
                int n = pass == 0 ? below : above;
                const char *cap_field = "", *cap_msg = "the limit is 10000 values";
                /* distinct unknown keys: rejected at the first one, quickly */
                o = 0;
                b[o++] = '{';
                for (int i = 0; i < n; i++)
                        o += (size_t) snprintf(b + o, cap - o, "%s\"k%d\":%d", i ? "," : "", i, i);
                b[o++] = '}';
                check_bad_raw(do_create, b, o, pass ? cap_field : "k0", pass ? cap_msg : "Unknown field 'k0'", __LINE__);
                check_bad_raw(do_batch, b, o, pass ? cap_field : "k0", pass ? cap_msg : "Unknown field 'k0'", __LINE__);
                /* env entries: rejected by count */
                o = (size_t) snprintf(b, cap, "{\"cmd\":\"x\",\"env\":{");
                for (int i = 0; i < (pass ? 150000 : n); i++)
                        o += (size_t) snprintf(b + o, cap - o, "%s\"K%d\":\"v\"", i ? "," : "", i);
                o += (size_t) snprintf(b + o, cap - o, "}}");
                check_bad_raw(do_exec, b, o, pass ? cap_field : "env", pass ? cap_msg : "at most 128 entries", __LINE__);
                /* the same key many times: a duplicate */
                o = 0;
                b[o++] = '{';
                for (int i = 0; i < (pass ? 100000 : n); i++)
                        o += (size_t) snprintf(b + o, cap - o, "%s\"name\":\"n\"", i ? "," : "");
                b[o++] = '}';
                check_bad_raw(do_create, b, o, pass ? cap_field : "name", pass ? cap_msg : "Duplicate field 'name'",
                              __LINE__);
                /* a huge array in a known field */
                o = (size_t) snprintf(b, cap, "{\"egress\":{\"mode\":\"restricted\",\"allow\":[");
                for (int i = 0; i < (pass ? 300000 : n); i++)
                        o += (size_t) snprintf(b + o, cap - o, "%s1", i ? "," : "");
                o += (size_t) snprintf(b + o, cap - o, "]}}");
                check_bad_raw(do_create, b, o, pass ? cap_field : "egress.allow",
                              pass ? cap_msg : "at most 50 entries", __LINE__);
        }
        free(b);

        /* a large valid body: 1 MiB of code */
        size_t n = 1024 * 1024;
        char *code = xmalloc(n + 64);
        o = (size_t) snprintf(code, n + 64, "{\"language\":\"python\",\"code\":\"");
        memset(code + o, 'x', n);
        o += n;
        o += (size_t) snprintf(code + o, 64, "\"}");
        struct pj_code c = {};
        struct err e = {};
        ASSERT_EQ(pj_code_parse(code, o, &c, &e), 0);
        ASSERT_EQ(strlen(c.code), n);
        pj_code_done(&c);
        free(code);
}

/* ---- POST /sandboxes ---------------------------------------------------- */

/* Every member of got equals want's (strings by content, NULL only to NULL). */
static void check_create(const struct pj_sandbox_create *got, const struct pj_sandbox_create *want, int line) {
#define SAME_STR(m)                                                                                          \
        if (got->m ? !want->m || strcmp(got->m, want->m) != 0 : want->m != NULL)                            \
                test_fail(__FILE__, line, #m ": \"%s\" != \"%s\"", got->m ? got->m : "(null)", want->m ? want->m : "(null)")
#define SAME_INT(m)                                                                                          \
        if (got->m != want->m)                                                                               \
                test_fail(__FILE__, line, #m ": %lld != %lld", (long long) got->m, (long long) want->m)
        SAME_STR(name);
        SAME_STR(template_name);
        SAME_STR(team_id);
        SAME_STR(environment_id);
        SAME_STR(volume_id);
        SAME_STR(from_snapshot);
        SAME_STR(region);
        SAME_INT(has_cpu);
        SAME_INT(has_memory);
        SAME_INT(has_disk);
        SAME_INT(cpu);
        SAME_INT(memory);
        SAME_INT(disk);
        SAME_INT(auto_destroy);
        SAME_STR(destroy_timeout);
        SAME_INT(destroy_timeout_s);
        SAME_INT(one_shot);
        SAME_INT(block_outbound_set);
        SAME_INT(block_outbound);
        SAME_INT(egress_set);
        SAME_INT(egress.mode);
        SAME_INT(egress.n_allow);
        for (size_t i = 0; i < got->egress.n_allow; i++)
                SAME_STR(egress.allow[i]);
        SAME_INT(persistent);
        SAME_INT(has_persistent_disk_gb);
        SAME_INT(persistent_disk_gb);
        SAME_STR(mount_path);
        SAME_STR(snapshot_mode);
        SAME_STR(snapshot_frequency);
#undef SAME_STR
#undef SAME_INT
}

/* What an empty body means. */
static const struct pj_sandbox_create create_default = {
        .egress.mode = PJ_EGRESS_OPEN,
        .mount_path = "/workspace",
        .snapshot_mode = "manual",
};


TEST(create_defaults) {
        const char *bodies[] = { "", "{}", " \t\r\n{ }\n", "{'name':null,'template':null,'teamId':null,'environmentId':null,"
                                 "'region':null,'specs':null,'autoDestroy':null,'destroyTimeout':null,'oneShot':null,"
                                 "'blockOutbound':null,'egress':null,'persistent':null,'persistentDiskGB':null,"
                                 "'volumeId':null,'fromSnapshot':null,'snapshotMode':null,'snapshotFrequency':null,"
                                 "'mountPath':null}",
                                 "{'specs':{}}", "{'specs':{'cpu':null,'memory':null,'disk':null}}" };
        for (size_t i = 0; i < ELEMENTSOF(bodies); i++) {
                struct pj_sandbox_create c = {};
                ASSERT_EQ(create(bodies[i], &c), 0);
                check_create(&c, &create_default, __LINE__);
                pj_sandbox_create_done(&c);
        }
        /* NULL body with len 0 too */
        struct pj_sandbox_create c = {};
        struct err e = {};
        ASSERT_EQ(pj_sandbox_create_parse(NULL, 0, &c, &e), 0);
        pj_sandbox_create_done(&c);
}

TEST(create_full) {
        struct pj_sandbox_create c = {};
        ASSERT_EQ(create("{'name':'my box','template':'python-3.12','teamId':'0123456789abcdef01234567',"
                         "'environmentId':'aaaaaaaaaaaaaaaaaaaaaaaa','region':'us-east-1',"
                         "'specs':{'cpu':2000,'memory':2048,'disk':5},'autoDestroy':true,'destroyTimeout':'12h',"
                         "'oneShot':true,'egress':{'mode':'restricted','allow':['1.1.1.1','API.Example.com.','10.0.0.0/8',"
                         "'1.1.1.1','api.example.com']},'persistent':true,'persistentDiskGB':50,"
                         "'fromSnapshot':'ffffffffffffffffffffffff','snapshotMode':'automatic',"
                         "'snapshotFrequency':' 0  */2 * *\\t* ','mountPath':'/home/user/data'}",
                         &c),
                  0);
        check_create(&c,
                     &(struct pj_sandbox_create) {
                             .name = "my box", .template_name = "python-3.12", .team_id = "0123456789abcdef01234567",
                             .environment_id = "aaaaaaaaaaaaaaaaaaaaaaaa", .region = "us-east-1",
                             .from_snapshot = "ffffffffffffffffffffffff",
                             .has_cpu = true, .has_memory = true, .has_disk = true, .cpu = 2000, .memory = 2048, .disk = 5,
                             .auto_destroy = true, .destroy_timeout = "12h", .destroy_timeout_s = 12 * 3600, .one_shot = true,
                             .egress_set = true,
                             .egress = { .mode = PJ_EGRESS_RESTRICTED, .n_allow = 3,
                                         .allow = (char *[]) { "1.1.1.1", "api.example.com", "10.0.0.0/8" } },
                             .persistent = true, .has_persistent_disk_gb = true, .persistent_disk_gb = 50,
                             .mount_path = "/home/user/data", .snapshot_mode = "automatic",
                             .snapshot_frequency = "0 */2 * * *",
                     },
                     __LINE__);
        pj_sandbox_create_done(&c);
        ASSERT_NULL(c.name);
        pj_sandbox_create_done(&c); /* idempotent */
        pj_sandbox_create_done(NULL);
}

TEST(create_ret_untouched_on_error) {
        struct pj_sandbox_create c = { .cpu = 4242 };
        struct err e = {};
        ASSERT_EQ(pj_sandbox_create_parse("{\"specs\":{\"cpu\":0}}", 20, &c, &e), -EINVAL);
        ASSERT_EQ(c.cpu, 4242);
        ASSERT_NULL(c.mount_path);
        /* err may be NULL */
        ASSERT_EQ(pj_sandbox_create_parse("[", 1, &c, NULL), -EINVAL);
}

TEST(create_region) {
        struct pj_sandbox_create c = {};
        ASSERT_EQ(create("{'region':'auto'}", &c), 0);
        ASSERT_NULL(c.region);
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'region':'0123456789abcdef01234567'}", &c), 0);
        ASSERT_STREQ(c.region, "0123456789abcdef01234567");
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'region':'eu-west-2'}", &c), 0);
        ASSERT_STREQ(c.region, "eu-west-2");
        pj_sandbox_create_done(&c);
}

TEST(create_destroy_timeouts) {
        static const struct {
                const char *v;
                int64_t s;
        } t[] = { { "30m", 1800 }, { "1h", 3600 }, { "3h", 10800 }, { "6h", 21600 }, { "12h", 43200 }, { "18h", 64800 } };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                char body[128];
                struct pj_sandbox_create c = {};
                snprintf(body, sizeof(body), "{'autoDestroy':true,'destroyTimeout':'%s'}", t[i].v);
                ASSERT_EQ(create(body, &c), 0);
                ASSERT_TRUE(c.auto_destroy);
                ASSERT_STREQ(c.destroy_timeout, t[i].v);
                ASSERT_EQ(c.destroy_timeout_s, t[i].s);
                pj_sandbox_create_done(&c);
        }
        /* ignored (accepted, dropped) unless autoDestroy is true */
        const char *ignored[] = { "{'autoDestroy':false,'destroyTimeout':'2h'}", "{'destroyTimeout':'bogus'}",
                                  "{'autoDestroy':null,'destroyTimeout':'1h'}" };
        for (size_t i = 0; i < ELEMENTSOF(ignored); i++) {
                struct pj_sandbox_create c = {};
                ASSERT_EQ(create(ignored[i], &c), 0);
                ASSERT_FALSE(c.auto_destroy);
                ASSERT_NULL(c.destroy_timeout);
                ASSERT_EQ(c.destroy_timeout_s, 0);
                pj_sandbox_create_done(&c);
        }
}

TEST(create_lifecycle) {
        struct pj_sandbox_create c = {};
        ASSERT_EQ(create("{}", &c), 0);
        ASSERT_FALSE(c.pause_at_end);
        ASSERT_FALSE(c.pause_keep_memory);
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'lifecycle':{'onTimeout':'destroy'}}", &c), 0);
        ASSERT_FALSE(c.pause_at_end);
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'lifecycle':{'onTimeout':'pause'}}", &c), 0);
        ASSERT_TRUE(c.pause_at_end);
        ASSERT_FALSE(c.pause_keep_memory);
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'lifecycle':{'onTimeout':'pause','keepMemory':true}}", &c), 0);
        ASSERT_TRUE(c.pause_at_end);
        ASSERT_TRUE(c.pause_keep_memory);
        ASSERT_FALSE(c.auto_resume);
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'lifecycle':{'onTimeout':'pause','keepMemory':true,'autoResume':true}}", &c), 0);
        ASSERT_TRUE(c.auto_resume);
        pj_sandbox_create_done(&c);
}

TEST(create_egress_effective_policy) {
        struct pj_sandbox_create c = {};
        ASSERT_EQ(create("{'blockOutbound':true}", &c), 0);
        ASSERT_TRUE(c.block_outbound_set && c.block_outbound);
        ASSERT_FALSE(c.egress_set);
        ASSERT_EQ(c.egress.mode, PJ_EGRESS_DENY_ALL);
        pj_sandbox_create_done(&c);

        ASSERT_EQ(create("{'blockOutbound':false}", &c), 0);
        ASSERT_TRUE(c.block_outbound_set);
        ASSERT_FALSE(c.block_outbound);
        ASSERT_EQ(c.egress.mode, PJ_EGRESS_OPEN);
        pj_sandbox_create_done(&c);

        ASSERT_EQ(create("{'egress':{'mode':'deny_all'}}", &c), 0);
        ASSERT_TRUE(c.egress_set);
        ASSERT_EQ(c.egress.mode, PJ_EGRESS_DENY_ALL);
        pj_sandbox_create_done(&c);

        /* blockOutbound null counts as absent */
        ASSERT_EQ(create("{'blockOutbound':null,'egress':{'mode':'open'}}", &c), 0);
        ASSERT_EQ(c.egress.mode, PJ_EGRESS_OPEN);
        ASSERT_FALSE(c.block_outbound_set);
        pj_sandbox_create_done(&c);

        /* restricted without allow is allowed at create (allows nothing) */
        const char *restricted[] = { "{'egress':{'mode':'restricted'}}", "{'egress':{'mode':'restricted','allow':[]}}",
                                     "{'egress':{'mode':'restricted','allow':null}}" };
        for (size_t i = 0; i < ELEMENTSOF(restricted); i++) {
                ASSERT_EQ(create(restricted[i], &c), 0);
                ASSERT_EQ(c.egress.mode, PJ_EGRESS_RESTRICTED);
                ASSERT_EQ(c.egress.n_allow, 0);
                pj_sandbox_create_done(&c);
        }
        /* empty allow with other modes is tolerated at create */
        ASSERT_EQ(create("{'egress':{'mode':'open','allow':[]}}", &c), 0);
        ASSERT_EQ(c.egress.mode, PJ_EGRESS_OPEN);
        pj_sandbox_create_done(&c);

        /* exactly 50 entries, duplicates merged */
        char body[4096];
        int o = snprintf(body, sizeof(body), "{'egress':{'mode':'restricted','allow':[");
        for (int i = 0; i < 50; i++)
                o += snprintf(body + o, sizeof(body) - (size_t) o, "%s'10.0.%d.0/24'", i ? "," : "", i % 25);
        snprintf(body + o, sizeof(body) - (size_t) o, "]}}");
        ASSERT_EQ(create(body, &c), 0);
        ASSERT_EQ(c.egress.n_allow, 25);
        ASSERT_STREQ(c.egress.allow[24], "10.0.24.0/24");
        pj_sandbox_create_done(&c);
}

TEST(create_storage) {
        struct pj_sandbox_create c = {};
        ASSERT_EQ(create("{'persistent':true,'persistentDiskGB':10}", &c), 0);
        ASSERT_TRUE(c.persistent);
        ASSERT_EQ(c.persistent_disk_gb, 10);
        ASSERT_STREQ(c.mount_path, "/workspace");
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'volumeId':'abcdefabcdefabcdefabcdef','mountPath':'/data'}", &c), 0);
        ASSERT_STREQ(c.volume_id, "abcdefabcdefabcdefabcdef");
        ASSERT_STREQ(c.mount_path, "/data");
        ASSERT_FALSE(c.persistent);
        pj_sandbox_create_done(&c);
        /* persistent:false with volumeId is not a conflict */
        ASSERT_EQ(create("{'volumeId':'abcdefabcdefabcdefabcdef','persistent':false}", &c), 0);
        pj_sandbox_create_done(&c);
        ASSERT_EQ(create("{'persistent':false}", &c), 0);
        pj_sandbox_create_done(&c);
}

static const char *const good_create[] = {
        "{'name':'a'}",
        "{'name':' leading and trailing spaces '}",
        /* 64 code points of 2 bytes each */
        "{'name':'\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9"
        "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9'}",
        "{'name':'1234567890123456789012345678901234567890123456789012345678901234'}",
        "{'template':'node-22'}",
        "{'template':'a'}",
        "{'template':'my_tpl.v2-x'}",
        "{'template':'1234567890123456789012345678901234567890123456789012345678901234'}",
        "{'region':'a'}",
        "{'specs':{'cpu':1,'memory':1,'disk':1}}",
        "{'specs':{'cpu':2000,'memory':2048,'disk':5}}",
        "{'specs':{'memory':512}}",
        "{'autoDestroy':false}",
        "{'oneShot':false}",
        "{'persistent':true,'persistentDiskGB':50}",
        "{'mountPath':'/a'}",
        "{'mountPath':'/procfs'}",
        "{'mountPath':'/devices/x'}",
        "{'mountPath':'/srv/a.b_c-d@e+f/G9'}",
        "{'mountPath':'/...'}",
        "{'mountPath':'/.hidden'}",
        "{'snapshotMode':'manual'}",
        "{'snapshotMode':'manual','snapshotFrequency':null}",
        "{'snapshotMode':'automatic','snapshotFrequency':'* * * * *'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'*/5 * * * *'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'0 0 1 1 0'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'59 23 31 12 7'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'0-30/10 1,2,3 1-15 */3 1-5'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'00 05 01 01 00'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'0,15,30,45 */2 * 1-12/2 *'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'0 0 * * 0-7'}",
        "{'snapshotMode':'automatic','snapshotFrequency':'*/60 * * * *'}",
        "{'egress':{'mode':'restricted','allow':['1.1.1.1','api.example.com','10.0.0.0/8']}}",
        "{'egress':{'allow':['1.1.1.1'],'mode':'restricted'}}",
        "{'egress':{'mode':'deny_all','allow':null}}",
};

static char long_string_body[2][600];
static const struct bad_case bad_create[] = {
        /* unknown and duplicate fields */
        { "{'destroy_timeout':'1h'}", "destroy_timeout", "Unknown field 'destroy_timeout'; did you mean 'destroyTimeout'?" },
        { "{'foo':1}", "foo", "Unknown field 'foo'" },
        { "{'Name':'x'}", "Name", "did you mean 'name'?" },
        { "{'block_outbound':true}", "block_outbound", "did you mean 'blockOutbound'?" },
        { "{'persistent_disk_gb':10}", "persistent_disk_gb", "did you mean 'persistentDiskGB'?" },
        { "{'':1}", "", "Unknown field ''" },
        { "{'\\u0001x':1}", "\\x01x", "Unknown field '\\x01x'" },
        { "{'name':'a','name':'b'}", "name", "Duplicate field 'name'" },
        { "{'name':null,'name':'b'}", "name", "Duplicate field 'name'" },
        { "{'specs':{'gpu':1}}", "specs.gpu", "Unknown field 'specs.gpu'" },
        { "{'specs':{'CPU':1}}", "specs.CPU", "did you mean 'specs.cpu'?" },
        { "{'specs':{'cpu':1,'cpu':2}}", "specs.cpu", "Duplicate field 'specs.cpu'" },
        { "{'egress':{'mode':'open','extra':1}}", "egress.extra", "Unknown field 'egress.extra'" },
        { "{'egress':{'mode':'open','Allow':[]}}", "egress.Allow", "did you mean 'egress.allow'?" },
        /* name */
        { "{'name':''}", "name", "name must be 1 to 64 characters" },
        { "{'name':'12345678901234567890123456789012345678901234567890123456789012345'}", "name", "1 to 64" },
        { "{'name':'a\\u0001b'}", "name", "without control characters" },
        { "{'name':'a\\nb'}", "name", "without control characters" },
        { "{'name':'a\\u007fb'}", "name", "without control characters" },
        { "{'name':'a\\u0085b'}", "name", "without control characters" },
        { "{'name':'a\\u202eb'}", "name", "without control characters" },
        { "{'name':123}", "name", "name must be a string" },
        { "{'name':true}", "name", "name must be a string" },
        { "{'name':['a']}", "name", "name must be a string" },
        { "{'name':{}}", "name", "name must be a string" },
        /* template */
        { "{'template':''}", "template", "template must be 1 to 64 characters of a-z, 0-9" },
        { "{'template':'Node-22'}", "template", "template must be" },
        { "{'template':'a/b'}", "template", "template must be" },
        { "{'template':'a b'}", "template", "template must be" },
        { "{'template':'12345678901234567890123456789012345678901234567890123456789012345'}", "template", "1 to 64" },
        { "{'template':5}", "template", "template must be a string" },
        /* ids */
        { "{'teamId':'0123456789ABCDEF01234567'}", "teamId", "teamId must be a 24-character lowercase hex id" },
        { "{'teamId':'0123456789abcdef0123456'}", "teamId", "24-character" },
        { "{'teamId':'0123456789abcdef012345678'}", "teamId", "24-character" },
        { "{'teamId':'0123456789abcdef0123456g'}", "teamId", "24-character" },
        { "{'teamId':''}", "teamId", "24-character" },
        { "{'teamId':123456789012345678901234}", "teamId", "teamId must be a string" },
        { "{'environmentId':'xyz'}", "environmentId", "environmentId must be a 24-character" },
        { "{'volumeId':'0123456789abcdef0123456 '}", "volumeId", "volumeId must be a 24-character" },
        { "{'fromSnapshot':'../../../../etc/passwd00'}", "fromSnapshot", "fromSnapshot must be a 24-character" },
        { "{'fromSnapshot':false}", "fromSnapshot", "must be a string" },
        /* region */
        { "{'region':''}", "region", "region must be \"auto\", a region id or a region name" },
        { "{'region':'US-EAST'}", "region", "region must be" },
        { "{'region':'us_east'}", "region", "region must be" },
        { "{'region':'Auto'}", "region", "region must be" },
        { "{'region':'12345678901234567890123456789012345678901234567890123456789012345'}", "region", "1 to 64" },
        { "{'region':1}", "region", "region must be a string" },
        /* specs */
        { "{'specs':1}", "specs", "specs must be an object" },
        { "{'specs':[]}", "specs", "specs must be an object" },
        { "{'specs':'big'}", "specs", "specs must be an object" },
        { "{'specs':{'cpu':0}}", "specs.cpu", "specs.cpu must be an integer between 1 and 2000" },
        { "{'specs':{'cpu':2001}}", "specs.cpu", "between 1 and 2000" },
        { "{'specs':{'cpu':-1}}", "specs.cpu", "between 1 and 2000" },
        { "{'specs':{'cpu':-0}}", "specs.cpu", "between 1 and 2000" },
        { "{'specs':{'cpu':1.5}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':2.0}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':1e3}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':1E0}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':'2'}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':true}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':[1]}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':{}}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':99999999999999999999999999999}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':4294967297}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':-9223372036854775809}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'cpu':1e400}}", "specs.cpu", "must be an integer" },
        { "{'specs':{'memory':0}}", "specs.memory", "specs.memory must be an integer between 1 and 2048" },
        { "{'specs':{'memory':2049}}", "specs.memory", "between 1 and 2048" },
        { "{'specs':{'memory':'512'}}", "specs.memory", "between 1 and 2048" },
        { "{'specs':{'disk':0}}", "specs.disk", "specs.disk must be an integer between 1 and 5" },
        { "{'specs':{'disk':6}}", "specs.disk", "between 1 and 5" },
        /* booleans */
        { "{'autoDestroy':'true'}", "autoDestroy", "autoDestroy must be true or false" },
        { "{'autoDestroy':1}", "autoDestroy", "autoDestroy must be true or false" },
        { "{'oneShot':'yes'}", "oneShot", "oneShot must be true or false" },
        { "{'oneShot':0}", "oneShot", "oneShot must be true or false" },
        { "{'blockOutbound':'true'}", "blockOutbound", "blockOutbound must be true or false" },
        { "{'persistent':'true'}", "persistent", "persistent must be true or false" },
        { "{'persistent':[]}", "persistent", "persistent must be true or false" },
        /* lifecycle */
        { "{'lifecycle':'pause'}", "lifecycle", "lifecycle must be an object" },
        { "{'lifecycle':{'onTimeout':'sleep'}}", "lifecycle.onTimeout", "must be \"destroy\" or \"pause\"" },
        { "{'lifecycle':{'onTimeout':1}}", "lifecycle.onTimeout", "" },
        { "{'lifecycle':{'keepMemory':true}}", "lifecycle.keepMemory", "applies to a pause" },
        { "{'lifecycle':{'onTimeout':'destroy','keepMemory':true}}", "lifecycle.keepMemory", "applies to a pause" },
        { "{'lifecycle':{'onTimeout':'pause','keepMemory':'yes'}}", "lifecycle.keepMemory", "true or false" },
        { "{'lifecycle':{'onTimeout':'pause','resume':true}}", "lifecycle.resume", "Unknown field" },
        { "{'lifecycle':{'onTimeout':'pause','autoResume':true}}", "lifecycle.autoResume", "keepMemory to true" },
        { "{'lifecycle':{'onTimeout':'pause','keepMemory':true,'autoResume':1}}", "lifecycle.autoResume", "true or false" },
        /* destroyTimeout */
        { "{'autoDestroy':true}", "destroyTimeout", "destroyTimeout is required when autoDestroy is true" },
        { "{'autoDestroy':true,'destroyTimeout':null}", "destroyTimeout", "destroyTimeout is required" },
        { "{'autoDestroy':true,'destroyTimeout':'2h'}", "destroyTimeout", "destroyTimeout must be one of 30m, 1h, 3h, 6h, 12h, 18h" },
        { "{'autoDestroy':true,'destroyTimeout':'30M'}", "destroyTimeout", "must be one of" },
        { "{'autoDestroy':true,'destroyTimeout':''}", "destroyTimeout", "must be one of" },
        { "{'autoDestroy':true,'destroyTimeout':'1h '}", "destroyTimeout", "must be one of" },
        { "{'autoDestroy':true,'destroyTimeout':3600}", "destroyTimeout", "destroyTimeout must be a string" },
        { "{'destroyTimeout':3600}", "destroyTimeout", "destroyTimeout must be a string" },
        /* egress vs blockOutbound */
        { "{'blockOutbound':true,'egress':{'mode':'deny_all'}}", "egress", "Cannot set both egress and blockOutbound" },
        { "{'blockOutbound':false,'egress':{'mode':'open'}}", "egress", "Cannot set both egress and blockOutbound" },
        { "{'egress':{'mode':'restricted','allow':['1.1.1.1']},'blockOutbound':true}", "egress", "Cannot set both" },
        /* egress */
        { "{'egress':'open'}", "egress", "egress must be an object" },
        { "{'egress':[]}", "egress", "egress must be an object" },
        { "{'egress':true}", "egress", "egress must be an object" },
        { "{'egress':{}}", "egress.mode", "egress.mode is required" },
        { "{'egress':{'mode':null}}", "egress.mode", "egress.mode is required" },
        { "{'egress':{'allow':['1.1.1.1']}}", "egress.mode", "egress.mode is required" },
        { "{'egress':{'mode':'OPEN'}}", "egress.mode", "egress.mode must be one of open, restricted, deny_all" },
        { "{'egress':{'mode':'deny-all'}}", "egress.mode", "must be one of" },
        { "{'egress':{'mode':''}}", "egress.mode", "must be one of" },
        { "{'egress':{'mode':1}}", "egress.mode", "egress.mode must be a string" },
        { "{'egress':{'mode':'open','allow':['1.1.1.1']}}", "egress.allow", "egress.allow must be omitted unless egress.mode is restricted" },
        { "{'egress':{'mode':'deny_all','allow':['1.1.1.1']}}", "egress.allow", "must be omitted" },
        { "{'egress':{'mode':'restricted','allow':'1.1.1.1'}}", "egress.allow", "egress.allow must be an array of strings" },
        { "{'egress':{'mode':'restricted','allow':{}}}", "egress.allow", "must be an array" },
        { "{'egress':{'mode':'restricted','allow':[1]}}", "egress.allow[0]", "egress.allow[0] must be a string" },
        { "{'egress':{'mode':'restricted','allow':[null]}}", "egress.allow[0]", "must be a string" },
        { "{'egress':{'mode':'restricted','allow':[['1.1.1.1']]}}", "egress.allow[0]", "must be a string" },
        { "{'egress':{'mode':'restricted','allow':['1.1.1.1','x.com','10.0.0.1/8']}}", "egress.allow[2]",
          "egress.allow[2] (\"10.0.0.1/8\") has host bits set; did you mean 10.0.0.0/8?" },
        { "{'egress':{'mode':'restricted','allow':['1.1.1.1','::1']}}", "egress.allow[1]", "IPv6 is not supported" },
        { "{'egress':{'mode':'restricted','allow':['*.example.com']}}", "egress.allow[0]", "wildcard" },
        { "{'egress':{'mode':'restricted','allow':['']}}", "egress.allow[0]", "is empty" },
        { "{'egress':{'mode':'restricted','allow':['010.0.0.1']}}", "egress.allow[0]", "not a valid IPv4" },
        { "{'egress':{'mode':'restricted','allow':['a\\u0000.com']}}", "egress.allow[0]", "must not contain NUL" },
        { "{'egress':{'mode':'restricted','allow':['\\u00e9.com']}}", "egress.allow[0]", "(\"\\xc3\\xa9.com\")" },
        { "{'egress':{'mode':'restricted','allow':['\\\"quoted\\\".com']}}", "egress.allow[0]", "(\"\\\"quoted\\\".com\")" },
        { long_string_body[0], "egress.allow", "egress.allow must have at most 50 entries" },
        /* persistent / volumeId */
        { "{'persistent':true}", "persistentDiskGB", "persistentDiskGB is required when persistent is true" },
        { "{'persistent':true,'persistentDiskGB':null}", "persistentDiskGB", "persistentDiskGB is required" },
        { "{'persistent':true,'persistentDiskGB':9}", "persistentDiskGB", "persistentDiskGB must be an integer between 10 and 50" },
        { "{'persistent':true,'persistentDiskGB':51}", "persistentDiskGB", "between 10 and 50" },
        { "{'persistent':true,'persistentDiskGB':20.5}", "persistentDiskGB", "must be an integer" },
        { "{'persistent':true,'persistentDiskGB':'20'}", "persistentDiskGB", "must be an integer" },
        { "{'persistentDiskGB':20}", "persistentDiskGB", "persistentDiskGB requires persistent to be true" },
        { "{'persistent':false,'persistentDiskGB':20}", "persistentDiskGB", "requires persistent" },
        { "{'volumeId':'abcdefabcdefabcdefabcdef','persistent':true,'persistentDiskGB':20}", "persistent",
          "Cannot set both volumeId and persistent" },
        { "{'volumeId':'abcdefabcdefabcdefabcdef','persistent':true}", "persistent", "Cannot set both volumeId and persistent" },
        { "{'volumeId':'abcdefabcdefabcdefabcdef','persistentDiskGB':20}", "persistentDiskGB",
          "Cannot set both volumeId and persistentDiskGB" },
        { "{'volumeId':'abcdefabcdefabcdefabcdef','persistent':false,'persistentDiskGB':20}", "persistentDiskGB",
          "Cannot set both volumeId and persistentDiskGB" },
        /* mountPath */
        { "{'mountPath':''}", "mountPath", "mountPath must be an absolute path" },
        { "{'mountPath':'data'}", "mountPath", "mountPath must be an absolute path" },
        { "{'mountPath':'/'}", "mountPath", "mountPath must not be '/'" },
        { "{'mountPath':'/a/../b'}", "mountPath", "'..'" },
        { "{'mountPath':'/..'}", "mountPath", "'..'" },
        { "{'mountPath':'/a/./b'}", "mountPath", "'.'" },
        { "{'mountPath':'/a//b'}", "mountPath", "empty components" },
        { "{'mountPath':'//a'}", "mountPath", "empty components" },
        { "{'mountPath':'/a/'}", "mountPath", "trailing '/'" },
        { "{'mountPath':'/a b'}", "mountPath", "mountPath may only contain" },
        { "{'mountPath':'/a:b'}", "mountPath", "may only contain" },
        { "{'mountPath':'/a,b'}", "mountPath", "may only contain" },
        { "{'mountPath':'/a\\nb'}", "mountPath", "may only contain" },
        { "{'mountPath':'/caf\\u00e9'}", "mountPath", "may only contain" },
        { "{'mountPath':'/a\\u0000'}", "mountPath", "must not contain NUL" },
        { "{'mountPath':'/proc'}", "mountPath", "mountPath must not be /proc or below it" },
        { "{'mountPath':'/proc/self'}", "mountPath", "/proc" },
        { "{'mountPath':'/sys/fs/cgroup'}", "mountPath", "/sys" },
        { "{'mountPath':'/dev'}", "mountPath", "/dev" },
        { "{'mountPath':1}", "mountPath", "mountPath must be a string" },
        { long_string_body[1], "mountPath", "mountPath must be at most 255 characters" },
        /* snapshots */
        { "{'snapshotMode':'Manual'}", "snapshotMode", "snapshotMode must be one of manual, automatic" },
        { "{'snapshotMode':'auto'}", "snapshotMode", "must be one of" },
        { "{'snapshotMode':1}", "snapshotMode", "snapshotMode must be a string" },
        { "{'snapshotMode':'automatic'}", "snapshotFrequency", "snapshotFrequency is required when snapshotMode is automatic" },
        { "{'snapshotMode':'automatic','snapshotFrequency':null}", "snapshotFrequency", "is required" },
        { "{'snapshotFrequency':'0 * * * *'}", "snapshotFrequency", "snapshotFrequency is only allowed when snapshotMode is automatic" },
        { "{'snapshotMode':'manual','snapshotFrequency':'0 * * * *'}", "snapshotFrequency", "only allowed" },
        { "{'snapshotMode':'automatic','snapshotFrequency':5}", "snapshotFrequency", "snapshotFrequency must be a string" },
        { "{'snapshotMode':'automatic','snapshotFrequency':''}", "snapshotFrequency", "snapshotFrequency must be a 5-field cron expression" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'   '}", "snapshotFrequency", "5-field" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* * * *'}", "snapshotFrequency", "5-field" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* * * * * *'}", "snapshotFrequency", "5-field" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'@hourly'}", "snapshotFrequency", "minute field" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'60 * * * *'}", "snapshotFrequency",
          "snapshotFrequency is not a valid cron expression: minute field: value 60 is outside 0-59" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* 24 * * *'}", "snapshotFrequency", "hour field: value 24 is outside 0-23" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* * 0 * *'}", "snapshotFrequency", "day-of-month field: value 0 is outside 1-31" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* * 32 * *'}", "snapshotFrequency", "day-of-month field" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* * * 0 *'}", "snapshotFrequency", "month field: value 0 is outside 1-12" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* * * 13 *'}", "snapshotFrequency", "month field" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'* * * * 8'}", "snapshotFrequency", "day-of-week field: value 8 is outside 0-7" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'*/0 * * * *'}", "snapshotFrequency", "step" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'*/61 * * * *'}", "snapshotFrequency", "step" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'*/ * * * *'}", "snapshotFrequency", "step" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'5-1 * * * *'}", "snapshotFrequency", "range 5-1 is backwards" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'5/10 * * * *'}", "snapshotFrequency", "a step needs" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'a * * * *'}", "snapshotFrequency", "expected a number" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'1,,2 * * * *'}", "snapshotFrequency", "expected a number" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'1, * * * *'}", "snapshotFrequency", "expected a number" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'-1 * * * *'}", "snapshotFrequency", "expected a number" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'1- * * * *'}", "snapshotFrequency", "expected a number" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'100 * * * *'}", "snapshotFrequency", "expected a number" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'** * * * *'}", "snapshotFrequency", "unexpected character" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'0 0 * JAN *'}", "snapshotFrequency", "month field" },
        { "{'snapshotMode':'automatic','snapshotFrequency':'0 0 * * *\\n'}", "snapshotFrequency", "day-of-week field" },
};

static void fill_long_bodies(void) {
        int o = snprintf(long_string_body[0], sizeof(long_string_body[0]), "{'egress':{'mode':'restricted','allow':[");
        for (int i = 0; i < 51; i++)
                o += snprintf(long_string_body[0] + o, sizeof(long_string_body[0]) - (size_t) o, "%s'1.1.1.%d'",
                              i ? "," : "", i);
        snprintf(long_string_body[0] + o, sizeof(long_string_body[0]) - (size_t) o, "]}}");
        o = snprintf(long_string_body[1], sizeof(long_string_body[1]), "{'mountPath':'");
        for (int i = 0; i < 64; i++)
                o += snprintf(long_string_body[1] + o, sizeof(long_string_body[1]) - (size_t) o, "/abc");
        snprintf(long_string_body[1] + o, sizeof(long_string_body[1]) - (size_t) o, "'}");
}

TEST(create_valid_table) {
        CHECK_GOOD(do_create, good_create);
        /* 255-byte mountPath is the maximum */
        char body[400];
        int o = snprintf(body, sizeof(body), "{'mountPath':'");
        for (int i = 0; i < 63; i++)
                o += snprintf(body + o, sizeof(body) - (size_t) o, "/abc");
        snprintf(body + o, sizeof(body) - (size_t) o, "/ab'}");
        struct pj_sandbox_create c = {};
        ASSERT_EQ(create(body, &c), 0);
        ASSERT_EQ(strlen(c.mount_path), 255);
        pj_sandbox_create_done(&c);
}

TEST(create_invalid_table) {
        fill_long_bodies();
        CHECK_BAD(do_create, bad_create);
}

/* ---- exec / code ------------------------------------------------------- */

TEST(exec_valid) {
        struct pj_exec x = {};
        struct err e = {};
        _cleanup_free_ char *b = q("{'cmd':'ls -la | wc -l && echo done > /tmp/x'}");
        ASSERT_EQ(pj_exec_parse(b, strlen(b), &x, &e), 0);
        ASSERT_STREQ(x.cmd, "ls -la | wc -l && echo done > /tmp/x");
        ASSERT_EQ(x.run.timeout_s, 30);
        ASSERT_STREQ(x.run.cwd, "/");
        ASSERT_EQ(x.run.n_env, 0);
        ASSERT_FALSE(x.run.stream);
        pj_exec_done(&x);

        _cleanup_free_ char *b2 = q("{'cmd':'env','timeout_seconds':300,'cwd':'/home/user','env':{'NODE_ENV':'production',"
                                    "'_x1':'','DATABASE_URL':'postgres://u:p@h/db?x=\\u00e9'},'stream':true}");
        ASSERT_EQ(pj_exec_parse(b2, strlen(b2), &x, &e), 0);
        ASSERT_EQ(x.run.timeout_s, 300);
        ASSERT_STREQ(x.run.cwd, "/home/user");
        ASSERT_EQ(x.run.n_env, 3);
        ASSERT_STREQ(x.run.env_keys[0], "NODE_ENV");
        ASSERT_STREQ(x.run.env_values[0], "production");
        ASSERT_STREQ(x.run.env_keys[1], "_x1");
        ASSERT_STREQ(x.run.env_values[1], "");
        ASSERT_STREQ(x.run.env_keys[2], "DATABASE_URL");
        ASSERT_STREQ(x.run.env_values[2], "postgres://u:p@h/db?x=\xc3\xa9");
        ASSERT_TRUE(x.run.stream);
        pj_exec_done(&x);
        pj_exec_done(&x);
        pj_exec_done(NULL);

        _cleanup_free_ char *b3 = q("{'cmd':'x','timeout_seconds':1,'cwd':'/','env':{},'stream':false}");
        ASSERT_EQ(pj_exec_parse(b3, strlen(b3), &x, &e), 0);
        ASSERT_EQ(x.run.timeout_s, 1);
        pj_exec_done(&x);

        _cleanup_free_ char *b4 = q("{'cmd':'x','timeout_seconds':null,'cwd':null,'env':null,'stream':null}");
        ASSERT_EQ(pj_exec_parse(b4, strlen(b4), &x, &e), 0);
        ASSERT_EQ(x.run.timeout_s, 30);
        ASSERT_STREQ(x.run.cwd, "/");
        pj_exec_done(&x);
}

TEST(exec_stdin_and_processes) {
        struct err e = {};
        struct pj_exec x = {};
        _cleanup_free_ char *b = q("{'cmd':'wc -c','stdin':'hello\\n'}");
        ASSERT_EQ(pj_exec_parse(b, strlen(b), &x, &e), 0);
        ASSERT_EQ(x.stdin_len, 6);
        ASSERT_STREQ(x.stdin_data, "hello\n");
        pj_exec_done(&x);
        _cleanup_free_ char *b1 = q("{'cmd':'x','stdin':7}");
        ASSERT_EQ(pj_exec_parse(b1, strlen(b1), &x, &e), -EINVAL);
        ASSERT_STREQ(e.field, "stdin");

        struct pj_process_start p = {};
        _cleanup_free_ char *b2 = q("{'cmd':'python3 -i','tag':'repl','stdin':true,'pty':{'rows':40,'cols':120},"
                                    "'env':{'A':'1'},'cwd':'/tmp'}");
        ASSERT_EQ(pj_process_start_parse(b2, strlen(b2), &p, &e), 0);
        ASSERT_STREQ(p.cmd, "python3 -i");
        ASSERT_STREQ(p.tag, "repl");
        ASSERT_TRUE(p.stdin_open);
        ASSERT_EQ(p.rows, 40);
        ASSERT_EQ(p.cols, 120);
        ASSERT_EQ(p.n_env, 1);
        ASSERT_STREQ(p.cwd, "/tmp");
        pj_process_start_done(&p);
        _cleanup_free_ char *b3 = q("{'cmd':'top','pty':{}}");
        ASSERT_EQ(pj_process_start_parse(b3, strlen(b3), &p, &e), 0);
        ASSERT_EQ(p.rows, 24);
        ASSERT_EQ(p.cols, 80);
        ASSERT_NULL(p.tag);
        pj_process_start_done(&p);
        static const struct { const char *body, *field; } bad[] = {
                { "{}", "cmd" },
                { "{'cmd':''}", "cmd" },
                { "{'cmd':'x','tag':''}", "tag" },
                { "{'cmd':'x','tag':'a\\u0007b'}", "tag" },
                { "{'cmd':'x','pty':{'rows':1001}}", "pty.rows" },
                { "{'cmd':'x','pty':{'cols':0}}", "pty.cols" },
                { "{'cmd':'x','pty':{'depth':3}}", "pty.depth" },
                { "{'cmd':'x','pty':3}", "pty" },
                { "{'cmd':'x','stdin':'yes'}", "stdin" },
                { "{'cmd':'x','timeout_seconds':5}", "timeout_seconds" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *bb = q(bad[i].body);
                e = (struct err) {};
                if (pj_process_start_parse(bb, strlen(bb), &p, &e) != -EINVAL || strcmp(e.field, bad[i].field))
                        test_fail(__FILE__, __LINE__, "%s: field '%s' (%s), want '%s'", bad[i].body, e.field, e.message,
                                  bad[i].field);
        }

        struct pj_process_stdin in = {};
        _cleanup_free_ char *b4 = q("{'data':'6*7\\n'}");
        ASSERT_EQ(pj_process_stdin_parse(b4, strlen(b4), &in, &e), 0);
        ASSERT_EQ(in.len, 4);
        ASSERT_FALSE(in.close);
        pj_process_stdin_done(&in);
        _cleanup_free_ char *b5 = q("{'close':true}");
        ASSERT_EQ(pj_process_stdin_parse(b5, strlen(b5), &in, &e), 0);
        ASSERT_TRUE(in.close);
        ASSERT_EQ(in.len, 0);
        pj_process_stdin_done(&in);
        _cleanup_free_ char *b6 = q("{}");
        ASSERT_EQ(pj_process_stdin_parse(b6, strlen(b6), &in, &e), -EINVAL);
        ASSERT_STREQ(e.field, "data");

        int sig = 0, rows = 0, cols = 0;
        static const struct { const char *body; int want; } sigs[] = {
                { "{'signal':'SIGINT'}", 2 }, { "{'signal':'TERM'}", 15 }, { "{'signal':9}", 9 }, { "{'signal':64}", 64 },
                { "{'signal':'SIGWINCH'}", 28 }, { "{'signal':0}", -1 }, { "{'signal':65}", -1 }, { "{'signal':'SIGFOO'}", -1 },
                { "{'signal':true}", -1 }, { "{}", -1 }, { "{'signal':2,'x':1}", -1 },
        };
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
                _cleanup_free_ char *bb = q(sigs[i].body);
                int r = pj_process_signal_parse(bb, strlen(bb), &sig, &e);
                if (sigs[i].want < 0 ? r != -EINVAL : r != 0 || sig != sigs[i].want)
                        test_fail(__FILE__, __LINE__, "%s -> %d (signal %d)", sigs[i].body, r, sig);
        }
        _cleanup_free_ char *b7 = q("{'rows':30,'cols':100}");
        ASSERT_EQ(pj_process_resize_parse(b7, strlen(b7), &rows, &cols, &e), 0);
        ASSERT_EQ(rows, 30);
        ASSERT_EQ(cols, 100);
        _cleanup_free_ char *b8 = q("{'rows':30}");
        ASSERT_EQ(pj_process_resize_parse(b8, strlen(b8), &rows, &cols, &e), -EINVAL);
        ASSERT_STREQ(e.field, "cols");
}

/* POST /sandboxes/{id}/pause: keepMemory (issue 37), false when absent or the body is empty;
 * other fields and other types refused by name. */
TEST(pause_bodies) {
        struct err e;
        static const struct { const char *body; int want; } cases[] = {
                { "", 0 }, { "{}", 0 }, { "{'keepMemory':false}", 0 }, { "{'keepMemory':true}", 1 },
                { "{'keepMemory':1}", -1 }, { "{'keepMemroy':true}", -1 }, { "[]", -1 }, { "{'keepMemory':true,'x':1}", -1 },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *b = q(cases[i].body);
                bool keep = false;
                memset(&e, 0, sizeof(e));
                int r = pj_pause_parse(b, strlen(b), &keep, &e);
                if (cases[i].want < 0 ? r != -EINVAL : r != 0 || keep != (cases[i].want == 1))
                        test_fail(__FILE__, __LINE__, "%s -> %d (keep %d)", cases[i].body, r, keep);
        }
        _cleanup_free_ char *bad = q("{'keepMemroy':true}");
        bool keep = false;
        ASSERT_EQ(pj_pause_parse(bad, strlen(bad), &keep, &e), -EINVAL);
        ASSERT_NOT_NULL(strstr(e.message, "keepMemroy"));
}

TEST(preview_create_bodies) {
        struct pj_preview_create p;
        struct err e = { 0 };
        _cleanup_free_ char *ok = q("{'port':8000,'expiresIn':120,'public':true,'keepHost':false}");
        ASSERT_EQ(pj_preview_create_parse(ok, strlen(ok), &p, &e), 0);
        ASSERT_EQ(p.port, 8000);
        ASSERT_EQ(p.expires_in_s, 120);
        ASSERT_TRUE(p.public_);
        ASSERT_FALSE(p.keep_host);
        static const struct { const char *body, *field; } bad[] = {
                { "{}", "port" }, { "{'port':0}", "port" }, { "{'port':65536}", "port" }, { "{'port':'80'}", "port" },
                { "{'port':80.5}", "port" }, { "{'port':80,'expiresIn':0}", "expiresIn" },
                { "{'port':80,'expiresIn':31536001}", "expiresIn" }, { "{'port':80,'public':1}", "public" },
                { "{'port':80,'keepHost':'yes'}", "keepHost" }, { "{'port':80,'host':'x'}", "host" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *bb = q(bad[i].body);
                e = (struct err) { 0 };
                if (pj_preview_create_parse(bb, strlen(bb), &p, &e) != -EINVAL || strcmp(e.field, bad[i].field))
                        test_fail(__FILE__, __LINE__, "%s -> field '%s' (want '%s')", bad[i].body, e.field, bad[i].field);
        }
        ASSERT_EQ(pj_preview_create_parse("", 0, &p, &e), -EINVAL);
}

/* prefix, then len bytes repeating unit, then suffix: a body of a chosen size (xmalloc'd). */
static char *sized_body(const char *prefix, const char *unit, size_t len, const char *suffix) {
        size_t p = strlen(prefix), u = strlen(unit), x = strlen(suffix);
        char *b = xmalloc(p + len + x + 1);
        memcpy(b, prefix, p);
        for (size_t i = 0; i < len; i++)
                b[p + i] = unit[i % u];
        memcpy(b + p + len, suffix, x + 1);
        return b;
}

/* With max bytes of unit between prefix and suffix the body parses; with one more it is
 * refused naming field, with msg. */
static void check_max(parse_fn fn, const char *prefix, const char *unit, size_t max, const char *suffix, const char *field,
                      const char *msg, int line) {
        _cleanup_free_ char *ok = sized_body(prefix, unit, max, suffix);
        _cleanup_free_ char *over = sized_body(prefix, unit, max + 1, suffix);
        struct err e = {};
        if (fn(ok, strlen(ok), &e) != 0)
                test_fail(__FILE__, line, "%zu bytes refused: [%s] %s", max, e.field, e.message);
        check_bad_raw(fn, over, strlen(over), field, msg, line);
}

TEST(exec_limits) {
        struct pj_exec x = {};
        struct err e = {};
        check_max(do_exec, "{\"cmd\":\"", "a", 65536, "\"}", "cmd", "cmd must be at most 65536 bytes", __LINE__);
        check_max(do_exec, "{\"cmd\":\"x\",\"env\":{\"K\":\"", "v", 32768, "\"}}", "env.K",
                  "env.K must be at most 32768 bytes", __LINE__);
        check_max(do_exec, "{\"cmd\":\"x\",\"env\":{\"", "K", 256, "\":\"v\"}}", "env", "is not a valid variable name",
                  __LINE__);
        /* cwd components of 99 bytes: 4096 bytes in all is the limit */
        char unit[101] = "/";
        memset(unit + 1, 'd', 99);
        check_max(do_exec, "{\"cmd\":\"x\",\"cwd\":\"", unit, 4096, "\"}", "cwd", "cwd must be at most 4096 bytes",
                  __LINE__);
        _cleanup_free_ char *cwd = sized_body("{\"cmd\":\"x\",\"cwd\":\"", unit, 4096, "\"}");
        ASSERT_EQ(pj_exec_parse(cwd, strlen(cwd), &x, &e), 0);
        ASSERT_EQ(strlen(x.run.cwd), 4096);
        pj_exec_done(&x);

        /* 128 env entries fine, 129 not */
        for (int count = 128; count <= 129; count++) {
                size_t cap = 64 + (size_t) count * 32;
                _cleanup_free_ char *b = xmalloc(cap);
                int o = snprintf(b, cap, "{\"cmd\":\"x\",\"env\":{");
                for (int i = 0; i < count; i++)
                        o += snprintf(b + o, cap - (size_t) o, "%s\"V%d\":\"%d\"", i ? "," : "", i, i);
                snprintf(b + o, cap - (size_t) o, "}}");
                if (count == 128) {
                        ASSERT_EQ(pj_exec_parse(b, strlen(b), &x, &e), 0);
                        ASSERT_EQ(x.run.n_env, 128);
                        ASSERT_STREQ(x.run.env_keys[127], "V127");
                        pj_exec_done(&x);
                } else
                        check_bad_raw(do_exec, b, strlen(b), "env", "env must have at most 128 entries", __LINE__);
        }
}

static const struct bad_case bad_exec[] = {
        { "{}", "cmd", "cmd is required" },
        { "{'cmd':null}", "cmd", "cmd is required" },
        { "{'cmd':''}", "cmd", "cmd must not be empty" },
        { "{'cmd':1}", "cmd", "cmd must be a string" },
        { "{'cmd':['ls','-l']}", "cmd", "cmd must be a string" },
        { "{'cmd':'x','cmd':'y'}", "cmd", "Duplicate field 'cmd'" },
        { "{'cmd':'x','timeout':5}", "timeout", "Unknown field 'timeout'" },
        { "{'cmd':'x','timeoutSeconds':5}", "timeoutSeconds", "did you mean 'timeout_seconds'?" },
        { "{'command':'x'}", "command", "Unknown field 'command'" },
        { "{'cmd':'x','timeout_seconds':0}", "timeout_seconds", "timeout_seconds must be an integer between 1 and 300" },
        { "{'cmd':'x','timeout_seconds':301}", "timeout_seconds", "between 1 and 300" },
        { "{'cmd':'x','timeout_seconds':1.5}", "timeout_seconds", "must be an integer" },
        { "{'cmd':'x','timeout_seconds':30.0}", "timeout_seconds", "must be an integer" },
        { "{'cmd':'x','timeout_seconds':'30'}", "timeout_seconds", "must be an integer" },
        { "{'cmd':'x','timeout_seconds':true}", "timeout_seconds", "must be an integer" },
        { "{'cmd':'x','timeout_seconds':-30}", "timeout_seconds", "must be an integer" },
        { "{'cmd':'x','cwd':''}", "cwd", "cwd must be an absolute path" },
        { "{'cmd':'x','cwd':'tmp'}", "cwd", "cwd must be an absolute path" },
        { "{'cmd':'x','cwd':'~/x'}", "cwd", "absolute" },
        { "{'cmd':'x','cwd':'/tmp/../etc'}", "cwd", "'..'" },
        { "{'cmd':'x','cwd':'/tmp/'}", "cwd", "trailing '/'" },
        { "{'cmd':'x','cwd':'//'}", "cwd", "empty components" },
        { "{'cmd':'x','cwd':'/a\\u0001'}", "cwd", "control characters" },
        { "{'cmd':'x','cwd':1}", "cwd", "cwd must be a string" },
        { "{'cmd':'x','env':[]}", "env", "env must be an object" },
        { "{'cmd':'x','env':'A=1'}", "env", "env must be an object" },
        { "{'cmd':'x','env':{'1A':'x'}}", "env", "env key '1A' is not a valid variable name" },
        { "{'cmd':'x','env':{'A-B':'x'}}", "env", "env key 'A-B'" },
        { "{'cmd':'x','env':{'A B':'x'}}", "env", "not a valid variable name" },
        { "{'cmd':'x','env':{'A=B':'x'}}", "env", "not a valid variable name" },
        { "{'cmd':'x','env':{'':'x'}}", "env", "env key ''" },
        { "{'cmd':'x','env':{'A\\u0000B':'x'}}", "env", "env key 'A\\x00B'" },
        { "{'cmd':'x','env':{'\\u00c4':'x'}}", "env", "not a valid variable name" },
        { "{'cmd':'x','env':{'FOO':1}}", "env.FOO", "env.FOO must be a string" },
        { "{'cmd':'x','env':{'FOO':null}}", "env.FOO", "env.FOO must be a string" },
        { "{'cmd':'x','env':{'FOO':true}}", "env.FOO", "must be a string" },
        { "{'cmd':'x','env':{'FOO':{}}}", "env.FOO", "must be a string" },
        { "{'cmd':'x','env':{'FOO':'a\\u0000b'}}", "env.FOO", "env.FOO must not contain NUL" },
        { "{'cmd':'x','env':{'FOO':'a','FOO':'b'}}", "env.FOO", "Duplicate field 'env.FOO'" },
        { "{'cmd':'x','stream':'true'}", "stream", "stream must be true or false" },
        { "{'cmd':'x','stream':1}", "stream", "stream must be true or false" },
        { "{'cmd':'x','language':'python'}", "language", "Unknown field 'language'" },
};

TEST(exec_invalid) {
        CHECK_BAD(do_exec, bad_exec);
        check_bad_raw(do_exec, "", 0, "", "Request body must be a JSON object", __LINE__);
        check_bad_raw(do_exec, NULL, 0, "", "Request body must be a JSON object", __LINE__);
}

TEST(code_valid) {
        const char *langs[] = { "python", "node" };
        for (size_t i = 0; i < ELEMENTSOF(langs); i++) {
                char body[256];
                snprintf(body, sizeof(body),
                         "{'language':'%s','code':'print(1)\\nprint(2)','timeout_seconds':10,'cwd':'/srv',"
                         "'env':{'OPENAI_API_KEY':'sk-1'},'stream':true}",
                         langs[i]);
                _cleanup_free_ char *b = q(body);
                struct pj_code c = {};
                struct err e = {};
                ASSERT_EQ(pj_code_parse(b, strlen(b), &c, &e), 0);
                ASSERT_STREQ(c.language, langs[i]);
                ASSERT_STREQ(c.code, "print(1)\nprint(2)");
                ASSERT_EQ(c.run.timeout_s, 10);
                ASSERT_STREQ(c.run.cwd, "/srv");
                ASSERT_EQ(c.run.n_env, 1);
                ASSERT_STREQ(c.run.env_keys[0], "OPENAI_API_KEY");
                ASSERT_STREQ(c.run.env_values[0], "sk-1");
                ASSERT_TRUE(c.run.stream);
                pj_code_done(&c);
                pj_code_done(&c);
        }
        struct pj_code c = {};
        struct err e = {};
        _cleanup_free_ char *b = q("{'language':'node','code':'1'}");
        ASSERT_EQ(pj_code_parse(b, strlen(b), &c, &e), 0);
        ASSERT_EQ(c.run.timeout_s, 30);
        ASSERT_STREQ(c.run.cwd, "/");
        ASSERT_FALSE(c.run.stream);
        pj_code_done(&c);
        pj_code_done(NULL);

        /* 1 MiB of code, and one byte more */
        check_max(do_code, "{\"language\":\"node\",\"code\":\"", "x", 1024 * 1024, "\"}", "code",
                  "code must be at most 1048576 bytes", __LINE__);
}

static const struct bad_case bad_code[] = {
        { "{}", "language", "language is required" },
        { "{'code':'x'}", "language", "language is required" },
        { "{'language':'ruby','code':'x'}", "language", "language must be one of python, node" },
        { "{'language':'Python','code':'x'}", "language", "must be one of" },
        { "{'language':'javascript','code':'x'}", "language", "must be one of" },
        { "{'language':1,'code':'x'}", "language", "language must be a string" },
        { "{'language':'python'}", "code", "code is required" },
        { "{'language':'python','code':null}", "code", "code is required" },
        { "{'language':'python','code':''}", "code", "code must not be empty" },
        { "{'language':'python','code':5}", "code", "code must be a string" },
        { "{'language':'python','code':'x\\u0000'}", "code", "code must not contain NUL" },
        { "{'language':'python','code':'x','cmd':'y'}", "cmd", "Unknown field 'cmd'" },
        { "{'language':'python','code':'x','timeout_seconds':0}", "timeout_seconds", "between 1 and 300" },
        { "{'language':'python','code':'x','timeout_seconds':2.5}", "timeout_seconds", "must be an integer" },
        { "{'language':'python','code':'x','cwd':'rel'}", "cwd", "absolute" },
        { "{'language':'python','code':'x','env':{'9':'x'}}", "env", "not a valid variable name" },
        { "{'language':'python','code':'x','env':{'A':2}}", "env.A", "must be a string" },
        { "{'language':'python','code':'x','stream':'no'}", "stream", "must be true or false" },
};

TEST(code_invalid) {
        CHECK_BAD(do_code, bad_code);
        check_bad_raw(do_code, "", 0, "", "Request body must be a JSON object", __LINE__);
}

/* ---- PUT /sandboxes/{id}/egress ---------------------------------------- */

TEST(egress_update_valid) {
        static const struct {
                const char *body;
                enum pj_egress_mode mode;
                size_t n;
                const char *first;
        } t[] = {
                { "{'mode':'open'}", PJ_EGRESS_OPEN, 0, NULL },
                { "{'mode':'open','allow':null}", PJ_EGRESS_OPEN, 0, NULL },
                { "{'mode':'deny_all'}", PJ_EGRESS_DENY_ALL, 0, NULL },
                { "{'mode':'restricted','allow':['1.1.1.1']}", PJ_EGRESS_RESTRICTED, 1, "1.1.1.1" },
                { "{'allow':['Example.COM','example.com.','8.8.8.8/32','8.8.8.8'],'mode':'restricted'}",
                  PJ_EGRESS_RESTRICTED, 3, "example.com" },
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++) {
                _cleanup_free_ char *b = q(t[i].body);
                struct pj_egress_update u = {};
                struct err e = {};
                ASSERT_EQ(pj_egress_update_parse(b, strlen(b), &u, &e), 0);
                ASSERT_EQ(u.egress.mode, t[i].mode);
                ASSERT_EQ(u.egress.n_allow, t[i].n);
                if (t[i].first)
                        ASSERT_STREQ(u.egress.allow[0], t[i].first);
                pj_egress_update_done(&u);
                pj_egress_update_done(&u);
        }
        pj_egress_update_done(NULL);
}

static const struct bad_case bad_egress_update[] = {
        { "{}", "mode", "mode is required" },
        { "{'allow':['1.1.1.1']}", "mode", "mode is required" },
        { "{'mode':'closed'}", "mode", "mode must be one of open, restricted, deny_all" },
        { "{'mode':true}", "mode", "mode must be a string" },
        { "{'mode':'restricted'}", "allow", "allow is required with at least one entry when mode is restricted" },
        { "{'mode':'restricted','allow':null}", "allow", "allow is required" },
        { "{'mode':'restricted','allow':[]}", "allow", "allow is required with at least one entry" },
        { "{'mode':'open','allow':[]}", "allow", "allow must be omitted unless mode is restricted" },
        { "{'mode':'deny_all','allow':['1.1.1.1']}", "allow", "allow must be omitted" },
        { "{'mode':'restricted','allow':'1.1.1.1'}", "allow", "allow must be an array" },
        { "{'mode':'restricted','allow':['1.1.1.1',2]}", "allow[1]", "allow[1] must be a string" },
        { "{'mode':'restricted','allow':['1.1.1.1','fe80::1']}", "allow[1]", "allow[1] (\"fe80::1\") is an IPv6 address" },
        { "{'mode':'restricted','allow':['192.168.0.1/16']}", "allow[0]", "did you mean 192.168.0.0/16?" },
        { "{'mode':'restricted','allow':['1.1.1.1'],'blockOutbound':true}", "blockOutbound", "Unknown field 'blockOutbound'" },
        { "{'mode':'restricted','mode':'open'}", "mode", "Duplicate field 'mode'" },
        { "{'egress':{'mode':'open'}}", "egress", "Unknown field 'egress'" },
};

TEST(egress_update_invalid) {
        CHECK_BAD(do_egress, bad_egress_update);
        check_bad_raw(do_egress, "", 0, "", "Request body must be a JSON object", __LINE__);
        /* 51 entries (even if they would merge) */
        char body[2048];
        int o = snprintf(body, sizeof(body), "{\"mode\":\"restricted\",\"allow\":[");
        for (int i = 0; i < 51; i++)
                o += snprintf(body + o, sizeof(body) - (size_t) o, "%s\"1.1.1.1\"", i ? "," : "");
        snprintf(body + o, sizeof(body) - (size_t) o, "]}");
        check_bad_raw(do_egress, body, strlen(body), "allow", "allow must have at most 50 entries", __LINE__);
}

/* ---- snapshots and volumes --------------------------------------------- */

TEST(snapshot_create) {
        static const char *const good[] = { "{'name':'a'}", "{'name':'before-upgrade-2'}",
                                            "{'name':'1234567890123456789012345678901234567890'}", "{'name':'-'}" };
        CHECK_GOOD(do_snapshot, good);
        static const struct bad_case bad[] = {
                { "{}", "name", "name is required" },
                { "{'name':null}", "name", "name is required" },
                { "{'name':''}", "name", "name must be 1 to 40 characters of lowercase letters, digits and '-'" },
                { "{'name':'Upper'}", "name", "name must be 1 to 40" },
                { "{'name':'a_b'}", "name", "name must be 1 to 40" },
                { "{'name':'a b'}", "name", "name must be 1 to 40" },
                { "{'name':'a.b'}", "name", "name must be 1 to 40" },
                { "{'name':'12345678901234567890123456789012345678901'}", "name", "name must be 1 to 40" },
                { "{'name':5}", "name", "name must be a string" },
                { "{'name':'a','description':'x'}", "description", "Unknown field 'description'" },
        };
        CHECK_BAD(do_snapshot, bad);
        check_bad_raw(do_snapshot, "", 0, "", "Request body must be a JSON object", __LINE__);
        struct pj_snapshot_create s = {};
        struct err e = {};
        ASSERT_EQ(pj_snapshot_create_parse("{\"name\":\"snap-1\"}", 17, &s, &e), 0);
        ASSERT_STREQ(s.name, "snap-1");
        pj_snapshot_create_done(&s);
        ASSERT_NULL(s.name);
        pj_snapshot_create_done(NULL);
}

TEST(volume_create) {
        struct pj_volume_create v = {};
        struct err e = {};
        _cleanup_free_ char *b = q("{'name':'data-1','sizeGB':10,'region':'0123456789abcdef01234567'}");
        ASSERT_EQ(pj_volume_create_parse(b, strlen(b), &v, &e), 0);
        ASSERT_STREQ(v.name, "data-1");
        ASSERT_EQ(v.size_gb, 10);
        ASSERT_STREQ(v.region, "0123456789abcdef01234567");
        ASSERT_STREQ(v.type, "web");
        ASSERT_NULL(v.team_id);
        pj_volume_create_done(&v);

        _cleanup_free_ char *b2 = q("{'name':'x','sizeGB':50,'region':'0123456789abcdef01234567','type':'sandbox',"
                                    "'teamId':'abcdefabcdefabcdefabcdef'}");
        ASSERT_EQ(pj_volume_create_parse(b2, strlen(b2), &v, &e), 0);
        ASSERT_EQ(v.size_gb, 50);
        ASSERT_STREQ(v.type, "sandbox");
        ASSERT_STREQ(v.team_id, "abcdefabcdefabcdefabcdef");
        pj_volume_create_done(&v);
        pj_volume_create_done(&v);
        pj_volume_create_done(NULL);

        static const struct bad_case bad[] = {
                { "{}", "name", "name is required" },
                { "{'sizeGB':10,'region':'0123456789abcdef01234567'}", "name", "name is required" },
                { "{'name':'X','sizeGB':10,'region':'0123456789abcdef01234567'}", "name", "name must be 1 to 40" },
                { "{'name':'x','region':'0123456789abcdef01234567'}", "sizeGB", "sizeGB is required" },
                { "{'name':'x','sizeGB':null,'region':'0123456789abcdef01234567'}", "sizeGB", "sizeGB is required" },
                { "{'name':'x','sizeGB':9,'region':'0123456789abcdef01234567'}", "sizeGB", "sizeGB must be an integer between 10 and 50" },
                { "{'name':'x','sizeGB':51,'region':'0123456789abcdef01234567'}", "sizeGB", "between 10 and 50" },
                { "{'name':'x','sizeGB':'20','region':'0123456789abcdef01234567'}", "sizeGB", "must be an integer" },
                { "{'name':'x','sizeGB':20.0,'region':'0123456789abcdef01234567'}", "sizeGB", "must be an integer" },
                { "{'name':'x','sizeGB':20}", "region", "region is required" },
                { "{'name':'x','sizeGB':20,'region':'auto'}", "region", "region must be a 24-character lowercase hex id" },
                { "{'name':'x','sizeGB':20,'region':'us-east-1'}", "region", "24-character" },
                { "{'name':'x','sizeGB':20,'region':5}", "region", "region must be a string" },
                { "{'name':'x','sizeGB':20,'region':'0123456789abcdef01234567','type':'Web'}", "type", "type must be one of web, sandbox" },
                { "{'name':'x','sizeGB':20,'region':'0123456789abcdef01234567','type':''}", "type", "must be one of" },
                { "{'name':'x','sizeGB':20,'region':'0123456789abcdef01234567','type':1}", "type", "type must be a string" },
                { "{'name':'x','sizeGB':20,'region':'0123456789abcdef01234567','teamId':'x'}", "teamId", "teamId must be a 24-character" },
                { "{'name':'x','sizeGB':20,'region':'0123456789abcdef01234567','size':20}", "size", "Unknown field 'size'" },
                { "{'name':'x','sizegb':20,'region':'0123456789abcdef01234567'}", "sizegb", "did you mean 'sizeGB'?" },
        };
        CHECK_BAD(do_volume, bad);
}

/* ---- POST /sandboxes/{id}/files/batch ---------------------------------- */

TEST(files_batch_mixed) {
        _cleanup_free_ char *b = q("{'files':["
                                   "{'path':'/tmp/a.txt','content_base64':'aGVsbG8='},"          /* 0 good */
                                   "{'path':'/tmp/b.txt','content_base64':'aGVsbG8'},"           /* 1 good, unpadded */
                                   "{'path':'/tmp/c.txt','content_base64':'aGVs!G8='},"          /* 2 bad base64 */
                                   "{'path':'tmp/d.txt','content_base64':'aGVsbG8='},"           /* 3 relative */
                                   "'just a string',"                                            /* 4 not an object */
                                   "{'path':'/tmp/e.txt'},"                                      /* 5 no content */
                                   "{'path':'/tmp/a.txt','content_base64':''},"                  /* 6 duplicate */
                                   "{'path':'/tmp/f.txt','content_base64':''},"                  /* 7 good, empty */
                                   "{'path':'/tmp/g.txt','content_base64':'YQ==','mode':420},"   /* 8 unknown field */
                                   "{'path':42,'content_base64':'YQ=='},"                        /* 9 path not a string */
                                   "{'content_base64':'YQ=='},"                                  /* 10 no path */
                                   "{'path':'/tmp/../etc/passwd','content_base64':'YQ=='},"      /* 11 dotdot */
                                   "{'path':'/tmp/h.txt','content_base64':'aGVsbG8=\\n'},"       /* 12 newline */
                                   "{'path':'/tmp/i.txt','content_base64':'a'},"                 /* 13 bad length */
                                   "{'path':'/tmp/j.txt','content_base64':'YQ=a'},"              /* 14 '=' inside */
                                   "{'path':'/tmp/k.txt','content_base64':'aGVsbG8==='},"        /* 15 too much pad */
                                   "{'path':'/tmp/l.txt','content_base64':'-_8='},"              /* 16 url-safe */
                                   "{'path':'/tmp/m.bin','content_base64':'AAEC/f7/'},"          /* 17 good binary */
                                   "{'path':'/tmp/n.txt','content_base64':5},"                   /* 18 content not string */
                                   "null"                                                        /* 19 null entry */
                                   "]}");
        struct pj_files_batch fb = {};
        struct err e = {};
        ASSERT_EQ(pj_files_batch_parse(b, strlen(b), 1024, 1 << 20, &fb, &e), 0);
        ASSERT_EQ(fb.n_files, 20);
        ASSERT_NULL(fb.file_errors[0]);
        ASSERT_STREQ(fb.files[0].path, "/tmp/a.txt");
        ASSERT_EQ(fb.files[0].len, 5);
        ASSERT_TRUE(memcmp(fb.files[0].data, "hello", 5) == 0);
        ASSERT_NULL(fb.file_errors[1]);
        ASSERT_EQ(fb.files[1].len, 5);
        ASSERT_TRUE(memcmp(fb.files[1].data, "hello", 5) == 0);
        ASSERT_CONTAINS(fb.file_errors[2], "files[2].content_base64 is not valid base64");
        ASSERT_STREQ(fb.files[2].path, "/tmp/c.txt");
        ASSERT_NULL(fb.files[2].data);
        ASSERT_EQ(fb.files[2].len, 0);
        ASSERT_CONTAINS(fb.file_errors[3], "files[3].path must be an absolute path");
        ASSERT_STREQ(fb.files[3].path, "tmp/d.txt");
        ASSERT_CONTAINS(fb.file_errors[4], "files[4] must be an object");
        ASSERT_NULL(fb.files[4].path);
        ASSERT_CONTAINS(fb.file_errors[5], "files[5].content_base64 is required");
        ASSERT_CONTAINS(fb.file_errors[6], "files[6].path duplicates files[0].path");
        ASSERT_NULL(fb.file_errors[7]);
        ASSERT_EQ(fb.files[7].len, 0);
        ASSERT_CONTAINS(fb.file_errors[8], "Unknown field 'files[8].mode'");
        ASSERT_CONTAINS(fb.file_errors[9], "files[9].path must be a string");
        ASSERT_NULL(fb.files[9].path);
        ASSERT_CONTAINS(fb.file_errors[10], "files[10].path is required");
        ASSERT_CONTAINS(fb.file_errors[11], "files[11].path must not contain '.' or '..'");
        for (int i = 12; i <= 16; i++) {
                char want[64];
                snprintf(want, sizeof(want), "files[%d].content_base64 is not valid base64", i);
                ASSERT_CONTAINS(fb.file_errors[i], want);
        }
        ASSERT_NULL(fb.file_errors[17]);
        ASSERT_EQ(fb.files[17].len, 6);
        ASSERT_TRUE(memcmp(fb.files[17].data, "\x00\x01\x02\xfd\xfe\xff", 6) == 0);
        ASSERT_CONTAINS(fb.file_errors[18], "files[18].content_base64 must be a string");
        ASSERT_CONTAINS(fb.file_errors[19], "files[19] must be an object");
        pj_files_batch_done(&fb);
        pj_files_batch_done(&fb);
        pj_files_batch_done(NULL);
}

TEST(files_batch_sizes) {
        /* per-file cap is per file; total cap fails the batch */
        _cleanup_free_ char *b = q("{'files':[{'path':'/a','content_base64':'YWJjZGVm'},"  /* 6 bytes */
                                   "{'path':'/b','content_base64':'YWJjZA=='},"            /* 4 bytes */
                                   "{'path':'/c','content_base64':'YWJjZGVmZ2g='}]}");     /* 8 bytes */
        struct pj_files_batch fb = {};
        struct err e = {};
        ASSERT_EQ(pj_files_batch_parse(b, strlen(b), 6, 100, &fb, &e), 0);
        ASSERT_NULL(fb.file_errors[0]);
        ASSERT_NULL(fb.file_errors[1]);
        ASSERT_CONTAINS(fb.file_errors[2], "files[2] is 8 bytes; the limit is 6 bytes per file");
        pj_files_batch_done(&fb);
        /* exactly at the total */
        ASSERT_EQ(pj_files_batch_parse(b, strlen(b), 100, 18, &fb, &e), 0);
        ASSERT_EQ(fb.files[0].len + fb.files[1].len + fb.files[2].len, 18);
        pj_files_batch_done(&fb);
        /* one byte over */
        struct pj_files_batch untouched = { .n_files = 77 };
        ASSERT_EQ(pj_files_batch_parse(b, strlen(b), 100, 17, &untouched, &e), -EINVAL);
        ASSERT_EQ(untouched.n_files, 77);
        ASSERT_STREQ(e.field, "files");
        ASSERT_CONTAINS(e.message, "the limit is 17 bytes per batch");
        /* failed files do not count towards the total */
        ASSERT_EQ(pj_files_batch_parse(b, strlen(b), 6, 10, &fb, &e), 0);
        pj_files_batch_done(&fb);
}

TEST(files_batch_envelope) {
        static const struct bad_case bad[] = {
                { "{}", "files", "files is required" },
                { "{'files':null}", "files", "files is required" },
                { "{'files':{}}", "files", "files must be an array" },
                { "{'files':'x'}", "files", "files must be an array" },
                { "{'files':[]}", "files", "files must contain between 1 and 100 entries" },
                { "{'files':[],'extra':1}", "extra", "Unknown field 'extra'" },
                { "{'file':[]}", "file", "Unknown field 'file'" },
        };
        CHECK_BAD(do_batch, bad);
        check_bad_raw(do_batch, "", 0, "", "Request body must be a JSON object", __LINE__);
        for (int count = 100; count <= 101; count++) {
                char *b = xmalloc(64 + (size_t) count * 64);
                int o = sprintf(b, "{\"files\":[");
                for (int i = 0; i < count; i++)
                        o += sprintf(b + o, "%s{\"path\":\"/f/%d\",\"content_base64\":\"eA==\"}", i ? "," : "", i);
                sprintf(b + o, "]}");
                struct pj_files_batch fb = {};
                struct err e = {};
                int r = pj_files_batch_parse(b, strlen(b), 10, 1000, &fb, &e);
                if (count == 100) {
                        ASSERT_EQ(r, 0);
                        ASSERT_EQ(fb.n_files, 100);
                        for (int i = 0; i < 100; i++)
                                ASSERT_NULL(fb.file_errors[i]);
                        ASSERT_STREQ(fb.files[99].path, "/f/99");
                        pj_files_batch_done(&fb);
                } else
                        check_bad_raw(do_batch, b, strlen(b), "files", "between 1 and 100", __LINE__);
                free(b);
        }
}

TEST(files_batch_base64_roundtrip) {
        /* every length 0..64 with all byte values, encoded here, decoded there */
        static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (size_t n = 0; n <= 64; n++) {
                uint8_t raw[64];
                for (size_t i = 0; i < n; i++)
                        raw[i] = (uint8_t) (i * 37 + n * 11 + 250);
                char enc[128], body[256];
                size_t o = 0;
                for (size_t i = 0; i < n; i += 3) {
                        uint32_t v = (uint32_t) raw[i] << 16 | (i + 1 < n ? (uint32_t) raw[i + 1] << 8 : 0) |
                                     (i + 2 < n ? raw[i + 2] : 0);
                        enc[o++] = tbl[(v >> 18) & 63];
                        enc[o++] = tbl[(v >> 12) & 63];
                        enc[o++] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
                        enc[o++] = i + 2 < n ? tbl[v & 63] : '=';
                }
                enc[o] = '\0';
                snprintf(body, sizeof(body), "{\"files\":[{\"path\":\"/x\",\"content_base64\":\"%s\"}]}", enc);
                struct pj_files_batch fb = {};
                struct err e = {};
                ASSERT_EQ(pj_files_batch_parse(body, strlen(body), 1000, 1000, &fb, &e), 0);
                ASSERT_NULL(fb.file_errors[0]);
                ASSERT_EQ(fb.files[0].len, n);
                ASSERT_TRUE(n == 0 || memcmp(fb.files[0].data, raw, n) == 0);
                pj_files_batch_done(&fb);
        }
}

/* ---- pj_sandbox_path_check --------------------------------------------- */

TEST(sandbox_path_check) {
        static const char *const good[] = {
                "/a", "/tmp/x.txt", "/home/user/My Documents/r\xc3\xa9sum\xc3\xa9.pdf", "/...", "/.a", "/a..b",
                "/a/b/c/d/e/f", "/weird:chars,here;ok", "/-", "/a b",
        };
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                struct err e = {};
                if (pj_sandbox_path_check(good[i], &e, "path") != 0)
                        test_fail(__FILE__, __LINE__, "\"%s\" rejected: %s", good[i], e.message);
        }
        static const struct {
                const char *p, *msg;
        } bad[] = {
                { "", "path must be an absolute path" },
                { "a", "absolute" },
                { "./a", "absolute" },
                { "/", "path must not be the root directory '/'" },
                { "//", "empty components" },
                { "/a//b", "empty components" },
                { "/a/", "trailing '/'" },
                { "/.", "'.' or '..'" },
                { "/..", "'.' or '..'" },
                { "/a/.", "'.' or '..'" },
                { "/a/../b", "'.' or '..'" },
                { "/a/./b", "'.' or '..'" },
                { "/a\tb", "control characters" },
                { "/a\nb", "control characters" },
                { "/a\x7f", "control characters" },
                { "/a\xc2\x85", "control characters" },
                { "/a\xff", "valid UTF-8" },
                { "/a\xc3", "valid UTF-8" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct err e = {};
                if (pj_sandbox_path_check(bad[i].p, &e, "files[3].path") != -EINVAL)
                        test_fail(__FILE__, __LINE__, "bad[%zu] accepted", i);
                ASSERT_STREQ(e.field, "files[3].path");
                ASSERT_CONTAINS(e.message, "files[3].path");
                ASSERT_CONTAINS(e.message, bad[i].msg);
        }
        struct err e = {};
        ASSERT_EQ(pj_sandbox_path_check(NULL, &e, "path"), -EINVAL);
        ASSERT_CONTAINS(e.message, "path is required");
        ASSERT_EQ(pj_sandbox_path_check("rel", NULL, NULL), -EINVAL);
        ASSERT_EQ(pj_sandbox_path_check("/ok", NULL, NULL), 0);

        /* component of 255 bytes fine, 256 not; whole path 4096 fine, 4097 not */
        char p[5000];
        p[0] = '/';
        memset(p + 1, 'c', 256);
        p[256] = '\0';
        ASSERT_EQ(pj_sandbox_path_check(p, &e, "path"), 0);
        p[256] = 'c';
        p[257] = '\0';
        ASSERT_EQ(pj_sandbox_path_check(p, &e, "path"), -EINVAL);
        ASSERT_CONTAINS(e.message, "longer than 255 bytes");
        for (size_t i = 0; i < 4096; i++)
                p[i] = i % 200 == 0 ? '/' : 'x';
        p[4096] = '\0';
        ASSERT_EQ(pj_sandbox_path_check(p, &e, "path"), 0);
        p[4096] = 'x';
        p[4097] = '\0';
        ASSERT_EQ(pj_sandbox_path_check(p, &e, "path"), -EINVAL);
        ASSERT_CONTAINS(e.message, "path must be at most 4096 bytes");
}

/* ---- error message hygiene --------------------------------------------- */

TEST(error_messages_sanitized_and_bounded) {
        /* a huge unknown key with control bytes: message stays bounded and printable */
        size_t n = 100000;
        char *b = xmalloc(n + 32);
        int o = sprintf(b, "{\"");
        for (size_t i = 0; i < n; i++)
                b[o + (int) i] = (char) ('a' + i % 26);
        memcpy(b + o + 3, "\\u0007", 6);
        sprintf(b + o + n, "\":1}");
        struct pj_sandbox_create c = {};
        struct err e = {};
        ASSERT_EQ(pj_sandbox_create_parse(b, strlen(b), &c, &e), -EINVAL);
        ASSERT_CONTAINS(e.message, "Unknown field 'abc\\x07");
        ASSERT_CONTAINS(e.message, "...'");
        ASSERT_LE(strlen(e.message), 200);
        for (const char *p = e.message; *p; p++)
                ASSERT_TRUE(*p >= 0x20 && *p < 0x7f);
        for (const char *p = e.field; *p; p++)
                ASSERT_TRUE(*p >= 0x20 && *p < 0x7f);
        free(b);
}

/* ---- fuzzing ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return (uint32_t) (rng_state >> 16);
}

static void fuzz_one(const char *b, size_t len) {
        parse_fn fns[] = { do_create, do_exec, do_code, do_egress, do_snapshot, do_volume, do_batch };
        for (size_t i = 0; i < ELEMENTSOF(fns); i++) {
                struct err e;
                memset(&e, 0xaa, sizeof(e));
                e.field[0] = '\0';
                e.message[0] = '\0';
                int r = fns[i](b, len, &e);
                ASSERT_TRUE(r == 0 || r == -EINVAL);
                if (r < 0) {
                        ASSERT_TRUE(e.message[0] != '\0');
                        ASSERT_LE(strnlen(e.message, sizeof(e.message)), sizeof(e.message) - 1);
                        ASSERT_LE(strnlen(e.field, sizeof(e.field)), sizeof(e.field) - 1);
                }
        }
}

TEST_FULL(fuzz_random_bytes, 600) {
        rng_state ^= test_seed(0); /* 0: the inputs this test always had */
        for (int it = 0; it < 100000; it++) {
                size_t len = rnd() % 64;
                char *b = xmalloc(len ? len : 1); /* exact size: ASan catches over-reads */
                for (size_t i = 0; i < len; i++)
                        b[i] = (char) rnd();
                if (len && it % 2)
                        b[0] = '{';
                fuzz_one(b, len);
                free(b);
        }
}

static const char *const seeds[] = {
        "{'name':'box','template':'node-22','specs':{'cpu':500,'memory':512,'disk':2},'autoDestroy':true,"
        "'destroyTimeout':'1h','egress':{'mode':'restricted','allow':['1.1.1.1','api.example.com','10.0.0.0/8']},"
        "'persistent':true,'persistentDiskGB':20,'mountPath':'/data','snapshotMode':'automatic',"
        "'snapshotFrequency':'0 */2 * * *','region':'auto','oneShot':false}",
        "{'cmd':'echo hi','timeout_seconds':10,'cwd':'/tmp','env':{'A':'1','B_2':'x'},'stream':true}",
        "{'language':'python','code':'print(\\'\\u00e9\\')','env':{'K':'v'}}",
        "{'mode':'restricted','allow':['8.8.8.8','example.com.']}",
        "{'name':'snap-1'}",
        "{'name':'vol','sizeGB':20,'region':'0123456789abcdef01234567','type':'sandbox'}",
        "{'files':[{'path':'/a','content_base64':'aGVsbG8='},{'path':'/b','content_base64':'eA=='}]}",
};

TEST_FULL(fuzz_mutations, 600) {
        static const char interesting[] = "{}[]\",:\\ 0123456789.eE-+tfnul\x00\x7f\x80\xc3\xff/'*";
        rng_state ^= test_seed(0); /* 0: the inputs this test always had */
        for (size_t s = 0; s < ELEMENTSOF(seeds); s++) {
                _cleanup_free_ char *seed = q(seeds[s]);
                size_t slen = strlen(seed);
                fuzz_one(seed, slen);
                for (int it = 0; it < 10000; it++) {
                        size_t len = slen;
                        char *b = xmalloc(slen + 8);
                        memcpy(b, seed, slen);
                        int muts = 1 + (int) (rnd() % 4);
                        for (int m = 0; m < muts; m++) {
                                switch (rnd() % 4) {
                                case 0: /* replace */
                                        if (len)
                                                b[rnd() % len] = interesting[rnd() % (sizeof(interesting) - 1)];
                                        break;
                                case 1: /* truncate */
                                        len = len ? rnd() % len : 0;
                                        break;
                                case 2: /* delete one */
                                        if (len) {
                                                size_t at = rnd() % len;
                                                memmove(b + at, b + at + 1, len - at - 1);
                                                len--;
                                        }
                                        break;
                                default: /* random byte */
                                        if (len)
                                                b[rnd() % len] = (char) rnd();
                                        break;
                                }
                        }
                        char *exact = xmalloc(len ? len : 1);
                        memcpy(exact, b, len);
                        free(b);
                        fuzz_one(exact, len);
                        free(exact);
                }
        }
}

/* The terminal's resize frame: what is one, what is typed input, and what is refused with the
 * field named (it was cJSON read by hand: 1.5 rows passed as 1, extra fields were ignored). */
TEST(terminal_resize_frames) {
        uint32_t rows = 0, cols = 0;
        struct err e = {};
#define RZ(s) pj_terminal_resize_parse(s, strlen(s), &rows, &cols, &e)
        ASSERT_EQ(RZ("{\"type\":\"resize\",\"rows\":33,\"cols\":101}"), 1);
        ASSERT_EQ(rows, 33);
        ASSERT_EQ(cols, 101);
        /* typed input, whatever it looks like */
        ASSERT_EQ(RZ("ls -l\n"), 0);
        ASSERT_EQ(RZ("{\"type\":\"input\",\"rows\":1}"), 0);
        ASSERT_EQ(RZ("{\"type\":\"resize\""), 0);   /* not JSON: typed */
        ASSERT_EQ(RZ("[1,2]"), 0);
        ASSERT_EQ(RZ(""), 0);
        /* a resize that is wrong: refused, the field named */
        ASSERT_EQ(RZ("{\"type\":\"resize\",\"rows\":1.5,\"cols\":80}"), -EINVAL);
        ASSERT_STREQ(e.field, "rows");
        ASSERT_EQ(RZ("{\"type\":\"resize\",\"rows\":24,\"cols\":0}"), -EINVAL);
        ASSERT_STREQ(e.field, "cols");
        ASSERT_EQ(RZ("{\"type\":\"resize\",\"rows\":24,\"cols\":1001}"), -EINVAL);
        ASSERT_EQ(RZ("{\"type\":\"resize\",\"rows\":24}"), -EINVAL);
        ASSERT_STREQ(e.field, "cols");
        ASSERT_EQ(RZ("{\"type\":\"resize\",\"rows\":24,\"cols\":80,\"x\":1}"), -EINVAL);
        ASSERT_NOT_NULL(strstr(e.message, "'x'"));
        ASSERT_EQ(RZ("{\"type\":\"resize\",\"rows\":\"24\",\"cols\":80}"), -EINVAL);
#undef RZ
}

/* POST /templates through proto-json: the field at fault named, the context's bytes exact
 * (a NUL in a utf-8 file is kept: cJSON cut the file there), the limits. */
TEST(template_build_bodies) {
        struct pj_template_build b = {};
        struct err e = {};
        static const char ok[] = "{\"name\":\"my-tpl\",\"dockerfile\":\"FROM scratch\\nCOPY a /a\\n\",\"files\":["
                                 "{\"path\":\"dir/a\",\"content\":\"x\\u0000y\"},"
                                 "{\"path\":\"b.bin\",\"content\":\"AAEC\",\"encoding\":\"base64\",\"mode\":493}]}";
        ASSERT_EQ(pj_template_build_parse(ok, sizeof(ok) - 1, 1 << 20, NULL, NULL, &b, &e), 0);
        ASSERT_STREQ(b.name, "my-tpl");
        ASSERT_EQ(b.dockerfile_len, 23);
        ASSERT_EQ(b.n_files, 2);
        ASSERT_EQ(b.files[0].len, 3);
        ASSERT_TRUE(!memcmp(b.files[0].data, "x\0y", 3));
        ASSERT_EQ(b.files[0].mode, -1);
        ASSERT_EQ(b.files[1].len, 3);
        ASSERT_EQ(b.files[1].mode, 0755);
        pj_template_build_done(&b);
        static const struct {
                const char *body, *field, *part;
        } bad[] = {
                { "{}", "name", "name:" },
                { "{\"name\":\"Hello\",\"dockerfile\":\"FROM x\"}", "name", "name:" },
                { "{\"name\":\"x\"}", "dockerfile", "dockerfile:" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\\u0000\"}", "dockerfile", "NUL" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"extra\":1}", "extra", "Unknown field 'extra'" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":{}}", "files", "an array" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"../etc\",\"content\":\"\"}]}", "files[0].path", "relative" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a/\",\"content\":\"\"}]}", "files[0].path", "relative" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"Dockerfile\",\"content\":\"\"}]}", "files[0].path", "dockerfile" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\",\"content\":\"\"},{\"path\":\"a\",\"content\":\"\"}]}",
                  "files[1].path", "given twice" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\"}]}", "files[0].content", "required" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\",\"content\":\"!\",\"encoding\":\"base64\"}]}",
                  "files[0].content", "base64" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\",\"content\":\"\",\"encoding\":\"hex\"}]}",
                  "files[0].encoding", "utf-8" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\",\"content\":\"\",\"mode\":1.5}]}",
                  "files[0].mode", "integer" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\",\"content\":\"\",\"mode\":512}]}",
                  "files[0].mode", "integer" },
                { "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\",\"content\":\"\",\"size\":1}]}",
                  "files[0].size", "Unknown field" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                e = (struct err) {};
                int r = pj_template_build_parse(bad[i].body, strlen(bad[i].body), 1 << 20, NULL, NULL, &b, &e);
                if (r != -EINVAL || strcmp(e.field, bad[i].field) || !strstr(e.message, bad[i].part))
                        test_fail(__FILE__, __LINE__, "%s: got %d field '%s' message '%s'", bad[i].body, r, e.field, e.message);
        }
        /* the context's limit: the Dockerfile and the decoded files together */
        static const char big[] = "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[{\"path\":\"a\",\"content\":\"0123456789\"}]}";
        ASSERT_EQ(pj_template_build_parse(big, sizeof(big) - 1, 12, NULL, NULL, &b, &e), -EFBIG);
        ASSERT_NOT_NULL(strstr(e.message, "files: the build context is over its limit"));
        ASSERT_EQ(pj_template_build_parse(big, sizeof(big) - 1, 3, NULL, NULL, &b, &e), -EFBIG);
        ASSERT_STREQ(e.field, "dockerfile");
        /* at most PJ_TEMPLATE_MAX_FILES entries */
        size_t cap = 64 + (PJ_TEMPLATE_MAX_FILES + 1) * 40, n = 0;
        _cleanup_free_ char *many = xmalloc(cap);
        n += (size_t) snprintf(many + n, cap - n, "{\"name\":\"x\",\"dockerfile\":\"FROM x\",\"files\":[");
        for (int i = 0; i <= PJ_TEMPLATE_MAX_FILES; i++)
                n += (size_t) snprintf(many + n, cap - n, "%s{\"path\":\"f%d\",\"content\":\"\"}", i ? "," : "", i);
        n += (size_t) snprintf(many + n, cap - n, "]}");
        ASSERT_EQ(pj_template_build_parse(many, n, 1 << 20, NULL, NULL, &b, &e), -EINVAL);
        ASSERT_NOT_NULL(strstr(e.message, "at most 256 files"));
}

/* docker save's manifest.json from a tenant's build sandbox: one image, paths we read, bounded. */
TEST(saved_manifests) {
        struct pj_saved_manifest m = {};
        struct err e = {};
        static const char ok[] = "[{\"Config\":\"abc.json\",\"RepoTags\":[\"x:1\"],\"Layers\":[\"l1/layer.tar\",\"l2/layer.tar\"]}]";
        ASSERT_EQ(pj_saved_manifest_parse(ok, sizeof(ok) - 1, &m, &e), 0);
        ASSERT_STREQ(m.config, "abc.json");
        ASSERT_EQ(m.n_layers, 2);
        ASSERT_STREQ(m.layers[1], "l2/layer.tar");
        pj_saved_manifest_done(&m);
        static const char *const bad[] = {
                "{}", "[]", "[{},{}]", "[{\"Config\":\"/etc/shadow\",\"Layers\":[]}]", "[{\"Config\":\"../x\",\"Layers\":[]}]",
                "[{\"Config\":\"a.json\"}]", "[{\"Config\":\"a.json\",\"Layers\":[\"a/../../b\"]}]",
                "[{\"Config\":\"a.json\",\"Layers\":[1]}]", "[{\"Config\":\"a json\",\"Layers\":[]}]",
                "[{\"Config\":\"a.json\",\"Layers\":[\"x\\u0000y\"]}]", "[{\"Config\":\"a.json\",\"Layers\":[\"l\"]", "",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                if (pj_saved_manifest_parse(bad[i], strlen(bad[i]), &m, &e) != -EINVAL)
                        test_fail(__FILE__, __LINE__, "accepted: %s", bad[i]);
        /* at most 127 layers */
        size_t cap = 64 + 128 * 16, n = 0;
        _cleanup_free_ char *many = xmalloc(cap);
        n += (size_t) snprintf(many + n, cap - n, "[{\"Config\":\"c\",\"Layers\":[");
        for (int i = 0; i < 128; i++)
                n += (size_t) snprintf(many + n, cap - n, "%s\"l%d\"", i ? "," : "", i);
        n += (size_t) snprintf(many + n, cap - n, "]}]");
        ASSERT_EQ(pj_saved_manifest_parse(many, n, &m, &e), -EINVAL);
        ASSERT_NOT_NULL(strstr(e.message, "at most 127"));
}
