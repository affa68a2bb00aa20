/* Runtime operations as a user sees them, on real dockerd + gVisor runsc sandboxes:
 * exec (env, cwd, exit codes, timeout kill of the whole tree, output cap, UTF-8),
 * code (python, node; no shell quoting of user code), streamed exec over SSE
 * (ordering, no buffering until exit, timeout, client disconnect kills the process, the
 * 4 MiB cap on output produced before /code's stdin is written),
 * files (binary round trip, volumes across pause/resume, errors, size cap enforced
 * before the body is read, traversal, host isolation), batch upload, per-sandbox
 * concurrency, and last_activity_at bumps. */
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

#define NODE_TEMPLATE "[template \"node-18\"]\nimage = paddock/node-18:local\n"

static int64_t now_mono_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* One controld, one account, one sandbox. */
struct box {
        struct ctld c;
        char *key;
        char id[25];
};

static void free_ptr(void *p) { free(p); }

static void box_start(struct box *b, const char *server_extra, const char *extra, const char *create_body) {
        need_docker();
        ctld_start(&b->c, server_extra, extra);
        b->key = ctld_account_key(&b->c, "alice", NULL, NULL);
        test_on_exit(free_ptr, b->key);  /* the sanitizer build checks tests for leaks too */
        ctld_create(&b->c, b->key, create_body ? create_body : "{\"template\":\"python-3.11\"}", b->id);
}

static const cJSON *data_item(const struct hres *r, const char *field) {
        return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r->json, "data"), field);
}
static long long data_int(const struct hres *r, const char *field) {
        const cJSON *v = data_item(r, field);
        if (!cJSON_IsNumber(v))
                test_fail(__FILE__, __LINE__, "data.%s is not a number in %.400s", field, r->body);
        return (long long) v->valuedouble;
}
static bool data_true(const struct hres *r, const char *field) { return cJSON_IsTrue(data_item(r, field)); }

/* POST /sandboxes/{id}/<what> with a raw JSON body. */
static void post_run(struct box *b, const char *what, const char *key, const char *id, const char *body, struct hres *r) {
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s/%s", id ? id : b->id, what);
        http_req(&b->c, "POST", path, key ? key : b->key, body, r);
}

/* post_run, and the answer must have this status (the response is dropped). */
static void post_expect(struct box *b, const char *what, const char *key, const char *id, const char *body, long status) {
        struct hres r;
        post_run(b, what, key, id, body, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "POST %s %s -> %ld, want %ld: %.400s", what, body, r.status, status, r.body);
        hres_done(&r);
}

/* POST /code with a raw JSON body: asserts 200, then stdout (unless NULL) and exit_code
 * (unless -1). The response is the caller's, for more checks (hres_done). */
static void code_ok(struct box *b, const char *body, const char *want_stdout, int want_exit, struct hres *r) {
        post_run(b, "code", NULL, NULL, body, r);
        if (r->status != 200)
                test_fail(__FILE__, __LINE__, "code %s -> %ld %.400s", body, r->status, r->body);
        if (want_stdout)
                ASSERT_STREQ(hres_data_str(r, "stdout"), want_stdout);
        if (want_exit >= 0)
                ASSERT_EQ(data_int(r, "exit_code"), want_exit);
}

/* code_ok with the body {"language": language, "code": code}. */
static void code_json_ok(struct box *b, const char *language, const char *code, const char *want_stdout, int want_exit,
                         struct hres *r) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "language", language);
        cJSON_AddStringToObject(o, "code", code);
        _cleanup_free_ char *body = cJSON_PrintUnformatted(o);
        code_ok(b, body, want_stdout, want_exit, r);
}

/* Exec cmd with optional extra JSON members (",\"cwd\":\"/tmp\""). Asserts 200. */
static void exec_ok(struct box *b, const char *cmd, const char *extra_members, struct hres *r) {
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
static void exec_prints(struct box *b, const char *cmd, const char *extra_members, const char *want) {
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
static const char *alive_probe(const char *pat) {
        static char cmd[1024];
        snprintf(cmd, sizeof(cmd),
                 "for d in /proc/[0-9]*; do s=$(cat $d/stat 2>/dev/null) || continue; s=${s##*) }; "
                 "[ \"${s%%%% *}\" = Z ] && continue; c=$(tr '\\000' ' ' < $d/cmdline 2>/dev/null); "
                 "case \"$c\" in %s) echo \"alive ${d#/proc/}: $c\";; esac; done; echo end",
                 pat);
        return cmd;
}

/* Runs cmd and returns its stdout (caller frees); asserts exit 0. */
static char *sh(struct box *b, const char *cmd) {
        struct hres r;
        exec_ok(b, cmd, NULL, &r);
        if (data_int(&r, "exit_code") != 0)
                test_fail(__FILE__, __LINE__, "%s exited %lld: %.400s", cmd, data_int(&r, "exit_code"), r.body);
        char *out = xstrdup(hres_data_str(&r, "stdout"));
        hres_done(&r);
        return out;
}

/* sh(cmd) every 0.5 s until it prints want or timeout_ms pass; returns the last output. */
static char *sh_until(struct box *b, const char *cmd, const char *want, int64_t timeout_ms) {
        int64_t t0 = now_mono_ms();
        for (;;) {
                char *o = sh(b, cmd);
                if (!strcmp(o, want) || now_mono_ms() - t0 > timeout_ms)
                        return o;
                free(o);
                usleep(500000);
        }
}

static char *sb_path(struct box *b, const char *fmt, const char *arg) {
        static char buf[8192];
        char rest[8000];
        snprintf(rest, sizeof(rest), fmt, arg);
        snprintf(buf, sizeof(buf), "/sandboxes/%s%s", b->id, rest);
        return buf;
}

static void put_file(struct box *b, const char *path, const void *data, size_t len, struct hres *r) {
        char kh[300];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", b->key);
        const char *h[] = { kh, "Content-Type: application/octet-stream", NULL };
        /* An empty body still needs a body pointer so curl sends Content-Length: 0. */
        http_req_full(&b->c, "PUT", sb_path(b, "/files%s", path), h, len ? data : "", len, r);
}

static void get_file(struct box *b, const char *path, struct hres *r) {
        http_req(&b->c, "GET", sb_path(b, "/files%s", path), b->key, NULL, r);
}

/* A curl handle for /sandboxes/{id}<rest> of the box, with its key and the extra headers
 * (NULL-terminated, or NULL) in *ret_hl, timeout_s and no signals. The caller sets the rest,
 * performs, and frees both (curl_slist_free_all, curl_easy_cleanup). */
static CURL *box_curl(struct box *b, const char *rest, const char *const *headers, long timeout_s, struct curl_slist **ret_hl) {
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
static void put_expect(struct box *b, const char *path, const void *data, size_t len, long status) {
        struct hres r;
        put_file(b, path, data, len, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "PUT %s -> %ld, want %ld: %.400s", path, r.status, status, r.body);
        hres_done(&r);
}

/* GET /files<path> answers status; with want non-NULL, 200 and exactly the len bytes at want. */
static void get_expect(struct box *b, const char *path, long status, const void *want, size_t len) {
        struct hres r;
        get_file(b, path, &r);
        if (r.status != status)
                test_fail(__FILE__, __LINE__, "GET %s -> %ld, want %ld: %.400s", path, r.status, status, r.body);
        if (want && (r.len != len || (len && memcmp(r.body, want, len) != 0)))
                test_fail(__FILE__, __LINE__, "GET %s: %zu bytes, not the %zu written", path, r.len, len);
        hres_done(&r);
}

/* ---- SSE client ---- */

struct sse_frame {
        int64_t t_ms;       /* since the request started */
        cJSON *j;
};

struct sse {
        char *buf;          /* not yet parsed */
        size_t len;
        char *all;          /* everything received */
        size_t all_len;
        struct sse_frame f[512];
        int n;
        int comments;
        int bad_json;
        int64_t t0;
        bool abort_after_first_data;
        long status;
        char content_type[128];
        CURLcode rc;
};

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
        return k;
}

static size_t sse_header(char *p, size_t sz, size_t nm, void *ud) {
        struct sse *s = ud;
        size_t k = sz * nm;
        if (k > 14 && !strncasecmp(p, "content-type: ", 14))
                snprintf(s->content_type, sizeof(s->content_type), "%.*s", (int) strcspn(p + 14, "\r\n"), p + 14);
        return k;
}

static void sse_run(struct box *b, const char *what, const char *body, struct sse *s) {
        static const char *const headers[] = { "Content-Type: application/json", "Expect:", NULL };
        char rest[64];
        struct curl_slist *hl;
        snprintf(rest, sizeof(rest), "/%s", what);
        CURL *h = box_curl(b, rest, headers, 120L, &hl);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sse_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, sse_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, s);
        s->t0 = now_mono_ms();
        s->rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &s->status);
        curl_slist_free_all(hl);
        curl_easy_cleanup(h); /* closes the connection: a disconnect when aborted */
}

static void sse_done(struct sse *s) {
        for (int i = 0; i < s->n; i++)
                cJSON_Delete(s->f[i].j);
        free(s->buf);
        free(s->all);
        memset(s, 0, sizeof(*s));
}

static const char *frame_type(const struct sse *s, int i) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s->f[i].j, "type");
        return cJSON_IsString(t) ? t->valuestring : "?";
}
static const char *frame_data(const struct sse *s, int i) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(s->f[i].j, "data");
        return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* Concatenated data of every frame of a type. Static buffer. */
static const char *frames_joined(const struct sse *s, const char *type) {
        static char buf[65536];
        buf[0] = 0;
        for (int i = 0; i < s->n; i++)
                if (!strcmp(frame_type(s, i), type) && frame_data(s, i))
                        strncat(buf, frame_data(s, i), sizeof(buf) - strlen(buf) - 1);
        return buf;
}

/* sse_run, then: 200, stdout and stderr frames that join to out and err, and a last frame
 * `done` (with exit_code want_exit unless -1). */
static void sse_expect(struct box *b, const char *what, const char *body, const char *out, const char *err, int want_exit) {
        struct sse s = { 0 };
        sse_run(b, what, body, &s);
        ASSERT_EQ(s.status, 200);
        ASSERT_STREQ(frames_joined(&s, "stdout"), out);
        ASSERT_STREQ(frames_joined(&s, "stderr"), err);
        ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
        if (want_exit >= 0)
                ASSERT_EQ(cJSON_GetObjectItem(s.f[s.n - 1].j, "exit_code")->valueint, want_exit);
        sse_done(&s);
}

/* ================= exec ================= */

TEST_FULL(exec_output_exit_codes_env_cwd, 150) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);

        exec_ok(&b, "echo hello; echo oops >&2; exit 0", NULL, &r);
        ASSERT_STREQ(hres_message(&r), "Exec completed");
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "hello\n");
        ASSERT_STREQ(hres_data_str(&r, "stderr"), "oops\n");
        ASSERT_EQ(data_int(&r, "exit_code"), 0);
        ASSERT_GE(data_int(&r, "duration_ms"), 0);
        ASSERT_NULL(data_item(&r, "truncated"));
        ASSERT_NULL(data_item(&r, "timed_out"));
        hres_done(&r);

        /* Pipes, && and redirects work (it is a shell command). */
        exec_prints(&b, "printf 'b\\na\\n' | sort && echo x > /tmp/redir && cat /tmp/redir", NULL, "a\nb\nx\n");

        static const int codes[] = { 0, 1, 3, 255 };
        for (size_t i = 0; i < ELEMENTSOF(codes); i++) {
                char cmd[32];
                snprintf(cmd, sizeof(cmd), "exit %d", codes[i]);
                exec_ok(&b, cmd, NULL, &r);
                ASSERT_EQ(data_int(&r, "exit_code"), codes[i]);
                ASSERT_STREQ(hres_data_str(&r, "stdout"), "");
                hres_done(&r);
        }
        /* A command that does not exist: the shell's 127 and its message. */
        exec_ok(&b, "no-such-command-here", NULL, &r);
        ASSERT_EQ(data_int(&r, "exit_code"), 127);
        ASSERT_CONTAINS(hres_data_str(&r, "stderr"), "no-such-command-here");
        hres_done(&r);

        /* env: layered for this call only; the image's PATH still finds python3; same-named keys override. */
        exec_prints(&b, "echo \"$FOO|$HOME\"; python3 -c 'print(6*7)'", ",\"env\":{\"FOO\":\"bar baz\",\"HOME\":\"/tmp/h\"}",
                    "bar baz|/tmp/h\n42\n");
        exec_prints(&b, "echo \"${FOO-unset}|$HOME\"", NULL, "unset|/root\n");
        /* Values reach the process verbatim (no shell expansion of the value). */
        exec_prints(&b, "printf '%s' \"$V\"", ",\"env\":{\"V\":\"$(id) `x` \\\\ \\\"q\\\" ;\"}", "$(id) `x` \\ \"q\" ;");

        /* cwd: default "/", custom "/tmp". */
        exec_prints(&b, "pwd", NULL, "/\n");
        exec_prints(&b, "pwd", ",\"cwd\":\"/tmp\"", "/tmp\n");
        /* A cwd that does not exist fails clearly and quickly. */
        {
                int64_t t0 = now_mono_ms();
                post_run(&b, "exec", NULL, NULL, "{\"cmd\":\"pwd\",\"cwd\":\"/nope/deeper\"}", &r);
                ASSERT_LE(now_mono_ms() - t0, 15000);
                if (r.status == 200) {
                        /* If it is reported as a command result, the reason belongs on stderr, in the
                         * user's terms, without the internal wrapper script. */
                        ASSERT_NE(data_int(&r, "exit_code"), 0);
                        ASSERT_CONTAINS(hres_data_str(&r, "stderr"), "/nope/deeper");
                        ASSERT_TRUE(strstr(r.body, "paddock-exec") == NULL);
                } else {
                        ASSERT_TRUE(r.status >= 400 && r.status < 600);
                        ASSERT_CONTAINS(hres_message(&r), "/nope/deeper");
                }
                hres_done(&r);
        }
        /* The sandbox still works afterwards. */
        _cleanup_free_ char *o = sh(&b, "echo still-here");
        ASSERT_STREQ(o, "still-here\n");
}

TEST_FULL(exec_streams_order_and_utf8, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);

        /* Interleaved writes: each stream keeps its own order. */
        exec_ok(&b, "i=1; while [ $i -le 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done", NULL, &r);
        {
                char want_out[8192] = "", want_err[8192] = "", line[32];
                for (int i = 1; i <= 300; i++) {
                        snprintf(line, sizeof(line), "out%d\n", i);
                        strcat(want_out, line);
                        snprintf(line, sizeof(line), "err%d\n", i);
                        strcat(want_err, line);
                }
                ASSERT_STREQ(hres_data_str(&r, "stdout"), want_out);
                ASSERT_STREQ(hres_data_str(&r, "stderr"), want_err);
        }
        hres_done(&r);

        /* Invalid UTF-8 becomes U+FFFD; the answer is valid JSON with no raw invalid bytes. */
        exec_ok(&b, "printf '\\377\\376'; printf 'caf\\303\\251 \\360\\237\\230\\200' >&2", NULL, &r);
        ASSERT_NOT_NULL(r.json);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "\xef\xbf\xbd\xef\xbf\xbd");
        ASSERT_STREQ(hres_data_str(&r, "stderr"), "caf\xc3\xa9 \xf0\x9f\x98\x80");
        ASSERT_TRUE(utf8_valid(r.body, r.len));
        hres_done(&r);

        /* A multi-byte character split across two writes (with a pause between) stays intact. */
        exec_prints(&b, "printf '\\342\\202'; sleep 0.3; printf '\\254 euro'", NULL, "\xe2\x82\xac euro");

        /* A truncated sequence at the very end is replaced, not dropped silently into invalid JSON. */
        exec_ok(&b, "printf 'x\\342\\202'", NULL, &r);
        ASSERT_TRUE(utf8_valid(r.body, r.len));
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "x\xef\xbf\xbd");
        hres_done(&r);
}

TEST_FULL(exec_validation_and_access, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);

        static const struct { const char *body, *msg; } bad[] = {
                { "{}", "cmd is required" },
                { "{\"cmd\":\"\"}", "cmd must not be empty" },
                { "{\"cmd\":\"true\",\"timeout_seconds\":0}", "timeout_seconds" },
                { "{\"cmd\":\"true\",\"timeout_seconds\":301}", "timeout_seconds" },
                { "{\"cmd\":\"true\",\"env\":{\"1BAD\":\"x\"}}", "env key '1BAD' is not a valid variable name" },
                { "{\"cmd\":\"true\",\"env\":{\"A=B\":\"x\"}}", "is not a valid variable name" },
                { "{\"cmd\":\"true\",\"env\":{\"A\":1}}", "must be a string" },
                { "{\"cmd\":\"true\",\"cwd\":\"relative\"}", "cwd must be an absolute path" },
                { "{\"cmd\":\"true\",\"cwd\":\"/tmp/../etc\"}", "cwd must not contain '.' or '..' components" },
                { "{\"cmd\":\"true\",\"bogus\":1}", "bogus" },
                { "not json", NULL },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                post_run(&b, "exec", NULL, NULL, bad[i].body, &r);
                if (r.status != 400)
                        test_fail(__FILE__, __LINE__, "%s -> %ld %s", bad[i].body, r.status, r.body);
                ASSERT_NOT_NULL(hres_message(&r));
                if (bad[i].msg)
                        ASSERT_CONTAINS(hres_message(&r), bad[i].msg);
                hres_done(&r);
        }
        /* GET on exec is not allowed. */
        HTTP_EXPECT(&b.c, "GET", sb_path(&b, "/exec%s", ""), b.key, NULL, 405);

        /* Another account cannot see or run anything in this sandbox. */
        _cleanup_free_ char *bob = ctld_account_key(&b.c, "bob", NULL, NULL);
        post_expect(&b, "exec", bob, NULL, "{\"cmd\":\"echo pwned > /tmp/pwned\"}", 404);
        post_expect(&b, "code", bob, NULL, "{\"language\":\"python\",\"code\":\"print(1)\"}", 404);
        {
                char kh[300];
                snprintf(kh, sizeof(kh), "x-brimble-key: %s", bob);
                const char *h[] = { kh, NULL };
                http_req_full(&b.c, "PUT", sb_path(&b, "/files%s", "/tmp/pwned"), h, "x", 1, &r);
                ASSERT_EQ(r.status, 404);
                hres_done(&r);
                HTTP_EXPECT(&b.c, "GET", sb_path(&b, "/files%s", "/etc/hostname"), bob, NULL, 404);
                http_req(&b.c, "POST", sb_path(&b, "/files/batch%s", ""), bob,
                         "{\"files\":[{\"path\":\"/tmp/pwned\",\"content_base64\":\"eA==\"}]}", &r);
                ASSERT_EQ(r.status, 404);
                hres_done(&r);
        }
        /* (coreutils stat/ls fail with EINVAL under this gVisor: no statx. The shell's test works.) */
        _cleanup_free_ char *o = sh(&b, "[ -e /tmp/pwned ] && echo present || echo absent");
        ASSERT_STREQ(o, "absent\n");
        /* No key: 401; unknown sandbox: 404; malformed id: 400 or 404. */
        post_expect(&b, "exec", "", NULL, "{\"cmd\":\"true\"}", 401);
        post_expect(&b, "exec", NULL, "0123456789abcdef01234567", "{\"cmd\":\"true\"}", 404);
}

TEST_FULL(exec_timeout_kills_the_whole_tree, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);

        int64_t t0 = now_mono_ms();
        exec_ok(&b, "sleep 100 & sleep 50", ",\"timeout_seconds\":2", &r);
        int64_t took = now_mono_ms() - t0;
        ASSERT_GE(took, 1900);
        ASSERT_LE(took, 10000);
        ASSERT_TRUE(data_true(&r, "timed_out"));
        ASSERT_EQ(data_int(&r, "exit_code"), 137);
        ASSERT_CONTAINS(hres_message(&r), "timed out");
        hres_done(&r);

        /* No sleep is left running (zombies, state Z, are dead). */
        exec_prints(&b, alive_probe("'sleep '*"), NULL, "end\n");

        /* Output written before the kill is kept. */
        exec_ok(&b, "echo before; sleep 60", ",\"timeout_seconds\":1", &r);
        ASSERT_TRUE(data_true(&r, "timed_out"));
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "before\n");
        hres_done(&r);

        /* A process that ignores SIGTERM and runs in its own session dies too. */
        exec_ok(&b, "setsid sh -c 'trap \"\" TERM HUP INT; sleep 77' & sleep 60", ",\"timeout_seconds\":2", &r);
        ASSERT_TRUE(data_true(&r, "timed_out"));
        hres_done(&r);
        usleep(500000);
        exec_prints(&b, alive_probe("'sleep 77'*"), NULL, "end\n");

        /* A program whose name has a space or a ')' (comm in /proc/PID/stat; programs set their own
         * names with prctl(PR_SET_NAME) too) is part of the tree all the same. */
        exec_ok(&b, "cp /bin/sleep '/tmp/c d'; cp /bin/sleep '/tmp/x) S 1 '; setsid '/tmp/c d' 102 & setsid '/tmp/x) S 1 ' 103 & sleep 60",
                ",\"timeout_seconds\":2", &r);
        ASSERT_TRUE(data_true(&r, "timed_out"));
        hres_done(&r);
        usleep(500000);
        exec_prints(&b, alive_probe("'/tmp/c d 102'*|'/tmp/x) S 1  103'*"), NULL, "end\n");
}

TEST_FULL(exec_output_cap, 120) {
        struct box b;
        struct hres r;
        box_start(&b, "max_exec_output = 64K", NULL, NULL);

        /* 1 MiB of stdout, a short stderr: stdout is cut at the cap, stderr untouched. */
        exec_ok(&b, "head -c 1048576 /dev/zero | tr '\\000' a; echo tail-of-stderr >&2", NULL, &r);
        const char *out = hres_data_str(&r, "stdout");
        ASSERT_NOT_NULL(out);
        ASSERT_GE(strlen(out), 65536 - 4);
        ASSERT_LE(strlen(out), 65536);
        ASSERT_EQ(strspn(out, "a"), strlen(out));
        ASSERT_STREQ(hres_data_str(&r, "stderr"), "tail-of-stderr\n");
        ASSERT_TRUE(data_true(&r, "truncated"));
        ASSERT_TRUE(data_true(&r, "stdout_truncated"));
        ASSERT_TRUE(cJSON_IsFalse(data_item(&r, "stderr_truncated")));
        ASSERT_EQ(data_int(&r, "exit_code"), 0);
        hres_done(&r);

        /* Multi-byte output cut at the cap stays valid UTF-8. */
        exec_ok(&b, "python3 -c 'import sys; sys.stdout.write(\"\\u20ac\" * 100000)'", NULL, &r);
        ASSERT_TRUE(data_true(&r, "truncated"));
        ASSERT_TRUE(utf8_valid(hres_data_str(&r, "stdout"), strlen(hres_data_str(&r, "stdout"))));
        ASSERT_LE(strlen(hres_data_str(&r, "stdout")), 65536);
        hres_done(&r);

        /* Under the cap: no truncated flags at all. */
        exec_ok(&b, "head -c 60000 /dev/zero | tr '\\000' b", NULL, &r);
        ASSERT_EQ(strlen(hres_data_str(&r, "stdout")), 60000);
        ASSERT_NULL(data_item(&r, "truncated"));
        hres_done(&r);
}

/* ================= code ================= */

TEST_FULL(code_python_and_node, 180) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NODE_TEMPLATE, NULL);

        code_ok(&b, "{\"language\":\"python\",\"code\":\"print(6*7)\"}", "42\n", 0, &r);
        ASSERT_STREQ(hres_data_str(&r, "stderr"), "");
        hres_done(&r);

        /* Code a shell would mangle: quotes, backslashes, $(...), backticks, multi-line. */
        static const char tricky_py[] =
                "s = 'it\\'s \"quoted\" $(echo no) `echo no` $HOME \\\\ end'\n"
                "print(s)\n"
                "for i in range(2):\n"
                "    print(\"line\", i)\n";
        {
                code_json_ok(&b, "python", tricky_py, "it's \"quoted\" $(echo no) `echo no` $HOME \\ end\nline 0\nline 1\n", 0, &r);
                hres_done(&r);
        }

        /* An exception: traceback on stderr, exit 1. */
        code_ok(&b, "{\"language\":\"python\",\"code\":\"print('before')\\nraise ValueError('boom')\"}", "before\n", 1, &r);
        ASSERT_CONTAINS(hres_data_str(&r, "stderr"), "Traceback");
        ASSERT_CONTAINS(hres_data_str(&r, "stderr"), "ValueError: boom");
        hres_done(&r);

        /* env and cwd apply to code too. */
        code_ok(&b, "{\"language\":\"python\",\"code\":\"import os; print(os.environ['X'], os.getcwd())\",\"env\":{\"X\":\"y\"},\"cwd\":\"/tmp\"}",
                "y /tmp\n", -1, &r);
        hres_done(&r);

        /* The snippet file does not linger in /tmp. */
        static const char lingering[] = "for f in /tmp/.paddock-code* /tmp/paddock-code*; do [ -e \"$f\" ] && echo \"$f\"; done; echo end";
        {
                _cleanup_free_ char *ls = sh(&b, lingering);
                ASSERT_STREQ(ls, "end\n");
        }

        /* Timeout. */
        int64_t t0 = now_mono_ms();
        code_ok(&b, "{\"language\":\"python\",\"code\":\"import time\\nprint('x', flush=True)\\ntime.sleep(100)\",\"timeout_seconds\":2}",
                "x\n", 137, &r);
        ASSERT_LE(now_mono_ms() - t0, 10000);
        ASSERT_TRUE(data_true(&r, "timed_out"));
        hres_done(&r);


        /* Bad input. */
        static const struct { const char *body, *msg; } bad[] = {
                { "{\"language\":\"ruby\",\"code\":\"puts 1\"}", "language must be one of python, node" },
                { "{\"code\":\"print(1)\"}", "language is required" },
                { "{\"language\":\"python\"}", "code is required" },
                { "{\"language\":\"python\",\"code\":\"\"}", "code must not be empty" },
                { "{\"language\":\"python\",\"code\":\"1\",\"timeout_seconds\":301}", "timeout_seconds" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                post_run(&b, "code", NULL, NULL, bad[i].body, &r);
                if (r.status != 400)
                        test_fail(__FILE__, __LINE__, "%s -> %ld %s", bad[i].body, r.status, r.body);
                ASSERT_CONTAINS(hres_message(&r), bad[i].msg);
                hres_done(&r);
        }

        /* node, in a node sandbox. */
        char nid[25], pyid[25];
        snprintf(pyid, sizeof(pyid), "%s", b.id);
        ctld_create(&b.c, b.key, "{\"template\":\"node-18\"}", nid);
        snprintf(b.id, sizeof(b.id), "%s", nid);
        code_ok(&b, "{\"language\":\"node\",\"code\":\"console.log(6*7)\"}", "42\n", 0, &r);
        hres_done(&r);
        {
                static const char js[] = "const s = `tick ${'$'}(x) \\\\ \"dq\" 'sq'`;\nconsole.log(s);\nconsole.error('to stderr');\nprocess.exit(3);\n";
                code_json_ok(&b, "node", js, "tick $(x) \\ \"dq\" 'sq'\n", 3, &r);
                ASSERT_STREQ(hres_data_str(&r, "stderr"), "to stderr\n");
                hres_done(&r);
        }
        code_ok(&b, "{\"language\":\"node\",\"code\":\"throw new Error('kaboom')\"}", NULL, 1, &r);
        ASSERT_CONTAINS(hres_data_str(&r, "stderr"), "kaboom");
        hres_done(&r);

        /* The snippet of the python run killed at its timeout is not left behind in /tmp either. */
        snprintf(b.id, sizeof(b.id), "%s", pyid);
        {
                _cleanup_free_ char *ls = sh(&b, lingering);
                ASSERT_STREQ(ls, "end\n");
        }
}

/* ================= streaming ================= */

TEST_FULL(stream_frames_arrive_as_produced, 120) {
        struct box b;
        struct sse s = { 0 };
        box_start(&b, NULL, NULL, NULL);

        sse_run(&b, "exec", "{\"cmd\":\"for i in 1 2 3; do echo $i; sleep 1; done\",\"stream\":true}", &s);
        ASSERT_EQ(s.rc, CURLE_OK);
        ASSERT_EQ(s.status, 200);
        ASSERT_TRUE(!strncmp(s.content_type, "text/event-stream", 17));
        ASSERT_TRUE(!strncmp(s.all, ": open", 6));
        ASSERT_EQ(s.bad_json, 0);
        ASSERT_GE(s.n, 4);
        ASSERT_STREQ(frames_joined(&s, "stdout"), "1\n2\n3\n");
        ASSERT_STREQ(frames_joined(&s, "stderr"), "");
        /* Every frame before the last is output; the last is done. */
        for (int i = 0; i < s.n - 1; i++)
                ASSERT_STREQ(frame_type(&s, i), "stdout");
        ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
        const cJSON *last = s.f[s.n - 1].j;
        ASSERT_EQ(cJSON_GetObjectItem(last, "exit_code")->valueint, 0);
        ASSERT_TRUE(cJSON_IsNumber(cJSON_GetObjectItem(last, "duration_ms")));
        ASSERT_NULL(cJSON_GetObjectItem(last, "timed_out"));
        /* The first line arrived long before the end: no buffering until exit. */
        ASSERT_GE(s.f[s.n - 1].t_ms - s.f[0].t_ms, 1500);
        /* The body ends right after the done frame. */
        ASSERT_EQ(s.len, 0);
        ASSERT_TRUE(s.all_len >= 2 && !strcmp(s.all + s.all_len - 2, "\n\n"));
        sse_done(&s);

        /* stderr frames are typed stderr; a non-zero exit shows in done. */
        sse_expect(&b, "exec", "{\"cmd\":\"echo o; echo e >&2; exit 4\",\"stream\":true}", "o\n", "e\n", 4);

        /* Streamed code works the same way. */
        sse_expect(&b, "code", "{\"language\":\"python\",\"code\":\"import sys\\nprint('py')\\nsys.stderr.write('pe\\\\n')\",\"stream\":true}",
                   "py\n", "pe\n", -1);

        /* Invalid UTF-8 in a stream: frames are still valid JSON with U+FFFD. */
        sse_run(&b, "exec", "{\"cmd\":\"printf 'a\\\\377b'\",\"stream\":true}", &s);
        ASSERT_EQ(s.bad_json, 0);
        ASSERT_STREQ(frames_joined(&s, "stdout"), "a\xef\xbf\xbd" "b");
        sse_done(&s);

        /* Validation errors are still plain JSON 400s, not streams. */
        post_expect(&b, "exec", NULL, NULL, "{\"cmd\":\"true\",\"stream\":\"yes\"}", 400);
}

TEST_FULL(stream_timeout_and_disconnect, 120) {
        struct box b;
        struct sse s = { 0 };
        box_start(&b, NULL, NULL, NULL);

        /* Timed out: ends with done + timed_out, exit 137, in well under 10 s. */
        int64_t t0 = now_mono_ms();
        sse_run(&b, "exec", "{\"cmd\":\"echo go; sleep 100 & sleep 60\",\"stream\":true,\"timeout_seconds\":2}", &s);
        ASSERT_LE(now_mono_ms() - t0, 10000);
        ASSERT_EQ(s.status, 200);
        ASSERT_EQ(s.rc, CURLE_OK);
        ASSERT_STREQ(frames_joined(&s, "stdout"), "go\n");
        ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(s.f[s.n - 1].j, "timed_out")));
        ASSERT_EQ(cJSON_GetObjectItem(s.f[s.n - 1].j, "exit_code")->valueint, 137);
        sse_done(&s);

        /* Client disconnects after the first frame: the process is killed. */
        s.abort_after_first_data = true;
        sse_run(&b, "exec", "{\"cmd\":\"echo started; sleep 1000\",\"stream\":true,\"timeout_seconds\":300}", &s);
        ASSERT_EQ(s.rc, CURLE_WRITE_ERROR);
        ASSERT_EQ(s.n, 1);
        ASSERT_STREQ(frame_data(&s, 0), "started\n");
        sse_done(&s);
        const char *probe = alive_probe("'sleep 1000'*");
        /* It was really running: the probe itself works (sanity check with a live one). */
        {
                struct hres r;
                exec_ok(&b, "sleep 1000 & sleep 0.3; for d in /proc/[0-9]*; do c=$(tr '\\000' ' ' < $d/cmdline 2>/dev/null); "
                            "case \"$c\" in 'sleep 1000'*) echo seen;; esac; done; kill $!", NULL, &r);
                ASSERT_CONTAINS(hres_data_str(&r, "stdout"), "seen");
                hres_done(&r);
        }
        char *o = sh_until(&b, probe, "end\n", 10000);
        if (strcmp(o, "end\n") != 0)
                test_fail(__FILE__, __LINE__, "sleep 1000 still alive 10 s after the client left: %s", o);
        free(o);

        /* controld still answers, and the slot was released (a fresh exec works). */
        HTTP_EXPECT(&b.c, "GET", "/healthz", NULL, NULL, 200);
        _cleanup_free_ char *e = sh(&b, "echo ok");
        ASSERT_STREQ(e, "ok\n");
}

/* Output a streamed /code produces while controld is still writing the code to its stdin
 * piles up in controld (the client is not being answered yet); past 4 MiB the command is
 * killed and the stream is one error frame. The sandbox is the user's own, so a user can
 * put a cat first on its PATH: the wrapper's "cat > file" then writes 6 MiB to stderr before
 * it reads any of the 1 MB of code, which cannot all fit in the pipes on the way. */
TEST_FULL(stream_output_before_stdin_is_capped, 150) {
        struct box b;
        struct sse s = { 0 };
        box_start(&b, NULL, NULL, NULL);
        free(sh(&b, "printf '#!/bin/sh\\nif [ -e /tmp/flood ]; then rm -f /tmp/flood; "
                    "head -c 6291456 /dev/zero | tr \"\\\\000\" x >&2; fi\\nexec /bin/cat \"$@\"\\n' "
                    "> /usr/local/bin/cat && chmod +x /usr/local/bin/cat && touch /tmp/flood && command -v cat"));
        _cleanup_free_ char *code = xmalloc(1000001);
        memset(code, '#', 1000000);
        code[1000000] = 0;
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "language", "python");
        cJSON_AddStringToObject(o, "code", code);
        cJSON_AddBoolToObject(o, "stream", true);
        _cleanup_free_ char *body = cJSON_PrintUnformatted(o);
        sse_run(&b, "code", body, &s);
        ASSERT_EQ(s.status, 200);
        ASSERT_EQ(s.rc, CURLE_OK);
        ASSERT_TRUE(!strncmp(s.content_type, "text/event-stream", 17));
        /* Nothing of the flood reaches the client: the frames held back were dropped. */
        ASSERT_LE(s.all_len, 64 * 1024);
        ASSERT_EQ(s.n, 1);
        ASSERT_STREQ(frame_type(&s, 0), "error");
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(s.f[0].j, "message");
        ASSERT_TRUE(cJSON_IsString(m));
        ASSERT_CONTAINS(m->valuestring, "before its input was sent");
        sse_done(&s);
        /* Killed and cleaned up: no code file left, and the sandbox still runs commands. */
        _cleanup_free_ char *left = sh_until(&b, "ls -a /tmp | grep -c '^.paddock-code-' || true", "0\n", 10000);
        ASSERT_STREQ(left, "0\n");
        free(sh(&b, "rm -f /usr/local/bin/cat"));
        struct hres r;
        code_json_ok(&b, "python", "print(6*7)", "42\n", -1, &r);
        hres_done(&r);
        HTTP_EXPECT(&b.c, "GET", "/healthz", NULL, NULL, 200);
}

/* ================= files ================= */

static void random_bytes(uint8_t *p, size_t n) {
        uint64_t x = (uint64_t) now_mono_ms() * 6364136223846793005ULL + 1442695040888963407ULL;
        for (size_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p[i] = (uint8_t) (x >> 24);
        }
        /* Runs of NUL bytes, and bytes that look like line ends. */
        for (size_t i = 0; i + 64 < n; i += n / 17)
                memset(p + i, 0, 64);
        if (n > 4)
                memcpy(p, "\r\n\0\377", 4);
}

TEST_FULL(files_round_trip, 150) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);

        size_t n = 5 * 1024 * 1024;
        _cleanup_free_ uint8_t *data = xmalloc(n);
        random_bytes(data, n);
        char want[65], got[65];
        sha256_hex(data, n, want);

        static const char *const dests[] = { "/tmp/blob.bin", "/root/x" };
        for (size_t i = 0; i < ELEMENTSOF(dests); i++) {
                put_file(&b, dests[i], data, n, &r);
                if (r.status != 204)
                        test_fail(__FILE__, __LINE__, "PUT %s -> %ld %s", dests[i], r.status, r.body);
                hres_done(&r);
                get_file(&b, dests[i], &r);
                ASSERT_EQ(r.status, 200);
                ASSERT_STREQ(r.content_type, "application/octet-stream");
                ASSERT_EQ(r.len, n);
                sha256_hex(r.body, r.len, got);
                ASSERT_STREQ(got, want);
                hres_done(&r);
        }
        /* The sandbox sees the same bytes. */
        {
                char cmd[128];
                snprintf(cmd, sizeof(cmd), "sha256sum /root/x | cut -d' ' -f1; wc -c < /tmp/blob.bin");
                _cleanup_free_ char *o = sh(&b, cmd);
                char expect[128];
                snprintf(expect, sizeof(expect), "%s\n%zu\n", want, n);
                ASSERT_STREQ(o, expect);
        }
        /* Overwrite with something shorter: truncated, not merged. */
        put_expect(&b, "/root/x", "short", 5, 204);
        get_expect(&b, "/root/x", 200, "short", 5);

        /* Empty file. */
        put_expect(&b, "/tmp/empty", NULL, 0, 204);
        get_expect(&b, "/tmp/empty", 200, "", 0);
        exec_prints(&b, "wc -c < /tmp/empty", NULL, "0\n");

        /* Spaces and unicode, URL-encoded in the request; the sandbox sees the decoded name. */
        put_expect(&b, "/tmp/my%20file%20%C3%A9%E2%82%AC.txt", "uni", 3, 204);
        exec_prints(&b, "cat '/tmp/my file \xc3\xa9\xe2\x82\xac.txt'", NULL, "uni");
        get_expect(&b, "/tmp/my%20file%20%C3%A9%E2%82%AC.txt", 200, "uni", 3);
        /* Shell metacharacters in a name are just characters. */
        put_expect(&b, "/tmp/%24%28touch%20owned-x%29%3B%60touch%20owned-y%60", "meta", 4, 204);
        exec_prints(&b, "cat '/tmp/$(touch owned-x);`touch owned-y`'; [ -e /owned-x ] || [ -e /owned-y ] || echo ' no-owned'", NULL, "meta no-owned\n");

        /* Nothing lands on the host. */
        char canary[96];
        snprintf(canary, sizeof(canary), "/tmp/paddock-host-canary-%08lx%04x", (unsigned long) random(), (unsigned) getpid() & 0xffff);
        put_expect(&b, canary, "canary", 6, 204);
        get_expect(&b, canary, 200, NULL, 0);
        ASSERT_TRUE(access(canary, F_OK) < 0 && errno == ENOENT);
}

TEST_FULL(files_errors_and_traversal, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);

        put_file(&b, "/nope/x", "x", 1, &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_STREQ(hres_message(&r), "Destination directory does not exist: /nope");
        hres_done(&r);
        /* Also with a big body: the answer comes, the body is not needed. */
        {
                size_t n = 5 * 1024 * 1024;
                _cleanup_free_ char *big = xmalloc(n);
                memset(big, 'b', n);
                int64_t t0 = now_mono_ms();
                put_file(&b, "/nope/big", big, n, &r);
                ASSERT_EQ(r.status, 400);
                ASSERT_STREQ(hres_message(&r), "Destination directory does not exist: /nope");
                ASSERT_LE(now_mono_ms() - t0, 20000);
                hres_done(&r);
        }
        /* A parent that is a file. */
        put_expect(&b, "/etc/hostname/x", "x", 1, 400);
        get_file(&b, "/tmp/none", &r);
        ASSERT_EQ(r.status, 404);
        ASSERT_STREQ(hres_message(&r), "File not found: /tmp/none");
        hres_done(&r);
        get_file(&b, "/tmp", &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_NOT_NULL(hres_message(&r));
        hres_done(&r);
        put_expect(&b, "/tmp", "x", 1, 400);

        /* Traversal: "." and ".." components are refused, also when URL-encoded. */
        static const char *const trav[] = { "/tmp/../etc/passwd", "/tmp/./x", "/tmp/%2e%2e/etc/passwd", "/tmp/%2E%2E/etc/passwd",
                                            "/tmp/..", "/tmp//x", "/tmp/x/", "/tmp/%2e%2e%2fetc%2fpasswd" };
        for (size_t i = 0; i < ELEMENTSOF(trav); i++) {
                get_file(&b, trav[i], &r);
                if (r.status != 400)
                        test_fail(__FILE__, __LINE__, "GET %s -> %ld %s", trav[i], r.status, r.body);
                hres_done(&r);
                put_file(&b, trav[i], "t", 1, &r);
                if (r.status != 400)
                        test_fail(__FILE__, __LINE__, "PUT %s -> %ld %s", trav[i], r.status, r.body);
                hres_done(&r);
        }
        /* The root itself is no file. */
        get_file(&b, "/", &r);
        ASSERT_TRUE(r.status == 400 || r.status == 404);
        hres_done(&r);
        put_file(&b, "/", "t", 1, &r);
        ASSERT_TRUE(r.status == 400 || r.status == 404);
        hres_done(&r);
        get_file(&b, "/tmp/../etc/passwd", &r);
        ASSERT_CONTAINS(hres_message(&r), "'.' or '..'");
        hres_done(&r);
        /* Reading a system file by its honest path is fine (it is the sandbox's own). */
        get_file(&b, "/etc/os-release", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_TRUE(memmem(r.body, r.len, "Debian", 6) != NULL);
        hres_done(&r);
        /* Unknown sandbox. */
        HTTP_EXPECT(&b.c, "GET", "/sandboxes/0123456789abcdef01234567/files/tmp/x", b.key, NULL, 404);
        /* Methods. */
        HTTP_EXPECT(&b.c, "DELETE", sb_path(&b, "/files%s", "/tmp/x"), b.key, NULL, 405);
}

/* A raw HTTP/1.1 request: headers only, then waits up to timeout_ms for the answer. */
static char *raw_http(int port, const char *head, int timeout_ms, int64_t *ret_ms) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        ASSERT_EQ(write(fd, head, strlen(head)), (ssize_t) strlen(head));
        int64_t t0 = now_mono_ms();
        char *buf = xmalloc(65536);
        size_t len = 0;
        for (;;) {
                int left = timeout_ms - (int) (now_mono_ms() - t0);
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (left <= 0 || poll(&p, 1, left) <= 0)
                        break;
                ssize_t k = read(fd, buf + len, 65535 - len);
                if (k <= 0)
                        break;
                len += (size_t) k;
                buf[len] = 0;
                /* Complete once the headers and a JSON body are in. */
                char *hend = strstr(buf, "\r\n\r\n");
                if (hend && strchr(hend, '}'))
                        break;
        }
        buf[len] = 0;
        *ret_ms = now_mono_ms() - t0;
        close(fd);
        return buf;
}

static size_t zero_reader(char *p, size_t sz, size_t nm, void *ud) {
        size_t *left = ud, k = sz * nm;
        if (k > *left)
                k = *left;
        memset(p, 'z', k);
        *left -= k;
        return k;
}

static size_t discard(char *p, size_t sz, size_t nm, void *ud) {
        (void) p;
        (void) ud;
        return sz * nm;
}

/* PUT /files<path> of *left zero bytes through curl (counted down as curl reads them), with
 * Content-Length when with_length and these extra headers; returns the HTTP status (0: none)
 * and curl's result in *ret_rc. */
static long put_zeros(struct box *b, const char *path, size_t *left, bool with_length, const char *const *headers,
                      CURLcode *ret_rc) {
        char rest[256];
        struct curl_slist *hl;
        snprintf(rest, sizeof(rest), "/files%s", path);
        CURL *h = box_curl(b, rest, headers, 60L, &hl);
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        if (with_length)
                curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t) *left);
        curl_easy_setopt(h, CURLOPT_READFUNCTION, zero_reader);
        curl_easy_setopt(h, CURLOPT_READDATA, left);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
        *ret_rc = curl_easy_perform(h);
        long st = 0;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_slist_free_all(hl);
        curl_easy_cleanup(h);
        return st;
}

TEST_FULL(files_size_cap_before_body, 120) {
        struct box b;
        struct hres r;
        box_start(&b, "max_file = 1M", NULL, NULL);

        /* Headers only, with Content-Length 2 MiB and no body: 413 comes back anyway. */
        char head[1024];
        snprintf(head, sizeof(head),
                 "PUT /sandboxes/%s/files/tmp/big HTTP/1.1\r\nHost: 127.0.0.1\r\nx-brimble-key: %s\r\n"
                 "Content-Type: application/octet-stream\r\nContent-Length: 2097152\r\n\r\n",
                 b.id, b.key);
        int64_t ms;
        _cleanup_free_ char *resp = raw_http(b.c.port, head, 5000, &ms);
        if (strncmp(resp, "HTTP/1.1 413", 12) != 0)
                test_fail(__FILE__, __LINE__, "no 413 within 5 s without a body (%lld ms): %.300s", (long long) ms, resp);
        ASSERT_CONTAINS(resp, "File too large");
        ASSERT_LE(ms, 5000);

        /* Exactly the cap is fine; one byte over is not. */
        size_t cap = 1024 * 1024;
        _cleanup_free_ char *blob = xmalloc(cap + 1);
        memset(blob, 'q', cap + 1);
        put_expect(&b, "/tmp/at-cap", blob, cap, 204);
        /* One byte over, the way curl sends a big body (Expect: 100-continue): a clean 413 and
         * the body never goes out. */
        {
                size_t left = cap + 1;
                CURLcode rc;
                long st = put_zeros(&b, "/tmp/over-cap", &left, true, (const char *[]) { "Expect: 100-continue", NULL }, &rc);
                if (rc != CURLE_OK || st != 413)
                        test_fail(__FILE__, __LINE__, "PUT cap+1 with Expect -> HTTP %ld (curl %d: %s)", st, rc, curl_easy_strerror(rc));
                ASSERT_EQ(left, cap + 1);
        }
        /* Without Expect the client is already sending when the 413 comes; it must still be able
         * to read that 413 (the server drains or lingers instead of resetting the connection). */
        for (int i = 0; i < 3; i++) {
                put_file(&b, "/tmp/over-cap", blob, cap + 1, &r);
                if (r.status != 413)
                        test_fail(__FILE__, __LINE__, "PUT cap+1 without Expect, try %d -> %ld (negative: curl error; -55 = "
                                  "send failed, the connection was reset before the 413 could be read)", i, r.status);
                hres_done(&r);
        }

        /* Chunked (no Content-Length) over the cap: 413 too, and nothing partial is left readable as complete. */
        {
                size_t left = 3 * cap;
                CURLcode rc;
                long st = put_zeros(&b, "/tmp/chunked", &left, false,
                                    (const char *[]) { "Transfer-Encoding: chunked", "Expect:", NULL }, &rc);
                if (st != 413)
                        test_fail(__FILE__, __LINE__, "chunked 3 MiB upload with a 1 MiB cap -> HTTP %ld (curl %d: %s)", st, rc,
                                  curl_easy_strerror(rc));
        }
        /* A client that goes away in the middle of an upload leaves no writer behind. */
        {
                snprintf(head, sizeof(head),
                         "PUT /sandboxes/%s/files/tmp/partial-upload HTTP/1.1\r\nHost: 127.0.0.1\r\nx-brimble-key: %s\r\n"
                         "Content-Length: 1000000\r\n\r\n",
                         b.id, b.key);
                int fd = socket(AF_INET, SOCK_STREAM, 0);
                struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(b.c.port) };
                a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
                ASSERT_EQ(write(fd, head, strlen(head)), (ssize_t) strlen(head));
                ASSERT_EQ(write(fd, blob, 100000), 100000);
                static const char probe[] =
                        "for d in /proc/[0-9]*; do read -r pid comm state rest < $d/stat 2>/dev/null || continue; "
                        "[ \"$state\" = Z ] && continue; c=$(tr '\\000' ' ' < $d/cmdline 2>/dev/null); "
                        "case \"$c\" in *partial-upload*) case \"$c\" in *cmdline*) ;; *) echo \"alive $pid $c\";; esac;; esac; done; echo end";
                char *left = NULL;
                usleep(500000);
                /* The probe sees the writer while the upload is open... */
                left = sh(&b, probe);
                ASSERT_CONTAINS(left, "alive");
                free(left);
                close(fd);
                /* ...and not long after the client left. */
                left = sh_until(&b, probe, "end\n", 10000);
                if (strcmp(left, "end\n") != 0)
                        test_fail(__FILE__, __LINE__, "upload writer alive 10 s after the client left: %s", left);
                free(left);
        }

        /* controld still answers and the sandbox is usable. */
        _cleanup_free_ char *o = sh(&b, "wc -c < /tmp/at-cap");
        ASSERT_STREQ(o, "1048576\n");
}

TEST_FULL(files_persistent_volume_across_pause_resume, 180) {
        struct box b;
        struct hres r;
        char path[128];
        box_start(&b, NULL, NULL, "{\"template\":\"python-3.11\",\"persistent\":true,\"persistentDiskGB\":10}");

        size_t n = 256 * 1024;
        _cleanup_free_ uint8_t *data = xmalloc(n);
        random_bytes(data, n);
        char want[65], got[65];
        sha256_hex(data, n, want);
        put_file(&b, "/workspace/x", data, n, &r);
        if (r.status != 204)
                test_fail(__FILE__, __LINE__, "PUT /workspace/x -> %ld %s", r.status, r.body);
        hres_done(&r);

        snprintf(path, sizeof(path), "/sandboxes/%s/pause", b.id);
        HTTP_EXPECT(&b.c, "POST", path, b.key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(&b.c, b.key, b.id, "paused", 60), "paused");

        /* A paused sandbox runs nothing and moves no files: 400 with the reason. */
        post_run(&b, "exec", NULL, NULL, "{\"cmd\":\"true\"}", &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_CONTAINS(hres_message(&r), "paused");
        hres_done(&r);
        post_expect(&b, "code", NULL, NULL, "{\"language\":\"python\",\"code\":\"print(1)\"}", 400);
        get_expect(&b, "/workspace/x", 400, NULL, 0);
        put_expect(&b, "/workspace/y", "y", 1, 400);
        {
                struct sse s = { 0 };
                sse_run(&b, "exec", "{\"cmd\":\"true\",\"stream\":true}", &s);
                ASSERT_EQ(s.status, 400);
                sse_done(&s);
        }

        snprintf(path, sizeof(path), "/sandboxes/%s/resume", b.id);
        HTTP_EXPECT(&b.c, "POST", path, b.key, NULL, 200);
        ASSERT_STREQ(ctld_wait_status(&b.c, b.key, b.id, "ready", 90), "ready");

        get_file(&b, "/workspace/x", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(r.len, n);
        sha256_hex(r.body, r.len, got);
        ASSERT_STREQ(got, want);
        hres_done(&r);
}

TEST_FULL(files_batch, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);

        /* 3 good, 1 bad path (missing parent), 1 bad base64. */
        http_req(&b.c, "POST", sb_path(&b, "/files/batch%s", ""), b.key,
                 "{\"files\":["
                 "{\"path\":\"/tmp/a.txt\",\"content_base64\":\"aGVsbG8=\"},"
                 "{\"path\":\"/root/b.bin\",\"content_base64\":\"AP8AAQ==\"},"
                 "{\"path\":\"/nope/c.txt\",\"content_base64\":\"eA==\"},"
                 "{\"path\":\"/tmp/d.txt\",\"content_base64\":\"!!!not base64!!!\"},"
                 "{\"path\":\"/tmp/empty\",\"content_base64\":\"\"}"
                 "]}",
                 &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(data_int(&r, "uploaded"), 3);
        ASSERT_EQ(data_int(&r, "failed"), 2);
        {
                const cJSON *res = data_item(&r, "results");
                ASSERT_EQ(cJSON_GetArraySize(res), 5);
                static const char *const paths[] = { "/tmp/a.txt", "/root/b.bin", "/nope/c.txt", "/tmp/d.txt", "/tmp/empty" };
                static const bool ok[] = { true, true, false, false, true };
                for (int i = 0; i < 5; i++) {
                        const cJSON *e = cJSON_GetArrayItem(res, i);
                        ASSERT_STREQ(cJSON_GetObjectItem(e, "path")->valuestring, paths[i]);
                        ASSERT_EQ(cJSON_IsTrue(cJSON_GetObjectItem(e, "success")), ok[i]);
                        ASSERT_EQ(cJSON_GetObjectItem(e, "error") != NULL, !ok[i]);
                }
                ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 0), "bytes")->valueint, 5);
                ASSERT_EQ(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 1), "bytes")->valueint, 4);
                ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetArrayItem(res, 2), "error")->valuestring,
                             "Destination directory does not exist: /nope");
        }
        hres_done(&r);
        get_expect(&b, "/tmp/a.txt", 200, "hello", 5);
        get_expect(&b, "/root/b.bin", 200, "\0\377\0\1", 4);
        get_expect(&b, "/tmp/d.txt", 404, NULL, 0);
        get_expect(&b, "/tmp/empty", 200, "", 0);

        /* More than 100 files: 400, nothing written. */
        {
                struct strbuf sbuf;
                strbuf_init(&sbuf, 0);
                strbuf_printf(&sbuf, "{\"files\":[");
                for (int i = 0; i < 101; i++)
                        strbuf_printf(&sbuf, "%s{\"path\":\"/tmp/many-%d\",\"content_base64\":\"eA==\"}", i ? "," : "", i);
                strbuf_printf(&sbuf, "]}");
                HTTP_EXPECT_MSG(&b.c, "POST", sb_path(&b, "/files/batch%s", ""), b.key, sbuf.buf, 400, "between 1 and 100");
                strbuf_done(&sbuf);
                _cleanup_free_ char *o = sh(&b, "for f in /tmp/many-*; do [ -e \"$f\" ] && echo \"$f\"; done; echo end");
                ASSERT_STREQ(o, "end\n");
        }
        /* Empty list, traversal in a batch path. */
        HTTP_EXPECT(&b.c, "POST", sb_path(&b, "/files/batch%s", ""), b.key, "{\"files\":[]}", 400);
        http_req(&b.c, "POST", sb_path(&b, "/files/batch%s", ""), b.key,
                 "{\"files\":[{\"path\":\"/tmp/../etc/evil\",\"content_base64\":\"eA==\"}]}", &r);
        ASSERT_TRUE(r.status == 400 || (r.status == 200 && data_int(&r, "failed") == 1));
        hres_done(&r);
        _cleanup_free_ char *o = sh(&b, "[ -e /etc/evil ] && echo present || echo absent");
        ASSERT_STREQ(o, "absent\n");
}

/* ================= concurrency ================= */

struct par {
        struct box *b;
        int i;
        long status;
        char out[64];
        char msg[256];
        int exit_code;
        const char *cmd_fmt;
};

static void *par_exec(void *ud) {
        struct par *p = ud;
        struct hres r;
        char body[256], path[128];
        snprintf(body, sizeof(body), p->cmd_fmt, p->i);
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", p->b->id);
        http_req(&p->b->c, "POST", path, p->b->key, body, &r);
        p->status = r.status;
        if (r.status == 200) {
                const char *o = hres_data_str(&r, "stdout");
                snprintf(p->out, sizeof(p->out), "%s", o ? o : "(null)");
                const cJSON *e = data_item(&r, "exit_code");
                p->exit_code = cJSON_IsNumber(e) ? e->valueint : -999;
        }
        snprintf(p->msg, sizeof(p->msg), "%s", hres_message(&r) ? hres_message(&r) : "");
        hres_done(&r);
        return NULL;
}

/* n par_exec threads at once, job i with cmd_fmt formatted with i; returns when all are done. */
static void run_parallel(struct box *b, struct par *p, int n, const char *cmd_fmt) {
        pthread_t t[n];
        for (int i = 0; i < n; i++) {
                p[i] = (struct par) { .b = b, .i = i, .cmd_fmt = cmd_fmt };
                ASSERT_EQ(pthread_create(&t[i], NULL, par_exec, &p[i]), 0);
        }
        for (int i = 0; i < n; i++)
                pthread_join(t[i], NULL);
}

TEST_FULL(concurrency_50_execs_one_sandbox, 150) {
        struct box b;
        box_start(&b, "max_exec_concurrent = 64", NULL, NULL);
        enum { N = 50 };
        struct par p[N];
        run_parallel(&b, p, N, "{\"cmd\":\"sleep 0.5; echo job-%d\",\"timeout_seconds\":120}");
        for (int i = 0; i < N; i++) {
                char want[32];
                snprintf(want, sizeof(want), "job-%d\n", i);
                if (p[i].status != 200 || strcmp(p[i].out, want) != 0 || p[i].exit_code != 0)
                        test_fail(__FILE__, __LINE__, "exec %d -> %ld exit %d out \"%s\" msg \"%s\"", i, p[i].status, p[i].exit_code,
                                  p[i].out, p[i].msg);
        }
        /* Nothing left over from the wrappers. */
        /* Only this probe's own pid record is there. */
        _cleanup_free_ char *o = sh(&b, "n=0; for f in /tmp/.paddock-exec-*; do [ -e \"$f\" ] && n=$((n+1)); done; echo $n");
        ASSERT_STREQ(o, "1\n");
}

TEST_FULL(concurrency_limit_answers_429, 120) {
        struct box b;
        box_start(&b, "max_exec_concurrent = 2", NULL, NULL);
        enum { N = 10 };
        struct par p[N];
        run_parallel(&b, p, N, "{\"cmd\":\"sleep 2; echo s%d\"}");
        int ok = 0, busy = 0;
        for (int i = 0; i < N; i++) {
                if (p[i].status == 200) {
                        char want[16];
                        snprintf(want, sizeof(want), "s%d\n", i);
                        ASSERT_STREQ(p[i].out, want);
                        ok++;
                } else if (p[i].status == 429) {
                        ASSERT_CONTAINS(p[i].msg, "Too many commands running in this sandbox (limit 2)");
                        busy++;
                } else
                        test_fail(__FILE__, __LINE__, "exec %d -> %ld %s", i, p[i].status, p[i].msg);
        }
        ASSERT_GE(ok, 2);
        ASSERT_GE(busy, 1);
        ASSERT_EQ(ok + busy, N);
        /* Slots come back: afterwards two run side by side again. */
        struct par q[2];
        run_parallel(&b, q, 2, "{\"cmd\":\"sleep 1; echo s%d\"}");
        for (int i = 0; i < 2; i++)
                ASSERT_EQ(q[i].status, 200);
        /* A streamed exec holds a slot too, and gives it back when it ends. */
        struct sse s = { 0 };
        sse_run(&b, "exec", "{\"cmd\":\"echo x\",\"stream\":true}", &s);
        ASSERT_EQ(s.status, 200);
        sse_done(&s);
        _cleanup_free_ char *o = sh(&b, "echo fine");
        ASSERT_STREQ(o, "fine\n");
}

/* ================= activity ================= */

static char *last_activity(struct box *b) {
        struct hres r;
        http_req(&b->c, "GET", sb_path(b, "%s", ""), b->key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        char *v = xstrdup(hres_data_str(&r, "last_activity_at"));
        hres_done(&r);
        return v;
}

TEST_FULL(runtime_calls_bump_last_activity, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);
        static const char *const what[] = { "exec", "code", "stream", "put", "get", "batch" };
        for (size_t i = 0; i < ELEMENTSOF(what); i++) {
                _cleanup_free_ char *before = last_activity(&b);
                usleep(1100 * 1000);
                const char *w = what[i];
                if (!strcmp(w, "exec"))
                        post_run(&b, "exec", NULL, NULL, "{\"cmd\":\"true\"}", &r);
                else if (!strcmp(w, "code"))
                        post_run(&b, "code", NULL, NULL, "{\"language\":\"python\",\"code\":\"pass\"}", &r);
                else if (!strcmp(w, "put"))
                        put_file(&b, "/tmp/act", "a", 1, &r);
                else if (!strcmp(w, "get"))
                        get_file(&b, "/tmp/act", &r);
                else if (!strcmp(w, "batch"))
                        http_req(&b.c, "POST", sb_path(&b, "/files/batch%s", ""), b.key,
                                 "{\"files\":[{\"path\":\"/tmp/act2\",\"content_base64\":\"eA==\"}]}", &r);
                else {
                        struct sse s = { 0 };
                        sse_run(&b, "exec", "{\"cmd\":\"true\",\"stream\":true}", &s);
                        ASSERT_EQ(s.status, 200);
                        sse_done(&s);
                        http_req(&b.c, "GET", "/healthz", NULL, NULL, &r);
                }
                if (r.status >= 300)
                        test_fail(__FILE__, __LINE__, "%s -> %ld %s", w, r.status, r.body);
                hres_done(&r);
                _cleanup_free_ char *after = last_activity(&b);
                /* RFC 3339 in UTC with the same format: later sorts greater. */
                if (strcmp(after, before) <= 0)
                        test_fail(__FILE__, __LINE__, "%s did not bump last_activity_at: %s -> %s", w, before, after);
        }
}

TEST_FULL(quiet_streams_get_keep_alive_comments, 120) {
        struct box b;
        struct sse s = { 0 };
        box_start(&b, "stream_keepalive = 1s", NULL, NULL);
        sse_run(&b, "exec", "{\"cmd\":\"sleep 4; echo after-quiet\",\"stream\":true}", &s);
        ASSERT_EQ(s.status, 200);
        /* ": open" plus at least two keep-alives while the command was silent for 4 s. */
        ASSERT_TRUE(strncmp(s.all, ": open\n\n", 8) == 0);
        ASSERT_GE(s.comments, 3);
        ASSERT_CONTAINS(s.all, ": keep-alive\n\n");
        ASSERT_STREQ(frames_joined(&s, "stdout"), "after-quiet\n");
        ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
        ASSERT_EQ(s.bad_json, 0);
        sse_done(&s);
}

TEST_FULL(files_refuse_devices_and_pipes, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);
        /* /dev/zero would stream forever and a FIFO would block forever: both are refused. */
        get_file(&b, "/dev/zero", &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_CONTAINS(hres_message(&r), "not a regular file");
        hres_done(&r);
        put_file(&b, "/dev/null", "x", 1, &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_CONTAINS(hres_message(&r), "not a regular file");
        hres_done(&r);
        exec_ok(&b, "mkfifo /tmp/pipe", NULL, &r);
        hres_done(&r);
        get_expect(&b, "/tmp/pipe", 400, NULL, 0);
        put_expect(&b, "/tmp/pipe", "x", 1, 400);
}

struct bg_stream { struct box *b; struct sse s; };
static void *bg_stream_run(void *p) {
        struct bg_stream *x = p;
        sse_run(x->b, "exec", "{\"cmd\":\"echo started; sleep 1000\",\"stream\":true,\"timeout_seconds\":300}", &x->s);
        return NULL;
}

TEST_FULL(shutdown_does_not_wait_for_long_commands, 120) {
        struct box b;
        struct bg_stream x = { .b = &b };
        pthread_t t;
        box_start(&b, NULL, NULL, NULL);
        ASSERT_EQ(pthread_create(&t, NULL, bg_stream_run, &x), 0);
        /* A non-streamed exec that would run for minutes, in the foreground of another thread. */
        static const char count_sleeps[] =
                "n=0; for f in /proc/[0-9]*/comm; do read c < $f 2>/dev/null && [ \"$c\" = sleep ] && n=$((n+1)); done; echo $n";
        for (int i = 0; i < 100; i++) {
                _cleanup_free_ char *ps = sh(&b, count_sleeps);
                if (ps && strcmp(ps, "0\n") != 0)
                        break;
                usleep(100000);
        }
        int64_t t0 = now_mono_ms();
        ctld_stop_daemon(&b.c);   /* SIGTERM; fails the test unless controld exits cleanly within 10 s */
        ASSERT_LE(now_mono_ms() - t0, 10000);
        pthread_join(t, NULL);
        /* The stream ended with an error frame that says why, not by a silent cut. */
        ASSERT_GE(x.s.n, 2);
        ASSERT_STREQ(frames_joined(&x.s, "stdout"), "started\n");
        ASSERT_STREQ(frame_type(&x.s, x.s.n - 1), "error");
        ASSERT_CONTAINS(x.s.all, "shutting down");
        sse_done(&x.s);
        /* The command did not outlive the stream. */
        ctld_start_daemon(&b.c);
        exec_prints(&b, count_sleeps, NULL, "0\n");
}

/* The user's env applies to the user's command only: a PATH that puts a fake cat and rm
 * first cannot replace the tools the platform's wrapper uses to write the code file and
 * drop its pid record (before: the code never reached python, exit 126 "HIJACKED"). */
TEST_FULL(user_env_does_not_reach_the_platform_wrapper, 120) {
        struct box b;
        struct hres r;
        box_start(&b, NULL, NULL, NULL);
        free(sh(&b, "mkdir -p /tmp/evil && printf '#!/bin/sh\\necho HIJACKED\\nexit 1\\n' > /tmp/evil/cat && "
                    "cp /tmp/evil/cat /tmp/evil/rm && chmod +x /tmp/evil/cat /tmp/evil/rm"));
        static const char evil_path[] = "\"env\":{\"PATH\":\"/tmp/evil:/usr/local/bin:/usr/bin:/bin\"}";
        char body[512];
        snprintf(body, sizeof(body), "{\"language\":\"python\",\"code\":\"import os; print(6*7, os.environ['PATH'])\",%s}", evil_path);
        post_run(&b, "code", NULL, NULL, body, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "42 /tmp/evil:/usr/local/bin:/usr/bin:/bin\n");
        ASSERT_EQ(data_int(&r, "exit_code"), 0);
        hres_done(&r);
        /* The user's own command does see its PATH (and its fake cat). */
        snprintf(body, sizeof(body), "{\"cmd\":\"cat /etc/hostname\",%s}", evil_path);
        post_run(&b, "exec", NULL, NULL, body, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "HIJACKED\n");
        hres_done(&r);
        /* The wrapper's real rm removed the code file and every pid record but this exec's own. */
        _cleanup_free_ char *left = sh(&b, "ls -a /tmp | grep -c '^.paddock-code-' || true");
        ASSERT_STREQ(left, "0\n");
        _cleanup_free_ char *pids = sh(&b, "ls -a /tmp | grep -c '^.paddock-exec-' || true");
        ASSERT_STREQ(pids, "1\n");
}

/* ================= limits on connections, slots and transfers ================= */

/* File transfers take the sandbox's exec slots, and every runtime operation counts
 * against the account (max_runtime_per_account), 429 with a clear message beyond. */
TEST_FULL(file_transfers_take_slots_and_accounts_are_limited, 150) {
        struct box b;
        struct hres r;
        box_start(&b, "max_exec_concurrent = 2\nmax_runtime_per_account = 3", NULL, NULL);
        char id2[25];
        ctld_create(&b.c, b.key, "{\"template\":\"python-3.11\"}", id2);
        struct par p[3];
        pthread_t t[3];
        for (int i = 0; i < 2; i++) {
                p[i] = (struct par) { .b = &b, .i = i, .cmd_fmt = "{\"cmd\":\"sleep 5; echo s%d\"}" };
                ASSERT_EQ(pthread_create(&t[i], NULL, par_exec, &p[i]), 0);
        }
        usleep(1500 * 1000);
        /* The sandbox's two slots are taken: files wait their turn too. */
        put_file(&b, "/tmp/f", "hello", 5, &r);
        ASSERT_EQ(r.status, 429);
        ASSERT_CONTAINS(hres_message(&r), "Too many commands running in this sandbox (limit 2)");
        hres_done(&r);
        get_expect(&b, "/etc/hostname", 429, NULL, 0);
        /* A third operation in the other sandbox fills the account... */
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id2);
        struct box b2 = b;
        snprintf(b2.id, sizeof(b2.id), "%s", id2);
        p[2] = (struct par) { .b = &b2, .i = 2, .cmd_fmt = "{\"cmd\":\"sleep 4; echo s%d\"}" };
        ASSERT_EQ(pthread_create(&t[2], NULL, par_exec, &p[2]), 0);
        usleep(1500 * 1000);
        /* ... so that sandbox, with a free slot, still says no, naming the account limit. */
        HTTP_EXPECT_MSG(&b.c, "POST", path, b.key, "{\"cmd\":\"echo no\"}", 429, "for this account (limit 3)");
        for (int i = 0; i < 3; i++) {
                pthread_join(t[i], NULL);
                ASSERT_EQ(p[i].status, 200);
        }
        /* Everything given back: files and execs work again. */
        put_expect(&b, "/tmp/f", "hello", 5, 204);
        http_req(&b.c, "POST", path, b.key, "{\"cmd\":\"echo yes\"}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "yes\n");
        hres_done(&r);
}

/* connection_timeout closes idle connections, but a long exec (answer or stream) is not
 * idle: both arrive whole well after the timeout. */
TEST_FULL(idle_timeout_spares_long_execs, 120) {
        struct box b;
        box_start(&b, "connection_timeout = 2s", NULL, NULL);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(b.c.port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        int64_t t0 = now_mono_ms();
        struct pollfd pf = { .fd = fd, .events = POLLIN };
        ASSERT_EQ(poll(&pf, 1, 10000), 1);
        char c1;
        ASSERT_EQ(read(fd, &c1, 1), 0);  /* closed by the server */
        ASSERT_TRUE(now_mono_ms() - t0 < 8000);
        close(fd);

        exec_prints(&b, "sleep 6; echo done", ",\"timeout_seconds\":60", "done\n");
        struct sse s = { 0 };
        sse_run(&b, "exec", "{\"cmd\":\"sleep 6; echo done\",\"stream\":true,\"timeout_seconds\":60}", &s);
        ASSERT_EQ(s.status, 200);
        ASSERT_EQ(s.rc, CURLE_OK);
        ASSERT_STREQ(frames_joined(&s, "stdout"), "done\n");
        ASSERT_TRUE(s.n >= 2);
        ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
        sse_done(&s);
}

/* The default per-address connection limit: beyond it, new connections are closed at
 * once instead of each holding a thread for the idle timeout. */
TEST_FULL(per_address_connection_limit_by_default, 120) {
        struct box b;
        box_start(&b, NULL, NULL, NULL);
        enum { N = 80 };
        int fds[N], closed = 0;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(b.c.port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        for (int i = 0; i < N; i++) {
                fds[i] = socket(AF_INET, SOCK_STREAM, 0);
                ASSERT_EQ(connect(fds[i], (struct sockaddr *) &a, sizeof(a)), 0);
        }
        usleep(1500 * 1000);
        for (int i = 0; i < N; i++) {
                struct pollfd pf = { .fd = fds[i], .events = POLLIN };
                char c1;
                if (poll(&pf, 1, 0) == 1 && read(fds[i], &c1, 1) <= 0)
                        closed++;
                close(fds[i]);
        }
        ASSERT_GE(closed, N - 64);
        ASSERT_LE(closed, N - 60);
        /* Once they are gone, the address is served again. */
        usleep(500 * 1000);
        _cleanup_free_ char *o = sh(&b, "echo served");
        ASSERT_STREQ(o, "served\n");
}

struct slow_dl { size_t got; };
static size_t slow_dl_write(char *p, size_t sz, size_t nm, void *ud) {
        (void) p;
        ((struct slow_dl *) ud)->got += sz * nm;
        return sz * nm;
}

/* transfer_timeout bounds a download however slowly the client reads. */
TEST_FULL(download_has_a_deadline, 120) {
        struct box b;
        box_start(&b, "transfer_timeout = 2s", NULL, NULL);
        free(sh(&b, "head -c 40000000 /dev/zero > /tmp/big"));
        struct curl_slist *hl;
        CURL *h = box_curl(&b, "/files/tmp/big", NULL, 45L, &hl);
        struct slow_dl d = { 0 };
        curl_easy_setopt(h, CURLOPT_MAX_RECV_SPEED_LARGE, (curl_off_t) 500000);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, slow_dl_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &d);
        int64_t t0 = now_mono_ms();
        CURLcode rc = curl_easy_perform(h);
        int64_t ms = now_mono_ms() - t0;
        curl_slist_free_all(hl);
        curl_easy_cleanup(h);
        if (rc == CURLE_OK || rc == CURLE_OPERATION_TIMEDOUT || ms > 30000 || d.got >= 40000000)
                test_fail(__FILE__, __LINE__, "download not cut: rc %d after %lld ms, %zu bytes", (int) rc, (long long) ms, d.got);
        /* The exec and its slot are gone: the sandbox answers at once. */
        _cleanup_free_ char *o = sh(&b, "echo after");
        ASSERT_STREQ(o, "after\n");
}
