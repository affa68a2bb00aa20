/* api-process.c — the REST/SSE adapter of process.c: /sandboxes/{id}/processes, ours beyond
 * the Brimble API (proto-json/openapi.yaml). Parses (proto-json), calls process.c, takes
 * every status from the errno table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "process.h"
#include "session.h"
#include "strutil.h"
#include "utf8-carry.h"
#include "render.h"
#include "runtime.h"

/* Frames queued for a slow client before the stream stops reading from the agent (the
 * agent then keeps the output in its own bounded buffer). */
#define PENDING_CAP ((size_t) 1 << 20)

static enum MHD_Result bad_body(struct req *r, const struct err *pe) {
        return respond_errno_msg(r, -EINVAL, "%s", pe->message);
}

/* A process call's start: the body as parsed (parsed < 0: a 400 with pe's message), then the
 * caller's ready sandbox into *sb. 0, or < 0 with the answer sent. */
static int prelude(struct req *r, int parsed, const struct err *pe, struct sandbox *sb) {
        if (parsed < 0) {
                bad_body(r, pe);
                return -EINVAL;
        }
        return runtime_ready_sandbox(r, r->m.id, sb);
}

enum MHD_Result process_post_start(struct req *r) {
        _cleanup_(pj_process_start_done) struct pj_process_start in = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (prelude(r, pj_process_start_parse(r->body.buf, r->body.len, &in, &pe), &pe, &sb) < 0)
                return MHD_YES;
        _cleanup_(strv_freep) char **env = runtime_env_list(in.env_keys, in.env_values, in.n_env);
        struct process_spec spec = { .cmd = in.cmd, .env = env, .cwd = in.cwd, .tag = in.tag, .stdin_open = in.stdin_open,
                                     .rows = in.rows, .cols = in.cols };
        uint32_t pid = 0;
        int k = process_start(r->c, &sb, &spec, &pid, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        cJSON *d = cJSON_CreateObject();
        json_add_int(d, "pid", pid);
        json_add_str(d, "tag", in.tag);
        json_add_bool(d, "stdin", in.stdin_open);
        json_add_bool(d, "pty", in.rows > 0);
        return respond_envelope(r, 201, "Process started", d);
}

enum MHD_Result process_get_list(struct req *r) {
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (runtime_ready_sandbox(r, r->m.id, &sb) < 0)
                return MHD_YES;
        struct pj_agent_fields *v = NULL;
        size_t n = 0;
        int k = process_list(r->c, &sb, &v, &n, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        cJSON *d = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(d, "processes");
        for (size_t i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                json_add_int(o, "pid", v[i].pid);
                json_add_str(o, "tag", v[i].tag && v[i].tag[0] ? v[i].tag : NULL);
                json_add_bool(o, "running", v[i].running);
                if (!v[i].running) {
                        json_add_int(o, "exit_code", v[i].code >= 0 ? v[i].code : 128 + (int) v[i].signo);
                        if (v[i].signo)
                                json_add_int(o, "signal", v[i].signo);
                }
                cJSON_AddItemToArray(a, o);
                pj_agent_fields_done(&v[i]);
        }
        free(v);
        return respond_envelope(r, 200, "Processes listed", d);
}

enum MHD_Result process_post_stdin(struct req *r) {
        _cleanup_(pj_process_stdin_done) struct pj_process_stdin in = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (prelude(r, pj_process_stdin_parse(r->body.buf, r->body.len, &in, &pe), &pe, &sb) < 0)
                return MHD_YES;
        int k = process_stdin(r->c, &sb, r->m.pid, in.data, in.len, in.close, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        cJSON *d = cJSON_CreateObject();
        json_add_int(d, "pid", r->m.pid);
        json_add_int(d, "bytes", (int64_t) in.len);
        json_add_bool(d, "closed", in.close);
        return respond_envelope(r, 200, "Input sent", d);
}

enum MHD_Result process_post_signal(struct req *r) {
        struct err pe = { 0 };
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int sig = 0;
        if (prelude(r, pj_process_signal_parse(r->body.buf, r->body.len, &sig, &pe), &pe, &sb) < 0)
                return MHD_YES;
        int k = process_signal(r->c, &sb, r->m.pid, sig, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        cJSON *d = cJSON_CreateObject();
        json_add_int(d, "pid", r->m.pid);
        json_add_int(d, "signal", sig);
        return respond_envelope(r, 200, "Signal sent", d);
}

enum MHD_Result process_post_resize(struct req *r) {
        struct err pe = { 0 };
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int rows = 0, cols = 0;
        if (prelude(r, pj_process_resize_parse(r->body.buf, r->body.len, &rows, &cols, &pe), &pe, &sb) < 0)
                return MHD_YES;
        int k = process_resize(r->c, &sb, r->m.pid, rows, cols, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        cJSON *d = cJSON_CreateObject();
        json_add_int(d, "pid", r->m.pid);
        json_add_int(d, "rows", rows);
        json_add_int(d, "cols", cols);
        return respond_envelope(r, 200, "Terminal resized", d);
}

/* ---- the output stream: SSE frames as exec's (stdout, stderr, done) ---- */

struct pstream {
        struct ctl *c;
        struct session *x;
        struct strbuf pending;
        size_t pending_off;
        struct utf8_carry carry[2];   /* an incomplete UTF-8 sequence per stream */
        bool done;
        int client_fd;
        int64_t last_sent;
        bool counted;
};

static void queue(struct pstream *t, cJSON *o) { sse_queue_json(&t->pending, o); }

/* Output bytes as valid UTF-8 text (utf8-carry.h): a sequence split across chunks is carried
 * to the next one; with final, what is still carried is written as U+FFFD. */
static int ps_text(struct pstream *t, int stream, const uint8_t *data, size_t len, bool final) {
        _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(0);
        (void) utf8_carry_append(&t->carry[stream == 2 ? 1 : 0], &b, data, len, final);
        if (b.len)
                queue(t, exec_output_frame_to_json(stream == 2 ? "stderr" : "stdout", b.buf, b.len));
        return t->pending.len - t->pending_off > PENDING_CAP ? -ENOBUFS : 0;
}

static int ps_output(int stream, const uint8_t *data, size_t len, void *ud) {
        return ps_text(ud, stream, data, len, false);
}

static ssize_t ps_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        struct pstream *t = cls;
        (void) pos;
        for (;;) {
                ssize_t got = sse_pending(&t->pending, &t->pending_off, t->done, buf, max);
                if (got)
                        return got;
                if (t->c->stopping) {
                        queue(t, exec_error_frame_to_json("controld is shutting down; the process keeps running: reattach"));
                        t->done = true;
                        continue;
                }
                int k = session_read(t->x, 1000, t->client_fd, ps_output, t);
                if (k == -ECONNRESET)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (k < 0 && k != -ENOBUFS) {
                        queue(t, exec_error_frame_to_json("Lost the connection to the sandbox's process agent"));
                        t->done = true;
                        continue;
                }
                if (k == 1) {
                        int code = -1;
                        (void) ps_text(t, 1, NULL, 0, true);
                        (void) ps_text(t, 2, NULL, 0, true);
                        if (session_lost(t->x)) {
                                queue(t, exec_error_frame_to_json(
                                                 "The sandbox's process agent went away (the sandbox stopped, or another client "
                                                 "attached to this process)"));
                        } else {
                                (void) session_exit_code(t->x, &code);
                                queue(t, exec_done_frame_to_json(&(struct exec_result) { .exit_code = code }));
                        }
                        t->done = true;
                        continue;
                }
                sse_keepalive(&t->pending, t->pending.len != t->pending_off, &t->last_sent, (int64_t) t->c->cfg->stream_keepalive_ms);
        }
}

static void ps_free(void *cls) {
        struct pstream *t = cls;
        if (t->counted)
                sse_stream_count(t->c, -1);
        session_free(t->x);   /* detaches only: the process keeps running */
        strbuf_done(&t->pending);
        free(t);
}

enum MHD_Result process_get_stream(struct req *r) {
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (runtime_ready_sandbox(r, r->m.id, &sb) < 0)
                return MHD_YES;
        struct pstream *t = xnew0(struct pstream, 1);
        t->c = r->c;
        strbuf_init(&t->pending, 0);
        strbuf_append(&t->pending, ": open\n\n", 8);
        int k = process_attach(r->c, &sb, r->m.pid, &t->x, &e);
        if (k < 0) {
                strbuf_done(&t->pending);
                free(t);
                return respond_errno(r, k, &e);
        }
        /* A process may run for days: the connection lives while the client does (noticed
         * at once through its fd) and keep-alives flow. */
        return sse_respond(r, 0, ps_reader, ps_free, t, &t->client_fd, &t->last_sent, &t->counted);
}

/* ---- GET /sandboxes/{id}/watch?path=&recursive=: a directory's changes as SSE ---- */

struct wstream {
        struct ctl *c;
        struct dirwatch *w;
        struct strbuf pending;
        size_t pending_off;
        bool done, counted;
        int client_fd;
        int64_t last_sent;
};

static const char *const event_names[] = {
        [PJ_AGENT_EV_CREATE] = "create", [PJ_AGENT_EV_WRITE] = "write", [PJ_AGENT_EV_REMOVE] = "remove",
        [PJ_AGENT_EV_RENAME] = "rename", [PJ_AGENT_EV_CHMOD] = "chmod",
};

static int ws_event(int event, const char *path, bool dir, void *ud) {
        struct wstream *t = ud;
        if (event < 1 || event > PJ_AGENT_EV_CHMOD)
                return 0;
        /* a file name is bytes: what is not UTF-8 is shown as U+FFFD, as in command output */
        struct strbuf b;
        strbuf_init(&b, 0);
        for (size_t i = 0, n = strlen(path); i < n;) {
                size_t bad = utf8_first_invalid(path + i, n - i);
                strbuf_append(&b, path + i, bad);
                i += bad;
                if (i < n) {
                        strbuf_append(&b, "\xef\xbf\xbd", 3);
                        i++;
                }
        }
        strbuf_append(&b, "", 1);
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", "event");
        json_add_str(o, "event", event_names[event]);
        json_add_str(o, "path", b.buf);
        json_add_bool(o, "dir", dir);
        strbuf_done(&b);
        sse_queue_json(&t->pending, o);
        return t->pending.len - t->pending_off > PENDING_CAP ? -ENOBUFS : 0;
}

static void queue_end(struct wstream *t, bool truncated) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", "end");
        json_add_bool(o, "truncated", truncated);
        sse_queue_json(&t->pending, o);
        t->done = true;
}

static ssize_t ws_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        struct wstream *t = cls;
        (void) pos;
        for (;;) {
                ssize_t got = sse_pending(&t->pending, &t->pending_off, t->done, buf, max);
                if (got)
                        return got;
                if (t->c->stopping) {
                        queue_end(t, true);
                        continue;
                }
                int k = dirwatch_read(t->w, 1000, t->client_fd, ws_event, t);
                if (k == -ECONNRESET)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (k < 0 && k != -ENOBUFS) {
                        sse_queue_json(&t->pending, exec_error_frame_to_json("Lost the connection to the sandbox's agent"));
                        t->done = true;
                        continue;
                }
                if (k == 1) {
                        queue_end(t, dirwatch_truncated(t->w));
                        continue;
                }
                sse_keepalive(&t->pending, t->pending.len != t->pending_off, &t->last_sent,
                              (int64_t) t->c->cfg->stream_keepalive_ms);
        }
}

static void ws_free(void *cls) {
        struct wstream *t = cls;
        if (t->counted)
                sse_stream_count(t->c, -1);
        dirwatch_free(t->w);
        strbuf_done(&t->pending);
        free(t);
}

enum MHD_Result watch_get_stream(struct req *r) {
        struct err e = { 0 };
        struct err pe = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        const char *path = req_query(r, "path"), *rec = req_query(r, "recursive");
        if (!path || !*path)
                return bad_body(r, &(struct err) { .field = "path", .message = "path is required: the directory to watch" });
        if (pj_sandbox_path_check(path, &pe, "path") < 0)
                return bad_body(r, &pe);
        bool recursive = false;
        if (rec && !strcmp(rec, "true"))
                recursive = true;
        else if (rec && strcmp(rec, "false") != 0)
                return bad_body(r, &(struct err) { .field = "recursive", .message = "recursive must be true or false" });
        if (runtime_ready_sandbox(r, r->m.id, &sb) < 0)
                return MHD_YES;
        struct wstream *t = xnew0(struct wstream, 1);
        t->c = r->c;
        strbuf_init(&t->pending, 0);
        strbuf_append(&t->pending, ": open\n\n", 8);
        int k = process_watch(r->c, &sb, path, recursive, &t->w, &e);
        if (k < 0) {
                strbuf_done(&t->pending);
                free(t);
                return respond_errno(r, k, &e);
        }
        /* as a process stream: it lives while the client does */
        return sse_respond(r, 0, ws_reader, ws_free, t, &t->client_fd, &t->last_sent, &t->counted);
}
