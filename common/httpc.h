/* httpc.h — a small libcurl wrapper for HTTP over TCP or a unix socket.
 *
 * One easy handle per call: no shared state besides curl_global_init (done
 * once, thread-safe). Safe to call from any thread. Never logs above debug.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>

#define HTTPC_TIMEOUT_MS_DEFAULT         30000L
#define HTTPC_CONNECT_TIMEOUT_MS_DEFAULT 5000L
#define HTTPC_MAX_RESPONSE_DEFAULT       ((size_t) 16 << 20)

struct httpc_req {
        const char *method;            /* "GET" default */
        const char *url;               /* http://localhost/v1.41/... for unix sockets */
        const char *unix_socket;       /* NULL = TCP */
        const char *const *headers;    /* NULL-terminated "Name: value"; must not contain CR/LF */
        const void *body;
        size_t body_len;
        const char *content_type;      /* e.g. "application/json"; set whenever body != NULL */
        long timeout_ms;               /* whole request; 0 = 30000 */
        long connect_timeout_ms;       /* 0 = 5000 */
        size_t max_response;           /* cap on buffered body; 0 = 16 MiB; over it -> -EMSGSIZE */
        /* Optional streaming sink: when set, body chunks go here instead of being
         * buffered (max_response does not apply); returning < 0 aborts the transfer
         * and httpc_do() returns that value. */
        int (*on_data)(const void *data, size_t len, void *userdata);
        void *userdata;
};

struct httpc_resp {
        long status;
        char *body;                    /* always NUL-terminated (body_len excludes it); "" when streamed */
        size_t body_len;
        char *content_type;            /* NULL when the server sent none */
        char *location;                /* the Location header (as sent), NULL when none */
};

/* Performs one request. Any HTTP status counts as success (look at ret->status).
 * Returns 0, or -ETIMEDOUT, -ECONNREFUSED, -ENOENT (no such unix socket),
 * -EMSGSIZE (body over max_response), -EINVAL (bad request fields), -EIO (anything
 * else), or the negative value an on_data callback returned. ret is filled only on
 * success; the caller frees it with httpc_resp_done(). */
int httpc_do(const struct httpc_req *req, struct httpc_resp *ret);
/* httpc_do() with body (when not NULL) serialised as JSON and sent with
 * Content-Type: application/json; the base request's own body fields are replaced. */
int httpc_do_json_body(const struct httpc_req *base, const cJSON *body, struct httpc_resp *ret);

/* Frees the members and zeroes *r. NULL-safe. */
void httpc_resp_done(struct httpc_resp *r);

/* JSON convenience. body (may be NULL) is sent serialized with Content-Type:
 * application/json. *ret_json is the parsed response when the body is JSON
 * (a JSON content type, or no content type and a body that parses), else NULL.
 * ret_status/ret_json may be NULL. timeout_ms 0 = default. Errors as httpc_do(). */
int httpc_json(const char *method, const char *url, const char *unix_socket, const cJSON *body,
               long timeout_ms, long *ret_status, cJSON **ret_json);

/* For callers that drive a libcurl handle themselves (blocking queries, CONNECT_ONLY streams). */
/* The TLS files a config names (NULL or "" = libcurl's default): CA bundle, client cert and key. */
void httpc_tls_files(CURL *h, const char *ca_file, const char *cert_file, const char *key_file);
/* Sends all len bytes on a CONNECT_ONLY handle whose socket is fd, polling while it would
 * block, until deadline_ms (mono_ms()). 0, -ETIMEDOUT, -errno of poll(), or -EPIPE when libcurl
 * fails the send. */
int httpc_send_all(CURL *h, curl_socket_t fd, const void *data, size_t len, int64_t deadline_ms);

/* URL-encodes a query (or path) component: everything except A-Z a-z 0-9 - . _ ~
 * becomes %XX. Returns an xmalloc'd string. */
char *httpc_escape(const char *s);
