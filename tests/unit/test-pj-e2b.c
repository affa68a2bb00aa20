/* Unit tests for proto-json/pj_e2b: E2B's bodies map onto Paddock's (egress, metadata, env,
 * timeout) and every field that is not supported is refused by name; envd's Connect messages
 * take JSON and proto names, refuse unknown fields and bound every size; the envelope codec
 * tells complete, truncated and oversized envelopes apart from the header alone. The SDK's own
 * traffic is test-e2b's. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "pj_e2b.h"
#include "strutil.h"
#include "testlib.h"

#define S(lit) lit, strlen(lit)

#define PARSE_OK(fn, body, out) \
        do { \
                struct err _e = { 0 }; \
                int _r = fn(body, strlen(body), out, &_e); \
                if (_r < 0) \
                        test_fail(__FILE__, __LINE__, "%s refused: %s", body, _e.message); \
        } while (0)

/* A body a parser must refuse: the field the error names and a part of its message. */
struct refusal {
        const char *body, *field, *needle;
};

static void refused_body(int line, const char *body, int r, const struct err *e, const char *field, const char *needle) {
        if (r != -EINVAL || strcmp(e->field, field) || !strstr(e->message, needle))
                test_fail(__FILE__, line, "want -EINVAL on %s with \"%s\", got %d on %s: %s%s%s%s", field, needle, r, e->field,
                          e->message, body ? " (body " : "", body ? body : "", body ? ")" : "");
}

static void refused(int line, int r, const struct err *e, const char *field, const char *needle) {
        refused_body(line, NULL, r, e, field, needle);
}

static void create_refused(int line, const char *body, const char *field, const char *needle) {
        struct pj_e2b_create c = { 0 };
        struct err e = { 0 };
        int r = pj_e2b_create_parse(body, strlen(body), &c, &e);
        pj_e2b_create_done(&c);
        refused_body(line, body, r, &e, field, needle);
}

/* What E2B's SDK sends for Sandbox.create() with metadata and envs. */
static const char sdk_default_body[] =
        "{\"templateID\":\"base\",\"metadata\":{\"a\":\"1\"},\"envVars\":{\"X\":\"y\"},\"timeout\":300,\"secure\":true,"
        "\"allow_internet_access\":true}";

TEST(create_maps_the_sdk_default_body) {
        _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { 0 };
        PARSE_OK(pj_e2b_create_parse, sdk_default_body, &c);
        ASSERT_STREQ(c.template_id, "base");
        ASSERT_EQ(c.timeout_s, 300);
        ASSERT_STREQ(c.metadata_json, "{\"a\":\"1\"}");
        ASSERT_STREQ(c.env_json, "{\"X\":\"y\"}");
        ASSERT_EQ(c.egress.mode, PJ_EGRESS_OPEN);
        ASSERT_TRUE(c.public_traffic);
}

TEST(create_maps_network_onto_egress_modes) {
        {
                _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { 0 };
                PARSE_OK(pj_e2b_create_parse, "{\"templateID\":\"base\",\"allow_internet_access\":false}", &c);
                ASSERT_EQ(c.egress.mode, PJ_EGRESS_DENY_ALL);
                ASSERT_EQ(c.timeout_s, PJ_E2B_DEFAULT_TIMEOUT_S);
        }
        {
                _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { 0 };
                PARSE_OK(pj_e2b_create_parse,
                         "{\"templateID\":\"base\",\"network\":{\"denyOut\":[\"0.0.0.0/0\"],\"allowOut\":[\"api.example.com\","
                         "\"*.example.org\",\"198.51.100.0/24\"],\"allowPublicTraffic\":false}}",
                         &c);
                ASSERT_EQ(c.egress.mode, PJ_EGRESS_RESTRICTED);
                ASSERT_EQ(c.egress.n_allow, 3);
                ASSERT_FALSE(c.public_traffic);
        }
        {
                /* allowOut without a deny allows everything anyway: open, no list */
                _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { 0 };
                PARSE_OK(pj_e2b_create_parse, "{\"templateID\":\"base\",\"network\":{\"allowOut\":[\"example.com\"]}}", &c);
                ASSERT_EQ(c.egress.mode, PJ_EGRESS_OPEN);
                ASSERT_EQ(c.egress.n_allow, 0);
        }
}

TEST(create_takes_auto_pause_with_or_without_memory) {
        static const struct {
                const char *body;
                bool pause, memory, resume;
        } rows[] = {
                { "{\"templateID\":\"base\",\"autoPause\":false}", false, false, false },
                /* E2B's default: an auto-pause keeps the memory */
                { "{\"templateID\":\"base\",\"autoPause\":true}", true, true, false },
                { "{\"templateID\":\"base\",\"autoPause\":true,\"autoPauseMemory\":false,\"autoResume\":{\"enabled\":false}}",
                  true, false, false },
                { "{\"templateID\":\"base\",\"autoPause\":true,\"autoResume\":{\"enabled\":true}}", true, true, true },
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { 0 };
                PARSE_OK(pj_e2b_create_parse, rows[i].body, &c);
                ASSERT_EQ(c.auto_pause, rows[i].pause);
                ASSERT_EQ(c.auto_pause_memory, rows[i].memory);
                ASSERT_EQ(c.auto_resume, rows[i].resume);
        }
}

TEST(create_refuses_what_it_does_not_do_by_name) {
        static const struct refusal rows[] = {
                { "{}", "templateID", "required" },
                { "{\"templateID\":\"a b\"}", "templateID", "[A-Za-z0-9._/:-]" },
                { "{\"templateID\":\"base\",\"timeout\":-1}", "timeout", "integer" },
                { "{\"templateID\":\"base\",\"timeout\":1.5}", "timeout", "integer" },
                { "{\"templateID\":\"base\",\"autoPause\":1}", "autoPause", "true or false" },
                { "{\"templateID\":\"base\",\"autoPauseMemory\":true}", "autoPauseMemory", "set autoPause: true" },
                { "{\"templateID\":\"base\",\"autoResume\":{\"enabled\":true}}", "autoResume", "autoPause: true" },
                { "{\"templateID\":\"base\",\"autoPause\":true,\"autoPauseMemory\":false,\"autoResume\":{\"enabled\":true}}",
                  "autoResume", "paused with its memory" },
                { "{\"templateID\":\"base\",\"autoResume\":true}", "autoResume", "must be an object" },
                { "{\"templateID\":\"base\",\"autoResume\":{\"on\":true}}", "autoResume.on", "Unknown field" },
                { "{\"templateID\":\"base\",\"secure\":false}", "secure", "access token" },
                { "{\"templateID\":\"base\",\"mcp\":{\"x\":1}}", "mcp", "not supported" },
                { "{\"templateID\":\"base\",\"iam\":{\"tokens\":{\"t\":{}}}}", "iam", "not supported" },
                { "{\"templateID\":\"base\",\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/v\"},{\"name\":\"w\",\"path\":\"/w\"}]}",
                  "volumeMounts[1]", "at most one volume" },
                { "{\"templateID\":\"base\",\"volumeMounts\":[{\"name\":\"a b\",\"path\":\"/v\"}]}", "volumeMounts[0].name", "" },
                { "{\"templateID\":\"base\",\"volumeMounts\":[{\"name\":\"v\",\"path\":\"/sys/x\"}]}", "volumeMounts[0].path",
                  "/sys" },
                { "{\"templateID\":\"base\",\"network\":{\"denyOut\":[\"10.0.0.0/8\"]}}", "network.denyOut[0]", "only 0.0.0.0/0" },
                { "{\"templateID\":\"base\",\"network\":{\"allowOut\":[\"not a host\"]}}", "network.allowOut[0]", "" },
                { "{\"templateID\":\"base\",\"network\":{\"rules\":{\"a.com\":[{\"transform\":{\"headers\":{\"Host\":\"x\"}}}]}}}",
                  "network.rules.a.com[0].transform.headers.Host", "frames the request" },
                { "{\"templateID\":\"base\",\"network\":{\"colour\":1}}", "network.colour", "Unknown field" },
                { "{\"templateID\":\"base\",\"envVars\":{\"9x\":\"y\"}}", "envVars.9x", "variable name" },
                { "{\"templateID\":\"base\",\"envVars\":{\"X\":1}}", "envVars.X", "string" },
                { "{\"templateID\":\"base\",\"metadata\":[]}", "metadata", "object of strings" },
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++)
                create_refused(__LINE__, rows[i].body, rows[i].field, rows[i].needle);
        /* every user-made count is bounded */
        struct strbuf b;
        strbuf_init(&b, 0);
        strbuf_printf(&b, "{\"templateID\":\"base\",\"metadata\":{");
        for (int i = 0; i <= PJ_E2B_MAX_METADATA; i++)
                strbuf_printf(&b, "%s\"k%d\":\"v\"", i ? "," : "", i);
        strbuf_printf(&b, "}}");
        strbuf_append(&b, "", 1);
        create_refused(__LINE__, b.buf, "metadata", "at most");
        strbuf_done(&b);
}

TEST(timeout_connect_and_pause_bodies) {
        int64_t t = 0;
        bool mem = false;
        struct err e = { 0 };
        ASSERT_OK(pj_e2b_timeout_parse(S("{\"timeout\":60}"), &t, &e));
        ASSERT_EQ(t, 60);
        refused(__LINE__, pj_e2b_timeout_parse(S("{}"), &t, &e), &e, "timeout", "required");
        ASSERT_OK(pj_e2b_connect_parse(S("{\"timeout\":5}"), false, &t, &e));
        refused(__LINE__, pj_e2b_connect_parse(S("{\"timeout\":5,\"memory\":true}"), false, &t, &e), &e, "memory", "not supported");
        /* v2 (SDK 2.51+): an empty body or {} means 300 s; v1 wants the timeout */
        refused(__LINE__, pj_e2b_connect_parse(S("{}"), false, &t, &e), &e, "timeout", "required");
        ASSERT_OK(pj_e2b_connect_parse(S("{}"), true, &t, &e));
        ASSERT_EQ(t, 300);
        ASSERT_OK(pj_e2b_connect_parse(S(""), true, &t, &e));
        ASSERT_EQ(t, 300);
        ASSERT_OK(pj_e2b_connect_parse(S("{\"timeout\":42,\"memory\":false}"), true, &t, &e));
        ASSERT_EQ(t, 42);
        refused(__LINE__, pj_e2b_connect_parse(S("{\"timeot\":42}"), true, &t, &e), &e, "timeot", "Unknown field");
        ASSERT_OK(pj_e2b_pause_parse(S(""), &mem, &e));
        ASSERT_TRUE(mem);
        ASSERT_OK(pj_e2b_pause_parse(S("{\"memory\":false}"), &mem, &e));
        ASSERT_FALSE(mem);
}

TEST(metadata_query_is_decoded_pairs) {
        struct pj_e2b_kv *kv = NULL;
        size_t n = 0;
        struct err e = { 0 };
        ASSERT_OK(pj_e2b_metadata_query_parse("user%20name=a%26b&app=prod", &kv, &n, &e));
        ASSERT_EQ(n, 2);
        ASSERT_STREQ(kv[0].key, "user name");
        ASSERT_STREQ(kv[0].value, "a&b");
        ASSERT_STREQ(kv[1].value, "prod");
        pj_e2b_kv_free(kv, n);
        ASSERT_EQ(pj_e2b_metadata_query_parse("novalue", &kv, &n, &e), -EINVAL);
        ASSERT_EQ(pj_e2b_metadata_query_parse("a=%zz", &kv, &n, &e), -EINVAL);
        ASSERT_EQ(pj_e2b_metadata_query_parse("a=%00", &kv, &n, &e), -EINVAL);
        ASSERT_EQ(pj_e2b_metadata_query_parse("a=%4", &kv, &n, &e), -EINVAL);
}

TEST(envelopes_complete_truncated_oversized) {
        uint8_t buf[16] = { 0, 0, 0, 0, 2, '{', '}', 0xee };
        uint8_t flags = 9;
        const uint8_t *m = NULL;
        size_t ml = 0, used = 0;
        ASSERT_EQ(pj_connect_envelope_decode(buf, 4, 100, &flags, &m, &ml, &used), 0);
        ASSERT_EQ(pj_connect_envelope_decode(buf, 6, 100, &flags, &m, &ml, &used), 0);
        ASSERT_EQ(pj_connect_envelope_decode(buf, 8, 100, &flags, &m, &ml, &used), 1);
        ASSERT_EQ(flags, 0);
        ASSERT_EQ(ml, 2);
        ASSERT_EQ(used, 7);
        ASSERT_TRUE(m == buf + 5);
        uint8_t big[5] = { 0, 0x7f, 0xff, 0xff, 0xff };
        ASSERT_EQ(pj_connect_envelope_decode(big, 5, PJ_CONNECT_MAX_MESSAGE, &flags, &m, &ml, &used), -EMSGSIZE);
        uint8_t comp[6] = { PJ_CONNECT_FLAG_COMPRESSED, 0, 0, 0, 1, 'x' };
        ASSERT_EQ(pj_connect_envelope_decode(comp, 6, 100, &flags, &m, &ml, &used), -EPROTO);
        uint8_t h[5];
        pj_connect_envelope_header(h, PJ_CONNECT_FLAG_END, 0x01020304);
        ASSERT_EQ(h[0], 2);
        ASSERT_EQ(h[1], 1);
        ASSERT_EQ(h[4], 4);
        ASSERT_STREQ(pj_connect_code_name(PJ_CONNECT_NOT_FOUND), "not_found");
        ASSERT_EQ(pj_connect_code_http(PJ_CONNECT_UNAUTHENTICATED), 401);
        ASSERT_EQ(pj_connect_code_http(PJ_CONNECT_RESOURCE_EXHAUSTED), 429);
}

TEST(start_messages) {
        {
                _cleanup_(pj_envd_start_done) struct pj_envd_start s = { 0 };
                PARSE_OK(pj_envd_start_parse,
                         "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hi\"],\"envs\":{\"A\":\"b\"},\"cwd\":\"/tmp\"},"
                         "\"pty\":{\"size\":{\"cols\":80,\"rows\":\"24\"}},\"tag\":\"t1\",\"stdin\":true}",
                         &s);
                ASSERT_STREQ(s.cmd, "/bin/bash");
                ASSERT_EQ(s.n_args, 3);
                ASSERT_STREQ(s.args[2], "echo hi");
                ASSERT_NULL(s.args[3]);
                ASSERT_EQ(s.n_env, 1);
                ASSERT_STREQ(s.env_values[0], "b");
                ASSERT_TRUE(s.pty);
                ASSERT_EQ(s.rows, 24);
                ASSERT_EQ(s.cols, 80);
                ASSERT_STREQ(s.tag, "t1");
                ASSERT_TRUE(s.stdin_open);
        }
        struct pj_envd_start s = { 0 };
        struct err e = { 0 };
        static const struct refusal rows[] = {
                { "{}", "process", "required" },
                { "{\"process\":{}}", "process.cmd", "required" },
                { "{\"process\":{\"cmd\":\"x\",\"argv\":[]}}", "process.argv", "Unknown field" },
                { "{\"process\":{\"cmd\":\"x\",\"args\":[1]}}", "process.args[0]", "string" },
                { "{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":0,\"rows\":1}}}", "pty.size", "1 to 65535" },
                { "{\"process\":{\"cmd\":\"x\"},\"pty\":{\"size\":{\"cols\":70000,\"rows\":1}}}", "pty.size.cols", "65535" },
                { "{\"process\":{\"cmd\":\"x\"},\"stdin\":\"yes\"}", "stdin", "true or false" },
                { "{\"process\":{\"cmd\":\"\"}}", "process.cmd", "1.." },
        };
        for (size_t i = 0; i < ELEMENTSOF(rows); i++)
                refused_body(__LINE__, rows[i].body, pj_envd_start_parse(rows[i].body, strlen(rows[i].body), &s, &e), &e, rows[i].field,
                             rows[i].needle);
        pj_envd_start_done(&s);
}

TEST(selector_input_signal_update_fs) {
        struct err e = { 0 };
        {
                _cleanup_(pj_envd_selector_done) struct pj_envd_selector s = { 0 };
                PARSE_OK(pj_envd_selector_parse, "{\"process\":{\"pid\":42}}", &s);
                ASSERT_EQ(s.pid, 42);
        }
        struct pj_envd_selector s = { 0 };
        refused(__LINE__, pj_envd_selector_parse(S("{\"process\":{\"pid\":1,\"tag\":\"x\"}}"), &s, &e), &e, "process",
                "exactly one");
        refused(__LINE__, pj_envd_selector_parse(S("{\"process\":{\"pid\":0}}"), &s, &e), &e, "process.pid", "process id");
        pj_envd_selector_done(&s);
        {
                _cleanup_(pj_envd_input_done) struct pj_envd_input in = { 0 };
                PARSE_OK(pj_envd_input_parse, "{\"process\":{\"tag\":\"t\"},\"input\":{\"pty\":\"aGk_-w\"}}", &in);
                ASSERT_TRUE(in.pty);
                ASSERT_EQ(in.len, 4);
                ASSERT_TRUE(!memcmp(in.data, "hi?\xfb", 4));
        }
        struct pj_envd_input in = { 0 };
        refused(__LINE__, pj_envd_input_parse(S("{\"process\":{\"pid\":1},\"input\":{\"stdin\":\"!!\"}}"), &in, &e), &e,
                "input.stdin", "base64");
        pj_envd_input_done(&in);
        int sig = 0;
        struct pj_envd_selector ss = { 0 };
        ASSERT_OK(pj_envd_signal_parse(S("{\"process\":{\"pid\":3},\"signal\":\"SIGNAL_SIGKILL\"}"), &ss, &sig, &e));
        ASSERT_EQ(sig, 9);
        pj_envd_selector_done(&ss);
        refused(__LINE__, pj_envd_signal_parse(S("{\"process\":{\"pid\":3},\"signal\":\"SIGNAL_SIGSTOP\"}"), &ss, &sig, &e), &e,
                "signal", "SIGTERM");
        pj_envd_selector_done(&ss);
        uint32_t rows = 0, cols = 0;
        ASSERT_OK(pj_envd_update_parse(S("{\"process\":{\"pid\":3},\"pty\":{\"size\":{\"cols\":100,\"rows\":40}}}"), &ss, &rows,
                                       &cols, &e));
        ASSERT_EQ(rows, 40);
        ASSERT_EQ(cols, 100);
        pj_envd_selector_done(&ss);
        ASSERT_OK(pj_envd_empty_parse(S(""), &e));
        refused(__LINE__, pj_envd_empty_parse(S("{\"x\":1}"), &e), &e, "x", "Unknown field");
        struct pj_envd_fs f = { 0 };
        ASSERT_OK(pj_envd_fs_parse(S("{\"source\":\"a\",\"destination\":\"b\"}"), PJ_ENVD_FS_MOVE, &f, &e));
        ASSERT_STREQ(f.path, "a");
        ASSERT_STREQ(f.to, "b");
        pj_envd_fs_done(&f);
        ASSERT_OK(pj_envd_fs_parse(S("{\"path\":\"/\",\"depth\":3}"), PJ_ENVD_FS_LISTDIR, &f, &e));
        ASSERT_EQ(f.depth, 3);
        pj_envd_fs_done(&f);
        ASSERT_OK(pj_envd_fs_parse(S("{\"path\":\"/w\",\"recursive\":true,\"allow_network_mounts\":false}"), PJ_ENVD_FS_WATCH, &f, &e));
        ASSERT_TRUE(f.recursive);
        pj_envd_fs_done(&f);
        ASSERT_OK(pj_envd_fs_parse(S("{\"path\":\"/w\",\"includeEntry\":true}"), PJ_ENVD_FS_WATCH, &f, &e));
        ASSERT_TRUE(f.include_entry);
        pj_envd_fs_done(&f);
        refused(__LINE__, pj_envd_fs_parse(S("{\"path\":\"/w\",\"allowNetworkMounts\":true}"), PJ_ENVD_FS_WATCH, &f, &e), &e,
                "allowNetworkMounts", "not supported");
        pj_envd_fs_done(&f);
        refused(__LINE__, pj_envd_fs_parse(S("{\"path\":\"/\",\"depth\":65}"), PJ_ENVD_FS_LISTDIR, &f, &e), &e, "depth", "64");
        pj_envd_fs_done(&f);
        refused(__LINE__, pj_envd_fs_parse(S("{}"), PJ_ENVD_FS_PATH, &f, &e), &e, "path", "required");
        pj_envd_fs_done(&f);
}

TEST(stream_input_messages) {
        struct err e = { 0 };
        enum pj_envd_stream_kind k = 0;
        struct pj_envd_input in = { 0 };
        ASSERT_OK(pj_envd_stream_input_parse(S("{\"start\":{\"process\":{\"pid\":9}}}"), &k, &in, &e));
        ASSERT_EQ(k, PJ_ENVD_STREAM_START);
        ASSERT_EQ(in.process.pid, 9);
        pj_envd_input_done(&in);
        ASSERT_OK(pj_envd_stream_input_parse(S("{\"data\":{\"input\":{\"stdin\":\"aGk=\"}}}"), &k, &in, &e));
        ASSERT_EQ(k, PJ_ENVD_STREAM_DATA);
        ASSERT_EQ(in.len, 2);
        pj_envd_input_done(&in);
        ASSERT_OK(pj_envd_stream_input_parse(S("{\"keepalive\":{}}"), &k, &in, &e));
        ASSERT_EQ(k, PJ_ENVD_STREAM_KEEPALIVE);
        refused(__LINE__, pj_envd_stream_input_parse(S("{\"keepalive\":{},\"data\":{}}"), &k, &in, &e), &e, "", "exactly one");
        refused(__LINE__, pj_envd_stream_input_parse(S("{\"data\":{\"input\":{}}}"), &k, &in, &e), &e, "data.input", "exactly one");
        refused(__LINE__, pj_envd_stream_input_parse(S("{\"start\":{}}"), &k, &in, &e), &e, "start.process", "required");
        pj_envd_input_done(&in);
}
