/* fdio.h — reading and writing a socket under a deadline (monotonic ms, as mono_ms()).
 * Every call is bounded by its deadline whatever the peer does: the socket may be blocking
 * or not (MSG_DONTWAIT is used), and EINTR is retried. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Waits until fd is ready for events (POLLIN, POLLOUT). 0 ready, -ETIMEDOUT, -errno. */
int fd_wait(int fd, short events, int64_t deadline);
/* Sends all len bytes. 0, -ETIMEDOUT, -errno (-EPIPE when the peer is gone; no SIGPIPE). */
/* One non-blocking send of *len bytes at *p (advanced past what went): 1 when some went,
 * 0 when the socket would block (or a signal came), -errno on failure. */
int fd_send_step(int fd, const char **p, size_t *len);
int fd_send_all(int fd, const void *buf, size_t len, int64_t deadline);
/* Reads once, waiting for data. The bytes read, 0 at end of stream (ECONNRESET counts as
 * that), -ETIMEDOUT, -errno. */
ssize_t fd_recv_some(int fd, void *buf, size_t len, int64_t deadline);
/* One message (a SOCK_SEQPACKET record) of len bytes, with pass_fd attached (SCM_RIGHTS) when
 * >= 0. 0, -EMSGSIZE when it went short, -errno (no SIGPIPE). */
int fd_send_msg(int fd, const void *buf, size_t len, int pass_fd);
