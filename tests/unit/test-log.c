/* Unit tests for common/log.c: plain lines on stderr with context fields. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "testlib.h"

static char *capture_stderr(void (*fn)(void)) {
        char path[512];
        snprintf(path, sizeof(path), "%s/stderr.txt", test_tmpdir());
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        ASSERT_TRUE(fd >= 0);
        int saved = dup(STDERR_FILENO);
        dup2(fd, STDERR_FILENO);
        fn();
        dup2(saved, STDERR_FILENO);
        close(saved);
        lseek(fd, 0, SEEK_SET);
        char *buf = xcalloc(1, 65536);
        ssize_t n = read(fd, buf, 65535);
        ASSERT_TRUE(n >= 0);
        close(fd);
        return buf;
}

static void emit_plain(void) {
        log_open("controld", LOG_TARGET_STDERR);
        log_ctx_set("SANDBOX_ID", "0123456789abcdef01234567");
        log_ctx_set("NODE_ID", "node-1");
        log_info("sandbox ready");
        log_ctx_reset();
        log_debug("not shown at info");
        errno = 0;
        int r = log_error_errno(-ENOENT, "Failed to open %s: %m", "/nope");
        ASSERT_EQ(r, -ENOENT);
        log_ctx_set("REQUEST_ID", "evil\nINJECTED=1");
        log_warning("multi\nline");
        log_ctx_reset();
}

TEST(plain_line_per_event_with_context) {
        _cleanup_free_ char *out = capture_stderr(emit_plain);
        ASSERT_CONTAINS(out, "controld: info: sandbox ready SANDBOX_ID=0123456789abcdef01234567 NODE_ID=node-1\n");
        ASSERT_CONTAINS(out, "controld: error: Failed to open /nope: No such file or directory\n");
        ASSERT_TRUE(strstr(out, "not shown") == NULL);
        /* Control characters can't forge a second line or a field. */
        ASSERT_CONTAINS(out, "controld: warning: multi line REQUEST_ID=evil INJECTED=1\n");
        int lines = 0;
        for (char *p = out; *p; p++)
                lines += *p == '\n';
        ASSERT_EQ(lines, 3);
}

TEST(level_parsing) {
        ASSERT_EQ(log_level_from_string("debug"), LOG_DEBUG);
        ASSERT_EQ(log_level_from_string("err"), LOG_ERR);
        ASSERT_EQ(log_level_from_string("error"), LOG_ERR);
        ASSERT_EQ(log_level_from_string("warning"), LOG_WARNING);
        ASSERT_EQ(log_level_from_string("loud"), -EINVAL);
        ASSERT_EQ(log_level_from_string(NULL), -EINVAL);
}

TEST(journal_stream_must_match_stderr) {
        setenv("JOURNAL_STREAM", "1:1", 1);
        log_open("x", LOG_TARGET_AUTO);
        ASSERT_FALSE(log_to_journal());
        struct stat st;
        ASSERT_TRUE(fstat(STDERR_FILENO, &st) == 0);
        char v[64];
        snprintf(v, sizeof(v), "%llu:%llu", (unsigned long long) st.st_dev, (unsigned long long) st.st_ino);
        setenv("JOURNAL_STREAM", v, 1);
        log_open("x", LOG_TARGET_AUTO);
        ASSERT_TRUE(log_to_journal());
        unsetenv("JOURNAL_STREAM");
}
