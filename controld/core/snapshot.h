/* snapshot.h — snapshots (snapshot.c): taking, listing, deleting, the agents' events. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* The image a restore of sn runs: repo@digest when the snapshot's digest is known (a tag
 * overwritten in the registry cannot swap the tenant's image), else its tag. xmalloc'd. */
char *snapshot_image_ref(const struct snapshot *sn);
/* ---- snapshots (snapshot.c) ---- */
struct snapbus;
/* Starts the events consumer and the schedule/retention/deadline thread. Without [amqp]
 * url there is no agent to take snapshots: 0, and snapshot requests answer 501. */
int ctl_snapshot_start(struct ctl *c, struct err *err);
void ctl_snapshot_stop(struct ctl *c);
/* POST /sandboxes/{id}/snapshots: the caller's ready sandbox; records `creating` and hands
 * the job to the sandbox's node agent. */
int snapshot_create(struct ctl *c, const struct account *acc, const char *sandbox_id, const char *name, bool automatic,
                    struct snapshot *ret, struct err *err);
/* snapshot_create, then waits (bounded by [snapshots] timeout) until it is made: 0 with the
 * ready snapshot in *ret, or -EIO saying why it is not (failed, timed out, record gone). */
int snapshot_take(struct ctl *c, const struct account *acc, const char *sandbox_id, const char *name, struct snapshot *ret,
                  struct err *err);
/* Loads a snapshot owned by acc (-ENOENT for others'). */
int snapshot_load(struct ctl *c, const struct account *acc, const char *id, struct snapshot *ret, struct err *err);
/* Deletes the registry manifest, then the record. -EBUSY while creating. */
int snapshot_delete(struct ctl *c, const struct account *acc, const char *id, struct err *err);
/* The name of the snapshots E2B's pause takes (the filesystem a resume starts from). */
#define SNAPSHOT_E2B_PAUSE "e2b-pause"
/* Deletes the E2B pause snapshots of a sandbox that is gone (registry image and record): nothing
 * else refers to them. What fails now, the snapshot tick retries. */
void snapshot_drop_pause_images(struct ctl *c, const char *account_id, const char *sandbox_id);
/* Applies one agent event (JSON body, node = the publisher's app_id). For tests. 0 or -errno. */
int snapshot_apply_event(struct ctl *c, const char *node, const char *body, size_t len);
