/* nomad-wire.c — the Nomad driver's pure parts: the job and volume bodies we register, and the
 * readers of Nomad's answers (allocations, evaluations, job lists, exec frames). No I/O, so
 * tests feed them canned answers (PROTOCOLS.md section 1). */
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>

#include "cleanup.h"
#include "controld.h"
#include "guest-conn.h"
#include "guest-secret.h"
#include "nomad-wire.h"
#include "driver.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "userimage.h"
#include "ws.h"

/* ---- the pure parts ---- */

char *nomad_job_id(const char *sandbox_id) { return xasprintf("sandbox-%s", sandbox_id); }

char *nomad_network_mode(const struct config *cfg, enum pj_egress_mode m) {
        const char *p = cfg->nomad_cni_open;
        switch (m) {
        case PJ_EGRESS_OPEN:
                p = cfg->nomad_cni_open;
                break;
        case PJ_EGRESS_RESTRICTED:
                p = cfg->nomad_cni_restricted;
                break;
        case PJ_EGRESS_DENY_ALL:
                p = cfg->nomad_cni_no_egress;
                break;
        }
        return xasprintf("cni/%s", p);
}

int64_t nomad_volume_bytes(int64_t size_gb) { return (size_gb > 0 ? size_gb : 1) * 1024 * 1024 * 1024; }

static cJSON *str_array(const char *const *v) {
        cJSON *a = cJSON_CreateArray();
        for (; v && *v; v++)
                cJSON_AddItemToArray(a, cJSON_CreateString(*v));
        return a;
}

cJSON *nomad_job_build(const struct config *cfg, const char *instance_id, const struct sandbox *sb,
                       const char *guest_secret) {
        _cleanup_free_ char *id = nomad_job_id(sb->id);
        _cleanup_free_ char *net = nomad_network_mode(cfg, sb->egress.mode);
        bool deny = sb->egress.mode == PJ_EGRESS_DENY_ALL;
        cJSON *root = cJSON_CreateObject();
        cJSON *job = cJSON_AddObjectToObject(root, "Job");
        json_add_str(job, "ID", id);
        json_add_str(job, "Name", id);
        json_add_str(job, "Type", "service");
        json_add_str(job, "Namespace", cfg->nomad_namespace);
        json_add_str(job, "Region", cfg->nomad_region);
        json_add_str(job, "NodePool", cfg->nomad_node_pool);
        cJSON_AddItemToObject(job, "Datacenters", str_array((const char *const *) cfg->nomad_datacenters));
        cJSON *meta = cJSON_AddObjectToObject(job, "Meta");
        json_add_str(meta, NOMAD_META_SANDBOX, sb->id);
        /* A warm-pool member is made for no account, and a claim cannot change a running job's
         * meta (Nomad would replace the allocation): it says it was pooled; the owner is in the
         * sandbox's record (controld admin sandbox list --account). */
        if (sb->account_id[0])
                json_add_str(meta, NOMAD_META_ACCOUNT, sb->account_id);
        else
                json_add_str(meta, NOMAD_META_POOLED, "1");
        json_add_str(meta, NOMAD_META_INSTANCE, instance_id);

        cJSON *groups = cJSON_AddArrayToObject(job, "TaskGroups");
        cJSON *g = cJSON_CreateObject();
        cJSON_AddItemToArray(groups, g);
        json_add_str(g, "Name", NOMAD_GROUP);
        json_add_int(g, "Count", 1);
        cJSON *rp = cJSON_AddObjectToObject(g, "RestartPolicy");
        json_add_int(rp, "Attempts", 0);
        json_add_str(rp, "Mode", "fail");
        json_add_int(rp, "Interval", 1800LL * 1000000000LL);   /* Nomad's defaults, in nanoseconds */
        json_add_int(rp, "Delay", 15LL * 1000000000LL);
        cJSON *sp = cJSON_AddObjectToObject(g, "ReschedulePolicy");
        json_add_int(sp, "Attempts", 0);
        json_add_bool(sp, "Unlimited", false);
        cJSON *nets = cJSON_AddArrayToObject(g, "Networks");
        cJSON *n0 = cJSON_CreateObject();
        json_add_str(n0, "Mode", net);
        cJSON_AddItemToArray(nets, n0);
        if (sb->volume_id) {
                _cleanup_free_ char *handle = xasprintf("paddock-vol-%s", sb->volume_id);
                cJSON *vols = cJSON_AddObjectToObject(g, "Volumes");
                cJSON *v = cJSON_AddObjectToObject(vols, NOMAD_VOLUME);
                json_add_str(v, "Name", NOMAD_VOLUME);
                json_add_str(v, "Type", "csi");
                json_add_str(v, "Source", handle);
                json_add_str(v, "AccessMode", "single-node-writer");
                json_add_str(v, "AttachmentMode", "file-system");
                json_add_bool(v, "ReadOnly", false);
                json_add_bool(v, "PerAlloc", false);
        }

        cJSON *tasks = cJSON_AddArrayToObject(g, "Tasks");
        cJSON *t = cJSON_CreateObject();
        cJSON_AddItemToArray(tasks, t);
        json_add_str(t, "Name", NOMAD_TASK);
        json_add_str(t, "Driver", "docker");
        cJSON *conf = cJSON_AddObjectToObject(t, "Config");
        json_add_str(conf, "image", sb->image);
        /* deny_all: runsc with --network=none; otherwise runsc inside the CNI namespace. */
        json_add_str(conf, "runtime", deny ? cfg->nomad_runtime : cfg->nomad_runtime_net);
        if (guest_secret) {
                /* PID 1 is the agent (nodeagent's relay reaches its socket in the tmpfs volume). */
                const char *ep[] = { GUEST_IN_BINARY, NULL };
                cJSON_AddItemToObject(conf, "entrypoint", str_array(ep));
                const char *args[] = { "--socket", GUEST_IN_SOCKET, "--secret-env", NOMAD_AGENT_SECRET_ENV, NULL };
                cJSON_AddItemToObject(conf, "args", str_array(args));
                cJSON *mounts = cJSON_AddArrayToObject(conf, "mounts");
                cJSON *bin = cJSON_CreateObject();
                json_add_str(bin, "type", "bind");
                json_add_str(bin, "source", cfg->nomad_agent_binary);
                json_add_str(bin, "target", GUEST_IN_BINARY);
                json_add_bool(bin, "readonly", true);
                cJSON_AddItemToArray(mounts, bin);
                cJSON *run = cJSON_CreateObject();
                _cleanup_free_ char *vol = xasprintf("%s%s", NOMAD_AGENT_VOLUME_PREFIX, sb->id);
                json_add_str(run, "type", "volume");
                json_add_str(run, "source", vol);
                json_add_str(run, "target", GUEST_IN_RUN);
                json_add_bool(run, "readonly", false);
                cJSON *vo = cJSON_AddObjectToObject(run, "volume_options");
                json_add_bool(vo, "no_copy", true);
                cJSON *dc = cJSON_AddObjectToObject(vo, "driver_config");
                json_add_str(dc, "name", "local");
                cJSON *opts = cJSON_AddArrayToObject(dc, "options");
                cJSON *o = cJSON_CreateObject();
                json_add_str(o, "type", "tmpfs");
                json_add_str(o, "device", "tmpfs");
                _cleanup_free_ char *mo = xasprintf("size=%d,mode=0700,nosuid,nodev,noexec", GUEST_RUN_BYTES);
                json_add_str(o, "o", mo);
                cJSON_AddItemToArray(opts, o);
                cJSON_AddItemToArray(mounts, run);
        } else {
                json_add_str(conf, "command", "/bin/sh");
                const char *args[] = { "-c", "tail -f /dev/null", NULL };
                cJSON_AddItemToObject(conf, "args", str_array(args));
        }
        json_add_bool(conf, "force_pull", false);
        /* An image's HEALTHCHECK would be run by the node's Docker, as often as the image says,
         * outside the sandbox's CPU quota: Nomad's docker driver sets {"Test":["NONE"]}. */
        json_add_bool(cJSON_AddObjectToObject(conf, "healthchecks"), "disable", true);
        /* A snapshot lives in the snapshot registry: Nomad's docker driver pulls it on a node
         * that lacks it, with these credentials (X-Registry-Auth). Template images are the
         * node's own business (pre-pulled or the docker plugin's auth config). */
        if ((sb->from_snapshot || userimage_is(cfg, sb->image)) && cfg->snap_username && *cfg->snap_username) {
                cJSON *auths = cJSON_AddArrayToObject(conf, "auth");
                cJSON *a = cJSON_CreateObject();
                cJSON_AddItemToArray(auths, a);
                json_add_str(a, "username", cfg->snap_username);
                json_add_str(a, "password", cfg->snap_password ? cfg->snap_password : "");
                json_add_str(a, "server_address", cfg->snap_registry);
        }
        json_add_int(conf, "pids_limit", cfg->nomad_pids_limit);
        const char *all[] = { "ALL", NULL };
        cJSON_AddItemToObject(conf, "cap_drop", str_array(all));
        /* Under runsc the capabilities live in the gVisor sentry, not on the host kernel. */
        cJSON_AddItemToObject(conf, "cap_add", str_array(all));
        const char *sec[] = { "no-new-privileges", NULL };
        cJSON_AddItemToObject(conf, "security_opt", str_array(sec));
        if (guest_secret) {
                cJSON *env = cJSON_AddObjectToObject(t, "Env");
                json_add_str(env, NOMAD_AGENT_SECRET_ENV, guest_secret);
        }
        cJSON *res = cJSON_AddObjectToObject(t, "Resources");
        json_add_int(res, "CPU", sb->cpu);
        json_add_int(res, "MemoryMB", sb->memory);
        json_add_int(res, "MemoryMaxMB", sb->memory * 5 / 4);   /* as the docker driver: 25% burst */
        if (sb->volume_id) {
                cJSON *vms = cJSON_AddArrayToObject(t, "VolumeMounts");
                cJSON *m = cJSON_CreateObject();
                json_add_str(m, "Volume", NOMAD_VOLUME);
                json_add_str(m, "Destination", sb->mount_path ? sb->mount_path : "/workspace");
                json_add_bool(m, "ReadOnly", false);
                cJSON_AddItemToArray(vms, m);
        }
        return root;
}

int nomad_job_add_tmpfs(cJSON *body, const char *const *paths, int64_t bytes) {
        cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
                cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(body, "Job"), "TaskGroups"), 0),
                "Tasks"), 0);
        cJSON *conf = cJSON_GetObjectItemCaseSensitive(t, "Config");
        if (!conf)
                return -EINVAL;
        cJSON *mounts = cJSON_GetObjectItemCaseSensitive(conf, "mounts");
        if (!mounts)
                mounts = cJSON_AddArrayToObject(conf, "mounts");
        int added = 0;
        for (; paths && *paths; paths++) {
                bool taken = false;
                const cJSON *m;
                cJSON_ArrayForEach(m, mounts)
                        taken = taken || !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "target")) ?: "", *paths);
                cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(t, "VolumeMounts"))
                        taken = taken ||
                                !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, "Destination")) ?: "", *paths);
                if (taken)
                        continue;
                cJSON *x = cJSON_CreateObject();
                json_add_str(x, "type", "tmpfs");
                json_add_str(x, "target", *paths);
                json_add_bool(x, "readonly", false);
                json_add_int(cJSON_AddObjectToObject(x, "tmpfs_options"), "size", bytes);
                cJSON_AddItemToArray(mounts, x);
                added++;
        }
        if (!cJSON_GetArraySize(mounts))
                cJSON_DeleteItemFromObjectCaseSensitive(conf, "mounts");
        return added;
}

cJSON *nomad_volume_build(const struct config *cfg, const char *handle, int64_t size_gb) {
        cJSON *root = cJSON_CreateObject();
        cJSON *vols = cJSON_AddArrayToObject(root, "Volumes");
        cJSON *v = cJSON_CreateObject();
        cJSON_AddItemToArray(vols, v);
        json_add_str(v, "ID", handle);
        json_add_str(v, "Name", handle);
        json_add_str(v, "Namespace", cfg->nomad_namespace);
        json_add_str(v, "PluginID", cfg->nomad_csi_plugin_id);
        json_add_int(v, "RequestedCapacityMin", nomad_volume_bytes(size_gb));
        json_add_int(v, "RequestedCapacityMax", nomad_volume_bytes(size_gb));
        cJSON *caps = cJSON_AddArrayToObject(v, "RequestedCapabilities");
        cJSON *c0 = cJSON_CreateObject();
        json_add_str(c0, "AccessMode", "single-node-writer");
        json_add_str(c0, "AttachmentMode", "file-system");
        cJSON_AddItemToArray(caps, c0);
        return root;
}

void nomad_alloc_clear(struct nomad_alloc *a) {
        if (!a)
                return;
        free_many(a->id, a->node_id, a->client_status, a->desired_status, a->reason);
        memset(a, 0, sizeof(*a));
}

char *nomad_str_or_null(const char *s) { return s && *s ? xstrdup(s) : NULL; }

/* The latest event of any task that says something about a failure (or, with any = true,
 * the latest event at all: what a pending allocation waits for). */
static char *task_events_reason(const cJSON *task_states, bool any) {
        const cJSON *best = NULL;
        int64_t best_time = -1;
        const cJSON *ts;
        cJSON_ArrayForEach(ts, task_states) {
                const cJSON *ev;
                cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(ts, "Events")) {
                        const char *type = json_get_str(ev, "Type");
                        const cJSON *fails = cJSON_GetObjectItemCaseSensitive(ev, "FailsTask");
                        int64_t code = 0, tm = 0;
                        (void) json_get_int(ev, "ExitCode", &code);
                        (void) json_get_int(ev, "Time", &tm);
                        bool bad = cJSON_IsTrue(fails) || (type && (!strcmp(type, "Driver Failure") ||
                                                                   !strcmp(type, "Setup Failure") ||
                                                                   !strcmp(type, "Failed Validation") ||
                                                                   !strcmp(type, "Not Restarting") ||
                                                                   (!strcmp(type, "Terminated") && code != 0)));
                        if (!bad && !any)
                                continue;
                        /* Among failures prefer the cause over "Not Restarting"/"Killing" that follow it. */
                        if (!any && best && type && !strcmp(type, "Not Restarting"))
                                continue;
                        if (tm >= best_time) {
                                best = ev;
                                best_time = tm;
                        }
                }
        }
        if (!best)
                return NULL;
        const char *type = json_get_str(best, "Type");
        const char *msg = json_get_str(best, "DisplayMessage");
        if (!msg || !*msg)
                msg = json_get_str(best, "DriverError");
        if (!msg || !*msg)
                msg = json_get_str(best, "Message");
        int64_t code = 0, sig = 0;
        (void) json_get_int(best, "ExitCode", &code);
        (void) json_get_int(best, "Signal", &sig);
        if (msg && *msg)
                return xasprintf("%s: %s", type ? type : "task event", msg);
        if (code || sig)
                return xasprintf("%s: exit code %lld, signal %lld", type ? type : "task event", (long long) code,
                                 (long long) sig);
        return type ? xstrdup(type) : NULL;
}

char *nomad_task_reason(const cJSON *task_states) { return task_events_reason(task_states, false); }

int nomad_alloc_parse(const cJSON *a, struct nomad_alloc *ret) {
        const char *id = json_get_str(a, "ID");
        if (!id || !*id)
                return -EINVAL;
        struct nomad_alloc x = { 0 };
        x.id = xstrdup(id);
        x.node_id = nomad_str_or_null(json_get_str(a, "NodeID"));
        x.client_status = xstrdup(json_get_str(a, "ClientStatus") ?: "pending");
        x.desired_status = xstrdup(json_get_str(a, "DesiredStatus") ?: "run");
        (void) json_get_int(a, "CreateIndex", &x.create_index);
        (void) json_get_int(a, "ModifyIndex", &x.modify_index);
        const cJSON *states = cJSON_GetObjectItemCaseSensitive(a, "TaskStates");
        const cJSON *task = cJSON_GetObjectItemCaseSensitive(states, NOMAD_TASK);
        const char *tstate = json_get_str(task, "State");
        const char *cs = x.client_status;
        if (!strcmp(cs, "failed") || !strcmp(cs, "lost") || !strcmp(cs, "unknown")) {
                x.phase = NOMAD_ALLOC_FAILED;
                x.reason = nomad_task_reason(states);
                if (!x.reason) {
                        const char *d = json_get_str(a, "ClientDescription");
                        x.reason = d && *d ? xasprintf("allocation %s: %s", cs, d)
                                           : xasprintf(!strcmp(cs, "lost") ? "allocation lost: its node stopped answering"
                                                                           : "allocation %s", cs);
                }
        } else if (!strcmp(cs, "complete") || strcmp(x.desired_status, "run") != 0) {
                x.phase = NOMAD_ALLOC_STOPPED;
                x.reason = nomad_task_reason(states);
                if (!x.reason) {
                        const char *d = json_get_str(a, "DesiredDescription");
                        x.reason = d && *d ? xasprintf("allocation stopped: %s", d) : xasprintf("allocation %s", cs);
                }
        } else if (!strcmp(cs, "running") && (!tstate || !strcmp(tstate, "running"))) {
                x.phase = NOMAD_ALLOC_RUNNING;
        } else if (tstate && !strcmp(tstate, "dead")) {
                x.phase = NOMAD_ALLOC_FAILED;
                x.reason = nomad_task_reason(states) ?: xstrdup("the task stopped");
        } else {
                x.phase = NOMAD_ALLOC_PENDING;
                x.reason = task_events_reason(states, true);
        }
        *ret = x;
        return 0;
}

int nomad_allocs_pick(const cJSON *stubs, int64_t min_create_index, struct nomad_alloc *ret) {
        if (!cJSON_IsArray(stubs))
                return -EINVAL;
        const cJSON *best = NULL, *a;
        int64_t best_idx = -1;
        cJSON_ArrayForEach(a, stubs) {
                int64_t ci = 0;
                (void) json_get_int(a, "CreateIndex", &ci);
                if (ci < min_create_index || ci < best_idx || !json_get_str(a, "ID"))
                        continue;
                best = a;
                best_idx = ci;
        }
        if (!best)
                return 0;
        return nomad_alloc_parse(best, ret) < 0 ? 0 : 1;
}

bool nomad_allocs_any_live(const cJSON *stubs) {
        const cJSON *a;
        cJSON_ArrayForEach(a, stubs) {
                const char *cs = json_get_str(a, "ClientStatus");
                if (cs && (!strcmp(cs, "pending") || !strcmp(cs, "running")))
                        return true;
        }
        return false;
}

char *nomad_alloc_address(const cJSON *alloc) {
        const cJSON *ns = cJSON_GetObjectItemCaseSensitive(alloc, "NetworkStatus");
        return nomad_str_or_null(json_get_str(ns, "Address"));
}

/* One line from an AllocMetric: what the scheduler tried and why no node fit. */
static void metric_summary(struct strbuf *b, const cJSON *m) {
        int64_t evaluated = 0, filtered = 0, exhausted = 0;
        (void) json_get_int(m, "NodesEvaluated", &evaluated);
        (void) json_get_int(m, "NodesFiltered", &filtered);
        (void) json_get_int(m, "NodesExhausted", &exhausted);
        strbuf_printf(b, "%lld nodes evaluated", (long long) evaluated);
        const char *maps[] = { "ConstraintFiltered", "ClassFiltered", "DimensionExhausted", "ClassExhausted" };
        const char *names[] = { "filtered by", "filtered by class", "exhausted", "exhausted in class" };
        for (size_t i = 0; i < ELEMENTSOF(maps); i++) {
                const cJSON *e;
                cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(m, maps[i])) {
                        if (e->string)
                                strbuf_printf(b, "; %s %s (%d)", names[i], e->string, cJSON_IsNumber(e) ? e->valueint : 0);
                }
        }
        if (filtered)
                strbuf_printf(b, "; %lld filtered", (long long) filtered);
        if (exhausted)
                strbuf_printf(b, "; %lld out of resources", (long long) exhausted);
}

char *nomad_eval_failure(const cJSON *eval, bool *ret_done) {
        const char *st = json_get_str(eval, "Status");
        bool done = st && (!strcmp(st, "complete") || !strcmp(st, "failed") || !strcmp(st, "canceled"));
        if (ret_done)
                *ret_done = done;
        if (!done)
                return NULL;
        if (strcmp(st, "complete") != 0) {
                const char *d = json_get_str(eval, "StatusDescription");
                return xasprintf("Nomad's evaluation %s%s%s", st, d && *d ? ": " : "", d && *d ? d : "");
        }
        const cJSON *failed = cJSON_GetObjectItemCaseSensitive(eval, "FailedTGAllocs");
        const cJSON *g;
        cJSON_ArrayForEach(g, failed) {
                struct strbuf b;
                strbuf_init(&b, 1024);
                strbuf_printf(&b, "no Nomad node could place the sandbox (");
                metric_summary(&b, g);
                strbuf_printf(&b, ")");
                return strbuf_steal(&b);
        }
        return NULL;
}

char **nomad_jobs_filter(const cJSON *jobs, const char *instance, size_t *ret_need_meta) {
        size_t n = (size_t) cJSON_GetArraySize(jobs), k = 0, need = 0;
        char **out = xnew0(char *, n + 1);
        const cJSON *j;
        cJSON_ArrayForEach(j, jobs) {
                const char *id = json_get_str(j, "ID");
                const char *status = json_get_str(j, "Status");
                if (!id || !startswith(id, "sandbox-") || !hexid_valid(id + 8))
                        continue;
                /* A dead job is a paused sandbox (scaled to 0): its record decides, not the reaper. */
                if (status && !strcmp(status, "dead"))
                        continue;
                const cJSON *meta = cJSON_GetObjectItemCaseSensitive(j, "Meta");
                if (!cJSON_IsObject(meta)) {
                        need++;
                        continue;
                }
                const char *inst = json_get_str(meta, NOMAD_META_INSTANCE);
                if (!inst || strcmp(inst, instance) != 0)
                        continue;
                out[k++] = xstrdup(id + 8);
        }
        if (ret_need_meta)
                *ret_need_meta = need;
        return out;
}

void nomad_exec_frame_done(struct nomad_exec_frame *f) {
        if (!f)
                return;
        free(f->data);
        memset(f, 0, sizeof(*f));
}

int nomad_exec_frame_parse(const char *text, size_t len, struct nomad_exec_frame *ret) {
        _cleanup_json_ cJSON *j = NULL;
        struct err perr = { 0 };
        if (json_parse(text, len, NOMAD_EXEC_MAX_MESSAGE * 2, 8, &j, &perr) < 0 || !cJSON_IsObject(j))
                return -EBADMSG;
        struct nomad_exec_frame f = { 0 };
        const cJSON *ex = cJSON_GetObjectItemCaseSensitive(j, "exited");
        if (cJSON_IsTrue(ex)) {
                int64_t code = 0;
                (void) json_get_int(cJSON_GetObjectItemCaseSensitive(j, "result"), "exit_code", &code);
                f.exited = true;
                f.exit_code = (int) code;
                *ret = f;
                return 0;
        }
        const char *names[] = { "stdout", "stderr" };
        for (int i = 0; i < 2; i++) {
                const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, names[i]);
                if (!s)
                        continue;
                if (!cJSON_IsObject(s))
                        return -EBADMSG;
                f.stream = i + 1;
                f.closed = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "close"));
                const char *d = json_get_str(s, "data");
                if (d && *d && base64_decode(d, strlen(d), &f.data, &f.len) < 0)
                        return -EBADMSG;
                *ret = f;
                return 0;
        }
        /* Other frames (e.g. a heartbeat {}) carry nothing for us. */
        *ret = f;
        return 0;
}

char *nomad_exec_stdin_frame(const void *data, size_t len) {
        _cleanup_free_ char *b = base64_encode(data, len, NULL);
        return xasprintf("{\"stdin\":{\"data\":\"%s\"}}", b);
}

/* Nomad's exec takes a bare argv: no environment or working directory of its own. */
static const char exec_wrapper[] = "cd -- \"$0\" || exit 126; exec env -- \"$@\"";

char *nomad_exec_command(const struct exec_spec *spec) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();
        bool wrap = (spec->cwd && strcmp(spec->cwd, "/") != 0) || (spec->env && spec->env[0]);
        if (wrap) {
                cJSON_AddItemToArray(a, cJSON_CreateString("/bin/sh"));
                cJSON_AddItemToArray(a, cJSON_CreateString("-c"));
                cJSON_AddItemToArray(a, cJSON_CreateString(exec_wrapper));
                cJSON_AddItemToArray(a, cJSON_CreateString(spec->cwd ? spec->cwd : "/"));
                for (const char *const *e = spec->env; e && *e; e++)
                        cJSON_AddItemToArray(a, cJSON_CreateString(*e));
        }
        for (const char *const *p = spec->argv; p && *p; p++)
                cJSON_AddItemToArray(a, cJSON_CreateString(*p));
        return json_print(a);
}

