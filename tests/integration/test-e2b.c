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
#include "e2btest.h"
#include "runtimetest.h"
#include "strutil.h"
#include "testlib.h"
#include "tlstest.h"

/* E2B keys are shaped as E2B's own: "e2b_" and 40 characters more. */
static void assert_e2b_key_shape(const char *key) {
        ASSERT_EQ(strlen(key), 44);
        ASSERT_TRUE(strncmp(key, "e2b_", 4) == 0);
}

static void e2b_start_with(struct e2b *e, const char *more) {
        need_docker();
        if (!e->port)
                e->port = test_free_port();
        char extra[1024];
        snprintf(extra, sizeof(extra), "[e2b]\nlisten = 127.0.0.1:%d\nbase_template = python-3.11\n%s", e->port, more ? more : "");
        ctld_start(&e->c, NULL, extra);
        e2btest_keys(e);
        assert_e2b_key_shape(e->key);
        assert_e2b_key_shape(e->key_bob);
}

static void e2b_start(struct e2b *e) {
        e2b_start_with(e, NULL);
}

/* POST /sandboxes as key: the new id and envd token. */
static void create(struct e2b *e, const char *key, const char *body, char id[25], char token[65]) {
        e2btest_create(e, key, body, id, token);
        ASSERT_EQ(strlen(id), 24);
        ASSERT_EQ(strlen(token), 64);
}

/* A Connect call to envd of id: unary (application/json) or a stream (one envelope). */
static char *envd(struct e2b *e, const char *id, const char *token, const char *method, bool stream, const void *msg, size_t len) {
        return e2btest_envd(e, id, token, method, stream, msg, len, NULL);
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
        /* secrets need the operator's key */
        char keyp[512];
        snprintf(keyp, sizeof(keyp), "%s/secrets.key", test_tmpdir());
        FILE *kf = fopen(keyp, "w");
        ASSERT_NOT_NULL(kf);
        fputs("a test key of more than thirty-two bytes, as text\n", kf);
        fclose(kf);
        size_t ml = strlen(more);
        snprintf(more + ml, sizeof(more) - ml, "[secrets]\nkey_file = %s\n", keyp);
        e2b_start_with(&e, more);
        char url[64], run[32];
        snprintf(url, sizeof(url), "%s://127.0.0.1:%d", tls ? "https" : "http", e.port);
        snprintf(run, sizeof(run), "run%d", (int) getpid());
        setenv("RUN_ID", run, 1);
        setenv("KEEP", "1", 1);
        setenv("PADDOCK_DRIVER", ctld_nomad() ? "nomad" : "docker", 1);   /* what the server can pause with */
        _cleanup_free_ char *out = NULL;
        int rc = e2btest_sdk(&e, url, script_copy, &out);
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
                E2B_EXPECT(e2btest_api(&e, "GET", path, e.key, NULL), 404, "not found");
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
        E2B_EXPECT(e2btest_api(&e, "GET", path, e.key, NULL), 404, "not found");
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
                _cleanup_free_ char *cr = e2btest_api(&e, "POST", cpath, e.key, "{\"timeout\":300}");
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
                got = e2btest_host_get(&e, 8888, id, "/", tok_hdr);
                if (test_raw_status(got) == 200)
                        break;
                usleep(100000);
        }
        E2B_EXPECT(got, 200, "brimble-secret");
        /* without it, by Host and by the E2B headers: refused, and no byte of the server's */
        _cleanup_free_ char *a1 = e2btest_host_get(&e, 8888, id, "/", NULL);
        ASSERT_EQ(test_raw_status(a1), 403);
        ASSERT_NULL(strstr(a1, "brimble-secret"));
        _cleanup_free_ char *h2 = xasprintf("GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nE2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 8888\r\n"
                                            "Connection: close\r\n\r\n",
                                            e.port, id);
        _cleanup_free_ char *a2 = test_raw_http(e.port, h2, NULL, 0);
        ASSERT_EQ(test_raw_status(a2), 403);
        ASSERT_NULL(strstr(a2, "brimble-secret"));
        /* a wrong token, or another sandbox's, is no better */
        _cleanup_free_ char *h3 = xasprintf("e2b-traffic-access-token: %064d\r\n", 0);
        _cleanup_free_ char *a3 = e2btest_host_get(&e, 8888, id, "/", h3);
        ASSERT_EQ(test_raw_status(a3), 403);
        ASSERT_NULL(strstr(a3, "brimble-secret"));
        /* the E2B view says so too */
        _cleanup_free_ char *gpath = xasprintf("/sandboxes/%s", id);
        E2B_EXPECT(e2btest_api(&e, "GET", gpath, e.key, NULL), 200, "\"allowPublicTraffic\":false");
        /* and a sandbox whose owner made it public through E2B stays reachable without one */
        char pid2[25], ptok[65];
        create(&e, e.key, "{\"templateID\":\"base\",\"timeout\":300,\"network\":{\"allowPublicTraffic\":true}}", pid2, ptok);
        E2B_EXPECT(e2btest_host_get(&e, 8000, pid2, "/", NULL), 502, "Nothing is listening on port 8000");
}

TEST_FULL(e2b_refusals_and_routing, 600) {
        struct e2b e = { 0 };
        e2b_start(&e);
        /* keys */
        E2B_EXPECT(e2btest_api(&e, "GET", "/v2/sandboxes", NULL, NULL), 401, "\"code\":401");
        E2B_EXPECT(e2btest_api(&e, "GET", "/v2/sandboxes", "e2b_0000000000000000000000000000000000000000", NULL), 401, "Invalid API key");
        E2B_EXPECT(e2btest_api(&e, "GET", "/health", NULL, NULL), 204, "");
        /* bodies: the field at fault named, never ignored */
        static const char *const bad[][2] = {
                { "{}", "templateID is required" },
                { "{\"templateID\":\"base\",\"colour\":1}", "Unknown field 'colour'" },
                { "{\"templateID\":\"base\",\"autoResume\":{\"enabled\":true}}", "autoResume" },
                { "{\"templateID\":\"base\",\"secure\":false}", "secure" },
                { "{\"templateID\":\"base\",\"mcp\":{}}", "mcp" },
                { "{\"templateID\":\"nope\"}", "templateID: no template" },
                { "{\"templateID\":\"base\",\"timeout\":99999999}", "timeout" },
                { "{\"templateID\":\"base\",\"envVars\":{\"1x\":\"y\"}}", "envVars.1x" },
                { "{\"templateID\":\"base\",\"network\":{\"denyOut\":[\"10.0.0.0/8\"]}}", "network.denyOut[0]" },
                { "{\"templateID\":\"base\",\"network\":{\"maskRequestHost\":\"x\"}}", "network.maskRequestHost" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                E2B_EXPECT(e2btest_api(&e, "POST", "/sandboxes", e.key, bad[i][0]), 400, bad[i][1]);
        {
                /* an auto-pause keeps memory by default: for a sandbox with network access only on
                 * gVisor's own network stack (400 on host networking), never on the Nomad driver
                 * (501); a refusal at create names the field */
                _cleanup_free_ char *ap = e2btest_api(&e, "POST", "/sandboxes", e.key, "{\"templateID\":\"base\",\"autoPause\":true}");
                long st = test_raw_status(ap);
                if (!ctld_nomad() && ctld_netstack(&e.c)) {
                        if (st != 201 || !strstr(test_raw_body(ap), "\"sandboxID\""))
                                test_fail(__FILE__, __LINE__, "autoPause -> %.400s", ap);
                        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(ap));
                        _cleanup_free_ char *del = xasprintf("/sandboxes/%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "sandboxID")));
                        E2B_EXPECT(e2btest_api(&e, "DELETE", del, e.key, NULL), 204, "");
                } else if ((st != 400 && st != 501) || !strstr(test_raw_body(ap), "(autoPauseMemory on E2B's API): "))
                        test_fail(__FILE__, __LINE__, "autoPause -> %.400s", ap);
        }

        /* v2 (SDK 2.51+): the same body checks on /v2/sandboxes, and its connect takes {} */
        E2B_EXPECT(e2btest_api(&e, "POST", "/v2/sandboxes", e.key, "{}"), 400, "templateID is required");
        E2B_EXPECT(e2btest_api(&e, "POST", "/v2/sandboxes", e.key, "{\"templateID\":\"base\",\"network\":{\"httpsPorts\":[443]}}"), 400,
                   "network.httpsPorts");
        E2B_EXPECT(e2btest_api(&e, "POST", "/v2/sandboxes/0123456789abcdef01234567/connect", e.key, "{}"), 404, "not found");
        char id[25], tok[65], id2[25], tok2[65];
        create(&e, e.key, "{\"templateID\":\"base\",\"timeout\":300,\"metadata\":{\"k\":\"one\"}}", id, tok);
        create(&e, e.key, "{\"templateID\":\"base\",\"timeout\":300,\"metadata\":{\"k\":\"two\"},"
                          "\"network\":{\"allowPublicTraffic\":false}}",
               id2, tok2);
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        /* another account: not found, not destroyable */
        E2B_EXPECT(e2btest_api(&e, "GET", path, e.key_bob, NULL), 404, "not found");
        E2B_EXPECT(e2btest_api(&e, "DELETE", path, e.key_bob, NULL), 404, "not found");
        E2B_EXPECT(e2btest_api(&e, "GET", "/sandboxes/not-a-paddock-id", e.key, NULL), 404, "");
        E2B_EXPECT(e2btest_api(&e, "GET", path, e.key, NULL), 200, "\"state\":\"running\"");
        /* fork: a sandbox with network cannot be (the local driver forks only those without;
         * Nomad none: 501 with the reason), and a sandbox not there is a 404 first */
        {
                char fork[96];
                snprintf(fork, sizeof(fork), "/sandboxes/%s/fork", id);
                if (ctld_nomad())
                        E2B_EXPECT(e2btest_api(&e, "POST", fork, e.key, "{}"), 501, "cannot fork");
                else
                        E2B_EXPECT(e2btest_api(&e, "POST", fork, e.key, "{}"), 400, "deny_all");
                E2B_EXPECT(e2btest_api(&e, "POST", fork, e.key_bob, "{}"), 404, "not found");
                E2B_EXPECT(e2btest_api(&e, "POST", "/sandboxes/0123456789abcdef01234567/fork", e.key, "{}"), 404, "not found");
        }
        /* paging: one at a time, newest first, with X-Next-Token */
        {
                _cleanup_free_ char *p1 = e2btest_api(&e, "GET", "/v2/sandboxes?limit=1", e.key, NULL);
                ASSERT_EQ(test_raw_status(p1), 200);
                ASSERT_NOT_NULL(strstr(test_raw_body(p1), id2));
                ASSERT_NOT_NULL(strcasestr(p1, "X-Next-Token: 1"));
                _cleanup_free_ char *p2 = e2btest_api(&e, "GET", "/v2/sandboxes?limit=1&nextToken=1", e.key, NULL);
                ASSERT_NOT_NULL(strstr(test_raw_body(p2), id));
                ASSERT_NULL(strcasestr(p2, "X-Next-Token"));
                E2B_EXPECT(e2btest_api(&e, "GET", "/v2/sandboxes?metadata=k%3Dtwo", e.key, NULL), 200, id2);
                _cleanup_free_ char *p3 = e2btest_api(&e, "GET", "/v2/sandboxes?metadata=k%3Dtwo", e.key, NULL);
                ASSERT_NULL(strstr(test_raw_body(p3), id));
                E2B_EXPECT(e2btest_api(&e, "GET", "/v2/sandboxes?limit=0", e.key, NULL), 400, "limit");
                E2B_EXPECT(e2btest_api(&e, "GET", "/v2/sandboxes?state=frozen", e.key, NULL), 400, "state");
                E2B_EXPECT(e2btest_api(&e, "GET", "/v2/sandboxes", e.key_bob, NULL), 200, "[]");
        }
        /* envd: the token, the sandbox's own and no other */
        static const char stat_tmp[] = "{\"path\":\"/tmp\"}";
        E2B_EXPECT(envd(&e, id, NULL, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 401, "unauthenticated");
        E2B_EXPECT(envd(&e, id, tok2, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 401, "not this sandbox's");
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 200, "FILE_TYPE_DIRECTORY");
        static const char extra_field[] = "{\"path\":\"/tmp\",\"extra\":1}";
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, extra_field, strlen(extra_field)), 400,
                   "Unknown field 'extra'");
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":", 8), 400, "invalid_argument");
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Nope", false, "{}", 2), 404, "No such envd endpoint");
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
                        _cleanup_free_ char *si = e2btest_req(&e, "POST", "/process.Process/StreamInput", h, "application/connect+json",
                                                      b.buf, b.len);
                        ASSERT_EQ(test_raw_status(si), 200);
                        /* a message {} and the end of the stream {} */
                        ASSERT_TRUE(!strcmp(test_raw_body(si), "....\x02{}\x02...\x02{}"));
                }
                /* data before start is refused */
                E2B_EXPECT(e2btest_req(&e, "POST", "/process.Process/StreamInput", h, "application/connect+json", b.buf + 5 + strlen(m1),
                           b.len - 5 - strlen(m1)),
                       200, "only it, is start");
                strbuf_done(&b);
                char *got = NULL;
                for (int i = 0; i < 50; i++) {
                        free(got);
                        got = e2btest_req(&e, "GET", "/files?path=/tmp/si.txt", h, NULL, NULL, 0);
                        if (strstr(test_raw_body(got), "first-"))
                                break;
                        usleep(100000);
                }
                E2B_EXPECT(got, 200, "first-");
        }
        {
                /* the polled watchers (the sync Python SDK's watch_dir) */
                static const char mk[] = "{\"path\":\"/tmp/pw\"}", cw[] = "{\"path\":\"/tmp/pw\",\"recursive\":false}";
                E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/MakeDir", false, mk, strlen(mk)), 200, "FILE_TYPE_DIRECTORY");
                _cleanup_free_ char *w = envd(&e, id, tok, "filesystem.Filesystem/CreateWatcher", false, cw, strlen(cw));
                ASSERT_EQ(test_raw_status(w), 200);
                _cleanup_(cJSON_Deletep) cJSON *wo = cJSON_Parse(test_raw_body(w));
                const char *wid = cJSON_GetStringValue(cJSON_GetObjectItem(wo, "watcherId"));
                ASSERT_NOT_NULL(wid);
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, tok);
                E2B_EXPECT(e2btest_req(&e, "POST", "/files?path=/tmp/pw/seen.txt", h, "application/octet-stream", "x", 1), 200, "seen.txt");
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
                E2B_EXPECT(ev, 200, "\"name\":\"seen.txt\",\"type\":\"EVENT_TYPE_CREATE\"");
                /* not another sandbox's: its token opens only its own watchers */
                E2B_EXPECT(envd(&e, id2, tok2, "filesystem.Filesystem/GetWatcherEvents", false, poll_msg, strlen(poll_msg)), 404,
                           "not found");
                E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/RemoveWatcher", false, poll_msg, strlen(poll_msg)), 200, "{}");
                E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/GetWatcherEvents", false, poll_msg, strlen(poll_msg)), 404,
                           "not found");
        }
        {
                /* Connect streams: an envelope claiming 3 MiB, a truncated one, two messages */
                static const char start[] = "{\"process\":{\"cmd\":\"/bin/echo\",\"args\":[\"hi\"]}}";
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, tok);
                uint8_t big[5 + 16] = { 0, 0, 0x30, 0, 0 };
                E2B_EXPECT(e2btest_req(&e, "POST", "/process.Process/Start", h, "application/connect+json", big, sizeof(big)), 400,
                           "larger than the limit");
                uint8_t cut[5 + 10] = { 0, 0, 0, 0, 40, '{' };
                E2B_EXPECT(e2btest_req(&e, "POST", "/process.Process/Start", h, "application/connect+json", cut, sizeof(cut)), 400, "truncated");
                E2B_EXPECT(e2btest_req(&e, "POST", "/process.Process/Start", h, "application/proto", start, strlen(start)), 415,
                           "application/connect+json");
                static const char bogus[] = "{\"process\":{\"cmd\":\"x\"},\"bogus\":1}";
                E2B_EXPECT(envd(&e, id, tok, "process.Process/Start", true, bogus, strlen(bogus)), 200, "Unknown field 'bogus'");
                E2B_EXPECT(envd(&e, id, tok, "process.Process/Start", true, start, strlen(start)), 200, "\"stdout\":\"aGkK\"");
        }
        /* a port outside 1-65535, and the misdirected one on an envd connection */
        {
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 70000\r\n", id);
                E2B_EXPECT(e2btest_req(&e, "GET", "/", h, NULL, NULL, 0), 400, "E2b-Sandbox-Port");
                _cleanup_free_ char *h0 = xasprintf("E2b-Sandbox-Id: %s\r\nE2b-Sandbox-Port: 0\r\n", id);
                E2B_EXPECT(e2btest_req(&e, "GET", "/", h0, NULL, NULL, 0), 400, "E2b-Sandbox-Port");
        }
        /* Host routing under the domain: envd at 49983-<id>.localhost:<port>, another port forwarded */
        E2B_EXPECT(e2btest_host_get(&e, 49983, id, "/health", NULL), 204, "");
        E2B_EXPECT(e2btest_host_get(&e, 8000, id, "/", NULL), 502, "Nothing is listening on port 8000");
        /* not public: the traffic token is needed */
        E2B_EXPECT(e2btest_host_get(&e, 8000, id2, "/", NULL), 403, "traffic access token");
        E2B_EXPECT(e2btest_host_get(&e, 99999, id, "/", NULL), 400, "port");
        /* v2 connect of a running sandbox: 200, an empty body is 300 s, never shortening it */
        {
                _cleanup_free_ char *cp = xasprintf("/v2/sandboxes/%s/connect", id);
                E2B_EXPECT(e2btest_api(&e, "POST", cp, e.key, "{}"), 200, id);
                E2B_EXPECT(e2btest_api(&e, "POST", cp, e.key, NULL), 200, id);
                E2B_EXPECT(e2btest_api(&e, "POST", cp, e.key_bob, "{}"), 404, "not found");
                E2B_EXPECT(e2btest_api(&e, "POST", cp, e.key, "{\"timeot\":1}"), 400, "timeot");
        }
        /* timeout: set, refused beyond the plan, and through the Brimble API the same record */
        snprintf(path, sizeof(path), "/sandboxes/%s/timeout", id);
        E2B_EXPECT(e2btest_api(&e, "POST", path, e.key, "{\"timeout\":60}"), 204, "");
        E2B_EXPECT(e2btest_api(&e, "POST", path, e.key, "{\"timeout\":-1}"), 400, "timeout");
        E2B_EXPECT(e2btest_api(&e, "POST", path, e.key, "{}"), 400, "timeout is required");
        snprintf(path, sizeof(path), "/sandboxes/%s", id2);
        HTTP_EXPECT(&e.c, "DELETE", path, e.key, NULL, 204);
        E2B_EXPECT(e2btest_api(&e, "GET", path, e.key, NULL), 404, "not found");
        E2B_EXPECT(envd(&e, id2, tok2, "filesystem.Filesystem/Stat", false, stat_tmp, strlen(stat_tmp)), 502, "not found");
        /* liveness (the SDK's isRunning): 502 with E2B's body once killed, 204 while running */
        E2B_EXPECT(e2btest_host_get(&e, 49983, id2, "/health", NULL), 502, "\"sandboxId\":\"");
        E2B_EXPECT(e2btest_host_get(&e, 49983, id, "/health", NULL), 204, "");
        E2B_EXPECT(e2btest_host_get(&e, 49983, "000000000000000000000000", "/health", NULL), 502, "not found");
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        E2B_EXPECT(e2btest_api(&e, "DELETE", path, e.key, NULL), 204, "");
        E2B_EXPECT(e2btest_api(&e, "DELETE", path, e.key, NULL), 404, "not found");
}
