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

#include <sqlite3.h>

#include "cleanup.h"
#include "ctltest.h"
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

/* All entries matching match ("FIELD=value"), waiting until at least want entries
 * exist (journald indexes asynchronously). Returns a JSON array. */
static cJSON *journal_query_match(const char *match, int want) {
        char *const argv[] = { "journalctl", "--no-pager", "-q", "-o", "json", (char *) match, NULL };

        for (int64_t t0 = mono_ms();; usleep(100 * 1000)) {
                _cleanup_free_ char *out = NULL;
                cJSON *arr = cJSON_CreateArray();
                int n = 0;

                ASSERT_NOT_NULL(arr);
                int r = test_run_capture(argv, &out, 4 << 20);
                ASSERT_EQ(r, 0);
                for (char *line = out, *nl; line && *line; line = nl ? nl + 1 : NULL) {
                        struct err err = { 0 };
                        cJSON *e = NULL;
                        nl = strchr(line, '\n');
                        size_t len = nl ? (size_t) (nl - line) : strlen(line);
                        if (len == 0)
                                continue;
                        if (json_parse(line, len, 1 << 20, 8, &e, &err) < 0)
                                test_fail(__FILE__, __LINE__, "journalctl printed bad JSON: %s: %.*s", err.message, (int) len, line);
                        cJSON_AddItemToArray(arr, e);
                        n++;
                }
                if (n >= want || mono_ms() - t0 > WAIT_MS)
                        return arr;
                cJSON_Delete(arr);
        }
}

/* All entries with SYSLOG_IDENTIFIER=ident (see journal_query_match). */
static cJSON *journal_query(const char *ident, int want) {
        char match[96];
        snprintf(match, sizeof(match), "SYSLOG_IDENTIFIER=%s", ident);
        return journal_query_match(match, want);
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

/* fork(), where the child is started the way systemd starts a service: its stderr is a journal
 * stream with identifier ident, and JOURNAL_STREAM names it. Returns what fork() does. */
static pid_t fork_on_journal_stream(const char *ident) {
        struct stat st;
        char env[64];
        int fd = journal_stream_fd(ident, LOG_INFO);
        ASSERT_EQ(fstat(fd, &st), 0);
        snprintf(env, sizeof(env), "%llu:%llu", (unsigned long long) st.st_dev, (unsigned long long) st.st_ino);
        pid_t pid = fork();
        ASSERT_TRUE(pid >= 0);
        if (pid == 0) {
                dup2(fd, STDERR_FILENO);
                setenv("JOURNAL_STREAM", env, 1);
                return 0;
        }
        close(fd);
        return pid;
}

static void body_auto_detects_stream(void) {
        char ident[32], marker[64];
        int status;

        unique_ident(ident, sizeof(ident));
        snprintf(marker, sizeof(marker), "marker-%s", ident + 10);

        /* The child is what systemd would start: stderr is the stream, JOURNAL_STREAM names it. */
        pid_t child = fork_on_journal_stream(ident);
        if (child == 0) {
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

/* ---------------------------------------------------------------- (c) every documented key at once */

static char c_ident[32];

static void body_every_key(void) {
        static const char *const keys[] = { "SANDBOX_ID", "NODE_ID", "ACCOUNT_ID", "REQUEST_ID", "NOMAD_JOB_ID", "ALLOC_ID",
                                            "SNAPSHOT_ID", "EGRESS_MODE", "DESTROY_REASON", "DURATION_MS" };
        unique_ident(c_ident, sizeof(c_ident));
        log_open(c_ident, LOG_TARGET_JOURNAL);
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                char v[32];
                snprintf(v, sizeof(v), "v-%zu", i);
                log_ctx_set(keys[i], v);
        }
        log_info("every key");
        log_ctx_reset();
        _cleanup_json_ cJSON *arr = journal_query(c_ident, 1);
        const cJSON *e = find_entry(arr, "MESSAGE", "every key");
        ASSERT_NOT_NULL(e);
        for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
                char v[32];
                snprintf(v, sizeof(v), "v-%zu", i);
                ASSERT_FIELD(e, keys[i], v);
        }
}

/* The journald field table of OPERATIONS.md, ten keys in one event (more than the eight
 * the context used to hold), SNAPSHOT_ID among them for the snapshot work. */
TEST_FULL(every_documented_key_reaches_journald, 60) {
        with_journald(body_every_key);
}

/* ---------------------------------------------------------------- (d) controld's own entries */

static pid_t d_pid;

/* Starts build/controld on c's config the way systemd does: no -d, stderr is a journal
 * stream named by JOURNAL_STREAM, so events go to journald as structured entries. */
static void controld_under_journal(struct ctld *c) {
        d_pid = fork_on_journal_stream("controld");
        if (d_pid == 0) {
                execl(test_build_path("controld"), "controld", "-f", c->conf, (char *) NULL);
                _exit(127);
        }
        c->pid = d_pid;
        c->shadow->pid = d_pid;  /* the exit hook stops it and destroys what it made */
        for (int i = 0; i < 300 && !test_port_open(c->port); i++)
                usleep(20000);
        HTTP_EXPECT(c, "GET", "/healthz", NULL, NULL, 200);
}

static void set_job_alloc(struct ctld *c, const char *id) {
        char path[400], sql[200];
        sqlite3 *db = NULL;
        snprintf(path, sizeof(path), "%s/controld.db", c->dir);
        snprintf(sql, sizeof(sql), "UPDATE sandboxes SET job_id = 'job-%.8s', alloc_id = 'alloc-%.8s' WHERE id = '%s'", id, id,
                 id);
        ASSERT_EQ(sqlite3_open(path, &db), SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        ASSERT_EQ(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        ASSERT_EQ(sqlite3_changes(db), 1);
        sqlite3_close(db);
}

/* The entry of this controld whose MESSAGE starts with prefix and names sandbox id (any
 * sandbox when id is NULL). */
static const cJSON *controld_entry(const char *prefix, const char *id, int want) {
        static cJSON *arr;
        char match[32];
        snprintf(match, sizeof(match), "_PID=%d", (int) d_pid);
        for (int64_t t0 = mono_ms();; usleep(200 * 1000)) {
                cJSON_Delete(arr);
                arr = journal_query_match(match, want);
                const cJSON *e;
                cJSON_ArrayForEach(e, arr) {
                        const char *m = json_get_str(e, "MESSAGE"), *s = json_get_str(e, "SANDBOX_ID");
                        if (m && s && !strncmp(m, prefix, strlen(prefix)) && (!id || !strcmp(s, id)))
                                return e;
                }
                if (mono_ms() - t0 > WAIT_MS) {
                        _cleanup_free_ char *all = json_print(arr);
                        test_fail(__FILE__, __LINE__, "no controld entry '%s...' for %s in %.3000s", prefix, id, all);
                }
        }
}

static void body_controld_fields(void) {
        static struct ctld c;
        char id[25];
        struct hres r;
        _cleanup_free_ char *key = ctld_start_with_account(&c, "journal", NULL);
        ctld_stop_daemon(&c);
        controld_under_journal(&c);

        /* Create: EGRESS_MODE on every entry of it; NODE_ID once placed. */
        ctld_create(&c, key, "{\"egress\":{\"mode\":\"deny_all\"}}", id);
        const cJSON *e = controld_entry("sandbox starting", id, 2);
        ASSERT_FIELD(e, "EGRESS_MODE", "deny_all");
        ASSERT_NOT_NULL(json_get_str(e, "REQUEST_ID"));
        ASSERT_NOT_NULL(json_get_str(e, "ACCOUNT_ID"));
        e = controld_entry("sandbox ready in", id, 2);
        ASSERT_FIELD(e, "EGRESS_MODE", "deny_all");
        ASSERT_FIELD(e, "NODE_ID", "local");
        ASSERT_NULL(json_get_str(e, "NOMAD_JOB_ID"));   /* the docker driver has no job */

        /* A failed create: DESTROY_REASON=failed beside the reason. */
        http_req(&c, "POST", "/sandboxes", key, "{\"template\":\"missing-image\"}", &r);
        ASSERT_EQ(r.status, 503);
        hres_done(&r);
        e = controld_entry("sandbox provisioning failed", NULL, 4);
        ASSERT_TRUE(hexid_valid(json_get_str(e, "SANDBOX_ID")));
        ASSERT_FIELD(e, "DESTROY_REASON", "failed");
        ASSERT_FIELD(e, "EGRESS_MODE", "open");
        ASSERT_FIELD(e, "PRIORITY", "3");

        /* A placed sandbox whose record names a Nomad job and allocation: every entry about it
         * carries them (here the destroy, with its reason). */
        ctld_stop_daemon(&c);
        set_job_alloc(&c, id);
        controld_under_journal(&c);
        char path[64], want[32];
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(&c, "DELETE", path, key, NULL, 204);
        e = controld_entry("sandbox destroyed", id, 1);
        ASSERT_FIELD(e, "DESTROY_REASON", "user");
        ASSERT_FIELD(e, "NODE_ID", "local");
        snprintf(want, sizeof(want), "job-%.8s", id);
        ASSERT_FIELD(e, "NOMAD_JOB_ID", want);
        snprintf(want, sizeof(want), "alloc-%.8s", id);
        ASSERT_FIELD(e, "ALLOC_ID", want);
        ctld_stop(&c);
}

TEST_FULL(controld_entries_carry_placement_egress_and_destroy_fields, 180) {
        need_docker();
        with_journald(body_controld_fields);
}
