/* The node agent's relay (nodeagent/relay.c): controld's way, on the Nomad driver, to the
 * in-sandbox agent of a sandbox on another host. A real nodeagent with [relay] listening on
 * loopback, a real paddock-init (as a subreaper, no Docker) whose socket sits where Docker keeps
 * a sandbox's agent volume under a data root the test makes, and the handshake of pj_relay.h
 * spoken as controld speaks it (controld/nomad-relay.c). The Nomad suites (<suite>-nomad) run
 * every runtime test through this relay with real sandboxes; this program covers the refusals. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest-conn.h"
#include "guest-exec.h"
#include "agenttest.h"
#include "amqptest.h"
#include "cleanup.h"
#include "fdio.h"
#include "pj_relay.h"
#include "strutil.h"
#include "testlib.h"
#include "tlsbridge.h"
#include "tlstest.h"

#define AGENT_SECRET "the sandbox's own agent secret"
#define RELAY_SECRET "0123456789abcdef0123456789abcdef"
#define SB_ID "0123456789abcdef01234567"
#define T 10000

static pid_t relay_pid, init_pid;
static int relay_port;
static char root[300], relay_log[300], sock_dir[400];

static void stop_all(void *ud _unused_) {
        test_stop_child(&relay_pid);
        test_stop_child(&init_pid);
}

static void write_file(const char *path, const char *text, mode_t mode) {
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, text, strlen(text)), (ssize_t) strlen(text));
        close(fd);
}

/* <root>/volumes/paddock-init-<id>/_data: where Docker mounts a sandbox's agent volume. */
static void volume_dir(const char *id, char *out, size_t n) {
        snprintf(out, n, "%s/volumes/paddock-init-%s/_data", root, id);
        for (char *s = out + strlen(root) + 1;; s++)
                if (*s == '/' || !*s) {
                        char c = *s;
                        *s = 0;
                        ASSERT_OK(mkdir(out, 0700) < 0 && errno != EEXIST ? -errno : 0);
                        if (!(*s = c))
                                break;
                }
}

/* paddock-init for SB_ID, its socket in the fake data root. */
static void start_init(void) {
        volume_dir(SB_ID, sock_dir, sizeof(sock_dir));
        char secret[300], sock[500], log[300];
        snprintf(secret, sizeof(secret), "%s/agent.secret", test_tmpdir());
        snprintf(sock, sizeof(sock), "%s/agent.sock", sock_dir);
        snprintf(log, sizeof(log), "%s/init.log", test_tmpdir());
        write_file(secret, AGENT_SECRET "\n", 0600);
        setenv("PADDOCK_INIT_SUBREAPER", "1", 1);
        const char *bin = test_build_path("paddock-init");
        const char *argv[] = { bin, "--socket", sock, "--secret-file", secret, NULL };
        init_pid = test_spawn_logged(bin, argv, log);
        struct stat st;
        for (int i = 0; i < 500 && stat(sock, &st) < 0; i++)
                usleep(10000);
        ASSERT_OK(stat(sock, &st) < 0 ? -errno : 0);
}

/* A nodeagent whose only job here is the relay; extra: more [relay] keys. */
static void start_relay(const char *extra) {
        amqptest_need_broker();
        snprintf(root, sizeof(root), "%s/docker-root", test_tmpdir());
        ASSERT_OK(mkdir(root, 0700) < 0 && errno != EEXIST ? -errno : 0);
        char secret[300], conf[300], id[64], exch[96];
        snprintf(secret, sizeof(secret), "%s/relay.secret", test_tmpdir());
        write_file(secret, RELAY_SECRET "\n", 0600);
        snprintf(conf, sizeof(conf), "%s/nodeagent.conf", test_tmpdir());
        snprintf(relay_log, sizeof(relay_log), "%s/nodeagent.log", test_tmpdir());
        relay_port = test_free_port();
        snprintf(id, sizeof(id), "relay-%d", (int) getpid());
        snprintf(exch, sizeof(exch), "paddock.test-relay-%d", (int) getpid());
        agenttest_write_conf(conf, id, exch, NULL, "[relay]\nlisten = 127.0.0.1:%d\nsecret_file = %s\ndocker_root = %s\n%s",
                             relay_port, secret, root, extra ? extra : "");
        test_on_exit(stop_all, NULL);
        /* logged once it listens (no probe connection: it would hold a place for a moment) */
        relay_pid = agenttest_start(conf, relay_log, "relaying to in-sandbox agents");
}

static int tcp_dial(void) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) relay_port) };
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_OK(connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 ? -errno : 0);
        return fd;
}

static void read_n(int fd, void *buf, size_t n) {
        int64_t deadline = mono_ms() + T;
        for (size_t got = 0; got < n;) {
                ssize_t k = fd_recv_some(fd, (uint8_t *) buf + got, n - got, deadline);
                ASSERT_TRUE(k > 0);
                got += (size_t) k;
        }
}

/* The relay's status (an errno value, 0 = connected) after controld's handshake for id made
 * with secret; the fd stays open in *ret_fd. */
static int handshake(const char *secret, const char *id, int *ret_fd) {
        int fd = tcp_dial();
        int r = pj_relay_client_handshake(fd, secret, strlen(secret), id, mono_ms() + T);
        ASSERT_TRUE(r <= 0 && r != -ETIMEDOUT && r != -ECONNRESET && r != -EPROTO);
        *ret_fd = fd;
        return -r;
}

/* The relay's log, shown when a status is not the one expected (what the relay said why). */
static void dump_relay_log(void) {
        char *argv[] = { "tail", "-n", "40", relay_log, NULL };
        _cleanup_free_ char *text = NULL;
        (void) test_run_capture(argv, &text, 1 << 16);
        fprintf(stderr, "--- %s ---\n%s\n", relay_log, text ? text : "");
}
#define ASSERT_STATUS(got, want)                \
        do {                                    \
                int _g = (got);                 \
                if (_g != (want))               \
                        dump_relay_log();       \
                ASSERT_EQ(_g, (want));          \
        } while (0)

static int status_for(const char *secret, const char *id) {
        int fd;
        int st = handshake(secret, id, &fd);
        close(fd);
        return st;
}

struct out {
        char buf[4096];
        size_t n;
};

static int on_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct out *o = ud;
        (void) stream;
        size_t k = len < sizeof(o->buf) - 1 - o->n ? len : sizeof(o->buf) - 1 - o->n;
        memcpy(o->buf + o->n, data, k);
        o->n += k;
        return 0;
}

/* Runs argv on the agent behind fd (its HELLO first); stdout in o, the exit code returned. */
static int run_on(int fd, const char *const *argv, struct out *o) {
        struct guest_client *cl = NULL;
        struct err perr = { 0 };
        int r = guest_client_connect_fd(fd, AGENT_SECRET, mono_ms() + T, &cl, &perr);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "HELLO through the relay: %s %s", strerror(-r), perr.message);
        static const char *const env[] = { "PATH=/usr/local/bin:/usr/bin:/bin", NULL };
        struct guest_spawn sp = { .argv = argv, .env = env };
        struct guest_exec *x = NULL;
        struct err err = { 0 };
        r = guest_exec_start(cl, &sp, &x, &err);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "spawn through the relay: %s", err.message);
        memset(o, 0, sizeof(*o));
        int64_t deadline = mono_ms() + T;
        while ((r = guest_exec_read(x, 1000, -1, on_output, o)) == 0 && mono_ms() < deadline)
                ;
        ASSERT_EQ(r, 1);
        int code = -1;
        ASSERT_OK(guest_exec_exit_code(x, &code));
        guest_exec_free(x);
        return code;
}

TEST(commands_and_bytes_pass_through) {
        start_relay(NULL);
        start_init();
        int fd;
        ASSERT_STATUS(handshake(RELAY_SECRET, SB_ID, &fd), 0);
        struct out o;
        ASSERT_EQ(run_on(fd, (const char *const[]) { "sh", "-c", "echo through the relay; exit 7", NULL }, &o), 7);
        ASSERT_STREQ(o.buf, "through the relay\n");
        /* 3 MB of output: more than the relay's buffers, byte for byte */
        ASSERT_STATUS(handshake(RELAY_SECRET, SB_ID, &fd), 0);
        ASSERT_EQ(run_on(fd, (const char *const[]) { "sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x | wc -c", NULL },
                         &o),
                  0);
        ASSERT_STREQ(o.buf, "3000000\n");
        ASSERT_TRUE(test_log_has(relay_log, 0, "sandbox " SB_ID " connected", 5));
}

TEST(a_wrong_secret_or_a_malformed_hello_is_refused) {
        start_relay(NULL);
        start_init();
        ASSERT_STATUS(status_for("not the deployment's secret at all", SB_ID), EACCES);
        ASSERT_TRUE(test_log_has(relay_log, 0, "wrong MAC", 5));
        /* a hello whose id is not 24 lowercase hex */
        int fd = tcp_dial();
        uint8_t greeting[PJ_RELAY_GREETING_LEN], hello[PJ_RELAY_HELLO_LEN], st[4];
        read_n(fd, greeting, sizeof(greeting));
        memset(hello, 'Z', sizeof(hello));
        ASSERT_OK(fd_send_all(fd, hello, sizeof(hello), mono_ms() + T));
        read_n(fd, st, sizeof(st));
        ASSERT_EQ(st[3], EPROTO);
        close(fd);
        /* a replayed hello: right for another challenge, wrong for this one */
        fd = tcp_dial();
        read_n(fd, greeting, sizeof(greeting));
        uint8_t old[PJ_RELAY_GREETING_LEN];
        memcpy(old, greeting, sizeof(old));
        old[PJ_RELAY_MAGIC_LEN] ^= 1;
        ASSERT_OK(pj_relay_hello(RELAY_SECRET, strlen(RELAY_SECRET), old, SB_ID, hello));
        ASSERT_OK(fd_send_all(fd, hello, sizeof(hello), mono_ms() + T));
        read_n(fd, st, sizeof(st));
        ASSERT_EQ(st[3], EACCES);
        close(fd);
        /* the relay is still there for the right client */
        ASSERT_STATUS(status_for(RELAY_SECRET, SB_ID), 0);
}

TEST(no_agent_or_something_else_at_its_place) {
        start_relay(NULL);
        /* no volume at all for that sandbox */
        ASSERT_STATUS(status_for(RELAY_SECRET, "ffffffffffffffffffffffff"), ENOENT);
        /* the sandbox swapped its socket for a symlink to a host socket (here: a real agent's) */
        start_init();
        char other[400], link[500], sock[500];
        volume_dir("aaaaaaaaaaaaaaaaaaaaaaaa", other, sizeof(other));
        snprintf(link, sizeof(link), "%s/agent.sock", other);
        snprintf(sock, sizeof(sock), "%s/agent.sock", sock_dir);
        ASSERT_OK(symlink(sock, link));
        ASSERT_STATUS(status_for(RELAY_SECRET, "aaaaaaaaaaaaaaaaaaaaaaaa"), ENOTSOCK);
        /* a plain file there */
        volume_dir("bbbbbbbbbbbbbbbbbbbbbbbb", other, sizeof(other));
        snprintf(link, sizeof(link), "%s/agent.sock", other);
        write_file(link, "not a socket", 0600);
        ASSERT_STATUS(status_for(RELAY_SECRET, "bbbbbbbbbbbbbbbbbbbbbbbb"), ENOTSOCK);
        /* a socket nobody listens on any more (the agent was killed: it left its socket) */
        kill(init_pid, SIGKILL);
        test_stop_child(&init_pid);
        ASSERT_STATUS(status_for(RELAY_SECRET, SB_ID), ECONNREFUSED);
}

TEST(a_silent_client_is_dropped_and_connections_are_bounded) {
        start_relay("max_connections = 2\n");
        start_init();
        /* two that never say hello hold both places... */
        int a = tcp_dial(), b = tcp_dial();
        uint8_t greeting[PJ_RELAY_GREETING_LEN];
        read_n(a, greeting, sizeof(greeting));
        read_n(b, greeting, sizeof(greeting));
        /* ...so a third is told EBUSY at once */
        int c = tcp_dial();
        uint8_t st[4];
        read_n(c, st, sizeof(st));
        ASSERT_EQ(st[3], EBUSY);
        close(c);
        /* the handshake bound ends the silent ones (PJ_RELAY_HANDSHAKE_MS), and their places free */
        struct pollfd p = { .fd = a, .events = POLLIN };
        ASSERT_EQ(poll(&p, 1, PJ_RELAY_HANDSHAKE_MS + 3000), 1);
        char x;
        ASSERT_EQ(recv(a, &x, 1, 0), 0);
        close(a);
        close(b);
        int ok = -1;
        for (int i = 0; i < 50 && (ok = status_for(RELAY_SECRET, SB_ID)) == EBUSY; i++)
                usleep(100000);
        ASSERT_STATUS(ok, 0);
}

TEST(a_peer_that_goes_away_frees_its_place) {
        start_relay("max_connections = 1\n");
        start_init();
        for (int i = 0; i < 5; i++) {
                /* the place frees once the relay has seen the last client go */
                int fd = -1, st = -1;
                for (int k = 0; k < 50 && (st = handshake(RELAY_SECRET, SB_ID, &fd)) == EBUSY; k++) {
                        close(fd);
                        usleep(100000);
                }
                ASSERT_STATUS(st, 0);
                /* a client that leaves while its agent stays quiet */
                close(fd);
        }
}

/* A nodeagent whose [relay] has the secret secret_text and the extra keys more must refuse to
 * start, saying want. */
static void expect_start_refused(const char *secret_text, const char *more, const char *want) {
        snprintf(root, sizeof(root), "%s/docker-root", test_tmpdir());
        char secret[300], conf[300], log[300];
        snprintf(secret, sizeof(secret), "%s/refused.secret", test_tmpdir());
        write_file(secret, secret_text, 0600);
        snprintf(conf, sizeof(conf), "%s/nodeagent.conf", test_tmpdir());
        snprintf(log, sizeof(log), "%s/nodeagent.log", test_tmpdir());
        agenttest_write_conf(conf, "relay-bad", "paddock.test-relay-bad", NULL, "[relay]\nlisten = 127.0.0.1:%d\nsecret_file = %s\n%s",
                             test_free_port(), secret, more);
        const char *argv[] = { "nodeagent", "-d", "-f", conf, NULL };
        pid_t pid = test_spawn_logged(test_build_path("nodeagent"), argv, log);
        int st = 0;
        for (int i = 0; i < 500 && waitpid(pid, &st, WNOHANG) == 0; i++)
                usleep(10000);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
        ASSERT_TRUE(test_log_has(log, 0, want, 0));
}

TEST(the_relay_needs_a_secret_of_sane_size) {
        expect_start_refused("short\n", "", "[relay] secret_file");
        expect_start_refused("short\n", "", "16..1024 bytes");
}

/* ---- TLS ([relay] tls_cert/tls_key; controld's [nomad] relay_tls_ca) ---- */

static struct tlstest tls_files;

static void start_tls_relay(void) {
        tlstest_make(&tls_files, test_tmpdir(), "relay", "IP:127.0.0.1");
        char extra[700];
        snprintf(extra, sizeof(extra), "tls_cert = %s\ntls_key = %s\n", tls_files.cert, tls_files.key);
        start_relay(extra);
        ASSERT_TRUE(test_log_has(relay_log, 0, "with TLS", 0));
}

/* TCP to the relay, then TLS as controld does it: a plain fd, or -errno with err. */
static int tls_dial(const char *ca, const char *host, struct err *err) {
        SSL_CTX *ctx = tls_client_ctx(ca, err);
        ASSERT_NOT_NULL(ctx);
        int fd = tls_bridge(ctx, tcp_dial(), host, mono_ms() + T, err);
        SSL_CTX_free(ctx);
        return fd;
}

TEST(over_tls_commands_pass_and_the_bytes_on_the_wire_are_not_plain) {
        start_tls_relay();
        start_init();
        struct err err = { 0 };
        int fd = tls_dial(tls_files.ca, "127.0.0.1", &err);
        if (fd < 0)
                test_fail(__FILE__, __LINE__, "TLS to the relay: %s", err.message);
        ASSERT_STATUS(-pj_relay_client_handshake(fd, RELAY_SECRET, strlen(RELAY_SECRET), SB_ID, mono_ms() + T), 0);
        struct out o;
        ASSERT_EQ(run_on(fd, (const char *const[]) { "sh", "-c", "head -c 200000 /dev/zero | wc -c; echo secret-output", NULL },
                         &o),
                  0);
        ASSERT_STREQ(o.buf, "200000\nsecret-output\n");
        /* a plain client gets no greeting from a TLS relay: nothing in clear */
        int p = tcp_dial();
        uint8_t b[64];
        struct pollfd pf = { .fd = p, .events = POLLIN };
        ASSERT_OK(fd_send_all(p, "hello?\n", 7, mono_ms() + T));
        if (poll(&pf, 1, 2000) == 1) {
                ssize_t k = recv(p, b, sizeof(b), 0);
                ASSERT_TRUE(k <= 0 || memmem(b, (size_t) k, PJ_RELAY_MAGIC, PJ_RELAY_MAGIC_LEN) == NULL);
        }
        close(p);
        /* several at once, each its own bridge */
        int fds[4];
        for (int i = 0; i < 4; i++) {
                fds[i] = tls_dial(tls_files.ca, "127.0.0.1", &err);
                ASSERT_TRUE(fds[i] >= 0);
                ASSERT_OK(pj_relay_client_handshake(fds[i], RELAY_SECRET, strlen(RELAY_SECRET), SB_ID, mono_ms() + T));
        }
        for (int i = 0; i < 4; i++) {
                ASSERT_EQ(run_on(fds[i], (const char *const[]) { "echo", "one of four", NULL }, &o), 0);
                ASSERT_STREQ(o.buf, "one of four\n");
        }
        /* every bridge ends with its connection (run_on closed each) */
        tls_bridges_wait(5000);
        ASSERT_EQ(tls_bridges_live(), 0);
}

TEST(over_tls_a_relay_our_ca_did_not_sign_or_another_name_is_refused) {
        start_tls_relay();
        start_init();
        struct tlstest other;
        tlstest_make(&other, test_tmpdir(), "other", "IP:127.0.0.1");
        struct err err = { 0 };
        ASSERT_EQ(tls_dial(other.ca, "127.0.0.1", &err), -EPROTO);
        ASSERT_CONTAINS(err.message, "does not verify");
        /* the right CA, but the certificate is for 127.0.0.1, not this name */
        ASSERT_EQ(tls_dial(tls_files.ca, "relay.example", &err), -EPROTO);
        ASSERT_CONTAINS(err.message, "does not verify");
        ASSERT_EQ(tls_dial(tls_files.ca, "127.0.0.2", &err), -EPROTO);
        /* and the relay still serves the right client */
        int fd = tls_dial(tls_files.ca, "127.0.0.1", &err);
        ASSERT_TRUE(fd >= 0);
        ASSERT_OK(pj_relay_client_handshake(fd, RELAY_SECRET, strlen(RELAY_SECRET), SB_ID, mono_ms() + T));
        close(fd);
        tls_bridges_wait(5000);         /* the closed connection's bridge frees its memory */
        ASSERT_EQ(tls_bridges_live(), 0);
}

TEST(tls_cert_and_key_go_together) {
        expect_start_refused(RELAY_SECRET "\n", "tls_cert = /etc/hostname\n", "tls_cert and tls_key go together");
}
