/* process.h — processes kept by the sandbox's agent (process.c): the domain part of
 * /sandboxes/{id}/processes, and of /sandboxes/{id}/watch (a directory's changes). Every call returns 0 or -errno with the user's message:
 * -ENOENT no such process, -EBUSY it has no stdin / no terminal, -EUSERS the sandbox holds
 * the most processes it keeps, -EOPNOTSUPP this server runs no agent, -EHOSTUNREACH the
 * agent is not answering. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj_agent.h"

struct ctl;
struct sandbox;
struct err;
struct session;
struct dirwatch;

struct process_spec {
        const char *cmd;          /* run by /bin/sh -c */
        const char *const *argv;  /* instead of cmd: run as it is (NULL-terminated) */
        char **env;               /* "K=V" over the sandbox's environment; NULL = none */
        const char *cwd;          /* NULL = "/" */
        const char *tag;          /* NULL = none */
        bool stdin_open;          /* a stdin pipe for process_stdin */
        int rows, cols;           /* > 0: a terminal of that size */
        bool as_ids;              /* run as uid:gid (no supplementary groups); false = the agent's (root) */
        uint32_t uid, gid;
};

int process_start(struct ctl *c, const struct sandbox *sb, const struct process_spec *spec, uint32_t *ret_pid,
                  struct err *err);
/* process_start keeping the session (session.h): its output and exit are read from *ret
 * (session_pid is the pid); freeing it detaches, the process keeps running. */
int process_start_session(struct ctl *c, const struct sandbox *sb, const struct process_spec *spec,
                          struct session **ret, struct err *err);
/* A person's terminal (terminal.c): spec->cmd under /bin/sh -c with a terminal of rows x cols,
 * stdin open, spec->env as it is (not layered over the sandbox's), spec->cwd and spec->tag;
 * the shell's process group dies with the session (session_free). A start the agent refuses
 * for the user's reasons (cwd missing, no such program) is no error: the session's output says
 * why and it exits 126/127. -EHOSTUNREACH when the agent does not answer, -EIO when it could not
 * spawn; err.message says why (for the log, not for the user). */
int process_start_terminal(struct ctl *c, const struct sandbox *sb, const struct process_spec *spec, struct session **ret,
                           struct err *err);
/* The processes the agent keeps (running, or finished and still listed); *ret holds *ret_n
 * entries: pj_agent_fields_done() each, then free(). */
int process_list(struct ctl *c, const struct sandbox *sb, struct pj_agent_fields **ret, size_t *ret_n,
                 struct err *err);
/* A session on pid's output: what the agent buffered (the last 1 MiB), then live output and
 * the exit, read with session_read(). The newest attach wins: an older one ends (lost). */
int process_attach(struct ctl *c, const struct sandbox *sb, uint32_t pid, struct session **ret, struct err *err);
int process_stdin(struct ctl *c, const struct sandbox *sb, uint32_t pid, const char *data, size_t len, bool close,
                  struct err *err);
int process_signal(struct ctl *c, const struct sandbox *sb, uint32_t pid, int sig, struct err *err);
int process_resize(struct ctl *c, const struct sandbox *sb, uint32_t pid, int rows, int cols, struct err *err);
/* A watch on the sandbox directory path (absolute; with recursive its tree), read with
 * dirwatch_read(). -ENOENT no such directory, -EINVAL not a directory, -EUSERS too many
 * watches (16 per connection; 4096 directories per sandbox). */
int process_watch(struct ctl *c, const struct sandbox *sb, const char *path, bool recursive, struct dirwatch **ret,
                  struct err *err);
