/* Integration test: egress end to end through controld, RabbitMQ, a real nodeagent and
 * runsc containers.
 *
 *   sandbox containers (runsc-net)      host (root ns)                        world ns (ours)
 *   169.254.66.x on bridge pdkegt0 --> forward, masquerade --> egtw0 198.51.100.1 --- egtw1 198.51.100.2, .3
 *                                      route 203.0.113.0/24 via 198.51.100.2            lo 203.0.113.2
 *
 * Every target is in the world namespace this program makes (TCP listeners on PORT); the
 * host side only gets the veth and one route, and only after `ip route show` proved that
 * 198.51.100.0/24 and 203.0.113.0/24 are not routed anywhere already. The agent runs with
 * its own node id, exchange, nft table and bridge, so it never meets a dev stack's.
 *
 * Both drivers (test-controld-egress-nomad sets PADDOCK_DRIVER=nomad): on the Nomad driver
 * the test first starts a Nomad stand-in whose sandbox CNI networks all land on this test's
 * bridge (the test makes that Docker network, as a node's CNI config would), then the agent
 * with `node_id = nomad`, which asks the stand-in's /v1/agent/self for the node it runs on:
 * the allocations' NodeID must route its messages, or no create becomes ready.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>

#include "agenttest.h"
#include "apitest.h"
#include "amqptest.h"
#include "amqp.h"
#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"

#define PORT 18081
#define ECHO_PORT 18082
#define UDP_PORT 18083
#define BRIDGE "pdkegt0"

static char node_id[64], exchange[64], table[32], agent_conf[512], agent_log[512], udp_log[512];
static pid_t agent_pid, world_pid;

static int64_t now_ms_(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int run(char *const argv[]) {
        return test_run_capture(argv, NULL, 1 << 16);
}
#define RUN(...) run((char *const[]) { __VA_ARGS__, NULL })

/* ------------------------------------------------------------ the world namespace */

static void world_down(void *ud) {
        (void) ud;
        RUN("ip", "route", "del", "203.0.113.0/24", "via", "198.51.100.2");
        RUN("ip", "link", "del", "egtw0");
        if (world_pid > 0) {
                kill(world_pid, SIGKILL);
                waitpid(world_pid, NULL, 0);
        }
}

static bool route_free(const char *prefix) {
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "ip", "route", "show", "to", "match", (char *) prefix, NULL };
        if (test_run_capture(argv, &out, 1 << 16) != 0)
                return false;
        /* Only the default route may cover it. */
        for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (*l && strncmp(l, "default", 7) != 0)
                        return false;
        return true;
}

static int listen_on(const char *ip, uint16_t port);

static int listen_any(uint16_t port) {
        return listen_on(NULL, port);
}

/* The parent's side of a child's start: its one byte on the pipe p, 'K' when it is ready
 * (anything else, or nothing, fails the test). */
static void child_ready(int p[2]) {
        close(p[1]);
        char c = 0;
        ssize_t _unused_ n = read(p[0], &c, 1);
        close(p[0]);
        ASSERT_TRUE(c == 'K');
}

/* A child that unshares a network namespace, listens on PORT on every address there
 * (accepting and closing) and on ECHO_PORT (echoing, a process per connection, for
 * connections that stay open), and lives until the test does. */
static void world_up(void) {
        int p[2];
        ASSERT_TRUE(pipe(p) == 0);
        world_pid = fork();
        ASSERT_TRUE(world_pid >= 0);
        if (world_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                signal(SIGCHLD, SIG_IGN);
                char c = unshare(CLONE_NEWNET) < 0 ? 'E' : 'K';
                int fd = listen_any(PORT), efd = listen_any(ECHO_PORT), ufd = socket(AF_INET, SOCK_DGRAM, 0);
                struct sockaddr_in ua = { .sin_family = AF_INET, .sin_port = htons(UDP_PORT) };
                if (fd < 0 || efd < 0 || ufd < 0 || bind(ufd, (struct sockaddr *) &ua, sizeof(ua)) < 0)
                        c = 'E';
                ssize_t _unused_ w = write(p[1], &c, 1);
                for (;;) {
                        struct pollfd pf[3] = { { .fd = fd, .events = POLLIN }, { .fd = efd, .events = POLLIN },
                                                { .fd = ufd, .events = POLLIN } };
                        if (poll(pf, 3, -1) < 0)
                                continue;
                        if (pf[2].revents) {
                                /* Each datagram as a line "<source address> <payload>" in udp_log. */
                                char b[256], line[320];
                                struct sockaddr_in from;
                                socklen_t fl = sizeof(from);
                                ssize_t k = recvfrom(ufd, b, sizeof(b) - 1, 0, (struct sockaddr *) &from, &fl);
                                if (k > 0) {
                                        b[k] = 0;
                                        char src[INET_ADDRSTRLEN] = "";
                                        inet_ntop(AF_INET, &from.sin_addr, src, sizeof(src));
                                        int n = snprintf(line, sizeof(line), "%s %.*s\n", src, (int) strcspn(b, "\n"), b);
                                        int lf = open(udp_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
                                        if (lf >= 0) {
                                                ssize_t _unused_ lw = write(lf, line, (size_t) n);
                                                close(lf);
                                        }
                                }
                        }
                        if (pf[0].revents) {
                                int s = accept(fd, NULL, NULL);
                                if (s >= 0)
                                        close(s);
                        }
                        if (pf[1].revents) {
                                int s = accept(efd, NULL, NULL);
                                if (s >= 0 && fork() == 0) {
                                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                                        char b[256];
                                        ssize_t k;
                                        while ((k = read(s, b, sizeof(b))) > 0)
                                                if (write(s, b, (size_t) k) != k)
                                                        break;
                                        _exit(0);
                                }
                                if (s >= 0)
                                        close(s);
                        }
                }
        }
        child_ready(p);
        test_on_exit(world_down, NULL);
        char pid[16], ns[64];
        snprintf(pid, sizeof(pid), "%d", (int) world_pid);
        snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int) world_pid);
        ASSERT_EQ(RUN("ip", "link", "add", "egtw0", "type", "veth", "peer", "name", "egtw1"), 0);
        ASSERT_EQ(RUN("ip", "link", "set", "egtw1", "netns", pid), 0);
        ASSERT_EQ(RUN("ip", "addr", "add", "198.51.100.1/24", "dev", "egtw0"), 0);
        ASSERT_EQ(RUN("ip", "link", "set", "egtw0", "up"), 0);
        char netarg[80];
        snprintf(netarg, sizeof(netarg), "--net=%s", ns);
        ASSERT_EQ(RUN("nsenter", netarg, "ip", "addr", "add", "198.51.100.2/24", "dev", "egtw1"), 0);
        ASSERT_EQ(RUN("nsenter", netarg, "ip", "addr", "add", "198.51.100.3/24", "dev", "egtw1"), 0);
        ASSERT_EQ(RUN("nsenter", netarg, "ip", "link", "set", "egtw1", "up"), 0);
        ASSERT_EQ(RUN("nsenter", netarg, "ip", "link", "set", "lo", "up"), 0);
        ASSERT_EQ(RUN("nsenter", netarg, "ip", "addr", "add", "203.0.113.2/32", "dev", "lo"), 0);
        ASSERT_EQ(RUN("nsenter", netarg, "ip", "route", "add", "default", "via", "198.51.100.1"), 0);
        ASSERT_EQ(RUN("ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.2"), 0);
}

/* ------------------------------------------------------------ a name in the node's /etc/hosts */

static char test_name[64];

/* Sets (ip) or removes (NULL) the line of test_name in the node's /etc/hosts, in place:
 * the new content is written over the old from offset 0 and then cut to length, so
 * readers never see an empty file (/etc/hosts may be a bind mount: no rename). */
static void hosts_line(const char *name, const char *ip) {
        FILE *f = fopen("/etc/hosts", "r");
        ASSERT_NOT_NULL(f);
        size_t cap = 1 << 20, len;
        _cleanup_free_ char *old = xmalloc(cap);
        len = fread(old, 1, cap - 1, f);
        old[len] = 0;
        fclose(f);
        struct strbuf b;
        strbuf_init(&b, len + 128);
        char marker[96];
        snprintf(marker, sizeof(marker), "\t%s # test-controld-egress", name);
        for (char *l = old; l && *l;) {
                char *nl = strchr(l, '\n');
                size_t n = nl ? (size_t) (nl - l) + 1 : strlen(l);
                if (!memmem(l, n, marker, strlen(marker)))
                        strbuf_append(&b, l, n);
                l += n;
        }
        if (b.len && b.buf[b.len - 1] != '\n')
                strbuf_append(&b, "\n", 1);
        if (ip)
                strbuf_printf(&b, "%s%s\n", ip, marker);
        int fd = open("/etc/hosts", O_WRONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(pwrite(fd, b.buf, b.len, 0), (ssize_t) b.len);
        ASSERT_EQ(ftruncate(fd, (off_t) b.len), 0);
        close(fd);
        strbuf_done(&b);
}

static void hosts_set(const char *ip) {
        hosts_line(test_name, ip);
}

static void hosts_drop(void *ud) {
        (void) ud;
        hosts_set(NULL);
}

/* ------------------------------------------------------------ the agent */

static void agent_stop(void *ud) {
        (void) ud;
        test_stop_child(&agent_pid);
}

static void table_drop(void *ud) {
        (void) ud;
        RUN("nft", "delete", "table", "inet", table);
        RUN("nft", "delete", "table", "bridge", table);
}

/* On the Nomad driver: the stand-in the agent asks for its node id and controld places on. */
static struct nstandin standin;

/* More agent config for the next egt_start (the egress proxy, say). */
static const char *egt_agent_more = "";

static void agent_start(void) {
        agenttest_write_conf(agent_conf, ctld_nomad() ? "nomad" : node_id, exchange, ctld_nomad() ? standin.url : NULL,
                             "[egress]\nenable = true\ntable = %s\nbridges = " BRIDGE "\nresolve_interval = 1s\n%s", table,
                             egt_agent_more);
        agent_pid = agenttest_start(agent_conf, agent_log, "consuming node messages");
}

static void networks_drop(void *ud) {
        (void) ud;
        RUN("docker", "network", "rm", "paddock-egt", "paddock-egt-int");
}

static cJSON *node_sync_as(const char *node, const char *network, const char *user, const char *password,
                           bool want_reply);

/* What an agent of node `node` sends at start-up: node.sync to controld; returns the reply. */
static cJSON *node_sync(const char *node) {
        return node_sync_as(node, NULL, NULL, NULL, true);
}

/* The same, with the node's sandbox_network when network is not NULL. */
static cJSON *node_sync_saying(const char *node, const char *network) {
        return node_sync_as(node, network, NULL, NULL, true);
}

/* The same, logged in as user (with user_id = user; NULL: guest, no user_id). want_reply:
 * the reply, asserted; else NULL, asserting that none came within 5 s. */
static cJSON *node_sync_as(const char *node, const char *network, const char *user, const char *password,
                           bool want_reply) {
        amqp_connection_state_t conn = NULL;
        struct amqpx_url u;
        char body[256], url[256];
        struct err err = { 0 };
        snprintf(url, sizeof(url), "amqp://%s:%s@127.0.0.1:5672", user ? user : "guest", user ? password : "guest");
        ASSERT_EQ(amqpx_url_parse(url, &u, &err), 0);
        ASSERT_EQ(amqpx_connect(&u, "test-controld-egress", 0, 30, 5000, &conn, &err), 0);
        amqpx_url_done(&u);
        ASSERT_EQ(amqpx_channel_open_exchange(conn, 1, exchange, &err), 0);
        amqp_bytes_t queue = amqptest_queue(conn);
        amqp_basic_consume(conn, 1, queue, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        amqp_basic_properties_t pr = { ._flags = AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_APP_ID_FLAG,
                                       .reply_to = queue, .correlation_id = amqp_cstring_bytes("egt-sync-1"),
                                       .app_id = amqp_cstring_bytes(node) };
        if (user) {
                pr._flags |= AMQP_BASIC_USER_ID_FLAG;
                pr.user_id = amqp_cstring_bytes(user);
        }
        if (network)
                snprintf(body, sizeof(body), "{\"type\":\"node.sync\",\"node_id\":\"%s\",\"sandbox_network\":\"%s\"}", node,
                         network);
        else
                snprintf(body, sizeof(body), "{\"type\":\"node.sync\",\"node_id\":\"%s\"}", node);
        ASSERT_EQ(amqp_basic_publish(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("controld"), 0, 0, &pr,
                                     amqp_cstring_bytes(body)), 0);
        amqp_envelope_t env;
        struct timeval tv = { .tv_sec = want_reply ? 10 : 5 };
        amqp_rpc_reply_t x = amqp_consume_message(conn, &env, &tv, 0);
        if (!want_reply) {
                if (x.reply_type == AMQP_RESPONSE_NORMAL)
                        test_fail(__FILE__, __LINE__, "controld answered a node.sync for %s from %s", node, user ? user : "guest");
                amqp_bytes_free(queue);
                amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
                amqp_destroy_connection(conn);
                return NULL;
        }
        ASSERT_EQ(x.reply_type, AMQP_RESPONSE_NORMAL);
        ASSERT_TRUE(env.message.properties.correlation_id.len == 10 &&
                    !memcmp(env.message.properties.correlation_id.bytes, "egt-sync-1", 10));
        cJSON *j = cJSON_ParseWithLength(env.message.body.bytes, env.message.body.len);
        amqp_destroy_envelope(&env);
        amqp_bytes_free(queue);
        amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(conn);
        ASSERT_NOT_NULL(j);
        return j;
}

static bool live_has(const cJSON *reply, const char *id) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(reply, "live"))
                if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "sandbox_id")) ?: "", id))
                        return true;
        return false;
}

/* ------------------------------------------------------------ probes */

/* A TCP connect probe from inside sandbox id to ip:PORT: tries attempts of secs seconds
 * each. 0 when one connected, 7 when none did (anything else fails the test). */
static int connect_probe(struct ctld *c, const char *key, const char *id, const char *ip, int tries, int secs) {
        char path[96], body[512];
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        snprintf(body, sizeof(body),
                 "{\"cmd\":\"python3 -c \\\"import socket,sys\\nfor i in range(%d):\\n  try:\\n    "
                 "socket.create_connection(('%s',%d),%d); sys.exit(0)\\n  except Exception: pass\\nsys.exit(7)\\\"\"}",
                 tries, ip, PORT, secs);
        struct hres r;
        http_req(c, "POST", path, key, body, &r);
        if (r.status != 200)
                test_fail(__FILE__, __LINE__, "probe exec in %s -> %ld %.500s", id, r.status, r.body);
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        int code = (int) cJSON_GetNumberValue(cJSON_GetObjectItem(d, "exit_code"));
        hres_done(&r);
        if (code != 0 && code != 7)
                test_fail(__FILE__, __LINE__, "probe to %s exited %d (not a connect result)", ip, code);
        return code;
}

/* Whether sandbox id connects to ip:PORT: five tries of 2 s, so that a slow first connection
 * out of a sandbox just started on a loaded 2-core host is not taken for a block. When it
 * does not, the sandbox's GET /egress goes to stderr: its allowed/dropped counters tell
 * whether our rules dropped the packets or they were lost elsewhere. */
static void egress_diag(struct ctld *c, const char *key, const char *id, const char *ip) {
        char path[96];
        /* Routes, rules and neighbours first; the sandbox's own chain, its counters and the
         * agent's log last, where a truncated CI excerpt (which keeps the tail) still has them. */
        _cleanup_free_ char *log = NULL, *route = NULL, *fwd = NULL, *chain = NULL;
        char *tail[] = { "tail", "-n", "25", agent_log, NULL };
        (void) test_run_capture(tail, &log, 1 << 16);
        (void) test_run_capture((char *[]) { "ip", "route", "get", (char *) ip, NULL }, &route, 4096);
        (void) test_run_capture((char *[]) { "sh", "-c", "iptables -S FORWARD 2>&1 | head -n 20; ip neigh 2>&1 | head -n 20", NULL },
                                &fwd, 1 << 14);
        (void) test_run_capture((char *[]) { "nft", "list", "table", "inet", table, NULL }, &chain, 1 << 16);
        fprintf(stderr, "  ip route get %s: %s  FORWARD and neighbours:\n%s\n", ip, route ?: "", fwd ?: "");
        /* The chains, the sandbox addresses mapped to them and the test hosts' rules. */
        fprintf(stderr, "  table inet %s (chains, sandbox addresses, test hosts):\n", table);
        for (char *save = NULL, *l = chain ? strtok_r(chain, "\n", &save) : NULL; l; l = strtok_r(NULL, "\n", &save))
                if (strstr(l, id) || strstr(l, "198.51.100") || strstr(l, "169.254.66") || strstr(l, "policy") || strstr(l, "chain"))
                        fprintf(stderr, "    %s\n", l);
        fprintf(stderr, "  agent log (last 25 lines):\n%s\n", log ?: "");
        snprintf(path, sizeof(path), "/sandboxes/%s/egress", id);
        struct hres r;
        http_req(c, "GET", path, key, NULL, &r);
        fprintf(stderr, "  %s did not reach %s; GET %s: %ld %s\n", id, ip, path, r.status, r.body ?: "");
        hres_done(&r);
}

static bool reaches(struct ctld *c, const char *key, const char *id, const char *ip) {
        if (connect_probe(c, key, id, ip, 5, 2) == 0)
                return true;
        egress_diag(c, key, id, ip);
        return false;
}

/* Whether nothing from sandbox id gets through to ip:PORT: two tries of 1 s, both failing (a
 * drop is a drop; every blocked() stands beside a reaches() that proves the path works). */
static bool blocked(struct ctld *c, const char *key, const char *id, const char *ip) {
        return connect_probe(c, key, id, ip, 2, 1) == 7;
}

/* Runs cmd (no user input) in the sandbox; returns its exit code, stdout in *ret_out. */
static int run_in_sandbox(struct ctld *c, const char *key, const char *id, const char *cmd, char **ret_out) {
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        _cleanup_(cJSON_Deletep) cJSON *body = cJSON_CreateObject();
        cJSON_AddStringToObject(body, "cmd", cmd);
        _cleanup_free_ char *text = cJSON_PrintUnformatted(body);
        struct hres r;
        http_req(c, "POST", path, key, text, &r);
        ASSERT_EQ(r.status, 200);
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        int code = (int) cJSON_GetNumberValue(cJSON_GetObjectItem(d, "exit_code"));
        if (ret_out)
                *ret_out = xstrdup(hres_data_str(&r, "stdout") ?: "");
        hres_done(&r);
        return code;
}

/* The agent's allowed-packet counter of sandbox id, from GET /egress. */
static double allowed_packets(struct ctld *c, const char *key, const char *id) {
        _cleanup_json_ cJSON *ctr = sandbox_data_member(c, key, id, "/egress", "counters");
        ASSERT_TRUE(cJSON_IsObject(ctr));
        return cJSON_GetNumberValue(cJSON_GetObjectItem(ctr, "allowed_packets"));
}

static void create_expect(struct ctld *c, const char *key, const char *body, long status, char id[25]) {
        struct hres r;
        http_req(c, "POST", "/sandboxes", key, body, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "POST /sandboxes %s: %ld %s", body, r.status, r.body);
        if (id)
                snprintf(id, 25, "%s", hres_data_str(&r, "id") ? hres_data_str(&r, "id") : "");
        hres_done(&r);
}

static int count_containers(const char *label) {
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "docker", "ps", "-aq", "--filter", (char *) label, NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 1 << 16), 0);
        int n = 0;
        for (char *p = out; p && *p; p++)
                n += *p == '\n';
        return n;
}

static void hold_drop(void *ud) {
        char *argv[] = { "docker", "rm", "-f", ud, NULL };
        test_run_capture(argv, NULL, 1 << 16);
}

/* The Nomad stand-in, with the sandbox networks on this test's bridge: two client nodes, every
 * allocation on the second, whose agent the stand-in's /v1/agent/self is. The Docker network
 * is the test's to make here (a node's CNI config makes it under real Nomad). */
static void standin_up(void) {
        need_nstandin();
        RUN("docker", "network", "rm", "paddock-egt");
        ASSERT_EQ(RUN("docker", "network", "create", "--driver", "bridge", "--subnet", "169.254.66.0/24", "--gateway",
                      "169.254.66.1", "-o", "com.docker.network.bridge.name=" BRIDGE, "--label", "paddock.managed=1",
                      "paddock-egt"), 0);
        static const char *const args[] = {
                "--nodes", "2", "--agent-node", "1", "--placement", "node:1", "--net-map",
                "cni/sandbox-open=paddock-egt,cni/sandbox-restricted=paddock-egt,cni/sandbox-no-egress=none", NULL
        };
        nstandin_start(&standin, test_tmpdir(), args);
        _cleanup_(cJSON_Deletep) cJSON *self = nstandin_get(&standin, "/v1/agent/self");
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(self, "stats"), "client"), "node_id"));
        ASSERT_NOT_NULL(id);
        snprintf(node_id, sizeof(node_id), "%s", id);
}

/* Everything a test here needs: the world, the agent (with its own node id, exchange and
 * table), controld on this test's bridge (and, on the Nomad driver, the stand-in first).
 * Returns the API key of an account on plan "wide". */
/* More config for the next egt_start (a pool, say). */
static const char *egt_more = "";

static char *egt_start(struct ctld *c) {
        need_docker();
        agenttest_need(false);
        if (!route_free("198.51.100.0/24") || !route_free("203.0.113.0/24"))
                TEST_SKIP("198.51.100.0/24 or 203.0.113.0/24 is already routed on this host");

        int id4 = (int) (getpid() % 10000);
        agenttest_names("egt", id4, node_id, exchange, agent_conf, agent_log);
        snprintf(table, sizeof(table), "pegt%d", id4);
        snprintf(udp_log, sizeof(udp_log), "%s/world-udp.log", test_tmpdir());
        world_up();
        /* First in, last out: the networks go after every container on them. */
        test_on_exit(networks_drop, NULL);
        if (ctld_nomad())
                standin_up();
        test_on_exit(table_drop, NULL);
        test_on_exit(agent_stop, NULL);
        agent_start();

        char extra[2048];
        snprintf(extra, sizeof(extra),
                 "[docker]\nnetwork = paddock-egt\nsubnet = 169.254.66.0/24\ngateway = 169.254.66.1\nbridge = " BRIDGE "\n"
                 "network_internal = paddock-egt-int\nsubnet_internal = 169.254.67.0/24\nnode_id = %s\n"
                 "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\negress_timeout = 3s\n"
                 "[plan \"wide\"]\nmax_concurrent = 10\nregions = local\nmax_cpu = 1000\nmax_memory = 1024\nmax_disk = 5\n%s",
                 node_id, exchange, egt_more);
        if (ctld_nomad())
                ctld_start_nomad(c, &standin, NULL, NULL, extra);
        else
                ctld_start(c, NULL, extra);
        return ctld_account_key(c, "egress", "wide", NULL);
}

/* Nothing of sandbox id is left on the engine, and on the Nomad driver no job either. */
static void assert_nothing_left(const char *id) {
        char lbl[96];
        if (ctld_nomad()) {
                snprintf(lbl, sizeof(lbl), "label=com.hashicorp.nomad.job_id=sandbox-%s", id);
                ASSERT_EQ(count_containers(lbl), 0);
                /* It was placed (so "nothing" means removed) and its job purged. */
                char del[96];
                snprintf(del, sizeof(del), "/v1/job/sandbox-%s", id);
                ASSERT_GE(nstandin_count(&standin, "DELETE", del), 1);
                _cleanup_(cJSON_Deletep) cJSON *st = nstandin_state(&standin);
                const cJSON *j;
                char job[64];
                snprintf(job, sizeof(job), "sandbox-%s", id);
                cJSON_ArrayForEach(j, cJSON_GetObjectItem(st, "Jobs"))
                        ASSERT_FALSE(streq_const(cJSON_GetStringValue(cJSON_GetObjectItem(j, "ID")), job));
        } else {
                snprintf(lbl, sizeof(lbl), "label=paddock.sandbox=%s", id);
                ASSERT_EQ(count_containers(lbl), 0);
        }
}

TEST_FULL(egress_end_to_end, 900) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        int id4 = (int) (getpid() % 10000);
        char open_id[25], ip_id[25], cidr_id[25], deny_id[25], path[96];
        struct hres r;

        /* open reaches the test hosts; the control for every "blocked" below. */
        create_expect(&c, key, "{\"template\":\"python-3.11\"}", 201, open_id);
        ASSERT_TRUE(reaches(&c, key, open_id, "198.51.100.2"));
        ASSERT_TRUE(reaches(&c, key, open_id, "198.51.100.3"));
        ASSERT_TRUE(reaches(&c, key, open_id, "203.0.113.2"));

        /* restricted by IP and by CIDR: the allowed connect works, the others do not. */
        create_expect(&c, key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}",
                      201, ip_id);
        ASSERT_TRUE(reaches(&c, key, ip_id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, ip_id, "198.51.100.3"));
        ASSERT_TRUE(blocked(&c, key, ip_id, "203.0.113.2"));
        create_expect(&c, key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"203.0.113.0/24\"]}}",
                      201, cidr_id);
        ASSERT_TRUE(reaches(&c, key, cidr_id, "203.0.113.2"));
        ASSERT_TRUE(blocked(&c, key, cidr_id, "198.51.100.2"));

        /* deny_all reaches nothing. */
        create_expect(&c, key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}", 201, deny_id);
        ASSERT_TRUE(blocked(&c, key, deny_id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, deny_id, "203.0.113.2"));

        /* The always-deny set is refused, naming the entry. */
        HTTP_EXPECT_MSG(&c, "POST", "/sandboxes", key, "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"1.1.1.1\",\"10.1.0.0/16\"]}}", 400, "egress.allow[1] (\"10.1.0.0/16\")");
        snprintf(path, sizeof(path), "/sandboxes/%s/egress", open_id);
        HTTP_EXPECT_MSG(&c, "PUT", path, key, "{\"mode\":\"restricted\",\"allow\":[\"169.254.169.254\"]}", 400, "169.254.169.254");

        /* PUT takes effect: open -> restricted to one host. */
        http_req(&c, "PUT", path, key, "{\"mode\":\"restricted\",\"allow\":[\"198.51.100.3\"]}", &r);
        ASSERT_EQ(r.status, 200);
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "egress"), "mode")->valuestring, "restricted");
        ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(d, "block_outbound")));
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(d, "network_updated")));
        hres_done(&r);
        ASSERT_TRUE(reaches(&c, key, open_id, "198.51.100.3"));
        ASSERT_TRUE(blocked(&c, key, open_id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, open_id, "203.0.113.2"));
        /* GET /egress says what is in force and where. */
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "mode")->valuestring, "restricted");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "node")->valuestring, node_id);
        ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(d, "applied_at")));
        /* The agent's counters for this sandbox: the probes above were dropped, so some count. */
        cJSON *ctr = cJSON_GetObjectItem(d, "counters");
        ASSERT_TRUE(cJSON_IsObject(ctr));
        ASSERT_TRUE(cJSON_GetNumberValue(cJSON_GetObjectItem(ctr, "dropped_packets")) > 0);
        hres_done(&r);

        /* By hostname: a name in the node's /etc/hosts (the agent resolves it) for a world host. */
        snprintf(test_name, sizeof(test_name), "egt-%d.paddock.test", id4);
        test_on_exit(hosts_drop, NULL);
        hosts_set("198.51.100.2");
        char name_id[25], body[256], cmd[256];
        snprintf(body, sizeof(body), "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"%s\"]}}",
                 test_name);
        create_expect(&c, key, body, 201, name_id);
        ASSERT_TRUE(reaches(&c, key, name_id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, name_id, "198.51.100.3"));
        ASSERT_TRUE(blocked(&c, key, name_id, "203.0.113.2"));
        /* Inside, the allowlisted name resolves (platform-written /etc/hosts) ... */
        _cleanup_free_ char *out = NULL;
        snprintf(cmd, sizeof(cmd), "getent hosts %s", test_name);
        ASSERT_EQ(run_in_sandbox(&c, key, name_id, cmd, &out), 0);
        ASSERT_CONTAINS(out, "198.51.100.2");
        /* ... any other name does not, and the attempt sent nothing out: no resolver is
         * reachable from a restricted sandbox, so names cannot carry data out. */
        double before = allowed_packets(&c, key, name_id);
        snprintf(cmd, sizeof(cmd), "getent hosts exfil-%d.example.com", id4);
        ASSERT_TRUE(run_in_sandbox(&c, key, name_id, cmd, NULL) != 0);
        ASSERT_TRUE(run_in_sandbox(&c, key, name_id, "getent hosts example.org", NULL) != 0);
        ASSERT_EQ(allowed_packets(&c, key, name_id), before);
        /* GET /egress: what the name resolved to and when, the node, when applied. */
        snprintf(path, sizeof(path), "/sandboxes/%s/egress", name_id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "node")->valuestring, node_id);
        ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(d, "applied_at")));
        cJSON *res0 = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "resolved"), 0);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(res0, "name")), test_name);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(res0, "addrs"), 0)), "198.51.100.2");
        ASSERT_NOT_NULL(cJSON_GetObjectItem(res0, "at"));
        _cleanup_free_ char *applied_before = xstrdup(cJSON_GetObjectItem(d, "applied_at")->valuestring);
        hres_done(&r);
        /* ... and a restarted controld still says so (kept in its store). */
        ctld_restart(&c);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "applied_at")->valuestring, applied_before);
        res0 = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "resolved"), 0);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(res0, "name")), test_name);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(res0, "addrs"), 0)), "198.51.100.2");
        hres_done(&r);
        /* The name moves: the agent's re-resolution timer (1 s here) moves the allowance. */
        hosts_set("198.51.100.3");
        int64_t moved_by = now_ms_() + 20000;
        while (blocked(&c, key, name_id, "198.51.100.3") && now_ms_() < moved_by)
                usleep(500000);
        ASSERT_TRUE(reaches(&c, key, name_id, "198.51.100.3"));
        ASSERT_TRUE(blocked(&c, key, name_id, "198.51.100.2"));
        /* ... and tells controld (egress.resolved): the sandbox's /etc/hosts and GET /egress follow. */
        snprintf(cmd, sizeof(cmd), "getent hosts %s", test_name);
        bool followed = false;
        for (int64_t until = now_ms_() + 15000; !followed && now_ms_() < until; usleep(500000)) {
                free(out);
                out = NULL;
                followed = run_in_sandbox(&c, key, name_id, cmd, &out) == 0 && strstr(out, "198.51.100.3");
        }
        ASSERT_TRUE(followed);
        http_req(&c, "GET", path, key, NULL, &r);
        d = cJSON_GetObjectItem(r.json, "data");
        res0 = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "resolved"), 0);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(res0, "addrs"), 0)), "198.51.100.3");
        hres_done(&r);
        hosts_set(NULL);

        /* The agent dies: creates that need it answer 503 within the deadline and leave nothing. */
        agenttest_kill(&agent_pid);
        const char *bodies[] = { "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}",
                                 "{\"template\":\"python-3.11\"}" };
        for (size_t i = 0; i < 2; i++) {
                int64_t t0 = now_ms_();
                http_req(&c, "POST", "/sandboxes", key, bodies[i], &r);
                int64_t took = now_ms_() - t0;
                ASSERT_EQ(r.status, 503);
                ASSERT_CONTAINS(hres_message(&r), "Egress policy could not be enforced: ");
                hres_done(&r);
                /* Not a speed check: it proves the create did not wait on the dead agent without
                 * bound. Placement (a runsc start, 25 s on a loaded CI host) plus the 3 s
                 * confirm deadline, with margin. */
                ASSERT_TRUE(took < 90000);
        }
        http_req(&c, "GET", "/sandboxes?status=failed", key, NULL, &r);
        cJSON *items = cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "data"), *it;
        ASSERT_EQ(cJSON_GetArraySize(items), 2);
        cJSON_ArrayForEach(it, items)
                assert_nothing_left(cJSON_GetObjectItem(it, "id")->valuestring);
        hres_done(&r);
        /* Sandboxes that were confirmed keep their rules with the agent gone. */
        ASSERT_TRUE(reaches(&c, key, ip_id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, ip_id, "198.51.100.3"));
        ASSERT_TRUE(reaches(&c, key, cidr_id, "203.0.113.2"));
        ASSERT_TRUE(blocked(&c, key, cidr_id, "198.51.100.2"));

        /* The node loses its firewall (a reboot), the agent comes back and asks for its
         * node's state: controld answers the live sandboxes and re-applies their policies. */
        ASSERT_EQ(RUN("nft", "delete", "table", "inet", table), 0);
        ASSERT_EQ(RUN("nft", "delete", "table", "bridge", table), 0);
        agent_start();
        _cleanup_(cJSON_Deletep) cJSON *sync = node_sync(node_id);
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(sync, "ok")));
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(sync, "node_id")), node_id);
        ASSERT_TRUE(live_has(sync, ip_id));
        ASSERT_TRUE(live_has(sync, cidr_id));
        ASSERT_TRUE(live_has(sync, open_id));
        ASSERT_FALSE(live_has(sync, deny_id));       /* no network: nothing to converge */
        int64_t until = now_ms_() + 20000;
        while (blocked(&c, key, ip_id, "198.51.100.2") && now_ms_() < until)
                usleep(500000);
        ASSERT_TRUE(reaches(&c, key, ip_id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, ip_id, "198.51.100.3"));
        ASSERT_TRUE(reaches(&c, key, cidr_id, "203.0.113.2"));
        ASSERT_TRUE(blocked(&c, key, cidr_id, "198.51.100.2"));
        ASSERT_TRUE(reaches(&c, key, open_id, "198.51.100.3"));   /* its PUT policy, not the create one */
        ASSERT_TRUE(blocked(&c, key, open_id, "198.51.100.2"));
        /* And creates work again. */
        create_expect(&c, key, "{\"template\":\"python-3.11\"}", 201, NULL);
}

/* The sandbox's address on its network, from the engine (static buffer): on the test's net. */
static const char *sandbox_ip(const char *id) {
        const char *ip = container_ip(id);
        ASSERT_TRUE(strncmp(ip, "169.254.66.", 11) == 0);
        return ip;
}

static void pause_or_resume(struct ctld *c, const char *key, const char *id, const char *what, const char *until) {
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s/%s", id, what);
        HTTP_EXPECT(c, "POST", path, key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(c, key, id, until, 120), until);
}

/* Whether udp_log has a line with payload (the world's UDP listener writes one per datagram). */
static bool udp_seen(const char *payload) {
        FILE *f = fopen(udp_log, "re");
        if (!f)
                return false;
        _cleanup_free_ char *log = xmalloc(1 << 16);
        size_t n = fread(log, 1, (1 << 16) - 1, f);
        fclose(f);
        log[n] = 0;
        char want[128];
        snprintf(want, sizeof(want), " %s\n", payload);
        return strstr(log, want) != NULL;
}

/* Sends one UDP datagram "payload" from sandbox id to 198.51.100.2:UDP_PORT. */
static void udp_send(struct ctld *c, const char *key, const char *id, const char *payload) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd),
                 "python3 -c \"import socket;socket.socket(socket.AF_INET,socket.SOCK_DGRAM).sendto(b'%s',('198.51.100.2',%d))\"",
                 payload, UDP_PORT);
        ASSERT_EQ(run_in_sandbox(c, key, id, cmd, NULL), 0);
}

/* Policy is keyed on the source address, and a sandbox runs with every capability inside
 * gVisor: one that gives its interface a neighbour's address and sends from it must get
 * nowhere (nor take the neighbour's replies by answering ARP for it). */
TEST_FULL(a_sandbox_cannot_send_as_another, 300) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        char victim[25], spoofer[25], vip[64], payload[64];
        int nonce = (int) getpid();
        create_expect(&c, key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}",
                      201, victim);
        create_expect(&c, key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"203.0.113.2\"]}}",
                      201, spoofer);
        snprintf(vip, sizeof(vip), "%s", sandbox_ip(victim));

        /* The control: the victim's datagrams arrive and are seen. */
        snprintf(payload, sizeof(payload), "victim-%d", nonce);
        int64_t until = now_ms_() + 20000;
        do
                udp_send(&c, key, victim, payload);
        while (!udp_seen(payload) && now_ms_() < until && (usleep(300000), true));
        ASSERT_TRUE(udp_seen(payload));

        /* The spoofer adds the victim's address to its interface (netlink, as `ip addr add`
         * does) and sends from it, several times. */
        char script[1536];
        snprintf(script, sizeof(script),
                 "import socket,struct,time\n"
                 "V='%s'\n"
                 "s=socket.socket(socket.AF_NETLINK,socket.SOCK_RAW,0)\n"
                 "a=socket.inet_aton(V)\n"
                 "b=struct.pack('=BBBBI',socket.AF_INET,32,0,0,socket.if_nametoindex('eth0'))+struct.pack('=HH',8,2)+a+"
                 "struct.pack('=HH',8,1)+a\n"
                 "s.send(struct.pack('=IHHII',16+len(b),20,0x605,1,0)+b)\n"
                 "r=s.recv(4096)\n"
                 "print('added',-struct.unpack('=i',r[16:20])[0])\n"
                 "u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                 "u.bind((V,0))\n"
                 "for i in range(10):\n"
                 "  try: u.sendto(b'spoof-%d',('198.51.100.2',%d))\n"
                 "  except OSError as e: print('send',e.errno)\n"
                 "  time.sleep(0.2)\n"
                 "print('sent')\n",
                 vip, nonce, UDP_PORT);
        size_t bl = 0;
        _cleanup_free_ char *b64 = base64_encode(script, strlen(script), &bl);
        _cleanup_free_ char *cmd = xasprintf("python3 -c \"import base64;exec(base64.b64decode('%s'))\"", b64);
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(run_in_sandbox(&c, key, spoofer, cmd, &out), 0);
        /* The attempt itself worked: the address is on its interface and the sends went out. */
        ASSERT_CONTAINS(out, "added 0");
        ASSERT_CONTAINS(out, "sent");
        usleep(1500 * 1000);
        snprintf(payload, sizeof(payload), "spoof-%d", nonce);
        ASSERT_FALSE(udp_seen(payload));

        /* The victim is unharmed: its own traffic, replies included, still flows. */
        ASSERT_TRUE(reaches(&c, key, victim, "198.51.100.2"));
        snprintf(payload, sizeof(payload), "victim2-%d", nonce);
        until = now_ms_() + 20000;
        do
                udp_send(&c, key, victim, payload);
        while (!udp_seen(payload) && now_ms_() < until && (usleep(300000), true));
        ASSERT_TRUE(udp_seen(payload));
        /* and the spoofer's own address still gets only what its policy allows */
        ASSERT_TRUE(reaches(&c, key, spoofer, "203.0.113.2"));
        ASSERT_TRUE(blocked(&c, key, spoofer, "198.51.100.2"));
}

/* Resume places the sandbox anew (under Nomad a new allocation, maybe elsewhere, with a new
 * address): the policy must hold at the new address, and the old address, now someone
 * else's, must not keep the sandbox's allowance. */
TEST_FULL(pause_resume_keeps_the_policy, 600) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        char id[25], path[96];
        create_expect(&c, key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}",
                      201, id);
        ASSERT_TRUE(reaches(&c, key, id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, id, "198.51.100.3"));
        char old_ip[64], old_container[128];
        snprintf(old_ip, sizeof(old_ip), "%s", sandbox_ip(id));
        snprintf(old_container, sizeof(old_container), "%s", container_name(id));

        pause_or_resume(&c, key, id, "pause", "paused");
        ASSERT_FALSE(docker_container_exists(old_container));
        /* Another workload takes the old address while the sandbox is paused (so the resumed
         * one must get a new address), and the sandbox's allowance did not stay behind on it. */
        static char hold[64];
        snprintf(hold, sizeof(hold), "egt-hold-%d", (int) getpid());
        test_on_exit(hold_drop, hold);
        char iparg[80];
        snprintf(iparg, sizeof(iparg), "--ip=%s", old_ip);
        const char *img = getenv("PADDOCK_PY_IMAGE") ? getenv("PADDOCK_PY_IMAGE") : "paddock/python-3.11:local";
        ASSERT_EQ(RUN("docker", "run", "-d", "--name", hold, "--network", "paddock-egt", iparg, "--label", "paddock.test=egress",
                      (char *) img, "sleep", "600"), 0);
        char probe[256];
        snprintf(probe, sizeof(probe),
                 "import socket,sys\nfor i in range(3):\n  try:\n    socket.create_connection(('198.51.100.2',%d),1); sys.exit(0)\n"
                 "  except Exception: pass\nsys.exit(7)", PORT);
        ASSERT_EQ(RUN("docker", "exec", hold, "python3", "-c", probe), 7);

        pause_or_resume(&c, key, id, "resume", "ready");
        ASSERT_TRUE(strcmp(sandbox_ip(id), old_ip) != 0);
        if (ctld_nomad())
                ASSERT_TRUE(strcmp(container_name(id), old_container) != 0);   /* a new allocation */
        ASSERT_TRUE(reaches(&c, key, id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, id, "198.51.100.3"));
        ASSERT_TRUE(blocked(&c, key, id, "203.0.113.2"));
        snprintf(path, sizeof(path), "/sandboxes/%s/egress", id);
        struct hres r;
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(d, "mode")), "restricted");
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(d, "node")), node_id);
        hres_done(&r);
        /* The old address still has nothing. */
        ASSERT_EQ(RUN("docker", "exec", hold, "python3", "-c", probe), 7);
}

/* A process in the sandbox that holds a TCP connection to ip:ECHO_PORT open and says in
 * /tmp/egt-conn-<tag> whether it still works: "ok N" after each echoed byte (one every
 * 0.3 s), "dead" after three unanswered ones (1 s each), "closed" when the peer ends it.
 * It connects with ten tries of 2 s (a fresh sandbox's first connection can be slow on a
 * loaded host), and says "no connection: <last error>" when none worked. */
static const char holder_py[] =
        "import socket, sys, time\n"
        "def say(t):\n"
        "    with open('/tmp/egt-conn-' + sys.argv[2], 'w') as f: f.write(t)\n"
        "err = ''\n"
        "for i in range(10):\n"
        "    try:\n"
        "        s = socket.create_connection((sys.argv[1], int(sys.argv[3])), 2); break\n"
        "    except OSError as e:\n"
        "        err = repr(e); time.sleep(1)\n"
        "else:\n"
        "    say('no connection: ' + err); sys.exit(0)\n"
        "s.settimeout(1)\n"
        "n = miss = 0\n"
        "while True:\n"
        "    try:\n"
        "        s.sendall(b'x')\n"
        "        if not s.recv(16):\n"
        "            say('closed'); break\n"
        "        n += 1; miss = 0; say('ok %d' % n)\n"
        "    except socket.timeout:\n"
        "        miss += 1\n"
        "        if miss >= 3:\n"
        "            say('dead'); break\n"
        "    except OSError:\n"
        "        say('closed'); break\n"
        "    time.sleep(0.3)\n";

static void holder_start(struct ctld *c, const char *key, const char *id, const char *ip, const char *tag) {
        char path[128], cmd[256];
        snprintf(path, sizeof(path), "/sandboxes/%s/files/tmp/egt-holder.py", id);
        HTTP_EXPECT(c, "PUT", path, key, holder_py, 204);
        snprintf(cmd, sizeof(cmd), "nohup python3 /tmp/egt-holder.py %s %s %d </dev/null >/dev/null 2>&1 &", ip, tag, ECHO_PORT);
        ASSERT_EQ(run_in_sandbox(c, key, id, cmd, NULL), 0);
}

/* The holder's last word (static buffer, "" before it said anything). */
static const char *holder_state(struct ctld *c, const char *key, const char *id, const char *tag) {
        static char st[64];
        char cmd[96];
        _cleanup_free_ char *out = NULL;
        snprintf(cmd, sizeof(cmd), "cat /tmp/egt-conn-%s 2>/dev/null", tag);
        (void) run_in_sandbox(c, key, id, cmd, &out);
        snprintf(st, sizeof(st), "%s", out ? out : "");
        return st;
}

/* Waits up to ms for the holder's state to start with want; returns the last state. */
static const char *holder_wait(struct ctld *c, const char *key, const char *id, const char *tag, const char *want, int ms) {
        const char *st = holder_state(c, key, id, tag);
        for (int64_t until = now_ms_() + ms; strncmp(st, want, strlen(want)) != 0 && now_ms_() < until; usleep(300000))
                st = holder_state(c, key, id, tag);
        return st;
}

/* PUT /egress that tightens the policy ends the open connections it now forbids (their
 * conntrack entries go): an established connection would otherwise ride on, since the
 * dispatch accepts established traffic before any policy. The allowed one goes on. */
TEST_FULL(tightening_ends_forbidden_connections, 600) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        char id[25], path[96];
        create_expect(&c, key, "{\"template\":\"python-3.11\"}", 201, id);
        holder_start(&c, key, id, "198.51.100.2", "a");
        holder_start(&c, key, id, "198.51.100.3", "b");
        static const char *const held[][2] = { { "a", "198.51.100.2" }, { "b", "198.51.100.3" } };
        for (size_t i = 0; i < ELEMENTSOF(held); i++) {
                const char *st = holder_wait(&c, key, id, held[i][0], "ok", 45000);
                if (strncmp(st, "ok", 2) != 0)
                        egress_diag(&c, key, id, held[i][1]);
                ASSERT_CONTAINS(st, "ok");
        }

        snprintf(path, sizeof(path), "/sandboxes/%s/egress", id);
        HTTP_EXPECT(&c, "PUT", path, key, "{\"mode\":\"restricted\",\"allow\":[\"198.51.100.3\"]}", 200);
        ASSERT_STREQ(holder_wait(&c, key, id, "a", "dead", 20000), "dead");
        /* The allowed connection still carries bytes (its count goes on rising). */
        char before[64];
        snprintf(before, sizeof(before), "%s", holder_state(&c, key, id, "b"));
        ASSERT_CONTAINS(before, "ok");
        usleep(1500000);
        const char *after = holder_state(&c, key, id, "b");
        ASSERT_CONTAINS(after, "ok");
        ASSERT_TRUE(strcmp(after, before) != 0);
}

/* Two deployments on one broker, each with its own exchange: an agent's node.sync is answered
 * by its own deployment's controld only. (Both once consumed one queue, paddock.controld, so
 * about half of B's syncs reached A, which knows none of B's sandboxes and answered "none".) */
TEST_FULL(node_sync_stays_within_its_deployment, 300) {
        need_docker();
        amqptest_need_broker();
        static struct ctld a, b;
        int id4 = (int) (getpid() % 10000);
        char ex_a[64], extra[256];
        snprintf(ex_a, sizeof(ex_a), "paddock.sqa-%d", id4);
        snprintf(exchange, sizeof(exchange), "paddock.sqb-%d", id4);
        snprintf(extra, sizeof(extra), "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n", ex_a);
        ctld_start(&a, NULL, extra);
        snprintf(extra, sizeof(extra), "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n", exchange);
        ctld_start(&b, NULL, extra);
        /* Both responders are consuming before the first sync is sent. */
        ASSERT_TRUE(test_log_has(a.log, 0, "node.sync responder consuming", 20));
        ASSERT_TRUE(test_log_has(b.log, 0, "node.sync responder consuming", 20));
        off_t from_a = test_log_end(a.log), from_b = test_log_end(b.log);
        for (int i = 0; i < 8; i++) {
                _cleanup_(cJSON_Deletep) cJSON *reply = node_sync("sq-node");
                ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(reply, "live")));
        }
        ASSERT_TRUE(test_log_has(b.log, from_b, "node.sync from node sq-node answered", 10));
        ASSERT_FALSE(test_log_has(a.log, from_a, "node.sync from node sq-node", 0));
}

/* The gVisor network mode of runtime runsc-net as this host's dockerd defines it: the value of
 * its last --network= argument ("sandbox", runsc's default, when none). */
static char *runtime_network_mode(void) {
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "docker", "info", "--format", "{{json .Runtimes}}", NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 1 << 20), 0);
        _cleanup_(cJSON_Deletep) cJSON *j = cJSON_Parse(out);
        const cJSON *a;
        const char *mode = "sandbox";
        cJSON_ArrayForEach(a, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "runsc-net"), "runtimeArgs")) {
                const char *v = cJSON_GetStringValue(a);
                if (v && !strncmp(v, "--network=", 10))
                        mode = v + 10;
        }
        return xstrdup(mode);
}

/* Issue 24: sandboxes fell back to gVisor's host network mode without a word. Now the mode is
 * read from the runtime (the local driver) or reported by each node's agent with node.sync
 * (Nomad), said in the journal and shown in /healthz; on this host it is whatever dockerd's
 * runsc-net is (services.sh picks host mode where runsc's netstack cannot start). A node.sync
 * from another node saying "host" lists that node. */
TEST_FULL(healthz_says_which_network_mode_sandboxes_run_with, 300) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        _cleanup_free_ char *want = runtime_network_mode();
        ASSERT_TRUE(test_log_has(agent_log, 0, "network mode ([agent] runtime_network = runsc-net)", 20));
        if (!strcmp(want, "host"))
                ASSERT_TRUE(test_log_has(agent_log, 0, "HOST network mode", 0));
        struct hres r;
        bool seen = false;
        for (int i = 0; i < 100 && !seen; i++) {
                http_req(&c, "GET", "/healthz", NULL, NULL, &r);
                ASSERT_EQ(r.status, 200);
                const cJSON *net = cJSON_GetObjectItem(r.json, "sandbox_network");
                ASSERT_NOT_NULL(net);
                const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(net, "mode"));
                /* On Nomad the mode comes with the agent's node.sync: until then, unknown. */
                seen = mode && !strcmp(mode, want);
                if (seen && !strcmp(want, "host") && ctld_nomad())
                        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(net, "host_nodes")), 1);
                hres_done(&r);
                if (!seen)
                        usleep(100000);
        }
        ASSERT_TRUE(seen);
        if (!strcmp(want, "host"))
                ASSERT_TRUE(test_log_has(c.log, 0, "HOST network mode", 0));

        /* A node that says host mode is listed, and a malformed report is refused. */
        _cleanup_(cJSON_Deletep) cJSON *reply = node_sync_saying("hn-node", "host");
        ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(reply, "live")));
        http_req(&c, "GET", "/healthz", NULL, NULL, &r);
        _cleanup_free_ char *hosts = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "sandbox_network"), "host_nodes"));
        ASSERT_CONTAINS(hosts, "\"hn-node\"");
        hres_done(&r);
        ASSERT_TRUE(test_log_has(c.log, 0, "on node hn-node run with gVisor's HOST network mode", 0));
        (void) key;
}

/* Issue 24: controld took a node's messages from whoever set app_id to that node. With [amqp]
 * node_login (here pdk-nl-{node}) only the node's own broker login counts: a node.sync from
 * guest naming the node is dropped unanswered, one from another node's login too, and the
 * node's own is answered. */
TEST_FULL(node_messages_count_only_from_the_nodes_login, 120) {
        need_docker();
        amqptest_need_broker();
        static struct ctld c;
        char node[32], login[64], other[64], extra[512];
        int id4 = (int) (getpid() % 10000);
        snprintf(node, sizeof(node), "nl-%d", id4);
        snprintf(login, sizeof(login), "pdk-nl-%s", node);
        snprintf(other, sizeof(other), "pdk-nl-nl-x%d", id4);
        amqptest_user_add(login, "nl-pw-3e7d");
        amqptest_user_add(other, "nl-pw-3e7d");
        snprintf(exchange, sizeof(exchange), "paddock.nl-%d", id4);
        snprintf(extra, sizeof(extra), "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\nnode_login = pdk-nl-{node}\n",
                 exchange);
        ctld_start(&c, NULL, extra);
        ASSERT_TRUE(test_log_has(c.log, 0, "node.sync responder consuming", 20));
        ASSERT_TRUE(test_log_has(c.log, 0, "node messages count only from each node's broker login (pdk-nl-{node})", 0));
        off_t from = test_log_end(c.log);
        ASSERT_NULL(node_sync_as(node, NULL, NULL, NULL, false));
        ASSERT_NULL(node_sync_as(node, NULL, other, "nl-pw-3e7d", false));
        ASSERT_TRUE(test_log_has(c.log, from, "dropped a message that is not a node.sync from the node it names", 0));
        _cleanup_(cJSON_Deletep) cJSON *reply = node_sync_as(node, NULL, login, "nl-pw-3e7d", true);
        ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(reply, "live")));
        ASSERT_TRUE(test_log_has(c.log, from, "answered", 10));
}

/* Whether the agent's table holds a chain for sandbox id. */
static bool chain_left(const char *id) {
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "nft", "list", "table", "inet", table, NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 4 << 20), 0);
        char name[40];
        snprintf(name, sizeof(name), "sbx_%s", id);
        return strstr(out, name) != NULL;
}

static void crash_at(struct ctld *c, const char *point, const char *method, const char *path, const char *key,
                     const char *body) {
        ctld_crash_at(c, point, method, path, key, body, 0);
}

/* The newest sandbox of the account (the one a killed create left), by its record. */
static void newest_sandbox(struct ctld *c, char id[25]) {
        ctld_newest_id(c, "sandboxes", id);
}

/* Issue 24's crash matrix (controld's part, both drivers): controld SIGKILLed after each step
 * of a create (recorded, placed, egress applied), of a destroy (workload removed) and of an
 * egress PUT (applied on the node, not recorded). After a restart: no container or Nomad job
 * and no nft chain is left of a sandbox that is not ready, every record is in a final state
 * with its reason, and the node enforces what the record says. */
TEST_FULL(controld_killed_mid_operation_leaves_nothing_behind, 600) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        /* Create, killed after each step: the record, the placement, the node's apply, the
         * /etc/hosts write of an allowlisted name. */
        snprintf(test_name, sizeof(test_name), "crash-%d.paddock.test", (int) getpid());
        hosts_set("198.51.100.2");
        test_on_exit(hosts_drop, NULL);
        char named[160];
        snprintf(named, sizeof(named), "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"%s\"]}}",
                 test_name);
        static const char *const create_points[] = { "create.recorded", "create.placed", "create.egress_applied",
                                                     "egress.hosts_written" };
        for (size_t i = 0; i < ELEMENTSOF(create_points); i++) {
                crash_at(&c, create_points[i], "POST", "/sandboxes", key, i == 3 ? named : "{\"template\":\"python-3.11\"}");
                char id[25], path[96];
                newest_sandbox(&c, id);
                snprintf(path, sizeof(path), "/sandboxes/%s", id);
                struct hres r;
                http_req(&c, "GET", path, key, NULL, &r);
                ASSERT_EQ(r.status, 200);
                if (strcmp(hres_data_str(&r, "status") ?: "", "failed") != 0)
                        test_fail(__FILE__, __LINE__, "after %s: %.400s", create_points[i], r.body);
                ASSERT_CONTAINS(r.body, "controld stopped while the sandbox was starting");
                hres_done(&r);
                assert_nothing_left(id);
                ASSERT_FALSE(chain_left(id));
        }

        /* Killed once the record says ready, before the answer: after the restart the sandbox
         * is ready, and its policy (the name's address only) holds. */
        crash_at(&c, "create.ready", "POST", "/sandboxes", key, named);
        char rd[25];
        newest_sandbox(&c, rd);
        ASSERT_STREQ(ctld_wait_status(&c, key, rd, "ready", 30), "ready");
        ASSERT_TRUE(reaches(&c, key, rd, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, rd, "198.51.100.3"));

        /* A destroy killed once the workload is gone: the reaper finishes it. */
        char d[25], path[96];
        create_expect(&c, key, "{\"template\":\"python-3.11\"}", 201, d);
        ASSERT_TRUE(chain_left(d));
        snprintf(path, sizeof(path), "/sandboxes/%s", d);
        crash_at(&c, "destroy.removed", "DELETE", path, key, NULL);
        ASSERT_STREQ(ctld_wait_status(&c, key, d, "destroyed", 60), "destroyed");
        assert_nothing_left(d);
        ASSERT_FALSE(chain_left(d));

        /* A PUT killed between the node's apply and the record: after the restart the node
         * enforces the recorded policy (open), not the one that was never recorded. */
        char o[25];
        create_expect(&c, key, "{\"template\":\"python-3.11\"}", 201, o);
        ASSERT_TRUE(reaches(&c, key, o, "198.51.100.2"));
        snprintf(path, sizeof(path), "/sandboxes/%s/egress", o);
        crash_at(&c, "egress.put.applied", "PUT", path, key, "{\"mode\":\"restricted\",\"allow\":[\"203.0.113.0/24\"]}");
        struct hres r;
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, "\"mode\":\"open\"");
        hres_done(&r);
        bool back = false;
        for (int i = 0; i < 10 && !back; i++)
                back = reaches(&c, key, o, "198.51.100.2");
        ASSERT_TRUE(back);
        ASSERT_TRUE(test_log_has(c.log, 0, "recorded policies re-applied", 0));

        /* A resume killed once placed, before the agent enforced anything: back to paused with
         * nothing running and no chain, and a resume afterwards works. */
        char p[25];
        create_expect(&c, key, "{\"template\":\"python-3.11\"}", 201, p);
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", p);
        HTTP_EXPECT(&c, "POST", path, key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(&c, key, p, "paused", 60), "paused");
        snprintf(path, sizeof(path), "/sandboxes/%s/resume", p);
        ctld_crash_at(&c, "resume.placed", "POST", path, key, NULL, 0);   /* answers once ready: no answer */
        ASSERT_STREQ(ctld_wait_status(&c, key, p, "paused", 30), "paused");
        /* Paused keeps no container (on Nomad its job stays, scaled to 0). */
        char lbl[96];
        if (ctld_nomad())
                snprintf(lbl, sizeof(lbl), "label=com.hashicorp.nomad.job_id=sandbox-%s", p);
        else
                snprintf(lbl, sizeof(lbl), "name=paddock-%s", p);
        ASSERT_EQ(count_containers(lbl), 0);
        ASSERT_FALSE(chain_left(p));
        HTTP_EXPECT(&c, "POST", path, key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(&c, key, p, "ready", 120), "ready");
        ASSERT_TRUE(reaches(&c, key, p, "198.51.100.2"));
}

/* The crash matrix's agent part: nodeagent SIGKILLed right after it enforced a create's policy
 * and before it confirmed it. The create fails closed (503) with nothing left running; once the
 * agent is back, its node.sync removes the chain it left, and creates work again. */
TEST_FULL(nodeagent_killed_mid_apply_leaves_nothing_behind, 300) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        test_stop_child(&agent_pid);
        setenv("PADDOCK_FAULT", "agent.apply.applied", 1);
        agent_start();
        unsetenv("PADDOCK_FAULT");
        pid_t dying = agent_pid;
        struct hres r;
        http_req(&c, "POST", "/sandboxes", key, "{\"template\":\"python-3.11\"}", &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_CONTAINS(hres_message(&r), "Egress policy could not be enforced");
        hres_done(&r);
        int st = 0;
        ASSERT_EQ(waitpid(dying, &st, 0), dying);
        ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        agent_pid = 0;
        char id[25];
        newest_sandbox(&c, id);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "failed", 30), "failed");
        assert_nothing_left(id);
        ASSERT_TRUE(chain_left(id));            /* what the killed agent enforced stays... */
        agent_start();
        bool gone = false;
        for (int i = 0; i < 200 && !gone; i++) {
                gone = !chain_left(id);         /* ...until its node.sync says the sandbox is not live */
                if (!gone)
                        usleep(100000);
        }
        ASSERT_TRUE(gone);
        char ok[25];
        create_expect(&c, key, "{\"template\":\"python-3.11\"}", 201, ok);
        ASSERT_TRUE(reaches(&c, key, ok, "198.51.100.2"));
}

/* One create of a burst, on a thread of its own: its answer. */
struct burst_create {
        struct ctld *c;
        const char *key;
        long status;
        char id[25], msg[300];
};

static void *burst_create_run(void *arg) {
        struct burst_create *x = arg;
        struct hres r;
        http_req(x->c, "POST", "/sandboxes", x->key,
                 "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}", &r);
        x->status = r.status;
        snprintf(x->id, sizeof(x->id), "%s", hres_data_str(&r, "id") ?: "");
        snprintf(x->msg, sizeof(x->msg), "%s", hres_message(&r) ?: "");
        hres_done(&r);
        return NULL;
}

/* The broker goes away in the middle of a burst of creates and comes back: each create is
 * either ready with its policy enforced or refused with a clear 503 leaving nothing behind;
 * the agent and controld reconnect by themselves and the next creates work. */
TEST_FULL(rabbitmq_restarted_during_a_burst_of_creates, 420) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        off_t from = test_log_end(agent_log);
        enum { N = 5 };
        struct burst_create b[N];
        pthread_t t[N];
        for (int i = 0; i < N; i++) {
                b[i] = (struct burst_create) { .c = &c, .key = key };
                ASSERT_EQ(pthread_create(&t[i], NULL, burst_create_run, &b[i]), 0);
        }
        usleep(400 * 1000);
        ASSERT_EQ(RUN("rabbitmqctl", "-n", "rabbit@localhost", "-q", "stop_app"), 0);
        sleep(2);
        ASSERT_EQ(RUN("rabbitmqctl", "-n", "rabbit@localhost", "-q", "start_app"), 0);
        int ready = 0, refused = 0;
        for (int i = 0; i < N; i++) {
                ASSERT_EQ(pthread_join(t[i], NULL), 0);
                if (b[i].status == 201)
                        ready++;
                else if (b[i].status == 503 && b[i].msg[0])
                        refused++;
                else
                        test_fail(__FILE__, __LINE__, "create during the broker restart: %ld %s", b[i].status, b[i].msg);
        }
        fprintf(stderr, "  during the restart: %d ready, %d refused with 503 (%s)\n", ready, refused, refused ? b[N - 1].msg : "");
        /* The agent reconnects and consumes again; then creates work again, by themselves. */
        ASSERT_TRUE(test_log_has(agent_log, from, "lost the RabbitMQ connection", 30));
        ASSERT_TRUE(test_log_has(agent_log, from, "consuming node messages", 60));
        char fresh[25] = "";
        int64_t until = now_ms_() + 60000;
        while (!fresh[0] && now_ms_() < until) {
                struct hres r;
                http_req(&c, "POST", "/sandboxes", key,
                         "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}", &r);
                if (r.status == 201)
                        snprintf(fresh, sizeof(fresh), "%s", hres_data_str(&r, "id") ?: "");
                else if (r.status != 503)
                        test_fail(__FILE__, __LINE__, "create after the restart: %ld %s", r.status, r.body);
                hres_done(&r);
                if (!fresh[0])
                        sleep(1);
        }
        ASSERT_TRUE(fresh[0] != 0);
        ASSERT_TRUE(reaches(&c, key, fresh, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, fresh, "198.51.100.3"));
        /* What became ready is enforced; what was refused left nothing (its record failed). */
        for (int i = 0; i < N; i++) {
                if (b[i].status == 201) {
                        ASSERT_TRUE(reaches(&c, key, b[i].id, "198.51.100.2"));
                        ASSERT_TRUE(blocked(&c, key, b[i].id, "198.51.100.3"));
                }
        }
        struct hres r;
        http_req(&c, "GET", "/sandboxes?limit=100", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        const cJSON *it;
        int seen = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "data")) {
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(it, "id"));
                const char *st = cJSON_GetStringValue(cJSON_GetObjectItem(it, "status"));
                ASSERT_NOT_NULL(id);
                seen++;
                if (st && (!strcmp(st, "failed") || !strcmp(st, "destroyed")))
                        assert_nothing_left(id);
                else
                        ASSERT_STREQ(st, "ready");
        }
        hres_done(&r);
        ASSERT_GE(seen, ready + 1);
}

/* A create, on a thread of its own: the sandbox stays placed-but-unconfirmed while it runs. */
struct bg_create {
        struct ctld *c;
        const char *key;
        long status;
        atomic_bool done;
};

static void *bg_create_run(void *arg) {
        struct bg_create *x = arg;
        struct hres r;
        http_req(x->c, "POST", "/sandboxes", x->key, "{}", &r);
        x->status = r.status;
        hres_done(&r);
        atomic_store(&x->done, true);
        return NULL;
}

/* A node.sync that reaches controld between a sandbox's placement and its agent's confirmation
 * must list that sandbox as live on the node: its chain may be on the node already, and an agent
 * told otherwise removes it, so the sandbox comes up "ready" with no way out. Here the node's
 * queue is bound but nobody answers, so the create waits out egress_timeout, which is the window. */
TEST_FULL(a_placed_sandbox_is_live_to_node_sync_before_it_is_ready, 180) {
        need_docker();
        amqptest_need_broker();
        static struct ctld c;
        int id4 = (int) (getpid() % 10000);
        char node[sizeof(node_id)], extra[512];
        snprintf(exchange, sizeof(exchange), "paddock.sqp-%d", id4);
        if (ctld_nomad()) {
                /* The node is the stand-in's (placement node:1), the network this test's bridge. */
                test_on_exit(networks_drop, NULL);
                standin_up();
                snprintf(node, sizeof(node), "%s", node_id);
                snprintf(extra, sizeof(extra), "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\negress_timeout = 6s\n",
                         exchange);
                ctld_start_nomad(&c, &standin, NULL, NULL, extra);
        } else {
                snprintf(node, sizeof(node), "sqp-%d", id4);
                snprintf(extra, sizeof(extra),
                         "[docker]\nnode_id = %s\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n"
                         "egress_timeout = 6s\n",
                         node, exchange);
                ctld_start(&c, NULL, extra);
        }
        ASSERT_TRUE(test_log_has(c.log, 0, "node.sync responder consuming", 20));
        _cleanup_free_ char *key = ctld_account_key(&c, "sqp", NULL, NULL);

        /* The node's agent queue: bound, never consumed. */
        amqp_connection_state_t conn = amqptest_connect(exchange);
        amqp_bytes_t q = amqptest_queue(conn);
        ASSERT_NOT_NULL(amqp_queue_bind(conn, 1, q, amqp_cstring_bytes(exchange), amqp_cstring_bytes(node), amqp_empty_table));

        struct bg_create x = { .c = &c, .key = key };
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, bg_create_run, &x), 0);
        /* The apply reaches the queue once the container runs and has its address (a container
         * start takes seconds on a loaded host: wait as long as the create is still going). */
        bool seen = false;
        for (int i = 0; i < 1200 && !seen && !atomic_load(&x.done); i++) {
                amqp_rpc_reply_t rr = { 0 };
                amqp_queue_declare_ok_t *d = amqp_queue_declare(conn, 1, q, 1, 0, 1, 1, amqp_empty_table);
                rr = amqp_get_rpc_reply(conn);
                ASSERT_EQ(rr.reply_type, AMQP_RESPONSE_NORMAL);
                seen = d && d->message_count > 0;
                if (!seen)
                        usleep(50 * 1000);
        }
        ASSERT_TRUE(seen);
        _cleanup_(cJSON_Deletep) cJSON *during = node_sync(node);
        const cJSON *live = cJSON_GetObjectItem(during, "live");
        ASSERT_EQ(cJSON_GetArraySize(live), 1);
        ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(cJSON_GetArrayItem(live, 0), "ip")));

        ASSERT_EQ(pthread_join(t, NULL), 0);
        /* Nobody confirmed: fail closed, and the failed sandbox is no longer live anywhere. */
        ASSERT_EQ(x.status, 503);
        _cleanup_(cJSON_Deletep) cJSON *after = node_sync(node);
        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(after, "live")), 0);
        amqp_bytes_free(q);
        amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(conn);
}

/* A networked warm pool member sits on the sandbox network with no policy: the node's
 * default drops everything it sends. Claimed as a restricted sandbox, its allowlist holds
 * from the first probe, and nothing else gets through. */
TEST_FULL(a_pooled_member_reaches_nothing_until_claimed, 600) {
        static struct ctld c;
        egt_more = "[pool \"py\"]\ntemplate = python-3.11\nsize = 1\nrefill_rate = 600\n";
        _cleanup_free_ char *key = egt_start(&c);
        _cleanup_free_ char *member = NULL;
        for (int i = 0; i < 1800; i++) {
                free(member);
                member = ctld_db_query(&c, "SELECT id FROM pool_members WHERE state = 'ready'");
                if (strlen(member) > 24)
                        break;
                usleep(100 * 1000);
        }
        ASSERT_TRUE(strlen(member) > 24);
        member[24] = 0;
        char probe[256];
        snprintf(probe, sizeof(probe),
                 "import socket,sys\nfor i in range(3):\n  try:\n    socket.create_connection(('198.51.100.2',%d),1); sys.exit(0)\n"
                 "  except Exception: pass\nsys.exit(7)", PORT);
        ASSERT_EQ(RUN("docker", "exec", container_name(member), "python3", "-c", probe), 7);

        char id[25];
        create_expect(&c, key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}",
                      201, id);
        ASSERT_STREQ(id, member);       /* the member, claimed */
        ASSERT_TRUE(reaches(&c, key, id, "198.51.100.2"));
        ASSERT_TRUE(blocked(&c, key, id, "198.51.100.3"));
        ASSERT_TRUE(blocked(&c, key, id, "203.0.113.2"));
}

/* Docker inside a sandbox: an inner container runs on the sandbox's own network (gVisor's;
 * `--network=host` inside), so the sandbox's policy holds for it as for any process there. */
TEST_FULL(docker_inside_a_sandbox_follows_its_policy, 300) {
        const char *image = getenv("PADDOCK_DOCKER_IMAGE") ? getenv("PADDOCK_DOCKER_IMAGE") : "paddock/docker:local";
        static char more[512];
        snprintf(more, sizeof(more),
                 "[template \"docker\"]\nimage = %s\nmemory = 1024\ndisk = 2\nstart = /usr/local/lib/paddock/start-dockerd\n", image);
        egt_more = more;
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        char id[25], url[128], hk[160];
        create_expect(&c, key, "{\"template\":\"docker\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.2\"]}}", 201, id);

        /* An image FROM scratch with the host's static busybox, built inside. */
        FILE *f = fopen("/bin/busybox", "rb");
        ASSERT_NOT_NULL(f);
        size_t cap = 8 << 20, len = 0, k;
        _cleanup_free_ char *bb = xmalloc(cap);
        while ((k = fread(bb + len, 1, cap - len, f)) > 0)
                len += k;
        fclose(f);
        ASSERT_TRUE(len > 0 && len < cap);
        ASSERT_EQ(run_in_sandbox(&c, key, id, "mkdir -p /root/ctx", NULL), 0);
        snprintf(url, sizeof(url), "/sandboxes/%s/files/root/ctx/busybox", id);
        snprintf(hk, sizeof(hk), "x-brimble-key: %s", key);
        const char *const headers[] = { hk, "content-type: application/octet-stream", NULL };
        struct hres r;
        http_req_full(&c, "PUT", url, headers, bb, len, &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);
        ASSERT_EQ(run_in_sandbox(&c, key, id,
                                 "cd /root/ctx && chmod 0755 busybox && printf 'FROM scratch\\nCOPY busybox /bin/busybox\\n' > Dockerfile && "
                                 "docker build -q -t probe . >/dev/null",
                                 NULL), 0);

        /* From an inner container: the allowed host answers, the others do not. Each probe
         * tries up to five times (a first connection out of a fresh sandbox may be slow). */
        char cmd[512];
        snprintf(cmd, sizeof(cmd),
                 "for i in 1 2 3 4 5; do docker run --rm --network=host probe /bin/busybox nc -w 2 198.51.100.2 %d </dev/null "
                 "&& exit 0; done; exit 7", PORT);
        if (run_in_sandbox(&c, key, id, cmd, NULL) != 0) {
                egress_diag(&c, key, id, "198.51.100.2");
                test_fail(__FILE__, __LINE__, "an inner container could not reach the allowed host");
        }
        const char *forbidden[] = { "198.51.100.3", "203.0.113.2" };
        for (size_t i = 0; i < ELEMENTSOF(forbidden); i++) {
                snprintf(cmd, sizeof(cmd),
                         "for i in 1 2 3; do docker run --rm --network=host probe /bin/busybox nc -w 1 %s %d </dev/null "
                         "&& exit 0; done; exit 7", forbidden[i], PORT);
                ASSERT_EQ(run_in_sandbox(&c, key, id, cmd, NULL), 7);
        }
        /* The sandbox itself agrees (the inner network is the sandbox's): bash's /dev/tcp. */
        snprintf(cmd, sizeof(cmd), "timeout 5 bash -c 'exec 3<>/dev/tcp/198.51.100.2/%d' && echo reached; "
                 "timeout 3 bash -c 'exec 3<>/dev/tcp/198.51.100.3/%d' 2>/dev/null || echo blocked", PORT, PORT);
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(run_in_sandbox(&c, key, id, cmd, &out), 0);
        ASSERT_STREQ(out, "reached\nblocked\n");
        ctld_stop(&c);
}

/* ------------------------------------------------------------ secrets through the egress proxy */

/* Test hosts for the proxy, in the world namespace: HTTPS on 443 and HTTP on 80 of
 * 198.51.100.2 ("api", a certificate of a CA the node trusts for the test), HTTPS on 443 of
 * 198.51.100.3 ("bad", a certificate of a CA nobody trusts) and of 203.0.113.2 ("plain", no
 * rules: reached directly). Each request head they get is appended to world-http.log as
 * "<listener> <head>" so the test sees what arrived; each answers 200 "ok". */
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include "e2btest.h"
#include "tlstest.h"

static pid_t recorder_pid;
static char http_log[512];

static void recorder_stop(void *ud) {
        (void) ud;
        test_stop_child(&recorder_pid);
}

/* A listener on ip (NULL: every address) and port, or -1. */
static int listen_on(const char *ip, uint16_t port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
        if (ip)
                inet_pton(AF_INET, ip, &a.sin_addr);
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(fd, 128) < 0)
                return -1;
        return fd;
}

/* One connection: request heads (keep-alive) with their Content-Length bodies, each logged. */
static void recorder_serve(int fd, SSL_CTX *ctx, const char *name) {
        SSL *ssl = NULL;
        struct timeval tv = { .tv_sec = 10 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (ctx) {
                ssl = SSL_new(ctx);
                SSL_set_fd(ssl, fd);
                if (SSL_accept(ssl) != 1) {
                        SSL_free(ssl);
                        return;
                }
        }
        char buf[65536];
        size_t have = 0;
        for (;;) {
                char *end = memmem(buf, have, "\r\n\r\n", 4);
                if (!end) {
                        if (have == sizeof(buf))
                                break;
                        int k = ssl ? SSL_read(ssl, buf + have, (int) (sizeof(buf) - have))
                                    : (int) read(fd, buf + have, sizeof(buf) - have);
                        if (k <= 0)
                                break;
                        have += (size_t) k;
                        continue;
                }
                size_t head = (size_t) (end - buf) + 4, body = 0;
                const char *cl = strcasestr(buf, "\r\ncontent-length:");
                if (cl && cl < end)
                        body = strtoul(cl + 17, NULL, 10);
                while (have < head + body && have < sizeof(buf)) {
                        int k = ssl ? SSL_read(ssl, buf + have, (int) (sizeof(buf) - have))
                                    : (int) read(fd, buf + have, sizeof(buf) - have);
                        if (k <= 0)
                                goto out;
                        have += (size_t) k;
                }
                int lf = open(http_log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
                if (lf >= 0) {
                        dprintf(lf, "%s %.*s\n", name, (int) (head + body), buf);
                        close(lf);
                }
                static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n";
                if ((ssl ? SSL_write(ssl, ok, sizeof(ok) - 1) : (int) write(fd, ok, sizeof(ok) - 1)) <= 0)
                        break;
                memmove(buf, buf + head + body, have - head - body);
                have -= head + body;
        }
out:
        if (ssl) {
                SSL_shutdown(ssl);
                SSL_free(ssl);
        }
}

static SSL_CTX *server_ctx(const struct tlstest *t) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
        if (!ctx || SSL_CTX_use_certificate_chain_file(ctx, t->cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(ctx, t->key, SSL_FILETYPE_PEM) != 1)
                return NULL;
        return ctx;
}

static void recorder_up(const struct tlstest *good, const struct tlstest *bad) {
        snprintf(http_log, sizeof(http_log), "%s/world-http.log", test_tmpdir());
        int p[2];
        ASSERT_EQ(pipe(p), 0);
        recorder_pid = fork();
        ASSERT_TRUE(recorder_pid >= 0);
        if (recorder_pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                signal(SIGCHLD, SIG_IGN);
                char ns[64], c = 'E';
                snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int) world_pid);
                int nfd = open(ns, O_RDONLY | O_CLOEXEC);
                SSL_CTX *gctx = server_ctx(good), *bctx = server_ctx(bad);
                int fds[4] = { -1, -1, -1, -1 };
                if (nfd >= 0 && setns(nfd, CLONE_NEWNET) == 0 && gctx && bctx) {
                        fds[0] = listen_on("198.51.100.2", 443);
                        fds[1] = listen_on("198.51.100.2", 80);
                        fds[2] = listen_on("198.51.100.3", 443);
                        fds[3] = listen_on("203.0.113.2", 443);
                        if (fds[0] >= 0 && fds[1] >= 0 && fds[2] >= 0 && fds[3] >= 0)
                                c = 'K';
                }
                ssize_t _unused_ w = write(p[1], &c, 1);
                static const char *const names[] = { "api-tls", "api-http", "bad-tls", "plain-tls" };
                for (;;) {
                        struct pollfd pf[4];
                        for (int i = 0; i < 4; i++)
                                pf[i] = (struct pollfd) { .fd = fds[i], .events = POLLIN };
                        if (poll(pf, 4, -1) < 0)
                                continue;
                        for (int i = 0; i < 4; i++) {
                                if (!pf[i].revents)
                                        continue;
                                int s = accept4(fds[i], NULL, NULL, SOCK_CLOEXEC);
                                if (s < 0)
                                        continue;
                                if (fork() == 0) {
                                        recorder_serve(s, i == 1 ? NULL : i == 2 ? bctx : gctx, names[i]);
                                        _exit(0);
                                }
                                close(s);
                        }
                }
        }
        child_ready(p);
        test_on_exit(recorder_stop, NULL);
}

static char *http_log_text(void) {
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "cat", http_log, NULL };
        (void) test_run_capture(argv, &out, 1 << 20);
        return xstrdup(out ?: "");
}

static void proxy_hosts_drop(void *ud) {
        (void) ud;
        hosts_line("api.egt.test", NULL);
        hosts_line("bad.egt.test", NULL);
}

/* A python one-liner run in the sandbox: an HTTP(S) request with header x-api-key: placeholder;
 * prints "<status> <body>" or "ERR <what urllib said>". */
static char *fetch_in(struct ctld *c, const char *key, const char *id, const char *url, int *ret_code) {
        char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "python3 -c \"import urllib.request as u, urllib.error as e\n"
                 "try:\n  r = u.urlopen(u.Request('%s', headers={'x-api-key': 'placeholder'}), timeout=15)\n"
                 "  print(r.status, r.read().decode().strip())\n"
                 "except e.HTTPError as x:\n  print(x.code, x.read().decode().strip())\n"
                 "except Exception as x:\n  print('ERR', x)\"",
                 url);
        char *out = NULL;
        *ret_code = run_in_sandbox(c, key, id, cmd, &out);
        return out;
}

/* fetch_in that must answer "200 ok"; otherwise the sandbox's /etc/hosts and the egress state
 * go to stderr before the test fails. */
static void fetch_ok_at(const char *file, int line, struct ctld *c, const char *key, const char *id, const char *url) {
        int code;
        _cleanup_free_ char *out = fetch_in(c, key, id, url, &code);
        if (!strcmp(out, "200 ok\n"))
                return;
        _cleanup_free_ char *hosts = NULL;
        (void) run_in_sandbox(c, key, id, "cat /etc/hosts", &hosts);
        fprintf(stderr, "  %s answered %s  the sandbox's /etc/hosts:\n%s\n", url, out, hosts ?: "");
        egress_diag(c, key, id, "198.51.100.2");
        test_fail(file, line, "%s through the proxy: %s", url, out);
}
#define FETCH_OK(c, key, id, url) fetch_ok_at(__FILE__, __LINE__, c, key, id, url)

TEST_FULL(secrets_reach_their_hosts_only_through_the_node_proxy, 600) {
        static struct e2b e;
        struct ctld *cp = &e.c;
        int id4 = (int) (getpid() % 10000);
        e.port = 25000 + id4 % 1000;
        struct tlstest good, bad;
        tlstest_make(&good, test_tmpdir(), "egt-good", "DNS:api.egt.test,DNS:plain.egt.test");
        tlstest_make(&bad, test_tmpdir(), "egt-bad", "DNS:bad.egt.test");
        char keyfile[512], more[1024], agent_more[1024];
        snprintf(keyfile, sizeof(keyfile), "%s/secrets.key", test_tmpdir());
        FILE *kf = fopen(keyfile, "w");
        ASSERT_NOT_NULL(kf);
        fputs("0123456789abcdef0123456789abcdef-egress-proxy-test", kf);
        fclose(kf);
        snprintf(more, sizeof(more), "[secrets]\nkey_file = %s\n[e2b]\nlisten = 127.0.0.1:%d\nbase_template = python-3.11\n", keyfile, e.port);
        egt_more = more;
        /* The proxy trusts the test CA as a node's system store would trust a public one; at
         * most 4 connections per sandbox, so the flood below is cheap. */
        snprintf(agent_more, sizeof(agent_more),
                 "[proxy]\nenable = true\nport = %d\nupstream_ca_file = %s\nmax_connections_per_sandbox = 4\n"
                 "[metrics]\nlisten = 127.0.0.1:%d\n",
                 15100 + id4 % 800, good.ca, 26000 + id4 % 1000);
        egt_agent_more = agent_more;
        _cleanup_free_ char *key = egt_start(cp);
        egt_more = egt_agent_more = "";
        test_on_exit(proxy_hosts_drop, NULL);
        hosts_line("api.egt.test", "198.51.100.2");
        hosts_line("bad.egt.test", "198.51.100.3");
        recorder_up(&good, &bad);

        char value[64];
        snprintf(value, sizeof(value), "sk-live-%d-%08x", id4, (unsigned) (now_ms_() & 0xffffffff));
        char body[2048];
        snprintf(body, sizeof(body), "{\"name\":\"egtkey\",\"value\":\"%s\"}", value);
        HTTP_EXPECT(cp, "POST", "/secrets", key, body, 201);

        /* Bad input, each naming the field. */
        HTTP_EXPECT_MSG(cp, "POST", "/sandboxes", key,
                        "{\"egress\":{\"mode\":\"open\",\"rules\":{\"api.egt.test\":[{\"headers\":{\"x-api-key\":\"${secrets.nosuch}\"}}]}}}",
                        400, "egress.rules.api.egt.test[0].headers.x-api-key");
        HTTP_EXPECT_MSG(cp, "POST", "/sandboxes", key,
                        "{\"egress\":{\"mode\":\"deny_all\",\"rules\":{\"api.egt.test\":[{\"headers\":{\"x-api-key\":\"v\"}}]}}}",
                        400, "egress.rules");
        HTTP_EXPECT_MSG(cp, "POST", "/sandboxes", key,
                        "{\"egress\":{\"mode\":\"open\",\"rules\":{\"api.egt.test\":[{\"headers\":{\"x-api-key\":\"a\\r\\nx-evil: 1\"}}]}}}",
                        400, "control characters");
        HTTP_EXPECT_MSG(cp, "POST", "/sandboxes", key,
                        "{\"egress\":{\"mode\":\"open\",\"rules\":{\"10.0.0.1\":[{\"headers\":{\"x-api-key\":\"v\"}}]}}}",
                        400, "per hostname");
        {
                /* a value over its limit */
                _cleanup_free_ char *big = xmalloc(6000);
                memset(big, 'a', 5000);
                big[5000] = 0;
                _cleanup_free_ char *b = xasprintf("{\"egress\":{\"mode\":\"open\",\"rules\":{\"api.egt.test\":[{\"headers\":"
                                                   "{\"x-api-key\":\"%s\"}}]}}}", big);
                HTTP_EXPECT_MSG(cp, "POST", "/sandboxes", key, b, 400, "longer than 4096 bytes");
        }
        /* Another account's secret is not ours to name. */
        _cleanup_free_ char *other = ctld_account_key(cp, "egress-other", "wide", NULL);
        HTTP_EXPECT_MSG(cp, "POST", "/sandboxes", other,
                        "{\"egress\":{\"mode\":\"open\",\"rules\":{\"api.egt.test\":[{\"headers\":{\"x-api-key\":\"${secrets.egtkey}\"}}]}}}",
                        400, "which you do not have");

        /* An open sandbox whose requests to api and bad carry the secret. */
        char id[25];
        create_expect(cp, key,
                      "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"open\",\"rules\":{"
                      "\"api.egt.test\":[{\"headers\":{\"x-api-key\":\"${secrets.egtkey}\",\"x-org\":\"org-7\"}}],"
                      "\"bad.egt.test\":[{\"headers\":{\"x-api-key\":\"${secrets.egtkey}\"}}]}}}",
                      201, id);
        int code;
        FETCH_OK(cp, key, id, "https://api.egt.test/v1/messages");
        _cleanup_free_ char *out = NULL;
        _cleanup_free_ char *log1 = http_log_text();
        char want[128];
        snprintf(want, sizeof(want), "x-api-key: %s\r\n", value);
        ASSERT_NOT_NULL(strstr(log1, "api-tls GET /v1/messages HTTP/1.1"));
        ASSERT_NOT_NULL(strstr(log1, want));
        ASSERT_NOT_NULL(strstr(log1, "x-org: org-7\r\n"));
        ASSERT_NULL(strstr(log1, "placeholder"));
        /* Plain HTTP on 80 too. */
        FETCH_OK(cp, key, id, "http://api.egt.test/plain");
        free(log1);
        log1 = http_log_text();
        ASSERT_NOT_NULL(strstr(log1, "api-http GET /plain HTTP/1.1"));
        ASSERT_NULL(strstr(log1, "placeholder"));

        /* A bad upstream certificate is refused, not bypassed: 502 with why, nothing arrives. */
        out = fetch_in(cp, key, id, "https://bad.egt.test/steal", &code);
        if (!startswith(out, "502 ")) {
                _cleanup_free_ char *hosts = NULL;
                (void) run_in_sandbox(cp, key, id, "cat /etc/hosts", &hosts);
                fprintf(stderr, "  https://bad.egt.test answered %s  the sandbox's /etc/hosts:\n%s\n", out, hosts ?: "");
                egress_diag(cp, key, id, "198.51.100.3");
        }
        ASSERT_TRUE(startswith(out, "502 "));
        ASSERT_NOT_NULL(strstr(out, "verify"));
        ASSERT_NULL(strstr(out, value));
        free(log1);
        log1 = http_log_text();
        ASSERT_NULL(strstr(log1, "bad-tls"));

        /* A host without rules is reached directly: the sandbox sees the upstream's own certificate. */
        free(out);
        ASSERT_EQ(run_in_sandbox(cp, key, id,
                                 "python3 -c \"import ssl, socket\n"
                                 "s = ssl._create_unverified_context().wrap_socket(socket.create_connection(('203.0.113.2', 443), 10), "
                                 "server_hostname='plain.egt.test')\n"
                                 "print(ssl.DER_cert_to_PEM_cert(s.getpeercert(True)))\"",
                                 &out),
                  0);
        _cleanup_free_ char *leaf = NULL;
        ASSERT_EQ(test_run_capture((char *[]) { "cat", good.cert, NULL }, &leaf, 1 << 16), 0);
        char b64[64];
        const char *l2 = strchr(leaf, '\n');
        ASSERT_NOT_NULL(l2);
        snprintf(b64, sizeof(b64), "%.60s", l2 + 1);
        ASSERT_NOT_NULL(strstr(out, b64));

        /* The sandbox holds the value nowhere: not in its environment, any process's, its
         * files or the proxy's CA; the variables point its TLS stacks at the proxy's CA. */
        free(out);
        ASSERT_EQ(run_in_sandbox(cp, key, id,
                                 "env; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\\\0' '\\\\n'; "
                                 "grep -rl --exclude-dir=proc --exclude-dir=sys -F sk-live- / 2>/dev/null | head -n 5; "
                                 "grep -c 'BEGIN CERTIFICATE' /etc/paddock/egress-ca.pem",
                                 &out),
                  0);
        ASSERT_NULL(strstr(out, value));
        if (!strstr(out, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"))
                fprintf(stderr, "  the sandbox's environment:\n%.3000s\n", out);
        ASSERT_NOT_NULL(strstr(out, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"));
        ASSERT_NOT_NULL(strstr(out, "NODE_EXTRA_CA_CERTS=/etc/paddock/egress-ca.pem"));

        /* The record shows the rules as given (placeholders), never the value. */
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/egress", id);
        struct hres r;
        http_req(cp, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_NOT_NULL(strstr(r.body, "${secrets.egtkey}"));
        ASSERT_NULL(strstr(r.body, value));
        hres_done(&r);

        /* A rotated secret is used by the next request. */
        char value2[64];
        snprintf(value2, sizeof(value2), "sk-rotated-%d", id4);
        snprintf(body, sizeof(body), "{\"value\":\"%s\"}", value2);
        HTTP_EXPECT(cp, "PUT", "/secrets/egtkey", key, body, 200);
        FETCH_OK(cp, key, id, "https://api.egt.test/after-rotation");
        free(log1);
        log1 = http_log_text();
        snprintf(want, sizeof(want), "x-api-key: %s\r\n", value2);
        ASSERT_NOT_NULL(strstr(log1, want));

        /* A secret the rules name is not deleted under them. */
        HTTP_EXPECT_MSG(cp, "DELETE", "/secrets/egtkey", key, NULL, 400, "named by the egress rules of sandbox");

        /* Audit: counters per rule host in GET /egress and the agent's /metrics, a journal line
         * per connection with the sandbox and the host; no value in any log. */
        http_req(cp, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        const cJSON *hosts = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "proxy"), "hosts");
        double api_req = -1, api_inj = -1, bad_refused = -1;
        const cJSON *hh;
        cJSON_ArrayForEach(hh, hosts) {
                const char *hn = cJSON_GetStringValue(cJSON_GetObjectItem(hh, "host"));
                if (streq_const(hn, "api.egt.test")) {
                        api_req = cJSON_GetNumberValue(cJSON_GetObjectItem(hh, "requests"));
                        api_inj = cJSON_GetNumberValue(cJSON_GetObjectItem(hh, "injections"));
                } else if (streq_const(hn, "bad.egt.test"))
                        bad_refused = cJSON_GetNumberValue(cJSON_GetObjectItem(hh, "upstream_refused"));
        }
        if (api_req != 3 || api_inj != 6 || bad_refused != 1)
                test_fail(__FILE__, __LINE__, "proxy counters: %s", r.body);
        hres_done(&r);
        char murl[64];
        snprintf(murl, sizeof(murl), "http://127.0.0.1:%d/metrics", 26000 + id4 % 1000);
        _cleanup_free_ char *metrics = NULL;
        ASSERT_EQ(test_run_capture((char *[]) { "curl", "-sf", murl, NULL }, &metrics, 1 << 20), 0);
        char mline[160];
        snprintf(mline, sizeof(mline), "paddock_agent_proxy_requests_total{sandbox_id=\"%s\",host=\"api.egt.test\"} 3\n", id);
        ASSERT_NOT_NULL(strstr(metrics, mline));
        _cleanup_free_ char *alog = NULL, *clog = NULL;
        ASSERT_EQ(test_run_capture((char *[]) { "cat", agent_log, NULL }, &alog, 1 << 24), 0);
        ASSERT_EQ(test_run_capture((char *[]) { "cat", cp->log, NULL }, &clog, 1 << 24), 0);
        const char *jl = strstr(alog, "egress proxy: TLS connection to api.egt.test ended");
        ASSERT_NOT_NULL(jl);
        char sid_field[48];
        snprintf(sid_field, sizeof(sid_field), "SANDBOX_ID=%s", id);
        ASSERT_NOT_NULL(memmem(jl, strcspn(jl, "\n"), sid_field, strlen(sid_field)));
        ASSERT_NULL(strstr(alog, value));
        ASSERT_NULL(strstr(alog, value2));
        ASSERT_NULL(strstr(clog, value));
        ASSERT_NULL(strstr(clog, value2));

        /* PUT /egress replaces the rules: the next request carries the new set. */
        http_req(cp, "PUT", path, key,
                 "{\"mode\":\"open\",\"rules\":{\"api.egt.test\":[{\"headers\":{\"authorization\":\"Bearer ${secrets.egtkey}\"}}]}}", &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        FETCH_OK(cp, key, id, "https://api.egt.test/after-put");
        free(log1);
        log1 = http_log_text();
        snprintf(want, sizeof(want), "authorization: Bearer %s\r\n", value2);
        const char *after_put = strstr(log1, "GET /after-put");
        ASSERT_NOT_NULL(after_put);
        ASSERT_NOT_NULL(strstr(after_put, want));
        ASSERT_NOT_NULL(strcasestr(after_put, "x-api-key: placeholder\r\n"));        /* no rule for it any more */

        /* A flood of connections fills only this sandbox's share of the proxy: another
         * sandbox's request goes through meanwhile. */
        char id2[25];
        create_expect(cp, key,
                      "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.3\"],\"rules\":{"
                      "\"api.egt.test\":[{\"headers\":{\"x-api-key\":\"${secrets.egtkey}\"}}]}}}",
                      201, id2);
        char pathx[96];
        snprintf(pathx, sizeof(pathx), "/sandboxes/%s/exec", id);
        HTTP_EXPECT(cp, "POST", pathx, key,
                    "{\"cmd\":\"python3 -c \\\"import socket,time\\nh=[socket.create_connection(('api.egt.test',443),5) for i in "
                    "range(12)]\\ntime.sleep(60)\\\" >/dev/null 2>&1 &\"}",
                    200);
        /* restricted: the rule's host is allowed by its rules, and works through the proxy */
        FETCH_OK(cp, key, id2, "https://api.egt.test/second");
        /* ... and a host neither allowed nor with rules stays blocked */
        ASSERT_TRUE(blocked(cp, key, id2, "203.0.113.2"));

        /* E2B's current SDK, as its users write it: Secret.create, network.rules with
         * Secret.fill, allowOut (E2B: rules alone open nothing), updateNetwork. */
        _cleanup_free_ char *script_copy = xstrdup(test_build_path("npm-e2b-current/e2b-egress.mjs")), *sdk_out = NULL;
        if (access(script_copy, R_OK) != 0)
                test_fail(__FILE__, __LINE__, "npm-e2b-current/e2b-egress.mjs is missing (make tests copies it)");
        e.key = e2btest_key(&e.c, "e2b-egress");
        char url[64], e2b_value[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", e.port);
        snprintf(e2b_value, sizeof(e2b_value), "e2b-sk-%d-%08x", id4, (unsigned) (now_ms_() & 0xffffffff));
        setenv("EGT_SECRET", "egt-e2b-key", 1);
        setenv("EGT_VALUE", e2b_value, 1);
        int rc = e2btest_sdk(&e, url, script_copy, &sdk_out);
        if (rc != 0 || !strstr(sdk_out ?: "", "ok no value inside"))
                test_fail(__FILE__, __LINE__, "E2B's SDK with network rules failed (exit %d)", rc);
        free(log1);
        log1 = http_log_text();
        snprintf(want, sizeof(want), "x-api-key: %s\r\n", e2b_value);
        const char *first = strstr(log1, "GET /e2b-first"), *second = strstr(log1, "GET /e2b-second");
        ASSERT_NOT_NULL(first);
        ASSERT_NOT_NULL(second);
        ASSERT_NOT_NULL(strstr(first, want));
        ASSERT_NOT_NULL(strstr(second, "x-e2b: second\r\n"));
        ASSERT_NULL(strstr(log1, "bad-tls"));
        free(e.key);
        ctld_stop(cp);
}

/* Fail closed: rules on a node whose agent runs no proxy fail the create with the reason and
 * leave nothing; an agent whose proxy cannot start does not start (systemd restarts it and
 * says why) rather than serve without it. */
TEST_FULL(rules_fail_closed_without_a_proxy, 300) {
        static struct ctld c;
        _cleanup_free_ char *key = egt_start(&c);
        struct hres r;
        http_req(&c, "POST", "/sandboxes", key,
                 "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"open\",\"rules\":{\"api.egt.test\":[{\"headers\":"
                 "{\"x-tenant\":\"t1\"}}]}}}", &r);
        if (r.status != 503 || !strstr(hres_message(&r), "no egress proxy"))
                test_fail(__FILE__, __LINE__, "create with rules on a node without a proxy: %ld %s", r.status, r.body);
        hres_done(&r);
        char newest[25];
        newest_sandbox(&c, newest);
        assert_nothing_left(newest);

        /* A second agent of the test's whose proxy port is taken: it says so and exits. */
        int taken = listen_on("127.0.0.1", 0);
        ASSERT_TRUE(taken >= 0);
        struct sockaddr_in a;
        socklen_t al = sizeof(a);
        ASSERT_EQ(getsockname(taken, (struct sockaddr *) &a, &al), 0);
        close(taken);
        taken = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in any = { .sin_family = AF_INET, .sin_port = a.sin_port };
        ASSERT_EQ(bind(taken, (struct sockaddr *) &any, sizeof(any)), 0);
        ASSERT_EQ(listen(taken, 1), 0);
        char conf2[600], log2[600];
        snprintf(conf2, sizeof(conf2), "%s/proxyless.conf", test_tmpdir());
        snprintf(log2, sizeof(log2), "%s/proxyless.log", test_tmpdir());
        agenttest_write_conf(conf2, "egt-proxy-taken", "paddock.egt-proxy-taken", NULL,
                             "[egress]\nenable = true\ntable = %sp\nbridges = " BRIDGE "\n[proxy]\nenable = true\nport = %d\n",
                             table, ntohs(a.sin_port));
        pid_t p2 = agenttest_start(conf2, log2, NULL);
        int st = 0;
        for (int i = 0; i < 100 && waitpid(p2, &st, WNOHANG) == 0; i++)
                usleep(100 * 1000);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
        ASSERT_TRUE(test_log_has(log2, 0, "Cannot start the egress proxy", 0));
        close(taken);
        char t2[64];
        snprintf(t2, sizeof(t2), "%sp", table);
        RUN("nft", "delete", "table", "inet", t2);
        RUN("nft", "delete", "table", "bridge", t2);
        ctld_stop(&c);
}
