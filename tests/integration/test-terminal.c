/* test-terminal.c — the terminal WebSocket as a client meets it (issue 22): a shell on a real
 * terminal (tty names /dev/pts/N), typed input echoed, a resize seen by `stty size`, bytes
 * passed untouched both ways, the socket's close ending the shell, the shell's exit closing the
 * socket with its code; and refusals: no key, a bad or another sandbox's token, another
 * account, not an upgrade. The browser page itself is test-terminal-browser's. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "runtimetest.h"
#include "testlib.h"
#include "ws.h"

struct wsc {
        int fd;
        struct ws_reader rd;
        char *text;       /* binary payloads received so far, joined */
        size_t len, cap;
        bool closed;
        uint16_t close_code;
        char *close_reason;
};

/* Opens path (with query) on c: the status of the answer; on 101 *ret is connected. */
static int ws_open(struct ctld *c, const char *path, const char *key_header, struct wsc *ret) {
        memset(ret, 0, sizeof(*ret));
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) c->port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        char key[WS_KEY_LEN + 1], host[64];
        ws_key_new(key);
        snprintf(host, sizeof(host), "127.0.0.1:%d", c->port);
        const char *extra[] = { key_header, NULL };
        _cleanup_free_ char *req = NULL;
        ASSERT_EQ(ws_client_request(host, path, key, key_header ? extra : NULL, &req), 0);
        ASSERT_TRUE(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t) strlen(req));
        char buf[16384];
        size_t n = 0;
        int status = 0;
        size_t head = 0;
        int64_t deadline = now_mono_ms() + 15000;
        for (;;) {
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                ASSERT_TRUE(now_mono_ms() < deadline);
                if (poll(&pfd, 1, 500) <= 0)
                        continue;
                ssize_t k = recv(fd, buf + n, sizeof(buf) - n, 0);
                ASSERT_GE(k, 1);
                n += (size_t) k;
                int r = ws_client_parse_response(buf, n, key, &status, &head);
                if (r == -EAGAIN)
                        continue;
                if (r == -EPROTO && n >= 12) {
                        /* a refusal: its status line */
                        sscanf(buf, "HTTP/1.%*d %d", &status);
                        close(fd);
                        return status;
                }
                ASSERT_EQ(r, 0);
                break;
        }
        if (status != 101) {
                close(fd);
                return status;
        }
        ret->fd = fd;
        ws_reader_init(&ret->rd, WS_ROLE_CLIENT, 1 << 20);
        if (n > head)
                ASSERT_EQ(ws_reader_feed(&ret->rd, buf + head, n - head), 0);
        return 101;
}

static void wsc_send(struct wsc *w, uint8_t op, const void *p, size_t n) {
        _cleanup_strbuf_ struct strbuf b;
        strbuf_init(&b, 0);
        ASSERT_EQ(ws_frame_encode(&b, WS_ROLE_CLIENT, true, op, p, n), 0);
        ASSERT_TRUE(send(w->fd, b.buf, b.len, MSG_NOSIGNAL) == (ssize_t) b.len);
}

static void wsc_type(struct wsc *w, const char *s) { wsc_send(w, WS_OP_BINARY, s, strlen(s)); }

/* Reads until the joined output holds want after the first anchor (anchor NULL: anywhere;
 * want NULL: until the close frame), within 20 s. */
static void wsc_until_after(struct wsc *w, const char *anchor, const char *want) {
        int64_t deadline = now_mono_ms() + 20000;
        for (;;) {
                struct ws_message m;
                int r;
                while ((r = ws_reader_next(&w->rd, &m)) == 1) {
                        if (m.opcode == WS_OP_BINARY || m.opcode == WS_OP_TEXT) {
                                if (w->len + m.len + 1 > w->cap) {
                                        w->cap = (w->len + m.len + 1) * 2;
                                        w->text = xrealloc(w->text, w->cap);
                                }
                                memcpy(w->text + w->len, m.data, m.len);
                                w->len += m.len;
                                w->text[w->len] = 0;
                        } else if (m.opcode == WS_OP_CLOSE) {
                                w->closed = true;
                                ASSERT_EQ(ws_close_parse(m.data, m.len, &w->close_code, &w->close_reason), 0);
                        }
                        ws_message_done(&m);
                }
                ASSERT_EQ(r, 0);
                const char *from = w->text && anchor ? strstr(w->text, anchor) : w->text;
                if (want && from && strstr(from, want))
                        return;
                if (w->closed) {
                        if (!want)
                                return;
                        test_fail(__FILE__, __LINE__, "closed (%u %s) before \"%s\"; got: %.500s", w->close_code,
                                  w->close_reason ?: "", want, w->text ?: "");
                }
                if (now_mono_ms() > deadline)
                        test_fail(__FILE__, __LINE__, "no \"%s\" within 20 s; got: %.500s", want ? want : "close",
                                  w->text ?: "");
                struct pollfd pfd = { .fd = w->fd, .events = POLLIN };
                if (poll(&pfd, 1, 200) <= 0)
                        continue;
                uint8_t buf[16384];
                ssize_t k = recv(w->fd, buf, sizeof(buf), 0);
                if (k <= 0) {
                        if (!want)
                                return;
                        test_fail(__FILE__, __LINE__, "connection ended before \"%s\"; got: %.500s", want, w->text ?: "");
                }
                ASSERT_EQ(ws_reader_feed(&w->rd, buf, (size_t) k), 0);
        }
}

static void wsc_until(struct wsc *w, const char *want) { wsc_until_after(w, NULL, want); }

static void wsc_done(struct wsc *w) {
        if (w->fd > 0)
                close(w->fd);
        ws_reader_done(&w->rd);
        free(w->text);
        free(w->close_reason);
        memset(w, 0, sizeof(*w));
}

/* POST /pty/token for id: the token. */
static char *pty_token(struct ctld *c, const char *key, const char *id) {
        struct hres r;
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/pty/token", id);
        http_req(c, "POST", path, key, "", &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "POST %s -> %ld %s", path, r.status, r.body);
        char *t = xstrdup(cJSON_GetStringValue(data_item(&r, "token")));
        hres_done(&r);
        return t;
}

TEST_FULL(terminal_over_a_websocket, 240) {
        struct box b;
        box_start(&b, NULL, NULL, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        char path[512], kh[256];
        struct wsc w;
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", b.key);

        /* With the API key header: a login shell on a terminal. */
        snprintf(path, sizeof(path), "/sandboxes/%s/pty?rows=30&cols=90", b.id);
        ASSERT_EQ(ws_open(&b.c, path, kh, &w), 101);
        wsc_type(&w, "tty; stty size; echo hi-$((6*7))\r");
        wsc_until(&w, "hi-42");
        /* bash's readline reads the size and writes it back as it prepares each prompt: a
         * resize sent before the prompt is out can be undone by it, on any Linux */
        wsc_until_after(&w, "hi-42", "# ");
        ASSERT_CONTAINS(w.text, "/dev/pts/");
        ASSERT_CONTAINS(w.text, "30 90");
        /* a resize reaches stty */
        wsc_send(&w, WS_OP_TEXT, "{\"type\":\"resize\",\"rows\":33,\"cols\":101}", 38);
        wsc_type(&w, "stty size | sed 's/ /x/'\r");
        wsc_until(&w, "33x101");
        /* bytes pass untouched: a NUL and 0xff typed after ^V reach od as they are */
        wsc_type(&w, "printf 'A\\000\\377B' | od -An -tx1 | tr -d ' '; echo $$ > /tmp/shell.pid\r");
        wsc_until(&w, "4100ff42");
        /* closing the socket ends the shell */
        wsc_done(&w);
        usleep(300000);
        bool gone = false;
        for (int i = 0; i < 50 && !gone; i++) {
                _cleanup_free_ char *out = sh(&b, "kill -0 $(cat /tmp/shell.pid) 2>/dev/null && echo alive || echo gone");
                gone = strstr(out, "gone") != NULL;
                if (!gone)
                        usleep(100000);
        }
        ASSERT_TRUE(gone);

        /* The shell's exit closes the socket with its code; cmd and cwd from the query. */
        _cleanup_free_ char *tok = pty_token(&b.c, b.key, b.id);
        snprintf(path, sizeof(path), "/sandboxes/%s/pty?token=%s&cmd=pwd%%3B%%20exit%%203&cwd=/tmp", b.id, tok);
        ASSERT_EQ(ws_open(&b.c, path, NULL, &w), 101);
        wsc_until(&w, NULL);
        ASSERT_CONTAINS(w.text, "/tmp");
        ASSERT_TRUE(w.closed);
        ASSERT_STREQ(w.close_reason, "exit 3");
        wsc_done(&w);

        /* Refusals. */
        snprintf(path, sizeof(path), "/sandboxes/%s/pty", b.id);
        ASSERT_EQ(ws_open(&b.c, path, NULL, &w), 401);
        snprintf(path, sizeof(path), "/sandboxes/%s/pty?token=123.abc", b.id);
        ASSERT_EQ(ws_open(&b.c, path, NULL, &w), 401);
        _cleanup_free_ char *bob = ctld_account_key(&b.c, "bob", NULL, NULL);
        char bh[256], bob_id[25];
        snprintf(bh, sizeof(bh), "x-brimble-key: %s", bob);
        snprintf(path, sizeof(path), "/sandboxes/%s/pty", b.id);
        ASSERT_EQ(ws_open(&b.c, path, bh, &w), 404);
        ctld_create(&b.c, bob, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}", bob_id);
        _cleanup_free_ char *btok = pty_token(&b.c, bob, bob_id);
        snprintf(path, sizeof(path), "/sandboxes/%s/pty?token=%s", b.id, btok);   /* bob's token, alice's sandbox */
        ASSERT_EQ(ws_open(&b.c, path, NULL, &w), 401);
        snprintf(path, sizeof(path), "/sandboxes/%s/pty?token=%s", b.id, tok);   /* alice's own still works */
        ASSERT_EQ(ws_open(&b.c, path, NULL, &w), 101);
        wsc_done(&w);
        /* 8 terminals per sandbox: the ninth is told so (429) */
        struct wsc many[8];
        usleep(1500000);   /* the sessions closed above are noticed within a second */
        snprintf(path, sizeof(path), "/sandboxes/%s/pty?cmd=sleep%%20100", b.id);
        for (int i = 0; i < 8; i++)
                if (ws_open(&b.c, path, kh, &many[i]) != 101)
                        test_fail(__FILE__, __LINE__, "terminal %d of 8 refused", i + 1);
        /* the ninth is refused before any upgrade: the place is taken before the 101 */
        ASSERT_EQ(ws_open(&b.c, path, kh, &w), 429);
        for (int i = 0; i < 8; i++)
                wsc_done(&many[i]);
        snprintf(path, sizeof(path), "/sandboxes/%s/pty?rows=0", b.id);
        ASSERT_EQ(ws_open(&b.c, path, kh, &w), 400);
        snprintf(path, sizeof(path), "/sandboxes/%s/pty", b.id);
        HTTP_EXPECT_MSG(&b.c, "GET", path, b.key, NULL, 426, "WebSocket");

        /* The page and its assets are served (the browser test drives them). */
        snprintf(path, sizeof(path), "/sandboxes/%s/terminal?token=%s", b.id, tok);
        HTTP_EXPECT(&b.c, "GET", path, NULL, NULL, 200);
        snprintf(path, sizeof(path), "/sandboxes/%s/terminal", b.id);
        HTTP_EXPECT(&b.c, "GET", path, NULL, NULL, 401);
        struct hres r;
        http_req(&b.c, "GET", "/terminal/xterm.js", NULL, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_TRUE(r.len > 100000);
        hres_done(&r);
        HTTP_EXPECT(&b.c, "GET", "/healthz", NULL, NULL, 200);
}

/* The page in a real browser: headless Chromium (Debian's) driven by puppeteer-core
 * (tests/browser/terminal.mjs): it loads, `echo hi` typed shows `hi`, and a resized window
 * reaches `stty size`. The screenshot stays in the build tree for a person to look at. */
TEST_FULL(terminal_page_in_headless_chromium, 240) {
        if (access("/usr/bin/chromium", X_OK) != 0)
                TEST_SKIP("chromium is not installed (tests/env/services.sh install adds it)");
        const char *script = test_build_path("npm-test/terminal.mjs");
        if (access(script, R_OK) != 0)
                TEST_SKIP("build/npm-test/terminal.mjs is missing (make tests installs puppeteer-core and copies it)");
        _cleanup_free_ char *script_copy = xstrdup(script);
        struct box b;
        box_start(&b, NULL, NULL, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}");
        struct hres r;
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/pty/token", b.id);
        http_req(&b.c, "POST", path, b.key, "", &r);
        ASSERT_EQ(r.status, 201);
        _cleanup_free_ char *url = xasprintf("%s%s", b.c.url, cJSON_GetStringValue(data_item(&r, "terminalPath")));
        hres_done(&r);
        _cleanup_free_ char *shot = xasprintf("%s/terminal-screenshot.png", test_build_path("test-artifacts"));
        _cleanup_free_ char *dir = xstrdup(test_build_path("test-artifacts"));
        (void) mkdir(dir, 0755);
        setenv("TERMINAL_URL", url, 1);
        setenv("SCREENSHOT", shot, 1);
        char *argv[] = { "node", script_copy, NULL };
        _cleanup_free_ char *out = NULL;
        int rc = test_run_capture(argv, &out, 1 << 20);
        if (rc != 0 || !strstr(out ?: "", "ok rows="))
                test_fail(__FILE__, __LINE__, "the browser test failed (exit %d):\n%s", rc, out ?: "");
        fprintf(stderr, "  %s  screenshot: %s\n", out, shot);
}
