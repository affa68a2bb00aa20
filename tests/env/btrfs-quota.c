/* btrfs-quota.c — turn on quotas for the btrfs filesystem holding argv[1]: simple quotas where
 * the kernel has them (6.7+), full qgroup accounting where it does not. Debian 12's
 * btrfs-progs (6.2) cannot ask for simple quotas, so services.sh builds this and runs it.
 * Why simple: full accounting walks backrefs on every extent change and subvolume removal,
 * and with a container made and removed for every sandbox btrfs-cleaner took a whole core.
 * Prints the mode used; exit 1 (and why on stderr) if quotas could not be turned on. */
#include <errno.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>

int main(int argc, char **argv) {
        if (argc != 2) {
                fprintf(stderr, "usage: btrfs-quota DIR\n");
                return 2;
        }
        int fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                fprintf(stderr, "btrfs-quota: %s: %s\n", argv[1], strerror(errno));
                return 1;
        }
        struct btrfs_ioctl_quota_ctl_args q = { .cmd = 4 /* BTRFS_QUOTA_CTL_ENABLE_SIMPLE */ };
        if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) == 0) {
                puts("simple");
                return 0;
        }
        if (errno != EINVAL) {
                fprintf(stderr, "btrfs-quota: %s: %s\n", argv[1], strerror(errno));
                return 1;
        }
        q = (struct btrfs_ioctl_quota_ctl_args) { .cmd = BTRFS_QUOTA_CTL_ENABLE };
        if (ioctl(fd, BTRFS_IOC_QUOTA_CTL, &q) < 0) {
                fprintf(stderr, "btrfs-quota: %s: %s\n", argv[1], strerror(errno));
                return 1;
        }
        puts("full");
        return 0;
}
