/* envd-private.h — what envd's files share (envd.c, envd-common.c, envd-process.c, envd-fs.c,
 * envd-files.c), and nothing outside them includes. envd_route() (envd.c) and the sandbox
 * tokens (envd-common.c) are declared in e2b.h. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"
#include "http.h"
#include "pj_e2b.h"
#include "strutil.h"

struct err;
struct dirwatch;
struct sbfs;
struct session;

#define FS_TIMEOUT_MS 15000

/* E2B's users, with fixed ids: what a sandbox's /etc/passwd says is never asked (E2B's `base`
 * has `user` as 1000:1000). Any other name is refused. */
struct envd_user {
        const char *name;
        uint32_t uid, gid;
        const char *home;
};

/* envd-common.c: answers */
enum pj_connect_code envd_code_of(int err);
cJSON *envd_connect_error(enum pj_connect_code code, const char *msg);
enum MHD_Result envd_unary_error(struct req *r, enum pj_connect_code code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
enum MHD_Result envd_unary_ok(struct req *r, cJSON *o);
void envd_env_append(struct strbuf *b, uint8_t flags, cJSON *o);
void envd_env_end(struct strbuf *b, enum pj_connect_code code, const char *msg);

/* envd-common.c: the request's sandbox */
const struct envd_user *envd_req_user(struct req *r, const struct sandbox *sb);
/* The name of E2B's user (group when group) with that id, or NULL. */
const char *envd_id_name(uint32_t id, bool group);
int envd_sandbox(struct req *r, bool connect, struct sandbox *sb);
char *envd_resolve(const char *p, const char *home);

/* envd-common.c: the Connect request */
struct creq {
        const char *msg;
        size_t len;
        int64_t timeout_ms;              /* Connect-Timeout-Ms; 0 none */
        int keepalive_s;
};

int envd_connect_request(struct req *r, bool stream, struct creq *ret);

/* envd-common.c: streams */
enum skind { S_PROCESS, S_WATCH };

struct cstream {
        struct ctl *c;
        enum skind kind;
        struct session *x;
        struct dirwatch *w;
        bool pty, kill_at_deadline;
        char sandbox[SANDBOX_ID_LEN + 1];
        struct strbuf pending;
        size_t pending_off;
        bool done, counted;
        bool drop;                       /* once pending is sent: drop the connection (sandbox gone) */
        int client_fd;
        int64_t last_sent, deadline, keepalive_ms;
        /* WatchDir with includeEntry: what each event's entry is stat'ed with, and how (set by
         * envd-fs.c: entry_of gives an event's EntryInfo or NULL, entries_free ends it) */
        struct watch_entries *entries;
        cJSON *(*entry_of)(struct watch_entries *we, const char *path);
        void (*entries_free)(struct watch_entries *we);
};

void envd_s_event(struct cstream *t, cJSON *event);
void envd_s_free(void *cls);
struct cstream *envd_s_new(struct req *r, enum skind kind, const struct creq *q);
enum MHD_Result envd_s_respond(struct req *r, struct cstream *t);
enum MHD_Result envd_s_fail(struct req *r, enum pj_connect_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
extern const char *const envd_event_names[];

/* envd-process.c: process.Process */
enum MHD_Result envd_p_start(struct req *r);
enum MHD_Result envd_p_connect(struct req *r);
enum MHD_Result envd_p_list(struct req *r);
enum MHD_Result envd_p_input(struct req *r);
enum MHD_Result envd_p_signal(struct req *r);
enum MHD_Result envd_p_close_stdin(struct req *r);
enum MHD_Result envd_p_update(struct req *r);
enum MHD_Result envd_p_stream_input(struct req *r);

struct watch_entries;

/* envd-fs.c: filesystem.Filesystem */
enum MHD_Result envd_fs_stat(struct req *r);
enum MHD_Result envd_fs_mkdir(struct req *r);
enum MHD_Result envd_fs_move(struct req *r);
enum MHD_Result envd_fs_remove(struct req *r);
enum MHD_Result envd_fs_listdir(struct req *r);
enum MHD_Result envd_fs_watch(struct req *r);
enum MHD_Result envd_fs_create_watcher(struct req *r);
enum MHD_Result envd_fs_get_watcher_events(struct req *r);
enum MHD_Result envd_fs_remove_watcher(struct req *r);
/* envd-fs.c: files of E2B's `user` (envd-files.c's uploads too) */
int envd_existing_prefix(struct sbfs *fs, const char *path, size_t *ret);
int envd_give_to_user(struct ctl *c, const struct sandbox *sb, const struct envd_user *user, const char *path,
                      size_t existing, struct err *e);

/* envd-files.c: HTTP /files, /health, /envs */
enum MHD_Result envd_get_health(struct req *r);
enum MHD_Result envd_get_envs(struct req *r);
enum MHD_Result envd_get_files(struct req *r);
enum MHD_Result envd_prepare_post_files(struct req *r);
enum MHD_Result envd_post_files(struct req *r);
