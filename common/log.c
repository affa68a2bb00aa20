/* log.c — journald structured fields or plain stderr lines. See log.h. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <systemd/sd-journal.h>

#include "cleanup.h"
#include "log.h"

static char log_ident[32] = "paddock";
static int log_max_level = LOG_INFO;
static bool log_journal;

struct log_ctx_entry {
        char key[32];
        char value[LOG_CTX_VALUE_MAX + 1];
};
static __thread struct log_ctx_entry log_ctx[LOG_CTX_MAX];
static __thread int log_ctx_n;

static const char *const prio_names[] = {
        [LOG_EMERG] = "emerg", [LOG_ALERT] = "alert", [LOG_CRIT] = "crit",
        [LOG_ERR] = "error", [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
        [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

/* $JOURNAL_STREAM is "dev:ino" of the stream systemd connected; only trust it
 * when it really is our stderr (a child may inherit the variable). */
static bool stderr_is_journal(void) {
        const char *e = getenv("JOURNAL_STREAM");
        struct stat st;
        unsigned long long dev, ino;

        if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
                return false;
        if (fstat(STDERR_FILENO, &st) < 0)
                return false;
        return (unsigned long long) st.st_dev == dev && (unsigned long long) st.st_ino == ino;
}

void log_open(const char *ident, enum log_target target) {
        snprintf(log_ident, sizeof(log_ident), "%s", ident ? ident : "paddock");
        switch (target) {
        case LOG_TARGET_AUTO:
                log_journal = stderr_is_journal();
                break;
        case LOG_TARGET_STDERR:
                log_journal = false;
                break;
        case LOG_TARGET_JOURNAL:
                log_journal = true;
                break;
        }
}

void log_set_max_level(int prio) { log_max_level = prio; }
bool log_to_journal(void) { return log_journal; }

int log_level_from_string(const char *s) {
        if (!s)
                return -EINVAL;
        if (!strcmp(s, "err"))
                return LOG_ERR;
        for (size_t i = 0; i < ELEMENTSOF(prio_names); i++)
                if (prio_names[i] && !strcmp(s, prio_names[i]))
                        return (int) i;
        return -EINVAL;
}

static void scrub(char *s) {
        for (; *s; s++)
                if ((unsigned char) *s < 0x20 || *s == 0x7f)
                        *s = ' ';
}

void log_ctx_set(const char *key, const char *value) {
        int i;
        for (i = 0; i < log_ctx_n; i++)
                if (!strcmp(log_ctx[i].key, key))
                        break;
        if (!value) {
                if (i < log_ctx_n) {
                        log_ctx[i] = log_ctx[log_ctx_n - 1];
                        log_ctx_n--;
                }
                return;
        }
        if (i == log_ctx_n) {
                if (log_ctx_n >= LOG_CTX_MAX)
                        return;
                log_ctx_n++;
                snprintf(log_ctx[i].key, sizeof(log_ctx[i].key), "%s", key);
        }
        snprintf(log_ctx[i].value, sizeof(log_ctx[i].value), "%s", value);
        scrub(log_ctx[i].value);
}

void log_ctx_reset(void) { log_ctx_n = 0; }

int log_emit(int prio, int err, const char *file, int line, const char *func, const char *fmt, ...) {
        char msg[2048];
        int ret = err > 0 ? -err : err < 0 ? err : -EIO;
        int saved_errno = errno;
        va_list ap;

        if (prio > log_max_level) {
                errno = saved_errno;
                return ret;
        }
        errno = err < 0 ? -err : err;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);

        if (log_journal) {
                /* MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, CODE_* and context fields. */
                struct iovec iov[4 + LOG_CTX_MAX + 1];
                char f_msg[sizeof(msg) + 16], f_prio[16], f_ident[48], f_file[256], f_line[32],
                        f_ctx[LOG_CTX_MAX][32 + LOG_CTX_VALUE_MAX + 8], f_errno[32];
                int n = 0;

#define IOV_STR(buf) iov[n++] = (struct iovec) { .iov_base = (buf), .iov_len = strlen(buf) }
                snprintf(f_msg, sizeof(f_msg), "MESSAGE=%s", msg);
                IOV_STR(f_msg);
                snprintf(f_prio, sizeof(f_prio), "PRIORITY=%d", prio);
                IOV_STR(f_prio);
                snprintf(f_ident, sizeof(f_ident), "SYSLOG_IDENTIFIER=%s", log_ident);
                IOV_STR(f_ident);
                snprintf(f_file, sizeof(f_file), "CODE_FILE=%s", file);
                snprintf(f_line, sizeof(f_line), "CODE_LINE=%d", line);
                for (int i = 0; i < log_ctx_n; i++) {
                        snprintf(f_ctx[i], sizeof(f_ctx[i]), "%s=%s", log_ctx[i].key, log_ctx[i].value);
                        IOV_STR(f_ctx[i]);
                }
                if (err) {
                        snprintf(f_errno, sizeof(f_errno), "ERRNO=%d", err < 0 ? -err : err);
                        IOV_STR(f_errno);
                }
#undef IOV_STR
                /* The _with_location variant adds CODE_FILE, CODE_LINE and CODE_FUNC. */
                sd_journal_sendv_with_location(f_file, f_line, func, iov, n);
        } else {
                char out[sizeof(msg) + LOG_CTX_MAX * (LOG_CTX_VALUE_MAX + 40) + 64];
                size_t off = 0;
                const char *pn = prio >= 0 && prio < (int) ELEMENTSOF(prio_names) ? prio_names[prio] : "log";

                scrub(msg);
                off += (size_t) snprintf(out + off, sizeof(out) - off, "%s: %s: %s", log_ident, pn, msg);
                for (int i = 0; i < log_ctx_n && off < sizeof(out); i++)
                        off += (size_t) snprintf(out + off, sizeof(out) - off, " %s=%s",
                                                 log_ctx[i].key, log_ctx[i].value);
                if (off >= sizeof(out) - 1)
                        off = sizeof(out) - 2;
                out[off++] = '\n';
                /* One write() per event so concurrent threads do not interleave lines. */
                ssize_t _unused_ w = write(STDERR_FILENO, out, off);
        }
        errno = saved_errno;
        return ret;
}
