/* nomad-standin — a Nomad HTTP API stand-in for tests, placing allocations as real
 * containers on the local dockerd (tests/nomad/README.md, shared/reference/PROTOCOLS.md 1).
 *
 * One process, libmicrohttpd with a thread per connection (blocking queries and exec
 * sessions block their own thread). All state sits behind one mutex; every write bumps
 * the raft-like index and broadcasts one condition that blocking queries wait on.
 * Docker calls happen outside the lock, in placement and stop threads.
 *
 * This file: configuration, faults, the state and its lookups, the request log, task events,
 * exec support and main(); standin.h says what the other files hold. */
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

/* ---- configuration ---- */

struct standin_config cfg = {
        .n_nodes = 2, .agent_node = 0,
};

/* ---- faults ---- */

struct standin_faults fault;

/* ---- state ---- */

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t changed;
uint64_t raft_index = 10, idx_jobs = 1, idx_allocs = 1, idx_evals = 1, idx_nodes = 1, idx_vols = 1;
struct node nodes[MAX_NODES];
struct job *jobs;
struct alloc *allocs;
struct eval *evals;
struct volume *volumes;
unsigned spread_next;
volatile sig_atomic_t stopping;
int workers;              /* placement/stop threads running */
static struct docker *dk;
static pthread_mutex_t rec_mu = PTHREAD_MUTEX_INITIALIZER;
FILE *rec;

struct docker *standin_docker(void) { return dk; }

uint64_t bump(uint64_t *table) {
        *table = ++raft_index;
        pthread_cond_broadcast(&changed);
        return raft_index;
}

void uuid_new(char out[37]) {
        uint8_t b[16];
        if (getrandom(b, sizeof(b), 0) != sizeof(b))
                abort();
        b[6] = (uint8_t) ((b[6] & 0x0f) | 0x40);
        b[8] = (uint8_t) ((b[8] & 0x3f) | 0x80);
        snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3],
                 b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

int64_t now_ns(void) {
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

const char *str_or(const char *s, const char *def) { return s && *s ? s : def; }

struct node *node_by_id(const char *id) {
        for (int i = 0; i < cfg.n_nodes; i++)
                if (strcmp(nodes[i].id, id) == 0)
                        return &nodes[i];
        return NULL;
}

struct job *job_find(const char *ns, const char *id) {
        for (struct job *j = jobs; j; j = j->next)
                if (!j->purged && strcmp(j->id, id) == 0 && strcmp(j->ns, ns) == 0)
                        return j;
        return NULL;
}

struct alloc *alloc_find(const char *id) {
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->id, id) == 0)
                        return a;
        return NULL;
}

struct eval *eval_find(const char *id) {
        for (struct eval *e = evals; e; e = e->next)
                if (strcmp(e->id, id) == 0)
                        return e;
        return NULL;
}

struct volume *volume_find(const char *ns, const char *id) {
        for (struct volume *v = volumes; v; v = v->next)
                if (strcmp(v->id, id) == 0 && strcmp(v->ns, ns) == 0)
                        return v;
        return NULL;
}

/* ---- the request log ---- */

void record_line(cJSON *o) {
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
        if (json_parse(text, len, MAX_BODY, 64, &body, NULL) == 0)
                cJSON_AddItemToObject(o, "Body", body);
        else
                json_add_strn(o, "Body", text, len);
        record_line(o);
}

/* ---- task events and states ---- */

void task_event(struct alloc *a, const char *type, const char *display, bool fails, const char *driver_error,
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
void json_put(cJSON *o, const char *key, cJSON *item) {
        if (!cJSON_ReplaceItemInObjectCaseSensitive(o, key, item))
                cJSON_AddItemToObject(o, key, item);
}

void task_state_set(struct alloc *a, const char *state, bool failed) {
        json_put(a->task_state, "State", cJSON_CreateString(state));
        json_put(a->task_state, "Failed", cJSON_CreateBool(failed));
        char t[40];
        rfc3339_ns(now_ns(), t);
        if (strcmp(state, "running") == 0)
                json_put(a->task_state, "StartedAt", cJSON_CreateString(t));
        if (strcmp(state, "dead") == 0)
                json_put(a->task_state, "FinishedAt", cJSON_CreateString(t));
}

void alloc_touch(struct alloc *a) {
        a->modify_index = bump(&idx_allocs);
        a->modify_time = now_ns();
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

static char **made_volumes;
static size_t n_made;

void standin_volume_made(const char *name) {
        pthread_mutex_lock(&mu);
        for (size_t i = 0; i < n_made; i++)
                if (!strcmp(made_volumes[i], name)) {
                        pthread_mutex_unlock(&mu);
                        return;
                }
        made_volumes = xrealloc(made_volumes, (n_made + 1) * sizeof(*made_volumes));
        made_volumes[n_made++] = xstrdup(name);
        pthread_mutex_unlock(&mu);
}

static void cleanup_docker(void) {
        _cleanup_strv_free_ char **ids = NULL;
        _cleanup_free_ char *f = xasprintf("%s=%s", LABEL_KEY, cfg.instance);
        if (docker_container_list(dk, f, &ids) == 0)
                for (char **i = ids; *i; i++)
                        docker_container_remove(dk, *i, true, true);
        pthread_mutex_lock(&mu);
        for (struct volume *v = volumes; v; v = v->next)
                docker_volume_remove(dk, v->docker_name, true);
        for (size_t i = 0; i < n_made; i++)
                docker_volume_remove(dk, made_volumes[i], true);
        pthread_mutex_unlock(&mu);
}

static void usage(void) {
        fprintf(stderr,
                "usage: nomad-standin --listen ADDR:PORT [--token T] [--nodes N] [--placement spread|node:N]\n"
                "         [--agent-node N] [--node-pool P] [--datacenter DC] [--region R] [--namespaces a,b]\n"
                "         [--net-map cni/NAME=DOCKERNET,...] [--docker SOCKET] [--record FILE]\n"
                "         [--csi-plugin ID] [--instance LABEL] [--volumes-enabled] [--fault KEY=VALUE]...\n");
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
                { "volumes-enabled", no_argument, NULL, 'V' },
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
                case 'V': cfg.volumes_enabled = true; break;
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
