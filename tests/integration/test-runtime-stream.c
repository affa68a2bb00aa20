/* Runtime operations as a user sees them, on real dockerd + gVisor runsc sandboxes:
 * streamed exec over SSE (ordering, no buffering until exit, timeout, client disconnect kills
 * the process, the 4 MiB cap on output produced before /code's stdin is written). */
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
#include "runtimetest.h"
#include "strutil.h"
#include "testlib.h"

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
        bool agent = box_agent(&b);
        sse_run(&b, "code", body, &s);
        ASSERT_EQ(s.status, 200);
        ASSERT_EQ(s.rc, CURLE_OK);
        ASSERT_TRUE(!strncmp(s.content_type, "text/event-stream", 17));
        if (agent) {
                /* The agent writes the code file itself: the user's cat never runs, the code does. */
                ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
                ASSERT_LE(s.all_len, 64 * 1024);
                sse_done(&s);
                _cleanup_free_ char *flood = sh(&b, "[ -e /tmp/flood ] && echo untouched");
                ASSERT_STREQ(flood, "untouched\n");
                _cleanup_free_ char *codes = sh_until(&b, "ls -a /tmp | grep -c '^.paddock-code-' || true", "0\n", 10000);
                ASSERT_STREQ(codes, "0\n");
                return;
        }
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
