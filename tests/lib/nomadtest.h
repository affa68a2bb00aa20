/* nomadtest.h — run the Nomad stand-in (build/tests/nomad/nomad-standin) for a test.
 *
 * nstandin_start() starts it on a free loopback port with a request log in dir; the exit hook
 * of the test (and nstandin_stop) stops it, and the stand-in removes its containers and
 * volumes on SIGTERM. Faults and state go through its /_standin endpoints.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>
#include <cjson/cJSON.h>

struct nstandin {
        pid_t pid;
        int port;
        char url[64];
        char record[300];     /* request log: one JSON object per line */
        char log[300];
};

/* Skips the test when the stand-in is not built. */
void need_nstandin(void);
/* args: extra command-line arguments (NULL-terminated, may be NULL), e.g. --nodes 2. */
void nstandin_start(struct nstandin *s, const char *dir, const char *const *args);
void nstandin_stop(struct nstandin *s);
/* nstandin_start with one client node (the node of a test's own agent; the no-egress network
 * mapped to none): that node's Nomad id into node_id (size bytes). */
void nstandin_start_one_node(struct nstandin *s, const char *dir, char *node_id, size_t size);
/* POST /_standin/fault with a JSON object such as {"fail_placement":1}. */
void nstandin_fault(struct nstandin *s, const char *json);
/* GET /_standin/state: {Index, Jobs, Allocations, Workers}. New tree. */
cJSON *nstandin_state(struct nstandin *s);
/* A plain GET of the stand-in's Nomad API (e.g. "/v1/nodes"). New tree or NULL. */
cJSON *nstandin_get(struct nstandin *s, const char *path);
/* The request log so far, as an array. New tree. */
cJSON *nstandin_requests(struct nstandin *s);
/* Requests in the log whose method matches (NULL = any) and whose path starts with prefix. */
int nstandin_count(struct nstandin *s, const char *method, const char *prefix);
/* Jobs registered and not purged. */
int nstandin_job_count(struct nstandin *s);
/* The container of sandbox id's running (desired run) allocation, or NULL (static buffer). */
const char *nstandin_container(struct nstandin *s, const char *sandbox_id);
