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
struct api_error;
struct guest_exec;
struct guest_watch;

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
                  struct api_error *err);
/* process_start keeping the session: its output and exit are read from *ret (guest_exec_pid
 * is the pid); freeing it detaches, the process keeps running. */
int process_start_session(struct ctl *c, const struct sandbox *sb, const struct process_spec *spec,
                          struct guest_exec **ret, struct api_error *err);
/* The processes the agent keeps (running, or finished and still listed); *ret holds *ret_n
 * entries: pj_agent_fields_done() each, then free(). */
int process_list(struct ctl *c, const struct sandbox *sb, struct pj_agent_fields **ret, size_t *ret_n,
                 struct api_error *err);
/* A session on pid's output: what the agent buffered (the last 1 MiB), then live output and
 * the exit, read with guest_exec_read(). The newest attach wins: an older one ends. */
int process_attach(struct ctl *c, const struct sandbox *sb, uint32_t pid, struct guest_exec **ret, struct api_error *err);
int process_stdin(struct ctl *c, const struct sandbox *sb, uint32_t pid, const char *data, size_t len, bool close,
                  struct api_error *err);
int process_signal(struct ctl *c, const struct sandbox *sb, uint32_t pid, int sig, struct api_error *err);
int process_resize(struct ctl *c, const struct sandbox *sb, uint32_t pid, int rows, int cols, struct api_error *err);
/* A watch on the sandbox directory path (absolute; with recursive its tree), read with
 * guest_watch_read(). -ENOENT no such directory, -EINVAL not a directory, -EUSERS too many
 * watches (16 per connection; 4096 directories per sandbox). */
int process_watch(struct ctl *c, const struct sandbox *sb, const char *path, bool recursive, struct guest_watch **ret,
                  struct api_error *err);
