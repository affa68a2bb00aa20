/* http.h — request plumbing shared by the HTTP server (http.c), the route table
 * (api.c) and the route handlers (api.c, runtime.c, http.c). One struct req per
 * request; handlers answer through the respond_* helpers exactly once. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"
#include "strutil.h"

struct http_server;

struct req;

typedef enum MHD_Result (*route_fn)(struct req *r);

/* How a route takes its body, and so its size limit. */
enum route_body {
        ROUTE_BODY_JSON,   /* buffered JSON, capped at max_json_body (and max_body) */
        ROUTE_BODY_LARGE,  /* buffered JSON carrying payloads (exec, code, batch upload): max_body */
        ROUTE_BODY_STREAM, /* streamed into the sink its prepare hook installs; the sink caps it */
};

/* One row of the route table (api.c). Rows with the same pattern sit together;
 * the first pattern that matches a path wins, so literal segments
 * ("/sandboxes/regions") come before parameters ("/sandboxes/{id}").
 *   pattern  segments separated by '/'; "{id}" is one segment that must be a
 *            24-lowercase-hex id; "{path*}" (last) is the rest of the path,
 *            at least one segment, kept with its leading '/'.
 *   label    metrics label of the route (never contains user data).
 *   id_noun  what {id} names, for "Invalid <noun> id" (NULL without {id}).
 *   auth     needs an API key; head: a GET row that also answers HEAD.
 *   prepare  optional; runs on the headers, before any body byte is read (uploads
 *            install r->sink here); it may answer early.
 *   handler  runs once the body is complete. */
struct route {
        const char *method;
        const char *pattern;
        const char *label;
        const char *id_noun;
        bool auth, head;
        enum route_body body;
        route_fn prepare;
        route_fn handler;
};

enum route_status {
        ROUTE_FOUND,        /* row set: method and path match, {id} valid */
        ROUTE_NOT_FOUND,    /* no pattern matches the path; row NULL */
        ROUTE_BAD_METHOD,   /* the path matches but not with this method; row = first row of the pattern, allow set */
        ROUTE_BAD_ID,       /* the path matches but {id} is not 24 lowercase hex; row = first row of the pattern */
};

struct route_match {
        enum route_status status;
        const struct route *row;
        char allow[64];                  /* "GET, POST" for 405 */
        char id[SANDBOX_ID_LEN + 1];     /* {id}, valid when status == ROUTE_FOUND */
        const char *rest;                /* {path*}: points into the matched path; NULL without */
        uint32_t pid;                    /* {pid}: 1..2^31-1; 0 without */
};

/* Matches method and path (decoded, without query) against the route table.
 * Never allocates; ret->rest points into path. Returns ret->status. */
enum route_status route_match(const char *method, const char *path, struct route_match *ret);
/* The same over another table (E2B's). */
enum route_status route_match_in(const struct route *table, size_t n, const char *method, const char *path,
                                 struct route_match *ret);
/* What the server asks to find a request's route (api.c's route_match for the REST API). */
typedef enum route_status (*http_router)(const char *method, const char *path, struct route_match *ret);
/* Serves [server] listen; each request's route comes from route. */
int http_start(struct ctl *c, http_router route, struct http_server **ret);
/* What sets one HTTP server apart from another (the Brimble API's, E2B's). */
struct http_flavor {
        const char *listen_addr;         /* NULL: no listener; connections come by http_add_connection */
        int listen_port;
        http_router route;               /* by method and path */
        /* by the whole request (its headers too): sets r->m and returns its status; NULL: route */
        enum route_status (*route_req)(struct req *r);
        const char *key_header;          /* the API key's header; NULL: x-brimble-key */
        /* the JSON of an error answer; NULL: {"message": message} */
        cJSON *(*error_body)(int status, const char *message);
        int bad_id_status;               /* the answer to a malformed {id}; 0: 400 */
        /* "%2F" in the URL and its query decodes to '/' (all routes are fixed strings); else it
         * stays encoded, as http_path_unescape says */
        bool unescape_slash;
        void *ud;                        /* the flavor's own (r->srv's, http_server_ud) */
};
int http_start_flavor(struct ctl *c, const struct http_flavor *fl, struct http_server **ret);
/* Hands a connection accepted elsewhere to h (started without a listener); fd is h's in
 * every case (closed when refused at a connection limit: -EUSERS). */
int http_add_connection(struct http_server *h, int fd, const struct sockaddr *sa, socklen_t sl);
void *http_server_ud(const struct http_server *h);
/* Percent-decodes s in place (libmicrohttpd's unescape callback); "%00" and "%2F"/"%2f"
 * stay encoded so no NUL or '/' appears that the client did not send literally.
 * Returns the new length. */
size_t http_path_unescape(char *s);
/* The table itself, for tests and documentation. */
const struct route *route_table(size_t *ret_n);

/* Optional streaming body sink for uploads: called with each chunk, then once
 * with len == 0 at the end. Returning < 0 aborts; the handler then answers. */
typedef int (*req_body_sink)(struct req *r, const char *data, size_t len);

struct req {
        struct ctl *c;
        struct MHD_Connection *conn;
        const char *method;
        char *path;                      /* decoded path, without query */
        char request_id[40];
        const char *route;               /* metrics label, e.g. "/sandboxes/{id}" */
        int64_t t0_ms;
        int status;                      /* answered status, for metrics */
        bool answered;
        bool authed;
        struct account acc;
        /* Buffered body (JSON routes) with a hard cap. */
        struct strbuf body;
        bool body_too_large;
        uint64_t body_limit;
        /* The route's state for this request (an upload's, a terminal's), and what frees it:
         * on_end is called once when the request ends, however it ends (after an upgrade's
         * handler too). */
        void *ud;
        void (*on_end)(void *ud);
        /* Streaming body (file upload), fed with ud. */
        req_body_sink sink;
        bool sink_failed;
        bool started;                    /* dispatch ran */
        bool in_headers;                 /* still in the first (headers-only) callback */
        bool linger;                     /* answered before reading a body: drain before close */
        /* The route and its parameters (r->m.id, r->m.rest). */
        struct route_match m;
        struct http_server *srv;         /* the server that took the request */
};

const char *req_query(struct req *r, const char *key);
/* Resolves the API key headers into r->acc: 0, or < 0 with the 401/429 sent. */
int http_authenticate(struct req *r);
const char *req_header(struct req *r, const char *key);
/* Overwrites the request body read so far (a secret's value, once parsed). */
void req_body_wipe(struct req *r);

/* Answer helpers. Each queues one response; returns MHD_YES/NO for the access handler. */
enum MHD_Result respond_raw(struct req *r, int status, const char *content_type, const void *data, size_t len);
enum MHD_Result respond_json(struct req *r, int status, cJSON *body /* consumed */);
/* {"message": message, "data": data} (data may be NULL: omitted). */
enum MHD_Result respond_envelope(struct req *r, int status, const char *message, cJSON *data);
enum MHD_Result respond_error(struct req *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Answers a domain error: err (negative errno) through the one errno -> HTTP status
 * table, e's message as the body. */
enum MHD_Result respond_errno(struct req *r, int err, const struct err *e);
/* respond_errno with the message formatted here: the status still comes from the one table. */
enum MHD_Result respond_errno_msg(struct req *r, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int http_status_from_errno(int err);
enum MHD_Result respond_empty(struct req *r, int status);
enum MHD_Result respond_response(struct req *r, int status, struct MHD_Response *resp /* consumed */);
/* 405 with an Allow header listing allow (e.g. "GET, POST"). */
enum MHD_Result respond_method_not_allowed(struct req *r, const char *allow);

/* Parses ?page= and ?limit= per the published API. On error answers 400 and returns < 0. */
int req_pagination(struct req *r, int64_t *ret_page, int64_t *ret_limit);

/* Handlers that live outside api.c, named in the route table. */
/* http.c */
enum MHD_Result http_get_healthz(struct req *r);
enum MHD_Result http_get_metrics(struct req *r);
/* runtime.c */
enum MHD_Result runtime_post_exec(struct req *r);
/* Loads the route's sandbox, ready, for a runtime call; answers the error itself (< 0). */
int runtime_ready_sandbox(struct req *r, const char *id, struct sandbox *ret);
/* "K=V" strings of a request's env (strv_free). */
char **runtime_env_list(char **keys, char **values, size_t n);
/* SSE helpers shared by the streamed answers: the count of open streams (shutdown lets
 * them say goodbye) and the keep-alive comment when nothing was sent for keepalive_ms. */
void sse_stream_count(struct ctl *c, int delta);
void sse_keepalive(struct strbuf *pending, bool unsent, int64_t *last_sent, int64_t keepalive_ms);
/* Answers 200 text/event-stream (no-cache, no proxy buffering) from reader over cls (freed by
 * free_cb), with the connection's idle timeout set to idle_timeout_s (0: none; the reader waits
 * inside its callback): the client's fd (to notice it leaving), the time of the last byte and
 * the stream counted (sse_stream_count; free_cb uncounts when *ret_counted). */
enum MHD_Result sse_respond(struct req *r, unsigned idle_timeout_s, MHD_ContentReaderCallback reader,
                            MHD_ContentReaderFreeCallback free_cb, void *cls, int *ret_client_fd, int64_t *ret_last_sent,
                            bool *ret_counted);
/* A stream reader's first step: the bytes still queued (into buf), else the end once done;
 * 0 when there is nothing to give yet (the reader then waits for more). */
ssize_t sse_pending(struct strbuf *pending, size_t *off, bool done, char *buf, size_t max);
/* Appends one SSE frame, "data: <o>\n\n", to pending (o consumed). */
void sse_queue_json(struct strbuf *pending, cJSON *o);
/* api-process.c: processes that outlive their request (ours, beyond the Brimble API) */
enum MHD_Result process_get_list(struct req *r);
enum MHD_Result process_post_start(struct req *r);
enum MHD_Result process_get_stream(struct req *r);
enum MHD_Result process_post_stdin(struct req *r);
enum MHD_Result process_post_signal(struct req *r);
enum MHD_Result process_post_resize(struct req *r);
/* GET /sandboxes/{id}/watch: a directory's changes as SSE */
enum MHD_Result watch_get_stream(struct req *r);
enum MHD_Result runtime_post_code(struct req *r);
enum MHD_Result runtime_prepare_put_file(struct req *r);
/* An upload into path of sb (ready) from the request's body, for a route's prepare hook: the
 * body streams into the sandbox as it comes (capped at [server] max_file); the handler then
 * calls runtime_upload_finish, 0 once the file is whole, else -errno with the reason. */
int runtime_upload_begin(struct req *r, struct sandbox *sb, const char *path, struct err *e);
int runtime_upload_finish(struct req *r, struct err *e);
enum MHD_Result runtime_put_file(struct req *r);
enum MHD_Result runtime_get_file(struct req *r);
/* 200 with the file at path in sb streamed (the run takes sb's contents), or the error. */
enum MHD_Result runtime_respond_download(struct req *r, struct sandbox *sb, const char *path);
enum MHD_Result runtime_post_batch(struct req *r);

/* ---- HTTP server (http.c; the route table is in api.c, see http.h) ---- */
struct http_server *http_stop(struct http_server *h);
/* Actual bound port (for listen = ...:0). */
int http_port(struct http_server *h);
