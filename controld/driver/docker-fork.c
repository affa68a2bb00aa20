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
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "ddriver.h"
#include "docker-checkpoint.h"
#include "dockerchild.h"
#include "dockerchild-private.h"
#include "log.h"
#include "strutil.h"

static int fork_op(struct driver *d, int mode, const char *src, const char *name, const char *dst, uint64_t limit,
                   struct err *err) {
        if (!P(d)->root_dir)
                return err_set(err, -EOPNOTSUPP, "Docker's data root is not known");
        if (dockerchild_running())
                return dockerchild_fork(mode, src, name, dst, limit, err);
        return dd_fork_here(P(d)->root_dir, mode, src, name, dst, limit, err);
}

int dd_fork_stage(struct driver *d, const struct sandbox *src, const char *name, struct err *err) {
        if (!src->container_id || !hex_exactly(src->container_id, 64))
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
        if (!src->container_id || !hex_exactly(src->container_id, 64))
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
