/* relay.c — controld's way to the in-sandbox agents on this node (the Nomad driver, where
 * controld runs on another host and cannot reach a sandbox's Unix socket).
 *
 * The parent (no capabilities) listens on [relay] listen. Each connection gets a thread of
 * its own, at most [relay] max_connections at once: the handshake of pj_relay.h (a fresh
 * challenge, the client's HMAC under the deployment secret, bounded by PJ_RELAY_HANDSHAKE_MS),
 * then the relay child opens the sandbox's agent socket and passes the connected fd back,
 * then bytes go both ways through one 64 KiB buffer per direction, never parsed. A side
 * that does not read stalls only its own connection (the buffer towards it fills and we
 * stop reading from the other side). TCP keepalive finds a controld that went away.
 *
 * The relay child (CAP_DAC_OVERRIDE only: the sockets are in Docker's root-only data root)
 * does relay_open_agent (relay-child.c, apart so that the children's dispatch in privsep.c
 * and the listener here, which asks that child, do not call each other both ways):
 * <docker_root>/volumes/paddock-init-<id>/_data/agent.sock, the tmpfs volume the sandbox's job mounts at /.paddock/run. The sandbox can write in that
 * directory, so the socket is opened without following a link (unixsock.h); the directories
 * above it are Docker's. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "fdio.h"
#include "log.h"
#include "nodeagent.h"
#include "pj_agent.h"
#include "pj_relay.h"
#include "strutil.h"
#include "tlsbridge.h"
#include "unixsock.h"

#define RELAY_BUF (64 * 1024)

/* ---------------------------------------------------------------- parent: listener */

static const struct agent_config *rcfg;
static SSL_CTX *tls;            /* [relay] tls_cert/tls_key; NULL = plain TCP */
static int listen_fd = -1, stop_pipe[2] = { -1, -1 };
static pthread_t accept_thread;
static bool started;
static atomic_int active;

int relay_active(void) { return atomic_load(&active); }

static int parse_listen(const char *s, struct sockaddr_in *sa) {
        const char *colon = strrchr(s, ':');
        if (!colon || colon == s || (size_t) (colon - s) >= INET_ADDRSTRLEN)
                return -EINVAL;
        char host[INET_ADDRSTRLEN];
        memcpy(host, s, (size_t) (colon - s));
        host[colon - s] = 0;
        int64_t port;
        if (safe_atoi64(colon + 1, &port) < 0 || port < 1 || port > 65535)
                return -EINVAL;
        *sa = (struct sockaddr_in) { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -EINVAL;
}

/* One direction of a relayed connection: what `from` sent that `to` has not taken yet. */
struct dir {
        int from, to;
        uint8_t *buf;
        size_t len, off;
        bool eof;       /* from said EOF (or went away) */
};

static bool dir_fill(struct dir *d) {
        if (d->eof || d->len)
                return true;
        ssize_t k = recv(d->from, d->buf, RELAY_BUF, MSG_DONTWAIT);
        if (k < 0)
                return errno == EAGAIN || errno == EINTR;
        if (k == 0)
                d->eof = true;
        d->len = (size_t) k;
        d->off = 0;
        return true;
}

/* false when the connection is over: `to` failed, or `from` ended and all it sent is through. */
static bool dir_drain(struct dir *d) {
        while (d->len > d->off) {
                ssize_t k = send(d->to, d->buf + d->off, d->len - d->off, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (k < 0)
                        return errno == EAGAIN || errno == EINTR;
                d->off += (size_t) k;
        }
        d->len = d->off = 0;
        return !d->eof;
}

/* Bytes both ways until one side ends. The agent protocol has no half-close: a controld that
 * closes is gone (its processes die with the connection, kill_on_detach), and an agent that
 * closes has nothing more to say, so either end closes both once its last bytes are through. */
static void pump(int tcp, int agent) {
        _cleanup_free_ uint8_t *b1 = xmalloc(RELAY_BUF), *b2 = xmalloc(RELAY_BUF);
        struct dir up = { .from = tcp, .to = agent, .buf = b1 }, down = { .from = agent, .to = tcp, .buf = b2 };
        for (;;) {
                if (!dir_fill(&up) || !dir_fill(&down) || !dir_drain(&up) || !dir_drain(&down))
                        return;
                struct pollfd p[2] = { { .fd = tcp }, { .fd = agent } };
                /* read only where the buffer is free; write only where something waits */
                if (!up.len)
                        p[0].events |= POLLIN;
                if (down.len)
                        p[0].events |= POLLOUT;
                if (!down.len)
                        p[1].events |= POLLIN;
                if (up.len)
                        p[1].events |= POLLOUT;
                if (poll(p, 2, -1) < 0 && errno != EINTR)
                        return;
                if ((p[0].revents | p[1].revents) & POLLNVAL)
                        return;
                /* An error, or a hang-up with nothing left to read: that side is gone for good. */
                for (int i = 0; i < 2; i++)
                        if ((p[i].revents & POLLERR) || ((p[i].revents & POLLHUP) && !(p[i].revents & POLLIN)))
                                return;
        }
}

static int read_exact(int fd, void *buf, size_t n, int64_t deadline) {
        for (size_t got = 0; got < n;) {
                ssize_t k = fd_recv_some(fd, (uint8_t *) buf + got, n - got, deadline);
                if (k < 0)
                        return (int) k;
                if (k == 0)
                        return -ECONNRESET;
                got += (size_t) k;
        }
        return 0;
}

static int send_status(int fd, int e, int64_t deadline) {
        uint32_t be = htonl((uint32_t) e);
        return fd_send_all(fd, &be, sizeof(be), deadline);
}

struct conn {
        int fd;
        char peer[64];
};

static void *conn_main(void *arg) {
        struct conn *cn = arg;
        int fd = cn->fd;
        int64_t deadline = mono_ms() + PJ_RELAY_HANDSHAKE_MS;
        uint8_t greeting[PJ_RELAY_GREETING_LEN], hello[PJ_RELAY_HELLO_LEN];
        char id[PJ_RELAY_ID_LEN + 1] = "";
        int r = 0;
        if (tls) {
                /* the TCP connection becomes the bridge's; we speak on its plain end */
                struct err terr = { 0 };
                fd = tls_bridge(tls, fd, NULL, deadline, &terr);
                if (fd < 0) {
                        log_info("relay: %s: %s", cn->peer, terr.message);
                        goto done;
                }
        }
        memcpy(greeting, PJ_RELAY_MAGIC, PJ_RELAY_MAGIC_LEN);
        random_fill(greeting + PJ_RELAY_MAGIC_LEN, PJ_RELAY_CHALLENGE_LEN);
        r = fd_send_all(fd, greeting, sizeof(greeting), deadline);
        if (r >= 0)
                r = read_exact(fd, hello, sizeof(hello), deadline);
        if (r < 0) {
                log_debug("relay: %s: no hello (%s)", cn->peer, strerror(-r));
                goto out;
        }
        r = pj_relay_check(rcfg->relay_secret, rcfg->relay_secret_len, greeting + PJ_RELAY_MAGIC_LEN, hello, id);
        if (r < 0) {
                log_warning("relay: %s: refused: %s", cn->peer, r == -EACCES ? "wrong MAC (not our deployment's secret)"
                                                                               : "malformed hello");
                (void) send_status(fd, -r, deadline);
                goto out;
        }
        struct ps_relay_open req = { .hdr.type = PS_RELAY_OPEN };
        memcpy(req.sandbox_id, id, sizeof(req.sandbox_id));
        struct ps_result res;
        int afd = -1;
        r = privsep_call_fd(PS_CHILD_RELAY, &req, sizeof(req), RELAY_OPEN_MS + 3000, &res, &afd);
        if (r < 0) {
                log_info("relay: %s: sandbox %s: %s", cn->peer, id, res.msg[0] ? res.msg : strerror(-r));
                (void) send_status(fd, r == -EPIPE ? EIO : -r, deadline);
                goto out;
        }
        if (send_status(fd, 0, deadline) < 0) {
                close(afd);
                goto out;
        }
        log_debug("relay: %s: sandbox %s connected", cn->peer, id);
        pump(fd, afd);
        close(afd);
out:
        explicit_bzero(hello, sizeof(hello));
        close(fd);
done:
        free(cn);
        atomic_fetch_sub(&active, 1);
        return NULL;
}

static void *accept_main(void *arg) {
        (void) arg;
        for (;;) {
                struct pollfd p[2] = { { .fd = listen_fd, .events = POLLIN }, { .fd = stop_pipe[0], .events = POLLIN } };
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error_errno(errno, "relay: poll: %m");
                        return NULL;
                }
                if (p[1].revents)
                        return NULL;
                struct sockaddr_in sa;
                socklen_t sl = sizeof(sa);
                int fd = accept4(listen_fd, (struct sockaddr *) &sa, &sl, SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
                                usleep(100000);   /* EMFILE and the like: do not spin */
                        continue;
                }
                if (atomic_fetch_add(&active, 1) >= rcfg->relay_max_conns) {
                        atomic_fetch_sub(&active, 1);
                        /* plain TCP: say why; under TLS a plain status would only garble the
                         * client's handshake, so the close alone says it */
                        if (!tls)
                                (void) send_status(fd, EBUSY, mono_ms() + 100);
                        close(fd);
                        continue;
                }
                int one = 1, idle = 60, intvl = 10, cnt = 6;
                (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                (void) setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
                (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
                (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
                (void) setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
                struct conn *cn = xnew0(struct conn, 1);
                cn->fd = fd;
                char a[INET_ADDRSTRLEN] = "?";
                (void) inet_ntop(AF_INET, &sa.sin_addr, a, sizeof(a));
                snprintf(cn->peer, sizeof(cn->peer), "%s:%u", a, (unsigned) ntohs(sa.sin_port));
                pthread_attr_t at;
                pthread_attr_init(&at);
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&at, 256 * 1024);
                pthread_t t;
                if (pthread_create(&t, &at, conn_main, cn) != 0) {
                        close(fd);
                        free(cn);
                        atomic_fetch_sub(&active, 1);
                }
                pthread_attr_destroy(&at);
        }
}

int relay_start(const struct agent_config *cfg, struct err *err) {
        if (!cfg->relay_listen)
                return 0;
        struct sockaddr_in sa;
        if (parse_listen(cfg->relay_listen, &sa) < 0)
                return err_set(err, -EINVAL, "[relay] listen: %s is not IPv4:PORT", cfg->relay_listen);
        rcfg = cfg;
        if (cfg->relay_tls_cert) {
                struct err terr = { 0 };
                tls = tls_server_ctx(cfg->relay_tls_cert, cfg->relay_tls_key, &terr);
                if (!tls)
                        return err_set(err, -EINVAL, "[relay] tls_cert %s / tls_key %s: %s", cfg->relay_tls_cert, cfg->relay_tls_key,
                                       terr.message);
        }
        listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        if (listen_fd < 0 || setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(listen_fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(listen_fd, 128) < 0 ||
            pipe2(stop_pipe, O_CLOEXEC) < 0) {
                int r = -errno;
                err_set(err, r, "[relay] listen %s: %s", cfg->relay_listen, strerror(-r));
                relay_stop();
                return r;
        }
        if (pthread_create(&accept_thread, NULL, accept_main, NULL) != 0) {
                err_set(err, -EAGAIN, "cannot start the relay thread");
                relay_stop();
                return -EAGAIN;
        }
        started = true;
        return 0;
}

void relay_stop(void) {
        if (started) {
                ssize_t _unused_ w = write(stop_pipe[1], "x", 1);
                pthread_join(accept_thread, NULL);
                started = false;
        }
        if (listen_fd >= 0)
                close(listen_fd);
        for (int i = 0; i < 2; i++)
                if (stop_pipe[i] >= 0)
                        close(stop_pipe[i]);
        listen_fd = stop_pipe[0] = stop_pipe[1] = -1;
        /* bridges still running hold their own SSL (and its reference to the context); those whose
         * connections have ended get a moment to free theirs */
        if (tls)
                tls_bridges_wait(1000);
        SSL_CTX_free(tls);
        tls = NULL;
}
