/* test-processes.c — the in-sandbox agent as a user meets it on the local driver: PID 1 that
 * reaps, exec with stdin, processes that outlive their request (stdin, signals, reattach,
 * terminals), and sandboxes whose code replaces, stalls or floods the agent: they break only
 * themselves, never controld or another sandbox. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "runtimetest.h"
#include "testlib.h"

static char *proc_path(struct box *b, const char *fmt, ...) _printf_(2, 3);
static char *proc_path(struct box *b, const char *fmt, ...) {
        static char buf[256];
        char rest[160];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rest, sizeof(rest), fmt, ap);
        va_end(ap);
        snprintf(buf, sizeof(buf), "/sandboxes/%s%s", b->id, rest);
        return buf;
}

/* POST /processes with body: 201 and its pid. */
static long start_proc(struct box *b, const char *body) {
        struct hres r;
        http_req(&b->c, "POST", proc_path(b, "/processes"), b->key, body, &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "POST /processes %s -> %ld %s", body, r.status, r.body);
        long pid = (long) data_int(&r, "pid");
        ASSERT_GE(pid, 2);
        hres_done(&r);
        return pid;
}

static void post_proc(struct box *b, long pid, const char *what, const char *body, long want) {
        struct hres r;
        http_req(&b->c, "POST", proc_path(b, "/processes/%ld/%s", pid, what), b->key, body, &r);
        if (r.status != want)
                test_fail(__FILE__, __LINE__, "POST /processes/%ld/%s %s -> %ld %s (want %ld)", pid, what, body, r.status,
                          r.body, want);
        hres_done(&r);
}

/* The process's entry in GET /processes (a copy; NULL when not listed). */
static cJSON *listed(struct box *b, long pid) {
        struct hres r;
        http_req(&b->c, "GET", proc_path(b, "/processes"), b->key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        cJSON *found = NULL, *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "processes"))
                if ((long) cJSON_GetNumberValue(cJSON_GetObjectItem(e, "pid")) == pid)
                        found = cJSON_Duplicate(e, true);
        hres_done(&r);
        return found;
}

/* Waits (up to 10 s) until pid is listed as finished; returns its entry. */
static cJSON *finished(struct box *b, long pid) {
        for (int i = 0; i < 100; i++) {
                cJSON *e = listed(b, pid);
                if (e && cJSON_IsFalse(cJSON_GetObjectItem(e, "running")))
                        return e;
                cJSON_Delete(e);
                usleep(100000);
        }
        test_fail(__FILE__, __LINE__, "process %ld did not finish within 10 s", pid);
}

/* The stream of pid until its stdout holds until (NULL: to the end). */
static void stream(struct box *b, long pid, const char *until, struct sse *s) {
        memset(s, 0, sizeof(*s));
        s->stop_when = until;
        char rest[64];
        snprintf(rest, sizeof(rest), "/processes/%ld/stream", pid);
        sse_get(b, rest, 60, s);
        if (s->status != 200)
                test_fail(__FILE__, __LINE__, "GET %s -> %ld: %s", rest, s->status, s->all ? s->all : "");
        if (until && !strstr(frames_joined(s, "stdout"), until))
                test_fail(__FILE__, __LINE__, "stream of %ld ended without \"%s\": %.600s", pid, until, s->all ? s->all : "");
}

static void box_with_agent(struct box *b, const char *create_body) {
        box_start(b, NULL, NULL, create_body);
        if (!box_agent(b))
                test_fail(__FILE__, __LINE__, "the sandbox's PID 1 is not paddock-init serving its socket");
}

static void delete_sandbox(struct box *b) {
        char path[96];
        snprintf(path, sizeof(path), "/sandboxes/%s", b->id);
        HTTP_EXPECT(&b->c, "DELETE", path, b->key, NULL, 204);
}

static long controld_rss_kb(struct box *b) {
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int) b->c.pid);
        FILE *f = fopen(path, "r");
        ASSERT_NOT_NULL(f);
        long kb = -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
                        break;
        fclose(f);
        return kb;
}

TEST_FULL(pid1_reaps_and_exec_takes_stdin, 120) {
        struct box b;
        box_with_agent(&b, NULL);
        /* 100 orphans: their parents exit at once, PID 1 inherits and reaps them. */
        exec_prints(&b, "for i in $(seq 100); do (sleep 0.3 &); done; echo spawned", NULL, "spawned\n");
        usleep(1500000);
        exec_prints(&b,
                    "n=0; for f in /proc/[0-9]*/stat; do read -r l < $f 2>/dev/null || continue; s=${l##*) }; "
                    "[ \"${s%% *}\" = Z ] && n=$((n+1)); done; echo zombies=$n",
                    NULL, "zombies=0\n");
        /* exec with stdin in the body; the command sees EOF after it. */
        exec_prints(&b, "wc -c", ",\"stdin\":\"hello\"", "5\n");
        exec_prints(&b, "cat", ",\"stdin\":\"line one\\nline two\\n\"", "line one\nline two\n");
        struct hres r;
        post_run(&b, "exec", NULL, NULL, "{\"cmd\":\"true\",\"stdin\":5}", &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_CONTAINS(hres_message(&r), "stdin");
        hres_done(&r);
        /* A missing working directory and an unknown program say so, as the shell would. */
        exec_ok(&b, "pwd", ",\"cwd\":\"/no/such/dir\"", &r);
        ASSERT_EQ(data_int(&r, "exit_code"), 126);
        ASSERT_CONTAINS(hres_data_str(&r, "stderr"), "/no/such/dir");
        hres_done(&r);
}

TEST_FULL(processes_stdin_signals_reattach, 180) {
        struct box b;
        struct sse s;
        box_with_agent(&b, NULL);

        /* A Python REPL driven line by line. */
        long repl = start_proc(&b, "{\"cmd\":\"python3 -u -i -q\",\"stdin\":true,\"tag\":\"repl\"}");
        post_proc(&b, repl, "stdin", "{\"data\":\"6*7\\n\"}", 200);
        post_proc(&b, repl, "stdin", "{\"data\":\"print('x'*3)\\n\"}", 200);
        stream(&b, repl, "xxx", &s);
        ASSERT_CONTAINS(frames_joined(&s, "stdout"), "42\n");
        sse_done(&s);
        cJSON *e = listed(&b, repl);
        ASSERT_NOT_NULL(e);
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(e, "running")));
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(e, "tag")), "repl");
        cJSON_Delete(e);
        /* EOF on stdin ends it; the stream then replays and ends with the exit. */
        post_proc(&b, repl, "stdin", "{\"close\":true}", 200);
        stream(&b, repl, NULL, &s);
        ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
        ASSERT_EQ((int) cJSON_GetNumberValue(cJSON_GetObjectItem(s.f[s.n - 1].j, "exit_code")), 0);
        ASSERT_CONTAINS(frames_joined(&s, "stdout"), "42\n");
        sse_done(&s);
        post_proc(&b, repl, "stdin", "{\"data\":\"1\\n\"}", 400);   /* stdin is closed now */

        /* SIGINT ends sleep: exit 130, signal 2. */
        long sl = start_proc(&b, "{\"cmd\":\"exec sleep 100\"}");
        post_proc(&b, sl, "signal", "{\"signal\":\"SIGINT\"}", 200);
        e = finished(&b, sl);
        ASSERT_EQ((int) cJSON_GetNumberValue(cJSON_GetObjectItem(e, "exit_code")), 130);
        ASSERT_EQ((int) cJSON_GetNumberValue(cJSON_GetObjectItem(e, "signal")), 2);
        cJSON_Delete(e);
        post_proc(&b, sl, "signal", "{\"signal\":\"TERM\"}", 404);   /* it is gone */

        /* Reattach after the client went away: what was printed meanwhile is replayed. */
        long chatty = start_proc(&b, "{\"cmd\":\"i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); sleep 0.01; done\"}");
        stream(&b, chatty, "line5\n", &s);   /* then the client disconnects */
        sse_done(&s);
        stream(&b, chatty, NULL, &s);
        ASSERT_CONTAINS(frames_joined(&s, "stdout"), "line0\nline1\n");
        ASSERT_CONTAINS(frames_joined(&s, "stdout"), "line299\n");
        ASSERT_STREQ(frame_type(&s, s.n - 1), "done");
        sse_done(&s);

        /* A detached process outlives its request and goes with the sandbox. */
        long longp = start_proc(&b, "{\"cmd\":\"sleep 1000\",\"tag\":\"long\"}");
        usleep(300000);
        e = listed(&b, longp);
        ASSERT_NOT_NULL(e);
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(e, "running")));
        cJSON_Delete(e);
        exec_prints(&b, "pgrep -f 'sleep 1000' >/dev/null && echo alive", NULL, "alive\n");

        /* Bad requests name the field at fault; unknown processes are 404. */
        struct hres r;
        static const struct { const char *what, *body, *field; } bad[] = {
                { "processes", "{}", "cmd" },
                { "processes", "{\"cmd\":\"true\",\"pty\":{\"rows\":0}}", "pty.rows" },
                { "processes", "{\"cmd\":\"true\",\"tag\":\"\"}", "tag" },
                { "processes", "{\"cmd\":\"true\",\"nope\":1}", "nope" },
                { "processes", "{\"cmd\":\"true\",\"cwd\":\"relative\"}", "cwd" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                http_req(&b.c, "POST", proc_path(&b, "/%s", bad[i].what), b.key, bad[i].body, &r);
                if (r.status != 400 || !strstr(hres_message(&r), bad[i].field))
                        test_fail(__FILE__, __LINE__, "%s -> %ld %s (want 400 naming %s)", bad[i].body, r.status, r.body,
                                  bad[i].field);
                hres_done(&r);
        }
        post_proc(&b, longp, "signal", "{\"signal\":\"SIGNOPE\"}", 400);
        post_proc(&b, longp, "signal", "{\"signal\":65}", 400);
        post_proc(&b, longp, "stdin", "{\"data\":\"x\"}", 400);        /* started without stdin */
        post_proc(&b, longp, "resize", "{\"rows\":10,\"cols\":10}", 400); /* no terminal */
        post_proc(&b, longp, "resize", "{\"rows\":10}", 400);
        post_proc(&b, 99999, "signal", "{\"signal\":\"TERM\"}", 404);
        HTTP_EXPECT(&b.c, "GET", proc_path(&b, "/processes/0/stream"), b.key, NULL, 404);
        HTTP_EXPECT(&b.c, "GET", proc_path(&b, "/processes/99999/stream"), b.key, NULL, 404);
        /* Another account sees nothing of it. */
        _cleanup_free_ char *other = ctld_account_key(&b.c, "mallory", NULL, NULL);
        HTTP_EXPECT(&b.c, "GET", proc_path(&b, "/processes"), other, NULL, 404);
        post_proc(&b, longp, "signal", "{\"signal\":\"KILL\"}", 200);
        delete_sandbox(&b);
}

TEST_FULL(terminals, 120) {
        struct box b;
        struct sse s;
        box_with_agent(&b, "{\"template\":\"busybox\"}");
        long t = start_proc(&b, "{\"cmd\":\"tty; stty size; read x; stty size; echo done\",\"stdin\":true,"
                                "\"pty\":{\"rows\":24,\"cols\":80}}");
        stream(&b, t, "24 80", &s);
        ASSERT_CONTAINS(frames_joined(&s, "stdout"), "/dev/pts/");
        sse_done(&s);
        post_proc(&b, t, "resize", "{\"rows\":30,\"cols\":100}", 200);
        post_proc(&b, t, "stdin", "{\"data\":\"\\n\"}", 200);
        stream(&b, t, "done", &s);
        ASSERT_CONTAINS(frames_joined(&s, "stdout"), "30 100");
        sse_done(&s);
        /* Full-screen programs start: top draws a screen, vi edits and saves a file. */
        long top = start_proc(&b, "{\"cmd\":\"top -n 1\",\"pty\":{\"rows\":24,\"cols\":80}}");
        cJSON *e = finished(&b, top);
        ASSERT_EQ((int) cJSON_GetNumberValue(cJSON_GetObjectItem(e, "exit_code")), 0);
        cJSON_Delete(e);
        stream(&b, top, NULL, &s);
        ASSERT_CONTAINS(frames_joined(&s, "stdout"), "PID");
        sse_done(&s);
        long vi = start_proc(&b, "{\"cmd\":\"vi /tmp/vi.txt\",\"stdin\":true,\"pty\":{\"rows\":24,\"cols\":80}}");
        usleep(500000);
        /* Keys as a person types them: ESC alone, else vi takes ESC + ':' for one key. */
        post_proc(&b, vi, "stdin", "{\"data\":\"ihello from vi\"}", 200);
        usleep(300000);
        post_proc(&b, vi, "stdin", "{\"data\":\"\\u001b\"}", 200);
        usleep(300000);
        post_proc(&b, vi, "stdin", "{\"data\":\":wq\\r\"}", 200);
        e = finished(&b, vi);
        ASSERT_EQ((int) cJSON_GetNumberValue(cJSON_GetObjectItem(e, "exit_code")), 0);
        cJSON_Delete(e);
        exec_prints(&b, "cat /tmp/vi.txt", NULL, "hello from vi\n");
}

/* A fake agent, run by the real one, that takes its socket over. */
static const char fake_agent[] =
        "import os, socket, struct, sys, time\n"
        "mode = sys.argv[1]\n"
        "p = '/.paddock/run/agent.sock'\n"
        "os.unlink(p)\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.bind(p)\n"
        "s.listen(64)\n"
        "print('listening', flush=True)\n"
        "held = []\n"
        "while True:\n"
        "    c, _ = s.accept()\n"
        "    if mode == 'huge':\n"
        "        c.recv(4096)\n"
        "        c.sendall(struct.pack('>IBBHI', 0xFFFFFFFF, 2, 0, 0, 0))\n"
        "    elif mode == 'hello-then-flood':\n"
        "        c.recv(4096)\n"
        "        c.sendall(struct.pack('>IBBHIBII', 9, 2, 0, 0, 0, 2, 4, 1))\n"
        "        c.setblocking(False)\n"
        "        try:\n"
        "            for i in range(100000):\n"
        "                c.send(struct.pack('>IBBHI', 65536, 16, 0, 0, 1) + b'x' * 65536)\n"
        "        except Exception:\n"
        "            pass\n"
        "    held.append(c)\n";

/* Replaces the box's agent socket with the fake in mode; returns when it listens. */
static void take_over(struct box *b, const char *mode) {
        struct hres r;
        put_file(b, "/tmp/fake_agent.py", fake_agent, sizeof(fake_agent) - 1, &r);
        ASSERT_EQ(r.status, 204);
        hres_done(&r);
        char body[128];
        snprintf(body, sizeof(body), "{\"cmd\":\"python3 -u /tmp/fake_agent.py %s\"}", mode);
        long pid = start_proc(b, body);
        struct sse s;
        stream(b, pid, "listening", &s);
        sse_done(&s);
}

/* GET /watch: what a process in the sandbox does to a directory arrives as events (gVisor's
 * inotify), a directory made later included, and the stream ends when the directory goes. */
static bool has_event(const struct sse *s, const char *event, const char *path, bool dir) {
        for (int i = 0; i < s->n; i++) {
                const cJSON *j = s->f[i].j;
                if (!strcmp(frame_type(s, i), "event") && !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "event")), event) &&
                    !strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(j, "path")), path) &&
                    cJSON_IsTrue(cJSON_GetObjectItem(j, "dir")) == dir)
                        return true;
        }
        return false;
}

TEST_FULL(watch_follows_a_directory, 180) {
        struct box b;
        box_with_agent(&b, NULL);
        exec_prints(&b, "mkdir -p /tmp/w/old && echo ready", NULL, "ready\n");
        /* the changes start once the watch is surely open, and end by removing the directory */
        start_proc(&b, "{\"cmd\":\"sleep 3; touch /tmp/w/a; mkdir /tmp/w/s; echo x > /tmp/w/s/b; mv /tmp/w/a /tmp/w/c; "
                       "chmod 600 /tmp/w/c; echo y >> /tmp/w/old/f; rm -rf /tmp/w\"}");
        struct sse s = { 0 };
        sse_get(&b, "/watch?path=/tmp/w&recursive=true", 60, &s);
        if (s.status != 200)
                test_fail(__FILE__, __LINE__, "GET /watch -> %ld: %s", s.status, s.all ? s.all : "");
        ASSERT_STREQ(s.content_type, "text/event-stream");
        static const struct {
                const char *type, *name;
                bool dir;
        } events[] = {
                { "create", "a", false },  { "create", "s", true },  { "create", "s/b", false },
                { "write", "s/b", false }, { "rename", "a", false }, { "create", "c", false },
                { "chmod", "c", false },
                { "create", "old/f", false },   /* a directory that was there before */
                { "remove", "c", false },
        };
        for (size_t i = 0; i < ELEMENTSOF(events); i++)
                if (!has_event(&s, events[i].type, events[i].name, events[i].dir))
                        test_fail(__FILE__, __LINE__, "no %s event of %s%s", events[i].type, events[i].name,
                                  events[i].dir ? " (a directory)" : "");
        /* last: the end, not truncated (the directory went) */
        ASSERT_GE(s.n, 2);
        ASSERT_STREQ(frame_type(&s, s.n - 1), "end");
        ASSERT_TRUE(cJSON_IsFalse(cJSON_GetObjectItem(s.f[s.n - 1].j, "truncated")));
        sse_done(&s);

        /* bad input names the field; a missing directory is 404 */
        static const struct {
                const char *query;
                long status;
                const char *says;
        } bad[] = {
                { "/watch", 400, "path is required" },
                { "/watch?path=tmp", 400, "path" },
                { "/watch?path=/tmp&recursive=yes", 400, "recursive must be true or false" },
                { "/watch?path=/no/such/dir", 404, "Directory not found" },
                { "/watch?path=/etc/hostname", 400, "not a directory" },
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                struct hres r;
                http_req(&b.c, "GET", proc_path(&b, "%s", bad[i].query), b.key, NULL, &r);
                if (r.status != bad[i].status || !strstr(r.body ? r.body : "", bad[i].says))
                        test_fail(__FILE__, __LINE__, "GET %s -> %ld %s (want %ld with \"%s\")", bad[i].query, r.status,
                                  r.body ? r.body : "", bad[i].status, bad[i].says);
                hres_done(&r);
        }
}

TEST_FULL(hostile_agents_break_only_their_sandbox, 300) {
        struct box b;
        box_with_agent(&b, NULL);
        char bystander[25];
        ctld_create(&b.c, b.key, "{\"template\":\"busybox\"}", bystander);
        long rss0 = controld_rss_kb(&b);

        /* Kill of the agent's children from inside: the agent (PID 1) stays and serves. */
        long victim = start_proc(&b, "{\"cmd\":\"sleep 1000\"}");
        struct hres r;
        post_run(&b, "exec", NULL, NULL, "{\"cmd\":\"kill -9 -1; sleep 1\"}", &r);
        hres_done(&r);
        cJSON *e = finished(&b, victim);
        cJSON_Delete(e);
        exec_prints(&b, "echo after-kill", NULL, "after-kill\n");

        /* The socket swapped for a symlink to a host path: never followed; exec falls back to
         * the driver's path, processes say the agent is not answering. */
        exec_prints(&b, "rm -f /.paddock/run/agent.sock && ln -s /run/docker.sock /.paddock/run/agent.sock && echo swapped",
                    NULL, "swapped\n");
        exec_prints(&b, "echo via-fallback", NULL, "via-fallback\n");
        http_req(&b.c, "GET", proc_path(&b, "/processes"), b.key, NULL, &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_CONTAINS(hres_message(&r), "not answering");
        hres_done(&r);
        delete_sandbox(&b);

        /* A frame claiming 4 GiB; an agent that answers HELLO and then floods; one that never
         * answers. Each time the user's exec still works (the driver's path) and the
         * bystander sandbox is served at once. */
        static const char *const modes[] = { "huge", "hello-then-flood", "silent" };
        for (size_t i = 0; i < ELEMENTSOF(modes); i++) {
                ctld_create(&b.c, b.key, "{\"template\":\"python-3.11\"}", b.id);
                take_over(&b, modes[i]);
                int64_t t0 = now_mono_ms();
                post_run(&b, "exec", NULL, NULL, "{\"cmd\":\"echo survived\"}", &r);
                if (r.status != 200)
                        test_fail(__FILE__, __LINE__, "%s: exec -> %ld %s", modes[i], r.status, r.body);
                ASSERT_STREQ(hres_data_str(&r, "stdout"), "survived\n");
                hres_done(&r);
                ASSERT_LE(now_mono_ms() - t0, 20000);
                http_req(&b.c, "GET", proc_path(&b, "/processes"), b.key, NULL, &r);
                ASSERT_TRUE(r.status == 503);
                hres_done(&r);
                char path[96];
                snprintf(path, sizeof(path), "/sandboxes/%s/exec", bystander);
                http_req(&b.c, "POST", path, b.key, "{\"cmd\":\"echo fine\"}", &r);
                ASSERT_EQ(r.status, 200);
                ASSERT_STREQ(hres_data_str(&r, "stdout"), "fine\n");
                hres_done(&r);
                delete_sandbox(&b);
        }

        /* A real flood: a process printing as fast as it can, streamed; controld's memory stays
         * bounded (the stream reads as the client does; the agent keeps the last 1 MiB). */
        ctld_create(&b.c, b.key, "{\"template\":\"python-3.11\"}", b.id);
        long yes = start_proc(&b, "{\"cmd\":\"yes flood\"}");
        struct sse s;
        stream(&b, yes, "flood\nflood\nflood\n", &s);
        sse_done(&s);
        usleep(2000000);
        long rss1 = controld_rss_kb(&b);
        if (rss1 - rss0 > 64 * 1024)
                test_fail(__FILE__, __LINE__, "controld grew from %ld kB to %ld kB", rss0, rss1);
        post_proc(&b, yes, "signal", "{\"signal\":\"KILL\"}", 200);
        HTTP_EXPECT(&b.c, "GET", "/healthz", NULL, NULL, 200);
}
