/* Runtime operations as a user sees them, on real dockerd + gVisor runsc sandboxes:
 * files (binary round trip, volumes across pause/resume, errors, size cap enforced before the
 * body is read, traversal, host isolation) and batch upload. */
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

/* ================= files ================= */

/* New bytes each run, from a printed seed so bytes that fail can be had again. */
static void random_bytes(uint8_t *p, size_t n) {
        uint64_t x = (uint64_t) test_seed((unsigned) now_mono_ms()) * 6364136223846793005ULL + 1442695040888963407ULL;
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
                /* The writer is whoever holds the file open (the agent, or the exec path's cat). */
                static const char probe[] =
                        "for f in /proc/[0-9]*/fd/*; do l=$(readlink \"$f\" 2>/dev/null) || continue; "
                        "case \"$l\" in */tmp/partial-upload*) echo \"alive $f\";; esac; done; echo end";
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
