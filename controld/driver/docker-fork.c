/* docker-fork.c — fork of a running sandbox on the Docker driver: copies of its memory (a gVisor
 * checkpoint) and of its filesystem, each child restored from them in a container of its own.
 *
 * A restore needs the root filesystem exactly as it was at the checkpoint, and runsc
 * (--overlay2=none) uses the container's own layer as the root filesystem. So with the source
 * checkpointed (stopped), its layer is snapshotted (btrfs, copy-on-write) and its checkpoint
 * copied (reflinks) into a staging area; the source is then restored and runs on, and each
 * child, a container created as any sandbox's, gets a snapshot of the staged layer in place of
 * its own and a copy of the staged checkpoint, and is started from it. Children share nothing
 * writable with the source or each other. Needs Docker's btrfs storage driver.
 *
 * Staging, under Docker's data root (name = fk<12 hex of the controld's instance id><8 random>,
 * so that a controld's start removes what its own forks cut short left: DD_FORK_SWEEP):
 *   btrfs/subvolumes/paddock-fork-<name>        the source's layer
 *   containers/<source>/checkpoints/<name>-fork the source's checkpoint
 * The root-side work (dd_fork_here) runs in controld's Docker child. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "btrfs.h"
#include "cleanup.h"
#include "controld.h"
#include "ddriver.h"
#include "docker-checkpoint.h"
#include "dockerchild.h"
#include "dockerchild-private.h"
#include "log.h"
#include "strutil.h"

#define STAGE_PREFIX "paddock-fork-"
#define CKPT_FILES_MAX 64

static bool hex64(const char *s) {
        if (!s || strlen(s) != 64)
                return false;
        for (; *s; s++)
                if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
                        return false;
        return true;
}

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
        if (!hex64(out))
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
                return copy_dir_files(stage_ckpt, ckpt, err);
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
                        if (!hex64(e->d_name))
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

static int fork_op(struct driver *d, int mode, const char *src, const char *name, const char *dst, uint64_t limit,
                   struct err *err) {
        if (!P(d)->root_dir)
                return err_set(err, -EOPNOTSUPP, "Docker's data root is not known");
        if (dockerchild_running())
                return dockerchild_fork(mode, src, name, dst, limit, err);
        return dd_fork_here(P(d)->root_dir, mode, src, name, dst, limit, err);
}

int dd_fork_stage(struct driver *d, const struct sandbox *src, const char *name, struct err *err) {
        if (!src->container_id || !hex64(src->container_id))
                return err_set(err, -ENOENT, "the sandbox has no container to fork");
        return fork_op(d, DD_FORK_STAGE, src->container_id, name, "", 0, err);
}

int dd_fork_sweep(struct driver *d, const char *prefix) {
        struct err err = { 0 };
        int r = fork_op(d, DD_FORK_SWEEP, "", prefix, "", 0, &err);
        if (r > 0)
                log_info("removed %d leftovers of forks cut short", r);
        else if (r < 0 && r != -EOPNOTSUPP)
                log_warning("could not look for leftovers of forks cut short: %s", err.message);
        return r;
}

int dd_fork_unstage(struct driver *d, const struct sandbox *src, const char *name) {
        struct err err = { 0 };
        if (!src->container_id || !hex64(src->container_id))
                return -ENOENT;
        int r = fork_op(d, DD_FORK_UNSTAGE, src->container_id, name, "", 0, &err);
        if (r < 0)
                log_warning("fork %s: could not remove what was staged: %s", name, err.message);
        return r;
}

/* docker.c's place for a fork child: its container (created, never started) takes the staged
 * filesystem and checkpoint and starts from them. */
int dd_fork_restore(struct driver *d, const struct sandbox *sb, const char *container, struct err *err) {
        uint64_t limit = P(d)->disk_caps ? (uint64_t) sb->disk << 30 : 0;
        int r = fork_op(d, DD_FORK_COPY, sb->fork_container, sb->fork_name, container, limit, err);
        if (r < 0)
                return r;
        r = docker_checkpoint_start(D(d), container, sb->fork_name);
        if (r < 0)
                return err_set(err, r, "the restore of the fork failed: %s", dmsg(r));
        return 0;
}
