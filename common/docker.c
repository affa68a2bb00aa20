/* docker.c — Docker Engine API 1.41 client over libcurl: the client, its last error, input
 * validation, the request helper every call goes through, and the daemon's own calls (ping,
 * version, info). The calls by API area: docker-container.c (containers, volumes, networks,
 * stats), docker-image.c (images, commit, push and pull); the exec transport (the hijacked
 * raw AF_UNIX stream and its demux) is docker-exec.c. What they share is docker-private.h. */#include <errno.h>
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



static __thread char last_error[ERRMSG_MAX];

const char *docker_last_error(void) {
        return last_error;
}

void docker_clear_error(void) {
        last_error[0] = 0;
}

/* Copies at most ERRMSG_MAX-1 bytes of s (len bytes), control characters to spaces,
 * trailing whitespace trimmed: the message ends up in logs and API responses. */
void docker_set_error_n(const char *s, size_t len) {
        size_t n = len < ERRMSG_MAX - 1 ? len : ERRMSG_MAX - 1;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                last_error[i] = (c < 0x20 || c == 0x7f) ? ' ' : (char) c;
        }
        while (n > 0 && last_error[n - 1] == ' ')
                n--;
        last_error[n] = 0;
}

_printf_(1, 2) void docker_set_error(const char *fmt, ...) {
        char buf[ERRMSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        docker_set_error_n(buf, n < 0 ? 0 : strnlen(buf, sizeof(buf)));
}

/* Docker's message from an error body: {"message": "..."} or the raw text. */
void docker_set_error_from_body(long status, const char *body, size_t len) {
        _cleanup_json_ cJSON *j = len > 0 ? cJSON_ParseWithLength(body, len) : NULL;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
        if (cJSON_IsString(m))
                docker_set_error_n(m->valuestring, strlen(m->valuestring));
        else if (len > 0)
                docker_set_error_n(body, len);
        else
                docker_set_error("Docker returned HTTP %ld", status);
}

int docker_map_status(long status) {
        if (status < 400)
                return 0;
        switch (status) {
        case 400:
                return -EINVAL;
        case 401:
        case 403:
                return -EACCES;
        case 404:
                return -ENOENT;
        case 409:
                return -EEXIST;
        default:
                return -EIO;
        }
}

int docker_new(const char *socket_path, struct docker **ret) {
        const char *p = socket_path ? socket_path : DOCKER_SOCKET_DEFAULT;
        if (!ret || !*p || strlen(p) >= sizeof(((struct sockaddr_un *) NULL)->sun_path))
                return -EINVAL;
        struct docker *d = xnew0(struct docker, 1);
        d->socket = xstrdup(p);
        *ret = d;
        return 0;
}

struct docker *docker_free(struct docker *d) {
        if (d) {
                free_many(d->socket, d);
        }
        return NULL;
}

/* ---- validation ---------------------------------------------------------------- */

/* Container/volume/network names and ids, exec ids: [A-Za-z0-9][A-Za-z0-9_.-]*. */
bool docker_valid_name(const char *s) {
        if (!s || !*s || strlen(s) > 255)
                return false;
        for (const char *c = s; *c; c++) {
                if (!ascii_alnum(*c) && (c == s || !strchr("_.-", *c)))
                        return false;
        }
        return true;
}

/* Image references: registry/repo:tag@digest characters, no empty or dot-leading path
 * segment (which libcurl or Docker's router would normalise into another endpoint). */
bool docker_valid_ref(const char *s) {
        if (!s || !*s || strlen(s) > 512)
                return false;
        for (const char *c = s; *c; c++) {
                if (!ascii_alnum(*c) && !strchr("_.-/:@", *c))
                        return false;
                if ((c == s || c[-1] == '/') && (*c == '.' || *c == '/'))
                        return false;
        }
        return s[strlen(s) - 1] != '/';
}

bool docker_valid_digest(const char *s) {
        if (!s || strncmp(s, "sha256:", 7) != 0 || strlen(s) != 7 + 64)
                return false;
        for (s += 7; *s; s++)
                if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
                        return false;
        return true;
}

/* ---- request core ------------------------------------------------------------- */



void docker_resp_done(struct docker_resp *r) {
        cJSON_Delete(r->json);
        r->json = NULL;
}

int docker_transport_error(struct docker *d, int r) {
        docker_set_error("cannot talk to Docker at %s: %s", d->socket, strerror(-r));
        return r;
}

static const struct docker_remote *remote;

void docker_set_remote(const struct docker_remote *rem) {
        remote = rem;
}

const struct docker_remote *docker_remote_get(void) {
        return remote;
}

void docker_set_last_error(const char *msg) {
        docker_set_error_n(msg, strlen(msg));
}

int docker_call_raw(struct docker *d, const char *method, const char *path, const char *body, size_t body_len,
                    long timeout_ms, long *ret_status, char **ret_body, size_t *ret_len) {
        _cleanup_free_ char *url = xasprintf("http://localhost" DOCKER_API_PREFIX "%s", path);
        struct httpc_resp resp = {};
        struct httpc_req req = {
                .method = method,
                .url = url,
                .unix_socket = d->socket,
                .body = body,
                .body_len = body_len,
                .content_type = body ? "application/json" : NULL,
                .timeout_ms = timeout_ms > 0 ? timeout_ms : TIMEOUT_DEFAULT_MS,
        };
        int r = httpc_do(&req, &resp);
        if (r < 0)
                return docker_transport_error(d, r);
        *ret_status = resp.status;
        *ret_len = resp.body_len;
        *ret_body = TAKE_PTR(resp.body);
        httpc_resp_done(&resp);
        return 0;
}

/* One API call. body (may be NULL) is sent as JSON. On a transport failure returns
 * -errno. Otherwise ret->status is set, ret->json holds the parsed body (if any), and
 * the return value is docker_map_status(status) with docker_last_error() set for >= 400. */
int docker_call(struct docker *d, const char *method, const char *path, const cJSON *body,
                 long timeout_ms, struct docker_resp *ret) {
        _cleanup_free_ char *text = body ? xnonnull(cJSON_PrintUnformatted(body)) : NULL;
        _cleanup_free_ char *rbody = NULL;
        size_t rlen = 0;
        long status = 0;
        int r;

        *ret = (struct docker_resp) {};
        docker_clear_error();
        if (remote)
                r = remote->call(method, path, text, text ? strlen(text) : 0, timeout_ms > 0 ? timeout_ms : TIMEOUT_DEFAULT_MS,
                                 &status, &rbody, &rlen);
        else
                r = docker_call_raw(d, method, path, text, text ? strlen(text) : 0, timeout_ms, &status, &rbody, &rlen);
        if (r < 0) {
                log_debug("docker: %s %s: %s", method, path, strerror(-r));
                if (!last_error[0])
                        docker_transport_error(d, r);
                return r;
        }
        ret->status = status;
        if (rlen > 0)
                ret->json = cJSON_ParseWithLength(rbody, rlen);
        if (status >= 400) {
                docker_set_error_from_body(status, rbody, rlen);
                log_debug("docker: %s %s: HTTP %ld: %s", method, path, status, last_error);
        } else
                docker_clear_error();
        return docker_map_status(ret->status);
}

const char *docker_json_str(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

double docker_json_num(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

void docker_copy_str(char *dst, size_t n, const char *s) {
        snprintf(dst, n, "%s", s ? s : "");
}

cJSON *docker_strv_to_json(const char *const *v) {
        cJSON *a = cJSON_CreateArray();
        for (; v && *v; v++)
                cJSON_AddItemToArray(a, cJSON_CreateString(*v));
        return a;
}

cJSON *docker_labels_to_json(const struct docker_kv *l, size_t n) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i < n; i++)
                cJSON_AddStringToObject(o, l[i].key, l[i].value ? l[i].value : "");
        return o;
}

bool docker_labels_valid(const struct docker_kv *l, size_t n) {
        if (n > 0 && !l)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!l[i].key || !*l[i].key)
                        return false;
        return true;
}

/* ---- daemon ------------------------------------------------------------------- */

int docker_ping(struct docker *d) {
        struct docker_resp resp;
        int r = docker_call(d, "GET", "/_ping", NULL, 5000, &resp);
        docker_resp_done(&resp);
        return r;
}

int docker_version(struct docker *d, char **ret_version, char **ret_api) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        int r = docker_call(d, "GET", "/version", NULL, 0, &resp);
        if (r < 0)
                return r;
        const char *v = docker_json_str(resp.json, "Version"), *a = docker_json_str(resp.json, "ApiVersion");
        if (!v || !a) {
                docker_set_error("unexpected /version response");
                return -EBADMSG;
        }
        if (ret_version)
                *ret_version = xstrdup(v);
        if (ret_api)
                *ret_api = xstrdup(a);
        return 0;
}

/* The named runtime's object in GET /info "Runtimes" (it lives in *resp): 0 with *ret_rt,
 * -ENOENT when Docker knows no such runtime, or the call's error. */
static int runtime_entry(struct docker *d, const char *name, struct docker_resp *resp, const cJSON **ret_rt) {
        if (!name || !*name)
                return -EINVAL;
        int r = docker_call(d, "GET", "/info", NULL, 0, resp);
        if (r < 0)
                return r;
        const cJSON *rts = cJSON_GetObjectItemCaseSensitive(resp->json, "Runtimes");
        if (!cJSON_IsObject(rts)) {
                docker_set_error("unexpected /info response (no Runtimes)");
                return -EBADMSG;
        }
        *ret_rt = cJSON_GetObjectItemCaseSensitive(rts, name);
        return cJSON_IsObject(*ret_rt) ? 0 : -ENOENT;
}

int docker_runtime_path(struct docker *d, const char *name, char **ret_path) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        const cJSON *rt = NULL;
        int r = runtime_entry(d, name, &resp, &rt);
        if (r < 0)
                return r;
        const char *path = docker_json_str(rt, "path");
        if (ret_path)
                *ret_path = xstrdup(path ? path : "");
        return 0;
}

int docker_runtime_network(struct docker *d, const char *name, char **ret_mode) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        const cJSON *rt = NULL;
        int r = runtime_entry(d, name, &resp, &rt);
        if (r < 0)
                return r;
        /* runsc's own default is its netstack ("sandbox"); the last --network= wins. */
        const char *mode = "sandbox";
        const cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(rt, "runtimeArgs")) {
                const char *v = cJSON_GetStringValue(a);
                if (v && startswith(v, "--network="))
                        mode = v + strlen("--network=");
                else if (v && startswith(v, "-network="))
                        mode = v + strlen("-network=");
        }
        if (ret_mode)
                *ret_mode = xstrndup(mode, 32);
        return 0;
}

/* The string key of GET /info (with abs_path: an absolute path), xstrdup'd into *ret
 * when ret is not NULL; -EBADMSG when it is missing. */
static int info_string(struct docker *d, const char *key, bool abs_path, char **ret) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        int r = docker_call(d, "GET", "/info", NULL, 0, &resp);
        if (r < 0)
                return r;
        const char *v = docker_json_str(resp.json, key);
        if (!v || (abs_path && *v != '/')) {
                docker_set_error("unexpected /info response (no %s)", key);
                return -EBADMSG;
        }
        if (ret)
                *ret = xstrdup(v);
        return 0;
}

int docker_storage_driver(struct docker *d, char **ret_driver) {
        return info_string(d, "Driver", false, ret_driver);
}

int docker_root_dir(struct docker *d, char **ret_dir) {
        return info_string(d, "DockerRootDir", true, ret_dir);
}

/* GET path_head + filters={"key":["value"]}, whose answer must be a JSON array
 * (what names the call in the error). 0 with the array in ret->json, or < 0. */
int docker_filtered_list(struct docker *d, const char *path_head, const char *key, const char *value, const char *what,
                         struct docker_resp *ret) {
        _cleanup_json_ cJSON *f = cJSON_CreateObject();
        cJSON_AddItemToObject(f, key, docker_strv_to_json((const char *const[]) { value, NULL }));
        _cleanup_free_ char *ftext = xnonnull(cJSON_PrintUnformatted(f));
        _cleanup_free_ char *fesc = httpc_escape(ftext);
        _cleanup_free_ char *path = xasprintf("%sfilters=%s", path_head, fesc);
        int r = docker_call(d, "GET", path, NULL, 0, ret);
        if (r < 0)
                return r;
        if (!cJSON_IsArray(ret->json)) {
                docker_set_error("%s returned no array", what);
                return -EBADMSG;
        }
        return 0;
}
