/* amqp.c — shared RabbitMQ plumbing (see amqp.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "amqp.h"
#include "cleanup.h"
#include "log.h"
#include "strutil.h"

static struct timeval ms_to_tv(long ms) {
        if (ms < 0)
                ms = 0;
        return (struct timeval) { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

#define URL_SHAPE "RabbitMQ URL must look like amqp://user:pass@host:port/vhost"

int amqpx_url_parse(const char *url, struct amqpx_url *ret, struct err *err) {
        if (!url || (!startswith(url, "amqp://") && !startswith(url, "amqps://")))
                return err_set(err, -EINVAL, URL_SHAPE);
        _cleanup_free_ char *buf = xstrdup(url);
        struct amqp_connection_info ci;
        amqp_default_connection_info(&ci);
        if (amqp_parse_url(buf, &ci) != AMQP_STATUS_OK || !ci.host || !*ci.host || ci.port <= 0 || ci.port > 65535)
                return err_set(err, -EINVAL, URL_SHAPE);
        if (ci.ssl)
                return err_set(err, -EOPNOTSUPP, "amqps:// is not supported; use amqp:// on a trusted network");
        *ret = (struct amqpx_url) {
                .host = ci.host,
                .user = ci.user,
                .password = ci.password,
                /* "amqp://host/" parses to an empty vhost; the broker's default is "/". */
                .vhost = ci.vhost && *ci.vhost ? ci.vhost : "/",
                .port = ci.port,
        };
        ret->buf = TAKE_PTR(buf);
        return 0;
}

void amqpx_url_done(struct amqpx_url *u) {
        free(u->buf);
        *u = (struct amqpx_url) { 0 };
}

int amqpx_rpc_check(amqp_rpc_reply_t x, const char *what, struct err *err) {
        switch (x.reply_type) {
        case AMQP_RESPONSE_NORMAL:
                return 0;
        case AMQP_RESPONSE_NONE:
                return err_set(err, -EPROTO, "RabbitMQ %s: no reply", what);
        case AMQP_RESPONSE_LIBRARY_EXCEPTION:
                return err_set(err, x.library_error == AMQP_STATUS_TIMEOUT ? -ETIMEDOUT : -ECONNRESET, "RabbitMQ %s: %s",
                               what, amqp_error_string2(x.library_error));
        case AMQP_RESPONSE_SERVER_EXCEPTION:
                if (x.reply.id == AMQP_CONNECTION_CLOSE_METHOD || x.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
                        /* Same layout for the fields we print. */
                        const amqp_connection_close_t *m = x.reply.decoded;
                        return err_set(err,
                                       m->reply_code == AMQP_ACCESS_REFUSED || m->reply_code == AMQP_NOT_ALLOWED ? -EACCES
                                                                                                               : -EPROTO,
                                       "RabbitMQ %s: %u %.*s", what, m->reply_code, (int) m->reply_text.len,
                                       (const char *) m->reply_text.bytes);
                }
                return err_set(err, -EPROTO, "RabbitMQ %s: the broker refused (method 0x%08x)", what, x.reply.id);
        }
        return err_set(err, -EPROTO, "RabbitMQ %s: unexpected reply", what);
}

int amqpx_rpc_ok(amqp_connection_state_t conn, const char *what, int prio, const char *prefix) {
        struct err why = { 0 };
        int r = amqpx_rpc_check(amqp_get_rpc_reply(conn), what, &why);
        if (r < 0)
                log_full_errno(prio, 0, "%s%s", prefix, why.message);
        return r;
}

static int status_to_errno(int status) {
        switch (status) {
        case AMQP_STATUS_TIMEOUT:
                return -ETIMEDOUT;
        case AMQP_STATUS_HOSTNAME_RESOLUTION_FAILED:
                return -EHOSTUNREACH;
        case AMQP_STATUS_NO_MEMORY:
                oom();
        default:
                return -ECONNREFUSED;
        }
}

int amqpx_connect(const struct amqpx_url *u, const char *conn_name, int frame_max, int heartbeat_s, long timeout_ms,
                  amqp_connection_state_t *ret, struct err *err) {
        int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 1);
        struct timeval tv = ms_to_tv(timeout_ms);
        int r, s;

        amqp_connection_state_t conn = xnonnull(amqp_new_connection());
        amqp_socket_t *sock = xnonnull(amqp_tcp_socket_new(conn));
        s = amqp_socket_open_noblock(sock, u->host, u->port, &tv);
        if (s != AMQP_STATUS_OK) {
                r = err_set(err, status_to_errno(s), "cannot reach RabbitMQ at %s:%d: %s", u->host, u->port,
                            amqp_error_string2(s));
                goto fail;
        }
        long left = (long) (deadline - mono_ms());
        tv = ms_to_tv(left > 0 ? left : 1);
        amqp_set_handshake_timeout(conn, &tv);
        /* consumer_cancel_notify: without it RabbitMQ drops a consumer whose queue is deleted
         * without a word, and we would wait on it forever; with it a basic.cancel arrives and
         * the consumer reconnects and declares its queue again. (rabbitmq-c merges these
         * capabilities with its own.) */
        amqp_table_entry_t cap = { .key = amqp_cstring_bytes("consumer_cancel_notify"),
                                   .value = { .kind = AMQP_FIELD_KIND_BOOLEAN, .value.boolean = 1 } };
        amqp_table_entry_t prop[] = {
                { .key = amqp_cstring_bytes("connection_name"),
                  .value = { .kind = AMQP_FIELD_KIND_UTF8,
                             .value.bytes = amqp_cstring_bytes(conn_name ? conn_name : "paddock") } },
                { .key = amqp_cstring_bytes("capabilities"),
                  .value = { .kind = AMQP_FIELD_KIND_TABLE, .value.table = { .num_entries = 1, .entries = &cap } } },
        };
        amqp_table_t props = { .num_entries = 2, .entries = prop };
        amqp_rpc_reply_t lr = amqp_login_with_properties(conn, u->vhost, 0, frame_max > 0 ? frame_max : AMQP_DEFAULT_FRAME_SIZE,
                                                         heartbeat_s, &props, AMQP_SASL_METHOD_PLAIN, u->user,
                                                         u->password);
        if (lr.reply_type != AMQP_RESPONSE_NORMAL) {
                struct err why = { 0 };
                r = amqpx_rpc_check(lr, "login", &why);
                if (lr.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                    (lr.library_error == AMQP_STATUS_CONNECTION_CLOSED || lr.library_error == AMQP_STATUS_SOCKET_CLOSED))
                        r = -EACCES;    /* the broker hangs up on a bad login unless told to explain */
                err_set(err, r, "RabbitMQ at %s:%d refused the login for user %s on vhost %s (%s)", u->host,
                        u->port, u->user, u->vhost, why.message);
                goto fail;
        }
        *ret = conn;
        return 0;
fail:
        amqp_destroy_connection(conn);
        return r;
}

int amqpx_channel_open_exchange(amqp_connection_state_t conn, amqp_channel_t ch, const char *exchange, struct err *err) {
        int r;
        amqp_channel_open(conn, ch);
        if ((r = amqpx_rpc_check(amqp_get_rpc_reply(conn), "channel.open", err)) < 0)
                return r;
        amqp_exchange_declare(conn, ch, amqp_cstring_bytes(exchange), amqp_cstring_bytes("direct"), 0, 1, 0, 0,
                              amqp_empty_table);
        return amqpx_rpc_check(amqp_get_rpc_reply(conn), "exchange.declare", err);
}

int amqpx_wait_frame_until(amqp_connection_state_t conn, int64_t deadline, amqp_frame_t *ret) {
        long left = (long) (deadline - mono_ms());
        if (left <= 0)
                return -ETIMEDOUT;
        struct timeval tv = ms_to_tv(left);
        int s = amqp_simple_wait_frame_noblock(conn, ret, &tv);
        return s == AMQP_STATUS_OK ? 0 : s == AMQP_STATUS_TIMEOUT ? -ETIMEDOUT : -ECONNRESET;
}

static void copy_short(char dst[256], amqp_bytes_t b) {
        size_t n = b.len < 255 ? b.len : 255;
        memcpy(dst, b.bytes, n);
        dst[n] = 0;
}

int amqpx_read_content(amqp_connection_state_t conn, amqp_channel_t ch, int64_t deadline, uint64_t max,
                       struct amqpx_content *c, char **ret_body) {
        _cleanup_free_ char *body = NULL;
        uint64_t got = 0;
        bool have_header = false;
        for (;;) {
                amqp_frame_t f;
                int r = amqpx_wait_frame_until(conn, deadline, &f);
                if (r < 0)
                        return r;
                if (f.frame_type == AMQP_FRAME_METHOD)
                        return -ECONNRESET;     /* a close, or a broker out of protocol */
                if (f.channel != ch)
                        continue;
                if (f.frame_type == AMQP_FRAME_HEADER && !have_header) {
                        const amqp_basic_properties_t *p = f.payload.properties.decoded;
                        have_header = true;
                        c->size = f.payload.properties.body_size;
                        if (p && (p->_flags & AMQP_BASIC_REPLY_TO_FLAG))
                                copy_short(c->reply_to, p->reply_to);
                        if (p && (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG)) {
                                copy_short(c->correlation_id, p->correlation_id);
                                c->has_corr = true;
                        }
                        if (p && (p->_flags & AMQP_BASIC_APP_ID_FLAG)) {
                                copy_short(c->app_id, p->app_id);
                                c->has_app_id = true;
                        }
                        if (p && (p->_flags & AMQP_BASIC_USER_ID_FLAG)) {
                                copy_short(c->user_id, p->user_id);
                                c->has_user_id = true;
                        }
                        if (c->size <= max)
                                body = xmalloc(c->size + 1);
                } else if (f.frame_type == AMQP_FRAME_BODY && have_header) {
                        amqp_bytes_t b = f.payload.body_fragment;
                        if (b.len > c->size - got)
                                return -ECONNRESET;     /* more body than announced */
                        if (body)
                                memcpy(body + got, b.bytes, b.len);
                        got += b.len;
                }
                amqp_maybe_release_buffers_on_channel(conn, ch);
                if (have_header && got == c->size) {
                        if (body)
                                body[got] = 0;
                        *ret_body = TAKE_PTR(body);
                        return 0;
                }
        }
}

int amqpx_wait_confirm(amqp_connection_state_t conn, uint64_t tag, int64_t deadline) {
        for (;;) {
                amqp_frame_t f;
                int r = amqpx_wait_frame_until(conn, deadline, &f);
                if (r < 0)
                        return r;
                if (f.frame_type != AMQP_FRAME_METHOD)
                        continue;
                switch (f.payload.method.id) {
                case AMQP_BASIC_ACK_METHOD: {
                        const amqp_basic_ack_t *a = f.payload.method.decoded;
                        if (a->delivery_tag == tag || (a->multiple && a->delivery_tag >= tag))
                                return 0;
                        break;
                }
                case AMQP_BASIC_NACK_METHOD:
                        return -EIO;
                case AMQP_BASIC_RETURN_METHOD:
                        return -ENXIO;
                case AMQP_CHANNEL_CLOSE_METHOD:
                case AMQP_CONNECTION_CLOSE_METHOD:
                        return -ECONNRESET;
                default:
                        break;
                }
        }
}

amqp_basic_properties_t amqpx_json_props(uint8_t delivery_mode, const char *app_id, const char *user_id) {
        amqp_basic_properties_t p = { 0 };
        p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
        p.content_type = amqp_cstring_bytes("application/json");
        p.delivery_mode = delivery_mode;
        if (app_id) {
                p._flags |= AMQP_BASIC_APP_ID_FLAG;
                p.app_id = amqp_cstring_bytes(app_id);
        }
        if (user_id) {
                p._flags |= AMQP_BASIC_USER_ID_FLAG;
                p.user_id = amqp_cstring_bytes(user_id);
        }
        return p;
}

int amqpx_consume_wait(amqp_connection_state_t conn, struct timeval *tv, amqp_frame_t *ret) {
        amqp_maybe_release_buffers(conn);
        int s = amqp_simple_wait_frame_noblock(conn, ret, tv);
        if (s == AMQP_STATUS_TIMEOUT)
                return 0;
        if (s != AMQP_STATUS_OK)
                return -ECONNRESET;
        if (ret->frame_type != AMQP_FRAME_METHOD)
                return 0;
        switch (ret->payload.method.id) {
        case AMQP_CHANNEL_CLOSE_METHOD:
        case AMQP_CONNECTION_CLOSE_METHOD:
        case AMQP_BASIC_CANCEL_METHOD:
                return -ECONNRESET;
        default:
                return 1;
        }
}

int amqpx_next_delivery(amqp_connection_state_t conn, amqp_channel_t ch, long timeout_ms, uint64_t max,
                        struct amqpx_delivery *d, char **ret_body) {
        struct timeval tv = ms_to_tv(timeout_ms);
        amqp_frame_t f;
        int r = amqpx_consume_wait(conn, &tv, &f);
        if (r <= 0)
                return r;
        if (f.channel != ch || f.payload.method.id != AMQP_BASIC_DELIVER_METHOD)
                return 0;
        const amqp_basic_deliver_t *dm = f.payload.method.decoded;
        *d = (struct amqpx_delivery) { .tag = dm->delivery_tag, .redelivered = dm->redelivered };
        r = amqpx_read_content(conn, ch, mono_ms() + AMQPX_CONTENT_TIMEOUT_MS, max, &d->c, ret_body);
        return r < 0 ? r : 1;
}

bool amqpx_login_is(const char *tmpl, const char *node, const char *user_id) {
        if (!tmpl || !*tmpl)
                return true;
        if (!user_id || !node)
                return false;
        struct strbuf want = STRBUF_INIT(1024);
        for (const char *p = tmpl; *p;) {
                const char *ph = strstr(p, "{node}");
                size_t n = ph ? (size_t) (ph - p) : strlen(p);
                strbuf_append(&want, p, n);
                if (!ph)
                        break;
                strbuf_append(&want, node, strlen(node));
                p = ph + strlen("{node}");
        }
        bool ok = !want.truncated && want.buf && !strcmp(want.buf, user_id);
        strbuf_done(&want);
        return ok;
}
