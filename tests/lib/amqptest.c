/* amqptest.c — see amqptest.h. */
#include <amqp_tcp_socket.h>

#include <stdlib.h>

#include "amqptest.h"
#include "cleanup.h"
#include "pj_snapshot.h"
#include "testlib.h"

void amqptest_need_broker(void) {
        if (!test_port_open(5672))
                TEST_SKIP("RabbitMQ is not listening on 127.0.0.1:5672 (tests/env/services.sh start rabbitmq)");
}

amqp_connection_state_t amqptest_connect(const char *exchange) {
        return amqptest_connect_as("guest", "guest", exchange);
}

static void user_delete(void *ud) {
        char *user = ud;
        char *argv[] = { "rabbitmqctl", "-n", "rabbit@localhost", "-q", "delete_user", user, NULL };
        (void) test_run_capture(argv, NULL, 1 << 16);
        free(user);
}

void amqptest_user_add(const char *user, const char *password) {
        char *del[] = { "rabbitmqctl", "-n", "rabbit@localhost", "-q", "delete_user", (char *) user, NULL };
        (void) test_run_capture(del, NULL, 1 << 16);    /* a leftover of an earlier run */
        char *add[] = { "rabbitmqctl", "-n", "rabbit@localhost", "-q", "add_user", (char *) user, (char *) password, NULL };
        ASSERT_EQ(test_run_capture(add, NULL, 1 << 16), 0);
        test_on_exit(user_delete, xstrdup(user));
        char *perm[] = { "rabbitmqctl", "-n", "rabbit@localhost", "-q", "set_permissions", "-p", "/", (char *) user, ".*", ".*", ".*", NULL };
        ASSERT_EQ(test_run_capture(perm, NULL, 1 << 16), 0);
}

amqp_connection_state_t amqptest_connect_as(const char *user, const char *password, const char *exchange) {
        amqp_connection_state_t conn = amqp_new_connection();
        amqp_socket_t *s = amqp_tcp_socket_new(conn);
        ASSERT_NOT_NULL(s);
        ASSERT_EQ(amqp_socket_open(s, "127.0.0.1", 5672), AMQP_STATUS_OK);
        ASSERT_EQ(amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, user, password).reply_type,
                  AMQP_RESPONSE_NORMAL);
        amqp_channel_open(conn, 1);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        if (exchange) {
                amqp_exchange_declare(conn, 1, amqp_cstring_bytes(exchange), amqp_cstring_bytes("direct"), 0, 1, 0,
                                      0, amqp_empty_table);
                ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        }
        return conn;
}

amqp_bytes_t amqptest_queue(amqp_connection_state_t conn) {
        amqp_queue_declare_ok_t *q = amqp_queue_declare(conn, 1, amqp_empty_bytes, 0, 0, 1, 1, amqp_empty_table);
        ASSERT_NOT_NULL(q);
        return amqp_bytes_malloc_dup(q->queue);
}

int amqptest_queue_consumers(const char *name) {
        amqp_connection_state_t conn = amqptest_connect(NULL);
        amqp_queue_declare_ok_t *q = amqp_queue_declare(conn, 1, amqp_cstring_bytes(name), 1, 0, 0, 0, amqp_empty_table);
        int n = q ? (int) q->consumer_count : -1;
        amqp_destroy_connection(conn);
        return n;
}

void amqptest_queue_delete(const char *name) {
        amqp_connection_state_t conn = amqptest_connect(NULL);
        amqp_queue_delete(conn, 1, amqp_cstring_bytes(name), 0, 0);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        amqp_destroy_connection(conn);
}

void amqptest_snapshot_queues_drop(const char *exchange, const char *node) {
        _cleanup_free_ char *jobs = pj_snapshot_jobs_queue(exchange, node), *events = pj_snapshot_events_queue(exchange);
        const char *const names[] = { jobs, events };
        for (size_t i = 0; i < ELEMENTSOF(names); i++) {
                char *argv[] = { "rabbitmqctl", "-n", "rabbit@localhost", "-q", "delete_queue", (char *) names[i], NULL };
                (void) test_run_capture(argv, NULL, 1 << 16);
        }
}
