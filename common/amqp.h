/* amqp.h — what controld's node bus and the node agent share about RabbitMQ
 * (rabbitmq-c 0.11): URL parsing, connect + login, RPC-reply checks, the exchange.
 *
 * This header shadows librabbitmq's <amqp.h> (common/ is on the include path
 * before the system directories), so it pulls the real one in with
 * #include_next: every `#include <amqp.h>` in the tree gets both.
 *
 * Names carry the amqpx_ prefix (amqp_ is librabbitmq's). Library-like: logs at
 * debug only (amqpx_rpc_ok, which logs at its caller's priority, excepted); errors
 * are -errno plus a sentence in err that never holds the password.
 */
#pragma once

#include_next <amqp.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include "err.h"

/* A parsed amqp:// URL. The strings point into buf (owned). */
struct amqpx_url {
        char *buf;
        const char *host, *user, *password, *vhost;     /* vhost: "/" when the URL has none */
        int port;
};

/* url: amqp://[user[:pass]@]host[:port][/vhost]; defaults guest:guest, port 5672,
 * vhost "/". amqps:// -> -EOPNOTSUPP; anything else that does not parse, or has no
 * host -> -EINVAL. On success *ret is filled (amqpx_url_done); untouched on failure. */
int amqpx_url_parse(const char *url, struct amqpx_url *ret, struct err *err);
void amqpx_url_done(struct amqpx_url *u);

/* Checks the reply of a synchronous call. 0 when normal; otherwise err says what
 * the broker or the library said and the result is
 *   -ETIMEDOUT (library timeout), -ECONNRESET (other library errors),
 *   -EACCES (ACCESS_REFUSED / NOT_ALLOWED close), -EPROTO (anything else). */
int amqpx_rpc_check(amqp_rpc_reply_t x, const char *what, struct err *err);

/* amqpx_rpc_check of conn's last synchronous call. The one exception to debug-only
 * logging in this module, because its callers (the agent's consumers) all want the
 * same line: a failure is logged at prio, its text after prefix. */
int amqpx_rpc_ok(amqp_connection_state_t conn, const char *what, int prio, const char *prefix);

/* Opens a TCP connection to u and logs in (PLAIN) within timeout_ms, announcing
 * conn_name as the connection_name client property (shown by rabbitmqctl).
 * frame_max 0 = AMQP_DEFAULT_FRAME_SIZE. On success *ret is a logged-in
 * connection with no channel open (caller destroys it); untouched on failure.
 * Errors: -ECONNREFUSED / -EHOSTUNREACH / -ETIMEDOUT (cannot reach), -EACCES
 * (login refused, including the broker hanging up on bad credentials). */
/* What the node agent's connections ask for: frame_max, heartbeat, and the bound on
 * connecting and logging in. */
#define AMQPX_FRAME_MAX 131072
#define AMQPX_HEARTBEAT_S 30
#define AMQPX_CONNECT_TIMEOUT_MS 10000

int amqpx_connect(const struct amqpx_url *u, const char *conn_name, int frame_max, int heartbeat_s, long timeout_ms,
                  amqp_connection_state_t *ret, struct err *err);

/* Opens channel ch and declares the durable direct exchange controld and the
 * agents share. 0 or amqpx_rpc_check's errors. */
int amqpx_channel_open_exchange(amqp_connection_state_t conn, amqp_channel_t ch, const char *exchange, struct err *err);

/* Waits for the next frame until deadline (mono_ms() clock). 0 with *ret filled,
 * -ETIMEDOUT once the deadline has passed, -ECONNRESET when the connection broke. */
int amqpx_wait_frame_until(amqp_connection_state_t conn, int64_t deadline, amqp_frame_t *ret);

/* What the header frame of a delivery carried, copied out of rabbitmq-c's pool
 * (reply_to, correlation_id and app_id cut at 255 bytes: AMQP short strings are no longer). */
struct amqpx_content {
        uint64_t size;
        char reply_to[256];
        char correlation_id[256];
        bool has_corr;
        char app_id[256];
        bool has_app_id;
        char user_id[256];      /* RabbitMQ checked it is the publisher's login */
        bool has_user_id;
};

/* Whether user_id (NULL: the message had none) is the broker login tmpl names for node:
 * tmpl with every "{node}" replaced by node (e.g. "paddock-node-{node}"). An empty or NULL
 * tmpl checks nothing (true). RabbitMQ refuses a publish whose user_id is not the
 * publisher's own login, so a match proves who sent it; app_id proves nothing. */
bool amqpx_login_is(const char *tmpl, const char *node, const char *user_id);

/* How long the rest of a message may take to arrive once its basic.deliver (or
 * basic.return) has: past it the broker is taken as stalled and the connection replaced. */
#define AMQPX_CONTENT_TIMEOUT_MS 30000

/* Reads the header and body frames of the delivery just announced on channel ch
 * until deadline (mono_ms() clock), keeping at most max bytes: the header's
 * body_size is checked before any body is read, and an oversized body is read off
 * the socket and dropped frame by frame. Frames of other channels are skipped.
 * Returns 0 with *c filled and *ret_body (NUL-terminated, caller frees; NULL when
 * over max); -ETIMEDOUT at the deadline; -ECONNRESET when the connection broke, a
 * method frame came instead, or more body arrived than announced. */
int amqpx_read_content(amqp_connection_state_t conn, amqp_channel_t ch, int64_t deadline, uint64_t max,
                       struct amqpx_content *c, char **ret_body);

/* Waits until the broker confirms the publish with delivery tag tag (the channel is
 * in confirm mode). 0 when acked; -EIO when nacked; -ENXIO when it came back
 * unroutable (basic.return: its content frames follow, unread); -ETIMEDOUT at the
 * deadline (mono_ms() clock); -ECONNRESET when the connection or channel broke. */
int amqpx_wait_confirm(amqp_connection_state_t conn, uint64_t tag, int64_t deadline);

/* Properties of a JSON message: content type application/json and delivery_mode
 * (1 transient, 2 persistent); app_id and user_id when not NULL (RabbitMQ refuses
 * a user_id that is not the connection's own login). The caller adds the rest. */
amqp_basic_properties_t amqpx_json_props(uint8_t delivery_mode, const char *app_id, const char *user_id);

/* One turn of a consumer's loop: releases the buffers of the last frame, then waits
 * up to *tv for the next one. 1 with *ret when a method frame came; 0 when nothing
 * or another kind of frame came; -ECONNRESET when the connection broke, or the
 * broker closed the channel or the connection or cancelled the consumer. */
int amqpx_consume_wait(amqp_connection_state_t conn, struct timeval *tv, amqp_frame_t *ret);

/* A delivery: the tag and redelivered flag of its basic.deliver, then what its header said. */
struct amqpx_delivery {
        uint64_t tag;
        bool redelivered;
        struct amqpx_content c;
};

/* One turn of a plain consumer on channel ch (amqpx_consume_wait, then
 * amqpx_read_content with max and AMQPX_CONTENT_TIMEOUT_MS): waits up to timeout_ms for the
 * next basic.deliver on ch and reads its content. 1 with *d filled and *ret_body
 * (caller frees; NULL when the body was over max: read off the socket and dropped, so
 * the caller rejects d->tag); 0 when nothing came in time or another frame came;
 * -ETIMEDOUT when the content stalled; -ECONNRESET as amqpx_consume_wait. */
int amqpx_next_delivery(amqp_connection_state_t conn, amqp_channel_t ch, long timeout_ms, uint64_t max,
                        struct amqpx_delivery *d, char **ret_body);
