/* registry.c — Docker Registry HTTP API v2: manifest lookup and delete (contract in registry.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "cleanup.h"
#include "httpc.h"
#include "log.h"
#include "docker.h"
#include "registry.h"
#include "strutil.h"

#define REGISTRY_TIMEOUT_MS 30000L
#define MANIFEST_ACCEPT "Accept: application/vnd.docker.distribution.manifest.v2+json"

static const struct registry_remote *remote;

void registry_set_remote(const struct registry_remote *rem) {
        remote = rem;
}

char *registry_auth_header_value(const struct registry *r) {
        if (!r->username || !*r->username)
                return xstrdup("e30=");
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "username", r->username);
        cJSON_AddStringToObject(o, "password", r->password ? r->password : "");
        cJSON_AddStringToObject(o, "serveraddress", r->host);
        _cleanup_free_ char *text = xnonnull(cJSON_PrintUnformatted(o));
        char *b = base64_encode(text, strlen(text), NULL);
        /* Docker decodes this header as URL-safe base64. */
        for (char *p = b; *p; p++)
                *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
        return b;
}

static char *base_url(const struct registry *r) {
        if (startswith(r->host, "http://") || startswith(r->host, "https://"))
                return xstrdup(r->host);
        return xasprintf("http://%s", r->host);
}

static bool path_ok(const char *s) {
        if (!s || !*s || strlen(s) > 255)
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr("._-/:", *s)))
                        return false;
        return true;
}

static int call_url(const struct registry *r, const char *method, const char *url, const char *header, const char *ctype,
                    const void *body, size_t len, long timeout_ms, struct httpc_resp *ret);

/* A manifest call: repo's manifest ref (a tag or a digest). */
static int call(const struct registry *r, const char *method, const char *repo, const char *ref,
                struct httpc_resp *ret) {
        if (!path_ok(repo) || !path_ok(ref) || strchr(ref, '/'))
                return -EINVAL;
        _cleanup_free_ char *base = base_url(r);
        _cleanup_free_ char *url = xasprintf("%s/v2/%s/manifests/%s", base, repo, ref);
        return call_url(r, method, url, MANIFEST_ACCEPT, NULL, NULL, 0, 0, ret);
}

static int map_status(long s) {
        if (s >= 200 && s < 300)
                return 0;
        if (s == 404)
                return -ENOENT;
        if (s == 401 || s == 403)
                return -EACCES;
        if (s == 405)
                return -EOPNOTSUPP;
        return -EIO;
}

int registry_manifest_digest(const struct registry *r, const char *repo, const char *tag, char **ret_digest,
                             int64_t *ret_size) {
        if (remote)
                return remote->manifest_digest(repo, tag, ret_digest, ret_size);
        struct httpc_resp resp = { 0 };
        int k = call(r, "GET", repo, tag, &resp);
        if (k < 0)
                return k;
        k = map_status(resp.status);
        if (k == 0) {
                /* The digest of a manifest is the SHA-256 of its bytes as served. */
                char hex[65];
                sha256_hex(resp.body, resp.body_len, hex);
                if (ret_size) {
                        _cleanup_(cJSON_Deletep) cJSON *m = cJSON_ParseWithLength(resp.body, resp.body_len);
                        const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(m, "config"), *l;
                        const cJSON *sz = cJSON_GetObjectItemCaseSensitive(cfg, "size");
                        double total = cJSON_IsNumber(sz) ? sz->valuedouble : 0;
                        cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(m, "layers")) {
                                sz = cJSON_GetObjectItemCaseSensitive(l, "size");
                                total += cJSON_IsNumber(sz) ? sz->valuedouble : 0;
                        }
                        *ret_size = (int64_t) total;
                }
                if (ret_digest)
                        *ret_digest = xasprintf("sha256:%s", hex);
        }
        httpc_resp_done(&resp);
        return k;
}

int registry_image_config(const struct registry *r, const char *repo, const char *ref, cJSON **ret) {
        if (remote)
                return remote->image_config(repo, ref, ret);
        struct httpc_resp resp = { 0 };
        int k = call(r, "GET", repo, ref, &resp);
        if (k < 0)
                return k;
        if ((k = map_status(resp.status)) < 0) {
                httpc_resp_done(&resp);
                return k;
        }
        _cleanup_(cJSON_Deletep) cJSON *m = cJSON_ParseWithLength(resp.body, resp.body_len);
        httpc_resp_done(&resp);
        const char *digest = cJSON_GetStringValue(
                cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(m, "config"), "digest"));
        if (!digest || !docker_valid_digest(digest))
                return -EBADMSG;        /* not a schema-2 image manifest */
        _cleanup_free_ char *base = base_url(r);
        _cleanup_free_ char *url = xasprintf("%s/v2/%s/blobs/%s", base, repo, digest);
        if ((k = call_url(r, "GET", url, NULL, NULL, NULL, 0, 0, &resp)) < 0)
                return k;
        if ((k = map_status(resp.status)) < 0) {
                httpc_resp_done(&resp);
                return k;
        }
        char hex[65];
        sha256_hex(resp.body, resp.body_len, hex);
        cJSON *c = strcmp(hex, digest + 7) ? NULL : cJSON_ParseWithLength(resp.body, resp.body_len);
        httpc_resp_done(&resp);
        if (!cJSON_IsObject(c)) {
                cJSON_Delete(c);
                return -EBADMSG;
        }
        *ret = c;
        return 0;
}

int registry_manifest_delete(const struct registry *r, const char *repo, const char *digest) {
        if (remote)
                return remote->manifest_delete(repo, digest);
        struct httpc_resp resp = { 0 };
        if (!digest || !startswith(digest, "sha256:"))
                return -EINVAL;
        int k = call(r, "DELETE", repo, digest, &resp);
        if (k < 0)
                return k;
        k = map_status(resp.status);
        httpc_resp_done(&resp);
        return k == -ENOENT ? 0 : k;
}

/* A request to url with the registry's credentials (and one more header, or NULL). */
static int call_url(const struct registry *r, const char *method, const char *url, const char *header, const char *ctype,
                    const void *body, size_t len, long timeout_ms, struct httpc_resp *ret) {
        _cleanup_free_ char *auth = NULL;
        const char *hdrs[3] = { NULL, NULL, NULL };
        size_t n = 0;
        if (header)
                hdrs[n++] = header;
        if (r->username && *r->username) {
                _cleanup_free_ char *up = xasprintf("%s:%s", r->username, r->password ? r->password : "");
                _cleanup_free_ char *b = base64_encode(up, strlen(up), NULL);
                auth = xasprintf("Authorization: Basic %s", b);
                hdrs[n++] = auth;
        }
        struct httpc_req req = {
                .method = method,
                .url = url,
                .headers = hdrs,
                .body = body,
                .body_len = len,
                .content_type = body ? ctype : NULL,
                .timeout_ms = timeout_ms > 0 ? timeout_ms : REGISTRY_TIMEOUT_MS,
                .max_response = 4 << 20,
        };
        int k = httpc_do(&req, ret);
        if (k < 0)
                log_debug("registry: %s %s: %s", method, url, strerror(-k));
        return k;
}

int registry_blob_exists(const struct registry *r, const char *repo, const char *digest) {
        if (remote)
                return remote->blob_exists(repo, digest);
        if (!path_ok(repo) || !docker_valid_digest(digest))
                return -EINVAL;
        _cleanup_free_ char *base = base_url(r);
        _cleanup_free_ char *url = xasprintf("%s/v2/%s/blobs/%s", base, repo, digest);
        struct httpc_resp resp = { 0 };
        int k = call_url(r, "HEAD", url, NULL, NULL, NULL, 0, 0, &resp);
        if (k < 0)
                return k;
        k = resp.status == 200 ? 1 : resp.status == 404 ? 0 : map_status(resp.status);
        httpc_resp_done(&resp);
        return k;
}

int registry_blob_upload(const struct registry *r, const char *repo, const char *digest, const void *data, size_t len,
                         long timeout_ms) {
        if (remote)
                return remote->blob_upload(repo, digest, data, len, timeout_ms);
        if (!path_ok(repo) || !docker_valid_digest(digest))
                return -EINVAL;
        _cleanup_free_ char *base = base_url(r);
        _cleanup_free_ char *url = xasprintf("%s/v2/%s/blobs/uploads/", base, repo);
        struct httpc_resp resp = { 0 };
        int k = call_url(r, "POST", url, NULL, NULL, NULL, 0, 0, &resp);
        if (k < 0)
                return k;
        if (resp.status != 202 || !resp.location || !*resp.location) {
                log_debug("registry: upload of %s to %s: status %ld, no session", digest, repo, resp.status);
                k = resp.status == 202 ? -EIO : map_status(resp.status) ?: -EIO;
                httpc_resp_done(&resp);
                return k;
        }
        /* The session's URL: absolute, or a path on the registry. */
        const char *loc = resp.location;
        _cleanup_free_ char *put = xasprintf("%s%s%sdigest=%s", startswith(loc, "http://") || startswith(loc, "https://") ? "" : base,
                                             loc, strchr(loc, '?') ? "&" : "?", digest);
        httpc_resp_done(&resp);
        k = call_url(r, "PUT", put, NULL, "application/octet-stream", data ? data : "", len, timeout_ms, &resp);
        if (k < 0)
                return k;
        k = resp.status == 201 ? 0 : map_status(resp.status) ?: -EIO;
        if (k < 0)
                log_debug("registry: PUT of blob %s: status %ld %.200s", digest, resp.status, resp.body);
        httpc_resp_done(&resp);
        return k;
}

int registry_manifest_put(const struct registry *r, const char *repo, const char *tag, const char *media_type,
                          const void *body, size_t len) {
        if (remote)
                return remote->manifest_put(repo, tag, media_type, body, len);
        if (!path_ok(repo) || !path_ok(tag) || strchr(tag, '/') || !media_type)
                return -EINVAL;
        _cleanup_free_ char *base = base_url(r);
        _cleanup_free_ char *url = xasprintf("%s/v2/%s/manifests/%s", base, repo, tag);
        struct httpc_resp resp = { 0 };
        int k = call_url(r, "PUT", url, NULL, media_type, body, len, 0, &resp);
        if (k < 0)
                return k;
        k = resp.status == 201 ? 0 : map_status(resp.status) ?: -EIO;
        if (k < 0)
                log_debug("registry: PUT of manifest %s:%s: status %ld %.300s", repo, tag, resp.status, resp.body);
        httpc_resp_done(&resp);
        return k;
}
