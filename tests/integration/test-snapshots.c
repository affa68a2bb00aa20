/* Integration test: snapshots end to end through controld, RabbitMQ, a real nodeagent
 * (its docker process), dockerd with runsc and a registry.
 *
 * Each test runs its own agent (own node id), its own exchange and its own repository in
 * the registry, and deletes its queues at exit. Sandboxes are deny_all, so no egress
 * agent is needed. The shared registry on 127.0.0.1:5000 is never stopped: the
 * "registry unreachable" case starts a registry of its own on another loopback port.
 *
 * On the Nomad driver (test-snapshots-nomad) each test runs a one-node Nomad stand-in of its
 * own and the agent takes `node_id = nomad` from it (GET /v1/agent/self), as on a Nomad
 * client: the snapshot job is routed by the allocation's NodeID and names the task's
 * container as Nomad's docker driver names it; a restore is a job whose docker task pulls
 * the snapshot image (the stand-in pulls it as Nomad does).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <linux/magic.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agenttest.h"
#include "cleanup.h"
#include "ctltest.h"
#include "e2btest.h"
#include "regtest.h"
#include "strutil.h"
#include "amqptest.h"
#include "testlib.h"

#define SHARED_REGISTRY "127.0.0.1:5000"
#define DENY "{\"egress\":{\"mode\":\"deny_all\"}}"

static char node_id[40], exchange[64], repo[64], registry[64], agent_conf[512], agent_log[512];
static pid_t agent_pid;
static struct nstandin standin;   /* Nomad driver only */
static const char *disk_floor = "64M";
static const char *reg_user, *reg_pass;   /* a registry that wants a login: both sides' [snapshot(s)] */

static int run(char *const argv[]) {
        return test_run_capture(argv, NULL, 1 << 16);
}
#define RUN(...) run((char *const[]) { __VA_ARGS__, NULL })

static void queues_drop(void *ud) {
        (void) ud;
        amqptest_snapshot_queues_drop(exchange, node_id);
}

static void agent_stop(void *ud) {
        (void) ud;
        test_stop_child(&agent_pid);
}

/* The registry login lines of both sides' config ("" when the registry wants none). */
static const char *reg_login(void) {
        static char login[256];
        login[0] = 0;
        if (reg_user)
                snprintf(login, sizeof(login), "username = %s\npassword = %s\n", reg_user, reg_pass);
        return login;
}

static void agent_start(void) {
        agenttest_write_conf(agent_conf, ctld_nomad() ? "nomad" : node_id, exchange, ctld_nomad() ? standin.url : NULL,
                             "[snapshot]\nregistry = %s\nrepository = %s\ndisk_floor = %s\nprune_interval = 5s\ntimeout = 120s\n%s",
                             registry, repo, disk_floor, reg_login());
        agent_pid = agenttest_start(agent_conf, agent_log, "consuming snapshot jobs");
}

/* The usual opening: services present, ids of this run, controld with [snapshots], an account
 * (its key returned) and, with ret_sb, a deny_all sandbox of that account to snapshot. */
static char *setup(struct ctld *c, const char *reg, const char *timeout, const char *more, bool with_agent,
                   char ret_sb[25]) {
        need_docker();
        agenttest_need(true);
        int id4 = (int) (getpid() % 100000);
        agenttest_names("snt", id4, node_id, exchange, agent_conf, agent_log);
        snprintf(repo, sizeof(repo), "paddock-test/snap%d", id4);
        snprintf(registry, sizeof(registry), "%s", reg);
        if (ctld_nomad()) {
                /* One client node, the one whose agent this is: its Nomad node id routes the jobs. */
                need_nstandin();
                nstandin_start_one_node(&standin, test_tmpdir(), node_id, sizeof(node_id));
        }
        test_on_exit(queues_drop, NULL);
        test_on_exit(agent_stop, NULL);
        if (with_agent)
                agent_start();
        char extra[2048];
        snprintf(extra, sizeof(extra),
                 "[docker]\nnode_id = %s\n"
                 "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n"
                 "[snapshots]\nregistry = %s\nrepository = %s\ntimeout = %s\ntick = 500ms\n%s"
                 "[plan \"snap\"]\nmax_concurrent = 10\nregions = local\nmax_cpu = 1000\nmax_memory = 1024\nmax_disk = 5\n%s",
                 node_id, exchange, registry, repo, timeout, reg_login(), more ? more : "");
        if (ctld_nomad())
                ctld_start_nomad(c, &standin, NULL, NULL, extra);
        else
                ctld_start(c, NULL, extra);
        char *key = ctld_account_key(c, "snap", "snap", NULL);
        if (ret_sb)
                ctld_create(c, key, DENY, ret_sb);
        return key;
}

/* POST a snapshot; asserts 202 + creating and the published fields; returns its id. */
static void snap_post(struct ctld *c, const char *key, const char *sbid, const char *name, char ret_id[25]) {
        char path[96], body[96];
        struct hres r;
        snprintf(path, sizeof(path), "/sandboxes/%s/snapshots", sbid);
        snprintf(body, sizeof(body), "{\"name\":\"%s\"}", name);
        http_req(c, "POST", path, key, body, &r);
        if (r.status != 202)
                test_fail(__FILE__, __LINE__, "snapshot POST answered %ld: %.300s", r.status, r.body);
        ASSERT_STREQ(hres_data_str(&r, "status"), "creating");
        ASSERT_STREQ(hres_data_str(&r, "sandbox_id"), sbid);
        ASSERT_STREQ(hres_data_str(&r, "name"), name);
        ASSERT_STREQ(hres_data_str(&r, "source_template"), "busybox");
        ASSERT_NOT_NULL(hres_data_str(&r, "created_at"));
        snprintf(ret_id, 25, "%s", hres_data_str(&r, "id"));
        char tag[160];
        snprintf(tag, sizeof(tag), "%s/%s:%s", registry, repo, ret_id);
        ASSERT_STREQ(hres_data_str(&r, "image_tag"), tag);
        hres_done(&r);
}

/* The snapshot's JSON in GET /sandboxes/snapshots (a copy; NULL when absent). */
static cJSON *snap_find(struct ctld *c, const char *key, const char *id) {
        struct hres r;
        http_req(c, "GET", "/sandboxes/snapshots?limit=100", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "data"), *it;
        cJSON *found = NULL;
        cJSON_ArrayForEach(it, d) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(it, "id");
                if (cJSON_IsString(v) && !strcmp(v->valuestring, id))
                        found = cJSON_Duplicate(it, 1);
        }
        hres_done(&r);
        return found;
}

static const char *jstr(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Polls until the snapshot leaves `creating`; returns its JSON (caller frees). */
static cJSON *snap_wait(struct ctld *c, const char *key, const char *id, int timeout_s) {
        for (int i = 0; i < timeout_s * 4; i++) {
                cJSON *s = snap_find(c, key, id);
                ASSERT_NOT_NULL(s);
                if (strcmp(jstr(s, "status"), "creating") != 0)
                        return s;
                cJSON_Delete(s);
                usleep(250000);
        }
        test_fail(__FILE__, __LINE__, "snapshot %s still creating after %d s; agent log %s", id, timeout_s, agent_log);
}

/* snap_wait, and the snapshot must have become ready (else the test fails with the reason). */
static cJSON *snap_wait_ready(struct ctld *c, const char *key, const char *id, int timeout_s) {
        cJSON *s = snap_wait(c, key, id, timeout_s);
        if (strcmp(jstr(s, "status"), "ready") != 0)
                test_fail(__FILE__, __LINE__, "snapshot %s: %s", jstr(s, "status"), jstr(s, "failure_reason"));
        return s;
}

/* snap_wait, and the snapshot must have failed, its failure_reason naming `why`. */
static cJSON *snap_wait_failed(struct ctld *c, const char *key, const char *id, int timeout_s, const char *why) {
        cJSON *s = snap_wait(c, key, id, timeout_s);
        const char *reason = jstr(s, "failure_reason");
        if (strcmp(jstr(s, "status"), "failed") != 0 || !reason || !strstr(reason, why))
                test_fail(__FILE__, __LINE__, "snapshot %s: %s (%s); want failed with \"%s\"", id, jstr(s, "status"),
                          reason ? reason : "no reason", why);
        return s;
}

/* DELETE path_fmt (one %s: id) answers status. */
#define DELETE_EXPECT(c, key, path_fmt, id, status)                                  \
        do {                                                                         \
                char _p[128];                                                        \
                snprintf(_p, sizeof(_p), path_fmt, id);                              \
                HTTP_EXPECT(c, "DELETE", _p, key, NULL, status);                     \
        } while (0)

/* The create body of a deny_all restore of snapshot sid (static buffer). */
static const char *restore_body(const char *sid) {
        static char body[128];
        snprintf(body, sizeof(body), "{\"fromSnapshot\":\"%s\",\"egress\":{\"mode\":\"deny_all\"}}", sid);
        return body;
}

static bool local_image(const char *id) {
        char tag[160];
        snprintf(tag, sizeof(tag), "%s/%s:%s", registry, repo, id);
        return RUN("docker", "image", "inspect", tag) == 0;
}

/* HTTP status of the manifest in the shared registry. */
static int manifest_status(const char *id) {
        char url[256];
        _cleanup_free_ char *out = NULL;
        snprintf(url, sizeof(url), "http://%s/v2/%s/manifests/%s", SHARED_REGISTRY, repo, id);
        char *argv[] = { "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                         "Accept: application/vnd.docker.distribution.manifest.v2+json", url, NULL };
        test_run_capture(argv, &out, 4096);
        return out ? atoi(out) : -1;
}

static char *exec_out(struct ctld *c, const char *key, const char *id, const char *cmd) {
        struct hres r;
        ctld_exec(c, key, id, cmd, 60, &r);
        ASSERT_EQ(r.status, 200);
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "exit_code");
        if (!cJSON_IsNumber(ec) || ec->valueint != 0)
                test_fail(__FILE__, __LINE__, "%s failed: %.400s", cmd, r.body);
        char *out = xstrdup(hres_data_str(&r, "stdout"));
        hres_done(&r);
        return out;
}

#define CANARIES "/root/c1 /etc/c2 /opt/x/c3 /usr/local/c4 /home/u/c5 /root/link"

/* ------------------------------------------------------------------------ tests */

TEST_FULL(snapshot_restore_keeps_every_canary, 400) {
        static struct ctld c;
        char sb[25], sid[25], sb2[25], path[128];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        _cleanup_free_ char *other = ctld_account_key(&c, "other", "snap", NULL);
        struct hres r;

        _cleanup_free_ char *before = exec_out(
                &c, key, sb,
                "set -e; mkdir -p /opt/x /usr/local /home/u; for f in /root/c1 /etc/c2 /opt/x/c3 /usr/local/c4 /home/u/c5; "
                "do head -c 65536 /dev/urandom > $f; done; ln -s /opt/x/c3 /root/link; sha256sum " CANARIES
                "; readlink /root/link");
        ASSERT_CONTAINS(before, "/root/link");

        /* Validation at the API edge; other accounts see nothing. */
        snprintf(path, sizeof(path), "/sandboxes/%s/snapshots", sb);
        HTTP_EXPECT_MSG(&c, "POST", path, key, "{\"name\":\"Bad Name\"}", 400, "name must be");
        HTTP_EXPECT(&c, "POST", path, other, "{\"name\":\"x\"}", 404);

        snap_post(&c, key, sb, "canaries", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_ready(&c, key, sid, 120);
        const cJSON *size = cJSON_GetObjectItemCaseSensitive(s, "size_bytes");
        ASSERT_TRUE(cJSON_IsNumber(size) && size->valuedouble > 5 * 65536);
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s, "failure_reason")));
        /* In the registry, not on the node. */
        ASSERT_EQ(manifest_status(sid), 200);
        ASSERT_FALSE(local_image(sid));

        /* Lists: the sandbox's, the account's (paginated); another account's is empty. */
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, sid);
        ASSERT_CONTAINS(r.body, "\"totalCount\":1");
        hres_done(&r);
        http_req(&c, "GET", "/sandboxes/snapshots?limit=1&page=1", other, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, "\"totalCount\":0");
        hres_done(&r);
        DELETE_EXPECT(&c, other, "/sandboxes/snapshots/%s", sid, 404);

        /* Another account cannot restore it either. */
        HTTP_EXPECT_MSG(&c, "POST", "/sandboxes", other, restore_body(sid), 404, "Snapshot not found");

        /* Destroy, restore: the node pulls the image, every canary is identical. */
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb, 204);
        ctld_create(&c, key, restore_body(sid), sb2);
        snprintf(path, sizeof(path), "/sandboxes/%s", sb2);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "from_snapshot"), sid);
        hres_done(&r);
        _cleanup_free_ char *after = exec_out(&c, key, sb2, "sha256sum " CANARIES "; readlink /root/link");
        ASSERT_STREQ(after, before);

        /* Delete: the registry manifest and the record are gone. */
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb2, 204);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
        ASSERT_EQ(manifest_status(sid), 404);
        ASSERT_TRUE(snap_find(&c, key, sid) == NULL);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 404);

        /* Journal fields and metrics. */
        ASSERT_TRUE(test_log_has(agent_log, 0, "SNAPSHOT_ID=", 1));
        ASSERT_TRUE(test_log_has(agent_log, 0, "PUSH_MS=", 1));
        http_req(&c, "GET", "/metrics", NULL, NULL, &r);
        ASSERT_CONTAINS(r.body, "phase=\"snapshot_total\"");
        ASSERT_CONTAINS(r.body, "phase=\"snapshot_push\"");
        hres_done(&r);
        /* Restored images go with the next prune once nothing uses them. */
        for (int i = 0; i < 100 && local_image(sid); i++)
                usleep(100000);
        ASSERT_FALSE(local_image(sid));
}

/* Round `round`: POST /sandboxes/sb/<what> ("pause", "resume") answers 200, and the sandbox
 * then reads status. */
static void pause_or_resume(struct ctld *c, const char *key, const char *sb, int round, const char *what, const char *status) {
        struct hres r;
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/%s", sb, what);
        http_req(c, "POST", path, key, NULL, &r);
        if (r.status != 200)
                test_fail(__FILE__, __LINE__, "round %d: %s answered %ld: %.300s", round, what, r.status, r.body);
        hres_done(&r);
        _cleanup_free_ char *get = xasprintf("/sandboxes/%s", sb);
        http_req(c, "GET", get, key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), status);
        hres_done(&r);
}

/* Issue 35: Brimble's SDK flow, snapshot then pause then resume, lost the sandbox (the pause
 * answered 200, failed on a container the commit had left unkillable, and a reaper destroyed
 * it). Each round: a snapshot, a pause sent while it is being taken and one sent after it is
 * ready; every pause answers 200 only once the sandbox is paused, every resume once it is ready,
 * and exec, files and the volume's data work after each. Both drivers. */


TEST_FULL(snapshot_then_pause_keeps_the_sandbox, 600) {
        static struct ctld c;
        char sb[25], sid[25], path[128];
        struct hres r;
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, NULL);
        ctld_create(&c, key, "{\"egress\":{\"mode\":\"deny_all\"},\"persistent\":true,\"persistentDiskGB\":10}", sb);
        for (int round = 0; round < 3; round++) {
                char cmd[128], want[64];
                snprintf(cmd, sizeof(cmd), "echo round-%d >> /workspace/log && cat /workspace/log | wc -l", round);
                _cleanup_free_ char *n = exec_out(&c, key, sb, cmd);
                snprintf(want, sizeof(want), "%d\n", round + 1);
                ASSERT_STREQ(n, want);
                char name[32];
                snprintf(name, sizeof(name), "round-%d", round);
                snap_post(&c, key, sb, name, sid);
                if (round % 2) {
                        /* after the snapshot is ready */
                        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_ready(&c, key, sid, 120);
                }
                /* during (even rounds) or after (odd): the answer is the state reached */
                pause_or_resume(&c, key, sb, round, "pause", "paused");
                _cleanup_(cJSON_Deletep) cJSON *s2 = snap_wait_ready(&c, key, sid, 120);
                pause_or_resume(&c, key, sb, round, "resume", "ready");
                /* files after the round */
                snprintf(path, sizeof(path), "/sandboxes/%s/files/workspace/f%d", sb, round);
                HTTP_EXPECT(&c, "PUT", path, key, "payload", 204);
                http_req(&c, "GET", path, key, NULL, &r);
                ASSERT_EQ(r.status, 200);
                ASSERT_STREQ(r.body, "payload");
                hres_done(&r);
        }
        _cleanup_free_ char *all = exec_out(&c, key, sb, "cat /workspace/log");
        ASSERT_STREQ(all, "round-0\nround-1\nround-2\n");
        /* and destroy ends it, its workload gone */
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb, 204);
        snprintf(path, sizeof(path), "/sandboxes/%s", sb);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "destroyed");
        ASSERT_STREQ(hres_data_str(&r, "destroy_reason"), "user");
        hres_done(&r);
        if (!ctld_nomad())
                ASSERT_FALSE(docker_container_exists(container_name(sb)));
}

/* E2B's snapshot calls (issue 38) onto Paddock's snapshots, one record for both APIs:
 * createSnapshot answers once the snapshot is made, listSnapshots shows it, a sandbox starts
 * from it named as the templateID with the files it held, deleteSnapshot removes it (then
 * false: 404). updateNetwork on a deny_all sandbox is refused with the reason. Both drivers. */
TEST_FULL(e2b_snapshot_calls_map_onto_snapshots, 400) {
        static struct ctld c;
        char sb[25], path[160];
        struct e2b e = { .port = test_free_port() };
        char more[128];
        snprintf(more, sizeof(more), "[e2b]\nlisten = 127.0.0.1:%d\nbase_template = busybox\n", e.port);
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", more, true, sb);
        _cleanup_free_ char *other = ctld_account_key(&c, "other", "snap", NULL);
        _cleanup_free_ char *w = exec_out(&c, key, sb, "echo kept-by-e2b > /root/mark && echo ok");
        ASSERT_STREQ(w, "ok\n");
        snprintf(path, sizeof(path), "/sandboxes/%s/snapshots", sb);
        {
                E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"name\":\"Bad Name\"}"), 400, "name must be");
                E2B_EXPECT(e2btest_api(&e, "POST", path, other, "{}"), 404, "");
        }
        _cleanup_free_ char *made = e2btest_api(&e, "POST", path, key, "{\"name\":\"via-e2b\"}");
        ASSERT_EQ(test_raw_status(made), 201);
        _cleanup_(cJSON_Deletep) cJSON *mo = cJSON_Parse(test_raw_body(made));
        const char *sid = cJSON_GetStringValue(cJSON_GetObjectItem(mo, "snapshotID"));
        ASSERT_NOT_NULL(sid);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetArrayItem(cJSON_GetObjectItem(mo, "names"), 0)), "via-e2b");
        /* the same record through the Brimble API, ready */
        _cleanup_(cJSON_Deletep) cJSON *rec = snap_find(&c, key, sid);
        ASSERT_NOT_NULL(rec);
        ASSERT_STREQ(jstr(rec, "status"), "ready");
        {
                E2B_EXPECT(e2btest_api(&e, "GET", "/snapshots?limit=10", key, NULL), 200, sid);
                _cleanup_free_ char *lp = xasprintf("/snapshots?sandboxID=%s", sb);
                _cleanup_free_ char *l2 = e2btest_api(&e, "GET", lp, key, NULL);
                ASSERT_CONTAINS(test_raw_body(l2), sid);
                _cleanup_free_ char *l3 = e2btest_api(&e, "GET", "/snapshots", other, NULL);
                ASSERT_STREQ(test_raw_body(l3), "[]");
        }
        /* a sandbox from it, named as the template */
        _cleanup_free_ char *cb = xasprintf("{\"templateID\":\"%s\",\"network\":{\"denyOut\":[\"0.0.0.0/0\"]}}", sid);
        _cleanup_free_ char *nb = e2btest_api(&e, "POST", "/v2/sandboxes", key, cb);
        ASSERT_EQ(test_raw_status(nb), 201);
        _cleanup_(cJSON_Deletep) cJSON *no = cJSON_Parse(test_raw_body(nb));
        char sb2[25];
        snprintf(sb2, sizeof(sb2), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(no, "sandboxID")));
        _cleanup_free_ char *got = exec_out(&c, key, sb2, "cat /root/mark");
        ASSERT_STREQ(got, "kept-by-e2b\n");
        /* another account cannot start from it */
        E2B_EXPECT(e2btest_api(&e, "POST", "/v2/sandboxes", other, cb), 400, "");
        /* updateNetwork: a deny_all sandbox has no interface to open; the reason, not a 5xx */
        snprintf(path, sizeof(path), "/sandboxes/%s/network", sb);
        E2B_EXPECT(e2btest_api(&e, "PUT", path, key, "{\"allowOut\":[\"198.51.100.7\"],\"denyOut\":[\"0.0.0.0/0\"]}"), 400, "deny_all");
        E2B_EXPECT(e2btest_api(&e, "PUT", path, key, "{\"rules\":{\"api.example.com\":[{\"transform\":{\"headers\":{\"Host\":\"x\"}}}]}}"),
                   400, "rules.api.example.com[0].transform.headers.Host");
        /* what is not served answers 501 with the reason, never 404 */
        snprintf(path, sizeof(path), "/sandboxes/%s/fork", sb);
        if (ctld_nomad())   /* fork is the local driver's (test-memory forks for real) */
                E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{}"), 501, "nomad driver cannot fork");
        else
                E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"count\":0}"), 400, "count must be an integer between 1 and 100");
        E2B_EXPECT(e2btest_api(&e, "GET", "/volumecontent/0123456789abcdef01234567/dir?path=/", NULL, NULL), 401, "token");
        E2B_EXPECT(e2btest_api(&e, "POST", "/v3/templates", key, "{\"name\":\"t\"}"), 501, "");
        /* deleteSnapshot: gone (the sandbox made from it keeps running), then false */
        snprintf(path, sizeof(path), "/sandboxes/%s", sb2);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        snprintf(path, sizeof(path), "/templates/%s", sid);
        E2B_EXPECT(e2btest_api(&e, "DELETE", path, other, NULL), 404, "");
        E2B_EXPECT(e2btest_api(&e, "DELETE", path, key, NULL), 204, "");
        E2B_EXPECT(e2btest_api(&e, "DELETE", path, key, NULL), 404, "\"code\":404");
        ASSERT_EQ(manifest_status(sid), 404);
}

TEST_FULL(registry_unreachable_fails_with_the_reason, 240) {
        /* A registry of our own on a loopback port, started and then stopped. */
        int port = 15000 + (int) (getpid() % 2000);
        char reg[32];
        regtest_start(port, NULL, reg);

        static struct ctld c;
        char sb[25], sid[25];
        _cleanup_free_ char *key = setup(&c, reg, "120s", NULL, true, sb);
        regtest_stop();
        ASSERT_FALSE(test_port_open(port));

        snap_post(&c, key, sb, "no-registry", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_failed(&c, key, sid, 120, "push failed");
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s, "size_bytes")));
        ASSERT_FALSE(local_image(sid));
        /* A failed snapshot cannot be restored; it can be deleted. */
        HTTP_EXPECT_MSG(&c, "POST", "/sandboxes", key, restore_body(sid), 400, "only a ready snapshot");
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
}

/* A registry that wants a login: the agent pushes with [snapshot] username/password; the
 * restore pulls with controld's [snapshots] ones (the Docker driver pulls itself; on Nomad the
 * job's docker task carries them in its auth block and the stand-in pulls as Nomad does). */
TEST_FULL(restore_from_a_registry_that_wants_a_login, 300) {
        _cleanup_free_ char *line = regtest_htpasswd("snapper", "snap-pw");
        char reg[32];
        regtest_start(17000 + (int) (getpid() % 2000), line, reg);
        reg_user = "snapper";
        reg_pass = "snap-pw";

        static struct ctld c;
        char sb[25], sid[25], sb2[25];
        _cleanup_free_ char *key = setup(&c, reg, "120s", NULL, true, sb);
        _cleanup_free_ char *before = exec_out(&c, key, sb, "head -c 65536 /dev/urandom > /root/c1; sha256sum /root/c1");
        snap_post(&c, key, sb, "behind-a-login", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_ready(&c, key, sid, 120);
        ASSERT_FALSE(local_image(sid));
        /* The registry really wants the login: an anonymous pull is refused. */
        char tag[160];
        snprintf(tag, sizeof(tag), "%s/%s:%s", registry, repo, sid);
        ASSERT_TRUE(RUN("docker", "pull", tag) != 0);

        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb, 204);
        ctld_create(&c, key, restore_body(sid), sb2);
        _cleanup_free_ char *after = exec_out(&c, key, sb2, "sha256sum /root/c1");
        ASSERT_STREQ(after, before);
        if (ctld_nomad()) {
                /* The restore's job: the snapshot's image, the login in the docker task's auth block. */
                _cleanup_json_ cJSON *log = nstandin_requests(&standin);
                const cJSON *o, *conf = NULL;
                cJSON_ArrayForEach(o, log) {
                        const char *m = jstr(o, "Method"), *p = jstr(o, "Path");
                        if (m && p && !strcmp(m, "PUT") && !strcmp(p, "/v1/jobs"))
                                conf = cJSON_GetObjectItem(
                                        cJSON_GetArrayItem(
                                                cJSON_GetObjectItem(
                                                        cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "Body"), "Job"), "TaskGroups"), 0),
                                                        "Tasks"),
                                                0),
                                        "Config");
                }
                ASSERT_NOT_NULL(conf);
                /* By digest: repository@sha256:..., never the tag. */
                char by_digest[256];
                snprintf(by_digest, sizeof(by_digest), "%s/%s@%s", registry, repo, jstr(s, "digest"));
                ASSERT_STREQ(jstr(conf, "image"), by_digest);
                const cJSON *auth = cJSON_GetArrayItem(cJSON_GetObjectItem(conf, "auth"), 0);
                ASSERT_STREQ(jstr(auth, "username"), "snapper");
                ASSERT_STREQ(jstr(auth, "password"), "snap-pw");
                ASSERT_STREQ(jstr(auth, "server_address"), reg);
        }
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb2, 204);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
}

/* Issue 24: restores pulled by tag, so whoever could push to the repository could swap a
 * tenant's snapshot for another image under the same tag. A restore now runs the digest
 * recorded when the snapshot completed: overwriting the tag changes nothing. */
TEST_FULL(an_overwritten_tag_cannot_swap_a_restore, 300) {
        static struct ctld c;
        char sb[25], sid[25], sb2[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        free(exec_out(&c, key, sb, "echo the-tenants-own > /root/who"));
        snap_post(&c, key, sb, "by-digest", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_ready(&c, key, sid, 120);
        const char *digest = jstr(s, "digest");
        ASSERT_NOT_NULL(digest);
        ASSERT_TRUE(strncmp(digest, "sha256:", 7) == 0 && strlen(digest) == 71);
        ASSERT_FALSE(local_image(sid));

        /* Someone pushes another image under the snapshot's tag. */
        char tag[160];
        snprintf(tag, sizeof(tag), "%s/%s:%s", registry, repo, sid);
        ASSERT_EQ(RUN("docker", "tag", getenv("PADDOCK_TEST_IMAGE") ? getenv("PADDOCK_TEST_IMAGE") : "paddock/busybox:local", tag), 0);
        ASSERT_EQ(RUN("docker", "push", tag), 0);
        ASSERT_EQ(RUN("docker", "image", "rm", tag), 0);

        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb, 204);
        ctld_create(&c, key, restore_body(sid), sb2);
        _cleanup_free_ char *who = exec_out(&c, key, sb2, "cat /root/who");
        ASSERT_STREQ(who, "the-tenants-own\n");
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb2, 204);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
}

TEST_FULL(free_disk_under_the_floor_refuses, 120) {
        static struct ctld c;
        disk_floor = "1024T";
        char sb[25], sid[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        snap_post(&c, key, sb, "full", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_failed(&c, key, sid, 60, "under the snapshot floor");
        ASSERT_FALSE(local_image(sid));
        ASSERT_EQ(manifest_status(sid), 404);
}

/* The prune that runs every prune_interval also takes the agent socket volumes no sandbox uses
 * any more (Nomad's docker driver leaves one per finished job): ours only, unused only. */
TEST_FULL(leftover_agent_volumes_are_pruned, 120) {
        static struct ctld c;
        char sb[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        char gone[64], other[64];
        char hex[25];
        hexid_new(hex);
        snprintf(gone, sizeof(gone), "paddock-init-%s", hex);
        snprintf(other, sizeof(other), "paddock-init-not-a-sandbox-%d", (int) getpid());
        ASSERT_EQ(RUN("docker", "volume", "create", gone), 0);
        ASSERT_EQ(RUN("docker", "volume", "create", other), 0);
        /* Any volume labelled with a sandbox that no container uses goes too (issue 34: one an
         * image's VOLUME made, left by a remove); one whose label names no sandbox stays. */
        char labelled[64], lbl[64], odd[64];
        hexid_new(hex);
        snprintf(labelled, sizeof(labelled), "paddock-test-labelled-%d", (int) getpid());
        snprintf(lbl, sizeof(lbl), "paddock.sandbox=%s", hex);
        snprintf(odd, sizeof(odd), "paddock-test-labelled-odd-%d", (int) getpid());
        ASSERT_EQ(RUN("docker", "volume", "create", "--label", lbl, labelled), 0);
        ASSERT_EQ(RUN("docker", "volume", "create", "--label", "paddock.sandbox=not-an-id", odd), 0);
        bool pruned = false;
        for (int i = 0; i < 60 && !pruned; i++) {
                usleep(500000);
                pruned = RUN("docker", "volume", "inspect", gone) != 0 && RUN("docker", "volume", "inspect", labelled) != 0;
        }
        ASSERT_TRUE(pruned);
        ASSERT_EQ(RUN("docker", "volume", "inspect", odd), 0);
        ASSERT_EQ(RUN("docker", "volume", "rm", odd), 0);
        ASSERT_TRUE(test_log_has(agent_log, 0, "agent socket volumes of sandboxes gone", 5));
        /* not a sandbox's name: stays; the running sandbox's own volume: stays, and its agent answers */
        ASSERT_EQ(RUN("docker", "volume", "inspect", other), 0);
        ASSERT_EQ(RUN("docker", "volume", "rm", other), 0);
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", sb);
        struct hres r;
        http_req(&c, "POST", path, key, "{\"cmd\":\"test -S /.paddock/run/agent.sock && echo alive\"}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "alive\n");
        hres_done(&r);
}

TEST_FULL(agent_killed_mid_snapshot_completes_on_redelivery, 300) {
        static struct ctld c;
        char sb[25], sid[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        _cleanup_free_ char *out = exec_out(&c, key, sb, "head -c 4000000 /dev/urandom > /root/big; echo ok");
        off_t from = test_log_end(agent_log);
        snap_post(&c, key, sb, "killed", sid);
        /* Kill the agent once it has the job in hand (its commit or push is running). */
        ASSERT_TRUE(test_log_has(agent_log, from, "snapshot job taken", 10));
        agenttest_kill(&agent_pid);
        if (test_log_has(agent_log, from, "snapshot completed", 0))
                test_fail(__FILE__, __LINE__, "the agent finished before it was killed; nothing was tested");
        cJSON *mid = snap_find(&c, key, sid);
        ASSERT_STREQ(jstr(mid, "status"), "creating");
        cJSON_Delete(mid);
        agent_start();
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_ready(&c, key, sid, 120);
        ASSERT_EQ(manifest_status(sid), 200);
        ASSERT_FALSE(local_image(sid));
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
}

/* Job queued while the agent is down, outcome published while controld is down: both wait in
 * their durable queues, and the snapshot becomes ready once both are back. */
TEST_FULL(outcome_survives_a_controld_restart, 240) {
        static struct ctld c;
        char sb[25], sid[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        agent_stop(NULL);
        snap_post(&c, key, sb, "while-away", sid);
        ctld_stop_daemon(&c);
        off_t from = test_log_end(agent_log);
        agent_start();
        ASSERT_TRUE(test_log_has(agent_log, from, "snapshot completed", 120));
        ctld_start_daemon(&c);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_ready(&c, key, sid, 30);
        ASSERT_EQ(manifest_status(sid), 200);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
}

/* True once the named queue exists with a consumer, within timeout_s. */
static bool queue_consumed(const char *name, int timeout_s) {
        for (int i = 0; i < timeout_s * 10; i++) {
                if (amqptest_queue_consumers(name) > 0)
                        return true;
                usleep(100 * 1000);
        }
        return false;
}

/* An operator (or a broker policy) deletes the job and outcome queues under running daemons:
 * RabbitMQ cancels both consumers, they reconnect and declare their queues again, and the
 * next snapshot goes through. (Unannounced, a cancelled consumer would wait forever.) */
TEST_FULL(deleted_queues_come_back_and_snapshots_still_flow, 300) {
        static struct ctld c;
        char sb[25], sid[25], jobs[160], events[160];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        snprintf(jobs, sizeof(jobs), "%s.snapshots.%s", exchange, node_id);
        snprintf(events, sizeof(events), "%s.snapshot-events", exchange);
        ASSERT_TRUE(queue_consumed(jobs, 20));
        ASSERT_TRUE(queue_consumed(events, 20));
        off_t from = test_log_end(agent_log);
        amqptest_queue_delete(jobs);
        amqptest_queue_delete(events);
        ASSERT_TRUE(test_log_has(agent_log, from, "consuming snapshot jobs", 30));
        ASSERT_TRUE(queue_consumed(jobs, 30));
        ASSERT_TRUE(queue_consumed(events, 30));
        snap_post(&c, key, sb, "after-delete", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_ready(&c, key, sid, 120);
        ASSERT_EQ(manifest_status(sid), 200);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
}

TEST_FULL(no_agent_past_the_deadline_fails, 120) {
        static struct ctld c;
        char sb[25], sid[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "10s", NULL, false, sb);
        snap_post(&c, key, sb, "orphan", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_failed(&c, key, sid, 40, "did not finish the snapshot within 10 s");
        /* A snapshot of a sandbox that is not ready is refused. */
        char path[96];
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb, 204);
        snprintf(path, sizeof(path), "/sandboxes/%s/snapshots", sb);
        HTTP_EXPECT_MSG(&c, "POST", path, key, "{\"name\":\"late\"}", 400, "must be ready");
}

/* controld SIGKILLed at point while it handles a snapshot POST (no answer comes), then
 * started again; returns the snapshot the POST recorded. */
static void snap_crash_at(struct ctld *c, const char *key, const char *sb, const char *point, char ret_id[25]) {
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/snapshots", sb);
        ctld_crash_at(c, point, "POST", path, key, "{\"name\":\"crashed\"}", 0);
        ctld_newest_id(c, "snapshots", ret_id);
}

/* The crash matrix's snapshot part: controld killed once the snapshot is recorded (no job
 * went out) ends it failed with the reason at its deadline, with no image; killed once the job
 * is the node's, the snapshot completes and is ready after the restart. */
TEST_FULL(controld_killed_mid_snapshot_ends_in_a_final_state, 180) {
        static struct ctld c;
        char sb[25], a[25], b[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "10s", NULL, true, sb);
        snap_crash_at(&c, key, sb, "snapshot.recorded", a);
        _cleanup_(cJSON_Deletep) cJSON *fa = snap_wait_failed(&c, key, a, 40, "did not finish the snapshot within 10 s");
        ASSERT_EQ(manifest_status(a), 404);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", a, 204);
        snap_crash_at(&c, key, sb, "snapshot.published", b);
        _cleanup_(cJSON_Deletep) cJSON *fb = snap_wait_ready(&c, key, b, 60);
        ASSERT_EQ(manifest_status(b), 200);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", b, 204);
}

/* ---- the data-root disk full ---- */

static char fill_path[PATH_MAX];

/* Removes the fill; btrfs gives the space back at its next commit, which syncfs makes now. */
static void fill_remove(void *ud) {
        (void) ud;
        if (!fill_path[0])
                return;
        (void) unlink(fill_path);
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", fill_path);
        int fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
                (void) syncfs(fd);
                close(fd);
        }
        fill_path[0] = 0;
}

/* Free bytes on the filesystem of path. */
static uint64_t fs_avail(const char *path) {
        struct statfs st;
        ASSERT_EQ(statfs(path, &st), 0);
        return (uint64_t) st.f_bavail * (uint64_t) st.f_bsize;
}

/* Fills Docker's data-root filesystem (the btrfs image services.sh mounts: never the host's own
 * disk) with one preallocated file until under 8 MiB are left; removed at exit whatever happens. */
static void data_root_fill(char root[PATH_MAX]) {
        snprintf(root, PATH_MAX, "%s", ctld_docker_root());
        struct statfs st;
        ASSERT_EQ(statfs(root, &st), 0);
        if (st.f_type != BTRFS_SUPER_MAGIC)
                TEST_SKIP("Docker's data-root is not the btrfs image tests/env/services.sh makes: not this test's to fill");
        char parent[PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", root);
        snprintf(fill_path, sizeof(fill_path), "%s/paddock-test-fill-%d", dirname(parent), (int) getpid());
        test_on_exit(fill_remove, NULL);
        int fd = open(fill_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        /* btrfs keeps some space back; take what fallocate gives in shrinking steps */
        for (uint64_t step = UINT64_C(1) << 34; step >= UINT64_C(1) << 20 && fs_avail(root) > (UINT64_C(8) << 20);) {
                struct stat sb;
                ASSERT_EQ(fstat(fd, &sb), 0);
                uint64_t want = fs_avail(root) - (UINT64_C(4) << 20);
                if (want > step)
                        want = step;
                if (fallocate(fd, 0, sb.st_size, (off_t) want) < 0)
                        step /= 2;
        }
        close(fd);
        fprintf(stderr, "  data-root %s: %llu KiB free after the fill\n", root, (unsigned long long) (fs_avail(root) >> 10));
        ASSERT_TRUE(fs_avail(root) <= (UINT64_C(8) << 20));
}

/* Issue 24's fault: Docker's data-root disk full during a snapshot and a create. The snapshot
 * fails with the reason (the floor is set below what is left, so Docker's own ENOSPC is what
 * stops it), the agent's journal says why, nothing of it is left; a create either works or is
 * refused with the reason and leaves no container; once the space is back both work again
 * without anyone touching the platform. */
TEST_FULL(data_root_full_fails_with_the_reason_then_heals, 300) {
        static struct ctld c;
        char sb[25], sid[25], sid2[25], sb2[25], root[PATH_MAX];
        disk_floor = "1M";
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        _cleanup_free_ char *w = exec_out(&c, key, sb, "head -c 48000000 /dev/urandom > /root/big && echo written");
        ASSERT_STREQ(w, "written\n");
        data_root_fill(root);

        off_t from = test_log_end(agent_log);
        snap_post(&c, key, sb, "full-disk", sid);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait_failed(&c, key, sid, 90, "no space left on device");
        ASSERT_TRUE(test_log_has(agent_log, from, "no space left on device", 5));
        ASSERT_FALSE(local_image(sid));
        ASSERT_EQ(manifest_status(sid), 404);

        struct hres r;
        http_req(&c, "POST", "/sandboxes", key, DENY, &r);
        fprintf(stderr, "  create on a full data-root: %ld %.300s\n", r.status, r.body ?: "");
        if (r.status == 201) {
                DELETE_EXPECT(&c, key, "/sandboxes/%s", hres_data_str(&r, "id"), 204);
        } else {
                ASSERT_TRUE(r.status == 503 || r.status == 507);
                ASSERT_CONTAINS(hres_message(&r) ?: "", "space");
                char failed[25];
                ctld_newest_id(&c, "sandboxes", failed);
                char name[64];
                snprintf(name, sizeof(name), "paddock-%s", failed);
                ASSERT_TRUE(RUN("docker", "container", "inspect", name) != 0);
                snprintf(name, sizeof(name), "paddock-init-%s", failed);
                ASSERT_TRUE(RUN("docker", "volume", "inspect", name) != 0);
                ASSERT_TRUE(test_log_has(c.log, 0, "no space left on device", 2));
        }
        hres_done(&r);

        /* The space comes back: both work again. */
        fill_remove(NULL);
        for (int i = 0; i < 60 && fs_avail(root) < (UINT64_C(1) << 30); i++)
                usleep(500000);
        ASSERT_TRUE(fs_avail(root) >= (UINT64_C(1) << 30));
        snap_post(&c, key, sb, "after", sid2);
        _cleanup_(cJSON_Deletep) cJSON *s2 = snap_wait_ready(&c, key, sid2, 120);
        ctld_create(&c, key, DENY, sb2);
        _cleanup_free_ char *again = exec_out(&c, key, sb2, "echo back");
        ASSERT_STREQ(again, "back\n");
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb2, 204);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid2, 204);
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
}

/* Issue 24: snapshots had no per-account limits. The plan's snapshot_max_inflight (here 2),
 * snapshot_max_manual (3) and snapshot_max_total_gb (1) hold per account, each refused with
 * the reason, and another account keeps its own budget. No agent runs, so jobs stay creating;
 * "ready" and its size are written to the store as the agent's outcome would. */
TEST_FULL(plan_limits_bound_each_accounts_snapshots, 120) {
        static struct ctld c;
        char sb[25], a[25], b[25], x[25], sb_o[25], o1[25], path[96], q[200];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s",
                                         "snapshot_max_manual = 3\nsnapshot_max_inflight = 2\nsnapshot_max_total_gb = 1\n",
                                         false, sb);
        snprintf(path, sizeof(path), "/sandboxes/%s/snapshots", sb);
        snap_post(&c, key, sb, "a", a);
        snap_post(&c, key, sb, "b", b);
        HTTP_EXPECT_MSG(&c, "POST", path, key, "{\"name\":\"c\"}", 429, "2 snapshots in progress at once");
        /* Another account: its own budget. */
        _cleanup_free_ char *other = ctld_account_key(&c, "other", "snap", NULL);
        ctld_create(&c, other, DENY, sb_o);
        snap_post(&c, other, sb_o, "o1", o1);

        /* a is done, 1 GiB in the registry: the account's bytes are used up. */
        snprintf(q, sizeof(q), "UPDATE snapshots SET status = 'ready', size_bytes = 1073741824 WHERE id = '%s'", a);
        free(ctld_db_query(&c, q));
        HTTP_EXPECT_MSG(&c, "POST", path, key, "{\"name\":\"c\"}", 403, "use your plan's 1 GB (snapshot_max_total_gb)");
        snprintf(q, sizeof(q), "UPDATE snapshots SET size_bytes = 1000 WHERE id = '%s'", a);
        free(ctld_db_query(&c, q));
        snap_post(&c, key, sb, "c", x);
        /* a, b and c are the 3 manual snapshots the plan allows. */
        snprintf(q, sizeof(q), "UPDATE snapshots SET status = 'ready', size_bytes = 1000 WHERE id IN ('%s', '%s')", b, x);
        free(ctld_db_query(&c, q));
        HTTP_EXPECT_MSG(&c, "POST", path, key, "{\"name\":\"d\"}", 403, "up to 3 snapshots (snapshot_max_manual)");
        /* Deleting one frees its place (the registry has no manifest for it: that is fine). */
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", b, 204);
        snap_post(&c, key, sb, "d", x);
}

TEST_FULL(destroy_mid_snapshot_is_safe, 240) {
        static struct ctld c;
        char sb[25], sid[25];
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", NULL, true, sb);
        snap_post(&c, key, sb, "racing", sid);
        DELETE_EXPECT(&c, key, "/sandboxes/%s", sb, 204);
        _cleanup_(cJSON_Deletep) cJSON *s = snap_wait(&c, key, sid, 120);
        /* Either outcome is honest; what matters is that it ends and leaves nothing behind. */
        if (!strcmp(jstr(s, "status"), "failed"))
                ASSERT_CONTAINS(jstr(s, "failure_reason"), "container");
        else
                ASSERT_STREQ(jstr(s, "status"), "ready");
        ASSERT_FALSE(local_image(sid));
        DELETE_EXPECT(&c, key, "/sandboxes/snapshots/%s", sid, 204);
        ASSERT_EQ(manifest_status(sid), 404);
}

/* ids of the account's snapshots in `status` (comma-joined into out). */
static int snap_ids(struct ctld *c, const char *key, const char *status, char *out, size_t outlen) {
        struct hres r;
        int n = 0;
        out[0] = 0;
        http_req(c, "GET", "/sandboxes/snapshots?limit=100", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "data"), *it;
        cJSON_ArrayForEach(it, d) {
                if (strcmp(jstr(it, "status"), status) != 0)
                        continue;
                size_t o = strlen(out);
                snprintf(out + o, outlen - o, "%s%s", n ? "," : "", jstr(it, "id"));
                n++;
        }
        hres_done(&r);
        return n;
}

/* Count retention (plan "snap": snapshot_max_count = 1): every minute a ready automatic
 * snapshot, and the next one replaces it, the older going with its image. */
struct auto_flow {
        struct ctld *c;
        const char *key;
};

static void *count_retention(void *p) {
        struct auto_flow *f = p;
        struct ctld *c = f->c;
        const char *key = f->key;
        char sb[25], first[512] = "", now[512];
        HTTP_EXPECT_MSG(c, "POST", "/sandboxes", key,
                        "{\"snapshotMode\":\"automatic\",\"snapshotFrequency\":\"61 * * * *\"}", 400, "minute field");
        ctld_create(c, key,
                    "{\"snapshotMode\":\"automatic\",\"snapshotFrequency\":\"* * * * *\",\"egress\":{\"mode\":\"deny_all\"}}",
                    sb);
        /* Every minute: a ready automatic snapshot within two minutes. */
        for (int i = 0; i < 130 * 2 && snap_ids(c, key, "ready", first, sizeof(first)) < 1; i++)
                usleep(500000);
        ASSERT_EQ(snap_ids(c, key, "ready", first, sizeof(first)), 1);
        ASSERT_EQ(manifest_status(first), 200);
        /* The next one replaces it: the plan keeps one, the older goes with its image. */
        bool replaced = false;
        for (int i = 0; i < 130 * 2 && !replaced; i++) {
                replaced = snap_ids(c, key, "ready", now, sizeof(now)) == 1 && strcmp(now, first) != 0;
                if (!replaced)
                        usleep(500000);
        }
        ASSERT_TRUE(replaced);
        ASSERT_EQ(manifest_status(first), 404);
        ASSERT_TRUE(snap_find(c, key, first) == NULL);
        /* Stop the schedule before deleting what is left. */
        DELETE_EXPECT(c, key, "/sandboxes/%s", sb, 204);
        char all[1024], *save = NULL;
        for (int i = 0; i < 120 && snap_ids(c, key, "creating", all, sizeof(all)) > 0; i++)
                usleep(500000);
        snap_ids(c, key, "ready", all, sizeof(all));
        for (char *q = strtok_r(all, ",", &save); q; q = strtok_r(NULL, ",", &save))
                DELETE_EXPECT(c, key, "/sandboxes/snapshots/%s", q, 204);
        return NULL;
}

/* Age retention (plan "snap-age": snapshot_max_age = 1m): an automatic snapshot older than that
 * goes with its image, even when the count is under the cap and its sandbox is gone; a manual
 * one stays. */
static void *age_retention(void *p) {
        struct auto_flow *f = p;
        struct ctld *c = f->c;
        const char *key = f->key;
        char sb[25], autoid[512] = "", manual[25];
        ctld_create(c, key,
                    "{\"snapshotMode\":\"automatic\",\"snapshotFrequency\":\"* * * * *\",\"egress\":{\"mode\":\"deny_all\"}}",
                    sb);
        snap_post(c, key, sb, "kept-by-hand", manual);
        cJSON *m = snap_wait(c, key, manual, 120);
        ASSERT_STREQ(jstr(m, "status"), "ready");
        cJSON_Delete(m);
        /* The first automatic one (the manual one is ready too: two ready, one automatic). */
        for (int i = 0; i < 130 * 2 && snap_ids(c, key, "ready", autoid, sizeof(autoid)) < 2; i++)
                usleep(500000);
        ASSERT_EQ(snap_ids(c, key, "ready", autoid, sizeof(autoid)), 2);
        /* Stop the schedule: retention must act on a destroyed sandbox's snapshots too. */
        DELETE_EXPECT(c, key, "/sandboxes/%s", sb, 204);
        char all[1024], *save = NULL;
        for (int i = 0; i < 120 && snap_ids(c, key, "creating", all, sizeof(all)) > 0; i++)
                usleep(500000);
        /* Every automatic one (ready now) expires within a minute of its creation. */
        int n = 0;
        for (int i = 0; i < 100 * 2 && (n = snap_ids(c, key, "ready", all, sizeof(all))) > 1; i++)
                usleep(500000);
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(all, manual);
        ASSERT_EQ(manifest_status(manual), 200);
        for (char *q = strtok_r(autoid, ",", &save); q; q = strtok_r(NULL, ",", &save))
                if (strcmp(q, manual) != 0)
                        ASSERT_EQ(manifest_status(q), 404);
        DELETE_EXPECT(c, key, "/sandboxes/snapshots/%s", manual, 204);
        return NULL;
}

/* Both retentions of automatic snapshots, side by side: each waits on the minute schedule, so
 * they share the wait (two accounts on two plans of one controld). */
TEST_FULL(automatic_snapshots_kept_by_count_and_by_age, 480) {
        static struct ctld c;
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s",
                                         "snapshot_max_count = 1\n"
                                         "[plan \"snap-age\"]\nmax_concurrent = 10\nregions = local\nmax_cpu = 1000\n"
                                         "max_memory = 1024\nmax_disk = 5\nsnapshot_max_count = 10\nsnapshot_max_age = 1m\n",
                                         true, NULL);
        _cleanup_free_ char *age_key = ctld_account_key(&c, "age", "snap-age", NULL);
        struct auto_flow count = { &c, key }, age = { &c, age_key };
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, age_retention, &age), 0);
        count_retention(&count);
        ASSERT_EQ(pthread_join(t, NULL), 0);
}

/* E2B's pause (issue 21) keeps the filesystem through a snapshot: a file written through envd
 * is there again after POST /pause {memory:false} and /connect; a second pause replaces the
 * first pause's snapshot; a pause keeping memory is refused by name. */
/* envd's /files of sandbox id, as the holder of its token. */
static char *e2b_files(struct e2b *e, const char *method, const char *path, const char *id, const char *token, const char *ctype,
                       const void *body, size_t len) {
        _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, token);
        return e2btest_req(e, method, path, h, ctype, body, len);
}

TEST_FULL(e2b_pause_keeps_the_filesystem, 600) {
        struct ctld c;
        struct e2b e = { .port = test_free_port() };
        char more[160];
        snprintf(more, sizeof(more), "[e2b]\nlisten = 127.0.0.1:%d\nbase_template = busybox\n", e.port);
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", more, true, NULL);
        static const char create[] = "{\"templateID\":\"base\",\"timeout\":900,\"allow_internet_access\":false}";
        _cleanup_free_ char *cr = e2btest_api(&e, "POST", "/sandboxes", key, create);
        ASSERT_EQ(test_raw_status(cr), 201);
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(cr));
        char id[25], tok[65], path[128];
        snprintf(id, sizeof(id), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "sandboxID")));
        snprintf(tok, sizeof(tok), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "envdAccessToken")));
        E2B_EXPECT(e2b_files(&e, "POST", "/files?path=/data/keep.txt", id, tok, "application/octet-stream", "kept", 4),
                   200, "/data/keep.txt");
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        {
                /* memory true (the default): kept on a Docker engine with experimental features (issue 37;
                 * test-memory tests it), else refused by name */
                _cleanup_free_ char *pr = e2btest_api(&e, "POST", path, key, "{}");
                if (test_raw_status(pr) == 204) {
                        snprintf(path, sizeof(path), "/sandboxes/%s/connect", id);
                        E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"timeout\":900}"), 201, id);
                        /* restored in place, its files with it (a connect right after the pause once
                         * failed the restore and started the template afresh without them) */
                        E2B_EXPECT(e2b_files(&e, "GET", "/files?path=/data/keep.txt", id, tok, NULL, NULL, 0), 200, "kept");
                } else if (test_raw_status(pr) != 501 || !strstr(test_raw_body(pr), "memory"))
                        test_fail(__FILE__, __LINE__, "pause {} -> %.400s", pr);
        }
        for (int round = 1; round <= 2; round++) {
                snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
                E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"memory\":false}"), 204, "");
                snprintf(path, sizeof(path), "/sandboxes/%s", id);
                E2B_EXPECT(e2btest_api(&e, "GET", path, key, NULL), 200, "\"state\":\"paused\"");
                E2B_EXPECT(e2b_files(&e, "GET", "/files?path=/data/keep.txt", id, tok, NULL, NULL, 0), 502,
                           "paused");
                snprintf(path, sizeof(path), "/sandboxes/%s/connect", id);
                E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"timeout\":900}"), 201, id);
                E2B_EXPECT(e2b_files(&e, "GET", "/files?path=/data/keep.txt", id, tok, NULL, NULL, 0), 200, "kept");
        }
        /* one pause snapshot is left (the second replaced the first), listed in the Brimble API */
        struct hres r;
        http_req(&c, "GET", "/sandboxes/snapshots", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        int pauses = 0;
        for (const char *p = r.body; (p = strstr(p, "\"e2b-pause\"")); p++)
                pauses++;
        hres_done(&r);
        ASSERT_EQ(pauses, 1);
}

/* Polls E2B's GET /sandboxes/{id} until its body holds needle (up to secs): the last body. */
static char *e2b_wait_for(struct e2b *e, const char *key, const char *id, const char *needle, int secs) {
        char path[64];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        char *got = NULL;
        for (int i = 0; i < secs * 5; i++) {
                free(got);
                got = e2btest_api(e, "GET", path, key, NULL);
                if (strstr(got, needle))
                        break;
                usleep(200 * 1000);
        }
        return got;
}

/* A sandbox's end that pauses it (issue 37: E2B's autoPause, the Brimble API's lifecycle): at
 * its timeout a ready sandbox is paused, not destroyed; it stays paused past its end; connect
 * or resume brings it back with its files and a new end. With its memory, with its filesystem
 * (E2B's snapshot) where autoPauseMemory is false, the Brimble API's pause for a sandbox made
 * there; keepMemory for a networked sandbox is refused at create. */
TEST_FULL(a_sandbox_at_its_end_pauses_as_its_lifecycle_says, 600) {
        struct ctld c;
        struct e2b e = { .port = test_free_port() };
        char more[160], path[128];
        snprintf(more, sizeof(more), "[e2b]\nlisten = 127.0.0.1:%d\nbase_template = busybox\n", e.port);
        _cleanup_free_ char *key = setup(&c, SHARED_REGISTRY, "120s", more, true, NULL);
        static const char *const bodies[] = {
                "{\"templateID\":\"base\",\"timeout\":4,\"autoPause\":true,\"autoResume\":{\"enabled\":true},"
                "\"allow_internet_access\":false}",
                "{\"templateID\":\"base\",\"timeout\":4,\"autoPause\":true,\"autoPauseMemory\":false,\"allow_internet_access\":false}",
        };
        for (size_t i = 0; i < ELEMENTSOF(bodies); i++) {
                _cleanup_free_ char *cr = e2btest_api(&e, "POST", "/sandboxes", key, bodies[i]);
                if (i == 0 && ctld_nomad()) {
                        /* the Nomad driver keeps no memory: refused at create, by name */
                        E2B_EXPECT(xstrdup(cr), 501, "autoPauseMemory");
                        continue;
                }
                ASSERT_EQ(test_raw_status(cr), 201);
                _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(cr));
                char id[25], tok[65];
                snprintf(id, sizeof(id), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "sandboxID")));
                snprintf(tok, sizeof(tok), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "envdAccessToken")));
                snprintf(path, sizeof(path), "/sandboxes/%s", id);
                E2B_EXPECT(e2btest_api(&e, "GET", path, key, NULL), 200,
                           i == 0 ? "\"lifecycle\":{\"onTimeout\":\"pause\",\"autoResume\":true}"
                                  : "\"lifecycle\":{\"onTimeout\":\"pause\",\"autoResume\":false}");
                E2B_EXPECT(e2b_files(&e, "POST", "/files?path=/data/end.txt", id, tok, "application/octet-stream", "kept", 4),
                           200, "/data/end.txt");
                _cleanup_free_ char *p = e2b_wait_for(&e, key, id, "\"state\":\"paused\"", 90);
                ASSERT_CONTAINS(p, "\"state\":\"paused\"");
                /* past its end it stays paused: the reaper does not destroy it */
                sleep(3);
                snprintf(path, sizeof(path), "/sandboxes/%s", id);
                E2B_EXPECT(e2btest_api(&e, "GET", path, key, NULL), 200, "\"state\":\"paused\"");
                struct hres r;
                http_req(&c, "GET", path, key, NULL, &r);
                ASSERT_EQ(r.status, 200);
                /* the first kept its memory (no network, Docker's checkpoint API), the second did not ask */
                ASSERT_CONTAINS(r.body, i == 0 ? "\"memory_kept\":true" : "\"memory_kept\":false");
                hres_done(&r);
                if (i == 0) {
                        /* autoResume: a call to envd wakes it (a call without its token does not) */
                        E2B_EXPECT(e2b_files(&e, "GET", "/files?path=/data/end.txt", id, "0", NULL, NULL, 0), 502, "paused");
                        E2B_EXPECT(e2b_files(&e, "GET", "/files?path=/data/end.txt", id, tok, NULL, NULL, 0), 200, "kept");
                } else {
                        E2B_EXPECT(e2b_files(&e, "GET", "/files?path=/data/end.txt", id, tok, NULL, NULL, 0), 502, "paused");
                        snprintf(path, sizeof(path), "/sandboxes/%s/connect", id);
                        E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"timeout\":60}"), 201, id);
                        E2B_EXPECT(e2b_files(&e, "GET", "/files?path=/data/end.txt", id, tok, NULL, NULL, 0), 200, "kept");
                }
                /* a new end: running, not paused again at once */
                sleep(2);
                snprintf(path, sizeof(path), "/sandboxes/%s", id);
                E2B_EXPECT(e2btest_api(&e, "GET", path, key, NULL), 200, "\"state\":\"running\"");
                E2B_EXPECT(e2btest_api(&e, "DELETE", path, key, NULL), 204, "");
        }

        /* The Brimble API: lifecycle.onTimeout pause; its end brought near through E2B's timeout */
        struct hres r;
        http_req(&c, "POST", "/sandboxes", key, "{\"egress\":{\"mode\":\"deny_all\"},\"lifecycle\":{\"onTimeout\":\"pause\"}}", &r);
        ASSERT_EQ(r.status, 201);
        char id[25];
        snprintf(id, sizeof(id), "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_CONTAINS(r.body, "\"lifecycle\":{\"onTimeout\":\"pause\",\"keepMemory\":false,\"autoResume\":false}");
        hres_done(&r);
        /* keepMemory for a networked sandbox: refused at create by name on host networking, and
         * on Nomad, which keeps no memory at all; on gVisor's own network stack it is taken
         * (test-memory and the E2B SDK sessions pause such sandboxes; this test's node agent
         * enforces no egress, so it places none), and a value that is not a boolean is named */
        if (!ctld_nomad() && ctld_netstack(&c))
                http_req(&c, "POST", "/sandboxes", key, "{\"lifecycle\":{\"onTimeout\":\"pause\",\"keepMemory\":1}}", &r);
        else
                http_req(&c, "POST", "/sandboxes", key, "{\"lifecycle\":{\"onTimeout\":\"pause\",\"keepMemory\":true}}", &r);
        ASSERT_EQ(r.status, ctld_nomad() ? 501 : 400);   /* Nomad: no memory at all */
        ASSERT_CONTAINS(r.body, "lifecycle.keepMemory");
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s/timeout", id);
        E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"timeout\":2}"), 204, "");
        snprintf(path, sizeof(path), "/sandboxes/%s/wait?timeout=60&status=paused", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "status"), "paused");
        hres_done(&r);
        sleep(3);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "paused");
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
        http_req(&c, "POST", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        sleep(2);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        hres_done(&r);

        /* keepMemory and autoResume: a command sent to it while paused resumes it and runs */
        if (ctld_nomad())
                return;   /* no memory kept on Nomad (refused at create, as above) */
        http_req(&c, "POST", "/sandboxes", key,
                 "{\"egress\":{\"mode\":\"deny_all\"},\"lifecycle\":{\"onTimeout\":\"pause\",\"keepMemory\":true,\"autoResume\":true}}", &r);
        ASSERT_EQ(r.status, 201);
        snprintf(id, sizeof(id), "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        _cleanup_free_ char *w = exec_out(&c, key, id, "echo before > /tmp/mark && echo ok");
        ASSERT_STREQ(w, "ok\n");
        snprintf(path, sizeof(path), "/sandboxes/%s/timeout", id);
        E2B_EXPECT(e2btest_api(&e, "POST", path, key, "{\"timeout\":2}"), 204, "");
        snprintf(path, sizeof(path), "/sandboxes/%s/wait?timeout=60&status=paused", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "paused");
        hres_done(&r);
        /* /tmp is in memory: only a resume with the memory kept finds the mark there */
        _cleanup_free_ char *back = exec_out(&c, key, id, "cat /tmp/mark");
        ASSERT_STREQ(back, "before\n");
}
