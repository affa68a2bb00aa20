/* reconcile.c — node.sync: the agent's egress table converges on what controld says
 * lives on this node. The consumer loop (agent.c) drives it: it sends after every
 * (re)connect, ticks it, and hands it the replies that arrive on its reply queue.
 * Runs on the consumer thread only, the one that touches the AMQP connection.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp.h"
#include "cleanup.h"
#include "log.h"
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"

#define CH AGENT_CH

/* node.sync: at start-up (and after every reconnect) the agent asks controld which
 * sandboxes are live on this node and removes the chains of all others; controld
 * then re-publishes egress.apply for the live ones. Until an answer comes the table
 * stays as it is (fail closed: a sandbox without a confirmed chain has no egress);
 * no route or no answer within SYNC_TIMEOUT_MS -> retried with backoff. */
#define SYNC_TIMEOUT_MS 10000
#define SYNC_BACKOFF_MAX_MS 300000
static struct {
        amqp_bytes_t reply_q;           /* exclusive, server-named, consumed with no-ack */
        char corr[64];
        int64_t sent_at;                /* mono ms; 0 = nothing in flight */
        int64_t next_at;                /* mono ms of the next attempt; 0 = none (converged) */
        int backoff_ms;
        unsigned attempt;
        bool converged;                 /* once, for tests and the log */
        /* Sandboxes whose egress.apply arrived after the ask went out: controld's answer may have
         * been computed before their record said they live here, so it cannot condemn them. */
        char **applied;
        size_t n_applied;
        bool applied_overflow;          /* more than SYNC_APPLIED_MAX: prune nothing this round */
} sync_st = { .backoff_ms = 1000 };
#define SYNC_APPLIED_MAX 4096

static void applied_clear(void) {
        strv_free(sync_st.applied);
        sync_st.applied = NULL;
        sync_st.n_applied = 0;
        sync_st.applied_overflow = false;
}

void reconcile_note_apply(const char *sandbox_id) {
        if (!sync_st.sent_at || sync_st.applied_overflow)
                return;
        if (sync_st.n_applied == SYNC_APPLIED_MAX) {
                sync_st.applied_overflow = true;
                return;
        }
        sync_st.applied = xrealloc(sync_st.applied, (sync_st.n_applied + 2) * sizeof(char *));
        sync_st.applied[sync_st.n_applied++] = xstrdup(sandbox_id);
        sync_st.applied[sync_st.n_applied] = NULL;
}

static bool applied_since_ask(const char *id) {
        for (size_t i = 0; i < sync_st.n_applied; i++)
                if (!strcmp(sync_st.applied[i], id))
                        return true;
        return false;
}

void reconcile_send(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user) {
        struct pj_node_msg m = { .type = PJ_NODE_NODE_SYNC };
        strscpy(m.node_id, cfg->node_id, sizeof(m.node_id));
        /* The docker process read it at start ("network=<mode>"); controld shows it in /healthz. */
        const char *note = privsep_ready_note(PS_CHILD_DOCKER);
        if (startswith(note, "network="))
                strscpy(m.sandbox_network, note + strlen("network="), sizeof(m.sandbox_network));
        _cleanup_free_ char *body = pj_node_msg_format(&m);
        snprintf(sync_st.corr, sizeof(sync_st.corr), "sync-%s-%u-%" PRId64, cfg->node_id, ++sync_st.attempt, mono_ms());
        amqp_basic_properties_t p = amqpx_json_props(1, cfg->node_id, user);
        p._flags |= AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_EXPIRATION_FLAG;
        p.reply_to = sync_st.reply_q;
        p.correlation_id = amqp_cstring_bytes(sync_st.corr);
        p.expiration = amqp_cstring_bytes("10000");
        amqp_basic_publish(conn, CH, amqp_cstring_bytes(cfg->exchange), amqp_cstring_bytes(PJ_NODE_KEY_CONTROLD), 1, 0, &p,
                           amqp_cstring_bytes(body));
        sync_st.sent_at = mono_ms();
        sync_st.next_at = 0;
        applied_clear();
        log_info("node.sync sent to controld (attempt %u)", sync_st.attempt);
}

static void sync_retry_later(const char *why) {
        sync_st.sent_at = 0;
        sync_st.next_at = mono_ms() + sync_st.backoff_ms;
        log_warning("node.sync: %s; keeping the firewall as it is and asking again in %d s", why, sync_st.backoff_ms / 1000);
        sync_st.backoff_ms = sync_st.backoff_ms * 2 > SYNC_BACKOFF_MAX_MS ? SYNC_BACKOFF_MAX_MS : sync_st.backoff_ms * 2;
}

static bool live_has(const struct pj_node_reply *r, const char *id) {
        for (size_t i = 0; i < r->n_live; i++)
                if (!strcmp(r->live[i].sandbox_id, id))
                        return true;
        return false;
}

/* Removes the chain of every sandbox not in r->live. Returns how many were removed, or -errno. */
static int sync_prune(const struct pj_node_reply *r) {
        _cleanup_strv_free_ char **stale = NULL;
        size_t n_stale = 0;
        uint32_t total = 0;
        for (uint32_t off = 0;; off += PS_LIST_PAGE) {
                struct ps_egress_list req = { .hdr.type = PS_EGRESS_LIST, .offset = off };
                struct ps_result res;
                int k = privsep_call(PS_CHILD_EGRESS, &req, sizeof(req), &res);
                if (k < 0)
                        return log_warning_errno(k, "node.sync: cannot list the egress table: %s", res.msg);
                char *colon = strchr(res.msg, ':');
                if (!colon)
                        return log_warning_errno(-EBADMSG, "node.sync: the egress process listed nothing readable");
                total = (uint32_t) strtoul(res.msg, NULL, 10);
                const char *list = colon + 1;
                size_t got = strlen(list) / EGRESS_ID_LEN;
                for (size_t i = 0; i < got; i++) {
                        char id[EGRESS_ID_LEN + 1];
                        memcpy(id, list + i * EGRESS_ID_LEN, EGRESS_ID_LEN);
                        id[EGRESS_ID_LEN] = 0;
                        if (live_has(r, id) || applied_since_ask(id))
                                continue;
                        stale = xrealloc(stale, (n_stale + 2) * sizeof(char *));
                        stale[n_stale++] = xstrdup(id);
                        stale[n_stale] = NULL;
                }
                if (got == 0 || off + PS_LIST_PAGE >= total)
                        break;
        }
        int removed = 0;
        for (size_t i = 0; i < n_stale; i++) {
                struct ps_egress_remove req = { .hdr.type = PS_EGRESS_REMOVE };
                struct ps_result res;
                strscpy(req.sandbox_id, stale[i], sizeof(req.sandbox_id));
                int k = privsep_call(PS_CHILD_EGRESS, &req, sizeof(req), &res);
                if (k < 0)
                        return log_warning_errno(k, "node.sync: cannot remove stale sandbox %s: %s", stale[i], res.msg);
                names_forget(stale[i]);         /* no refresh may bring its rules back */
                log_ctx_set("SANDBOX_ID", stale[i]);
                log_info("node.sync: removed the egress chain of a sandbox controld no longer has here");
                log_ctx_set("SANDBOX_ID", NULL);
                removed++;
        }
        return removed;
}

void reconcile_on_reply(const struct agent_config *cfg, const struct amqpx_delivery *d, const char *body) {
        if (!sync_st.sent_at || !d->c.has_corr || strcmp(d->c.correlation_id, sync_st.corr) != 0) {
                log_debug("ignoring a reply that answers no node.sync in flight");
                return;
        }
        struct pj_node_reply r;
        struct err pe;
        if (pj_node_reply_parse(body, d->c.size, &r, &pe) < 0) {
                sync_retry_later("controld's answer does not parse");
                return;
        }
        if (!r.ok || strcmp(r.type, "node.sync") != 0 || strcmp(r.node_id, cfg->node_id) != 0 || !r.has_live) {
                char why[700];
                snprintf(why, sizeof(why), "controld did not confirm (%s)", r.ok ? "no live list for this node" : r.error);
                pj_node_reply_done(&r);
                sync_retry_later(why);
                return;
        }
        /* too many applies raced this ask to tell which are safe: prune at the next ask */
        int k = cfg->egress_enabled && !sync_st.applied_overflow ? sync_prune(&r) : 0;
        if (k < 0) {
                pj_node_reply_done(&r);
                sync_retry_later("pruning failed");
                return;
        }
        log_info("node.sync: converged: %zu live sandboxes, %d stale chains removed", r.n_live, k);
        sync_st.sent_at = 0;
        sync_st.next_at = 0;
        sync_st.backoff_ms = 1000;
        sync_st.converged = true;
        applied_clear();
        pj_node_reply_done(&r);
}

void reconcile_tick(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user) {
        int64_t now = mono_ms();
        if (sync_st.sent_at && now - sync_st.sent_at >= SYNC_TIMEOUT_MS)
                sync_retry_later("no answer from controld within 10 s");
        if (!sync_st.sent_at && sync_st.next_at && now >= sync_st.next_at)
                reconcile_send(conn, cfg, user);
}

amqp_bytes_t reconcile_reply_queue_set(amqp_bytes_t q) {
        amqp_bytes_free(sync_st.reply_q);
        sync_st.reply_q = amqp_bytes_malloc_dup(q);
        return sync_st.reply_q;
}

bool reconcile_is_reply(const amqp_basic_deliver_t *dm) {
        return dm->routing_key.len == sync_st.reply_q.len &&
               !memcmp(dm->routing_key.bytes, sync_st.reply_q.bytes, dm->routing_key.len) && dm->exchange.len == 0;
}

void reconcile_on_return(void) {
        if (sync_st.sent_at)
                sync_retry_later("no controld is bound to the exchange (returned unroutable)");
}
