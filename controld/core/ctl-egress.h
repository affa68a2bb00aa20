/* egress.h — egress enforcement through the node agents (egress.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* ---- egress enforcement through the node agents (egress.c) ---- */
struct strbuf;
/* true when an [amqp] url is configured: policies other than deny_all need an agent's word. */
bool ctl_egress_enforced(const struct ctl *c);
/* -EINVAL with a message naming the entry when an allowlist entry overlaps the always-deny set. */
int ctl_egress_check_allow(const struct sb_egress *e, struct err *err);
/* A policy's header rules: refused (-EOPNOTSUPP) without a node agent (nothing would put the
 * headers in: the requests would leave without them), and every placeholder must name a
 * secret of account_id (secret_rules_check). prefix: the rules' field ("egress.rules"). */
int ctl_egress_check_rules(struct ctl *c, const char *account_id, const struct sb_egress *e, const char *prefix,
                           struct err *err);
/* Asks sb's node agent to enforce pol (NULL = sb->egress) for sb->ip and waits for its
 * confirmation (at most [amqp] egress_timeout). 0 when confirmed, or when there is nothing to
 * confirm (deny_all, no node bus). Else a negative errno, err says why (-ENXIO no agent for
 * the node, -ETIMEDOUT no answer in time, -EREMOTEIO the agent refused, ...). On success for
 * restricted policies the names the agent resolved are written into the sandbox's /etc/hosts. */
int ctl_egress_apply(struct ctl *c, const struct sandbox *sb, const struct sb_egress *pol, struct err *err);
/* On a job thread: every ready sandbox's recorded policy applied again (called once at start). */
void ctl_egress_resync_all(struct ctl *c);
/* The sandbox's /etc/hosts for the names an apply resolved, into out (initialised here; the
 * caller frees it with strbuf_done). Every list a valid policy can produce fits whole: at most
 * ctl_egress_hosts_max() bytes (50 names x 32 addresses of the longest name, ~424 KiB). A list
 * that would not fit is refused (-E2BIG, err says why), never cut. */
struct pj_node_resolved;
struct strbuf;
int ctl_egress_hosts_render(const struct pj_node_resolved *res, size_t n, struct strbuf *out, struct err *err);
size_t ctl_egress_hosts_max(void);
/* Asks the agent to drop sb's rules (best effort; failures are logged and returned). */
int ctl_egress_remove(struct ctl *c, const struct sandbox *sb, struct err *err);
int ctl_egress_remove_timeout(struct ctl *c, const struct sandbox *sb, long timeout_ms, struct err *err);
/* The body of GET /sandboxes/{id}/egress. */
cJSON *ctl_egress_to_json(struct ctl *c, const struct sandbox *sb);
void ctl_egress_metrics_render(struct strbuf *b);
/* node.sync responder: consumes the controld queue of the node bus exchange (no-op without a bus). */
int ctl_egress_sync_start(struct ctl *c, struct err *err);
void ctl_egress_sync_stop(struct ctl *c);
