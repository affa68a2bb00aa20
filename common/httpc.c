/* httpc.c — libcurl wrapper: one easy handle per request, bounded buffering. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <curl/curl.h>

#include "cleanup.h"
#include "httpc.h"
#include "log.h"
#include "strutil.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void) {
        curl_init_result = curl_global_init(CURL_GLOBAL_ALL);
}

DEFINE_TRIVIAL_CLEANUP_FUNC(CURL *, curl_easy_cleanup)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct curl_slist *, curl_slist_free_all)

struct sink {
        const struct httpc_req *req;
        struct strbuf body;
        int cb_error;
};

static void sink_done(struct sink *s) {
        strbuf_done(&s->body);
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *userdata) {
        struct sink *s = userdata;
        size_t n = size * nmemb;

        if (n == 0)
                return 0;
        if (s->req->on_data) {
                int r = s->req->on_data(data, n, s->req->userdata);
                if (r < 0) {
                        s->cb_error = r;
                        return 0;      /* makes curl fail with CURLE_WRITE_ERROR */
                }
                return n;
        }
        if (strbuf_append(&s->body, data, n) < 0)
                return 0;      /* over max_response: the partial body is dropped */
        return n;
}

static struct curl_slist *slist_add(struct curl_slist *l, const char *s) {
        struct curl_slist *n = xnonnull(curl_slist_append(l, s));
        return n;
}

static bool has_crlf(const char *s) {
        return strpbrk(s, "\r\n") != NULL;
}

static int map_curl_error(CURL *c, CURLcode cc, const struct sink *s) {
        long os_errno = 0;

        /* if-chain, not switch: CURLcode is a foreign enum with ~100 values */
        if (cc == CURLE_OK)
                return 0;
        if (cc == CURLE_WRITE_ERROR) {
                if (s->cb_error < 0)
                        return s->cb_error;
                return s->body.truncated ? -EMSGSIZE : -EIO;
        }
        if (cc == CURLE_OPERATION_TIMEDOUT)
                return -ETIMEDOUT;
        if (cc == CURLE_COULDNT_CONNECT) {
                curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
                if (os_errno == ENOENT)
                        return -ENOENT;
                if (os_errno == ETIMEDOUT)
                        return -ETIMEDOUT;
                return -ECONNREFUSED;
        }
        if (cc == CURLE_URL_MALFORMAT || cc == CURLE_UNSUPPORTED_PROTOCOL)
                return -EINVAL;
        return -EIO;
}

int httpc_do(const struct httpc_req *req, struct httpc_resp *ret) {
        _cleanup_(curl_easy_cleanupp) CURL *c = NULL;
        _cleanup_(curl_slist_free_allp) struct curl_slist *hdrs = NULL;
        _cleanup_free_ char *ct_hdr = NULL;
        _cleanup_(sink_done) struct sink s = { .req = req };
        const char *method;
        char errbuf[CURL_ERROR_SIZE] = "";
        CURLcode cc;
        int r;

        if (!req || !req->url || !ret)
                return -EINVAL;
        if (req->body_len > 0 && !req->body)
                return -EINVAL;
        method = req->method ? req->method : "GET";
        if (!*method || has_crlf(method) || strchr(method, ' '))
                return -EINVAL;
        if (req->content_type && has_crlf(req->content_type))
                return -EINVAL;
        for (const char *const *h = req->headers; h && *h; h++)
                if (has_crlf(*h))
                        return -EINVAL;

        pthread_once(&curl_once, curl_init_once);
        if (curl_init_result != CURLE_OK)
                return -EIO;

        c = curl_easy_init();
        if (!c)
                return -ENOMEM;

        strbuf_init(&s.body, req->max_response ? req->max_response : HTTPC_MAX_RESPONSE_DEFAULT);

        curl_easy_setopt(c, CURLOPT_URL, req->url);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
#else
        curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long) (CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, req->timeout_ms > 0 ? req->timeout_ms : HTTPC_TIMEOUT_MS_DEFAULT);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                         req->connect_timeout_ms > 0 ? req->connect_timeout_ms : HTTPC_CONNECT_TIMEOUT_MS_DEFAULT);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_cb);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
        if (req->unix_socket)
                curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, req->unix_socket);

        if (req->body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
            strcmp(method, "PATCH") == 0) {
                /* POSTFIELDS with an explicit size: binary-safe, and an empty body
                 * still gets "Content-Length: 0" (Docker wants it on POSTs). */
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) req->body_len);
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
                if (strcmp(method, "POST") != 0)
                        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        } else if (strcmp(method, "HEAD") == 0)
                curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        else if (strcmp(method, "GET") != 0)
                curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);

        /* Without this libcurl may wait a second for "100 Continue" on large bodies. */
        hdrs = slist_add(hdrs, "Expect:");
        if (req->content_type || req->body) {
                /* libcurl's POSTFIELDS default is form-urlencoded; never send that by accident. */
                ct_hdr = xasprintf("Content-Type: %s",
                                   req->content_type ? req->content_type : "application/octet-stream");
                hdrs = slist_add(hdrs, ct_hdr);
        } else
                hdrs = slist_add(hdrs, "Content-Type:");
        for (const char *const *h = req->headers; h && *h; h++)
                hdrs = slist_add(hdrs, *h);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);

        cc = curl_easy_perform(c);
        if (cc != CURLE_OK) {
                r = map_curl_error(c, cc, &s);
                log_debug("httpc: %s %s failed: %s (%s)", method, req->url,
                          errbuf[0] ? errbuf : curl_easy_strerror(cc), strerror(-r));
                return r;
        }

        long status = 0;
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);

        struct curl_header *loc = NULL;
        *ret = (struct httpc_resp) {
                .status = status,
                .body_len = s.body.len,
                .content_type = ct ? xstrdup(ct) : NULL,
                .location = curl_easy_header(c, "Location", 0, CURLH_HEADER, -1, &loc) == CURLHE_OK && loc && loc->value
                                    ? xstrdup(loc->value)
                                    : NULL,
        };
        ret->body = strbuf_steal(&s.body);
        return 0;
}

void httpc_resp_done(struct httpc_resp *r) {
        if (!r)
                return;
        free_many(r->body, r->content_type, r->location);
        *r = (struct httpc_resp) {};
}

static bool is_json_type(const char *ct) {
        /* "application/json", "application/json; charset=utf-8", "application/problem+json" */
        if (!ct)
                return false;
        size_t n = strcspn(ct, ";");
        return (n >= 4 && strncasecmp(ct + n - 4, "json", 4) == 0);
}

int httpc_do_json_body(const struct httpc_req *base, const cJSON *body, struct httpc_resp *ret) {
        _cleanup_free_ char *text = NULL;
        struct httpc_req req = *base;

        if (body) {
                text = xnonnull(cJSON_PrintUnformatted(body));
                req.body = text;
                req.body_len = strlen(text);
                req.content_type = "application/json";
        }
        return httpc_do(&req, ret);
}

int httpc_json(const char *method, const char *url, const char *unix_socket, const cJSON *body,
               long timeout_ms, long *ret_status, cJSON **ret_json) {
        struct httpc_resp resp = {};
        struct httpc_req req = {
                .method = method,
                .url = url,
                .unix_socket = unix_socket,
                .timeout_ms = timeout_ms,
        };
        int r = httpc_do_json_body(&req, body, &resp);
        if (r < 0)
                return r;

        cJSON *j = NULL;
        if (ret_json && resp.body_len > 0 &&
            (is_json_type(resp.content_type) || !resp.content_type))
                j = cJSON_ParseWithLength(resp.body, resp.body_len);
        if (ret_status)
                *ret_status = resp.status;
        if (ret_json)
                *ret_json = j;
        httpc_resp_done(&resp);
        return 0;
}

char *httpc_escape(const char *s) {
        static const char hex[] = "0123456789ABCDEF";
        size_t n = strlen(s);
        char *out = xmalloc(n * 3 + 1), *p = out;

        for (const unsigned char *c = (const unsigned char *) s; *c; c++) {
                if ((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
                    *c == '-' || *c == '.' || *c == '_' || *c == '~')
                        *p++ = (char) *c;
                else {
                        *p++ = '%';
                        *p++ = hex[*c >> 4];
                        *p++ = hex[*c & 15];
                }
        }
        *p = 0;
        return out;
}

void httpc_tls_files(CURL *h, const char *ca_file, const char *cert_file, const char *key_file) {
        if (ca_file && *ca_file)
                curl_easy_setopt(h, CURLOPT_CAINFO, ca_file);
        if (cert_file && *cert_file)
                curl_easy_setopt(h, CURLOPT_SSLCERT, cert_file);
        if (key_file && *key_file)
                curl_easy_setopt(h, CURLOPT_SSLKEY, key_file);
}

int httpc_send_all(CURL *h, curl_socket_t fd, const void *data, size_t len, int64_t deadline_ms) {
        const uint8_t *p = data;
        while (len > 0) {
                size_t sent = 0;
                CURLcode cc = curl_easy_send(h, p, len, &sent);
                if (cc == CURLE_AGAIN) {
                        struct pollfd pf = { .fd = fd, .events = POLLOUT };
                        int64_t left = deadline_ms - mono_ms();
                        if (left <= 0)
                                return -ETIMEDOUT;
                        if (poll(&pf, 1, (int) left) < 0 && errno != EINTR)
                                return -errno;
                        continue;
                }
                if (cc != CURLE_OK) {
                        log_debug("stream send failed: %s", curl_easy_strerror(cc));
                        return -EPIPE;
                }
                p += sent;
                len -= sent;
        }
        return 0;
}
