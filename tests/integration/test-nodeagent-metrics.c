/* nodeagent's /metrics: the counters follow what the handler did, and the endpoint is served
 * on loopback and counts broker reconnects (through a TCP proxy of the test's own). */
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
                char extra[128];
                struct err err = { 0 };
                struct agent_config cfg;
                snprintf(extra, sizeof(extra), "[metrics]\nlisten = %s\n", refused[i][0]);
                write_conf(extra);
                ASSERT_TRUE(agent_config_load(conf_path, &cfg, &err) < 0);
                ASSERT_CONTAINS(err.message, refused[i][1]);
                ASSERT_CONTAINS(err.message, "[metrics] listen");
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
