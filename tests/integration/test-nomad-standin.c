/* Integration tests of the Nomad stand-in itself (tests/nomad/): it must behave as Nomad
 * does where the driver depends on it, and place real containers on the local dockerd
 * (under runsc). Each test starts its own stand-in on a free port with a unique instance
 * label; an exit hook stops it (it removes its containers) and removes anything with the
 * label that is left, even after a failed ASSERT. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "docker.h"
#include "httpc.h"
#include "json.h"
#include "registry.h"
#include "regtest.h"
#include "strutil.h"
#include "testlib.h"
#include "ws.h"

#define TOKEN "s3cr3t-token"

struct standin {
        pid_t pid;
        int port;
        char instance[64];
        char record[300];
        char log[300];
        struct ctld http;     /* only .url is used, for http_req_full */
        char node_ids[2][37];
};

static void remove_labelled(const char *instance) {
        _cleanup_free_ char *f = xasprintf("label=paddock.nomad-standin=%s", instance);
        char *argv[] = { "docker", "ps", "-aq", "--filter", f, NULL };
        _cleanup_free_ char *out = NULL;
        if (test_run_capture(argv, &out, 65536) != 0 || !out)
                return;
        for (char *save = NULL, *id = strtok_r(out, "\n", &save); id; id = strtok_r(NULL, "\n", &save)) {
                char *rm[] = { "docker", "rm", "-f", id, NULL };
                _cleanup_free_ char *o2 = NULL;
                test_run_capture(rm, &o2, 4096);
        }
}

/* SIGTERM and wait (20 s, then SIGKILL). Returns the exit status (0 for a clean stop, which
 * under SANITIZE also means no sanitizer report), -1 when it had to be killed or was not running. */
static int standin_stop(struct standin *s) {
        int ret = -1;
        if (s->pid > 0) {
                kill(s->pid, SIGTERM);
                int st = 0;
                pid_t w = 0;
                for (int i = 0; i < 400 && (w = waitpid(s->pid, &st, WNOHANG)) == 0; i++)
                        usleep(50000);
                if (w == s->pid)
                        ret = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
                else {
                        kill(s->pid, SIGKILL);
                        waitpid(s->pid, &st, 0);
                }
                s->pid = 0;
        }
        return ret;
}

static void stop_hook(void *ud) {
        struct standin *s = ud;
        standin_stop(s);
        remove_labelled(s->instance);
}

static void req(struct standin *s, const char *method, const char *path, const char *token, const char *body,
                struct hres *ret) {
        http_req_keyed(&s->http, method, path, "X-Nomad-Token", token, body, ret);
}

/* One request whose answer must have this status and, unless text is NULL, exactly this body
 * (Nomad's plain-text errors); else the test fails at the caller's line. */
#define EXPECT_ANSWER(s, method, path, token, body, status, text) \
        expect_answer_at(__LINE__, s, method, path, token, body, status, text)
static void expect_answer_at(int line, struct standin *s, const char *method, const char *path, const char *token,
                             const char *body, long status, const char *text) {
        struct hres r;
        req(s, method, path, token, body, &r);
        if (r.status != status || (text && strcmp(r.body, text) != 0))
                test_fail(__FILE__, line, "%s %s: %ld \"%s\", want %ld \"%s\"", method, path, r.status, r.body, status,
                          text ? text : "(any body)");
        hres_done(&r);
}

/* A response header's value (static buffer), or NULL. */
static const char *header(const struct hres *r, const char *name) {
        static char v[256];
        size_t nl = strlen(name);
        for (const char *p = r->headers; p && *p;) {
                const char *eol = strstr(p, "\r\n");
                if (!eol)
                        break;
                if ((size_t) (eol - p) > nl && strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
                        const char *b = p + nl + 1;
                        while (*b == ' ')
                                b++;
                        snprintf(v, sizeof(v), "%.*s", (int) (eol - b), b);
                        return v;
                }
                p = eol + 2;
        }
        return NULL;
}

static uint64_t nomad_index(const struct hres *r) {
        const char *v = header(r, "X-Nomad-Index");
        return v ? strtoull(v, NULL, 10) : 0;
}

/* Starts a stand-in with the usual flags plus extra (NULL-terminated). */
static struct standin *standin_start(const char *const *extra) {
        if (!test_have_docker())
                TEST_SKIP("no docker");
        struct standin *s = xnew0(struct standin, 1);
        s->port = test_free_port();
        snprintf(s->instance, sizeof(s->instance), "test-%d-%d", (int) getpid(), s->port);
        const char *dir = test_tmpdir();
        snprintf(s->record, sizeof(s->record), "%s/requests.jsonl", dir);
        snprintf(s->log, sizeof(s->log), "%s/standin.log", dir);
        snprintf(s->http.url, sizeof(s->http.url), "http://127.0.0.1:%d", s->port);
        char listen[64];
        snprintf(listen, sizeof(listen), "127.0.0.1:%d", s->port);
        const char *argv[40] = { "nomad-standin", "--listen", listen, "--token", TOKEN, "--nodes", "2",
                                 "--net-map", "cni/sandbox-open=paddock-sandbox,cni/sandbox-no-egress=none",
                                 "--record", s->record, "--instance", s->instance };
        int n = 13;
        for (const char *const *e = extra; e && *e && n < 38; e++)
                argv[n++] = *e;
        argv[n] = NULL;
        test_on_exit(stop_hook, s);
        pid_t p = test_spawn_logged(test_build_path("tests/nomad/nomad-standin"), argv, s->log);
        s->pid = p;
        for (int i = 0; i < 200 && !test_port_open(s->port); i++) {
                int st;
                if (waitpid(p, &st, WNOHANG) == p) {
                        s->pid = 0;
                        test_fail(__FILE__, __LINE__, "nomad-standin exited during start; see %s", s->log);
                }
                usleep(25000);
        }
        ASSERT_TRUE(test_port_open(s->port));
        struct hres r;
        req(s, "GET", "/v1/nodes", TOKEN, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(cJSON_GetArraySize(r.json), 2);
        for (int i = 0; i < 2; i++)
                strscpy(s->node_ids[i], json_get_str(cJSON_GetArrayItem(r.json, i), "ID"), 37);
        hres_done(&r);
        return s;
}

/* The job the driver registers (issue 11), with id, network mode and optional volume. */
static char *job_body(const char *id, const char *net, const char *volume) {
        return xasprintf(
                "{\"Job\":{\"ID\":\"%s\",\"Name\":\"%s\",\"Type\":\"service\",\"Namespace\":\"sandboxes\","
                "\"Region\":\"global\",\"NodePool\":\"sandbox\",\"Datacenters\":[\"dc1\"],"
                "\"Meta\":{\"sandbox_id\":\"42\",\"account_id\":\"7\"},"
                "\"TaskGroups\":[{\"Name\":\"sbx\",\"Count\":1,"
                "\"RestartPolicy\":{\"Attempts\":0,\"Mode\":\"fail\",\"Interval\":1800000000000,\"Delay\":15000000000},"
                "\"ReschedulePolicy\":{\"Attempts\":0,\"Unlimited\":false},"
                "\"Networks\":[{\"Mode\":\"%s\"}],%s%s%s"
                "\"Tasks\":[{\"Name\":\"run\",\"Driver\":\"docker\","
                "\"Config\":{\"image\":\"%s\",\"runtime\":\"runsc\",\"command\":\"/bin/sh\","
                "\"args\":[\"-c\",\"tail -f /dev/null\"],\"pids_limit\":256,"
                "\"cap_drop\":[\"ALL\"],\"cap_add\":[\"ALL\"],\"security_opt\":[\"no-new-privileges\"]},"
                "\"Resources\":{\"CPU\":500,\"MemoryMB\":128,\"MemoryMaxMB\":192}%s%s%s}]}]}}",
                id, id, net, volume ? "\"Volumes\":{\"ws\":{\"Name\":\"ws\",\"Type\":\"csi\",\"Source\":\"" : "",
                volume ? volume : "",
                volume ? "\",\"AccessMode\":\"single-node-writer\",\"AttachmentMode\":\"file-system\"}}," : "",
                getenv("PADDOCK_TEST_IMAGE") ? getenv("PADDOCK_TEST_IMAGE") : "paddock/busybox:local",
                volume ? ",\"VolumeMounts\":[{\"Volume\":\"ws\",\"Destination\":\"/workspace\",\"ReadOnly\":false}]" : "",
                "", "");
}

static void register_job(struct standin *s, const char *id, const char *net, const char *volume, char eval_id[64]) {
        _cleanup_free_ char *b = job_body(id, net, volume);
        struct hres r;
        req(s, "PUT", "/v1/jobs", TOKEN, b, &r);
        if (r.status != 200)
                test_fail(__FILE__, __LINE__, "register %s: %ld %s", id, r.status, r.body);
        ASSERT_STREQ(r.content_type, "application/json");
        ASSERT_TRUE(nomad_index(&r) > 0);
        const char *e = json_get_str(r.json, "EvalID");
        ASSERT_TRUE(e && strlen(e) == 36);
        int64_t jmi = 0;
        ASSERT_TRUE(json_get_int(r.json, "JobModifyIndex", &jmi) && jmi > 0);
        if (eval_id)
                strscpy(eval_id, e, 64);
        hres_done(&r);
}

/* Follows the job's allocations with blocking queries, as the driver must, until the first
 * allocation's ClientStatus is not pending (or timeout_s). Returns the allocation ID and its
 * status; counts the queries made in *ret_queries. */
static void wait_alloc(struct standin *s, const char *job, int timeout_s, char id[64], char status[32], int *ret_queries) {
        uint64_t index = 0;
        int queries = 0;
        id[0] = status[0] = 0;
        time_t end = time(NULL) + timeout_s;
        while (time(NULL) < end) {
                char path[256];
                snprintf(path, sizeof(path), "/v1/job/%s/allocations?namespace=sandboxes&index=%llu&wait=5s", job,
                         (unsigned long long) index);
                struct hres r;
                req(s, "GET", path, TOKEN, NULL, &r);
                queries++;
                ASSERT_EQ(r.status, 200);
                ASSERT_STREQ(header(&r, "X-Nomad-KnownLeader"), "true");
                ASSERT_TRUE(header(&r, "X-Nomad-LastContact") != NULL);
                index = nomad_index(&r);
                const cJSON *a = cJSON_GetArrayItem(r.json, 0);
                if (a) {
                        strscpy(id, json_get_str(a, "ID"), 64);
                        strscpy(status, json_get_str(a, "ClientStatus"), 32);
                }
                hres_done(&r);
                if (status[0] && strcmp(status, "pending") != 0)
                        break;
        }
        if (ret_queries)
                *ret_queries = queries;
}

static cJSON *get_json(struct standin *s, const char *path, long want_status) {
        struct hres r;
        req(s, "GET", path, TOKEN, NULL, &r);
        if (r.status != want_status)
                test_fail(__FILE__, __LINE__, "GET %s: %ld %s", path, r.status, r.body);
        cJSON *j = TAKE_PTR(r.json);
        hres_done(&r);
        return j;
}

static char *docker_inspect(const char *name, const char *fmt) {
        char *argv[] = { "docker", "inspect", "-f", (char *) fmt, (char *) name, NULL };
        char *out = NULL;
        if (test_run_capture(argv, &out, 65536) != 0) {
                free(out);
                return NULL;
        }
        size_t n = strlen(out);
        while (n && out[n - 1] == '\n')
                out[--n] = 0;
        return out;
}

static bool container_exists(const char *name) {
        _cleanup_free_ char *o = docker_inspect(name, "{{.Id}}");
        return o != NULL;
}

/* ---- the exec WebSocket through libcurl CONNECT_ONLY, as the driver does it ---- */

struct wsconn {
        CURL *h;
        curl_socket_t fd;
        struct ws_reader r;
};

static int ws_send_all(struct wsconn *w, const void *p, size_t n) {
        return httpc_send_all(w->h, w->fd, p, n, mono_ms() + 30000);
}

/* Receives into buf; 0 on EOF, < 0 on timeout/error. */
static ssize_t ws_recv(struct wsconn *w, void *buf, size_t n, int timeout_ms) {
        for (;;) {
                size_t got = 0;
                CURLcode rc = curl_easy_recv(w->h, buf, n, &got);
                if (rc == CURLE_OK)
                        return (ssize_t) got;
                if (rc != CURLE_AGAIN)
                        return -EIO;
                struct pollfd pf = { .fd = w->fd, .events = POLLIN };
                if (poll(&pf, 1, timeout_ms) <= 0)
                        return -ETIMEDOUT;
        }
}

/* Opens the exec socket. Returns the HTTP status of the upgrade answer (101 expected). */
static long ws_open(struct standin *s, struct wsconn *w, const char *alloc, const char *task, const char *cmd_json,
                    const char *token) {
        memset(w, 0, sizeof(*w));
        w->h = curl_easy_init();
        curl_easy_setopt(w->h, CURLOPT_URL, s->http.url);
        curl_easy_setopt(w->h, CURLOPT_CONNECT_ONLY, 1L);
        ASSERT_EQ(curl_easy_perform(w->h), CURLE_OK);
        ASSERT_EQ(curl_easy_getinfo(w->h, CURLINFO_ACTIVESOCKET, &w->fd), CURLE_OK);
        _cleanup_free_ char *ecmd = httpc_escape(cmd_json);
        _cleanup_free_ char *path = xasprintf("/v1/client/allocation/%s/exec?task=%s&command=%s&tty=false", alloc, task, ecmd);
        char key[WS_KEY_LEN + 1];
        ws_key_new(key);
        _cleanup_free_ char *th = token ? xasprintf("X-Nomad-Token: %s", token) : NULL;
        const char *extra[] = { th, NULL };
        _cleanup_free_ char *rq = NULL;
        char host[64];
        snprintf(host, sizeof(host), "127.0.0.1:%d", s->port);
        ASSERT_OK(ws_client_request(host, path, key, extra, &rq));
        ASSERT_OK(ws_send_all(w, rq, strlen(rq)));
        char buf[16384];
        size_t have = 0;
        int status = 0;
        size_t head = 0;
        for (;;) {
                ssize_t n = ws_recv(w, buf + have, sizeof(buf) - have - 1, 10000);
                ASSERT_TRUE(n > 0);
                have += (size_t) n;
                int k = ws_client_parse_response(buf, have, key, &status, &head);
                if (k == -EAGAIN)
                        continue;
                ASSERT_OK(k);
                break;
        }
        ws_reader_init(&w->r, WS_ROLE_CLIENT, 0);
        if (have > head)
                ASSERT_OK(ws_reader_feed(&w->r, buf + head, have - head));
        return status;
}

static void ws_close_conn(struct wsconn *w) {
        ws_reader_done(&w->r);
        curl_easy_cleanup(w->h);
        w->h = NULL;
}

static void ws_send_text(struct wsconn *w, const char *text) {
        struct strbuf b = STRBUF_INIT(0);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, true, WS_OP_TEXT, text, strlen(text)));
        ASSERT_OK(ws_send_all(w, b.buf, b.len));
        strbuf_done(&b);
}

/* Next message: 1, or 0 when the server dropped the connection. */
static int ws_next(struct wsconn *w, struct ws_message *m) {
        for (;;) {
                int k = ws_reader_next(&w->r, m);
                ASSERT_OK(k);
                if (k == 1)
                        return 1;
                char buf[16384];
                ssize_t n = ws_recv(w, buf, sizeof(buf), 30000);
                if (n == 0 || n == -EIO)
                        return 0;
                ASSERT_TRUE(n > 0);
                ASSERT_OK(ws_reader_feed(&w->r, buf, (size_t) n));
        }
}

struct exec_result {
        struct strbuf out, err;
        int exit_code;         /* -1 = no exited frame */
        bool has_exit_code_field;
        uint16_t close_code;   /* 0 = no close frame */
        char close_reason[200];
        bool out_closed, err_closed;
};

static void exec_collect(struct wsconn *w, struct exec_result *res) {
        *res = (struct exec_result) { .out = STRBUF_INIT(0), .err = STRBUF_INIT(0), .exit_code = -1 };
        struct ws_message m;
        while (ws_next(w, &m) == 1) {
                if (m.opcode == WS_OP_CLOSE) {
                        _cleanup_free_ char *reason = NULL;
                        ASSERT_OK(ws_close_parse(m.data, m.len, &res->close_code, &reason));
                        strscpy(res->close_reason, reason, sizeof(res->close_reason));
                        ws_message_done(&m);
                        break;
                }
                ASSERT_EQ(m.opcode, WS_OP_TEXT);
                _cleanup_json_ cJSON *j = cJSON_Parse((char *) m.data);
                ASSERT_NOT_NULL(j);
                for (int i = 0; i < 2; i++) {
                        const cJSON *st = cJSON_GetObjectItemCaseSensitive(j, i ? "stderr" : "stdout");
                        if (!st)
                                continue;
                        const char *d = json_get_str(st, "data");
                        if (d) {
                                _cleanup_free_ uint8_t *raw = NULL;
                                size_t rl = 0;
                                ASSERT_OK(base64_decode(d, strlen(d), &raw, &rl));   /* standard, padded */
                                ASSERT_LE(rl, 1024);
                                strbuf_append(i ? &res->err : &res->out, raw, rl);
                        }
                        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "close")))
                                *(i ? &res->err_closed : &res->out_closed) = true;
                }
                if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "exited"))) {
                        const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "result");
                        ASSERT_TRUE(cJSON_IsObject(r));
                        int64_t ec = 0;
                        res->has_exit_code_field = cJSON_GetObjectItemCaseSensitive(r, "exit_code") != NULL;
                        json_get_int(r, "exit_code", &ec);
                        res->exit_code = (int) ec;
                }
                ws_message_done(&m);
        }
}

static void exec_result_done(struct exec_result *r) {
        strbuf_done(&r->out);
        strbuf_done(&r->err);
}

static void start_running(struct standin **ret_s, const char *job, char alloc[64]) {
        struct standin *s = standin_start(NULL);
        register_job(s, job, "cni/sandbox-open", NULL, NULL);
        char status[32];
        wait_alloc(s, job, 60, alloc, status, NULL);
        ASSERT_STREQ(status, "running");
        *ret_s = s;
}

/* ---- tests ---- */

TEST(register_place_blocking_and_deregister) {
        struct standin *s = standin_start(NULL);
        char eval[64], alloc[64], status[32];
        register_job(s, "sbx-life", "cni/sandbox-open", NULL, eval);
        int queries = 0;
        int64_t w0 = mono_ms();
        wait_alloc(s, "sbx-life", 60, alloc, status, &queries);
        ASSERT_STREQ(status, "running");
        /* Blocking queries answer on a change (a handful: created, set up, started) or after
         * wait=5s: no polling storm, however slow the start. */
        ASSERT_LE(queries, 5 + (mono_ms() - w0) / 5000);

        /* The allocation as the driver reads it. */
        _cleanup_free_ char *p = xasprintf("/v1/allocation/%s", alloc);
        _cleanup_json_ cJSON *a = get_json(s, p, 200);
        ASSERT_STREQ(json_get_str(a, "ClientStatus"), "running");
        ASSERT_STREQ(json_get_str(a, "DesiredStatus"), "run");
        ASSERT_STREQ(json_get_str(a, "EvalID"), eval);
        const char *node = json_get_str(a, "NodeID");
        ASSERT_TRUE(strcmp(node, s->node_ids[0]) == 0 || strcmp(node, s->node_ids[1]) == 0);
        const char *addr = json_get_str(cJSON_GetObjectItem(a, "NetworkStatus"), "Address");
        struct in_addr ia;
        ASSERT_TRUE(addr && inet_pton(AF_INET, addr, &ia) == 1);
        const cJSON *ts = cJSON_GetObjectItem(cJSON_GetObjectItem(a, "TaskStates"), "run");
        ASSERT_STREQ(json_get_str(ts, "State"), "running");
        const cJSON *evs = cJSON_GetObjectItem(ts, "Events");
        ASSERT_STREQ(json_get_str(cJSON_GetArrayItem(evs, 0), "Type"), "Received");
        ASSERT_STREQ(json_get_str(cJSON_GetArrayItem(evs, cJSON_GetArraySize(evs) - 1), "Type"), "Started");
        /* Unix nanoseconds (past 2^53, so read as doubles). */
        ASSERT_TRUE(cJSON_GetObjectItem(cJSON_GetArrayItem(evs, 0), "Time")->valuedouble > 1.7e18);
        ASSERT_TRUE(cJSON_GetObjectItem(a, "CreateTime")->valuedouble > 1.7e18);

        /* The real container, as Nomad's docker driver would build it. */
        _cleanup_free_ char *cname = xasprintf("run-%s", alloc);
        _cleanup_free_ char *hc = docker_inspect(cname, "{{.HostConfig.Runtime}} {{.HostConfig.Memory}} "
                                                        "{{.HostConfig.MemoryReservation}} {{.HostConfig.PidsLimit}} "
                                                        "{{.HostConfig.CpuShares}} {{.HostConfig.CapDrop}} {{.HostConfig.CapAdd}} "
                                                        "{{.HostConfig.SecurityOpt}} {{.HostConfig.NetworkMode}}");
        ASSERT_NOT_NULL(hc);
        ASSERT_STREQ(hc, "runsc 201326592 134217728 256 500 [ALL] [ALL] [no-new-privileges] paddock-sandbox");
        _cleanup_free_ char *lab = docker_inspect(cname, "{{index .Config.Labels \"com.hashicorp.nomad.alloc_id\"}}");
        ASSERT_STREQ(lab, alloc);

        /* Its resource usage as the client reports it: the allocation's and the task's. */
        _cleanup_free_ char *sp = xasprintf("/v1/client/allocation/%s/stats", alloc);
        _cleanup_json_ cJSON *usage = get_json(s, sp, 200);
        for (int k = 0; k < 2; k++) {
                const cJSON *ru = cJSON_GetObjectItem(k ? cJSON_GetObjectItem(cJSON_GetObjectItem(usage, "Tasks"), "run") : usage,
                                                      "ResourceUsage");
                ASSERT_TRUE(cJSON_GetObjectItem(cJSON_GetObjectItem(ru, "MemoryStats"), "Usage")->valuedouble > 0);
                ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(ru, "CpuStats"), "Percent")));
                ASSERT_TRUE(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(ru, "CpuStats"), "Measured")));
        }
        ASSERT_TRUE(cJSON_GetObjectItem(usage, "Timestamp")->valuedouble > 1.7e18);

        /* The job reads back whole, with its indexes and status, in its namespace only. */
        _cleanup_json_ cJSON *j = get_json(s, "/v1/job/sbx-life?namespace=sandboxes", 200);
        ASSERT_STREQ(json_get_str(j, "Status"), "running");
        ASSERT_STREQ(json_get_str(j, "NodePool"), "sandbox");
        ASSERT_STREQ(json_get_str(cJSON_GetObjectItem(j, "Meta"), "sandbox_id"), "42");
        int64_t iv = 0;
        ASSERT_TRUE(json_get_int(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "TaskGroups"), 0), "Count", &iv) && iv == 1);
        struct hres r;
        req(s, "GET", "/v1/job/sbx-life", TOKEN, NULL, &r);   /* namespace default */
        ASSERT_EQ(r.status, 404);
        ASSERT_STREQ(r.body, "job not found");
        ASSERT_TRUE(startswith(r.content_type, "text/plain"));
        hres_done(&r);

        /* A blocking query with nothing changing returns after wait with the same index. */
        req(s, "GET", "/v1/job/sbx-life/allocations?namespace=sandboxes", TOKEN, NULL, &r);
        uint64_t idx = nomad_index(&r);
        hres_done(&r);
        _cleanup_free_ char *bq = xasprintf("/v1/job/sbx-life/allocations?namespace=sandboxes&index=%llu&wait=1s",
                                            (unsigned long long) idx);
        int64_t t0 = mono_ms();
        req(s, "GET", bq, TOKEN, NULL, &r);
        int64_t took = mono_ms() - t0;
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(nomad_index(&r), idx);
        ASSERT_GE(took, 950);
        ASSERT_LE(took, 1000 + 1000 / 16 + 500);   /* wait plus Nomad's jitter (wait/16), some slack */
        hres_done(&r);

        /* ... and one that a change wakes early: deregister with purge while it waits. */
        _cleanup_free_ char *bq2 = xasprintf("/v1/allocation/%s?index=%llu&wait=20s", alloc, (unsigned long long) idx);
        pid_t kid = fork();
        if (kid == 0) {
                usleep(500000);
                struct hres d;
                req(s, "DELETE", "/v1/job/sbx-life?purge=true&namespace=sandboxes", TOKEN, NULL, &d);
                _exit(d.status == 200 && strlen(json_get_str(d.json, "EvalID")) == 36 ? 0 : 1);
        }
        t0 = mono_ms();
        req(s, "GET", bq2, TOKEN, NULL, &r);
        took = mono_ms() - t0;
        ASSERT_EQ(r.status, 200);
        ASSERT_TRUE(nomad_index(&r) > idx);
        ASSERT_STREQ(json_get_str(r.json, "DesiredStatus"), "stop");
        ASSERT_LE(took, 5000);
        hres_done(&r);
        int st;
        ASSERT_EQ(waitpid(kid, &st, 0), kid);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);

        /* Purged: the job is gone, its container is removed. */
        EXPECT_ANSWER(s, "GET", "/v1/job/sbx-life?namespace=sandboxes", TOKEN, NULL, 404, NULL);
        for (int i = 0; i < 100 && container_exists(cname); i++)
                usleep(100000);
        ASSERT_FALSE(container_exists(cname));

        /* The request log holds what was asked. */
        _cleanup_free_ char *cat_out = NULL;
        char *cat[] = { "cat", s->record, NULL };
        ASSERT_EQ(test_run_capture(cat, &cat_out, 1 << 20), 0);
        bool saw_put = false, saw_delete = false;
        for (char *save = NULL, *line = strtok_r(cat_out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                _cleanup_json_ cJSON *l = cJSON_Parse(line);
                ASSERT_NOT_NULL(l);
                const char *m = json_get_str(l, "Method"), *path = json_get_str(l, "Path");
                if (strcmp(m, "PUT") == 0 && strcmp(path, "/v1/jobs") == 0) {
                        saw_put = true;
                        ASSERT_STREQ(json_get_str(cJSON_GetObjectItem(cJSON_GetObjectItem(l, "Body"), "Job"), "ID"), "sbx-life");
                        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(l, "Token")));
                }
                if (strcmp(m, "DELETE") == 0 && strcmp(path, "/v1/job/sbx-life") == 0) {
                        saw_delete = true;
                        ASSERT_STREQ(json_get_str(cJSON_GetObjectItem(l, "Query"), "purge"), "true");
                }
        }
        ASSERT_TRUE(saw_put && saw_delete);
        ASSERT_EQ(standin_stop(s), 0);
}

TEST(nomad_answers_for_unknown_things_and_bad_queries) {
        struct standin *s = standin_start(NULL);
        struct hres r;
        req(s, "DELETE", "/v1/job/never-registered?purge=true", TOKEN, NULL, &r);
        ASSERT_EQ(r.status, 200);   /* as Nomad: not 404 */
        ASSERT_STREQ(json_get_str(r.json, "EvalID"), "");
        hres_done(&r);
        _cleanup_json_ cJSON *l = get_json(s, "/v1/job/never-registered/allocations", 200);
        ASSERT_TRUE(cJSON_IsArray(l) && cJSON_GetArraySize(l) == 0);
        EXPECT_ANSWER(s, "GET", "/v1/allocation/00000000-0000-0000-0000-000000000000", TOKEN, NULL, 404, "alloc not found");
        EXPECT_ANSWER(s, "GET", "/v1/client/allocation/00000000-0000-0000-0000-000000000000/stats", TOKEN, NULL, 404,
                      "Unknown allocation \"00000000-0000-0000-0000-000000000000\"");
        EXPECT_ANSWER(s, "GET", "/v1/job/x/allocations?index=1&wait=soon", TOKEN, NULL, 400, "Invalid wait time");
        EXPECT_ANSWER(s, "GET", "/v1/job/x/allocations?index=abc", TOKEN, NULL, 400, "Invalid index");
        EXPECT_ANSWER(s, "PUT", "/v1/jobs", TOKEN, "{}", 400, "Job must be specified");
        EXPECT_ANSWER(s, "PUT", "/v1/jobs", TOKEN, "{\"Job\":{\"Name\":\"x\"}}", 400, "Job ID hasn't been provided");
        EXPECT_ANSWER(s, "PUT", "/v1/jobs", TOKEN, "{\"Job\":{\"ID\":\"x\",\"Namespace\":\"sandboxes\",\"NodePool\":\"nope\",\"TaskGroups\":[]}}",
                      500, "job \"x\" is in nonexistent node pool \"nope\"");
        EXPECT_ANSWER(s, "PATCH", "/v1/jobs", TOKEN, NULL, 405, "Invalid method");
        EXPECT_ANSWER(s, "POST", "/v1/job/ghost/scale", TOKEN, "{\"Count\":0,\"Target\":{\"Group\":\"sbx\"}}", 404,
                      "job \"ghost\" not found");
}

TEST(acl_tokens) {
        struct standin *s = standin_start(NULL);
        struct hres r;
        req(s, "GET", "/v1/nodes", NULL, NULL, &r);
        ASSERT_EQ(r.status, 403);
        ASSERT_STREQ(r.body, "Permission denied");
        ASSERT_TRUE(startswith(r.content_type, "text/plain"));
        hres_done(&r);
        EXPECT_ANSWER(s, "GET", "/v1/nodes", "wrong", NULL, 403, "ACL token not found");
        _cleanup_free_ char *b = job_body("sbx-acl", "cni/sandbox-open", NULL);
        EXPECT_ANSWER(s, "PUT", "/v1/jobs", NULL, b, 403, NULL);
        EXPECT_ANSWER(s, "DELETE", "/v1/job/sbx-acl?purge=true", "wrong", NULL, 403, NULL);
        /* Authorization: Bearer works as X-Nomad-Token does. */
        const char *bearer[] = { "Authorization: Bearer " TOKEN, NULL };
        http_req_full(&s->http, "GET", "/v1/nodes", bearer, NULL, 0, &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        /* The agent tells its client node id (what nodeagent's node_id = nomad reads). */
        _cleanup_json_ cJSON *self = get_json(s, "/v1/agent/self", 200);
        ASSERT_STREQ(json_get_str(cJSON_GetObjectItem(cJSON_GetObjectItem(self, "stats"), "client"), "node_id"),
                     s->node_ids[0]);
        ASSERT_TRUE(cJSON_IsObject(cJSON_GetObjectItem(self, "config")));
        _cleanup_free_ char *np = xasprintf("/v1/node/%s", s->node_ids[1]);
        _cleanup_json_ cJSON *n = get_json(s, np, 200);
        ASSERT_STREQ(json_get_str(n, "Status"), "ready");
        ASSERT_STREQ(json_get_str(n, "NodePool"), "sandbox");
        /* HTTPAddr is host:port, as Nomad's (controld finds a node's relay host there) */
        _cleanup_free_ char *http = xasprintf("127.0.0.1:%d", s->port);
        ASSERT_STREQ(json_get_str(n, "HTTPAddr"), http);
}

/* An exec of `true` that must end in a close frame with this code and exactly this reason
 * (the refusals Nomad sends after the upgrade); else the test fails at the caller's line. */
#define EXPECT_EXEC_CLOSE(s, alloc, task, token, code, reason) \
        expect_exec_close_at(__LINE__, s, alloc, task, token, code, reason)
static void expect_exec_close_at(int line, struct standin *s, const char *alloc, const char *task, const char *token,
                                 uint16_t code, const char *reason) {
        struct wsconn w;
        struct exec_result res;
        if (ws_open(s, &w, alloc, task, "[\"true\"]", token) != 101)
                test_fail(__FILE__, line, "exec %s/%s: the upgrade was refused", alloc, task);
        exec_collect(&w, &res);
        ws_close_conn(&w);
        if (res.close_code != code || strcmp(res.close_reason, reason) != 0)
                test_fail(__FILE__, line, "exec %s/%s closed %u \"%s\", want %u \"%s\"", alloc, task, res.close_code,
                          res.close_reason, code, reason);
        exec_result_done(&res);
}

TEST(exec_round_trip_under_runsc) {
        struct standin *s;
        char alloc[64];
        start_running(&s, "sbx-exec", alloc);
        struct wsconn w;
        struct exec_result res;

        /* stdin in, stdout and stderr out, exit code 3. */
        ASSERT_EQ(ws_open(s, &w, alloc, "run", "[\"/bin/sh\",\"-c\",\"cat; echo oops >&2; exit 3\"]", TOKEN), 101);
        _cleanup_free_ char *b64 = base64_encode("hello over nomad\n", 17, NULL);
        _cleanup_free_ char *in = xasprintf("{\"stdin\":{\"data\":\"%s\"}}", b64);
        ws_send_text(&w, "{\"tty_size\":{\"height\":24,\"width\":80}}");
        ws_send_text(&w, "{}");
        ws_send_text(&w, in);
        ws_send_text(&w, "{\"stdin\":{\"close\":true}}");
        exec_collect(&w, &res);
        ws_close_conn(&w);
        ASSERT_STREQ(res.out.buf, "hello over nomad\n");
        ASSERT_STREQ(res.err.buf, "oops\n");
        ASSERT_EQ(res.exit_code, 3);
        ASSERT_TRUE(res.out_closed && res.err_closed);
        ASSERT_EQ(res.close_code, 0);   /* after exited: TCP dropped, no close frame */
        exec_result_done(&res);

        /* Really under gVisor; exit 0 leaves exit_code out; big output comes in 1024-byte frames. */
        ASSERT_EQ(ws_open(s, &w, alloc, "run", "[\"/bin/sh\",\"-c\",\"dmesg | head -n 3; head -c 5000 /dev/zero | tr '\\\\0' x\"]", TOKEN), 101);
        ws_send_text(&w, "{\"stdin\":{\"close\":true}}");
        exec_collect(&w, &res);
        ws_close_conn(&w);
        ASSERT_CONTAINS(res.out.buf, "gVisor");
        ASSERT_TRUE(endswith(res.out.buf, "xxxxxxxxxx"));
        ASSERT_EQ(res.exit_code, 0);
        ASSERT_FALSE(res.has_exit_code_field);
        exec_result_done(&res);

        /* Errors after the upgrade are close frames with Nomad's codes. */
        EXPECT_EXEC_CLOSE(s, alloc, "nosuchtask", TOKEN, WS_CLOSE_POLICY, "unknown task name \"nosuchtask\"");
        EXPECT_EXEC_CLOSE(s, alloc, "run", NULL, WS_CLOSE_INTERNAL_ERROR, "Permission denied");
        EXPECT_EXEC_CLOSE(s, alloc, "run", "wrong", WS_CLOSE_POLICY, "ACL token not found");
        /* Pings are answered, also mid-session; a client close is echoed. */
        ASSERT_EQ(ws_open(s, &w, alloc, "run", "[\"/bin/sh\",\"-c\",\"cat\"]", TOKEN), 101);
        struct strbuf fb = STRBUF_INIT(0);
        ASSERT_OK(ws_frame_encode(&fb, WS_ROLE_CLIENT, true, WS_OP_PING, "are you there", 13));
        ASSERT_OK(ws_close_encode(&fb, WS_ROLE_CLIENT, WS_CLOSE_NORMAL, "done"));
        ASSERT_OK(ws_send_all(&w, fb.buf, fb.len));
        strbuf_done(&fb);
        struct ws_message m;
        ASSERT_EQ(ws_next(&w, &m), 1);
        ASSERT_EQ(m.opcode, WS_OP_PONG);
        ASSERT_STREQ((char *) m.data, "are you there");
        ws_message_done(&m);
        ASSERT_EQ(ws_next(&w, &m), 1);
        ASSERT_EQ(m.opcode, WS_OP_CLOSE);
        uint16_t cc = 0;
        ASSERT_OK(ws_close_parse(m.data, m.len, &cc, NULL));
        ASSERT_EQ(cc, WS_CLOSE_NORMAL);
        ws_message_done(&m);
        ws_close_conn(&w);
        /* An unmasked client frame is a protocol error: close 1002. */
        ASSERT_EQ(ws_open(s, &w, alloc, "run", "[\"/bin/sh\",\"-c\",\"cat\"]", TOKEN), 101);
        ASSERT_OK(ws_send_all(&w, "\x81\x02{}", 4));
        exec_collect(&w, &res);
        ws_close_conn(&w);
        ASSERT_EQ(res.close_code, WS_CLOSE_PROTOCOL_ERROR);
        exec_result_done(&res);
        EXPECT_EXEC_CLOSE(s, "00000000-0000-0000-0000-000000000000", "run", TOKEN, WS_CLOSE_POLICY,
                          "Unknown allocation \"00000000-0000-0000-0000-000000000000\"");
}

TEST(scale_to_zero_and_back_places_a_new_allocation) {
        struct standin *s;
        char alloc[64], alloc2[64], status[32];
        start_running(&s, "sbx-scale", alloc);
        struct hres r;
        req(s, "POST", "/v1/job/sbx-scale/scale?namespace=sandboxes", TOKEN,
            "{\"Count\":0,\"Target\":{\"Job\":\"sbx-scale\",\"Group\":\"sbx\"},\"Message\":\"pause\"}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(strlen(json_get_str(r.json, "EvalID")), 36);
        hres_done(&r);
        _cleanup_free_ char *cname = xasprintf("run-%s", alloc);
        _cleanup_free_ char *p = xasprintf("/v1/allocation/%s", alloc);
        for (int i = 0; i < 100; i++) {
                _cleanup_json_ cJSON *a = get_json(s, p, 200);
                if (strcmp(json_get_str(a, "ClientStatus"), "complete") == 0)
                        break;
                usleep(100000);
        }
        _cleanup_json_ cJSON *a = get_json(s, p, 200);
        ASSERT_STREQ(json_get_str(a, "DesiredStatus"), "stop");
        ASSERT_STREQ(json_get_str(a, "ClientStatus"), "complete");
        ASSERT_FALSE(container_exists(cname));
        EXPECT_ANSWER(s, "POST", "/v1/job/sbx-scale/scale?namespace=sandboxes", TOKEN,
                      "{\"Count\":1,\"Target\":{\"Job\":\"sbx-scale\",\"Group\":\"sbx\"},\"Message\":\"resume\"}", 200, NULL);
        /* The new allocation: another id, running. */
        time_t end = time(NULL) + 60;
        alloc2[0] = 0;
        while (time(NULL) < end) {
                _cleanup_json_ cJSON *l = get_json(s, "/v1/job/sbx-scale/allocations?namespace=sandboxes", 200);
                ASSERT_EQ(cJSON_GetArraySize(l), 2);
                const cJSON *it;
                cJSON_ArrayForEach(it, l)
                        if (strcmp(json_get_str(it, "ID"), alloc) != 0) {
                                strscpy(alloc2, json_get_str(it, "ID"), sizeof(alloc2));
                                strscpy(status, json_get_str(it, "ClientStatus"), sizeof(status));
                        }
                if (strcmp(status, "running") == 0)
                        break;
                usleep(200000);
        }
        ASSERT_STREQ(status, "running");
        ASSERT_TRUE(strcmp(alloc, alloc2) != 0);
        EXPECT_ANSWER(s, "POST", "/v1/job/sbx-scale/scale?namespace=sandboxes", TOKEN,
                      "{\"Count\":0,\"Target\":{\"Group\":\"nogroup\"}}", 400,
                      "task group \"nogroup\" specified for scaling does not exist in job");
}

TEST(two_nodes_spread_pinned_and_eligibility) {
        struct standin *s = standin_start(NULL);
        char a1[64], a2[64], st[32];
        register_job(s, "sbx-n1", "cni/sandbox-no-egress", NULL, NULL);
        register_job(s, "sbx-n2", "cni/sandbox-no-egress", NULL, NULL);
        wait_alloc(s, "sbx-n1", 60, a1, st, NULL);
        ASSERT_STREQ(st, "running");
        wait_alloc(s, "sbx-n2", 60, a2, st, NULL);
        ASSERT_STREQ(st, "running");
        _cleanup_free_ char *p1 = xasprintf("/v1/allocation/%s", a1), *p2 = xasprintf("/v1/allocation/%s", a2);
        _cleanup_json_ cJSON *j1 = get_json(s, p1, 200), *j2 = get_json(s, p2, 200);
        ASSERT_TRUE(strcmp(json_get_str(j1, "NodeID"), json_get_str(j2, "NodeID")) != 0);   /* spread */
        /* No network: NetworkMode none, no address. */
        ASSERT_STREQ(json_get_str(cJSON_GetObjectItem(j1, "NetworkStatus"), "Address"), "");
        /* Node 1 ineligible: the next placement lands on node 0. */
        _cleanup_free_ char *ep = xasprintf("/v1/node/%s/eligibility", s->node_ids[1]);
        _cleanup_free_ char *eb = xasprintf("{\"NodeID\":\"%s\",\"Eligibility\":\"ineligible\"}", s->node_ids[1]);
        EXPECT_ANSWER(s, "POST", ep, TOKEN, eb, 200, NULL);
        for (int i = 0; i < 2; i++) {
                char id[16];
                snprintf(id, sizeof(id), "sbx-e%d", i);
                register_job(s, id, "cni/sandbox-no-egress", NULL, NULL);
                char a[64];
                wait_alloc(s, id, 60, a, st, NULL);
                _cleanup_free_ char *pp = xasprintf("/v1/allocation/%s", a);
                _cleanup_json_ cJSON *j = get_json(s, pp, 200);
                ASSERT_STREQ(json_get_str(j, "NodeID"), s->node_ids[0]);
        }
        /* A CNI network no node has: placement fails as in Nomad (no allocation, blocked eval). */
        char eval[64];
        register_job(s, "sbx-nonet", "cni/unknown-net", NULL, eval);
        _cleanup_free_ char *evp = xasprintf("/v1/evaluation/%s", eval);
        _cleanup_json_ cJSON *ev = get_json(s, evp, 200);
        const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "FailedTGAllocs"), "sbx");
        ASSERT_NOT_NULL(m);
        int64_t nf = 0;
        ASSERT_TRUE(json_get_int(cJSON_GetObjectItem(m, "ConstraintFiltered"), "missing network", &nf) && nf == 2);
        ASSERT_EQ(strlen(json_get_str(ev, "BlockedEval")), 36);
}

TEST(faults_are_visible) {
        struct standin *s = standin_start(NULL);
        struct hres r;
        /* HTTP 500 on the next N requests. */
        EXPECT_ANSWER(s, "POST", "/_standin/fault", NULL, "{\"http_500\":2}", 200, NULL);
        for (int i = 0; i < 3; i++) {
                req(s, "GET", "/v1/nodes", TOKEN, NULL, &r);
                ASSERT_EQ(r.status, i < 2 ? 500 : 200);
                if (i < 2)
                        ASSERT_TRUE(startswith(r.content_type, "text/plain"));
                hres_done(&r);
        }

        /* Placement failure: no allocation, the eval says why. */
        EXPECT_ANSWER(s, "POST", "/_standin/fault", NULL, "{\"fail_placement\":1}", 200, NULL);
        char eval[64], a[64], st[32];
        register_job(s, "sbx-f1", "cni/sandbox-open", NULL, eval);
        _cleanup_json_ cJSON *l = get_json(s, "/v1/job/sbx-f1/allocations?namespace=sandboxes", 200);
        ASSERT_EQ(cJSON_GetArraySize(l), 0);
        _cleanup_free_ char *evp = xasprintf("/v1/evaluation/%s", eval);
        _cleanup_json_ cJSON *ev = get_json(s, evp, 200);
        ASSERT_NOT_NULL(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "FailedTGAllocs"), "sbx"));
        _cleanup_json_ cJSON *evl = get_json(s, "/v1/job/sbx-f1/evaluations?namespace=sandboxes", 200);
        ASSERT_EQ(cJSON_GetArraySize(evl), 1);

        /* Driver failure: the allocation fails with the reason in its task events, no container. */
        EXPECT_ANSWER(s, "POST", "/_standin/fault", NULL,
                      "{\"driver_failure\":1,\"driver_message\":\"requested runtime \\\"runsc\\\" is not allowed\"}", 200, NULL);
        register_job(s, "sbx-f2", "cni/sandbox-open", NULL, NULL);
        wait_alloc(s, "sbx-f2", 30, a, st, NULL);
        ASSERT_STREQ(st, "failed");
        _cleanup_free_ char *ap = xasprintf("/v1/allocation/%s", a);
        _cleanup_json_ cJSON *fa = get_json(s, ap, 200);
        const cJSON *ts = cJSON_GetObjectItem(cJSON_GetObjectItem(fa, "TaskStates"), "run");
        ASSERT_STREQ(json_get_str(ts, "State"), "dead");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(ts, "Failed")));
        bool found = false;
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(ts, "Events"))
                if (strcmp(json_get_str(e, "Type"), "Driver Failure") == 0) {
                        found = true;
                        ASSERT_STREQ(json_get_str(e, "DisplayMessage"), "requested runtime \"runsc\" is not allowed");
                }
        ASSERT_TRUE(found);
        _cleanup_free_ char *cn = xasprintf("run-%s", a);
        ASSERT_FALSE(container_exists(cn));

        /* Slow placement: pending for the delay, then running. */
        EXPECT_ANSWER(s, "POST", "/_standin/fault", NULL, "{\"slow_placement_ms\":1500}", 200, NULL);
        int64_t t0 = mono_ms();
        register_job(s, "sbx-f3", "cni/sandbox-open", NULL, NULL);
        wait_alloc(s, "sbx-f3", 60, a, st, NULL);
        ASSERT_STREQ(st, "running");
        ASSERT_GE(mono_ms() - t0, 1400);
        EXPECT_ANSWER(s, "POST", "/_standin/fault", NULL, "{\"slow_placement_ms\":0,\"lose_after_ms\":1000,\"lose_count\":1}",
                      200, NULL);

        /* Lost later: running, then ClientStatus lost, container gone. */
        register_job(s, "sbx-f4", "cni/sandbox-open", NULL, NULL);
        wait_alloc(s, "sbx-f4", 60, a, st, NULL);
        ASSERT_STREQ(st, "running");
        _cleanup_free_ char *lp = xasprintf("/v1/allocation/%s", a);
        _cleanup_json_ cJSON *la0 = get_json(s, lp, 200);
        int64_t mi = 0;
        json_get_int(la0, "ModifyIndex", &mi);
        _cleanup_free_ char *lbq = xasprintf("%s?index=%lld&wait=10s", lp, (long long) mi);
        _cleanup_json_ cJSON *la = get_json(s, lbq, 200);
        ASSERT_STREQ(json_get_str(la, "ClientStatus"), "lost");
        _cleanup_free_ char *lcn = xasprintf("run-%s", a);
        for (int i = 0; i < 50 && container_exists(lcn); i++)
                usleep(100000);
        ASSERT_FALSE(container_exists(lcn));

        /* Exec closed with 1011. */
        char a5[64];
        register_job(s, "sbx-f5", "cni/sandbox-open", NULL, NULL);
        wait_alloc(s, "sbx-f5", 60, a5, st, NULL);
        ASSERT_STREQ(st, "running");
        EXPECT_ANSWER(s, "POST", "/_standin/fault", NULL, "{\"exec_1011\":1}", 200, NULL);
        struct wsconn w;
        struct exec_result res;
        ASSERT_EQ(ws_open(s, &w, a5, "run", "[\"true\"]", TOKEN), 101);
        exec_collect(&w, &res);
        ws_close_conn(&w);
        ASSERT_EQ(res.close_code, WS_CLOSE_INTERNAL_ERROR);
        exec_result_done(&res);
        /* ... only once. */
        ASSERT_EQ(ws_open(s, &w, a5, "run", "[\"true\"]", TOKEN), 101);
        exec_collect(&w, &res);
        ws_close_conn(&w);
        ASSERT_EQ(res.close_code, 0);
        ASSERT_EQ(res.exit_code, 0);
        exec_result_done(&res);
        ASSERT_EQ(standin_stop(s), 0);
}

TEST(fault_flags_on_the_command_line) {
        if (!test_have_docker())
                TEST_SKIP("no docker");
        /* standin_start() asserts /v1/nodes answers 200, so this start is by hand. */
        int port = test_free_port();
        char listen[64], inst[64];
        snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
        snprintf(inst, sizeof(inst), "test-flags-%d", port);
        struct standin *u = xnew0(struct standin, 1);
        u->port = port;
        strscpy(u->instance, inst, sizeof(u->instance));
        snprintf(u->http.url, sizeof(u->http.url), "http://127.0.0.1:%d", port);
        test_on_exit(stop_hook, u);
        pid_t p = fork();
        if (p == 0) {
                execl(test_build_path("tests/nomad/nomad-standin"), "nomad-standin", "--listen", listen, "--instance",
                      inst, "--fault", "http_500=1", "--placement", "node:1", "--net-map",
                      "cni/sandbox-open=paddock-sandbox", (char *) NULL);
                _exit(127);
        }
        u->pid = p;
        for (int i = 0; i < 200 && !test_port_open(port); i++)
                usleep(25000);
        EXPECT_ANSWER(u, "GET", "/v1/nodes", NULL, NULL, 500, NULL);   /* no --token: ACLs off */
        _cleanup_json_ cJSON *n = get_json(u, "/v1/nodes", 200);
        strscpy(u->node_ids[1], json_get_str(cJSON_GetArrayItem(n, 1), "ID"), 37);
        char a[64], st[32];
        register_job(u, "sbx-pin", "cni/sandbox-open", NULL, NULL);
        wait_alloc(u, "sbx-pin", 60, a, st, NULL);
        ASSERT_STREQ(st, "running");
        _cleanup_free_ char *ap = xasprintf("/v1/allocation/%s", a);
        _cleanup_json_ cJSON *aj = get_json(u, ap, 200);
        ASSERT_STREQ(json_get_str(aj, "NodeID"), u->node_ids[1]);   /* pinned to node:1 */
        const char *addr = json_get_str(cJSON_GetObjectItem(aj, "NetworkStatus"), "Address");
        ASSERT_TRUE(addr && *addr);
        /* SIGTERM removes what it created, and the stand-in exits cleanly. */
        ASSERT_EQ(standin_stop(u), 0);
        _cleanup_free_ char *cn = xasprintf("run-%s", a);
        ASSERT_FALSE(container_exists(cn));
}

TEST(csi_volumes) {
        struct standin *s = standin_start(NULL);
        struct hres r;
        req(s, "PUT", "/v1/volume/csi/vol-t1/create?namespace=sandboxes", TOKEN,
            "{\"Volumes\":[{\"ID\":\"vol-t1\",\"Name\":\"vol-t1\",\"Namespace\":\"sandboxes\",\"PluginID\":\"hostpath\","
            "\"RequestedCapacityMin\":1073741824,\"RequestedCapabilities\":[{\"AccessMode\":\"single-node-writer\","
            "\"AttachmentMode\":\"file-system\"}]}]}",
            &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(json_get_str(cJSON_GetArrayItem(cJSON_GetObjectItem(r.json, "Volumes"), 0), "ID"), "vol-t1");
        hres_done(&r);
        char a[64], st[32];
        register_job(s, "sbx-vol", "cni/sandbox-open", "vol-t1", NULL);
        wait_alloc(s, "sbx-vol", 60, a, st, NULL);
        ASSERT_STREQ(st, "running");
        _cleanup_free_ char *cn = xasprintf("run-%s", a);
        _cleanup_free_ char *mnt = docker_inspect(cn, "{{range .Mounts}}{{.Name}}:{{.Destination}}{{end}}");
        ASSERT_STREQ(mnt, "nomad-standin-csi-sandboxes-vol-t1:/workspace");
        EXPECT_ANSWER(s, "DELETE", "/v1/volume/csi/vol-t1/delete?namespace=sandboxes", TOKEN, NULL, 500, "volume in use: vol-t1");
        EXPECT_ANSWER(s, "DELETE", "/v1/job/sbx-vol?purge=true&namespace=sandboxes", TOKEN, NULL, 200, NULL);
        for (int i = 0; i < 100 && container_exists(cn); i++)
                usleep(100000);
        EXPECT_ANSWER(s, "DELETE", "/v1/volume/csi/vol-t1/delete?namespace=sandboxes", TOKEN, NULL, 200, NULL);
        EXPECT_ANSWER(s, "GET", "/v1/volume/csi/vol-t1?namespace=sandboxes", TOKEN, NULL, 404, NULL);
        /* A job that asks for a volume that does not exist is not placed. */
        char eval[64];
        register_job(s, "sbx-novol", "cni/sandbox-open", "vol-missing", eval);
        _cleanup_free_ char *evp = xasprintf("/v1/evaluation/%s", eval);
        _cleanup_json_ cJSON *ev = get_json(s, evp, 200);
        ASSERT_NOT_NULL(cJSON_GetObjectItem(cJSON_GetObjectItem(ev, "FailedTGAllocs"), "sbx"));
}

/* ---- image pulls (Nomad's docker driver: a missing image is pulled with the task's auth) ---- */

static char preg_image[160];

static void preg_image_remove(void *ud) {
        (void) ud;
        if (preg_image[0]) {
                char *argv[] = { "docker", "rmi", "-f", preg_image, NULL };
                test_run_capture(argv, NULL, 4096);
        }
}

/* A job whose docker task runs image, with an auth block when user is not NULL. */
static void register_image_job(struct standin *s, const char *id, const char *image, const char *user, const char *pass,
                               const char *server) {
        _cleanup_free_ char *b = job_body(id, "cni/sandbox-no-egress", NULL);
        _cleanup_json_ cJSON *j = cJSON_Parse(b);
        cJSON *t = cJSON_GetArrayItem(
                cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "Job"), "TaskGroups"), 0), "Tasks"), 0);
        cJSON *conf = cJSON_GetObjectItem(t, "Config");
        cJSON_ReplaceItemInObject(conf, "image", cJSON_CreateString(image));
        if (user) {
                cJSON *arr = cJSON_AddArrayToObject(conf, "auth");
                cJSON *a = cJSON_CreateObject();
                cJSON_AddItemToArray(arr, a);
                json_add_str(a, "username", user);
                json_add_str(a, "password", pass);
                json_add_str(a, "server_address", server);
        }
        _cleanup_free_ char *text = json_print(j);
        struct hres r;
        req(s, "PUT", "/v1/jobs", TOKEN, text, &r);
        if (r.status != 200)
                test_fail(__FILE__, __LINE__, "register %s: %ld %s", id, r.status, r.body);
        hres_done(&r);
}

/* The task's events of allocation a, "Type: DisplayMessage" one per line (xmalloc'd). */
static char *task_events(struct standin *s, const char *a) {
        _cleanup_free_ char *ap = xasprintf("/v1/allocation/%s?namespace=sandboxes", a);
        _cleanup_json_ cJSON *fa = get_json(s, ap, 200);
        struct strbuf b;
        strbuf_init(&b, 1 << 16);
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(fa, "TaskStates"), "run"), "Events"))
                strbuf_printf(&b, "%s: %s\n", json_get_str(e, "Type"), json_get_str(e, "DisplayMessage"));
        return strbuf_steal(&b);
}

TEST_FULL(missing_image_is_pulled_with_the_task_auth, 240) {
        /* A registry of our own that wants a login (htpasswd, bcrypt), on a loopback port. */
        int port = 17000 + (int) (getpid() % 2000);
        char reg[32];
        _cleanup_free_ char *htpasswd = regtest_htpasswd("puller", "pull-pw");
        regtest_start(port, htpasswd, reg);
        test_on_exit(preg_image_remove, NULL);

        struct standin *s = standin_start(NULL);
        /* The test image goes to that registry and leaves this dockerd. */
        const char *src = getenv("PADDOCK_TEST_IMAGE") ? getenv("PADDOCK_TEST_IMAGE") : "paddock/busybox:local";
        char repo[96];
        snprintf(repo, sizeof(repo), "%s/standin-pull/t%d", reg, (int) getpid());
        snprintf(preg_image, sizeof(preg_image), "%s:v1", repo);
        char *tag_argv[] = { "docker", "tag", (char *) src, preg_image, NULL };
        ASSERT_EQ(test_run_capture(tag_argv, NULL, 4096), 0);
        struct docker *dk = NULL;
        ASSERT_OK(docker_new("/var/run/docker.sock", &dk));
        struct registry creds = { .host = reg, .username = "puller", .password = "pull-pw" };
        _cleanup_free_ char *auth = registry_auth_header_value(&creds);
        if (docker_image_push(dk, repo, "v1", auth, NULL, NULL) < 0)
                test_fail(__FILE__, __LINE__, "push to the test registry: %s", docker_last_error());
        ASSERT_OK(docker_image_remove(dk, preg_image, false));
        ASSERT_EQ(docker_image_exists(dk, preg_image), 0);

        /* Without credentials, and with wrong ones, the pull fails the task: Driver Failure. */
        char a[64], st[32];
        register_image_job(s, "sbx-pull-anon", preg_image, NULL, NULL, NULL);
        wait_alloc(s, "sbx-pull-anon", 60, a, st, NULL);
        ASSERT_STREQ(st, "failed");
        _cleanup_free_ char *ev1 = task_events(s, a);
        ASSERT_CONTAINS(ev1, "Driver: Downloading image");
        char want[256];
        snprintf(want, sizeof(want), "Driver Failure: Failed to pull `%s`: ", preg_image);
        ASSERT_CONTAINS(ev1, want);
        register_image_job(s, "sbx-pull-bad", preg_image, "puller", "wrong-pw", reg);
        wait_alloc(s, "sbx-pull-bad", 60, a, st, NULL);
        ASSERT_STREQ(st, "failed");
        _cleanup_free_ char *ev2 = task_events(s, a);
        ASSERT_CONTAINS(ev2, want);
        ASSERT_EQ(docker_image_exists(dk, preg_image), 0);

        /* With the task's auth block the image is pulled and the task runs it. */
        register_image_job(s, "sbx-pull-ok", preg_image, "puller", "pull-pw", reg);
        wait_alloc(s, "sbx-pull-ok", 120, a, st, NULL);
        _cleanup_free_ char *ev3 = task_events(s, a);
        if (strcmp(st, "running") != 0)
                test_fail(__FILE__, __LINE__, "allocation %s:\n%s", st, ev3);
        ASSERT_CONTAINS(ev3, "Driver: Downloading image");
        ASSERT_EQ(docker_image_exists(dk, preg_image), 1);
        _cleanup_free_ char *cn = xasprintf("run-%s", a);
        _cleanup_free_ char *img = docker_inspect(cn, "{{.Config.Image}}");
        ASSERT_STREQ(img, preg_image);

        /* Present now: the next allocation uses it as it is, no second download. */
        register_image_job(s, "sbx-pull-again", preg_image, NULL, NULL, NULL);
        wait_alloc(s, "sbx-pull-again", 60, a, st, NULL);
        ASSERT_STREQ(st, "running");
        _cleanup_free_ char *ev4 = task_events(s, a);
        ASSERT_FALSE(strstr(ev4, "Downloading image") != NULL);
        docker_free(dk);
        /* A clean stop (under SANITIZE: no report from the pull paths either). */
        ASSERT_EQ(standin_stop(s), 0);
}
