/* HTTP-level tests of the controld public API's edges: 404/405/413, ids, query parameters,
 * pagination, envelopes and request ids; /healthz and /metrics; hostile bodies never crash the
 * daemon. Runs a real controld against the real dockerd + gVisor.
 *
 * Each test's struct ctld is static: the harness's exit hook (ctld_stop) runs from exit()
 * after the test function has returned, so a stack struct would be read after its frame is
 * gone (garbage dir/pid/failed_exit: leaked containers, spurious failures).
 *
 * Tests that document bugs open at the time of writing (they fail until controld is fixed):
 * percent_encoded_nul_does_not_truncate_the_path (%00 cuts the routed path short). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agenttest.h"
#include "apitest.h"
#include "cleanup.h"
#include "ctltest.h"
#include "amqptest.h"
#include "testlib.h"

/* Raw request keeping every response header (for Allow and friends). */
struct rawres { long status; char headers[8192]; size_t hlen; char body[8192]; size_t blen; };
static void http_raw(struct ctld *c, const char *method, const char *path, const char *const *headers, const void *body,
                     size_t len, struct rawres *ret) {
        struct hres h;
        http_req_full(c, method, path, headers, body, len, &h);
        memset(ret, 0, sizeof(*ret));
        ret->status = h.status;
        ret->hlen = strlen(strncpy(ret->headers, h.headers ? h.headers : "", sizeof(ret->headers) - 1));
        ret->blen = strlen(strncpy(ret->body, h.body, sizeof(ret->body) - 1));
        hres_done(&h);
}

static bool daemon_alive(struct ctld *c) {
        return c->pid > 0 && waitpid(c->pid, NULL, WNOHANG) == 0 && kill(c->pid, 0) == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* 3. HTTP edges.                                                                              */

/* A JSON text of exactly n bytes: open, spaces, close (the caller frees it). */
static char *padded_json(char open, char close, size_t n) {
        char *b = xmalloc(n + 1);
        memset(b, ' ', n);
        b[0] = open;
        b[n - 1] = close;
        b[n] = 0;
        return b;
}

TEST(http_unknown_route_wrong_method_and_body_limit) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        struct rawres x;
        need_docker();
        ctld_start(&c, "max_body = 1K", NULL);
        char acc[25];
        _cleanup_free_ char *key = ctld_account_key(&c, "edges", NULL, acc);
        char kh[256];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", key);

        EXPECT_ERROR(&c, "GET", "/nope", key, NULL, 404, "No route for GET /nope");
        http_req(&c, "GET", "/sandboxes/" UNKNOWN_HEX "/frobnicate", key, NULL, &r);
        ASSERT_ERROR_PREFIX(&r, 404, "No route for GET /sandboxes/");
        hres_done(&r);

        /* 405 with Allow, as JSON. */
        const struct { const char *method, *path, *allow; } m[] = {
                { "PUT", "/sandboxes", "GET, POST" },
                { "PATCH", "/sandboxes/" UNKNOWN_HEX, "GET, DELETE" },
                { "GET", "/sandboxes/" UNKNOWN_HEX "/pause", "POST" },
                { "DELETE", "/sandbox/templates", "GET" },
                { "POST", "/sandboxes/regions", "GET" },
                { "PUT", "/volumes", "GET, POST" },
                { "POST", "/sandboxes/" UNKNOWN_HEX "/wait", "GET" },
        };
        for (size_t i = 0; i < ELEMENTSOF(m); i++) {
                const char *h[] = { kh, NULL };
                http_raw(&c, m[i].method, m[i].path, h, NULL, 0, &x);
                if (x.status != 405)
                        test_fail(__FILE__, __LINE__, "%s %s -> %ld %s", m[i].method, m[i].path, x.status, x.body);
                char want[64];
                snprintf(want, sizeof(want), "Allow: %s\r\n", m[i].allow);
                if (!strcasestr(x.headers, want))
                        test_fail(__FILE__, __LINE__, "%s %s: no '%s' in headers:\n%s", m[i].method, m[i].path, m[i].allow,
                                  x.headers);
                ASSERT_TRUE(strcasestr(x.headers, "x-request-id: ") != NULL);
                ASSERT_TRUE(strcasestr(x.headers, "content-type: application/json") != NULL);
                cJSON *j = cJSON_Parse(x.body);
                ASSERT_TRUE(cJSON_IsString(jget(j, "message")));
                ASSERT_EQ(cJSON_GetArraySize(j), 1);
                cJSON_Delete(j);
        }

        /* Body over max_body (1 KiB): 413, with Content-Length and chunked; at the limit it is read. */
        _cleanup_free_ char *big = padded_json('{', '}', 2048);
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, big, 413, "Request body too large (limit 1024 bytes)");
        {
                const char *h[] = { kh, "Content-Type: application/json", "Transfer-Encoding: chunked", NULL };
                http_req_full(&c, "POST", "/sandboxes", h, big, 2048, &r);
                ASSERT_ERROR(&r, 413, "Request body too large (limit 1024 bytes)");
                hres_done(&r);
        }
        EXPECT_ERROR(&c, "POST", "/volumes", key, big, 413, "Request body too large (limit 1024 bytes)");
        _cleanup_free_ char *edge = padded_json('[', ']', 1024);
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, edge, 400, "Request body must be a JSON object");
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 0);
        /* The daemon still serves after refusing bodies. */
        HTTP_EXPECT(&c, "GET", "/healthz", NULL, NULL, 200);

        /* A client-chosen request id is echoed only when it is sane. */
        {
                const char *h[] = { kh, "x-request-id: bad id\"with<junk>", NULL };
                http_req_full(&c, "GET", "/sandboxes", h, NULL, 0, &r);
                ASSERT_EQ(r.status, 200);
                ASSERT_EQ(strlen(r.request_id), 24);
                ASSERT_TRUE(strstr(r.request_id, "junk") == NULL);
                hres_done(&r);
        }
}

/* JSON amplification: a small JSON body can cost controld many times its size in
 * memory, so JSON routes other than exec, code and batch upload take at most
 * max_json_body (default 256 KiB), from Content-Length and while reading a chunked
 * body; batch upload keeps max_body. */
TEST(http_json_routes_have_a_small_body_limit) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "amplify", NULL);
        char kh[256];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", key);

        /* {"name":[0,0,0,...]}: 1 MiB. */
        size_t n = 1024 * 1024;
        _cleanup_free_ char *big = xmalloc(n + 1);
        memcpy(big, "{\"name\":[", 9);
        for (size_t i = 9; i < n - 2; i += 2)
                memcpy(big + i, "0,", 2);
        memcpy(big + n - 3, "0]}", 3);
        big[n] = 0;
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, big, 413, "Request body too large (limit 262144 bytes)");
        {
                const char *h[] = { kh, "Content-Type: application/json", "Transfer-Encoding: chunked", NULL };
                http_req_full(&c, "POST", "/sandboxes", h, big, n, &r);
                ASSERT_ERROR(&r, 413, "Request body too large (limit 262144 bytes)");
                hres_done(&r);
                http_req_full(&c, "POST", "/volumes", h, big, n, &r);
                ASSERT_ERROR(&r, 413, "Request body too large (limit 262144 bytes)");
                hres_done(&r);
        }
        EXPECT_ERROR(&c, "PUT", "/sandboxes/" UNKNOWN_HEX "/egress", key, big, 413, "Request body too large (limit 262144 bytes)");
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 0);

        /* Batch upload keeps the large limit: the same body reaches its handler (and is
         * refused there as a bad batch, not as too large). */
        HTTP_EXPECT(&c, "POST", "/sandboxes/" UNKNOWN_HEX "/files/batch", key, big, 400);
}

TEST(http_ids_and_query_parameters_are_checked) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "ids", NULL);
        static const char *const bad_ids[] = {
                "xyz", "0123456789ABCDEF01234567", "0123456789abcdef012345678", "0123456789abcdef0123456", "%20",
        };
        static const struct { const char *method, *suffix; } ops[] = {
                { "GET", "" }, { "DELETE", "" }, { "POST", "/pause" }, { "POST", "/resume" }, { "GET", "/wait?timeout=1" },
                { "GET", "/stats" },
        };
        int bad = 0;
        for (size_t i = 0; i < ELEMENTSOF(bad_ids); i++)
                for (size_t k = 0; k < ELEMENTSOF(ops); k++) {
                        op(&c, key, ops[k].method, bad_ids[i], ops[k].suffix, &r);
                        const char *w = error_mismatch(&r, 400, "Invalid sandbox id", false);
                        if (w) {
                                fprintf(stderr, "  %s /sandboxes/%s%s: %s\n", ops[k].method, bad_ids[i], ops[k].suffix, w);
                                bad++;
                        }
                        hres_done(&r);
                }
        ASSERT_EQ(bad, 0);
        for (size_t k = 0; k < ELEMENTSOF(ops); k++) {
                op(&c, key, ops[k].method, UNKNOWN_HEX, ops[k].suffix, &r);
                if (error_mismatch(&r, 404, "Sandbox not found", false))
                        test_fail(__FILE__, __LINE__, "%s: %s", ops[k].suffix, error_mismatch(&r, 404, "Sandbox not found", false));
                hres_done(&r);
        }
        EXPECT_ERROR(&c, "GET", "/volumes/xyz", key, NULL, 400, "Invalid volume id");
        EXPECT_ERROR(&c, "DELETE", "/volumes/" UNKNOWN_HEX, key, NULL, 404, "Volume not found");
        EXPECT_ERROR(&c, "DELETE", "/sandboxes/snapshots/xyz", key, NULL, 400, "Invalid snapshot id");
        EXPECT_ERROR(&c, "DELETE", "/sandboxes/snapshots/" UNKNOWN_HEX, key, NULL, 404, "Snapshot not found");

        const struct { const char *path, *msg; } q[] = {
                { "/sandboxes?page=0", "page must be an integer >= 1" },
                { "/sandboxes?page=-3", "page must be an integer >= 1" },
                { "/sandboxes?page=abc", "page must be an integer >= 1" },
                { "/sandboxes?page=1.5", "page must be an integer >= 1" },
                { "/sandboxes?limit=101", "limit must be an integer between 1 and 100" },
                { "/sandboxes?limit=0", "limit must be an integer between 1 and 100" },
                { "/sandboxes?limit=abc", "limit must be an integer between 1 and 100" },
                { "/sandboxes?limit=", "limit must be an integer between 1 and 100" },
                { "/sandboxes?limit=99999999999999999999999", "limit must be an integer between 1 and 100" },
                { "/sandboxes?status=running", "status must be one of starting, ready, pausing, paused, resuming, failed, destroyed" },
                { "/volumes?limit=101", "limit must be an integer between 1 and 100" },
                { "/sandboxes/snapshots?page=0", "page must be an integer >= 1" },
                { "/sandboxes/" UNKNOWN_HEX "/wait?timeout=-1", "timeout must be an integer number of seconds between 0 and 300" },
                { "/sandboxes/" UNKNOWN_HEX "/wait?timeout=abc", "timeout must be an integer number of seconds between 0 and 300" },
                { "/sandboxes/" UNKNOWN_HEX "/wait?timeout=100000", "timeout must be an integer number of seconds between 0 and 300" },
                { "/sandboxes/" UNKNOWN_HEX "/wait?status=gone",
                  "status must be one of starting, ready, pausing, paused, resuming, failed, destroyed" },
                { "/sandboxes/" UNKNOWN_HEX "/stats?hoursAgo=0", "hoursAgo must be an integer between 1 and 720" },
                { "/sandboxes/" UNKNOWN_HEX "/stats?hoursAgo=721", "hoursAgo must be an integer between 1 and 720" },
        };
        for (size_t i = 0; i < ELEMENTSOF(q); i++) {
                http_req(&c, "GET", q[i].path, key, NULL, &r);
                const char *w = error_mismatch(&r, 400, q[i].msg, false);
                if (w) {
                        fprintf(stderr, "  GET %s: %s\n", q[i].path, w);
                        bad++;
                }
                hres_done(&r);
        }
        ASSERT_EQ(bad, 0);
}

TEST_FULL(pagination_math_order_and_envelopes, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char ids[3][25];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "pager", NULL);
        _cleanup_free_ char *other = ctld_account_key(&c, "pager-other", NULL, NULL);

        /* Empty list: zero pages. */
        http_req(&c, "GET", "/sandboxes", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Sandboxes fetched");
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 0);
        ASSERT_EQ(jint(data_of(&r), "totalPages"), 0);
        ASSERT_EQ(jint(data_of(&r), "currentPage"), 1);
        ASSERT_EQ(jint(data_of(&r), "limit"), 15);
        ASSERT_TRUE(cJSON_IsArray(jget(data_of(&r), "data")));
        ASSERT_EQ(cJSON_GetArraySize(jget(data_of(&r), "data")), 0);
        hres_done(&r);

        for (int i = 0; i < 3; i++) {
                char body[64];
                snprintf(body, sizeof(body), "{\"name\":\"box-%d\"}", i);
                ctld_create(&c, key, body, ids[i]);
                usleep(20000);
        }
        char oid[25];
        ctld_create(&c, other, NULL, oid);

        http_req(&c, "GET", "/sandboxes?limit=2", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Sandboxes fetched");
        const cJSON *d = data_of(&r);
        ASSERT_EQ(jint(d, "totalCount"), 3);
        ASSERT_EQ(jint(d, "totalPages"), 2);
        ASSERT_EQ(jint(d, "currentPage"), 1);
        ASSERT_EQ(jint(d, "limit"), 2);
        ASSERT_EQ(cJSON_GetArraySize(jget(d, "data")), 2);
        /* newest first */
        ASSERT_STREQ(jstr(cJSON_GetArrayItem(jget(d, "data"), 0), "id"), ids[2]);
        ASSERT_STREQ(jstr(cJSON_GetArrayItem(jget(d, "data"), 1), "id"), ids[1]);
        hres_done(&r);
        http_req(&c, "GET", "/sandboxes?limit=2&page=2", key, NULL, &r);
        d = data_of(&r);
        ASSERT_EQ(jint(d, "totalCount"), 3);
        ASSERT_EQ(jint(d, "totalPages"), 2);
        ASSERT_EQ(jint(d, "currentPage"), 2);
        ASSERT_EQ(cJSON_GetArraySize(jget(d, "data")), 1);
        ASSERT_STREQ(jstr(cJSON_GetArrayItem(jget(d, "data"), 0), "id"), ids[0]);
        ASSERT_STREQ(jstr(cJSON_GetArrayItem(jget(d, "data"), 0), "name"), "box-0");
        hres_done(&r);
        /* Past the end: empty page, same totals. */
        http_req(&c, "GET", "/sandboxes?limit=2&page=3", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 3);
        ASSERT_EQ(cJSON_GetArraySize(jget(data_of(&r), "data")), 0);
        hres_done(&r);
        /* Status filter counts through the same math. */
        http_req(&c, "GET", "/sandboxes?status=ready&limit=1", key, NULL, &r);
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 3);
        ASSERT_EQ(jint(data_of(&r), "totalPages"), 3);
        hres_done(&r);
        http_req(&c, "GET", "/sandboxes?status=paused", key, NULL, &r);
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 0);
        hres_done(&r);

        /* A Sandbox carries the fields clients read. */
        get_sandbox(&c, key, ids[0], &r);
        static const char *const fields[] = {
                "id", "name", "template", "status", "region", "specs", "auto_destroy", "one_shot", "block_outbound",
                "egress", "persistent", "snapshot_mode", "created_at", "expires_at", "destroyed_at",
        };
        for (size_t i = 0; i < ELEMENTSOF(fields); i++)
                if (!jget(data_of(&r), fields[i]))
                        test_fail(__FILE__, __LINE__, "sandbox lacks '%s': %s", fields[i], r.body);
        hres_done(&r);

        /* 204 on destroy carries a request id and no body. */
        op(&c, key, "DELETE", ids[0], "", &r);
        ASSERT_EQ(r.status, 204);
        ASSERT_EQ(r.len, 0);
        ASSERT_TRUE(r.request_id[0] != 0);
        hres_done(&r);
        /* Destroyed records stay listed (audit trail) unless filtered out. */
        http_req(&c, "GET", "/sandboxes?status=ready", key, NULL, &r);
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 2);
        hres_done(&r);

        /* Egress change and snapshots: validation first, then a clear 501. */
        op(&c, key, "GET", ids[1], "/snapshots", &r);
        ASSERT_ENVELOPE(&r, 200, "Snapshots fetched");
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 0);
        hres_done(&r);
        {
                char path[96];
                snprintf(path, sizeof(path), "/sandboxes/%s/egress", ids[1]);
                EXPECT_ERROR(&c, "PUT", path, key, "{\"mode\":\"restricted\"}", 400, "allow is required with at least one entry when mode is restricted (or rules naming the hosts allowed)");
                HTTP_EXPECT(&c, "PUT", path, key, "{\"mode\":\"deny_all\"}", 501);
        }
}

/* ------------------------------------------------------------------------------------------ */
/* 4. /healthz and /metrics.                                                                   */

static bool metrics_has(struct ctld *c, const char *needle, char **ret_text) {
        for (int i = 0; i < 40; i++) {
                struct hres r;
                http_req(c, "GET", "/metrics", NULL, NULL, &r);
                bool ok = r.status == 200 && strstr(r.body, needle);
                if (ok || i == 39) {
                        if (ret_text)
                                *ret_text = strdup(r.body);
                        hres_done(&r);
                        return ok;
                }
                hres_done(&r);
                usleep(50000);
        }
        return false;
}

TEST_FULL(healthz_and_metrics_without_auth, 90) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char id[25];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "observer", NULL);

        http_req(&c, "GET", "/healthz", NULL, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(jstr(r.json, "status"), "ok");
        ASSERT_STREQ(jstr(r.json, "driver"), "docker");
        ASSERT_TRUE(r.request_id[0] != 0);
        hres_done(&r);

        ctld_create(&c, key, NULL, id);
        get_sandbox(&c, key, id, &r);
        hres_done(&r);
        http_req(&c, "GET", "/sandboxes/" UNKNOWN_HEX, key, NULL, &r);
        hres_done(&r);

        _cleanup_free_ char *m = NULL;
        ASSERT_TRUE(metrics_has(&c, "paddock_http_requests_total{route=\"/sandboxes\",method=\"POST\",status=\"201\"} 1\n", &m));
        free(m);
        m = NULL;
        ASSERT_TRUE(metrics_has(&c, "route=\"/sandboxes/{id}\",method=\"GET\",status=\"404\"} 1\n", &m));
        ASSERT_CONTAINS(m, "# TYPE paddock_http_requests_total counter");
        ASSERT_CONTAINS(m, "route=\"/sandboxes/{id}\",method=\"GET\",status=\"200\"} 1\n");
        ASSERT_CONTAINS(m, "paddock_http_request_duration_seconds_bucket{route=\"/sandboxes\",le=\"+Inf\"} ");
        ASSERT_CONTAINS(m, "paddock_http_request_duration_seconds_bucket{route=\"/sandboxes\",le=\"0.005\"} ");
        ASSERT_CONTAINS(m, "paddock_sandboxes{status=\"ready\"} 1\n");
        ASSERT_CONTAINS(m, "paddock_sandboxes{status=\"destroyed\"} 0\n");
        ASSERT_CONTAINS(m, "paddock_provision_phase_seconds_count{phase=\"place\"} 1\n");
        ASSERT_CONTAINS(m, "paddock_provision_phase_seconds_count{phase=\"create_total\"} 1\n");
        /* Route labels are templates: ids never become label values (unbounded cardinality). */
        ASSERT_TRUE(strstr(m, id) == NULL);
        ASSERT_TRUE(strstr(m, UNKNOWN_HEX) == NULL);
        /* Unauthenticated /metrics has the Prometheus content type. */
        http_req(&c, "GET", "/metrics", NULL, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.content_type, "text/plain");
        hres_done(&r);
        /* Garbage paths land in one "unmatched" series, not one per path. */
        for (int i = 0; i < 5; i++) {
                char p[64];
                snprintf(p, sizeof(p), "/junk-%d", i);
                HTTP_EXPECT(&c, "GET", p, key, NULL, 404);
        }
        free(m);
        m = NULL;
        ASSERT_TRUE(metrics_has(&c, "route=\"unmatched\",method=\"GET\",status=\"404\"} 5\n", &m));
        ASSERT_TRUE(strstr(m, "junk") == NULL);
}

/* With [server] metrics_token_file, /metrics answers only the token (issue 24: the page
 * was open to anyone who reached the API port); a wrong or missing token is a 401 that
 * says what to send, and a token file that is too short keeps controld from starting. */
TEST_FULL(metrics_token_guards_the_page, 90) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char tok_path[512], server[600];
        snprintf(tok_path, sizeof(tok_path), "%s/metrics.token", test_tmpdir());
        FILE *f = fopen(tok_path, "w");
        ASSERT_NOT_NULL(f);
        fputs("m3tr1cs-t0ken-5f2a9d81c4e7\n", f);
        fclose(f);
        snprintf(server, sizeof(server), "metrics_token_file = %s\n", tok_path);
        ctld_start(&c, server, NULL);

        http_req(&c, "GET", "/metrics", NULL, NULL, &r);
        ASSERT_EQ(r.status, 401);
        ASSERT_CONTAINS(hres_message(&r), "Authorization: Bearer <token>");
        ASSERT_CONTAINS(r.headers, "Bearer realm=\"paddock-metrics\"");
        hres_done(&r);
        static const char *const wrong[] = { "m3tr1cs-t0ken-5f2a9d81c4e", "m3tr1cs-t0ken-5f2a9d81c4e7x", "", "nope" };
        for (size_t i = 0; i < ELEMENTSOF(wrong); i++) {
                char h[96];
                snprintf(h, sizeof(h), "Bearer %s", wrong[i]);
                http_req_keyed(&c, "GET", "/metrics", "Authorization", h, NULL, &r);
                ASSERT_EQ(r.status, 401);
                hres_done(&r);
        }
        http_req_keyed(&c, "GET", "/metrics", "Authorization", "Bearer m3tr1cs-t0ken-5f2a9d81c4e7", NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, "# TYPE paddock_http_requests_total counter");
        hres_done(&r);
        /* /healthz stays open for load balancers. */
        http_req(&c, "GET", "/healthz", NULL, NULL, &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        ctld_stop(&c);

        /* A token too short to be one: controld says so and does not start. */
        f = fopen(tok_path, "w");
        ASSERT_NOT_NULL(f);
        fputs("short\n", f);
        fclose(f);
        char log[600];
        snprintf(log, sizeof(log), "%s/short-token.log", test_tmpdir());
        const char *argv[] = { "controld", "-d", "-f", c.conf, NULL };
        pid_t p = test_spawn_logged(test_build_path("controld"), argv, log);
        int st = 0;
        pid_t w = 0;
        for (int i = 0; i < 600 && w == 0; i++) {
                w = waitpid(p, &st, WNOHANG);
                if (w == 0)
                        usleep(50000);
        }
        if (w == 0) {
                kill(p, SIGKILL);
                waitpid(p, NULL, 0);
        }
        ASSERT_EQ(w, p);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 0);
        _cleanup_free_ char *out = NULL;
        char *cat[] = { "cat", log, NULL };
        ASSERT_EQ(test_run_capture(cat, &out, 1 << 20), 0);
        ASSERT_CONTAINS(out, "metrics_token_file");
}

/* ------------------------------------------------------------------------------------------ */
/* 10. Hostile input never crashes the daemon.                                                 */

TEST_FULL(hostile_bodies_never_crash, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char acc[25];
        need_docker();
        ctld_start(&c, "max_body = 1K", NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "fuzzer", NULL, acc);
        char kh[256];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", key);
        const char *h[] = { kh, "Content-Type: application/json", NULL };

        unsigned seed = test_seed((unsigned) time(NULL));
        srandom(seed);
        static uint8_t buf[2048];
        int bad = 0;
        for (int i = 0; i < 200; i++) {
                size_t n = 1 + (size_t) random() % sizeof(buf);
                for (size_t k = 0; k < n; k++)
                        buf[k] = (uint8_t) random();
                if (i % 4 == 0)
                        buf[0] = '{'; /* get past the first byte more often */
                http_req_full(&c, "POST", "/sandboxes", h, buf, n, &r);
                if (r.status != 400 && r.status != 413) {
                        fprintf(stderr, "  seed %u body %d (%zu bytes) -> %ld %.200s\n", seed, i, n, r.status, r.body);
                        bad++;
                } else if (!hres_message(&r) || cJSON_GetArraySize(r.json) != 1) {
                        fprintf(stderr, "  seed %u body %d: error is not {message}: %.200s\n", seed, i, r.body);
                        bad++;
                } else if (r.status == 413 && n <= 1024) {
                        fprintf(stderr, "  seed %u body %d: 413 for %zu bytes\n", seed, i, n);
                        bad++;
                }
                hres_done(&r);
        }
        /* Crafted nasties. */
        static const struct { const char *b; size_t n; } nasty[] = {
                { "{\"name\":\"a\0b\"}", 13 },
                { "{\"name\":\"\\u0000\"}", 17 },
                { "{\"name\":\"\\ud800\"}", 17 },
                { "{\"name\":\"\xc0\xaf\"}", 13 },
                { "{\"name\":\"\xed\xa0\x80\"}", 14 },
                { "\xef\xbb\xbf{}", 5 },
                { "{\"specs\":{\"cpu\":1e999999}}", 26 },
                { "{\"specs\":{\"cpu\":-0}}", 20 },
                { "{\"\":1}", 6 },
                { "{\"name\":\"x\"}\0", 13 },
                { "{/*c*/}", 7 },
                { "{\"a\":tru}", 9 },
                { "{\"specs\":{\"cpu\":01}}", 20 },
        };
        for (size_t i = 0; i < ELEMENTSOF(nasty); i++) {
                http_req_full(&c, "POST", "/sandboxes", h, nasty[i].b, nasty[i].n, &r);
                if (r.status != 400) {
                        fprintf(stderr, "  nasty %zu -> %ld %.200s\n", i, r.status, r.body);
                        bad++;
                }
                hres_done(&r);
        }
        /* Deep nesting within the body limit. */
        char deep[1024];
        memset(deep, '[', sizeof(deep));
        http_req_full(&c, "POST", "/sandboxes", h, deep, sizeof(deep), &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_CONTAINS(hres_message(&r), "nesting");
        hres_done(&r);
        memset(deep, '{', 1);
        for (size_t i = 1; i + 6 < sizeof(deep); i += 5)
                memcpy(deep + i, "\"a\":{", 5);
        http_req_full(&c, "POST", "/sandboxes", h, deep, sizeof(deep) - 4, &r);
        ASSERT_EQ(r.status, 400);
        hres_done(&r);
        /* Hostile paths and headers. */
        {
                const char *hh[] = { kh, "x-request-id: \x01\x02", NULL };
                http_req_full(&c, "GET", "/sandboxes/../../etc/passwd", hh, NULL, 0, &r);
                if (r.status != 400 && r.status != 404)
                        test_fail(__FILE__, __LINE__, "traversal path -> %ld %s", r.status, r.body);
                hres_done(&r);
        }
        {
                static char longpath[6000];
                memcpy(longpath, "/sandboxes/", 11);
                memset(longpath + 11, 'a', sizeof(longpath) - 12);
                http_req(&c, "GET", longpath, key, NULL, &r);
                if (r.status < 400 || r.status >= 500)
                        test_fail(__FILE__, __LINE__, "6000-byte path -> %ld %.200s", r.status, r.body);
                hres_done(&r);
        }
        ASSERT_EQ(bad, 0);
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 0);
        _cleanup_free_ char *ps = account_containers(acc);
        ASSERT_STREQ(ps, "");
        HTTP_EXPECT(&c, "GET", "/healthz", NULL, NULL, 200);
        ASSERT_TRUE(daemon_alive(&c));
}

/* A percent-encoded NUL must not cut the path short: "/sandboxes/ID%00/snapshots" is not
 * "/sandboxes/ID" (that would turn a DELETE of something else into destroying the sandbox),
 * and "/sandboxes%00junk" is not "/sandboxes". */
TEST_FULL(percent_encoded_nul_does_not_truncate_the_path, 90) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char id[25], path[128];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "nul-path", NULL, id);

        snprintf(path, sizeof(path), "/sandboxes/%s%%00/snapshots", id);
        http_req(&c, "DELETE", path, key, NULL, &r);
        long st = r.status;
        hres_done(&r);
        get_sandbox(&c, key, id, &r);
        const char *now = jstr(data_of(&r), "status");
        if (!now || strcmp(now, "ready") != 0)
                test_fail(__FILE__, __LINE__, "DELETE %s answered %ld and the sandbox is now %s", path, st, now ? now : "?");
        hres_done(&r);
        ASSERT_TRUE(st == 400 || st == 404);
        ASSERT_TRUE(docker_container_running(container_name(id)));

        http_req(&c, "POST", "/sandboxes%00junk", key, "{}", &r);
        st = r.status;
        hres_done(&r);
        if (st != 400 && st != 404)
                test_fail(__FILE__, __LINE__, "POST /sandboxes%%00junk answered %ld", st);
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 1);
}

/* Failed key guesses: auth_failures_per_minute wrong keys per address, then 429 with
 * Retry-After for any request with a key (a valid one too, so a guess learns nothing)
 * until a token refills. Valid keys never use up the bucket. */
TEST_FULL(wrong_key_guesses_are_rate_limited_per_address, 90) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct rawres x;
        need_docker();
        ctld_start(&c, "auth_failures_per_minute = 30", NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "guesses", NULL, NULL);
        char kh[256];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", key);
        const char *good[] = { kh, NULL };
        const char *bad[] = { "x-brimble-key: pdk_wrongwrongwrongwrong", NULL };
        /* Valid keys, however many, take nothing from the bucket. */
        for (int i = 0; i < 40; i++) {
                http_raw(&c, "GET", "/sandboxes", good, NULL, 0, &x);
                ASSERT_EQ(x.status, 200);
        }
        for (int i = 0; i < 30; i++) {
                http_raw(&c, "GET", "/sandboxes", bad, NULL, 0, &x);
                ASSERT_EQ(x.status, 401);
        }
        http_raw(&c, "GET", "/sandboxes", bad, NULL, 0, &x);
        ASSERT_EQ(x.status, 429);
        ASSERT_CONTAINS(x.body, "wrong API key");
        const char *ra = strcasestr(x.headers, "\nRetry-After: ");
        ASSERT_TRUE(ra != NULL);
        long secs = atol(ra + 14);
        ASSERT_TRUE(secs >= 1 && secs <= 3);  /* 30 a minute: one token every 2 s */
        /* The limited address gets 429 even with the right key: no oracle. */
        http_raw(&c, "GET", "/sandboxes", good, NULL, 0, &x);
        ASSERT_EQ(x.status, 429);
        /* Requests without a key are not guesses: still the plain 401. */
        http_raw(&c, "GET", "/sandboxes", NULL, NULL, 0, &x);
        ASSERT_EQ(x.status, 401);
        /* After Retry-After, one more try is allowed, and the valid key works again. */
        sleep((unsigned) secs);
        http_raw(&c, "GET", "/sandboxes", good, NULL, 0, &x);
        ASSERT_EQ(x.status, 200);
        http_raw(&c, "GET", "/sandboxes", bad, NULL, 0, &x);
        ASSERT_EQ(x.status, 401);
        http_raw(&c, "GET", "/sandboxes", bad, NULL, 0, &x);
        ASSERT_EQ(x.status, 429);
}
