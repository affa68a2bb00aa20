/* Unit tests for proto-json/pj_node: node message codecs round-trip and refuse hostile input. */
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pj_node.h"
#include "testlib.h"

#define SID "0123456789abcdef01234567"

static int parse(const char *s, struct pj_node_msg *m, struct err *e) { return pj_node_msg_parse(s, strlen(s), m, e); }

/* The queues of the node flows, named once here for both daemons. */
TEST(queue_names_carry_the_exchange) {
        _cleanup_free_ char *q = pj_node_queue_controld("paddock.nodes");
        _cleanup_free_ char *a = pj_node_queue_agent("paddock.nodes", "node-7");
        ASSERT_STREQ(q, "paddock.nodes.controld");
        ASSERT_STREQ(a, "paddock.nodes.nodeagent.node-7");
        ASSERT_STREQ(PJ_NODE_KEY_CONTROLD, "controld");
}

/* GET /egress shows the resolved list in the shape the agent's replies carry it. */
TEST(resolved_list_renders_like_the_reply) {
        struct pj_node_resolved v = { .name = "api.example.com", .addrs = { 0xcb007105 }, .n_addrs = 1, .at_ms = 7 };
        _cleanup_json_ cJSON *a = pj_node_resolved_to_json(&v, 1);
        _cleanup_free_ char *t = cJSON_PrintUnformatted(a);
        ASSERT_STREQ(t, "[{\"name\":\"api.example.com\",\"addrs\":[\"203.0.113.5\"],\"at\":7}]");
        _cleanup_json_ cJSON *e = pj_node_resolved_to_json(NULL, 0);
        _cleanup_free_ char *te = cJSON_PrintUnformatted(e);
        ASSERT_STREQ(te, "[]");
}

TEST(round_trip_every_type) {
        struct pj_node_msg m = { 0 }, back = { 0 };
        struct err e;
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

        /* The account rides along when controld knows it (the agent's lookup budget). */
        ASSERT_OK(parse("{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\","
                        "\"account\":\"aaaaaaaaaaaaaaaaaaaaaaaa\",\"mode\":\"open\"}",
                        &m, &e));
        ASSERT_STREQ(m.account_id, "aaaaaaaaaaaaaaaaaaaaaaaa");
        _cleanup_free_ char *acc = pj_node_msg_format(&m);
        ASSERT_CONTAINS(acc, "\"account\":\"aaaaaaaaaaaaaaaaaaaaaaaa\"");
        pj_node_msg_done(&m);
        ASSERT_NULL(strstr(text, "\"account\""));     /* none given, none sent */
        /* The container: the agent binds the sandbox's bridge port from it. */
        ASSERT_OK(parse("{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\","
                        "\"container\":\"paddock-" SID "\",\"mode\":\"open\"}",
                        &m, &e));
        ASSERT_STREQ(m.container, "paddock-" SID);
        _cleanup_free_ char *ctr = pj_node_msg_format(&m);
        ASSERT_CONTAINS(ctr, "\"container\":\"paddock-" SID "\"");
        pj_node_msg_done(&m);
        ASSERT_NULL(strstr(text, "\"container\""));

        ASSERT_OK(parse("{\"type\":\"egress.remove\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\"}", &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_EGRESS_REMOVE);
        pj_node_msg_done(&m);
        /* node.sync may say the node's gVisor network mode. */
        ASSERT_OK(parse("{\"type\":\"node.sync\",\"node_id\":\"n1\",\"sandbox_network\":\"host\"}", &m, &e));
        ASSERT_STREQ(m.sandbox_network, "host");
        _cleanup_free_ char *sync = pj_node_msg_format(&m);
        ASSERT_STREQ(sync, "{\"type\":\"node.sync\",\"node_id\":\"n1\",\"sandbox_network\":\"host\"}");
        pj_node_msg_done(&m);
        ASSERT_OK(parse("{\"type\":\"ping\"}", &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_PING);
        _cleanup_free_ char *p = pj_node_msg_format(&m);
        ASSERT_STREQ(p, "{\"type\":\"ping\"}");
}

/* An egress.apply for SID with the given members after sandbox_id. */
#define APPLY(members) "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\"," members "}"

TEST(refusals_name_the_field) {
        static const struct { const char *body, *field; } bad[] = {
                { "[]", "" },
                { "{\"type\":\"reboot\"}", "type" },
                { "{}", "type" },
                { "{\"type\":\"ping\",\"x\":1}", "x" },
                { "{\"type\":\"egress.apply\",\"sandbox_id\":\"XYZ\",\"ip\":\"1.2.3.4\",\"mode\":\"open\"}", "sandbox_id" },
                { APPLY("\"ip\":\"::1\",\"mode\":\"open\""), "ip" },
                { APPLY("\"ip\":\"1.2.3\",\"mode\":\"open\""), "ip" },
                { APPLY("\"ip\":\"1.2.3.4\",\"mode\":\"wide\""), "mode" },
                { APPLY("\"ip\":\"1.2.3.4\",\"account\":\"../etc\",\"mode\":\"open\""), "account" },
                { APPLY("\"ip\":\"1.2.3.4\",\"account\":7,\"mode\":\"open\""), "account" },
                { APPLY("\"ip\":\"1.2.3.4\",\"container\":\"../../etc\",\"mode\":\"open\""), "container" },
                { APPLY("\"ip\":\"1.2.3.4\",\"container\":\"\",\"mode\":\"open\""), "container" },
                { APPLY("\"ip\":\"1.2.3.4\",\"container\":[],\"mode\":\"open\""), "container" },
                { "{\"type\":\"node.sync\",\"node_id\":\"n1\",\"sandbox_network\":\"Host\"}", "sandbox_network" },
                { "{\"type\":\"node.sync\",\"node_id\":\"n1\",\"sandbox_network\":\"\"}", "sandbox_network" },
                { "{\"type\":\"node.sync\",\"node_id\":\"n1\",\"sandbox_network\":\"abcdefghijklmnop\"}", "sandbox_network" },
                { APPLY("\"ip\":\"1.2.3.4\",\"mode\":\"open\",\"allow\":[\"1.1.1.1\"]"), "allow" },
                { APPLY("\"ip\":\"1.2.3.4\",\"mode\":\"restricted\",\"allow\":[\"*.x.com\"]"), "allow[0]" },
                { APPLY("\"ip\":\"1.2.3.4\",\"mode\":\"restricted\",\"allow\":[1]"), "allow[0]" },
                { "{\"type\":\"egress.remove\",\"sandbox_id\":\"" SID "\",\"ip\":\"1.2.3.4\",\"mode\":\"open\"}", "mode" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct pj_node_msg m = { 0 };
                struct err e;
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
        struct err e;
        ASSERT_EQ(parse(body, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "allow");
}

TEST(replies_round_trip_and_random_bytes_never_crash) {
        struct pj_node_reply r = { .ok = false, .type = "egress.apply", .node_id = "n1", .error = "nft said no" }, back;
        struct err e;
        _cleanup_free_ char *t = pj_node_reply_format(&r);
        ASSERT_OK(pj_node_reply_parse(t, strlen(t), &back, &e));
        ASSERT_FALSE(back.ok);
        ASSERT_STREQ(back.error, "nft said no");
        ASSERT_STREQ(back.node_id, "n1");
        ASSERT_EQ(pj_node_reply_parse("{\"ok\":\"yes\"}", 12, &back, &e), -EINVAL);
        char junk[300];
        srandom(test_seed(1)); /* 1: glibc's own default, the inputs this test always had */
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

TEST(stats_and_sync_requests) {
        struct pj_node_msg m = { 0 };
        struct err e;
        ASSERT_OK(parse("{\"type\":\"egress.stats\"}", &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_EGRESS_STATS);
        _cleanup_free_ char *t = pj_node_msg_format(&m);
        ASSERT_STREQ(t, "{\"type\":\"egress.stats\"}");
        ASSERT_OK(parse("{\"type\":\"node.sync\",\"node_id\":\"node-1.a_b\"}", &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_NODE_SYNC);
        ASSERT_STREQ(m.node_id, "node-1.a_b");
        _cleanup_free_ char *t2 = pj_node_msg_format(&m);
        ASSERT_STREQ(t2, "{\"type\":\"node.sync\",\"node_id\":\"node-1.a_b\"}");
        ASSERT_EQ(parse("{\"type\":\"node.sync\"}", &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "node_id");
        ASSERT_EQ(parse("{\"type\":\"node.sync\",\"node_id\":\"a b\"}", &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "node_id");
        ASSERT_EQ(parse("{\"type\":\"egress.stats\",\"sandbox_id\":\"" SID "\"}", &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "sandbox_id");
}

TEST(egress_resolved_round_trip_and_checks) {
        static const char body[] = "{\"type\":\"egress.resolved\",\"node_id\":\"n1\",\"sandbox_id\":\"" SID "\","
                                   "\"resolved\":[{\"name\":\"api.example.com\",\"addrs\":[\"203.0.113.5\"],\"at\":1764700000100}]}";
        struct pj_node_msg m = { 0 };
        struct err e;
        ASSERT_OK(parse(body, &m, &e));
        ASSERT_EQ(m.type, PJ_NODE_EGRESS_RESOLVED);
        ASSERT_STREQ(m.node_id, "n1");
        ASSERT_STREQ(m.sandbox_id, SID);
        ASSERT_EQ(m.n_resolved, 1);
        ASSERT_STREQ(m.resolved[0].name, "api.example.com");
        ASSERT_EQ(m.resolved[0].addrs[0], 0xcb007105);
        _cleanup_free_ char *t = pj_node_msg_format(&m);
        ASSERT_STREQ(t, body);
        pj_node_msg_done(&m);
        /* Every part is checked: no node, a bad name, an address that is not one, an extra field. */
        ASSERT_EQ(parse("{\"type\":\"egress.resolved\",\"sandbox_id\":\"" SID "\",\"resolved\":[]}", &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "node_id");
        ASSERT_EQ(parse("{\"type\":\"egress.resolved\",\"node_id\":\"n1\",\"sandbox_id\":\"" SID "\"}", &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "resolved");
        ASSERT_EQ(parse("{\"type\":\"egress.resolved\",\"node_id\":\"n1\",\"sandbox_id\":\"" SID "\","
                        "\"resolved\":[{\"name\":\"1.2.3.4\",\"addrs\":[],\"at\":1}]}", &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "resolved[0]");
        ASSERT_EQ(parse("{\"type\":\"egress.resolved\",\"node_id\":\"n1\",\"sandbox_id\":\"" SID "\","
                        "\"resolved\":[{\"name\":\"a.example\",\"addrs\":[\"x\"],\"at\":1}]}", &m, &e), -EINVAL);
        ASSERT_EQ(parse("{\"type\":\"egress.resolved\",\"node_id\":\"n1\",\"sandbox_id\":\"" SID "\","
                        "\"resolved\":[],\"ip\":\"1.2.3.4\"}", &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "ip");
}

TEST(reply_extras_round_trip) {
        struct pj_node_reply r = { .ok = true, .type = "egress.apply", .node_id = "n1", .applied_at_ms = 1764700000123 };
        struct pj_node_resolved res = { .name = "api.example.com", .addrs = { 0xcb007105, 0xcb007106 }, .n_addrs = 2,
                                        .at_ms = 1764700000100 };
        r.resolved = &res;
        r.n_resolved = 1;
        struct err e;
        _cleanup_free_ char *t = pj_node_reply_format(&r);
        ASSERT_TRUE(strstr(t, "\"resolved\":[{\"name\":\"api.example.com\",\"addrs\":[\"203.0.113.5\",\"203.0.113.6\"],"
                              "\"at\":1764700000100}]") != NULL);
        ASSERT_TRUE(strstr(t, "\"applied_at\":1764700000123") != NULL);
        struct pj_node_reply back;
        ASSERT_OK(pj_node_reply_parse(t, strlen(t), &back, &e));
        ASSERT_TRUE(back.ok);
        ASSERT_EQ(back.applied_at_ms, 1764700000123);
        ASSERT_EQ(back.n_resolved, 1);
        ASSERT_STREQ(back.resolved[0].name, "api.example.com");
        ASSERT_EQ(back.resolved[0].n_addrs, 2);
        ASSERT_EQ(back.resolved[0].addrs[1], 0xcb007106);
        ASSERT_EQ(back.resolved[0].at_ms, 1764700000100);
        ASSERT_FALSE(back.has_stats);
        ASSERT_FALSE(back.has_live);
        pj_node_reply_done(&back);

        struct pj_node_sbx_stats st = { .sandbox_id = SID, .allowed_packets = 3, .allowed_bytes = 180,
                                        .dropped_packets = 1ull << 40, .dropped_bytes = 0 };
        struct pj_node_reply s = { .ok = true, .type = "egress.stats", .node_id = "n1", .has_stats = true, .stats = &st, .n_stats = 1 };
        _cleanup_free_ char *ts = pj_node_reply_format(&s);
        ASSERT_OK(pj_node_reply_parse(ts, strlen(ts), &back, &e));
        ASSERT_TRUE(back.has_stats);
        ASSERT_EQ(back.n_stats, 1);
        ASSERT_STREQ(back.stats[0].sandbox_id, SID);
        ASSERT_EQ(back.stats[0].allowed_bytes, 180);
        ASSERT_EQ(back.stats[0].dropped_packets, 1ull << 40);
        pj_node_reply_done(&back);

        /* An empty live list is an answer ("nothing is live"), distinct from no list. */
        const char *empty = "{\"ok\":true,\"type\":\"node.sync\",\"node_id\":\"n1\",\"live\":[]}";
        ASSERT_OK(pj_node_reply_parse(empty, strlen(empty), &back, &e));
        ASSERT_TRUE(back.has_live);
        ASSERT_EQ(back.n_live, 0);
        pj_node_reply_done(&back);
        struct pj_node_live lv[2] = { { SID, 0xa9fe5a07 }, { "fedcba9876543210fedcba98", 0xa9fe5a08 } };
        struct pj_node_reply y = { .ok = true, .type = "node.sync", .node_id = "n1", .has_live = true, .live = lv, .n_live = 2 };
        _cleanup_free_ char *ty = pj_node_reply_format(&y);
        ASSERT_TRUE(strstr(ty, "{\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\"}") != NULL);
        ASSERT_OK(pj_node_reply_parse(ty, strlen(ty), &back, &e));
        ASSERT_EQ(back.n_live, 2);
        ASSERT_EQ(back.live[1].ip, 0xa9fe5a08);
        ASSERT_STREQ(back.live[1].sandbox_id, "fedcba9876543210fedcba98");
        pj_node_reply_done(&back);

        /* Old replies (no extras) still parse and allocate nothing. */
        const char *old = "{\"ok\":true,\"type\":\"egress.apply\",\"node_id\":\"n1\"}";
        ASSERT_OK(pj_node_reply_parse(old, strlen(old), &back, &e));
        ASSERT_TRUE(back.resolved == NULL && back.stats == NULL && back.live == NULL);
        ASSERT_EQ(back.applied_at_ms, 0);
}

TEST(reply_extras_refusals_name_the_field) {
        static const struct { const char *body, *field; } bad[] = {
                { "{\"ok\":true,\"applied_at\":\"now\"}", "applied_at" },
                { "{\"ok\":true,\"applied_at\":-1}", "applied_at" },
                { "{\"ok\":true,\"resolved\":{}}", "resolved" },
                { "{\"ok\":true,\"resolved\":[{\"name\":\"1.2.3.4\",\"addrs\":[],\"at\":1}]}", "resolved[0]" },
                { "{\"ok\":true,\"resolved\":[{\"name\":\"a.com\",\"addrs\":[\"x\"],\"at\":1}]}", "resolved[0]" },
                { "{\"ok\":true,\"resolved\":[{\"name\":\"a.com\",\"addrs\":[]}]}", "resolved[0]" },
                { "{\"ok\":true,\"sandboxes\":[{\"sandbox_id\":\"" SID "\",\"allowed_packets\":-1,\"allowed_bytes\":0,"
                  "\"dropped_packets\":0,\"dropped_bytes\":0}]}", "sandboxes[0]" },
                { "{\"ok\":true,\"sandboxes\":[{\"sandbox_id\":\"nope\"}]}", "sandboxes[0]" },
                { "{\"ok\":true,\"live\":[{\"sandbox_id\":\"" SID "\",\"ip\":\"::1\"}]}", "live[0]" },
                { "{\"ok\":true,\"live\":[1]}", "live[0]" },
                { "{\"ok\":true,\"live\":\"all\"}", "live" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct pj_node_reply r = { 0 };
                struct err e;
                if (pj_node_reply_parse(bad[i].body, strlen(bad[i].body), &r, &e) != -EINVAL)
                        test_fail(__FILE__, __LINE__, "accepted %s", bad[i].body);
                if (strcmp(e.field, bad[i].field) != 0)
                        test_fail(__FILE__, __LINE__, "%s: field '%s', want '%s' (%s)", bad[i].body, e.field, bad[i].field, e.message);
        }
        /* 33 addresses for one name, 4097 live entries: over the caps. */
        char body[8192];
        size_t o = (size_t) snprintf(body, sizeof(body), "{\"ok\":true,\"resolved\":[{\"name\":\"a.com\",\"at\":1,\"addrs\":[");
        for (int i = 0; i < 33; i++)
                o += (size_t) snprintf(body + o, sizeof(body) - o, "%s\"203.0.113.%d\"", i ? "," : "", i);
        snprintf(body + o, sizeof(body) - o, "]}]}");
        struct pj_node_reply r;
        struct err e;
        ASSERT_EQ(pj_node_reply_parse(body, strlen(body), &r, &e), -EINVAL);
        ASSERT_STREQ(e.field, "resolved[0]");
        size_t cap = 4097 * 64 + 64;
        _cleanup_free_ char *big = malloc(cap);
        o = (size_t) snprintf(big, cap, "{\"ok\":true,\"live\":[");
        for (int i = 0; i < 4097; i++)
                o += (size_t) snprintf(big + o, cap - o, "%s{\"sandbox_id\":\"%024x\",\"ip\":\"10.0.0.1\"}", i ? "," : "", i);
        snprintf(big + o, cap - o, "]}");
        ASSERT_EQ(pj_node_reply_parse(big, strlen(big), &r, &e), -EINVAL);
        ASSERT_STREQ(e.field, "live");
        /* exactly 4096 is fine */
        o = (size_t) snprintf(big, cap, "{\"ok\":true,\"live\":[");
        for (int i = 0; i < 4096; i++)
                o += (size_t) snprintf(big + o, cap - o, "%s{\"sandbox_id\":\"%024x\",\"ip\":\"10.0.0.1\"}", i ? "," : "", i);
        snprintf(big + o, cap - o, "]}");
        ASSERT_OK(pj_node_reply_parse(big, strlen(big), &r, &e));
        ASSERT_EQ(r.n_live, 4096);
        pj_node_reply_done(&r);
}

TEST(apply_rules_and_the_proxy_ca_round_trip) {
        /* The rules' values are the secrets', put in by controld: the node takes them as they are. */
        static const char msg[] = "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\",\"mode\":\"open\","
                                  "\"rules\":{\"api.example.com\":[{\"headers\":{\"x-api-key\":\"sk-${secrets.x}-1\"}}]}}";
        struct pj_node_msg m = { 0 };
        struct err e = { 0 };
        ASSERT_OK(parse(msg, &m, &e));
        ASSERT_EQ(m.egress.n_rules, 1);
        ASSERT_STREQ(m.egress.rules[0].headers[0].value, "sk-${secrets.x}-1");
        _cleanup_free_ char *t = pj_node_msg_format(&m);
        ASSERT_NOT_NULL(strstr(t, "\"rules\":{\"api.example.com\":[{\"headers\":{\"x-api-key\":\"sk-${secrets.x}-1\"}}]}"));
        pj_node_msg_done(&m);
        /* refused: rules in deny_all, a value with a line break, a host that is an address */
        static const char *const bad_msgs[] = {
                "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\",\"mode\":\"deny_all\","
                "\"rules\":{\"api.example.com\":[]}}",
                "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\",\"mode\":\"open\","
                "\"rules\":{\"api.example.com\":[{\"headers\":{\"x\":\"a\\r\\nb: c\"}}]}}",
                "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SID "\",\"ip\":\"169.254.90.7\",\"mode\":\"open\","
                "\"rules\":{\"10.0.0.1\":[]}}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad_msgs); i++) {
                struct pj_node_msg b = { 0 };
                ASSERT_EQ(parse(bad_msgs[i], &b, &e), -EINVAL);
                ASSERT_STREQ(e.field, "rules");
        }
        /* the reply's CA: one PEM certificate, bounded */
        struct pj_node_reply r = { .ok = true, .type = "egress.apply", .node_id = "n1",
                                   .ca_pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n" };
        _cleanup_free_ char *rt = pj_node_reply_format(&r);
        struct pj_node_reply back = { 0 };
        ASSERT_OK(pj_node_reply_parse(rt, strlen(rt), &back, &e));
        ASSERT_STREQ(back.ca_pem, r.ca_pem);
        pj_node_reply_done(&back);
        static const char bad_ca[] = "{\"ok\":true,\"ca_pem\":\"not a certificate\"}";
        ASSERT_EQ(pj_node_reply_parse(bad_ca, sizeof(bad_ca) - 1, &back, &e), -EINVAL);
        ASSERT_STREQ(e.field, "ca_pem");
}
