/* HTTP-level tests of /secrets (issue 39's first part): values are write-only, sealed at rest
 * under the operator's key and bound to their account, name and version; another account's
 * secret is 404; every size and count a caller can make us keep has its limit. A real
 * controld and its sqlite file; no sandbox is needed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "apitest.h"
#include "cleanup.h"
#include "controld.h"
#include "ctltest.h"
#include "e2btest.h"
#include "secret.h"
#include "testlib.h"

#define VALUE "sk-ant-api03-THE-REAL-KEY-0123456789"

static struct ctld ctl;

/* A key file in the test's directory; its path (static). */
static const char *key_file(const char *content) {
        static char path[512];
        snprintf(path, sizeof(path), "%s/secrets.key", test_tmpdir());
        FILE *f = fopen(path, "w");
        ASSERT_NOT_NULL(f);
        fputs(content, f);
        fclose(f);
        return path;
}

static char *start(const char *key_content) {
        char extra[1024] = "";
        if (key_content)
                snprintf(extra, sizeof(extra), "[secrets]\nkey_file = %s\nmax_per_account = 3\nmax_value = 64\n",
                         key_file(key_content));
        ctld_start(&ctl, NULL, extra);
        return ctld_account_key(&ctl, "alice", NULL, NULL);
}

/* The whole of a file (NULL when unreadable; the caller frees it). */
static char *slurp(const char *path) {
        FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        char *buf = NULL;
        size_t len = 0;
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
                mem_append(&buf, &len, chunk, n);
        fclose(f);
        return buf;
}

/* No answer may hold the value, whatever it is. */
static void no_value_in(const struct hres *r) {
        ASSERT_NULL(r->body ? strstr(r->body, VALUE) : NULL);
        ASSERT_NULL(r->body ? strstr(r->body, "\"value\"") : NULL);
}

TEST(secrets_are_write_only_versioned_and_per_account) {
        _cleanup_free_ char *key = start("a test key of more than thirty-two bytes, as text\n");
        _cleanup_free_ char *bob = ctld_account_key(&ctl, "bob", NULL, NULL);
        struct hres r;
        http_req(&ctl, "POST", "/secrets", key, "{\"name\":\"anthropic\",\"value\":\"" VALUE "\",\"metadata\":{\"team\":\"ml\"}}", &r);
        ASSERT_EQ(r.status, 201);
        no_value_in(&r);
        ASSERT_STREQ(jstr(data_of(&r), "name"), "anthropic");
        ASSERT_EQ(jint(data_of(&r), "version"), 1);
        ASSERT_STREQ(jstr(jget(data_of(&r), "metadata"), "team"), "ml");
        hres_done(&r);

        http_req(&ctl, "GET", "/secrets", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        no_value_in(&r);
        ASSERT_EQ(cJSON_GetArraySize(data_of(&r)), 1);
        hres_done(&r);
        http_req(&ctl, "GET", "/secrets/anthropic", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        no_value_in(&r);
        hres_done(&r);

        /* rotation: the value replaced, the version up, metadata kept when not given */
        http_req(&ctl, "PUT", "/secrets/anthropic", key, "{\"value\":\"" VALUE "-rotated\"}", &r);
        ASSERT_EQ(r.status, 200);
        no_value_in(&r);
        ASSERT_EQ(jint(data_of(&r), "version"), 2);
        ASSERT_STREQ(jstr(jget(data_of(&r), "metadata"), "team"), "ml");
        hres_done(&r);

        /* another account: the same name is unknown to it, and it may have its own */
        EXPECT_ERROR(&ctl, "GET", "/secrets/anthropic", bob, NULL, 404, "Secret not found");
        EXPECT_ERROR(&ctl, "PUT", "/secrets/anthropic", bob, "{\"value\":\"x\"}", 404, "Secret not found");
        EXPECT_ERROR(&ctl, "DELETE", "/secrets/anthropic", bob, NULL, 404, "Secret not found");
        HTTP_EXPECT(&ctl, "POST", "/secrets", bob, "{\"name\":\"anthropic\",\"value\":\"bobs\"}", 201);
        http_req(&ctl, "GET", "/secrets", bob, NULL, &r);
        ASSERT_EQ(cJSON_GetArraySize(data_of(&r)), 1);
        hres_done(&r);
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"anthropic\",\"value\":\"again\"}", 409,
                     "name: you have a secret named 'anthropic'; PUT /secrets/anthropic to replace its value");

        /* at rest: sealed, never the value; bound to its account, name and version */
        _cleanup_free_ char *sealed = ctld_db_query(&ctl, "SELECT sealed FROM secrets WHERE name = 'anthropic' AND version = 2");
        _cleanup_free_ char *dump = ctld_db_query(&ctl, "SELECT * FROM secrets");
        ASSERT_NULL(strstr(dump, "THE-REAL-KEY"));
        ASSERT_TRUE(!strncmp(sealed, "v1:", 3));
        sealed[strcspn(sealed, "\n")] = 0;
        _cleanup_free_ char *acc = ctld_db_query(&ctl, "SELECT account_id FROM secrets WHERE version = 2");
        acc[strcspn(acc, "\n")] = 0;
        unsigned char k[32];
        {
                /* the key as controld derives it from the file */
                struct ctl c = { 0 };
                struct config cfg = { .secrets_key_file = (char *) key_file("a test key of more than thirty-two bytes, as text\n") };
                struct err err = { 0 };
                c.cfg = &cfg;
                ASSERT_OK(secret_key_load(&c, &err));
                memcpy(k, c.secrets_key, sizeof(k));
        }
        char aad[256], *pt = NULL;
        size_t n = 0;
        snprintf(aad, sizeof(aad), "paddock-secret-v1/%s/anthropic/2", acc);
        ASSERT_OK(secret_open(k, aad, sealed, &pt, &n));
        ASSERT_STREQ(pt, VALUE "-rotated");
        free(pt);
        snprintf(aad, sizeof(aad), "paddock-secret-v1/%s/anthropic/1", acc);
        ASSERT_EQ(secret_open(k, aad, sealed, &pt, &n), -EBADMSG);   /* an old version's binding */
        snprintf(aad, sizeof(aad), "paddock-secret-v1/000000000000000000000000/anthropic/2");
        ASSERT_EQ(secret_open(k, aad, sealed, &pt, &n), -EBADMSG);   /* another account's */

        /* the value never reaches the journal or the log */
        _cleanup_free_ char *log = slurp(ctl.log);
        ASSERT_NULL(log ? strstr(log, "THE-REAL-KEY") : NULL);

        HTTP_EXPECT(&ctl, "DELETE", "/secrets/anthropic", key, NULL, 204);
        EXPECT_ERROR(&ctl, "GET", "/secrets/anthropic", key, NULL, 404, "Secret not found");
}

TEST(secrets_refuse_bad_input_and_hold_their_limits) {
        _cleanup_free_ char *key = start("another test key, thirty-two bytes or more\n");
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"value\":\"x\"}", 400, "name is required");
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"ok\"}", 400, "value is required");
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"has space\",\"value\":\"x\"}", 400,
                     "name must be 1 to 128 of A-Z, a-z, 0-9, '_' and '-', not starting with 'sec_'");
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"sec_0123\",\"value\":\"x\"}", 400,
                     "name must be 1 to 128 of A-Z, a-z, 0-9, '_' and '-', not starting with 'sec_'");
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"ok\",\"value\":\"\"}", 400, "value must be 1 to 64 bytes (it is 0)");
        char big[256];
        snprintf(big, sizeof(big), "{\"name\":\"ok\",\"value\":\"%065d\"}", 0);
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, big, 400, "value must be 1 to 64 bytes (it is 65)");
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"ok\",\"value\":\"x\",\"metadata\":{\"a\":1}}", 400,
                     "metadata.a must be a string");
        HTTP_EXPECT_MSG(&ctl, "POST", "/secrets", key, "{\"name\":\"ok\",\"value\":\"x\",\"valu\":1}", 400, "valu");
        HTTP_EXPECT_MSG(&ctl, "PUT", "/secrets/ok", key, "{\"name\":\"ok\",\"value\":\"x\"}", 400, "name");
        for (int i = 0; i < 3; i++) {
                char body[128];
                snprintf(body, sizeof(body), "{\"name\":\"s%d\",\"value\":\"v\"}", i);
                HTTP_EXPECT(&ctl, "POST", "/secrets", key, body, 201);
        }
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"s3\",\"value\":\"v\"}", 403,
                     "You have 3 secrets, the most this server allows ([secrets] max_per_account); delete one first");
        EXPECT_ERROR(&ctl, "GET", "/secrets/a/b", key, NULL, 404, "Secret not found");
        HTTP_EXPECT(&ctl, "GET", "/secrets", NULL, NULL, 401);
}

TEST(without_a_key_secrets_are_not_served_and_a_bad_key_stops_the_start) {
        _cleanup_free_ char *key = start(NULL);
        EXPECT_ERROR(&ctl, "POST", "/secrets", key, "{\"name\":\"a\",\"value\":\"x\"}", 501,
                     "Secrets need a key on this server ([secrets] key_file); ask its operator");
        ctld_stop(&ctl);
        /* a key file too short: controld refuses to start rather than serve with another key */
        struct ctl c = { 0 };
        struct config cfg = { .secrets_key_file = (char *) key_file("short\n") };
        struct err err = { 0 };
        c.cfg = &cfg;
        ASSERT_EQ(secret_key_load(&c, &err), -EINVAL);
        ASSERT_TRUE(strstr(err.message, "it must hold 32 to 1024 bytes") != NULL);
        ASSERT_FALSE(c.secrets_on);
}

/* E2B's secrets API (its SDK's Secret calls) over the same records: names lower-cased,
 * secretID sec_<id> or the name, a new version by POST, pages of the list, no value in any
 * answer, and another account's secret is 404 there too. */
TEST(e2b_secrets_api_is_the_same_secrets) {
        static struct e2b e;
        e.port = test_free_port();
        char extra[1024];
        snprintf(extra, sizeof(extra), "[secrets]\nkey_file = %s\nmax_per_account = 3\nmax_value = 64\n[e2b]\nlisten = 127.0.0.1:%d\n",
                 key_file("a test key of more than thirty-two bytes, as text\n"), e.port);
        ctld_start(&e.c, NULL, extra);
        _cleanup_free_ char *acc = NULL, *bkey = NULL;
        ASSERT_EQ(ctld_admin(&e.c, &acc, "account", "create", "carol", NULL), 0);
        acc[strcspn(acc, "\n")] = 0;
        ASSERT_EQ(ctld_admin(&e.c, &bkey, "key", "issue", acc, NULL), 0);
        bkey[strcspn(bkey, "\n")] = 0;
        _cleanup_free_ char *ekey = NULL, *other = e2btest_key(&e.c, "dave");
        ASSERT_EQ(ctld_admin(&e.c, &ekey, "key", "issue", acc, "--e2b", NULL), 0);
        ekey[strcspn(ekey, "\n")] = 0;

        _cleanup_free_ char *made = e2btest_api(&e, "POST", "/secrets", ekey,
                                                "{\"name\":\"Api-Token\",\"value\":\"" VALUE "\",\"metadata\":{\"team\":\"x\"}}");
        E2B_EXPECT(xstrdup(made), 201, "\"name\":\"api-token\"");
        ASSERT_NULL(strstr(made, VALUE));
        ASSERT_CONTAINS(made, "\"currentVersion\":1");
        ASSERT_CONTAINS(made, "\"metadata\":{\"team\":\"x\"}");
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(made));
        const char *sid = cJSON_GetStringValue(cJSON_GetObjectItem(o, "secretID"));
        ASSERT_NOT_NULL(sid);
        ASSERT_TRUE(startswith(sid, "sec_") && strlen(sid) == 4 + 24);
        E2B_EXPECT(e2btest_api(&e, "POST", "/secrets", ekey, "{\"name\":\"API-TOKEN\",\"value\":\"v\"}"), 409, "");
        E2B_EXPECT(e2btest_api(&e, "POST", "/secrets", ekey, "{\"name\":\"sec_x\",\"value\":\"v\"}"), 400, "name");
        E2B_EXPECT(e2btest_api(&e, "POST", "/secrets", ekey, "{\"name\":\"ok\"}"), 400, "value");

        char path[128];
        snprintf(path, sizeof(path), "/secrets/%s", sid);
        E2B_EXPECT(e2btest_api(&e, "GET", path, ekey, NULL), 200, "\"name\":\"api-token\"");
        E2B_EXPECT(e2btest_api(&e, "GET", "/secrets/Api-Token", ekey, NULL), 200, sid);
        E2B_EXPECT(e2btest_api(&e, "GET", path, other, NULL), 404, "");
        E2B_EXPECT(e2btest_api(&e, "GET", "/secrets", other, NULL), 200, "[]");
        _cleanup_free_ char *upd = e2btest_api(&e, "POST", path, ekey, "{\"value\":\"another value\"}");
        E2B_EXPECT(xstrdup(upd), 200, "\"currentVersion\":2");
        ASSERT_NULL(strstr(upd, "another value"));
        /* the Brimble API sees the same secret, at its new version */
        struct hres r;
        http_req(&e.c, "GET", "/secrets/api-token", bkey, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, "\"version\":2");
        no_value_in(&r);
        hres_done(&r);

        /* pages */
        E2B_EXPECT(e2btest_api(&e, "POST", "/secrets", ekey, "{\"name\":\"second\",\"value\":\"v\"}"), 201, "second");
        _cleanup_free_ char *p1 = e2btest_api(&e, "GET", "/secrets?limit=1", ekey, NULL);
        ASSERT_EQ(test_raw_status(p1), 200);
        ASSERT_CONTAINS(p1, "X-Next-Token: 1");
        ASSERT_CONTAINS(p1, "api-token");
        ASSERT_NULL(strstr(p1, "second"));
        _cleanup_free_ char *p2 = e2btest_api(&e, "GET", "/secrets?limit=1&nextToken=1", ekey, NULL);
        ASSERT_CONTAINS(p2, "second");
        ASSERT_NULL(strstr(p2, "X-Next-Token"));
        E2B_EXPECT(e2btest_api(&e, "GET", "/secrets?limit=0", ekey, NULL), 400, "limit");

        E2B_EXPECT(e2btest_api(&e, "DELETE", path, other, NULL), 404, "");
        E2B_EXPECT(e2btest_api(&e, "DELETE", path, ekey, NULL), 204, "");
        E2B_EXPECT(e2btest_api(&e, "GET", path, ekey, NULL), 404, "");
}
