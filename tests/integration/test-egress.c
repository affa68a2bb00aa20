/* Integration test: the egress engine against real nftables, with real traffic.
 *
 * Every test runs in its own forked process (the runner's) that first
 * unshare(CLONE_NEWNET)s, so the root namespace is never touched. That
 * namespace is the "node" (router). Two more namespaces hang off it, each held
 * by a child process that only waits for the test to end:
 *
 *   sandbox ns                  node ns (egress table here)            world ns
 *   eth0 169.254.90.2 (A)  ---  vsbx -[bridge pdkbr0 169.254.90.1]
 *        169.254.90.3 (B)       vsb2 -+                           
 *   sandbox2 ns                 vwld 198.51.100.1                 ---  eth0 198.51.100.2 (world host 1)
 *   eth0 169.254.90.4 (D)       ip_forward=1                                198.51.100.3 (world host 2)
 *                                                                           198.51.100.4 (deny_cidrs)
 *                                                                           203.0.113.5  (CIDR tests)
 *                                                                           169.254.169.254 (metadata)
 *
 * TCP listeners on PORT (and 53) sit in the world ns, the node ns and both
 * sandbox namespaces; probes connect() from the sandbox ns with a short
 * timeout. The sandbox bridge sits in link-local space like Docker's pools
 * here (always denied as a destination); the "internet" is in the
 * documentation ranges 198.51.100.0/24 and 203.0.113.0/24, in namespaces this
 * program made. Before egress_init a control
 * probe proves the topology forwards, so a blocked probe later means the
 * firewall blocked it. The ruleset is read back with `nft --json` run inside the
 * test's namespace (the CLI inherits it).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>

#include "cleanup.h"
#include "egress.h"
#include "log.h"
#include "pj_egress.h"
#include "strutil.h"
#include "testlib.h"

#define BRIDGE "pdkbr0"
#define PORT 18080
#define PROBE_MS 300
#define IP(a, b, c, d) (((uint32_t) (a) << 24) | ((uint32_t) (b) << 16) | ((uint32_t) (c) << 8) | (uint32_t) (d))

#define SBX_A IP(169, 254, 90, 2)
#define SBX_B IP(169, 254, 90, 3)
#define GW_SBX IP(169, 254, 90, 1)
#define SBX_D IP(169, 254, 90, 4)
#define GW_WLD IP(198, 51, 100, 1)
#define WORLD1 IP(198, 51, 100, 2)
#define WORLD2 IP(198, 51, 100, 3)
#define DENIED IP(198, 51, 100, 4)
#define WORLD3 IP(203, 0, 113, 5)
#define METADATA IP(169, 254, 169, 254)

#define ID_A "aaaaaaaaaaaaaaaaaaaaaaaa"
#define ID_B "bbbbbbbbbbbbbbbbbbbbbbbb"
#define ID_C "cccccccccccccccccccccccc"

static const char *const bridges[] = { BRIDGE, NULL };
static const char *const deny[] = { "198.51.100.4/32", NULL };

static struct {
        int node_fd, sbx_fd, world_fd, sbx2_fd;
        int listeners[8];
        int n_listeners;
} T = { -1, -1, -1, -1, { 0 }, 0 };

/* ------------------------------------------------------------ namespaces */

static void enter(int fd) {
        if (setns(fd, CLONE_NEWNET) < 0)
                test_fail(__FILE__, __LINE__, "setns: %m");
}

/* A child that unshares a network namespace and lives until the test does. */
static pid_t ns_holder(void) {
        int p[2];
        if (pipe(p) < 0)
                test_fail(__FILE__, __LINE__, "pipe: %m");
        pid_t pid = fork();
        if (pid < 0)
                test_fail(__FILE__, __LINE__, "fork: %m");
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                char c = unshare(CLONE_NEWNET) < 0 ? 'E' : 'K';
                ssize_t _unused_ w = write(p[1], &c, 1);
                for (;;)
                        pause();
        }
        close(p[1]);
        char c = 0;
        ssize_t _unused_ n = read(p[0], &c, 1);
        close(p[0]);
        if (c != 'K')
                test_fail(__FILE__, __LINE__, "child could not unshare its network namespace");
        return pid;
}

static void kill_holder(void *ud) {
        pid_t pid = (pid_t) (intptr_t) ud;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
}

static int ns_fd_of(pid_t pid) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int) pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                test_fail(__FILE__, __LINE__, "open %s: %m", path);
        return fd;
}

/* Runs a fixed argv (plus formatted numbers, never user strings) inside ns fd. */
#define RUN(fd, ...) run_in((fd), __FILE__, __LINE__, (char *const[]) { __VA_ARGS__, NULL })
static void run_in(int fd, const char *file, int line, char *const argv[]) {
        enter(fd);
        int r = test_run_capture(argv, NULL, 4096);
        enter(T.node_fd);
        if (r != 0)
                test_fail(file, line, "%s %s %s ... exited %d", argv[0], argv[1], argv[2] ? argv[2] : "", r);
}

static void write_file(const char *path, const char *s) {
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, s, strlen(s)) != (ssize_t) strlen(s))
                test_fail(__FILE__, __LINE__, "write %s: %m", path);
}

static int listen_on(uint16_t port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
        if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(fd, 128) < 0)
                test_fail(__FILE__, __LINE__, "listen on %u: %m", port);
        return fd;
}

static void add_listener(int ns, uint16_t port) {
        enter(ns);
        T.listeners[T.n_listeners++] = listen_on(port);
        enter(T.node_fd);
}

/* The far side of a veth in namespace ns: lo and eth0 up, eth0 holding addrs
 * (NULL-terminated), the default route via gw. */
static void host_side(int ns, char *gw, char **addrs) {
        RUN(ns, "ip", "link", "set", "lo", "up");
        for (; *addrs; addrs++)
                RUN(ns, "ip", "addr", "add", *addrs, "dev", "eth0");
        RUN(ns, "ip", "link", "set", "eth0", "up");
        RUN(ns, "ip", "route", "add", "default", "via", gw);
}

/* The node namespace with sandbox and world attached; see the header comment. */
static void topology(void) {
        if (unshare(CLONE_NEWNET) < 0)
                TEST_SKIP("unshare(CLONE_NEWNET) not permitted here");
        T.node_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(T.node_fd >= 0);

        pid_t sp = ns_holder(), wp = ns_holder(), s2p = ns_holder();
        test_on_exit(kill_holder, (void *) (intptr_t) sp);
        test_on_exit(kill_holder, (void *) (intptr_t) wp);
        test_on_exit(kill_holder, (void *) (intptr_t) s2p);
        T.sbx_fd = ns_fd_of(sp);
        T.world_fd = ns_fd_of(wp);
        T.sbx2_fd = ns_fd_of(s2p);
        char spid[16], wpid[16], s2pid[16];
        snprintf(spid, sizeof(spid), "%d", (int) sp);
        snprintf(wpid, sizeof(wpid), "%d", (int) wp);
        snprintf(s2pid, sizeof(s2pid), "%d", (int) s2p);

        int n = T.node_fd, s = T.sbx_fd, w = T.world_fd, s2 = T.sbx2_fd;
        RUN(n, "ip", "link", "set", "lo", "up");
        RUN(n, "ip", "link", "add", BRIDGE, "type", "bridge");
        RUN(n, "ip", "link", "add", "vsbx", "type", "veth", "peer", "name", "eth0", "netns", spid);
        RUN(n, "ip", "link", "set", "vsbx", "master", BRIDGE);
        RUN(n, "ip", "addr", "add", "169.254.90.1/24", "dev", BRIDGE);
        RUN(n, "ip", "link", "set", BRIDGE, "up");
        RUN(n, "ip", "link", "set", "vsbx", "up");
        RUN(n, "ip", "link", "add", "vsb2", "type", "veth", "peer", "name", "eth0", "netns", s2pid);
        RUN(n, "ip", "link", "set", "vsb2", "master", BRIDGE);
        RUN(n, "ip", "link", "set", "vsb2", "up");
        RUN(n, "ip", "link", "add", "vwld", "type", "veth", "peer", "name", "eth0", "netns", wpid);
        RUN(n, "ip", "addr", "add", "198.51.100.1/24", "dev", "vwld");
        RUN(n, "ip", "link", "set", "vwld", "up");
        RUN(n, "ip", "route", "add", "169.254.169.254/32", "via", "198.51.100.2");
        RUN(n, "ip", "route", "add", "203.0.113.0/24", "via", "198.51.100.2");
        write_file("/proc/sys/net/ipv4/ip_forward", "1");

        host_side(s, "169.254.90.1", (char *[]) { "169.254.90.2/24", "169.254.90.3/24", NULL });
        host_side(w, "198.51.100.1",
                  (char *[]) { "198.51.100.2/24", "198.51.100.3/24", "198.51.100.4/24", "203.0.113.5/32",
                               "169.254.169.254/32", NULL });
        host_side(s2, "169.254.90.1", (char *[]) { "169.254.90.4/24", NULL });

        add_listener(w, PORT);
        add_listener(w, 53);
        add_listener(n, PORT);
        add_listener(n, 53);
        add_listener(s, PORT);
        add_listener(s2, PORT);
}

/* Accepts and closes whatever the probes left in the listeners' queues. */
static void drain(void) {
        for (int i = 0; i < T.n_listeners; i++) {
                int c;
                while ((c = accept4(T.listeners[i], NULL, NULL, SOCK_CLOEXEC)) >= 0)
                        close(c);
        }
}

/* TCP connect from src (an address in namespace ns) to dst:port; true if the handshake completed. */
static bool probe_from(int ns, uint32_t src, uint32_t dst, uint16_t port) {
        enter(ns);
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        enter(T.node_fd);
        if (fd < 0)
                test_fail(__FILE__, __LINE__, "socket: %m");
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(src) };
        struct sockaddr_in da = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(dst) };
        if (bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                test_fail(__FILE__, __LINE__, "bind: %m");
        bool ok = false;
        if (connect(fd, (struct sockaddr *) &da, sizeof(da)) == 0)
                ok = true;
        else if (errno == EINPROGRESS) {
                struct pollfd p = { .fd = fd, .events = POLLOUT };
                if (poll(&p, 1, PROBE_MS) == 1) {
                        int e = 0;
                        socklen_t l = sizeof(e);
                        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
                        ok = e == 0;
                }
        }
        drain();
        return ok;
}

static bool probe(uint32_t src, uint32_t dst, uint16_t port) {
        return probe_from(T.sbx_fd, src, dst, port);
}

/* A connect that should succeed may miss PROBE_MS on a loaded machine (seen at load 8
 * on 2 cores, three tries in a row too): try it up to ten times, the first success ends it.
 * A blocked path fails them all, so this proves as much; the wait is what a test waits for,
 * the state (a reachable path), not a time. */
static bool probe_reach(uint32_t src, uint32_t dst, uint16_t port) {
        for (int i = 0; i < 10; i++)
                if (probe(src, dst, port))
                        return true;
        return false;
}

#define REACH(src, dst) ASSERT_TRUE(probe_reach((src), (dst), PORT))
#define NO_REACH(src, dst) ASSERT_FALSE(probe((src), (dst), PORT))

/* Topology plus a control probe (forwarding works without any firewall). */
static void setup(void) {
        topology();
        REACH(SBX_A, WORLD1);
        REACH(SBX_A, WORLD3);
        REACH(SBX_A, METADATA);
        REACH(SBX_A, SBX_D);                    /* bridged, same L2 */
        REACH(SBX_A, GW_WLD);                   /* the node, through input */
}

/* egress_init(cfg), or the test skipped where nftables' netlink is not permitted. */
static void init_with(const struct egress_config *cfg) {
        struct err err = { 0 };
        int r = egress_init(cfg, &err);
        if (r == -EPERM || r == -EPROTONOSUPPORT || r == -EAFNOSUPPORT)
                TEST_SKIP("nftables netlink is not permitted here");
        if (r < 0)
                test_fail(__FILE__, __LINE__, "egress_init: %s", err.message);
}

static void init_default(const char *resolver) {
        struct egress_config cfg = {
                .table = "paddock", .bridges = bridges, .deny_cidrs = deny,
                .dns_resolver = resolver, .priority = -10,
        };
        init_with(&cfg);
}

/* setup() and init_default(resolver): the start of most tests. */
static void setup_default(const char *resolver) {
        setup();
        init_default(resolver);
}

static void apply(const char *id, uint32_t ip, enum pj_egress_mode mode, const char *const *allow) {
        struct pj_allow_entry e[64];
        size_t n = 0;
        struct err why = { 0 };
        for (; allow && allow[n]; n++)
                if (pj_allow_entry_parse(allow[n], &e[n], NULL, 0, &why) < 0)
                        test_fail(__FILE__, __LINE__, "%s %s", allow[n], why.message);
        struct egress_policy p = { .sandbox_id = id, .ip = ip, .mode = mode, .allow = e, .n_allow = n };
        struct err err = { 0 };
        int r = egress_apply(&p, &err);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "egress_apply %s: %s", id, err.message);
}

/* setup_default(NULL) and sandbox A in mode (no allow list). */
static void setup_mode(enum pj_egress_mode mode) {
        setup_default(NULL);
        apply(ID_A, SBX_A, mode, NULL);
}

/* ------------------------------------------------------------ nft --json */

static cJSON *nft_json(void) {
        _cleanup_free_ char *out = NULL;
        int r = test_run_capture((char *const[]) { "nft", "--json", "list", "table", "inet", "paddock", NULL },
                                 &out, 1 << 20);
        ASSERT_EQ(r, 0);
        cJSON *j = cJSON_Parse(out);
        ASSERT_NOT_NULL(j);
        return j;
}

/* The table's ruleset without counter values (-s): a stray packet, such as IPv6 neighbour
 * discovery from a veth that just came up, must not make two equal rulesets differ. */
static char *nft_text(void) {
        char *out = NULL;
        int r = test_run_capture((char *const[]) { "nft", "-s", "list", "table", "inet", "paddock", NULL }, &out, 1 << 20);
        ASSERT_EQ(r, 0);
        return out;
}

/* Sum of counter packets in chain over rules whose verdict is verdict ("accept",
 * "drop", or NULL for rules without a verdict). -1 if the chain has none. */
static long long counter_packets(const cJSON *j, const char *chain, const char *verdict) {
        long long sum = -1;
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItem(j, "nftables")) {
                const cJSON *rule = cJSON_GetObjectItem(item, "rule");
                if (!rule || !streq_const(cJSON_GetStringValue(cJSON_GetObjectItem(rule, "chain")), chain))
                        continue;
                long long pk = -1;
                bool has_verdict = false, match = !verdict;
                const cJSON *x;
                cJSON_ArrayForEach(x, cJSON_GetObjectItem(rule, "expr")) {
                        const cJSON *c = cJSON_GetObjectItem(x, "counter");
                        if (c)
                                pk = (long long) cJSON_GetNumberValue(cJSON_GetObjectItem(c, "packets"));
                        if (cJSON_GetObjectItem(x, "accept") || cJSON_GetObjectItem(x, "drop")) {
                                has_verdict = true;
                                match = verdict && cJSON_GetObjectItem(x, verdict);
                        }
                }
                if (!verdict && has_verdict)
                        match = false;
                if (match && pk >= 0)
                        sum = (sum < 0 ? 0 : sum) + pk;
        }
        return sum;
}

static int count_rules(const cJSON *j, const char *chain) {
        int n = 0;
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItem(j, "nftables")) {
                const cJSON *rule = cJSON_GetObjectItem(item, "rule");
                if (rule && streq_const(cJSON_GetStringValue(cJSON_GetObjectItem(rule, "chain")), chain))
                        n++;
        }
        return n;
}

/* The set's elements rendered "a.b.c.d", "net/len", "lo-hi", joined by ",". */
static char *set_elems(const cJSON *j, const char *set) {
        struct strbuf sb;
        strbuf_init(&sb, 0);
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItem(j, "nftables")) {
                const cJSON *s = cJSON_GetObjectItem(item, "set");
                if (!s || !streq_const(cJSON_GetStringValue(cJSON_GetObjectItem(s, "name")), set))
                        continue;
                const cJSON *e;
                cJSON_ArrayForEach(e, cJSON_GetObjectItem(s, "elem")) {
                        const cJSON *pf = cJSON_GetObjectItem(e, "prefix"), *rg = cJSON_GetObjectItem(e, "range");
                        char one[64];
                        if (cJSON_IsString(e))
                                snprintf(one, sizeof(one), "%s", e->valuestring);
                        else if (pf)
                                snprintf(one, sizeof(one), "%s/%d",
                                         cJSON_GetStringValue(cJSON_GetObjectItem(pf, "addr")),
                                         (int) cJSON_GetNumberValue(cJSON_GetObjectItem(pf, "len")));
                        else if (rg)
                                snprintf(one, sizeof(one), "%s-%s", cJSON_GetStringValue(cJSON_GetArrayItem(rg, 0)),
                                         cJSON_GetStringValue(cJSON_GetArrayItem(rg, 1)));
                        else
                                snprintf(one, sizeof(one), "?");
                        strbuf_printf(&sb, "%s%s", sb.len ? "," : "", one);
                }
        }
        return strbuf_steal(&sb);
}

static bool listed(const char *id) {
        char **ids = NULL;
        int n = egress_list(&ids);
        ASSERT_OK(n);
        bool found = false;
        for (int i = 0; i < n; i++)
                found = found || streq_const(ids[i], id);
        ASSERT_NULL(ids[n]);
        strv_free(ids);
        return found;
}

/* ------------------------------------------------------------ tests */

TEST_FULL(fail_closed_without_policy, 30) {
        setup_default(NULL);
        /* Table exists, no sandbox has a confirmed policy: nothing gets out. */
        NO_REACH(SBX_A, WORLD1);
        NO_REACH(SBX_B, WORLD2);
        /* ...and nothing reaches the node itself (input hook, fib local). */
        NO_REACH(SBX_A, GW_SBX);
        NO_REACH(SBX_A, GW_WLD);
        _cleanup_json_ cJSON *j = nft_json();
        ASSERT_GE(counter_packets(j, "sbx_egress", "drop"), 1);
        ASSERT_EQ(listed(ID_A), false);
        /* Connections INTO the sandbox: the node's own still work (the sandbox's replies
         * are ct established); the world's are dropped on the way in. */
        ASSERT_TRUE(probe_from(T.node_fd, GW_SBX, SBX_A, PORT));
        ASSERT_FALSE(probe_from(T.world_fd, WORLD1, SBX_A, PORT));
}

TEST_FULL(dns_resolver_on_the_node, 30) {
        setup();
        /* The resolver is the node's own bridge address, which is also in the
         * deny set: DNS to it is allowed first, everything else to it dropped. */
        static const char *const deny_self[] = { "169.254.90.1/32", "198.51.100.1/32", NULL };
        struct egress_config cfg = {
                .bridges = bridges, .deny_cidrs = deny_self, .dns_resolver = "169.254.90.1", .priority = -10,
        };
        init_with(&cfg);
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        ASSERT_TRUE(probe(SBX_A, GW_SBX, 53));
        ASSERT_FALSE(probe(SBX_A, GW_SBX, PORT));
        ASSERT_FALSE(probe(SBX_A, GW_WLD, 53));         /* not the resolver */
        ASSERT_FALSE(probe(SBX_B, GW_SBX, 53));         /* no policy, no DNS */
        REACH(SBX_A, WORLD1);
        /* restricted: no DNS at all (names come from /etc/hosts: no exfiltration channel) */
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, NULL);
        ASSERT_FALSE(probe(SBX_A, GW_SBX, 53));
        NO_REACH(SBX_A, WORLD1);
        apply(ID_A, SBX_A, PJ_EGRESS_DENY_ALL, NULL);
        ASSERT_FALSE(probe(SBX_A, GW_SBX, 53));
}

TEST_FULL(open_mode, 30) {
        setup_mode(PJ_EGRESS_OPEN);
        REACH(SBX_A, WORLD1);
        REACH(SBX_A, WORLD2);
        /* node_deny sits above every policy: metadata (built in) and deny_cidrs. */
        NO_REACH(SBX_A, METADATA);
        NO_REACH(SBX_A, DENIED);
        /* The node's own addresses go through input, where they are dropped too. */
        NO_REACH(SBX_A, GW_SBX);
        NO_REACH(SBX_A, GW_WLD);
        /* Another IP on the bridge with no policy stays closed. */
        NO_REACH(SBX_B, WORLD1);

        _cleanup_json_ cJSON *j = nft_json();
        ASSERT_GE(counter_packets(j, "sbx_" ID_A, NULL), 2);      /* the chain's entry counter */
        ASSERT_GE(counter_packets(j, "sbx_" ID_A, "accept"), 2);
        ASSERT_GE(counter_packets(j, "sbx_egress", "drop"), 2);  /* node_deny + B's drop */
        ASSERT_GE(counter_packets(j, "sbx_to_host", "drop"), 2);
        ASSERT_TRUE(listed(ID_A));

        /* egress.stats: the chain's accept counter, nothing dropped in A's own chain. */
        struct egress_stats *sv = NULL;
        int n = egress_stats(&sv);
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(sv[0].sandbox_id, ID_A);
        ASSERT_GE((int64_t) sv[0].allowed_packets, 2);
        ASSERT_GE((int64_t) sv[0].allowed_bytes, 120);
        ASSERT_EQ((int64_t) sv[0].dropped_packets, 0);
        free(sv);
        /* deny_all: the probe is counted as dropped */
        apply(ID_A, SBX_A, PJ_EGRESS_DENY_ALL, NULL);
        NO_REACH(SBX_A, WORLD1);
        ASSERT_EQ(egress_stats(&sv), 1);
        ASSERT_GE((int64_t) sv[0].dropped_packets, 1);
        ASSERT_GE((int64_t) sv[0].dropped_bytes, 60);
        free(sv);
}

TEST_FULL(always_deny_in_every_mode, 40) {
        setup_default(NULL);
        static const char *const allow[] = { "198.51.100.2", "203.0.113.0/24", NULL };
        /* open and restricted alike: the node (via input, any of its addresses),
         * link-local metadata, the operator's list, another sandbox bridged on
         * the same L2 segment, and the same sandbox's bridge neighbours. */
        for (int round = 0; round < 2; round++) {
                if (round == 0)
                        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
                else
                        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, allow);
                apply(ID_C, SBX_D, round == 0 ? PJ_EGRESS_OPEN : PJ_EGRESS_RESTRICTED, round == 0 ? NULL : allow);
                REACH(SBX_A, WORLD1);
                REACH(SBX_A, WORLD3);
                NO_REACH(SBX_A, METADATA);
                NO_REACH(SBX_A, DENIED);
                NO_REACH(SBX_A, GW_SBX);
                NO_REACH(SBX_A, GW_WLD);
                NO_REACH(SBX_A, SBX_D);                 /* bridged: seen by forward through br_netfilter */
                ASSERT_FALSE(probe_from(T.sbx2_fd, SBX_D, SBX_A, PORT));
                REACH(SBX_A, WORLD1);                   /* and still fine afterwards */
        }
        /* The node can still open connections into a sandbox (replies are established). */
        ASSERT_TRUE(probe_from(T.node_fd, GW_SBX, SBX_A, PORT));

        _cleanup_json_ cJSON *j = nft_json();
        ASSERT_GE(counter_packets(j, "sbx_to_host", "drop"), 2);
        ASSERT_GE(counter_packets(j, "sbx_egress", "drop"), 2);
        _cleanup_free_ char *txt = nft_text();
        ASSERT_CONTAINS(txt, "169.254.0.0/16");
        ASSERT_CONTAINS(txt, "224.0.0.0/4");
}

TEST_FULL(restricted_mode_and_dns, 30) {
        setup_default("198.51.100.3");
        static const char *const allow[] = { "198.51.100.2", NULL };
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, allow);
        REACH(SBX_A, WORLD1);
        NO_REACH(SBX_A, WORLD2);
        NO_REACH(SBX_A, METADATA);
        /* No DNS for restricted, not even to the configured resolver: a resolver
         * would carry data out in query names. */
        ASSERT_FALSE(probe(SBX_A, WORLD2, 53));
        /* A sandbox without a policy gets no DNS either. */
        ASSERT_FALSE(probe(SBX_B, WORLD2, 53));

        _cleanup_json_ cJSON *j = nft_json();
        ASSERT_GE(counter_packets(j, "sbx_" ID_A, "accept"), 1);
        ASSERT_GE(counter_packets(j, "sbx_" ID_A, "drop"), 1);
        _cleanup_free_ char *el = set_elems(j, "allow_" ID_A);
        ASSERT_STREQ(el, "198.51.100.2");
        if (getenv("TEST_VERBOSE")) {
                _cleanup_free_ char *txt = nft_text();
                fprintf(stderr, "%s", txt);
        }

        /* deny_all: nothing, not even DNS. */
        apply(ID_A, SBX_A, PJ_EGRESS_DENY_ALL, NULL);
        NO_REACH(SBX_A, WORLD1);
        ASSERT_FALSE(probe(SBX_A, WORLD2, 53));
}

TEST_FULL(deny_all_mode, 30) {
        setup_mode(PJ_EGRESS_DENY_ALL);
        NO_REACH(SBX_A, WORLD1);
        NO_REACH(SBX_A, WORLD2);
        NO_REACH(SBX_A, GW_SBX);
        _cleanup_json_ cJSON *j = nft_json();
        ASSERT_GE(counter_packets(j, "sbx_" ID_A, "drop"), 2);
        ASSERT_EQ(counter_packets(j, "sbx_" ID_A, "accept"), -1);
}

TEST_FULL(reapply_replaces_policy, 30) {
        setup_default(NULL);
        static const char *const allow1[] = { "198.51.100.2", NULL };
        static const char *const allow2[] = { "198.51.100.3/32", NULL };
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        REACH(SBX_A, WORLD2);
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, allow1);
        REACH(SBX_A, WORLD1);
        NO_REACH(SBX_A, WORLD2);
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, allow2);
        NO_REACH(SBX_A, WORLD1);
        REACH(SBX_A, WORLD2);
        apply(ID_A, SBX_A, PJ_EGRESS_DENY_ALL, NULL);
        NO_REACH(SBX_A, WORLD2);
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        REACH(SBX_A, WORLD1);

        /* One chain, its rules replaced (not appended) each time: counter + accept. */
        _cleanup_json_ cJSON *j = nft_json();
        ASSERT_EQ(count_rules(j, "sbx_" ID_A), 2);
        _cleanup_free_ char *el = set_elems(j, "allow_" ID_A);
        ASSERT_STREQ(el, "");

        /* The sandbox moves to another IP: the old one loses its mapping. */
        apply(ID_A, SBX_B, PJ_EGRESS_OPEN, NULL);
        REACH(SBX_B, WORLD1);
        NO_REACH(SBX_A, WORLD1);
        /* Another sandbox takes over an IP: the element is replaced. */
        apply(ID_C, SBX_B, PJ_EGRESS_DENY_ALL, NULL);
        NO_REACH(SBX_B, WORLD1);
        _cleanup_free_ char *txt = nft_text();
        ASSERT_CONTAINS(txt, "169.254.90.3 : jump sbx_" ID_C);
        ASSERT_FALSE(strstr(txt, ": jump sbx_" ID_A));
}

TEST_FULL(remove_returns_to_fail_closed, 30) {
        setup_default("198.51.100.3");
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        apply(ID_B, SBX_B, PJ_EGRESS_OPEN, NULL);
        REACH(SBX_A, WORLD1);
        ASSERT_TRUE(listed(ID_A));
        struct err err = { 0 };
        ASSERT_OK(egress_remove(ID_A, SBX_A, &err));
        NO_REACH(SBX_A, WORLD1);
        ASSERT_FALSE(probe(SBX_A, WORLD2, 53));
        REACH(SBX_B, WORLD1);                   /* the other sandbox is untouched */
        ASSERT_FALSE(listed(ID_A));
        ASSERT_TRUE(listed(ID_B));
        _cleanup_free_ char *txt = nft_text();
        ASSERT_FALSE(strstr(txt, "allow_" ID_A));
        ASSERT_FALSE(strstr(txt, "169.254.90.2"));
        /* Idempotent, also for a sandbox that never existed. */
        ASSERT_OK(egress_remove(ID_A, SBX_A, &err));
        ASSERT_OK(egress_remove(ID_C, 0, &err));
        ASSERT_OK(egress_remove(ID_B, 0, &err));
        NO_REACH(SBX_B, WORLD1);
        char **ids = NULL;
        ASSERT_EQ(egress_list(&ids), 0);
        strv_free(ids);
}

TEST_FULL(allowlist_50_entries_merged, 30) {
        setup_default(NULL);
        /* 50 entries: overlaps, containment, adjacency, a run of single hosts,
         * the top of the address space and 0.0.0.0, in no particular order. */
        char *allow[51];
        int n = 0;
        static const char *const fixed[] = {
                "10.1.0.0/16", "10.0.0.0/8", "10.2.3.4",           /* -> 10.0.0.0/8 */
                "192.168.1.0/24", "192.168.0.0/24",                /* adjacent -> 192.168.0.0/23 */
                "255.255.255.0/24", "255.255.255.255",             /* ends at the top: no end element */
                "0.0.0.0",                                         /* starts at 0: no leading end */
                "198.51.100.2", "198.51.100.2/32",
        };
        for (size_t i = 0; i < ELEMENTSOF(fixed); i++)
                allow[n++] = xstrdup(fixed[i]);
        for (int i = 40; i >= 1; i--)                              /* 172.16.0.1..40 -> one range */
                allow[n++] = xasprintf("172.16.0.%d", i);
        allow[n] = NULL;
        ASSERT_EQ(n, 50);
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, (const char *const *) allow);
        for (int i = 0; i < n; i++)
                free(allow[i]);
        _cleanup_json_ cJSON *j = nft_json();
        _cleanup_free_ char *el = set_elems(j, "allow_" ID_A);
        ASSERT_STREQ(el, "0.0.0.0,10.0.0.0/8,172.16.0.1-172.16.0.40,192.168.0.0/23,198.51.100.2,255.255.255.0/24");
        REACH(SBX_A, WORLD1);
        NO_REACH(SBX_A, WORLD2);

        /* A re-apply with a smaller list replaces the elements atomically. */
        static const char *const small[] = { "198.51.100.0/30", NULL };
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, small);
        _cleanup_json_ cJSON *j2 = nft_json();
        _cleanup_free_ char *el2 = set_elems(j2, "allow_" ID_A);
        ASSERT_STREQ(el2, "198.51.100.0/30");
        REACH(SBX_A, WORLD2);                   /* .0/30 covers .100.0-.100.3 */
        NO_REACH(SBX_A, DENIED);
}

TEST_FULL(init_is_idempotent, 30) {
        setup_mode(PJ_EGRESS_OPEN);
        _cleanup_free_ char *before = nft_text();
        _cleanup_json_ cJSON *j1 = nft_json();

        /* An agent restart: a fresh process runs init again on the live table. */
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                struct err err = { 0 };
                struct egress_config cfg = {
                        .table = "paddock", .bridges = bridges, .deny_cidrs = deny, .priority = -10,
                };
                _exit(egress_init(&cfg, &err) == 0 ? 0 : 1);
        }
        int stt = 0;
        waitpid(pid, &stt, 0);
        ASSERT_TRUE(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
        init_default(NULL);

        /* Byte for byte the same ruleset (no traffic since: counters are 0 both times). */
        _cleanup_free_ char *again = nft_text();
        ASSERT_STREQ(again, before);
        _cleanup_json_ cJSON *j2 = nft_json();
        static const char *const chains[] = { "forward_sbx", "input_sbx", "sbx_egress", "sbx_to_host", "sbx_" ID_A };
        for (size_t i = 0; i < ELEMENTSOF(chains); i++)
                ASSERT_EQ(count_rules(j1, chains[i]), count_rules(j2, chains[i]));
        ASSERT_EQ(count_rules(j2, "forward_sbx"), 1);
        REACH(SBX_A, WORLD1);                   /* enforcement never lapsed, policy kept */
        NO_REACH(SBX_B, WORLD1);
        ASSERT_TRUE(listed(ID_A));

        /* A changed priority recreates the base chains, still keeping sandboxes. */
        struct err err = { 0 };
        struct egress_config cfg = { .table = "paddock", .bridges = bridges, .deny_cidrs = deny, .priority = -5 };
        ASSERT_OK(egress_init(&cfg, &err));
        _cleanup_free_ char *after = nft_text();
        ASSERT_CONTAINS(after, "hook forward priority filter - 5; policy accept;");
        REACH(SBX_A, WORLD1);
        NO_REACH(SBX_B, WORLD1);
}

TEST_FULL(failed_batch_leaves_state_intact, 30) {
        setup_default(NULL);
        static const char *const allow[] = { "198.51.100.2", NULL };
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, allow);

        /* Sandbox C takes over A's IP, but its set name is already taken by an
         * incompatible set: the batch (new chain, elements, map replacement)
         * fails in the kernel on that message. */
        _cleanup_free_ char *o = NULL;
        ASSERT_EQ(test_run_capture((char *const[]) { "nft", "add", "set", "inet", "paddock", "allow_" ID_C,
                                                     "{ type ipv6_addr; }", NULL }, &o, 4096), 0);
        _cleanup_free_ char *before = nft_text();

        struct pj_allow_entry e = { .kind = PJ_ALLOW_IPV4, .addr = WORLD2, .prefix = 32 };
        struct egress_policy p = { .sandbox_id = ID_C, .ip = SBX_A, .mode = PJ_EGRESS_RESTRICTED, .allow = &e, .n_allow = 1 };
        struct err err = { 0 };
        int r = egress_apply(&p, &err);
        ASSERT_TRUE(r < 0);
        ASSERT_CONTAINS(err.message, "allow_" ID_C);
        if (getenv("TEST_VERBOSE"))
                fprintf(stderr, "  kernel said: %s\n", err.message);

        /* Nothing of it landed: same ruleset, A's policy still in force. */
        _cleanup_free_ char *after = nft_text();
        ASSERT_STREQ(after, before);
        ASSERT_FALSE(listed(ID_C));
        REACH(SBX_A, WORLD1);
        NO_REACH(SBX_A, WORLD2);
}

TEST_FULL(rejects_bad_input, 30) {
        topology();
        struct err err = { 0 };
        struct egress_policy p = { .sandbox_id = ID_A, .ip = SBX_A, .mode = PJ_EGRESS_OPEN };
        ASSERT_EQ(egress_apply(&p, &err), -ENOTCONN);
        init_default(NULL);
        p.sandbox_id = "AAAAAAAAAAAAAAAAAAAAAAAA";
        ASSERT_EQ(egress_apply(&p, &err), -EINVAL);
        p.sandbox_id = "aaaa";
        ASSERT_EQ(egress_apply(&p, &err), -EINVAL);
        p.sandbox_id = ID_A;
        struct pj_allow_entry h = { .kind = PJ_ALLOW_HOSTNAME };
        strscpy(h.host, "example.com", sizeof(h.host));
        p.mode = PJ_EGRESS_RESTRICTED;
        p.allow = &h;
        p.n_allow = 1;
        ASSERT_EQ(egress_apply(&p, &err), -EINVAL);
        ASSERT_CONTAINS(err.message, "hostname");
        p.mode = (enum pj_egress_mode) 42;
        ASSERT_EQ(egress_apply(&p, &err), -EINVAL);

        static const char *const bad_deny[] = { "10.0.0.1/8", NULL };
        static const char *const bad_br[] = { "a-very-long-bridge-name", NULL };
        struct egress_config cfg = { .bridges = bridges, .deny_cidrs = bad_deny };
        ASSERT_EQ(egress_init(&cfg, &err), -EINVAL);
        ASSERT_CONTAINS(err.message, "deny_cidrs[0]");
        cfg = (struct egress_config) { .bridges = bad_br };
        ASSERT_EQ(egress_init(&cfg, &err), -EINVAL);
        cfg = (struct egress_config) { .bridges = bridges, .dns_resolver = "nope" };
        ASSERT_EQ(egress_init(&cfg, &err), -EINVAL);
        cfg = (struct egress_config) { .bridges = bridges, .table = "bad table" };
        ASSERT_EQ(egress_init(&cfg, &err), -EINVAL);
        /* Nothing was written by the rejected calls. */
        ASSERT_FALSE(listed(ID_A));
}

TEST_FULL(concurrent_writers_serialise_through_genid, 60) {
        setup_default(NULL);
        /* Two agents (processes: the module mutex does not help here) rewrite
         * their sandboxes in a loop. Each batch is tagged with the generation it
         * read; a clash is refused with ERESTART and retried, never half-applied. */
        pid_t kids[2];
        for (int k = 0; k < 2; k++) {
                kids[k] = fork();
                ASSERT_TRUE(kids[k] >= 0);
                if (kids[k] == 0) {
                        if (getenv("TEST_VERBOSE")) {
                                log_open("test-egress", LOG_TARGET_STDERR);
                                log_set_max_level(LOG_DEBUG);
                        }
                        const char *id = k == 0 ? ID_A : ID_B;
                        uint32_t ip = k == 0 ? SBX_A : SBX_B;
                        for (int i = 0; i < 40; i++) {
                                struct pj_allow_entry e = { .kind = PJ_ALLOW_CIDR, .addr = IP(10, (uint32_t) i, 0, 0), .prefix = 16 };
                                struct egress_policy p = {
                                        .sandbox_id = id, .ip = ip, .allow = &e, .n_allow = 1,
                                        .mode = i % 2 ? PJ_EGRESS_RESTRICTED : PJ_EGRESS_OPEN,
                                };
                                struct err err = { 0 };
                                if (egress_apply(&p, &err) < 0) {
                                        fprintf(stderr, "  apply %s #%d: %s\n", id, i, err.message);
                                        _exit(1);
                                }
                        }
                        _exit(0);
                }
        }
        for (int k = 0; k < 2; k++) {
                int stt = 0;
                ASSERT_EQ(waitpid(kids[k], &stt, 0), kids[k]);
                ASSERT_TRUE(WIFEXITED(stt) && WEXITSTATUS(stt) == 0);
        }
        /* Last policy of each: restricted to 10.39.0.0/16. */
        _cleanup_json_ cJSON *j = nft_json();
        _cleanup_free_ char *ea = set_elems(j, "allow_" ID_A);
        _cleanup_free_ char *eb = set_elems(j, "allow_" ID_B);
        ASSERT_STREQ(ea, "10.39.0.0/16");
        ASSERT_STREQ(eb, "10.39.0.0/16");
        ASSERT_EQ(count_rules(j, "sbx_" ID_A), 3);
        NO_REACH(SBX_A, WORLD1);
        NO_REACH(SBX_B, WORLD1);
}

/* ------------------------------------------------------------ tightening ends connections */

/* A TCP connection from src in the sandbox ns to dst:PORT in the world ns; returns the
 * sandbox end (with a 1 s TCP_USER_TIMEOUT, so that a connection whose packets are dropped
 * errors out soon) and the world end in *ret_server. */
static int conn_open(uint32_t src, uint32_t dst, int *ret_server) {
        enter(T.sbx_fd);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        enter(T.node_fd);
        ASSERT_TRUE(fd >= 0);
        unsigned ut = 1000;
        ASSERT_EQ(setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof(ut)), 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(src) };
        struct sockaddr_in da = { .sin_family = AF_INET, .sin_port = htons(PORT), .sin_addr.s_addr = htonl(dst) };
        ASSERT_EQ(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ASSERT_TRUE(connect(fd, (struct sockaddr *) &da, sizeof(da)) == 0 || errno == EINPROGRESS);
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        ASSERT_EQ(poll(&p, 1, 2000), 1);
        int e = 0;
        socklen_t l = sizeof(e);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l);
        ASSERT_EQ(e, 0);
        /* T.listeners[0] is the world's PORT listener (topology() adds it first). */
        struct pollfd lp = { .fd = T.listeners[0], .events = POLLIN };
        ASSERT_EQ(poll(&lp, 1, 2000), 1);
        *ret_server = accept4(T.listeners[0], NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        ASSERT_TRUE(*ret_server >= 0);
        return fd;
}

/* One byte from `from` arrives at `to` within ms. */
static bool byte_arrives(int from, int to, int ms) {
        char c = 'x';
        if (send(from, &c, 1, MSG_NOSIGNAL) != 1)
                return false;
        struct pollfd p = { .fd = to, .events = POLLIN };
        if (poll(&p, 1, ms) != 1)
                return false;
        return recv(to, &c, 1, 0) == 1;
}

/* Both ways: the connection works. */
static bool conn_works(int c, int s) {
        return byte_arrives(c, s, 1000) && byte_arrives(s, c, 1000);
}

/* The sandbox end is dead: what it sends never arrives, and within a few seconds the
 * socket itself fails (its unacknowledged data hits TCP_USER_TIMEOUT). Only the sandbox
 * sends here: this topology routes without NAT, so a world host that sent first would
 * open a new flow towards the sandbox, which is ingress and not ours to police (behind
 * the masquerade of a real sandbox bridge no such flow reaches the sandbox). */
static bool conn_killed(int c, int s) {
        if (byte_arrives(c, s, 1500))
                return false;
        struct pollfd p = { .fd = c, .events = POLLIN };
        int64_t until = mono_ms() + 6000;
        while (mono_ms() < until) {
                if (poll(&p, 1, 200) == 1 && (p.revents & (POLLERR | POLLHUP))) {
                        int e = 0;
                        socklen_t l = sizeof(e);
                        getsockopt(c, SOL_SOCKET, SO_ERROR, &e, &l);
                        char x;
                        return e == ETIMEDOUT || recv(c, &x, 1, 0) < 0;
                }
        }
        return false;
}

TEST_FULL(tightening_ends_forbidden_connections, 60) {
        setup_mode(PJ_EGRESS_OPEN);
        int s1, s2, s3;
        _cleanup_close_ int c1 = conn_open(SBX_A, WORLD1, &s1);
        _cleanup_close_ int c2 = conn_open(SBX_A, WORLD2, &s2);
        _cleanup_close_ int sv1 = s1, sv2 = s2;
        ASSERT_TRUE(conn_works(c1, s1));
        ASSERT_TRUE(conn_works(c2, s2));
        /* Re-applying open (nothing tightens) leaves both alone. */
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        ASSERT_TRUE(conn_works(c1, s1));

        /* open -> restricted to WORLD2: the connection to WORLD1 ends, WORLD2's goes on. */
        static const char *const allow2[] = { "198.51.100.3", NULL };
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, allow2);
        ASSERT_TRUE(conn_works(c2, s2));
        ASSERT_TRUE(conn_killed(c1, s1));
        ASSERT_TRUE(conn_works(c2, s2));

        /* restricted -> deny_all: that one ends too. */
        apply(ID_A, SBX_A, PJ_EGRESS_DENY_ALL, NULL);
        ASSERT_TRUE(conn_killed(c2, s2));

        /* Pause or destroy (remove): whatever it had open ends. */
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        _cleanup_close_ int c3 = conn_open(SBX_A, WORLD1, &s3);
        _cleanup_close_ int sv3 = s3;
        ASSERT_TRUE(conn_works(c3, s3));
        struct err err = { 0 };
        ASSERT_OK(egress_remove(ID_A, SBX_A, &err));
        ASSERT_TRUE(conn_killed(c3, s3));

        /* Another sandbox takes the address over (the old one's remove never came): the
         * connections the old one opened do not ride on under the new one's policy. */
        int s4;
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        _cleanup_close_ int c4 = conn_open(SBX_A, WORLD1, &s4);
        _cleanup_close_ int sv4 = s4;
        ASSERT_TRUE(conn_works(c4, s4));
        apply(ID_C, SBX_A, PJ_EGRESS_RESTRICTED, allow2);
        ASSERT_TRUE(conn_killed(c4, s4));
}

/* Issue 24: a host on the node's network could open connections into a sandbox (only
 * mid-stream TCP was dropped on the way in). Now only replies come in; the sandbox's own
 * connections and the node's still work. */
TEST_FULL(nothing_from_outside_opens_a_connection_into_a_sandbox, 30) {
        setup();
        ASSERT_TRUE(probe_from(T.world_fd, WORLD1, SBX_A, PORT));      /* without us, it could */
        init_default(NULL);
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        for (int i = 0; i < 3; i++)
                ASSERT_FALSE(probe_from(T.world_fd, WORLD1, SBX_A, PORT));
        ASSERT_FALSE(probe_from(T.world_fd, WORLD3, SBX_A, PORT));
        REACH(SBX_A, WORLD1);
        bool node_reaches = false;
        for (int i = 0; i < 3 && !node_reaches; i++)
                node_reaches = probe_from(T.node_fd, GW_SBX, SBX_A, PORT);
        ASSERT_TRUE(node_reaches);
        /* Restricted and deny_all sandboxes take nothing in either. */
        static const char *const allow1[] = { "198.51.100.2", NULL };
        apply(ID_A, SBX_A, PJ_EGRESS_RESTRICTED, allow1);
        ASSERT_FALSE(probe_from(T.world_fd, WORLD1, SBX_A, PORT));
        apply(ID_A, SBX_A, PJ_EGRESS_DENY_ALL, NULL);
        ASSERT_FALSE(probe_from(T.world_fd, WORLD1, SBX_A, PORT));
}

/* ------------------------------------------------------------ more flows than one round */

static struct nlmsghdr *ct_put(char *buf, uint16_t type, uint16_t flags, uint32_t seq) {
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | type;
        nlh->nlmsg_flags = NLM_F_REQUEST | flags;
        nlh->nlmsg_seq = seq;
        struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
        g->nfgen_family = AF_INET;
        g->version = NFNETLINK_V0;
        return nlh;
}

static void ct_tuple(struct nlmsghdr *nlh, uint16_t type, uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport) {
        struct nlattr *t = mnl_attr_nest_start(nlh, type);
        struct nlattr *ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
        mnl_attr_put_u32(nlh, CTA_IP_V4_SRC, htonl(src));
        mnl_attr_put_u32(nlh, CTA_IP_V4_DST, htonl(dst));
        mnl_attr_nest_end(nlh, ip);
        struct nlattr *pr = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
        mnl_attr_put_u8(nlh, CTA_PROTO_NUM, IPPROTO_UDP);
        mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, htons(sport));
        mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(dport));
        mnl_attr_nest_end(nlh, pr);
        mnl_attr_nest_end(nlh, t);
}

/* Creates n UDP conntrack entries src -> dst:53 (source ports from 1024), as a busy
 * sandbox's flows would, straight through ctnetlink: many messages per send, errors read. */
static void ct_inject(struct mnl_socket *nl, uint32_t src, uint32_t dst, int n) {
        static char buf[64 * 1024];
        size_t off = 0;
        for (int i = 0; i < n; i++) {
                struct nlmsghdr *nlh = ct_put(buf + off, IPCTNL_MSG_CT_NEW, NLM_F_CREATE | NLM_F_EXCL, (uint32_t) i + 1);
                uint16_t sport = (uint16_t) (1024 + i);
                ct_tuple(nlh, CTA_TUPLE_ORIG, src, dst, sport, 53);
                ct_tuple(nlh, CTA_TUPLE_REPLY, dst, src, 53, sport);
                mnl_attr_put_u32(nlh, CTA_TIMEOUT, htonl(600));
                off += nlh->nlmsg_len;
                if (off > sizeof(buf) - 512 || i == n - 1) {
                        ASSERT_EQ(mnl_socket_sendto(nl, buf, off), (ssize_t) off);
                        off = 0;
                        char rb[8192];
                        ssize_t got;
                        while ((got = recv(mnl_socket_get_fd(nl), rb, sizeof(rb), MSG_DONTWAIT)) > 0) {
                                const struct nlmsghdr *h = (const struct nlmsghdr *) rb;
                                if (h->nlmsg_type == NLMSG_ERROR && ((const struct nlmsgerr *) mnl_nlmsg_get_payload(h))->error)
                                        test_fail(__FILE__, __LINE__, "conntrack entry not created: %s",
                                                  strerror(-((const struct nlmsgerr *) mnl_nlmsg_get_payload(h))->error));
                        }
                }
        }
}

struct ct_count {
        uint32_t src;
        int n;
};

static int ct_count_attr(const struct nlattr *a, void *data) {
        const struct nlattr **tb = data;
        if (mnl_attr_get_type(a) <= CTA_MAX)
                tb[mnl_attr_get_type(a)] = a;
        return MNL_CB_OK;
}

static int ct_count_cb(const struct nlmsghdr *nlh, void *data) {
        struct ct_count *c = data;
        const struct nlattr *tb[CTA_MAX + 1] = { 0 }, *tt[CTA_MAX + 1] = { 0 }, *ti[CTA_MAX + 1] = { 0 };
        mnl_attr_parse(nlh, sizeof(struct nfgenmsg), ct_count_attr, tb);
        if (tb[CTA_TUPLE_ORIG] && mnl_attr_parse_nested(tb[CTA_TUPLE_ORIG], ct_count_attr, tt) >= 0 && tt[CTA_TUPLE_IP] &&
            mnl_attr_parse_nested(tt[CTA_TUPLE_IP], ct_count_attr, ti) >= 0 && ti[CTA_IP_V4_SRC] &&
            ntohl(mnl_attr_get_u32(ti[CTA_IP_V4_SRC])) == c->src)
                c->n++;
        return MNL_CB_OK;
}

/* How many conntrack entries src opened, from a dump of this namespace's table. */
static int ct_count_from(struct mnl_socket *nl, uint32_t src) {
        static char buf[32768];
        struct nlmsghdr *nlh = ct_put(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP, 1u << 30);
        ASSERT_TRUE(mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) >= 0);
        struct ct_count c = { .src = src };
        for (;;) {
                ssize_t got = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                ASSERT_TRUE(got > 0);
                int r = mnl_cb_run(buf, (size_t) got, 1u << 30, mnl_socket_get_portid(nl), ct_count_cb, &c);
                if (r <= MNL_CB_STOP)
                        break;
        }
        return c.n;
}

/* Issue 24: a revoke deleted at most 65536 entries, so a sandbox that opened more kept the
 * rest of its flows past a tightening. 70000 flows (two destinations): all of them end. */
TEST_FULL(tightening_ends_more_flows_than_one_round_holds, 90) {
        setup_mode(PJ_EGRESS_OPEN);
        struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
        ASSERT_NOT_NULL(nl);
        ASSERT_EQ(mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID), 0);
        int rcvbuf = 8 << 20;
        (void) setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf));
        ct_inject(nl, SBX_A, WORLD1, 35000);
        ct_inject(nl, SBX_A, WORLD2, 35000);
        ct_inject(nl, SBX_B, WORLD1, 10);       /* another sandbox's flows stay */
        ASSERT_EQ(ct_count_from(nl, SBX_A), 70000);
        apply(ID_A, SBX_A, PJ_EGRESS_DENY_ALL, NULL);
        ASSERT_EQ(ct_count_from(nl, SBX_A), 0);
        ASSERT_EQ(ct_count_from(nl, SBX_B), 10);
        mnl_socket_close(nl);
}

/* ------------------------------------------------------------ read back = intended policy */

/* The rules of chain, one line per rule: its expressions in order as "counter",
 * "accept", "drop", "jump <chain>", "vmap @<map>", "@<set>" (a lookup) or "match"
 * (any other comparison; nft folds the implied nfproto check into the next one). */
static char *chain_shape(const cJSON *j, const char *chain) {
        struct strbuf sb;
        strbuf_init(&sb, 0);
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItem(j, "nftables")) {
                const cJSON *rule = cJSON_GetObjectItem(item, "rule"), *x;
                if (!rule || !streq_const(cJSON_GetStringValue(cJSON_GetObjectItem(rule, "chain")), chain))
                        continue;
                bool first = true;
                cJSON_ArrayForEach(x, cJSON_GetObjectItem(rule, "expr")) {
                        const cJSON *m = cJSON_GetObjectItem(x, "match"), *jump = cJSON_GetObjectItem(x, "jump");
                        const char *right = m ? cJSON_GetStringValue(cJSON_GetObjectItem(m, "right")) : NULL;
                        strbuf_printf(&sb, "%s", first ? "" : " ");
                        first = false;
                        if (cJSON_GetObjectItem(x, "counter"))
                                strbuf_printf(&sb, "counter");
                        else if (cJSON_GetObjectItem(x, "accept"))
                                strbuf_printf(&sb, "accept");
                        else if (cJSON_GetObjectItem(x, "drop"))
                                strbuf_printf(&sb, "drop");
                        else if (jump)
                                strbuf_printf(&sb, "jump %s", cJSON_GetStringValue(cJSON_GetObjectItem(jump, "target")));
                        else if (cJSON_GetObjectItem(x, "vmap"))
                                strbuf_printf(&sb, "vmap %s",
                                              cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(x, "vmap"), "data")));
                        else if (right && right[0] == '@')
                                strbuf_printf(&sb, "%s", right);
                        else if (m)
                                strbuf_printf(&sb, "match");
                        else
                                strbuf_printf(&sb, "?");
                }
                strbuf_printf(&sb, "\n");
        }
        return strbuf_steal(&sb);
}

/* The elements of map name as "ip:target", joined by ",". */
static char *map_elems(const cJSON *j, const char *name) {
        struct strbuf sb;
        strbuf_init(&sb, 0);
        const cJSON *item;
        cJSON_ArrayForEach(item, cJSON_GetObjectItem(j, "nftables")) {
                const cJSON *m = cJSON_GetObjectItem(item, "map"), *e;
                if (!m || !streq_const(cJSON_GetStringValue(cJSON_GetObjectItem(m, "name")), name))
                        continue;
                cJSON_ArrayForEach(e, cJSON_GetObjectItem(m, "elem")) {
                        const cJSON *jump = cJSON_GetObjectItem(cJSON_GetArrayItem(e, 1), "jump");
                        strbuf_printf(&sb, "%s%s:%s", sb.len ? "," : "", cJSON_GetStringValue(cJSON_GetArrayItem(e, 0)),
                                      cJSON_GetStringValue(cJSON_GetObjectItem(jump, "target")));
                }
        }
        return strbuf_steal(&sb);
}

TEST_FULL(json_read_back_matches_the_intended_policy, 30) {
        topology();
        init_default("198.51.100.3");
        static const char *const allow[] = { "198.51.100.2", "203.0.113.0/24", "203.0.113.7", NULL };
        apply(ID_A, SBX_A, PJ_EGRESS_OPEN, NULL);
        apply(ID_B, SBX_B, PJ_EGRESS_DENY_ALL, NULL);
        apply(ID_C, SBX_D, PJ_EGRESS_RESTRICTED, allow);
        _cleanup_json_ cJSON *j = nft_json();

        /* Who goes where: one element per sandbox address, to that sandbox's chain. */
        _cleanup_free_ char *map = map_elems(j, "sandboxes");
        ASSERT_STREQ(map, "169.254.90.2:sbx_" ID_A ",169.254.90.3:sbx_" ID_B ",169.254.90.4:sbx_" ID_C);
        /* DNS to the resolver: the open sandbox only. */
        _cleanup_free_ char *dns = set_elems(j, "dns_clients");
        ASSERT_STREQ(dns, "169.254.90.2");
        /* The always-deny set: built in plus the operator's list, merged. */
        _cleanup_free_ char *deny_el = set_elems(j, "node_deny");
        ASSERT_STREQ(deny_el, "169.254.0.0/16,198.51.100.4,224.0.0.0/4,255.255.255.255");
        /* Each mode's chain, rule by rule. */
        _cleanup_free_ char *open_c = chain_shape(j, "sbx_" ID_A);
        ASSERT_STREQ(open_c, "counter\ncounter accept\n");
        _cleanup_free_ char *deny_c = chain_shape(j, "sbx_" ID_B);
        ASSERT_STREQ(deny_c, "counter\ncounter drop\n");
        _cleanup_free_ char *restr_c = chain_shape(j, "sbx_" ID_C);
        ASSERT_STREQ(restr_c, "counter\n@allow_" ID_C " counter accept\ncounter drop\n");
        /* The restricted allowlist, merged (203.0.113.7 is inside 203.0.113.0/24); the others empty. */
        _cleanup_free_ char *allow_c = set_elems(j, "allow_" ID_C);
        ASSERT_STREQ(allow_c, "198.51.100.2,203.0.113.0/24");
        _cleanup_free_ char *allow_a = set_elems(j, "allow_" ID_A);
        ASSERT_STREQ(allow_a, "");
        /* The dispatch: established first, the always-deny set before any policy, sandbox to
         * sandbox dropped, then the per-sandbox map, then drop (fail closed). */
        _cleanup_free_ char *egress_c = chain_shape(j, "sbx_egress");
        ASSERT_STREQ(egress_c, "match accept\n"                             /* ct state established,related */
                               "match counter drop\n"                      /* not IPv4 */
                               "match match @dns_clients counter accept\n" /* udp 53 to the resolver */
                               "match match @dns_clients counter accept\n" /* tcp 53 to the resolver */
                               "@node_deny counter drop\n"
                               "match counter drop\n"                      /* oifname <bridge>: sandbox to sandbox */
                               "vmap @sandboxes\n"
                               "counter drop\n");
        _cleanup_free_ char *fwd = chain_shape(j, "forward_sbx");
        ASSERT_STREQ(fwd, "match jump sbx_egress\n");
        _cleanup_free_ char *into = chain_shape(j, "into_sbx");
        ASSERT_STREQ(into, "match match match counter drop\n"      /* oifname, iifname !=, ct state new,invalid */
                           "match match match counter drop\n");     /* oifname, ct state new, tcp flags */
}
