/* test-previews.c — preview URLs as a person with a browser meets them (issue 22): a server
 * bound to 127.0.0.1 inside a deny_all sandbox answers through its preview URL; a WebSocket
 * echo server works through it; a dev server that checks Host accepts what arrives; and every
 * refusal is a clear page at once: no token, a wrong one, another account's, a revoked or
 * expired preview, a paused or destroyed sandbox. The client here speaks raw HTTP/1.1 over a
 * socket, so every header is the test's own choice. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "runtimetest.h"
#include "testlib.h"

#define PREVIEW_CONF "[preview]\nlisten = 127.0.0.1:0\n"

/* The host and path of a preview URL on the default domain (http://<port>-<id>.localhost:P/,
 * each preview its own browser origin) and the listener's port P. */
static void split_url(const char *url, int *ret_port, char *host, size_t hostlen, char *path, size_t pathlen) {
        ASSERT_NOT_NULL(url);
        if (strncmp(url, "http://", 7) || !strstr(url, ".localhost:"))
                test_fail(__FILE__, __LINE__, "not a preview URL of its own origin under localhost: %s", url);
        const char *hp = url + 7, *p = strchr(hp, '/');
        ASSERT_NOT_NULL(p);
        snprintf(host, hostlen, "%.*s", (int) (p - hp), hp);
        *ret_port = atoi(strrchr(host, ':') + 1);
        snprintf(path, pathlen, "%s", p);
}

/* The listener's port of a Host value (after its last ':'). */
static int port_of(const char *host) {
        const char *c = strrchr(host, ':');
        ASSERT_NOT_NULL(c);
        return atoi(c + 1);
}

static int dial(int port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        return fd;
}

/* Reads until the peer closes, or until want appears (NULL: close only), within timeout_ms. */
static char *read_until(int fd, const char *want, int timeout_ms) {
        size_t cap = 1 << 20, len = 0;
        char *buf = xmalloc(cap + 1);
        int64_t deadline = now_mono_ms() + timeout_ms;
        for (;;) {
                buf[len] = 0;
                if (want && strstr(buf, want))
                        break;
                int64_t left = deadline - now_mono_ms();
                if (left <= 0)
                        test_fail(__FILE__, __LINE__, "no %s within %d ms; got: %.400s", want ? want : "close", timeout_ms, buf);
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                if (poll(&pfd, 1, (int) left) <= 0)
                        continue;
                ssize_t n = recv(fd, buf + len, cap - len, 0);
                if (n <= 0)
                        break;
                len += (size_t) n;
                if (len == cap)
                        break;
        }
        buf[len] = 0;
        return buf;
}

/* One request (raw head + optional body), the whole answer back (the proxy closes). */
static char *raw(int port, const char *req) {
        int fd = dial(port);
        ASSERT_TRUE(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t) strlen(req));
        char *resp = read_until(fd, NULL, 20000);
        close(fd);
        return resp;
}

static char *slurp(const char *path) {
        FILE *f = fopen(path, "r");
        ASSERT_NOT_NULL(f);
        size_t cap = 8 << 20;
        char *buf = xmalloc(cap + 1);
        size_t n = fread(buf, 1, cap, f);
        buf[n] = 0;
        fclose(f);
        return buf;
}

static long status_of(const char *resp) {
        long st = 0;
        if (sscanf(resp, "HTTP/1.%*d %ld", &st) != 1)
                test_fail(__FILE__, __LINE__, "not an HTTP answer: %.300s", resp);
        return st;
}

/* raw(), again while the answer is a 502 (the server inside is not listening yet), for up to
 * 10 s: the first other answer (caller frees). */
static char *raw_once_up_at(int line, int port, const char *req) {
        for (int i = 0;; i++) {
                char *resp = raw(port, req);
                if (status_of(resp) != 502)
                        return resp;
                if (i == 100)
                        test_fail(__FILE__, line, "the server inside never came up: %.300s", resp);
                free(resp);
                usleep(100000);
        }
}
#define RAW_ONCE_UP(port, req) raw_once_up_at(__LINE__, port, req)

/* GET path of host (a preview's, or 127.0.0.1:<listener port>) with extra header lines (""
 * for none): the answer must have status want and contain part (unless NULL). Returns it
 * (caller frees). */
static char *get_expect_at(int line, const char *host, const char *path, const char *headers, long want, const char *part) {
        char req[4096];
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", path, host, headers);
        char *resp = raw(port_of(host), req);
        if (status_of(resp) != want || (part && !strstr(resp, part)))
                test_fail(__FILE__, line, "GET %s -> %.600s\n(want %ld with \"%s\")", path, resp, want, part ? part : "");
        return resp;
}
#define GET_EXPECT(host, path, headers, want, part) free(get_expect_at(__LINE__, host, path, headers, want, part))

/* POST /previews: 201, and its url and token (token NULL for a public one's caller). */
static void make_preview(struct box *b, const char *body, char *url, size_t urllen, char *token, size_t toklen) {
        struct hres r;
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/previews", b->id);
        http_req(&b->c, "POST", path, b->key, body, &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "POST previews %s -> %ld %s", body, r.status, r.body);
        snprintf(url, urllen, "%s", cJSON_GetStringValue(data_item(&r, "url")) ?: "");
        if (token)
                snprintf(token, toklen, "%s", cJSON_GetStringValue(data_item(&r, "token")) ?: "");
        hres_done(&r);
}

static void start_detached(struct box *b, const char *cmd) {
        struct hres r;
        char path[96], body[1024];
        snprintf(path, sizeof(path), "/sandboxes/%s/processes", b->id);
        snprintf(body, sizeof(body), "{\"cmd\":\"%s\"}", cmd);
        http_req(&b->c, "POST", path, b->key, body, &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "POST /processes %s -> %ld %s", body, r.status, r.body);
        hres_done(&r);
}

/* A WebSocket echo server in plain Python (no packages in a deny_all sandbox). */
static const char ws_server[] =
        "import socket, hashlib, base64\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 8765)); s.listen(8)\n"
        "while True:\n"
        "    c, _ = s.accept(); h = b''\n"
        "    while b'\\r\\n\\r\\n' not in h:\n"
        "        d = c.recv(4096)\n"
        "        if not d: break\n"
        "        h += d\n"
        "    key = [l.split(b':', 1)[1].strip() for l in h.split(b'\\r\\n') if l.lower().startswith(b'sec-websocket-key:')]\n"
        "    if not key: c.close(); continue\n"
        "    acc = base64.b64encode(hashlib.sha1(key[0] + b'258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest())\n"
        "    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n'\n"
        "              b'Sec-WebSocket-Accept: ' + acc + b'\\r\\n\\r\\n')\n"
        "    f = c.recv(2); n = f[1] & 127; m = c.recv(4); p = b''\n"
        "    while len(p) < n: p += c.recv(n - len(p))\n"
        "    p = bytes(x ^ m[i % 4] for i, x in enumerate(p))\n"
        "    c.sendall(bytes([0x81, len(b'echo:' + p)]) + b'echo:' + p); c.close()\n";

/* A dev server that, like Vite's, refuses a Host it does not know. */
static const char host_server[] =
        "import http.server\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        ok = self.headers.get('Host') == 'localhost:5173'\n"
        "        b = (b'host-ok ' if ok else b'host-refused ') + self.headers.get('Host', '').encode() + b' '"
        " + self.path.encode() + b' cookie=' + self.headers.get('Cookie', '-').encode()\n"
        "        self.send_response(200 if ok else 403); self.send_header('Content-Length', str(len(b)))\n"
        "        self.end_headers(); self.wfile.write(b)\n"
        "http.server.ThreadingHTTPServer(('127.0.0.1', 5173), H).serve_forever()\n";

TEST_FULL(preview_of_a_localhost_server_in_a_deny_all_sandbox, 300) {
        struct box b;
        box_start(&b, NULL, PREVIEW_CONF, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        char ppath[128], url[256], token[128], path[512], hdr[512], host[256];
        int port = 0;
        snprintf(ppath, sizeof(ppath), "/sandboxes/%s/previews", b.id);

        /* Bad bodies name their field. */
        HTTP_EXPECT_MSG(&b.c, "POST", ppath, b.key, "{}", 400, "port");
        HTTP_EXPECT_MSG(&b.c, "POST", ppath, b.key, "{\"port\":0}", 400, "port");
        HTTP_EXPECT_MSG(&b.c, "POST", ppath, b.key, "{\"port\":65536}", 400, "port");
        HTTP_EXPECT_MSG(&b.c, "POST", ppath, b.key, "{\"port\":8000,\"nope\":1}", 400, "nope");
        HTTP_EXPECT_MSG(&b.c, "POST", ppath, b.key, "{\"port\":8000,\"public\":\"yes\"}", 400, "public");
        HTTP_EXPECT_MSG(&b.c, "POST", ppath, b.key, "{\"port\":8000,\"expiresIn\":0}", 400, "expiresIn");

        make_preview(&b, "{\"port\":8000}", url, sizeof(url), token, sizeof(token));
        split_url(url, &port, host, sizeof(host), path, sizeof(path));
        ASSERT_EQ(strlen(token), 64);
        ASSERT_STREQ(path, "/");
        /* Nothing listens yet: a clear 502 page at once, not a hang. */
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", token);
        GET_EXPECT(host, path, hdr, 502, "Nothing is listening on port 8000");

        free(sh(&b, "mkdir -p /tmp/www && echo hello-preview > /tmp/www/hi.txt"));
        start_detached(&b, "exec python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www");
        char hi[600];
        snprintf(hi, sizeof(hi), "%shi.txt", path);
        char req[1024];
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", hi, host, hdr);
        _cleanup_free_ char *first = RAW_ONCE_UP(port, req);
        ASSERT_EQ(status_of(first), 200);
        ASSERT_CONTAINS(first, "hello-preview");

        /* No token, a wrong one: refused with a page that says so. */
        GET_EXPECT(host, hi, "", 401, "needs its token");
        GET_EXPECT(host, hi, "X-Paddock-Preview-Token: 0000000000000000000000000000000000000000000000000000000000000000\r\n",
                   403, "not this preview");
        /* The token once in the URL: a cookie and the same URL without it; the cookie then works. */
        char q[700];
        snprintf(q, sizeof(q), "%s?a=1&paddock_token=%s", hi, token);
        _cleanup_free_ char *redir = get_expect_at(__LINE__, host, q, "", 302, "Set-Cookie: paddock_preview_8000_");
        char loc[700];
        snprintf(loc, sizeof(loc), "Location: %s?a=1\r\n", hi);
        ASSERT_CONTAINS(redir, loc);
        ASSERT_CONTAINS(redir, "HttpOnly");
        char cookie[300];
        snprintf(cookie, sizeof(cookie), "Cookie: theirs=1; paddock_preview_8000_%s=%s\r\n", b.id, token);
        GET_EXPECT(host, hi, cookie, 200, "hello-preview");

        /* The list shows it, never its token. */
        struct hres r;
        http_req(&b.c, "GET", ppath, b.key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, "\"port\":8000");
        ASSERT_CONTAINS(r.body, url);
        ASSERT_NULL(strstr(r.body, token));
        hres_done(&r);

        /* A dev server that checks Host gets localhost:<port>; our cookie and token stay out. */
        char url2[256], token2[128], path2[512], host2[256];
        put_expect(&b, "/tmp/host.py", host_server, strlen(host_server), 204);
        start_detached(&b, "exec python3 /tmp/host.py");
        make_preview(&b, "{\"port\":5173}", url2, sizeof(url2), token2, sizeof(token2));
        int port2;
        split_url(url2, &port2, host2, sizeof(host2), path2, sizeof(path2));
        snprintf(cookie, sizeof(cookie), "Cookie: theirs=1; paddock_preview_5173_%s=%s\r\n", b.id, token2);
        char sub[600];
        snprintf(sub, sizeof(sub), "%ssub/page", path2);
        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", sub, host2, cookie);
        _cleanup_free_ char *hresp = RAW_ONCE_UP(port2, req);
        if (status_of(hresp) != 200 || !strstr(hresp, "host-ok localhost:5173 /sub/page cookie=theirs=1"))
                test_fail(__FILE__, __LINE__, "the Host-checking server said: %.500s", hresp);
        ASSERT_NULL(strstr(hresp, token2));
        /* keepHost passes the client's Host: this server then refuses it, as it would directly. */
        make_preview(&b, "{\"port\":5173,\"keepHost\":true,\"public\":true}", url2, sizeof(url2), NULL, 0);
        GET_EXPECT(host2, sub, "", 403, "host-refused 5173-");
        /* ... and replacing the preview retired the old token at once. */
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", token2);
        make_preview(&b, "{\"port\":5173}", url2, sizeof(url2), token2, sizeof(token2));
        GET_EXPECT(host2, sub, hdr, 403, "not this preview");

        /* WebSocket through a public preview: the upgrade and frames pass both ways. */
        put_expect(&b, "/tmp/ws.py", ws_server, strlen(ws_server), 204);
        start_detached(&b, "exec python3 /tmp/ws.py");
        char url3[256], path3[512], host3[256];
        make_preview(&b, "{\"port\":8765,\"public\":true}", url3, sizeof(url3), NULL, 0);
        int port3;
        split_url(url3, &port3, host3, sizeof(host3), path3, sizeof(path3));
        for (int i = 0;; i++) {
                int fd = dial(port3);
                snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                         path3, host3);
                ASSERT_TRUE(send(fd, req, strlen(req), MSG_NOSIGNAL) > 0);
                _cleanup_free_ char *resp = read_until(fd, "\r\n\r\n", 20000);
                if (status_of(resp) == 502 && i < 100) {
                        close(fd);
                        usleep(100000);
                        continue;
                }
                ASSERT_EQ(status_of(resp), 101);
                ASSERT_CONTAINS(resp, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
                /* a masked text frame "ping-ws" */
                const char msg[] = "ping-ws";
                unsigned char fr[2 + 4 + sizeof(msg) - 1], mask[4] = { 1, 2, 3, 4 };
                fr[0] = 0x81;
                fr[1] = 0x80 | (unsigned char) (sizeof(msg) - 1);
                memcpy(fr + 2, mask, 4);
                for (size_t k = 0; k < sizeof(msg) - 1; k++)
                        fr[6 + k] = (unsigned char) msg[k] ^ mask[k % 4];
                ASSERT_TRUE(send(fd, fr, sizeof(fr), MSG_NOSIGNAL) == (ssize_t) sizeof(fr));
                _cleanup_free_ char *echo = read_until(fd, "echo:ping-ws", 20000);
                close(fd);
                break;
        }

        /* Another account: cannot see, make or revoke this sandbox's previews, and its own
         * preview's token does not open this one. */
        char bob_id[25];
        _cleanup_free_ char *bob = ctld_account_key(&b.c, "bob", NULL, NULL);
        HTTP_EXPECT(&b.c, "GET", ppath, bob, NULL, 404);
        HTTP_EXPECT(&b.c, "POST", ppath, bob, "{\"port\":8000}", 404);
        snprintf(path, sizeof(path), "%s/8000", ppath);
        HTTP_EXPECT(&b.c, "DELETE", path, bob, NULL, 404);
        ctld_create(&b.c, bob, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}", bob_id);
        char bpath[96];
        snprintf(bpath, sizeof(bpath), "/sandboxes/%s/previews", bob_id);
        http_req(&b.c, "POST", bpath, bob, "{\"port\":8000}", &r);
        ASSERT_EQ(r.status, 201);
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", cJSON_GetStringValue(data_item(&r, "token")));
        hres_done(&r);
        GET_EXPECT(host, hi, hdr, 403, "not this preview");

        /* Revoked: at once. Expired: at once. */
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", token);
        GET_EXPECT(host, hi, hdr, 200, "hello-preview");
        HTTP_EXPECT(&b.c, "DELETE", path, b.key, NULL, 200);
        HTTP_EXPECT(&b.c, "DELETE", path, b.key, NULL, 404);
        GET_EXPECT(host, hi, hdr, 404, "no preview of port 8000");
        make_preview(&b, "{\"port\":8000,\"expiresIn\":1}", url, sizeof(url), token, sizeof(token));
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", token);
        usleep(1300000);
        GET_EXPECT(host, hi, hdr, 410, "expired");

        /* The path form (/p/<id>/<port>/, every preview on the listener's one origin) is off
         * unless an operator opts in: no preview there. */
        char pathform[128], lhost[64];
        snprintf(pathform, sizeof(pathform), "/p/%s/8000/hi.txt", b.id);
        snprintf(lhost, sizeof(lhost), "127.0.0.1:%d", port);
        GET_EXPECT(lhost, pathform, hdr, 404, "preview URL looks like");
        /* Not a preview URL, a bad request, a head too large: pages, not hangs. */
        GET_EXPECT(lhost, "/elsewhere", "", 404, "preview URL looks like");
        _cleanup_free_ char *bad = raw(port, "GET /p/ HTTP/1.1\r\nHost x\r\n\r\n");
        ASSERT_EQ(status_of(bad), 400);
        char *huge = xmalloc(40000);
        memset(huge, 'a', 39999);
        huge[39999] = 0;
        char *big = xasprintf("GET / HTTP/1.1\r\nX-Big: %s\r\n\r\n", huge);
        _cleanup_free_ char *tl = raw(port, big);
        ASSERT_EQ(status_of(tl), 431);
        free(big);
        free(huge);

        /* Metrics count what passed; the journal has the preview opened. */
        http_req(&b.c, "GET", "/metrics", NULL, NULL, &r);
        ASSERT_CONTAINS(r.body, "paddock_preview_requests_total{status=\"ready\"}");
        ASSERT_NULL(strstr(r.body, "paddock_preview_bytes_out_total{status=\"ready\"} 0\n"));
        hres_done(&r);
        _cleanup_free_ char *log = slurp(b.c.log);
        ASSERT_CONTAINS(log, "preview opened: port 8000");

        /* Paused: a page that says so, at once. Destroyed: gone. */
        make_preview(&b, "{\"port\":8000}", url, sizeof(url), token, sizeof(token));
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", token);
        char op_path[96];
        snprintf(op_path, sizeof(op_path), "/sandboxes/%s/pause", b.id);
        HTTP_EXPECT(&b.c, "POST", op_path, b.key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(&b.c, b.key, b.id, "paused", 60), "paused");
        GET_EXPECT(host, hi, hdr, 503, "is paused");
        snprintf(op_path, sizeof(op_path), "/sandboxes/%s", b.id);
        HTTP_EXPECT(&b.c, "DELETE", op_path, b.key, NULL, 204);
        ASSERT_STREQ(ctld_wait_status(&b.c, b.key, b.id, "destroyed", 60), "destroyed");
        GET_EXPECT(host, hi, hdr, 410, "destroyed");
}

/* With [preview] domain: <port>-<id>.<domain> routes by Host, the URL says so, the path is
 * passed as it is (no prefix), and a Host of another domain or a malformed one is no preview. */
TEST_FULL(preview_by_host_name_under_a_domain, 180) {
        struct box b;
        int lport = test_free_port();
        char conf[256];
        snprintf(conf, sizeof(conf), "[preview]\nlisten = 127.0.0.1:%d\ndomain = preview.test\nper_sandbox_connections = 2\n",
                 lport);
        box_start(&b, NULL, conf, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        char url[256], want[128], hdr[512];
        make_preview(&b, "{\"port\":8000,\"public\":true}", url, sizeof(url), NULL, 0);
        snprintf(want, sizeof(want), "https://8000-%s.preview.test/", b.id);
        ASSERT_STREQ(url, want);
        free(sh(&b, "mkdir -p /tmp/www/sub && echo by-host > /tmp/www/sub/x.txt"));
        start_detached(&b, "exec python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/www");
        snprintf(hdr, sizeof(hdr), "GET /sub/x.txt HTTP/1.1\r\nHost: 8000-%s.preview.test\r\n\r\n", b.id);
        _cleanup_free_ char *r1 = RAW_ONCE_UP(lport, hdr);
        ASSERT_EQ(status_of(r1), 200);
        ASSERT_CONTAINS(r1, "by-host");
        /* with the listener's port in Host too (a proxy that keeps it) */
        snprintf(hdr, sizeof(hdr), "GET /sub/x.txt HTTP/1.1\r\nHost: 8000-%s.PREVIEW.test:443\r\n\r\n", b.id);
        _cleanup_free_ char *r2 = raw(lport, hdr);
        ASSERT_EQ(status_of(r2), 200);
        snprintf(hdr, sizeof(hdr), "GET /sub/x.txt HTTP/1.1\r\nHost: 8000-%s.other.test\r\n\r\n", b.id);
        _cleanup_free_ char *r3 = raw(lport, hdr);
        ASSERT_EQ(status_of(r3), 404);
        snprintf(hdr, sizeof(hdr), "GET /sub/x.txt HTTP/1.1\r\nHost: 99999-%s.preview.test\r\n\r\n", b.id);
        _cleanup_free_ char *r4 = raw(lport, hdr);
        ASSERT_EQ(status_of(r4), 404);
        /* a port without a preview on a real sandbox: no preview, said so */
        snprintf(hdr, sizeof(hdr), "GET / HTTP/1.1\r\nHost: 8001-%s.preview.test\r\n\r\n", b.id);
        _cleanup_free_ char *r5 = raw(lport, hdr);
        ASSERT_EQ(status_of(r5), 404);
        ASSERT_CONTAINS(r5, "no preview of port 8001");
        /* Under https the token's cookie is __Host- and Secure (no other site, nor plain http,
         * can set or read it), and that cookie opens the preview. */
        char tok[128], q[512], want_cookie[128];
        make_preview(&b, "{\"port\":8002}", url, sizeof(url), tok, sizeof(tok));
        snprintf(hdr, sizeof(hdr), "GET /x?paddock_token=%s HTTP/1.1\r\nHost: 8002-%s.preview.test\r\n\r\n", tok, b.id);
        _cleanup_free_ char *rc = raw(lport, hdr);
        ASSERT_EQ(status_of(rc), 302);
        snprintf(want_cookie, sizeof(want_cookie), "Set-Cookie: __Host-paddock_preview_8002_%s=", b.id);
        ASSERT_CONTAINS(rc, want_cookie);
        ASSERT_CONTAINS(rc, "; Path=/;");
        ASSERT_CONTAINS(rc, "; Secure\r\n");
        snprintf(q, sizeof(q), "GET /x HTTP/1.1\r\nHost: 8002-%s.preview.test\r\nCookie: __Host-paddock_preview_8002_%s=%s\r\n\r\n",
                 b.id, b.id, tok);
        _cleanup_free_ char *rc2 = raw(lport, q);
        ASSERT_EQ(status_of(rc2), 502);   /* past the token: nothing listens on 8002 */

        /* Connections per sandbox are bounded: two held by a server that accepts and never
         * answers, the third is told to come back (429), and one closing frees its place. */
        start_detached(&b, "exec python3 -c 'import socket,time\\ns=socket.socket()\\ns.bind((\\\"127.0.0.1\\\",9000))\\n"
                           "s.listen(8)\\nk=[s.accept() for _ in range(8)]\\ntime.sleep(600)'");
        make_preview(&b, "{\"port\":9000,\"public\":true}", url, sizeof(url), NULL, 0);
        snprintf(hdr, sizeof(hdr), "GET / HTTP/1.1\r\nHost: 9000-%s.preview.test\r\n\r\n", b.id);
        int held[2] = { -1, -1 };
        for (int i = 0, tries = 0; i < 2; tries++) {
                /* held = no answer within half a second (before the server is up: a 502 page) */
                ASSERT_TRUE(tries < 100);
                held[i] = dial(lport);
                ASSERT_TRUE(send(held[i], hdr, strlen(hdr), MSG_NOSIGNAL) > 0);
                struct pollfd hp = { .fd = held[i], .events = POLLIN };
                if (poll(&hp, 1, 500) == 0) {
                        i++;
                        continue;
                }
                close(held[i]);
                usleep(200000);
        }
        usleep(500000);
        _cleanup_free_ char *r6 = raw(lport, hdr);
        ASSERT_EQ(status_of(r6), 429);
        close(held[0]);
        usleep(1500000);
        int again = dial(lport);
        ASSERT_TRUE(send(again, hdr, strlen(hdr), MSG_NOSIGNAL) > 0);
        struct pollfd pfd = { .fd = again, .events = POLLIN };
        ASSERT_EQ(poll(&pfd, 1, 1000), 0);   /* held, not refused */
        /* Revoking the preview ends the connections open through it within a second or two. */
        char dpath[96];
        snprintf(dpath, sizeof(dpath), "/sandboxes/%s/previews/9000", b.id);
        HTTP_EXPECT(&b.c, "DELETE", dpath, b.key, NULL, 200);
        int64_t t0 = now_mono_ms();
        _cleanup_free_ char *rest = read_until(again, NULL, 5000);
        ASSERT_TRUE(now_mono_ms() - t0 < 4000);
        close(again);
        close(held[1]);
}

/* A server that streams a line every 200 ms for as long as the connection lasts. */
static const char ticker_server[] =
        "import socket, threading, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 9100)); s.listen(8)\n"
        "def h(c):\n"
        "    h = b''\n"
        "    while b'\\r\\n\\r\\n' not in h:\n"
        "        d = c.recv(4096)\n"
        "        if not d: return\n"
        "        h += d\n"
        "    try:\n"
        "        c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Type: text/plain\\r\\n\\r\\n')\n"
        "        while True:\n"
        "            c.sendall(b'tick\\n'); time.sleep(0.2)\n"
        "    except OSError: c.close()\n"
        "while True:\n"
        "    c, _ = s.accept(); threading.Thread(target=h, args=(c,), daemon=True).start()\n";

/* Opens a stream through host's preview and reads until the first tick (the server may not be
 * up yet: 502 pages are retried): the connection, streaming. */
static int open_stream(const char *host, const char *extra) {
        char req[1024];
        snprintf(req, sizeof(req), "GET /stream HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, extra);
        for (int i = 0;; i++) {
                int fd = dial(port_of(host));
                ASSERT_TRUE(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t) strlen(req));
                _cleanup_free_ char *resp = read_until(fd, "\r\n\r\n", 20000);
                if (status_of(resp) == 502 && i < 100) {
                        close(fd);
                        usleep(100000);
                        continue;
                }
                ASSERT_EQ(status_of(resp), 200);
                free(read_until(fd, "tick", 5000));
                return fd;
        }
}

/* Revoking a preview, or its expiry, ends a connection through it within a second or so even
 * while bytes flow all the time (here: a line every 200 ms, so the connection is never idle). */
TEST_FULL(preview_revocation_and_expiry_end_a_busy_stream, 240) {
        struct box b;
        box_start(&b, NULL, PREVIEW_CONF, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        put_expect(&b, "/tmp/ticker.py", ticker_server, strlen(ticker_server), 204);
        start_detached(&b, "exec python3 /tmp/ticker.py");
        char url[256], token[128], host[256], path[256], hdr[256], dpath[96];
        int lport;
        make_preview(&b, "{\"port\":9100}", url, sizeof(url), token, sizeof(token));
        split_url(url, &lport, host, sizeof(host), path, sizeof(path));
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", token);
        int fd = open_stream(host, hdr);
        /* still streaming a while later: busy, not idle */
        usleep(1500000);
        free(read_until(fd, "tick", 2000));
        snprintf(dpath, sizeof(dpath), "/sandboxes/%s/previews/9100", b.id);
        HTTP_EXPECT(&b.c, "DELETE", dpath, b.key, NULL, 200);
        int64_t t0 = now_mono_ms();
        free(read_until(fd, NULL, 5000));   /* fails the test unless the connection ends */
        ASSERT_TRUE(now_mono_ms() - t0 < 5000);
        close(fd);

        /* expiry, the same: a preview of 2 s ends its stream soon after, busy or not */
        make_preview(&b, "{\"port\":9100,\"expiresIn\":2}", url, sizeof(url), token, sizeof(token));
        snprintf(hdr, sizeof(hdr), "X-Paddock-Preview-Token: %s\r\n", token);
        fd = open_stream(host, hdr);
        t0 = now_mono_ms();
        free(read_until(fd, NULL, 7000));
        ASSERT_TRUE(now_mono_ms() - t0 < 7000);
        close(fd);
}

/* Connects to 127.0.0.1:port from the loopback address src. */
static int dial_from(const char *src, int port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        struct sockaddr_in a = { .sin_family = AF_INET };
        ASSERT_EQ(inet_pton(AF_INET, src, &a.sin_addr), 1);
        ASSERT_EQ(bind(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        a.sin_port = htons((uint16_t) port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        return fd;
}

/* One client address holding idle connections (a slowloris) cannot take every place on the
 * preview or the E2B listener: past per_address_connections it is refused at once (429), the
 * refusals are counted in /metrics, and another address is still served. */
TEST_FULL(one_address_cannot_hold_every_listener_connection, 180) {
        struct box b;
        int eport = test_free_port();
        char conf[512];
        snprintf(conf, sizeof(conf),
                 "[preview]\nlisten = 127.0.0.1:0\nper_address_connections = 4\nhead_timeout = 1s\n"
                 "[e2b]\nlisten = 127.0.0.1:%d\nper_address_connections = 4\nhead_timeout = 1s\n",
                 eport);
        box_start(&b, NULL, conf, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        char url[256], host[256], path[256];
        int pport;
        make_preview(&b, "{\"port\":8000,\"public\":true}", url, sizeof(url), NULL, 0);
        split_url(url, &pport, host, sizeof(host), path, sizeof(path));
        int ports[2] = { pport, eport };
        for (int k = 0; k < 2; k++) {
                int idle[4];
                for (int i = 0; i < 4; i++)
                        idle[i] = dial_from("127.0.0.1", ports[k]);   /* open, never a byte */
                usleep(300000);
                int fd = dial_from("127.0.0.1", ports[k]);
                int64_t t0 = now_mono_ms();
                _cleanup_free_ char *refused = read_until(fd, NULL, 3000);
                ASSERT_TRUE(now_mono_ms() - t0 < 3000);
                ASSERT_EQ(status_of(refused), 429);
                close(fd);
                /* another address is served all the same */
                fd = dial_from("127.0.0.2", ports[k]);
                const char *req = k == 0 ? "GET /elsewhere HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n"
                                         : "GET /health HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n";
                ASSERT_TRUE(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t) strlen(req));
                _cleanup_free_ char *served = read_until(fd, "\r\n\r\n", 5000);
                ASSERT_EQ(status_of(served), k == 0 ? 404 : 204);
                close(fd);
                for (int i = 0; i < 4; i++)
                        close(idle[i]);
        }
        /* a head that trickles in is cut at the head deadline (1 s here), whatever it sends:
         * the connection is answered or closed well before a slowloris could hold it */
        for (int k = 0; k < 2; k++) {
                int fd = dial_from("127.0.0.3", ports[k]);
                int64_t t0 = now_mono_ms();
                bool closed = false;
                static const char slow[] = "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
                ASSERT_TRUE(send(fd, slow, strlen(slow), MSG_NOSIGNAL) == (ssize_t) strlen(slow));
                while (!closed && now_mono_ms() - t0 < 15000) {
                        usleep(200000);
                        if (send(fd, "a", 1, MSG_NOSIGNAL) != 1)
                                closed = true;   /* reset: the server is done with it */
                        char b1[512];
                        ssize_t got = recv(fd, b1, sizeof(b1), MSG_DONTWAIT);
                        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || got > 0)
                                closed = true;   /* answered (408) or closed */
                }
                int64_t took = now_mono_ms() - t0;
                close(fd);
                if (!closed || took > 8000)
                        test_fail(__FILE__, __LINE__, "listener %d held a trickling head for %lld ms (deadline 1 s)", k,
                                  (long long) took);
        }
        struct hres r;
        http_req(&b.c, "GET", "/metrics", NULL, NULL, &r);
        ASSERT_CONTAINS(r.body, "paddock_listener_refused_total{listener=\"preview listener\",reason=\"per_address\"} 1\n");
        ASSERT_CONTAINS(r.body, "paddock_listener_refused_total{listener=\"e2b listener\",reason=\"per_address\"} 1\n");
        hres_done(&r);
}

/* An app that answers every request it finds on a connection, pipelined ones too (ignoring
 * Connection: close), echoing each request head it received. */
static const char echo_server[] =
        "import socket, threading\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', 9200)); s.listen(8)\n"
        "def h(c):\n"
        "    c.settimeout(0.7); buf = b''\n"
        "    while True:\n"
        "        try: d = c.recv(65536)\n"
        "        except OSError: break\n"
        "        if not d: break\n"
        "        buf += d\n"
        "    out = b''.join(b'[' + p + b']\\n' for p in buf.split(b'\\r\\n\\r\\n') if p.strip())\n"
        "    c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n' % len(out) + out)\n"
        "    c.close()\n"
        "while True:\n"
        "    c, _ = s.accept(); threading.Thread(target=h, args=(c,), daemon=True).start()\n";

/* Sends req (two pipelined requests) on port and returns what came back until the close. */
static char *pipelined(int port, const char *req) {
        int fd = dial(port);
        ASSERT_TRUE(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t) strlen(req));
        char *resp = read_until(fd, NULL, 20000);
        close(fd);
        return resp;
}

/* What the app receives: the first request's head rewritten, and nothing a client put after
 * it: no X-Forwarded-* of the client's, no preview token or cookie of ours, no E2B traffic
 * token, on any request of the connection, through the preview and the E2B listeners. */
TEST_FULL(the_app_sees_no_header_of_ours_on_any_request, 240) {
        struct box b;
        int eport = test_free_port();
        char conf[256];
        snprintf(conf, sizeof(conf), "[preview]\nlisten = 127.0.0.1:0\n[e2b]\nlisten = 127.0.0.1:%d\n", eport);
        box_start(&b, NULL, conf, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        put_expect(&b, "/tmp/echo.py", echo_server, strlen(echo_server), 204);
        start_detached(&b, "exec python3 /tmp/echo.py");
        char url[256], token[128], host[256], path[256];
        int lport;
        make_preview(&b, "{\"port\":9200}", url, sizeof(url), token, sizeof(token));
        split_url(url, &lport, host, sizeof(host), path, sizeof(path));
        /* the sandbox's E2B traffic token (E2B's own API, the same key) */
        char epath[64];
        snprintf(epath, sizeof(epath), "/sandboxes/%s/connect", b.id);
        char ereq[512];
        snprintf(ereq, sizeof(ereq),
                 "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX-API-Key: %s\r\nConnection: close\r\n"
                 "Content-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"timeout\":600}",
                 epath, eport, b.key);
        _cleanup_free_ char *eresp = raw(eport, ereq);
        ASSERT_EQ(test_raw_status(eresp), 200);
        _cleanup_(cJSON_Deletep) cJSON *ej = cJSON_Parse(test_raw_body(eresp));
        const char *tt = cJSON_GetStringValue(cJSON_GetObjectItem(ej, "trafficAccessToken"));
        if (!tt)
                test_fail(__FILE__, __LINE__, "no trafficAccessToken in %s", eresp);
        char traffic[128];
        snprintf(traffic, sizeof(traffic), "%s", tt);

        for (int k = 0; k < 2; k++) {
                char req[4096], h2[256];
                if (k == 0)
                        snprintf(h2, sizeof(h2), "%s", host);
                else
                        snprintf(h2, sizeof(h2), "9200-%s.localhost:%d", b.id, eport);
                const char *ours = "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Port: 1234567\r\n"
                                   "Forwarded: for=6.6.6.7\r\n";
                snprintf(req, sizeof(req),
                         "GET /one HTTP/1.1\r\nHost: %s\r\nX-Paddock-Preview-Token: %s\r\ne2b-traffic-access-token: %s\r\n"
                         "Cookie: theirs=1; paddock_preview_9200_%s=%s\r\n%s\r\n"
                         "GET /two HTTP/1.1\r\nHost: %s\r\nX-Paddock-Preview-Token: %s\r\ne2b-traffic-access-token: %s\r\n"
                         "Cookie: paddock_preview_9200_%s=%s\r\n%s\r\n",
                         h2, token, traffic, b.id, token, ours, h2, token, traffic, b.id, token, ours);
                char *resp = NULL;
                for (int i = 0;; i++) {
                        resp = pipelined(k == 0 ? lport : eport, req);
                        if (status_of(resp) != 502 || i == 100)
                                break;
                        free(resp);
                        usleep(100000);
                }
                if (status_of(resp) != 200 || !strstr(resp, "[GET /one HTTP/1.1"))
                        test_fail(__FILE__, __LINE__, "via %s: %.600s", k ? "E2B" : "preview", resp);
                ASSERT_CONTAINS(resp, "Cookie: theirs=1");
                const char *never[] = { "6.6.6.6", "6.6.6.7", "evil.example", "1234567", token, traffic, "GET /two" };
                for (size_t i = 0; i < ELEMENTSOF(never); i++)
                        if (strstr(resp, never[i]))
                                test_fail(__FILE__, __LINE__, "via %s the app received '%s': %.900s", k ? "E2B" : "preview",
                                          never[i], resp);
                free(resp);
        }
}

/* The path form (/p/<id>/<port>/: every preview on the listener's one origin) only when an
 * operator opts in, and controld says at start what that costs. */
TEST_FULL(the_path_form_is_an_explicit_warned_opt_in, 120) {
        struct box b;
        box_start(&b, NULL, "[preview]\nlisten = 127.0.0.1:0\npath_form = true\n",
                  "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        char url[256], token[128], want[128], lhost[64], noslash[128], loc[160];
        make_preview(&b, "{\"port\":8000}", url, sizeof(url), token, sizeof(token));
        snprintf(want, sizeof(want), "/p/%s/8000/", b.id);
        if (strncmp(url, "http://127.0.0.1:", 17) || !strstr(url, want))
                test_fail(__FILE__, __LINE__, "not a path-form URL: %s", url);
        snprintf(lhost, sizeof(lhost), "127.0.0.1:%d", atoi(url + 17));
        snprintf(noslash, sizeof(noslash), "/p/%s/8000?q=1", b.id);
        snprintf(loc, sizeof(loc), "Location: /p/%s/8000/?q=1\r\n", b.id);
        GET_EXPECT(lhost, noslash, "", 308, loc);
        GET_EXPECT(lhost, want, "", 401, "needs its token");
        _cleanup_free_ char *log = slurp(b.c.log);
        ASSERT_CONTAINS(log, "path_form = true: preview URLs /p/<id>/<port>/ put every preview of every account on one");
}
