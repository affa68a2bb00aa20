/* HTTP-level tests of the controld public API's templates and regions lists and the /wait
 * long-polls. Runs a real controld against the real dockerd + gVisor.
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

static double mono_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* ------------------------------------------------------------------------------------------ */
/* 5. Templates and regions.                                                                   */

TEST(templates_and_regions_lists) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "browser", NULL);

        HTTP_EXPECT(&c, "GET", "/sandbox/templates", NULL, NULL, 401);
        http_req(&c, "GET", "/sandbox/templates", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Templates fetched");
        const cJSON *a = data_of(&r);
        ASSERT_TRUE(cJSON_IsArray(a));
        ASSERT_EQ(cJSON_GetArraySize(a), 3);
        const struct { const char *name, *display, *desc; } want[] = {
                { "busybox", "BusyBox", "Tiny test image" },
                { "python-3.11", "Python 3.11", "Debian 12 with Python" },
                { "missing-image", "missing-image", "" },
        };
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                const cJSON *t = NULL, *e;
                cJSON_ArrayForEach(e, a)
                        if (jstr(e, "name") && !strcmp(jstr(e, "name"), want[i].name))
                                t = e;
                if (!t)
                        test_fail(__FILE__, __LINE__, "template %s missing: %s", want[i].name, r.body);
                ASSERT_STREQ(jstr(t, "display_name"), want[i].display);
                ASSERT_STREQ(jstr(t, "description"), want[i].desc);
                /* What it contains: the image's size as Docker holds it (null where the image is
                 * missing), the default specs, language and tools (none configured here). */
                const cJSON *size = cJSON_GetObjectItemCaseSensitive(t, "size_mb");
                if (i == 2)
                        ASSERT_TRUE(cJSON_IsNull(size));
                else
                        ASSERT_TRUE(cJSON_IsNumber(size) && size->valuedouble >= 1);
                ASSERT_TRUE(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "language")));
                ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(t, "tools")));
                const cJSON *specs = cJSON_GetObjectItemCaseSensitive(t, "default_specs");
                ASSERT_EQ((int) cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(specs, "memory")), i == 0 ? 128 : 512);
                /* Images are an operator detail and stay out of the public list. */
                ASSERT_TRUE(strstr(r.body, "paddock/does-not-exist") == NULL);
        }
        hres_done(&r);

        http_req(&c, "GET", "/sandboxes/regions", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Regions fetched");
        const cJSON *regions = jget(data_of(&r), "regions");
        ASSERT_TRUE(cJSON_IsArray(regions));
        ASSERT_EQ(cJSON_GetArraySize(regions), 3);
        const cJSON *g;
        bool saw_local = false, saw_closed = false;
        cJSON_ArrayForEach(g, regions) {
                static const char *const f[] = { "id", "name", "country", "continent" };
                for (size_t i = 0; i < ELEMENTSOF(f); i++)
                        if (!cJSON_IsString(jget(g, f[i])))
                                test_fail(__FILE__, __LINE__, "region lacks string '%s': %s", f[i], r.body);
                ASSERT_TRUE(cJSON_IsBool(jget(g, "enabled")));
                ASSERT_STREQ(jstr(g, "type"), "sandbox");
                ASSERT_EQ(strlen(jstr(g, "id")), 24);
                if (!strcmp(jstr(g, "name"), "local")) {
                        saw_local = true;
                        ASSERT_STREQ(jstr(g, "id"), LOCAL_REGION);
                        ASSERT_STREQ(jstr(g, "country"), "Local");
                        ASSERT_STREQ(jstr(g, "continent"), "Local");
                        ASSERT_TRUE(cJSON_IsTrue(jget(g, "enabled")));
                }
                if (!strcmp(jstr(g, "name"), "closed")) {
                        saw_closed = true;
                        ASSERT_STREQ(jstr(g, "id"), CLOSED_REGION);
                        ASSERT_TRUE(cJSON_IsFalse(jget(g, "enabled")));
                }
        }
        ASSERT_TRUE(saw_local);
        ASSERT_TRUE(saw_closed);
        hres_done(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 6. /wait long-polls.                                                                        */

struct waiter { struct ctld *c; const char *key; char path[160]; long status; char st[32]; double dt; };

static void *wait_thread(void *p) {
        struct waiter *w = p;
        struct hres r;
        double t0 = mono_s();
        http_req(w->c, "GET", w->path, w->key, NULL, &r);
        w->dt = mono_s() - t0;
        w->status = r.status;
        snprintf(w->st, sizeof(w->st), "%s", jstr(data_of(&r), "status") ? jstr(data_of(&r), "status") : "?");
        hres_done(&r);
        return NULL;
}

TEST_FULL(wait_returns_settled_times_out_and_does_not_block_others, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char id[25];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "waiter", NULL, id);

        /* Settled already: at once, the sandbox in the usual envelope. */
        double t0 = mono_s();
        op(&c, key, "GET", id, "/wait?timeout=5", &r);
        ASSERT_ENVELOPE(&r, 200, "Sandbox fetched");
        ASSERT_STREQ(jstr(data_of(&r), "id"), id);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);
        ASSERT_TRUE(mono_s() - t0 < 3.0);
        op(&c, key, "GET", id, "/wait?timeout=0&status=paused", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);

        /* Asking for a status that does not come: the current sandbox after the timeout. */
        t0 = mono_s();
        op(&c, key, "GET", id, "/wait?timeout=2&status=paused", &r);
        double dt = mono_s() - t0;
        ASSERT_ENVELOPE(&r, 200, "Sandbox fetched");
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);
        ASSERT_TRUE(dt >= 1.5 && dt < 15);

        /* A long-poll in flight does not hold up other requests, and a pause ends it. */
        struct waiter w = { .c = &c, .key = key };
        snprintf(w.path, sizeof(w.path), "/sandboxes/%s/wait?timeout=20&status=paused", id);
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
        usleep(300000);
        for (int i = 0; i < 5; i++) {
                t0 = mono_s();
                HTTP_EXPECT(&c, "GET", "/healthz", NULL, NULL, 200);
                get_sandbox(&c, key, id, &r);
                hres_done(&r);
                ASSERT_TRUE(mono_s() - t0 < 2.0);
        }
        op(&c, key, "POST", id, "/pause", &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        pthread_join(t, NULL);
        ASSERT_EQ(w.status, 200);
        ASSERT_STREQ(w.st, "paused");
        ASSERT_TRUE(w.dt < 18);

        /* Waiting for a status on a destroyed sandbox returns at once (it can never come). */
        op(&c, key, "DELETE", id, "", &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);
        t0 = mono_s();
        op(&c, key, "GET", id, "/wait?timeout=20&status=ready", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        hres_done(&r);
        ASSERT_TRUE(mono_s() - t0 < 3.0);
}
