/* ctltest.c — see ctltest.h. */
#include <curl/curl.h>
#include <errno.h>
#include <ftw.h>
#include <pwd.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"
#include "tlstest.h"

/* Whether a user who is neither owner nor group of its directories can reach path (every
 * directory on the way lets others through): a tree under /root (0700) does not. */
static bool reachable_by_others(const char *path) {
        char buf[PATH_MAX];
        if (!realpath(path, buf))
                return false;
        for (char *s = buf + 1;; s++) {
                if (*s && *s != '/')
                        continue;
                char c = *s;
                *s = 0;
                struct stat st;
                bool dir = stat(buf, &st) == 0 && S_ISDIR(st.st_mode);
                if (dir && !(st.st_mode & S_IXOTH))
                        return false;
                if (!c)
                        return true;
                *s = c;
        }
}

const char *ctld_run_user(void) {
        const char *u = getenv("PADDOCK_CTLD_USER");
        if (u)
                return u;
        if (geteuid() != 0)
                return "";
        /* nobody must reach the build tree (the terminal page, the init binary); a checkout
         * it cannot reach keeps controld root, and says so (test-controld-privsep still drops) */
        static int reach = -1;
        if (reach < 0) {
                reach = reachable_by_others(test_build_path("controld"));
                if (!reach)
                        fprintf(stderr, "ctltest: nobody cannot reach %s: controld stays root in this run "
                                        "(PADDOCK_CTLD_USER names a user that can)\n", test_build_path("controld"));
        }
        return reach ? "nobody" : "";
}

static const char *env_or(const char *k, const char *def) {
        const char *v = getenv(k);
        return v && *v ? v : def;
}

bool ctld_nomad(void) {
        const char *d = getenv("PADDOCK_DRIVER");
        return d && !strcmp(d, "nomad");
}

bool ctld_nomad_relay(void) {
        const char *v = getenv("PADDOCK_NOMAD_RELAY");
        return ctld_nomad() && v && !strcmp(v, "1");
}

const char *ctld_docker_root(void) {
        static char root[512];
        if (!root[0]) {
                char *argv[] = { "docker", "info", "-f", "{{.DockerRootDir}}", NULL };
                _cleanup_free_ char *out = NULL;
                ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
                ASSERT_NOT_NULL(out);
                out[strcspn(out, "\n")] = 0;
                snprintf(root, sizeof(root), "%s", out);
        }
        return root;
}

static void relay_stop(struct ctld *c) {
        if (c->relay_pid <= 0 || kill(c->relay_pid, 0) < 0)
                return;
        kill(c->relay_pid, SIGTERM);
        for (int i = 0; i < 500 && waitpid(c->relay_pid, NULL, WNOHANG) != c->relay_pid; i++)
                usleep(10000);
        kill(c->relay_pid, SIGKILL);
        (void) waitpid(c->relay_pid, NULL, WNOHANG);
        c->relay_pid = 0;
}

/* A nodeagent that only relays (no egress; the broker may or may not be there: it retries). */
static void relay_start(struct ctld *c) {
        char conf[400], log[400];
        snprintf(c->relay_secret, sizeof(c->relay_secret), "%s/relay.secret", c->dir);
        FILE *f = fopen(c->relay_secret, "w");
        ASSERT_NOT_NULL(f);
        char tok[65];
        random_token(tok, 32);
        fprintf(f, "%s\n", tok);
        fclose(f);
        c->relay_port = test_free_port();
        snprintf(conf, sizeof(conf), "%s/relay.conf", c->dir);
        snprintf(log, sizeof(log), "%s/relay.log", c->dir);
        f = fopen(conf, "w");
        ASSERT_NOT_NULL(f);
        /* with TLS, as a production relay should run: controld verifies it against this CA */
        struct tlstest t;
        tlstest_make(&t, c->dir, "relay", "IP:127.0.0.1");
        snprintf(c->relay_ca, sizeof(c->relay_ca), "%s", t.ca);
        fprintf(f, "[agent]\nnode_id = relay-%d-%d\nlog_level = debug\n[amqp]\nexchange = paddock.relay-%d-%d\n"
                   "[relay]\nlisten = 127.0.0.1:%d\nsecret_file = %s\ndocker_root = %s\ntls_cert = %s\ntls_key = %s\n",
                (int) getpid(), c->relay_port, (int) getpid(), c->relay_port, c->relay_port, c->relay_secret, ctld_docker_root(),
                t.cert, t.key);
        fclose(f);
        const char *argv[] = { "nodeagent", "-d", "-f", conf, NULL };
        /* The test's systemd notify socket (if any) is controld's to use, not this agent's. */
        _cleanup_free_ char *ns = getenv("NOTIFY_SOCKET") ? xstrdup(getenv("NOTIFY_SOCKET")) : NULL;
        _cleanup_free_ char *wu = getenv("WATCHDOG_USEC") ? xstrdup(getenv("WATCHDOG_USEC")) : NULL;
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        c->relay_pid = test_spawn_logged(test_build_path("nodeagent"), argv, log);
        if (ns)
                setenv("NOTIFY_SOCKET", ns, 1);
        if (wu)
                setenv("WATCHDOG_USEC", wu, 1);
        for (int i = 0; i < 500 && !test_port_open(c->relay_port); i++) {
                int st;
                if (waitpid(c->relay_pid, &st, WNOHANG) == c->relay_pid) {
                        c->relay_pid = 0;
                        test_fail(__FILE__, __LINE__, "the relay's nodeagent exited during start; see %s", log);
                }
                usleep(10000);
        }
        ASSERT_TRUE(test_port_open(c->relay_port));
}

/* The stand-in a ctld of this process talks to, for container_name(). */
static struct nstandin *current_standin;

static void write_conf(struct ctld *c, const char *server_extra) {
        FILE *f = fopen(c->conf, "w");
        ASSERT_NOT_NULL(f);
        if (c->nomad_url[0]) {
                /* runsc-net: the test daemon's gVisor runtime for sandboxes with a network. A key
                 * the test gives in nomad_extra replaces the default (the config refuses repeats). */
                static const char *const defaults[][2] = { { "runtime_network", "runsc-net" },
                                                           { "placement_timeout", "60s" },
                                                           { "csi_plugin_id", "standin-csi" } };
                fprintf(f, "[nomad]\naddress = %s\n%s\n", c->nomad_url, c->nomad_extra);
                if (c->relay_port) {
                        /* absolute: Nomad binds only absolute host paths */
                        char bin[PATH_MAX];
                        if (!realpath(test_build_path("paddock-init.static"), bin) &&
                            !realpath(test_build_path("paddock-init"), bin))
                                test_fail(__FILE__, __LINE__, "no paddock-init built");
                        fprintf(f, "agent_binary = %s\nrelay_secret_file = %s\nrelay_port = %d\nrelay_tls_ca = %s\n", bin,
                                c->relay_secret, c->relay_port, c->relay_ca);
                }
                for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                        if (!strstr(c->nomad_extra, defaults[i][0]))
                                fprintf(f, "%s = %s\n", defaults[i][0], defaults[i][1]);
        }
        /* Started as root, controld runs as [controld] user, as packaged: PADDOCK_CTLD_USER
         * names one (default nobody; its directory is then that user's); set empty, controld
         * stays root (its docker child runs either way). */
        const char *user = ctld_run_user();
        if (user && *user) {
                struct passwd *pw = getpwnam(user);
                if (!pw)
                        test_fail(__FILE__, __LINE__, "PADDOCK_CTLD_USER=%s: no such user", user);
                ASSERT_TRUE(chmod(test_tmpdir(), 0711) == 0);
                ASSERT_TRUE(chown(c->dir, pw->pw_uid, pw->pw_gid) == 0);
        }
        fprintf(f, "[controld]\nuser = %s\n", user ? user : "");
        fprintf(f,
                "[server]\nlisten = 127.0.0.1:%d\nlog_level = debug\n%s\n"
                "[store]\npath = %s/controld.db\n"
                "[scheduler]\ndriver = %s\nstats_interval = 1s\nreap_interval = %s\n"
                "[defaults]\ntemplate = busybox\nregion = local\nplan = default\n"
                "[region \"local\"]\nid = 6a06df21cc6bef51342e199e\nname = local\ncountry = Local\ncontinent = Local\n"
                "[region \"far\"]\nid = 6a06df21cc6bef51342e1999\nname = far\ncountry = Far\ncontinent = Far\n"
                "[region \"closed\"]\nid = 6a06df21cc6bef51342e1998\nname = closed\nenabled = false\n"
                "[plan \"default\"]\nmax_concurrent = 3\nregions = local, closed\nmax_cpu = 1000\nmax_memory = 1024\nmax_disk = 5\n"
                "max_volume_gb = 20\nmax_volumes = 2\n"
                "[template \"busybox\"]\nimage = %s\ndisplay_name = BusyBox\ndescription = Tiny test image\ncpu = 250\nmemory = 128\n"
                "[template \"python-3.11\"]\nimage = %s\ndisplay_name = Python 3.11\ndescription = Debian 12 with Python\n"
                "[template \"missing-image\"]\nimage = paddock/does-not-exist:never\n"
                "%s\n",
                c->port, server_extra ? server_extra : "", c->dir, c->nomad_url[0] ? "nomad" : "docker",
                env_or("PADDOCK_TEST_REAP_INTERVAL", "1s"), env_or("PADDOCK_TEST_IMAGE", "paddock/busybox:local"),
                env_or("PADDOCK_PY_IMAGE", "paddock/python-3.11:local"), c->extra);
        fclose(f);
}

static void sync_shadow(struct ctld *c) {
        if (c->shadow) {
                struct ctld *sh = c->shadow;
                *sh = *c;
                sh->shadow = NULL;
        }
}

/* With PADDOCK_CTLD_USER, what the test made for controld (TLS keys, token and key files) is
 * that user's, as an operator makes them for the packaged unit's User=. */
static uid_t give_uid;
static gid_t give_gid;
static int give_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st, (void) flag, (void) ftw;
        (void) lchown(path, give_uid, give_gid);
        return 0;
}

static void give_files_to_run_user(void) {
        const char *user = ctld_run_user();
        struct passwd *pw = user && *user ? getpwnam(user) : NULL;
        if (!pw || geteuid() != 0)
                return;
        give_uid = pw->pw_uid;
        give_gid = pw->pw_gid;
        (void) nftw(test_tmpdir(), give_one, 16, FTW_PHYS);
}

static void spawn(struct ctld *c) {
        const char *argv[] = { "controld", "-d", "-f", c->conf, NULL };
        give_files_to_run_user();
        pid_t p = test_spawn_logged(test_build_path("controld"), argv, c->log);
        c->pid = p;
        sync_shadow(c);
        /* Up to 30 s: a start asks Docker a few things, and a loaded host answers slowly. */
        for (int i = 0; i < 1500; i++) {
                struct hres r = { 0 };
                if (test_port_open(c->port)) {
                        http_req(c, "GET", "/healthz", NULL, NULL, &r);
                        long st = r.status;
                        hres_done(&r);
                        if (st == 200)
                                return;
                }
                int wst;
                if (waitpid(p, &wst, WNOHANG) == p) {
                        c->pid = 0;
                        test_fail(__FILE__, __LINE__, "controld exited during start; see %s", c->log);
                }
                usleep(20000);
        }
        test_fail(__FILE__, __LINE__, "controld did not answer /healthz; see %s", c->log);
}

static void cleanup_hook(void *ud) { ctld_stop(ud); }

/* The Docker networks the stand-in puts each CNI network on: the ones the docker driver
 * would use under this config ([docker] network / network_internal in extra, else the
 * defaults), so the egress suites hold for both drivers. */
static void standin_net_map(const struct ctld *c, char *out, size_t n) {
        char net[65] = "paddock-sandbox", inet[65] = "paddock-restricted";
        const char *d = strstr(c->extra, "[docker]");
        if (d) {
                const char *p = strstr(d, "\nnetwork = ");
                if (p)
                        sscanf(p + 11, "%64[^\n ]", net);
                p = strstr(d, "\nnetwork_internal = ");
                if (p)
                        sscanf(p + 20, "%64[^\n ]", inet);
        }
        bool bus = strstr(c->extra, "[amqp]") != NULL;
        snprintf(out, n, "cni/sandbox-open=%s,cni/sandbox-restricted=%s,cni/sandbox-no-egress=none", net, bus ? net : inet);
}

static void ctld_init(struct ctld *c, const char *extra) {
        memset(c, 0, sizeof(*c));
        snprintf(c->dir, sizeof(c->dir), "%s/ctld-%d-%ld", test_tmpdir(), getpid(), (long) random());
        ASSERT_TRUE(mkdir(c->dir, 0700) == 0);
        snprintf(c->extra, sizeof(c->extra), "%s", extra ? extra : "");
}

static void ctld_launch(struct ctld *c, const char *server_extra, const char *extra);

void ctld_start(struct ctld *c, const char *server_extra, const char *extra) {
        ctld_init(c, extra);
        if (ctld_nomad()) {
                char map[512];
                standin_net_map(c, map, sizeof(map));
                const char *args[] = { "--net-map", map, NULL };
                nstandin_start(&c->standin, c->dir, args);
                c->own_standin = true;
                current_standin = &c->standin;
                snprintf(c->nomad_url, sizeof(c->nomad_url), "%s", c->standin.url);
        }
        ctld_launch(c, server_extra, extra);
}

void ctld_start_nomad(struct ctld *c, struct nstandin *s, const char *nomad_extra, const char *server_extra,
                      const char *extra) {
        ctld_init(c, extra);
        snprintf(c->nomad_url, sizeof(c->nomad_url), "%s", s->url);
        snprintf(c->nomad_extra, sizeof(c->nomad_extra), "%s", nomad_extra ? nomad_extra : "");
        current_standin = s;
        ctld_launch(c, server_extra, extra);
}

static void ctld_launch(struct ctld *c, const char *server_extra, const char *extra) {
        if (ctld_nomad_relay() && !c->relay_port)
                relay_start(c);
        snprintf(c->conf, sizeof(c->conf), "%s/controld.conf", c->dir);
        snprintf(c->log, sizeof(c->log), "%s/controld.log", c->dir);
        snprintf(c->extra, sizeof(c->extra), "%s", extra ? extra : "");
        c->port = test_free_port();
        snprintf(c->url, sizeof(c->url), "http://127.0.0.1:%d", c->port);
        write_conf(c, server_extra);
        c->shadow = xnew0(struct ctld, 1);
        sync_shadow(c);
        test_on_exit(cleanup_hook, c->shadow);
        spawn(c);
}

/* A clean shutdown exits 0; anything else (a sanitizer report, a crash) fails the test. */
static void check_exit(struct ctld *c, int st) {
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return;
        fprintf(stderr, "  controld did not shut down cleanly (%s %d); log tail:\n",
                WIFEXITED(st) ? "exit status" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        char *argv[] = { "tail", "-n", "40", c->log, NULL };
        _cleanup_free_ char *out = NULL;
        test_run_capture(argv, &out, 1 << 16);
        fprintf(stderr, "%s\n", out ? out : "");
        fflush(stderr);
        c->failed_exit = true;
}

static void stop_daemon(struct ctld *c) {
        int st;
        if (c->pid <= 0)
                return;
        kill(c->pid, SIGTERM);
        for (int i = 0; i < 1000; i++) {
                if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
                        c->pid = 0;
                        check_exit(c, st);
                        return;
                }
                usleep(10000);
        }
        fprintf(stderr, "  controld did not stop within 10 s of SIGTERM\n");
        c->failed_exit = true;
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        c->pid = 0;
}

void ctld_stop_daemon(struct ctld *c) {
        stop_daemon(c);
        sync_shadow(c);
        if (c->failed_exit)
                test_fail(__FILE__, __LINE__, "controld did not shut down cleanly");
}

void ctld_start_daemon(struct ctld *c) { spawn(c); }

char *ctld_db_query(struct ctld *c, const char *sql) {
        char db[400];
        snprintf(db, sizeof(db), "%s/controld.db", c->dir);
        char *argv[] = { "sqlite3", db, (char *) sql, NULL };
        char *out = NULL;
        if (test_run_capture(argv, &out, 1 << 16) != 0)
                test_fail(__FILE__, __LINE__, "sqlite3 %s \"%s\" failed", db, sql);
        return out ? out : xstrdup("");
}

int ctld_wait_exit(struct ctld *c, int timeout_s) {
        int st = 0;
        for (int i = 0; c->pid > 0 && i < timeout_s * 100; i++) {
                if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
                        c->pid = 0;
                        sync_shadow(c);
                        return st;
                }
                usleep(10000);
        }
        return -1;
}

void ctld_restart(struct ctld *c) {
        ctld_stop_daemon(c);
        spawn(c);
}

void ctld_stop(struct ctld *c) {
        if (!c->dir[0])
                return;
        stop_daemon(c);
        if (c->shadow)
                c->shadow->dir[0] = 0;  /* stopped here: the exit hook has nothing left to do */
        /* Force-destroy everything this instance created so no container outlives the test. */
        _cleanup_free_ char *out = NULL;
        if (ctld_admin(c, &out, "sandbox", "list", NULL) == 0 && out) {
                char *save = NULL;
                for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                        char id[25] = "", status[16] = "";
                        if (sscanf(line, "%24s %*s %15s", id, status) == 2 && strcmp(status, "destroyed") != 0)
                                ctld_admin(c, NULL, "sandbox", "destroy", id, NULL);
                }
        }
        /* Docker volumes this instance made (their handles are in its store). */
        char db[400];
        snprintf(db, sizeof(db), "%s/controld.db", c->dir);
        char *q[] = { "sqlite3", db, "SELECT handle FROM volumes WHERE handle IS NOT NULL", NULL };
        _cleanup_free_ char *vols = NULL;
        if (test_run_capture(q, &vols, 1 << 16) == 0 && vols) {
                char *save = NULL;
                for (char *h = strtok_r(vols, "\n", &save); h; h = strtok_r(NULL, "\n", &save)) {
                        char *rm[] = { "docker", "volume", "rm", "-f", h, NULL };
                        test_run_capture(rm, NULL, 4096);
                }
        }
        /* Warm pool members outlive a controld by design (the next start serves them again):
         * a test's go with the test. */
        char *pq[] = { "sqlite3", db, "SELECT id FROM pool_members", NULL };
        _cleanup_free_ char *members = NULL;
        if (test_run_capture(pq, &members, 1 << 16) == 0 && members) {
                char *save = NULL;
                for (char *id = strtok_r(members, "\n", &save); id; id = strtok_r(NULL, "\n", &save)) {
                        char name[64], vol[64];
                        snprintf(name, sizeof(name), "paddock-%s", id);
                        snprintf(vol, sizeof(vol), "paddock-init-%s", id);
                        char *rm[] = { "docker", "rm", "-f", name, NULL };
                        char *rmv[] = { "docker", "volume", "rm", "-f", vol, NULL };
                        test_run_capture(rm, NULL, 4096);
                        test_run_capture(rmv, NULL, 4096);
                }
        }
        c->dir[0] = 0;
        relay_stop(c);
        if (c->own_standin) {
                nstandin_stop(&c->standin);   /* removes its containers and volumes */
                if (current_standin == &c->standin)
                        current_standin = NULL;
        }
        if (c->failed_exit) {
                fprintf(stderr, "  failing the test: controld did not shut down cleanly\n");
                _exit(1);
        }
}

int ctld_admin(struct ctld *c, char **ret_out, const char *arg1, ...) {
        char *argv[32];
        int n = 0;
        va_list ap;
        argv[n++] = (char *) test_build_path("controld");
        argv[n++] = "admin";
        argv[n++] = "-f";
        argv[n++] = c->conf;
        va_start(ap, arg1);
        for (const char *a = arg1; a && n < 31; a = va_arg(ap, const char *))
                argv[n++] = (char *) a;
        va_end(ap);
        argv[n] = NULL;
        char bin[512];
        snprintf(bin, sizeof(bin), "%s", argv[0]);
        argv[0] = bin;
        return test_run_capture(argv, ret_out, 1 << 20);
}

char *ctld_account_key(struct ctld *c, const char *name, const char *plan, char ret_account_id[25]) {
        _cleanup_free_ char *acc = NULL;
        char *key = NULL;
        int r = plan ? ctld_admin(c, &acc, "account", "create", name, "--plan", plan, NULL)
                     : ctld_admin(c, &acc, "account", "create", name, NULL);
        ASSERT_EQ(r, 0);
        acc[strcspn(acc, "\n")] = 0;
        ASSERT_EQ(strlen(acc), 24);
        if (ret_account_id)
                snprintf(ret_account_id, 25, "%s", acc);
        ASSERT_EQ(ctld_admin(c, &key, "key", "issue", acc, NULL), 0);
        key[strcspn(key, "\n")] = 0;
        ASSERT_TRUE(strncmp(key, "pdk_", 4) == 0);
        return key;
}

void mem_append(char **buf, size_t *len, const void *p, size_t n) {
        *buf = xrealloc(*buf, *len + n + 1);
        memcpy(*buf + *len, p, n);
        *len += n;
        (*buf)[*len] = 0;
}

char *ctld_start_with_account(struct ctld *c, const char *name, char ret_account_id[25]) {
        need_docker();
        ctld_start(c, NULL, NULL);
        return ctld_account_key(c, name, NULL, ret_account_id);
}

char *ctld_start_with_sandbox(struct ctld *c, const char *name, const char *body, char ret_sandbox_id[25]) {
        char *key = ctld_start_with_account(c, name, NULL);
        ctld_create(c, key, body, ret_sandbox_id);
        return key;
}

struct sink { char *buf; size_t len; };
static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
        struct sink *s = ud;
        size_t k = sz * n;
        mem_append(&s->buf, &s->len, p, k);
        return k;
}
static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
        struct hres *r = ud;
        size_t k = sz * n;
        size_t had = r->headers ? strlen(r->headers) : 0;
        r->headers = xrealloc(r->headers, had + k + 1);
        memcpy(r->headers + had, p, k);
        r->headers[had + k] = 0;
        if (k > 14 && strncasecmp(p, "x-request-id: ", 14) == 0)
                snprintf(r->request_id, sizeof(r->request_id), "%.*s", (int) strcspn(p + 14, "\r\n"), p + 14);
        if (k > 14 && strncasecmp(p, "content-type: ", 14) == 0)
                snprintf(r->content_type, sizeof(r->content_type), "%.*s", (int) strcspn(p + 14, "\r\n"), p + 14);
        return k;
}

void http_req_full(struct ctld *c, const char *method, const char *path, const char *const *headers, const void *body,
                   size_t body_len, struct hres *ret) {
        CURL *h = curl_easy_init();
        struct curl_slist *hl = NULL;
        struct sink s = { 0 };
        char url[4096];
        memset(ret, 0, sizeof(*ret));
        snprintf(url, sizeof(url), "%s%s", c->url, path);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, ret);
        hl = curl_slist_append(hl, "Expect:");
        for (const char *const *p = headers; p && *p; p++)
                hl = curl_slist_append(hl, *p);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        if (body) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) body_len);
        } else if (!strcmp(method, "HEAD"))
                curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        CURLcode rc = curl_easy_perform(h);
        if (rc == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
        else
                ret->status = -(long) rc;
        curl_slist_free_all(hl);
        curl_easy_cleanup(h);
        ret->body = s.buf ? s.buf : xstrdup("");
        ret->len = s.len;
        ret->json = cJSON_ParseWithLength(ret->body, ret->len);
}

void http_req_keyed(struct ctld *c, const char *method, const char *path, const char *key_header, const char *key,
                    const char *body, struct hres *ret) {
        char kh[512];
        const char *hdrs[3] = { NULL, NULL, NULL };
        int n = 0;
        if (key) {
                snprintf(kh, sizeof(kh), "%s: %s", key_header, key);
                hdrs[n++] = kh;
        }
        if (body)
                hdrs[n++] = "Content-Type: application/json";
        http_req_full(c, method, path, hdrs, body, body ? strlen(body) : 0, ret);
}

void http_req(struct ctld *c, const char *method, const char *path, const char *key, const char *body, struct hres *ret) {
        http_req_keyed(c, method, path, "x-brimble-key", key, body, ret);
}

void ctld_exec(struct ctld *c, const char *key, const char *id, const char *cmd, int timeout_s, struct hres *ret) {
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cmd", cmd);
        cJSON_AddNumberToObject(o, "timeout_seconds", timeout_s);
        _cleanup_free_ char *body = cJSON_PrintUnformatted(o);
        http_req(c, "POST", path, key, body, ret);
}

void ctld_exec_expect_at(const char *file, int line, struct ctld *c, const char *key, const char *id, const char *cmd,
                         const char *want) {
        struct hres r;
        ctld_exec(c, key, id, cmd, 30, &r);
        const char *out = r.status == 200 ? hres_data_str(&r, "stdout") : NULL;
        if (!out || strcmp(out, want))
                test_fail(file, line, "exec `%s` -> %ld %.400s (want 200 with stdout \"%s\")", cmd, r.status, r.body ? r.body : "",
                          want);
        hres_done(&r);
}

void http_expect_at(const char *file, int line, struct ctld *c, const char *method, const char *path, const char *key,
                    const char *body, long status) {
        struct hres r;
        http_req(c, method, path, key, body, &r);
        if (r.status != status)
                test_fail(file, line, "%s %s: HTTP %ld, want %ld: %.400s", method, path, r.status, status,
                          r.body ? r.body : "");
        hres_done(&r);
}

void http_expect_msg_at(const char *file, int line, struct ctld *c, const char *method, const char *path,
                        const char *key, const char *body, long status, const char *part) {
        struct hres r;
        http_req(c, method, path, key, body, &r);
        if (r.status != status)
                test_fail(file, line, "%s %s: HTTP %ld, want %ld: %.400s", method, path, r.status, status,
                          r.body ? r.body : "");
        const char *m = hres_message(&r);
        if (!m || !strstr(m, part))
                test_fail(file, line, "%s %s: message \"%s\" lacks \"%s\"", method, path, m ? m : "(none)", part);
        hres_done(&r);
}

void hres_done(struct hres *r) {
        free_many(r->body, r->headers);
        cJSON_Delete(r->json);
        memset(r, 0, sizeof(*r));
}

const char *hres_data_str(const struct hres *r, const char *field) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(r->json, "data");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(d, field);
        return cJSON_IsString(f) ? f->valuestring : NULL;
}

const char *hres_message(const struct hres *r) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(r->json, "message");
        return cJSON_IsString(m) ? m->valuestring : NULL;
}

const char *ctld_create(struct ctld *c, const char *key, const char *body, char ret_id[25]) {
        struct hres r;
        http_req(c, "POST", "/sandboxes", key, body ? body : "{}", &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "create %s -> %ld %s", body ? body : "{}", r.status, r.body);
        ASSERT_STREQ(hres_data_str(&r, "status"), "ready");
        snprintf(ret_id, 25, "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        return ret_id;
}

const char *ctld_wait_status(struct ctld *c, const char *key, const char *id, const char *want, int timeout_s) {
        static char last[32];
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        for (int i = 0; i < timeout_s * 10; i++) {
                struct hres r;
                http_req(c, "GET", path, key, NULL, &r);
                snprintf(last, sizeof(last), "%s", hres_data_str(&r, "status") ? hres_data_str(&r, "status") : "?");
                hres_done(&r);
                if (!strcmp(last, want))
                        break;
                usleep(100000);
        }
        return last;
}

static int docker_inspect_field(const char *name, const char *fmt, char **out) {
        char *argv[] = { "docker", "inspect", "-f", (char *) fmt, (char *) name, NULL };
        return test_run_capture(argv, out, 4096);
}

void need_docker(void) {
        if (!test_have_docker())
                TEST_SKIP("dockerd is not answering on /var/run/docker.sock (start it with tests/env/services.sh start docker)");
}

char *container_name(const char *id) {
        if (current_standin) {
                /* Nomad names the task container <task>-<alloc id>; gone = a name that never exists. */
                static char nbuf[128];
                const char *n = nstandin_container(current_standin, id);
                snprintf(nbuf, sizeof(nbuf), "%s", n ? n : "sandbox-no-running-allocation");
                return nbuf;
        }
        static char buf[64];
        snprintf(buf, sizeof(buf), "paddock-%s", id);
        return buf;
}

bool docker_container_running(const char *name) {
        _cleanup_free_ char *out = NULL;
        return docker_inspect_field(name, "{{.State.Running}}", &out) == 0 && out && !strncmp(out, "true", 4);
}

bool docker_container_exists(const char *name) {
        _cleanup_free_ char *out = NULL;
        return docker_inspect_field(name, "{{.Id}}", &out) == 0;
}

void ctld_crash_at(struct ctld *c, const char *point, const char *method, const char *path, const char *key,
                   const char *body, long answered) {
        ctld_stop_daemon(c);
        setenv("PADDOCK_FAULT", point, 1);
        ctld_start_daemon(c);
        unsetenv("PADDOCK_FAULT");
        struct hres r;
        http_req(c, method, path, key, body, &r);
        if (answered ? r.status != answered : r.status > 0)
                test_fail(__FILE__, __LINE__, "%s %s answered %ld at %s: %.300s", method, path, r.status, point,
                          r.body ? r.body : "");
        hres_done(&r);
        int st = ctld_wait_exit(c, 120);
        ASSERT_TRUE(st != -1 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        ctld_start_daemon(c);
}

void ctld_newest_id(struct ctld *c, const char *table, char id[25]) {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT id FROM %s ORDER BY created_at DESC, id LIMIT 1", table);
        _cleanup_free_ char *out = ctld_db_query(c, sql);
        ASSERT_NOT_NULL(out);
        out[strcspn(out, "\n")] = 0;
        ASSERT_EQ(strlen(out), 24);
        snprintf(id, 25, "%s", out);
}

bool ctld_netstack(struct ctld *c) {
        struct hres r;
        http_req(c, "GET", "/healthz", NULL, NULL, &r);
        const char *mode = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "sandbox_network"), "mode"));
        bool yes = mode && !strcmp(mode, "sandbox");
        hres_done(&r);
        return yes;
}

const char *container_ip(const char *id) {
        static char ip[64];
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                         container_name(id), NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 4096), 0);
        snprintf(ip, sizeof(ip), "%.*s", (int) strcspn(out, "\n"), out);
        ASSERT_TRUE(ip[0] != 0);
        return ip;
}
