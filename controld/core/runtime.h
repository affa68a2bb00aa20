/* runtime.h — the runtime core (runtime.c): commands and files in a sandbox, no HTTP. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* What a finished run says (runtime_wait, runtime_step); its edge renders it. */
struct exec_result {
        const char *out, *err;           /* result only; may hold NUL bytes, NULL = empty */
        size_t out_len, err_len;
        int exit_code;
        int64_t duration_ms;
        bool out_truncated, err_truncated, timed_out, oom_killed;
};

/* runtime.c: execs and file transfers in flight on a sandbox right now. */
int64_t runtime_active(const char *sandbox_id);

/* ---- the runtime core (runtime.c): commands and files in a sandbox, no HTTP ----
 * Every call returns 0 or -errno with the user's message in err; a protocol adapter
 * (api-runtime.c for the Brimble API) turns that into its answer. A run holds one slot of
 * its sandbox ([server] max_exec_concurrent) and one of its account (max_runtime_per_account)
 * until runtime_free; -EUSERS when either is full. */
struct runtime_run;
struct runtime_cmd {
        const char *const *argv;        /* the user's command (argv[0] looked up in the sandbox's PATH) */
        char **env;                     /* "K=V" for argv only, NULL-terminated; NULL = none */
        const char *cwd;                /* NULL = "/" */
        int timeout_s;                  /* the whole run; then the process tree is killed (exit 137) */
        const char *token;              /* names its pid record and snippet file; NULL = a fresh one */
        const char *stdin_file;         /* stdin_data goes into this file before argv runs (a snippet) */
        const char *stdin_data;         /* NULL = no input */
        size_t stdin_len;
};
/* A streamed run's output as it comes: valid UTF-8, never empty; stream 1 stdout, 2 stderr.
 * Returning < 0 says the caller takes no more: the run is stopped. */
typedef int (*runtime_output_fn)(void *ud, int stream, const char *text, size_t len);
enum runtime_step { RUNTIME_RUNNING, RUNTIME_EXITED, RUNTIME_FAILED, RUNTIME_CLIENT_GONE };

/* The caller's sandbox id, ready (else -EBUSY saying its status); stamps its activity. */
int runtime_load_ready(struct ctl *c, const struct account *acc, const char *id, struct sandbox *ret,
                       struct err *err);
/* Starts cmd in sb (moved into the run, cleared here) and writes its input. output NULL:
 * output is kept for runtime_wait (up to [server] max_exec_output per stream); else each
 * chunk goes to output(ud, ...) and runtime_step drives the run. */
int runtime_start(struct ctl *c, struct sandbox *sb, const struct runtime_cmd *cmd, runtime_output_fn output, void *ud,
                  struct runtime_run **ret, struct err *err);
/* output refused more while the input was written: the run was stopped at start. */
bool runtime_output_refused(const struct runtime_run *x);
/* A buffered run to its end (or its deadline); ret points into the run until runtime_free. */
int runtime_wait(struct runtime_run *x, struct exec_result *ret, struct err *err);
/* A streamed run: waits up to max_wait_ms for output, the end or client_fd hanging up (-1 =
 * none). RUNTIME_EXITED fills ret; RUNTIME_FAILED says why in err; the run is killed then
 * and on RUNTIME_CLIENT_GONE. */
enum runtime_step runtime_step(struct runtime_run *x, int max_wait_ms, int client_fd, struct exec_result *ret,
                               struct err *err);
void runtime_kill(struct runtime_run *x);
/* The process ended, or was killed. */
bool runtime_ended(const struct runtime_run *x);
/* Kills what still runs, releases the slots. Accepts NULL; returns NULL. */
struct runtime_run *runtime_free(struct runtime_run *x);
/* Files, under [server] transfer_timeout. A write: start, write (-EPIPE when the sandbox
 * stopped reading, -ETIMEDOUT past the deadline), finish (how the sandbox took it). */
int runtime_file_write_start(struct ctl *c, struct sandbox *sb, const char *path, struct runtime_run **ret,
                             struct err *err);
int runtime_file_write(struct runtime_run *x, const void *data, size_t len);
int runtime_file_write_finish(struct runtime_run *x, const char *path, struct err *err);
/* A read: open waits for the first bytes or the end (so a missing file is -ENOENT); when the
 * whole file came before the end, *ret_all holds it (valid until runtime_free). Then read
 * returns bytes, 0 at the end, < 0 on errors (client_fd hung up, deadline, shutdown). */
int runtime_file_read_open(struct ctl *c, struct sandbox *sb, const char *path, struct runtime_run **ret,
                           const void **ret_all, size_t *ret_all_len, struct err *err);
ssize_t runtime_file_read(struct runtime_run *x, int client_fd, char *buf, size_t max);
