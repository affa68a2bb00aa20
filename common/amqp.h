/* amqp.h — what controld's node bus and the node agent share about RabbitMQ
 * (rabbitmq-c 0.11): URL parsing, connect + login, RPC-reply checks, the exchange.
 *
 * This header shadows librabbitmq's <amqp.h> (common/ is on the include path
 * before the system directories), so it pulls the real one in with
 * #include_next: every `#include <amqp.h>` in the tree gets both.
 *
 * Names carry the amqpx_ prefix (amqp_ is librabbitmq's). Library-like: logs at
 * debug only; errors are -errno plus a sentence in err that never holds the password.
 */
#pragma once

#include_next <amqp.h>

#include <stddef.h>

/* A parsed amqp:// URL. The strings point into buf (owned). */
struct amqpx_url {
        char *buf;
        const char *host, *user, *password, *vhost;     /* vhost: "/" when the URL has none */
        int port;
};

/* url: amqp://[user[:pass]@]host[:port][/vhost]; defaults guest:guest, port 5672,
 * vhost "/". amqps:// -> -EOPNOTSUPP; anything else that does not parse, or has no
 * host -> -EINVAL. On success *ret is filled (amqpx_url_done); untouched on failure. */
int amqpx_url_parse(const char *url, struct amqpx_url *ret, char *err, size_t errlen);
void amqpx_url_done(struct amqpx_url *u);

/* Checks the reply of a synchronous call. 0 when normal; otherwise err says what
 * the broker or the library said and the result is
 *   -ETIMEDOUT (library timeout), -ECONNRESET (other library errors),
 *   -EACCES (ACCESS_REFUSED / NOT_ALLOWED close), -EPROTO (anything else). */
int amqpx_rpc_check(amqp_rpc_reply_t x, const char *what, char *err, size_t errlen);

/* Opens a TCP connection to u and logs in (PLAIN) within timeout_ms, announcing
 * conn_name as the connection_name client property (shown by rabbitmqctl).
 * frame_max 0 = AMQP_DEFAULT_FRAME_SIZE. On success *ret is a logged-in
 * connection with no channel open (caller destroys it); untouched on failure.
 * Errors: -ECONNREFUSED / -EHOSTUNREACH / -ETIMEDOUT (cannot reach), -EACCES
 * (login refused, including the broker hanging up on bad credentials). */
int amqpx_connect(const struct amqpx_url *u, const char *conn_name, int frame_max, int heartbeat_s, long timeout_ms,
                  amqp_connection_state_t *ret, char *err, size_t errlen);

/* Opens channel ch and declares the durable direct exchange controld and the
 * agents share. 0 or amqpx_rpc_check's errors. */
int amqpx_channel_open_exchange(amqp_connection_state_t conn, amqp_channel_t ch, const char *exchange, char *err,
                                size_t errlen);

/* Waits up to timeout_ms for the next delivery on conn (any channel). 1 with *ret filled
 * (the caller acks and amqp_destroy_envelope()s it), 0 when nothing came in time,
 * -ECONNRESET when the connection was closed or broke (reconnect). */
int amqpx_consume_next(amqp_connection_state_t conn, amqp_envelope_t *ret, long timeout_ms);
