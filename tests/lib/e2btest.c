/* e2btest.c — raw calls on controld's E2B listener (see e2btest.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "e2btest.h"
#include "strutil.h"
#include "testlib.h"

char *e2btest_key(struct ctld *c, const char *name) {
        _cleanup_free_ char *acc = NULL;
        char *key = NULL;
        ASSERT_EQ(ctld_admin(c, &acc, "account", "create", name, NULL), 0);
        acc[strcspn(acc, "\n")] = 0;
        ASSERT_EQ(ctld_admin(c, &key, "key", "issue", acc, "--e2b", NULL), 0);
        key[strcspn(key, "\n")] = 0;
        return key;
}

static void free_ptr(void *p) { free(p); }

void e2btest_keys(struct e2b *e) {
        e->key = e2btest_key(&e->c, "alice");
        e->key_bob = e2btest_key(&e->c, "bob");
        test_on_exit(free_ptr, e->key);
        test_on_exit(free_ptr, e->key_bob);
}

char *e2btest_req(struct e2b *e, const char *method, const char *path, const char *headers, const char *ctype,
                  const void *body, size_t len) {
        _cleanup_free_ char *head = xasprintf("%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s%s%s%s"
                                              "Content-Length: %zu\r\n\r\n",
                                              method, path, e->port, headers ? headers : "", ctype ? "Content-Type: " : "",
                                              ctype ? ctype : "", ctype ? "\r\n" : "", len);
        return test_raw_http(e->port, head, body, len);
}

char *e2btest_api(struct e2b *e, const char *method, const char *path, const char *key, const char *json) {
        _cleanup_free_ char *h = key ? xasprintf("X-API-Key: %s\r\n", key) : xstrdup("");
        return e2btest_req(e, method, path, h, json ? "application/json" : NULL, json, json ? strlen(json) : 0);
}

uint8_t *e2btest_envelope(const void *msg, size_t len) {
        uint8_t *b = xmalloc(len + 5);
        b[0] = 0;
        b[1] = (uint8_t) (len >> 24), b[2] = (uint8_t) (len >> 16), b[3] = (uint8_t) (len >> 8), b[4] = (uint8_t) len;
        memcpy(b + 5, msg, len);
        return b;
}

char *e2btest_envd(struct e2b *e, const char *id, const char *token, const char *method, bool stream, const void *msg,
                   size_t len, const char *more) {
        _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\n%s%s%sConnect-Protocol-Version: 1\r\n%s", id,
                                           token ? "X-Access-Token: " : "", token ? token : "", token ? "\r\n" : "",
                                           more ? more : "");
        _cleanup_free_ char *path = xasprintf("/%s", method);
        if (!stream)
                return e2btest_req(e, "POST", path, h, "application/json", msg, len);
        _cleanup_free_ uint8_t *b = e2btest_envelope(msg, len);
        return e2btest_req(e, "POST", path, h, "application/connect+json", b, len + 5);
}

char *e2btest_host_get(struct e2b *e, int port, const char *id, const char *path, const char *headers) {
        _cleanup_free_ char *h = xasprintf("GET %s HTTP/1.1\r\nHost: %d-%s.localhost:%d\r\n%sConnection: close\r\n\r\n", path,
                                           port, id, e->port, headers ? headers : "");
        return test_raw_http(e->port, h, NULL, 0);
}

void e2btest_create(struct e2b *e, const char *key, const char *body, char id[25], char token[65]) {
        _cleanup_free_ char *r = e2btest_api(e, "POST", "/sandboxes", key, body);
        if (test_raw_status(r) != 201)
                test_fail(__FILE__, __LINE__, "create -> %.600s", r);
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(r));
        ASSERT_NOT_NULL(o);
        snprintf(id, 25, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "sandboxID")));
        snprintf(token, 65, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "envdAccessToken")));
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(o, "envdVersion")), "0.6.3");
}

int e2btest_sdk(struct e2b *e, const char *url, const char *script, char **ret_out) {
        setenv("E2B_API_KEY", e->key, 1);
        setenv("E2B_API_URL", url, 1);
        setenv("E2B_SANDBOX_URL", url, 1);
        setenv("E2B_VOLUME_API_URL", url, 1);   /* the SDK's volume-content calls, as make up's env has it */
        _cleanup_free_ char *script_copy = xstrdup(script);
        /* its stderr too: an assertion's message is what a failure shows */
        char *argv[] = { "sh", "-c", "exec node \"$0\" 2>&1", script_copy, NULL };
        int rc = test_run_capture(argv, ret_out, 1 << 20);
        fprintf(stderr, "%s", *ret_out ? *ret_out : "");
        return rc;
}

void e2btest_expect(const char *file, int line, char *resp, long status, const char *needle) {
        _cleanup_free_ char *r = resp;
        if (test_raw_status(r) != status || !strstr(test_raw_body(r), needle))
                test_fail(file, line, "want %ld with \"%s\", got: %.800s", status, needle, r);
}
