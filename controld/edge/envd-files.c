/* envd-files.c — envd's plain HTTP endpoints: /health, /envs, GET /files (download) and
 * POST /files (multipart upload, gzip accepted): envd.c's routes call these. */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "cleanup.h"
#include "controld.h"
#include "envd-private.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_e2b.h"
#include "sandbox.h"
#include "sbfs.h"
#include "strutil.h"
#include "runtime.h"

/* ---- HTTP: /files, /health, /envs ---- */

/* Liveness, as the SDKs' isRunning() reads it: 204 while the sandbox runs, 502 (E2B's proxy
 * body: sandboxId, message, code) once it is paused, killed or was never there. It says no
 * more than that, so it wants no token (E2B's proxy answers the same way). */
enum MHD_Result envd_get_health(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (r->m.id[0] && store_sandbox_get(r->c->store, r->m.id, &sb) == 0 && sandbox_running_now(&sb))
                return respond_empty(r, 204);
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "sandboxId", r->m.id);
        json_add_str(o, "message", sb.id[0] && sb.status != SB_DESTROYED && sb.status != SB_FAILED
                                           ? "The sandbox is not running (paused, pausing or starting)"
                                           : "The sandbox was not found");
        json_add_int(o, "code", 502);
        return respond_json(r, 502, o);
}

enum MHD_Result envd_get_envs(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (envd_sandbox(r, false, &sb) < 0)
                return MHD_YES;
        return respond_json(r, 200, sb_map_to_json(&sb.env));
}

enum MHD_Result envd_get_files(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        const char *p = req_query(r, "path");
        if (envd_sandbox(r, false, &sb) < 0)
                return MHD_YES;
        if (!p || !*p)
                return respond_error(r, 400, "path is required");
        _cleanup_free_ char *path = envd_resolve(p, envd_req_user(r, &sb)->home);
        if (!path)
                return respond_error(r, 400, "path is too long (at most 4096 bytes)");
        return runtime_respond_download(r, &sb, path);
}

/* POST /files: the body streams into the sandbox, as octet-stream (one file at ?path=) or as
 * multipart/form-data (each "file" part to ?path=, or, without it, to the part's filename). */
#define MAX_UPLOAD_FILES 256
struct upload {
        struct req *r;
        struct sandbox sb;
        bool multipart;
        struct MHD_PostProcessor *pp;
        char *query_path;
        struct runtime_run *x;           /* the file being written */
        char *cur;                       /* its path */
        const struct envd_user *user;    /* who owns what the upload makes */
        size_t existing;                 /* how much of cur existed before (strlen: the file did) */
        uint64_t received, limit;
        int error;                       /* first failure: -errno */
        char msg[512];
        cJSON *written;                  /* [{name, type, path}] */
        int files;
        bool gzip;                       /* Content-Encoding: gzip, inflated here */
        z_stream z;
        uint64_t inflated, inflate_limit;
        bool z_ended;                    /* the gzip stream ended (what follows is refused) */
};

static void up_fail(struct upload *u, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void up_fail(struct upload *u, int err, const char *fmt, ...) {
        if (u->error)
                return;
        u->error = err;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(u->msg, sizeof(u->msg), fmt, ap);
        va_end(ap);
        u->x = runtime_free(u->x);
}

static void up_finish(struct upload *u) {
        if (!u->x)
                return;
        struct err e = { 0 };
        int k = runtime_file_write_finish(u->x, u->cur, &e);
        u->x = runtime_free(u->x);
        /* a new file (and the directories made for it) is the user's; one that was there keeps its owner */
        if (k == 0 && u->existing < strlen(u->cur))
                k = envd_give_to_user(u->r->c, &u->sb, u->user, u->cur, u->existing, &e);
        if (k < 0)
                return up_fail(u, k, "%s", e.message);
        cJSON *o = cJSON_CreateObject();
        const char *slash = strrchr(u->cur, '/');
        json_add_str(o, "name", slash ? slash + 1 : u->cur);
        json_add_str(o, "type", "file");
        json_add_str(o, "path", u->cur);
        cJSON_AddItemToArray(u->written, o);
}

static void up_open(struct upload *u, const char *raw_path) {
        struct err e = { 0 };
        struct err msg = { 0 };
        up_finish(u);
        if (u->error)
                return;
        if (++u->files > MAX_UPLOAD_FILES)
                return up_fail(u, -EINVAL, "at most %d files in one upload", MAX_UPLOAD_FILES);
        free(u->cur);
        u->cur = raw_path && *raw_path ? envd_resolve(raw_path, u->user->home) : NULL;
        if (!u->cur)
                return up_fail(u, -EINVAL, "%s", raw_path && *raw_path ? "path is too long" : "path is required (?path=, or a file name)");
        /* envd makes the parent directories */
        char dir[4097];
        snprintf(dir, sizeof(dir), "%s", u->cur);
        char *slash = strrchr(dir, '/');
        u->existing = strlen(u->cur);
        struct sbfs *fs = NULL;
        if (sbfs_open(u->r->c, &u->sb, &fs, &msg) == 0) {
                if (u->user->uid && envd_existing_prefix(fs, u->cur, &u->existing) < 0)
                        u->existing = strlen(u->cur);
                if (slash && slash != dir) {
                        *slash = 0;
                        (void) sbfs_mkdir(fs, dir, true, FS_TIMEOUT_MS);
                }
                sbfs_close(fs);
        }
        struct sandbox copy = { 0 };
        if (store_sandbox_get(u->r->c->store, u->sb.id, &copy) < 0)
                return up_fail(u, -ENOENT, "the sandbox is gone");
        int k = runtime_file_write_start(u->r->c, &copy, u->cur, &u->x, &e);
        sandbox_clear(&copy);
        if (k < 0)
                up_fail(u, k, "%s", e.message);
}

static void up_data(struct upload *u, const char *data, size_t len) {
        if (u->error || !u->x)
                return;
        u->received += len;
        if (u->received > u->limit)
                return up_fail(u, -EFBIG, "the upload is larger than the limit (%llu bytes)", (unsigned long long) u->limit);
        int k = runtime_file_write(u->x, data, len);
        if (k < 0)
                up_fail(u, k == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH, "writing %s in the sandbox failed: %s", u->cur,
                        strerror(-k));
}

static enum MHD_Result up_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size) {
        struct upload *u = cls;
        (void) kind;
        (void) content_type;
        (void) transfer_encoding;
        if (strcmp(key, "file"))
                return MHD_YES;   /* other fields are not files */
        if (off == 0)
                up_open(u, u->query_path && u->files == 0 ? u->query_path : filename);
        if (size)
                up_data(u, data, size);
        return MHD_YES;
}

static void up_body(struct upload *u, const char *data, size_t len) {
        if (u->multipart) {
                if (len && MHD_post_process(u->pp, data, len) != MHD_YES)
                        up_fail(u, -EINVAL, "the multipart body is malformed");
        } else
                up_data(u, data, len);
}

/* A gzip body (Content-Encoding: gzip) inflated as it arrives, in bounded pieces; what it
 * inflates to is bounded by inflate_limit (a small gzip body may not grow into a large one). */
static void up_inflate(struct upload *u, const char *data, size_t len) {
        char out[64 * 1024];
        if (u->z_ended) {
                if (len)
                        up_fail(u, -EINVAL, "the body holds bytes after the end of its gzip stream");
                return;
        }
        u->z.next_in = (Bytef *) data;
        u->z.avail_in = (uInt) len;
        /* until the input is used and inflate had room to spare (it may hold output back) */
        do {
                u->z.next_out = (Bytef *) out;
                u->z.avail_out = sizeof(out);
                int k = inflate(&u->z, Z_NO_FLUSH);
                size_t got = sizeof(out) - u->z.avail_out;
                if (k != Z_OK && k != Z_STREAM_END && !(k == Z_BUF_ERROR && !got))
                        return up_fail(u, -EINVAL, "the body is not valid gzip (Content-Encoding: gzip): %s",
                                       u->z.msg ? u->z.msg : "corrupt data");
                u->inflated += got;
                if (u->inflated > u->inflate_limit)
                        return up_fail(u, -EFBIG, "the upload, decompressed, is larger than the limit (%llu bytes)",
                                       (unsigned long long) u->inflate_limit);
                if (got)
                        up_body(u, out, got);
                if (k == Z_STREAM_END) {
                        u->z_ended = true;
                        if (u->z.avail_in)
                                up_fail(u, -EINVAL, "the body holds bytes after the end of its gzip stream");
                        return;
                }
        } while (!u->error && (u->z.avail_in || u->z.avail_out == 0));
}

static int up_sink(struct req *r, const char *data, size_t len) {
        struct upload *u = r->ud;
        if (len == (size_t) -1)
                return 0;
        if (u->error)
                return 0;
        if (u->gzip)
                up_inflate(u, data, len);
        else
                up_body(u, data, len);
        return 0;
}

static void up_free(void *ud) {
        struct upload *u = ud;
        if (!u)
                return;
        if (u->pp)
                MHD_destroy_post_processor(u->pp);
        if (u->gzip)
                inflateEnd(&u->z);
        runtime_free(u->x);
        sandbox_clear(&u->sb);
        cJSON_Delete(u->written);
        free_many(u->query_path, u->cur);
        free(u);
}

static enum MHD_Result metadata_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
        (void) kind, (void) value;
        if (!strncasecmp(key, "X-Metadata-", 11)) {
                *(bool *) cls = true;
                return MHD_NO;
        }
        return MHD_YES;
}

enum MHD_Result envd_prepare_post_files(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (envd_sandbox(r, false, &sb) < 0)
                return MHD_YES;
        /* envd 0.6.2's file metadata (X-Metadata-<key>: kept as user.e2b.* xattrs) is not kept
         * here: refused, never dropped in silence */
        bool metadata = false;
        (void) MHD_get_connection_values(r->conn, MHD_HEADER_KIND, metadata_header, &metadata);
        if (metadata)
                return respond_error(r, 501, "File metadata (X-Metadata-* headers) is not kept on this server: write the "
                                             "file without metadata");
        const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE), *ce = req_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING);
        const char *p = req_query(r, "path");
        bool gzip = ce && !strcasecmp(ce, "gzip");
        if (ce && !gzip && strcasecmp(ce, "identity"))
                return respond_error(r, 415, "Content-Encoding %s is not supported: send gzip or identity", ce);
        bool multipart = ct && !strncasecmp(ct, "multipart/form-data", 19);
        bool octet = ct && !strncasecmp(ct, "application/octet-stream", 24);
        if (!multipart && !octet)
                return respond_error(r, 415, "Content-Type must be multipart/form-data or application/octet-stream");
        if (octet && (!p || !*p))
                return respond_error(r, 400, "path is required for an application/octet-stream upload");
        struct upload *u = xnew0(struct upload, 1);
        u->r = r;
        u->user = envd_req_user(r, &sb);
        u->sb = sb;
        sb = (struct sandbox) { 0 };
        u->multipart = multipart;
        u->limit = r->c->cfg->max_file;
        u->query_path = p && *p ? xstrdup(p) : NULL;
        u->written = cJSON_CreateArray();
        if (gzip) {
                if (inflateInit2(&u->z, 16 + MAX_WBITS) != Z_OK) {
                        up_free(u);
                        return respond_error(r, 500, "could not start decompressing the upload");
                }
                u->gzip = true;
                /* the files' bytes are bounded by limit in up_data; multipart framing gets 1 MiB more */
                u->inflate_limit = u->limit + (multipart ? 1024 * 1024 : 0);
        }
        r->sink = up_sink;
        r->ud = u;
        r->on_end = up_free;
        if (multipart) {
                u->pp = MHD_create_post_processor(r->conn, 64 * 1024, up_part, u);
                if (!u->pp)
                        return respond_error(r, 400, "the multipart body has no boundary");
        } else
                up_open(u, u->query_path);
        return MHD_YES;
}

enum MHD_Result envd_post_files(struct req *r) {
        struct upload *u = r->ud;
        if (!u)
                return respond_error(r, 500, "the upload was not prepared");
        if (!u->error && u->gzip && !u->z_ended)
                up_fail(u, -EINVAL, "the gzip body is truncated (Content-Encoding: gzip)");
        if (!u->error)
                up_finish(u);
        if (!u->error && u->files == 0)
                up_fail(u, -EINVAL, "the body holds no file (a multipart part named \"file\")");
        if (u->error) {
                int st = u->error == -EFBIG ? 413 : u->error == -ENOSPC ? 507 : http_status_from_errno(u->error);
                return respond_error(r, st, "%s", u->msg);
        }
        cJSON *w = u->written;
        u->written = NULL;
        return respond_json(r, 200, w);
}
