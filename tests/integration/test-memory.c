/* test-memory.c — pause with memory on the local driver (issue 37, first slice): a deny_all
 * sandbox's processes and memory survive a pause with keepMemory (gVisor checkpoint through
 * Docker's checkpoint API) and a resume in place; networked sandboxes are refused by name; a
 * checkpoint gone behind controld's back makes the resume start afresh and say memory was
 * lost; E2B's pause() default keeps memory and connect resumes it.
 *
 * Docker's checkpoint API needs an experimental daemon. When the shared one is not
 * (`docker info`), the test uses its own at CKPT_SOCK (one already running, or one it starts
 * and stops again), with the runtimes of $PADDOCK_STATE/daemon.json and the test images
 * loaded into it. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "e2btest.h"
#include "strutil.h"
#include "testlib.h"

#define CKPT_DIR "/run/paddock-ckpt"
#define CKPT_SOCK CKPT_DIR "/docker.sock"

static bool experimental(const char *host) {
        char *argv[] = { "docker", "-H", (char *) host, "info", "-f", "{{.ExperimentalBuild}}", NULL };
        _cleanup_free_ char *out = NULL;
        return test_run_capture(argv, &out, 4096) == 0 && out && startswith(out, "true");
}

static bool has_image(const char *image) {
        char *argv[] = { "docker", "image", "inspect", "-f", "{{.Id}}", (char *) image, NULL };
        _cleanup_free_ char *out = NULL;
        return test_run_capture(argv, &out, 4096) == 0;
}

/* A dockerd of the test's own in dir (socket dir/docker.sock, data root /var/lib/docker-<data>),
 * with the runtimes of $PADDOCK_STATE/daemon.json, experimental or not; stopped (SIGTERM by its
 * pid file, waited for) when the test ends, so that none is left behind. */
static void own_dockerd_stop(void *ud) {
        _cleanup_free_ char *cmd = xasprintf("p=$(cat %s/docker.pid 2>/dev/null) && kill \"$p\" && "
                                             "for i in $(seq 100); do kill -0 \"$p\" 2>/dev/null || exit 0; sleep 0.1; done",
                                             (const char *) ud);
        char *argv[] = { "sh", "-c", cmd, NULL };
        (void) test_run_capture(argv, NULL, 0);
}

static void own_dockerd_start(const char *dir, const char *data, bool exp) {
        const char *state = getenv("PADDOCK_STATE") ? getenv("PADDOCK_STATE") : "/var/tmp/paddock-dev";
        _cleanup_free_ char *cmd = xasprintf(
                "set -e; mkdir -p %1$s /var/lib/docker-%2$s; "
                "python3 -c 'import json,sys; print(json.dumps({\"runtimes\": json.load(open(sys.argv[1]))[\"runtimes\"]}))' "
                "'%3$s/daemon.json' > %1$s/daemon.json; "
                "setsid dockerd %4$s--host unix://%1$s/docker.sock --data-root /var/lib/docker-%2$s "
                "--exec-root %1$s/exec --pidfile %1$s/docker.pid --bridge none --iptables=false "
                "--config-file %1$s/daemon.json > %1$s/dockerd.log 2>&1 < /dev/null &",
                dir, data, state, exp ? "--experimental " : "");
        char *argv[] = { "sh", "-c", cmd, NULL };
        ASSERT_EQ(test_run_capture(argv, NULL, 0), 0);
        test_on_exit(own_dockerd_stop, (void *) dir);
}

/* Each image into the engine DOCKER_HOST names, from the shared one, unless it has it. Its API
 * answers before its containerd does: the load is what tells it is ready. */
static void load_images(const char *const *images, size_t n, const char *log) {
        for (size_t i = 0; i < n; i++) {
                _cleanup_free_ char *load = xasprintf("docker -H unix:///var/run/docker.sock save '%s' | docker load", images[i]);
                char *argv[] = { "sh", "-c", load, NULL };
                for (int t = 0; t < 60 && !has_image(images[i]); t++)
                        if (test_run_capture(argv, NULL, 0) != 0)
                                usleep(500000);
                if (!has_image(images[i]))
                        test_fail(__FILE__, __LINE__, "could not load %s into our own dockerd (%s)", images[i], log);
        }
}

/* The [docker] section for controld: "" on an experimental shared daemon, else our own's. */
static const char *ckpt_docker(void) {
        if (!experimental("unix://" CKPT_SOCK)) {
                need_docker();
                if (experimental("unix:///var/run/docker.sock"))
                        return "";
                own_dockerd_start(CKPT_DIR, "ckpt", true);
                for (int i = 0; i < 300 && !experimental("unix://" CKPT_SOCK); i++)
                        usleep(100000);
                if (!experimental("unix://" CKPT_SOCK))
                        TEST_SKIP("no experimental dockerd (shared one is not; ours did not start: " CKPT_DIR "/dockerd.log)");
        }
        setenv("DOCKER_HOST", "unix://" CKPT_SOCK, 1);
        const char *images[] = { getenv("PADDOCK_TEST_IMAGE") ? getenv("PADDOCK_TEST_IMAGE") : "paddock/busybox:local",
                                 getenv("PADDOCK_PY_IMAGE") ? getenv("PADDOCK_PY_IMAGE") : "paddock/python-3.11:local" };
        load_images(images, ELEMENTSOF(images), CKPT_DIR "/dockerd.log");
        return "[docker]\nsocket = " CKPT_SOCK "\n";
}

/* A python3 process that writes "<pid> <counter>" to /tmp/c every 100 ms. */
#define COUNTER_CMD                                                                                                  \
        "{\"cmd\":\"python3 -c \\\"import os,time,itertools; [(open('/tmp/c','w').write('%d %d' % (os.getpid(), i)), " \
        "time.sleep(0.1)) for i in itertools.count()]\\\"\",\"cwd\":\"/\"}"

/* "<pid> <n>" of /tmp/c: 1 when read, 0 when not there (yet). */
static int try_counter(struct ctld *c, const char *key, const char *id, long *pid, long *n) {
        struct hres r;
        ctld_exec(c, key, id, "cat /tmp/c", 30, &r);
        ASSERT_EQ(r.status, 200);
        const char *out = hres_data_str(&r, "stdout");
        int k = out && sscanf(out, "%ld %ld", pid, n) == 2;
        hres_done(&r);
        return k;
}

static void read_counter(struct ctld *c, const char *key, const char *id, long *pid, long *n) {
        for (int i = 0; i < 50; i++) {
                if (try_counter(c, key, id, pid, n))
                        return;
                usleep(100000);
        }
        test_fail(__FILE__, __LINE__, "the counter is not in /tmp/c");
}

/* Starts the counter and waits until it has written. (A process started on an E2B sandbox
 * right after its create was seen to exit 1 before its shell ran, now and then: that is not
 * what this suite tests, so it is started again then.) */
static void start_counter(struct ctld *c, const char *key, const char *id) {
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/processes", id);
        for (int attempt = 0; attempt < 5; attempt++) {
                struct hres r;
                http_req(c, "POST", path, key, COUNTER_CMD, &r);
                if (r.status != 201)
                        test_fail(__FILE__, __LINE__, "POST /processes -> %ld %s", r.status, r.body);
                hres_done(&r);
                long pid, n;
                for (int i = 0; i < 20; i++) {
                        if (try_counter(c, key, id, &pid, &n))
                                return;
                        usleep(100000);
                }
        }
        test_fail(__FILE__, __LINE__, "the counter did not start");
}

static cJSON *get_sandbox(struct ctld *c, const char *key, const char *id) {
        struct hres r;
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s", id);
        http_req(c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        cJSON *d = cJSON_DetachItemFromObject(r.json, "data");
        hres_done(&r);
        return d;
}

static long long ms_now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (long long) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sb_post(struct ctld *c, const char *key, const char *id, const char *what, const char *body, long want,
                    struct hres *ret) {
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/%s", id, what);
        http_req(c, "POST", path, key, body, ret);
        if (ret->status != want)
                test_fail(__FILE__, __LINE__, "POST %s %s -> %ld %s (want %ld)", path, body ? body : "", ret->status,
                          ret->body, want);
}

/* A sandbox of python-3.11 without a network: what keepMemory is for. */
#define PY_NO_NET "{\"template\":\"python-3.11\",\"egress\":{\"mode\":\"deny_all\"}}"

/* controld on the checkpointing Docker, an account `name` and a sandbox of body in it, ready:
 * the account's key (the caller frees it) and the sandbox's id. */
static char *start_ready(struct ctld *c, const char *name, const char *body, char id[25]) {
        ctld_start(c, NULL, ckpt_docker());
        char *key = ctld_account_key(c, name, NULL, NULL);
        ctld_create(c, key, body, id);
        ASSERT_STREQ(ctld_wait_status(c, key, id, "ready", 60), "ready");
        return key;
}

/* start_ready with a sandbox of PY_NO_NET whose counter runs (start_counter). */
static char *start_counting(struct ctld *c, const char *name, char id[25]) {
        char *key = start_ready(c, name, PY_NO_NET, id);
        start_counter(c, key, id);
        return key;
}

TEST_FULL(keep_memory_pause_resume_same_process, 300) {
        struct ctld c = { 0 };
        char id[25];
        struct hres r;
        _cleanup_free_ char *key = start_counting(&c, "mem", id);
        usleep(600000);
        long pid0, n0, pid1, n1;
        read_counter(&c, key, id, &pid0, &n0);

        /* Unknown fields are refused by name; a plain pause still keeps the filesystem only. */
        sb_post(&c, key, id, "pause", "{\"keepMemroy\":true}", 400, &r);
        ASSERT_NOT_NULL(strstr(r.body, "keepMemroy"));
        hres_done(&r);

        long long t0 = ms_now();
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 200, &r);
        long long pause_ms = ms_now() - t0;
        hres_done(&r);
        cJSON *sb = get_sandbox(&c, key, id);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(sb, "status")), "paused");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        ASSERT_GE(cJSON_GetNumberValue(cJSON_GetObjectItem(sb, "checkpoint_bytes")), 1000000);
        cJSON_Delete(sb);
        /* the checkpoint holds the tenant's memory: only root on the node may read it */
        {
                _cleanup_free_ char *cmd = xasprintf("r=$(docker info -f '{{.DockerRootDir}}'); "
                                                     "c=$(docker inspect -f '{{.Id}}' paddock-%s); "
                                                     "stat -c '%%a %%U' \"$r/containers/$c/checkpoints\"/* | sort -u", id);
                char *argv[] = { "sh", "-c", cmd, NULL };
                _cleanup_free_ char *out = NULL;
                ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
                ASSERT_STREQ(out, "700 root\n");
        }
        /* Kept, stopped: no CPU or memory; and the orphan reaper (every 1 s here) leaves it. */
        ASSERT_TRUE(docker_container_exists(container_name(id)));
        ASSERT_FALSE(docker_container_running(container_name(id)));
        sleep(3);
        ASSERT_TRUE(docker_container_exists(container_name(id)));

        t0 = ms_now();
        sb_post(&c, key, id, "resume", NULL, 200, &r);
        long long resume_ms = ms_now() - t0;
        ASSERT_STREQ(hres_message(&r), "Sandbox resume requested");
        hres_done(&r);
        read_counter(&c, key, id, &pid1, &n1);
        fprintf(stderr, "pause with memory %lld ms, resume %lld ms (counter %ld -> %ld, pid %ld)\n", pause_ms, resume_ms, n0,
                n1, pid1);
        ASSERT_EQ(pid1, pid0);
        ASSERT_GE(n1, n0);        /* continued, not restarted from 0 */
        ASSERT_GE(n1, 4);
        sb = get_sandbox(&c, key, id);
        ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        cJSON_Delete(sb);

        /* Again, then a destroy of the paused sandbox takes its container and checkpoint. */
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s", id);
        http_req(&c, "DELETE", path, key, NULL, &r);
        ASSERT_LE(r.status, 299);
        hres_done(&r);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        ctld_stop(&c);
}

/* On gVisor's host networking (runsc-hostnet, which every test dockerd has), a networked
 * sandbox cannot be checkpointed: keepMemory is refused by name and the sandbox runs on. */
TEST_FULL(keep_memory_refused_for_networked_sandboxes_on_host_networking, 300) {
        struct ctld c = { 0 };
        char id[25];
        struct hres r;
        const char *dk = ckpt_docker();
        _cleanup_free_ char *conf = xasprintf("%sruntime_network = runsc-hostnet\n", *dk ? dk : "[docker]\n");
        ctld_start(&c, NULL, conf);
        _cleanup_free_ char *key = ctld_account_key(&c, "net", NULL, NULL);
        ctld_create(&c, key, "{\"template\":\"busybox\"}", id);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 400, &r);
        ASSERT_NOT_NULL(strstr(hres_message(&r), "keepMemory"));
        ASSERT_NOT_NULL(strstr(hres_message(&r), "deny_all"));
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 5), "ready");
        sb_post(&c, key, id, "pause", "{\"keepMemory\":1}", 400, &r);
        ASSERT_NOT_NULL(strstr(r.body, "keepMemory"));
        hres_done(&r);
        ctld_stop(&c);
}

/* A python HTTP server answering "<pid> <requests it served>": its state is in its memory. */
static const char SERVER_PY[] = "import http.server, os\n"
                                "n = [0]\n"
                                "class H(http.server.BaseHTTPRequestHandler):\n"
                                "    def do_GET(self):\n"
                                "        n[0] += 1\n"
                                "        b = ('%d %d' % (os.getpid(), n[0])).encode()\n"
                                "        self.send_response(200)\n"
                                "        self.send_header('Content-Length', str(len(b)))\n"
                                "        self.end_headers()\n"
                                "        self.wfile.write(b)\n"
                                "    def log_message(self, *a):\n"
                                "        pass\n"
                                "http.server.HTTPServer(('0.0.0.0', 8080), H).serve_forever()\n";

/* GET http://ip:8080/ from the host: the server's "<pid> <n>", or NULL when nothing answers. */
static char *server_get(const char *ip) {
        _cleanup_free_ char *url = xasprintf("http://%s:8080/", ip);
        char *argv[] = { "curl", "-s", "--max-time", "3", url, NULL };
        char *out = NULL;
        if (test_run_capture(argv, &out, 4096) != 0 || !out || !*out) {
                free(out);
                return NULL;
        }
        return out;
}

/* A listener of the test's on addr: it answers its first connection "pong" and ends. */
struct pong {
        int fd;
        pthread_t t;
};
static void *pong_main(void *p) {
        struct pong *pg = p;
        int c = accept(pg->fd, NULL, NULL);
        if (c >= 0) {
                (void) !write(c, "pong\n", 5);
                close(c);
        }
        return NULL;
}
static int pong_start(struct pong *pg, const char *addr) {
        struct sockaddr_in sa = { .sin_family = AF_INET };
        ASSERT_EQ(inet_pton(AF_INET, addr, &sa.sin_addr), 1);
        pg->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(pg->fd >= 0);
        ASSERT_EQ(bind(pg->fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ASSERT_EQ(listen(pg->fd, 4), 0);
        socklen_t len = sizeof(sa);
        ASSERT_EQ(getsockname(pg->fd, (struct sockaddr *) &sa, &len), 0);
        ASSERT_EQ(pthread_create(&pg->t, NULL, pong_main, pg), 0);
        return ntohs(sa.sin_port);
}
static void pong_stop(struct pong *pg) {
        shutdown(pg->fd, SHUT_RDWR);
        pthread_join(pg->t, NULL);
        close(pg->fd);
}

static void rm_container(void *name) {
        char *argv[] = { "docker", "rm", "-f", name, NULL };
        (void) test_run_capture(argv, NULL, 0);
}

/* Issue 37: on gVisor's own network stack (runsc-net, through paddock-runsc-netns where this
 * runsc needs it) a networked sandbox pauses with its memory: a server it runs answers again
 * after the resume at the same address, from the same process, its count continued, and the
 * sandbox's own connections out work. Where the engine runs networked sandboxes on host
 * networking (/healthz says so), the pause is refused by name instead. */
TEST_FULL(networked_sandbox_keeps_its_memory_and_its_server, 300) {
        struct ctld c = { 0 };
        char id[25];
        struct hres r;
        _cleanup_free_ char *key = start_ready(&c, "netmem", "{\"template\":\"python-3.11\"}", id);
        if (!ctld_netstack(&c)) {
                ASSERT_TRUE(getenv("CI") == NULL || strcmp(getenv("CI"), "true") != 0);   /* CI's engine has netstack */
                sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 400, &r);
                ASSERT_NOT_NULL(strstr(hres_message(&r), "host networking"));
                hres_done(&r);
                ctld_stop(&c);
                return;
        }
        _cleanup_free_ char *fpath = xasprintf("/sandboxes/%s/files/tmp/srv.py", id);
        http_req(&c, "PUT", fpath, key, SERVER_PY, &r);
        ASSERT_LE(r.status, 299);
        hres_done(&r);
        _cleanup_free_ char *ppath = xasprintf("/sandboxes/%s/processes", id);
        http_req(&c, "POST", ppath, key, "{\"cmd\":\"python3 /tmp/srv.py\",\"cwd\":\"/tmp\"}", &r);
        ASSERT_EQ(r.status, 201);
        hres_done(&r);
        char ip[64];
        snprintf(ip, sizeof(ip), "%s", container_ip(id));
        char *got = NULL;
        for (int i = 0; i < 100 && !(got = server_get(ip)); i++)
                usleep(100000);
        ASSERT_NOT_NULL(got);
        long pid0 = 0, n0 = 0, pid1 = 0, n1 = 0;
        ASSERT_EQ(sscanf(got, "%ld %ld", &pid0, &n0), 2);
        free(got);

        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        cJSON *sb = get_sandbox(&c, key, id);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(sb, "status")), "paused");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        cJSON_Delete(sb);
        got = server_get(ip);
        ASSERT_NULL(got);                                   /* paused: nothing answers */

        sb_post(&c, key, id, "resume", NULL, 200, &r);
        ASSERT_NULL(strstr(r.body, "Memory was lost"));
        hres_done(&r);
        ASSERT_STREQ(container_ip(id), ip);                 /* the address it had */
        got = server_get(ip);                               /* at once: the resume answered when it was */
        ASSERT_NOT_NULL(got);
        ASSERT_EQ(sscanf(got, "%ld %ld", &pid1, &n1), 2);
        free(got);
        ASSERT_EQ(pid1, pid0);                              /* the same process ... */
        ASSERT_EQ(n1, n0 + 1);                              /* ... with its memory */
        /* The sandbox's own connections out: to a listener of this test's on its gateway. */
        _cleanup_free_ char *gw = NULL;
        {
                char *argv[] = { "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.Gateway}}{{end}}",
                                 container_name(id), NULL };
                ASSERT_EQ(test_run_capture(argv, &gw, 4096), 0);
                gw[strcspn(gw, "\n")] = 0;
        }
        struct pong pg;
        int port = pong_start(&pg, gw);
        _cleanup_free_ char *cmd = xasprintf("python3 -c \"import socket; print(socket.create_connection(('%s', %d), 5).recv(16).decode().strip())\"",
                                             gw, port);
        CTLD_EXEC_EXPECT(&c, key, id, cmd, "pong\n");
        pong_stop(&pg);

        /* Paused again, and its address taken meanwhile (a container of the test's on it): its
         * stack cannot come back elsewhere, so the resume starts it afresh and says why. */
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        _cleanup_free_ char *net = NULL;
        {
                char *argv[] = { "docker", "inspect", "-f", "{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}",
                                 container_name(id), NULL };
                ASSERT_EQ(test_run_capture(argv, &net, 4096), 0);
                net[strcspn(net, "\n")] = 0;
        }
        _cleanup_free_ char *thief = xasprintf("paddock-test-ipthief-%d", (int) getpid());
        test_on_exit(rm_container, thief);
        {
                char *argv[] = { "docker", "run", "-d", "--name", thief, "--network", net, "--ip", ip,
                                 getenv("PADDOCK_TEST_IMAGE") ? getenv("PADDOCK_TEST_IMAGE") : "paddock/busybox:local",
                                 "sleep", "300", NULL };
                ASSERT_EQ(test_run_capture(argv, NULL, 0), 0);
        }
        sb_post(&c, key, id, "resume", NULL, 200, &r);
        ASSERT_NOT_NULL(strstr(hres_message(&r), "Memory was lost"));
        ASSERT_NOT_NULL(strstr(hres_message(&r), "network address"));
        hres_done(&r);
        ASSERT_TRUE(strcmp(container_ip(id), ip) != 0);     /* started afresh, elsewhere */
        CTLD_EXEC_EXPECT(&c, key, id, "test -e /tmp/srv.py && echo kept || echo fresh", "fresh\n");
        rm_container(thief);                                /* at once: it holds an address of the network */
        ctld_stop(&c);
}

TEST_FULL(keep_memory_checkpoint_gone_resumes_from_filesystem, 300) {
        struct ctld c = { 0 };
        char id[25];
        struct hres r;
        _cleanup_free_ char *key = start_counting(&c, "lost", id);
        long pid0, n0;
        read_counter(&c, key, id, &pid0, &n0);
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        /* Behind controld's back: the checkpoint goes. */
        _cleanup_free_ char *cmd = xasprintf("set -e; for c in $(docker checkpoint ls -q %s 2>/dev/null || docker checkpoint ls %s | tail -n +2); do docker checkpoint rm %s $c; done",
                                             container_name(id), container_name(id), container_name(id));
        char *argv[] = { "sh", "-c", cmd, NULL };
        ASSERT_EQ(test_run_capture(argv, NULL, 0), 0);
        sb_post(&c, key, id, "resume", NULL, 200, &r);
        fprintf(stderr, "resume said: %s\n", hres_message(&r));
        ASSERT_NOT_NULL(strstr(hres_message(&r), "Memory was lost"));
        ASSERT_NOT_NULL(strstr(hres_message(&r), "checkpoint"));
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "memory_lost")));
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 5), "ready");
        cJSON *sb = get_sandbox(&c, key, id);
        ASSERT_NOT_NULL(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(sb, "failure_reason")), "Memory was lost"));
        cJSON_Delete(sb);
        /* Started afresh: a new container, without what the counter wrote. */
        CTLD_EXEC_EXPECT(&c, key, id, "test -e /tmp/c && echo present || echo absent", "absent\n");
        ctld_stop(&c);
}

/* E2B's pause() sends no body (memory true by default): the memory is kept, and connect
 * resumes the sandbox with its processes. */
TEST_FULL(e2b_pause_default_keeps_memory_and_connect_resumes, 300) {
        struct e2b e = { .port = test_free_port() };
        _cleanup_free_ char *extra = xasprintf("%s[e2b]\nlisten = 127.0.0.1:%d\nbase_template = python-3.11\n", ckpt_docker(), e.port);
        ctld_start(&e.c, NULL, extra);
        _cleanup_free_ char *key = e2btest_key(&e.c, "e2bmem");
#define E2B(method, path, json) e2btest_api(&e, (method), (path), key, (json))
        _cleanup_free_ char *cr = E2B("POST", "/sandboxes", "{\"templateID\":\"base\",\"allow_internet_access\":false}");
        if (test_raw_status(cr) != 201)
                test_fail(__FILE__, __LINE__, "create -> %.600s", cr);
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(test_raw_body(cr));
        char id[25];
        snprintf(id, sizeof(id), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(o, "sandboxID")));
        start_counter(&e.c, key, id);
        long pid0, n0, pid1, n1;
        read_counter(&e.c, key, id, &pid0, &n0);
        _cleanup_free_ char *ppath = xasprintf("/sandboxes/%s/pause", id);
        _cleanup_free_ char *pr = E2B("POST", ppath, "");
        if (test_raw_status(pr) != 204)
                test_fail(__FILE__, __LINE__, "pause -> %.600s", pr);
        cJSON *sb = get_sandbox(&e.c, key, id);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(sb, "status")), "paused");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        cJSON_Delete(sb);
        _cleanup_free_ char *cpath = xasprintf("/sandboxes/%s/connect", id);
        _cleanup_free_ char *rr = E2B("POST", cpath, "{\"timeout\":300}");
        if (test_raw_status(rr) != 201)
                test_fail(__FILE__, __LINE__, "connect -> %.600s", rr);
        read_counter(&e.c, key, id, &pid1, &n1);
        ASSERT_EQ(pid1, pid0);
        ASSERT_GE(n1, n0);
        /* memory: false keeps today's way (a filesystem snapshot), unchanged. */
        ctld_stop(&e.c);
#undef E2B
}

#define NOEXP_DIR "/run/paddock-noexp"
#define NOEXP_SOCK NOEXP_DIR "/docker.sock"

static bool answers(const char *host) {
        char *argv[] = { "docker", "-H", (char *) host, "info", "-f", "{{.ExperimentalBuild}}", NULL };
        return test_run_capture(argv, NULL, 4096) == 0;
}

/* The [docker] section for a controld on an engine WITHOUT experimental features: the shared
 * one when it has none, else one of the test's own (started and stopped here, the test image
 * loaded into it). services.sh sets the shared one up experimental, so under CI it is ours. */
static const char *noexp_docker(void) {
        need_docker();
        if (!experimental("unix:///var/run/docker.sock"))
                return "";
        own_dockerd_start(NOEXP_DIR, "noexp", false);
        for (int i = 0; i < 300 && !answers("unix://" NOEXP_SOCK); i++)
                usleep(100000);
        if (!answers("unix://" NOEXP_SOCK))
                test_fail(__FILE__, __LINE__, "our own dockerd without experimental features did not start (" NOEXP_DIR "/dockerd.log)");
        ASSERT_FALSE(experimental("unix://" NOEXP_SOCK));
        setenv("DOCKER_HOST", "unix://" NOEXP_SOCK, 1);
        const char *images[] = { getenv("PADDOCK_TEST_IMAGE") ? getenv("PADDOCK_TEST_IMAGE") : "paddock/busybox:local" };
        load_images(images, ELEMENTSOF(images), NOEXP_DIR "/dockerd.log");
        return "[docker]\nsocket = " NOEXP_SOCK "\n";
}

/* On a Docker engine without experimental features keepMemory is refused by name, before
 * anything is touched (an engine of the test's own when the shared one has them). */
TEST_FULL(keep_memory_needs_an_experimental_docker, 120) {
        const char *docker = noexp_docker();
        struct ctld c = { 0 };
        char id[25];
        struct hres r;
        ctld_start(&c, NULL, docker);
        _cleanup_free_ char *key = ctld_account_key(&c, "noexp", NULL, NULL);
        ctld_create(&c, key, "{\"egress\":{\"mode\":\"deny_all\"}}", id);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 501, &r);
        ASSERT_NOT_NULL(strstr(hres_message(&r), "keepMemory"));
        ASSERT_NOT_NULL(strstr(hres_message(&r), "experimental"));
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 5), "ready");
        ctld_exec(&c, key, id, "echo still", 30, &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        ctld_stop(&c);
}

/* controld with checkpoints on and a plan of the test's own (in region local, 5 GB of disk):
 * its name, sandboxes at once, millicores and MB of memory, and more of its keys. */
static void start_with_plan(struct ctld *c, const char *plan, int concurrent, int cpu, int memory, const char *more) {
        char extra[2048];
        snprintf(extra, sizeof(extra), "%s\n[plan \"%s\"]\nmax_concurrent = %d\nregions = local\nmax_cpu = %d\n"
                                       "max_memory = %d\nmax_disk = 5\n%s", ckpt_docker(), plan, concurrent, cpu, memory, more);
        ctld_start(c, NULL, extra);
}

/* The plan's memory_kept_max_mb: the memory limits of an account's sandboxes paused with their
 * memory fit in it, or the pause is refused by name (403) and the sandbox stays ready; a
 * resume frees its share. */
TEST_FULL(keep_memory_is_held_to_the_plans_quota, 300) {
        struct ctld c = { 0 };
        struct hres r;
        start_with_plan(&c, "tight", 5, 1000, 1024, "memory_kept_max_mb = 200\n");
        _cleanup_free_ char *key = ctld_account_key(&c, "tight", "tight", NULL);
        static const char body[] = "{\"template\":\"busybox\",\"egress\":{\"mode\":\"deny_all\"}}";
        char a[25], b[25];
        ctld_create(&c, key, body, a);
        ctld_create(&c, key, body, b);
        ASSERT_STREQ(ctld_wait_status(&c, key, a, "ready", 60), "ready");
        ASSERT_STREQ(ctld_wait_status(&c, key, b, "ready", 60), "ready");
        /* 128 MB each: the first fits in 200, the second does not */
        sb_post(&c, key, a, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        sb_post(&c, key, b, "pause", "{\"keepMemory\":true}", 403, &r);
        ASSERT_NOT_NULL(strstr(hres_message(&r), "memory_kept_max_mb"));
        ASSERT_NOT_NULL(strstr(hres_message(&r), "128 MB are kept now"));
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, b, "ready", 5), "ready");
        /* the first resumed, its memory is no longer kept: the second fits */
        sb_post(&c, key, a, "resume", NULL, 200, &r);
        hres_done(&r);
        sb_post(&c, key, b, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        cJSON *sb = get_sandbox(&c, key, b);
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        cJSON_Delete(sb);
        ctld_stop(&c);
}

static char *exec_stdout(struct ctld *c, const char *key, const char *id, const char *cmd) {
        struct hres r;
        ctld_exec(c, key, id, cmd, 30, &r);
        if (r.status != 200)
                test_fail(__FILE__, __LINE__, "exec %s in %s -> %ld %s", cmd, id, r.status, r.body);
        char *out = xstrdup(hres_data_str(&r, "stdout") ? hres_data_str(&r, "stdout") : "");
        hres_done(&r);
        return out;
}

/* Fork (issue 37): two copies of a running sandbox, each its own sandbox of the account, see
 * the parent's processes (the same counter, continued), memory (/tmp, which gVisor keeps in
 * memory) and files, then diverge from it and from each other; the parent runs on with its
 * process. The plan counts the copies (a fork past max_concurrent says so for that copy);
 * another account's fork is a 404, a networked sandbox is refused by name, bad counts by
 * field. */
TEST_FULL(fork_copies_memory_and_files_then_they_diverge, 300) {
        struct ctld c = { 0 };
        struct hres r;
        start_with_plan(&c, "three", 3, 2000, 2048, "");
        _cleanup_free_ char *key = ctld_account_key(&c, "forker", "three", NULL);
        _cleanup_free_ char *other = ctld_account_key(&c, "other", NULL, NULL);
        char id[25];
        ctld_create(&c, key, PY_NO_NET, id);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        start_counter(&c, key, id);
        free(exec_stdout(&c, key, id, "echo parent > /root/mark; echo in-memory > /tmp/m"));
        long pid0, n0;
        read_counter(&c, key, id, &pid0, &n0);

        /* bad input by field; someone else's sandbox is not there */
        sb_post(&c, key, id, "fork", "{\"count\":0}", 400, &r);
        ASSERT_NOT_NULL(strstr(r.body, "count"));
        hres_done(&r);
        sb_post(&c, key, id, "fork", "{\"count\":2,\"cuont\":1}", 400, &r);
        ASSERT_NOT_NULL(strstr(r.body, "cuont"));
        hres_done(&r);
        sb_post(&c, other, id, "fork", "{}", 404, &r);
        hres_done(&r);

        /* three copies asked, the plan has room for two more sandboxes */
        sb_post(&c, key, id, "fork", "{\"count\":3,\"timeout\":600}", 201, &r);
        cJSON *arr = cJSON_GetObjectItem(r.json, "data");
        ASSERT_EQ(cJSON_GetArraySize(arr), 3);
        /* made at once: which copy finds the plan full is not fixed */
        char kid[2][25];
        int made = 0, refused = 0;
        for (int i = 0; i < 3; i++) {
                cJSON *s = cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "sandbox");
                cJSON *er = cJSON_GetObjectItem(cJSON_GetArrayItem(arr, i), "error");
                if (s && made < 2) {
                        snprintf(kid[made], sizeof(kid[made]), "%s", cJSON_GetStringValue(cJSON_GetObjectItem(s, "id")));
                        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(s, "status")), "ready");
                        ASSERT_NE(strcmp(kid[made], id), 0);
                        made++;
                } else if (er && strstr(cJSON_GetStringValue(cJSON_GetObjectItem(er, "message")), "up to 3 sandboxes"))
                        refused++;
        }
        if (made != 2 || refused != 1)
                test_fail(__FILE__, __LINE__, "want 2 copies and 1 refused by the plan: %s", r.body);
        ASSERT_NE(strcmp(kid[0], kid[1]), 0);
        hres_done(&r);

        for (int i = 0; i < 2; i++) {
                long pid, n;
                read_counter(&c, key, kid[i], &pid, &n);
                ASSERT_EQ(pid, pid0);   /* the same process, restored */
                ASSERT_GE(n, n0);       /* continued from where the parent was */
                _cleanup_free_ char *mark = exec_stdout(&c, key, kid[i], "cat /root/mark /tmp/m");
                ASSERT_STREQ(mark, "parent\nin-memory\n");
        }
        /* they diverge: each writes its own, the others keep theirs */
        free(exec_stdout(&c, key, kid[0], "echo child0 > /root/mark; echo c0 > /tmp/m"));
        free(exec_stdout(&c, key, kid[1], "kill $(cut -d' ' -f1 /tmp/c)"));
        {
                _cleanup_free_ char *p = exec_stdout(&c, key, id, "cat /root/mark /tmp/m");
                _cleanup_free_ char *k1 = exec_stdout(&c, key, kid[1], "cat /root/mark /tmp/m");
                _cleanup_free_ char *k0 = exec_stdout(&c, key, kid[0], "cat /root/mark /tmp/m");
                ASSERT_STREQ(p, "parent\nin-memory\n");
                ASSERT_STREQ(k1, "parent\nin-memory\n");
                ASSERT_STREQ(k0, "child0\nc0\n");
        }
        /* the parent's counter runs on (the child's kill did not reach it) */
        long pid2, n2, pid3, n3;
        read_counter(&c, key, id, &pid2, &n2);
        usleep(500000);
        read_counter(&c, key, id, &pid3, &n3);
        ASSERT_EQ(pid3, pid0);
        ASSERT_GE(n3, n2 + 1);
        /* the copies are the account's own sandboxes: destroyed as any */
        for (int i = 0; i < 2; i++) {
                _cleanup_free_ char *path = xasprintf("/sandboxes/%s", kid[i]);
                http_req(&c, "DELETE", path, key, NULL, &r);
                ASSERT_LE(r.status, 299);
                hres_done(&r);
                ASSERT_FALSE(docker_container_exists(container_name(kid[i])));
        }
        ctld_stop(&c);
}

TEST_FULL(fork_is_refused_for_networked_sandboxes, 120) {
        struct ctld c = { 0 };
        char id[25];
        struct hres r;
        _cleanup_free_ char *key = start_ready(&c, "netfork", "{\"template\":\"busybox\"}", id);
        sb_post(&c, key, id, "fork", "{}", 400, &r);
        ASSERT_NOT_NULL(strstr(hres_message(&r), "deny_all"));
        hres_done(&r);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 5), "ready");
        ctld_stop(&c);
}

/* What staging the forks of the controld with instance id inst (fk<its first 12>...) left
 * under Docker's data root: subvolumes paddock-fork-fk..., checkpoints fk...-fork. */
static int staging_left(const char *inst) {
        _cleanup_free_ char *cmd = xasprintf("r=$(docker info -f '{{.DockerRootDir}}'); "
                                             "ls \"$r/btrfs/subvolumes\" 2>/dev/null | grep -c '^paddock-fork-fk%.12s' ; "
                                             "ls -d \"$r\"/containers/*/checkpoints/fk%.12s*-fork 2>/dev/null | wc -l",
                                             inst, inst);
        char *argv[] = { "sh", "-c", cmd, NULL };
        _cleanup_free_ char *out = NULL;
        (void) test_run_capture(argv, &out, 4096);
        int a = 0, b = 0;
        (void) sscanf(out ? out : "", "%d %d", &a, &b);
        return a + b;
}

/* controld killed in the middle of a fork (the source restored, its copies staged, none made):
 * the source runs on with its process, no copy appears, and the restarted controld removes the
 * staging it left. */
TEST_FULL(fork_cut_short_by_a_crash_leaves_the_source_running_and_nothing_behind, 300) {
        struct ctld c = { 0 };
        char id[25];
        struct hres r;
        _cleanup_free_ char *key = start_counting(&c, "forkcrash", id);
        long pid0, n0, pid1, n1;
        read_counter(&c, key, id, &pid0, &n0);
        _cleanup_free_ char *inst = ctld_db_query(&c, "SELECT value FROM meta WHERE key = 'instance_id'");
        ASSERT_NOT_NULL(inst);
        ASSERT_GE(strlen(inst), 12);
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/fork", id);
        ctld_stop_daemon(&c);
        setenv("PADDOCK_FAULT", "fork.staged", 1);
        ctld_start_daemon(&c);
        unsetenv("PADDOCK_FAULT");
        http_req(&c, "POST", path, key, "{\"count\":1}", &r);
        ASSERT_LE(r.status, 0);   /* killed before it answered */
        hres_done(&r);
        ASSERT_GE(ctld_wait_exit(&c, 120), 0);
        ASSERT_EQ(staging_left(inst), 2);   /* the layer and the checkpoint, staged */
        ctld_start_daemon(&c);
        ASSERT_EQ(staging_left(inst), 0);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 30), "ready");
        read_counter(&c, key, id, &pid1, &n1);
        ASSERT_EQ(pid1, pid0);
        ASSERT_GE(n1, n0);
        _cleanup_free_ char *n = ctld_db_query(&c, "SELECT count(*) FROM sandboxes");
        ASSERT_STREQ(n, "1\n");
        ctld_stop(&c);
}

/* The plan's memory_kept_max_age: a sandbox paused with its memory longer than that loses the
 * memory (the checkpoint and the kept container go) and stays paused with its filesystem,
 * saying why; a resume then starts it afresh. */
TEST_FULL(kept_memory_is_dropped_past_the_plans_retention, 300) {
        struct ctld c = { 0 };
        struct hres r;
        start_with_plan(&c, "brief", 5, 1000, 1024, "memory_kept_max_age = 2s\n");
        _cleanup_free_ char *key = ctld_account_key(&c, "brief", "brief", NULL);
        char id[25];
        ctld_create(&c, key, "{\"template\":\"busybox\",\"egress\":{\"mode\":\"deny_all\"}}", id);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 60), "ready");
        free(exec_stdout(&c, key, id, "echo kept > /tmp/m"));
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        cJSON *sb = get_sandbox(&c, key, id);
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        cJSON_Delete(sb);
        bool dropped = false;
        for (int i = 0; i < 150 && !dropped; i++) {
                sb = get_sandbox(&c, key, id);
                dropped = !cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept"));
                if (dropped) {
                        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(sb, "status")), "paused");
                        const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(sb, "failure_reason"));
                        ASSERT_NOT_NULL(why);
                        ASSERT_NOT_NULL(strstr(why, "memory_kept_max_age"));
                }
                cJSON_Delete(sb);
                if (!dropped)
                        usleep(100000);
        }
        ASSERT_TRUE(dropped);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        sb_post(&c, key, id, "resume", NULL, 200, &r);
        hres_done(&r);
        _cleanup_free_ char *m = exec_stdout(&c, key, id, "cat /tmp/m 2>/dev/null || echo gone");
        ASSERT_STREQ(m, "gone\n");
        ctld_stop(&c);
}

/* controld killed in the middle of a pause with memory (checkpointed, not yet recorded paused)
 * and of its resume (restored, not yet recorded ready): after the restart the sandbox is paused
 * with its memory, then ready with the same process; never both, never neither. */
TEST_FULL(a_crash_mid_pause_or_resume_with_memory_keeps_the_process, 300) {
        struct ctld c = { 0 };
        char id[25];
        _cleanup_free_ char *key = start_counting(&c, "crashmem", id);
        long pid0, n0, pid1, n1;
        read_counter(&c, key, id, &pid0, &n0);
        _cleanup_free_ char *pause = xasprintf("/sandboxes/%s/pause", id), *resume = xasprintf("/sandboxes/%s/resume", id);
        ctld_crash_at(&c, "pause.memory.noted", "POST", pause, key, "{\"keepMemory\":true}", 0);
        cJSON *sb = get_sandbox(&c, key, id);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(sb, "status")), "paused");
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        cJSON_Delete(sb);
        ASSERT_FALSE(docker_container_running(container_name(id)));
        ctld_crash_at(&c, "resume.memory.restored", "POST", resume, key, NULL, 0);
        ASSERT_STREQ(ctld_wait_status(&c, key, id, "ready", 30), "ready");
        sb = get_sandbox(&c, key, id);
        ASSERT_FALSE(cJSON_IsTrue(cJSON_GetObjectItem(sb, "memory_kept")));
        cJSON_Delete(sb);
        read_counter(&c, key, id, &pid1, &n1);
        ASSERT_EQ(pid1, pid0);
        ASSERT_GE(n1, n0);
        /* and it pauses and resumes with its memory again */
        struct hres r;
        sb_post(&c, key, id, "pause", "{\"keepMemory\":true}", 200, &r);
        hres_done(&r);
        sb_post(&c, key, id, "resume", NULL, 200, &r);
        hres_done(&r);
        read_counter(&c, key, id, &pid1, &n1);
        ASSERT_EQ(pid1, pid0);
        ctld_stop(&c);
}
