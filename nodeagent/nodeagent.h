/* nodeagent.h — private header of the per-host agent. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "amqp.h"
#include "egress.h"
#include "err.h"

struct agent_config {
        char *node_id;        /* routing key of this node's queue (the Nomad node ID in production) */
        char *log_level;
        char *runtime_network;  /* the Docker runtime of networked sandboxes here ([agent] runtime_network):
                                 * its gVisor network mode is reported to controld with node.sync */
        char *amqp_url;
        char *exchange;       /* direct exchange shared with controld */
        char *controld_login; /* [amqp] controld_login: the broker user whose messages are commands; "" = any */
        int64_t prefetch;
        /* [proxy]: the egress proxy (proxy.c, in a process of its own) */
        bool proxy_enabled;
        int64_t proxy_port;
        char *proxy_ca_file;          /* upstream trust; "" = the system store */
        int64_t proxy_max_per_sandbox, proxy_max_conns;
        /* [egress] */
        bool egress_enabled;
        char *egress_table;
        char **egress_bridges;        /* NULL-terminated */
        char **egress_deny;           /* NULL-terminated CIDRs */
        char *egress_dns;             /* resolver IPv4 or NULL */
        int64_t egress_priority;
        /* [metrics] */
        char *metrics_listen;         /* loopback ADDRESS:PORT for /metrics, NULL = not served */
        uint64_t egress_resolve_timeout_ms;     /* bound on resolving one policy's names */
        uint64_t egress_resolve_interval_ms;    /* names re-resolved this often */
        /* [snapshot]: where the docker process pushes committed sandboxes */
        char *snap_registry;          /* "host:port" */
        char *snap_repository;        /* "paddock/snapshots" */
        char *snap_username, *snap_password;   /* NULL = anonymous; never logged */
        char *snap_docker_socket;
        char *snap_docker_root;       /* the filesystem whose free space is checked; NULL = Docker's data root */
        uint64_t snap_disk_floor;     /* bytes: refuse to commit below this much free */
        uint64_t snap_prune_interval_ms;
        uint64_t snap_timeout_ms;     /* bound on one commit or push */
        /* [nomad]: the local Nomad agent, asked for this node's id when node_id = nomad */
        char *nomad_addr, *nomad_token, *nomad_ca_file, *nomad_cert_file, *nomad_key_file;
        /* [relay]: controld's way to the in-sandbox agents of this node (relay.c); off when
         * listen is unset */
        char *relay_listen;           /* "IPv4:PORT" */
        char *relay_secret;           /* the deployment secret (from secret_file); never logged */
        size_t relay_secret_len;
        char *relay_docker_root;      /* Docker's data root: agent sockets are in its volumes */
        char *relay_tls_cert, *relay_tls_key;   /* PEM files; NULL = plain TCP */
        int64_t relay_max_conns;
};

/* relay.c, in the parent: listens on [relay] listen and serves each connection on a thread
 * of its own (at most max_connections): the handshake of pj_relay.h, the agent socket's fd
 * from the relay child, then bytes both ways through bounded buffers. 0 or -errno with err. */
int relay_start(const struct agent_config *cfg, struct err *err);
void relay_stop(void);
/* Connections being relayed now (metrics, tests). */
int relay_active(void);
/* A connect to an agent that is alive is immediate; this bounds a wedged one. */
#define RELAY_OPEN_MS 2000
/* relay-child.c, in the relay child: connects to the agent socket of sandbox_id (24 hex) under
 * [relay] docker_root without following a link at its place; the connected fd in *ret_fd,
 * or -errno with the reason in msg. */
int relay_open_agent(const struct agent_config *cfg, const char *sandbox_id, int *ret_fd, char *msg, size_t msglen);

/* snapshot.c */
/* Starts the snapshot worker thread: its own RabbitMQ connection consuming the node's durable
 * snapshot queue (one job at a time, acked after its outcome is published), crash leftovers
 * pruned before the first job and on a timer. 0 or -errno. */
int snapshot_start(const struct agent_config *cfg);
void snapshot_stop(void);
/* One snapshot.create body -> the event body to publish (xmalloc'd; NULL: not a job, drop it).
 * redelivered (AMQP's flag): an earlier attempt may have pushed already; the registry is
 * asked first and a manifest found there is the result. */
char *snapshot_handle(const struct agent_config *cfg, const char *body, size_t len, bool redelivered);

/* nomad-self.c: node_id = nomad. The client node id from GET /v1/agent/self
 * (stats.client.node_id) of the local agent at [nomad] address; -errno with err set. */
int nomad_self_node_id(const struct agent_config *cfg, char **ret, struct err *err);
/* The node id in an /v1/agent/self answer; -ENOENT when the agent runs no client. */
int nomad_self_parse(const char *body, size_t len, char **ret);
/* Replaces node_id = nomad with the id the local agent reports, retrying for up to
 * timeout_ms (the agent may start after us). 0 when there was nothing to do or it worked. */
int nomad_self_resolve_node_id(struct agent_config *cfg, long timeout_ms, struct err *err);

/* agent.c: starts the egress child, which programs the firewall from [egress];
 * returns its result (0, or its -errno with its reason in err). */
int agent_egress_init(const struct agent_config *cfg, struct err *err);

/* config.c: reads path ([snapshot] included); on failure -errno with "file: [section] key: ..."
 * in err and *ret zeroed. agent_config_done frees what it holds. */
int agent_config_load(const char *path, struct agent_config *ret, struct err *err);
void agent_config_done(struct agent_config *c);

/* agent.c: the one channel of the consumer's connection (reconcile.c publishes on it too). */
#define AGENT_CH 1
/* The reply (JSON text, xmalloc'd) for one message body. */
char *agent_handle(const struct agent_config *cfg, const char *body, size_t len);
/* proxystats.c — the egress proxy's counters.
 * agent_proxy_stats: one sandbox's, one per rule host (*ret: free()); none when the proxy has no
 *   rules of it. -EOPNOTSUPP without a proxy, -errno with err.
 * proxystats_note: names.c's word that the proxy now holds (or no longer holds) sandbox_id's rules.
 * proxystats_ids: those sandboxes (*ret: free()), for /metrics. */
struct pj_node_proxy_host;
int agent_proxy_stats(const char *sandbox_id, struct pj_node_proxy_host **ret, size_t *ret_n, struct err *err);
void proxystats_note(const char *sandbox_id, bool has_rules);
size_t proxystats_ids(char (**ret)[EGRESS_ID_LEN + 1]);
/* Connects, consumes until SIGTERM/SIGINT, reconnecting with backoff. */
int agent_run(const struct agent_config *cfg);

/* reconcile.c — node.sync (see there). All on the consumer thread.
 * reconcile_send: asks controld which sandboxes live here (after every (re)connect).
 * reconcile_tick: a timed-out ask is retried with backoff; a due retry is sent.
 * reconcile_on_reply: controld's answer on the reply queue; stale chains are removed.
 * reconcile_on_return: a node.sync came back unroutable.
 * reconcile_reply_queue_set: the reply queue of this connection (copied; the copy is returned).
 * reconcile_is_reply: dm was delivered to that reply queue.
 * reconcile_note_apply: an egress.apply for this sandbox arrived: while a node.sync is in flight,
 *   its answer (computed before) must not remove that sandbox's chain. */
void reconcile_send(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user);
void reconcile_tick(amqp_connection_state_t conn, const struct agent_config *cfg, const char *user);
void reconcile_on_reply(const struct agent_config *cfg, const struct amqpx_delivery *d, const char *body);
void reconcile_on_return(void);
amqp_bytes_t reconcile_reply_queue_set(amqp_bytes_t q);
bool reconcile_is_reply(const amqp_basic_deliver_t *dm);
void reconcile_note_apply(const char *sandbox_id);

/* privsep.c — privilege separation, the way OpenBSD's relayd and smtpd do it (privsep.c the
 * agent's side, privsep-child.c the child's: dropping privilege, checking messages).
 *
 * The parent (AMQP, JSON, name resolution) drops every capability after start-up.
 * Privileged work happens in children it forks first, each reached over its own
 * SOCK_SEQPACKET socketpair with fixed-size, versioned binary messages:
 *   egress child: only CAP_NET_ADMIN; owns egress.c (with nft.c, nft-build.c, conntrack.c); never parses
 *                 JSON or touches the network;
 *   docker child: privsep-docker.c; owns the Docker socket and the registry credentials (snapshots: commit,
 *                 push, verify, remove, prune); no capabilities.
 *   relay child:  only CAP_DAC_OVERRIDE (agent sockets live in Docker's root-only data root);
 *                 connects to a sandbox's agent socket and passes the connected fd back
 *                 (SCM_RIGHTS); never reads a byte from it.
 * Every message a child reads is checked before use: its size is exactly the size
 * of its type, the version matches, every field is in range (relayd's IMSG_SIZE_CHECK).
 * A malformed one is refused with -EBADMSG and logged, never acted on.
 * A child exits when the parent goes (PR_SET_PDEATHSIG, EOF on its socket); the
 * parent treats a dead or misbehaving child as fatal: it stops consuming and exits
 * non-zero so that systemd restarts the unit (the nft table stays as it is). */
#define PS_VERSION 3
#define PS_MSG_MAX 2048                 /* a result: a reason, a page, or the proxy CA's PEM */

/* The lookup child answers one question through the Docker socket (which host process a
 * sandbox's container runs as, for the egress child's port binding) and is never busy with a
 * snapshot step; it has the docker group but no capabilities and no registry credentials. */
/* The proxy child is the node's egress proxy (proxy.c): it listens on [proxy] port for the
 * connections the egress table redirects, holds the sandboxes' CAs and their rules' values; no
 * capabilities, no groups, never the Docker socket. */
enum ps_child { PS_CHILD_EGRESS, PS_CHILD_DOCKER, PS_CHILD_RELAY, PS_CHILD_LOOKUP, PS_CHILD_PROXY, PS_CHILD_MAX };

enum ps_type {
        PS_READY = 1,           /* child -> parent once, as a ps_result: start-up result */
        PS_PING,                /* parent -> child: struct ps_ping */
        PS_EGRESS_APPLY,        /* parent -> egress child: struct ps_egress_apply */
        PS_EGRESS_REMOVE,       /* parent -> egress child: struct ps_egress_remove */
        PS_RESULT,              /* child -> parent: struct ps_result answering seq */
        PS_EGRESS_LIST,         /* parent -> egress child: struct ps_egress_list */
        PS_EGRESS_STATS,        /* parent -> egress child: struct ps_egress_list (same paging) */
        PS_DOCKER_COMMIT,       /* parent -> docker child: struct ps_docker (free disk checked first) */
        PS_DOCKER_PUSH,         /* parent -> docker child: struct ps_docker; msg = digest */
        PS_DOCKER_VERIFY,       /* parent -> docker child: struct ps_docker; msg = "<digest> <size>" from the registry */
        PS_DOCKER_REMOVE,       /* parent -> docker child: struct ps_docker; the local image */
        PS_DOCKER_PRUNE,        /* parent -> docker child: struct ps_docker (ids empty); msg = "<removed> <kept>" */
        PS_RELAY_OPEN,          /* parent -> relay child: struct ps_relay_open; the result carries the fd */
        PS_DOCKER_PID,          /* parent -> lookup child: struct ps_docker (container only); msg = "<host pid>"
                                 * of the running container's first process */
        PS_PROXY_SET,           /* parent -> proxy child: struct ps_proxy_set; msg = the sandbox's CA (PEM) */
        PS_PROXY_DROP,          /* parent -> proxy child: struct ps_proxy_id */
        PS_PROXY_STATS,         /* parent -> proxy child: struct ps_proxy_id; msg = "<host>,<requests>,
                                 * <injections>,<refused>;" per rule host (as many as fit) */
};

struct ps_hdr {
        uint16_t version;       /* PS_VERSION */
        uint16_t type;          /* enum ps_type */
        uint32_t len;           /* whole message, header included: the fixed size of type */
        uint32_t seq;           /* echoed in the result */
        uint32_t reserved;      /* 0 */
};

struct ps_ping {
        struct ps_hdr hdr;
};

struct ps_allow {
        uint32_t addr;          /* IPv4, host order */
        uint8_t prefix;         /* 0..32 */
        uint8_t pad[3];         /* 0 */
};

struct ps_egress_apply {
        struct ps_hdr hdr;
        char sandbox_id[EGRESS_ID_LEN + 1];     /* 24 lowercase hex + NUL */
        uint8_t mode;                           /* enum pj_egress_mode */
        uint8_t pad[2];
        uint32_t ip;                            /* sandbox IPv4, host order, not 0 */
        uint32_t n_allow;                       /* <= EGRESS_MAX_ALLOW; restricted only */
        uint32_t pid;                           /* a host process in the sandbox's network namespace
                                                 * (its container's): bind its bridge port; 0 = keep
                                                 * the binding the sandbox has */
        struct ps_allow allow[EGRESS_MAX_ALLOW];
        uint32_t n_steer;                       /* <= EGRESS_MAX_STEER: addresses of hosts with rules */
        uint32_t steer[EGRESS_MAX_STEER];       /* IPv4, host order; their 80 and 443 go to the proxy */
};

struct ps_egress_remove {
        struct ps_hdr hdr;
        char sandbox_id[EGRESS_ID_LEN + 1];
        uint8_t pad[3];
        uint32_t ip;                            /* 0 = unknown */
};

/* Sandbox ids with a chain, in pages: the result's msg is "<total>:" followed by
 * up to PS_LIST_PAGE ids (24 hex each, concatenated) from offset on. */
#define PS_LIST_PAGE 20
/* PS_EGRESS_STATS: msg is "<total>:" then up to PS_STATS_PAGE entries
 * "<id>,<allowed pk>,<allowed bytes>,<dropped pk>,<dropped bytes>;". Offset 0
 * takes a fresh dump; later offsets page through that same snapshot. */
#define PS_STATS_PAGE 4
struct ps_egress_list {
        struct ps_hdr hdr;
        uint32_t offset;
        uint32_t reserved;                      /* 0 */
};

/* One snapshot step. The image is <registry>/<repository>:<snapshot_id> from the child's
 * own configuration (registry credentials never travel). */
#define PS_CONTAINER_MAX 64
struct ps_docker {
        struct ps_hdr hdr;
        char snapshot_id[EGRESS_ID_LEN + 1];    /* 24 lowercase hex + NUL; "" for PRUNE */
        char container[PS_CONTAINER_MAX + 1];   /* pj_snapshot_container_ref_valid; COMMIT and PID only */
        uint8_t pad[6];                         /* 0 */
};

struct ps_relay_open {
        struct ps_hdr hdr;
        char sandbox_id[EGRESS_ID_LEN + 1];     /* 24 lowercase hex + NUL */
        uint8_t pad[7];                         /* 0 */
};

/* A sandbox's rules for the proxy: JSON {"<host>":[{"headers":{"<name>":"<value>"}}]} with the
 * values put in (pj_egress_rules_json's shape), NUL-terminated, at most PS_PROXY_RULES_MAX - 1
 * bytes; the rest of rules zero. */
#define PS_PROXY_RULES_MAX (64 * 1024)
struct ps_proxy_set {
        struct ps_hdr hdr;
        char sandbox_id[EGRESS_ID_LEN + 1];
        uint8_t pad[3];                         /* 0 */
        uint32_t ip;                            /* the sandbox's IPv4, host order */
        uint32_t len;                           /* strlen(rules) */
        char rules[PS_PROXY_RULES_MAX];
};

struct ps_proxy_id {
        struct ps_hdr hdr;
        char sandbox_id[EGRESS_ID_LEN + 1];
        uint8_t pad[7];                         /* 0 */
};

struct ps_result {
        struct ps_hdr hdr;
        int32_t r;                              /* 0 or -errno */
        char msg[PS_MSG_MAX];                   /* NUL-terminated: the reason, or the child's version (ping) */
};

/* Forks the child (egress: with cfg's [egress], programming the base table first)
 * and waits for its PS_READY. Returns the child's start-up result: 0, or -errno with
 * its reason in err (the child is gone then). */
int privsep_spawn(enum ps_child kind, const struct agent_config *cfg, struct err *err);
/* What the child said when it became ready ("" for most; the docker process says
 * "network=<mode>", the gVisor network mode of [agent] runtime_network). */
const char *privsep_ready_note(enum ps_child kind);
/* Sends req (a ps_* message; hdr.version/len/seq are filled here) and waits for the
 * result. Returns the child's r, with ret->msg; -EPIPE when the child is gone or
 * answered out of protocol (the child is then considered dead); -ENOTCONN when it
 * was never started. Thread-safe. */
int privsep_call(enum ps_child kind, void *req, size_t len, struct ps_result *ret);
/* The same with its own bound on the child's answer (privsep_call: 30 s). Calls to one
 * child are serialised; calls to different children do not wait for each other. */
int privsep_call_timeout(enum ps_child kind, void *req, size_t len, long timeout_ms, struct ps_result *ret);
/* privsep_call, or -EBUSY at once when another call to that child is in progress (a ping
 * must not wait behind a snapshot push: a child that is working is alive). */
int privsep_try_call(enum ps_child kind, void *req, size_t len, struct ps_result *ret);
/* privsep_call_timeout for a request whose answer carries an fd (PS_RELAY_OPEN): 0 with
 * *ret_fd set (the caller's to close), or the child's -errno with *ret_fd = -1. */
int privsep_call_fd(enum ps_child kind, void *req, size_t len, long timeout_ms, struct ps_result *ret, int *ret_fd);
/* For tests: sends buf as it is and waits for the result, like privsep_call. */
int privsep_send_raw(enum ps_child kind, const void *buf, size_t len, struct ps_result *ret);
/* false (why filled) when a started child has died or broke the protocol. */
bool privsep_healthy(struct err *why);
/* true once a child has been found dead or broken (by privsep_healthy or a call).
 * Never blocks: for the watchdog thread while a call is in progress. */
bool privsep_failed(void);
/* pid of a running child, or 0. */
pid_t privsep_child_pid(enum ps_child kind);
/* Closes the sockets, stops and reaps the children. */
void privsep_stop(void);
/* caps_drop_except() and groups_drop(): common/privdrop.h. Capabilities are per thread: drop
 * them before creating threads. Every process but the docker one drops its groups: the docker
 * group reaches /var/run/docker.sock. */
/* Wipes and frees what only the docker process needs (the registry credentials): the parent
 * calls it once that process is started. */
void agent_config_scrub_docker_secrets(struct agent_config *c);
/* The child's side of one message: checks buf (size, version, type, every field) and
 * acts on it. Always fills ret (hdr, r, msg): -EBADMSG and the reason for a malformed
 * message, which is then not acted on. */
void privsep_child_handle(enum ps_child kind, const void *buf, size_t len, struct ps_result *ret);

/* names.c — allowlisted hostnames, resolved here (never in a privileged process),
 * bounded in time and in answers, and refreshed on a timer. */
#define NAMES_MAX_ADDRS_PER_NAME 32             /* over -> the apply fails closed */
#define NAMES_TIMEOUT_DEFAULT_MS 5000
#define NAMES_INTERVAL_DEFAULT_MS 300000
struct pj_egress;
struct pj_node_reply;
struct pj_node_resolved;
/* Sets the resolution bound and the refresh period (0 = keep the default). */
void names_configure(int64_t resolve_timeout_ms, int64_t resolve_interval_ms);
/* Hostname lookups still running (abandoned ones past their deadline included) are budgeted:
 * 50 per sandbox, 100 per account (account: controld's id, "" or NULL when not given), 192
 * per node; past one, the apply fails at once and says which budget is spent.
 * Builds the egress child's request for pol: literal entries as they are, every hostname
 * resolved (all at once, within the timeout; IPv4 only). Each append is bounded by
 * EGRESS_MAX_ALLOW and each name by NAMES_MAX_ADDRS_PER_NAME. On success *ret_resolved
 * (free()) says what each name gave; on failure -errno with the reason in err. */
int names_build(const char *sandbox_id, const char *account, uint32_t ip, const struct pj_egress *pol,
                struct ps_egress_apply *req, struct pj_node_resolved **ret_resolved, size_t *ret_n, struct err *err);
/* Resolves, has the egress child apply (with pid, a host process in the sandbox's network
 * namespace, its bridge port bound to it; 0 leaves the binding as it is), and remembers the
 * policy for refreshes; fills
 * out->applied_at_ms and out->resolved. Fails closed: on error nothing changed.
 * Blocks for up to the resolution bound: names_apply_start + names_apply_finish. */
int names_apply(const char *sandbox_id, const char *account, uint32_t ip, uint32_t pid, const struct pj_egress *pol,
                struct pj_node_reply *out, struct err *err);
/* The same in two steps, for a caller that must not wait (the consumer loop):
 * names_apply_start checks pol's entries and starts looking up every hostname at once
 * (the deadline is now + the resolution bound); it keeps copies of what it needs.
 * 0 with *ret, or -errno with the reason in err (then nothing was started).
 * names_apply_ready never blocks: true once every lookup ended or the deadline passed
 * (at once for a policy without hostnames). names_policy_resolves: pol (restricted)
 * names at least one hostname, so that its apply will wait for lookups.
 * names_apply_finish builds the request from the answers (waiting for them up to the
 * deadline when not ready), has the egress child apply it and remembers it, exactly as
 * names_apply; it consumes a. names_apply_free abandons a: nothing is applied, lookups
 * still running free their own state when they end. Accepts NULL, returns NULL. */
struct names_apply;
int names_apply_start(const char *sandbox_id, const char *account, uint32_t ip, uint32_t pid, const struct pj_egress *pol,
                      struct names_apply **ret, struct err *err);
bool names_apply_ready(const struct names_apply *a);
bool names_policy_resolves(const struct pj_egress *pol);
int names_apply_finish(struct names_apply *a, struct pj_node_reply *out, struct err *err);
struct names_apply *names_apply_free(struct names_apply *a);
/* Has the egress child remove the sandbox's rules and forgets its names. */
int names_remove(const char *sandbox_id, uint32_t ip, struct err *err);
/* Stops refreshing sandbox_id (its rules were removed some other way: node.sync). */
void names_forget(const char *sandbox_id);
/* One refresh pass over every remembered policy (what the timer runs). Returns how many
 * sandboxes got new addresses. */
int names_refresh_once(void);
/* What the sandbox's names resolved to when last confirmed; -ENOENT if none. */
int names_resolved_get(const char *sandbox_id, struct pj_node_resolved **ret, size_t *ret_n);
/* Sandboxes whose enforced addresses a refresh changed since the last call, with the new
 * answers, for the consumer to tell controld (egress.resolved). Caller frees each
 * ->resolved and the array. */
struct names_update {
        char sandbox_id[EGRESS_ID_LEN + 1];
        struct pj_node_resolved *resolved;
        size_t n_resolved;
};
size_t names_take_updates(struct names_update **ret);
int names_refresh_start(void);
void names_refresh_stop(void);

/* nodeagent.c */
int nodeagent_main(int argc, char **argv);
