/* docker.c — Docker Engine API 1.41 client (libcurl for calls, raw AF_UNIX for exec streams). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "docker.h"
#include "httpc.h"
#include "log.h"
#include "strutil.h"

#define TIMEOUT_DEFAULT_MS   30000L
#define TIMEOUT_CREATE_MS    60000L
#define TIMEOUT_REMOVE_MS    60000L
#define TIMEOUT_COMMIT_MS    (10L * 60 * 1000)
#define TIMEOUT_PUSH_MS      (30L * 60 * 1000)
#define EXEC_HEAD_MAX        (16 * 1024)
#define EXEC_ERRBODY_MAX     (64 * 1024)
#define EXEC_HEAD_TIMEOUT_MS 30000
#define EXEC_RUN_TIMEOUT_MS  60000L
#define PUSH_LINE_MAX        (64 * 1024)
#define ERRMSG_MAX           1024

struct docker {
        char *socket;
};

static __thread char last_error[ERRMSG_MAX];

const char *docker_last_error(void) {
        return last_error;
}

static void clear_error(void) {
        last_error[0] = 0;
}

/* Copies at most ERRMSG_MAX-1 bytes of s (len bytes), control characters to spaces,
 * trailing whitespace trimmed: the message ends up in logs and API responses. */
static void set_error_n(const char *s, size_t len) {
        size_t n = len < ERRMSG_MAX - 1 ? len : ERRMSG_MAX - 1;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char) s[i];
                last_error[i] = (c < 0x20 || c == 0x7f) ? ' ' : (char) c;
        }
        while (n > 0 && last_error[n - 1] == ' ')
                n--;
        last_error[n] = 0;
}

_printf_(1, 2) static void set_error(const char *fmt, ...) {
        char buf[ERRMSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        set_error_n(buf, n < 0 ? 0 : strnlen(buf, sizeof(buf)));
}

/* Docker's message from an error body: {"message": "..."} or the raw text. */
static void set_error_from_body(long status, const char *body, size_t len) {
        _cleanup_json_ cJSON *j = len > 0 ? cJSON_ParseWithLength(body, len) : NULL;
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
        if (cJSON_IsString(m))
                set_error_n(m->valuestring, strlen(m->valuestring));
        else if (len > 0)
                set_error_n(body, len);
        else
                set_error("Docker returned HTTP %ld", status);
}

static int map_status(long status) {
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
static bool valid_name(const char *s) {
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
static bool valid_ref(const char *s) {
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

static bool valid_tag(const char *s) {
        return valid_name(s) && strlen(s) <= 128;
}

/* ---- request core ------------------------------------------------------------- */

/* xasprintf(fmt, escaped name, ...): fmt's first conversion is the %s that takes the
 * URL-escaped object name ("/containers/%s/json"), the rest take the extra arguments. */
#define escaped_path(fmt, name, ...)                                            \
        ({                                                                      \
                _cleanup_free_ char *_ep_ = httpc_escape(name);                 \
                xasprintf(fmt, _ep_, ##__VA_ARGS__);                            \
        })

/* dcall (defined below) without a body, on escaped_path(fmt, name, ...). */
#define dcall_path(d, method, timeout_ms, ret, fmt, name, ...)                          \
        ({                                                                              \
                _cleanup_free_ char *_dp_ = escaped_path(fmt, name, ##__VA_ARGS__);     \
                dcall((d), (method), _dp_, NULL, (timeout_ms), (ret));                  \
        })

struct dresp {
        long status;
        cJSON *json;
};

static void dresp_done(struct dresp *r) {
        cJSON_Delete(r->json);
        r->json = NULL;
}

static int transport_error(struct docker *d, int r) {
        set_error("cannot talk to Docker at %s: %s", d->socket, strerror(-r));
        return r;
}

/* One API call. body (may be NULL) is sent as JSON. On a transport failure returns
 * -errno. Otherwise ret->status is set, ret->json holds the parsed body (if any), and
 * the return value is map_status(status) with docker_last_error() set for >= 400. */
static int dcall(struct docker *d, const char *method, const char *path, const cJSON *body,
                 long timeout_ms, struct dresp *ret) {
        _cleanup_free_ char *url = xasprintf("http://localhost" DOCKER_API_PREFIX "%s", path);
        struct httpc_resp resp = {};
        int r;

        *ret = (struct dresp) {};
        struct httpc_req req = {
                .method = method,
                .url = url,
                .unix_socket = d->socket,
                .timeout_ms = timeout_ms > 0 ? timeout_ms : TIMEOUT_DEFAULT_MS,
        };
        r = httpc_do_json_body(&req, body, &resp);
        if (r < 0) {
                log_debug("docker: %s %s: %s", method, path, strerror(-r));
                return transport_error(d, r);
        }
        ret->status = resp.status;
        if (resp.body_len > 0)
                ret->json = cJSON_ParseWithLength(resp.body, resp.body_len);
        if (resp.status >= 400) {
                set_error_from_body(resp.status, resp.body, resp.body_len);
                log_debug("docker: %s %s: HTTP %ld: %s", method, path, resp.status, last_error);
        } else
                clear_error();
        httpc_resp_done(&resp);
        return map_status(ret->status);
}

static const char *json_str(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double json_num(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void copy_str(char *dst, size_t n, const char *s) {
        snprintf(dst, n, "%s", s ? s : "");
}

static cJSON *strv_to_json(const char *const *v) {
        cJSON *a = cJSON_CreateArray();
        for (; v && *v; v++)
                cJSON_AddItemToArray(a, cJSON_CreateString(*v));
        return a;
}

static cJSON *labels_to_json(const struct docker_kv *l, size_t n) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i < n; i++)
                cJSON_AddStringToObject(o, l[i].key, l[i].value ? l[i].value : "");
        return o;
}

static bool labels_valid(const struct docker_kv *l, size_t n) {
        if (n > 0 && !l)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!l[i].key || !*l[i].key)
                        return false;
        return true;
}

/* ---- daemon ------------------------------------------------------------------- */

int docker_ping(struct docker *d) {
        struct dresp resp;
        int r = dcall(d, "GET", "/_ping", NULL, 5000, &resp);
        dresp_done(&resp);
        return r;
}

int docker_version(struct docker *d, char **ret_version, char **ret_api) {
        _cleanup_(dresp_done) struct dresp resp = {};
        int r = dcall(d, "GET", "/version", NULL, 0, &resp);
        if (r < 0)
                return r;
        const char *v = json_str(resp.json, "Version"), *a = json_str(resp.json, "ApiVersion");
        if (!v || !a) {
                set_error("unexpected /version response");
                return -EBADMSG;
        }
        if (ret_version)
                *ret_version = xstrdup(v);
        if (ret_api)
                *ret_api = xstrdup(a);
        return 0;
}

int docker_runtime_path(struct docker *d, const char *name, char **ret_path) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!name || !*name)
                return -EINVAL;
        int r = dcall(d, "GET", "/info", NULL, 0, &resp);
        if (r < 0)
                return r;
        const cJSON *rts = cJSON_GetObjectItemCaseSensitive(resp.json, "Runtimes");
        if (!cJSON_IsObject(rts)) {
                set_error("unexpected /info response (no Runtimes)");
                return -EBADMSG;
        }
        const cJSON *rt = cJSON_GetObjectItemCaseSensitive(rts, name);
        if (!cJSON_IsObject(rt))
                return -ENOENT;
        const char *path = json_str(rt, "path");
        if (ret_path)
                *ret_path = xstrdup(path ? path : "");
        return 0;
}

/* The string key of GET /info (with abs_path: an absolute path), xstrdup'd into *ret
 * when ret is not NULL; -EBADMSG when it is missing. */
static int info_string(struct docker *d, const char *key, bool abs_path, char **ret) {
        _cleanup_(dresp_done) struct dresp resp = {};
        int r = dcall(d, "GET", "/info", NULL, 0, &resp);
        if (r < 0)
                return r;
        const char *v = json_str(resp.json, key);
        if (!v || (abs_path && *v != '/')) {
                set_error("unexpected /info response (no %s)", key);
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

/* ---- containers --------------------------------------------------------------- */

/* The "Id" of a create call's answer, xstrdup'd into *ret when ret is not NULL;
 * -EBADMSG (what names the call) when it has none. */
static int answer_id(const struct dresp *resp, const char *what, char **ret) {
        const char *id = json_str(resp->json, "Id");
        if (!id || !*id) {
                set_error("%s returned no Id", what);
                return -EBADMSG;
        }
        if (ret)
                *ret = xstrdup(id);
        return 0;
}

int docker_container_create(struct docker *d, const struct docker_create_opts *o, char **ret_id) {
        _cleanup_json_ cJSON *b = NULL;
        _cleanup_(dresp_done) struct dresp resp = {};
        _cleanup_free_ char *path = NULL;
        cJSON *hc;
        int r;

        if (!o || !valid_ref(o->image) || (o->name && !valid_name(o->name)) ||
            !labels_valid(o->labels, o->n_labels) || (o->n_mounts > 0 && !o->mounts))
                return -EINVAL;
        for (size_t i = 0; i < o->n_mounts; i++)
                if (!valid_name(o->mounts[i].volume) || !o->mounts[i].target || o->mounts[i].target[0] != '/')
                        return -EINVAL;

        b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "Image", o->image);
        if (o->cmd)
                cJSON_AddItemToObject(b, "Cmd", strv_to_json(o->cmd));
        if (o->env)
                cJSON_AddItemToObject(b, "Env", strv_to_json(o->env));
        cJSON_AddItemToObject(b, "Labels", labels_to_json(o->labels, o->n_labels));
        if (o->working_dir)
                cJSON_AddStringToObject(b, "WorkingDir", o->working_dir);
        if (o->user)
                cJSON_AddStringToObject(b, "User", o->user);
        cJSON_AddBoolToObject(b, "AttachStdin", false);
        cJSON_AddBoolToObject(b, "AttachStdout", false);
        cJSON_AddBoolToObject(b, "AttachStderr", false);
        cJSON_AddBoolToObject(b, "Tty", false);

        hc = cJSON_AddObjectToObject(b, "HostConfig");
        if (o->runtime)
                cJSON_AddStringToObject(hc, "Runtime", o->runtime);
        if (o->network_mode)
                cJSON_AddStringToObject(hc, "NetworkMode", o->network_mode);
        if (o->memory_bytes > 0)
                cJSON_AddNumberToObject(hc, "Memory", (double) o->memory_bytes);
        if (o->memory_reservation > 0)
                cJSON_AddNumberToObject(hc, "MemoryReservation", (double) o->memory_reservation);
        if (o->nano_cpus > 0)
                cJSON_AddNumberToObject(hc, "NanoCpus", (double) o->nano_cpus);
        if (o->cpu_shares > 0)
                cJSON_AddNumberToObject(hc, "CpuShares", (double) o->cpu_shares);
        if (o->pids_limit > 0)
                cJSON_AddNumberToObject(hc, "PidsLimit", (double) o->pids_limit);
        if (o->cap_drop_all)
                cJSON_AddItemToObject(hc, "CapDrop", strv_to_json((const char *const[]) { "ALL", NULL }));
        if (o->cap_add_all)
                cJSON_AddItemToObject(hc, "CapAdd", strv_to_json((const char *const[]) { "ALL", NULL }));
        if (o->no_new_privileges)
                cJSON_AddItemToObject(hc, "SecurityOpt", strv_to_json((const char *const[]) { "no-new-privileges", NULL }));
        if (o->init)
                cJSON_AddBoolToObject(hc, "Init", true);
        if (o->storage_size_gb > 0) {
                char sz[32];
                snprintf(sz, sizeof(sz), "%lldG", (long long) o->storage_size_gb);
                cJSON_AddStringToObject(cJSON_AddObjectToObject(hc, "StorageOpt"), "size", sz);
        }
        if (o->extra_hosts)
                cJSON_AddItemToObject(hc, "ExtraHosts", strv_to_json(o->extra_hosts));
        if (o->n_mounts > 0) {
                cJSON *m = cJSON_AddArrayToObject(hc, "Mounts");
                for (size_t i = 0; i < o->n_mounts; i++) {
                        cJSON *e = cJSON_CreateObject();
                        cJSON_AddStringToObject(e, "Type", "volume");
                        cJSON_AddStringToObject(e, "Source", o->mounts[i].volume);
                        cJSON_AddStringToObject(e, "Target", o->mounts[i].target);
                        cJSON_AddBoolToObject(e, "ReadOnly", o->mounts[i].read_only);
                        cJSON_AddItemToArray(m, e);
                }
        }
        if (o->tmpfs_size_bytes > 0) {
                char opt[64];
                snprintf(opt, sizeof(opt), "rw,nosuid,nodev,size=%" PRId64, o->tmpfs_size_bytes);
                cJSON *t = cJSON_AddObjectToObject(hc, "Tmpfs");
                cJSON_AddStringToObject(t, "/tmp", opt);
        }

        if (o->name) {
                _cleanup_free_ char *n = httpc_escape(o->name);
                path = xasprintf("/containers/create?name=%s", n);
        } else
                path = xstrdup("/containers/create");
        r = dcall(d, "POST", path, b, TIMEOUT_CREATE_MS, &resp);
        if (r < 0)
                return r;
        return answer_id(&resp, "container create", ret_id);
}

/* POST /containers/{id}/<action><query> with no body; 304 is success. */
static int container_action(struct docker *d, const char *id, const char *action, const char *query,
                            long timeout_ms, struct dresp *resp) {
        if (!valid_name(id))
                return -EINVAL;
        _cleanup_free_ char *path = escaped_path("/containers/%s/%s%s", id, action, query ? query : "");
        return dcall(d, "POST", path, NULL, timeout_ms, resp);
}

int docker_container_start(struct docker *d, const char *id) {
        _cleanup_(dresp_done) struct dresp resp = {};
        return container_action(d, id, "start", NULL, TIMEOUT_CREATE_MS, &resp);
}

int docker_container_stop(struct docker *d, const char *id, int timeout_s) {
        _cleanup_(dresp_done) struct dresp resp = {};
        char q[32];
        if (timeout_s < 0)
                timeout_s = 0;
        snprintf(q, sizeof(q), "?t=%d", timeout_s);
        return container_action(d, id, "stop", q, (long) timeout_s * 1000 + TIMEOUT_DEFAULT_MS, &resp);
}

int docker_container_kill(struct docker *d, const char *id, const char *signal) {
        _cleanup_(dresp_done) struct dresp resp = {};
        const char *sig = signal ? signal : "SIGKILL";
        if (!valid_name(sig))
                return -EINVAL;
        _cleanup_free_ char *q = xasprintf("?signal=%s", sig);
        int r = container_action(d, id, "kill", q, 0, &resp);
        return r == -EEXIST ? -ESRCH : r;
}

int docker_container_remove(struct docker *d, const char *id, bool force, bool remove_volumes) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_name(id))
                return -EINVAL;
        int r = dcall_path(d, "DELETE", TIMEOUT_REMOVE_MS, &resp, "/containers/%s?force=%d&v=%d", id, force,
                           remove_volumes);
        return r == -EEXIST ? -EBUSY : r;
}

int docker_container_inspect(struct docker *d, const char *id_or_name, struct docker_container_state *ret) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_name(id_or_name))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/containers/%s/json", id_or_name);
        if (r == -ENOENT) {
                *ret = (struct docker_container_state) { .exists = false, .exit_code = -1 };
                return 0;
        }
        if (r < 0)
                return r;

        const cJSON *st = cJSON_GetObjectItemCaseSensitive(resp.json, "State");
        if (!cJSON_IsObject(st)) {
                set_error("container inspect returned no State");
                return -EBADMSG;
        }
        struct docker_container_state s = { .exists = true };
        s.running = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "Running"));
        s.exit_code = (int) json_num(st, "ExitCode");
        s.oom_killed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "OOMKilled"));
        copy_str(s.status, sizeof(s.status), json_str(st, "Status"));
        copy_str(s.started_at, sizeof(s.started_at), json_str(st, "StartedAt"));
        copy_str(s.finished_at, sizeof(s.finished_at), json_str(st, "FinishedAt"));
        copy_str(s.error, sizeof(s.error), json_str(st, "Error"));
        copy_str(s.id, sizeof(s.id), json_str(resp.json, "Id"));
        {
                const char *nm = json_str(resp.json, "Name");
                copy_str(s.name, sizeof(s.name), nm && nm[0] == '/' ? nm + 1 : nm);
        }
        const cJSON *ns = cJSON_GetObjectItemCaseSensitive(resp.json, "NetworkSettings");
        const cJSON *nets = cJSON_GetObjectItemCaseSensitive(ns, "Networks");
        const cJSON *n;
        cJSON_ArrayForEach(n, nets) {
                const char *ip = json_str(n, "IPAddress");
                if (ip && *ip) {
                        copy_str(s.ip, sizeof(s.ip), ip);
                        break;
                }
        }
        *ret = s;
        return 0;
}

/* GET path_head + filters={"key":["value"]}, whose answer must be a JSON array
 * (what names the call in the error). 0 with the array in ret->json, or < 0. */
static int dlist(struct docker *d, const char *path_head, const char *key, const char *value, const char *what,
                 struct dresp *ret) {
        _cleanup_json_ cJSON *f = cJSON_CreateObject();
        cJSON_AddItemToObject(f, key, strv_to_json((const char *const[]) { value, NULL }));
        _cleanup_free_ char *ftext = xnonnull(cJSON_PrintUnformatted(f));
        _cleanup_free_ char *fesc = httpc_escape(ftext);
        _cleanup_free_ char *path = xasprintf("%sfilters=%s", path_head, fesc);
        int r = dcall(d, "GET", path, NULL, 0, ret);
        if (r < 0)
                return r;
        if (!cJSON_IsArray(ret->json)) {
                set_error("%s returned no array", what);
                return -EBADMSG;
        }
        return 0;
}

int docker_container_list(struct docker *d, const char *label_filter, char ***ret_ids) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!label_filter || !*label_filter || !ret_ids)
                return -EINVAL;
        int r = dlist(d, "/containers/json?all=1&", "label", label_filter, "container list", &resp);
        if (r < 0)
                return r;
        size_t n = (size_t) cJSON_GetArraySize(resp.json), k = 0;
        char **v = xnew0(char *, n + 1);
        const cJSON *c;
        cJSON_ArrayForEach(c, resp.json) {
                const char *id = json_str(c, "Id");
                if (id && k < n)
                        v[k++] = xstrdup(id);
        }
        *ret_ids = v;
        return 0;
}

/* ---- volumes and networks ------------------------------------------------------ */

int docker_volume_create(struct docker *d, const char *name, const struct docker_kv *labels, size_t n) {
        return docker_volume_create_bind(d, name, NULL, labels, n);
}

int docker_volume_create_bind(struct docker *d, const char *name, const char *device, const struct docker_kv *labels,
                              size_t n) {
        _cleanup_(dresp_done) struct dresp resp = {};
        _cleanup_json_ cJSON *b = NULL;
        if (!valid_name(name) || !labels_valid(labels, n) || (device && device[0] != '/'))
                return -EINVAL;
        b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "Name", name);
        cJSON_AddStringToObject(b, "Driver", "local");
        if (device) {
                cJSON *o = cJSON_AddObjectToObject(b, "DriverOpts");
                cJSON_AddStringToObject(o, "type", "none");
                cJSON_AddStringToObject(o, "o", "bind");
                cJSON_AddStringToObject(o, "device", device);
        }
        cJSON_AddItemToObject(b, "Labels", labels_to_json(labels, n));
        return dcall(d, "POST", "/volumes/create", b, 0, &resp);
}

int docker_volume_remove(struct docker *d, const char *name, bool force) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_name(name))
                return -EINVAL;
        int r = dcall_path(d, "DELETE", TIMEOUT_REMOVE_MS, &resp, "/volumes/%s?force=%d", name, force);
        return r == -EEXIST ? -EBUSY : r;
}

/* Docker resolves /networks/{x} by id, exact name or id prefix; only an exact name
 * match counts. Returns 0 with *ret_id set, -ENOENT, or another error. */
static int network_lookup(struct docker *d, const char *name, char **ret_id) {
        _cleanup_(dresp_done) struct dresp resp = {};
        int r = dcall_path(d, "GET", 0, &resp, "/networks/%s", name);
        if (r < 0)
                return r;
        const char *n = json_str(resp.json, "Name"), *id = json_str(resp.json, "Id");
        if (!n || !id || strcmp(n, name) != 0) {
                set_error("network %s not found", name);
                return -ENOENT;
        }
        *ret_id = xstrdup(id);
        return 0;
}

int docker_network_ensure(struct docker *d, const char *name, const char *subnet, const char *gateway,
                          bool internal, const struct docker_kv *labels, size_t n) {
        return docker_network_ensure_bridge(d, name, subnet, gateway, internal, NULL, labels, n);
}

int docker_network_ensure_bridge(struct docker *d, const char *name, const char *subnet, const char *gateway,
                                 bool internal, const char *bridge, const struct docker_kv *labels, size_t n) {
        _cleanup_(dresp_done) struct dresp resp = {};
        _cleanup_json_ cJSON *b = NULL;
        _cleanup_free_ char *id = NULL;
        int r;

        if (!valid_name(name) || !labels_valid(labels, n))
                return -EINVAL;
        r = network_lookup(d, name, &id);
        if (r != -ENOENT)
                return r < 0 ? r : 0;

        b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "Name", name);
        cJSON_AddBoolToObject(b, "CheckDuplicate", true);
        cJSON_AddStringToObject(b, "Driver", "bridge");
        cJSON_AddBoolToObject(b, "Internal", internal);
        cJSON_AddItemToObject(b, "Labels", labels_to_json(labels, n));
        if (bridge) {
                cJSON *opts = cJSON_AddObjectToObject(b, "Options");
                cJSON_AddStringToObject(opts, "com.docker.network.bridge.name", bridge);
        }
        if (subnet || gateway) {
                cJSON *ipam = cJSON_AddObjectToObject(b, "IPAM");
                cJSON_AddStringToObject(ipam, "Driver", "default");
                cJSON *cfgs = cJSON_AddArrayToObject(ipam, "Config");
                cJSON *c = cJSON_CreateObject();
                if (subnet)
                        cJSON_AddStringToObject(c, "Subnet", subnet);
                if (gateway)
                        cJSON_AddStringToObject(c, "Gateway", gateway);
                cJSON_AddItemToArray(cfgs, c);
        }
        r = dcall(d, "POST", "/networks/create", b, 0, &resp);
        if (r == -EEXIST) {          /* created concurrently by someone else */
                clear_error();
                return 0;
        }
        return r;
}

int docker_network_remove(struct docker *d, const char *name) {
        _cleanup_(dresp_done) struct dresp resp = {};
        _cleanup_free_ char *id = NULL;
        if (!valid_name(name))
                return -EINVAL;
        int r = network_lookup(d, name, &id);
        if (r < 0)
                return r;
        r = dcall_path(d, "DELETE", 0, &resp, "/networks/%s", id);
        /* "has active endpoints" comes back as 403 (Forbidden) on 20.10 */
        return (r == -EACCES || r == -EEXIST) ? -EBUSY : r;
}

/* ---- stats and images ------------------------------------------------------------ */

int docker_container_stats(struct docker *d, const char *id, struct docker_stats *ret) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_name(id))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/containers/%s/stats?stream=false&one-shot=true", id);
        if (r < 0)
                return r;
        if (!cJSON_IsObject(resp.json)) {
                set_error("stats returned no object");
                return -EBADMSG;
        }

        struct docker_stats s = {};
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(resp.json, "memory_stats");
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(mem, "usage");
        if (cJSON_IsNumber(usage)) {
                const cJSON *ms = cJSON_GetObjectItemCaseSensitive(mem, "stats");
                /* like the docker CLI: cgroup v1 total_inactive_file, v2 inactive_file */
                double inactive = cJSON_HasObjectItem(ms, "total_inactive_file") ? json_num(ms, "total_inactive_file")
                                                                                   : json_num(ms, "inactive_file");
                double u = usage->valuedouble;
                s.mem_usage = (uint64_t) (inactive > 0 && inactive < u ? u - inactive : u);
                s.mem_limit = (uint64_t) json_num(mem, "limit");
                s.valid = true;
        }

        const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(resp.json, "cpu_stats");
        const cJSON *pre = cJSON_GetObjectItemCaseSensitive(resp.json, "precpu_stats");
        double cpu_total = json_num(cJSON_GetObjectItemCaseSensitive(cpu, "cpu_usage"), "total_usage");
        double pre_total = json_num(cJSON_GetObjectItemCaseSensitive(pre, "cpu_usage"), "total_usage");
        double sys = json_num(cpu, "system_cpu_usage"), pre_sys = json_num(pre, "system_cpu_usage");
        double ncpu = json_num(cpu, "online_cpus");
        if (ncpu <= 0)
                ncpu = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(
                        cJSON_GetObjectItemCaseSensitive(cpu, "cpu_usage"), "percpu_usage"));
        if (ncpu <= 0)
                ncpu = 1;
        if (pre_sys > 0 && sys > pre_sys && cpu_total > pre_total)
                s.cpu_percent = (cpu_total - pre_total) / (sys - pre_sys) * ncpu * 100.0;
        s.cpu_total_ns = cpu_total > 0 ? (uint64_t) cpu_total : 0;
        s.system_ns = sys > 0 ? (uint64_t) sys : 0;
        s.online_cpus = (unsigned) ncpu;

        const cJSON *nets = cJSON_GetObjectItemCaseSensitive(resp.json, "networks"), *n;
        cJSON_ArrayForEach(n, nets) {
                s.net_rx += (uint64_t) json_num(n, "rx_bytes");
                s.net_tx += (uint64_t) json_num(n, "tx_bytes");
        }
        *ret = s;
        return 0;
}

int docker_image_exists(struct docker *d, const char *ref) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/images/%s/json", ref);
        if (r == -ENOENT) {
                clear_error();
                return 0;
        }
        return r < 0 ? r : 1;
}

int docker_image_remove(struct docker *d, const char *ref, bool force) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "DELETE", TIMEOUT_REMOVE_MS, &resp, "/images/%s?force=%d&noprune=0", ref, force);
        return r == -EEXIST ? -EBUSY : r;
}

int docker_commit(struct docker *d, const char *container, const char *repo, const char *tag, char **ret_image_id) {
        _cleanup_(dresp_done) struct dresp resp = {};
        _cleanup_json_ cJSON *b = cJSON_CreateObject();
        const char *t = tag ? tag : "latest";
        if (!valid_name(container) || !valid_ref(repo) || strchr(repo, '@') || !valid_tag(t))
                return -EINVAL;
        _cleanup_free_ char *ec = httpc_escape(container), *er = httpc_escape(repo), *et = httpc_escape(t);
        _cleanup_free_ char *path = xasprintf("/commit?container=%s&repo=%s&tag=%s&pause=1", ec, er, et);
        int r = dcall(d, "POST", path, b, TIMEOUT_COMMIT_MS, &resp);
        if (r < 0)
                return r;
        return answer_id(&resp, "commit", ret_image_id);
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
        const char *msg = json_str(ed, "message");
        if (!msg)
                msg = json_str(j, "error");
        if (ed || msg) {
                if (!c->failed)   /* keep the first error: later ones are usually consequences */
                        copy_str(c->error, sizeof(c->error), msg ? msg : "push failed");
                c->failed = true;
                return;
        }
        const cJSON *aux = cJSON_GetObjectItemCaseSensitive(j, "aux");
        const char *dg = json_str(aux, "Digest");
        if (dg) {
                free(c->digest);
                c->digest = xstrdup(dg);
                c->size = (int64_t) json_num(aux, "Size");
                c->have_aux = true;
                return;
        }
        /* a plain {"message": ...} is the body of an HTTP error */
        msg = json_str(j, "message");
        if (msg && !c->error[0])
                copy_str(c->error, sizeof(c->error), msg);
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
        if (!valid_ref(name) || strchr(name, '@') || !valid_tag(tag) || !valid_b64(auth))
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
                return transport_error(d, r);
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
                        set_error_n(c.error, strlen(c.error));
                else
                        set_error("push failed with HTTP %ld", status);
                return map_status(status);
        }
        if (c.failed || !c.have_aux) {
                if (c.failed)
                        set_error_n(c.error, strlen(c.error));
                else
                        set_error("push of %s:%s ended without a digest", name, t);
                return -EIO;
        }
        clear_error();
        if (ret_size)
                *ret_size = c.size;
        if (ret_digest)
                *ret_digest = TAKE_PTR(c.digest);
        return 0;
}

int docker_image_pull(struct docker *d, const char *name, const char *tag, const char *registry_auth_b64) {
        const char *t = tag ? tag : "latest";
        _cleanup_(push_ctx_done) struct push_ctx c = { .line = STRBUF_INIT(PUSH_LINE_MAX) };
        long status = image_stream(d, false, name, t, registry_auth_b64, &c);
        if (status < 0)
                return (int) status;
        if (status >= 400 || c.failed) {
                if (c.error[0])
                        set_error_n(c.error, strlen(c.error));
                else
                        set_error("pull failed with HTTP %ld", status);
                return status >= 400 ? map_status(status) : -EIO;
        }
        /* The stream can end without an error line and still leave nothing behind. */
        _cleanup_free_ char *ref = xasprintf("%s:%s", name, t);
        int r = docker_image_exists(d, ref);
        if (r == 0) {
                set_error("pull of %s ended without the image", ref);
                return -EIO;
        }
        return r < 0 ? r : 0;
}

int docker_image_list(struct docker *d, const char *reference, char ***ret_refs) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!reference || !*reference || !ret_refs)
                return -EINVAL;
        int r = dlist(d, "/images/json?", "reference", reference, "image list", &resp);
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
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/images/%s/json", ref);
        if (r < 0)
                return r;
        if (ret_size)
                *ret_size = (int64_t) json_num(resp.json, "Size");
        return 0;
}

/* ---- exec ---------------------------------------------------------------------- */

int docker_exec_create(struct docker *d, const char *container, const struct docker_exec_opts *o, char **ret_exec_id) {
        _cleanup_(dresp_done) struct dresp resp = {};
        _cleanup_json_ cJSON *b = NULL;
        if (!valid_name(container) || !o || !o->cmd || !o->cmd[0] || !ret_exec_id)
                return -EINVAL;
        b = cJSON_CreateObject();
        cJSON_AddBoolToObject(b, "AttachStdin", o->attach_stdin);
        cJSON_AddBoolToObject(b, "AttachStdout", true);
        cJSON_AddBoolToObject(b, "AttachStderr", true);
        cJSON_AddBoolToObject(b, "Tty", false);
        cJSON_AddItemToObject(b, "Cmd", strv_to_json(o->cmd));
        if (o->env)
                cJSON_AddItemToObject(b, "Env", strv_to_json(o->env));
        if (o->working_dir)
                cJSON_AddStringToObject(b, "WorkingDir", o->working_dir);
        if (o->user)
                cJSON_AddStringToObject(b, "User", o->user);
        _cleanup_free_ char *path = escaped_path("/containers/%s/exec", container);
        int r = dcall(d, "POST", path, b, 0, &resp);
        if (r == -EEXIST)     /* 409: container not running (or paused/restarting) */
                return -ESRCH;
        if (r < 0)
                return r;
        return answer_id(&resp, "exec create", ret_exec_id);
}

int docker_exec_inspect(struct docker *d, const char *exec_id, struct docker_exec_info *ret) {
        _cleanup_(dresp_done) struct dresp resp = {};
        if (!valid_name(exec_id))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/exec/%s/json", exec_id);
        if (r < 0)
                return r;
        const cJSON *ec = cJSON_GetObjectItemCaseSensitive(resp.json, "ExitCode");
        *ret = (struct docker_exec_info) {
                .running = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(resp.json, "Running")),
                .exit_code = cJSON_IsNumber(ec) ? ec->valueint : -1,
                .pid = (int) json_num(resp.json, "Pid"),
        };
        return 0;
}

/* Waits for fd to become ready for events until deadline. 0 ready, -ETIMEDOUT, -errno. */
static int wait_fd(int fd, short events, int64_t deadline) {
        for (;;) {
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = { .fd = fd, .events = events };
                int n = poll(&p, 1, left > 1000000 ? 1000000 : (int) left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n > 0)
                        return 0;
        }
}

static int send_all(int fd, const char *buf, size_t len, int64_t deadline) {
        while (len > 0) {
                ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        int r = wait_fd(fd, POLLOUT, deadline);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (n < 0)
                        return -errno;
                buf += n;
                len -= (size_t) n;
        }
        return 0;
}

/* Reads once (waiting until deadline). Returns bytes, 0 on EOF, -errno. */
static ssize_t recv_some(int fd, void *buf, size_t len, int64_t deadline) {
        for (;;) {
                ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
                if (n >= 0)
                        return n;
                if (errno == EINTR)
                        continue;
                if (errno == ECONNRESET)
                        return 0;
                if (errno != EAGAIN)
                        return -errno;
                int r = wait_fd(fd, POLLIN, deadline);
                if (r < 0)
                        return r;
        }
}

static int connect_unix(struct docker *d, int *ret_fd) {
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        if (fd < 0)
                return -errno;
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", d->socket);
        while (connect(fd, (struct sockaddr *) &a, sizeof(a)) < 0) {
                if (errno == EINTR)
                        continue;
                return -errno;
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Case-insensitive search for header "name" in head (up to the blank line); value into out. */
static bool head_header(const char *head, const char *name, char *out, size_t outlen) {
        size_t nl = strlen(name);
        for (const char *l = strstr(head, "\r\n"); l && l[2] && !(l[2] == '\r' && l[3] == '\n');
             l = strstr(l + 2, "\r\n")) {
                const char *h = l + 2;
                if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
                        const char *v = h + nl + 1;
                        v += strspn(v, " \t");
                        size_t vl = strcspn(v, "\r\n");
                        snprintf(out, outlen, "%.*s", (int) vl, v);
                        return true;
                }
        }
        return false;
}

int docker_exec_start(struct docker *d, const char *exec_id, int *ret_fd, uint8_t **ret_pre, size_t *ret_pre_len) {
        static const char body[] = "{\"Detach\":false,\"Tty\":false}";
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *req = NULL, *e = NULL, *head = NULL;
        int64_t deadline = mono_ms() + EXEC_HEAD_TIMEOUT_MS;
        size_t have = 0;
        char *end = NULL;
        int r;

        if (!valid_name(exec_id) || !ret_fd || !ret_pre || !ret_pre_len)
                return -EINVAL;
        r = connect_unix(d, &fd);
        if (r < 0)
                return transport_error(d, r);

        e = httpc_escape(exec_id);
        req = xasprintf("POST " DOCKER_API_PREFIX "/exec/%s/start HTTP/1.1\r\n"
                        "Host: localhost\r\n"
                        "Connection: Upgrade\r\n"
                        "Upgrade: tcp\r\n"
                        "Content-Type: application/json\r\n"
                        "Content-Length: %zu\r\n"
                        "\r\n%s",
                        e, sizeof(body) - 1, body);
        r = send_all(fd, req, strlen(req), deadline);
        if (r < 0)
                return transport_error(d, r);

        /* Read until the end of the response head; whatever follows belongs to the stream. */
        head = xmalloc(EXEC_HEAD_MAX + 1);
        while (!end) {
                if (have == EXEC_HEAD_MAX) {
                        set_error("exec start: response head over %d bytes", EXEC_HEAD_MAX);
                        return -EBADMSG;
                }
                ssize_t n = recv_some(fd, head + have, EXEC_HEAD_MAX - have, deadline);
                if (n < 0)
                        return transport_error(d, (int) n);
                if (n == 0) {
                        set_error("exec start: connection closed before a response");
                        return -EIO;
                }
                have += (size_t) n;
                head[have] = 0;
                end = memmem(head, have, "\r\n\r\n", 4);
        }
        size_t head_len = (size_t) (end - head) + 4;

        int major, minor, status;
        if (sscanf(head, "HTTP/%d.%d %d", &major, &minor, &status) != 3) {
                set_error("exec start: malformed status line");
                return -EBADMSG;
        }
        if (status == 101 || status == 200) {
                size_t pre = have - head_len;
                *ret_pre = NULL;
                if (pre > 0) {
                        *ret_pre = xmalloc(pre);
                        memcpy(*ret_pre, head + head_len, pre);
                }
                *ret_pre_len = pre;
                clear_error();
                *ret_fd = TAKE_FD(fd);
                return 0;
        }

        /* An error: read the (bounded) body for Docker's message. */
        char cl[32] = "";
        size_t want = EXEC_ERRBODY_MAX;
        if (head_header(head, "Content-Length", cl, sizeof(cl))) {
                unsigned long long v = strtoull(cl, NULL, 10);
                want = v < EXEC_ERRBODY_MAX ? (size_t) v : EXEC_ERRBODY_MAX;
        }
        _cleanup_free_ char *eb = xmalloc(EXEC_ERRBODY_MAX + 1);
        size_t eblen = have - head_len < want ? have - head_len : want;
        memcpy(eb, head + head_len, eblen);
        while (eblen < want) {
                ssize_t n = recv_some(fd, eb + eblen, want - eblen, mono_ms() + 5000);
                if (n <= 0)
                        break;
                eblen += (size_t) n;
        }
        eb[eblen] = 0;
        /* tolerate chunked framing: the JSON object sits between the first '{' and last '}' */
        char *ob = memchr(eb, '{', eblen), *cb = ob ? strrchr(ob, '}') : NULL;
        if (ob && cb)
                set_error_from_body(status, ob, (size_t) (cb - ob) + 1);
        else
                set_error_from_body(status, eb, eblen);
        r = map_status(status);
        if (r == -EEXIST)     /* 409: exec already running, or container stopped */
                r = -EBUSY;
        return r < 0 ? r : -EIO;
}

/* ---- demux ---------------------------------------------------------------------- */

int docker_demux_feed(struct docker_demux *m, const uint8_t *buf, size_t len,
                      int (*cb)(int type, const uint8_t *data, size_t len, void *ud), void *ud) {
        while (len > 0) {
                if (m->remaining == 0) {
                        size_t take = 8 - m->hdr_have;
                        if (take > len)
                                take = len;
                        memcpy(m->hdr + m->hdr_have, buf, take);
                        m->hdr_have += take;
                        buf += take;
                        len -= take;
                        if (m->hdr_have < 8)
                                return 0;
                        if (m->hdr[0] > 3 || m->hdr[1] || m->hdr[2] || m->hdr[3])
                                return -EBADMSG;
                        m->type = m->hdr[0];
                        m->remaining = (uint32_t) m->hdr[4] << 24 | (uint32_t) m->hdr[5] << 16 |
                                       (uint32_t) m->hdr[6] << 8 | (uint32_t) m->hdr[7];
                        m->hdr_have = 0;
                        continue;
                }
                size_t take = len < m->remaining ? len : m->remaining;
                m->remaining -= (uint32_t) take;
                int r = cb(m->type, buf, take, ud);
                if (r < 0)
                        return r;
                buf += take;
                len -= take;
        }
        return 0;
}

/* ---- exec_run ------------------------------------------------------------------- */

/* Output is kept up to the caller's cap; the rest is counted as truncated. */
struct run_ctx {
        struct strbuf out, err;
};

static void run_ctx_done(struct run_ctx *c) {
        strbuf_done(&c->out);
        strbuf_done(&c->err);
}

static int run_cb(int type, const uint8_t *data, size_t len, void *ud) {
        struct run_ctx *c = ud;
        if (type == 1)
                (void) strbuf_append(&c->out, data, len);
        else if (type == 2 || type == 3)
                (void) strbuf_append(&c->err, data, len);
        return 0;
}

int docker_exec_run(struct docker *d, const char *container, const struct docker_exec_opts *o,
                    const void *stdin_data, size_t stdin_len, size_t cap, long timeout_ms,
                    struct docker_exec_result *ret) {
        _cleanup_free_ char *exec_id = NULL;
        _cleanup_free_ uint8_t *pre = NULL;
        _cleanup_close_ int fd = -1;
        _cleanup_free_ uint8_t *buf = NULL;
        struct docker_demux dm = {};
        _cleanup_(run_ctx_done) struct run_ctx c = {};
        size_t pre_len = 0, sent = 0;
        int64_t deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : EXEC_RUN_TIMEOUT_MS);
        bool attach = stdin_data != NULL || (o && o->attach_stdin);
        bool writing = attach;
        int r;

        if (!o || !ret || (stdin_len > 0 && !stdin_data))
                return -EINVAL;
        strbuf_init(&c.out, cap ? cap : DOCKER_EXEC_CAP_DEFAULT);
        strbuf_init(&c.err, cap ? cap : DOCKER_EXEC_CAP_DEFAULT);

        struct docker_exec_opts eo = *o;
        eo.attach_stdin = attach;
        r = docker_exec_create(d, container, &eo, &exec_id);
        if (r < 0)
                return r;
        r = docker_exec_start(d, exec_id, &fd, &pre, &pre_len);
        if (r < 0)
                return r;

        r = docker_demux_feed(&dm, pre, pre_len, run_cb, &c);
        if (r < 0)
                goto fail_proto;

        if (writing && stdin_len == 0) {
                shutdown(fd, SHUT_WR);
                writing = false;
        }
        buf = xmalloc(64 * 1024);
        for (;;) {
                int64_t left = deadline - mono_ms();
                if (left <= 0) {
                        r = -ETIMEDOUT;
                        goto fail;
                }
                struct pollfd p = { .fd = fd, .events = POLLIN | (writing ? POLLOUT : 0) };
                int n = poll(&p, 1, left > 1000000 ? 1000000 : (int) left);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = -errno;
                        goto fail;
                }
                if (n == 0)
                        continue;
                if (writing && (p.revents & (POLLOUT | POLLERR | POLLHUP))) {
                        size_t chunk = stdin_len - sent < 65536 ? stdin_len - sent : 65536;
                        ssize_t w = send(fd, (const uint8_t *) stdin_data + sent, chunk, MSG_NOSIGNAL | MSG_DONTWAIT);
                        if (w > 0)
                                sent += (size_t) w;
                        else if (w < 0 && errno != EAGAIN && errno != EINTR)
                                /* the process quit without reading all stdin: not our error */
                                sent = stdin_len;
                        if (sent == stdin_len) {
                                shutdown(fd, SHUT_WR);
                                writing = false;
                        }
                }
                if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t rn = recv(fd, buf, 64 * 1024, MSG_DONTWAIT);
                        if (rn < 0 && (errno == EAGAIN || errno == EINTR))
                                continue;
                        if (rn < 0 && errno != ECONNRESET) {
                                r = -errno;
                                goto fail;
                        }
                        if (rn <= 0)
                                break;
                        r = docker_demux_feed(&dm, buf, (size_t) rn, run_cb, &c);
                        if (r < 0)
                                goto fail_proto;
                }
        }
        close(TAKE_FD(fd));
        log_debug("docker: exec %s: stream ended (%zu/%zu bytes out/err)", exec_id, c.out.len, c.err.len);

        /* The stream ends when the process's output closes; Docker may record the exit
         * code a moment later (noticeably so under runsc). */
        struct docker_exec_info info = {};
        for (int64_t sleep_ms = 2;; sleep_ms = sleep_ms < 50 ? sleep_ms * 2 : 50) {
                r = docker_exec_inspect(d, exec_id, &info);
                if (r < 0)
                        goto fail;
                if (!info.running && info.exit_code >= 0)
                        break;
                if (!info.running) {
                        /* Never ran: Docker writes errors that happen after the hijack
                         * ("Container ... is not running") into the stream as stdout. */
                        set_error_n(c.out.buf ? c.out.buf : "exec did not run", c.out.buf ? c.out.len : 16);
                        return strstr(last_error, "is not running") ? -ESRCH : -EIO;
                }
                if (mono_ms() + sleep_ms > deadline) {
                        log_debug("docker: exec %s: no exit code yet (running=%d pid=%d)", exec_id, info.running, info.pid);
                        r = -ETIMEDOUT;
                        goto fail;
                }
                usleep((useconds_t) sleep_ms * 1000);
        }

        *ret = (struct docker_exec_result) {
                .out_len = c.out.len,
                .out_truncated = c.out.truncated,
                .err_len = c.err.len,
                .err_truncated = c.err.truncated,
                .exit_code = info.exit_code,
        };
        ret->out = strbuf_steal(&c.out);
        ret->err = strbuf_steal(&c.err);
        return 0;

fail_proto:
        set_error("exec %s: malformed output stream", exec_id);
fail:
        if (r == -ETIMEDOUT)
                set_error("exec %s did not finish within %ld ms", exec_id,
                          timeout_ms > 0 ? timeout_ms : EXEC_RUN_TIMEOUT_MS);
        return r;
}

void docker_exec_result_done(struct docker_exec_result *r) {
        if (!r)
                return;
        free_many(r->out, r->err);
        *r = (struct docker_exec_result) {};
}
