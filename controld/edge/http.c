/* http.c — the libmicrohttpd server: connections, bodies, auth, request ids, metrics.
 *
 * Thread per connection: handlers may block (create waits for the container,
 * /wait long-polls, exec streams) without starving other clients, because
 * there is no shared worker pool to tie up. The connection limit and the
 * per-IP limit bound the threads.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_relay.h"
#include "strutil.h"
#include "ctl-egress.h"
#include "ctl-metrics.h"
#include "pool.h"
#include "render.h"

struct http_server {
        struct ctl *c;
        struct MHD_Daemon *d;
        struct http_flavor fl;
        bool main;                       /* the [server] listener: owns the metrics token */
};

static const struct http_flavor brimble_flavor = { .key_header = "x-brimble-key" };

/* [server] metrics_token_file, read at start: NULL = /metrics needs no token. */
static char *metrics_token;
static size_t metrics_token_len;

const char *req_query(struct req *r, const char *key) {
        return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *req_header(struct req *r, const char *key) {
        return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, key);
}

void req_body_wipe(struct req *r) {
        if (r->body.buf && r->body.len)
                explicit_bzero(r->body.buf, r->body.len);
}

static bool has_body(struct req *r) {
        const char *cl = req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
        return (cl && strcmp(cl, "0") != 0) || req_header(r, MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

enum MHD_Result respond_response(struct req *r, int status, struct MHD_Response *resp) {
        if (!resp)
                return MHD_NO;
        /* Answering before the body was read (413 from Content-Length, 401, 404 ...): the
         * connection closes with the client maybe still sending. */
        if (r->in_headers && has_body(r))
                r->linger = true;
        MHD_add_response_header(resp, "x-request-id", r->request_id);
        enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned) status, resp);
        MHD_destroy_response(resp);
        r->status = status;
        r->answered = true;
        return ret;
}

enum MHD_Result respond_raw(struct req *r, int status, const char *content_type, const void *data, size_t len) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *) data, MHD_RESPMEM_MUST_COPY);
        if (content_type)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        return respond_response(r, status, resp);
}

enum MHD_Result respond_json(struct req *r, int status, cJSON *body) {
        char *s = json_print(body);
        cJSON_Delete(body);
        size_t len = strlen(s);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(len, s, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json; charset=utf-8");
        return respond_response(r, status, resp);
}

enum MHD_Result respond_envelope(struct req *r, int status, const char *message, cJSON *data) {
        if (!data && r->srv && r->srv->fl.error_body)
                return respond_json(r, status, r->srv->fl.error_body(status, message));
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "message", message);
        if (data)
                cJSON_AddItemToObject(o, "data", data);
        return respond_json(r, status, o);
}

enum MHD_Result respond_error(struct req *r, int status, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (status >= 500)
                log_warning("request failed with %d: %s", status, msg);
        return respond_envelope(r, status, msg, NULL);
}

/* The one place a domain errno becomes an HTTP status (the codes: controld.h, above sandbox_load). */
static const struct { int err, status; } errno_status[] = {
        { EINVAL, 400 },       /* the request is wrong: fix it */
        { EBUSY, 400 },        /* wrong state or in use: act on the resource first */
        { EEXIST, 400 },       /* the name is taken */
        { EACCES, 401 },       /* no or bad API key */
        { EPERM, 403 },        /* not allowed for this account, plan or region */
        { EDQUOT, 403 },       /* over a plan limit */
        { ENOENT, 404 },       /* not found, or not the caller's */
        { ESTALE, 409 },       /* changed meanwhile: fetch and retry */
        { ETIMEDOUT, 408 },    /* the client's transfer took too long */
        { EFBIG, 413 },        /* body or file too large */
        { EUSERS, 429 },       /* too many at once: retry later */
        { EIO, 500 },          /* our store failed */
        { EREMOTEIO, 500 },    /* the sandbox reported a failure (the message says which) */
        { EOPNOTSUPP, 501 },   /* not available on this server */
        { EHOSTUNREACH, 503 }, /* the scheduler or the sandbox did not do its part */
        { EINPROGRESS, 504 },  /* still under way when the answer's bound ran out */
        { EAGAIN, 503 },       /* shutting down or busy: retry shortly */
        { ENOSPC, 507 },       /* no space left */
};

int http_status_from_errno(int err) {
        if (err < 0)
                err = -err;
        for (size_t i = 0; i < ELEMENTSOF(errno_status); i++)
                if (errno_status[i].err == err)
                        return errno_status[i].status;
        return 500;
}

enum MHD_Result respond_errno(struct req *r, int err, const struct err *e) {
        return respond_error(r, http_status_from_errno(err), "%s", e && e->message[0] ? e->message : "Internal error");
}

enum MHD_Result respond_errno_msg(struct req *r, int err, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return respond_error(r, http_status_from_errno(err), "%s", msg);
}

/* {"message": msg} with one extra header (Allow, Retry-After). */
static enum MHD_Result respond_message_with_header(struct req *r, int status, const char *msg, const char *header,
                                                   const char *value) {
        cJSON *o;
        if (r->srv && r->srv->fl.error_body)
                o = r->srv->fl.error_body(status, msg);
        else {
                o = cJSON_CreateObject();
                json_add_str(o, "message", msg);
        }
        char *s = json_print(o);
        cJSON_Delete(o);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(strlen(s), s, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json; charset=utf-8");
        MHD_add_response_header(resp, header, value);
        return respond_response(r, status, resp);
}

enum MHD_Result respond_method_not_allowed(struct req *r, const char *allow) {
        char msg[128];
        snprintf(msg, sizeof(msg), "Method %s not allowed here (allowed: %s)", r->method, allow);
        return respond_message_with_header(r, 405, msg, MHD_HTTP_HEADER_ALLOW, allow);
}

enum MHD_Result respond_empty(struct req *r, int status) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        return respond_response(r, status, resp);
}

int req_pagination(struct req *r, int64_t *ret_page, int64_t *ret_limit) {
        const char *p = req_query(r, "page"), *l = req_query(r, "limit");
        int64_t page = 1, limit = 15;
        if (p && (safe_atoi64(p, &page) < 0 || page < 1 || page > 1000000)) {
                respond_error(r, 400, "page must be an integer >= 1");
                return -EINVAL;
        }
        if (l && (safe_atoi64(l, &limit) < 0 || limit < 1 || limit > 100)) {
                respond_error(r, 400, "limit must be an integer between 1 and 100");
                return -EINVAL;
        }
        *ret_page = page;
        *ret_limit = limit;
        return 0;
}

static bool request_id_ok(const char *s) {
        size_t n = 0;
        for (; s[n]; n++)
                if (!(s[n] == '-' || s[n] == '_' || s[n] == '.' || (s[n] >= '0' && s[n] <= '9') ||
                      (s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z')))
                        return false;
        return n > 0 && n < 40;
}

/* ---- failed key guesses ----
 *
 * A token bucket per source address (IPv6: per /64, which one host can hop across):
 * auth_failures_per_minute tokens, refilled at that rate; each wrong key takes one.
 * An empty bucket refuses every request with a key from that address with 429 before
 * the key is looked up, so the answer says nothing about the key. A valid key costs
 * nothing and never waits. The table has a fixed size; when full, the entry nearest to
 * refilled (the least suspicious) is replaced, so an attacker with many addresses can
 * not make us allocate more. */

struct guess { uint8_t addr[16]; double tokens; int64_t t_ms; };
static pthread_mutex_t guess_lock = PTHREAD_MUTEX_INITIALIZER;
static struct guess *guesses;
static size_t n_guesses, max_guesses;
static double guess_cap, guess_rate_per_ms;

static void guess_init(const struct config *cfg) {
        pthread_mutex_lock(&guess_lock);
        free(guesses);
        guesses = NULL;
        n_guesses = 0;
        max_guesses = (size_t) cfg->auth_failure_addresses;
        guess_cap = (double) cfg->auth_failures_per_minute;
        guess_rate_per_ms = guess_cap / 60000.0;
        if (guess_cap > 0)
                guesses = xnew0(struct guess, max_guesses);
        pthread_mutex_unlock(&guess_lock);
}

/* The client's address as 16 bytes: IPv4 mapped, IPv6 cut to its /64. */
static bool client_key(struct req *r, uint8_t key[16]) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        memset(key, 0, 16);
        if (!ci || !ci->client_addr)
                return false;
        if (ci->client_addr->sa_family == AF_INET) {
                key[10] = key[11] = 0xff;
                memcpy(key + 12, &((const struct sockaddr_in *) ci->client_addr)->sin_addr, 4);
                return true;
        }
        if (ci->client_addr->sa_family == AF_INET6) {
                memcpy(key, &((const struct sockaddr_in6 *) ci->client_addr)->sin6_addr, 8);
                return true;
        }
        return false;
}

static void guess_refill(struct guess *g, int64_t now) {
        g->tokens += (double) (now - g->t_ms) * guess_rate_per_ms;
        if (g->tokens > guess_cap)
                g->tokens = guess_cap;
        g->t_ms = now;
}

static struct guess *guess_find(const uint8_t key[16]) {
        for (size_t i = 0; i < n_guesses; i++)
                if (!memcmp(guesses[i].addr, key, 16))
                        return &guesses[i];
        return NULL;
}

/* Seconds until the address may try again, 0 when it may now. */
static int64_t guess_blocked(const uint8_t key[16]) {
        int64_t wait = 0;
        pthread_mutex_lock(&guess_lock);
        struct guess *g = guesses ? guess_find(key) : NULL;
        if (g) {
                guess_refill(g, mono_ms());
                if (g->tokens < 1.0)
                        wait = (int64_t) ((1.0 - g->tokens) / guess_rate_per_ms / 1000.0) + 1;
        }
        pthread_mutex_unlock(&guess_lock);
        return wait;
}

static void guess_failed(const uint8_t key[16]) {
        int64_t now = mono_ms();
        pthread_mutex_lock(&guess_lock);
        if (!guesses)
                goto out;
        struct guess *g = guess_find(key);
        if (!g) {
                if (n_guesses < max_guesses)
                        g = &guesses[n_guesses++];
                else {
                        /* Forget the entry nearest to full: it has done the least guessing lately. */
                        size_t best = 0;
                        double best_t = -1;
                        for (size_t i = 0; i < n_guesses; i++) {
                                guess_refill(&guesses[i], now);
                                if (guesses[i].tokens > best_t)
                                        best_t = guesses[i].tokens, best = i;
                        }
                        g = &guesses[best];
                }
                memcpy(g->addr, key, 16);
                g->tokens = guess_cap;
                g->t_ms = now;
        }
        guess_refill(g, now);
        g->tokens -= 1.0;
        if (g->tokens < 0)
                g->tokens = 0;
out:
        pthread_mutex_unlock(&guess_lock);
}

static void respond_too_many_guesses(struct req *r, int64_t wait_s) {
        char msg[256], ra[32];
        snprintf(msg, sizeof(msg),
                 "Too many requests with a wrong API key from this address; retry in %lld s (limit %lld a minute)",
                 (long long) wait_s, (long long) r->c->cfg->auth_failures_per_minute);
        snprintf(ra, sizeof(ra), "%lld", (long long) wait_s);
        (void) respond_message_with_header(r, 429, msg, MHD_HTTP_HEADER_RETRY_AFTER, ra);
}

/* Resolves the API key from x-brimble-key or Authorization: Bearer. */
int http_authenticate(struct req *r) {
        const char *key_header = r->srv ? r->srv->fl.key_header : brimble_flavor.key_header;
        const char *key = req_header(r, key_header);
        const char *auth = req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
        char hash[65];

        if ((!key || !*key) && auth) {
                if (strncasecmp(auth, "Bearer ", 7) == 0)
                        key = auth + 7;
                while (key && *key == ' ')
                        key++;
        }
        if (!key || !*key) {
                respond_error(r, 401, "Missing API key: send it in the %s header or as Authorization: Bearer <key>", key_header);
                return -EACCES;
        }
        uint8_t who[16];
        bool known = client_key(r, who);
        int64_t wait = known ? guess_blocked(who) : 0;
        if (wait > 0) {
                respond_too_many_guesses(r, wait);
                return -EUSERS;
        }
        if (strlen(key) > 256) {
                if (known)
                        guess_failed(who);
                respond_error(r, 401, "Invalid API key");
                return -EACCES;
        }
        sha256_hex(key, strlen(key), hash);
        int k = store_key_lookup(r->c->store, hash, &r->acc);
        if (k == -ENOENT) {
                if (known)
                        guess_failed(who);
                respond_error(r, 401, "Invalid API key");
                return -EACCES;
        }
        if (k < 0) {
                respond_error(r, 500, "Failed to check the API key");
                return k;
        }
        r->authed = true;
        log_ctx_set("ACCOUNT_ID", r->acc.id);
        return 0;
}

static void req_free(struct req *r) {
        if (!r)
                return;
        if (r->on_end)
                r->on_end(r->ud);
        strbuf_done(&r->body);
        free(r->path);
        account_clear(&r->acc);
        free(r);
}

/* Closing a socket with unread data makes the kernel send RST, which can destroy the
 * answer we just sent before the client reads it. Like a web server's lingering close:
 * half-close, then read and discard for a short, bounded while. */
static void linger_close(struct MHD_Connection *conn) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci || ci->connect_fd < 0)
                return;
        int fd = ci->connect_fd;
        char buf[65536];
        size_t total = 0;
        int64_t end = mono_ms() + 2000;
        shutdown(fd, SHUT_WR);
        while (total < (size_t) 256 << 20) {
                int64_t left = end - mono_ms();
                if (left <= 0)
                        break;
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, (int) left) <= 0)
                        break;
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n <= 0)
                        break;
                total += (size_t) n;
        }
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
        struct ctl *c = cls;
        struct req *r = *con_cls;
        if (!r)
                return;
        if (r->linger)
                linger_close(conn);
        double dt = (double) (mono_ms() - r->t0_ms) / 1000.0;
        int status = r->answered ? r->status : 499;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && r->answered && r->status < 400)
                status = r->status;
        metrics_observe_request(c->metrics, r->route ? r->route : "unmatched", r->method, status, dt);
        log_debug("%s %s -> %d in %.1fms", r->method, r->route ? r->route : "unmatched", status, dt * 1000.0);
        if (r->sink && !r->sink_failed && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
                r->sink(r, NULL, (size_t) -1);  /* abort notice: the client went away */
        req_free(r);
        *con_cls = NULL;
        log_ctx_reset();
}

/* Body limit of a route, from the configuration. */
static uint64_t body_limit(const struct config *cfg, enum route_body b) {
        switch (b) {
        case ROUTE_BODY_JSON:
                return cfg->max_json_body < cfg->max_body ? cfg->max_json_body : cfg->max_body;
        case ROUTE_BODY_LARGE:
                return cfg->max_body;
        case ROUTE_BODY_STREAM:
                return cfg->max_file;
        }
        return cfg->max_json_body;
}

static enum MHD_Result respond_too_large(struct req *r) {
        return respond_error(r, 413, "Request body too large (limit %llu bytes)", (unsigned long long) r->body_limit);
}

/* The first callback of a request: headers only. The route is found here, and
 * early answers (auth, routing errors, 413 from Content-Length, upload preparation)
 * happen before any body byte is read. */
static enum MHD_Result first_call(struct req *r) {
        if (!r->srv->fl.unescape_slash && (strstr(r->path, "%00") || strcasestr(r->path, "%2f")))
                return respond_error(r, 400, "The path must not contain %%00 or %%2F; write '/' literally");
        enum route_status st = r->srv->fl.route_req ? r->srv->fl.route_req(r) : r->srv->fl.route(r->method, r->path, &r->m);
        const struct route *rt = r->m.row;
        r->route = rt ? rt->label : NULL;
        /* An unknown path asks for a key too: no probing the API without one. */
        if ((!rt || rt->auth) && http_authenticate(r) < 0)
                return MHD_YES;
        switch (st) {
        case ROUTE_NOT_FOUND:
                return respond_error(r, 404, "No route for %s %s", r->method, r->path);
        case ROUTE_BAD_METHOD:
                return respond_method_not_allowed(r, r->m.allow);
        case ROUTE_BAD_ID:
                if (r->srv->fl.bad_id_status)
                        return respond_error(r, r->srv->fl.bad_id_status, "No %s with that id", rt->id_noun);
                return respond_error(r, 400, "Invalid %s id", rt->id_noun);
        case ROUTE_FOUND:
                break;
        }
        r->body_limit = body_limit(r->c->cfg, rt->body);
        r->body.max = r->body_limit;
        if (rt->prepare) {
                enum MHD_Result res = rt->prepare(r);
                if (r->answered || res != MHD_YES)
                        return res;
        }
        /* Refuse oversized buffered bodies from Content-Length before reading them. */
        const char *cl = req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
        int64_t len;
        if (!r->sink && cl && safe_atoi64(cl, &len) >= 0 && (uint64_t) len > r->body_limit)
                return respond_too_large(r);
        return MHD_YES;
}

static enum MHD_Result later_call(struct req *r, const char *upload_data, size_t *upload_data_size) {
        log_ctx_set("REQUEST_ID", r->request_id);
        if (r->authed)
                log_ctx_set("ACCOUNT_ID", r->acc.id);

        if (*upload_data_size) {
                size_t n = *upload_data_size;
                *upload_data_size = 0;
                if (r->answered)
                        return MHD_YES;  /* discard: an early answer was queued */
                if (r->sink) {
                        if (!r->sink_failed && r->sink(r, upload_data, n) < 0)
                                r->sink_failed = true;
                        return MHD_YES;
                }
                /* Chunked bodies have no Content-Length: the cap holds while reading, and
                 * what is past it is discarded, never buffered. */
                if (strbuf_append(&r->body, upload_data, n) < 0)
                        r->body_too_large = true;
                return MHD_YES;
        }
        if (r->answered || r->started)
                return MHD_YES;
        r->started = true;
        if (r->body_too_large)
                return respond_too_large(r);
        return r->m.row->handler(r);
}

enum MHD_Result http_get_healthz(struct req *r) {
        struct ctl *c = r->c;
        /* Degraded (503) when the scheduler backend does not answer: this controld
         * could not create or run anything. */
        const char *driver = NULL;
        int rc = ctl_backend_ping(c, &driver);
        return respond_json(r, rc >= 0 ? 200 : 503, health_to_json(rc >= 0, driver));
}

/* Constant-time: how much of the token matched tells a guesser nothing. */
static bool token_equal(const char *got, size_t got_len) {
        unsigned char d = got_len != metrics_token_len;
        for (size_t i = 0; i < metrics_token_len; i++)
                d |= (unsigned char) (metrics_token[i] ^ (i < got_len ? got[i] : 0));
        return d == 0;
}

enum MHD_Result http_get_metrics(struct req *r) {
        if (metrics_token) {
                const char *auth = req_header(r, MHD_HTTP_HEADER_AUTHORIZATION);
                const char *tok = auth && strncasecmp(auth, "Bearer ", 7) == 0 ? auth + 7 : NULL;
                if (!tok || !token_equal(tok, strlen(tok)))
                        return respond_message_with_header(
                                r, 401, "/metrics needs the metrics token: send it as Authorization: Bearer <token>",
                                MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"paddock-metrics\"");
        }
        struct strbuf b;
        strbuf_init(&b, 0);
        metrics_render(r->c, &b);
        ctl_egress_metrics_render(&b);
        pool_metrics_render(r->c, &b);
        char *m = strbuf_steal(&b);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(strlen(m), m, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; version=0.0.4");
        return respond_response(r, 200, resp);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls) {
        struct http_server *h = cls;
        struct ctl *c = h->c;
        struct req *r = *con_cls;
        (void) version;

        if (r)
                return later_call(r, upload_data, upload_data_size);
        r = xnew0(struct req, 1);
        r->srv = h;
        r->c = c;
        r->conn = conn;
        r->method = method;
        r->t0_ms = mono_ms();
        r->path = xstrdup(url);
        const char *rid = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-request-id");
        if (rid && request_id_ok(rid))
                snprintf(r->request_id, sizeof(r->request_id), "%s", rid);
        else
                random_token(r->request_id, 12);
        strbuf_init(&r->body, c->cfg->max_json_body);
        r->body_limit = c->cfg->max_json_body;
        *con_cls = r;
        log_ctx_reset();
        log_ctx_set("REQUEST_ID", r->request_id);
        r->in_headers = true;
        enum MHD_Result res = first_call(r);
        r->in_headers = false;
        return res;
}

static int hexval(char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Percent-decoding that never produces a NUL byte or a '/': "%00" and "%2F" stay
 * literally, so "/sandboxes/<id>%00/snapshots" can't be cut short into "/sandboxes/<id>"
 * and the request is refused with 400 by on_request. */
/* Percent-decoding in place; "%00" always stays encoded (it would cut the text short), "%2F"
 * too with keep_slash (a path separator the client escaped on purpose). */
static size_t unescape_into(char *s, bool keep_slash) {
        char *w = s;
        for (char *r = s; *r;) {
                int hi, lo;
                if (r[0] == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0 && (hi | lo) != 0 &&
                    !(keep_slash && hi * 16 + lo == '/')) {
                        *w++ = (char) (hi * 16 + lo);
                        r += 3;
                } else
                        *w++ = *r++;
        }
        *w = 0;
        return (size_t) (w - s);
}

size_t http_path_unescape(char *s) {
        /* both stay encoded, and the router refuses them */
        return unescape_into(s, true);
}

static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
        const struct http_server *h = cls;
        (void) c;
        return unescape_into(s, !(h && h->fl.unescape_slash));
}

static void mhd_logger(void *cls, const char *fmt, va_list ap) {
        char buf[512];
        (void) cls;
        vsnprintf(buf, sizeof(buf), fmt, ap);
        size_t n = strlen(buf);
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
                buf[--n] = 0;
        log_debug("libmicrohttpd: %s", buf);
}

int http_start(struct ctl *c, http_router route, struct http_server **ret) {
        struct config *cfg = c->cfg;
        struct http_flavor fl = brimble_flavor;
        fl.route = route;
        fl.listen_addr = cfg->listen_addr;
        fl.listen_port = cfg->listen_port;
        guess_init(cfg);
        if (cfg->metrics_token_file && *cfg->metrics_token_file) {
                int r = pj_relay_secret_load(cfg->metrics_token_file, &metrics_token, &metrics_token_len);
                if (r < 0)
                        return log_error_errno(r, "[server] metrics_token_file %s: %s (16..1024 bytes, no NUL)",
                                               cfg->metrics_token_file, strerror(-r));
                log_info("/metrics needs the token from %s", cfg->metrics_token_file);
        } else
                log_notice("/metrics is open to anyone who reaches %s:%d: set [server] metrics_token_file to require a token",
                           cfg->listen_addr, cfg->listen_port);
        int r = http_start_flavor(c, &fl, ret);
        if (r >= 0)
                (*ret)->main = true;
        else if (metrics_token) {
                explicit_bzero(metrics_token, metrics_token_len);
                free(metrics_token);
                metrics_token = NULL;
        }
        return r;
}

int http_start_flavor(struct ctl *c, const struct http_flavor *fl, struct http_server **ret) {
        struct config *cfg = c->cfg;
        struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t) fl->listen_port) };
        struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t) fl->listen_port) };
        struct sockaddr *sa = NULL;
        unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG |
                         MHD_ALLOW_UPGRADE;

        if (!fl->listen_addr)
                flags |= MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;   /* connections come by http_add_connection */
        else if (inet_pton(AF_INET, fl->listen_addr, &a4.sin_addr) == 1)
                sa = (struct sockaddr *) &a4;
        else if (inet_pton(AF_INET6, fl->listen_addr, &a6.sin6_addr) == 1) {
                sa = (struct sockaddr *) &a6;
                flags |= MHD_USE_IPv6;
        } else
                return log_error_errno(-EINVAL, "listen address '%s' is not an IP address", fl->listen_addr);

        struct http_server *h = xnew0(struct http_server, 1);
        h->c = c;
        h->fl = *fl;
        if (!h->fl.key_header)
                h->fl.key_header = brimble_flavor.key_header;
        struct MHD_OptionItem sock[] = {
                { sa ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END, 0, sa },
                { MHD_OPTION_END, 0, NULL },
        };
        h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                                MHD_OPTION_EXTERNAL_LOGGER, mhd_logger, NULL,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned) cfg->max_connections,
                                MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned) cfg->per_ip_connections,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned) cfg->conn_timeout_s,
                                MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t) cfg->max_header,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, c,
                                MHD_OPTION_UNESCAPE_CALLBACK, unescape, h,
                                MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                                MHD_OPTION_ARRAY, sock,
                                MHD_OPTION_END);
        if (!h->d) {
                free(h);
                if (!fl->listen_addr)
                        return log_error_errno(-EAGAIN, "Failed to start an HTTP server without a listener");
                return log_error_errno(-EADDRINUSE, "Failed to listen on %s:%d (address in use or not allowed)",
                                       fl->listen_addr, fl->listen_port);
        }
        *ret = h;
        return 0;
}

int http_add_connection(struct http_server *h, int fd, const struct sockaddr *sa, socklen_t sl) {
        /* MHD owns fd from here, also when it refuses it (at a connection limit) */
        return MHD_add_connection(h->d, fd, sa, sl) == MHD_YES ? 0 : -EUSERS;
}

int http_port(struct http_server *h) {
        const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
        return i ? i->port : -1;
}

struct http_server *http_stop(struct http_server *h) {
        if (!h)
                return NULL;
        bool main = h->main;
        if (h->d)
                MHD_stop_daemon(h->d);
        free(h);
        if (main && metrics_token) {
                explicit_bzero(metrics_token, metrics_token_len);
                free(metrics_token);
                metrics_token = NULL;
        }
        return NULL;
}

void sse_stream_count(struct ctl *c, int delta) {
        pthread_mutex_lock(&c->jobs_lock);
        c->streams_running += delta;
        pthread_cond_broadcast(&c->jobs_cond);
        pthread_mutex_unlock(&c->jobs_lock);
}

enum MHD_Result sse_respond(struct req *r, unsigned idle_timeout_s, MHD_ContentReaderCallback reader,
                            MHD_ContentReaderFreeCallback free_cb, void *cls, int *ret_client_fd, int64_t *ret_last_sent,
                            bool *ret_counted) {
        (void) MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, idle_timeout_s);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *ret_client_fd = ci ? ci->connect_fd : -1;
        *ret_last_sent = mono_ms();
        sse_stream_count(r->c, +1);
        *ret_counted = true;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, reader, cls, free_cb);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        return respond_response(r, 200, resp);
}

ssize_t sse_pending(struct strbuf *pending, size_t *off, bool done, char *buf, size_t max) {
        if (*off < pending->len)
                return (ssize_t) strbuf_drain(pending, off, buf, max);
        return done ? MHD_CONTENT_READER_END_OF_STREAM : 0;
}

void sse_keepalive(struct strbuf *pending, bool unsent, int64_t *last_sent, int64_t keepalive_ms) {
        if (unsent)
                *last_sent = mono_ms();
        else if (mono_ms() - *last_sent >= keepalive_ms) {
                strbuf_append(pending, ": keep-alive\n\n", 14);
                *last_sent = mono_ms();
        }
}

void sse_queue_json(struct strbuf *pending, cJSON *o) {
        _cleanup_free_ char *j = json_print(o);
        cJSON_Delete(o);
        strbuf_append(pending, "data: ", 6);
        strbuf_append(pending, j, strlen(j));
        strbuf_append(pending, "\n\n", 2);
}

void *http_server_ud(const struct http_server *h) {
        return h->fl.ud;
}
