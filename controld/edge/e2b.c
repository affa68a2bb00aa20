/* e2b.c — E2B's API on a listener of its own ([e2b] listen): E2B's SDKs (npm `e2b`, the
 * Python `e2b`) work against Paddock when E2B_API_URL and E2B_SANDBOX_URL (or E2B_DOMAIN)
 * point here.
 *
 * One listener serves three things, told apart by each connection's first request head
 * (peeked, not read, so the server that takes the connection reads it whole):
 *   - the control plane (E2B's openapi.yml: POST /sandboxes, GET /v2/sandboxes, ...), keys
 *     in X-API-Key;
 *   - envd's surface for port 49983 (envd.c): requests naming the sandbox in the
 *     E2b-Sandbox-Id header (E2B_SANDBOX_URL) or by Host 49983-<id>.<domain>;
 *   - any other port: Host <port>-<id>.<domain> (sandbox.getHost(port)) or E2b-Sandbox-Port,
 *     passed to that port inside the sandbox through its agent, as a preview is.
 * The first two run on a libmicrohttpd server without a listener of its own (http.c), the
 * third on preview.c's forwarder. A sandbox made here is an ordinary Paddock sandbox: the
 * same record, quotas, reapers, egress, metrics and journal, visible through the Brimble API.
 *
 * Everything a sandbox says stays hostile: envd.c reaches it only through its agent. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "e2b.h"
#include "e2b-private.h"
#include "fdio.h"
#include "http.h"
#include "json.h"
#include "listener.h"
#include "log.h"
#include "pj_e2b.h"
#include "preview.h"
#include "sandbox.h"
#include "strutil.h"
#include "tlsbridge.h"


static struct {
        struct ctl *c;
        struct listener L;               /* [e2b] listen */
        struct http_server *srv;
        SSL_CTX *tls;                    /* [e2b] tls_cert: TLS here; NULL: plain */
        char domain[256];
} E = { .L = LISTENER_INIT };

const char *e2b_domain(void) {
        return E.domain;
}

/* Whether the sandbox's ports answer anyone who reaches the E2B listener: only when its owner
 * said so, E2B's allowPublicTraffic at create (E2B's default there). A sandbox made through
 * the Brimble API or claimed from a pool has no E2B options and is never public here; its ports
 * need the traffic token (or a preview, on the preview listener). Unreadable options: private. */
bool e2b_opt_public(const struct sandbox *sb) {
        return sb->e2b.set && sb->e2b.public;
}

/* ---- routes ---- */

#define J ROUTE_BODY_JSON
#define SB "sandbox"
/* Every method of a path E2B's SDK may call that is not served here (not_served: 501). */
#define NOT_SERVED(pat)                                                                          \
        { "GET", pat, "e2b not served", NULL, true, false, J, NULL, e2b_not_served },                \
        { "POST", pat, "e2b not served", NULL, true, false, J, NULL, e2b_not_served },               \
        { "PUT", pat, "e2b not served", NULL, true, false, J, NULL, e2b_not_served },                \
        { "PATCH", pat, "e2b not served", NULL, true, false, J, NULL, e2b_not_served },              \
        { "DELETE", pat, "e2b not served", NULL, true, false, J, NULL, e2b_not_served }
static const struct route control_routes[] = {
        /* method   pattern                          label                                 noun auth   head   body prepare handler */
        { "GET",    "/health",                       "e2b /health",                        NULL, false, true,  J, NULL, e2b_get_health },
        { "GET",    "/sandboxes",                    "e2b /sandboxes",                     NULL, true,  false, J, NULL, e2b_list_v1 },
        { "POST",   "/sandboxes",                    "e2b /sandboxes",                     NULL, true,  false, J, NULL, e2b_post_sandboxes },
        { "GET",    "/sandboxes/{id}",               "e2b /sandboxes/{id}",                SB,   true,  false, J, NULL, e2b_get_sandbox },
        { "DELETE", "/sandboxes/{id}",               "e2b /sandboxes/{id}",                SB,   true,  false, J, NULL, e2b_delete_sandbox },
        { "POST",   "/sandboxes/{id}/timeout",       "e2b /sandboxes/{id}/timeout",        SB,   true,  false, J, NULL, e2b_post_timeout },
        { "POST",   "/sandboxes/{id}/pause",         "e2b /sandboxes/{id}/pause",          SB,   true,  false, J, NULL, e2b_post_pause },
        { "POST",   "/sandboxes/{id}/connect",       "e2b /sandboxes/{id}/connect",        SB,   true,  false, J, NULL, e2b_post_connect },
        { "GET",    "/v2/sandboxes",                 "e2b /v2/sandboxes",                  NULL, true,  false, J, NULL, e2b_list_v2 },
        { "POST",   "/v2/sandboxes",                 "e2b /v2/sandboxes",                  NULL, true,  false, J, NULL, e2b_post_sandboxes_v2 },
        { "POST",   "/v2/sandboxes/{id}/connect",    "e2b /v2/sandboxes/{id}/connect",     SB,   true,  false, J, NULL, e2b_post_connect_v2 },
        { "PUT",    "/sandboxes/{id}/network",       "e2b /sandboxes/{id}/network",        SB,   true,  false, J, NULL, e2b_put_network },
        { "GET",    "/sandboxes/{id}/metrics",       "e2b /sandboxes/{id}/metrics",        SB,   true,  false, J, NULL, e2b_get_metrics },
        { "POST",   "/sandboxes/{id}/snapshots",     "e2b /sandboxes/{id}/snapshots",      SB,   true,  false, J, NULL, e2b_post_snapshot },
        { "GET",    "/snapshots",                    "e2b /snapshots",                     NULL, true,  false, J, NULL, e2b_list_snapshots },
        { "DELETE", "/templates/{id}",               "e2b /templates/{id}",                "snapshot", true, false, J, NULL, e2b_delete_template },
        { "POST",   "/sandboxes/{id}/fork",          "e2b /sandboxes/{id}/fork",           SB,   true,  false, J, NULL, e2b_post_fork },
        { "GET",    "/secrets",                      "e2b /secrets",                       NULL, true,  false, J, NULL, e2b_secrets_list },
        { "POST",   "/secrets",                      "e2b /secrets",                       NULL, true,  false, J, NULL, e2b_secrets_post },
        { "GET",    "/secrets/{path*}",              "e2b /secrets/{secretID}",            NULL, true,  false, J, NULL, e2b_secret_get },
        { "POST",   "/secrets/{path*}",              "e2b /secrets/{secretID}",            NULL, true,  false, J, NULL, e2b_secret_update },
        { "DELETE", "/secrets/{path*}",              "e2b /secrets/{secretID}",            NULL, true,  false, J, NULL, e2b_secret_delete },
        { "GET",    "/volumes",                      "e2b /volumes",                       NULL, true,  false, J, NULL, e2b_volumes_list },
        { "POST",   "/volumes",                      "e2b /volumes",                       NULL, true,  false, J, NULL, e2b_volumes_post },
        { "GET",    "/volumes/{path*}",              "e2b /volumes/{volumeID}",            NULL, true,  false, J, NULL, e2b_volume_get },
        { "DELETE", "/volumes/{path*}",              "e2b /volumes/{volumeID}",            NULL, true,  false, J, NULL, e2b_volume_delete },
        { "GET",    "/volumecontent/{path*}",        "e2b /volumecontent",                 NULL, false, false, J, NULL, e2b_volume_content },
        { "POST",   "/volumecontent/{path*}",        "e2b /volumecontent",                 NULL, false, false, J, NULL, e2b_volume_content },
        { "PUT",    "/volumecontent/{path*}",        "e2b /volumecontent",                 NULL, false, false, ROUTE_BODY_STREAM, e2b_volume_content_prepare, e2b_volume_content },
        { "PATCH",  "/volumecontent/{path*}",        "e2b /volumecontent",                 NULL, false, false, J, NULL, e2b_volume_content },
        { "DELETE", "/volumecontent/{path*}",        "e2b /volumecontent",                 NULL, false, false, J, NULL, e2b_volume_content }, NOT_SERVED("/v3/templates"), NOT_SERVED("/v2/templates/{path*}"),
        NOT_SERVED("/templates"), NOT_SERVED("/templates/{path*}"),
};
static const struct route misdirected_row = { "GET", "/", "e2b misdirected", NULL, false, false, J, NULL, e2b_misdirected };
static const struct route bad_target_row = { "GET", "/", "e2b bad target", NULL, false, false, J, NULL, e2b_bad_target };
#undef NOT_SERVED
#undef J
#undef SB

bool e2b_hex24(const char *s, size_t n) {
        if (n != SANDBOX_ID_LEN)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* Host <port>-<id>.<domain> (the domain compared without either side's :port): 1 with port
 * and id; -1 for that shape with a port outside 1-65535; else 0. */
static int host_target(const char *host, size_t hl, const char *domain, int *ret_port, char id[SANDBOX_ID_LEN + 1]) {
        const char *dash = memchr(host, '-', hl);
        if (!dash || dash == host || dash - host > 10)
                return 0;
        int64_t port = 0;
        for (const char *p = host; p < dash; p++) {
                if (*p < '0' || *p > '9')
                        return 0;
                port = port * 10 + (*p - '0');
        }
        const char *idp = dash + 1, *end = host + hl;
        if (end - idp < SANDBOX_ID_LEN + 2 || !e2b_hex24(idp, SANDBOX_ID_LEN) || idp[SANDBOX_ID_LEN] != '.')
                return 0;
        const char *dom = idp + SANDBOX_ID_LEN + 1;
        size_t dl = (size_t) (end - dom), wl = strcspn(domain, ":");
        const char *colon = memchr(dom, ':', dl);
        if (colon)
                dl = (size_t) (colon - dom);
        if (dl != wl || strncasecmp(dom, domain, wl))
                return 0;
        if (port < 1 || port > 65535 || host[0] == '0')
                return -1;
        *ret_port = (int) port;
        memcpy(id, idp, SANDBOX_ID_LEN);
        id[SANDBOX_ID_LEN] = 0;
        return 1;
}

/* Which sandbox and port a request names: 1 (sandbox side), 0 (the control plane), -1 a
 * malformed sandbox id or port (answered as not found by the caller). */
static int target_of(const char *host, const char *sid, const char *sport, const char *domain, char id[SANDBOX_ID_LEN + 1],
                     int *ret_port) {
        if (sid) {
                if (!e2b_hex24(sid, strlen(sid)))
                        return -1;
                memcpy(id, sid, SANDBOX_ID_LEN + 1);
                int64_t p = PJ_E2B_ENVD_PORT;
                if (sport && (safe_atoi64(sport, &p) < 0 || p < 1 || p > 65535))
                        return -1;
                *ret_port = (int) p;
                return 1;
        }
        return host ? host_target(host, strlen(host), domain, ret_port, id) : 0;
}

static enum route_status route_req(struct req *r) {
        char id[SANDBOX_ID_LEN + 1] = "";
        int port = 0;
        int t = target_of(req_header(r, "Host"), req_header(r, "E2b-Sandbox-Id"), req_header(r, "E2b-Sandbox-Port"), E.domain, id,
                          &port);
        if (t == 0)
                return route_match_in(control_routes, ELEMENTSOF(control_routes), r->method, r->path, &r->m);
        if (t == 1 && port != PJ_E2B_ENVD_PORT) {
                r->m = (struct route_match) { .status = ROUTE_FOUND, .row = &misdirected_row };
                return ROUTE_FOUND;
        }
        if (t < 0) {
                r->m = (struct route_match) { .status = ROUTE_FOUND, .row = &bad_target_row };
                return ROUTE_FOUND;
        }
        return envd_route(r, id);
}

/* ---- the listener: peek at the head, then hand the connection over ---- */

struct econn {
        int fd;
        struct sockaddr_storage sa;
        socklen_t sl;
        char peer[INET6_ADDRSTRLEN];
};

/* The value of header name in the head (NUL-terminated copy into out), or NULL. */
static const char *head_header(const char *head, size_t n, const char *name, char *out, size_t outlen) {
        size_t nl = strlen(name);
        const char *p = memmem(head, n, "\r\n", 2), *end = head + n;
        while (p && p + 2 < end) {
                p += 2;
                const char *eol = memmem(p, (size_t) (end - p), "\r\n", 2);
                if (!eol || eol == p)
                        return NULL;
                if ((size_t) (eol - p) > nl && p[nl] == ':' && !strncasecmp(p, name, nl)) {
                        const char *v = p + nl + 1;
                        while (v < eol && (*v == ' ' || *v == '\t'))
                                v++;
                        size_t vl = (size_t) (eol - v);
                        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                                vl--;
                        if (vl >= outlen || memchr(v, 0, vl))
                                return NULL;
                        memcpy(out, v, vl);
                        out[vl] = 0;
                        return out;
                }
                p = eol;
        }
        return NULL;
}

int e2b_head_target(const char *head, size_t n, const char *domain, char *id, int *ret_port) {
        char host[512], sid[64], sport[16];
        return target_of(head_header(head, n, "Host", host, sizeof(host)), head_header(head, n, "E2b-Sandbox-Id", sid, sizeof(sid)),
                         head_header(head, n, "E2b-Sandbox-Port", sport, sizeof(sport)), domain, id, ret_port);
}

static void plain_answer(int fd, int status, const char *reason, const char *msg) {
        char body[1024], head[512];
        int bn = snprintf(body, sizeof(body), "{\"code\":%d,\"message\":\"%s\"}", status, msg);
        int hn = snprintf(head, sizeof(head),
                          "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
                          status, reason, bn);
        (void) fd_send_all(fd, head, (size_t) hn, mono_ms() + 5000);
        (void) fd_send_all(fd, body, (size_t) bn, mono_ms() + 5000);
}

/* A request to another port: the sandbox must exist, run, and (unless its traffic is public)
 * the request must carry its traffic token. */
static void forward_port(struct econn *ec, const char *head, size_t n, const char *id, int port) {
        struct ctl *c = E.c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (store_sandbox_get(c->store, id, &sb) < 0 || !e2b_live(sb.status))
                return plain_answer(ec->fd, 502, "Bad Gateway", "The sandbox does not exist or is no longer running");
        if (!e2b_opt_public(&sb)) {
                char tok[128];
                const char *got = head_header(head, n, "e2b-traffic-access-token", tok, sizeof(tok));
                if (!e2b_token_ok(c, "traffic", sb.id, got))
                        return plain_answer(ec->fd, 403, "Forbidden",
                                            "This sandbox's ports need its traffic access token (e2b-traffic-access-token)");
        }
        struct err werr = { 0 };
        if (sb.status != SB_READY && sandbox_wake(c, &sb, &werr) <= 0)   /* autoResume: traffic wakes it */
                return plain_answer(ec->fd, 502, "Bad Gateway", "The sandbox is not running (paused or starting)");
        preview_forward_conn(c, ec->fd, ec->peer, &sb, port, c->cfg->max_header);
        ec->fd = -1;   /* preview_forward_conn closed it */
}

static void serve(struct econn *ec) {
        char head[65536];
        if (E.tls) {
                /* TLS ends here: from now on the connection is the bridge's plain end */
                struct err err = { 0 };
                int fd = tls_bridge(E.tls, ec->fd, NULL, mono_ms() + (int64_t) E.c->cfg->e2b_head_timeout_ms, &err);
                ec->fd = -1;
                if (fd < 0) {
                        log_debug("e2b: TLS from %s failed: %s", ec->peer, err.message);
                        return;
                }
                ec->fd = fd;
        }
        size_t max = E.c->cfg->max_header < sizeof(head) ? E.c->cfg->max_header : sizeof(head);
        int64_t deadline = mono_ms() + (int64_t) E.c->cfg->e2b_head_timeout_ms;
        ssize_t n = 0;
        for (;;) {
                struct pollfd pfd = { .fd = ec->fd, .events = POLLIN };
                int64_t left = deadline - mono_ms();
                if (left <= 0 || E.L.stopping || E.c->stopping)
                        return;
                int k = poll(&pfd, 1, (int) (left < 500 ? left : 500));
                if (k <= 0)
                        continue;
                ssize_t got = recv(ec->fd, head, max, MSG_PEEK);
                if (got <= 0)
                        return;   /* gone before a request */
                if (memmem(head, (size_t) got, "\r\n\r\n", 4) || (size_t) got >= max) {
                        n = got;
                        break;
                }
                if (got == n)
                        usleep(5000);   /* the rest of the head is on its way (peeking does not wait) */
                n = got;
        }
        char id[SANDBOX_ID_LEN + 1];
        int port = 0;
        int t = e2b_head_target(head, (size_t) n, E.domain, id, &port);
        if (t == 1 && port != PJ_E2B_ENVD_PORT)
                return forward_port(ec, head, (size_t) n, id, port);
        if (http_add_connection(E.srv, ec->fd, (struct sockaddr *) &ec->sa, ec->sl) < 0)
                log_debug("e2b: the HTTP server refused a connection (at its limit)");
        ec->fd = -1;
}

static void serve_conn(struct listener *l, int fd, const struct sockaddr_storage *sa, socklen_t sl, const char *peer, void *ud) {
        (void) l;
        (void) ud;
        struct econn ec = { .fd = fd, .sa = *sa, .sl = sl };
        snprintf(ec.peer, sizeof(ec.peer), "%s", peer);
        serve(&ec);
        if (ec.fd >= 0)
                close(ec.fd);
}

int e2b_start(struct ctl *c) {
        const struct config *cfg = c->cfg;
        E.c = c;
        if (!cfg->e2b_listen_addr) {
                log_info("E2B's API off ([e2b] listen unset)");
                return 0;
        }
        if (*cfg->e2b_tls_cert) {
                struct err err = { 0 };
                E.tls = tls_server_ctx(cfg->e2b_tls_cert, cfg->e2b_tls_key, &err);
                if (!E.tls)
                        return log_error_errno(-EINVAL, "[e2b] tls_cert/tls_key: %s", err.message);
        }
        struct http_flavor fl = { .route_req = route_req, .key_header = "x-api-key", .error_body = e2b_error_body,
                                  .bad_id_status = 404, .unescape_slash = true };
        if (*cfg->e2b_domain)
                snprintf(E.domain, sizeof(E.domain), "%s", cfg->e2b_domain);
        else
                snprintf(E.domain, sizeof(E.domain), "localhost:%d", cfg->e2b_listen_port);
        int r = http_start_flavor(c, &fl, &E.srv);
        if (r >= 0) {
                E.L.name = "e2b listener";
                E.L.max_conns = cfg->e2b_max_connections;
                E.L.max_per_addr = cfg->e2b_per_address;
                E.L.serve = serve_conn;
                r = listener_start(&E.L, cfg->e2b_listen_addr, cfg->e2b_listen_port);
        }
        if (r < 0) {
                E.srv = http_stop(E.srv);
                SSL_CTX_free(E.tls);
                E.tls = NULL;
                return r;
        }
        if (!*cfg->e2b_domain && !cfg->e2b_listen_port)
                snprintf(E.domain, sizeof(E.domain), "localhost:%d", E.L.port);   /* port 0: the one bound */
        log_info("E2B's API on %s:%d (%s, sandbox domain %s)", cfg->e2b_listen_addr, E.L.port, E.tls ? "TLS" : "plain HTTP",
                 E.domain);
        return 0;
}

int e2b_port(void) {
        return E.L.port;
}

void e2b_stop(void) {
        if (!E.L.running)
                return;
        (void) listener_stop(&E.L, 15);
        E.srv = http_stop(E.srv);
        if (E.tls) {
                tls_bridges_wait(2000);
                SSL_CTX_free(E.tls);
                E.tls = NULL;
        }
}
