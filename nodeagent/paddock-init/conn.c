/* conn.c — connections to the agent: frame reading with bounds before allocation, the
 * HELLO check, dispatch of requests to processes (proc.c), files (files.c), watches (watch.c)
 * and TCP forwards, PARK, closing. Sending and the channel table are chan.c's. See
 * AGENT-PROTOCOL.md. */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

/* Protocol violation: tell the client why, flush that, close. */
static void conn_fail(struct conn *c, uint32_t id, const char *fmt, ...) _printf_(3, 4);
static void conn_fail(struct conn *c, uint32_t id, const char *fmt, ...) {
        char msg[PJ_AGENT_MAX_MESSAGE];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        pi_log("info", "closing a connection: %s", msg);
        conn_send_error(c, id, EPROTO, "%s", msg);
        c->closing = true;
        c->deadline_ms = pi_now_ms() + 1000;
}

/* ---------------------------------------------------------------- park */

/* PARK: a checkpoint of the sandbox (gVisor) cannot save a bound host socket, nor the
 * connections accepted on it. The requester's OK is sent before its connection goes (it
 * waits for nothing else); others lose theirs as on a restart. Processes stay. Undone by
 * paddock-init.c on PJ_AGENT_UNPARK_SIGNAL. */
static void park(struct conn *c, uint32_t id) {
        for (size_t i = 0; i < PI_MAX_CONNS; i++)
                if (pi.conns[i].used && &pi.conns[i] != c)
                        conn_close(&pi.conns[i]);
        if (pi.listen_fd >= 0)
                close(pi.listen_fd);
        pi.listen_fd = -1;
        unlink(pi.sock_path);
        pi.parked = true;
        conn_send_simple(c, PJ_AGENT_OK, id);
        conn_write(c);
        if (c->used)
                conn_close(c);
        pi_log("info", "parked: not listening until signal %d", PJ_AGENT_UNPARK_SIGNAL);
}

/* ---------------------------------------------------------------- files and forwards */

struct listdir_ctx {
        struct conn *c;
        uint32_t id;
};
static void listdir_emit(void *ud, struct pj_agent_fields *e, size_t n) {
        struct listdir_ctx *x = ud;
        conn_send(x->c, &(struct pj_agent_msg) { .type = PJ_AGENT_DIRENTS, .id = x->id, .entries = e, .n_entries = n });
}

static void reply(struct conn *c, uint32_t id, int r, const char *what, const char *path) {
        if (r < 0)
                conn_send_error(c, id, -r, "Cannot %s %s: %s.", what, path, strerror(-r));
        else
                conn_send_simple(c, PJ_AGENT_OK, id);
}

static void fwd_open(struct conn *c, const struct pj_agent_msg *m) {
        if (c->n_forwards >= PI_MAX_FORWARDS)
                return conn_send_error(c, m->id, EMFILE, "This connection has %d forwards open, the limit.", PI_MAX_FORWARDS);
        struct chan *ch = chan_new(c, m->id, CH_FORWARD);
        if (!ch)
                return;
        c->n_forwards++;
        ch->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) m->f.port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (ch->fd < 0 || (connect(ch->fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 && errno != EINPROGRESS)) {
                int r = errno;
                chan_close(c, ch);
                return conn_send_error(c, m->id, r, "Cannot connect to 127.0.0.1:%u: %s.", m->f.port, strerror(r));
        }
        ch->connecting = true;
}

/* The forwarded TCP connection broke: its channel ends with the reason. */
static void fwd_fail(struct conn *c, struct chan *ch, int err) {
        uint32_t id = ch->id;
        chan_close(c, ch);
        conn_send_error(c, id, err, "The forwarded connection failed: %s.", strerror(err));
}

/* Writes what is pending for a forward socket; half-closes once the client said END. */
void fwd_flush(struct conn *c, struct chan *ch) {
        while (pending_len(&ch->out)) {
                ssize_t n = send(ch->fd, ch->out.b.p + ch->out.off, pending_len(&ch->out), MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0)
                        return fwd_fail(c, ch, errno);
                ch->out.off += (size_t) n;
        }
        ch->out.b.len = ch->out.off = 0;
        if (ch->wr_end && !ch->wr_shut) {
                shutdown(ch->fd, SHUT_WR);
                ch->wr_shut = true;
        }
        if (ch->wr_shut && ch->rd_eof)
                chan_close(c, ch);
}

void fwd_read(struct conn *c, struct chan *ch) {
        static uint8_t buf[PI_CHUNK];
        ssize_t n = recv(ch->fd, buf, sizeof(buf), 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n < 0)
                return fwd_fail(c, ch, errno);
        if (n > 0)
                return conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = ch->id, .data = buf,
                                                            .data_len = (size_t) n });
        ch->rd_eof = true;
        conn_send_simple(c, PJ_AGENT_END, ch->id);
        if (ch->wr_shut)
                chan_close(c, ch);
}

void fwd_connected(struct conn *c, struct chan *ch) {
        int err = 0;
        socklen_t l = sizeof(err);
        if (getsockopt(ch->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                err = errno;
        if (err) {
                uint32_t id = ch->id;
                chan_close(c, ch);
                return conn_send_error(c, id, err, "Cannot connect to the forwarded port: %s.", strerror(err));
        }
        ch->connecting = false;
        conn_send_simple(c, PJ_AGENT_OK, ch->id);
}

/* A READ channel: one chunk per turn while the client keeps up. Chunks of a file are as
 * large as a frame takes: under gVisor every syscall is a trap, and a download is three per
 * chunk (poll, read, send); the sentry's CPU, not the copy, bounded downloads. */
void conn_read_step(struct conn *c, struct chan *ch) {
        static uint8_t buf[PI_FILE_CHUNK];
        ssize_t n = read(ch->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
                return;
        uint32_t id = ch->id;
        if (n < 0) {
                int r = errno;
                chan_close(c, ch);
                return conn_send_error(c, id, r, "Reading failed: %s.", strerror(r));
        }
        if (n == 0) {
                chan_close(c, ch);
                return conn_send_simple(c, PJ_AGENT_END, id);
        }
        conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = id, .data = buf, .data_len = (size_t) n });
}

/* DATA / END on a channel: WRITE file, FORWARD socket. */
static void do_data(struct conn *c, const struct pj_agent_msg *m) {
        struct chan *ch = chan_find(c, m->id);
        if (ch && ch->kind == CH_WATCH && m->type == PJ_AGENT_END)
                return watch_cancel(c, ch);
        if (!ch || (ch->kind != CH_WRITE && ch->kind != CH_FORWARD))
                return conn_send_error(c, m->id, EBADF, "Channel %u takes no %s.", m->id, pj_agent_type_name(m->type));
        if (ch->kind == CH_FORWARD) {
                if (ch->connecting || ch->wr_end)
                        return conn_fail(c, m->id, "%s on forward channel %u before OK or after END.",
                                         pj_agent_type_name(m->type), m->id);
                if (m->type == PJ_AGENT_END)
                        ch->wr_end = true;
                else
                        pending_put(&ch->out, m->data, m->data_len);
                return fwd_flush(c, ch);
        }
        if (m->type == PJ_AGENT_END) {
                bool failed = ch->failed;
                uint32_t id = ch->id;
                int r = 0;
                if (!failed && close(ch->fd) < 0)
                        r = -errno;
                ch->fd = -1;
                chan_close(c, ch);
                if (!failed)
                        reply(c, id, r, "write", "the file");
                return;
        }
        for (size_t off = 0; !ch->failed && off < m->data_len;) {
                ssize_t n = write(ch->fd, m->data + off, m->data_len - off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        ch->failed = true;
                        conn_send_error(c, m->id, errno, "Writing failed: %s.", strerror(errno));
                        break;
                }
                off += (size_t) n;
        }
}

/* ---------------------------------------------------------------- dispatch */

static void dispatch(struct conn *c, struct pj_agent_msg *m) {
        int r;
        if (!c->hello) {
                if (m->type != PJ_AGENT_HELLO)
                        return conn_fail(c, m->id, "The first frame must be HELLO, not %s.", pj_agent_type_name(m->type));
                if (!pj_agent_secret_equal(pi.secret, pi.secret_len, m->f.secret, strlen(m->f.secret))) {
                        pi_log("info", "a connection gave a wrong secret");
                        conn_send_error(c, m->id, EACCES, "Wrong secret.");
                        c->closing = true;
                        c->deadline_ms = pi_now_ms() + 1000;
                        return;
                }
                c->hello = true;
                return conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_HELLO_OK, .id = m->id,
                                                            .f.version = PJ_AGENT_VERSION });
        }
        switch ((enum pj_agent_type) m->type) {
        case PJ_AGENT_SPAWN:
                return proc_spawn(c, m);
        case PJ_AGENT_STDIN:
        case PJ_AGENT_STDIN_CLOSE: {
                struct proc *p = proc_of_request(c, m);
                if (!p)
                        return;
                if (p->fd_in < 0 || p->in_close)
                        return conn_send_error(c, m->id, EPIPE, "Process %d has no stdin open.", p->pid);
                if (m->type == PJ_AGENT_STDIN)
                        pending_put(&p->in, m->data, m->data_len);
                else
                        p->in_close = true;
                proc_write_stdin(p);
                if (PJ_AGENT_HAS(&m->f, PJ_AGENT_T_PID))
                        conn_send_simple(c, PJ_AGENT_OK, m->id);
                return;
        }
        case PJ_AGENT_SIGNAL: {
                struct proc *p = proc_of_request(c, m);
                if (!p)
                        return;
                if (p->reaped)
                        return conn_send_error(c, m->id, ESRCH, "Process %d has exited.", p->pid);
                proc_signal_group(p, (int) m->f.signo);
                if (PJ_AGENT_HAS(&m->f, PJ_AGENT_T_PID))
                        conn_send_simple(c, PJ_AGENT_OK, m->id);
                return;
        }
        case PJ_AGENT_RESIZE: {
                struct proc *p = proc_of_request(c, m);
                if (!p)
                        return;
                struct winsize ws = { .ws_row = (unsigned short) m->f.rows, .ws_col = (unsigned short) m->f.cols };
                if (!p->pty || p->fd_out < 0 || p->reaped)
                        return conn_send_error(c, m->id, ENOTTY, "Process %d has no terminal.", p->pid);
                if (ioctl(p->fd_out, TIOCSWINSZ, &ws) < 0)
                        return conn_send_error(c, m->id, errno, "Cannot resize: %s.", strerror(errno));
                if (PJ_AGENT_HAS(&m->f, PJ_AGENT_T_PID))
                        conn_send_simple(c, PJ_AGENT_OK, m->id);
                return;
        }
        case PJ_AGENT_LIST:
                return proc_list(c, m);
        case PJ_AGENT_ATTACH:
                return proc_attach(c, m);
        case PJ_AGENT_READ: {
                if (chan_find(c, m->id))
                        return conn_send_error(c, m->id, EBUSY, "Channel %u is in use on this connection.", m->id);
                r = files_open_read(m->f.path);
                if (r < 0)
                        return reply(c, m->id, r, "read", m->f.path);
                struct chan *ch = chan_new(c, m->id, CH_READ);
                if (!ch) {
                        close(r);
                        return;
                }
                ch->fd = r;
                return;
        }
        case PJ_AGENT_WRITE: {
                struct chan *ch = chan_new(c, m->id, CH_WRITE);
                if (!ch)
                        return;
                r = files_open_write(m->f.path, PJ_AGENT_HAS(&m->f, PJ_AGENT_T_MODE), m->f.mode, m->f.parents);
                if (r < 0) {
                        ch->failed = true;
                        return reply(c, m->id, r, "write", m->f.path);
                }
                ch->fd = r;
                return;
        }
        case PJ_AGENT_DATA:
        case PJ_AGENT_END:
                return do_data(c, m);
        case PJ_AGENT_STAT: {
                struct pj_agent_msg o = { .type = PJ_AGENT_STAT_OK, .id = m->id };
                r = files_stat(m->f.path, &o.f);
                if (r < 0)
                        return reply(c, m->id, r, "stat", m->f.path);
                return conn_send(c, &o);
        }
        case PJ_AGENT_LISTDIR: {
                struct listdir_ctx x = { c, m->id };
                bool truncated = false;
                r = files_listdir(m->f.path, listdir_emit, &x, &truncated);
                if (r < 0)
                        return reply(c, m->id, r, "list", m->f.path);
                return conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_END, .id = m->id,
                                                            .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_TRUNCATED),
                                                                   .truncated = truncated } });
        }
        case PJ_AGENT_MKDIR:
                return reply(c, m->id,
                             files_mkdir(m->f.path, m->f.parents, PJ_AGENT_HAS(&m->f, PJ_AGENT_T_MODE) ? m->f.mode : 0755),
                             "create directory", m->f.path);
        case PJ_AGENT_MOVE:
                return reply(c, m->id, files_move(m->f.path, m->f.to), "move", m->f.path);
        case PJ_AGENT_REMOVE:
                return reply(c, m->id, files_remove(m->f.path, m->f.recursive), "remove", m->f.path);
        case PJ_AGENT_FORWARD:
                return fwd_open(c, m);
        case PJ_AGENT_WATCH:
                return watch_open(c, m);
        case PJ_AGENT_PARK:
                return park(c, m->id);
        case PJ_AGENT_HELLO:
        case PJ_AGENT_HELLO_OK:
        case PJ_AGENT_ERROR:
        case PJ_AGENT_OK:
        case PJ_AGENT_SPAWNED:
        case PJ_AGENT_OUTPUT:
        case PJ_AGENT_EXIT:
        case PJ_AGENT_PROCS:
        case PJ_AGENT_STAT_OK:
        case PJ_AGENT_DIRENTS:
        case PJ_AGENT_EVENT:
                break;
        }
        conn_fail(c, m->id, "%s is not a request.", pj_agent_type_name(m->type));
}

/* ---------------------------------------------------------------- connections */

void conn_close(struct conn *c) {
        /* first the processes (chan_close detaches them), then the channels */
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                struct proc *p = &pi.procs[i];
                if (p->used && p->conn == c) {
                        p->conn = NULL;
                        if (p->kill_on_detach)
                                proc_signal_group(p, SIGKILL);
                }
        }
        for (size_t i = 0; i < PI_MAX_CHANS; i++)
                if (c->chans[i].used) {
                        if (c->chans[i].kind == CH_WATCH)
                                watch_chan_closed(c, c->chans[i].id);
                        chan_close(c, &c->chans[i]);
                }
        close(c->fd);
        free(c->payload);
        pj_agent_buf_done(&c->out);
        struct chan *chans = c->chans;
        memset(chans, 0, sizeof(*chans) * PI_MAX_CHANS);
        *c = (struct conn) { .fd = -1, .chans = chans };
}

/* Is the client sending faster than its stdin pipes or forward sockets take it? */
bool conn_blocked(const struct conn *c) {
        if (c->closing || conn_out_pending(c) > PI_OUT_MAX / 2)
                return true;
        for (size_t i = 0; i < PI_MAX_CHANS; i++) {
                const struct chan *ch = &c->chans[i];
                if (!ch->used)
                        continue;
                if (ch->kind == CH_FORWARD && pending_len(&ch->out) > PI_PENDING_MAX)
                        return true;
                if (ch->kind == CH_PROC && ch->proc && pending_len(&ch->proc->in) > PI_PENDING_MAX)
                        return true;
        }
        return false;
}

/* Reads what is there (at most a few frames' worth per turn), dispatching whole frames. */
void conn_read(struct conn *c) {
        for (int round = 0; round < 16 && c->used && !c->closing && !conn_blocked(c); round++) {
                ssize_t n;
                if (!c->have_h) {
                        n = read(c->fd, c->hdr + c->hdr_got, PJ_AGENT_HEADER_SIZE - c->hdr_got);
                } else {
                        n = c->h.len == c->pay_got ? 0 : read(c->fd, c->payload + c->pay_got, c->h.len - c->pay_got);
                        if (c->h.len == c->pay_got)
                                n = 1; /* an empty payload: nothing to read */
                }
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        return;
                if (n <= 0)
                        return conn_close(c);
                if (!c->have_h) {
                        c->hdr_got += (size_t) n;
                        if (c->hdr_got < PJ_AGENT_HEADER_SIZE)
                                continue;
                        struct err e;
                        if (pj_agent_header_decode(c->hdr, &c->h, &e) < 0)
                                return conn_fail(c, 0, "Bad frame header: %s", e.message);
                        /* before HELLO only a HELLO-sized frame is read */
                        if (!c->hello && c->h.len > PJ_AGENT_MAX_SECRET + 64)
                                return conn_fail(c, c->h.id, "A %u-byte frame before HELLO.", c->h.len);
                        c->have_h = true;
                        c->payload = xmalloc(c->h.len ? c->h.len : 1);
                        c->pay_got = 0;
                        if (c->h.len)
                                continue;
                } else if (c->h.len)
                        c->pay_got += (size_t) n;
                if (c->pay_got < c->h.len)
                        continue;
                struct pj_agent_msg m = { 0 };
                struct err e;
                int r = pj_agent_msg_decode(&c->h, c->payload, c->h.len, &m, &e);
                if (r < 0) {
                        conn_fail(c, c->h.id, "Bad %s frame: %s", pj_agent_type_name(c->h.type), e.message);
                } else
                        dispatch(c, &m);
                pj_agent_msg_done(&m);
                if (!c->used)
                        return;
                free(c->payload);
                c->payload = NULL;
                c->have_h = false;
                c->hdr_got = c->pay_got = 0;
        }
}

void conn_write(struct conn *c) {
        while (conn_out_pending(c)) {
                ssize_t n = send(c->fd, c->out.p + c->out_off, conn_out_pending(c), MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n < 0)
                        return conn_close(c);
                c->out_off += (size_t) n;
        }
        if (!conn_out_pending(c)) {
                c->out.len = c->out_off = 0;
                if (c->closing)
                        return conn_close(c);
        } else if (c->out_off > c->out.len / 2) {
                memmove(c->out.p, c->out.p + c->out_off, conn_out_pending(c));
                c->out.len -= c->out_off;
                c->out_off = 0;
        }
}

void conn_accept(void) {
        int fd = accept4(pi.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
                return;
        /* Room for a few file chunks in flight: each send that does not fit is another poll
         * and send, and under gVisor every syscall is a trap. Best effort (the host may cap it). */
        int sz = 4 * PI_FILE_CHUNK;
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        for (size_t i = 0; i < PI_MAX_CONNS; i++) {
                struct conn *c = &pi.conns[i];
                if (!c->used) {
                        struct chan *chans = c->chans;
                        *c = (struct conn) { .used = true, .fd = fd, .chans = chans, .deadline_ms = pi_now_ms() + PI_HELLO_MS };
                        return;
                }
        }
        pi_log("info", "refusing a connection: %d are open, the limit", PI_MAX_CONNS);
        close(fd);
}

