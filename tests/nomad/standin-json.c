/* standin-json.c — the JSON views of jobs, allocations, evaluations, nodes and volumes, as
 * Nomad's API writes them. */
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

/* ---- JSON views ---- */

static void add_time_fields(cJSON *o, int64_t create, int64_t modify) {
        json_add_int(o, "CreateTime", create);
        json_add_int(o, "ModifyTime", modify);
}

cJSON *alloc_json(const struct alloc *a, bool full) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "ID", a->id);
        json_add_str(o, "EvalID", a->eval_id);
        json_add_str(o, "Name", a->name);
        json_add_str(o, "Namespace", a->ns);
        json_add_str(o, "NodeID", a->node_id);
        json_add_str(o, "NodeName", a->node_name);
        json_add_str(o, "JobID", a->job_id);
        json_add_str(o, "JobType", str_or(json_get_str(a->job, "Type"), "service"));
        int64_t v = 0;
        json_get_int(a->job, "Version", &v);
        json_add_int(o, "JobVersion", v);
        json_add_str(o, "TaskGroup", a->group);
        json_add_str(o, "DesiredStatus", a->desired);
        json_add_str(o, "DesiredDescription", a->desired_desc);
        json_add_str(o, "ClientStatus", a->client);
        json_add_str(o, "ClientDescription", a->client_desc);
        cJSON *ts = cJSON_AddObjectToObject(o, "TaskStates");
        cJSON_AddItemToObject(ts, a->task, cJSON_Duplicate(a->task_state, true));
        json_add_int(o, "CreateIndex", (int64_t) a->create_index);
        json_add_int(o, "ModifyIndex", (int64_t) a->modify_index);
        add_time_fields(o, a->create_time, a->modify_time);
        if (!full) {
                json_add_str(o, "FollowupEvalID", "");
                cJSON_AddNullToObject(o, "RescheduleTracker");
                return o;
        }
        cJSON_AddItemToObject(o, "Job", cJSON_Duplicate(a->job, true));
        json_add_int(o, "AllocModifyIndex", (int64_t) a->create_index);
        const cJSON *g = group_of(a->job, a->group);
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        const cJSON *tr = cJSON_GetObjectItem(t, "Resources");
        int64_t cpu = 100, mem = 300, memmax = 0;
        json_get_int(tr, "CPU", &cpu);
        json_get_int(tr, "MemoryMB", &mem);
        json_get_int(tr, "MemoryMaxMB", &memmax);
        cJSON *r = cJSON_AddObjectToObject(o, "Resources");
        json_add_int(r, "CPU", cpu);
        json_add_int(r, "MemoryMB", mem);
        json_add_int(r, "MemoryMaxMB", memmax);
        json_add_int(r, "DiskMB", 0);
        cJSON *ar = cJSON_AddObjectToObject(o, "AllocatedResources");
        cJSON *tasks = cJSON_AddObjectToObject(ar, "Tasks");
        cJSON *tk = cJSON_AddObjectToObject(tasks, a->task);
        cJSON *tc = cJSON_AddObjectToObject(tk, "Cpu");
        json_add_int(tc, "CpuShares", cpu);
        cJSON *tm = cJSON_AddObjectToObject(tk, "Memory");
        json_add_int(tm, "MemoryMB", mem);
        json_add_int(tm, "MemoryMaxMB", memmax);
        cJSON *sh = cJSON_AddObjectToObject(ar, "Shared");
        json_add_int(sh, "DiskMB", 0);
        cJSON *nets = cJSON_AddArrayToObject(sh, "Networks");
        const char *mode = group_net_mode(g);
        if (mode) {
                cJSON *n = cJSON_CreateObject();
                json_add_str(n, "Mode", mode);
                json_add_str(n, "IP", a->address);
                cJSON_AddItemToArray(nets, n);
        }
        cJSON *ns = cJSON_AddObjectToObject(o, "NetworkStatus");
        json_add_str(ns, "InterfaceName", a->address[0] ? "eth0" : "");
        json_add_str(ns, "Address", a->address);
        json_add_str(ns, "AddressIPv6", "");
        cJSON_AddNullToObject(ns, "DNS");
        return o;
}

cJSON *node_stub(const struct node *n) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "Address", "127.0.0.1");
        json_add_str(o, "ID", n->id);
        json_add_str(o, "Datacenter", cfg.datacenter);
        json_add_str(o, "Name", n->name);
        json_add_str(o, "NodeClass", "");
        json_add_str(o, "NodePool", cfg.node_pool);
        json_add_str(o, "Version", "1.9.7");
        json_add_bool(o, "Drain", false);
        json_add_str(o, "SchedulingEligibility", n->eligible ? "eligible" : "ineligible");
        json_add_str(o, "Status", "ready");
        json_add_str(o, "StatusDescription", "");
        cJSON *d = cJSON_AddObjectToObject(o, "Drivers");
        cJSON *dd = cJSON_AddObjectToObject(d, "docker");
        json_add_bool(dd, "Detected", true);
        json_add_bool(dd, "Healthy", true);
        json_add_str(dd, "HealthDescription", "Healthy");
        json_add_int(o, "CreateIndex", (int64_t) n->create_index);
        json_add_int(o, "ModifyIndex", (int64_t) n->modify_index);
        return o;
}

cJSON *node_full(const struct node *n) {
        cJSON *o = node_stub(n);
        /* as Nomad: the client's HTTP address, host:port (the node relay's host comes from it) */
        _cleanup_free_ char *http = xasprintf("%s:%d", cfg.listen_addr, cfg.port);
        json_add_str(o, "HTTPAddr", http);
        json_add_bool(o, "TLSEnabled", false);
        cJSON *at = cJSON_AddObjectToObject(o, "Attributes");
        json_add_str(at, "driver.docker", "1");
        json_add_str(at, "driver.docker.runtimes", "io.containerd.runc.v2,runc,runsc");
        json_add_str(at, "unique.hostname", n->name);
        json_add_str(at, "kernel.name", "linux");
        cJSON *meta = cJSON_AddObjectToObject(o, "Meta");
        (void) meta;
        json_add_str(o, "SecretID", "");
        return o;
}

cJSON *eval_json(const struct eval *e) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "ID", e->id);
        json_add_int(o, "Priority", 50);
        json_add_str(o, "Type", "service");
        json_add_str(o, "TriggeredBy", e->triggered_by);
        json_add_str(o, "Namespace", e->ns);
        json_add_str(o, "JobID", e->job_id);
        json_add_int(o, "JobModifyIndex", (int64_t) e->job_modify_index);
        json_add_str(o, "Status", e->status);
        json_add_str(o, "StatusDescription", "");
        json_add_str(o, "BlockedEval", e->blocked_eval);
        if (e->failed_tg)
                cJSON_AddItemToObject(o, "FailedTGAllocs", cJSON_Duplicate(e->failed_tg, true));
        else
                cJSON_AddNullToObject(o, "FailedTGAllocs");
        json_add_int(o, "CreateIndex", (int64_t) e->create_index);
        json_add_int(o, "ModifyIndex", (int64_t) e->modify_index);
        add_time_fields(o, e->create_time, e->create_time);
        return o;
}

/* The job's summary status as Nomad derives it: pending until an allocation runs,
 * running while any does, dead when stopped or every allocation is terminal. */
const char *job_status(const struct job *j) {
        bool any = false, live = false;
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->job_id, j->id) == 0 && strcmp(a->ns, j->ns) == 0 && a->job_create_index == j->create_index) {
                        any = true;
                        if (strcmp(a->client, "running") == 0 || strcmp(a->client, "pending") == 0)
                                live = true;
                }
        if (live)
                return "running";
        if (j->stop)
                return "dead";
        return any ? "dead" : "pending";
}

cJSON *job_json(const struct job *j) {
        cJSON *o = cJSON_Duplicate(j->job, true);
        cJSON_DeleteItemFromObject(o, "Status");
        json_add_str(o, "Status", job_status(j));
        json_put(o, "Stop", cJSON_CreateBool(j->stop));
        json_add_int(o, "CreateIndex", (int64_t) j->create_index);
        json_add_int(o, "ModifyIndex", (int64_t) j->modify_index);
        json_add_int(o, "JobModifyIndex", (int64_t) j->job_modify_index);
        return o;
}

cJSON *volume_json(const struct volume *v) {
        cJSON *o = cJSON_Duplicate(v->spec, true);
        cJSON_DeleteItemFromObject(o, "Secrets");
        json_put(o, "ID", cJSON_CreateString(v->id));
        json_put(o, "Namespace", cJSON_CreateString(v->ns));
        json_put(o, "Name", cJSON_CreateString(v->name));
        json_put(o, "PluginID", cJSON_CreateString(v->plugin));
        json_put(o, "ExternalID", cJSON_CreateString(v->external_id));
        json_add_int(o, "Capacity", v->capacity);
        json_add_bool(o, "Schedulable", true);
        int claims = 0;
        for (struct alloc *a = allocs; a; a = a->next) {
                if (strcmp(a->desired, "run") != 0 || strcmp(a->ns, v->ns) != 0)
                        continue;
                const cJSON *gv;
                cJSON_ArrayForEach(gv, cJSON_GetObjectItem(group_of(a->job, a->group), "Volumes"))
                        if (strcmp(str_or(json_get_str(gv, "Source"), ""), v->id) == 0)
                                claims++;
        }
        json_add_int(o, "CurrentWriters", claims);
        json_add_int(o, "CurrentReaders", 0);
        json_add_int(o, "CreateIndex", (int64_t) v->create_index);
        json_add_int(o, "ModifyIndex", (int64_t) v->modify_index);
        return o;
}
