/* nodebus.h — fail-closed request/reply to one node's agent over RabbitMQ.
 *
 * One client holds one connection with one channel in confirm mode and an
 * exclusive, server-named reply queue. A request is published to the direct
 * exchange with routing key = node ID, mandatory, transient, with
 * message_id = correlation_id = a fresh 24-hex id, reply_to = our queue and
 * expiration = the time left. It succeeds only when the agent's reply with that
 * correlation_id arrives before the deadline, from that node: a reply is taken only
 * if its app_id is the node ID the request was sent to (agents set it, with user_id
 * = their broker login, which RabbitMQ checks); any other reply is dropped and the
 * request keeps waiting. Everything else is a failure the
 * caller can tell apart:
 *   -ENXIO       the broker returned the message: no agent queue is bound for the node
 *                (agents' queues are exclusive + auto-delete, so a dead agent is gone at once)
 *   -EIO         the broker nacked the message, or closed our channel (its text in err;
 *                the channel is reopened before the next request)
 *   -ETIMEDOUT   no reply by the deadline (hung agent, or no confirm from the broker);
 *                a late reply to such a request is recognised by its id and dropped
 *   -ECONNRESET  the connection broke while this request was in flight (-EPIPE: while publishing);
 *                the next request reconnects and redeclares
 *   -EMSGSIZE    body or reply over AMQP_CLIENT_MAX_BODY
 *   -EBADMSG     the reply's content did not match its header (more body than announced)
 *   -EINVAL      bad arguments (empty or over-long node id, timeout <= 0)
 *   connect errors (-ECONNREFUSED, -EACCES, -ETIMEDOUT, -EPROTO) when no connection could be made
 * A connection that died while idle (broker restart, missed heartbeats, an admin
 * closing it) is noticed before publishing and replaced without failing the request:
 * nothing had been sent on it.
 *
 * Thread-safe. Requests from many threads are in flight at once on the one
 * connection (a mutex serialises every rabbitmq-c call; one waiting thread at a
 * time reads frames and hands each reply to its owner), so a hung agent on one
 * node does not delay requests to other nodes. No call blocks beyond its deadline,
 * except a publish into a socket the broker has stopped reading (memory alarm),
 * which rabbitmq-c bounds only by its heartbeat timeout.
 *
 * Library-like: logs at debug only; the caller logs once.
 */
#pragma once

#include <amqp.h>

#include <stddef.h>
#include <cjson/cJSON.h>

#include "err.h"

#define AMQP_CLIENT_MAX_BODY (1024 * 1024)

struct nodebus;

/* url: amqp://user:pass@host:port[/vhost] (empty vhost means "/"); amqps:// is refused
 * (-EOPNOTSUPP), anything else that does not parse -> -EINVAL. exchange: the direct
 * exchange the agents bind to (declared durable if missing). Connects before returning
 * (at most 10 s) so that a wrong URL or credentials show at startup. On success *ret is
 * owned by the caller (nodebus_free). */
int nodebus_new(const char *url, const char *exchange, struct nodebus **ret, struct err *err);
/* Replies count only when their user_id is the node's broker login: tmpl with "{node}" for
 * the node id ([amqp] node_login). NULL or "" checks only app_id, which any user can set. */
void nodebus_set_node_login(struct nodebus *c, const char *tmpl);

/* Closes the connection. No request may be running. Accepts NULL; returns NULL. */
struct nodebus *nodebus_free(struct nodebus *c);

/* controld's one way to open another broker connection (the node.sync responder, snapshot
 * jobs and events each need their own: a connection is one thread's): the bus's URL, the
 * name "paddock-controld-<role>", the common frame size, heartbeat and connect timeout, and
 * channel ch opened with the bus's exchange declared. *ret is the caller's to close. */
int nodebus_connect(struct nodebus *c, const char *role, amqp_channel_t ch, amqp_connection_state_t *ret, struct err *err);
/* The exchange the bus publishes to (the config's [amqp] exchange). */
const char *nodebus_exchange(const struct nodebus *c);

/* Publishes body (JSON text, at most AMQP_CLIENT_MAX_BODY bytes) for node_id and waits
 * at most timeout_ms for the agent's reply. Returns 0 with *ret_reply = the reply body
 * (xmalloc'd, NUL-terminated, caller frees); on failure a negative errno from the table
 * above, err filled, *ret_reply untouched. */
int nodebus_request(struct nodebus *c, const char *node_id, const char *body, long timeout_ms, char **ret_reply,
                 struct err *err);

/* nodebus_request, then the reply, read with proto-json's one reply codec (pj_node_reply_parse),
 * must say "ok": true and come from node_id.
 *   -EREMOTEIO  "ok": false; err holds the agent's "error" text
 *   -EBADMSG    the reply does not parse, or its "node_id" is not node_id
 * On success *ret_reply (may be NULL if unwanted) is the typed reply, the caller's to release
 * with pj_node_reply_done(). */
struct pj_node_reply;
int nodebus_request_ok(struct nodebus *c, const char *node_id, const char *body, long timeout_ms,
                       struct pj_node_reply *ret_reply, struct err *err);
