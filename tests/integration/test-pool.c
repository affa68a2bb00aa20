/* Warm pools through a real controld (both drivers: test-pool-nomad runs the same on the
 * Nomad stand-in): claims serve one tenant once, misses take the cold path, the pool
 * refills, a template's new image replaces it, members stay warm across a restart, and a
 * controld killed between any two steps of a refill or a claim leaves every workload with
 * exactly one owner (a pool row or a sandbox record) or removed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "apitest.h"
#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"

#define POOL_CONF "[template \"pooled\"]\nimage = %s\ncpu = 250\nmemory = 128\n" \
                  "[pool \"bb\"]\ntemplate = pooled\nsize = %d\nrefill_rate = 600\n"

/* controld with one pool of size members of template "pooled" (image img, default the test
 * image); plan "pool" allows 10 sandboxes. */
static void pool_start(struct ctld *c, int size, const char *img) {
        need_docker();
        char extra[1024];
        snprintf(extra, sizeof(extra), POOL_CONF "[plan \"pool\"]\nmax_concurrent = 10\n",
                 img ? img : getenv("PADDOCK_TEST_IMAGE") ?: "paddock/busybox:local", size);
        ctld_start(c, NULL, extra);
}

static int db_count(struct ctld *c, const char *sql) {
        _cleanup_free_ char *out = ctld_db_query(c, sql);
        return atoi(out);
}

static bool has_line(const char *text, const char *id) {
        size_t n = strlen(id);
        for (const char *p = text; p && (p = strstr(p, id)); p += n)
                if ((p == text || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0))
                        return true;
        return false;
}

/* Waits (up to timeout_s) until the pool has want ready members. */
static void wait_ready(struct ctld *c, int want, int timeout_s) {
        for (int i = 0; i < timeout_s * 10; i++) {
                if (db_count(c, "SELECT COUNT(*) FROM pool_members WHERE pool = 'bb' AND state = 'ready'") == want)
                        return;
                usleep(100 * 1000);
        }
        _cleanup_free_ char *rows = ctld_db_query(c, "SELECT id, state FROM pool_members");
        test_fail(__FILE__, __LINE__, "the pool did not reach %d ready members in %d s; members:\n%s", want, timeout_s, rows);
}

/* Whether sandbox/member id's workload runs (container, or on Nomad the job's allocation's). */
static bool workload_running(struct ctld *c, const char *id) {
        (void) c;
        return docker_container_running(container_name(id));
}

/* The ids of every workload this controld has (containers labelled with its instance; on
 * Nomad, the stand-in's sandbox jobs), one a line. */
static char *workload_ids(struct ctld *c) {
        if (ctld_nomad()) {
                struct strbuf b;
                strbuf_init(&b, 0);
                _cleanup_(cJSON_Deletep) cJSON *st = nstandin_state(&c->standin);
                const cJSON *j;
                cJSON_ArrayForEach(j, cJSON_GetObjectItem(st, "Jobs")) {
                        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(j, "ID"));
                        if (id && startswith(id, "sandbox-"))
                                strbuf_printf(&b, "%s\n", id + strlen("sandbox-"));
                }
                return strbuf_steal(&b);
        }
        _cleanup_free_ char *inst = ctld_db_query(c, "SELECT value FROM meta WHERE key = 'instance_id'");
        inst[strcspn(inst, "\n")] = 0;
        char filter[128];
        snprintf(filter, sizeof(filter), "label=paddock.controld=%s", inst);
        char *argv[] = { "docker", "ps", "-a", "--filter", filter, "--format", "{{.Label \"paddock.sandbox\"}}", NULL };
        char *out = NULL;
        ASSERT_EQ(test_run_capture(argv, &out, 1 << 16), 0);
        return out ? out : xstrdup("");
}

/* Every workload has exactly one owner: a pool row or a live sandbox record; every owner
 * that should run has its workload. */
static void assert_one_owner_each(struct ctld *c) {
        _cleanup_free_ char *work = workload_ids(c);
        _cleanup_free_ char *members = ctld_db_query(c, "SELECT id FROM pool_members");
        _cleanup_free_ char *live = ctld_db_query(c, "SELECT id FROM sandboxes WHERE status IN ('starting','ready','pausing','resuming')");
        char *save = NULL;
        _cleanup_free_ char *w = xstrdup(work);
        for (char *id = strtok_r(w, "\n", &save); id; id = strtok_r(NULL, "\n", &save)) {
                int owners = has_line(members, id) + has_line(live, id);
                if (owners != 1)
                        test_fail(__FILE__, __LINE__, "workload %s has %d owners (members:\n%s\nlive records:\n%s)", id, owners,
                                  members, live);
        }
        _cleanup_free_ char *ready = ctld_db_query(c, "SELECT id FROM pool_members WHERE state = 'ready'");
        _cleanup_free_ char *r = xstrdup(ready);
        save = NULL;
        for (char *id = strtok_r(r, "\n", &save); id; id = strtok_r(NULL, "\n", &save))
                if (!workload_running(c, id))
                        test_fail(__FILE__, __LINE__, "ready pool member %s has no running workload", id);
}

static double metric(struct ctld *c, const char *series) {
        struct hres r;
        http_req(c, "GET", "/metrics", NULL, NULL, &r);
        ASSERT_EQ(r.status, 200);
        const char *p = strstr(r.body, series);
        double v = p ? strtod(p + strlen(series), NULL) : -1;
        hres_done(&r);
        return v;
}

/* The live sandboxes `controld admin node list` counts over all nodes. */
static int live_on_nodes(struct ctld *c) {
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(c, &out, "node", "list", NULL), 0);
        int sum = 0;
        char *save = NULL;
        for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                char id[130], state[16];
                int live = 0;
                if (sscanf(l, "%129s %15s %d", id, state, &live) == 3)
                        sum += live;
        }
        return sum;
}

static bool claimed(struct ctld *c, const char *key, const char *id) {
        _cleanup_json_ cJSON *t = sandbox_data_member(c, key, id, "", "timings");
        return cJSON_IsNumber(cJSON_GetObjectItem(t, "claim_ms"));
}

/* Who owns a claimed member, as an operator finds it: the sandbox's record (the admin's list
 * by account shows it). The workload was made for no account and a claim cannot relabel it,
 * so it says it was pooled (Docker label paddock.pooled, Nomad job meta paddock_pooled) and
 * carries no account that would be stale. */
static void assert_claimed_owner_findable(struct ctld *c, const char *account, const char *account_id, const char *id) {
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(c, &out, "sandbox", "list", "--account", account, NULL), 0);
        char want[64];
        snprintf(want, sizeof(want), "%s\t%s\t", id, account_id);
        ASSERT_CONTAINS(out, want);
        if (ctld_nomad()) {
                _cleanup_(cJSON_Deletep) cJSON *st = nstandin_state(&c->standin);
                char job[40];
                snprintf(job, sizeof(job), "sandbox-%s", id);
                const cJSON *j, *meta = NULL;
                cJSON_ArrayForEach(j, cJSON_GetObjectItem(st, "Jobs"))
                        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "ID")) ?: "", job))
                                meta = cJSON_GetObjectItem(j, "Meta");
                ASSERT_NOT_NULL(meta);
                ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(meta, "paddock_pooled")), "1");
                ASSERT_TRUE(cJSON_GetObjectItem(meta, "paddock_account_id") == NULL);
                return;
        }
        char *argv[] = { "docker", "inspect", "-f", "{{json .Config.Labels}}", container_name(id), NULL };
        _cleanup_free_ char *labels = NULL;
        ASSERT_EQ(test_run_capture(argv, &labels, 1 << 16), 0);
        ASSERT_CONTAINS(labels, "\"paddock.pooled\":\"1\"");
        if (strstr(labels, "paddock.account"))
                test_fail(__FILE__, __LINE__, "a claimed member's container carries an account label: %s", labels);
}

TEST_FULL(claims_serve_one_tenant_once_and_the_pool_refills, 600) {
        static struct ctld c;
        pool_start(&c, 2, NULL);
        wait_ready(&c, 2, 180);
        assert_one_owner_each(&c);
        /* Members hold their node's capacity: the node list counts them as live. */
        ASSERT_EQ(live_on_nodes(&c), 2);
        _cleanup_free_ char *before = ctld_db_query(&c, "SELECT id FROM pool_members");
        char alice[25];
        _cleanup_free_ char *ka = ctld_account_key(&c, "alice", "pool", alice), *kb = ctld_account_key(&c, "bob", "pool", NULL);

        /* Two tenants, two members, never the same one; each answers at once through its agent. */
        char a[25], b[25];
        ctld_create(&c, ka, "{\"template\":\"pooled\"}", a);
        ctld_create(&c, kb, "{\"template\":\"pooled\"}", b);
        ASSERT_TRUE(has_line(before, a));
        ASSERT_TRUE(has_line(before, b));
        ASSERT_TRUE(strcmp(a, b) != 0);
        ASSERT_TRUE(claimed(&c, ka, a));
        assert_claimed_owner_findable(&c, "alice", alice, a);
        /* Nothing of the pool's shows: no process the tenant did not start. */
        char ppath[112];
        snprintf(ppath, sizeof(ppath), "/sandboxes/%s/processes", a);
        struct hres r;
        http_req(&c, "GET", ppath, ka, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "processes")), 0);
        hres_done(&r);
        CTLD_EXEC_EXPECT(&c, ka, a, "echo pooled", "pooled\n");
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s", a);
        HTTP_EXPECT(&c, "GET", path, kb, NULL, 404);
        ASSERT_EQ(metric(&c, "paddock_pool_claims_total{pool=\"bb\",result=\"hit\",reason=\"\"} "), 2);

        /* Destroyed, it is gone for good: never back in the pool. */
        HTTP_EXPECT(&c, "DELETE", path, ka, NULL, 204);
        ASSERT_STREQ(ctld_wait_status(&c, ka, a, "destroyed", 60), "destroyed");
        ASSERT_FALSE(workload_running(&c, a));

        /* The pool refills with new members. */
        wait_ready(&c, 2, 180);
        _cleanup_free_ char *after = ctld_db_query(&c, "SELECT id FROM pool_members ORDER BY id");
        ASSERT_FALSE(has_line(after, a));
        ASSERT_FALSE(has_line(after, b));
        assert_one_owner_each(&c);

        /* Misses take the cold path: other specs (no pool holds them), one-shot (a member
         * cannot be one). Both work, neither takes a member. */
        char m1[25], m2[25];
        ctld_create(&c, ka, "{\"template\":\"pooled\",\"specs\":{\"cpu\":300}}", m1);
        ctld_create(&c, ka, "{\"template\":\"pooled\",\"oneShot\":true}", m2);
        ASSERT_FALSE(claimed(&c, ka, m1));
        ASSERT_FALSE(claimed(&c, ka, m2));
        ASSERT_FALSE(has_line(after, m1));
        _cleanup_free_ char *still = ctld_db_query(&c, "SELECT id FROM pool_members WHERE state = 'ready' ORDER BY id");
        ASSERT_STREQ(still, after);
        ASSERT_EQ(metric(&c, "paddock_pool_claims_total{pool=\"\",result=\"miss\",reason=\"no_pool\"} "), 1);
        ASSERT_EQ(metric(&c, "paddock_pool_claims_total{pool=\"bb\",result=\"miss\",reason=\"one_shot\"} "), 1);
        ASSERT_EQ(metric(&c, "paddock_pool_target{pool=\"bb\"} "), 2);
        ASSERT_EQ(metric(&c, "paddock_pool_members{pool=\"bb\",state=\"ready\"} "), 2);
        _cleanup_free_ char *adm = NULL;
        ASSERT_EQ(ctld_admin(&c, &adm, "pool", NULL), 0);
        ASSERT_CONTAINS(adm, "pool\tbb\ttemplate=pooled\tcpu=250\tmemory=128\tdisk=1\tegress=networked\tsize=2\tready=2");
}

TEST_FULL(members_stay_warm_across_a_restart_and_a_new_image_replaces_them, 600) {
        static struct ctld c;
        pool_start(&c, 2, NULL);
        wait_ready(&c, 2, 180);
        _cleanup_free_ char *first = ctld_db_query(&c, "SELECT id FROM pool_members ORDER BY id");
        ctld_restart(&c);
        /* The same members serve after the restart: nothing was remade. */
        usleep(1500 * 1000);
        _cleanup_free_ char *again = ctld_db_query(&c, "SELECT id FROM pool_members ORDER BY id");
        ASSERT_STREQ(again, first);
        assert_one_owner_each(&c);

        /* The template now names another image (the same bits under a new tag): members of the
         * old image are retired and remade from the new one. */
        const char *img = getenv("PADDOCK_TEST_IMAGE") ?: "paddock/busybox:local";
        char *tag[] = { "docker", "tag", (char *) img, "paddock/busybox:pool-retag", NULL };
        ASSERT_EQ(test_run_capture(tag, NULL, 4096), 0);
        ctld_stop_daemon(&c);
        char *cat[] = { "cat", c.conf, NULL };
        _cleanup_free_ char *conf = NULL;
        ASSERT_EQ(test_run_capture(cat, &conf, 1 << 16), 0);
        ASSERT_NOT_NULL(conf);
        char old_line[300], new_line[300];
        snprintf(old_line, sizeof(old_line), "[template \"pooled\"]\nimage = %s\n", img);
        snprintf(new_line, sizeof(new_line), "[template \"pooled\"]\nimage = paddock/busybox:pool-retag\n");
        char *at = strstr(conf, old_line);
        ASSERT_NOT_NULL(at);
        FILE *f = fopen(c.conf, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "%.*s%s%s", (int) (at - conf), conf, new_line, at + strlen(old_line));
        fclose(f);
        ctld_start_daemon(&c);
        for (int i = 0; i < 1800; i++) {
                if (db_count(&c, "SELECT COUNT(*) FROM pool_members WHERE state = 'ready' AND image = 'paddock/busybox:pool-retag'") == 2 &&
                    db_count(&c, "SELECT COUNT(*) FROM pool_members WHERE image <> 'paddock/busybox:pool-retag'") == 0)
                        break;
                usleep(100 * 1000);
        }
        ASSERT_EQ(db_count(&c, "SELECT COUNT(*) FROM pool_members WHERE state = 'ready' AND image = 'paddock/busybox:pool-retag'"), 2);
        ASSERT_EQ(db_count(&c, "SELECT COUNT(*) FROM pool_members WHERE image <> 'paddock/busybox:pool-retag'"), 0);
        /* The old members' workloads went with them (removal runs on a job thread). */
        char *save = NULL;
        for (char *id = strtok_r(first, "\n", &save); id; id = strtok_r(NULL, "\n", &save))
                for (int i = 0; i < 300 && workload_running(&c, id); i++)
                        usleep(100 * 1000);
        save = NULL;
        for (char *id = strtok_r(again, "\n", &save); id; id = strtok_r(NULL, "\n", &save))
                ASSERT_FALSE(workload_running(&c, id));
        assert_one_owner_each(&c);
}

/* A member older than max_age is replaced by a new one, and its workload goes. */
TEST_FULL(members_past_max_age_are_replaced, 300) {
        static struct ctld c;
        need_docker();
        char extra[1024];
        snprintf(extra, sizeof(extra), POOL_CONF "max_age = 10s\n", getenv("PADDOCK_TEST_IMAGE") ?: "paddock/busybox:local", 1);
        ctld_start(&c, NULL, extra);
        wait_ready(&c, 1, 180);
        _cleanup_free_ char *old = ctld_db_query(&c, "SELECT id FROM pool_members");
        old[strcspn(old, "\n")] = 0;
        char q[160];
        snprintf(q, sizeof(q), "SELECT COUNT(*) FROM pool_members WHERE state = 'ready' AND id <> '%s'", old);
        for (int i = 0; i < 600 && db_count(&c, q) != 1; i++)
                usleep(100 * 1000);
        ASSERT_EQ(db_count(&c, q), 1);
        for (int i = 0; i < 300 && workload_running(&c, old); i++)
                usleep(100 * 1000);
        ASSERT_FALSE(workload_running(&c, old));
        ASSERT_EQ(metric(&c, "paddock_pool_retired_total{pool=\"bb\"} "), 1);
        assert_one_owner_each(&c);
}

/* controld killed at a crash point (PADDOCK_FAULT) with a ready member of a pool of one:
 * at a refill (after a claim made one necessary) or in the claim itself. After the restart
 * every workload has one owner, nothing half made is left, and the pool is full again. */
static void crash_at(const char *point) {
        static struct ctld c;
        pool_start(&c, 1, NULL);
        wait_ready(&c, 1, 180);
        _cleanup_free_ char *key = ctld_account_key(&c, "alice", "pool", NULL);
        ctld_stop_daemon(&c);
        setenv("PADDOCK_FAULT", point, 1);
        ctld_start_daemon(&c);
        unsetenv("PADDOCK_FAULT");
        _cleanup_free_ char *member = ctld_db_query(&c, "SELECT id FROM pool_members");
        member[strcspn(member, "\n")] = 0;

        struct hres r;
        http_req(&c, "POST", "/sandboxes", key, "{\"template\":\"pooled\"}", &r);
        bool claim_point = !strcmp(point, "pool.claim.committed");
        if (claim_point)
                ASSERT_TRUE(r.status <= 0);      /* killed before it answered */
        else
                /* The refill of the emptied pool starts at once and may kill the process before
                 * the claim's answer is out; the claim itself committed (checked below). */
                ASSERT_TRUE(r.status == 201 || r.status <= 0);
        hres_done(&r);
        int st = ctld_wait_exit(&c, 120);
        ASSERT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

        /* What the kill left, before anything heals it. */
        if (claim_point) {
                /* The claim committed: the member is the sandbox's, and only the sandbox's. */
                char q[160];
                snprintf(q, sizeof(q), "SELECT COUNT(*) FROM sandboxes WHERE id = '%s' AND status = 'starting'", member);
                ASSERT_EQ(db_count(&c, q), 1);
                ASSERT_EQ(db_count(&c, "SELECT COUNT(*) FROM pool_members"), 0);
        } else {
                char q[160];
                snprintf(q, sizeof(q), "SELECT COUNT(*) FROM sandboxes WHERE id = '%s' AND status = 'ready'", member);
                ASSERT_EQ(db_count(&c, q), 1);
                ASSERT_EQ(db_count(&c, "SELECT COUNT(*) FROM pool_members WHERE state = 'starting'"), 1);
        }
        _cleanup_free_ char *half = ctld_db_query(&c, "SELECT id FROM pool_members WHERE state = 'starting'");
        half[strcspn(half, "\n")] = 0;

        ctld_start_daemon(&c);
        wait_ready(&c, 1, 180);
        assert_one_owner_each(&c);
        if (claim_point) {
                /* Healed as a sandbox whose start was cut off: failed, its workload gone. */
                char path[96];
                snprintf(path, sizeof(path), "/sandboxes/%s", member);
                ASSERT_STREQ(ctld_wait_status(&c, key, member, "failed", 30), "failed");
                ASSERT_FALSE(workload_running(&c, member));
        } else {
                /* The member half made when the kill came is gone, row and workload. */
                char q[160];
                snprintf(q, sizeof(q), "SELECT COUNT(*) FROM pool_members WHERE id = '%s'", half);
                ASSERT_EQ(db_count(&c, q), 0);
                ASSERT_FALSE(workload_running(&c, half));
        }
        _cleanup_free_ char *work = workload_ids(&c);
        if (!claim_point)
                ASSERT_FALSE(has_line(work, half));
}

TEST_FULL(a_kill_after_the_member_row_leaves_no_orphan, 600) { crash_at("pool.refill.recorded"); }
TEST_FULL(a_kill_after_the_member_started_leaves_no_orphan, 600) { crash_at("pool.refill.placed"); }
TEST_FULL(a_kill_inside_a_claim_leaves_one_owner, 600) { crash_at("pool.claim.committed"); }
