/* Unit tests for proto-json/pj_egress.c: allowlist entries and policy helpers. */
#include <errno.h>
#include <stdlib.h>

#include "cleanup.h"
#include "pj_egress.h"
#include "testlib.h"

static const struct {
        const char *in;
        enum pj_allow_kind kind;
        const char *norm;
        uint32_t addr;
        int prefix;
} good[] = {
        { "1.1.1.1", PJ_ALLOW_IPV4, "1.1.1.1", 0x01010101, 32 },
        { "0.0.0.0", PJ_ALLOW_IPV4, "0.0.0.0", 0, 32 },
        { "255.255.255.255", PJ_ALLOW_IPV4, "255.255.255.255", 0xffffffff, 32 },
        { "10.0.0.1", PJ_ALLOW_IPV4, "10.0.0.1", 0x0a000001, 32 },
        { "192.168.100.200", PJ_ALLOW_IPV4, "192.168.100.200", 0xc0a864c8, 32 },
        { "10.0.0.0/8", PJ_ALLOW_CIDR, "10.0.0.0/8", 0x0a000000, 8 },
        { "0.0.0.0/0", PJ_ALLOW_CIDR, "0.0.0.0/0", 0, 0 },
        { "1.2.3.4/32", PJ_ALLOW_CIDR, "1.2.3.4/32", 0x01020304, 32 },
        { "172.16.0.0/12", PJ_ALLOW_CIDR, "172.16.0.0/12", 0xac100000, 12 },
        { "192.168.1.128/25", PJ_ALLOW_CIDR, "192.168.1.128/25", 0xc0a80180, 25 },
        { "api.example.com", PJ_ALLOW_HOSTNAME, "api.example.com", 0, 0 },
        { "API.Example.COM", PJ_ALLOW_HOSTNAME, "api.example.com", 0, 0 },
        { "api.example.com.", PJ_ALLOW_HOSTNAME, "api.example.com", 0, 0 },
        { "example.com", PJ_ALLOW_HOSTNAME, "example.com", 0, 0 },
        { "a-b.c-d.io", PJ_ALLOW_HOSTNAME, "a-b.c-d.io", 0, 0 },
        { "1password.com", PJ_ALLOW_HOSTNAME, "1password.com", 0, 0 },
        { "1.2.3.4.nip.io", PJ_ALLOW_HOSTNAME, "1.2.3.4.nip.io", 0, 0 },
        { "xn--bcher-kva.example", PJ_ALLOW_HOSTNAME, "xn--bcher-kva.example", 0, 0 },
        { "a.b2", PJ_ALLOW_HOSTNAME, "a.b2", 0, 0 },
        /* 63-char label is the maximum */
        { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", PJ_ALLOW_HOSTNAME,
          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", 0, 0 },
};

static const struct {
        const char *in;
        const char *why; /* substring of the reason */
} bad[] = {
        { "", "empty" },
        { " 1.1.1.1", "whitespace" },
        { "1.1.1.1 ", "whitespace" },
        { "api.example.com\n", "whitespace" },
        { "010.1.1.1", "not a valid IPv4" },
        { "1.01.1.1", "not a valid IPv4" },
        { "256.1.1.1", "not a valid IPv4" },
        { "1.1.1.1000", "not a valid IPv4" },
        { "1.1.1", "not a valid IPv4" },
        { "1.1.1.1.1", "not a valid IPv4" },
        { "127.1", "not a valid IPv4" },
        { "2130706433", "not a valid IPv4" },
        { "1.1.1.1.", "not a valid IPv4" },
        { "1..1.1", "not a valid IPv4" },
        { ".1.1.1", "not a valid IPv4" },
        { "0x7f.0.0.1", "numeric" },
        { "0x7f000001", "fully qualified" },
        { "10.0.0.1/8", "has host bits set; did you mean 10.0.0.0/8?" },
        { "192.168.1.1/24", "did you mean 192.168.1.0/24?" },
        { "10.0.0.0/33", "prefix length" },
        { "10.0.0.0/08", "prefix length" },
        { "10.0.0.0/", "prefix length" },
        { "10.0.0.0/-1", "prefix length" },
        { "10.0.0.0/8/8", "prefix length" },
        { "10.0.0/8", "CIDR" },
        { "/8", "CIDR" },
        { "example.com/8", "CIDR" },
        { "::1", "IPv6" },
        { "2001:db8::1", "IPv6" },
        { "2001:db8::/32", "IPv6" },
        { "[::1]", "IPv6" },
        { "fe80::1%eth0", "IPv6" },
        { "1.1.1.1:443", "ports" },
        { "example.com:80", "ports" },
        { "https://example.com", "URL" },
        { "*.example.com", "wildcard" },
        { "*", "wildcard" },
        { "api.*.com", "wildcard" },
        { "localhost", "fully qualified" },
        { "com", "fully qualified" },
        { "example..com", "empty label" },
        { ".example.com", "empty label" },
        { "example.com..", "empty label" },
        { ".", "not a valid" },
        { "-api.example.com", "'-'" },
        { "api-.example.com", "'-'" },
        { "api.example.-com", "'-'" },
        { "my_host.example.com", "'_'" },
        { "exa mple.com", "whitespace" },
        { "example.com\x01", "not allowed" },
        { "ex\xc3\xa4mple.com", "not allowed" },
        { "example!.com", "'!'" },
        { "user@example.com", "'@'" },
        { "example.123", "numeric" },
        { "a.1", "numeric" },
        { "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.com", "63" },
};

TEST(allow_entry_good) {
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                struct pj_allow_entry e;
                char norm[PJ_ALLOW_NORM_MAX];
                struct err why = { 0 };
                int r = pj_allow_entry_parse(good[i].in, &e, norm, sizeof(norm), &why);
                if (r != 0)
                        test_fail(__FILE__, __LINE__, "good[%zu] \"%s\" rejected: %s", i, good[i].in, why.message);
                ASSERT_STREQ(norm, good[i].norm);
                ASSERT_EQ(e.kind, good[i].kind);
                ASSERT_EQ(e.prefix, good[i].prefix);
                ASSERT_EQ(e.addr, good[i].addr);
                if (e.kind == PJ_ALLOW_HOSTNAME)
                        ASSERT_STREQ(e.host, good[i].norm);
                else
                        ASSERT_STREQ(e.host, "");
                /* normalised text parses to itself */
                char norm2[PJ_ALLOW_NORM_MAX];
                ASSERT_EQ(pj_allow_entry_parse(norm, NULL, norm2, sizeof(norm2), NULL), 0);
                ASSERT_STREQ(norm2, norm);
        }
}

TEST(allow_entry_bad) {
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct pj_allow_entry e = { .kind = PJ_ALLOW_CIDR, .prefix = 77 };
                char norm[PJ_ALLOW_NORM_MAX] = "untouched";
                struct err why = { 0 };
                int r = pj_allow_entry_parse(bad[i].in, &e, norm, sizeof(norm), &why);
                if (r != -EINVAL)
                        test_fail(__FILE__, __LINE__, "bad[%zu] \"%s\" accepted (r=%d, norm=%s)", i, bad[i].in, r, norm);
                if (!strstr(why.message, bad[i].why))
                        test_fail(__FILE__, __LINE__, "bad[%zu] \"%s\": reason \"%s\" lacks \"%s\"", i, bad[i].in, why.message,
                                  bad[i].why);
                ASSERT_STREQ(norm, "untouched");
                ASSERT_EQ(e.prefix, 77);
        }
}

TEST(allow_entry_lengths) {
        char host[400];
        struct err why = { 0 };
        /* 4 labels of 63 + 3 dots = 255 > 253 */
        memset(host, 'a', sizeof(host));
        for (int i = 63; i < 255; i += 64)
                host[i] = '.';
        host[255] = '\0';
        ASSERT_EQ(pj_allow_entry_parse(host, NULL, NULL, 0, &why), -EINVAL);
        ASSERT_CONTAINS(why.message, "too long");
        /* exactly 253 */
        host[253] = '\0';
        host[252] = 'c';
        ASSERT_EQ(pj_allow_entry_parse(host, NULL, NULL, 0, &why), 0);
        /* 253 plus the trailing dot is still fine */
        host[253] = '.';
        host[254] = '\0';
        char norm[PJ_ALLOW_NORM_MAX];
        ASSERT_EQ(pj_allow_entry_parse(host, NULL, norm, sizeof(norm), &why), 0);
        ASSERT_EQ(strlen(norm), 253);
        /* absurdly long */
        memset(host, 'a', sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        ASSERT_EQ(pj_allow_entry_parse(host, NULL, NULL, 0, &why), -EINVAL);
        ASSERT_CONTAINS(why.message, "too long");
        /* NULL input, NULL why */
        ASSERT_EQ(pj_allow_entry_parse(NULL, NULL, NULL, 0, NULL), -EINVAL);
        /* small output buffer */
        char small[4];
        ASSERT_EQ(pj_allow_entry_parse("1.1.1.1", NULL, small, sizeof(small), &why), -ENOBUFS);
        /* why is a whole predicate, and field stays empty: the caller knows the path */
        struct err v6 = { 0 };
        ASSERT_EQ(pj_allow_entry_parse("::1", NULL, NULL, 0, &v6), -EINVAL);
        ASSERT_STREQ(v6.message,
                     "is an IPv6 address; IPv6 is not supported, use an IPv4 address, a CIDR range or a hostname");
        ASSERT_STREQ(v6.field, "");
}

TEST(all_cidr_prefixes) {
        for (int p = 0; p <= 32; p++) {
                char in[32], norm[PJ_ALLOW_NORM_MAX];
                struct err why = { 0 };
                struct pj_allow_entry e;
                snprintf(in, sizeof(in), "255.255.255.255/%d", p);
                int r = pj_allow_entry_parse(in, &e, norm, sizeof(norm), &why);
                if (p == 32) {
                        ASSERT_EQ(r, 0);
                        ASSERT_EQ(e.prefix, 32);
                        continue;
                }
                ASSERT_EQ(r, -EINVAL);
                /* the hint must itself be valid */
                const char *hint = strstr(why.message, "did you mean ");
                ASSERT_NOT_NULL(hint);
                char fixed[64];
                snprintf(fixed, sizeof(fixed), "%s", hint + strlen("did you mean "));
                fixed[strlen(fixed) - 1] = '\0'; /* drop '?' */
                ASSERT_EQ(pj_allow_entry_parse(fixed, &e, norm, sizeof(norm), &why), 0);
                ASSERT_EQ(e.prefix, p);
                ASSERT_EQ(e.addr, p == 0 ? 0 : (uint32_t) (0xffffffffu << (32 - p)));
        }
}

TEST(mode_strings) {
        enum pj_egress_mode m;
        ASSERT_EQ(pj_egress_mode_from_string("open", &m), 0);
        ASSERT_EQ(m, PJ_EGRESS_OPEN);
        ASSERT_EQ(pj_egress_mode_from_string("restricted", &m), 0);
        ASSERT_EQ(m, PJ_EGRESS_RESTRICTED);
        ASSERT_EQ(pj_egress_mode_from_string("deny_all", &m), 0);
        ASSERT_EQ(m, PJ_EGRESS_DENY_ALL);
        ASSERT_EQ(pj_egress_mode_from_string("Open", &m), -EINVAL);
        ASSERT_EQ(pj_egress_mode_from_string("deny-all", &m), -EINVAL);
        ASSERT_EQ(pj_egress_mode_from_string("", &m), -EINVAL);
        ASSERT_EQ(pj_egress_mode_from_string(NULL, &m), -EINVAL);
        ASSERT_STREQ(pj_egress_mode_to_string(PJ_EGRESS_OPEN), "open");
        ASSERT_STREQ(pj_egress_mode_to_string(PJ_EGRESS_RESTRICTED), "restricted");
        ASSERT_STREQ(pj_egress_mode_to_string(PJ_EGRESS_DENY_ALL), "deny_all");
        ASSERT_STREQ(pj_egress_mode_to_string((enum pj_egress_mode) 42), "unknown");
}

TEST(add_allow_dedup_and_limit) {
        struct pj_egress e = { .mode = PJ_EGRESS_RESTRICTED };
        struct err why = { 0 };
        ASSERT_EQ(pj_egress_add_allow(&e, "API.example.com", &why), 1);
        ASSERT_EQ(pj_egress_add_allow(&e, "api.example.com.", &why), 0);
        ASSERT_EQ(pj_egress_add_allow(&e, "1.1.1.1", &why), 1);
        ASSERT_EQ(pj_egress_add_allow(&e, "1.1.1.1", &why), 0);
        ASSERT_EQ(pj_egress_add_allow(&e, "10.0.0.1/8", &why), -EINVAL);
        ASSERT_CONTAINS(why.message, "10.0.0.0/8");
        ASSERT_EQ(e.n_allow, 2);
        ASSERT_STREQ(e.allow[0], "api.example.com");
        ASSERT_STREQ(e.allow[1], "1.1.1.1");
        for (int i = 2; i < PJ_EGRESS_MAX_ALLOW; i++) {
                char s[32];
                snprintf(s, sizeof(s), "10.0.%d.1", i);
                ASSERT_EQ(pj_egress_add_allow(&e, s, &why), 1);
        }
        ASSERT_EQ(e.n_allow, PJ_EGRESS_MAX_ALLOW);
        ASSERT_EQ(pj_egress_add_allow(&e, "9.9.9.9", &why), -E2BIG);
        ASSERT_EQ(pj_egress_add_allow(&e, "1.1.1.1", &why), 0); /* merging still fine */

        struct pj_egress copy = {};
        pj_egress_copy(&copy, &e);
        ASSERT_EQ(copy.n_allow, e.n_allow);
        ASSERT_EQ(copy.mode, PJ_EGRESS_RESTRICTED);
        ASSERT_STREQ(copy.allow[49], e.allow[49]);
        ASSERT_TRUE(copy.allow[0] != e.allow[0]);
        pj_egress_done(&e);
        ASSERT_EQ(e.n_allow, 0);
        ASSERT_NULL(e.allow);
        ASSERT_EQ(e.mode, PJ_EGRESS_OPEN);
        pj_egress_done(&e); /* idempotent */
        pj_egress_done(&copy);
        pj_egress_done(NULL);
}

TEST(allow_entry_fuzz) {
        /* Random short strings over a biased alphabet: never crash, and every
         * accepted entry normalises to something that parses to itself. */
        static const char alphabet[] = "0123456789./:-abcxyz*_AZ \x01\xff";
        unsigned seed = test_seed(12345);
        for (int n = 0; n < 200000; n++) {
                char s[40];
                seed = seed * 1103515245u + 12345u;
                size_t len = (seed >> 16) % sizeof(s);
                for (size_t i = 0; i < len; i++) {
                        seed = seed * 1103515245u + 12345u;
                        s[i] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
                }
                s[len] = '\0';
                char norm[PJ_ALLOW_NORM_MAX], norm2[PJ_ALLOW_NORM_MAX];
                struct err why = { 0 };
                struct pj_allow_entry e;
                if (pj_allow_entry_parse(s, &e, norm, sizeof(norm), &why) == 0) {
                        ASSERT_EQ(pj_allow_entry_parse(norm, NULL, norm2, sizeof(norm2), &why), 0);
                        ASSERT_STREQ(norm, norm2);
                        ASSERT_TRUE(e.prefix >= 0 && e.prefix <= 32);
                } else
                        ASSERT_TRUE(why.message[0] != '\0');
        }
}

/* ---- egress rules ---- */
#include <string.h>
#include <cjson/cJSON.h>
#include "pj_api.h"
#include "pj_e2b.h"
#include "pj_json.h"
#include "strutil.h"

static int create_egress(const char *egress, struct pj_sandbox_create *c, struct err *err) {
        _cleanup_free_ char *b = xasprintf("{\"egress\":%s}", egress);
        return pj_sandbox_create_parse(b, strlen(b), c, err);
}

TEST(rules_parse_normalise_and_merge) {
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c = { 0 };
        struct err err = { 0 };
        ASSERT_EQ(create_egress("{\"mode\":\"open\",\"rules\":{\"API.Example.com.\":[{\"headers\":{\"X-Api-Key\":\"${secrets.k}\"}},"
                                "{\"headers\":{\"x-api-key\":\"Bearer ${secrets.k2}\",\"x-b\":\"1\"}}],\"b.example.com\":[]}}",
                                &c, &err),
                  0);
        ASSERT_EQ(c.egress.n_rules, 2);
        ASSERT_TRUE(c.egress.rules_open);
        ASSERT_STREQ(c.egress.rules[0].host, "api.example.com");
        ASSERT_EQ(c.egress.rules[0].n_headers, 2);
        ASSERT_STREQ(c.egress.rules[0].headers[0].name, "x-api-key");
        ASSERT_STREQ(c.egress.rules[0].headers[0].value, "Bearer ${secrets.k2}");   /* the later one wins */
        ASSERT_EQ(c.egress.rules[1].n_headers, 0);
}

TEST(e2b_rules_take_e2b_placeholders_and_render_them_back) {
        static const char body[] = "{\"templateID\":\"base\",\"network\":{\"rules\":{\"api.example.com\":[{\"transform\":{\"headers\":"
                                   "{\"authorization\":\"Bearer ${e2b.secrets.openai-key}\"}}}]}}}";
        _cleanup_(pj_e2b_create_done) struct pj_e2b_create c = { 0 };
        struct err err = { 0 };
        ASSERT_EQ(pj_e2b_create_parse(body, sizeof(body) - 1, &c, &err), 0);
        ASSERT_EQ(c.egress.n_rules, 1);
        ASSERT_FALSE(c.egress.rules_open);      /* E2B: rules do not allow their host */
        ASSERT_STREQ(c.egress.rules[0].headers[0].value, "Bearer ${secrets.openai-key}");
        _cleanup_(cJSON_Deletep) cJSON *ours = pj_egress_rules_json(&c.egress, false);
        _cleanup_(cJSON_Deletep) cJSON *theirs = pj_egress_rules_json(&c.egress, true);
        _cleanup_free_ char *a = cJSON_PrintUnformatted(ours), *b = cJSON_PrintUnformatted(theirs);
        ASSERT_STREQ(a, "{\"api.example.com\":[{\"headers\":{\"authorization\":\"Bearer ${secrets.openai-key}\"}}]}");
        ASSERT_STREQ(b, "{\"api.example.com\":[{\"transform\":{\"headers\":{\"authorization\":\"Bearer ${e2b.secrets.openai-key}\"}}}]}");
        /* what a node gets: values as they are, however they look */
        struct pj_egress n = { 0 };
        _cleanup_(cJSON_Deletep) cJSON *res = cJSON_Parse("{\"h.example.com\":[{\"headers\":{\"a\":\"${secrets.not-a-placeholder-here\"}}]}");
        ASSERT_EQ(pj_egress_rules_from_json(res, true, &n, &err), 0);
        ASSERT_STREQ(n.rules[0].headers[0].value, "${secrets.not-a-placeholder-here");
        pj_egress_done(&n);
}

TEST(rules_refusals_name_the_field) {
        static const struct {
                const char *egress, *field, *says;
        } refusals[] = {
                { "{\"mode\":\"deny_all\",\"rules\":{\"a.example.com\":[]}}", "egress.rules", "deny_all" },
                { "{\"mode\":\"open\",\"rules\":[]}", "egress.rules", "object of hostnames" },
                { "{\"mode\":\"open\",\"rules\":{\"1.2.3.4\":[]}}", "egress.rules.1.2.3.4", "per hostname" },
                { "{\"mode\":\"open\",\"rules\":{\"*.example.com\":[]}}", "egress.rules.*.example.com", "" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":{}}}", "egress.rules.a.example.com", "array of rules" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"transform\":{}}]}}", "egress.rules.a.example.com[0].transform",
                  "" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"bad name\":\"v\"}}]}}",
                  "egress.rules.a.example.com[0].headers.bad name", "header name" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"Host\":\"v\"}}]}}",
                  "egress.rules.a.example.com[0].headers.Host", "frames the request" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\":\"a\\nb\"}}]}}",
                  "egress.rules.a.example.com[0].headers.x", "control characters" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\":1}}]}}",
                  "egress.rules.a.example.com[0].headers.x", "must be a string" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\":\"${secrets.}\"}}]}}",
                  "egress.rules.a.example.com[0].headers.x", "placeholder" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\":\"${secrets.a b}\"}}]}}",
                  "egress.rules.a.example.com[0].headers.x", "no secret can be called" },
                { "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\":\"${secrets.abc\"}}]}}",
                  "egress.rules.a.example.com[0].headers.x", "placeholder" },
        };
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c = { 0 };
                struct err err = { 0 };
                int r = create_egress(refusals[i].egress, &c, &err);
                if (r != -EINVAL || strcmp(err.field, refusals[i].field) != 0 || !strstr(err.message, refusals[i].says))
                        test_fail(__FILE__, __LINE__, "%s: %d field '%s' message '%s'", refusals[i].egress, r, err.field, err.message);
        }
        /* a NUL in a header name is no token character (the name would be cut on the wire) */
        {
                _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create cn = { 0 };
                struct err en = { 0 };
                ASSERT_EQ(create_egress("{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\\u0000y\":\"v\"}}]}}",
                                        &cn, &en),
                          -EINVAL);
                ASSERT_NOT_NULL(strstr(en.message, "a header name is made of"));
        }
        /* limits: hosts, headers per host, a value's size, placeholders in one value */
        struct strbuf b = STRBUF_INIT(0);
        strbuf_printf(&b, "{\"mode\":\"open\",\"rules\":{");
        for (int i = 0; i <= PJ_EGRESS_MAX_RULES; i++)
                strbuf_printf(&b, "%s\"h%d.example.com\":[]", i ? "," : "", i);
        strbuf_printf(&b, "}}");
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c1 = { 0 };
        struct err err = { 0 };
        ASSERT_EQ(create_egress(b.buf, &c1, &err), -EINVAL);
        ASSERT_NOT_NULL(strstr(err.message, "at most 16 hosts"));
        strbuf_done(&b);
        b = STRBUF_INIT(0);
        strbuf_printf(&b, "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{");
        for (int i = 0; i <= PJ_EGRESS_MAX_HEADERS; i++)
                strbuf_printf(&b, "%s\"x%d\":\"v\"", i ? "," : "", i);
        strbuf_printf(&b, "}}]}}");
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c2 = { 0 };
        ASSERT_EQ(create_egress(b.buf, &c2, &err), -EINVAL);
        ASSERT_NOT_NULL(strstr(err.message, "at most 16 headers"));
        strbuf_done(&b);
        b = STRBUF_INIT(0);
        strbuf_printf(&b, "{\"mode\":\"open\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\":\"");
        for (int i = 0; i <= PJ_EGRESS_MAX_PLACEHOLDERS; i++)
                strbuf_printf(&b, "${secrets.s%d}", i);
        strbuf_printf(&b, "\"}}]}}");
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create c3 = { 0 };
        ASSERT_EQ(create_egress(b.buf, &c3, &err), -EINVAL);
        ASSERT_NOT_NULL(strstr(err.message, "placeholders"));
        strbuf_done(&b);
        /* restricted with rules and no allow entries: the rules' hosts are what it allows */
        _cleanup_(pj_egress_update_done) struct pj_egress_update u = { 0 };
        static const char put[] = "{\"mode\":\"restricted\",\"rules\":{\"a.example.com\":[{\"headers\":{\"x\":\"v\"}}]}}";
        ASSERT_EQ(pj_egress_update_parse(put, sizeof(put) - 1, &u, &err), 0);
        ASSERT_EQ(u.egress.n_rules, 1);
}
