/* e2b-volumes.c — E2B's volumes API (spec/openapi.yml /volumes) over Paddock's volumes
 * (core/volume.c, the same records as the Brimble API's /volumes):
 *
 *   GET    /volumes               the caller's volumes: [{volumeID, name}]
 *   POST   /volumes               {name}: 201 {volumeID, name, token}
 *   GET    /volumes/{volumeID}    {volumeID, name, token}
 *   DELETE /volumes/{volumeID}    204 (409 while a sandbox has it mounted)
 *
 * A volume made here is one of the account's volumes of the default region, of 10 GB (or the
 * plan's largest when that is less); a sandbox mounts it with E2B's volumeMounts (one per
 * sandbox here). Its token authorises the volume-content API below. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "e2b-private.h"
#include "e2b.h"
#include "json.h"
#include "pj_api.h"
#include "pj_e2b.h"
#include "pj_agent.h"
#include "sandbox.h"
#include "sbfs.h"
#include "strutil.h"
#include "runtime.h"
#include "volume-content.h"

#define VOLUME_GB_DEFAULT 10

static cJSON *volume_json(const struct ctl *c, const struct volume *v, bool with_token) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "volumeID", v->id);
        json_add_str(o, "name", v->name);
        if (with_token) {
                char tok[65];
                e2b_token(c, "volume", v->id, tok);
                json_add_str(o, "token", tok);
                explicit_bzero(tok, sizeof(tok));
        }
        return o;
}

/* The {volumeID} of /volumes/{volumeID}: one segment of 24 lowercase hex, else NULL. */
static const char *id_of(struct req *r) {
        const char *rest = r->m.rest;
        if (!rest || rest[0] != '/' || !e2b_hex24(rest + 1, strlen(rest + 1)))
                return NULL;
        return rest + 1;
}

enum MHD_Result e2b_volumes_list(struct req *r) {
        struct volume *v = NULL;
        size_t n = 0;
        int64_t total = 0;
        if (store_volume_list(r->c->store, r->acc.id, 0, 10000, &v, &n, &total) < 0)
                return respond_error(r, 500, "Failed to list the volumes");
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, volume_json(r->c, &v[i], false));
        volume_array_free(v, n);
        return respond_json(r, 200, a);
}

enum MHD_Result e2b_volumes_post(struct req *r) {
        struct err pe = { 0 }, e = { 0 };
        _cleanup_free_ char *name = NULL;
        if (pj_e2b_volume_parse(r->body.buf, r->body.len, &name, &pe) < 0)
                return respond_error(r, 400, "%s", pe.message);
        struct plan pbuf;
        const struct plan *plan = config_account_plan(r->c->cfg, &r->acc, &pbuf);
        struct pj_volume_create in = { .name = name, .region = r->c->cfg->default_region, .type = "sandbox",
                                       .size_gb = plan && plan->max_volume_gb < VOLUME_GB_DEFAULT ? (int) plan->max_volume_gb
                                                                                                : VOLUME_GB_DEFAULT };
        _cleanup_volume_ struct volume v = { 0 };
        int k = volume_create(r->c, &r->acc, &in, &v, &e);
        if (k == -EEXIST)
                return respond_error(r, 409, "%s", e.message);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_json(r, 201, volume_json(r->c, &v, true));
}

enum MHD_Result e2b_volume_get(struct req *r) {
        const char *id = id_of(r);
        _cleanup_volume_ struct volume v = { 0 };
        struct err e = { 0 };
        if (!id || volume_load(r->c, &r->acc, id, &v, &e) < 0)
                return respond_error(r, 404, "volume \"%s\" not found", id ? id : "");
        return respond_json(r, 200, volume_json(r->c, &v, true));
}

enum MHD_Result e2b_volume_delete(struct req *r) {
        const char *id = id_of(r);
        struct err e = { 0 };
        if (!id)
                return respond_error(r, 404, "volume not found");
        int k = volume_content_volume_delete(r->c, &r->acc, id, &e);
        if (k == -ENOENT)
                return respond_error(r, 404, "volume \"%s\" not found", id);
        if (k == -EBUSY)
                return respond_error(r, 409, "volume \"%s\" is mounted by a sandbox; kill the sandbox first", id);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

/* ---- /volumecontent/{volumeID}/{dir,file,path}: a volume's files without a sandbox ----
 *
 * Authorised by the volume's token (Authorization: Bearer, as the SDK sends it; no API key).
 * The files are reached through a sandbox that has the volume mounted (core/volume-content.c):
 *
 *   GET    dir?path=&depth=        the entries under path, depth levels down (1..VC_DEPTH_MAX)
 *   POST   dir?path=&uid&gid&mode&force   mkdir (force: its parents too, and no error when it
 *                                  is there already); 201 with its entry
 *   GET    path?path=              the entry (a symlink followed)
 *   PATCH  path?path= {uid,gid,mode}      chown/chmod; 200 with the entry
 *   DELETE path?path=              remove (a directory with what is in it); 204
 *   GET    file?path=              the file's bytes
 *   PUT    file?path=&uid&gid&mode&force  the body becomes the file (force: its parent
 *                                  directories are made); 200 with its entry
 *
 * An entry is E2B's VolumeEntryStat: name, path (in the volume), type, size, mode (permission
 * bits), uid, gid, atime/mtime/ctime (the modification time for all three: that is what the
 * sandbox's agent reports). A missing path is a 404, as the SDK reads it. */

#define VC_DEPTH_MAX 16
#define VC_ENTRIES_MAX 10000
#define VC_TIMEOUT_MS 15000

enum vc_op { VC_DIR, VC_FILE, VC_PATH };

/* The volume id and the operation of the request's path; 0, or answers and returns -1. */
static int vc_target(struct req *r, char id[SANDBOX_ID_LEN + 1], enum vc_op *op) {
        const char *p = r->path + strlen("/volumecontent/");
        id[0] = 0;
        if (strlen(p) >= SANDBOX_ID_LEN && e2b_hex24(p, SANDBOX_ID_LEN) && (p[SANDBOX_ID_LEN] == '/' || !p[SANDBOX_ID_LEN]))
                memcpy(id, p, SANDBOX_ID_LEN), id[SANDBOX_ID_LEN] = 0;
        const char *auth = req_header(r, "Authorization");
        if (!id[0] || !auth || strncmp(auth, "Bearer ", 7) != 0 || !e2b_token_ok(r->c, "volume", id, auth + 7)) {
                respond_error(r, 401, "the volume's token (from Volume.create or getInfo) is required");
                return -1;
        }
        const char *what = p + SANDBOX_ID_LEN;
        if (!strcmp(what, "/dir"))
                *op = VC_DIR;
        else if (!strcmp(what, "/file"))
                *op = VC_FILE;
        else if (!strcmp(what, "/path"))
                *op = VC_PATH;
        else {
                respond_error(r, 404, "no such volume-content call: /volumecontent/{volumeID}/ is followed by dir, file or path");
                return -1;
        }
        return 0;
}

/* An optional query integer in [0, max]: 0 (absent: *ret = -1), or answers and returns -1. */
static int vc_query_int(struct req *r, const char *key, int64_t max, int64_t *ret) {
        const char *v = req_query(r, key);
        *ret = -1;
        if (!v || !*v)
                return 0;
        int64_t n;
        if (safe_atoi64(v, &n) < 0 || n < 0 || n > max) {
                respond_error(r, 400, "%s must be an integer from 0 to %lld", key, (long long) max);
                return -1;
        }
        *ret = n;
        return 0;
}

static bool vc_query_bool(struct req *r, const char *key) {
        const char *v = req_query(r, key);
        return v && (!strcmp(v, "true") || !strcmp(v, "1"));
}

static const char *vc_type(uint8_t t) {
        switch (t) {
        case PJ_AGENT_FT_FILE:
                return "file";
        case PJ_AGENT_FT_DIR:
                return "directory";
        case PJ_AGENT_FT_SYMLINK:
                return "symlink";
        default:
                return "unknown";
        }
}

/* rel: the entry's path in the volume, "/" for its root. */
static cJSON *vc_entry(const char *rel, const struct sbfs_stat *st) {
        cJSON *o = cJSON_CreateObject();
        const char *slash = strrchr(rel, '/');
        json_add_str(o, "name", slash && slash[1] ? slash + 1 : "/");
        json_add_str(o, "path", rel);
        json_add_str(o, "type", vc_type(st->type));
        json_add_int(o, "size", (int64_t) st->size);
        json_add_int(o, "mode", st->mode & 07777);
        json_add_int(o, "uid", st->has_owner ? st->uid : 0);
        json_add_int(o, "gid", st->has_owner ? st->gid : 0);
        int64_t ms = st->mtime_ns / 1000000;
        json_add_time(o, "atime", ms);
        json_add_time(o, "mtime", ms);
        json_add_time(o, "ctime", ms);
        return o;
}

/* The path in the volume of full (a path volume_content_path made): "/" for its root. */
static const char *vc_rel(const struct volume_content *vc, const char *full) {
        const char *s = full + strlen(vc->root);
        return *s ? s : "/";
}

static enum MHD_Result vc_fail(struct req *r, int k, const struct err *e, const char *rel) {
        if (k == -ENOENT)
                return respond_error(r, 404, "path %s not found in the volume", rel);
        return respond_errno(r, k, e);
}

/* A connection to vc's sandbox in *fs and the entry of full (rel in the volume) in *st: 0, or
 * answers (404 when it is not there) and returns -1. */
static int vc_stat(struct req *r, struct volume_content *vc, const char *full, const char *rel, struct sbfs **fs,
                   struct sbfs_stat *st) {
        struct err e = { 0 };
        int k = sbfs_open(r->c, &vc->sb, fs, &e);
        if (k < 0)
                return respond_errno(r, k, &e), -1;
        if ((k = sbfs_stat(*fs, full, st, VC_TIMEOUT_MS)) < 0)
                return vc_fail(r, k, &e, rel), -1;
        return 0;
}

/* The entry of rel (full: its path in the sandbox) as the answer. */
static enum MHD_Result vc_respond_entry(struct req *r, struct volume_content *vc, const char *full, const char *rel, int status) {
        _cleanup_(sbfs_closep) struct sbfs *fs = NULL;
        struct sbfs_stat st;
        if (vc_stat(r, vc, full, rel, &fs, &st) < 0)
                return MHD_YES;
        return respond_json(r, status, vc_entry(rel, &st));
}

/* A listing's walk, breadth first: queue holds the full paths of the directories to list, in
 * order; an entry's path in the volume is its full path past the volume's root. */
struct vc_walk {
        cJSON *out;
        size_t n;                       /* entries in out */
        bool too_many;
        char **queue;
        size_t n_queue;
        const char *dir;                /* the directory being listed (full) */
        size_t root_len;
};

static int vc_walk_cb(const struct sbfs_entry *en, void *ud) {
        struct vc_walk *w = ud;
        if (!en->name)
                return 0;
        if (w->n >= VC_ENTRIES_MAX) {
                w->too_many = true;
                return -E2BIG;
        }
        char *full = xasprintf("%s/%s", w->dir, en->name);
        cJSON_AddItemToArray(w->out, vc_entry(full + w->root_len, &en->st));
        w->n++;
        if (en->st.type != PJ_AGENT_FT_DIR) {
                free(full);
                return 0;
        }
        w->queue = xrealloc(w->queue, (w->n_queue + 1) * sizeof(char *));
        w->queue[w->n_queue++] = full;
        return 0;
}

/* GET dir: the entries of full (rel in the volume), depth levels down, breadth first. */
static enum MHD_Result vc_list(struct req *r, struct volume_content *vc, const char *full, const char *rel, int64_t depth) {
        _cleanup_(sbfs_closep) struct sbfs *fs = NULL;
        struct err e = { 0 };
        struct sbfs_stat st;
        int k = 0;
        if (vc_stat(r, vc, full, rel, &fs, &st) < 0)
                return MHD_YES;
        if (st.type != PJ_AGENT_FT_DIR)
                return respond_error(r, 400, "path %s is not a directory", rel);
        struct vc_walk w = { .out = cJSON_CreateArray(), .root_len = strlen(vc->root) };
        w.queue = xnew0(char *, 1);
        w.queue[w.n_queue++] = xstrdup(full);
        size_t head = 0;
        for (int64_t d = 0; d < depth && head < w.n_queue && !w.too_many; d++) {
                size_t level_end = w.n_queue;
                for (; head < level_end && !w.too_many; head++) {
                        w.dir = w.queue[head];
                        k = sbfs_listdir(fs, w.dir, vc_walk_cb, &w, VC_TIMEOUT_MS);
                        if (k == -ENOENT)
                                k = 0;          /* a directory removed meanwhile is skipped */
                        if (k < 0 && !w.too_many)
                                break;
                }
                if (k < 0)
                        break;
        }
        for (size_t i = 0; i < w.n_queue; i++)
                free(w.queue[i]);
        free(w.queue);
        if (w.too_many) {
                cJSON_Delete(w.out);
                return respond_error(r, 400, "path %s has more than %d entries %lld levels down: list it with a smaller depth",
                                     rel, VC_ENTRIES_MAX, (long long) depth);
        }
        if (k < 0) {
                cJSON_Delete(w.out);
                return respond_errno(r, k, &e);
        }
        return respond_json(r, 200, w.out);
}

/* PATCH path's body: {uid?, gid?, mode?}, integers. 0, or answers and returns -1. */
static int vc_meta_body(struct req *r, int64_t *uid, int64_t *gid, int64_t *mode) {
        *uid = *gid = *mode = -1;
        _cleanup_json_ cJSON *o = r->body.len ? cJSON_ParseWithLength(r->body.buf, r->body.len) : cJSON_CreateObject();
        if (!cJSON_IsObject(o)) {
                respond_error(r, 400, "the body must be a JSON object {uid, gid, mode}");
                return -1;
        }
        const cJSON *it;
        cJSON_ArrayForEach(it, o) {
                int64_t *dst = !strcmp(it->string, "uid") ? uid : !strcmp(it->string, "gid") ? gid : !strcmp(it->string, "mode") ? mode : NULL;
                int64_t max = dst == mode ? 07777 : 0xffffffffLL;
                if (!dst) {
                        respond_error(r, 400, "%.64s: unknown field (uid, gid and mode are)", it->string);
                        return -1;
                }
                if (cJSON_IsNull(it))
                        continue;
                double v = cJSON_GetNumberValue(it);
                if (!cJSON_IsNumber(it) || v < 0 || v > (double) max || v != (double) (int64_t) v) {
                        respond_error(r, 400, "%s must be an integer from 0 to %lld", it->string, (long long) max);
                        return -1;
                }
                *dst = (int64_t) v;
        }
        return 0;
}

/* uid, gid, mode of the query (the dir and file writes): 0, or answers and returns -1. */
static int vc_meta_query(struct req *r, int64_t *uid, int64_t *gid, int64_t *mode) {
        if (vc_query_int(r, "uid", 0xffffffffLL, uid) < 0 || vc_query_int(r, "gid", 0xffffffffLL, gid) < 0 ||
            vc_query_int(r, "mode", 07777, mode) < 0)
                return -1;
        return 0;
}

/* Opens the volume's files for r, and the path of its query (*rel points into *full): 0, or
 * answers and returns -1. */
static int vc_begin(struct req *r, const char *id, struct volume_content *vc, char **full, const char **rel) {
        struct err e = { 0 };
        const char *p = req_query(r, "path");
        int k = volume_content_open(r->c, id, vc, &e);
        if (k < 0) {
                respond_errno(r, k, &e);
                return -1;
        }
        if (!(*full = volume_content_path(vc, p, &e))) {
                respond_errno(r, -EINVAL, &e);
                return -1;
        }
        *rel = vc_rel(vc, *full);
        return 0;
}

/* PUT file's prepare hook: the body streams into the file. */
enum MHD_Result e2b_volume_content_prepare(struct req *r) {
        char id[SANDBOX_ID_LEN + 1];
        enum vc_op op;
        if (vc_target(r, id, &op) < 0)
                return MHD_YES;
        if (op != VC_FILE)
                return respond_error(r, 405, "PUT is for /volumecontent/{volumeID}/file");
        int64_t uid, gid, mode;
        if (vc_meta_query(r, &uid, &gid, &mode) < 0)
                return MHD_YES;
        _cleanup_(volume_content_done) struct volume_content vc = { 0 };
        _cleanup_free_ char *full = NULL;
        const char *rel = NULL;
        if (vc_begin(r, id, &vc, &full, &rel) < 0)
                return MHD_YES;
        if (!strcmp(rel, "/"))
                return respond_error(r, 400, "path: a file's path is required");
        struct err e = { 0 };
        if (vc_query_bool(r, "force")) {
                _cleanup_(sbfs_closep) struct sbfs *fs = NULL;
                _cleanup_free_ char *dir = xstrdup(full);
                *strrchr(dir, '/') = 0;
                if (sbfs_open(r->c, &vc.sb, &fs, &e) == 0)
                        (void) sbfs_mkdir(fs, dir, true, VC_TIMEOUT_MS);
        }
        int k = runtime_upload_begin(r, &vc.sb, full, &e);
        return k < 0 ? vc_fail(r, k, &e, rel) : MHD_YES;
}

enum MHD_Result e2b_volume_content(struct req *r) {
        char id[SANDBOX_ID_LEN + 1];
        enum vc_op op;
        if (vc_target(r, id, &op) < 0)
                return MHD_YES;
        bool get = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST"), put = !strcmp(r->method, "PUT"),
             patch = !strcmp(r->method, "PATCH"), del = !strcmp(r->method, "DELETE");
        if ((op == VC_DIR && !get && !post) || (op == VC_FILE && !get && !put) || (op == VC_PATH && !get && !patch && !del))
                return respond_error(r, 405, "%s is not a call of /volumecontent/{volumeID}/%s", r->method,
                                     op == VC_DIR ? "dir (GET, POST)" : op == VC_FILE ? "file (GET, PUT)" : "path (GET, PATCH, DELETE)");
        int64_t uid = -1, gid = -1, mode = -1, depth = -1;
        if (((post || put) && vc_meta_query(r, &uid, &gid, &mode) < 0) || (patch && vc_meta_body(r, &uid, &gid, &mode) < 0) ||
            (op == VC_DIR && get && vc_query_int(r, "depth", VC_DEPTH_MAX, &depth) < 0))
                return MHD_YES;
        if (put) {
                struct err e = { 0 };
                int k = runtime_upload_finish(r, &e);
                if (k < 0)
                        return respond_errno(r, k, &e);
        }
        _cleanup_(volume_content_done) struct volume_content vc = { 0 };
        _cleanup_free_ char *full = NULL;
        const char *rel = NULL;
        if (vc_begin(r, id, &vc, &full, &rel) < 0)
                return MHD_YES;
        struct err e = { 0 };
        int k = 0;
        if (op == VC_DIR && get)
                return vc_list(r, &vc, full, rel, depth < 1 ? 1 : depth);
        if (op == VC_FILE && get) {
                _cleanup_(sbfs_closep) struct sbfs *fs = NULL;
                struct sbfs_stat st;
                if (vc_stat(r, &vc, full, rel, &fs, &st) < 0)
                        return MHD_YES;
                if (st.type != PJ_AGENT_FT_FILE)
                        return respond_error(r, 400, "path %s is not a file", rel);
                return runtime_respond_download(r, &vc.sb, full);
        }
        if (op == VC_PATH && get)
                return vc_respond_entry(r, &vc, full, rel, 200);
        if (del) {
                if (!strcmp(rel, "/"))
                        return respond_error(r, 400, "path: the volume's root cannot be removed (remove what is in it)");
                _cleanup_(sbfs_closep) struct sbfs *fs = NULL;
                struct sbfs_stat st;
                if (vc_stat(r, &vc, full, rel, &fs, &st) < 0)
                        return MHD_YES;
                if ((k = sbfs_remove(fs, full, true, VC_TIMEOUT_MS)) < 0)
                        return vc_fail(r, k, &e, rel);
                return respond_empty(r, 204);
        }
        if (op == VC_DIR && post) {
                if (!strcmp(rel, "/"))
                        return respond_error(r, 400, "path: a directory's path is required");
                _cleanup_(sbfs_closep) struct sbfs *fs = NULL;
                if ((k = sbfs_open(r->c, &vc.sb, &fs, &e)) < 0)
                        return respond_errno(r, k, &e);
                bool force = vc_query_bool(r, "force");
                k = sbfs_mkdir(fs, full, force, VC_TIMEOUT_MS);
                if (k == -EEXIST && !force)
                        return respond_error(r, 409, "path %s is there already (force: true makes it no error)", rel);
                if (k < 0 && k != -EEXIST)
                        return vc_fail(r, k, &e, rel);
        }
        if ((uid >= 0 || gid >= 0 || mode >= 0) && (k = volume_content_set_owner_mode(r->c, &vc, full, uid, gid, mode, &e)) < 0)
                return vc_fail(r, k, &e, rel);
        return vc_respond_entry(r, &vc, full, rel, post ? 201 : 200);
}
