/* Integration test: controld's privilege separation (controld/dockerchild.h). Started as root
 * with [controld] user set (PADDOCK_CTLD_USER, "nobody" unless the environment names another),
 * the network-facing process runs as that user with no supplementary groups and cannot open
 * the Docker socket, its docker child stays root, and a sandbox's whole life still works
 * through the Docker driver: create, exec, files, pause, resume, destroy, and the in-sandbox
 * agent's socket (which only root may open) reached through the child. A child of this test's
 * own, on the real Docker socket, passes what controld asks and refuses what it never does.
 *
 * Snapshots (nodeagent and RabbitMQ in the path) are covered by test-snapshots run with
 * PADDOCK_CTLD_USER set: the restore's pull and the registry calls then go through the child. */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agenttest.h"
#include "cleanup.h"
#include "controld.h"
#include "ctltest.h"
#include "dockerchild.h"
#include "testlib.h"

#define DOCKER_SOCK "/var/run/docker.sock"

static const char *test_user(void) {
        const char *u = getenv("PADDOCK_CTLD_USER");
        if (!u || !*u) {
                setenv("PADDOCK_CTLD_USER", "nobody", 1);
                u = "nobody";
        }
        return u;
}

/* The value of "key:" in /proc/<pid>/status ("" when the line is empty), or NULL. */
static char *proc_status(pid_t pid, const char *key) {
        char path[64], line[1024];
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        size_t kl = strlen(key);
        while (fgets(line, sizeof(line), f))
                if (!strncmp(line, key, kl) && line[kl] == ':') {
                        char *v = line + kl + 1;
                        v += strspn(v, " \t");
                        v[strcspn(v, "\n")] = 0;
                        return xstrdup(v);
                }
        return NULL;
}

/* The first process whose parent is ppid (controld's docker child), or 0. */
static pid_t child_of(pid_t ppid) {
        DIR *d = opendir("/proc");
        struct dirent *e;
        pid_t found = 0;
        while (d && !found && (e = readdir(d))) {
                pid_t p = (pid_t) atoi(e->d_name);
                if (p <= 0)
                        continue;
                _cleanup_free_ char *pp = proc_status(p, "PPid");
                if (pp && atoi(pp) == ppid)
                        found = p;
        }
        if (d)
                closedir(d);
        return found;
}

/* All four uids (real, effective, saved, fs) of a Uid:/Gid: line equal want. */
static bool ids_all(const char *line, long want) {
        long v[4];
        return line && sscanf(line, "%ld %ld %ld %ld", &v[0], &v[1], &v[2], &v[3]) == 4 && v[0] == want && v[1] == want &&
               v[2] == want && v[3] == want;
}

/* As uid/gid with no groups: connect() to the Docker socket (path NULL), or access(path, X_OK):
 * 0, or the errno. */
static int try_as(uid_t uid, gid_t gid, const char *path) {
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                if (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0)
                        _exit(100);
                if (path)
                        _exit(access(path, X_OK) == 0 ? 0 : errno);
                int fd = socket(AF_UNIX, SOCK_STREAM, 0);
                struct sockaddr_un a = { .sun_family = AF_UNIX };
                snprintf(a.sun_path, sizeof(a.sun_path), "%s", DOCKER_SOCK);
                _exit(connect(fd, (struct sockaddr *) &a, sizeof(a)) == 0 ? 0 : errno);
        }
        int st;
        ASSERT_EQ(waitpid(p, &st, 0), p);
        ASSERT_TRUE(WIFEXITED(st));
        ASSERT_NE(WEXITSTATUS(st), 100);
        return WEXITSTATUS(st);
}

static char *exec_ok(struct ctld *c, const char *key, const char *id, const char *cmd) {
        struct hres r;
        ctld_exec(c, key, id, cmd, 60, &r);
        if (r.status != 200)
                test_fail(__FILE__, __LINE__, "exec %s -> %ld %.300s", cmd, r.status, r.body);
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "exit_code");
        if (!cJSON_IsNumber(ec) || ec->valueint != 0)
                test_fail(__FILE__, __LINE__, "exec %s failed: %.300s", cmd, r.body);
        char *out = xstrdup(hres_data_str(&r, "stdout"));
        hres_done(&r);
        return out;
}

static void wait_status(struct ctld *c, const char *key, const char *id, const char *want) {
        char path[128];
        struct hres r;
        snprintf(path, sizeof(path), "/sandboxes/%s/wait?timeout=60&status=%s", id, want);
        http_req(c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(cJSON_GetObjectItem(cJSON_GetObjectItem(r.json, "data"), "status")->valuestring, want);
        hres_done(&r);
}

TEST_FULL(parent_holds_no_privilege_and_sandboxes_still_work, 300) {
        need_docker();
        if (geteuid() != 0)
                TEST_SKIP("needs root: controld must start as root to drop to [controld] user");
        const char *user = test_user();
        struct passwd *pw = getpwnam(user);
        if (!pw)
                test_fail(__FILE__, __LINE__, "no user %s to run controld as (PADDOCK_CTLD_USER)", user);
        uid_t uid = pw->pw_uid;
        gid_t gid = pw->pw_gid;

        static struct ctld c;
        char id[25], path[128];
        struct hres r;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "privsep", NULL);

        /* The parent: the configured user everywhere, no supplementary groups at all. */
        _cleanup_free_ char *uids = proc_status(c.pid, "Uid"), *gids = proc_status(c.pid, "Gid"),
                            *groups = proc_status(c.pid, "Groups");
        ASSERT_NOT_NULL(uids);
        ASSERT_NOT_NULL(groups);
        if (!ids_all(uids, (long) uid) || !ids_all(gids, (long) gid))
                test_fail(__FILE__, __LINE__, "controld runs as Uid %s Gid %s, want %d/%d", uids, gids, (int) uid, (int) gid);
        ASSERT_NE((long) uid, 0);
        ASSERT_STREQ(groups, "");
        /* The child keeps root (it holds the Docker socket). */
        pid_t child = child_of(c.pid);
        ASSERT_TRUE(child > 0);
        _cleanup_free_ char *cuids = proc_status(child, "Uid"), *cname = proc_status(child, "Name");
        ASSERT_TRUE(ids_all(cuids, 0));
        ASSERT_STREQ(cname, "controld-docker");

        /* The Docker socket is not the parent's: not its owner, not its group, nothing for others;
         * and a process with its very credentials is refused by the kernel. */
        struct stat st;
        ASSERT_EQ(stat(DOCKER_SOCK, &st), 0);
        ASSERT_TRUE(st.st_uid != uid && st.st_gid != gid && (st.st_mode & 0007) == 0);
        ASSERT_EQ(try_as(uid, gid, NULL), EACCES);
        /* Nor may it enter Docker's data root, where the agents' sockets live. */
        _cleanup_free_ char *vols = xasprintf("%s/volumes", ctld_docker_root());
        ASSERT_EQ(try_as(uid, gid, vols), EACCES);

        /* A sandbox's life, every step through the docker child. */
        ctld_create(&c, key, NULL, id);
        ASSERT_TRUE(docker_container_running(container_name(id)));
        _cleanup_free_ char *hi = exec_ok(&c, key, id, "echo hi-from-$(id -u)");
        ASSERT_CONTAINS(hi, "hi-from-0");
        snprintf(path, sizeof(path), "/sandboxes/%s/files/batch", id);
        http_req(&c, "POST", path, key, "{\"files\":[{\"path\":\"/tmp/ps.txt\",\"content_base64\":\"cHJpdnNlcA==\"}]}", &r);
        ASSERT_EQ(r.status, 200);
        hres_done(&r);
        _cleanup_free_ char *cat = exec_ok(&c, key, id, "cat /tmp/ps.txt");
        ASSERT_STREQ(cat, "privsep");
        /* The agent answered (its socket is root's; the child opened it for the parent): the
         * driver's exec fallback was not what ran the commands. */
        ASSERT_FALSE(test_log_has(c.log, 0, "agent socket did not appear", 1));
        snprintf(path, sizeof(path), "/sandboxes/%s/processes", id);
        http_req(&c, "GET", path, key, NULL, &r);
        ASSERT_NE(r.status, 503);
        hres_done(&r);

        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        HTTP_EXPECT(&c, "POST", path, key, NULL, 200);
        wait_status(&c, key, id, "paused");
        snprintf(path, sizeof(path), "/sandboxes/%s/resume", id);
        HTTP_EXPECT(&c, "POST", path, key, NULL, 200);
        wait_status(&c, key, id, "ready");
        _cleanup_free_ char *again = exec_ok(&c, key, id, "echo again");
        ASSERT_STREQ(again, "again\n");

        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        ASSERT_FALSE(docker_container_exists(container_name(id)));
        /* Nothing was refused along the way: the allowlist holds every call controld made. */
        ASSERT_FALSE(test_log_has(c.log, 0, "docker child refused", 1));
        ASSERT_TRUE(test_log_has(c.log, 0, "running as", 1));
        ctld_stop(&c);
}

/* The child's config, for the process's life (a global: the sanitizer's leak check sees it). */
struct config *child_cfg;

/* A child of the test's own on the real socket: what controld asks passes and reaches Docker,
 * anything else is refused and Docker never sees it. */
TEST_FULL(the_child_refuses_calls_outside_the_allowlist, 60) {
        need_docker();
        struct config *cfg = child_cfg = xnew0(struct config, 1);
        cfg->driver = xstrdup("docker");
        cfg->docker_socket = xstrdup(DOCKER_SOCK);
        cfg->docker_runtime = xstrdup("runsc");
        cfg->docker_runtime_net = xstrdup("runsc-net");
        cfg->docker_network = xstrdup("paddock-sandbox");
        cfg->docker_network_internal = xstrdup("paddock-restricted");
        cfg->docker_volume_root = xstrdup("");
        cfg->snap_registry = xstrdup("127.0.0.1:5000");
        cfg->snap_repository = xstrdup("paddock/snapshots");
        cfg->utpl_repository = xstrdup("paddock/templates");
        cfg->init_binary = xstrdup("");
        cfg->init_dir = xstrdup("");
        cfg->db_path = xstrdup("/nonexistent/controld.db");
        cfg->run_user = xstrdup("");
        cfg->docker_runsc = xstrdup("/usr/bin/runsc");
        cfg->docker_runsc_root = xstrdup("/var/run/docker/runtime-runc/moby");
        struct err err = { 0 };
        ASSERT_EQ(dockerchild_start(cfg, &err), 0);

        long status = 0;
        size_t len = 0;
        char *body = NULL;
        ASSERT_EQ(dockerchild_docker_call("GET", "/_ping", NULL, 0, 5000, &status, &body, &len), 0);
        ASSERT_EQ(status, 200);
        free(body);
        body = NULL;

        /* A privileged container with the host's root bound in, under a name controld would use. */
        char name[64], path[128];
        snprintf(name, sizeof(name), "paddock-%024x", (unsigned) getpid());
        snprintf(path, sizeof(path), "/containers/create?name=%s", name);
        static const char evil[] = "{\"Image\":\"busybox\",\"HostConfig\":{\"Runtime\":\"runsc\",\"Privileged\":true,"
                                   "\"Binds\":[\"/:/host\"]}}";
        ASSERT_EQ(dockerchild_docker_call("POST", path, evil, strlen(evil), 5000, &status, &body, &len), -EPERM);
        ASSERT_FALSE(docker_container_exists(name));
        /* Endpoints controld never calls. */
        ASSERT_EQ(dockerchild_docker_call("GET", "/containers/json?all=1&size=1", NULL, 0, 5000, &status, &body, &len), -EPERM);
        ASSERT_EQ(dockerchild_docker_call("POST", "/images/create?fromImage=busybox", NULL, 0, 5000, &status, &body, &len),
                  -EPERM);
        ASSERT_EQ(dockerchild_docker_call("GET", "/swarm", NULL, 0, 5000, &status, &body, &len), -EPERM);
        ASSERT_EQ(dockerchild_docker_call("DELETE", "/containers/some-other-container?force=1", NULL, 0, 5000, &status, &body,
                                          &len),
                  -EPERM);
        /* A hex id that is not a sandbox's container: looked up, and refused. */
        ASSERT_EQ(dockerchild_docker_call("POST", "/containers/0123456789ab/kill?signal=KILL", NULL, 0, 5000, &status, &body,
                                          &len),
                  -EPERM);
        /* runsc's checkpoint (it stops the container and writes its memory out) only of ours:
         * another running container by its full id is refused and keeps running. */
        {
                char cname[64];
                snprintf(cname, sizeof(cname), "pdk-not-ours-%d", (int) getpid());
                const char *img = getenv("PADDOCK_TEST_IMAGE");
                char *run[] = { "docker", "run", "-d", "--runtime", "runsc", "--name", cname, (char *) (img ? img : "paddock/busybox:local"),
                                "sleep", "600", NULL };
                _cleanup_free_ char *cid = NULL;
                ASSERT_EQ(test_run_capture(run, &cid, 4096), 0);
                cid[strcspn(cid, "\n")] = 0;
                ASSERT_EQ(strlen(cid), 64);
                struct err ce = { 0 };
                int r = dockerchild_runsc_checkpoint(cid, "c1", 5000, &ce);
                bool running = docker_container_running(cname);
                char *rm[] = { "docker", "rm", "-f", cname, NULL };
                _cleanup_free_ char *rmout = NULL;
                (void) test_run_capture(rm, &rmout, 4096);
                ASSERT_EQ(r, -EPERM);
                ASSERT_CONTAINS(ce.message, "not one of our containers");
                ASSERT_TRUE(running);
                ASSERT_EQ(dockerchild_runsc_checkpoint("../../etc", "c1", 5000, &ce), -EPERM);
        }
        /* Another container's inspect (its Env may hold secrets) reads as missing. */
        _cleanup_free_ char *out = NULL;
        char *argv[] = { "docker", "ps", "-q", "--no-trunc", NULL };
        ASSERT_EQ(test_run_capture(argv, &out, 1 << 16), 0);
        for (char *save = NULL, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                snprintf(path, sizeof(path), "/containers/%s/json", line);
                ASSERT_EQ(dockerchild_docker_call("GET", path, NULL, 0, 5000, &status, &body, &len), 0);
                if (!strstr(body, "\"Name\":\"/paddock-"))
                        ASSERT_EQ(status, 404);
                free(body);
                body = NULL;
        }
        char msg[1024];
        ASSERT_EQ(dockerchild_ping(msg, sizeof(msg)), 0);
}

/* The two live and die together: a dead child takes controld down with status 1 and a log line
 * (systemd restarts it; a parent without its child could do nothing), and a parent killed
 * outright leaves no child behind. */
TEST_FULL(parent_and_child_end_together, 120) {
        need_docker();
        if (geteuid() != 0)
                TEST_SKIP("needs root");
        test_user();
        static struct ctld c;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "privsep", NULL);

        pid_t child = child_of(c.pid);
        ASSERT_TRUE(child > 0);
        ASSERT_EQ(kill(child, SIGKILL), 0);
        int st = ctld_wait_exit(&c, 10);
        ASSERT_TRUE(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1);
        ASSERT_TRUE(test_log_has(c.log, 0, "the docker child", 1));
        ASSERT_TRUE(test_log_has(c.log, 0, "controld exits", 1));

        ctld_start_daemon(&c);
        child = child_of(c.pid);
        ASSERT_TRUE(child > 0);
        ASSERT_EQ(kill(c.pid, SIGKILL), 0);
        (void) ctld_wait_exit(&c, 10);
        bool gone = false;
        for (int i = 0; i < 500 && !gone; i++) {
                _cleanup_free_ char *state = proc_status(child, "State");
                gone = !state || state[0] == 'Z';
                if (!gone)
                        usleep(10000);
        }
        ASSERT_TRUE(gone);
        ctld_start_daemon(&c);
        ctld_stop(&c);
}
