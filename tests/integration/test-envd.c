/* test-envd.c — envd's surface (controld/envd.c) against what a sandbox says and what other
 * tenants do (issue 34), and as the current E2B SDK expects it (issue 38), through raw
 * Connect/HTTP calls on the E2B listener:
 *  - ListDir of a directory with many long names under a long path: a bounded answer (an
 *    error naming the limit), and controld's memory stays bounded;
 *  - one sandbox filling its table of deadlines leaves another's timed, disconnected command
 *    running to its own deadline, and that other's process listing intact;
 *  - files.remove of a missing path succeeds; Stat describes a symlink as itself (Lrwx...,
 *    symlinkTarget); ListDir is sorted by name; mode is permission bits only; a dead or unknown
 *    sandbox answers 502 with E2B's body on every path before any token is read; gzip uploads
 *    (and a gzip bomb refused);
 *  - sandboxes that look like E2B's base (issue 38): user `user` in /home/user by default for
 *    commands, terminals and files (what is written is theirs), passwordless sudo, `root` when
 *    named, other names refused, pip and venv and node work as user; the Brimble API's
 *    sandboxes of the same template still run as root. Raw calls and the current SDK;
 *  - a command whose sandbox is killed under it ends with the SDK's "sandbox was killed" error. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <zlib.h>

#include "cleanup.h"
#include "ctltest.h"
#include "e2btest.h"
#include "strutil.h"
#include "testlib.h"

/* controld with the E2B listener; "base" is base_template. The e2b-base template (E2B's base:
 * tests/env/images.sh) is configured as controld's example configuration has it. */
static void e2b_start_base(struct e2b *e, const char *server_extra, const char *base) {
        need_docker();
        e->port = test_free_port();
        char extra[1024];
        const char *img = getenv("PADDOCK_E2B_IMAGE") ? getenv("PADDOCK_E2B_IMAGE") : "paddock/e2b-base:local";
        snprintf(extra, sizeof(extra),
                 "[e2b]\nlisten = 127.0.0.1:%d\nbase_template = %s\n"
                 "[template \"e2b-base\"]\nimage = %s\nstart = /usr/local/lib/paddock/start-e2b\n", e->port, base, img);
        ctld_start(&e->c, server_extra, extra);
        e2btest_keys(e);
}

/* The envd tests of mechanics run as root, in python-3.11 (no E2B user there). */
static void e2b_start(struct e2b *e, const char *server_extra) {
        e2b_start_base(e, server_extra, "python-3.11");
}

static void create(struct e2b *e, const char *key, char id[25], char token[65]) {
        e2btest_create(e, key, "{\"templateID\":\"base\",\"timeout\":600}", id, token);
}

/* controld as e2b_start has it, and one sandbox of alice's in it. */
static void e2b_start_one(struct e2b *e, const char *server_extra, char id[25], char token[65]) {
        e2b_start(e, server_extra);
        create(e, e->key, id, token);
}

static char *envd(struct e2b *e, const char *id, const char *token, const char *method, bool stream, const char *msg) {
        return e2btest_envd(e, id, token, method, stream, msg, strlen(msg), NULL);
}

/* envd's Start message of `/bin/sh -c script` (the caller frees it). */
static char *sh_start_msg(const char *script) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        cJSON *p = cJSON_AddObjectToObject(o, "process");
        cJSON_AddStringToObject(p, "cmd", "/bin/sh");
        cJSON *a = cJSON_AddArrayToObject(p, "args");
        cJSON_AddItemToArray(a, cJSON_CreateString("-c"));
        cJSON_AddItemToArray(a, cJSON_CreateString(script));
        return cJSON_PrintUnformatted(o);
}

/* A command run to its end through envd's Start (the stream's whole answer). */
static char *run(struct e2b *e, const char *id, const char *token, const char *script) {
        _cleanup_free_ char *m = sh_start_msg(script);
        char *r = envd(e, id, token, "process.Process/Start", true, m);
        ASSERT_EQ(test_raw_status(r), 200);
        return r;
}

/* A connected socket to the listener with head+body sent. */
static int open_req(struct e2b *e, const char *head, const void *body, size_t len) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) e->port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        ASSERT_TRUE(send(fd, head, strlen(head), MSG_NOSIGNAL) == (ssize_t) strlen(head));
        if (len)
                ASSERT_TRUE(send(fd, body, len, MSG_NOSIGNAL) == (ssize_t) len);
        return fd;
}

/* Starts cmd (argv JSON of process) with Connect-Timeout-Ms, reads until the start event names
 * the pid, then hangs up: the client is gone, the deadline stays the process's. The pid. */
static unsigned start_detached(struct e2b *e, const char *id, const char *token, const char *process_json, long long timeout_ms) {
        _cleanup_free_ char *msg = xasprintf("{\"process\":%s}", process_json);
        size_t len = strlen(msg);
        uint8_t *b = e2btest_envelope(msg, len);
        _cleanup_free_ char *head = xasprintf("POST /process.Process/Start HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nE2b-Sandbox-Id: %s\r\n"
                                              "X-Access-Token: %s\r\nConnect-Protocol-Version: 1\r\nConnect-Timeout-Ms: %lld\r\n"
                                              "Content-Type: application/connect+json\r\nContent-Length: %zu\r\n\r\n",
                                              e->port, id, token, timeout_ms, len + 5);
        int fd = open_req(e, head, b, len + 5);
        free(b);
        char buf[8192];
        size_t n = 0;
        unsigned pid = 0;
        int64_t deadline = mono_ms() + 30000;
        while (!pid && mono_ms() < deadline && n < sizeof(buf) - 1) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, 1000) <= 0)
                        continue;
                ssize_t k = recv(fd, buf + n, sizeof(buf) - 1 - n, 0);
                if (k <= 0)
                        break;
                for (size_t i = n; i < n + (size_t) k; i++)
                        if (!buf[i])
                                buf[i] = '.';   /* the envelopes' length bytes */
                n += (size_t) k;
                buf[n] = 0;
                const char *s = strstr(buf, "\"pid\":");
                if (s)
                        pid = (unsigned) strtoul(s + 6, NULL, 10);
        }
        close(fd);
        if (!pid)
                test_fail(__FILE__, __LINE__, "no start event: %.400s", buf);
        return pid;
}

/* Whether envd's List of the sandbox shows pid running (and, when cmd is given, with that
 * command). */
static bool listed(struct e2b *e, const char *id, const char *token, unsigned pid, const char *cmd) {
        _cleanup_free_ char *r = envd(e, id, token, "process.Process/List", false, "{}");
        ASSERT_EQ(test_raw_status(r), 200);
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(r));
        ASSERT_NOT_NULL(o);
        cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(o, "processes")) {
                if ((unsigned) cJSON_GetNumberValue(cJSON_GetObjectItem(p, "pid")) != pid)
                        continue;
                if (!cmd)
                        return true;
                const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(p, "config"), "cmd"));
                return c && !strcmp(c, cmd);
        }
        return false;
}

/* controld's memory from /proc: VmRSS or VmHWM in KiB. */
static long vm_kib(pid_t pid, const char *key) {
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        FILE *f = fopen(path, "r");
        ASSERT_NOT_NULL(f);
        long v = -1;
        while (fgets(line, sizeof(line), f))
                if (!strncmp(line, key, strlen(key)) && line[strlen(key)] == ':')
                        v = strtol(line + strlen(key) + 1, NULL, 10);
        fclose(f);
        return v;
}

/* Issue 34: ListDir's answer was bounded in entries only: 16.9 MiB from the agent (long names
 * under a path near PATH_MAX) became a 296 MB answer and 654 MiB of controld's memory. Now the
 * answer is bounded in bytes: an error naming the limit, and controld grows by far less. */
TEST_FULL(listdir_of_long_names_is_bounded, 900) {
        struct e2b e = { 0 };
        char id[25], tok[65];
        e2b_start_one(&e, NULL, id, tok);
        /* 32000 files of 250-byte names in a directory whose path is about 2.8 KiB long: long, but
         * short enough that the container's files stay under the host's PATH_MAX beneath Docker's
         * data root (deeper, Docker's btrfs driver cannot remove the container: ENAMETOOLONG) */
        _cleanup_free_ char *made = run(&e, id, tok,
                                        "exec python3 -c \"\nimport os\nd='/root/deep'\nfor i in range(11): d += '/' + ('d%02d' % i) * 83\n"
                                        "os.makedirs(d)\nfor i in range(32000):\n os.close(os.open(d + '/' + ('f%05d' % i).ljust(250, 'x'), "
                                        "os.O_CREAT | os.O_WRONLY))\nopen('/root/deep.path', 'w').write(d)\nprint('made')\n\"");
        ASSERT_NOT_NULL(strstr(made, "\"stdout\""));
        _cleanup_free_ char *cat = run(&e, id, tok, "cat /root/deep.path");
        const char *s = strstr(cat, "\"stdout\":\"");
        ASSERT_NOT_NULL(s);
        s += 10;
        size_t b64len = strcspn(s, "\"");
        uint8_t *dp = NULL;
        size_t dl = 0;
        ASSERT_EQ(base64_decode_flags(s, b64len, BASE64_PAD_OPTIONAL, &dp, &dl), 0);
        _cleanup_free_ char *deep = xstrndup((const char *) dp, dl);
        free(dp);
        ASSERT_GE(strlen(deep), 2700);

        long rss0 = vm_kib(e.c.pid, "VmRSS");
        _cleanup_free_ char *msg = xasprintf("{\"path\":\"%s\",\"depth\":1}", deep);
        _cleanup_free_ char *head = xasprintf("POST /filesystem.Filesystem/ListDir HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                                              "E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nConnect-Protocol-Version: 1\r\n"
                                              "Content-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                                              e.port, id, tok, strlen(msg));
        int fd = open_req(&e, head, msg, strlen(msg));
        /* the whole answer counted, its start kept */
        char first[4096] = "";
        size_t total = 0;
        int64_t deadline = mono_ms() + 240000;
        for (;;) {
                ASSERT_TRUE(mono_ms() < deadline);
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, 1000) <= 0)
                        continue;
                char buf[65536];
                ssize_t k = recv(fd, buf, sizeof(buf), 0);
                if (k <= 0)
                        break;
                if (total < sizeof(first) - 1)
                        memcpy(first + total, buf, (size_t) k < sizeof(first) - 1 - total ? (size_t) k : sizeof(first) - 1 - total);
                total += (size_t) k;
        }
        close(fd);
        long hwm = vm_kib(e.c.pid, "VmHWM");
        fprintf(stderr, "ListDir answered %zu bytes; controld VmRSS before %ld KiB, VmHWM after %ld KiB\n", total, rss0, hwm);
        ASSERT_TRUE(total < (size_t) 17 << 20);
        ASSERT_TRUE(hwm - rss0 < 200 * 1024);
        if (test_raw_status(first) != 429 || !strstr(first, "resource_exhausted") || !strstr(first, "larger than the limit (16 MiB"))
                test_fail(__FILE__, __LINE__, "want resource_exhausted naming the limit, got: %.600s", first);
        /* a smaller listing of the same sandbox still works */
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/ListDir", false, "{\"path\":\"/root\",\"depth\":1}"), 200, "deep.path");
}

/* Issue 34: the table of deadlines (Start's Connect-Timeout-Ms outliving its client) was global,
 * 1024 entries: one sandbox's 1024 far deadlines made every other sandbox's timed, disconnected
 * command die at once. Now it is per sandbox: A fills its own beyond its bound, and B's command
 * runs to its deadline, with B's listing intact. */
TEST_FULL(process_tables_are_per_sandbox, 900) {
        struct e2b e = { 0 };
        e2b_start(&e, NULL);
        char a[25], atok[65], b[25], btok[65];
        create(&e, e.key, a, atok);
        create(&e, e.key_bob, b, btok);
        /* B: a tagged command kept running (its listing is checked at the end) */
        unsigned bl = start_detached(&e, b, btok, "{\"cmd\":\"sleep\",\"args\":[\"1000\"]}", 0);
        ASSERT_TRUE(listed(&e, b, btok, bl, "sleep"));
        /* A: 1100 timed commands, each with a deadline of ~115 days, each left by its client
         * while it runs (1100 is more than the old table's 1024, and than A's own bound) */
        for (int i = 0; i < 1100; i++)
                (void) start_detached(&e, a, atok, "{\"cmd\":\"sleep\",\"args\":[\"2\"]}", 9999999999LL);
        sleep(2);   /* the last ones' hang-ups are seen */
        /* B: a timed command left by its client, deadline in 6 s */
        unsigned bt = start_detached(&e, b, btok, "{\"cmd\":\"sleep\",\"args\":[\"1000\"]}", 6000);
        int64_t t0 = mono_ms();
        sleep(3);
        ASSERT_TRUE(listed(&e, b, btok, bt, NULL));   /* still running: A did not shorten its deadline */
        /* and it dies at its own deadline */
        bool gone = false;
        while (!gone && mono_ms() - t0 < 20000) {
                gone = !listed(&e, b, btok, bt, NULL);
                if (!gone)
                        usleep(500 * 1000);
        }
        ASSERT_TRUE(gone);
        ASSERT_GE(mono_ms() - t0, 5000);
        /* B's listing still knows its other command after A's many starts */
        ASSERT_TRUE(listed(&e, b, btok, bl, "sleep"));
}

static size_t gzip_buf(const void *in, size_t len, uint8_t **ret) {
        z_stream z = { 0 };
        ASSERT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
        size_t cap = deflateBound(&z, len);
        uint8_t *out = xmalloc(cap);
        z.next_in = (Bytef *) in;
        z.avail_in = (uInt) len;
        z.next_out = out;
        z.avail_out = (uInt) cap;
        ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
        size_t n = cap - z.avail_out;
        deflateEnd(&z);
        *ret = out;
        return n;
}

/* Issue 38: envd as E2B's current SDK expects it. */
TEST_FULL(envd_as_the_current_sdk_expects_it, 600) {
        struct e2b e = { 0 };
        char id[25], tok[65];
        e2b_start_one(&e, "max_file = 1M\n", id, tok);
        _cleanup_free_ char *setup = run(&e, id, tok,
                                         "mkdir -p /root/s/a /root/s/b && touch /root/s/a-c /root/s/a/z /root/s/a/b /root/s/0 && "
                                         "echo hi > /root/t.txt && chmod 640 /root/t.txt && ln -s t.txt /root/l.txt && "
                                         "ln -s /nowhere /root/dangling && chmod 750 /root/s/b && echo done");
        ASSERT_NOT_NULL(strstr(setup, "ZG9uZQo"));
        /* files.remove of a missing path succeeds, as envd's os.RemoveAll */
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Remove", false, "{\"path\":\"/root/not-there\"}"), 200, "{}");
        /* Stat of a symlink: the link itself, its target resolved; type and mode as its target's */
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/l.txt\"}"), 200, "\"permissions\":\"Lrwxrwxrwx\"");
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/l.txt\"}"), 200,
                   "\"symlinkTarget\":\"/root/t.txt\"");
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/l.txt\"}"), 200, "\"name\":\"l.txt\"");
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/l.txt\"}"), 200, "\"mode\":416");
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/dangling\"}"), 200,
                   "\"permissions\":\"Lrwxrwxrwx\"");
        /* a plain file has no symlinkTarget; mode is the permission bits only, directories too */
        {
                _cleanup_free_ char *r = envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/t.txt\"}");
                ASSERT_NOT_NULL(strstr(test_raw_body(r), "\"mode\":416"));
                ASSERT_NOT_NULL(strstr(test_raw_body(r), "\"permissions\":\"-rw-r-----\""));
                ASSERT_NULL(strstr(test_raw_body(r), "symlinkTarget"));
        }
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/s/b\"}"), 200, "\"mode\":488,");
        /* ListDir sorted by name, each directory followed by what is in it */
        {
                _cleanup_free_ char *r = envd(&e, id, tok, "filesystem.Filesystem/ListDir", false, "{\"path\":\"/root/s\",\"depth\":2}");
                ASSERT_EQ(test_raw_status(r), 200);
                _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(r));
                ASSERT_NOT_NULL(o);
                static const char *const want[] = { "/root/s/0", "/root/s/a", "/root/s/a/b", "/root/s/a/z", "/root/s/a-c", "/root/s/b" };
                cJSON *en = cJSON_GetObjectItem(o, "entries");
                ASSERT_EQ(cJSON_GetArraySize(en), (int) ELEMENTSOF(want));
                for (size_t i = 0; i < ELEMENTSOF(want); i++)
                        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(en, (int) i), "path")), want[i]);
        }
        /* ListDir shows a symlink as Stat does */
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/ListDir", false, "{\"path\":\"/root\"}"), 200,
                   "\"symlinkTarget\":\"/root/t.txt\"");
        /* a dead or unknown sandbox: 502 with E2B's body on every path, before any token */
        static const char unknown[] = "0123456789abcdef01234567";
        E2B_EXPECT(envd(&e, unknown, NULL, "filesystem.Filesystem/Stat", false, "{\"path\":\"/\"}"), 502, "\"sandboxId\":\"0123456789abcdef01234567\"");
        E2B_EXPECT(envd(&e, unknown, "bad", "process.Process/List", false, "{}"), 502, "\"code\":502");
        {
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\n", unknown);
                E2B_EXPECT(e2btest_req(&e, "GET", "/files?path=/etc/hostname", h, NULL, NULL, 0), 502, "\"sandboxId\"");
                E2B_EXPECT(e2btest_req(&e, "POST", "/files?path=/root/x", h, "application/octet-stream", "x", 1), 502, "\"message\"");
                E2B_EXPECT(e2btest_req(&e, "GET", "/envs", h, NULL, NULL, 0), 502, "\"code\":502");
        }
        /* a running sandbox still wants its token */
        E2B_EXPECT(envd(&e, id, "bad", "process.Process/List", false, "{}"), 401, "unauthenticated");
        {
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\n", id);
                E2B_EXPECT(e2btest_req(&e, "GET", "/files?path=/etc/hostname", h, NULL, NULL, 0), 401, "token");
        }
        /* gzip uploads: inflated into the file; a bomb past max_file refused; bad gzip named */
        _cleanup_free_ char *hz = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\nContent-Encoding: gzip\r\n", id, tok);
        {
                static const char text[] = "hello, gzip from the SDK\n";
                uint8_t *gz = NULL;
                size_t n = gzip_buf(text, strlen(text), &gz);
                _cleanup_free_ char *r = e2btest_req(&e, "POST", "/files?path=/root/g.txt", hz, "application/octet-stream", gz, n);
                free(gz);
                ASSERT_EQ(test_raw_status(r), 200);
                _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, tok);
                E2B_EXPECT(e2btest_req(&e, "GET", "/files?path=/root/g.txt", h, NULL, NULL, 0), 200, "hello, gzip from the SDK");
        }
        {
                /* one that inflates in many pieces (and compresses well: inflate holds output back) */
                size_t n0 = 900 * 1024;
                _cleanup_free_ char *text = xmalloc(n0);
                for (size_t i = 0; i < n0; i++)
                        text[i] = "abcabcabd\n"[(i * 7 + i / 4096) % 10];
                uint8_t *gz = NULL;
                size_t n = gzip_buf(text, n0, &gz);
                _cleanup_free_ char *r = e2btest_req(&e, "POST", "/files?path=/root/g2.txt", hz, "application/octet-stream", gz, n);
                free(gz);
                ASSERT_EQ(test_raw_status(r), 200);
                E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/Stat", false, "{\"path\":\"/root/g2.txt\"}"), 200,
                           "\"size\":\"921600\"");
                _cleanup_free_ char *sum = run(&e, id, tok, "md5sum /root/g2.txt");
                /* the same bytes as sent */
                unsigned char md[16];
                char hex[33];
                EVP_Digest(text, n0, md, NULL, EVP_md5(), NULL);
                for (int i = 0; i < 16; i++)
                        snprintf(hex + 2 * i, 3, "%02x", md[i]);
                _cleanup_free_ char *b64 = base64_encode((const uint8_t *) hex, 32, NULL);
                /* md5sum's line starts with the hex: its base64 starts with that of the first 30 bytes */
                b64[40] = 0;
                ASSERT_NOT_NULL(strstr(sum, b64));
        }
        {
                size_t big = 8u << 20;
                _cleanup_free_ char *zeros = xmalloc(big);
                memset(zeros, 0, big);
                uint8_t *gz = NULL;
                size_t n = gzip_buf(zeros, big, &gz);
                ASSERT_TRUE(n < 64 * 1024);
                _cleanup_free_ char *r = e2btest_req(&e, "POST", "/files?path=/root/bomb", hz, "application/octet-stream", gz, n);
                free(gz);
                ASSERT_EQ(test_raw_status(r), 413);
                ASSERT_NOT_NULL(strstr(test_raw_body(r), "larger than the limit"));
        }
        E2B_EXPECT(e2btest_req(&e, "POST", "/files?path=/root/bad", hz, "application/octet-stream", "not gzip at all", 15), 400, "gzip");
}

/* What a Start stream's answer carried in field ("stdout", "stderr", "pty"), decoded and joined. */
static char *output_of(const char *resp, const char *field) {
        _cleanup_free_ char *needle = xasprintf("\"%s\":\"", field);
        char *out = xstrdup("");
        for (const char *p = strstr(resp, needle); p; p = strstr(p, needle)) {
                p += strlen(needle);
                size_t n = strcspn(p, "\"");
                uint8_t *d = NULL;
                size_t dl = 0;
                ASSERT_EQ(base64_decode_flags(p, n, BASE64_PAD_OPTIONAL, &d, &dl), 0);
                char *joined = xasprintf("%s%.*s", out, (int) dl, (const char *) d);
                free(d);
                free(out);
                out = joined;
                p += n;
        }
        return out;
}

/* Authorization: Basic base64("<user>:"), as the SDKs send `user` (NULL: none). */
static char *user_header(const char *user) {
        if (!user)
                return xstrdup("");
        _cleanup_free_ char *raw = xasprintf("%s:", user);
        _cleanup_free_ char *b = base64_encode((const uint8_t *) raw, strlen(raw), NULL);
        return xasprintf("Authorization: Basic %s\r\n", b);
}

/* The stdout of script run by /bin/sh through envd's Start as user (NULL: the default); its
 * stderr, if any, is shown. */
static char *sh_as(struct e2b *e, const char *id, const char *token, const char *user, const char *script) {
        _cleanup_free_ char *m = sh_start_msg(script), *h = user_header(user);
        _cleanup_free_ char *r = e2btest_envd(e, id, token, "process.Process/Start", true, m, strlen(m), h);
        if (test_raw_status(r) != 200)
                test_fail(__FILE__, __LINE__, "Start `%s` as %s -> %.600s", script, user ? user : "(default)", r);
        _cleanup_free_ char *err = output_of(r, "stderr");
        if (*err)
                fprintf(stderr, "stderr of `%.200s`: %s\n", script, err);
        return output_of(r, "stdout");
}

#define ASSERT_OUT(e, id, tok, user, script, want)                                                                      \
        do {                                                                                                            \
                _cleanup_free_ char *_o = sh_as((e), (id), (tok), (user), (script));                                   \
                if (strcmp(_o, (want)))                                                                                 \
                        test_fail(__FILE__, __LINE__, "`%s` as %s: want \"%s\", got \"%s\"", (script),                  \
                                  (user) ? (const char *) (user) : "(default)", (want), _o);                            \
        } while (0)

/* POST /files?path= (octet-stream) as user; the status. */
static int upload_as(struct e2b *e, const char *id, const char *token, const char *user, const char *path, const char *text) {
        _cleanup_free_ char *u = user_header(user);
        _cleanup_free_ char *h = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n%s", id, token, u);
        _cleanup_free_ char *q = xasprintf("/files?path=%s", path);
        _cleanup_free_ char *r = e2btest_req(e, "POST", q, h, "application/octet-stream", text, strlen(text));
        if (test_raw_status(r) != 200)
                fprintf(stderr, "upload %s -> %.400s\n", path, r);
        return test_raw_status(r);
}

/* A pure-Python wheel made in the sandbox, no network: paddock_probe 0.1 (VALUE = 42). */
#define MAKE_WHEEL                                                                                                      \
        "python3 -c \"\nimport zipfile\nz = zipfile.ZipFile('/home/user/w/paddock_probe-0.1-py3-none-any.whl', 'w')\n"    \
        "z.writestr('paddock_probe/__init__.py', 'VALUE = 42\\n')\n"                                                    \
        "z.writestr('paddock_probe-0.1.dist-info/METADATA', 'Metadata-Version: 2.1\\nName: paddock-probe\\nVersion: 0.1\\n')\n" \
        "z.writestr('paddock_probe-0.1.dist-info/WHEEL', 'Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n')\n" \
        "z.writestr('paddock_probe-0.1.dist-info/RECORD', '')\nz.close()\n\""

/* Issue 38: E2B's base template as E2B's SDKs and agent frameworks expect it. On the old code
 * every command ran as root in /root and `user` was refused. */
TEST_FULL(sandboxes_look_like_e2bs_base, 900) {
        struct e2b e = { 0 };
        e2b_start_base(&e, NULL, "e2b-base");
        char id[25], tok[65];
        create(&e, e.key, id, tok);
        /* commands: user in /home/user by default; root when named; sudo without a password */
        ASSERT_OUT(&e, id, tok, NULL, "whoami; pwd; echo $HOME $USER; id -u; id -g", "user\n/home/user\n/home/user user\n1000\n1000\n");
        ASSERT_OUT(&e, id, tok, "user", "whoami; pwd", "user\n/home/user\n");
        ASSERT_OUT(&e, id, tok, "root", "whoami; pwd; echo $HOME", "root\n/root\n/root\n");
        ASSERT_OUT(&e, id, tok, NULL, "sudo whoami && sudo -n true && sudo sh -c 'echo $HOME' && echo sudo-ok", "root\n/root\nsudo-ok\n");
        ASSERT_OUT(&e, id, tok, NULL, "sudo sh -c 'exit 3'; echo $?", "3\n");
        /* a terminal (the SDK's pty.create) is user's too */
        {
                const char *m = "{\"process\":{\"cmd\":\"/bin/sh\",\"args\":[\"-c\",\"whoami; pwd\"]},\"pty\":{\"size\":{\"rows\":24,\"cols\":80}}}";
                _cleanup_free_ char *r = envd(&e, id, tok, "process.Process/Start", true, m);
                ASSERT_EQ(test_raw_status(r), 200);
                _cleanup_free_ char *o = output_of(r, "pty");
                if (!strstr(o, "user\r\n/home/user"))
                        test_fail(__FILE__, __LINE__, "the terminal says \"%s\"", o);
        }
        /* files: what the default user writes or makes is theirs, with the directories made for it */
        ASSERT_EQ(upload_as(&e, id, tok, NULL, "/home/user/x", "hello\n"), 200);
        ASSERT_EQ(upload_as(&e, id, tok, NULL, "notes/deep/y.txt", "relative\n"), 200);
        E2B_EXPECT(envd(&e, id, tok, "filesystem.Filesystem/MakeDir", false, "{\"path\":\"made/a/b\"}"), 200, "/home/user/made/a/b");
        ASSERT_EQ(upload_as(&e, id, tok, "root", "/home/user/r", "root's\n"), 200);
        ASSERT_OUT(&e, id, tok, "root", "echo was > /home/user/pre && chmod 644 /home/user/pre && echo ok", "ok\n");
        ASSERT_EQ(upload_as(&e, id, tok, NULL, "/home/user/pre", "rewritten\n"), 200);
        ASSERT_OUT(&e, id, tok, NULL,
                   "cd /home/user && stat -c '%U:%G %n' x notes notes/deep notes/deep/y.txt made made/a made/a/b r pre && cat x notes/deep/y.txt pre",
                   "user:user x\nuser:user notes\nuser:user notes/deep\nuser:user notes/deep/y.txt\nuser:user made\n"
                   "user:user made/a\nuser:user made/a/b\nroot:root r\nroot:root pre\nhello\nrelative\nrewritten\n");
        ASSERT_OUT(&e, id, tok, NULL, "ls -l /home/user/x | cut -d' ' -f3,4", "user user\n");
        /* a name not served: a 400 naming it, on the Connect calls and on /files */
        {
                _cleanup_free_ char *h = user_header("nobody");
                const char *m = "{\"process\":{\"cmd\":\"/bin/true\"}}";
                _cleanup_free_ char *r = e2btest_envd(&e, id, tok, "process.Process/Start", true, m, strlen(m), h);
                /* a stream's error: its end-of-stream message */
                if (test_raw_status(r) != 200 || !strstr(r, "invalid_argument") || !strstr(r, "no user \\\"nobody\\\""))
                        test_fail(__FILE__, __LINE__, "Start as nobody -> %.600s", r);
                _cleanup_free_ char *hf = xasprintf("E2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n", id, tok);
                E2B_EXPECT(e2btest_req(&e, "GET", "/files?path=/etc/hostname&username=nobody", hf, NULL, NULL, 0), 400, "username: no user");
                E2B_EXPECT(e2btest_req(&e, "GET", "/files?path=/home/user/x&username=user", hf, NULL, NULL, 0), 200, "hello");
                E2B_EXPECT(e2btest_req(&e, "GET", "/files?path=x", hf, NULL, NULL, 0), 200, "hello");
        }
        /* python3, pip and venv as user, offline: a local wheel installs where user can write */
        ASSERT_OUT(&e, id, tok, NULL, "python3 -m pip --version | cut -d' ' -f1", "pip\n");
        ASSERT_OUT(&e, id, tok, NULL, "mkdir -p w && " MAKE_WHEEL " && echo made", "made\n");
        ASSERT_OUT(&e, id, tok, NULL,
                   "pip install -q --no-index w/paddock_probe-0.1-py3-none-any.whl >/dev/null 2>&1; "
                   "python3 -c 'import paddock_probe as p; print(p.VALUE, p.__file__.startswith(\"/home/user/.local/\"))'",
                   "42 True\n");
        ASSERT_OUT(&e, id, tok, NULL,
                   "python3 -m venv v && v/bin/pip install -q --no-index w/paddock_probe-0.1-py3-none-any.whl >/dev/null 2>&1; "
                   "v/bin/python -c 'import paddock_probe as p, sys; print(p.VALUE, sys.prefix)'",
                   "42 /home/user/v\n");
        ASSERT_OUT(&e, id, tok, NULL, "node -e 'console.log(process.versions.node.split(\".\")[0] >= 18, require(\"os\").userInfo().username)'",
                   "true user\n");
        /* the Brimble API's sandboxes of the same template keep its defaults: root */
        {
                _cleanup_free_ char *key = ctld_account_key(&e.c, "carol", NULL, NULL);
                char bid[25];
                ctld_create(&e.c, key, "{\"template\":\"e2b-base\"}", bid);
                ASSERT_STREQ(ctld_wait_status(&e.c, key, bid, "ready", 180), "ready");
                struct hres r;
                ctld_exec(&e.c, key, bid, "whoami; echo $HOME", 60, &r);
                ASSERT_EQ(r.status, 200);
                ASSERT_STREQ(hres_data_str(&r, "stdout"), "root\n/root\n");
                hres_done(&r);
        }
}

/* Runs the current SDK's script npm-e2b-current/<name> against a controld whose "base" is base
 * (configured by environment only, as a user's program is); it must end with "ok done". */
static void run_sdk_script(const char *name, const char *base, const char *what) {
        char rel[128];
        snprintf(rel, sizeof(rel), "npm-e2b-current/%s", name);
        _cleanup_free_ char *script = xstrdup(test_build_path(rel));
        if (access(script, R_OK) != 0) {
                static char why[256];
                snprintf(why, sizeof(why), "%s is missing (make tests installs the e2b package and copies it)", rel);
                test_skip(why);
        }
        struct e2b e = { 0 };
        e2b_start_base(&e, NULL, base);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", e.port);
        _cleanup_free_ char *out = NULL;
        int rc = e2btest_sdk(&e, url, script, &out);
        if (rc != 0 || !strstr(out ? out : "", "ok done"))
                test_fail(__FILE__, __LINE__, "the SDK's %s failed (exit %d)", what, rc);
}

/* The same through E2B's current SDK (npm e2b, tests/e2b/envd.mjs), configured by environment. */
TEST_FULL(envd_through_the_current_sdk, 600) {
        run_sdk_script("e2b-envd.mjs", "e2b-base", "envd calls");
}

/* E2B's volumes through the current SDK (tests/e2b/volumes.mjs): made, listed, their files
 * written, read, listed, made, changed and removed without a sandbox of the caller's (and with
 * another volume's token refused), mounted by one sandbox after another, the content API
 * through the sandbox that mounts it, refused while mounted, destroyed. */
TEST_FULL(volumes_through_the_current_sdk, 600) {
        run_sdk_script("e2b-volumes.mjs", "python-3.11", "volume calls");
}
