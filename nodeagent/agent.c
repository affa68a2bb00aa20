/* agent.c — the node agent's AMQP side: one exclusive queue per node, bound to the
 * direct exchange with the node ID as routing key, so a message for a node whose
 * agent is gone comes back to the publisher at once (mandatory + no route).
 *
 * Every message is a JSON object {"type": ..., ...}; the reply goes to reply_to
 * with the same correlation_id. Handlers must be idempotent (redeliveries).
 * Every reply carries app_id = our node ID and user_id = our broker login (which
 * RabbitMQ verifies), so controld can tell which node answered.
 *
 * This is the parent of privsep.c: it holds no capabilities once started. Egress
 * changes go to the egress child as fixed-size binary requests; hostnames are
 * resolved here, never in a privileged process.
 *
 * Here: the connection, the consuming loop and the queue of egress jobs. The
 * configuration is read in config.c; node.sync convergence is reconcile.c's, driven
 * from this loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <systemd/sd-daemon.h>
#include <inttypes.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>

#include "amqp.h"

#include "cleanup.h"
#include "json.h"
#include "log.h"
#include "egress.h"
#include "metrics.h"
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"
#include "ticker.h"

#define MAX_MESSAGE (1024 * 1024)
#define CH AGENT_CH

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
        (void) sig;
        stop_requested = 1;
}

static int rpc_ok(amqp_connection_state_t conn, const char *what) {
        return amqpx_rpc_ok(conn, what, LOG_ERR, "");
}

static amqp_connection_state_t connect_broker(const struct agent_config *cfg, const struct amqpx_url *u,
                                              amqp_bytes_t *ret_queue) {
        _cleanup_free_ char *qname = pj_node_queue_agent(cfg->exchange, cfg->node_id);
        _cleanup_free_ char *cname = xasprintf("paddock-nodeagent[%s]", cfg->node_id);
        amqp_connection_state_t conn = NULL;
        struct err why = { 0 };

        int r = amqpx_connect(u, cname, AMQPX_FRAME_MAX, AMQPX_HEARTBEAT_S, AMQPX_CONNECT_TIMEOUT_MS, &conn, &why);
        if (r < 0) {
                if (r == -EACCES)
                        log_error("%s", why.message);
                else
                        log_warning("%s; retrying", why.message);
                return NULL;
        }
        if (amqpx_channel_open_exchange(conn, CH, cfg->exchange, &why) < 0) {
                log_error("%s", why.message);
                goto fail;
        }
        /* Exclusive + auto-delete: the queue dies with this connection, so publishers with
         * mandatory=1 get basic.return immediately when this agent is gone. */
        amqp_queue_declare_ok_t *q =
                amqp_queue_declare(conn, CH, amqp_cstring_bytes(qname), 0, 0, 1, 1, amqp_empty_table);
        if (rpc_ok(conn, "queue.declare") < 0 || !q)
                goto fail;
        *ret_queue = amqp_bytes_malloc_dup(q->queue);
        amqp_queue_bind(conn, CH, *ret_queue, amqp_cstring_bytes(cfg->exchange), amqp_cstring_bytes(cfg->node_id),
                        amqp_empty_table);
        if (rpc_ok(conn, "queue.bind") < 0)
                goto fail_q;
        amqp_basic_qos(conn, CH, 0, (uint16_t) cfg->prefetch, 0);
        if (rpc_ok(conn, "basic.qos") < 0)
                goto fail_q;
        amqp_basic_consume(conn, CH, *ret_queue, amqp_empty_bytes, 0, 0, 1, amqp_empty_table);
        if (rpc_ok(conn, "basic.consume") < 0)
                goto fail_q;
        amqp_queue_declare_ok_t *rq = amqp_queue_declare(conn, CH, amqp_empty_bytes, 0, 0, 1, 1, amqp_empty_table);
        if (rpc_ok(conn, "queue.declare (replies)") < 0 || !rq)
                goto fail_q;
        amqp_basic_consume(conn, CH, reconcile_reply_queue_set(rq->queue), amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        if (rpc_ok(conn, "basic.consume (replies)") < 0)
                goto fail_q;
        return conn;
fail_q:
        amqp_bytes_free(*ret_queue);
        *ret_queue = amqp_empty_bytes;
fail:
        amqp_destroy_connection(conn);
        return NULL;
}

int agent_egress_init(const struct agent_config *cfg, struct err *err) {
        return privsep_spawn(PS_CHILD_EGRESS, cfg, err);
}

/* Per-sandbox counters from the egress child, paged through one snapshot. */
static int read_stats(struct pj_node_reply *out, struct err *err) {
        out->has_stats = true;
        for (uint32_t off = 0;; off += PS_STATS_PAGE) {
                struct ps_egress_list req = { .hdr.type = PS_EGRESS_STATS, .offset = off };
                struct ps_result res;
                int k = privsep_call(PS_CHILD_EGRESS, &req, sizeof(req), &res);
                if (k < 0)
                        return err_set(err, k, "%s", k == -EPIPE || k == -ENOTCONN ? "the egress process is not running on this node" : res.msg);
                char *p = strchr(res.msg, ':');
                if (!p)
                        return err_set(err, -EBADMSG, "the egress process sent unreadable counters");
                unsigned long total = strtoul(res.msg, NULL, 10);
                if (total > PJ_NODE_MAX_STATS)
                        total = PJ_NODE_MAX_STATS;
                if (!out->stats)
                        out->stats = xnew0(struct pj_node_sbx_stats, total ? total : 1);
                p++;
                size_t got = 0;
                while (*p && out->n_stats < total) {
                        struct pj_node_sbx_stats *x = &out->stats[out->n_stats];
                        char id[EGRESS_ID_LEN + 1];
                        int used = 0;
                        if (sscanf(p, "%24[0-9a-f],%" SCNu64 ",%" SCNu64 ",%" SCNu64 ",%" SCNu64 ";%n", id, &x->allowed_packets,
                                   &x->allowed_bytes, &x->dropped_packets, &x->dropped_bytes, &used) != 5 || used == 0)
                                return err_set(err, -EBADMSG, "the egress process sent unreadable counters");
                        strscpy(x->sandbox_id, id, sizeof(x->sandbox_id));
                        out->n_stats++;
                        got++;
                        p += used;
                }
                if (got == 0 || out->n_stats >= total)
                        return 0;
        }
}

/* The reply text for a message whose work is done (r, with its reason in err); consumes out. */
static char *reply_text(const struct agent_config *cfg, struct pj_node_reply *out, int r, const char *err) {
        out->ok = r >= 0;
        if (r < 0) {
                /* A failed apply confirms nothing: no resolutions, no time. */
                char type[sizeof(out->type)];
                strscpy(type, out->type, sizeof(type));
                pj_node_reply_done(out);
                *out = (struct pj_node_reply) { .ok = false };
                strscpy(out->type, type, sizeof(out->type));
                snprintf(out->node_id, sizeof(out->node_id), "%s", cfg->node_id);
                snprintf(out->error, sizeof(out->error), "%s", err[0] ? err : strerror(-r));
        }
        char *text = pj_node_reply_format(out);
        pj_node_reply_done(out);
        return text;
}

static void reply_init(const struct agent_config *cfg, const struct pj_node_msg *m, struct pj_node_reply *out) {
        *out = (struct pj_node_reply) { .ok = false };
        snprintf(out->node_id, sizeof(out->node_id), "%s", cfg->node_id);
        snprintf(out->type, sizeof(out->type), "%s", pj_node_type_to_string(m->type));
}

/* The journal entry and the metrics of one egress.apply or egress.remove that ended with r;
 * t0 (mono ms): when the agent took the message, so an apply's duration includes its
 * wait for names and for earlier messages of the same sandbox. */
static void egress_done(const struct pj_node_msg *m, int64_t t0, int r, const char *err) {
        log_ctx_set("SANDBOX_ID", m->sandbox_id);
        if (m->type == PJ_NODE_EGRESS_APPLY) {
                int64_t took = mono_ms() - t0;
                char dur[32];
                snprintf(dur, sizeof(dur), "%" PRId64, took);
                agent_metrics_observe_apply((double) took / 1000.0, r >= 0);
                log_ctx_set("EGRESS_MODE", pj_egress_mode_to_string(m->egress.mode));
                log_ctx_set("DURATION_MS", dur);
        } else
                agent_metrics_observe_remove(r >= 0);
        if (r < 0)
                log_warning("%s failed: %s", pj_node_type_to_string(m->type), err);
        else
                log_info("%s done", pj_node_type_to_string(m->type));
        log_ctx_set("EGRESS_MODE", NULL);
        log_ctx_set("DURATION_MS", NULL);
        log_ctx_set("SANDBOX_ID", NULL);
}

/* The host pid of the container an egress.apply names (the egress child binds that
 * sandbox's bridge port from it): 0 in *ret when the message names none; -errno with the
 * reason when it names one that does not run here (the apply then fails: closed). */
static int container_pid(const struct pj_node_msg *m, uint32_t *ret, struct err *err) {
        *ret = 0;
        if (!m->container[0])
                return 0;
        struct ps_docker q = { .hdr.type = PS_DOCKER_PID };
        strscpy(q.container, m->container, sizeof(q.container));
        struct ps_result res;
        int r = privsep_call_timeout(PS_CHILD_LOOKUP, &q, sizeof(q), 10000, &res);
        if (r == -EPIPE || r == -ENOTCONN || r == -ETIMEDOUT)
                err_set(err, r, "the agent's lookup process is not answering");
        else if (r < 0)
                err_set(err, r, "%s", res.msg);
        if (r < 0)
                return r;
        char *end = NULL;
        unsigned long v = strtoul(res.msg, &end, 10);
        if (end == res.msg || *end || v == 0 || v > INT32_MAX)
                return err_set(err, -EBADMSG, "the lookup process answered no process id for container %s", m->container);
        *ret = (uint32_t) v;
        return 0;
}

/* The reply for one parsed message, its work done before returning (names waited for). */
static char *handle_parsed(const struct agent_config *cfg, const struct pj_node_msg *m) {
        struct pj_node_reply out;
        struct err err = { 0 };
        reply_init(cfg, m, &out);
        int r = 0;
        switch (m->type) {
        case PJ_NODE_PING:
                /* Alive means able to act: every child we started must answer too. */
                for (int k = 0; k < PS_CHILD_MAX && r == 0; k++) {
                        struct ps_ping ping = { .hdr.type = PS_PING };
                        struct ps_result res;
                        if (privsep_child_pid(k) <= 0)
                                continue;
                        r = privsep_try_call(k, &ping, sizeof(ping), &res);
                        if (r == -EBUSY)
                                r = 0;  /* busy with a snapshot step: alive */
                        if (r < 0)
                                err_set(&err, r, "a privileged process of the agent does not answer");
                }
                break;
        case PJ_NODE_EGRESS_APPLY:
        case PJ_NODE_EGRESS_REMOVE:
                if (!cfg->egress_enabled) {
                        r = err_set(&err, -ENOTSUP, "egress enforcement is not enabled on node %s ([egress] enable)",
                                    cfg->node_id);
                        log_ctx_set("SANDBOX_ID", m->sandbox_id);
                        log_warning("%s failed: %s", out.type, err.message);
                        log_ctx_set("SANDBOX_ID", NULL);
                        break;
                }
                int64_t t0 = mono_ms();
                if (m->type == PJ_NODE_EGRESS_APPLY) {
                        uint32_t pid = 0;
                        names_configure((int64_t) cfg->egress_resolve_timeout_ms, (int64_t) cfg->egress_resolve_interval_ms);
                        r = container_pid(m, &pid, &err);
                        if (r >= 0)
                                r = names_apply(m->sandbox_id, m->account_id, m->ip, pid, &m->egress, &out, &err);
                } else
                        r = names_remove(m->sandbox_id, m->ip, &err);
                egress_done(m, t0, r, err.message);
                break;
        case PJ_NODE_EGRESS_STATS:
                if (!cfg->egress_enabled)
                        r = err_set(&err, -ENOTSUP, "egress enforcement is not enabled on node %s ([egress] enable)",
                                    cfg->node_id);
                else
                        r = read_stats(&out, &err);
                break;
        case PJ_NODE_PROXY_STATS:
                r = agent_proxy_stats(m->sandbox_id, &out.proxy, &out.n_proxy, &err);
                out.has_proxy = r >= 0;
                break;
        case PJ_NODE_NODE_SYNC:
        case PJ_NODE_EGRESS_RESOLVED:
                r = err_set(&err, -EINVAL, "%s is for controld, not for an agent", out.type);
                break;
        }
        return reply_text(cfg, &out, r, err.message);
}

/* Builds the reply for one message. Returns the JSON text (xmalloc'd). */
char *agent_handle(const struct agent_config *cfg, const char *body, size_t len) {
        struct pj_node_msg m = { 0 };
        struct err pe = { 0 };
        if (pj_node_msg_parse(body, len, &m, &pe) < 0) {
                struct pj_node_reply out = { .ok = false };
                snprintf(out.node_id, sizeof(out.node_id), "%s", cfg->node_id);
                snprintf(out.error, sizeof(out.error), "%s", pe.message);
                return pj_node_reply_format(&out);
        }
        char *text = handle_parsed(cfg, &m);
        pj_node_msg_done(&m);
        return text;
}

static void reply(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user,
                  const struct amqpx_delivery *d, const char *text) {
        if (!d->c.reply_to[0])
                return;
        /* Who answers: controld accepts a reply only from the node it asked. */
        amqp_basic_properties_t p = amqpx_json_props(1, cfg->node_id, user);
        if (d->c.has_corr) {
                p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
                p.correlation_id = amqp_cstring_bytes(d->c.correlation_id);
        }
        amqp_basic_publish(conn, CH, amqp_empty_bytes, amqp_cstring_bytes(d->c.reply_to), 0, 0, &p,
                           amqp_cstring_bytes(text));
}

/* The watchdog is fed from its own thread on a timer, so a long apply (slow name
 * resolution, a busy queue) cannot get the agent killed; it stops feeding once a
 * child has died, and the main loop exits then anyway. */
static struct ticker wd = TICKER_INIT;
static uint64_t wd_usec;

static void *watchdog_main(void *ud) {
        (void) ud;
        do {
                /* Not privsep_healthy(): a call in progress holds its lock for up to 30 s. */
                if (!privsep_failed())
                        sd_notify(0, "WATCHDOG=1");
        } while (ticker_sleep(&wd, (int64_t) (wd_usec / 2000)));
        return NULL;
}

static void watchdog_start(void) {
        if (sd_watchdog_enabled(0, &wd_usec) <= 0 || wd_usec == 0)
                return;
        if (ticker_start(&wd, watchdog_main, NULL) < 0)
                log_warning("cannot start the watchdog thread; systemd may restart the agent");
}

static void watchdog_stop(void) {
        ticker_stop(&wd);
}

/* Reads the content of the delivery d (at most MAX_MESSAGE bytes kept; see
 * amqpx_read_content). 0 with *ret_body (NULL when oversized), or < 0. */
static int read_content(amqp_connection_state_t conn, struct amqpx_delivery *d, char **ret_body) {
        int r = amqpx_read_content(conn, CH, mono_ms() + AMQPX_CONTENT_TIMEOUT_MS, MAX_MESSAGE, &d->c, ret_body);
        if (r == -ETIMEDOUT)
                log_warning_errno(r, "RabbitMQ stalled in the middle of a message");
        return r;
}

/* Tells controld what re-resolved names now enforce (it updates GET /egress and the
 * sandbox's /etc/hosts). Fire and forget: if it is lost, the next apply carries it. */
static void resolved_send(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user) {
        struct names_update *u = NULL;
        size_t n = names_take_updates(&u);
        for (size_t i = 0; i < n; i++) {
                struct pj_node_msg m = { .type = PJ_NODE_EGRESS_RESOLVED, .resolved = u[i].resolved,
                                         .n_resolved = u[i].n_resolved };
                strscpy(m.node_id, cfg->node_id, sizeof(m.node_id));
                strscpy(m.sandbox_id, u[i].sandbox_id, sizeof(m.sandbox_id));
                _cleanup_free_ char *body = pj_node_msg_format(&m);
                amqp_basic_properties_t p = amqpx_json_props(1, cfg->node_id, user);
                p._flags |= AMQP_BASIC_EXPIRATION_FLAG;
                p.expiration = amqp_cstring_bytes("60000");
                amqp_basic_publish(conn, CH, amqp_cstring_bytes(cfg->exchange), amqp_cstring_bytes(PJ_NODE_KEY_CONTROLD), 0, 0, &p,
                                   amqp_cstring_bytes(body));
                free(u[i].resolved);
        }
        free(u);
}

/* ---------------------------------------------------------------- egress jobs
 *
 * egress.apply and egress.remove do not hold up the consumer. An apply whose allowlist
 * names hostnames starts its lookups (names_apply_start) and stays here while they run;
 * the loop polls it (every JOBS_TICK_MS while any is pending) and, once every name
 * answered or the deadline passed, applies and replies from this thread, the only one
 * that touches the AMQP connection. Meanwhile the loop takes the next messages.
 *
 * Order per sandbox: a message for a sandbox (or for the address) of a job still
 * pending waits here behind it and runs when every earlier one has replied, so a
 * remove is never overtaken or undone by an apply sent before it, and a later apply
 * never loses to an earlier slow one. A sandbox has no more network than its last
 * confirmed apply gave it until its pending one completes (fail closed).
 *
 * Bounds: every job is an unacked delivery, so there are at most [amqp] prefetch of
 * them (the broker delivers no more until one is acked: consuming stops while they
 * are all taken). At most prefetch - 1 (at least 1) resolve at once, so that one
 * delivery slot stays for the rest of the node's traffic; an apply with hostnames over
 * that bound fails closed at once with the reason (nothing changed) rather than wait.
 *
 * Acks: a job's delivery is acked after its reply is published, as every other
 * message's (at least once while the connection lasts). Jobs are dropped with their
 * connection, unapplied: the queue dies with it, controld's wait ends with a timeout
 * and the node.sync that follows every reconnect converges. */
#define JOBS_TICK_MS 10

struct job {
        struct amqpx_delivery d;
        struct pj_node_msg m;           /* parsed, owned */
        struct names_apply *na;         /* resolving; NULL: waiting behind an earlier job */
        int64_t t0;                     /* mono ms when the agent took the message */
};

static struct job *jobs;                /* in arrival order; the consumer thread's alone */
static size_t n_jobs;

static size_t jobs_resolving(void) {
        size_t n = 0;
        for (size_t i = 0; i < n_jobs; i++)
                n += jobs[i].na != NULL;
        return n;
}

/* The broker's bound on unacked deliveries ([amqp] prefetch; 0 would mean none: the
 * configuration's ceiling stands in). */
static size_t jobs_max(const struct agent_config *cfg) {
        return cfg->prefetch > 0 ? (size_t) cfg->prefetch : 1000;
}

static size_t resolving_max(const struct agent_config *cfg) {
        return jobs_max(cfg) > 1 ? jobs_max(cfg) - 1 : 1;
}

static bool jobs_conflict(const struct pj_node_msg *a, const struct pj_node_msg *b) {
        return !strcmp(a->sandbox_id, b->sandbox_id) || (a->ip && a->ip == b->ip);
}

/* Job i waits while an earlier job concerns the same sandbox or address. */
static bool job_blocked(size_t i) {
        for (size_t k = 0; k < i; k++)
                if (jobs_conflict(&jobs[k].m, &jobs[i].m))
                        return true;
        return false;
}

static void job_drop(size_t i) {
        names_apply_free(jobs[i].na);
        pj_node_msg_done(&jobs[i].m);
        memmove(&jobs[i], &jobs[i + 1], (n_jobs - i - 1) * sizeof(*jobs));
        n_jobs--;
}

/* After the connection went: nothing of theirs is applied; their deliveries are void. */
static void jobs_drop_all(void) {
        if (n_jobs)
                log_warning("%zu egress requests in progress were dropped with the RabbitMQ connection; "
                            "nothing was applied for them", n_jobs);
        while (n_jobs)
                job_drop(n_jobs - 1);
        free(jobs);
        jobs = NULL;
}

/* Starts job j: a remove, or an apply without hostnames, is done now and its reply
 * returned; an apply with hostnames starts its lookups (NULL returned) unless too many
 * are resolving already, or its entries are refused (reply returned). */
static char *job_start(const struct agent_config *cfg, struct job *j) {
        struct pj_node_reply out;
        struct err err = { 0 };
        int r;
        reply_init(cfg, &j->m, &out);
        if (j->m.type == PJ_NODE_EGRESS_REMOVE)
                r = names_remove(j->m.sandbox_id, j->m.ip, &err);
        else if (names_policy_resolves(&j->m.egress) && jobs_resolving() >= resolving_max(cfg)) {
                r = err_set(&err, -EBUSY,
                            "%zu applies are already resolving hostnames on node %s (the bound is [amqp] prefetch - 1); "
                            "nothing was changed, try again",
                            jobs_resolving(), cfg->node_id);
        } else {
                uint32_t pid = 0;
                names_configure((int64_t) cfg->egress_resolve_timeout_ms, (int64_t) cfg->egress_resolve_interval_ms);
                r = container_pid(&j->m, &pid, &err);
                if (r >= 0)
                        r = names_apply_start(j->m.sandbox_id, j->m.account_id, j->m.ip, pid, &j->m.egress, &j->na, &err);
                if (r >= 0 && !names_apply_ready(j->na))
                        return NULL;
                if (r >= 0)
                        r = names_apply_finish(TAKE_PTR(j->na), &out, &err);
        }
        egress_done(&j->m, j->t0, r, err.message);
        return reply_text(cfg, &out, r, err.message);
}

static char *job_finish(const struct agent_config *cfg, struct job *j) {
        struct pj_node_reply out;
        struct err err = { 0 };
        reply_init(cfg, &j->m, &out);
        int r = names_apply_finish(TAKE_PTR(j->na), &out, &err);
        egress_done(&j->m, j->t0, r, err.message);
        return reply_text(cfg, &out, r, err.message);
}

/* Moves every job that can move: starts those no earlier job holds back, finishes those
 * whose names are in, replying to and acking each that ended. -ECHILD when a child died
 * meanwhile (no reply it could have made counts), else 0. */
static int jobs_run(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user) {
        struct err why = { 0 };
        for (size_t i = 0; i < n_jobs;) {
                struct job *j = &jobs[i];
                _cleanup_free_ char *out = NULL;
                if (!j->na) {
                        if (job_blocked(i)) {
                                i++;
                                continue;
                        }
                        out = job_start(cfg, j);
                } else if (names_apply_ready(j->na))
                        out = job_finish(cfg, j);
                if (!out) {
                        i++;
                        continue;
                }
                if (!privsep_healthy(&why))
                        return log_error_errno(-ECHILD, "%s; no longer consuming", why.message);
                reply(conn, cfg, user, &j->d, out);
                amqp_basic_ack(conn, CH, j->d.tag, 0);
                /* Only later jobs can have waited for this one: go on from the same index. */
                job_drop(i);
        }
        return 0;
}

/* Takes one delivery's body: egress changes become jobs, the rest is answered now. */
static int dispatch(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user,
                    const struct amqpx_delivery *d, const char *body) {
        struct err why = { 0 };
        struct pj_node_msg m = { 0 };
        struct err pe = { 0 };
        bool parsed = pj_node_msg_parse(body, d->c.size, &m, &pe) >= 0;
        _cleanup_free_ char *out = NULL;
        if (parsed && cfg->egress_enabled && (m.type == PJ_NODE_EGRESS_APPLY || m.type == PJ_NODE_EGRESS_REMOVE)) {
                if (m.type == PJ_NODE_EGRESS_APPLY)
                        reconcile_note_apply(m.sandbox_id);
                if (n_jobs < jobs_max(cfg)) {
                        jobs = xrealloc(jobs, (n_jobs + 1) * sizeof(*jobs));
                        jobs[n_jobs++] = (struct job) { .d = *d, .m = m, .t0 = mono_ms() };
                        return jobs_run(conn, cfg, user);
                }
                /* Only a broker that delivers past our prefetch gets here: refused, unchanged. */
                struct pj_node_reply busy;
                struct err err = { 0 };
                reply_init(cfg, &m, &busy);
                err_set(&err, -EBUSY, "%zu egress requests are in progress on node %s ([amqp] prefetch); nothing was changed",
                        n_jobs, cfg->node_id);
                egress_done(&m, mono_ms(), -EBUSY, err.message);
                out = reply_text(cfg, &busy, -EBUSY, err.message);
                pj_node_msg_done(&m);
        } else if (parsed) {
                out = handle_parsed(cfg, &m);
                pj_node_msg_done(&m);
        } else
                out = agent_handle(cfg, body, d->c.size);
        /* A child that died during this request: no reply it could have made counts. */
        if (!privsep_healthy(&why))
                return log_error_errno(-ECHILD, "%s; no longer consuming", why.message);
        reply(conn, cfg, user, d, out);
        amqp_basic_ack(conn, CH, d->tag, 0);
        return 0;
}

static int consume_loop(const struct agent_config *cfg, const char *user, amqp_connection_state_t conn) {
        struct err why = { 0 };
        /* Every (re)connection converges again: controld may have changed its mind meanwhile. */
        reconcile_send(conn, cfg, user);
        while (!stop_requested) {
                if (!privsep_healthy(&why))
                        return log_error_errno(-ECHILD, "%s; no longer consuming", why.message);
                int k = jobs_run(conn, cfg, user);
                if (k < 0)
                        return k;
                reconcile_tick(conn, cfg, user);
                agent_metrics_tick(cfg);
                resolved_send(conn, cfg, user);
                /* Names being resolved are polled often; otherwise the broker is waited for. */
                struct timeval tv = { .tv_sec = n_jobs ? 0 : 1, .tv_usec = n_jobs ? JOBS_TICK_MS * 1000 : 0 };
                amqp_frame_t f;
                int s = amqpx_consume_wait(conn, &tv, &f);
                if (s <= 0) {
                        if (s < 0)
                                return s;
                        continue;
                }
                if (f.payload.method.id == AMQP_BASIC_RETURN_METHOD && f.channel == CH) {
                        /* Only node.sync is published mandatory by us: nobody bound PJ_NODE_KEY_CONTROLD. */
                        struct amqpx_delivery rd = { 0 };
                        _cleanup_free_ char *rbody = NULL;
                        if (read_content(conn, &rd, &rbody) < 0)
                                return -ECONNRESET;
                        reconcile_on_return();
                        continue;
                }
                if (f.payload.method.id != AMQP_BASIC_DELIVER_METHOD || f.channel != CH)
                        continue;
                const amqp_basic_deliver_t *dm = f.payload.method.decoded;
                struct amqpx_delivery d = { .tag = dm->delivery_tag };
                bool is_reply = reconcile_is_reply(dm);
                _cleanup_free_ char *body = NULL;
                if (read_content(conn, &d, &body) < 0)
                        return -ECONNRESET;
                /* Only controld's broker login may command us ([amqp] controld_login): RabbitMQ
                 * checked user_id against the publisher's login; app_id and reply_to prove nothing. */
                bool from_controld = amqpx_login_is(cfg->controld_login, "", d.c.has_user_id ? d.c.user_id : NULL);
                if (is_reply) {
                        if (body && from_controld)
                                reconcile_on_reply(cfg, &d, body);
                        else if (body)
                                log_warning("ignoring a node.sync answer not published by controld's login (%s)",
                                            d.c.has_user_id ? d.c.user_id : "no user_id");
                        continue;       /* consumed with no-ack */
                }

                log_ctx_reset();
                log_ctx_set("NODE_ID", cfg->node_id);
                if (!from_controld) {
                        log_warning("refusing a message not published by controld's login %s (user_id %s)",
                                    cfg->controld_login, d.c.has_user_id ? d.c.user_id : "absent");
                        amqp_basic_reject(conn, CH, d.tag, 0);
                        continue;
                }
                _cleanup_free_ char *out = NULL;
                if (!body) {
                        log_warning("refusing a %" PRIu64 " byte message (limit %d); its body was not kept", d.c.size,
                                    MAX_MESSAGE);
                        struct pj_node_reply big = { .ok = false };
                        snprintf(big.node_id, sizeof(big.node_id), "%s", cfg->node_id);
                        snprintf(big.error, sizeof(big.error), "message too large (%" PRIu64 " bytes, limit %d)",
                                 d.c.size, MAX_MESSAGE);
                        out = pj_node_reply_format(&big);
                        reply(conn, cfg, user, &d, out);
                        amqp_basic_reject(conn, CH, d.tag, 0);
                        continue;
                }
                if ((k = dispatch(conn, cfg, user, &d, body)) < 0)
                        return k;
        }
        return 0;
}

int agent_run(const struct agent_config *cfg) {
        struct sigaction sa = { .sa_handler = on_signal };
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        int backoff_ms = 200, r = 0;
        bool notified = false;
        struct amqpx_url u;
        struct err why = { 0 };
        if ((r = amqpx_url_parse(cfg->amqp_url, &u, &why)) < 0)
                return log_error_errno(r, "[amqp] url: %s", why.message);
        log_ctx_set("NODE_ID", cfg->node_id);
        if (!cfg->controld_login || !*cfg->controld_login)
                log_warning("[amqp] controld_login is not set: any user of the broker that can publish to this node's "
                            "queue is obeyed. Give controld a broker user of its own and name it here; see OPERATIONS.md");
        else
                log_info("commands count only from controld's broker login %s", cfg->controld_login);
        watchdog_start();
        if (cfg->egress_enabled) {
                names_configure((int64_t) cfg->egress_resolve_timeout_ms, (int64_t) cfg->egress_resolve_interval_ms);
                if (names_refresh_start() < 0)
                        log_warning("cannot start re-resolving allowlisted names; they keep the addresses of their apply");
        }
        while (!stop_requested) {
                if (!privsep_healthy(&why)) {
                        r = log_error_errno(-ECHILD, "%s; no longer consuming", why.message);
                        break;
                }
                amqp_bytes_t q = amqp_empty_bytes;
                amqp_connection_state_t conn = connect_broker(cfg, &u, &q);
                if (!conn) {
                        /* In slices, so that a stop or a dead child is noticed within 100 ms. */
                        for (int slept = 0; slept < backoff_ms && !stop_requested && privsep_healthy(NULL);
                             slept += 100)
                                usleep(100 * 1000);
                        backoff_ms = backoff_ms * 2 > 10000 ? 10000 : backoff_ms * 2;
                        continue;
                }
                backoff_ms = 200;
                log_info("consuming node messages on queue %.*s (exchange %s, routing key %s)", (int) q.len,
                         (const char *) q.bytes, cfg->exchange, cfg->node_id);
                agent_metrics_amqp_connected(true);
                if (!notified) {
                        sd_notify(0, "READY=1\nSTATUS=consuming");
                        notified = true;
                }
                r = consume_loop(cfg, u.user, conn);
                jobs_drop_all();
                agent_metrics_amqp_connected(false);
                amqp_bytes_free(q);
                if (r == -ECHILD) {
                        /* Fail closed: dropping the connection deletes our queue at once, so
                         * controld's requests come back unroutable instead of waiting. */
                        amqp_destroy_connection(conn);
                        break;
                }
                if (r < 0)
                        log_warning("lost the RabbitMQ connection; reconnecting");
                r = 0;
                amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
                amqp_destroy_connection(conn);
        }
        names_refresh_stop();
        watchdog_stop();
        amqpx_url_done(&u);
        sd_notify(0, r < 0 ? "STATUS=a privileged child died" : "STOPPING=1");
        log_info("nodeagent stopped");
        return r;
}
