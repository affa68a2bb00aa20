/* preview.c — preview URLs: a server listening on a port inside a sandbox, reached from a
 * browser through controld's preview listener ([preview] listen) and the sandbox's agent
 * (a FORWARD channel to 127.0.0.1:<port> inside), so a server bound to localhost works and no
 * path into the sandbox's network is ever opened, whatever its egress mode.
 *
 * URL forms: <port>-<id>.<domain> (Host routing, [preview] domain set; TLS is the operator's
 * proxy's) and http://<listen>/p/<id>/<port>/ (always; the prefix is stripped before the
 * request goes in). A preview needs its token unless public: X-Paddock-Preview-Token, or
 * ?paddock_token= once (answered with a cookie and a redirect to the same URL without it),
 * or that cookie. Each client connection is one thread: it reads the request head (bounded
 * in size and time), checks the preview, the token and the sandbox, opens a FORWARD, sends
 * the head rewritten (Host localhost:<port> unless keepHost, Connection: close unless the
 * request upgrades, our token and cookie removed) and then passes bytes both ways until
 * either side ends, the connection idles, or the preview is revoked or expires.
 *
 * The sandbox's side is hostile: every frame from the agent is bounded by the codec before
 * anything is allocated, writes to the client have a timeout, and a stuck agent holds only
 * its own connection thread. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent.h"
#include "cleanup.h"
#include "controld.h"
#include "fdio.h"
#include "http.h"
#include "json.h"
#include "listener.h"
#include "log.h"
#include "preview.h"
#include "sbcount.h"
#include "strutil.h"

#define CHECK_MS 250                 /* how often an open connection looks at its preview again */
#define FORWARD_TIMEOUT_MS 10000     /* FORWARD's answer */
#define SEND_TIMEOUT_MS 30000        /* one write to the client or the agent */
#define MAX_HEADERS 100
#define CHUNK (64 * 1024)
#define TOKEN_PARAM "paddock_token"
#define TOKEN_HEADER "X-Paddock-Preview-Token"
#define COOKIE_PREFIX "paddock_preview_"
#define HOST_PREFIX "__Host-"

enum { M_UNKNOWN = _SB_STATUS_MAX, M_SLOTS };

static struct {
        struct ctl *c;
        pthread_mutex_t lock;     /* the counters */
        struct listener L;        /* [preview] listen */
        struct sb_counts per;     /* open connections per sandbox */
        unsigned gen;             /* bumped when a preview is replaced or revoked */
        uint64_t requests[M_SLOTS], bytes_in[M_SLOTS], bytes_out[M_SLOTS];
} PV = { .lock = PTHREAD_MUTEX_INITIALIZER, .L = LISTENER_INIT, .per = SB_COUNTS_INIT };

static void count(int slot, uint64_t req, uint64_t in, uint64_t out) {
        pthread_mutex_lock(&PV.lock);
        PV.requests[slot] += req;
        PV.bytes_in[slot] += in;
        PV.bytes_out[slot] += out;
        pthread_mutex_unlock(&PV.lock);
}

static void bump_gen(void) {
        pthread_mutex_lock(&PV.lock);
        PV.gen++;
        pthread_mutex_unlock(&PV.lock);
}

static unsigned gen_now(void) {
        pthread_mutex_lock(&PV.lock);
        unsigned g = PV.gen;
        pthread_mutex_unlock(&PV.lock);
        return g;
}

void preview_metrics_render(struct strbuf *out) {
        static const char *const names[] = { "requests_total", "bytes_in_total", "bytes_out_total" };
        static const char *const help[] = { "Preview requests by the sandbox's status (unknown: no such preview).",
                                            "Preview bytes from clients into sandboxes, by the sandbox's status.",
                                            "Preview bytes from sandboxes to clients, by the sandbox's status." };
        pthread_mutex_lock(&PV.lock);
        for (int k = 0; k < 3; k++) {
                const uint64_t *v = k == 0 ? PV.requests : k == 1 ? PV.bytes_in : PV.bytes_out;
                strbuf_printf(out, "# HELP paddock_preview_%s %s\n# TYPE paddock_preview_%s counter\n", names[k], help[k],
                              names[k]);
                for (int s = 0; s < M_SLOTS; s++)
                        strbuf_printf(out, "paddock_preview_%s{status=\"%s\"} %llu\n", names[k],
                                      s == M_UNKNOWN ? "unknown" : sb_status_str((enum sb_status) s), (unsigned long long) v[s]);
        }
        pthread_mutex_unlock(&PV.lock);
        pthread_mutex_lock(&PV.L.lock);
        strbuf_printf(out, "# HELP paddock_preview_connections Proxied preview connections open now.\n"
                           "# TYPE paddock_preview_connections gauge\npaddock_preview_connections %lld\n",
                      (long long) PV.L.conns);
        pthread_mutex_unlock(&PV.L.lock);
        listener_metrics_render(out);   /* the preview and E2B listeners' refusals */
}

/* ---- tokens and URLs ---- */

static bool token_ok(const struct preview *p, const char *token) {
        if (!token || !*token || strlen(token) > 256)
                return false;
        char h[65];
        sha256_hex(token, strlen(token), h);
        return CRYPTO_memcmp(h, p->token_sha256, 64) == 0;
}

char *preview_url(const struct ctl *c, const char *sandbox_id, int port) {
        const struct config *cfg = c->cfg;
        if (!cfg->preview_path_form) {
                /* each preview its own origin: <port>-<id>.<domain>, by default under localhost
                 * (browsers resolve *.localhost to the loopback) on the listener's port */
                if (*cfg->preview_domain)
                        return xasprintf("%s://%d-%s.%s/", cfg->preview_scheme, port, sandbox_id, cfg->preview_domain);
                return xasprintf("http://%d-%s.localhost:%d/", port, sandbox_id,
                                 PV.L.port > 0 ? PV.L.port : cfg->preview_listen_port);
        }
        if (*cfg->preview_public_url) {
                size_t n = strlen(cfg->preview_public_url);
                return xasprintf("%.*s/p/%s/%d/", (int) (n && cfg->preview_public_url[n - 1] == '/' ? n - 1 : n),
                                 cfg->preview_public_url, sandbox_id, port);
        }
        bool v6 = strchr(cfg->preview_listen_addr, ':') != NULL;
        return xasprintf("http://%s%s%s:%d/p/%s/%d/", v6 ? "[" : "", cfg->preview_listen_addr, v6 ? "]" : "",
                         PV.L.port > 0 ? PV.L.port : cfg->preview_listen_port, sandbox_id, port);
}

/* ---- the REST side: POST/GET/DELETE /sandboxes/{id}/previews ---- */

static cJSON *preview_json(struct ctl *c, const struct preview *p, const char *token) {
        cJSON *o = cJSON_CreateObject();
        char t[32];
        json_add_int(o, "port", p->port);
        _cleanup_free_ char *url = preview_url(c, p->sandbox_id, p->port);
        json_add_str(o, "url", url);
        if (token)
                json_add_str(o, "token", token);
        json_add_bool(o, "public", p->public_);
        json_add_bool(o, "keepHost", p->keep_host);
        format_rfc3339_ms(p->created_at, t);
        json_add_str(o, "createdAt", t);
        format_rfc3339_ms(p->expires_at, t);
        json_add_str(o, "expiresAt", t);
        return o;
}

/* The caller's sandbox of the route into *sb, with previews on: 0, or < 0 with the answer sent. */
static int preview_sandbox(struct req *r, struct sandbox *sb) {
        struct api_error e = { 0 };
        int k = sandbox_load(r->c, &r->acc, r->m.id, sb, &e);
        if (k < 0) {
                (void) respond_errno(r, k, &e);
                return k;
        }
        if (!r->c->cfg->preview_listen_addr) {
                (void) respond_errno_msg(r, -EOPNOTSUPP, "Preview URLs are off on this server ([preview] listen is not set)");
                return -EOPNOTSUPP;
        }
        return 0;
}

enum MHD_Result preview_post(struct req *r) {
        struct pj_preview_create in = { 0 };
        struct pj_error pe = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        const struct config *cfg = r->c->cfg;
        if (pj_preview_create_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return respond_errno_msg(r, -EINVAL, "%s", pe.message);
        if (preview_sandbox(r, &sb) < 0)
                return MHD_YES;
        if (sb.status == SB_DESTROYED || sb.status == SB_FAILED)
                return respond_errno_msg(r, -ENOENT, "Sandbox is %s: it has no previews", sb_status_str(sb.status));
        uint64_t exp = in.expires_in_s ? (uint64_t) in.expires_in_s : cfg->preview_default_expiry_s;
        if (exp > cfg->preview_max_expiry_s)
                return respond_errno_msg(r, -EINVAL, "expiresIn must be at most %llu seconds on this server",
                                         (unsigned long long) cfg->preview_max_expiry_s);
        char token[65];
        random_token(token, 32);
        struct preview p = { .port = in.port, .public_ = in.public_, .keep_host = in.keep_host, .created_at = now_ms() };
        snprintf(p.sandbox_id, sizeof(p.sandbox_id), "%s", sb.id);
        snprintf(p.account_id, sizeof(p.account_id), "%s", sb.account_id);
        sha256_hex(token, strlen(token), p.token_sha256);
        p.expires_at = p.created_at + (int64_t) exp * 1000;
        int k = store_preview_put(r->c->store, &p, p.created_at, cfg->preview_max_per_sandbox);
        if (k == -EDQUOT)
                return respond_errno_msg(r, -EDQUOT, "A sandbox has at most %lld previews: delete one first (port)",
                                         (long long) cfg->preview_max_per_sandbox);
        if (k < 0)
                return respond_errno_msg(r, k, "Could not store the preview: %s", strerror(-k));
        bump_gen();   /* a replaced preview's old token stops working at once */
        log_ctx_set("SANDBOX_ID", sb.id);
        char t[32];
        format_rfc3339_ms(p.expires_at, t);
        log_info("preview opened: port %d, %s, until %s", p.port, p.public_ ? "public" : "token required", t);
        cJSON *d = preview_json(r->c, &p, token);
        explicit_bzero(token, sizeof(token));
        return respond_envelope(r, 201, "Preview created", d);
}

enum MHD_Result preview_list(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int k;
        if (preview_sandbox(r, &sb) < 0)
                return MHD_YES;
        _cleanup_free_ struct preview *v = NULL;
        size_t n = 0;
        if ((k = store_preview_list(r->c->store, sb.id, now_ms(), &v, &n)) < 0)
                return respond_errno_msg(r, k, "Could not list previews: %s", strerror(-k));
        cJSON *d = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(d, "previews");
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, preview_json(r->c, &v[i], NULL));
        return respond_envelope(r, 200, "Previews listed", d);
}

enum MHD_Result preview_delete(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int k;
        if (preview_sandbox(r, &sb) < 0)
                return MHD_YES;
        if (r->m.pid > 65535)
                return respond_errno_msg(r, -EINVAL, "port must be between 1 and 65535");
        k = store_preview_delete(r->c->store, sb.id, (int) r->m.pid);
        if (k == -ENOENT)
                return respond_errno_msg(r, -ENOENT, "No preview of port %u on this sandbox", r->m.pid);
        if (k < 0)
                return respond_errno_msg(r, k, "Could not delete the preview: %s", strerror(-k));
        bump_gen();
        log_ctx_set("SANDBOX_ID", sb.id);
        log_info("preview revoked: port %u", r->m.pid);
        cJSON *d = cJSON_CreateObject();
        json_add_int(d, "port", r->m.pid);
        return respond_envelope(r, 200, "Preview deleted", d);
}

/* ---- the proxy ---- */

struct hdr {
        const char *name, *value;   /* NUL-terminated inside the connection's head buffer */
};

/* Where a chunked request body ends (RFC 9112 7.1), fed the body's bytes as they come. */
enum { CS_SIZE, CS_EXT, CS_SIZE_LF, CS_DATA, CS_DATA_CR, CS_DATA_LF, CS_TRAILER_START, CS_TRAILER, CS_TRAILER_LF,
       CS_END_LF, CS_DONE, CS_ERR };
struct chunk_scan {
        int st;
        unsigned digits;
        uint64_t size;
};

/* What the client may still send into the sandbox: the one request's body, then nothing (a
 * request pipelined after it never reaches the app unrewritten: we answer one request per
 * connection), or everything once the server switched protocols (101). */
enum flow { FLOW_BODY, FLOW_HOLD, FLOW_RAW };

struct pconn {
        int fd;
        char peer[INET6_ADDRSTRLEN];
        char head[256 * 1024 + 1];   /* [preview] max_header is at most 256 KiB */
        size_t head_len, got;        /* head bytes (to the blank line); bytes read in all */
        char *method, *target, *version;
        struct hdr h[MAX_HEADERS];
        size_t n_h;
        /* the route */
        char id[SANDBOX_ID_LEN + 1];
        int port;
        bool path_form;
        const char *rest;            /* target after /p/<id>/<port> (path form), else target */
        bool counted_sb;
        const char *scheme;          /* X-Forwarded-Proto; NULL: the preview settings say */
        bool secure;                 /* https: our cookie is __Host- and Secure */
        /* the request's framing */
        bool upgrade;                /* asked to switch protocols */
        bool chunked;
        uint64_t body_left;          /* Content-Length bytes still to pass */
        struct chunk_scan cs;
        enum flow flow;
        char status[12];             /* the answer's first bytes, to see a 101 */
        size_t status_len;
};

/* A whole write to the client, bounded: a client that stops reading holds us SEND_TIMEOUT_MS. */
static bool send_all(int fd, const void *p, size_t n) {
        return fd_send_all(fd, p, n, mono_ms() + SEND_TIMEOUT_MS) == 0;
}

static void page(struct pconn *pc, int status, const char *reason, const char *extra_headers, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static void page(struct pconn *pc, int status, const char *reason, const char *extra_headers, const char *fmt, ...) {
        char msg[1024], body[2048], head[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        int bn = snprintf(body, sizeof(body),
                          "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>%d %s</title></head>\n"
                          "<body style=\"font-family:sans-serif;margin:3em\"><h1>%d %s</h1>\n<p>%s</p>\n"
                          "<p style=\"color:#777\">Paddock preview</p></body></html>\n",
                          status, reason, status, reason, msg);
        int hn = snprintf(head, sizeof(head),
                          "HTTP/1.1 %d %s\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %d\r\n"
                          "Cache-Control: no-store\r\nConnection: close\r\nX-Paddock-Preview-Error: %s\r\n%s\r\n",
                          status, reason, bn, msg, extra_headers ? extra_headers : "");
        (void) send_all(pc->fd, head, (size_t) hn);
        if (!pc->method || strcmp(pc->method, "HEAD"))
                (void) send_all(pc->fd, body, (size_t) bn);
}

static const char *header(const struct pconn *pc, const char *name) {
        for (size_t i = 0; i < pc->n_h; i++)
                if (!strcasecmp(pc->h[i].name, name))
                        return pc->h[i].value;
        return NULL;
}

static bool tchar(char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || strchr("!#$%&'*+-.^_`|~", ch);
}

/* Reads the head (to the blank line) within timeout_ms of now and max bytes: 0, or an HTTP
 * status to answer (408, 431, 400), or -1 when the client went away. */
static int read_head(struct pconn *pc, size_t max, uint64_t timeout_ms) {
        int64_t deadline = mono_ms() + (int64_t) timeout_ms;
        for (;;) {
                char *end = pc->got >= 4 ? memmem(pc->head, pc->got, "\r\n\r\n", 4) : NULL;
                if (end) {
                        pc->head_len = (size_t) (end - pc->head) + 4;
                        return 0;
                }
                if (pc->got >= max)
                        return 431;
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return 408;
                if (PV.L.stopping || (PV.c && PV.c->stopping))
                        return -1;
                struct pollfd pfd = { .fd = pc->fd, .events = POLLIN };
                int k = poll(&pfd, 1, (int) (left < 1000 ? left : 1000));
                if (k < 0 && errno != EINTR)
                        return -1;
                if (k <= 0)
                        continue;
                ssize_t n = recv(pc->fd, pc->head + pc->got, max - pc->got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -1;
                pc->got += (size_t) n;
        }
}

/* Splits the head in place: request line and headers. 0 or 400. */
static int parse_head(struct pconn *pc) {
        char *s = pc->head, *end = pc->head + pc->head_len - 2;   /* at the final CRLF */
        char *eol = memmem(s, (size_t) (end - s), "\r\n", 2);
        if (!eol)
                return 400;
        *eol = 0;
        if (strlen(s) != (size_t) (eol - s))
                return 400;   /* a NUL in the request line */
        char *sp1 = strchr(s, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp1 || !sp2 || strchr(sp2 + 1, ' '))
                return 400;
        *sp1 = *sp2 = 0;
        pc->method = s;
        pc->target = sp1 + 1;
        pc->version = sp2 + 1;
        if (!*pc->method || pc->target[0] != '/' || (strcmp(pc->version, "HTTP/1.1") && strcmp(pc->version, "HTTP/1.0")))
                return 400;
        for (const char *m = pc->method; *m; m++)
                if (!tchar(*m))
                        return 400;
        for (const char *t = pc->target; *t; t++)
                if ((unsigned char) *t <= 0x20 || *t == 0x7f)
                        return 400;
        s = eol + 2;
        while (s < end) {
                eol = memmem(s, (size_t) (end + 2 - s), "\r\n", 2);
                if (!eol || pc->n_h >= MAX_HEADERS)
                        return 400;
                *eol = 0;
                char *colon = strchr(s, ':');
                if (!colon || colon == s || (size_t) (eol - s) != strlen(s))
                        return 400;   /* no name, obs-fold, or a NUL */
                for (char *q = s; q < colon; q++)
                        if (!tchar(*q))
                                return 400;
                *colon = 0;
                char *v = colon + 1;
                while (*v == ' ' || *v == '\t')
                        v++;
                char *ve = eol;
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                        *--ve = 0;
                for (char *q = v; *q; q++)
                        if (*q == '\r' || *q == '\n')
                                return 400;
                pc->h[pc->n_h++] = (struct hdr) { s, v };
                s = eol + 2;
        }
        return 0;
}

static bool parse_port(const char *s, size_t n, int *ret) {
        int v = 0;
        if (n == 0 || n > 5 || s[0] == '0')
                return false;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                v = v * 10 + (s[i] - '0');
        }
        if (v < 1 || v > 65535)
                return false;
        *ret = v;
        return true;
}

static bool hex24(const char *s) {
        for (int i = 0; i < SANDBOX_ID_LEN; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* Finds the preview a request is for: Host <port>-<id>.<domain> (domain's own :port, if any,
 * not compared), else, when path_form, /p/<id>/<port>/. */
static bool route(struct pconn *pc, const char *domain, bool path_form) {
        const char *host = header(pc, "Host");
        if (*domain && host) {
                const char *dash = strchr(host, '-');
                size_t dl = strcspn(domain, ":");
                if (dash && strlen(dash + 1) >= SANDBOX_ID_LEN + 1 + dl && hex24(dash + 1) &&
                    dash[1 + SANDBOX_ID_LEN] == '.' && !strncasecmp(dash + 2 + SANDBOX_ID_LEN, domain, dl)) {
                        const char *after = dash + 2 + SANDBOX_ID_LEN + dl;
                        if ((*after == 0 || *after == ':') && parse_port(host, (size_t) (dash - host), &pc->port)) {
                                memcpy(pc->id, dash + 1, SANDBOX_ID_LEN);
                                pc->id[SANDBOX_ID_LEN] = 0;
                                pc->rest = pc->target;
                                return true;
                        }
                }
        }
        const char *t = pc->target;
        if (!path_form || strncmp(t, "/p/", 3) || strlen(t) < 3 + SANDBOX_ID_LEN + 2 || !hex24(t + 3) || t[3 + SANDBOX_ID_LEN] != '/')
                return false;
        const char *ps = t + 4 + SANDBOX_ID_LEN, *pe = ps + strcspn(ps, "/?");
        if (!parse_port(ps, (size_t) (pe - ps), &pc->port))
                return false;
        memcpy(pc->id, t + 3, SANDBOX_ID_LEN);
        pc->id[SANDBOX_ID_LEN] = 0;
        pc->path_form = true;
        pc->rest = pe;
        return true;
}

/* The value of our token parameter in the query of target (xmalloc'd, raw), or NULL; and
 * target without it in *ret_stripped. */
static char *take_query_token(const char *target, char **ret_stripped) {
        const char *q = strchr(target, '?');
        char *tok = NULL;
        struct strbuf out;
        strbuf_init(&out, 0);
        strbuf_append(&out, target, q ? (size_t) (q - target) : strlen(target));
        if (q) {
                const char *s = q + 1;
                bool first = true;
                while (*s) {
                        const char *e = strchrnul(s, '&');
                        size_t n = (size_t) (e - s);
                        size_t pl = strlen(TOKEN_PARAM);
                        if (n > pl && !strncmp(s, TOKEN_PARAM "=", pl + 1)) {
                                free(tok);
                                tok = xstrndup(s + pl + 1, n - pl - 1);
                        } else if (n) {
                                strbuf_append(&out, first ? "?" : "&", 1);
                                strbuf_append(&out, s, n);
                                first = false;
                        }
                        s = *e ? e + 1 : e;
                }
        }
        *ret_stripped = strbuf_steal(&out);
        return tok;
}

static void cookie_name(const struct pconn *pc, char out[64]) {
        snprintf(out, 64, "%s" COOKIE_PREFIX "%d_%s", pc->secure ? HOST_PREFIX : "", pc->port, pc->id);
}

/* Any preview's cookie (ours, of any preview, with or without __Host-): never for the app. */
static bool our_cookie(const char *s, size_t n) {
        size_t hl = strlen(HOST_PREFIX), pl = strlen(COOKIE_PREFIX);
        if (n >= hl && !strncmp(s, HOST_PREFIX, hl))
                s += hl, n -= hl;
        return n >= pl && !strncmp(s, COOKIE_PREFIX, pl);
}

/* Our cookie's value from the Cookie headers (xmalloc'd), or NULL. */
static char *cookie_token(const struct pconn *pc) {
        char name[64];
        cookie_name(pc, name);
        size_t nl = strlen(name);
        for (size_t i = 0; i < pc->n_h; i++) {
                if (strcasecmp(pc->h[i].name, "Cookie"))
                        continue;
                const char *s = pc->h[i].value;
                while (*s) {
                        while (*s == ' ' || *s == ';')
                                s++;
                        const char *e = strchrnul(s, ';');
                        if ((size_t) (e - s) > nl && !strncmp(s, name, nl) && s[nl] == '=')
                                return xstrndup(s + nl + 1, (size_t) (e - s) - nl - 1);
                        s = e;
                }
        }
        return NULL;
}

/* Cookie header values without our cookies ("" when nothing else is left). */
static char *cookies_without_ours(const char *value) {
        struct strbuf out;
        strbuf_init(&out, 0);
        const char *s = value;
        while (*s) {
                while (*s == ' ' || *s == ';')
                        s++;
                const char *e = strchrnul(s, ';');
                if (e > s && !our_cookie(s, (size_t) (e - s))) {
                        if (out.len)
                                strbuf_append(&out, "; ", 2);
                        strbuf_append(&out, s, (size_t) (e - s));
                }
                s = e;
        }
        return strbuf_steal(&out) ?: xstrdup("");
}

/* Headers that never reach the app as the client sent them: hop-by-hop ones, ours (the
 * preview token, E2B's traffic token), and what a proxy vouches for (we set our own). */
static bool hop_by_hop(const char *name) {
        static const char *const drop[] = { "Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
                                             "Upgrade", "Host", TOKEN_HEADER, "e2b-traffic-access-token", "Forwarded",
                                             "X-Real-IP", "X-Client-IP", "True-Client-IP" };
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                if (!strcasecmp(name, drop[i]))
                        return true;
        return !strncasecmp(name, "X-Forwarded-", strlen("X-Forwarded-"));
}

/* The head as it goes to the sandbox (scheme: X-Forwarded-Proto). */
static char *rewrite_head(struct pconn *pc, bool keep_host, const char *target, const char *scheme) {
        struct strbuf b;
        strbuf_init(&b, 0);
        const char *upgrade = header(pc, "Upgrade");
        const char *host = header(pc, "Host");
        strbuf_printf(&b, "%s %s %s\r\n", pc->method, target, pc->version);
        if (keep_host && host)
                strbuf_printf(&b, "Host: %s\r\n", host);
        else
                strbuf_printf(&b, "Host: localhost:%d\r\n", pc->port);
        for (size_t i = 0; i < pc->n_h; i++) {
                if (!strcasecmp(pc->h[i].name, "Cookie")) {
                        _cleanup_free_ char *rest = cookies_without_ours(pc->h[i].value);
                        if (*rest)
                                strbuf_printf(&b, "Cookie: %s\r\n", rest);
                        continue;
                }
                if (hop_by_hop(pc->h[i].name))
                        continue;
                strbuf_printf(&b, "%s: %s\r\n", pc->h[i].name, pc->h[i].value);
        }
        if (upgrade) {
                strbuf_printf(&b, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade);
        } else
                strbuf_printf(&b, "Connection: close\r\n");
        strbuf_printf(&b, "X-Forwarded-For: %s\r\nX-Forwarded-Proto: %s\r\n", pc->peer, scheme);
        if (host)
                strbuf_printf(&b, "X-Forwarded-Host: %s\r\n", host);
        strbuf_append(&b, "\r\n", 2);
        return strbuf_steal(&b);
}

/* How the request's body ends (RFC 9112 6.3): 0, or 400 for what a proxy must refuse (both
 * Content-Length and Transfer-Encoding, a coding other than chunked last, Content-Lengths that
 * disagree or are no number). */
static int framing(struct pconn *pc) {
        const char *te = NULL, *cl = NULL;
        for (size_t i = 0; i < pc->n_h; i++) {
                if (!strcasecmp(pc->h[i].name, "Transfer-Encoding")) {
                        if (te)
                                return 400;
                        te = pc->h[i].value;
                } else if (!strcasecmp(pc->h[i].name, "Content-Length")) {
                        if (cl && strcmp(cl, pc->h[i].value))
                                return 400;
                        cl = pc->h[i].value;
                }
        }
        pc->upgrade = header(pc, "Upgrade") != NULL;
        pc->flow = FLOW_BODY;
        if (te) {
                size_t n = strlen(te);
                if (cl || n < 7 || strcasecmp(te + n - 7, "chunked") || (n > 7 && te[n - 8] != ' ' && te[n - 8] != ','))
                        return 400;
                pc->chunked = true;
                return 0;
        }
        if (cl) {
                uint64_t v = 0;
                if (!*cl || strlen(cl) > 18)
                        return 400;
                for (const char *q = cl; *q; q++) {
                        if (*q < '0' || *q > '9')
                                return 400;
                        v = v * 10 + (uint64_t) (*q - '0');
                }
                pc->body_left = v;
        }
        if (!pc->chunked && pc->body_left == 0)
                pc->flow = FLOW_HOLD;
        return 0;
}

/* Feeds n body bytes to the chunk scanner: how many belong to the body (the rest is what came
 * after it); cs->st is CS_DONE at its end, CS_ERR on a malformed body. */
static size_t chunk_feed(struct chunk_scan *cs, const uint8_t *p, size_t n) {
        size_t i = 0;
        while (i < n && cs->st != CS_DONE && cs->st != CS_ERR) {
                uint8_t ch = p[i];
                switch (cs->st) {
                case CS_SIZE: {
                        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
                        if (v >= 0 && cs->digits < 15) {
                                cs->size = cs->size * 16 + (uint64_t) v;
                                cs->digits++;
                        } else if (cs->digits && (ch == ';' || ch == ' ' || ch == '\t'))
                                cs->st = CS_EXT;
                        else if (cs->digits && ch == '\r')
                                cs->st = CS_SIZE_LF;
                        else
                                cs->st = CS_ERR;
                        i++;
                        break;
                }
                case CS_EXT:
                        if (ch == '\r')
                                cs->st = CS_SIZE_LF;
                        else if (ch == '\n')
                                cs->st = CS_ERR;
                        i++;
                        break;
                case CS_SIZE_LF:
                        cs->st = ch != '\n' ? CS_ERR : cs->size ? CS_DATA : CS_TRAILER_START;
                        i++;
                        break;
                case CS_DATA: {
                        size_t take = n - i < cs->size ? n - i : (size_t) cs->size;
                        cs->size -= take;
                        i += take;
                        if (!cs->size)
                                cs->st = CS_DATA_CR;
                        break;
                }
                case CS_DATA_CR:
                        cs->st = ch == '\r' ? CS_DATA_LF : CS_ERR;
                        i++;
                        break;
                case CS_DATA_LF:
                        cs->st = ch == '\n' ? CS_SIZE : CS_ERR;
                        cs->digits = 0;
                        cs->size = 0;
                        i++;
                        break;
                case CS_TRAILER_START:
                        cs->st = ch == '\r' ? CS_END_LF : ch == '\n' ? CS_ERR : CS_TRAILER;
                        i++;
                        break;
                case CS_TRAILER:
                        if (ch == '\r')
                                cs->st = CS_TRAILER_LF;
                        else if (ch == '\n')
                                cs->st = CS_ERR;
                        i++;
                        break;
                case CS_TRAILER_LF:
                        cs->st = ch == '\n' ? CS_TRAILER_START : CS_ERR;
                        i++;
                        break;
                case CS_END_LF:
                        cs->st = ch == '\n' ? CS_DONE : CS_ERR;
                        i++;
                        break;
                default:
                        cs->st = CS_ERR;
                        break;
                }
        }
        return i;
}

/* Of n bytes from the client, how many go into the sandbox; the flow moves on at the body's
 * end. -1: a malformed chunked body (the connection ends). */
static ssize_t client_take(struct pconn *pc, const uint8_t *p, size_t n) {
        switch (pc->flow) {
        case FLOW_RAW:
                return (ssize_t) n;
        case FLOW_HOLD:
                return 0;
        case FLOW_BODY:
                break;
        }
        size_t take;
        if (pc->chunked) {
                take = chunk_feed(&pc->cs, p, n);
                if (pc->cs.st == CS_ERR)
                        return -1;
                if (pc->cs.st == CS_DONE)
                        pc->flow = FLOW_HOLD;
        } else {
                take = n < pc->body_left ? n : (size_t) pc->body_left;
                pc->body_left -= take;
                if (!pc->body_left)
                        pc->flow = FLOW_HOLD;
        }
        return (ssize_t) take;
}

/* The answer's first bytes: a 101 to an upgrade request lets the client's bytes pass raw. */
static void saw_answer(struct pconn *pc, const uint8_t *p, size_t n) {
        size_t want = sizeof(pc->status) - pc->status_len;
        if (!want)
                return;
        if (n > want)
                n = want;
        memcpy(pc->status + pc->status_len, p, n);
        pc->status_len += n;
        if (pc->status_len == sizeof(pc->status) && pc->upgrade && pc->flow == FLOW_HOLD &&
            (!memcmp(pc->status, "HTTP/1.1 101", 12) || !memcmp(pc->status, "HTTP/1.0 101", 12)))
                pc->flow = FLOW_RAW;
}

/* Still the same preview, unexpired? (after a revocation or a replacement: no) */
static bool still_valid(const struct preview *p) {
        struct preview now = { 0 };
        if (store_preview_get(PV.c->store, p->sandbox_id, p->port, &now) < 0)
                return false;
        return now.expires_at > now_ms() && !strcmp(now.token_sha256, p->token_sha256);
}

/* Bytes both ways until one side ends both directions, idles out, or the preview goes. */
static void pump(struct pconn *pc, struct agent_client *ac, const struct preview *p, int slot) {
        const struct config *cfg = PV.c->cfg;
        uint8_t *buf = xmalloc(CHUNK);
        bool agent_eof = false;
        uint64_t in = 0, out = 0;
        unsigned gen = gen_now();
        int64_t last = mono_ms(), next_check = last + CHECK_MS;
        /* what came after the head in the first read: the body's start (and no more) */
        if (pc->got > pc->head_len) {
                ssize_t n = client_take(pc, (uint8_t *) pc->head + pc->head_len, pc->got - pc->head_len);
                struct pj_agent_msg m = { .type = PJ_AGENT_DATA, .id = 1, .data = (uint8_t *) pc->head + pc->head_len,
                                          .data_len = (size_t) n };
                if (n < 0 || (n > 0 && agent_client_send(ac, &m, SEND_TIMEOUT_MS) < 0))
                        goto done;
                in += (uint64_t) n;
        }
        while (!agent_eof && !PV.L.stopping && !PV.c->stopping) {
                /* On a clock, whatever the traffic: a revoked, replaced or expired preview, or an
                 * idle connection, ends here even while bytes flow both ways. */
                int64_t now = mono_ms();
                if (now >= next_check) {
                        next_check = now + CHECK_MS;
                        if (now - last > (int64_t) cfg->preview_idle_timeout_s * 1000)
                                break;
                        if (p && now_ms() >= p->expires_at)
                                break;
                        unsigned g = gen_now();
                        if (p && g != gen) {
                                gen = g;
                                if (!still_valid(p))
                                        break;
                        }
                }
                /* the client is read only while its bytes may pass (its request's body, or a
                 * switched protocol); its going away (FIN: HTTP clients do not half-close and
                 * wait) shows all the same */
                struct pollfd pfd[2] = { { .fd = pc->fd, .events = pc->flow == FLOW_HOLD ? POLLRDHUP : POLLIN },
                                         { .fd = agent_client_fd(ac), .events = POLLIN } };
                /* frames already buffered in the client first */
                struct agent_frame f;
                struct pj_error pe = { 0 };
                int k = agent_client_try_recv(ac, &f, &pe);
                if (k < 0)
                        break;
                if (k == 1) {
                        last = mono_ms();
                        bool stop = false;
                        if (f.m.type == PJ_AGENT_DATA && f.m.id == 1) {
                                saw_answer(pc, f.m.data, f.m.data_len);
                                if (!send_all(pc->fd, f.m.data, f.m.data_len))
                                        stop = true;
                                out += f.m.data_len;
                        } else if (f.m.type == PJ_AGENT_END) {
                                agent_eof = true;
                                (void) shutdown(pc->fd, SHUT_WR);
                        } else
                                stop = true;   /* ERROR, or anything else: the channel is over */
                        agent_frame_done(&f);
                        if (stop)
                                break;
                        continue;
                }
                int64_t wait = next_check - mono_ms();
                k = poll(pfd, 2, (int) (wait < 0 ? 0 : wait > CHECK_MS ? CHECK_MS : wait));
                if (k < 0 && errno != EINTR)
                        break;
                if (pc->flow == FLOW_HOLD && (pfd[0].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                        /* gone while we were not reading it: tell the server, free the place */
                        struct pj_agent_msg m = { .type = PJ_AGENT_END, .id = 1 };
                        (void) agent_client_send(ac, &m, 1000);
                        break;
                }
                if (pc->flow != FLOW_HOLD && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                        ssize_t n = recv(pc->fd, buf, CHUNK, 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        last = mono_ms();
                        if (n <= 0) {
                                /* The client is gone (as nginx does, a half-close counts as going:
                                 * HTTP clients do not half-close and wait): tell the server, free
                                 * the place. */
                                struct pj_agent_msg m = { .type = PJ_AGENT_END, .id = 1 };
                                (void) agent_client_send(ac, &m, 1000);
                                break;
                        } else {
                                /* the body's bytes only; what a client pipelines after it is dropped */
                                ssize_t take = client_take(pc, buf, (size_t) n);
                                if (take < 0)
                                        break;
                                struct pj_agent_msg m = { .type = PJ_AGENT_DATA, .id = 1, .data = buf, .data_len = (size_t) take };
                                if (take > 0 && agent_client_send(ac, &m, SEND_TIMEOUT_MS) < 0)
                                        break;
                                in += (uint64_t) take;
                        }
                }
        }
done:
        free(buf);
        count(slot, 0, in, out);
}

/* The sandbox is ready and the request allowed: FORWARD to the port inside, the head
 * rewritten, then bytes both ways (p: the preview, NULL for E2B's port URLs). */
static void forward(struct pconn *pc, const struct sandbox *sb, const struct preview *p, bool keep_host, const char *target,
                    int slot) {
        char err[512] = "";
        _cleanup_(agent_client_freep) struct agent_client *ac = NULL;
        int k = agent_connect(PV.c, sb, &ac, err, sizeof(err));
        if (k < 0) {
                log_ctx_set("SANDBOX_ID", sb->id);
                log_notice("preview of port %d: the agent did not answer: %s", pc->port, err);
                return page(pc, 502, "Bad Gateway", NULL, "The sandbox's agent is not answering, so the preview cannot reach it.");
        }
        struct pj_agent_msg fwd = { .type = PJ_AGENT_FORWARD, .id = 1, .f.port = (uint32_t) pc->port };
        if (agent_client_send(ac, &fwd, SEND_TIMEOUT_MS) < 0)
                return page(pc, 502, "Bad Gateway", NULL, "The sandbox's agent is not answering.");
        struct agent_frame f;
        struct pj_error pe = { 0 };
        k = agent_client_recv(ac, FORWARD_TIMEOUT_MS, &f, &pe);
        if (k < 0)
                return page(pc, 504, "Gateway Timeout", NULL, "The sandbox's agent did not answer in time.");
        bool ok = f.m.type == PJ_AGENT_OK && f.m.id == 1;
        int e = f.m.type == PJ_AGENT_ERROR ? (int) f.m.f.err : 0;
        agent_frame_done(&f);
        if (!ok) {
                if (e == ECONNREFUSED)
                        return page(pc, 502, "Bad Gateway", NULL,
                                    "Nothing is listening on port %d inside the sandbox. Start a server there (listening on "
                                    "127.0.0.1 or 0.0.0.0) and reload.",
                                    pc->port);
                return page(pc, 502, "Bad Gateway", NULL, "Port %d inside the sandbox cannot be reached: %s.", pc->port,
                            e ? strerror(e) : "unexpected answer");
        }
        _cleanup_free_ char *head = rewrite_head(pc, keep_host, target, pc->scheme ? pc->scheme : pc->secure ? "https" : "http");
        struct pj_agent_msg m = { .type = PJ_AGENT_DATA, .id = 1, .data = (uint8_t *) head, .data_len = strlen(head) };
        if (agent_client_send(ac, &m, SEND_TIMEOUT_MS) < 0)
                return page(pc, 502, "Bad Gateway", NULL, "The sandbox's agent stopped answering.");
        count(slot, 0, m.data_len, 0);
        pump(pc, ac, p, slot);
}

/* The domain Host-form URLs are under: [preview] domain, else localhost. */
static const char *url_domain(const struct config *cfg) {
        return *cfg->preview_domain ? cfg->preview_domain : "localhost";
}

static void serve(struct pconn *pc) {
        const struct config *cfg = PV.c->cfg;
        int k = read_head(pc, cfg->preview_max_header, cfg->preview_head_timeout_ms);
        if (k < 0)
                return;
        if (k == 408)
                return page(pc, 408, "Request Timeout", NULL, "The request head did not arrive in time.");
        if (k == 431)
                return page(pc, 431, "Request Header Fields Too Large", NULL, "The request head is larger than %llu bytes.",
                            (unsigned long long) cfg->preview_max_header);
        if (parse_head(pc) != 0 || framing(pc) != 0) {
                pc->method = NULL;
                return page(pc, 400, "Bad Request", NULL, "The request is not valid HTTP/1.1.");
        }
        if (!route(pc, url_domain(cfg), cfg->preview_path_form)) {
                count(M_UNKNOWN, 1, 0, 0);
                return page(pc, 404, "Not Found", NULL,
                            "This is Paddock's preview server: a preview URL looks like &lt;port&gt;-&lt;sandbox id&gt;.%s%s.",
                            url_domain(cfg), cfg->preview_path_form ? " or /p/&lt;sandbox id&gt;/&lt;port&gt;/" : "");
        }
        pc->secure = !pc->path_form && *cfg->preview_domain && !strcmp(cfg->preview_scheme, "https");
        if (pc->path_form && *pc->rest != '/') {
                /* /p/<id>/<port> alone: relative links need the trailing slash */
                char loc[1200];
                if (strlen(pc->rest) > 1024)
                        return page(pc, 414, "URI Too Long", NULL, "The URL is too long.");
                snprintf(loc, sizeof(loc), "Location: /p/%s/%d/%s\r\n", pc->id, pc->port, pc->rest);
                return page(pc, 308, "Permanent Redirect", loc, "The preview is at /p/%s/%d/.", pc->id, pc->port);
        }
        struct preview p = { 0 };
        if (store_preview_get(PV.c->store, pc->id, pc->port, &p) < 0) {
                count(M_UNKNOWN, 1, 0, 0);
                return page(pc, 404, "Not Found", NULL, "There is no preview of port %d on sandbox %s (never made, or revoked).",
                            pc->port, pc->id);
        }
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (store_sandbox_get(PV.c->store, pc->id, &sb) < 0 || strcmp(sb.account_id, p.account_id)) {
                count(M_UNKNOWN, 1, 0, 0);
                return page(pc, 404, "Not Found", NULL, "Sandbox %s does not exist.", pc->id);
        }
        int slot = (int) sb.status;
        count(slot, 1, 0, 0);
        if (p.expires_at <= now_ms())
                return page(pc, 410, "Gone", NULL, "This preview expired.");
        /* the token: header, our query parameter, or our cookie */
        _cleanup_free_ char *stripped = NULL;
        _cleanup_free_ char *qtok = take_query_token(pc->rest, &stripped);
        _cleanup_free_ char *ctok = cookie_token(pc);
        const char *htok = header(pc, TOKEN_HEADER);
        if (!p.public_) {
                const char *tok = htok ? htok : qtok ? qtok : ctok;
                if (!tok)
                        return page(pc, 401, "Unauthorized", NULL,
                                    "This preview needs its token: open the URL with ?" TOKEN_PARAM "=&lt;token&gt; once, or send "
                                    "the " TOKEN_HEADER " header.");
                if (!token_ok(&p, tok))
                        return page(pc, 403, "Forbidden", NULL, "The token is not this preview's (wrong, replaced or revoked).");
                if (qtok && !htok && (!strcmp(pc->method, "GET") || !strcmp(pc->method, "HEAD"))) {
                        /* once: the cookie from now on, and the URL without the token */
                        char name[64], hdrs[1024 + 512];
                        if (strlen(stripped) > 400)
                                return page(pc, 414, "URI Too Long", NULL, "The URL is too long.");
                        cookie_name(pc, name);
                        int64_t age = (p.expires_at - now_ms()) / 1000;
                        /* Location: the same URL without the token */
                        char loc[512];
                        if (pc->path_form)
                                snprintf(loc, sizeof(loc), "/p/%s/%d%s", pc->id, pc->port, stripped);
                        else
                                snprintf(loc, sizeof(loc), "%s", stripped);
                        snprintf(hdrs, sizeof(hdrs),
                                 "Set-Cookie: %s=%s; Path=/%s%s; Max-Age=%lld; HttpOnly; SameSite=Lax%s\r\nLocation: %s\r\n",
                                 name, qtok, pc->path_form ? "p/" : "", pc->path_form ? pc->id : "",
                                 (long long) (age > 0 ? age : 1), pc->secure ? "; Secure" : "", loc);
                        return page(pc, 302, "Found", hdrs, "The preview continues at the same URL without the token.");
                }
        }
        if (sb.status == SB_PAUSED || sb.status == SB_PAUSING)
                return page(pc, 503, "Service Unavailable", "Retry-After: 10\r\n",
                            "Sandbox %s is paused: resume it and this preview works again.", sb.id);
        if (sb.status == SB_DESTROYED || sb.status == SB_FAILED)
                return page(pc, 410, "Gone", NULL, "Sandbox %s is %s.", sb.id, sb_status_str(sb.status));
        if (sb.status != SB_READY)
                return page(pc, 503, "Service Unavailable", "Retry-After: 2\r\n", "Sandbox %s is %s.", sb.id,
                            sb_status_str(sb.status));
        if (!sb_counts_take(&PV.per, sb.id, cfg->preview_per_sandbox))
                return page(pc, 429, "Too Many Requests", "Retry-After: 1\r\n",
                            "This sandbox already has %lld preview connections open.", (long long) cfg->preview_per_sandbox);
        pc->counted_sb = true;
        const char *target = pc->path_form ? (*stripped ? stripped : "/") : stripped;
        forward(pc, &sb, &p, p.keep_host, target, slot);
}

static void serve_conn(struct listener *l, int fd, const struct sockaddr_storage *sa, socklen_t sl, const char *peer, void *ud) {
        (void) l;
        (void) sa;
        (void) sl;
        (void) ud;
        struct pconn *pc = xnew0(struct pconn, 1);
        pc->fd = fd;
        snprintf(pc->peer, sizeof(pc->peer), "%s", peer);
        serve(pc);
        if (pc->counted_sb)
                sb_counts_give(&PV.per, pc->id);
        close(pc->fd);
        free(pc);
}

int preview_start(struct ctl *c) {
        const struct config *cfg = c->cfg;
        PV.c = c;
        if (!cfg->preview_listen_addr) {
                log_info("preview URLs off ([preview] listen unset)");
                return 0;
        }
        sb_counts_init(&PV.per, (size_t) cfg->preview_max_connections);
        PV.L.name = "preview listener";
        PV.L.max_conns = cfg->preview_max_connections;
        PV.L.max_per_addr = cfg->preview_per_address;
        PV.L.serve = serve_conn;
        int r = listener_start(&PV.L, cfg->preview_listen_addr, cfg->preview_listen_port);
        if (r < 0)
                return r;
        log_info("preview URLs on %s:%d (<port>-<id>.%s%s)", cfg->preview_listen_addr, PV.L.port,
                 *cfg->preview_domain ? cfg->preview_domain : "localhost:", *cfg->preview_domain ? "" : "<listen port>");
        if (cfg->preview_path_form)
                log_warning("[preview] path_form = true: preview URLs /p/<id>/<port>/ put every preview of every account on one "
                            "browser origin, so one preview's page can read another's answers and cookies; use the "
                            "<port>-<id>.<domain> form (the default) wherever untrusted code runs");
        return 0;
}

int preview_port(void) {
        return PV.L.port;
}

void preview_stop(void) {
        if (!PV.L.running)
                return;
        /* connection threads notice within a second; they use the store, so wait for them */
        if (listener_stop(&PV.L, 15))
                sb_counts_done(&PV.per);
        else
                log_warning("preview listener: connections still open at stop");
}

void preview_forward_conn(struct ctl *c, int fd, const char *peer, const struct sandbox *sb, int port, uint64_t max_header) {
        struct pconn *pc = xnew0(struct pconn, 1);
        pc->fd = fd;
        snprintf(pc->peer, sizeof(pc->peer), "%s", peer ? peer : "");
        pc->port = port;
        pc->scheme = "http";
        snprintf(pc->id, sizeof(pc->id), "%s", sb->id);
        if (!PV.c)
                PV.c = c;
        int k = read_head(pc, max_header < sizeof(pc->head) - 1 ? max_header : sizeof(pc->head) - 1, c->cfg->e2b_head_timeout_ms);
        if (k == 408)
                page(pc, 408, "Request Timeout", NULL, "The request head did not arrive in time.");
        else if (k == 431)
                page(pc, 431, "Request Header Fields Too Large", NULL, "The request head is too large.");
        else if (k == 0 && (parse_head(pc) != 0 || framing(pc) != 0)) {
                pc->method = NULL;
                page(pc, 400, "Bad Request", NULL, "The request is not valid HTTP/1.1.");
        } else if (k == 0) {
                pc->rest = pc->target;
                int slot = (int) sb->status;
                count(slot, 1, 0, 0);
                forward(pc, sb, NULL, false, pc->target, slot);
        }
        close(pc->fd);
        free(pc);
}

/* preview_head_check's part past routing. */
static char *head_check_routed(struct pconn *pc, bool path_form) {
        pc->secure = !pc->path_form;
        _cleanup_free_ char *stripped = NULL;
        _cleanup_free_ char *qtok = take_query_token(pc->rest, &stripped);
        _cleanup_free_ char *ctok = cookie_token(pc);
        _cleanup_free_ char *head = rewrite_head(pc, path_form, stripped, "https");
        /* what the app receives: one head, never a second request of the client's */
        size_t hl = strlen(head);
        if (hl < 4 || memmem(head, hl, "\r\n\r\n", 4) != head + hl - 4)
                abort();
        size_t off = pc->head_len;
        while (off < pc->got) {
                ssize_t k = client_take(pc, (const uint8_t *) pc->head + off, pc->got - off);
                if (k <= 0)
                        break;
                off += (size_t) k;
        }
        saw_answer(pc, (const uint8_t *) "HTTP/1.1 101 Switching", 22);
        return TAKE_PTR(head);
}

int preview_head_check(const uint8_t *buf, size_t n, const char *domain, bool path_form, char **ret_head) {
        struct pconn *pc = xnew0(struct pconn, 1);
        int st = 0;
        pc->fd = -1;
        pc->got = n < sizeof(pc->head) - 1 ? n : sizeof(pc->head) - 1;
        memcpy(pc->head, buf, pc->got);
        char *end = pc->got >= 4 ? memmem(pc->head, pc->got, "\r\n\r\n", 4) : NULL;
        if (!end)
                st = 431;
        else {
                pc->head_len = (size_t) (end - pc->head) + 4;
                if (parse_head(pc) != 0 || framing(pc) != 0)
                        st = 400;
                else if (!route(pc, domain, path_form))
                        st = 404;
                else {
                        char *h = head_check_routed(pc, path_form);
                        if (ret_head)
                                *ret_head = h;
                        else
                                free(h);
                }
        }
        free(pc);
        return st;
}
