/* agent-client.c — see agent-client.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "guest-conn.h"
#include "fdio.h"
#include "unixsock.h"
#include "cleanup.h"
#include "strutil.h"

struct guest_client {
        int fd;
        /* the frame being received: header bytes, then the payload (allocated once the
         * header has been checked) */
        uint8_t hdr[PJ_AGENT_HEADER_SIZE];
        size_t hdr_got;
        struct pj_agent_header h;
        uint8_t *payload;
        size_t payload_got, payload_cap;
        /* a payload buffer handed back by guest_client_recycle, for the next frame */
        uint8_t *kept;
        size_t kept_cap;
};

void guest_frame_done(struct guest_frame *f) {
        pj_agent_msg_done(&f->m);
        free(f->payload);
        f->payload = NULL;
}

void guest_client_recycle(struct guest_client *c, struct guest_frame *f) {
        pj_agent_msg_done(&f->m);
        if (f->payload && f->cap > c->kept_cap) {
                free(c->kept);
                c->kept = TAKE_PTR(f->payload);
                c->kept_cap = f->cap;
        }
        free(f->payload);
        f->payload = NULL;
}

struct guest_client *guest_client_free(struct guest_client *c) {
        if (c) {
                if (c->fd >= 0)
                        close(c->fd);
                free(c->payload);
                free(c->kept);
                free(c);
        }
        return NULL;
}

int guest_client_fd(const struct guest_client *c) { return c->fd; }

int guest_client_send_raw(struct guest_client *c, const void *p, size_t n, int timeout_ms) {
        return fd_send_all(c->fd, p, n, mono_ms() + timeout_ms);
}

int guest_client_send(struct guest_client *c, const struct pj_agent_msg *m, int timeout_ms) {
        _cleanup_(pj_agent_buf_done) struct pj_agent_buf b = { 0 };
        int r = pj_agent_msg_encode(m, &b, NULL);
        if (r < 0)
                return r;
        return fd_send_all(c->fd, b.p, b.len, mono_ms() + timeout_ms);
}

/* Reads what the socket has (never blocking) into the frame under way: 1 with *ret filled
 * when a whole frame is in, 0 when more bytes are needed, < 0 as guest_client_recv. */
int guest_client_try_recv(struct guest_client *c, struct guest_frame *ret, struct err *err) {
        for (;;) {
                if (c->hdr_got < sizeof(c->hdr)) {
                        ssize_t k = recv(c->fd, c->hdr + c->hdr_got, sizeof(c->hdr) - c->hdr_got, MSG_DONTWAIT);
                        if (k < 0)
                                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
                        if (k == 0)
                                return -ECONNRESET;
                        c->hdr_got += (size_t) k;
                        if (c->hdr_got < sizeof(c->hdr))
                                continue;
                        if (pj_agent_header_decode(c->hdr, &c->h, err) < 0)
                                return -EPROTO;
                        /* the header is checked: h.len <= 1 MiB */
                        if (c->kept && c->kept_cap >= c->h.len) {
                                c->payload = TAKE_PTR(c->kept);
                                c->payload_cap = c->kept_cap;
                                c->kept_cap = 0;
                        } else {
                                c->payload_cap = c->h.len ? c->h.len : 1;
                                c->payload = xmalloc(c->payload_cap);
                        }
                        c->payload_got = 0;
                }
                if (c->payload_got < c->h.len) {
                        ssize_t k = recv(c->fd, c->payload + c->payload_got, c->h.len - c->payload_got, MSG_DONTWAIT);
                        if (k < 0)
                                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
                        if (k == 0)
                                return -ECONNRESET;
                        c->payload_got += (size_t) k;
                        if (c->payload_got < c->h.len)
                                continue;
                }
                struct pj_agent_msg m = { 0 };
                _cleanup_free_ uint8_t *payload = TAKE_PTR(c->payload);
                c->hdr_got = 0;
                if (pj_agent_msg_decode(&c->h, payload, c->h.len, &m, err) < 0)
                        return -EPROTO;
                *ret = (struct guest_frame) { .m = m, .payload = TAKE_PTR(payload), .cap = c->payload_cap };
                return 1;
        }
}

int guest_client_recv(struct guest_client *c, int timeout_ms, struct guest_frame *ret, struct err *err) {
        int64_t deadline = mono_ms() + timeout_ms;
        for (;;) {
                int r = guest_client_try_recv(c, ret, err);
                if (r != 0)
                        return r < 0 ? r : 0;
                r = fd_wait(c->fd, POLLIN, deadline);
                if (r < 0)
                        return r;
        }
}

bool guest_socket_owner_ok(uid_t uid) { return unix_socket_owner_ok(uid); }

int guest_client_connect(const char *path, const char *secret, int timeout_ms, struct guest_client **ret,
                         struct err *err) {
        int64_t deadline = mono_ms() + timeout_ms;
        int fd = unix_connect_nofollow(path, deadline);
        if (fd < 0)
                return fd == -EAGAIN ? -ECONNREFUSED : fd;
        return guest_client_connect_fd(fd, secret, deadline, ret, err);
}

int guest_client_connect_fd(int fd, const char *secret, int64_t deadline, struct guest_client **ret,
                            struct err *err) {
        struct guest_client *c = xnew0(struct guest_client, 1);
        c->fd = fd;
        /* Room for a few 1 MiB file chunks in flight (a Unix socket's default is ~208 KiB:
         * every chunk would be partial sends and polls). Best effort: the kernel caps it at
         * net.core.wmem_max. */
        int sz = 4 * 1024 * 1024;
        (void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        int r = guest_client_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_HELLO, .f.secret = (char *) secret },
                                  (int) (deadline - mono_ms()));
        struct guest_frame f = { 0 };
        if (r >= 0)
                r = guest_client_recv(c, (int) (deadline - mono_ms()), &f, err);
        if (r >= 0 && f.m.type != PJ_AGENT_HELLO_OK) {
                r = f.m.type == PJ_AGENT_ERROR && f.m.f.err == EACCES ? -EACCES : -EPROTO;
                if (err)
                        pj_error_set(err, "", "The agent answered HELLO with %s: %s", pj_agent_type_name(f.m.type),
                                     f.m.f.message ? f.m.f.message : "");
        }
        guest_frame_done(&f);
        if (r < 0) {
                guest_client_free(c);
                return r;
        }
        *ret = c;
        return 0;
}
