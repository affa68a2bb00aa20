/* soak.c — a bounded load test against one local controld (loopback only).
 *
 * Starts its own controld (tests/lib/ctltest: fresh config and sqlite store, docker
 * driver, real runsc sandboxes), warms it up, records its RSS and thread count, then for
 * SOAK_SECONDS (default 180) runs:
 *   - SOAK_CLIENTS (default 6) clients, each its own account, looping: create a sandbox
 *     (every third one on the client's persistent volume), buffered exec and check the
 *     output, streamed exec and check the frames, upload a file and download it back
 *     byte for byte, batch upload, destroy;
 *   - hostile clients: slow headers (one byte every 2 s, then drop), huge bodies
 *     (Content-Length far over the limits, an 8+ MiB JSON body actually sent, a body of
 *     many tiny JSON values), streamed execs dropped after the first frame, junk
 *     methods and garbage request lines.
 * Then stops the load and checks: controld's RSS and threads come back near where they
 * started, every sandbox record is final (destroyed or failed), no container or Docker
 * volume of this run is left, and no request was answered 5xx (there are no injected
 * faults in this run, so every 5xx is unexpected). Prints a summary; the test runner line
 * "N passed, N failed" follows.
 *
 * Environment: SOAK_SECONDS, SOAK_CLIENTS, SOAK_RSS_SLACK_MB (default 48: how far above
 * its start RSS may settle), SOAK_SERVER_EXTRA ([server] keys for the controld config),
 * SOAK_NO_AMPLIFICATION=1 (leave out the many-tiny-JSON-values bodies, to tell their
 * memory cost apart from the rest). */
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"

#define SOAK_PLAN                                                                                        \
        "[plan \"soak\"]\nmax_concurrent = 3\nregions = local\nmax_cpu = 1000\nmax_memory = 1024\n"   \
        "max_disk = 5\nmax_volume_gb = 20\nmax_volumes = 2\n"

static struct ctld ctl;
static int soak_seconds = 180, n_clients = 6;
static atomic_bool stop_load;
static int64_t t_start;

/* ---- counters ---- */

enum op { OP_CREATE, OP_EXEC, OP_STREAM, OP_UPLOAD, OP_DOWNLOAD, OP_BATCH, OP_DESTROY, OP_VOLUME,
          OP_SLOW, OP_HUGE, OP_DROPPED, OP_JUNK, _OP_MAX };
static const char *const op_names[] = { "create", "exec", "stream", "upload", "download", "batch", "destroy", "volume",
                                        "slow-headers", "huge-body", "dropped-stream", "junk" };
static atomic_long op_ok[_OP_MAX], op_bad[_OP_MAX];
static atomic_long n_requests, n_2xx, n_4xx, n_5xx, n_neterr, n_expected_5xx;

static pthread_mutex_t note_lock = PTHREAD_MUTEX_INITIALIZER;
static char notes[40][300];
static int n_notes;

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
        va_list ap;
        pthread_mutex_lock(&note_lock);
        if (n_notes < (int) ELEMENTSOF(notes)) {
                va_start(ap, fmt);
                vsnprintf(notes[n_notes], sizeof(notes[0]), fmt, ap);
                va_end(ap);
                for (char *p = notes[n_notes]; *p; p++)  /* one line each */
                        if ((unsigned char) *p < 0x20)
                                *p = '.';
                n_notes++;
        }
        pthread_mutex_unlock(&note_lock);
}

/* Every sandbox and volume id this run created, for the end checks. */
static pthread_mutex_t ids_lock = PTHREAD_MUTEX_INITIALIZER;
static char (*sb_ids)[25];
static size_t n_sb, cap_sb;
static char vol_ids[64][25];
static size_t n_vol;

static void remember_sandbox(const char *id) {
        pthread_mutex_lock(&ids_lock);
        if (n_sb == cap_sb) {
                cap_sb = cap_sb ? cap_sb * 2 : 256;
                sb_ids = xrealloc(sb_ids, cap_sb * sizeof(*sb_ids));
        }
        snprintf(sb_ids[n_sb++], 25, "%s", id);
        pthread_mutex_unlock(&ids_lock);
}

static int64_t mono_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- controld's process ---- */

struct proc_sample { long rss_kb; long threads; };

static struct proc_sample sample(void) {
        struct proc_sample s = { -1, -1 };
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int) ctl.pid);
        FILE *f = fopen(path, "r");
        if (!f)
                return s;
        while (fgets(line, sizeof(line), f)) {
                sscanf(line, "VmRSS: %ld", &s.rss_kb);
                sscanf(line, "Threads: %ld", &s.threads);
        }
        fclose(f);
        return s;
}

static atomic_long peak_rss_kb, peak_threads;

static void *monitor(void *ud) {
        (void) ud;
        while (!atomic_load(&stop_load)) {
                struct proc_sample s = sample();
                if (s.rss_kb > atomic_load(&peak_rss_kb))
                        atomic_store(&peak_rss_kb, s.rss_kb);
                if (s.threads > atomic_load(&peak_threads))
                        atomic_store(&peak_threads, s.threads);
                usleep(250000);
        }
        return NULL;
}

/* ---- requests through libcurl (ctltest), counted ---- */

static long count(const char *method, const char *path, const struct hres *r) {
        atomic_fetch_add(&n_requests, 1);
        if (r->status <= 0) {
                atomic_fetch_add(&n_neterr, 1);
                note("%s %s: no answer (curl %ld)", method, path, -r->status);
        } else if (r->status >= 500) {
                atomic_fetch_add(&n_5xx, 1);
                note("%s %s -> %ld %.160s", method, path, r->status, r->body ? r->body : "");
        } else if (r->status >= 400)
                atomic_fetch_add(&n_4xx, 1);
        else
                atomic_fetch_add(&n_2xx, 1);
        return r->status;
}

static long req(const char *key, const char *method, const char *path, const char *body, struct hres *r) {
        http_req(&ctl, method, path, key, body, r);
        return count(method, path, r);
}

static long req_raw(const char *key, const char *method, const char *path, const void *body, size_t len, struct hres *r) {
        char kh[300];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", key);
        const char *h[] = { kh, "Content-Type: application/octet-stream", NULL };
        http_req_full(&ctl, method, path, h, body ? body : "", len, r);
        return count(method, path, r);
}

static void ok_if(enum op op, bool good, const char *what, const struct hres *r) {
        if (good) {
                atomic_fetch_add(&op_ok[op], 1);
                return;
        }
        atomic_fetch_add(&op_bad[op], 1);
        note("%s: %s (status %ld: %.160s)", op_names[op], what, r ? r->status : 0, r && r->body ? r->body : "");
}

/* ---- a well-behaved client ---- */

struct client {
        int n;
        char key[128];
        char vol[25];
        pthread_t t;
        unsigned seed;
};

static void one_cycle(struct client *cl, int iter) {
        struct hres r;
        char id[25] = "", path[160], body[512];

        if (cl->vol[0] && iter % 3 == 0)
                snprintf(body, sizeof(body), "{\"name\":\"soak-%d-%d\",\"volumeId\":\"%s\"}", cl->n, iter, cl->vol);
        else
                snprintf(body, sizeof(body), "{\"name\":\"soak-%d-%d\"}", cl->n, iter);
        long st = req(cl->key, "POST", "/sandboxes", body, &r);
        const char *sid = hres_data_str(&r, "id");
        if (st == 201 && sid) {
                snprintf(id, sizeof(id), "%s", sid);
                remember_sandbox(id);
                ok_if(OP_CREATE, !strcmp(hres_data_str(&r, "status") ?: "", "ready"), "created but not ready", &r);
        } else
                ok_if(OP_CREATE, false, "create refused", &r);
        hres_done(&r);
        if (!id[0])
                return;

        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        for (int i = 0; i < 3; i++) {
                char want[64];
                snprintf(body, sizeof(body), "{\"cmd\":\"echo soak-%d-%d-%d\"}", cl->n, iter, i);
                snprintf(want, sizeof(want), "soak-%d-%d-%d\n", cl->n, iter, i);
                st = req(cl->key, "POST", path, body, &r);
                ok_if(OP_EXEC, st == 200 && !strcmp(hres_data_str(&r, "stdout") ?: "", want), "wrong output", &r);
                hres_done(&r);
        }
        st = req(cl->key, "POST", path, "{\"cmd\":\"for i in 1 2 3; do echo line$i; done\",\"stream\":true}", &r);
        ok_if(OP_STREAM, st == 200 && strstr(r.body, "line1") && strstr(r.body, "line3") &&
                                 strstr(r.body, "\"type\":\"done\",\"exit_code\":0"),
              "stream incomplete", &r);
        hres_done(&r);

        size_t len = 1 + (size_t) rand_r(&cl->seed) % (256 * 1024);
        _cleanup_free_ uint8_t *data = xmalloc(len);
        for (size_t i = 0; i < len; i++)
                data[i] = (uint8_t) rand_r(&cl->seed);
        snprintf(path, sizeof(path), "/sandboxes/%s/files/tmp/soak.bin", id);
        st = req_raw(cl->key, "PUT", path, data, len, &r);
        ok_if(OP_UPLOAD, st >= 200 && st < 300, "upload refused", &r);
        hres_done(&r);
        st = req(cl->key, "GET", path, NULL, &r);
        ok_if(OP_DOWNLOAD, st == 200 && r.len == len && !memcmp(r.body, data, len), "download differs", &r);
        hres_done(&r);

        snprintf(path, sizeof(path), "/sandboxes/%s/files/batch", id);
        st = req(cl->key, "POST", path,
                 "{\"files\":[{\"path\":\"/tmp/a\",\"content_base64\":\"YQ==\"},{\"path\":\"/tmp/b\",\"content_base64\":\"\"},"
                 "{\"path\":\"/tmp/c\",\"content_base64\":\"Y2NjYw==\"}]}",
                 &r);
        ok_if(OP_BATCH, st == 200 && r.body && strstr(r.body, "\"uploaded\":3"), "batch", &r);
        hres_done(&r);

        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        st = req(cl->key, "DELETE", path, NULL, &r);
        ok_if(OP_DESTROY, st >= 200 && st < 300, "destroy refused", &r);
        hres_done(&r);
}

static void *client_main(void *ud) {
        struct client *cl = ud;
        for (int iter = 0; !atomic_load(&stop_load); iter++)
                one_cycle(cl, iter);
        return NULL;
}

/* ---- hostile clients over raw sockets ---- */

static int dial(void) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) ctl.port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd >= 0 && connect(fd, (struct sockaddr *) &a, sizeof(a)) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

static bool send_all(int fd, const void *p, size_t n) {
        while (n) {
                ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
                if (k <= 0)
                        return false;
                p = (const char *) p + k;
                n -= (size_t) k;
        }
        return true;
}

/* Reads an answer's status line (waits up to ms); -1 when the server closed or said nothing. */
static int read_status(int fd, int ms, char *buf, size_t size) {
        size_t len = 0;
        int64_t end = mono_now_ms() + ms;
        while (len + 1 < size) {
                int left = (int) (end - mono_now_ms());
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (left <= 0 || poll(&p, 1, left) <= 0)
                        break;
                ssize_t k = recv(fd, buf + len, size - 1 - len, 0);
                if (k <= 0)
                        break;
                len += (size_t) k;
                buf[len] = 0;
                if (strstr(buf, "\r\n\r\n"))
                        break;
        }
        buf[len] = 0;
        int st;
        return sscanf(buf, "HTTP/1.%*d %d", &st) == 1 ? st : -1;
}

/* expected_5xx: the one 5xx status that is the right answer here (0 = none). */
static void count_raw(int st, const char *what, int expected_5xx) {
        atomic_fetch_add(&n_requests, 1);
        if (st >= 500 && st != expected_5xx) {
                atomic_fetch_add(&n_5xx, 1);
                note("%s -> %d", what, st);
        } else if (st >= 400)
                atomic_fetch_add(&n_4xx, 1);
        else if (st >= 200)
                atomic_fetch_add(&n_2xx, 1);
        if (st == expected_5xx)
                atomic_fetch_add(&n_expected_5xx, 1);
}

static void *slow_headers(void *ud) {
        (void) ud;
        while (!atomic_load(&stop_load)) {
                int fd = dial();
                if (fd < 0) {
                        ok_if(OP_SLOW, false, "could not connect", NULL);
                        sleep(1);
                        continue;
                }
                const char *head = "POST /sandboxes HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
                bool closed = !send_all(fd, head, strlen(head));
                for (int i = 0; i < 10 && !closed && !atomic_load(&stop_load); i++) {
                        sleep(2);
                        closed = !send_all(fd, "a", 1);
                }
                close(fd);
                ok_if(OP_SLOW, true, "", NULL);
        }
        return NULL;
}

static void *huge_bodies(void *ud) {
        const char *key = ud;
        char head[512], buf[4096];
        _cleanup_free_ char *big = xmalloc(9 << 20);
        memset(big, ' ', 9 << 20);
        big[0] = '{';
        big[(9 << 20) - 1] = '}';
        /* Many tiny values: the JSON amplification shape, within the body limit. */
        size_t tiny_len = 2 << 20;
        _cleanup_free_ char *tiny = xmalloc(tiny_len + 32);
        size_t w = (size_t) snprintf(tiny, 32, "{\"name\":[0");
        while (w + 4 < tiny_len) {
                memcpy(tiny + w, ",0", 2);
                w += 2;
        }
        memcpy(tiny + w, "]}", 2);
        w += 2;

        for (int round = 0; !atomic_load(&stop_load); round++) {
                int fd = dial();
                if (fd < 0)
                        continue;
                int st = -1;
                switch (round % 4) {
                case 0: /* announced, never sent: answered from the headers */
                        snprintf(head, sizeof(head),
                                 "POST /sandboxes HTTP/1.1\r\nHost: x\r\nx-brimble-key: %s\r\nContent-Type: application/json\r\n"
                                 "Content-Length: 10737418240\r\n\r\n", key);
                        send_all(fd, head, strlen(head));
                        st = read_status(fd, 10000, buf, sizeof(buf));
                        ok_if(OP_HUGE, st == 413, "10 GiB Content-Length not refused with 413", NULL);
                        break;
                case 1: /* sent, over the JSON body limit */
                        snprintf(head, sizeof(head),
                                 "POST /sandboxes HTTP/1.1\r\nHost: x\r\nx-brimble-key: %s\r\nContent-Type: application/json\r\n"
                                 "Transfer-Encoding: chunked\r\n\r\n", key);
                        send_all(fd, head, strlen(head));
                        for (size_t off = 0; off < (size_t) 9 << 20; off += 1 << 20) {
                                snprintf(head, sizeof(head), "%x\r\n", 1 << 20);
                                if (!send_all(fd, head, strlen(head)) || !send_all(fd, big + off, 1 << 20) || !send_all(fd, "\r\n", 2))
                                        break;
                        }
                        send_all(fd, "0\r\n\r\n", 5);
                        st = read_status(fd, 20000, buf, sizeof(buf));
                        ok_if(OP_HUGE, st == 413 || st == -1, "9 MiB chunked JSON body not refused", NULL);
                        break;
                case 2: /* a PUT over max_file, announced */
                        snprintf(head, sizeof(head),
                                 "PUT /sandboxes/0123456789abcdef01234567/files/tmp/x HTTP/1.1\r\nHost: x\r\nx-brimble-key: %s\r\n"
                                 "Content-Length: 107374182400\r\n\r\n", key);
                        send_all(fd, head, strlen(head));
                        st = read_status(fd, 10000, buf, sizeof(buf));
                        ok_if(OP_HUGE, st == 413 || st == 404, "100 GiB PUT not refused", NULL);
                        break;
                default: /* many tiny JSON values (SOAK_NO_AMPLIFICATION=1 leaves them out) */
                        if (getenv("SOAK_NO_AMPLIFICATION")) {
                                close(fd);
                                continue;
                        }
                        snprintf(head, sizeof(head),
                                 "POST /sandboxes HTTP/1.1\r\nHost: x\r\nx-brimble-key: %s\r\nContent-Type: application/json\r\n"
                                 "Content-Length: %zu\r\n\r\n", key, w);
                        send_all(fd, head, strlen(head));
                        send_all(fd, tiny, w);
                        st = read_status(fd, 20000, buf, sizeof(buf));
                        ok_if(OP_HUGE, st >= 400 && st < 500, "2 MiB of tiny JSON values not refused with 4xx", NULL);
                        break;
                }
                count_raw(st, "huge body", 0);
                close(fd);
                usleep(200000);
        }
        return NULL;
}

/* Streamed execs dropped after the first frame, on a sandbox of their own. */
struct dropper { char key[128]; char id[25]; };

static void *dropped_streams(void *ud) {
        struct dropper *d = ud;
        char head[512], buf[8192];
        const char *body = "{\"cmd\":\"echo started; sleep 120\",\"stream\":true,\"timeout_seconds\":300}";
        while (!atomic_load(&stop_load)) {
                int fd = dial();
                if (fd < 0)
                        continue;
                snprintf(head, sizeof(head),
                         "POST /sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nx-brimble-key: %s\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\n\r\n%s", d->id, d->key, strlen(body), body);
                send_all(fd, head, strlen(head));
                /* Wait for the first data frame, then vanish mid-stream. */
                size_t len = 0;
                int64_t end = mono_now_ms() + 30000;
                buf[0] = 0;
                while (!strstr(buf, "data: ") && len + 1 < sizeof(buf) && mono_now_ms() < end) {
                        struct pollfd p = { .fd = fd, .events = POLLIN };
                        if (poll(&p, 1, 1000) <= 0)
                                continue;
                        ssize_t k = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
                        if (k <= 0)
                                break;
                        len += (size_t) k;
                        buf[len] = 0;
                }
                int st = -1;
                sscanf(buf, "HTTP/1.%*d %d", &st);
                count_raw(st, "dropped stream", 0);
                /* 429: the per-sandbox exec limit, when earlier dropped commands are still being killed. */
                ok_if(OP_DROPPED, (st == 200 && strstr(buf, "started")) || st == 429, "stream did not start", NULL);
                close(fd);
                usleep(500000);
        }
        return NULL;
}

static void *junk(void *ud) {
        (void) ud;
        static const struct { const char *line; int expected_5xx; } lines[] = {
                { "A\"}x{ /sandboxes HTTP/1.1\r\nHost: x\r\n\r\n", 0 },
                { "GET /%00/../sandboxes HTTP/1.1\r\nHost: x\r\n\r\n", 0 },
                { "GET /sandboxes%2f HTTP/1.1\r\nHost: x\r\n\r\n", 0 },
                { "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not tls\r\n\r\n", 0 },
                { "GET / HTTP/9.9\r\nHost: x\r\n\r\n", 505 },  /* HTTP Version Not Supported is right */
                { "GET /metrics HTTP/1.1\r\nHost: x\r\nX: \x01\x02\r\n\r\n", 0 },
                { "POST /sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 0 },
                { "GET /sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nzzzzzzz\r\n", 0 },
        };
        char buf[4096];
        for (int i = 0; !atomic_load(&stop_load); i++) {
                int fd = dial();
                if (fd < 0)
                        continue;
                const char *l = lines[i % ELEMENTSOF(lines)].line;
                int exp = lines[i % ELEMENTSOF(lines)].expected_5xx;
                send_all(fd, l, strlen(l));
                int st = read_status(fd, 5000, buf, sizeof(buf));
                count_raw(st, l, exp);
                if (st >= 500 && st != exp)
                        ok_if(OP_JUNK, false, l, NULL);
                else
                        ok_if(OP_JUNK, true, "", NULL);
                close(fd);
                usleep(100000);
        }
        return NULL;
}

/* ---- the run ---- */

static int env_int(const char *k, int def) {
        const char *v = getenv(k);
        return v && *v ? atoi(v) : def;
}

static bool container_gone(const char *id) {
        char name[64];
        snprintf(name, sizeof(name), "paddock-%s", id);
        return !docker_container_exists(name);
}

static bool docker_volume_exists(const char *vol_id) {
        char name[64];
        snprintf(name, sizeof(name), "paddock-vol-%s", vol_id);
        char *argv[] = { "docker", "volume", "inspect", name, NULL };
        return test_run_capture(argv, NULL, 4096) == 0;
}

TEST_FULL(soak, 1200) {
        struct hres r;
        soak_seconds = env_int("SOAK_SECONDS", 180);
        n_clients = env_int("SOAK_CLIENTS", 6);
        long slack_kb = (long) env_int("SOAK_RSS_SLACK_MB", 48) * 1024;
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering on /var/run/docker.sock (start it with tests/env/services.sh start docker)");
        curl_global_init(CURL_GLOBAL_DEFAULT);
        ctld_start(&ctl, getenv("SOAK_SERVER_EXTRA"), SOAK_PLAN);
        printf("soak: controld pid %d on %s, %d clients, %d s\n", (int) ctl.pid, ctl.url, n_clients, soak_seconds);

        struct client *cl = xnew0(struct client, (size_t) n_clients);
        for (int i = 0; i < n_clients; i++) {
                char name[32];
                snprintf(name, sizeof(name), "soak-%d", i);
                cl[i].n = i;
                cl[i].seed = (unsigned) i * 7919u + 1;
                _cleanup_free_ char *k = ctld_account_key(&ctl, name, "soak", NULL);
                snprintf(cl[i].key, sizeof(cl[i].key), "%s", k);
                if (i % 2 == 0) {  /* half the clients also cycle a persistent volume */
                        char body[256];
                        snprintf(body, sizeof(body), "{\"name\":\"soak-vol-%d\",\"sizeGB\":10,\"region\":\"6a06df21cc6bef51342e199e\"}", i);
                        if (req(cl[i].key, "POST", "/volumes", body, &r) == 201 && hres_data_str(&r, "id")) {
                                snprintf(cl[i].vol, sizeof(cl[i].vol), "%s", hres_data_str(&r, "id"));
                                snprintf(vol_ids[n_vol++], 25, "%s", cl[i].vol);
                                ok_if(OP_VOLUME, true, "", &r);
                        } else
                                ok_if(OP_VOLUME, false, "volume create refused", &r);
                        hres_done(&r);
                }
        }
        struct dropper dr = { 0 };
        _cleanup_free_ char *dk = ctld_account_key(&ctl, "soak-dropper", "soak", NULL);
        snprintf(dr.key, sizeof(dr.key), "%s", dk);
        ctld_create(&ctl, dr.key, NULL, dr.id);
        remember_sandbox(dr.id);

        /* Warm-up: one full cycle per client shape, then the baseline. */
        one_cycle(&cl[0], 1);
        one_cycle(&cl[0], 3);
        sleep(2);
        struct proc_sample base = sample();
        printf("soak: baseline after warm-up: RSS %ld KiB, %ld threads\n", base.rss_kb, base.threads);
        atomic_store(&peak_rss_kb, base.rss_kb);
        atomic_store(&peak_threads, base.threads);

        t_start = mono_now_ms();
        pthread_t mon, slow[3], huge, drop[2], jk;
        pthread_create(&mon, NULL, monitor, NULL);
        for (int i = 0; i < n_clients; i++)
                pthread_create(&cl[i].t, NULL, client_main, &cl[i]);
        for (size_t i = 0; i < ELEMENTSOF(slow); i++)
                pthread_create(&slow[i], NULL, slow_headers, NULL);
        pthread_create(&huge, NULL, huge_bodies, cl[1 % n_clients].key);
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                pthread_create(&drop[i], NULL, dropped_streams, &dr);
        pthread_create(&jk, NULL, junk, NULL);

        while (mono_now_ms() - t_start < (int64_t) soak_seconds * 1000) {
                sleep(10);
                struct proc_sample s = sample();
                printf("soak: t=%3llds requests %ld (5xx %ld) RSS %ld KiB threads %ld\n",
                       (long long) (mono_now_ms() - t_start) / 1000, atomic_load(&n_requests), atomic_load(&n_5xx),
                       s.rss_kb, s.threads);
                fflush(stdout);
        }
        atomic_store(&stop_load, true);
        for (int i = 0; i < n_clients; i++)
                pthread_join(cl[i].t, NULL);
        for (size_t i = 0; i < ELEMENTSOF(slow); i++)
                pthread_join(slow[i], NULL);
        pthread_join(huge, NULL);
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                pthread_join(drop[i], NULL);
        pthread_join(jk, NULL);
        pthread_join(mon, NULL);
        double load_s = (double) (mono_now_ms() - t_start) / 1000.0;

        /* Tear down what the run still holds: the dropper's sandbox and the volumes. */
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s", dr.id);
        req(dr.key, "DELETE", path, NULL, &r);
        ok_if(OP_DESTROY, r.status >= 200 && r.status < 300, "destroy of the dropper's sandbox", &r);
        hres_done(&r);
        for (int i = 0; i < n_clients; i++) {
                if (!cl[i].vol[0])
                        continue;
                snprintf(path, sizeof(path), "/volumes/%s", cl[i].vol);
                long st = 0;
                for (int k = 0; k < 30; k++) {  /* detaching follows the destroy */
                        st = req(cl[i].key, "DELETE", path, NULL, &r);
                        hres_done(&r);
                        if (st != 400)
                                break;
                        sleep(1);
                }
                ok_if(OP_VOLUME, st == 204, "volume delete", NULL);
        }

        /* Settle: controld should give back the threads and memory of the load. */
        struct proc_sample end = sample();
        for (int i = 0; i < 60; i++) {
                end = sample();
                if (end.threads <= base.threads + 2 && end.rss_kb <= base.rss_kb + slack_kb)
                        break;
                sleep(1);
        }

        /* Records and leftovers. */
        size_t not_final = 0, containers_left = 0, volumes_left = 0;
        _cleanup_free_ char *list = NULL;
        ASSERT_EQ(ctld_admin(&ctl, &list, "sandbox", "list", NULL), 0);
        for (char *save = NULL, *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char id[25] = "", status[16] = "";
                if (sscanf(line, "%24s %*s %15s", id, status) == 2 && hexid_valid(id) && strcmp(status, "destroyed") &&
                    strcmp(status, "failed")) {
                        not_final++;
                        note("record %s is %s after the run", id, status);
                }
        }
        for (size_t i = 0; i < n_sb; i++)
                if (!container_gone(sb_ids[i])) {
                        containers_left++;
                        note("container paddock-%s is left", sb_ids[i]);
                }
        for (size_t i = 0; i < n_vol; i++)
                if (docker_volume_exists(vol_ids[i])) {
                        volumes_left++;
                        note("docker volume paddock-vol-%s is left", vol_ids[i]);
                }

        long bad_ops = 0;
        printf("\n===== soak summary =====\n");
        printf("load            %.0f s, %d clients + 3 slow-header, 1 huge-body, 2 dropped-stream, 1 junk client\n", load_s,
               n_clients);
        printf("requests        %ld: 2xx %ld, 4xx %ld, 5xx unexpected %ld (no injected faults), 505 to HTTP/9.9 %ld, "
               "no answer %ld\n",
               atomic_load(&n_requests), atomic_load(&n_2xx), atomic_load(&n_4xx), atomic_load(&n_5xx),
               atomic_load(&n_expected_5xx), atomic_load(&n_neterr));
        printf("operations     ");
        for (int i = 0; i < _OP_MAX; i++) {
                printf(" %s %ld/%ld", op_names[i], atomic_load(&op_ok[i]), atomic_load(&op_ok[i]) + atomic_load(&op_bad[i]));
                bad_ops += atomic_load(&op_bad[i]);
        }
        printf("\n");
        printf("controld RSS    start %ld KiB, peak %ld KiB, end %ld KiB (allowed end <= start + %ld KiB)\n", base.rss_kb,
               atomic_load(&peak_rss_kb), end.rss_kb, slack_kb);
        printf("controld threads start %ld, peak %ld, end %ld (allowed end <= start + 2)\n", base.threads,
               atomic_load(&peak_threads), end.threads);
        printf("sandboxes       %zu created, %zu records not final, %zu containers left; volumes %zu, %zu left\n", n_sb,
               not_final, containers_left, n_vol, volumes_left);
        if (n_notes) {
                printf("first notes:\n");
                for (int i = 0; i < n_notes; i++)
                        printf("  %s\n", notes[i]);
        }
        printf("========================\n");
        fflush(stdout);
        free(sb_ids);
        free(cl);

        ASSERT_EQ(atomic_load(&n_5xx), 0);
        ASSERT_EQ(not_final, 0);
        ASSERT_EQ(containers_left, 0);
        ASSERT_EQ(volumes_left, 0);
        ASSERT_LE(end.threads, base.threads + 2);
        ASSERT_LE(end.rss_kb, base.rss_kb + slack_kb);
        ASSERT_EQ(bad_ops, 0);
        ASSERT_EQ(atomic_load(&n_neterr), 0);
}
