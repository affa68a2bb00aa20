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
                "[controld]\nuser =\n[store]\npath = %s/controld.db\n"
                "[scheduler]\ndriver = docker\n"
                "[docker]\n%s\n"
                "[region \"local\"]\nid = 6a06df21cc6bef51342e199e\n"
                "[template \"busybox\"]\nimage = paddock/busybox:local\n",
                dir, docker_section);
        fclose(f);
        const char *argv[] = { "controld", "-d", "-f", conf, NULL };
        pid_t p = test_spawn_logged(test_build_path("controld"), argv, log);
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

/* Runs controld with this [docker] section, asserts that it exits non-zero within 20 s, and
 * returns its log. */
static char *refused_log(const char *docker_section) {
        pid_t pid = 0;
        _cleanup_free_ char *log = NULL;
        int rc = run_controld(docker_section, 20, &pid, &log);
        if (rc < 0)
                stop_pid(pid);
        char *text = slurp(log);
        ASSERT_TRUE(rc > 0);
        return text;
}

TEST_FULL(controld_refuses_runtimes_that_are_not_gvisor, 90) {
        need_docker();
        pid_t pid = 0;
        _cleanup_free_ char *log = NULL, *text = NULL;

        /* runc is known to Docker but is not a sandbox. */
        text = refused_log("runtime = runc\nruntime_network = runc\n");
        ASSERT_CONTAINS(text, "runtime = runc runs 'runc', which is not gVisor (runsc)");
        ASSERT_CONTAINS(text, "allow_unsandboxed");
        free(text), text = NULL;

        /* A gVisor deny_all runtime but an unsandboxed network runtime is refused as well. */
        text = refused_log("runtime = runsc\nruntime_network = runc\n");
        ASSERT_CONTAINS(text, "runtime_network = runc runs 'runc', which is not gVisor");
        free(text), text = NULL;

        /* A name Docker does not know. */
        text = refused_log("runtime = runsc-nonexistent\n");
        ASSERT_CONTAINS(text, "runtime = runsc-nonexistent: Docker knows no runtime of that name");
        free(text), text = NULL;

        /* Tests may opt out, and the log says what that means. */
        int rc = run_controld("runtime = runc\nruntime_network = runc\nallow_unsandboxed = true\n", 3, &pid, &log);
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

/* ---- limits inside a real sandbox ---- */

/* Full container id of a sandbox (docker CLI, fixed argv: the id is 24 hex characters). */
static void container_id(const char *sandbox_id, char ret[80]) {
        ASSERT_TRUE(hexid_valid(sandbox_id));
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "docker inspect -f '{{.Id}}' paddock-%s", sandbox_id);
        FILE *p = popen(cmd, "r");
        ASSERT_NOT_NULL(p);
        ret[0] = 0;
        if (!fgets(ret, 80, p))
                ret[0] = 0;
        pclose(p);
        ret[strcspn(ret, "\n")] = 0;
        ASSERT_EQ(strlen(ret), 64);
}

/* CPU time the container's cgroup has used, in ns (cgroup v1 cpuacct or v2 cpu.stat). */
static int64_t cgroup_cpu_ns(const char *cid) {
        char path[400];
        FILE *f;
        snprintf(path, sizeof(path), "/sys/fs/cgroup/cpuacct/docker/%s/cpuacct.usage", cid);
        if ((f = fopen(path, "r"))) {
                long long v = -1;
                ASSERT_EQ(fscanf(f, "%lld", &v), 1);
                fclose(f);
                return v;
        }
        const char *v2[] = { "/sys/fs/cgroup/docker/%s/cpu.stat", "/sys/fs/cgroup/system.slice/docker-%s.scope/cpu.stat" };
        for (size_t i = 0; i < 2; i++) {
                snprintf(path, sizeof(path), v2[i], cid);
                if (!(f = fopen(path, "r")))
                        continue;
                char k[64];
                long long v;
                while (fscanf(f, "%63s %lld", k, &v) == 2)
                        if (!strcmp(k, "usage_usec")) {
                                fclose(f);
                                return v * 1000;
                        }
                fclose(f);
        }
        test_fail(__FILE__, __LINE__, "no cgroup CPU accounting found for container %s", cid);
}

static int64_t mono_ms_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

TEST_FULL(cpu_spec_is_a_hard_cap, 120) {
        need_docker();
        struct ctld c;
        char id[25], cid[80];
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "cora", NULL, NULL);
        ctld_create(&c, key, "{\"template\":\"python-3.11\",\"specs\":{\"cpu\":500,\"memory\":256}}", id);
        container_id(id, cid);

        /* Two busy loops for 8 s: uncapped they would take two cores (at least one on a busy host). */
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                struct hres r;
                ctld_exec(&c, key, id, "for i in 1 2; do timeout 8 sh -c 'while :; do :; done' & done; wait", 60, &r);
                _exit(r.status == 200 ? 0 : 1);
        }
        usleep(2500 * 1000);   /* let the loops start and the quota settle */
        int64_t t0 = mono_ms_now(), a = cgroup_cpu_ns(cid);
        usleep(4000 * 1000);
        int64_t b = cgroup_cpu_ns(cid), t1 = mono_ms_now();
        int st;
        ASSERT_EQ(waitpid(p, &st, 0), p);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        long long millicores = (b - a) / ((t1 - t0) * 1000);
        fprintf(stderr, "  busy loops in a 500-millicore sandbox used %lld millicores\n", millicores);
        ASSERT_LE(millicores, 650);
        ASSERT_GE(millicores, 300);   /* the loops did run */
        ctld_stop(&c);
}

/* One value of the container's CPU cgroup: file_v1 under cgroup v1's cpu hierarchy, else
 * file_v2 in the unified one (key "" reads the file's number, else that key's line). */
static long long cgroup_cpu_value(const char *cid, const char *file_v1, const char *file_v2, const char *key) {
        const char *dirs[] = { "/sys/fs/cgroup/cpu/docker/%s", "/sys/fs/cgroup/cpu,cpuacct/docker/%s",
                               "/sys/fs/cgroup/docker/%s", "/sys/fs/cgroup/system.slice/docker-%s.scope" };
        for (size_t i = 0; i < ELEMENTSOF(dirs); i++) {
                char dir[300], path[400];
                snprintf(dir, sizeof(dir), dirs[i], cid);
                snprintf(path, sizeof(path), "%s/%s", dir, i < 2 ? file_v1 : file_v2);
                _cleanup_fclose_ FILE *f = fopen(path, "r");
                if (!f)
                        continue;
                char k[64];
                long long v = -1;
                if (!*key) {
                        ASSERT_EQ(fscanf(f, "%lld", &v), 1);
                        return v;
                }
                while (fscanf(f, "%63s %lld", k, &v) == 2)
                        if (!strcmp(k, key))
                                return v;
                test_fail(__FILE__, __LINE__, "%s has no %s", path, key);
        }
        test_fail(__FILE__, __LINE__, "no CPU cgroup found for container %s", cid);
}

/* A sandbox idle for a while may spend its banked quota at once (CFS burst): its first
 * command after a pause is not throttled mid-way. On by default (one period's quota);
 * `[docker] cpu_burst = 0` turns it off, and then the same command finds no bank. */
TEST_FULL(an_idle_sandbox_may_burst_above_its_cpu_quota, 150) {
        need_docker();
        for (int on = 1; on >= 0; on--) {
                struct ctld c;
                char id[25], cid[80];
                ctld_start(&c, NULL, on ? NULL : "[docker]\ncpu_burst = 0\n");
                _cleanup_free_ char *key = ctld_account_key(&c, "bea", NULL, NULL);
                ctld_create(&c, key, "{\"template\":\"python-3.11\",\"specs\":{\"cpu\":500,\"memory\":256}}", id);
                container_id(id, cid);
                ASSERT_EQ(cgroup_cpu_value(cid, "cpu.cfs_burst_us", "cpu.max.burst", ""), on ? 50000 : 0);
                usleep(300 * 1000);   /* idle: the bank fills */
                struct hres r;
                /* Two busy loops use the 50 ms quota of a period in 25 ms; the rest is the bank. */
                ctld_exec(&c, key, id, "for i in 1 2; do timeout 0.5 sh -c 'while :; do :; done' & done; wait", 30, &r);
                ASSERT_EQ(r.status, 200);
                hres_done(&r);
                long long bursts = cgroup_cpu_value(cid, "cpu.stat", "cpu.stat", "nr_bursts");
                fprintf(stderr, "  cpu_burst %s: %lld bursts\n", on ? "on" : "off", bursts);
                if (on)
                        ASSERT_GE(bursts, 1);
                else
                        ASSERT_EQ(bursts, 0);
                ctld_stop(&c);
        }
}

TEST_FULL(out_of_memory_is_reported, 150) {
        need_docker();
        struct ctld c;
        char id[25];
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "olga", NULL, NULL);
        ctld_create(&c, key, "{\"template\":\"python-3.11\",\"specs\":{\"memory\":128}}", id);

        /* Within the limit: an ordinary answer. */
        struct hres r;
        ctld_exec(&c, key, id, "python3 -c 'a = bytearray(32 << 20); print(len(a) >> 20)'", 60, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "32\n");
        ASSERT_NULL(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "oom_killed"));
        hres_done(&r);

        /* 1 GiB touched page by page, in a 128 MB sandbox. */
        ctld_exec(&c, key, id,
                 "python3 -c 'a = bytearray(1 << 30)\nfor i in range(0, len(a), 4096): a[i] = 1\nprint(\"survived\")'", 60, &r);
        if (r.status != 200)
                test_fail(__FILE__, __LINE__, "exec -> %ld %.400s", r.status, r.body);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(r.json, "data");
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "oom_killed")))
                test_fail(__FILE__, __LINE__, "no oom_killed in %.600s", r.body);
        ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(d, "exit_code")->valueint, 137);
        ASSERT_CONTAINS(hres_message(&r), "ran out of memory");
        hres_done(&r);

        /* And the log (the journal under systemd) says so, for this sandbox. */
        _cleanup_free_ char *text = slurp(c.log);
        ASSERT_CONTAINS(text, "exec killed: the sandbox ran out of memory (limit 128 MB)");
        char want[64];
        snprintf(want, sizeof(want), "SANDBOX_ID=%s", id);
        ASSERT_CONTAINS(strstr(text, "ran out of memory"), want);
        ctld_stop(&c);
}
