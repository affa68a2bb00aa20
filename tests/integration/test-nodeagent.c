/* nodeagent against a real RabbitMQ: node-ID routing, replies, fail-fast when the agent is gone. */
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
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"
#include "testlib.h"

static pid_t agent_pid;
static char node_id[64], conf_path[512], log_path[512];

static void stop_agent(void *ud) {
        (void) ud;
        test_stop_child(&agent_pid);
}

static void write_conf(const char *extra) {
        snprintf(node_id, sizeof(node_id), "test-node-%d", getpid());
        snprintf(conf_path, sizeof(conf_path), "%s/nodeagent.conf", test_tmpdir());
        snprintf(log_path, sizeof(log_path), "%s/nodeagent.log", test_tmpdir());
        FILE *f = fopen(conf_path, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\nlog_level = debug\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672/\n%s",
                node_id, extra ? extra : "");
        fclose(f);
}

static void start_agent(void) {
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
                dup2(fd, STDERR_FILENO);
                execl(test_build_path("nodeagent"), "nodeagent", "-d", "-f", conf_path, (char *) NULL);
                _exit(127);
        }
        agent_pid = p;
        test_on_exit(stop_agent, NULL);
}

struct client {
        amqp_connection_state_t conn;
        amqp_bytes_t reply_q;
        const char *exchange;
};

/* A client publishing on exchange (NULL: the default, paddock.nodes). */
static void client_open_on(struct client *c, const char *exchange) {
        c->exchange = exchange ? exchange : "paddock.nodes";
        c->conn = amqptest_connect(c->exchange);
        c->reply_q = amqptest_queue(c->conn);
        amqp_basic_consume(c->conn, 1, c->reply_q, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(c->conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_confirm_select(c->conn, 1);
        ASSERT_EQ(amqp_get_rpc_reply(c->conn).reply_type, AMQP_RESPONSE_NORMAL);
}

static void client_open(struct client *c) {
        client_open_on(c, NULL);
}

static void client_close(struct client *c) {
        amqp_bytes_free(c->reply_q);
        amqp_connection_close(c->conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(c->conn);
        memset(c, 0, sizeof(*c));
}

/* Publishes mandatory to routing key; returns 1 if the broker returned it (no route),
 * 0 if acked, and then waits for the reply body (xmalloc'd) when want_reply. */
static int publish(struct client *c, const char *key, const char *body, const char *corr, char **ret_reply) {
        amqp_basic_properties_t p = { 0 };
        p._flags = AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.reply_to = c->reply_q;
        p.correlation_id = amqp_cstring_bytes(corr);
        p.content_type = amqp_cstring_bytes("application/json");
        ASSERT_EQ(amqp_basic_publish(c->conn, 1, amqp_cstring_bytes(c->exchange), amqp_cstring_bytes(key), 1, 0, &p,
                                     amqp_cstring_bytes(body)),
                  AMQP_STATUS_OK);
        bool returned = false;
        for (;;) {
                amqp_frame_t f;
                struct timeval tv = { .tv_sec = 10 };
                ASSERT_EQ(amqp_simple_wait_frame_noblock(c->conn, &f, &tv), AMQP_STATUS_OK);
                if (f.frame_type != AMQP_FRAME_METHOD)
                        continue;
                if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD) {
                        amqp_message_t m;
                        ASSERT_EQ(amqp_read_message(c->conn, 1, &m, 0).reply_type, AMQP_RESPONSE_NORMAL);
                        amqp_destroy_message(&m);
                        returned = true;
                        continue;
                }
                if (f.payload.method.id == AMQP_BASIC_ACK_METHOD)
                        break;
                if (f.payload.method.id == AMQP_BASIC_NACK_METHOD)
                        test_fail(__FILE__, __LINE__, "broker nacked the publish");
        }
        if (returned || !ret_reply)
                return returned ? 1 : 0;
        for (;;) {
                amqp_envelope_t env;
                struct timeval tv = { .tv_sec = 10 };
                amqp_maybe_release_buffers(c->conn);
                amqp_rpc_reply_t r = amqp_consume_message(c->conn, &env, &tv, 0);
                ASSERT_EQ(r.reply_type, AMQP_RESPONSE_NORMAL);
                bool match = env.message.properties.correlation_id.len == strlen(corr) &&
                             !memcmp(env.message.properties.correlation_id.bytes, corr, strlen(corr));
                if (match)
                        *ret_reply = xstrndup(env.message.body.bytes, env.message.body.len);
                amqp_destroy_envelope(&env);
                if (match)
                        return 0;
        }
}

/* The agent's queue appears once it has connected: retry until the ping is routed. */
static void wait_agent_ready(struct client *c) {
        for (int i = 0; i < 200; i++) {
                _cleanup_free_ char *reply = NULL;
                if (publish(c, node_id, "{\"type\":\"ping\"}", "ready-probe", &reply) == 0)
                        return;
                usleep(50000);
        }
        test_fail(__FILE__, __LINE__, "nodeagent never bound its queue; see %s", log_path);
}

/* agent_egress_init(cfg), skipping the test where nftables netlink is not available. */
static void egress_init_or_skip(struct agent_config *cfg) {
        char err[512] = "";
        int r = agent_egress_init(cfg, err, sizeof(err));
        if (r == -EPERM || r == -EPROTONOSUPPORT)
                TEST_SKIP("nftables netlink is not available here");
        if (r < 0)
                test_fail(__FILE__, __LINE__, "egress init: %s", err);
}

/* Publishes a ping to node until the broker returns it as unroutable (the node's queue is
 * gone), for up to 5 s; returns what the last publish returned (1: returned). */
static int publish_until_returned(struct client *c, const char *node, const char *corr) {
        int returned = 0;
        for (int i = 0; i < 100 && !returned; i++) {
                returned = publish(c, node, "{\"type\":\"ping\"}", corr, NULL);
                if (!returned)
                        usleep(50000);
        }
        return returned;
}

/* A datagram socket bound at <tmpdir>/name (path in npath) and named in NOTIFY_SOCKET, where
 * an agent started now sends its sd_notify messages. */
static int notify_socket_env(const char *name, int flags, char npath[static 300]) {
        snprintf(npath, 300, "%s/%s", test_tmpdir(), name);
        return test_notify_socket(npath, flags);
}

TEST_FULL(routes_by_node_id_and_replies_with_correlation, 60) {
        struct client c = { 0 };
        char npath[300];
        amqptest_need_broker();
        write_conf(NULL);
        /* systemd Type=notify: READY=1 once the queue consumes. */
        int nfd = notify_socket_env("notify.sock", 0, npath);
        start_agent();
        unsetenv("NOTIFY_SOCKET");
        struct pollfd pf = { .fd = nfd, .events = POLLIN };
        ASSERT_EQ(poll(&pf, 1, 20000), 1);
        char nbuf[256] = "";
        ssize_t nn = recv(nfd, nbuf, sizeof(nbuf) - 1, 0);
        ASSERT_TRUE(nn > 0);
        nbuf[nn] = 0;
        ASSERT_CONTAINS(nbuf, "READY=1");
        close(nfd);
        client_open(&c);
        wait_agent_ready(&c);

        _cleanup_free_ char *r1 = NULL, *r2 = NULL, *r3 = NULL;
        ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", "corr-1", &r1), 0);
        ASSERT_CONTAINS(r1, "\"ok\":true");
        ASSERT_CONTAINS(r1, node_id);
        /* Types the agent does not handle are refused, never silently accepted. */
        /* Egress messages on a node whose firewall is not enabled are refused (fail closed). */
        ASSERT_EQ(publish(&c, node_id,
                          "{\"type\":\"egress.apply\",\"sandbox_id\":\"0123456789abcdef01234567\",\"ip\":\"169.254.90.9\","
                          "\"mode\":\"deny_all\"}",
                          "corr-2", &r2),
                  0);
        ASSERT_CONTAINS(r2, "\"ok\":false");
        ASSERT_CONTAINS(r2, "\"type\":\"egress.apply\"");
        ASSERT_CONTAINS(r2, "not enabled");
        /* Garbage gets an error reply, and the agent keeps serving. */
        ASSERT_EQ(publish(&c, node_id, "{not json", "corr-3", &r3), 0);
        ASSERT_CONTAINS(r3, "\"ok\":false");
        ASSERT_CONTAINS(r3, "Malformed JSON");
        free(r1);
        r1 = NULL;
        ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", "corr-4", &r1), 0);
        ASSERT_CONTAINS(r1, "\"ok\":true");

        /* A node nobody serves: the broker returns the message at once (mandatory, no route). */
        ASSERT_EQ(publish(&c, "no-such-node", "{\"type\":\"ping\"}", "corr-5", NULL), 1);

        /* When the agent goes away its queue goes too: publishes to it fail fast. */
        stop_agent(NULL);
        ASSERT_EQ(publish_until_returned(&c, node_id, "corr-6"), 1);
        client_close(&c);
}

/* Two deployments on one broker, each with its own exchange, may both have a node called the
 * same (literal node ids such as "local"): each agent gets a queue of its own exchange's. (The
 * queue was once nodeagent.<id> for all: the second agent's exclusive declare was refused, and
 * it never consumed.) */
static pid_t twins[2];

static void twins_stop(void *ud) {
        (void) ud;
        test_stop_child(&twins[0]);
        test_stop_child(&twins[1]);
}

TEST_FULL(same_node_id_in_two_deployments, 60) {
        amqptest_need_broker();
        char nid[64], ex[2][64], conf[2][512], log[2][512];
        test_on_exit(twins_stop, NULL);
        snprintf(nid, sizeof(nid), "twin-%d", getpid());
        for (int i = 0; i < 2; i++) {
                snprintf(ex[i], sizeof(ex[i]), "paddock.twin%d-%d", i, getpid());
                snprintf(conf[i], sizeof(conf[i]), "%s/twin%d.conf", test_tmpdir(), i);
                snprintf(log[i], sizeof(log[i]), "%s/twin%d.log", test_tmpdir(), i);
                agenttest_write_conf(conf[i], nid, ex[i], NULL, "%s", "");
                twins[i] = agenttest_start(conf[i], log[i], "consuming node messages");
        }
        /* Each answers a ping on its own exchange. */
        for (int i = 0; i < 2; i++) {
                struct client c = { 0 };
                _cleanup_free_ char *reply = NULL;
                client_open_on(&c, ex[i]);
                ASSERT_EQ(publish(&c, nid, "{\"type\":\"ping\"}", "twin", &reply), 0);
                ASSERT_CONTAINS(reply, "\"ok\":true");
                client_close(&c);
                ASSERT_FALSE(test_log_has(log[i], 0, "queue.declare", 0));
        }
}

TEST(config_check_and_bad_configs) {
        write_conf(NULL);
        _cleanup_free_ char *out = NULL;
        char *argv[] = { (char *) test_build_path("nodeagent"), "-n", "-f", conf_path, NULL };
        char bin[512];
        snprintf(bin, sizeof(bin), "%s", argv[0]);
        argv[0] = bin;
        ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
        ASSERT_CONTAINS(out, "configuration OK");

        struct agent_config cfg;
        char err[512];
        write_conf("typo_key = 1\n");
        ASSERT_TRUE(agent_config_load(conf_path, &cfg, err, sizeof(err)) < 0);
        ASSERT_CONTAINS(err, "unknown key");
        FILE *f = fopen(conf_path, "w");
        fprintf(f, "[agent]\nnode_id = bad id!\n");
        fclose(f);
        ASSERT_TRUE(agent_config_load(conf_path, &cfg, err, sizeof(err)) < 0);
        ASSERT_CONTAINS(err, "node_id");
        f = fopen(conf_path, "w");
        fprintf(f, "[agent]\nnode_id = ok\n[amqp]\nurl = http://nope\n");
        fclose(f);
        ASSERT_TRUE(agent_config_load(conf_path, &cfg, err, sizeof(err)) < 0);
        ASSERT_CONTAINS(err, "amqp://");
        /* The shipped example is valid. */
        ASSERT_OK(agent_config_load("packaging/nodeagent.conf.example", &cfg, err, sizeof(err)));
        ASSERT_STREQ(cfg.node_id, "local");
        agent_config_done(&cfg);
}

TEST(handler_replies_for_every_input) {
        struct agent_config cfg = { .node_id = "n1" };
        _cleanup_free_ char *a = agent_handle(&cfg, "{\"type\":\"ping\"}", 15);
        ASSERT_CONTAINS(a, "\"ok\":true");
        _cleanup_free_ char *b = agent_handle(&cfg, "[]", 2);
        ASSERT_CONTAINS(b, "\"ok\":false");
        _cleanup_free_ char *c = agent_handle(&cfg, "", 0);
        ASSERT_CONTAINS(c, "\"ok\":false");
        char junk[256];
        for (int i = 0; i < 2000; i++) {
                for (size_t k = 0; k < sizeof(junk); k++)
                        junk[k] = (char) (random() & 0xff);
                char *x = agent_handle(&cfg, junk, (size_t) (random() % sizeof(junk)));
                ASSERT_CONTAINS(x, "\"ok\":false");
                free(x);
        }
}

/* The agent's egress handlers program real nftables, inside a network namespace of the test's own. */
/* Into a network and mount namespace of the test's own, with an /etc/hosts of its making
 * ("127.0.0.1 localhost" and then hosts_text), visible only in that mount namespace. */
/* Rewrites the test's /etc/hosts in place (the bind mount follows the inode). */
static void hosts_rewrite(const char *hosts_text) {
        char hosts[512];
        snprintf(hosts, sizeof(hosts), "%s/hosts", test_tmpdir());
        FILE *hf = fopen(hosts, "w");
        ASSERT_NOT_NULL(hf);
        fprintf(hf, "127.0.0.1 localhost\n%s", hosts_text);
        fclose(hf);
}

static void netns_with_hosts(const char *hosts_text) {
        if (unshare(CLONE_NEWNET | CLONE_NEWNS) < 0)
                TEST_SKIP("cannot create network and mount namespaces here");
        hosts_rewrite(hosts_text);
        char hosts[512];
        snprintf(hosts, sizeof(hosts), "%s/hosts", test_tmpdir());
        ASSERT_EQ(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
        ASSERT_EQ(mount(hosts, "/etc/hosts", NULL, MS_BIND, NULL), 0);
}

/* The [egress] configuration the in-namespace tests share: table paddock, bridge pdkbr0. */
static struct agent_config egress_cfg(char *node) {
        static char *bridges[] = { "pdkbr0", NULL };
        return (struct agent_config) { .node_id = node, .egress_enabled = true, .egress_table = "paddock",
                                       .egress_bridges = bridges, .egress_priority = -10 };
}

static char *nft_dump(void) {
        char *argv[] = { "nft", "--json", "list", "table", "inet", "paddock", NULL };
        char *dump = NULL;
        ASSERT_EQ(test_run_capture(argv, &dump, 1 << 20), 0);
        return dump;
}

/* Messages: an egress.apply restricting sandbox (%s) at ip (%s) to allow (%s: the items
 * of a JSON array); an egress.remove of sandbox (%s) at ip (%s). */
#define APPLY_RESTRICTED                                                                        \
        "{\"type\":\"egress.apply\",\"sandbox_id\":\"%s\",\"ip\":\"%s\",\"mode\":\"restricted\",\"allow\":[%s]}"
#define REMOVE "{\"type\":\"egress.remove\",\"sandbox_id\":\"%s\",\"ip\":\"%s\"}"

/* The agent's reply to an egress.apply restricting sandbox sbx at ip to allow. */
static char *apply_restricted(const struct agent_config *cfg, const char *sbx, const char *ip, const char *allow) {
        _cleanup_free_ char *m = xasprintf(APPLY_RESTRICTED, sbx, ip, allow);
        return agent_handle(cfg, m, strlen(m));
}

/* The agent's reply to an egress.remove of sandbox sbx at ip. */
static char *remove_sandbox(const struct agent_config *cfg, const char *sbx, const char *ip) {
        _cleanup_free_ char *m = xasprintf(REMOVE, sbx, ip);
        return agent_handle(cfg, m, strlen(m));
}

TEST(egress_messages_program_the_firewall) {
        /* A hostname the agent can resolve without any DNS. */
        netns_with_hosts("203.0.113.20 api.paddock.test\n");
        struct agent_config cfg = egress_cfg("n-egress");
        egress_init_or_skip(&cfg);

#define SB "0123456789abcdef01234567"
        _cleanup_free_ char *a =
                apply_restricted(&cfg, SB, "169.254.90.7", "\"169.254.77.10\",\"api.paddock.test\",\"10.0.0.0/8\"");
        ASSERT_CONTAINS(a, "\"ok\":true");
        /* The reply says what each name resolved to (controld writes them into the
         * sandbox's /etc/hosts: restricted sandboxes get no DNS) and when it took effect. */
        ASSERT_CONTAINS(a, "\"resolved\":[{\"name\":\"api.paddock.test\",\"addrs\":[\"203.0.113.20\"],\"at\":");
        ASSERT_CONTAINS(a, "\"applied_at\":");
        _cleanup_free_ char *dump = nft_dump();
        ASSERT_CONTAINS(dump, "sbx_" SB);
        ASSERT_CONTAINS(dump, "169.254.77.10");
        ASSERT_CONTAINS(dump, "203.0.113.20");    /* api.paddock.test, resolved by the agent */
        ASSERT_CONTAINS(dump, "10.0.0.0");
        static const char stats[] = "{\"type\":\"egress.stats\"}";
        _cleanup_free_ char *st = agent_handle(&cfg, stats, strlen(stats));
        ASSERT_CONTAINS(st, "\"ok\":true");
        ASSERT_CONTAINS(st, "\"sandboxes\":[{\"sandbox_id\":\"" SB "\",\"allowed_packets\":0,\"allowed_bytes\":0,"
                            "\"dropped_packets\":0,\"dropped_bytes\":0}]");

        /* A name that does not resolve fails the apply; the enforced policy stays as it was. */
        _cleanup_free_ char *b = apply_restricted(&cfg, SB, "169.254.90.7", "\"no-such-host.invalid\"");
        ASSERT_CONTAINS(b, "\"ok\":false");
        ASSERT_CONTAINS(b, "cannot resolve");
        ASSERT_TRUE(strstr(b, "resolved") == NULL && strstr(b, "applied_at") == NULL);
        free(dump);
        dump = nft_dump();
        ASSERT_CONTAINS(dump, "169.254.77.10");

        _cleanup_free_ char *c = remove_sandbox(&cfg, SB, "169.254.90.7");
        ASSERT_CONTAINS(c, "\"ok\":true");
        free(dump);
        dump = nft_dump();
        ASSERT_TRUE(strstr(dump, "sbx_" SB) == NULL);
        _cleanup_free_ char *d = remove_sandbox(&cfg, SB, "169.254.90.7");   /* idempotent */
        ASSERT_CONTAINS(d, "\"ok\":true");
#undef SB
}

/* ------------------------------------------------------------------ /metrics */

/* The counters behind /metrics follow what the handler did: applies by result with their
 * latency, removes, and the chain count the egress process reports. */
TEST(metrics_count_egress_applies_removes_and_chains) {
        netns_with_hosts("203.0.113.21 ok.paddock.test\n");
        struct agent_config cfg = egress_cfg("n-metrics");
        egress_init_or_skip(&cfg);
#define SB "abcdefabcdefabcdefabcdef"
        _cleanup_free_ char *t0 = agent_metrics_render();
        ASSERT_CONTAINS(t0, "\npaddock_agent_egress_chains 0\n");
        _cleanup_free_ char *a = apply_restricted(&cfg, SB, "169.254.90.8", "\"ok.paddock.test\"");
        ASSERT_CONTAINS(a, "\"ok\":true");
        _cleanup_free_ char *b = apply_restricted(&cfg, SB, "169.254.90.8", "\"no-such-host.invalid\"");
        ASSERT_CONTAINS(b, "\"ok\":false");
        agent_metrics_tick(&cfg);
        _cleanup_free_ char *t1 = agent_metrics_render();
        ASSERT_CONTAINS(t1, "paddock_agent_egress_applies_total{result=\"ok\"} 1\n");
        ASSERT_CONTAINS(t1, "paddock_agent_egress_applies_total{result=\"error\"} 1\n");
        ASSERT_CONTAINS(t1, "paddock_agent_egress_apply_seconds_bucket{le=\"+Inf\"} 2\n");
        ASSERT_CONTAINS(t1, "paddock_agent_egress_apply_seconds_count 2\n");
        ASSERT_CONTAINS(t1, "\npaddock_agent_egress_chains 1\n");
        _cleanup_free_ char *c = remove_sandbox(&cfg, SB, "169.254.90.8");
        ASSERT_CONTAINS(c, "\"ok\":true");
        agent_metrics_tick(&cfg);
        _cleanup_free_ char *t2 = agent_metrics_render();
        ASSERT_CONTAINS(t2, "paddock_agent_egress_removes_total{result=\"ok\"} 1\n");
        ASSERT_CONTAINS(t2, "\npaddock_agent_egress_chains 0\n");
        /* The snapshot helper's hook lands in its own families. */
        agent_metrics_observe_snapshot(42.0, true);
        agent_metrics_observe_snapshot(0.5, false);
        _cleanup_free_ char *t3 = agent_metrics_render();
        ASSERT_CONTAINS(t3, "paddock_agent_snapshots_total{result=\"ok\"} 1\n");
        ASSERT_CONTAINS(t3, "paddock_agent_snapshots_total{result=\"error\"} 1\n");
        ASSERT_CONTAINS(t3, "paddock_agent_snapshot_seconds_bucket{le=\"1\"} 1\n");
        ASSERT_CONTAINS(t3, "paddock_agent_snapshot_seconds_bucket{le=\"30\"} 1\n");
        ASSERT_CONTAINS(t3, "paddock_agent_snapshot_seconds_bucket{le=\"60\"} 2\n");
        ASSERT_CONTAINS(t3, "paddock_agent_snapshot_seconds_sum 42.5");
#undef SB
}

/* A TCP forwarder 127.0.0.1:<port> -> RabbitMQ whose connections the test can cut, to make
 * the agent reconnect. One thread, a few connection pairs. */
static struct {
        int lfd, port;
        int a[8], b[8];       /* client side, broker side; -1 = free */
        volatile int cut, stop;
        pthread_t th;
} px;

static void px_close_all(void) {
        for (int i = 0; i < 8; i++) {
                if (px.a[i] >= 0)
                        close(px.a[i]);
                if (px.b[i] >= 0)
                        close(px.b[i]);
                px.a[i] = px.b[i] = -1;
        }
}

static void *px_main(void *ud) {
        (void) ud;
        while (!px.stop) {
                if (px.cut) {
                        px_close_all();
                        px.cut = 0;
                }
                struct pollfd pf[17];
                int n = 0;
                pf[n++] = (struct pollfd) { .fd = px.lfd, .events = POLLIN };
                for (int i = 0; i < 8; i++)
                        if (px.a[i] >= 0) {
                                pf[n++] = (struct pollfd) { .fd = px.a[i], .events = POLLIN };
                                pf[n++] = (struct pollfd) { .fd = px.b[i], .events = POLLIN };
                        }
                if (poll(pf, (nfds_t) n, 100) <= 0)
                        continue;
                if (pf[0].revents & POLLIN) {
                        int c = accept(px.lfd, NULL, NULL);
                        int s = socket(AF_INET, SOCK_STREAM, 0);
                        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(5672),
                                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
                        int slot = -1;
                        for (int i = 0; i < 8 && slot < 0; i++)
                                if (px.a[i] < 0)
                                        slot = i;
                        if (c < 0 || s < 0 || slot < 0 || connect(s, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                                if (c >= 0)
                                        close(c);
                                if (s >= 0)
                                        close(s);
                        } else {
                                px.a[slot] = c;
                                px.b[slot] = s;
                        }
                }
                for (int k = 1; k < n; k++) {
                        if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
                                continue;
                        for (int i = 0; i < 8; i++) {
                                int from = pf[k].fd, to;
                                if (px.a[i] == from)
                                        to = px.b[i];
                                else if (px.b[i] == from)
                                        to = px.a[i];
                                else
                                        continue;
                                char buf[16384];
                                ssize_t got = read(from, buf, sizeof(buf));
                                if (got <= 0 || write(to, buf, (size_t) got) != got) {
                                        close(px.a[i]);
                                        close(px.b[i]);
                                        px.a[i] = px.b[i] = -1;
                                }
                                break;
                        }
                }
        }
        px_close_all();
        return NULL;
}

static void px_stop(void *ud) {
        (void) ud;
        px.stop = 1;
        pthread_join(px.th, NULL);
        close(px.lfd);
}

static void px_start(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sa);
        for (int i = 0; i < 8; i++)
                px.a[i] = px.b[i] = -1;
        px.lfd = socket(AF_INET, SOCK_STREAM, 0);
        ASSERT_TRUE(px.lfd >= 0);
        ASSERT_EQ(bind(px.lfd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ASSERT_EQ(listen(px.lfd, 8), 0);
        ASSERT_EQ(getsockname(px.lfd, (struct sockaddr *) &sa, &sl), 0);
        px.port = ntohs(sa.sin_port);
        ASSERT_EQ(pthread_create(&px.th, NULL, px_main, NULL), 0);
        test_on_exit(px_stop, NULL);
}

static int free_port(void) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        ASSERT_EQ(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ASSERT_EQ(getsockname(fd, (struct sockaddr *) &sa, &sl), 0);
        close(fd);
        return ntohs(sa.sin_port);
}

/* One HTTP/1.0 request to 127.0.0.1:port; returns the status (0: no answer) and the whole
 * answer, headers included, in *ret (xmalloc'd). */
static int http10(int port, const char *method, const char *path, char **ret) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        char req[256], *buf = NULL;
        size_t len = 0;
        int fd = socket(AF_INET, SOCK_STREAM, 0), status = 0;
        *ret = xstrdup("");
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                close(fd);
                return 0;
        }
        int n = snprintf(req, sizeof(req), "%s %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", method, path);
        ASSERT_EQ(write(fd, req, (size_t) n), n);
        char chunk[4096];
        ssize_t got;
        while ((got = read(fd, chunk, sizeof(chunk))) > 0) {
                buf = xrealloc(buf, len + (size_t) got + 1);
                memcpy(buf + len, chunk, (size_t) got);
                len += (size_t) got;
                buf[len] = 0;
        }
        close(fd);
        if (buf && sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
                status = 0;
        free(*ret);
        *ret = buf ? buf : xstrdup("");
        return status;
}

/* nodeagent serves /metrics only where it is told, only on loopback, with every family
 * present from the start, and counts a reconnect to the broker. */
TEST_FULL(metrics_served_on_loopback_and_count_reconnects, 90) {
        amqptest_need_broker();
        static const char *const refused[][2] = {
                { "0.0.0.0:9464", "not a loopback address" },
                { "192.0.2.1:9464", "not a loopback address" },
                { "[::]:9464", "not a loopback address" },
                { "127.0.0.1", "is not ADDRESS:PORT" },
                { "127.0.0.1:0", "is not ADDRESS:PORT" },
                { "localhost:9464", "is not ADDRESS:PORT" },
        };
        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                char extra[128], err[512] = "";
                struct agent_config cfg;
                snprintf(extra, sizeof(extra), "[metrics]\nlisten = %s\n", refused[i][0]);
                write_conf(extra);
                ASSERT_TRUE(agent_config_load(conf_path, &cfg, err, sizeof(err)) < 0);
                ASSERT_CONTAINS(err, refused[i][1]);
                ASSERT_CONTAINS(err, "[metrics] listen");
        }

        px_start();
        int port = free_port();
        write_conf(NULL);
        FILE *f = fopen(conf_path, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\nlog_level = debug\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:%d/\n"
                   "[metrics]\nlisten = 127.0.0.1:%d\n", node_id, px.port, port);
        fclose(f);
        start_agent();
        struct client c = { 0 };
        client_open(&c);
        wait_agent_ready(&c);

        _cleanup_free_ char *m = NULL;
        ASSERT_EQ(http10(port, "GET", "/metrics", &m), 200);
        ASSERT_CONTAINS(m, "Content-Type: text/plain; version=0.0.4");
        static const char *const families[] = {
                "paddock_agent_egress_applies_total{result=\"ok\"} 0\n",
                "paddock_agent_egress_applies_total{result=\"error\"} 0\n",
                "paddock_agent_egress_removes_total{result=\"ok\"} 0\n",
                "paddock_agent_egress_apply_seconds_bucket{le=\"0.005\"} 0\n",
                "paddock_agent_egress_apply_seconds_count 0\n",
                "paddock_agent_snapshots_total{result=\"error\"} 0\n",
                "paddock_agent_snapshot_seconds_bucket{le=\"+Inf\"} 0\n",
                "# TYPE paddock_agent_snapshot_seconds histogram\n",
                "\npaddock_agent_amqp_connected 1\n",
                "\npaddock_agent_amqp_reconnects_total 0\n",
                "\npaddock_agent_egress_chains 0\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(families); i++)
                ASSERT_CONTAINS(m, families[i]);
        free(m);
        ASSERT_EQ(http10(port, "POST", "/metrics", &m), 405);
        free(m);
        ASSERT_EQ(http10(port, "GET", "/", &m), 404);
        free(m);
        m = NULL;

        /* The broker connection drops: the agent reconnects and says so. */
        px.cut = 1;
        bool seen = false;
        for (int i = 0; i < 150 && !seen; i++) {
                usleep(100000);
                free(m);
                m = NULL;
                http10(port, "GET", "/metrics", &m);
                seen = strstr(m, "\npaddock_agent_amqp_reconnects_total 1\n") && strstr(m, "\npaddock_agent_amqp_connected 1\n");
        }
        if (!seen)
                test_fail(__FILE__, __LINE__, "no reconnect counted 15 s after the connection was cut: %s", m);
        wait_agent_ready(&c);
        client_close(&c);
}

/* ------------------------------------------------------------------ privilege separation */

/* One "Key:\tvalue" line of /proc/<pid>/status, or "" when absent. */
static void proc_status(pid_t pid, const char *key, char *out, size_t outlen) {
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        out[0] = 0;
        FILE *f = fopen(path, "r");
        if (!f)
                return;
        size_t kl = strlen(key);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
                        char *v = line + kl + 1;
                        while (*v == '\t' || *v == ' ')
                                v++;
                        v[strcspn(v, "\n")] = 0;
                        snprintf(out, outlen, "%s", v);
                        break;
                }
        fclose(f);
}

/* The child of parent whose comm is name, or 0. */
static pid_t find_child(pid_t parent, const char *name) {
        char path[96], buf[4096] = "";
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int) parent, (int) parent);
        FILE *f = fopen(path, "r");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        for (char *t = strtok(buf, " \n"); t; t = strtok(NULL, " \n")) {
                pid_t c = (pid_t) atoi(t);
                char comm[64] = "";
                snprintf(path, sizeof(path), "/proc/%d/comm", (int) c);
                FILE *cf = fopen(path, "r");
                if (!cf)
                        continue;
                if (fgets(comm, sizeof(comm), cf))
                        comm[strcspn(comm, "\n")] = 0;
                fclose(cf);
                if (strcmp(comm, name) == 0)
                        return c;
        }
        return 0;
}

TEST_FULL(parent_holds_no_capabilities_and_a_dead_child_stops_it, 60) {
        struct client c = { 0 };
        amqptest_need_broker();
        if (geteuid() != 0)
                TEST_SKIP("needs root to see capabilities dropped");
        write_conf(NULL);
        start_agent();
        client_open(&c);
        wait_agent_ready(&c);

        /* While it serves requests, the process that reads the network holds nothing. */
        char v[128];
        for (int i = 0; i < 3; i++) {
                char corr[32];
                _cleanup_free_ char *r = NULL;
                snprintf(corr, sizeof(corr), "caps-%d", i);
                ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", corr, &r), 0);
                ASSERT_CONTAINS(r, "\"ok\":true");
                static const char *const zero_sets[] = { "CapEff", "CapPrm", "CapInh", "CapAmb" };
                for (size_t k = 0; k < ELEMENTSOF(zero_sets); k++) {
                        proc_status(agent_pid, zero_sets[k], v, sizeof(v));
                        ASSERT_STREQ(v, "0000000000000000");
                }
                proc_status(agent_pid, "NoNewPrivs", v, sizeof(v));
                ASSERT_STREQ(v, "1");
        }
        /* Without [egress] enable there is no egress process; the docker process holds nothing either. */
        ASSERT_EQ(find_child(agent_pid, "agent-egress"), 0);
        pid_t docker = find_child(agent_pid, "agent-docker");
        ASSERT_TRUE(docker > 0);
        proc_status(docker, "CapEff", v, sizeof(v));
        ASSERT_STREQ(v, "0000000000000000");

        /* A dead child: the agent stops consuming (its queue goes, publishes come back
         * unroutable) and exits non-zero so that systemd restarts it. */
        ASSERT_EQ(kill(docker, SIGKILL), 0);
        int status = 0;
        pid_t w = 0;
        for (int i = 0; i < 100 && w == 0; i++) {
                w = waitpid(agent_pid, &status, WNOHANG);
                if (w == 0)
                        usleep(50000);
        }
        ASSERT_EQ(w, agent_pid);
        agent_pid = 0;
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_NE(WEXITSTATUS(status), 0);
        ASSERT_EQ(publish_until_returned(&c, node_id, "after-death"), 1);
        _cleanup_free_ char *log = NULL;
        char *cat[] = { "cat", log_path, NULL };
        ASSERT_EQ(test_run_capture(cat, &log, 1 << 20), 0);
        ASSERT_CONTAINS(log, "docker process was killed by signal 9");
        ASSERT_CONTAINS(log, "no longer consuming");
        client_close(&c);
}

static long vm_hwm_kb(pid_t pid) {
        char v[128];
        proc_status(pid, "VmHWM", v, sizeof(v));
        return atol(v);
}

TEST_FULL(oversized_message_is_refused_before_its_body_is_read, 60) {
        struct client c = { 0 };
        amqptest_need_broker();
        write_conf(NULL);
        start_agent();
        client_open(&c);
        wait_agent_ready(&c);
        long before = vm_hwm_kb(agent_pid);
        ASSERT_TRUE(before > 0);
        /* 24 MiB: the agent reads it off the socket frame by frame and keeps none of it. */
        size_t n = 24u << 20;
        _cleanup_free_ char *big = xmalloc(n + 1);
        memset(big, ' ', n);
        big[n] = 0;
        _cleanup_free_ char *r = NULL;
        ASSERT_EQ(publish(&c, node_id, big, "too-big", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":false");
        ASSERT_CONTAINS(r, "message too large");
        ASSERT_CONTAINS(r, node_id);
        long after = vm_hwm_kb(agent_pid);
        if (after - before > 4096)
                test_fail(__FILE__, __LINE__, "the agent's peak RSS grew by %ld KiB for a refused message", after - before);
        /* Just at the limit is read and answered (the JSON layer refuses it, not the size check). */
        free(r);
        r = NULL;
        big[1u << 20] = 0;
        ASSERT_EQ(publish(&c, node_id, big, "at-limit", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":false");
        ASSERT_FALSE(strstr(r, "message too large"));
        free(r);
        r = NULL;
        ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", "after-big", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":true");
        client_close(&c);
}

/* Network + mount namespace of the test's own, an /etc/hosts of its making, and the
 * egress process started in it (as a child of this test process) with stderr in a file. */
static char egress_log[512];

static void egress_setup(const char *hosts_text) {
        netns_with_hosts(hosts_text);
        snprintf(egress_log, sizeof(egress_log), "%s/egress.log", test_tmpdir());
        int fd = open(egress_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ASSERT_TRUE(fd >= 0);
        ASSERT_TRUE(dup2(fd, STDERR_FILENO) >= 0);
        close(fd);
        static struct agent_config cfg;
        cfg = egress_cfg("n-egress");
        egress_init_or_skip(&cfg);
}

/* egress_setup with stderr kept (the agent's log and our failures stay visible);
 * *ret_home and *ret_ns: the network namespace the test started in, and its own. */
static void egress_setup_visible(const char *hosts_text, int *ret_home, int *ret_ns) {
        int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(home >= 0);
        int saved_err = dup(STDERR_FILENO);
        egress_setup(hosts_text);
        dup2(saved_err, STDERR_FILENO);
        close(saved_err);
        int ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(ns >= 0);
        *ret_home = home;
        *ret_ns = ns;
}

#define SBX "0123456789abcdef01234567"

TEST(egress_child_holds_only_net_admin_and_refuses_malformed_requests) {
        egress_setup("");
        pid_t child = privsep_child_pid(PS_CHILD_EGRESS);
        ASSERT_TRUE(child > 0);
        char v[128];
        proc_status(child, "CapEff", v, sizeof(v));
        ASSERT_STREQ(v, "0000000000001000");    /* CAP_NET_ADMIN alone */
        proc_status(child, "NoNewPrivs", v, sizeof(v));
        ASSERT_STREQ(v, "1");

        /* Raw bytes down the socketpair: a well-formed-looking apply whose sandbox id is not
         * terminated, one with a mode out of range, and one cut short. None is applied. */
        struct ps_result res;
        _cleanup_free_ struct ps_egress_apply *m = xnew0(struct ps_egress_apply, 1);
        m->hdr = (struct ps_hdr) { .version = PS_VERSION, .type = PS_EGRESS_APPLY, .len = sizeof(*m), .seq = 41 };
        memcpy(m->sandbox_id, SBX, 24);
        m->sandbox_id[24] = 'f';
        m->mode = PJ_EGRESS_OPEN;
        m->ip = 0xa9fe5a07;
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, sizeof(*m), &res), -EBADMSG);
        ASSERT_CONTAINS(res.msg, "sandbox_id");
        m->sandbox_id[24] = 0;
        m->mode = 77;
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, sizeof(*m), &res), -EBADMSG);
        ASSERT_CONTAINS(res.msg, "mode 77");
        m->mode = PJ_EGRESS_OPEN;
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, 100, &res), -EBADMSG);
        _cleanup_free_ char *dump = nft_dump();
        ASSERT_FALSE(strstr(dump, "sbx_" SBX));
        _cleanup_free_ char *log = NULL;
        char *cat[] = { "cat", egress_log, NULL };
        ASSERT_EQ(test_run_capture(cat, &log, 1 << 20), 0);
        ASSERT_CONTAINS(log, "egress process refused a malformed request: sandbox_id");
        ASSERT_CONTAINS(log, "mode 77");

        /* The same message, well formed, is applied: the refusals were about the bytes. */
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, sizeof(*m), &res), 0);
        free(dump);
        dump = nft_dump();
        ASSERT_CONTAINS(dump, "sbx_" SBX);

        /* Killed, it is noticed: no egress change can be confirmed any more. */
        ASSERT_EQ(kill(child, SIGKILL), 0);
        char why[256] = "";
        for (int i = 0; i < 200 && privsep_healthy(why, sizeof(why)); i++)
                usleep(10000);
        ASSERT_FALSE(privsep_healthy(why, sizeof(why)));
        struct agent_config cfg = { .node_id = "n-egress", .egress_enabled = true };
        _cleanup_free_ char *reply = remove_sandbox(&cfg, SBX, "169.254.90.7");
        ASSERT_CONTAINS(reply, "\"ok\":false");
        ASSERT_CONTAINS(reply, "egress process is not running");
        /* The table stays as it was. */
        free(dump);
        dump = nft_dump();
        ASSERT_CONTAINS(dump, "sbx_" SBX);
}

TEST(allowlist_expansion_is_bounded_and_fails_closed) {
        /* many.paddock.test has 40 addresses (over the per-name cap); 40 names of 30
         * addresses each (under the per-name cap) add up past the whole table. */
        size_t cap = 64 * 1024, len = 0;
        _cleanup_free_ char *hosts = xmalloc(cap);
        for (int i = 0; i < 40; i++)
                len += (size_t) snprintf(hosts + len, cap - len, "10.9.0.%d many.paddock.test\n", i + 1);
        for (int h = 0; h < 40; h++)
                for (int i = 0; i < 30; i++)
                        len += (size_t) snprintf(hosts + len, cap - len, "10.%d.1.%d h%d.paddock.test\n", 10 + h, i + 1, h);
        ASSERT_TRUE(len < cap - 1);
        egress_setup(hosts);
        struct agent_config cfg = { .node_id = "n-egress", .egress_enabled = true };

        _cleanup_free_ char *a = apply_restricted(&cfg, SBX, "169.254.90.7", "\"169.254.77.10\",\"h1.paddock.test\"");
        ASSERT_CONTAINS(a, "\"ok\":true");
        _cleanup_free_ char *dump = nft_dump();
        ASSERT_CONTAINS(dump, "169.254.77.10");

        _cleanup_free_ char *b = apply_restricted(&cfg, SBX, "169.254.90.7", "\"many.paddock.test\"");
        ASSERT_CONTAINS(b, "\"ok\":false");
        ASSERT_CONTAINS(b, "many.paddock.test resolves to more than 32 addresses");

        /* 40 names x 30 addresses, then a literal: the old code wrote past its array here. */
        size_t blen = 0, bcap = 8192;
        _cleanup_free_ char *body = xmalloc(bcap);
        blen += (size_t) snprintf(body + blen, bcap - blen,
                                  "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SBX "\",\"ip\":\"169.254.90.7\","
                                  "\"mode\":\"restricted\",\"allow\":[");
        for (int h = 0; h < 40; h++)
                blen += (size_t) snprintf(body + blen, bcap - blen, "\"h%d.paddock.test\",", h);
        blen += (size_t) snprintf(body + blen, bcap - blen, "\"169.254.77.99\"]}");
        _cleanup_free_ char *c = agent_handle(&cfg, body, blen);
        ASSERT_CONTAINS(c, "\"ok\":false");
        ASSERT_CONTAINS(c, "more than 1024 addresses");
        /* Failed closed: the policy in force is the last one that was confirmed. */
        free(dump);
        dump = nft_dump();
        ASSERT_CONTAINS(dump, "169.254.77.10");
        ASSERT_FALSE(strstr(dump, "169.254.77.99"));
        ASSERT_FALSE(strstr(dump, "10.9.0."));
}

/* systemd's watchdog is fed on a timer: a queue that never goes idle must not starve it
 * (the agent used to ping only after a second without messages). */
TEST_FULL(watchdog_is_fed_while_busy, 60) {
        struct client c = { 0 };
        char npath[300];
        amqptest_need_broker();
        write_conf(NULL);
        int nfd = notify_socket_env("wd-notify.sock", SOCK_NONBLOCK, npath);
        setenv("WATCHDOG_USEC", "1000000", 1);     /* fed every 0.5 s */
        start_agent();
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        client_open(&c);
        wait_agent_ready(&c);

        char buf[256];
        while (recv(nfd, buf, sizeof(buf), 0) > 0)
                ;       /* what came before the flood */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int sent = 0;
        do {
                char corr[32];
                _cleanup_free_ char *r = NULL;
                snprintf(corr, sizeof(corr), "busy-%d", sent++);
                ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", corr, &r), 0);
                ASSERT_CONTAINS(r, "\"ok\":true");
                clock_gettime(CLOCK_MONOTONIC, &t1);
        } while (t1.tv_sec - t0.tv_sec < 3);
        int pings = 0;
        ssize_t n;
        while ((n = recv(nfd, buf, sizeof(buf) - 1, 0)) > 0) {
                buf[n] = 0;
                if (strstr(buf, "WATCHDOG=1"))
                        pings++;
        }
        close(nfd);
        /* About six in three seconds; the old idle-only feeding sent none. */
        if (pings < 4)
                test_fail(__FILE__, __LINE__, "%d watchdog pings during %d back-to-back requests in 3 s", pings, sent);
        client_close(&c);
}

/* ------------------------------------------------------------------ node.sync */

static struct agent_config sync_cfg;

/* sync_cfg: the shared [egress] configuration on an exchange and node id of the test's
 * own (paddock.test-<tag>-<pid>, n-<tag>-<pid>; exchange and nid hold them). */
static void sync_cfg_set(const char *tag, int64_t prefetch, char exchange[static 64], char nid[static 64]) {
        snprintf(exchange, 64, "paddock.test-%s-%d", tag, getpid());
        snprintf(nid, 64, "n-%s-%d", tag, getpid());
        sync_cfg = egress_cfg(nid);
        sync_cfg.amqp_url = "amqp://guest:guest@127.0.0.1:5672/";
        sync_cfg.exchange = exchange;
        sync_cfg.prefetch = prefetch;
}

static void *agent_thread(void *ud) {
        (void) ud;
        (void) agent_run(&sync_cfg);
        return NULL;
}

static bool nft_has_chain(int ns_fd, int home_fd, const char *id) {
        ASSERT_EQ(setns(ns_fd, CLONE_NEWNET), 0);
        _cleanup_free_ char *dump = nft_dump();
        ASSERT_EQ(setns(home_fd, CLONE_NEWNET), 0);
        char name[64];
        snprintf(name, sizeof(name), "\"sbx_%s\"", id);
        return strstr(dump, name) != NULL;
}

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
        static struct dns_query held[16];
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

/* An apply whose names resolve slowly holds up no other sandbox: another sandbox's apply
 * sent after it is answered (and enforced) first, and the slow one's sandbox has no chain
 * until its own apply completes. A remove sent for that sandbox meanwhile waits behind
 * the apply, so it is neither overtaken nor undone: no rules are left. With prefetch 3,
 * two applies may resolve at once: a third fails closed at once, with the reason, and
 * an apply without names still goes through. Ordering is all this asserts; "slow" is
 * a DNS answer the test withholds until it says so. */
TEST_FULL(slow_names_hold_up_no_other_sandbox_and_keep_its_order, 90) {
        amqptest_need_broker();
        int home, ns;
        egress_setup_visible("203.0.113.31 fast.paddock.test\n", &home, &ns);
        /* The agent's threads talk to RabbitMQ, and so to our resolver, from here (loopback). */
        ASSERT_EQ(setns(home, CLONE_NEWNET), 0);
        dns_start();

#define SLOW "dddddddddddddddddddddddd"
#define FAST "eeeeeeeeeeeeeeeeeeeeeeee"
        char exchange[64], nid[64];
        sync_cfg_set("async", 3, exchange, nid);
        /* A bound far beyond the test's own timeouts: only the order of events decides. */
        sync_cfg.egress_resolve_timeout_ms = 60000;
        _cleanup_free_ char *m0 = agent_metrics_render();
        double ok0 = metric_value(m0, "paddock_agent_egress_applies_total{result=\"ok\"} ");
        double n0 = metric_value(m0, "paddock_agent_egress_apply_seconds_count ");

        amqp_connection_state_t c = amqptest_connect(exchange);
        amqp_bytes_t rq = amqptest_queue(c);
        amqp_basic_consume(c, 1, rq, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(c).reply_type, AMQP_RESPONSE_NORMAL);
        pthread_t th;
        ASSERT_EQ(pthread_create(&th, NULL, agent_thread, NULL), 0);
        char corr[64];
        _cleanup_free_ char *body = NULL;
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

        kill(getpid(), SIGTERM);
        pthread_join(th, NULL);
        amqp_exchange_delete(c, 1, amqp_cstring_bytes(exchange), 0);
        amqp_bytes_free(rq);
        amqp_connection_close(c, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(c);
        close(ns);
        close(home);
#undef SLOW
#undef FAST
}
