/* nomad-exec.c — exec and file transfer over Nomad's alloc exec WebSocket, on a libcurl
 * CONNECT_ONLY connection (so TLS and mTLS are libcurl's) with common/ws framing. */
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>

#include "cleanup.h"
#include "controld.h"
#include "nomad-private.h"
#include "nomad-wire.h"
#include "driver.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "ws.h"


#define EXEC_HEARTBEAT_MS 10000

/* ---- exec over the alloc exec WebSocket ---- */

struct exec_session {
        struct ndriver *n;
        CURL *h;
        curl_socket_t fd;
        struct ws_reader rd;
        char *alloc_id, *job_id;
        bool eof, stdin_closed, exited, out_closed, err_closed;
        int exit_code;
        int64_t last_send;
};

static int ws_send_all(struct exec_session *s, const void *data, size_t len, int64_t deadline) {
        int r = httpc_send_all(s->h, s->fd, data, len, deadline);
        if (r >= 0)
                s->last_send = mono_ms();
        return r;
}

static int ws_send(struct exec_session *s, uint8_t opcode, const void *data, size_t len, int64_t deadline) {
        struct strbuf b;
        strbuf_init(&b, 0);
        int r = ws_frame_encode(&b, WS_ROLE_CLIENT, true, opcode, data, len);
        if (r >= 0)
                r = ws_send_all(s, b.buf, b.len, deadline);
        strbuf_done(&b);
        return r;
}

static int ws_send_text(struct exec_session *s, const char *text, int64_t deadline) {
        return ws_send(s, WS_OP_TEXT, text, strlen(text), deadline);
}

/* Receives what is there without blocking: 1 got bytes, 0 nothing yet, -ECONNRESET closed. */
static int ws_recv_some(struct exec_session *s) {
        uint8_t buf[65536];
        size_t got = 0;
        CURLcode cc = curl_easy_recv(s->h, buf, sizeof(buf), &got);
        if (cc == CURLE_AGAIN)
                return 0;
        if (cc != CURLE_OK || got == 0) {
                log_debug("exec stream ended: %s (%zu bytes)", cc == CURLE_OK ? "closed" : curl_easy_strerror(cc), got);
                return -ECONNRESET;
        }
        int r = ws_reader_feed(&s->rd, buf, got);
        return r < 0 ? r : 1;
}

/* Handles every whole message the reader holds. 1 when the exec ended, 0 otherwise;
 * *ret_got (optional) tells whether output went to cb. */
static int ws_dispatch_got(struct exec_session *s, exec_output_cb cb, void *ud, bool *ret_got) {
        for (;;) {
                struct ws_message m = { 0 };
                int r = ws_reader_next(&s->rd, &m);
                if (r == 0)
                        return 0;
                if (r < 0) {
                        const char *why = "";
                        uint16_t code = ws_reader_error(&s->rd, &why);
                        nomad_ctx_ids(s->job_id, s->alloc_id);
                        log_warning("Nomad exec stream broke the WebSocket protocol: %s", why);
                        struct strbuf b;
                        strbuf_init(&b, 0);
                        if (ws_close_encode(&b, WS_ROLE_CLIENT, code, why) >= 0)
                                (void) ws_send_all(s, b.buf, b.len, mono_ms() + 1000);
                        strbuf_done(&b);
                        return r;
                }
                switch (m.opcode) {
                case WS_OP_PING:
                        (void) ws_send(s, WS_OP_PONG, m.data, m.len, mono_ms() + 2000);
                        break;
                case WS_OP_CLOSE: {
                        uint16_t code = WS_CLOSE_NO_STATUS;
                        _cleanup_free_ char *reason = NULL;
                        (void) ws_close_parse(m.data, m.len, &code, &reason);
                        ws_message_done(&m);
                        s->eof = true;
                        if (code == WS_CLOSE_NORMAL || code == WS_CLOSE_NO_STATUS)
                                return 1;
                        nomad_ctx_ids(s->job_id, s->alloc_id);
                        log_warning("Nomad closed the exec stream: %u %s", code, reason ? reason : "");
                        log_ctx_set("NOMAD_JOB_ID", NULL);
                        log_ctx_set("ALLOC_ID", NULL);
                        return -ECONNABORTED;
                }
                case WS_OP_TEXT:
                case WS_OP_BINARY: {
                        struct nomad_exec_frame f = { 0 };
                        r = nomad_exec_frame_parse((const char *) m.data, m.len, &f);
                        ws_message_done(&m);
                        if (r < 0)
                                return r;
                        if (f.exited) {
                                s->exited = true;
                                s->exit_code = f.exit_code;
                                s->eof = true;
                                nomad_exec_frame_done(&f);
                                return 1;
                        }
                        if (f.stream && f.len && ret_got)
                                *ret_got = true;
                        if (f.stream && f.len && cb) {
                                r = cb(f.stream, f.data, f.len, ud);
                                if (r < 0) {
                                        nomad_exec_frame_done(&f);
                                        return r;
                                }
                        }
                        if (f.closed)
                                *(f.stream == 1 ? &s->out_closed : &s->err_closed) = true;
                        nomad_exec_frame_done(&f);
                        continue;
                }
                case WS_OP_CONT:
                case WS_OP_PONG:
                        break;
                }
                ws_message_done(&m);
        }
}

static int ws_dispatch(struct exec_session *s, exec_output_cb cb, void *ud) { return ws_dispatch_got(s, cb, ud, NULL); }

static void exec_session_free(struct exec_session *s) {
        if (!s)
                return;
        if (s->h)
                curl_easy_cleanup(s->h);
        ws_reader_done(&s->rd);
        free_many(s->alloc_id, s->job_id, s);
}

int nomad_exec_start(struct driver *d, const struct sandbox *sb, const struct exec_spec *spec, struct exec_session **ret,
                         struct err *err) {
        struct ndriver *n = N(d);
        if (!sb->alloc_id || !*sb->alloc_id)
                return err_set(err, -ESRCH, "the sandbox has no running allocation");
        _cleanup_free_ char *cmd = nomad_exec_command(spec);
        _cleanup_free_ char *ecmd = nomad_esc(cmd);
        _cleanup_free_ char *cq = nomad_common_query(n);
        _cleanup_free_ char *path =
                xasprintf("/v1/client/allocation/%s/exec?%s&task=%s&tty=false&command=%s", sb->alloc_id, cq, NOMAD_TASK, ecmd);
        _cleanup_free_ char *url = xasprintf("%s/", n->base);
        _cleanup_free_ char *head = NULL;
        char key[WS_KEY_LEN + 1];
        const char *extra[] = { n->token_header, NULL };
        int64_t deadline = mono_ms() + (int64_t) n->cfg->nomad_request_timeout_ms;
        struct exec_session *s = xnew0(struct exec_session, 1);
        int r;

        s->n = n;
        s->alloc_id = xstrdup(sb->alloc_id);
        s->job_id = nomad_job_id(sb->id);
        s->exit_code = -1;
        ws_reader_init(&s->rd, WS_ROLE_CLIENT, NOMAD_EXEC_MAX_MESSAGE);
        s->h = curl_easy_init();
        curl_easy_setopt(s->h, CURLOPT_URL, url);
        curl_easy_setopt(s->h, CURLOPT_CONNECT_ONLY, 1L);
        curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        nomad_curl_tls(n, s->h);
        CURLcode cc = curl_easy_perform(s->h);
        if (cc != CURLE_OK) {
                r = err_set(err, -EHOSTUNREACH, "Nomad at %s did not answer the exec connection: %s", n->cfg->nomad_addr,
                            curl_easy_strerror(cc));
                goto fail;
        }
        curl_easy_getinfo(s->h, CURLINFO_ACTIVESOCKET, &s->fd);

        ws_key_new(key);
        r = ws_client_request(n->hostport, path, key, n->token_header ? extra : NULL, &head);
        if (r < 0) {
                err_set(err, r, "could not build the exec request");
                goto fail;
        }
        r = ws_send_all(s, head, strlen(head), deadline);
        if (r < 0) {
                err_set(err, r, "Nomad's exec connection broke while sending the request");
                goto fail;
        }
        /* The response head; what follows it is frames (101) or the refusal's body. */
        struct strbuf in;
        strbuf_init(&in, 64 * 1024);
        int status = 0;
        size_t head_len = 0;
        for (;;) {
                uint8_t buf[4096];
                size_t got = 0;
                cc = curl_easy_recv(s->h, buf, sizeof(buf), &got);
                if (cc == CURLE_AGAIN) {
                        struct pollfd pf = { .fd = s->fd, .events = POLLIN };
                        int64_t left = deadline - mono_ms();
                        if (left <= 0) {
                                r = -ETIMEDOUT;
                                break;
                        }
                        (void) poll(&pf, 1, (int) left);
                        continue;
                }
                if (cc != CURLE_OK || got == 0) {
                        r = in.len ? -EPROTO : -ECONNRESET;
                        /* A refusal may end with the connection: parse what came. */
                        if (in.len && ws_client_parse_response(in.buf, in.len, key, &status, &head_len) == 0 && status != 101)
                                r = 0;
                        break;
                }
                if (strbuf_append(&in, buf, got) < 0) {
                        r = -EMSGSIZE;
                        break;
                }
                r = ws_client_parse_response(in.buf, in.len, key, &status, &head_len);
                if (r == -EAGAIN)
                        continue;
                if (r == 0 && status != 101) {
                        /* Give the short text/plain body a moment to arrive. */
                        usleep(20000);
                        while (curl_easy_recv(s->h, buf, sizeof(buf), &got) == CURLE_OK && got > 0 &&
                               strbuf_append(&in, buf, got) >= 0)
                                ;
                }
                break;
        }
        if (r < 0 || status != 101) {
                if (r >= 0) {
                        struct nresp fake = { .status = status };
                        strbuf_init(&fake.body, 0);
                        if (in.len > head_len)
                                strbuf_append(&fake.body, in.buf + head_len, in.len - head_len);
                        nomad_error(&fake, "starting the exec", err);
                        strbuf_done(&fake.body);
                        r = status == 404 ? -ENOENT : status == 403 ? -EACCES : -EREMOTEIO;
                } else
                        err_set(err, r, "Nomad's exec WebSocket handshake failed: %s", strerror(-r));
                strbuf_done(&in);
                goto fail;
        }
        if (in.len > head_len && (r = ws_reader_feed(&s->rd, in.buf + head_len, in.len - head_len)) < 0) {
                strbuf_done(&in);
                err_set(err, r, "Nomad's exec stream started with a bad frame");
                goto fail;
        }
        strbuf_done(&in);
        if (!spec->want_stdin) {
                (void) ws_send_text(s, "{\"stdin\":{\"close\":true}}", deadline);
                s->stdin_closed = true;
        }
        *ret = s;
        return 0;
fail:
        nomad_ctx_ids(s->job_id, s->alloc_id);
        log_warning("Nomad exec failed: %s", err->message);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        exec_session_free(s);
        return r;
}

int nomad_exec_read(struct exec_session *s, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud) {
        int64_t deadline = mono_ms() + timeout_ms;
        int r;
        for (;;) {
                /* Back to the caller as soon as output was handed over: it may be a slow client
                 * (a download) that must not get the whole stream buffered in one call. */
                bool got = false;
                if ((r = ws_dispatch_got(s, cb, ud, &got)) != 0)
                        return r;
                if (s->eof)
                        return 1;
                if (got)
                        return 0;
                /* TLS may hold decrypted bytes the socket no longer shows: ask libcurl first. */
                r = ws_recv_some(s);
                if (r == -ECONNRESET) {
                        /* Nomad drops TCP right after "exited"; anything else is a lost stream. */
                        s->eof = true;
                        if ((r = ws_dispatch(s, cb, ud)) != 0)
                                return r;
                        return s->exited ? 1 : -ECONNRESET;
                }
                if (r < 0)
                        return r;
                if (r == 1)
                        continue;
                if (!s->stdin_closed && mono_ms() - s->last_send >= EXEC_HEARTBEAT_MS)
                        (void) ws_send_text(s, "{}", mono_ms() + 2000);
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return 0;
                struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN }, { .fd = watch_fd, .events = POLLRDHUP } };
                int k = poll(p, watch_fd >= 0 ? 2 : 1, (int) (left < EXEC_HEARTBEAT_MS ? left : EXEC_HEARTBEAT_MS));
                if (k < 0 && errno != EINTR)
                        return -errno;
                if (watch_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        return -ECONNRESET;
        }
}

/* Takes what arrived, without waiting: -EPIPE when the process ended (Nomad then drops the
 * connection, and writing on would reset it and lose the exit code), 0 otherwise. */
static int exec_poll_output(struct exec_session *s, exec_output_cb cb, void *ud) {
        for (;;) {
                int k = ws_recv_some(s);
                if (k == -ECONNRESET)
                        s->eof = true;
                else if (k < 0)
                        return k;
                int r = ws_dispatch(s, cb, ud);
                if (r < 0)
                        return r;
                if (r == 1 || s->eof)
                        return -EPIPE;
                if (k != 1)
                        return 0;
        }
}

int nomad_exec_write(struct exec_session *s, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud) {
        const uint8_t *p = data;
        int64_t deadline = mono_ms() + timeout_ms;
        if (s->stdin_closed || s->eof)
                return -EPIPE;
        while (len > 0) {
                /* Output first: a process that already ended must not be written to. */
                int r = exec_poll_output(s, cb, ud);
                if (r < 0)
                        return r;
                /* Chunks small enough that output keeps flowing between them. */
                size_t k = len < 48 * 1024 ? len : 48 * 1024;
                _cleanup_free_ char *f = nomad_exec_stdin_frame(p, k);
                r = ws_send_text(s, f, deadline);
                if (r < 0) {
                        (void) exec_poll_output(s, cb, ud);   /* the exit code, if it came */
                        return r == -ETIMEDOUT ? r : -EPIPE;
                }
                p += k;
                len -= k;
        }
        int r = exec_poll_output(s, cb, ud);
        return r == -EPIPE ? 0 : r;   /* all of it went in; the end is exec_read's to report */
}

int nomad_exec_close_stdin(struct exec_session *s) {
        if (!s->stdin_closed && !s->eof) {
                s->stdin_closed = true;
                return ws_send_text(s, "{\"stdin\":{\"close\":true}}", mono_ms() + 5000);
        }
        return 0;
}

int nomad_exec_exit_code(struct exec_session *s, int *ret) {
        if (!s->exited)
                return -ESRCH;
        *ret = s->exit_code;
        return 0;
}

/* Nomad records an OOM kill on the task's Terminated event (Details.oom_killed). */
int nomad_exec_oom_killed(struct exec_session *s) {
        struct err err = { 0 };
        _cleanup_free_ char *path = xasprintf("/v1/allocation/%s", s->alloc_id);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(s->n, "GET", path, NULL, NULL, "reading the allocation", &j, NULL, &err);
        if (r < 0)
                return r == -ENOENT ? 0 : r;
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "TaskStates"), NOMAD_TASK);
        const cJSON *ev;
        cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(ts, "Events")) {
                const char *oom = json_get_str(cJSON_GetObjectItemCaseSensitive(ev, "Details"), "oom_killed");
                if (oom && !strcmp(oom, "true"))
                        return 1;
        }
        return 0;
}

void nomad_exec_free(struct exec_session *s) {
        if (!s)
                return;
        if (!s->eof) {
                /* A polite close; Nomad ends the process with the stream. */
                struct strbuf b;
                strbuf_init(&b, 0);
                if (ws_close_encode(&b, WS_ROLE_CLIENT, WS_CLOSE_NORMAL, "") >= 0)
                        (void) ws_send_all(s, b.buf, b.len, mono_ms() + 1000);
                strbuf_done(&b);
        }
        exec_session_free(s);
}

