/* nodeagent's privilege separation: the parent holds no capabilities, the egress child only
 * CAP_NET_ADMIN, oversized or malformed messages are refused, the watchdog is fed. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sched.h>
#include <stdarg.h>
#include <sys/mount.h>
#include <poll.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "agenttest.h"
#include "amqptest.h"
#include "cleanup.h"
#include "metrics.h"
#include "nodeagenttest.h"
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"
#include "testlib.h"

/* ------------------------------------------------------------------ privilege separation */

/* One "Key:\tvalue" line of /proc/<pid>/status, or "" when absent. */
static void proc_status(pid_t pid, const char *key, char *out, size_t outlen) {
        char path[64], line[256];
        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        out[0] = 0;
        FILE *f = fopen(path, "r");
        if (!f)
                return;
        size_t kl = strlen(key);
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
                        char *v = line + kl + 1;
                        while (*v == '\t' || *v == ' ')
                                v++;
                        v[strcspn(v, "\n")] = 0;
                        for (size_t e = strlen(v); e > 0 && (v[e - 1] == ' ' || v[e - 1] == '\t'); e--)
                                v[e - 1] = 0;
                        snprintf(out, outlen, "%s", v);
                        break;
                }
        fclose(f);
}

/* The child of parent whose comm is name, or 0. */
static pid_t find_child(pid_t parent, const char *name) {
        char path[96], buf[4096] = "";
        snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int) parent, (int) parent);
        FILE *f = fopen(path, "r");
        if (!f)
                return 0;
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = 0;
        for (char *t = strtok(buf, " \n"); t; t = strtok(NULL, " \n")) {
                pid_t c = (pid_t) atoi(t);
                char comm[64] = "";
                snprintf(path, sizeof(path), "/proc/%d/comm", (int) c);
                FILE *cf = fopen(path, "r");
                if (!cf)
                        continue;
                if (fgets(comm, sizeof(comm), cf))
                        comm[strcspn(comm, "\n")] = 0;
                fclose(cf);
                if (strcmp(comm, name) == 0)
                        return c;
        }
        return 0;
}

TEST_FULL(parent_holds_no_capabilities_and_a_dead_child_stops_it, 60) {
        struct client c = { 0 };
        amqptest_need_broker();
        if (geteuid() != 0)
                TEST_SKIP("needs root to see capabilities dropped");
        write_conf(NULL);
        start_agent();
        client_open(&c);
        wait_agent_ready(&c);

        /* While it serves requests, the process that reads the network holds nothing. */
        char v[128];
        for (int i = 0; i < 3; i++) {
                char corr[32];
                _cleanup_free_ char *r = NULL;
                snprintf(corr, sizeof(corr), "caps-%d", i);
                ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", corr, &r), 0);
                ASSERT_CONTAINS(r, "\"ok\":true");
                static const char *const zero_sets[] = { "CapEff", "CapPrm", "CapInh", "CapAmb" };
                for (size_t k = 0; k < ELEMENTSOF(zero_sets); k++) {
                        proc_status(agent_pid, zero_sets[k], v, sizeof(v));
                        ASSERT_STREQ(v, "0000000000000000");
                }
                proc_status(agent_pid, "NoNewPrivs", v, sizeof(v));
                ASSERT_STREQ(v, "1");
        }
        /* Without [egress] enable there is no egress process; the docker process holds nothing either. */
        ASSERT_EQ(find_child(agent_pid, "agent-egress"), 0);
        pid_t docker = find_child(agent_pid, "agent-docker");
        ASSERT_TRUE(docker > 0);
        proc_status(docker, "CapEff", v, sizeof(v));
        ASSERT_STREQ(v, "0000000000000000");

        /* A dead child: the agent stops consuming (its queue goes, publishes come back
         * unroutable) and exits non-zero so that systemd restarts it. */
        ASSERT_EQ(kill(docker, SIGKILL), 0);
        int status = 0;
        pid_t w = 0;
        for (int i = 0; i < 100 && w == 0; i++) {
                w = waitpid(agent_pid, &status, WNOHANG);
                if (w == 0)
                        usleep(50000);
        }
        ASSERT_EQ(w, agent_pid);
        agent_pid = 0;
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_NE(WEXITSTATUS(status), 0);
        ASSERT_EQ(publish_until_returned(&c, node_id, "after-death"), 1);
        _cleanup_free_ char *log = NULL;
        char *cat[] = { "cat", log_path, NULL };
        ASSERT_EQ(test_run_capture(cat, &log, 1 << 20), 0);
        ASSERT_CONTAINS(log, "docker process was killed by signal 9");
        ASSERT_CONTAINS(log, "no longer consuming");
        client_close(&c);
}

/* Starts the agent the way its unit does: user nobody with the docker group as its one
 * supplementary group and only CAP_NET_ADMIN and CAP_SETGID, ambient. */
static void start_agent_as_unit_user(gid_t docker_gid) {
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
                dup2(fd, STDERR_FILENO);
                gid_t g[1] = { docker_gid };
                uint64_t keep = (UINT64_C(1) << CAP_NET_ADMIN) | (UINT64_C(1) << CAP_SETGID);
                struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
                struct __user_cap_data_struct d[2] = { { .effective = (uint32_t) keep, .permitted = (uint32_t) keep,
                                                         .inheritable = (uint32_t) keep } };
                if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 || setgroups(1, g) < 0 || setresgid(65534, 65534, 65534) < 0 ||
                    setresuid(65534, 65534, 65534) < 0 || syscall(SYS_capset, &h, d) < 0 ||
                    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_ADMIN, 0, 0) < 0 ||
                    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETGID, 0, 0) < 0) {
                        dprintf(STDERR_FILENO, "test: cannot become the unit's user: %s\n", strerror(errno));
                        _exit(126);
                }
                execl(test_build_path("nodeagent"), "nodeagent", "-d", "-f", conf_path, (char *) NULL);
                _exit(127);
        }
        agent_pid = p;
        test_on_exit(stop_agent, NULL);
}

/* connect() to the Docker socket with the uid, gid and groups process pid has: 0 or -errno. */
static int docker_connect_as(pid_t pid) {
        char uid[128], gid[128], groups[512];
        proc_status(pid, "Uid", uid, sizeof(uid));
        proc_status(pid, "Gid", gid, sizeof(gid));
        proc_status(pid, "Groups", groups, sizeof(groups));
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                gid_t g[64];
                int n = 0;
                for (char *t = strtok(groups, " "); t && n < 64; t = strtok(NULL, " "))
                        g[n++] = (gid_t) atoi(t);
                if (setgroups((size_t) n, g) < 0 || setresgid((gid_t) atoi(gid), (gid_t) atoi(gid), (gid_t) atoi(gid)) < 0 ||
                    setresuid((uid_t) atoi(uid), (uid_t) atoi(uid), (uid_t) atoi(uid)) < 0)
                        _exit(100);
                int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_un a = { .sun_family = AF_UNIX, .sun_path = "/var/run/docker.sock" };
                _exit(connect(s, (struct sockaddr *) &a, sizeof(a)) == 0 ? 0 : errno);
        }
        int st = 0;
        ASSERT_EQ(waitpid(p, &st, 0), p);
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) != 100);
        return -WEXITSTATUS(st);
}

/* Whether needle is anywhere in pid's readable memory (every mapping /proc/<pid>/maps lists). */
static bool memory_holds(pid_t pid, const char *needle) {
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/maps", (int) pid);
        FILE *maps = fopen(path, "r");
        ASSERT_NOT_NULL(maps);
        snprintf(path, sizeof(path), "/proc/%d/mem", (int) pid);
        int mem = open(path, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(mem >= 0);
        bool found = false;
        size_t nl = strlen(needle);
        while (!found && fgets(line, sizeof(line), maps)) {
                unsigned long lo, hi;
                char perms[8];
                if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' || strstr(line, "[vvar") ||
                    strstr(line, "[vsyscall]"))
                        continue;
                /* Read in chunks that overlap by the needle's length; skip the sanitizer's
                 * shadow (terabytes reserved, never heap or stack). */
                if (hi - lo > (1UL << 32))
                        continue;
                enum { CHUNK = 1 << 20 };
                _cleanup_free_ char *buf = xmalloc(CHUNK);
                for (unsigned long at = lo; !found && at < hi; at += CHUNK - nl) {
                        size_t want = hi - at < CHUNK ? hi - at : CHUNK;
                        ssize_t got = pread(mem, buf, want, (off_t) at);
                        if (got <= 0)
                                break;
                        found = memmem(buf, (size_t) got, needle, nl) != NULL;
                        if ((size_t) got < want)
                                break;
                }
        }
        close(mem);
        fclose(maps);
        return found;
}

/* Issue 24: the docker group (root on the host through its socket) and the registry
 * credentials stay with the docker process. The parent, which parses what comes off the
 * network, has no supplementary group and cannot connect to the socket with its credentials,
 * and holds no copy of the password; the docker process has both (so the checks can fail). */
TEST_FULL(only_the_docker_process_has_the_docker_group_and_the_credentials, 60) {
        struct client c = { 0 };
        amqptest_need_broker();
        if (geteuid() != 0)
                TEST_SKIP("needs root to start the agent as its unit's user");
        struct group *dg = getgrnam("docker");
        if (!dg)
                TEST_SKIP("no docker group on this host");
        gid_t docker_gid = dg->gr_gid;
        const char *canary = "pw-canary-7f3a9c2e5b1d4f60";
        _cleanup_free_ char *extra = xasprintf("[snapshot]\nusername = user-canary-0b9e\npassword = %s\n", canary);
        write_conf(extra);
        ASSERT_EQ(chmod(test_tmpdir(), 0755), 0);
        ASSERT_EQ(chmod(conf_path, 0644), 0);
        start_agent_as_unit_user(docker_gid);
        client_open(&c);
        wait_agent_ready(&c);

        pid_t docker = find_child(agent_pid, "agent-docker");
        ASSERT_TRUE(docker > 0);
        char v[256], want[32];
        proc_status(agent_pid, "Uid", v, sizeof(v));
        ASSERT_TRUE(strncmp(v, "65534", 5) == 0);
        proc_status(agent_pid, "Groups", v, sizeof(v));
        ASSERT_STREQ(v, "");
        proc_status(docker, "Groups", v, sizeof(v));
        snprintf(want, sizeof(want), "%u", (unsigned) docker_gid);
        ASSERT_STREQ(v, want);
        ASSERT_EQ(docker_connect_as(agent_pid), -EACCES);
        ASSERT_EQ(docker_connect_as(docker), 0);
        /* And it does its work: a ping round trip while we look. */
        _cleanup_free_ char *r = NULL;
        ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", "groups-ping", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":true");

        ASSERT_FALSE(memory_holds(agent_pid, canary));
        ASSERT_TRUE(memory_holds(docker, canary));
        client_close(&c);
}

static long vm_hwm_kb(pid_t pid) {
        char v[128];
        proc_status(pid, "VmHWM", v, sizeof(v));
        return atol(v);
}

TEST_FULL(oversized_message_is_refused_before_its_body_is_read, 60) {
        struct client c = { 0 };
        amqptest_need_broker();
        write_conf(NULL);
        start_agent();
        client_open(&c);
        wait_agent_ready(&c);
        long before = vm_hwm_kb(agent_pid);
        ASSERT_TRUE(before > 0);
        /* 24 MiB: the agent reads it off the socket frame by frame and keeps none of it. */
        size_t n = 24u << 20;
        _cleanup_free_ char *big = xmalloc(n + 1);
        memset(big, ' ', n);
        big[n] = 0;
        _cleanup_free_ char *r = NULL;
        ASSERT_EQ(publish(&c, node_id, big, "too-big", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":false");
        ASSERT_CONTAINS(r, "message too large");
        ASSERT_CONTAINS(r, node_id);
        long after = vm_hwm_kb(agent_pid);
        if (after - before > 4096)
                test_fail(__FILE__, __LINE__, "the agent's peak RSS grew by %ld KiB for a refused message", after - before);
        /* Just at the limit is read and answered (the JSON layer refuses it, not the size check). */
        free(r);
        r = NULL;
        big[1u << 20] = 0;
        ASSERT_EQ(publish(&c, node_id, big, "at-limit", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":false");
        ASSERT_FALSE(strstr(r, "message too large"));
        free(r);
        r = NULL;
        ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", "after-big", &r), 0);
        ASSERT_CONTAINS(r, "\"ok\":true");
        client_close(&c);
}

TEST(egress_child_holds_only_net_admin_and_refuses_malformed_requests) {
        egress_setup("");
        pid_t child = privsep_child_pid(PS_CHILD_EGRESS);
        ASSERT_TRUE(child > 0);
        char v[128];
        proc_status(child, "CapEff", v, sizeof(v));
        ASSERT_STREQ(v, "0000000000001000");    /* CAP_NET_ADMIN alone */
        proc_status(child, "NoNewPrivs", v, sizeof(v));
        ASSERT_STREQ(v, "1");

        /* Raw bytes down the socketpair: a well-formed-looking apply whose sandbox id is not
         * terminated, one with a mode out of range, and one cut short. None is applied. */
        struct ps_result res;
        _cleanup_free_ struct ps_egress_apply *m = xnew0(struct ps_egress_apply, 1);
        m->hdr = (struct ps_hdr) { .version = PS_VERSION, .type = PS_EGRESS_APPLY, .len = sizeof(*m), .seq = 41 };
        memcpy(m->sandbox_id, SBX, 24);
        m->sandbox_id[24] = 'f';
        m->mode = PJ_EGRESS_OPEN;
        m->ip = 0xa9fe5a07;
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, sizeof(*m), &res), -EBADMSG);
        ASSERT_CONTAINS(res.msg, "sandbox_id");
        m->sandbox_id[24] = 0;
        m->mode = 77;
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, sizeof(*m), &res), -EBADMSG);
        ASSERT_CONTAINS(res.msg, "mode 77");
        m->mode = PJ_EGRESS_OPEN;
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, 100, &res), -EBADMSG);
        _cleanup_free_ char *dump = nft_dump();
        ASSERT_FALSE(strstr(dump, "sbx_" SBX));
        _cleanup_free_ char *log = NULL;
        char *cat[] = { "cat", egress_log, NULL };
        ASSERT_EQ(test_run_capture(cat, &log, 1 << 20), 0);
        ASSERT_CONTAINS(log, "egress process refused a malformed request: sandbox_id");
        ASSERT_CONTAINS(log, "mode 77");

        /* The same message, well formed, is applied: the refusals were about the bytes. */
        ASSERT_EQ(privsep_send_raw(PS_CHILD_EGRESS, m, sizeof(*m), &res), 0);
        free(dump);
        dump = nft_dump();
        ASSERT_CONTAINS(dump, "sbx_" SBX);

        /* Killed, it is noticed: no egress change can be confirmed any more. */
        ASSERT_EQ(kill(child, SIGKILL), 0);
        struct err why = { 0 };
        for (int i = 0; i < 200 && privsep_healthy(&why); i++)
                usleep(10000);
        ASSERT_FALSE(privsep_healthy(&why));
        struct agent_config cfg = { .node_id = "n-egress", .egress_enabled = true };
        _cleanup_free_ char *reply = remove_sandbox(&cfg, SBX, "169.254.90.7");
        ASSERT_CONTAINS(reply, "\"ok\":false");
        ASSERT_CONTAINS(reply, "egress process is not running");
        /* The table stays as it was. */
        free(dump);
        dump = nft_dump();
        ASSERT_CONTAINS(dump, "sbx_" SBX);
}

TEST(allowlist_expansion_is_bounded_and_fails_closed) {
        /* many.paddock.test has 40 addresses (over the per-name cap); 40 names of 30
         * addresses each (under the per-name cap) add up past the whole table. */
        size_t cap = 64 * 1024, len = 0;
        _cleanup_free_ char *hosts = xmalloc(cap);
        for (int i = 0; i < 40; i++)
                len += (size_t) snprintf(hosts + len, cap - len, "10.9.0.%d many.paddock.test\n", i + 1);
        for (int h = 0; h < 40; h++)
                for (int i = 0; i < 30; i++)
                        len += (size_t) snprintf(hosts + len, cap - len, "10.%d.1.%d h%d.paddock.test\n", 10 + h, i + 1, h);
        ASSERT_TRUE(len < cap - 1);
        egress_setup(hosts);
        struct agent_config cfg = { .node_id = "n-egress", .egress_enabled = true };

        _cleanup_free_ char *a = apply_restricted(&cfg, SBX, "169.254.90.7", "\"169.254.77.10\",\"h1.paddock.test\"");
        ASSERT_CONTAINS(a, "\"ok\":true");
        _cleanup_free_ char *dump = nft_dump();
        ASSERT_CONTAINS(dump, "169.254.77.10");

        _cleanup_free_ char *b = apply_restricted(&cfg, SBX, "169.254.90.7", "\"many.paddock.test\"");
        ASSERT_CONTAINS(b, "\"ok\":false");
        ASSERT_CONTAINS(b, "many.paddock.test resolves to more than 32 addresses");

        /* 40 names x 30 addresses, then a literal: the old code wrote past its array here. */
        size_t blen = 0, bcap = 8192;
        _cleanup_free_ char *body = xmalloc(bcap);
        blen += (size_t) snprintf(body + blen, bcap - blen,
                                  "{\"type\":\"egress.apply\",\"sandbox_id\":\"" SBX "\",\"ip\":\"169.254.90.7\","
                                  "\"mode\":\"restricted\",\"allow\":[");
        for (int h = 0; h < 40; h++)
                blen += (size_t) snprintf(body + blen, bcap - blen, "\"h%d.paddock.test\",", h);
        blen += (size_t) snprintf(body + blen, bcap - blen, "\"169.254.77.99\"]}");
        _cleanup_free_ char *c = agent_handle(&cfg, body, blen);
        ASSERT_CONTAINS(c, "\"ok\":false");
        ASSERT_CONTAINS(c, "more than 1024 addresses");
        /* Failed closed: the policy in force is the last one that was confirmed. */
        free(dump);
        dump = nft_dump();
        ASSERT_CONTAINS(dump, "169.254.77.10");
        ASSERT_FALSE(strstr(dump, "169.254.77.99"));
        ASSERT_FALSE(strstr(dump, "10.9.0."));
}

/* systemd's watchdog is fed on a timer: a queue that never goes idle must not starve it
 * (the agent used to ping only after a second without messages). */
TEST_FULL(watchdog_is_fed_while_busy, 60) {
        struct client c = { 0 };
        char npath[300];
        amqptest_need_broker();
        write_conf(NULL);
        int nfd = notify_socket_env("wd-notify.sock", SOCK_NONBLOCK, npath);
        setenv("WATCHDOG_USEC", "1000000", 1);     /* fed every 0.5 s */
        start_agent();
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        client_open(&c);
        wait_agent_ready(&c);

        char buf[256];
        while (recv(nfd, buf, sizeof(buf), 0) > 0)
                ;       /* what came before the flood */
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int sent = 0;
        do {
                char corr[32];
                _cleanup_free_ char *r = NULL;
                snprintf(corr, sizeof(corr), "busy-%d", sent++);
                ASSERT_EQ(publish(&c, node_id, "{\"type\":\"ping\"}", corr, &r), 0);
                ASSERT_CONTAINS(r, "\"ok\":true");
                clock_gettime(CLOCK_MONOTONIC, &t1);
        } while (t1.tv_sec - t0.tv_sec < 3);
        int pings = 0;
        ssize_t n;
        while ((n = recv(nfd, buf, sizeof(buf) - 1, 0)) > 0) {
                buf[n] = 0;
                if (strstr(buf, "WATCHDOG=1"))
                        pings++;
        }
        close(nfd);
        /* About six in three seconds; the old idle-only feeding sent none. */
        if (pings < 4)
                test_fail(__FILE__, __LINE__, "%d watchdog pings during %d back-to-back requests in 3 s", pings, sent);
        client_close(&c);
}
