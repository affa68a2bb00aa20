/* Runtime operations as a user sees them, on real dockerd + gVisor runsc sandboxes:
 * per-sandbox concurrency, last_activity_at bumps and what else runs alongside long calls
 * (keep-alives, shutdown, devices and pipes, the platform wrapper's env), and the limits on
 * connections, slots and transfers. */
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

/* A box whose controld has server_extra (its exec limits), and run_parallel in it. */
static void box_parallel(struct box *b, const char *server_extra, struct par *p, int n, const char *cmd_fmt) {
        box_start(b, server_extra, NULL, NULL);
        run_parallel(b, p, n, cmd_fmt);
}

TEST_FULL(concurrency_50_execs_one_sandbox, 150) {
        struct box b;
        struct par p[50];
        box_parallel(&b, "max_exec_concurrent = 64", p, 50, "{\"cmd\":\"sleep 0.5; echo job-%d\",\"timeout_seconds\":120}");
        for (int i = 0; i < (int) ELEMENTSOF(p); i++) {
                char want[32];
                snprintf(want, sizeof(want), "job-%d\n", i);
                if (p[i].status != 200 || strcmp(p[i].out, want) != 0 || p[i].exit_code != 0)
                        test_fail(__FILE__, __LINE__, "exec %d -> %ld exit %d out \"%s\" msg \"%s\"", i, p[i].status, p[i].exit_code,
                                  p[i].out, p[i].msg);
        }
        /* Nothing left over from the wrappers: only this probe's own pid record is there (on
         * the exec path; the agent keeps none). */
        _cleanup_free_ char *o = sh(&b, "n=0; for f in /tmp/.paddock-exec-*; do [ -e \"$f\" ] && n=$((n+1)); done; echo $n");
        ASSERT_STREQ(o, box_agent(&b) ? "0\n" : "1\n");
}

TEST_FULL(concurrency_limit_answers_429, 120) {
        struct box b;
        enum { N = 10 };
        struct par p[N];
        box_parallel(&b, "max_exec_concurrent = 2", p, N, "{\"cmd\":\"sleep 2; echo s%d\"}");
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
        ASSERT_STREQ(pids, box_agent(&b) ? "0\n" : "1\n");
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
