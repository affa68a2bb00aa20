/* paddock-init.h — private header of paddock-init, the PID 1 of every sandbox
 * (proto-json/AGENT-PROTOCOL.md). Static binary: libc, proto-json/pj_agent.c, pj.c and
 * common/xalloc.c only; no NSS calls (no getpwnam), no threads. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "pj_agent.h"

/* Bounds of the agent itself (documented in AGENT-PROTOCOL.md "Bounds"). */
#define PI_MAX_CONNS 64
#define PI_MAX_CHANS 256           /* open channels per connection */
#define PI_MAX_FORWARDS 32         /* FORWARD channels per connection */
#define PI_RING_MAX (1024 * 1024)  /* output kept per process for ATTACH */
#define PI_CHUNK (64 * 1024)       /* bytes read from a pipe, file or socket at once */
#define PI_WATERMARK (256 * 1024)  /* a connection's unsent output above which we stop reading for it */
#define PI_OUT_MAX (32u * 1024 * 1024) /* unsent output that gets a connection closed */
#define PI_PENDING_MAX (256 * 1024) /* bytes waiting for a stdin or a forward above which the client is not read */
#define PI_HELLO_MS 5000           /* a connection must say HELLO within this */
#define PI_EXIT_GRACE_MS 500       /* output drained this long after an exit, then EXIT is sent */
#define PI_LISTDIR_MAX 65536       /* entries one LISTDIR returns (then END truncated) */
#define PI_SHUTDOWN_MS 10000       /* after SIGTERM, SIGKILL what is left after this */

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
