/* regtest.c — see regtest.h. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "regtest.h"
#include "testlib.h"

static pid_t reg_pid;

void regtest_stop(void) {
        test_stop_child(&reg_pid);
}

static void regtest_stop_at_exit(void *ud) {
        (void) ud;
        regtest_stop();
}

void regtest_start(int port, const char *htpasswd, char reg[32]) {
        char conf[512], dir[512], htp[512], auth[700] = "";
        snprintf(reg, 32, "127.0.0.1:%d", port);
        snprintf(dir, sizeof(dir), "%s/registry", test_tmpdir());
        snprintf(conf, sizeof(conf), "%s/registry.yml", test_tmpdir());
        if (htpasswd) {
                snprintf(htp, sizeof(htp), "%s/registry.htpasswd", test_tmpdir());
                FILE *h = fopen(htp, "w");
                ASSERT_NOT_NULL(h);
                fputs(htpasswd, h);
                fclose(h);
                snprintf(auth, sizeof(auth), "auth: {htpasswd: {realm: paddock-test, path: %s}}\n", htp);
        }
        FILE *f = fopen(conf, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "version: 0.1\nlog: {level: warn}\nstorage: {filesystem: {rootdirectory: %s}, delete: {enabled: true}}\n"
                   "http: {addr: %s}\n%s", dir, reg, auth);
        fclose(f);
        reg_pid = fork();
        ASSERT_TRUE(reg_pid >= 0);
        if (reg_pid == 0) {
                int null = open("/dev/null", O_WRONLY);
                dup2(null, 1);
                dup2(null, 2);
                execlp("docker-registry", "docker-registry", "serve", conf, (char *) NULL);
                _exit(127);
        }
        test_on_exit(regtest_stop_at_exit, NULL);
        bool up = false;
        for (int i = 0; i < 100 && !(up = test_port_open(port)); i++)
                usleep(100000);
        if (!up)
                TEST_SKIP("could not start a registry of our own (docker-registry)");
}

char *regtest_htpasswd(const char *user, const char *password) {
        char prog[512], want[128];
        snprintf(prog, sizeof(prog), "import crypt; print('%s:' + crypt.crypt('%s', crypt.mksalt(crypt.METHOD_BLOWFISH)))",
                 user, password);
        snprintf(want, sizeof(want), "%s:$2", user);
        char *argv[] = { "python3", "-c", prog, NULL };
        char *line = NULL;
        if (test_run_capture(argv, &line, 4096) != 0 || !line || !strstr(line, want)) {
                free(line);
                TEST_SKIP("cannot make a bcrypt htpasswd line (python3 crypt)");
        }
        return line;
}
