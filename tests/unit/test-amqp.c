/* Unit tests for common/amqp.c: the URL parser and the RPC-reply mapping (no broker needed). */
#include <errno.h>
#include <string.h>

#include "amqp.h"
#include "cleanup.h"
#include "testlib.h"

TEST(url_defaults_and_fields) {
        /* Defaults: guest/guest, 5672, vhost "/" with or without the trailing slash; a
         * percent-encoded vhost is decoded. */
        static const struct {
                const char *url, *host;
                int port;
                const char *user, *password, *vhost;
        } cases[] = {
                { "amqp://alice:s3cret@rabbit.example:5673/prod", "rabbit.example", 5673, "alice", "s3cret", "prod" },
                { "amqp://127.0.0.1", "127.0.0.1", 5672, "guest", "guest", "/" },
                { "amqp://guest:guest@127.0.0.1:5672/", "127.0.0.1", 5672, "guest", "guest", "/" },
                { "amqp://h/%2ftenants", "h", 5672, "guest", "guest", "/tenants" },
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                struct amqpx_url u;
                struct err err = { 0 };
                ASSERT_OK(amqpx_url_parse(cases[i].url, &u, &err));
                ASSERT_STREQ(u.host, cases[i].host);
                ASSERT_EQ(u.port, cases[i].port);
                ASSERT_STREQ(u.user, cases[i].user);
                ASSERT_STREQ(u.password, cases[i].password);
                ASSERT_STREQ(u.vhost, cases[i].vhost);
                amqpx_url_done(&u);
                ASSERT_NULL(u.buf);
        }
}

static bool bytes_eq(amqp_bytes_t b, const char *s) {
        return b.len == strlen(s) && memcmp(b.bytes, s, b.len) == 0;
}

TEST(json_props_set_only_what_is_given) {
        amqp_basic_properties_t p = amqpx_json_props(2, "node-1", "agent");
        ASSERT_EQ(p._flags, AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_APP_ID_FLAG |
                                    AMQP_BASIC_USER_ID_FLAG);
        ASSERT_TRUE(bytes_eq(p.content_type, "application/json"));
        ASSERT_EQ(p.delivery_mode, 2);
        ASSERT_TRUE(bytes_eq(p.app_id, "node-1"));
        ASSERT_TRUE(bytes_eq(p.user_id, "agent"));
        p = amqpx_json_props(1, NULL, NULL);
        ASSERT_EQ(p._flags, AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG);
        ASSERT_EQ(p.delivery_mode, 1);
}

TEST(url_refusals_leave_ret_untouched) {
        static const char *const bad[] = {
                "http://127.0.0.1:5672", "amqp:/127.0.0.1", "127.0.0.1:5672", "",
                "amqp://guest:guest@127.0.0.1:notaport/", "amqp://guest:guest@127.0.0.1:99999/",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct amqpx_url u = { .port = -7 };
                struct err err = { 0 };
                ASSERT_EQ(amqpx_url_parse(bad[i], &u, &err), -EINVAL);
                ASSERT_CONTAINS(err.message, "amqp://user:pass@host:port/vhost");
                ASSERT_EQ(u.port, -7);
                ASSERT_NULL(u.buf);
        }
        struct amqpx_url u = { 0 };
        struct err err = { 0 };
        ASSERT_EQ(amqpx_url_parse(NULL, &u, &err), -EINVAL);
        ASSERT_EQ(amqpx_url_parse("amqps://guest:guest@127.0.0.1/", &u, &err), -EOPNOTSUPP);
        ASSERT_CONTAINS(err.message, "amqps:// is not supported");
        /* err may be absent. */
        ASSERT_EQ(amqpx_url_parse("nope", &u, NULL), -EINVAL);
}

TEST(rpc_reply_mapping) {
        struct err err = { 0 };
        amqp_rpc_reply_t x = { .reply_type = AMQP_RESPONSE_NORMAL };
        ASSERT_EQ(amqpx_rpc_check(x, "queue.declare", &err), 0);
        x = (amqp_rpc_reply_t) { .reply_type = AMQP_RESPONSE_LIBRARY_EXCEPTION, .library_error = AMQP_STATUS_TIMEOUT };
        ASSERT_EQ(amqpx_rpc_check(x, "queue.declare", &err), -ETIMEDOUT);
        ASSERT_CONTAINS(err.message, "RabbitMQ queue.declare:");
        x.library_error = AMQP_STATUS_SOCKET_ERROR;
        ASSERT_EQ(amqpx_rpc_check(x, "basic.qos", &err), -ECONNRESET);
        amqp_channel_close_t cl = { .reply_code = AMQP_ACCESS_REFUSED, .reply_text = amqp_cstring_bytes("ACCESS_REFUSED - no") };
        x = (amqp_rpc_reply_t) { .reply_type = AMQP_RESPONSE_SERVER_EXCEPTION,
                                 .reply = { .id = AMQP_CHANNEL_CLOSE_METHOD, .decoded = &cl } };
        ASSERT_EQ(amqpx_rpc_check(x, "exchange.declare", &err), -EACCES);
        ASSERT_CONTAINS(err.message, "403 ACCESS_REFUSED - no");
        cl.reply_code = AMQP_NOT_FOUND;
        ASSERT_EQ(amqpx_rpc_check(x, "exchange.declare", &err), -EPROTO);
        x = (amqp_rpc_reply_t) { .reply_type = AMQP_RESPONSE_NONE };
        ASSERT_EQ(amqpx_rpc_check(x, "channel.open", &err), -EPROTO);
        ASSERT_CONTAINS(err.message, "no reply");
}

TEST(connect_refused_names_the_address_not_the_password) {
        struct amqpx_url u;
        struct err err = { 0 };
        ASSERT_OK(amqpx_url_parse("amqp://guest:hunter2@127.0.0.1:1/", &u, &err));
        amqp_connection_state_t conn = NULL;
        ASSERT_EQ(amqpx_connect(&u, "test", 0, 0, 2000, &conn, &err), -ECONNREFUSED);
        ASSERT_NULL(conn);
        ASSERT_CONTAINS(err.message, "127.0.0.1:1");
        ASSERT_FALSE(strstr(err.message, "hunter2"));
        amqpx_url_done(&u);
}
