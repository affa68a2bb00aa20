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
 * its own connection thread.
 *
 * This file holds the REST side, the tokens, URLs and the counters; preview-head.c the request
 * head (parse, route, rewrite, body framing), preview-proxy.c the listener and the forwarding,
 * sharing preview-private.h. */
#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "controld.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "preview-private.h"
#include "preview.h"
#include "strutil.h"

struct preview_state preview_pv = { .lock = PTHREAD_MUTEX_INITIALIZER, .L = LISTENER_INIT, .per = SB_COUNTS_INIT };

void preview_count(int slot, uint64_t req, uint64_t in, uint64_t out) {
        pthread_mutex_lock(&preview_pv.lock);
        preview_pv.requests[slot] += req;
        preview_pv.bytes_in[slot] += in;
        preview_pv.bytes_out[slot] += out;
        pthread_mutex_unlock(&preview_pv.lock);
}

static void bump_gen(void) {
        pthread_mutex_lock(&preview_pv.lock);
        preview_pv.gen++;
        pthread_mutex_unlock(&preview_pv.lock);
}

unsigned preview_gen_now(void) {
        pthread_mutex_lock(&preview_pv.lock);
        unsigned g = preview_pv.gen;
        pthread_mutex_unlock(&preview_pv.lock);
        return g;
}

void preview_metrics_render(struct strbuf *out) {
        static const char *const names[] = { "requests_total", "bytes_in_total", "bytes_out_total" };
        static const char *const help[] = { "Preview requests by the sandbox's status (unknown: no such preview).",
                                            "Preview bytes from clients into sandboxes, by the sandbox's status.",
                                            "Preview bytes from sandboxes to clients, by the sandbox's status." };
        pthread_mutex_lock(&preview_pv.lock);
        for (int k = 0; k < 3; k++) {
                const uint64_t *v = k == 0 ? preview_pv.requests : k == 1 ? preview_pv.bytes_in : preview_pv.bytes_out;
                strbuf_printf(out, "# HELP paddock_preview_%s %s\n# TYPE paddock_preview_%s counter\n", names[k], help[k],
                              names[k]);
                for (int s = 0; s < M_SLOTS; s++)
                        strbuf_printf(out, "paddock_preview_%s{status=\"%s\"} %llu\n", names[k],
                                      s == M_UNKNOWN ? "unknown" : sb_status_str((enum sb_status) s), (unsigned long long) v[s]);
        }
        pthread_mutex_unlock(&preview_pv.lock);
        pthread_mutex_lock(&preview_pv.L.lock);
        strbuf_printf(out, "# HELP paddock_preview_connections Proxied preview connections open now.\n"
                           "# TYPE paddock_preview_connections gauge\npaddock_preview_connections %lld\n",
                      (long long) preview_pv.L.conns);
        pthread_mutex_unlock(&preview_pv.L.lock);
        listener_metrics_render(out);   /* the preview and E2B listeners' refusals */
}

/* ---- tokens and URLs ---- */

bool preview_token_ok(const struct preview *p, const char *token) {
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
                                 preview_pv.L.port > 0 ? preview_pv.L.port : cfg->preview_listen_port);
        }
        if (*cfg->preview_public_url) {
                size_t n = strlen(cfg->preview_public_url);
                return xasprintf("%.*s/p/%s/%d/", (int) (n && cfg->preview_public_url[n - 1] == '/' ? n - 1 : n),
                                 cfg->preview_public_url, sandbox_id, port);
        }
        bool v6 = strchr(cfg->preview_listen_addr, ':') != NULL;
        return xasprintf("http://%s%s%s:%d/p/%s/%d/", v6 ? "[" : "", cfg->preview_listen_addr, v6 ? "]" : "",
                         preview_pv.L.port > 0 ? preview_pv.L.port : cfg->preview_listen_port, sandbox_id, port);
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
        struct err e = { 0 };
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
        struct err pe = { 0 };
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
