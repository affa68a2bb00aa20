/* nodeagenttest.c — a nodeagent of the test's own and the helpers the test-nodeagent-*
 * programs share (nodeagenttest.h). */
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

pid_t agent_pid;
char node_id[64], conf_path[512], log_path[512];

void stop_agent(void *ud) {
        (void) ud;
        test_stop_child(&agent_pid);
}

void write_conf(const char *extra) {
        snprintf(node_id, sizeof(node_id), "test-node-%d", getpid());
        snprintf(conf_path, sizeof(conf_path), "%s/nodeagent.conf", test_tmpdir());
        snprintf(log_path, sizeof(log_path), "%s/nodeagent.log", test_tmpdir());
        FILE *f = fopen(conf_path, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\nlog_level = debug\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672/\n%s",
                node_id, extra ? extra : "");
        fclose(f);
}

void start_agent(void) {
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

/* A client publishing on exchange (NULL: the default, paddock.nodes). */
void client_open_on(struct client *c, const char *exchange) {
        client_open_as(c, exchange, "guest", "guest");
        c->user_id = NULL;
}

void client_open_as(struct client *c, const char *exchange, const char *user, const char *password) {
        c->exchange = exchange ? exchange : "paddock.nodes";
        c->user_id = user;
        c->conn = amqptest_connect_as(user, password, c->exchange);
        c->reply_q = amqptest_queue(c->conn);
        amqp_basic_consume(c->conn, 1, c->reply_q, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(c->conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_confirm_select(c->conn, 1);
        ASSERT_EQ(amqp_get_rpc_reply(c->conn).reply_type, AMQP_RESPONSE_NORMAL);
}

void client_open(struct client *c) {
        client_open_on(c, NULL);
}

void client_close(struct client *c) {
        amqp_bytes_free(c->reply_q);
        amqp_connection_close(c->conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(c->conn);
        memset(c, 0, sizeof(*c));
}

/* Publishes mandatory to routing key; returns 1 if the broker returned it (no route),
 * 0 if acked, and then waits for the reply body (xmalloc'd) when want_reply. */
int publish(struct client *c, const char *key, const char *body, const char *corr, char **ret_reply) {
        amqp_basic_properties_t p = { 0 };
        p._flags = AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_CONTENT_TYPE_FLAG;
        p.reply_to = c->reply_q;
        p.correlation_id = amqp_cstring_bytes(corr);
        p.content_type = amqp_cstring_bytes("application/json");
        if (c->user_id) {
                p._flags |= AMQP_BASIC_USER_ID_FLAG;
                p.user_id = amqp_cstring_bytes(c->user_id);
        }
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
void wait_agent_ready(struct client *c) {
        for (int i = 0; i < 200; i++) {
                _cleanup_free_ char *reply = NULL;
                if (publish(c, node_id, "{\"type\":\"ping\"}", "ready-probe", &reply) == 0)
                        return;
                usleep(50000);
        }
        test_fail(__FILE__, __LINE__, "nodeagent never bound its queue; see %s", log_path);
}

/* agent_egress_init(cfg), skipping the test where nftables netlink is not available. */
void egress_init_or_skip(struct agent_config *cfg) {
        struct err err = { 0 };
        int r = agent_egress_init(cfg, &err);
        if (r == -EPERM || r == -EPROTONOSUPPORT)
                TEST_SKIP("nftables netlink is not available here");
        if (r < 0)
                test_fail(__FILE__, __LINE__, "egress init: %s", err.message);
}

/* Publishes a ping to node until the broker returns it as unroutable (the node's queue is
 * gone), for up to 5 s; returns what the last publish returned (1: returned). */
int publish_until_returned(struct client *c, const char *node, const char *corr) {
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
int notify_socket_env(const char *name, int flags, char npath[static 300]) {
        snprintf(npath, 300, "%s/%s", test_tmpdir(), name);
        return test_notify_socket(npath, flags);
}

/* Rewrites the test's /etc/hosts in place (the bind mount follows the inode). */
void hosts_rewrite(const char *hosts_text) {
        char hosts[512];
        snprintf(hosts, sizeof(hosts), "%s/hosts", test_tmpdir());
        FILE *hf = fopen(hosts, "w");
        ASSERT_NOT_NULL(hf);
        fprintf(hf, "127.0.0.1 localhost\n%s", hosts_text);
        fclose(hf);
}

/* Into a network and mount namespace of the test's own, with an /etc/hosts of its making
 * ("127.0.0.1 localhost" and then hosts_text), visible only in that mount namespace. */
void netns_with_hosts(const char *hosts_text) {
        if (unshare(CLONE_NEWNET | CLONE_NEWNS) < 0)
                TEST_SKIP("cannot create network and mount namespaces here");
        hosts_rewrite(hosts_text);
        char hosts[512];
        snprintf(hosts, sizeof(hosts), "%s/hosts", test_tmpdir());
        ASSERT_EQ(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), 0);
        ASSERT_EQ(mount(hosts, "/etc/hosts", NULL, MS_BIND, NULL), 0);
}

/* The [egress] configuration the in-namespace tests share: table paddock, bridge pdkbr0. */
struct agent_config egress_cfg(char *node) {
        static char *bridges[] = { "pdkbr0", NULL };
        return (struct agent_config) { .node_id = node, .egress_enabled = true, .egress_table = "paddock",
                                       .egress_bridges = bridges, .egress_priority = -10 };
}

char *nft_dump(void) {
        char *argv[] = { "nft", "--json", "list", "table", "inet", "paddock", NULL };
        char *dump = NULL;
        ASSERT_EQ(test_run_capture(argv, &dump, 1 << 20), 0);
        return dump;
}

/* The agent's reply to an egress.apply restricting sandbox sbx at ip to allow. */
char *apply_restricted(const struct agent_config *cfg, const char *sbx, const char *ip, const char *allow) {
        _cleanup_free_ char *m = xasprintf(APPLY_RESTRICTED, sbx, ip, allow);
        return agent_handle(cfg, m, strlen(m));
}

/* The agent's reply to an egress.remove of sandbox sbx at ip. */
char *remove_sandbox(const struct agent_config *cfg, const char *sbx, const char *ip) {
        _cleanup_free_ char *m = xasprintf(REMOVE, sbx, ip);
        return agent_handle(cfg, m, strlen(m));
}

/* Network + mount namespace of the test's own, an /etc/hosts of its making, and the
 * egress process started in it (as a child of this test process) with stderr in a file. */
char egress_log[512];

void egress_setup(const char *hosts_text) {
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
void egress_setup_visible(const char *hosts_text, int *ret_home, int *ret_ns) {
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

struct agent_config sync_cfg;

/* sync_cfg: the shared [egress] configuration on an exchange and node id of the test's
 * own (paddock.test-<tag>-<pid>, n-<tag>-<pid>; exchange and nid hold them). */
void sync_cfg_set(const char *tag, int64_t prefetch, char exchange[static 64], char nid[static 64]) {
        snprintf(exchange, 64, "paddock.test-%s-%d", tag, getpid());
        snprintf(nid, 64, "n-%s-%d", tag, getpid());
        sync_cfg = egress_cfg(nid);
        sync_cfg.amqp_url = "amqp://guest:guest@127.0.0.1:5672/";
        sync_cfg.exchange = exchange;
        sync_cfg.prefetch = prefetch;
}

void *agent_thread(void *ud) {
        (void) ud;
        (void) agent_run(&sync_cfg);
        return NULL;
}

bool nft_has_chain(int ns_fd, int home_fd, const char *id) {
        ASSERT_EQ(setns(ns_fd, CLONE_NEWNET), 0);
        _cleanup_free_ char *dump = nft_dump();
        ASSERT_EQ(setns(home_fd, CLONE_NEWNET), 0);
        char name[64];
        snprintf(name, sizeof(name), "\"sbx_%s\"", id);
        return strstr(dump, name) != NULL;
}
