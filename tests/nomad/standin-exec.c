/* standin-exec.c — GET /v1/client/allocation/:id/exec as Nomad serves it
 * (command/agent/alloc_endpoint.go, websockets.go, client/alloc_endpoint.go,
 * plugins/drivers/execstreaming.go), run through Docker exec in the allocation's
 * container so the command really runs under the job's runtime.
 *
 * Nomad upgrades first and reports every later error as a close frame: HTTP code 500
 * -> 1011, anything else -> 1008, the message as reason. Output goes out as
 * {"stdout":{"data":"<b64>"}} in chunks of at most 1024 bytes, then
 * {"stdout":{"close":true}} and {"stderr":{"close":true}}, then
 * {"exited":true,"result":{"exit_code":N}} (exit_code omitted when 0), and then the
 * TCP connection is dropped without a close frame. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "docker.h"
#include "json.h"
#include "standin.h"
#include "strutil.h"
#include "ws.h"

/* Input held for a process that is not reading it; past this the WebSocket is not read. */
#define STDIN_PENDING_MAX (1024 * 1024)

#define EXEC_MAX_MESSAGE ((size_t) 16 << 20)
#define CHUNK 1024

struct exec_ctx {
        char *alloc_id, *task, *command, *tty, *ws_handshake, *token, *path;
};

static void ctx_free(struct exec_ctx *x) {
        if (!x)
                return;
        free(x->alloc_id), free(x->task), free(x->command), free(x->tty), free(x->ws_handshake), free(x->token),
                free(x->path);
        free(x);
}

static int write_all(int fd, const void *p, size_t n) {
        const uint8_t *b = p;
        while (n > 0) {
                ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN) {
                                struct pollfd pf = { .fd = fd, .events = POLLOUT };
                                if (poll(&pf, 1, 10000) <= 0)
                                        return -ETIMEDOUT;
                                continue;
                        }
                        return -errno;
                }
                b += k;
                n -= (size_t) k;
        }
        return 0;
}

static int send_frame(int fd, uint8_t opcode, const void *p, size_t n) {
        struct strbuf b = STRBUF_INIT(0);
        int r = ws_frame_encode(&b, WS_ROLE_SERVER, true, opcode, p, n);
        if (r >= 0)
                r = write_all(fd, b.buf, b.len);
        strbuf_done(&b);
        return r;
}

static int send_text(int fd, const char *s) { return send_frame(fd, WS_OP_TEXT, s, strlen(s)); }

static void send_close(int fd, const char *path, uint16_t code, const char *reason) {
        struct strbuf b = STRBUF_INIT(0);
        if (ws_close_encode(&b, WS_ROLE_SERVER, code, reason) >= 0)
                write_all(fd, b.buf, b.len);
        strbuf_done(&b);
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_int(o, "close", code);
        json_add_str(o, "reason", reason ? reason : "");
        _cleanup_free_ char *t = json_print(o);
        standin_record_ws(path, "ws-out", t, strlen(t));
}

/* Nomad's mapping of an HTTP-coded error to a close code. */
static void fail(int fd, const char *path, int http_code, const char *msg) {
        send_close(fd, path, http_code == 500 ? WS_CLOSE_INTERNAL_ERROR : WS_CLOSE_POLICY, msg);
}

/* Sends one stream's data as Nomad does: {"<name>":{"data":"<b64>"}} per 1024 bytes. */
static int send_output(int fd, const char *name, const uint8_t *data, size_t len) {
        while (len > 0) {
                size_t n = len < CHUNK ? len : CHUNK;
                _cleanup_free_ char *b64 = base64_encode(data, n, NULL);
                _cleanup_free_ char *msg = xasprintf("{\"%s\":{\"data\":\"%s\"}}", name, b64);
                int r = send_text(fd, msg);
                if (r < 0)
                        return r;
                data += n;
                len -= n;
        }
        return 0;
}

struct out_ctx { int fd; };

static int on_demux(int type, const uint8_t *data, size_t len, void *ud) {
        struct out_ctx *o = ud;
        return send_output(o->fd, type == 1 ? "stdout" : "stderr", data, len);
}

/* Reads one whole message before the session proper (the ws_handshake frame). */
static int read_message(int fd, struct ws_reader *r, struct ws_message *m, int timeout_ms) {
        for (;;) {
                int k = ws_reader_next(r, m);
                if (k != 0)
                        return k;
                struct pollfd pf = { .fd = fd, .events = POLLIN };
                if (poll(&pf, 1, timeout_ms) <= 0)
                        return -ETIMEDOUT;
                uint8_t buf[4096];
                ssize_t n = recv(fd, buf, sizeof(buf), 0);
                if (n <= 0)
                        return -ECONNRESET;
                if ((k = ws_reader_feed(r, buf, (size_t) n)) < 0)
                        return k;
        }
}

static void session(struct exec_ctx *x, int fd, const char *extra, size_t extra_len) {
        int fl = fcntl(fd, F_GETFL);
        if (fl >= 0)
                fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
        struct ws_reader r;
        ws_reader_init(&r, WS_ROLE_SERVER, EXEC_MAX_MESSAGE);
        if (extra_len)
                ws_reader_feed(&r, extra, extra_len);
        _cleanup_free_ char *exec_id = NULL, *err = NULL;
        _cleanup_free_ uint8_t *pre = NULL;
        _cleanup_strv_free_ char **argv = NULL;
        _cleanup_json_ cJSON *cmd = NULL;
        int dfd = -1;
        size_t pre_len = 0;
        char container[128];

        if (standin_take_exec_fault()) {
                fail(fd, x->path, 500, "nomad-standin injected fault: exec stream closed");
                goto out;
        }
        /* websockets.go readWsHandshake: an optional first frame carrying the token. */
        if (x->ws_handshake && *x->ws_handshake && strcmp(x->ws_handshake, "false") != 0 &&
            strcmp(x->ws_handshake, "0") != 0) {
                struct ws_message m = { 0 };
                _cleanup_json_ cJSON *h = NULL;
                if (read_message(fd, &r, &m, 10000) != 1 ||
                    json_parse((char *) m.data, m.len, 4096, 8, &h, NULL) < 0) {
                        ws_message_done(&m);
                        fail(fd, x->path, 400, "failed to read the ws_handshake message");
                        goto out;
                }
                standin_record_ws(x->path, "ws-in", (char *) m.data, m.len);
                ws_message_done(&m);
                const char *t = json_get_str(h, "auth_token");
                int64_t v = 0;
                json_get_int(h, "version", &v);
                if (x->token && *x->token && (!t || strcmp(t, x->token) != 0)) {
                        fail(fd, x->path, 400, "handshake auth token mismatched auth header token");
                        goto out;
                }
                if (v != 1) {
                        _cleanup_free_ char *msg = xasprintf("unexpected handshake value: %lld", (long long) v);
                        fail(fd, x->path, 400, msg);
                        goto out;
                }
                free(x->token);
                x->token = t ? xstrdup(t) : NULL;
        }
        /* alloc_endpoint.go allocExec: command is a JSON array of strings. */
        if (json_parse(x->command ? x->command : "", x->command ? strlen(x->command) : 0, 65536, 4, &cmd, NULL) < 0 ||
            !(cJSON_IsArray(cmd) || cJSON_IsNull(cmd))) {
                fail(fd, x->path, 500, "failed to marshal command into json: invalid character looking for beginning of value");
                goto out;
        }
        if (x->tty && *x->tty && strcmp(x->tty, "true") != 0 && strcmp(x->tty, "false") != 0 &&
            strcmp(x->tty, "1") != 0 && strcmp(x->tty, "0") != 0) {
                _cleanup_free_ char *msg = xasprintf("tty value is not a boolean: strconv.ParseBool: parsing \"%s\": invalid syntax", x->tty);
                fail(fd, x->path, 500, msg);
                goto out;
        }
        /* client/alloc_endpoint.go execImpl, in its order. */
        int code = standin_exec_target(x->alloc_id, NULL, container, sizeof(container), &err);
        if (code) {
                fail(fd, x->path, code, err);
                goto out;
        }
        const char *amsg;
        code = standin_acl(x->token, &amsg);
        if (code) {
                /* Token not found comes from the resolver (400 -> 1008); permission denied is uncoded (500 -> 1011). */
                fail(fd, x->path, strcmp(amsg, "ACL token not found") == 0 ? 400 : 500, amsg);
                goto out;
        }
        if (!x->task || !*x->task) {
                fail(fd, x->path, 400, "must provide task name");
                goto out;
        }
        size_t argc = (size_t) cJSON_GetArraySize(cmd);
        if (argc == 0) {
                fail(fd, x->path, 400, "command is not present");
                goto out;
        }
        argv = xnew0(char *, argc + 1);
        size_t i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, cmd) {
                if (!cJSON_IsString(it)) {
                        fail(fd, x->path, 500, "failed to marshal command into json: json: cannot unmarshal number into Go value of type string");
                        goto out;
                }
                argv[i++] = xstrdup(it->valuestring);
        }
        code = standin_exec_target(x->alloc_id, x->task, container, sizeof(container), &err);
        if (code) {
                fail(fd, x->path, code, err);
                goto out;
        }

        struct docker *dk = standin_docker();
        struct docker_exec_opts eo = { .cmd = (const char *const *) argv, .attach_stdin = true };
        int k = docker_exec_create(dk, container, &eo, &exec_id);
        if (k >= 0)
                k = docker_exec_start(dk, exec_id, &dfd, &pre, &pre_len);
        if (k < 0) {
                _cleanup_free_ char *msg = xasprintf("failed to exec into task: %s",
                                                     *docker_last_error() ? docker_last_error() : strerror(-k));
                fail(fd, x->path, 500, msg);
                goto out;
        }
        struct docker_demux dm = { 0 };
        struct out_ctx oc = { .fd = fd };
        if (pre_len && docker_demux_feed(&dm, pre, pre_len, on_demux, &oc) < 0)
                goto out;
        /* As Nomad does (stdin and output are forwarded by separate goroutines): input waits in
         * a bounded buffer while the process does not read it, output keeps flowing meanwhile,
         * and the WebSocket is not read while that buffer is full (backpressure to the client). */
        bool in_closed = false, in_shut = false;
        struct strbuf stdin_buf = STRBUF_INIT(0);
        size_t in_off = 0;
        for (;;) {
                bool in_full = stdin_buf.len - in_off >= STDIN_PENDING_MAX;
                struct pollfd pf[2] = { { .fd = fd, .events = in_full ? 0 : POLLIN },
                                        { .fd = dfd, .events = POLLIN | (stdin_buf.len > in_off ? POLLOUT : 0) } };
                if (poll(pf, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if ((pf[1].revents & (POLLOUT | POLLERR)) && stdin_buf.len > in_off) {
                        ssize_t w = send(dfd, stdin_buf.buf + in_off, stdin_buf.len - in_off, MSG_DONTWAIT | MSG_NOSIGNAL);
                        if (w > 0)
                                in_off += (size_t) w;
                        else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                                in_off = stdin_buf.len;   /* The process stopped reading: Nomad ignores it too. */
                        if (in_off == stdin_buf.len) {
                                strbuf_reset(&stdin_buf);
                                in_off = 0;
                        }
                }
                if (in_closed && !in_shut && stdin_buf.len == in_off) {
                        shutdown(dfd, SHUT_WR);
                        in_shut = true;
                }
                pf[1].revents &= (short) ~POLLOUT;
                if (pf[1].revents) {
                        uint8_t buf[16384];
                        ssize_t n = read(dfd, buf, sizeof(buf));
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0) {
                                /* Output done: close both streams, report the exit code, drop TCP. */
                                send_text(fd, "{\"stdout\":{\"close\":true}}");
                                send_text(fd, "{\"stderr\":{\"close\":true}}");
                                struct docker_exec_info info = { .exit_code = -1, .running = true };
                                for (int t = 0; t < 50; t++) {
                                        if (docker_exec_inspect(dk, exec_id, &info) < 0 || !info.running)
                                                break;
                                        usleep(100000);
                                }
                                _cleanup_free_ char *msg =
                                        info.exit_code == 0
                                                ? xstrdup("{\"exited\":true,\"result\":{}}")
                                                : xasprintf("{\"exited\":true,\"result\":{\"exit_code\":%d}}",
                                                            info.running ? 137 : info.exit_code);
                                send_text(fd, msg);
                                standin_record_ws(x->path, "ws-out", msg, strlen(msg));
                                break;
                        }
                        if (docker_demux_feed(&dm, buf, (size_t) n, on_demux, &oc) < 0)
                                break;
                }
                if (pf[0].revents) {
                        uint8_t buf[16384];
                        ssize_t n = recv(fd, buf, sizeof(buf), 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        if (n <= 0)
                                break;   /* client gone */
                        if (ws_reader_feed(&r, buf, (size_t) n) < 0) {
                                send_close(fd, x->path, WS_CLOSE_TOO_BIG, "message too big");
                                break;
                        }
                        struct ws_message m;
                        bool end = false;
                        while (!end && (k = ws_reader_next(&r, &m)) == 1) {
                                if (m.opcode == WS_OP_PING)
                                        send_frame(fd, WS_OP_PONG, m.data, m.len);
                                else if (m.opcode == WS_OP_CLOSE) {
                                        uint16_t cc = WS_CLOSE_NO_STATUS;
                                        ws_close_parse(m.data, m.len, &cc, NULL);
                                        /* gorilla's default close handler echoes the code. */
                                        struct strbuf b = STRBUF_INIT(0);
                                        ws_close_encode(&b, WS_ROLE_SERVER, cc == WS_CLOSE_NO_STATUS ? 0 : cc, NULL);
                                        write_all(fd, b.buf, b.len);
                                        strbuf_done(&b);
                                        end = true;
                                } else if (m.opcode == WS_OP_TEXT || m.opcode == WS_OP_BINARY) {
                                        standin_record_ws(x->path, "ws-in", (char *) m.data, m.len);
                                        _cleanup_json_ cJSON *j = NULL;
                                        if (json_parse((char *) m.data, m.len, EXEC_MAX_MESSAGE, 16, &j, NULL) < 0 ||
                                            !cJSON_IsObject(j)) {
                                                fail(fd, x->path, 500, "invalid character looking for beginning of value");
                                                end = true;
                                        } else {
                                                const cJSON *in = cJSON_GetObjectItem(j, "stdin");
                                                const char *data = json_get_str(in, "data");
                                                if (cJSON_IsTrue(cJSON_GetObjectItem(in, "close"))) {
                                                        in_closed = true;
                                                        if (!in_shut && stdin_buf.len == in_off) {
                                                                shutdown(dfd, SHUT_WR);
                                                                in_shut = true;
                                                        }
                                                } else if (data && *data) {
                                                        _cleanup_free_ uint8_t *raw = NULL;
                                                        size_t rl = 0;
                                                        if (base64_decode(data, strlen(data), &raw, &rl) < 0) {
                                                                fail(fd, x->path, 500, "illegal base64 data at input byte 0");
                                                                end = true;
                                                        } else if (!in_closed) {
                                                                (void) strbuf_append(&stdin_buf, raw, rl);
                                                        }
                                                }
                                                /* tty_size and {} heartbeats need nothing here. */
                                        }
                                }
                                ws_message_done(&m);
                        }
                        if (k < 0) {
                                const char *why;
                                uint16_t cc = ws_reader_error(&r, &why);
                                send_close(fd, x->path, cc, why);
                                end = true;
                        }
                        if (end)
                                break;
                }
        }
        strbuf_done(&stdin_buf);
out:
        if (dfd >= 0)
                close(dfd);
        ws_reader_done(&r);
}

/* Ends the TCP connection after our last frame: FIN first, then read and drop what the
 * client still sends (bounded), so closing with unread input does not turn into an RST
 * that could discard our last frames at the client before it read them. */
static void drop_connection(int fd) {
        shutdown(fd, SHUT_WR);
        int64_t end = mono_ms() + 1000;
        for (;;) {
                int64_t left = end - mono_ms();
                struct pollfd pf = { .fd = fd, .events = POLLIN };
                if (left <= 0 || poll(&pf, 1, (int) left) <= 0)
                        break;
                char buf[4096];
                if (recv(fd, buf, sizeof(buf), 0) <= 0)
                        break;
        }
}

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in, size_t extra_in_size,
                       MHD_socket sock, struct MHD_UpgradeResponseHandle *urh) {
        (void) conn, (void) con_cls;
        struct exec_ctx *x = cls;
        session(x, sock, extra_in, extra_in_size);
        drop_connection(sock);
        ctx_free(x);
        MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
}

static char *dup_arg(struct MHD_Connection *c, const char *k) {
        const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
        return v ? xstrdup(v) : NULL;
}

static bool header_has_token(struct MHD_Connection *c, const char *h, const char *token) {
        const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, h);
        if (!v)
                return false;
        _cleanup_free_ char *s = xstrdup(v);
        for (char *save = NULL, *t = strtok_r(s, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save))
                if (strcasecmp(t, token) == 0)
                        return true;
        return false;
}

enum MHD_Result exec_handle(struct MHD_Connection *conn, const char *alloc_id, const char *token) {
        const char *key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Key");
        const char *ver = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Version");
        bool upgrade = header_has_token(conn, "Connection", "upgrade") && header_has_token(conn, "Upgrade", "websocket");
        if (!upgrade)   /* Not a WebSocket request: the handler runs and finds no connection (500). */
                return standin_reply_text(conn, 500, "websocket connection not found in context");
        if (!ws_key_valid(key) || !ver || strcmp(ver, "13") != 0)   /* gorilla/websocket's Upgrader refuses */
                return standin_reply_text(conn, 400,
                                          "Bad Request\nwebsocket: not a websocket handshake: 'Sec-WebSocket-Key' header must "
                                          "be Base64 encoded value of 16-byte in length\n");
        struct exec_ctx *x = xnew0(struct exec_ctx, 1);
        x->alloc_id = xstrdup(alloc_id);
        x->task = dup_arg(conn, "task");
        x->command = dup_arg(conn, "command");
        x->tty = dup_arg(conn, "tty");
        x->ws_handshake = dup_arg(conn, "ws_handshake");
        x->token = token ? xstrdup(token) : NULL;
        x->path = xasprintf("/v1/client/allocation/%s/exec", alloc_id);
        char accept[WS_ACCEPT_LEN + 1];
        ws_accept_for_key(key, accept);
        struct MHD_Response *resp = MHD_create_response_for_upgrade(on_upgrade, x);
        if (!resp) {
                ctx_free(x);
                return MHD_NO;
        }
        MHD_add_response_header(resp, "Upgrade", "websocket");
        MHD_add_response_header(resp, "Sec-WebSocket-Accept", accept);
        enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_SWITCHING_PROTOCOLS, resp);
        MHD_destroy_response(resp);
        return ret;
}
