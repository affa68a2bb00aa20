/* Tests of controld's reapers (oneShot exit, vanished containers), the admin CLI (accounts,
 * keys, sandboxes, nodes) and its config check. Runs a real controld against the real
 * dockerd + gVisor.
 *
 * Each test's struct ctld is static: the harness's exit hook (ctld_stop) runs from exit()
 * after the test function has returned, so a stack struct would be read after its frame is
 * gone (garbage dir/pid/failed_exit: leaked containers, spurious failures). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agenttest.h"
#include "apitest.h"
#include "cleanup.h"
#include "ctltest.h"
#include "amqptest.h"
#include "testlib.h"

/* Runs argv capturing stdout and stderr together. */
static int run_all_output(char *const argv[], char **ret_out) {
        int pfd[2];
        ASSERT_EQ(pipe(pfd), 0);
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                dup2(pfd[1], STDOUT_FILENO);
                dup2(pfd[1], STDERR_FILENO);
                close(pfd[0]);
                close(pfd[1]);
                execv(argv[0], argv);
                _exit(127);
        }
        close(pfd[1]);
        size_t len = 0, cap = 65536;
        char *buf = malloc(cap + 1);
        ASSERT_NOT_NULL(buf);
        for (;;) {
                ssize_t n = read(pfd[0], buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0 || (len += (size_t) n) == cap)
                        break;
        }
        close(pfd[0]);
        buf[len] = 0;
        int st;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR)
                ;
        *ret_out = buf;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ------------------------------------------------------------------------------------------ */
/* 8. Reapers: oneShot exit and vanished containers.                                           */

TEST_FULL(reaper_one_shot_exit_and_vanished_container, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char a[25], b[25], d[25];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "reaped", "{\"oneShot\":true}", a);
        ctld_create(&c, key, NULL, b);
        ctld_create(&c, key, NULL, d);
        get_sandbox(&c, key, a, &r);
        ASSERT_TRUE(cJSON_IsTrue(jget(data_of(&r), "one_shot")));
        hres_done(&r);

        char *k1[] = { "docker", "kill", container_name(a), NULL };
        ASSERT_EQ(test_run_capture(k1, NULL, 4096), 0);
        char *k2[] = { "docker", "rm", "-f", container_name(b), NULL };
        ASSERT_EQ(test_run_capture(k2, NULL, 4096), 0);
        char *k3[] = { "docker", "kill", container_name(d), NULL };
        ASSERT_EQ(test_run_capture(k3, NULL, 4096), 0);

        /* The long-poll sees the reaper's verdict. */
        op(&c, key, "GET", a, "/wait?timeout=15&status=destroyed", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        ASSERT_STREQ(jstr(data_of(&r), "destroy_reason"), "one_shot_stopped");
        ASSERT_TRUE(cJSON_IsString(jget(data_of(&r), "destroyed_at")));
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(a)));

        op(&c, key, "GET", b, "/wait?timeout=15&status=destroyed", &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        ASSERT_STREQ(jstr(data_of(&r), "destroy_reason"), "failed");
        ASSERT_CONTAINS(jstr(data_of(&r), "failure_reason"), "workload is gone");   /* and says why */
        hres_done(&r);

        op(&c, key, "GET", d, "/wait?timeout=15&status=destroyed", &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        ASSERT_STREQ(jstr(data_of(&r), "destroy_reason"), "failed");
        ASSERT_CONTAINS(jstr(data_of(&r), "failure_reason"), "stopped on its own (exit code 137)");
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(d)));

        /* Reaped sandboxes free their concurrency slots. */
        char e[25];
        for (int i = 0; i < 2; i++)
                ctld_create(&c, key, NULL, e);
        /* autoDestroy sets the expiry to destroyTimeout after creation (default lifetime otherwise). */
        ctld_create(&c, key, "{\"autoDestroy\":true,\"destroyTimeout\":\"30m\"}", e);
        get_sandbox(&c, key, e, &r);
        ASSERT_TRUE(cJSON_IsTrue(jget(data_of(&r), "auto_destroy")));
        ASSERT_STREQ(jstr(data_of(&r), "destroy_timeout"), "30m");
        struct tm tc = { 0 }, te = { 0 };
        ASSERT_NOT_NULL(strptime(jstr(data_of(&r), "created_at"), "%Y-%m-%dT%H:%M:%S", &tc));
        ASSERT_NOT_NULL(strptime(jstr(data_of(&r), "expires_at"), "%Y-%m-%dT%H:%M:%S", &te));
        long long life = (long long) (timegm(&te) - timegm(&tc));
        ASSERT_TRUE(life >= 1799 && life <= 1801);
        hres_done(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 9. Admin CLI and config check.                                                              */

static int count_lines(const char *s) {
        int n = 0;
        for (; s && *s; s++)
                n += *s == '\n';
        return n;
}

/* ---- controld admin node: drain, undrain, list ---- */

static pid_t ndt_agent_pid = -1;
static void ndt_agent_stop(void *ud) {
        (void) ud;
        test_stop_child(&ndt_agent_pid);
}

/* The node's line of `node list` (static buffer; "" when absent). */
static const char *node_line(struct ctld *c, const char *node) {
        static char line[512];
        _cleanup_free_ char *out = NULL;
        line[0] = 0;
        if (ctld_admin(c, &out, "node", "list", NULL) != 0)
                test_fail(__FILE__, __LINE__, "node list failed");
        for (char *l = out, *nl; l && *l; l = nl) {
                nl = strchr(l, '\n');
                if (nl)
                        *nl++ = 0;
                if (!strncmp(l, node, strlen(node)) && l[strlen(node)] == '\t')
                        snprintf(line, sizeof(line), "%s", l);
        }
        return line;
}

/* A drained node takes no new sandboxes (create and resume answer 503 and write nothing)
 * until undrained; `node list` shows each node's state, live sandboxes and whether its
 * agent answers (an agent that starts is seen through its node.sync at once). */
TEST_FULL(admin_node_drain_undrain_list, 240) {
        static struct ctld c;
        need_docker();
        amqptest_need_broker();
        char node[32], exchange[48], extra[512], want[128];
        snprintf(node, sizeof(node), "ndt-%d", (int) getpid());
        snprintf(exchange, sizeof(exchange), "paddock.ndt-%d", (int) getpid());
        snprintf(extra, sizeof(extra), "[docker]\nnode_id = %s\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n",
                 node, exchange);
        ctld_start(&c, NULL, extra);
        _cleanup_free_ char *key = ctld_account_key(&c, "drainer", NULL, NULL);
        static const char deny[] = "{\"egress\":{\"mode\":\"deny_all\"}}";  /* needs no agent */

        snprintf(want, sizeof(want), "%s\tactive\t0\tnever\t-", node);
        ASSERT_STREQ(node_line(&c, node), want);
        char id[25], id2[25], path[96];
        ctld_create(&c, key, deny, id);
        snprintf(want, sizeof(want), "%s\tactive\t1\tnever\t-", node);
        ASSERT_STREQ(node_line(&c, node), want);

        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "node", "drain", node, NULL), 0);
        ASSERT_STREQ(out, "drained\n");
        snprintf(want, sizeof(want), "%s\tdrained\t1\t", node);
        ASSERT_CONTAINS(node_line(&c, node), want);
        /* Only the docker driver's own node exists; junk is refused. */
        ASSERT_NE(ctld_admin(&c, NULL, "node", "drain", "no-such-node", NULL), 0);
        ASSERT_NE(ctld_admin(&c, NULL, "node", "drain", "bad id", NULL), 0);
        ASSERT_NE(ctld_admin(&c, NULL, "node", "frobnicate", node, NULL), 0);

        /* Create: 503, and no record (the running controld reads the store on every create). */
        HTTP_EXPECT_MSG(&c, "POST", "/sandboxes", key, deny, 503, "No node is accepting new sandboxes");
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 1);
        /* Resume: 503 too, and the sandbox stays paused. */
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        struct hres r;
        http_req(&c, "POST", path, key, NULL, &r);
        ASSERT_TRUE(r.status == 200 || r.status == 202);
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "paused", 60), "paused");
        snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
        HTTP_EXPECT_MSG(&c, "POST", path, key, NULL, 503, "No node is accepting new sandboxes");
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "paused", 1), "paused");

        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "node", "undrain", node, NULL), 0);
        ASSERT_STREQ(out, "undrained\n");
        snprintf(want, sizeof(want), "%s\tactive\t0\tnever\t-", node);  /* paused: nothing runs there */
        ASSERT_STREQ(node_line(&c, node), want);
        http_req(&c, "POST", path, key, NULL, &r);
        ASSERT_TRUE(r.status == 200 || r.status == 202);
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        ctld_create(&c, key, deny, id2);
        snprintf(want, sizeof(want), "%s\tactive\t2\tnever\t-", node);
        ASSERT_STREQ(node_line(&c, node), want);

        /* An agent for the node starts: its node.sync marks it up within seconds. */
        char conf[256], logp[256];
        snprintf(conf, sizeof(conf), "%s/ndt-agent.conf", test_tmpdir());
        snprintf(logp, sizeof(logp), "%s/ndt-agent.log", test_tmpdir());
        FILE *f = fopen(conf, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n", node, exchange);
        fclose(f);
        test_on_exit(ndt_agent_stop, NULL);
        ndt_agent_pid = agenttest_start(conf, logp, NULL);
        snprintf(want, sizeof(want), "%s\tactive\t2\tup\t", node);
        bool up = false;
        for (int i = 0; i < 150 && !up; i++) {
                up = strstr(node_line(&c, node), want) != NULL;
                if (!up)
                        usleep(100000);
        }
        if (!up)
                test_fail(__FILE__, __LINE__, "node %s not 'up' 15 s after its agent started: '%s' (agent log %s)", node,
                          node_line(&c, node), logp);
}

TEST_FULL(admin_cli_accounts_keys_sandboxes_and_config_check, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char acc[25], acc2[25], id[25], id2[25];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "operator-a", acc);
        _cleanup_free_ char *key2 = ctld_account_key(&c, "operator-b", NULL, acc2);

        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 2);
        {
                char want[128];
                snprintf(want, sizeof(want), "%s\toperator-a\tdefault\t", acc);
                ASSERT_CONTAINS(out, want);
        }
        /* Creating an existing name returns the same account. */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "create", "operator-a", NULL), 0);
        ASSERT_TRUE(strncmp(out, acc, 24) == 0);

        char prefix[16];
        snprintf(prefix, sizeof(prefix), "%.12s", key);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "key", "list", "operator-a", NULL), 0);
        ASSERT_EQ(count_lines(out), 1);
        ASSERT_CONTAINS(out, prefix);
        ASSERT_CONTAINS(out, "\tactive\n");
        ASSERT_TRUE(strstr(out, key) == NULL); /* only the prefix is ever shown */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "key", "list", acc, NULL), 0); /* by id too */
        ASSERT_CONTAINS(out, prefix);

        ctld_create(&c, key, "{\"name\":\"admin-box\"}", id);
        ctld_create(&c, key2, NULL, id2);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", "--account", "operator-a", NULL), 0);
        ASSERT_EQ(count_lines(out), 1);
        ASSERT_CONTAINS(out, id);
        ASSERT_CONTAINS(out, "\tready\tbusybox\tadmin-box\t");
        ASSERT_TRUE(strstr(out, id2) == NULL);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 2);

        /* Force destroy from the CLI while the daemon runs: container gone, API agrees. */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "destroy", id, NULL), 0);
        ASSERT_STREQ(out, "destroyed\n");
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        get_sandbox(&c, key, id, &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        hres_done(&r);
        ASSERT_TRUE(docker_container_running(container_name(id2)));

        /* Revoke: listed as revoked, the key stops working, the other account's key still works. */
        ASSERT_EQ(ctld_admin(&c, NULL, "key", "revoke", prefix, NULL), 0);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "key", "list", "operator-a", NULL), 0);
        ASSERT_CONTAINS(out, "\trevoked\n");
        ASSERT_TRUE(strstr(out, "\tactive\n") == NULL);
        EXPECT_ERROR(&c, "GET", "/sandboxes", key, NULL, 401, "Invalid API key");
        HTTP_EXPECT(&c, "GET", "/sandboxes", key2, NULL, 200);
        /* Revoking again: no active key by that prefix. */
        ASSERT_NE(ctld_admin(&c, NULL, "key", "revoke", prefix, NULL), 0);

        /* Bad arguments fail with a non-zero exit. */
        const char *const bad[][5] = {
                { "sandbox", "destroy", "xyz", NULL },
                { "sandbox", "destroy", NULL },
                { "sandbox", "list", "--status", "bogus", NULL },
                { "sandbox", "list", "--account", "nobody", NULL },
                { "account", "create", "bad name!", NULL },
                { "account", "create", "someone", "--plan", "no-such-plan" },
                { "account", "frobnicate", NULL },
                { "key", "list", "nobody", NULL },
                { "key", "issue", "nobody", NULL },
                { "key", "revoke", "pdk_nonexist", NULL },
                { "frobnicate", NULL },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                int st = ctld_admin(&c, NULL, bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4], NULL);
                if (st == 0)
                        test_fail(__FILE__, __LINE__, "admin %s %s %s ... exited 0", bad[i][0], bad[i][1] ? bad[i][1] : "",
                                  bad[i][2] ? bad[i][2] : "");
        }
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 2); /* the refused creates created nothing */

        /* controld -n: the test config is OK; a typo'd key is named with file:line. */
        char bin[512];
        snprintf(bin, sizeof(bin), "%s", test_build_path("controld"));
        {
                char *argv[] = { bin, "-n", "-f", c.conf, NULL };
                free(out);
                out = NULL;
                ASSERT_EQ(run_all_output(argv, &out), 0);
                ASSERT_STREQ(out, "configuration OK\n");
        }
        char typo[512];
        snprintf(typo, sizeof(typo), "%s/typo.conf", test_tmpdir());
        {
                FILE *f = fopen(c.conf, "r");
                FILE *g = fopen(typo, "w");
                ASSERT_NOT_NULL(f);
                ASSERT_NOT_NULL(g);
                char line[1024];
                int n = 0, typo_line = 0;
                while (fgets(line, sizeof(line), f)) {
                        fputs(line, g);
                        n++;
                        if (!typo_line && !strcmp(line, "[server]\n")) {
                                fputs("listne = 127.0.0.1:1\n", g);
                                typo_line = ++n;
                        }
                }
                fclose(f);
                fclose(g);
                ASSERT_TRUE(typo_line > 0);
                char *argv[] = { bin, "-n", "-f", typo, NULL };
                free(out);
                out = NULL;
                ASSERT_NE(run_all_output(argv, &out), 0);
                char want[600];
                snprintf(want, sizeof(want), "%s:%d: unknown key 'listne' in [server]", typo, typo_line);
                ASSERT_CONTAINS(out, want);
                ASSERT_TRUE(strstr(out, "configuration OK") == NULL);
        }
        {
                char missing[512];
                snprintf(missing, sizeof(missing), "%s/does-not-exist.conf", test_tmpdir());
                char *argv[] = { bin, "-n", "-f", missing, NULL };
                free(out);
                out = NULL;
                ASSERT_NE(run_all_output(argv, &out), 0);
                ASSERT_CONTAINS(out, "does-not-exist.conf");
        }
}
