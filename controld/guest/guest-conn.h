/* agent-client.h — the host side of the paddock-init protocol (proto-json/AGENT-PROTOCOL.md):
 * connect to an agent's Unix socket, say HELLO, send and receive frames.
 *
 * Blocking calls with a deadline each (no read waits longer than its timeout_ms); every
 * length is checked by pj_agent_header_decode() before the payload is allocated. Not
 * thread-safe: one user per client. The library logs nothing; errors are -errno. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <stdint.h>

#include "cleanup.h"
#include "err.h"
#include "pj_agent.h"

struct guest_client;

/* A received frame: m.data points into payload, both released by guest_frame_done(). */
struct guest_frame {
        struct pj_agent_msg m;
        uint8_t *payload;
        size_t cap; /* payload's allocated size */
};
void guest_frame_done(struct guest_frame *f);
/* guest_frame_done, keeping the frame's payload buffer for c's next frame (a download's 256
 * KiB frames would each be an mmap, its page faults and a munmap). c must be the client the
 * frame came from. */
void guest_client_recycle(struct guest_client *c, struct guest_frame *f);

/* Connects to the socket at path without following a symlink there (open O_PATH|O_NOFOLLOW,
 * fstat must say socket, connect through /proc/self/fd/N), sends HELLO {secret} and waits
 * for HELLO_OK, all within timeout_ms. Returns 0 with *ret set; -ENOTSOCK when path is not a
 * socket (a symlink included), -EACCES when the agent refused the secret, -ETIMEDOUT,
 * -EPROTO when the agent answered something else (err filled when not NULL). */
int guest_client_connect(const char *path, const char *secret, int timeout_ms, struct guest_client **ret,
                         struct err *err);
/* The same over an fd already connected to the agent (the relay's): sends HELLO and waits
 * for HELLO_OK by deadline (mono_ms()). Takes fd in every case (closed on failure). */
int guest_client_connect_fd(int fd, const char *secret, int64_t deadline, struct guest_client **ret,
                            struct err *err);
/* Closes the connection and frees c; NULL is fine. Returns NULL. */
struct guest_client *guest_client_free(struct guest_client *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct guest_client *, guest_client_free)

/* Encodes and sends m: 0, -ETIMEDOUT, -EPIPE, or the encoder's -EINVAL/-EMSGSIZE. */
int guest_client_send(struct guest_client *c, const struct pj_agent_msg *m, int timeout_ms);
/* Sends bytes as they are (tests: hostile frames). */
int guest_client_send_raw(struct guest_client *c, const void *p, size_t n, int timeout_ms);
/* The next frame, within timeout_ms: 0 with *ret filled; -ETIMEDOUT; -ECONNRESET when the
 * agent closed the connection; -EPROTO for a frame the codec refuses (err says why; the
 * connection is then out of step and should be freed). */
int guest_client_recv(struct guest_client *c, int timeout_ms, struct guest_frame *ret, struct err *err);
/* Without blocking: 1 with *ret filled when a whole frame has arrived, 0 when the socket has
 * no more for now (poll guest_client_fd for POLLIN), < 0 as guest_client_recv. Partial frames
 * are kept in the client between calls; the payload is allocated only after its header
 * passed pj_agent_header_decode(). */
int guest_client_try_recv(struct guest_client *c, struct guest_frame *ret, struct err *err);
/* Who may own an agent socket: root (the gVisor gofer makes it), us, or the overflow uid
 * (root as seen from a user namespace such as systemd's PrivateUsers=). Anyone else's
 * socket is refused (-EPERM). */
bool guest_socket_owner_ok(uid_t uid);
/* The socket, for poll() by a caller that multiplexes. */
int guest_client_fd(const struct guest_client *c);
