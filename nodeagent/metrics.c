/* metrics.c — the node agent's /metrics (see metrics.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "log.h"
#include "metrics.h"
#include "pj_node.h"
#include "nodeagent.h"
#include "strutil.h"

#define CHAINS_REFRESH_MS 10000

static const double apply_buckets[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 };
static const double snapshot_buckets[] = { 1, 5, 15, 30, 60, 120, 300, 600, 1800 };
#define N_APPLY_BUCKETS ELEMENTSOF(apply_buckets)
#define N_SNAPSHOT_BUCKETS ELEMENTSOF(snapshot_buckets)

struct histogram {
        uint64_t bucket[16];     /* per bucket (not cumulative); rendering accumulates */
        uint64_t count;
        double sum;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
        uint64_t applies[2], removes[2], snapshots[2];   /* [0] error, [1] ok */
        struct histogram apply, snapshot;
        bool connected, ever_connected;
        uint64_t reconnects;
        int64_t chains;
        bool chains_dirty;
        int64_t chains_at;       /* mono ms of the last count; 0 = never */
} m;

static struct MHD_Daemon *daemon_;

static void observe(struct histogram *h, const double *bounds, size_t n, double v) {
        size_t i = 0;
        while (i < n && v > bounds[i])
                i++;
        if (i < n)
                h->bucket[i]++;
        h->count++;
        h->sum += v;
}

void agent_metrics_observe_apply(double seconds, bool ok) {
        pthread_mutex_lock(&lock);
        m.applies[ok]++;
        observe(&m.apply, apply_buckets, N_APPLY_BUCKETS, seconds);
        m.chains_dirty = true;
        pthread_mutex_unlock(&lock);
}

void agent_metrics_observe_remove(bool ok) {
        pthread_mutex_lock(&lock);
        m.removes[ok]++;
        m.chains_dirty = true;
        pthread_mutex_unlock(&lock);
}

void agent_metrics_observe_snapshot(double seconds, bool ok) {
        pthread_mutex_lock(&lock);
        m.snapshots[ok]++;
        observe(&m.snapshot, snapshot_buckets, N_SNAPSHOT_BUCKETS, seconds);
        pthread_mutex_unlock(&lock);
}

void agent_metrics_amqp_connected(bool up) {
        pthread_mutex_lock(&lock);
        if (up && m.ever_connected)
                m.reconnects++;
        if (up)
                m.ever_connected = true;
        m.connected = up;
        pthread_mutex_unlock(&lock);
}

void agent_metrics_set_chains(int64_t n) {
        pthread_mutex_lock(&lock);
        m.chains = n;
        m.chains_dirty = false;
        m.chains_at = mono_ms();
        pthread_mutex_unlock(&lock);
}

void agent_metrics_tick(const struct agent_config *cfg) {
        if (!cfg->egress_enabled || privsep_child_pid(PS_CHILD_EGRESS) <= 0)
                return;
        pthread_mutex_lock(&lock);
        bool due = m.chains_dirty || !m.chains_at || mono_ms() - m.chains_at >= CHAINS_REFRESH_MS;
        pthread_mutex_unlock(&lock);
        if (!due)
                return;
        /* The first page of the chain list carries the total. */
        struct ps_egress_list req = { .hdr.type = PS_EGRESS_LIST, .offset = 0 };
        struct ps_result res;
        int r = privsep_call(PS_CHILD_EGRESS, &req, sizeof(req), &res);
        if (r < 0 || !strchr(res.msg, ':')) {
                log_debug("metrics: cannot count the egress chains: %s", r < 0 ? res.msg : "unreadable answer");
                pthread_mutex_lock(&lock);
                m.chains_at = mono_ms();   /* retried at the next interval, not every second */
                pthread_mutex_unlock(&lock);
                return;
        }
        agent_metrics_set_chains((int64_t) strtoll(res.msg, NULL, 10));
}

static void render_histogram(struct strbuf *b, const char *name, const char *help, const struct histogram *h,
                             const double *bounds, size_t n) {
        uint64_t cum = 0;
        strbuf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
        for (size_t i = 0; i < n; i++) {
                cum += h->bucket[i];
                strbuf_printf(b, "%s_bucket{le=\"%g\"} %" PRIu64 "\n", name, bounds[i], cum);
        }
        strbuf_printf(b, "%s_bucket{le=\"+Inf\"} %" PRIu64 "\n%s_sum %.6f\n%s_count %" PRIu64 "\n", name, h->count, name,
                      h->sum, name, h->count);
}

static void render_result_counter(struct strbuf *b, const char *name, const char *help, const uint64_t v[2]) {
        strbuf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s{result=\"ok\"} %" PRIu64 "\n%s{result=\"error\"} %" PRIu64 "\n",
                      name, help, name, name, v[1], name, v[0]);
}

/* The egress proxy's counters of every sandbox with rules here (its calls go to the proxy
 * process, outside the metrics lock). Labels: the sandbox and the rule's host, never a value. */
static void render_proxy(struct strbuf *b) {
        static const struct { const char *name, *help; } ms[] = {
                { "paddock_agent_proxy_requests_total", "Requests the egress proxy forwarded, per sandbox and rule host." },
                { "paddock_agent_proxy_injections_total", "Headers the egress proxy put in, per sandbox and rule host." },
                { "paddock_agent_proxy_upstream_refused_total",
                  "Upstream certificates the egress proxy refused (nothing sent), per sandbox and rule host." },
        };
        if (privsep_child_pid(PS_CHILD_PROXY) <= 0)
                return;
        _cleanup_free_ char (*ids)[EGRESS_ID_LEN + 1] = NULL;
        size_t n = proxystats_ids(&ids);
        struct strbuf rows[3];
        for (size_t k = 0; k < 3; k++)
                strbuf_init(&rows[k], 0);
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ struct pj_node_proxy_host *v = NULL;
                size_t nv = 0;
                if (agent_proxy_stats(ids[i], &v, &nv, NULL) < 0)
                        continue;
                for (size_t j = 0; j < nv; j++) {
                        uint64_t x[3] = { v[j].requests, v[j].injections, v[j].upstream_refused };
                        for (size_t k = 0; k < 3; k++)
                                strbuf_printf(&rows[k], "%s{sandbox_id=\"%s\",host=\"%s\"} %" PRIu64 "\n", ms[k].name, ids[i],
                                              v[j].host, x[k]);
                }
        }
        for (size_t k = 0; k < 3; k++) {
                strbuf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", ms[k].name, ms[k].help, ms[k].name);
                if (rows[k].len)
                        strbuf_append(b, rows[k].buf, rows[k].len);
                strbuf_done(&rows[k]);
        }
}

char *agent_metrics_render(void) {
        struct strbuf b;
        strbuf_init(&b, 0);
        render_proxy(&b);
        pthread_mutex_lock(&lock);
        render_result_counter(&b, "paddock_agent_egress_applies_total", "egress.apply messages handled, by result.",
                              m.applies);
        render_result_counter(&b, "paddock_agent_egress_removes_total", "egress.remove messages handled, by result.",
                              m.removes);
        render_histogram(&b, "paddock_agent_egress_apply_seconds",
                         "Time to handle one egress.apply (name resolution and the nft batch).", &m.apply, apply_buckets,
                         N_APPLY_BUCKETS);
        render_result_counter(&b, "paddock_agent_snapshots_total", "Snapshots taken (commit, push, prune), by result.",
                              m.snapshots);
        render_histogram(&b, "paddock_agent_snapshot_seconds", "Time to take one snapshot, start to report.", &m.snapshot,
                         snapshot_buckets, N_SNAPSHOT_BUCKETS);
        strbuf_printf(&b,
                      "# HELP paddock_agent_amqp_connected 1 while the agent is connected to RabbitMQ and consuming.\n"
                      "# TYPE paddock_agent_amqp_connected gauge\npaddock_agent_amqp_connected %d\n"
                      "# HELP paddock_agent_amqp_reconnects_total Connections to RabbitMQ made after the first.\n"
                      "# TYPE paddock_agent_amqp_reconnects_total counter\npaddock_agent_amqp_reconnects_total %" PRIu64 "\n"
                      "# HELP paddock_agent_egress_chains Sandbox chains in the agent's nft table.\n"
                      "# TYPE paddock_agent_egress_chains gauge\npaddock_agent_egress_chains %" PRId64 "\n",
                      m.connected ? 1 : 0, m.reconnects, m.chains);
        pthread_mutex_unlock(&lock);
        return b.buf ? b.buf : xstrdup("");
}

int agent_metrics_parse_listen(const char *s, struct sockaddr_storage *ret, socklen_t *ret_len, struct err *err) {
        struct sockaddr_storage ss = { 0 };
        char host[64];
        const char *colon;
        int64_t port;
        if (s[0] == '[') {
                const char *end = strchr(s, ']');
                if (!end || end[1] != ':' || (size_t) (end - s - 1) >= sizeof(host))
                        goto bad;
                memcpy(host, s + 1, (size_t) (end - s - 1));
                host[end - s - 1] = 0;
                colon = end + 1;
        } else {
                colon = strrchr(s, ':');
                if (!colon || (size_t) (colon - s) >= sizeof(host))
                        goto bad;
                memcpy(host, s, (size_t) (colon - s));
                host[colon - s] = 0;
        }
        if (safe_atoi64(colon + 1, &port) < 0 || port < 1 || port > 65535)
                goto bad;
        struct sockaddr_in *a4 = (struct sockaddr_in *) &ss;
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *) &ss;
        if (s[0] != '[' && inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
                if ((ntohl(a4->sin_addr.s_addr) >> 24) != 127)
                        return err_set(err, -EINVAL, "%s is not a loopback address: /metrics is unauthenticated, serve it on 127.0.0.1 "
                                                     "(scrape through a local proxy or an SSH tunnel)", host);
                a4->sin_family = AF_INET;
                a4->sin_port = htons((uint16_t) port);
                *ret_len = sizeof(*a4);
        } else if (s[0] == '[' && inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
                if (!IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr))
                        return err_set(err, -EINVAL, "%s is not a loopback address: /metrics is unauthenticated, serve it on [::1]",
                                       host);
                a6->sin6_family = AF_INET6;
                a6->sin6_port = htons((uint16_t) port);
                *ret_len = sizeof(*a6);
        } else
                goto bad;
        *ret = ss;
        return 0;
bad:
        return err_set(err, -EINVAL, "'%s' is not ADDRESS:PORT (e.g. 127.0.0.1:9464 or [::1]:9464)", s);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
        (void) cls;
        (void) version;
        (void) upload_data;
        (void) con_cls;
        int status = MHD_HTTP_OK;
        const char *ctype = "text/plain; version=0.0.4; charset=utf-8";
        char *text;
        if (*upload_data_size) {  /* no request of ours has a body: drop it */
                *upload_data_size = 0;
                return MHD_YES;
        }
        if (strcmp(url, "/metrics") != 0) {
                status = MHD_HTTP_NOT_FOUND;
                text = xstrdup("Only /metrics is served here.\n");
                ctype = "text/plain; charset=utf-8";
        } else if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
                status = MHD_HTTP_METHOD_NOT_ALLOWED;
                text = xstrdup("Use GET.\n");
                ctype = "text/plain; charset=utf-8";
        } else
                text = agent_metrics_render();
        struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
        if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
        enum MHD_Result r = MHD_queue_response(conn, (unsigned) status, resp);
        MHD_destroy_response(resp);
        return r;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
        char buf[256];
        (void) cls;
        vsnprintf(buf, sizeof(buf), fmt, ap);
        buf[strcspn(buf, "\n")] = 0;
        log_debug("metrics listener: %s", buf);
}

int agent_metrics_start(const struct agent_config *cfg, struct err *err) {
        struct sockaddr_storage ss;
        socklen_t len;
        int r;
        if (!cfg->metrics_listen)
                return 0;
        if ((r = agent_metrics_parse_listen(cfg->metrics_listen, &ss, &len, err)) < 0)
                return r;
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
        if (ss.ss_family == AF_INET6)
                flags |= MHD_USE_IPv6;
        daemon_ = MHD_start_daemon(flags, 0, NULL, NULL, answer, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &ss,
                                   MHD_OPTION_CONNECTION_LIMIT, (unsigned) 8, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned) 8,
                                   MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) 5, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                                   MHD_OPTION_END);
        if (!daemon_)
                return err_set(err, -EADDRINUSE, "cannot listen on %s (in use, or not an address of this host)", cfg->metrics_listen);
        return 0;
}

void agent_metrics_stop(void) {
        if (daemon_)
                MHD_stop_daemon(daemon_);
        daemon_ = NULL;
}
