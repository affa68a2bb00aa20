/* Unit tests for common/cleanup.h and xalloc.c. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "testlib.h"

static int freed;
static void count_free(int **p) {
        if (*p)
                freed++;
        free(*p);
}

TEST(cleanup_runs_at_scope_end_and_take_ptr_hands_off) {
        freed = 0;
        int *kept;
        {
                _cleanup_(count_free) int *a = xnew0(int, 4);
                _cleanup_(count_free) int *b = xnew0(int, 4);
                _cleanup_(count_free) int *none = NULL;
                kept = TAKE_PTR(b);
                ASSERT_NULL(b);
                (void) a;
                (void) none;
        }
        ASSERT_EQ(freed, 1);  /* only a: b was taken, NULL is skipped */
        free(kept);
}

TEST(closep_keeps_errno_and_take_fd) {
        int fd_taken;
        {
                _cleanup_close_ int fd = open("/dev/null", O_RDONLY);
                _cleanup_close_ int fd2 = open("/dev/null", O_RDONLY);
                ASSERT_TRUE(fd >= 0 && fd2 >= 0);
                fd_taken = TAKE_FD(fd2);
                ASSERT_EQ(fd2, -1);
                errno = EAGAIN;
        }
        ASSERT_EQ(errno, EAGAIN);
        ASSERT_TRUE(fcntl(fd_taken, F_GETFD) >= 0);  /* still open */
        close(fd_taken);
}

TEST(xalloc_helpers) {
        _cleanup_free_ char *s = xasprintf("%s-%d", "pdk", 42);
        ASSERT_STREQ(s, "pdk-42");
        _cleanup_free_ char *d = xstrdup(NULL);
        ASSERT_STREQ(d, "");
        _cleanup_free_ char *n = xstrndup("abcdef", 3);
        ASSERT_STREQ(n, "abc");
        _cleanup_free_ void *z = xmalloc(0);
        ASSERT_NOT_NULL(z);
        _cleanup_free_ int *c = xnew0(int, 16);
        for (int i = 0; i < 16; i++)
                ASSERT_EQ(c[i], 0);
        c = xrealloc(c, 1024 * sizeof(int));
        ASSERT_NOT_NULL(c);
        ASSERT_TRUE(xnonnull(c) == c);
}

/* Runs fn in a child with stderr silenced; the child's wait status. */
static int status_of(void (*fn)(void)) {
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                int devnull = open("/dev/null", O_WRONLY);
                dup2(devnull, STDERR_FILENO);
                fn();
                _exit(0);
        }
        int st;
        waitpid(p, &st, 0);
        return st;
}

static void huge_xmalloc(void) {
        void *x = xmalloc((size_t) -1 / 2);  /* cannot succeed */
        (void) x;
}

TEST(out_of_memory_aborts_with_a_message) {
        int st = status_of(huge_xmalloc);
        /* abort(); under AddressSanitizer its allocator reports and exits non-zero first. */
        ASSERT_TRUE((WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) || (WIFEXITED(st) && WEXITSTATUS(st) != 0));
}

static void xnonnull_of_null(void) {
        (void) xnonnull(NULL);
}

TEST(xnonnull_of_null_aborts) {
        int st = status_of(xnonnull_of_null);
        ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
}

TEST(json_cleanup) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "k", "v");
        ASSERT_NOT_NULL(o);
}
