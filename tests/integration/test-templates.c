/* Every template behaves like a small Debian machine under the real runtime (gVisor runsc):
 * the tools a user or an agent reaches for first work, with exit 0 and nothing on stderr
 * (runsc 20221219 failed `ls` and `stat` with "Invalid argument"; 20240729 printed "Bad file
 * descriptor" for each symlink `ls -l` showed). Each template gets a sandbox created through
 * the API and a battery of execs; language and agent templates add their own checks. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#include "apitest.h"
#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"

static const char *env_or(const char *k, const char *def) {
        const char *v = getenv(k);
        return v && *v ? v : def;
}

struct check { const char *cmd, *want; };

/* Works in every Debian-based template. */
static const struct check common_checks[] = {
        { "ls -la /", " etc\n" },
        { "ls -la / /bin /etc/os-release", "bin -> usr/bin" },
        { "stat /etc/passwd", "File: /etc/passwd" },
        { "find /etc -maxdepth 1 -name passwd", "/etc/passwd\n" },
        { "mkdir -p /root/t/a && echo hi > /root/t/a/f && ln -s f /root/t/a/l && cp -a /root/t /root/t2 && "
          "readlink /root/t2/a/l && cat /root/t2/a/f",
          "f\nhi\n" },
        { "cd /root && tar czf t.tgz t && gzip -t t.tgz && tar tzf t.tgz | sort | tail -n1", "t/a/l\n" },
        { "printf 'a 1\\nb 2\\n' | grep b | sed s/b/c/ | awk '{ print $1, $2 * 21 }'", "c 42\n" },
        /* PID 1 is the platform's agent (paddock-init), and ps sees it. */
        { "ps aux", "/.paddock/init --socket" },
        /* The inner shell reports "Terminated" on its stderr, as on any machine. */
        { "sh -c 'sleep 300 & p=$!; kill $p; wait $p; echo rc=$?' 2>/dev/null", "rc=143\n" },
        { "df -h /", "Filesystem" },
        { "ln -s /etc/hostname /root/hn && ls -l /root/hn", "/root/hn -> /etc/hostname\n" },
        { "touch /root/x && chmod 640 /root/x && stat -c %a /root/x", "640\n" },
        { "bash -c 'echo $((6 * 7)) ${BASH_VERSION%%.*}'", "42 5\n" },
        { "cd /root && mkdir r && cd r && git init -q && git config user.email t@example.org && "
          "git config user.name t && echo x > f && git add f && git commit -qm first && git log --format=%s",
          "first\n" },
        { "curl --version | head -n1 && test -s /etc/ssl/certs/ca-certificates.crt && echo certs", "certs\n" },
        { NULL, NULL },
};

static const struct check python_checks[] = {
        { "python3 --version", "Python 3.11." },
        { "python3 -m venv /root/v && /root/v/bin/python -c 'import sys; print(sys.prefix)' && /root/v/bin/pip --version",
          "/root/v\npip " },
        { NULL, NULL },
};

static const struct check python312_checks[] = {
        { "python3 --version", "Python 3.12." },
        { "python3 -m venv /root/v && /root/v/bin/python -c 'import sys; print(sys.prefix)' && /root/v/bin/pip --version",
          "/root/v\npip " },
        { ". /etc/os-release && echo $VERSION_ID", "24.04\n" },
        { NULL, NULL },
};

static const struct check node24_checks[] = {
        { "node --version", "v24." },
        { "node -e 'console.log(6 * 7, process.version.split(\".\")[0])'", "42 v24\n" },
        { "npm --version", "11." },
        { "cd /root && mkdir p && cd p && npm init -y >/dev/null && node -e 'console.log(require(\"./package.json\").name)'",
          "p\n" },
        { NULL, NULL },
};

static const struct check bun_checks[] = {
        { "bun --version", "1." },
        { "bun -e 'console.log(6 * 7)'", "42\n" },
        /* TypeScript as it is, and bunx under its own name. */
        { "printf 'const n: number = 40;\\nconsole.log(n + 2);\\n' > /root/a.ts && bun /root/a.ts && bunx --version", "42\n1." },
        { NULL, NULL },
};

static const struct check debian13_checks[] = {
        { ". /etc/os-release && echo $VERSION_ID $VERSION_CODENAME", "13 trixie\n" },
        { NULL, NULL },
};

static const struct check ubuntu24_checks[] = {
        { ". /etc/os-release && echo $VERSION_ID $VERSION_CODENAME", "24.04 noble\n" },
        { NULL, NULL },
};

/* dockerd is up when the sandbox is ready (the template's start). */
static const struct check docker_checks[] = {
        { "docker info --format '{{.ServerVersion}} {{.Driver}}'", "20.10" },
        { "docker version --format '{{.Client.Version}}'", "20.10" },
        { NULL, NULL },
};

static const struct check node_checks[] = {
        { "node -e 'console.log(6 * 7, process.version.split(\".\")[0])'", "42 v22\n" },
        { "npm --version", "10." },
        { NULL, NULL },
};

static const struct check claude_checks[] = {
        { "claude --version", "(Claude Code)" },
        { NULL, NULL },
};

static const struct check codex_checks[] = {
        { "codex --version", "codex-cli " },
        { NULL, NULL },
};

static void run_checks(struct ctld *c, const char *key, const char *id, const char *tmpl, const struct check *cs) {
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        for (const struct check *k = cs; k->cmd; k++) {
                _cleanup_json_ cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "cmd", k->cmd);
                cJSON_AddNumberToObject(o, "timeout_seconds", 120);
                _cleanup_free_ char *body = cJSON_PrintUnformatted(o);
                struct hres r;
                http_req(c, "POST", path, key, body, &r);
                if (r.status != 200)
                        test_fail(__FILE__, __LINE__, "%s: exec %s -> %ld %.400s", tmpl, k->cmd, r.status, r.body);
                const cJSON *d = cJSON_GetObjectItemCaseSensitive(r.json, "data");
                const cJSON *ec = cJSON_GetObjectItemCaseSensitive(d, "exit_code");
                const char *out = hres_data_str(&r, "stdout"), *err = hres_data_str(&r, "stderr");
                if (!cJSON_IsNumber(ec) || ec->valueint != 0 || !out || !strstr(out, k->want) || (err && *err))
                        test_fail(__FILE__, __LINE__, "%s: `%s` should exit 0, print \"%s\" and nothing on stderr; got %.900s",
                                  tmpl, k->cmd, k->want, r.body);
                hres_done(&r);
        }
}

/* The docker template as packaging/controld.conf.example has it. */
#define DOCKER_TEMPLATE_CONF                                                                                           \
        "start = /usr/local/lib/paddock/start-dockerd\ndisk = 2\nlanguage = Docker 20.10\n"                             \
        "tools = docker, dockerd, containerd, runc, git, curl\n"

/* An image built here: outside CI a missing one skips (images.sh leaves Ubuntu's out where its
 * archive does not answer); under CI that is a failure, as every skip. */
static void need_image(const char *image) {
        char *argv[] = { "docker", "image", "inspect", (char *) image, NULL };
        if (test_run_capture(argv, NULL, 1 << 20) != 0) {
                static char why[256];
                snprintf(why, sizeof(why), "image %s is not built (tests/env/images.sh says why)", image);
                TEST_SKIP(why);
        }
}

struct battery {
        const char *tmpl, *image_env, *image_def;
        const struct check *extra1, *extra2;
};

/* Every template, with the checks it adds to the common ones. */
static const struct battery batteries[] = {
        { "debian-12", "PADDOCK_BASE_IMAGE", "paddock/debian-12:local", NULL, NULL },
        { "python-3.11", "PADDOCK_PY_IMAGE", "paddock/python-3.11:local", python_checks, NULL },
        { "node-22", "PADDOCK_NODE22_IMAGE", "paddock/node-22:local", node_checks, NULL },
        { "claude-code", "PADDOCK_CLAUDE_IMAGE", "paddock/claude-code:local", node_checks, claude_checks },
        { "codex", "PADDOCK_CODEX_IMAGE", "paddock/codex:local", node_checks, codex_checks },
        { "debian-13", "PADDOCK_DEBIAN13_IMAGE", "paddock/debian-13:local", debian13_checks, NULL },
        { "ubuntu-24", "PADDOCK_UBUNTU24_IMAGE", "paddock/ubuntu-24:local", ubuntu24_checks, NULL },
        { "python-3.12", "PADDOCK_PY312_IMAGE", "paddock/python-3.12:local", python312_checks, NULL },
        { "node-24", "PADDOCK_NODE24_IMAGE", "paddock/node-24:local", node24_checks, NULL },
        { "bun-1", "PADDOCK_BUN_IMAGE", "paddock/bun-1:local", bun_checks, NULL },
        { "docker", "PADDOCK_DOCKER_IMAGE", "paddock/docker:local", docker_checks, NULL },
};

struct battery_run {
        struct ctld *c;
        const char *key;
        bool present[ELEMENTSOF(batteries)];
        atomic_size_t next;
};

/* One worker: takes the next template, creates its sandbox, runs its checks, destroys it. */
static void *battery_worker(void *p) {
        struct battery_run *br = p;
        for (size_t i; (i = atomic_fetch_add(&br->next, 1)) < ELEMENTSOF(batteries);) {
                const struct battery *b = &batteries[i];
                if (!br->present[i])
                        continue;
                char body[128], id[25], path[64];
                snprintf(body, sizeof(body), "{\"template\":\"%s\"}", b->tmpl);
                ctld_create(br->c, br->key, body, id);
                run_checks(br->c, br->key, id, b->tmpl, common_checks);
                if (b->extra1)
                        run_checks(br->c, br->key, id, b->tmpl, b->extra1);
                if (b->extra2)
                        run_checks(br->c, br->key, id, b->tmpl, b->extra2);
                snprintf(path, sizeof(path), "/sandboxes/%s", id);
                HTTP_EXPECT(br->c, "DELETE", path, br->key, NULL, 204);
        }
        return NULL;
}

/* Every template through the API, two at a time (a sandbox each, one controld). An image that
 * is not built is said at the end: a skip, which under CI fails. */
TEST_FULL(every_template_passes_its_battery, 900) {
        need_docker();
        static struct ctld c;
        static struct battery_run br;
        struct strbuf conf = STRBUF_INIT(0), missing = STRBUF_INIT(0);
        strbuf_printf(&conf, "[plan \"wide\"]\nmax_concurrent = 12\nregions = local\nmax_cpu = 1000\nmax_memory = 2048\nmax_disk = 5\n");
        for (size_t i = 0; i < ELEMENTSOF(batteries); i++) {
                const struct battery *b = &batteries[i];
                const char *image = env_or(b->image_env, b->image_def);
                char *argv[] = { "docker", "image", "inspect", (char *) image, NULL };
                br.present[i] = test_run_capture(argv, NULL, 1 << 20) == 0;
                if (!br.present[i])
                        strbuf_printf(&missing, "%s%s", missing.len ? ", " : "", image);
                /* python-3.11 is part of ctltest's base config. */
                if (strcmp(b->tmpl, "python-3.11"))
                        strbuf_printf(&conf, "[template \"%s\"]\nimage = %s\nmemory = 1024\n%s", b->tmpl, image,
                                      strcmp(b->tmpl, "docker") ? "" : DOCKER_TEMPLATE_CONF);
        }
        ctld_start(&c, NULL, conf.buf);
        _cleanup_free_ char *key = ctld_account_key(&c, "tess", "wide", NULL);
        br.c = &c;
        br.key = key;
        pthread_t t;
        ASSERT_EQ(pthread_create(&t, NULL, battery_worker, &br), 0);
        battery_worker(&br);
        ASSERT_EQ(pthread_join(t, NULL), 0);
        ctld_stop(&c);
        strbuf_done(&conf);
        if (missing.len) {
                static char why[512];
                snprintf(why, sizeof(why), "not built here, so not tested: %s (tests/env/images.sh says why)", missing.buf);
                TEST_SKIP(why);
        }
        strbuf_done(&missing);
}

/* ---- Docker inside a sandbox */

static char *slurp(const char *path, size_t *ret_len) {
        FILE *f = fopen(path, "rb");
        if (!f)
                test_fail(__FILE__, __LINE__, "cannot open %s", path);
        size_t cap = 1 << 20, len = 0;
        char *buf = xmalloc(cap);
        size_t k;
        while ((k = fread(buf + len, 1, cap - len, f)) > 0) {
                len += k;
                if (len == cap)
                        buf = xrealloc(buf, cap *= 2);
        }
        fclose(f);
        *ret_len = len;
        return buf;
}

static void put_file_at(struct ctld *c, const char *key, const char *id, const char *path, const void *data, size_t len) {
        char url[256], hk[160];
        snprintf(url, sizeof(url), "/sandboxes/%s/files%s", id, path);
        snprintf(hk, sizeof(hk), "x-brimble-key: %s", key);
        const char *const headers[] = { hk, "content-type: application/octet-stream", NULL };
        struct hres r;
        http_req_full(c, "PUT", url, headers, data, len, &r);
        if (r.status != 204)
                test_fail(__FILE__, __LINE__, "PUT %s -> %ld %.300s", url, r.status, r.body);
        hres_done(&r);
}

/* stdout of cmd in the sandbox, which must exit 0. */
static char *sandbox_sh(struct ctld *c, const char *key, const char *id, const char *cmd) {
        struct hres r;
        ctld_exec(c, key, id, cmd, 120, &r);
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "exit_code");
        if (r.status != 200 || !cJSON_IsNumber(ec) || ec->valueint != 0)
                test_fail(__FILE__, __LINE__, "`%s` -> %ld %.1500s", cmd, r.status, r.body);
        char *out = xstrdup(hres_data_str(&r, "stdout") ?: "");
        hres_done(&r);
        return out;
}

static int host_containers(void) {
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "docker", "ps", "-aq", NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 1 << 20), 0);
        int n = 0;
        for (char *p = out; p && *p; p++)
                n += *p == '\n';
        return n;
}

/* A user builds an image FROM scratch with a static binary, loads another one from a tar
 * (`docker save` output: no registry pull), and runs both, all inside the sandbox: the host's
 * Docker sees one new container (the sandbox) and no new image, and destroy leaves nothing. */
TEST_FULL(docker_builds_and_runs_inside_the_sandbox, 300) {
        need_docker();
        const char *image = env_or("PADDOCK_DOCKER_IMAGE", "paddock/docker:local");
        need_image(image);
        char tconf[768], id[25], tar[512];
        snprintf(tconf, sizeof(tconf), "[template \"docker\"]\nimage = %s\nmemory = 1024\n" DOCKER_TEMPLATE_CONF, image);
        struct ctld c;
        ctld_start(&c, NULL, tconf);
        _cleanup_free_ char *key = ctld_account_key(&c, "dora", NULL, NULL);
        snprintf(tar, sizeof(tar), "%s/busybox-image.tar", test_tmpdir());
        char *save[] = { "docker", "save", "-o", tar, (char *) env_or("PADDOCK_TEST_IMAGE", "paddock/busybox:local"), NULL };
        ASSERT_EQ(test_run_capture(save, NULL, 1 << 16), 0);
        int before = host_containers();

        ctld_create(&c, key, "{\"template\":\"docker\"}", id);
        ASSERT_EQ(host_containers(), before + 1);

        /* FROM scratch: the host's static busybox and a Dockerfile, uploaded through the API. */
        free(sandbox_sh(&c, key, id, "mkdir /root/ctx"));
        size_t blen, tlen;
        _cleanup_free_ char *bb = slurp("/bin/busybox", &blen);
        put_file_at(&c, key, id, "/root/ctx/busybox", bb, blen);
        static const char dockerfile[] = "FROM scratch\nCOPY busybox /bin/busybox\n"
                                         "RUN [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox echo built > /built\"]\n"
                                         "ENTRYPOINT [\"/bin/busybox\"]\nCMD [\"echo\", \"hello from scratch\"]\n";
        put_file_at(&c, key, id, "/root/ctx/Dockerfile", dockerfile, sizeof(dockerfile) - 1);
        _cleanup_free_ char *built = sandbox_sh(&c, key, id,
                "cd /root/ctx && chmod 0755 busybox && docker build -q -t hello:1 . >/dev/null 2>&1 && "
                "docker run --rm hello:1 && docker run --rm hello:1 sh -c 'echo $((6 * 7)); cat /built'");
        /* typed as a user types it (no --network: there is no bridge inside; the CLI says so once) */
        ASSERT_STREQ(built, "hello from scratch\n42\nbuilt\n");
        _cleanup_free_ char *said = sandbox_sh(&c, key, id, "rm -f /run/paddock-docker-host-network; docker run --rm hello:1 2>&1 >/dev/null");
        ASSERT_TRUE(strstr(said, "--network=host") != NULL);

        /* docker load of an image brought in as a file. */
        _cleanup_free_ char *img = slurp(tar, &tlen);
        put_file_at(&c, key, id, "/root/image.tar", img, tlen);
        _cleanup_free_ char *loaded = sandbox_sh(&c, key, id,
                "docker load -i /root/image.tar >/dev/null && docker run --name inner "
                "paddock/busybox:local sh -c 'echo loaded uid=$(id -u)' && docker ps -a --format '{{.Names}} {{.Status}}'");
        ASSERT_TRUE(strstr(loaded, "loaded uid=0\n") != NULL);
        ASSERT_TRUE(strstr(loaded, "inner Exited (0)") != NULL);
        _cleanup_free_ char *images = sandbox_sh(&c, key, id, "docker images --format '{{.Repository}}:{{.Tag}}' | sort");
        ASSERT_STREQ(images, "hello:1\npaddock/busybox:local\n");

        /* Inner images and containers live within the sandbox's disk cap (specs.disk = 2 GB). */
        _cleanup_free_ char *cap = sandbox_sh(&c, key, id, "df -k --output=size /var/lib/docker | tail -n1 | tr -d ' '");
        ASSERT_STREQ(cap, "2097152\n");

        /* None of it on the host: one container (the sandbox), no hello image. */
        ASSERT_EQ(host_containers(), before + 1);
        char *inspect[] = { "docker", "image", "inspect", "hello:1", NULL };
        ASSERT_TRUE(test_run_capture(inspect, NULL, 1 << 16) != 0);

        char path[64];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        for (int i = 0; i < 300 && host_containers() != before; i++)
                usleep(100 * 1000);
        ASSERT_EQ(host_containers(), before);
        ctld_stop(&c);
}

/* ---- Templates users build */

static const char *metric_count(struct ctld *c, const char *phase, char *out, size_t n) {
        struct hres r;
        http_req(c, "GET", "/metrics", NULL, NULL, &r);
        char want[128];
        snprintf(want, sizeof(want), "paddock_provision_phase_seconds_count{phase=\"%s\"} ", phase);
        const char *p = r.body ? strstr(r.body, want) : NULL;
        snprintf(out, n, "%s", p ? p + strlen(want) : "0");
        out[strcspn(out, "\n")] = 0;
        hres_done(&r);
        return out;
}

/* POST /templates answers status with a message naming want. */
static void build_refused(struct ctld *c, const char *key, const char *body, long status, const char *want) {
        struct hres r;
        http_req(c, "POST", "/templates", key, body, &r);
        if (r.status != status || !hres_message(&r) || !strstr(hres_message(&r), want))
                test_fail(__FILE__, __LINE__, "POST /templates %.200s: want %ld \"%s\", got %ld %.300s", body, status, want, r.status,
                          r.body);
        hres_done(&r);
}

static void registry_manifest(const char *image, long want) {
        /* image = 127.0.0.1:5000/<repo>@sha256:...: GET it from the registry as a pull would. */
        const char *slash = strchr(image, '/'), *at = strchr(image, '@');
        ASSERT_TRUE(slash && at);
        char url[512];
        snprintf(url, sizeof(url), "http://%.*s/v2/%.*s/manifests/%s", (int) (slash - image), image, (int) (at - slash - 1),
                 slash + 1, at + 1);
        char *argv[] = { "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H",
                         "Accept: application/vnd.docker.distribution.manifest.v2+json", url, NULL };
        _cleanup_free_ char *out = NULL;
        ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
        if (atol(out) != want)
                test_fail(__FILE__, __LINE__, "GET %s: %s, want %ld", url, out, want);
}

static char *inspect(const char *what, const char *fmt);

/* The config blob of image (127.0.0.1:5000/<repo>@sha256:...) as a node's pull reads it. */
static char *registry_config(const char *image) {
        const char *slash = strchr(image, '/'), *at = strchr(image, '@');
        ASSERT_TRUE(slash && at);
        char url[512];
        snprintf(url, sizeof(url), "http://%.*s/v2/%.*s/manifests/%s", (int) (slash - image), image, (int) (at - slash - 1),
                 slash + 1, at + 1);
        char *man[] = { "curl", "-sf", "-H", "Accept: application/vnd.docker.distribution.manifest.v2+json", url, NULL };
        _cleanup_free_ char *m = NULL;
        ASSERT_EQ(test_run_capture(man, &m, 1 << 20), 0);
        _cleanup_(cJSON_Deletep) cJSON *mj = cJSON_Parse(m);
        const char *digest = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(mj, "config"), "digest"));
        ASSERT_NOT_NULL(digest);
        snprintf(url, sizeof(url), "http://%.*s/v2/%.*s/blobs/%s", (int) (slash - image), image, (int) (at - slash - 1),
                 slash + 1, digest);
        char *blob[] = { "curl", "-sf", url, NULL };
        char *out = NULL;
        ASSERT_EQ(test_run_capture(blob, &out, 1 << 20), 0);
        return out;
}

/* A user builds a template from a Dockerfile (FROM scratch, a static binary from `files`), in
 * a docker sandbox of their account; uses it; another account cannot see or use it; a pull
 * that fails is a 503 with nothing left; DELETE removes it from the registry. */
TEST_FULL(a_user_builds_a_template_only_their_account_uses, 600) {
        need_docker();
        const char *image = env_or("PADDOCK_DOCKER_IMAGE", "paddock/docker:local");
        need_image(image);
        char tconf[768], id[25], id2[25], path[128], n1[32], n2[32];
        snprintf(tconf, sizeof(tconf), "[template \"docker\"]\nimage = %s\nmemory = 1024\n" DOCKER_TEMPLATE_CONF
                 "[templates]\nbuild_timeout = 300s\nmax_per_account = 2\nmax_context = 3M\nrepository = paddock/tt-%d\n", image, (int) getpid());
        struct ctld c;
        ctld_start(&c, NULL, tconf);
        _cleanup_free_ char *key = ctld_account_key(&c, "builder", NULL, NULL);
        _cleanup_free_ char *other = ctld_account_key(&c, "other", NULL, NULL);

        /* Bad input names the field at fault; nothing is built. */
        build_refused(&c, key, "{}", 400, "name:");
        build_refused(&c, key, "{\"name\":\"Hello\",\"dockerfile\":\"FROM scratch\"}", 400, "name:");
        build_refused(&c, key, "{\"name\":\"python-3.11\",\"dockerfile\":\"FROM scratch\"}", 400, "is a template of this server");
        build_refused(&c, key, "{\"name\":\"x\"}", 400, "dockerfile:");
        build_refused(&c, key, "{\"name\":\"x\",\"dockerfile\":\"FROM scratch\",\"files\":[{\"path\":\"../etc\",\"content\":\"\"}]}", 400,
                      "files[0].path");
        build_refused(&c, key, "{\"name\":\"x\",\"dockerfile\":\"FROM scratch\",\"files\":[{\"path\":\"a\",\"content\":\"!\","
                               "\"encoding\":\"base64\"}]}", 400, "files[0].content");
        build_refused(&c, key, "{\"name\":\"x\",\"dockerfile\":\"FROM scratch\",\"extra\":1}", 400, "Unknown field 'extra'");

        /* The build: busybox as /bin/busybox and /bin/sh (execs run /bin/sh -c). */
        size_t blen;
        _cleanup_free_ char *bb = slurp("/bin/busybox", &blen);
        _cleanup_free_ char *b64 = base64_encode(bb, blen, NULL);
        _cleanup_(cJSON_Deletep) cJSON *req = cJSON_CreateObject();
        cJSON_AddStringToObject(req, "name", "hello");
        /* What the host would act on (a volume, a check every millisecond, ...) is not kept. */
        cJSON_AddStringToObject(req, "dockerfile", "FROM scratch\nCOPY bin/busybox /bin/busybox\nCOPY bin/busybox /bin/sh\n"
                                                   "ENV GREETING=built\nCMD [\"/bin/sh\"]\nVOLUME /data\n"
                                                   "HEALTHCHECK --interval=1ms CMD [\"/bin/busybox\", \"true\"]\nEXPOSE 8080\n"
                                                   "STOPSIGNAL SIGUSR1\nLABEL paddock.sandbox=000000000000000000000000 keep=yes\n");
        cJSON *files = cJSON_AddArrayToObject(req, "files");
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "path", "bin/busybox");
        cJSON_AddStringToObject(f, "content", b64);
        cJSON_AddStringToObject(f, "encoding", "base64");
        cJSON_AddNumberToObject(f, "mode", 0755);
        cJSON_AddItemToArray(files, f);
        _cleanup_free_ char *body = cJSON_PrintUnformatted(req);
        struct hres r;
        http_req(&c, "POST", "/templates", key, body, &r);
        ASSERT_ENVELOPE(&r, 202, "Template build started");
        ASSERT_STREQ(hres_data_str(&r, "status"), "building");
        hres_done(&r);
        build_refused(&c, key, body, 409, "you have a template named 'hello'");

        /* Until it is ready: its status and log as it goes. */
        _cleanup_free_ char *img = NULL;
        for (int i = 0; i < 600; i++) {
                http_req(&c, "GET", "/templates/hello", key, NULL, &r);
                ASSERT_EQ(r.status, 200);
                const char *st = hres_data_str(&r, "status");
                if (st && strcmp(st, "building")) {
                        if (strcmp(st, "ready"))
                                test_fail(__FILE__, __LINE__, "the build ended %s: %.3000s", st, r.body);
                        ASSERT_CONTAINS(hres_data_str(&r, "log"), "Step 2/10 : COPY bin/busybox /bin/busybox");
                        ASSERT_CONTAINS(hres_data_str(&r, "log"), "not kept in the template's image (the host would act on it, "
                                                                  "outside the sandbox): VOLUME /data, HEALTHCHECK, EXPOSE, "
                                                                  "STOPSIGNAL, LABEL paddock.sandbox");
                        const cJSON *size = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "size_mb");
                        ASSERT_TRUE(cJSON_IsNumber(size) && size->valuedouble >= 1);
                        hres_done(&r);
                        break;
                }
                hres_done(&r);
                ASSERT_TRUE(i < 599);
                usleep(500 * 1000);
        }
        /* The build sandbox is gone: the account has no sandbox left. */
        http_req(&c, "GET", "/sandboxes", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_TRUE(strstr(r.body, "template-build-hello") == NULL || strstr(r.body, "\"destroyed\"") != NULL);
        hres_done(&r);
        _cleanup_free_ char *row = ctld_db_query(&c, "SELECT image FROM user_templates WHERE name = 'hello'");
        img = xstrdup(row);
        img[strcspn(img, "\n")] = 0;
        registry_manifest(img, 200);
        {
                /* The image's config as the registry serves it to nodes: normalised. */
                _cleanup_free_ char *text = registry_config(img);
                _cleanup_(cJSON_Deletep) cJSON *cj = cJSON_Parse(text);
                const cJSON *cfg = cJSON_GetObjectItem(cj, "config");
                _cleanup_free_ char *env = cJSON_PrintUnformatted(cJSON_GetObjectItem(cfg, "Env"));
                ASSERT_CONTAINS(env, "GREETING=built");
                const cJSON *labels = cJSON_GetObjectItem(cfg, "Labels");
                ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItem(labels, "keep")), "yes");
                ASSERT_TRUE(cJSON_GetObjectItem(labels, "paddock.sandbox") == NULL);
                const char *gone[] = { "Volumes", "Healthcheck", "ExposedPorts", "StopSignal", NULL };
                for (const char **g = gone; *g; g++)
                        if (cJSON_GetObjectItem(cfg, *g))
                                test_fail(__FILE__, __LINE__, "the pushed config keeps %s: %.2000s", *g, text);
        }

        /* Another account: not found, not listed, not usable. */
        HTTP_EXPECT(&c, "GET", "/templates/hello", other, NULL, 404);
        HTTP_EXPECT(&c, "DELETE", "/templates/hello", other, NULL, 404);
        http_req(&c, "GET", "/templates", other, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r.json, "data")), 0);
        hres_done(&r);
        http_req(&c, "POST", "/sandboxes", other, "{\"template\":\"hello\"}", &r);
        ASSERT_EQ(r.status, 400);
        ASSERT_CONTAINS(hres_message(&r), "Unknown template 'hello'");
        hres_done(&r);

        /* Its account: the first create pulls the image to the node, the second uses the copy. */
        ASSERT_STREQ(metric_count(&c, "template_pull", n1, sizeof(n1)), "0");
        int base = host_containers();
        ctld_create(&c, key, "{\"template\":\"hello\"}", id);
        ASSERT_STREQ(metric_count(&c, "template_pull", n1, sizeof(n1)), "1");
        _cleanup_free_ char *out = sandbox_sh(&c, key, id, "busybox echo $GREETING by $((6 * 7))");
        ASSERT_STREQ(out, "built by 42\n");
        {
                _cleanup_free_ char *mounts = inspect(container_name(id), "{{range .Mounts}}{{.Type}} {{.Destination}}\n{{end}}");
                ASSERT_NOT_NULL(mounts);
                ASSERT_TRUE(strstr(mounts, "/data") == NULL);
                _cleanup_free_ char *hc = inspect(container_name(id), "{{json .Config.Healthcheck}}");
                ASSERT_CONTAINS(hc, "\"Test\":[\"NONE\"]");
        }
        ctld_create(&c, key, "{\"template\":\"hello\"}", id2);
        ASSERT_STREQ(metric_count(&c, "template_pull", n2, sizeof(n2)), "1");
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        snprintf(path, sizeof(path), "/sandboxes/%s", id2);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        http_req(&c, "GET", "/templates", key, NULL, &r);
        ASSERT_EQ(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r.json, "data")), 1);
        hres_done(&r);

        /* A template whose image the registry lost (a digest it never had): the pull fails, a
         * 503 with the reason, and no container is left. */
        for (int i = 0; i < 300 && host_containers() != base; i++)
                usleep(100 * 1000);     /* the destroyed sandboxes' containers go */
        ASSERT_EQ(host_containers(), base);
        {
                char sql[600], lost[400];
                snprintf(lost, sizeof(lost), "%.*s@sha256:%064d", (int) (strchr(img, '@') - img), img, 0);
                snprintf(sql, sizeof(sql), "UPDATE user_templates SET image = '%s' WHERE name = 'hello'", lost);
                free(ctld_db_query(&c, sql));
        }
        http_req(&c, "POST", "/sandboxes", key, "{\"template\":\"hello\"}", &r);
        ASSERT_EQ(r.status, 503);
        ASSERT_CONTAINS(hres_message(&r), "cannot pull the template image");
        hres_done(&r);
        ASSERT_EQ(host_containers(), base);
        {
                char sql[600];
                snprintf(sql, sizeof(sql), "UPDATE user_templates SET image = '%s' WHERE name = 'hello'", img);
                free(ctld_db_query(&c, sql));
        }

        /* Limits: the context's size (before anything starts), and a failed build (no image
         * to start FROM: nothing is pulled here) keeps its log and counts against the
         * account's templates until deleted. */
        {
                _cleanup_free_ char *big = xmalloc(4 << 20);
                memset(big, 'a', 4 << 20);
                big[(4 << 20) - 1] = 0;
                _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
                cJSON_AddStringToObject(o, "name", "big");
                cJSON_AddStringToObject(o, "dockerfile", "FROM scratch\nCOPY f /f\n");
                cJSON *fs = cJSON_AddArrayToObject(o, "files"), *one = cJSON_CreateObject();
                cJSON_AddStringToObject(one, "path", "f");
                cJSON_AddStringToObject(one, "content", big);
                cJSON_AddItemToArray(fs, one);
                _cleanup_free_ char *text = cJSON_PrintUnformatted(o);
                build_refused(&c, key, text, 413, "files: the build context is over its limit");
        }
        http_req(&c, "POST", "/templates", key, "{\"name\":\"nobase\",\"dockerfile\":\"FROM paddock-no-such-image:1\\n\"}", &r);
        ASSERT_EQ(r.status, 202);
        hres_done(&r);
        build_refused(&c, key, "{\"name\":\"third\",\"dockerfile\":\"FROM scratch\"}", 403, "You have 2 templates");
        for (int i = 0;; i++) {
                http_req(&c, "GET", "/templates/nobase", key, NULL, &r);
                ASSERT_EQ(r.status, 200);
                if (strcmp(hres_data_str(&r, "status"), "building")) {
                        ASSERT_STREQ(hres_data_str(&r, "status"), "failed");
                        ASSERT_CONTAINS(hres_data_str(&r, "error"), "docker build exited with code 1");
                        ASSERT_CONTAINS(hres_data_str(&r, "log"), "paddock-no-such-image");
                        hres_done(&r);
                        break;
                }
                hres_done(&r);
                ASSERT_TRUE(i < 600);
                usleep(500 * 1000);
        }
        HTTP_EXPECT(&c, "DELETE", "/templates/nobase", key, NULL, 204);

        /* DELETE: gone from the registry and for its account too. */
        HTTP_EXPECT(&c, "DELETE", "/templates/hello", key, NULL, 204);
        registry_manifest(img, 404);
        HTTP_EXPECT(&c, "GET", "/templates/hello", key, NULL, 404);
        http_req(&c, "POST", "/sandboxes", key, "{\"template\":\"hello\"}", &r);
        ASSERT_EQ(r.status, 400);
        hres_done(&r);
        ctld_stop(&c);
}

/* A build past [templates] build_timeout fails saying so, and its sandbox goes. */
TEST_FULL(a_build_past_its_time_limit_fails_and_leaves_nothing, 300) {
        need_docker();
        const char *image = env_or("PADDOCK_DOCKER_IMAGE", "paddock/docker:local");
        need_image(image);
        char tconf[768];
        snprintf(tconf, sizeof(tconf), "[template \"docker\"]\nimage = %s\nmemory = 1024\n" DOCKER_TEMPLATE_CONF
                 "[templates]\nbuild_timeout = 5s\nrepository = paddock/tt-%d\n", image, (int) getpid());
        struct ctld c;
        ctld_start(&c, NULL, tconf);
        _cleanup_free_ char *key = ctld_account_key(&c, "slow", NULL, NULL);
        int before = host_containers();
        /* Starting the build sandbox (dockerd) and forty layers take well over five seconds. */
        struct strbuf df = STRBUF_INIT(0);
        strbuf_printf(&df, "FROM scratch\n");
        for (int i = 0; i < 40; i++)
                strbuf_printf(&df, "COPY f /f%d\n", i);
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", "slow");
        cJSON_AddStringToObject(o, "dockerfile", df.buf);
        cJSON *fs = cJSON_AddArrayToObject(o, "files"), *one = cJSON_CreateObject();
        cJSON_AddStringToObject(one, "path", "f");
        cJSON_AddStringToObject(one, "content", "data\n");
        cJSON_AddItemToArray(fs, one);
        strbuf_done(&df);
        _cleanup_free_ char *body = cJSON_PrintUnformatted(o);
        struct hres r;
        http_req(&c, "POST", "/templates", key, body, &r);
        ASSERT_EQ(r.status, 202);
        hres_done(&r);
        for (int i = 0;; i++) {
                http_req(&c, "GET", "/templates/slow", key, NULL, &r);
                ASSERT_EQ(r.status, 200);
                if (strcmp(hres_data_str(&r, "status"), "building")) {
                        ASSERT_STREQ(hres_data_str(&r, "status"), "failed");
                        ASSERT_CONTAINS(hres_data_str(&r, "error"), "the build took longer than 5s ([templates] build_timeout)");
                        hres_done(&r);
                        break;
                }
                hres_done(&r);
                ASSERT_TRUE(i < 240);
                usleep(500 * 1000);
        }
        for (int i = 0; i < 300 && host_containers() != before; i++)
                usleep(100 * 1000);
        ASSERT_EQ(host_containers(), before);
        ctld_stop(&c);
}

/* ---- What an image's config says that the host would act on */

/* docker inspect -f fmt of a container, image or volume; NULL when it does not exist. */
static char *inspect(const char *what, const char *fmt) {
        char *argv[] = { "docker", "inspect", "-f", (char *) fmt, (char *) what, NULL };
        char *out = NULL;
        if (test_run_capture(argv, &out, 1 << 20) != 0) {
                free(out);
                return NULL;
        }
        return out ? out : xstrdup("");
}

/* An image like a template pushed before pushed images were normalised: the test image with
 * VOLUME /data and a HEALTHCHECK every millisecond in its config, built on the host and pushed
 * to the registry as <repo>:1. Its reference by digest. */
static char *image_with_volume_and_healthcheck(const char *repo) {
        char dir[512], df[600], tag[400];
        snprintf(dir, sizeof(dir), "%s/volimg", test_tmpdir());
        snprintf(df, sizeof(df), "%s/Dockerfile", dir);
        ASSERT_EQ(mkdir(dir, 0755) == 0 || errno == EEXIST, 1);
        FILE *f = fopen(df, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "FROM %s\nVOLUME /data\nHEALTHCHECK --interval=1ms --timeout=1s --retries=1 CMD true\n",
                env_or("PADDOCK_TEST_IMAGE", "paddock/busybox:local"));
        fclose(f);
        snprintf(tag, sizeof(tag), "127.0.0.1:5000/%s:1", repo);
        char *build[] = { "env", "DOCKER_BUILDKIT=0", "docker", "build", "-q", "-t", tag, dir, NULL };
        ASSERT_EQ(test_run_capture(build, NULL, 1 << 16), 0);
        char *push[] = { "docker", "push", tag, NULL };
        ASSERT_EQ(test_run_capture(push, NULL, 1 << 20), 0);
        char *ref = inspect(tag, "{{index .RepoDigests 0}}");
        ASSERT_NOT_NULL(ref);
        ref[strcspn(ref, "\n")] = 0;
        ASSERT_CONTAINS(ref, "@sha256:");
        /* The node pulls it from the registry, as it would a template's. */
        char *rmi[] = { "docker", "rmi", "-f", tag, NULL };
        ASSERT_EQ(test_run_capture(rmi, NULL, 1 << 16), 0);
        return ref;
}

/* A template with VOLUME /data and a 1 ms HEALTHCHECK in its image (one pushed before pushed
 * images were normalised; its snapshots inherit both): the host makes no volume for the sandbox
 * (/data is a tmpfs in the sandbox's memory), runs no check, and the remove leaves no volume. */
static void volume_and_healthcheck_not_obeyed(bool nomad) {
        need_docker();
        if (nomad) {
                setenv("PADDOCK_DRIVER", "nomad", 1);
                setenv("PADDOCK_NOMAD_RELAY", "1", 1);
        }
        char tconf[256], acc[25], tid[25], id[25], repo[200], sql[1024], path[64];
        snprintf(tconf, sizeof(tconf), "[templates]\nrepository = paddock/tv-%d\n", (int) getpid());
        struct ctld c;
        ctld_start(&c, NULL, tconf);
        _cleanup_free_ char *key = ctld_account_key(&c, "vol", NULL, acc);
        snprintf(repo, sizeof(repo), "paddock/tv-%d/%s-legacy", (int) getpid(), acc);
        _cleanup_free_ char *img = image_with_volume_and_healthcheck(repo);
        hexid_new(tid);
        snprintf(sql, sizeof(sql), "INSERT INTO user_templates (id, account_id, name, status, image, size_bytes, log, created_at, "
                 "finished_at) VALUES ('%s', '%s', 'legacy', 'ready', '%s', 1000000, '', 1, 1)", tid, acc, img);
        free(ctld_db_query(&c, sql));

        ctld_create(&c, key, "{\"template\":\"legacy\"}", id);
        const char *name = container_name(id);
        _cleanup_free_ char *mounts = inspect(name, "{{range .Mounts}}{{.Type}} {{.Destination}} {{.Name}}\n{{end}}");
        ASSERT_NOT_NULL(mounts);
        /* No Docker volume at /data (an anonymous one lives under the node's data root, outside
         * the disk cap, and was left behind by every remove): a tmpfs. */
        ASSERT_TRUE(strstr(mounts, "volume /data") == NULL);
        _cleanup_free_ char *tmpfs = inspect(name, "{{range .HostConfig.Mounts}}{{.Type}} {{.Target}}\n{{end}}");
        ASSERT_CONTAINS(tmpfs, "tmpfs /data\n");
        _cleanup_free_ char *data = sandbox_sh(&c, key, id, "echo kept > /data/f && cat /data/f");
        ASSERT_STREQ(data, "kept\n");
        /* No check: the container's healthcheck is NONE and, a while later, it has no health state. */
        _cleanup_free_ char *hc = inspect(name, "{{json .Config.Healthcheck}}");
        ASSERT_CONTAINS(hc, "\"Test\":[\"NONE\"]");
        usleep(500 * 1000);
        _cleanup_free_ char *health = inspect(name, "{{if .State.Health}}{{.State.Health.Status}} {{len .State.Health.Log}}{{else}}none{{end}}");
        ASSERT_STREQ(health, "none\n");
        /* The volumes the container had: none anonymous (64 hex digits), and after the remove
         * none of them is left but the agent's socket volume, which the node agent's prune takes. */
        int anonymous = 0;
        char *save = NULL;
        _cleanup_free_ char *m = xstrdup(mounts);
        for (char *l = strtok_r(m, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
                const char *vname = strrchr(l, ' ');
                anonymous += startswith(l, "volume ") && vname && strlen(vname + 1) == 64;
        }
        ASSERT_EQ(anonymous, 0);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        for (int i = 0; i < 300 && docker_container_exists(name); i++)
                usleep(100 * 1000);
        ASSERT_FALSE(docker_container_exists(name));
        ctld_stop(&c);
        char *rmi[] = { "docker", "rmi", "-f", img, NULL };
        (void) test_run_capture(rmi, NULL, 1 << 16);
}

TEST_FULL(an_image_volume_and_healthcheck_are_not_obeyed_by_the_host, 300) {
        volume_and_healthcheck_not_obeyed(false);
}

TEST_FULL(an_image_volume_and_healthcheck_are_not_obeyed_by_the_host_nomad, 300) {
        volume_and_healthcheck_not_obeyed(true);
}
