/* metrics.h — the node agent's Prometheus metrics, served on a loopback address.
 *
 * Counters live in this module, guarded by one mutex: any thread may observe, and the
 * HTTP thread (libmicrohttpd, in the unprivileged parent) renders them. Every family is
 * exposed from the start, at zero until something is observed, so dashboards and alerts
 * need no "absent" special case:
 *   paddock_agent_egress_applies_total{result="ok"|"error"}     egress.apply handled
 *   paddock_agent_egress_removes_total{result="ok"|"error"}     egress.remove handled
 *   paddock_agent_egress_apply_seconds (histogram)              time to handle one apply
 *   paddock_agent_snapshots_total{result="ok"|"error"}          snapshots taken (commit+push)
 *   paddock_agent_snapshot_seconds (histogram)                  time to take one
 *   paddock_agent_amqp_connected (gauge)                        1 while consuming
 *   paddock_agent_amqp_reconnects_total                         connections made after the first
 *   paddock_agent_egress_chains (gauge)                         sandbox chains in the nft table
 * Nothing here logs above debug; the caller logs once. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "err.h"

struct agent_config;

/* One handled egress.apply: its duration and whether it succeeded. */
void agent_metrics_observe_apply(double seconds, bool ok);
/* One handled egress.remove. */
void agent_metrics_observe_remove(bool ok);
/* One snapshot (commit, push, prune) from its start to its report. */
void agent_metrics_observe_snapshot(double seconds, bool ok);
/* The broker connection came up (true) or went away (false). Every "up" after the
 * first counts as a reconnect. */
void agent_metrics_amqp_connected(bool up);
/* Sets the nft chain gauge directly (tests, or a caller that just counted). */
void agent_metrics_set_chains(int64_t n);

/* From the thread that talks to the egress process (the consumer loop): re-counts the
 * sandbox chains through the egress process when an apply or remove happened since the
 * last count, or every 10 s. No-op when egress is not enabled. */
void agent_metrics_tick(const struct agent_config *cfg);

/* The exposition text (Prometheus 0.0.4), xmalloc'd. */
char *agent_metrics_render(void);

/* Parses "[metrics] listen": "IPv4:port" or "[IPv6]:port" on a loopback address
 * (127.0.0.0/8, ::1), port 1..65535. Returns 0, or -EINVAL with the reason in err
 * (no file prefix). */
int agent_metrics_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len, struct err *err);

/* Serves GET /metrics on cfg's listen address (nothing when it is unset). At most 8
 * connections, 5 s each. Returns 0 or -errno with the reason in err. */
int agent_metrics_start(const struct agent_config *cfg, struct err *err);
void agent_metrics_stop(void);
