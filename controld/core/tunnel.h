/* tunnel.h — a TCP port inside a sandbox joined to a client's socket (tunnel.c): the agent's
 * FORWARD channel, and the byte pump between it and the client. The edge (preview-proxy.c)
 * decides what of the client's bytes may pass and when the tunnel should end; the core
 * carries the bytes.
 *
 * One tunnel is one connection to the sandbox's agent; one user at a time. Nothing here logs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

struct ctl;
struct sandbox;
struct tunnel;

/* Connects to sb's agent and asks it for port (FORWARD), sending within send_timeout_ms and
 * waiting answer_timeout_ms for its answer. 0 with *ret; or
 *   -EHOSTUNREACH  the agent is not reachable (err says why, for the log),
 *   -EPIPE         it stopped answering while asked,
 *   -ETIMEDOUT     it did not answer in time (or the answer was unreadable),
 *   -ECONNREFUSED  nothing listens on port inside the sandbox,
 *   -EREMOTEIO     it refused otherwise: *ret_refusal is its errno (0: an unexpected answer). */
int tunnel_open(struct ctl *c, const struct sandbox *sb, int port, int send_timeout_ms, int answer_timeout_ms,
                struct tunnel **ret, int *ret_refusal, struct err *err);
/* Bytes to the port (bounded by timeout_ms): 0, or < 0 when the agent did not take them. */
int tunnel_send(struct tunnel *t, const void *data, size_t len, int timeout_ms);
/* Closes the channel and the connection; NULL is fine. Returns NULL. */
struct tunnel *tunnel_free(struct tunnel *t);

/* The client end of a pump, the edge's. */
struct tunnel_client {
        int fd;                          /* the client's socket (blocking) */
        int send_timeout_ms;             /* one write of the client's bytes to the agent */
        int check_ms;                    /* how often check() is asked, whatever the traffic */
        void *ud;
        /* Asked each turn: false ends the pump (the daemon stops). */
        bool (*running)(void *ud);
        /* Asked every check_ms with how long no byte has passed either way: false ends the
         * pump (idle too long, the permission to pass bytes is gone). */
        bool (*check)(void *ud, int64_t idle_ms);
        /* Asked each turn: true while the client's bytes may not pass (then only its going away
         * is watched for: it ends the pump). */
        bool (*hold)(void *ud);
        /* Bytes the client sent: how many of their first ones may pass (the rest are dropped),
         * < 0 to end the pump. */
        ssize_t (*take)(void *ud, const uint8_t *data, size_t len);
        /* Bytes from the port, to the client: false when the client cannot take them (ends). */
        bool (*deliver)(void *ud, const uint8_t *data, size_t len);
};

/* Bytes both ways until one side ends (the port's end shuts down the client's write side; the
 * client's end, a half-close included, is passed to the port), or a callback ends it. *ret_in and *ret_out: the bytes passed each way. */
void tunnel_pump(struct tunnel *t, const struct tunnel_client *cl, uint64_t *ret_in, uint64_t *ret_out);
