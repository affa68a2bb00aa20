/* paddock-init.c — PID 1 of a sandbox: reaps orphans, forwards termination signals to the
 * process groups it started, and serves the agent protocol (proto-json/AGENT-PROTOCOL.md) on
 * a Unix socket: spawn processes (pipes or a PTY), stream their output, keep a bounded
 * replay of it, file operations, TCP forwards to 127.0.0.1.
 *
 *   paddock-init --socket PATH (--secret-file PATH | --secret-fd N)
 *
 * Not PID 1 (tests): PADDOCK_INIT_SUBREAPER=1 makes it a child subreaper instead.
 * One thread, poll() over non-blocking fds; signals through a signalfd. Every resource a
 * client can make us hold is bounded (paddock-init.h); a client that breaks the protocol or
 * does not read its output is disconnected, the agent and its processes stay. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "paddock-init.h"

/* ---------------------------------------------------------------- logging */

static void say(const char *level, const char *fmt, ...) _printf_(2, 3);
static void say(const char *level, const char *fmt, ...) {
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(line, sizeof(line), "paddock-init: %s: ", level);
        vsnprintf(line + n, sizeof(line) - n, fmt, ap);
        va_end(ap);
        size_t len = strlen(line);
        if (len < sizeof(line) - 1)
                line[len++] = '\n';
        ssize_t _unused_ w = write(STDERR_FILENO, line, len);
}

static uint64_t now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- state */

struct chunk {
        struct chunk *next;
        uint8_t stream;
        uint32_t len;
        uint8_t data[];
};

/* Bytes waiting to be written to a non-blocking fd. */
struct pending {
        struct pj_agent_buf b;
        size_t off;
};

struct conn;

struct proc {
        bool used;
        pid_t pid;
        char *tag;
        bool reaped, finished; /* finished: EXIT is decided (reaped and output drained) */
        int status;
        uint64_t reaped_ms;
        bool pty, kill_on_detach;
        int fd_in, fd_out, fd_err; /* pty: fd_out is the master, fd_in a dup of it */
        struct pending in;
        bool in_close; /* STDIN_CLOSE: close fd_in once in is written */
        struct chunk *ring_head, *ring_tail;
        size_t ring_bytes;
        struct conn *conn; /* attached: output goes to (conn, chan) */
        uint32_t chan;
        uint64_t seq; /* spawn order, for eviction */
};

enum chan_kind { CH_PROC, CH_READ, CH_WRITE, CH_FORWARD };

struct chan {
        bool used;
        uint32_t id;
        enum chan_kind kind;
        struct proc *proc;
        int fd;
        bool failed;             /* WRITE: an ERROR was sent, DATA is dropped until END */
        bool connecting, rd_eof, wr_end, wr_shut;
        struct pending out;      /* FORWARD: bytes for the socket */
};

struct conn {
        bool used;
        int fd;
        bool hello, closing;
        uint64_t deadline_ms; /* HELLO, or the flush before a close */
        uint8_t hdr[PJ_AGENT_HEADER_SIZE];
        size_t hdr_got;
        struct pj_agent_header h;
        bool have_h;
        uint8_t *payload;
        size_t pay_got;
        struct pj_agent_buf out;
        size_t out_off;
        struct chan *chans; /* PI_MAX_CHANS */
        unsigned n_forwards;
};

static struct {
        int listen_fd, sig_fd;
        char *secret;
        size_t secret_len;
        struct conn conns[PI_MAX_CONNS];
        struct proc procs[PJ_AGENT_MAX_PROCS];
        uint64_t seq;
        bool shutting_down;
        uint64_t shutdown_ms;
} S = { .listen_fd = -1, .sig_fd = -1 };

/* ---------------------------------------------------------------- sending */

static size_t out_pending(const struct conn *c) { return c->out.len - c->out_off; }

static void conn_close(struct conn *c);

static void send_msg(struct conn *c, const struct pj_agent_msg *m) {
        struct pj_error e;
        if (!c->used || c->closing)
                return;
        int r = pj_agent_msg_encode(m, &c->out, &e);
        if (r < 0)
                say("warning", "cannot encode %s: %s", pj_agent_type_name(m->type), r == -EINVAL ? e.message : strerror(-r));
        if (out_pending(c) > PI_OUT_MAX) {
                say("info", "a client does not read its output (%zu bytes unsent); closing it", out_pending(c));
                conn_close(c);
        }
}

static void send_error(struct conn *c, uint32_t id, int err, const char *fmt, ...) _printf_(4, 5);
static void send_error(struct conn *c, uint32_t id, int err, const char *fmt, ...) {
        char msg[PJ_AGENT_MAX_MESSAGE];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_ERROR, .id = id,
                                             .f = { .err = err > 0 && err < 4096 ? (uint32_t) err : EIO, .message = msg } });
}

static void send_simple(struct conn *c, uint8_t type, uint32_t id) {
        send_msg(c, &(struct pj_agent_msg) { .type = type, .id = id });
}

/* Protocol violation: tell the client why, flush that, close. */
static void conn_fail(struct conn *c, uint32_t id, const char *fmt, ...) _printf_(3, 4);
static void conn_fail(struct conn *c, uint32_t id, const char *fmt, ...) {
        char msg[PJ_AGENT_MAX_MESSAGE];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        say("info", "closing a connection: %s", msg);
        send_error(c, id, EPROTO, "%s", msg);
        c->closing = true;
        c->deadline_ms = now_ms() + 1000;
}

/* ---------------------------------------------------------------- channels */

static struct chan *chan_find(struct conn *c, uint32_t id) {
        for (size_t i = 0; i < PI_MAX_CHANS; i++)
                if (c->chans[i].used && c->chans[i].id == id)
                        return &c->chans[i];
        return NULL;
}

/* A fresh channel id on c, or NULL with an ERROR sent. */
static struct chan *chan_new(struct conn *c, uint32_t id, enum chan_kind kind) {
        if (chan_find(c, id)) {
                send_error(c, id, EBUSY, "Channel %u is in use on this connection.", id);
                return NULL;
        }
        for (size_t i = 0; i < PI_MAX_CHANS; i++)
                if (!c->chans[i].used) {
                        c->chans[i] = (struct chan) { .used = true, .id = id, .kind = kind, .fd = -1 };
                        return &c->chans[i];
                }
        send_error(c, id, EMFILE, "This connection has %d channels open, the limit.", PI_MAX_CHANS);
        return NULL;
}

static void chan_close(struct conn *c, struct chan *ch) {
        if (ch->kind == CH_PROC && ch->proc && ch->proc->conn == c && ch->proc->chan == ch->id)
                ch->proc->conn = NULL;
        if (ch->kind == CH_FORWARD)
                c->n_forwards--;
        if (ch->fd >= 0)
                close(ch->fd);
        pj_agent_buf_done(&ch->out.b);
        *ch = (struct chan) { .fd = -1 };
}

/* ---------------------------------------------------------------- processes */

static void ring_add(struct proc *p, uint8_t stream, const uint8_t *d, size_t n) {
        struct chunk *k = xmalloc(sizeof(*k) + n);
        *k = (struct chunk) { .stream = stream, .len = (uint32_t) n };
        memcpy(k->data, d, n);
        if (p->ring_tail)
                p->ring_tail->next = k;
        else
                p->ring_head = k;
        p->ring_tail = k;
        p->ring_bytes += n;
        while (p->ring_bytes > PI_RING_MAX && p->ring_head != p->ring_tail) {
                struct chunk *h = p->ring_head;
                p->ring_head = h->next;
                p->ring_bytes -= h->len;
                free(h);
        }
}

static void proc_free(struct proc *p) {
        for (struct chunk *k = p->ring_head, *n; k; k = n) {
                n = k->next;
                free(k);
        }
        if (p->fd_in >= 0)
                close(p->fd_in);
        if (p->fd_out >= 0)
                close(p->fd_out);
        if (p->fd_err >= 0)
                close(p->fd_err);
        pj_agent_buf_done(&p->in.b);
        free(p->tag);
        *p = (struct proc) { .fd_in = -1, .fd_out = -1, .fd_err = -1 };
}

static void exit_fields(const struct proc *p, struct pj_agent_fields *f) {
        if (WIFSIGNALED(p->status)) {
                f->code = -1;
                f->signo = (uint32_t) WTERMSIG(p->status);
        } else {
                f->code = WEXITSTATUS(p->status);
                f->signo = 0;
        }
}

/* EXIT ends the channel: its id is free again and the process, no longer watched, may give
 * its slot to a new one (proc_slot). */
static void proc_send_exit(struct proc *p) {
        if (!p->conn)
                return;
        struct conn *c = p->conn;
        struct pj_agent_msg m = { .type = PJ_AGENT_EXIT, .id = p->chan };
        exit_fields(p, &m.f);
        send_msg(c, &m);
        struct chan *ch = c->used && p->conn == c ? chan_find(c, p->chan) : NULL;
        if (ch)
                chan_close(c, ch);
        p->conn = NULL;
}

/* EXIT once the process is reaped and its output is drained (or the grace ran out: an
 * orphan still holds the pipe). */
static void proc_maybe_finish(struct proc *p, uint64_t now) {
        if (!p->used || p->finished || !p->reaped)
                return;
        if ((p->fd_out >= 0 || p->fd_err >= 0) && now < p->reaped_ms + PI_EXIT_GRACE_MS)
                return;
        if (p->fd_out >= 0)
                close(p->fd_out);
        if (p->fd_err >= 0)
                close(p->fd_err);
        if (p->fd_in >= 0)
                close(p->fd_in);
        p->fd_out = p->fd_err = p->fd_in = -1;
        pj_agent_buf_done(&p->in.b);
        p->in.off = 0;
        p->finished = true;
        proc_send_exit(p);
}

static void proc_output(struct proc *p, uint8_t stream, const uint8_t *d, size_t n) {
        ring_add(p, stream, d, n);
        if (p->conn)
                send_msg(p->conn, &(struct pj_agent_msg) { .type = PJ_AGENT_OUTPUT, .id = p->chan, .f.stream = stream,
                                                           .data = d, .data_len = n });
}

static void proc_read(struct proc *p, int *fdp, uint8_t stream) {
        static uint8_t buf[PI_CHUNK];
        ssize_t n = read(*fdp, buf, sizeof(buf));
        if (n > 0) {
                proc_output(p, stream, buf, (size_t) n);
                return;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        /* EOF, or EIO on a PTY master once the last slave is closed */
        if (p->pty && *fdp == p->fd_out && p->fd_in >= 0) {
                close(p->fd_in);
                p->fd_in = -1;
        }
        close(*fdp);
        *fdp = -1;
        proc_maybe_finish(p, now_ms());
}

static void proc_write_stdin(struct proc *p) {
        while (p->in.off < p->in.b.len) {
                ssize_t n = write(p->fd_in, p->in.b.p + p->in.off, p->in.b.len - p->in.off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0) { /* EPIPE: the reader is gone; what is left is dropped */
                        p->in.off = p->in.b.len;
                        break;
                }
                p->in.off += (size_t) n;
        }
        p->in.b.len = p->in.off = 0;
        if (p->in_close) {
                if (p->pty) {
                        /* a PTY has no half-close: EOT, what ^D at a terminal sends */
                        ssize_t _unused_ w = write(p->fd_in, "\x04", 1);
                } else {
                        close(p->fd_in);
                        p->fd_in = -1;
                }
                p->in_close = false;
        }
}

static struct proc *proc_by_pid(pid_t pid) {
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                if (S.procs[i].used && S.procs[i].pid == pid)
                        return &S.procs[i];
        return NULL;
}

/* A free slot; when all are taken, the oldest finished process that nobody watches gives
 * its slot up. NULL when every slot holds a live or watched process. */
static struct proc *proc_slot(void) {
        struct proc *old = NULL;
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                struct proc *p = &S.procs[i];
                if (!p->used)
                        return p;
                if (p->finished && !p->conn && (!old || p->seq < old->seq))
                        old = p;
        }
        if (old)
                proc_free(old);
        return old;
}

static void reap(void) {
        for (;;) {
                int st;
                pid_t pid = waitpid(-1, &st, WNOHANG);
                if (pid <= 0)
                        return;
                struct proc *p = proc_by_pid(pid);
                if (!p)
                        continue; /* an orphan: reaped, nothing to report */
                p->reaped = true;
                p->status = st;
                p->reaped_ms = now_ms();
                proc_maybe_finish(p, p->reaped_ms);
        }
}

/* "PATH=" of the request's environment, or the default execvp uses. */
static const char *env_path(char **env) {
        for (char **e = env; e && *e; e++)
                if (!strncmp(*e, "PATH=", 5))
                        return *e + 5;
        return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
}

/* In the child: execve argv[0], looked up in PATH like execvp (without its /bin/sh
 * fallback for ENOEXEC). Returns the errno to report. */
static int child_exec(char **argv, char **env) {
        static char *empty[] = { NULL };
        char **envp = env ? env : empty;
        if (strchr(argv[0], '/')) {
                execve(argv[0], argv, envp);
                return errno;
        }
        const char *path = env_path(env);
        int err = ENOENT;
        char full[PJ_AGENT_MAX_PATH + 256];
        for (const char *s = path;;) {
                const char *e = strchrnul(s, ':');
                size_t dl = (size_t) (e - s);
                if (dl + 1 + strlen(argv[0]) + 1 <= sizeof(full)) {
                        if (dl == 0)
                                snprintf(full, sizeof(full), "%s", argv[0]);
                        else
                                snprintf(full, sizeof(full), "%.*s/%s", (int) dl, s, argv[0]);
                        execve(full, argv, envp);
                        if (errno == EACCES)
                                err = EACCES;
                        else if (errno != ENOENT && errno != ENOTDIR)
                                return errno;
                }
                if (!*e)
                        return err;
                s = e + 1;
        }
}

static _noreturn_ void child(const struct pj_agent_msg *m, int in, int out, int err, const char *pts, int errpipe) {
        sigset_t all;
        sigemptyset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);
        for (int s = 1; s < NSIG; s++)
                signal(s, SIG_DFL);
        int e = 0;
        if (pts) {
                if (setsid() < 0)
                        e = errno;
                int t = e ? -1 : open(pts, O_RDWR);
                if (!e && (t < 0 || ioctl(t, TIOCSCTTY, 0) < 0))
                        e = errno;
                in = out = err = t;
        } else if (setpgid(0, 0) < 0)
                e = errno;
        if (!e && in < 0 && (in = open("/dev/null", O_RDONLY)) < 0)
                e = errno;
        if (!e && (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0))
                e = errno;
        if (!e && m->f.cwd && chdir(m->f.cwd) < 0)
                e = errno;
        bool has_uid = PJ_AGENT_HAS(&m->f, PJ_AGENT_T_UID), has_gid = PJ_AGENT_HAS(&m->f, PJ_AGENT_T_GID);
        if (!e && (has_uid || has_gid) && setgroups(0, NULL) < 0 && errno != EPERM)
                e = errno;
        if (!e && has_gid && setgid(m->f.gid) < 0)
                e = errno;
        if (!e && has_uid && setuid(m->f.uid) < 0)
                e = errno;
        if (!e) {
                /* whatever we inherited from our own parent must not leak into a sandbox process */
                for (int fd = 3; fd < 1024; fd++)
                        if (fd != errpipe)
                                fcntl(fd, F_SETFD, FD_CLOEXEC);
                e = child_exec(m->argv, m->env);
        }
        ssize_t _unused_ w = write(errpipe, &e, sizeof(e));
        _exit(127);
}

static int set_nonblock(int fd) {
        int fl = fcntl(fd, F_GETFL);
        return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static void do_spawn(struct conn *c, const struct pj_agent_msg *m) {
        bool pty = PJ_AGENT_HAS(&m->f, PJ_AGENT_T_ROWS);
        int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 }, ep[2] = { -1, -1 }, master = -1;
        char pts[128] = "";
        int r = 0;

        if (S.shutting_down)
                return send_error(c, m->id, ESHUTDOWN, "The sandbox is shutting down.");
        struct chan *ch = chan_new(c, m->id, CH_PROC);
        if (!ch)
                return;
        struct proc *p = proc_slot();
        if (!p) {
                chan_close(c, ch);
                return send_error(c, m->id, EAGAIN, "%d processes are running or watched, the limit.", PJ_AGENT_MAX_PROCS);
        }
        if (pipe2(ep, O_CLOEXEC) < 0)
                goto fail;
        if (pty) {
                struct winsize ws = { .ws_row = (unsigned short) m->f.rows, .ws_col = (unsigned short) m->f.cols };
                master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
                if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || ptsname_r(master, pts, sizeof(pts)) != 0 ||
                    ioctl(master, TIOCSWINSZ, &ws) < 0)
                        goto fail;
        } else {
                if ((m->f.stdin_pipe && pipe2(pin, O_CLOEXEC) < 0) || pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0)
                        goto fail;
        }
        pid_t pid = fork();
        if (pid < 0)
                goto fail;
        if (pid == 0)
                child(m, pin[0], pout[1], perr[1], pty ? pts : NULL, ep[1]);
        close(ep[1]);
        ep[1] = -1;
        if (pin[0] >= 0)
                close(pin[0]);
        if (pout[1] >= 0)
                close(pout[1]);
        if (perr[1] >= 0)
                close(perr[1]);
        int child_err = 0;
        ssize_t n;
        while ((n = read(ep[0], &child_err, sizeof(child_err))) < 0 && errno == EINTR)
                ;
        close(ep[0]);
        if (n == sizeof(child_err)) {
                while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                        ;
                if (pin[1] >= 0)
                        close(pin[1]);
                if (pout[0] >= 0)
                        close(pout[0]);
                if (perr[0] >= 0)
                        close(perr[0]);
                if (master >= 0)
                        close(master);
                chan_close(c, ch);
                return send_error(c, m->id, child_err, "Cannot start %s: %s.", m->argv[0], strerror(child_err));
        }
        *p = (struct proc) { .used = true, .pid = pid, .tag = xstrdup(m->f.tag ? m->f.tag : ""), .pty = pty,
                             .kill_on_detach = m->f.kill_on_detach, .fd_in = pin[1], .fd_out = pout[0], .fd_err = perr[0],
                             .seq = ++S.seq };
        if (pty) {
                p->fd_out = master;
                p->fd_in = fcntl(master, F_DUPFD_CLOEXEC, 3);
        }
        if (p->fd_in >= 0)
                set_nonblock(p->fd_in);
        set_nonblock(p->fd_out);
        if (p->fd_err >= 0)
                set_nonblock(p->fd_err);
        ch->proc = p;
        p->conn = c;
        p->chan = m->id;
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_SPAWNED, .id = m->id, .f.pid = (uint32_t) pid });
        return;
fail:
        r = errno;
        int *all[] = { &pin[0], &pin[1], &pout[0], &pout[1], &perr[0], &perr[1], &ep[0], &ep[1], &master };
        for (size_t i = 0; i < ELEMENTSOF(all); i++)
                if (*all[i] >= 0)
                        close(*all[i]);
        chan_close(c, ch);
        send_error(c, m->id, r, "Cannot start %s: %s.", m->argv[0], strerror(r));
}

/* The process on channel id of c, or NULL with an ERROR sent. */
static struct proc *chan_proc(struct conn *c, uint32_t id) {
        struct chan *ch = chan_find(c, id);
        if (!ch || ch->kind != CH_PROC || !ch->proc || ch->proc->conn != c) {
                send_error(c, id, EBADF, "Channel %u has no process on this connection.", id);
                return NULL;
        }
        return ch->proc;
}

static void do_attach(struct conn *c, const struct pj_agent_msg *m) {
        struct proc *p = proc_by_pid((pid_t) m->f.pid);
        if (!p)
                return send_error(c, m->id, ESRCH, "No process %u is known.", m->f.pid);
        struct chan *ch = chan_new(c, m->id, CH_PROC);
        if (!ch)
                return;
        if (p->conn) { /* the newest watcher wins */
                struct chan *old = chan_find(p->conn, p->chan);
                if (old)
                        chan_close(p->conn, old);
        }
        ch->proc = p;
        p->conn = c;
        p->chan = m->id;
        send_simple(c, PJ_AGENT_OK, m->id);
        for (struct chunk *k = p->ring_head; k; k = k->next)
                send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_OUTPUT, .id = m->id, .f.stream = k->stream,
                                                     .data = k->data, .data_len = k->len });
        if (p->finished)
                proc_send_exit(p);
}

static void do_list(struct conn *c, const struct pj_agent_msg *m) {
        struct pj_agent_fields e[PJ_AGENT_MAX_PROCS];
        size_t n = 0;
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                struct proc *p = &S.procs[i];
                if (!p->used)
                        continue;
                e[n] = (struct pj_agent_fields) { .present = PJ_AGENT_BIT(PJ_AGENT_T_TAG), .pid = (uint32_t) p->pid,
                                                  .tag = p->tag, .running = !p->finished };
                if (p->finished) {
                        exit_fields(p, &e[n]);
                        e[n].present |= PJ_AGENT_BIT(PJ_AGENT_T_CODE) | PJ_AGENT_BIT(PJ_AGENT_T_SIGNAL);
                }
                n++;
        }
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_PROCS, .id = m->id, .entries = e, .n_entries = n });
}

static void proc_signal_group(struct proc *p, int sig) {
        if (p->reaped)
                return;
        if (kill(-p->pid, sig) < 0)
                kill(p->pid, sig);
}

/* ---------------------------------------------------------------- files and forwards */

struct listdir_ctx {
        struct conn *c;
        uint32_t id;
};
static void listdir_emit(void *ud, struct pj_agent_fields *e, size_t n) {
        struct listdir_ctx *x = ud;
        send_msg(x->c, &(struct pj_agent_msg) { .type = PJ_AGENT_DIRENTS, .id = x->id, .entries = e, .n_entries = n });
}

static void reply(struct conn *c, uint32_t id, int r, const char *what, const char *path) {
        if (r < 0)
                send_error(c, id, -r, "Cannot %s %s: %s.", what, path, strerror(-r));
        else
                send_simple(c, PJ_AGENT_OK, id);
}

static void do_forward(struct conn *c, const struct pj_agent_msg *m) {
        if (c->n_forwards >= PI_MAX_FORWARDS)
                return send_error(c, m->id, EMFILE, "This connection has %d forwards open, the limit.", PI_MAX_FORWARDS);
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
                return send_error(c, m->id, r, "Cannot connect to 127.0.0.1:%u: %s.", m->f.port, strerror(r));
        }
        ch->connecting = true;
}

static bool pending_put(struct pending *p, const uint8_t *d, size_t n) {
        if (p->off && p->off == p->b.len)
                p->b.len = p->off = 0;
        pj_agent_buf_put(&p->b, d, n);
        return true;
}

static size_t pending_len(const struct pending *p) { return p->b.len - p->off; }

/* Writes what is pending for a forward socket; half-closes once the client said END. */
static void forward_flush(struct conn *c, struct chan *ch) {
        while (pending_len(&ch->out)) {
                ssize_t n = send(ch->fd, ch->out.b.p + ch->out.off, pending_len(&ch->out), MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n < 0) {
                        int r = errno;
                        uint32_t id = ch->id;
                        chan_close(c, ch);
                        return send_error(c, id, r, "The forwarded connection failed: %s.", strerror(r));
                }
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

static void forward_read(struct conn *c, struct chan *ch) {
        static uint8_t buf[PI_CHUNK];
        ssize_t n = recv(ch->fd, buf, sizeof(buf), 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n < 0) {
                int r = errno;
                uint32_t id = ch->id;
                chan_close(c, ch);
                return send_error(c, id, r, "The forwarded connection failed: %s.", strerror(r));
        }
        if (n > 0)
                return send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = ch->id, .data = buf,
                                                            .data_len = (size_t) n });
        ch->rd_eof = true;
        send_simple(c, PJ_AGENT_END, ch->id);
        if (ch->wr_shut)
                chan_close(c, ch);
}

static void forward_connected(struct conn *c, struct chan *ch) {
        int err = 0;
        socklen_t l = sizeof(err);
        if (getsockopt(ch->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
                err = errno;
        if (err) {
                uint32_t id = ch->id;
                chan_close(c, ch);
                return send_error(c, id, err, "Cannot connect to the forwarded port: %s.", strerror(err));
        }
        ch->connecting = false;
        send_simple(c, PJ_AGENT_OK, ch->id);
}

/* A READ channel: one chunk per turn while the client keeps up. */
static void read_step(struct conn *c, struct chan *ch) {
        static uint8_t buf[PI_CHUNK];
        ssize_t n = read(ch->fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
                return;
        uint32_t id = ch->id;
        if (n < 0) {
                int r = errno;
                chan_close(c, ch);
                return send_error(c, id, r, "Reading failed: %s.", strerror(r));
        }
        if (n == 0) {
                chan_close(c, ch);
                return send_simple(c, PJ_AGENT_END, id);
        }
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = id, .data = buf, .data_len = (size_t) n });
}

/* DATA / END on a channel: WRITE file, FORWARD socket. */
static void do_data(struct conn *c, const struct pj_agent_msg *m) {
        struct chan *ch = chan_find(c, m->id);
        if (!ch || (ch->kind != CH_WRITE && ch->kind != CH_FORWARD))
                return send_error(c, m->id, EBADF, "Channel %u takes no %s.", m->id, pj_agent_type_name(m->type));
        if (ch->kind == CH_FORWARD) {
                if (ch->connecting || ch->wr_end)
                        return conn_fail(c, m->id, "%s on forward channel %u before OK or after END.",
                                         pj_agent_type_name(m->type), m->id);
                if (m->type == PJ_AGENT_END)
                        ch->wr_end = true;
                else
                        pending_put(&ch->out, m->data, m->data_len);
                return forward_flush(c, ch);
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
                        send_error(c, m->id, errno, "Writing failed: %s.", strerror(errno));
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
                if (!pj_agent_secret_equal(S.secret, S.secret_len, m->f.secret, strlen(m->f.secret))) {
                        say("info", "a connection gave a wrong secret");
                        send_error(c, m->id, EACCES, "Wrong secret.");
                        c->closing = true;
                        c->deadline_ms = now_ms() + 1000;
                        return;
                }
                c->hello = true;
                return send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_HELLO_OK, .id = m->id,
                                                            .f.version = PJ_AGENT_VERSION });
        }
        switch ((enum pj_agent_type) m->type) {
        case PJ_AGENT_SPAWN:
                return do_spawn(c, m);
        case PJ_AGENT_STDIN:
        case PJ_AGENT_STDIN_CLOSE: {
                struct proc *p = chan_proc(c, m->id);
                if (!p)
                        return;
                if (p->fd_in < 0 || p->in_close)
                        return send_error(c, m->id, EPIPE, "Process %d has no stdin open.", p->pid);
                if (m->type == PJ_AGENT_STDIN)
                        pending_put(&p->in, m->data, m->data_len);
                else
                        p->in_close = true;
                return proc_write_stdin(p);
        }
        case PJ_AGENT_SIGNAL: {
                struct proc *p = chan_proc(c, m->id);
                if (!p)
                        return;
                if (p->reaped)
                        return send_error(c, m->id, ESRCH, "Process %d has exited.", p->pid);
                return proc_signal_group(p, (int) m->f.signo);
        }
        case PJ_AGENT_RESIZE: {
                struct proc *p = chan_proc(c, m->id);
                if (!p)
                        return;
                struct winsize ws = { .ws_row = (unsigned short) m->f.rows, .ws_col = (unsigned short) m->f.cols };
                if (!p->pty || p->fd_out < 0)
                        return send_error(c, m->id, ENOTTY, "Process %d has no terminal.", p->pid);
                if (ioctl(p->fd_out, TIOCSWINSZ, &ws) < 0)
                        return send_error(c, m->id, errno, "Cannot resize: %s.", strerror(errno));
                return;
        }
        case PJ_AGENT_LIST:
                return do_list(c, m);
        case PJ_AGENT_ATTACH:
                return do_attach(c, m);
        case PJ_AGENT_READ: {
                if (chan_find(c, m->id))
                        return send_error(c, m->id, EBUSY, "Channel %u is in use on this connection.", m->id);
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
                return send_msg(c, &o);
        }
        case PJ_AGENT_LISTDIR: {
                struct listdir_ctx x = { c, m->id };
                bool truncated = false;
                r = files_listdir(m->f.path, listdir_emit, &x, &truncated);
                if (r < 0)
                        return reply(c, m->id, r, "list", m->f.path);
                return send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_END, .id = m->id,
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
                return do_forward(c, m);
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
                break;
        }
        conn_fail(c, m->id, "%s is not a request.", pj_agent_type_name(m->type));
}

/* ---------------------------------------------------------------- connections */

static void conn_close(struct conn *c) {
        /* first the processes (chan_close detaches them), then the channels */
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                struct proc *p = &S.procs[i];
                if (p->used && p->conn == c) {
                        p->conn = NULL;
                        if (p->kill_on_detach)
                                proc_signal_group(p, SIGKILL);
                }
        }
        for (size_t i = 0; i < PI_MAX_CHANS; i++)
                if (c->chans[i].used)
                        chan_close(c, &c->chans[i]);
        close(c->fd);
        free(c->payload);
        pj_agent_buf_done(&c->out);
        struct chan *chans = c->chans;
        memset(chans, 0, sizeof(*chans) * PI_MAX_CHANS);
        *c = (struct conn) { .fd = -1, .chans = chans };
}

/* Is the client sending faster than its stdin pipes or forward sockets take it? */
static bool conn_blocked(const struct conn *c) {
        if (c->closing || out_pending(c) > PI_OUT_MAX / 2)
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
static void conn_read(struct conn *c) {
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
                        struct pj_error e;
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
                struct pj_error e;
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

static void conn_write(struct conn *c) {
        while (out_pending(c)) {
                ssize_t n = send(c->fd, c->out.p + c->out_off, out_pending(c), MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n < 0)
                        return conn_close(c);
                c->out_off += (size_t) n;
        }
        if (!out_pending(c)) {
                c->out.len = c->out_off = 0;
                if (c->closing)
                        return conn_close(c);
        } else if (c->out_off > c->out.len / 2) {
                memmove(c->out.p, c->out.p + c->out_off, out_pending(c));
                c->out.len -= c->out_off;
                c->out_off = 0;
        }
}

static void conn_accept(void) {
        int fd = accept4(S.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
                return;
        for (size_t i = 0; i < PI_MAX_CONNS; i++) {
                struct conn *c = &S.conns[i];
                if (!c->used) {
                        struct chan *chans = c->chans;
                        *c = (struct conn) { .used = true, .fd = fd, .chans = chans, .deadline_ms = now_ms() + PI_HELLO_MS };
                        return;
                }
        }
        say("info", "refusing a connection: %d are open, the limit", PI_MAX_CONNS);
        close(fd);
}

/* ---------------------------------------------------------------- main loop */

static void on_signal(void) {
        struct signalfd_siginfo si;
        while (read(S.sig_fd, &si, sizeof(si)) == sizeof(si)) {
                int sig = (int) si.ssi_signo;
                if (sig == SIGCHLD)
                        continue;
                /* tini's job: the signal goes to what we started (each its own process group) */
                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                        if (S.procs[i].used)
                                proc_signal_group(&S.procs[i], sig);
                if ((sig == SIGTERM || sig == SIGINT) && !S.shutting_down) {
                        say("info", "%s: stopping once the processes have exited", strsignal(sig));
                        S.shutting_down = true;
                        S.shutdown_ms = now_ms();
                }
        }
        reap();
}

static bool any_running(void) {
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                if (S.procs[i].used && !S.procs[i].reaped)
                        return true;
        return false;
}

enum pk { PK_LISTEN, PK_SIG, PK_CONN, PK_OUT, PK_ERR, PK_IN, PK_FWD };
struct pref {
        enum pk kind;
        void *ptr;
        struct conn *conn;
};

#define MAX_POLL (2 + PI_MAX_CONNS * (1 + PI_MAX_FORWARDS) + PJ_AGENT_MAX_PROCS * 3)

static int serve(void) {
        static struct pollfd pfd[MAX_POLL];
        static struct pref ref[MAX_POLL];

        for (;;) {
                uint64_t now = now_ms();
                size_t n = 0;
                int timeout = 1000;
                bool work = false;

                if (S.shutting_down) {
                        if (!any_running())
                                return 0;
                        if (now > S.shutdown_ms + PI_SHUTDOWN_MS) {
                                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                                        if (S.procs[i].used)
                                                proc_signal_group(&S.procs[i], SIGKILL);
                        }
                }
#define ADD(fd_, ev_, kind_, ptr_, conn_) \
        do { \
                pfd[n] = (struct pollfd) { .fd = (fd_), .events = (ev_) }; \
                ref[n++] = (struct pref) { (kind_), (ptr_), (conn_) }; \
        } while (0)
                ADD(S.sig_fd, POLLIN, PK_SIG, NULL, NULL);
                if (!S.shutting_down)
                        ADD(S.listen_fd, POLLIN, PK_LISTEN, NULL, NULL);
                for (size_t i = 0; i < PI_MAX_CONNS; i++) {
                        struct conn *c = &S.conns[i];
                        if (!c->used)
                                continue;
                        if ((!c->hello || c->closing) && now >= c->deadline_ms) {
                                conn_close(c);
                                continue;
                        }
                        if (!c->hello || c->closing)
                                timeout = 100;
                        short ev = (conn_blocked(c) ? 0 : POLLIN) | (out_pending(c) ? POLLOUT : 0);
                        ADD(c->fd, ev, PK_CONN, c, c);
                        for (size_t k = 0; k < PI_MAX_CHANS; k++) {
                                struct chan *ch = &c->chans[k];
                                if (!ch->used)
                                        continue;
                                if (ch->kind == CH_READ && out_pending(c) < PI_WATERMARK)
                                        work = true;
                                if (ch->kind != CH_FORWARD)
                                        continue;
                                short fe = ch->connecting || pending_len(&ch->out) ? POLLOUT : 0;
                                if (!ch->connecting && !ch->rd_eof && out_pending(c) < PI_WATERMARK)
                                        fe |= POLLIN;
                                ADD(ch->fd, fe, PK_FWD, ch, c);
                        }
                }
                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                        struct proc *p = &S.procs[i];
                        if (!p->used)
                                continue;
                        if (p->reaped && !p->finished)
                                timeout = 50; /* the exit grace */
                        bool slow = p->conn && out_pending(p->conn) >= PI_WATERMARK;
                        if (p->fd_out >= 0 && !slow)
                                ADD(p->fd_out, POLLIN, PK_OUT, p, NULL);
                        if (p->fd_err >= 0 && !slow)
                                ADD(p->fd_err, POLLIN, PK_ERR, p, NULL);
                        if (p->fd_in >= 0 && pending_len(&p->in))
                                ADD(p->fd_in, POLLOUT, PK_IN, p, NULL);
                }
#undef ADD
                int r = poll(pfd, n, work ? 0 : timeout);
                if (r < 0 && errno != EINTR)
                        return -errno;
                for (size_t i = 0; r > 0 && i < n; i++) {
                        short re = pfd[i].revents;
                        if (!re)
                                continue;
                        struct conn *c = ref[i].conn;
                        if (c && !c->used)
                                continue; /* closed earlier in this round */
                        switch (ref[i].kind) {
                        case PK_LISTEN:
                                conn_accept();
                                break;
                        case PK_SIG:
                                on_signal();
                                break;
                        case PK_CONN:
                                if (re & POLLOUT)
                                        conn_write(c);
                                if (c->used && (re & (POLLIN | POLLHUP | POLLERR)))
                                        conn_read(c);
                                break;
                        case PK_FWD: {
                                struct chan *ch = ref[i].ptr;
                                if (!ch->used)
                                        break;
                                if (ch->connecting) {
                                        forward_connected(c, ch);
                                        break;
                                }
                                if (re & POLLOUT)
                                        forward_flush(c, ch);
                                if (ch->used && !ch->rd_eof && (re & (POLLIN | POLLHUP | POLLERR)))
                                        forward_read(c, ch);
                                break;
                        }
                        case PK_OUT:
                        case PK_ERR: {
                                struct proc *p = ref[i].ptr;
                                int *fdp = ref[i].kind == PK_OUT ? &p->fd_out : &p->fd_err;
                                if (p->used && *fdp == pfd[i].fd)
                                        proc_read(p, fdp, ref[i].kind == PK_OUT ? 1 : 2);
                                break;
                        }
                        case PK_IN: {
                                struct proc *p = ref[i].ptr;
                                if (p->used && p->fd_in == pfd[i].fd)
                                        proc_write_stdin(p);
                                break;
                        }
                        }
                }
                /* READ transfers, and the exit grace of processes whose orphans hold their pipes */
                now = now_ms();
                for (size_t i = 0; i < PI_MAX_CONNS; i++) {
                        struct conn *c = &S.conns[i];
                        for (size_t k = 0; c->used && k < PI_MAX_CHANS; k++)
                                if (c->chans[k].used && c->chans[k].kind == CH_READ && out_pending(c) < PI_WATERMARK)
                                        read_step(c, &c->chans[k]);
                        if (c->used && out_pending(c))
                                conn_write(c);
                }
                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                        proc_maybe_finish(&S.procs[i], now);
        }
}

/* ---------------------------------------------------------------- setup */

static int read_secret(int fd) {
        char buf[PJ_AGENT_MAX_SECRET + 2];
        size_t n = 0;
        while (n < sizeof(buf)) {
                ssize_t k = read(fd, buf + n, sizeof(buf) - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (k == 0)
                        break;
                n += (size_t) k;
        }
        if (n && buf[n - 1] == '\n')
                n--;
        if (n == 0 || n > PJ_AGENT_MAX_SECRET || memchr(buf, 0, n))
                return -EINVAL;
        S.secret = xstrndup(buf, n);
        S.secret_len = n;
        explicit_bzero(buf, sizeof(buf));
        return 0;
}

/* Binds "<path>.new" and renames it over path once it listens, so the socket appears only
 * when a connect() to it works. */
static int listen_on(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(path) + 4 >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s.new", path);
        struct stat st;
        const char *names[] = { path, sa.sun_path };
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (lstat(names[i], &st) == 0) {
                        if (!S_ISSOCK(st.st_mode))
                                return -EEXIST; /* never unlink what is not a stale socket of ours */
                        unlink(names[i]);
                }
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        mode_t old = umask(0177);
        int r = bind(fd, (struct sockaddr *) &sa, sizeof(sa));
        umask(old);
        if (r < 0 || listen(fd, PI_MAX_CONNS) < 0 || rename(sa.sun_path, path) < 0) {
                r = -errno;
                unlink(sa.sun_path);
                close(fd);
                return r;
        }
        return fd;
}

static _noreturn_ void usage(int code) {
        fprintf(code ? stderr : stdout,
                "usage: paddock-init --socket PATH (--secret-file PATH | --secret-fd N)\n"
                "  PID 1 of a Paddock sandbox: reaps, forwards signals, serves the agent protocol.\n"
                "  PADDOCK_INIT_SUBREAPER=1 runs it as a child subreaper when it is not PID 1 (tests).\n");
        exit(code);
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "secret-file", required_argument, NULL, 'f' },
                { "secret-fd", required_argument, NULL, 'F' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *sock = NULL, *secret_file = NULL;
        int secret_fd = -1, o, r;

        while ((o = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
                switch (o) {
                case 's':
                        sock = optarg;
                        break;
                case 'f':
                        secret_file = optarg;
                        break;
                case 'F':
                        secret_fd = atoi(optarg);
                        break;
                case 'h':
                        usage(0);
                default:
                        usage(2);
                }
        if (!sock || (!secret_file) == (secret_fd < 0))
                usage(2);
        if (sock[0] != '/') {
                say("error", "--socket must be an absolute path");
                return 2;
        }
        if (getpid() != 1) {
                const char *e = getenv("PADDOCK_INIT_SUBREAPER");
                if (!e || strcmp(e, "1")) {
                        say("error", "not PID 1; set PADDOCK_INIT_SUBREAPER=1 to run as a subreaper (tests)");
                        return 1;
                }
                if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
                        say("error", "cannot become a child subreaper: %s", strerror(errno));
                        return 1;
                }
        }
        /* The secret: read once, never written anywhere, the file left as it is. */
        int fd = secret_file ? open(secret_file, O_RDONLY | O_CLOEXEC | O_NOCTTY) : secret_fd;
        r = fd < 0 ? -errno : read_secret(fd);
        if (fd >= 0)
                close(fd);
        if (r < 0) {
                say("error", "cannot read the secret (%s): %s", secret_file ? secret_file : "fd",
                    r == -EINVAL ? "empty, longer than 1024 bytes or containing NUL" : strerror(-r));
                return 1;
        }

        sigset_t mask;
        sigemptyset(&mask);
        int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH };
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
                sigaddset(&mask, sigs[i]);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);
        S.sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (S.sig_fd < 0) {
                say("error", "signalfd: %s", strerror(errno));
                return 1;
        }
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max && rl.rlim_cur < 8192) {
                rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (chdir("/") < 0)
                say("warning", "chdir /: %s", strerror(errno));
        for (size_t i = 0; i < PI_MAX_CONNS; i++)
                S.conns[i] = (struct conn) { .fd = -1, .chans = xnew0(struct chan, PI_MAX_CHANS) };
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                S.procs[i] = (struct proc) { .fd_in = -1, .fd_out = -1, .fd_err = -1 };
        S.listen_fd = listen_on(sock);
        if (S.listen_fd < 0) {
                say("error", "cannot listen on %s: %s", sock, strerror(-S.listen_fd));
                return 1;
        }
        say("info", "serving on %s (protocol %d)", sock, PJ_AGENT_VERSION);
        r = serve();
        unlink(sock);
        if (r < 0) {
                say("error", "poll: %s", strerror(-r));
                return 1;
        }
        return 0;
}
