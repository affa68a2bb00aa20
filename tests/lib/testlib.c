/* testlib.c — fork-per-test runner with timeouts; ends with "N passed, N failed". */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdarg.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "strutil.h"
#include "testlib.h"

#define TEST_MAX 512
#define EXIT_SKIP 77

struct test_entry {
        const char *name;
        const char *file;
        test_fn fn;
        int timeout;
};
static struct test_entry tests[TEST_MAX];
static int n_tests;
static char tmpdir_path[256];

void test_register(const char *name, test_fn fn, const char *file, int timeout_s) {
        if (n_tests >= TEST_MAX) {
                fprintf(stderr, "too many tests\n");
                abort();
        }
        tests[n_tests++] = (struct test_entry) { name, file, fn, timeout_s };
}

struct exit_hook { void (*fn)(void *); void *ud; };
static struct exit_hook exit_hooks[64];
static int n_exit_hooks;

static void run_exit_hooks(void) {
        while (n_exit_hooks > 0) {
                struct exit_hook h = exit_hooks[--n_exit_hooks];
                h.fn(h.ud);
        }
}

void test_on_exit(void (*fn)(void *ud), void *ud) {
        static bool registered;
        if (n_exit_hooks >= (int) ELEMENTSOF(exit_hooks))
                abort();
        if (!registered) {
                atexit(run_exit_hooks);
                registered = true;
        }
        exit_hooks[n_exit_hooks++] = (struct exit_hook) { fn, ud };
}

static void on_alarm(int sig) {
        (void) sig;
        static const char m[] = "  test timed out; cleaning up\n";
        ssize_t _unused_ w = write(STDERR_FILENO, m, sizeof(m) - 1);
        run_exit_hooks();
        _exit(124);
}

void test_fail(const char *file, int line, const char *fmt, ...) {
        va_list ap;
        fprintf(stderr, "  %s:%d: ", file, line);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        fflush(stderr);
        run_exit_hooks();
        _exit(1);
}

/* CI=true: a machine set up to run everything, where a skip means a test silently did not run. */
static bool under_ci(void) {
        const char *ci = getenv("CI");
        return ci && strcmp(ci, "true") == 0;
}

void test_skip(const char *why) {
        if (under_ci())
                fprintf(stderr, "  skipped, which counts as a failure under CI=true: %s\n", why);
        else
                fprintf(stderr, "  skipped: %s\n", why);
        fflush(stderr);
        run_exit_hooks();
        _exit(EXIT_SKIP);
}

/* PADDOCK_TEST_KEEP=1 keeps the test's directory (its daemons' logs) for a look after a failure. */
static void rm_tmpdir(void) {
        if (!tmpdir_path[0])
                return;
        if (getenv("PADDOCK_TEST_KEEP")) {
                fprintf(stderr, "  kept %s\n", tmpdir_path);
                return;
        }
        pid_t p = fork();
        if (p == 0) {
                execlp("rm", "rm", "-rf", "--", tmpdir_path, (char *) NULL);
                _exit(127);
        }
        if (p > 0)
                waitpid(p, NULL, 0);
}

const char *test_tmpdir(void) {
        if (!tmpdir_path[0]) {
                snprintf(tmpdir_path, sizeof(tmpdir_path), "/tmp/paddock-test-XXXXXX");
                if (!mkdtemp(tmpdir_path)) {
                        perror("mkdtemp");
                        abort();
                }
                atexit(rm_tmpdir);
        }
        return tmpdir_path;
}

const char *test_build_path(const char *rel) {
        static char buf[512];
        const char *b = getenv("PADDOCK_BUILD");
        snprintf(buf, sizeof(buf), "%s/%s", b && *b ? b : "build", rel);
        return buf;
}

bool test_port_open(int port) {
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return fd >= 0 && connect(fd, (struct sockaddr *) &a, sizeof(a)) == 0;
}

int test_free_port(void) {
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET };
        socklen_t l = sizeof(a);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || getsockname(fd, (struct sockaddr *) &a, &l) < 0)
                abort();
        return ntohs(a.sin_port);
}

pid_t test_spawn_logged(const char *path, const char *const argv[], const char *log) {
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
                dup2(fd, STDERR_FILENO);
                dup2(fd, STDOUT_FILENO);
                execv(path, (char *const *) argv);
                _exit(127);
        }
        return p;
}

bool test_have_docker(void) {
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX, .sun_path = "/var/run/docker.sock" };
        return fd >= 0 && connect(fd, (struct sockaddr *) &a, sizeof(a)) == 0;
}

int test_run_capture(char *const argv[], char **ret_out, size_t cap) {
        int pfd[2];
        if (pipe2(pfd, O_CLOEXEC) < 0)
                return -errno;
        pid_t p = fork();
        if (p < 0)
                return -errno;
        if (p == 0) {
                dup2(pfd[1], STDOUT_FILENO);
                int devnull = open("/dev/null", O_WRONLY);
                if (devnull >= 0 && !getenv("TEST_VERBOSE"))
                        dup2(devnull, STDERR_FILENO);
                execvp(argv[0], argv);
                _exit(127);
        }
        close(pfd[1]);
        size_t len = 0;
        char *buf = xmalloc(cap + 1);
        for (;;) {
                ssize_t n = read(pfd[0], buf + len, cap - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                len += (size_t) n;
                if (len == cap) {
                        char sink[4096];
                        while (read(pfd[0], sink, sizeof(sink)) > 0)
                                ;
                        break;
                }
        }
        close(pfd[0]);
        buf[len] = 0;
        int st;
        while (waitpid(p, &st, 0) < 0 && errno == EINTR)
                ;
        if (ret_out)
                *ret_out = buf;
        else
                free(buf);
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static double now_s(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static bool selected(const char *name, int argc, char **argv) {
        /* PADDOCK_TEST_EXCLUDE: comma-separated substrings of tests not to run (the Nomad
         * variants of the API suites leave out what only the docker driver has). */
        const char *ex = getenv("PADDOCK_TEST_EXCLUDE");
        while (ex && *ex) {
                size_t n = strcspn(ex, ",");
                if (n && memmem(name, strlen(name), ex, n))
                        return false;
                ex += n + (ex[n] == ',');
        }
        if (argc < 2)
                return true;
        for (int i = 1; i < argc; i++)
                if (strstr(name, argv[i]))
                        return true;
        return false;
}

int test_main(int argc, char **argv) {
        int passed = 0, failed = 0, skipped = 0;
        const char *env_to = getenv("TEST_TIMEOUT");
        int scale = env_to ? atoi(env_to) : 0;

        setvbuf(stdout, NULL, _IOLBF, 0);
        signal(SIGPIPE, SIG_IGN);
        for (int i = 0; i < n_tests; i++) {
                struct test_entry *t = &tests[i];
                int timeout = scale > 0 ? scale : t->timeout;
#if defined(__SANITIZE_ADDRESS__)
                /* ASan and UBSan make the code under test 2-4x slower: so is each test's limit */
                if (scale <= 0)
                        timeout *= 4;
#endif
                if (!selected(t->name, argc, argv))
                        continue;
                double t0 = now_s();
                fflush(stdout);
                fflush(stderr);
                pid_t pid = fork();
                if (pid < 0) {
                        perror("fork");
                        return 2;
                }
                if (pid == 0) {
                        setpgid(0, 0);
                        signal(SIGALRM, on_alarm);
                        alarm((unsigned) timeout);
                        t->fn();
                        fflush(stdout);
                        exit(0);
                }
                setpgid(pid, pid);
                int st = 0;
                bool timed_out = false;
                for (;;) {
                        pid_t r = waitpid(pid, &st, WNOHANG);
                        if (r == pid)
                                break;
                        if (now_s() - t0 > timeout + 5) {
                                kill(-pid, SIGKILL);
                                waitpid(pid, &st, 0);
                                timed_out = true;
                                break;
                        }
                        usleep(5000);
                }
                double dt = now_s() - t0;
                if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                        printf("ok      %-50s %.2fs\n", t->name, dt);
                        passed++;
                } else if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_SKIP && under_ci()) {
                        printf("FAIL    %-50s skipped, and CI=true counts a skip as a failure (%s)\n", t->name,
                               t->file);
                        failed++;
                } else if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == EXIT_SKIP) {
                        printf("skip    %-50s\n", t->name);
                        skipped++;
                } else {
                        if (timed_out || (WIFEXITED(st) && WEXITSTATUS(st) == 124))
                                printf("FAIL    %-50s timed out after %ds (%s)\n", t->name, timeout, t->file);
                        else if (WIFSIGNALED(st))
                                printf("FAIL    %-50s killed by signal %d (%s)\n", t->name, WTERMSIG(st), t->file);
                        else
                                printf("FAIL    %-50s (%s)\n", t->name, t->file);
                        failed++;
                }
                /* Anything the test left in its process group goes with it. */
                kill(-pid, SIGKILL);
        }
        if (skipped)
                printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
        else
                printf("%d passed, %d failed\n", passed, failed);
        return failed ? 1 : 0;
}

/* Test programs are plain lists of TEST()s; main lives here. */
int main(int argc, char **argv) { return test_main(argc, argv); }

unsigned test_seed(unsigned dflt) {
        const char *v = getenv("PADDOCK_TEST_SEED");
        int64_t n = dflt;
        if (v && *v && (safe_atoi64(v, &n) < 0 || n < 0 || n > UINT32_MAX))
                test_fail(__FILE__, __LINE__, "PADDOCK_TEST_SEED=%s is not a number from 0 to %u", v, UINT32_MAX);
        fprintf(stderr, "  seed %u (PADDOCK_TEST_SEED=%u replays it)\n", (unsigned) n, (unsigned) n);
        return (unsigned) n;
}

char *test_random_input(unsigned *seed, int max_len, bool any_byte, const char *alphabet, size_t *ret_len) {
        size_t len = (size_t) (rand_r(seed) % max_len), na = strlen(alphabet);
        char *b = xmalloc(len ? len : 1);
        for (size_t i = 0; i < len; i++)
                b[i] = any_byte ? (char) rand_r(seed) : alphabet[(size_t) rand_r(seed) % na];
        *ret_len = len;
        return b;
}

void test_stop_child(pid_t *pid) {
        if (*pid > 0) {
                kill(*pid, SIGTERM);
                waitpid(*pid, NULL, 0);
                *pid = 0;
        }
}

int test_notify_socket(const char *path, int flags) {
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | flags, 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
        ASSERT_EQ(bind(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        /* As systemd's: a daemon that dropped root (controld's [controld] user) still reaches it. */
        (void) chmod(path, 0666);
        setenv("NOTIFY_SOCKET", path, 1);
        return fd;
}

char *test_raw_http(int port, const char *head, const void *body, size_t len) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_GE(fd, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        ASSERT_TRUE(send(fd, head, strlen(head), MSG_NOSIGNAL) == (ssize_t) strlen(head));
        if (len)
                ASSERT_TRUE(send(fd, body, len, MSG_NOSIGNAL) == (ssize_t) len);
        size_t cap = 1 << 20, n = 0;
        char *buf = xmalloc(cap + 1);
        int64_t deadline = mono_ms() + 60000;
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (mono_ms() >= deadline)
                        test_fail(__FILE__, __LINE__, "no whole answer from port %d within 60 s", port);
                if (poll(&p, 1, 1000) <= 0)
                        continue;
                ssize_t k = recv(fd, buf + n, cap - n, 0);
                if (k <= 0)
                        break;
                n += (size_t) k;
        }
        for (size_t i = 0; i < n; i++)
                if (!buf[i])
                        buf[i] = '.';
        buf[n] = 0;
        close(fd);
        return buf;
}

int test_raw_status(const char *resp) {
        int st = 0;
        if (sscanf(resp, "HTTP/1.%*d %d", &st) != 1)
                test_fail(__FILE__, __LINE__, "no status line in: %.300s", resp);
        return st;
}

const char *test_raw_body(const char *resp) {
        const char *b = strstr(resp, "\r\n\r\n");
        return b ? b + 4 : "";
}
