/* controld.h — private header of the control daemon.
 *
 * controld owns accounts, keys, plans, the sandbox record and the public
 * API. It never touches a firewall or a host's Docker directly except
 * through a scheduler driver (driver.h).
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sqlite3.h>
#include <cjson/cJSON.h>

#include "registry.h"

#include "cleanup.h"
#include "pj_api.h"
#include "strutil.h"

#define CTL_NAME_MAX 64
#define SANDBOX_ID_LEN 24

/* ---- configuration (config.c) ---- */

struct plan {
        char *name;
        int64_t max_concurrent;         /* sandboxes not destroyed/failed */
        char **regions;                 /* region names allowed; NULL = all enabled */
        int64_t max_cpu, max_memory, max_disk;      /* MHz, MB, GB */
        int64_t max_volume_gb, max_volumes;
        double spending_limit;          /* currency units per billing month; 0 = none */
        double price_cpu_mhz_hour, price_mb_hour;
        int64_t max_lifetime_s;         /* hard cap on a sandbox's life */
        int64_t snapshot_max_count;     /* automatic snapshots kept per sandbox (oldest go first) */
        int64_t snapshot_max_age_s;     /* automatic snapshots older than this are deleted */
        int64_t snapshot_max_manual;    /* manual snapshots per account (creating + ready) */
        int64_t snapshot_max_inflight;  /* snapshots being taken at once per account */
        int64_t snapshot_max_total_gb;  /* registry bytes of an account's ready snapshots, GB */
};

struct template {
        char *name, *image, *display_name, *description;
        int64_t cpu, memory, disk;      /* default specs */
        char *language;                 /* "Python 3.12" (GET /sandbox/templates); NULL = none */
        char **tools;                   /* what else is in it, for the list; strv, may be empty */
        int64_t size_mb;                /* stated image size; 0 = ask the driver (Docker) */
        /* An executable in the image run (as root, no arguments, PADDOCK_DISK_GB and
         * PADDOCK_MEMORY_MB in its environment) before the sandbox is ready, on every start
         * (create, resume, restore, a pool member); it must exit 0 within start_timeout_s or the
         * start fails with its output. The docker template starts dockerd with it. NULL = none. */
        char *start;
        int64_t start_timeout_s;
};

/* [pool "<name>"]: sandboxes started ahead of time for one template, specs and egress class,
 * claimed whole by a matching create (pool.c). */
struct pool_conf {
        char *name;
        char *template_name;
        int64_t cpu, memory, disk;      /* exact specs a create must ask for (the template's by default) */
        bool networked;                 /* egress = networked (open/restricted creates) or deny_all */
        int64_t size;                   /* members kept ready */
        int64_t max_age_ms;             /* a member older than this is replaced */
        int64_t refill_per_min;         /* members started per minute at most */
};

struct region {
        char *key;                      /* the [region "key"] name */
        char *id;                       /* 24 hex */
        char *name, *country, *continent;
        bool enabled;
};

struct config {
        char *path;
        /* [server] */
        char *listen_addr;
        int listen_port;
        int64_t max_connections, per_ip_connections;
        uint64_t max_body, max_header, max_file;     /* bytes */
        uint64_t max_json_body;                      /* bytes; JSON routes other than exec, code, batch upload */
        uint64_t conn_timeout_s;
        uint64_t max_wait_s;                         /* cap on /wait timeout */
        uint64_t max_exec_output;                    /* per stream, bytes */
        int64_t max_exec_concurrent;                 /* per sandbox */
        int64_t max_runtime_per_account;             /* execs + file transfers at once, per account */
        uint64_t transfer_timeout_s;                 /* whole upload or download of one file */
        int64_t auth_failures_per_minute;            /* per source address; 0 = no limit */
        int64_t auth_failure_addresses;              /* addresses remembered at most */
        uint64_t stream_keepalive_ms;                /* SSE comment on quiet streams */
        char *log_level;
        char *metrics_token_file;                    /* "" = /metrics open to whoever reaches the port */
        char *web_dir;                               /* the terminal page's xterm.js; "" = found at start */
        /* [e2b]: E2B's API (e2b.c, envd.c). listen "" = off. */
        char *e2b_listen_addr;                       /* NULL = off */
        int e2b_listen_port;
        char *e2b_domain;                            /* sandboxes' domain: <port>-<id>.<domain>; "" = the listen address */
        char *e2b_base_template;                     /* what templateID "base" means */
        char **e2b_user_templates;                   /* templates with E2B's `user` (uid 1000, /home/user): the default user of their E2B sandboxes */
        int64_t e2b_max_connections;                 /* client connections at once */
        char *e2b_tls_cert, *e2b_tls_key;            /* PEM; "" = plain HTTP (TLS by the operator's proxy) */
        int64_t e2b_per_address;                     /* connections at once from one client address */
        uint64_t e2b_head_timeout_ms;                /* the first request head, from accept (TLS included) */
        /* [preview]: preview URLs (preview.c). listen "" = off. */
        char *preview_listen_addr;                   /* NULL = previews off */
        int preview_listen_port;
        char *preview_domain;                        /* <port>-<id>.<domain>[:port]; "" = localhost:<listen port> */
        char *preview_scheme;                        /* of URLs under domain: "https" (the operator's proxy) */
        char *preview_public_url;                    /* "" = http://<listen>: base of path-form URLs */
        bool preview_path_form;                      /* opt-in, warned: /p/<id>/<port>/, one origin for all */
        int64_t preview_per_address;                 /* connections at once from one client address */
        uint64_t preview_head_timeout_ms;            /* the request head, from accept */
        int64_t preview_max_connections;             /* proxied connections at once, all sandboxes */
        int64_t preview_per_sandbox;                 /* proxied connections at once, per sandbox */
        int64_t preview_max_per_sandbox;             /* previews (ports) per sandbox */
        uint64_t preview_max_header;                 /* request head, bytes */
        uint64_t preview_idle_timeout_s;             /* no byte either way this long: closed */
        uint64_t preview_default_expiry_s, preview_max_expiry_s;
        /* [store] */
        char *db_path;
        /* [scheduler] */
        char *driver;                                /* "docker" | "nomad" */
        uint64_t create_timeout_s;
        uint64_t stats_interval_s, stats_retention_s;
        uint64_t reap_interval_s, stuck_starting_s, paused_max_s;
        uint64_t pause_wait_s;                       /* pause answers once paused, or after this */
        /* [docker] */
        char *docker_socket, *docker_runtime, *docker_runtime_net;
        char *docker_network, *docker_subnet, *docker_gateway;     /* open egress */
        char *docker_network_internal, *docker_subnet_internal;     /* restricted, until an agent confirms */
        int64_t docker_pids_limit;
        int64_t docker_cpu_burst;                    /* % of the CFS quota a sandbox may bank for bursts; 0 = none */
        char *docker_volume_root;                    /* "" = volumes uncapped */
        char *docker_node_id;                        /* this engine's node: the routing key of its agent */
        char *docker_bridge;                         /* Linux name of the open network's bridge (the agent's egress bridge) */
        /* [init]: the in-sandbox agent (agent.c) */
        char *init_binary;                           /* "" = found at start; "none" = no agent */
        char *init_dir;                              /* "" = <store dir>/agents */
        /* [amqp]: the node bus. amqp_url NULL = no agent: egress policies are stored, not enforced */
        char *amqp_url, *amqp_exchange;
        char *amqp_node_login;           /* "" = unchecked; else each node's broker login, {node} = its id */
        char *amqp_login;                /* the user of amqp_url (NULL without one): our messages' user_id */
        uint64_t egress_timeout_ms;                  /* bound on one egress.apply/remove round trip */
        bool docker_allow_unsandboxed;               /* tests only: accept runtimes that are not gVisor */
        /* [snapshots]: the registry the node agents push to (same values as their [snapshot]) */
        char *snap_registry, *snap_repository;       /* "127.0.0.1:5000", "paddock/snapshots" */
        char *snap_username, *snap_password;         /* NULL = anonymous; never logged */
        char *run_user;                              /* [controld] user: who the network-facing process runs as when started as root ("" = stays root) */
        uint64_t snap_timeout_s;                     /* creating longer than this -> failed */
        uint64_t snap_tick_ms;                       /* schedule, retention and deadline checks */
        /* [templates]: templates users build (usertemplate.c), pushed to the snapshot registry */
        char *utpl_builder;                          /* the template builds run in ("docker") */
        char *utpl_repository;                       /* "paddock/templates" (+ "/<account>-<name>") */
        uint64_t utpl_build_timeout_s;               /* a whole build, upload included */
        uint64_t utpl_max_context;                   /* bytes: Dockerfile + files */
        uint64_t utpl_max_image;                     /* bytes: the image's compressed layers + config */
        int64_t utpl_max_per_account;                /* building + ready */
        int64_t utpl_max_builds;                     /* builds at once in one controld */
        /* [nomad]: the production driver (driver-nomad.c) */
        char *nomad_addr, *nomad_token;              /* token "" = no ACL token (never logged) */
        char *nomad_ca_file, *nomad_cert_file, *nomad_key_file;   /* "" = system CAs / no client cert */
        char *nomad_namespace, *nomad_node_pool, *nomad_region;
        char **nomad_datacenters;
        char *nomad_cni_open, *nomad_cni_restricted, *nomad_cni_no_egress;   /* CNI network names per egress mode */
        char *nomad_runtime, *nomad_runtime_net;     /* Docker runtimes: deny_all / with a CNI network */
        int64_t nomad_pids_limit;
        char *nomad_csi_plugin_id;                   /* "" = no persistent volumes */
        /* The in-sandbox agent on Nomad: the binary's path on the nodes, the deployment secret
         * of the nodes' relays ("" = no agent on Nomad: tail -f and alloc exec) and their port. */
        char *nomad_agent_binary, *nomad_relay_secret_file;
        char *nomad_relay_tls_ca;                    /* "" = plain TCP to the relays; else verify them */
        int64_t nomad_relay_port;
        uint64_t nomad_request_timeout_ms;           /* one plain HTTP request */
        uint64_t nomad_placement_timeout_ms;         /* register -> allocation running */
        uint64_t nomad_blocking_wait_ms;             /* `wait` of one blocking query */
        /* [defaults] */
        char *default_template, *default_region, *default_plan;
        int64_t default_lifetime_s;
        struct plan *plans; size_t n_plans;
        struct template *templates; size_t n_templates;
        struct pool_conf *pools; size_t n_pools;
        struct region *regions; size_t n_regions;
};

int config_load(const char *path, struct config **ret, char *err, size_t errlen);
struct config *config_free(struct config *c);
const struct plan *config_plan(const struct config *c, const char *name);
/* The snapshot registry and its credentials ([snapshots]); the strings are the config's. */
struct registry config_snapshot_registry(const struct config *c);
/* Region g is one the plan lists (by key, name or id), or the plan lists none. */
bool config_plan_allows_region(const struct plan *p, const struct region *g);

/* The plan amounts an operator may also set for one account (`controld admin account limits`):
 * their config key (also the accounts column), default, range, and place in struct plan. */
enum plan_limit {
        PLAN_MAX_CONCURRENT, PLAN_MAX_CPU, PLAN_MAX_MEMORY, PLAN_MAX_DISK, PLAN_MAX_VOLUME_GB, PLAN_MAX_VOLUMES,
        _PLAN_LIMIT_MAX,
};
struct plan_limit_info {
        const char *key;
        int64_t def, min, max;
        size_t offset;                  /* of its int64_t in struct plan */
};
extern const struct plan_limit_info config_plan_limits[_PLAN_LIMIT_MAX];
int config_plan_limit_from_key(const char *key);   /* enum plan_limit, or -EINVAL */
int64_t *config_plan_limit(struct plan *p, enum plan_limit k);
struct account;
/* acc's plan with the account's own limits applied, built in *buf (it shares the plan's strings);
 * NULL when acc's plan is not configured. */
const struct plan *config_account_plan(const struct config *c, const struct account *acc, struct plan *buf);
const struct template *config_template(const struct config *c, const char *name);
/* By key, by name or by 24-hex id. */
const struct region *config_region(const struct config *c, const char *key_or_id);

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
};

/* Provisioning phase durations, as rendered under "timings" (<phase>_ms). */
enum sb_phase { SB_PHASE_VALIDATE, SB_PHASE_RECORD, SB_PHASE_PLACE, SB_PHASE_TOTAL, SB_PHASE_RESUME, SB_PHASE_CLAIM, _SB_PHASE_MAX };
struct sb_timings {
        int64_t ms[_SB_PHASE_MAX];
        unsigned set;                    /* bit (1 << phase) per recorded phase */
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
        bool one_shot;
        struct sb_egress egress;
        bool persistent; int64_t persistent_disk_gb;
        char *volume_id, *mount_path, *from_snapshot;
        char *snapshot_mode, *snapshot_frequency;
        int64_t created_at, last_activity_at, expires_at, paused_at, destroyed_at;   /* ms; 0 = null */
        char *destroy_reason, *failure_reason;
        char *driver, *job_id, *alloc_id, *node_id, *container_id, *ip;
        struct sb_timings timings;
        /* JSON objects of strings, NULL when none: metadata (E2B's, filterable) and variables
         * layered under every process's own environment (E2B's envVars) */
        char *metadata, *env;
        char *e2b;                       /* E2B's options for it (e2b.c), JSON; NULL: made through the Brimble API */
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

/* usertemplate.c: what sandbox create, the drivers and the start ask of templates users build. */
struct ctl;
/* 1..40 characters of a-z, 0-9 and '-', not starting or ending with '-'. */
bool utpl_name_ok(const char *s);
/* The account's ready template name as a struct template (its strings point into *row, which
 * the caller clears after). -ENOENT: no such template of this account; -EBUSY: not ready. */
int utpl_template_for(struct ctl *c, const struct account *acc, const char *name, struct template *ret,
                      struct user_template *row);
/* Whether image is one of the templates users built (in the registry, pulled on first use). */
bool utpl_image(const struct config *cfg, const char *image);
/* At start: builds a stopped controld left are failed, their sandboxes destroyed. */
void utpl_recover(struct ctl *c);

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
/* ---- warm pools (pool.c) ---- */
enum pool_miss {
        POOL_MISS_NONE,         /* a hit: the create can claim a member of the pool matched */
        POOL_MISS_NO_POOL,      /* no pool holds this template, these specs and egress class */
        POOL_MISS_VOLUME,       /* volumeId or persistent */
        POOL_MISS_SNAPSHOT,     /* fromSnapshot */
        POOL_MISS_ONE_SHOT,
        POOL_MISS_NO_AGENT,     /* restricted egress without node agents (another network) */
        POOL_MISS_EMPTY,        /* the pool had no ready member */
        _POOL_MISS_MAX
};
struct pj_sandbox_create;
struct ctl;
struct strbuf;
/* The pool that holds a create's kind (NULL: none, *miss = NO_POOL). *miss = NONE when the
 * create may claim from it, else why it may not (it asks for what no member can give). */
const struct pool_conf *pool_match(const struct ctl *c, const struct template *tpl, int64_t cpu, int64_t memory, int64_t disk,
                                   const struct pj_sandbox_create *in, enum pool_miss *miss);
/* Counts a create's outcome: a hit (miss = NONE) or a miss and why, on pool p (NULL: none matched).
 * A hit also holds the pool's refill back for a moment (pool.c, POOL_CLAIM_QUIET_MS). */
void pool_note(const struct ctl *c, const struct pool_conf *p, enum pool_miss miss);
const char *pool_miss_name(enum pool_miss m);
void pool_start(struct ctl *c);         /* before serving: heals what a stop left, then serves */
void pool_tick(struct ctl *c);          /* background thread: retire and refill */
bool pool_owns(struct ctl *c, const char *id);
void pool_metrics_render(struct ctl *c, struct strbuf *b);
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
/* Runs fn(ctx) on a detached thread counted in jobs_running (drained at exit). */
int ctl_spawn_job(struct ctl *c, void (*fn)(struct ctl *c, void *arg), void *arg_owned);

/* ---- sandbox lifecycle (sandbox.c) ---- */

/* Domain functions (sandbox_*, volume_*) return a negative errno and put a
 * user-facing message (what was wrong, what to do) here. http.c maps the errno to
 * an HTTP status in one table (http_status_from_errno):
 *   -EINVAL bad input, -EBUSY wrong state or in use, -EEXIST name taken,
 *   -EPERM not allowed for the plan/region, -EDQUOT over a plan limit,
 *   -ENOENT not found (or not the caller's), -ESTALE changed meanwhile,
 *   -EIO the store failed, -EHOSTUNREACH the scheduler/driver failed,
 *   -EAGAIN shutting down or busy (retry), -EOPNOTSUPP not available here. */
struct api_error {
        char message[512];
};
#define API_ERR(e, err, ...) ({ snprintf((e)->message, sizeof((e)->message), __VA_ARGS__); (int) (err); })

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

/* Each returns 0 or a negative errno with err->message set (see struct api_error). */
int sandbox_create(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in,
                   struct sandbox *ret, struct api_error *err);
/* ctl.c: the API's answer to loading one of the caller's records by id, given what a
 * store_*_get_owned() returned: 0, -ENOENT (none, or another account's) or -EIO, with the
 * message naming the record `what` ("sandbox", "volume"). */
int record_load_result(int r, const char *what, struct api_error *err);
/* ctl.c: loads a sandbox owned by acc (-ENOENT for others'). */
int sandbox_load(struct ctl *c, const struct account *acc, const char *id, struct sandbox *ret, struct api_error *err);
int sandbox_destroy(struct ctl *c, const char *id, const char *reason, struct api_error *err);
/* keep_memory: pause with the processes and memory (a checkpoint; local driver, deny_all
 * sandboxes), -EINVAL/-EOPNOTSUPP naming why not. */
int sandbox_pause(struct ctl *c, const struct sandbox *sb, bool keep_memory, struct api_error *err);
/* *ret_note (when not NULL; caller frees): set when the resume lost the memory the pause kept,
 * saying why (the sandbox was started afresh from its filesystem). */
int sandbox_resume(struct ctl *c, const struct sandbox *sb, char **ret_note, struct api_error *err);
/* A sandbox paused with its memory: 0 with its checkpoint's name and size, -ENOENT when none. */
int sandbox_memory_kept(struct ctl *c, const char *id, char **ret_checkpoint, int64_t *ret_bytes);
void sandbox_memory_forget(struct ctl *c, const char *id);
/* Sets the journal context of this thread for sb: SANDBOX_ID, and NODE_ID, NOMAD_JOB_ID,
 * ALLOC_ID where it is placed (removed when not, so no earlier sandbox's values linger). */
void sandbox_log_ctx(const struct sandbox *sb);
/* PUT /sandboxes/{id}/egress: the sandbox must be ready; the node agent confirms the new
 * policy before it is recorded. On failure (-EHOSTUNREACH) the previous policy stays. */
int sandbox_set_egress(struct ctl *c, const struct account *acc, const char *id, const struct pj_egress *in,
                       struct sandbox *ret, bool *ret_network_updated, struct api_error *err);
int64_t destroy_timeout_seconds(const char *s);

/* ---- typed sandbox data (sbtypes.c) ---- */
void sb_egress_done(struct sb_egress *e);
/* The environment a process of sb gets: sb's own variables (E2B's envVars) with req_env
 * ("K=V", NULL-terminated, may be NULL) layered over them, the request's winning. strv_free. */
char **sb_env_layer(const struct sandbox *sb, char *const *req_env);
/* From a policy proto-json validated: each entry parsed once into its struct. -EINVAL
 * (and *dst untouched) if an entry does not parse. */
int sb_egress_from_pj(struct sb_egress *dst, const struct pj_egress *src);
/* Normalised text of an entry ("1.1.1.1", "10.0.0.0/8", "api.example.com"). */
void sb_allow_entry_format(const struct pj_allow_entry *e, char buf[PJ_ALLOW_NORM_MAX]);
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

/* ---- volumes (volume.c): 0 or a negative errno, as sandbox.c ---- */
int volume_create(struct ctl *c, const struct account *acc, const struct pj_volume_create *in, struct volume *ret,
                  struct api_error *err);
/* Records the new volume v under plan's caps (size, count), before any backend volume
 * exists: -EDQUOT, -EEXIST (its name is taken in the account) or -EIO. */
int volume_record(struct ctl *c, const struct plan *plan, const struct volume *v, struct api_error *err);
/* Loads a volume owned by acc (-ENOENT for others'). */
int volume_load(struct ctl *c, const struct account *acc, const char *id, struct volume *ret, struct api_error *err);
/* Refuses with -EBUSY while attached. */
int volume_delete(struct ctl *c, const struct account *acc, const char *id, struct api_error *err);

/* ---- JSON of API resources (render.c): new trees owned by the caller ---- */
struct stats_sample;
cJSON *sandbox_to_json(struct ctl *c, const struct sandbox *sb);
cJSON *sandbox_created_to_json(const struct sandbox *sb);
/* PUT /sandboxes/{id}/egress: the sandbox (egress, block_outbound, ...) and network_updated
 * (true when the mode changed, i.e. the node now enforces another network profile). */
cJSON *egress_update_to_json(struct ctl *c, const struct sandbox *sb, bool network_updated);
cJSON *volume_to_json(struct ctl *c, const struct volume *v);
cJSON *snapshot_to_json(const struct snapshot *sn);
cJSON *region_to_json(const struct region *r);
/* size_mb: the image's size (t->size_mb or the driver's answer), <= 0 = unknown (null). */
cJSON *template_to_json(const struct template *t, int64_t size_mb);

cJSON *stats_to_json(const struct sandbox *sb, const struct stats_sample *s, size_t n, int64_t since, int64_t hours);
/* Exec and code answers: the JSON result, and the last SSE frame of a stream. */
/* What an exec answer and its done frame say when the memory limit killed the command. */
#define OOM_MESSAGE                                                                                     \
        "Command was killed: the sandbox ran out of memory (its memory limit). Under gVisor this stops the " \
        "whole sandbox; create it with more specs.memory"
struct exec_result {
        const char *out, *err;           /* result only; may hold NUL bytes, NULL = empty */
        size_t out_len, err_len;
        int exit_code;
        int64_t duration_ms;
        bool out_truncated, err_truncated, timed_out, oom_killed;
};
cJSON *exec_result_to_json(const struct exec_result *x);
cJSON *exec_done_frame_to_json(const struct exec_result *x);
/* The other SSE frames: {"type":"stdout"|"stderr","data":...} and {"type":"error","message":...}. */
cJSON *exec_output_frame_to_json(const char *type, const char *data, size_t len);
cJSON *exec_error_frame_to_json(const char *message);
/* Batch upload: one file's outcome (error NULL = success), and the summary (results consumed). */
cJSON *batch_file_to_json(const char *path, size_t bytes, const char *error);
cJSON *batch_summary_to_json(int uploaded, int failed, cJSON *results);
/* GET /healthz. */
cJSON *health_to_json(bool ok, const char *driver);
/* {data: items (consumed), totalCount, currentPage, totalPages, limit}. */
cJSON *render_page(cJSON *items, int64_t total, int64_t page, int64_t limit);
/* "region": {...} or null; "k": RFC 3339 or null when ms == 0. */
void render_add_region(cJSON *o, const struct region *g);
void render_add_time(cJSON *o, const char *k, int64_t ms);

/* ---- HTTP server (http.c; the route table is in api.c, see http.h) ---- */
struct http_server;
/* http_start is declared in http.h, beside the router type it takes. */
struct http_server *http_stop(struct http_server *h);
/* Actual bound port (for listen = ...:0). */
int http_port(struct http_server *h);

/* ---- metrics (metrics.c) ---- */
struct metrics *metrics_new(void);
struct metrics *metrics_free(struct metrics *m);
void metrics_observe_request(struct metrics *m, const char *route, const char *method, int status, double seconds);
void metrics_observe_phase(struct metrics *m, const char *phase, double seconds);
struct strbuf;
/* Appends controld's own series (requests, phases, sandboxes by status) to out. */
void metrics_render(struct ctl *c, struct strbuf *out);
/* Another part's series, rendered after ours (main.c wires them: metrics.c calls no one). */
void metrics_add_source(struct metrics *m, void (*render)(struct strbuf *out));

/* ---- admin CLI (admin.c) ---- */
int admin_main(int argc, char **argv);

/* ---- reapers and background work (background.c) ---- */
/* Heals what a crash left (transient statuses, interrupted volume deletes) synchronously, then
 * starts the periodic thread: call before serving requests. */
int background_start(struct ctl *c);
void background_stop(struct ctl *c);
/* One reaper decision for sandbox id at time now (ms), made afresh under the sandbox lock from
 * the record as it is (never from a list read earlier): removes the workload, then moves the
 * record to destroyed by compare-and-set from the status it decided on. Returns 1 destroyed,
 * 0 nothing to reap or a concurrent pause/resume won, -errno on failure (nothing recorded). */
/* runtime.c: execs and file transfers in flight on a sandbox right now. */
int64_t runtime_active(const char *sandbox_id);

/* ---- the runtime core (runtime.c): commands and files in a sandbox, no HTTP ----
 * Every call returns 0 or -errno with the user's message in err; a protocol adapter
 * (api-runtime.c for the Brimble API) turns that into its answer. A run holds one slot of
 * its sandbox ([server] max_exec_concurrent) and one of its account (max_runtime_per_account)
 * until runtime_free; -EUSERS when either is full. */
struct runtime_run;
struct runtime_cmd {
        const char *const *argv;        /* the user's command (argv[0] looked up in the sandbox's PATH) */
        char **env;                     /* "K=V" for argv only, NULL-terminated; NULL = none */
        const char *cwd;                /* NULL = "/" */
        int timeout_s;                  /* the whole run; then the process tree is killed (exit 137) */
        const char *token;              /* names its pid record and snippet file; NULL = a fresh one */
        const char *stdin_file;         /* stdin_data goes into this file before argv runs (a snippet) */
        const char *stdin_data;         /* NULL = no input */
        size_t stdin_len;
};
/* A streamed run's output as it comes: valid UTF-8, never empty; stream 1 stdout, 2 stderr.
 * Returning < 0 says the caller takes no more: the run is stopped. */
typedef int (*runtime_output_fn)(void *ud, int stream, const char *text, size_t len);
enum runtime_step { RUNTIME_RUNNING, RUNTIME_EXITED, RUNTIME_FAILED, RUNTIME_CLIENT_GONE };

/* The caller's sandbox id, ready (else -EBUSY saying its status); stamps its activity. */
int runtime_load_ready(struct ctl *c, const struct account *acc, const char *id, struct sandbox *ret,
                       struct api_error *err);
/* Starts cmd in sb (moved into the run, cleared here) and writes its input. output NULL:
 * output is kept for runtime_wait (up to [server] max_exec_output per stream); else each
 * chunk goes to output(ud, ...) and runtime_step drives the run. */
int runtime_start(struct ctl *c, struct sandbox *sb, const struct runtime_cmd *cmd, runtime_output_fn output, void *ud,
                  struct runtime_run **ret, struct api_error *err);
/* output refused more while the input was written: the run was stopped at start. */
bool runtime_output_refused(const struct runtime_run *x);
/* A buffered run to its end (or its deadline); ret points into the run until runtime_free. */
int runtime_wait(struct runtime_run *x, struct exec_result *ret, struct api_error *err);
/* A streamed run: waits up to max_wait_ms for output, the end or client_fd hanging up (-1 =
 * none). RUNTIME_EXITED fills ret; RUNTIME_FAILED says why in msg; the run is killed then
 * and on RUNTIME_CLIENT_GONE. */
enum runtime_step runtime_step(struct runtime_run *x, int max_wait_ms, int client_fd, struct exec_result *ret,
                               char *msg, size_t msglen);
void runtime_kill(struct runtime_run *x);
/* The process ended, or was killed. */
bool runtime_ended(const struct runtime_run *x);
/* Kills what still runs, releases the slots. Accepts NULL; returns NULL. */
struct runtime_run *runtime_free(struct runtime_run *x);
/* Files, under [server] transfer_timeout. A write: start, write (-EPIPE when the sandbox
 * stopped reading, -ETIMEDOUT past the deadline), finish (how the sandbox took it). */
int runtime_file_write_start(struct ctl *c, struct sandbox *sb, const char *path, struct runtime_run **ret,
                             struct api_error *err);
int runtime_file_write(struct runtime_run *x, const void *data, size_t len);
int runtime_file_write_finish(struct runtime_run *x, const char *path, struct api_error *err);
/* A read: open waits for the first bytes or the end (so a missing file is -ENOENT); when the
 * whole file came before the end, *ret_all holds it (valid until runtime_free). Then read
 * returns bytes, 0 at the end, < 0 on errors (client_fd hung up, deadline, shutdown). */
int runtime_file_read_open(struct ctl *c, struct sandbox *sb, const char *path, struct runtime_run **ret,
                           const void **ret_all, size_t *ret_all_len, struct api_error *err);
ssize_t runtime_file_read(struct runtime_run *x, int client_fd, char *buf, size_t max);
int background_reap_one(struct ctl *c, const char *id, int64_t now);

/* ---- a controld's parts, opened and closed (daemon.c) ---- */
int ctl_open(struct ctl *c, const char *conf_path, bool with_driver);
void ctl_close(struct ctl *c);
/* ctl.c: a struct ctl's locks and conditions, nothing else opened. */
void ctl_init(struct ctl *c);

/* ---- egress enforcement through the node agents (egress.c) ---- */
struct strbuf;
/* true when an [amqp] url is configured: policies other than deny_all need an agent's word. */
bool ctl_egress_enforced(const struct ctl *c);
/* -EINVAL with a message naming the entry when an allowlist entry overlaps the always-deny set. */
int ctl_egress_check_allow(const struct sb_egress *e, struct api_error *err);
/* Asks sb's node agent to enforce pol (NULL = sb->egress) for sb->ip and waits for its
 * confirmation (at most [amqp] egress_timeout). 0 when confirmed, or when there is nothing to
 * confirm (deny_all, no node bus). Else a negative errno, err says why (-ENXIO no agent for
 * the node, -ETIMEDOUT no answer in time, -EREMOTEIO the agent refused, ...). On success for
 * restricted policies the names the agent resolved are written into the sandbox's /etc/hosts. */
/* The image a restore of sn runs: repo@digest when the snapshot's digest is known (a tag
 * overwritten in the registry cannot swap the tenant's image), else its tag. xmalloc'd. */
char *snapshot_image_ref(const struct snapshot *sn);
/* The gVisor network mode networked sandboxes run with (network.c): "sandbox" (runsc's own
 * netstack) or "host" (socket calls handled by the host kernel: a wider attack surface).
 * sandbox_network_note records what the local driver read from its runtime (node NULL) or
 * what a node's agent reported with node.sync; a "host" is logged loudly, once per node.
 * sandbox_network_json: {"mode": "sandbox"|"host"|"mixed"|"unknown", "host_nodes": [...]}
 * for /healthz ("mixed": some nodes run host mode). At most NETWORK_NODES_MAX nodes are
 * remembered; host_nodes lists at most 64. */
#define NETWORK_NODES_MAX 4096
void sandbox_network_note(const char *node, const char *mode);
struct cJSON *sandbox_network_json(void);
int ctl_egress_apply(struct ctl *c, const struct sandbox *sb, const struct sb_egress *pol, char *err, size_t errlen);
/* sandbox.c: runs sb's template's `start` (if it has one) in the placed sandbox and waits for
 * it; 0 when it exited 0, else -EIO with why (its output's end) in reason. */
int template_start(struct ctl *c, const struct sandbox *sb, char *reason, size_t reasonlen);
/* On a job thread: every ready sandbox's recorded policy applied again (called once at start). */
void ctl_egress_resync_all(struct ctl *c);
/* The sandbox's /etc/hosts for the names an apply resolved, into out (initialised here; the
 * caller frees it with strbuf_done). Every list a valid policy can produce fits whole: at most
 * ctl_egress_hosts_max() bytes (50 names x 32 addresses of the longest name, ~424 KiB). A list
 * that would not fit is refused (-E2BIG, err says why), never cut. */
struct pj_node_resolved;
struct strbuf;
int ctl_egress_hosts_render(const struct pj_node_resolved *res, size_t n, struct strbuf *out, char *err, size_t errlen);
size_t ctl_egress_hosts_max(void);
/* Asks the agent to drop sb's rules (best effort; failures are logged and returned). */
int ctl_egress_remove(struct ctl *c, const struct sandbox *sb, char *err, size_t errlen);
int ctl_egress_remove_timeout(struct ctl *c, const struct sandbox *sb, long timeout_ms, char *err, size_t errlen);
/* The body of GET /sandboxes/{id}/egress. */
cJSON *ctl_egress_to_json(struct ctl *c, const struct sandbox *sb);
void ctl_egress_metrics_render(struct strbuf *b);
/* node.sync responder: consumes the controld queue of the node bus exchange (no-op without a bus). */
int ctl_egress_sync_start(struct ctl *c, char *err, size_t errlen);
void ctl_egress_sync_stop(struct ctl *c);

/* ---- snapshots (snapshot.c) ---- */
struct snapbus;
/* Starts the events consumer and the schedule/retention/deadline thread. Without [amqp]
 * url there is no agent to take snapshots: 0, and snapshot requests answer 501. */
int ctl_snapshot_start(struct ctl *c, char *err, size_t errlen);
void ctl_snapshot_stop(struct ctl *c);
/* POST /sandboxes/{id}/snapshots: the caller's ready sandbox; records `creating` and hands
 * the job to the sandbox's node agent. */
int snapshot_create(struct ctl *c, const struct account *acc, const char *sandbox_id, const char *name, bool automatic,
                    struct snapshot *ret, struct api_error *err);
/* Loads a snapshot owned by acc (-ENOENT for others'). */
int snapshot_load(struct ctl *c, const struct account *acc, const char *id, struct snapshot *ret, struct api_error *err);
/* Deletes the registry manifest, then the record. -EBUSY while creating. */
int snapshot_delete(struct ctl *c, const struct account *acc, const char *id, struct api_error *err);
/* Snapshots named name (not being taken) whose sandbox is destroyed or failed, at most max. */
int store_snapshot_list_orphaned_pause(struct store *s, const char *name, int64_t max, struct snapshot **ret, size_t *ret_n);
/* The name of the snapshots E2B's pause takes (the filesystem a resume starts from). */
#define SNAPSHOT_E2B_PAUSE "e2b-pause"
/* Deletes the E2B pause snapshots of a sandbox that is gone (registry image and record): nothing
 * else refers to them. What fails now, the snapshot tick retries. */
void snapshot_drop_pause_images(struct ctl *c, const char *account_id, const char *sandbox_id);
/* Applies one agent event (JSON body, node = the publisher's app_id). For tests. 0 or -errno. */
int snapshot_apply_event(struct ctl *c, const char *node, const char *body, size_t len);
