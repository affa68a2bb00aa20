/* envd-fs.c — envd's filesystem.Filesystem (Stat, MakeDir, Move, Remove, ListDir, WatchDir
 * and the watchers polled by id) and the ownership of what is made for E2B's `user`: envd.c's
 * routes call these; the Connect helpers and streams they use are envd-common.c's (envd-private.h). */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "envd-private.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_e2b.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "process.h"
#include "sbfs.h"
#include "session.h"
#include "strutil.h"

#define LISTDIR_MAX 65536

/* ---- filesystem.Filesystem ---- */

static int fs_agent(struct req *r, const struct sandbox *sb, struct sbfs **ret) {
        struct err msg = { 0 };
        int k = sbfs_open(r->c, sb, ret, &msg);
        if (k < 0) {
                envd_unary_error(r, PJ_CONNECT_UNAVAILABLE, "The sandbox's agent is not answering: %s", msg.message);
                return k;
        }
        return 0;
}

static enum MHD_Result fs_error(struct req *r, int k, const char *path) {
        switch (-k) {
        case ENOENT: return envd_unary_error(r, PJ_CONNECT_NOT_FOUND, "path not found: %s", path);
        case ENOTDIR: return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is not a directory: %s", path);
        case EISDIR: return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is a directory: %s", path);
        case EEXIST: return envd_unary_error(r, PJ_CONNECT_ALREADY_EXISTS, "path already exists: %s", path);
        case EACCES:
        case EPERM: return envd_unary_error(r, PJ_CONNECT_PERMISSION_DENIED, "permission denied: %s", path);
        case EXDEV: return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "cannot move across file systems: %s", path);
        case ENOTEMPTY: return envd_unary_error(r, PJ_CONNECT_FAILED_PRECONDITION, "directory not empty: %s", path);
        case EBUSY: return envd_unary_error(r, PJ_CONNECT_FAILED_PRECONDITION, "path is in use or refused: %s", path);
        case ENAMETOOLONG: return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long: %s", path);
        case ETIMEDOUT: return envd_unary_error(r, PJ_CONNECT_DEADLINE_EXCEEDED, "the sandbox did not answer in time");
        default: return envd_unary_error(r, PJ_CONNECT_INTERNAL, "%s: %s", path, strerror(-k));
        }
}

static void perm_string(uint8_t type, uint32_t mode, char out[11]) {
        static const char rwx[] = "rwxrwxrwx";
        out[0] = type == PJ_AGENT_FT_DIR ? 'd' : type == PJ_AGENT_FT_SYMLINK ? 'L' : type == PJ_AGENT_FT_FILE ? '-' : '?';
        for (int i = 0; i < 9; i++)
                out[1 + i] = mode & (1u << (8 - i)) ? rwx[i] : '-';
        out[10] = 0;
}

/* What envd says of a symlink: its target's type and permission bits (unknown when the target
 * is missing), and the target resolved. */
struct linkinfo {
        bool known;                      /* the target exists */
        uint8_t type;
        uint32_t mode;
        const char *target;              /* NULL: not resolved */
};

/* EntryInfo of path, as envd's (lstat): name, type, size, mode (permission bits only, as
 * envd's FileMode.Perm()), permissions (Go's FileMode string, "Lrwxrwxrwx" for a symlink),
 * times. A symlink (type SYMLINK) takes its type and mode from link (envd follows it for
 * those) and carries symlinkTarget. */
/* An owner's name as envd shows it: one of E2B's users (root when the agent did not say),
 * else the number. */
static void owner_name(bool known, uint32_t id, bool group, char buf[static 16]) {
        const char *name = known ? envd_id_name(id, group) : "root";
        if (name)
                snprintf(buf, 16, "%s", name);
        else
                snprintf(buf, 16, "%u", id);
}

static cJSON *entry_json(const char *path, const struct sbfs_stat *st, const struct linkinfo *link) {
        uint8_t type = st->type;
        uint64_t size = st->size;
        uint32_t mode = st->mode;
        int64_t mtime_ns = st->mtime_ns;
        cJSON *o = cJSON_CreateObject();
        const char *slash = strrchr(path, '/');
        uint8_t shown = type;
        uint32_t perm = mode & 0777;
        if (type == PJ_AGENT_FT_SYMLINK) {
                shown = link && link->known ? link->type : PJ_AGENT_FT_OTHER;
                perm = link && link->known ? link->mode & 0777 : 0;
        }
        json_add_str(o, "name", slash && slash[1] ? slash + 1 : path);
        json_add_str(o, "type", shown == PJ_AGENT_FT_DIR ? "FILE_TYPE_DIRECTORY" : shown == PJ_AGENT_FT_SYMLINK ? "FILE_TYPE_SYMLINK"
                                : shown == PJ_AGENT_FT_FILE                              ? "FILE_TYPE_FILE"
                                                                                         : "FILE_TYPE_UNSPECIFIED");
        json_add_str(o, "path", path);
        char n[32];
        snprintf(n, sizeof(n), "%llu", (unsigned long long) size);
        json_add_str(o, "size", n);
        cJSON_AddItemToObject(o, "mode", cJSON_CreateNumber((double) perm));
        char perms[11];
        perm_string(type, mode, perms);
        json_add_str(o, "permissions", perms);
        char who[16];
        owner_name(st->has_owner, st->uid, false, who);
        json_add_str(o, "owner", who);
        owner_name(st->has_owner, st->gid, true, who);
        json_add_str(o, "group", who);
        char t[64];
        time_t secs = (time_t) (mtime_ns / 1000000000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        size_t l = strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(t + l, sizeof(t) - l, ".%09lldZ", (long long) (mtime_ns % 1000000000));
        json_add_str(o, "modifiedTime", t);
        if (type == PJ_AGENT_FT_SYMLINK)
                json_add_str(o, "symlinkTarget", link && link->target ? link->target : path);
        return o;
}

/* {"entry": e} (e consumed). */
static enum MHD_Result entry_ok(struct req *r, cJSON *e) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "entry", e);
        return envd_unary_ok(r, o);
}

/* The targets of symlinks, resolved inside the sandbox (the agent has no readlink): one
 * process, realpath per path (the path itself when it cannot be resolved, as envd does),
 * NUL-separated. Bounded: LINKS_MAX paths, LINKS_OUT_MAX bytes of answer, LINKS_TIMEOUT_MS.
 * *ret[i] is NULL where nothing usable came back. */
#define LINKS_MAX 256
#define LINKS_OUT_MAX (LINKS_MAX * 4100)
#define LINKS_TIMEOUT_MS 10000

static int links_out(int stream, const uint8_t *data, size_t len, void *ud) {
        if (stream == 1)
                (void) strbuf_append(ud, data, len);
        return 0;
}

static void resolve_links(struct ctl *c, const struct sandbox *sb, char *const *paths, size_t n, char **ret) {
        for (size_t i = 0; i < n; i++)
                ret[i] = NULL;
        if (!n || n > LINKS_MAX)
                return;
        _cleanup_free_ const char **argv = xnew0(const char *, n + 5);
        argv[0] = "/bin/sh";
        argv[1] = "-c";
        /* the paths are absolute: no "--" needed (busybox's realpath takes none) */
        argv[2] = "for p; do r=$(realpath \"$p\" 2>/dev/null) || r=$p; printf '%s\\0' \"$r\"; done";
        argv[3] = "sh";
        for (size_t i = 0; i < n; i++)
                argv[4 + i] = paths[i];
        struct process_spec spec = { .argv = argv, .cwd = "/" };
        struct session *x = NULL;
        struct err e = { 0 };
        if (process_start_session(c, sb, &spec, &x, &e) < 0)
                return;
        _cleanup_strbuf_ struct strbuf out = STRBUF_INIT(LINKS_OUT_MAX);
        int64_t deadline = mono_ms() + LINKS_TIMEOUT_MS;
        int k = 0;
        while (k == 0 && mono_ms() < deadline)
                k = session_read(x, (int) (deadline - mono_ms()), -1, links_out, &out);
        if (k != 1)
                (void) session_signal(x, SIGKILL);
        session_free(x);
        if (k != 1 || out.truncated || !out.buf)
                return;
        const char *p = out.buf, *end = out.buf + out.len;
        for (size_t i = 0; i < n && p < end; i++) {
                const char *z = memchr(p, 0, (size_t) (end - p));
                if (!z)
                        break;
                if (z > p && *p == '/' && utf8_valid(p, (size_t) (z - p)))
                        ret[i] = xstrndup(p, (size_t) (z - p));
                p = z + 1;
        }
}

/* The link information of the symlink at path: its target's type and mode (the agent's STAT
 * follows links) and its resolved target. target is the caller's to free. */
static void link_info(struct ctl *c, const struct sandbox *sb, struct sbfs *fs, const char *path, struct linkinfo *ret,
                      char **ret_target) {
        struct sbfs_stat st;
        *ret = (struct linkinfo) { 0 };
        if (sbfs_stat(fs, path, &st, FS_TIMEOUT_MS) == 0)
                *ret = (struct linkinfo) { .known = true, .type = st.type, .mode = st.mode };
        char *p = (char *) path;
        resolve_links(c, sb, &p, 1, ret_target);
        ret->target = *ret_target;
}

/* lstat of path through the agent, which has none: its parent's listing (lstat'ed) names it.
 * 1 and *ret when path is a symlink, 0 when it is not or cannot be told. */
struct lfind {
        const char *name;
        struct sbfs_stat st;
        bool found;
};

static int lfind_entry(const struct sbfs_entry *e, void *ud) {
        struct lfind *f = ud;
        if (!f->found && e->name && !strcmp(e->name, f->name)) {
                f->found = true;
                f->st = e->st;
                return -ECANCELED;   /* found: the rest of the listing is read and dropped */
        }
        return 0;
}

static int lstat_symlink(struct sbfs *fs, const char *path, struct sbfs_stat *ret) {
        const char *slash = strrchr(path, '/');
        if (!slash || !slash[1])
                return 0;
        _cleanup_free_ char *dir = slash == path ? xstrdup("/") : xstrndup(path, (size_t) (slash - path));
        struct lfind f = { .name = slash + 1 };
        (void) sbfs_listdir(fs, dir, lfind_entry, &f, FS_TIMEOUT_MS);
        if (!f.found || f.st.type != PJ_AGENT_FT_SYMLINK)
                return 0;
        *ret = f.st;
        return 1;
}

static int stat_entry(struct ctl *c, const struct sandbox *sb, struct sbfs *fs, const char *path, cJSON **ret) {
        struct sbfs_stat st, lst;
        int k = sbfs_stat(fs, path, &st, FS_TIMEOUT_MS);
        if (k == -ENOENT || k == -ELOOP || k >= 0) {
                /* a symlink (a dangling one too): described as itself, as envd's lstat does */
                if (lstat_symlink(fs, path, &lst) == 1) {
                        struct linkinfo li;
                        _cleanup_free_ char *target = NULL;
                        link_info(c, sb, fs, path, &li, &target);
                        *ret = entry_json(path, &lst, &li);
                        return 0;
                }
        }
        if (k < 0)
                return k;
        *ret = entry_json(path, &st, NULL);
        return 0;
}

/* ---- files of E2B's `user` ----
 *
 * The agent writes and makes directories as root; what it makes for `user` is then given to
 * user (chown, run as root in the sandbox with fixed ids, no shell). The directories a call
 * creates are found before it, by stat from the path up: at most one per path component. */

#define OWN_TIMEOUT_MS 10000
#define OWN_MAX_PATHS 64

/* The number of leading characters of path that exist already (path itself: its length);
 * the components after them are what a mkdir -p / write makes. < 0: the agent failed, or did
 * not answer them all within FS_TIMEOUT_MS. */
int envd_existing_prefix(struct sbfs *fs, const char *path, size_t *ret) {
        _cleanup_free_ char *p = xstrdup(path);
        size_t len = strlen(p);
        int64_t deadline = mono_ms() + FS_TIMEOUT_MS;
        for (int steps = 0; len > 1 && steps < OWN_MAX_PATHS; steps++) {
                struct sbfs_stat st;
                p[len] = 0;
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                int k = sbfs_stat(fs, p, &st, (int) left);
                if (k == 0)
                        break;
                if (k != -ENOENT)
                        return k;
                char *slash = strrchr(p, '/');
                len = slash && slash != p ? (size_t) (slash - p) : 1;
        }
        *ret = len;
        return 0;
}

/* Gives path, and every directory above it past its first `existing` characters, to user.
 * 0 for root (nothing to do). */
int envd_give_to_user(struct ctl *c, const struct sandbox *sb, const struct envd_user *user, const char *path,
                      size_t existing, struct err *e) {
        if (!user->uid)
                return 0;
        char ids[32];
        snprintf(ids, sizeof(ids), "%u:%u", user->uid, user->gid);
        const char *argv[OWN_MAX_PATHS + 5] = { "chown", "-h", ids };
        size_t n = 3;
        _cleanup_free_ char *p = xstrdup(path);
        size_t len = strlen(p);
        /* path, then each directory above it that the call made, deepest first */
        argv[n++] = xstrdup(p);
        for (size_t i = len; i > existing + 1 && n < ELEMENTSOF(argv) - 1; i--)
                if (p[i - 1] == '/' && i - 1 > existing) {
                        p[i - 1] = 0;
                        argv[n++] = xstrdup(p);
                }
        argv[n] = NULL;
        struct process_spec spec = { .argv = argv, .cwd = "/" };
        struct session *x = NULL;
        int k = process_start_session(c, sb, &spec, &x, e), code = -1;
        if (k == 0) {
                _cleanup_strbuf_ struct strbuf out = STRBUF_INIT(4096);
                int64_t deadline = mono_ms() + OWN_TIMEOUT_MS;
                while (k == 0 && mono_ms() < deadline)
                        k = session_read(x, (int) (deadline - mono_ms()), -1, links_out, &out);
                if (k != 1)
                        (void) session_signal(x, SIGKILL);
                else if (session_exit_code(x, &code) < 0)
                        code = -1;
                session_free(x);
                k = k == 1 && code == 0 ? 0 : err_set(e, -EIO, "%s was made, but giving it to %s (chown %s) failed%s", path,
                                                      user->name, ids, k == 1 ? "" : ": chown did not finish in time");
        }
        for (size_t i = 3; i < n; i++)
                free((char *) argv[i]);
        return k;
}

/* The prologue of the unary filesystem calls: the request, the sandbox, the message, a path
 * resolved, the agent. < 0: answered. */
static int fs_begin(struct req *r, enum pj_envd_fs_kind kind, struct sandbox *sb, struct pj_envd_fs *in, char **path, char **to,
                    struct sbfs **fs) {
        struct creq q;
        struct err pe = { 0 };
        if (envd_connect_request(r, false, &q) < 0 || envd_sandbox(r, true, sb) < 0)
                return -EINVAL;
        if (pj_envd_fs_parse(q.msg, q.len, kind, in, &pe) < 0) {
                envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
                return -EINVAL;
        }
        const char *home = envd_req_user(r, sb)->home;
        *path = envd_resolve(in->path, home);
        if (in->to)
                *to = envd_resolve(in->to, home);
        if (!*path || (in->to && !*to)) {
                envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long (at most 4096 bytes)");
                return -EINVAL;
        }
        return fs_agent(r, sb, fs);
}

#define FS_LOCALS                                                    \
        _cleanup_sandbox_ struct sandbox sb = { 0 };                 \
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs in = { 0 };     \
        _cleanup_free_ char *path = NULL, *to = NULL;                \
        _cleanup_(sbfs_closep) struct sbfs *fs = NULL

/* The answer of a call that leaves path (k: how it went) as the entry there now. */
static enum MHD_Result answer_entry(struct req *r, const struct sandbox *sb, struct sbfs *fs, const char *path, int k) {
        cJSON *e = NULL;
        if (k == 0)
                k = stat_entry(r->c, sb, fs, path, &e);
        if (k < 0)
                return fs_error(r, k, path);
        return entry_ok(r, e);
}

enum MHD_Result envd_fs_stat(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_PATH, &sb, &in, &path, &to, &fs) < 0)
                return MHD_YES;
        return answer_entry(r, &sb, fs, path, 0);
}

enum MHD_Result envd_fs_mkdir(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_PATH, &sb, &in, &path, &to, &fs) < 0)
                return MHD_YES;
        struct sbfs_stat st;
        int k = sbfs_stat(fs, path, &st, FS_TIMEOUT_MS);
        if (k == 0)
                return envd_unary_error(r, PJ_CONNECT_ALREADY_EXISTS, "directory already exists: %s", path);
        if (k != -ENOENT)
                return fs_error(r, k, path);
        size_t existing = 0;
        struct err ae = { 0 };
        if ((k = envd_existing_prefix(fs, path, &existing)) < 0)
                return fs_error(r, k, path);
        k = sbfs_mkdir(fs, path, true, FS_TIMEOUT_MS);
        if (k == 0 && envd_give_to_user(r->c, &sb, envd_req_user(r, &sb), path, existing, &ae) < 0)
                return envd_unary_error(r, PJ_CONNECT_INTERNAL, "%s", ae.message);
        return answer_entry(r, &sb, fs, path, k);
}

enum MHD_Result envd_fs_move(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_MOVE, &sb, &in, &path, &to, &fs) < 0)
                return MHD_YES;
        int k = sbfs_move(fs, path, to, FS_TIMEOUT_MS);
        if (k < 0)
                return fs_error(r, k, path);
        return answer_entry(r, &sb, fs, to, 0);
}

enum MHD_Result envd_fs_remove(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_PATH, &sb, &in, &path, &to, &fs) < 0)
                return MHD_YES;
        int k = sbfs_remove(fs, path, true, FS_TIMEOUT_MS);
        if (k == -ENOENT)
                k = 0;   /* envd's os.RemoveAll: nothing there is success */
        if (k < 0)
                return fs_error(r, k, path);
        return envd_unary_ok(r, cJSON_CreateObject());
}

/* ListDir's answer is built from what the sandbox says: bounded in entries (LISTDIR_MAX) and
 * in bytes (LISTDIR_BYTES_MAX of JSON, counted while the entries arrive so that long names under
 * a long path never grow it further), then sorted as envd's walk gives it: by name, each
 * directory followed by what is under it. */
#define LISTDIR_BYTES_MAX ((size_t) 16 << 20)
#define LISTDIR_ENTRY_JSON 240           /* an entry's JSON besides its name and path */

struct lsent {
        char *path;
        struct sbfs_stat st;
        struct linkinfo link;            /* symlinks: what they point at */
        char *target;
};

struct lsctx {
        struct lsent *v;
        size_t n, cap, bytes;
        const char *dir;
        char **subdirs;                  /* directories found, for the next depth */
        size_t n_sub;
};

static int ls_entry(const struct sbfs_entry *e, void *ud) {
        struct lsctx *x = ud;
        if (!e->name || !utf8_valid(e->name, strlen(e->name)) || strchr(e->name, '/') || !strcmp(e->name, ".") ||
            !strcmp(e->name, ".."))
                return 0;
        if (x->n >= LISTDIR_MAX)
                return -E2BIG;
        size_t dl = strlen(x->dir), nl = strlen(e->name);
        x->bytes += LISTDIR_ENTRY_JSON + 2 * (dl + nl + 1);
        if (x->bytes > LISTDIR_BYTES_MAX)
                return -EMSGSIZE;
        if (x->n == x->cap) {
                x->cap = x->cap ? 2 * x->cap : 256;
                x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
        }
        char *p = xasprintf("%s%s%s", x->dir, strcmp(x->dir, "/") ? "/" : "", e->name);
        x->v[x->n++] = (struct lsent) { .path = p, .st = e->st };
        if (e->st.type == PJ_AGENT_FT_DIR) {
                x->subdirs = xrealloc(x->subdirs, (x->n_sub + 1) * sizeof(char *));
                x->subdirs[x->n_sub++] = xstrdup(p);
        }
        return 0;
}

/* Paths in walk order: compared byte by byte with '/' before every other byte, so that a
 * directory's entries come right after it and before its next sibling ("a", "a/b", "a-c"). */
static int walk_order(const void *pa, const void *pb) {
        const unsigned char *a = (const unsigned char *) ((const struct lsent *) pa)->path;
        const unsigned char *b = (const unsigned char *) ((const struct lsent *) pb)->path;
        while (*a && *a == *b)
                a++, b++;
        int ca = *a == '/' ? 1 : *a ? *a + 1 : 0, cb = *b == '/' ? 1 : *b ? *b + 1 : 0;
        return ca - cb;
}

static void free_strv_n(char **v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

enum MHD_Result envd_fs_listdir(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_LISTDIR, &sb, &in, &path, &to, &fs) < 0)
                return MHD_YES;
        struct lsctx x = { 0 };
        char **level = xnew0(char *, 1);
        size_t n_level = 1;
        level[0] = xstrdup(path);
        int k = 0;
        for (uint32_t d = 0; d < in.depth && n_level && k >= 0; d++) {
                x.subdirs = NULL;
                x.n_sub = 0;
                for (size_t i = 0; i < n_level && k >= 0; i++) {
                        x.dir = level[i];
                        k = sbfs_listdir(fs, level[i], ls_entry, &x, FS_TIMEOUT_MS);
                        if (k < 0 && d > 0 && k != -E2BIG && k != -EMSGSIZE)
                                k = 0;   /* a subdirectory that went away or cannot be read meanwhile */
                }
                free_strv_n(level, n_level);
                level = x.subdirs;
                n_level = x.n_sub;
        }
        free_strv_n(level, n_level);
        _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(0);
        if (k >= 0) {
                qsort(x.v, x.n, sizeof(*x.v), walk_order);
                /* symlinks as envd shows them: the first LINKS_MAX with their targets */
                char *lp[LINKS_MAX] = { 0 }, *lt[LINKS_MAX] = { 0 };
                size_t li[LINKS_MAX], nl = 0;
                for (size_t i = 0; i < x.n && nl < LINKS_MAX; i++)
                        if (x.v[i].st.type == PJ_AGENT_FT_SYMLINK) {
                                struct sbfs_stat st;
                                if (sbfs_stat(fs, x.v[i].path, &st, FS_TIMEOUT_MS) == 0)
                                        x.v[i].link = (struct linkinfo) { .known = true, .type = st.type, .mode = st.mode };
                                li[nl] = i;
                                lp[nl++] = x.v[i].path;
                        }
                resolve_links(r->c, &sb, lp, nl, lt);
                for (size_t j = 0; j < nl; j++) {
                        x.v[li[j]].target = lt[j];
                        x.v[li[j]].link.target = lt[j];
                        x.bytes += lt[j] ? strlen(lt[j]) : 0;
                }
                strbuf_append(&b, "{\"entries\":[", 12);
                for (size_t i = 0; i < x.n; i++) {
                        cJSON *e = entry_json(x.v[i].path, &x.v[i].st, &x.v[i].link);
                        _cleanup_free_ char *s = json_print(e);
                        cJSON_Delete(e);
                        if (i)
                                strbuf_append(&b, ",", 1);
                        strbuf_append(&b, s, strlen(s));
                        /* names JSON escapes at length (control bytes) go past the estimate */
                        if (b.len > LISTDIR_BYTES_MAX + LINKS_OUT_MAX) {
                                k = -EMSGSIZE;
                                break;
                        }
                }
                strbuf_append(&b, "]}", 2);
        }
        for (size_t i = 0; i < x.n; i++)
                free_many(x.v[i].path, x.v[i].target);
        free(x.v);
        if (k == -E2BIG)
                return envd_unary_error(r, PJ_CONNECT_RESOURCE_EXHAUSTED, "more than %d entries: list with a smaller depth (path %s)",
                                        LISTDIR_MAX, path);
        if (k == -EMSGSIZE)
                return envd_unary_error(r, PJ_CONNECT_RESOURCE_EXHAUSTED,
                                        "the listing is larger than the limit (%zu MiB of answer): list with a smaller depth "
                                        "or a directory further down (path %s)",
                                        LISTDIR_BYTES_MAX >> 20, path);
        if (k < 0)
                return fs_error(r, k, path);
        size_t len = b.len;
        char *s = strbuf_steal(&b);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(len, s, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return respond_response(r, 200, resp);
}

/* A watch stream's own agent connection and sandbox, for includeEntry's stats. At most
 * WATCH_ENTRIES_MAX stats per stream (each is a round trip to the agent): events past it come
 * without their entry, as envd's do when the entry cannot be read. */
#define WATCH_ENTRIES_MAX 100000
struct watch_entries {
        struct ctl *c;
        struct sandbox sb;
        struct sbfs *fs;
        char *root;
        uint64_t n;
};

static void watch_entries_free(struct watch_entries *we) {
        if (!we)
                return;
        sbfs_close(we->fs);
        sandbox_clear(&we->sb);
        free(we->root);
        free(we);
}

/* The EntryInfo of path (relative to the watched directory) for a watch event; NULL when it
 * cannot be stat'ed (gone already) or past the per-stream bound. */
static cJSON *watch_entry(struct watch_entries *we, const char *path) {
        if (we->n++ >= WATCH_ENTRIES_MAX)
                return NULL;
        _cleanup_free_ char *full = xasprintf("%s%s%s", we->root, endswith(we->root, "/") ? "" : "/", path);
        cJSON *e = NULL;
        return stat_entry(we->c, &we->sb, we->fs, full, &e) == 0 ? e : NULL;
}

static struct watch_entries *watch_entries_new(struct ctl *c, const struct sandbox *sb, const char *root, struct err *err) {
        struct watch_entries *we = xnew0(struct watch_entries, 1);
        we->c = c;
        we->root = xstrdup(root);
        if (store_sandbox_get(c->store, sb->id, &we->sb) < 0 || sbfs_open(c, &we->sb, &we->fs, err) < 0) {
                if (!err->message[0])
                        err_set(err, -EIO, "cannot read the sandbox's record");
                watch_entries_free(we);
                return NULL;
        }
        return we;
}

enum MHD_Result envd_fs_watch(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs in = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        if (envd_connect_request(r, true, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_fs_parse(q.msg, q.len, PJ_ENVD_FS_WATCH, &in, &pe) < 0)
                return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        _cleanup_free_ char *path = envd_resolve(in.path, envd_req_user(r, &sb)->home);
        if (!path)
                return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long");
        struct cstream *t = envd_s_new(r, S_WATCH, &q);
        int k = process_watch(r->c, &sb, path, in.recursive, &t->w, &e);
        if (k < 0) {
                envd_s_free(t);
                return envd_s_fail(r, k == -EINVAL ? PJ_CONNECT_INVALID_ARGUMENT : envd_code_of(k), "%s", e.message);
        }
        if (in.include_entry) {
                if (!(t->entries = watch_entries_new(r->c, &sb, path, &e))) {
                        envd_s_free(t);
                        return envd_s_fail(r, PJ_CONNECT_UNAVAILABLE, "%s", e.message);
                }
                t->entry_of = watch_entry;
                t->entries_free = watch_entries_free;
        }
        cJSON *start = cJSON_CreateObject();
        cJSON_AddObjectToObject(start, "start");
        envd_env_append(&t->pending, 0, start);
        return envd_s_respond(r, t);
}

/* ---- watchers polled by id (CreateWatcher, GetWatcherEvents, RemoveWatcher: the sync Python
 * SDK's watch_dir). Each holds one agent connection with its WATCH; events wait in the agent's
 * bounded buffer until polled. Bounded: WATCHERS_MAX in all, WATCHERS_PER_SANDBOX each; one not
 * polled for WATCHER_IDLE_MS is dropped. ---- */

#define WATCHERS_MAX 256
#define WATCHERS_PER_SANDBOX 8
#define WATCHER_IDLE_MS (10 * 60 * 1000)
#define WATCHER_EVENTS_MAX 4096
#define WATCHER_EVENTS_BYTES ((size_t) 1 << 20)   /* of one poll's answer (paths are up to 4 KiB each) */

struct watcher {
        char id[SANDBOX_ID_LEN + 1];     /* the watcher's own id (random) */
        char sandbox[SANDBOX_ID_LEN + 1];
        struct dirwatch *w;
        int64_t last_poll;
        bool busy;                       /* a poll is reading it */
};
static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher watchers[WATCHERS_MAX];

/* Drops idle watchers (their connections closed outside the lock). */
static void watchers_expire(void) {
        struct dirwatch *gone[WATCHERS_MAX];
        size_t n = 0;
        int64_t now = mono_ms();
        pthread_mutex_lock(&watchers_lock);
        for (size_t i = 0; i < WATCHERS_MAX; i++)
                if (watchers[i].w && !watchers[i].busy && now - watchers[i].last_poll > WATCHER_IDLE_MS) {
                        gone[n++] = watchers[i].w;
                        watchers[i] = (struct watcher) { 0 };
                }
        pthread_mutex_unlock(&watchers_lock);
        for (size_t i = 0; i < n; i++)
                dirwatch_free(gone[i]);
}

enum MHD_Result envd_fs_create_watcher(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs in = { 0 };
        _cleanup_free_ char *path = NULL;
        struct creq q;
        struct err pe = { 0 };
        struct err e = { 0 };
        if (envd_connect_request(r, false, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_fs_parse(q.msg, q.len, PJ_ENVD_FS_WATCH, &in, &pe) < 0)
                return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        if (in.include_entry)
                return envd_unary_error(r, PJ_CONNECT_UNIMPLEMENTED, "includeEntry: polled watchers (CreateWatcher) carry no "
                                        "entries here; use WatchDir, or list the directory");
        path = envd_resolve(in.path, envd_req_user(r, &sb)->home);
        if (!path)
                return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long");
        watchers_expire();
        pthread_mutex_lock(&watchers_lock);
        size_t mine = 0, slot = WATCHERS_MAX;
        for (size_t i = 0; i < WATCHERS_MAX; i++) {
                if (watchers[i].id[0] && !strcmp(watchers[i].sandbox, sb.id))
                        mine++;
                if (!watchers[i].id[0] && slot == WATCHERS_MAX)
                        slot = i;
        }
        if (mine >= WATCHERS_PER_SANDBOX || slot == WATCHERS_MAX) {
                pthread_mutex_unlock(&watchers_lock);
                return envd_unary_error(r, PJ_CONNECT_RESOURCE_EXHAUSTED, "at most %d watchers per sandbox (%d on this server): "
                                        "remove one first", WATCHERS_PER_SANDBOX, WATCHERS_MAX);
        }
        struct watcher *wt = &watchers[slot];
        hexid_new(wt->id);
        snprintf(wt->sandbox, sizeof(wt->sandbox), "%s", sb.id);
        wt->busy = true;   /* reserved while the WATCH is set up */
        wt->last_poll = mono_ms();
        char id[SANDBOX_ID_LEN + 1];
        memcpy(id, wt->id, sizeof(id));
        pthread_mutex_unlock(&watchers_lock);
        struct dirwatch *w = NULL;
        int k = process_watch(r->c, &sb, path, in.recursive, &w, &e);
        pthread_mutex_lock(&watchers_lock);
        if (k < 0)
                *wt = (struct watcher) { 0 };
        else {
                wt->w = w;
                wt->busy = false;
        }
        pthread_mutex_unlock(&watchers_lock);
        if (k < 0)
                return envd_unary_error(r, k == -EINVAL ? PJ_CONNECT_INVALID_ARGUMENT : envd_code_of(k), "%s", e.message);
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "watcherId", id);
        return envd_unary_ok(r, o);
}

struct evlist {
        cJSON *events;
        size_t n, bytes;
};

static int collect_event(int event, const char *path, bool dir, void *ud) {
        struct evlist *l = ud;
        (void) dir;
        if (event < 1 || event > PJ_AGENT_EV_CHMOD || !utf8_valid(path, strlen(path)))
                return 0;
        cJSON *f = cJSON_CreateObject();
        json_add_str(f, "name", path);
        json_add_str(f, "type", envd_event_names[event]);
        cJSON_AddItemToArray(l->events, f);
        l->bytes += strlen(path) + 64;
        /* the rest waits for the next poll */
        return ++l->n >= WATCHER_EVENTS_MAX || l->bytes >= WATCHER_EVENTS_BYTES ? -ENOBUFS : 0;
}

/* The watcher id of a GetWatcherEvents / RemoveWatcher message, checked to be this sandbox's. */
static int watcher_message(struct req *r, struct sandbox *sb, char id[SANDBOX_ID_LEN + 1]) {
        struct creq q;
        if (envd_connect_request(r, false, &q) < 0 || envd_sandbox(r, true, sb) < 0)
                return -EINVAL;
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct err pe = { 0 };
        static const char *const names[] = { "watcherId", "watcher_id" };
        const struct pj_json *v = NULL;
        if (pj_json_parse_object(q.msg, q.len, true, &root, &pe) < 0 ||
            pj_check_fields(root, "", names, ELEMENTSOF(names), &pe) < 0) {
                envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
                return -EINVAL;
        }
        v = pj_json_member(root, "watcherId");
        if (!v)
                v = pj_json_member(root, "watcher_id");
        if (!v || v->type != PJ_JSON_STRING || !hexid_valid_n(v->str, v->str_len)) {
                envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "watcherId is required: the id CreateWatcher answered");
                return -EINVAL;
        }
        memcpy(id, v->str, SANDBOX_ID_LEN);
        id[SANDBOX_ID_LEN] = 0;
        return 0;
}

/* The watcher, taken (busy) for the caller: its slot, or NULL (answered not_found). */
static struct watcher *watcher_take(struct req *r, const struct sandbox *sb, const char *id) {
        struct watcher *found = NULL;
        pthread_mutex_lock(&watchers_lock);
        for (size_t i = 0; i < WATCHERS_MAX && !found; i++)
                if (watchers[i].w && !watchers[i].busy && !strcmp(watchers[i].id, id) && !strcmp(watchers[i].sandbox, sb->id))
                        found = &watchers[i];
        if (found)
                found->busy = true;
        pthread_mutex_unlock(&watchers_lock);
        if (!found)
                envd_unary_error(r, PJ_CONNECT_NOT_FOUND, "watcher %s not found (removed, expired after 10 minutes without a poll, "
                                 "or in use by another poll)", id);
        return found;
}

/* A watcher call's start: its message, the caller's sandbox, the watcher taken (NULL with the
 * answer sent). */
static struct watcher *watcher_begin(struct req *r, struct sandbox *sb) {
        char id[SANDBOX_ID_LEN + 1];
        if (watcher_message(r, sb, id) < 0)
                return NULL;
        return watcher_take(r, sb, id);
}

enum MHD_Result envd_fs_get_watcher_events(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct watcher *wt = watcher_begin(r, &sb);
        if (!wt)
                return MHD_YES;
        cJSON *o = cJSON_CreateObject();
        struct evlist l = { .events = cJSON_AddArrayToObject(o, "events") };
        int k = dirwatch_read(wt->w, 0, -1, collect_event, &l);
        bool ended = k == 1, truncated = ended && dirwatch_truncated(wt->w);
        struct dirwatch *drop = NULL;
        pthread_mutex_lock(&watchers_lock);
        wt->busy = false;
        wt->last_poll = mono_ms();
        if (ended || (k < 0 && k != -ENOBUFS)) {
                drop = wt->w;
                *wt = (struct watcher) { 0 };
        }
        pthread_mutex_unlock(&watchers_lock);
        dirwatch_free(drop);
        if (truncated) {
                cJSON_Delete(o);
                return envd_unary_error(r, PJ_CONNECT_DATA_LOSS, "events were lost (polled too slowly): list the directory again");
        }
        if (k < 0 && k != -ENOBUFS && !l.n) {
                cJSON_Delete(o);
                return envd_unary_error(r, PJ_CONNECT_UNAVAILABLE, "lost the connection to the sandbox's agent");
        }
        return envd_unary_ok(r, o);
}

enum MHD_Result envd_fs_remove_watcher(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct watcher *wt = watcher_begin(r, &sb);
        if (!wt)
                return MHD_YES;
        pthread_mutex_lock(&watchers_lock);
        struct dirwatch *drop = wt->w;
        *wt = (struct watcher) { 0 };
        pthread_mutex_unlock(&watchers_lock);
        dirwatch_free(drop);
        return envd_unary_ok(r, cJSON_CreateObject());
}
