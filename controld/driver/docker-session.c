/* docker-session.c — exec sessions over the hijacked Docker exec stream (the Docker driver's
 * exec path, used where a sandbox has no init to talk to, and for template start commands). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "ddriver.h"
#include "docker.h"
#include "docker-checkpoint.h"
#include "driver.h"
#include "fdio.h"
#include "guest-conn.h"
#include "guest-exec.h"
#include "log.h"
#include "strutil.h"

struct exec_session {
        struct docker *docker;
        char *container;
        char *exec_id;
        int fd;
        struct docker_demux demux;
        uint8_t *pre;
        size_t pre_len;
        bool eof;
        bool stdin_closed;
        int64_t next_alive_check;     /* mono ms */
        bool lost;                    /* the runtime lost the process (exit code -1): the sandbox may be dying */
        exec_output_cb cb;
        void *ud;
};

static int demux_cb(int type, const uint8_t *data, size_t len, void *ud) {
        struct exec_session *s = ud;
        if (type != 1 && type != 2)
                return 0;
        return s->cb ? s->cb(type, data, len, s->ud) : 0;
}

int dd_exec_start(struct driver *d, const struct sandbox *sb, const struct exec_spec *spec, struct exec_session **ret,
                         struct err *err) {
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        struct docker_exec_opts o = {
                .cmd = spec->argv, .env = spec->env, .working_dir = spec->cwd ? spec->cwd : "/", .attach_stdin = spec->want_stdin,
        };
        char *exec_id = NULL;
        int r = docker_exec_create(D(d), sb->container_id ? sb->container_id : name, &o, &exec_id);
        if (r < 0)
                return err_set(err, r, "%s", r == -ENOENT || r == -ESRCH ? "the sandbox's container is not running" : dmsg(r));
        struct exec_session *s = xnew0(struct exec_session, 1);
        s->docker = D(d);
        s->container = xstrdup(sb->container_id ? sb->container_id : name);
        s->exec_id = exec_id;
        s->fd = -1;
        r = docker_exec_start(D(d), exec_id, &s->fd, &s->pre, &s->pre_len);
        if (r < 0) {
                err_set(err, r, "exec start failed: %s", dmsg(r));
                free_many(s->container, s->exec_id, s);
                return r;
        }
        if (!spec->want_stdin) {
                shutdown(s->fd, SHUT_WR);
                s->stdin_closed = true;
        }
        *ret = s;
        return 0;
}

/* Feeds bytes read from the stream (and any pre-read bytes first). */
static int feed(struct exec_session *s, const uint8_t *buf, size_t len, exec_output_cb cb, void *ud) {
        s->cb = cb;
        s->ud = ud;
        if (s->pre_len) {
                uint8_t *p = TAKE_PTR(s->pre);
                size_t n = s->pre_len;
                s->pre_len = 0;
                int r = docker_demux_feed(&s->demux, p, n, demux_cb, s);
                free(p);
                if (r < 0)
                        return r;
        }
        return len ? docker_demux_feed(&s->demux, buf, len, demux_cb, s) : 0;
}

static int read_some(struct exec_session *s, exec_output_cb cb, void *ud) {
        uint8_t buf[65536];
        ssize_t n;
        do
                n = read(s->fd, buf, sizeof(buf));
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        if (n == 0) {
                s->eof = true;
                return 1;
        }
        int r = feed(s, buf, (size_t) n, cb, ud);
        return r < 0 ? r : 0;
}

/* When the kernel kills a gVisor sandbox (out of memory), Docker never ends the exec stream:
 * a quiet stream is checked about once a second, and a container that stopped ends it. */
static bool container_gone(struct exec_session *s) {
        struct docker_container_state st;
        if (mono_ms() < s->next_alive_check)
                return false;
        s->next_alive_check = mono_ms() + 1000;
        if (docker_container_inspect(s->docker, s->container, &st) < 0 || (st.exists && st.running))
                return false;
        s->eof = true;
        return true;
}

int dd_exec_read(struct exec_session *s, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud) {
        int r;
        if (s->pre_len && (r = feed(s, NULL, 0, cb, ud)) < 0)
                return r;
        if (s->eof)
                return 1;
        int64_t deadline = mono_ms() + timeout_ms;
        for (;;) {
                struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN }, { .fd = watch_fd, .events = POLLRDHUP } };
                int64_t left = deadline - mono_ms();
                if (left < 0)
                        left = 0;
                int k = poll(p, watch_fd >= 0 ? 2 : 1, (int) left);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (watch_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        return -ECONNRESET;
                if (p[0].revents & (POLLIN | POLLHUP | POLLERR))
                        return read_some(s, cb, ud);
                if (k == 0)
                        return container_gone(s) ? 1 : 0;
        }
}

int dd_exec_write(struct exec_session *s, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud) {
        const char *p = data;
        int64_t deadline = mono_ms() + timeout_ms;
        if (s->stdin_closed || s->eof)
                return -EPIPE;
        while (len > 0) {
                struct pollfd pf = { .fd = s->fd, .events = POLLOUT | POLLIN };
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                int k = poll(&pf, 1, (int) left);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0)
                        return -errno;
                if (pf.revents & POLLIN) {
                        int r = read_some(s, cb, ud);
                        if (r < 0)
                                return r;
                        if (r == 1)
                                return -EPIPE;  /* the process ended: it won't read the rest */
                        continue;
                }
                if (pf.revents & (POLLERR | POLLHUP))
                        return -EPIPE;
                if (pf.revents & POLLOUT) {
                        int r = fd_send_step(s->fd, &p, &len);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int dd_exec_close_stdin(struct exec_session *s) {
        if (!s->stdin_closed) {
                shutdown(s->fd, SHUT_WR);
                s->stdin_closed = true;
        }
        return 0;
}

/* Did the memory limit kill this stopped or stopping sandbox? Docker's OOMKilled comes from
 * containerd's OOM event, which on a busy host sometimes never lands before the cgroup goes
 * (seen under runsc: exited, 137, OOMKilled false). Under gVisor nothing inside the sandbox
 * can SIGKILL the sandbox itself, so a SIGKILL exit we did not cause is the OOM killer. */
static bool died_of_oom(const struct docker_container_state *st) {
        return st->oom_killed || (st->exists && !st->running && st->exit_code == 137);
}

int dd_exec_exit_code(struct exec_session *s, int *ret) {
        struct docker_exec_info info;
        struct docker_container_state st;
        /* The stream ends a moment before Docker records the exit code. */
        for (int i = 0; i < 200; i++) {
                int r = docker_exec_inspect(s->docker, s->exec_id, &info);
                if (r < 0)
                        return r;
                if (!info.running) {
                        *ret = info.exit_code;
                        s->lost = info.exit_code == -1;
                        return 0;
                }
                /* A stopped container (e.g. killed out of memory) leaves its execs "running" forever. */
                if (i == 10 && docker_container_inspect(s->docker, s->container, &st) == 0 && !(st.exists && st.running)) {
                        *ret = died_of_oom(&st) ? 137 : -1;
                        return died_of_oom(&st) ? 0 : -ESRCH;
                }
                usleep(5000);
        }
        s->lost = true;
        return -ETIMEDOUT;
}

/* After the sandbox's process vanished: did its memory limit kill it? The kernel kills the
 * sandbox a moment before Docker records why, and containerd's OOM event can take seconds to
 * land on a busy host: a stopped container gets 5 s, a running one `patience` polls of 20 ms. */
static int container_oom_killed(struct docker *dk, const char *container, int patience) {
        struct docker_container_state st;
        for (int i = 0; i < 250; i++) {
                int r = docker_container_inspect(dk, container, &st);
                if (r < 0)
                        return r;
                if (died_of_oom(&st))
                        return 1;
                if (st.exists && st.running && i >= patience)
                        return 0;
                usleep(20000);
        }
        return 0;
}

int dd_oom_killed(struct driver *d, const struct sandbox *sb) {
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        return container_oom_killed(D(d), sb->container_id ? sb->container_id : name, 250);
}

int dd_exec_oom_killed(struct exec_session *s) {
        struct docker_container_state st;
        /* The kernel kills the sandbox a moment before Docker records why; on a busy host
         * containerd's OOM event can take seconds to land, so a stopped container is given 5 s.
         * When runsc lost the process (exit -1, "WaitPID failed: EOF") the sandbox itself is
         * going down, and Docker can show it running for a while yet: it gets the 5 s too. */
        for (int i = 0; i < 250; i++) {
                int r = docker_container_inspect(s->docker, s->container, &st);
                if (r < 0)
                        return r;
                if (died_of_oom(&st))
                        return 1;
                if (st.exists && st.running && i >= (s->lost ? 250 : 10))
                        return 0;
                usleep(20000);
        }
        return 0;
}

void dd_exec_free(struct exec_session *s) {
        if (!s)
                return;
        if (s->fd >= 0)
                close(s->fd);
        free_many(s->container, s->pre, s->exec_id, s);
}
