/* Unit tests for controld/sbtypes.c: a sandbox's egress policy and timings are
 * structs inside controld and round-trip through the store's column text. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "testlib.h"

TEST(egress_parsed_once_and_round_trips) {
        struct pj_egress pe = { 0 };
        struct err why = { 0 };
        pe.mode = PJ_EGRESS_RESTRICTED;
        ASSERT_EQ(pj_egress_add_allow(&pe, "1.1.1.1", &why), 1);
        ASSERT_EQ(pj_egress_add_allow(&pe, "10.0.0.0/8", &why), 1);
        ASSERT_EQ(pj_egress_add_allow(&pe, "API.Example.com.", &why), 1);

        struct sb_egress e = { 0 };
        ASSERT_EQ(sb_egress_from_pj(&e, &pe), 0);
        ASSERT_EQ(e.mode, PJ_EGRESS_RESTRICTED);
        ASSERT_EQ(e.n_allow, 3);
        ASSERT_EQ(e.allow[0].kind, PJ_ALLOW_IPV4);
        ASSERT_EQ(e.allow[0].addr, 0x01010101u);
        ASSERT_EQ(e.allow[1].kind, PJ_ALLOW_CIDR);
        ASSERT_EQ(e.allow[1].prefix, 8);
        ASSERT_EQ(e.allow[2].kind, PJ_ALLOW_HOSTNAME);
        ASSERT_STREQ(e.allow[2].host, "api.example.com");

        _cleanup_free_ char *t = sb_egress_allow_to_text(&e);
        ASSERT_STREQ(t, "[\"1.1.1.1\",\"10.0.0.0/8\",\"api.example.com\"]");
        struct sb_egress back = { .mode = PJ_EGRESS_RESTRICTED };
        sb_egress_allow_from_text(&back, t);
        ASSERT_EQ(back.n_allow, 3);
        for (size_t i = 0; i < 3; i++) {
                ASSERT_EQ(back.allow[i].kind, e.allow[i].kind);
                ASSERT_EQ(back.allow[i].addr, e.allow[i].addr);
                ASSERT_EQ(back.allow[i].prefix, e.allow[i].prefix);
                ASSERT_STREQ(back.allow[i].host, e.allow[i].host);
        }

        /* Text that is not an allowlist gives no entries, never a crash. */
        sb_egress_allow_from_text(&back, "{\"x\":1}");
        ASSERT_EQ(back.n_allow, 0);
        sb_egress_allow_from_text(&back, "[\"not a host\", 5, \"8.8.8.8\"]");
        ASSERT_EQ(back.n_allow, 1);
        sb_egress_allow_from_text(&back, NULL);
        ASSERT_EQ(back.n_allow, 0);
        _cleanup_free_ char *empty = sb_egress_allow_to_text(&back);
        ASSERT_STREQ(empty, "[]");

        sb_egress_done(&back);
        sb_egress_done(&e);
        sb_egress_done(&e); /* idempotent */
        ASSERT_EQ(e.n_allow, 0);
        pj_egress_done(&pe);
}

TEST(maps_and_e2b_options_decode_once_and_round_trip) {
        struct sb_map m = { 0 };
        /* non-strings are skipped, a repeated key keeps its first value, order is kept */
        ASSERT_OK(sb_map_from_text(&m, "{\"b\":\"2\",\"n\":1,\"a\":\"x=y\",\"o\":{}}"));
        ASSERT_EQ(m.n, 2);
        ASSERT_STREQ(m.v[0].key, "b");
        ASSERT_STREQ(sb_map_get(&m, "a"), "x=y");
        ASSERT_NULL(sb_map_get(&m, "n"));
        _cleanup_free_ char *text = sb_map_to_text(&m);
        ASSERT_STREQ(text, "{\"b\":\"2\",\"a\":\"x=y\"}");
        ASSERT_EQ(sb_map_from_text(&m, "[\"not\", \"an object\"]"), -EINVAL);
        ASSERT_EQ(m.n, 0);
        ASSERT_OK(sb_map_from_text(&m, NULL));
        ASSERT_NULL(sb_map_to_text(&m));
        sb_map_done(&m);

        struct sb_e2b e = { 0 };
        ASSERT_NULL(sb_e2b_to_text(&e));   /* made through the Brimble API: nothing stored */
        ASSERT_OK(sb_e2b_from_text(&e, "{\"templateID\":\"base\"}"));
        ASSERT_TRUE(e.set);
        ASSERT_FALSE(e.public);
        ASSERT_STREQ(e.template_id, "base");
        _cleanup_free_ char *et = sb_e2b_to_text(&e);
        ASSERT_STREQ(et, "{\"templateID\":\"base\",\"public\":false}");
        ASSERT_EQ(sb_e2b_from_text(&e, "nonsense"), -EINVAL);
        ASSERT_FALSE(e.set);
        sb_e2b_done(&e);

        /* a sandbox's variables under a process's own: the request's win */
        struct sandbox sb = { 0 };
        ASSERT_OK(sb_map_from_text(&sb.env, "{\"A\":\"1\",\"B\":\"2\"}"));
        char *req[] = { "B=mine", NULL };
        _cleanup_strv_free_ char **env = sb_env_layer(&sb, req);
        ASSERT_EQ(strv_length(env), 2);
        ASSERT_STREQ(env[0], "A=1");
        ASSERT_STREQ(env[1], "B=mine");
        sandbox_clear(&sb);
}

TEST(timings_round_trip_in_phase_order) {
        struct sb_timings t = { 0 };
        ASSERT_NULL(sb_timings_to_text(&t));
        sb_timings_set(&t, SB_PHASE_RESUME, 7);
        sb_timings_set(&t, SB_PHASE_VALIDATE, 1);
        sb_timings_set(&t, SB_PHASE_PLACE, 1234);
        _cleanup_free_ char *s = sb_timings_to_text(&t);
        ASSERT_STREQ(s, "{\"validate_ms\":1,\"place_ms\":1234,\"resume_ms\":7}");
        struct sb_timings back;
        sb_timings_from_text(&back, "{\"record_ms\":3,\"total_ms\":9,\"junk\":\"x\",\"place_ms\":\"no\"}");
        ASSERT_EQ(back.set, (1u << SB_PHASE_RECORD) | (1u << SB_PHASE_TOTAL));
        ASSERT_EQ(back.ms[SB_PHASE_TOTAL], 9);
        sb_timings_from_text(&back, s);
        ASSERT_EQ(back.set, t.set);
        for (int p = 0; p < _SB_PHASE_MAX; p++)
                if (t.set & (1u << p))
                        ASSERT_EQ(back.ms[p], t.ms[p]);
        sb_timings_from_text(&back, NULL);
        ASSERT_EQ(back.set, 0);
}

TEST(egress_rules_round_trip_with_their_placeholders) {
        static const char body[] = "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"1.1.1.1\"],\"rules\":{"
                                   "\"API.example.com\":[{\"headers\":{\"X-Api-Key\":\"${secrets.k1}\",\"x-org\":\"o\"}}],"
                                   "\"b.example.com\":[{\"headers\":{\"authorization\":\"Bearer ${secrets.k2}\"}}]}}}";
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create in = { 0 };
        struct err err = { 0 };
        ASSERT_EQ(pj_sandbox_create_parse(body, sizeof(body) - 1, &in, &err), 0);
        ASSERT_EQ(in.egress.n_rules, 2);
        ASSERT_TRUE(in.egress.rules_open);
        struct sb_egress e = { 0 };
        ASSERT_EQ(sb_egress_from_pj(&e, &in.egress), 0);
        _cleanup_free_ char *t = sb_egress_allow_to_text(&e);
        struct sb_egress back = { .mode = PJ_EGRESS_RESTRICTED };
        sb_egress_allow_from_text(&back, t);
        ASSERT_EQ(back.n_allow, 1);
        ASSERT_EQ(back.rules.n_rules, 2);
        ASSERT_TRUE(back.rules.rules_open);
        ASSERT_STREQ(back.rules.rules[0].host, "api.example.com");
        ASSERT_STREQ(back.rules.rules[0].headers[0].name, "x-api-key");
        ASSERT_STREQ(back.rules.rules[0].headers[0].value, "${secrets.k1}");
        ASSERT_STREQ(back.rules.rules[1].headers[0].value, "Bearer ${secrets.k2}");
        /* an older row: the allowlist alone */
        sb_egress_allow_from_text(&back, "[\"2.2.2.2\"]");
        ASSERT_EQ(back.n_allow, 1);
        ASSERT_EQ(back.rules.n_rules, 0);
        sb_egress_done(&back);
        sb_egress_done(&e);
}
