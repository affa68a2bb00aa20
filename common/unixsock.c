/* unixsock.c — see unixsock.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "fdio.h"
#include "unixsock.h"

/* The kernel's overflow uid: what root of another user namespace shows as here. */
static uid_t overflow_uid(void) {
        static uid_t cached = (uid_t) -1;
        if (cached == (uid_t) -1) {
                uid_t v = 65534;
                FILE *f = fopen("/proc/sys/kernel/overflowuid", "re");
                unsigned u;
                if (f && fscanf(f, "%u", &u) == 1)
                        v = (uid_t) u;
                if (f)
                        fclose(f);
                cached = v;
        }
        return cached;
}

bool unix_socket_owner_ok(uid_t uid) {
        return uid == 0 || uid == geteuid() || uid == overflow_uid();
}

int unix_connect_nofollow(const char *path, int64_t deadline) {
        _cleanup_close_ int pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (pfd < 0)
                return errno == ELOOP ? -ENOTSOCK : -errno;
        struct stat st;
        if (fstat(pfd, &st) < 0)
                return -errno;
        if (!S_ISSOCK(st.st_mode))
                return -ENOTSOCK;
        if (!unix_socket_owner_ok(st.st_uid))
                return -EPERM;
        /* connect to the inode we checked, not to whatever the path names by now */
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", pfd);
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                if (errno != EINPROGRESS)
                        return -errno;
                int r = fd_wait(fd, POLLOUT, deadline);
                if (r < 0)
                        return r;
                int e = 0;
                socklen_t el = sizeof(e);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0)
                        return -errno;
                if (e)
                        return -e;
        }
        return TAKE_FD(fd);
}
