/* nodeagent's node.sync against a real RabbitMQ and real nftables: it converges, fails closed
 * without controld, and re-resolves names into the sets. */
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

/* ------------------------------------------------------------------ node.sync */

/* Plays controld: a queue bound with routing key "controld" on the test's own exchange. */
static amqp_connection_state_t fake_controld(const char *exchange, bool bind) {
        amqp_connection_state_t conn = amqptest_connect(exchange);
        if (!bind)
                return conn;
        amqp_bytes_t qn = amqptest_queue(conn);
        amqp_queue_bind(conn, 1, qn, amqp_cstring_bytes(exchange), amqp_cstring_bytes("controld"), amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_basic_consume(conn, 1, qn, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_bytes_free(qn);
        return conn;
}

TEST_FULL(node_sync_converges_and_fails_closed_without_controld, 90) {
        amqptest_need_broker();
        int home, ns;
        egress_setup_visible("", &home, &ns);
        static const char *const ids[] = { "aaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccccccc" };
        char exchange[64], nid[64];
        sync_cfg_set("sync", 8, exchange, nid);
        for (int i = 0; i < 3; i++) {
                char body[256];
                snprintf(body, sizeof(body), "{\"type\":\"egress.apply\",\"sandbox_id\":\"%s\",\"ip\":\"169.254.90.%d\","
                                             "\"mode\":\"open\"}", ids[i], 10 + i);
                _cleanup_free_ char *a = agent_handle(&sync_cfg, body, strlen(body));
                ASSERT_CONTAINS(a, "\"ok\":true");
        }
        ASSERT_EQ(setns(home, CLONE_NEWNET), 0);        /* RabbitMQ lives here; the egress child stays there */

        /* No controld yet (the exchange exists, nothing bound to "controld"): the
         * sync comes back unroutable, and the table is kept exactly as it is. */
        amqp_connection_state_t ex = fake_controld(exchange, false);
        pthread_t th;
        ASSERT_EQ(pthread_create(&th, NULL, agent_thread, NULL), 0);
        sleep(2);
        for (int i = 0; i < 3; i++)
                ASSERT_TRUE(nft_has_chain(ns, home, ids[i]));

        /* controld appears and answers: only A is live. */
        amqp_connection_state_t c = fake_controld(exchange, true);
        amqp_envelope_t env;
        struct timeval tv = { .tv_sec = 15 };
        amqp_maybe_release_buffers(c);
        ASSERT_EQ(amqp_consume_message(c, &env, &tv, 0).reply_type, AMQP_RESPONSE_NORMAL);
        _cleanup_free_ char *req = xstrndup(env.message.body.bytes, env.message.body.len);
        char want[128];
        snprintf(want, sizeof(want), "{\"type\":\"node.sync\",\"node_id\":\"%s\"}", nid);
        ASSERT_STREQ(req, want);
        amqp_basic_properties_t *rp = &env.message.properties;
        ASSERT_TRUE((rp->_flags & AMQP_BASIC_REPLY_TO_FLAG) && (rp->_flags & AMQP_BASIC_CORRELATION_ID_FLAG));
        ASSERT_TRUE(rp->_flags & AMQP_BASIC_EXPIRATION_FLAG);
        /* An apply that lands after the ask went out, while controld is still answering from a
         * store read made before that sandbox was recorded here: the answer must not remove it
         * (a create racing a sync, seen in CI as an open sandbox that could reach nothing). */
        static const char late[] = "dddddddddddddddddddddddd";
        struct client cl;
        client_open_on(&cl, exchange);
        _cleanup_free_ char *late_reply = NULL;
        ASSERT_EQ(publish(&cl, nid, "{\"type\":\"egress.apply\",\"sandbox_id\":\"dddddddddddddddddddddddd\","
                                    "\"ip\":\"169.254.90.13\",\"mode\":\"open\"}",
                          "late-apply", &late_reply),
                  0);
        ASSERT_CONTAINS(late_reply, "\"ok\":true");
        ASSERT_TRUE(nft_has_chain(ns, home, late));
        amqp_basic_properties_t p = { 0 };
        p._flags = AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.correlation_id = rp->correlation_id;
        p.content_type = amqp_cstring_bytes("application/json");
        char reply[512];
        snprintf(reply, sizeof(reply),
                 "{\"ok\":true,\"type\":\"node.sync\",\"node_id\":\"%s\",\"live\":[{\"sandbox_id\":\"%s\",\"ip\":\"169.254.90.10\"}]}",
                 nid, ids[0]);
        ASSERT_EQ(amqp_basic_publish(c, 1, amqp_empty_bytes, rp->reply_to, 0, 0, &p, amqp_cstring_bytes(reply)),
                  AMQP_STATUS_OK);
        amqp_destroy_envelope(&env);
        bool pruned = false;
        for (int i = 0; i < 100 && !pruned; i++) {
                usleep(100000);
                pruned = !nft_has_chain(ns, home, ids[1]) && !nft_has_chain(ns, home, ids[2]);
        }
        ASSERT_TRUE(pruned);
        ASSERT_TRUE(nft_has_chain(ns, home, ids[0]));   /* the live one is kept */
        ASSERT_TRUE(nft_has_chain(ns, home, late));     /* and the one applied after the ask */
        client_close(&cl);

        kill(getpid(), SIGTERM);
        pthread_join(th, NULL);
        amqp_exchange_delete(c, 1, amqp_cstring_bytes(exchange), 0);
        amqp_connection_close(c, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(c);
        amqp_connection_close(ex, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(ex);
        close(ns);
        close(home);
}

/* Names are looked up again on a timer; when the answer changes, the sandbox's set is
 * swapped in one batch (old addresses out, new ones in), and the same answer changes
 * nothing. A name that stops resolving keeps its last confirmed addresses. */
TEST_FULL(names_are_re_resolved_and_the_set_swapped, 60) {
        egress_setup("198.51.100.20 move.paddock.test\n");
        struct agent_config cfg = { .node_id = "n-egress", .egress_enabled = true };
#define MOVE_ALLOW "\"203.0.113.9\",\"move.paddock.test\""
        _cleanup_free_ char *a = apply_restricted(&cfg, SBX, "169.254.90.7", MOVE_ALLOW);
        ASSERT_CONTAINS(a, "\"ok\":true");
        _cleanup_free_ char *d1 = nft_dump();
        ASSERT_CONTAINS(d1, "198.51.100.20");
        ASSERT_EQ(names_refresh_once(), 0);             /* same answer: nothing to do */

        hosts_rewrite("198.51.100.21 move.paddock.test\n");
        ASSERT_EQ(names_refresh_once(), 1);
        _cleanup_free_ char *d2 = nft_dump();
        ASSERT_CONTAINS(d2, "198.51.100.21");
        ASSERT_FALSE(strstr(d2, "198.51.100.20"));
        ASSERT_CONTAINS(d2, "203.0.113.9");             /* literal entries stay */
        struct pj_node_resolved *rv = NULL;
        size_t n = 0;
        ASSERT_OK(names_resolved_get(SBX, &rv, &n));
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(rv[0].name, "move.paddock.test");
        ASSERT_EQ(rv[0].addrs[0], (198u << 24) | (51u << 16) | (100u << 8) | 21u);
        free(rv);
        /* The consumer is handed the change to tell controld (egress.resolved). */
        struct names_update *u = NULL;
        ASSERT_EQ(names_take_updates(&u), 1);
        ASSERT_STREQ(u[0].sandbox_id, SBX);
        ASSERT_EQ(u[0].n_resolved, 1);
        ASSERT_EQ(u[0].resolved[0].addrs[0], (198u << 24) | (51u << 16) | (100u << 8) | 21u);
        free(u[0].resolved);
        free(u);
        ASSERT_EQ(names_take_updates(&u), 0);
        free(u);

        /* The timer does the same on its own (period from [egress] resolve_interval). */
        names_configure(0, 1000);
        ASSERT_OK(names_refresh_start());
        hosts_rewrite("198.51.100.22 move.paddock.test\n");
        int64_t until = mono_ms() + 10000;
        _cleanup_free_ char *d3 = NULL;
        while (mono_ms() < until) {
                free(d3);
                d3 = nft_dump();
                if (strstr(d3, "198.51.100.22"))
                        break;
                usleep(100 * 1000);
        }
        names_refresh_stop();
        ASSERT_CONTAINS(d3, "198.51.100.22");
        ASSERT_FALSE(strstr(d3, "198.51.100.21"));

        /* Gone from the resolver: the last confirmed address stays (no fail-open, no cut-off). */
        hosts_rewrite("");
        ASSERT_EQ(names_refresh_once(), 0);
        _cleanup_free_ char *d4 = nft_dump();
        ASSERT_CONTAINS(d4, "198.51.100.22");

        /* A newer apply without names ends the refreshing of this sandbox. */
        _cleanup_free_ char *b = apply_restricted(&cfg, SBX, "169.254.90.7", "\"203.0.113.9\"");
        ASSERT_CONTAINS(b, "\"ok\":true");
        ASSERT_EQ(names_resolved_get(SBX, &rv, &n), -ENOENT);

        /* Another sandbox taking the address over ends the old one's refreshing too: a
         * refresh must never hand the address back to a sandbox that left. */
        hosts_rewrite("198.51.100.22 move.paddock.test\n");
        _cleanup_free_ char *again = apply_restricted(&cfg, SBX, "169.254.90.7", MOVE_ALLOW);
        ASSERT_CONTAINS(again, "\"ok\":true");
        ASSERT_OK(names_resolved_get(SBX, &rv, &n));
        free(rv);
        static const char other[] = "{\"type\":\"egress.apply\",\"sandbox_id\":\"fedcba9876543210fedcba98\","
                                    "\"ip\":\"169.254.90.7\",\"mode\":\"open\"}";
        _cleanup_free_ char *o = agent_handle(&cfg, other, strlen(other));
        ASSERT_CONTAINS(o, "\"ok\":true");
        ASSERT_EQ(names_resolved_get(SBX, &rv, &n), -ENOENT);
        hosts_rewrite("198.51.100.23 move.paddock.test\n");
        ASSERT_EQ(names_refresh_once(), 0);
        _cleanup_free_ char *d5 = nft_dump();
        ASSERT_FALSE(strstr(d5, "198.51.100.23"));
#undef MOVE_ALLOW
}

/* A resolver that never answers costs an apply at most [egress] resolve_timeout, and the
 * apply then fails closed with the reason; the agent is not held up. */
TEST_FULL(name_resolution_is_bounded_in_time, 60) {
        egress_setup("");
        /* A "resolver" in the test's namespace that takes queries and never answers. */
        char *lo[] = { "ip", "addr", "add", "198.51.100.53/32", "dev", "lo", NULL };
        char *up[] = { "ip", "link", "set", "lo", "up", NULL };
        ASSERT_EQ(test_run_capture(up, NULL, 4096), 0);
        ASSERT_EQ(test_run_capture(lo, NULL, 4096), 0);
        int dns = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(53), .sin_addr.s_addr = htonl(0xc6336435) };
        ASSERT_EQ(bind(dns, (struct sockaddr *) &sa, sizeof(sa)), 0);
        char rc[512];
        snprintf(rc, sizeof(rc), "%s/resolv.conf", test_tmpdir());
        FILE *f = fopen(rc, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "nameserver 198.51.100.53\noptions timeout:30 attempts:1\n");
        fclose(f);
        ASSERT_EQ(mount(rc, "/etc/resolv.conf", NULL, MS_BIND, NULL), 0);

        struct agent_config cfg = { .node_id = "n-egress", .egress_enabled = true, .egress_resolve_timeout_ms = 700 };
        int64_t t0 = mono_ms();
        _cleanup_free_ char *a = apply_restricted(&cfg, SBX, "169.254.90.7", "\"slow.paddock.test\",\"203.0.113.9\"");
        int64_t took = mono_ms() - t0;
        ASSERT_CONTAINS(a, "\"ok\":false");
        ASSERT_CONTAINS(a, "resolving slow.paddock.test took longer than 700 ms");
        ASSERT_TRUE(took >= 600 && took < 3000);
        /* Nothing was applied: no chain for the sandbox. */
        _cleanup_free_ char *d = nft_dump();
        ASSERT_FALSE(strstr(d, "sbx_" SBX));
        /* The query did reach the resolver (so the bound, not a fast failure, ended it). */
        struct pollfd p = { .fd = dns, .events = POLLIN };
        ASSERT_EQ(poll(&p, 1, 0), 1);
        close(dns);
}
