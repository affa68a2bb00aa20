/* fdio.c — socket reads and writes bounded by a deadline (fdio.h). */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

#include "fdio.h"
#include "strutil.h"

int fd_wait(int fd, short events, int64_t deadline) {
        for (;;) {
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = fd, .events = events };
                int n = poll(&p, 1, left > 60000 ? 60000 : (int) left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n > 0)
                        return 0;
        }
}

int fd_send_step(int fd, const char **p, size_t *len) {
        ssize_t n = send(fd, *p, *len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        *p += n;
        *len -= (size_t) n;
        return 1;
}

int fd_send_all(int fd, const void *buf, size_t len, int64_t deadline) {
        const char *p = buf;
        while (len > 0) {
                int r = fd_send_step(fd, &p, &len);
                if (r == 0)
                        r = fd_wait(fd, POLLOUT, deadline);
                if (r < 0)
                        return r;
        }
        return 0;
}

ssize_t fd_recv_some(int fd, void *buf, size_t len, int64_t deadline) {
        for (;;) {
                ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
                if (n >= 0)
                        return n;
                if (errno == EINTR)
                        continue;
                if (errno == ECONNRESET)
                        return 0;
                if (errno != EAGAIN)
                        return -errno;
                int r = fd_wait(fd, POLLIN, deadline);
                if (r < 0)
                        return r;
        }
}

int fd_send_msg(int fd, const void *buf, size_t len, int pass_fd) {
        struct iovec iov = { .iov_base = (void *) buf, .iov_len = len };
        union {
                char b[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
        } u;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (pass_fd >= 0) {
                memset(&u, 0, sizeof(u));
                mh.msg_control = u.b;
                mh.msg_controllen = sizeof(u.b);
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
                cm->cmsg_level = SOL_SOCKET;
                cm->cmsg_type = SCM_RIGHTS;
                cm->cmsg_len = CMSG_LEN(sizeof(int));
                memcpy(CMSG_DATA(cm), &pass_fd, sizeof(int));
        }
        for (;;) {
                ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                return (size_t) n == len ? 0 : -EMSGSIZE;
        }
}
