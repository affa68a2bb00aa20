/* agent-exec.h — a process or a file transfer in a sandbox through its agent (one connection
 * each), with the same shape as the driver's exec sessions so runtime.c drives either.
 *
 * Everything the agent says is hostile: frames are bounded by the codec, unknown or
 * out-of-order frames end the session (-EPROTO), and no wait is longer than its timeout. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"
#include "guest-conn.h"

struct guest_exec;

/* Output as it comes: stream 1 stdout, 2 stderr; < 0 stops the session. The drivers' exec
 * sessions use the same callback, so the core drives either. */
typedef int (*exec_output_cb)(int stream, const uint8_t *data, size_t len, void *ud);

struct guest_spawn {
        const char *const *argv;   /* NULL-terminated; run directly (no shell of ours) */
        const char *const *env;    /* "K=V" layered over the sandbox's environment */
        const char *cwd;           /* NULL = "/" */
        bool want_stdin;
        bool kill_on_detach;       /* the process group dies with this connection */
        const char *tag;           /* NULL = none */
        uint32_t rows, cols;       /* both > 0: a PTY */
        bool as_ids;               /* run as uid:gid, supplementary groups dropped */
        uint32_t uid, gid;
};

/* Spawns on cl (taken over, freed with the session, also on failure). A SPAWN the agent
 * refuses for the user's reasons is not an error: the session then yields a message on
 * stderr and the shell's exit code (cwd missing: 126; program not found: 127; not
 * executable: 126). -errno with err for the rest. */
int guest_exec_start(struct guest_client *cl, const struct guest_spawn *spec, struct guest_exec **ret, struct err *err);
/* Same contracts as driver_ops exec_write / exec_close_stdin / exec_read / exec_exit_code. */
int guest_exec_write(struct guest_exec *x, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud);
int guest_exec_close_stdin(struct guest_exec *x);
int guest_exec_read(struct guest_exec *x, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud);
int guest_exec_exit_code(struct guest_exec *x, int *ret);
/* The signal that ended the process (0: it exited, or has not ended). */
int guest_exec_term_signal(const struct guest_exec *x);
/* SIGNAL to the process group; 0 once sent (or when it has already ended). */
int guest_exec_signal(struct guest_exec *x, int sig);
/* RESIZE of the session's terminal (output that arrives meanwhile goes to cb); 0 once sent. */
int guest_exec_resize(struct guest_exec *x, uint32_t rows, uint32_t cols, exec_output_cb cb, void *ud);
/* The agent connection's fd, for poll() by a caller that also waits on its client. */
int guest_exec_fd(const struct guest_exec *x);
pid_t guest_exec_pid(const struct guest_exec *x);
/* The connection dropped before EXIT (the sandbox or its agent went away). */
bool guest_exec_lost(const struct guest_exec *x);
void guest_exec_free(struct guest_exec *x);

/* Files through the agent. A read: open (first DATA or the end, so a missing file is an
 * error at once), then chunks; a write: open, data, finish (the agent's verdict). Errors are
 * the agent's errno, negative. */
struct guest_file;
int guest_file_read_open(struct guest_client *cl, const char *path, struct guest_file **ret, struct err *err);
/* Next bytes into cb: 1 at the end, 0 when the wait ended first, < 0 errors (-ECONNRESET
 * when watch_fd hung up). */
int guest_file_read(struct guest_file *f, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud);
int guest_file_write_open(struct guest_client *cl, const char *path, struct guest_file **ret, struct err *err);
int guest_file_write(struct guest_file *f, const void *data, size_t len, int timeout_ms);
int guest_file_write_finish(struct guest_file *f, int timeout_ms, struct err *err);
void guest_file_free(struct guest_file *f);
/* Writes/removes a whole small file on cl without taking it (code snippets). */
int guest_put_small(struct guest_client *cl, const char *path, const void *data, size_t len, int timeout_ms,
                    struct err *err);
int guest_remove(struct guest_client *cl, const char *path, int timeout_ms);

/* File system calls on cl (not taken), each bounded by timeout_ms: 0 or the agent's -errno. */
struct guest_stat {
        uint8_t type;                    /* enum pj_agent_ftype */
        uint64_t size;
        uint32_t mode;                   /* permission bits */
        int64_t mtime_ns;
        uint32_t uid, gid;               /* the owner, when has_owner (an older agent sends none) */
        bool has_owner;
};
int guest_fs_stat(struct guest_client *cl, const char *path, struct guest_stat *ret, int timeout_ms);
/* Each entry (lstat'ed; name, type, size, mode, mtime) to cb; < 0 from cb stops (returned). */
typedef int (*guest_dirent_cb)(const struct pj_agent_fields *e, void *ud);
int guest_fs_listdir(struct guest_client *cl, const char *path, guest_dirent_cb cb, void *ud, int timeout_ms,
                     bool *ret_truncated);
int guest_fs_mkdir(struct guest_client *cl, const char *path, bool parents, int timeout_ms);
int guest_fs_move(struct guest_client *cl, const char *from, const char *to, int timeout_ms);
int guest_fs_remove(struct guest_client *cl, const char *path, bool recursive, int timeout_ms);
/* PARK (AGENT-PROTOCOL.md): once OK (0) the agent has closed its listener and connections,
 * this one included, and unlinked its socket; PJ_AGENT_UNPARK_SIGNAL to the sandbox's PID 1
 * undoes it. -errno: ERROR's, -ETIMEDOUT, -EPROTO. */
int guest_park(struct guest_client *cl, int timeout_ms);

/* ---- processes the agent keeps (the /processes API) ---- */

/* ATTACH on cl (taken over): the process's buffered output (the last 1 MiB), then live
 * output and its EXIT, read with guest_exec_read. -ESRCH: no such process. */
int guest_exec_attach(struct guest_client *cl, uint32_t pid, struct guest_exec **ret, struct err *err);
/* A pid-addressed STDIN (chunked), STDIN_CLOSE, SIGNAL or RESIZE on cl (not taken), each
 * answered OK or ERROR: 0 or -errno (ESRCH gone, EPIPE no stdin, ENOTTY no terminal). */
int guest_proc_stdin(struct guest_client *cl, uint32_t pid, const void *data, size_t len, bool close, int timeout_ms);
int guest_proc_signal(struct guest_client *cl, uint32_t pid, int sig, int timeout_ms);
int guest_proc_resize(struct guest_client *cl, uint32_t pid, uint32_t rows, uint32_t cols, int timeout_ms);
/* LIST: the processes the agent keeps; *ret (n entries, pj_agent_fields_done each, then
 * free) is bounded by PJ_AGENT_MAX_PROCS. */
int guest_proc_list(struct guest_client *cl, struct pj_agent_fields **ret, size_t *ret_n, int timeout_ms);

/* ---- watching a directory (WATCH) ---- */

struct guest_watch;
/* One change: event is enum pj_agent_event, path relative to the watched directory. < 0 stops
 * the read (returned by guest_watch_read). */
typedef int (*guest_watch_cb)(int event, const char *path, bool dir, void *ud);
/* WATCH path on cl (taken over, freed with the watch, also on failure): 0 once the agent
 * watches; -errno with err (-ENOENT, -ENOTDIR, -EMFILE, -ENOSPC are the agent's refusals). */
int guest_watch_open(struct guest_client *cl, const char *path, bool recursive, struct guest_watch **ret, struct err *err);
/* Events into cb: 1 when the watch has ended (guest_watch_truncated says whether events were
 * lost), 0 when the wait ended first, < 0 errors (-ECONNRESET: watch_fd hung up). */
int guest_watch_read(struct guest_watch *w, int timeout_ms, int watch_fd, guest_watch_cb cb, void *ud);
bool guest_watch_truncated(const struct guest_watch *w);
void guest_watch_free(struct guest_watch *w);
