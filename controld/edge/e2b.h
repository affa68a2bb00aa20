/* e2b.h — E2B's API (e2b.c: the listener and the control plane; envd.c: envd's surface). */
#pragma once

#include <stdbool.h>

#include "http.h"

struct ctl;

/* Starts [e2b] listen (nothing when unset): 0 or -errno, logged. */
int e2b_start(struct ctl *c);
/* Stops accepting, waits (bounded) for connections being sorted, stops the HTTP server. */
void e2b_stop(void);
/* The bound port; 0 when off. */
int e2b_port(void);
/* The domain sandboxes are reached under (<port>-<id>.<domain>). */
const char *e2b_domain(void);
/* Which sandbox and port a request head (n bytes, peeked) names by Host <port>-<id>.<domain>
 * or the E2b-Sandbox-Id/-Port headers: 1 with id (SANDBOX_ID_LEN + 1 bytes) and *ret_port; 0
 * the control plane; -1 a malformed id or port. Pure: tests/fuzz/fuzz-e2b-head.c calls it. */
int e2b_head_target(const char *head, size_t n, const char *domain, char *id, int *ret_port);
/* envd-common.c: a sandbox's tokens, HMAC(agent key, kind, id) in hex: kind "envd" (X-Access-Token) or
 * "traffic" (e2b-traffic-access-token); nothing is stored. _ok compares in constant time. */
void e2b_token(const struct ctl *c, const char *kind, const char *sandbox_id, char out[65]);
bool e2b_token_ok(const struct ctl *c, const char *kind, const char *sandbox_id, const char *got);

/* envd.c: the route of a request to envd (sandbox_id NULL: the request named a malformed one). */
enum route_status envd_route(struct req *r, const char *sandbox_id);
