/* Unit tests for common/amqp.c: the URL parser and the RPC-reply mapping (no broker needed). */
#include <errno.h>
#include <string.h>

#include "amqp.h"
#include "cleanup.h"
#include "testlib.h"

TEST(url_defaults_and_fields) {
        struct amqpx_url u;
        char err[256] = "";
        ASSERT_OK(amqpx_url_parse("amqp://alice:s3cret@rabbit.example:5673/prod", &u, err, sizeof(err)));
        ASSERT_STREQ(u.host, "rabbit.example");
        ASSERT_EQ(u.port, 5673);
        ASSERT_STREQ(u.user, "alice");
        ASSERT_STREQ(u.password, "s3cret");
        ASSERT_STREQ(u.vhost, "prod");
        amqpx_url_done(&u);
        ASSERT_NULL(u.buf);

        /* Defaults: guest/guest, 5672, vhost "/" with or without the trailing slash. */
        ASSERT_OK(amqpx_url_parse("amqp://127.0.0.1", &u, err, sizeof(err)));
        ASSERT_STREQ(u.user, "guest");
        ASSERT_STREQ(u.password, "guest");
        ASSERT_EQ(u.port, 5672);
        ASSERT_STREQ(u.vhost, "/");
        amqpx_url_done(&u);
        ASSERT_OK(amqpx_url_parse("amqp://guest:guest@127.0.0.1:5672/", &u, err, sizeof(err)));
        ASSERT_STREQ(u.vhost, "/");
        amqpx_url_done(&u);
        /* A percent-encoded vhost. */
        ASSERT_OK(amqpx_url_parse("amqp://h/%2ftenants", &u, err, sizeof(err)));
        ASSERT_STREQ(u.vhost, "/tenants");
        amqpx_url_done(&u);
}

TEST(url_refusals_leave_ret_untouched) {
        static const char *const bad[] = {
                "http://127.0.0.1:5672", "amqp:/127.0.0.1", "127.0.0.1:5672", "",
                "amqp://guest:guest@127.0.0.1:notaport/", "amqp://guest:guest@127.0.0.1:99999/",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct amqpx_url u = { .port = -7 };
                char err[256] = "";
                ASSERT_EQ(amqpx_url_parse(bad[i], &u, err, sizeof(err)), -EINVAL);
                ASSERT_CONTAINS(err, "amqp://user:pass@host:port/vhost");
                ASSERT_EQ(u.port, -7);
                ASSERT_NULL(u.buf);
        }
        struct amqpx_url u = { 0 };
        char err[256] = "";
        ASSERT_EQ(amqpx_url_parse(NULL, &u, err, sizeof(err)), -EINVAL);
        ASSERT_EQ(amqpx_url_parse("amqps://guest:guest@127.0.0.1/", &u, err, sizeof(err)), -EOPNOTSUPP);
        ASSERT_CONTAINS(err, "amqps:// is not supported");
        /* err may be absent. */
        ASSERT_EQ(amqpx_url_parse("nope", &u, NULL, 0), -EINVAL);
}

TEST(rpc_reply_mapping) {
        char err[256] = "";
        amqp_rpc_reply_t x = { .reply_type = AMQP_RESPONSE_NORMAL };
        ASSERT_EQ(amqpx_rpc_check(x, "queue.declare", err, sizeof(err)), 0);
        x = (amqp_rpc_reply_t) { .reply_type = AMQP_RESPONSE_LIBRARY_EXCEPTION, .library_error = AMQP_STATUS_TIMEOUT };
        ASSERT_EQ(amqpx_rpc_check(x, "queue.declare", err, sizeof(err)), -ETIMEDOUT);
        ASSERT_CONTAINS(err, "RabbitMQ queue.declare:");
        x.library_error = AMQP_STATUS_SOCKET_ERROR;
        ASSERT_EQ(amqpx_rpc_check(x, "basic.qos", err, sizeof(err)), -ECONNRESET);
        amqp_channel_close_t cl = { .reply_code = AMQP_ACCESS_REFUSED, .reply_text = amqp_cstring_bytes("ACCESS_REFUSED - no") };
        x = (amqp_rpc_reply_t) { .reply_type = AMQP_RESPONSE_SERVER_EXCEPTION,
                                 .reply = { .id = AMQP_CHANNEL_CLOSE_METHOD, .decoded = &cl } };
        ASSERT_EQ(amqpx_rpc_check(x, "exchange.declare", err, sizeof(err)), -EACCES);
        ASSERT_CONTAINS(err, "403 ACCESS_REFUSED - no");
        cl.reply_code = AMQP_NOT_FOUND;
        ASSERT_EQ(amqpx_rpc_check(x, "exchange.declare", err, sizeof(err)), -EPROTO);
        x = (amqp_rpc_reply_t) { .reply_type = AMQP_RESPONSE_NONE };
        ASSERT_EQ(amqpx_rpc_check(x, "channel.open", err, sizeof(err)), -EPROTO);
        ASSERT_CONTAINS(err, "no reply");
}

TEST(connect_refused_names_the_address_not_the_password) {
        struct amqpx_url u;
        char err[256] = "";
        ASSERT_OK(amqpx_url_parse("amqp://guest:hunter2@127.0.0.1:1/", &u, err, sizeof(err)));
        amqp_connection_state_t conn = NULL;
        ASSERT_EQ(amqpx_connect(&u, "test", 0, 0, 2000, &conn, err, sizeof(err)), -ECONNREFUSED);
        ASSERT_NULL(conn);
        ASSERT_CONTAINS(err, "127.0.0.1:1");
        ASSERT_FALSE(strstr(err, "hunter2"));
        amqpx_url_done(&u);
}
