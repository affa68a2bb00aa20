/* Unit tests for common/runsc.c: the checkpoint runs the binary named with a fixed argument
 * vector (no shell), reports its last words when it fails, is killed past its deadline, and
 * refuses ids and paths it must not pass on. The runsc here is a script of the test's own. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "runsc.h"
#include "strutil.h"
#include "testlib.h"

#define ID "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static char dir[64];

/* A fake runsc at <dir>/runsc running body (sh), its arguments one per line in <dir>/args. */
static const char *fake(const char *body) {
        static char path[128];
        if (!dir[0]) {
                snprintf(dir, sizeof(dir), "/tmp/paddock-runsc-XXXXXX");
                ASSERT_NOT_NULL(mkdtemp(dir));
        }
        snprintf(path, sizeof(path), "%s/runsc", dir);
        FILE *f = fopen(path, "w");
        ASSERT_NOT_NULL(f);
        fprintf(f, "#!/bin/sh\nfor a in \"$@\"; do printf '%%s\\n' \"$a\"; done > %s/args\n%s\n", dir, body);
        fclose(f);
        ASSERT_EQ(chmod(path, 0755), 0);
        return path;
}

static char *args(void) {
        _cleanup_free_ char *p = xasprintf("%s/args", dir);
        FILE *f = fopen(p, "r");
        ASSERT_NOT_NULL(f);
        char *buf = xmalloc(4096);
        size_t n = fread(buf, 1, 4095, f);
        buf[n] = 0;
        fclose(f);
        return buf;
}

TEST(checkpoint_runs_runsc_with_its_fixed_arguments) {
        const char *r = fake("exit 0");
        struct err e = { 0 };
        ASSERT_OK(runsc_checkpoint(r, "/run/x/moby", ID, "/var/lib/docker/containers/c/checkpoints/p1", 5000, &e));
        _cleanup_free_ char *a = args();
        ASSERT_STREQ(a, "--root=/run/x/moby\ncheckpoint\n--compression=none\n--exclude-committed-zero-pages\n"
                        "--image-path=/var/lib/docker/containers/c/checkpoints/p1\n" ID "\n");
}

TEST(a_failure_says_runscs_last_words) {
        const char *r = fake("echo 'some log line' >&2; echo 'checkpoint failed: Cannot save endpoint with bound host socket' >&2; exit 128");
        struct err e = { 0 };
        ASSERT_EQ(runsc_checkpoint(r, "/root", ID, "/tmp", 5000, &e), -EIO);
        ASSERT_NOT_NULL(strstr(e.message, "Cannot save endpoint with bound host socket"));
        ASSERT_NOT_NULL(strstr(e.message, "exit 128"));
        ASSERT_NULL(strstr(e.message, "some log line"));
}

TEST(a_runsc_that_hangs_is_killed_at_the_deadline) {
        const char *r = fake("exec sleep 30");
        struct err e = { 0 };
        int64_t t0 = mono_ms();
        ASSERT_EQ(runsc_checkpoint(r, "/root", ID, "/tmp", 300, &e), -ETIMEDOUT);
        ASSERT_LE(mono_ms() - t0, 5000);
        ASSERT_NOT_NULL(strstr(e.message, "killed"));
}

TEST(a_long_stderr_keeps_its_end) {
        const char *r = fake("i=0; while [ $i -lt 2000 ]; do echo \"line $i of noise\" >&2; i=$((i+1)); done; "
                             "echo 'the reason at the end' >&2; exit 1");
        struct err e = { 0 };
        ASSERT_EQ(runsc_checkpoint(r, "/root", ID, "/tmp", 10000, &e), -EIO);
        ASSERT_NOT_NULL(strstr(e.message, "the reason at the end"));
}

TEST(ids_and_paths_it_must_not_pass_on_are_refused) {
        const char *r = fake("exit 0");
        struct err e = { 0 };
        ASSERT_EQ(runsc_checkpoint(r, "/root", "0123", "/tmp", 1000, &e), -EINVAL);
        ASSERT_EQ(runsc_checkpoint(r, "/root", "--root=/x" ID, "/tmp", 1000, &e), -EINVAL);
        ASSERT_EQ(runsc_checkpoint(r, "relative/root", ID, "/tmp", 1000, &e), -EINVAL);
        ASSERT_EQ(runsc_checkpoint(r, "/root", ID, "/tmp/../etc", 1000, &e), -EINVAL);
        ASSERT_EQ(runsc_checkpoint("runsc", "/root", ID, "/tmp", 1000, &e), -EINVAL);
        ASSERT_EQ(runsc_checkpoint("/nonexistent/runsc", "/root", ID, "/tmp", 1000, &e), -ENOENT);
        ASSERT_EQ(runsc_knows("/root", "ABC"), -EINVAL);
        ASSERT_EQ(runsc_knows("/nonexistent", ID), 0);
}
