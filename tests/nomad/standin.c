/* nomad-standin — a Nomad HTTP API stand-in for tests, placing allocations as real
 * containers on the local dockerd (tests/nomad/README.md, shared/reference/PROTOCOLS.md 1).
 *
 * One process, libmicrohttpd with a thread per connection (blocking queries and exec
 * sessions block their own thread). All state sits behind one mutex; every write bumps
 * the raft-like index and broadcasts one condition that blocking queries wait on.
 * Docker calls happen outside the lock, in placement and stop threads. */
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

#define MAX_BODY ((size_t) 16 << 20)
#define MAX_NODES 8
#define LABEL_KEY "paddock.nomad-standin"
#define ALLOC_LABEL "com.hashicorp.nomad.alloc_id"
#define DEFAULT_WAIT_MS 300000
#define MAX_WAIT_MS 300000

/* ---- configuration ---- */

struct netmap { char *cni, *docker; };
static struct {
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
        char *instance;            /* label value on everything we create */
} cfg = {
        .n_nodes = 2, .agent_node = 0,
};

/* ---- faults ---- */

static struct {
        int fail_placement;        /* next N evaluations place nothing (blocked eval) */
        int driver_failure;        /* next N allocations fail with a Driver Failure event */
        char *driver_message;
        long slow_placement_ms;    /* every placement waits this long first */
        long lose_after_ms;        /* 0 = off; running allocations turn lost after this */
        int lose_count;            /* how many allocations to lose (-1 = all) */
        int http_500;              /* next N API requests answer 500 */
        int exec_1011;             /* next N exec sessions close with 1011 */
} fault;

/* ---- state ---- */

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

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed;
static uint64_t raft_index = 10, idx_jobs = 1, idx_allocs = 1, idx_evals = 1, idx_nodes = 1, idx_vols = 1;
static struct node nodes[MAX_NODES];
static struct job *jobs;
static struct alloc *allocs;
static struct eval *evals;
static struct volume *volumes;
static unsigned spread_next;
static volatile sig_atomic_t stopping;
static int workers;              /* placement/stop threads running */
static struct docker *dk;
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *rec;

struct docker *standin_docker(void) { return dk; }

static uint64_t bump(uint64_t *table) {
        *table = ++raft_index;
        pthread_cond_broadcast(&changed);
        return raft_index;
}

static void uuid_new(char out[37]) {
        uint8_t b[16];
        if (getrandom(b, sizeof(b), 0) != sizeof(b))
                abort();
        b[6] = (uint8_t) ((b[6] & 0x0f) | 0x40);
        b[8] = (uint8_t) ((b[8] & 0x3f) | 0x80);
        snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                 b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static int64_t now_ns(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Go's time.Time JSON form, e.g. "2026-12-02T23:59:01.123456789Z". */
static void rfc3339_ns(int64_t ns, char out[40]) {
        time_t s = (time_t) (ns / 1000000000);
        struct tm tm;
        gmtime_r(&s, &tm);
        char b[32];
        strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, 40, "%s.%09" PRId64 "Z", b, ns % 1000000000);
}

static const char *str_or(const char *s, const char *def) { return s && *s ? s : def; }

static struct node *node_by_id(const char *id) {
        for (int i = 0; i < cfg.n_nodes; i++)
                if (strcmp(nodes[i].id, id) == 0)
                        return &nodes[i];
        return NULL;
}

static struct job *job_find(const char *ns, const char *id) {
        for (struct job *j = jobs; j; j = j->next)
                if (!j->purged && strcmp(j->id, id) == 0 && strcmp(j->ns, ns) == 0)
                        return j;
        return NULL;
}

static struct alloc *alloc_find(const char *id) {
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->id, id) == 0)
                        return a;
        return NULL;
}

static struct eval *eval_find(const char *id) {
        for (struct eval *e = evals; e; e = e->next)
                if (strcmp(e->id, id) == 0)
                        return e;
        return NULL;
}

static struct volume *volume_find(const char *ns, const char *id) {
        for (struct volume *v = volumes; v; v = v->next)
                if (strcmp(v->id, id) == 0 && strcmp(v->ns, ns) == 0)
                        return v;
        return NULL;
}

/* ---- the request log ---- */

static void record_line(cJSON *o) {
        if (!rec)
                return;
        json_add_int(o, "Time", now_ns());
        _cleanup_free_ char *s = json_print(o);
        pthread_mutex_lock(&rec_mu);
        fprintf(rec, "%s\n", s);
        fflush(rec);
        pthread_mutex_unlock(&rec_mu);
}

void standin_record_ws(const char *path, const char *kind, const char *text, size_t len) {
        if (!rec)
                return;
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "Method", kind);
        json_add_str(o, "Path", path);
        cJSON *body = NULL;
        if (json_parse(text, len, MAX_BODY, 64, &body, NULL, 0) == 0)
                cJSON_AddItemToObject(o, "Body", body);
        else
                json_add_strn(o, "Body", text, len);
        record_line(o);
}

/* ---- task events and states ---- */

static void task_event(struct alloc *a, const char *type, const char *display, bool fails, const char *driver_error,
                       int exit_code) {
        cJSON *evs = cJSON_GetObjectItemCaseSensitive(a->task_state, "Events");
        cJSON *e = cJSON_CreateObject();
        json_add_str(e, "Type", type);
        json_add_int(e, "Time", now_ns());
        json_add_str(e, "Message", "");
        json_add_str(e, "DisplayMessage", display);
        cJSON *d = cJSON_AddObjectToObject(e, "Details");
        if (fails)
                json_add_str(d, "fails_task", "true");
        if (driver_error)
                json_add_str(d, "driver_error", driver_error);
        if (exit_code >= 0) {
                char b[16];
                snprintf(b, sizeof(b), "%d", exit_code);
                json_add_str(d, "exit_code", b);
        }
        json_add_bool(e, "FailsTask", fails);
        json_add_str(e, "RestartReason", "");
        json_add_str(e, "SetupError", "");
        json_add_str(e, "DriverError", driver_error ? driver_error : "");
        json_add_int(e, "ExitCode", exit_code >= 0 ? exit_code : 0);
        json_add_int(e, "Signal", 0);
        json_add_str(e, "KillReason", "");
        json_add_str(e, "DriverMessage", "");
        json_add_str(e, "FailedSibling", "");
        cJSON_AddItemToArray(evs, e);
}


/* Sets member key of o to item, in place when o has it (keeping its position), else at the
 * end. cJSON_ReplaceItemInObject alone drops (and leaks) the item when the key is absent. */
static void json_put(cJSON *o, const char *key, cJSON *item) {
        if (!cJSON_ReplaceItemInObjectCaseSensitive(o, key, item))
                cJSON_AddItemToObject(o, key, item);
}

static void task_state_set(struct alloc *a, const char *state, bool failed) {
        json_put(a->task_state, "State", cJSON_CreateString(state));
        json_put(a->task_state, "Failed", cJSON_CreateBool(failed));
        char t[40];
        rfc3339_ns(now_ns(), t);
        if (strcmp(state, "running") == 0)
                json_put(a->task_state, "StartedAt", cJSON_CreateString(t));
        if (strcmp(state, "dead") == 0)
                json_put(a->task_state, "FinishedAt", cJSON_CreateString(t));
}

static void alloc_touch(struct alloc *a) {
        a->modify_index = bump(&idx_allocs);
        a->modify_time = now_ns();
}

/* ---- placement ---- */

static const cJSON *group_of(const cJSON *job, const char *name) {
        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(job, "TaskGroups")) {
                const char *n = json_get_str(g, "Name");
                if (n && strcmp(n, name) == 0)
                        return g;
        }
        return NULL;
}

static const char *docker_network_for(const char *mode) {
        if (!mode || !*mode)
                return NULL;   /* Docker's default bridge, as Nomad's docker driver without a group network */
        for (size_t i = 0; i < cfg.n_nets; i++)
                if (strcmp(cfg.nets[i].cni, mode) == 0)
                        return cfg.nets[i].docker;
        if (strcmp(mode, "none") == 0 || strcmp(mode, "host") == 0 || strcmp(mode, "bridge") == 0)
                return mode;
        return "";   /* unknown: no node offers it */
}

static const char *group_net_mode(const cJSON *g) {
        const cJSON *n = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Networks"), 0);
        return n ? json_get_str(n, "Mode") : NULL;
}

/* Why no node fits group g of job (a ConstraintFiltered key, Nomad's wording), or NULL. */
static const char *unplaceable(const cJSON *job, const cJSON *g) {
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        if (!t || strcmp(str_or(json_get_str(t, "Driver"), ""), "docker") != 0)
                return "missing drivers";
        const char *mode = group_net_mode(g);
        const char *net = docker_network_for(mode);
        if (net && !*net)
                return "missing network";
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(g, "Volumes")) {
                if (strcmp(str_or(json_get_str(v, "Type"), ""), "csi") != 0)
                        continue;
                const char *src = json_get_str(v, "Source");
                if (!src || !volume_find(str_or(json_get_str(job, "Namespace"), "default"), src))
                        return "missing CSI Volume";
        }
        const char *pool = str_or(json_get_str(job, "NodePool"), "default");
        if (strcmp(pool, "all") != 0 && strcmp(pool, cfg.node_pool) != 0)
                return "node pool";   /* no node of the pool: Nomad counts nothing as evaluated */
        bool dc_ok = false;
        const cJSON *dc;
        cJSON_ArrayForEach(dc, cJSON_GetObjectItem(job, "Datacenters"))
                if (cJSON_IsString(dc) && fnmatch(dc->valuestring, cfg.datacenter, 0) == 0)
                        dc_ok = true;
        if (!dc_ok)
                return "datacenter";
        return NULL;
}

static struct node *pick_node(void) {
        if (startswith(cfg.placement, "node:")) {
                int i = atoi(cfg.placement + 5);
                return i >= 0 && i < cfg.n_nodes && nodes[i].eligible ? &nodes[i] : NULL;
        }
        for (int k = 0; k < cfg.n_nodes; k++) {
                struct node *n = &nodes[spread_next++ % (unsigned) cfg.n_nodes];
                if (n->eligible)
                        return n;
        }
        return NULL;
}

static cJSON *alloc_metric(const char *why, int evaluated) {
        cJSON *m = cJSON_CreateObject();
        json_add_int(m, "NodesEvaluated", evaluated);
        json_add_int(m, "NodesFiltered", evaluated);
        json_add_int(m, "NodesInPool", strcmp(why, "node pool") == 0 ? 0 : cfg.n_nodes);
        cJSON *av = cJSON_AddObjectToObject(m, "NodesAvailable");
        json_add_int(av, cfg.datacenter, strcmp(why, "datacenter") == 0 ? 0 : cfg.n_nodes);
        cJSON_AddNullToObject(m, "ClassFiltered");
        cJSON *cf = cJSON_AddObjectToObject(m, "ConstraintFiltered");
        if (evaluated > 0)
                json_add_int(cf, why, evaluated);
        json_add_int(m, "NodesExhausted", 0);
        cJSON_AddNullToObject(m, "ClassExhausted");
        cJSON_AddNullToObject(m, "DimensionExhausted");
        cJSON_AddNullToObject(m, "QuotaExhausted");
        json_add_int(m, "CoalescedFailures", 0);
        return m;
}

static void *place_thread(void *arg);
static void *stop_thread(void *arg);

static void spawn(void *(*fn)(void *), char *arg) {
        pthread_t t;
        workers++;
        if (pthread_create(&t, NULL, fn, arg) != 0)
                abort();
        pthread_detach(t);
}

static struct alloc *alloc_new(struct job *j, const cJSON *g, int index, const char *eval_id, struct node *n) {
        struct alloc *a = xnew0(struct alloc, 1);
        uuid_new(a->id);
        strscpy(a->eval_id, eval_id, sizeof(a->eval_id));
        strscpy(a->node_id, n->id, sizeof(a->node_id));
        strscpy(a->node_name, n->name, sizeof(a->node_name));
        a->ns = xstrdup(j->ns);
        a->job_id = xstrdup(j->id);
        a->group = xstrdup(json_get_str(g, "Name"));
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        a->task = xstrdup(str_or(json_get_str(t, "Name"), "task"));
        a->name = xasprintf("%s.%s[%d]", j->id, a->group, index);
        a->job = cJSON_Duplicate(j->job, true);
        a->job_create_index = j->create_index;
        strscpy(a->desired, "run", sizeof(a->desired));
        strscpy(a->client, "pending", sizeof(a->client));
        a->task_state = cJSON_CreateObject();
        json_add_str(a->task_state, "State", "pending");
        json_add_bool(a->task_state, "Failed", false);
        json_add_int(a->task_state, "Restarts", 0);
        json_add_str(a->task_state, "LastRestart", "0001-01-01T00:00:00Z");
        json_add_str(a->task_state, "StartedAt", "0001-01-01T00:00:00Z");
        json_add_str(a->task_state, "FinishedAt", "0001-01-01T00:00:00Z");
        cJSON_AddArrayToObject(a->task_state, "Events");
        task_event(a, "Received", "Task received by client", false, NULL, -1);
        a->create_time = now_ns();
        a->create_index = bump(&idx_allocs);
        a->modify_index = a->create_index;
        a->modify_time = a->create_time;
        a->next = allocs;
        allocs = a;
        return a;
}

static void alloc_request_stop(struct alloc *a, const char *why) {
        if (strcmp(a->desired, "run") != 0)
                return;
        strscpy(a->desired, "stop", sizeof(a->desired));
        strscpy(a->desired_desc, why, sizeof(a->desired_desc));
        a->stop_requested = true;
        alloc_touch(a);
        spawn(stop_thread, xstrdup(a->id));
}

/* An evaluation for job j: stops allocations beyond each group's Count (or all when
 * the job is stopped) and places the missing ones. Returns the eval. Locked. */
static struct eval *evaluate(struct job *j, const char *trigger) {
        struct eval *e = xnew0(struct eval, 1);
        uuid_new(e->id);
        e->ns = xstrdup(j->ns);
        e->job_id = xstrdup(j->id);
        e->triggered_by = xstrdup(trigger);
        e->job_modify_index = j->job_modify_index;
        e->create_time = now_ns();
        strscpy(e->status, "complete", sizeof(e->status));
        e->create_index = bump(&idx_evals);
        e->modify_index = e->create_index;
        e->next = evals;
        evals = e;

        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(j->job, "TaskGroups")) {
                const char *gname = json_get_str(g, "Name");
                int64_t want = 1;
                json_get_int(g, "Count", &want);
                if (j->stop || j->purged)
                        want = 0;
                int have = 0;
                for (struct alloc *a = allocs; a; a = a->next)
                        if (strcmp(a->job_id, j->id) == 0 && strcmp(a->ns, j->ns) == 0 && strcmp(a->group, gname) == 0 &&
                            a->job_create_index == j->create_index && strcmp(a->desired, "run") == 0) {
                                /* Reschedule attempts 0: a failed or lost allocation is not replaced, and it
                                 * still counts, so an evaluation does not place a second one. */
                                if (have >= want) {
                                        alloc_request_stop(a, "alloc not needed due to job update");
                                        continue;
                                }
                                have++;
                        }
                if (have >= want)
                        continue;
                const char *why = unplaceable(j->job, g);
                if (!why && fault.fail_placement > 0) {
                        fault.fail_placement--;
                        why = "stand-in injected fault: no node fits";
                }
                struct node *n = why ? NULL : pick_node();
                if (!why && !n)
                        why = "node is ineligible";
                if (why) {
                        if (!e->failed_tg)
                                e->failed_tg = cJSON_CreateObject();
                        int evaluated = strcmp(why, "node pool") == 0 || strcmp(why, "datacenter") == 0 ? 0 : cfg.n_nodes;
                        cJSON *m = alloc_metric(why, evaluated);
                        json_add_int(m, "CoalescedFailures", want - have - 1);
                        cJSON_AddItemToObject(e->failed_tg, gname, m);
                        if (!e->blocked_eval[0])
                                uuid_new(e->blocked_eval);
                        continue;
                }
                for (int k = have; k < want; k++) {
                        struct node *nn = k == have ? n : pick_node();
                        if (!nn)
                                break;
                        int index = 0;   /* the lowest name index not in use */
                        for (bool used = true; used; index++) {
                                used = false;
                                _cleanup_free_ char *nm = xasprintf("%s.%s[%d]", j->id, gname, index);
                                for (struct alloc *a = allocs; a; a = a->next)
                                        if (strcmp(a->desired, "run") == 0 && strcmp(a->name, nm) == 0 &&
                                            strcmp(a->ns, j->ns) == 0)
                                                used = true;
                                if (!used)
                                        break;
                        }
                        struct alloc *a = alloc_new(j, g, index, e->id, nn);
                        spawn(place_thread, xstrdup(a->id));
                }
        }
        return e;
}

/* The docker config's auth block (an object, or as Nomad's JSON jobs write blocks, an array
 * of one) as Docker's X-Registry-Auth: base64url of {"username","password","email",
 * "serveraddress"}, as go-dockerclient sends it for Nomad's docker driver. "e30=" ({}) when
 * the task has no credentials. */
static char *pull_auth(const cJSON *conf) {
        const cJSON *a = cJSON_GetObjectItem(conf, "auth");
        if (cJSON_IsArray(a))
                a = cJSON_GetArrayItem(a, 0);
        if (!cJSON_IsObject(a) || !json_get_str(a, "username"))
                return xstrdup("e30=");
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "username", json_get_str(a, "username"));
        json_add_str(o, "password", str_or(json_get_str(a, "password"), ""));
        json_add_str(o, "email", str_or(json_get_str(a, "email"), ""));
        json_add_str(o, "serveraddress", str_or(json_get_str(a, "server_address"), ""));
        _cleanup_free_ char *text = json_print(o);
        char *b = base64_encode(text, strlen(text), NULL);
        for (char *p = b; *p; p++)
                *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
        return b;
}

/* Nomad's docker driver (coordinator.go): an image the node already holds is used as it is
 * (force_pull false); otherwise a "Driver" event "Downloading image" and a pull with the
 * task's auth. A failed pull fails the task: "Failed to pull `<image>`: ... <Docker's error>". */
static int ensure_image(struct alloc *a, const cJSON *conf, const char *image, char **ret_err) {
        int r = docker_image_exists(dk, image);
        if (r > 0)
                return 0;
        const char *slash = strrchr(image, '/'), *colon = strrchr(image, ':');
        if (colon && slash && colon < slash)
                colon = NULL;
        if (r < 0 || strchr(image, '@')) {
                *ret_err = xasprintf("Failed to pull `%s`: %s", image,
                                     r < 0 ? str_or(docker_last_error(), strerror(-r))
                                           : "nomad-standin: digest references are not supported");
                return r < 0 ? r : -EINVAL;
        }
        pthread_mutex_lock(&mu);
        task_event(a, "Driver", "Downloading image", false, NULL, -1);
        alloc_touch(a);
        pthread_mutex_unlock(&mu);
        _cleanup_free_ char *name = colon ? xstrndup(image, (size_t) (colon - image)) : xstrdup(image);
        _cleanup_free_ char *auth = pull_auth(conf);
        r = docker_image_pull(dk, name, colon ? colon + 1 : "latest", auth);
        if (r < 0) {
                /* Nomad's words, then Docker's error; the middle part says why a pull was tried. */
                *ret_err = xasprintf("Failed to pull `%s`: image not present on the stand-in's dockerd and the pull failed: %s",
                                     image, str_or(docker_last_error(), strerror(-r)));
                return r;
        }
        return 0;
}

/* Builds the container from the task's docker config as Nomad's docker driver does. */
static int start_container(struct alloc *a, char **ret_id, char **ret_err) {
        const cJSON *g = group_of(a->job, a->group);
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        const cJSON *c = cJSON_GetObjectItem(t, "Config");
        const cJSON *res = cJSON_GetObjectItem(t, "Resources");
        const char *image = json_get_str(c, "image");
        if (!image) {
                *ret_err = xstrdup("failed to create container: image is required");
                return -EINVAL;
        }
        /* command is one string, arguments in args. */
        _cleanup_free_ const char **argv = xnew0(const char *, (size_t) cJSON_GetArraySize(cJSON_GetObjectItem(c, "args")) + 2);
        size_t n = 0;
        if (json_get_str(c, "command"))
                argv[n++] = json_get_str(c, "command");
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "args"))
                if (cJSON_IsString(x))
                        argv[n++] = x->valuestring;
        struct docker_create_opts o = {
                .image = image,
                .cmd = n ? argv : NULL,
                .runtime = json_get_str(c, "runtime"),
                .network_mode = docker_network_for(group_net_mode(g)),
        };
        _cleanup_free_ char *name = xasprintf("%s-%s", a->task, a->id);
        o.name = name;
        int64_t v;
        if (json_get_int(res, "CPU", &v))
                o.cpu_shares = v;
        int64_t mem = 0, memmax = 0;
        json_get_int(res, "MemoryMB", &mem);
        json_get_int(res, "MemoryMaxMB", &memmax);
        if (memmax > 0) {
                o.memory_bytes = memmax << 20;
                o.memory_reservation = mem << 20;
        } else
                o.memory_bytes = mem << 20;
        if (json_get_int(c, "pids_limit", &v))
                o.pids_limit = v;
        const cJSON *b = cJSON_GetObjectItem(c, "cpu_hard_limit");
        if (cJSON_IsTrue(b) && json_get_int(res, "CPU", &v))
                o.nano_cpus = v * 1000000;   /* stand-in nodes: 1000 MHz per core */
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "cap_drop")) {
                if (!cJSON_IsString(x) || strcasecmp(x->valuestring, "ALL") != 0) {
                        *ret_err = xstrdup("nomad-standin: only cap_drop [\"ALL\"] is supported");
                        return -EINVAL;
                }
                o.cap_drop_all = true;
        }
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "cap_add")) {
                if (!cJSON_IsString(x) || strcasecmp(x->valuestring, "ALL") != 0) {
                        *ret_err = xstrdup("nomad-standin: only cap_add [\"ALL\"] is supported");
                        return -EINVAL;
                }
                o.cap_add_all = true;
        }
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "security_opt")) {
                if (!cJSON_IsString(x) || strcmp(x->valuestring, "no-new-privileges") != 0) {
                        *ret_err = xstrdup("nomad-standin: only security_opt [\"no-new-privileges\"] is supported");
                        return -EINVAL;
                }
                o.no_new_privileges = true;
        }
        /* CSI volumes: the Docker volume behind each, mounted where the task asks. */
        struct docker_mount mounts[8];
        size_t nm = 0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(t, "VolumeMounts")) {
                const char *vname = json_get_str(x, "Volume");
                const cJSON *gv = vname ? cJSON_GetObjectItem(cJSON_GetObjectItem(g, "Volumes"), vname) : NULL;
                pthread_mutex_lock(&mu);
                struct volume *vol = gv ? volume_find(a->ns, str_or(json_get_str(gv, "Source"), "")) : NULL;
                const char *dname = vol ? vol->docker_name : NULL;
                pthread_mutex_unlock(&mu);
                if (!dname || nm == ELEMENTSOF(mounts)) {
                        *ret_err = xasprintf("failed to setup alloc: volume \"%s\" is not available", str_or(vname, ""));
                        return -EINVAL;
                }
                mounts[nm++] = (struct docker_mount) { .volume = dname, .target = json_get_str(x, "Destination"),
                                                       .read_only = cJSON_IsTrue(cJSON_GetObjectItem(x, "ReadOnly")) };
        }
        o.mounts = mounts;
        o.n_mounts = nm;
        struct docker_kv labels[] = {
                { ALLOC_LABEL, a->id },
                { "com.hashicorp.nomad.job_id", a->job_id },
                { "com.hashicorp.nomad.namespace", a->ns },
                { "com.hashicorp.nomad.node_id", a->node_id },
                { "com.hashicorp.nomad.task_group_name", a->group },
                { "com.hashicorp.nomad.task_name", a->task },
                { LABEL_KEY, cfg.instance },
        };
        o.labels = labels;
        o.n_labels = ELEMENTSOF(labels);
        _cleanup_free_ char *id = NULL;
        int r = ensure_image(a, c, image, ret_err);
        if (r < 0)
                return r;
        r = docker_container_create(dk, &o, &id);
        if (r == -ENOENT) {
                *ret_err = xasprintf("Failed to pull `%s`: image not present on the stand-in's dockerd", image);
                return r;
        }
        if (r < 0) {
                *ret_err = xasprintf("failed to create container: %s", str_or(docker_last_error(), strerror(-r)));
                return r;
        }
        r = docker_container_start(dk, id);
        if (r < 0) {
                *ret_err = xasprintf("failed to start task: %s", str_or(docker_last_error(), strerror(-r)));
                docker_container_remove(dk, id, true, false);
                return r;
        }
        *ret_id = TAKE_PTR(id);
        return 0;
}

static void alloc_fail(struct alloc *a, const char *msg) {
        task_event(a, "Driver Failure", msg, false, msg, -1);
        task_event(a, "Not Restarting", "Policy allows no restarts", true, NULL, -1);
        task_state_set(a, "dead", true);
        strscpy(a->client, "failed", sizeof(a->client));
        strscpy(a->client_desc, "Failed tasks", sizeof(a->client_desc));
        alloc_touch(a);
}

static void worker_done(void) {
        pthread_mutex_lock(&mu);
        workers--;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&mu);
}

static void sleep_ms(long ms) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static void *place_thread(void *arg) {
        _cleanup_free_ char *id = arg;
        pthread_mutex_lock(&mu);
        long slow = fault.slow_placement_ms;
        pthread_mutex_unlock(&mu);
        if (slow > 0)
                sleep_ms(slow);

        pthread_mutex_lock(&mu);
        struct alloc *a = alloc_find(id);
        bool go = a && strcmp(a->desired, "run") == 0 && !stopping;
        bool driver_fail = go && fault.driver_failure > 0;
        if (driver_fail)
                fault.driver_failure--;
        _cleanup_free_ char *dmsg = driver_fail ? xstrdup(str_or(fault.driver_message,
                                                             "failed to create container: stand-in injected driver failure"))
                                                : NULL;
        if (go) {
                task_event(a, "Task Setup", "Building Task Directory", false, NULL, -1);
                alloc_touch(a);
        } else if (a && strcmp(a->client, "pending") == 0) {
                /* Stopped before it started: nothing to run, the allocation completes. */
                task_state_set(a, "dead", false);
                strscpy(a->client, "complete", sizeof(a->client));
                strscpy(a->client_desc, "All tasks have completed", sizeof(a->client_desc));
                alloc_touch(a);
        }
        pthread_mutex_unlock(&mu);
        if (!go) {
                worker_done();
                return NULL;
        }

        _cleanup_free_ char *cid = NULL, *err = NULL;
        int r = driver_fail ? -EIO : start_container(a, &cid, &err);
        struct docker_container_state st = { 0 };
        if (r >= 0)
                docker_container_inspect(dk, cid, &st);

        pthread_mutex_lock(&mu);
        if (r < 0)
                alloc_fail(a, driver_fail ? dmsg : err);
        else {
                a->container = xstrdup(cid);
                const char *mode = group_net_mode(group_of(a->job, a->group));
                if (mode && (startswith(mode, "cni/") || strcmp(mode, "bridge") == 0))
                        strscpy(a->address, st.ip, sizeof(a->address));
                task_event(a, "Started", "Task started by client", false, NULL, -1);
                task_state_set(a, "running", false);
                strscpy(a->client, "running", sizeof(a->client));
                strscpy(a->client_desc, "Tasks are running", sizeof(a->client_desc));
                alloc_touch(a);
        }
        bool stop_now = r >= 0 && a->stop_requested;   /* stopped while we were starting it */
        long lose = r >= 0 && fault.lose_after_ms > 0 && fault.lose_count != 0 ? fault.lose_after_ms : 0;
        if (lose && fault.lose_count > 0)
                fault.lose_count--;
        pthread_mutex_unlock(&mu);

        if (stop_now) {
                pthread_mutex_lock(&mu);
                spawn(stop_thread, xstrdup(id));
                pthread_mutex_unlock(&mu);
        } else if (lose) {
                sleep_ms(lose);
                pthread_mutex_lock(&mu);
                bool still = strcmp(a->client, "running") == 0 && strcmp(a->desired, "run") == 0;
                if (still) {
                        strscpy(a->desired, "stop", sizeof(a->desired));
                        strscpy(a->desired_desc, "alloc is lost since its node is down", sizeof(a->desired_desc));
                        strscpy(a->client, "lost", sizeof(a->client));
                        strscpy(a->client_desc, "alloc is lost since its node is down", sizeof(a->client_desc));
                        task_state_set(a, "dead", false);
                        alloc_touch(a);
                }
                pthread_mutex_unlock(&mu);
                if (still)
                        docker_container_remove(dk, cid, true, false);
        }
        worker_done();
        return NULL;
}

static void *stop_thread(void *arg) {
        _cleanup_free_ char *id = arg;
        pthread_mutex_lock(&mu);
        struct alloc *a = alloc_find(id);
        _cleanup_free_ char *cid = a && a->container ? xstrdup(a->container) : NULL;
        bool running = a && strcmp(a->client, "running") == 0;
        if (running) {
                task_event(a, "Killing", "Sent interrupt. Waiting 5s before force killing", false, NULL, -1);
                alloc_touch(a);
        }
        pthread_mutex_unlock(&mu);
        if (cid)
                docker_container_remove(dk, cid, true, false);
        pthread_mutex_lock(&mu);
        if (running) {
                task_event(a, "Killed", "Task successfully killed", false, NULL, -1);
                task_state_set(a, "dead", false);
                strscpy(a->client, "complete", sizeof(a->client));
                strscpy(a->client_desc, "All tasks have completed", sizeof(a->client_desc));
                alloc_touch(a);
        }
        pthread_mutex_unlock(&mu);
        worker_done();
        return NULL;
}

/* Allocation whose container died on its own: the task is dead, restart attempts 0. */
static void *monitor_thread(void *arg) {
        (void) arg;
        while (!stopping) {
                sleep_ms(1000);
                char ids[64][37], cids[64][80];
                int n = 0;
                pthread_mutex_lock(&mu);
                for (struct alloc *a = allocs; a && n < 64; a = a->next)
                        if (strcmp(a->client, "running") == 0 && strcmp(a->desired, "run") == 0 && a->container) {
                                strscpy(ids[n], a->id, 37);
                                strscpy(cids[n], a->container, 80);
                                n++;
                        }
                pthread_mutex_unlock(&mu);
                for (int i = 0; i < n; i++) {
                        struct docker_container_state st = { 0 };
                        if (docker_container_inspect(dk, cids[i], &st) < 0 || st.running)
                                continue;
                        pthread_mutex_lock(&mu);
                        struct alloc *a = alloc_find(ids[i]);
                        if (a && strcmp(a->client, "running") == 0 && strcmp(a->desired, "run") == 0) {
                                _cleanup_free_ char *m = xasprintf("Exit Code: %d%s", st.exists ? st.exit_code : 137,
                                                                   st.oom_killed ? ", OOM Killed" : "");
                                task_event(a, "Terminated", m, false, NULL, st.exists ? st.exit_code : 137);
                                bool ok = st.exists && st.exit_code == 0;
                                if (!ok)
                                        task_event(a, "Not Restarting", "Policy allows no restarts", true, NULL, -1);
                                task_state_set(a, "dead", !ok);
                                strscpy(a->client, ok ? "complete" : "failed", sizeof(a->client));
                                strscpy(a->client_desc, ok ? "All tasks have completed" : "Failed tasks",
                                        sizeof(a->client_desc));
                                alloc_touch(a);
                        }
                        pthread_mutex_unlock(&mu);
                }
        }
        return NULL;
}

/* ---- JSON views ---- */

static void add_time_fields(cJSON *o, int64_t create, int64_t modify) {
        json_add_int(o, "CreateTime", create);
        json_add_int(o, "ModifyTime", modify);
}

static cJSON *alloc_json(const struct alloc *a, bool full) {
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

static cJSON *node_stub(const struct node *n) {
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

static cJSON *node_full(const struct node *n) {
        cJSON *o = node_stub(n);
        json_add_str(o, "HTTPAddr", cfg.listen_addr);
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

static cJSON *eval_json(const struct eval *e) {
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
static const char *job_status(const struct job *j) {
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

static cJSON *job_json(const struct job *j) {
        cJSON *o = cJSON_Duplicate(j->job, true);
        cJSON_DeleteItemFromObject(o, "Status");
        json_add_str(o, "Status", job_status(j));
        json_put(o, "Stop", cJSON_CreateBool(j->stop));
        json_add_int(o, "CreateIndex", (int64_t) j->create_index);
        json_add_int(o, "ModifyIndex", (int64_t) j->modify_index);
        json_add_int(o, "JobModifyIndex", (int64_t) j->job_modify_index);
        return o;
}

static cJSON *volume_json(const struct volume *v) {
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

/* ---- HTTP plumbing ---- */

struct req {
        struct strbuf body;
        bool too_big;
};

static void add_headers(struct MHD_Response *r, uint64_t index, bool query) {
        if (index) {
                char b[32];
                snprintf(b, sizeof(b), "%" PRIu64, index);
                MHD_add_response_header(r, "X-Nomad-Index", b);
        }
        if (query) {
                MHD_add_response_header(r, "X-Nomad-KnownLeader", "true");
                MHD_add_response_header(r, "X-Nomad-LastContact", "0");
        }
}

static enum MHD_Result reply_raw(struct MHD_Connection *c, unsigned code, const char *ctype, char *body, uint64_t index,
                                 bool query) {
        size_t len = body ? strlen(body) : 0;
        struct MHD_Response *r = MHD_create_response_from_buffer(len, body ? body : (char *) "",
                                                                 body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (ctype)
                MHD_add_response_header(r, "Content-Type", ctype);
        add_headers(r, index, query);
        enum MHD_Result ret = MHD_queue_response(c, code, r);
        MHD_destroy_response(r);
        return ret;
}

static enum MHD_Result reply_err(struct MHD_Connection *c, unsigned code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static enum MHD_Result reply_err(struct MHD_Connection *c, unsigned code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char *m = NULL;
        if (vasprintf(&m, fmt, ap) < 0)
                oom();
        va_end(ap);
        return reply_raw(c, code, "text/plain; charset=utf-8", m, 0, false);
}

enum MHD_Result standin_reply_text(struct MHD_Connection *c, unsigned code, const char *text) {
        return reply_err(c, code, "%s", text);
}

/* Takes ownership of j (NULL = no body, as Nomad's handlers that return nil). */
static enum MHD_Result reply_json(struct MHD_Connection *c, cJSON *j, uint64_t index, bool query) {
        if (!j)
                return reply_raw(c, 200, NULL, NULL, index, query);
        char *s = json_print(j);
        cJSON_Delete(j);
        return reply_raw(c, 200, "application/json", s, index, query);
}

static const char *arg(struct MHD_Connection *c, const char *k) {
        return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
}

static const char *request_token(struct MHD_Connection *c) {
        const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Nomad-Token");
        if (t && *t)
                return t;
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (a && strncasecmp(a, "Bearer ", 7) == 0)
                return a + 7;
        return NULL;
}

int standin_acl(const char *token, const char **ret_msg) {
        if (!cfg.token)
                return 0;
        if (!token || !*token) {
                *ret_msg = "Permission denied";   /* the anonymous token may do nothing */
                return 403;
        }
        if (!streq_const(token, cfg.token)) {
                *ret_msg = "ACL token not found";
                return 403;
        }
        return 0;
}

/* Go's time.ParseDuration for the forms clients send: "300s", "5m", "250ms", "1m30s", "1.5s". */
static int parse_go_duration(const char *s, int64_t *ret_ms) {
        if (!s || !*s)
                return -EINVAL;
        if (strcmp(s, "0") == 0) {
                *ret_ms = 0;
                return 0;
        }
        double total = 0;
        const char *p = s;
        while (*p) {
                char *end;
                double v = strtod(p, &end);
                if (end == p || v < 0)
                        return -EINVAL;
                p = end;
                double unit;
                if (startswith(p, "ns")) unit = 1e-6, p += 2;
                else if (startswith(p, "us") || startswith(p, "µs")) unit = 1e-3, p += startswith(p, "us") ? 2 : 3;
                else if (startswith(p, "ms")) unit = 1, p += 2;
                else if (*p == 's') unit = 1000, p++;
                else if (*p == 'm') unit = 60000, p++;
                else if (*p == 'h') unit = 3600000, p++;
                else return -EINVAL;
                total += v * unit;
        }
        *ret_ms = (int64_t) total;
        return 0;
}

/* Parses ?index=&wait= as Nomad does. 0, or replies 400 itself and returns -1. */
static int parse_blocking(struct MHD_Connection *c, uint64_t *ret_index, int64_t *ret_wait_ms, enum MHD_Result *ret) {
        *ret_index = 0;
        *ret_wait_ms = DEFAULT_WAIT_MS;
        const char *w = arg(c, "wait"), *i = arg(c, "index");
        if (w && *w) {
                int64_t ms;
                if (parse_go_duration(w, &ms) < 0) {
                        *ret = reply_err(c, 400, "Invalid wait time");
                        return -1;
                }
                *ret_wait_ms = ms > MAX_WAIT_MS ? MAX_WAIT_MS : ms;
        }
        if (i && *i) {
                char *end;
                errno = 0;
                unsigned long long v = strtoull(i, &end, 10);
                if (errno || *end || i[0] == '-') {
                        *ret = reply_err(c, 400, "Invalid index");
                        return -1;
                }
                *ret_index = v;
        }
        /* Nomad adds up to wait/16 of jitter. */
        if (*ret_wait_ms > 16) {
                uint32_t r;
                if (getrandom(&r, sizeof(r), 0) == sizeof(r))
                        *ret_wait_ms += r % (uint64_t) (*ret_wait_ms / 16);
        }
        return 0;
}

/* Waits (locked) until relevant() > min_index, the deadline, or shutdown. */
static void block_until(uint64_t min_index, int64_t wait_ms, uint64_t (*relevant)(const void *), const void *ud) {
        if (min_index == 0)
                return;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += wait_ms / 1000;
        dl.tv_nsec += (wait_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000;
        }
        while (relevant(ud) <= min_index && !stopping)
                if (pthread_cond_timedwait(&changed, &mu, &dl) == ETIMEDOUT)
                        break;
}

/* Parses ?index=&wait=, takes the lock and, for a blocking query, waits until relevant(ud)
 * passes the index. 0 with the lock held, or -1 having replied 400 (not locked). */
static int query_lock(struct MHD_Connection *c, uint64_t (*relevant)(const void *), const void *ud,
                      enum MHD_Result *ret) {
        uint64_t min;
        int64_t wait;
        if (parse_blocking(c, &min, &wait, ret) < 0)
                return -1;
        pthread_mutex_lock(&mu);
        block_until(min, wait, relevant, ud);
        return 0;
}

/* Answers a read with o at index idx. Called locked, unlocks first (printing happens
 * outside the lock). */
static enum MHD_Result reply_query_locked(struct MHD_Connection *c, cJSON *o, uint64_t idx) {
        pthread_mutex_unlock(&mu);
        return reply_json(c, o, idx, true);
}

/* The same for one object; o NULL: it is missing, 404 with that message. */
static enum MHD_Result reply_found_locked(struct MHD_Connection *c, cJSON *o, uint64_t idx, const char *missing) {
        if (o)
                return reply_query_locked(c, o, idx);
        pthread_mutex_unlock(&mu);
        return reply_err(c, 404, "%s", missing);
}

/* Answers a write with out and the QueryMeta Nomad embeds in its write responses.
 * Called locked, unlocks first. */
static enum MHD_Result reply_write_locked(struct MHD_Connection *c, cJSON *out, uint64_t idx) {
        json_add_int(out, "Index", (int64_t) idx);
        json_add_int(out, "LastContact", 0);
        json_add_bool(out, "KnownLeader", false);
        json_add_str(out, "NextToken", "");
        pthread_mutex_unlock(&mu);
        return reply_json(c, out, idx, false);
}

/* Whether the request's token is refused; then *ret holds the 403 already sent. */
static bool acl_denied(struct MHD_Connection *c, enum MHD_Result *ret) {
        const char *msg = "";
        int code = standin_acl(request_token(c), &msg);
        if (code)
                *ret = reply_err(c, (unsigned) code, "%s", msg);
        return code != 0;
}

/* Nomad's JobRegisterResponse (register and scale answer with it), or its
 * JobDeregisterResponse, for job j (NULL: deregistering a job Nomad does not know) and the
 * evaluation the write made (NULL: none). Called locked, unlocks. */
static enum MHD_Result reply_job_write_locked(struct MHD_Connection *c, const struct job *j, const struct eval *e,
                                              bool deregister) {
        cJSON *out = cJSON_CreateObject();
        json_add_str(out, "EvalID", e ? e->id : "");
        json_add_int(out, "EvalCreateIndex", e ? (int64_t) e->create_index : 0);
        json_add_int(out, "JobModifyIndex", j ? (int64_t) j->job_modify_index : 0);
        if (deregister) {
                json_add_str(out, "VolumeEvalID", "");
                json_add_int(out, "VolumeEvalIndex", 0);
        } else
                json_add_str(out, "Warnings", "");
        return reply_write_locked(c, out, e ? e->create_index : raft_index);
}

struct job_key { const char *ns, *id; };

static uint64_t rel_job_allocs(const void *ud) {
        const struct job_key *k = ud;
        uint64_t m = 0;
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->job_id, k->id) == 0 && strcmp(a->ns, k->ns) == 0 && a->modify_index > m)
                        m = a->modify_index;
        return m;
}
static uint64_t rel_job(const void *ud) {
        const struct job_key *k = ud;
        struct job *j = job_find(k->ns, k->id);
        uint64_t m = j ? j->modify_index : 0;
        /* The job's Status follows its allocations. */
        uint64_t am = rel_job_allocs(ud);
        return am > m ? am : m;
}
static uint64_t rel_alloc(const void *ud) {
        struct alloc *a = alloc_find(ud);
        return a ? a->modify_index : 0;
}
static uint64_t rel_table(const void *ud) { return *(const uint64_t *) ud; }
static uint64_t rel_job_evals(const void *ud) {
        const struct job_key *k = ud;
        uint64_t m = 0;
        for (struct eval *e = evals; e; e = e->next)
                if (strcmp(e->job_id, k->id) == 0 && strcmp(e->ns, k->ns) == 0 && e->modify_index > m)
                        m = e->modify_index;
        return m;
}

static const char *query_ns(struct MHD_Connection *c) { return str_or(arg(c, "namespace"), "default"); }

static bool ns_exists(const char *ns) {
        for (char **n = cfg.namespaces; n && *n; n++)
                if (strcmp(*n, ns) == 0)
                        return true;
        return false;
}

/* ---- handlers ---- */

static cJSON *parse_body(struct req *rq, enum MHD_Result *ret, struct MHD_Connection *c) {
        cJSON *j = NULL;
        char err[200] = "";
        if (rq->too_big) {
                *ret = reply_err(c, 400, "http: request body too large");
                return NULL;
        }
        if (!rq->body.len) {
                *ret = reply_err(c, 400, "Request body is empty");
                return NULL;
        }
        if (json_parse(rq->body.buf, rq->body.len, MAX_BODY, 200, &j, err, sizeof(err)) < 0) {
                *ret = reply_err(c, 400, "%s", err);
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
static enum MHD_Result h_register(struct MHD_Connection *c, const cJSON *body, const char *url_id) {
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

static enum MHD_Result h_job_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        enum MHD_Result ret;
        struct job_key k = { query_ns(c), id };
        if (query_lock(c, rel_job, &k, &ret) < 0)
                return ret;
        struct job *j = job_find(k.ns, id);
        return reply_found_locked(c, j ? job_json(j) : NULL, rel_job(&k), "job not found");
}

static enum MHD_Result h_job_allocs(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
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

static enum MHD_Result h_job_evals(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
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

static enum MHD_Result h_job_delete(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
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

static enum MHD_Result h_job_scale(struct MHD_Connection *c, const cJSON *body, const char *id) {
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

static enum MHD_Result h_alloc_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
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
static enum MHD_Result h_alloc_stats(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct alloc *a = alloc_find(id);
        _cleanup_free_ char *cid = a && a->container ? xstrdup(a->container) : NULL;
        _cleanup_free_ char *task = a && a->task ? xstrdup(a->task) : NULL;
        pthread_mutex_unlock(&mu);
        struct docker_stats st = { 0 };
        if (!cid || docker_container_stats(dk, cid, &st) < 0 || !st.valid)
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

static enum MHD_Result h_eval_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct eval *e = eval_find(id);
        return reply_found_locked(c, e ? eval_json(e) : NULL, e ? e->modify_index : 0, "eval not found");
}

static enum MHD_Result h_nodes(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
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

static enum MHD_Result h_node_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct node *n = node_by_id(id);
        return reply_found_locked(c, n ? node_full(n) : NULL, n ? n->modify_index : 0, "node not found");
}

static enum MHD_Result h_node_allocs(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        cJSON *arr = cJSON_CreateArray();
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->node_id, id) == 0)
                        cJSON_AddItemToArray(arr, alloc_json(a, true));
        return reply_query_locked(c, arr, idx_allocs);
}

static enum MHD_Result h_node_eligibility(struct MHD_Connection *c, const cJSON *body, const char *id) {
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

static enum MHD_Result h_agent_self(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
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
                        int r = docker_volume_create(dk, dname, labels, ELEMENTSOF(labels));
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

static enum MHD_Result h_volume_get(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        pthread_mutex_lock(&mu);
        struct volume *v = volume_find(query_ns(c), id);
        return reply_found_locked(c, v ? volume_json(v) : NULL, v ? v->modify_index : 0, "volume not found");
}

static enum MHD_Result h_volumes_list(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
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
                docker_volume_remove(dk, v->docker_name, true);
        free(v->id), free(v->ns), free(v->name), free(v->plugin), free(v->external_id), free(v->docker_name);
        cJSON_Delete(v->spec);
        free(v);
        return reply_json(c, NULL, idx, false);
}

static enum MHD_Result h_volume_create(struct MHD_Connection *c, const cJSON *body, const char *id) {
        return volume_put(c, body, id, true);
}
static enum MHD_Result h_volume_register(struct MHD_Connection *c, const cJSON *body, const char *id) {
        return volume_put(c, body, id, false);
}
static enum MHD_Result h_volume_destroy(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        return volume_delete(c, id, true);
}
static enum MHD_Result h_volume_deregister(struct MHD_Connection *c, _unused_ const cJSON *body, const char *id) {
        return volume_delete(c, id, false);
}

/* ---- /_standin: faults and state for tests ---- */

static int set_fault(const char *k, const char *v) {
        long n = v ? strtol(v, NULL, 10) : 1;
        if (strcmp(k, "fail_placement") == 0)
                fault.fail_placement = (int) n;
        else if (strcmp(k, "driver_failure") == 0)
                fault.driver_failure = (int) n;
        else if (strcmp(k, "driver_message") == 0) {
                free(fault.driver_message);
                fault.driver_message = v ? xstrdup(v) : NULL;
        } else if (strcmp(k, "slow_placement_ms") == 0)
                fault.slow_placement_ms = n;
        else if (strcmp(k, "lose_after_ms") == 0) {
                fault.lose_after_ms = n;
                if (!fault.lose_count)
                        fault.lose_count = -1;
        } else if (strcmp(k, "lose_count") == 0)
                fault.lose_count = (int) n;
        else if (strcmp(k, "http_500") == 0)
                fault.http_500 = (int) n;
        else if (strcmp(k, "exec_1011") == 0)
                fault.exec_1011 = (int) n;
        else if (strcmp(k, "reset") == 0) {
                free(fault.driver_message);
                memset(&fault, 0, sizeof(fault));
        } else
                return -EINVAL;
        return 0;
}

static cJSON *fault_json(void) {
        cJSON *o = cJSON_CreateObject();
        json_add_int(o, "fail_placement", fault.fail_placement);
        json_add_int(o, "driver_failure", fault.driver_failure);
        json_add_str(o, "driver_message", fault.driver_message);
        json_add_int(o, "slow_placement_ms", fault.slow_placement_ms);
        json_add_int(o, "lose_after_ms", fault.lose_after_ms);
        json_add_int(o, "lose_count", fault.lose_count);
        json_add_int(o, "http_500", fault.http_500);
        json_add_int(o, "exec_1011", fault.exec_1011);
        return o;
}

static enum MHD_Result h_standin(struct MHD_Connection *c, const char *method, const char *path, struct req *rq) {
        if (strcmp(path, "/_standin/fault") == 0) {
                if (strcmp(method, "GET") != 0) {
                        enum MHD_Result ret;
                        _cleanup_json_ cJSON *body = parse_body(rq, &ret, c);
                        if (!body)
                                return ret;
                        pthread_mutex_lock(&mu);
                        cJSON *it;
                        cJSON_ArrayForEach(it, body) {
                                char num[32];
                                const char *v = cJSON_IsString(it) ? it->valuestring : NULL;
                                if (cJSON_IsNumber(it)) {
                                        snprintf(num, sizeof(num), "%lld", (long long) it->valuedouble);
                                        v = num;
                                } else if (cJSON_IsBool(it))
                                        v = cJSON_IsTrue(it) ? "1" : "0";
                                if (set_fault(it->string, v) < 0) {
                                        pthread_mutex_unlock(&mu);
                                        return reply_err(c, 400, "unknown fault \"%s\"", it->string);
                                }
                        }
                        pthread_mutex_unlock(&mu);
                }
                pthread_mutex_lock(&mu);
                cJSON *o = fault_json();
                pthread_mutex_unlock(&mu);
                return reply_json(c, o, 0, false);
        }
        if (strcmp(path, "/_standin/state") == 0) {
                pthread_mutex_lock(&mu);
                cJSON *o = cJSON_CreateObject();
                json_add_int(o, "Index", (int64_t) raft_index);
                cJSON *js = cJSON_AddArrayToObject(o, "Jobs");
                for (struct job *j = jobs; j; j = j->next)
                        if (!j->purged)
                                cJSON_AddItemToArray(js, job_json(j));
                cJSON *as = cJSON_AddArrayToObject(o, "Allocations");
                for (struct alloc *a = allocs; a; a = a->next) {
                        cJSON *aj = alloc_json(a, false);
                        json_add_str(aj, "ContainerID", a->container);
                        cJSON_AddItemToArray(as, aj);
                }
                json_add_int(o, "Workers", workers);
                pthread_mutex_unlock(&mu);
                return reply_json(c, o, 0, false);
        }
        return reply_err(c, 404, "Not Found");
}

/* ---- routing ---- */

static void record_request(struct MHD_Connection *c, const char *method, const char *url, struct req *rq);

/* Splits "/v1/job/<id>/<rest>": copies id (URL-decoded by MHD already) and returns rest ("" if none). */
static const char *split_id(const char *after, char *id, size_t size) {
        const char *slash = strchr(after, '/');
        size_t n = slash ? (size_t) (slash - after) : strlen(after);
        if (n >= size)
                n = size - 1;
        memcpy(id, after, n);
        id[n] = 0;
        return slash ? slash + 1 : "";
}

static bool is(const char *m, const char *a) { return strcmp(m, a) == 0; }
static bool is_write(const char *m) { return is(m, "PUT") || is(m, "POST"); }

/* GET /v1/jobs: the job stubs of the namespace ("*" = all). */
static enum MHD_Result h_jobs_list(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
        pthread_mutex_lock(&mu);
        cJSON *arr = cJSON_CreateArray();
        for (struct job *j = jobs; j; j = j->next)
                if (!j->purged && (is(query_ns(c), "*") || is(j->ns, query_ns(c)))) {
                        cJSON *s = cJSON_CreateObject();
                        json_add_str(s, "ID", j->id);
                        json_add_str(s, "Name", j->id);
                        json_add_str(s, "Namespace", j->ns);
                        json_add_str(s, "Type", str_or(json_get_str(j->job, "Type"), "service"));
                        json_add_str(s, "Status", job_status(j));
                        json_add_bool(s, "Stop", j->stop);
                        cJSON_AddItemToObject(s, "Meta", cJSON_Duplicate(cJSON_GetObjectItem(j->job, "Meta"), true));
                        json_add_int(s, "CreateIndex", (int64_t) j->create_index);
                        json_add_int(s, "ModifyIndex", (int64_t) j->modify_index);
                        json_add_int(s, "JobModifyIndex", (int64_t) j->job_modify_index);
                        cJSON_AddItemToArray(arr, s);
                }
        return reply_query_locked(c, arr, idx_jobs);
}

enum verb { GET, WRITE /* PUT or POST */, DEL };

/* The Nomad API the stand-in serves. A row with an id matches prefix + <id> + ("/" rest);
 * rest NULL takes any rest. A path some row matches answers 405 for another method. WRITE
 * handlers get the request's JSON body, parsed (a bad one is answered 400 before them). */
static const struct route {
        const char *prefix;
        bool has_id;
        const char *rest;
        enum verb verb;
        enum MHD_Result (*fn)(struct MHD_Connection *c, const cJSON *body, const char *id);
} routes[] = {
        { "/v1/jobs", false, NULL, WRITE, h_register },
        { "/v1/jobs", false, NULL, GET, h_jobs_list },
        { "/v1/job/", true, "", GET, h_job_get },
        { "/v1/job/", true, "", WRITE, h_register },
        { "/v1/job/", true, "", DEL, h_job_delete },
        { "/v1/job/", true, "allocations", GET, h_job_allocs },
        { "/v1/job/", true, "evaluations", GET, h_job_evals },
        { "/v1/job/", true, "scale", WRITE, h_job_scale },
        { "/v1/allocation/", true, "", GET, h_alloc_get },
        { "/v1/client/allocation/", true, "stats", GET, h_alloc_stats },
        { "/v1/evaluation/", true, NULL, GET, h_eval_get },
        { "/v1/nodes", false, NULL, GET, h_nodes },
        { "/v1/node/", true, "", GET, h_node_get },
        { "/v1/node/", true, "allocations", GET, h_node_allocs },
        { "/v1/node/", true, "eligibility", WRITE, h_node_eligibility },
        { "/v1/agent/self", false, NULL, GET, h_agent_self },
        { "/v1/volumes", false, NULL, GET, h_volumes_list },
        { "/v1/volume/csi/", true, "create", WRITE, h_volume_create },
        { "/v1/volume/csi/", true, "delete", DEL, h_volume_destroy },
        { "/v1/volume/csi/", true, "", WRITE, h_volume_register },
        { "/v1/volume/csi/", true, "", GET, h_volume_get },
        { "/v1/volume/csi/", true, "", DEL, h_volume_deregister },
};

static bool verb_is(enum verb v, const char *m) {
        switch (v) {
        case GET: return is(m, "GET");
        case WRITE: return is_write(m);
        case DEL: return is(m, "DELETE");
        }
        return false;
}

static enum MHD_Result route(struct MHD_Connection *c, const char *m, const char *url, struct req *rq) {
        if (startswith(url, "/_standin/"))
                return h_standin(c, m, url, rq);

        pthread_mutex_lock(&mu);
        bool inject = fault.http_500 > 0;
        if (inject)
                fault.http_500--;
        pthread_mutex_unlock(&mu);
        if (inject)
                return reply_err(c, 500, "rpc error: No cluster leader (nomad-standin injected fault)");

        /* Reads need a token too once ACLs are on (namespace read-job etc.); writes check it
         * in their handler after the body is validated, as Nomad's RPC layer does, exec
         * sessions as they start. /v1/agent/self wants one whatever the method. */
        bool exec = startswith(url, "/v1/client/allocation/") && endswith(url, "/exec");
        bool handler_checks = exec || is_write(m) || is(m, "DELETE");
        enum MHD_Result ret;
        if ((!handler_checks || is(url, "/v1/agent/self")) && acl_denied(c, &ret))
                return ret;

        char id[512];
        if (exec) {
                split_id(url + strlen("/v1/client/allocation/"), id, sizeof(id));
                return exec_handle(c, id, request_token(c));
        }
        bool known = false;
        for (size_t i = 0; i < ELEMENTSOF(routes); i++) {
                const struct route *r = &routes[i];
                if (!r->has_id ? !is(url, r->prefix) : !startswith(url, r->prefix))
                        continue;
                if (r->has_id) {
                        const char *rest = split_id(url + strlen(r->prefix), id, sizeof(id));
                        if (r->rest && !is(rest, r->rest))
                                continue;
                        if (!*id && is(r->prefix, "/v1/job/"))
                                continue;   /* Nomad's job routes want an ID: 404 */
                }
                known = true;
                if (!verb_is(r->verb, m))
                        continue;
                if (r->verb != WRITE)
                        return r->fn(c, NULL, r->has_id ? id : NULL);
                _cleanup_json_ cJSON *body = parse_body(rq, &ret, c);
                return body ? r->fn(c, body, r->has_id ? id : NULL) : ret;
        }
        return known ? reply_err(c, 405, "Invalid method") : reply_err(c, 404, "Not Found");
}

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *k, const char *v) {
        (void) kind;
        cJSON *q = cls;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(q, k);
        if (!have)
                json_add_str(q, k, v ? v : "");
        return MHD_YES;
}

static void record_request(struct MHD_Connection *c, const char *method, const char *url, struct req *rq) {
        if (!rec || startswith(url, "/_standin/"))
                return;
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "Method", method);
        json_add_str(o, "Path", url);
        cJSON *q = cJSON_AddObjectToObject(o, "Query");
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, q);
        json_add_bool(o, "Token", request_token(c) != NULL);
        if (rq->body.len) {
                cJSON *b = NULL;
                if (json_parse(rq->body.buf, rq->body.len, MAX_BODY, 200, &b, NULL, 0) == 0)
                        cJSON_AddItemToObject(o, "Body", b);
                else
                        json_add_strn(o, "Body", rq->body.buf, rq->body.len);
        }
        record_line(o);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
        (void) cls, (void) version;
        struct req *rq = *con_cls;
        if (!rq) {
                rq = xnew0(struct req, 1);
                rq->body = STRBUF_INIT(MAX_BODY);
                *con_cls = rq;
                return MHD_YES;
        }
        if (*upload_size) {
                if (strbuf_append(&rq->body, upload, *upload_size) < 0)
                        rq->too_big = true;
                *upload_size = 0;
                return MHD_YES;
        }
        record_request(c, method, url, rq);
        return route(c, method, url, rq);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
        (void) cls, (void) c, (void) toe;
        struct req *rq = *con_cls;
        if (rq) {
                strbuf_done(&rq->body);
                free(rq);
                *con_cls = NULL;
        }
}

/* ---- exec support ---- */

int standin_exec_target(const char *alloc_id, const char *task, char *container, size_t size, char **ret_msg) {
        pthread_mutex_lock(&mu);
        struct alloc *a = alloc_find(alloc_id);
        int code = 0;
        if (!a) {
                code = 404;
                *ret_msg = xasprintf("Unknown allocation \"%s\"", alloc_id);
        } else if (!task) {
                /* only whether the allocation exists */
        } else if (!*task) {
                code = 400;
                *ret_msg = xstrdup("must provide task name");
        } else if (strcmp(task, a->task) != 0) {
                code = 400;
                *ret_msg = xasprintf("unknown task name \"%s\"", task);
        } else if (strcmp(json_get_str(a->task_state, "StartedAt"), "0001-01-01T00:00:00Z") == 0) {
                code = 404;
                *ret_msg = xasprintf("task \"%s\" not started yet.", task);
        } else if (strcmp(a->client, "running") != 0 || !a->container) {
                code = 404;
                *ret_msg = xasprintf("task \"%s\" is not running.", task);
        } else
                strscpy(container, a->container, size);
        pthread_mutex_unlock(&mu);
        return code;
}

bool standin_take_exec_fault(void) {
        pthread_mutex_lock(&mu);
        bool f = fault.exec_1011 > 0;
        if (f)
                fault.exec_1011--;
        pthread_mutex_unlock(&mu);
        return f;
}

/* ---- main ---- */

static void on_signal(int sig) {
        (void) sig;
        stopping = 1;
}

static void cleanup_docker(void) {
        _cleanup_strv_free_ char **ids = NULL;
        _cleanup_free_ char *f = xasprintf("%s=%s", LABEL_KEY, cfg.instance);
        if (docker_container_list(dk, f, &ids) == 0)
                for (char **i = ids; *i; i++)
                        docker_container_remove(dk, *i, true, false);
        pthread_mutex_lock(&mu);
        for (struct volume *v = volumes; v; v = v->next)
                docker_volume_remove(dk, v->docker_name, true);
        pthread_mutex_unlock(&mu);
}

static void usage(void) {
        fprintf(stderr,
                "usage: nomad-standin --listen ADDR:PORT [--token T] [--nodes N] [--placement spread|node:N]\n"
                "         [--agent-node N] [--node-pool P] [--datacenter DC] [--region R] [--namespaces a,b]\n"
                "         [--net-map cni/NAME=DOCKERNET,...] [--docker SOCKET] [--record FILE]\n"
                "         [--csi-plugin ID] [--instance LABEL] [--fault KEY=VALUE]...\n");
}

int main(int argc, char **argv) {
        static const struct option opts[] = {
                { "listen", required_argument, NULL, 'l' },     { "token", required_argument, NULL, 't' },
                { "nodes", required_argument, NULL, 'n' },      { "placement", required_argument, NULL, 'p' },
                { "agent-node", required_argument, NULL, 'a' }, { "node-pool", required_argument, NULL, 'P' },
                { "datacenter", required_argument, NULL, 'D' }, { "region", required_argument, NULL, 'R' },
                { "namespaces", required_argument, NULL, 'N' }, { "net-map", required_argument, NULL, 'm' },
                { "docker", required_argument, NULL, 'd' },     { "record", required_argument, NULL, 'r' },
                { "csi-plugin", required_argument, NULL, 'c' }, { "instance", required_argument, NULL, 'i' },
                { "fault", required_argument, NULL, 'f' },      { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *listen = "127.0.0.1:4646", *namespaces = "default,sandboxes";
        cfg.placement = "spread";
        cfg.node_pool = "sandbox";
        cfg.datacenter = "dc1";
        cfg.region = "global";
        int o;
        while ((o = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                switch (o) {
                case 'l': listen = optarg; break;
                case 't': cfg.token = optarg; break;
                case 'n': cfg.n_nodes = atoi(optarg); break;
                case 'p': cfg.placement = optarg; break;
                case 'a': cfg.agent_node = atoi(optarg); break;
                case 'P': cfg.node_pool = optarg; break;
                case 'D': cfg.datacenter = optarg; break;
                case 'R': cfg.region = optarg; break;
                case 'N': namespaces = optarg; break;
                case 'd': cfg.docker_socket = optarg; break;
                case 'r': cfg.record = optarg; break;
                case 'c': cfg.csi_plugin = optarg; break;
                case 'i': cfg.instance = optarg; break;
                case 'm': {
                        _cleanup_free_ char *s = xstrdup(optarg);
                        for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                                char *eq = strchr(tok, '=');
                                if (!eq || eq == tok || !eq[1]) {
                                        fprintf(stderr, "nomad-standin: --net-map wants MODE=DOCKERNET, got '%s'\n", tok);
                                        return 2;
                                }
                                *eq = 0;
                                cfg.nets = xrealloc(cfg.nets, (cfg.n_nets + 1) * sizeof(*cfg.nets));
                                cfg.nets[cfg.n_nets++] = (struct netmap) { xstrdup(tok), xstrdup(eq + 1) };
                        }
                        break;
                }
                case 'f': {
                        _cleanup_free_ char *s = xstrdup(optarg);
                        char *eq = strchr(s, '=');
                        if (eq)
                                *eq++ = 0;
                        if (set_fault(s, eq) < 0) {
                                fprintf(stderr, "nomad-standin: unknown fault '%s'\n", s);
                                return 2;
                        }
                        break;
                }
                case 'h': usage(); return 0;
                default: usage(); return 2;
                }
        }
        if (cfg.n_nodes < 1 || cfg.n_nodes > MAX_NODES || cfg.agent_node < 0 || cfg.agent_node >= cfg.n_nodes) {
                fprintf(stderr, "nomad-standin: --nodes must be 1..%d and --agent-node below it\n", MAX_NODES);
                return 2;
        }
        if (strcmp(cfg.placement, "spread") != 0 &&
            !(startswith(cfg.placement, "node:") && atoi(cfg.placement + 5) >= 0 && atoi(cfg.placement + 5) < cfg.n_nodes)) {
                fprintf(stderr, "nomad-standin: --placement is spread or node:N (N below --nodes)\n");
                return 2;
        }
        const char *colon = strrchr(listen, ':');
        if (!colon || colon == listen || (size_t) (colon - listen) >= sizeof(cfg.listen_addr)) {
                fprintf(stderr, "nomad-standin: --listen wants ADDR:PORT\n");
                return 2;
        }
        memcpy(cfg.listen_addr, listen, (size_t) (colon - listen));
        cfg.port = atoi(colon + 1);
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t) cfg.port) };
        if (inet_pton(AF_INET, cfg.listen_addr, &sa.sin_addr) != 1 || cfg.port < 0 || cfg.port > 65535) {
                fprintf(stderr, "nomad-standin: --listen wants an IPv4 ADDR:PORT\n");
                return 2;
        }
        {
                _cleanup_free_ char *s = xstrdup(namespaces);
                size_t n = 0;
                for (char *save = NULL, *tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                        cfg.namespaces = xrealloc(cfg.namespaces, (n + 2) * sizeof(char *));
                        cfg.namespaces[n++] = xstrdup(tok);
                        cfg.namespaces[n] = NULL;
                }
        }
        if (!cfg.instance)
                cfg.instance = xasprintf("%s:%d", cfg.listen_addr, cfg.port);
        if (cfg.record) {
                rec = fopen(cfg.record, "ae");
                if (!rec) {
                        fprintf(stderr, "nomad-standin: cannot open %s: %m\n", cfg.record);
                        return 1;
                }
        }
        if (docker_new(cfg.docker_socket, &dk) < 0 || docker_ping(dk) < 0) {
                fprintf(stderr, "nomad-standin: dockerd does not answer on %s\n", str_or(cfg.docker_socket, DOCKER_SOCKET_DEFAULT));
                return 1;
        }
        cond_init_monotonic(&changed);
        for (int i = 0; i < cfg.n_nodes; i++) {
                uuid_new(nodes[i].id);
                uuid_new(nodes[i].secret);
                snprintf(nodes[i].name, sizeof(nodes[i].name), "standin-node-%d", i + 1);
                nodes[i].eligible = true;
                nodes[i].create_index = nodes[i].modify_index = bump(&idx_nodes);
        }
        /* Leftovers of an earlier run on the same address (killed without cleanup). */
        cleanup_docker();

        struct sigaction sig = { .sa_handler = on_signal };
        sigaction(SIGTERM, &sig, NULL);
        sigaction(SIGINT, &sig, NULL);
        signal(SIGPIPE, SIG_IGN);

        struct MHD_Daemon *d = MHD_start_daemon(
                MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_ALLOW_UPGRADE |
                        MHD_USE_ERROR_LOG,
                0, NULL, NULL, on_request, NULL, MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &sa,
                MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_TIMEOUT, 0u, MHD_OPTION_END);
        if (!d) {
                fprintf(stderr, "nomad-standin: cannot listen on %s\n", listen);
                return 1;
        }
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        fprintf(stderr, "nomad-standin: listening on %s:%u, %d node(s):", cfg.listen_addr, info ? info->port : 0,
                cfg.n_nodes);
        for (int i = 0; i < cfg.n_nodes; i++)
                fprintf(stderr, " %s", nodes[i].id);
        fprintf(stderr, "\n");
        pthread_t mon;
        pthread_create(&mon, NULL, monitor_thread, NULL);

        while (!stopping)
                pause();

        pthread_mutex_lock(&mu);
        pthread_cond_broadcast(&changed);
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += 30;
        while (workers > 0)
                if (pthread_cond_timedwait(&changed, &mu, &dl) == ETIMEDOUT)
                        break;
        pthread_mutex_unlock(&mu);
        pthread_join(mon, NULL);
        cleanup_docker();
        MHD_stop_daemon(d);
        if (rec)
                fclose(rec);
        docker_free(dk);
        return 0;
}
