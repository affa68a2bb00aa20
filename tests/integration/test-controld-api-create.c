/* HTTP-level tests of POST /sandboxes as a demanding client sees it: every create validation
 * rule (400, the field named, nothing created) and the plan limits (403 with the published
 * messages; unknown names are 400). Runs a real controld against the real dockerd + gVisor;
 * test-controld.c covers lifecycle, isolation, quota races and restarts.
 *
 * Each test's struct ctld is static: the harness's exit hook (ctld_stop) runs from exit()
 * after the test function has returned, so a stack struct would be read after its frame is
 * gone (garbage dir/pid/failed_exit: leaked containers, spurious failures). */
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
