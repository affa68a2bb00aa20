/* ddriver.h — what the Docker driver's files share: docker.c (placement, volumes, the ops
 * table), docker-session.c (exec sessions over Docker's hijacked exec stream) and
 * docker-memory.c (pause with memory through Docker's checkpoint API). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "docker.h"
#include "driver.h"
#include "err.h"

struct ddriver {
        struct docker *docker;
        bool disk_caps;      /* the storage driver takes StorageOpt size: specs.disk is enforced */
        bool volume_caps;    /* [docker] volume_root is on btrfs with quotas: sizeGB is enforced */
        char *root_dir;      /* Docker's data root: agent sockets are under <root>/volumes/ */
};

static inline struct ddriver *P(struct driver *d) { return d->priv; }

static inline struct docker *D(struct driver *d) { return ((struct ddriver *) d->priv)->docker; }

static inline const char *dmsg(int r) { return *docker_last_error() ? docker_last_error() : strerror(-r); }

/* docker-agent.c: waits (until deadline, mono ms) for the init's socket to appear under
 * Docker's data root after a start or a restore; dd_unpark_agent: the agent of container (a
 * checkpoint parked it) listens again (the unpark signal), waited for the same way. */
void wait_agent_socket(struct driver *d, const struct sandbox *sb, int64_t deadline);
void dd_unpark_agent(struct driver *d, const struct sandbox *sb, const char *container, int64_t deadline);

/* docker-session.c */
int dd_exec_start(struct driver *d, const struct sandbox *sb, const struct exec_spec *spec, struct exec_session **ret,
                  struct err *err);
int dd_exec_read(struct exec_session *s, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud);
int dd_exec_write(struct exec_session *s, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud);
int dd_exec_close_stdin(struct exec_session *s);
int dd_exec_exit_code(struct exec_session *s, int *ret);
int dd_oom_killed(struct driver *d, const struct sandbox *sb);
int dd_exec_oom_killed(struct exec_session *s);
void dd_exec_free(struct exec_session *s);

/* docker-fork.c */
int dd_fork_stage(struct driver *d, const struct sandbox *src, const char *name, struct err *err);
int dd_fork_unstage(struct driver *d, const struct sandbox *src, const char *name);
int dd_fork_sweep(struct driver *d, const char *prefix);
int dd_fork_restore(struct driver *d, const struct sandbox *sb, const char *container, struct err *err);

/* docker-memory.c */
int dd_checkpoint(struct driver *d, const struct sandbox *sb, const char *name, int64_t *ret_bytes, bool *ret_stopped,
                  struct err *err);
int dd_checkpoint_ready(struct driver *d, struct err *err);
int dd_restore(struct driver *d, const struct sandbox *sb, const char *name, struct placement *ret, struct err *err);
