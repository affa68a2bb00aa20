/* privsep.c — the agent's side of its privileged children: starting them, calls with
 * their timeouts, health (contract in nodeagent.h, under "privsep.c"). The child's side,
 * dropping privilege and checking each message, is privsep-child.c's; what a child does
 * with a checked message is elsewhere: the egress child's work in egress.c, the docker
 * child's in privsep-docker.c.
 *
 * The wire is a SOCK_SEQPACKET socketpair: one send() is one message, so a short
 * or long message is seen as such (MSG_TRUNC gives the real length) instead of
 * being glued to the next one. Both ends run on this host from the same binary,
 * so the structs travel in host order; the version field still guards a parent
 * and a child that came from different builds.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "egress.h"
#include "log.h"
#include "nodeagent.h"
#include "privdrop.h"
#include "privsep.h"
#include "strutil.h"

/* A child that takes longer than this for one request is treated as hung (dead). */
#define PS_CALL_TIMEOUT_MS 30000
#define PS_READY_TIMEOUT_MS 30000

_Static_assert(sizeof(struct ps_hdr) == 16, "ps_hdr layout");
_Static_assert(sizeof(struct ps_allow) == 8, "ps_allow layout");
_Static_assert(sizeof(struct ps_docker) == 112, "ps_docker layout");
_Static_assert(PS_LIST_PAGE * EGRESS_ID_LEN < PS_MSG_MAX, "a list page fits a result");
_Static_assert(PS_STATS_PAGE * (EGRESS_ID_LEN + 4 * 21 + 1) + 12 < PS_MSG_MAX, "a stats page fits a result");
_Static_assert(sizeof(struct ps_relay_open) == 48, "ps_relay_open layout");

static pthread_mutex_t ps_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held for a whole call to one child (a push may take minutes): the egress child is never
 * kept waiting behind the docker child. ps_lock is only ever held briefly. */
static pthread_mutex_t call_locks[PS_CHILD_MAX] = { [0 ... PS_CHILD_MAX - 1] = PTHREAD_MUTEX_INITIALIZER };
/* Any child marked failed; read without ps_lock, which a call holds while it waits. */
static atomic_bool any_failed;
static struct {
        pid_t pid;
        int fd;                 /* parent's end; -1 = none */
        bool failed;            /* died, hung or broke the protocol */
        char why[256];
        uint32_t seq;
} children[PS_CHILD_MAX] = { [0 ... PS_CHILD_MAX - 1] = { .fd = -1 } };

/* What each child said with its READY (the docker process: "network=<mode>"). */
static char ready_notes[PS_CHILD_MAX][64];

/* ---------------------------------------------------------------- parent side */

static void mark_failed(enum ps_child kind, const char *fmt, ...) _printf_(2, 3);
static void mark_failed(enum ps_child kind, const char *fmt, ...) {
        if (children[kind].failed)
                return;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(children[kind].why, sizeof(children[kind].why), fmt, ap);
        va_end(ap);
        children[kind].failed = true;
        atomic_store(&any_failed, true);
}

/* The child's end closed under a request: a process that died says how once reaped, so the
 * reason names the signal or status (it is reaped here, briefly waited for, before the socket's
 * "gone" is all that is known). Called with ps_lock held. */
static void mark_gone(enum ps_child kind, const char *what) {
        for (int i = 0; i < 20 && children[kind].pid > 0; i++) {
                int status;
                pid_t p = waitpid(children[kind].pid, &status, WNOHANG);
                if (p == children[kind].pid) {
                        children[kind].pid = 0;
                        if (WIFSIGNALED(status))
                                mark_failed(kind, "the %s process was killed by signal %d", privsep_child_name(kind), WTERMSIG(status));
                        else
                                mark_failed(kind, "the %s process exited with status %d", privsep_child_name(kind), WEXITSTATUS(status));
                        return;
                }
                if (p < 0)
                        break;
                usleep(10 * 1000);
        }
        mark_failed(kind, "the %s process %s", privsep_child_name(kind), what);
}

/* Waits for one message from the child into ret; 0 or -errno (-ETIMEDOUT, -EPIPE, -EBADMSG). */
static int read_result(enum ps_child kind, uint16_t want_type, uint32_t seq, long timeout_ms,
                       struct ps_result *ret, int *ret_fd) {
        int fd = children[kind].fd;
        int64_t deadline = mono_ms() + timeout_ms;
        for (;;) {
                long left = (long) (deadline - mono_ms());
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int n = poll(&p, 1, (int) left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -ETIMEDOUT;
                union {
                        char b[CMSG_SPACE(sizeof(int))];
                        struct cmsghdr align;
                } u;
                struct iovec iov = { .iov_base = ret, .iov_len = sizeof(*ret) };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
                ssize_t got = recvmsg(fd, &mh, MSG_TRUNC | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (got < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                /* An fd that came along goes to the caller that asked for one, else it is closed. */
                for (struct cmsghdr *cm = got > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm))
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
                            cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
                                size_t nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                                for (size_t i = 0; i < nfd; i++) {
                                        int pfd;
                                        memcpy(&pfd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                                        if (ret_fd && *ret_fd < 0)
                                                *ret_fd = pfd;
                                        else
                                                close(pfd);
                                }
                        }
                if (got < 0)
                        return -errno;
                if (got == 0)
                        return -EPIPE;
                /* The child is trusted less than the kernel, more than the network: still check. */
                if ((size_t) got != sizeof(*ret) || ret->hdr.version != PS_VERSION || ret->hdr.type != want_type ||
                    ret->hdr.len != sizeof(*ret) || ret->hdr.seq != seq || !memchr(ret->msg, 0, sizeof(ret->msg)) ||
                    ret->r > 0) {
                        if (ret_fd && *ret_fd >= 0) {
                                close(*ret_fd);
                                *ret_fd = -1;
                        }
                        return -EBADMSG;
                }
                return 0;
        }
}

static int call_locked(enum ps_child kind, const void *buf, size_t len, uint32_t seq, long timeout_ms,
                       struct ps_result *ret, int *ret_fd) {
        pthread_mutex_lock(&ps_lock);
        bool gone = children[kind].fd < 0, failed = children[kind].failed;
        pthread_mutex_unlock(&ps_lock);
        if (gone)
                return -ENOTCONN;
        if (failed)
                return -EPIPE;
        int r = privsep_send_all(children[kind].fd, buf, len);
        if (r == -EMSGSIZE || r == -ENOBUFS) {
                privsep_result_init(ret, PS_RESULT, seq);
                privsep_refuse(ret, "message of %zu bytes cannot be sent", len);
                return ret->r;
        }
        if (r < 0) {
                char what[128];
                snprintf(what, sizeof(what), "is gone (%s)", strerror(-r));
                pthread_mutex_lock(&ps_lock);
                mark_gone(kind, what);
                pthread_mutex_unlock(&ps_lock);
                return -EPIPE;
        }
        r = read_result(kind, PS_RESULT, seq, timeout_ms, ret, ret_fd);
        if (r < 0) {
                pthread_mutex_lock(&ps_lock);
                if (r == -ETIMEDOUT || r == -EBADMSG)
                        mark_failed(kind, "the %s process %s", privsep_child_name(kind),
                                    r == -ETIMEDOUT ? "did not answer in time" : "answered out of protocol");
                else
                        mark_gone(kind, "is gone");
                pthread_mutex_unlock(&ps_lock);
                return -EPIPE;
        }
        return ret->r;
}

/* With call_locks[kind] held: stamps req's header (version, length, the next
 * sequence number) and makes the call. */
static int call_stamped(enum ps_child kind, void *req, size_t len, long timeout_ms, struct ps_result *ret, int *ret_fd) {
        struct ps_hdr *h = req;
        h->version = PS_VERSION;
        h->len = (uint32_t) len;
        h->seq = ++children[kind].seq;
        h->reserved = 0;
        return call_locked(kind, req, len, h->seq, timeout_ms, ret, ret_fd);
}

int privsep_call_fd(enum ps_child kind, void *req, size_t len, long timeout_ms, struct ps_result *ret, int *ret_fd) {
        *ret_fd = -1;
        if (kind >= PS_CHILD_MAX || len < sizeof(struct ps_hdr) || timeout_ms <= 0)
                return -EINVAL;
        pthread_mutex_lock(&call_locks[kind]);
        int r = call_stamped(kind, req, len, timeout_ms, ret, ret_fd);
        pthread_mutex_unlock(&call_locks[kind]);
        if (r < 0 && *ret_fd >= 0) {
                close(*ret_fd);
                *ret_fd = -1;
        }
        if (r == 0 && *ret_fd < 0)
                return -EBADMSG;       /* said yes, passed nothing */
        return r;
}

int privsep_call_timeout(enum ps_child kind, void *req, size_t len, long timeout_ms, struct ps_result *ret) {
        if (kind >= PS_CHILD_MAX || len < sizeof(struct ps_hdr) || timeout_ms <= 0)
                return -EINVAL;
        pthread_mutex_lock(&call_locks[kind]);
        int r = call_stamped(kind, req, len, timeout_ms, ret, NULL);
        pthread_mutex_unlock(&call_locks[kind]);
        return r;
}

int privsep_call(enum ps_child kind, void *req, size_t len, struct ps_result *ret) {
        return privsep_call_timeout(kind, req, len, PS_CALL_TIMEOUT_MS, ret);
}

int privsep_try_call(enum ps_child kind, void *req, size_t len, struct ps_result *ret) {
        if (kind >= PS_CHILD_MAX || len < sizeof(struct ps_hdr))
                return -EINVAL;
        if (pthread_mutex_trylock(&call_locks[kind]) != 0)
                return -EBUSY;
        int r = call_stamped(kind, req, len, PS_CALL_TIMEOUT_MS, ret, NULL);
        pthread_mutex_unlock(&call_locks[kind]);
        return r;
}

int privsep_send_raw(enum ps_child kind, const void *buf, size_t len, struct ps_result *ret) {
        if (kind >= PS_CHILD_MAX)
                return -EINVAL;
        struct ps_hdr h = { 0 };
        if (len >= sizeof(h))
                memcpy(&h, buf, sizeof(h));
        pthread_mutex_lock(&call_locks[kind]);
        /* The child echoes the seq it could read, 0 when the header itself was short. */
        int r = call_locked(kind, buf, len, len >= sizeof(h) ? h.seq : 0, PS_CALL_TIMEOUT_MS, ret, NULL);
        pthread_mutex_unlock(&call_locks[kind]);
        return r;
}

int privsep_spawn(enum ps_child kind, const struct agent_config *cfg, struct err *err) {
        if (kind >= PS_CHILD_MAX)
                return -EINVAL;
        if (children[kind].fd >= 0)
                return -EALREADY;
        /* Requests are at most ~8 KiB; make sure one always fits. */
        int fd;
        pid_t pid = fork_channel(&fd, 64 * 1024);
        if (pid < 0)
                return err_set(err, (int) pid, "cannot start the %s process: %s", privsep_child_name(kind), strerror((int) -pid));
        if (pid == 0) {
                /* Nothing of the other children: their sockets are the parent's business. */
                for (int i = 0; i < PS_CHILD_MAX; i++)
                        if (children[i].fd >= 0)
                                close(children[i].fd);
                privsep_child_main(kind, fd, cfg);
        }
        pthread_mutex_lock(&ps_lock);
        children[kind] = (typeof(children[kind])) { .pid = pid, .fd = fd };
        struct ps_result res;
        int r = read_result(kind, PS_READY, 0, PS_READY_TIMEOUT_MS, &res, NULL);
        pthread_mutex_unlock(&ps_lock);
        if (r < 0) {
                err_set(err, r, "the %s process did not start (%s)", privsep_child_name(kind), strerror(-r));
        } else if (res.r < 0) {
                r = res.r;
                err_set(err, r, "%s", res.msg);
        }
        if (r < 0) {
                close(children[kind].fd);
                kill(pid, SIGTERM);
                (void) waitpid(pid, NULL, 0);
                children[kind] = (typeof(children[kind])) { .fd = -1 };
                return r;
        }
        strscpy(ready_notes[kind], res.msg, sizeof(ready_notes[kind]));
        log_debug("%s process started (pid %d)", privsep_child_name(kind), (int) pid);
        return 0;
}

const char *privsep_ready_note(enum ps_child kind) {
        return kind < PS_CHILD_MAX ? ready_notes[kind] : "";
}

bool privsep_healthy(struct err *why) {
        bool ok = true;
        pthread_mutex_lock(&ps_lock);
        for (int i = 0; i < PS_CHILD_MAX; i++) {
                int status;
                pid_t p = children[i].pid > 0 ? waitpid(children[i].pid, &status, WNOHANG) : 0;
                if (p > 0 && p == children[i].pid) {
                        children[i].pid = 0;
                        if (WIFSIGNALED(status))
                                mark_failed(i, "the %s process was killed by signal %d", privsep_child_name(i),
                                            WTERMSIG(status));
                        else
                                mark_failed(i, "the %s process exited with status %d", privsep_child_name(i),
                                            WEXITSTATUS(status));
                } else if (p < 0 && errno == ECHILD) {
                        /* Reaped behind our back (SIGCHLD ignored): it is gone all the same. */
                        children[i].pid = 0;
                        mark_failed(i, "the %s process is gone", privsep_child_name(i));
                }
                if (children[i].failed && ok) {
                        err_set(why, -ECHILD, "%s", children[i].why);
                        ok = false;
                }
        }
        pthread_mutex_unlock(&ps_lock);
        return ok;
}

bool privsep_failed(void) {
        return atomic_load(&any_failed);
}

pid_t privsep_child_pid(enum ps_child kind) {
        return kind < PS_CHILD_MAX ? children[kind].pid : 0;
}

void privsep_stop(void) {
        pthread_mutex_lock(&ps_lock);
        for (int i = 0; i < PS_CHILD_MAX; i++) {
                if (children[i].fd >= 0)
                        close(children[i].fd);      /* EOF: the child leaves on its own */
                if (children[i].pid > 0) {
                        int64_t deadline = mono_ms() + 2000;
                        while (waitpid(children[i].pid, NULL, WNOHANG) == 0) {
                                if (mono_ms() >= deadline) {
                                        kill(children[i].pid, SIGKILL);
                                        (void) waitpid(children[i].pid, NULL, 0);
                                        break;
                                }
                                usleep(10000);
                        }
                }
                children[i] = (typeof(children[i])) { .fd = -1 };
        }
        atomic_store(&any_failed, false);
        pthread_mutex_unlock(&ps_lock);
}
