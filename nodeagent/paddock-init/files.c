/* files.c — the file operations of the agent protocol (READ, WRITE, STAT, LISTDIR, MKDIR,
 * MOVE, REMOVE). Plain syscalls; each returns >= 0 or -errno and logs nothing: the caller
 * sends the errno to the client. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

static uint8_t ftype_of(mode_t m) {
        return S_ISREG(m) ? PJ_AGENT_FT_FILE : S_ISDIR(m) ? PJ_AGENT_FT_DIR : S_ISLNK(m) ? PJ_AGENT_FT_SYMLINK : PJ_AGENT_FT_OTHER;
}

static void fill_stat(const struct stat *st, struct pj_agent_fields *f) {
        f->ftype = ftype_of(st->st_mode);
        f->size = (uint64_t) st->st_size;
        f->mode = st->st_mode & 07777;
        f->mtime_ns = (int64_t) st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
        /* the owner (envd's EntryInfo shows it); UINT32_MAX, the wire's "none", is sent as 0 */
        f->uid = st->st_uid == (uid_t) UINT32_MAX ? 0 : (uint32_t) st->st_uid;
        f->gid = st->st_gid == (gid_t) UINT32_MAX ? 0 : (uint32_t) st->st_gid;
        f->present |= PJ_AGENT_BIT(PJ_AGENT_T_FTYPE) | PJ_AGENT_BIT(PJ_AGENT_T_SIZE) | PJ_AGENT_BIT(PJ_AGENT_T_MODE) |
                      PJ_AGENT_BIT(PJ_AGENT_T_MTIME) | PJ_AGENT_BIT(PJ_AGENT_T_UID) | PJ_AGENT_BIT(PJ_AGENT_T_GID);
}

int files_stat(const char *path, struct pj_agent_fields *ret) {
        struct stat st;
        if (stat(path, &st) < 0)
                return -errno;
        fill_stat(&st, ret);
        return 0;
}

static int mkdir_p(const char *path, mode_t mode) {
        _cleanup_free_ char *p = xstrdup(path);
        for (char *s = p + 1;; s++) {
                if (*s && *s != '/')
                        continue;
                char c = *s;
                *s = 0;
                if (mkdir(p, mode) < 0) {
                        struct stat st;
                        if (errno != EEXIST)
                                return -errno;
                        if (stat(p, &st) < 0)
                                return -errno;
                        if (!S_ISDIR(st.st_mode))
                                return -ENOTDIR;
                }
                if (!c)
                        return 0;
                *s = c;
        }
}

int files_mkdir(const char *path, bool parents, uint32_t mode) {
        if (parents)
                return mkdir_p(path, mode);
        return mkdir(path, mode) < 0 ? -errno : 0;
}

int files_move(const char *from, const char *to) { return rename(from, to) < 0 ? -errno : 0; }

static int rm_one(const char *p, const struct stat *st _unused_, int flag, struct FTW *ftw _unused_) {
        if (flag == FTW_DP ? rmdir(p) : unlink(p))
                return errno;
        return 0;
}

int files_remove(const char *path, bool recursive) {
        struct stat st;
        if (lstat(path, &st) < 0)
                return -errno;
        if (!S_ISDIR(st.st_mode))
                return unlink(path) < 0 ? -errno : 0;
        if (!recursive)
                return rmdir(path) < 0 ? -errno : 0;
        _cleanup_free_ char *real = realpath(path, NULL);
        if (real && !strcmp(real, "/"))
                return -EBUSY;
        int r = nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
        return r > 0 ? -r : r < 0 ? -errno : 0;
}

int files_open_read(const char *path) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                int r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
                close(fd);
                return r;
        }
        return fd;
}

int files_open_write(const char *path, bool has_mode, uint32_t mode, bool parents) {
        if (parents) {
                _cleanup_free_ char *dir = xstrdup(path);
                char *slash = strrchr(dir, '/');
                if (slash && slash != dir) {
                        *slash = 0;
                        int r = mkdir_p(dir, 0755);
                        if (r < 0)
                                return r;
                }
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, has_mode ? mode : 0644);
        if (fd < 0)
                return -errno;
        struct stat st;
        int r = fstat(fd, &st) < 0 ? -errno : !S_ISREG(st.st_mode) ? -EINVAL : has_mode && fchmod(fd, mode) < 0 ? -errno : 0;
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

int files_listdir(const char *path, void (*emit)(void *ud, struct pj_agent_fields *e, size_t n), void *ud,
                  bool *ret_truncated) {
        DIR *d = opendir(path);
        if (!d)
                return -errno;
        struct pj_agent_fields *batch = xnew0(struct pj_agent_fields, PJ_AGENT_MAX_DIRENTS);
        size_t n = 0, total = 0, bytes = 0;
        bool truncated = false;
        struct dirent *de;
        errno = 0;
        while ((de = readdir(d))) {
                if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (total == PI_LISTDIR_MAX) {
                        truncated = true;
                        break;
                }
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* gone meanwhile */
                struct pj_agent_fields *e = &batch[n++];
                *e = (struct pj_agent_fields) { .present = PJ_AGENT_BIT(PJ_AGENT_T_NAME), .name = xstrdup(de->d_name) };
                fill_stat(&st, e);
                total++;
                bytes += strlen(de->d_name) + 64;
                if (n == PJ_AGENT_MAX_DIRENTS || bytes > PJ_AGENT_MAX_PAYLOAD / 2) {
                        emit(ud, batch, n);
                        for (size_t i = 0; i < n; i++)
                                pj_agent_fields_done(&batch[i]);
                        n = bytes = 0;
                }
        }
        int r = errno && !de ? -errno : 0;
        if (n)
                emit(ud, batch, n);
        for (size_t i = 0; i < n; i++)
                pj_agent_fields_done(&batch[i]);
        free(batch);
        closedir(d);
        *ret_truncated = truncated;
        return r;
}
