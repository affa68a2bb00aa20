/* agenttest.c — see agenttest.h. */
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agenttest.h"
#include "amqptest.h"
#include "testlib.h"

void agenttest_need(bool registry) {
        if (access(test_build_path("nodeagent"), X_OK) != 0)
                TEST_SKIP("nodeagent is not built");
        amqptest_need_broker();
        if (registry && !test_port_open(5000))
                TEST_SKIP("no registry on 127.0.0.1:5000 (tests/env/services.sh start registry)");
}

void agenttest_names(const char *name, int n, char node_id[40], char exchange[64], char conf[512], char log[512]) {
        snprintf(node_id, 40, "%s-%d", name, n);
        snprintf(exchange, 64, "paddock.%s-%d", name, n);
        snprintf(conf, 512, "%s/nodeagent.conf", test_tmpdir());
        snprintf(log, 512, "%s/nodeagent.log", test_tmpdir());
}

bool test_log_has(const char *path, off_t from, const char *what, int timeout_s) {
        for (int i = 0; i <= timeout_s * 20; i++) {
                FILE *lf = fopen(path, "r");
                if (lf) {
                        fseek(lf, from, SEEK_SET);
                        static char buf[1 << 20];
                        size_t n = fread(buf, 1, sizeof(buf) - 1, lf);
                        buf[n] = 0;
                        fclose(lf);
                        if (strstr(buf, what))
                                return true;
                }
                usleep(50000);
        }
        return false;
}

void agenttest_write_conf(const char *path, const char *node_id, const char *exchange, const char *nomad_url,
                          const char *sections_fmt, ...) {
        FILE *f = fopen(path, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\nlog_level = debug\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672/\nexchange = %s\n",
                node_id, exchange);
        va_list ap;
        va_start(ap, sections_fmt);
        vfprintf(f, sections_fmt, ap);
        va_end(ap);
        if (nomad_url)
                fprintf(f, "[nomad]\naddress = %s\n", nomad_url);
        ASSERT_EQ(fclose(f), 0);
}

off_t test_log_end(const char *path) {
        struct stat st;
        return stat(path, &st) == 0 ? st.st_size : 0;
}

pid_t agenttest_start(const char *conf, const char *log, const char *ready) {
        int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        ASSERT_TRUE(logfd >= 0);
        off_t from = lseek(logfd, 0, SEEK_END);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                dup2(logfd, 1);
                dup2(logfd, 2);
                execl(test_build_path("nodeagent"), "nodeagent", "-d", "-f", conf, (char *) NULL);
                _exit(127);
        }
        close(logfd);
        if (ready && !test_log_has(log, from, ready, 10))
                test_fail(__FILE__, __LINE__, "nodeagent did not log \"%s\" within 10 s; see %s", ready, log);
        return pid;
}

void agenttest_kill(pid_t *pid) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
}
