/* runtimetest.h — what the test-runtime-* programs share: a box (one controld, one account,
 * one sandbox), the runtime requests they make of it (exec, code, files) with the answers they
 * must have, and an SSE client for the streamed calls. Any failed check fails the test
 * (test_fail); nothing here returns an error. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <cjson/cJSON.h>

#include "ctltest.h"

/* CLOCK_MONOTONIC in milliseconds. */
int64_t now_mono_ms(void);

/* One controld, one account, one sandbox. */
struct box {
        struct ctld c;
        char *key;
        char id[25];
};

/* Starts b's controld (with the extra [server] and other config text), makes account alice and
 * creates b's sandbox from create_body (default: the python-3.11 template). */
void box_start(struct box *b, const char *server_extra, const char *extra, const char *create_body);

/* data.<field> of the answer; data_int fails the test when it is not a number. */
const cJSON *data_item(const struct hres *r, const char *field);
long long data_int(const struct hres *r, const char *field);

/* POST /sandboxes/{id}/<what> with a raw JSON body. */
void post_run(struct box *b, const char *what, const char *key, const char *id, const char *body, struct hres *r);

/* post_run, and the answer must have this status (the response is dropped). */
void post_expect(struct box *b, const char *what, const char *key, const char *id, const char *body, long status);

/* POST /code with a raw JSON body: asserts 200, then stdout (unless NULL) and exit_code
 * (unless -1). The response is the caller's, for more checks (hres_done). */
void code_ok(struct box *b, const char *body, const char *want_stdout, int want_exit, struct hres *r);

/* code_ok with the body {"language": language, "code": code}. */
void code_json_ok(struct box *b, const char *language, const char *code, const char *want_stdout, int want_exit,
                  struct hres *r);

/* Exec cmd with optional extra JSON members (",\"cwd\":\"/tmp\""). Asserts 200. */
void exec_ok(struct box *b, const char *cmd, const char *extra_members, struct hres *r);

/* exec_ok; the command must exit 0 having printed exactly want on stdout. */
void exec_prints(struct box *b, const char *cmd, const char *extra_members, const char *want);

/* A command that prints "alive PID: CMDLINE" for each live (not zombie) process whose command
 * line matches the shell case pattern pat, then "end". It reads /proc/PID/stat whole: a
 * program's name (comm) may hold spaces and ')'. Static buffer. */
const char *alive_probe(const char *pat);

/* Runs cmd and returns its stdout (caller frees); asserts exit 0. */
char *sh(struct box *b, const char *cmd);
/* Whether b's commands go through the in-sandbox agent (paddock-init as PID 1, its socket
 * there) rather than the driver's exec path, whose wrapper leaves a pid record per exec. */
bool box_agent(struct box *b);

/* sh(cmd) every 0.5 s until it prints want or timeout_ms pass; returns the last output. */
char *sh_until(struct box *b, const char *cmd, const char *want, int64_t timeout_ms);

/* "/sandboxes/<id>" followed by fmt with arg (static buffer). */
char *sb_path(struct box *b, const char *fmt, const char *arg);

/* PUT and GET /files<path> of the box; r is the caller's (hres_done). */
void put_file(struct box *b, const char *path, const void *data, size_t len, struct hres *r);
void get_file(struct box *b, const char *path, struct hres *r);

/* A curl handle for /sandboxes/{id}<rest> of the box, with its key and the extra headers
 * (NULL-terminated, or NULL) in *ret_hl, timeout_s and no signals. The caller sets the rest,
 * performs, and frees both (curl_slist_free_all, curl_easy_cleanup). */
CURL *box_curl(struct box *b, const char *rest, const char *const *headers, long timeout_s, struct curl_slist **ret_hl);

/* PUT /files<path> of len bytes at data answers status (the response is dropped). */
void put_expect(struct box *b, const char *path, const void *data, size_t len, long status);

/* GET /files<path> answers status; with want non-NULL, 200 and exactly the len bytes at want. */
void get_expect(struct box *b, const char *path, long status, const void *want, size_t len);

/* ---- SSE client: a streamed call (exec or code with stream), its frames parsed as they come */

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
        const char *stop_when;   /* disconnect once the stdout frames hold this text */
        long status;
        char content_type[128];
        CURLcode rc;
};

/* POST /<what> of the box with body, reading the answer into s (which the caller zeroes and
 * frees with sse_done); with s->abort_after_first_data the client disconnects after the
 * first data frame. */
void sse_run(struct box *b, const char *what, const char *body, struct sse *s);

/* GET /sandboxes/{id}<rest> of the box as a stream into s (as sse_run), for at most timeout_s. */
void sse_get(struct box *b, const char *rest, long timeout_s, struct sse *s);

void sse_done(struct sse *s);

/* Frame i's type ("?" when none) and data (NULL when none). */
const char *frame_type(const struct sse *s, int i);
const char *frame_data(const struct sse *s, int i);

/* Concatenated data of every frame of a type. Static buffer. */
const char *frames_joined(const struct sse *s, const char *type);
