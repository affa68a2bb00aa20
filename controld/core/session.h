/* session.h — what runs in a sandbox, as the core hands it out (session.c): a session (a
 * command's process, a detached process attached to, a terminal) and a directory watch, each
 * one event stream read with a timeout. The edges render the stream; how it is carried (the
 * sandbox's agent, guest/, or the driver's exec path for runtime.c's commands) is the core's,
 * so an edge includes this and process.h, never a guest/ or driver/ header.
 *
 * A session is made by process.c (process_start_session, process_attach, process_start_terminal)
 * and has one user at a time; no read waits longer than its timeout_ms. Nothing here logs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"
#include "err.h"

struct ctl;
struct sandbox;

struct session;

/* Output: stream 1 = stdout (a terminal's output too), 2 = stderr. Returning < 0 stops the
 * read under way, which returns it. */
typedef int (*session_output_cb)(int stream, const uint8_t *data, size_t len, void *ud);

/* Waits up to timeout_ms for output and passes it to cb (NULL: dropped). 1 when the stream has ended (the
 * process exited: session_exit_code; or the connection dropped first: session_lost), 0 when the
 * wait ended first, -ECONNRESET when watch_fd (the client's socket; -1 = none) hung up, cb's
 * < 0, other < 0 when the sandbox's agent failed. Keep-alives are the caller's, between reads. */
int session_read(struct session *s, int timeout_ms, int watch_fd, session_output_cb cb, void *ud);
/* Writes stdin (bounded by timeout_ms); output that arrives meanwhile goes to cb. -EPIPE: no
 * stdin, or the process is gone. */
int session_write(struct session *s, const void *data, size_t len, int timeout_ms, session_output_cb cb, void *ud);
int session_close_stdin(struct session *s);
/* The terminal's new size (output that arrives meanwhile goes to cb); 0 once sent. */
int session_resize(struct session *s, uint32_t rows, uint32_t cols, session_output_cb cb, void *ud);
/* sig to the process group; 0 once sent (or when it has already ended); -EOPNOTSUPP on the
 * driver's exec path, which cannot signal (session_signals). */
int session_signal(struct session *s, int sig);
/* After the end: 0 with the exit code (128 + signal for a signal), -ESRCH before it or when the
 * connection was lost. */
int session_exit_code(struct session *s, int *ret);
/* The signal that ended the process (0: it exited, or has not ended). */
int session_term_signal(const struct session *s);
/* The process's pid in the sandbox (0 on the driver's exec path: not known). */
uint32_t session_pid(const struct session *s);
/* The stream ended because the connection dropped before the exit (the sandbox or its agent
 * went away, or another client attached to the process). */
bool session_lost(const struct session *s);
/* An fd that polls readable when session_read has something (a caller that multiplexes). */
int session_fd(const struct session *s);
/* Frees s: a detached process keeps running, a terminal's shell dies (its process group is
 * killed with the connection). NULL is fine. Returns NULL. */
struct session *session_free(struct session *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct session *, session_free)

/* ---- a directory watch (process_watch) ---- */

struct dirwatch;
/* One change: event is enum pj_agent_event (pj_agent.h), path relative to the watched
 * directory. < 0 stops the read (returned by dirwatch_read). */
typedef int (*dirwatch_cb)(int event, const char *path, bool dir, void *ud);
/* Events into cb: 1 when the watch has ended (dirwatch_truncated: whether events were lost),
 * 0 when the wait ended first, -ECONNRESET when watch_fd hung up, other < 0 errors. */
int dirwatch_read(struct dirwatch *w, int timeout_ms, int watch_fd, dirwatch_cb cb, void *ud);
bool dirwatch_truncated(const struct dirwatch *w);
struct dirwatch *dirwatch_free(struct dirwatch *w);

/* ---- the agent itself ---- */

/* Connects to sb's agent and hangs up: 0 when it answers; -EOPNOTSUPP when this controld runs
 * no agent (or the driver has no path to it); other -errno with the reason in err. */
int session_agent_ping(struct ctl *c, const struct sandbox *sb, struct err *err);

/* ---- for the core (process.c, runtime.c): sessions over what carries them, taken over ---- */

struct guest_exec;
struct guest_watch;
struct driver;
struct exec_session;
struct session *session_of_guest(struct guest_exec *x);
struct session *session_of_driver(struct driver *d, struct exec_session *x);
struct dirwatch *dirwatch_of_guest(struct guest_watch *w);
/* Whether session_signal reaches the process (the agent's sessions do; the driver's exec
 * path has no pid: its callers kill what they recorded themselves). */
bool session_signals(const struct session *s);
/* After a failed run: whether the sandbox's memory limit killed it (under gVisor that takes the
 * whole sandbox, its agent too: a lost agent session asks the driver). */
bool session_oom_killed(struct session *s, struct ctl *c, const struct sandbox *sb);
