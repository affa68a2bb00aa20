/* runsc.c — see runsc.h. */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "runsc.h"
#include "strutil.h"

#define STDERR_KEEP 2048

static bool abs_ok(const char *p) {
        return p && p[0] == '/' && !strstr(p, "/../") && !endswith(p, "/..") && strlen(p) < 1024;
}

int runsc_knows(const char *root, const char *id) {
        if (!abs_ok(root) || !hex_exactly(id, 64))
                return -EINVAL;
        /* runsc's state file for a container of a sandbox: <id>_sandbox:<id>.state (the first
         * container of a sandbox is the sandbox; Docker starts one container per sandbox) */
        _cleanup_free_ char *p = xasprintf("%s/%s_sandbox:%s.state", root, id, id);
        struct stat st;
        return lstat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The last non-empty line of what runsc wrote to stderr, made printable. */
static void last_line(char *buf, size_t n, char *out, size_t outlen) {
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
                n--;
        size_t s = n;
        while (s && buf[s - 1] != '\n')
                s--;
        size_t k = 0;
        for (size_t i = s; i < n && k + 1 < outlen; i++)
                out[k++] = (unsigned char) buf[i] >= 0x20 && (unsigned char) buf[i] < 0x7f ? buf[i] : '?';
        out[k] = 0;
}

int runsc_checkpoint(const char *runsc, const char *root, const char *id, const char *image_dir, int64_t timeout_ms,
                     struct err *err) {
        if (!abs_ok(runsc) || !abs_ok(root) || !abs_ok(image_dir) || !hex_exactly(id, 64))
                return err_set(err, -EINVAL, "runsc checkpoint: a path is not absolute or the container id is not 64 hex digits");
        _cleanup_free_ char *root_arg = xasprintf("--root=%s", root), *img_arg = xasprintf("--image-path=%s", image_dir);
        char *argv[] = { (char *) runsc, root_arg, (char *) "checkpoint", (char *) "--compression=none",
                         (char *) "--exclude-committed-zero-pages", img_arg, (char *) id, NULL };
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) < 0)
                return err_set(err, -errno, "runsc checkpoint: pipe: %m");
        pid_t pid = fork();
        if (pid < 0) {
                int e = -errno;
                close(pfd[0]);
                close(pfd[1]);
                return err_set(err, e, "runsc checkpoint: fork: %s", strerror(-e));
        }
        if (pid == 0) {
                /* only async-signal-safe calls: the caller may have threads */
                int nul = open("/dev/null", O_RDWR);
                if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(pfd[1], 2) < 0)
                        _exit(127);
                close_range(3, ~0U, 0);
                execv(runsc, argv);
                _exit(127);
        }
        close(pfd[1]);
        char buf[STDERR_KEEP];
        size_t have = 0;
        int64_t deadline = mono_ms() + timeout_ms;
        bool killed = false;
        for (;;) {
                int64_t left = deadline - mono_ms();
                if (left <= 0) {
                        kill(pid, SIGKILL);
                        killed = true;
                        break;
                }
                struct pollfd p = { .fd = pfd[0], .events = POLLIN };
                int pr = poll(&p, 1, (int) (left > 1000 ? 1000 : left));
                if (pr < 0 && errno != EINTR)
                        break;
                if (pr <= 0)
                        continue;
                char tmp[512];
                ssize_t n = read(pfd[0], tmp, sizeof(tmp));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                /* keep the tail (tmp is smaller than buf): the reason is at the end */
                if (have + (size_t) n > sizeof(buf)) {
                        size_t drop = have + (size_t) n - sizeof(buf);
                        memmove(buf, buf + drop, have - drop);
                        have -= drop;
                }
                memcpy(buf + have, tmp, (size_t) n);
                have += (size_t) n;
        }
        close(pfd[0]);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        if (killed)
                return err_set(err, -ETIMEDOUT, "runsc checkpoint did not finish in %lld ms (killed)", (long long) timeout_ms);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
        char why[512];
        last_line(buf, have, why, sizeof(why));
        if (WIFEXITED(st) && WEXITSTATUS(st) == 127 && !why[0])
                return err_set(err, -ENOENT, "runsc checkpoint: cannot run %s", runsc);
        return err_set(err, -EIO, "runsc checkpoint failed (%s %d): %s", WIFEXITED(st) ? "exit" : "signal",
                       WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), why[0] ? why : "no message");
}
