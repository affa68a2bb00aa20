/* runtimetest.c — boxes, runtime requests and the SSE client of the test-runtime-* programs
 * (runtimetest.h). */
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"
#include "runtimetest.h"

int64_t now_mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void free_ptr(void *p) { free(p); }

void box_start(struct box *b, const char *server_extra, const char *extra, const char *create_body) {
        need_docker();
        ctld_start(&b->c, server_extra, extra);
        b->key = ctld_account_key(&b->c, "alice", NULL, NULL);
        test_on_exit(free_ptr, b->key);  /* the sanitizer build checks tests for leaks too */
        ctld_create(&b->c, b->key, create_body ? create_body : "{\"template\":\"python-3.11\"}", b->id);
}

const cJSON *data_item(const struct hres *r, const char *field) {
        return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->json, "data"), field);
}
long long data_int(const struct hres *r, const char *field) {
        const cJSON *v = data_item(r, field);
        if (!cJSON_IsNumber(v))
                test_fail(__FILE__, __LINE__, "data.%s is not a number in %.400s", field, r->body);
        return (long long) v->valuedouble;
}

/* POST /sandboxes/{id}/<what> with a raw JSON body. */
void post_run(struct box *b, const char *what, const char *key, const char *id, const char *body, struct hres *r) {
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s/%s", id ? id : b->id, what);
        http_req(&b->c, "POST", path, key ? key : b->key, body, r);
}

/* post_run, and the answer must have this status (the response is dropped). */
void post_expect(struct box *b, const char *what, const char *key, const char *id, const char *body, long status) {
        struct hres r;
        post_run(b, what, key, id, body, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "POST %s %s -> %ld, want %ld: %.400s", what, body, r.status, status, r.body);
        hres_done(&r);
}

/* POST /code with a raw JSON body: asserts 200, then stdout (unless NULL) and exit_code
 * (unless -1). The response is the caller's, for more checks (hres_done). */
void code_ok(struct box *b, const char *body, const char *want_stdout, int want_exit, struct hres *r) {
        post_run(b, "code", NULL, NULL, body, r);
        if (r->status != 200)
                test_fail(__FILE__, __LINE__, "code %s -> %ld %.400s", body, r->status, r->body);
        if (want_stdout)
                ASSERT_STREQ(hres_data_str(r, "stdout"), want_stdout);
        if (want_exit >= 0)
                ASSERT_EQ(data_int(r, "exit_code"), want_exit);
}

/* code_ok with the body {"language": language, "code": code}. */
void code_json_ok(struct box *b, const char *language, const char *code, const char *want_stdout, int want_exit,
                         struct hres *r) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "language", language);
        cJSON_AddStringToObject(o, "code", code);
        _cleanup_free_ char *body = cJSON_PrintUnformatted(o);
        code_ok(b, body, want_stdout, want_exit, r);
}

/* Exec cmd with optional extra JSON members (",\"cwd\":\"/tmp\""). Asserts 200. */
void exec_ok(struct box *b, const char *cmd, const char *extra_members, struct hres *r) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cmd", cmd);
        _cleanup_free_ char *j = cJSON_PrintUnformatted(o);
        _cleanup_free_ char *body = NULL;
        j[strlen(j) - 1] = 0; /* drop '}' */
        ASSERT_TRUE(asprintf(&body, "%s%s}", j, extra_members ? extra_members : "") > 0);
        post_run(b, "exec", NULL, NULL, body, r);
        if (r->status != 200)
                test_fail(__FILE__, __LINE__, "exec %s -> %ld %.400s", body, r->status, r->body);
}

/* exec_ok; the command must exit 0 having printed exactly want on stdout. */
void exec_prints(struct box *b, const char *cmd, const char *extra_members, const char *want) {
        struct hres r;
        exec_ok(b, cmd, extra_members, &r);
        const char *out = hres_data_str(&r, "stdout");
        if (data_int(&r, "exit_code") != 0 || !out || strcmp(out, want) != 0)
                test_fail(__FILE__, __LINE__, "%s: exit %lld, stdout \"%s\", want exit 0 and \"%s\"", cmd,
                          data_int(&r, "exit_code"), out ? out : "(none)", want);
        hres_done(&r);
}

/* A command that prints "alive PID: CMDLINE" for each live (not zombie) process whose command
 * line matches the shell case pattern pat, then "end". It reads /proc/PID/stat whole: a
 * program's name (comm) may hold spaces and ')'. Static buffer. */
const char *alive_probe(const char *pat) {
        static char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "for d in /proc/[0-9]*; do s=$(cat $d/stat 2>/dev/null) || continue; s=${s##*) }; "
                 "[ \"${s%%%% *}\" = Z ] && continue; c=$(tr '\\000' ' ' < $d/cmdline 2>/dev/null); "
                 "case \"$c\" in %s) echo \"alive ${d#/proc/}: $c\";; esac; done; echo end",
                 pat);
        return cmd;
}

/* Runs cmd and returns its stdout (caller frees); asserts exit 0. */
char *sh(struct box *b, const char *cmd) {
        struct hres r;
        exec_ok(b, cmd, NULL, &r);
        if (data_int(&r, "exit_code") != 0)
                test_fail(__FILE__, __LINE__, "%s exited %lld: %.400s", cmd, data_int(&r, "exit_code"), r.body);
        char *out = xstrdup(hres_data_str(&r, "stdout"));
        hres_done(&r);
        return out;
}

/* sh(cmd) every 0.5 s until it prints want or timeout_ms pass; returns the last output. */
bool box_agent(struct box *b) {
        /* the local driver binds the secret as a file; the Nomad job hands it over in the
         * environment (which the agent wipes) */
        _cleanup_free_ char *o =
                sh(b, ctld_nomad() ? "[ -S /.paddock/run/agent.sock ] && [ \"$(tr '\\000' ' ' < /proc/1/cmdline)\" = "
                                     "'/.paddock/init --socket /.paddock/run/agent.sock --secret-env PADDOCK_INIT_SECRET ' ] "
                                     "&& ! tr '\\000' '\\n' < /proc/1/environ | grep -q '^PADDOCK_INIT_SECRET=.' "
                                     "&& echo agent || echo exec"
                                   : "[ -S /.paddock/run/agent.sock ] && [ \"$(tr '\\000' ' ' < /proc/1/cmdline)\" = "
                                     "'/.paddock/init --socket /.paddock/run/agent.sock --secret-file /.paddock/secret ' ] "
                                     "&& echo agent || echo exec");
        return !strcmp(o, "agent\n");
}

char *sh_until(struct box *b, const char *cmd, const char *want, int64_t timeout_ms) {
        int64_t t0 = now_mono_ms();
        for (;;) {
                char *o = sh(b, cmd);
                if (!strcmp(o, want) || now_mono_ms() - t0 > timeout_ms)
                        return o;
                free(o);
                usleep(500000);
        }
}

char *sb_path(struct box *b, const char *fmt, const char *arg) {
        static char buf[8192];
        char rest[8000];
        snprintf(rest, sizeof(rest), fmt, arg);
        snprintf(buf, sizeof(buf), "/sandboxes/%s%s", b->id, rest);
        return buf;
}

void put_file(struct box *b, const char *path, const void *data, size_t len, struct hres *r) {
        char kh[300];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", b->key);
        const char *h[] = { kh, "Content-Type: application/octet-stream", NULL };
        /* An empty body still needs a body pointer so curl sends Content-Length: 0. */
        http_req_full(&b->c, "PUT", sb_path(b, "/files%s", path), h, len ? data : "", len, r);
}

void get_file(struct box *b, const char *path, struct hres *r) {
        http_req(&b->c, "GET", sb_path(b, "/files%s", path), b->key, NULL, r);
}

/* A curl handle for /sandboxes/{id}<rest> of the box, with its key and the extra headers
 * (NULL-terminated, or NULL) in *ret_hl, timeout_s and no signals. The caller sets the rest,
 * performs, and frees both (curl_slist_free_all, curl_easy_cleanup). */
CURL *box_curl(struct box *b, const char *rest, const char *const *headers, long timeout_s, struct curl_slist **ret_hl) {
        char url[256], kh[300];
        snprintf(url, sizeof(url), "%s/sandboxes/%s%s", b->c.url, b->id, rest);
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", b->key);
        CURL *h = curl_easy_init();
        struct curl_slist *hl = curl_slist_append(NULL, kh);
        for (size_t i = 0; headers && headers[i]; i++)
                hl = curl_slist_append(hl, headers[i]);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout_s);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        *ret_hl = hl;
        return h;
}

/* PUT /files<path> of len bytes at data answers status (the response is dropped). */
void put_expect(struct box *b, const char *path, const void *data, size_t len, long status) {
        struct hres r;
        put_file(b, path, data, len, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "PUT %s -> %ld, want %ld: %.400s", path, r.status, status, r.body);
        hres_done(&r);
}

/* GET /files<path> answers status; with want non-NULL, 200 and exactly the len bytes at want. */
void get_expect(struct box *b, const char *path, long status, const void *want, size_t len) {
        struct hres r;
        get_file(b, path, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "GET %s -> %ld, want %ld: %.400s", path, r.status, status, r.body);
        if (want && (r.len != len || (len && memcmp(r.body, want, len) != 0)))
                test_fail(__FILE__, __LINE__, "GET %s: %zu bytes, not the %zu written", path, r.len, len);
        hres_done(&r);
}

/* ---- SSE client ---- */

static void sse_parse(struct sse *s) {
        for (;;) {
                char *end = memmem(s->buf, s->len, "\n\n", 2);
                if (!end)
                        return;
                *end = 0;
                for (char *line = s->buf, *nl; line && *line; line = nl) {
                        nl = strchr(line, '\n');
                        if (nl)
                                *nl++ = 0;
                        if (line[0] == ':')
                                s->comments++;
                        else if (!strncmp(line, "data: ", 6) && s->n < (int) ELEMENTSOF(s->f)) {
                                cJSON *j = cJSON_Parse(line + 6);
                                if (!cJSON_IsObject(j)) {
                                        s->bad_json++;
                                        cJSON_Delete(j);
                                        continue;
                                }
                                s->f[s->n].t_ms = now_mono_ms() - s->t0;
                                s->f[s->n++].j = j;
                        }
                }
                size_t used = (size_t) (end + 2 - s->buf);
                memmove(s->buf, s->buf + used, s->len - used);
                s->len -= used;
        }
}

static size_t sse_write(char *p, size_t sz, size_t nm, void *ud) {
        struct sse *s = ud;
        size_t k = sz * nm;
        mem_append(&s->buf, &s->len, p, k);
        mem_append(&s->all, &s->all_len, p, k);
        sse_parse(s);
        if (s->abort_after_first_data && s->n > 0)
                return 0;
        if (s->stop_when && strstr(frames_joined(s, "stdout"), s->stop_when))
                return 0;
        return k;
}

static size_t sse_header(char *p, size_t sz, size_t nm, void *ud) {
        struct sse *s = ud;
        size_t k = sz * nm;
        if (k > 14 && !strncasecmp(p, "content-type: ", 14))
                snprintf(s->content_type, sizeof(s->content_type), "%.*s", (int) strcspn(p + 14, "\r\n"), p + 14);
        return k;
}

/* Reads the answer of h into s as SSE frames, then frees h and hl (closing the connection:
 * a disconnect when the reader stopped early). */
static void sse_perform(CURL *h, struct curl_slist *hl, struct sse *s) {
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sse_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, sse_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
        s->t0 = now_mono_ms();
        s->rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s->status);
        curl_slist_free_all(hl);
        curl_easy_cleanup(h);
}

void sse_run(struct box *b, const char *what, const char *body, struct sse *s) {
        static const char *const headers[] = { "Content-Type: application/json", "Expect:", NULL };
        char rest[64];
        struct curl_slist *hl;
        snprintf(rest, sizeof(rest), "/%s", what);
        CURL *h = box_curl(b, rest, headers, 120L, &hl);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        sse_perform(h, hl, s);
}

void sse_get(struct box *b, const char *rest, long timeout_s, struct sse *s) {
        struct curl_slist *hl;
        CURL *h = box_curl(b, rest, NULL, timeout_s, &hl);
        sse_perform(h, hl, s);
}

void sse_done(struct sse *s) {
        for (int i = 0; i < s->n; i++)
                cJSON_Delete(s->f[i].j);
        free(s->buf);
        free(s->all);
        memset(s, 0, sizeof(*s));
}

const char *frame_type(const struct sse *s, int i) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s->f[i].j, "type");
        return cJSON_IsString(t) ? t->valuestring : "?";
}
const char *frame_data(const struct sse *s, int i) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s->f[i].j, "data");
        return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* Concatenated data of every frame of a type. Static buffer. */
const char *frames_joined(const struct sse *s, const char *type) {
        static char buf[65536];
        buf[0] = 0;
        for (int i = 0; i < s->n; i++)
                if (!strcmp(frame_type(s, i), type) && frame_data(s, i))
                        strncat(buf, frame_data(s, i), sizeof(buf) - strlen(buf) - 1);
        return buf;
}
