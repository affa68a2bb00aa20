/* pi.h — private header of paddock-init, the PID 1 of every sandbox
 * (proto-json/AGENT-PROTOCOL.md). Static binary: libc, proto-json/pj_agent.c, pj.c and
 * common/xalloc.c only; no NSS calls (no getpwnam), no threads. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "cleanup.h"
#include "pj_agent.h"

/* Bounds of the agent itself (documented in AGENT-PROTOCOL.md "Bounds"). */
#define PI_MAX_CONNS 64
#define PI_MAX_CHANS 256           /* open channels per connection */
#define PI_MAX_FORWARDS 32         /* FORWARD channels per connection */
#define PI_RING_MAX (1024 * 1024)  /* output kept per process for ATTACH */
#define PI_CHUNK (64 * 1024)       /* bytes read from a pipe or socket at once */
#define PI_FILE_CHUNK (1024 * 1024 - 64) /* bytes read from a file at once (READ) */
#define PI_WATERMARK (256 * 1024)  /* a connection's unsent output above which we stop reading for it */
#define PI_OUT_MAX (32u * 1024 * 1024) /* unsent output that gets a connection closed */
#define PI_PENDING_MAX (256 * 1024) /* bytes waiting for a stdin or a forward above which the client is not read */
#define PI_HELLO_MS 5000           /* a connection must say HELLO within this */
#define PI_EXIT_GRACE_MS 500       /* output drained this long after an exit, then EXIT is sent */
#define PI_LISTDIR_MAX 65536       /* entries one LISTDIR returns (then END truncated) */
#define PI_SHUTDOWN_MS 10000       /* after SIGTERM, SIGKILL what is left after this */
#define PI_SHUTDOWN_FLUSH_MS 2000  /* then at most this long for the last frames to leave */
#define PI_MAX_WATCHES 16          /* WATCH channels per connection */
#define PI_SPARE_MAX_SCRIPT 4096   /* a longer /bin/sh -c script starts the cold way (proc.c) */
#define PI_SPARE_QUIET_MS 40       /* a spare starts once no command started or ended for this long */
#define PI_WATCH_DIRS 4096         /* directories watched at once in the whole sandbox */

/* files.c: synchronous file operations; >= 0 or -errno. Relative paths are resolved
 * against / (the agent's cwd). */
int files_stat(const char *path, struct pj_agent_fields *ret);
int files_mkdir(const char *path, bool parents, uint32_t mode);
int files_move(const char *from, const char *to);
int files_remove(const char *path, bool recursive);
/* A regular file opened for reading (O_NONBLOCK, so a FIFO cannot hang the agent): fd. */
int files_open_read(const char *path);
/* Created or truncated for writing; mode applied when has_mode (else 0644 for new files);
 * parent directories made (0755) when parents. Returns the fd. */
int files_open_write(const char *path, bool has_mode, uint32_t mode, bool parents);
/* Calls emit for batches of at most PJ_AGENT_MAX_DIRENTS entries (lstat of each, no '.'
 * or '..'), at most PI_LISTDIR_MAX entries in all; *ret_truncated when there were more. */
int files_listdir(const char *path, void (*emit)(void *ud, struct pj_agent_fields *e, size_t n), void *ud,
                  bool *ret_truncated);

/* ---- shared state (defined in pi.c; one thread, so no locking) */
struct chunk {
        struct chunk *next;
        uint8_t stream;
        uint32_t len;
        uint8_t data[];
};

/* Bytes waiting to be written to a non-blocking fd. */
struct pending {
        struct pj_agent_buf b;
        size_t off;
};

struct conn;

struct proc {
        bool used;
        pid_t pid;
        char *tag;
        bool reaped, finished; /* finished: EXIT is decided (reaped and output drained) */
        int status;
        uint64_t reaped_ms;
        bool pty, kill_on_detach;
        int fd_in, fd_out, fd_err; /* pty: fd_out is the master, fd_in a dup of it */
        struct pending in;
        bool in_close; /* STDIN_CLOSE: close fd_in once in is written */
        struct chunk *ring_head, *ring_tail;
        size_t ring_bytes;
        struct conn *conn; /* attached: output goes to (conn, chan) */
        uint32_t chan;
        uint64_t seq; /* spawn order, for eviction */
};

enum chan_kind { CH_PROC, CH_READ, CH_WRITE, CH_FORWARD, CH_WATCH };

struct chan {
        bool used;
        uint32_t id;
        enum chan_kind kind;
        struct proc *proc;
        int fd;
        bool failed;             /* WRITE: an ERROR was sent, DATA is dropped until END */
        bool connecting, rd_eof, wr_end, wr_shut;
        struct pending out;      /* FORWARD: bytes for the socket */
};

struct conn {
        bool used;
        int fd;
        bool hello, closing;
        uint64_t deadline_ms; /* HELLO, or the flush before a close */
        uint8_t hdr[PJ_AGENT_HEADER_SIZE];
        size_t hdr_got;
        struct pj_agent_header h;
        bool have_h;
        uint8_t *payload;
        size_t pay_got;
        struct pj_agent_buf out;
        size_t out_off;
        struct chan *chans; /* PI_MAX_CHANS */
        unsigned n_forwards;
};

struct pi_state {
        const char *sock_path;  /* where listen_fd listens (PARK unlinks it, unpark binds it again) */
        int listen_fd, sig_fd;
        int ino_fd;             /* inotify, made at the first WATCH; -1 before */
        char *secret;
        size_t secret_len;
        struct conn conns[PI_MAX_CONNS];
        struct proc procs[PJ_AGENT_MAX_PROCS];
        uint64_t seq;
        bool shutting_down;
        bool parked;            /* PARK: no listener, no connections, the socket unlinked */
        uint64_t last_busy_ms;  /* the last SPAWN or EXIT (a spare waits PI_SPARE_QUIET_MS after it) */
        uint64_t shutdown_ms;
};
extern struct pi_state pi;

/* pi.c: */
void pi_log(const char *level, const char *fmt, ...) _printf_(2, 3);
uint64_t pi_now_ms(void);

/* chan.c: sending and the channel table. Sending never fails: a connection whose unsent
 * output passes PI_OUT_MAX is marked closing with its deadline passed, and the loop closes
 * it before polling again. chan_close does not tidy a watch's rows: call watch_chan_closed
 * first for a CH_WATCH channel. */
size_t conn_out_pending(const struct conn *c);
void conn_send(struct conn *c, const struct pj_agent_msg *m);
void conn_send_error(struct conn *c, uint32_t id, int err, const char *fmt, ...) _printf_(4, 5);
/* An ERROR that names the path at fault (SPAWN: the working directory). */
void conn_send_error_path(struct conn *c, uint32_t id, int err, const char *path, const char *fmt, ...) _printf_(5, 6);
void conn_send_simple(struct conn *c, uint8_t type, uint32_t id);
struct chan *chan_find(struct conn *c, uint32_t id);
struct chan *chan_new(struct conn *c, uint32_t id, enum chan_kind kind);
void chan_close(struct conn *c, struct chan *ch);
bool pending_put(struct pending *p, const uint8_t *d, size_t n);
size_t pending_len(const struct pending *p);
/* conn.c: connections, the request dispatch, files and forwards glue. */
void fwd_flush(struct conn *c, struct chan *ch);
void fwd_read(struct conn *c, struct chan *ch);
void fwd_connected(struct conn *c, struct chan *ch);
void conn_read_step(struct conn *c, struct chan *ch);
void conn_close(struct conn *c);
bool conn_blocked(const struct conn *c);
void conn_read(struct conn *c);
void conn_write(struct conn *c);
void conn_accept(void);

/* watch.c: WATCH channels over one inotify fd. watch_fd: the fd to poll (-1: nothing watched);
 * watch_read: its events to the watching channels; watch_chan_closed: a channel's rows go;
 * watch_cancel: the client's END on a watch channel. */
int watch_fd(void);
void watch_open(struct conn *c, const struct pj_agent_msg *m);
void watch_read(void);
void watch_chan_closed(struct conn *c, uint32_t chan);
void watch_cancel(struct conn *c, struct chan *ch);

/* child.c: what a child is to become (from a SPAWN, or the spare shell's template), and
 * making it. */
struct child_spec {
        char **argv, **envp;
        const char *cwd;
        bool has_uid, has_gid;
        uint32_t uid, gid;
};
/* What a child that cannot exec writes on its error pipe: the step and the errno. */
enum { CHILD_STEP_SETUP = 0, CHILD_STEP_CWD = 1, CHILD_STEP_EXEC = 2 };
struct child_fail {
        int step, err;
};
struct child_spec child_spec_of(const struct pj_agent_msg *m, char **envp);
/* The environment of a new process: the request's, or (base_env) the agent's own with the
 * request's entries layered over it. The array is the caller's to free, not the strings. */
char **child_env(const struct pj_agent_msg *m);
/* In the child after fork: becomes cs on stdio in, out, err (in -1: /dev/null), or on the
 * PTY pts (a session of its own); else its own process group. Never returns: execs, or
 * writes a struct child_fail on errpipe (when >= 0) and exits 127. */
_noreturn_ void child_run(const struct child_spec *cs, int in, int out, int err, const char *pts, int errpipe);
/* vfork + child_run: the child's pid, or -1 with errno. */
pid_t child_start(const struct child_spec *cs, int in, int out, int err, const char *pts, int errpipe);

/* proc.c: spawned processes (pipes or a PTY, the replay ring, the spare shell, reaping, EXIT). */
void proc_maybe_finish(struct proc *p, uint64_t now);
void proc_read(struct proc *p, int *fdp, uint8_t stream);
void proc_write_stdin(struct proc *p);
void proc_reap(void);
void proc_spawn(struct conn *c, const struct pj_agent_msg *m);
/* The spare shell (proc.c): wanted when a /bin/sh -c command has started and none is at
 * hand; started when the agent is idle; stopped (killed) at shutdown. */
bool spare_wanted(void);
void spare_start(void);
void spare_stop(void);
struct proc *proc_of_chan(struct conn *c, uint32_t id);
struct proc *proc_of_request(struct conn *c, const struct pj_agent_msg *m);
struct proc *proc_by_pid(pid_t pid);
void proc_attach(struct conn *c, const struct pj_agent_msg *m);
void proc_list(struct conn *c, const struct pj_agent_msg *m);
void proc_signal_group(struct proc *p, int sig);
