/* nodeagent resolves allowlist names off its consuming path: a slow name (a DNS server of the
 * test's own that answers only when released) holds up no other sandbox and keeps its order. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mount.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "agenttest.h"
#include "amqptest.h"
#include "cleanup.h"
#include "metrics.h"
#include "nodeagenttest.h"
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"
#include "testlib.h"

/* ------------------------------------------------------------------ names off the consuming path */

/* A DNS server of the test's own on a loopback address, answering every A question with
 * DNS_ANSWER, but only once the test releases it: until then a lookup through it is
 * "slow" for exactly as long as the test wants, with no clock involved. */
#define DNS_ADDR "127.83.0.53"
#define DNS_ANSWER "198.51.100.77"
static struct {
        int fd;
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int queries;            /* A questions received since the last dns_hold */
        bool release, stop;
} dns = { .fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

struct dns_query {
        uint8_t q[512];
        size_t qend;            /* end of the question */
        uint16_t qtype;
        struct sockaddr_in from;
        socklen_t fl;
};

static void dns_answer(const struct dns_query *x) {
        uint8_t a[600];
        memcpy(a, x->q, x->qend);
        a[2] = 0x81;                                    /* response, recursion desired */
        a[3] = 0x80;                                    /* recursion available, no error */
        a[4] = 0, a[5] = 1;                             /* one question */
        a[6] = 0, a[7] = x->qtype == 1 ? 1 : 0;         /* an A answer for an A question */
        memset(a + 8, 0, 4);                            /* nothing else (no EDNS) */
        size_t len = x->qend;
        if (x->qtype == 1) {
                static const uint8_t rr[] = { 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4 };
                memcpy(a + len, rr, sizeof(rr));
                len += sizeof(rr);
                struct in_addr ad;
                inet_pton(AF_INET, DNS_ANSWER, &ad);
                memcpy(a + len, &ad, 4);
                len += 4;
        }
        (void) sendto(dns.fd, a, len, 0, (const struct sockaddr *) &x->from, x->fl);
}

static void *dns_main(void *ud) {
        (void) ud;
        static struct dns_query held[256];
        size_t n_held = 0;
        for (;;) {
                pthread_mutex_lock(&dns.mu);
                bool stop = dns.stop, release = dns.release;
                pthread_mutex_unlock(&dns.mu);
                if (stop)
                        return NULL;
                for (; release && n_held; n_held--)
                        dns_answer(&held[n_held - 1]);
                struct pollfd p = { .fd = dns.fd, .events = POLLIN };
                if (poll(&p, 1, 20) != 1)
                        continue;
                struct dns_query x = { .fl = sizeof(x.from) };
                ssize_t n = recvfrom(dns.fd, x.q, sizeof(x.q), 0, (struct sockaddr *) &x.from, &x.fl);
                if (n < 17)
                        continue;
                size_t off = 12;        /* the question: labels, then type and class */
                while (off < (size_t) n && x.q[off] != 0)
                        off += x.q[off] + 1u;
                if (off + 5 > (size_t) n)
                        continue;
                x.qend = off + 5;
                x.qtype = (uint16_t) (x.q[off + 1] << 8 | x.q[off + 2]);
                pthread_mutex_lock(&dns.mu);
                dns.queries += x.qtype == 1;
                release = dns.release;
                pthread_cond_broadcast(&dns.cv);
                pthread_mutex_unlock(&dns.mu);
                if (release || n_held == ELEMENTSOF(held))
                        dns_answer(&x);
                else
                        held[n_held++] = x;
        }
}

/* From now on answers are withheld again, and questions counted from 0. */
static void dns_hold(void) {
        pthread_mutex_lock(&dns.mu);
        dns.release = false;
        dns.queries = 0;
        pthread_mutex_unlock(&dns.mu);
}

static void dns_release(void) {
        pthread_mutex_lock(&dns.mu);
        dns.release = true;
        pthread_cond_broadcast(&dns.cv);
        pthread_mutex_unlock(&dns.mu);
}

static void dns_stop(void *ud) {
        (void) ud;
        pthread_mutex_lock(&dns.mu);
        dns.stop = true;
        pthread_cond_broadcast(&dns.cv);
        pthread_mutex_unlock(&dns.mu);
        pthread_join(dns.thread, NULL);
        close(dns.fd);
}

/* Starts the server (in the calling thread's network namespace) and points this
 * process's resolver at it (its own mount namespace, made by netns_with_hosts). */
static void dns_start(void) {
        dns.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(dns.fd >= 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53) };
        inet_pton(AF_INET, DNS_ADDR, &sa.sin_addr);
        if (bind(dns.fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                TEST_SKIP("cannot bind " DNS_ADDR ":53 for the test's resolver (port 53 taken?)");
        char rc[512];
        snprintf(rc, sizeof(rc), "%s/resolv.conf", test_tmpdir());
        FILE *f = fopen(rc, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "nameserver " DNS_ADDR "\noptions timeout:30 attempts:1\n");
        fclose(f);
        ASSERT_EQ(mount(rc, "/etc/resolv.conf", NULL, MS_BIND, NULL), 0);
        ASSERT_EQ(pthread_create(&dns.thread, NULL, dns_main, NULL), 0);
        test_on_exit(dns_stop, NULL);
}

/* Waits (up to 15 s) until the server has received want A questions. */
static void dns_wait_queries(int want) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 15;
        pthread_mutex_lock(&dns.mu);
        while (dns.queries < want)
                if (pthread_cond_timedwait(&dns.cv, &dns.mu, &ts) == ETIMEDOUT)
                        break;
        int q = dns.queries;
        pthread_mutex_unlock(&dns.mu);
        ASSERT_TRUE(q >= want);
}

/* Publishes the message printf(fmt, ...) to key with a reply queue and correlation id. */
_printf_(6, 7) static void send_to_agent(amqp_connection_state_t conn, const char *exchange, const char *key,
                                         amqp_bytes_t reply_q, const char *corr, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        _cleanup_free_ char *body = NULL;
        if (vasprintf(&body, fmt, ap) < 0)
                oom();
        va_end(ap);
        amqp_basic_properties_t p = { 0 };
        p._flags = AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.reply_to = reply_q;
        p.correlation_id = amqp_cstring_bytes(corr);
        p.content_type = amqp_cstring_bytes("application/json");
        ASSERT_EQ(amqp_basic_publish(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes(key), 0, 0, &p,
                                     amqp_cstring_bytes(body)),
                  AMQP_STATUS_OK);
}

/* The next reply in the order it arrived (late answers to readiness probes skipped):
 * 0 with its correlation id and body, or -ETIMEDOUT after timeout_s. */
static int next_reply(amqp_connection_state_t conn, int timeout_s, char corr[static 64], char **ret_body) {
        for (;;) {
                amqp_envelope_t env;
                struct timeval tv = { .tv_sec = timeout_s };
                amqp_maybe_release_buffers(conn);
                amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
                if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
                        return -ETIMEDOUT;
                ASSERT_EQ(r.reply_type, AMQP_RESPONSE_NORMAL);
                amqp_bytes_t c = env.message.properties.correlation_id;
                snprintf(corr, 64, "%.*s", (int) (c.len < 63 ? c.len : 63), (const char *) c.bytes);
                bool probe = !strncmp(corr, "ready-", 6);
                if (!probe)
                        *ret_body = xstrndup(env.message.body.bytes, env.message.body.len);
                amqp_destroy_envelope(&env);
                if (!probe)
                        return 0;
        }
}

static double metric_value(const char *text, const char *line_prefix) {
        const char *p = strstr(text, line_prefix);
        ASSERT_NOT_NULL(p);
        return strtod(p + strlen(line_prefix), NULL);
}

/* The broker, the namespaces with hosts visible (their fds in *home and *ns), home entered (the
 * agent's threads talk to RabbitMQ, and so to the resolver, from there: loopback), and the
 * test's resolver started. */
static void names_world(const char *hosts, int *home, int *ns) {
        amqptest_need_broker();
        egress_setup_visible(hosts, home, ns);
        ASSERT_EQ(setns(*home, CLONE_NEWNET), 0);
        dns_start();
}

/* Connects to the broker on exchange (*ret_c) consuming a queue of its own (*ret_rq), starts
 * the agent on a thread and waits until it answers a ping; its thread. */
static pthread_t agent_up(const char *exchange, const char *nid, amqp_connection_state_t *ret_c, amqp_bytes_t *ret_rq) {
        amqp_connection_state_t c = *ret_c = amqptest_connect(exchange);
        amqp_bytes_t rq = *ret_rq = amqptest_queue(c);
        amqp_basic_consume(c, 1, rq, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
        pthread_t th;
        ASSERT_EQ(pthread_create(&th, NULL, agent_thread, NULL), 0);
        bool ready = false;
        for (int i = 0; i < 100 && !ready; i++) {
                send_to_agent(c, exchange, nid, rq, "ready-probe", "{\"type\":\"ping\"}");
                amqp_envelope_t env;
                struct timeval tv = { .tv_usec = 200000 };
                amqp_maybe_release_buffers(c);
                ready = amqp_consume_message(c, &env, &tv, 0).reply_type == AMQP_RESPONSE_NORMAL;
                if (ready)
                        amqp_destroy_envelope(&env);
        }
        ASSERT_TRUE(ready);
        return th;
}

/* Stops the agent of th (SIGTERM ends its thread), drops exchange and the connection, and
 * closes the namespaces' fds. */
static void agent_down(pthread_t th, amqp_connection_state_t c, amqp_bytes_t rq, const char *exchange, int ns, int home) {
        kill(getpid(), SIGTERM);
        pthread_join(th, NULL);
        amqp_exchange_delete(c, 1, amqp_cstring_bytes(exchange), 0);
        amqp_bytes_free(rq);
        amqp_connection_close(c, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(c);
        close(ns);
        close(home);
}

/* An apply whose names resolve slowly holds up no other sandbox: another sandbox's apply
 * sent after it is answered (and enforced) first, and the slow one's sandbox has no chain
 * until its own apply completes. A remove sent for that sandbox meanwhile waits behind
 * the apply, so it is neither overtaken nor undone: no rules are left. With prefetch 3,
 * two applies may resolve at once: a third fails closed at once, with the reason, and
 * an apply without names still goes through. Ordering is all this asserts; "slow" is
 * a DNS answer the test withholds until it says so. */
TEST_FULL(slow_names_hold_up_no_other_sandbox_and_keep_its_order, 90) {
        int home, ns;
        names_world("203.0.113.31 fast.paddock.test\n", &home, &ns);

#define SLOW "dddddddddddddddddddddddd"
#define FAST "eeeeeeeeeeeeeeeeeeeeeeee"
        char exchange[64], nid[64];
        sync_cfg_set("async", 3, exchange, nid);
        /* A bound far beyond the test's own timeouts: only the order of events decides. */
        sync_cfg.egress_resolve_timeout_ms = 60000;
        _cleanup_free_ char *m0 = agent_metrics_render();
        double ok0 = metric_value(m0, "paddock_agent_egress_applies_total{result=\"ok\"} ");
        double n0 = metric_value(m0, "paddock_agent_egress_apply_seconds_count ");

        amqp_connection_state_t c;
        amqp_bytes_t rq;
        pthread_t th = agent_up(exchange, nid, &c, &rq);
        char corr[64];
        _cleanup_free_ char *body = NULL;

        send_to_agent(c, exchange, nid, rq, "apply-slow", APPLY_RESTRICTED, SLOW, "169.254.90.21",
                      "\"slow.paddock.test\"");
        dns_wait_queries(1);    /* the agent is resolving it now, and will until we release the answer */
        send_to_agent(c, exchange, nid, rq, "apply-fast", APPLY_RESTRICTED, FAST, "169.254.90.22",
                      "\"fast.paddock.test\"");
        ASSERT_EQ(next_reply(c, 20, corr, &body), 0);
        ASSERT_STREQ(corr, "apply-fast");
        ASSERT_CONTAINS(body, "\"ok\":true");
        ASSERT_CONTAINS(body, "203.0.113.31");
        ASSERT_TRUE(nft_has_chain(ns, home, FAST));
        ASSERT_FALSE(nft_has_chain(ns, home, SLOW));    /* fail closed until its apply completes */

        /* A remove right behind the slow apply, then a ping: the ping is answered at once
         * (a waiting message holds up nobody else either) and proves the remove was taken. */
        send_to_agent(c, exchange, nid, rq, "remove-slow", REMOVE, SLOW, "169.254.90.21");
        send_to_agent(c, exchange, nid, rq, "ping", "{\"type\":\"ping\"}");
        free(body);
        body = NULL;
        ASSERT_EQ(next_reply(c, 20, corr, &body), 0);
        ASSERT_STREQ(corr, "ping");
        ASSERT_FALSE(nft_has_chain(ns, home, SLOW));

        dns_release();
        free(body);
        body = NULL;
        ASSERT_EQ(next_reply(c, 20, corr, &body), 0);
        ASSERT_STREQ(corr, "apply-slow");
        ASSERT_CONTAINS(body, "\"ok\":true");
        ASSERT_CONTAINS(body, "\"resolved\":[{\"name\":\"slow.paddock.test\",\"addrs\":[\"" DNS_ANSWER "\"]");
        free(body);
        body = NULL;
        ASSERT_EQ(next_reply(c, 20, corr, &body), 0);
        ASSERT_STREQ(corr, "remove-slow");
        ASSERT_CONTAINS(body, "\"ok\":true");
        ASSERT_FALSE(nft_has_chain(ns, home, SLOW));    /* the remove came last, and holds */
        ASSERT_TRUE(nft_has_chain(ns, home, FAST));
        ASSERT_EQ(names_resolved_get(SLOW, &(struct pj_node_resolved *) { NULL }, &(size_t) { 0 }), -ENOENT);

        /* Both applies were observed, each once, when it completed. */
        _cleanup_free_ char *m1 = agent_metrics_render();
        ASSERT_EQ(metric_value(m1, "paddock_agent_egress_applies_total{result=\"ok\"} ") - ok0, 2);
        ASSERT_EQ(metric_value(m1, "paddock_agent_egress_apply_seconds_count ") - n0, 2);

        /* The bound: prefetch 3 lets two resolve; the third fails closed at once. */
#define G "a0a0a0a0a0a0a0a0a0a0a0a0"
#define H "b0b0b0b0b0b0b0b0b0b0b0b0"
#define I "c0c0c0c0c0c0c0c0c0c0c0c0"
#define J "d0d0d0d0d0d0d0d0d0d0d0d0"
        dns_hold();
        send_to_agent(c, exchange, nid, rq, "apply-g", APPLY_RESTRICTED, G, "169.254.90.31", "\"slow-g.paddock.test\"");
        send_to_agent(c, exchange, nid, rq, "apply-h", APPLY_RESTRICTED, H, "169.254.90.32", "\"slow-h.paddock.test\"");
        dns_wait_queries(2);
        send_to_agent(c, exchange, nid, rq, "apply-i", APPLY_RESTRICTED, I, "169.254.90.33", "\"slow-i.paddock.test\"");
        send_to_agent(c, exchange, nid, rq, "apply-j", APPLY_RESTRICTED, J, "169.254.90.34", "\"203.0.113.9\"");
        free(body);
        body = NULL;
        ASSERT_EQ(next_reply(c, 20, corr, &body), 0);
        ASSERT_STREQ(corr, "apply-i");
        ASSERT_CONTAINS(body, "\"ok\":false");
        ASSERT_CONTAINS(body, "2 applies are already resolving hostnames on node");
        free(body);
        body = NULL;
        ASSERT_EQ(next_reply(c, 20, corr, &body), 0);
        ASSERT_STREQ(corr, "apply-j");
        ASSERT_CONTAINS(body, "\"ok\":true");
        ASSERT_FALSE(nft_has_chain(ns, home, I));
        ASSERT_FALSE(nft_has_chain(ns, home, G));
        dns_release();
        bool got_g = false, got_h = false;
        for (int i = 0; i < 2; i++) {
                free(body);
                body = NULL;
                ASSERT_EQ(next_reply(c, 20, corr, &body), 0);
                ASSERT_CONTAINS(body, "\"ok\":true");
                got_g = got_g || !strcmp(corr, "apply-g");
                got_h = got_h || !strcmp(corr, "apply-h");
        }
        ASSERT_TRUE(got_g && got_h);
        ASSERT_TRUE(nft_has_chain(ns, home, G) && nft_has_chain(ns, home, H) && nft_has_chain(ns, home, J));
        ASSERT_FALSE(nft_has_chain(ns, home, I));
#undef G
#undef H
#undef I
#undef J

        agent_down(th, c, rq, exchange, ns, home);
#undef SLOW
#undef FAST
}

/* The allow list text of n names "<prefix><i>.hang.paddock.test" (quoted, comma-separated). */
static char *hang_names(const char *prefix, int n) {
        struct strbuf b = STRBUF_INIT(0);
        for (int i = 0; i < n; i++)
                strbuf_printf(&b, "%s\"%s%d.hang.paddock.test\"", i ? "," : "", prefix, i);
        return strbuf_steal(&b);
}

#define APPLY_ACCOUNT                                                                                  \
        "{\"type\":\"egress.apply\",\"sandbox_id\":\"%s\",\"ip\":\"%s\",\"account\":\"%s\","              \
        "\"mode\":\"restricted\",\"allow\":[%s]}"

/* Sends an egress.apply (APPLY_ACCOUNT) under correlation id corr and returns the body of the
 * next reply (caller frees), asserting it answers corr. */
static char *apply_and_reply(amqp_connection_state_t c, const char *exchange, const char *nid, amqp_bytes_t rq,
                             const char *corr, const char *sid, const char *ip, const char *account, const char *allow) {
        send_to_agent(c, exchange, nid, rq, corr, APPLY_ACCOUNT, sid, ip, account, allow);
        char got[64];
        char *body = NULL;
        ASSERT_EQ(next_reply(c, 20, got, &body), 0);
        ASSERT_STREQ(got, corr);
        return body;
}

/* The issue-24 finding: names whose nameserver never answers are abandoned past the deadline
 * but keep their lookup running; they used to share 64 places on the node, so one tenant
 * applying 50 such names twice made every other tenant's hostname applies fail. Now they
 * count against their sandbox (50) and account (100): the tenant's own further applies fail,
 * saying which budget is spent, and another account's names still resolve. */
TEST_FULL(one_tenants_names_that_never_answer_fail_only_that_tenant, 120) {
        int home, ns;
        names_world("203.0.113.41 other.paddock.test\n", &home, &ns);    /* its resolver withholds every answer until released */

#define A1 "a1a1a1a1a1a1a1a1a1a1a1a1"
#define A2 "a2a2a2a2a2a2a2a2a2a2a2a2"
#define A3 "a3a3a3a3a3a3a3a3a3a3a3a3"
#define B1 "b1b1b1b1b1b1b1b1b1b1b1b1"
#define ACC_X "aaaaaaaaaaaaaaaaaaaaaaaa"
#define ACC_Y "bbbbbbbbbbbbbbbbbbbbbbbb"
        char exchange[64], nid[64];
        sync_cfg_set("budget", 3, exchange, nid);
        sync_cfg.egress_resolve_timeout_ms = 1000;
        amqp_connection_state_t c;
        amqp_bytes_t rq;
        pthread_t th = agent_up(exchange, nid, &c, &rq);
        _cleanup_free_ char *names_a = hang_names("a", 50), *names_b = hang_names("b", 50), *body = NULL;

        /* 50 names that never answer: the apply fails at its deadline, the lookups stay. */
        body = apply_and_reply(c, exchange, nid, rq, "a1-first", A1, "169.254.90.41", ACC_X, names_a);
        ASSERT_CONTAINS(body, "\"ok\":false");
        ASSERT_CONTAINS(body, "took longer than 1000 ms");
        dns_wait_queries(50);
        /* The same again: this sandbox's budget is spent, and the reply says so at once. */
        free(body);
        body = apply_and_reply(c, exchange, nid, rq, "a1-again", A1, "169.254.90.41", ACC_X, names_a);
        ASSERT_CONTAINS(body, "\"ok\":false");
        ASSERT_CONTAINS(body, "this sandbox already has 50 hostname lookups outstanding");
        /* A second sandbox of the same account takes the account's other 50. */
        free(body);
        body = apply_and_reply(c, exchange, nid, rq, "a2", A2, "169.254.90.42", ACC_X, names_b);
        ASSERT_CONTAINS(body, "took longer than 1000 ms");
        /* A third: the account's budget is spent. */
        free(body);
        body = apply_and_reply(c, exchange, nid, rq, "a3", A3, "169.254.90.43", ACC_X, "\"other.paddock.test\"");
        ASSERT_CONTAINS(body, "\"ok\":false");
        ASSERT_CONTAINS(body, "this account's sandboxes already have 100 hostname lookups outstanding");
        ASSERT_FALSE(nft_has_chain(ns, home, A3));
        /* Another tenant on the node: its names resolve and its policy holds. */
        free(body);
        body = apply_and_reply(c, exchange, nid, rq, "b1", B1, "169.254.90.44", ACC_Y, "\"other.paddock.test\"");
        ASSERT_CONTAINS(body, "\"ok\":true");
        ASSERT_CONTAINS(body, "203.0.113.41");
        ASSERT_TRUE(nft_has_chain(ns, home, B1));
        /* Once the nameserver answers, the tenant's places come back. */
        dns_release();
        bool ok = false;
        for (int i = 0; i < 50 && !ok; i++) {
                free(body);
                body = apply_and_reply(c, exchange, nid, rq, "a3-later", A3, "169.254.90.43", ACC_X, "\"other.paddock.test\"");
                ok = strstr(body, "\"ok\":true") != NULL;
                if (!ok)
                        usleep(100000);
        }
        ASSERT_TRUE(ok);
        ASSERT_TRUE(nft_has_chain(ns, home, A3));

        agent_down(th, c, rq, exchange, ns, home);
#undef A1
#undef A2
#undef A3
#undef B1
#undef ACC_X
#undef ACC_Y
}
