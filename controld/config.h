/* config.h — the configuration of a controld (config.c): plans, templates, pools, regions,
 * and every key of controld.conf with its default and limit. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "pj_api.h"
#include "registry.h"

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
        int64_t memory_kept_max_mb;     /* memory (their limits, MB) an account's sandboxes paused with it keep at most */
        int64_t memory_kept_max_age_s;  /* how long a sandbox paused with its memory keeps it; then the filesystem only */
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
        char *docker_runsc, *docker_runsc_root;      /* runsc run directly for checkpoints ("" = Docker's API) */
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
        /* [secrets]: values kept encrypted (AES-256-GCM) under the operator's key */
        char *secrets_key_file;                      /* "" = no secrets on this server (501) */
        int64_t secrets_max_per_account;
        uint64_t secrets_max_value;                  /* bytes of one value */
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

int config_load(const char *path, struct config **ret, struct err *err);
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
