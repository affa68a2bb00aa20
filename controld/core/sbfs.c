/* sbfs.c — see sbfs.h: the agent's file system calls (guest-exec.h) behind core types. */
#include <errno.h>
#include <stdlib.h>

#include "guest-exec.h"
#include "guest.h"
#include "sbfs.h"

struct sbfs {
        struct guest_client *cl;
};

int sbfs_open(struct ctl *c, const struct sandbox *sb, struct sbfs **ret, struct err *err) {
        struct guest_client *cl = NULL;
        int r = guest_connect(c, sb, &cl, err);
        if (r < 0)
                return r;
        struct sbfs *fs = xnew0(struct sbfs, 1);
        fs->cl = cl;
        *ret = fs;
        return 0;
}

struct sbfs *sbfs_close(struct sbfs *fs) {
        if (!fs)
                return NULL;
        guest_client_free(fs->cl);
        free(fs);
        return NULL;
}

int sbfs_stat(struct sbfs *fs, const char *path, struct sbfs_stat *ret, int timeout_ms) {
        struct guest_stat st;
        int r = guest_fs_stat(fs->cl, path, &st, timeout_ms);
        if (r < 0)
                return r;
        *ret = (struct sbfs_stat) { .type = st.type, .size = st.size, .mode = st.mode, .mtime_ns = st.mtime_ns,
                                    .uid = st.uid, .gid = st.gid, .has_owner = st.has_owner };
        return 0;
}

struct listing {
        sbfs_entry_cb cb;
        void *ud;
};

static int list_entry(const struct pj_agent_fields *e, void *ud) {
        struct listing *l = ud;
        struct sbfs_entry en = { .name = e->name,
                                 .st = { .type = e->ftype, .size = e->size, .mode = e->mode, .mtime_ns = e->mtime_ns,
                                         .uid = e->uid, .gid = e->gid,
                                         .has_owner = PJ_AGENT_HAS(e, PJ_AGENT_T_UID) && PJ_AGENT_HAS(e, PJ_AGENT_T_GID) } };
        return l->cb(&en, l->ud);
}

int sbfs_listdir(struct sbfs *fs, const char *path, sbfs_entry_cb cb, void *ud, int timeout_ms) {
        struct listing l = { .cb = cb, .ud = ud };
        return guest_fs_listdir(fs->cl, path, list_entry, &l, timeout_ms, NULL);
}

int sbfs_mkdir(struct sbfs *fs, const char *path, bool parents, int timeout_ms) {
        return guest_fs_mkdir(fs->cl, path, parents, timeout_ms);
}

int sbfs_move(struct sbfs *fs, const char *from, const char *to, int timeout_ms) {
        return guest_fs_move(fs->cl, from, to, timeout_ms);
}

int sbfs_remove(struct sbfs *fs, const char *path, bool recursive, int timeout_ms) {
        return guest_fs_remove(fs->cl, path, recursive, timeout_ms);
}
