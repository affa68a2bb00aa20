/* process.c — processes that outlive their request, kept by the sandbox's agent: start one
 * detached, list them, attach to one's output, write its stdin, signal it, resize its
 * terminal. The domain part of /sandboxes/{id}/processes (api-process.c is the adapter): no
 * HTTP here, every call returns 0 or -errno with the user's message in struct err.
 *
 * Every call is its own connection to the agent, so a stuck or hostile agent holds only
 * that call (each bounded by PROCESS_TIMEOUT_MS) and nothing of controld. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest-exec.h"
#include "guest.h"
#include "cleanup.h"
#include "controld.h"
#include "process.h"
#include "log.h"
#include "session.h"
#include "strutil.h"

#define PROCESS_TIMEOUT_MS 10000

static int connect_for(struct ctl *c, const struct sandbox *sb, struct guest_client **ret, struct err *err) {
        struct err msg = { 0 };
        int r = guest_connect(c, sb, ret, &msg);
        if (r == -EOPNOTSUPP)
                return err_set(err, -EOPNOTSUPP,
                               "Processes need the in-sandbox agent, which this server runs without ([init] binary = none, "
                               "or on Nomad no [nomad] relay_secret_file); exec still works");
        if (r < 0) {
                log_ctx_set("SANDBOX_ID", sb->id);
                log_notice("process call: %s", msg.message);
                return err_set(err, -EHOSTUNREACH,
                               "The sandbox's process agent is not answering (the sandbox may predate it, or something in it "
                               "replaced or stopped it); exec still works");
        }
        return 0;
}

static int gone(int r, uint32_t pid, struct err *err) {
        if (r == -ESRCH)
                return err_set(err, -ENOENT, "Process %u not found in this sandbox", pid);
        if (r == -EPIPE)
                return err_set(err, -EBUSY, "Process %u has no stdin open (start it with \"stdin\": true; it may have closed it)", pid);
        if (r == -ENOTTY)
                return err_set(err, -EBUSY, "Process %u has no terminal (start it with \"pty\")", pid);
        return err_set(err, -EHOSTUNREACH, "The sandbox's process agent failed: %s", strerror(-r));
}

static int collect(int stream, const uint8_t *data, size_t len, void *ud) {
        (void) stream;
        return strbuf_append(ud, data, len) < 0 ? -ENOBUFS : 0;
}

int process_start_session(struct ctl *c, const struct sandbox *sb, const struct process_spec *spec,
                          struct session **ret, struct err *err) {
        struct guest_client *cl = NULL;
        int r = connect_for(c, sb, &cl, err);
        if (r < 0)
                return r;
        const char *sh_argv[] = { "/bin/sh", "-c", spec->cmd, NULL };
        const char *const *argv = spec->argv ? spec->argv : sh_argv;
        _cleanup_strv_free_ char **env = sb_env_layer(sb, spec->env);
        struct guest_spawn sp = { .argv = argv, .env = (const char *const *) env, .cwd = spec->cwd,
                                  .want_stdin = spec->stdin_open, .tag = spec->tag,
                                  .rows = (uint32_t) spec->rows, .cols = (uint32_t) spec->cols,
                                  .as_ids = spec->as_ids, .uid = spec->uid, .gid = spec->gid };
        struct guest_exec *x = NULL;
        struct err msg = { 0 };
        r = guest_exec_start(cl, &sp, &x, &msg);
        if (r == -EUSERS)
                return err_set(err, -EUSERS, "This sandbox holds %d processes, the most it keeps; let one finish first",
                               PJ_AGENT_MAX_PROCS);
        if (r < 0)
                return err_set(err, -EHOSTUNREACH, "Could not start the process: %s", msg.message);
        /* A refusal for the user's reasons (missing cwd, no such program) comes back as a
         * session that ended at once, with the reason as its stderr. */
        if (!guest_exec_pid(x)) {
                struct strbuf why;
                strbuf_init(&why, 1024);
                (void) guest_exec_read(x, 0, -1, collect, &why);
                guest_exec_free(x);
                while (why.len && why.buf[why.len - 1] == '\n')
                        why.buf[--why.len] = 0;
                r = err_set(err, -EINVAL, "The process cannot start: %s", why.buf ? why.buf : "refused");
                strbuf_done(&why);
                return r;
        }
        *ret = session_of_guest(x);
        return 0;
}

int process_start_terminal(struct ctl *c, const struct sandbox *sb, const struct process_spec *spec, struct session **ret,
                           struct err *err) {
        struct err msg = { 0 };
        struct guest_client *cl = NULL;
        int r = guest_connect(c, sb, &cl, &msg);
        if (r < 0)
                return err_set(err, -EHOSTUNREACH, "the agent did not answer: %s", msg.message);
        const char *argv[] = { "/bin/sh", "-c", spec->cmd, NULL };
        struct guest_spawn sp = { .argv = argv, .env = (const char *const *) spec->env, .cwd = spec->cwd,
                                  .want_stdin = true, .kill_on_detach = true, .tag = spec->tag,
                                  .rows = (uint32_t) spec->rows, .cols = (uint32_t) spec->cols };
        struct guest_exec *x = NULL;
        if (guest_exec_start(cl, &sp, &x, &msg) < 0)
                return err_set(err, -EIO, "spawn failed: %s", msg.message);
        *ret = session_of_guest(x);
        return 0;
}

int process_start(struct ctl *c, const struct sandbox *sb, const struct process_spec *spec, uint32_t *ret_pid,
                  struct err *err) {
        struct session *x = NULL;
        int r = process_start_session(c, sb, spec, &x, err);
        if (r < 0)
                return r;
        *ret_pid = session_pid(x);
        session_free(x);   /* detached: the process stays, its output goes to the agent's buffer */
        return 0;
}

int process_list(struct ctl *c, const struct sandbox *sb, struct pj_agent_fields **ret, size_t *ret_n,
                 struct err *err) {
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        int r = connect_for(c, sb, &cl, err);
        if (r < 0)
                return r;
        r = guest_proc_list(cl, ret, ret_n, PROCESS_TIMEOUT_MS);
        return r < 0 ? gone(r, 0, err) : 0;
}

int process_attach(struct ctl *c, const struct sandbox *sb, uint32_t pid, struct session **ret, struct err *err) {
        struct guest_client *cl = NULL;
        int r = connect_for(c, sb, &cl, err);
        if (r < 0)
                return r;
        struct err msg = { 0 };
        struct guest_exec *x = NULL;
        r = guest_exec_attach(cl, pid, &x, &msg);
        if (r < 0)
                return gone(r, pid, err);
        *ret = session_of_guest(x);
        return 0;
}

int process_stdin(struct ctl *c, const struct sandbox *sb, uint32_t pid, const char *data, size_t len, bool close,
                  struct err *err) {
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        int r = connect_for(c, sb, &cl, err);
        if (r < 0)
                return r;
        r = guest_proc_stdin(cl, pid, data, len, close, PROCESS_TIMEOUT_MS);
        return r < 0 ? gone(r, pid, err) : 0;
}

int process_signal(struct ctl *c, const struct sandbox *sb, uint32_t pid, int sig, struct err *err) {
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        int r = connect_for(c, sb, &cl, err);
        if (r < 0)
                return r;
        r = guest_proc_signal(cl, pid, sig, PROCESS_TIMEOUT_MS);
        return r < 0 ? gone(r, pid, err) : 0;
}

int process_resize(struct ctl *c, const struct sandbox *sb, uint32_t pid, int rows, int cols, struct err *err) {
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        int r = connect_for(c, sb, &cl, err);
        if (r < 0)
                return r;
        r = guest_proc_resize(cl, pid, (uint32_t) rows, (uint32_t) cols, PROCESS_TIMEOUT_MS);
        return r < 0 ? gone(r, pid, err) : 0;
}

int process_watch(struct ctl *c, const struct sandbox *sb, const char *path, bool recursive, struct dirwatch **ret,
                  struct err *err) {
        struct guest_client *cl = NULL;
        int r = connect_for(c, sb, &cl, err);
        if (r < 0)
                return r;
        struct err msg = { 0 };
        struct guest_watch *w = NULL;
        r = guest_watch_open(cl, path, recursive, &w, &msg);
        switch (r) {
        case 0:
                *ret = dirwatch_of_guest(w);
                return 0;
        case -ENOENT:
                return err_set(err, -ENOENT, "Directory not found in the sandbox: %s", path);
        case -ENOTDIR:
                return err_set(err, -EINVAL, "path is not a directory: %s", path);
        case -EACCES:
                return err_set(err, -EPERM, "The sandbox's agent may not read %s", path);
        case -EMFILE:
        case -ENOSPC:
                return err_set(err, -EUSERS, "%s", msg.message);
        default:
                return err_set(err, -EHOSTUNREACH, "Could not watch %s: %s", path, msg.message);
        }
}
