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
 *    "mode":"open|restricted|deny_all","allow":["1.1.1.1","10.0.0.0/8","api.example.com"]}
 *   {"type":"egress.remove","sandbox_id":"<24 hex>","ip":"169.254.90.7"}
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj.h"
#include "pj_egress.h"

#define PJ_NODE_MAX_MESSAGE (64 * 1024)

enum pj_node_type {
        PJ_NODE_PING,
        PJ_NODE_EGRESS_APPLY,
        PJ_NODE_EGRESS_REMOVE,
};

struct pj_node_msg {
        enum pj_node_type type;
        char sandbox_id[25];     /* egress.*: 24 lowercase hex */
        uint32_t ip;             /* egress.*: sandbox IPv4, host byte order */
        struct pj_egress egress; /* egress.apply: normalised policy (allow only for restricted) */
};

const char *pj_node_type_to_string(enum pj_node_type t);
/* 0 or -EINVAL (err names the field); *ret untouched on failure. */
int pj_node_msg_parse(const char *body, size_t len, struct pj_node_msg *ret, struct pj_error *err);
/* Compact JSON text, xmalloc'd. */
char *pj_node_msg_format(const struct pj_node_msg *m);
void pj_node_msg_done(struct pj_node_msg *m);

/* Replies. */
struct pj_node_reply {
        bool ok;
        char type[32];
        char node_id[129];
        char error[512];
};
char *pj_node_reply_format(const struct pj_node_reply *r);
int pj_node_reply_parse(const char *body, size_t len, struct pj_node_reply *ret, struct pj_error *err);
