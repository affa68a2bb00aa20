/* dockerchild.c — the plumbing of controld's docker child (contract in dockerchild.h): the
 * fork, the privilege drop of the parent, the checked messages both ways, and the remotes
 * that send this process's docker, registry and btrfs calls to the child. What the child does
 * with a checked request, and what it refuses, is dockerchild-allow.c. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "btrfs.h"
#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "dockerchild.h"
#include "dockerchild-private.h"
#include "fdio.h"
#include "log.h"
#include "privdrop.h"
#include "registry.h"
#include "strutil.h"

_Static_assert(sizeof(struct dc_hdr) == 8, "dc_hdr layout");
_Static_assert(sizeof(struct dc_req) == 48, "dc_req layout");
_Static_assert(sizeof(struct dc_ans) == 32 + DC_ERR_MAX, "dc_ans layout");

#define DC_CHILD_THREADS_MAX 512
#define DC_REQ_WAIT_MS 10000            /* a channel whose request does not come is dropped */
#define DC_SLACK_MS 15000               /* the parent waits the call's own bound and this */

static int ctl_fd = -1;                 /* parent: its end of the control socket */
static pid_t child_pid;
static struct config *kept_cfg;         /* dockerchild_drop's, for dockerchild_config */
static char *kept_path;

/* ---------------------------------------------------------------- both sides */

/* One message into buf (cap bytes) by deadline: its real length (MSG_TRUNC: may be > cap,
 * then only cap bytes are there), 0 at EOF, or -errno. Up to one fd into *ret_fd (ret_fd
 * NULL: fds are closed); more fds than one are closed and make it -EBADMSG. */
static ssize_t recv_msg(int fd, void *buf, size_t cap, int64_t deadline, int *ret_fd) {
        if (ret_fd)
                *ret_fd = -1;
        for (;;) {
                int w = fd_wait(fd, POLLIN, deadline);
                if (w < 0)
                        return w;
                union {
                        char b[CMSG_SPACE(4 * sizeof(int))];
                        struct cmsghdr align;
                } u;
                struct iovec iov = { .iov_base = buf, .iov_len = cap };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
                ssize_t n = recvmsg(fd, &mh, MSG_TRUNC | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                int nfd = 0;
                bool bad = (mh.msg_flags & MSG_CTRUNC) != 0;
                for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
                        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t m = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t i = 0; i < m; i++) {
                                int x;
                                memcpy(&x, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                                if (ret_fd && *ret_fd < 0)
                                        *ret_fd = x;
                                else {
                                        close(x);
                                        bad = true;
                                }
                                nfd++;
                        }
                }
                if (n < 0)
                        return -errno;
                if (bad || (nfd > 0 && !ret_fd)) {
                        if (ret_fd && *ret_fd >= 0) {
                                close(*ret_fd);
                                *ret_fd = -1;
                        }
                        return -EBADMSG;
                }
                return n;
        }
}

/* ---------------------------------------------------------------- child */

static atomic_int child_threads;

static void answer(int fd, struct dc_answer *a) {
        struct dc_ans m = { .hdr = { .version = DC_VERSION, .type = DC_ANS, .len = sizeof(m) } };
        if (a->body_len > DC_BODY_MAX) {
                free(a->body);
                a->body = NULL;
                a->body_len = 0;
                a->r = -EMSGSIZE;
                snprintf(a->err, sizeof(a->err), "the answer is over %zu bytes", DC_BODY_MAX);
        }
        m.r = a->r;
        m.status = (int32_t) a->status;
        m.num = a->num;
        m.body_len = (uint32_t) a->body_len;
        strscpy(m.err, a->err, sizeof(m.err));
        if (fd_send_msg(fd, &m, sizeof(m), a->r >= 0 ? a->fd : -1) < 0)
                return;
        _cleanup_free_ uint8_t *chunk = xmalloc(sizeof(struct dc_hdr) + DC_CHUNK);
        for (size_t o = 0; o < a->body_len;) {
                size_t n = a->body_len - o < DC_CHUNK ? a->body_len - o : DC_CHUNK;
                struct dc_hdr h = { .version = DC_VERSION, .type = DC_BODY, .len = (uint32_t) (sizeof(h) + n) };
                memcpy(chunk, &h, sizeof(h));
                memcpy(chunk + sizeof(h), a->body + o, n);
                if (fd_send_msg(fd, chunk, sizeof(h) + n, -1) < 0)
                        return;
                o += n;
        }
}

static int refuse(struct dc_answer *a, const char *fmt, ...) _printf_(2, 3);
static int refuse(struct dc_answer *a, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(a->err, sizeof(a->err), fmt, ap);
        va_end(ap);
        return a->r = -EBADMSG;
}

/* Checks one request message (len bytes at buf, fd came with it) into req; 0 or a refusal. */
static int parse_request(const uint8_t *buf, ssize_t len, int fd, struct dc_request *req, struct dc_answer *a) {
        struct dc_req m;
        if (len < (ssize_t) sizeof(m))
                return refuse(a, "a %zd byte message is shorter than a request", len);
        if (len > DC_REQ_MAX)
                return refuse(a, "a %zd byte message is larger than any request (%d)", len, DC_REQ_MAX);
        memcpy(&m, buf, sizeof(m));
        if (m.hdr.version != DC_VERSION)
                return refuse(a, "version %u, want %u", m.hdr.version, DC_VERSION);
        if (m.hdr.type != DC_REQ)
                return refuse(a, "message type %u is not a request", m.hdr.type);
        if (m.hdr.len != (uint32_t) len)
                return refuse(a, "header says %u bytes, the message has %zd", m.hdr.len, len);
        if (m.reserved != 0)
                return refuse(a, "reserved field is not zero");
        unsigned nargs, binary;
        bool takes_fd;
        if (!dc_op_shape(m.op, &nargs, &binary, &takes_fd))
                return refuse(a, "op %u is not one the child does", m.op);
        if (m.nargs != nargs)
                return refuse(a, "op %u takes %u arguments, got %u", m.op, nargs, m.nargs);
        if (takes_fd != (fd >= 0))
                return refuse(a, "op %u %s", m.op, takes_fd ? "needs an fd" : "takes no fd");
        size_t sum = sizeof(m);
        for (unsigned i = 0; i < DC_ARGS; i++) {
                if (i >= nargs && m.arglen[i] != 0)
                        return refuse(a, "argument %u of op %u is not empty", i, m.op);
                if (m.arglen[i] > DC_REQ_MAX)
                        return refuse(a, "argument %u is %u bytes", i, m.arglen[i]);
                sum += m.arglen[i];
        }
        if (sum != (size_t) len)
                return refuse(a, "the arguments add up to %zu bytes, the message has %zd", sum, len);
        *req = (struct dc_request) { .op = (enum dc_op) m.op, .num = m.num, .num2 = m.num2, .fd = fd };
        size_t o = sizeof(m);
        for (unsigned i = 0; i < nargs; i++) {
                if (!(binary & (1u << i)) && memchr(buf + o, 0, m.arglen[i]))
                        return refuse(a, "argument %u holds a NUL byte", i);
                req->arg[i] = xmalloc(m.arglen[i] + 1);
                memcpy(req->arg[i], buf + o, m.arglen[i]);
                req->arg[i][m.arglen[i]] = 0;
                req->arglen[i] = m.arglen[i];
                o += m.arglen[i];
        }
        return 0;
}

static void *channel_thread(void *p) {
        int fd = (int) (intptr_t) p;
        _cleanup_free_ uint8_t *buf = xmalloc(DC_REQ_MAX + 1);
        struct dc_request req = { .fd = -1 };
        struct dc_answer a = { .fd = -1 };
        int pfd = -1;
        ssize_t n = recv_msg(fd, buf, DC_REQ_MAX + 1, mono_ms() + DC_REQ_WAIT_MS, &pfd);
        if (n > 0 && parse_request(buf, n, pfd, &req, &a) >= 0) {
                pfd = -1;       /* req's now */
                dc_child_do(&req, &a);
        } else if (n == -EBADMSG)
                refuse(&a, "a request came with more than one fd");
        else if (n <= 0)
                goto out;       /* the parent gave up on the channel */
        if (a.r == -EBADMSG || a.r == -EPERM)
                log_warning("docker child refused a request: %s", a.err);
        answer(fd, &a);
out:
        if (pfd >= 0)
                close(pfd);
        if (req.fd >= 0)
                close(req.fd);
        if (a.fd >= 0)
                close(a.fd);
        for (unsigned i = 0; i < DC_ARGS; i++)
                free(req.arg[i]);
        free(a.body);
        close(fd);
        atomic_fetch_sub(&child_threads, 1);
        return NULL;
}

_noreturn_ static void child_main(const struct config *cfg, int fd, pid_t parent) {
        (void) prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
        if (getppid() != parent)
                _exit(0);
        (void) prctl(PR_SET_NAME, "controld-docker", 0, 0, 0);
        /* Not root (a unit's User= with the docker group): the group is all it needs. Root: the
         * owner's rights over root's files and sockets, btrfs's ioctls (CAP_SYS_ADMIN) and reading
         * the agents' secrets in the parent's directory; no other capability. */
        if (geteuid() != 0)
                (void) caps_drop_except(0);
        else
                (void) caps_drop_except((UINT64_C(1) << CAP_SYS_ADMIN) | (UINT64_C(1) << CAP_DAC_READ_SEARCH) |
                                      (UINT64_C(1) << CAP_DAC_OVERRIDE));
        /* SIGTERM and the rest stay blocked (the parent's mask): the child ends with the
         * parent, when the control socket closes, not before it under a unit's stop. */
        dc_child_init(cfg);
        for (;;) {
                struct dc_hdr h;
                int cfd = -1;
                ssize_t n = recv_msg(fd, &h, sizeof(h), INT64_MAX, &cfd);
                if (n == 0)
                        _exit(0);       /* the parent is gone */
                if (n == -ETIMEDOUT || n == -EBADMSG)
                        continue;
                if (n < 0)
                        _exit(1);
                if (n != (ssize_t) sizeof(h) || h.version != DC_VERSION || h.type != DC_OPEN || h.len != sizeof(h) ||
                    cfd < 0) {
                        log_warning("docker child refused a control message (%zd bytes, type %u)", n,
                                    n >= (ssize_t) sizeof(h) ? h.type : 0);
                        if (cfd >= 0)
                                close(cfd);
                        continue;
                }
                pthread_t t;
                pthread_attr_t at;
                if (atomic_fetch_add(&child_threads, 1) >= DC_CHILD_THREADS_MAX) {
                        atomic_fetch_sub(&child_threads, 1);
                        close(cfd);     /* the parent sees the call fail */
                        continue;
                }
                pthread_attr_init(&at);
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&t, &at, channel_thread, (void *) (intptr_t) cfd) != 0) {
                        atomic_fetch_sub(&child_threads, 1);
                        close(cfd);
                }
                pthread_attr_destroy(&at);
        }
}

/* ---------------------------------------------------------------- parent */

struct dc_call {
        enum dc_op op;
        const void *arg[DC_ARGS];
        size_t arglen[DC_ARGS];
        unsigned nargs;
        int64_t num, num2;
        int fd;                 /* sent with the request; -1 = none */
        long timeout_ms;        /* the call's own bound (the parent waits DC_SLACK_MS more) */
        /* the answer */
        long status;
        int64_t num_out;
        char *body;             /* xmalloc'd, NUL-terminated; the caller frees it */
        size_t body_len;
        int ret_fd;
        char err[DC_ERR_MAX];
};

static void dc_call_done(struct dc_call *c) {
        free(c->body);
        c->body = NULL;
        if (c->ret_fd >= 0)
                close(c->ret_fd);
        c->ret_fd = -1;
}

/* A fresh channel for one call, its other end handed to the child (DC_OPEN): our end, or
 * -errno (the send's error when the child is gone). */
static int channel_open(void) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        struct dc_hdr open_msg = { .version = DC_VERSION, .type = DC_OPEN, .len = sizeof(open_msg) };
        int r = fd_send_msg(ctl_fd, &open_msg, sizeof(open_msg), sv[1]);
        close(sv[1]);
        if (r < 0) {
                close(sv[0]);
                return r;
        }
        return sv[0];
}

/* One call: the answer's r (<= 0, or 1 where the op says), or -EPIPE when the child broke
 * the protocol or is gone (err says which). */
static int dc_call(struct dc_call *c) {
        c->ret_fd = -1;
        c->body = NULL;
        c->body_len = 0;
        c->err[0] = 0;
        if (ctl_fd < 0) {
                snprintf(c->err, sizeof(c->err), "the docker child is not running");
                return -ENOTCONN;
        }
        size_t len = sizeof(struct dc_req);
        for (unsigned i = 0; i < c->nargs; i++)
                len += c->arglen[i];
        if (len > DC_REQ_MAX) {
                snprintf(c->err, sizeof(c->err), "a request of %zu bytes is over %d", len, DC_REQ_MAX);
                return -E2BIG;
        }
        int r = channel_open();
        if (r < 0) {
                snprintf(c->err, sizeof(c->err), "the docker child is gone (%s)", strerror(-r));
                /* out of descriptors or memory here is ours, not the child's going */
                return r == -EMFILE || r == -ENFILE || r == -ENOMEM ? r : -EPIPE;
        }
        _cleanup_close_ int ch = r;
        _cleanup_free_ uint8_t *buf = xmalloc(len);
        struct dc_req m = { .hdr = { .version = DC_VERSION, .type = DC_REQ, .len = (uint32_t) len },
                            .op = (uint16_t) c->op, .nargs = (uint16_t) c->nargs, .num = c->num, .num2 = c->num2 };
        for (unsigned i = 0; i < c->nargs; i++)
                m.arglen[i] = (uint32_t) c->arglen[i];
        memcpy(buf, &m, sizeof(m));
        size_t o = sizeof(m);
        for (unsigned i = 0; i < c->nargs; i++) {
                if (c->arglen[i])
                        memcpy(buf + o, c->arg[i], c->arglen[i]);
                o += c->arglen[i];
        }
        r = fd_send_msg(ch, buf, len, c->fd);
        if (r < 0) {
                snprintf(c->err, sizeof(c->err), "cannot send to the docker child: %s", strerror(-r));
                return -EPIPE;
        }
        int64_t deadline = mono_ms() + (c->timeout_ms > 0 ? c->timeout_ms : 30000) + DC_SLACK_MS;
        struct dc_ans a;
        int afd = -1;
        ssize_t n = recv_msg(ch, &a, sizeof(a), deadline, &afd);
        /* The child is trusted less than the kernel: every field is checked. */
        if (n != (ssize_t) sizeof(a) || a.hdr.version != DC_VERSION || a.hdr.type != DC_ANS || a.hdr.len != sizeof(a) ||
            !memchr(a.err, 0, sizeof(a.err)) || a.body_len > DC_BODY_MAX || a.reserved != 0 || a.r > 1 ||
            (afd >= 0 && a.r < 0)) {
                if (afd >= 0)
                        close(afd);
                snprintf(c->err, sizeof(c->err), "the docker child %s",
                         n == 0 ? "closed the call" : n == -ETIMEDOUT ? "did not answer in time" : "answered out of protocol");
                return n == -ETIMEDOUT ? -ETIMEDOUT : -EPIPE;
        }
        c->ret_fd = afd;
        c->status = a.status;
        c->num_out = a.num;
        strscpy(c->err, a.err, sizeof(c->err));
        c->body = xmalloc((size_t) a.body_len + 1);
        _cleanup_free_ uint8_t *chunk = xmalloc(sizeof(struct dc_hdr) + DC_CHUNK);
        while (c->body_len < a.body_len) {
                n = recv_msg(ch, chunk, sizeof(struct dc_hdr) + DC_CHUNK, deadline, NULL);
                struct dc_hdr h;
                if (n > (ssize_t) sizeof(h))
                        memcpy(&h, chunk, sizeof(h));
                if (n <= (ssize_t) sizeof(h) || n > (ssize_t) (sizeof(h) + DC_CHUNK) || h.version != DC_VERSION ||
                    h.type != DC_BODY || h.len != (uint32_t) n || (size_t) n - sizeof(h) > a.body_len - c->body_len) {
                        dc_call_done(c);
                        snprintf(c->err, sizeof(c->err), "the docker child sent a body out of protocol");
                        return -EPIPE;
                }
                memcpy(c->body + c->body_len, chunk + sizeof(h), (size_t) n - sizeof(h));
                c->body_len += (size_t) n - sizeof(h);
        }
        c->body[c->body_len] = 0;
        return a.r;
}

/* A call with up to four text arguments. */
#define DC_CALL(...) ((struct dc_call) { .fd = -1, .ret_fd = -1, __VA_ARGS__ })
static void set_args(struct dc_call *c, unsigned n, const char *const *v) {
        c->nargs = n;
        for (unsigned i = 0; i < n; i++) {
                c->arg[i] = v[i] ? v[i] : "";
                c->arglen[i] = v[i] ? strlen(v[i]) : 0;
        }
}

/* ---- the docker remote */

int dockerchild_docker_call(const char *method, const char *path, const char *body, size_t body_len, long timeout_ms,
                            long *ret_status, char **ret_body, size_t *ret_len) {
        struct dc_call c = DC_CALL(.op = DC_OP_DOCKER, .timeout_ms = timeout_ms, .num = timeout_ms);
        set_args(&c, 3, (const char *const[]) { method, path, NULL });
        c.arg[2] = body ? body : "";
        c.arglen[2] = body ? body_len : 0;
        int r = dc_call(&c);
        if (r < 0) {
                docker_set_last_error(c.err[0] ? c.err : strerror(-r));
                dc_call_done(&c);
                return r;
        }
        *ret_status = c.status;
        *ret_len = c.body_len;
        *ret_body = TAKE_PTR(c.body);
        dc_call_done(&c);
        return 0;
}

static int remote_pull(const char *name, const char *tag) {
        struct dc_call c = DC_CALL(.op = DC_OP_PULL, .timeout_ms = 30L * 60 * 1000);
        set_args(&c, 2, (const char *const[]) { name, tag });
        int r = dc_call(&c);
        docker_set_last_error(r < 0 ? c.err : "");
        dc_call_done(&c);
        return r;
}

static int remote_exec_start(const char *exec_id, int *ret_fd, uint8_t **ret_pre, size_t *ret_pre_len) {
        struct dc_call c = DC_CALL(.op = DC_OP_EXEC_START, .timeout_ms = 30000);
        set_args(&c, 1, (const char *const[]) { exec_id });
        int r = dc_call(&c);
        if (r >= 0 && c.ret_fd < 0) {
                snprintf(c.err, sizeof(c.err), "the docker child passed no exec stream");
                r = -EPIPE;
        }
        docker_set_last_error(r < 0 ? c.err : "");
        if (r < 0) {
                dc_call_done(&c);
                return r;
        }
        *ret_fd = TAKE_FD(c.ret_fd);
        *ret_pre_len = c.body_len;
        *ret_pre = c.body_len ? (uint8_t *) TAKE_PTR(c.body) : NULL;
        dc_call_done(&c);
        return 0;
}

static const struct docker_remote docker_via_child = {
        .call = dockerchild_docker_call,
        .pull = remote_pull,
        .exec_start = remote_exec_start,
};

/* ---- the registry remote */

/* dc_call(), its failure logged as what's (the caller reports the errno). */
static int dc_call_logged(struct dc_call *c, const char *what) {
        int r = dc_call(c);
        if (r < 0)
                log_debug("%s (docker child): %s", what, c->err);
        return r;
}

/* dc_call_logged() of a call whose answer is its r alone. */
static int dc_call_r(struct dc_call *c, const char *what) {
        int r = dc_call_logged(c, what);
        dc_call_done(c);
        return r;
}

static int reg_simple(enum dc_op op, unsigned n, const char *const *args, struct dc_call *c) {
        *c = DC_CALL(.op = op, .timeout_ms = 60000);
        set_args(c, n, args);
        return dc_call_logged(c, "registry");
}

static int reg_manifest_digest(const char *repo, const char *tag, char **ret_digest, int64_t *ret_size) {
        struct dc_call c;
        int r = reg_simple(DC_OP_REG_DIGEST, 2, (const char *const[]) { repo, tag }, &c);
        if (r >= 0) {
                if (!docker_valid_digest(c.body))
                        r = -EBADMSG;
                else {
                        if (ret_digest)
                                *ret_digest = xstrdup(c.body);
                        if (ret_size)
                                *ret_size = c.num_out;
                }
        }
        dc_call_done(&c);
        return r;
}

/* A registry call on repo and one more argument, answered by its r alone. */
static int reg_r(enum dc_op op, const char *repo, const char *arg) {
        struct dc_call c = DC_CALL(.op = op, .timeout_ms = 60000);
        set_args(&c, 2, (const char *const[]) { repo, arg });
        return dc_call_r(&c, "registry");
}

static int reg_blob_exists(const char *repo, const char *digest) {
        return reg_r(DC_OP_REG_BLOB_EXISTS, repo, digest);
}

static int reg_blob_upload(const char *repo, const char *digest, const void *data, size_t len, long timeout_ms) {
        /* The data goes as a file the child maps: a layer is far bigger than any message. On
         * disk where it can be (a template's layer may be gigabytes), else in memory. */
        _cleanup_close_ int mfd = open("/var/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (mfd < 0)
                mfd = memfd_create("paddock-blob", MFD_CLOEXEC);
        if (mfd < 0)
                return -errno;
        for (size_t o = 0; o < len;) {
                ssize_t n = write(mfd, (const uint8_t *) data + o, len - o);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : -EIO;
                o += (size_t) n;
        }
        struct dc_call c = DC_CALL(.op = DC_OP_REG_BLOB_UPLOAD, .timeout_ms = timeout_ms > 0 ? timeout_ms : 60000,
                                   .num = (int64_t) len, .num2 = timeout_ms);
        c.fd = mfd;
        set_args(&c, 2, (const char *const[]) { repo, digest });
        return dc_call_r(&c, "registry");
}

static int reg_manifest_put(const char *repo, const char *tag, const char *media_type, const void *body, size_t len) {
        struct dc_call c = DC_CALL(.op = DC_OP_REG_MANIFEST_PUT, .timeout_ms = 60000);
        set_args(&c, 4, (const char *const[]) { repo, tag, media_type, NULL });
        c.arg[3] = body ? body : "";
        c.arglen[3] = body ? len : 0;
        return dc_call_r(&c, "registry");
}

static int reg_image_config(const char *repo, const char *ref, cJSON **ret) {
        struct dc_call c;
        int r = reg_simple(DC_OP_REG_CONFIG, 2, (const char *const[]) { repo, ref }, &c);
        if (r >= 0) {
                cJSON *j = cJSON_ParseWithLength(c.body, c.body_len);
                if (!j)
                        r = -EBADMSG;
                else
                        *ret = j;
        }
        dc_call_done(&c);
        return r;
}

static int reg_manifest_delete(const char *repo, const char *digest) {
        return reg_r(DC_OP_REG_DELETE, repo, digest);
}

static const struct registry_remote registry_via_child = {
        .manifest_digest = reg_manifest_digest,
        .blob_exists = reg_blob_exists,
        .blob_upload = reg_blob_upload,
        .manifest_put = reg_manifest_put,
        .image_config = reg_image_config,
        .manifest_delete = reg_manifest_delete,
};

/* ---- the btrfs remote */

static int btrfs_call(enum dc_op op, unsigned n, const char *const *args, int64_t num) {
        struct dc_call c = DC_CALL(.op = op, .timeout_ms = 120000, .num = num);
        set_args(&c, n, args);
        return dc_call_r(&c, "btrfs");
}

static int rb_quota_enable(const char *path) {
        return btrfs_call(DC_OP_BTRFS_QUOTA, 1, (const char *const[]) { path }, 0);
}

static int rb_subvol_create_capped(const char *parent, const char *name, uint64_t limit_bytes) {
        if (limit_bytes > INT64_MAX)
                return -EINVAL;
        return btrfs_call(DC_OP_BTRFS_CREATE, 2, (const char *const[]) { parent, name }, (int64_t) limit_bytes);
}

static int rb_subvol_destroy(const char *parent, const char *name) {
        return btrfs_call(DC_OP_BTRFS_DESTROY, 2, (const char *const[]) { parent, name }, 0);
}

static const struct btrfs_remote btrfs_via_child = {
        .quota_enable = rb_quota_enable,
        .subvol_create_capped = rb_subvol_create_capped,
        .subvol_destroy = rb_subvol_destroy,
};

/* ---- the driver's other asks */

/* A call with one text argument and num; the answer stays in *c (dc_call_done() it). */
static int dc_call1(struct dc_call *c, enum dc_op op, long timeout_ms, int64_t num, const char *arg) {
        *c = DC_CALL(.op = op, .timeout_ms = timeout_ms, .num = num);
        set_args(c, 1, (const char *const[]) { arg });
        return dc_call(c);
}

/* dc_call1() of an op that answers with an fd: the fd, or -errno. */
static int dc_call1_fd(enum dc_op op, long timeout_ms, int64_t num, const char *arg, const char *what) {
        struct dc_call c;
        int r = dc_call1(&c, op, timeout_ms, num, arg);
        if (r >= 0 && c.ret_fd < 0)
                r = -EPROTO;
        int fd = r >= 0 ? TAKE_FD(c.ret_fd) : r;
        if (r < 0)
                log_debug("%s (docker child): %s", what, c.err);
        dc_call_done(&c);
        return fd;
}

int dockerchild_agent_dial(const char *sandbox_id, int64_t deadline) {
        int64_t left = deadline - mono_ms();
        return dc_call1_fd(DC_OP_AGENT_DIAL, left > 0 ? left : 1, left > 0 ? left : 1, sandbox_id, "agent socket");
}

int dockerchild_agent_wait(const char *sandbox_id, int timeout_ms) {
        struct dc_call c;
        int r = dc_call1(&c, DC_OP_AGENT_WAIT, timeout_ms, timeout_ms, sandbox_id);
        dc_call_done(&c);
        return r;
}

int dockerchild_cgroup_open(const char *path) {
        return dc_call1_fd(DC_OP_CGROUP_OPEN, 5000, 0, path, "cgroup");
}

int64_t dockerchild_tree_bytes(const char *dir) {
        struct dc_call c;
        int r = dc_call1(&c, DC_OP_TREE_BYTES, 30000, 0, dir);
        int64_t n = r < 0 ? r : c.num_out < 0 ? 0 : c.num_out;
        dc_call_done(&c);
        return n;
}

int dockerchild_runsc_checkpoint(const char *container_id, const char *name, int64_t timeout_ms, struct err *err) {
        struct dc_call c = DC_CALL(.op = DC_OP_RUNSC_CHECKPOINT, .timeout_ms = (long) timeout_ms + 5000, .num = timeout_ms);
        set_args(&c, 2, (const char *const[]) { container_id, name });
        int r = dc_call(&c);
        if (r < 0)
                err_set(err, r, "%s", c.err[0] ? c.err : strerror(-r));
        dc_call_done(&c);
        return r;
}

int dockerchild_fork(int step, const char *src, const char *name, const char *dst, uint64_t limit_bytes, struct err *err) {
        struct dc_call c = DC_CALL(.op = DC_OP_FORK, .timeout_ms = 120000, .num = (int64_t) limit_bytes, .num2 = step);
        set_args(&c, 3, (const char *const[]) { src, name, dst });
        int r = dc_call(&c);
        if (r < 0)
                err_set(err, r, "%s", c.err[0] ? c.err : strerror(-r));
        dc_call_done(&c);
        return r;
}

int dockerchild_ping(char *msg, size_t msglen) {
        struct dc_call c = DC_CALL(.op = DC_OP_PING, .timeout_ms = 5000);
        int r = dc_call(&c);
        snprintf(msg, msglen, "%s", r >= 0 ? c.body : c.err);
        dc_call_done(&c);
        return r;
}

int dockerchild_send_raw(const void *buf, size_t len, int fd, char *msg, size_t msglen) {
        if (ctl_fd < 0)
                return -ENOTCONN;
        int r = channel_open();
        if (r < 0)
                return r;
        _cleanup_close_ int ch = r;
        if ((r = fd_send_msg(ch, buf, len, fd)) < 0)
                return r;
        struct dc_ans a;
        ssize_t n = recv_msg(ch, &a, sizeof(a), mono_ms() + 10000, NULL);
        if (n != (ssize_t) sizeof(a) || !memchr(a.err, 0, sizeof(a.err)))
                return n < 0 ? (int) n : -EPIPE;
        snprintf(msg, msglen, "%s", a.err);
        return a.r;
}

/* ---- start, watch, drop */

bool dockerchild_running(void) {
        return ctl_fd >= 0;
}

pid_t dockerchild_pid(void) {
        return child_pid;
}

/* The child never writes on the control socket: anything there is its end closing. */
static void *watch_thread(void *p) {
        (void) p;
        for (;;) {
                struct pollfd pf = { .fd = ctl_fd, .events = POLLIN };
                int k = poll(&pf, 1, -1);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 || pf.revents)
                        break;
        }
        int status = 0;
        pid_t w = waitpid(child_pid, &status, 0);
        if (w == child_pid && WIFSIGNALED(status))
                log_error("the docker child (pid %d) was killed by signal %d; controld exits (its service manager "
                          "restarts it)", (int) child_pid, WTERMSIG(status));
        else
                log_error("the docker child (pid %d) exited (status %d); controld exits (its service manager restarts it)",
                          (int) child_pid, w == child_pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        _exit(1);
}

int dockerchild_start(const struct config *cfg, struct err *err) {
        if (ctl_fd >= 0)
                return -EALREADY;
        pid_t parent = getpid();
        int fd;
        pid_t pid = fork_channel(&fd, 0);
        if (pid < 0)
                return err_set(err, (int) pid, "cannot start the docker child: %s", strerror((int) -pid));
        if (pid == 0)
                child_main(cfg, fd, parent);
        ctl_fd = fd;
        child_pid = pid;
        char msg[DC_ERR_MAX];
        int r = dockerchild_ping(msg, sizeof(msg));
        if (r < 0) {
                err_set(err, r, "the docker child did not start: %s", msg);
                close(ctl_fd);
                ctl_fd = -1;
                kill(pid, SIGKILL);
                (void) waitpid(pid, NULL, 0);
                return r;
        }
        docker_set_remote(&docker_via_child);
        btrfs_set_remote(&btrfs_via_child);
        /* On Nomad the job specs carry the credentials (nomad-wire.c): the parent keeps them. */
        if (!strcmp(cfg->driver, "docker"))
                registry_set_remote(&registry_via_child);
        pthread_t t;
        if (pthread_create(&t, NULL, watch_thread, NULL) != 0)
                return err_set(err, -EAGAIN, "cannot start the thread that watches the docker child");
        pthread_detach(t);
        log_info("docker child started (pid %d): %s", (int) pid, msg);
        return 0;
}

static void forget(char **s) {
        if (*s) {
                explicit_bzero(*s, strlen(*s));
                free(*s);
                *s = NULL;
        }
}

int dockerchild_drop(const char *path, struct config *cfg, struct err *err) {
        free(kept_path);
        kept_path = xstrdup(path);
        kept_cfg = cfg;
        if (!strcmp(cfg->driver, "docker")) {
                forget(&cfg->snap_username);
                forget(&cfg->snap_password);
        }
        if (geteuid() != 0) {
                /* Started unprivileged (User= in a unit, the docker drop-in's group and its
                 * CAP_SETGID): the groups go, then every capability. Groups that cannot go
                 * (no CAP_SETGID) are a refusal to start: the parent would keep the child's power. */
                if (getgroups(0, NULL) > 0 && setgroups(0, NULL) < 0) {
                        int r = -errno;
                        gid_t g[256];
                        int n = getgroups(ELEMENTSOF(g), g);
                        struct stat st;
                        bool docker = false;
                        if (!strcmp(cfg->driver, "docker") && stat(cfg->docker_socket, &st) == 0)
                                for (int i = 0; i < n; i++)
                                        docker = docker || g[i] == st.st_gid;
                        if (docker)
                                return err_set(err, r, "controld cannot leave the group of %s (%s): give it CAP_SETGID "
                                                       "(packaging/controld-docker-driver.conf) or start it as root with "
                                                       "[controld] user set", cfg->docker_socket, strerror(-r));
                        log_warning("controld keeps its supplementary groups (%s)", strerror(-r));
                }
                int r = caps_drop_except(0);
                if (r < 0)
                        return err_set(err, r, "cannot drop capabilities: %s", strerror(-r));
                log_info("running as uid %d with no supplementary groups and no capabilities; Docker access is the "
                         "docker child's", (int) getuid());
                return 0;
        }
        if (!cfg->run_user[0]) {
                log_warning("[controld] user is empty: controld's network-facing process keeps running as root");
                return 0;
        }
        errno = 0;
        struct passwd *pw = getpwnam(cfg->run_user);
        if (!pw)
                return err_set(err, -ESRCH, "[controld] user %s: %s (create it, e.g. with packaging/sysusers-controld.conf, or "
                                            "name another)", cfg->run_user, errno ? strerror(errno) : "no such user");
        if (pw->pw_uid == 0)
                return err_set(err, -EINVAL, "[controld] user %s is root: name an unprivileged user", cfg->run_user);
        if (setgroups(0, NULL) < 0 || setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) < 0 ||
            setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0) {
                int r = -errno;
                return err_set(err, r, "cannot become [controld] user %s: %s", cfg->run_user, strerror(-r));
        }
        /* A way back would make all of this moot: check there is none. */
        if (setuid(0) == 0 || getgroups(0, NULL) != 0)
                return err_set(err, -EPERM, "dropping privileges to %s did not hold", cfg->run_user);
        (void) prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        /* As a process started as that user would be: its own /proc/self/fd stays its own. */
        (void) prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
        log_info("running as %s (uid %d, gid %d, no supplementary groups); Docker access is the docker child's",
                 cfg->run_user, (int) pw->pw_uid, (int) pw->pw_gid);
        return 0;
}

int dockerchild_config(const char *path, struct config **ret, struct err *err) {
        if (kept_cfg && kept_path && !strcmp(path, kept_path)) {
                *ret = TAKE_PTR(kept_cfg);
                free(kept_path);
                kept_path = NULL;
                return 0;
        }
        return config_load(path, ret, err);
}

int dockerchild_setup(const char *path) {
        struct err err = { 0 };
        struct config *cfg = NULL;
        int r = config_load(path, &cfg, &err);
        if (r < 0) {
                fprintf(stderr, "%s\n", err.message);
                return r;
        }
        if ((r = dockerchild_start(cfg, &err)) < 0 || (r = dockerchild_drop(path, cfg, &err)) < 0) {
                log_error("%s", err.message);
                if (kept_cfg != cfg)
                        config_free(cfg);
                return r;
        }
        return 0;
}
