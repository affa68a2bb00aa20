/* child.c — a new process of paddock-init, from fork (or vfork) to execve: its session or
 * process group, stdio, working directory, user and groups, the PATH lookup execvp would do,
 * and its environment. Uses nothing of the agent's state: proc.c calls it. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

/* "PATH=" of the request's environment, or the default execvp uses. */
static const char *env_path(char **env) {
        for (char **e = env; e && *e; e++)
                if (!strncmp(*e, "PATH=", 5))
                        return *e + 5;
        return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
}

/* In the child: execve argv[0], looked up in PATH like execvp (without its /bin/sh
 * fallback for ENOEXEC). Returns the errno to report. */
static int child_exec(char **argv, char **envp) {
        if (strchr(argv[0], '/')) {
                execve(argv[0], argv, envp);
                return errno;
        }
        const char *path = env_path(envp);
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

struct child_spec child_spec_of(const struct pj_agent_msg *m, char **envp) {
        return (struct child_spec) { .argv = m->argv, .envp = envp, .cwd = m->f.cwd,
                                     .has_uid = PJ_AGENT_HAS(&m->f, PJ_AGENT_T_UID), .has_gid = PJ_AGENT_HAS(&m->f, PJ_AGENT_T_GID),
                                     .uid = m->f.uid, .gid = m->f.gid };
}

_noreturn_ void child_run(const struct child_spec *cs, int in, int out, int err, const char *pts, int errpipe) {
        /* The agent blocks the signals its signalfd reads and ignores SIGPIPE; every other
         * disposition it reset to the default at start (handled signals are reset by execve
         * anyway). Few syscalls here: each one delays the spawn (see mark_inherited_cloexec). */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
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
        int step = CHILD_STEP_SETUP;
        if (!e && cs->cwd && chdir(cs->cwd) < 0) {
                e = errno;
                step = CHILD_STEP_CWD;
        }
        if (!e && (cs->has_uid || cs->has_gid) && setgroups(0, NULL) < 0 && errno != EPERM)
                e = errno;
        if (!e && cs->has_gid && setgid(cs->gid) < 0)
                e = errno;
        if (!e && cs->has_uid && setuid(cs->uid) < 0)
                e = errno;
        if (!e) {
                /* No fd loop: inherited ones were marked close-on-exec at start, ours are. */
                e = child_exec(cs->argv, cs->envp);
                step = CHILD_STEP_EXEC;
        }
        struct child_fail cf = { step, e };
        if (errpipe >= 0) {
                ssize_t _unused_ w = write(errpipe, &cf, sizeof(cf));
        }
        _exit(127);
}

/* vfork: no copy of the agent's address space for a child that only sets itself up and
 * execs (under gVisor a fork's copy is most of a spawn's cost). The child runs on this
 * function's stack and never returns here (child_run execs or _exits); the parent resumes once
 * it has. Kept apart so no local of the caller can be clobbered. */
__attribute__((noinline)) pid_t child_start(const struct child_spec *cs, int in, int out, int err, const char *pts,
                                            int errpipe) {
        pid_t pid = vfork();
        if (pid == 0)
                child_run(cs, in, out, err, pts, errpipe);
        return pid;
}

/* The environment of a new process: the request's, or (base_env) the agent's own with the
 * request's entries layered over it (same name: the request wins). The array is the
 * caller's to free; the strings belong to the message and to environ. */
char **child_env(const struct pj_agent_msg *m) {
        size_t n_base = 0;
        if (m->f.base_env)
                while (environ[n_base])
                        n_base++;
        char **envp = xnew0(char *, n_base + m->n_env + 1);
        size_t n = 0;
        for (size_t i = 0; i < n_base; i++) {
                const char *eq = strchr(environ[i], '=');
                size_t klen = eq ? (size_t) (eq - environ[i]) + 1 : strlen(environ[i]);
                bool over = false;
                for (size_t j = 0; j < m->n_env && !over; j++)
                        over = !strncmp(m->env[j], environ[i], klen);
                if (!over && strncmp(environ[i], "PADDOCK_INIT_", 13))
                        envp[n++] = environ[i];
        }
        for (size_t j = 0; j < m->n_env; j++)
                envp[n++] = m->env[j];
        envp[n] = NULL;
        return envp;
}
