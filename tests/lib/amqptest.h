/* amqptest.h — raw RabbitMQ connections of a test's own (the shared test broker at
 * 127.0.0.1:5672, user guest), for tests that play controld or an agent. */
#pragma once

#include <amqp.h>

/* Skips the test (a failure under CI=true) when the test broker is not listening. */
void amqptest_need_broker(void);

/* Connected and logged in, channel 1 open; with exchange non-NULL that direct, durable
 * exchange is declared too. Any failure fails the test. */
amqp_connection_state_t amqptest_connect(const char *exchange);
/* The same, logged in as user. */
amqp_connection_state_t amqptest_connect_as(const char *user, const char *password, const char *exchange);
/* A broker user of the test's own with every permission on vhost "/" (rabbitmqctl; deleted
 * when the test ends, and first if a run before left it). */
void amqptest_user_add(const char *user, const char *password);

/* A server-named, exclusive, auto-delete queue on channel 1; the name is the caller's
 * (amqp_bytes_free). */
amqp_bytes_t amqptest_queue(amqp_connection_state_t conn);

/* The number of consumers on the named queue, or -1 when it does not exist (asked on a
 * connection of its own: a passive declare of a missing queue closes the channel). */
int amqptest_queue_consumers(const char *name);

/* At a test's end: deletes the snapshot job queue of node and the outcome queue on exchange
 * (pj_snapshot's names), whatever state they are in; nothing is asserted. */
void amqptest_snapshot_queues_drop(const char *exchange, const char *node);
/* Deletes the named queue (as an operator would; its consumers are cancelled). */
void amqptest_queue_delete(const char *name);
