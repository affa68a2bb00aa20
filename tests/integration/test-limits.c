/* Isolation and limits as a user (and an operator) sees them, on real dockerd + gVisor:
 * controld refuses runtimes that are not gVisor unless told otherwise (tests only). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"

static void need_docker(void) {
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering on /var/run/docker.sock (start it with tests/env/services.sh start docker)");
}

static char *slurp(const char *path) {
        FILE *f = fopen(path, "r");
        if (!f)
                return xstrdup("");
        char *buf = xnew0(char, 65536);
        size_t n = fread(buf, 1, 65535, f);
        buf[n] = 0;
        fclose(f);
        return buf;
}

/* Runs controld -d on a minimal config with the given [docker] section; returns its exit status
 * when it exits within wait_s, or -1 (then it is still running and *ret_pid is set). The log
 * goes to *ret_log (xmalloc'd path). */
static int run_controld(const char *docker_section, int wait_s, pid_t *ret_pid, char **ret_log) {
        char dir[256];
        snprintf(dir, sizeof(dir), "%s/lim-%d-%ld", test_tmpdir(), getpid(), (long) random());
        ASSERT_TRUE(mkdir(dir, 0700) == 0);
        _cleanup_free_ char *conf = xasprintf("%s/controld.conf", dir);
        char *log = xasprintf("%s/controld.log", dir);
        FILE *f = fopen(conf, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f,
                "[server]\nlisten = 127.0.0.1:0\n"
                "[store]\npath = %s/controld.db\n"
                "[scheduler]\ndriver = docker\n"
                "[docker]\n%s\n"
                "[region \"local\"]\nid = 6a06df21cc6bef51342e199e\n"
                "[template \"busybox\"]\nimage = paddock/busybox:local\n",
                dir, docker_section);
        fclose(f);
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
                dup2(fd, STDERR_FILENO);
                dup2(fd, STDOUT_FILENO);
                execl(test_build_path("controld"), "controld", "-d", "-f", conf, (char *) NULL);
                _exit(127);
        }
        *ret_log = log;
        for (int i = 0; i < wait_s * 10; i++) {
                int st;
                if (waitpid(p, &st, WNOHANG) == p)
                        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                usleep(100000);
        }
        *ret_pid = p;
        return -1;
}

static void stop_pid(pid_t p) {
        int st;
        kill(p, SIGTERM);
        for (int i = 0; i < 100; i++) {
                if (waitpid(p, &st, WNOHANG) == p)
                        return;
                usleep(100000);
        }
        kill(p, SIGKILL);
        waitpid(p, &st, 0);
}

TEST_FULL(controld_refuses_runtimes_that_are_not_gvisor, 90) {
        need_docker();
        pid_t pid = 0;
        _cleanup_free_ char *log = NULL, *text = NULL;

        /* runc is known to Docker but is not a sandbox. */
        int rc = run_controld("runtime = runc\nruntime_network = runc\n", 20, &pid, &log);
        if (rc < 0)
                stop_pid(pid);
        text = slurp(log);
        ASSERT_TRUE(rc > 0);
        ASSERT_CONTAINS(text, "runtime = runc runs 'runc', which is not gVisor (runsc)");
        ASSERT_CONTAINS(text, "allow_unsandboxed");
        free(log), log = NULL;
        free(text), text = NULL;

        /* A gVisor deny_all runtime but an unsandboxed network runtime is refused as well. */
        rc = run_controld("runtime = runsc\nruntime_network = runc\n", 20, &pid, &log);
        if (rc < 0)
                stop_pid(pid);
        text = slurp(log);
        ASSERT_TRUE(rc > 0);
        ASSERT_CONTAINS(text, "runtime_network = runc runs 'runc', which is not gVisor");
        free(log), log = NULL;
        free(text), text = NULL;

        /* A name Docker does not know. */
        rc = run_controld("runtime = runsc-nonexistent\n", 20, &pid, &log);
        if (rc < 0)
                stop_pid(pid);
        text = slurp(log);
        ASSERT_TRUE(rc > 0);
        ASSERT_CONTAINS(text, "runtime = runsc-nonexistent: Docker knows no runtime of that name");
        free(log), log = NULL;
        free(text), text = NULL;

        /* Tests may opt out, and the log says what that means. */
        rc = run_controld("runtime = runc\nruntime_network = runc\nallow_unsandboxed = true\n", 3, &pid, &log);
        ASSERT_EQ(rc, -1);
        stop_pid(pid);
        text = slurp(log);
        ASSERT_CONTAINS(text, "which is not gVisor: sandboxes are NOT isolated from the host");
        free(log), log = NULL;
        free(text), text = NULL;

        /* The defaults (runsc, runsc-net) are gVisor runtimes that services.sh registers. */
        rc = run_controld("", 3, &pid, &log);
        if (rc >= 0) {
                text = slurp(log);
                test_fail(__FILE__, __LINE__, "controld with the default runtimes exited %d: %.600s", rc, text);
        }
        stop_pid(pid);
}
