/* driver-nomad.c — production scheduling: every sandbox is a Nomad job on the sandbox node pool.
 *
 * One service job per sandbox, "sandbox-<id>", one group of count 1 that never restarts or
 * reschedules (a lost host fails the sandbox; it is never silently moved), network
 * cni/<profile> by egress mode, a docker task under gVisor. Placement waits with blocking
 * queries (index/wait) on the evaluation and then the allocations, never by polling in a tight
 * loop. A failed placement purges the job. Pause and resume scale the group to 0 and 1.
 * Exec and file transfer go over Nomad's alloc exec WebSocket, on a libcurl CONNECT_ONLY
 * connection (so TLS and mTLS are libcurl's) with common/ws framing.
 *
 * Wire facts: shared/reference/PROTOCOLS.md section 1. The pure parts (job builder, answer
 * parsers, exec frames) are declared in driver-nomad.h and unit-tested with canned answers.
 */
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
#include "driver-nomad.h"
#include "driver.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "ws.h"

#define NOMAD_MAX_RESPONSE ((size_t) 16 << 20)
#define EXEC_MAX_MESSAGE ((size_t) 4 << 20)
#define EXEC_HEARTBEAT_MS 10000

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

cJSON *nomad_job_build(const struct config *cfg, const char *instance_id, const struct sandbox *sb) {
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
        json_add_str(meta, NOMAD_META_ACCOUNT, sb->account_id);
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
        json_add_str(conf, "command", "/bin/sh");
        const char *args[] = { "-c", "tail -f /dev/null", NULL };
        cJSON_AddItemToObject(conf, "args", str_array(args));
        json_add_bool(conf, "force_pull", false);
        /* A snapshot lives in the snapshot registry: Nomad's docker driver pulls it on a node
         * that lacks it, with these credentials (X-Registry-Auth). Template images are the
         * node's own business (pre-pulled or the docker plugin's auth config). */
        if (sb->from_snapshot && cfg->snap_username && *cfg->snap_username) {
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

static char *dup_or_null(const char *s) { return s && *s ? xstrdup(s) : NULL; }

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
        x.node_id = dup_or_null(json_get_str(a, "NodeID"));
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
        return dup_or_null(json_get_str(ns, "Address"));
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
        char perr[128];
        if (json_parse(text, len, EXEC_MAX_MESSAGE * 2, 8, &j, perr, sizeof(perr)) < 0 || !cJSON_IsObject(j))
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

/* ---- talking to Nomad ---- */

struct ndriver {
        struct config *cfg;
        char *base;              /* address without a trailing slash */
        char *hostport;          /* Host header of the exec upgrade */
        char *token_header;      /* "X-Nomad-Token: ..." or NULL */
};

static struct ndriver *N(struct driver *d) { return d->priv; }

struct nresp {
        long status;
        struct strbuf body;
        int64_t index;           /* X-Nomad-Index, 0 when absent */
        char curl_error[CURL_ERROR_SIZE];
};

static void nresp_done(struct nresp *r) { strbuf_done(&r->body); }

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
        struct nresp *r = ud;
        return strbuf_append(&r->body, p, sz * n) < 0 ? 0 : sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
        struct nresp *r = ud;
        size_t len = sz * n;
        static const char h[] = "x-nomad-index:";
        if (len > sizeof(h) - 1 && !strncasecmp(p, h, sizeof(h) - 1)) {
                char buf[32];
                size_t k = len - (sizeof(h) - 1);
                if (k >= sizeof(buf))
                        k = sizeof(buf) - 1;
                memcpy(buf, p + sizeof(h) - 1, k);
                buf[k] = 0;
                r->index = strtoll(buf, NULL, 10);
        }
        return len;
}

static void curl_tls(struct ndriver *n, CURL *h) {
        httpc_tls_files(h, n->cfg->nomad_ca_file, n->cfg->nomad_cert_file, n->cfg->nomad_key_file);
}

/* The query string every request carries: namespace and region from the config. */
static char *common_query(struct ndriver *n) {
        CURL *h = curl_easy_init();
        char *ns = curl_easy_escape(h, n->cfg->nomad_namespace, 0);
        char *rg = curl_easy_escape(h, n->cfg->nomad_region, 0);
        char *q = xasprintf("namespace=%s&region=%s", ns, rg);
        curl_free(ns);
        curl_free(rg);
        curl_easy_cleanup(h);
        return q;
}

static char *esc(const char *s) {
        CURL *h = curl_easy_init();
        char *e = curl_easy_escape(h, s, 0);
        char *r = xstrdup(e);
        curl_free(e);
        curl_easy_cleanup(h);
        return r;
}

/* One request to Nomad. 0 when an HTTP answer came (any status), -EHOSTUNREACH when Nomad did
 * not answer (err says why). timeout_ms 0 = [nomad] request_timeout. */
static int nomad_call(struct ndriver *n, const char *method, const char *path, const char *query, const cJSON *body,
                      long timeout_ms, struct nresp *ret, char *err, size_t errlen) {
        _cleanup_free_ char *cq = common_query(n);
        _cleanup_free_ char *url = xasprintf("%s%s?%s%s%s", n->base, path, cq, query ? "&" : "", query ? query : "");
        _cleanup_free_ char *text = body ? json_print(body) : NULL;
        struct curl_slist *hdrs = NULL;
        CURL *h = curl_easy_init();
        if (!h) {
                fmt_err(err, errlen, "libcurl failed to start");
                return -ENOMEM;
        }
        memset(ret, 0, sizeof(*ret));
        strbuf_init(&ret->body, NOMAD_MAX_RESPONSE);
        if (n->token_header)
                hdrs = curl_slist_append(hdrs, n->token_header);
        if (text)
                hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (text) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) strlen(text));
        } else if (!strcmp(method, "GET"))
                curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : (long) n->cfg->nomad_request_timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, ret);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, ret);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ret->curl_error);
        curl_tls(n, h);
        CURLcode cc = curl_easy_perform(h);
        if (cc == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
        curl_easy_cleanup(h);
        curl_slist_free_all(hdrs);
        if (cc != CURLE_OK) {
                fmt_err(err, errlen, "Nomad at %s did not answer %s %s: %s", n->cfg->nomad_addr, method, path,
                        ret->curl_error[0] ? ret->curl_error : curl_easy_strerror(cc));
                nresp_done(ret);
                return cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
        }
        return 0;
}

/* Nomad's text/plain error as one clean line (first line, at most 300 bytes). */
static void nomad_error(const struct nresp *r, const char *what, char *err, size_t errlen) {
        char msg[301];
        size_t k = 0;
        for (size_t i = 0; i < r->body.len && k < sizeof(msg) - 1; i++) {
                char ch = r->body.buf[i];
                if (ch == '\n' || ch == '\r')
                        break;
                msg[k++] = (unsigned char) ch < 0x20 ? ' ' : ch;
        }
        msg[k] = 0;
        if (r->status == 403)
                fmt_err(err, errlen, "%s: Nomad refused the ACL token (%s); check [nomad] token", what,
                        k ? msg : "Permission denied");
        else
                fmt_err(err, errlen, "%s: Nomad answered %ld%s%s", what, r->status, k ? ": " : "", msg);
}

static int status_errno(long status) {
        switch (status) {
        case 404:
                return -ENOENT;
        case 403:
                return -EACCES;
        case 400:
                return -EINVAL;
        default:
                return -EREMOTEIO;
        }
}

/* A request whose answer must be 2xx; the JSON body (if any) in *ret_json. */
static int nomad_json(struct ndriver *n, const char *method, const char *path, const char *query, const cJSON *body,
                      const char *what, cJSON **ret_json, int64_t *ret_index, char *err, size_t errlen) {
        struct nresp r;
        int k = nomad_call(n, method, path, query, body, 0, &r, err, errlen);
        if (k < 0)
                return k;
        if (r.status < 200 || r.status > 299) {
                nomad_error(&r, what, err, errlen);
                k = status_errno(r.status);
                nresp_done(&r);
                return k;
        }
        if (ret_index)
                *ret_index = r.index;
        if (ret_json) {
                char perr[128];
                *ret_json = NULL;
                if (r.body.len && json_parse(r.body.buf, r.body.len, NOMAD_MAX_RESPONSE, 64, ret_json, perr, sizeof(perr)) < 0) {
                        fmt_err(err, errlen, "%s: Nomad's answer is not JSON (%s)", what, perr);
                        nresp_done(&r);
                        return -EBADMSG;
                }
        }
        nresp_done(&r);
        return 0;
}

/* A blocking query: returns when Nomad's index for path passes *index or after wait_ms.
 * Updates *index. A server that answers at once without a newer index (which Nomad never
 * does) is slowed down here, so a misbehaving endpoint cannot turn this into a storm. */
static int nomad_block(struct ndriver *n, const char *path, const char *query, int64_t *index, int64_t wait_ms,
                       const char *what, cJSON **ret_json, char *err, size_t errlen) {
        _cleanup_free_ char *q = xasprintf("%s%sindex=%lld&wait=%lldms", query ? query : "", query ? "&" : "",
                                           (long long) *index, (long long) wait_ms);
        struct nresp r;
        int64_t t0 = mono_ms();
        int k = nomad_call(n, "GET", path, q, NULL, (long) (wait_ms + wait_ms / 16 + n->cfg->nomad_request_timeout_ms), &r,
                           err, errlen);
        if (k < 0)
                return k;
        if (r.status != 200) {
                nomad_error(&r, what, err, errlen);
                k = status_errno(r.status);
                nresp_done(&r);
                return k;
        }
        char perr[128];
        k = json_parse(r.body.buf, r.body.len, NOMAD_MAX_RESPONSE, 64, ret_json, perr, sizeof(perr));
        if (k < 0) {
                fmt_err(err, errlen, "%s: Nomad's answer is not JSON (%s)", what, perr);
                nresp_done(&r);
                return -EBADMSG;
        }
        if (*index > 0 && r.index <= *index && mono_ms() - t0 < wait_ms / 2)
                usleep(250 * 1000);
        /* An index that went backwards (a new leader, a restored snapshot) restarts the watch. */
        *index = r.index > 0 ? r.index : 1;
        nresp_done(&r);
        return 0;
}

static void ctx_ids(const char *job, const char *alloc) {
        log_ctx_set("NOMAD_JOB_ID", job);
        log_ctx_set("ALLOC_ID", alloc);
}

static int deregister(struct ndriver *n, const char *job, char *err, size_t errlen) {
        _cleanup_free_ char *path = xasprintf("/v1/job/%s", job);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "DELETE", path, "purge=true", NULL, "deregistering the job", &j, NULL, err, errlen);
        return r == -ENOENT ? 0 : r;   /* Nomad answers 200 for an unknown job; a 404 means the same */
}

/* Waits (blocking queries, bounded) until the allocation no longer runs or is gone. */
static void wait_alloc_stopped(struct ndriver *n, const char *alloc, int64_t timeout_ms) {
        _cleanup_free_ char *path = xasprintf("/v1/allocation/%s", alloc);
        int64_t index = 0, deadline = mono_ms() + timeout_ms;
        char err[256];
        for (;;) {
                int64_t left = deadline - mono_ms();
                if (left <= 0) {
                        log_warning("allocation %s still running %llds after it was stopped", alloc,
                                    (long long) (timeout_ms / 1000));
                        return;
                }
                _cleanup_json_ cJSON *a = NULL;
                int r = nomad_block(n, path, NULL, &index, left < (int64_t) n->cfg->nomad_blocking_wait_ms
                                                                   ? left
                                                                   : (int64_t) n->cfg->nomad_blocking_wait_ms,
                                    "reading the allocation", &a, err, sizeof(err));
                if (r == -ENOENT)
                        return;
                if (r < 0) {
                        log_warning("could not follow the stopping allocation: %s", err);
                        return;
                }
                const char *cs = json_get_str(a, "ClientStatus");
                if (cs && strcmp(cs, "pending") != 0 && strcmp(cs, "running") != 0)
                        return;
        }
}

static int scale(struct ndriver *n, const char *job, int count, const char *why, char **ret_eval, int64_t *ret_index,
                 char *err, size_t errlen) {
        _cleanup_free_ char *path = xasprintf("/v1/job/%s/scale", job);
        _cleanup_json_ cJSON *body = cJSON_CreateObject();
        _cleanup_json_ cJSON *j = NULL;
        json_add_int(body, "Count", count);
        cJSON *t = cJSON_AddObjectToObject(body, "Target");
        json_add_str(t, "Job", job);
        json_add_str(t, "Group", NOMAD_GROUP);
        json_add_str(body, "Message", why);
        int64_t hidx = 0;
        int r = nomad_json(n, "POST", path, NULL, body, count ? "scaling the job to 1" : "scaling the job to 0", &j, &hidx,
                           err, errlen);
        if (r < 0)
                return r;
        int64_t jm = 0, ec = 0;
        (void) json_get_int(j, "JobModifyIndex", &jm);
        (void) json_get_int(j, "EvalCreateIndex", &ec);
        if (ret_index)
                *ret_index = jm > ec ? jm : ec > 0 ? ec : hidx;
        if (ret_eval)
                *ret_eval = dup_or_null(json_get_str(j, "EvalID"));
        return 0;
}

static int64_t block_wait(struct ndriver *n, int64_t deadline) {
        int64_t left = deadline - mono_ms();
        int64_t w = (int64_t) n->cfg->nomad_blocking_wait_ms;
        return left < w ? left : w;
}

/* Follows the evaluation until it finished: a placement failure (no node fits) ends the wait
 * at once with the scheduler's reason. 0 placed (or no eval to follow), < 0 with err set. */
static int wait_eval(struct ndriver *n, const char *eval, int64_t deadline, char *err, size_t errlen) {
        if (!eval)
                return 0;
        _cleanup_free_ char *path = xasprintf("/v1/evaluation/%s", eval);
        int64_t index = 0;
        for (;;) {
                int64_t w = block_wait(n, deadline);
                if (w <= 0)
                        return 0;   /* the allocation wait reports the timeout */
                _cleanup_json_ cJSON *e = NULL;
                int r = nomad_block(n, path, NULL, &index, w, "reading the evaluation", &e, err, errlen);
                if (r == -ENOENT)
                        return 0;   /* garbage-collected or not served: the allocations tell */
                if (r < 0)
                        return r;
                bool done = false;
                _cleanup_free_ char *why = nomad_eval_failure(e, &done);
                if (why) {
                        fmt_err(err, errlen, "%s", why);
                        return -EHOSTUNREACH;
                }
                if (done)
                        return 0;
        }
}

/* Waits for the allocation created at/after min_index to run. */
static int wait_alloc(struct ndriver *n, const char *job, int64_t min_index, int64_t deadline, struct nomad_alloc *ret,
                      char *err, size_t errlen) {
        _cleanup_free_ char *path = xasprintf("/v1/job/%s/allocations", job);
        int64_t index = 0;
        _cleanup_free_ char *last = NULL;
        for (;;) {
                int64_t w = block_wait(n, deadline);
                if (w <= 0) {
                        fmt_err(err, errlen, "Nomad did not start the sandbox within %llus%s%s",
                                (unsigned long long) (n->cfg->nomad_placement_timeout_ms / 1000), last ? ": " : " (no allocation placed)",
                                last ? last : "");
                        return -ETIMEDOUT;
                }
                _cleanup_json_ cJSON *stubs = NULL;
                int r = nomad_block(n, path, NULL, &index, w, "reading the job's allocations", &stubs, err, errlen);
                if (r < 0)
                        return r;
                struct nomad_alloc a = { 0 };
                if (nomad_allocs_pick(stubs, min_index, &a) <= 0)
                        continue;
                log_ctx_set("ALLOC_ID", a.id);
                switch (a.phase) {
                case NOMAD_ALLOC_RUNNING:
                        *ret = a;
                        return 0;
                case NOMAD_ALLOC_FAILED:
                case NOMAD_ALLOC_STOPPED:
                        fmt_err(err, errlen, "Nomad allocation %.8s %s: %s", a.id, a.client_status,
                                a.reason ? a.reason : "no reason given");
                        nomad_alloc_clear(&a);
                        return -EHOSTUNREACH;
                case NOMAD_ALLOC_PENDING:
                        free(last);
                        last = a.reason ? xasprintf("allocation %.8s pending (%s)", a.id, a.reason)
                                        : xasprintf("allocation %.8s pending", a.id);
                        nomad_alloc_clear(&a);
                        break;
                }
        }
}

static int nd_place(struct driver *d, const struct sandbox *sb, struct placement *ret, char *err, size_t errlen) {
        struct ndriver *n = N(d);
        _cleanup_free_ char *job = nomad_job_id(sb->id);
        _cleanup_free_ char *eval = NULL, *apath = NULL;
        _cleanup_json_ cJSON *full = NULL;
        int64_t min_index = 0, deadline = mono_ms() + (int64_t) n->cfg->nomad_placement_timeout_ms;
        struct nomad_alloc a = { 0 };
        bool scaled = false;
        int r;

        ctx_ids(job, NULL);
        /* Resume: the job is still registered at count 0; a new allocation comes from scaling. */
        if (sb->status == SB_RESUMING) {
                r = scale(n, job, 1, "resume", &eval, &min_index, err, errlen);
                if (r >= 0)
                        scaled = true;
                else if (r != -ENOENT)
                        goto fail;
        }
        if (!scaled) {
                _cleanup_json_ cJSON *body = nomad_job_build(n->cfg, d->ctl->instance_id, sb);
                _cleanup_json_ cJSON *j = NULL;
                int64_t hidx = 0;
                r = nomad_json(n, "PUT", "/v1/jobs", NULL, body, "registering the job", &j, &hidx, err, errlen);
                if (r < 0)
                        goto fail;
                (void) json_get_int(j, "JobModifyIndex", &min_index);
                if (!min_index)
                        min_index = hidx;
                eval = dup_or_null(json_get_str(j, "EvalID"));
        }
        r = wait_eval(n, eval, deadline, err, errlen);
        if (r >= 0)
                r = wait_alloc(n, job, min_index, deadline, &a, err, errlen);
        if (r < 0)
                goto fail;

        /* The full allocation has the address the egress rules key on. */
        apath = xasprintf("/v1/allocation/%s", a.id);
        r = nomad_json(n, "GET", apath, NULL, NULL, "reading the allocation", &full, NULL, err, errlen);
        if (r < 0)
                goto fail;
        /* The task's Docker container on its node, as Nomad's docker driver names it: what the
         * node agent commits for a snapshot (it asks its local dockerd by this name). */
        ret->container_id = xasprintf("%s-%s", NOMAD_TASK, a.id);
        ret->alloc_id = xstrdup(a.id);
        ret->job_id = xstrdup(job);
        ret->node_id = xstrdup(a.node_id ? a.node_id : "");
        ret->ip = nomad_alloc_address(full) ?: xstrdup("");
        log_info("Nomad allocation running on node %s (address %s)", ret->node_id, ret->ip);
        nomad_alloc_clear(&a);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        return 0;

fail:
        log_error("Nomad placement failed: %s", err);
        {
                char e2[256];
                /* Nothing stays behind: the job is purged (a resume that failed fails the sandbox). */
                if (deregister(n, job, e2, sizeof(e2)) < 0)
                        log_error("could not purge the failed job (the orphan reaper retries): %s", e2);
        }
        nomad_alloc_clear(&a);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        return r == -ETIMEDOUT || r == -EHOSTUNREACH ? r : -EHOSTUNREACH;
}

static int nd_remove(struct driver *d, const struct sandbox *sb, char *err, size_t errlen) {
        struct ndriver *n = N(d);
        _cleanup_free_ char *job = nomad_job_id(sb->id);
        int r;
        ctx_ids(job, sb->alloc_id);
        if (sb->status == SB_PAUSING) {
                /* Pause: the job stays (its volume claim and spec); the allocation goes. */
                r = scale(n, job, 0, "pause", NULL, NULL, err, errlen);
                if (r == -ENOENT)
                        r = 0;
        } else
                r = deregister(n, job, err, errlen);
        if (r < 0)
                log_error("Nomad: %s", err);
        else if (sb->alloc_id && *sb->alloc_id)
                /* The volume claim and the egress rules follow the allocation: wait until it stopped. */
                wait_alloc_stopped(n, sb->alloc_id, (int64_t) n->cfg->nomad_request_timeout_ms);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        return r;
}

static int nd_running(struct driver *d, const struct sandbox *sb, int *ret_exit_code) {
        struct ndriver *n = N(d);
        char err[256];
        if (!sb->alloc_id || !*sb->alloc_id)
                return 0;
        _cleanup_free_ char *path = xasprintf("/v1/allocation/%s", sb->alloc_id);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "GET", path, NULL, NULL, "reading the allocation", &j, NULL, err, sizeof(err));
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        struct nomad_alloc a = { 0 };
        if (nomad_alloc_parse(j, &a) < 0)
                return -EBADMSG;
        bool up = a.phase == NOMAD_ALLOC_RUNNING || a.phase == NOMAD_ALLOC_PENDING;
        if (!up) {
                ctx_ids(json_get_str(j, "JobID"), a.id);
                log_warning("Nomad allocation %s: %s", a.client_status, a.reason ? a.reason : "no reason given");
                log_ctx_set("NOMAD_JOB_ID", NULL);
                log_ctx_set("ALLOC_ID", NULL);
        }
        if (ret_exit_code)
                *ret_exit_code = up ? 0 : -1;
        nomad_alloc_clear(&a);
        return up;
}

static int nd_sample(struct driver *d, const struct sandbox *sb, struct driver_sample *ret) {
        struct ndriver *n = N(d);
        char err[256];
        memset(ret, 0, sizeof(*ret));
        if (!sb->alloc_id)
                return -ENOENT;
        _cleanup_free_ char *path = xasprintf("/v1/client/allocation/%s/stats", sb->alloc_id);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "GET", path, NULL, NULL, "reading allocation stats", &j, NULL, err, sizeof(err));
        if (r < 0)
                return r;
        const cJSON *ru = cJSON_GetObjectItemCaseSensitive(j, "ResourceUsage");
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(ru, "MemoryStats");
        const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(ru, "CpuStats");
        int64_t usage = 0;
        if (!json_get_int(mem, "Usage", &usage) || usage == 0)
                (void) json_get_int(mem, "RSS", &usage);
        const cJSON *pct = cJSON_GetObjectItemCaseSensitive(cpu, "Percent");
        ret->mem_usage = usage > 0 ? (uint64_t) usage : 0;
        ret->mem_percent = sb->memory > 0 ? 100.0 * (double) ret->mem_usage / ((double) sb->memory * 1024 * 1024) : 0;
        ret->cpu_percent = cJSON_IsNumber(pct) ? pct->valuedouble : 0;
        ret->valid = ru != NULL;
        return 0;
}

static int nd_volume_create(struct driver *d, const char *handle, int64_t size_gb, char *err, size_t errlen) {
        struct ndriver *n = N(d);
        if (!n->cfg->nomad_csi_plugin_id[0]) {
                fmt_err(err, errlen, "persistent volumes need a CSI plugin: set [nomad] csi_plugin_id");
                return -EOPNOTSUPP;
        }
        _cleanup_free_ char *path = xasprintf("/v1/volume/csi/%s/create", handle);
        _cleanup_json_ cJSON *body = nomad_volume_build(n->cfg, handle, size_gb);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "PUT", path, NULL, body, "creating the CSI volume", &j, NULL, err, errlen);
        if (r < 0)
                log_error("Nomad: %s", err);
        return r < 0 ? -EHOSTUNREACH : 0;
}

static int nd_volume_remove(struct driver *d, const char *handle, char *err, size_t errlen) {
        struct ndriver *n = N(d);
        _cleanup_free_ char *path = xasprintf("/v1/volume/csi/%s/delete", handle);
        int r = nomad_json(n, "DELETE", path, NULL, NULL, "deleting the CSI volume", NULL, NULL, err, errlen);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                log_error("Nomad: %s", err);
        return r;
}

static int nd_list(struct driver *d, char ***ret) {
        struct ndriver *n = N(d);
        char err[256];
        _cleanup_json_ cJSON *jobs = NULL;
        int r = nomad_json(n, "GET", "/v1/jobs", "prefix=sandbox-&meta=true", NULL, "listing jobs", &jobs, NULL, err,
                           sizeof(err));
        if (r < 0) {
                log_warning("Nomad: %s", err);
                return r;
        }
        size_t need = 0;
        char **ids = nomad_jobs_filter(jobs, d->ctl->instance_id, &need);
        if (need) {
                /* A Nomad before 1.6 sends no Meta in the list: read those jobs one by one. */
                size_t k = strv_length(ids);
                const cJSON *s;
                cJSON_ArrayForEach(s, jobs) {
                        const char *id = json_get_str(s, "ID");
                        const char *st = json_get_str(s, "Status");
                        if (!id || cJSON_GetObjectItemCaseSensitive(s, "Meta") || !startswith(id, "sandbox-") ||
                            !hexid_valid(id + 8) || (st && !strcmp(st, "dead")))
                                continue;
                        _cleanup_free_ char *path = xasprintf("/v1/job/%s", id);
                        _cleanup_json_ cJSON *full = NULL;
                        if (nomad_json(n, "GET", path, NULL, NULL, "reading a job", &full, NULL, err, sizeof(err)) < 0)
                                continue;
                        const char *inst = json_get_str(cJSON_GetObjectItemCaseSensitive(full, "Meta"), NOMAD_META_INSTANCE);
                        if (!inst || strcmp(inst, d->ctl->instance_id) != 0)
                                continue;
                        ids = xrealloc(ids, (k + 2) * sizeof(char *));
                        ids[k++] = xstrdup(id + 8);
                        ids[k] = NULL;
                }
        }
        *ret = ids;
        return 0;
}

static int nd_remove_by_id(struct driver *d, const char *sandbox_id) {
        char err[256];
        _cleanup_free_ char *job = nomad_job_id(sandbox_id);
        ctx_ids(job, NULL);
        int r = deregister(N(d), job, err, sizeof(err));
        if (r < 0)
                log_warning("Nomad: %s", err);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        return r;
}

static int nd_node_set_eligible(struct driver *d, const char *node_id, bool eligible, char *err, size_t errlen) {
        _cleanup_free_ char *path = xasprintf("/v1/node/%s/eligibility", node_id);
        _cleanup_json_ cJSON *body = cJSON_CreateObject();
        json_add_str(body, "NodeID", node_id);
        json_add_str(body, "Eligibility", eligible ? "eligible" : "ineligible");
        int r = nomad_json(N(d), "POST", path, NULL, body, "setting the node's eligibility", NULL, NULL, err, errlen);
        if (r == -ENOENT)
                fmt_err(err, errlen, "Nomad knows no node %s", node_id);
        return r;
}

/* ---- exec over the alloc exec WebSocket ---- */

struct exec_session {
        struct ndriver *n;
        CURL *h;
        curl_socket_t fd;
        struct ws_reader rd;
        char *alloc_id, *job_id;
        bool eof, stdin_closed, exited, out_closed, err_closed;
        int exit_code;
        int64_t last_send;
};

static int ws_send_all(struct exec_session *s, const void *data, size_t len, int64_t deadline) {
        int r = httpc_send_all(s->h, s->fd, data, len, deadline);
        if (r >= 0)
                s->last_send = mono_ms();
        return r;
}

static int ws_send(struct exec_session *s, uint8_t opcode, const void *data, size_t len, int64_t deadline) {
        struct strbuf b;
        strbuf_init(&b, 0);
        int r = ws_frame_encode(&b, WS_ROLE_CLIENT, true, opcode, data, len);
        if (r >= 0)
                r = ws_send_all(s, b.buf, b.len, deadline);
        strbuf_done(&b);
        return r;
}

static int ws_send_text(struct exec_session *s, const char *text, int64_t deadline) {
        return ws_send(s, WS_OP_TEXT, text, strlen(text), deadline);
}

/* Receives what is there without blocking: 1 got bytes, 0 nothing yet, -ECONNRESET closed. */
static int ws_recv_some(struct exec_session *s) {
        uint8_t buf[65536];
        size_t got = 0;
        CURLcode cc = curl_easy_recv(s->h, buf, sizeof(buf), &got);
        if (cc == CURLE_AGAIN)
                return 0;
        if (cc != CURLE_OK || got == 0) {
                log_debug("exec stream ended: %s (%zu bytes)", cc == CURLE_OK ? "closed" : curl_easy_strerror(cc), got);
                return -ECONNRESET;
        }
        int r = ws_reader_feed(&s->rd, buf, got);
        return r < 0 ? r : 1;
}

/* Handles every whole message the reader holds. 1 when the exec ended, 0 otherwise;
 * *ret_got (optional) tells whether output went to cb. */
static int ws_dispatch_got(struct exec_session *s, exec_output_cb cb, void *ud, bool *ret_got) {
        for (;;) {
                struct ws_message m = { 0 };
                int r = ws_reader_next(&s->rd, &m);
                if (r == 0)
                        return 0;
                if (r < 0) {
                        const char *why = "";
                        uint16_t code = ws_reader_error(&s->rd, &why);
                        ctx_ids(s->job_id, s->alloc_id);
                        log_warning("Nomad exec stream broke the WebSocket protocol: %s", why);
                        struct strbuf b;
                        strbuf_init(&b, 0);
                        if (ws_close_encode(&b, WS_ROLE_CLIENT, code, why) >= 0)
                                (void) ws_send_all(s, b.buf, b.len, mono_ms() + 1000);
                        strbuf_done(&b);
                        return r;
                }
                switch (m.opcode) {
                case WS_OP_PING:
                        (void) ws_send(s, WS_OP_PONG, m.data, m.len, mono_ms() + 2000);
                        break;
                case WS_OP_CLOSE: {
                        uint16_t code = WS_CLOSE_NO_STATUS;
                        _cleanup_free_ char *reason = NULL;
                        (void) ws_close_parse(m.data, m.len, &code, &reason);
                        ws_message_done(&m);
                        s->eof = true;
                        if (code == WS_CLOSE_NORMAL || code == WS_CLOSE_NO_STATUS)
                                return 1;
                        ctx_ids(s->job_id, s->alloc_id);
                        log_warning("Nomad closed the exec stream: %u %s", code, reason ? reason : "");
                        log_ctx_set("NOMAD_JOB_ID", NULL);
                        log_ctx_set("ALLOC_ID", NULL);
                        return -ECONNABORTED;
                }
                case WS_OP_TEXT:
                case WS_OP_BINARY: {
                        struct nomad_exec_frame f = { 0 };
                        r = nomad_exec_frame_parse((const char *) m.data, m.len, &f);
                        ws_message_done(&m);
                        if (r < 0)
                                return r;
                        if (f.exited) {
                                s->exited = true;
                                s->exit_code = f.exit_code;
                                s->eof = true;
                                nomad_exec_frame_done(&f);
                                return 1;
                        }
                        if (f.stream && f.len && ret_got)
                                *ret_got = true;
                        if (f.stream && f.len && cb) {
                                r = cb(f.stream, f.data, f.len, ud);
                                if (r < 0) {
                                        nomad_exec_frame_done(&f);
                                        return r;
                                }
                        }
                        if (f.closed)
                                *(f.stream == 1 ? &s->out_closed : &s->err_closed) = true;
                        nomad_exec_frame_done(&f);
                        continue;
                }
                case WS_OP_CONT:
                case WS_OP_PONG:
                        break;
                }
                ws_message_done(&m);
        }
}

static int ws_dispatch(struct exec_session *s, exec_output_cb cb, void *ud) { return ws_dispatch_got(s, cb, ud, NULL); }

static void exec_session_free(struct exec_session *s) {
        if (!s)
                return;
        if (s->h)
                curl_easy_cleanup(s->h);
        ws_reader_done(&s->rd);
        free_many(s->alloc_id, s->job_id, s);
}

static int nd_exec_start(struct driver *d, const struct sandbox *sb, const struct exec_spec *spec, struct exec_session **ret,
                         char *err, size_t errlen) {
        struct ndriver *n = N(d);
        if (!sb->alloc_id || !*sb->alloc_id) {
                fmt_err(err, errlen, "the sandbox has no running allocation");
                return -ESRCH;
        }
        _cleanup_free_ char *cmd = nomad_exec_command(spec);
        _cleanup_free_ char *ecmd = esc(cmd);
        _cleanup_free_ char *cq = common_query(n);
        _cleanup_free_ char *path =
                xasprintf("/v1/client/allocation/%s/exec?%s&task=%s&tty=false&command=%s", sb->alloc_id, cq, NOMAD_TASK, ecmd);
        _cleanup_free_ char *url = xasprintf("%s/", n->base);
        _cleanup_free_ char *head = NULL;
        char key[WS_KEY_LEN + 1];
        const char *extra[] = { n->token_header, NULL };
        int64_t deadline = mono_ms() + (int64_t) n->cfg->nomad_request_timeout_ms;
        struct exec_session *s = xnew0(struct exec_session, 1);
        int r;

        s->n = n;
        s->alloc_id = xstrdup(sb->alloc_id);
        s->job_id = nomad_job_id(sb->id);
        s->exit_code = -1;
        ws_reader_init(&s->rd, WS_ROLE_CLIENT, EXEC_MAX_MESSAGE);
        s->h = curl_easy_init();
        curl_easy_setopt(s->h, CURLOPT_URL, url);
        curl_easy_setopt(s->h, CURLOPT_CONNECT_ONLY, 1L);
        curl_easy_setopt(s->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(s->h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_tls(n, s->h);
        CURLcode cc = curl_easy_perform(s->h);
        if (cc != CURLE_OK) {
                fmt_err(err, errlen, "Nomad at %s did not answer the exec connection: %s", n->cfg->nomad_addr,
                        curl_easy_strerror(cc));
                r = -EHOSTUNREACH;
                goto fail;
        }
        curl_easy_getinfo(s->h, CURLINFO_ACTIVESOCKET, &s->fd);

        ws_key_new(key);
        r = ws_client_request(n->hostport, path, key, n->token_header ? extra : NULL, &head);
        if (r < 0) {
                fmt_err(err, errlen, "could not build the exec request");
                goto fail;
        }
        r = ws_send_all(s, head, strlen(head), deadline);
        if (r < 0) {
                fmt_err(err, errlen, "Nomad's exec connection broke while sending the request");
                goto fail;
        }
        /* The response head; what follows it is frames (101) or the refusal's body. */
        struct strbuf in;
        strbuf_init(&in, 64 * 1024);
        int status = 0;
        size_t head_len = 0;
        for (;;) {
                uint8_t buf[4096];
                size_t got = 0;
                cc = curl_easy_recv(s->h, buf, sizeof(buf), &got);
                if (cc == CURLE_AGAIN) {
                        struct pollfd pf = { .fd = s->fd, .events = POLLIN };
                        int64_t left = deadline - mono_ms();
                        if (left <= 0) {
                                r = -ETIMEDOUT;
                                break;
                        }
                        (void) poll(&pf, 1, (int) left);
                        continue;
                }
                if (cc != CURLE_OK || got == 0) {
                        r = in.len ? -EPROTO : -ECONNRESET;
                        /* A refusal may end with the connection: parse what came. */
                        if (in.len && ws_client_parse_response(in.buf, in.len, key, &status, &head_len) == 0 && status != 101)
                                r = 0;
                        break;
                }
                if (strbuf_append(&in, buf, got) < 0) {
                        r = -EMSGSIZE;
                        break;
                }
                r = ws_client_parse_response(in.buf, in.len, key, &status, &head_len);
                if (r == -EAGAIN)
                        continue;
                if (r == 0 && status != 101) {
                        /* Give the short text/plain body a moment to arrive. */
                        usleep(20000);
                        while (curl_easy_recv(s->h, buf, sizeof(buf), &got) == CURLE_OK && got > 0 &&
                               strbuf_append(&in, buf, got) >= 0)
                                ;
                }
                break;
        }
        if (r < 0 || status != 101) {
                if (r >= 0) {
                        struct nresp fake = { .status = status };
                        strbuf_init(&fake.body, 0);
                        if (in.len > head_len)
                                strbuf_append(&fake.body, in.buf + head_len, in.len - head_len);
                        nomad_error(&fake, "starting the exec", err, errlen);
                        strbuf_done(&fake.body);
                        r = status == 404 ? -ENOENT : status == 403 ? -EACCES : -EREMOTEIO;
                } else
                        fmt_err(err, errlen, "Nomad's exec WebSocket handshake failed: %s", strerror(-r));
                strbuf_done(&in);
                goto fail;
        }
        if (in.len > head_len && (r = ws_reader_feed(&s->rd, in.buf + head_len, in.len - head_len)) < 0) {
                strbuf_done(&in);
                fmt_err(err, errlen, "Nomad's exec stream started with a bad frame");
                goto fail;
        }
        strbuf_done(&in);
        if (!spec->want_stdin) {
                (void) ws_send_text(s, "{\"stdin\":{\"close\":true}}", deadline);
                s->stdin_closed = true;
        }
        *ret = s;
        return 0;
fail:
        ctx_ids(s->job_id, s->alloc_id);
        log_warning("Nomad exec failed: %s", err);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        exec_session_free(s);
        return r;
}

static int nd_exec_read(struct exec_session *s, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud) {
        int64_t deadline = mono_ms() + timeout_ms;
        int r;
        for (;;) {
                /* Back to the caller as soon as output was handed over: it may be a slow client
                 * (a download) that must not get the whole stream buffered in one call. */
                bool got = false;
                if ((r = ws_dispatch_got(s, cb, ud, &got)) != 0)
                        return r;
                if (s->eof)
                        return 1;
                if (got)
                        return 0;
                /* TLS may hold decrypted bytes the socket no longer shows: ask libcurl first. */
                r = ws_recv_some(s);
                if (r == -ECONNRESET) {
                        /* Nomad drops TCP right after "exited"; anything else is a lost stream. */
                        s->eof = true;
                        if ((r = ws_dispatch(s, cb, ud)) != 0)
                                return r;
                        return s->exited ? 1 : -ECONNRESET;
                }
                if (r < 0)
                        return r;
                if (r == 1)
                        continue;
                if (!s->stdin_closed && mono_ms() - s->last_send >= EXEC_HEARTBEAT_MS)
                        (void) ws_send_text(s, "{}", mono_ms() + 2000);
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return 0;
                struct pollfd p[2] = { { .fd = s->fd, .events = POLLIN }, { .fd = watch_fd, .events = POLLRDHUP } };
                int k = poll(p, watch_fd >= 0 ? 2 : 1, (int) (left < EXEC_HEARTBEAT_MS ? left : EXEC_HEARTBEAT_MS));
                if (k < 0 && errno != EINTR)
                        return -errno;
                if (watch_fd >= 0 && (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                        return -ECONNRESET;
        }
}

/* Takes what arrived, without waiting: -EPIPE when the process ended (Nomad then drops the
 * connection, and writing on would reset it and lose the exit code), 0 otherwise. */
static int exec_poll_output(struct exec_session *s, exec_output_cb cb, void *ud) {
        for (;;) {
                int k = ws_recv_some(s);
                if (k == -ECONNRESET)
                        s->eof = true;
                else if (k < 0)
                        return k;
                int r = ws_dispatch(s, cb, ud);
                if (r < 0)
                        return r;
                if (r == 1 || s->eof)
                        return -EPIPE;
                if (k != 1)
                        return 0;
        }
}

static int nd_exec_write(struct exec_session *s, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud) {
        const uint8_t *p = data;
        int64_t deadline = mono_ms() + timeout_ms;
        if (s->stdin_closed || s->eof)
                return -EPIPE;
        while (len > 0) {
                /* Output first: a process that already ended must not be written to. */
                int r = exec_poll_output(s, cb, ud);
                if (r < 0)
                        return r;
                /* Chunks small enough that output keeps flowing between them. */
                size_t k = len < 48 * 1024 ? len : 48 * 1024;
                _cleanup_free_ char *f = nomad_exec_stdin_frame(p, k);
                r = ws_send_text(s, f, deadline);
                if (r < 0) {
                        (void) exec_poll_output(s, cb, ud);   /* the exit code, if it came */
                        return r == -ETIMEDOUT ? r : -EPIPE;
                }
                p += k;
                len -= k;
        }
        int r = exec_poll_output(s, cb, ud);
        return r == -EPIPE ? 0 : r;   /* all of it went in; the end is exec_read's to report */
}

static int nd_exec_close_stdin(struct exec_session *s) {
        if (!s->stdin_closed && !s->eof) {
                s->stdin_closed = true;
                return ws_send_text(s, "{\"stdin\":{\"close\":true}}", mono_ms() + 5000);
        }
        return 0;
}

static int nd_exec_exit_code(struct exec_session *s, int *ret) {
        if (!s->exited)
                return -ESRCH;
        *ret = s->exit_code;
        return 0;
}

/* Nomad records an OOM kill on the task's Terminated event (Details.oom_killed). */
static int nd_exec_oom_killed(struct exec_session *s) {
        char err[256];
        _cleanup_free_ char *path = xasprintf("/v1/allocation/%s", s->alloc_id);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(s->n, "GET", path, NULL, NULL, "reading the allocation", &j, NULL, err, sizeof(err));
        if (r < 0)
                return r == -ENOENT ? 0 : r;
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "TaskStates"), NOMAD_TASK);
        const cJSON *ev;
        cJSON_ArrayForEach(ev, cJSON_GetObjectItemCaseSensitive(ts, "Events")) {
                const char *oom = json_get_str(cJSON_GetObjectItemCaseSensitive(ev, "Details"), "oom_killed");
                if (oom && !strcmp(oom, "true"))
                        return 1;
        }
        return 0;
}

static void nd_exec_free(struct exec_session *s) {
        if (!s)
                return;
        if (!s->eof) {
                /* A polite close; Nomad ends the process with the stream. */
                struct strbuf b;
                strbuf_init(&b, 0);
                if (ws_close_encode(&b, WS_ROLE_CLIENT, WS_CLOSE_NORMAL, "") >= 0)
                        (void) ws_send_all(s, b.buf, b.len, mono_ms() + 1000);
                strbuf_done(&b);
        }
        exec_session_free(s);
}

/* ---- set-up ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { (void) curl_global_init(CURL_GLOBAL_ALL); }

static int nd_ping(struct driver *d) {
        struct nresp r;
        char err[256];
        int k = nomad_call(N(d), "GET", "/v1/status/leader", NULL, NULL, 5000, &r, err, sizeof(err));
        if (k < 0)
                return k;
        k = r.status >= 200 && r.status < 500 ? 0 : -EREMOTEIO;
        nresp_done(&r);
        return k;
}

static int nd_init(struct driver *d, char *err, size_t errlen) {
        struct ndriver *n = N(d);
        struct nresp r;
        int k = nomad_call(n, "GET", "/v1/status/leader", NULL, NULL, 5000, &r, err, errlen);
        if (k < 0)
                return k;
        if (r.status >= 500) {
                nomad_error(&r, "Nomad is not ready", err, errlen);
                nresp_done(&r);
                return -EHOSTUNREACH;
        }
        nresp_done(&r);
        log_info("Nomad driver: %s, namespace %s, node pool %s, region %s%s", n->cfg->nomad_addr, n->cfg->nomad_namespace,
                 n->cfg->nomad_node_pool, n->cfg->nomad_region, n->token_header ? ", ACL token set" : "");
        return 0;
}

static void nd_done(struct driver *d) {
        struct ndriver *n = d->priv;
        if (n) {
                free_many(n->base, n->hostport, n->token_header, n);
        }
        d->priv = NULL;
}

static const struct driver_ops nomad_ops = {
        .init = nd_init,
        .ping = nd_ping,
        .done = nd_done,
        .place = nd_place,
        .remove = nd_remove,
        .running = nd_running,
        .sample = nd_sample,
        .volume_create = nd_volume_create,
        .volume_remove = nd_volume_remove,
        .list = nd_list,
        .remove_by_id = nd_remove_by_id,
        .exec_start = nd_exec_start,
        .exec_write = nd_exec_write,
        .exec_close_stdin = nd_exec_close_stdin,
        .exec_read = nd_exec_read,
        .exec_exit_code = nd_exec_exit_code,
        .exec_oom_killed = nd_exec_oom_killed,
        .exec_free = nd_exec_free,
        .node_set_eligible = nd_node_set_eligible,
};

int driver_nomad_new(struct ctl *c, struct driver **ret) {
        struct config *cfg = c->cfg;
        struct driver *d = xnew0(struct driver, 1);
        struct ndriver *n = xnew0(struct ndriver, 1);
        (void) pthread_once(&curl_once, curl_init_once);
        n->cfg = cfg;
        n->base = xstrdup(cfg->nomad_addr);
        size_t bl = strlen(n->base);
        while (bl > 0 && n->base[bl - 1] == '/')
                n->base[--bl] = 0;
        const char *hp = strstr(n->base, "://");
        hp = hp ? hp + 3 : n->base;
        n->hostport = xstrndup(hp, strcspn(hp, "/"));
        if (cfg->nomad_token[0])
                n->token_header = xasprintf("X-Nomad-Token: %s", cfg->nomad_token);
        d->name = "nomad";
        d->ctl = c;
        d->priv = n;
        d->ops = &nomad_ops;
        *ret = d;
        return 0;
}
