/* dockerchild-root.c — what controld's Docker child does on root's files besides Docker's API
 * (dockerchild-private.h): runsc's checkpoint of a container Docker started, and a fork's steps
 * on Docker's data root. Called by the child for a checked request, or in-process by the
 * driver when controld runs without a child (it is root then). Depends on common/ only. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "btrfs.h"
#include "cleanup.h"
#include "config.h"
#include "dockerchild.h"
#include "dockerchild-private.h"
#include "runsc.h"
#include "strutil.h"

/* ---- runsc's checkpoint */

static int rm_walk(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) st, (void) ftw;
        (void) (flag == FTW_DP ? rmdir(path) : unlink(path));
        return 0;
}

int dd_runsc_checkpoint_here(const struct config *cfg, const char *docker_root, const char *id, const char *name,
                             int64_t timeout_ms, struct err *err) {
        if (!cfg->docker_runsc[0] || !cfg->docker_runsc_root[0])
                return err_set(err, -ENOENT, "runsc is not configured ([docker] runsc, runsc_root)");
        int k = runsc_knows(cfg->docker_runsc_root, id);
        if (k <= 0)
                return err_set(err, k < 0 ? k : -ENOENT, "runsc has no state for container %s under %s", id,
                               cfg->docker_runsc_root);
        _cleanup_free_ char *parent = xasprintf("%s/containers/%s/checkpoints", docker_root, id);
        _cleanup_free_ char *dir = xasprintf("%s/%s", parent, name);
        if (mkdir(parent, 0700) < 0 && errno != EEXIST)
                return err_set(err, -errno, "cannot make %s: %m", parent);
        if (mkdir(dir, 0700) < 0)
                return err_set(err, -errno, "cannot make %s: %m", dir);
        int r = runsc_checkpoint(cfg->docker_runsc, cfg->docker_runsc_root, id, dir, timeout_ms, err);
        if (r < 0)
                (void) nftw(dir, rm_walk, 8, FTW_DEPTH | FTW_PHYS);
        return r;
}

/* ---- a fork's steps (docker-fork.c says what they are for) */

#define STAGE_PREFIX "paddock-fork-"
#define CKPT_FILES_MAX 64

/* The id of the btrfs subvolume that is container id's own layer (64 hex), from Docker's layer
 * store: image/btrfs/layerdb/mounts/<id>/mount-id. */
static int layer_of(const char *root, const char *id, char out[65], struct err *err) {
        _cleanup_free_ char *p = xasprintf("%s/image/btrfs/layerdb/mounts/%s/mount-id", root, id);
        _cleanup_close_ int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT) {
                        _cleanup_free_ char *drv = xasprintf("%s/image/btrfs", root);
                        struct stat st;
                        if (stat(drv, &st) < 0)
                                return err_set(err, -EOPNOTSUPP, "fork needs Docker's btrfs storage driver (the data root %s "
                                                                 "has no btrfs layers)", root);
                }
                return err_set(err, -errno, "cannot read the layer of container %s: %m", id);
        }
        ssize_t n = read(fd, out, 64);
        out[n == 64 ? 64 : 0] = 0;
        if (!hex_exactly(out, 64))
                return err_set(err, -EIO, "container %s: its layer id is not 64 hex digits", id);
        return 0;
}

/* Copies every regular file of directory from into directory to (made 0700; it must not
 * exist): reflinks where the filesystem can, else bytes. */
static int copy_dir_files(const char *from, const char *to, struct err *err) {
        _cleanup_close_ int sfd = open(from, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0)
                return err_set(err, -errno, "cannot open %s: %m", from);
        if (mkdir(to, 0700) < 0)
                return err_set(err, -errno, "cannot make %s: %m", to);
        _cleanup_close_ int dfd = open(to, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return err_set(err, -errno, "cannot open %s: %m", to);
        int dup_fd = dup(sfd);
        DIR *dir = dup_fd < 0 ? NULL : fdopendir(dup_fd);
        if (!dir) {
                if (dup_fd >= 0)
                        close(dup_fd);
                return err_set(err, -errno, "cannot list %s: %m", from);
        }
        int r = 0, files = 0;
        for (struct dirent *e; r == 0 && (e = readdir(dir));) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                if (++files > CKPT_FILES_MAX) {
                        r = err_set(err, -E2BIG, "%s holds more than %d files", from, CKPT_FILES_MAX);
                        break;
                }
                _cleanup_close_ int in = openat(sfd, e->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                struct stat st;
                if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
                        r = err_set(err, in < 0 ? -errno : -EINVAL, "%s/%s is not a regular file", from, e->d_name);
                        break;
                }
                _cleanup_close_ int out = openat(dfd, e->d_name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (out < 0) {
                        r = err_set(err, -errno, "cannot make %s/%s: %m", to, e->d_name);
                        break;
                }
                if (ioctl(out, FICLONE, in) == 0)
                        continue;
                for (off_t left = st.st_size; left > 0;) {
                        ssize_t n = copy_file_range(in, NULL, out, NULL, (size_t) left, 0);
                        if (n <= 0) {
                                r = err_set(err, n < 0 ? -errno : -EIO, "cannot copy %s/%s: %s", from, e->d_name,
                                            n < 0 ? strerror(errno) : "short copy");
                                break;
                        }
                        left -= n;
                }
        }
        closedir(dir);
        return r;
}

static int rm_flat_dir(const char *path) {
        DIR *dir = opendir(path);
        if (!dir)
                return errno == ENOENT ? 0 : -errno;
        int dfd = dirfd(dir);
        for (struct dirent *e; (e = readdir(dir));)
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                        (void) unlinkat(dfd, e->d_name, 0);
        closedir(dir);
        return rmdir(path) < 0 && errno != ENOENT ? -errno : 0;
}

int dd_fork_here(const char *root, int mode, const char *src, const char *name, const char *dst, uint64_t limit_bytes,
                 struct err *err) {
        char src_layer[65], dst_layer[65];
        int r;
        _cleanup_free_ char *subvols = xasprintf("%s/btrfs/subvolumes", root);
        _cleanup_free_ char *stage = xasprintf(STAGE_PREFIX "%s", name);
        _cleanup_free_ char *stage_ckpt = xasprintf("%s/containers/%s/checkpoints/%s-fork", root, src, name);
        switch (mode) {
        case DD_FORK_STAGE: {
                if ((r = layer_of(root, src, src_layer, err)) < 0)
                        return r;
                _cleanup_free_ char *layer = xasprintf("%s/%s", subvols, src_layer);
                _cleanup_free_ char *ckpt = xasprintf("%s/containers/%s/checkpoints/%s", root, src, name);
                if ((r = btrfs_snapshot_capped(layer, subvols, stage, 0)) < 0)
                        return err_set(err, r, "cannot snapshot the sandbox's filesystem: %s", strerror(-r));
                if ((r = copy_dir_files(ckpt, stage_ckpt, err)) < 0) {
                        (void) rm_flat_dir(stage_ckpt);
                        (void) btrfs_subvol_destroy(subvols, stage);
                }
                return r;
        }
        case DD_FORK_COPY: {
                if ((r = layer_of(root, dst, dst_layer, err)) < 0)
                        return r;
                _cleanup_free_ char *staged = xasprintf("%s/%s", subvols, stage);
                _cleanup_free_ char *parent = xasprintf("%s/containers/%s/checkpoints", root, dst);
                _cleanup_free_ char *ckpt = xasprintf("%s/%s", parent, name);
                /* the child's own (empty, never started) layer makes way for the copy */
                if ((r = btrfs_subvol_destroy(subvols, dst_layer)) < 0)
                        return err_set(err, r, "cannot replace the new sandbox's filesystem: %s", strerror(-r));
                if ((r = btrfs_snapshot_capped(staged, subvols, dst_layer, limit_bytes)) < 0)
                        return err_set(err, r, "cannot copy the sandbox's filesystem: %s", strerror(-r));
                if (mkdir(parent, 0700) < 0 && errno != EEXIST)
                        return err_set(err, -errno, "cannot make %s: %m", parent);
                if ((r = copy_dir_files(stage_ckpt, ckpt, err)) < 0)
                        return r;
                /* Docker restores by storing a tar of the checkpoint in containerd, which refuses
                 * content it holds already ("already exists", moby#42900): each copy's differs by
                 * this file, which runsc does not read */
                _cleanup_free_ char *nonce = xasprintf("%s/paddock-copy", ckpt);
                _cleanup_close_ int fd = open(nonce, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0 || write(fd, dst, strlen(dst)) != (ssize_t) strlen(dst))
                        return err_set(err, -errno, "cannot write %s: %m", nonce);
                return 0;
        }
        case DD_FORK_UNSTAGE: {
                int a = rm_flat_dir(stage_ckpt), b = btrfs_subvol_destroy(subvols, stage);
                if (b == -ENOENT)
                        b = 0;
                return a < 0 ? err_set(err, a, "cannot remove %s: %s", stage_ckpt, strerror(-a))
                       : b < 0 ? err_set(err, b, "cannot remove the staged filesystem %s: %s", stage, strerror(-b))
                               : 0;
        }
        case DD_FORK_SWEEP: {
                /* name is a prefix (fk<12 hex>, one controld's): what a fork cut short left */
                size_t pl = strlen(name);
                int n = 0;
                DIR *dir = opendir(subvols);
                for (struct dirent *e; dir && (e = readdir(dir));)
                        if (startswith(e->d_name, STAGE_PREFIX) && !strncmp(e->d_name + strlen(STAGE_PREFIX), name, pl) &&
                            btrfs_subvol_destroy(subvols, e->d_name) == 0)
                                n++;
                if (dir)
                        closedir(dir);
                _cleanup_free_ char *cdir = xasprintf("%s/containers", root);
                dir = opendir(cdir);
                for (struct dirent *e; dir && (e = readdir(dir));) {
                        if (!hex_exactly(e->d_name, 64))
                                continue;
                        _cleanup_free_ char *ck = xasprintf("%s/%s/checkpoints", cdir, e->d_name);
                        DIR *cd = opendir(ck);
                        for (struct dirent *f; cd && (f = readdir(cd));) {
                                if (strncmp(f->d_name, name, pl) || !endswith(f->d_name, "-fork"))
                                        continue;
                                _cleanup_free_ char *p = xasprintf("%s/%s", ck, f->d_name);
                                if (rm_flat_dir(p) == 0)
                                        n++;
                        }
                        if (cd)
                                closedir(cd);
                }
                if (dir)
                        closedir(dir);
                return n;
        }
        default:
                return err_set(err, -EINVAL, "fork: no step %d", mode);
        }
}

