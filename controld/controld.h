/* controld.h — the top of the control daemon: one struct ctl (a controld's parts), the shared
 * services every layer uses (per-sandbox locks, status notification, job threads), and the
 * errno convention of the domain calls. Each module's own calls are in its
 * header beside it (core/sandbox.h, edge/render.h, ...); the records in store/store.h, the
 * configuration in config.h. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <cjson/cJSON.h>

#include "cleanup.h"
#include "config.h"
#include "err.h"
#include "pj_api.h"
#include "store.h"
#include "strutil.h"

/* ---- one controld: its parts (daemon.c) and shared services (ctl.c) ---- */

struct driver;
struct metrics;
struct nodebus;
struct egress_bus;

struct ctl {
        char *instance_id;               /* labels this controld's workloads, so orphan reaping
                                            never touches another instance's on a shared engine */
        struct config *cfg;
        struct store *store;
        struct driver *drv;
        char *agent_binary;              /* the in-sandbox agent (agent.c); NULL = off */
        char *agent_dir;                 /* its secret files */
        char agent_key[65];              /* secrets are HMAC(agent_key, sandbox id) */
        unsigned char secrets_key[32];   /* [secrets] key_file, derived (secret.c) */
        bool secrets_on;                 /* a key was given: /secrets is served */
        char *relay_secret;              /* Nomad: the nodes' relay secret ([nomad] relay_secret_file) */
        size_t relay_secret_len;
        struct ssl_ctx_st *relay_tls;    /* [nomad] relay_tls_ca: TLS to the relays; NULL = plain */
        struct metrics *metrics;
        struct nodebus *bus;             /* NULL when [amqp] url is unset: egress is not enforced */
        struct egress_bus *egbus;        /* node.sync responder (egress.c) */
        struct snapbus *snapbus;         /* snapshot jobs out, agents' events in (snapshot.c) */
        volatile int stopping;
        pthread_mutex_t wait_lock;       /* status-change broadcast for /wait */
        pthread_cond_t wait_cond;
        uint64_t status_gen;
        /* Per-sandbox operation locks: one entry per sandbox id held or waited for (ctl.c), so
         * one sandbox's slow operation (an image pull, a start, an egress apply) never holds up
         * another's. Entries live only while someone holds or waits: bounded by the threads. */
        pthread_mutex_t sb_lock_mu;
        struct sb_lock_entry *sb_locks;
        pthread_mutex_t jobs_lock;
        pthread_cond_t jobs_cond;
        int jobs_running;
        int streams_running;             /* SSE exec streams; shutdown lets them say goodbye */
};

/* Takes sandbox id's operation lock (waiting while another thread holds it) / gives it back.
 * Locks of different ids never wait on each other. Not recursive. */
void ctl_sandbox_lock(struct ctl *c, const char *id);
void ctl_sandbox_unlock(struct ctl *c, const char *id);
void ctl_notify_status(struct ctl *c);
/* Reads sandbox id into *sb until done(sb, ud) holds, waking on every status notification, for
 * at most timeout_ms or until controld stops. Returns 1 when done, 0 when not (time is up or
 * controld is stopping; *sb is the last record read), <0 when the record cannot be read. */
int ctl_wait_sandbox(struct ctl *c, const char *id, bool (*done)(const struct sandbox *sb, const void *ud),
                     const void *ud, int64_t timeout_ms, struct sandbox *sb);
/* Whether the scheduler backend answers (>= 0), and the driver's name (NULL: none). */
int ctl_backend_ping(struct ctl *c, const char **ret_driver);
/* Runs fn(ctx) on a detached thread counted in jobs_running (drained at exit). */
int ctl_spawn_job(struct ctl *c, void (*fn)(struct ctl *c, void *arg), void *arg_owned);

/* ---- sandbox lifecycle (sandbox.c) ---- */

/* Domain functions (sandbox_*, volume_*) return a negative errno and put a
 * user-facing message (what was wrong, what to do) in a struct err (common/err.h:
 * err_set(e, -EINVAL, "...")). The edges map the errno to an HTTP status in one table
 * (http_status_from_errno):
 *   -EINVAL bad input, -EBUSY wrong state or in use, -EEXIST name taken,
 *   -EPERM not allowed for the plan/region, -EDQUOT over a plan limit,
 *   -ENOENT not found (or not the caller's), -ESTALE changed meanwhile,
 *   -EIO the store failed, -EHOSTUNREACH the scheduler/driver failed,
 *   -EAGAIN shutting down or busy (retry), -EOPNOTSUPP not available here. */

/* Scope-bound guards: a struct sandbox / struct volume cleared, a per-sandbox lock
 * released, however the scope is left. The lock guard copies the id, so it never
 * depends on the struct it came from. */
#define _cleanup_sandbox_ _cleanup_(sandbox_clear)
#define _cleanup_volume_ _cleanup_(volume_clear)
struct sandbox_lock {
        struct ctl *c;                   /* NULL = not held */
        char id[SANDBOX_ID_LEN + 1];
};
struct sandbox_lock sandbox_lock_take(struct ctl *c, const char *id);
void sandbox_lock_release(struct sandbox_lock *l);
#define SANDBOX_LOCK_GUARD(name, c, id) \
        __attribute__((cleanup(sandbox_lock_release))) struct sandbox_lock name = sandbox_lock_take((c), (id))

/* ctl.c: the API's answer to loading one of the caller's records by id, given what a
 * store_*_get_owned() returned: 0, -ENOENT (none, or another account's) or -EIO, with the
 * message naming the record `what` ("sandbox", "volume"). */
int record_load_result(int r, const char *what, struct err *err);
/* ctl.c: loads a sandbox owned by acc (-ENOENT for others'). */
int sandbox_load(struct ctl *c, const struct account *acc, const char *id, struct sandbox *ret, struct err *err);
/* ---- admin CLI (admin.c) ---- */
int admin_main(int argc, char **argv);
/* ---- a controld's parts, opened and closed (daemon.c) ---- */
int ctl_open(struct ctl *c, const char *conf_path, bool with_driver);
void ctl_close(struct ctl *c);
/* ctl.c: a struct ctl's locks and conditions, nothing else opened. */
void ctl_init(struct ctl *c);
