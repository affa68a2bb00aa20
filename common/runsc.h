/* runsc.h — gVisor's runsc run directly on a container another manager (Docker) started, found
 * by its state under that manager's runsc root: what the manager's API cannot do, or not as
 * fast. Today: a checkpoint written straight into a directory, uncompressed, without the
 * copies Docker's checkpoint API makes (Docker then restores it in place as its own).
 *
 * The binary is run with a fixed argument vector (no shell); the container id must be
 * 64 lowercase hex characters and the paths absolute, or -EINVAL. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "err.h"

/* Whether runsc under root knows container id (its state file is there): 1, 0, or -EINVAL. */
int runsc_knows(const char *root, const char *id);
/* runsc --root <root> checkpoint --compression=none --exclude-committed-zero-pages
 * --image-path <image_dir> <id>: the container's processes and memory saved to image_dir
 * (which must exist) and the container stopped. runsc killed past timeout_ms. 0, or -errno
 * with runsc's own last words in err. */
int runsc_checkpoint(const char *runsc, const char *root, const char *id, const char *image_dir, int64_t timeout_ms,
                     struct err *err);
