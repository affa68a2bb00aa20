/* agent.c — the node agent's AMQP side: one exclusive queue per node, bound to the
 * direct exchange with the node ID as routing key, so a message for a node whose
 * agent is gone comes back to the publisher at once (mandatory + no route).
 *
 * Every message is a JSON object {"type": ..., ...}; the reply goes to reply_to
 * with the same correlation_id. Handlers must be idempotent (redeliveries).
 * Today the agent answers "ping" and refuses every other type with ok:false,
 * which a fail-closed publisher treats as a failure: egress and snapshot
 * handlers are the next layer.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "cleanup.h"
#include "conf.h"
#include "json.h"
#include "log.h"
#include "egress.h"
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"

#define MAX_MESSAGE (1024 * 1024)

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
        (void) sig;
        stop_requested = 1;
}

int agent_config_load(const char *path, struct agent_config *ret, char *err, size_t errlen) {
        struct conf *cf = NULL;
        const char *v;
        int r;
        memset(ret, 0, sizeof(*ret));
        if ((r = conf_parse_file(path, &cf, err, errlen)) < 0)
                return r;
#define STR(sec, key, def, max, field)                                                         \
        do {                                                                                   \
                if ((r = conf_get_string(cf, sec, NULL, key, def, max, &v, err, errlen)) < 0) \
                        goto out;                                                              \
                ret->field = v ? xstrdup(v) : NULL;                                            \
        } while (0)
        STR("agent", "node_id", NULL, 128, node_id);
        STR("agent", "log_level", "info", 16, log_level);
        STR("amqp", "url", "amqp://guest:guest@127.0.0.1:5672", 1024, amqp_url);
        STR("amqp", "exchange", "paddock.nodes", 128, exchange);
        STR("egress", "table", "paddock", 64, egress_table);
        STR("egress", "dns_resolver", NULL, 16, egress_dns);
#undef STR
        if ((r = conf_get_int(cf, "amqp", NULL, "prefetch", 8, 1, 1000, &ret->prefetch, err, errlen)) < 0)
                goto out;
        if ((r = conf_get_bool(cf, "egress", NULL, "enable", false, &ret->egress_enabled, err, errlen)) < 0)
                goto out;
        if ((r = conf_get_list(cf, "egress", NULL, "bridges", 64, 15, &ret->egress_bridges, err, errlen)) < 0 ||
            (r = conf_get_list(cf, "egress", NULL, "deny", 1024, 18, &ret->egress_deny, err, errlen)) < 0 ||
            (r = conf_get_int(cf, "egress", NULL, "priority", -10, -400, 400, &ret->egress_priority, err, errlen)) < 0)
                goto out;
        if (ret->egress_dns && !*ret->egress_dns) {
                free(ret->egress_dns);
                ret->egress_dns = NULL;
        }
        if (ret->egress_enabled && !ret->egress_bridges) {
                snprintf(err, errlen, "%s: [egress] bridges is required when enable = true", path);
                r = -EINVAL;
                goto out;
        }
        if ((r = conf_check_unused(cf, err, errlen)) < 0)
                goto out;
        if (!ret->node_id || !*ret->node_id) {
                snprintf(err, errlen, "%s: [agent] node_id is required", path);
                r = -EINVAL;
                goto out;
        }
        for (const char *p = ret->node_id; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                      *p == '_' || *p == '.')) {
                        snprintf(err, errlen, "%s: [agent] node_id may only hold letters, digits, '-', '_' and '.'", path);
                        r = -EINVAL;
                        goto out;
                }
        if (log_level_from_string(ret->log_level) < 0) {
                snprintf(err, errlen, "%s: [agent] log_level must be debug, info, notice, warning or error", path);
                r = -EINVAL;
                goto out;
        }
        {
                _cleanup_free_ char *u = xstrdup(ret->amqp_url);
                struct amqp_connection_info ci;
                if (amqp_parse_url(u, &ci) != AMQP_STATUS_OK) {
                        snprintf(err, errlen, "%s: [amqp] url is not an amqp:// URL", path);
                        r = -EINVAL;
                        goto out;
                }
        }
        r = 0;
out:
        conf_free(cf);
        if (r < 0)
                agent_config_done(ret);
        return r;
}

void agent_config_done(struct agent_config *c) {
        free(c->egress_table);
        free(c->egress_dns);
        strv_free(c->egress_bridges);
        strv_free(c->egress_deny);
        free(c->node_id);
        free(c->log_level);
        free(c->amqp_url);
        free(c->exchange);
        memset(c, 0, sizeof(*c));
}

static int rpc_ok(amqp_connection_state_t conn, const char *what) {
        amqp_rpc_reply_t x = amqp_get_rpc_reply(conn);
        switch (x.reply_type) {
        case AMQP_RESPONSE_NORMAL:
                return 0;
        case AMQP_RESPONSE_NONE:
                return log_error_errno(-EPROTO, "AMQP %s: missing reply", what);
        case AMQP_RESPONSE_LIBRARY_EXCEPTION:
                return log_error_errno(-ECONNRESET, "AMQP %s: %s", what, amqp_error_string2(x.library_error));
        case AMQP_RESPONSE_SERVER_EXCEPTION:
                return log_error_errno(-EPROTO, "AMQP %s: the broker refused (method 0x%08x)", what, x.reply.id);
        }
        return -EPROTO;
}

static amqp_connection_state_t connect_broker(const struct agent_config *cfg, amqp_bytes_t *ret_queue) {
        _cleanup_free_ char *u = xstrdup(cfg->amqp_url);
        _cleanup_free_ char *qname = xasprintf("nodeagent.%s", cfg->node_id);
        struct amqp_connection_info ci;
        amqp_connection_state_t conn = NULL;
        amqp_socket_t *sock;
        struct timeval tv = { .tv_sec = 10 };

        if (amqp_parse_url(u, &ci) != AMQP_STATUS_OK)
                return NULL;
        conn = amqp_new_connection();
        sock = amqp_tcp_socket_new(conn);
        if (!sock || amqp_socket_open_noblock(sock, ci.host, ci.port, &tv) != AMQP_STATUS_OK) {
                log_warning("Cannot reach RabbitMQ at %s:%d; retrying", ci.host, ci.port);
                goto fail;
        }
        /* "amqp://host/" parses to an empty vhost; the broker's default is "/". */
        const char *vhost = ci.vhost && *ci.vhost ? ci.vhost : "/";
        amqp_rpc_reply_t lr = amqp_login(conn, vhost, 0, 131072, 30, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
        if (lr.reply_type != AMQP_RESPONSE_NORMAL) {
                log_error("RabbitMQ refused the login for user %s on vhost %s", ci.user, vhost);
                goto fail;
        }
        amqp_channel_open(conn, 1);
        if (rpc_ok(conn, "channel.open") < 0)
                goto fail;
        amqp_exchange_declare(conn, 1, amqp_cstring_bytes(cfg->exchange), amqp_cstring_bytes("direct"), 0, 1, 0, 0,
                              amqp_empty_table);
        if (rpc_ok(conn, "exchange.declare") < 0)
                goto fail;
        /* Exclusive + auto-delete: the queue dies with this connection, so publishers with
         * mandatory=1 get basic.return immediately when this agent is gone. */
        amqp_queue_declare_ok_t *q =
                amqp_queue_declare(conn, 1, amqp_cstring_bytes(qname), 0, 0, 1, 1, amqp_empty_table);
        if (rpc_ok(conn, "queue.declare") < 0 || !q)
                goto fail;
        *ret_queue = amqp_bytes_malloc_dup(q->queue);
        amqp_queue_bind(conn, 1, *ret_queue, amqp_cstring_bytes(cfg->exchange), amqp_cstring_bytes(cfg->node_id),
                        amqp_empty_table);
        if (rpc_ok(conn, "queue.bind") < 0)
                goto fail_q;
        amqp_basic_qos(conn, 1, 0, (uint16_t) cfg->prefetch, 0);
        if (rpc_ok(conn, "basic.qos") < 0)
                goto fail_q;
        amqp_basic_consume(conn, 1, *ret_queue, amqp_empty_bytes, 0, 0, 1, amqp_empty_table);
        if (rpc_ok(conn, "basic.consume") < 0)
                goto fail_q;
        return conn;
fail_q:
        amqp_bytes_free(*ret_queue);
        *ret_queue = amqp_empty_bytes;
fail:
        amqp_destroy_connection(conn);
        return NULL;
}

int agent_egress_init(const struct agent_config *cfg, char *err, size_t errlen) {
        struct egress_config ec = {
                .table = cfg->egress_table,
                .bridges = (const char *const *) cfg->egress_bridges,
                .deny_cidrs = (const char *const *) cfg->egress_deny,
                .dns_resolver = cfg->egress_dns,
                .priority = (int) cfg->egress_priority,
        };
        return egress_init(&ec, err, errlen);
}

/* Resolves hostname entries (IPv4 only) and hands the policy to the firewall. A hostname
 * that does not resolve fails the whole apply: the caller fails closed. */
static int apply_policy(const struct pj_node_msg *m, char *err, size_t errlen) {
        struct pj_allow_entry *allow = xnew0(struct pj_allow_entry, EGRESS_MAX_ALLOW);
        size_t n = 0;
        int r = 0;
        for (size_t i = 0; i < m->egress.n_allow && r == 0; i++) {
                struct pj_allow_entry e;
                char norm[PJ_ALLOW_NORM_MAX], why[256];
                if (pj_allow_entry_parse(m->egress.allow[i], &e, norm, sizeof(norm), why, sizeof(why)) < 0) {
                        snprintf(err, errlen, "allow entry %s %s", m->egress.allow[i], why);
                        r = -EINVAL;
                        break;
                }
                if (e.kind != PJ_ALLOW_HOSTNAME) {
                        allow[n++] = e;
                        continue;
                }
                struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
                int g = getaddrinfo(e.host, NULL, &hints, &res);
                if (g != 0) {
                        snprintf(err, errlen, "cannot resolve %s: %s", e.host, gai_strerror(g));
                        r = -EHOSTUNREACH;
                        break;
                }
                for (struct addrinfo *a = res; a && n < EGRESS_MAX_ALLOW; a = a->ai_next) {
                        struct pj_allow_entry ip = { .kind = PJ_ALLOW_IPV4, .prefix = 32 };
                        ip.addr = ntohl(((struct sockaddr_in *) a->ai_addr)->sin_addr.s_addr);
                        allow[n++] = ip;
                }
                freeaddrinfo(res);
        }
        if (r == 0) {
                struct egress_policy p = {
                        .sandbox_id = m->sandbox_id, .ip = m->ip, .mode = m->egress.mode, .allow = allow, .n_allow = n,
                };
                r = egress_apply(&p, err, errlen);
        }
        free(allow);
        return r;
}

/* Builds the reply for one message. Returns the JSON text (xmalloc'd). */
char *agent_handle(const struct agent_config *cfg, const char *body, size_t len) {
        struct pj_node_msg m = { 0 };
        struct pj_error pe = { 0 };
        struct pj_node_reply out = { .ok = false };
        char err[512] = "";
        snprintf(out.node_id, sizeof(out.node_id), "%s", cfg->node_id);
        if (pj_node_msg_parse(body, len, &m, &pe) < 0) {
                snprintf(out.error, sizeof(out.error), "%s", pe.message);
                return pj_node_reply_format(&out);
        }
        snprintf(out.type, sizeof(out.type), "%s", pj_node_type_to_string(m.type));
        int r = 0;
        switch (m.type) {
        case PJ_NODE_PING:
                break;
        case PJ_NODE_EGRESS_APPLY:
        case PJ_NODE_EGRESS_REMOVE:
                log_ctx_set("SANDBOX_ID", m.sandbox_id);
                if (!cfg->egress_enabled) {
                        snprintf(err, sizeof(err), "egress enforcement is not enabled on node %s ([egress] enable)", cfg->node_id);
                        r = -ENOTSUP;
                } else if (m.type == PJ_NODE_EGRESS_APPLY)
                        r = apply_policy(&m, err, sizeof(err));
                else
                        r = egress_remove(m.sandbox_id, m.ip, err, sizeof(err));
                if (r < 0)
                        log_warning("%s failed: %s", out.type, err);
                else
                        log_info("%s done", out.type);
                break;
        }
        out.ok = r >= 0;
        if (r < 0)
                snprintf(out.error, sizeof(out.error), "%s", err[0] ? err : strerror(-r));
        pj_node_msg_done(&m);
        return pj_node_reply_format(&out);
}

static void reply(amqp_connection_state_t conn, const amqp_envelope_t *env, const char *text) {
        const amqp_basic_properties_t *in = &env->message.properties;
        if (!(in->_flags & AMQP_BASIC_REPLY_TO_FLAG) || in->reply_to.len == 0)
                return;
        amqp_basic_properties_t p = { 0 };
        p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
        p.content_type = amqp_cstring_bytes("application/json");
        p.delivery_mode = 1;
        if (in->_flags & AMQP_BASIC_CORRELATION_ID_FLAG) {
                p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
                p.correlation_id = in->correlation_id;
        }
        amqp_basic_publish(conn, 1, amqp_empty_bytes, in->reply_to, 0, 0, &p, amqp_cstring_bytes(text));
}

static int consume_loop(const struct agent_config *cfg, amqp_connection_state_t conn) {
        while (!stop_requested) {
                amqp_envelope_t env;
                struct timeval tv = { .tv_sec = 1 };
                amqp_maybe_release_buffers(conn);
                amqp_rpc_reply_t res = amqp_consume_message(conn, &env, &tv, 0);
                if (res.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && res.library_error == AMQP_STATUS_TIMEOUT) {
                        sd_notify(0, "WATCHDOG=1");
                        continue;
                }
                if (res.reply_type != AMQP_RESPONSE_NORMAL) {
                        if (res.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                            res.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
                                amqp_frame_t f;
                                if (amqp_simple_wait_frame(conn, &f) != AMQP_STATUS_OK)
                                        return -ECONNRESET;
                                if (f.frame_type == AMQP_FRAME_METHOD &&
                                    (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                                     f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD))
                                        return -ECONNRESET;
                                continue;
                        }
                        return -ECONNRESET;
                }
                log_ctx_reset();
                log_ctx_set("NODE_ID", cfg->node_id);
                _cleanup_free_ char *out = NULL;
                if (env.message.body.len > MAX_MESSAGE) {
                        log_warning("dropping a %zu byte message (limit %d)", env.message.body.len, MAX_MESSAGE);
                        out = xstrdup("{\"ok\":false,\"error\":\"message too large\"}");
                } else
                        out = agent_handle(cfg, env.message.body.bytes, env.message.body.len);
                reply(conn, &env, out);
                amqp_basic_ack(conn, 1, env.delivery_tag, 0);
                amqp_destroy_envelope(&env);
        }
        return 0;
}

int agent_run(const struct agent_config *cfg) {
        struct sigaction sa = { .sa_handler = on_signal };
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        int backoff_ms = 200;
        bool notified = false;
        log_ctx_set("NODE_ID", cfg->node_id);
        if (cfg->egress_enabled) {
                char err[512] = "";
                /* Fail closed from the first moment: the table drops bridge traffic that has no
                 * confirmed policy before we accept any message. */
                int r = agent_egress_init(cfg, err, sizeof(err));
                if (r < 0)
                        return log_error_errno(r, "Cannot program the egress firewall: %s", err);
                log_info("egress firewall ready (table inet %s)", cfg->egress_table);
        }
        while (!stop_requested) {
                amqp_bytes_t q = amqp_empty_bytes;
                amqp_connection_state_t conn = connect_broker(cfg, &q);
                if (!conn) {
                        usleep((useconds_t) backoff_ms * 1000);
                        backoff_ms = backoff_ms * 2 > 10000 ? 10000 : backoff_ms * 2;
                        continue;
                }
                backoff_ms = 200;
                log_info("consuming node messages on queue %.*s (exchange %s, routing key %s)", (int) q.len,
                         (const char *) q.bytes, cfg->exchange, cfg->node_id);
                if (!notified) {
                        sd_notify(0, "READY=1\nSTATUS=consuming");
                        notified = true;
                }
                int r = consume_loop(cfg, conn);
                if (r < 0)
                        log_warning("lost the RabbitMQ connection; reconnecting");
                amqp_bytes_free(q);
                amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
                amqp_destroy_connection(conn);
        }
        sd_notify(0, "STOPPING=1");
        log_info("nodeagent stopped");
        return 0;
}
