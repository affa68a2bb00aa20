/* test-lifecycle.c — the lifecycle against a model of what the API promised (issue 35).
 *
 * Several clients (threads, each its own account with an E2B-shaped key, so that both APIs
 * reach the same records) drive seeded random sequences of operations against a real stack
 * (controld, a node agent for snapshots, runsc sandboxes; on the Nomad driver the stand-in):
 * create (from the template or from one of the client's ready snapshots), exec, a file round
 * trip, snapshot, pause, resume, destroy, an egress change on a deny_all sandbox (refused by
 * name), E2B's setTimeout, pause, connect and kill, and two operations racing on one sandbox.
 * Every answer is checked against the small state model (ready, paused, destroyed per
 * sandbox; the client's snapshots), and after every operation a GET must show the state the
 * model holds: a 2xx means the state asked for was reached, a refusal or a platform fault
 * leaves the sandbox as it was.
 *
 * With faults (the second test) a fault thread injects, at seeded random moments: the Docker
 * engine failing container calls (a faulty socket in front of it, tests/lib/dockerfault) or
 * being slow, the Nomad stand-in answering 500s or placing slowly, the node agent killed and
 * started again, the run's own registry stopped for a moment, RabbitMQ stopped and started
 * (rabbitmqctl stop_app/start_app; LIFECYCLE_NO_BROKER_RESTART=1 leaves that out on a machine
 * whose broker others use at the time). Every 5xx must then leave the sandbox as it was,
 * nothing a user did not end may be lost, and once the faults end every client can make, use,
 * snapshot and end a sandbox again (the platform healed by itself).
 *
 * Creates are served from a warm pool of deny_all members while it has some (a claim is a
 * transition too). At the end everything the model says is gone must be gone: no live sandbox record, no
 * container (or Nomad allocation container) of any sandbox the run made, no snapshot in the
 * store, no tag in the run's registry repository; each snapshot ended ready or, with faults,
 * failed with a reason (never stuck creating). A table of operations, answers and faults is
 * printed.
 *
 * Bounded in make check (LIFECYCLE_STEPS per client, default 30; 3 clients); `make soak` runs
 * it for LIFECYCLE_SECONDS instead. PADDOCK_TEST_SEED replays a run (the seed is printed). */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agenttest.h"
#include "amqptest.h"
#include "cleanup.h"
#include "ctltest.h"
#include "dockerfault.h"
#include "nomadtest.h"
#include "regtest.h"
#include "strutil.h"
#include "testlib.h"

#define N_CLIENTS 3
#define MAX_SB 24
#define MAX_SNAP 16
#define PLAN                                                                                                      \
        "[plan \"life\"]\nmax_concurrent = 2\nregions = local\nmax_cpu = 1000\nmax_memory = 1024\nmax_disk = 5\n" \
        "snapshot_max_inflight = 4\nmax_volume_gb = 20\nmax_volumes = 2\n"                                         \
        "[pool \"life\"]\ntemplate = busybox\negress = deny_all\nsize = 2\nrefill_rate = 600\n"
#define POOL_SIZE 2

static struct ctld ctl;
static struct dfault dfault;
static struct nstandin standin;
static char node_id[40], exchange[64], repo[64], agent_conf[512], agent_log[512], e2b_url[64], registry[32] = "127.0.0.1:5000",
            table[32];
/* Networked sandboxes (egress open or restricted, enforced by the node agent's nftables on a
 * bridge of the run's own): the Docker driver; on the Nomad stand-in the run's sandboxes are
 * deny_all (test-controld-egress-nomad covers the CNI path). */
#define BRIDGE "pdklfc0"
static bool networked;
static int registry_port;   /* a registry of the run's own (faults: it goes away), else 0: the shared one */
static pid_t agent_pid;
static pthread_mutex_t agent_lock = PTHREAD_MUTEX_INITIALIZER;
static int e2b_port;
static atomic_bool stop_all, faults_on;
enum { F_ENGINE_FAILS, F_ENGINE_SLOW, F_AGENT, F_SCHEDULER_500, F_REGISTRY, F_BROKER, _F_MAX };
static atomic_long n_faults[_F_MAX];
static const char *const fault_names[] = { "engine fails", "engine slow", "agent restarted", "scheduler 500s",
                                           "registry down", "broker restarted" };

/* ---- the first failure, from any thread ---- */

static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;
static char failure[1024];

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...) {
        pthread_mutex_lock(&fail_lock);
        if (!failure[0]) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(failure, sizeof(failure), fmt, ap);
                va_end(ap);
        }
        pthread_mutex_unlock(&fail_lock);
        atomic_store(&stop_all, true);
}

/* ---- the model ---- */

enum mst { M_READY, M_PAUSED, M_DESTROYED };
static const char *const mst_names[] = { "ready", "paused", "destroyed" };

struct msb {
        char id[25];
        enum mst st;
        char volume[25];        /* persistent: its volume (kept after the destroy), else "" */
        bool net;               /* egress open or restricted: a policy on the node */
        char history[512];      /* what was done to it, for a failure's message */
};

static void hist(struct msb *sb, const char *what, long st) {
        size_t n = strlen(sb->history);
        if (n + 40 < sizeof(sb->history))
                snprintf(sb->history + n, sizeof(sb->history) - n, "%s%s %ld", n ? ", " : "", what, st);
}

struct msnap {
        char id[25];
        bool settled, ready;
};

enum op { OP_CREATE, OP_RESTORE, OP_EXEC, OP_FILES, OP_SNAPSHOT, OP_PAUSE, OP_RESUME, OP_DESTROY, OP_EGRESS,
          OP_E2B_TIMEOUT, OP_E2B_PAUSE, OP_E2B_CONNECT, OP_E2B_KILL, OP_RACE, OP_PERSISTENT, OP_VOLUME_DELETE, _OP_MAX };
static const char *const op_names[] = { "create", "create from snapshot", "exec", "file round trip", "snapshot", "pause",
                                        "resume", "destroy", "egress change", "e2b setTimeout", "e2b pause",
                                        "e2b connect", "e2b kill", "two at once", "create with a volume",
                                        "volume delete" };
static const int op_weight[] = { 6, 2, 5, 3, 3, 5, 4, 2, 1, 2, 2, 3, 1, 2, 2, 1 };
static atomic_long op_2xx[_OP_MAX], op_4xx[_OP_MAX], op_5xx[_OP_MAX];

#define MAX_VOL 2       /* the plan's max_volumes */
struct client {
        int n;
        char key[64];
        char vol[MAX_VOL][25];  /* the client's volumes ("" = none in that slot) */
        unsigned rng;
        struct msb sb[MAX_SB];
        int n_sb;
        struct msnap snap[MAX_SNAP];
        int n_snap;
        int steps;
};

static int rnd(struct client *c, int n) {
        return (int) (rand_r(&c->rng) % (unsigned) n);
}

static int live_count(const struct client *c) {
        int k = 0;
        for (int i = 0; i < c->n_sb; i++)
                k += c->sb[i].st != M_DESTROYED;
        return k;
}

/* A random sandbox of the client in state want (or any live one with want < 0); NULL if none. */
static struct msb *pick(struct client *c, int want) {
        struct msb *cand[MAX_SB];
        int k = 0;
        for (int i = 0; i < c->n_sb; i++)
                if (want < 0 ? c->sb[i].st != M_DESTROYED : (int) c->sb[i].st == want)
                        cand[k++] = &c->sb[i];
        return k ? cand[rnd(c, k)] : NULL;
}

/* ---- requests ---- */

static long req(struct client *c, const char *method, const char *path, const char *body, char **ret_body) {
        struct hres r;
        http_req(&ctl, method, path, c->key, body, &r);
        long st = r.status;
        if (ret_body)
                *ret_body = xstrdup(r.body ? r.body : "");
        hres_done(&r);
        return st;
}

static long e2b_req(struct client *c, const char *method, const char *path, const char *body, char **ret_body) {
        struct hres r;
        const char *h[] = { "Content-Type: application/json", NULL, NULL };
        _cleanup_free_ char *k = xasprintf("X-API-Key: %s", c->key);
        h[1] = k;
        struct ctld e = ctl;
        snprintf(e.url, sizeof(e.url), "%s", e2b_url);
        http_req_full(&e, method, path, h, body, body ? strlen(body) : 0, &r);
        long st = r.status;
        if (ret_body)
                *ret_body = xstrdup(r.body ? r.body : "");
        hres_done(&r);
        return st;
}

static void count(enum op op, long st) {
        if (st >= 200 && st < 300)
                atomic_fetch_add(&op_2xx[op], 1);
        else if (st >= 400 && st < 500)
                atomic_fetch_add(&op_4xx[op], 1);
        else
                atomic_fetch_add(&op_5xx[op], 1);
}

/* The status GET shows for sb (destroyed included); NULL on a failed GET (noted). */
static const char *status_of(struct client *c, const char *id, char buf[32]) {
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s", id);
        struct hres r;
        http_req(&ctl, "GET", path, c->key, NULL, &r);
        const char *s = r.status == 200 ? hres_data_str(&r, "status") : NULL;
        snprintf(buf, 32, "%s", s ? s : "");
        long st = r.status;
        hres_done(&r);
        if (st != 200) {
                failf("client %d: GET %s answered %ld", c->n, id, st);
                return NULL;
        }
        return buf;
}

static void check_state(struct client *c, const struct msb *sb, const char *after) {
        char b[32];
        const char *s = status_of(c, sb->id, b);
        if (s && strcmp(s, mst_names[sb->st]))
                failf("client %d step %d: after %s, %s is %s; the model says %s (its history: %s)", c->n, c->steps, after,
                      sb->id, s, mst_names[sb->st], sb->history);
}

/* The sandbox the last operation acted on, for allowed()'s message. */
static __thread struct msb *cur;

/* An answer outside what the model allows: 5xx are allowed only while faults run, and then
 * the state must be as it was (check_state after). */
static bool allowed(struct client *c, enum op op, long st, long want, long alt, const char *body) {
        count(op, st);
        if (cur)
                hist(cur, op_names[op], st);
        if (st == want || (alt && st == alt))
                return true;
        if (st >= 500 && atomic_load(&faults_on))
                return false;
        failf("client %d step %d: %s%s%s answered %ld (want %ld%s): %.300s (its history: %s)", c->n, c->steps, op_names[op],
              cur ? " of " : "", cur ? cur->id : "", st, want, alt ? " or the alternative" : "", body ? body : "",
              cur ? cur->history : "");
        return false;
}

static void add_sb(struct client *c, const char *body) {
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(body);
        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "id"));
        if (!id || strlen(id) != 24 || c->n_sb == MAX_SB) {
                failf("client %d: create answered no id: %.200s", c->n, body);
                return;
        }
        struct msb *s = &c->sb[c->n_sb++];
        snprintf(s->id, sizeof(s->id), "%s", id);
        s->st = M_READY;
        hist(s, "created", 201);
}

/* ---- the operations ---- */

static void op_create(struct client *c, const char *from_snapshot) {
        enum op op = from_snapshot ? OP_RESTORE : OP_CREATE;
        bool net = networked && !from_snapshot && rnd(c, 3) == 0;
        _cleanup_free_ char *body = from_snapshot ? xasprintf("{\"fromSnapshot\":\"%s\",\"egress\":{\"mode\":\"deny_all\"}}", from_snapshot)
                                    : net ? xstrdup(rnd(c, 2) ? "{\"egress\":{\"mode\":\"open\"}}"
                                                              : "{\"egress\":{\"mode\":\"restricted\",\"allow\":[\"203.0.113.9\"]}}")
                                          : xstrdup("{\"egress\":{\"mode\":\"deny_all\"}}");
        _cleanup_free_ char *out = NULL;
        bool full = live_count(c) >= 2 || c->n_sb == MAX_SB;
        long st = req(c, "POST", "/sandboxes", body, &out);
        if (full) {
                /* the plan's cap: 403, nothing made */
                if (c->n_sb < MAX_SB || st != 403)
                        (void) allowed(c, op, st, 403, 0, out);
                else
                        count(op, st);
                return;
        }
        if (allowed(c, op, st, 201, 0, out)) {
                add_sb(c, out);
                c->sb[c->n_sb - 1].net = net;
        }
}

static int free_vol_slot(const struct client *c) {
        for (int i = 0; i < MAX_VOL; i++)
                if (!c->vol[i][0])
                        return i;
        return -1;
}

/* A volume's sandbox in the model, or NULL (none live: the volume is detached). */
static struct msb *vol_user(struct client *c, const char *vol) {
        for (int i = 0; i < c->n_sb; i++)
                if (c->sb[i].st != M_DESTROYED && !strcmp(c->sb[i].volume, vol))
                        return &c->sb[i];
        return NULL;
}

/* A create with a volume of its own (persistent): 403 past the plan's sandboxes or volumes. */
static void op_persistent(struct client *c) {
        int slot = free_vol_slot(c);
        bool full = live_count(c) >= 2 || c->n_sb == MAX_SB || slot < 0;
        _cleanup_free_ char *out = NULL;
        long st = req(c, "POST", "/sandboxes", "{\"egress\":{\"mode\":\"deny_all\"},\"persistent\":true,\"persistentDiskGB\":10}",
                      &out);
        if (full) {
                (void) allowed(c, OP_PERSISTENT, st, 403, 0, out);
                return;
        }
        if (!allowed(c, OP_PERSISTENT, st, 201, 0, out))
                return;
        add_sb(c, out);
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s", c->sb[c->n_sb - 1].id), *got = NULL;
        (void) req(c, "GET", path, NULL, &got);
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(got);
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "volume_id"));
        if (!v || strlen(v) != 24) {
                failf("client %d: a persistent sandbox with no volume_id: %.300s", c->n, got);
                return;
        }
        snprintf(c->sb[c->n_sb - 1].volume, 25, "%s", v);
        snprintf(c->vol[slot], 25, "%s", v);
}

/* DELETE /volumes/{id}: 204 once its sandbox is gone, 400 while one uses it. */
static void op_volume_delete(struct client *c) {
        int cand[MAX_VOL], k = 0;
        for (int i = 0; i < MAX_VOL; i++)
                if (c->vol[i][0])
                        cand[k++] = i;
        if (!k)
                return;
        int slot = cand[rnd(c, k)];
        struct msb *user = vol_user(c, c->vol[slot]);
        _cleanup_free_ char *path = xasprintf("/volumes/%s", c->vol[slot]), *out = NULL;
        long st = req(c, "DELETE", path, NULL, &out);
        if (allowed(c, OP_VOLUME_DELETE, st, user ? 400 : 204, 0, out) && !user)
                c->vol[slot][0] = 0;
}

static void op_exec(struct client *c) {
        struct msb *sb = pick(c, -1);
        if (!sb)
                return;
        cur = sb;
        char tokn[32];
        snprintf(tokn, sizeof(tokn), "tok-%d-%d", c->n, c->steps);
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/exec", sb->id), *body = xasprintf("{\"cmd\":\"echo %s\"}", tokn),
                            *out = NULL;
        long st = req(c, "POST", path, body, &out);
        if (sb->st == M_READY) {
                if (allowed(c, OP_EXEC, st, 200, 0, out) && !strstr(out, tokn))
                        failf("client %d: exec in %s did not say %s: %.200s", c->n, sb->id, tokn, out);
        } else
                (void) allowed(c, OP_EXEC, st, 400, 0, out);
        check_state(c, sb, "exec");
}

static void op_files(struct client *c) {
        struct msb *sb = pick(c, -1);
        if (!sb)
                return;
        cur = sb;
        char content[64];
        snprintf(content, sizeof(content), "content %d/%d %08x", c->n, c->steps, rand_r(&c->rng));
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/files/tmp/f%d", sb->id, c->steps), *out = NULL;
        long st = req(c, "PUT", path, content, &out);
        if (sb->st == M_READY) {
                if (allowed(c, OP_FILES, st, 204, 0, out)) {
                        _cleanup_free_ char *back = NULL;
                        long g = req(c, "GET", path, NULL, &back);
                        if (g != 200 || strcmp(back, content))
                                failf("client %d: file in %s came back %ld \"%.80s\", not \"%s\"", c->n, sb->id, g, back, content);
                }
        } else
                (void) allowed(c, OP_FILES, st, 400, 0, out);
        check_state(c, sb, "file round trip");
}

static void op_snapshot(struct client *c) {
        struct msb *sb = pick(c, -1);
        if (!sb || c->n_snap == MAX_SNAP)
                return;
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/snapshots", sb->id), *out = NULL;
        long st = req(c, "POST", path, "{\"name\":\"life\"}", &out);
        if (sb->st != M_READY) {
                (void) allowed(c, OP_SNAPSHOT, st, 400, 0, out);
        } else if (st == 403 || st == 429) {
                count(OP_SNAPSHOT, st);   /* the plan's snapshot limits: a refusal that says which */
        } else if (allowed(c, OP_SNAPSHOT, st, 202, 0, out)) {
                _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(out);
                const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "id"));
                if (id && strlen(id) == 24)
                        snprintf(c->snap[c->n_snap++].id, 25, "%s", id);
                else
                        failf("client %d: snapshot answered no id: %.200s", c->n, out);
        }
        check_state(c, sb, "snapshot");
}

/* The snapshot's status now ("creating", "ready", "failed"), and its reason. */
static void snap_status(struct client *c, const char *id, char st[16], char why[256]) {
        _cleanup_free_ char *out = NULL;
        st[0] = why[0] = 0;
        long s = req(c, "GET", "/sandboxes/snapshots?limit=100", NULL, &out);
        if (s != 200)
                return;
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(out);
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "data")) {
                if (strcmp(cJSON_GetStringValue(cJSON_GetObjectItem(it, "id")) ?: "", id))
                        continue;
                snprintf(st, 16, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(it, "status")) ?: "");
                snprintf(why, 256, "%s", cJSON_GetStringValue(cJSON_GetObjectItem(it, "failure_reason")) ?: "");
        }
}

static void op_restore(struct client *c) {
        int cand[MAX_SNAP], k = 0;
        for (int i = 0; i < c->n_snap; i++) {
                if (!c->snap[i].settled) {
                        char st[16], why[256];
                        snap_status(c, c->snap[i].id, st, why);
                        c->snap[i].settled = strcmp(st, "creating") != 0 && st[0];
                        c->snap[i].ready = !strcmp(st, "ready");
                }
                if (c->snap[i].ready)
                        cand[k++] = i;
        }
        if (!k)
                return op_create(c, NULL);
        op_create(c, c->snap[cand[rnd(c, k)]].id);
}

static void op_pause(struct client *c, bool e2b) {
        struct msb *sb = pick(c, rnd(c, 4) ? M_READY : -1);
        if (!sb)
                return;
        cur = sb;
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/pause", sb->id), *out = NULL;
        if (e2b) {
                long st = e2b_req(c, "POST", path, "{\"memory\":false}", &out);
                if (sb->st == M_READY) {
                        if (allowed(c, OP_E2B_PAUSE, st, 204, 0, out))
                                sb->st = M_PAUSED;
                } else
                        (void) allowed(c, OP_E2B_PAUSE, st, sb->st == M_PAUSED ? 409 : 404, 0, out);
        } else {
                long st = req(c, "POST", path, NULL, &out);
                if (sb->st == M_READY) {
                        if (allowed(c, OP_PAUSE, st, 200, 0, out))
                                sb->st = M_PAUSED;
                } else
                        (void) allowed(c, OP_PAUSE, st, 400, 0, out);
        }
        check_state(c, sb, e2b ? "e2b pause" : "pause");
}

static void op_resume(struct client *c, bool e2b) {
        struct msb *sb = pick(c, rnd(c, 4) ? M_PAUSED : -1);
        if (!sb)
                return;
        cur = sb;
        _cleanup_free_ char *out = NULL;
        if (e2b) {
                _cleanup_free_ char *path = xasprintf("/v2/sandboxes/%s/connect", sb->id);
                long st = e2b_req(c, "POST", path, "{}", &out);
                if (sb->st == M_PAUSED) {
                        if (allowed(c, OP_E2B_CONNECT, st, 201, 0, out))
                                sb->st = M_READY;
                } else
                        (void) allowed(c, OP_E2B_CONNECT, st, sb->st == M_READY ? 200 : 404, 0, out);
        } else {
                _cleanup_free_ char *path = xasprintf("/sandboxes/%s/resume", sb->id);
                long st = req(c, "POST", path, NULL, &out);
                if (sb->st == M_PAUSED) {
                        if (allowed(c, OP_RESUME, st, 200, 0, out))
                                sb->st = M_READY;
                } else
                        (void) allowed(c, OP_RESUME, st, 400, 0, out);
        }
        check_state(c, sb, e2b ? "e2b connect" : "resume");
}

static void op_destroy(struct client *c, bool e2b) {
        struct msb *sb = c->n_sb && !rnd(c, 6) ? &c->sb[rnd(c, c->n_sb)] : pick(c, -1);
        if (!sb)
                return;
        cur = sb;
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s", sb->id), *out = NULL;
        if (e2b) {
                long st = e2b_req(c, "DELETE", path, NULL, &out);
                if (sb->st != M_DESTROYED) {
                        if (allowed(c, OP_E2B_KILL, st, 204, 0, out))
                                sb->st = M_DESTROYED;
                } else
                        (void) allowed(c, OP_E2B_KILL, st, 404, 0, out);
        } else {
                long st = req(c, "DELETE", path, NULL, &out);
                if (allowed(c, OP_DESTROY, st, 204, 0, out))
                        sb->st = M_DESTROYED;
        }
        check_state(c, sb, e2b ? "e2b kill" : "destroy");
}

/* Destroys sb through the Brimble API (204 expected) and records it. */
static void op_destroy_one(struct client *c, struct msb *sb) {
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s", sb->id), *out = NULL;
        long st = req(c, "DELETE", path, NULL, &out);
        count(OP_DESTROY, st);
        hist(sb, "destroy", st);
        if (st != 204)
                failf("client %d: destroy of %s answered %ld: %.200s (its history: %s)", c->n, sb->id, st, out, sb->history);
        sb->st = M_DESTROYED;
        check_state(c, sb, "destroy");
}

static void op_egress(struct client *c) {
        struct msb *sb = pick(c, -1);
        if (!sb)
                return;
        cur = sb;
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/egress", sb->id), *out = NULL;
        long st = req(c, "PUT", path,
                      rnd(c, 2) ? "{\"mode\":\"restricted\",\"allow\":[\"198.51.100.7\"]}" : "{\"mode\":\"open\"}", &out);
        /* a networked ready sandbox: enforced by the node before the 200; deny_all sandboxes have
         * no interface (refused with the reason), and only ready ones change */
        (void) allowed(c, OP_EGRESS, st, sb->net && sb->st == M_READY ? 200 : 400, 0, out);
        check_state(c, sb, "egress change");
}

static void op_e2b_timeout(struct client *c) {
        struct msb *sb = c->n_sb ? &c->sb[rnd(c, c->n_sb)] : NULL;
        if (!sb)
                return;
        cur = sb;
        _cleanup_free_ char *path = xasprintf("/sandboxes/%s/timeout", sb->id), *out = NULL;
        long st = e2b_req(c, "POST", path, "{\"timeout\":900}", &out);
        (void) allowed(c, OP_E2B_TIMEOUT, st, sb->st == M_DESTROYED ? 404 : 204, 0, out);
        check_state(c, sb, "e2b setTimeout");
}

/* Two operations on one ready sandbox at once, from two threads; the answers must fit one of
 * their orders, and the end state the model derives from them. */
struct half {
        struct client *c;
        const char *method;
        char path[96];
        long st;
        char *out;
};

static void *half_main(void *ud) {
        struct half *h = ud;
        h->st = req(h->c, h->method, h->path, NULL, &h->out);
        return NULL;
}

static void op_race(struct client *c) {
        struct msb *sb = pick(c, M_READY);
        if (!sb)
                return;
        cur = sb;
        int kind = rnd(c, 4);
        struct half a = { c, "POST", "", 0, NULL }, b = { c, "POST", "", 0, NULL };
        snprintf(a.path, sizeof(a.path), "/sandboxes/%s/pause", sb->id);
        if (kind == 0) /* pause twice */
                snprintf(b.path, sizeof(b.path), "/sandboxes/%s/pause", sb->id);
        else if (kind == 1) { /* pause and destroy */
                b.method = "DELETE";
                snprintf(b.path, sizeof(b.path), "/sandboxes/%s", sb->id);
        } else if (kind == 2) /* snapshot and pause */
                snprintf(b.path, sizeof(b.path), "/sandboxes/%s/snapshots", sb->id);
        else { /* snapshot and destroy: a kill during the snapshot's commit fails under runsc */
                snprintf(a.path, sizeof(a.path), "/sandboxes/%s/snapshots", sb->id);
                b.method = "DELETE";
                snprintf(b.path, sizeof(b.path), "/sandboxes/%s", sb->id);
        }
        pthread_t ta, tb;
        ASSERT_EQ(pthread_create(&ta, NULL, half_main, &a), 0);
        ASSERT_EQ(pthread_create(&tb, NULL, half_main, &b), 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        count(OP_RACE, a.st >= b.st ? a.st : b.st);
        bool faults = atomic_load(&faults_on);
        bool ok = true;
        if (kind == 0) {
                /* one pause wins (200), the other finds it pausing or paused (400), or lost the
                 * race to change its status (409) */
                ok = (a.st == 200 && (b.st == 400 || b.st == 409)) || ((a.st == 400 || a.st == 409) && b.st == 200);
                if (ok)
                        sb->st = M_PAUSED;
        } else if (kind == 1) {
                /* the destroy always ends it; the pause either came first (200) or found it gone
                 * (400, or 409 when the destroy changed it under the pause's check) */
                ok = b.st == 204 && (a.st == 200 || a.st == 400 || a.st == 409);
                if (b.st == 204)
                        sb->st = M_DESTROYED;
        } else if (kind == 3) {
                /* the destroy always ends it (waiting for the commit if it must); the snapshot was
                 * taken first (202) or found it destroyed (400) */
                ok = b.st == 204 && (a.st == 202 || a.st == 400 || a.st == 403 || a.st == 429);
                if (b.st == 204)
                        sb->st = M_DESTROYED;
                if (a.st == 202 && c->n_snap < MAX_SNAP) {
                        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(a.out);
                        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "id"));
                        if (id)
                                snprintf(c->snap[c->n_snap++].id, 25, "%s", id);
                }
        } else {
                /* the snapshot came first (202, and the pause waited for it) or the pause did (400) */
                ok = a.st == 200 && (b.st == 202 || b.st == 400 || b.st == 403 || b.st == 429);
                if (a.st == 200)
                        sb->st = M_PAUSED;
                if (b.st == 202 && c->n_snap < MAX_SNAP) {
                        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(b.out);
                        const char *id = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "id"));
                        if (id)
                                snprintf(c->snap[c->n_snap++].id, 25, "%s", id);
                }
        }
        if (!ok && !(faults && (a.st >= 500 || b.st >= 500)))
                failf("client %d step %d: racing %s and %s %s answered %ld and %ld: %.200s | %.200s", c->n, c->steps, a.path,
                      b.method, b.path, a.st, b.st, a.out, b.out);
        if (!ok && faults) {
                /* a fault in one of them: read what happened and take it as the model */
                char buf[32];
                const char *s = status_of(c, sb->id, buf);
                for (int i = 0; s && i < 3; i++)
                        if (!strcmp(s, mst_names[i]))
                                sb->st = (enum mst) i;
        }
        free(a.out);
        free(b.out);
        check_state(c, sb, "two at once");
}

static enum op pick_op(struct client *c) {
        int total = 0;
        for (int i = 0; i < _OP_MAX; i++)
                total += op_weight[i];
        int x = rnd(c, total);
        for (int i = 0; i < _OP_MAX; i++) {
                if (x < op_weight[i])
                        return (enum op) i;
                x -= op_weight[i];
        }
        return OP_EXEC;
}

static int env_int(const char *k, int def) {
        const char *v = getenv(k);
        return v && *v ? atoi(v) : def;
}

static int steps_per_client, run_seconds;
static int64_t run_until;

static void *client_main(void *ud) {
        struct client *c = ud;
        for (c->steps = 0; !atomic_load(&stop_all); c->steps++) {
                if (run_seconds ? mono_ms() >= run_until : c->steps >= steps_per_client)
                        break;
                enum op op = c->n_sb ? pick_op(c) : OP_CREATE;
                cur = NULL;
                switch (op) {
                case OP_CREATE: op_create(c, NULL); break;
                case OP_RESTORE: op_restore(c); break;
                case OP_EXEC: op_exec(c); break;
                case OP_FILES: op_files(c); break;
                case OP_SNAPSHOT: op_snapshot(c); break;
                case OP_PAUSE: op_pause(c, false); break;
                case OP_RESUME: op_resume(c, false); break;
                case OP_DESTROY: op_destroy(c, false); break;
                case OP_EGRESS: op_egress(c); break;
                case OP_E2B_TIMEOUT: op_e2b_timeout(c); break;
                case OP_E2B_PAUSE: op_pause(c, true); break;
                case OP_E2B_CONNECT: op_resume(c, true); break;
                case OP_E2B_KILL: op_destroy(c, true); break;
                case OP_RACE: op_race(c); break;
                case OP_PERSISTENT: op_persistent(c); break;
                case OP_VOLUME_DELETE: op_volume_delete(c); break;
                case _OP_MAX: break;
                }
        }
        return NULL;
}

/* ---- faults ---- */

static void agent_start(void) {
        char egress[160] = "";
        if (networked)
                snprintf(egress, sizeof(egress), "[egress]\nenable = true\ntable = %s\nbridges = " BRIDGE "\n", table);
        agenttest_write_conf(agent_conf, ctld_nomad() ? "nomad" : node_id, exchange, ctld_nomad() ? standin.url : NULL,
                             "[snapshot]\nregistry = %s\nrepository = %s\ndisk_floor = 64M\nprune_interval = 5s\n"
                             "timeout = 120s\n%s",
                             registry, repo, egress);
        agent_pid = agenttest_start(agent_conf, agent_log, "consuming snapshot jobs");
}

static void agent_stop(void *ud) {
        (void) ud;
        pthread_mutex_lock(&agent_lock);
        test_stop_child(&agent_pid);
        pthread_mutex_unlock(&agent_lock);
}

static void net_drop(void *ud) {
        (void) ud;
        char *t1[] = { "nft", "delete", "table", "inet", table, NULL }, *t2[] = { "nft", "delete", "table", "bridge", table, NULL };
        char *n[] = { "docker", "network", "rm", "paddock-lfc", "paddock-lfc-int", NULL };
        (void) test_run_capture(t1, NULL, 1 << 16);
        (void) test_run_capture(t2, NULL, 1 << 16);
        (void) test_run_capture(n, NULL, 1 << 16);
}

/* The sandbox chains in the agent's nft tables (inet and bridge). */
static long sandbox_chains(void) {
        long n = 0;
        const char *const fam[] = { "inet", "bridge" };
        for (int f = 0; f < 2; f++) {
                char *argv[] = { "nft", "list", "table", (char *) fam[f], table, NULL };
                _cleanup_free_ char *out = NULL;
                if (test_run_capture(argv, &out, 1 << 22) != 0 || !out)
                        continue;
                /* a sandbox's chain is sbx_<its id>; sbx_egress and sbx_to_host are the table's own */
                for (const char *p = out; (p = strstr(p, "\tchain sbx_")); p++)
                        n += strspn(p + 11, "0123456789abcdef") == 24;
        }
        return n;
}

static void queues_drop(void *ud) {
        (void) ud;
        amqptest_snapshot_queues_drop(exchange, node_id);
}

static void sleep_ms_unless_stopped(int ms) {
        for (int t = 0; t < ms && !atomic_load(&stop_all); t += 100)
                usleep(100 * 1000);
}

static void *fault_main(void *ud) {
        unsigned rng = *(unsigned *) ud;
        while (!atomic_load(&stop_all)) {
                sleep_ms_unless_stopped(1500 + (int) (rand_r(&rng) % 2500));
                if (atomic_load(&stop_all))
                        break;
                int f = (int) (rand_r(&rng) % 5);
                if (f == 4 && getenv("LIFECYCLE_NO_BROKER_RESTART"))
                        f = 2;   /* the broker is shared with other runs on this machine */
                if (f == 0) {
                        if (ctld_nomad()) {
                                nstandin_fault(&standin, "{\"http_500\":2}");
                                atomic_fetch_add(&n_faults[F_SCHEDULER_500], 1);
                        } else {
                                atomic_store(&dfault.fail_next, 1 + (int) (rand_r(&rng) % 2));
                                atomic_fetch_add(&n_faults[F_ENGINE_FAILS], 1);
                        }
                } else if (f == 3) {
                        /* the registry away for a moment: pushes and pulls fail with the reason */
                        regtest_stop();
                        atomic_fetch_add(&n_faults[F_REGISTRY], 1);
                        sleep_ms_unless_stopped(2500);
                        char reg[32];
                        regtest_start(registry_port, NULL, reg);
                } else if (f == 4) {
                        /* the broker restarted under the run: jobs and replies in flight */
                        char *stop[] = { "rabbitmqctl", "-n", "rabbit@localhost", "-q", "stop_app", NULL };
                        char *start[] = { "rabbitmqctl", "-n", "rabbit@localhost", "-q", "start_app", NULL };
                        if (test_run_capture(stop, NULL, 1 << 16) == 0) {
                                atomic_fetch_add(&n_faults[F_BROKER], 1);
                                sleep_ms_unless_stopped(1500);
                                int tries = 0;
                                while (test_run_capture(start, NULL, 1 << 16) != 0 && tries++ < 10)
                                        usleep(500 * 1000);
                        }
                } else if (f == 1) {
                        if (ctld_nomad())
                                nstandin_fault(&standin, "{\"slow_placement_ms\":1500}");
                        else
                                atomic_store(&dfault.slow_ms, 1500);
                        atomic_fetch_add(&n_faults[F_ENGINE_SLOW], 1);
                        sleep_ms_unless_stopped(3000);
                        if (ctld_nomad())
                                nstandin_fault(&standin, "{\"slow_placement_ms\":0}");
                        else
                                atomic_store(&dfault.slow_ms, 0);
                } else {
                        pthread_mutex_lock(&agent_lock);
                        agenttest_kill(&agent_pid);
                        pthread_mutex_unlock(&agent_lock);
                        atomic_fetch_add(&n_faults[F_AGENT], 1);
                        sleep_ms_unless_stopped(1000);
                        pthread_mutex_lock(&agent_lock);
                        agent_start();
                        pthread_mutex_unlock(&agent_lock);
                }
        }
        /* whatever is left of a fault ends with the load */
        if (ctld_nomad())
                nstandin_fault(&standin, "{\"reset\":1}");
        atomic_store(&dfault.fail_next, 0);
        atomic_store(&dfault.slow_ms, 0);
        return NULL;
}

/* ---- the run ---- */

static char *admin_e2b_key(const char *name) {
        _cleanup_free_ char *acc = NULL;
        char *key = NULL;
        ASSERT_EQ(ctld_admin(&ctl, &acc, "account", "create", name, "--plan", "life", NULL), 0);
        acc[strcspn(acc, "\n")] = 0;
        ASSERT_EQ(ctld_admin(&ctl, &key, "key", "issue", acc, "--e2b", NULL), 0);
        key[strcspn(key, "\n")] = 0;
        return key;
}

static void platform_up(bool faults) {
        need_docker();
        agenttest_need(true);
        int id4 = (int) (getpid() % 100000);
        networked = !ctld_nomad();
        snprintf(table, sizeof(table), "plfc%d", id4);
        agenttest_names("lfc", id4, node_id, exchange, agent_conf, agent_log);
        snprintf(repo, sizeof(repo), "paddock-test/life%d", id4);
        if (ctld_nomad()) {
                need_nstandin();
                nstandin_start_one_node(&standin, test_tmpdir(), node_id, sizeof(node_id));
        }
        if (faults) {
                registry_port = test_free_port();
                regtest_start(registry_port, NULL, registry);
        }
        if (networked)
                test_on_exit(net_drop, NULL);   /* first in, last out: after every container on them */
        test_on_exit(queues_drop, NULL);
        test_on_exit(agent_stop, NULL);
        agent_start();
        e2b_port = test_free_port();
        snprintf(e2b_url, sizeof(e2b_url), "http://127.0.0.1:%d", e2b_port);
        char sock[PATH_MAX + 64] = "";
        if (faults && !ctld_nomad()) {
                dfault_start(&dfault, test_tmpdir());
                snprintf(sock, sizeof(sock), "socket = %s\n", dfault.path);
        }
        char extra[4096];
        char net[512] = "";
        if (networked)
                snprintf(net, sizeof(net),
                         "network = paddock-lfc\nsubnet = 169.254.70.0/24\ngateway = 169.254.70.1\nbridge = " BRIDGE "\n"
                         "network_internal = paddock-lfc-int\nsubnet_internal = 169.254.71.0/24\n");
        snprintf(extra, sizeof(extra),
                 "[docker]\nnode_id = %s\n%s%s"
                 "[amqp]\nurl = amqp://guest:guest@127.0.0.1:5672\nexchange = %s\n"
                 "[snapshots]\nregistry = %s\nrepository = %s\ntimeout = 120s\ntick = 500ms\n"
                 "[e2b]\nlisten = 127.0.0.1:%d\nbase_template = busybox\n" PLAN,
                 node_id, net, sock, exchange, registry, repo, e2b_port);
        if (ctld_nomad())
                ctld_start_nomad(&ctl, &standin, NULL, NULL, extra);
        else
                ctld_start(&ctl, NULL, extra);
}

static long registry_tags(void) {
        _cleanup_free_ char *out = NULL, *url = xasprintf("http://%s/v2/%s/tags/list", registry, repo);
        char *argv[] = { "curl", "-s", url, NULL };
        if (test_run_capture(argv, &out, 1 << 20) != 0 || !out)
                return -1;
        _cleanup_json_ cJSON *j = cJSON_Parse(out);
        const cJSON *tags = cJSON_GetObjectItem(j, "tags");
        return cJSON_IsArray(tags) ? cJSON_GetArraySize(tags) : 0;
}

static long containers_of(const char *id) {
        char filter[128];
        if (ctld_nomad())
                snprintf(filter, sizeof(filter), "label=com.hashicorp.nomad.job_id=sandbox-%s", id);
        else
                snprintf(filter, sizeof(filter), "name=paddock-%s", id);
        char *argv[] = { "docker", "ps", "-aq", "--filter", filter, NULL };
        _cleanup_free_ char *out = NULL;
        if (test_run_capture(argv, &out, 1 << 16) != 0)
                return -1;
        long n = 0;
        for (char *p = out; p && *p; p++)
                n += *p == '\n';
        return n;
}

static void print_table(struct client *cl, unsigned seed, int64_t ms) {
        long total = 0;
        printf("\nlifecycle model (%s driver, seed %u, %d clients, %.1f s):\n", ctld_nomad() ? "nomad" : "docker", seed,
               N_CLIENTS, (double) ms / 1000);
        printf("  %-22s %6s %6s %6s\n", "operation", "2xx", "4xx", "5xx");
        for (int i = 0; i < _OP_MAX; i++) {
                printf("  %-22s %6ld %6ld %6ld\n", op_names[i], atomic_load(&op_2xx[i]), atomic_load(&op_4xx[i]),
                       atomic_load(&op_5xx[i]));
                total += atomic_load(&op_2xx[i]) + atomic_load(&op_4xx[i]) + atomic_load(&op_5xx[i]);
        }
        printf("  %-22s %6ld\n", "operations", total);
        for (int i = 0; i < _F_MAX; i++)
                if (atomic_load(&n_faults[i]))
                        printf("  fault: %-15s %6ld\n", fault_names[i], atomic_load(&n_faults[i]));
        if (dfault.running)
                printf("  engine calls failed %ld, slowed %ld\n", atomic_load(&dfault.faulted), atomic_load(&dfault.slowed));
        int made = 0;
        for (int i = 0; i < N_CLIENTS; i++)
                made += cl[i].n_sb;
        printf("  sandboxes made %d\n", made);
        fflush(stdout);
}

static void lifecycle_run(bool faults, unsigned dflt_seed) {
        platform_up(faults);
        unsigned seed = test_seed(dflt_seed);
        steps_per_client = env_int("LIFECYCLE_STEPS", 30);
        run_seconds = env_int("LIFECYCLE_SECONDS", 0);
        run_until = mono_ms() + (int64_t) run_seconds * 1000;
        struct client *cl = xnew0(struct client, N_CLIENTS);
        for (int i = 0; i < N_CLIENTS; i++) {
                char name[32];
                snprintf(name, sizeof(name), "life-%d", i);
                _cleanup_free_ char *k = admin_e2b_key(name);
                snprintf(cl[i].key, sizeof(cl[i].key), "%s", k);
                cl[i].n = i;
                cl[i].rng = seed * 2654435761u + (unsigned) i;
        }
        atomic_store(&faults_on, faults);
        int64_t t0 = mono_ms();
        pthread_t th[N_CLIENTS], ft;
        unsigned fseed = seed ^ 0x5eedu;
        if (faults)
                ASSERT_EQ(pthread_create(&ft, NULL, fault_main, &fseed), 0);
        for (int i = 0; i < N_CLIENTS; i++)
                ASSERT_EQ(pthread_create(&th[i], NULL, client_main, &cl[i]), 0);
        for (int i = 0; i < N_CLIENTS; i++)
                pthread_join(th[i], NULL);
        bool failed_already = atomic_load(&stop_all);
        atomic_store(&stop_all, true);
        if (faults)
                pthread_join(ft, NULL);
        if (failed_already)
                test_fail(__FILE__, __LINE__, "%s (seed %u; PADDOCK_TEST_SEED=%u replays it)", failure, seed, seed);
        atomic_store(&stop_all, false);

        /* The platform heals: the agent runs (a fault may have left it stopped a moment ago). */
        pthread_mutex_lock(&agent_lock);
        if (!agent_pid)
                agent_start();
        pthread_mutex_unlock(&agent_lock);

        /* The platform heals: with the faults over, every client can make, use, snapshot and end
         * a sandbox again (the node agent and broker reconnect by themselves). */
        if (faults)
                for (int i = 0; i < N_CLIENTS && !failure[0]; i++) {
                        struct client *c = &cl[i];
                        for (int j = 0; j < c->n_sb; j++)
                                if (c->sb[j].st != M_DESTROYED) {
                                        cur = &c->sb[j];
                                        op_destroy_one(c, &c->sb[j]);
                                }
                        int64_t until = mono_ms() + 60 * 1000;
                        long st = 0;
                        _cleanup_free_ char *out = NULL;
                        while (mono_ms() < until) {   /* the broker or agent may still be reconnecting */
                                free(out);
                                out = NULL;
                                st = req(c, "POST", "/sandboxes", "{\"egress\":{\"mode\":\"deny_all\"}}", &out);
                                if (st == 201)
                                        break;
                                usleep(500 * 1000);
                        }
                        if (st != 201) {
                                failf("client %d: after the faults, create answered %ld: %.200s", i, st, out);
                                break;
                        }
                        add_sb(c, out);
                        struct msb *sb = &c->sb[c->n_sb - 1];
                        cur = sb;
                        c->steps++;
                        op_exec(c);
                        op_snapshot(c);
                        op_destroy_one(c, sb);
                }
        if (failure[0])
                test_fail(__FILE__, __LINE__, "%s (seed %u)", failure, seed);

        /* Every state the model holds, once more; then the user ends everything. */
        for (int i = 0; i < N_CLIENTS; i++) {
                struct client *c = &cl[i];
                for (int j = 0; j < c->n_sb; j++) {
                        check_state(c, &c->sb[j], "the run");
                        if (c->sb[j].st != M_DESTROYED) {
                                _cleanup_free_ char *path = xasprintf("/sandboxes/%s", c->sb[j].id), *out = NULL;
                                long st = 0;
                                for (int t = 0; t < 5 && st != 204; t++) {
                                        free(out);
                                        out = NULL;
                                        st = req(c, "DELETE", path, NULL, &out);
                                        if (st != 204)
                                                usleep(500 * 1000);
                                }
                                if (st != 204)
                                        failf("client %d: destroy of %s at the end answered %ld: %.200s", i, c->sb[j].id, st, out);
                                c->sb[j].st = M_DESTROYED;
                        }
                }
                /* snapshots: each settles, ready or (with faults) failed with a reason; then deleted */
                for (int j = 0; j < c->n_snap; j++) {
                        char st[16] = "creating", why[256] = "";
                        for (int t = 0; t < 600 && !strcmp(st, "creating"); t++) {
                                snap_status(c, c->snap[j].id, st, why);
                                if (!strcmp(st, "creating"))
                                        usleep(250 * 1000);
                        }
                        if (!strcmp(st, "creating") || !st[0])
                                failf("client %d: snapshot %s is '%s' after 150 s", i, c->snap[j].id, st);
                        else if (!strcmp(st, "failed") && (!faults || !why[0]))
                                failf("client %d: snapshot %s failed (%s)%s", i, c->snap[j].id, why,
                                      faults ? "" : " in a run without faults");
                        _cleanup_free_ char *path = xasprintf("/sandboxes/snapshots/%s", c->snap[j].id), *out = NULL;
                        long d = req(c, "DELETE", path, NULL, &out);
                        if (d != 204)
                                failf("client %d: delete of snapshot %s answered %ld: %.200s", i, c->snap[j].id, d, out);
                }
                /* what else the user's list holds: a snapshot POST refused with a 5xx under a fault
                 * (the broker away) keeps a failed record with its reason, as a failed create does
                 * (the audit trail, outside every quota); the user deletes it. Anything else left
                 * (ready, creating, or failed without a reason) was never promised: a leak. */
                _cleanup_free_ char *list = NULL;
                if (req(c, "GET", "/sandboxes/snapshots?limit=100", NULL, &list) == 200) {
                        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(list);
                        const cJSON *it;
                        cJSON_ArrayForEach(it, cJSON_GetObjectItem(cJSON_GetObjectItem(o, "data"), "data")) {
                                const char *sid = cJSON_GetStringValue(cJSON_GetObjectItem(it, "id")) ?: "";
                                const char *sname = cJSON_GetStringValue(cJSON_GetObjectItem(it, "name")) ?: "";
                                const char *sst = cJSON_GetStringValue(cJSON_GetObjectItem(it, "status")) ?: "";
                                const char *swhy = cJSON_GetStringValue(cJSON_GetObjectItem(it, "failure_reason")) ?: "";
                                if (!strcmp(sname, "e2b-pause"))
                                        continue;   /* the sandbox's own: they go with it (checked below) */
                                if (strcmp(sst, "failed") || !swhy[0] || !faults) {
                                        failf("client %d: snapshot %s (%s, %s: %s) is in the list, never promised", i, sid, sname, sst,
                                              swhy);
                                        continue;
                                }
                                _cleanup_free_ char *path = xasprintf("/sandboxes/snapshots/%s", sid), *out = NULL;
                                long d = req(c, "DELETE", path, NULL, &out);
                                if (d != 204)
                                        failf("client %d: delete of failed snapshot %s answered %ld: %.200s", i, sid, d, out);
                        }
                }
        }
        print_table(cl, seed, mono_ms() - t0);
        if (failure[0])
                test_fail(__FILE__, __LINE__, "%s (seed %u)", failure, seed);

        /* Nothing leaked, nothing lost. */
        _cleanup_free_ char *live = ctld_db_query(&ctl, "SELECT COUNT(*) FROM sandboxes WHERE status NOT IN ('destroyed','failed')");
        ASSERT_STREQ(live, "0\n");
        /* E2B's pause snapshots go with their sandbox (retried by the snapshot tick when the
         * registry was away at the destroy): none may stay */
        _cleanup_free_ char *snaps = NULL;
        for (int t = 0; t < 150; t++) {
                free(snaps);
                snaps = ctld_db_query(&ctl, "SELECT COUNT(*) FROM snapshots");
                if (snaps && !strcmp(snaps, "0\n"))
                        break;
                usleep(200 * 1000);
        }
        if (!snaps || strcmp(snaps, "0\n")) {
                _cleanup_free_ char *rows = ctld_db_query(&ctl, "SELECT s.id, s.name, s.status, s.failure_reason, b.status FROM snapshots s"
                                                                " LEFT JOIN sandboxes b ON b.id = s.sandbox_id");
                test_fail(__FILE__, __LINE__, "snapshots left in the store: %s", rows ? rows : "?");
        }
        for (int i = 0; i < N_CLIENTS; i++)
                for (int j = 0; j < cl[i].n_sb; j++) {
                        long n = -1;
                        for (int t = 0; t < 50 && n != 0; t++) {   /* the orphan reaper removes strays */
                                n = containers_of(cl[i].sb[j].id);
                                if (n)
                                        usleep(200 * 1000);
                        }
                        if (n != 0)
                                test_fail(__FILE__, __LINE__, "sandbox %s left %ld container(s) behind", cl[i].sb[j].id, n);
                }
        /* The warm pool (creates here are its hits while it has members): back to its size,
         * every member a running container that no sandbox took (a claimed one is a sandbox). */
        _cleanup_free_ char *members = NULL;
        for (int t = 0; t < 100; t++) {
                free(members);
                members = ctld_db_query(&ctl, "SELECT COUNT(*) FROM pool_members WHERE state = 'ready'");
                if (members && atoi(members) == POOL_SIZE)
                        break;
                usleep(200 * 1000);
        }
        if (!members || atoi(members) != POOL_SIZE)
                test_fail(__FILE__, __LINE__, "the pool has %s ready member(s), not %d", members ? members : "?", POOL_SIZE);
        _cleanup_free_ char *taken = ctld_db_query(&ctl, "SELECT COUNT(*) FROM pool_members WHERE id IN (SELECT id FROM sandboxes)");
        ASSERT_STREQ(taken, "0\n");
        {
                /* and the claims did happen: the run went through the pool, not around it */
                struct hres r;
                http_req(&ctl, "GET", "/metrics", NULL, NULL, &r);
                const char *hit = r.body ? strstr(r.body, "paddock_pool_claims_total{pool=\"life\",result=\"hit\",reason=\"\"} ") : NULL;
                long hits = hit ? atol(hit + strlen("paddock_pool_claims_total{pool=\"life\",result=\"hit\",reason=\"\"} ")) : 0;
                hres_done(&r);
                printf("  pool claims (hits) %ld\n", hits);
                if (hits < 1)
                        test_fail(__FILE__, __LINE__, "no create was served from the warm pool");
        }
        /* Volumes outlive their sandbox until deleted: the user deletes them, and nothing of
         * them is left on the engine. */
        for (int i = 0; i < N_CLIENTS; i++)
                for (int v = 0; v < MAX_VOL; v++) {
                        if (!cl[i].vol[v][0])
                                continue;
                        _cleanup_free_ char *path = xasprintf("/volumes/%s", cl[i].vol[v]), *out = NULL;
                        long st = req(&cl[i], "DELETE", path, NULL, &out);
                        if (st != 204)
                                test_fail(__FILE__, __LINE__, "delete of volume %s at the end answered %ld: %.200s", cl[i].vol[v], st, out);
                        _cleanup_free_ char *name = xasprintf("name=paddock-vol-%s", cl[i].vol[v]), *vl = NULL;
                        char *argv[] = { "docker", "volume", "ls", "-q", "--filter", name, NULL };
                        ASSERT_EQ(test_run_capture(argv, &vl, 1 << 16), 0);
                        if (vl && *vl)
                                test_fail(__FILE__, __LINE__, "volume %s is still on the engine after its delete", cl[i].vol[v]);
                }
        /* no policy of any sandbox left on the node (the destroy asked the agent to drop it) */
        if (networked) {
                long chains = -1;
                for (int t = 0; t < 50 && chains != 0; t++) {
                        chains = sandbox_chains();
                        if (chains)
                                usleep(200 * 1000);
                }
                if (chains != 0) {
                        char *argv[] = { "nft", "list", "table", "inet", table, NULL };
                        _cleanup_free_ char *out = NULL;
                        (void) test_run_capture(argv, &out, 1 << 22);
                        const char *p = out ? strstr(out, "\tchain sbx_") : NULL;
                        while (p && strspn(p + 11, "0123456789abcdef") != 24)
                                p = strstr(p + 1, "\tchain sbx_");
                        char which[64] = "";
                        if (p)
                                snprintf(which, sizeof(which), "%.40s", p + 7);
                        for (int i = 0; i < N_CLIENTS; i++)
                                for (int k = 0; k < cl[i].n_sb; k++)
                                        if (which[0] && strstr(which, cl[i].sb[k].id) == which + 4)
                                                fprintf(stderr, "  %s: %s\n", cl[i].sb[k].id, cl[i].sb[k].history);
                        test_fail(__FILE__, __LINE__, "%ld sandbox chain(s) left in the node's nft table %s (%s)", chains, table,
                                  which);
                }
        }
        _cleanup_free_ char *vols = ctld_db_query(&ctl, "SELECT COUNT(*) FROM volumes");
        ASSERT_STREQ(vols, "0\n");
        /* Nomad: no job of any sandbox the run made is left registered (a job a fault left
         * behind is the orphan reaper's, which runs every reap_interval: waited for) */
        if (ctld_nomad()) {
                char left[64] = "";
                for (int t = 0; t < 100; t++) {
                        left[0] = 0;
                        _cleanup_(cJSON_Deletep) cJSON *st = nstandin_state(&standin);
                        const cJSON *j;
                        cJSON_ArrayForEach(j, cJSON_GetObjectItem(st, "Jobs")) {
                                const char *jid = cJSON_GetStringValue(cJSON_GetObjectItem(j, "ID"));
                                for (int i = 0; jid && i < N_CLIENTS; i++)
                                        for (int k = 0; k < cl[i].n_sb; k++)
                                                if (!strncmp(jid, "sandbox-", 8) && !strcmp(jid + 8, cl[i].sb[k].id))
                                                        snprintf(left, sizeof(left), "%s", jid);
                        }
                        if (!left[0])
                                break;
                        usleep(200 * 1000);
                }
                if (left[0]) {
                        for (int i = 0; i < N_CLIENTS; i++)
                                for (int k = 0; k < cl[i].n_sb; k++)
                                        if (!strcmp(left + 8, cl[i].sb[k].id))
                                                fprintf(stderr, "  %s: %s\n", cl[i].sb[k].id, cl[i].sb[k].history);
                        test_fail(__FILE__, __LINE__, "the Nomad job %s is still registered after 20 s", left);
                }
        }
        long tags = -1;
        for (int t = 0; t < 50 && tags != 0; t++) {
                tags = registry_tags();
                if (tags)
                        usleep(200 * 1000);
        }
        ASSERT_EQ(tags, 0);
        free(cl);
}

TEST_FULL(lifecycle_model_without_faults, 900) {
        lifecycle_run(false, 1);
}

TEST_FULL(lifecycle_model_with_faults, 900) {
        lifecycle_run(true, 2);
}
