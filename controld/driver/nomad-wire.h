/* nomad-wire.h — the pure parts of the Nomad driver (nomad-wire.c), for unit tests.
 *
 * The job builder and the parsers of Nomad's answers do no I/O: tests feed them canned
 * responses (PROTOCOLS.md section 1) and compare the job with packaging/nomad/sandbox-job.json.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "driver.h"
#include "pj_api.h"

struct config;
struct sandbox;

#define NOMAD_GROUP "sandbox"
#define NOMAD_TASK "sandbox"
#define NOMAD_VOLUME "workspace"
/* Job Meta keys: which sandbox, whose, and which controld instance placed it (orphan reaping
 * never touches another instance's jobs in a shared namespace). */
#define NOMAD_META_SANDBOX "paddock_sandbox_id"
#define NOMAD_META_ACCOUNT "paddock_account_id"
#define NOMAD_META_INSTANCE "paddock_controld"
/* Instead of the account on a warm-pool member's job (made before any account claims it). */
#define NOMAD_META_POOLED "paddock_pooled"
/* The largest alloc exec frame we take (stdout/stderr data arrives base64 in JSON). */
#define NOMAD_EXEC_MAX_MESSAGE ((size_t) 4 << 20)
/* A copy of s, or NULL when s is NULL or empty. xmalloc'd. */
char *nomad_str_or_null(const char *s);

/* "sandbox-<id>", xmalloc'd. */
char *nomad_job_id(const char *sandbox_id);
/* The CNI network mode for an egress mode: "cni/<profile>" from [nomad] cni_*. xmalloc'd. */
char *nomad_network_mode(const struct config *cfg, enum pj_egress_mode m);
/* The CSI volume id of a volume handle (the handle itself), and its capacity in bytes. */
int64_t nomad_volume_bytes(int64_t size_gb);
/* The register body {"Job": {...}} for sb (image, specs, egress mode, volume). New tree. */
/* guest_secret: the sandbox's agent secret, or NULL for a sandbox without the agent. With it,
 * PID 1 is [nomad] agent_binary (bound read-only from the node), its socket directory a
 * 64 KiB tmpfs Docker volume NOMAD_AGENT_VOLUME_PREFIX<id> (the node's relay finds the socket
 * there) and the secret in the task's environment as NOMAD_AGENT_SECRET_ENV (the agent wipes
 * it; its children never see it). */
#define NOMAD_AGENT_VOLUME_PREFIX PJ_AGENT_VOLUME_PREFIX
#define NOMAD_AGENT_SECRET_ENV "PADDOCK_INIT_SECRET"
cJSON *nomad_job_build(const struct config *cfg, const char *instance_id, const struct sandbox *sb,
                       const char *guest_secret);
/* Adds a tmpfs mount of bytes at each of paths (an image's VOLUMEs) to a register body's task,
 * except where something is mounted already: Docker then makes no anonymous volume there.
 * Returns how many were added, -EINVAL when body is not a job nomad_job_build made. */
int nomad_job_add_tmpfs(cJSON *body, const char *const *paths, int64_t bytes);
/* The CSI create body {"Volumes":[...]} for a volume handle. New tree. */
cJSON *nomad_volume_build(const struct config *cfg, const char *handle, int64_t size_gb);

enum nomad_alloc_phase { NOMAD_ALLOC_PENDING, NOMAD_ALLOC_RUNNING, NOMAD_ALLOC_FAILED, NOMAD_ALLOC_STOPPED };
struct nomad_alloc {
        char *id, *node_id, *client_status, *desired_status;
        int64_t create_index, modify_index;
        enum nomad_alloc_phase phase;
        char *reason;          /* why it failed (task events), or what it waits for; NULL = nothing said */
};
void nomad_alloc_clear(struct nomad_alloc *a);
/* Reads one allocation (stub or full): ids, statuses, phase, reason. -EINVAL when it has no ID. */
int nomad_alloc_parse(const cJSON *a, struct nomad_alloc *ret);
/* From GET /v1/job/:id/allocations: the newest allocation with CreateIndex >= min_create_index.
 * 1 found, 0 none, -EINVAL not an array. */
int nomad_allocs_pick(const cJSON *stubs, int64_t min_create_index, struct nomad_alloc *ret);
/* Does any allocation in the list still hold resources (client pending/running)? */
bool nomad_allocs_any_live(const cJSON *stubs);
/* Nomad's reason for a failed task from TaskStates (events: DisplayMessage, Message, DriverError,
 * ExitCode, Signal). NULL when nothing was said. xmalloc'd. */
char *nomad_task_reason(const cJSON *task_states);
/* NetworkStatus.Address of a full allocation; NULL when none. xmalloc'd. */
char *nomad_alloc_address(const cJSON *alloc);
/* From an evaluation: NULL when it is not finished or placed everything; else a user-facing
 * reason ("no node could place the sandbox: ..."). *ret_done tells whether the eval finished. */
char *nomad_eval_failure(const cJSON *eval, bool *ret_done);
/* The job list entries (GET /v1/jobs?meta=true) that belong to instance and are not dead:
 * sandbox ids, NULL-terminated strv. Stubs without Meta are skipped (need_meta counts them). */
char **nomad_jobs_filter(const cJSON *jobs, const char *instance, size_t *ret_need_meta);

/* ---- exec over the alloc exec WebSocket ---- */
struct nomad_exec_frame {
        int stream;            /* 1 stdout, 2 stderr, 0 none */
        uint8_t *data;         /* decoded output, xmalloc'd */
        size_t len;
        bool closed;           /* the stream said close */
        bool exited;
        int exit_code;         /* when exited: 0 when Nomad omitted it */
};
void nomad_exec_frame_done(struct nomad_exec_frame *f);
/* Parses one server text frame. -EBADMSG when it is not one of Nomad's frames. */
int nomad_exec_frame_parse(const char *text, size_t len, struct nomad_exec_frame *ret);
/* {"stdin":{"data":"<base64>"}}, xmalloc'd. */
char *nomad_exec_stdin_frame(const void *data, size_t len);
/* The command JSON array for spec: argv as is, or wrapped in /bin/sh for a cwd or env. */
char *nomad_exec_command(const struct exec_spec *spec);
