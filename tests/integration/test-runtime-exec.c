/* Runtime operations as a user sees them, on real dockerd + gVisor runsc sandboxes:
 * exec (env, cwd, exit codes, timeout kill of the whole tree, output cap, UTF-8) and
 * code (python, node; no shell quoting of user code). */
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

#define NODE_TEMPLATE "[template \"node-18\"]\nimage = paddock/node-18:local\n"

static bool data_true(const struct hres *r, const char *field) { return cJSON_IsTrue(data_item(r, field)); }

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

        /* After a pause a command runs in the spare shell the agent started ahead (its argv
         * says so: AGENT-PROTOCOL.md), and it is what a cold /bin/sh -c would be: a fresh
         * shell (nothing of the last command's cd or export), stdin at its end, the default
         * directory, its own exit code and stderr. */
        exec_prints(&b, "cd /tmp; export SPARE_X=1; echo set", NULL, "set\n");
        usleep(500 * 1000);
        exec_ok(&b, "tr '\\0' ' ' </proc/$$/cmdline; echo; pwd; echo ${SPARE_X-unset}; cat; echo cat=$?\necho e >&2; exit 5",
                NULL, &r);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "/bin/sh -s \n/\nunset\ncat=0\n");
        ASSERT_STREQ(hres_data_str(&r, "stderr"), "e\n");
        ASSERT_EQ(data_int(&r, "exit_code"), 5);
        hres_done(&r);
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
