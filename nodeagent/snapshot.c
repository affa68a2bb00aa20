/* snapshot.c — snapshots on the node: commit -> push -> verify -> remove, reported on a
 * durable events queue.
 *
 * Queues (both durable, declared by controld and by us with the same arguments):
 *   <exchange>.snapshots.<node_id>   bound with routing key "snapshot.<node_id>": the jobs
 *                                    for this node; waits for an agent that is down
 *   <exchange>.snapshot-events       bound with "snapshot.events": our outcomes, read by
 *                                    controld whenever it runs
 * A job is acked only after its outcome has been confirmed by the broker, so an agent that
 * dies mid-job gets the job again when it is back (redelivery). Every step is safe to
 * repeat: a manifest already in the registry is reported as the result without a second
 * commit, and a half-made local image is removed by the prune that runs before the first
 * job and on a timer. One job at a time per node (prefetch 1): the docker process does
 * one Docker call at a time anyway, and commits of many sandboxes at once would only
 * compete for the same disk.
 *
 * This thread holds no capability; every Docker or registry step goes to the docker
 * process (privsep.c) as a fixed-size message. The job itself runs on a short-lived
 * worker thread while this one keeps the AMQP connection serviced (heartbeats).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/time.h>
#include <unistd.h>

#include "amqp.h"

#include "cleanup.h"
#include "log.h"
#include "metrics.h"
#include "nodeagent.h"
#include "pj_snapshot.h"
#include "strutil.h"
#include "ticker.h"

#define CH 1
#define CONFIRM_TIMEOUT_MS 10000

/* ---------------------------------------------------------------- one job */

static int docker_step(enum ps_type type, const char *snapshot_id, const char *container, long timeout_ms,
                       struct ps_result *res) {
        struct ps_docker m = { .hdr.type = (uint16_t) type };
        if (snapshot_id)
                strscpy(m.snapshot_id, snapshot_id, sizeof(m.snapshot_id));
        if (container)
                strscpy(m.container, container, sizeof(m.container));
        memset(res, 0, sizeof(*res));
        int r = privsep_call_timeout(PS_CHILD_DOCKER, &m, sizeof(m), timeout_ms, res);
        if (r == -EPIPE && !res->msg[0])
                snprintf(res->msg, sizeof(res->msg), "the agent's docker process died or hung");
        return r;
}

static void set_ms(struct pj_snapshot_event *ev, enum pj_snapshot_phase p, int64_t ms, const char *field) {
        char buf[32];
        ev->ms[p] = ms;
        snprintf(buf, sizeof(buf), "%" PRId64, ms);
        log_ctx_set(field, buf);
}

/* docker_step, its duration recorded in ev as phase p and in the log context as field. */
static int timed_step(struct pj_snapshot_event *ev, enum pj_snapshot_phase p, const char *field, enum ps_type type,
                      const char *sid, const char *container, long tmo, struct ps_result *res) {
        int64_t t = mono_ms();
        int r = docker_step(type, sid, container, tmo, res);
        set_ms(ev, p, mono_ms() - t, field);
        return r;
}

/* Why a step failed: what the docker process said, else the errno's text. */
static const char *step_why(const struct ps_result *res, int r) {
        return res->msg[0] ? res->msg : strerror(-r);
}

char *snapshot_handle(const struct agent_config *cfg, const char *body, size_t len, bool redelivered) {
        struct pj_snapshot_job job;
        struct err perr;
        if (pj_snapshot_job_parse(body, len, &job, &perr) < 0) {
                log_warning("dropping a message on the snapshot queue that is not a snapshot.create job: %s", perr.message);
                return NULL;
        }
        const char *sid = job.snapshot_id, *container = job.container_id;
        /* The outcome's type is settled at the end; the ids and timings gather on the way. */
        struct pj_snapshot_event ev;
        pj_snapshot_event_init(&ev, PJ_SNAPSHOT_FAILED);
        strscpy(ev.snapshot_id, sid, sizeof(ev.snapshot_id));
        strscpy(ev.node_id, cfg->node_id, sizeof(ev.node_id));
        log_ctx_set("SNAPSHOT_ID", sid);
        if (job.sandbox_id[0]) {
                strscpy(ev.sandbox_id, job.sandbox_id, sizeof(ev.sandbox_id));
                log_ctx_set("SANDBOX_ID", job.sandbox_id);
        }
        log_info("snapshot job taken (container %s)", container[0] ? container : "(none or invalid)");
        long tmo = (long) cfg->snap_timeout_ms;
        struct ps_result res;
        char reason[600] = "";
        int64_t t0 = mono_ms(), t;
        int64_t size = 0;
        _cleanup_free_ char *digest = NULL, *pushed = NULL;
        char d[200];
        int r;

        /* A redelivered job whose push had finished: the registry already holds the result. */
        r = redelivered ? docker_step(PS_DOCKER_VERIFY, sid, NULL, tmo, &res) : -ENOENT;
        if (r == 0) {
                if (sscanf(res.msg, "%199s %" SCNd64, d, &size) == 2) {
                        digest = xstrdup(d);
                        (void) docker_step(PS_DOCKER_REMOVE, sid, NULL, tmo, &res);
                        log_info("snapshot was already in the registry (a redelivered job); reporting it");
                        goto done;
                }
        }
        if (!container[0]) {
                snprintf(reason, sizeof(reason), "the request names no valid container");
                goto failed;
        }

        r = timed_step(&ev, PJ_SNAPSHOT_PHASE_COMMIT, "COMMIT_MS", PS_DOCKER_COMMIT, sid, container, tmo, &res);
        if (r < 0) {
                snprintf(reason, sizeof(reason), "%s", step_why(&res, r));
                goto failed_prune;
        }
        r = timed_step(&ev, PJ_SNAPSHOT_PHASE_PUSH, "PUSH_MS", PS_DOCKER_PUSH, sid, NULL, tmo, &res);
        if (r < 0) {
                snprintf(reason, sizeof(reason), "%s", step_why(&res, r));
                goto failed_prune;
        }
        pushed = xstrdup(res.msg);
        r = timed_step(&ev, PJ_SNAPSHOT_PHASE_VERIFY, "VERIFY_MS", PS_DOCKER_VERIFY, sid, NULL, tmo, &res);
        if (r < 0 || sscanf(res.msg, "%199s %" SCNd64, d, &size) != 2) {
                snprintf(reason, sizeof(reason), "pushed, but the registry does not show it: %s",
                         step_why(&res, r));
                goto failed_prune;
        }
        if (strcmp(d, pushed) != 0) {
                snprintf(reason, sizeof(reason), "the registry holds manifest %s, the push reported %s", d, pushed);
                goto failed_prune;
        }
        digest = xstrdup(d);
        r = timed_step(&ev, PJ_SNAPSHOT_PHASE_PRUNE, "PRUNE_MS", PS_DOCKER_REMOVE, sid, NULL, tmo, &res);
        if (r < 0)
                /* The snapshot is good; the timer's prune takes the image later. */
                log_warning("snapshot pushed, but the local image stays for now: %s", res.msg);
done:
        if (strlen(digest) >= sizeof(ev.digest)) {
                /* Longer than any sha256 digest: cut to fit, it could read as another one. */
                snprintf(reason, sizeof(reason), "the registry reported a digest that is not one: %.80s", digest);
                goto failed;
        }
        ev.type = PJ_SNAPSHOT_COMPLETED;
        strscpy(ev.digest, digest, sizeof(ev.digest));
        ev.size_bytes = size;
        ev.ms[PJ_SNAPSHOT_PHASE_TOTAL] = mono_ms() - t0;
        log_info("snapshot completed in %" PRId64 " ms (%s, %" PRId64 " bytes)", mono_ms() - t0, digest, size);
        agent_metrics_observe_snapshot((double) (mono_ms() - t0) / 1000.0, true);
        goto out;

failed_prune:
        t = mono_ms();
        if (docker_step(PS_DOCKER_REMOVE, sid, NULL, tmo, &res) < 0)
                log_warning("cannot remove the local image of a failed snapshot: %s", res.msg);
        set_ms(&ev, PJ_SNAPSHOT_PHASE_PRUNE, mono_ms() - t, "PRUNE_MS");
failed:
        ev.type = PJ_SNAPSHOT_FAILED;
        utf8_copy_trunc(ev.reason, sizeof(ev.reason), reason);
        log_warning("snapshot failed: %s", reason);
        agent_metrics_observe_snapshot((double) (mono_ms() - t0) / 1000.0, false);
out:;
        char *text = pj_snapshot_event_format(&ev);
        log_ctx_set("SNAPSHOT_ID", NULL);
        log_ctx_set("SANDBOX_ID", NULL);
        log_ctx_set("COMMIT_MS", NULL);
        log_ctx_set("PUSH_MS", NULL);
        log_ctx_set("VERIFY_MS", NULL);
        log_ctx_set("PRUNE_MS", NULL);
        return text;
}

static void prune(const struct agent_config *cfg, const char *when) {
        struct ps_result res;
        int r = docker_step(PS_DOCKER_PRUNE, NULL, NULL, (long) cfg->snap_timeout_ms, &res);
        if (r < 0) {
                log_warning("snapshot prune (%s) failed: %s", when, res.msg);
                return;
        }
        int removed = 0, kept = 0, volumes = 0;
        (void) sscanf(res.msg, "%d %d %d", &removed, &kept, &volumes);
        if (removed > 0 || kept > 0)
                log_info("snapshot prune (%s): removed %d local snapshot images, %d in use stay", when, removed, kept);
        if (volumes > 0)
                log_info("prune (%s): removed %d agent socket volumes of sandboxes gone from this node (and volumes labelled with them)", when, volumes);
}

/* ---------------------------------------------------------------- the consumer thread */

static struct {
        pthread_t thread;
        bool running;
        atomic_bool stop;
        const struct agent_config *cfg;
} st;

struct job {
        const struct agent_config *cfg;
        char *body;
        size_t len;
        bool redelivered;
        char *out;
        atomic_bool done;
        int wakefd;             /* eventfd the worker signals when done; -1 without one */
};

static void *job_main(void *ud) {
        struct job *j = ud;
        log_ctx_set("NODE_ID", j->cfg->node_id);
        j->out = snapshot_handle(j->cfg, j->body, j->len, j->redelivered);
        atomic_store(&j->done, true);
        if (j->wakefd >= 0) {
                uint64_t one = 1;
                ssize_t _unused_ w = write(j->wakefd, &one, sizeof(one));
        }
        return NULL;
}

static int rpc_ok(amqp_connection_state_t conn, const char *what) {
        return amqpx_rpc_ok(conn, what, LOG_WARNING, "snapshot queue: ");
}

/* Declares the durable queue name and binds it to exchange with key; tag goes
 * into the name of a failed call in the log. */
static int queue_bound(amqp_connection_state_t conn, const char *name, const char *exchange, const char *key,
                       const char *tag) {
        char what[64];
        amqp_queue_declare(conn, CH, amqp_cstring_bytes(name), 0, 1, 0, 0, amqp_empty_table);
        snprintf(what, sizeof(what), "queue.declare%s", tag);
        int r = rpc_ok(conn, what);
        if (r < 0)
                return r;
        amqp_queue_bind(conn, CH, amqp_cstring_bytes(name), amqp_cstring_bytes(exchange), amqp_cstring_bytes(key),
                        amqp_empty_table);
        snprintf(what, sizeof(what), "queue.bind%s", tag);
        return rpc_ok(conn, what);
}

static amqp_connection_state_t connect_snap(const struct agent_config *cfg, const struct amqpx_url *u) {
        _cleanup_free_ char *jobs = pj_snapshot_jobs_queue(cfg->exchange, cfg->node_id);
        _cleanup_free_ char *jobs_key = pj_snapshot_jobs_key(cfg->node_id);
        _cleanup_free_ char *events = pj_snapshot_events_queue(cfg->exchange);
        _cleanup_free_ char *cname = xasprintf("paddock-nodeagent-snapshots[%s]", cfg->node_id);
        amqp_connection_state_t conn = NULL;
        struct err why = { 0 };
        if (amqpx_connect(u, cname, AMQPX_FRAME_MAX, AMQPX_HEARTBEAT_S, AMQPX_CONNECT_TIMEOUT_MS, &conn, &why) < 0) {
                log_warning("snapshot queue: %s; retrying", why.message);
                return NULL;
        }
        if (amqpx_channel_open_exchange(conn, CH, cfg->exchange, &why) < 0) {
                log_warning("snapshot queue: %s", why.message);
                goto fail;
        }
        amqp_confirm_select(conn, CH);
        if (rpc_ok(conn, "confirm.select") < 0)
                goto fail;
        if (queue_bound(conn, jobs, cfg->exchange, jobs_key, "") < 0 ||
            queue_bound(conn, events, cfg->exchange, PJ_SNAPSHOT_EVENTS_KEY, " (events)") < 0)
                goto fail;
        amqp_basic_qos(conn, CH, 0, 1, 0);
        if (rpc_ok(conn, "basic.qos") < 0)
                goto fail;
        amqp_basic_consume(conn, CH, amqp_cstring_bytes(jobs), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
        if (rpc_ok(conn, "basic.consume") < 0)
                goto fail;
        log_info("consuming snapshot jobs on queue %s", jobs);
        return conn;
fail:
        amqp_destroy_connection(conn);
        return NULL;
}

/* Publishes the outcome (persistent, mandatory) and waits for the broker's confirm.
 * 0 when confirmed; < 0 otherwise (the job is then not acked and comes back). */
static int publish_event(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user,
                         uint64_t *next_tag, const char *text) {
        amqp_basic_properties_t p = amqpx_json_props(2, cfg->node_id, user);
        if (amqp_basic_publish(conn, CH, amqp_cstring_bytes(cfg->exchange), amqp_cstring_bytes(PJ_SNAPSHOT_EVENTS_KEY), 1, 0,
                               &p, amqp_cstring_bytes(text)) != AMQP_STATUS_OK)
                return -ECONNRESET;
        uint64_t tag = ++*next_tag;
        int r = amqpx_wait_confirm(conn, tag, mono_ms() + CONFIRM_TIMEOUT_MS);
        if (r == -ENXIO) {
                /* Unroutable: the returned message's content follows; read it off. */
                struct amqpx_content rc = { 0 };
                _cleanup_free_ char *rb = NULL;
                (void) amqpx_read_content(conn, CH, mono_ms() + AMQPX_CONTENT_TIMEOUT_MS, PJ_SNAPSHOT_MAX_JOB, &rc, &rb);
        }
        return r;
}

/* Runs one job on a worker thread while servicing the connection. 0 when its outcome was
 * confirmed and the job acked; < 0 when the connection must be replaced. */
static int run_job(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user, uint64_t *next_tag,
                   uint64_t delivery_tag, bool redelivered, char *body, size_t len) {
        _cleanup_close_ int wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        struct job j = { .cfg = cfg, .body = body, .len = len, .redelivered = redelivered, .wakefd = wakefd };
        pthread_t t;
        bool broken = false;
        if (pthread_create(&t, NULL, job_main, &j) != 0)
                job_main(&j);
        else {
                while (!atomic_load(&j.done)) {
                        if (broken) {
                                usleep(100 * 1000);
                                continue;
                        }
                        /* Wait for the broker or for the worker's wake-up, whichever comes first:
                         * the outcome goes out the moment the job is done, not at the next slice. */
                        if (!amqp_frames_enqueued(conn) && !amqp_data_in_buffer(conn)) {
                                struct pollfd pfd[2] = {
                                        { .fd = amqp_get_sockfd(conn), .events = POLLIN },
                                        { .fd = wakefd, .events = POLLIN },
                                };
                                int n = poll(pfd, wakefd >= 0 ? 2 : 1, wakefd >= 0 ? 1000 : 20);
                                if (n < 0 && errno != EINTR)
                                        broken = true;
                                if (n < 0 || atomic_load(&j.done))
                                        continue;
                        }
                        /* Also on a quiet socket: the call sends our heartbeats when they are due. */
                        struct timeval tv = { 0, 0 };
                        amqp_frame_t f;
                        int s = amqp_simple_wait_frame_noblock(conn, &f, &tv);
                        if (s != AMQP_STATUS_OK && s != AMQP_STATUS_TIMEOUT)
                                broken = true;
                        else if (s == AMQP_STATUS_OK && f.frame_type == AMQP_FRAME_METHOD &&
                                 (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                                  f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD))
                                broken = true;
                }
                pthread_join(t, NULL);
        }
        _cleanup_free_ char *out = j.out;
        if (broken)
                return -ECONNRESET;     /* the job comes back on the next connection; its result repeats */
        if (privsep_failed() && !redelivered) {
                /* The docker process died under the job (the agent is stopping, or crashed):
                 * not the job's fault. Unacked, it comes back to the restarted agent; a job
                 * that meets a dying docker process twice is reported failed. */
                log_warning("snapshot job interrupted by the loss of the docker process; it will run again");
                return -ECHILD;
        }
        if (!out) {
                amqp_basic_reject(conn, CH, delivery_tag, 0);
                return 0;
        }
        int r = publish_event(conn, cfg, user, next_tag, out);
        if (r < 0) {
                log_warning("snapshot outcome not confirmed by RabbitMQ (%s); the job will run again", strerror(-r));
                return r;
        }
        return amqp_basic_ack(conn, CH, delivery_tag, 0) == AMQP_STATUS_OK ? 0 : -ECONNRESET;
}

static void *snap_main(void *ud) {
        const struct agent_config *cfg = ud;
        struct amqpx_url u;
        struct err why = { 0 };
        int backoff_ms = 200;
        log_ctx_set("NODE_ID", cfg->node_id);
        if (amqpx_url_parse(cfg->amqp_url, &u, &why) < 0) {
                log_error("snapshot queue: [amqp] url: %s", why.message);
                return NULL;
        }
        prune(cfg, "start");
        int64_t next_prune = mono_ms() + (int64_t) cfg->snap_prune_interval_ms;
        /* Without its docker process the agent is on its way out: take no more jobs. */
        while (!atomic_load(&st.stop) && !privsep_failed()) {
                amqp_connection_state_t conn = connect_snap(cfg, &u);
                if (!conn) {
                        for (int slept = 0; slept < backoff_ms && !atomic_load(&st.stop); slept += 100)
                                usleep(100 * 1000);
                        backoff_ms = backoff_ms * 2 > 10000 ? 10000 : backoff_ms * 2;
                        continue;
                }
                backoff_ms = 200;
                uint64_t next_tag = 0;
                while (!atomic_load(&st.stop) && !privsep_failed()) {
                        if (mono_ms() >= next_prune) {
                                prune(cfg, "timer");
                                next_prune = mono_ms() + (int64_t) cfg->snap_prune_interval_ms;
                        }
                        struct amqpx_delivery d;
                        _cleanup_free_ char *body = NULL;
                        int s = amqpx_next_delivery(conn, CH, 1000, PJ_SNAPSHOT_MAX_JOB, &d, &body);
                        if (s < 0)
                                break;
                        if (s == 0)
                                continue;
                        if (!body) {
                                log_warning("dropping a %" PRIu64 " byte snapshot job (limit %d)", d.c.size, PJ_SNAPSHOT_MAX_JOB);
                                amqp_basic_reject(conn, CH, d.tag, 0);
                                continue;
                        }
                        if (!amqpx_login_is(cfg->controld_login, "", d.c.has_user_id ? d.c.user_id : NULL)) {
                                log_warning("dropping a snapshot job not published by controld's login %s (user_id %s)",
                                            cfg->controld_login, d.c.has_user_id ? d.c.user_id : "absent");
                                amqp_basic_reject(conn, CH, d.tag, 0);
                                continue;
                        }
                        int r = run_job(conn, cfg, u.user, &next_tag, d.tag, d.redelivered, body, (size_t) d.c.size);
                        if (r < 0)
                                break;
                        if (privsep_failed())
                                break;
                }
                amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
                amqp_destroy_connection(conn);
        }
        amqpx_url_done(&u);
        return NULL;
}

int snapshot_start(const struct agent_config *cfg) {
        if (st.running)
                return -EALREADY;
        if (privsep_child_pid(PS_CHILD_DOCKER) <= 0)
                return -ENOTCONN;
        st.cfg = cfg;
        atomic_store(&st.stop, false);
        int r = thread_create_nosig(&st.thread, NULL, snap_main, (void *) cfg);
        if (r < 0)
                return r;
        st.running = true;
        return 0;
}

void snapshot_stop(void) {
        if (!st.running)
                return;
        atomic_store(&st.stop, true);
        pthread_join(st.thread, NULL);
        st.running = false;
}
