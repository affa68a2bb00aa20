/* standin-api.c — the handlers of the Nomad API the stand-in serves (the routes in
 * standin-http.c). */
#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "docker.h"
#include "json.h"
#include "standin.h"
#include "strutil.h"

/* ---- handlers ---- */

cJSON *parse_body(struct req *rq, enum MHD_Result *ret, struct MHD_Connection *c) {
        cJSON *j = NULL;
        struct err err = { 0 };
        if (rq->too_big) {
                *ret = reply_err(c, 400, "http: request body too large");
                return NULL;
        }
        if (!rq->body.len) {
                *ret = reply_err(c, 400, "Request body is empty");
                return NULL;
        }
        if (json_parse(rq->body.buf, rq->body.len, MAX_BODY, 200, &j, &err) < 0) {
                *ret = reply_err(c, 400, "%s", err.message);
                return NULL;
        }
        return j;
}

/* Fills in what Nomad's canonicalisation would, so GET /v1/job returns a whole job. */
static void canonicalize(cJSON *job, const char *ns) {
        if (!json_get_str(job, "Name"))
                json_add_str(job, "Name", json_get_str(job, "ID"));
        cJSON_DeleteItemFromObject(job, "Namespace");
        json_add_str(job, "Namespace", ns);
        static const char *const defaults[][2] = { { "Region", NULL }, { "Type", "service" }, { "NodePool", "default" } };
        for (size_t i = 0; i < ELEMENTSOF(defaults); i++)
                if (!json_get_str(job, defaults[i][0])) {
                        cJSON_DeleteItemFromObject(job, defaults[i][0]);
                        json_add_str(job, defaults[i][0], defaults[i][1] ? defaults[i][1] : cfg.region);
                }
        if (!cJSON_IsArray(cJSON_GetObjectItem(job, "Datacenters"))) {
                cJSON_DeleteItemFromObject(job, "Datacenters");
                cJSON *d = cJSON_AddArrayToObject(job, "Datacenters");
                cJSON_AddItemToArray(d, cJSON_CreateString("*"));
        }
        if (!cJSON_GetObjectItem(job, "Priority"))
                json_add_int(job, "Priority", 50);
        cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(job, "TaskGroups"))
                if (!cJSON_GetObjectItem(g, "Count"))
                        json_add_int(g, "Count", 1);
}

/* PUT /v1/jobs (id NULL) and PUT /v1/job/:id. */
enum MHD_Result h_register(struct MHD_Connection *c, const cJSON *body, const char *url_id) {
        enum MHD_Result ret;
        cJSON *job = cJSON_GetObjectItem(body, "Job");
        if (!cJSON_IsObject(job))
                return reply_err(c, 400, "Job must be specified");
        const char *id = json_get_str(job, "ID");
        if (!id || !*id)
                return reply_err(c, 400, "Job ID hasn't been provided");
        if (url_id && strcmp(url_id, id) != 0)
                return reply_err(c, 400, "Job ID does not match name");
        const char *ns = str_or(json_get_str(job, "Namespace"), query_ns(c));
        if (!ns_exists(ns))
                return reply_err(c, 500, "job \"%s\" is in nonexistent namespace \"%s\"", id, ns);
        const char *pool = str_or(json_get_str(job, "NodePool"), "default");
        if (strcmp(pool, "default") != 0 && strcmp(pool, "all") != 0 && strcmp(pool, cfg.node_pool) != 0)
                return reply_err(c, 500, "job \"%s\" is in nonexistent node pool \"%s\"", id, pool);
        /* Validation, in Nomad's multierror wording. */
        cJSON *tgs = cJSON_GetObjectItem(job, "TaskGroups");
        if (cJSON_GetArraySize(tgs) == 0)
                return reply_err(c, 500, "1 error occurred:\n\t* Missing job task groups\n\n");
        cJSON *g;
        cJSON_ArrayForEach(g, tgs) {
                if (!json_get_str(g, "Name"))
                        return reply_err(c, 500, "1 error occurred:\n\t* Job task group 1 missing name\n\n");
                int nt = cJSON_GetArraySize(cJSON_GetObjectItem(g, "Tasks"));
                if (nt == 0)
                        return reply_err(c, 500, "1 error occurred:\n\t* Task Group %s should have at least one task\n\n",
                                         json_get_str(g, "Name"));
                if (nt > 1)
                        return reply_err(c, 500, "nomad-standin: only one task per group is supported");
                const cJSON *rp = cJSON_GetObjectItem(g, "RestartPolicy");
                const char *mode = json_get_str(rp, "Mode");
                if (mode && strcmp(mode, "fail") != 0 && strcmp(mode, "delay") != 0)
                        return reply_err(c, 500,
                                         "1 error occurred:\n\t* Task Group %s should have a valid restart policy: "
                                         "Unsupported restart mode: \"%s\"\n\n", json_get_str(g, "Name"), mode);
        }
        if (acl_denied(c, &ret))
                return ret;

        pthread_mutex_lock(&mu);
        struct job *j = job_find(ns, id);
        cJSON *copy = cJSON_Duplicate(job, true);
        canonicalize(copy, ns);
        bool changed_spec = true;
        if (j) {
                /* Same spec, still running: Nomad records no new version. */
                cJSON *a = cJSON_Duplicate(j->job, true), *b = cJSON_Duplicate(copy, true);
                const char *drop[] = { "Version", "SubmitTime", "Status", "Stop", "CreateIndex", "ModifyIndex",
                                       "JobModifyIndex", "Stable" };
                for (size_t i = 0; i < ELEMENTSOF(drop); i++) {
                        cJSON_DeleteItemFromObject(a, drop[i]);
                        cJSON_DeleteItemFromObject(b, drop[i]);
                }
                changed_spec = j->stop || !cJSON_Compare(a, b, true);
                cJSON_Delete(a);
                cJSON_Delete(b);
        }
        if (!j) {
                j = xnew0(struct job, 1);
                j->id = xstrdup(id);
                j->ns = xstrdup(ns);
                j->version = -1;
                j->next = jobs;
                jobs = j;
        }
        if (changed_spec) {
                if (j->job) {
                        /* A new version replaces the allocations (a destructive update). */
                        for (struct alloc *a = allocs; a; a = a->next)
                                if (strcmp(a->job_id, j->id) == 0 && strcmp(a->ns, j->ns) == 0)
                                        alloc_request_stop(a, "alloc is being updated due to job update");
                }
                cJSON_Delete(j->job);
                j->job = copy;
                j->version++;
                j->stop = false;
                j->submit_time = now_ns();
                cJSON_DeleteItemFromObject(j->job, "Version");
                json_add_int(j->job, "Version", j->version);
                cJSON_DeleteItemFromObject(j->job, "SubmitTime");
                json_add_int(j->job, "SubmitTime", j->submit_time);
                cJSON_DeleteItemFromObject(j->job, "Stop");
                json_add_bool(j->job, "Stop", false);
                j->modify_index = bump(&idx_jobs);
                j->job_modify_index = j->modify_index;
                if (!j->create_index)
                        j->create_index = j->modify_index;
        } else
                cJSON_Delete(copy);
        return reply_job_write_locked(c, j, evaluate(j, "job-register"), false);
}

enum MHD_Result h_job_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        enum MHD_Result ret;
        struct job_key k = { query_ns(c), id };
        if (query_lock(c, rel_job, &k, &ret) < 0)
                return ret;
        struct job *j = job_find(k.ns, id);
        return reply_found_locked(c, j ? job_json(j) : NULL, rel_job(&k), "job not found");
}

enum MHD_Result h_job_allocs(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        enum MHD_Result ret;
        struct job_key k = { query_ns(c), id };
        if (query_lock(c, rel_job_allocs, &k, &ret) < 0)
                return ret;
        cJSON *arr = cJSON_CreateArray();
        /* state.AllocsByJob: without all=true only the allocations of the job as it exists now
         * (same CreateIndex), so a purged and re-registered ID does not show its past. */
        bool all = arg(c, "all") && strcmp(arg(c, "all"), "true") == 0;
        struct job *j = all ? NULL : job_find(k.ns, id);
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->job_id, id) == 0 && strcmp(a->ns, k.ns) == 0 &&
                    (!j || a->job_create_index == j->create_index))
                        cJSON_AddItemToArray(arr, alloc_json(a, false));
        return reply_query_locked(c, arr, idx_allocs);
}

enum MHD_Result h_job_evals(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        enum MHD_Result ret;
        struct job_key k = { query_ns(c), id };
        if (query_lock(c, rel_job_evals, &k, &ret) < 0)
                return ret;
        cJSON *arr = cJSON_CreateArray();
        for (struct eval *e = evals; e; e = e->next)
                if (strcmp(e->job_id, id) == 0 && strcmp(e->ns, k.ns) == 0)
                        cJSON_AddItemToArray(arr, eval_json(e));
        return reply_query_locked(c, arr, idx_evals);
}

enum MHD_Result h_job_delete(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        const char *p = arg(c, "purge");
        bool purge = false;
        if (p && *p) {
                if (strcmp(p, "true") == 0 || strcmp(p, "1") == 0 || strcmp(p, "t") == 0 || strcmp(p, "T") == 0 ||
                    strcmp(p, "TRUE") == 0 || strcmp(p, "True") == 0)
                        purge = true;
                else if (!(strcmp(p, "false") == 0 || strcmp(p, "0") == 0 || strcmp(p, "f") == 0 ||
                           strcmp(p, "F") == 0 || strcmp(p, "FALSE") == 0 || strcmp(p, "False") == 0))
                        return reply_err(c, 500, "Failed to parse value of \"purge\" (%s) as a bool: strconv.ParseBool: "
                                         "parsing \"%s\": invalid syntax", p, p);
        }
        enum MHD_Result ret;
        if (acl_denied(c, &ret))
                return ret;
        const char *ns = query_ns(c);
        pthread_mutex_lock(&mu);
        struct job *j = job_find(ns, id);
        struct eval *e = NULL;   /* Nomad answers 200 with an empty EvalID for a job it does not know. */
        if (j) {
                j->stop = true;
                if (purge)
                        j->purged = true;
                j->modify_index = bump(&idx_jobs);
                j->job_modify_index = j->modify_index;
                json_put(j->job, "Stop", cJSON_CreateBool(true));
                e = evaluate(j, "job-deregister");
        }
        return reply_job_write_locked(c, j, e, true);
}

enum MHD_Result h_job_scale(struct MHD_Connection *c, const cJSON *body, const char *id) {
        enum MHD_Result ret;
        const cJSON *target = cJSON_GetObjectItem(body, "Target");
        const char *tj = json_get_str(target, "Job");
        if (tj && *tj && strcmp(tj, id) != 0)
                return reply_err(c, 400, "job ID in payload did not match URL");
        const char *group = json_get_str(target, "Group");
        const cJSON *cnt = cJSON_GetObjectItem(body, "Count");
        if (!group || !*group)
                return reply_err(c, 500, "missing task group name for scaling action");
        int64_t count = 0;
        bool has_count = cnt && !cJSON_IsNull(cnt);
        if (has_count && (!json_get_int(body, "Count", &count) || count < 0))
                return reply_err(c, 500, "scaling action count can't be negative");
        if (acl_denied(c, &ret))
                return ret;
        const char *ns = query_ns(c);
        pthread_mutex_lock(&mu);
        struct job *j = job_find(ns, id);
        if (!j) {
                pthread_mutex_unlock(&mu);
                return reply_err(c, 404, "job \"%s\" not found", id);
        }
        cJSON *g = (cJSON *) group_of(j->job, group);
        if (!g) {
                pthread_mutex_unlock(&mu);
                return reply_err(c, 400, "task group \"%s\" specified for scaling does not exist in job", group);
        }
        struct eval *e = NULL;   /* no Count: nothing changes, no evaluation */
        if (has_count) {
                json_put(g, "Count", cJSON_CreateNumber((double) count));
                j->version++;
                json_put(j->job, "Version", cJSON_CreateNumber(j->version));
                j->modify_index = bump(&idx_jobs);
                j->job_modify_index = j->modify_index;
                e = evaluate(j, "job-scaling");
        }
        return reply_job_write_locked(c, j, e, false);
}

enum MHD_Result h_alloc_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        enum MHD_Result ret;
        if (query_lock(c, rel_alloc, id, &ret) < 0)
                return ret;
        struct alloc *a = alloc_find(id);
        return reply_found_locked(c, a ? alloc_json(a, true) : NULL, a ? a->modify_index : 0, "alloc not found");
}

/* The per-core clock behind CpuStats.TotalTicks (Nomad: the fingerprinted MHz of the node
 * divided by its cores; the stand-in's nodes have no fingerprint). */
#define STANDIN_CORE_MHZ 2000.0

static cJSON *usage_json(const struct docker_stats *st, double percent) {
        cJSON *ru = cJSON_CreateObject();
        cJSON *m = cJSON_AddObjectToObject(ru, "MemoryStats");
        /* Nomad's docker driver on cgroup v2 measures Cache, Swap and Usage (RSS is v1 only). */
        json_add_int(m, "RSS", 0);
        json_add_int(m, "Cache", 0);
        json_add_int(m, "Swap", 0);
        json_add_int(m, "MappedFile", 0);
        json_add_int(m, "Usage", (int64_t) st->mem_usage);
        json_add_int(m, "MaxUsage", 0);
        json_add_int(m, "KernelUsage", 0);
        json_add_int(m, "KernelMaxUsage", 0);
        cJSON *mm = cJSON_AddArrayToObject(m, "Measured");
        for (const char *const *f = (const char *const[]) { "Cache", "Swap", "Usage", NULL }; *f; f++)
                cJSON_AddItemToArray(mm, cJSON_CreateString(*f));
        cJSON *cs = cJSON_AddObjectToObject(ru, "CpuStats");
        cJSON_AddNumberToObject(cs, "SystemMode", 0);
        cJSON_AddNumberToObject(cs, "UserMode", 0);
        cJSON_AddNumberToObject(cs, "TotalTicks", percent / 100.0 * STANDIN_CORE_MHZ);
        json_add_int(cs, "ThrottledPeriods", 0);
        json_add_int(cs, "ThrottledTime", 0);
        cJSON_AddNumberToObject(cs, "Percent", percent);
        cJSON *cm = cJSON_AddArrayToObject(cs, "Measured");
        for (const char *const *f = (const char *const[]) { "Throttled Periods", "Throttled Time", "Percent", NULL }; *f; f++)
                cJSON_AddItemToArray(cm, cJSON_CreateString(*f));
        cJSON_AddNullToObject(ru, "DeviceStats");
        return ru;
}

/* GET /v1/client/allocation/:id/stats: Nomad's AllocResourceUsage of the allocation's one task,
 * from Docker's numbers for its container. Percent is over the time since the previous request
 * (Nomad's collector keeps the stream's previous sample; docker stats semantics: 100 = one
 * core); the first is 0. An allocation with no running task is unknown to the client. */
enum MHD_Result h_alloc_stats(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct alloc *a = alloc_find(id);
        _cleanup_free_ char *cid = a && a->container ? xstrdup(a->container) : NULL;
        _cleanup_free_ char *task = a && a->task ? xstrdup(a->task) : NULL;
        pthread_mutex_unlock(&mu);
        struct docker_stats st = { 0 };
        if (!cid || docker_container_stats(standin_docker(), cid, &st) < 0 || !st.valid)
                return reply_err(c, 404, "Unknown allocation \"%s\"", id);
        double percent = 0;
        pthread_mutex_lock(&mu);
        if ((a = alloc_find(id))) {
                if (a->stats_sys_ns && st.system_ns > a->stats_sys_ns && st.cpu_total_ns >= a->stats_cpu_ns)
                        percent = (double) (st.cpu_total_ns - a->stats_cpu_ns) / (double) (st.system_ns - a->stats_sys_ns) *
                                  (st.online_cpus ? st.online_cpus : 1) * 100.0;
                a->stats_cpu_ns = st.cpu_total_ns;
                a->stats_sys_ns = st.system_ns;
        }
        pthread_mutex_unlock(&mu);
        int64_t ts = now_ns();
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "ResourceUsage", usage_json(&st, percent));
        cJSON *tasks = cJSON_AddObjectToObject(o, "Tasks");
        cJSON *t = cJSON_AddObjectToObject(tasks, task ? task : "sandbox");
        cJSON_AddItemToObject(t, "ResourceUsage", usage_json(&st, percent));
        json_add_int(t, "Timestamp", ts);
        cJSON_AddNullToObject(t, "Pids");
        json_add_int(o, "Timestamp", ts);
        return reply_json(c, o, 0, false);
}

enum MHD_Result h_eval_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct eval *e = eval_find(id);
        return reply_found_locked(c, e ? eval_json(e) : NULL, e ? e->modify_index : 0, "eval not found");
}

enum MHD_Result h_nodes(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
        enum MHD_Result ret;
        if (query_lock(c, rel_table, &idx_nodes, &ret) < 0)
                return ret;
        cJSON *arr = cJSON_CreateArray();
        const char *prefix = arg(c, "prefix");
        for (int i = 0; i < cfg.n_nodes; i++)
                if (!prefix || startswith(nodes[i].id, prefix))
                        cJSON_AddItemToArray(arr, node_stub(&nodes[i]));
        return reply_query_locked(c, arr, idx_nodes);
}

enum MHD_Result h_node_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct node *n = node_by_id(id);
        return reply_found_locked(c, n ? node_full(n) : NULL, n ? n->modify_index : 0, "node not found");
}

enum MHD_Result h_node_allocs(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        cJSON *arr = cJSON_CreateArray();
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->node_id, id) == 0)
                        cJSON_AddItemToArray(arr, alloc_json(a, true));
        return reply_query_locked(c, arr, idx_allocs);
}

enum MHD_Result h_node_eligibility(struct MHD_Connection *c, const cJSON *body, const char *id) {
        enum MHD_Result ret;
        const char *el = json_get_str(body, "Eligibility");
        if (!el || (strcmp(el, "eligible") != 0 && strcmp(el, "ineligible") != 0))
                return reply_err(c, 500, "invalid scheduling eligibility \"%s\"", el ? el : "");
        if (acl_denied(c, &ret))
                return ret;
        pthread_mutex_lock(&mu);
        struct node *n = node_by_id(id);
        if (!n) {
                pthread_mutex_unlock(&mu);
                return reply_err(c, 500, "node not found");
        }
        n->eligible = strcmp(el, "eligible") == 0;
        n->modify_index = bump(&idx_nodes);
        cJSON *out = cJSON_CreateObject();
        cJSON_AddNullToObject(out, "EvalIDs");
        json_add_int(out, "EvalCreateIndex", 0);
        json_add_int(out, "NodeModifyIndex", (int64_t) n->modify_index);
        return reply_write_locked(c, out, n->modify_index);
}

enum MHD_Result h_agent_self(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
        struct node *n = &nodes[cfg.agent_node];
        cJSON *o = cJSON_CreateObject();
        cJSON *conf = cJSON_AddObjectToObject(o, "config");
        json_add_str(conf, "Region", cfg.region);
        json_add_str(conf, "Datacenter", cfg.datacenter);
        json_add_str(conf, "NodeName", n->name);
        json_add_str(conf, "Version", "1.9.7");
        cJSON *cl = cJSON_AddObjectToObject(conf, "Client");
        json_add_bool(cl, "Enabled", true);
        json_add_str(cl, "NodePool", cfg.node_pool);
        json_add_str(cl, "NodeClass", "");
        cJSON *sv = cJSON_AddObjectToObject(conf, "Server");
        json_add_bool(sv, "Enabled", true);
        cJSON *acl = cJSON_AddObjectToObject(conf, "ACL");
        json_add_bool(acl, "Enabled", cfg.token != NULL);
        cJSON *m = cJSON_AddObjectToObject(o, "member");
        json_add_str(m, "Name", n->name);
        json_add_str(m, "Addr", "127.0.0.1");
        json_add_int(m, "Port", 4648);
        json_add_str(m, "Status", "alive");
        cJSON *st = cJSON_AddObjectToObject(o, "stats");
        cJSON *sc = cJSON_AddObjectToObject(st, "client");
        json_add_str(sc, "node_id", n->id);
        json_add_str(sc, "known_servers", "127.0.0.1:4647");
        int na = 0;
        pthread_mutex_lock(&mu);
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->node_id, n->id) == 0 && strcmp(a->client, "running") == 0)
                        na++;
        pthread_mutex_unlock(&mu);
        char nb[16];
        snprintf(nb, sizeof(nb), "%d", na);
        json_add_str(sc, "num_allocations", nb);
        json_add_str(sc, "last_heartbeat", "1.234s");
        json_add_str(sc, "heartbeat_ttl", "15s");
        return reply_json(c, o, 0, false);
}

/* CSI: PUT /v1/volume/csi/:id/create and PUT /v1/volume/csi/:id (register). */
static enum MHD_Result volume_put(struct MHD_Connection *c, const cJSON *body, const char *id, bool create) {
        enum MHD_Result ret;
        cJSON *vols = cJSON_GetObjectItem(body, "Volumes");
        if (cJSON_GetArraySize(vols) == 0)
                return reply_err(c, 400, "Must specify at least one volume");
        if (acl_denied(c, &ret))
                return ret;
        cJSON *out = cJSON_CreateObject();
        cJSON *outv = cJSON_AddArrayToObject(out, "Volumes");
        uint64_t idx = 0;
        cJSON *v;
        cJSON_ArrayForEach(v, vols) {
                const char *vid = str_or(json_get_str(v, "ID"), id);
                if (strcmp(vid, id) != 0) {
                        cJSON_Delete(out);
                        return reply_err(c, 400, "volume ID in payload did not match URL");
                }
                const char *plugin = json_get_str(v, "PluginID");
                if (!plugin || !*plugin) {
                        cJSON_Delete(out);
                        return reply_err(c, 500, "1 error occurred:\n\t* missing plugin ID\n\n");
                }
                if (cfg.csi_plugin && strcmp(plugin, cfg.csi_plugin) != 0) {
                        cJSON_Delete(out);
                        return reply_err(c, 500, "no CSI plugin named: %s could be found", plugin);
                }
                const char *ns = str_or(json_get_str(v, "Namespace"), query_ns(c));
                int64_t cap = 0;
                json_get_int(v, "RequestedCapacityMin", &cap);
                _cleanup_free_ char *dname = xasprintf("nomad-standin-csi-%s-%s", ns, vid);
                if (create) {
                        struct docker_kv labels[] = { { LABEL_KEY, cfg.instance }, { "com.hashicorp.nomad.csi_volume", vid } };
                        int r = docker_volume_create(standin_docker(), dname, labels, ELEMENTSOF(labels));
                        if (r < 0) {
                                cJSON_Delete(out);
                                return reply_err(c, 500, "volume \"%s\" create failed: %s", vid,
                                                 str_or(docker_last_error(), strerror(-r)));
                        }
                }
                pthread_mutex_lock(&mu);
                struct volume *vol = volume_find(ns, vid);
                if (vol && create) {
                        pthread_mutex_unlock(&mu);
                        cJSON_Delete(out);
                        return reply_err(c, 500, "volume \"%s\" already exists", vid);   /* [unconfirmed wording] */
                }
                if (!vol) {
                        vol = xnew0(struct volume, 1);
                        vol->id = xstrdup(vid);
                        vol->ns = xstrdup(ns);
                        vol->docker_name = xstrdup(dname);
                        vol->next = volumes;
                        volumes = vol;
                        vol->create_index = raft_index + 1;
                } else {
                        free(vol->name), free(vol->plugin), free(vol->external_id);
                        cJSON_Delete(vol->spec);
                }
                vol->name = xstrdup(str_or(json_get_str(v, "Name"), vid));
                vol->plugin = xstrdup(plugin);
                vol->external_id = xstrdup(str_or(json_get_str(v, "ExternalID"), dname));
                vol->capacity = cap;
                vol->spec = cJSON_Duplicate(v, true);
                vol->modify_index = bump(&idx_vols);
                idx = vol->modify_index;
                cJSON_AddItemToArray(outv, volume_json(vol));
                pthread_mutex_unlock(&mu);
        }
        if (!create) {
                cJSON_Delete(out);
                out = NULL;   /* register answers with no body */
        } else {
                json_add_str(out, "Warnings", "");
                json_add_int(out, "Index", (int64_t) idx);
                json_add_int(out, "LastContact", 0);
                json_add_bool(out, "KnownLeader", false);
        }
        return reply_json(c, out, idx, false);
}

enum MHD_Result h_volume_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct volume *v = volume_find(query_ns(c), id);
        return reply_found_locked(c, v ? volume_json(v) : NULL, v ? v->modify_index : 0, "volume not found");
}

enum MHD_Result h_volumes_list(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
        pthread_mutex_lock(&mu);
        cJSON *arr = cJSON_CreateArray();
        const char *ns = query_ns(c);
        for (struct volume *v = volumes; v; v = v->next)
                if (strcmp(ns, "*") == 0 || strcmp(v->ns, ns) == 0)
                        cJSON_AddItemToArray(arr, volume_json(v));
        return reply_query_locked(c, arr, idx_vols);
}

/* DELETE /v1/volume/csi/:id (deregister, keeps the data) and /v1/volume/csi/:id/delete. */
static enum MHD_Result volume_delete(struct MHD_Connection *c, const char *id, bool destroy) {
        enum MHD_Result ret;
        if (acl_denied(c, &ret))
                return ret;
        const char *force = arg(c, "force");
        bool forced = force && strcmp(force, "true") == 0;
        pthread_mutex_lock(&mu);
        struct volume **pp = &volumes, *v = NULL;
        for (; *pp; pp = &(*pp)->next)
                if (strcmp((*pp)->id, id) == 0 && strcmp((*pp)->ns, query_ns(c)) == 0) {
                        v = *pp;
                        break;
                }
        if (!v) {
                pthread_mutex_unlock(&mu);
                return reply_err(c, 500, "volume not found: %s", id);
        }
        _cleanup_json_ cJSON *vj = volume_json(v);
        int64_t writers = 0;
        json_get_int(vj, "CurrentWriters", &writers);
        if (writers > 0 && !forced) {
                pthread_mutex_unlock(&mu);
                return reply_err(c, 500, "volume in use: %s", id);
        }
        *pp = v->next;
        uint64_t idx = bump(&idx_vols);
        pthread_mutex_unlock(&mu);
        if (destroy)
                docker_volume_remove(standin_docker(), v->docker_name, true);
        free(v->id), free(v->ns), free(v->name), free(v->plugin), free(v->external_id), free(v->docker_name);
        cJSON_Delete(v->spec);
        free(v);
        return reply_json(c, NULL, idx, false);
}

enum MHD_Result h_volume_create(struct MHD_Connection *c, const cJSON *body, const char *id) {
        return volume_put(c, body, id, true);
}
enum MHD_Result h_volume_register(struct MHD_Connection *c, const cJSON *body, const char *id) {
        return volume_put(c, body, id, false);
}
enum MHD_Result h_volume_destroy(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        return volume_delete(c, id, true);
}
enum MHD_Result h_volume_deregister(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        return volume_delete(c, id, false);
}
