/* apitest.c — checks and requests the test-controld-api-* programs share (apitest.h). */
#include <stdlib.h>
#include <string.h>

#include "apitest.h"
#include "testlib.h"

const cJSON *jget(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }
const cJSON *data_of(const struct hres *r) { return jget(r->json, "data"); }
const char *jstr(const cJSON *o, const char *k) {
        const cJSON *v = jget(o, k);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}
long long jint(const cJSON *o, const char *k) {
        const cJSON *v = jget(o, k);
        return cJSON_IsNumber(v) ? (long long) v->valuedouble : -999999;
}

/* An error answer is exactly {"message": "..."}: JSON, one key, with a request id. Returns NULL
 * when it has that shape and the wanted status/message, else a static description of what's wrong. */
const char *error_mismatch(const struct hres *r, long status, const char *msg, bool prefix) {
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

/* One request whose answer must be this error (ASSERT_ERROR); the response is dropped. */
void expect_error_at(const char *file, int line, struct ctld *c, const char *method, const char *path,
                            const char *key, const char *body, long status, const char *msg) {
        struct hres r;
        http_req(c, method, path, key, body, &r);
        const char *w = error_mismatch(&r, status, msg, false);
        if (w)
                test_fail(file, line, "%s", w);
        hres_done(&r);
}

/* A success envelope: {message, data}, JSON, request id. */
void assert_envelope(const struct hres *r, long status, const char *msg, const char *file, int line) {
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

long long total_count(struct ctld *c, const char *key, const char *path) {
        struct hres r;
        http_req(c, "GET", path, key, NULL, &r);
        ASSERT_ENVELOPE(&r, 200, !strncmp(path, "/volumes", 8) ? "Volumes fetched" : "Sandboxes fetched");
        long long n = jint(data_of(&r), "totalCount");
        hres_done(&r);
        return n;
}

/* Containers of an account, by the label the docker driver puts on them. */
char *account_containers(const char *acc) {
        char filter[128];
        char *out = NULL;
        snprintf(filter, sizeof(filter), "label=paddock.account=%s", acc);
        char *argv[] = { "docker", "ps", "-a", "-q", "--filter", filter, NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 65536), 0);
        return out;
}

void get_sandbox(struct ctld *c, const char *key, const char *id, struct hres *r) {
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(c, "GET", path, key, NULL, r);
        ASSERT_ENVELOPE(r, 200, "Sandbox fetched");
}

void op(struct ctld *c, const char *key, const char *method, const char *id, const char *suffix, struct hres *r) {
        char path[160];
        snprintf(path, sizeof(path), "/sandboxes/%s%s", id, suffix);
        http_req(c, method, path, key, NULL, r);
}

cJSON *sandbox_data_member(struct ctld *c, const char *key, const char *id, const char *suffix, const char *member) {
        struct hres r;
        op(c, key, "GET", id, suffix, &r);
        ASSERT_EQ(r.status, 200);
        const cJSON *m = jget(data_of(&r), member);
        cJSON *copy = m ? cJSON_Duplicate(m, true) : NULL;
        hres_done(&r);
        return copy;
}
