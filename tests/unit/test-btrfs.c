/* Unit tests for common/btrfs.c against a btrfs loop mount each test makes (root and
 * mkfs.btrfs from btrfs-progs needed; skipped otherwise). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "btrfs.h"
#include "testlib.h"

static char dir[64], img[80];

static void teardown(void) {
        if (dir[0]) {
                (void) umount2(dir, MNT_DETACH);
                (void) rmdir(dir);
        }
        if (img[0])
                (void) unlink(img);
}

/* A 512 MB sparse btrfs image, loop-mounted at dir. */
static void setup(void) {
        if (geteuid() != 0)
                TEST_SKIP("needs root (loop mount)");
        if (system("command -v mkfs.btrfs >/dev/null 2>&1") != 0)
                TEST_SKIP("mkfs.btrfs missing (apt-get install btrfs-progs)");
        snprintf(dir, sizeof(dir), "/tmp/paddock-btrfs-XXXXXX");
        ASSERT_NOT_NULL(mkdtemp(dir));
        snprintf(img, sizeof(img), "%s.img", dir);
        atexit(teardown);
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "truncate -s 512M %s && mkfs.btrfs -q -f %s >/dev/null 2>&1 && mount -o loop %s %s",
                 img, img, img, dir);
        ASSERT_EQ(system(cmd), 0);
}

/* Writes up to want bytes to path; returns bytes written, and the errno that stopped it. */
static long long fill(const char *path, long long want, int *ret_errno) {
        static char buf[1 << 20];
        memset(buf, 'x', sizeof(buf));
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        *ret_errno = 0;
        if (fd < 0) {
                *ret_errno = errno;
                return 0;
        }
        long long done = 0;
        while (done < want) {
                ssize_t n = write(fd, buf, sizeof(buf));
                if (n < 0) {
                        *ret_errno = errno;
                        break;
                }
                done += n;
        }
        if (fsync(fd) < 0 && !*ret_errno)
                *ret_errno = errno;
        close(fd);
        return done;
}

/* fill() on dir/<rel>. */
static long long fill_at(const char *rel, long long want, int *ret_errno) {
        char p[128];
        snprintf(p, sizeof(p), "%s/%s", dir, rel);
        return fill(p, want, ret_errno);
}

TEST(is_btrfs_tells_filesystems_apart) {
        setup();
        ASSERT_EQ(btrfs_is_btrfs(dir), 1);
        ASSERT_EQ(btrfs_is_btrfs("/proc"), 0);
        ASSERT_EQ(btrfs_is_btrfs("/nonexistent-paddock"), -ENOENT);
}

TEST(capped_subvolume_refuses_writes_past_its_limit) {
        setup();
        ASSERT_OK(btrfs_subvol_create_capped(dir, "v1", 64ULL << 20));
        int e;
        long long n = fill_at("v1/big", 200LL << 20, &e);
        ASSERT_EQ(e, EDQUOT);
        ASSERT_LE(n, 65LL << 20);
        /* Another subvolume of the same filesystem is not affected. */
        ASSERT_OK(btrfs_subvol_create_capped(dir, "v2", 128ULL << 20));
        ASSERT_EQ(fill_at("v2/f", 100LL << 20, &e), 100LL << 20);
        ASSERT_EQ(e, 0);
}

TEST(create_existing_and_bad_names_refused) {
        setup();
        ASSERT_OK(btrfs_subvol_create_capped(dir, "v", 1ULL << 20));
        ASSERT_EQ(btrfs_subvol_create_capped(dir, "v", 1ULL << 20), -EEXIST);
        ASSERT_EQ(btrfs_subvol_create_capped(dir, "a/b", 1ULL << 20), -EINVAL);
        ASSERT_EQ(btrfs_subvol_create_capped(dir, "..", 1ULL << 20), -EINVAL);
        ASSERT_EQ(btrfs_subvol_create_capped("/proc", "x", 1ULL << 20), -EOPNOTSUPP);
}

TEST(destroy_removes_subvolume_with_contents) {
        setup();
        ASSERT_OK(btrfs_subvol_create_capped(dir, "v", 8ULL << 20));
        int e;
        ASSERT_EQ(fill_at("v/f", 1LL << 20, &e), 1LL << 20);
        ASSERT_OK(btrfs_subvol_destroy(dir, "v"));
        char p[128];
        snprintf(p, sizeof(p), "%s/v", dir);
        struct stat st;
        ASSERT_EQ(stat(p, &st), -1);
        ASSERT_EQ(btrfs_subvol_destroy(dir, "v"), -ENOENT);
        /* The name can be used again. */
        ASSERT_OK(btrfs_subvol_create_capped(dir, "v", 8ULL << 20));
}

/* A fork's copy of a sandbox's layer: the snapshot holds what the source held, writes to
 * either stay in it, and the snapshot's own cap holds. */
TEST(snapshot_is_a_separate_copy_with_its_own_cap) {
        setup();
        ASSERT_OK(btrfs_subvol_create_capped(dir, "src", 0));
        int e;
        ASSERT_EQ(fill_at("src/f", 1LL << 20, &e), 1LL << 20);
        char src[128], p[160];
        snprintf(src, sizeof(src), "%s/src", dir);
        ASSERT_OK(btrfs_snapshot_capped(src, dir, "copy", 64ULL << 20));
        struct stat st;
        snprintf(p, sizeof(p), "%s/copy/f", dir);
        ASSERT_EQ(stat(p, &st), 0);
        ASSERT_EQ(st.st_size, 1LL << 20);
        /* diverge: a file in the copy is not in the source */
        ASSERT_EQ(fill_at("copy/g", 1LL << 20, &e), 1LL << 20);
        snprintf(p, sizeof(p), "%s/src/g", dir);
        ASSERT_EQ(stat(p, &st), -1);
        /* the copy's cap: 64 MiB (what it shares with the source counts) */
        long long n = fill_at("copy/big", 200LL << 20, &e);
        ASSERT_EQ(e, EDQUOT);
        ASSERT_LE(n, 65LL << 20);
        /* names as for any subvolume; a source that is not a directory is refused */
        ASSERT_EQ(btrfs_snapshot_capped(src, dir, "copy", 0), -EEXIST);
        ASSERT_EQ(btrfs_snapshot_capped(src, dir, "a/b", 0), -EINVAL);
        ASSERT_EQ(btrfs_snapshot_capped("/nonexistent-paddock", dir, "x", 0), -ENOENT);
        /* both go on their own */
        ASSERT_OK(btrfs_subvol_destroy(dir, "src"));
        snprintf(p, sizeof(p), "%s/copy/f", dir);
        ASSERT_EQ(stat(p, &st), 0);
        ASSERT_OK(btrfs_subvol_destroy(dir, "copy"));
}
