/* proc.c — the processes paddock-init spawns: pipes or a PTY (the child itself, set up and
 * exec'd, is child.c's), stdin queue, a bounded output ring for ATTACH, the spare shell,
 * reaping (ours and orphans), EXIT. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

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

/* Closes what p still holds of stdin, stdout and stderr (each then -1). */
static void close_fds(struct proc *p) {
        int *fds[] = { &p->fd_in, &p->fd_out, &p->fd_err };
        for (size_t i = 0; i < ELEMENTSOF(fds); i++) {
                if (*fds[i] >= 0)
                        close(*fds[i]);
                *fds[i] = -1;
        }
}

static void proc_free(struct proc *p) {
        for (struct chunk *k = p->ring_head, *n; k; k = n) {
                n = k->next;
                free(k);
        }
        close_fds(p);
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
        pi.last_busy_ms = pi_now_ms();
        if (!p->conn)
                return;
        struct conn *c = p->conn;
        struct pj_agent_msg m = { .type = PJ_AGENT_EXIT, .id = p->chan };
        exit_fields(p, &m.f);
        conn_send(c, &m);
        struct chan *ch = c->used && p->conn == c ? chan_find(c, p->chan) : NULL;
        if (ch)
                chan_close(c, ch);
        p->conn = NULL;
}

static void proc_output(struct proc *p, uint8_t stream, const uint8_t *d, size_t n);

static uint8_t chunk[PI_CHUNK];         /* what one read of a process's pipe takes */

/* What a pipe holds right now (bounded): output written before the exit must not be lost
 * because the agent got the CPU late and the grace ran out before it read the pipe. */
static void drain_ready(struct proc *p, int fd, uint8_t stream) {
        for (int i = 0; fd >= 0 && i < 4; i++) {
                ssize_t n = read(fd, chunk, sizeof(chunk));
                if (n <= 0)
                        break;
                proc_output(p, stream, chunk, (size_t) n);
        }
}

/* EXIT once the process is reaped and its output is drained (or the grace ran out: an
 * orphan still holds the pipe; what is in it already is still sent). */
void proc_maybe_finish(struct proc *p, uint64_t now) {
        if (!p->used || p->finished || !p->reaped)
                return;
        if ((p->fd_out >= 0 || p->fd_err >= 0) && now < p->reaped_ms + PI_EXIT_GRACE_MS)
                return;
        drain_ready(p, p->fd_out, 1);
        drain_ready(p, p->fd_err, 2);
        close_fds(p);
        pj_agent_buf_done(&p->in.b);
        p->in.off = 0;
        p->finished = true;
        proc_send_exit(p);
}

static void proc_output(struct proc *p, uint8_t stream, const uint8_t *d, size_t n) {
        ring_add(p, stream, d, n);
        if (p->conn)
                conn_send(p->conn, &(struct pj_agent_msg) { .type = PJ_AGENT_OUTPUT, .id = p->chan, .f.stream = stream,
                                                           .data = d, .data_len = n });
}

void proc_read(struct proc *p, int *fdp, uint8_t stream) {
        ssize_t n = read(*fdp, chunk, sizeof(chunk));
        if (n > 0) {
                proc_output(p, stream, chunk, (size_t) n);
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
        proc_maybe_finish(p, pi_now_ms());
}

void proc_write_stdin(struct proc *p) {
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

struct proc *proc_by_pid(pid_t pid) {
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++)
                if (pi.procs[i].used && pi.procs[i].pid == pid)
                        return &pi.procs[i];
        return NULL;
}

/* A free slot; when all are taken, the oldest finished process that nobody watches gives
 * its slot up. NULL when every slot holds a live or watched process. */
static struct proc *proc_slot(void) {
        struct proc *old = NULL;
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                struct proc *p = &pi.procs[i];
                if (!p->used)
                        return p;
                if (p->finished && !p->conn && (!old || p->seq < old->seq))
                        old = p;
        }
        if (old)
                proc_free(old);
        return old;
}

static bool spare_reaped(pid_t pid);

void proc_reap(void) {
        for (;;) {
                int st;
                pid_t pid = waitpid(-1, &st, WNOHANG);
                if (pid <= 0)
                        return;
                struct proc *p = proc_by_pid(pid);
                if (!p) {
                        (void) spare_reaped(pid); /* else an orphan: reaped, nothing to report */
                        continue;
                }
                p->reaped = true;
                p->status = st;
                p->reaped_ms = pi_now_ms();
                proc_maybe_finish(p, p->reaped_ms);
        }
}

static int set_nonblock(int fd) {
        int fl = fcntl(fd, F_GETFL);
        return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

/* p (a free slot) becomes the process pid on channel ch of c, its pipes non-blocking;
 * SPAWNED is sent. */
static void proc_started(struct conn *c, struct chan *ch, struct proc *p, const struct pj_agent_msg *m, pid_t pid,
                         bool pty, int fd_in, int fd_out, int fd_err) {
        *p = (struct proc) { .used = true, .pid = pid, .tag = xstrdup(m->f.tag ? m->f.tag : ""), .pty = pty,
                             .kill_on_detach = m->f.kill_on_detach, .fd_in = fd_in, .fd_out = fd_out, .fd_err = fd_err,
                             .seq = ++pi.seq };
        if (p->fd_in >= 0)
                set_nonblock(p->fd_in);
        set_nonblock(p->fd_out);
        if (p->fd_err >= 0)
                set_nonblock(p->fd_err);
        ch->proc = p;
        p->conn = c;
        p->chan = m->id;
        conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_SPAWNED, .id = m->id, .f.pid = (uint32_t) pid });
}

/* ---- the spare shell
 *
 * Most commands arrive as /bin/sh -c SCRIPT with the same environment, directory and user
 * each time (the API's exec, code and process calls). Starting /bin/sh is most of what a
 * command costs under gVisor (an execve, the dynamic loader, the page faults of a fresh
 * address space: 10-20 ms on a nested-virtualization host), so the agent keeps one shell
 * started ahead, made exactly as the last such command was (environment, directory, user,
 * process group, signals), waiting as `/bin/sh -s` for its script on a pipe. A command that
 * matches takes it: the script is written into the pipe, which is then closed, and the shell
 * runs it as it would have run -c SCRIPT; a new spare is started once the agent has been
 * idle a moment (PI_SPARE_QUIET_MS). Only where /bin/sh is dash or busybox: both read a
 * script from a pipe in whole blocks (so a `cat` in it reads end of file, as from the
 * /dev/null a cold command has, and never the script's next line, as it would under bash,
 * which reads -s input a byte at a time), and with -s neither catches SIGINT (dash does under
 * -c, and a SIGINT that lands while it vforks a command would be lost for that command).
 * What differs from -c: the shell's stdin is that pipe at its end, ps shows "/bin/sh -s",
 * and the shell forks the script's last command instead of exec'ing it. Anything else (a
 * PTY, stdin, another program, other arguments, a script over PI_SPARE_MAX_SCRIPT) starts
 * the cold way. A spare that dies unused (its /bin/sh is missing, its directory went away,
 * someone killed it) is not replaced until a command starts the cold way again. */
struct spare {
        pid_t pid;              /* 0: none; else made from the template as it is now */
        int fd_script, fd_out, fd_err;
};
static struct spare spare = { .fd_script = -1, .fd_out = -1, .fd_err = -1 };
/* The template: the last cold /bin/sh -c command's environment, directory and user (cs.envp
 * and cs.cwd owned copies), and spare_key() of them. */
static struct {
        bool set, wanted;
        struct child_spec cs;
        char *key;
        size_t key_len;
} tmpl;

static bool spare_eligible(const struct pj_agent_msg *m) {
        return !PJ_AGENT_HAS(&m->f, PJ_AGENT_T_ROWS) && !m->f.stdin_pipe && m->n_argv == 3 &&
               !strcmp(m->argv[0], "/bin/sh") && !strcmp(m->argv[1], "-c") && strlen(m->argv[2]) <= PI_SPARE_MAX_SCRIPT;
}

/* Everything a shell is made from but its script, as one byte string (NUL-separated). */
static char *spare_key(const struct child_spec *cs, size_t *ret_len) {
        struct pj_agent_buf b = { 0 };
        char ids[64];
        int n = snprintf(ids, sizeof(ids), "%c%u %c%u", cs->has_uid ? 'u' : '-', cs->uid, cs->has_gid ? 'g' : '-', cs->gid);
        pj_agent_buf_put(&b, ids, (size_t) n + 1);
        pj_agent_buf_put(&b, cs->cwd ? cs->cwd : "", strlen(cs->cwd ? cs->cwd : "") + 1);
        for (char **e = cs->envp; *e; e++)
                pj_agent_buf_put(&b, *e, strlen(*e) + 1);
        *ret_len = b.len;
        return (char *) b.p;
}

static void spare_close_fds(void) {
        int *fds[] = { &spare.fd_script, &spare.fd_out, &spare.fd_err };
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                if (*fds[i] >= 0) {
                        close(*fds[i]);
                        *fds[i] = -1;
                }
}

/* The spare is dropped: killed (reaped as any orphan is), its pipes closed. */
static void spare_drop(void) {
        if (spare.pid > 0)
                kill(spare.pid, SIGKILL);
        spare_close_fds();
        spare.pid = 0;
}

static void tmpl_clear(void) {
        if (tmpl.cs.envp)
                for (char **e = tmpl.cs.envp; *e; e++)
                        free(*e);
        free(tmpl.cs.envp);
        free((char *) tmpl.cs.cwd);
        free(tmpl.key);
        memset(&tmpl, 0, sizeof(tmpl));
}

/* After a cold /bin/sh -c start of cs (whose spare_key() is key, taken over): the template
 * the next spare is made from (a different one replaces the spare at hand). */
static void spare_remember(const struct child_spec *cs, char *key, size_t key_len) {
        if (tmpl.set && tmpl.key_len == key_len && !memcmp(tmpl.key, key, key_len)) {
                free(key);
                tmpl.wanted = true; /* a spare that died unused may be tried again */
                return;
        }
        spare_drop();
        tmpl_clear();
        size_t n = 0;
        while (cs->envp[n])
                n++;
        char **envp = xnew0(char *, n + 1);
        for (size_t i = 0; i < n; i++)
                envp[i] = xstrdup(cs->envp[i]);
        tmpl.cs = (struct child_spec) { .envp = envp, .cwd = cs->cwd ? xstrdup(cs->cwd) : NULL, .has_uid = cs->has_uid,
                                        .has_gid = cs->has_gid, .uid = cs->uid, .gid = cs->gid };
        tmpl.key = key;
        tmpl.key_len = key_len;
        tmpl.set = tmpl.wanted = true;
}

bool spare_wanted(void) { return tmpl.set && tmpl.wanted && spare.pid == 0 && !pi.shutting_down; }

/* /bin/sh is dash or busybox (see above): the target of its symlinks, by name. */
static bool sh_takes_spare(void) {
        _cleanup_free_ char *real = realpath("/bin/sh", NULL);
        const char *base = real ? strrchr(real, '/') : NULL;
        return base && (!strcmp(base, "/dash") || !strcmp(base, "/busybox"));
}

/* Starts the spare from the template. fork, not vfork: the agent goes on at once instead
 * of waiting for the shell's execve (the whole point is that nobody waits for it). */
void spare_start(void) {
        if (!spare_wanted())
                return;
        if (!sh_takes_spare()) {
                tmpl.wanted = false;
                return;
        }
        int in[2] = { -1, -1 }, out[2] = { -1, -1 }, err[2] = { -1, -1 };
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
                goto fail;
        char *argv[] = { "/bin/sh", "-s", NULL };
        struct child_spec cs = tmpl.cs;
        cs.argv = argv;
        pid_t pid = fork();
        if (pid < 0)
                goto fail;
        if (pid == 0)
                child_run(&cs, in[0], out[1], err[1], NULL, -1);
        close(in[0]);
        close(out[1]);
        close(err[1]);
        set_nonblock(in[1]);
        spare = (struct spare) { .pid = pid, .fd_script = in[1], .fd_out = out[0], .fd_err = err[0] };
        tmpl.wanted = false; /* until this one is taken */
        return;
fail:
        tmpl.wanted = false;
        int *all[] = { &in[0], &in[1], &out[0], &out[1], &err[0], &err[1] };
        for (size_t i = 0; i < ELEMENTSOF(all); i++)
                if (*all[i] >= 0)
                        close(*all[i]);
}

/* proc_reap saw pid die: when it is the spare, it died unused; not replaced until a command
 * starts the cold way with this template again. */
static bool spare_reaped(pid_t pid) {
        if (spare.pid <= 0 || pid != spare.pid)
                return false;
        spare.pid = 0; /* reaped: nothing to kill */
        spare_drop();
        return true;
}

/* SPAWN /bin/sh -c SCRIPT by the spare when it was made for exactly this environment,
 * directory and user (key: their spare_key()). True when the process is started (SPAWNED
 * sent). */
static bool spare_take(struct conn *c, struct chan *ch, struct proc *p, const struct pj_agent_msg *m, const char *key,
                       size_t key_len) {
        if (spare.pid <= 0 || key_len != tmpl.key_len || memcmp(key, tmpl.key, key_len))
                return false;
        /* <= PI_SPARE_MAX_SCRIPT bytes into an empty pipe: one write, never blocks */
        const char *script = m->argv[2];
        size_t n = strlen(script);
        if (n && write(spare.fd_script, script, n) != (ssize_t) n) {
                spare_drop(); /* it died (EPIPE) or cannot be fed: the cold way */
                return false;
        }
        close(spare.fd_script);
        proc_started(c, ch, p, m, spare.pid, false, -1, spare.fd_out, spare.fd_err);
        spare = (struct spare) { .fd_script = -1, .fd_out = -1, .fd_err = -1 };
        tmpl.wanted = true;
        return true;
}

void spare_stop(void) {
        spare_drop();
        tmpl_clear();
}

void proc_spawn(struct conn *c, const struct pj_agent_msg *m) {
        bool pty = PJ_AGENT_HAS(&m->f, PJ_AGENT_T_ROWS);
        int pin[2] = { -1, -1 }, pout[2] = { -1, -1 }, perr[2] = { -1, -1 }, ep[2] = { -1, -1 }, master = -1;
        char pts[128] = "";
        _cleanup_free_ char **envp = NULL;
        int r = 0;

        if (pi.shutting_down)
                return conn_send_error(c, m->id, ESHUTDOWN, "The sandbox is shutting down.");
        pi.last_busy_ms = pi_now_ms();
        struct chan *ch = chan_new(c, m->id, CH_PROC);
        if (!ch)
                return;
        struct proc *p = proc_slot();
        if (!p) {
                chan_close(c, ch);
                return conn_send_error(c, m->id, EAGAIN, "%d processes are running or watched, the limit.", PJ_AGENT_MAX_PROCS);
        }
        envp = child_env(m);
        struct child_spec cs = child_spec_of(m, envp);
        _cleanup_free_ char *key = NULL;
        size_t key_len = 0;
        if (spare_eligible(m)) {
                key = spare_key(&cs, &key_len);
                if (spare_take(c, ch, p, m, key, key_len))
                        return;
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
        pid_t pid = child_start(&cs, pin[0], pout[1], perr[1], pty ? pts : NULL, ep[1]);
        if (pid < 0)
                goto fail;
        close(ep[1]);
        ep[1] = -1;
        if (pin[0] >= 0)
                close(pin[0]);
        if (pout[1] >= 0)
                close(pout[1]);
        if (perr[1] >= 0)
                close(perr[1]);
        struct child_fail cf = { 0 };
        ssize_t n;
        while ((n = read(ep[0], &cf, sizeof(cf))) < 0 && errno == EINTR)
                ;
        close(ep[0]);
        if (n == sizeof(cf)) {
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
                if (cf.step == CHILD_STEP_CWD)
                        return conn_send_error_path(c, m->id, cf.err, m->f.cwd, "Cannot use working directory %s: %s.",
                                                    m->f.cwd, strerror(cf.err));
                return conn_send_error(c, m->id, cf.err, "Cannot start %s: %s.", m->argv[0], strerror(cf.err));
        }
        if (pty) {
                pout[0] = master;
                pin[1] = fcntl(master, F_DUPFD_CLOEXEC, 3);
        }
        proc_started(c, ch, p, m, pid, pty, pin[1], pout[0], perr[0]);
        if (key)
                spare_remember(&cs, TAKE_PTR(key), key_len);
        return;
fail:
        r = errno;
        int *all[] = { &pin[0], &pin[1], &pout[0], &pout[1], &perr[0], &perr[1], &ep[0], &ep[1], &master };
        for (size_t i = 0; i < ELEMENTSOF(all); i++)
                if (*all[i] >= 0)
                        close(*all[i]);
        chan_close(c, ch);
        conn_send_error(c, m->id, r, "Cannot start %s: %s.", m->argv[0], strerror(r));
}

/* The process on channel id of c, or NULL with an ERROR sent. */
/* The process a STDIN/STDIN_CLOSE/SIGNAL/RESIZE is for: by pid when the frame names one (any
 * connection may; the reply is then OK or ERROR on the frame's id), else the process of the
 * frame's channel on this connection. NULL with an ERROR sent. */
struct proc *proc_of_request(struct conn *c, const struct pj_agent_msg *m) {
        if (!PJ_AGENT_HAS(&m->f, PJ_AGENT_T_PID))
                return proc_of_chan(c, m->id);
        struct proc *p = proc_by_pid((pid_t) m->f.pid);
        if (!p)
                conn_send_error(c, m->id, ESRCH, "No process %u is known.", m->f.pid);
        return p;
}

struct proc *proc_of_chan(struct conn *c, uint32_t id) {
        struct chan *ch = chan_find(c, id);
        if (!ch || ch->kind != CH_PROC || !ch->proc || ch->proc->conn != c) {
                conn_send_error(c, id, EBADF, "Channel %u has no process on this connection.", id);
                return NULL;
        }
        return ch->proc;
}

void proc_attach(struct conn *c, const struct pj_agent_msg *m) {
        struct proc *p = proc_by_pid((pid_t) m->f.pid);
        if (!p)
                return conn_send_error(c, m->id, ESRCH, "No process %u is known.", m->f.pid);
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
        conn_send_simple(c, PJ_AGENT_OK, m->id);
        for (struct chunk *k = p->ring_head; k; k = k->next)
                conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_OUTPUT, .id = m->id, .f.stream = k->stream,
                                                     .data = k->data, .data_len = k->len });
        if (p->finished)
                proc_send_exit(p);
}

void proc_list(struct conn *c, const struct pj_agent_msg *m) {
        struct pj_agent_fields e[PJ_AGENT_MAX_PROCS];
        size_t n = 0;
        for (size_t i = 0; i < PJ_AGENT_MAX_PROCS; i++) {
                struct proc *p = &pi.procs[i];
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
        conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_PROCS, .id = m->id, .entries = e, .n_entries = n });
}

/* The parent pid in /proc/PID/stat: the fields after the LAST ")" (a name may hold ")"). */
static pid_t stat_ppid(pid_t pid) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return -1;
        buf[n] = 0;
        char *e = strrchr(buf, ')');
        int ppid;
        char state;
        if (!e || sscanf(e + 1, " %c %d", &state, &ppid) != 2)
                return -1;
        return (pid_t) ppid;
}

/* SIGKILL for p's whole tree: its process group, and every descendant that left it (setsid)
 * while still a descendant. Each one found is stopped first so none forks away meanwhile;
 * the list is bounded (a fork bomb larger than it loses the rest to the group kill and
 * the pids limit). */
#define KILL_TREE_MAX 4096
static void kill_tree(pid_t root) {
        static pid_t list[KILL_TREE_MAX];
        size_t n = 0;
        list[n++] = root;
        kill(root, SIGSTOP);
        for (bool more = true; more && n < KILL_TREE_MAX;) {
                more = false;
                DIR *d = opendir("/proc");
                if (!d)
                        break;
                struct dirent *de;
                while ((de = readdir(d)) && n < KILL_TREE_MAX) {
                        char *end;
                        long v = strtol(de->d_name, &end, 10);
                        if (*end || v <= 1)
                                continue;
                        pid_t pid = (pid_t) v, ppid = stat_ppid(pid);
                        bool parent_in = false, in = false;
                        for (size_t i = 0; i < n && !(parent_in && in); i++) {
                                parent_in |= list[i] == ppid;
                                in |= list[i] == pid;
                        }
                        if (parent_in && !in) {
                                list[n++] = pid;
                                kill(pid, SIGSTOP);
                                more = true;
                        }
                }
                closedir(d);
        }
        kill(-root, SIGKILL);
        for (size_t i = 0; i < n; i++)
                kill(list[i], SIGKILL);
}

void proc_signal_group(struct proc *p, int sig) {
        if (p->reaped)
                return;
        if (sig == SIGKILL) {
                kill_tree(p->pid);
                return;
        }
        if (kill(-p->pid, sig) < 0)
                kill(p->pid, sig);
}

