/* gvisor-xattr-fix.c — preloaded in every template image (/etc/ld.so.preload).
 *
 * gVisor 0.0~20240729 (Debian 13's runsc) answers lgetxattr/llistxattr on a symlink with EBADF
 * (it calls fgetxattr on an O_PATH fd; google/gvisor#11049, fixed upstream later). `ls -l`
 * asks every entry for its SELinux label, so each symlink printed "ls: /bin: Bad file
 * descriptor". A path-based call can never legitimately fail with EBADF, so this maps it to
 * ENOTSUP ("no xattrs on this file"), which is what Linux answers on filesystems without
 * them and what ls and cp -a already handle quietly. Nothing else changes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>

ssize_t lgetxattr(const char *path, const char *name, void *value, size_t size) {
        long r = syscall(SYS_lgetxattr, path, name, value, size);
        if (r < 0 && errno == EBADF)
                errno = ENOTSUP;
        return r;
}

ssize_t llistxattr(const char *path, char *list, size_t size) {
        long r = syscall(SYS_llistxattr, path, list, size);
        if (r < 0 && errno == EBADF)
                errno = ENOTSUP;
        return r;
}
