/* Unit tests for common/httpc.c against an in-process libmicrohttpd server,
 * over TCP (127.0.0.1, ephemeral port) and over a unix socket. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <microhttpd.h>

#include "cleanup.h"
#include "httpc.h"
#include "testlib.h"

#define BIG_LEN 200000

struct conn_state {
        char *body;
        size_t len;
};

static void append(struct conn_state *c, const char *data, size_t n) {
        c->body = xrealloc(c->body, c->len + n + 1);
        memcpy(c->body + c->len, data, n);
        c->len += n;
        c->body[c->len] = 0;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *ct,
                             const void *data, size_t len) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *) data, MHD_RESPMEM_MUST_COPY);
        if (ct)
                MHD_add_response_header(resp, "Content-Type", ct);
        enum MHD_Result r = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return r;
}

static enum MHD_Result handler(void *cls _unused_, struct MHD_Connection *conn, const char *url,
                               const char *method, const char *version _unused_, const char *upload_data,
                               size_t *upload_data_size, void **con_cls) {
        struct conn_state *st = *con_cls;

        if (!st) {
                *con_cls = xnew0(struct conn_state, 1);
                return MHD_YES;
        }
        if (*upload_data_size > 0) {
                append(st, upload_data, *upload_data_size);
                *upload_data_size = 0;
                return MHD_YES;
        }

        if (strcmp(url, "/echo") == 0) {
                const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
                const char *xt = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Test");
                const char *q = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "q");
                _cleanup_json_ cJSON *j = cJSON_CreateObject();
                cJSON_AddStringToObject(j, "method", method);
                cJSON_AddStringToObject(j, "content_type", ct ? ct : "");
                cJSON_AddStringToObject(j, "x_test", xt ? xt : "");
                cJSON_AddStringToObject(j, "q", q ? q : "");
                cJSON_AddStringToObject(j, "body", st->body ? st->body : "");
                cJSON_AddNumberToObject(j, "len", (double) st->len);
                _cleanup_free_ char *s = cJSON_PrintUnformatted(j);
                return reply(conn, 200, "application/json; charset=utf-8", s, strlen(s));
        }
        if (strncmp(url, "/status/", 8) == 0)
                return reply(conn, (unsigned) atoi(url + 8), "text/plain", "status body", 11);
        if (strcmp(url, "/sleep") == 0) {
                usleep(1500 * 1000);
                return reply(conn, 200, "text/plain", "late", 4);
        }
        if (strcmp(url, "/big") == 0) {
                _cleanup_free_ char *b = xmalloc(BIG_LEN);
                for (size_t i = 0; i < BIG_LEN; i++)
                        b[i] = (char) ('a' + i % 26);
                return reply(conn, 200, "application/octet-stream", b, BIG_LEN);
        }
        if (strcmp(url, "/text") == 0)
                return reply(conn, 200, "text/plain", "{\"not\":\"json\"}", 14);
        return reply(conn, 404, "application/json", "{\"message\":\"nope\"}", 18);
}

static void completed(void *cls _unused_, struct MHD_Connection *conn _unused_, void **con_cls,
                      enum MHD_RequestTerminationCode toe _unused_) {
        struct conn_state *st = *con_cls;
        if (st) {
                free(st->body);
                free(st);
                *con_cls = NULL;
        }
}

struct server {
        struct MHD_Daemon *tcp, *unx;
        int port;
        char url[64];
        char sock[256];
};

static char *url_of(const struct server *s, const char *path) {
        return xasprintf("%s%s", s->url, path);
}

/* Starts the echo server on TCP and on a unix socket; the TCP URL of path (xmalloc'd),
 * NULL when path is NULL. */
static char *server_start(struct server *s, const char *path) {
        unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

        *s = (struct server) {};
        s->tcp = MHD_start_daemon(flags, 0, NULL, NULL, handler, NULL,
                                  MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &a,
                                  MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
        ASSERT_NOT_NULL(s->tcp);
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->tcp, MHD_DAEMON_INFO_BIND_PORT);
        ASSERT_NOT_NULL(info);
        s->port = info->port;
        ASSERT_TRUE(s->port > 0);
        snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", s->port);

        snprintf(s->sock, sizeof(s->sock), "%s/httpc.sock", test_tmpdir());
        unlink(s->sock);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(fd >= 0);
        struct sockaddr_un u = { .sun_family = AF_UNIX };
        snprintf(u.sun_path, sizeof(u.sun_path), "%s", s->sock);
        ASSERT_EQ(bind(fd, (struct sockaddr *) &u, sizeof(u)), 0);
        ASSERT_EQ(listen(fd, 16), 0);
        s->unx = MHD_start_daemon(flags, 0, NULL, NULL, handler, NULL,
                                  MHD_OPTION_LISTEN_SOCKET, fd,
                                  MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_END);
        ASSERT_NOT_NULL(s->unx);
        return path ? url_of(s, path) : NULL;
}

static void server_stop(struct server *s) {
        if (s->tcp)
                MHD_stop_daemon(s->tcp);
        if (s->unx)
                MHD_stop_daemon(s->unx);
        unlink(s->sock);
}

TEST(methods_and_bodies_over_tcp_and_unix) {
        struct server s;
        server_start(&s, NULL);

        for (int transport = 0; transport < 2; transport++) {
                const char *sock = transport ? s.sock : NULL;
                _cleanup_free_ char *u = transport ? xstrdup("http://localhost/echo?q=a%20b") : url_of(&s, "/echo?q=a%20b");
                const char *methods[] = { "GET", "POST", "PUT", "DELETE" };

                for (size_t i = 0; i < ELEMENTSOF(methods); i++) {
                        bool with_body = i != 0;
                        const char *hdrs[] = { "X-Test: yes", NULL };
                        struct httpc_req req = {
                                .method = methods[i], .url = u, .unix_socket = sock, .headers = hdrs,
                                .body = with_body ? "{\"k\":1}" : NULL, .body_len = with_body ? 7 : 0,
                                .content_type = with_body ? "application/json" : NULL,
                        };
                        struct httpc_resp resp = {};
                        ASSERT_OK(httpc_do(&req, &resp));
                        ASSERT_EQ(resp.status, 200);
                        ASSERT_STREQ(resp.content_type, "application/json; charset=utf-8");
                        ASSERT_EQ(strlen(resp.body), resp.body_len);
                        _cleanup_json_ cJSON *j = cJSON_Parse(resp.body);
                        ASSERT_NOT_NULL(j);
                        ASSERT_STREQ(cJSON_GetObjectItem(j, "method")->valuestring, methods[i]);
                        ASSERT_STREQ(cJSON_GetObjectItem(j, "x_test")->valuestring, "yes");
                        ASSERT_STREQ(cJSON_GetObjectItem(j, "q")->valuestring, "a b");
                        if (with_body) {
                                ASSERT_STREQ(cJSON_GetObjectItem(j, "content_type")->valuestring, "application/json");
                                ASSERT_STREQ(cJSON_GetObjectItem(j, "body")->valuestring, "{\"k\":1}");
                        } else
                                ASSERT_STREQ(cJSON_GetObjectItem(j, "body")->valuestring, "");
                        httpc_resp_done(&resp);
                        ASSERT_NULL(resp.body);
                }
        }
        server_stop(&s);
}

TEST(binary_body_and_default_content_type) {
        struct server s;
        _cleanup_free_ char *u = server_start(&s, "/echo");
        const char bin[] = { 'a', 0, 'b' };
        struct httpc_req req = { .method = "POST", .url = u, .body = bin, .body_len = sizeof(bin) };
        struct httpc_resp resp = {};
        ASSERT_OK(httpc_do(&req, &resp));
        _cleanup_json_ cJSON *j = cJSON_Parse(resp.body);
        ASSERT_EQ(cJSON_GetObjectItem(j, "len")->valuedouble, 3);
        /* never libcurl's form-urlencoded default */
        ASSERT_STREQ(cJSON_GetObjectItem(j, "content_type")->valuestring, "application/octet-stream");
        httpc_resp_done(&resp);

        /* a POST without body still works (Content-Length: 0) */
        struct httpc_req req2 = { .method = "POST", .url = u };
        ASSERT_OK(httpc_do(&req2, &resp));
        ASSERT_EQ(resp.status, 200);
        httpc_resp_done(&resp);
        server_stop(&s);
}

TEST(json_helper_sends_json_content_type) {
        struct server s;
        _cleanup_free_ char *u = server_start(&s, "/echo");
        _cleanup_json_ cJSON *body = cJSON_CreateObject();
        cJSON_AddStringToObject(body, "hello", "w\"orld");
        long status = 0;
        cJSON *j = NULL;
        ASSERT_OK(httpc_json("POST", u, NULL, body, 0, &status, &j));
        ASSERT_EQ(status, 200);
        ASSERT_NOT_NULL(j);
        ASSERT_STREQ(cJSON_GetObjectItem(j, "content_type")->valuestring, "application/json");
        _cleanup_json_ cJSON *sent = cJSON_Parse(cJSON_GetObjectItem(j, "body")->valuestring);
        ASSERT_STREQ(cJSON_GetObjectItem(sent, "hello")->valuestring, "w\"orld");
        cJSON_Delete(j);

        /* JSON error body with a 404 is parsed too */
        _cleanup_free_ char *u404 = url_of(&s, "/missing");
        ASSERT_OK(httpc_json("GET", u404, NULL, NULL, 0, &status, &j));
        ASSERT_EQ(status, 404);
        ASSERT_STREQ(cJSON_GetObjectItem(j, "message")->valuestring, "nope");
        cJSON_Delete(j);

        /* text/plain is not parsed even if it looks like JSON */
        _cleanup_free_ char *ut = url_of(&s, "/text");
        j = (cJSON *) 1;
        ASSERT_OK(httpc_json("GET", ut, NULL, NULL, 0, &status, &j));
        ASSERT_NULL(j);
        server_stop(&s);
}

TEST(status_codes) {
        struct server s;
        server_start(&s, NULL);
        const int codes[] = { 201, 204, 304, 400, 409, 418, 500, 503 };
        for (size_t i = 0; i < ELEMENTSOF(codes); i++) {
                _cleanup_free_ char *p = xasprintf("/status/%d", codes[i]);
                _cleanup_free_ char *u = url_of(&s, p);
                struct httpc_req req = { .url = u, .unix_socket = NULL };
                struct httpc_resp resp = {};
                ASSERT_OK(httpc_do(&req, &resp));
                ASSERT_EQ(resp.status, codes[i]);
                ASSERT_NOT_NULL(resp.body);
                httpc_resp_done(&resp);

                /* over the unix socket as well */
                _cleanup_free_ char *uu = xasprintf("http://localhost%s", p);
                struct httpc_req req2 = { .url = uu, .unix_socket = s.sock };
                ASSERT_OK(httpc_do(&req2, &resp));
                ASSERT_EQ(resp.status, codes[i]);
                httpc_resp_done(&resp);
        }
        server_stop(&s);
}

static double now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1000 + (double) ts.tv_nsec / 1e6;
}

TEST(timeout) {
        struct server s;
        _cleanup_free_ char *u = server_start(&s, "/sleep");
        struct httpc_req req = { .url = u, .timeout_ms = 300 };
        struct httpc_resp resp = {};
        double t0 = now_ms();
        ASSERT_EQ(httpc_do(&req, &resp), -ETIMEDOUT);
        double dt = now_ms() - t0;
        ASSERT_TRUE(dt >= 250 && dt < 1400);
        ASSERT_NULL(resp.body);

        struct httpc_req req2 = { .url = "http://localhost/sleep", .unix_socket = s.sock, .timeout_ms = 200 };
        ASSERT_EQ(httpc_do(&req2, &resp), -ETIMEDOUT);
        server_stop(&s);
}

TEST(max_response_cap) {
        struct server s;
        _cleanup_free_ char *u = server_start(&s, "/big");
        struct httpc_req req = { .url = u, .max_response = 1000 };
        struct httpc_resp resp = {};
        ASSERT_EQ(httpc_do(&req, &resp), -EMSGSIZE);
        ASSERT_NULL(resp.body);

        req.max_response = BIG_LEN;   /* exactly fits */
        ASSERT_OK(httpc_do(&req, &resp));
        ASSERT_EQ(resp.body_len, BIG_LEN);
        ASSERT_EQ(resp.body[BIG_LEN], 0);
        ASSERT_EQ(resp.body[27], 'b');
        httpc_resp_done(&resp);

        req.max_response = BIG_LEN - 1;
        ASSERT_EQ(httpc_do(&req, &resp), -EMSGSIZE);
        server_stop(&s);
}

TEST(connection_refused_and_missing_socket) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(bind(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        socklen_t al = sizeof(a);
        ASSERT_EQ(getsockname(fd, (struct sockaddr *) &a, &al), 0);
        close(fd);   /* nobody listens there now */

        _cleanup_free_ char *u = xasprintf("http://127.0.0.1:%d/", ntohs(a.sin_port));
        struct httpc_req req = { .url = u };
        struct httpc_resp resp = {};
        ASSERT_EQ(httpc_do(&req, &resp), -ECONNREFUSED);

        _cleanup_free_ char *sock = xasprintf("%s/nope.sock", test_tmpdir());
        struct httpc_req req2 = { .url = "http://localhost/", .unix_socket = sock };
        ASSERT_EQ(httpc_do(&req2, &resp), -ENOENT);

        /* a socket file nobody listens on */
        _cleanup_free_ char *dead = xasprintf("%s/dead.sock", test_tmpdir());
        int ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un un = { .sun_family = AF_UNIX };
        snprintf(un.sun_path, sizeof(un.sun_path), "%s", dead);
        ASSERT_EQ(bind(ufd, (struct sockaddr *) &un, sizeof(un)), 0);
        close(ufd);
        struct httpc_req req3 = { .url = "http://localhost/", .unix_socket = dead };
        ASSERT_EQ(httpc_do(&req3, &resp), -ECONNREFUSED);
}

TEST(invalid_requests) {
        struct httpc_resp resp = {};
        const char *bad[] = { "X-A: b\r\nX-Injected: 1", NULL };
        struct httpc_req req = { .url = "http://127.0.0.1:1/", .headers = bad };
        ASSERT_EQ(httpc_do(&req, &resp), -EINVAL);
        struct httpc_req req2 = { .url = "http://127.0.0.1:1/", .method = "GET /x" };
        ASSERT_EQ(httpc_do(&req2, &resp), -EINVAL);
        struct httpc_req req3 = { .url = "file:///etc/passwd" };
        ASSERT_EQ(httpc_do(&req3, &resp), -EINVAL);
}

struct stream_ctx {
        size_t got, calls, abort_after;
        bool pattern_ok;
};

static int on_data(const void *data, size_t len, void *ud) {
        struct stream_ctx *c = ud;
        const char *p = data;
        for (size_t i = 0; i < len; i++)
                if (p[i] != (char) ('a' + (c->got + i) % 26))
                        c->pattern_ok = false;
        c->got += len;
        c->calls++;
        if (c->abort_after && c->calls >= c->abort_after)
                return -ECANCELED;
        return 0;
}

TEST(streaming_and_abort) {
        struct server s;
        _cleanup_free_ char *u = server_start(&s, "/big");

        struct stream_ctx c = { .pattern_ok = true };
        /* max_response does not apply to streamed bodies */
        struct httpc_req req = { .url = u, .max_response = 10, .on_data = on_data, .userdata = &c };
        struct httpc_resp resp = {};
        ASSERT_OK(httpc_do(&req, &resp));
        ASSERT_EQ(resp.status, 200);
        ASSERT_EQ(c.got, BIG_LEN);
        ASSERT_TRUE(c.pattern_ok);
        ASSERT_EQ(resp.body_len, 0);
        ASSERT_STREQ(resp.body, "");
        httpc_resp_done(&resp);

        struct stream_ctx c2 = { .pattern_ok = true, .abort_after = 1 };
        struct httpc_req req2 = { .url = "http://localhost/big", .unix_socket = s.sock, .on_data = on_data, .userdata = &c2 };
        ASSERT_EQ(httpc_do(&req2, &resp), -ECANCELED);
        ASSERT_EQ(c2.calls, 1);
        ASSERT_TRUE(c2.got < BIG_LEN);
        server_stop(&s);
}

TEST(escape) {
        _cleanup_free_ char *a = httpc_escape("abc-._~XYZ09");
        ASSERT_STREQ(a, "abc-._~XYZ09");
        _cleanup_free_ char *b = httpc_escape("{\"label\":[\"a=b c\"]}/&?#%\n");
        ASSERT_STREQ(b, "%7B%22label%22%3A%5B%22a%3Db%20c%22%5D%7D%2F%26%3F%23%25%0A");
        _cleanup_free_ char *c = httpc_escape("");
        ASSERT_STREQ(c, "");
        _cleanup_free_ char *d = httpc_escape("\xc3\xa9");
        ASSERT_STREQ(d, "%C3%A9");
}
