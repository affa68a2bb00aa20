/* volume-content.h — a volume's files without a sandbox of the caller's own (volume-content.c),
 * for E2B's volume-content API (edge/e2b-volumes.c).
 *
 * A volume's files live where a sandbox mounts them, so they are reached through one: the
 * sandbox that has the volume mounted when it is ready, else a small sandbox of the volume's
 * account started for it (the "helper": named volume-<name>, no network, the volume at
 * /volume, its end VOLUME_HELPER_S seconds after its last use, visible in the account's list as
 * the template builder is). Every path is the volume's own ("/a/b", "a/b"; "" and "/" its root)
 * and never leaves it: a "." or ".." component is refused. */
#pragma once

#include <stdint.h>

#include "controld.h"
#include "err.h"
#include "store.h"

#define VOLUME_HELPER_S 120

struct volume_content {
        struct sandbox sb;      /* ready, with the volume mounted */
        char *root;             /* the volume's path in it */
};
void volume_content_done(struct volume_content *vc);

/* vc for the volume of id (the caller authorised the request by the volume's token). 0, or
 * -errno with the reason in err: -ENOENT no such volume, -EBUSY it is mounted in a sandbox
 * that is not running (paused, starting), or what starting the helper met. */
int volume_content_open(struct ctl *c, const char *volume_id, struct volume_content *ret, struct err *err);

/* The path in vc's sandbox of p (a path in the volume), or NULL with the reason in err when p
 * has a "." or ".." component, a control character, or more than 4096 bytes. */
char *volume_content_path(const struct volume_content *vc, const char *p, struct err *err);

/* chown and chmod of path (in vc's sandbox) inside it: uid, gid, mode < 0 leave that one. 0, or
 * -errno with the reason in err. */
int volume_content_set_owner_mode(struct ctl *c, const struct volume_content *vc, const char *path, int64_t uid,
                                  int64_t gid, int64_t mode, struct err *err);

/* sandbox_create and volume_delete (sandbox.h) for the edges: a volume that the create mounts
 * or that is deleted is first let go by the helper that has it mounted, if any (it holds
 * nothing: it only moved files), so that E2B's Volume.writeFile then Sandbox.create with the
 * volume, or Volume.destroy, work at once. Only the account's own volume is looked at. */
int volume_content_sandbox_create(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in,
                                  struct sandbox *ret, struct err *err);
int volume_content_volume_delete(struct ctl *c, const struct account *acc, const char *id, struct err *err);
