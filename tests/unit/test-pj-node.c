/* Unit tests for proto-json/pj_node: node message codecs round-trip and refuse hostile input. */
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pj_node.h"
#include "testlib.h"

#define SID "0123456789abcdef01234567"

static int parse(const char *s, struct pj_node_msg *m, struct pj_error *e) { return pj_node_msg_parse(s, strlen(s), m, e); }

TEST(round_trip_every_type) {
        struct pj_node_msg m = { 0 }, back = { 0 };
        struct pj_error e;
        ASSERT_OK(parse("{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\","
                        "\"mode\":\"restricted\",\"allow\":[\"1.1.1.1\",\"10.0.0.0/8\",\"API.Example.com\",\"1.1.1.1\"]}",
                        &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_EGRESS_APPLY);
        ASSERT_STREQ(m.sandbox_id, SID);
        ASSERT_EQ(m.ip, (169u << 24) | (254u << 16) | (90u << 8) | 7u);
        ASSERT_EQ(m.egress.mode, PJ_EGRESS_RESTRICTED);
        ASSERT_EQ(m.egress.n_allow, 3);  /* normalised, duplicates merged */
        ASSERT_STREQ(m.egress.allow[2], "api.example.com");
        _cleanup_free_ char *text = pj_node_msg_format(&m);
        ASSERT_OK(parse(text, &back, &e));
        ASSERT_EQ(back.ip, m.ip);
        ASSERT_EQ(back.egress.n_allow, 3);
        _cleanup_free_ char *text2 = pj_node_msg_format(&back);
        ASSERT_STREQ(text, text2);
        pj_node_msg_done(&m);
        pj_node_msg_done(&back);

        ASSERT_OK(parse("{\"type\":\"egress.remove\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\"}", &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_EGRESS_REMOVE);
        pj_node_msg_done(&m);
        ASSERT_OK(parse("{\"type\":\"ping\"}", &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_PING);
        _cleanup_free_ char *p = pj_node_msg_format(&m);
        ASSERT_STREQ(p, "{\"type\":\"ping\"}");
}

TEST(refusals_name_the_field) {
        static const struct { const char *body, *field; } bad[] = {
                { "[]", "" },
                { "{\"type\":\"reboot\"}", "type" },
                { "{}", "type" },
                { "{\"type\":\"ping\",\"x\":1}", "x" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"XYZ\",\"ip\":\"1.2.3.4\",\"mode\":\"open\"}", "sandbox_id" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"::1\",\"mode\":\"open\"}", "ip" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3\",\"mode\":\"open\"}", "ip" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3.4\",\"mode\":\"wide\"}", "mode" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3.4\",\"mode\":\"open\",\"allow\":[\"1.1.1.1\"]}", "allow" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3.4\",\"mode\":\"restricted\",\"allow\":[\"*.x.com\"]}", "allow[0]" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3.4\",\"mode\":\"restricted\",\"allow\":[1]}", "allow[0]" },
                { "{\"type\":\"egress.remove\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3.4\",\"mode\":\"open\"}", "mode" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct pj_node_msg m = { 0 };
                struct pj_error e;
                if (parse(bad[i].body, &m, &e) != -EINVAL)
                        test_fail(__FILE__, __LINE__, "accepted %s", bad[i].body);
                if (strcmp(e.field, bad[i].field) != 0)
                        test_fail(__FILE__, __LINE__, "%s: field '%s', want '%s' (%s)", bad[i].body, e.field, bad[i].field, e.message);
                ASSERT_TRUE(e.message[0] != 0);
        }
        /* 51 entries */
        char body[4096];
        size_t o = (size_t) snprintf(body, sizeof(body),
                                     "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3.4\",\"mode\":\"restricted\",\"allow\":[");
        for (int i = 0; i < 51; i++)
                o += (size_t) snprintf(body + o, sizeof(body) - o, "%s\"10.0.%d.1\"", i ? "," : "", i);
        snprintf(body + o, sizeof(body) - o, "]}");
        struct pj_node_msg m = { 0 };
        struct pj_error e;
        ASSERT_EQ(parse(body, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "allow");
}

TEST(replies_round_trip_and_random_bytes_never_crash) {
        struct pj_node_reply r = { .ok = false, .type = "egress.apply", .node_id = "n1", .error = "nft said no" }, back;
        struct pj_error e;
        _cleanup_free_ char *t = pj_node_reply_format(&r);
        ASSERT_OK(pj_node_reply_parse(t, strlen(t), &back, &e));
        ASSERT_FALSE(back.ok);
        ASSERT_STREQ(back.error, "nft said no");
        ASSERT_STREQ(back.node_id, "n1");
        ASSERT_EQ(pj_node_reply_parse("{\"ok\":\"yes\"}", 12, &back, &e), -EINVAL);
        char junk[300];
        for (int i = 0; i < 5000; i++) {
                size_t n = (size_t) (random() % sizeof(junk));
                for (size_t k = 0; k < n; k++)
                        junk[k] = (char) (random() & 0xff);
                struct pj_node_msg m = { 0 };
                if (pj_node_msg_parse(junk, n, &m, &e) == 0)
                        pj_node_msg_done(&m);
                (void) pj_node_reply_parse(junk, n, &back, &e);
        }
}
