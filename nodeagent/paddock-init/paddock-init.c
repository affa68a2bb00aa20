/* paddock-init.c — PID 1 of a sandbox: reaps orphans, forwards termination signals to the
 * process groups it started, and serves the agent protocol (proto-json/AGENT-PROTOCOL.md) on
 * a Unix socket: spawn processes (pipes or a PTY), stream their output, keep a bounded
 * replay of it, file operations, TCP forwards to 127.0.0.1.
 *
 *   paddock-init --socket PATH (--secret-file PATH | --secret-fd N | --secret-env NAME)
 *
 * Not PID 1 (tests): PADDOCK_INIT_SUBREAPER=1 makes it a child subreaper instead.
 * One thread, poll() over non-blocking fds; signals through a signalfd. Every resource a
 * client can make us hold is bounded (pi.h); a client that breaks the protocol or
 * does not read its output is disconnected, the agent and its processes stay. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

/* ---------------------------------------------------------------- unpark */

static const char *secret_path;
static int listen_on(const char *path);
static int read_secret(int fd);

/* The unpark signal: listen again on the same path, with the secret the file holds now (a
 * restored copy of a sandbox may have been given another). */
static void unpark(void) {
        if (!pi.parked)
                return;
        if (secret_path) {
                int fd = open(secret_path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
                char *old = pi.secret;
                size_t old_len = pi.secret_len;
                pi.secret = NULL;
                if (fd < 0 || read_secret(fd) < 0) {
                        pi_log("warning", "cannot re-read the secret from %s; keeping the one read at start", secret_path);
                        free(pi.secret);
                        pi.secret = old;
                        pi.secret_len = old_len;
                } else {
                        explicit_bzero(old, old_len);
                        free(old);
                }
                if (fd >= 0)
                        close(fd);
        }
        int fd = listen_on(pi.sock_path);
        if (fd < 0) {
                pi_log("error", "unpark: cannot listen on %s: %s", pi.sock_path, strerror(-fd));
                return;   /* still parked: another signal retries */
        }
        pi.listen_fd = fd;
        pi.parked = false;
        pi_log("info", "unparked: serving on %s again", pi.sock_path);
}

/* ---------------------------------------------------------------- main loop */

static void on_signal(void) {
        struct signalfd_siginfo si;
        while (read(pi.sig_fd, &si, sizeof(si)) == sizeof(si)) {
                int sig = (int) si.ssi_signo;
                if (sig == SIGCHLD)
                        continue;
                if (sig == PJ_AGENT_UNPARK_SIGNAL) {
                        unpark();
                        continue;
                }
                /* tini's job: the signal goes to what we started (each its own process group) */
                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                        if (pi.procs[i].used)
                                proc_signal_group(&pi.procs[i], sig);
                if ((sig == SIGTERM || sig == SIGINT) && !pi.shutting_down) {
                        pi_log("info", "%s: stopping once the processes have exited", strsignal(sig));
                        spare_stop();
                        pi.shutting_down = true;
                        pi.shutdown_ms = pi_now_ms();
                }
        }
        proc_reap();
}

/* No output waiting and no frame half read on any connection (a READ transfer under way is
 * one or the other, or the loop's `work`). With the caller's pause since the last command
 * started or ended (PI_SPARE_QUIET_MS): a spare shell costs its sandbox CPU (tens of ms
 * under gVisor), and started between commands that come one after another it would eat the
 * CPU quota the next one needs. */
static bool quiet(void) {
        for (size_t i = 0; i < PI_MAX_CONNS; i++) {
                const struct conn *c = &pi.conns[i];
                if (c->used && (conn_out_pending(c) || (c->have_h && c->pay_got < c->h.len)))
                        return false;
        }
        return true;
}

static bool any_running(void) {
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                if (pi.procs[i].used && !pi.procs[i].reaped)
                        return true;
        return false;
}

/* Every finished process's EXIT queued and every connection's output sent. */
static bool all_said(void) {
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                if (pi.procs[i].used && !pi.procs[i].finished)
                        return false;
        for (size_t i = 0; i < PI_MAX_CONNS; i++)
                if (pi.conns[i].used && conn_out_pending(&pi.conns[i]))
                        return false;
        return true;
}

enum pk { PK_LISTEN, PK_SIG, PK_CONN, PK_OUT, PK_ERR, PK_IN, PK_FWD, PK_INO };
struct pref {
        enum pk kind;
        void *ptr;
        struct conn *conn;
};

#define MAX_POLL (3 + PI_MAX_CONNS * (1 + PI_MAX_FORWARDS) + PJ_AGENT_MAX_PROCS * 3)

static int serve(void) {
        static struct pollfd pfd[MAX_POLL];
        static struct pref ref[MAX_POLL];

        for (;;) {
                uint64_t now = pi_now_ms();
                size_t n = 0;
                int timeout = 1000;
                bool work = false;

                if (pi.shutting_down) {
                        /* Done once every process has exited and its EXIT (and last output)
                         * has left: exiting with frames still queued resets the connection
                         * and the client never learns how its command ended. A client that
                         * does not read is waited for only until the deadline below. */
                        if ((!any_running() && all_said()) ||
                            now > pi.shutdown_ms + PI_SHUTDOWN_MS + PI_SHUTDOWN_FLUSH_MS)
                                return 0;
                        if (now > pi.shutdown_ms + PI_SHUTDOWN_MS) {
                                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                                        if (pi.procs[i].used)
                                                proc_signal_group(&pi.procs[i], SIGKILL);
                        }
                }
#define ADD(fd_, ev_, kind_, ptr_, conn_) \
        do { \
                pfd[n] = (struct pollfd) { .fd = (fd_), .events = (ev_) }; \
                ref[n++] = (struct pref) { (kind_), (ptr_), (conn_) }; \
        } while (0)
                ADD(pi.sig_fd, POLLIN, PK_SIG, NULL, NULL);
                if (!pi.shutting_down && !pi.parked)
                        ADD(pi.listen_fd, POLLIN, PK_LISTEN, NULL, NULL);
                if (watch_fd() >= 0)
                        ADD(watch_fd(), POLLIN, PK_INO, NULL, NULL);
                for (size_t i = 0; i < PI_MAX_CONNS; i++) {
                        struct conn *c = &pi.conns[i];
                        if (!c->used)
                                continue;
                        if ((!c->hello || c->closing) && now >= c->deadline_ms) {
                                conn_close(c);
                                continue;
                        }
                        if (!c->hello || c->closing)
                                timeout = 100;
                        short ev = (conn_blocked(c) ? 0 : POLLIN) | (conn_out_pending(c) ? POLLOUT : 0);
                        ADD(c->fd, ev, PK_CONN, c, c);
                        for (size_t k = 0; k < PI_MAX_CHANS; k++) {
                                struct chan *ch = &c->chans[k];
                                if (!ch->used)
                                        continue;
                                if (ch->kind == CH_READ && conn_out_pending(c) < PI_WATERMARK)
                                        work = true;
                                if (ch->kind != CH_FORWARD)
                                        continue;
                                short fe = ch->connecting || pending_len(&ch->out) ? POLLOUT : 0;
                                if (!ch->connecting && !ch->rd_eof && conn_out_pending(c) < PI_WATERMARK)
                                        fe |= POLLIN;
                                ADD(ch->fd, fe, PK_FWD, ch, c);
                        }
                }
                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                        struct proc *p = &pi.procs[i];
                        if (!p->used)
                                continue;
                        if (p->reaped && !p->finished)
                                timeout = 50; /* the exit grace */
                        bool slow = p->conn && conn_out_pending(p->conn) >= PI_WATERMARK;
                        if (p->fd_out >= 0 && !slow)
                                ADD(p->fd_out, POLLIN, PK_OUT, p, NULL);
                        if (p->fd_err >= 0 && !slow)
                                ADD(p->fd_err, POLLIN, PK_ERR, p, NULL);
                        if (p->fd_in >= 0 && pending_len(&p->in))
                                ADD(p->fd_in, POLLOUT, PK_IN, p, NULL);
                }
#undef ADD
                /* A spare shell is started when a poll finds nothing to do after a pause (proc.c). */
                bool want_spare = false;
                if (!work && spare_wanted() && quiet()) {
                        uint64_t due = pi.last_busy_ms + PI_SPARE_QUIET_MS;
                        if (now >= due)
                                want_spare = true;
                        else if ((int) (due - now) < timeout)
                                timeout = (int) (due - now);
                }
                int r = poll(pfd, n, work || want_spare ? 0 : timeout);
                if (r < 0 && errno != EINTR)
                        return -errno;
                if (r == 0 && want_spare)
                        spare_start();
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
                        case PK_INO:
                                watch_read();
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
                                        fwd_connected(c, ch);
                                        break;
                                }
                                if (re & POLLOUT)
                                        fwd_flush(c, ch);
                                if (ch->used && !ch->rd_eof && (re & (POLLIN | POLLHUP | POLLERR)))
                                        fwd_read(c, ch);
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
                now = pi_now_ms();
                for (size_t i = 0; i < PI_MAX_CONNS; i++) {
                        struct conn *c = &pi.conns[i];
                        for (size_t k = 0; c->used && k < PI_MAX_CHANS; k++)
                                if (c->chans[k].used && c->chans[k].kind == CH_READ && conn_out_pending(c) < PI_WATERMARK)
                                        conn_read_step(c, &c->chans[k]);
                        if (c->used && conn_out_pending(c))
                                conn_write(c);
                }
                for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                        proc_maybe_finish(&pi.procs[i], now);
        }
}

/* ---------------------------------------------------------------- setup */

static void mark_inherited_cloexec(void) {
#ifdef CLOSE_RANGE_CLOEXEC
        if (close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
                return;
#endif
        /* Without close_range's flag: the descriptors that are open, not every possible one. */
        DIR *d = opendir("/proc/self/fd");
        if (!d) {
                for (int fd = 3; fd < 1024; fd++)
                        (void) fcntl(fd, F_SETFD, FD_CLOEXEC);
                return;
        }
        for (struct dirent *e; (e = readdir(d));) {
                int fd = atoi(e->d_name);
                if (fd > 2 && fd != dirfd(d))
                        (void) fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        closedir(d);
}

static int read_secret(int fd) { return pj_secret_read(fd, 1, PJ_AGENT_MAX_SECRET, &pi.secret, &pi.secret_len); }

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
                "usage: paddock-init --socket PATH (--secret-file PATH | --secret-fd N | --secret-env NAME)\n"
                "  --secret-env: the secret is in environment variable NAME (which the agent then\n"
                "  removes; names starting PADDOCK_INIT_ never reach the processes it starts).\n"
                "  PID 1 of a Paddock sandbox: reaps, forwards signals, serves the agent protocol.\n"
                "  PADDOCK_INIT_SUBREAPER=1 runs it as a child subreaper when it is not PID 1 (tests).\n");
        exit(code);
}

/* Every signal back to its default action, through the kernel's rt_sigaction: the C
 * library refuses its own reserved signals (32 and 33 in glibc), yet a parent that ignored
 * them (seen: a CI harness) passes that on through exec, and a command would inherit it. */
static void reset_signal_dispositions(void) {
        struct {
                void (*handler)(int);
                unsigned long flags;
                void (*restorer)(void);
                uint64_t mask;
        } dfl = { .handler = SIG_DFL };
        for (int s = 1; s <= 64; s++)
                if (s != SIGKILL && s != SIGSTOP)
                        (void) syscall(SYS_rt_sigaction, s, &dfl, NULL, sizeof(dfl.mask));
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "secret-file", required_argument, NULL, 'f' },
                { "secret-fd", required_argument, NULL, 'F' },
                { "secret-env", required_argument, NULL, 'e' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *sock = NULL, *secret_file = NULL, *secret_env = NULL;
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
                case 'e':
                        secret_env = optarg;
                        break;
                case 'h':
                        usage(0);
                default:
                        usage(2);
                }
        if (!sock || (secret_file != NULL) + (secret_fd >= 0) + (secret_env != NULL) != 1)
                usage(2);
        if (sock[0] != '/') {
                pi_log("error", "--socket must be an absolute path");
                return 2;
        }
        if (getpid() != 1) {
                const char *e = getenv("PADDOCK_INIT_SUBREAPER");
                if (!e || strcmp(e, "1")) {
                        pi_log("error", "not PID 1; set PADDOCK_INIT_SUBREAPER=1 to run as a subreaper (tests)");
                        return 1;
                }
                if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
                        pi_log("error", "cannot become a child subreaper: %s", strerror(errno));
                        return 1;
                }
        }
        /* The secret: read once, never written anywhere, the file left as it is; from the
         * environment (the Nomad driver's way to hand it over), the variable is wiped. */
        if (secret_env) {
                char *v = getenv(secret_env);
                size_t n = v ? strlen(v) : 0;
                if (n == 0 || n > PJ_AGENT_MAX_SECRET) {
                        pi_log("error", "cannot read the secret ($%s): %s", secret_env,
                               n ? "longer than 1024 bytes" : "not set or empty");
                        return 1;
                }
                pi.secret = xstrndup(v, n);
                pi.secret_len = n;
                explicit_bzero(v, n);
                unsetenv(secret_env);
        }
        int fd = secret_env ? -1 : secret_file ? open(secret_file, O_RDONLY | O_CLOEXEC | O_NOCTTY) : secret_fd;
        r = secret_env ? 0 : fd < 0 ? -errno : read_secret(fd);
        if (fd >= 0)
                close(fd);
        if (r < 0) {
                pi_log("error", "cannot read the secret (%s): %s", secret_file ? secret_file : "fd",
                    r == -EINVAL ? "empty, longer than 1024 bytes or containing NUL" : strerror(-r));
                return 1;
        }

        /* Whatever our own parent left open must not reach a sandbox process. Marked once
         * here, so a spawn's child does nothing for it: under gVisor each syscall in the
         * child of a vfork is on the spawn's critical path (a loop over 1021 descriptors
         * there cost ~30 ms of CPU per command on a nested-virtualization host). Every fd
         * the agent opens later is O_CLOEXEC. */
        mark_inherited_cloexec();
        /* Likewise the signal dispositions we inherited (a shell's background job starts with
         * SIGINT and SIGQUIT ignored): defaults once here, so a command's child need not. */
        reset_signal_dispositions();

        sigset_t mask;
        sigemptyset(&mask);
        int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, PJ_AGENT_UNPARK_SIGNAL };
        for (size_t i = 0; i < ELEMENTSOF(sigs); i++)
                sigaddset(&mask, sigs[i]);
        sigprocmask(SIG_BLOCK, &mask, NULL);
        signal(SIGPIPE, SIG_IGN);
        pi.sig_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
        if (pi.sig_fd < 0) {
                pi_log("error", "signalfd: %s", strerror(errno));
                return 1;
        }
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max && rl.rlim_cur < 8192) {
                rl.rlim_cur = rl.rlim_max < 8192 ? rl.rlim_max : 8192;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (chdir("/") < 0)
                pi_log("warning", "chdir /: %s", strerror(errno));
        for (size_t i = 0; i < PI_MAX_CONNS; i++)
                pi.conns[i] = (struct conn) { .fd = -1, .chans = xnew0(struct chan, PI_MAX_CHANS) };
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                pi.procs[i] = (struct proc) { .fd_in = -1, .fd_out = -1, .fd_err = -1 };
        pi.sock_path = sock;
        secret_path = secret_file;
        pi.listen_fd = listen_on(sock);
        if (pi.listen_fd < 0) {
                pi_log("error", "cannot listen on %s: %s", sock, strerror(-pi.listen_fd));
                return 1;
        }
        pi_log("info", "serving on %s (protocol %d)", sock, PJ_AGENT_VERSION);
        r = serve();
        if (!pi.parked)
                unlink(sock);
        if (r < 0) {
                pi_log("error", "poll: %s", strerror(-r));
                return 1;
        }
        return 0;
}

