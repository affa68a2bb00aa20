/* api-runtime.c — the Brimble REST/SSE adapter of the runtime core: POST exec and code
 * (JSON, or an SSE stream with `stream: true`), PUT and GET of files, batch upload. It
 * parses the request (proto-json), calls runtime.c, and takes every status from the one
 * errno-to-status table (respond_errno, respond_errno_msg): no status is written here. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "render.h"
#include "runtime.h"

/* Stream frames not yet sent to the client. exec_read adds at most 64 KiB of output per
 * call, and the client drains between calls; only output produced while controld is still
 * writing the code to stdin can pile up, and past this the command is killed. */
#define STREAM_PENDING_CAP ((size_t) 4 << 20)

int runtime_ready_sandbox(struct req *r, const char *id, struct sandbox *ret) {
        struct err e = { 0 };
        int k = runtime_load_ready(r->c, &r->acc, id, ret, &e);
        if (k < 0)
                (void) respond_errno(r, k, &e);
        return k;
}

char **runtime_env_list(char **keys, char **values, size_t n) {
        char **v = xnew0(char *, n + 1);
        for (size_t i = 0; i < n; i++)
                v[i] = xasprintf("%s=%s", keys[i], values[i]);
        return v;
}

/* ---- exec and code: the SSE stream ---- */

struct sse {
        struct ctl *c;
        struct runtime_run *x;
        struct strbuf pending;        /* frames not yet sent */
        size_t pending_off;
        bool done;                    /* the last frame is queued */
        int client_fd;
        int64_t last_sent;            /* for keep-alives */
        bool counted;                 /* in ctl->streams_running */
};

/* Queues one SSE frame (o consumed). */
static void queue_frame(struct sse *t, cJSON *o) { sse_queue_json(&t->pending, o); }

/* Queues the stream's last frame, an error saying message. */
static void queue_error_frame(struct sse *t, const char *message) {
        queue_frame(t, exec_error_frame_to_json(message));
        t->done = true;
}

static int sse_output(void *ud, int stream, const char *text, size_t len) {
        struct sse *t = ud;
        if (t->pending.len > STREAM_PENDING_CAP)
                return -ENOBUFS;
        queue_frame(t, exec_output_frame_to_json(stream == 1 ? "stdout" : "stderr", text, len));
        return 0;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        struct sse *t = cls;
        (void) pos;
        for (;;) {
                ssize_t got = sse_pending(&t->pending, &t->pending_off, t->done, buf, max);
                if (got)
                        return got;
                /* Short waits so shutdown and deadlines are noticed within a second. */
                struct exec_result res;
                struct err err = { 0 };
                switch (runtime_step(t->x, 1000, t->client_fd, &res, &err)) {
                case RUNTIME_CLIENT_GONE:
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                case RUNTIME_FAILED:
                        queue_error_frame(t, err.message);
                        continue;
                case RUNTIME_EXITED:
                        queue_frame(t, exec_done_frame_to_json(&res));
                        t->done = true;
                        continue;
                case RUNTIME_RUNNING:
                        break;
                }
                sse_keepalive(&t->pending, t->pending.len != 0, &t->last_sent, (int64_t) t->c->cfg->stream_keepalive_ms);
        }
}

static void sse_free(void *cls) {
        struct sse *t = cls;
        if (t->counted)
                sse_stream_count(t->c, -1);
        if (!runtime_ended(t->x))
                log_info("streamed exec ended before the process; killing it");
        runtime_free(t->x);
        strbuf_done(&t->pending);
        free(t);
}

/* Starts cmd and answers JSON (when it ends) or SSE (at once). */
static enum MHD_Result run_and_respond(struct req *r, struct sandbox *sb, const struct runtime_cmd *cmd, bool stream) {
        struct ctl *c = r->c;
        struct err e = { 0 };
        struct runtime_run *x = NULL;
        int k;

        if (!stream) {
                if ((k = runtime_start(c, sb, cmd, NULL, NULL, &x, &e)) < 0)
                        return respond_errno(r, k, &e);
                struct exec_result res;
                if ((k = runtime_wait(x, &res, &e)) < 0) {
                        runtime_free(x);
                        return respond_errno(r, k, &e);
                }
                cJSON *d = exec_result_to_json(&res);
                runtime_free(x);
                return respond_envelope(r, 200,
                                        res.oom_killed  ? OOM_MESSAGE
                                        : res.timed_out ? "Command timed out and was killed"
                                                        : "Exec completed",
                                        d);
        }

        struct sse *t = xnew0(struct sse, 1);
        t->c = c;
        t->client_fd = -1;
        /* Frames produced while stdin is written come after the opening comment. */
        strbuf_init(&t->pending, 0);
        strbuf_append(&t->pending, ": open\n\n", 8);
        if ((k = runtime_start(c, sb, cmd, sse_output, t, &t->x, &e)) < 0) {
                strbuf_done(&t->pending);
                free(t);
                return respond_errno(r, k, &e);
        }
        if (runtime_output_refused(t->x)) {
                /* Output while the input was still going in, more than we keep: it was stopped. */
                strbuf_reset(&t->pending);
                strbuf_append(&t->pending, ": open\n\n", 8);
                char msg[200];
                snprintf(msg, sizeof(msg),
                         "The command wrote more than %zu bytes of output before its input was sent; it was stopped",
                         STREAM_PENDING_CAP);
                queue_error_frame(t, msg);
        }
        /* The reader waits inside its callback for output (up to a keep-alive), which the
         * server's idle timeout would take for a dead connection and cut. The exec's own
         * deadline (plus the time to say goodbye) bounds this connection instead; a client that
         * goes away is still noticed at once through client_fd. */
        return sse_respond(r, (unsigned) cmd->timeout_s + 30u + (unsigned) (c->cfg->stream_keepalive_ms / 1000), sse_reader,
                           sse_free, t, &t->client_fd, &t->last_sent, &t->counted);
}

/* exec and code once their bodies parsed: the caller's sandbox of the route, then
 * run_and_respond() with the request's cwd, env, timeout and stream. */
static enum MHD_Result run_request(struct req *r, const struct pj_run *run, const char *token, const char **argv,
                                   const char *stdin_file, const char *stdin_data, size_t stdin_len) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };  /* moved into the run when one starts */
        if (runtime_ready_sandbox(r, r->m.id, &sb) < 0)
                return MHD_YES;
        _cleanup_(strv_freep) char **env = runtime_env_list(run->env_keys, run->env_values, run->n_env);
        struct runtime_cmd cmd = {
                .argv = argv, .env = env, .cwd = run->cwd, .timeout_s = run->timeout_s, .token = token,
                .stdin_file = stdin_file, .stdin_data = stdin_data, .stdin_len = stdin_len,
        };
        return run_and_respond(r, &sb, &cmd, run->stream);
}

enum MHD_Result runtime_post_exec(struct req *r) {
        _cleanup_(pj_exec_done) struct pj_exec in = { 0 };
        struct err pe = { 0 };
        if (pj_exec_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return respond_errno_msg(r, -EINVAL, "%s", pe.message);
        const char *argv[] = { "/bin/sh", "-c", in.cmd, NULL };
        return run_request(r, &in.run, NULL, argv, NULL, in.stdin_data, in.stdin_len);
}

enum MHD_Result runtime_post_code(struct req *r) {
        _cleanup_(pj_code_done) struct pj_code in = { 0 };
        struct err pe = { 0 };
        if (pj_code_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return respond_errno_msg(r, -EINVAL, "%s", pe.message);
        bool py = !strcmp(in.language, "python");
        char tok[25], path[64];
        hexid_new(tok);
        snprintf(path, sizeof(path), "/tmp/.paddock-code-%s.%s", tok, py ? "py" : "js");
        const char *argv[] = { py ? "python3" : "node", path, NULL };
        return run_request(r, &in.run, tok, argv, path, in.code, strlen(in.code));
}

/* ---- files ---- */

struct upload {
        struct runtime_run *x;
        uint64_t received, limit;
        bool too_large, process_gone, timed_out;
        int error;
        char path[4097];
};

static int upload_sink(struct req *r, const char *data, size_t len) {
        struct upload *u = r->ud;
        if (len == (size_t) -1)
                return 0;  /* client went away: on_end kills the exec */
        u->received += len;
        if (u->received > u->limit) {
                u->too_large = true;
                return -EFBIG;
        }
        if (u->timed_out)
                return -ETIMEDOUT;
        if (u->process_gone)
                return 0;  /* discard: the answer is already decided */
        int k = runtime_file_write(u->x, data, len);
        if (k == -ETIMEDOUT) {
                /* A slow drip may not hold an exec and a slot for ever: both go now, the
                 * rest of the body is read and dropped. */
                u->timed_out = true;
                u->x = runtime_free(u->x);
                return -ETIMEDOUT;
        }
        if (k == -EPIPE) {
                u->process_gone = true;
                return 0;
        }
        if (k < 0) {
                u->error = k;
                return k;
        }
        return 0;
}

static void upload_free(void *ud) {
        struct upload *u = ud;
        if (!u)
                return;
        runtime_free(u->x);
        free(u);
}

/* The route's prepare hook: runs on the headers, before any body byte. */
enum MHD_Result runtime_prepare_put_file(struct req *r) {
        const char *id = r->m.id, *path = r->m.rest;
        struct ctl *c = r->c;
        struct err pe = { 0 };
        struct err e = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };  /* moved into the run when one starts */
        const char *cl = req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
        int64_t len = -1;

        if (pj_sandbox_path_check(path, &pe, "path") < 0)
                return respond_errno_msg(r, -EINVAL, "%s", pe.message);
        if (cl && (safe_atoi64(cl, &len) < 0 || len < 0))
                return respond_errno_msg(r, -EINVAL, "Content-Length must be a non-negative integer");
        if (len >= 0 && (uint64_t) len > c->cfg->max_file)
                return respond_errno_msg(r, -EFBIG, "File too large: %lld bytes, the limit is %llu bytes",
                                         (long long) len, (unsigned long long) c->cfg->max_file);
        if (runtime_ready_sandbox(r, id, &sb) < 0)
                return MHD_YES;
        int k = runtime_upload_begin(r, &sb, path, &e);
        return k < 0 ? respond_errno(r, k, &e) : MHD_YES;
}

int runtime_upload_begin(struct req *r, struct sandbox *sb, const char *path, struct err *e) {
        struct upload *u = xnew0(struct upload, 1);
        u->limit = r->c->cfg->max_file;
        snprintf(u->path, sizeof(u->path), "%s", path);
        int k = runtime_file_write_start(r->c, sb, path, &u->x, e);
        if (k < 0) {
                free(u);
                return k;
        }
        r->sink = upload_sink;
        r->ud = u;
        r->on_end = upload_free;
        return 0;
}

int runtime_upload_finish(struct req *r, struct err *e) {
        struct upload *u = r->ud;
        if (!u)
                return err_set(e, -EIO, "Upload was not prepared");
        if (u->too_large)
                return err_set(e, -EFBIG, "File too large: the limit is %llu bytes", (unsigned long long) u->limit);
        if (u->timed_out)
                return err_set(e, -ETIMEDOUT, "Upload of %s took longer than %llu s (transfer_timeout); it was abandoned",
                               u->path, (unsigned long long) r->c->cfg->transfer_timeout_s);
        if (u->error)
                return err_set(e, -EHOSTUNREACH, "Failed to send the file to the sandbox: %s", strerror(-u->error));
        int k = runtime_file_write_finish(u->x, u->path, e);
        if (k < 0)
                return k;
        if (u->process_gone)
                return err_set(e, -EREMOTEIO, "The sandbox stopped reading %s before the upload ended", u->path);
        return 0;
}

enum MHD_Result runtime_put_file(struct req *r) {
        struct err e = { 0 };
        int k = runtime_upload_finish(r, &e);
        return k < 0 ? respond_errno(r, k, &e) : respond_empty(r, 204);
}

struct download {
        struct runtime_run *x;
        int client_fd;
};

static ssize_t dl_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        struct download *d = cls;
        (void) pos;
        ssize_t n = runtime_file_read(d->x, d->client_fd, buf, max);
        return n > 0 ? n : n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void dl_free(void *cls) {
        struct download *d = cls;
        runtime_free(d->x);
        free(d);
}

enum MHD_Result runtime_respond_download(struct req *r, struct sandbox *sb, const char *path) {
        struct err e = { 0 };
        struct runtime_run *x = NULL;
        const void *all = NULL;
        size_t all_len = 0;
        int k = runtime_file_read_open(r->c, sb, path, &x, &all, &all_len, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        if (all) {
                /* All of it came before the end: one answer with its length. */
                enum MHD_Result res = respond_raw(r, 200, "application/octet-stream", all, all_len);
                runtime_free(x);
                return res;
        }
        struct download *d = xnew0(struct download, 1);
        d->x = x;
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        d->client_fd = ci ? ci->connect_fd : -1;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024 * 1024, dl_reader, d, dl_free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
        return respond_response(r, 200, resp);
}

enum MHD_Result runtime_get_file(struct req *r) {
        const char *id = r->m.id, *path = r->m.rest;
        struct err pe = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };  /* moved into the run when one starts */
        if (pj_sandbox_path_check(path, &pe, "path") < 0)
                return respond_errno_msg(r, -EINVAL, "%s", pe.message);
        if (runtime_ready_sandbox(r, id, &sb) < 0)
                return MHD_YES;
        return runtime_respond_download(r, &sb, path);
}

enum MHD_Result runtime_post_batch(struct req *r) {
        const char *id = r->m.id;
        struct ctl *c = r->c;
        _cleanup_(pj_files_batch_done) struct pj_files_batch in = { 0 };
        struct err pe = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int uploaded = 0, failed = 0;

        if (pj_files_batch_parse(r->body.buf, r->body.len, c->cfg->max_file, c->cfg->max_body, &in, &pe) < 0)
                return respond_errno_msg(r, -EINVAL, "%s", pe.message);
        if (runtime_ready_sandbox(r, id, &sb) < 0)
                return MHD_YES;
        cJSON *results = cJSON_CreateArray();
        for (size_t i = 0; i < in.n_files; i++) {
                struct pj_batch_file *f = &in.files[i];
                struct err e = { 0 };
                char msg[4600] = "";
                int k;
                if (in.file_errors[i])
                        snprintf(msg, sizeof(msg), "%s", in.file_errors[i]);
                else {
                        _cleanup_sandbox_ struct sandbox copy = { 0 };
                        struct runtime_run *x = NULL;
                        if (store_sandbox_get(c->store, id, &copy) < 0)
                                snprintf(msg, sizeof(msg), "Sandbox record vanished");
                        else if ((k = runtime_file_write_start(c, &copy, f->path, &x, &e)) < 0) {
                                snprintf(msg, sizeof(msg), "%s",
                                         k == -EUSERS ? "Too many commands or transfers running; retry when one finishes"
                                                      : "Could not reach the sandbox");
                        } else {
                                k = f->len ? runtime_file_write(x, f->data, f->len) : 0;
                                if (runtime_file_write_finish(x, f->path, &e) < 0)
                                        snprintf(msg, sizeof(msg), "%s", e.message);
                                else if (k < 0)
                                        snprintf(msg, sizeof(msg), "Failed to send the file: %s", strerror(-k));
                                runtime_free(x);
                        }
                }
                if (msg[0])
                        failed++;
                else
                        uploaded++;
                cJSON_AddItemToArray(results, batch_file_to_json(f->path, f->len, msg[0] ? msg : NULL));
        }
        return respond_envelope(r, 200, failed ? "Some files failed to upload" : "Files uploaded",
                                batch_summary_to_json(uploaded, failed, results));
}
