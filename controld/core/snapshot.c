/* snapshot.c — snapshots: the record, the job to the node's agent, the agent's outcome,
 * deadlines, automatic schedules and retention.
 *
 * A snapshot is recorded `creating` before anything else happens, then a snapshot.create
 * job is published, persistent and confirmed, to the node's durable job queue
 * (<exchange>.snapshots.<node>, routing key "snapshot.<node>"; declared here too, so a job
 * for an agent that is down waits for it). The agent answers on the durable
 * <exchange>.snapshot-events queue, which this process consumes with manual acks: an
 * outcome published while controld was down is applied when it comes back. An event is
 * taken only from the node the job went to (app_id, which the agent sets with user_id =
 * its broker login).
 *
 * Nothing stays `creating` forever: past [snapshots] timeout the tick thread marks it
 * failed. An outcome that arrives after that (or for a snapshot deleted meanwhile) has
 * its registry manifest deleted, so the registry holds no image without a record.
 *
 * The tick thread also fires automatic schedules (5-field cron, UTC) and applies each
 * plan's retention (count and age) to automatic snapshots.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "amqp.h"

#include "cleanup.h"
#include "controld.h"
#include "fault.h"
#include "docker.h"
#include "cron.h"
#include "log.h"
#include "nodebus.h"
#include "pj_snapshot.h"
#include "registry.h"
#include "strutil.h"
#include "ctl-metrics.h"
#include "snapshot.h"

#define CH 1
#define PUBLISH_TIMEOUT_MS 5000

struct snapbus {
        struct ctl *c;
        pthread_mutex_t pub_lock;
        amqp_connection_state_t pub;     /* NULL: connect at the next publish */
        uint64_t pub_tag;
        pthread_t events_thread, tick_thread;
        bool events_running, tick_running;
        atomic_bool stop;
        pthread_mutex_t lock;            /* tick thread's sleep */
        pthread_cond_t cond;
};

/* ---------------------------------------------------------------- publishing jobs */

static int pub_connect(struct snapbus *b, struct err *err) {
        amqp_connection_state_t conn = NULL;
        int r = nodebus_connect(b->c->bus, "snapshots", CH, &conn, err);
        if (r < 0)
                return r;
        amqp_confirm_select(conn, CH);
        if ((r = amqpx_rpc_check(amqp_get_rpc_reply(conn), "confirm.select", err)) < 0)
                goto fail;
        b->pub = conn;
        b->pub_tag = 0;
        return 0;
fail:
        amqp_destroy_connection(conn);
        return r;
}

static void pub_drop(struct snapbus *b) {
        if (b->pub)
                amqp_destroy_connection(b->pub);
        b->pub = NULL;
}

static int declare_jobs_queue(struct snapbus *b, const char *node, struct err *err) {
        _cleanup_free_ char *q = pj_snapshot_jobs_queue(b->c->cfg->amqp_exchange, node);
        _cleanup_free_ char *key = pj_snapshot_jobs_key(node);
        amqp_queue_declare(b->pub, CH, amqp_cstring_bytes(q), 0, 1, 0, 0, amqp_empty_table);
        int r = amqpx_rpc_check(amqp_get_rpc_reply(b->pub), "queue.declare", err);
        if (r < 0)
                return r;
        amqp_queue_bind(b->pub, CH, amqp_cstring_bytes(q), amqp_cstring_bytes(b->c->cfg->amqp_exchange),
                        amqp_cstring_bytes(key), amqp_empty_table);
        return amqpx_rpc_check(amqp_get_rpc_reply(b->pub), "queue.bind", err);
}

/* One attempt: declare, publish persistent + mandatory, wait for the broker's ack. */
static int publish_once(struct snapbus *b, const char *node, const char *body, struct err *err) {
        int r;
        if (!b->pub && (r = pub_connect(b, err)) < 0)
                return r;
        if ((r = declare_jobs_queue(b, node, err)) < 0)
                return r;
        _cleanup_free_ char *key = pj_snapshot_jobs_key(node);
        amqp_basic_properties_t p = amqpx_json_props(2, NULL, b->c->cfg->amqp_login);
        if (amqp_basic_publish(b->pub, CH, amqp_cstring_bytes(b->c->cfg->amqp_exchange), amqp_cstring_bytes(key), 1, 0, &p,
                               amqp_cstring_bytes(body)) != AMQP_STATUS_OK)
                return err_set(err, -ECONNRESET, "the connection to RabbitMQ broke while publishing");
        uint64_t tag = ++b->pub_tag;
        switch ((r = amqpx_wait_confirm(b->pub, tag, mono_ms() + PUBLISH_TIMEOUT_MS))) {
        case 0:
                break;
        case -ETIMEDOUT:
                err_set(err, r, "RabbitMQ did not confirm the job within %d ms", PUBLISH_TIMEOUT_MS);
                break;
        case -EIO:
                err_set(err, r, "RabbitMQ refused the job (nack)");
                break;
        case -ENXIO:
                /* The returned content frames follow unread; the caller drops the connection. */
                err_set(err, r, "RabbitMQ has no queue for node %s", node);
                break;
        default:
                err_set(err, r, "the connection to RabbitMQ broke, or it closed the channel");
                break;
        }
        return r;
}

static int publish_job(struct snapbus *b, const char *node, const char *body, struct err *err) {
        pthread_mutex_lock(&b->pub_lock);
        int r = publish_once(b, node, body, err);
        if (r < 0) {
                /* A connection that died while idle: once more on a fresh one. */
                pub_drop(b);
                r = publish_once(b, node, body, err);
                if (r < 0)
                        pub_drop(b);
        }
        pthread_mutex_unlock(&b->pub_lock);
        return r;
}

/* ---------------------------------------------------------------- create, load, delete */

int snapshot_create(struct ctl *c, const struct account *acc, const char *sandbox_id, const char *name, bool automatic,
                    struct snapshot *ret, struct err *err) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        int r;
        if (!c->snapbus)
                return err_set(err, -EOPNOTSUPP,
                               "Snapshots need node agents, and this server has none ([amqp] url is not set)");
        /* Under the sandbox's lock from the status check to the job's hand-over: a pause (which
         * holds it while it removes the container) either comes first, and the snapshot is
         * refused, or finds this snapshot in flight and waits for it. */
        SANDBOX_LOCK_GUARD(lock, c, sandbox_id);
        r = sandbox_load(c, acc, sandbox_id, &sb, err);
        if (r < 0)
                return r;
        if (sb.status != SB_READY)
                return err_set(err, -EBUSY, "Sandbox must be ready to take a snapshot (it is %s)", sb_status_str(sb.status));
        if (!sb.node_id || !sb.container_id)
                return err_set(err, -EBUSY, "Sandbox has no running container to snapshot");

        hexid_new(sn.id);
        strscpy(sn.account_id, acc->id, sizeof(sn.account_id));
        strscpy(sn.sandbox_id, sb.id, sizeof(sn.sandbox_id));
        sn.name = xstrdup(name);
        sn.image_tag = xasprintf("%s/%s:%s", c->cfg->snap_registry, c->cfg->snap_repository, sn.id);
        sn.source_template = xstrdup(sb.template_name);
        sn.node_id = xstrdup(sb.node_id);
        sn.status = SNAP_CREATING;
        sn.automatic = automatic;
        sn.size_bytes = -1;
        sn.created_at = now_ms();
        /* The plan's limits, per account: a tenant's snapshots cannot fill the registry, and with
         * at most snapshot_max_inflight of its jobs queued on a node, another tenant's job waits
         * behind a bounded number of them (the node runs one at a time, in order). */
        struct plan plan_buf;
        const struct plan *plan = config_account_plan(c->cfg, acc, &plan_buf);
        if (!plan)
                return err_set(err, -EPERM, "Your account's plan is not available on this server");
        struct snapshot_caps caps = { .max_manual = plan->snapshot_max_manual,
                                      .max_inflight = plan->snapshot_max_inflight,
                                      .max_total_bytes = plan->snapshot_max_total_gb << 30 };
        int which = 0;
        r = store_snapshot_insert_capped(c->store, &sn, &caps, &which);
        if (r == -EDQUOT && which == SNAPSHOT_CAP_MANUAL)
                return err_set(err, -EDQUOT, "Your plan allows up to %lld snapshots (snapshot_max_manual). Delete one first.",
                               (long long) caps.max_manual);
        if (r == -EDQUOT && which == SNAPSHOT_CAP_INFLIGHT)
                return err_set(err, -EUSERS,
                               "Your plan allows %lld snapshots in progress at once (snapshot_max_inflight); retry when one "
                               "is ready",
                               (long long) caps.max_inflight);
        if (r == -EDQUOT && which == SNAPSHOT_CAP_BYTES)
                return err_set(err, -EDQUOT,
                               "Your snapshots use your plan's %lld GB (snapshot_max_total_gb). Delete some first.",
                               (long long) plan->snapshot_max_total_gb);
        if (r < 0)
                return err_set(err, -EIO, "Failed to record the snapshot");
        fault_point("snapshot.recorded");       /* crash tests: recorded, no job yet */
        log_ctx_set("SNAPSHOT_ID", sn.id);
        log_ctx_set("SANDBOX_ID", sb.id);
        log_ctx_set("NODE_ID", sb.node_id);

        struct pj_snapshot_job job = { 0 };
        strscpy(job.snapshot_id, sn.id, sizeof(job.snapshot_id));
        strscpy(job.sandbox_id, sb.id, sizeof(job.sandbox_id));
        /* One that does not fit is no reference the agent would commit: it then reports the
         * job failed, as it does for any invalid one; a cut one could name another container. */
        if (strlen(sb.container_id) < sizeof(job.container_id))
                strscpy(job.container_id, sb.container_id, sizeof(job.container_id));
        strscpy(job.node_id, sb.node_id, sizeof(job.node_id));
        _cleanup_free_ char *body = pj_snapshot_job_format(&job);
        struct err perr = { 0 };
        r = publish_job(c->snapbus, sb.node_id, body, &perr);
        if (r < 0) {
                _cleanup_free_ char *why = xasprintf("the job could not be handed to the node agent: %s", perr.message);
                (void) store_snapshot_finish(c->store, sn.id, SNAP_FAILED, NULL, -1, why, now_ms());
                log_error("snapshot failed: %s", why);
                log_ctx_set("SNAPSHOT_ID", NULL);
                return err_set(err, -EHOSTUNREACH, "Snapshot could not be started: %s. Retry the request.", perr.message);
        }
        fault_point("snapshot.published");      /* crash tests: the job is the node's, no answer yet */
        log_info("snapshot creating name=%s%s", sn.name, automatic ? " (automatic)" : "");
        log_ctx_set("SNAPSHOT_ID", NULL);
        log_ctx_set("NODE_ID", NULL);
        *ret = sn;
        sn = (struct snapshot) { 0 };
        return 0;
}

int snapshot_load(struct ctl *c, const struct account *acc, const char *id, struct snapshot *ret, struct err *err) {
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        int r = store_snapshot_get(c->store, id, &sn);
        if (r == -ENOENT || (r == 0 && strcmp(sn.account_id, acc->id) != 0))
                return err_set(err, -ENOENT, "Snapshot not found");
        if (r < 0)
                return err_set(err, -EIO, "Failed to read the snapshot record");
        *ret = sn;
        sn = (struct snapshot) { 0 };
        return 0;
}

/* The manifest of sn in the registry, by the digest we recorded or, when there is none
 * (failed, or from before the outcome), whatever the tag points at. */
static int delete_image(struct ctl *c, const struct snapshot *sn, struct err *err) {
        struct registry reg = config_snapshot_registry(c->cfg);
        _cleanup_free_ char *digest = sn->digest ? xstrdup(sn->digest) : NULL;
        int r;
        if (!digest) {
                r = registry_manifest_digest(&reg, c->cfg->snap_repository, sn->id, &digest, NULL);
                if (r == -ENOENT)
                        return 0;
                if (r < 0)
                        return err_set(err, r, "the registry did not answer (%s)", strerror(-r));
        }
        r = registry_manifest_delete(&reg, c->cfg->snap_repository, digest);
        if (r == -EOPNOTSUPP)
                err_set(err, r, "the registry refuses deletes (enable storage delete in its configuration)");
        else if (r < 0)
                err_set(err, r, "the registry did not delete the image (%s)", strerror(-r));
        return r;
}

static int delete_record_and_image(struct ctl *c, const struct snapshot *sn, struct err *err) {
        int r = delete_image(c, sn, err);
        if (r < 0)
                return r;
        r = store_snapshot_delete(c->store, sn->id);
        if (r < 0 && r != -ENOENT)
                return err_set(err, r, "failed to delete the record");
        return 0;
}

void snapshot_drop_pause_images(struct ctl *c, const char *account_id, const char *sandbox_id) {
        struct snapshot *a = NULL;
        size_t n = 0;
        int64_t total = 0;
        if (store_snapshot_list(c->store, account_id, sandbox_id, 0, 1000, &a, &n, &total) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                struct err err = { 0 };
                if (!a[i].name || strcmp(a[i].name, SNAPSHOT_E2B_PAUSE) || a[i].status == SNAP_CREATING)
                        continue;
                if (delete_record_and_image(c, &a[i], &err) < 0)
                        log_warning("the E2B pause snapshot %s of a destroyed sandbox stays until the next try: %s", a[i].id,
                                    err.message);
        }
        snapshot_array_free(a, n);
}

int snapshot_delete(struct ctl *c, const struct account *acc, const char *id, struct err *err) {
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        struct err derr = { 0 };
        int r = snapshot_load(c, acc, id, &sn, err);
        if (r < 0)
                return r;
        if (sn.status == SNAP_CREATING)
                return err_set(err, -EBUSY, "Snapshot is still being created; delete it once it is ready or failed");
        log_ctx_set("SNAPSHOT_ID", sn.id);
        log_ctx_set("SANDBOX_ID", sn.sandbox_id);
        r = delete_image(c, &sn, &derr);
        if (r < 0 && sn.status != SNAP_FAILED) {
                log_error("snapshot delete failed: %s", derr.message);
                log_ctx_set("SNAPSHOT_ID", NULL);
                return err_set(err, -EHOSTUNREACH, "Could not delete the snapshot: %s. Retry the request.", derr.message);
        }
        if (r < 0)
                /* A failed snapshot has no image unless its push finished and the check after
                 * it did not: its record goes even while the registry cannot be asked. */
                log_warning("snapshot delete: %s; deleting the record of the failed snapshot anyway", derr.message);
        r = store_snapshot_delete(c->store, sn.id);
        if (r < 0 && r != -ENOENT) {
                log_ctx_set("SNAPSHOT_ID", NULL);
                return err_set(err, -EIO, "Failed to delete the snapshot record");
        }
        log_info("snapshot deleted");
        log_ctx_set("SNAPSHOT_ID", NULL);
        return 0;
}

/* ---------------------------------------------------------------- agents' outcomes */

/* Drops the registry image of an outcome nobody will record (deleted or timed out meanwhile). */
static void drop_orphan(struct ctl *c, const char *id, const char *digest) {
        struct registry reg = config_snapshot_registry(c->cfg);
        if (!digest)
                return;
        int r = registry_manifest_delete(&reg, c->cfg->snap_repository, digest);
        if (r < 0)
                log_warning("cannot delete the registry image of snapshot %s that has no record: %s", id, strerror(-r));
        else
                log_info("deleted the registry image of a snapshot whose record is gone or failed");
}

int snapshot_apply_event(struct ctl *c, const char *node, const char *body, size_t len) {
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        struct pj_snapshot_event e;
        struct err perr;
        if (pj_snapshot_event_parse(body, len, &e, &perr) < 0) {
                log_warning("dropping a malformed snapshot outcome from node %s: %s", node ? node : "(none)",
                            perr.message);
                return -EBADMSG;
        }
        bool ok = e.type == PJ_SNAPSHOT_COMPLETED;
        const char *id = e.snapshot_id, *digest = ok ? e.digest : NULL;
        log_ctx_set("SNAPSHOT_ID", id);
        int r = store_snapshot_get(c->store, id, &sn);
        if (r == -ENOENT) {
                if (ok)
                        drop_orphan(c, id, digest);
                log_ctx_set("SNAPSHOT_ID", NULL);
                return 0;
        }
        if (r < 0)
                return -EIO;
        if (!node || !sn.node_id || strcmp(node, sn.node_id) != 0) {
                log_warning("ignoring a snapshot outcome from node %s: the job went to node %s", node ? node : "(none)",
                            sn.node_id ? sn.node_id : "(none)");
                log_ctx_set("SNAPSHOT_ID", NULL);
                return 0;
        }
        log_ctx_set("SANDBOX_ID", sn.sandbox_id);
        log_ctx_set("NODE_ID", sn.node_id);
        static const struct { enum pj_snapshot_phase p; const char *field, *phase; } phases[] = {
                { PJ_SNAPSHOT_PHASE_COMMIT, "COMMIT_MS", "snapshot_commit" },
                { PJ_SNAPSHOT_PHASE_PUSH, "PUSH_MS", "snapshot_push" },
                { PJ_SNAPSHOT_PHASE_VERIFY, "VERIFY_MS", "snapshot_verify" },
                { PJ_SNAPSHOT_PHASE_PRUNE, "PRUNE_MS", "snapshot_prune" },
        };
        for (size_t i = 0; i < ELEMENTSOF(phases); i++) {
                int64_t ms = e.ms[phases[i].p];
                if (ms < 0)
                        continue;
                char buf[32];
                snprintf(buf, sizeof(buf), "%" PRId64, ms);
                log_ctx_set(phases[i].field, buf);
                metrics_observe_phase(c->metrics, phases[i].phase, (double) ms / 1000.0);
        }
        double total_s = (double) (now_ms() - sn.created_at) / 1000.0;
        if (ok) {
                int64_t size = e.size_bytes;
                r = store_snapshot_finish(c->store, id, SNAP_READY, digest, size, NULL, now_ms());
                if (r == -ESTALE && sn.status == SNAP_FAILED)
                        drop_orphan(c, id, digest);   /* timed out meanwhile: its image has no use */
                else if (r == 0) {
                        metrics_observe_phase(c->metrics, "snapshot_total", total_s);
                        log_info("snapshot ready (%s, %" PRId64 " bytes) in %.1f s", digest, size, total_s);
                }
        } else {
                /* The codec has cut it to PJ_SNAPSHOT_MAX_REASON bytes. */
                const char *reason = e.reason[0] ? e.reason : "the node agent reported a failure";
                r = store_snapshot_finish(c->store, id, SNAP_FAILED, NULL, -1, reason, now_ms());
                if (r == 0) {
                        metrics_observe_phase(c->metrics, "snapshot_failed", total_s);
                        log_warning("snapshot failed: %s", reason);
                }
        }
        for (size_t i = 0; i < ELEMENTSOF(phases); i++)
                log_ctx_set(phases[i].field, NULL);
        log_ctx_set("SNAPSHOT_ID", NULL);
        log_ctx_set("SANDBOX_ID", NULL);
        log_ctx_set("NODE_ID", NULL);
        return r == -ESTALE ? 0 : r;
}

static amqp_connection_state_t events_connect(struct snapbus *b) {
        struct ctl *c = b->c;
        _cleanup_free_ char *q = pj_snapshot_events_queue(c->cfg->amqp_exchange);
        amqp_connection_state_t conn = NULL;
        struct err err = { 0 };
        if (nodebus_connect(c->bus, "snapshot-events", CH, &conn, &err) < 0) {
                log_warning("snapshot events: %s; retrying", err.message);
                return NULL;
        }
        amqp_queue_declare(conn, CH, amqp_cstring_bytes(q), 0, 1, 0, 0, amqp_empty_table);
        if (amqpx_rpc_check(amqp_get_rpc_reply(conn), "queue.declare", &err) < 0)
                goto fail;
        amqp_queue_bind(conn, CH, amqp_cstring_bytes(q), amqp_cstring_bytes(c->cfg->amqp_exchange),
                        amqp_cstring_bytes(PJ_SNAPSHOT_EVENTS_KEY), amqp_empty_table);
        if (amqpx_rpc_check(amqp_get_rpc_reply(conn), "queue.bind", &err) < 0)
                goto fail;
        amqp_basic_qos(conn, CH, 0, 16, 0);
        if (amqpx_rpc_check(amqp_get_rpc_reply(conn), "basic.qos", &err) < 0)
                goto fail;
        amqp_basic_consume(conn, CH, amqp_cstring_bytes(q), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
        if (amqpx_rpc_check(amqp_get_rpc_reply(conn), "basic.consume", &err) < 0)
                goto fail;
        log_info("consuming snapshot outcomes on queue %s", q);
        return conn;
fail:
        log_warning("snapshot events: %s", err.message);
        amqp_destroy_connection(conn);
        return NULL;
}

static void *events_main(void *ud) {
        struct snapbus *b = ud;
        int backoff_ms = 200;
        while (!atomic_load(&b->stop)) {
                amqp_connection_state_t conn = events_connect(b);
                if (!conn) {
                        for (int s = 0; s < backoff_ms && !atomic_load(&b->stop); s += 100)
                                usleep(100 * 1000);
                        backoff_ms = backoff_ms * 2 > 10000 ? 10000 : backoff_ms * 2;
                        continue;
                }
                backoff_ms = 200;
                while (!atomic_load(&b->stop)) {
                        struct amqpx_delivery d;
                        _cleanup_free_ char *body = NULL;
                        int got = amqpx_next_delivery(conn, CH, 1000, PJ_SNAPSHOT_MAX_EVENT, &d, &body);
                        if (got == 0)
                                continue;
                        if (got < 0)
                                break;   /* a close, a broken connection or a stalled one: reconnect */
                        /* The node the event says it is from, when its login proves it ([amqp] node_login). */
                        const char *node = d.c.has_app_id && amqpx_login_is(b->c->cfg->amqp_node_login, d.c.app_id,
                                                                            d.c.has_user_id ? d.c.user_id : NULL)
                                                   ? d.c.app_id
                                                   : NULL;
                        log_ctx_reset();
                        int r = !body ? -EMSGSIZE : snapshot_apply_event(b->c, node, body, (size_t) d.c.size);
                        if (r == -EIO) {
                                /* Our store failed: the outcome stays queued and comes back. */
                                amqp_basic_nack(conn, CH, d.tag, 0, 1);
                                usleep(1000 * 1000);
                                continue;
                        }
                        if (r < 0 && r != -EBADMSG)     /* snapshot_apply_event said why */
                                log_warning("dropping a malformed snapshot outcome from node %s (%" PRIu64 " bytes)",
                                            node ? node : "(none)", d.c.size);
                        amqp_basic_ack(conn, CH, d.tag, 0);
                        ctl_notify_status(b->c);
                }
                amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
                amqp_destroy_connection(conn);
        }
        return NULL;
}

/* ---------------------------------------------------------------- deadlines, schedules, retention */

static void reap_stuck(struct ctl *c) {
        struct snapshot *a = NULL;
        size_t n = 0;
        if (store_snapshot_list_stuck(c->store, now_ms() - (int64_t) c->cfg->snap_timeout_s * 1000, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *why = xasprintf("the node agent did not finish the snapshot within %" PRIu64
                                                     " s (agent down or stuck); take a new one",
                                                     c->cfg->snap_timeout_s);
                if (store_snapshot_finish(c->store, a[i].id, SNAP_FAILED, NULL, -1, why, now_ms()) == 0) {
                        log_ctx_set("SNAPSHOT_ID", a[i].id);
                        log_ctx_set("SANDBOX_ID", a[i].sandbox_id);
                        log_ctx_set("NODE_ID", a[i].node_id);
                        metrics_observe_phase(c->metrics, "snapshot_failed", (double) (now_ms() - a[i].created_at) / 1000.0);
                        log_warning("snapshot failed: %s", why);
                        log_ctx_reset();
                }
        }
        snapshot_array_free(a, n);
}

/* E2B pause snapshots of sandboxes that are gone and that the destroy could not delete (the
 * registry did not answer, or the snapshot was still being taken): retried every tick. */
static void reap_pause_images(struct ctl *c) {
        struct snapshot *a = NULL;
        size_t n = 0;
        if (store_snapshot_list_orphaned_pause(c->store, SNAPSHOT_E2B_PAUSE, 64, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                struct err err = { 0 };
                int r = delete_record_and_image(c, &a[i], &err);
                if (r < 0 && a[i].status == SNAP_FAILED)
                        /* a failed one has no image unless its push finished: the record goes */
                        r = store_snapshot_delete(c->store, a[i].id);
                if (r < 0)
                        log_debug("the E2B pause snapshot %s of a destroyed sandbox stays for now: %s", a[i].id, err.message);
        }
        snapshot_array_free(a, n);
}

static bool has_creating(struct ctl *c, const char *account_id, const char *sandbox_id) {
        struct snapshot *a = NULL;
        size_t n = 0;
        int64_t total = 0;
        bool found = false;
        if (store_snapshot_list(c->store, account_id, sandbox_id, 0, 5, &a, &n, &total) < 0)
                return true;   /* cannot tell: do not pile up jobs */
        for (size_t i = 0; i < n; i++)
                found |= a[i].status == SNAP_CREATING;
        snapshot_array_free(a, n);
        return found;
}

static void retention(struct ctl *c, const struct sandbox *sb, const struct plan *plan) {
        struct snapshot *a = NULL;
        size_t n = 0;
        if (store_snapshot_list_auto(c->store, sb->id, &a, &n) < 0)
                return;
        int64_t now = now_ms();
        for (size_t i = 0; i < n; i++) {
                bool too_many = (int64_t) i >= plan->snapshot_max_count;
                bool too_old = now - a[i].created_at > plan->snapshot_max_age_s * 1000;
                if (!too_many && !too_old)
                        continue;
                struct err err = { 0 };
                log_ctx_set("SNAPSHOT_ID", a[i].id);
                log_ctx_set("SANDBOX_ID", a[i].sandbox_id);
                if (delete_record_and_image(c, &a[i], &err) < 0)
                        log_warning("retention: cannot delete snapshot: %s", err.message);
                else
                        log_info("retention: deleted automatic snapshot (%s)", too_many ? "over the plan's count" : "expired");
                log_ctx_reset();
        }
        snapshot_array_free(a, n);
}

static void schedules(struct ctl *c, int64_t prev_s, int64_t now_s) {
        struct sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list_automatic(c->store, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                struct sandbox *sb = &a[i];
                _cleanup_(account_clear) struct account acc = { 0 };
                if (store_account_get(c->store, sb->account_id, &acc) < 0)
                        continue;
                const struct plan *plan = config_plan(c->cfg, acc.plan);
                if (plan)
                        retention(c, sb, plan);
                struct cron cr;
                if (sb->status != SB_READY || !sb->snapshot_frequency || cron_parse(sb->snapshot_frequency, &cr, NULL) < 0)
                        continue;
                int64_t next = cron_next(&cr, prev_s);
                if (next < 0 || next > now_s || has_creating(c, acc.id, sb->id))
                        continue;
                char name[41];
                struct tm tm;
                time_t t = (time_t) next;
                gmtime_r(&t, &tm);
                strftime(name, sizeof(name), "auto-%Y%m%d-%H%M", &tm);
                _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
                struct err err = { 0 };
                log_ctx_set("SANDBOX_ID", sb->id);
                if (snapshot_create(c, &acc, sb->id, name, true, &sn, &err) < 0)
                        log_warning("automatic snapshot not taken: %s", err.message);
                log_ctx_reset();
        }
        sandbox_array_free(a, n);
}

static void *tick_main(void *ud) {
        struct snapbus *b = ud;
        struct ctl *c = b->c;
        int64_t prev_s = now_ms() / 1000;
        pthread_mutex_lock(&b->lock);
        while (!atomic_load(&b->stop)) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t ns = (uint64_t) ts.tv_nsec + c->cfg->snap_tick_ms * 1000000ULL;
                ts.tv_sec += (time_t) (ns / 1000000000ULL);
                ts.tv_nsec = (long) (ns % 1000000000ULL);
                pthread_cond_timedwait(&b->cond, &b->lock, &ts);
                if (atomic_load(&b->stop))
                        break;
                pthread_mutex_unlock(&b->lock);
                int64_t now_s = now_ms() / 1000;
                reap_stuck(c);
                reap_pause_images(c);
                schedules(c, prev_s, now_s);
                prev_s = now_s;
                pthread_mutex_lock(&b->lock);
        }
        pthread_mutex_unlock(&b->lock);
        return NULL;
}

int ctl_snapshot_start(struct ctl *c, struct err *err) {
        if (!c->bus)
                return 0;
        struct snapbus *b = xnew0(struct snapbus, 1);
        b->c = c;
        pthread_mutex_init(&b->pub_lock, NULL);
        pthread_mutex_init(&b->lock, NULL);
        cond_init_monotonic(&b->cond);
        c->snapbus = b;
        b->events_running = pthread_create(&b->events_thread, NULL, events_main, b) == 0;
        b->tick_running = pthread_create(&b->tick_thread, NULL, tick_main, b) == 0;
        if (!b->events_running || !b->tick_running) {
                err_set(err, -EAGAIN, "cannot start the snapshot threads");
                ctl_snapshot_stop(c);
                return -EAGAIN;
        }
        return 0;
}

void ctl_snapshot_stop(struct ctl *c) {
        struct snapbus *b = c->snapbus;
        if (!b)
                return;
        atomic_store(&b->stop, true);
        pthread_mutex_lock(&b->lock);
        pthread_cond_broadcast(&b->cond);
        pthread_mutex_unlock(&b->lock);
        if (b->events_running)
                pthread_join(b->events_thread, NULL);
        if (b->tick_running)
                pthread_join(b->tick_thread, NULL);
        c->snapbus = NULL;
        pub_drop(b);
        pthread_mutex_destroy(&b->pub_lock);
        pthread_mutex_destroy(&b->lock);
        pthread_cond_destroy(&b->cond);
        free(b);
}

char *snapshot_image_ref(const struct snapshot *sn) {
        const char *colon = strrchr(sn->image_tag, ':'), *slash = strrchr(sn->image_tag, '/');
        if (!docker_valid_digest(sn->digest) || !colon || (slash && colon < slash))
                return xstrdup(sn->image_tag);
        return xasprintf("%.*s@%s", (int) (colon - sn->image_tag), sn->image_tag, sn->digest);
}

int snapshot_take(struct ctl *c, const struct account *acc, const char *sandbox_id, const char *name, struct snapshot *ret,
                  struct err *err) {
        int k = snapshot_create(c, acc, sandbox_id, name, false, ret, err);
        if (k < 0)
                return k;
        /* The node's agent commits and pushes it; its event settles the record. */
        char id[SANDBOX_ID_LEN + 1];
        snprintf(id, sizeof(id), "%s", ret->id);
        int64_t deadline = mono_ms() + ((int64_t) c->cfg->snap_timeout_s + 10) * 1000;
        while (ret->status == SNAP_CREATING && mono_ms() < deadline && !c->stopping) {
                usleep(200 * 1000);
                snapshot_clear(ret);
                if (store_snapshot_get(c->store, id, ret) < 0)
                        return err_set(err, -EIO, "The snapshot's record went away");
        }
        if (ret->status != SNAP_READY)
                return err_set(err, -EIO, "The snapshot %s",
                               ret->status == SNAP_FAILED ? (ret->failure_reason ? ret->failure_reason : "failed")
                                                          : "did not finish in time");
        return 0;
}
