/* terminal.c — a terminal into a sandbox over a WebSocket: GET /sandboxes/{id}/pty upgrades
 * (RFC 6455), binary frames carry terminal bytes both ways, a text frame
 * {"type":"resize","rows":R,"cols":C} resizes (other text frames are typed input), and the
 * socket closing ends the shell (the agent kills the process group of a kill_on_detach
 * spawn). Browsers cannot set headers on a WebSocket, so besides the API key headers a
 * short-lived token works: POST /sandboxes/{id}/pty/token gives one (HMAC of the store's
 * agent key over sandbox, account and expiry: nothing stored), valid for TOKEN_TTL_S.
 * GET /sandboxes/{id}/terminal is a page running xterm.js (installed from npm at build time,
 * served from [server] web_dir) on that socket.
 *
 * Bounds: PTY_PER_SANDBOX sessions per sandbox, messages of at most PTY_MAX_MESSAGE bytes,
 * a client that stops reading gets its writes timed out (the session ends). */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cleanup.h"
#include "controld.h"
#include "fdio.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_api.h"
#include "process.h"
#include "sbcount.h"
#include "session.h"
#include "strutil.h"
#include "terminal.h"
#include "ws.h"

#define TOKEN_TTL_S 60
#define PTY_PER_SANDBOX 8
#define PTY_MAX_MESSAGE (64 * 1024)
#define SEND_TIMEOUT_S 30

/* Terminals open per sandbox (PTY_PER_SANDBOX each, 256 sandboxes with terminals at once). */
static struct sb_counts sessions = SB_COUNTS_INIT;

/* ---- tokens: "<expiry s>.<hex HMAC(agent key, pty|sandbox|account|expiry)>" ---- */

static void token_mac(const struct ctl *c, const char *sandbox_id, const char *account_id, long long exp, char out[65]) {
        char msg[128];
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        snprintf(msg, sizeof(msg), "pty|%s|%s|%lld", sandbox_id, account_id, exp);
        HMAC(EVP_sha256(), c->agent_key, (int) strlen(c->agent_key), (const unsigned char *) msg, strlen(msg), mac, &len);
        hex_encode(mac, 32, out);
}

/* The account id a token grants on sandbox_id (its owner's), checked against the record. */
static bool token_valid(const struct ctl *c, const struct sandbox *sb, const char *token) {
        char *dot;
        long long exp = strtoll(token, &dot, 10);
        if (!dot || *dot != '.' || strlen(dot + 1) != 64 || exp < now_ms() / 1000 || exp > now_ms() / 1000 + TOKEN_TTL_S)
                return false;
        char want[65];
        token_mac(c, sb->id, sb->account_id, exp, want);
        return CRYPTO_memcmp(want, dot + 1, 64) == 0;
}

enum MHD_Result terminal_post_token(struct req *r) {
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int k = sandbox_load(r->c, &r->acc, r->m.id, &sb, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        long long exp = now_ms() / 1000 + TOKEN_TTL_S;
        char mac[65], tok[96], t[32];
        token_mac(r->c, sb.id, sb.account_id, exp, mac);
        snprintf(tok, sizeof(tok), "%lld.%s", exp, mac);
        cJSON *d = cJSON_CreateObject();
        json_add_str(d, "token", tok);
        format_rfc3339_ms(exp * 1000, t);
        json_add_str(d, "expiresAt", t);
        _cleanup_free_ char *ws = xasprintf("/sandboxes/%s/pty?token=%s", sb.id, tok);
        _cleanup_free_ char *page = xasprintf("/sandboxes/%s/terminal?token=%s", sb.id, tok);
        json_add_str(d, "ptyPath", ws);
        json_add_str(d, "terminalPath", page);
        return respond_envelope(r, 201, "Terminal token created", d);
}

/* The caller of a pty/terminal route: a token in the query, else the API key headers. The
 * sandbox is loaded into *sb. 0, or < 0 with the answer sent. */
static int terminal_auth(struct req *r, struct sandbox *sb) {
        struct err e = { 0 };
        const char *tok = req_query(r, "token");
        if (tok) {
                if (store_sandbox_get(r->c->store, r->m.id, sb) < 0 || !token_valid(r->c, sb, tok)) {
                        respond_error(r, 401, "Invalid or expired terminal token: get a new one from POST /sandboxes/{id}/pty/token");
                        return -EACCES;
                }
                int k = store_account_get(r->c->store, sb->account_id, &r->acc);
                if (k < 0) {
                        respond_error(r, 401, "Invalid terminal token");
                        return -EACCES;
                }
                sandbox_clear(sb);
        } else if (http_authenticate(r) < 0)
                return -EACCES;
        int k = sandbox_load(r->c, &r->acc, r->m.id, sb, &e);
        if (k < 0) {
                respond_errno(r, k, &e);
                return k;
        }
        return 0;
}

/* ---- the session ---- */

struct pty_session {
        struct ctl *c;
        struct sandbox sb;
        char *cmd, *cwd;
        uint32_t rows, cols;
};

struct out_ctx {
        int fd;
        bool failed;
};

/* A whole write to the client, bounded: a client that stops reading ends its session. */
static bool send_all(int fd, const void *p, size_t n) {
        return fd_send_all(fd, p, n, mono_ms() + SEND_TIMEOUT_S * 1000) == 0;
}

static bool send_frame(int fd, uint8_t opcode, const void *p, size_t n) {
        _cleanup_strbuf_ struct strbuf b;
        strbuf_init(&b, 0);
        if (ws_frame_encode(&b, WS_ROLE_SERVER, true, opcode, p, n) < 0)
                return false;
        return send_all(fd, b.buf, b.len);
}

static void send_close(int fd, uint16_t code, const char *reason) {
        _cleanup_strbuf_ struct strbuf b;
        strbuf_init(&b, 0);
        if (ws_close_encode(&b, WS_ROLE_SERVER, code, reason) == 0)
                (void) send_all(fd, b.buf, b.len);
}

static int on_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct out_ctx *o = ud;
        (void) stream;
        if (!o->failed && !send_frame(o->fd, WS_OP_BINARY, data, len))
                o->failed = true;
        return o->failed ? -EPIPE : 0;
}

static void run_session(struct pty_session *s, int fd, const char *extra_in, size_t extra_n) {
        struct ctl *c = s->c;
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK))
                (void) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        log_ctx_set("SANDBOX_ID", s->sb.id);

        const char *shell = "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec sh -l; fi";
        char *env[] = { "TERM=xterm-256color", NULL };
        struct process_spec spec = { .cmd = s->cmd ? s->cmd : shell, .env = env, .cwd = s->cwd, .tag = "terminal",
                                     .rows = (int) s->rows, .cols = (int) s->cols };
        struct session *x = NULL;
        struct err e = { 0 };
        int k = process_start_terminal(c, &s->sb, &spec, &x, &e);
        if (k < 0) {
                log_notice("terminal: %s", e.message);
                send_close(fd, WS_CLOSE_INTERNAL_ERROR,
                           k == -EHOSTUNREACH ? "the sandbox's agent is not answering" : "the shell could not start");
                return;
        }
        log_info("terminal opened (%ux%u)", s->rows, s->cols);
        struct ws_reader rd;
        ws_reader_init(&rd, WS_ROLE_SERVER, PTY_MAX_MESSAGE);
        struct out_ctx o = { .fd = fd };
        uint8_t buf[16384];
        uint16_t close_code = WS_CLOSE_NORMAL;
        const char *close_reason = "";
        char reason[123];      /* a WebSocket close reason holds at most 123 bytes */
        bool done = false, client_closed = false;
        if (extra_n)
                (void) ws_reader_feed(&rd, extra_in, extra_n);
        while (!done && !c->stopping) {
                /* whole messages from the client first */
                struct ws_message m;
                int r;
                while (!done && (r = ws_reader_next(&rd, &m)) != 0) {
                        if (r < 0) {
                                const char *why;
                                close_code = ws_reader_error(&rd, &why);
                                snprintf(reason, sizeof(reason), "%s", why);
                                close_reason = reason;
                                done = true;
                                break;
                        }
                        uint32_t rows = 0, cols = 0;
                        struct err pe = { 0 };
                        int rz;
                        switch (m.opcode) {
                        case WS_OP_TEXT:
                                rz = pj_terminal_resize_parse((const char *) m.data, m.len, &rows, &cols, &pe);
                                if (rz > 0)
                                        r = session_resize(x, rows, cols, on_output, &o);
                                else if (rz < 0) {
                                        close_code = WS_CLOSE_POLICY;
                                        snprintf(reason, sizeof(reason), "resize: %s", pe.message);
                                        close_reason = reason;
                                        done = true;
                                } else
                                        r = session_write(x, m.data, m.len, SEND_TIMEOUT_S * 1000, on_output, &o);
                                break;
                        case WS_OP_BINARY:
                                r = session_write(x, m.data, m.len, SEND_TIMEOUT_S * 1000, on_output, &o);
                                break;
                        case WS_OP_PING:
                                if (!send_frame(fd, WS_OP_PONG, m.data, m.len))
                                        done = true;
                                break;
                        case WS_OP_CLOSE:
                                client_closed = true;
                                done = true;
                                break;
                        default:
                                break;
                        }
                        ws_message_done(&m);
                        if (o.failed)
                                done = true;
                }
                if (done)
                        break;
                struct pollfd pf[2] = { { .fd = fd, .events = POLLIN }, { .fd = session_fd(x), .events = POLLIN } };
                k = poll(pf, 2, 1000);
                if (k < 0 && errno != EINTR)
                        break;
                if (pf[1].revents & (POLLIN | POLLHUP | POLLERR)) {
                        r = session_read(x, 0, -1, on_output, &o);
                        if (r == 1) {
                                int code = 0;
                                if (session_exit_code(x, &code) == 0) {
                                        snprintf(reason, sizeof(reason), "exit %d", code);
                                        close_reason = reason;
                                } else
                                        close_reason = "the sandbox's agent went away";
                                done = true;
                        } else if (r < 0 || o.failed)
                                done = true;
                }
                if (pf[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t n = recv(fd, buf, sizeof(buf), 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0) {
                                client_closed = true;
                                break;
                        }
                        if (ws_reader_feed(&rd, buf, (size_t) n) < 0) {
                                close_code = WS_CLOSE_TOO_BIG;
                                close_reason = "message too large";
                                break;
                        }
                }
        }
        if (!o.failed)
                send_close(fd, client_closed ? WS_CLOSE_NORMAL : close_code, close_reason);
        ws_reader_done(&rd);
        /* ending the session kills the shell's process group */
        session_free(x);
        log_info("terminal closed%s%s", *close_reason ? ": " : "", close_reason);
}

/* The session's end: its place among the sandbox's terminals is given back. Runs when
 * MHD ends the request, after upgrade_cb (or without it when the upgrade never happened). */
static void session_end(void *ud) {
        struct pty_session *s = ud;
        sb_counts_give(&sessions, s->sb.id);
        sandbox_clear(&s->sb);
        free(s->cmd);
        free(s->cwd);
        free(s);
}

static void upgrade_cb(void *cls, struct MHD_Connection *conn, void *req_cls, const char *extra_in, size_t extra_in_size,
                       MHD_socket sock, struct MHD_UpgradeResponseHandle *urh) {
        struct pty_session *s = cls;
        (void) conn;
        (void) req_cls;
        sse_stream_count(s->c, +1);
        run_session(s, sock, extra_in, extra_in_size);
        sse_stream_count(s->c, -1);
        log_ctx_reset();
        (void) MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

static bool header_has_token(const char *v, const char *tok) {
        if (!v)
                return false;
        size_t n = strlen(tok);
        for (const char *p = v; *p;) {
                while (*p == ' ' || *p == ',')
                        p++;
                const char *e = p + strcspn(p, ",");
                const char *te = e;
                while (te > p && te[-1] == ' ')
                        te--;
                if ((size_t) (te - p) == n && !strncasecmp(p, tok, n))
                        return true;
                p = e;
        }
        return false;
}

static int query_dim(struct req *r, const char *key, uint32_t def, uint32_t *ret) {
        const char *v = req_query(r, key);
        int64_t x;
        if (!v) {
                *ret = def;
                return 0;
        }
        if (safe_atoi64(v, &x) < 0 || x < 1 || x > 1000) {
                respond_error(r, 400, "%s must be an integer between 1 and 1000", key);
                return -EINVAL;
        }
        *ret = (uint32_t) x;
        return 0;
}

enum MHD_Result terminal_get_pty(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (terminal_auth(r, &sb) < 0)
                return MHD_YES;
        const char *up = req_header(r, "Upgrade"), *conn = req_header(r, "Connection");
        const char *key = req_header(r, "Sec-WebSocket-Key"), *ver = req_header(r, "Sec-WebSocket-Version");
        if (!up || strcasecmp(up, "websocket") || !header_has_token(conn, "upgrade"))
                return respond_error(r, 426, "This is a WebSocket: send Upgrade: websocket and Connection: Upgrade");
        if (!ver || strcmp(ver, "13"))
                return respond_error(r, 426, "Sec-WebSocket-Version must be 13");
        if (!key || !ws_key_valid(key))
                return respond_error(r, 400, "Sec-WebSocket-Key is missing or not 16 bytes of base64");
        uint32_t rows, cols;
        if (query_dim(r, "rows", 24, &rows) < 0 || query_dim(r, "cols", 80, &cols) < 0)
                return MHD_YES;
        const char *cmd = req_query(r, "cmd"), *cwd = req_query(r, "cwd");
        if (cmd && (!*cmd || strlen(cmd) > 4096))
                return respond_error(r, 400, "cmd must be 1..4096 bytes");
        if (cwd && (cwd[0] != '/' || strlen(cwd) > 4096))
                return respond_error(r, 400, "cwd must be an absolute path");
        if (sb.status != SB_READY)
                return respond_error(r, 409, "Sandbox is %s; a terminal needs a ready sandbox", sb_status_str(sb.status));
        /* the place is taken before the 101: terminals opened one after another are refused
         * in order, the ninth and not an earlier one whose handler ran late */
        sb_counts_init(&sessions, 256);
        if (!sb_counts_take(&sessions, sb.id, PTY_PER_SANDBOX))
                return respond_error(r, 429, "This sandbox already has %d terminals open", PTY_PER_SANDBOX);
        struct pty_session *s = xnew0(struct pty_session, 1);
        s->c = r->c;
        s->sb = sb;
        sb = (struct sandbox) { 0 };
        s->cmd = cmd ? xstrdup(cmd) : NULL;
        s->cwd = cwd ? xstrdup(cwd) : NULL;
        s->rows = rows;
        s->cols = cols;
        struct MHD_Response *resp = MHD_create_response_for_upgrade(upgrade_cb, s);
        if (!resp) {
                session_end(s);
                return respond_error(r, 500, "This server cannot upgrade connections");
        }
        r->on_end = session_end;
        r->ud = s;
        char acc[WS_ACCEPT_LEN + 1];
        ws_accept_for_key(key, acc);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_UPGRADE, "websocket");
        MHD_add_response_header(resp, "Sec-WebSocket-Accept", acc);
        return respond_response(r, 101, resp);
}

/* ---- the page and its assets ---- */

static const char page_html[] =
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>Paddock terminal</title>\n"
        "<link rel=\"stylesheet\" href=\"/terminal/xterm.css\">\n"
        "<style>html,body{margin:0;height:100%;background:#000}#t{position:absolute;inset:0}</style></head>\n"
        "<body><div id=\"t\"></div>\n<script src=\"/terminal/xterm.js\"></script>\n"
        "<script src=\"/terminal/addon-fit.js\"></script>\n<script src=\"/terminal/terminal.js\"></script>\n"
        "</body></html>\n";

/* The page's script: opens the WebSocket with the page's own token, fits the terminal to
 * the window and sends every size change. */
static const char page_js[] =
        "(function () {\n"
        "  var q = new URLSearchParams(location.search);\n"
        "  var id = location.pathname.split('/')[2];\n"
        "  var term = new Terminal({ cursorBlink: true });\n"
        "  var fit = new FitAddon.FitAddon();\n"
        "  term.loadAddon(fit);\n"
        "  term.open(document.getElementById('t'));\n"
        "  fit.fit();\n"
        "  var u = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/sandboxes/' + id +\n"
        "          '/pty?token=' + encodeURIComponent(q.get('token') || '') + '&rows=' + term.rows + '&cols=' + term.cols;\n"
        "  if (q.get('cmd')) u += '&cmd=' + encodeURIComponent(q.get('cmd'));\n"
        "  if (q.get('cwd')) u += '&cwd=' + encodeURIComponent(q.get('cwd'));\n"
        "  var ws = new WebSocket(u);\n"
        "  ws.binaryType = 'arraybuffer';\n"
        "  var enc = new TextEncoder();\n"
        "  window.paddockTerminal = { term: term, ws: ws };\n"
        "  ws.onopen = function () { document.title = 'Paddock terminal: ' + id; };\n"
        "  ws.onmessage = function (e) { term.write(new Uint8Array(e.data)); };\n"
        "  ws.onclose = function (e) { term.write('\\r\\n[terminal closed' + (e.reason ? ': ' + e.reason : '') + ']\\r\\n'); };\n"
        "  term.onData(function (d) { if (ws.readyState === 1) ws.send(enc.encode(d)); });\n"
        "  term.onResize(function (s) { if (ws.readyState === 1) ws.send(JSON.stringify({ type: 'resize', rows: s.rows, cols: s.cols })); });\n"
        "  window.addEventListener('resize', function () { fit.fit(); });\n"
        "})();\n";

enum MHD_Result terminal_get_page(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (terminal_auth(r, &sb) < 0)
                return MHD_YES;
        struct MHD_Response *resp = MHD_create_response_from_buffer(sizeof(page_html) - 1, (void *) page_html,
                                                                    MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        return respond_response(r, 200, resp);
}

/* [server] web_dir: "" = "web" beside controld's executable (a build tree), else
 * /usr/share/paddock/web. */
static char *web_dir(const struct ctl *c) {
        if (c->cfg->web_dir && *c->cfg->web_dir)
                return xstrdup(c->cfg->web_dir);
        _cleanup_free_ char *d = path_beside_self("web");
        struct stat st;
        if (d && stat(d, &st) == 0 && S_ISDIR(st.st_mode))
                return TAKE_PTR(d);
        return xstrdup("/usr/share/paddock/web");
}

enum MHD_Result terminal_get_asset(struct req *r) {
        static const struct { const char *name, *file, *type; } assets[] = {
                { "/terminal/xterm.js", "xterm.js", "text/javascript; charset=utf-8" },
                { "/terminal/xterm.css", "xterm.css", "text/css; charset=utf-8" },
                { "/terminal/addon-fit.js", "addon-fit.js", "text/javascript; charset=utf-8" },
        };
        if (!strcmp(r->path, "/terminal/terminal.js"))
                return respond_raw(r, 200, "text/javascript; charset=utf-8", page_js, sizeof(page_js) - 1);
        for (size_t i = 0; i < ELEMENTSOF(assets); i++) {
                if (strcmp(r->path, assets[i].name))
                        continue;
                _cleanup_free_ char *dir = web_dir(r->c);
                _cleanup_free_ char *p = xasprintf("%s/%s", dir, assets[i].file);
                int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > 8 * 1024 * 1024) {
                        if (fd >= 0)
                                close(fd);
                        return respond_error(r, 404, "%s is not installed here (make web builds it from npm)", assets[i].file);
                }
                struct MHD_Response *resp = MHD_create_response_from_fd((size_t) st.st_size, fd);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, assets[i].type);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "public, max-age=3600");
                return respond_response(r, 200, resp);
        }
        return respond_error(r, 404, "No such file");
}
