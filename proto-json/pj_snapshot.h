/* pj_snapshot.h — the snapshot flow between controld and a node's agent (AMQP bodies and
 * the queues they travel on). Both daemons format and parse with these functions, so
 * the wire contract lives here and nowhere else.
 *
 * Queues (durable; both sides declare them with the same arguments):
 *   <exchange>.snapshots.<node>   routing key "snapshot.<node>": the jobs for one node
 *   <exchange>.snapshot-events    routing key "snapshot.events": every agent's outcomes
 *
 * The job, controld -> agent:
 *   {"type":"snapshot.create","snapshot_id":"<24 hex>","sandbox_id":"<24 hex>",
 *    "container_id":"<container reference>","node_id":"<node id>"}
 * The outcomes, agent -> controld (there is no progress event: one outcome per job):
 *   {"type":"snapshot.completed","snapshot_id","node_id","sandbox_id"?,
 *    "digest":"sha256:<64 hex>","size_bytes"?,"commit_ms"?,"push_ms"?,"verify_ms"?,
 *    "prune_ms"?,"total_ms"?}
 *   {"type":"snapshot.failed","snapshot_id","node_id","sandbox_id"?,"reason",
 *    "commit_ms"?,"push_ms"?,"verify_ms"?,"prune_ms"?}
 *
 * Both parsers take untrusted bytes: bodies are bounded, every field that is read is
 * checked, errors name the field (struct err). Unknown fields are ignored, so an
 * older and a newer peer still understand each other; a field that is present must have
 * its documented type and form (the formatters never write anything else).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj.h"

/* Body limits: what each consumer accepts off the broker. */
#define PJ_SNAPSHOT_MAX_JOB (16 * 1024)
#define PJ_SNAPSHOT_MAX_EVENT (64 * 1024)
/* A container reference: a 64-hex Docker id, "paddock-<24 hex>", or "<task>-<alloc uuid>". */
#define PJ_SNAPSHOT_MAX_CONTAINER 64
/* Node ids: 1..128 letters, digits, '-', '_', '.' (the agent's [agent] node_id rule). */
#define PJ_SNAPSHOT_MAX_NODE_ID 128
/* "sha256:" and 64 lowercase hex digits. */
#define PJ_SNAPSHOT_DIGEST_LEN 71
/* A failure's reason is cut (at a UTF-8 boundary) to this many bytes, not refused. */
#define PJ_SNAPSHOT_MAX_REASON 500

#define PJ_SNAPSHOT_EVENTS_KEY "snapshot.events"

/* Queue names and routing keys, xmalloc'd (the caller frees them). exchange and node are
 * the configured exchange and a node id; neither is checked here. */
char *pj_snapshot_jobs_queue(const char *exchange, const char *node);  /* <exchange>.snapshots.<node> */
char *pj_snapshot_jobs_key(const char *node);                          /* snapshot.<node> */
char *pj_snapshot_events_queue(const char *exchange);                  /* <exchange>.snapshot-events */

/* Whether the n bytes at s are a container reference the agent may commit: a 64-hex
 * Docker id, "paddock-<24 hex>" (the Docker driver's names), or "<task>-<alloc uuid>"
 * (Nomad's: the task part in Docker's name characters [a-zA-Z0-9][a-zA-Z0-9_.-]*, the
 * allocation id a lowercase UUID). At most PJ_SNAPSHOT_MAX_CONTAINER bytes, no NUL. */
bool pj_snapshot_container_ref_valid(const char *s, size_t n);

/* snapshot.create. */
struct pj_snapshot_job {
        char snapshot_id[25];                                   /* required, 24 lowercase hex */
        char sandbox_id[25];                                    /* "" = absent */
        /* "" when absent or not a valid container reference: the agent then reports the
         * job failed ("names no valid container") rather than dropping it, as it always
         * has, because the reference comes from the scheduler, not from this codec. */
        char container_id[PJ_SNAPSHOT_MAX_CONTAINER + 1];
        char node_id[PJ_SNAPSHOT_MAX_NODE_ID + 1];              /* "" = absent */
};

/* Compact JSON text, xmalloc'd. Empty fields are left out. */
char *pj_snapshot_job_format(const struct pj_snapshot_job *j);
/* Accepts bodies up to PJ_SNAPSHOT_MAX_JOB. Refused (-EINVAL, err names the field): not a
 * JSON object, type not "snapshot.create", snapshot_id not 24 lowercase hex, sandbox_id
 * present but not 24 lowercase hex, node_id present but not a node id, container_id
 * present but not a string. 0 on success; *ret untouched on failure. */
int pj_snapshot_job_parse(const char *body, size_t len, struct pj_snapshot_job *ret, struct err *err);

/* snapshot.completed and snapshot.failed. */
enum pj_snapshot_event_type {
        PJ_SNAPSHOT_COMPLETED,
        PJ_SNAPSHOT_FAILED,
};

/* The agent's phase timings; -1 = absent. */
enum pj_snapshot_phase {
        PJ_SNAPSHOT_PHASE_COMMIT,
        PJ_SNAPSHOT_PHASE_PUSH,
        PJ_SNAPSHOT_PHASE_VERIFY,
        PJ_SNAPSHOT_PHASE_PRUNE,
        PJ_SNAPSHOT_PHASE_TOTAL,
        _PJ_SNAPSHOT_PHASE_MAX,
};

struct pj_snapshot_event {
        enum pj_snapshot_event_type type;
        char snapshot_id[25];                                   /* required, 24 lowercase hex */
        char node_id[PJ_SNAPSHOT_MAX_NODE_ID + 1];              /* "" = absent (controld trusts app_id) */
        char sandbox_id[25];                                    /* "" = absent */
        char digest[PJ_SNAPSHOT_DIGEST_LEN + 1];                /* completed: required */
        int64_t size_bytes;                                     /* completed: -1 = absent */
        char reason[PJ_SNAPSHOT_MAX_REASON + 1];                /* failed: "" = absent or empty */
        int64_t ms[_PJ_SNAPSHOT_PHASE_MAX];                     /* -1 = absent */
};

const char *pj_snapshot_event_type_to_string(enum pj_snapshot_event_type t);
/* "commit_ms", "push_ms", ...: the phase's key on the wire. */
const char *pj_snapshot_phase_key(enum pj_snapshot_phase p);
/* An event of type t with every optional number absent (-1) and every string empty. */
void pj_snapshot_event_init(struct pj_snapshot_event *e, enum pj_snapshot_event_type t);

/* Compact JSON text, xmalloc'd. Absent (empty, -1) fields are left out; digest and
 * size_bytes only for completed, reason only for failed (always, "" when empty). */
char *pj_snapshot_event_format(const struct pj_snapshot_event *e);
/* Accepts bodies up to PJ_SNAPSHOT_MAX_EVENT. Refused (-EINVAL, err names the field):
 * not a JSON object, type not one of the two outcomes, snapshot_id not 24 lowercase hex,
 * completed without digest "sha256:<64 lowercase hex>", size_bytes or a *_ms present but
 * not a non-negative integer, node_id / sandbox_id present but malformed, reason present
 * but not a string. digest and size_bytes of a failed event, and reason of a completed
 * one, are not read. 0 on success; *ret untouched on failure. */
int pj_snapshot_event_parse(const char *body, size_t len, struct pj_snapshot_event *ret, struct err *err);
