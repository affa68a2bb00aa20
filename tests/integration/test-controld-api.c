/* HTTP-level tests of the controld public API as a demanding client sees it:
 * every create validation rule (400, nothing created), plan limits (403 with the
 * published messages), HTTP edges (404/405/413, ids, pagination, envelopes, request
 * ids), /healthz and /metrics, templates and regions, /wait long-polls, volumes end to
 * end (data survives pause/resume), the reapers for oneShot and vanished containers,
 * the admin CLI and config check, and hostile bodies. Runs a real controld against the
 * real dockerd + gVisor; test-controld.c covers lifecycle, isolation, quota races and
 * restarts, which are not repeated here.
 *
 * Each test's struct ctld is static: the harness's exit hook (ctld_stop) runs from exit()
 * after the test function has returned, so a stack struct would be read after its frame is
 * gone (garbage dir/pid/failed_exit: leaked containers, spurious failures).
 *
 * Tests that document bugs open at the time of writing (they fail until controld is fixed):
 * concurrent_attach_of_one_volume_admits_one, volume_cap_rejection_at_create_leaves_no_sandbox_record
 * (refusals after the record is written leave a failed sandbox record),
 * volume_in_region_the_plan_cannot_use_is_refused (POST /volumes ignores region enabled/plan),
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
#include "cleanup.h"
#include "ctltest.h"
#include "amqptest.h"
#include "testlib.h"

#define LOCAL_REGION "6a06df21cc6bef51342e199e"
#define FAR_REGION "6a06df21cc6bef51342e1999"
#define CLOSED_REGION "6a06df21cc6bef51342e1998"
#define UNKNOWN_HEX "0123456789abcdef01234567"

static double mono_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
static const cJSON *data_of(const struct hres *r) { return jget(r->json, "data"); }
static const char *jstr(const cJSON *o, const char *k) {
        const cJSON *v = jget(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}
static long long jint(const cJSON *o, const char *k) {
        const cJSON *v = jget(o, k);
        return cJSON_IsNumber(v) ? (long long) v->valuedouble : -999999;
}

/* An error answer is exactly {"message": "..."}: JSON, one key, with a request id. Returns NULL
 * when it has that shape and the wanted status/message, else a static description of what's wrong. */
static const char *error_mismatch(const struct hres *r, long status, const char *msg, bool prefix) {
        static char why[2048];
        const char *m = hres_message(r);
        if (r->status != status || !m || (prefix ? strncmp(m, msg, strlen(msg)) != 0 : strcmp(m, msg) != 0)) {
                snprintf(why, sizeof(why), "got %ld %.600s, want %ld \"%s\"%s", r->status, r->body, status, msg,
                         prefix ? "..." : "");
                return why;
        }
        if (!cJSON_IsObject(r->json) || cJSON_GetArraySize(r->json) != 1) {
                snprintf(why, sizeof(why), "error body is not exactly {\"message\"}: %.600s", r->body);
                return why;
        }
        if (strncmp(r->content_type, "application/json", 16) != 0) {
                snprintf(why, sizeof(why), "error Content-Type is '%s'", r->content_type);
                return why;
        }
        if (!r->request_id[0]) {
                snprintf(why, sizeof(why), "no x-request-id on the error");
                return why;
        }
        return NULL;
}

#define ASSERT_ERROR(r, st, msg)                                                                           \
        do {                                                                                               \
                const char *_w = error_mismatch((r), (st), (msg), false);                                  \
                if (_w)                                                                                    \
                        test_fail(__FILE__, __LINE__, "%s", _w);                                           \
        } while (0)
#define ASSERT_ERROR_PREFIX(r, st, msg)                                                                    \
        do {                                                                                               \
                const char *_w = error_mismatch((r), (st), (msg), true);                                   \
                if (_w)                                                                                    \
                        test_fail(__FILE__, __LINE__, "%s", _w);                                           \
        } while (0)

/* One request whose answer must be this error (ASSERT_ERROR); the response is dropped. */
static void expect_error_at(const char *file, int line, struct ctld *c, const char *method, const char *path,
                            const char *key, const char *body, long status, const char *msg) {
        struct hres r;
        http_req(c, method, path, key, body, &r);
        const char *w = error_mismatch(&r, status, msg, false);
        if (w)
                test_fail(file, line, "%s", w);
        hres_done(&r);
}
#define EXPECT_ERROR(c, method, path, key, body, st, msg) \
        expect_error_at(__FILE__, __LINE__, c, method, path, key, body, st, msg)

/* A success envelope: {message, data}, JSON, request id. */
static void assert_envelope(const struct hres *r, long status, const char *msg, const char *file, int line) {
        if (r->status != status)
                test_fail(file, line, "got %ld %.600s, want %ld", r->status, r->body, status);
        if (!r->json || !cJSON_IsString(jget(r->json, "message")) || strcmp(hres_message(r), msg) != 0 ||
            !jget(r->json, "data"))
                test_fail(file, line, "not an envelope with message \"%s\": %.600s", msg, r->body);
        if (strncmp(r->content_type, "application/json", 16) != 0)
                test_fail(file, line, "Content-Type '%s'", r->content_type);
        if (!r->request_id[0])
                test_fail(file, line, "no x-request-id");
}
#define ASSERT_ENVELOPE(r, st, msg) assert_envelope((r), (st), (msg), __FILE__, __LINE__)

static long long total_count(struct ctld *c, const char *key, const char *path) {
        struct hres r;
        http_req(c, "GET", path, key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, !strncmp(path, "/volumes", 8) ? "Volumes fetched" : "Sandboxes fetched");
        long long n = jint(data_of(&r), "totalCount");
        hres_done(&r);
        return n;
}

/* Containers of an account, by the label the docker driver puts on them. */
static char *account_containers(const char *acc) {
        char filter[128];
        char *out = NULL;
        snprintf(filter, sizeof(filter), "label=paddock.account=%s", acc);
        char *argv[] = { "docker", "ps", "-a", "-q", "--filter", filter, NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 65536), 0);
        return out;
}

static void get_sandbox(struct ctld *c, const char *key, const char *id, struct hres *r) {
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(c, "GET", path, key, NULL, r);
        ASSERT_ENVELOPE(r, 200, "Sandbox fetched");
}

static void op(struct ctld *c, const char *key, const char *method, const char *id, const char *suffix, struct hres *r) {
        char path[160];
        snprintf(path, sizeof(path), "/sandboxes/%s%s", id, suffix);
        http_req(c, method, path, key, NULL, r);
}

static void pause_resume_cycle(struct ctld *c, const char *key, const char *id) {
        struct hres r;
        op(c, key, "POST", id, "/pause", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_message(&r), "Sandbox pause requested");
        hres_done(&r);
        op(c, key, "GET", id, "/wait?timeout=60&status=paused", &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "paused");
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        op(c, key, "POST", id, "/resume", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_message(&r), "Sandbox resume requested");
        hres_done(&r);
        op(c, key, "GET", id, "/wait?timeout=60&status=ready", &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);
        ASSERT_TRUE(docker_container_running(container_name(id)));
}

/* docker exec paddock-<id> sh -c CMD (fixed argv; CMD is test text, never user input). */
static int dexec(const char *id, const char *cmd, char **out) {
        char name[64];
        snprintf(name, sizeof(name), "paddock-%s", id);
        char *argv[] = { "docker", "exec", name, "sh", "-c", (char *) cmd, NULL };
        return test_run_capture(argv, out, 65536);
}

/* Volumes are not removed by the harness: remember their ids and remove the docker volumes at
 * exit. Registered before ctld_start so it runs after ctld_stop has removed the containers. */
static char vol_ids[16][25];
static int n_vol_ids;
static void vol_cleanup(void *ud) {
        (void) ud;
        for (int i = 0; i < n_vol_ids; i++) {
                char h[64];
                snprintf(h, sizeof(h), "paddock-vol-%s", vol_ids[i]);
                char *argv[] = { "docker", "volume", "rm", "-f", h, NULL };
                test_run_capture(argv, NULL, 4096);
        }
        n_vol_ids = 0;
}
static void track_volume(const char *id) {
        static bool hooked;
        if (!hooked) {
                /* The tmpdir's atexit removal must be registered first so it runs after the exit
                 * hooks (ctld_stop needs the config that lives there). */
                (void) test_tmpdir();
                test_on_exit(vol_cleanup, NULL);
                hooked = true;
        }
        if (id && n_vol_ids < 16)
                snprintf(vol_ids[n_vol_ids++], 25, "%s", id);
}

static bool docker_volume_exists(const char *vol_id) {
        char h[64];
        snprintf(h, sizeof(h), "paddock-vol-%s", vol_id);
        char *argv[] = { "docker", "volume", "inspect", h, NULL };
        return test_run_capture(argv, NULL, 65536) == 0;
}

/* Runs argv capturing stdout and stderr together. */
static int run_all_output(char *const argv[], char **ret_out) {
        int pfd[2];
        ASSERT_EQ(pipe(pfd), 0);
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                dup2(pfd[1], STDOUT_FILENO);
                dup2(pfd[1], STDERR_FILENO);
                close(pfd[0]);
                close(pfd[1]);
                execv(argv[0], argv);
                _exit(127);
        }
        close(pfd[1]);
        size_t len = 0, cap = 65536;
        char *buf = malloc(cap + 1);
        ASSERT_NOT_NULL(buf);
        for (;;) {
                ssize_t n = read(pfd[0], buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0 || (len += (size_t) n) == cap)
                        break;
        }
        close(pfd[0]);
        buf[len] = 0;
        int st;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR)
                ;
        *ret_out = buf;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

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
/* 1. Every validation rule of POST /sandboxes: 400, the field named, nothing created.         */

static char *allow_list_json(int n) {
        size_t cap = (size_t) n * 24 + 128;
        char *s = malloc(cap);
        size_t o = (size_t) snprintf(s, cap, "{\"egress\":{\"mode\":\"restricted\",\"allow\":[");
        for (int i = 0; i < n; i++)
                o += (size_t) snprintf(s + o, cap - o, "%s\"10.0.%d.%d\"", i ? "," : "", i / 200, i % 200 + 1);
        snprintf(s + o, cap - o, "]}}");
        return s;
}

TEST_FULL(create_validation_rules_are_400_and_create_nothing, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char acc[25];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "validator", acc);
        _cleanup_free_ char *allow51 = allow_list_json(51);
        char name65[128], body_name65[200];
        memset(name65, 'n', 65);
        name65[65] = 0;
        snprintf(body_name65, sizeof(body_name65), "{\"name\":\"%s\"}", name65);

        static const char *IPV6 = "is an IPv6 address; IPv6 is not supported, use an IPv4 address, a CIDR range or a hostname";
        const struct { const char *body; const char *msg; bool prefix; } rows[] = {
                /* syntax and shape */
                { "{", "Malformed JSON", true },
                { "{\"name\":\"a\",}", "Malformed JSON", true },
                { "{\"name\":'a'}", "Malformed JSON", true },
                { "{} {}", "Malformed JSON", true },
                { "[]", "Request body must be a JSON object", false },
                { "\"just a string\"", "Request body must be a JSON object", false },
                { "42", "Request body must be a JSON object", false },
                { "null", "Request body must be a JSON object", false },
                { "{\"nmae\":\"x\"}", "Unknown field 'nmae'", false },
                { "{\"destroy_timeout\":\"1h\"}", "Unknown field 'destroy_timeout'; did you mean 'destroyTimeout'?", false },
                { "{\"specs\":{\"cpus\":100}}", "Unknown field 'specs.cpus'", false },
                { "{\"egress\":{\"mode\":\"open\",\"allowed\":[]}}", "Unknown field 'egress.allowed'", false },
                { "{\"name\":\"a\",\"name\":\"b\"}", "Duplicate field 'name'", false },
                /* types */
                { "{\"name\":5}", "name must be a string", false },
                { "{\"specs\":{\"cpu\":\"500\"}}", "specs.cpu must be an integer between 1 and 2000", false },
                { "{\"specs\":{\"cpu\":500.0}}", "specs.cpu must be an integer between 1 and 2000", false },
                { "{\"specs\":{\"memory\":1e3}}", "specs.memory must be an integer between 1 and 2048", false },
                { "{\"specs\":[]}", "specs must be an object with cpu, memory and disk", false },
                { "{\"autoDestroy\":\"true\",\"destroyTimeout\":\"1h\"}", "autoDestroy must be true or false", false },
                { "{\"oneShot\":1}", "oneShot must be true or false", false },
                { "{\"persistent\":\"yes\"}", "persistent must be true or false", false },
                { "{\"egress\":\"deny_all\"}", "egress must be an object with mode and allow", false },
                /* ranges */
                { "{\"specs\":{\"cpu\":0}}", "specs.cpu must be an integer between 1 and 2000", false },
                { "{\"specs\":{\"cpu\":2001}}", "specs.cpu must be an integer between 1 and 2000", false },
                { "{\"specs\":{\"cpu\":-1}}", "specs.cpu must be an integer between 1 and 2000", false },
                { "{\"specs\":{\"memory\":0}}", "specs.memory must be an integer between 1 and 2048", false },
                { "{\"specs\":{\"memory\":4096}}", "specs.memory must be an integer between 1 and 2048", false },
                { "{\"specs\":{\"disk\":6}}", "specs.disk must be an integer between 1 and 5", false },
                { "{\"specs\":{\"disk\":99999999999999999999}}", "specs.disk must be an integer between 1 and 5", false },
                /* names and ids */
                { body_name65, "name must be 1 to 64 characters without control characters", false },
                { "{\"name\":\"\"}", "name must be 1 to 64 characters without control characters", false },
                { "{\"name\":\"tab\\there\"}", "name must be 1 to 64 characters without control characters", false },
                { "{\"name\":\"evil\\u202eexe.txt\"}", "name must be 1 to 64 characters without control characters", false },
                { "{\"template\":\"Python 3\"}", "template must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-'", false },
                { "{\"template\":\"../etc\"}", "template must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-'", false },
                { "{\"template\":\"\"}", "template must be 1 to 64 characters of a-z, 0-9, '.', '_' and '-'", false },
                { "{\"region\":\"Local Zone\"}", "region must be \"auto\", a region id or a region name (1 to 64 characters of a-z, 0-9 and '-')", false },
                { "{\"teamId\":\"xyz\"}", "teamId must be a 24-character lowercase hex id", false },
                { "{\"teamId\":\"0123456789ABCDEF01234567\"}", "teamId must be a 24-character lowercase hex id", false },
                { "{\"environmentId\":\"0123456789abcdef0123456\"}", "environmentId must be a 24-character lowercase hex id", false },
                { "{\"volumeId\":\"0123456789abcdef012345678\"}", "volumeId must be a 24-character lowercase hex id", false },
                { "{\"volumeId\":\"0123456789abcdeg01234567\"}", "volumeId must be a 24-character lowercase hex id", false },
                { "{\"fromSnapshot\":\"snap-1\"}", "fromSnapshot must be a 24-character lowercase hex id", false },
                /* destroy timeout */
                { "{\"autoDestroy\":true,\"destroyTimeout\":\"2h\"}", "destroyTimeout must be one of 30m, 1h, 3h, 6h, 12h, 18h", false },
                { "{\"autoDestroy\":true,\"destroyTimeout\":\"30M\"}", "destroyTimeout must be one of 30m, 1h, 3h, 6h, 12h, 18h", false },
                { "{\"autoDestroy\":true}", "destroyTimeout is required when autoDestroy is true", false },
                { "{\"autoDestroy\":true,\"destroyTimeout\":null}", "destroyTimeout is required when autoDestroy is true", false },
                /* egress */
                { "{\"blockOutbound\":true,\"egress\":{\"mode\":\"deny_all\"}}",
                  "Cannot set both egress and blockOutbound; use egress.mode = \"deny_all\" instead of blockOutbound", false },
                { "{\"blockOutbound\":false,\"egress\":{\"mode\":\"open\"}}",
                  "Cannot set both egress and blockOutbound; use egress.mode = \"deny_all\" instead of blockOutbound", false },
                { "{\"egress\":{\"mode\":\"closed\"}}", "egress.mode must be one of open, restricted, deny_all", false },
                { "{\"egress\":{}}", "egress.mode is required (open, restricted or deny_all)", false },
                { "{\"egress\":{\"mode\":\"open\",\"allow\":[\"1.1.1.1\"]}}", "egress.allow must be omitted unless egress.mode is restricted", false },
                { allow51, "egress.allow must have at most 50 entries", false },
                { "{\"egress\":{\"mode\":\"restricted\",\"allow\":\"1.1.1.1\"}}", "egress.allow must be an array of strings", false },
                { "{\"egress\":{\"mode\":\"restricted\",\"allow\":[7]}}", "egress.allow[0] must be a string", false },
                { "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"1.1.1.1\",\"2001:db8::1\"]}}", NULL, false }, /* IPv6, below */
                { "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"*.example.com\"]}}",
                  "egress.allow[0] (\"*.example.com\") is a wildcard; wildcards are not supported, list each hostname instead", false },
                { "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"10.0.0.1/8\"]}}",
                  "egress.allow[0] (\"10.0.0.1/8\") has host bits set; did you mean 10.0.0.0/8?", false },
                { "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"127.1\"]}}",
                  "egress.allow[0] (\"127.1\") is not a valid IPv4 address: use four decimal numbers 0..255 without leading zeros, e.g. 10.0.0.1", false },
                { "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"https://api.example.com\"]}}",
                  "egress.allow[0] (\"https://api.example.com\") is a URL; give only the hostname, e.g. api.example.com", false },
                /* volumes */
                { "{\"volumeId\":\"" UNKNOWN_HEX "\",\"persistent\":true,\"persistentDiskGB\":10}",
                  "Cannot set both volumeId and persistent; volumeId attaches an existing volume, persistent creates a new one", false },
                { "{\"volumeId\":\"" UNKNOWN_HEX "\",\"persistentDiskGB\":10}",
                  "Cannot set both volumeId and persistentDiskGB; the size of an existing volume is fixed", false },
                { "{\"persistentDiskGB\":10}", "persistentDiskGB requires persistent to be true", false },
                { "{\"persistent\":true}", "persistentDiskGB is required when persistent is true (an integer between 10 and 50)", false },
                { "{\"persistent\":true,\"persistentDiskGB\":9}", "persistentDiskGB must be an integer between 10 and 50", false },
                { "{\"persistent\":true,\"persistentDiskGB\":51}", "persistentDiskGB must be an integer between 10 and 50", false },
                { "{\"mountPath\":\"workspace\"}", "mountPath must be an absolute path (starting with '/')", false },
                { "{\"mountPath\":\"/\"}", "mountPath must not be '/'", false },
                { "{\"mountPath\":\"/data/../etc\"}", "mountPath must not contain '.' or '..' components", false },
                { "{\"mountPath\":\"/data/..\"}", "mountPath must not contain '.' or '..' components", false },
                { "{\"mountPath\":\"/proc/x\"}", "mountPath must not be /proc or below it", false },
                { "{\"mountPath\":\"/data:rw\"}", "mountPath may only contain letters, digits, '/', '.', '_', '-', '@' and '+'", false },
                /* snapshots */
                { "{\"snapshotMode\":\"automatic\"}",
                  "snapshotFrequency is required when snapshotMode is automatic (a 5-field cron expression, e.g. \"0 */2 * * *\")", false },
                { "{\"snapshotFrequency\":\"0 * * * *\"}", "snapshotFrequency is only allowed when snapshotMode is automatic", false },
                { "{\"snapshotMode\":\"manual\",\"snapshotFrequency\":\"0 * * * *\"}",
                  "snapshotFrequency is only allowed when snapshotMode is automatic", false },
                { "{\"snapshotMode\":\"hourly\"}", "snapshotMode must be one of manual, automatic", false },
                { "{\"snapshotMode\":\"automatic\",\"snapshotFrequency\":\"61 * * * *\"}",
                  "snapshotFrequency is not a valid cron expression: minute field: value 61 is outside 0-59", false },
                { "{\"snapshotMode\":\"automatic\",\"snapshotFrequency\":\"* * *\"}",
                  "snapshotFrequency must be a 5-field cron expression (minute hour day-of-month month day-of-week), e.g. \"0 */2 * * *\"", false },
                { "{\"snapshotMode\":\"automatic\",\"snapshotFrequency\":\"@hourly\"}",
                  "snapshotFrequency is not a valid cron expression", true },
        };
        int bad = 0;
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                struct hres r;
                char ipv6[256];
                const char *want = rows[i].msg;
                if (!want) {
                        snprintf(ipv6, sizeof(ipv6), "egress.allow[1] (\"2001:db8::1\") %s", IPV6);
                        want = ipv6;
                }
                http_req(&c, "POST", "/sandboxes", key, rows[i].body, &r);
                const char *w = error_mismatch(&r, 400, want, rows[i].prefix);
                if (w) {
                        fprintf(stderr, "  row %zu %.200s: %s\n", i, rows[i].body, w);
                        bad++;
                }
                hres_done(&r);
        }
        /* Nothing was created: no record, no container, no volume. */
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 0);
        ASSERT_EQ(total_count(&c, key, "/volumes"), 0);
        _cleanup_free_ char *ps = account_containers(acc);
        ASSERT_STREQ(ps, "");
        ASSERT_EQ(bad, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* 2. Plan limits: 403 with the published-style messages; unknown names are 400.               */

/* controld admin account limits / plan: an operator raises one account's caps without editing
 * the config; the running daemon applies them at the account's next request, other accounts
 * keep the plan's, KEY=plan goes back, and a bad key or value changes nothing. */
TEST_FULL(admin_account_limits_apply_at_once_to_that_account_only, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char acc[25];
        need_docker();
        ctld_start(&c, NULL, "[plan \"roomy\"]\nmax_volumes = 10\n");
        _cleanup_free_ char *key = ctld_account_key(&c, "raised", NULL, acc);
        _cleanup_free_ char *other = ctld_account_key(&c, "plain", NULL, NULL);
        const char *vol = "{\"name\":\"v%d\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}";
        char body[160];
        for (int i = 0; i < 2; i++) {
                snprintf(body, sizeof(body), vol, i);
                HTTP_EXPECT(&c, "POST", "/volumes", key, body, 201);
                HTTP_EXPECT(&c, "POST", "/volumes", other, body, 201);
        }
        snprintf(body, sizeof(body), vol, 2);
        EXPECT_ERROR(&c, "POST", "/volumes", key, body, 403,
                     "Your plan allows up to 2 volumes. Delete an existing one or upgrade.");

        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "limits", "raised", "max_volumes=4", "max_volume_gb=50", NULL), 0);
        ASSERT_CONTAINS(out, "plan\tdefault\n");
        ASSERT_CONTAINS(out, "max_volumes\t4\taccount\n");
        ASSERT_CONTAINS(out, "max_volume_gb\t50\taccount\n");
        ASSERT_CONTAINS(out, "max_concurrent\t3\tplan\n");
        /* No restart: the next request runs under the new caps; the other account does not. */
        HTTP_EXPECT(&c, "POST", "/volumes", key, body, 201);
        EXPECT_ERROR(&c, "POST", "/volumes", other, body, 403,
                     "Your plan allows up to 2 volumes. Delete an existing one or upgrade.");
        HTTP_EXPECT(&c, "POST", "/volumes", key, "{\"name\":\"big\",\"sizeGB\":50,\"region\":\"" LOCAL_REGION "\"}", 201);
        snprintf(body, sizeof(body), vol, 3);
        EXPECT_ERROR(&c, "POST", "/volumes", key, body, 403,
                     "Your plan allows up to 4 volumes. Delete an existing one or upgrade.");

        /* Refused whole: a bad key or an out-of-range value, even beside a good one. */
        ASSERT_NE(ctld_admin(&c, NULL, "account", "limits", "raised", "max_volumes=9", "max_bananas=1", NULL), 0);
        ASSERT_NE(ctld_admin(&c, NULL, "account", "limits", "raised", "max_volumes=9", "max_cpu=5000", NULL), 0);
        ASSERT_NE(ctld_admin(&c, NULL, "account", "limits", "raised", "max_volumes", NULL), 0);
        ASSERT_NE(ctld_admin(&c, NULL, "account", "limits", "nobody", "max_volumes=9", NULL), 0);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "limits", acc, NULL), 0); /* by id; shows only */
        ASSERT_CONTAINS(out, "max_volumes\t4\taccount\n");

        /* Back to the plan's amount. */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "limits", "raised", "max_volumes=plan", NULL), 0);
        ASSERT_CONTAINS(out, "max_volumes\t2\tplan\n");
        EXPECT_ERROR(&c, "POST", "/volumes", key, body, 403,
                     "Your plan allows up to 2 volumes. Delete an existing one or upgrade.");

        /* Another plan for the account; an unknown plan is refused. */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "plan", "raised", "roomy", NULL), 0);
        ASSERT_CONTAINS(out, "plan\troomy\n");
        ASSERT_CONTAINS(out, "max_volumes\t10\tplan\n");
        HTTP_EXPECT(&c, "POST", "/volumes", key, body, 201);
        ASSERT_NE(ctld_admin(&c, NULL, "account", "plan", "raised", "no-such-plan", NULL), 0);
}

TEST_FULL(plan_limits_are_403_unknown_names_400, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char acc[25], id[25];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "capped", acc);
        const struct { const char *body; long status; const char *msg; } rows[] = {
                { "{\"specs\":{\"cpu\":1500}}", 403,
                  "Your plan allows up to 1000 MHz of CPU per sandbox (specs.cpu). Lower it or upgrade." },
                { "{\"specs\":{\"memory\":2000}}", 403,
                  "Your plan allows up to 1024 MB of memory per sandbox (specs.memory). Lower it or upgrade." },
                { "{\"region\":\"far\"}", 403, "Your plan does not allow sandboxes in region far. Pick another region or upgrade." },
                { "{\"region\":\"" FAR_REGION "\"}", 403,
                  "Your plan does not allow sandboxes in region far. Pick another region or upgrade." },
                { "{\"region\":\"closed\"}", 403, "Region closed is not accepting new sandboxes." },
                { "{\"region\":\"" CLOSED_REGION "\"}", 403, "Region closed is not accepting new sandboxes." },
                { "{\"region\":\"nowhere\"}", 400, "Unknown region 'nowhere'. List the available ones with GET /sandboxes/regions." },
                { "{\"region\":\"" UNKNOWN_HEX "\"}", 400,
                  "Unknown region '" UNKNOWN_HEX "'. List the available ones with GET /sandboxes/regions." },
                { "{\"template\":\"nope\"}", 400, "Unknown template 'nope'. List the available ones with GET /sandbox/templates." },
                { "{\"persistent\":true,\"persistentDiskGB\":30}", 403, "Your plan allows volumes up to 20GB. Reduce size or upgrade." },
                { "{\"fromSnapshot\":\"" UNKNOWN_HEX "\"}", 404, "Snapshot not found" },
                { "{\"volumeId\":\"" UNKNOWN_HEX "\"}", 404, "Volume not found" },
        };
        int bad = 0;
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                struct hres r;
                http_req(&c, "POST", "/sandboxes", key, rows[i].body, &r);
                const char *w = error_mismatch(&r, rows[i].status, rows[i].msg, false);
                if (w) {
                        fprintf(stderr, "  row %zu %s: %s\n", i, rows[i].body, w);
                        bad++;
                }
                hres_done(&r);
        }
        ASSERT_EQ(bad, 0);
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 0);
        _cleanup_free_ char *ps = account_containers(acc);
        ASSERT_STREQ(ps, "");
        /* The limits are inclusive and the allowed region works by id, name and "auto". */
        ctld_create(&c, key, "{\"region\":\"" LOCAL_REGION "\",\"specs\":{\"cpu\":1000,\"memory\":1024}}", id);
        struct hres r;
        get_sandbox(&c, key, id, &r);
        ASSERT_STREQ(jstr(jget(data_of(&r), "region"), "id"), LOCAL_REGION);
        ASSERT_EQ(jint(jget(data_of(&r), "specs"), "cpu"), 1000);
        ASSERT_EQ(jint(jget(data_of(&r), "specs"), "memory"), 1024);
        hres_done(&r);
        ctld_create(&c, key, "{\"region\":\"auto\"}", id);
        get_sandbox(&c, key, id, &r);
        ASSERT_STREQ(jstr(jget(data_of(&r), "region"), "name"), "local");
        hres_done(&r);
}

TEST_FULL(spending_limit_pauses_creation, 90) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char id[25];
        need_docker();
        ctld_start(&c, NULL,
                   "[plan \"pricey\"]\nmax_concurrent = 5\nspending_limit = 0.000001\nprice_cpu_mhz_hour = 1000\n"
                   "price_mb_hour = 1000\n");
        _cleanup_free_ char *key = ctld_account_key(&c, "spender", "pricey", NULL);
        _cleanup_free_ char *other = ctld_account_key(&c, "frugal", NULL, NULL);
        ctld_create(&c, key, NULL, id);
        sleep(3); /* stats_interval is 1s: usage gets metered */
        struct hres r;
        http_req(&c, "POST", "/sandboxes", key, "{}", &r);
        ASSERT_ERROR(&r, 403,
                     "Sandbox creation paused, spending limit reached. Raise the limit or wait for the next billing cycle.");
        hres_done(&r);
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 1);
        /* The running one is untouched, and its stats were sampled meanwhile. */
        get_sandbox(&c, key, id, &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);
        op(&c, key, "GET", id, "/stats", &r);
        ASSERT_ENVELOPE(&r, 200, "Sandbox stats fetched");
        const cJSON *avg = jget(data_of(&r), "average");
        ASSERT_EQ(jint(jget(avg, "cpu"), "size"), 250);
        ASSERT_EQ(jint(jget(avg, "memory"), "size"), 128);
        ASSERT_GE(cJSON_GetArraySize(jget(data_of(&r), "results")), 1);
        hres_done(&r);
        /* Another account on an unpriced plan is not affected. */
        ctld_create(&c, other, NULL, id);
}

/* ------------------------------------------------------------------------------------------ */
/* 3. HTTP edges.                                                                              */

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
        char big[2048 + 1];
        memset(big, ' ', 2048);
        big[0] = '{';
        big[2047] = '}';
        big[2048] = 0;
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, big, 413, "Request body too large (limit 1024 bytes)");
        {
                const char *h[] = { kh, "Content-Type: application/json", "Transfer-Encoding: chunked", NULL };
                http_req_full(&c, "POST", "/sandboxes", h, big, 2048, &r);
                ASSERT_ERROR(&r, 413, "Request body too large (limit 1024 bytes)");
                hres_done(&r);
        }
        EXPECT_ERROR(&c, "POST", "/volumes", key, big, 413, "Request body too large (limit 1024 bytes)");
        char edge[1024 + 1];
        memset(edge, ' ', 1024);
        edge[0] = '[';
        edge[1023] = ']';
        edge[1024] = 0;
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
                EXPECT_ERROR(&c, "PUT", path, key, "{\"mode\":\"restricted\"}", 400, "allow is required with at least one entry when mode is restricted");
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

/* ------------------------------------------------------------------------------------------ */
/* 5. Templates and regions.                                                                   */

TEST(templates_and_regions_lists) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "browser", NULL);

        HTTP_EXPECT(&c, "GET", "/sandbox/templates", NULL, NULL, 401);
        http_req(&c, "GET", "/sandbox/templates", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Templates fetched");
        const cJSON *a = data_of(&r);
        ASSERT_TRUE(cJSON_IsArray(a));
        ASSERT_EQ(cJSON_GetArraySize(a), 3);
        const struct { const char *name, *display, *desc; } want[] = {
                { "busybox", "BusyBox", "Tiny test image" },
                { "python-3.11", "Python 3.11", "Debian 12 with Python" },
                { "missing-image", "missing-image", "" },
        };
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                const cJSON *t = NULL, *e;
                cJSON_ArrayForEach(e, a)
                        if (jstr(e, "name") && !strcmp(jstr(e, "name"), want[i].name))
                                t = e;
                if (!t)
                        test_fail(__FILE__, __LINE__, "template %s missing: %s", want[i].name, r.body);
                ASSERT_STREQ(jstr(t, "display_name"), want[i].display);
                ASSERT_STREQ(jstr(t, "description"), want[i].desc);
                /* Images are an operator detail and stay out of the public list. */
                ASSERT_TRUE(strstr(r.body, "paddock/does-not-exist") == NULL);
        }
        hres_done(&r);

        http_req(&c, "GET", "/sandboxes/regions", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Regions fetched");
        const cJSON *regions = jget(data_of(&r), "regions");
        ASSERT_TRUE(cJSON_IsArray(regions));
        ASSERT_EQ(cJSON_GetArraySize(regions), 3);
        const cJSON *g;
        bool saw_local = false, saw_closed = false;
        cJSON_ArrayForEach(g, regions) {
                static const char *const f[] = { "id", "name", "country", "continent" };
                for (size_t i = 0; i < ELEMENTSOF(f); i++)
                        if (!cJSON_IsString(jget(g, f[i])))
                                test_fail(__FILE__, __LINE__, "region lacks string '%s': %s", f[i], r.body);
                ASSERT_TRUE(cJSON_IsBool(jget(g, "enabled")));
                ASSERT_STREQ(jstr(g, "type"), "sandbox");
                ASSERT_EQ(strlen(jstr(g, "id")), 24);
                if (!strcmp(jstr(g, "name"), "local")) {
                        saw_local = true;
                        ASSERT_STREQ(jstr(g, "id"), LOCAL_REGION);
                        ASSERT_STREQ(jstr(g, "country"), "Local");
                        ASSERT_STREQ(jstr(g, "continent"), "Local");
                        ASSERT_TRUE(cJSON_IsTrue(jget(g, "enabled")));
                }
                if (!strcmp(jstr(g, "name"), "closed")) {
                        saw_closed = true;
                        ASSERT_STREQ(jstr(g, "id"), CLOSED_REGION);
                        ASSERT_TRUE(cJSON_IsFalse(jget(g, "enabled")));
                }
        }
        ASSERT_TRUE(saw_local);
        ASSERT_TRUE(saw_closed);
        hres_done(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 6. /wait long-polls.                                                                        */

struct waiter { struct ctld *c; const char *key; char path[160]; long status; char st[32]; double dt; };

static void *wait_thread(void *p) {
        struct waiter *w = p;
        struct hres r;
        double t0 = mono_s();
        http_req(w->c, "GET", w->path, w->key, NULL, &r);
        w->dt = mono_s() - t0;
        w->status = r.status;
        snprintf(w->st, sizeof(w->st), "%s", jstr(data_of(&r), "status") ? jstr(data_of(&r), "status") : "?");
        hres_done(&r);
        return NULL;
}

TEST_FULL(wait_returns_settled_times_out_and_does_not_block_others, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char id[25];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "waiter", id);

        /* Settled already: at once, the sandbox in the usual envelope. */
        double t0 = mono_s();
        op(&c, key, "GET", id, "/wait?timeout=5", &r);
        ASSERT_ENVELOPE(&r, 200, "Sandbox fetched");
        ASSERT_STREQ(jstr(data_of(&r), "id"), id);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);
        ASSERT_TRUE(mono_s() - t0 < 3.0);
        op(&c, key, "GET", id, "/wait?timeout=0&status=paused", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);

        /* Asking for a status that does not come: the current sandbox after the timeout. */
        t0 = mono_s();
        op(&c, key, "GET", id, "/wait?timeout=2&status=paused", &r);
        double dt = mono_s() - t0;
        ASSERT_ENVELOPE(&r, 200, "Sandbox fetched");
        ASSERT_STREQ(jstr(data_of(&r), "status"), "ready");
        hres_done(&r);
        ASSERT_TRUE(dt >= 1.5 && dt < 15);

        /* A long-poll in flight does not hold up other requests, and a pause ends it. */
        struct waiter w = { .c = &c, .key = key };
        snprintf(w.path, sizeof(w.path), "/sandboxes/%s/wait?timeout=20&status=paused", id);
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, wait_thread, &w), 0);
        usleep(300000);
        for (int i = 0; i < 5; i++) {
                t0 = mono_s();
                HTTP_EXPECT(&c, "GET", "/healthz", NULL, NULL, 200);
                get_sandbox(&c, key, id, &r);
                hres_done(&r);
                ASSERT_TRUE(mono_s() - t0 < 2.0);
        }
        op(&c, key, "POST", id, "/pause", &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        pthread_join(t, NULL);
        ASSERT_EQ(w.status, 200);
        ASSERT_STREQ(w.st, "paused");
        ASSERT_TRUE(w.dt < 18);

        /* Waiting for a status on a destroyed sandbox returns at once (it can never come). */
        op(&c, key, "DELETE", id, "", &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);
        t0 = mono_s();
        op(&c, key, "GET", id, "/wait?timeout=20&status=ready", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        hres_done(&r);
        ASSERT_TRUE(mono_s() - t0 < 3.0);
}

/* ------------------------------------------------------------------------------------------ */
/* 7. Volumes.                                                                                 */

static void create_volume(struct ctld *c, const char *key, const char *name, int size, char ret_id[25]) {
        char body[256];
        struct hres r;
        snprintf(body, sizeof(body), "{\"name\":\"%s\",\"sizeGB\":%d,\"region\":\"" LOCAL_REGION "\"}", name, size);
        http_req(c, "POST", "/volumes", key, body, &r);
        ASSERT_ENVELOPE(&r, 201, "Volume created");
        snprintf(ret_id, 25, "%s", jstr(data_of(&r), "id"));
        track_volume(ret_id);
        hres_done(&r);
}

TEST_FULL(volumes_create_attach_survive_pause_detach_delete, 180) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char vid[25], vid2[25], sid[25], sid2[25], path[96], body[256];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "keeper", NULL, NULL);
        _cleanup_free_ char *other = ctld_account_key(&c, "snoop", NULL, NULL);

        http_req(&c, "POST", "/volumes", key, "{\"name\":\"data-a\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}", &r);
        ASSERT_ENVELOPE(&r, 201, "Volume created");
        const cJSON *v = data_of(&r);
        snprintf(vid, sizeof(vid), "%s", jstr(v, "id"));
        track_volume(vid);
        ASSERT_EQ(strlen(vid), 24);
        ASSERT_STREQ(jstr(v, "name"), "data-a");
        ASSERT_STREQ(jstr(v, "type"), "web");
        ASSERT_EQ(jint(v, "size"), 10);
        ASSERT_STREQ(jstr(jget(v, "region"), "id"), LOCAL_REGION);
        ASSERT_STREQ(jstr(jget(v, "region"), "type"), "sandbox");
        ASSERT_TRUE(cJSON_IsNull(jget(v, "attached_sandbox_id")));
        ASSERT_TRUE(cJSON_IsNull(jget(v, "attached_project_id")));
        ASSERT_TRUE(cJSON_IsString(jget(v, "created_at")));
        hres_done(&r);
        ASSERT_TRUE(docker_volume_exists(vid));

        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"data-a\",\"sizeGB\":20,\"region\":\"" LOCAL_REGION "\"}", 400, "A volume named \"data-a\" already exists");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"big\",\"sizeGB\":30,\"region\":\"" LOCAL_REGION "\"}", 403, "Your plan allows volumes up to 20GB. Reduce size or upgrade.");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"lost\",\"sizeGB\":10,\"region\":\"" UNKNOWN_HEX "\"}", 400, "region: unknown region id '" UNKNOWN_HEX "'. List regions with GET /sandboxes/regions.");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"Bad Name\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}", 400, "name must be 1 to 40 characters of lowercase letters, digits and '-'");
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"small\",\"sizeGB\":5,\"region\":\"" LOCAL_REGION "\"}", 400, "sizeGB must be an integer between 10 and 50");
        http_req(&c, "POST", "/volumes", key, "{\"name\":\"noregion\",\"sizeGB\":10}", &r);
        ASSERT_ERROR_PREFIX(&r, 400, "region is required");
        hres_done(&r);
        /* The same name is fine for another account (names are unique per user). */
        create_volume(&c, other, "data-a", 10, vid2);

        create_volume(&c, key, "data-b", 20, vid2);
        EXPECT_ERROR(&c, "POST", "/volumes", key, "{\"name\":\"data-c\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}", 403, "Your plan allows up to 2 volumes. Delete an existing one or upgrade.");

        http_req(&c, "GET", "/volumes", key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Volumes fetched");
        ASSERT_EQ(jint(data_of(&r), "totalCount"), 2);
        ASSERT_EQ(cJSON_GetArraySize(jget(data_of(&r), "data")), 2);
        /* newest first */
        ASSERT_STREQ(jstr(cJSON_GetArrayItem(jget(data_of(&r), "data"), 0), "id"), vid2);
        hres_done(&r);
        snprintf(path, sizeof(path), "/volumes/%s", vid);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Volume fetched");
        ASSERT_STREQ(jstr(data_of(&r), "name"), "data-a");
        hres_done(&r);

        /* Another account sees nothing of it and can't attach it. */
        EXPECT_ERROR(&c, "GET", path, other, NULL, 404, "Volume not found");
        EXPECT_ERROR(&c, "DELETE", path, other, NULL, 404, "Volume not found");
        snprintf(body, sizeof(body), "{\"volumeId\":\"%s\"}", vid);
        EXPECT_ERROR(&c, "POST", "/sandboxes", other, body, 404, "Volume not found");
        ASSERT_EQ(total_count(&c, other, "/sandboxes"), 0);

        /* Attach at create. */
        ctld_create(&c, key, body, sid);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(jstr(data_of(&r), "attached_sandbox_id"), sid);
        ASSERT_STREQ(jstr(data_of(&r), "mount_path"), "/workspace");
        ASSERT_TRUE(cJSON_IsString(jget(data_of(&r), "last_attached_at")));
        hres_done(&r);
        get_sandbox(&c, key, sid, &r);
        ASSERT_STREQ(jstr(data_of(&r), "volume_id"), vid);
        ASSERT_STREQ(jstr(data_of(&r), "mount_path"), "/workspace");
        ASSERT_TRUE(cJSON_IsTrue(jget(data_of(&r), "persistent")));
        hres_done(&r);
        /* One volume, one sandbox. */
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, body, 400, "Volume is attached to another sandbox; destroy that sandbox first");

        /* Data written survives pause/resume (the container is replaced). */
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(dexec(sid, "echo hi > /workspace/f", NULL), 0);
        pause_resume_cycle(&c, key, sid);
        ASSERT_EQ(dexec(sid, "cat /workspace/f", &out), 0);
        ASSERT_STREQ(out, "hi\n");

        /* Attached: refuse delete. */
        EXPECT_ERROR(&c, "DELETE", path, key, NULL, 400, "Volume is attached; detach it before deleting");
        ASSERT_TRUE(docker_volume_exists(vid));

        /* Destroy detaches; the data is still there for the next sandbox. */
        op(&c, key, "DELETE", sid, "", &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_TRUE(cJSON_IsNull(jget(data_of(&r), "attached_sandbox_id")));
        ASSERT_TRUE(cJSON_IsNull(jget(data_of(&r), "mount_path")));
        hres_done(&r);
        ctld_create(&c, key, body, sid2);
        free(out);
        out = NULL;
        ASSERT_EQ(dexec(sid2, "cat /workspace/f", &out), 0);
        ASSERT_STREQ(out, "hi\n");
        op(&c, key, "DELETE", sid2, "", &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);

        http_req(&c, "DELETE", path, key, NULL, &r);
        ASSERT_EQ(r.status, 204);
        ASSERT_EQ(r.len, 0);
        hres_done(&r);
        ASSERT_FALSE(docker_volume_exists(vid));
        EXPECT_ERROR(&c, "GET", path, key, NULL, 404, "Volume not found");
        ASSERT_EQ(total_count(&c, key, "/volumes"), 1);
        /* The freed slot can be used again. */
        create_volume(&c, key, "data-c", 10, vid);
}

struct attach_race { struct ctld *c; const char *key; const char *body; long status; char msg[256]; };
static void *attach_create(void *p) {
        struct attach_race *x = p;
        struct hres r;
        http_req(x->c, "POST", "/sandboxes", x->key, x->body, &r);
        x->status = r.status;
        snprintf(x->msg, sizeof(x->msg), "%s", hres_message(&r) ? hres_message(&r) : r.body);
        hres_done(&r);
        return NULL;
}

/* Several creates racing for one volume: exactly one wins; the others are refused with 400 and,
 * like every validation failure, leave no record. The race window is narrow, so it is run a few
 * rounds. */
TEST_FULL(concurrent_attach_of_one_volume_admits_one, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char acc[25], vid[25], body[96];
        struct attach_race x[3];
        pthread_t t[3];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "racer", NULL, acc);
        create_volume(&c, key, "shared", 10, vid);
        snprintf(body, sizeof(body), "{\"volumeId\":\"%s\"}", vid);
        for (int round = 1; round <= 5; round++) {
                for (int i = 0; i < 3; i++) {
                        x[i] = (struct attach_race) { .c = &c, .key = key, .body = body };
                        ASSERT_EQ(pthread_create(&t[i], NULL, attach_create, &x[i]), 0);
                }
                for (int i = 0; i < 3; i++)
                        pthread_join(t[i], NULL);
                int ok = 0;
                for (int i = 0; i < 3; i++) {
                        if (x[i].status == 201)
                                ok++;
                        else if (x[i].status != 400 ||
                                 strcmp(x[i].msg, "Volume is attached to another sandbox; destroy that sandbox first") != 0)
                                test_fail(__FILE__, __LINE__, "round %d: loser got %ld %s", round, x[i].status, x[i].msg);
                }
                ASSERT_EQ(ok, 1);
                _cleanup_free_ char *ps = account_containers(acc);
                ASSERT_EQ(strlen(ps), 13); /* one short container id and a newline */
                /* The refused ones are validation failures: no record either. */
                long long n = total_count(&c, key, "/sandboxes");
                if (n != round)
                        test_fail(__FILE__, __LINE__, "round %d: %lld sandbox records, want %d (refused creates left records)",
                                  round, n, round);
                /* Free the volume for the next round. */
                struct hres r;
                http_req(&c, "GET", "/sandboxes?status=ready", key, NULL, &r);
                const char *win = jstr(cJSON_GetArrayItem(jget(data_of(&r), "data"), 0), "id");
                ASSERT_NOT_NULL(win);
                char wid[25];
                snprintf(wid, sizeof(wid), "%s", win);
                hres_done(&r);
                op(&c, key, "DELETE", wid, "", &r);
                ASSERT_EQ(r.status, 204);
                hres_done(&r);
        }
}

TEST_FULL(persistent_sandbox_gets_implicit_volume_at_mount_path, 150) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char sid[25], vid[25], path[96];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "persister", NULL, NULL);

        ctld_create(&c, key, "{\"persistent\":true,\"persistentDiskGB\":10,\"mountPath\":\"/data\"}", sid);
        get_sandbox(&c, key, sid, &r);
        const cJSON *d = data_of(&r);
        ASSERT_TRUE(cJSON_IsTrue(jget(d, "persistent")));
        ASSERT_EQ(jint(d, "persistent_disk_gb"), 10);
        ASSERT_STREQ(jstr(d, "mount_path"), "/data");
        ASSERT_NOT_NULL(jstr(d, "volume_id"));
        snprintf(vid, sizeof(vid), "%s", jstr(d, "volume_id"));
        track_volume(vid);
        hres_done(&r);
        ASSERT_TRUE(docker_volume_exists(vid));

        snprintf(path, sizeof(path), "/volumes/%s", vid);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, "Volume fetched");
        ASSERT_STREQ(jstr(data_of(&r), "attached_sandbox_id"), sid);
        ASSERT_STREQ(jstr(data_of(&r), "mount_path"), "/data");
        ASSERT_EQ(jint(data_of(&r), "size"), 10);
        ASSERT_STREQ(jstr(data_of(&r), "type"), "sandbox");
        hres_done(&r);

        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(dexec(sid, "echo kept > /data/f", NULL), 0);
        pause_resume_cycle(&c, key, sid);
        ASSERT_EQ(dexec(sid, "cat /data/f", &out), 0);
        ASSERT_STREQ(out, "kept\n");
        EXPECT_ERROR(&c, "DELETE", path, key, NULL, 400, "Volume is attached; detach it before deleting");
}

TEST_FULL(volume_cap_rejection_at_create_leaves_no_sandbox_record, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        char acc[25], v1[25], v2[25];
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "hoarder", NULL, acc);
        create_volume(&c, key, "one", 10, v1);
        create_volume(&c, key, "two", 10, v2);
        /* The plan allows 2 volumes; persistent:true needs a third. A plan-limit refusal is a
         * validation failure: "clear 4xx errors; nothing created" (ARCHITECTURE.md). */
        EXPECT_ERROR(&c, "POST", "/sandboxes", key, "{\"persistent\":true,\"persistentDiskGB\":10}", 403, "Your plan allows up to 2 volumes. Delete an existing one or upgrade.");
        _cleanup_free_ char *ps = account_containers(acc);
        ASSERT_STREQ(ps, "");
        ASSERT_EQ(total_count(&c, key, "/volumes"), 2);
        ASSERT_EQ(total_count(&c, key, "/sandboxes"), 0);
}

TEST_FULL(volume_in_region_the_plan_cannot_use_is_refused, 60) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        need_docker();
        track_volume(NULL);
        ctld_start(&c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(&c, "wanderer", NULL, NULL);
        /* A disabled region accepts nothing new; a region outside the plan can never host a
         * sandbox to attach it to. Both would burn a volume slot on an unusable volume. */
        http_req(&c, "POST", "/volumes", key, "{\"name\":\"shut\",\"sizeGB\":10,\"region\":\"" CLOSED_REGION "\"}", &r);
        if (r.status == 201)
                track_volume(jstr(data_of(&r), "id"));
        if (r.status != 403)
                test_fail(__FILE__, __LINE__, "volume in disabled region: got %ld %s, want 403", r.status, r.body);
        ASSERT_CONTAINS(hres_message(&r), "closed");
        hres_done(&r);
        http_req(&c, "POST", "/volumes", key, "{\"name\":\"away\",\"sizeGB\":10,\"region\":\"" FAR_REGION "\"}", &r);
        if (r.status == 201)
                track_volume(jstr(data_of(&r), "id"));
        if (r.status != 403)
                test_fail(__FILE__, __LINE__, "volume in region outside the plan: got %ld %s, want 403", r.status, r.body);
        ASSERT_CONTAINS(hres_message(&r), "far");
        hres_done(&r);
        ASSERT_EQ(total_count(&c, key, "/volumes"), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* 8. Reapers: oneShot exit and vanished containers.                                           */

TEST_FULL(reaper_one_shot_exit_and_vanished_container, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char a[25], b[25], d[25];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "reaped", NULL);
        ctld_create(&c, key, "{\"oneShot\":true}", a);
        ctld_create(&c, key, NULL, b);
        ctld_create(&c, key, NULL, d);
        get_sandbox(&c, key, a, &r);
        ASSERT_TRUE(cJSON_IsTrue(jget(data_of(&r), "one_shot")));
        hres_done(&r);

        char *k1[] = { "docker", "kill", container_name(a), NULL };
        ASSERT_EQ(test_run_capture(k1, NULL, 4096), 0);
        char *k2[] = { "docker", "rm", "-f", container_name(b), NULL };
        ASSERT_EQ(test_run_capture(k2, NULL, 4096), 0);
        char *k3[] = { "docker", "kill", container_name(d), NULL };
        ASSERT_EQ(test_run_capture(k3, NULL, 4096), 0);

        /* The long-poll sees the reaper's verdict. */
        op(&c, key, "GET", a, "/wait?timeout=15&status=destroyed", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        ASSERT_STREQ(jstr(data_of(&r), "destroy_reason"), "one_shot_stopped");
        ASSERT_TRUE(cJSON_IsString(jget(data_of(&r), "destroyed_at")));
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(a)));

        op(&c, key, "GET", b, "/wait?timeout=15&status=destroyed", &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        ASSERT_STREQ(jstr(data_of(&r), "destroy_reason"), "failed");
        hres_done(&r);

        op(&c, key, "GET", d, "/wait?timeout=15&status=destroyed", &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        ASSERT_STREQ(jstr(data_of(&r), "destroy_reason"), "failed");
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(d)));

        /* Reaped sandboxes free their concurrency slots. */
        char e[25];
        for (int i = 0; i < 2; i++)
                ctld_create(&c, key, NULL, e);
        /* autoDestroy sets the expiry to destroyTimeout after creation (default lifetime otherwise). */
        ctld_create(&c, key, "{\"autoDestroy\":true,\"destroyTimeout\":\"30m\"}", e);
        get_sandbox(&c, key, e, &r);
        ASSERT_TRUE(cJSON_IsTrue(jget(data_of(&r), "auto_destroy")));
        ASSERT_STREQ(jstr(data_of(&r), "destroy_timeout"), "30m");
        struct tm tc = { 0 }, te = { 0 };
        ASSERT_NOT_NULL(strptime(jstr(data_of(&r), "created_at"), "%Y-%m-%dT%H:%M:%S", &tc));
        ASSERT_NOT_NULL(strptime(jstr(data_of(&r), "expires_at"), "%Y-%m-%dT%H:%M:%S", &te));
        long long life = (long long) (timegm(&te) - timegm(&tc));
        ASSERT_TRUE(life >= 1799 && life <= 1801);
        hres_done(&r);
}

/* ------------------------------------------------------------------------------------------ */
/* 9. Admin CLI and config check.                                                              */

static int count_lines(const char *s) {
        int n = 0;
        for (; s && *s; s++)
                n += *s == '\n';
        return n;
}

/* ---- controld admin node: drain, undrain, list ---- */

static pid_t ndt_agent_pid = -1;
static void ndt_agent_stop(void *ud) {
        (void) ud;
        test_stop_child(&ndt_agent_pid);
}

/* The node's line of `node list` (static buffer; "" when absent). */
static const char *node_line(struct ctld *c, const char *node) {
        static char line[512];
        _cleanup_free_ char *out = NULL;
        line[0] = 0;
        if (ctld_admin(c, &out, "node", "list", NULL) != 0)
                test_fail(__FILE__, __LINE__, "node list failed");
        for (char *l = out, *nl; l && *l; l = nl) {
                nl = strchr(l, '\n');
                if (nl)
                        *nl++ = 0;
                if (!strncmp(l, node, strlen(node)) && l[strlen(node)] == '\t')
                        snprintf(line, sizeof(line), "%s", l);
        }
        return line;
}

/* A drained node takes no new sandboxes (create and resume answer 503 and write nothing)
 * until undrained; `node list` shows each node's state, live sandboxes and whether its
 * agent answers (an agent that starts is seen through its node.sync at once). */
TEST_FULL(admin_node_drain_undrain_list, 240) {
        static struct ctld c;
        need_docker();
        amqptest_need_broker();
        char node[32], exchange[48], extra[512], want[128];
        snprintf(node, sizeof(node), "ndt-%d", (int) getpid());
        snprintf(exchange, sizeof(exchange), "paddock.ndt-%d", (int) getpid());
        snprintf(extra, sizeof(extra), "[docker]\nnode_id = %s\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n",
                 node, exchange);
        ctld_start(&c, NULL, extra);
        _cleanup_free_ char *key = ctld_account_key(&c, "drainer", NULL, NULL);
        static const char deny[] = "{\"egress\":{\"mode\":\"deny_all\"}}";  /* needs no agent */

        snprintf(want, sizeof(want), "%s\tactive\t0\tnever\t-", node);
        ASSERT_STREQ(node_line(&c, node), want);
        char id[25], id2[25], path[96];
        ctld_create(&c, key, deny, id);
        snprintf(want, sizeof(want), "%s\tactive\t1\tnever\t-", node);
        ASSERT_STREQ(node_line(&c, node), want);

        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "node", "drain", node, NULL), 0);
        ASSERT_STREQ(out, "drained\n");
        snprintf(want, sizeof(want), "%s\tdrained\t1\t", node);
        ASSERT_CONTAINS(node_line(&c, node), want);
        /* Only the docker driver's own node exists; junk is refused. */
        ASSERT_NE(ctld_admin(&c, NULL, "node", "drain", "no-such-node", NULL), 0);
        ASSERT_NE(ctld_admin(&c, NULL, "node", "drain", "bad id", NULL), 0);
        ASSERT_NE(ctld_admin(&c, NULL, "node", "frobnicate", node, NULL), 0);

        /* Create: 503, and no record (the running controld reads the store on every create). */
        HTTP_EXPECT_MSG(&c, "POST", "/sandboxes", key, deny, 503, "No node is accepting new sandboxes");
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 1);
        /* Resume: 503 too, and the sandbox stays paused. */
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        struct hres r;
        http_req(&c, "POST", path, key, NULL, &r);
        ASSERT_TRUE(r.status == 200 || r.status == 202);
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "paused", 60), "paused");
        snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
        HTTP_EXPECT_MSG(&c, "POST", path, key, NULL, 503, "No node is accepting new sandboxes");
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "paused", 1), "paused");

        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "node", "undrain", node, NULL), 0);
        ASSERT_STREQ(out, "undrained\n");
        snprintf(want, sizeof(want), "%s\tactive\t0\tnever\t-", node);  /* paused: nothing runs there */
        ASSERT_STREQ(node_line(&c, node), want);
        http_req(&c, "POST", path, key, NULL, &r);
        ASSERT_TRUE(r.status == 200 || r.status == 202);
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        ctld_create(&c, key, deny, id2);
        snprintf(want, sizeof(want), "%s\tactive\t2\tnever\t-", node);
        ASSERT_STREQ(node_line(&c, node), want);

        /* An agent for the node starts: its node.sync marks it up within seconds. */
        char conf[256], logp[256];
        snprintf(conf, sizeof(conf), "%s/ndt-agent.conf", test_tmpdir());
        snprintf(logp, sizeof(logp), "%s/ndt-agent.log", test_tmpdir());
        FILE *f = fopen(conf, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "[agent]\nnode_id = %s\n[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n", node, exchange);
        fclose(f);
        test_on_exit(ndt_agent_stop, NULL);
        ndt_agent_pid = agenttest_start(conf, logp, NULL);
        snprintf(want, sizeof(want), "%s\tactive\t2\tup\t", node);
        bool up = false;
        for (int i = 0; i < 150 && !up; i++) {
                up = strstr(node_line(&c, node), want) != NULL;
                if (!up)
                        usleep(100000);
        }
        if (!up)
                test_fail(__FILE__, __LINE__, "node %s not 'up' 15 s after its agent started: '%s' (agent log %s)", node,
                          node_line(&c, node), logp);
}

TEST_FULL(admin_cli_accounts_keys_sandboxes_and_config_check, 120) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char acc[25], acc2[25], id[25], id2[25];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "operator-a", acc);
        _cleanup_free_ char *key2 = ctld_account_key(&c, "operator-b", NULL, acc2);

        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 2);
        {
                char want[128];
                snprintf(want, sizeof(want), "%s\toperator-a\tdefault\t", acc);
                ASSERT_CONTAINS(out, want);
        }
        /* Creating an existing name returns the same account. */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "create", "operator-a", NULL), 0);
        ASSERT_TRUE(strncmp(out, acc, 24) == 0);

        char prefix[16];
        snprintf(prefix, sizeof(prefix), "%.12s", key);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "key", "list", "operator-a", NULL), 0);
        ASSERT_EQ(count_lines(out), 1);
        ASSERT_CONTAINS(out, prefix);
        ASSERT_CONTAINS(out, "\tactive\n");
        ASSERT_TRUE(strstr(out, key) == NULL); /* only the prefix is ever shown */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "key", "list", acc, NULL), 0); /* by id too */
        ASSERT_CONTAINS(out, prefix);

        ctld_create(&c, key, "{\"name\":\"admin-box\"}", id);
        ctld_create(&c, key2, NULL, id2);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", "--account", "operator-a", NULL), 0);
        ASSERT_EQ(count_lines(out), 1);
        ASSERT_CONTAINS(out, id);
        ASSERT_CONTAINS(out, "\tready\tbusybox\tadmin-box\t");
        ASSERT_TRUE(strstr(out, id2) == NULL);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 2);

        /* Force destroy from the CLI while the daemon runs: container gone, API agrees. */
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "sandbox", "destroy", id, NULL), 0);
        ASSERT_STREQ(out, "destroyed\n");
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        get_sandbox(&c, key, id, &r);
        ASSERT_STREQ(jstr(data_of(&r), "status"), "destroyed");
        hres_done(&r);
        ASSERT_TRUE(docker_container_running(container_name(id2)));

        /* Revoke: listed as revoked, the key stops working, the other account's key still works. */
        ASSERT_EQ(ctld_admin(&c, NULL, "key", "revoke", prefix, NULL), 0);
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "key", "list", "operator-a", NULL), 0);
        ASSERT_CONTAINS(out, "\trevoked\n");
        ASSERT_TRUE(strstr(out, "\tactive\n") == NULL);
        EXPECT_ERROR(&c, "GET", "/sandboxes", key, NULL, 401, "Invalid API key");
        HTTP_EXPECT(&c, "GET", "/sandboxes", key2, NULL, 200);
        /* Revoking again: no active key by that prefix. */
        ASSERT_NE(ctld_admin(&c, NULL, "key", "revoke", prefix, NULL), 0);

        /* Bad arguments fail with a non-zero exit. */
        const char *const bad[][5] = {
                { "sandbox", "destroy", "xyz", NULL },
                { "sandbox", "destroy", NULL },
                { "sandbox", "list", "--status", "bogus", NULL },
                { "sandbox", "list", "--account", "nobody", NULL },
                { "account", "create", "bad name!", NULL },
                { "account", "create", "someone", "--plan", "no-such-plan" },
                { "account", "frobnicate", NULL },
                { "key", "list", "nobody", NULL },
                { "key", "issue", "nobody", NULL },
                { "key", "revoke", "pdk_nonexist", NULL },
                { "frobnicate", NULL },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                int st = ctld_admin(&c, NULL, bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4], NULL);
                if (st == 0)
                        test_fail(__FILE__, __LINE__, "admin %s %s %s ... exited 0", bad[i][0], bad[i][1] ? bad[i][1] : "",
                                  bad[i][2] ? bad[i][2] : "");
        }
        free(out);
        out = NULL;
        ASSERT_EQ(ctld_admin(&c, &out, "account", "list", NULL), 0);
        ASSERT_EQ(count_lines(out), 2); /* the refused creates created nothing */

        /* controld -n: the test config is OK; a typo'd key is named with file:line. */
        char bin[512];
        snprintf(bin, sizeof(bin), "%s", test_build_path("controld"));
        {
                char *argv[] = { bin, "-n", "-f", c.conf, NULL };
                free(out);
                out = NULL;
                ASSERT_EQ(run_all_output(argv, &out), 0);
                ASSERT_STREQ(out, "configuration OK\n");
        }
        char typo[512];
        snprintf(typo, sizeof(typo), "%s/typo.conf", test_tmpdir());
        {
                FILE *f = fopen(c.conf, "r");
                FILE *g = fopen(typo, "w");
                ASSERT_NOT_NULL(f);
                ASSERT_NOT_NULL(g);
                char line[1024];
                int n = 0;
                while (fgets(line, sizeof(line), f)) {
                        fputs(line, g);
                        if (++n == 1) /* "[server]" */
                                fputs("listne = 127.0.0.1:1\n", g);
                }
                fclose(f);
                fclose(g);
                char *argv[] = { bin, "-n", "-f", typo, NULL };
                free(out);
                out = NULL;
                ASSERT_NE(run_all_output(argv, &out), 0);
                char want[600];
                snprintf(want, sizeof(want), "%s:2: unknown key 'listne' in [server]", typo);
                ASSERT_CONTAINS(out, want);
                ASSERT_TRUE(strstr(out, "configuration OK") == NULL);
        }
        {
                char missing[512];
                snprintf(missing, sizeof(missing), "%s/does-not-exist.conf", test_tmpdir());
                char *argv[] = { bin, "-n", "-f", missing, NULL };
                free(out);
                out = NULL;
                ASSERT_NE(run_all_output(argv, &out), 0);
                ASSERT_CONTAINS(out, "does-not-exist.conf");
        }
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

        unsigned seed = (unsigned) time(NULL);
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
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "nul-path", id);

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
