/* Unit tests for proto-json/pj_snapshot: the snapshot job and outcomes round-trip, refuse
 * hostile input naming the field, and the queue names are the ones both daemons declare. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pj_snapshot.h"
#include "testlib.h"

#define SNAP "0123456789abcdef01234567"
#define SBX "fedcba9876543210fedcba98"
#define DIGEST "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DOCKER_ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static int job(const char *s, struct pj_snapshot_job *j, struct err *e) {
        return pj_snapshot_job_parse(s, strlen(s), j, e);
}
static int event(const char *s, struct pj_snapshot_event *ev, struct err *e) {
        return pj_snapshot_event_parse(s, strlen(s), ev, e);
}

TEST(queue_names) {
        _cleanup_free_ char *q = pj_snapshot_jobs_queue("paddock", "node-1");
        _cleanup_free_ char *k = pj_snapshot_jobs_key("node-1");
        _cleanup_free_ char *ev = pj_snapshot_events_queue("paddock");
        ASSERT_STREQ(q, "paddock.snapshots.node-1");
        ASSERT_STREQ(k, "snapshot.node-1");
        ASSERT_STREQ(ev, "paddock.snapshot-events");
        ASSERT_STREQ(PJ_SNAPSHOT_EVENTS_KEY, "snapshot.events");
}

TEST(job_round_trip) {
        struct pj_snapshot_job j = { .snapshot_id = SNAP, .sandbox_id = SBX, .container_id = "paddock-" SBX,
                                     .node_id = "node-1" }, back;
        struct err e;
        _cleanup_free_ char *t = pj_snapshot_job_format(&j);
        ASSERT_STREQ(t, "{\"type\":\"snapshot.create\",\"snapshot_id\":\"" SNAP "\",\"sandbox_id\":\"" SBX
                        "\",\"container_id\":\"paddock-" SBX "\",\"node_id\":\"node-1\"}");
        ASSERT_OK(job(t, &back, &e));
        ASSERT_STREQ(back.snapshot_id, SNAP);
        ASSERT_STREQ(back.sandbox_id, SBX);
        ASSERT_STREQ(back.container_id, "paddock-" SBX);
        ASSERT_STREQ(back.node_id, "node-1");
        _cleanup_free_ char *t2 = pj_snapshot_job_format(&back);
        ASSERT_STREQ(t, t2);

        /* Only the envelope is required; unknown fields are ignored (a newer controld). */
        ASSERT_OK(job("{\"type\":\"snapshot.create\",\"snapshot_id\":\"" SNAP "\",\"future\":[1]}", &back, &e));
        ASSERT_STREQ(back.sandbox_id, "");
        ASSERT_STREQ(back.container_id, "");
        ASSERT_STREQ(back.node_id, "");
}

/* A container reference that is not one reads as none: the agent reports the job failed
 * rather than dropping it, so controld learns at once instead of at its timeout. */
TEST(job_container_reference) {
        static const struct { const char *ref; bool ok; } refs[] = {
                { DOCKER_ID, true },
                { "paddock-" SBX, true },
                { "python-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f", true },
                { "my_task.v2-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f", true },
                { "", false },
                { "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", false },
                { "paddock-XYZ", false },
                { "-task-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f", false },
                { "task-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5F", false },
                { "ta sk-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f", false },
                { "0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f", false },
                { "a-very-long-task-name-that-goes-on-0a1b2c3d-0a1b-0a1b-0a1b-0a1b2c3d4e5f", false },
                { "abc", false },
        };
        for (size_t i = 0; i < ELEMENTSOF(refs); i++) {
                if (pj_snapshot_container_ref_valid(refs[i].ref, strlen(refs[i].ref)) != refs[i].ok)
                        test_fail(__FILE__, __LINE__, "%s: want %s", refs[i].ref, refs[i].ok ? "valid" : "invalid");
                char body[512];
                snprintf(body, sizeof(body), "{\"type\":\"snapshot.create\",\"snapshot_id\":\"" SNAP "\",\"container_id\":\"%s\"}",
                         refs[i].ref);
                struct pj_snapshot_job j;
                struct err e;
                ASSERT_OK(job(body, &j, &e));
                ASSERT_STREQ(j.container_id, refs[i].ok ? refs[i].ref : "");
        }
        ASSERT_FALSE(pj_snapshot_container_ref_valid("paddock-\0" "0123456789abcdef012345", 8 + 24));
        ASSERT_FALSE(pj_snapshot_container_ref_valid(NULL, 0));
}

#define JOB(members) "{\"type\":\"snapshot.create\",\"snapshot_id\":\"" SNAP "\"," members "}"

TEST(job_refusals_name_the_field) {
        static const struct { const char *body, *field; } bad[] = {
                { "", "" },
                { "[]", "" },
                { "\"snapshot.create\"", "" },
                { "{\"type\":\"snapshot.create\"", "" },
                { "{}", "type" },
                { "{\"type\":1,\"snapshot_id\":\"" SNAP "\"}", "type" },
                { "{\"type\":\"snapshot.delete\",\"snapshot_id\":\"" SNAP "\"}", "type" },
                { "{\"type\":\"snapshot.create\"}", "snapshot_id" },
                { "{\"type\":\"snapshot.create\",\"snapshot_id\":null}", "snapshot_id" },
                { "{\"type\":\"snapshot.create\",\"snapshot_id\":42}", "snapshot_id" },
                { "{\"type\":\"snapshot.create\",\"snapshot_id\":\"0123456789ABCDEF01234567\"}", "snapshot_id" },
                { "{\"type\":\"snapshot.create\",\"snapshot_id\":\"0123456789abcdef012345678\"}", "snapshot_id" },
                { "{\"type\":\"snapshot.create\",\"snapshot_id\":\"0123456789abcdef0123456\"}", "snapshot_id" },
                { "{\"type\":\"snapshot.create\",\"snapshot_id\":\"../../etc/passwd\"}", "snapshot_id" },
                { JOB("\"sandbox_id\":\"xyz\""), "sandbox_id" },
                { JOB("\"sandbox_id\":[]"), "sandbox_id" },
                { JOB("\"container_id\":7"), "container_id" },
                { JOB("\"node_id\":\"a b\""), "node_id" },
                { JOB("\"node_id\":\"\""), "node_id" },
                { JOB("\"node_id\":{}"), "node_id" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct pj_snapshot_job j = { .snapshot_id = "untouched" };
                struct err e;
                if (job(bad[i].body, &j, &e) != -EINVAL)
                        test_fail(__FILE__, __LINE__, "accepted %s", bad[i].body);
                if (strcmp(e.field, bad[i].field) != 0)
                        test_fail(__FILE__, __LINE__, "%s: field '%s', want '%s' (%s)", bad[i].body, e.field, bad[i].field,
                                  e.message);
                ASSERT_TRUE(e.message[0] != 0);
                ASSERT_STREQ(j.snapshot_id, "untouched");
        }
        /* A node id of 129 characters; a body over the limit. */
        char body[512];
        char nid[130];
        memset(nid, 'n', 129);
        nid[129] = 0;
        snprintf(body, sizeof(body), JOB("\"node_id\":\"%s\""), nid);
        struct pj_snapshot_job j;
        struct err e;
        ASSERT_EQ(job(body, &j, &e), -EINVAL);
        ASSERT_STREQ(e.field, "node_id");
        nid[128] = 0;
        snprintf(body, sizeof(body), JOB("\"node_id\":\"%s\""), nid);
        ASSERT_OK(job(body, &j, &e));
        size_t big = PJ_SNAPSHOT_MAX_JOB + 1;
        _cleanup_free_ char *huge = xmalloc(big + 1);
        int n = snprintf(huge, big, JOB("\"pad\":\""));
        memset(huge + n, 'x', big - (size_t) n - 2);
        memcpy(huge + big - 2, "\"}", 3);
        ASSERT_EQ(job(huge, &j, &e), -EINVAL);
        ASSERT_STREQ(e.field, "");
        ASSERT_TRUE(strstr(e.message, "too large") != NULL);
}

TEST(event_round_trip) {
        struct pj_snapshot_event ev, back;
        struct err e;
        pj_snapshot_event_init(&ev, PJ_SNAPSHOT_COMPLETED);
        strcpy(ev.snapshot_id, SNAP);
        strcpy(ev.node_id, "node-1");
        strcpy(ev.sandbox_id, SBX);
        strcpy(ev.digest, DIGEST);
        ev.size_bytes = 5ll << 40;
        ev.ms[PJ_SNAPSHOT_PHASE_COMMIT] = 120;
        ev.ms[PJ_SNAPSHOT_PHASE_PUSH] = 3400;
        ev.ms[PJ_SNAPSHOT_PHASE_VERIFY] = 0;
        ev.ms[PJ_SNAPSHOT_PHASE_PRUNE] = 7;
        ev.ms[PJ_SNAPSHOT_PHASE_TOTAL] = 3600;
        _cleanup_free_ char *t = pj_snapshot_event_format(&ev);
        ASSERT_STREQ(t, "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP "\",\"node_id\":\"node-1\",\"sandbox_id\":\"" SBX
                        "\",\"digest\":\"" DIGEST "\",\"size_bytes\":5497558138880,\"commit_ms\":120,\"push_ms\":3400,"
                        "\"verify_ms\":0,\"prune_ms\":7,\"total_ms\":3600}");
        ASSERT_OK(event(t, &back, &e));
        ASSERT_EQ(back.type, PJ_SNAPSHOT_COMPLETED);
        ASSERT_STREQ(back.snapshot_id, SNAP);
        ASSERT_STREQ(back.node_id, "node-1");
        ASSERT_STREQ(back.sandbox_id, SBX);
        ASSERT_STREQ(back.digest, DIGEST);
        ASSERT_EQ(back.size_bytes, 5ll << 40);
        for (size_t i = 0; i < _PJ_SNAPSHOT_PHASE_MAX; i++)
                ASSERT_EQ(back.ms[i], ev.ms[i]);
        _cleanup_free_ char *t2 = pj_snapshot_event_format(&back);
        ASSERT_STREQ(t, t2);

        pj_snapshot_event_init(&ev, PJ_SNAPSHOT_FAILED);
        strcpy(ev.snapshot_id, SNAP);
        strcpy(ev.reason, "the registry refused the push: denied");
        ev.ms[PJ_SNAPSHOT_PHASE_PRUNE] = 3;
        _cleanup_free_ char *f = pj_snapshot_event_format(&ev);
        ASSERT_STREQ(f, "{\"type\":\"snapshot.failed\",\"snapshot_id\":\"" SNAP
                        "\",\"reason\":\"the registry refused the push: denied\",\"prune_ms\":3}");
        ASSERT_OK(event(f, &back, &e));
        ASSERT_EQ(back.type, PJ_SNAPSHOT_FAILED);
        ASSERT_STREQ(back.reason, "the registry refused the push: denied");
        ASSERT_EQ(back.size_bytes, -1);
        ASSERT_EQ(back.ms[PJ_SNAPSHOT_PHASE_COMMIT], -1);
        ASSERT_EQ(back.ms[PJ_SNAPSHOT_PHASE_PRUNE], 3);
        ASSERT_STREQ(back.digest, "");

        /* What today's agents send: numbers as cJSON doubles, fields in their order. */
        ASSERT_OK(event("{\"snapshot_id\":\"" SNAP "\",\"node_id\":\"n1\",\"commit_ms\":12,\"type\":\"snapshot.completed\","
                        "\"digest\":\"" DIGEST "\",\"size_bytes\":1024,\"total_ms\":40}", &back, &e));
        ASSERT_EQ(back.size_bytes, 1024);
        ASSERT_EQ(back.ms[PJ_SNAPSHOT_PHASE_TOTAL], 40);
        /* A failed event's digest and size are not read; a missing reason is empty; unknown fields pass. */
        ASSERT_OK(event("{\"type\":\"snapshot.failed\",\"snapshot_id\":\"" SNAP "\",\"digest\":\"junk\",\"size_bytes\":\"x\","
                        "\"later\":true}", &back, &e));
        ASSERT_STREQ(back.reason, "");
        ASSERT_STREQ(back.digest, "");
}

TEST(event_reason_is_cut_at_a_character) {
        char body[2048], reason[700];
        /* 'é' is two bytes: 300 of them are 600 bytes, cut to 250 whole ones (500 bytes). */
        for (int i = 0; i < 300; i++)
                memcpy(reason + 2 * i, "\xc3\xa9", 2);
        reason[600] = 0;
        snprintf(body, sizeof(body), "{\"type\":\"snapshot.failed\",\"snapshot_id\":\"" SNAP "\",\"reason\":\"%s\"}", reason);
        struct pj_snapshot_event ev;
        struct err e;
        ASSERT_OK(event(body, &ev, &e));
        ASSERT_EQ(strlen(ev.reason), PJ_SNAPSHOT_MAX_REASON);
        ASSERT_TRUE(!memcmp(ev.reason, reason, PJ_SNAPSHOT_MAX_REASON));
}

#define DONE(members) "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP "\",\"digest\":\"" DIGEST "\"," members "}"
#define FAIL(members) "{\"type\":\"snapshot.failed\",\"snapshot_id\":\"" SNAP "\"," members "}"

TEST(event_refusals_name_the_field) {
        static const struct { const char *body, *field; } bad[] = {
                { "null", "" },
                { "[{}]", "" },
                { "{\"type\":\"snapshot.completed\",}", "" },
                { "{\"snapshot_id\":\"" SNAP "\"}", "type" },
                { "{\"type\":\"snapshot.progress\",\"snapshot_id\":\"" SNAP "\"}", "type" },
                { "{\"type\":\"snapshot.create\",\"snapshot_id\":\"" SNAP "\"}", "type" },
                { "{\"type\":true,\"snapshot_id\":\"" SNAP "\"}", "type" },
                { "{\"type\":\"snapshot.failed\"}", "snapshot_id" },
                { "{\"type\":\"snapshot.failed\",\"snapshot_id\":\"short\"}", "snapshot_id" },
                { "{\"type\":\"snapshot.failed\",\"snapshot_id\":[\"" SNAP "\"]}", "snapshot_id" },
                { "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP "\"}", "digest" },
                { "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP "\",\"digest\":5}", "digest" },
                { "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP "\",\"digest\":\"md5:0123\"}", "digest" },
                { "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP "\",\"digest\":\"sha256:0123\"}", "digest" },
                { "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP
                  "\",\"digest\":\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdeF\"}", "digest" },
                { "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP
                  "\",\"digest\":\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0\"}", "digest" },
                { "{\"type\":\"snapshot.completed\",\"snapshot_id\":\"" SNAP
                  "\",\"digest\":\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef/../456789abcde\"}", "digest" },
                { DONE("\"size_bytes\":-1"), "size_bytes" },
                { DONE("\"size_bytes\":1.5"), "size_bytes" },
                { DONE("\"size_bytes\":\"1024\""), "size_bytes" },
                { DONE("\"size_bytes\":1e300"), "size_bytes" },
                { DONE("\"commit_ms\":-5"), "commit_ms" },
                { DONE("\"total_ms\":\"fast\""), "total_ms" },
                { FAIL("\"push_ms\":true"), "push_ms" },
                { FAIL("\"reason\":404"), "reason" },
                { FAIL("\"sandbox_id\":\"" SNAP "x\""), "sandbox_id" },
                { FAIL("\"node_id\":\"node/1\""), "node_id" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct pj_snapshot_event ev = { .snapshot_id = "untouched" };
                struct err e;
                if (event(bad[i].body, &ev, &e) != -EINVAL)
                        test_fail(__FILE__, __LINE__, "accepted %s", bad[i].body);
                if (strcmp(e.field, bad[i].field) != 0)
                        test_fail(__FILE__, __LINE__, "%s: field '%s', want '%s' (%s)", bad[i].body, e.field, bad[i].field,
                                  e.message);
                ASSERT_TRUE(strstr(e.message, bad[i].field) != NULL);
                ASSERT_STREQ(ev.snapshot_id, "untouched");
        }
        /* Over PJ_SNAPSHOT_MAX_EVENT; nested past the depth limit. */
        size_t big = PJ_SNAPSHOT_MAX_EVENT + 64;
        _cleanup_free_ char *body = xmalloc(big);
        int n = snprintf(body, big, FAIL("\"reason\":\""));
        memset(body + n, 'x', big - (size_t) n - 3);
        memcpy(body + big - 3, "\"}", 3);
        struct pj_snapshot_event ev;
        struct err e;
        ASSERT_EQ(event(body, &ev, &e), -EINVAL);
        ASSERT_STREQ(e.field, "");
        ASSERT_EQ(event(FAIL("\"x\":[[[[[[1]]]]]]"), &ev, &e), -EINVAL);
        ASSERT_STREQ(e.field, "");
}

TEST(random_bytes_never_crash) {
        char junk[300];
        struct err e;
        srandom(test_seed(1)); /* 1: glibc's own default, the inputs this test always had */
        for (int i = 0; i < 5000; i++) {
                size_t n = (size_t) (random() % sizeof(junk));
                for (size_t k = 0; k < n; k++)
                        junk[k] = (char) (random() & 0xff);
                struct pj_snapshot_job j;
                struct pj_snapshot_event ev;
                (void) pj_snapshot_job_parse(junk, n, &j, &e);
                (void) pj_snapshot_event_parse(junk, n, &ev, &e);
        }
}
