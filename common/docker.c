/* docker.c — Docker Engine API 1.41 client: the calls, over libcurl. The exec transport (the
 * hijacked raw AF_UNIX stream and its demux) is docker-exec.c. About 900 lines: one short
 * function per Engine call over one request helper; they share nothing else to split along. */
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
        return docker_valid_name(s) && strlen(s) <= 128;
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

/* One API call. body (may be NULL) is sent as JSON. On a transport failure returns
 * -errno. Otherwise ret->status is set, ret->json holds the parsed body (if any), and
 * the return value is docker_map_status(status) with docker_last_error() set for >= 400. */
int docker_call(struct docker *d, const char *method, const char *path, const cJSON *body,
                 long timeout_ms, struct docker_resp *ret) {
        _cleanup_free_ char *url = xasprintf("http://localhost" DOCKER_API_PREFIX "%s", path);
        struct httpc_resp resp = {};
        int r;

        *ret = (struct docker_resp) {};
        struct httpc_req req = {
                .method = method,
                .url = url,
                .unix_socket = d->socket,
                .timeout_ms = timeout_ms > 0 ? timeout_ms : TIMEOUT_DEFAULT_MS,
        };
        r = httpc_do_json_body(&req, body, &resp);
        if (r < 0) {
                log_debug("docker: %s %s: %s", method, path, strerror(-r));
                return docker_transport_error(d, r);
        }
        ret->status = resp.status;
        if (resp.body_len > 0)
                ret->json = cJSON_ParseWithLength(resp.body, resp.body_len);
        if (resp.status >= 400) {
                docker_set_error_from_body(resp.status, resp.body, resp.body_len);
                log_debug("docker: %s %s: HTTP %ld: %s", method, path, resp.status, last_error);
        } else
                docker_clear_error();
        httpc_resp_done(&resp);
        return docker_map_status(ret->status);
}

static const char *json_str(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

double docker_json_num(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static void copy_str(char *dst, size_t n, const char *s) {
        snprintf(dst, n, "%s", s ? s : "");
}

cJSON *docker_strv_to_json(const char *const *v) {
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
        const char *v = json_str(resp.json, "Version"), *a = json_str(resp.json, "ApiVersion");
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
        const char *path = json_str(rt, "path");
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
        const char *v = json_str(resp.json, key);
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

/* ---- containers --------------------------------------------------------------- */

/* The "Id" of a create call's answer, xstrdup'd into *ret when ret is not NULL;
 * -EBADMSG (what names the call) when it has none. */
int docker_answer_id(const struct docker_resp *resp, const char *what, char **ret) {
        const char *id = json_str(resp->json, "Id");
        if (!id || !*id) {
                docker_set_error("%s returned no Id", what);
                return -EBADMSG;
        }
        if (ret)
                *ret = xstrdup(id);
        return 0;
}

int docker_container_create(struct docker *d, const struct docker_create_opts *o, char **ret_id) {
        _cleanup_json_ cJSON *b = NULL;
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_free_ char *path = NULL;
        cJSON *hc;
        int r;

        if (!o || !valid_ref(o->image) || (o->name && !docker_valid_name(o->name)) ||
            !labels_valid(o->labels, o->n_labels) || (o->n_mounts > 0 && !o->mounts))
                return -EINVAL;
        for (size_t i = 0; i < o->n_mounts; i++) {
                const struct docker_mount *m = &o->mounts[i];
                bool tmpfs = !m->bind && !m->volume;
                if ((m->bind ? m->bind[0] != '/' : tmpfs ? m->tmpfs_bytes <= 0 : !docker_valid_name(m->volume)) ||
                    !m->target || m->target[0] != '/')
                        return -EINVAL;
        }

        b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "Image", o->image);
        if (o->entrypoint)
                cJSON_AddItemToObject(b, "Entrypoint", docker_strv_to_json(o->entrypoint));
        if (o->cmd)
                cJSON_AddItemToObject(b, "Cmd", docker_strv_to_json(o->cmd));
        if (o->env)
                cJSON_AddItemToObject(b, "Env", docker_strv_to_json(o->env));
        cJSON_AddItemToObject(b, "Labels", labels_to_json(o->labels, o->n_labels));
        if (o->working_dir)
                cJSON_AddStringToObject(b, "WorkingDir", o->working_dir);
        if (o->user)
                cJSON_AddStringToObject(b, "User", o->user);
        cJSON_AddBoolToObject(b, "AttachStdin", false);
        cJSON_AddBoolToObject(b, "AttachStdout", false);
        cJSON_AddBoolToObject(b, "AttachStderr", false);
        cJSON_AddBoolToObject(b, "Tty", false);
        if (o->no_healthcheck)
                cJSON_AddItemToObject(cJSON_AddObjectToObject(b, "Healthcheck"), "Test",
                                      docker_strv_to_json((const char *const[]) { "NONE", NULL }));

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
                cJSON_AddItemToObject(hc, "CapDrop", docker_strv_to_json((const char *const[]) { "ALL", NULL }));
        if (o->cap_add_all)
                cJSON_AddItemToObject(hc, "CapAdd", docker_strv_to_json((const char *const[]) { "ALL", NULL }));
        if (o->no_new_privileges)
                cJSON_AddItemToObject(hc, "SecurityOpt", docker_strv_to_json((const char *const[]) { "no-new-privileges", NULL }));
        if (o->init)
                cJSON_AddBoolToObject(hc, "Init", true);
        if (o->storage_size_gb > 0) {
                char sz[32];
                snprintf(sz, sizeof(sz), "%lldG", (long long) o->storage_size_gb);
                cJSON_AddStringToObject(cJSON_AddObjectToObject(hc, "StorageOpt"), "size", sz);
        }
        if (o->extra_hosts)
                cJSON_AddItemToObject(hc, "ExtraHosts", docker_strv_to_json(o->extra_hosts));
        if (o->n_mounts > 0) {
                cJSON *m = cJSON_AddArrayToObject(hc, "Mounts");
                for (size_t i = 0; i < o->n_mounts; i++) {
                        const struct docker_mount *x = &o->mounts[i];
                        cJSON *e = cJSON_CreateObject();
                        if (!x->bind && !x->volume) {
                                cJSON_AddStringToObject(e, "Type", "tmpfs");
                                cJSON_AddNumberToObject(cJSON_AddObjectToObject(e, "TmpfsOptions"), "SizeBytes",
                                                        (double) x->tmpfs_bytes);
                        } else {
                                cJSON_AddStringToObject(e, "Type", x->bind ? "bind" : "volume");
                                cJSON_AddStringToObject(e, "Source", x->bind ? x->bind : x->volume);
                        }
                        cJSON_AddStringToObject(e, "Target", x->target);
                        cJSON_AddBoolToObject(e, "ReadOnly", x->read_only);
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
        r = docker_call(d, "POST", path, b, TIMEOUT_CREATE_MS, &resp);
        if (r < 0)
                return r;
        return docker_answer_id(&resp, "container create", ret_id);
}

/* POST /containers/{id}/<action><query> with no body; 304 is success. */
static int container_action(struct docker *d, const char *id, const char *action, const char *query,
                            long timeout_ms, struct docker_resp *resp) {
        if (!docker_valid_name(id))
                return -EINVAL;
        _cleanup_free_ char *path = escaped_path("/containers/%s/%s%s", id, action, query ? query : "");
        return docker_call(d, "POST", path, NULL, timeout_ms, resp);
}

int docker_container_start(struct docker *d, const char *id) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        return container_action(d, id, "start", NULL, TIMEOUT_CREATE_MS, &resp);
}

int docker_container_stop(struct docker *d, const char *id, int timeout_s) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        char q[32];
        if (timeout_s < 0)
                timeout_s = 0;
        snprintf(q, sizeof(q), "?t=%d", timeout_s);
        return container_action(d, id, "stop", q, (long) timeout_s * 1000 + TIMEOUT_DEFAULT_MS, &resp);
}

int docker_container_kill(struct docker *d, const char *id, const char *signal) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        const char *sig = signal ? signal : "SIGKILL";
        if (!docker_valid_name(sig))
                return -EINVAL;
        _cleanup_free_ char *q = xasprintf("?signal=%s", sig);
        int r = container_action(d, id, "kill", q, 0, &resp);
        return r == -EEXIST ? -ESRCH : r;
}

int docker_container_remove(struct docker *d, const char *id, bool force, bool remove_volumes) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(id))
                return -EINVAL;
        int r = dcall_path(d, "DELETE", TIMEOUT_REMOVE_MS, &resp, "/containers/%s?force=%d&v=%d", id, force,
                           remove_volumes);
        return r == -EEXIST ? -EBUSY : r;
}

int docker_container_inspect(struct docker *d, const char *id_or_name, struct docker_container_state *ret) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(id_or_name))
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
                docker_set_error("container inspect returned no State");
                return -EBADMSG;
        }
        struct docker_container_state s = { .exists = true };
        s.running = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(st, "Running"));
        s.exit_code = (int) docker_json_num(st, "ExitCode");
        {
                double pid = docker_json_num(st, "Pid");
                s.pid = pid > 0 && pid < 1 << 30 ? (int) pid : 0;
        }
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

int docker_container_list(struct docker *d, const char *label_filter, char ***ret_ids) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
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
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_json_ cJSON *b = NULL;
        if (!docker_valid_name(name) || !labels_valid(labels, n) || (device && device[0] != '/'))
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
        return docker_call(d, "POST", "/volumes/create", b, 0, &resp);
}

int docker_volume_create_tmpfs(struct docker *d, const char *name, int64_t size_bytes, const struct docker_kv *labels,
                               size_t n) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_json_ cJSON *b = NULL;
        if (!docker_valid_name(name) || !labels_valid(labels, n) || size_bytes <= 0)
                return -EINVAL;
        char opts[128];
        snprintf(opts, sizeof(opts), "size=%" PRId64 ",mode=0700,nosuid,nodev,noexec", size_bytes);
        b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "Name", name);
        cJSON_AddStringToObject(b, "Driver", "local");
        cJSON *o = cJSON_AddObjectToObject(b, "DriverOpts");
        cJSON_AddStringToObject(o, "type", "tmpfs");
        cJSON_AddStringToObject(o, "device", "tmpfs");
        cJSON_AddStringToObject(o, "o", opts);
        cJSON_AddItemToObject(b, "Labels", labels_to_json(labels, n));
        return docker_call(d, "POST", "/volumes/create", b, 0, &resp);
}

int docker_volume_remove(struct docker *d, const char *name, bool force) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(name))
                return -EINVAL;
        int r = dcall_path(d, "DELETE", TIMEOUT_REMOVE_MS, &resp, "/volumes/%s?force=%d", name, force);
        return r == -EEXIST ? -EBUSY : r;
}

/* Dangling volumes whose name starts with prefix, or (prefix NULL) that carry label. */
static int volume_list_dangling(struct docker *d, const char *prefix, const char *label, struct docker_volume_info **ret,
                                size_t *ret_n) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if ((prefix ? !*prefix : !label || !*label) || !ret || !ret_n)
                return -EINVAL;
        _cleanup_json_ cJSON *f = cJSON_CreateObject();
        cJSON_AddItemToObject(f, "dangling", docker_strv_to_json((const char *const[]) { "true", NULL }));
        if (prefix)
                cJSON_AddItemToObject(f, "name", docker_strv_to_json((const char *const[]) { prefix, NULL }));
        else
                cJSON_AddItemToObject(f, "label", docker_strv_to_json((const char *const[]) { label, NULL }));
        _cleanup_free_ char *ftext = xnonnull(cJSON_PrintUnformatted(f));
        _cleanup_free_ char *fesc = httpc_escape(ftext);
        _cleanup_free_ char *path = xasprintf("/volumes?filters=%s", fesc);
        int r = docker_call(d, "GET", path, NULL, 0, &resp);
        if (r < 0)
                return r;
        const cJSON *vols = cJSON_GetObjectItemCaseSensitive(resp.json, "Volumes");
        size_t n = 0, cap = (size_t) cJSON_GetArraySize(vols);
        struct docker_volume_info *v = xnew0(struct docker_volume_info, cap ? cap : 1);
        const cJSON *x;
        cJSON_ArrayForEach(x, vols) {
                const char *name = json_str(x, "Name"), *at = json_str(x, "CreatedAt");
                /* the name filter matches anywhere in the name: keep those that start with it */
                if (!name || (prefix && strncmp(name, prefix, strlen(prefix)) != 0))
                        continue;
                struct tm tm = { 0 };
                const char *end = at ? strptime(at, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
                const char *lv = label ? json_str(cJSON_GetObjectItemCaseSensitive(x, "Labels"), label) : NULL;
                v[n].label = lv ? xstrdup(lv) : NULL;
                v[n].name = xstrdup(name);
                v[n].created_s = end ? (int64_t) timegm(&tm) : 0;   /* unknown: 0, the caller decides */
                n++;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int docker_volume_list_dangling(struct docker *d, const char *prefix, struct docker_volume_info **ret, size_t *ret_n) {
        return prefix ? volume_list_dangling(d, prefix, NULL, ret, ret_n) : -EINVAL;
}

int docker_volume_list_dangling_labelled(struct docker *d, const char *label, struct docker_volume_info **ret,
                                         size_t *ret_n) {
        return volume_list_dangling(d, NULL, label, ret, ret_n);
}

void docker_volume_info_free(struct docker_volume_info *v, size_t n) {
        for (size_t i = 0; v && i < n; i++)
                free_many(v[i].name, v[i].label);
        free(v);
}

/* Docker resolves /networks/{x} by id, exact name or id prefix; only an exact name
 * match counts. Returns 0 with *ret_id set, -ENOENT, or another error. */
static int network_lookup(struct docker *d, const char *name, char **ret_id) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        int r = dcall_path(d, "GET", 0, &resp, "/networks/%s", name);
        if (r < 0)
                return r;
        const char *n = json_str(resp.json, "Name"), *id = json_str(resp.json, "Id");
        if (!n || !id || strcmp(n, name) != 0) {
                docker_set_error("network %s not found", name);
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
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_json_ cJSON *b = NULL;
        _cleanup_free_ char *id = NULL;
        int r;

        if (!docker_valid_name(name) || !labels_valid(labels, n))
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
        r = docker_call(d, "POST", "/networks/create", b, 0, &resp);
        if (r == -EEXIST) {          /* created concurrently by someone else */
                docker_clear_error();
                return 0;
        }
        return r;
}

int docker_network_remove(struct docker *d, const char *name) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_free_ char *id = NULL;
        if (!docker_valid_name(name))
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
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(id))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/containers/%s/stats?stream=false&one-shot=true", id);
        if (r < 0)
                return r;
        if (!cJSON_IsObject(resp.json)) {
                docker_set_error("stats returned no object");
                return -EBADMSG;
        }

        struct docker_stats s = {};
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(resp.json, "memory_stats");
        const cJSON *usage = cJSON_GetObjectItemCaseSensitive(mem, "usage");
        if (cJSON_IsNumber(usage)) {
                const cJSON *ms = cJSON_GetObjectItemCaseSensitive(mem, "stats");
                /* like the docker CLI: cgroup v1 total_inactive_file, v2 inactive_file */
                double inactive = cJSON_HasObjectItem(ms, "total_inactive_file") ? docker_json_num(ms, "total_inactive_file")
                                                                                   : docker_json_num(ms, "inactive_file");
                double u = usage->valuedouble;
                s.mem_usage = (uint64_t) (inactive > 0 && inactive < u ? u - inactive : u);
                s.mem_limit = (uint64_t) docker_json_num(mem, "limit");
                s.valid = true;
        }

        const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(resp.json, "cpu_stats");
        const cJSON *pre = cJSON_GetObjectItemCaseSensitive(resp.json, "precpu_stats");
        double cpu_total = docker_json_num(cJSON_GetObjectItemCaseSensitive(cpu, "cpu_usage"), "total_usage");
        double pre_total = docker_json_num(cJSON_GetObjectItemCaseSensitive(pre, "cpu_usage"), "total_usage");
        double sys = docker_json_num(cpu, "system_cpu_usage"), pre_sys = docker_json_num(pre, "system_cpu_usage");
        double ncpu = docker_json_num(cpu, "online_cpus");
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
                s.net_rx += (uint64_t) docker_json_num(n, "rx_bytes");
                s.net_tx += (uint64_t) docker_json_num(n, "tx_bytes");
        }
        *ret = s;
        return 0;
}

int docker_image_exists(struct docker *d, const char *ref) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/images/%s/json", ref);
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
        if (!valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/images/%s/json", ref);
        if (r < 0)
                return r;
        return docker_config_volumes(cJSON_GetObjectItemCaseSensitive(resp.json, "Config"), ret);
}

int docker_image_remove(struct docker *d, const char *ref, bool force) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "DELETE", TIMEOUT_REMOVE_MS, &resp, "/images/%s?force=%d&noprune=0", ref, force);
        return r == -EEXIST ? -EBUSY : r;
}

int docker_commit(struct docker *d, const char *container, const char *repo, const char *tag, char **ret_image_id) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        _cleanup_json_ cJSON *b = cJSON_CreateObject();
        const char *t = tag ? tag : "latest";
        if (!docker_valid_name(container) || !valid_ref(repo) || strchr(repo, '@') || !valid_tag(t))
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
                c->size = (int64_t) docker_json_num(aux, "Size");
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
        if (!valid_ref(name) || strchr(name, '@') || !(valid_tag(tag) || (!push && docker_valid_digest(tag))) || !valid_b64(auth))
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
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!valid_ref(ref))
                return -EINVAL;
        int r = dcall_path(d, "GET", 0, &resp, "/images/%s/json", ref);
        if (r < 0)
                return r;
        if (ret_size)
                *ret_size = (int64_t) docker_json_num(resp.json, "Size");
        return 0;
}

