/* standin.h — the Nomad stand-in's private header (tests/nomad/README.md).
 *
 * standin.c holds main(), the configuration, faults, the state (jobs, allocations,
 * evaluations, nodes, CSI volumes) behind one mutex, the request log and task events;
 * standin-place.c places allocations on the local dockerd; standin-json.c writes Nomad's JSON
 * views; standin-http.c is the HTTP plumbing, /_standin and the route table; standin-api.c the
 * API handlers; standin-exec.c serves the alloc exec WebSocket over an MHD-upgraded socket.
 * Each function's contract is stated at its definition.
 */
#pragma once

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <microhttpd.h>
#include <cjson/cJSON.h>

#include "cleanup.h"
#include "strutil.h"

struct docker;

#define MAX_BODY ((size_t) 16 << 20)
#define MAX_NODES 8
#define LABEL_KEY "paddock.nomad-standin"
#define ALLOC_LABEL "com.hashicorp.nomad.alloc_id"
#define DEFAULT_WAIT_MS 300000
#define MAX_WAIT_MS 300000

struct netmap { char *cni, *docker; };

struct node {
        char id[37], name[64], secret[37];
        bool eligible;
        uint64_t create_index, modify_index;
};

struct job {
        char *id, *ns;
        cJSON *job;                /* as registered, canonicalised; TaskGroups[].Count current */
        bool stop, purged;
        int version;
        uint64_t create_index, modify_index, job_modify_index;
        int64_t submit_time;
        struct job *next;
};

struct alloc {
        char id[37], eval_id[37], node_id[37], node_name[64];
        char *ns, *job_id, *group, *task, *name;
        cJSON *job;                /* the job as placed */
        char desired[16], desired_desc[128], client[16], client_desc[256];
        cJSON *task_state;         /* {State, Failed, Restarts, StartedAt, FinishedAt, Events} */
        char address[64];
        char *container;
        uint64_t stats_cpu_ns, stats_sys_ns;   /* the previous stats sample's counters */
        uint64_t create_index, modify_index;
        uint64_t job_create_index;   /* which incarnation of the job (a purged ID may come back) */
        int64_t create_time, modify_time;
        bool stop_requested;
        struct alloc *next;
};

struct eval {
        char id[37], *ns, *job_id, *triggered_by, status[16], blocked_eval[37];
        cJSON *failed_tg;          /* NULL or {group: AllocMetric} */
        uint64_t create_index, modify_index, job_modify_index;
        int64_t create_time;
        struct eval *next;
};

struct volume {
        char *id, *ns, *name, *plugin, *external_id, *docker_name;
        cJSON *spec;
        int64_t capacity;
        uint64_t create_index, modify_index;
        struct volume *next;
};

struct req {
        struct strbuf body;
        bool too_big;
};

struct job_key { const char *ns, *id; };

struct standin_config {
        char listen_addr[64];
        int port;
        char *token;
        int n_nodes;
        char *placement;           /* "spread" or "node:N" */
        int agent_node;            /* the node /v1/agent/self reports */
        char *node_pool, *datacenter, *region;
        char **namespaces;
        struct netmap *nets;
        size_t n_nets;
        char *docker_socket;
        char *record;
        char *csi_plugin;          /* NULL = any plugin id is accepted */
        bool volumes_enabled;      /* the docker plugin's volumes.enabled (host binds, volume drivers) */
        char *instance;            /* label value on everything we create */
};

extern struct standin_config cfg;

struct standin_faults {
        int fail_placement;        /* next N evaluations place nothing (blocked eval) */
        int driver_failure;        /* next N allocations fail with a Driver Failure event */
        char *driver_message;
        long slow_placement_ms;    /* every placement waits this long first */
        long lose_after_ms;        /* 0 = off; running allocations turn lost after this */
        int lose_count;            /* how many allocations to lose (-1 = all) */
        int http_500;              /* next N API requests answer 500 */
        int exec_1011;             /* next N exec sessions close with 1011 */
};

extern struct standin_faults fault;

/* standin.c */
struct docker *standin_docker(void);
/* Where an exec for alloc_id/task would run (task NULL: only check that the allocation exists).
 * the task runs; otherwise Nomad's code (400/404) and message in *ret_msg (xmalloc'd). */
int standin_exec_target(const char *alloc_id, const char *task, char *container, size_t size, char **ret_msg);
/* Takes one pending "exec closed with 1011" fault: true when this session must fail. */
bool standin_take_exec_fault(void);
/* Docker volumes a task's mounts made (removed at exit, as nothing on a real node would). */
void standin_volume_made(const char *name);
/* Appends one line to the request log (no-op without --record). kind "ws-in" / "ws-out". */
void standin_record_ws(const char *path, const char *kind, const char *text, size_t len);
extern uint64_t raft_index, idx_jobs, idx_allocs, idx_evals, idx_nodes, idx_vols;
extern pthread_mutex_t mu;
extern pthread_cond_t changed;
extern struct node nodes[MAX_NODES];
extern struct job *jobs;
extern struct alloc *allocs;
extern struct eval *evals;
extern struct volume *volumes;
extern unsigned spread_next;
extern volatile sig_atomic_t stopping;
extern int workers;
extern FILE *rec;
uint64_t bump(uint64_t *table);
void uuid_new(char out[37]);
int64_t now_ns(void);
const char *str_or(const char *s, const char *def);
struct node *node_by_id(const char *id);
struct job *job_find(const char *ns, const char *id);
struct alloc *alloc_find(const char *id);
struct eval *eval_find(const char *id);
struct volume *volume_find(const char *ns, const char *id);
void record_line(cJSON *o);
void task_event(struct alloc *a, const char *type, const char *display, bool fails, const char *driver_error,
        int exit_code);
void json_put(cJSON *o, const char *key, cJSON *item);
void task_state_set(struct alloc *a, const char *state, bool failed);
void alloc_touch(struct alloc *a);

/* standin-place.c */
const cJSON *group_of(const cJSON *job, const char *name);
const char *group_net_mode(const cJSON *g);
void alloc_request_stop(struct alloc *a, const char *why);
struct eval *evaluate(struct job *j, const char *trigger);
void *monitor_thread(void *arg);

/* standin-json.c */
cJSON *alloc_json(const struct alloc *a, bool full);
cJSON *node_stub(const struct node *n);
cJSON *node_full(const struct node *n);
cJSON *eval_json(const struct eval *e);
const char *job_status(const struct job *j);
cJSON *job_json(const struct job *j);
cJSON *volume_json(const struct volume *v);

/* standin-http.c */
/* A plain-text answer (text/plain; charset=utf-8), as Nomad's HTTP layer writes its errors. */
enum MHD_Result standin_reply_text(struct MHD_Connection *c, unsigned code, const char *text);
/* Checks a request's token as Nomad's ACL resolver does. 0 when allowed; else a
 * Nomad HTTP code (403) and message ("Permission denied", "ACL token not found"). */
int standin_acl(const char *token, const char **ret_msg);
enum MHD_Result reply_err(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
enum MHD_Result reply_json(struct MHD_Connection *c, cJSON *j, uint64_t index, bool query);
const char *arg(struct MHD_Connection *c, const char *k);
int query_lock(struct MHD_Connection *c, uint64_t (*relevant)(const void *), const void *ud,
        enum MHD_Result *ret);
enum MHD_Result reply_query_locked(struct MHD_Connection *c, cJSON *o, uint64_t idx);
enum MHD_Result reply_found_locked(struct MHD_Connection *c, cJSON *o, uint64_t idx, const char *missing);
enum MHD_Result reply_write_locked(struct MHD_Connection *c, cJSON *out, uint64_t idx);
bool acl_denied(struct MHD_Connection *c, enum MHD_Result *ret);
enum MHD_Result reply_job_write_locked(struct MHD_Connection *c, const struct job *j, const struct eval *e,
        bool deregister);
uint64_t rel_job_allocs(const void *ud);
uint64_t rel_job(const void *ud);
uint64_t rel_alloc(const void *ud);
uint64_t rel_table(const void *ud);
uint64_t rel_job_evals(const void *ud);
const char *query_ns(struct MHD_Connection *c);
bool ns_exists(const char *ns);
int set_fault(const char *k, const char *v);
enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
        const char *version, const char *upload, size_t *upload_size, void **con_cls);
void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe);

/* standin-api.c */
cJSON *parse_body(struct req *rq, enum MHD_Result *ret, struct MHD_Connection *c);
enum MHD_Result h_register(struct MHD_Connection *c, const cJSON *body, const char *url_id);
enum MHD_Result h_job_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_job_allocs(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_job_evals(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_job_delete(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_job_scale(struct MHD_Connection *c, const cJSON *body, const char *id);
enum MHD_Result h_alloc_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_alloc_stats(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_eval_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_nodes(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id);
enum MHD_Result h_node_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_node_allocs(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_node_eligibility(struct MHD_Connection *c, const cJSON *body, const char *id);
enum MHD_Result h_agent_self(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id);
enum MHD_Result h_volume_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_volumes_list(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id);
enum MHD_Result h_volume_create(struct MHD_Connection *c, const cJSON *body, const char *id);
enum MHD_Result h_volume_register(struct MHD_Connection *c, const cJSON *body, const char *id);
enum MHD_Result h_volume_destroy(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);
enum MHD_Result h_volume_deregister(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id);

/* standin-exec.c */
/* Queues the 101 response for GET /v1/client/allocation/:id/exec and runs the session
 * once the socket is upgraded. Returns what the access handler returns. */
enum MHD_Result exec_handle(struct MHD_Connection *conn, const char *alloc_id, const char *token);
