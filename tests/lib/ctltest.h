/* ctltest.h — run a real controld for HTTP-level tests.
 *
 * ctld_start() writes a config into a fresh directory (sqlite file there),
 * starts build/controld -d on a free loopback port, waits for /healthz, and
 * registers an exit hook that stops it and force-destroys every sandbox it
 * created (containers and volumes included), even when an ASSERT fails.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <cjson/cJSON.h>

#include "nomadtest.h"

/* Both drivers: with PADDOCK_DRIVER=nomad in the environment every ctld_start() also starts a
 * Nomad stand-in and runs controld on the Nomad driver against it (the same API suites then
 * test both drivers; the Makefile builds <suite>-nomad wrappers that set it). */
bool ctld_nomad(void);

struct ctld {
        pid_t pid;
        int port;
        char dir[256];
        char conf[300];
        char log[300];
        char url[64];
        char extra[4096];
        bool failed_exit;     /* controld crashed or reported a sanitizer error */
        /* Nomad driver: the stand-in controld talks to (started with it unless the test gave
         * its own through ctld_start_nomad), and extra [nomad] keys. */
        struct nstandin standin;
        bool own_standin;
        char nomad_url[64];
        char nomad_extra[1024];
        /* Nomad driver with PADDOCK_NOMAD_RELAY=1: a nodeagent of this ctld's own serving the
         * agent relay on relay_port (log in dir/relay.log), with the secret in relay_secret. */
        pid_t relay_pid;
        int relay_port;
        char relay_secret[300];
        char relay_ca[300];      /* the relay speaks TLS; controld checks it against this CA */
        /* Heap copy used by the exit hook: the test's struct lives on a stack frame that is
         * gone by the time exit hooks run. Kept in sync on every start/stop. */
        struct ctld *shadow;
};

/* extra: config text appended (more [plan]/[template] sections, [server] keys go in
 * server_extra). Default plan "default": max_concurrent 3. Templates: "busybox"
 * ($PADDOCK_TEST_IMAGE), "python-3.11" ($PADDOCK_PY_IMAGE), "missing-image". */
void ctld_start(struct ctld *c, const char *server_extra, const char *extra);
/* ctld_start on the Nomad driver against a stand-in the test started (and stops);
 * nomad_extra: more [nomad] keys (may be NULL). */
void ctld_start_nomad(struct ctld *c, struct nstandin *s, const char *nomad_extra, const char *server_extra,
                      const char *extra);
/* Whether ctld_start on the Nomad driver puts the in-sandbox agent and a node relay (with TLS)
 * in the path (PADDOCK_NOMAD_RELAY=1). */
bool ctld_nomad_relay(void);
/* Docker's data root (`docker info`'s DockerRootDir; asked once). */
const char *ctld_docker_root(void);
/* Restart on the same config and database; or stop and start the daemon alone (the store
 * and the sandboxes stay), e.g. to edit the store in between. */
void ctld_restart(struct ctld *c);
void ctld_stop_daemon(struct ctld *c);
void ctld_start_daemon(struct ctld *c);
/* One query of controld's store through the sqlite3 shell (running or not): its output, one
 * row a line (the caller frees it). */
char *ctld_db_query(struct ctld *c, const char *sql);
/* Waits up to timeout_s for the daemon to exit by itself (a crash point, say): its wait status,
 * or -1 when it still runs. */
int ctld_wait_exit(struct ctld *c, int timeout_s);
/* The crash matrix: controld restarted with PADDOCK_FAULT=point, one request that reaches that
 * point (the daemon SIGKILLs itself there), then started again without the fault. answered: the
 * status the request must get before the crash (an operation that answers first and dies on a
 * job thread), or 0 when no answer may come. */
/* The id of the newest row of table ("sandboxes", "snapshots") in controld's store. */
void ctld_newest_id(struct ctld *c, const char *table, char id[25]);
void ctld_crash_at(struct ctld *c, const char *point, const char *method, const char *path, const char *key,
                   const char *body, long answered);
void ctld_stop(struct ctld *c);
/* controld admin ...: returns exit status; stdout in *ret_out (optional). */
int ctld_admin(struct ctld *c, char **ret_out, const char *arg1, ...) __attribute__((sentinel));
/* Creates an account (plan may be NULL) and returns a fresh API key (the caller frees it). */
char *ctld_account_key(struct ctld *c, const char *name, const char *plan, char ret_account_id[25]);
/* The usual start of a test: needs Docker, starts controld with the default config and
 * returns an API key of a new account `name` (its id in ret_account_id when non-NULL). */
char *ctld_start_with_account(struct ctld *c, const char *name, char ret_account_id[25]);
/* The same, plus one sandbox created with body (NULL: the default body; its id in
 * ret_sandbox_id). */
char *ctld_start_with_sandbox(struct ctld *c, const char *name, const char *body, char ret_sandbox_id[25]);

struct hres {
        long status;
        char *body;
        size_t len;
        cJSON *json;          /* parsed body when JSON, else NULL */
        char request_id[64];
        char content_type[128];
        char *headers;        /* every response header line as received ("Name: value\r\n"...) */
};
/* One request. key NULL = no auth header; body NULL = none. */
void http_req(struct ctld *c, const char *method, const char *path, const char *key, const char *body, struct hres *ret);
/* Whether c's networked sandboxes run on gVisor's own network stack (its /healthz's
 * sandbox_network.mode is "sandbox"), which is what lets them keep their memory. */
bool ctld_netstack(struct ctld *c);
/* The same with the key in another header (e.g. "X-Nomad-Token" for the Nomad stand-in). */
void http_req_keyed(struct ctld *c, const char *method, const char *path, const char *key_header, const char *key,
                    const char *body, struct hres *ret);
void http_req_full(struct ctld *c, const char *method, const char *path, const char *const *headers, const void *body,
                   size_t body_len, struct hres *ret);
void hres_done(struct hres *r);
/* One request whose answer must have this status (else the test fails at the caller's line);
 * the response is dropped. */
#define HTTP_EXPECT(c, method, path, key, body, status) \
        http_expect_at(__FILE__, __LINE__, c, method, path, key, body, status)
void http_expect_at(const char *file, int line, struct ctld *c, const char *method, const char *path, const char *key,
                    const char *body, long status);
/* The same, and the answer's message must contain part. */
#define HTTP_EXPECT_MSG(c, method, path, key, body, status, part) \
        http_expect_msg_at(__FILE__, __LINE__, c, method, path, key, body, status, part)
void http_expect_msg_at(const char *file, int line, struct ctld *c, const char *method, const char *path,
                        const char *key, const char *body, long status, const char *part);
/* Convenience: data.<field> string of a response (NULL if absent). */
const char *hres_data_str(const struct hres *r, const char *field);
const char *hres_message(const struct hres *r);

/* Appends n bytes at p to the heap buffer *buf of *len bytes (grown as needed) and keeps it
 * NUL-terminated; for curl write callbacks. */
void mem_append(char **buf, size_t *len, const void *p, size_t n);

/* POST /sandboxes/{id}/exec {"cmd": cmd, "timeout_seconds": timeout_s}; the status is the caller's to check. */
void ctld_exec(struct ctld *c, const char *key, const char *id, const char *cmd, int timeout_s, struct hres *ret);
/* ctld_exec with a 30 s timeout that must answer 200 with stdout exactly want. */
void ctld_exec_expect_at(const char *file, int line, struct ctld *c, const char *key, const char *id, const char *cmd,
                         const char *want);
#define CTLD_EXEC_EXPECT(c, key, id, cmd, want) ctld_exec_expect_at(__FILE__, __LINE__, (c), (key), (id), (cmd), (want))

/* Creates a sandbox with body (default "{}"), asserts 201, returns its id (static buffer per call). */
const char *ctld_create(struct ctld *c, const char *key, const char *body, char ret_id[25]);
/* Polls GET until status equals want (or timeout_s); returns the last status seen (static). */
const char *ctld_wait_status(struct ctld *c, const char *key, const char *id, const char *want, int timeout_s);

/* Skips the test when dockerd is not answering. */
void need_docker(void);
/* The Docker container name of a sandbox (static buffer, overwritten by the next call). */
char *container_name(const char *id);
/* The address the engine gave sandbox id's container on its network (static buffer; the test
 * fails when it has none). */
const char *container_ip(const char *id);

/* docker helpers for assertions (docker CLI, fixed argv; no user strings reach a shell). */
bool docker_container_running(const char *name);
bool docker_container_exists(const char *name);

/* Who controld runs as when a test starts it as root ([controld] user): PADDOCK_CTLD_USER,
 * else "nobody" (as packaged: the network-facing process without groups); "" = stays root. */
const char *ctld_run_user(void);
