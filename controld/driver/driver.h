/* driver.h — the scheduler driver interface.
 *
 * controld's lifecycle code talks only to this interface; the local Docker
 * driver (driver-docker.c) and the Nomad driver slot in behind it. Every call
 * is synchronous, thread-safe, returns 0 / -errno and writes a user-facing
 * reason into err on failure. Calls are idempotent where it matters:
 * removing something already gone succeeds.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "guest-exec.h"

struct ctl;
struct driver;
struct guest_client;
struct sandbox;
struct docker_stats;

struct placement {
        char *container_id;   /* driver handle of the running workload */
        char *node_id;        /* where it runs ("local" for the docker driver) */
        char *job_id, *alloc_id;
        char *ip;             /* sandbox address on its network, "" when none */
};
void placement_clear(struct placement *p);

struct driver_sample {
        double cpu_percent, mem_percent;
        uint64_t mem_usage, net_bytes;   /* net: rx + tx cumulative */
        uint64_t cpu_total_ns, system_ns;   /* cumulative, for CPU% between two samples */
        unsigned online_cpus;
        bool valid;
};

/* An exec in progress (runtime operations). */
struct exec_session;
struct exec_spec {
        const char *const *argv;         /* NULL-terminated; run directly, no host shell */
        const char *const *env;          /* "K=V" layered on the sandbox environment */
        const char *cwd;                 /* NULL = "/" */
        bool want_stdin;
};
/* An exec_output_cb that drops what it is given (commands run for their effect alone). */
int exec_output_discard(int stream, const uint8_t *data, size_t len, void *ud);

/* What a driver does: one static const table per driver (driver-docker.c, driver-nomad.c). */
struct driver_ops {
        int (*init)(struct driver *d, struct err *err);
        /* Is the backend answering right now? (for /healthz) */
        int (*ping)(struct driver *d);
        void (*done)(struct driver *d);
        /* Places and starts the workload for sb and waits (bounded) until it runs. On failure
         * nothing is left behind. */
        int (*place)(struct driver *d, const struct sandbox *sb, struct placement *ret, struct err *err);
        /* Stops and removes the workload; the persistent volume stays. Missing = success. */
        int (*remove)(struct driver *d, const struct sandbox *sb, struct err *err);
        /* 1 running, 0 not running / gone, < 0 error talking to the backend. */
        int (*running)(struct driver *d, const struct sandbox *sb, int *ret_exit_code);
        int (*sample)(struct driver *d, const struct sandbox *sb, struct driver_sample *ret);
        /* Volumes by handle. */
        int (*volume_create)(struct driver *d, const char *handle, int64_t size_gb, struct err *err);
        int (*volume_remove)(struct driver *d, const char *handle, struct err *err);
        /* Sandbox ids that have a workload of THIS controld instance on the backend (for orphan
         * reaping). NULL-terminated strv. */
        int (*list)(struct driver *d, char ***ret_sandbox_ids);
        /* Removes the workload of a sandbox known only by id (orphans). Missing = success. */
        int (*remove_by_id)(struct driver *d, const char *sandbox_id);
        /* Runtime operations. exec_start returns a session whose output is read with exec_read;
         * -ENOENT/-ESRCH when the workload is gone. */
        int (*exec_start)(struct driver *d, const struct sandbox *sb, const struct exec_spec *spec,
                          struct exec_session **ret, struct err *err);
        /* Writes stdin (blocking, bounded by timeout_ms). Output that arrives meanwhile is passed
         * to cb so the process never stalls on a full pipe. -EPIPE when the process is gone. */
        int (*exec_write)(struct exec_session *s, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud);
        int (*exec_close_stdin)(struct exec_session *s);
        /* Waits up to timeout_ms for output and passes it to cb. Returns 1 at end of stream, 0 when
         * the wait ended without EOF, -ECONNRESET when watch_fd (e.g. the client socket, -1 = none)
         * hung up, other < 0 on errors. */
        int (*exec_read)(struct exec_session *s, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud);
        /* Exit code after end of stream. */
        int (*exec_exit_code)(struct exec_session *s, int *ret);
        /* After a failed exec: 1 when the sandbox's memory limit killed it (the kernel OOM killer;
         * under gVisor that takes the whole sandbox down), 0 when not, < 0 on errors. */
        int (*exec_oom_killed)(struct exec_session *s);
        void (*exec_free)(struct exec_session *s);
        /* Optional (NULL = no agent path): the host path of sb's agent socket (xmalloc'd), or
         * -errno with err. The caller opens it without following links (agent-client.c). */
        int (*agent_socket)(struct driver *d, const struct sandbox *sb, char **ret_path, struct err *err);
        /* Optional, instead of agent_socket (Nomad): a stream connected to sb's agent (through
         * its node's relay) by deadline (mono_ms()), the fd or -errno with err; the caller says
         * HELLO over it. */
        int (*agent_dial)(struct driver *d, const struct sandbox *sb, int64_t deadline, struct err *err);
        /* Optional: whether sb's memory limit killed it (the sandbox is gone or going; waits a
         * few seconds for the engine to record why). 1 yes, 0 no, < 0 errors. */
        int (*oom_killed)(struct driver *d, const struct sandbox *sb);
        /* Optional: removes a node's copy of an image (best effort; in use = kept). */
        int (*image_remove)(struct driver *d, const char *image);
        /* Optional: the size in bytes of an image as the backend holds it (-ENOENT: not there). */
        int (*image_size)(struct driver *d, const char *image, int64_t *ret_bytes);
        /* Optional (NULL: memory cannot be kept): parks sb's agent and saves its running
         * workload, processes and memory, as checkpoint `name`; the workload is then stopped
         * and kept (no CPU or memory used). *ret_bytes: the checkpoint's size on disk. On
         * failure the workload runs on as it was (agent unparked) when it can; *ret_stopped
         * says when it could not (then it is stopped). */
        int (*checkpoint)(struct driver *d, const struct sandbox *sb, const char *name, int64_t *ret_bytes,
                          bool *ret_stopped, struct err *err);
        /* With checkpoint: 0 when the backend can checkpoint now, else -EOPNOTSUPP (or another
         * -errno) with the reason (e.g. Docker without experimental features). */
        int (*checkpoint_ready)(struct driver *d, struct err *err);
        /* Optional, with checkpoint: starts sb's kept workload from checkpoint `name`, in place,
         * unparks its agent and waits (bounded) for it to listen; the checkpoint is removed once
         * the workload runs. ret as place's. On failure the workload is stopped as it was. */
        int (*restore)(struct driver *d, const struct sandbox *sb, const char *name, struct placement *ret, struct err *err);
        /* Optional (NULL: no fork), with checkpoint: after checkpoint(src, name) stopped the
         * source, stages copies of its filesystem and checkpoint under name for children to be
         * placed from (a place of a sandbox whose fork_container/fork_name say so); the source
         * can then be restored. fork_unstage removes them (best effort). */
        int (*fork_stage)(struct driver *d, const struct sandbox *src, const char *name, struct err *err);
        int (*fork_unstage)(struct driver *d, const struct sandbox *src, const char *name);
        /* Optional: mark a node (in)eligible for new sandboxes. NULL = the driver has one node. */
        int (*node_set_eligible)(struct driver *d, const char *node_id, bool eligible, struct err *err);
};

struct driver {
        const char *name;
        struct ctl *ctl;
        void *priv;
        const struct driver_ops *ops;
};

/* Connects to sb's init through d (its agent_dial or agent_socket): 0, or -errno with a
 * reason in err: -EOPNOTSUPP the driver or sandbox has no init path, -ENOENT/-ECONNREFUSED
 * nothing listening, -ENOTSOCK/-EPERM something else at its socket, -EACCES refused secret,
 * -ETIMEDOUT no answer in time. */
int driver_guest_connect(struct driver *d, const struct sandbox *sb, struct guest_client **ret, struct err *err);

/* driver.c: the driver [scheduler] driver names (docker or nomad), not yet initialised. */
int driver_new(struct ctl *c, struct driver **ret);
struct driver *driver_free(struct driver *d);
/* Each driver's constructor, called only by driver_new. */
int driver_docker_new(struct ctl *c, struct driver **ret);
/* driver-nomad.c: sandboxes as Nomad jobs ([nomad] in the config). */
int driver_nomad_new(struct ctl *c, struct driver **ret);
