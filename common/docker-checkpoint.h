/* docker-checkpoint.h — the Docker Engine's checkpoint API (experimental daemons only): a
 * running container's processes and memory saved to its checkpoint directory and the
 * container stopped; started again from there, in place. Under runsc it is gVisor's
 * checkpoint/restore. Library calls: 0 / -errno, docker_last_error() says why, nothing logged.
 * A daemon without "experimental": true answers these with 404 (-ENOENT here, and
 * docker_last_error() names the endpoint). */
#pragma once

#include <stdbool.h>

#include "docker.h"

/* The longest a checkpoint name may be; names are [A-Za-z0-9][A-Za-z0-9_.-]*. */
#define DOCKER_CHECKPOINT_NAME_MAX 64

/* POST /containers/{id}/checkpoints {"CheckpointID": name, "Exit": exit}: with exit the
 * container stops once saved. -EINVAL for a bad name. */
int docker_checkpoint_create(struct docker *d, const char *container, const char *name, bool exit);
/* POST /containers/{id}/start?checkpoint=name: the container resumes from it. */
int docker_checkpoint_start(struct docker *d, const char *container, const char *name);
/* DELETE /containers/{id}/checkpoints/{name}; missing = -ENOENT. */
int docker_checkpoint_remove(struct docker *d, const char *container, const char *name);
/* Whether the daemon runs with experimental features (GET /info "ExperimentalBuild"):
 * 1 yes, 0 no, < 0 errors. */
int docker_experimental(struct docker *d);
