/* The snapshot codecs (proto-json/pj_snapshot.c): the job controld sends a node's agent
 * and the outcome the agent sends back. Properties: any bytes parse or fail with a
 * message that names a field, never crash; an accepted job or outcome formats to text that
 * parses back to the same struct and formats to the same text again; an accepted
 * container reference, id and digest pass the same checks the daemons rely on. */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "pj_snapshot.h"
#include "strutil.h"

static void job_props(const char *b, size_t size) {
        struct pj_snapshot_job j, j2;
        struct err e;
        if (pj_snapshot_job_parse(b, size, &j, &e) < 0) {
                FUZZ_ASSERT(e.message[0] && memchr(e.message, 0, sizeof(e.message)), "error without a message");
                return;
        }
        FUZZ_ASSERT(hexid_valid(j.snapshot_id), "snapshot_id %s", j.snapshot_id);
        FUZZ_ASSERT(!j.sandbox_id[0] || hexid_valid(j.sandbox_id), "sandbox_id %s", j.sandbox_id);
        FUZZ_ASSERT(!j.container_id[0] || pj_snapshot_container_ref_valid(j.container_id, strlen(j.container_id)),
                    "container_id %s", j.container_id);
        _cleanup_free_ char *t = pj_snapshot_job_format(&j);
        FUZZ_ASSERT(pj_snapshot_job_parse(t, strlen(t), &j2, &e) == 0, "own job refused (%s): %s", e.message, t);
        FUZZ_ASSERT(!strcmp(j.snapshot_id, j2.snapshot_id) && !strcmp(j.sandbox_id, j2.sandbox_id) &&
                            !strcmp(j.container_id, j2.container_id) && !strcmp(j.node_id, j2.node_id),
                    "job changed in a round trip: %s", t);
        _cleanup_free_ char *t2 = pj_snapshot_job_format(&j2);
        FUZZ_ASSERT(!strcmp(t, t2), "job format not stable: %s vs %s", t, t2);
}

static void event_props(const char *b, size_t size) {
        struct pj_snapshot_event ev, ev2;
        struct err e;
        if (pj_snapshot_event_parse(b, size, &ev, &e) < 0) {
                FUZZ_ASSERT(e.message[0] && memchr(e.message, 0, sizeof(e.message)), "error without a message");
                FUZZ_ASSERT(strstr(e.message, e.field), "message '%s' does not name field '%s'", e.message, e.field);
                return;
        }
        FUZZ_ASSERT(hexid_valid(ev.snapshot_id), "snapshot_id %s", ev.snapshot_id);
        if (ev.type == PJ_SNAPSHOT_COMPLETED)
                FUZZ_ASSERT(strlen(ev.digest) == PJ_SNAPSHOT_DIGEST_LEN && startswith(ev.digest, "sha256:"), "digest %s",
                            ev.digest);
        else
                FUZZ_ASSERT(!ev.digest[0] && ev.size_bytes == -1, "a failed event carries completion fields");
        FUZZ_ASSERT(strlen(ev.reason) <= PJ_SNAPSHOT_MAX_REASON, "reason too long");
        _cleanup_free_ char *t = pj_snapshot_event_format(&ev);
        FUZZ_ASSERT(pj_snapshot_event_parse(t, strlen(t), &ev2, &e) == 0, "own event refused (%s): %s", e.message, t);
        FUZZ_ASSERT(ev.type == ev2.type && !strcmp(ev.snapshot_id, ev2.snapshot_id) && !strcmp(ev.node_id, ev2.node_id) &&
                            !strcmp(ev.sandbox_id, ev2.sandbox_id) && !strcmp(ev.digest, ev2.digest) &&
                            ev.size_bytes == ev2.size_bytes && !strcmp(ev.reason, ev2.reason) &&
                            !memcmp(ev.ms, ev2.ms, sizeof(ev.ms)),
                    "event changed in a round trip: %s", t);
        _cleanup_free_ char *t2 = pj_snapshot_event_format(&ev2);
        FUZZ_ASSERT(!strcmp(t, t2), "event format not stable: %s vs %s", t, t2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *b = (const char *) data;
        job_props(b, size);
        event_props(b, size);
        (void) pj_snapshot_container_ref_valid(b, size > PJ_SNAPSHOT_MAX_CONTAINER + 8 ? PJ_SNAPSHOT_MAX_CONTAINER + 8 : size);
        return 0;
}
