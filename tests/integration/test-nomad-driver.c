/* controld on the Nomad driver against the Nomad stand-in (tests/nomad): the job it registers,
 * blocking waits, pause/resume by scaling, exec over the alloc exec WebSocket, and every fault
 * the stand-in injects ending in a clean 503 or `failed` with Nomad's reason and no job left. */
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "jsondiff.h"
#include "nomadtest.h"
#include "strutil.h"
#include "amqptest.h"
#include "testlib.h"

struct env {
        struct nstandin s;
        struct ctld c;
        char key[128];
        char account[25];
};

/* A stand-in (args: its extra flags) and controld on the Nomad driver against it. */
static void env_start(struct env *e, const char *const *args, const char *nomad_extra) {
        need_docker();
        need_nstandin();
        char dir[256];
        snprintf(dir, sizeof(dir), "%s/standin-%d-%ld", test_tmpdir(), getpid(), (long) random());
        ASSERT_TRUE(mkdir(dir, 0700) == 0);
        const char *def[] = { "--net-map", "cni/sandbox-open=paddock-sandbox,cni/sandbox-restricted=paddock-restricted,cni/sandbox-no-egress=none",
                              NULL };
        const char *all[24];
        int n = 0;
        for (const char *const *a = def; *a; a++)
                all[n++] = *a;
        for (const char *const *a = args; a && *a && n < 22; a++)
                all[n++] = *a;
        all[n] = NULL;
        nstandin_start(&e->s, dir, all);
        ctld_start_nomad(&e->c, &e->s, nomad_extra, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&e->c, "nomad", NULL, e->account);
        snprintf(e->key, sizeof(e->key), "%s", key);
}

/* env_start with one stand-in fault armed (a JSON object for /_standin/fault). */
static void env_start_fault(struct env *e, const char *nomad_extra, const char *fault) {
        env_start(e, NULL, nomad_extra);
        nstandin_fault(&e->s, fault);
}

/* Bodies of the requests with this method and exact path, in order. */
static cJSON *request_bodies(struct nstandin *s, const char *method, const char *path) {
        _cleanup_json_ cJSON *log = nstandin_requests(s);
        cJSON *out = cJSON_CreateArray();
        const cJSON *o;
        cJSON_ArrayForEach(o, log) {
                const char *m = cJSON_GetObjectItem(o, "Method")->valuestring, *p = cJSON_GetObjectItem(o, "Path")->valuestring;
                if (!strcmp(m, method) && !strcmp(p, path))
                        cJSON_AddItemToArray(out, cJSON_Duplicate(cJSON_GetObjectItem(o, "Body"), true));
        }
        return out;
}

static void create_expect_503(struct env *e, const char *body, const char *part) {
        struct hres r;
        http_req(&e->c, "POST", "/sandboxes", e->key, body ? body : "{}", &r);
        if (r.status != 503 || !strstr(hres_message(&r) ? hres_message(&r) : "", part))
                test_fail(__FILE__, __LINE__, "create -> %ld %s (want 503 with \"%s\")", r.status, r.body, part);
        hres_done(&r);
        /* Nothing stays registered, and the record says failed with the same reason. */
        ASSERT_EQ(nstandin_job_count(&e->s), 0);
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&e->c, &out, "sandbox", "list", NULL), 0);
        ASSERT_CONTAINS(out, "failed");
}

/* The job the driver registers, field by field against packaging/nomad/sandbox-job.json (the
 * values that belong to this sandbox and this config checked one by one), then the placement
 * it got: the allocation's node and address are what the sandbox record holds. */
TEST_FULL(nomad_registered_job_matches_reference, 180) {
        struct env e;
        struct hres r;
        char id[25];
        env_start(&e, NULL, NULL);
        http_req(&e.c, "POST", "/sandboxes", e.key, "{\"template\":\"python-3.11\",\"specs\":{\"cpu\":500,\"memory\":512},"
                                                  "\"egress\":{\"mode\":\"restricted\",\"allow\":[\"1.1.1.1\"]}}", &r);
        ASSERT_EQ(r.status, 201);
        snprintf(id, sizeof(id), "%s", hres_data_str(&r, "id"));
        hres_done(&r);

        _cleanup_json_ cJSON *bodies = request_bodies(&e.s, "PUT", "/v1/jobs");
        ASSERT_EQ(cJSON_GetArraySize(bodies), 1);
        cJSON *got = cJSON_GetArrayItem(bodies, 0);
        _cleanup_json_ cJSON *ref = json_load_file("packaging/nomad/sandbox-job.json");
        ASSERT_NOT_NULL(ref);
        /* This sandbox has no volume: the reference without its volume parts. */
        cJSON *g = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(ref, "Job"), "TaskGroups"), 0);
        cJSON_DeleteItemFromObject(g, "Volumes");
        cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0), "VolumeMounts");
        const char *own[] = { "Job.ID", "Job.Name", "Job.Meta.paddock_sandbox_id", "Job.Meta.paddock_account_id",
                              "Job.Meta.paddock_controld", "Job.TaskGroups[0].Tasks[0].Config.runtime", NULL };
        char diff[4096];
        int n = json_diff(ref, got, own, diff, sizeof(diff));
        if (n)
                test_fail(__FILE__, __LINE__, "%d differences from packaging/nomad/sandbox-job.json:\n%s", n, diff);
        cJSON *job = cJSON_GetObjectItem(got, "Job");
        char want[64];
        snprintf(want, sizeof(want), "sandbox-%s", id);
        ASSERT_STREQ(cJSON_GetObjectItem(job, "ID")->valuestring, want);
        ASSERT_STREQ(cJSON_GetObjectItem(job, "Name")->valuestring, want);
        cJSON *meta = cJSON_GetObjectItem(job, "Meta");
        ASSERT_STREQ(cJSON_GetObjectItem(meta, "paddock_sandbox_id")->valuestring, id);
        ASSERT_STREQ(cJSON_GetObjectItem(meta, "paddock_account_id")->valuestring, e.account);
        ASSERT_EQ(strlen(cJSON_GetObjectItem(meta, "paddock_controld")->valuestring), 24);
        cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(job, "TaskGroups"), 0), "Tasks"), 0);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(t, "Config"), "runtime")->valuestring, "runsc-net");

        /* The allocation runs the task container under gVisor with the job's limits. */
        const char *ctr = nstandin_container(&e.s, id);
        ASSERT_NOT_NULL(ctr);
        {
                _cleanup_free_ char *out = NULL;
                char *argv[] = { "docker", "inspect", "-f",
                                 "{{.HostConfig.Runtime}} {{.HostConfig.Memory}} {{.HostConfig.MemoryReservation}} "
                                 "{{.HostConfig.PidsLimit}} {{.HostConfig.CapDrop}} {{.HostConfig.CapAdd}} {{.HostConfig.SecurityOpt}}",
                                 (char *) ctr, NULL };
                ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
                ASSERT_CONTAINS(out, "runsc-net 671088640 536870912 4096 [ALL] [ALL] [no-new-privileges]");
        }
        /* The record holds Nomad's node and address (the egress routing key and rule target). */
        _cleanup_json_ cJSON *st = nstandin_state(&e.s);
        cJSON *a0 = cJSON_GetArrayItem(cJSON_GetObjectItem(st, "Allocations"), 0);
        char db[400], q[200];
        snprintf(db, sizeof(db), "%s/controld.db", e.c.dir);
        snprintf(q, sizeof(q), "SELECT node_id, alloc_id, job_id FROM sandboxes WHERE id = '%s'", id);
        char *qa[] = { "sqlite3", db, q, NULL };
        _cleanup_free_ char *row = NULL;
        ASSERT_EQ(test_run_capture(qa, &row, 4096), 0);
        char expect[256];
        snprintf(expect, sizeof(expect), "%s|%s|sandbox-%s", cJSON_GetObjectItem(a0, "NodeID")->valuestring,
                 cJSON_GetObjectItem(a0, "ID")->valuestring, id);
        ASSERT_CONTAINS(row, expect);
        /* The container a snapshot commits: the task's Docker container, named as Nomad's docker
         * driver names it on the node (<task>-<alloc id>), which the node agent can ask for. */
        snprintf(q, sizeof(q), "SELECT container_id FROM sandboxes WHERE id = '%s'", id);
        char *qc[] = { "sqlite3", db, q, NULL };
        _cleanup_free_ char *crow = NULL;
        ASSERT_EQ(test_run_capture(qc, &crow, 4096), 0);
        snprintf(expect, sizeof(expect), "sandbox-%s\n", cJSON_GetObjectItem(a0, "ID")->valuestring);
        ASSERT_STREQ(crow, expect);
        expect[strlen(expect) - 1] = 0;
        ASSERT_STREQ(ctr, expect);   /* the stand-in's container of this allocation */
        ctld_stop(&e.c);
}

/* Create, exec over the WebSocket, files, pause (scale to 0), resume (scale to 1: a new
 * allocation), destroy (deregister with purge). */
TEST_FULL(nomad_lifecycle_exec_pause_resume_destroy, 240) {
        struct env e;
        struct hres r;
        char id[25], path[160];
        env_start(&e, NULL, NULL);
        ctld_create(&e.c, e.key, NULL, id);

        ctld_exec(&e.c, e.key, id, "echo out; echo err >&2; exit 7", 30, &r);
        ASSERT_EQ(r.status, 200);
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "stdout")->valuestring, "out\n");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "stderr")->valuestring, "err\n");
        ASSERT_EQ(cJSON_GetObjectItem(d, "exit_code")->valueint, 7);
        hres_done(&r);
        ASSERT_GE(nstandin_count(&e.s, "GET", "/v1/client/allocation/"), 1);

        _cleanup_free_ char *alloc1 = xstrdup(nstandin_container(&e.s, id));
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        HTTP_EXPECT(&e.c, "POST", path, e.key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(&e.c, e.key, id, "paused", 60), "paused");
        _cleanup_json_ cJSON *scale0 = NULL;
        {
                char sp[80];
                snprintf(sp, sizeof(sp), "/v1/job/sandbox-%s/scale", id);
                scale0 = request_bodies(&e.s, "POST", sp);
                ASSERT_EQ(cJSON_GetArraySize(scale0), 1);
                ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(scale0, 0), "Count")->valueint, 0);
        }
        ASSERT_EQ(nstandin_job_count(&e.s), 1);   /* paused: the job stays, its allocation goes */
        ASSERT_TRUE(nstandin_container(&e.s, id) == NULL);

        snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
        HTTP_EXPECT(&e.c, "POST", path, e.key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(&e.c, e.key, id, "ready", 60), "ready");
        const char *alloc2 = nstandin_container(&e.s, id);
        ASSERT_NOT_NULL(alloc2);
        ASSERT_TRUE(strcmp(alloc1, alloc2) != 0);
        ctld_exec(&e.c, e.key, id, "echo again", 30, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "stdout")->valuestring, "again\n");
        hres_done(&r);

        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&e.c, "DELETE", path, e.key, NULL, 204);
        ASSERT_EQ(nstandin_job_count(&e.s), 0);
        char dp[80];
        snprintf(dp, sizeof(dp), "/v1/job/sandbox-%s", id);
        _cleanup_json_ cJSON *log = nstandin_requests(&e.s);
        bool purged = false;
        const cJSON *o;
        cJSON_ArrayForEach(o, log) {
                const cJSON *qp = cJSON_GetObjectItem(cJSON_GetObjectItem(o, "Query"), "purge");
                if (!strcmp(cJSON_GetObjectItem(o, "Method")->valuestring, "DELETE") &&
                    !strcmp(cJSON_GetObjectItem(o, "Path")->valuestring, dp) && cJSON_IsString(qp) && !strcmp(qp->valuestring, "true"))
                        purged = true;
        }
        ASSERT_TRUE(purged);
        ctld_stop(&e.c);
}

/* A slow placement is waited for with blocking queries: a handful of requests, each carrying
 * index and wait, not one every few milliseconds. */
TEST_FULL(nomad_slow_placement_uses_blocking_queries, 180) {
        struct env e;
        char id[25];
        env_start_fault(&e, NULL, "{\"slow_placement_ms\":4000}");
        int64_t t0 = now_ms();
        ctld_create(&e.c, e.key, NULL, id);
        ASSERT_GE(now_ms() - t0, 3500);
        char ap[80];
        snprintf(ap, sizeof(ap), "/v1/job/sandbox-%s/allocations", id);
        _cleanup_json_ cJSON *log = nstandin_requests(&e.s);
        int polls = 0, blocking = 0;
        const cJSON *o;
        cJSON_ArrayForEach(o, log) {
                const char *p = cJSON_GetObjectItem(o, "Path")->valuestring;
                if (strcmp(p, ap) != 0 && !startswith(p, "/v1/evaluation/"))
                        continue;
                polls++;
                const cJSON *q = cJSON_GetObjectItem(o, "Query");
                const cJSON *idx = cJSON_GetObjectItem(q, "index"), *w = cJSON_GetObjectItem(q, "wait");
                if (cJSON_IsString(idx) && cJSON_IsString(w) && atoll(idx->valuestring) > 0)
                        blocking++;
        }
        /* 4 s of placement: one first read per endpoint, then only changes (a storm would be hundreds). */
        if (polls > 12)
                test_fail(__FILE__, __LINE__, "%d placement reads during a 4 s placement: not blocking", polls);
        ASSERT_GE(blocking, 1);
        ASSERT_GE(polls - blocking, 1);
        ctld_stop(&e.c);
}

TEST_FULL(nomad_fault_placement_failure, 180) {
        struct env e;
        env_start_fault(&e, NULL, "{\"fail_placement\":1}");
        create_expect_503(&e, NULL, "no Nomad node could place the sandbox");
        /* The next one places. */
        char id[25];
        ctld_create(&e.c, e.key, NULL, id);
        ctld_stop(&e.c);
}

TEST_FULL(nomad_fault_driver_failure_reason, 180) {
        struct env e;
        env_start_fault(&e, NULL,
                        "{\"driver_failure\":1,\"driver_message\":\"requested runtime \\\"runsc\\\" is not allowed\"}");
        create_expect_503(&e, NULL, "requested runtime \"runsc\" is not allowed");
        /* The log line names the job and the allocation (journal fields NOMAD_JOB_ID, ALLOC_ID). */
        _cleanup_free_ char *log = NULL;
        char *cat[] = { "cat", e.c.log, NULL };
        ASSERT_EQ(test_run_capture(cat, &log, 1 << 20), 0);
        const char *line = strstr(log, "Nomad placement failed:");
        ASSERT_NOT_NULL(line);
        size_t len = strcspn(line, "\n");
        _cleanup_free_ char *l = xstrndup(line, len);
        ASSERT_CONTAINS(l, "NOMAD_JOB_ID=sandbox-");
        ASSERT_CONTAINS(l, "ALLOC_ID=");
        ctld_stop(&e.c);
}

TEST_FULL(nomad_fault_slow_placement_times_out, 180) {
        struct env e;
        env_start_fault(&e, "placement_timeout = 2s\n", "{\"slow_placement_ms\":6000}");
        int64_t t0 = now_ms();
        create_expect_503(&e, NULL, "Nomad did not start the sandbox within 2s");
        ASSERT_LE(now_ms() - t0, 5000);
        /* The placement finishing later leaves nothing running either. */
        sleep(5);
        ASSERT_EQ(nstandin_job_count(&e.s), 0);
        ctld_stop(&e.c);
}

TEST_FULL(nomad_fault_http_500, 180) {
        struct env e;
        env_start_fault(&e, NULL, "{\"http_500\":1}");
        create_expect_503(&e, NULL, "Nomad answered 500: rpc error: No cluster leader");
        ctld_stop(&e.c);
}

/* An allocation lost after it ran: the reaper finds it, the sandbox is failed and the job gone. */
TEST_FULL(nomad_fault_alloc_lost_later, 180) {
        struct env e;
        char id[25], path[128];
        /* The stand-in arms the loss when it places: this sandbox's node goes away 3 s after. */
        env_start_fault(&e, NULL, "{\"lose_after_ms\":3000,\"lose_count\":1}");
        ctld_create(&e.c, e.key, NULL, id);
        ASSERT_STREQ(ctld_wait_status(&e.c, e.key, id, "destroyed", 60), "destroyed");
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        struct hres r;
        http_req(&e.c, "GET", path, e.key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "destroy_reason")->valuestring, "failed");
        hres_done(&r);
        ASSERT_EQ(nstandin_job_count(&e.s), 0);
        ctld_stop(&e.c);
}

TEST_FULL(nomad_fault_exec_closed_1011, 180) {
        struct env e;
        char id[25];
        struct hres r;
        env_start(&e, NULL, NULL);
        ctld_create(&e.c, e.key, NULL, id);
        nstandin_fault(&e.s, "{\"exec_1011\":1}");
        ctld_exec(&e.c, e.key, id, "echo hi", 30, &r);
        ASSERT_EQ(r.status, 503);
        hres_done(&r);
        /* The next exec works: one broken stream breaks nothing else. */
        ctld_exec(&e.c, e.key, id, "echo hi", 30, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "stdout")->valuestring, "hi\n");
        hres_done(&r);
        ctld_stop(&e.c);
}

/* ACL: controld sends [nomad] token; a wrong one is a clear refusal, and the token never
 * shows in the log. */
TEST_FULL(nomad_acl_token, 180) {
        struct env e;
        char id[25];
        const char *args[] = { "--token", "s3cret-token-value", NULL };
        env_start(&e, args, "token = s3cret-token-value\n");
        ctld_create(&e.c, e.key, NULL, id);
        ASSERT_EQ(nstandin_count(&e.s, "PUT", "/v1/jobs"), 1);
        ctld_stop(&e.c);

        struct env f;
        env_start(&f, args, "token = wrong\n");
        create_expect_503(&f, NULL, "Nomad refused the ACL token");
        _cleanup_free_ char *logtext = NULL;
        char *cat[] = { "cat", f.c.log, NULL };
        ASSERT_EQ(test_run_capture(cat, &logtext, 1 << 20), 0);
        ASSERT_FALSE(strstr(logtext, "s3cret-token-value") != NULL);
        ASSERT_FALSE(strstr(logtext, "token = wrong") != NULL);
        ctld_stop(&f.c);
}

/* Orphans: a job of this instance with no live record is purged by the reaper; another
 * instance's job is left alone. */
TEST_FULL(nomad_orphan_jobs_are_reaped, 180) {
        struct env e;
        char id[25];
        env_start(&e, NULL, NULL);
        ctld_create(&e.c, e.key, NULL, id);
        /* Forget the record behind controld's back. */
        ctld_stop_daemon(&e.c);
        char db[400], q[200];
        snprintf(db, sizeof(db), "%s/controld.db", e.c.dir);
        snprintf(q, sizeof(q), "DELETE FROM sandboxes WHERE id = '%s'", id);
        char *qa[] = { "sqlite3", db, q, NULL };
        ASSERT_EQ(test_run_capture(qa, NULL, 4096), 0);
        ctld_start_daemon(&e.c);
        for (int i = 0; i < 100 && nstandin_job_count(&e.s) > 0; i++)
                usleep(100000);
        ASSERT_EQ(nstandin_job_count(&e.s), 0);
        ctld_stop(&e.c);
}

/* ---- two nodes, two agents ---- */

struct agent {
        pid_t pid;
        char conf[400], log[400];
};

static void agent_stop_hook(void *ud) { test_stop_child(&((struct agent *) ud)->pid); }

static void agent_start(struct agent *a, const char *dir, const char *name, const char *text) {
        snprintf(a->conf, sizeof(a->conf), "%s/%s.conf", dir, name);
        snprintf(a->log, sizeof(a->log), "%s/%s.log", dir, name);
        FILE *f = fopen(a->conf, "w");
        ASSERT_NOT_NULL(f);
        fputs(text, f);
        fclose(f);
        const char *argv[] = { "nodeagent", "-d", "-f", a->conf, NULL };
        a->pid = test_spawn_logged(test_build_path("nodeagent"), argv, a->log);
        test_on_exit(agent_stop_hook, a);
        for (int i = 0; i < 300; i++) {
                _cleanup_free_ char *out = NULL;
                char *cat[] = { "cat", a->log, NULL };
                if (test_run_capture(cat, &out, 1 << 20) == 0 && out && strstr(out, "consuming node messages"))
                        return;
                usleep(50000);
        }
        test_fail(__FILE__, __LINE__, "nodeagent %s did not start consuming; see %s", name, a->log);
}

static char *file_text(const char *path) {
        char *out = NULL;
        char *cat[] = { "cat", (char *) path, NULL };
        if (test_run_capture(cat, &out, 1 << 20) != 0 && !out)
                out = xstrdup("");
        return out;
}

/* Egress messages are routed by the allocation's Nomad node id: with two client nodes and an
 * agent on each (one finding its id with node_id = nomad from /v1/agent/self, one given it
 * literally), each agent gets exactly the messages of the sandbox placed on its node. The
 * agents have no firewall here, so each refuses and names its node: that refusal, carried back
 * to the API, says which agent answered. */
TEST_FULL(nomad_two_nodes_each_agent_gets_its_own, 240) {
        need_docker();
        need_nstandin();
        amqptest_need_broker();
        struct nstandin s;
        char dir[256];
        snprintf(dir, sizeof(dir), "%s/two-%d", test_tmpdir(), getpid());
        ASSERT_TRUE(mkdir(dir, 0700) == 0);
        const char *args[] = { "--nodes", "2", "--placement", "spread", "--agent-node", "0", "--net-map",
                               "cni/sandbox-open=paddock-sandbox,cni/sandbox-restricted=paddock-sandbox,cni/sandbox-no-egress=none",
                               NULL };
        nstandin_start(&s, dir, args);
        _cleanup_json_ cJSON *nodes = nstandin_get(&s, "/v1/nodes");
        ASSERT_EQ(cJSON_GetArraySize(nodes), 2);
        char n0[64] = "", n1[64] = "";
        const cJSON *n;
        cJSON_ArrayForEach(n, nodes) {
                const char *name = cJSON_GetObjectItem(n, "Name")->valuestring, *id = cJSON_GetObjectItem(n, "ID")->valuestring;
                snprintf(!strcmp(name, "standin-node-1") ? n0 : n1, 64, "%s", id);
        }
        ASSERT_TRUE(n0[0] && n1[0]);

        char exchange[64], text[1024];
        snprintf(exchange, sizeof(exchange), "paddock.test-nomad-%d", getpid());
        struct agent a, b;
        snprintf(text, sizeof(text),
                 "[agent]\nnode_id = nomad\nlog_level = debug\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n"
                 "[nomad]\naddress = %s\n", exchange, s.url);
        agent_start(&a, dir, "agent-a", text);
        snprintf(text, sizeof(text),
                 "[agent]\nnode_id = %s\nlog_level = debug\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n", n1,
                 exchange);
        agent_start(&b, dir, "agent-b", text);
        _cleanup_free_ char *alog0 = file_text(a.log);
        char says[128];
        snprintf(says, sizeof(says), "this is Nomad node %s", n0);
        ASSERT_CONTAINS(alog0, says);

        struct ctld c;
        char extra[512];
        snprintf(extra, sizeof(extra), "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\negress_timeout = 3s\n", exchange);
        ctld_start_nomad(&c, &s, NULL, NULL, extra);
        _cleanup_free_ char *key = ctld_account_key(&c, "two", NULL, NULL);
        char want0[160], want1[160];
        snprintf(want0, sizeof(want0), "egress enforcement is not enabled on node %s", n0);
        snprintf(want1, sizeof(want1), "egress enforcement is not enabled on node %s", n1);
        bool saw0 = false, saw1 = false;
        for (int i = 0; i < 2; i++) {
                struct hres r;
                http_req(&c, "POST", "/sandboxes", key, "{}", &r);
                ASSERT_EQ(r.status, 503);
                const char *m = hres_message(&r);
                saw0 = saw0 || strstr(m, want0);
                saw1 = saw1 || strstr(m, want1);
                hres_done(&r);
        }
        ASSERT_TRUE(saw0 && saw1);

        /* Which sandbox each agent saw: one each, never the other's. */
        _cleanup_free_ char *list = NULL;
        ASSERT_EQ(ctld_admin(&c, &list, "sandbox", "list", NULL), 0);
        char ids[2][25] = { "", "" };
        int k = 0;
        for (char *save = NULL, *line = strtok_r(list, "\n", &save); line && k < 2; line = strtok_r(NULL, "\n", &save))
                if (sscanf(line, "%24s", ids[k]) == 1 && strlen(ids[k]) == 24)
                        k++;
        ASSERT_EQ(k, 2);
        _cleanup_free_ char *la = file_text(a.log), *lb = file_text(b.log);
        char t0[48], t1[48];
        snprintf(t0, sizeof(t0), "SANDBOX_ID=%s", ids[0]);
        snprintf(t1, sizeof(t1), "SANDBOX_ID=%s", ids[1]);
        bool a0 = strstr(la, t0), a1 = strstr(la, t1), b0 = strstr(lb, t0), b1 = strstr(lb, t1);
        if (!((a0 && !a1 && b1 && !b0) || (a1 && !a0 && b0 && !b1)))
                test_fail(__FILE__, __LINE__, "agents saw: A %d/%d, B %d/%d (want one each, disjoint)", a0, a1, b0, b1);
        ASSERT_EQ(nstandin_job_count(&s), 0);
        ctld_stop(&c);
}
