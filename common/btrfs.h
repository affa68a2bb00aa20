/* btrfs.h — capped directories: btrfs subvolumes with a qgroup limit, through the kernel's
 * btrfs ioctls (no btrfs-progs at run time).
 *
 * Why btrfs: its qgroups are accounted by btrfs itself and need no CONFIG_QUOTA, so they work on
 * kernels without filesystem quota support (where XFS pquota and ext4 prjquota are refused).
 * A write past a subvolume's limit fails with EDQUOT ("Disk quota exceeded") in the writer.
 *
 * Conventions: >= 0 on success, -errno on failure; nothing here logs.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* 1 if path is on a btrfs filesystem, 0 if on another one, -errno if it cannot be checked. */
int btrfs_is_btrfs(const char *path);

/* Turns on quota accounting for the filesystem holding path: simple quotas where the kernel
 * has them (6.7+), full qgroups otherwise; already on (either mode) -> 0. Needs CAP_SYS_ADMIN.
 * Limits hold in both modes; under simple quotas a snapshot's limit counts only what is
 * written into it, not the data it shares with its origin. */
int btrfs_quota_enable(const char *path);

/* Creates subvolume parent/name and limits what it references to limit_bytes (0 = no limit).
 * Enables quotas on the filesystem first if needed. name: one path component.
 * -EEXIST if parent/name exists (it is left alone). On a failed limit the new subvolume is
 * removed again, so a subvolume is never left uncapped. */
int btrfs_subvol_create_capped(const char *parent, const char *name, uint64_t limit_bytes);

/* Deletes subvolume parent/name with everything in it. Missing -> -ENOENT. */
int btrfs_subvol_destroy(const char *parent, const char *name);
/* A snapshot of subvolume src as parent/name (same filesystem; a copy-on-write copy, instant),
 * its references limited to limit_bytes (0 = none). Here only (no remote). */
int btrfs_snapshot_capped(const char *src, const char *parent, const char *name, uint64_t limit_bytes);


/* A process that may not do these itself (controld's network-facing parent, whose docker child
 * holds CAP_SYS_ADMIN): with btrfs_set_remote() the three calls that need the capability go
 * through r instead, with the same contracts. NULL (the default) = do them here. */
struct btrfs_remote {
        int (*quota_enable)(const char *path);
        int (*subvol_create_capped)(const char *parent, const char *name, uint64_t limit_bytes);
        int (*subvol_destroy)(const char *parent, const char *name);
};
void btrfs_set_remote(const struct btrfs_remote *r);
