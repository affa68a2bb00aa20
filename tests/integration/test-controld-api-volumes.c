/* HTTP-level tests of volumes end to end: create, attach, data that survives pause/resume,
 * detach, delete, caps and regions. Runs a real controld against the real dockerd + gVisor.
 *
 * Each test's struct ctld is static: the harness's exit hook (ctld_stop) runs from exit()
 * after the test function has returned, so a stack struct would be read after its frame is
 * gone (garbage dir/pid/failed_exit: leaked containers, spurious failures).
 *
 * Tests that document bugs open at the time of writing (they fail until controld is fixed):
 * concurrent_attach_of_one_volume_admits_one, volume_cap_rejection_at_create_leaves_no_sandbox_record
 * (refusals after the record is written leave a failed sandbox record),
 * volume_in_region_the_plan_cannot_use_is_refused (POST /volumes ignores region enabled/plan). */
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
#include "strutil.h"
#include "testlib.h"

/* POST /sandboxes/id/<what> ("pause", "resume"): 200 "Sandbox <what> requested", then the
 * sandbox reaches status within 60 s. */
static void transition(struct ctld *c, const char *key, const char *id, const char *what, const char *status) {
        struct hres r;
        _cleanup_free_ char *suffix = xasprintf("/%s", what), *msg = xasprintf("Sandbox %s requested", what);
        _cleanup_free_ char *wait = xasprintf("/wait?timeout=60&status=%s", status);
        op(c, key, "POST", id, suffix, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_message(&r), msg);
        hres_done(&r);
        op(c, key, "GET", id, wait, &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), status);
        hres_done(&r);
}

static int dexec(const char *id, const char *cmd, char **out);

/* text written to file in sandbox id is there after a pause and a resume, which replace the
 * container. */
static void survives_pause_resume(struct ctld *c, const char *key, const char *id, const char *file, const char *text) {
        _cleanup_free_ char *put = xasprintf("echo %s > %s", text, file), *get = xasprintf("cat %s", file);
        _cleanup_free_ char *want = xasprintf("%s\n", text), *out = NULL;
        ASSERT_EQ(dexec(id, put, NULL), 0);
        transition(c, key, id, "pause", "paused");
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        transition(c, key, id, "resume", "ready");
        ASSERT_TRUE(docker_container_running(container_name(id)));
        ASSERT_EQ(dexec(id, get, &out), 0);
        ASSERT_STREQ(out, want);
}

/* docker exec paddock-<id> sh -c CMD (fixed argv; CMD is test text, never user input). */
static int dexec(const char *id, const char *cmd, char **out) {
        char name[64];
        snprintf(name, sizeof(name), "paddock-%s", id);
        char *argv[] = { "docker", "exec", name, "sh", "-c", (char *) cmd, NULL };
        return test_run_capture(argv, out, 65536);
}

/* Volumes are not removed by the harness: remember their ids and remove the docker volumes at
 * exit. Registered before ctld_start so it runs after ctld_stop has removed the containers. */
static char vol_ids[16][25];
static int n_vol_ids;
static void vol_cleanup(void *ud) {
        (void) ud;
        for (int i = 0; i < n_vol_ids; i++) {
                char h[64];
                snprintf(h, sizeof(h), "paddock-vol-%s", vol_ids[i]);
                char *argv[] = { "docker", "volume", "rm", "-f", h, NULL };
                test_run_capture(argv, NULL, 4096);
        }
        n_vol_ids = 0;
}
static void track_volume(const char *id) {
        static bool hooked;
        if (!hooked) {
                /* The tmpdir's atexit removal must be registered first so it runs after the exit
                 * hooks (ctld_stop needs the config that lives there). */
                (void) test_tmpdir();
                test_on_exit(vol_cleanup, NULL);
                hooked = true;
        }
        if (id && n_vol_ids < 16)
                snprintf(vol_ids[n_vol_ids++], 25, "%s", id);
}

static bool docker_volume_exists(const char *vol_id) {
        char h[64];
        snprintf(h, sizeof(h), "paddock-vol-%s", vol_id);
        char *argv[] = { "docker", "volume", "inspect", h, NULL };
        return test_run_capture(argv, NULL, 65536) == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* 7. Volumes.                                                                                 */

static void create_volume(struct ctld *c, const char *key, const char *name, int size, char ret_id[25]) {
        char body[256];
        struct hres r;
        snprintf(body, sizeof(body), "{\"name\":\"%s\",\"sizeGB\":%d,\"region\":\"" LOCAL_REGION "\"}", name, size);
        http_req(c, "POST", "/volumes", key, body, &r);
        ASSERT_ENVELOPE(&r, 201, "Volume created");
        snprintf(ret_id, 25, "%s", jstr(data_of(&r), "id"));
        track_volume(ret_id);
        hres_done(&r);
}

TEST_FULL(volumes_create_attach_survive_pause_detach_delete, 180) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char vid[25], vid2[25], sid[25], sid2[25], path[96], body[256];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "keeper", NULL, NULL);
        _cleanup_free_ char *other = ctld_account_key(&c, "snoop", NULL, NULL);

        http_req(&c, "POST", "/volumes", key, "{\"name\":\"data-a\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}", &r);
        ASSERT_ENVELOPE(&r, 201, "Volume created");
        const cJSON *v = data_of(&r);
        snprintf(vid, sizeof(vid), "%s", jstr(v, "id"));
        track_volume(vid);
        ASSERT_EQ(strlen(vid), 24);
        ASSERT_STREQ(jstr(v, "name"), "data-a");
        ASSERT_STREQ(jstr(v, "type"), "web");
        ASSERT_EQ(jint(v, "size"), 10);
        ASSERT_STREQ(jstr(jget(v, "region"), "id"), LOCAL_REGION);
        ASSERT_STREQ(jstr(jget(v, "region"), "type"), "sandbox");
        ASSERT_TRUE(cJSON_IsNull(jget(v, "attached_sandbox_id")));
        ASSERT_TRUE(cJSON_IsNull(jget(v, "attached_project_id")));
        ASSERT_TRUE(cJSON_IsString(jget(v, "created_at")));
        hres_done(&r);
        ASSERT_TRUE(docker_volume_exists(vid));

        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"data-a\",\"sizeGB\":20,\"region\":\"" LOCAL_REGION "\"}", 400, "A volume named \"data-a\" already exists");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"big\",\"sizeGB\":30,\"region\":\"" LOCAL_REGION "\"}", 403, "Your plan allows volumes up to 20GB. Reduce size or upgrade.");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"lost\",\"sizeGB\":10,\"region\":\"" UNKNOWN_HEX "\"}", 400, "region: unknown region id '" UNKNOWN_HEX "'. List regions with GET /sandboxes/regions.");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"Bad Name\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}", 400, "name must be 1 to 40 characters of lowercase letters, digits and '-'");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"small\",\"sizeGB\":5,\"region\":\"" LOCAL_REGION "\"}", 400, "sizeGB must be an integer between 10 and 50");
        http_req(&c, "POST", "/volumes", key, "{\"name\":\"noregion\",\"sizeGB\":10}", &r);
        ASSERT_ERROR_PREFIX(&r, 400, "region is required");
        hres_done(&r);
        /* The same name is fine for another account (names are unique per user). */
        create_volume(&c, other, "data-a", 10, vid2);

        create_volume(&c, key, "data-b", 20, vid2);
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"data-c\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}", 403, "Your plan allows up to 2 volumes. Delete an existing one or upgrade.");

        http_req(&c, "GET", "/volumes", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Volumes fetched");
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 2);
        ASSERT_EQ(cJSON_GetArraySize(jget(data_of(&r), "data")), 2);
        /* newest first */
        ASSERT_STREQ(jstr(cJSON_GetArrayItem(jget(data_of(&r), "data"), 0), "id"), vid2);
        hres_done(&r);
        snprintf(path, sizeof(path), "/volumes/%s", vid);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Volume fetched");
        ASSERT_STREQ(jstr(data_of(&r), "name"), "data-a");
        hres_done(&r);

        /* Another account sees nothing of it and can't attach it. */
        EXPECT_ERROR(&c, "GET", path, other, NULL, 404, "Volume not found");
        EXPECT_ERROR(&c, "DELETE", path, other, NULL, 404, "Volume not found");
        snprintf(body, sizeof(body), "{\"volumeId\":\"%s\"}", vid);
        EXPECT_ERROR(&c, "POST", "/sandboxes", other, body, 404, "Volume not found");
        ASSERT_EQ(total_count(&c, other, "/sandboxes"), 0);

        /* Attach at create. */
        ctld_create(&c, key, body, sid);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(jstr(data_of(&r), "attached_sandbox_id"), sid);
        ASSERT_STREQ(jstr(data_of(&r), "mount_path"), "/workspace");
        ASSERT_TRUE(cJSON_IsString(jget(data_of(&r), "last_attached_at")));
        hres_done(&r);
        get_sandbox(&c, key, sid, &r);
        ASSERT_STREQ(jstr(data_of(&r), "volume_id"), vid);
        ASSERT_STREQ(jstr(data_of(&r), "mount_path"), "/workspace");
        ASSERT_TRUE(cJSON_IsTrue(jget(data_of(&r), "persistent")));
        hres_done(&r);
        /* One volume, one sandbox. */
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, body, 400, "Volume is attached to another sandbox; destroy that sandbox first");

        /* Data written survives pause/resume (the container is replaced). */
        survives_pause_resume(&c, key, sid, "/workspace/f", "hi");

        /* Attached: refuse delete. */
        EXPECT_ERROR(&c, "DELETE", path, key, NULL, 400, "Volume is attached; detach it before deleting");
        ASSERT_TRUE(docker_volume_exists(vid));

        /* Destroy detaches; the data is still there for the next sandbox. */
        op(&c, key, "DELETE", sid, "", &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_TRUE(cJSON_IsNull(jget(data_of(&r), "attached_sandbox_id")));
        ASSERT_TRUE(cJSON_IsNull(jget(data_of(&r), "mount_path")));
        hres_done(&r);
        ctld_create(&c, key, body, sid2);
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(dexec(sid2, "cat /workspace/f", &out), 0);
        ASSERT_STREQ(out, "hi\n");
        op(&c, key, "DELETE", sid2, "", &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);

        http_req(&c, "DELETE", path, key, NULL, &r);
        ASSERT_EQ(r.status, 204);
        ASSERT_EQ(r.len, 0);
        hres_done(&r);
        ASSERT_FALSE(docker_volume_exists(vid));
        EXPECT_ERROR(&c, "GET", path, key, NULL, 404, "Volume not found");
        ASSERT_EQ(total_count(&c, key, "/volumes"), 1);
        /* The freed slot can be used again. */
        create_volume(&c, key, "data-c", 10, vid);
}

struct attach_race { struct ctld *c; const char *key; const char *body; long status; char msg[256]; };
static void *attach_create(void *p) {
        struct attach_race *x = p;
        struct hres r;
        http_req(x->c, "POST", "/sandboxes", x->key, x->body, &r);
        x->status = r.status;
        snprintf(x->msg, sizeof(x->msg), "%s", hres_message(&r) ? hres_message(&r) : r.body);
        hres_done(&r);
        return NULL;
}

/* Several creates racing for one volume: exactly one wins; the others are refused with 400 and,
 * like every validation failure, leave no record. The race window is narrow, so it is run a few
 * rounds. */
TEST_FULL(concurrent_attach_of_one_volume_admits_one, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char acc[25], vid[25], body[96];
        struct attach_race x[3];
        pthread_t t[3];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "racer", NULL, acc);
        create_volume(&c, key, "shared", 10, vid);
        snprintf(body, sizeof(body), "{\"volumeId\":\"%s\"}", vid);
        for (int round = 1; round <= 5; round++) {
                for (int i = 0; i < 3; i++) {
                        x[i] = (struct attach_race) { .c = &c, .key = key, .body = body };
                        ASSERT_EQ(pthread_create(&t[i], NULL, attach_create, &x[i]), 0);
                }
                for (int i = 0; i < 3; i++)
                        pthread_join(t[i], NULL);
                int ok = 0;
                for (int i = 0; i < 3; i++) {
                        if (x[i].status == 201)
                                ok++;
                        else if (x[i].status != 400 ||
                                 strcmp(x[i].msg, "Volume is attached to another sandbox; destroy that sandbox first") != 0)
                                test_fail(__FILE__, __LINE__, "round %d: loser got %ld %s", round, x[i].status, x[i].msg);
                }
                ASSERT_EQ(ok, 1);
                _cleanup_free_ char *ps = account_containers(acc);
                ASSERT_EQ(strlen(ps), 13); /* one short container id and a newline */
                /* The refused ones are validation failures: no record either. */
                long long n = total_count(&c, key, "/sandboxes");
                if (n != round)
                        test_fail(__FILE__, __LINE__, "round %d: %lld sandbox records, want %d (refused creates left records)",
                                  round, n, round);
                /* Free the volume for the next round. */
                struct hres r;
                http_req(&c, "GET", "/sandboxes?status=ready", key, NULL, &r);
                const char *win = jstr(cJSON_GetArrayItem(jget(data_of(&r), "data"), 0), "id");
                ASSERT_NOT_NULL(win);
                char wid[25];
                snprintf(wid, sizeof(wid), "%s", win);
                hres_done(&r);
                op(&c, key, "DELETE", wid, "", &r);
                ASSERT_EQ(r.status, 204);
                hres_done(&r);
        }
}

TEST_FULL(persistent_sandbox_gets_implicit_volume_at_mount_path, 150) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char sid[25], vid[25], path[96];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "persister", NULL, NULL);

        ctld_create(&c, key, "{\"persistent\":true,\"persistentDiskGB\":10,\"mountPath\":\"/data\"}", sid);
        get_sandbox(&c, key, sid, &r);
        const cJSON *d = data_of(&r);
        ASSERT_TRUE(cJSON_IsTrue(jget(d, "persistent")));
        ASSERT_EQ(jint(d, "persistent_disk_gb"), 10);
        ASSERT_STREQ(jstr(d, "mount_path"), "/data");
        ASSERT_NOT_NULL(jstr(d, "volume_id"));
        snprintf(vid, sizeof(vid), "%s", jstr(d, "volume_id"));
        track_volume(vid);
        hres_done(&r);
        ASSERT_TRUE(docker_volume_exists(vid));

        snprintf(path, sizeof(path), "/volumes/%s", vid);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Volume fetched");
        ASSERT_STREQ(jstr(data_of(&r), "attached_sandbox_id"), sid);
        ASSERT_STREQ(jstr(data_of(&r), "mount_path"), "/data");
        ASSERT_EQ(jint(data_of(&r), "size"), 10);
        ASSERT_STREQ(jstr(data_of(&r), "type"), "sandbox");
        hres_done(&r);

        survives_pause_resume(&c, key, sid, "/data/f", "kept");
        EXPECT_ERROR(&c, "DELETE", path, key, NULL, 400, "Volume is attached; detach it before deleting");
}

TEST_FULL(volume_cap_rejection_at_create_leaves_no_sandbox_record, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char acc[25], v1[25], v2[25];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "hoarder", NULL, acc);
        create_volume(&c, key, "one", 10, v1);
        create_volume(&c, key, "two", 10, v2);
        /* The plan allows 2 volumes; persistent:true needs a third. A plan-limit refusal is a
         * validation failure: "clear 4xx errors; nothing created" (ARCHITECTURE.md). */
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, "{\"persistent\":true,\"persistentDiskGB\":10}", 403, "Your plan allows up to 2 volumes. Delete an existing one or upgrade.");
        _cleanup_free_ char *ps = account_containers(acc);
        ASSERT_STREQ(ps, "");
        ASSERT_EQ(total_count(&c, key, "/volumes"), 2);
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 0);
}

/* POST /volumes of name in region must be refused (403, the message naming `says`); a volume
 * made anyway is tracked for removal. what: the case, for the failure message. */
static void volume_refused(struct ctld *c, const char *key, const char *name, const char *region, const char *says,
                           const char *what) {
        struct hres r;
        _cleanup_free_ char *body = xasprintf("{\"name\":\"%s\",\"sizeGB\":10,\"region\":\"%s\"}", name, region);
        http_req(c, "POST", "/volumes", key, body, &r);
        if (r.status == 201)
                track_volume(jstr(data_of(&r), "id"));
        if (r.status != 403)
                test_fail(__FILE__, __LINE__, "%s: got %ld %s, want 403", what, r.status, r.body);
        ASSERT_CONTAINS(hres_message(&r), says);
        hres_done(&r);
}

TEST_FULL(volume_in_region_the_plan_cannot_use_is_refused, 60) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "wanderer", NULL, NULL);
        /* A disabled region accepts nothing new; a region outside the plan can never host a
         * sandbox to attach it to. Both would burn a volume slot on an unusable volume. */
        volume_refused(&c, key, "shut", CLOSED_REGION, "closed", "volume in disabled region");
        volume_refused(&c, key, "away", FAR_REGION, "far", "volume in region outside the plan");
        ASSERT_EQ(total_count(&c, key, "/volumes"), 0);
}
