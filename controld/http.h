/* http.h — request plumbing shared by the HTTP server (http.c) and the route
 * handlers (api.c, runtime.c). One struct req per request; handlers answer
 * through the respond_* helpers exactly once. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"
#include "strutil.h"

struct req;

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
        /* Streaming body (file upload). */
        req_body_sink sink;
        void *sink_ud;
        void (*sink_free)(void *ud);     /* called when the request ends, however it ends */
        bool sink_failed;
        bool started;                    /* dispatch ran */
        bool in_headers;                 /* still in the first (headers-only) callback */
        bool linger;                     /* answered before reading a body: drain before close */
        /* Route parameters. */
        char *parts[16];
        size_t n_parts;
};

const char *req_query(struct req *r, const char *key);
const char *req_header(struct req *r, const char *key);

/* Answer helpers. Each queues one response; returns MHD_YES/NO for the access handler. */
enum MHD_Result respond_raw(struct req *r, int status, const char *content_type, const void *data, size_t len);
enum MHD_Result respond_json(struct req *r, int status, cJSON *body /* consumed */);
/* {"message": message, "data": data} (data may be NULL: omitted). */
enum MHD_Result respond_envelope(struct req *r, int status, const char *message, cJSON *data);
enum MHD_Result respond_error(struct req *r, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
enum MHD_Result respond_api_error(struct req *r, const struct api_error *e);
enum MHD_Result respond_empty(struct req *r, int status);
enum MHD_Result respond_response(struct req *r, int status, struct MHD_Response *resp /* consumed */);
/* 405 with an Allow header listing allow (e.g. "GET, POST"). */
enum MHD_Result respond_method_not_allowed(struct req *r, const char *allow);

/* Parses ?page= and ?limit= per the published API. On error answers 400 and returns < 0. */
int req_pagination(struct req *r, int64_t *ret_page, int64_t *ret_limit);

/* api.c: dispatches an authenticated request (the body, if any, is complete). */
enum MHD_Result api_dispatch(struct req *r);
/* api.c: called on the first callback with headers only; may set r->sink for uploads or
 * answer early (413 from Content-Length). Returns MHD_YES to continue. */
enum MHD_Result api_prepare(struct req *r, bool *ret_answered);

/* runtime.c: exec, code, files. runtime_prepare may install a body sink for uploads or
 * answer early; runtime_dispatch returns true when it handled the route. */
enum MHD_Result runtime_prepare(struct req *r, bool *ret_answered);
bool runtime_dispatch(struct req *r, enum MHD_Result *ret);
