/* nodebus.c — fail-closed request/reply to nodeagents over RabbitMQ (rabbitmq-c 0.11).
 *
 * rabbitmq-c connections are not thread-safe and service heartbeats only inside
 * its calls, so every call into the library happens under c->lock. Requests are
 * pipelined: each publish gets the next confirm delivery tag and a fresh id, and
 * parks a struct pending on c->pending. One waiting thread at a time is the
 * "pumper": it reads frames and settles whichever pending they belong to (acks and
 * nacks by delivery tag, basic.return by message_id, replies by correlation_id),
 * then hands the job to another waiter when its own request is settled. While it
 * waits for the socket it polls WITHOUT the lock, so other threads can publish;
 * the connection is never torn down while someone is pumping, which keeps the fd
 * it polls valid.
 *
 * We assemble message content ourselves instead of amqp_read_message() /
 * amqp_consume_message(): those wait for the header and body frames with no
 * deadline and read any body size into memory, and we promise never to block
 * beyond the caller's deadline and never to hold more than AMQP_CLIENT_MAX_BODY.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "amqp.h"
#include "nodebus.h"
#include "pj_node.h"
#include "cleanup.h"
#include "json.h"
#include "log.h"
#include "strutil.h"

#define CH 1
#define CLOSE_TIMEOUT_MS 2000L
/* Longest stretch the pumper spends in poll() without calling into rabbitmq-c,
 * which is where heartbeats are sent. */
#define POLL_SLICE_MS 1000L
#define ROUTING_KEY_MAX 255

struct pending {
        struct pending *next;
        char id[HEXID_LEN + 1];
        const char *node_id;    /* the caller's, valid while linked */
        uint64_t tag;           /* publisher-confirm delivery tag on the current channel */
        bool acked, done;
        int r;
        char *reply;
        char err[512];
};

enum content_kind { CONTENT_NONE, CONTENT_RETURN, CONTENT_DELIVER };

struct nodebus {
        pthread_mutex_t lock;
        pthread_cond_t cond;    /* a pending settled, or the pumper role is free */
        int wakefd;             /* interrupts the pumper's poll() */

        struct amqpx_url url;
        char *exchange;
        char *node_login;       /* [amqp] node_login: who may answer for a node ("" = unchecked) */
        char conn_name[64];

        amqp_connection_state_t conn;   /* NULL: connect at the next request */
        amqp_bytes_t reply_q;
        bool broken;            /* conn is unusable: replace it at the next request */
        bool need_reopen;       /* the broker closed our channel: reopen before publishing */
        bool pumping;
        uint64_t next_tag;
        struct pending *pending;

        /* The message whose content frames are arriving (a reply or a basic.return). */
        struct {
                enum content_kind kind;
                char id[HEXID_LEN + 1];   /* empty: not ours or no longer wanted */
                uint16_t reply_code;      /* basic.return */
                char reply_text[128];
                uint64_t size, got;
                char *buf;                /* NULL: discard the body */
        } in;
};

static struct timeval ms_to_tv(long ms) {
        if (ms < 0)
                ms = 0;
        return (struct timeval) { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

static bool bytes_eq(amqp_bytes_t b, const char *s) {
        size_t n = strlen(s);
        return b.len == n && n > 0 && memcmp(b.bytes, s, n) == 0;
}

/* The reply's user_id is node's broker login ([amqp] node_login), or nothing is checked. */
static bool reply_login_ok(const struct nodebus *c, const amqp_basic_properties_t *pr, const char *node) {
        if (!c->node_login || !*c->node_login)
                return true;
        if (!(pr->_flags & AMQP_BASIC_USER_ID_FLAG) || pr->user_id.len == 0 || pr->user_id.len > 255)
                return false;
        char user[256];
        memcpy(user, pr->user_id.bytes, pr->user_id.len);
        user[pr->user_id.len] = 0;
        return amqpx_login_is(c->node_login, node, user);
}

static struct pending *find_pending(struct nodebus *c, amqp_bytes_t id) {
        for (struct pending *p = c->pending; p; p = p->next)
                if (bytes_eq(id, p->id))
                        return p;
        return NULL;
}

static void settle(struct nodebus *c, struct pending *p, int r, const char *fmt, ...) _printf_(4, 5);
static void settle(struct nodebus *c, struct pending *p, int r, const char *fmt, ...) {
        if (p->done)
                return;
        p->done = true;
        p->r = r;
        if (fmt) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(p->err, sizeof(p->err), fmt, ap);
                va_end(ap);
        }
        pthread_cond_broadcast(&c->cond);
}

static void content_reset(struct nodebus *c) {
        free(c->in.buf);
        memset(&c->in, 0, sizeof(c->in));
}

static void wake_pumper(struct nodebus *c) {
        uint64_t one = 1;
        if (c->pumping && write(c->wakefd, &one, sizeof(one)) < 0)
                log_debug_errno(errno, "amqp: cannot wake the reader: %m");
}

/* Every request in flight fails with r and msg; the connection is replaced before the next publish. */
static void mark_broken(struct nodebus *c, int r, const char *msg) {
        log_debug("amqp: connection unusable: %s", msg);
        c->broken = true;
        for (struct pending *p = c->pending; p; p = p->next)
                settle(c, p, r, "%s", msg);
        content_reset(c);
        wake_pumper(c);
        pthread_cond_broadcast(&c->cond);
}

static int rpc_check(amqp_connection_state_t conn, const char *what, struct err *err) {
        return amqpx_rpc_check(amqp_get_rpc_reply(conn), what, err);
}

static void drop_connection(struct nodebus *c, bool graceful) {
        if (!c->conn)
                return;
        if (graceful && !c->broken) {
                struct timeval tv = ms_to_tv(CLOSE_TIMEOUT_MS);
                amqp_set_rpc_timeout(c->conn, &tv);
                amqp_connection_close(c->conn, AMQP_REPLY_SUCCESS);
        }
        amqp_destroy_connection(c->conn);
        c->conn = NULL;
        amqp_bytes_free(c->reply_q);
        c->reply_q = amqp_empty_bytes;
        c->broken = false;
        c->need_reopen = false;
        content_reset(c);
}

/* Channel setup shared by connect and reopen: exchange, confirms, consumer on the reply queue. */
static int setup_channel(struct nodebus *c, long deadline, struct err *err) {
        long left = deadline - (long) mono_ms();
        int r;
        if (left <= 0)
                return err_set(err, -ETIMEDOUT, "no time left to set up the RabbitMQ channel");
        /* Bounds each synchronous call; requests themselves never use an RPC. */
        struct timeval tv = ms_to_tv(left < AMQPX_CONNECT_TIMEOUT_MS ? left : AMQPX_CONNECT_TIMEOUT_MS);
        amqp_set_rpc_timeout(c->conn, &tv);
        if ((r = amqpx_channel_open_exchange(c->conn, CH, c->exchange, err)) < 0)
                return r;
        /* Server-named, exclusive, auto-delete: it dies with this connection, and also
         * when our consumer goes (a closed channel), so every channel gets a fresh one
         * and replies to requests of an earlier channel or connection go nowhere. */
        amqp_bytes_free(c->reply_q);
        c->reply_q = amqp_empty_bytes;
        amqp_queue_declare_ok_t *q = amqp_queue_declare(c->conn, CH, amqp_empty_bytes, 0, 0, 1, 1, amqp_empty_table);
        if ((r = rpc_check(c->conn, "queue.declare", err)) < 0)
                return r;
        if (!q)
                return -EPROTO;
        c->reply_q = amqp_bytes_malloc_dup(q->queue);
        amqp_confirm_select(c->conn, CH);
        if ((r = rpc_check(c->conn, "confirm.select", err)) < 0)
                return r;
        amqp_basic_consume(c->conn, CH, c->reply_q, amqp_empty_bytes, 0, 1, 1, amqp_empty_table);
        if ((r = rpc_check(c->conn, "basic.consume", err)) < 0)
                return r;
        c->next_tag = 1;
        c->need_reopen = false;
        content_reset(c);
        return 0;
}

static int client_connect(struct nodebus *c, long deadline, struct err *err) {
        long left = deadline - (long) mono_ms();
        if (left <= 0)
                return err_set(err, -ETIMEDOUT, "no time left to connect to RabbitMQ");
        int r = amqpx_connect(&c->url, c->conn_name, AMQPX_FRAME_MAX, AMQPX_HEARTBEAT_S,
                              left < AMQPX_CONNECT_TIMEOUT_MS ? left : AMQPX_CONNECT_TIMEOUT_MS, &c->conn, err);
        if (r < 0)
                return r;
        if ((r = setup_channel(c, deadline, err)) < 0)
                goto fail;
        log_debug("amqp: connected to %s:%d vhost %s, reply queue %.*s", c->url.host, c->url.port, c->url.vhost,
                  (int) c->reply_q.len, (const char *) c->reply_q.bytes);
        return 0;
fail:
        c->broken = true;
        drop_connection(c, false);
        return r;
}

static void handle_header(struct nodebus *c, const amqp_frame_t *f) {
        const amqp_basic_properties_t *pr = f->payload.properties.decoded;
        struct pending *p = NULL;
        c->in.size = f->payload.properties.body_size;
        c->in.got = 0;
        if (c->in.kind == CONTENT_RETURN) {
                /* basic.return has no delivery tag: message_id says which request it was. */
                if (pr && (pr->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
                        p = find_pending(c, pr->message_id);
                if (p)
                        settle(c, p, -ENXIO, "no agent is consuming for node %s (RabbitMQ returned the message: %u %s)",
                               p->node_id, c->in.reply_code, c->in.reply_text);
        } else {
                if (pr && (pr->_flags & AMQP_BASIC_CORRELATION_ID_FLAG))
                        p = find_pending(c, pr->correlation_id);
                if (!p || p->done)
                        log_debug("amqp: dropping a reply nobody waits for (late or foreign)");
                else if (!pr || !(pr->_flags & AMQP_BASIC_APP_ID_FLAG) || !bytes_eq(pr->app_id, p->node_id) ||
                         !reply_login_ok(c, pr, p->node_id))
                        /* Only the node we asked may answer; the request keeps waiting for it. */
                        log_debug("amqp: dropping a reply to %s that claims to come from node %.*s, not %s", p->id,
                                  pr && (pr->_flags & AMQP_BASIC_APP_ID_FLAG) ? (int) pr->app_id.len : 6,
                                  pr && (pr->_flags & AMQP_BASIC_APP_ID_FLAG) ? (const char *) pr->app_id.bytes
                                                                               : "(none)",
                                  p->node_id);
                else if (c->in.size > AMQP_CLIENT_MAX_BODY)
                        settle(c, p, -EMSGSIZE, "the agent on node %s sent a %" PRIu64 " byte reply (limit %d)",
                               p->node_id, c->in.size, AMQP_CLIENT_MAX_BODY);
                else {
                        memcpy(c->in.id, p->id, sizeof(c->in.id));
                        c->in.buf = xmalloc(c->in.size + 1);
                }
        }
}

static void content_complete(struct nodebus *c) {
        if (c->in.kind == CONTENT_DELIVER && c->in.buf) {
                struct pending *p = find_pending(c, amqp_cstring_bytes(c->in.id));
                if (p && !p->done) {
                        c->in.buf[c->in.size] = 0;
                        p->reply = TAKE_PTR(c->in.buf);
                        settle(c, p, 0, NULL);
                }
        }
        content_reset(c);
}

static void handle_confirm(struct nodebus *c, uint64_t tag, bool multiple, bool nack) {
        for (struct pending *p = c->pending; p; p = p->next) {
                if (p->done || !(p->tag == tag || (multiple && p->tag <= tag)))
                        continue;
                if (nack)
                        settle(c, p, -EIO, "RabbitMQ refused the message for node %s (basic.nack)", p->node_id);
                else
                        p->acked = true;
        }
}

static void handle_frame(struct nodebus *c, const amqp_frame_t *f) {
        char msg[300];
        if (f->frame_type == AMQP_FRAME_METHOD) {
                const amqp_method_t *m = &f->payload.method;
                if (m->id == AMQP_CONNECTION_CLOSE_METHOD) {
                        const amqp_connection_close_t *cl = m->decoded;
                        amqp_connection_close_ok_t ok = { 0 };
                        snprintf(msg, sizeof(msg), "RabbitMQ closed the connection: %u %.*s", cl->reply_code,
                                 (int) cl->reply_text.len, (const char *) cl->reply_text.bytes);
                        amqp_send_method(c->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
                        mark_broken(c, -ECONNRESET, msg);
                        return;
                }
                if (f->channel != CH)
                        return;
                switch (m->id) {
                case AMQP_BASIC_ACK_METHOD: {
                        const amqp_basic_ack_t *a = m->decoded;
                        handle_confirm(c, a->delivery_tag, a->multiple, false);
                        break;
                }
                case AMQP_BASIC_NACK_METHOD: {
                        const amqp_basic_nack_t *a = m->decoded;
                        handle_confirm(c, a->delivery_tag, a->multiple, true);
                        break;
                }
                case AMQP_BASIC_RETURN_METHOD: {
                        const amqp_basic_return_t *rt = m->decoded;
                        content_reset(c);
                        c->in.kind = CONTENT_RETURN;
                        c->in.reply_code = rt->reply_code;
                        snprintf(c->in.reply_text, sizeof(c->in.reply_text), "%.*s", (int) rt->reply_text.len,
                                 (const char *) rt->reply_text.bytes);
                        break;
                }
                case AMQP_BASIC_DELIVER_METHOD:
                        content_reset(c);
                        c->in.kind = CONTENT_DELIVER;
                        break;
                case AMQP_CHANNEL_CLOSE_METHOD: {
                        const amqp_channel_close_t *cl = m->decoded;
                        amqp_channel_close_ok_t ok = { 0 };
                        snprintf(msg, sizeof(msg), "RabbitMQ closed the channel: %u %.*s", cl->reply_code,
                                 (int) cl->reply_text.len, (const char *) cl->reply_text.bytes);
                        log_debug("amqp: %s", msg);
                        if (amqp_send_method(c->conn, CH, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) != AMQP_STATUS_OK) {
                                mark_broken(c, -ECONNRESET, msg);
                                return;
                        }
                        /* Everything published on the closed channel is lost; its confirm
                         * counter restarts with the new channel. */
                        c->need_reopen = true;
                        for (struct pending *p = c->pending; p; p = p->next)
                                settle(c, p, -EIO, "%s", msg);
                        content_reset(c);
                        break;
                }
                case AMQP_BASIC_CANCEL_METHOD:
                        /* Our reply queue went away under us (deleted by an operator). */
                        mark_broken(c, -EIO, "RabbitMQ cancelled the reply consumer");
                        break;
                default:
                        break;
                }
                return;
        }
        if (f->channel != CH || c->in.kind == CONTENT_NONE)
                return;
        if (f->frame_type == AMQP_FRAME_HEADER) {
                handle_header(c, f);
                if (c->in.size == 0)
                        content_complete(c);
        } else if (f->frame_type == AMQP_FRAME_BODY) {
                amqp_bytes_t b = f->payload.body_fragment;
                if (b.len > c->in.size - c->in.got) {
                        /* More body than the header announced: the reply is not what the agent
                         * sent, and nothing of it may reach the caller (part of the buffer was
                         * never written). */
                        struct pending *p = c->in.buf ? find_pending(c, amqp_cstring_bytes(c->in.id)) : NULL;
                        if (p)
                                settle(c, p, -EBADMSG,
                                       "the reply from node %s has more body than its header announced (%" PRIu64
                                       " bytes)", p->node_id, c->in.size);
                        content_reset(c);
                        return;
                }
                if (c->in.buf)
                        memcpy(c->in.buf + c->in.got, b.bytes, b.len);
                c->in.got += b.len;
                if (c->in.got == c->in.size)
                        content_complete(c);
        }
}

/* Reads and dispatches at most one frame, lock held. wait_ms > 0 (pumper only) waits
 * that long for the socket, WITHOUT the lock. Returns 1 when a frame was handled,
 * 0 when none was complete, -ECONNRESET when the connection broke. */
static int pump_once(struct nodebus *c, long wait_ms) {
        if (wait_ms > 0 && !amqp_frames_enqueued(c->conn) && !amqp_data_in_buffer(c->conn)) {
                struct pollfd pfd[2] = {
                        { .fd = amqp_get_sockfd(c->conn), .events = POLLIN },
                        { .fd = c->wakefd, .events = POLLIN },
                };
                pthread_mutex_unlock(&c->lock);
                int n = poll(pfd, 2, (int) wait_ms);
                pthread_mutex_lock(&c->lock);
                if (n > 0 && (pfd[1].revents & POLLIN)) {
                        uint64_t v;
                        if (read(c->wakefd, &v, sizeof(v)) < 0)
                                log_debug_errno(errno, "amqp: eventfd: %m");
                }
                if (c->broken)
                        return -ECONNRESET;
        }
        amqp_frame_t f;
        struct timeval zero = { 0, 0 };
        int s = amqp_simple_wait_frame_noblock(c->conn, &f, &zero);
        if (s == AMQP_STATUS_TIMEOUT)
                return 0;
        if (s != AMQP_STATUS_OK) {
                char msg[200];
                snprintf(msg, sizeof(msg), "lost the connection to RabbitMQ: %s", amqp_error_string2(s));
                mark_broken(c, -ECONNRESET, msg);
                return -ECONNRESET;
        }
        handle_frame(c, &f);
        if (c->broken)
                return -ECONNRESET;
        amqp_maybe_release_buffers(c->conn);
        return 1;
}

static void abs_deadline(struct timespec *ts, long deadline) {
        long left = deadline - (long) mono_ms();
        if (left < 0)
                left = 0;
        clock_gettime(CLOCK_MONOTONIC, ts);
        ts->tv_sec += left / 1000;
        ts->tv_nsec += (left % 1000) * 1000000;
        if (ts->tv_nsec >= 1000000000) {
                ts->tv_sec++;
                ts->tv_nsec -= 1000000000;
        }
}

/* Lock held. Makes c->conn ready to publish on, replacing a dead connection and
 * reopening a closed channel. Nothing of this request has been sent yet, so a
 * connection found dead here costs a reconnect, not a failed request. */
static int prepare(struct nodebus *c, long deadline, struct err *err) {
        int r;
        if (c->conn && !c->broken && !c->pumping) {
                /* Read what arrived while idle: a connection.close, EOF, missed heartbeats. */
                while ((r = pump_once(c, 0)) > 0)
                        ;
        }
        if (c->conn && c->broken) {
                while (c->pumping) {
                        if ((long) mono_ms() >= deadline)
                                return err_set(err, -ETIMEDOUT, "timed out waiting to replace the RabbitMQ connection");
                        struct timespec ts;
                        abs_deadline(&ts, deadline);
                        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
                }
                if (c->conn && c->broken) {
                        log_debug("amqp: replacing the broken connection");
                        drop_connection(c, false);
                }
        }
        if (!c->conn)
                return client_connect(c, deadline, err);
        if (c->need_reopen && !c->pumping) {
                if ((r = setup_channel(c, deadline, err)) < 0) {
                        c->broken = true;
                        drop_connection(c, false);
                        return r;
                }
                log_debug("amqp: reopened the channel");
        }
        return 0;
}

static int validate_node_id(const char *node_id) {
        size_t n = node_id ? strlen(node_id) : 0;
        if (n == 0 || n > ROUTING_KEY_MAX)
                return -EINVAL;
        for (const char *p = node_id; *p; p++)
                if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        return -EINVAL;
        return 0;
}

static void unlink_pending(struct nodebus *c, struct pending *p) {
        for (struct pending **pp = &c->pending; *pp; pp = &(*pp)->next)
                if (*pp == p) {
                        *pp = p->next;
                        return;
                }
}

int nodebus_request(struct nodebus *c, const char *node_id, const char *body, long timeout_ms, char **ret_reply,
                 struct err *err) {
        if (!c || !body || !ret_reply || timeout_ms <= 0)
                return err_set(err, -EINVAL, "invalid arguments");
        if (validate_node_id(node_id) < 0)
                return err_set(err, -EINVAL, "node id must be 1 to %d printable characters", ROUTING_KEY_MAX);
        size_t len = strlen(body);
        if (len > AMQP_CLIENT_MAX_BODY)
                return err_set(err, -EMSGSIZE, "message for node %s is %zu bytes (limit %d)", node_id, len, AMQP_CLIENT_MAX_BODY);
        long deadline = (long) mono_ms() + timeout_ms;
        struct pending p = { .node_id = node_id };
        hexid_new(p.id);
        int r;

        pthread_mutex_lock(&c->lock);
        /* A reopen needs the channel to ourselves: wait for a pumper to finish if one is reading. */
        while (c->need_reopen && c->pumping && (long) mono_ms() < deadline) {
                struct timespec ts;
                abs_deadline(&ts, deadline);
                pthread_cond_timedwait(&c->cond, &c->lock, &ts);
        }
        if ((r = prepare(c, deadline, err)) < 0)
                goto out_unlocked_err;
        if (c->need_reopen) {
                r = err_set(err, -ETIMEDOUT, "timed out waiting to reopen the RabbitMQ channel");
                goto out_unlocked_err;
        }

        char expiration[24];
        long left = deadline - (long) mono_ms();
        snprintf(expiration, sizeof(expiration), "%ld", left > 0 ? left : 1);
        amqp_basic_properties_t props = {
                ._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                          AMQP_BASIC_CORRELATION_ID_FLAG | AMQP_BASIC_REPLY_TO_FLAG | AMQP_BASIC_EXPIRATION_FLAG,
                .content_type = amqp_cstring_bytes("application/json"),
                .delivery_mode = 1, /* transient: a request outliving its deadline is worthless */
                .message_id = amqp_cstring_bytes(p.id),
                .correlation_id = amqp_cstring_bytes(p.id),
                .reply_to = c->reply_q,
                .expiration = amqp_cstring_bytes(expiration),
        };
        /* Our login as user_id (RabbitMQ checks it): the agent's proof the command is ours. */
        if (c->url.user && *c->url.user) {
                props._flags |= AMQP_BASIC_USER_ID_FLAG;
                props.user_id = amqp_cstring_bytes(c->url.user);
        }
        amqp_bytes_t b = { .len = len, .bytes = (void *) body };
        int s = amqp_basic_publish(c->conn, CH, amqp_cstring_bytes(c->exchange), amqp_cstring_bytes(node_id), 1, 0,
                                   &props, b);
        if (s != AMQP_STATUS_OK) {
                char msg[200];
                snprintf(msg, sizeof(msg), "lost the connection to RabbitMQ while publishing: %s",
                         amqp_error_string2(s));
                mark_broken(c, -ECONNRESET, msg);
                r = err_set(err, -EPIPE, "%s", msg);
                goto out_unlocked_err;
        }
        p.tag = c->next_tag++;
        p.next = c->pending;
        c->pending = &p;
        /* The publish may have read frames into rabbitmq-c's queue, which poll() cannot see. */
        wake_pumper(c);
        log_debug("amqp: published %s to node %s (tag %" PRIu64 ")", p.id, node_id, p.tag);

        while (!p.done) {
                if ((long) mono_ms() >= deadline) {
                        settle(c, &p, -ETIMEDOUT,
                               p.acked ? "no reply from the agent on node %s within %ld ms"
                                       : "RabbitMQ did not confirm the message for node %s within %ld ms",
                               node_id, timeout_ms);
                        break;
                }
                if (!c->pumping) {
                        c->pumping = true;
                        while (!p.done && !c->broken && !c->need_reopen) {
                                long l = deadline - (long) mono_ms();
                                if (l <= 0)
                                        break;
                                pump_once(c, l < POLL_SLICE_MS ? l : POLL_SLICE_MS);
                        }
                        c->pumping = false;
                        pthread_cond_broadcast(&c->cond);
                } else {
                        struct timespec ts;
                        abs_deadline(&ts, deadline);
                        pthread_cond_timedwait(&c->cond, &c->lock, &ts);
                }
        }
        unlink_pending(c, &p);
        pthread_mutex_unlock(&c->lock);
        if (p.r < 0) {
                free(p.reply);
                err_set(err, p.r, "%s", p.err);
                log_debug("amqp: request %s to node %s failed: %s", p.id, node_id, p.err);
                return p.r;
        }
        *ret_reply = p.reply;
        return 0;

out_unlocked_err:
        pthread_mutex_unlock(&c->lock);
        return r;
}

int nodebus_request_ok(struct nodebus *c, const char *node_id, const char *body, long timeout_ms,
                       struct pj_node_reply *ret_reply, struct err *err) {
        _cleanup_free_ char *text = NULL;
        struct pj_node_reply rep = { 0 };
        struct err pe = { 0 };
        int r = nodebus_request(c, node_id, body, timeout_ms, &text, err);
        if (r < 0)
                return r;
        if (pj_node_reply_parse(text, strlen(text), &rep, &pe) < 0)
                return err_set(err, -EBADMSG, "the agent on node %s sent a reply that does not parse: %s%s%s", node_id,
                               pe.field[0] ? pe.field : "", pe.field[0] ? ": " : "", pe.message);
        if (strcmp(rep.node_id, node_id) != 0) {
                err_set(err, -EBADMSG, "the reply to a request for node %s says it comes from node %s", node_id,
                        rep.node_id[0] ? rep.node_id : "(none)");
                pj_node_reply_done(&rep);
                return -EBADMSG;
        }
        if (!rep.ok) {
                err_set(err, -EREMOTEIO, "the agent on node %s refused: %s", node_id, rep.error);
                pj_node_reply_done(&rep);
                return -EREMOTEIO;
        }
        if (ret_reply)
                *ret_reply = rep;
        else
                pj_node_reply_done(&rep);
        return 0;
}

int nodebus_connect(struct nodebus *c, const char *role, amqp_channel_t ch, amqp_connection_state_t *ret, struct err *err) {
        char name[64];
        amqp_connection_state_t conn = NULL;
        snprintf(name, sizeof(name), "paddock-controld-%s", role);
        int r = amqpx_connect(&c->url, name, AMQPX_FRAME_MAX, AMQPX_HEARTBEAT_S, AMQPX_CONNECT_TIMEOUT_MS, &conn,
                              err);
        if (r < 0)
                return r;
        if ((r = amqpx_channel_open_exchange(conn, ch, c->exchange, err)) < 0) {
                amqp_destroy_connection(conn);
                return r;
        }
        *ret = conn;
        return 0;
}

const char *nodebus_exchange(const struct nodebus *c) {
        return c->exchange;
}

int nodebus_new(const char *url, const char *exchange, struct nodebus **ret, struct err *err) {
        if (!url || !exchange || !ret)
                return err_set(err, -EINVAL, "invalid arguments");
        if (!*exchange || strlen(exchange) > 255)
                return err_set(err, -EINVAL, "exchange name must be 1 to 255 characters");
        struct nodebus *c = xnew0(struct nodebus, 1);
        c->wakefd = -1;
        c->exchange = xstrdup(exchange);
        int r = amqpx_url_parse(url, &c->url, err);
        if (r < 0)
                goto fail;
        snprintf(c->conn_name, sizeof(c->conn_name), "paddock-controld[%d]", (int) getpid());
        c->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (c->wakefd < 0) {
                r = -errno;
                err_set(err, r, "eventfd: %s", strerror(-r));
                goto fail;
        }
        pthread_mutex_init(&c->lock, NULL);
        cond_init_monotonic(&c->cond);

        pthread_mutex_lock(&c->lock);
        r = client_connect(c, (long) mono_ms() + AMQPX_CONNECT_TIMEOUT_MS, err);
        pthread_mutex_unlock(&c->lock);
        if (r < 0) {
                nodebus_free(c);
                return r;
        }
        *ret = c;
        return 0;
fail:
        if (c->wakefd >= 0)
                close(c->wakefd);
        amqpx_url_done(&c->url);
        free(c->exchange);
        free(c);
        return r;
}

struct nodebus *nodebus_free(struct nodebus *c) {
        if (!c)
                return NULL;
        pthread_mutex_lock(&c->lock);
        drop_connection(c, true);
        pthread_mutex_unlock(&c->lock);
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->cond);
        close(c->wakefd);
        amqpx_url_done(&c->url);
        free(c->exchange);
        free(c->node_login);
        free(c);
        return NULL;
}

void nodebus_set_node_login(struct nodebus *c, const char *tmpl) {
        pthread_mutex_lock(&c->lock);
        free(c->node_login);
        c->node_login = tmpl && *tmpl ? xstrdup(tmpl) : NULL;
        pthread_mutex_unlock(&c->lock);
}
