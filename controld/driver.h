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

struct ctl;
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
        bool valid;
};

/* An exec in progress (runtime operations). */
struct exec_session;

struct driver {
        const char *name;
        struct ctl *ctl;
        void *priv;
        int (*init)(struct driver *d, char *err, size_t errlen);
        void (*done)(struct driver *d);
        /* Places and starts the workload for sb and waits (bounded) until it runs. On failure
         * nothing is left behind. */
        int (*place)(struct driver *d, const struct sandbox *sb, struct placement *ret, char *err, size_t errlen);
        /* Stops and removes the workload; the persistent volume stays. Missing = success. */
        int (*remove)(struct driver *d, const struct sandbox *sb, char *err, size_t errlen);
        /* 1 running, 0 not running / gone, < 0 error talking to the backend. */
        int (*running)(struct driver *d, const struct sandbox *sb, int *ret_exit_code);
        int (*sample)(struct driver *d, const struct sandbox *sb, struct driver_sample *ret);
        /* Volumes by handle. */
        int (*volume_create)(struct driver *d, const char *handle, char *err, size_t errlen);
        int (*volume_remove)(struct driver *d, const char *handle, char *err, size_t errlen);
        /* Sandbox ids that have a workload on the backend (for orphan reaping). NULL-terminated. */
        int (*list)(struct driver *d, char ***ret_sandbox_ids);
        /* Handle used by runtime operations (exec); the docker driver returns its struct docker. */
        void *(*exec_backend)(struct driver *d);
};

int driver_docker_new(struct ctl *c, struct driver **ret);
struct driver *driver_free(struct driver *d);
