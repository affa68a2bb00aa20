/* paddock-init (nodeagent/paddock-init/) outside any container: the agent runs as a child
 * subreaper (PADDOCK_INIT_SUBREAPER=1) on a socket in a temp dir, and the host-side client
 * (controld/agent-client.c) drives it. No Docker, no services. Each test starts its own agent. */
#include <arpa/inet.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guest-conn.h"
#include "cleanup.h"
#include "testlib.h"

DEFINE_TRIVIAL_CLEANUP_FUNC(DIR *, closedir)

#define SECRET "correct horse battery staple"
#define T 10000 /* ms per frame */
#define PI_TEST_CONNS 70 /* the agent takes 64 */

static pid_t agent_pid;
static char sock_path[256];

static void stop_agent(void *ud _unused_) {
        if (agent_pid > 0) {
                kill(agent_pid, SIGKILL);
                waitpid(agent_pid, NULL, 0);
                agent_pid = 0;
        }
}

static double ms_since(const struct timespec *t0) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (t.tv_sec - t0->tv_sec) * 1e3 + (t.tv_nsec - t0->tv_nsec) / 1e6;
}

static void start_agent(void) {
        const char *dir = test_tmpdir();
        char secret[300], log[300];
        snprintf(secret, sizeof(secret), "%s/secret", dir);
        snprintf(log, sizeof(log), "%s/agent.log", dir);
        snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", dir);
        int fd = open(secret, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, SECRET "\n", strlen(SECRET) + 1), (ssize_t) strlen(SECRET) + 1);
        close(fd);
        setenv("PADDOCK_INIT_SUBREAPER", "1", 1);
        const char *bin = test_build_path("paddock-init");
        const char *argv[] = { bin, "--socket", sock_path, "--secret-file", secret, NULL };
        agent_pid = test_spawn_logged(bin, argv, log);
        test_on_exit(stop_agent, NULL);
        struct stat st;
        for (int i = 0; i < 500 && stat(sock_path, &st) < 0; i++)
                usleep(10000);
        ASSERT_OK(stat(sock_path, &st) < 0 ? -errno : 0);
        /* the secret file is left as it was: read only */
        ASSERT_OK(stat(secret, &st) < 0 ? -errno : 0);
}

/* Ends the agent with SIGTERM as the runtime would: it must exit 0 and have logged no
 * sanitizer report (build/san runs a sanitized agent; LeakSanitizer reports at its exit). */
static void finish_agent(void) {
        char log[300];
        snprintf(log, sizeof(log), "%s/agent.log", test_tmpdir());
        ASSERT_OK(kill(agent_pid, SIGTERM));
        int st = 0;
        pid_t w = 0;
        for (int i = 0; i < 1500 && (w = waitpid(agent_pid, &st, WNOHANG)) == 0; i++)
                usleep(10000);
        ASSERT_EQ(w, agent_pid);
        agent_pid = 0;
        _cleanup_free_ char *text = NULL;
        char *argv[] = { "cat", log, NULL };
        ASSERT_OK(test_run_capture(argv, &text, 1 << 20));
        if (strstr(text, "Sanitizer") || strstr(text, "runtime error"))
                test_fail(__FILE__, __LINE__, "the agent logged a sanitizer report:\n%s", text);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                test_fail(__FILE__, __LINE__, "the agent ended with status 0x%x:\n%s", st, text);
}

static struct guest_client *conn(void) {
        struct guest_client *c = NULL;
        struct err e = { 0 };
        int r = guest_client_connect(sock_path, SECRET, T, &c, &e);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "connect: %s %s", strerror(-r), e.message);
        return c;
}

static void recv_frame_at(int line, struct guest_client *c, struct guest_frame *f) {
        struct err e = { 0 };
        int r = guest_client_recv(c, T, f, &e);
        if (r < 0)
                test_fail(__FILE__, line, "recv: %s %s", strerror(-r), e.message);
}
#define recv_frame(c, f) recv_frame_at(__LINE__, (c), (f))

static void send_msg(struct guest_client *c, const struct pj_agent_msg *m) { ASSERT_OK(guest_client_send(c, m, T)); }

static char *env_default[] = { "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", NULL };

/* SPAWN argv on channel id; returns the pid (fails the test on ERROR). extra: optional fields. */
static pid_t spawn(struct guest_client *c, uint32_t id, char **argv, const struct pj_agent_fields *extra) {
        size_t n = 0;
        while (argv[n])
                n++;
        struct pj_agent_msg m = { .type = PJ_AGENT_SPAWN, .id = id, .argv = argv, .n_argv = n, .env = env_default,
                                  .n_env = 2 };
        if (extra)
                m.f = *extra;
        send_msg(c, &m);
        struct guest_frame f = { 0 };
        recv_frame(c, &f);
        if (f.m.type == PJ_AGENT_ERROR)
                test_fail(__FILE__, __LINE__, "SPAWN %s: %s", argv[0], f.m.f.message);
        ASSERT_EQ(f.m.type, PJ_AGENT_SPAWNED);
        ASSERT_EQ(f.m.id, id);
        pid_t pid = (pid_t) f.m.f.pid;
        guest_frame_done(&f);
        return pid;
}

struct run {
        char out[65536], err[65536];
        size_t n_out, n_err;
        int code, signo;
};

/* Collects OUTPUT on id until EXIT. */
static void collect(struct guest_client *c, uint32_t id, struct run *r) {
        memset(r, 0, sizeof(*r));
        for (;;) {
                struct guest_frame f = { 0 };
                recv_frame(c, &f);
                ASSERT_EQ(f.m.id, id);
                if (f.m.type == PJ_AGENT_OUTPUT) {
                        char *dst = f.m.f.stream == 1 ? r->out : r->err;
                        size_t *n = f.m.f.stream == 1 ? &r->n_out : &r->n_err;
                        size_t k = f.m.data_len < sizeof(r->out) - 1 - *n ? f.m.data_len : sizeof(r->out) - 1 - *n;
                        memcpy(dst + *n, f.m.data, k);
                        *n += k;
                } else if (f.m.type == PJ_AGENT_EXIT) {
                        r->code = f.m.f.code;
                        r->signo = (int) f.m.f.signo;
                        guest_frame_done(&f);
                        return;
                } else
                        test_fail(__FILE__, __LINE__, "unexpected %s: %s", pj_agent_type_name(f.m.type),
                                  f.m.f.message ? f.m.f.message : "");
                guest_frame_done(&f);
        }
}

/* Reads OUTPUT on id until the stdout seen so far contains want. */
static void wait_output(struct guest_client *c, uint32_t id, const char *want, char *acc, size_t cap) {
        size_t n = strlen(acc);
        while (!strstr(acc, want)) {
                struct guest_frame f = { 0 };
                recv_frame(c, &f);
                ASSERT_EQ(f.m.type, PJ_AGENT_OUTPUT);
                ASSERT_EQ(f.m.id, id);
                size_t k = f.m.data_len < cap - 1 - n ? f.m.data_len : cap - 1 - n;
                memcpy(acc + n, f.m.data, k);
                n += k;
                acc[n] = 0;
                guest_frame_done(&f);
        }
}

TEST(exec_echo_output_and_exit_code) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct run r;
        spawn(c, 1, (char *[]) { "echo", "hi", NULL }, NULL);
        collect(c, 1, &r);
        ASSERT_STREQ(r.out, "hi\n");
        ASSERT_EQ(r.code, 0);
        spawn(c, 2, (char *[]) { "sh", "-c", "echo out; echo err >&2; exit 3", NULL }, NULL);
        collect(c, 2, &r);
        ASSERT_STREQ(r.out, "out\n");
        ASSERT_STREQ(r.err, "err\n");
        ASSERT_EQ(r.code, 3);
        /* env is exactly the request's */
        spawn(c, 3, (char *[]) { "sh", "-c", "env | sort", NULL }, NULL);
        collect(c, 3, &r);
        ASSERT_CONTAINS(r.out, "HOME=/tmp\n");
        ASSERT_TRUE(strstr(r.out, "PADDOCK_INIT_SUBREAPER") == NULL);
        /* a program that is not there */
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .id = 4, .argv = (char *[]) { "no-such-prog", NULL },
                                             .n_argv = 1, .env = env_default, .n_env = 2 });
        struct guest_frame f = { 0 };
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOENT);
        ASSERT_CONTAINS(f.m.f.message, "no-such-prog");
        guest_frame_done(&f);
        /* cwd */
        spawn(c, 5, (char *[]) { "pwd", NULL }, &(struct pj_agent_fields) { .cwd = "/tmp" });
        collect(c, 5, &r);
        ASSERT_STREQ(r.out, "/tmp\n");
        /* numeric uid/gid (CI runs as root; elsewhere the agent cannot switch) */
        if (geteuid() == 0) {
                spawn(c, 6, (char *[]) { "sh", "-c", "echo $(id -u) $(id -g) $(id -G)", NULL },
                      &(struct pj_agent_fields) { .present = PJ_AGENT_BIT(PJ_AGENT_T_UID) | PJ_AGENT_BIT(PJ_AGENT_T_GID),
                                                  .uid = 65534, .gid = 65533 });
                collect(c, 6, &r);
                ASSERT_STREQ(r.out, "65534 65533 65533\n");
        }
        finish_agent();
}

/* A command starts clean: none of the descriptors the agent inherited (here its log file,
 * which the test's spawner opens without O_CLOEXEC), no blocked or ignored signal (the agent
 * blocks the ones its signalfd reads and ignores SIGPIPE). */
/* Sets a signal's disposition through the kernel, as any parent may: the C library refuses
 * its reserved signals (32 and 33), yet an ignored one passes through exec all the same. */
static void raw_disposition(int sig, void (*h)(int)) {
        struct {
                void (*handler)(int);
                unsigned long flags;
                void (*restorer)(void);
                uint64_t mask;
        } a = { .handler = h };
        ASSERT_EQ(syscall(SYS_rt_sigaction, sig, &a, NULL, sizeof(a.mask)), 0);
}

TEST(commands_inherit_no_descriptor_and_no_signal_state) {
        /* The agent's parent ignores what a background job's shell and a CI harness (seen)
         * ignore; none of it may reach a command. */
        static const int inherited[] = { SIGINT, SIGQUIT, 32, 33 };
        for (size_t i = 0; i < ELEMENTSOF(inherited); i++)
                raw_disposition(inherited[i], SIG_IGN);
        start_agent();
        for (size_t i = 0; i < ELEMENTSOF(inherited); i++)
                raw_disposition(inherited[i], SIG_DFL);
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct run r;
        spawn(c, 1, (char *[]) { "sh", "-c", "ls -l /proc/self/fd/ | grep -c agent.log; grep -E '^Sig(Blk|Ign):' /proc/self/status", NULL }, NULL);
        collect(c, 1, &r);
        ASSERT_EQ(r.code, 0);
        if (strncmp(r.out, "0\n", 2) != 0)
                test_fail(__FILE__, __LINE__, "a command holds the agent's log file:\n%s", r.out);
        ASSERT_CONTAINS(r.out, "SigBlk:\t0000000000000000\n");
        ASSERT_CONTAINS(r.out, "SigIgn:\t0000000000000000\n");
        finish_agent();
}

/* The plain build's agent is static (no PT_INTERP): it runs in any image. The sanitized one is
 * dynamic by design (the sanitizer runtimes are shared libraries). */
TEST(agent_binary_is_static) {
        const char *bin = test_build_path("paddock-init");
        int fd = open(bin, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        Elf64_Ehdr eh;
        ASSERT_EQ(pread(fd, &eh, sizeof(eh), 0), (ssize_t) sizeof(eh));
        ASSERT_TRUE(memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0);
        bool interp = false;
        for (int i = 0; i < eh.e_phnum; i++) {
                Elf64_Phdr ph;
                ASSERT_EQ(pread(fd, &ph, sizeof(ph), (off_t) (eh.e_phoff + (size_t) i * eh.e_phentsize)), (ssize_t) sizeof(ph));
                interp |= ph.p_type == PT_INTERP;
        }
        close(fd);
        const char *b = getenv("PADDOCK_BUILD");
        if (b && strstr(b, "san")) {
                printf("  sanitized build: the agent is %s\n", interp ? "dynamic, as designed" : "static");
                return;
        }
        ASSERT_FALSE(interp);
}

TEST(stdin_line_by_line) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        spawn(c, 7, (char *[]) { "cat", NULL }, &(struct pj_agent_fields) { .present = PJ_AGENT_BIT(PJ_AGENT_T_STDIN),
                                                                             .stdin_pipe = true });
        char acc[4096] = "";
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_STDIN, .id = 7, .data = (const uint8_t *) "one\n", .data_len = 4 });
        wait_output(c, 7, "one\n", acc, sizeof(acc));
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_STDIN, .id = 7, .data = (const uint8_t *) "two\n", .data_len = 4 });
        wait_output(c, 7, "one\ntwo\n", acc, sizeof(acc));
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_STDIN_CLOSE, .id = 7 });
        struct run r;
        collect(c, 7, &r);
        ASSERT_EQ(r.code, 0);
        finish_agent();
}

TEST(sigint_ends_sleep) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        spawn(c, 3, (char *[]) { "sleep", "100", NULL }, NULL);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_SIGNAL, .id = 3, .f.signo = SIGINT });
        struct run r;
        collect(c, 3, &r);
        ASSERT_EQ(r.code, -1);
        ASSERT_EQ(r.signo, SIGINT);
        finish_agent();
}

/* base_env layers the request's env over the agent's own; a missing cwd is an ERROR naming it;
 * STDIN and SIGNAL by pid work from another connection and are answered OK; KILL takes what
 * left the process group with setsid too. */
TEST(base_env_cwd_error_and_pid_addressing) {
        setenv("PADDOCK_TEST_BASE", "from-agent", 1);
        setenv("PADDOCK_TEST_OVER", "agent", 1);
        start_agent();
        unsetenv("PADDOCK_TEST_BASE");
        unsetenv("PADDOCK_TEST_OVER");
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct pj_agent_fields base = { .present = PJ_AGENT_BIT(PJ_AGENT_T_BASE_ENV), .base_env = true };
        char *over[] = { "PADDOCK_TEST_OVER=request", NULL };
        struct pj_agent_msg m = { .type = PJ_AGENT_SPAWN, .id = 1,
                                  .argv = (char *[]) { "/bin/sh", "-c", "echo $PADDOCK_TEST_BASE $PADDOCK_TEST_OVER; env | grep -c PADDOCK_INIT_ || true", NULL },
                                  .n_argv = 3, .env = over, .n_env = 1, .f = base };
        send_msg(c, &m);
        struct guest_frame f = { 0 };
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_SPAWNED);
        guest_frame_done(&f);
        struct run r;
        collect(c, 1, &r);
        ASSERT_STREQ(r.out, "from-agent request\n0\n");
        /* Without base_env the request's env is all there is. */
        spawn(c, 2, (char *[]) { "/bin/sh", "-c", "echo ${PADDOCK_TEST_BASE-unset}", NULL }, NULL);
        collect(c, 2, &r);
        ASSERT_STREQ(r.out, "unset\n");

        struct pj_agent_fields cwd = { .cwd = "/no/such/dir" };
        m = (struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .id = 3, .argv = (char *[]) { "pwd", NULL }, .n_argv = 1,
                                    .env = env_default, .n_env = 2, .f = cwd };
        send_msg(c, &m);
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOENT);
        ASSERT_STREQ(f.m.f.path, "/no/such/dir");
        guest_frame_done(&f);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .id = 3, .argv = (char *[]) { "no-such-program-x", NULL },
                                    .n_argv = 1, .env = env_default, .n_env = 2 };
        send_msg(c, &m);
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOENT);
        ASSERT_NULL(f.m.f.path);
        guest_frame_done(&f);

        /* A process with stdin, fed and signalled from a second connection by pid. */
        struct pj_agent_fields in = { .present = PJ_AGENT_BIT(PJ_AGENT_T_STDIN), .stdin_pipe = true };
        pid_t cat = spawn(c, 4, (char *[]) { "cat", NULL }, &in);
        _cleanup_(guest_client_freep) struct guest_client *c2 = conn();
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_STDIN, .id = 9, .data = (const uint8_t *) "by pid\n", .data_len = 7,
                                              .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = (uint32_t) cat } });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        ASSERT_EQ(f.m.id, 9);
        guest_frame_done(&f);
        char acc[256] = "";
        wait_output(c, 4, "by pid\n", acc, sizeof(acc));
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_STDIN_CLOSE, .id = 10,
                                              .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = (uint32_t) cat } });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        guest_frame_done(&f);
        collect(c, 4, &r);
        ASSERT_EQ(r.code, 0);
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_SIGNAL, .id = 11,
                                              .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = 999999, .signo = 15 } });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ESRCH);
        guest_frame_done(&f);

        /* KILL by pid takes a setsid escapee too. */
        pid_t tree = spawn(c, 5, (char *[]) { "/bin/sh", "-c", "setsid sleep 77 & echo started; wait", NULL }, NULL);
        acc[0] = 0;
        wait_output(c, 5, "started\n", acc, sizeof(acc));
        usleep(200000);
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_SIGNAL, .id = 12,
                                              .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PID), .pid = (uint32_t) tree, .signo = 9 } });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        guest_frame_done(&f);
        collect(c, 5, &r);
        ASSERT_EQ(r.signo, SIGKILL);
        usleep(300000);
        /* no "sleep 77" is left among this test's processes */
        _cleanup_free_ char *left = NULL;
        ASSERT_EQ(test_run_capture((char *const[]) { "pgrep", "-f", "^sleep 77$", NULL }, &left, 4096), 1);
        finish_agent();
}

TEST(reattach_replays_output) {
        start_agent();
        struct guest_client *c = conn();
        pid_t pid = spawn(c, 1, (char *[]) { "sh", "-c", "echo one; sleep 0.3; echo two", NULL },
                          &(struct pj_agent_fields) { .tag = "job" });
        guest_client_free(c); /* gone: the process keeps running */
        usleep(800 * 1000);
        _cleanup_(guest_client_freep) struct guest_client *c2 = conn();
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_LIST, .id = 2 });
        struct guest_frame f = { 0 };
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_PROCS);
        ASSERT_EQ(f.m.n_entries, 1);
        ASSERT_EQ(f.m.entries[0].pid, pid);
        ASSERT_STREQ(f.m.entries[0].tag, "job");
        ASSERT_FALSE(f.m.entries[0].running);
        ASSERT_EQ(f.m.entries[0].code, 0);
        guest_frame_done(&f);
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_ATTACH, .id = 9, .f.pid = (uint32_t) pid });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        guest_frame_done(&f);
        struct run r;
        collect(c2, 9, &r);
        ASSERT_STREQ(r.out, "one\ntwo\n");
        ASSERT_EQ(r.code, 0);

        /* kill_on_detach: the process dies with its connection */
        struct guest_client *c3 = conn();
        pid_t p2 = spawn(c3, 1, (char *[]) { "sleep", "100", NULL },
                         &(struct pj_agent_fields) { .present = PJ_AGENT_BIT(PJ_AGENT_T_KILL_ON_DETACH), .kill_on_detach = true });
        guest_client_free(c3);
        usleep(300 * 1000);
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_ATTACH, .id = 10, .f.pid = (uint32_t) p2 });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        guest_frame_done(&f);
        collect(c2, 10, &r);
        ASSERT_EQ(r.signo, SIGKILL);
        finish_agent();
}

TEST(pty_tty_and_resize) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct pj_agent_fields pty = { .present = PJ_AGENT_BIT(PJ_AGENT_T_ROWS) | PJ_AGENT_BIT(PJ_AGENT_T_COLS), .rows = 24,
                                       .cols = 80 };
        struct run r;
        spawn(c, 1, (char *[]) { "tty", NULL }, &pty);
        collect(c, 1, &r);
        ASSERT_TRUE(strncmp(r.out, "/dev/pts/", 9) == 0);
        ASSERT_EQ(r.n_err, 0); /* a PTY has one stream */

        spawn(c, 2, (char *[]) { "sh", "-c", "stty size; read x; stty size", NULL }, &pty);
        char acc[4096] = "";
        wait_output(c, 2, "24 80", acc, sizeof(acc));
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_RESIZE, .id = 2, .f = { .rows = 50, .cols = 132 } });
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_STDIN, .id = 2, .data = (const uint8_t *) "go\n", .data_len = 3 });
        wait_output(c, 2, "50 132", acc, sizeof(acc));
        collect(c, 2, &r);
        ASSERT_EQ(r.code, 0);
        finish_agent();
}

/* State and parent of the process /proc/<name>; false when it is not a process (or gone). */
static bool proc_state(const char *name, char *ret_state, int *ret_ppid) {
        char p[300], buf[512];
        if (name[0] < '0' || name[0] > '9')
                return false;
        snprintf(p, sizeof(p), "/proc/%s/stat", name);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        ssize_t k = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (k <= 0)
                return false;
        buf[k] = 0;
        char *rp = strrchr(buf, ')'); /* a name may hold ")" */
        return rp && sscanf(rp + 2, "%c %d", ret_state, ret_ppid) == 2;
}

/* Zombie children of pid, from /proc. */
static int zombies_of(pid_t parent, int *ret_children) {
        _cleanup_(closedirp) DIR *d = opendir("/proc");
        struct dirent *de;
        int z = 0, n = 0;
        while ((de = readdir(d))) {
                char state;
                int ppid;
                if (!proc_state(de->d_name, &state, &ppid) || ppid != parent)
                        continue;
                n++;
                z += state == 'Z';
        }
        *ret_children = n;
        return z;
}

TEST(orphans_are_reaped) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct run r;
        spawn(c, 1, (char *[]) { "sh", "-c", "for i in $(seq 100); do sleep 0.2 & done", NULL }, NULL);
        collect(c, 1, &r);
        ASSERT_EQ(r.code, 0);
        int z = 0, kids = 0;
        for (int i = 0; i < 50; i++) {
                usleep(100 * 1000);
                z = zombies_of(agent_pid, &kids);
                if (kids == 0)
                        break;
        }
        printf("  after 100 orphans: %d children of the agent left, %d zombies\n", kids, z);
        ASSERT_EQ(z, 0);
        ASSERT_EQ(kids, 0);

        /* the same with orphans that do not hold the output pipe: EXIT comes at once, and the
         * orphans are seen reparented to the agent (the subreaper) before they are reaped */
        spawn(c, 2, (char *[]) { "sh", "-c", "for i in $(seq 100); do sleep 0.5 >/dev/null 2>&1 & done", NULL }, NULL);
        collect(c, 2, &r);
        z = zombies_of(agent_pid, &kids);
        printf("  right after the exit: %d children of the agent (orphans reparented to it)\n", kids);
        ASSERT_GE(kids, 50);
        for (int i = 0; i < 50 && kids; i++) {
                usleep(100 * 1000);
                z = zombies_of(agent_pid, &kids);
        }
        ASSERT_EQ(z, 0);
        ASSERT_EQ(kids, 0);
        finish_agent();
}

TEST(wrong_secret_is_refused) {
        start_agent();
        struct guest_client *c = NULL;
        struct err e = { 0 };
        ASSERT_EQ(guest_client_connect(sock_path, "wrong", T, &c, &e), -EACCES);
        ASSERT_EQ(guest_client_connect(sock_path, SECRET "x", T, &c, &e), -EACCES);
        ASSERT_NULL(c);
        guest_client_free(conn());
        finish_agent();
}

TEST(huge_frame_closes_only_that_connection) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *bystander = conn();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        uint8_t h[PJ_AGENT_HEADER_SIZE];
        pj_agent_header_encode(h, &(struct pj_agent_header) { .len = 0xffffffffu, .type = PJ_AGENT_DATA, .id = 1 });
        ASSERT_OK(guest_client_send_raw(c, h, sizeof(h), T));
        struct guest_frame f = { 0 };
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, EPROTO);
        ASSERT_CONTAINS(f.m.f.message, "limit");
        guest_frame_done(&f);
        ASSERT_EQ(guest_client_recv(c, T, &f, NULL), -ECONNRESET);

        /* garbage before HELLO */
        {
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_un sa = { .sun_family = AF_UNIX };
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
                ASSERT_OK(connect(fd, (struct sockaddr *) &sa, sizeof(sa)));
                char junk[4096];
                unsigned seed = 5;
                for (size_t i = 0; i < sizeof(junk); i++)
                        junk[i] = (char) rand_r(&seed);
                ssize_t _unused_ w = write(fd, junk, sizeof(junk));
                char b[256];
                while (read(fd, b, sizeof(b)) > 0)
                        ;
                close(fd);
        }
        /* the agent still serves, the others and new ones */
        struct run r;
        spawn(bystander, 1, (char *[]) { "echo", "still", NULL }, NULL);
        collect(bystander, 1, &r);
        ASSERT_STREQ(r.out, "still\n");
        _cleanup_(guest_client_freep) struct guest_client *c2 = conn();
        spawn(c2, 1, (char *[]) { "true", NULL }, NULL);
        collect(c2, 1, &r);
        ASSERT_EQ(r.code, 0);
        finish_agent();
}

TEST(symlink_socket_is_refused) {
        start_agent();
        char link[300];
        snprintf(link, sizeof(link), "%s/link.sock", test_tmpdir());
        ASSERT_OK(symlink(sock_path, link));
        struct guest_client *c = NULL;
        ASSERT_EQ(guest_client_connect(link, SECRET, T, &c, NULL), -ENOTSOCK);
        char file[300];
        snprintf(file, sizeof(file), "%s/secret", test_tmpdir());
        ASSERT_EQ(guest_client_connect(file, SECRET, T, &c, NULL), -ENOTSOCK);
        guest_client_free(conn());
        finish_agent();
}

static void expect_ok(struct guest_client *c, uint32_t id) {
        struct guest_frame f = { 0 };
        recv_frame(c, &f);
        if (f.m.type == PJ_AGENT_ERROR)
                test_fail(__FILE__, __LINE__, "ERROR %u: %s", f.m.f.err, f.m.f.message);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        ASSERT_EQ(f.m.id, id);
        guest_frame_done(&f);
}

TEST(files_round_trip) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        char dir[300], path[400], dir2[400], moved[500];
        snprintf(dir, sizeof(dir), "%s/files", test_tmpdir());
        snprintf(path, sizeof(path), "%s/a/b/f.txt", dir);
        snprintf(dir2, sizeof(dir2), "%s/x/y", dir);
        snprintf(moved, sizeof(moved), "%s/g.txt", dir2);
        struct guest_frame f = { 0 };

        /* WRITE in two DATA chunks, parents made, mode applied */
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_WRITE, .id = 1,
                                             .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_MODE) | PJ_AGENT_BIT(PJ_AGENT_T_PARENTS),
                                                    .path = path, .mode = 0600, .parents = true } });
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = 1, .data = (const uint8_t *) "hel", .data_len = 3 });
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = 1, .data = (const uint8_t *) "lo\0!", .data_len = 4 });
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_END, .id = 1 });
        expect_ok(c, 1);

        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_STAT, .id = 2, .f.path = path });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_STAT_OK);
        ASSERT_EQ(f.m.f.ftype, PJ_AGENT_FT_FILE);
        ASSERT_EQ(f.m.f.size, 7);
        ASSERT_EQ(f.m.f.mode, 0600);
        ASSERT_TRUE(f.m.f.mtime_ns > 1600000000LL * 1000000000LL);
        guest_frame_done(&f);

        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_READ, .id = 3, .f.path = path });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_DATA);
        ASSERT_EQ(f.m.data_len, 7);
        ASSERT_TRUE(memcmp(f.m.data, "hello\0!", 7) == 0);
        guest_frame_done(&f);
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_END);
        guest_frame_done(&f);

        /* a big file comes back in several chunks, whole */
        char big[300];
        snprintf(big, sizeof(big), "%s/big", dir);
        {
                int fd = open(big, O_WRONLY | O_CREAT, 0644);
                uint8_t *buf = xmalloc(3 << 20);
                for (size_t i = 0; i < (3u << 20); i++)
                        buf[i] = (uint8_t) (i * 7);
                ASSERT_EQ(write(fd, buf, 3 << 20), 3 << 20);
                close(fd);
                send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_READ, .id = 4, .f.path = big });
                size_t got = 0;
                for (;;) {
                        recv_frame(c, &f);
                        if (f.m.type == PJ_AGENT_END)
                                break;
                        ASSERT_EQ(f.m.type, PJ_AGENT_DATA);
                        ASSERT_TRUE(got + f.m.data_len <= (3u << 20));
                        ASSERT_TRUE(memcmp(f.m.data, buf + got, f.m.data_len) == 0);
                        got += f.m.data_len;
                        guest_frame_done(&f);
                }
                guest_frame_done(&f);
                ASSERT_EQ(got, 3 << 20);
                free(buf);
        }

        char sub[400];
        snprintf(sub, sizeof(sub), "%s/a/b", dir);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_LISTDIR, .id = 5, .f.path = sub });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_DIRENTS);
        ASSERT_EQ(f.m.n_entries, 1);
        ASSERT_STREQ(f.m.entries[0].name, "f.txt");
        ASSERT_EQ(f.m.entries[0].ftype, PJ_AGENT_FT_FILE);
        ASSERT_EQ(f.m.entries[0].size, 7);
        guest_frame_done(&f);
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_END);
        ASSERT_FALSE(f.m.f.truncated);
        guest_frame_done(&f);

        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_MKDIR, .id = 6,
                                             .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_PARENTS), .path = dir2, .parents = true } });
        expect_ok(c, 6);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_MKDIR, .id = 7, .f.path = dir2 });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, EEXIST);
        guest_frame_done(&f);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_MOVE, .id = 8, .f = { .path = path, .to = moved } });
        expect_ok(c, 8);
        struct stat st;
        ASSERT_OK(stat(moved, &st));
        ASSERT_EQ(st.st_size, 7);

        /* not recursive: a non-empty directory stays */
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_REMOVE, .id = 9, .f.path = dir });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOTEMPTY);
        guest_frame_done(&f);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_REMOVE, .id = 10,
                                             .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_RECURSIVE), .path = dir, .recursive = true } });
        expect_ok(c, 10);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_STAT, .id = 11, .f.path = dir });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOENT);
        guest_frame_done(&f);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_READ, .id = 12, .f.path = "/no/such/file" });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOENT);
        ASSERT_CONTAINS(f.m.f.message, "/no/such/file");
        guest_frame_done(&f);
        finish_agent();
}

/* A TCP echo server for one connection: echoes until EOF, then closes. */
static void *echo_server(void *arg) {
        int lfd = *(int *) arg;
        int fd = accept(lfd, NULL, NULL);
        char b[4096];
        ssize_t n;
        while ((n = read(fd, b, sizeof(b))) > 0)
                if (write(fd, b, (size_t) n) != n)
                        break;
        close(fd);
        return NULL;
}

/* WATCH: the directory's changes as EVENT frames; recursive takes the tree, new directories
 * included; the client's END or the directory's removal ends it. */
static void next_event(struct guest_client *c, uint32_t id, const char *path, uint8_t event) {
        for (;;) {
                struct guest_frame f = { 0 };
                recv_frame(c, &f);
                if (f.m.type == PJ_AGENT_ERROR)
                        test_fail(__FILE__, __LINE__, "ERROR %u: %s", f.m.f.err, f.m.f.message);
                ASSERT_EQ(f.m.type, PJ_AGENT_EVENT);
                ASSERT_EQ(f.m.id, id);
                bool match = !strcmp(f.m.f.path, path) && f.m.f.event == event;
                guest_frame_done(&f);
                if (match)
                        return;
        }
}

static void expect_end(struct guest_client *c, uint32_t id, bool truncated) {
        for (;;) {
                struct guest_frame f = { 0 };
                recv_frame(c, &f);
                ASSERT_EQ(f.m.id, id);
                if (f.m.type == PJ_AGENT_EVENT) {
                        guest_frame_done(&f);
                        continue;
                }
                ASSERT_EQ(f.m.type, PJ_AGENT_END);
                ASSERT_EQ(f.m.f.truncated, truncated);
                guest_frame_done(&f);
                return;
        }
}

TEST(watch_reports_changes_in_the_tree) {
        start_agent();
        char dir[300], p1[400], p2[400], sub[400], deep[400];
        snprintf(dir, sizeof(dir), "%s/w", test_tmpdir());
        ASSERT_OK(mkdir(dir, 0755) < 0 ? -errno : 0);
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_WATCH, .id = 1,
                                             .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_RECURSIVE), .path = dir,
                                                    .recursive = true } });
        expect_ok(c, 1);
        snprintf(p1, sizeof(p1), "%s/a.txt", dir);
        int fd = open(p1, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ASSERT_TRUE(fd >= 0);
        next_event(c, 1, "a.txt", PJ_AGENT_EV_CREATE);
        ASSERT_EQ(write(fd, "x", 1), 1);
        close(fd);
        next_event(c, 1, "a.txt", PJ_AGENT_EV_WRITE);
        ASSERT_OK(chmod(p1, 0600));
        next_event(c, 1, "a.txt", PJ_AGENT_EV_CHMOD);
        snprintf(p2, sizeof(p2), "%s/b.txt", dir);
        ASSERT_OK(rename(p1, p2));
        next_event(c, 1, "a.txt", PJ_AGENT_EV_RENAME);
        next_event(c, 1, "b.txt", PJ_AGENT_EV_CREATE);
        /* a directory made after the WATCH is watched too */
        snprintf(sub, sizeof(sub), "%s/sub", dir);
        ASSERT_OK(mkdir(sub, 0755));
        next_event(c, 1, "sub", PJ_AGENT_EV_CREATE);
        snprintf(deep, sizeof(deep), "%s/sub/deep.txt", dir);
        fd = open(deep, O_WRONLY | O_CREAT, 0644);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        next_event(c, 1, "sub/deep.txt", PJ_AGENT_EV_CREATE);
        ASSERT_OK(unlink(p2));
        next_event(c, 1, "b.txt", PJ_AGENT_EV_REMOVE);

        /* a second connection, not recursive, on the same directory: no sub/ events, and when
         * it ends the first one still gets its events (the kernel shares the watch) */
        _cleanup_(guest_client_freep) struct guest_client *c2 = conn();
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_WATCH, .id = 7, .f = { .path = dir } });
        expect_ok(c2, 7);
        fd = open(deep, O_WRONLY | O_TRUNC);
        ASSERT_TRUE(fd >= 0);
        close(fd);
        snprintf(p1, sizeof(p1), "%s/top.txt", dir);
        fd = open(p1, O_WRONLY | O_CREAT, 0644);
        close(fd);
        /* the first event on the plain watch is top.txt: sub/deep.txt's WRITE, earlier, was not sent */
        struct guest_frame f = { 0 };
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_EVENT);
        ASSERT_STREQ(f.m.f.path, "top.txt");
        ASSERT_EQ(f.m.f.event, PJ_AGENT_EV_CREATE);
        ASSERT_EQ(f.m.f.ftype, PJ_AGENT_FT_FILE);
        guest_frame_done(&f);
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_END, .id = 7 });
        expect_end(c2, 7, false);
        ASSERT_OK(unlink(p1));
        next_event(c, 1, "top.txt", PJ_AGENT_EV_REMOVE);

        /* refusals */
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_WATCH, .id = 8, .f = { .path = deep } });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOTDIR);
        guest_frame_done(&f);
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_WATCH, .id = 9, .f = { .path = "/no/such/dir" } });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ENOENT);
        guest_frame_done(&f);
        for (uint32_t i = 0; i < 16; i++) {
                send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_WATCH, .id = 100 + i, .f = { .path = dir } });
                expect_ok(c2, 100 + i);
        }
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_WATCH, .id = 200, .f = { .path = dir } });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, EMFILE);
        guest_frame_done(&f);

        /* the watched directory goes: the watch ends (not truncated) */
        ASSERT_OK(unlink(deep));
        ASSERT_OK(rmdir(sub));
        ASSERT_OK(rmdir(dir));
        expect_end(c, 1, false);
        finish_agent();
}

TEST(forward_tcp_both_ways) {
        start_agent();
        int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        ASSERT_OK(bind(lfd, (struct sockaddr *) &sa, sizeof(sa)));
        ASSERT_OK(listen(lfd, 1));
        socklen_t sl = sizeof(sa);
        getsockname(lfd, (struct sockaddr *) &sa, &sl);
        pthread_t th;
        pthread_create(&th, NULL, echo_server, &lfd);

        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct guest_frame f = { 0 };
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_FORWARD, .id = 5, .f.port = ntohs(sa.sin_port) });
        expect_ok(c, 5);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = 5, .data = (const uint8_t *) "ping\n", .data_len = 5 });
        char acc[64] = "";
        size_t n = 0;
        while (n < 5) {
                recv_frame(c, &f);
                ASSERT_EQ(f.m.type, PJ_AGENT_DATA);
                memcpy(acc + n, f.m.data, f.m.data_len);
                n += f.m.data_len;
                guest_frame_done(&f);
        }
        ASSERT_STREQ(acc, "ping\n");
        /* half-close: the server sees EOF, closes, we get END */
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_END, .id = 5 });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_END);
        ASSERT_EQ(f.m.id, 5);
        guest_frame_done(&f);
        pthread_join(th, NULL);
        close(lfd);

        /* a closed port */
        int port = test_free_port();
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_FORWARD, .id = 6, .f.port = (uint32_t) port });
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, ECONNREFUSED);
        guest_frame_done(&f);
        finish_agent();
}

/* The agent's resident memory in KiB, from /proc. */
static long agent_rss_kib(void) {
        char p[64], buf[4096];
        snprintf(p, sizeof(p), "/proc/%d/status", agent_pid);
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        ASSERT_TRUE(fd >= 0);
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        ASSERT_TRUE(n > 0);
        buf[n] = 0;
        char *v = strstr(buf, "VmRSS:");
        ASSERT_NOT_NULL(v);
        return atol(v + 6);
}

TEST(floods_are_bounded) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct guest_frame f = { 0 };
        long rss0 = agent_rss_kib();

        /* stdin nobody drains, flooded: the agent stops reading this client */
        spawn(c, 2, (char *[]) { "sleep", "100", NULL },
              &(struct pj_agent_fields) { .present = PJ_AGENT_BIT(PJ_AGENT_T_STDIN), .stdin_pipe = true });
        /* a process that writes without end to a client that does not read: the agent stops
         * reading the pipe (the writer blocks) instead of buffering */
        spawn(c, 1, (char *[]) { "yes", "flood flood flood flood", NULL }, NULL);
        static uint8_t chunk[PJ_AGENT_MAX_DATA];
        memset(chunk, 'x', sizeof(chunk));
        int r = 0, sent = 0;
        for (; sent < 64 && r == 0; sent++)
                r = guest_client_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_STDIN, .id = 2, .data = chunk,
                                                                  .data_len = sizeof(chunk) },
                                      500);
        ASSERT_EQ(r, -ETIMEDOUT);
        printf("  stdin flood: the agent stopped taking it after about %d MiB\n", sent);
        sleep(1);
        long rss1 = agent_rss_kib();
        printf("  agent RSS %ld KiB before, %ld KiB during the floods\n", rss0, rss1);
        ASSERT_LE(rss1 - rss0, 48 * 1024);

        /* the other connections are served meanwhile */
        _cleanup_(guest_client_freep) struct guest_client *other = conn();
        struct run run;
        spawn(other, 1, (char *[]) { "echo", "ok", NULL }, NULL);
        collect(other, 1, &run);
        ASSERT_STREQ(run.out, "ok\n");

        /* reading resumes the flow */
        size_t got = 0;
        while (got < (4u << 20)) {
                recv_frame(c, &f);
                if (f.m.type == PJ_AGENT_OUTPUT && f.m.id == 1)
                        got += f.m.data_len;
                guest_frame_done(&f);
        }

        /* a client flooding garbage after HELLO is cut off; the agent stays */
        _cleanup_(guest_client_freep) struct guest_client *bad = conn();
        uint8_t junk[PJ_AGENT_HEADER_SIZE + 16] = { 0, 0, 0, 16, PJ_AGENT_SPAWN };
        memset(junk + PJ_AGENT_HEADER_SIZE, 0xee, 16);
        ASSERT_OK(guest_client_send_raw(bad, junk, sizeof(junk), T));
        recv_frame(bad, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_ERROR);
        ASSERT_EQ(f.m.f.err, EPROTO);
        guest_frame_done(&f);
        ASSERT_EQ(guest_client_recv(bad, T, &f, NULL), -ECONNRESET);

        /* connections beyond the limit are closed at once */
        struct guest_client *many[PI_TEST_CONNS] = { 0 };
        int refused = 0;
        for (int i = 0; i < PI_TEST_CONNS; i++) {
                struct err e;
                if (guest_client_connect(sock_path, SECRET, T, &many[i], &e) < 0)
                        refused++;
        }
        printf("  %d connections tried beyond 2 open: %d refused\n", PI_TEST_CONNS, refused);
        ASSERT_EQ(refused, PI_TEST_CONNS - 62);
        for (int i = 0; i < PI_TEST_CONNS; i++)
                guest_client_free(many[i]);
        finish_agent();
}

/* Not an assertion: how long a spawn round trip takes (SPAWN -> SPAWNED -> EXIT of `true`). */
TEST(measure_spawn_round_trip) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        struct run r;
        for (uint32_t i = 0; i < 100; i++) {
                spawn(c, 100 + i, (char *[]) { "true", NULL }, NULL);
                collect(c, 100 + i, &r);
                ASSERT_EQ(r.code, 0);
        }
        double ms = ms_since(&t0);
        printf("  100 sequential `true` spawns: %.1f ms total, %.2f ms per round trip\n", ms, ms / 100);
        /* one connection outlives the process table: EXIT frees the channel and the slot, the
         * oldest finished processes are evicted, ids are reused */
        for (uint32_t i = 0; i < 300; i++) {
                spawn(c, 1 + i % 3, (char *[]) { "true", NULL }, NULL);
                collect(c, 1 + i % 3, &r);
        }
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_LIST, .id = 1 });
        struct guest_frame f = { 0 };
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_PROCS);
        ASSERT_EQ(f.m.n_entries, PJ_AGENT_MAX_PROCS);
        guest_frame_done(&f);
        finish_agent();
}

/* ---- the spare shell (proc.c): /bin/sh -c SCRIPT may be run by a shell started ahead */

/* The agent's child that waits as the spare (argv "/bin/sh -s"), or 0. */
static pid_t spare_of(pid_t parent) {
        static const char want[] = "/bin/sh\0-s";
        _cleanup_(closedirp) DIR *d = opendir("/proc");
        struct dirent *de;
        while ((de = readdir(d))) {
                char p[300], buf[512], state;
                int ppid;
                if (!proc_state(de->d_name, &state, &ppid) || ppid != parent || state == 'Z')
                        continue;
                snprintf(p, sizeof(p), "/proc/%s/cmdline", de->d_name);
                int fd = open(p, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                ssize_t k = read(fd, buf, sizeof(buf));
                close(fd);
                if (k == (ssize_t) sizeof(want) && !memcmp(buf, want, sizeof(want)))
                        return (pid_t) atoi(de->d_name);
        }
        return 0;
}

static int fds_of(pid_t pid) {
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/fd", (int) pid);
        _cleanup_(closedirp) DIR *d = opendir(p);
        int n = 0;
        while (d && readdir(d))
                n++;
        return n;
}

static pid_t wait_spare(void) {
        pid_t s = 0;
        for (int i = 0; i < 300 && !(s = spare_of(agent_pid)); i++)
                usleep(10 * 1000);
        if (!s)
                test_fail(__FILE__, __LINE__, "no spare shell appeared within 3 s");
        return s;
}

static pid_t sh_c(struct guest_client *c, uint32_t id, const char *script, const struct pj_agent_fields *extra,
                  struct run *r) {
        pid_t pid = spawn(c, id, (char *[]) { "/bin/sh", "-c", (char *) script, NULL }, extra);
        collect(c, id, r);
        return pid;
}

/* A command that a spare runs sees what a cold one would: its own fresh shell (nothing of
 * the previous command's cd or export), the request's environment and directory, stdin at
 * its end (a cat in the script neither waits nor eats the script's next line), the exit
 * code, stderr, signals to its group. Another environment or directory is never run by a
 * spare made for the last one; a spare killed from outside is replaced by a cold start. */
TEST(spare_shell_runs_commands_as_a_cold_start_would) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        struct run r;
        const struct pj_agent_fields in_tmp = { .cwd = "/tmp" };
        ASSERT_EQ(spare_of(agent_pid), 0); /* none before a /bin/sh -c command */
        sh_c(c, 1, "cd / && export X=1 && echo first", &in_tmp, &r);
        ASSERT_STREQ(r.out, "first\n");

        pid_t s = wait_spare();
        pid_t pid = sh_c(c, 2, "pwd; echo ${X-unset}; cat; echo cat=$?\necho line2 >&2; exit 7", &in_tmp, &r);
        ASSERT_EQ(pid, s); /* the spare ran it */
        ASSERT_STREQ(r.out, "/tmp\nunset\ncat=0\n");
        ASSERT_STREQ(r.err, "line2\n");
        ASSERT_EQ(r.code, 7);

        /* the environment exactly the request's; PATH lookups as the cold way */
        s = wait_spare();
        pid = sh_c(c, 3, "env | sort; echo $0", &in_tmp, &r);
        ASSERT_EQ(pid, s);
        ASSERT_STREQ(r.out, "HOME=/tmp\nPATH=/usr/local/bin:/usr/bin:/bin\nPWD=/tmp\n/bin/sh\n");

        /* a signal reaches the script's commands (their group): SIGINT ends a sleep */
        s = wait_spare();
        pid = spawn(c, 4, (char *[]) { "/bin/sh", "-c", "sleep 100", NULL }, &in_tmp);
        ASSERT_EQ(pid, s);
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_SIGNAL, .id = 4, .f.signo = SIGINT });
        collect(c, 4, &r);
        ASSERT_EQ(r.signo, SIGINT);

        /* a command served by a spare leaves no descriptor behind in the agent */
        s = wait_spare();
        int fds0 = fds_of(agent_pid);
        for (uint32_t i = 0; i < 3; i++) {
                ASSERT_EQ(sh_c(c, 40 + i, "true", &in_tmp, &r), s);
                s = wait_spare();
        }
        ASSERT_EQ(fds_of(agent_pid), fds0);

        /* another directory: the cold way (the spare was made for /tmp), then spares for it */
        s = wait_spare();
        pid = sh_c(c, 5, "pwd", &(struct pj_agent_fields) { .cwd = "/" }, &r);
        ASSERT_TRUE(pid != s);
        ASSERT_STREQ(r.out, "/\n");
        pid_t s2 = wait_spare();
        ASSERT_TRUE(s2 != s);
        ASSERT_EQ(kill(s, 0) < 0 ? errno : 0, ESRCH); /* the old one is gone (killed, reaped) */
        pid = sh_c(c, 6, "pwd", &(struct pj_agent_fields) { .cwd = "/" }, &r);
        ASSERT_EQ(pid, s2);
        ASSERT_STREQ(r.out, "/\n");

        /* a script longer than the spare takes: the cold way, same answer */
        s = wait_spare();
        char big[6000];
        memset(big, ' ', sizeof(big));
        memcpy(big + sizeof(big) - 10, "echo big", 9);
        pid = sh_c(c, 7, big, &(struct pj_agent_fields) { .cwd = "/" }, &r);
        ASSERT_TRUE(pid != s);
        ASSERT_STREQ(r.out, "big\n");

        /* the spare killed from outside: the next command starts the cold way and works */
        ASSERT_OK(kill(s, SIGKILL));
        usleep(100 * 1000);
        pid = sh_c(c, 8, "echo after", &(struct pj_agent_fields) { .cwd = "/" }, &r);
        ASSERT_TRUE(pid != s);
        ASSERT_STREQ(r.out, "after\n");
        ASSERT_EQ(r.code, 0);

        /* stopping the agent kills its spare */
        s = wait_spare();
        finish_agent();
        char name[32], state = 'Z';
        int ppid;
        snprintf(name, sizeof(name), "%d", (int) s);
        if (proc_state(name, &state, &ppid))
                ASSERT_EQ(state, 'Z'); /* dead, not yet reaped by whoever inherited it */
}

TEST(sigterm_stops_the_agent) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        spawn(c, 1, (char *[]) { "sleep", "100", NULL }, NULL);
        ASSERT_OK(kill(agent_pid, SIGTERM));
        struct run r;
        collect(c, 1, &r); /* forwarded to the sleep's group */
        ASSERT_EQ(r.signo, SIGTERM);
        int st;
        ASSERT_EQ(waitpid(agent_pid, &st, 0), agent_pid);
        agent_pid = 0;
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* PARK (issue 37: a gVisor checkpoint cannot save a bound host socket): OK, then no listener,
 * no connection and no socket file, the processes running on; the unpark signal brings the
 * listener back on the same path, with the secret the file holds then; the signal is not
 * forwarded to the processes, and without a park it changes nothing. */
TEST(park_closes_the_listener_and_the_unpark_signal_reopens_it) {
        start_agent();
        _cleanup_(guest_client_freep) struct guest_client *c = conn();
        pid_t pid = spawn(c, 1, (char *[]) { "sh", "-c", "while :; do sleep 0.05; done", NULL },
                          NULL);
        ASSERT_GE(pid, 2);
        _cleanup_(guest_client_freep) struct guest_client *other = conn();
        send_msg(c, &(struct pj_agent_msg) { .type = PJ_AGENT_PARK, .id = 7 });
        struct guest_frame f = { 0 };
        recv_frame(c, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        ASSERT_EQ(f.m.id, 7);
        guest_frame_done(&f);
        struct err e = { 0 };
        ASSERT_EQ(guest_client_recv(c, T, &f, &e), -ECONNRESET);
        ASSERT_EQ(guest_client_recv(other, T, &f, &e), -ECONNRESET);
        struct stat st;
        ASSERT_TRUE(lstat(sock_path, &st) < 0 && errno == ENOENT);
        /* a new secret in the file: the unparked agent takes it */
        char secret[300];
        snprintf(secret, sizeof(secret), "%s/secret", test_tmpdir());
        int fd = open(secret, O_WRONLY | O_TRUNC);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, "n3w-secret\n", 11), 11);
        close(fd);
        ASSERT_OK(kill(agent_pid, PJ_AGENT_UNPARK_SIGNAL));
        for (int i = 0; i < 500 && lstat(sock_path, &st) < 0; i++)
                usleep(10000);
        ASSERT_TRUE(S_ISSOCK(st.st_mode));
        struct guest_client *old = NULL;
        ASSERT_EQ(guest_client_connect(sock_path, SECRET, T, &old, &e), -EACCES);
        _cleanup_(guest_client_freep) struct guest_client *c2 = NULL;
        ASSERT_OK(guest_client_connect(sock_path, "n3w-secret", T, &c2, &e));
        /* the process lived on and was not sent the signal */
        send_msg(c2, &(struct pj_agent_msg) { .type = PJ_AGENT_ATTACH, .id = 2, .f.pid = (uint32_t) pid });
        recv_frame(c2, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_OK);
        guest_frame_done(&f);
        /* unpark when not parked: nothing changes */
        ASSERT_OK(kill(agent_pid, PJ_AGENT_UNPARK_SIGNAL));
        usleep(100000);
        _cleanup_(guest_client_freep) struct guest_client *c3 = NULL;
        ASSERT_OK(guest_client_connect(sock_path, "n3w-secret", T, &c3, &e));
        send_msg(c3, &(struct pj_agent_msg) { .type = PJ_AGENT_LIST, .id = 3 });
        recv_frame(c3, &f);
        ASSERT_EQ(f.m.type, PJ_AGENT_PROCS);
        bool running = false;
        for (size_t i = 0; i < f.m.n_entries; i++)
                if (f.m.entries[i].pid == (uint32_t) pid)
                        running = f.m.entries[i].running;
        ASSERT_TRUE(running);
        guest_frame_done(&f);
        finish_agent();
}
