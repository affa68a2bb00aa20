/* usertemplate.c — templates users build from their own Dockerfile (our API, not Brimble's):
 *
 *   POST   /templates         {name, dockerfile, files?}: accepted, the build starts
 *   GET    /templates         the caller's templates
 *   GET    /templates/{name}  status (building, ready, failed), the build's log, size
 *   DELETE /templates/{name}  stops a build, or removes the image from the registry
 *
 * A build never touches a host's Docker. It runs in a sandbox of the caller's account made
 * from [templates] builder (the docker template: dockerd inside gVisor), under the account's
 * plan, specs and default egress: the context goes in through the runtime's file calls, `docker
 * build` and `docker save` run there, each layer is compressed there, and controld reads the
 * results back through the same file calls, bounded ([templates] max_image), hashing as it
 * reads. It then pushes the blobs and a schema-2 manifest to the snapshot registry itself, under
 * <repository>/<account id>-<name>, and records the image by digest. Whatever the sandbox says
 * (the manifest's paths, its sizes) is checked, never followed on the host: paths name files in
 * the sandbox, read through its agent; the registry checks every digest we computed.
 *
 * A create naming the template (its account only; another account's name is unknown to it)
 * gets that image; the node pulls it once and then uses its copy (driver/docker.c).
 * The HTTP side is edge/templates.c; what the drivers ask of such images, driver/userimage.c. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stdatomic.h>

#include <openssl/evp.h>

#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "driver.h"
#include "json.h"
#include "log.h"
#include "pj_api.h"
#include "strutil.h"
#include "userimage.h"
#include "usertemplate.h"
#include "runtime.h"
#include "sandbox.h"
#include "template.h"

#define UTPL_LOG_MAX (64 * 1024)
#define BUILD_DIR "/root/.paddock-build"
#define CTX_DIR BUILD_DIR "/ctx"
#define IMG_DIR BUILD_DIR "/img"
#define LOCAL_TAG "paddock-template-build"

/* ---- names, paths, the request ---- */

static bool server_template(const char *name, void *ud) {
        return config_template(ud, name) != NULL;
}

/* Parses and checks a POST /templates body (proto-json: the field at fault named); its name must
 * not be one of this server's templates. */
static int build_req_parse(const struct config *cfg, const char *body, size_t len, struct pj_template_build *ret, char *msg,
                           size_t msglen) {
        struct err pe = { 0 };
        int r = pj_template_build_parse(body, len, cfg->utpl_max_context, server_template, (void *) cfg, ret, &pe);
        if (r < 0)
                snprintf(msg, msglen, "%s", pe.message);
        return r;
}

/* ---- the build ---- */

/* Builds running in this controld ([templates] max_builds): each holds a sandbox and, while a
 * layer is on its way, up to max_image bytes of controld's disk. */
static atomic_int builds_running;

struct build_job {
        char id[25];
        char account_id[25];
        struct pj_template_build req;
};

/* The log: the build's output, its last UTPL_LOG_MAX bytes. */
static void log_append(struct strbuf *log, const char *text, size_t len) {
        strbuf_append(log, text, len);
        if (log->len > UTPL_LOG_MAX) {
                size_t drop = log->len - UTPL_LOG_MAX;
                memmove(log->buf, log->buf + drop, log->len - drop);
                log->len -= drop;
                log->buf[log->len] = 0;
        }
}

struct build {
        struct ctl *c;
        struct account acc;
        struct user_template row;
        char builder[25];
        int64_t deadline;               /* mono_ms() */
        struct strbuf log;
        char why[512];
};

static int remaining_s(const struct build *b) {
        int64_t ms = b->deadline - mono_ms();
        return ms <= 0 ? 0 : (int) ((ms + 999) / 1000);
}

/* Still wanted: not deleted meanwhile, controld not stopping, time left. */
static int still_wanted(struct build *b) {
        _cleanup_(user_template_clear) struct user_template t = { 0 };
        if (b->c->stopping)
                return snprintf(b->why, sizeof(b->why), "controld stopped during the build; build it again"), -ECANCELED;
        if (store_utpl_get_id(b->c->store, b->row.id, &t) < 0)
                return -ECANCELED;      /* deleted: nobody to tell */
        if (remaining_s(b) <= 0)
                return snprintf(b->why, sizeof(b->why), "the build took longer than %llus ([templates] build_timeout)",
                                (unsigned long long) b->c->cfg->utpl_build_timeout_s), -ETIMEDOUT;
        return 0;
}

/* Runs argv in the builder (no shell), up to the build's deadline; its output goes to the log
 * when to_log. 0 when it exited 0, else -EIO with why. */
static int run_in_builder(struct build *b, const char *const *argv, bool to_log, const char *what) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err e = { 0 };
        int r = still_wanted(b);
        if (r < 0)
                return r;
        if ((r = runtime_load_ready(b->c, &b->acc, b->builder, &sb, &e)) < 0)
                return snprintf(b->why, sizeof(b->why), "%s: the build sandbox is gone: %s", what, e.message), -EIO;
        struct runtime_cmd cmd = { .argv = argv, .timeout_s = remaining_s(b) };
        struct runtime_run *x = NULL;
        if ((r = runtime_start(b->c, &sb, &cmd, NULL, NULL, &x, &e)) < 0)
                return snprintf(b->why, sizeof(b->why), "%s: %s", what, e.message), -EIO;
        struct exec_result res = { 0 };
        r = runtime_wait(x, &res, &e);
        if (r == 0 && (to_log || res.exit_code != 0)) {
                if (res.out_len)
                        log_append(&b->log, res.out, res.out_len);
                if (res.err_len)
                        log_append(&b->log, res.err, res.err_len);
        }
        if (r < 0)
                snprintf(b->why, sizeof(b->why), "%s: %s", what, e.message);
        else if (res.timed_out)
                snprintf(b->why, sizeof(b->why), "%s: the build took longer than %llus ([templates] build_timeout)", what,
                         (unsigned long long) b->c->cfg->utpl_build_timeout_s);
        else if (res.oom_killed)
                snprintf(b->why, sizeof(b->why), "%s: the build sandbox ran out of memory", what);
        else if (res.exit_code != 0)
                snprintf(b->why, sizeof(b->why), "%s exited with code %d (see the log)", what, res.exit_code);
        runtime_free(x);
        return r < 0 || res.exit_code != 0 ? -EIO : 0;
}

static int put_in_builder(struct build *b, const char *path, const void *data, size_t len) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err e = { 0 };
        struct runtime_run *x = NULL;
        int r;
        if ((r = runtime_load_ready(b->c, &b->acc, b->builder, &sb, &e)) < 0 ||
            (r = runtime_file_write_start(b->c, &sb, path, &x, &e)) < 0)
                return snprintf(b->why, sizeof(b->why), "writing the context (%s): %s", path, e.message), -EIO;
        for (size_t off = 0; off < len && r >= 0;) {
                size_t k = len - off < (1 << 20) ? len - off : (1 << 20);
                r = runtime_file_write(x, (const uint8_t *) data + off, k);
                off += k;
        }
        if (r >= 0)
                r = runtime_file_write_finish(x, path, &e);
        else
                snprintf(e.message, sizeof(e.message), "%s", strerror(-r));
        runtime_free(x);
        if (r < 0)
                return snprintf(b->why, sizeof(b->why), "writing the context (%s): %s", path, e.message), -EIO;
        return 0;
}

static bool write_all(int fd, const void *data, size_t len) {
        for (const char *p = data; len;) {
                ssize_t k = write(fd, p, len);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return false;
                p += k;
                len -= (size_t) k;
        }
        return true;
}

/* Reads a file of the builder: into *ret_mem (max bytes, NUL-terminated) when fd < 0, else into
 * fd; sha256 of what was read in hex (optional), its size in *ret_len. -EFBIG past max. */
static int read_from_builder(struct build *b, const char *path, size_t max, int fd, char **ret_mem, size_t *ret_len,
                             char hex[65]) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err e = { 0 };
        struct runtime_run *x = NULL;
        const void *all = NULL;
        size_t all_len = 0, total = 0;
        struct strbuf mem = { 0 };
        int r;
        if ((r = still_wanted(b)) < 0)
                return r;
        if ((r = runtime_load_ready(b->c, &b->acc, b->builder, &sb, &e)) < 0 ||
            (r = runtime_file_read_open(b->c, &sb, path, &x, &all, &all_len, &e)) < 0) {
                runtime_free(x);
                return snprintf(b->why, sizeof(b->why), "reading the image (%s): %s", path, e.message), -EIO;
        }
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        EVP_DigestInit_ex(md, EVP_sha256(), NULL);
        _cleanup_free_ char *buf = all ? NULL : xmalloc(1 << 20);
        for (;;) {
                const char *chunk;
                ssize_t k;
                if (all) {
                        chunk = all;
                        k = (ssize_t) all_len;
                        all = NULL;
                        if (k == 0)
                                break;
                } else {
                        if (!buf)
                                break;
                        k = runtime_file_read(x, -1, buf, 1 << 20);
                        chunk = buf;
                        if (k <= 0) {
                                r = (int) k;
                                break;
                        }
                }
                if (total + (size_t) k > max) {
                        r = -EFBIG;
                        break;
                }
                total += (size_t) k;
                EVP_DigestUpdate(md, chunk, (size_t) k);
                if (fd >= 0) {
                        if (!write_all(fd, chunk, (size_t) k)) {
                                r = -errno ?: -EIO;
                                break;
                        }
                } else
                        strbuf_append(&mem, chunk, (size_t) k);
                if (!buf)
                        break;  /* the whole file came with the open */
        }
        runtime_free(x);
        unsigned char d[32];
        unsigned dl = 0;
        EVP_DigestFinal_ex(md, d, &dl);
        EVP_MD_CTX_free(md);
        if (r < 0) {
                strbuf_done(&mem);
                if (r == -EFBIG)
                        return snprintf(b->why, sizeof(b->why), "the image is over its limit of %zu bytes ([templates] max_image)",
                                        max), -EFBIG;
                return snprintf(b->why, sizeof(b->why), "reading the image (%s): %s", path, strerror(-r)), -EIO;
        }
        if (hex)
                hex_encode(d, 32, hex);
        if (ret_mem)
                *ret_mem = strbuf_steal(&mem);
        *ret_len = total;
        return 0;
}

/* A file for a layer on its way to the registry: anonymous, beside the store. */
static int layer_tmpfile(const struct config *cfg) {
        _cleanup_free_ char *dir = xstrdup(cfg->db_path);
        int fd = open(dirname(dir), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
                fd = open("/var/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        return fd < 0 ? -errno : fd;
}

static void repo_of(const struct config *cfg, const char *account_id, const char *name, char *out, size_t n) {
        snprintf(out, n, "%s/%s-%s", cfg->utpl_repository, account_id, name);
}

/* Deletes t's manifest (image "<registry>/<repo>@<digest>") from the registry. */
static int drop_manifest(const struct config *cfg, const struct user_template *t) {
        const char *at = t->image ? strchr(t->image, '@') : NULL;
        char repo[300];
        struct registry reg = config_snapshot_registry(cfg);
        repo_of(cfg, t->account_id, t->name, repo, sizeof(repo));
        return at ? registry_manifest_delete(&reg, repo, at + 1) : -EINVAL;
}

/* An image path from docker save's manifest.json: relative, no '..', a bounded set of bytes. */
/* Pushes one blob read from the builder's path: to a temp file (hashing), then to the registry
 * unless it has it already. */
static int push_layer(struct build *b, const struct registry *reg, const char *repo, const char *path, size_t max,
                      char digest[72], size_t *ret_len) {
        int fd = layer_tmpfile(b->c->cfg);
        if (fd < 0)
                return snprintf(b->why, sizeof(b->why), "no room for a layer on controld's host: %s", strerror(-fd)), -EIO;
        char hex[65];
        size_t len = 0;
        int r = read_from_builder(b, path, max, fd, NULL, &len, hex);
        if (r < 0) {
                close(fd);
                return r;
        }
        snprintf(digest, 72, "sha256:%s", hex);
        *ret_len = len;
        if (registry_blob_exists(reg, repo, digest) == 1) {
                close(fd);
                return 0;
        }
        void *map = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
        close(fd);
        if (len && map == MAP_FAILED)
                return snprintf(b->why, sizeof(b->why), "mapping a layer: %s", strerror(errno)), -EIO;
        r = registry_blob_upload(reg, repo, digest, map, len, (long) remaining_s(b) * 1000 + 1000);
        if (map)
                munmap(map, len);
        if (r < 0)
                return snprintf(b->why, sizeof(b->why), "pushing a layer to the registry: %s", strerror(-r)), -EIO;
        return 0;
}

/* The parts of an image's config that the host's Docker (or Nomad's) would act on for the
 * tenant, outside the sandbox: VOLUME (an anonymous volume under the node's data root, outside
 * the sandbox's disk cap, left behind at every remove), HEALTHCHECK (a command the host runs as
 * often as the image says, outside the sandbox's CPU quota), EXPOSE, STOPSIGNAL and the stop
 * timeout, ONBUILD, and labels in our names (paddock.*) or Nomad's (com.hashicorp.nomad.*).
 * Each is dropped from the image's "config" and its legacy "container_config"; what went from
 * "config" is said in *said, for the build's log. Returns whether anything was dropped. */
static bool config_normalise(cJSON *img, struct strbuf *said) {
        static const struct { const char *key, *what; } drop[] = {
                { "Volumes", "VOLUME" },         { "Healthcheck", "HEALTHCHECK" }, { "ExposedPorts", "EXPOSE" },
                { "StopSignal", "STOPSIGNAL" }, { "StopTimeout", "the stop timeout" }, { "OnBuild", "ONBUILD" },
        };
        bool changed = false;
        const char *const parts[] = { "config", "container_config" };
        for (size_t p = 0; p < ELEMENTSOF(parts); p++) {
                cJSON *c = cJSON_GetObjectItemCaseSensitive(img, parts[p]);
                if (!cJSON_IsObject(c))
                        continue;
                bool tell = p == 0;
                for (size_t i = 0; i < ELEMENTSOF(drop); i++) {
                        cJSON *v = cJSON_GetObjectItemCaseSensitive(c, drop[i].key);
                        if (!v)
                                continue;
                        bool empty = cJSON_IsNull(v) || ((cJSON_IsObject(v) || cJSON_IsArray(v)) && !v->child) ||
                                     (cJSON_IsString(v) && !*v->valuestring) || (cJSON_IsNumber(v) && v->valuedouble == 0);
                        if (!empty && tell) {
                                strbuf_printf(said, "%s%s", said->len ? ", " : "", drop[i].what);
                                if (cJSON_IsObject(v) && !strcmp(drop[i].key, "Volumes"))
                                        for (const cJSON *x = v->child; x; x = x->next)
                                                strbuf_printf(said, " %.200s", x->string ? x->string : "");
                        }
                        cJSON_DeleteItemFromObjectCaseSensitive(c, drop[i].key);
                        changed = changed || !empty;
                }
                cJSON *labels = cJSON_GetObjectItemCaseSensitive(c, "Labels");
                for (cJSON *l = cJSON_IsObject(labels) ? labels->child : NULL, *next; l; l = next) {
                        next = l->next;
                        if (!l->string || (strncmp(l->string, "paddock.", 8) && strncmp(l->string, "com.hashicorp.nomad.", 20)))
                                continue;
                        if (tell)
                                strbuf_printf(said, "%sLABEL %.200s", said->len ? ", " : "", l->string);
                        cJSON_Delete(cJSON_DetachItemViaPointer(labels, l));
                        changed = true;
                }
        }
        return changed;
}

static int push_image(struct build *b) {
        const struct config *cfg = b->c->cfg;
        struct registry reg = config_snapshot_registry(cfg);
        char repo[300];
        repo_of(cfg, b->acc.id, b->row.name, repo, sizeof(repo));
        _cleanup_free_ char *mtext = NULL;
        size_t mlen = 0;
        int r;
        if ((r = read_from_builder(b, IMG_DIR "/manifest.json", 64 * 1024, -1, &mtext, &mlen, NULL)) < 0)
                return r;
        /* What the tenant's sandbox wrote: proto-json, bounded, every path checked, never followed */
        _cleanup_(pj_saved_manifest_done) struct pj_saved_manifest sm = { 0 };
        struct err pe = { 0 };
        if (pj_saved_manifest_parse(mtext, mlen, &sm, &pe) < 0)
                return snprintf(b->why, sizeof(b->why), "docker save wrote no image we can read: %s", pe.message), -EIO;
        const char *config_path = sm.config;
        int n_layers = (int) sm.n_layers;

        /* The image's config: the registry and the nodes check it against the layers. */
        _cleanup_free_ char *ctext = NULL;
        size_t clen = 0;
        char cpath[256], chex[65], cdigest[72];
        snprintf(cpath, sizeof(cpath), IMG_DIR "/%s", config_path);
        if ((r = read_from_builder(b, cpath, 1 << 20, -1, &ctext, &clen, chex)) < 0)
                return r;
        _cleanup_(cJSON_Deletep) cJSON *cj = cJSON_ParseWithLength(ctext, clen);
        const cJSON *diff = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cj, "rootfs"), "diff_ids");
        if (!cJSON_IsArray(diff) || cJSON_GetArraySize(diff) != n_layers)
                return snprintf(b->why, sizeof(b->why), "the image's config does not match its layers"), -EIO;
        /* Normalised: what the host would act on goes (the layers, which the config's diff_ids
         * name, stay as they are); the registry stores the config we hash here. */
        _cleanup_(strbuf_done) struct strbuf said = STRBUF_INIT(0);
        if (config_normalise(cj, &said)) {
                free(ctext);
                ctext = xnonnull(cJSON_PrintUnformatted(cj));
                clen = strlen(ctext);
                sha256_hex(ctext, clen, chex);
                if (said.len) {
                        _cleanup_free_ char *line = xasprintf("paddock: not kept in the template's image (the host would act on "
                                                              "it, outside the sandbox): %s\n", said.buf);
                        log_append(&b->log, line, strlen(line));
                }
        }

        _cleanup_(cJSON_Deletep) cJSON *man = cJSON_CreateObject();
        cJSON_AddNumberToObject(man, "schemaVersion", 2);
        json_add_str(man, "mediaType", "application/vnd.docker.distribution.manifest.v2+json");
        cJSON *mc = cJSON_AddObjectToObject(man, "config");
        json_add_str(mc, "mediaType", "application/vnd.docker.container.image.v1+json");
        cJSON_AddNumberToObject(mc, "size", (double) clen);
        snprintf(cdigest, sizeof(cdigest), "sha256:%s", chex);
        json_add_str(mc, "digest", cdigest);
        cJSON *ml = cJSON_AddArrayToObject(man, "layers");
        size_t total = clen;
        int i = 0;
        for (size_t li = 0; li < sm.n_layers; li++) {
                /* Compressed in the sandbox (its CPU, not ours), then read back and hashed here. */
                char lpath[256], gz[264], digest[72];
                snprintf(lpath, sizeof(lpath), IMG_DIR "/%s", sm.layers[li]);
                snprintf(gz, sizeof(gz), "%s.gz", lpath);
                const char *const gzip[] = { "gzip", "-1", "-n", "-f", "--", lpath, NULL };
                char what[64];
                snprintf(what, sizeof(what), "compressing layer %d", i + 1);
                if ((r = run_in_builder(b, gzip, false, what)) < 0)
                        return r;
                size_t len = 0;
                if ((r = push_layer(b, &reg, repo, gz, cfg->utpl_max_image - total, digest, &len)) < 0)
                        return r;
                total += len;
                cJSON *d = cJSON_CreateObject();
                json_add_str(d, "mediaType", "application/vnd.docker.image.rootfs.diff.tar.gzip");
                cJSON_AddNumberToObject(d, "size", (double) len);
                json_add_str(d, "digest", digest);
                cJSON_AddItemToArray(ml, d);
                i++;
        }
        if (registry_blob_exists(&reg, repo, cdigest) != 1 &&
            (r = registry_blob_upload(&reg, repo, cdigest, ctext, clen, 60000)) < 0)
                return snprintf(b->why, sizeof(b->why), "pushing the image's config to the registry: %s", strerror(-r)), -EIO;
        _cleanup_free_ char *body = cJSON_PrintUnformatted(man);
        char mhex[65];
        sha256_hex(body, strlen(body), mhex);
        if ((r = registry_manifest_put(&reg, repo, b->row.id, "application/vnd.docker.distribution.manifest.v2+json", body,
                                       strlen(body))) < 0)
                return snprintf(b->why, sizeof(b->why), "pushing the manifest to the registry: %s", strerror(-r)), -EIO;
        free(b->row.image);
        b->row.image = xasprintf("%s/%s@sha256:%s", cfg->snap_registry, repo, mhex);
        b->row.size_bytes = (int64_t) total;
        return 0;
}

static int build_steps(struct build *b, struct pj_template_build *q) {
        int r;
        /* The context: its directories, then each file, then the modes asked for. */
        _cleanup_strv_free_ char **mk = xnew0(char *, q->n_files + 5);
        size_t n = 0;
        mk[n++] = xstrdup("mkdir");
        mk[n++] = xstrdup("-p");
        mk[n++] = xstrdup("--");
        mk[n++] = xstrdup(CTX_DIR);
        for (size_t i = 0; i < q->n_files; i++) {
                const char *slash = strrchr(q->files[i].path, '/');
                if (slash)
                        mk[n++] = xasprintf(CTX_DIR "/%.*s", (int) (slash - q->files[i].path), q->files[i].path);
        }
        mk[n] = NULL;
        if ((r = run_in_builder(b, (const char *const *) mk, false, "making the context's directories")) < 0)
                return r;
        if ((r = put_in_builder(b, CTX_DIR "/Dockerfile", q->dockerfile, q->dockerfile_len)) < 0)
                return r;
        for (size_t i = 0; i < q->n_files; i++) {
                char path[PJ_TEMPLATE_PATH_MAX + 64];
                snprintf(path, sizeof(path), CTX_DIR "/%s", q->files[i].path);
                if ((r = put_in_builder(b, path, q->files[i].data, q->files[i].len)) < 0)
                        return r;
                if (q->files[i].mode >= 0) {
                        char mode[8];
                        snprintf(mode, sizeof(mode), "%o", (unsigned) q->files[i].mode);
                        const char *const chmod[] = { "chmod", mode, "--", path, NULL };
                        if ((r = run_in_builder(b, chmod, false, "setting a file's mode")) < 0)
                                return r;
                }
        }
        /* The build itself, on the sandbox's network (the guide's way under gVisor). */
        const char *const build[] = { "docker", "build", "--network=host", "-t", LOCAL_TAG, CTX_DIR, NULL };
        if ((r = run_in_builder(b, build, true, "docker build")) < 0)
                return r;
        const char *const save[] = { "docker", "save", "-o", BUILD_DIR "/image.tar", LOCAL_TAG, NULL };
        const char *const mkimg[] = { "mkdir", "-p", IMG_DIR, NULL };
        const char *const untar[] = { "tar", "-C", IMG_DIR, "-xf", BUILD_DIR "/image.tar", NULL };
        const char *const rm[] = { "rm", "-f", BUILD_DIR "/image.tar", NULL };
        if ((r = run_in_builder(b, save, false, "docker save")) < 0 || (r = run_in_builder(b, mkimg, false, "mkdir")) < 0 ||
            (r = run_in_builder(b, untar, false, "unpacking the saved image")) < 0 ||
            (r = run_in_builder(b, rm, false, "rm")) < 0)
                return r;
        return push_image(b);
}

static void build_job(struct ctl *c, void *arg) {
        struct build_job *j = arg;
        struct build b = { .c = c };
        _cleanup_(pj_template_build_done) struct pj_template_build q = j->req;
        j->req = (struct pj_template_build) { 0 };
        int r;
        log_ctx_set("TEMPLATE_ID", j->id);
        if (store_utpl_get_id(c->store, j->id, &b.row) < 0) {
                atomic_fetch_sub(&builds_running, 1);
                return;
        }
        if (store_account_get(c->store, j->account_id, &b.acc) < 0) {
                snprintf(b.why, sizeof(b.why), "the account is gone");
                goto done;
        }
        b.deadline = mono_ms() + (int64_t) c->cfg->utpl_build_timeout_s * 1000;
        {
                /* The builder: a sandbox of the caller's account, as a create of theirs would be. */
                struct pj_sandbox_create in = { 0 };
                _cleanup_free_ char *nm = xasprintf("template-build-%s", b.row.name);
                in.template_name = c->cfg->utpl_builder;
                in.name = nm;
                /* The builder template's specs, within the account's plan. */
                struct plan pb;
                const struct plan *plan = config_account_plan(c->cfg, &b.acc, &pb);
                const struct template *bt = config_template(c->cfg, c->cfg->utpl_builder);
                if (plan && bt) {
                        in.has_cpu = in.has_memory = in.has_disk = true;
                        in.cpu = (int) (bt->cpu < plan->max_cpu ? bt->cpu : plan->max_cpu);
                        in.memory = (int) (bt->memory < plan->max_memory ? bt->memory : plan->max_memory);
                        in.disk = (int) (bt->disk < plan->max_disk ? bt->disk : plan->max_disk);
                }
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                struct err e = { 0 };
                if ((r = sandbox_create(c, &b.acc, &in, &sb, &e)) < 0) {
                        snprintf(b.why, sizeof(b.why), "the build sandbox could not start: %s", e.message);
                        goto done;
                }
                snprintf(b.builder, sizeof(b.builder), "%s", sb.id);
                free(b.row.builder_id);
                b.row.builder_id = xstrdup(sb.id);
                if (store_utpl_update(c->store, &b.row) < 0)
                        goto done;      /* deleted meanwhile */
        }
        log_info("template %s: building in sandbox %s", b.row.name, b.builder);
        r = build_steps(&b, &q);
        if (r == 0) {
                free(b.row.status);
                b.row.status = xstrdup("ready");
                log_info("template %s ready: %s (%lld bytes)", b.row.name, b.row.image, (long long) b.row.size_bytes);
        }
done:
        if (b.builder[0]) {
                struct err e = { 0 };
                if (sandbox_destroy(c, b.builder, "template build done", &e) < 0)
                        log_warning("template %s: destroying build sandbox %s: %s", b.row.name, b.builder, e.message);
        }
        if (strcmp(b.row.status, "ready")) {
                free(b.row.status);
                b.row.status = xstrdup("failed");
                free(b.row.error);
                b.row.error = xstrdup(b.why[0] ? b.why : "the build failed");
                log_warning("template %s failed: %s", b.row.name, b.row.error);
        }
        free(b.row.log);
        b.row.log = xstrdup(b.log.buf ? b.log.buf : "");
        b.row.finished_at = now_ms();
        if (store_utpl_update(c->store, &b.row) == -ENOENT && b.row.image)
                (void) drop_manifest(c->cfg, &b.row);   /* deleted while it was being pushed */
        atomic_fetch_sub(&builds_running, 1);
        user_template_clear(&b.row);
        account_clear(&b.acc);
        strbuf_done(&b.log);
        ctl_notify_status(c);
}

/* ---- what the edge asks ---- */

static bool registry_configured(const struct config *cfg) {
        return cfg->snap_registry && *cfg->snap_registry;
}

int utpl_build_start(struct ctl *c, const struct account *acc, const char *body, size_t len, struct user_template *ret,
                     struct err *e) {
        const struct config *cfg = c->cfg;
        char msg[512] = "";
        if (!registry_configured(cfg) || !config_template(cfg, cfg->utpl_builder))
                return err_set(e, -EOPNOTSUPP,
                               "Building templates needs a registry ([snapshots] registry) and the builder "
                               "template '%s' ([templates] builder) on this server",
                               cfg->utpl_builder);
        _cleanup_(pj_template_build_done) struct pj_template_build q = { 0 };
        int k = build_req_parse(cfg, body, len, &q, msg, sizeof(msg));
        if (k < 0)   /* the body's fault; a server template's name (-EEXIST there) is a 400, not a clash */
                return err_set(e, k == -EEXIST ? -EINVAL : k, "%s", msg);
        if (atomic_fetch_add(&builds_running, 1) >= cfg->utpl_max_builds) {
                atomic_fetch_sub(&builds_running, 1);
                return err_set(e, -EUSERS,
                               "%lld template builds are running on this server, its most ([templates] "
                               "max_builds); try again in a minute",
                               (long long) cfg->utpl_max_builds);
        }
        _cleanup_(user_template_clear) struct user_template t = { 0 };
        hexid_new(t.id);
        snprintf(t.account_id, sizeof(t.account_id), "%s", acc->id);
        t.name = xstrdup(q.name);
        t.status = xstrdup("building");
        t.created_at = now_ms();
        k = store_utpl_insert_capped(c->store, &t, cfg->utpl_max_per_account);
        if (k < 0)
                atomic_fetch_sub(&builds_running, 1);
        if (k == -EEXIST)
                return err_set(e, -EEXIST, "name: you have a template named '%s'; DELETE /templates/%s first", q.name, q.name);
        if (k == -EDQUOT)
                return err_set(e, -EDQUOT,
                               "You have %lld templates, the most this server allows ([templates] "
                               "max_per_account); delete one first",
                               (long long) cfg->utpl_max_per_account);
        if (k < 0)
                return err_set(e, -EIO, "Failed to record the template");
        struct build_job *j = xnew0(struct build_job, 1);
        snprintf(j->id, sizeof(j->id), "%s", t.id);
        snprintf(j->account_id, sizeof(j->account_id), "%s", t.account_id);
        j->req = q;
        q = (struct pj_template_build) { 0 };
        struct pj_template_build owned = j->req;        /* ctl_spawn_job frees j alone when it fails */
        if (ctl_spawn_job(c, build_job, j) < 0) {
                pj_template_build_done(&owned);
                atomic_fetch_sub(&builds_running, 1);
                (void) store_utpl_delete(c->store, t.id);
                return err_set(e, -EAGAIN, "controld is stopping; try again");
        }
        *ret = t;
        t = (struct user_template) { 0 };
        return 0;
}

int utpl_delete_named(struct ctl *c, const char *account_id, const char *name, struct err *e) {
        _cleanup_(user_template_clear) struct user_template t = { 0 };
        if (!template_name_ok(name) || store_utpl_get(c->store, account_id, name, &t) < 0)
                return err_set(e, -ENOENT, "Template not found");
        /* The row first: a build in flight sees it gone at its next step and stops. */
        if (store_utpl_delete(c->store, t.id) < 0)
                return err_set(e, -ENOENT, "Template not found");
        if (t.image) {
                int k = drop_manifest(c->cfg, &t);
                if (k < 0)
                        log_warning("template %s: the registry kept its image %s: %s", t.name, t.image, strerror(-k));
                if (c->drv->ops->image_remove)
                        (void) c->drv->ops->image_remove(c->drv, t.image);
        }
        log_info("template %s deleted", t.name);
        return 0;
}

/* ---- the start ---- */

void utpl_recover(struct ctl *c) {
        _cleanup_strv_free_ char **ids = NULL;
        if (store_utpl_interrupted(c->store, now_ms(), &ids) < 0)
                return;
        for (char **p = ids; p && *p; p++) {
                struct err e = { 0 };
                log_info("template build interrupted by a restart: destroying its sandbox %s", *p);
                (void) sandbox_destroy(c, *p, "template build interrupted", &e);
        }
}
