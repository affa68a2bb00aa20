/* Unit tests for the sandbox's /etc/hosts as an egress apply writes it (controld/egress.c):
 * the largest list a policy can resolve to is written whole, never cut, and a list beyond the
 * bounds is refused with the reason. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "controld.h"
#include "pj_egress.h"
#include "pj_node.h"
#include "strutil.h"
#include "testlib.h"
#include "ctl-egress.h"

/* A valid hostname of exactly 253 characters, distinct per i. */
static void long_name(char *buf, size_t i) {
        char label[64];
        memset(label, 'a', 63);
        label[63] = 0;
        snprintf(buf, 254, "n%02zu%.60s.%s.%s.%.61s", i, label, label, label, label);
}

static size_t count_lines_with(const char *text, const char *needle) {
        size_t n = 0;
        for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

TEST(the_largest_allowlist_is_written_whole) {
        static struct pj_node_resolved res[PJ_EGRESS_MAX_ALLOW];
        for (size_t i = 0; i < PJ_EGRESS_MAX_ALLOW; i++) {
                long_name(res[i].name, i);
                ASSERT_EQ(strlen(res[i].name), 253);
                res[i].n_addrs = PJ_NODE_MAX_ADDRS_PER_NAME;
                for (size_t k = 0; k < res[i].n_addrs; k++)
                        res[i].addrs[k] = (203u << 24) | (0u << 16) | (113u << 8) | (uint32_t) (100 + k);  /* 203.0.113.x */
        }
        struct strbuf b;
        struct err err = { 0 };
        ASSERT_EQ(ctl_egress_hosts_render(res, PJ_EGRESS_MAX_ALLOW, &b, &err), 0);
        ASSERT_FALSE(b.truncated);
        /* Over 64 KiB (the old cap that cut it), within the documented bound. */
        ASSERT_TRUE(b.len > 64 * 1024);
        ASSERT_TRUE(b.len <= ctl_egress_hosts_max());
        /* Every name with every address, the last line included and complete. */
        for (size_t i = 0; i < PJ_EGRESS_MAX_ALLOW; i++) {
                char line[300];
                snprintf(line, sizeof(line), "\t%s\n", res[i].name);
                ASSERT_EQ(count_lines_with(b.buf, line), PJ_NODE_MAX_ADDRS_PER_NAME);
        }
        char last[300];
        snprintf(last, sizeof(last), "203.0.113.%d\t%s\n", 100 + PJ_NODE_MAX_ADDRS_PER_NAME - 1, res[PJ_EGRESS_MAX_ALLOW - 1].name);
        ASSERT_TRUE(b.len >= strlen(last) && !strcmp(b.buf + b.len - strlen(last), last));
        ASSERT_TRUE(strncmp(b.buf, "# written by Paddock", 20) == 0);
        ASSERT_CONTAINS(b.buf, "127.0.0.1\tlocalhost\n");
        strbuf_done(&b);
}

TEST(names_that_are_not_hostnames_are_left_out) {
        struct pj_node_resolved res[3] = { { .name = "ok.example", .n_addrs = 1, .addrs = { 0xC6336402 } },
                                           { .name = "bad name\n1.2.3.4 evil", .n_addrs = 1, .addrs = { 0xC6336403 } },
                                           { .name = "198.51.100.4", .n_addrs = 1, .addrs = { 0xC6336404 } } };
        struct strbuf b;
        struct err err = { 0 };
        ASSERT_EQ(ctl_egress_hosts_render(res, 3, &b, &err), 0);
        ASSERT_CONTAINS(b.buf, "198.51.100.2\tok.example\n");
        ASSERT_NULL(strstr(b.buf, "evil"));
        ASSERT_NULL(strstr(b.buf, "198.51.100.4"));
        strbuf_done(&b);
}

TEST(more_names_than_a_policy_holds_are_refused_with_the_reason) {
        static struct pj_node_resolved res[PJ_EGRESS_MAX_ALLOW + 1];
        for (size_t i = 0; i < PJ_EGRESS_MAX_ALLOW + 1; i++) {
                snprintf(res[i].name, sizeof(res[i].name), "h%zu.example", i);
                res[i].n_addrs = 1;
                res[i].addrs[0] = 0xC6336402;
        }
        struct strbuf b;
        struct err err = { 0 };
        ASSERT_EQ(ctl_egress_hosts_render(res, PJ_EGRESS_MAX_ALLOW + 1, &b, &err), -E2BIG);
        ASSERT_CONTAINS(err.message, "51 resolved names, more than the 50");
        strbuf_done(&b);
}
