/* docker-container.c — Docker Engine API calls on containers, volumes and networks, and
 * container stats (docker.h; the request helper and shared checks are docker.c's). */
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

/* ---- containers --------------------------------------------------------------- */

/* The "Id" of a create call's answer, xstrdup'd into *ret when ret is not NULL;
 * -EBADMSG (what names the call) when it has none. */
int docker_answer_id(const struct docker_resp *resp, const char *what, char **ret) {
        const char *id = docker_json_str(resp->json, "Id");
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

        if (!o || !docker_valid_ref(o->image) || (o->name && !docker_valid_name(o->name)) ||
            !docker_labels_valid(o->labels, o->n_labels) || (o->n_mounts > 0 && !o->mounts))
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
        cJSON_AddItemToObject(b, "Labels", docker_labels_to_json(o->labels, o->n_labels));
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
        docker_copy_str(s.status, sizeof(s.status), docker_json_str(st, "Status"));
        docker_copy_str(s.started_at, sizeof(s.started_at), docker_json_str(st, "StartedAt"));
        docker_copy_str(s.finished_at, sizeof(s.finished_at), docker_json_str(st, "FinishedAt"));
        docker_copy_str(s.error, sizeof(s.error), docker_json_str(st, "Error"));
        docker_copy_str(s.id, sizeof(s.id), docker_json_str(resp.json, "Id"));
        {
                const char *nm = docker_json_str(resp.json, "Name");
                docker_copy_str(s.name, sizeof(s.name), nm && nm[0] == '/' ? nm + 1 : nm);
        }
        const cJSON *ns = cJSON_GetObjectItemCaseSensitive(resp.json, "NetworkSettings");
        const cJSON *nets = cJSON_GetObjectItemCaseSensitive(ns, "Networks");
        const cJSON *n;
        cJSON_ArrayForEach(n, nets) {
                const char *ip = docker_json_str(n, "IPAddress");
                if (ip && *ip) {
                        docker_copy_str(s.ip, sizeof(s.ip), ip);
                        break;
                }
        }
        *ret = s;
        return 0;
}

int docker_container_list(struct docker *d, const char *label_filter, char ***ret_ids) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!label_filter || !*label_filter || !ret_ids)
                return -EINVAL;
        int r = docker_filtered_list(d, "/containers/json?all=1&", "label", label_filter, "container list", &resp);
        if (r < 0)
                return r;
        size_t n = (size_t) cJSON_GetArraySize(resp.json), k = 0;
        char **v = xnew0(char *, n + 1);
        const cJSON *c;
        cJSON_ArrayForEach(c, resp.json) {
                const char *id = docker_json_str(c, "Id");
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

/* POST /volumes/create: name on the local driver with DriverOpts from opts (key, value
 * pairs up to a NULL key, in that order; NULL: none) and labels. name, labels checked. */
static int volume_create(struct docker *d, const char *name, const char *const *opts, const struct docker_kv *labels,
                         size_t n) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(name) || !docker_labels_valid(labels, n))
                return -EINVAL;
        _cleanup_json_ cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "Name", name);
        cJSON_AddStringToObject(b, "Driver", "local");
        if (opts) {
                cJSON *o = cJSON_AddObjectToObject(b, "DriverOpts");
                for (size_t i = 0; opts[i]; i += 2)
                        cJSON_AddStringToObject(o, opts[i], opts[i + 1]);
        }
        cJSON_AddItemToObject(b, "Labels", docker_labels_to_json(labels, n));
        return docker_call(d, "POST", "/volumes/create", b, 0, &resp);
}

int docker_volume_create_bind(struct docker *d, const char *name, const char *device, const struct docker_kv *labels,
                              size_t n) {
        if (device && device[0] != '/')
                return -EINVAL;
        const char *const opts[] = { "type", "none", "o", "bind", "device", device, NULL };
        return volume_create(d, name, device ? opts : NULL, labels, n);
}

int docker_volume_create_tmpfs(struct docker *d, const char *name, int64_t size_bytes, const struct docker_kv *labels,
                               size_t n) {
        if (size_bytes <= 0)
                return -EINVAL;
        char size[128];
        snprintf(size, sizeof(size), "size=%" PRId64 ",mode=0700,nosuid,nodev,noexec", size_bytes);
        const char *const opts[] = { "type", "tmpfs", "device", "tmpfs", "o", size, NULL };
        return volume_create(d, name, opts, labels, n);
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
                const char *name = docker_json_str(x, "Name"), *at = docker_json_str(x, "CreatedAt");
                /* the name filter matches anywhere in the name: keep those that start with it */
                if (!name || (prefix && strncmp(name, prefix, strlen(prefix)) != 0))
                        continue;
                struct tm tm = { 0 };
                const char *end = at ? strptime(at, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
                const char *lv = label ? docker_json_str(cJSON_GetObjectItemCaseSensitive(x, "Labels"), label) : NULL;
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
        const char *n = docker_json_str(resp.json, "Name"), *id = docker_json_str(resp.json, "Id");
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

        if (!docker_valid_name(name) || !docker_labels_valid(labels, n))
                return -EINVAL;
        r = network_lookup(d, name, &id);
        if (r != -ENOENT)
                return r < 0 ? r : 0;

        b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "Name", name);
        cJSON_AddBoolToObject(b, "CheckDuplicate", true);
        cJSON_AddStringToObject(b, "Driver", "bridge");
        cJSON_AddBoolToObject(b, "Internal", internal);
        cJSON_AddItemToObject(b, "Labels", docker_labels_to_json(labels, n));
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
