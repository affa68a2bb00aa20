/* unixsock.h — connecting to a Unix socket whose directory someone less trusted can write
 * (an in-sandbox agent's socket): the last component is never followed as a link, the thing
 * there must be a socket of an expected owner, and the connect goes to the inode checked. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Who may own such a socket: root (the gVisor gofer makes it), us, or the overflow uid (root
 * as seen from a user namespace such as systemd's PrivateUsers=). */
bool unix_socket_owner_ok(uid_t uid);
/* Opens path O_PATH|O_NOFOLLOW, checks S_ISSOCK and the owner, connects a non-blocking
 * SOCK_STREAM socket to that inode (through /proc/self/fd/N) by deadline (mono_ms()).
 * Returns the connected fd (O_CLOEXEC, O_NONBLOCK) or -errno: -ENOTSOCK for anything but a
 * socket (a symlink included), -EPERM for another owner, -ENOENT, -ECONNREFUSED, -EAGAIN
 * (the listener's backlog is full), -ETIMEDOUT. */
int unix_connect_nofollow(const char *path, int64_t deadline);
