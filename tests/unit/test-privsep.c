/* Unit tests for nodeagent/privsep.c: the egress and docker children's message checks
 * (driven with raw buffers, no kernel firewall needed), the socketpair protocol with a
 * real forked child, and capability dropping. */
#include <errno.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "nodeagent.h"
#include "privdrop.h"
#include "testlib.h"

#define SB "0123456789abcdef01234567"

/* The whole of a /proc/.../status file (it is far below 4 KiB), NUL-terminated. */
static void read_status(const char *path, char status[static 4096]) {
        FILE *f = fopen(path, "r");
        ASSERT_NOT_NULL(f);
        size_t n = fread(status, 1, 4095, f);
        fclose(f);
        status[n] = 0;
}

static struct ps_egress_apply *valid_apply(void) {
        struct ps_egress_apply *m = xnew0(struct ps_egress_apply, 1);
        m->hdr = (struct ps_hdr) { .version = PS_VERSION, .type = PS_EGRESS_APPLY, .len = sizeof(*m), .seq = 7 };
        memcpy(m->sandbox_id, SB, sizeof(SB));
        m->mode = PJ_EGRESS_RESTRICTED;
        m->ip = 0xa9fe5a07;
        m->n_allow = 2;
        m->allow[0] = (struct ps_allow) { .addr = 0x0a000000, .prefix = 8 };
        m->allow[1] = (struct ps_allow) { .addr = 0xa9fe4d0a, .prefix = 32 };
        return m;
}

/* A message that passes every check reaches egress.c, which (never initialised in this
 * process) answers -ENOTCONN: that tells "acted on" apart from "refused". */
static int handle(enum ps_child kind, const void *buf, size_t len, struct ps_result *res) {
        privsep_child_handle(kind, buf, len, res);
        ASSERT_EQ(res->hdr.version, PS_VERSION);
        ASSERT_EQ(res->hdr.type, PS_RESULT);
        ASSERT_EQ(res->hdr.len, sizeof(*res));
        ASSERT_NOT_NULL(memchr(res->msg, 0, sizeof(res->msg)));
        return res->r;
}

#define EXPECT_REFUSED(kind, buf, len, why)                                       \
        do {                                                                      \
                struct ps_result _res;                                            \
                ASSERT_EQ(handle((kind), (buf), (len), &_res), -EBADMSG);         \
                ASSERT_CONTAINS(_res.msg, (why));                                 \
        } while (0)

TEST(well_formed_apply_reaches_egress) {
        _cleanup_free_ struct ps_egress_apply *m = valid_apply();
        struct ps_result res;
        ASSERT_EQ(handle(PS_CHILD_EGRESS, m, sizeof(*m), &res), -ENOTCONN);
        ASSERT_EQ(res.hdr.seq, 7);
        ASSERT_CONTAINS(res.msg, "not initialised");
        struct ps_egress_remove rm = { .hdr = { .version = PS_VERSION, .type = PS_EGRESS_REMOVE, .len = sizeof(rm) } };
        memcpy(rm.sandbox_id, SB, sizeof(SB));
        ASSERT_EQ(handle(PS_CHILD_EGRESS, &rm, sizeof(rm), &res), -ENOTCONN);
        struct ps_ping ping = { .hdr = { .version = PS_VERSION, .type = PS_PING, .len = sizeof(ping), .seq = 3 } };
        ASSERT_EQ(handle(PS_CHILD_DOCKER, &ping, sizeof(ping), &res), 0);
        ASSERT_EQ(res.hdr.seq, 3);
        ASSERT_CONTAINS(res.msg, "docker process, protocol 3");
}

TEST(sizes_and_headers_are_checked_first) {
        _cleanup_free_ struct ps_egress_apply *m = valid_apply();
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, 0, "shorter than its header");
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(struct ps_hdr) - 1, "shorter than its header");
        /* Truncated: header and length disagree. */
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m) - 1, "header says");
        /* Header and length agree, but not with the type's fixed size. */
        m->hdr.len = sizeof(*m) - 8;
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m) - 8, "takes");
        m->hdr.len = sizeof(*m);
        m->hdr.version = PS_VERSION + 1;
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m), "version");
        m->hdr.version = PS_VERSION;
        m->hdr.reserved = 1;
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m), "reserved");
        m->hdr.reserved = 0;
        m->hdr.type = PS_RESULT;
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m), "not a request");
        m->hdr.type = 999;
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m), "not a request");
        /* The docker process takes pings only. */
        m->hdr.type = PS_EGRESS_APPLY;
        EXPECT_REFUSED(PS_CHILD_DOCKER, m, sizeof(*m), "does not take");
}

/* Each case spoils one field of a valid message; each must be refused by name. */
#define SPOIL(stmt, why)                                                          \
        do {                                                                      \
                _cleanup_free_ struct ps_egress_apply *m = valid_apply();         \
                stmt;                                                             \
                EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m), why);              \
        } while (0)

TEST(every_apply_field_is_checked) {
        SPOIL(m->sandbox_id[3] = 'X', "sandbox_id");
        SPOIL(m->sandbox_id[24] = 'a', "sandbox_id");              /* not terminated */
        SPOIL(m->sandbox_id[10] = 0, "sandbox_id");                /* short */
        SPOIL(memset(m->sandbox_id, 0, sizeof(m->sandbox_id)), "sandbox_id");
        SPOIL(m->ip = 0, "ip");
        SPOIL(m->ip = 0xffffffff, "ip");
        SPOIL(m->mode = 3, "mode");
        SPOIL(m->mode = 255, "mode");
        SPOIL(m->pad[1] = 1, "padding");
        SPOIL(m->n_allow = EGRESS_MAX_ALLOW + 1, "n_allow");
        SPOIL(m->n_allow = 0xffffffff, "n_allow");
        SPOIL(m->allow[1].prefix = 33, "allow[1]");
        SPOIL(m->allow[0].pad[2] = 9, "allow[0]");
        SPOIL(m->allow[2].addr = 1, "past n_allow");               /* smuggled past the count */
        SPOIL(m->allow[EGRESS_MAX_ALLOW - 1].prefix = 1, "past n_allow");
        SPOIL(m->mode = PJ_EGRESS_OPEN, "only for restricted");    /* entries with another mode */
        SPOIL(m->pid = 0x80000000u, "pid");
        /* The full table is fine. */
        _cleanup_free_ struct ps_egress_apply *m = valid_apply();
        m->n_allow = EGRESS_MAX_ALLOW;
        for (size_t i = 0; i < EGRESS_MAX_ALLOW; i++)
                m->allow[i] = (struct ps_allow) { .addr = 0x0a000000 + (uint32_t) i, .prefix = 32 };
        struct ps_result res;
        ASSERT_EQ(handle(PS_CHILD_EGRESS, m, sizeof(*m), &res), -ENOTCONN);
}

TEST(remove_fields_are_checked) {
        struct ps_egress_remove rm = { .hdr = { .version = PS_VERSION, .type = PS_EGRESS_REMOVE, .len = sizeof(rm) } };
        memcpy(rm.sandbox_id, SB, sizeof(SB));
        rm.sandbox_id[0] = 'g';
        EXPECT_REFUSED(PS_CHILD_EGRESS, &rm, sizeof(rm), "sandbox_id");
        rm.sandbox_id[0] = '0';
        rm.pad[0] = 1;
        EXPECT_REFUSED(PS_CHILD_EGRESS, &rm, sizeof(rm), "padding");
}

TEST(random_bytes_are_never_acted_on) {
        _cleanup_free_ uint8_t *buf = xmalloc(sizeof(struct ps_egress_apply));
        unsigned seed = test_seed(12345);
        for (int i = 0; i < 5000; i++) {
                size_t len = (size_t) rand_r(&seed) % (sizeof(struct ps_egress_apply) + 1);
                for (size_t k = 0; k < len; k++)
                        buf[k] = (uint8_t) rand_r(&seed);
                struct ps_result res;
                ASSERT_EQ(handle(PS_CHILD_EGRESS, buf, len, &res), -EBADMSG);
        }
}

/* The real protocol over a socketpair with a forked docker child: ping, a raw malformed
 * request refused (and the child keeps serving), then a dead child is noticed. */
TEST(docker_child_over_the_socketpair) {
        struct agent_config cfg = { .node_id = "unit" };
        struct err err = { 0 };
        ASSERT_OK(privsep_spawn(PS_CHILD_DOCKER, &cfg, &err));
        pid_t pid = privsep_child_pid(PS_CHILD_DOCKER);
        ASSERT_TRUE(pid > 0);
        char path[64], status[4096] = "";
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        read_status(path, status);
        ASSERT_CONTAINS(status, "CapEff:\t0000000000000000");
        ASSERT_CONTAINS(status, "NoNewPrivs:\t1");

        struct ps_ping ping = { .hdr.type = PS_PING };
        struct ps_result res;
        ASSERT_EQ(privsep_call(PS_CHILD_DOCKER, &ping, sizeof(ping), &res), 0);
        ASSERT_CONTAINS(res.msg, "docker process");
        static const char junk[] = "{\"type\":\"egress.apply\"}";
        ASSERT_EQ(privsep_send_raw(PS_CHILD_DOCKER, junk, sizeof(junk), &res), -EBADMSG);
        /* Longer than the largest request: refused by its real length, not read in part. */
        _cleanup_free_ uint8_t *big = xnew0(uint8_t, sizeof(struct ps_egress_apply) + 64);
        ((struct ps_hdr *) big)->seq = 99;      /* echoed, so the answer is matched to it */
        ASSERT_EQ(privsep_send_raw(PS_CHILD_DOCKER, big, sizeof(struct ps_egress_apply) + 64, &res), -EBADMSG);
        ASSERT_CONTAINS(res.msg, "larger than any request");
        if (!privsep_healthy(&err))
                test_fail(__FILE__, __LINE__, "unhealthy: %s", err.message);
        ASSERT_EQ(privsep_call(PS_CHILD_DOCKER, &ping, sizeof(ping), &res), 0);
        /* Egress was never started here. */
        ASSERT_EQ(privsep_call(PS_CHILD_EGRESS, &ping, sizeof(ping), &res), -ENOTCONN);

        ASSERT_EQ(kill(pid, SIGKILL), 0);
        for (int i = 0; i < 200 && privsep_healthy(&err); i++)
                usleep(10000);
        ASSERT_FALSE(privsep_healthy(&err));
        ASSERT_CONTAINS(err.message, "docker process was killed by signal 9");
        ASSERT_EQ(privsep_call(PS_CHILD_DOCKER, &ping, sizeof(ping), &res), -EPIPE);
        privsep_stop();
}

TEST(caps_drop_keeps_only_what_is_asked) {
        if (geteuid() != 0)
                TEST_SKIP("needs root's capabilities to see them dropped");
        ASSERT_OK(caps_drop_except(UINT64_C(1) << CAP_NET_ADMIN));
        char status[4096] = "";
        read_status("/proc/self/status", status);
        ASSERT_CONTAINS(status, "CapEff:\t0000000000001000");
        ASSERT_CONTAINS(status, "CapPrm:\t0000000000001000");
        ASSERT_CONTAINS(status, "CapInh:\t0000000000000000");
        ASSERT_CONTAINS(status, "NoNewPrivs:\t1");
        ASSERT_OK(caps_drop_except(0));
        read_status("/proc/self/status", status);
        ASSERT_CONTAINS(status, "CapEff:\t0000000000000000");
        ASSERT_CONTAINS(status, "CapPrm:\t0000000000000000");
        /* Gone for good: nothing raises it again. */
        ASSERT_OK(caps_drop_except(~UINT64_C(0)));
        read_status("/proc/self/status", status);
        ASSERT_CONTAINS(status, "CapEff:\t0000000000000000");
}

/* Docker steps: a well-formed one reaches the step (no Docker connection in this process:
 * -ENOTCONN); each spoiled field is refused by name; the egress process takes none. */
TEST(docker_steps_are_checked) {
        struct ps_docker m = { .hdr = { .version = PS_VERSION, .type = PS_DOCKER_COMMIT, .len = sizeof(m), .seq = 9 } };
        struct ps_result res;
        memcpy(m.snapshot_id, SB, sizeof(SB));
        memcpy(m.container, "paddock-" SB, sizeof("paddock-" SB));
        ASSERT_EQ(handle(PS_CHILD_DOCKER, &m, sizeof(m), &res), -ENOTCONN);
        ASSERT_EQ(res.hdr.seq, 9);
        EXPECT_REFUSED(PS_CHILD_EGRESS, &m, sizeof(m), "does not take");

        struct ps_docker bad = m;
        bad.snapshot_id[3] = 'X';
        EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad), "snapshot_id");
        bad = m;
        memcpy(bad.container, "../../etc", sizeof("../../etc"));
        EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad), "container");
        bad = m;
        bad.container[sizeof("paddock-" SB)] = 'x';   /* bytes after the NUL */
        EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad), "container");
        /* A Nomad task container, <task>-<alloc id>, as Nomad's docker driver names it. */
        bad = m;
        memset(bad.container, 0, sizeof(bad.container));
        strcpy(bad.container, "sandbox-0b6e3f7c-1d2a-4e5f-8a9b-0c1d2e3f4a5b");
        ASSERT_EQ(handle(PS_CHILD_DOCKER, &bad, sizeof(bad), &res), -ENOTCONN);
        const char *not_names[] = { "0b6e3f7c-1d2a-4e5f-8a9b-0c1d2e3f4a5b",         /* no task part */
                                    "-0b6e3f7c-1d2a-4e5f-8a9b-0c1d2e3f4a5b",        /* empty task */
                                    "sandbox-0B6E3F7C-1d2a-4e5f-8a9b-0c1d2e3f4a5b", /* not Nomad's lowercase */
                                    "sandbox-0b6e3f7c-1d2a-4e5f-8a9b0c1d2e3f4a5b",  /* not a UUID */
                                    "sand/box-0b6e3f7c-1d2a-4e5f-8a9b-0c1d2e3f4a5b",
                                    "sandbox 0b6e3f7c-1d2a-4e5f-8a9b-0c1d2e3f4a5b",
                                    ".x-0b6e3f7c-1d2a-4e5f-8a9b-0c1d2e3f4a5b", NULL };
        for (const char **p = not_names; *p; p++) {
                memset(bad.container, 0, sizeof(bad.container));
                strcpy(bad.container, *p);
                EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad), "container");
        }
        bad = m;
        bad.pad[5] = 1;
        EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad), "padding");
        /* Only a commit names a container; a prune names nothing. */
        bad = m;
        bad.hdr.type = PS_DOCKER_PUSH;
        EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad), "container");
        memset(bad.container, 0, sizeof(bad.container));
        ASSERT_EQ(handle(PS_CHILD_DOCKER, &bad, sizeof(bad), &res), -ENOTCONN);
        bad.hdr.type = PS_DOCKER_PRUNE;
        EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad), "snapshot_id");
        memset(bad.snapshot_id, 0, sizeof(bad.snapshot_id));
        ASSERT_EQ(handle(PS_CHILD_DOCKER, &bad, sizeof(bad), &res), -ENOTCONN);
        /* Wrong size for the type. */
        bad.hdr.len = sizeof(bad) - 4;
        EXPECT_REFUSED(PS_CHILD_DOCKER, &bad, sizeof(bad) - 4, "takes");
}

/* The lookup process answers which host process a container runs as, and nothing else; no
 * other process takes that question. */
TEST(container_pid_lookups_are_checked) {
        struct ps_docker m = { .hdr = { .version = PS_VERSION, .type = PS_DOCKER_PID, .len = sizeof(m), .seq = 4 } };
        struct ps_result res;
        memcpy(m.container, "paddock-" SB, sizeof("paddock-" SB));
        ASSERT_EQ(handle(PS_CHILD_LOOKUP, &m, sizeof(m), &res), -ENOTCONN);
        EXPECT_REFUSED(PS_CHILD_DOCKER, &m, sizeof(m), "does not take");
        EXPECT_REFUSED(PS_CHILD_EGRESS, &m, sizeof(m), "does not take");
        EXPECT_REFUSED(PS_CHILD_RELAY, &m, sizeof(m), "does not take");
        struct ps_docker bad = m;
        memcpy(bad.snapshot_id, SB, sizeof(SB));        /* names nothing but the container */
        EXPECT_REFUSED(PS_CHILD_LOOKUP, &bad, sizeof(bad), "snapshot_id");
        bad = m;
        memset(bad.container, 0, sizeof(bad.container));
        EXPECT_REFUSED(PS_CHILD_LOOKUP, &bad, sizeof(bad), "container");
        strcpy(bad.container, "../x");
        EXPECT_REFUSED(PS_CHILD_LOOKUP, &bad, sizeof(bad), "container");
        /* and a snapshot step is not the lookup process's */
        bad = m;
        bad.hdr.type = PS_DOCKER_COMMIT;
        memcpy(bad.snapshot_id, SB, sizeof(SB));
        EXPECT_REFUSED(PS_CHILD_LOOKUP, &bad, sizeof(bad), "does not take");
}

/* The proxy child takes its three messages and nothing else; each is checked first. With no
 * proxy running in this process a well-formed one answers -ENOTCONN. */
TEST(proxy_messages_are_checked_before_the_proxy_sees_them) {
        _cleanup_free_ struct ps_proxy_set *m = xnew0(struct ps_proxy_set, 1);
        static const char rules[] = "{\"api.example.com\":[{\"headers\":{\"x-api-key\":\"v\"}}]}";
        m->hdr = (struct ps_hdr) { .version = PS_VERSION, .type = PS_PROXY_SET, .len = sizeof(*m), .seq = 5 };
        memcpy(m->sandbox_id, SB, sizeof(SB));
        m->ip = 0xa9fe5a07;
        m->len = sizeof(rules) - 1;
        memcpy(m->rules, rules, m->len);
        struct ps_result res;
        ASSERT_EQ(handle(PS_CHILD_PROXY, m, sizeof(*m), &res), -ENOTCONN);
        /* not to the other children, and theirs not to it */
        EXPECT_REFUSED(PS_CHILD_EGRESS, m, sizeof(*m), "does not take");
        EXPECT_REFUSED(PS_CHILD_DOCKER, m, sizeof(*m), "does not take");
        _cleanup_free_ struct ps_egress_apply *a = valid_apply();
        EXPECT_REFUSED(PS_CHILD_PROXY, a, sizeof(*a), "does not take");
        /* a length that is not the text's, bytes after it, no address, a bad id */
        m->len = 3;
        EXPECT_REFUSED(PS_CHILD_PROXY, m, sizeof(*m), "followed by zeros");
        m->len = sizeof(rules) - 1;
        m->rules[PS_PROXY_RULES_MAX - 1] = 'x';
        EXPECT_REFUSED(PS_CHILD_PROXY, m, sizeof(*m), "followed by zeros");
        m->rules[PS_PROXY_RULES_MAX - 1] = 0;
        m->len = PS_PROXY_RULES_MAX;
        EXPECT_REFUSED(PS_CHILD_PROXY, m, sizeof(*m), "followed by zeros");
        m->len = sizeof(rules) - 1;
        m->ip = 0;
        EXPECT_REFUSED(PS_CHILD_PROXY, m, sizeof(*m), "usable IPv4");
        m->ip = 0xa9fe5a07;
        m->sandbox_id[3] = 'X';
        EXPECT_REFUSED(PS_CHILD_PROXY, m, sizeof(*m), "24 lowercase hex");
        /* drop and stats: an id and zero padding */
        struct ps_proxy_id d = { .hdr = { .version = PS_VERSION, .type = PS_PROXY_DROP, .len = sizeof(d) } };
        memcpy(d.sandbox_id, SB, sizeof(SB));
        ASSERT_EQ(handle(PS_CHILD_PROXY, &d, sizeof(d), &res), -ENOTCONN);
        d.pad[2] = 1;
        EXPECT_REFUSED(PS_CHILD_PROXY, &d, sizeof(d), "padding");
        /* an apply's steering: bounded, only where something may leave, zero past its count */
        a->n_steer = EGRESS_MAX_STEER + 1;
        EXPECT_REFUSED(PS_CHILD_EGRESS, a, sizeof(*a), "n_steer");
        a->n_steer = 1;
        a->steer[0] = 0xcb007102;
        ASSERT_EQ(handle(PS_CHILD_EGRESS, a, sizeof(*a), &res), -ENOTCONN);
        a->steer[1] = 0xcb007103;
        EXPECT_REFUSED(PS_CHILD_EGRESS, a, sizeof(*a), "past n_steer");
        a->steer[1] = 0;
        a->mode = PJ_EGRESS_DENY_ALL;
        a->n_allow = 0;
        memset(a->allow, 0, sizeof(a->allow));
        EXPECT_REFUSED(PS_CHILD_EGRESS, a, sizeof(*a), "deny_all");
}
