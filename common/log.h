/* log.h — the one logging API of controld and nodeagent.
 *
 * When stderr is connected to the journal ($JOURNAL_STREAM names stderr's
 * device:inode) events go to journald with structured fields via
 * sd_journal_send(): MESSAGE, PRIORITY, CODE_FILE/LINE/FUNC, SYSLOG_IDENTIFIER
 * and our context keys (SANDBOX_ID, NODE_ID, ACCOUNT_ID, REQUEST_ID,
 * NOMAD_JOB_ID, ALLOC_ID, SNAPSHOT_ID, EGRESS_MODE, DESTROY_REASON, DURATION_MS;
 * any KEY of [A-Z0-9_] works, up to LOG_CTX_MAX at once). Otherwise one plain
 * line per event on stderr:  "controld: info: sandbox ready SANDBOX_ID=abc NODE_ID=n1".
 *
 * Context keys are thread-local: set them at the start of a unit of work
 * (a request, a message) and reset them at its end. Values are truncated to
 * LOG_CTX_VALUE_MAX bytes and scrubbed of control characters.
 *
 * Never pass secrets (API keys, passwords, tokens) to this API.
 */
#pragma once

#include <syslog.h>
#include <stdbool.h>

#define LOG_CTX_MAX 16
#define LOG_CTX_VALUE_MAX 128

enum log_target { LOG_TARGET_AUTO, LOG_TARGET_STDERR, LOG_TARGET_JOURNAL };

/* ident: program name (SYSLOG_IDENTIFIER and plain-line prefix). */
void log_open(const char *ident, enum log_target target);
void log_set_max_level(int prio);
/* Parses "debug", "info", "notice", "warning", "err"/"error", "crit". Returns prio or -EINVAL. */
int log_level_from_string(const char *s);
bool log_to_journal(void);

/* Thread-local context field. value == NULL removes key. */
void log_ctx_set(const char *key, const char *value);
void log_ctx_reset(void);

/* Emits one event. err > 0 or < 0 sets errno for %m. Returns -abs(err) (or -EIO when err == 0)
 * so callers can write:  return log_error_errno(r, "Failed to open %s: %m", p); */
int log_emit(int prio, int err, const char *file, int line, const char *func,
             const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#define log_full_errno(prio, err, ...) \
        log_emit((prio), (err), __FILE__, __LINE__, __func__, __VA_ARGS__)

#define log_debug(...)   log_full_errno(LOG_DEBUG, 0, __VA_ARGS__)
#define log_info(...)    log_full_errno(LOG_INFO, 0, __VA_ARGS__)
#define log_notice(...)  log_full_errno(LOG_NOTICE, 0, __VA_ARGS__)
#define log_warning(...) log_full_errno(LOG_WARNING, 0, __VA_ARGS__)
#define log_error(...)   log_full_errno(LOG_ERR, 0, __VA_ARGS__)
#define log_crit(...)    log_full_errno(LOG_CRIT, 0, __VA_ARGS__)

#define log_debug_errno(e, ...)   log_full_errno(LOG_DEBUG, (e), __VA_ARGS__)
#define log_info_errno(e, ...)    log_full_errno(LOG_INFO, (e), __VA_ARGS__)
#define log_warning_errno(e, ...) log_full_errno(LOG_WARNING, (e), __VA_ARGS__)
#define log_error_errno(e, ...)   log_full_errno(LOG_ERR, (e), __VA_ARGS__)
