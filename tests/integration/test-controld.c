/* HTTP-level tests of controld against real dockerd + runsc: lifecycle, isolation,
 * quota races, restart with live sandboxes, provisioning failure. */
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"

/* method /sandboxes/{id}<suffix> answers status and, with msg, exactly that message. */
static void sb_expect(struct ctld *c, const char *method, const char *key, const char *id, const char *suffix, long status,
                      const char *msg) {
        char path[128];
        struct hres r;
        snprintf(path, sizeof(path), "/sandboxes/%s%s", id, suffix);
        http_req(c, method, path, key, NULL, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "%s %s: HTTP %ld, want %ld: %.400s", method, path, r.status, status, r.body);
        if (msg)
                ASSERT_STREQ(hres_message(&r), msg);
        hres_done(&r);
}

/* GET /sandboxes/{id}; the response is the caller's (hres_done). */
static void sb_get(struct ctld *c, const char *key, const char *id, struct hres *r) {
        char path[64];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(c, "GET", path, key, NULL, r);
}

TEST_FULL(lifecycle_create_get_pause_resume_destroy, 180) {
        struct ctld c;
        struct hres r;
        char id[25], path[128];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "alice", NULL);

        http_req(&c, "POST", "/sandboxes", key, "{\"name\":\"my-box\",\"specs\":{\"cpu\":300,\"memory\":256}}", &r);
        ASSERT_EQ(r.status, 201);
        ASSERT_STREQ(hres_message(&r), "Sandbox created");
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        ASSERT_STREQ(hres_data_str(&r, "name"), "my-box");
        ASSERT_STREQ(hres_data_str(&r, "template"), "busybox");
        ASSERT_NOT_NULL(hres_data_str(&r, "created_at"));
        ASSERT_NOT_NULL(hres_data_str(&r, "expires_at"));
        ASSERT_EQ(strlen(r.request_id), 24);
        snprintf(id, sizeof(id), "%s", hres_data_str(&r, "id"));
        ASSERT_EQ(strlen(id), 24);
        hres_done(&r);
        /* The container really runs under gVisor with the asked limits. */
        ASSERT_TRUE(docker_container_running(container_name(id)));
        {
                _cleanup_free_ char *out = NULL;
                char *argv[] = { "docker", "inspect", "-f",
                                 "{{.HostConfig.Runtime}} {{.HostConfig.MemoryReservation}} {{.HostConfig.CpuShares}} "
                                 "{{.HostConfig.PidsLimit}} {{.HostConfig.CapDrop}} {{.HostConfig.SecurityOpt}}",
                                 container_name(id), NULL };
                ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
                ASSERT_CONTAINS(out, "runsc");
                ASSERT_CONTAINS(out, " 268435456 300 4096 [ALL] [no-new-privileges]");
        }

        sb_get(&c, key, id, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_message(&r), "Sandbox fetched");
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "specs"), "memory")->valueint, 256);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "region"), "name")->valuestring, "local");
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "egress"), "mode")->valuestring, "open");
        ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(d, "block_outbound")));
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(d, "destroyed_at")));
        ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "timings"), "place_ms")));
        hres_done(&r);

        /* pause -> paused, container gone */
        sb_expect(&c, "POST", key, id, "/pause", 200, "Sandbox pause requested");
        snprintf(path, sizeof(path), "/sandboxes/%s/wait?timeout=60", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "status")->valuestring, "paused");
        ASSERT_FALSE(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "paused_at")));
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(id)));

        /* pausing a paused sandbox is a clear 400 */
        sb_expect(&c, "POST", key, id, "/pause", 400, "Sandbox is paused; only ready sandboxes can be paused");

        /* resume -> ready, a fresh container */
        sb_expect(&c, "POST", key, id, "/resume", 200, "Sandbox resume requested");
        snprintf(path, sizeof(path), "/sandboxes/%s/wait?timeout=60&status=ready", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "status")->valuestring, "ready");
        hres_done(&r);
        ASSERT_TRUE(docker_container_running(container_name(id)));
        sb_expect(&c, "POST", key, id, "/resume", 400, "Sandbox is ready; only paused sandboxes can be resumed");

        /* list shows it */
        http_req(&c, "GET", "/sandboxes?page=1&limit=10", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_EQ(cJSON_GetObjectItem(d, "totalCount")->valueint, 1);
        ASSERT_EQ(cJSON_GetObjectItem(d, "currentPage")->valueint, 1);
        ASSERT_EQ(cJSON_GetObjectItem(d, "totalPages")->valueint, 1);
        ASSERT_EQ(cJSON_GetObjectItem(d, "limit")->valueint, 10);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "data"), 0), "id")->valuestring, id);
        hres_done(&r);

        /* destroy: 204, container gone, record says why and when; again: still 204 */
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(&c, "DELETE", path, key, NULL, &r);
        ASSERT_EQ(r.status, 204);
        ASSERT_EQ(r.len, 0);
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        http_req(&c, "GET", path, key, NULL, &r);
        d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "status")->valuestring, "destroyed");
        ASSERT_STREQ(cJSON_GetObjectItem(d, "destroy_reason")->valuestring, "user");
        ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(d, "destroyed_at")));
        hres_done(&r);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        /* operations on a destroyed sandbox are refused clearly */
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        HTTP_EXPECT_MSG(&c, "POST", path, key, NULL, 400, "destroyed");
}

/* The Brimble SDK's own flow (issue 25): pause, one refresh, resume at once. The pause answers
 * once the sandbox is paused, so the refresh sees `paused` and the resume is accepted; the
 * workspace comes back. */
TEST_FULL(sdk_pause_then_resume_at_once, 180) {
        struct ctld c;
        struct hres r;
        char id[25];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "sdk-user", "{\"persistent\":true,\"persistentDiskGB\":10}", id);
        ctld_exec(&c, key, id, "echo kept > /workspace/note", 30, &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);

        sb_expect(&c, "POST", key, id, "/pause", 200, "Sandbox pause requested");
        sb_get(&c, key, id, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "paused");
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        sb_expect(&c, "POST", key, id, "/resume", 200, "Sandbox resume requested");
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        CTLD_EXEC_EXPECT(&c, key, id, "cat /workspace/note", "kept\n");
        /* Unchanged: resuming a ready sandbox is refused. */
        sb_expect(&c, "POST", key, id, "/resume", 400, "Sandbox is ready; only paused sandboxes can be resumed");
        ctld_stop(&c);
}

/* A resume sent while the sandbox is still pausing (another client's pause under way) waits
 * for the pause to settle and resumes instead of refusing; the pause itself answers 200 only
 * once the sandbox is paused (issue 35: never a success before the state is reached). */
struct pause_call {
        struct ctld *c;
        const char *key, *id;
        long status;
};

static void *pause_thread(void *ud) {
        struct pause_call *p = ud;
        struct hres r;
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", p->id);
        http_req(p->c, "POST", path, p->key, NULL, &r);
        p->status = r.status;
        hres_done(&r);
        return NULL;
}

TEST_FULL(resume_of_a_pausing_sandbox_waits_for_the_pause, 300) {
        struct ctld c;
        struct hres r;
        char id[25];
        need_docker();
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "hasty", NULL, NULL);
        ctld_create(&c, key, NULL, id);
        int hit = 0;
        for (int round = 0; round < 5 && !hit; round++) {
                struct pause_call pc = { &c, key, id, 0 };
                pthread_t t;
                ASSERT_EQ(pthread_create(&t, NULL, pause_thread, &pc), 0);
                /* the pause's CAS to pausing comes first; catch it there */
                for (int i = 0; i < 200 && !hit; i++) {
                        sb_get(&c, key, id, &r);
                        const char *st = hres_data_str(&r, "status");
                        hit = st && !strcmp(st, "pausing");
                        bool over = st && !strcmp(st, "paused");
                        hres_done(&r);
                        if (over)
                                break;
                        if (!hit)
                                usleep(2000);
                }
                sb_expect(&c, "POST", key, id, "/resume", 200, "Sandbox resume requested");
                pthread_join(t, NULL);
                ASSERT_EQ(pc.status, 200);
                /* the resume answered once ready */
                sb_get(&c, key, id, &r);
                ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
                hres_done(&r);
        }
        ASSERT_TRUE(hit);
        CTLD_EXEC_EXPECT(&c, key, id, "echo alive", "alive\n");
        ctld_stop(&c);
}

TEST_FULL(tenant_isolation_is_404_never_403, 120) {
        struct ctld c;
        struct hres r;
        char id[25], path[160];
        need_docker();
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *ka = ctld_account_key(&c, "tenant-a", NULL, NULL);
        _cleanup_free_ char *kb = ctld_account_key(&c, "tenant-b", NULL, NULL);
        ctld_create(&c, ka, NULL, id);

        static const struct { const char *method, *suffix; } ops[] = {
                { "GET", "" }, { "DELETE", "" }, { "POST", "/pause" }, { "POST", "/resume" },
                { "GET", "/wait?timeout=1" }, { "GET", "/stats" },
        };
        for (size_t i = 0; i < ELEMENTSOF(ops); i++) {
                snprintf(path, sizeof(path), "/sandboxes/%s%s", id, ops[i].suffix);
                http_req(&c, ops[i].method, path, kb, NULL, &r);
                if (r.status != 404)
                        test_fail(__FILE__, __LINE__, "%s %s as B -> %ld %s", ops[i].method, path, r.status, r.body);
                ASSERT_STREQ(hres_message(&r), "Sandbox not found");
                hres_done(&r);
        }
        http_req(&c, "GET", "/sandboxes", kb, NULL, &r);
        ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "totalCount")->valueint, 0);
        hres_done(&r);
        /* A's sandbox is untouched by B's attempts. */
        sb_get(&c, ka, id, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        hres_done(&r);
        ASSERT_TRUE(docker_container_running(container_name(id)));
}

TEST(auth_missing_invalid_bearer_revoked) {
        struct ctld c;
        struct hres r;
        need_docker();
        ctld_start(&c, NULL, NULL);
        char acc[25];
        _cleanup_free_ char *key = ctld_account_key(&c, "auth", NULL, acc);

        http_req(&c, "GET", "/sandboxes", NULL, NULL, &r);
        ASSERT_EQ(r.status, 401);
        ASSERT_CONTAINS(hres_message(&r), "x-brimble-key");
        ASSERT_EQ(strlen(r.request_id), 24);
        hres_done(&r);
        http_req(&c, "GET", "/sandboxes", "pdk_nottherightkey", NULL, &r);
        ASSERT_EQ(r.status, 401);
        ASSERT_STREQ(hres_message(&r), "Invalid API key");
        hres_done(&r);

        char bearer[256];
        snprintf(bearer, sizeof(bearer), "Authorization: Bearer %s", key);
        const char *h[] = { bearer, "x-request-id: trace-me-123", NULL };
        http_req_full(&c, "GET", "/sandboxes", h, NULL, 0, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(r.request_id, "trace-me-123");
        hres_done(&r);

        /* Revoke by the printed prefix: the key stops working at once. */
        char prefix[16];
        snprintf(prefix, sizeof(prefix), "%.12s", key);
        ASSERT_EQ(ctld_admin(&c, NULL, "key", "revoke", prefix, NULL), 0);
        HTTP_EXPECT(&c, "GET", "/sandboxes", key, NULL, 401);
        /* The store never holds the key itself. */
        _cleanup_free_ char *dump = NULL;
        char db[400];
        snprintf(db, sizeof(db), "%s/controld.db", c.dir);
        char *argv[] = { "sqlite3", db, ".dump", NULL };
        ASSERT_EQ(test_run_capture(argv, &dump, 1 << 20), 0);
        ASSERT_TRUE(strstr(dump, key) == NULL);
        ASSERT_TRUE(strstr(dump, key + 4) == NULL);
}

struct race { struct ctld *c; const char *key; long status; char body[512]; };

static void *race_create(void *p) {
        struct race *x = p;
        struct hres r;
        http_req(x->c, "POST", "/sandboxes", x->key, "{}", &r);
        x->status = r.status;
        snprintf(x->body, sizeof(x->body), "%s", r.body);
        hres_done(&r);
        return NULL;
}

TEST_FULL(quota_race_admits_exactly_the_cap, 240) {
        struct ctld c;
        struct race x[50];
        pthread_t t[50];
        int ok = 0, denied = 0;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "racer", NULL);
        for (int i = 0; i < 50; i++) {
                x[i] = (struct race) { .c = &c, .key = key };
                ASSERT_EQ(pthread_create(&t[i], NULL, race_create, &x[i]), 0);
        }
        for (int i = 0; i < 50; i++)
                pthread_join(t[i], NULL);
        for (int i = 0; i < 50; i++) {
                if (x[i].status == 201)
                        ok++;
                else if (x[i].status == 403) {
                        ASSERT_CONTAINS(x[i].body, "Your plan allows up to 3 sandboxes. Destroy an existing one or upgrade.");
                        denied++;
                } else
                        test_fail(__FILE__, __LINE__, "unexpected %ld %s", x[i].status, x[i].body);
        }
        ASSERT_EQ(ok, 3);
        ASSERT_EQ(denied, 47);
        /* Only three containers of this account exist. */
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", "--status", "ready", NULL), 0);
        int lines = 0;
        for (char *p = out; *p; p++)
                lines += *p == '\n';
        ASSERT_EQ(lines, 3);
        /* Destroying one frees a slot. */
        char id[25];
        ASSERT_EQ(sscanf(out, "%24s", id), 1);
        sb_expect(&c, "DELETE", key, id, "", 204, NULL);
        ctld_create(&c, key, NULL, id);
}

TEST_FULL(restart_keeps_records_and_live_sandboxes, 180) {
        struct ctld c;
        struct hres r;
        char id[25];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "survivor", "{\"name\":\"keep-me\"}", id);
        ctld_restart(&c);
        sb_get(&c, key, id, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        ASSERT_STREQ(hres_data_str(&r, "name"), "keep-me");
        hres_done(&r);
        ASSERT_TRUE(docker_container_running(container_name(id)));
        /* Still usable: pause/resume/destroy work after the restart. */
        sb_expect(&c, "POST", key, id, "/pause", 200, NULL);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "paused", 60), "paused");
        sb_expect(&c, "POST", key, id, "/resume", 200, NULL);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        sb_expect(&c, "DELETE", key, id, "", 204, NULL);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
}

TEST_FULL(provisioning_failure_is_503_and_leaves_nothing, 120) {
        struct ctld c;
        struct hres r;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "unlucky", NULL);
        http_req(&c, "POST", "/sandboxes", key, "{\"template\":\"missing-image\"}", &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_CONTAINS(hres_message(&r), "Sandbox provisioning failed");
        ASSERT_CONTAINS(hres_message(&r), "paddock/does-not-exist:never");
        hres_done(&r);
        /* The failed record stays for the audit trail, without a container, and does not count
         * against the plan's concurrency. */
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", "--status", "failed", NULL), 0);
        char id[25];
        ASSERT_EQ(sscanf(out, "%24s", id), 1);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        sb_get(&c, key, id, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "failed");
        ASSERT_STREQ(hres_data_str(&r, "destroy_reason"), "failed");
        ASSERT_CONTAINS(hres_data_str(&r, "failure_reason"), "not present");
        hres_done(&r);
        for (int i = 0; i < 3; i++) {
                char sid[25];
                ctld_create(&c, key, NULL, sid);
        }
}

TEST(deny_all_has_no_network) {
        struct ctld c;
        char id[25];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "closed", "{\"blockOutbound\":true}", id);
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "docker", "inspect", "-f", "{{.HostConfig.NetworkMode}} {{.HostConfig.Runtime}}", container_name(id), NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
        ASSERT_CONTAINS(out, "none runsc");
        struct hres r;
        sb_get(&c, key, id, &r);
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(d, "block_outbound")));
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(d, "egress"), "mode")->valuestring, "deny_all");
        hres_done(&r);
        /* restricted sits on the internal network until an agent confirms an allowlist */
        ctld_create(&c, key, "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"1.1.1.1\"]}}", id);
        free(out);
        out = NULL;
        char *argv2[] = { "docker", "inspect", "-f", "{{.HostConfig.NetworkMode}}", container_name(id), NULL };
        ASSERT_EQ(test_run_capture(argv2, &out, 4096), 0);
        ASSERT_CONTAINS(out, "paddock-restricted");
}

TEST_FULL(stats_come_from_samples_of_the_running_container, 120) {
        struct ctld c;
        struct hres r;
        char id[25], path[96];
        _cleanup_free_ char *key =
                ctld_start_with_sandbox(&c, "watcher", "{\"template\":\"python-3.11\",\"specs\":{\"memory\":200,\"cpu\":250}}", id);
        /* Burn CPU for five sampling intervals (stats_interval is 1s in the test config). */
        char *argv[] = { "docker", "exec", container_name(id), "python3", "-c",
                         "import time\nt = time.time()\nwhile time.time() - t < 5: pass", NULL };
        ASSERT_EQ(test_run_capture(argv, NULL, 1024), 0);
        sleep(2);
        snprintf(path, sizeof(path), "/sandboxes/%s/stats?hoursAgo=1", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_message(&r), "Sandbox stats fetched");
        cJSON *d = cJSON_GetObjectItem(r.json, "data");
        cJSON *avg = cJSON_GetObjectItem(d, "average");
        ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(avg, "memory"), "size")->valueint, 200);
        ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(avg, "cpu"), "size")->valueint, 250);
        ASSERT_EQ(cJSON_GetObjectItem(d, "replicaCount")->valueint, 1);
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(d, "responseTime")));
        cJSON *res = cJSON_GetObjectItem(d, "results");
        ASSERT_GE(cJSON_GetArraySize(res), 1);  /* 250 buckets per hour: seconds of samples share one */
        double max_cpu = 0;
        cJSON *p;
        cJSON_ArrayForEach(p, res) {
                ASSERT_TRUE(cJSON_IsString(cJSON_GetObjectItem(p, "date")));
                double v = cJSON_GetObjectItem(p, "cpu")->valuedouble;
                ASSERT_TRUE(v >= 0 && v <= 100);
                if (v > max_cpu)
                        max_cpu = v;
                ASSERT_TRUE(cJSON_GetObjectItem(p, "memory")->valuedouble > 0);
        }
        /* The busy loop shows up in at least one sample. */
        ASSERT_TRUE(max_cpu > 5);
        double mem = cJSON_GetObjectItem(cJSON_GetObjectItem(avg, "memory"), "totalInPercentage")->valuedouble;
        ASSERT_TRUE(mem > 0 && mem <= 100);
        hres_done(&r);
        HTTP_EXPECT(&c, "GET", "/sandboxes/000000000000000000000000/stats", key, NULL, 404);
        snprintf(path, sizeof(path), "/sandboxes/%s/stats?hoursAgo=0", id);
        HTTP_EXPECT_MSG(&c, "GET", path, key, NULL, 400, "hoursAgo");
}

static void sql(struct ctld *c, const char *stmt) {
        char db[400];
        snprintf(db, sizeof(db), "%s/controld.db", c->dir);
        char *argv[] = { "sqlite3", db, (char *) stmt, NULL };
        ASSERT_EQ(test_run_capture(argv, NULL, 4096), 0);
}

/* A crash between steps is healed from the record and the workload, never by optimism:
 * simulate each crash point by stopping controld and editing the record as it would have
 * been left, then start it again. */
TEST_FULL(restart_heals_records_left_mid_operation, 180) {
        struct ctld c;
        char a[25], b[25], d[25], e[25], q[256];
        need_docker();
        ctld_start(&c, NULL, "[plan \"big\"]\nmax_concurrent = 10\n");
        _cleanup_free_ char *key = ctld_account_key(&c, "crashy", "big", NULL);
        ctld_create(&c, key, NULL, a);   /* will look 'starting' */
        ctld_create(&c, key, NULL, b);   /* will look 'pausing' */
        ctld_create(&c, key, NULL, d);   /* will look 'resuming' */
        ctld_create(&c, key, NULL, e);   /* will be destroyed in the record only: an orphan */
        ctld_stop_daemon(&c);
        snprintf(q, sizeof(q), "UPDATE sandboxes SET status='starting' WHERE id='%s'", a);
        sql(&c, q);
        snprintf(q, sizeof(q), "UPDATE sandboxes SET status='pausing' WHERE id='%s'", b);
        sql(&c, q);
        snprintf(q, sizeof(q), "UPDATE sandboxes SET status='resuming' WHERE id='%s'", d);
        sql(&c, q);
        snprintf(q, sizeof(q), "UPDATE sandboxes SET status='destroyed' WHERE id='%s'", e);
        sql(&c, q);
        ctld_start_daemon(&c);

        ASSERT_STREQ(ctld_wait_status(&c, key, a, "failed", 30), "failed");
        ASSERT_STREQ(ctld_wait_status(&c, key, b, "paused", 30), "paused");
        ASSERT_STREQ(ctld_wait_status(&c, key, d, "paused", 30), "paused");
        ASSERT_FALSE(docker_container_exists(container_name(a)));
        ASSERT_FALSE(docker_container_exists(container_name(b)));
        ASSERT_FALSE(docker_container_exists(container_name(d)));
        /* The orphan goes within a few reap intervals (1 s in the test config). */
        for (int i = 0; i < 100 && docker_container_exists(container_name(e)); i++)
                usleep(100000);
        ASSERT_FALSE(docker_container_exists(container_name(e)));
        struct hres r;
        sb_get(&c, key, a, &r);
        ASSERT_STREQ(hres_data_str(&r, "destroy_reason"), "failed");
        ASSERT_CONTAINS(hres_data_str(&r, "failure_reason"), "starting");
        hres_done(&r);
        /* Healed sandboxes are usable: the paused one resumes. */
        sb_expect(&c, "POST", key, b, "/resume", 200, NULL);
        ASSERT_STREQ(ctld_wait_status(&c, key, b, "ready", 60), "ready");
        ASSERT_TRUE(docker_container_running(container_name(b)));
}

TEST_FULL(orphan_reaping_leaves_other_instances_alone, 120) {
        struct ctld c1, c2;
        char id1[25], id2[25];
        need_docker();
        ctld_start(&c1, NULL, NULL);
        ctld_start(&c2, NULL, NULL);
        _cleanup_free_ char *k1 = ctld_account_key(&c1, "one", NULL, NULL);
        _cleanup_free_ char *k2 = ctld_account_key(&c2, "two", NULL, NULL);
        ctld_create(&c1, k1, NULL, id1);
        ctld_create(&c2, k2, NULL, id2);
        /* Each instance runs its orphan reaper every second on the same Docker engine: neither
         * may take the other's sandbox for an orphan. */
        sleep(4);
        ASSERT_TRUE(docker_container_running(container_name(id1)));
        ASSERT_TRUE(docker_container_running(container_name(id2)));
}

TEST_FULL(docker_outage_is_visible_in_healthz_and_create, 90) {
        struct ctld c;
        struct hres r;
        char sock[512], extra[600];
        need_docker();
        /* controld reaches Docker through a link we can take away and put back. */
        snprintf(sock, sizeof(sock), "%s/docker-%d.sock", test_tmpdir(), getpid());
        ASSERT_EQ(symlink("/var/run/docker.sock", sock), 0);
        snprintf(extra, sizeof(extra), "[docker]\nsocket = %s\n", sock);
        ctld_start(&c, NULL, extra);
        _cleanup_free_ char *key = ctld_account_key(&c, "outage", NULL, NULL);
        http_req(&c, "GET", "/healthz", NULL, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, "\"status\":\"ok\"");
        hres_done(&r);

        ASSERT_EQ(unlink(sock), 0);
        http_req(&c, "GET", "/healthz", NULL, NULL, &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_CONTAINS(r.body, "\"status\":\"degraded\"");
        ASSERT_CONTAINS(r.body, "\"driver_reachable\":false");
        hres_done(&r);
        http_req(&c, "POST", "/sandboxes", key, "{}", &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_CONTAINS(hres_message(&r), "Sandbox provisioning failed");
        ASSERT_CONTAINS(hres_message(&r), "Docker");
        hres_done(&r);

        ASSERT_EQ(symlink("/var/run/docker.sock", sock), 0);
        HTTP_EXPECT(&c, "GET", "/healthz", NULL, NULL, 200);
        char id[25];
        ctld_create(&c, key, NULL, id);
}

/* tests/env/services.sh on docker (stop or start): its exit status. */
static int services_docker(const char *verb) {
        char *argv[] = { "tests/env/services.sh", (char *) verb, "docker", NULL };
        return test_run_capture(argv, NULL, 1 << 16);
}

static void docker_back(void *ud) {
        (void) ud;
        if (!test_have_docker())
                (void) services_docker("start");
}

/* dockerd itself restarts under a running sandbox (its containers die with it, as without
 * live-restore): while it is down the API says so (healthz, a clear 503 for exec and create,
 * nothing hangs); once it is back the sandbox whose container died ends `failed` with the
 * reason and nothing of it is left, and new sandboxes work, with no one's help. */
TEST_FULL(dockerd_restarted_under_running_sandboxes, 300) {
        struct ctld c;
        struct hres r;
        char id[25], path[96];
        need_docker();
        /* Only a dockerd services.sh started may be restarted, and only with nothing else on it. */
        _cleanup_free_ char *st = NULL;
        char *status_argv[] = { "tests/env/services.sh", "status", "docker", NULL };
        if (test_run_capture(status_argv, &st, 4096) != 0 || !strstr(st, "(ours"))
                TEST_SKIP("dockerd was not started by tests/env/services.sh: not this test's to restart");
        _cleanup_free_ char *others = NULL;
        char *ps_argv[] = { "docker", "ps", "-q", NULL };
        ASSERT_EQ(test_run_capture(ps_argv, &others, 1 << 16), 0);
        if (others && *others)
                TEST_SKIP("other containers run on this dockerd (a `make up` stack?): restarting it would kill them");
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "dockerd-restart", NULL, NULL);
        ctld_create(&c, key, NULL, id);
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        http_req(&c, "POST", path, key, "{\"cmd\":\"echo before\"}", &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);

        test_on_exit(docker_back, NULL);
        ASSERT_EQ(services_docker("stop"), 0);
        /* The local driver's backend is Docker itself; under Nomad, Nomad still answers. */
        if (!ctld_nomad()) {
                http_req(&c, "GET", "/healthz", NULL, NULL, &r);
                ASSERT_EQ(r.status, 503);
                ASSERT_CONTAINS(r.body, "\"driver_reachable\":false");
                hres_done(&r);
        }
        /* The exec is refused with a reason: Docker is unreachable, or (once the reaper saw the
         * container die on the way down) the sandbox is over. */
        http_req(&c, "POST", path, key, "{\"cmd\":\"echo during\"}", &r);
        fprintf(stderr, "  exec while dockerd is down: %ld %.300s\n", r.status, r.body ?: "");
        ASSERT_TRUE(r.status == 503 || (r.status == 400 && strstr(hres_message(&r) ?: "", "only ready sandboxes")));
        hres_done(&r);
        if (!ctld_nomad()) {
                http_req(&c, "POST", "/sandboxes", key, "{}", &r);
                ASSERT_EQ(r.status, 503);
                ASSERT_CONTAINS(hres_message(&r), "Sandbox provisioning failed");
                hres_done(&r);
        }

        ASSERT_EQ(services_docker("start"), 0);
        HTTP_EXPECT(&c, "GET", "/healthz", NULL, NULL, 200);
        /* The sandbox whose container died: over, as failed, nothing left. */
        bool over = false;
        for (int i = 0; i < 180 && !over; i++) {
                sb_get(&c, key, id, &r);
                const char *s1 = hres_data_str(&r, "status") ?: "";
                over = !strcmp(s1, "failed") || !strcmp(s1, "destroyed");
                if (over) {
                        fprintf(stderr, "  the sandbox after the restart: %.400s\n", r.body);
                        ASSERT_STREQ(hres_data_str(&r, "destroy_reason") ?: "", "failed");
                }
                hres_done(&r);
                if (!over)
                        usleep(500000);
        }
        ASSERT_TRUE(over);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        /* And the platform works again. */
        char id2[25];
        ctld_create(&c, key, NULL, id2);
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id2);
        http_req(&c, "POST", path, key, "{\"cmd\":\"echo after\"}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "after\n");
        hres_done(&r);
        ctld_stop(&c);
}

/* A resume that cannot happen (here: its image is gone) is a platform fault: the sandbox stays
 * paused, as it was, with its volume; the answer is 503 with the reason, and so is the record's
 * failure_reason. The user decides: destroy frees the volume for a new sandbox. */
TEST_FULL(failed_resume_leaves_the_sandbox_paused, 120) {
        struct ctld c;
        struct hres r;
        char id[25], tag[96], extra[256], path[96];
        need_docker();
        /* A template whose image we can take away while the sandbox is paused. */
        snprintf(tag, sizeof(tag), "paddock/vanishing:t%d", getpid());
        const char *img = getenv("PADDOCK_TEST_IMAGE") ? getenv("PADDOCK_TEST_IMAGE") : "paddock/busybox:local";
        char *tag_argv[] = { "docker", "tag", (char *) img, tag, NULL };
        ASSERT_EQ(test_run_capture(tag_argv, NULL, 4096), 0);
        snprintf(extra, sizeof(extra), "[template \"vanishing\"]\nimage = %s\n", tag);
        ctld_start(&c, NULL, extra);
        _cleanup_free_ char *key = ctld_account_key(&c, "unlucky-resume", NULL, NULL);
        ctld_create(&c, key, "{\"template\":\"vanishing\",\"persistent\":true,\"persistentDiskGB\":10}", id);
        sb_get(&c, key, id, &r);
        char vol[25];
        snprintf(vol, sizeof(vol), "%s", hres_data_str(&r, "volume_id"));
        hres_done(&r);
        sb_expect(&c, "POST", key, id, "/pause", 200, "Sandbox pause requested");
        char *rmi_argv[] = { "docker", "rmi", tag, NULL };
        ASSERT_EQ(test_run_capture(rmi_argv, NULL, 4096), 0);
        snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
        http_req(&c, "POST", path, key, NULL, &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_CONTAINS(hres_message(&r), "The resume did not happen");
        ASSERT_CONTAINS(hres_message(&r), tag);
        ASSERT_CONTAINS(hres_message(&r), "paused, as it was");
        hres_done(&r);
        sb_get(&c, key, id, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "paused");
        ASSERT_CONTAINS(hres_data_str(&r, "failure_reason"), tag);
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "destroy_reason")));
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        /* The volume stays the sandbox's while it is paused... */
        snprintf(path, sizeof(path), "/volumes/%s", vol);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "attached_sandbox_id")), id);
        hres_done(&r);
        /* ...and the image back, the same resume works */
        char *tag2_argv[] = { "docker", "tag", (char *) img, tag, NULL };
        ASSERT_EQ(test_run_capture(tag2_argv, NULL, 4096), 0);
        sb_expect(&c, "POST", key, id, "/resume", 200, "Sandbox resume requested");
        sb_get(&c, key, id, &r);
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "failure_reason")));
        hres_done(&r);
        /* destroy frees the volume for another sandbox */
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        char body[128], id2[25];
        snprintf(body, sizeof(body), "{\"volumeId\":\"%s\"}", vol);
        ctld_create(&c, key, body, id2);
        char *rmi2_argv[] = { "docker", "rmi", tag, NULL };
        (void) test_run_capture(rmi2_argv, NULL, 4096);
}

/* A volume delete is decided in the database before the Docker volume goes: while a delete
 * is under way (the row marked, as DELETE /volumes/{id} leaves it until the backend answers)
 * no create may attach the volume and a second delete is refused; a crash mid-delete is
 * healed at start (the mark lifted, the volume usable and deletable again). */
TEST_FULL(volume_being_deleted_cannot_be_attached, 120) {
        struct ctld c;
        struct hres r;
        char vol[25], id[25], path[96], body[160], q[160];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "deleter", NULL);
        http_req(&c, "POST", "/volumes", key, "{\"name\":\"doomed\",\"sizeGB\":10,\"region\":\"6a06df21cc6bef51342e199e\"}", &r);
        ASSERT_EQ(r.status, 201);
        snprintf(vol, sizeof(vol), "%s", hres_data_str(&r, "id"));
        hres_done(&r);

        snprintf(q, sizeof(q), "UPDATE volumes SET deleting = 1 WHERE id = '%s'", vol);
        sql(&c, q);
        snprintf(body, sizeof(body), "{\"volumeId\":\"%s\"}", vol);
        HTTP_EXPECT(&c, "POST", "/sandboxes", key, body, 400);
        http_req(&c, "GET", "/sandboxes", key, NULL, &r);
        ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "totalCount")->valuedouble, 0);  /* nothing left */
        hres_done(&r);
        snprintf(path, sizeof(path), "/volumes/%s", vol);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 409);

        /* As if controld died mid-delete: after a restart the volume attaches again. */
        ctld_restart(&c);
        ctld_create(&c, key, body, id);
        http_req(&c, "DELETE", path, key, NULL, &r);
        ASSERT_EQ(r.status, 400);             /* attached */
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(&c, "DELETE", path, key, NULL, &r);
        hres_done(&r);
        snprintf(path, sizeof(path), "/volumes/%s", vol);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        char h[64];
        snprintf(h, sizeof(h), "paddock-vol-%s", vol);
        char *argv[] = { "docker", "volume", "inspect", h, NULL };
        ASSERT_TRUE(test_run_capture(argv, NULL, 65536) != 0);   /* the Docker volume is gone too */
}

/* A NOTIFY_SOCKET of this test's own (set in the environment for the controld started next). */
static int notify_socket(const char *name) {
        char path[300];
        snprintf(path, sizeof(path), "%s/%s-%d.sock", test_tmpdir(), name, getpid());
        return test_notify_socket(path, 0);
}

/* One datagram from the notify socket fd into buf (NUL-terminated); false if none comes
 * within timeout_ms. */
static bool notify_recv(int fd, int timeout_ms, char *buf, size_t size) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, timeout_ms) != 1)
                return false;
        ssize_t n = recv(fd, buf, size - 1, 0);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        return true;
}

/* WatchdogSec=: with WATCHDOG_USEC set, controld pings WATCHDOG=1 about every
 * WATCHDOG_USEC/2 while serving, and never before READY=1. */
TEST_FULL(pings_systemd_watchdog, 60) {
        struct ctld c;
        need_docker();
        int fd = notify_socket("wd");
        setenv("WATCHDOG_USEC", "400000", 1);
        ctld_start(&c, NULL, NULL);
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        bool ready = false;
        int pings = 0;
        int64_t t_first = 0, t_last = 0, end = mono_ms() + 10000;
        while (pings < 5 && mono_ms() < end) {
                char buf[512];
                if (!notify_recv(fd, 1000, buf, sizeof(buf)))
                        continue;
                if (strstr(buf, "READY=1"))
                        ready = true;
                if (strstr(buf, "WATCHDOG=1")) {
                        ASSERT_TRUE(ready);
                        t_last = mono_ms();
                        if (!pings++)
                                t_first = t_last;
                }
        }
        ASSERT_EQ(pings, 5);
        /* Four intervals of ~200 ms: well under the 400 ms the unit would allow each. */
        ASSERT_TRUE(t_last - t_first < 4 * 400);
        ctld_stop_daemon(&c);
        close(fd);
}

/* systemd Type=notify: READY=1 once serving, STOPPING=1 on SIGTERM. */
TEST_FULL(notifies_systemd_ready_and_stopping, 60) {
        struct ctld c;
        need_docker();
        int fd = notify_socket("notify");
        ctld_start(&c, NULL, NULL);
        unsetenv("NOTIFY_SOCKET");
        char buf[512] = "";
        ASSERT_TRUE(notify_recv(fd, 5000, buf, sizeof(buf)));
        ASSERT_CONTAINS(buf, "READY=1");
        ctld_stop_daemon(&c);
        ASSERT_TRUE(notify_recv(fd, 5000, buf, sizeof(buf)));
        ASSERT_CONTAINS(buf, "STOPPING=1");
        close(fd);
}
