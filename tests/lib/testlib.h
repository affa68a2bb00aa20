/* testlib.h — the tiny in-tree test runner.
 *
 *   TEST(name) { ASSERT_TRUE(x); ASSERT_EQ(a, b); ASSERT_STREQ(a, b); }
 *
 * Each test runs in a forked child with a timeout (TEST_TIMEOUT seconds,
 * default 120; a test may raise its own with TEST_SET_TIMEOUT before running).
 * The program ends with one line "N passed, N failed" (plus ", N skipped") and
 * exits non-zero on any failure. Arguments filter tests by substring.
 * A test that needs a service that is absent calls TEST_SKIP("why"). Under CI=true a skip
 * counts as failed: CI machines have every service, so a skip there hides a broken setup.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <inttypes.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn, const char *file, int timeout_s);
int test_main(int argc, char **argv);

_Noreturn void test_fail(const char *file, int line, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
_Noreturn void test_skip(const char *why);

#define TEST_TIMEOUT_DEFAULT 120

#define TEST_FULL(name, timeout)                                                 \
        static void test_##name(void);                                           \
        __attribute__((constructor)) static void test_reg_##name(void) {        \
                test_register(#name, test_##name, __FILE__, (timeout));          \
        }                                                                        \
        static void test_##name(void)
#define TEST(name) TEST_FULL(name, TEST_TIMEOUT_DEFAULT)

#define TEST_SKIP(why) test_skip(why)

#define ASSERT_TRUE(x)                                                           \
        do {                                                                     \
                if (!(x))                                                        \
                        test_fail(__FILE__, __LINE__, "ASSERT_TRUE(%s)", #x);    \
        } while (0)
#define ASSERT_FALSE(x) ASSERT_TRUE(!(x))

#define ASSERT_EQ(a, b)                                                          \
        do {                                                                     \
                long long _a = (long long) (a), _b = (long long) (b);           \
                if (_a != _b)                                                    \
                        test_fail(__FILE__, __LINE__, "ASSERT_EQ(%s, %s): %lld != %lld", \
                                  #a, #b, _a, _b);                               \
        } while (0)
#define ASSERT_NE(a, b)                                                          \
        do {                                                                     \
                long long _a = (long long) (a), _b = (long long) (b);           \
                if (_a == _b)                                                    \
                        test_fail(__FILE__, __LINE__, "ASSERT_NE(%s, %s): both %lld", #a, #b, _a); \
        } while (0)
#define ASSERT_GE(a, b)                                                          \
        do {                                                                     \
                long long _a = (long long) (a), _b = (long long) (b);           \
                if (!(_a >= _b))                                                 \
                        test_fail(__FILE__, __LINE__, "ASSERT_GE(%s, %s): %lld < %lld", #a, #b, _a, _b); \
        } while (0)
#define ASSERT_LE(a, b)                                                          \
        do {                                                                     \
                long long _a = (long long) (a), _b = (long long) (b);           \
                if (!(_a <= _b))                                                 \
                        test_fail(__FILE__, __LINE__, "ASSERT_LE(%s, %s): %lld > %lld", #a, #b, _a, _b); \
        } while (0)
/* r >= 0 */
#define ASSERT_OK(r)                                                             \
        do {                                                                     \
                long long _r = (long long) (r);                                  \
                if (_r < 0)                                                      \
                        test_fail(__FILE__, __LINE__, "ASSERT_OK(%s): %lld (%s)", #r, _r, \
                                  strerror((int) -_r));                          \
        } while (0)
#define ASSERT_STREQ(a, b)                                                       \
        do {                                                                     \
                const char *_a = (a), *_b = (b);                                 \
                if (!_a || !_b || strcmp(_a, _b) != 0)                           \
                        test_fail(__FILE__, __LINE__, "ASSERT_STREQ(%s, %s): \"%s\" != \"%s\"", \
                                  #a, #b, _a ? _a : "(null)", _b ? _b : "(null)"); \
        } while (0)
#define ASSERT_CONTAINS(hay, needle)                                             \
        do {                                                                     \
                const char *_h = (hay), *_n = (needle);                          \
                if (!_h || !strstr(_h, _n))                                      \
                        test_fail(__FILE__, __LINE__, "ASSERT_CONTAINS(%s, %s): \"%.400s\" lacks \"%s\"", \
                                  #hay, #needle, _h ? _h : "(null)", _n);        \
        } while (0)
#define ASSERT_NULL(p) ASSERT_TRUE((p) == NULL)
#define ASSERT_NOT_NULL(p) ASSERT_TRUE((p) != NULL)

/* Cleanups that run when the test process ends, also after a failed ASSERT
 * (which _exit()s): stop daemons, remove containers. Run in reverse order. */
void test_on_exit(void (*fn)(void *ud), void *ud);

/* Helpers shared by tests. */
/* Path of a built binary: $PADDOCK_BUILD/<rel> (default build/<rel>). Static buffer. */
const char *test_build_path(const char *rel);
/* A fresh directory under /tmp removed when the test process exits. */
const char *test_tmpdir(void);
/* A datagram socket (SOCK_CLOEXEC | flags) bound at path and named in NOTIFY_SOCKET, where a
 * daemon started now sends its sd_notify messages. Returns the fd. */
int test_notify_socket(const char *path, int flags);
/* SIGTERM to *pid and wait for it, then *pid = 0; nothing when *pid <= 0. */
void test_stop_child(pid_t *pid);
/* The seed of a test that draws random inputs: $PADDOCK_TEST_SEED when set, else dflt (a
 * fixed number keeps a run like the last; time(NULL) gives new inputs each run). Says which on
 * stderr ("  seed N (PADDOCK_TEST_SEED=N replays it)"), so whatever fails can be run again
 * with the same inputs: PADDOCK_TEST_SEED=N build/tests/unit/test-x name. A bad value fails
 * the test. */
unsigned test_seed(unsigned dflt);
/* A fuzz input: rand_r(seed) % max_len bytes in a fresh xmalloc'd buffer (length in *ret_len),
 * each any byte when any_byte, else one of alphabet's (a C string). */
char *test_random_input(unsigned *seed, int max_len, bool any_byte, const char *alphabet, size_t *ret_len);
/* Is a TCP port on 127.0.0.1 accepting? */
bool test_port_open(int port);
/* A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick). */
int test_free_port(void);
/* One HTTP exchange on its own connection to 127.0.0.1:port: head (whole, CRLFs and the blank
 * line included) and len bytes of body sent, then everything read until the server closes,
 * within 60 s. NUL bytes in the answer read as '.', so text checks see all of it (Connect
 * envelopes). The caller frees it. */
char *test_raw_http(int port, const char *head, const void *body, size_t len);
/* Its status code (the test fails without a status line) and where its body starts. */
int test_raw_status(const char *resp);
const char *test_raw_body(const char *resp);
/* Starts path with argv (argv[0] included, NULL-terminated), its stdout and stderr appended
 * to the file log. Returns the child's pid; the caller waits for it. */
pid_t test_spawn_logged(const char *path, const char *const argv[], const char *log);
/* Is the docker socket answering? */
bool test_have_docker(void);
/* Run argv (no shell), capture stdout (up to cap bytes, NUL-terminated, caller frees). Returns exit status or -errno. */
int test_run_capture(char *const argv[], char **ret_out, size_t cap);
