/* btrfs.c — capped subvolumes through the btrfs ioctls. See btrfs.h. */
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/magic.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "btrfs.h"
#include "strutil.h"

/* Not in the uapi headers of every distribution yet (Linux 6.7 added it). */
#define BTRFS_QUOTA_CTL_ENABLE_SIMPLE 4

int btrfs_is_btrfs(const char *path) {
        struct statfs s;
        if (statfs(path, &s) < 0)
                return -errno;
        return s.f_type == BTRFS_SUPER_MAGIC;
}

static int open_dir(const char *path) {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

static int valid_name(const char *name) {
        if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
            strlen(name) >= BTRFS_SUBVOL_NAME_MAX)
                return -EINVAL;
        return 0;
}

static const struct btrfs_remote *remote;

void btrfs_set_remote(const struct btrfs_remote *r) {
        remote = r;
}

int btrfs_quota_enable(const char *path) {
        if (remote)
                return remote->quota_enable(path);
        int fd = open_dir(path), r = 0;
        if (fd < 0)
                return fd;
        /* Simple quotas (kernel 6.7+) first: they charge an extent to the subvolume that wrote
         * it, with no backref walk on every extent change and every subvolume removal. Full
         * qgroup accounting made btrfs-cleaner a whole core's work on a node that starts and
         * removes sandboxes all day. An older kernel refuses the command (EINVAL): full then.
         * Enabling quotas that are already on (in either mode) is a no-op for the kernel. */
        struct btrfs_ioctl_quota_ctl_args q = { .cmd = BTRFS_QUOTA_CTL_ENABLE_SIMPLE };
        if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0) {
                q = (struct btrfs_ioctl_quota_ctl_args) { .cmd = BTRFS_QUOTA_CTL_ENABLE };
                if (errno != EINVAL || ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0)
                        r = -errno;
        }
        close(fd);
        return r;
}

static int subvol_op(const char *parent, const char *name, unsigned long req) {
        int r = valid_name(name);
        if (r < 0)
                return r;
        int fd = open_dir(parent);
        if (fd < 0)
                return fd;
        struct btrfs_ioctl_vol_args a = { 0 };
        (void) strscpy(a.name, name, sizeof(a.name));
        r = ioctl(fd, req, &a) < 0 ? -errno : 0;
        close(fd);
        return r;
}

/* Limits what subvolume pfd/name references to limit_bytes. */
static int qgroup_limit(int pfd, const char *name, uint64_t limit_bytes) {
        int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        /* qgroupid 0: the qgroup of the subvolume fd is in (0/<its id>). */
        struct btrfs_ioctl_qgroup_limit_args l = {
                .qgroupid = 0,
                .lim = { .flags = BTRFS_QGROUP_LIMIT_MAX_RFER, .max_rfer = limit_bytes },
        };
        int r = ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &l) < 0 ? -errno : 0;
        close(fd);
        return r;
}

int btrfs_subvol_create_capped(const char *parent, const char *name, uint64_t limit_bytes) {
        if (remote)
                return remote->subvol_create_capped(parent, name, limit_bytes);
        int r = btrfs_is_btrfs(parent);
        if (r < 0)
                return r;
        if (r == 0)
                return -EOPNOTSUPP;
        if (limit_bytes && (r = btrfs_quota_enable(parent)) < 0)
                return r;
        if ((r = subvol_op(parent, name, BTRFS_IOC_SUBVOL_CREATE)) < 0)
                return r;
        if (!limit_bytes)
                return 0;

        int pfd = open_dir(parent);
        r = pfd < 0 ? pfd : qgroup_limit(pfd, name, limit_bytes);
        if (pfd >= 0)
                close(pfd);
        if (r == 0)
                return 0;
        (void) subvol_op(parent, name, BTRFS_IOC_SNAP_DESTROY);
        return r;
}

int btrfs_snapshot_capped(const char *src, const char *parent, const char *name, uint64_t limit_bytes) {
        int r = valid_name(name);
        if (r < 0)
                return r;
        int sfd = open(src, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0)
                return -errno;
        int pfd = open_dir(parent);
        if (pfd < 0) {
                close(sfd);
                return pfd;
        }
        if (limit_bytes && (r = btrfs_quota_enable(parent)) < 0) {
                close(sfd);
                close(pfd);
                return r;
        }
        struct btrfs_ioctl_vol_args_v2 a = { .fd = sfd };
        (void) strscpy(a.name, name, sizeof(a.name));
        r = ioctl(pfd, BTRFS_IOC_SNAP_CREATE_V2, &a) < 0 ? -errno : 0;
        close(sfd);
        bool made = r == 0;
        if (made && limit_bytes)
                r = qgroup_limit(pfd, name, limit_bytes);
        close(pfd);
        if (made && r < 0)   /* only what this call made goes */
                (void) subvol_op(parent, name, BTRFS_IOC_SNAP_DESTROY);
        return r;
}

int btrfs_subvol_destroy(const char *parent, const char *name) {
        if (remote)
                return remote->subvol_destroy(parent, name);
        return subvol_op(parent, name, BTRFS_IOC_SNAP_DESTROY);
}
