/* agent-exec.c — see agent-exec.h. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "guest-exec.h"
#include "cleanup.h"
#include "fdio.h"
#include "log.h"
#include "strutil.h"

#define CHAN_PROC 1
#define CHAN_FILE 2
#define CHAN_SMALL 3
#define CHAN_WATCH 4
#define SPAWN_TIMEOUT_MS 30000
/* STDIN and DATA frames we send: as large as a frame takes (fewer syscalls on both ends,
 * each one a trap inside gVisor); a frame is sent whole before the next. */
#define CHUNK (1024 * 1024 - 64)

struct guest_exec {
        struct guest_client *cl;
        pid_t pid;
        bool ended, lost, stdin_closed;
        int32_t code;
        uint32_t signo;
        /* a SPAWN the agent refused for the user's reasons: this on stderr, then this code */
        char *synth_err;
        int synth_code;
};

/* Sends the encoded frame while taking in (and handing to on_frame) what the agent sends
 * meanwhile, so neither side stalls on a full socket. */
typedef int (*frame_fn)(struct guest_frame *f, void *ud);

/* At most this many frames per pump, so a flood cannot keep a caller from its deadlines. */
#define PUMP_BUDGET 64

/* Takes in what the agent has sent: the number of frames handled (0 when none was there),
 * or < 0. */
static int pump(struct guest_client *cl, frame_fn on_frame, void *ud) {
        int n = 0;
        for (; n < PUMP_BUDGET; n++) {
                struct guest_frame f = { 0 };
                struct err perr = { 0 };
                int r = guest_client_try_recv(cl, &f, &perr);
                if (r == 0)
                        return n;
                if (r < 0) {
                        if (r == -EPROTO)
                                log_warning("agent sent a frame the codec refuses: %s: %s", perr.field, perr.message);
                        return r;
                }
                r = on_frame ? on_frame(&f, ud) : -EPROTO;
                guest_client_recycle(cl, &f);
                if (r < 0)
                        return r;
        }
        return n;
}

static int send_interleaved(struct guest_client *cl, const struct pj_agent_msg *m, int64_t deadline, frame_fn on_frame,
                            void *ud) {
        _cleanup_(pj_agent_buf_done) struct pj_agent_buf b = { 0 };
        uint8_t pre[PJ_AGENT_HEADER_SIZE + PJ_AGENT_TLV_HEADER];
        struct iovec iov[2];
        int r;
        if (m->type == PJ_AGENT_DATA) {
                /* A file's bytes go from the caller's buffer: the frame's 17 bytes before them
                 * are the only copy (at hundreds of MB/s a copy per frame is measurable). */
                r = pj_agent_data_prefix(m->type, m->id, m->data_len, pre);
                if (r < 0)
                        return r;
                iov[0] = (struct iovec) { pre, sizeof(pre) };
                iov[1] = (struct iovec) { (void *) m->data, m->data_len };
        } else {
                r = pj_agent_msg_encode(m, &b, NULL);
                if (r < 0)
                        return r;
                iov[0] = (struct iovec) { b.p, b.len };
                iov[1] = (struct iovec) { NULL, 0 };
        }
        int fd = guest_client_fd(cl);
        while (iov[0].iov_len + iov[1].iov_len) {
                struct msghdr mh = { .msg_iov = iov[0].iov_len ? iov : iov + 1, .msg_iovlen = iov[0].iov_len ? 2 : 1 };
                ssize_t k = sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (k > 0) {
                        for (size_t i = 0; i < 2 && k > 0; i++) {
                                size_t t = (size_t) k < iov[i].iov_len ? (size_t) k : iov[i].iov_len;
                                iov[i].iov_base = (uint8_t *) iov[i].iov_base + t;
                                iov[i].iov_len -= t;
                                k -= (ssize_t) t;
                        }
                        continue;
                }
                if (k < 0 && errno != EAGAIN && errno != EINTR)
                        return errno == EPIPE || errno == ECONNRESET ? -EPIPE : -errno;
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = fd, .events = POLLOUT | POLLIN };
                if (poll(&p, 1, (int) (left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
                        return -errno;
                if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
                        r = pump(cl, on_frame, ud);
                        if (r < 0)
                                return r == -ECONNRESET ? -EPIPE : r;
                }
        }
        return 0;
}

/* Waits until the agent has bytes (1), the deadline passed (0), or the client at watch_fd
 * (-1 = none) hung up (-ECONNRESET). */
static int wait_agent_or_client(struct guest_client *cl, int watch_fd, int64_t deadline) {
        for (;;) {
                struct pollfd pf[2] = { { .fd = guest_client_fd(cl), .events = POLLIN }, { .fd = watch_fd, .events = POLLRDHUP } };
                int64_t left = deadline - mono_ms();
                int k = poll(pf, watch_fd >= 0 ? 2 : 1, (int) (left < 0 ? 0 : left));
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (watch_fd >= 0 && (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        return -ECONNRESET;
                return k > 0;
        }
}

/* ---- processes ---- */

struct proc_ctx {
        struct guest_exec *x;
        exec_output_cb cb;
        void *ud;
        int cb_r;
};

static int proc_frame(struct guest_frame *f, void *ud) {
        struct proc_ctx *p = ud;
        struct guest_exec *x = p->x;
        if (f->m.id != CHAN_PROC || x->ended)
                return -EPROTO;
        switch (f->m.type) {
        case PJ_AGENT_OUTPUT:
                if (p->cb) {
                        int r = p->cb(f->m.f.stream, f->m.data, f->m.data_len, p->ud);
                        if (r < 0)
                                return (p->cb_r = r);   /* the caller takes no more now */
                }
                return 0;
        case PJ_AGENT_EXIT:
                x->ended = true;
                x->code = f->m.f.code;
                x->signo = f->m.f.signo;
                return 0;
        case PJ_AGENT_ERROR:
                /* STDIN after the process closed its end: the input is dropped, as a pipe would */
                if (f->m.f.err == EPIPE) {
                        x->stdin_closed = true;
                        return 0;
                }
                log_debug("agent: %s", f->m.f.message ? f->m.f.message : "error");
                return 0;
        default:
                return -EPROTO;
        }
}

int guest_exec_start(struct guest_client *cl, const struct guest_spawn *spec, struct guest_exec **ret, struct err *err) {
        struct guest_exec *x = xnew0(struct guest_exec, 1);
        x->cl = cl;
        size_t n_argv = 0, n_env = 0;
        while (spec->argv[n_argv])
                n_argv++;
        while (spec->env && spec->env[n_env])
                n_env++;
        struct pj_agent_msg m = {
                .type = PJ_AGENT_SPAWN, .id = CHAN_PROC, .argv = (char **) spec->argv, .n_argv = n_argv,
                .env = (char **) spec->env, .n_env = n_env,
                .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_BASE_ENV) | PJ_AGENT_BIT(PJ_AGENT_T_STDIN) |
                                  PJ_AGENT_BIT(PJ_AGENT_T_KILL_ON_DETACH),
                       .base_env = true, .stdin_pipe = spec->want_stdin, .kill_on_detach = spec->kill_on_detach,
                       .cwd = (char *) (spec->cwd ? spec->cwd : "/"), .tag = (char *) spec->tag },
        };
        if (spec->rows && spec->cols) {
                m.f.present |= PJ_AGENT_BIT(PJ_AGENT_T_ROWS) | PJ_AGENT_BIT(PJ_AGENT_T_COLS);
                m.f.rows = spec->rows;
                m.f.cols = spec->cols;
        }
        if (spec->tag)
                m.f.present |= PJ_AGENT_BIT(PJ_AGENT_T_TAG);
        if (spec->as_ids) {
                m.f.present |= PJ_AGENT_BIT(PJ_AGENT_T_UID) | PJ_AGENT_BIT(PJ_AGENT_T_GID);
                m.f.uid = spec->uid;
                m.f.gid = spec->gid;
        }
        struct err perr = { 0 };
        _cleanup_(pj_agent_buf_done) struct pj_agent_buf b = { 0 };
        int r = pj_agent_msg_encode(&m, &b, &perr);
        if (r < 0) {
                err_set(err, -EINVAL, "%s", perr.message);
                guest_exec_free(x);
                return -EINVAL;
        }
        r = guest_client_send_raw(cl, b.p, b.len, SPAWN_TIMEOUT_MS);
        struct guest_frame f = { 0 };
        if (r >= 0)
                r = guest_client_recv(cl, SPAWN_TIMEOUT_MS, &f, &perr);
        if (r < 0) {
                err_set(err, r, "the agent did not take the command: %s", strerror(-r));
                guest_exec_free(x);
                return r;
        }
        if (f.m.id == CHAN_PROC && f.m.type == PJ_AGENT_SPAWNED) {
                x->pid = (pid_t) f.m.f.pid;
        } else if (f.m.id == CHAN_PROC && f.m.type == PJ_AGENT_ERROR) {
                int e = (int) f.m.f.err;
                if (f.m.f.path) {
                        x->synth_err = xasprintf("paddock: cannot use working directory %s: %s\n", f.m.f.path,
                                                 e == ENOENT ? "no such directory" : strerror(e));
                        x->synth_code = 126;
                } else if (e == ENOENT || e == ENOTDIR) {
                        x->synth_err = xasprintf("paddock: %s: command not found\n", spec->argv[0]);
                        x->synth_code = 127;
                } else if (e == EACCES || e == ENOEXEC || e == EISDIR || e == EPERM) {
                        x->synth_err = xasprintf("paddock: %s: cannot run: %s\n", spec->argv[0], strerror(e));
                        x->synth_code = 126;
                } else {
                        err_set(err, -EPROTO, "the agent could not start the command: %s",
                                f.m.f.message ? f.m.f.message : strerror(e));
                        guest_frame_done(&f);
                        guest_exec_free(x);
                        return e == EAGAIN ? -EUSERS : -EHOSTUNREACH;
                }
        } else {
                err_set(err, -EPROTO, "the agent answered SPAWN with %s", pj_agent_type_name(f.m.type) ?: "?");
                guest_frame_done(&f);
                guest_exec_free(x);
                return -EPROTO;
        }
        guest_frame_done(&f);
        *ret = x;
        return 0;
}

int guest_exec_write(struct guest_exec *x, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud) {
        if (x->synth_err || x->ended || x->stdin_closed || x->lost)
                return -EPIPE;
        int64_t deadline = mono_ms() + timeout_ms;
        struct proc_ctx p = { x, cb, ud, 0 };
        const uint8_t *d = data;
        while (len) {
                size_t n = len > CHUNK ? CHUNK : len;
                struct pj_agent_msg m = { .type = PJ_AGENT_STDIN, .id = CHAN_PROC, .data = d, .data_len = n };
                int r = send_interleaved(x->cl, &m, deadline, proc_frame, &p);
                if (r == -EPIPE)
                        x->lost = !x->ended;
                if (r < 0)
                        return r;
                if (p.cb_r < 0)
                        return p.cb_r;
                if (x->ended || x->stdin_closed)
                        return -EPIPE;
                d += n;
                len -= n;
        }
        return 0;
}

int guest_exec_close_stdin(struct guest_exec *x) {
        if (x->synth_err || x->ended || x->stdin_closed || x->lost)
                return 0;
        x->stdin_closed = true;
        struct pj_agent_msg m = { .type = PJ_AGENT_STDIN_CLOSE, .id = CHAN_PROC };
        struct proc_ctx p = { x, NULL, NULL, 0 };
        int r = send_interleaved(x->cl, &m, mono_ms() + 10000, proc_frame, &p);
        return r == -EPIPE ? 0 : r;
}

int guest_exec_read(struct guest_exec *x, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud) {
        if (x->synth_err) {
                if (cb && x->synth_err[0])
                        (void) cb(2, (const uint8_t *) x->synth_err, strlen(x->synth_err), ud);
                x->synth_err[0] = 0;
                return 1;
        }
        if (x->ended || x->lost)
                return 1;
        int64_t deadline = mono_ms() + timeout_ms;
        struct proc_ctx p = { x, cb, ud, 0 };
        for (;;) {
                int r = pump(x->cl, proc_frame, &p);
                if (r == -ECONNRESET) {
                        x->lost = true;
                        return 1;
                }
                if (r < 0)
                        return r;
                if (p.cb_r < 0)
                        return p.cb_r;
                if (x->ended)
                        return 1;
                if (r > 0)
                        return 0;   /* output came: the caller checks its deadlines, then reads on */
                r = wait_agent_or_client(x->cl, watch_fd, deadline);
                if (r <= 0)
                        return r;
        }
}

int guest_exec_exit_code(struct guest_exec *x, int *ret) {
        if (x->synth_code) {
                *ret = x->synth_code;
                return 0;
        }
        if (!x->ended)
                return -ESRCH;
        *ret = x->code >= 0 ? x->code : 128 + (int) x->signo;
        return 0;
}

int guest_exec_term_signal(const struct guest_exec *x) {
        return x->ended && !x->synth_code && x->code < 0 ? (int) x->signo : 0;
}

int guest_exec_signal(struct guest_exec *x, int sig) {
        if (x->synth_err || x->ended || x->lost)
                return 0;
        struct pj_agent_msg m = { .type = PJ_AGENT_SIGNAL, .id = CHAN_PROC, .f.signo = (uint32_t) sig };
        struct proc_ctx p = { x, NULL, NULL, 0 };
        int r = send_interleaved(x->cl, &m, mono_ms() + 5000, proc_frame, &p);
        return r == -EPIPE ? 0 : r;
}

int guest_exec_resize(struct guest_exec *x, uint32_t rows, uint32_t cols, exec_output_cb cb, void *ud) {
        if (x->synth_err || x->ended || x->lost)
                return 0;
        struct pj_agent_msg m = { .type = PJ_AGENT_RESIZE, .id = CHAN_PROC,
                                  .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_ROWS) | PJ_AGENT_BIT(PJ_AGENT_T_COLS),
                                         .rows = rows, .cols = cols } };
        struct proc_ctx p = { x, cb, ud, 0 };
        int r = send_interleaved(x->cl, &m, mono_ms() + 5000, proc_frame, &p);
        return r == -EPIPE ? 0 : r < 0 ? r : p.cb_r;
}

int guest_exec_fd(const struct guest_exec *x) { return guest_client_fd(x->cl); }

pid_t guest_exec_pid(const struct guest_exec *x) { return x->pid; }

bool guest_exec_lost(const struct guest_exec *x) { return x->lost; }

void guest_exec_free(struct guest_exec *x) {
        if (!x)
                return;
        guest_client_free(x->cl);
        free(x->synth_err);
        free(x);
}

/* ---- files ---- */

struct guest_file {
        struct guest_client *cl;
        uint8_t *out;     /* a write's bytes not yet sent: gathered to CHUNK-sized DATA frames */
        size_t out_len;
        bool ended, failed;
        int err;          /* the agent's errno (positive) once failed */
        char *message;
        exec_output_cb cb;
        void *ud;
        int cb_r;
};

static int file_frame(struct guest_frame *f, void *ud) {
        struct guest_file *a = ud;
        if (f->m.id != CHAN_FILE || a->ended)
                return -EPROTO;
        switch (f->m.type) {
        case PJ_AGENT_DATA:
                if (a->cb) {
                        int r = a->cb(1, f->m.data, f->m.data_len, a->ud);
                        if (r < 0)
                                return (a->cb_r = r);
                }
                return 0;
        case PJ_AGENT_END:
        case PJ_AGENT_OK:
                a->ended = true;
                return 0;
        case PJ_AGENT_ERROR:
                a->ended = a->failed = true;
                a->err = (int) f->m.f.err;
                free(a->message);
                a->message = xstrdup(f->m.f.message ? f->m.f.message : strerror(a->err));
                return 0;
        default:
                return -EPROTO;
        }
}

static struct guest_file *file_new(struct guest_client *cl) {
        struct guest_file *a = xnew0(struct guest_file, 1);
        a->cl = cl;
        return a;
}

/* Waits up to timeout_ms for the next frames of the transfer; as guest_file_read. */
static int file_wait(struct guest_file *a, int timeout_ms, int watch_fd) {
        int64_t deadline = mono_ms() + timeout_ms;
        for (;;) {
                int r = pump(a->cl, file_frame, a);
                if (r < 0)
                        return r;
                if (a->cb_r < 0)
                        return a->cb_r;
                if (a->ended)
                        return 1;
                if (r > 0)
                        return 0;
                r = wait_agent_or_client(a->cl, watch_fd, deadline);
                if (r <= 0)
                        return r;
        }
}

int guest_file_read_open(struct guest_client *cl, const char *path, struct guest_file **ret, struct err *err) {
        struct guest_file *a = file_new(cl);
        struct pj_agent_msg m = { .type = PJ_AGENT_READ, .id = CHAN_FILE, .f.path = (char *) path };
        int r = send_interleaved(cl, &m, mono_ms() + 10000, file_frame, a);
        if (r < 0) {
                err_set(err, r, "the agent did not take the read: %s", strerror(-r));
                guest_file_free(a);
                return r;
        }
        *ret = a;
        return 0;
}

int guest_file_read(struct guest_file *a, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud) {
        a->cb = cb;
        a->ud = ud;
        a->cb_r = 0;
        int r = a->ended ? 1 : file_wait(a, timeout_ms, watch_fd);
        a->cb = NULL;
        if (r == 1 && a->failed)
                return -a->err;
        return r;
}

int guest_file_write_open(struct guest_client *cl, const char *path, struct guest_file **ret, struct err *err) {
        struct guest_file *a = file_new(cl);
        struct pj_agent_msg m = { .type = PJ_AGENT_WRITE, .id = CHAN_FILE, .f.path = (char *) path };
        int r = send_interleaved(cl, &m, mono_ms() + 10000, file_frame, a);
        if (r < 0) {
                err_set(err, r, "the agent did not take the write: %s", strerror(-r));
                guest_file_free(a);
                return r;
        }
        *ret = a;
        return 0;
}

static int file_send(struct guest_file *a, const uint8_t *d, size_t n, int64_t deadline) {
        if (a->ended)   /* the agent refused it already: the rest is not wanted */
                return -EPIPE;
        struct pj_agent_msg m = { .type = PJ_AGENT_DATA, .id = CHAN_FILE, .data = d, .data_len = n };
        return send_interleaved(a->cl, &m, deadline, file_frame, a);
}

int guest_file_write(struct guest_file *a, const void *data, size_t len, int timeout_ms) {
        int64_t deadline = mono_ms() + timeout_ms;
        const uint8_t *d = data;
        if (!a->out)
                a->out = xmalloc(CHUNK);
        while (len) {
                size_t n = CHUNK - a->out_len < len ? CHUNK - a->out_len : len;
                memcpy(a->out + a->out_len, d, n);
                a->out_len += n;
                d += n;
                len -= n;
                if (a->out_len == CHUNK) {
                        int r = file_send(a, a->out, a->out_len, deadline);
                        a->out_len = 0;
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int guest_file_write_finish(struct guest_file *a, int timeout_ms, struct err *err) {
        int64_t deadline = mono_ms() + timeout_ms;
        if (a->out_len && !a->ended) {
                int r = file_send(a, a->out, a->out_len, deadline);
                a->out_len = 0;
                if (r < 0 && !a->ended)
                        return err_set(err, r, "%s", strerror(-r));
        }
        if (!a->ended) {
                struct pj_agent_msg m = { .type = PJ_AGENT_END, .id = CHAN_FILE };
                int r = send_interleaved(a->cl, &m, deadline, file_frame, a);
                if (r < 0 && !a->ended)
                        return err_set(err, r, "%s", strerror(-r));
        }
        while (!a->ended) {
                int r = file_wait(a, (int) (deadline - mono_ms() > 0 ? deadline - mono_ms() : 0), -1);
                if (r < 0)
                        return err_set(err, r, "%s", strerror(-r));
                if (r == 0 && mono_ms() >= deadline)
                        return err_set(err, -ETIMEDOUT, "the agent did not confirm the write in time");
        }
        if (a->failed) {
                err_set(err, -EPROTO, "%s", a->message ? a->message : strerror(a->err));
                return -a->err;
        }
        return 0;
}

void guest_file_free(struct guest_file *a) {
        if (!a)
                return;
        guest_client_free(a->cl);
        free(a->message);
        free(a->out);
        free(a);
}

/* One request on CHAN_SMALL and its OK/ERROR. */
static int small_frame(struct guest_frame *f, void *ud) {
        int *res = ud;
        if (f->m.id != CHAN_SMALL)
                return -EPROTO;
        if (f->m.type == PJ_AGENT_OK)
                *res = 1;
        else if (f->m.type == PJ_AGENT_ERROR)
                *res = -(int) f->m.f.err;
        else
                return -EPROTO;
        return 0;
}

static int small_wait(struct guest_client *cl, int *res, int64_t deadline) {
        while (*res == 0) {
                int r = pump(cl, small_frame, res);
                if (r < 0)
                        return r;
                if (*res)
                        break;
                r = fd_wait(guest_client_fd(cl), POLLIN, deadline);
                if (r < 0)
                        return r;
        }
        return *res < 0 ? *res : 0;
}

/* One request on CHAN_SMALL answered OK (0) or ERROR (-errno) by deadline. */
static int proc_request(struct guest_client *cl, const struct pj_agent_msg *m, int64_t deadline) {
        int res = 0;
        int r = send_interleaved(cl, m, deadline, small_frame, &res);
        return r < 0 ? r : small_wait(cl, &res, deadline);
}

int guest_put_small(struct guest_client *cl, const char *path, const void *data, size_t len, int timeout_ms,
                    struct err *err) {
        int64_t deadline = mono_ms() + timeout_ms;
        int res = 0, r;
        struct pj_agent_msg m = { .type = PJ_AGENT_WRITE, .id = CHAN_SMALL, .f.path = (char *) path };
        r = send_interleaved(cl, &m, deadline, small_frame, &res);
        const uint8_t *d = data;
        while (r >= 0 && len && !res) {
                size_t n = len > CHUNK ? CHUNK : len;
                m = (struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = CHAN_SMALL, .data = d, .data_len = n };
                r = send_interleaved(cl, &m, deadline, small_frame, &res);
                d += n;
                len -= n;
        }
        if (r >= 0 && !res) {
                m = (struct pj_agent_msg) { .type = PJ_AGENT_END, .id = CHAN_SMALL };
                r = send_interleaved(cl, &m, deadline, small_frame, &res);
        }
        if (r >= 0)
                r = small_wait(cl, &res, deadline);
        if (r < 0)
                err_set(err, r, "cannot write %s in the sandbox: %s", path, strerror(-r));
        return r;
}

int guest_remove(struct guest_client *cl, const char *path, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_REMOVE, .id = CHAN_SMALL, .f.path = (char *) path };
        return proc_request(cl, &m, mono_ms() + timeout_ms);
}

/* ---- file system calls (STAT, LISTDIR, MKDIR, MOVE, REMOVE) ---- */

/* One request on CHAN_SMALL whose answer is a single frame of type want (or ERROR). */
static int small_call(struct guest_client *cl, const struct pj_agent_msg *m, uint8_t want, int timeout_ms,
                      struct guest_frame *ret) {
        struct err perr = { 0 };
        int r = guest_client_send(cl, m, timeout_ms);
        if (r < 0)
                return r;
        r = guest_client_recv(cl, timeout_ms, ret, &perr);
        if (r < 0)
                return r;
        if (ret->m.id != CHAN_SMALL)
                r = -EPROTO;
        else if (ret->m.type == PJ_AGENT_ERROR)
                r = -(int) ret->m.f.err;
        else if (ret->m.type != want)
                r = -EPROTO;
        if (r < 0)
                guest_frame_done(ret);
        return r;
}

int guest_fs_stat(struct guest_client *cl, const char *path, struct guest_stat *ret, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_STAT, .id = CHAN_SMALL, .f.path = (char *) path };
        struct guest_frame f = { 0 };
        int r = small_call(cl, &m, PJ_AGENT_STAT_OK, timeout_ms, &f);
        if (r < 0)
                return r;
        *ret = (struct guest_stat) { .type = f.m.f.ftype, .size = f.m.f.size, .mode = f.m.f.mode, .mtime_ns = f.m.f.mtime_ns,
                                     .uid = f.m.f.uid, .gid = f.m.f.gid,
                                     .has_owner = PJ_AGENT_HAS(&f.m.f, PJ_AGENT_T_UID) && PJ_AGENT_HAS(&f.m.f, PJ_AGENT_T_GID) };
        guest_frame_done(&f);
        return 0;
}

int guest_fs_listdir(struct guest_client *cl, const char *path, guest_dirent_cb cb, void *ud, int timeout_ms,
                     bool *ret_truncated) {
        struct pj_agent_msg m = { .type = PJ_AGENT_LISTDIR, .id = CHAN_SMALL, .f.path = (char *) path };
        struct err perr = { 0 };
        int64_t deadline = mono_ms() + timeout_ms;
        int r = guest_client_send(cl, &m, timeout_ms);
        int cb_r = 0;
        while (r >= 0) {
                int64_t left = deadline - mono_ms();
                struct guest_frame f = { 0 };
                r = left <= 0 ? -ETIMEDOUT : guest_client_recv(cl, (int) left, &f, &perr);
                if (r < 0)
                        break;
                if (f.m.id != CHAN_SMALL)
                        r = -EPROTO;
                else if (f.m.type == PJ_AGENT_ERROR)
                        r = -(int) f.m.f.err;
                else if (f.m.type == PJ_AGENT_DIRENTS) {
                        for (size_t i = 0; i < f.m.n_entries && cb_r >= 0; i++)
                                cb_r = cb(&f.m.entries[i], ud);
                } else if (f.m.type == PJ_AGENT_END) {
                        if (ret_truncated)
                                *ret_truncated = f.m.f.truncated;
                        guest_frame_done(&f);
                        return cb_r < 0 ? cb_r : 0;
                } else
                        r = -EPROTO;
                guest_frame_done(&f);
        }
        return r;
}

int guest_fs_mkdir(struct guest_client *cl, const char *path, bool parents, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_MKDIR, .id = CHAN_SMALL,
                                  .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PARENTS), .path = (char *) path, .parents = parents } };
        return proc_request(cl, &m, mono_ms() + timeout_ms);
}

int guest_fs_move(struct guest_client *cl, const char *from, const char *to, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_MOVE, .id = CHAN_SMALL, .f = { .path = (char *) from, .to = (char *) to } };
        return proc_request(cl, &m, mono_ms() + timeout_ms);
}

int guest_fs_remove(struct guest_client *cl, const char *path, bool recursive, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_REMOVE, .id = CHAN_SMALL,
                                  .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_RECURSIVE), .path = (char *) path,
                                         .recursive = recursive } };
        return proc_request(cl, &m, mono_ms() + timeout_ms);
}

int guest_park(struct guest_client *cl, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_PARK, .id = CHAN_SMALL };
        struct guest_frame f = { 0 };
        int r = small_call(cl, &m, PJ_AGENT_OK, timeout_ms, &f);
        if (r < 0)
                return r;
        guest_frame_done(&f);
        return 0;
}

/* ---- processes the agent keeps ---- */

int guest_exec_attach(struct guest_client *cl, uint32_t pid, struct guest_exec **ret, struct err *err) {
        struct guest_exec *x = xnew0(struct guest_exec, 1);
        x->cl = cl;
        x->stdin_closed = true;   /* stdin of an attached process goes by pid (guest_proc_stdin) */
        x->pid = (pid_t) pid;
        struct pj_agent_msg m = { .type = PJ_AGENT_ATTACH, .id = CHAN_PROC, .f.pid = pid };
        struct err perr = { 0 };
        int r = guest_client_send(cl, &m, SPAWN_TIMEOUT_MS);
        struct guest_frame f = { 0 };
        if (r >= 0)
                r = guest_client_recv(cl, SPAWN_TIMEOUT_MS, &f, &perr);
        if (r >= 0 && (f.m.id != CHAN_PROC || (f.m.type != PJ_AGENT_OK && f.m.type != PJ_AGENT_ERROR)))
                r = -EPROTO;
        if (r >= 0 && f.m.type == PJ_AGENT_ERROR)
                r = -(int) f.m.f.err;
        if (r < 0) {
                err_set(err, r, "%s", r == -ESRCH ? "no such process" : strerror(-r));
                guest_frame_done(&f);
                guest_exec_free(x);
                return r;
        }
        guest_frame_done(&f);
        *ret = x;
        return 0;
}

int guest_proc_stdin(struct guest_client *cl, uint32_t pid, const void *data, size_t len, bool close, int timeout_ms) {
        int64_t deadline = mono_ms() + timeout_ms;
        const uint8_t *d = data;
        while (len) {
                size_t n = len > CHUNK ? CHUNK : len;
                struct pj_agent_msg m = { .type = PJ_AGENT_STDIN, .id = CHAN_SMALL, .data = d, .data_len = n,
                                          .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = pid } };
                int r = proc_request(cl, &m, deadline);
                if (r < 0)
                        return r;
                d += n;
                len -= n;
        }
        if (!close)
                return 0;
        struct pj_agent_msg m = { .type = PJ_AGENT_STDIN_CLOSE, .id = CHAN_SMALL,
                                  .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = pid } };
        return proc_request(cl, &m, deadline);
}

int guest_proc_signal(struct guest_client *cl, uint32_t pid, int sig, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_SIGNAL, .id = CHAN_SMALL,
                                  .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = pid, .signo = (uint32_t) sig } };
        return proc_request(cl, &m, mono_ms() + timeout_ms);
}

int guest_proc_resize(struct guest_client *cl, uint32_t pid, uint32_t rows, uint32_t cols, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_RESIZE, .id = CHAN_SMALL,
                                  .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = pid, .rows = rows, .cols = cols } };
        return proc_request(cl, &m, mono_ms() + timeout_ms);
}

int guest_proc_list(struct guest_client *cl, struct pj_agent_fields **ret, size_t *ret_n, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_LIST, .id = CHAN_SMALL };
        struct guest_frame f = { 0 };
        int r = small_call(cl, &m, PJ_AGENT_PROCS, timeout_ms, &f);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(f.m.entries);
        *ret_n = f.m.n_entries;
        f.m.n_entries = 0;
        guest_frame_done(&f);
        return 0;
}

/* ---- watching a directory ---- */

struct guest_watch {
        struct guest_client *cl;
        bool ended, truncated;
};

int guest_watch_open(struct guest_client *cl, const char *path, bool recursive, struct guest_watch **ret, struct err *err) {
        struct guest_watch *w = xnew0(struct guest_watch, 1);
        w->cl = cl;
        struct pj_agent_msg m = { .type = PJ_AGENT_WATCH, .id = CHAN_WATCH,
                                  .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_RECURSIVE), .path = (char *) path,
                                         .recursive = recursive } };
        struct err perr = { 0 };
        int r = guest_client_send(cl, &m, SPAWN_TIMEOUT_MS);
        struct guest_frame f = { 0 };
        if (r >= 0)
                r = guest_client_recv(cl, SPAWN_TIMEOUT_MS, &f, &perr);
        if (r >= 0 && (f.m.id != CHAN_WATCH || (f.m.type != PJ_AGENT_OK && f.m.type != PJ_AGENT_ERROR)))
                r = -EPROTO;
        if (r >= 0 && f.m.type == PJ_AGENT_ERROR) {
                r = -(int) f.m.f.err;
                err_set(err, r, "%s", f.m.f.message ? f.m.f.message : strerror(-r));
        } else if (r < 0)
                err_set(err, r, "%s", strerror(-r));
        guest_frame_done(&f);
        if (r < 0) {
                guest_watch_free(w);
                return r;
        }
        *ret = w;
        return 0;
}

struct watch_ctx {
        struct guest_watch *w;
        guest_watch_cb cb;
        void *ud;
        int cb_r;
};

static int watch_frame(struct guest_frame *f, void *ud) {
        struct watch_ctx *p = ud;
        if (f->m.id != CHAN_WATCH || p->w->ended)
                return -EPROTO;
        switch (f->m.type) {
        case PJ_AGENT_EVENT:
                if (p->cb && p->cb_r >= 0)
                        p->cb_r = p->cb(f->m.f.event, f->m.f.path, f->m.f.ftype == PJ_AGENT_FT_DIR, p->ud);
                return 0;
        case PJ_AGENT_END:
                p->w->ended = true;
                p->w->truncated = f->m.f.truncated;
                return 0;
        default:
                return -EPROTO;
        }
}

int guest_watch_read(struct guest_watch *w, int timeout_ms, int watch_fd, guest_watch_cb cb, void *ud) {
        if (w->ended)
                return 1;
        int64_t deadline = mono_ms() + timeout_ms;
        struct watch_ctx p = { w, cb, ud, 0 };
        for (;;) {
                int r = pump(w->cl, watch_frame, &p);
                if (r == -ECONNRESET) {
                        w->ended = w->truncated = true;   /* the agent went away: events may be lost */
                        return 1;
                }
                if (r < 0)
                        return r;
                if (p.cb_r < 0)
                        return p.cb_r;
                if (w->ended)
                        return 1;
                if (r > 0)
                        return 0;
                r = wait_agent_or_client(w->cl, watch_fd, deadline);
                if (r <= 0)
                        return r;
        }
}

bool guest_watch_truncated(const struct guest_watch *w) { return w->truncated; }

void guest_watch_free(struct guest_watch *w) {
        if (!w)
                return;
        guest_client_free(w->cl);   /* the agent drops the watch with the connection */
        free(w);
}
