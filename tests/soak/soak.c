/* soak.c — a bounded load test against one local controld (loopback only).
 *
 * Starts its own platform: a nodeagent (egress on a bridge of this run's, snapshots to a
 * repository of this run's in the registry on 127.0.0.1:5000, its own node id, exchange and
 * nft tables) and controld (tests/lib/ctltest: fresh config and sqlite store, docker driver,
 * real runsc sandboxes, RabbitMQ). It warms up, takes the leak baseline (below), then for
 * SOAK_SECONDS (`make soak`: 1800) runs:
 *   - SOAK_CLIENTS (default 6) clients, each its own account, looping: create a sandbox
 *     (every third one on the client's persistent volume), buffered exec and check the
 *     output, streamed exec and check the frames, upload a file and download it back
 *     byte for byte, batch upload, an egress change (restricted, then open again, each
 *     confirmed by the agent), every fourth cycle a pause and a resume (then an exec), every
 *     fifth cycle of odd clients a snapshot (until ready) and its delete, destroy;
 *   - hostile clients: slow headers (one byte every 2 s, then drop), huge bodies
 *     (Content-Length far over the limits, an 8+ MiB JSON body actually sent, a body of
 *     many tiny JSON values), streamed execs dropped after the first frame, junk
 *     methods and garbage request lines.
 * Then stops the load and checks, and prints as a table, that everything is back where it
 * started: fds, threads and RSS of controld and of the nodeagent (its parent and its
 * privileged processes), containers and Docker volumes, nft chains and map elements of both
 * agent tables, the store's live rows (sandboxes not final, snapshots, egress rows, previews),
 * the registry's tags; that no request was answered 5xx (there are no injected faults in
 * this run, so every 5xx is unexpected) and every operation did what it should. The test
 * runner line "N passed, N failed" follows.
 *
 * The second test here, `load` (`make load`), is the 200-client run: LOAD_CLIENTS (200)
 * threads doing buffered execs and file round trips on LOAD_SANDBOXES (20) python-3.11
 * sandboxes (Debian, 512 MiB) for
 * LOAD_SECONDS (600); only the documented 429s may refuse, p50/p99 per operation are
 * printed, and controld's RSS must stay under its start + LOAD_RSS_SLACK_MB (256).
 *
 * Environment: SOAK_SECONDS, SOAK_CLIENTS, SOAK_RSS_SLACK_MB (default 48: how far above
 * its start RSS may settle), SOAK_SERVER_EXTRA ([server] keys for the controld config),
 * SOAK_NO_AMPLIFICATION=1 (leave out the many-tiny-JSON-values bodies, to tell their
 * memory cost apart from the rest), PADDOCK_TEST_SEED (the clients' random bodies and files;
 * default 1, printed). */
#include <curl/curl.h>
#include <dirent.h>
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

#include "agenttest.h"
#include "amqptest.h"
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

enum op { OP_CREATE, OP_EXEC, OP_STREAM, OP_UPLOAD, OP_DOWNLOAD, OP_BATCH, OP_EGRESS, OP_PAUSE, OP_SNAPSHOT, OP_DESTROY,
          OP_VOLUME, OP_SLOW, OP_HUGE, OP_DROPPED, OP_JUNK, _OP_MAX };
static const char *const op_names[] = { "create", "exec", "stream", "upload", "download", "batch", "egress", "pause+resume",
                                        "snapshot", "destroy", "volume", "slow-headers", "huge-body", "dropped-stream", "junk" };
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

static const char *jstr(const cJSON *o, const char *k) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        return cJSON_IsString(v) ? v->valuestring : "";
}

/* A snapshot of sandbox id until it is ready (2 min at most), then its delete. */
static void snapshot_cycle(struct client *cl, const char *id, int iter) {
        struct hres r;
        char path[128], body[96], sid[25] = "";
        snprintf(path, sizeof(path), "/sandboxes/%s/snapshots", id);
        snprintf(body, sizeof(body), "{\"name\":\"soak-%d-%d\"}", cl->n, iter);
        long st = req(cl->key, "POST", path, body, &r);
        if (st == 202 && hres_data_str(&r, "id"))
                snprintf(sid, sizeof(sid), "%s", hres_data_str(&r, "id"));
        else
                ok_if(OP_SNAPSHOT, false, "snapshot refused", &r);
        hres_done(&r);
        if (!sid[0])
                return;
        char status[16] = "creating", why[160] = "";
        for (int i = 0; i < 480 && !strcmp(status, "creating"); i++) {
                if (req(cl->key, "GET", "/sandboxes/snapshots?limit=100", NULL, &r) == 200) {
                        const cJSON *it;
                        cJSON_ArrayForEach(it, cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "data"))
                                if (!strcmp(jstr(it, "id"), sid)) {
                                        snprintf(status, sizeof(status), "%s", jstr(it, "status"));
                                        snprintf(why, sizeof(why), "%s", jstr(it, "failure_reason"));
                                }
                }
                hres_done(&r);
                if (!strcmp(status, "creating"))
                        usleep(250000);
        }
        snprintf(path, sizeof(path), "/sandboxes/snapshots/%s", sid);
        long d = req(cl->key, "DELETE", path, NULL, &r);
        hres_done(&r);
        if (strcmp(status, "ready"))
                note("snapshot %s: %s %s", sid, status, why);
        ok_if(OP_SNAPSHOT, !strcmp(status, "ready") && d == 204, "snapshot not ready, or its delete refused", NULL);
}

/* Polls sandbox id until its status is want (60 s at most); whether it got there. */
static bool wait_status(struct client *cl, const char *id, const char *want) {
        char path[96];
        struct hres r;
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        for (int i = 0; i < 240; i++) {
                long g = req(cl->key, "GET", path, NULL, &r);
                bool there = g == 200 && !strcmp(hres_data_str(&r, "status") ?: "", want);
                hres_done(&r);
                if (there)
                        return true;
                usleep(250000);
        }
        return false;
}

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

        /* An egress change and back, each confirmed by the agent (200 only once applied). */
        snprintf(path, sizeof(path), "/sandboxes/%s/egress", id);
        st = req(cl->key, "PUT", path, "{\"mode\":\"restricted\",\"allow\":[\"198.51.100.7\"]}", &r);
        bool eg = st == 200;
        hres_done(&r);
        st = req(cl->key, "PUT", path, "{\"mode\":\"open\"}", &r);
        ok_if(OP_EGRESS, eg && st == 200, "egress change refused", &r);
        hres_done(&r);

        if (iter % 4 == 0) {
                snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
                st = req(cl->key, "POST", path, NULL, &r);
                hres_done(&r);
                bool paused = st == 200 && wait_status(cl, id, "paused");
                snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
                st = req(cl->key, "POST", path, NULL, &r);
                hres_done(&r);
                bool ready = st == 200 && wait_status(cl, id, "ready");
                snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
                long e = ready ? req(cl->key, "POST", path, "{\"cmd\":\"echo back\"}", &r) : 0;
                ok_if(OP_PAUSE, paused && ready && e == 200 && !strcmp(hres_data_str(&r, "stdout") ?: "", "back\n"),
                      "pause/resume/exec", ready ? &r : NULL);
                if (ready)
                        hres_done(&r);
        }

        if (iter % 5 == 0 && cl->n % 2 == 1)
                snapshot_cycle(cl, id, iter);

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

/* ---- the platform: a nodeagent (egress + snapshots) of this run's ---- */

#define SOAK_BRIDGE "pdksoak0"
static char node_id[40], exchange[64], table[32], repo[64], agent_conf[512], agent_log[512];
static pid_t agent_pid;

static int run(char *const argv[]) {
        return test_run_capture(argv, NULL, 1 << 16);
}
#define RUN(...) run((char *const[]) { __VA_ARGS__, NULL })

static void platform_down(void *ud) {
        (void) ud;
        test_stop_child(&agent_pid);
        RUN("nft", "delete", "table", "inet", table);
        RUN("nft", "delete", "table", "bridge", table);
        amqptest_snapshot_queues_drop(exchange, node_id);
}

static void networks_drop(void *ud) {
        (void) ud;
        RUN("docker", "network", "rm", "paddock-soak", "paddock-soak-int");
}

/* Starts the agent; returns controld's extra config (static) for the same exchange, node,
 * bridge and repository. */
static const char *platform_up(void) {
        static char extra[2048];
        agenttest_need(true);
        int id4 = (int) (getpid() % 10000);
        agenttest_names("soak", id4, node_id, exchange, agent_conf, agent_log);
        snprintf(table, sizeof(table), "psoak%d", id4);
        snprintf(repo, sizeof(repo), "paddock-soak/snap%d", id4);
        test_on_exit(networks_drop, NULL);
        test_on_exit(platform_down, NULL);
        agenttest_write_conf(agent_conf, node_id, exchange, NULL,
                             "[egress]\nenable = true\ntable = %s\nbridges = " SOAK_BRIDGE "\n"
                             "[snapshot]\nregistry = 127.0.0.1:5000\nrepository = %s\nprune_interval = 30s\ntimeout = 120s\n",
                             table, repo);
        agent_pid = agenttest_start(agent_conf, agent_log, "consuming node messages");
        snprintf(extra, sizeof(extra),
                 "[docker]\nnetwork = paddock-soak\nsubnet = 169.254.68.0/24\ngateway = 169.254.68.1\nbridge = " SOAK_BRIDGE "\n"
                 "network_internal = paddock-soak-int\nsubnet_internal = 169.254.69.0/24\nnode_id = %s\n"
                 "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n"
                 "[snapshots]\nregistry = 127.0.0.1:5000\nrepository = %s\ntimeout = 120s\ntick = 500ms\n" SOAK_PLAN,
                 node_id, exchange, repo);
        return extra;
}

/* ---- what must come back to where it started ---- */

enum leak {
        L_CTL_FDS, L_CTL_THREADS, L_CTL_RSS, L_AGENT_FDS, L_AGENT_THREADS, L_AGENT_RSS, L_CHILD_FDS,
        L_CONTAINERS, L_VOLUMES, L_CHAINS_INET, L_ELEMS_INET, L_CHAINS_BRIDGE, L_ELEMS_BRIDGE,
        L_ROWS_SANDBOXES, L_ROWS_SNAPSHOTS, L_ROWS_EGRESS, L_ROWS_RESOLVED, L_ROWS_PREVIEWS, L_TAGS, _L_MAX
};
static const struct { const char *name; long slack; } leak_info[_L_MAX] = {
        [L_CTL_FDS] = { "controld fds", 2 },            [L_CTL_THREADS] = { "controld threads", 2 },
        [L_CTL_RSS] = { "controld RSS (KiB)", -1 },     [L_AGENT_FDS] = { "nodeagent fds", 2 },
        [L_AGENT_THREADS] = { "nodeagent threads", 2 }, [L_AGENT_RSS] = { "nodeagent RSS (KiB)", -1 },
        [L_CHILD_FDS] = { "agent processes' fds", 2 },  [L_CONTAINERS] = { "containers (this run's)", 0 },
        [L_VOLUMES] = { "Docker volumes", 0 },          [L_CHAINS_INET] = { "nft chains, inet table", 0 },
        [L_ELEMS_INET] = { "nft @sandboxes elements", 0 }, [L_CHAINS_BRIDGE] = { "nft chains, bridge table", 0 },
        [L_ELEMS_BRIDGE] = { "nft @ports elements", 0 }, [L_ROWS_SANDBOXES] = { "store: live sandboxes", 0 },
        [L_ROWS_SNAPSHOTS] = { "store: snapshots", 0 }, [L_ROWS_EGRESS] = { "store: egress_applied", 0 },
        [L_ROWS_RESOLVED] = { "store: egress_resolved", 0 }, [L_ROWS_PREVIEWS] = { "store: previews", 0 },
        [L_TAGS] = { "registry tags", 0 },
};

static long count_dir(const char *path) {
        DIR *d = opendir(path);
        if (!d)
                return -1;
        long n = 0;
        for (struct dirent *e; (e = readdir(d));)
                if (e->d_name[0] != '.')
                        n++;
        closedir(d);
        return n;
}

static void proc_status(pid_t pid, long *rss_kb, long *threads) {
        char path[64], line[256];
        *rss_kb = *threads = -1;
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        FILE *f = fopen(path, "r");
        if (!f)
                return;
        while (fgets(line, sizeof(line), f)) {
                sscanf(line, "VmRSS: %ld", rss_kb);
                sscanf(line, "Threads: %ld", threads);
        }
        fclose(f);
}

static long fds_of(pid_t pid) {
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/fd", (int) pid);
        return count_dir(path);
}

/* The fds of pid's children (the agent's privileged processes). */
static long child_fds(pid_t parent) {
        char path[96];
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int) parent, (int) parent);
        FILE *f = fopen(path, "r");
        if (!f)
                return -1;
        long total = 0;
        int c;
        while (fscanf(f, "%d", &c) == 1)
                total += fds_of((pid_t) c);
        fclose(f);
        return total;
}

static long lines_of(char *const argv[], const char *must_hold) {
        _cleanup_free_ char *out = NULL;
        if (test_run_capture(argv, &out, 1 << 22) != 0)
                return 0;
        long n = 0;
        for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (*l != '\n' && (!must_hold || (strstr(l, must_hold) && strstr(l, must_hold) < (strchr(l, '\n') ?: l + strlen(l)))))
                        n++;
        return n;
}

static long registry_tags(void) {
        _cleanup_free_ char *out = NULL, *url = xasprintf("http://127.0.0.1:5000/v2/%s/tags/list", repo);
        char *argv[] = { "curl", "-s", url, NULL };
        if (test_run_capture(argv, &out, 1 << 20) != 0 || !out)
                return -1;
        _cleanup_json_ cJSON *j = cJSON_Parse(out);
        const cJSON *tags = cJSON_GetObjectItem(j, "tags");
        return cJSON_IsArray(tags) ? cJSON_GetArraySize(tags) : 0;   /* NAME_UNKNOWN: none */
}

static void leaks_now(long v[_L_MAX]) {
        proc_status(ctl.pid, &v[L_CTL_RSS], &v[L_CTL_THREADS]);
        v[L_CTL_FDS] = fds_of(ctl.pid);
        proc_status(agent_pid, &v[L_AGENT_RSS], &v[L_AGENT_THREADS]);
        v[L_AGENT_FDS] = fds_of(agent_pid);
        v[L_CHILD_FDS] = child_fds(agent_pid);
        v[L_CONTAINERS] = lines_of((char *[]) { "docker", "ps", "-aq", "--filter", "network=paddock-soak", "--filter",
                                                "network=paddock-soak-int", NULL },
                                   NULL);
        v[L_VOLUMES] = lines_of((char *[]) { "docker", "volume", "ls", "-q", NULL }, NULL);
        v[L_CHAINS_INET] = lines_of((char *[]) { "nft", "list", "table", "inet", table, NULL }, "\tchain ");
        v[L_ELEMS_INET] = lines_of((char *[]) { "nft", "list", "map", "inet", table, "sandboxes", NULL }, ": jump sbx_");
        v[L_CHAINS_BRIDGE] = lines_of((char *[]) { "nft", "list", "table", "bridge", table, NULL }, "\tchain ");
        v[L_ELEMS_BRIDGE] = lines_of((char *[]) { "nft", "list", "map", "bridge", table, "ports", NULL }, ": jump sbx_");
        _cleanup_free_ char *rows = ctld_db_query(&ctl,
                "SELECT (SELECT COUNT(*) FROM sandboxes WHERE status NOT IN ('destroyed','failed')),"
                " (SELECT COUNT(*) FROM snapshots WHERE status != 'deleted'), (SELECT COUNT(*) FROM egress_applied),"
                " (SELECT COUNT(*) FROM egress_resolved), (SELECT COUNT(*) FROM previews)");
        if (!rows || sscanf(rows, "%ld|%ld|%ld|%ld|%ld", &v[L_ROWS_SANDBOXES], &v[L_ROWS_SNAPSHOTS], &v[L_ROWS_EGRESS],
                            &v[L_ROWS_RESOLVED], &v[L_ROWS_PREVIEWS]) != 5)
                v[L_ROWS_SANDBOXES] = v[L_ROWS_SNAPSHOTS] = v[L_ROWS_EGRESS] = v[L_ROWS_RESOLVED] = v[L_ROWS_PREVIEWS] = -1;
        v[L_TAGS] = registry_tags();
}

/* Whether end is back to start within the allowance (RSS: rss_slack_kb). */
static bool leak_ok(enum leak k, const long start[_L_MAX], const long end[_L_MAX], long rss_slack_kb) {
        long slack = leak_info[k].slack < 0 ? rss_slack_kb : leak_info[k].slack;
        return start[k] >= 0 && end[k] >= 0 && end[k] <= start[k] + slack;
}

TEST_FULL(soak, 1200) {
        struct hres r;
        soak_seconds = env_int("SOAK_SECONDS", 180);
        n_clients = env_int("SOAK_CLIENTS", 6);
        long slack_kb = (long) env_int("SOAK_RSS_SLACK_MB", 48) * 1024;
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering on /var/run/docker.sock (start it with tests/env/services.sh start docker)");
        curl_global_init(CURL_GLOBAL_DEFAULT);
        const char *extra = platform_up();
        ctld_start(&ctl, getenv("SOAK_SERVER_EXTRA"), extra);
        printf("soak: controld pid %d on %s, nodeagent pid %d, %d clients, %d s\n", (int) ctl.pid, ctl.url, (int) agent_pid,
               n_clients, soak_seconds);

        struct client *cl = xnew0(struct client, (size_t) n_clients);
        unsigned seed = test_seed(1); /* 1: the bodies and files this run always had */
        for (int i = 0; i < n_clients; i++) {
                char name[32];
                snprintf(name, sizeof(name), "soak-%d", i);
                cl[i].n = i;
                cl[i].seed = (unsigned) i * 7919u + seed;
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

        /* Warm-up: one full cycle per client shape (a pause and a snapshot included), then the
         * baselines: controld's, and everything the leak table counts (the dropper's sandbox and
         * the volumes are there at both ends). */
        one_cycle(&cl[1 % n_clients], 0);
        one_cycle(&cl[0], 1);
        one_cycle(&cl[0], 3);
        sleep(2);
        long lk_start[_L_MAX], lk_end[_L_MAX];
        leaks_now(lk_start);
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

        /* The leak table: everything counted at the baseline, again (settling for up to 60 s:
         * the agent's prune and the store's background work may still be finishing). */
        for (int i = 0; i < 60; i++) {
                leaks_now(lk_end);
                bool all = true;
                for (int k = 0; k < _L_MAX; k++)
                        all = all && leak_ok((enum leak) k, lk_start, lk_end, slack_kb);
                if (all)
                        break;
                sleep(1);
        }
        printf("\n===== soak leak table (start = after warm-up, end = after the load and teardown) =====\n");
        printf("%-28s %12s %12s  %s\n", "what", "start", "end", "verdict");
        long leaks_bad = 0;
        for (int k = 0; k < _L_MAX; k++) {
                bool okk = leak_ok((enum leak) k, lk_start, lk_end, slack_kb);
                leaks_bad += !okk;
                printf("%-28s %12ld %12ld  %s\n", leak_info[k].name, lk_start[k], lk_end[k], okk ? "ok" : "LEAK");
        }
        fflush(stdout);

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
        ASSERT_EQ(leaks_bad, 0);
}

/* ---- load: LOAD_CLIENTS clients doing execs and file round trips ---- */

#define LOAD_PLAN                                                                                        \
        "[plan \"load\"]\nmax_concurrent = 10\nregions = local\nmax_cpu = 1000\nmax_memory = 1024\nmax_disk = 5\n"
#define LAT_KEEP 2048            /* latency samples kept per client and operation (reservoir) */

enum lop { LOP_EXEC, LOP_PUT, LOP_GET, _LOP_MAX };
static const char *const lop_names[] = { "exec (buffered echo)", "file upload (4 KiB)", "file download (4 KiB)" };

struct loader {
        int n;
        char key[128], sb[25];
        unsigned seed;
        pthread_t t;
        CURL *h;                 /* one connection per client, kept alive */
        uint32_t lat[_LOP_MAX][LAT_KEEP];   /* microseconds */
        long seen[_LOP_MAX], ok[_LOP_MAX], r429[_LOP_MAX], bad[_LOP_MAX];
};

struct lbuf { char *p; size_t n; };

static size_t lbuf_write(char *d, size_t sz, size_t nm, void *ud) {
        struct lbuf *b = ud;
        size_t k = sz * nm;
        if (b->n + k > (1 << 20))
                return 0;
        b->p = xrealloc(b->p, b->n + k + 1);
        memcpy(b->p + b->n, d, k);
        b->n += k;
        b->p[b->n] = 0;
        return k;
}

/* One request on the client's connection: the status (0: no answer), the body in *out. */
static long lreq(struct loader *l, const char *method, const char *path, const char *ctype, const void *body, size_t len,
                 struct lbuf *out) {
        char url[256], kh[200], ct[80];
        snprintf(url, sizeof(url), "%s%s", ctl.url, path);
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", l->key);
        snprintf(ct, sizeof(ct), "Content-Type: %s", ctype);
        struct curl_slist *hl = curl_slist_append(NULL, kh);
        hl = curl_slist_append(hl, ct);
        hl = curl_slist_append(hl, "Expect:");
        CURL *h = l->h;
        curl_easy_reset(h);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        /* Each client from an address of its own (127.0.x.y, all loopback), as clients of a real
         * deployment are: controld bounds connections per address ([server] per_ip_connections). */
        char ifc[40];
        snprintf(ifc, sizeof(ifc), "host!127.0.%d.%d", 1 + l->n / 250, 1 + l->n % 250);
        curl_easy_setopt(h, CURLOPT_INTERFACE, ifc);
        if (body) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) len);
        }
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, lbuf_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
        long st = 0;
        if (curl_easy_perform(h) == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_slist_free_all(hl);
        return st;
}

static void lat_add(struct loader *l, enum lop op, int64_t us) {
        long i = l->seen[op]++;
        if (i < LAT_KEEP)
                l->lat[op][i] = (uint32_t) us;
        else {
                long j = (long) (rand_r(&l->seed) % (unsigned) (i + 1));
                if (j < LAT_KEEP)
                        l->lat[op][j] = (uint32_t) us;
        }
}

static int64_t mono_us(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Counts one answer: ok when good, 429 as documented (a short back-off), anything else bad. */
static void lcount(struct loader *l, enum lop op, long st, bool good, int64_t us, const struct lbuf *b) {
        if (st == 0)
                atomic_fetch_add(&n_neterr, 1);
        if (st == 429) {
                l->r429[op]++;
                usleep(50000);
                return;
        }
        if (good) {
                l->ok[op]++;
                lat_add(l, op, us);
                return;
        }
        l->bad[op]++;
        note("load %s: status %ld %.120s", lop_names[op], st, b->p ? b->p : "");
}

static void *loader_main(void *ud) {
        struct loader *l = ud;
        l->h = curl_easy_init();
        char path[160], body[160], want[64];
        uint8_t data[4096];
        for (int i = 0; !atomic_load(&stop_load); i++) {
                struct lbuf b = { 0 };
                snprintf(path, sizeof(path), "/sandboxes/%s/exec", l->sb);
                snprintf(body, sizeof(body), "{\"cmd\":\"echo l%d-%d\"}", l->n, i);
                snprintf(want, sizeof(want), "\"stdout\":\"l%d-%d\\n\"", l->n, i);
                int64_t t0 = mono_us();
                long st = lreq(l, "POST", path, "application/json", body, strlen(body), &b);
                lcount(l, LOP_EXEC, st, st == 200 && b.p && strstr(b.p, want), mono_us() - t0, &b);
                free(b.p);

                for (size_t k = 0; k < sizeof(data); k++)
                        data[k] = (uint8_t) rand_r(&l->seed);
                snprintf(path, sizeof(path), "/sandboxes/%s/files/tmp/load-%d.bin", l->sb, l->n);
                b = (struct lbuf) { 0 };
                t0 = mono_us();
                st = lreq(l, "PUT", path, "application/octet-stream", data, sizeof(data), &b);
                lcount(l, LOP_PUT, st, st >= 200 && st < 300, mono_us() - t0, &b);
                free(b.p);
                if (st < 200 || st >= 300)
                        continue;
                b = (struct lbuf) { 0 };
                t0 = mono_us();
                st = lreq(l, "GET", path, "application/json", NULL, 0, &b);
                lcount(l, LOP_GET, st, st == 200 && b.n == sizeof(data) && !memcmp(b.p, data, sizeof(data)), mono_us() - t0, &b);
                free(b.p);
        }
        curl_easy_cleanup(l->h);
        return NULL;
}

static int u32_cmp(const void *a, const void *b) {
        uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
        return x < y ? -1 : x > y;
}

TEST_FULL(load, 1200) {
        int n_load = env_int("LOAD_CLIENTS", 200), n_sbx = env_int("LOAD_SANDBOXES", 20), secs = env_int("LOAD_SECONDS", 600);
        long slack_kb = (long) env_int("LOAD_RSS_SLACK_MB", 256) * 1024;
        if (n_load < 1 || n_sbx < 1 || n_sbx > 100)
                TEST_SKIP("LOAD_CLIENTS >= 1 and LOAD_SANDBOXES 1..100");
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering on /var/run/docker.sock (start it with tests/env/services.sh start docker)");
        curl_global_init(CURL_GLOBAL_DEFAULT);
        ctld_start(&ctl, getenv("LOAD_SERVER_EXTRA"), LOAD_PLAN);
        printf("load: controld pid %d on %s, %d clients on %d sandboxes, %d s\n", (int) ctl.pid, ctl.url, n_load, n_sbx, secs);

        /* The sandboxes, ten an account (the plan's max_concurrent). */
        char (*keys)[128] = xcalloc((size_t) (n_sbx + 9) / 10, 128);
        char (*sbs)[25] = xcalloc((size_t) n_sbx, 25);
        for (int i = 0; i < n_sbx; i++) {
                if (i % 10 == 0) {
                        char name[32];
                        snprintf(name, sizeof(name), "load-%d", i / 10);
                        _cleanup_free_ char *k = ctld_account_key(&ctl, name, "load", NULL);
                        snprintf(keys[i / 10], 128, "%s", k);
                }
                /* Debian's image (the product's templates are Debian): gVisor's own heap grows
                 * ~100 KB per process that runs the static busybox and never gives it back, so
                 * a 128 MiB busybox sandbox is OOM-killed after a few thousand execs (README) */
                ctld_create(&ctl, keys[i / 10], "{\"template\":\"python-3.11\",\"specs\":{\"memory\":512}}", sbs[i]);
        }
        struct loader *ls = xnew0(struct loader, (size_t) n_load);
        unsigned seed = test_seed(1); /* 1: the files and order this run always had */
        for (int i = 0; i < n_load; i++) {
                ls[i].n = i;
                ls[i].seed = (unsigned) i * 2654435761u + seed;
                snprintf(ls[i].key, sizeof(ls[i].key), "%s", keys[(i % n_sbx) / 10]);
                snprintf(ls[i].sb, sizeof(ls[i].sb), "%s", sbs[i % n_sbx]);
        }
        sleep(2);
        struct proc_sample base = sample();
        atomic_store(&peak_rss_kb, base.rss_kb);
        atomic_store(&peak_threads, base.threads);
        printf("load: baseline RSS %ld KiB, %ld threads\n", base.rss_kb, base.threads);

        t_start = mono_now_ms();
        pthread_t mon;
        pthread_create(&mon, NULL, monitor, NULL);
        for (int i = 0; i < n_load; i++)
                pthread_create(&ls[i].t, NULL, loader_main, &ls[i]);
        while (mono_now_ms() - t_start < (int64_t) secs * 1000) {
                sleep(10);
                long ops = 0;
                for (int i = 0; i < n_load; i++)
                        for (int k = 0; k < _LOP_MAX; k++)
                                ops += ls[i].ok[k];
                struct proc_sample s = sample();
                printf("load: t=%3llds ok %ld RSS %ld KiB threads %ld\n", (long long) (mono_now_ms() - t_start) / 1000, ops,
                       s.rss_kb, s.threads);
                fflush(stdout);
        }
        atomic_store(&stop_load, true);
        for (int i = 0; i < n_load; i++)
                pthread_join(ls[i].t, NULL);
        pthread_join(mon, NULL);
        double took = (double) (mono_now_ms() - t_start) / 1000.0;
        struct proc_sample end = sample();

        printf("\n===== load: %d clients, %d sandboxes, %.0f s =====\n", n_load, n_sbx, took);
        printf("%-24s %10s %10s %8s %8s %10s %10s\n", "operation", "ok", "per s", "429", "errors", "p50 ms", "p99 ms");
        long bad = 0;
        for (int k = 0; k < _LOP_MAX; k++) {
                long ok = 0, r429 = 0, err = 0;
                size_t n = 0;
                uint32_t *all = xnew0(uint32_t, (size_t) n_load * LAT_KEEP);
                for (int i = 0; i < n_load; i++) {
                        ok += ls[i].ok[k];
                        r429 += ls[i].r429[k];
                        err += ls[i].bad[k];
                        long kept = ls[i].seen[k] < LAT_KEEP ? ls[i].seen[k] : LAT_KEEP;
                        memcpy(all + n, ls[i].lat[k], (size_t) kept * sizeof(uint32_t));
                        n += (size_t) kept;
                }
                qsort(all, n, sizeof(*all), u32_cmp);
                double p50 = n ? all[n / 2] / 1000.0 : 0, p99 = n ? all[(size_t) ((double) n * 0.99)] / 1000.0 : 0;
                printf("%-24s %10ld %10.1f %8ld %8ld %10.1f %10.1f\n", lop_names[k], ok, (double) ok / took, r429, err, p50, p99);
                bad += err;
                free(all);
        }
        printf("controld RSS: start %ld KiB, peak %ld KiB, end %ld KiB (bound: start + %ld KiB); threads start %ld, peak %ld\n",
               base.rss_kb, atomic_load(&peak_rss_kb), end.rss_kb, slack_kb, base.threads, atomic_load(&peak_threads));
        if (n_notes) {
                printf("first notes:\n");
                for (int i = 0; i < n_notes; i++)
                        printf("  %s\n", notes[i]);
        }
        printf("==========================================\n");
        fflush(stdout);
        for (int i = 0; i < n_sbx; i++) {
                char path[64];
                snprintf(path, sizeof(path), "/sandboxes/%s", sbs[i]);
                struct hres r;
                http_req(&ctl, "DELETE", path, keys[i / 10], NULL, &r);
                hres_done(&r);
        }
        free(ls);
        free(sbs);
        free(keys);
        ASSERT_EQ(bad, 0);
        ASSERT_LE(atomic_load(&peak_rss_kb), base.rss_kb + slack_kb);
}
