/* pj_node.h — messages between controld and a node's agent (AMQP bodies).
 *
 * Requests are JSON objects {"type": ..., ...}; every reply is
 * {"ok": bool, "type": ..., "node_id": ..., "error"?: string}. Both sides
 * parse with these functions so the schema lives in one place. Untrusted on
 * both ends: sizes are bounded, unknown fields are rejected, every field is
 * checked, and errors name the field at fault.
 *
 *   {"type":"ping"}
 *   {"type":"egress.apply","sandbox_id":"<24 hex>","ip":"169.254.90.7",
 *    "mode":"open|restricted|deny_all","allow":["1.1.1.1","10.0.0.0/8","api.example.com"],
 *    "container":"<the sandbox's container: id or name>",
 *    "rules":{"<host>":[{"headers":{"<name>":"<value, secrets put in>"}}]}}   (rules optional:
 *                                          the node's egress proxy puts these headers into the
 *                                          sandbox's HTTP(S) requests to each host; values are
 *                                          secrets: never logged, dropped with the sandbox)   (container optional: the agent binds
 *                                          the sandbox's bridge port to its address and MAC, so no
 *                                          other sandbox can send as it; without it, no binding)
 *   {"type":"egress.remove","sandbox_id":"<24 hex>","ip":"169.254.90.7"}
 *   {"type":"egress.stats"}
 *   {"type":"proxy.stats","sandbox_id":"<24 hex>"}   the egress proxy's counters of one sandbox
 *   {"type":"node.sync","node_id":"<the agent's node id>"}    agent -> controld (routing key "controld")
 *   {"type":"egress.resolved","node_id":...,"sandbox_id":"<24 hex>",
 *    "resolved":[{"name","addrs","at"}]}   agent -> controld (routing key "controld", no reply): a
 *                                          re-resolution changed the addresses the agent now enforces
 *
 * Reply extras (all optional on the wire, so older replies still parse):
 *   egress.apply  "applied_at":<unix ms>, "ca_pem":"<PEM>" (with rules: the sandbox's proxy CA),
 *                 "resolved":[{"name":"api.example.com","addrs":["203.0.113.5"],"at":<unix ms>}]
 *   egress.stats  "sandboxes":[{"sandbox_id","allowed_packets","allowed_bytes",
 *                               "dropped_packets","dropped_bytes"}]   (at most PJ_NODE_MAX_STATS)
 *   proxy.stats   "proxy":[{"host","requests","injections","upstream_refused"}] (at most
 *                 PJ_EGRESS_MAX_RULES: one per rule host; counts, never values)
 *   node.sync     "live":[{"sandbox_id":"<24 hex>","ip":"169.254.90.7"}] (at most PJ_NODE_MAX_LIVE)
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj.h"
#include "pj_egress.h"

/* Where these messages travel, on the one direct exchange both daemons declare (the config's
 * [amqp] exchange). Requests to a node are routed by its node id; the agent consumes them on its
 * exclusive queue. What agents send controld (node.sync, egress.resolved) goes with routing key
 * PJ_NODE_KEY_CONTROLD to controld's queue. Queue names carry the exchange so two deployments
 * can share a broker. Each returns the name, xmalloc'd (as pj_snapshot.h's queue names). */
#define PJ_NODE_KEY_CONTROLD "controld"
char *pj_node_queue_controld(const char *exchange);                    /* <exchange>.controld */
char *pj_node_queue_agent(const char *exchange, const char *node_id);  /* <exchange>.nodeagent.<node> */

#define PJ_NODE_MAX_MESSAGE (1024 * 1024)   /* an apply with rules carries their resolved values */
#define PJ_NODE_MAX_CA_PEM 8192
/* Replies can list every sandbox of a node. */
#define PJ_NODE_MAX_REPLY (1024 * 1024)
#define PJ_NODE_MAX_LIVE 4096
#define PJ_NODE_MAX_STATS 4096
/* Addresses one allowlisted hostname may bring in (the agent fails the apply beyond). */
#define PJ_NODE_MAX_ADDRS_PER_NAME 32

enum pj_node_type {
        PJ_NODE_PING,
        PJ_NODE_EGRESS_APPLY,
        PJ_NODE_EGRESS_REMOVE,
        PJ_NODE_EGRESS_STATS,
        PJ_NODE_NODE_SYNC,
        PJ_NODE_EGRESS_RESOLVED,
        PJ_NODE_PROXY_STATS,
};

struct pj_node_resolved;

struct pj_node_msg {
        enum pj_node_type type;
        char sandbox_id[25];     /* egress.*: 24 lowercase hex */
        uint32_t ip;             /* egress.*: sandbox IPv4, host byte order */
        struct pj_egress egress; /* egress.apply: normalised policy (allow only for restricted) */
        char account_id[25];     /* egress.apply, optional: the sandbox's account, 24 lowercase hex
                                  * or "" (the agent's per-account lookup budget) */
        char container[65];      /* egress.apply, optional: the sandbox's container reference
                                  * (pj_snapshot_container_ref_valid) or "" */
        char node_id[129];       /* node.sync, egress.resolved: the sending agent's node id */
        char sandbox_network[16]; /* node.sync, optional: the gVisor network mode of the node's
                                   * networked sandboxes ("sandbox", "host", ...; 1..15 of a-z) or "" */
        struct pj_node_resolved *resolved;      /* egress.resolved (owned; <= PJ_EGRESS_MAX_ALLOW) */
        size_t n_resolved;
};

const char *pj_node_type_to_string(enum pj_node_type t);
/* 0 or -EINVAL (err names the field); *ret untouched on failure. */
int pj_node_msg_parse(const char *body, size_t len, struct pj_node_msg *ret, struct err *err);
/* Compact JSON text, xmalloc'd. */
char *pj_node_msg_format(const struct pj_node_msg *m);
void pj_node_msg_done(struct pj_node_msg *m);

/* Replies. */
struct pj_node_resolved {
        char name[254];                                 /* normalised hostname */
        uint32_t addrs[PJ_NODE_MAX_ADDRS_PER_NAME];     /* IPv4, host order */
        size_t n_addrs;
        int64_t at_ms;                                  /* when resolved, unix ms */
};

/* [{"name","addrs":["a.b.c.d",...],"at":<unix ms>}, ...]: the "resolved" list as replies and
 * egress.resolved carry it, and as GET /sandboxes/{id}/egress shows it. New tree. */
struct cJSON;
struct cJSON *pj_node_resolved_to_json(const struct pj_node_resolved *v, size_t n);

struct pj_node_sbx_stats {
        char sandbox_id[25];
        uint64_t allowed_packets, allowed_bytes;
        uint64_t dropped_packets, dropped_bytes;
};

struct pj_node_proxy_host {
        char host[254];
        uint64_t requests, injections, upstream_refused;
};

struct pj_node_live {
        char sandbox_id[25];
        uint32_t ip;                                    /* host order */
};

/* Arrays are heap-allocated (xmalloc) and owned by the struct: release them
 * with pj_node_reply_done(). A reply without the optional fields allocates
 * nothing, so callers that only read ok/type/node_id/error still need not. */
struct pj_node_reply {
        bool ok;
        char type[32];
        char node_id[129];
        char error[512];
        /* egress.apply */
        int64_t applied_at_ms;                          /* 0 = absent */
        char *ca_pem;                                   /* the sandbox's egress CA certificate (PEM) when its
                                                         * policy has rules: the sandbox must trust it */
        /* proxy.stats */
        bool has_proxy;
        struct pj_node_proxy_host *proxy;
        size_t n_proxy;
        struct pj_node_resolved *resolved;              /* <= PJ_EGRESS_MAX_ALLOW */
        size_t n_resolved;
        /* egress.stats */
        bool has_stats;                                 /* "sandboxes" present */
        struct pj_node_sbx_stats *stats;
        size_t n_stats;
        /* node.sync */
        bool has_live;                                  /* "live" present (an empty list is a real answer) */
        struct pj_node_live *live;
        size_t n_live;
};
char *pj_node_reply_format(const struct pj_node_reply *r);
/* Accepts bodies up to PJ_NODE_MAX_REPLY. Unknown fields are ignored (older and
 * newer peers interoperate); the optional arrays are checked entry by entry and
 * bounded. 0 or -EINVAL; *ret untouched on failure. */
int pj_node_reply_parse(const char *body, size_t len, struct pj_node_reply *ret, struct err *err);
void pj_node_reply_done(struct pj_node_reply *r);
