/* common/amqp's consumer step (amqpx_next_delivery) against a real RabbitMQ: what a delivery
 * carries, an oversized body dropped without losing step with the stream, an empty queue, and
 * a consumer the broker cancels. controld's snapshot-event and node.sync consumers and the
 * agent's snapshot-job consumer all read their messages through it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <amqp.h>

#include "amqptest.h"
#include "cleanup.h"
#include "strutil.h"
#include "testlib.h"

#define CH 1

/* Publishes body to queue q through the default exchange, with app_id, correlation_id and
 * reply_to when not NULL. */
static void publish(amqp_connection_state_t conn, amqp_bytes_t q, const char *app_id, const char *corr,
                    const char *reply_to, amqp_bytes_t body) {
        amqp_basic_properties_t p = amqpx_json_props(1, app_id, NULL);
        if (corr) {
                p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
                p.correlation_id = amqp_cstring_bytes(corr);
        }
        if (reply_to) {
                p._flags |= AMQP_BASIC_REPLY_TO_FLAG;
                p.reply_to = amqp_cstring_bytes(reply_to);
        }
        ASSERT_EQ(amqp_basic_publish(conn, CH, amqp_empty_bytes, q, 0, 0, &p, body), AMQP_STATUS_OK);
}

static void consume(amqp_connection_state_t conn, amqp_bytes_t q) {
        amqp_basic_consume(conn, CH, q, amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
}

/* The next delivery within 5 s; anything but one fails the test. */
static char *next(amqp_connection_state_t conn, uint64_t max, struct amqpx_delivery *d) {
        char *body = NULL;
        for (int i = 0; i < 50; i++) {
                int r = amqpx_next_delivery(conn, CH, 100, max, d, &body);
                ASSERT_TRUE(r >= 0);
                if (r == 1)
                        return body;
        }
        ASSERT_TRUE(!"no delivery within 5 s");
        return NULL;
}

static void conn_free(amqp_connection_state_t *c) {
        if (*c)
                amqp_destroy_connection(*c);
}
#define _cleanup_conn_ _cleanup_(conn_free)

/* A connection of the test's, consuming (manual acks) from a server-named queue of its own. */
struct fx {
        amqp_connection_state_t conn;
        amqp_bytes_t q;
};

static void fx_open(struct fx *f) {
        amqptest_need_broker();
        f->conn = amqptest_connect(NULL);
        f->q = amqptest_queue(f->conn);
        consume(f->conn, f->q);
}

static void fx_close(struct fx *f) {
        if (!f->conn)
                return;
        amqp_bytes_free(f->q);
        amqp_destroy_connection(f->conn);
}
#define _cleanup_fx_ _cleanup_(fx_close)

/* A connection made as the daemons make theirs (amqpx_connect), channel CH open. */
static amqp_connection_state_t daemon_connect(void) {
        struct amqpx_url u;
        struct err err = { 0 };
        ASSERT_EQ(amqpx_url_parse("amqp://guest:guest@127.0.0.1:5672/", &u, &err), 0);
        amqp_connection_state_t conn = NULL;
        int r = amqpx_connect(&u, "paddock-test-consume", 0, 0, 5000, &conn, &err);
        amqpx_url_done(&u);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "amqpx_connect: %s", err.message);
        amqp_channel_open(conn, CH);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        return conn;
}

TEST_FULL(a_delivery_carries_its_body_and_header, 30) {
        _cleanup_fx_ struct fx f = { 0 };
        fx_open(&f);
        publish(f.conn, f.q, "node-7", "corr-42", "reply.q", amqp_cstring_bytes("{\"type\":\"ping\"}"));

        struct amqpx_delivery d;
        _cleanup_free_ char *body = next(f.conn, 1024, &d);
        ASSERT_STREQ(body, "{\"type\":\"ping\"}");
        ASSERT_EQ(d.c.size, strlen(body));
        ASSERT_TRUE(d.tag > 0);
        ASSERT_FALSE(d.redelivered);
        ASSERT_TRUE(d.c.has_app_id);
        ASSERT_STREQ(d.c.app_id, "node-7");
        ASSERT_TRUE(d.c.has_corr);
        ASSERT_STREQ(d.c.correlation_id, "corr-42");
        ASSERT_STREQ(d.c.reply_to, "reply.q");
        amqp_basic_ack(f.conn, CH, d.tag, 0);

        /* No properties: nothing claimed. */
        publish(f.conn, f.q, NULL, NULL, NULL, amqp_cstring_bytes("x"));
        _cleanup_free_ char *b2 = next(f.conn, 1024, &d);
        ASSERT_STREQ(b2, "x");
        ASSERT_FALSE(d.c.has_app_id);
        ASSERT_FALSE(d.c.has_corr);
        ASSERT_STREQ(d.c.reply_to, "");
        amqp_basic_ack(f.conn, CH, d.tag, 0);
}

TEST_FULL(an_oversized_body_is_dropped_and_the_next_message_is_intact, 30) {
        _cleanup_fx_ struct fx f = { 0 };
        fx_open(&f);
        /* 300 KB: three body frames at the 128 KiB frame size. */
        size_t big_len = 300 * 1000;
        _cleanup_free_ char *big = xmalloc(big_len);
        memset(big, 'A', big_len);
        publish(f.conn, f.q, "node-7", NULL, NULL, (amqp_bytes_t) { .len = big_len, .bytes = big });
        publish(f.conn, f.q, "node-8", NULL, NULL, amqp_cstring_bytes("after"));

        struct amqpx_delivery d;
        char *b1 = next(f.conn, 64 * 1024, &d);
        ASSERT_NULL(b1);
        ASSERT_EQ(d.c.size, big_len);
        ASSERT_STREQ(d.c.app_id, "node-7");
        amqp_basic_reject(f.conn, CH, d.tag, 0);

        _cleanup_free_ char *b2 = next(f.conn, 64 * 1024, &d);
        ASSERT_STREQ(b2, "after");
        ASSERT_STREQ(d.c.app_id, "node-8");
        amqp_basic_ack(f.conn, CH, d.tag, 0);

        /* At exactly the limit it is kept. */
        publish(f.conn, f.q, NULL, NULL, NULL, (amqp_bytes_t) { .len = 64 * 1024, .bytes = big });
        _cleanup_free_ char *b3 = next(f.conn, 64 * 1024, &d);
        ASSERT_NOT_NULL(b3);
        ASSERT_EQ(strlen(b3), (size_t) 64 * 1024);
        amqp_basic_ack(f.conn, CH, d.tag, 0);
}

TEST_FULL(an_empty_queue_gives_nothing_and_a_rejected_message_comes_back_redelivered, 30) {
        _cleanup_fx_ struct fx f = { 0 };
        fx_open(&f);
        struct amqpx_delivery d;
        char *body = NULL;
        ASSERT_EQ(amqpx_next_delivery(f.conn, CH, 300, 1024, &d, &body), 0);
        ASSERT_NULL(body);

        publish(f.conn, f.q, NULL, NULL, NULL, amqp_cstring_bytes("again"));
        _cleanup_free_ char *b1 = next(f.conn, 1024, &d);
        ASSERT_FALSE(d.redelivered);
        amqp_basic_nack(f.conn, CH, d.tag, 0, 1);
        _cleanup_free_ char *b2 = next(f.conn, 1024, &d);
        ASSERT_STREQ(b2, "again");
        ASSERT_TRUE(d.redelivered);
        amqp_basic_ack(f.conn, CH, d.tag, 0);
}

TEST_FULL(a_consumer_the_broker_cancels_is_a_broken_connection, 30) {
        amqptest_need_broker();
        _cleanup_conn_ amqp_connection_state_t conn = daemon_connect();
        _cleanup_conn_ amqp_connection_state_t other = amqptest_connect(NULL);
        char name[64];
        snprintf(name, sizeof(name), "paddock.test-consume-%d", (int) getpid());
        amqp_queue_declare(conn, CH, amqp_cstring_bytes(name), 0, 0, 0, 1, amqp_empty_table);
        ASSERT_EQ(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
        consume(conn, amqp_cstring_bytes(name));
        /* Someone deletes the queue: RabbitMQ cancels the consumer (basic.cancel), which it
         * tells only to a client that announced consumer_cancel_notify. */
        amqp_queue_delete(other, CH, amqp_cstring_bytes(name), 0, 0);
        ASSERT_EQ(amqp_get_rpc_reply(other).reply_type, AMQP_RESPONSE_NORMAL);
        struct amqpx_delivery d;
        char *body = NULL;
        int r = 0;
        for (int i = 0; i < 50 && r == 0; i++)
                r = amqpx_next_delivery(conn, CH, 100, 1024, &d, &body);
        ASSERT_EQ(r, -ECONNRESET);
        ASSERT_NULL(body);
}
