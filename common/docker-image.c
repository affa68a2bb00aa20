/* docker-image.c — Docker Engine API calls on images: inspect, volumes, remove, commit,
 * push and pull (with the progress stream), list and size (docker.h; the request helper and
 * shared checks are docker.c's). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "docker.h"
#include "docker-private.h"
#include "httpc.h"
#include "log.h"
#include "strutil.h"

static bool valid_tag(const char *s) {
        return docker_valid_name(s) && strlen(s) <= 128;
}

/* GET /images/<ref>/json into resp: 0 or -errno (-EINVAL: ref is not valid). */
static int image_inspect(struct docker *d, const char *ref, struct docker_resp *resp) {
        if (!docker_valid_ref(ref))
                return -EINVAL;
        return dcall_path(d, "GET", 0, resp, "/images/%s/json", ref);
}

int docker_image_exists(struct docker *d, const char *ref) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        int r = image_inspect(d, ref, &resp);
        if (r == -ENOENT) {
                docker_clear_error();
                return 0;
        }
        return r < 0 ? r : 1;
}

/* path cleaned as Go's filepath.Clean does for an absolute path, into out (size n). */
static int clean_abs_path(const char *path, char *out, size_t n) {
        size_t len = strlen(path), k = 0;
        if (path[0] != '/' || len >= n || len > DOCKER_IMAGE_VOLUME_PATH_MAX)
                return -EINVAL;
        for (const char *p = path; *p; p++)
                if ((unsigned char) *p < 0x20 || *p == 0x7f)
                        return -EINVAL;
        out[0] = 0;
        for (const char *c = path; *c;) {
                while (*c == '/')
                        c++;
                const char *e = strchrnul(c, '/');
                size_t cl = (size_t) (e - c);
                if (cl == 0 || (cl == 1 && c[0] == '.'))
                        ;
                else if (cl == 2 && c[0] == '.' && c[1] == '.') {
                        while (k > 0 && out[k - 1] != '/')
                                k--;
                        if (k > 0)
                                k--;    /* the '/' before the component */
                } else {
                        out[k++] = '/';
                        memcpy(out + k, c, cl);
                        k += cl;
                }
                out[k] = 0;
                c = e;
        }
        return k == 0 ? -EINVAL : 0;    /* "/" itself: nothing may be mounted over the root */
}

static int strcmp_p(const void *a, const void *b) { return strcmp(*(char *const *) a, *(char *const *) b); }

int docker_config_volumes(const cJSON *config, char ***ret) {
        const cJSON *vols = cJSON_IsObject(config) ? cJSON_GetObjectItemCaseSensitive(config, "Volumes") : NULL, *v;
        size_t n = 0, cap = (size_t) (cJSON_IsObject(vols) ? cJSON_GetArraySize(vols) : 0);
        if (cap > DOCKER_IMAGE_VOLUMES_MAX)
                return -E2BIG;
        _cleanup_strv_free_ char **out = xnew0(char *, cap + 1);
        if (cap)
                cJSON_ArrayForEach(v, vols) {
                        char clean[DOCKER_IMAGE_VOLUME_PATH_MAX + 2];
                        if (!v->string || clean_abs_path(v->string, clean, sizeof(clean)) < 0)
                                return -EDOM;
                        out[n++] = xstrdup(clean);
                }
        qsort(out, n, sizeof(*out), strcmp_p);
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
                if (k && !strcmp(out[k - 1], out[i]))
                        free(out[i]);
                else
                        out[k++] = out[i];
        out[k] = NULL;
        *ret = TAKE_PTR(out);
        return 0;
}

int docker_image_volumes(struct docker *d, const char *ref, char ***ret) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        int r = image_inspect(d, ref, &resp);
        if (r < 0)
                return r;
        return docker_config_volumes(cJSON_GetObjectItemCaseSensitive(resp.json, "Config"), ret);
}

int docker_image_remove(struct docker *d, const char *ref, bool force) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "DELETE", TIMEOUT_REMOVE_MS, &resp, "/images/%s?force=%d&noprune=0", ref, force);
        return r == -EEXIST ? -EBUSY : r;
}

int docker_commit(struct docker *d, const char *container, const char *repo, const char *tag, char **ret_image_id) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_json_ cJSON *b = cJSON_CreateObject();
        const char *t = tag ? tag : "latest";
        if (!docker_valid_name(container) || !docker_valid_ref(repo) || strchr(repo, '@') || !valid_tag(t))
                return -EINVAL;
        _cleanup_free_ char *ec = httpc_escape(container), *er = httpc_escape(repo), *et = httpc_escape(t);
        _cleanup_free_ char *path = xasprintf("/commit?container=%s&repo=%s&tag=%s&pause=1", ec, er, et);
        int r = docker_call(d, "POST", path, b, TIMEOUT_COMMIT_MS, &resp);
        if (r < 0)
                return r;
        return docker_answer_id(&resp, "commit", ret_image_id);
}

/* ---- push ------------------------------------------------------------------------ */

struct push_ctx {
        struct strbuf line;     /* current line; truncated = too long, dropped up to its newline */
        bool failed;
        char error[ERRMSG_MAX];
        char *digest;
        int64_t size;
        bool have_aux;
};

static void push_ctx_done(struct push_ctx *c) {
        strbuf_done(&c->line);
        free(c->digest);
        c->digest = NULL;
}

/* Reads the complete line held in c->line, then empties it. */
static void push_line(struct push_ctx *c) {
        _cleanup_json_ cJSON *j = NULL;
        if (c->line.len > 0 && !c->line.truncated)
                j = cJSON_ParseWithLength(c->line.buf, c->line.len);
        strbuf_reset(&c->line);
        if (!cJSON_IsObject(j))
                return;
        const cJSON *ed = cJSON_GetObjectItemCaseSensitive(j, "errorDetail");
        const char *msg = docker_json_str(ed, "message");
        if (!msg)
                msg = docker_json_str(j, "error");
        if (ed || msg) {
                if (!c->failed)   /* keep the first error: later ones are usually consequences */
                        docker_copy_str(c->error, sizeof(c->error), msg ? msg : "push failed");
                c->failed = true;
                return;
        }
        const cJSON *aux = cJSON_GetObjectItemCaseSensitive(j, "aux");
        const char *dg = docker_json_str(aux, "Digest");
        if (dg) {
                free(c->digest);
                c->digest = xstrdup(dg);
                c->size = (int64_t) docker_json_num(aux, "Size");
                c->have_aux = true;
                return;
        }
        /* a plain {"message": ...} is the body of an HTTP error */
        msg = docker_json_str(j, "message");
        if (msg && !c->error[0])
                docker_copy_str(c->error, sizeof(c->error), msg);
}

static int push_on_data(const void *data, size_t len, void *ud) {
        struct push_ctx *c = ud;
        const char *p = data, *end = p + len;
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t) (end - p));
                (void) strbuf_append(&c->line, p, (size_t) ((nl ? nl : end) - p));
                if (!nl)
                        break;
                push_line(c);
                p = nl + 1;
        }
        return 0;
}

static bool valid_b64(const char *s) {
        if (!*s || strlen(s) > 8192)
                return false;
        for (; *s; s++)
                if (!ascii_alnum(*s) && !strchr("+/=-_", *s))
                        return false;
        return true;
}

/* POSTs the push (or pull) of name:tag with X-Registry-Auth (registry_auth_b64, "e30="
 * = {} when NULL) and reads the whole JSON-lines progress stream into c. The HTTP
 * status; -EINVAL for an invalid name (or a digest), tag or auth; < 0 from the transport. */
static long image_stream(struct docker *d, bool push, const char *name, const char *tag, const char *registry_auth_b64,
                         struct push_ctx *c) {
        const char *auth = registry_auth_b64 ? registry_auth_b64 : "e30=";
        if (!docker_valid_ref(name) || strchr(name, '@') || !(valid_tag(tag) || (!push && docker_valid_digest(tag))) || !valid_b64(auth))
                return -EINVAL;
        _cleanup_free_ char *en = httpc_escape(name), *et = httpc_escape(tag);
        _cleanup_free_ char *url =
                push ? xasprintf("http://localhost" DOCKER_API_PREFIX "/images/%s/push?tag=%s", en, et)
                     : xasprintf("http://localhost" DOCKER_API_PREFIX "/images/create?fromImage=%s&tag=%s", en, et);
        _cleanup_free_ char *hdr = xasprintf("X-Registry-Auth: %s", auth);
        const char *hdrs[] = { hdr, NULL };
        struct httpc_resp resp = {};
        struct httpc_req req = {
                .method = "POST",
                .url = url,
                .unix_socket = d->socket,
                .headers = hdrs,
                .timeout_ms = TIMEOUT_PUSH_MS,
                .on_data = push_on_data,
                .userdata = c,
        };
        int r = httpc_do(&req, &resp);
        if (r < 0)
                return docker_transport_error(d, r);
        push_line(c);   /* last line without newline */
        long status = resp.status;
        httpc_resp_done(&resp);
        return status;
}

int docker_image_push(struct docker *d, const char *name, const char *tag, const char *registry_auth_b64,
                      char **ret_digest, int64_t *ret_size) {
        const char *t = tag ? tag : "latest";
        _cleanup_(push_ctx_done) struct push_ctx c = { .line = STRBUF_INIT(PUSH_LINE_MAX) };
        long status = image_stream(d, true, name, t, registry_auth_b64, &c);
        if (status < 0)
                return (int) status;

        if (status >= 400) {
                if (c.error[0])
                        docker_set_error_n(c.error, strlen(c.error));
                else
                        docker_set_error("push failed with HTTP %ld", status);
                return docker_map_status(status);
        }
        if (c.failed || !c.have_aux) {
                if (c.failed)
                        docker_set_error_n(c.error, strlen(c.error));
                else
                        docker_set_error("push of %s:%s ended without a digest", name, t);
                return -EIO;
        }
        docker_clear_error();
        if (ret_size)
                *ret_size = c.size;
        if (ret_digest)
                *ret_digest = TAKE_PTR(c.digest);
        return 0;
}

int docker_image_pull(struct docker *d, const char *name, const char *tag, const char *registry_auth_b64) {
        const char *t = tag ? tag : "latest";
        _cleanup_(push_ctx_done) struct push_ctx c = { .line = STRBUF_INIT(PUSH_LINE_MAX) };
        if (docker_remote_get()) {
                if (!docker_valid_ref(name) || strchr(name, '@') || !(valid_tag(t) || docker_valid_digest(t)))
                        return -EINVAL;
                return docker_remote_get()->pull(name, t);
        }
        long status = image_stream(d, false, name, t, registry_auth_b64, &c);
        if (status < 0)
                return (int) status;
        if (status >= 400 || c.failed) {
                if (c.error[0])
                        docker_set_error_n(c.error, strlen(c.error));
                else
                        docker_set_error("pull failed with HTTP %ld", status);
                return status >= 400 ? docker_map_status(status) : -EIO;
        }
        /* The stream can end without an error line and still leave nothing behind. */
        _cleanup_free_ char *ref = xasprintf("%s%c%s", name, docker_valid_digest(t) ? '@' : ':', t);
        int r = docker_image_exists(d, ref);
        if (r == 0) {
                docker_set_error("pull of %s ended without the image", ref);
                return -EIO;
        }
        return r < 0 ? r : 0;
}

int docker_image_list(struct docker *d, const char *reference, char ***ret_refs) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!reference || !*reference || !ret_refs)
                return -EINVAL;
        int r = docker_filtered_list(d, "/images/json?", "reference", reference, "image list", &resp);
        if (r < 0)
                return r;
        char **v = xnew0(char *, 1);
        size_t k = 0;
        const cJSON *img, *tag;
        cJSON_ArrayForEach(img, resp.json) {
                cJSON_ArrayForEach(tag, cJSON_GetObjectItemCaseSensitive(img, "RepoTags")) {
                        if (!cJSON_IsString(tag) || !strcmp(tag->valuestring, "<none>:<none>"))
                                continue;
                        v = xrealloc(v, (k + 2) * sizeof(char *));
                        v[k++] = xstrdup(tag->valuestring);
                        v[k] = NULL;
                }
        }
        *ret_refs = v;
        return 0;
}

int docker_image_size(struct docker *d, const char *ref, int64_t *ret_size) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        int r = image_inspect(d, ref, &resp);
        if (r < 0)
                return r;
        if (ret_size)
                *ret_size = (int64_t) docker_json_num(resp.json, "Size");
        return 0;
}
