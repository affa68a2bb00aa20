/* watch.c — WATCH: a directory's changes as EVENT frames (inotify), optionally the whole tree.
 *
 * One inotify fd for the agent. Every watched directory is a row (wd, connection, channel, path
 * relative to the watched root); rows of a channel go when it closes. Bounds: PI_MAX_WATCHES
 * watches per connection, PI_WATCH_DIRS directories in all (a tree larger than what is left ends
 * the WATCH with ERROR ENOSPC before OK; a directory made later that does not fit ends the watch
 * with END truncated). A client that does not read its events (its output over PI_WATERMARK)
 * loses the watch the same way: END truncated, so it knows to list again. Events the kernel
 * dropped (IN_Q_OVERFLOW) end every watch with END truncated.
 *
 * Under gVisor, inotify sees what processes inside the sandbox do (the sentry's own file
 * system); changes made from outside the sandbox on a host-backed mount are not seen. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

#define WATCH_MASK                                                                                                      \
        (IN_CREATE | IN_CLOSE_WRITE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF | \
         IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct wrow {
        int wd;
        struct conn *c;
        uint32_t chan;
        bool recursive;
        char *rel; /* "" for the watched root */
        char *dir; /* the directory as the agent opened it */
};

static struct wrow rows[PI_WATCH_DIRS];
static size_t n_rows;

int watch_fd(void) { return n_rows ? pi.ino_fd : -1; }

/* rm: the kernel's watch goes too, unless another row (another channel watching the same
 * directory: the kernel gives it the same wd) still needs it. */
static void row_drop(size_t i, bool rm) {
        bool shared = false;
        for (size_t k = 0; k < n_rows; k++)
                shared |= k != i && rows[k].wd == rows[i].wd;
        if (rm && !shared)
                (void) inotify_rm_watch(pi.ino_fd, rows[i].wd);
        free(rows[i].rel);
        free(rows[i].dir);
        rows[i] = rows[--n_rows];
}

void watch_chan_closed(struct conn *c, uint32_t chan) {
        for (size_t i = n_rows; i-- > 0;)
                if (rows[i].c == c && rows[i].chan == chan)
                        row_drop(i, true);
}

static size_t count_conn(const struct conn *c) {
        size_t n = 0;
        for (size_t i = 0; i < PI_MAX_CHANS; i++)
                n += c->chans[i].used && c->chans[i].kind == CH_WATCH;
        return n;
}

/* Adds a row for dir (an absolute or /-relative path) as rel; 0, -ENOSPC (no row left) or -errno. */
static int add_dir(struct conn *c, uint32_t chan, bool recursive, const char *dir, const char *rel) {
        if (n_rows == PI_WATCH_DIRS)
                return -ENOSPC;
        int wd = inotify_add_watch(pi.ino_fd, dir, WATCH_MASK);
        if (wd < 0)
                return -errno;
        /* the same directory watched twice by one channel (a hard-linked or bind-mounted path) */
        for (size_t i = 0; i < n_rows; i++)
                if (rows[i].wd == wd && rows[i].c == c && rows[i].chan == chan)
                        return 0;
        rows[n_rows++] = (struct wrow) { .wd = wd, .c = c, .chan = chan, .recursive = recursive, .rel = xstrdup(rel),
                                         .dir = xstrdup(dir) };
        return 0;
}

static void send_event(struct conn *c, uint32_t chan, const char *path, uint8_t kind, bool dir) {
        conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_EVENT, .id = chan,
                                             .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_FTYPE), .path = (char *) path,
                                                    .event = kind, .ftype = dir ? PJ_AGENT_FT_DIR : PJ_AGENT_FT_FILE } });
}

/* The subdirectories of dir, depth first, each as a row (no symlinks followed, no other file
 * system entered). With announce (a directory that appeared after the WATCH), every entry
 * found gets a CREATE: what was made in it before its watch was in place is not lost. 0 or
 * -ENOSPC / -errno. */
static int add_tree(struct conn *c, uint32_t chan, const char *dir, const char *rel, dev_t dev, int depth, bool announce) {
        if (depth > 64)
                return 0;
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT || errno == EACCES ? 0 : -errno;
        DIR *d = fdopendir(dfd);
        if (!d)
                return -errno;
        TAKE_FD(dfd);
        int r = 0;
        struct dirent *e;
        while (r == 0 && (e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                char path[PJ_AGENT_MAX_PATH], sub[PJ_AGENT_MAX_PATH];
                if ((size_t) snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= sizeof(path) ||
                    (size_t) snprintf(sub, sizeof(sub), "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= sizeof(sub))
                        continue;
                if (announce)
                        send_event(c, chan, sub, PJ_AGENT_EV_CREATE, S_ISDIR(st.st_mode));
                if (!S_ISDIR(st.st_mode) || st.st_dev != dev)
                        continue;
                r = add_dir(c, chan, true, path, sub);
                if (r == 0)
                        r = add_tree(c, chan, path, sub, dev, depth + 1, announce);
                else if (r != -ENOSPC)
                        r = 0; /* gone meanwhile, or not ours to read: not fatal */
        }
        closedir(d);
        return r;
}

void watch_open(struct conn *c, const struct pj_agent_msg *m) {
        if (count_conn(c) >= PI_MAX_WATCHES)
                return conn_send_error(c, m->id, EMFILE, "This connection has %d watches, the limit.", PI_MAX_WATCHES);
        if (pi.ino_fd < 0) {
                pi.ino_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
                if (pi.ino_fd < 0)
                        return conn_send_error(c, m->id, errno, "Cannot watch: inotify: %s.", strerror(errno));
        }
        struct stat st;
        if (stat(m->f.path, &st) < 0)
                return conn_send_error_path(c, m->id, errno, m->f.path, "Cannot watch %s: %s.", m->f.path, strerror(errno));
        if (!S_ISDIR(st.st_mode))
                return conn_send_error_path(c, m->id, ENOTDIR, m->f.path, "Cannot watch %s: not a directory.", m->f.path);
        struct chan *ch = chan_new(c, m->id, CH_WATCH);
        if (!ch)
                return;
        int r = add_dir(c, m->id, m->f.recursive, m->f.path, "");
        if (r == 0 && m->f.recursive)
                r = add_tree(c, m->id, m->f.path, "", st.st_dev, 0, false);
        if (r < 0) {
                watch_chan_closed(c, m->id);
                chan_close(c, ch);
                if (r == -ENOSPC)
                        return conn_send_error_path(c, m->id, ENOSPC, m->f.path,
                                                    "Cannot watch %s: it would take more than the %d directories a sandbox "
                                                    "can watch at once.",
                                                    m->f.path, PI_WATCH_DIRS);
                return conn_send_error_path(c, m->id, -r, m->f.path, "Cannot watch %s: %s.", m->f.path, strerror(-r));
        }
        conn_send_simple(c, PJ_AGENT_OK, m->id);
}

/* Ends the watch of (c, chan) with END {truncated}. */
static void watch_end(struct conn *c, uint32_t chan, bool truncated) {
        watch_chan_closed(c, chan);
        struct chan *ch = chan_find(c, chan);
        if (ch)
                chan_close(c, ch);
        conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_END, .id = chan,
                                             .f = { .present = PJ_AGENT_BIT(PJ_AGENT_T_TRUNCATED), .truncated = truncated } });
}

void watch_cancel(struct conn *c, struct chan *ch) { watch_end(c, ch->id, false); }

static uint8_t event_of(uint32_t mask) {
        if (mask & (IN_CREATE | IN_MOVED_TO))
                return PJ_AGENT_EV_CREATE;
        if (mask & (IN_DELETE))
                return PJ_AGENT_EV_REMOVE;
        if (mask & IN_MOVED_FROM)
                return PJ_AGENT_EV_RENAME;
        if (mask & (IN_MODIFY | IN_CLOSE_WRITE))
                return PJ_AGENT_EV_WRITE;
        if (mask & IN_ATTRIB)
                return PJ_AGENT_EV_CHMOD;
        return 0;
}

static void one_event(const struct inotify_event *ev) {
        if (ev->mask & IN_Q_OVERFLOW) {
                /* events were lost: every watch ends, its client lists again */
                while (n_rows)
                        watch_end(rows[0].c, rows[0].chan, true);
                return;
        }
        for (size_t i = 0; i < n_rows; i++) {
                if (rows[i].wd != ev->wd)
                        continue;
                struct wrow *w = &rows[i];
                struct conn *c = w->c;
                uint32_t chan = w->chan;
                if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT)) {
                        if (!*w->rel) {
                                watch_end(c, chan, false); /* the watched directory itself is gone */
                                return;
                        }
                        if (ev->mask & IN_IGNORED) {
                                row_drop(i, false);
                                i--;
                        }
                        continue;
                }
                uint8_t kind = event_of(ev->mask);
                if (!kind || !ev->len)
                        continue;
                if (conn_out_pending(c) >= PI_WATERMARK) {
                        watch_end(c, chan, true);
                        return;
                }
                char path[PJ_AGENT_MAX_PATH];
                if ((size_t) snprintf(path, sizeof(path), "%s%s%s", w->rel, *w->rel ? "/" : "", ev->name) >= sizeof(path))
                        continue;
                bool dir = (ev->mask & IN_ISDIR) != 0;
                send_event(c, chan, path, kind, dir);
                if (dir && w->recursive && (ev->mask & (IN_CREATE | IN_MOVED_TO))) {
                        /* a new subdirectory: watch it (and what it already holds) too */
                        char abs[PJ_AGENT_MAX_PATH];
                        if ((size_t) snprintf(abs, sizeof(abs), "%s/%s", w->dir, ev->name) >= sizeof(abs))
                                continue;
                        struct stat st;
                        /* w may move as rows are added: nothing of it is used from here on */
                        int r = lstat(abs, &st) < 0 ? -errno : add_dir(c, chan, true, abs, path);
                        if (r == 0)
                                r = add_tree(c, chan, abs, path, st.st_dev, 1, true);
                        if (r == -ENOSPC) {
                                watch_end(c, chan, true);
                                return;
                        }
                }
        }
}

void watch_read(void) {
        _Alignas(struct inotify_event) char buf[16384];
        for (;;) {
                ssize_t n = read(pi.ino_fd, buf, sizeof(buf));
                if (n <= 0)
                        return;
                for (char *p = buf; p < buf + n;) {
                        const struct inotify_event *ev = (const struct inotify_event *) p;
                        p += sizeof(*ev) + ev->len;
                        one_event(ev);
                }
        }
}
