/* nodeagent against a real RabbitMQ: node-ID routing, replies, fail-fast when the agent is gone;
 * its config check; and its egress handlers programming real nftables. */
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

/* Issue 24: the agent obeyed any broker user that could publish to its queue. With [amqp]
 * controld_login it takes commands only from that login (RabbitMQ checks a message's user_id
 * against its publisher's login): a message from another user, saying its own user_id or
 * none, is refused and answered by nothing; controld's is answered. */
TEST_FULL(only_controlds_login_commands_the_agent, 90) {
        amqptest_need_broker();
        char ctl_user[64], node_user[64];
        snprintf(ctl_user, sizeof(ctl_user), "pdk-ctl-%d", (int) getpid());
        snprintf(node_user, sizeof(node_user), "pdk-node-%d", (int) getpid());
        amqptest_user_add(ctl_user, "ctl-pw-0a9f");
        amqptest_user_add(node_user, "node-pw-7c21");
        write_conf(NULL);       /* names node_id, conf_path and log_path; rewritten below */
        FILE *f = fopen(conf_path, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\nlog_level = debug\n[amqp]\nurl = amqp://%s:node-pw-7c21@127.0.0.1:5672/\n"
                   "controld_login = %s\n",
                node_id, node_user, ctl_user);
        fclose(f);
        start_agent();
        struct client ctl = { 0 }, other = { 0 };
        client_open_as(&ctl, NULL, ctl_user, "ctl-pw-0a9f");
        wait_agent_ready(&ctl);
        ASSERT_TRUE(test_log_has(log_path, 0, "commands count only from controld's broker login", 0));

        /* guest, without a user_id and then with its own: refused, no answer. */
        client_open(&other);
        for (int i = 0; i < 2; i++) {
                other.user_id = i ? "guest" : NULL;
                amqp_basic_properties_t p = { ._flags = AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG,
                                              .reply_to = other.reply_q, .correlation_id = amqp_cstring_bytes("spoof") };
                if (other.user_id) {
                        p._flags |= AMQP_BASIC_USER_ID_FLAG;
                        p.user_id = amqp_cstring_bytes(other.user_id);
                }
                ASSERT_EQ(amqp_basic_publish(other.conn, 1, amqp_cstring_bytes(other.exchange), amqp_cstring_bytes(node_id), 0,
                                             0, &p, amqp_cstring_bytes("{\"type\":\"ping\"}")),
                          AMQP_STATUS_OK);
        }
        ASSERT_TRUE(test_log_has(log_path, 0, "refusing a message not published by controld's login", 10));
        amqp_envelope_t env;
        struct timeval tv = { .tv_sec = 2 };
        amqp_maybe_release_buffers(other.conn);
        amqp_rpc_reply_t rr = amqp_consume_message(other.conn, &env, &tv, 0);
        if (rr.reply_type == AMQP_RESPONSE_NORMAL)
                test_fail(__FILE__, __LINE__, "the agent answered a message not from controld's login");
        /* controld's own still works. */
        _cleanup_free_ char *r = NULL;
        ASSERT_EQ(publish(&ctl, node_id, "{\"type\":\"ping\"}", "from-ctl", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":true");
        client_close(&other);
        client_close(&ctl);
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
        struct err err = { 0 };
        write_conf("typo_key = 1\n");
        ASSERT_TRUE(agent_config_load(conf_path, &cfg, &err) < 0);
        ASSERT_CONTAINS(err.message, "unknown key");
        FILE *f = fopen(conf_path, "w");
        fprintf(f, "[agent]\nnode_id = bad id!\n");
        fclose(f);
        ASSERT_TRUE(agent_config_load(conf_path, &cfg, &err) < 0);
        ASSERT_CONTAINS(err.message, "node_id");
        f = fopen(conf_path, "w");
        fprintf(f, "[agent]\nnode_id = ok\n[amqp]\nurl = http://nope\n");
        fclose(f);
        ASSERT_TRUE(agent_config_load(conf_path, &cfg, &err) < 0);
        ASSERT_CONTAINS(err.message, "amqp://");
        /* The shipped example is valid. */
        ASSERT_OK(agent_config_load("packaging/nodeagent.conf.example", &cfg, &err));
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
        srandom(test_seed(1)); /* 1: glibc's own default, the inputs this test always had */
        for (int i = 0; i < 2000; i++) {
                for (size_t k = 0; k < sizeof(junk); k++)
                        junk[k] = (char) (random() & 0xff);
                char *x = agent_handle(&cfg, junk, (size_t) (random() % sizeof(junk)));
                ASSERT_CONTAINS(x, "\"ok\":false");
                free(x);
        }
}

/* The agent's egress handlers program real nftables, inside a network namespace of the test's own. */
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
