/* sandbox.h — the sandbox state machine (sandbox.c: create, destroy; pause.c: pause, resume)
 * and volumes (volume.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* Each returns 0 or a negative errno with err->message set (the codes: controld.h). */
int sandbox_create(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in,
                   struct sandbox *ret, struct err *err);
/* sandbox_create for a fork's child (fork.c): fork_src's image, placed from what the driver
 * staged under fork_name (no pool, no template start). NULL fork_src = sandbox_create. */
int sandbox_create_from(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in,
                        const struct sandbox *fork_src, const char *fork_name, struct sandbox *ret, struct err *err);
int sandbox_destroy(struct ctl *c, const char *id, const char *reason, struct err *err);
/* Fork (fork.c): count copies of running sandbox src (memory and filesystem), each a new
 * sandbox of acc living timeout_s (0: as long as src's run length). 0 once the children were
 * attempted (res[i] says each one's outcome: r, and sb or err); else -errno before any was:
 * -EINVAL/-EOPNOTSUPP what cannot be forked here, -ENOENT/-EBUSY the source's state, -EIO the
 * checkpoint or staging failed (the source runs on). */
#define SANDBOX_FORK_MAX 100
struct sandbox_fork_result {
        int r;
        struct sandbox sb;
        struct err err;
};
int sandbox_fork(struct ctl *c, const struct account *acc, const struct sandbox *src, int count, int64_t timeout_s,
                 struct sandbox_fork_result *res, struct err *err);
/* keep_memory: pause with the processes and memory (a checkpoint; local driver, deny_all
 * sandboxes), -EINVAL/-EOPNOTSUPP naming why not. */
int sandbox_pause(struct ctl *c, const struct sandbox *sb, bool keep_memory, struct err *err);
/* E2B's pause (pause.c): with memory, sandbox_pause keeping it (-EOPNOTSUPP where this server
 * cannot, -EINVAL for a networked sandbox); without, the filesystem in a snapshot the sandbox
 * resumes from. 0 once paused, else -errno with the reason and the sandbox as it was. */
/* Whether a sandbox with this egress can be paused with its memory here: MEMORY_OK, or the
 * first reason it cannot (MEMORY_NOT_READY: the driver's words in why). The one place these
 * checks live; each API words the refusal its own way. */
enum memory_refusal { MEMORY_OK, MEMORY_NO_DRIVER, MEMORY_NETWORKED, MEMORY_NOT_READY };
enum memory_refusal sandbox_memory_refusal(struct ctl *c, enum pj_egress_mode mode, struct err *why);
/* Whether a sandbox with this egress could be paused with its memory at its end (a create's
 * lifecycle.keepMemory, E2B's autoPauseMemory): 0, or -EOPNOTSUPP / -EINVAL with the reason
 * naming both fields. */
int sandbox_memory_pause_check(struct ctl *c, enum pj_egress_mode mode, struct err *err);
/* The reaper's step for a sandbox at its end whose lifecycle says pause (pause.c): paused with
 * its memory when it asked and that works, else with its filesystem (its failure_reason then
 * says memory was lost and why); when no pause works, destroyed for reason as any other
 * sandbox at its end. 0 paused, 1 destroyed, <0 neither (it stays as it was, retried later). */
int sandbox_pause_at_end(struct ctl *c, const char *id, const char *reason);
/* A call to sb (read by the caller, who checked the caller may reach it) while it is paused:
 * when its lifecycle says autoResume, resumed first (waiting for a pause under way) and *sb
 * read again. 1 resumed, 0 nothing to do (not paused, or no autoResume), <0 with the reason
 * when the resume failed (the sandbox stays paused). */
int sandbox_wake(struct ctl *c, struct sandbox *sb, struct err *err);
int sandbox_pause_e2b(struct ctl *c, const struct account *acc, const struct sandbox *sb, bool memory,
                      struct err *err);
/* The sandbox ends now + timeout_s (extend_only: never earlier than it was, clamped to the
 * plan's lifetime; else beyond the lifetime is -EINVAL). -ENOENT when it has ended. */
int sandbox_set_end(struct ctl *c, const struct account *acc, const struct sandbox *sb, int64_t timeout_s, bool extend_only,
                    struct err *err);
/* *ret_note (when not NULL; caller frees): set when the resume lost the memory the pause kept,
 * saying why (the sandbox was started afresh from its filesystem). */
int sandbox_resume(struct ctl *c, const struct sandbox *sb, char **ret_note, struct err *err);
/* A sandbox paused with its memory: 0 with its checkpoint's name and size, -ENOENT when none. */
int sandbox_memory_kept(struct ctl *c, const char *id, char **ret_checkpoint, int64_t *ret_bytes);
/* Sandbox id's status once no operation on it is under way: waits (under its lock) for one
 * that is, e.g. a destroy whose record is written after its workload ended. 0 or -errno. */
int sandbox_status_settled(struct ctl *c, const char *id, enum sb_status *ret);
/* Records that sandbox id was paused with its memory in checkpoint (bytes on the node's disk). */
int sandbox_memory_note(struct ctl *c, const char *id, const char *checkpoint, int64_t bytes);
void sandbox_memory_forget(struct ctl *c, const char *id);
/* The reaper's step for a sandbox paused with its memory longer than its plan's
 * memory_kept_max_age: the checkpoint (and the kept workload) goes, the sandbox stays paused
 * with its filesystem and failure_reason says why. 1 dropped, 0 nothing to do, <0 errors. */
int sandbox_memory_retention(struct ctl *c, struct sandbox *sb, int64_t now);
/* Whether sb runs as its users see it: ready, and not past its end (a sandbox at its end is
 * not running from the moment it reaches it, while the reaper still tears it down). */
bool sandbox_running_now(const struct sandbox *sb);
/* Sets the journal context of this thread for sb: SANDBOX_ID, and NODE_ID, NOMAD_JOB_ID,
 * ALLOC_ID where it is placed (removed when not, so no earlier sandbox's values linger). */
void sandbox_log_ctx(const struct sandbox *sb);
/* PUT /sandboxes/{id}/egress: the sandbox must be ready; the node agent confirms the new
 * policy before it is recorded. On failure (-EHOSTUNREACH) the previous policy stays. */
/* A secret of acc has a new value: the egress proxies of acc's ready sandboxes whose rules name
 * it get it now (their next request uses it). -EHOSTUNREACH when some node did not confirm (it
 * keeps the old value until the sandbox's policy is applied again); each is logged. */
int sandbox_egress_secret_changed(struct ctl *c, const struct account *acc, const char *secret);
int sandbox_set_egress(struct ctl *c, const struct account *acc, const char *id, const struct pj_egress *in,
                       struct sandbox *ret, bool *ret_network_updated, struct err *err);
int64_t destroy_timeout_seconds(const char *s);
/* ---- volumes (volume.c): 0 or a negative errno, as sandbox.c ---- */
int volume_create(struct ctl *c, const struct account *acc, const struct pj_volume_create *in, struct volume *ret,
                  struct err *err);
/* Records the new volume v under plan's caps (size, count), before any backend volume
 * exists: -EDQUOT, -EEXIST (its name is taken in the account) or -EIO. */
int volume_record(struct ctl *c, const struct plan *plan, const struct volume *v, struct err *err);
/* Loads a volume owned by acc (-ENOENT for others'). */
int volume_load(struct ctl *c, const struct account *acc, const char *id, struct volume *ret, struct err *err);
/* Refuses with -EBUSY while attached. */
int volume_delete(struct ctl *c, const struct account *acc, const char *id, struct err *err);
