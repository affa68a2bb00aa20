/* Integration test: structured logging into a real systemd-journald.
 *
 * Uses the running journald when its socket answers; otherwise starts
 * /lib/systemd/systemd-journald itself (fork + exec, no shell), waits for the
 * socket, and stops it afterwards, removing the socket files it left behind
 * so later sd_journal_send() calls see "no journal" again instead of a dead
 * socket. Without /run/log/journal persistence configured journald writes a
 * volatile journal to /run/log/journal, which journalctl reads by default.
 *
 * Each test body runs in a child process so journald is stopped and cleaned
 * up even when an assertion fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "testlib.h"

#define JOURNALD_BIN "/lib/systemd/systemd-journald"
#define JOURNAL_SOCKET "/run/systemd/journal/socket"
#define JOURNAL_STDOUT "/run/systemd/journal/stdout"
#define WAIT_MS 5000

static int unix_connect(const char *path, int type) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -errno;
        strscpy(sa.sun_path, path, sizeof(sa.sun_path));
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                int r = -errno;
                close(fd);
                return r;
        }
        return fd;
}

/* A socket file alone proves nothing: a killed journald leaves it behind. */
static bool journald_answers(void) {
        int fd = unix_connect(JOURNAL_SOCKET, SOCK_DGRAM);
        if (fd < 0)
                return false;
        close(fd);
        fd = unix_connect(JOURNAL_STDOUT, SOCK_STREAM);
        if (fd < 0)
                return false;
        close(fd);
        return true;
}

/* Returns the pid of the journald we started, 0 when one was already running. */
static pid_t journald_start(void) {
        char logpath[512];
        pid_t pid;

        if (journald_answers())
                return 0;
        if (access(JOURNALD_BIN, X_OK) < 0)
                TEST_SKIP("no journald running and " JOURNALD_BIN " not installed");
        if (geteuid() != 0)
                TEST_SKIP("no journald running and starting one needs root");

        snprintf(logpath, sizeof(logpath), "%s/journald.log", test_tmpdir());
        pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
                int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
                if (fd < 0 || nul < 0)
                        _exit(126);
                dup2(nul, STDIN_FILENO);
                dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
                execl(JOURNALD_BIN, JOURNALD_BIN, (char *) NULL);
                _exit(127);
        }
        for (int64_t t0 = mono_ms(); !journald_answers(); usleep(20 * 1000)) {
                int st;
                if (waitpid(pid, &st, WNOHANG) == pid)
                        test_fail(__FILE__, __LINE__, "journald exited early (status %d), see %s", st, logpath);
                if (mono_ms() - t0 > WAIT_MS) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        test_fail(__FILE__, __LINE__, "journald socket not answering after %d ms", WAIT_MS);
                }
        }
        return pid;
}

static void journald_stop(pid_t pid) {
        int st;

        if (pid <= 0)
                return;
        kill(pid, SIGTERM);
        for (int64_t t0 = mono_ms(); waitpid(pid, &st, WNOHANG) != pid; usleep(20 * 1000))
                if (mono_ms() - t0 > WAIT_MS) {
                        kill(pid, SIGKILL);
                        waitpid(pid, &st, 0);
                        break;
                }
        /* Someone else may have started a journald meanwhile; leave its sockets. */
        if (!journald_answers()) {
                static const char *const socks[] = { JOURNAL_SOCKET, JOURNAL_STDOUT, "/run/systemd/journal/dev-log",
                                                     "/run/systemd/journal/io.systemd.journal" };
                for (size_t i = 0; i < ELEMENTSOF(socks); i++)
                        unlink(socks[i]);
        }
}

static void with_journald(void (*body)(void)) {
        pid_t jd = journald_start(), child;
        int st = 0;

        child = fork();
        ASSERT_TRUE(child >= 0);
        if (child == 0) {
                body();
                fflush(stdout);
                _exit(0);
        }
        while (waitpid(child, &st, 0) < 0 && errno == EINTR)
                ;
        journald_stop(jd);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
                TEST_SKIP("skipped by body");
        ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void unique_ident(char *out, size_t n) {
        char tok[9];
        random_token(tok, 4);
        snprintf(out, n, "pdk-jtest-%s", tok); /* < 32: log.c keeps 31 */
}

/* All entries with SYSLOG_IDENTIFIER=ident, waiting until at least want
 * entries exist (journald indexes asynchronously). Returns a JSON array. */
static cJSON *journal_query(const char *ident, int want) {
        char match[96];
        snprintf(match, sizeof(match), "SYSLOG_IDENTIFIER=%s", ident);
        char *const argv[] = { "journalctl", "--no-pager", "-q", "-o", "json", match, NULL };

        for (int64_t t0 = mono_ms();; usleep(100 * 1000)) {
                _cleanup_free_ char *out = NULL;
                cJSON *arr = cJSON_CreateArray();
                int n = 0;

                ASSERT_NOT_NULL(arr);
                int r = test_run_capture(argv, &out, 4 << 20);
                ASSERT_EQ(r, 0);
                for (char *line = out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                        char err[128];
                        cJSON *e = NULL;
                        nl = strchr(line, '\n');
                        size_t len = nl ? (size_t) (nl - line) : strlen(line);
                        if (len == 0)
                                continue;
                        if (json_parse(line, len, 1 << 20, 8, &e, err, sizeof(err)) < 0)
                                test_fail(__FILE__, __LINE__, "journalctl printed bad JSON: %s: %.*s", err, (int) len, line);
                        cJSON_AddItemToArray(arr, e);
                        n++;
                }
                if (n >= want || mono_ms() - t0 > WAIT_MS)
                        return arr;
                cJSON_Delete(arr);
        }
}

static const cJSON *find_entry(const cJSON *arr, const char *field, const char *value) {
        const cJSON *e;
        cJSON_ArrayForEach(e, arr) {
                const char *v = json_get_str(e, field);
                if (v && strcmp(v, value) == 0)
                        return e;
        }
        return NULL;
}

#define ASSERT_FIELD(entry, field, value) ASSERT_STREQ(json_get_str((entry), (field)), (value))

/* ---------------------------------------------------------------- (a) explicit journal target */

static char a_ident[32], a_marker[64];
static int a_line, a_err_line;

static void emit_structured_event(void) {
        log_ctx_set("SANDBOX_ID", "0123456789abcdef01234567");
        log_ctx_set("REQUEST_ID", "req-42");
        log_ctx_set("NODE_ID", "node-7");
        a_line = __LINE__ + 1;
        log_warning("sandbox ready %s", a_marker);
        log_ctx_reset();
        log_ctx_set("REQUEST_ID", "evil\nINJECTED=1");
        a_err_line = __LINE__ + 1;
        log_error_errno(-ENOENT, "Failed to open %s: %m", a_marker);
        log_ctx_reset();
        log_debug("below max level %s", a_marker);
}

static void body_structured_fields(void) {
        unique_ident(a_ident, sizeof(a_ident));
        snprintf(a_marker, sizeof(a_marker), "marker-%s", a_ident + 10);
        log_open(a_ident, LOG_TARGET_JOURNAL);
        ASSERT_TRUE(log_to_journal());
        emit_structured_event();

        _cleanup_json_ cJSON *arr = journal_query(a_ident, 2);
        ASSERT_EQ(cJSON_GetArraySize(arr), 2); /* the debug event was filtered */

        char msg[128], line[16];
        snprintf(msg, sizeof(msg), "sandbox ready %s", a_marker);
        const cJSON *e = find_entry(arr, "MESSAGE", msg);
        if (!e) {
                _cleanup_free_ char *all = json_print(arr);
                test_fail(__FILE__, __LINE__, "no entry with MESSAGE=%s in %.2000s", msg, all);
        }
        snprintf(line, sizeof(line), "%d", a_line);
        ASSERT_FIELD(e, "PRIORITY", "4");
        ASSERT_FIELD(e, "SYSLOG_IDENTIFIER", a_ident);
        ASSERT_FIELD(e, "CODE_FILE", __FILE__);
        ASSERT_FIELD(e, "CODE_LINE", line);
        ASSERT_FIELD(e, "CODE_FUNC", "emit_structured_event");
        ASSERT_FIELD(e, "SANDBOX_ID", "0123456789abcdef01234567");
        ASSERT_FIELD(e, "REQUEST_ID", "req-42");
        ASSERT_FIELD(e, "NODE_ID", "node-7");
        ASSERT_FIELD(e, "_TRANSPORT", "journal");
        ASSERT_NULL(json_get_str(e, "ERRNO"));

        snprintf(msg, sizeof(msg), "Failed to open %s: No such file or directory", a_marker);
        e = find_entry(arr, "MESSAGE", msg);
        ASSERT_NOT_NULL(e);
        snprintf(line, sizeof(line), "%d", a_err_line);
        ASSERT_FIELD(e, "PRIORITY", "3");
        ASSERT_FIELD(e, "ERRNO", "2");
        ASSERT_FIELD(e, "CODE_LINE", line);
        /* Context from the previous event is gone; control characters were scrubbed. */
        ASSERT_NULL(json_get_str(e, "SANDBOX_ID"));
        ASSERT_FIELD(e, "REQUEST_ID", "evil INJECTED=1");
        ASSERT_NULL(json_get_str(e, "INJECTED"));
}

TEST_FULL(structured_fields_reach_journald, 60) {
        with_journald(body_structured_fields);
}

/* ---------------------------------------------------------------- (b) auto-detection via JOURNAL_STREAM */

/* Like sd_journal_stream_fd(): connect to journald's stdout socket and send
 * the stream header (identifier, unit id, priority, level prefix, forward to
 * syslog/kmsg/console). Lines written to the fd become journal entries with
 * _TRANSPORT=stdout. */
static int journal_stream_fd(const char *ident, int prio) {
        char header[128];
        int fd = unix_connect(JOURNAL_STDOUT, SOCK_STREAM);

        ASSERT_OK(fd);
        ASSERT_EQ(shutdown(fd, SHUT_RD), 0);
        int n = snprintf(header, sizeof(header), "%s\n\n%d\n0\n0\n0\n0\n", ident, prio);
        ASSERT_EQ(write(fd, header, (size_t) n), n);
        return fd;
}

static void body_auto_detects_stream(void) {
        char ident[32], marker[64], env[64];
        struct stat st;
        int fd, status;
        pid_t child;

        unique_ident(ident, sizeof(ident));
        snprintf(marker, sizeof(marker), "marker-%s", ident + 10);
        fd = journal_stream_fd(ident, LOG_INFO);
        ASSERT_EQ(fstat(fd, &st), 0);
        snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long) st.st_dev, (unsigned long long) st.st_ino);

        /* The child is what systemd would start: stderr is the stream, JOURNAL_STREAM names it. */
        child = fork();
        ASSERT_TRUE(child >= 0);
        if (child == 0) {
                dup2(fd, STDERR_FILENO);
                setenv("JOURNAL_STREAM", env, 1);
                log_open(ident, LOG_TARGET_AUTO);
                if (!log_to_journal()) {
                        dprintf(STDERR_FILENO, "journal NOT detected %s\n", marker);
                        _exit(3);
                }
                dprintf(STDERR_FILENO, "plain stderr line %s\n", marker);
                log_ctx_set("SANDBOX_ID", "abcdefabcdefabcdefabcdef");
                log_ctx_set("REQUEST_ID", "req-auto");
                log_ctx_set("NODE_ID", "node-auto");
                log_notice("auto event %s", marker);
                _exit(0);
        }
        close(fd);
        while (waitpid(child, &status, 0) < 0 && errno == EINTR)
                ;
        ASSERT_TRUE(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);

        _cleanup_json_ cJSON *arr = journal_query(ident, 2);
        char msg[128], pid[16];
        snprintf(msg, sizeof(msg), "auto event %s", marker);
        snprintf(pid, sizeof(pid), "%d", (int) child);
        const cJSON *e = find_entry(arr, "MESSAGE", msg);
        if (!e) {
                _cleanup_free_ char *all = json_print(arr);
                test_fail(__FILE__, __LINE__, "no entry with MESSAGE=%s in %.2000s", msg, all);
        }
        /* Structured, not a line on the stream. */
        ASSERT_FIELD(e, "_TRANSPORT", "journal");
        ASSERT_FIELD(e, "PRIORITY", "5");
        ASSERT_FIELD(e, "SANDBOX_ID", "abcdefabcdefabcdefabcdef");
        ASSERT_FIELD(e, "REQUEST_ID", "req-auto");
        ASSERT_FIELD(e, "NODE_ID", "node-auto");
        ASSERT_FIELD(e, "CODE_FUNC", "body_auto_detects_stream");
        ASSERT_FIELD(e, "CODE_FILE", __FILE__);
        ASSERT_NOT_NULL(json_get_str(e, "CODE_LINE"));
        ASSERT_FIELD(e, "_PID", pid);

        /* The stream itself worked (so the detection was not vacuous) ... */
        snprintf(msg, sizeof(msg), "plain stderr line %s", marker);
        e = find_entry(arr, "MESSAGE", msg);
        ASSERT_NOT_NULL(e);
        ASSERT_FIELD(e, "_TRANSPORT", "stdout");
        /* ... and nothing else arrived, in particular no plain "controld: notice: ..." line. */
        ASSERT_EQ(cJSON_GetArraySize(arr), 2);
}

TEST_FULL(auto_target_detects_journal_stream, 60) {
        with_journald(body_auto_detects_stream);
}
