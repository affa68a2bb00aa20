/* make up / make down as a newcomer runs them: twice up, then down, nothing of ours left. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "testlib.h"

static char devdir[512], state[512];
static int port, preview_port, e2b_port;

static int run_script(const char *script, char **out) {
        char portstr[16];
        snprintf(portstr, sizeof(portstr), "%d", port);
        setenv("PADDOCK_PORT", portstr, 1);
        snprintf(portstr, sizeof(portstr), "%d", preview_port);
        setenv("PADDOCK_PREVIEW_PORT", portstr, 1);
        snprintf(portstr, sizeof(portstr), "%d", e2b_port);
        setenv("PADDOCK_E2B_PORT", portstr, 1);
        setenv("PADDOCK_DEV_DIR", devdir, 1);
        setenv("PADDOCK_STATE", state, 1);
        char *argv[] = { (char *) script, NULL };
        return test_run_capture(argv, out, 1 << 20);
}

static void down_hook(void *ud) {
        (void) ud;
        _cleanup_free_ char *out = NULL;
        run_script("tests/env/down.sh", &out);
}

static char *env_value(const char *key) {
        char path[600], line[512];
        snprintf(path, sizeof(path), "%s/env", devdir);
        FILE *f = fopen(path, "r");
        if (!f)
                return NULL;
        char *v = NULL;
        while (fgets(line, sizeof(line), f))
                if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == '=') {
                        line[strcspn(line, "\n")] = 0;
                        v = xstrdup(line + strlen(key) + 1);
                }
        fclose(f);
        return v;
}

/* Running (a zombie waiting for its reaper is not). */
static bool alive(int pid) {
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f)
                return false;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        char *e = strrchr(buf, ')');
        return e && e[1] == ' ' && e[2] != 'Z' && e[2] != 'X';
}

static int read_pid(const char *name) {
        char path[600];
        int pid = 0;
        snprintf(path, sizeof(path), "%s/%s.pid", devdir, name);
        FILE *f = fopen(path, "r");
        if (!f)
                return 0;
        if (fscanf(f, "%d", &pid) != 1)
                pid = 0;
        fclose(f);
        return pid > 0 && alive(pid) ? pid : 0;
}

/* An SDK example's persistent flow on make up's dev plan: create with a volume, write to the
 * workspace, pause, resume at once (the SDK's sequence), read it back, destroy. */
static void persistent_flow(struct ctld *c, const char *key, int round) {
        struct hres r;
        char id[25], path[96], body[160];
        http_req(c, "POST", "/sandboxes", key, "{\"template\":\"python-3.11\",\"persistent\":true,\"persistentDiskGB\":10}", &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "round %d: create: HTTP %ld: %.300s", round, r.status, r.body);
        snprintf(id, sizeof(id), "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        snprintf(body, sizeof(body), "{\"cmd\":\"echo round-%d > /workspace/r\"}", round);
        HTTP_EXPECT(c, "POST", path, key, body, 200);
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        HTTP_EXPECT(c, "POST", path, key, NULL, 200);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "paused");
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
        HTTP_EXPECT(c, "POST", path, key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(c, key, id, "ready", 90), "ready");
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        http_req(c, "POST", path, key, "{\"cmd\":\"cat /workspace/r\"}", &r);
        ASSERT_EQ(r.status, 200);
        char want[32];
        snprintf(want, sizeof(want), "round-%d\n", round);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), want);
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(c, "DELETE", path, key, NULL, 204);
}

/* Is the developer's own `make up` stack (build/dev) running? Its pid files name live daemons. */
static bool own_stack_running(void) {
        static const char *const files[] = { "controld.pid", "nodeagent.pid" };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                char rel[64];
                snprintf(rel, sizeof(rel), "dev/%s", files[i]);
                FILE *f = fopen(test_build_path(rel), "r");
                int pid = 0;
                if (!f)
                        continue;
                if (fscanf(f, "%d", &pid) != 1)
                        pid = 0;
                fclose(f);
                if (pid > 1 && kill(pid, 0) == 0)
                        return true;
        }
        return false;
}

TEST_FULL(make_up_twice_then_down_leaves_nothing, 600) {
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering");
        /* This test is a `make up` of its own: node `local`, its exchange and its firewall table
         * are the same names, which one host holds once */
        if (own_stack_running())
                TEST_SKIP("a `make up` stack runs (build/dev): this test's own would share its node id, queues and "
                          "firewall table; `make down` first");
        if (access(test_build_path("controld"), X_OK) != 0)
                TEST_SKIP("controld is not built");
        snprintf(devdir, sizeof(devdir), "%s/dev", test_tmpdir());
        snprintf(state, sizeof(state), "%s/state", test_tmpdir());
        struct ctld probe;
        ctld_start(&probe, NULL, NULL);   /* only to borrow a free port, then release it */
        port = probe.port;
        ctld_stop(&probe);
        preview_port = test_free_port();
        do
                e2b_port = test_free_port();
        while (e2b_port == preview_port);
        test_on_exit(down_hook, NULL);

        _cleanup_free_ char *out1 = NULL, *out2 = NULL, *out3 = NULL;
        ASSERT_EQ(run_script("tests/env/up.sh", &out1), 0);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
        ASSERT_CONTAINS(out1, url);
        ASSERT_CONTAINS(out1, "curl");
        ASSERT_CONTAINS(out1, "/exec");
        _cleanup_free_ char *key1 = env_value("PADDOCK_API_KEY");
        _cleanup_free_ char *envurl = env_value("PADDOCK_URL");
        ASSERT_NOT_NULL(key1);
        ASSERT_STREQ(envurl, url);
        ASSERT_CONTAINS(out1, key1);
        struct stat st;
        char envpath[600];
        snprintf(envpath, sizeof(envpath), "%s/env", devdir);
        ASSERT_EQ(stat(envpath, &st), 0);
        ASSERT_EQ(st.st_mode & 0777, 0600);

        /* E2B's API: an e2b_ key in the env file and in the printed export line, valid there */
        _cleanup_free_ char *e2b_key1 = env_value("E2B_API_KEY");
        ASSERT_NOT_NULL(e2b_key1);
        ASSERT_TRUE(strncmp(e2b_key1, "e2b_", 4) == 0);
        ASSERT_CONTAINS(out1, "export E2B_API_KEY=");
        ASSERT_CONTAINS(out1, e2b_key1);
        {
                _cleanup_free_ char *cmd = xasprintf("curl -s -o /dev/null -w '%%{http_code}' -H 'X-API-Key: %s' "
                                                     "http://127.0.0.1:%d/v2/sandboxes", e2b_key1, e2b_port);
                char *argv[] = { "bash", "-c", cmd, NULL };
                _cleanup_free_ char *res = NULL;
                ASSERT_EQ(test_run_capture(argv, &res, 1 << 12), 0);
                ASSERT_STREQ(res, "200");
        }

        /* The printed one-paste command works as printed. */
        {
                char *line = strstr(out1, "ID=$(curl");
                ASSERT_NOT_NULL(line);
                _cleanup_free_ char *cmd = xstrndup(line, strcspn(line, "\n"));
                char *argv[] = { "bash", "-c", cmd, NULL };
                _cleanup_free_ char *res = NULL;
                ASSERT_EQ(test_run_capture(argv, &res, 1 << 16), 0);
                ASSERT_CONTAINS(res, "sandbox ");
                ASSERT_CONTAINS(res, "\"stdout\":\"42\\n\"");
                char made[25] = "", del[96];
                ASSERT_EQ(sscanf(strstr(res, "sandbox "), "sandbox %24s", made), 1);
                struct ctld tmp = { .port = port };
                snprintf(tmp.url, sizeof(tmp.url), "http://127.0.0.1:%d", port);
                struct hres dr;
                snprintf(del, sizeof(del), "/sandboxes/%s", made);
                http_req(&tmp, "DELETE", del, key1, NULL, &dr);
                ASSERT_EQ(dr.status, 204);
                hres_done(&dr);
        }
        /* The printed key works against the printed URL: create, exec, destroy. */
        struct ctld c = { .port = port };
        snprintf(c.url, sizeof(c.url), "%s", url);
        struct hres r;
        http_req(&c, "POST", "/sandboxes", key1, "{\"template\":\"python-3.11\"}", &r);
        ASSERT_EQ(r.status, 201);
        char id[25], path[96];
        snprintf(id, sizeof(id), "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        http_req(&c, "POST", path, key1, "{\"cmd\":\"python3 -c \\\"print(6*7)\\\"\"}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "42\n");
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&c, "DELETE", path, key1, NULL, 204);

        /* The SDK examples' persistent flow, three times in a row: the volumes of destroyed
         * sandboxes stay, and the dev plan has room for them. */
        for (int round = 1; round <= 3; round++)
                persistent_flow(&c, key1, round);

        /* A node agent runs beside controld and confirms egress: a restricted sandbox is created. */
        int agent1 = read_pid("nodeagent"), ctl1 = read_pid("controld");
        ASSERT_TRUE(agent1 > 0);
        ASSERT_TRUE(ctl1 > 0);
        http_req(&c, "POST", "/sandboxes", key1, "{\"template\":\"debian-12\",\"egress\":{\"mode\":\"restricted\",\"allow\":[\"198.51.100.7\"]}}", &r);
        ASSERT_EQ(r.status, 201);
        char rid[25];
        snprintf(rid, sizeof(rid), "%s", hres_data_str(&r, "id"));
        hres_done(&r);

        /* Second `make up`: works, keeps the same key, leaves the running daemons and the
         * live sandbox alone. */
        ASSERT_EQ(run_script("tests/env/up.sh", &out2), 0);
        _cleanup_free_ char *key2 = env_value("PADDOCK_API_KEY");
        ASSERT_STREQ(key2, key1);
        _cleanup_free_ char *e2b_key2 = env_value("E2B_API_KEY");
        ASSERT_STREQ(e2b_key2, e2b_key1);
        HTTP_EXPECT(&c, "GET", "/sandboxes", key2, NULL, 200);
        ASSERT_EQ(read_pid("nodeagent"), agent1);
        ASSERT_EQ(read_pid("controld"), ctl1);
        snprintf(path, sizeof(path), "/sandboxes/%s", rid);
        http_req(&c, "GET", path, key2, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        hres_done(&r);

        /* The agent dies: `make up` starts only the agent again. */
        kill(agent1, SIGKILL);
        for (int i = 0; i < 50 && read_pid("nodeagent"); i++)
                usleep(100000);
        free(out2);
        out2 = NULL;
        ASSERT_EQ(run_script("tests/env/up.sh", &out2), 0);
        int agent2 = read_pid("nodeagent");
        ASSERT_TRUE(agent2 > 0 && agent2 != agent1);
        ASSERT_EQ(read_pid("controld"), ctl1);
        HTTP_EXPECT(&c, "DELETE", path, key2, NULL, 204);

        /* make up keeps a warm pool of 2 python-3.11 sandboxes. */
        char db[700], q[] = "SELECT id FROM pool_members WHERE state = 'ready'";
        snprintf(db, sizeof(db), "%s/controld/controld.db", devdir);
        _cleanup_free_ char *members = NULL;
        for (int i = 0; i < 1200; i++) {
                free(members);
                members = NULL;
                char *argv[] = { "sqlite3", db, q, NULL };
                ASSERT_EQ(test_run_capture(argv, &members, 4096), 0);
                if (members && strlen(members) == 2 * 25)
                        break;
                usleep(100 * 1000);
        }
        ASSERT_TRUE(members && strlen(members) == 2 * 25);

        /* `make down`: the daemon and its listener are gone, and so are the pool's members. */
        ASSERT_EQ(run_script("tests/env/down.sh", &out3), 0);
        ASSERT_CONTAINS(out3, "2 warm pool members removed");
        for (char *save = NULL, *mid = strtok_r(members, "\n", &save); mid; mid = strtok_r(NULL, "\n", &save)) {
                char name[64];
                snprintf(name, sizeof(name), "paddock-%s", mid);
                ASSERT_FALSE(docker_container_exists(name));
        }
        ASSERT_FALSE(test_port_open(port));
        char pidfile[600];
        snprintf(pidfile, sizeof(pidfile), "%s/controld.pid", devdir);
        ASSERT_TRUE(access(pidfile, F_OK) != 0);
        ASSERT_EQ(read_pid("nodeagent"), 0);
        ASSERT_FALSE(alive(agent2));
        /* And down again is harmless. */
        free(out3);
        out3 = NULL;
        ASSERT_EQ(run_script("tests/env/down.sh", &out3), 0);
}
