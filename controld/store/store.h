/* store.h — the records controld keeps (accounts, keys, sandboxes, volumes, previews, user
 * templates, pool members, snapshots, nodes, usage) and the sqlite store that keeps them
 * (store*.c); the typed sandbox data and its column text (sbtypes.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "config.h"
#include "pj_api.h"
#include "strutil.h"

/* ---- store (store.c) ---- */

enum sb_status {
        SB_STARTING, SB_READY, SB_PAUSING, SB_PAUSED, SB_RESUMING, SB_FAILED, SB_DESTROYED,
        _SB_STATUS_MAX
};
const char *sb_status_str(enum sb_status s);
int sb_status_from_str(const char *s);   /* -EINVAL if unknown */
bool sb_status_active(enum sb_status s); /* counts against concurrency */

struct account {
        char id[SANDBOX_ID_LEN + 1];
        char *name, *plan;
        int64_t created_at;
        int64_t limits[_PLAN_LIMIT_MAX];        /* this account's own plan amounts; -1 = the plan's */
};

/* A sandbox's egress policy, parsed: entries are structs, never text, from the API
 * edge on. Zero-initialised = open, no entries. */
struct sb_egress {
        enum pj_egress_mode mode;
        struct pj_allow_entry *allow;    /* n_allow entries, owned */
        size_t n_allow;
        /* Header rules per host (only rules.rules, .n_rules and .rules_open are used; owned):
         * values as given, placeholders unresolved (a secret's value is never in the record). */
        struct pj_egress rules;
};

/* Provisioning phase durations, as rendered under "timings" (<phase>_ms). */
enum sb_phase { SB_PHASE_VALIDATE, SB_PHASE_RECORD, SB_PHASE_PLACE, SB_PHASE_TOTAL, SB_PHASE_RESUME, SB_PHASE_CLAIM, _SB_PHASE_MAX };
struct sb_timings {
        int64_t ms[_SB_PHASE_MAX];
        unsigned set;                    /* bit (1 << phase) per recorded phase */
};

/* A map of strings (keys unique, in the order given), decoded from a stored JSON object. */
struct sb_kv {
        char *key, *value;
};
struct sb_map {
        struct sb_kv *v;
        size_t n;
};
/* What the E2B adapter keeps of a sandbox it made. */
struct sb_e2b {
        bool set;                        /* made through E2B's API */
        char *template_id;               /* the templateID it was asked for (a template or a snapshot) */
        bool public;                     /* allowPublicTraffic: its ports answer without the traffic token */
};

struct sandbox {
        char id[SANDBOX_ID_LEN + 1];
        char account_id[SANDBOX_ID_LEN + 1];
        char *name, *template_name, *image;
        enum sb_status status;
        char *region_key;
        int64_t cpu, memory, disk;
        char *team, *project_environment;
        bool auto_destroy; char *destroy_timeout;
        bool pause_at_end, pause_keep_memory; /* its end pauses it (with its memory) instead of destroying it */
        int64_t run_s;                   /* how long it runs before its end (create, a new timeout), seconds */
        bool auto_resume;                /* a call to it while it is paused resumes it (E2B's autoResume) */
        bool one_shot;
        struct sb_egress egress;
        bool persistent; int64_t persistent_disk_gb;
        char *volume_id, *mount_path, *from_snapshot;
        char *snapshot_mode, *snapshot_frequency;
        int64_t created_at, last_activity_at, expires_at, paused_at, destroyed_at;   /* ms; 0 = null */
        char *destroy_reason, *failure_reason;
        char *driver, *job_id, *alloc_id, *node_id, *container_id, *ip;
        struct sb_timings timings;
        /* Decoded once, when the row is read (the store keeps JSON objects of strings):
         * metadata (E2B's, filterable) and variables layered under every process's own
         * environment (E2B's envVars). */
        struct sb_map metadata, env;
        struct sb_e2b e2b;               /* E2B's options for it; .set false: made through the Brimble API */
        /* Not stored: set only while a fork's child is placed (fork.c), borrowed. The driver
         * starts it from what the source's container staged under fork_name. */
        const char *fork_container, *fork_name;
};
void sandbox_clear(struct sandbox *s);

/* A preview URL: a port inside a sandbox reachable through the preview listener (preview.c).
 * One per (sandbox, port); the token itself is shown once, the store keeps its SHA-256. */
struct preview {
        char sandbox_id[SANDBOX_ID_LEN + 1];
        char account_id[SANDBOX_ID_LEN + 1];
        int port;
        char token_sha256[65];          /* hex */
        bool public_, keep_host;
        int64_t created_at, expires_at; /* ms */
};

struct volume {
        char id[SANDBOX_ID_LEN + 1];
        char account_id[SANDBOX_ID_LEN + 1];
        char *name, *type, *region_key, *team, *handle, *mount_path, *attached_sandbox_id;
        int64_t size_gb, last_attached_at, created_at, updated_at;
};
void volume_clear(struct volume *v);

struct store;
int store_open(const char *path, struct store **ret);
/* Returns the stored value of key, storing value_if_absent first when there is none. */
int store_meta_get_or_set(struct store *s, const char *key, const char *value_if_absent, char **ret);
/* Stores value under key (replacing), or deletes key when value is NULL. */
int store_meta_put(struct store *s, const char *key, const char *value);
/* The value of key (caller frees), or -ENOENT. */
int store_meta_get(struct store *s, const char *key, char **ret);
/* The last egress apply of a sandbox, as its node's agent confirmed it: when, and what each
 * allowlisted hostname resolved to (for GET /sandboxes/{id}/egress; survives a restart). put
 * replaces what was there; get returns -ENOENT when nothing is recorded, else a list of at most
 * PJ_EGRESS_MAX_ALLOW the caller frees. */
struct pj_node_resolved;
int store_egress_applied_put(struct store *s, const char *sandbox_id, const char *node, int64_t applied_at,
                             const struct pj_node_resolved *res, size_t n);
int store_egress_applied_get(struct store *s, const char *sandbox_id, int64_t *ret_applied_at,
                             struct pj_node_resolved **ret, size_t *ret_n);
int store_egress_applied_forget(struct store *s, const char *sandbox_id);
struct store *store_close(struct store *s);

int store_account_create(struct store *s, const char *name, const char *plan, struct account *ret);
int store_account_get(struct store *s, const char *id, struct account *ret);
int store_account_by_name(struct store *s, const char *name, struct account *ret);
/* value -1 returns the account to its plan's amount; -ENOENT when there is no such account. */
int store_account_set_limit(struct store *s, const char *id, enum plan_limit k, int64_t value);
int store_account_set_plan(struct store *s, const char *id, const char *plan);
void account_clear(struct account *a);
/* Iterates all accounts: cb returns <0 to stop. */
int store_account_foreach(struct store *s, int (*cb)(const struct account *a, void *ud), void *ud);

/* Stores only sha256(key) and a display prefix. */
int store_key_add(struct store *s, const char *account_id, const char *key_hash, const char *prefix, char ret_id[SANDBOX_ID_LEN + 1]);
int store_key_revoke(struct store *s, const char *id_or_prefix);
/* Resolves a key hash to its (unrevoked) account. -ENOENT when unknown. */
int store_key_lookup(struct store *s, const char *key_hash, struct account *ret);
int store_key_foreach(struct store *s, const char *account_id,
                      int (*cb)(const char *id, const char *prefix, int64_t created, int64_t revoked, void *ud), void *ud);

/* Atomically: count the account's active sandboxes, refuse with -EDQUOT when >= max_concurrent,
 * else insert sb as 'starting'. Exact under concurrency. */
int store_sandbox_insert_capped(struct store *s, const struct sandbox *sb, int64_t max_concurrent);
/* Previews: put replaces the (sandbox, port) row, refusing a new port beyond max_per_sandbox
 * live ones (-EDQUOT; expired rows are dropped first); get/delete -ENOENT when absent; list
 * the sandbox's unexpired ones (at most 256, caller frees). delete_sandbox drops them all. */
/* Templates users build (usertemplate.c). status: "building", "ready" or "failed". */
struct user_template {
        char id[25], account_id[25];
        char *name, *status;
        char *image;                    /* "<registry>/<repo>@sha256:..." once ready */
        int64_t size_bytes;             /* compressed layers + config, once ready */
        char *log;                      /* the build's output (its end), NULL before any */
        char *error;                    /* why it failed */
        char *builder_id;               /* the sandbox the build runs in */
        int64_t created_at, finished_at;
};
void user_template_clear(struct user_template *t);
/* -EEXIST: the account has a template of that name; -EDQUOT: it has max_per_account. */
int store_utpl_insert_capped(struct store *s, const struct user_template *t, int64_t max_per_account);
int store_utpl_get(struct store *s, const char *account_id, const char *name, struct user_template *ret);
int store_utpl_get_id(struct store *s, const char *id, struct user_template *ret);
int store_utpl_list(struct store *s, const char *account_id, struct user_template **ret, size_t *ret_n);
/* By id; -ENOENT when the row is gone (deleted meanwhile). */
int store_utpl_update(struct store *s, const struct user_template *t);
int store_utpl_delete(struct store *s, const char *id);
/* At start: builds a stopped controld left 'building' become failed; their builder sandboxes
 * (strv) are for the caller to destroy. */
int store_utpl_interrupted(struct store *s, int64_t now_ms, char ***ret_builder_ids);

/* Secrets (secret.c seals and opens the values; the rows live here). sealed is the value
 * encrypted under the server's key, bound to its account, name and version. */
struct secret {
        char id[SANDBOX_ID_LEN + 1];
        char account_id[SANDBOX_ID_LEN + 1];
        char *name;
        int64_t version;                 /* 1 at create, +1 at every PUT */
        char *sealed;
        struct sb_map metadata;          /* decoded when the row is read */
        int64_t created_at, updated_at;
};
void secret_clear(struct secret *s);
void secret_array_free(struct secret *a, size_t n);
/* -EEXIST: the account has one of that name; -EDQUOT: it has max_per_account. */
int store_secret_insert_capped(struct store *s, const struct secret *sec, int64_t max_per_account);
int store_secret_get(struct store *s, const char *account_id, const char *name, struct secret *ret);
int store_secret_get_id(struct store *s, const char *account_id, const char *id, struct secret *ret);
int store_secret_list(struct store *s, const char *account_id, struct secret **ret, size_t *ret_n);
/* The whole row, only while its version is still expected_version (-ESTALE otherwise). */
int store_secret_update(struct store *s, const struct secret *sec, int64_t expected_version);
int store_secret_delete(struct store *s, const char *account_id, const char *name);

int store_preview_put(struct store *s, const struct preview *p, int64_t now_ms, int64_t max_per_sandbox);
int store_preview_get(struct store *s, const char *sandbox_id, int port, struct preview *ret);
int store_preview_list(struct store *s, const char *sandbox_id, int64_t now_ms, struct preview **ret, size_t *ret_n);
int store_preview_delete(struct store *s, const char *sandbox_id, int port);
int store_preview_delete_sandbox(struct store *s, const char *sandbox_id);
int store_preview_prune(struct store *s, int64_t now_ms);
int store_sandbox_get(struct store *s, const char *id, struct sandbox *ret);
/* As store_sandbox_get, but -ENOENT also when the sandbox is another account's. */
int store_sandbox_get_owned(struct store *s, const char *account_id, const char *id, struct sandbox *ret);
/* Full-row update of the mutable columns. */
int store_sandbox_update(struct store *s, const struct sandbox *sb);
/* Compare-and-set status: -ESTALE when the current status is not `from`, -ENOENT when there
 * is no such sandbox. */
int store_sandbox_cas_status(struct store *s, const char *id, enum sb_status from, enum sb_status to);
/* Full-row update (as store_sandbox_update) only while the stored status is still `expected`:
 * -ESTALE when it is not (someone else moved the sandbox meanwhile; nothing written),
 * -ENOENT when there is no such sandbox. Every state change should go through this or
 * store_sandbox_cas_status, never a blind update. */
int store_sandbox_update_cas(struct store *s, const struct sandbox *sb, enum sb_status expected);
int store_sandbox_touch(struct store *s, const char *id, int64_t now);
/* Only for a create refused before any side effect (a 4xx found after the insert). */
int store_sandbox_delete(struct store *s, const char *id);
/* Page of an account's sandboxes (created_at desc). status_filter < 0 = any. */
int store_sandbox_list(struct store *s, const char *account_id, int status_filter, int64_t offset, int64_t limit,
                       struct sandbox **ret, size_t *ret_n, int64_t *ret_total);
/* All sandboxes in the given status (account_id NULL = all accounts). */
int store_sandbox_list_status(struct store *s, const char *account_id, int status, struct sandbox **ret, size_t *ret_n);
/* Sandboxes automatic snapshots concern: live ones with snapshot_mode automatic, and any with an
 * automatic snapshot left (retention applies after destroy too). */
int store_sandbox_list_automatic(struct store *s, struct sandbox **ret, size_t *ret_n);
/* An account's sandboxes in every live state (not failed or destroyed), oldest first, at most max. */
/* Live sandboxes whose end (expires_at) is now or past, the earliest first, at most max. */
int store_sandbox_list_expired(struct store *s, int64_t now_ms, int64_t max, struct sandbox **ret, size_t *ret_n);
int store_sandbox_list_live(struct store *s, const char *account_id, int64_t max, struct sandbox **ret, size_t *ret_n);
void sandbox_array_free(struct sandbox *a, size_t n);
int store_sandbox_count_by_status(struct store *s, int64_t counts[_SB_STATUS_MAX]);

int store_volume_insert_capped(struct store *s, const struct volume *v, int64_t max_volumes);
int store_volume_get(struct store *s, const char *id, struct volume *ret);
/* As store_volume_get, but -ENOENT also when the volume is another account's. */
int store_volume_get_owned(struct store *s, const char *account_id, const char *id, struct volume *ret);
/* The account's volume of that name (names are unique per account), or -ENOENT. */
int store_volume_get_named(struct store *s, const char *account_id, const char *name, struct volume *ret);
int store_volume_update(struct store *s, const struct volume *v);
/* Deletes the row of a detached volume: -EBUSY when attached. */
int store_volume_delete(struct store *s, const char *id);
/* Step one of deleting a volume, BEFORE its backend volume is removed: in one statement, check
 * that it is detached (or attached to owner_sandbox_id, NULL = to none) and not already being
 * deleted, then detach it and mark it deleting, so that no sandbox can attach it any more.
 * -ENOENT no such volume, -EBUSY attached to a(nother) sandbox, -EALREADY already being deleted.
 * Then remove the backend volume and store_volume_delete(), or store_volume_abort_delete()
 * when the removal failed. */
int store_volume_begin_delete(struct store *s, const char *id, const char *owner_sandbox_id);
/* Clears the deleting mark (id NULL: of every volume, for a restart after a crash mid-delete). */
int store_volume_abort_delete(struct store *s, const char *id);
int store_volume_list(struct store *s, const char *account_id, int64_t offset, int64_t limit,
                      struct volume **ret, size_t *ret_n, int64_t *ret_total);
void volume_array_free(struct volume *a, size_t n);
/* Attach if detached: -EBUSY when attached to another sandbox, -ENOENT when there is no such
 * volume or it is being deleted. */
int store_volume_attach(struct store *s, const char *vol_id, const char *sandbox_id, const char *mount_path, int64_t now);
int store_volume_detach_sandbox(struct store *s, const char *sandbox_id, int64_t now);

/* Usage metering: period is "YYYY-MM". */
/* The spending period of a timestamp (ms), as usage rows are keyed: "YYYY-MM" in UTC. */
void store_usage_period(int64_t ms, char out[8]);
int store_usage_add(struct store *s, const char *account_id, const char *period, double cpu_mhz_s, double mb_s, double cost);
int store_usage_get(struct store *s, const char *account_id, const char *period, double *ret_cost);

int store_stats_add(struct store *s, const char *sandbox_id, int64_t ts_ms, double cpu_pct, double mem_pct, double net_bps);
int store_stats_prune(struct store *s, int64_t older_than_ms);
struct stats_sample { int64_t ts_ms; double cpu_pct, mem_pct, net_bps; };
int store_stats_range(struct store *s, const char *sandbox_id, int64_t since_ms, struct stats_sample **ret, size_t *ret_n);

/* Nodes (admin node drain/list). An agent's contact (node.sync, a ping answered) updates
 * last_contact_at; a drained node takes no new sandboxes. Rows are created on first use. */
struct node_info {
        char id[129];
        bool drained;
        int64_t drained_at, last_contact_at;   /* ms since the epoch; 0 = never */
        int64_t live_sandboxes;                /* starting, ready, pausing or resuming there */
};
int store_node_touch(struct store *s, const char *id, int64_t now);
int store_node_set_drained(struct store *s, const char *id, bool drained, int64_t now);
/* 1 drained, 0 not (or unknown), < 0 error. */
int store_node_drained(struct store *s, const char *id);
/* Every node in the table or with a live sandbox, by id; *ret is freed with free(). */
int store_node_list(struct store *s, struct node_info **ret, size_t *ret_n);
/* Warm pool members (pool.c has the lifecycle; the rows live here). */
struct pool_member {
        char id[SANDBOX_ID_LEN + 1];    /* the sandbox id it will have once claimed */
        char *pool, *image;
        char *state;                    /* "starting" (workload being made) or "ready" */
        int64_t created_at;             /* ms since the epoch */
        char *container_id, *node_id, *job_id, *alloc_id, *ip;   /* its placement, once ready */
};
void pool_member_clear(struct pool_member *m);
void pool_member_array_free(struct pool_member *a, size_t n);
int store_pool_insert(struct store *s, const struct pool_member *m);
int store_pool_update(struct store *s, const struct pool_member *m);      /* -ENOENT: gone */
int store_pool_delete(struct store *s, const char *id);                   /* -ENOENT: gone (claimed) */
int store_pool_get(struct store *s, const char *id, struct pool_member *ret);
int store_pool_list(struct store *s, const char *pool, struct pool_member **ret, size_t *ret_n);   /* pool NULL: all */
/* The claim, one transaction: within account sb->account_id's max_concurrent (-EDQUOT), the
 * oldest ready member of pool made from image is deleted and sb inserted with its id and
 * placement. -ENOENT: none ready. */
int store_pool_claim(struct store *s, const char *pool, const char *image, struct sandbox *sb, int64_t max_concurrent);
/* Snapshots (snapshot.c has the lifecycle; the rows live here). */
enum snap_status { SNAP_CREATING, SNAP_READY, SNAP_FAILED, _SNAP_STATUS_MAX };
const char *snap_status_str(enum snap_status s);
enum snap_status snap_status_from_str(const char *t);   /* unknown -> SNAP_FAILED */
struct snapshot {
        char id[SANDBOX_ID_LEN + 1];
        char account_id[SANDBOX_ID_LEN + 1];
        char sandbox_id[SANDBOX_ID_LEN + 1];
        char *name, *image_tag, *source_template, *node_id, *digest, *failure_reason;
        enum snap_status status;
        bool automatic;
        int64_t size_bytes;              /* -1 = unknown */
        int64_t created_at, finished_at; /* ms; 0 = null */
};
void snapshot_clear(struct snapshot *s);
void snapshot_array_free(struct snapshot *a, size_t n);
int store_snapshot_insert(struct store *s, const struct snapshot *sn);
/* The same within the account's plan, checked and inserted in one transaction (concurrent
 * requests cannot both take the last place): -EDQUOT with *ret_which = the cap in the way. */
struct snapshot_caps {
        int64_t max_manual, max_inflight, max_total_bytes;
};
enum { SNAPSHOT_CAP_MANUAL = 1, SNAPSHOT_CAP_INFLIGHT, SNAPSHOT_CAP_BYTES };
int store_snapshot_insert_capped(struct store *s, const struct snapshot *sn, const struct snapshot_caps *caps,
                                 int *ret_which);
int store_snapshot_get(struct store *s, const char *id, struct snapshot *ret);
/* creating -> ready|failed; -ESTALE when it is no longer creating, -ENOENT when gone. */
int store_snapshot_finish(struct store *s, const char *id, enum snap_status to, const char *digest, int64_t size_bytes,
                          const char *failure_reason, int64_t now);
int store_snapshot_delete(struct store *s, const char *id);
/* Page of an account's snapshots (sandbox_id NULL = all its sandboxes), newest first. */
int store_snapshot_list(struct store *s, const char *account_id, const char *sandbox_id, int64_t offset, int64_t limit,
                        struct snapshot **ret, size_t *ret_n, int64_t *ret_total);
/* creating since before `before` (ms), all accounts. */
int store_snapshot_list_stuck(struct store *s, int64_t before, struct snapshot **ret, size_t *ret_n);
/* A sandbox's automatic snapshots that are not creating, newest first. */
/* How many snapshots of the sandbox are still being taken (status creating). */
int store_snapshot_count_creating(struct store *s, const char *sandbox_id, int64_t *ret);
int store_snapshot_list_auto(struct store *s, const char *sandbox_id, struct snapshot **ret, size_t *ret_n);

/* ---- typed sandbox data (sbtypes.c) ---- */
void sb_egress_done(struct sb_egress *e);
/* The environment a process of sb gets: sb's own variables (E2B's envVars) with req_env
 * ("K=V", NULL-terminated, may be NULL) layered over them, the request's winning. strv_free. */
char **sb_env_layer(const struct sandbox *sb, char *const *req_env);
/* Where a sandbox with egress rules finds its proxy CA: alone, and in its system bundle. */
#define SB_EGRESS_CA_FILE "/etc/paddock/egress-ca.pem"
#define SB_EGRESS_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
/* Maps of strings and their column text (a JSON object; NULL when empty). _from_text accepts
 * NULL and skips what is not a string; -EINVAL when text is not a JSON object. */
int sb_map_from_text(struct sb_map *m, const char *text);
char *sb_map_to_text(const struct sb_map *m);
/* The value of key, NULL when absent. */
const char *sb_map_get(const struct sb_map *m, const char *key);
/* A new JSON object of the map (empty when it is). */
cJSON *sb_map_to_json(const struct sb_map *m);
void sb_map_done(struct sb_map *m);
/* E2B's options and their column text ({"templateID": ..., "public": ...}; NULL when unset). */
int sb_e2b_from_text(struct sb_e2b *e, const char *text);
char *sb_e2b_to_text(const struct sb_e2b *e);
void sb_e2b_done(struct sb_e2b *e);
/* From a policy proto-json validated: each entry parsed once into its struct. -EINVAL
 * (and *dst untouched) if an entry does not parse. */
int sb_egress_from_pj(struct sb_egress *dst, const struct pj_egress *src);
/* Normalised text of an entry ("1.1.1.1", "10.0.0.0/8", "api.example.com"). */
void sb_allow_entry_format(const struct pj_allow_entry *e, char buf[PJ_ALLOW_NORM_MAX]);
/* The policy's allowlist as a JSON array of its entries, as written. */
cJSON *sb_allow_json(const struct sb_egress *e);
/* The store's column text: a JSON array of entries / an object of "<phase>_ms".
 * *_to_text return NULL when there is nothing to store ([] for no entries is the
 * caller's choice); *_from_text accept NULL and skip what they cannot parse. */
char *sb_egress_allow_to_text(const struct sb_egress *e);
void sb_egress_allow_from_text(struct sb_egress *e, const char *text);
void sb_timings_set(struct sb_timings *t, enum sb_phase p, int64_t ms);
const char *sb_phase_name(enum sb_phase p);   /* "validate_ms" ... */
char *sb_timings_to_text(const struct sb_timings *t);
/* {"<phase>_ms": n, ...} for the recorded phases (render.c puts it under "timings"). */
cJSON *sb_timings_to_json(const struct sb_timings *t);
void sb_timings_from_text(struct sb_timings *t, const char *text);

/* Snapshots named name (not being taken) whose sandbox is destroyed or failed, at most max. */
int store_snapshot_list_orphaned_pause(struct store *s, const char *name, int64_t max, struct snapshot **ret, size_t *ret_n);
