/* sbfs.h — a sandbox's file system as its agent sees it (sbfs.c): stat, list, make, move and
 * remove paths, for the edges that answer file system calls (envd-fs.c, envd-files.c).
 *
 * One handle is one connection to the agent, opened with sbfs_open and used for all the calls
 * of one request (a listing's walk, a stat per path component), one user at a time. Each
 * call is bounded by its timeout_ms and returns 0 or the agent's -errno (-ENOENT, -ENOTDIR,
 * -EEXIST, -EACCES, -ENOTEMPTY, -EXDEV, ...), -ETIMEDOUT, or -ECONNRESET/-EPROTO when the
 * connection failed. Nothing here logs. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"
#include "err.h"

struct ctl;
struct sandbox;
struct sbfs;

/* A path's metadata. type is enum pj_agent_ftype (pj_agent.h). */
struct sbfs_stat {
        uint8_t type;
        uint64_t size;
        uint32_t mode;                   /* permission bits */
        int64_t mtime_ns;
        uint32_t uid, gid;               /* the owner, when has_owner */
        bool has_owner;
};

/* One entry of a listing, valid during the callback. */
struct sbfs_entry {
        const char *name;                /* NULL when the agent sent none */
        struct sbfs_stat st;             /* lstat's: a symlink is itself */
};
/* < 0 stops the listing (returned by sbfs_listdir). */
typedef int (*sbfs_entry_cb)(const struct sbfs_entry *e, void *ud);

/* Connects to sb's agent: 0, or -errno with the reason in err (-EOPNOTSUPP: this controld runs
 * no agent). */
int sbfs_open(struct ctl *c, const struct sandbox *sb, struct sbfs **ret, struct err *err);
/* Closes the connection; NULL is fine. Returns NULL. */
struct sbfs *sbfs_close(struct sbfs *fs);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct sbfs *, sbfs_close)

/* stat (a symlink followed). */
int sbfs_stat(struct sbfs *fs, const char *path, struct sbfs_stat *ret, int timeout_ms);
/* Each entry of the directory path to cb (lstat'ed). */
int sbfs_listdir(struct sbfs *fs, const char *path, sbfs_entry_cb cb, void *ud, int timeout_ms);
int sbfs_mkdir(struct sbfs *fs, const char *path, bool parents, int timeout_ms);
int sbfs_move(struct sbfs *fs, const char *from, const char *to, int timeout_ms);
int sbfs_remove(struct sbfs *fs, const char *path, bool recursive, int timeout_ms);
