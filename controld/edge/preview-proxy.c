/* preview-proxy.c — the preview listener and its connections: each checks the preview, the
 * token and the sandbox, opens a FORWARD through the sandbox's agent, sends the head that
 * preview-head.c rewrote and passes bytes both ways until either side ends, the connection
 * idles, or the preview is revoked or expires (see preview.c's top comment). */

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "fdio.h"
#include "listener.h"
#include "log.h"
#include "preview-private.h"
#include "preview.h"
#include "sandbox.h"
#include "sbcount.h"
#include "strutil.h"
#include "tunnel.h"

#define CHECK_MS 250                 /* how often an open connection looks at its preview again */
#define FORWARD_TIMEOUT_MS 10000     /* FORWARD's answer */

static bool still_valid(const struct preview *p) {
        struct preview now = { 0 };
        if (store_preview_get(preview_pv.c->store, p->sandbox_id, p->port, &now) < 0)
                return false;
        return now.expires_at > now_ms() && !strcmp(now.token_sha256, p->token_sha256);
}

/* The pump's view of a preview connection (tunnel.h's callbacks). */
struct pside {
        struct pconn *pc;
        const struct preview *p;         /* NULL for E2B's port URLs */
        unsigned gen;
};

static bool ps_running(void *ud) {
        (void) ud;
        return !preview_pv.L.stopping && !preview_pv.c->stopping;
}

/* A revoked, replaced or expired preview, or an idle connection, ends the tunnel. */
static bool ps_check(void *ud, int64_t idle_ms) {
        struct pside *ps = ud;
        if (idle_ms > (int64_t) preview_pv.c->cfg->preview_idle_timeout_s * 1000)
                return false;
        if (ps->p && now_ms() >= ps->p->expires_at)
                return false;
        unsigned g = preview_gen_now();
        if (ps->p && g != ps->gen) {
                ps->gen = g;
                if (!still_valid(ps->p))
                        return false;
        }
        return true;
}

static bool ps_hold(void *ud) {
        return ((struct pside *) ud)->pc->flow == FLOW_HOLD;
}

/* the body's bytes only; what a client pipelines after it is dropped */
static ssize_t ps_take(void *ud, const uint8_t *data, size_t len) {
        return preview_client_take(((struct pside *) ud)->pc, data, len);
}

static bool ps_deliver(void *ud, const uint8_t *data, size_t len) {
        struct pside *ps = ud;
        preview_saw_answer(ps->pc, data, len);
        return preview_send_all(ps->pc->fd, data, len);
}

/* Bytes both ways until one side ends both directions, idles out, or the preview goes. */
static void pump(struct pconn *pc, struct tunnel *tn, const struct preview *p, int slot) {
        uint64_t in = 0, out = 0;
        struct pside ps = { .pc = pc, .p = p, .gen = preview_gen_now() };
        /* what came after the head in the first read: the body's start (and no more) */
        if (pc->got > pc->head_len) {
                ssize_t n = preview_client_take(pc, (uint8_t *) pc->head + pc->head_len, pc->got - pc->head_len);
                if (n < 0 || (n > 0 && tunnel_send(tn, pc->head + pc->head_len, (size_t) n, SEND_TIMEOUT_MS) < 0)) {
                        preview_count(slot, 0, 0, 0);
                        return;
                }
                in += (uint64_t) n;
        }
        struct tunnel_client cl = { .fd = pc->fd, .send_timeout_ms = SEND_TIMEOUT_MS, .check_ms = CHECK_MS, .ud = &ps,
                                    .running = ps_running, .check = ps_check, .hold = ps_hold, .take = ps_take,
                                    .deliver = ps_deliver };
        uint64_t tin = 0, tout = 0;
        tunnel_pump(tn, &cl, &tin, &tout);
        preview_count(slot, 0, in + tin, out + tout);
}

/* The sandbox is ready and the request allowed: FORWARD to the port inside, the head
 * rewritten, then bytes both ways (p: the preview, NULL for E2B's port URLs). */
static void forward(struct pconn *pc, const struct sandbox *sb, const struct preview *p, bool keep_host, const char *target,
                    int slot) {
        struct err err = { 0 };
        struct tunnel *tn = NULL;
        int refusal = 0;
        int k = tunnel_open(preview_pv.c, sb, pc->port, SEND_TIMEOUT_MS, FORWARD_TIMEOUT_MS, &tn, &refusal, &err);
        switch (k) {
        case 0:
                break;
        case -EHOSTUNREACH:
                log_ctx_set("SANDBOX_ID", sb->id);
                log_notice("preview of port %d: the agent did not answer: %s", pc->port, err.message);
                return preview_page(pc, 502, "Bad Gateway", NULL, "The sandbox's agent is not answering, so the preview cannot reach it.");
        case -EPIPE:
                return preview_page(pc, 502, "Bad Gateway", NULL, "The sandbox's agent is not answering.");
        case -ETIMEDOUT:
                return preview_page(pc, 504, "Gateway Timeout", NULL, "The sandbox's agent did not answer in time.");
        case -ECONNREFUSED:
                return preview_page(pc, 502, "Bad Gateway", NULL,
                                    "Nothing is listening on port %d inside the sandbox. Start a server there (listening on "
                                    "127.0.0.1 or 0.0.0.0) and reload.",
                                    pc->port);
        default:
                return preview_page(pc, 502, "Bad Gateway", NULL, "Port %d inside the sandbox cannot be reached: %s.", pc->port,
                                    refusal ? strerror(refusal) : "unexpected answer");
        }
        _cleanup_free_ char *head = preview_rewrite_head(pc, keep_host, target, pc->scheme ? pc->scheme : pc->secure ? "https" : "http");
        if (tunnel_send(tn, head, strlen(head), SEND_TIMEOUT_MS) < 0) {
                tunnel_free(tn);
                return preview_page(pc, 502, "Bad Gateway", NULL, "The sandbox's agent stopped answering.");
        }
        preview_count(slot, 0, strlen(head), 0);
        pump(pc, tn, p, slot);
        tunnel_free(tn);
}

/* The domain Host-form URLs are under: [preview] domain, else localhost. */
static const char *url_domain(const struct config *cfg) {
        return *cfg->preview_domain ? cfg->preview_domain : "localhost";
}

static void serve(struct pconn *pc) {
        const struct config *cfg = preview_pv.c->cfg;
        int k = preview_read_head(pc, cfg->preview_max_header, cfg->preview_head_timeout_ms);
        if (k < 0)
                return;
        if (k == 408)
                return preview_page(pc, 408, "Request Timeout", NULL, "The request head did not arrive in time.");
        if (k == 431)
                return preview_page(pc, 431, "Request Header Fields Too Large", NULL, "The request head is larger than %llu bytes.",
                                    (unsigned long long) cfg->preview_max_header);
        if (preview_parse_head(pc) != 0 || preview_framing(pc) != 0) {
                pc->method = NULL;
                return preview_page(pc, 400, "Bad Request", NULL, "The request is not valid HTTP/1.1.");
        }
        if (!preview_route(pc, url_domain(cfg), cfg->preview_path_form)) {
                preview_count(M_UNKNOWN, 1, 0, 0);
                return preview_page(pc, 404, "Not Found", NULL,
                                    "This is Paddock's preview server: a preview URL looks like &lt;port&gt;-&lt;sandbox id&gt;.%s%s.",
                                    url_domain(cfg), cfg->preview_path_form ? " or /p/&lt;sandbox id&gt;/&lt;port&gt;/" : "");
        }
        pc->secure = !pc->path_form && *cfg->preview_domain && !strcmp(cfg->preview_scheme, "https");
        if (pc->path_form && *pc->rest != '/') {
                /* /p/<id>/<port> alone: relative links need the trailing slash */
                char loc[1200];
                if (strlen(pc->rest) > 1024)
                        return preview_page(pc, 414, "URI Too Long", NULL, "The URL is too long.");
                snprintf(loc, sizeof(loc), "Location: /p/%s/%d/%s\r\n", pc->id, pc->port, pc->rest);
                return preview_page(pc, 308, "Permanent Redirect", loc, "The preview is at /p/%s/%d/.", pc->id, pc->port);
        }
        struct preview p = { 0 };
        if (store_preview_get(preview_pv.c->store, pc->id, pc->port, &p) < 0) {
                preview_count(M_UNKNOWN, 1, 0, 0);
                return preview_page(pc, 404, "Not Found", NULL, "There is no preview of port %d on sandbox %s (never made, or revoked).",
                                    pc->port, pc->id);
        }
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (store_sandbox_get(preview_pv.c->store, pc->id, &sb) < 0 || strcmp(sb.account_id, p.account_id)) {
                preview_count(M_UNKNOWN, 1, 0, 0);
                return preview_page(pc, 404, "Not Found", NULL, "Sandbox %s does not exist.", pc->id);
        }
        int slot = (int) sb.status;
        preview_count(slot, 1, 0, 0);
        if (p.expires_at <= now_ms())
                return preview_page(pc, 410, "Gone", NULL, "This preview expired.");
        /* the token: header, our query parameter, or our cookie */
        _cleanup_free_ char *stripped = NULL;
        _cleanup_free_ char *qtok = preview_take_query_token(pc->rest, &stripped);
        _cleanup_free_ char *ctok = preview_cookie_token(pc);
        const char *htok = preview_header(pc, TOKEN_HEADER);
        if (!p.public_) {
                const char *tok = htok ? htok : qtok ? qtok : ctok;
                if (!tok)
                        return preview_page(pc, 401, "Unauthorized", NULL,
                                            "This preview needs its token: open the URL with ?" TOKEN_PARAM "=&lt;token&gt; once, or send "
                                            "the " TOKEN_HEADER " header.");
                if (!preview_token_ok(&p, tok))
                        return preview_page(pc, 403, "Forbidden", NULL, "The token is not this preview's (wrong, replaced or revoked).");
                if (qtok && !htok && (!strcmp(pc->method, "GET") || !strcmp(pc->method, "HEAD"))) {
                        /* once: the cookie from now on, and the URL without the token */
                        char name[64], hdrs[1024 + 512];
                        if (strlen(stripped) > 400)
                                return preview_page(pc, 414, "URI Too Long", NULL, "The URL is too long.");
                        preview_cookie_name(pc, name);
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
                        return preview_page(pc, 302, "Found", hdrs, "The preview continues at the same URL without the token.");
                }
        }
        struct err werr = { 0 };
        if ((sb.status == SB_PAUSED || sb.status == SB_PAUSING) && sandbox_wake(preview_pv.c, &sb, &werr) < 0)
                log_info("preview: the paused sandbox could not be resumed (autoResume): %s", werr.message);
        if (sb.status == SB_PAUSED || sb.status == SB_PAUSING)
                return preview_page(pc, 503, "Service Unavailable", "Retry-After: 10\r\n",
                                    "Sandbox %s is paused: resume it and this preview works again.", sb.id);
        if (sb.status == SB_DESTROYED || sb.status == SB_FAILED)
                return preview_page(pc, 410, "Gone", NULL, "Sandbox %s is %s.", sb.id, sb_status_str(sb.status));
        if (sb.status != SB_READY)
                return preview_page(pc, 503, "Service Unavailable", "Retry-After: 2\r\n", "Sandbox %s is %s.", sb.id,
                                    sb_status_str(sb.status));
        if (!sb_counts_take(&preview_pv.per, sb.id, cfg->preview_per_sandbox))
                return preview_page(pc, 429, "Too Many Requests", "Retry-After: 1\r\n",
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
                sb_counts_give(&preview_pv.per, pc->id);
        close(pc->fd);
        free(pc);
}

int preview_start(struct ctl *c) {
        const struct config *cfg = c->cfg;
        preview_pv.c = c;
        if (!cfg->preview_listen_addr) {
                log_info("preview URLs off ([preview] listen unset)");
                return 0;
        }
        sb_counts_init(&preview_pv.per, (size_t) cfg->preview_max_connections);
        preview_pv.L.name = "preview listener";
        preview_pv.L.max_conns = cfg->preview_max_connections;
        preview_pv.L.max_per_addr = cfg->preview_per_address;
        preview_pv.L.serve = serve_conn;
        int r = listener_start(&preview_pv.L, cfg->preview_listen_addr, cfg->preview_listen_port);
        if (r < 0)
                return r;
        log_info("preview URLs on %s:%d (<port>-<id>.%s%s)", cfg->preview_listen_addr, preview_pv.L.port,
                 *cfg->preview_domain ? cfg->preview_domain : "localhost:", *cfg->preview_domain ? "" : "<listen port>");
        if (cfg->preview_path_form)
                log_warning("[preview] path_form = true: preview URLs /p/<id>/<port>/ put every preview of every account on one "
                            "browser origin, so one preview's page can read another's answers and cookies; use the "
                            "<port>-<id>.<domain> form (the default) wherever untrusted code runs");
        return 0;
}

int preview_port(void) {
        return preview_pv.L.port;
}

void preview_stop(void) {
        if (!preview_pv.L.running)
                return;
        /* connection threads notice within a second; they use the store, so wait for them */
        if (listener_stop(&preview_pv.L, 15))
                sb_counts_done(&preview_pv.per);
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
        if (!preview_pv.c)
                preview_pv.c = c;
        int k = preview_read_head(pc, max_header < sizeof(pc->head) - 1 ? max_header : sizeof(pc->head) - 1, c->cfg->e2b_head_timeout_ms);
        if (k == 408)
                preview_page(pc, 408, "Request Timeout", NULL, "The request head did not arrive in time.");
        else if (k == 431)
                preview_page(pc, 431, "Request Header Fields Too Large", NULL, "The request head is too large.");
        else if (k == 0 && (preview_parse_head(pc) != 0 || preview_framing(pc) != 0)) {
                pc->method = NULL;
                preview_page(pc, 400, "Bad Request", NULL, "The request is not valid HTTP/1.1.");
        } else if (k == 0) {
                pc->rest = pc->target;
                int slot = (int) sb->status;
                preview_count(slot, 1, 0, 0);
                forward(pc, sb, NULL, false, pc->target, slot);
        }
        close(pc->fd);
        free(pc);
}
