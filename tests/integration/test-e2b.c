/* test-e2b.c — E2B's API as E2B's users meet it (issue 21). First E2B's own SDK (npm `e2b`,
 * tests/e2b/sdk.mjs) runs a whole session against Paddock configured by environment only;
 * then raw HTTP checks what the SDK never sends: wrong keys and tokens, another account's
 * sandbox, refused fields named, bad Connect envelopes, a port outside 1-65535, Host routing
 * under the domain, paging, and the same sandbox seen and destroyed through the Brimble API. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "runtimetest.h"
#include "strutil.h"
#include "testlib.h"
#include "tlstest.h"

static void free_ptr(void *p) { free(p); }

struct e2b {
        struct ctld c;
        int port;
        char *key, *key_bob;
};

static char *admin_e2b_key(struct ctld *c, const char *name) {
        _cleanup_free_ char *acc = NULL;
        char *key = NULL;
        ASSERT_EQ(ctld_admin(c, &acc, "account", "create", name, NULL), 0);
        acc[strcspn(acc, "\n")] = 0;
        ASSERT_EQ(ctld_admin(c, &key, "key", "issue", acc, "--e2b", NULL), 0);
        key[strcspn(key, "\n")] = 0;
        ASSERT_EQ(strlen(key), 44);
        ASSERT_TRUE(strncmp(key, "e2b_", 4) == 0);
        return key;
}

static void e2b_start_with(struct e2b *e, const char *more) {
        need_docker();
        if (!e->port)
                e->port = test_free_port();
        char extra[1024];
        snprintf(extra, sizeof(extra), "[e2b]\nlisten = 127.0.0.1:%d\nbase_template = python-3.11\n%s", e->port, more ? more : "");
        ctld_start(&e->c, NULL, extra);
        e->key = admin_e2b_key(&e->c, "alice");
        e->key_bob = admin_e2b_key(&e->c, "bob");
        test_on_exit(free_ptr, e->key);
        test_on_exit(free_ptr, e->key_bob);
}

static void e2b_start(struct e2b *e) {
        e2b_start_with(e, NULL);
}

/* A request with a JSON (or any) body and extra header lines ("K: V\r\n..."). */
static char *req(struct e2b *e, const char *method, const char *path, const char *headers, const char *ctype, const void *body,
                 size_t len) {
        _cleanup_free_ char *head = xasprintf("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s%s%s%s"
                                              "Content-Length: %zu\r\n\r\n",
                                              method, path, e->port, headers ? headers : "", ctype ? "Content-Type: " : "",
                                              ctype ? ctype : "", ctype ? "\r\n" : "", len);
        return test_raw_http(e->port, head, body, len);
}

static char *api(struct e2b *e, const char *method, const char *path, const char *key, const char *json) {
        _cleanup_free_ char *h = key ? xasprintf("X-API-Key: %s\r\n", key) : xstrdup("");
        return req(e, method, path, h, json ? "application/json" : NULL, json, json ? strlen(json) : 0);
}

#define EXPECT(resp, status, needle)                                                                                    \
        do {                                                                                                            \
                _cleanup_free_ char *_r = (resp);                                                                       \
                if (test_raw_status(_r) != (status) || !strstr(test_raw_body(_r), (needle)))                                        \
                        test_fail(__FILE__, __LINE__, "want %d with \"%s\", got: %.600s", (status), (needle), _r);       \
        } while (0)

/* POST /sandboxes as key: the new id and envd token. */
static void create(struct e2b *e, const char *key, const char *body, char id[25], char token[65]) {
        _cleanup_free_ char *r = api(e, "POST", "/sandboxes", key, body);
        if (test_raw_status(r) != 201)
                test_fail(__FILE__, __LINE__, "create -> %.600s", r);
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(r));
        ASSERT_NOT_NULL(o);
        snprintf(id, 25, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "sandboxID")));
        snprintf(token, 65, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "envdAccessToken")));
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(o, "envdVersion")), "0.5.7");
        ASSERT_EQ(strlen(id), 24);
        ASSERT_EQ(strlen(token), 64);
}

/* A Connect call to envd of id: unary (application/json) or a stream (one envelope). */
static char *envd(struct e2b *e, const char *id, const char *token, const char *method, bool stream, const void *msg, size_t len) {
        _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\n%s%s%sConnect-Protocol-Version: 1\r\n", id,
                                           token ? "X-Access-Token: " : "", token ? token : "", token ? "\r\n" : "");
        _cleanup_free_ char *path = xasprintf("/%s", method);
        if (!stream)
                return req(e, "POST", path, h, "application/json", msg, len);
        uint8_t *b = xmalloc(len + 5);
        b[0] = 0;
        b[1] = (uint8_t) (len >> 24), b[2] = (uint8_t) (len >> 16), b[3] = (uint8_t) (len >> 8), b[4] = (uint8_t) len;
        memcpy(b + 5, msg, len);
        char *r = req(e, "POST", path, h, "application/connect+json", b, len + 5);
        free(b);
        return r;
}

/* E2B's own SDK, a whole session, configured by environment only (over TLS in controld when
 * tls is set: the SDK trusts the test's CA through NODE_EXTRA_CA_CERTS). */
/* dir: npm-e2b (the oldest SDK we support, 2.45.0) or npm-e2b-current (the pinned current one,
 * which creates and connects on /v2/sandboxes). */
static void sdk_session(const char *dir, bool tls) {
        _cleanup_free_ char *rel = xasprintf("%s/e2b-sdk.mjs", dir);
        const char *script = test_build_path(rel);
        if (access(script, R_OK) != 0)
                TEST_SKIP("build/npm-e2b*/e2b-sdk.mjs is missing (make tests installs the e2b packages and copies it)");
        _cleanup_free_ char *script_copy = xstrdup(script);
        struct e2b e = { 0 };
        struct tlstest t;
        char more[1024] = "";
        if (tls) {
                /* a wildcard certificate needs a domain of two labels at least (not *.localhost) */
                tlstest_make(&t, test_tmpdir(), "e2b", "IP:127.0.0.1,DNS:*.e2b.paddock.test");
                int port = test_free_port();
                snprintf(more, sizeof(more), "tls_cert = %s\ntls_key = %s\ndomain = e2b.paddock.test:%d\n", t.cert, t.key, port);
                e.port = port;
                setenv("NODE_EXTRA_CA_CERTS", t.ca, 1);
        }
        e2b_start_with(&e, more);
        char url[64], run[32];
        snprintf(url, sizeof(url), "%s://127.0.0.1:%d", tls ? "https" : "http", e.port);
        snprintf(run, sizeof(run), "run%d", (int) getpid());
        setenv("E2B_API_KEY", e.key, 1);
        setenv("E2B_API_URL", url, 1);
        setenv("E2B_SANDBOX_URL", url, 1);
        setenv("RUN_ID", run, 1);
        setenv("KEEP", "1", 1);
        /* its stderr too: an assertion's message is what a failure shows */
        char *argv[] = { "sh", "-c", "exec node \"$0\" 2>&1", script_copy, NULL };
        _cleanup_free_ char *out = NULL;
        int rc = test_run_capture(argv, &out, 1 << 20);
        fprintf(stderr, "%s", out ? out : "");
        if (rc != 0 || !strstr(out ? out : "", "ok kept"))
                test_fail(__FILE__, __LINE__, "the SDK session failed (exit %d)", rc);
        /* the same sandbox through the Brimble API: there, then destroyed there, gone here */
        const char *idl = strstr(out, "id ");
        ASSERT_NOT_NULL(idl);
        char id[25];
        snprintf(id, sizeof(id), "%.24s", idl + 3);
        char path[64];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        struct hres r;
        http_req(&e.c, "GET", path, e.key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(cJSON_GetStringValue(data_item(&r, "status")), "ready");
        hres_done(&r);
        HTTP_EXPECT(&e.c, "DELETE", path, e.key, NULL, 204);
        if (!tls)
                EXPECT(api(&e, "GET", path, e.key, NULL), 404, "not found");
}

TEST_FULL(e2b_sdk_session_oldest_supported, 600) {
        sdk_session("npm-e2b", false);
}

TEST_FULL(e2b_sdk_session_current, 600) {
        sdk_session("npm-e2b-current", false);
}

TEST_FULL(e2b_sdk_session_current_over_tls, 600) {
        sdk_session("npm-e2b-current", true);
}

/* Issue 35: a sandbox ends at its end, not up to a reap interval later. The full reap runs
 * once a minute here (PADDOCK_TEST_REAP_INTERVAL, read by ctld_start), so only the end-time
 * check can end it in time; the bound leaves room
 * for a slow machine (seconds), far below the minute the old reaper took. */
TEST_FULL(a_sandbox_ends_at_its_timeout, 120) {
        struct e2b e = { 0 };
        setenv("PADDOCK_TEST_REAP_INTERVAL", "60s", 1);   /* the config the test's controld gets */
        e2b_start_with(&e, NULL);
        unsetenv("PADDOCK_TEST_REAP_INTERVAL");
        char id[25], tok[65];
        create(&e, e.key, "{\"templateID\":\"base\",\"timeout\":2}", id, tok);
        int64_t t0 = mono_ms();
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s", id);
        const char *st = ctld_wait_status(&e.c, e.key, id, "destroyed", 60);
        ASSERT_STREQ(st, "destroyed");
        int64_t took = mono_ms() - t0;
        if (took > 2000 + 6000)
                test_fail(__FILE__, __LINE__, "the sandbox ended %lld ms after its 2 s timeout", (long long) (took - 2000));
        struct hres r;
        http_req(&e.c, "GET", path, e.key, NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "destroy_reason"), "max_lifetime");
        hres_done(&r);
        EXPECT(api(&e, "GET", path, e.key, NULL), 404, "not found");
}

/* Issue 34: a sandbox made through the Brimble API has no E2B options, and its ports were open
 * to anyone through the E2B listener (Host <port>-<id>.<domain> or the E2b-Sandbox-* headers).
 * Only its owner's say-so (allowPublicTraffic at an E2B create) opens them; otherwise the
 * traffic token is needed, and without it not one byte of the server's answer comes back. */
TEST_FULL(brimble_sandbox_ports_need_the_traffic_token, 600) {
        struct e2b e = { 0 };
        e2b_start(&e);
        struct hres r;
        http_req(&e.c, "POST", "/sandboxes", e.key, "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}", &r);
        ASSERT_EQ(r.status, 201);
        char id[25];
        snprintf(id, sizeof(id), "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        /* a server on 8888 that answers a secret */
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s/processes", id);
        http_req(&e.c, "POST", path, e.key,
                 "{\"cmd\":\"mkdir -p /tmp/www && echo brimble-secret > /tmp/www/index.html && cd /tmp/www && exec python3 -m "
                 "http.server 8888 --bind 127.0.0.1\"}",
                 &r);
        ASSERT_EQ(r.status, 201);
        hres_done(&r);
        _cleanup_free_ char *tok_hdr = NULL;
        {
                /* its owner gets the traffic token from connect */
                _cleanup_free_ char *cpath = xasprintf("/sandboxes/%s/connect", id);
                _cleanup_free_ char *cr = api(&e, "POST", cpath, e.key, "{\"timeout\":300}");
                ASSERT_EQ(test_raw_status(cr), 200);
                _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(cr));
                const char *tt = cJSON_GetStringValue(cJSON_GetObjectItem(o, "trafficAccessToken"));
                ASSERT_NOT_NULL(tt);
                tok_hdr = xasprintf("e2b-traffic-access-token: %s\r\n", tt);
        }
        /* with the token: the server answers (waiting for it to listen) */
        char *got = NULL;
        for (int i = 0; i < 100; i++) {
                free(got);
                _cleanup_free_ char *h = xasprintf("GET / HTTP/1.1\r\nHost: 8888-%s.localhost:%d\r\n%sConnection: close\r\n\r\n",
                                                   id, e.port, tok_hdr);
                got = test_raw_http(e.port, h, NULL, 0);
                if (test_raw_status(got) == 200)
                        break;
                usleep(100000);
        }
        EXPECT(got, 200, "brimble-secret");
        /* without it, by Host and by the E2B headers: refused, and no byte of the server's */
        _cleanup_free_ char *h1 = xasprintf("GET / HTTP/1.1\r\nHost: 8888-%s.localhost:%d\r\nConnection: close\r\n\r\n", id, e.port);
        _cleanup_free_ char *a1 = test_raw_http(e.port, h1, NULL, 0);
        ASSERT_EQ(test_raw_status(a1), 403);
        ASSERT_NULL(strstr(a1, "brimble-secret"));
        _cleanup_free_ char *h2 = xasprintf("GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 8888\r\n"
                                            "Connection: close\r\n\r\n",
                                            e.port, id);
        _cleanup_free_ char *a2 = test_raw_http(e.port, h2, NULL, 0);
        ASSERT_EQ(test_raw_status(a2), 403);
        ASSERT_NULL(strstr(a2, "brimble-secret"));
        /* a wrong token, or another sandbox's, is no better */
        _cleanup_free_ char *h3 = xasprintf("GET / HTTP/1.1\r\nHost: 8888-%s.localhost:%d\r\ne2b-traffic-access-token: %064d\r\n"
                                            "Connection: close\r\n\r\n",
                                            id, e.port, 0);
        _cleanup_free_ char *a3 = test_raw_http(e.port, h3, NULL, 0);
        ASSERT_EQ(test_raw_status(a3), 403);
        ASSERT_NULL(strstr(a3, "brimble-secret"));
        /* the E2B view says so too */
        _cleanup_free_ char *gpath = xasprintf("/sandboxes/%s", id);
        EXPECT(api(&e, "GET", gpath, e.key, NULL), 200, "\"allowPublicTraffic\":false");
        /* and a sandbox whose owner made it public through E2B stays reachable without one */
        char pid2[25], ptok[65];
        create(&e, e.key, "{\"templateID\":\"base\",\"timeout\":300,\"network\":{\"allowPublicTraffic\":true}}", pid2, ptok);
        _cleanup_free_ char *h4 = xasprintf("GET / HTTP/1.1\r\nHost: 8000-%s.localhost:%d\r\nConnection: close\r\n\r\n", pid2, e.port);
        EXPECT(test_raw_http(e.port, h4, NULL, 0), 502, "Nothing is listening on port 8000");
}

TEST_FULL(e2b_refusals_and_routing, 600) {
        struct e2b e = { 0 };
        e2b_start(&e);
        /* keys */
        EXPECT(api(&e, "GET", "/v2/sandboxes", NULL, NULL), 401, "\"code\":401");
        EXPECT(api(&e, "GET", "/v2/sandboxes", "e2b_0000000000000000000000000000000000000000", NULL), 401, "Invalid API key");
        EXPECT(api(&e, "GET", "/health", NULL, NULL), 204, "");
        /* bodies: the field at fault named, never ignored */
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{}"), 400, "templateID is required");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"colour\":1}"), 400, "Unknown field 'colour'");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"autoPause\":true}"), 400, "autoPause");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"secure\":false}"), 400, "secure");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"mcp\":{}}"), 400, "mcp");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"nope\"}"), 400, "templateID: no template");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"timeout\":99999999}"), 400, "timeout");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"envVars\":{\"1x\":\"y\"}}"), 400, "envVars.1x");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"network\":{\"denyOut\":[\"10.0.0.0/8\"]}}"), 400,
               "network.denyOut[0]");
        EXPECT(api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"network\":{\"maskRequestHost\":\"x\"}}"), 400,
               "network.maskRequestHost");

        /* v2 (SDK 2.51+): the same body checks on /v2/sandboxes, and its connect takes {} */
        EXPECT(api(&e, "POST", "/v2/sandboxes", e.key, "{}"), 400, "templateID is required");
        EXPECT(api(&e, "POST", "/v2/sandboxes", e.key, "{\"templateID\":\"base\",\"network\":{\"httpsPorts\":[443]}}"), 400,
               "network.httpsPorts");
        EXPECT(api(&e, "POST", "/v2/sandboxes/0123456789abcdef01234567/connect", e.key, "{}"), 404, "not found");
        char id[25], tok[65], id2[25], tok2[65];
        create(&e, e.key, "{\"templateID\":\"base\",\"timeout\":300,\"metadata\":{\"k\":\"one\"}}", id, tok);
        create(&e, e.key, "{\"templateID\":\"base\",\"timeout\":300,\"metadata\":{\"k\":\"two\"},"
                          "\"network\":{\"allowPublicTraffic\":false}}",
               id2, tok2);
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        /* another account: not found, not destroyable */
        EXPECT(api(&e, "GET", path, e.key_bob, NULL), 404, "not found");
        EXPECT(api(&e, "DELETE", path, e.key_bob, NULL), 404, "not found");
        EXPECT(api(&e, "GET", "/sandboxes/not-a-paddock-id", e.key, NULL), 404, "");
        EXPECT(api(&e, "GET", path, e.key, NULL), 200, "\"state\":\"running\"");
        /* paging: one at a time, newest first, with X-Next-Token */
        {
                _cleanup_free_ char *p1 = api(&e, "GET", "/v2/sandboxes?limit=1", e.key, NULL);
                ASSERT_EQ(test_raw_status(p1), 200);
                ASSERT_NOT_NULL(strstr(test_raw_body(p1), id2));
                ASSERT_NOT_NULL(strcasestr(p1, "X-Next-Token: 1"));
                _cleanup_free_ char *p2 = api(&e, "GET", "/v2/sandboxes?limit=1&nextToken=1", e.key, NULL);
                ASSERT_NOT_NULL(strstr(test_raw_body(p2), id));
                ASSERT_NULL(strcasestr(p2, "X-Next-Token"));
                EXPECT(api(&e, "GET", "/v2/sandboxes?metadata=k%3Dtwo", e.key, NULL), 200, id2);
                _cleanup_free_ char *p3 = api(&e, "GET", "/v2/sandboxes?metadata=k%3Dtwo", e.key, NULL);
                ASSERT_NULL(strstr(test_raw_body(p3), id));
                EXPECT(api(&e, "GET", "/v2/sandboxes?limit=0", e.key, NULL), 400, "limit");
                EXPECT(api(&e, "GET", "/v2/sandboxes?state=frozen", e.key, NULL), 400, "state");
                EXPECT(api(&e, "GET", "/v2/sandboxes", e.key_bob, NULL), 200, "[]");
        }
        /* envd: the token, the sandbox's own and no other */
        static const char stat_tmp[] = "{\"path\":\"/tmp\"}";
        EXPECT(envd(&e, id, NULL, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 401, "unauthenticated");
        EXPECT(envd(&e, id, tok2, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 401, "not this sandbox's");
        EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 200, "FILE_TYPE_DIRECTORY");
        static const char extra_field[] = "{\"path\":\"/tmp\",\"extra\":1}";
        EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, extra_field, strlen(extra_field)), 400,
               "Unknown field 'extra'");
        EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":", 8), 400, "invalid_argument");
        EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Nope", false, "{}", 2), 404, "No such envd endpoint");
        {
                /* StreamInput (client streaming): start, then data, in one body; the process was
                 * started through the Brimble API, the same sandbox */
                struct hres pr;
                char ppath[96];
                snprintf(ppath, sizeof(ppath), "/sandboxes/%s/processes", id);
                http_req(&e.c, "POST", ppath, e.key, "{\"cmd\":\"head -c 6 > /tmp/si.txt\",\"stdin\":true}", &pr);
                ASSERT_EQ(pr.status, 201);
                long pid = (long) data_int(&pr, "pid");
                hres_done(&pr);
                _cleanup_free_ char *m1 = xasprintf("{\"start\":{\"process\":{\"pid\":%ld}}}", pid);
                static const char m2[] = "{\"data\":{\"input\":{\"stdin\":\"Zmlyc3Qt\"}}}";  /* "first-" */
                struct strbuf b;
                strbuf_init(&b, 0);
                const char *msgs[] = { m1, m2 };
                for (size_t i = 0; i < 2; i++) {
                        uint32_t n = (uint32_t) strlen(msgs[i]);
                        uint8_t h[5] = { 0, (uint8_t) (n >> 24), (uint8_t) (n >> 16), (uint8_t) (n >> 8), (uint8_t) n };
                        strbuf_append(&b, h, 5);
                        strbuf_append(&b, msgs[i], n);
                }
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, tok);
                {
                        _cleanup_free_ char *si = req(&e, "POST", "/process.Process/StreamInput", h, "application/connect+json",
                                                      b.buf, b.len);
                        ASSERT_EQ(test_raw_status(si), 200);
                        /* a message {} and the end of the stream {} */
                        ASSERT_TRUE(!strcmp(test_raw_body(si), "....\x02{}\x02...\x02{}"));
                }
                /* data before start is refused */
                EXPECT(req(&e, "POST", "/process.Process/StreamInput", h, "application/connect+json", b.buf + 5 + strlen(m1),
                           b.len - 5 - strlen(m1)),
                       200, "only it, is start");
                strbuf_done(&b);
                char *got = NULL;
                for (int i = 0; i < 50; i++) {
                        free(got);
                        got = req(&e, "GET", "/files?path=/tmp/si.txt", h, NULL, NULL, 0);
                        if (strstr(test_raw_body(got), "first-"))
                                break;
                        usleep(100000);
                }
                EXPECT(got, 200, "first-");
        }
        {
                /* the polled watchers (the sync Python SDK's watch_dir) */
                static const char mk[] = "{\"path\":\"/tmp/pw\"}", cw[] = "{\"path\":\"/tmp/pw\",\"recursive\":false}";
                EXPECT(envd(&e, id, tok, "filesystem.Filesystem/MakeDir", false, mk, strlen(mk)), 200, "FILE_TYPE_DIRECTORY");
                _cleanup_free_ char *w = envd(&e, id, tok, "filesystem.Filesystem/CreateWatcher", false, cw, strlen(cw));
                ASSERT_EQ(test_raw_status(w), 200);
                _cleanup_(cJSON_Deletep) cJSON *wo = cJSON_Parse(test_raw_body(w));
                const char *wid = cJSON_GetStringValue(cJSON_GetObjectItem(wo, "watcherId"));
                ASSERT_NOT_NULL(wid);
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, tok);
                EXPECT(req(&e, "POST", "/files?path=/tmp/pw/seen.txt", h, "application/octet-stream", "x", 1), 200, "seen.txt");
                _cleanup_free_ char *poll_msg = xasprintf("{\"watcherId\":\"%s\"}", wid);
                char *ev = NULL;
                for (int i = 0; i < 50; i++) {
                        free(ev);
                        ev = envd(&e, id, tok, "filesystem.Filesystem/GetWatcherEvents", false, poll_msg, strlen(poll_msg));
                        ASSERT_EQ(test_raw_status(ev), 200);
                        if (strstr(test_raw_body(ev), "seen.txt"))
                                break;
                        usleep(100000);
                }
                EXPECT(ev, 200, "\"name\":\"seen.txt\",\"type\":\"EVENT_TYPE_CREATE\"");
                /* not another sandbox's: its token opens only its own watchers */
                EXPECT(envd(&e, id2, tok2, "filesystem.Filesystem/GetWatcherEvents", false, poll_msg, strlen(poll_msg)), 404,
                       "not found");
                EXPECT(envd(&e, id, tok, "filesystem.Filesystem/RemoveWatcher", false, poll_msg, strlen(poll_msg)), 200, "{}");
                EXPECT(envd(&e, id, tok, "filesystem.Filesystem/GetWatcherEvents", false, poll_msg, strlen(poll_msg)), 404,
                       "not found");
        }
        {
                /* Connect streams: an envelope claiming 3 MiB, a truncated one, two messages */
                static const char start[] = "{\"process\":{\"cmd\":\"/bin/echo\",\"args\":[\"hi\"]}}";
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, tok);
                uint8_t big[5 + 16] = { 0, 0, 0x30, 0, 0 };
                EXPECT(req(&e, "POST", "/process.Process/Start", h, "application/connect+json", big, sizeof(big)), 400,
                       "larger than the limit");
                uint8_t cut[5 + 10] = { 0, 0, 0, 0, 40, '{' };
                EXPECT(req(&e, "POST", "/process.Process/Start", h, "application/connect+json", cut, sizeof(cut)), 400, "truncated");
                EXPECT(req(&e, "POST", "/process.Process/Start", h, "application/proto", start, strlen(start)), 415,
                       "application/connect+json");
                static const char bogus[] = "{\"process\":{\"cmd\":\"x\"},\"bogus\":1}";
                EXPECT(envd(&e, id, tok, "process.Process/Start", true, bogus, strlen(bogus)), 200, "Unknown field 'bogus'");
                EXPECT(envd(&e, id, tok, "process.Process/Start", true, start, strlen(start)), 200, "\"stdout\":\"aGkK\"");
        }
        /* a port outside 1-65535, and the misdirected one on an envd connection */
        {
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 70000\r\n", id);
                EXPECT(req(&e, "GET", "/", h, NULL, NULL, 0), 400, "E2b-Sandbox-Port");
                _cleanup_free_ char *h0 = xasprintf("E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 0\r\n", id);
                EXPECT(req(&e, "GET", "/", h0, NULL, NULL, 0), 400, "E2b-Sandbox-Port");
        }
        /* Host routing under the domain: envd at 49983-<id>.localhost:<port>, another port forwarded */
        {
                _cleanup_free_ char *h = xasprintf("GET /health HTTP/1.1\r\nHost: 49983-%s.localhost:%d\r\nConnection: close\r\n\r\n", id,
                                                   e.port);
                EXPECT(test_raw_http(e.port, h, NULL, 0), 204, "");
                _cleanup_free_ char *h2 = xasprintf("GET / HTTP/1.1\r\nHost: 8000-%s.localhost:%d\r\nConnection: close\r\n\r\n", id,
                                                    e.port);
                EXPECT(test_raw_http(e.port, h2, NULL, 0), 502, "Nothing is listening on port 8000");
                /* not public: the traffic token is needed */
                _cleanup_free_ char *h3 = xasprintf("GET / HTTP/1.1\r\nHost: 8000-%s.localhost:%d\r\nConnection: close\r\n\r\n", id2,
                                                    e.port);
                EXPECT(test_raw_http(e.port, h3, NULL, 0), 403, "traffic access token");
                _cleanup_free_ char *h4 = xasprintf("GET / HTTP/1.1\r\nHost: 99999-%s.localhost:%d\r\nConnection: close\r\n\r\n", id,
                                                    e.port);
                EXPECT(test_raw_http(e.port, h4, NULL, 0), 400, "port");
        }
        /* v2 connect of a running sandbox: 200, an empty body is 300 s, never shortening it */
        {
                _cleanup_free_ char *cp = xasprintf("/v2/sandboxes/%s/connect", id);
                EXPECT(api(&e, "POST", cp, e.key, "{}"), 200, id);
                EXPECT(api(&e, "POST", cp, e.key, NULL), 200, id);
                EXPECT(api(&e, "POST", cp, e.key_bob, "{}"), 404, "not found");
                EXPECT(api(&e, "POST", cp, e.key, "{\"timeot\":1}"), 400, "timeot");
        }
        /* timeout: set, refused beyond the plan, and through the Brimble API the same record */
        snprintf(path, sizeof(path), "/sandboxes/%s/timeout", id);
        EXPECT(api(&e, "POST", path, e.key, "{\"timeout\":60}"), 204, "");
        EXPECT(api(&e, "POST", path, e.key, "{\"timeout\":-1}"), 400, "timeout");
        EXPECT(api(&e, "POST", path, e.key, "{}"), 400, "timeout is required");
        snprintf(path, sizeof(path), "/sandboxes/%s", id2);
        HTTP_EXPECT(&e.c, "DELETE", path, e.key, NULL, 204);
        EXPECT(api(&e, "GET", path, e.key, NULL), 404, "not found");
        EXPECT(envd(&e, id2, tok2, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 502, "not found");
        /* liveness (the SDK's isRunning): 502 with E2B's body once killed, 204 while running */
        {
                _cleanup_free_ char *h = xasprintf("GET /health HTTP/1.1\r\nHost: 49983-%s.localhost:%d\r\nConnection: close\r\n\r\n",
                                                   id2, e.port);
                EXPECT(test_raw_http(e.port, h, NULL, 0), 502, "\"sandboxId\":\"");
                _cleanup_free_ char *h2 = xasprintf("GET /health HTTP/1.1\r\nHost: 49983-%s.localhost:%d\r\nConnection: close\r\n\r\n",
                                                    id, e.port);
                EXPECT(test_raw_http(e.port, h2, NULL, 0), 204, "");
                _cleanup_free_ char *h3 = xasprintf("GET /health HTTP/1.1\r\nHost: 49983-%024d.localhost:%d\r\nConnection: close\r\n\r\n",
                                                    0, e.port);
                EXPECT(test_raw_http(e.port, h3, NULL, 0), 502, "not found");
        }
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        EXPECT(api(&e, "DELETE", path, e.key, NULL), 204, "");
        EXPECT(api(&e, "DELETE", path, e.key, NULL), 404, "not found");
}
