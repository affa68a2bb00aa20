/* pause.c — pause and resume of the sandbox state machine (sandbox.c has create and destroy):
 *
 *  ready --pause--> pausing --> paused --resume--> resuming --> ready
 *
 * A pause keeps the filesystem (the driver stops the workload, its volume stays), or with
 * keep_memory its processes and memory too (a checkpoint the driver keeps on the node); a
 * resume brings back what was kept, and says so when memory was lost. Both run on a job
 * thread under the sandbox's lock and answer only once the state asked for is reached, or
 * with the reason it was not (the sandbox as it was).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "fault.h"
#include "controld.h"
#include "driver.h"
#include "json.h"
#include "log.h"
#include "sandbox-private.h"
#include "strutil.h"
#include "ctl-egress.h"
#include "sandbox.h"
#include "snapshot.h"
#include "template.h"


/* Pause and resume run on a job thread, under the sandbox lock, and only while the sandbox
 * is still `from` (it may have been destroyed meanwhile): step() sets the outcome in sb,
 * which is recorded only if the status is still `from`. Whatever happened, /wait callers
 * are woken afterwards. */
static void settle_job(struct ctl *c, const char *id, enum sb_status from, const char *what,
                       void (*step)(struct ctl *c, struct sandbox *sb)) {
        log_ctx_set("SANDBOX_ID", id);
        {
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                SANDBOX_LOCK_GUARD(lock, c, id);
                if (store_sandbox_get(c->store, id, &sb) == 0 && sb.status == from) {
                        SANDBOX_LOG_CTX_SCOPE;
                        step(c, &sb);
                        if (store_sandbox_update_cas(c->store, &sb, from) < 0)
                                log_error("failed to record the %s outcome", what);
                }
        }
        ctl_notify_status(c);
}

static void pause_step(struct ctl *c, struct sandbox *sb) {
        struct err derr = { 0 };
        sandbox_log_ctx(sb);
        /* sandbox_pause waited for snapshots to settle; one started since then (before the
         * pause took the lock: snapshot_create checks the status under it) is waited for too,
         * within the same bound: its commit reads the container being removed. */
        int64_t until = mono_ms() + (int64_t) c->cfg->pause_wait_s * 1000;
        int quiet;
        while ((quiet = no_snapshot_in_flight(c, sb->id)) == 0 && mono_ms() < until && !c->stopping)
                usleep(100 * 1000);
        if (quiet <= 0) {
                err_set(&derr, quiet < 0 ? -EIO : -EBUSY, "%s",
                        quiet < 0 ? "the snapshot records could not be read"
                                  : "a snapshot of the sandbox is being taken; pause once it is ready");
                log_warning("sandbox not paused: %s", derr.message);
                sb->status = SB_READY;
                _cleanup_free_ char *why = xasprintf("The pause did not happen: %s", derr.message);
                replace_str(&sb->failure_reason, why);
                return;
        }
        if (c->drv->ops->remove(c->drv, sb, &derr) < 0) {
                /* Still running: back to ready, as it was; the user may retry. The reason is on
                 * the record for the answer (sandbox_pause) and for GET. */
                log_error("sandbox pause failed: %s", derr.message);
                sb->status = SB_READY;
                _cleanup_free_ char *why = xasprintf("The pause did not happen: %s", derr.message);
                replace_str(&sb->failure_reason, why);
        } else {
                replace_str(&sb->failure_reason, NULL);
                (void) ctl_egress_remove(c, sb, &derr);
                sb->status = SB_PAUSED;
                sb->paused_at = now_ms();
                replace_str(&sb->container_id, NULL);
                replace_str(&sb->ip, NULL);
                log_info("sandbox paused");
        }
}

static void pause_job(struct ctl *c, void *id) {
        settle_job(c, id, SB_PAUSING, "pause", pause_step);
}

/* Pause with memory: the driver parks the agent and checkpoints the workload, which stays,
 * stopped. When the checkpoint fails the sandbox runs on (ready, as it was) and the reason is
 * on the record; when it also left the workload stopped, the sandbox is paused the filesystem
 * way instead and the record says memory was not kept (sandbox_pause answers with it). */
static void pause_memory_step(struct ctl *c, struct sandbox *sb) {
        struct err derr = { 0 };
        bool stopped = false;
        int64_t bytes = 0, t0 = mono_ms();
        sandbox_log_ctx(sb);
        if (no_snapshot_in_flight(c, sb->id) != 1) {
                sb->status = SB_READY;
                replace_str(&sb->failure_reason, "The pause did not happen: a snapshot of the sandbox is being taken; pause "
                                                 "once it is ready");
                return;
        }
        _cleanup_free_ char *name = xasprintf("pm%lld", (long long) now_ms());
        if (c->drv->ops->checkpoint(c->drv, sb, name, &bytes, &stopped, &derr) < 0) {
                log_error("sandbox pause with memory failed: %s", derr.message);
                _cleanup_free_ char *why = NULL, *cause = xstrdup(derr.message);
                if (stopped && c->drv->ops->remove(c->drv, sb, &derr) >= 0) {
                        why = xasprintf("Memory was not kept: %s; the sandbox was paused with its filesystem only", cause);
                        (void) ctl_egress_remove(c, sb, &derr);
                        sb->status = SB_PAUSED;
                        sb->paused_at = now_ms();
                        replace_str(&sb->container_id, NULL);
                        replace_str(&sb->ip, NULL);
                } else {
                        why = xasprintf("The pause did not happen: %s", cause);
                        sb->status = SB_READY;
                }
                replace_str(&sb->failure_reason, why);
                return;
        }
        if (sandbox_memory_note(c, sb->id, name, bytes) < 0)
                log_error("failed to record the checkpoint %s of the paused sandbox", name);
        fault_point("pause.memory.noted");   /* crash tests: checkpointed and noted, still 'pausing' */
        replace_str(&sb->failure_reason, NULL);
        (void) ctl_egress_remove(c, sb, &derr);
        sb->status = SB_PAUSED;
        sb->paused_at = now_ms();
        log_info("sandbox paused with its memory in %lldms (checkpoint %s, %lld bytes)", (long long) (mono_ms() - t0), name,
                 (long long) bytes);
}

static void pause_memory_job(struct ctl *c, void *id) {
        settle_job(c, id, SB_PAUSING, "pause", pause_memory_step);
}

int sandbox_restore_in_place(struct ctl *c, struct sandbox *sb, const char *ckpt, struct err *why) {
        struct err eerr = { 0 };
        struct placement pl = { 0 };
        if (!c->drv->ops->restore)
                err_set(why, -EOPNOTSUPP, "this server's driver cannot restore a checkpoint");
        else if (c->drv->ops->restore(c->drv, sb, ckpt, &pl, why) == 0) {
                fault_point("resume.memory.restored");   /* crash tests: running again, still 'resuming' */
                if (ctl_egress_apply(c, sb, NULL, &eerr) == 0) {
                        apply_placement(sb, &pl);
                        placement_clear(&pl);
                        return 1;
                }
                placement_clear(&pl);
                err_set(why, -EHOSTUNREACH, "Egress policy could not be enforced: %s", eerr.message);
        }
        struct err derr = { 0 };
        if (c->drv->ops->remove(c->drv, sb, &derr) < 0)
                log_warning("could not remove the kept workload: %s", derr.message);
        replace_str(&sb->container_id, NULL);
        replace_str(&sb->ip, NULL);
        return 0;
}

/* A sandbox paused with its memory is restored in place; when that fails, its workload goes
 * and the resume starts it afresh from the filesystem, the record saying memory was lost and
 * why (failure_reason on a ready sandbox, which sandbox_resume answers with). Returns 1 when
 * restored, 0 when the caller is to start it afresh. */
static int resume_memory(struct ctl *c, struct sandbox *sb, char **ret_lost) {
        _cleanup_free_ char *ckpt = NULL;
        struct err reason = { 0 };
        if (sandbox_memory_kept(c, sb->id, &ckpt, NULL) < 0)
                return 0;
        int r = sandbox_restore_in_place(c, sb, ckpt, &reason);
        sandbox_memory_forget(c, sb->id);
        if (r == 1)
                return 1;
        log_error("sandbox restore with memory failed, starting it from its filesystem: %s", reason.message);
        *ret_lost = xasprintf("Memory was lost: %s. The sandbox was started afresh from its filesystem", reason.message);
        return 0;
}

/* A resumed sandbox is ready from now; one whose end passed while it was paused (its
 * lifecycle paused it there) runs its run length again. */
static void mark_resumed(struct ctl *c, struct sandbox *sb, int64_t t0) {
        int64_t now = now_ms();
        sb->status = SB_READY;
        sb->paused_at = 0;
        sb->last_activity_at = now;
        if (sb->pause_at_end && sb->expires_at <= now)
                sb->expires_at = now + (sb->run_s > 0 ? sb->run_s : (int64_t) c->cfg->default_lifetime_s) * 1000;
        sb_timings_set(&sb->timings, SB_PHASE_RESUME, mono_ms() - t0);
}

static void resume_step(struct ctl *c, struct sandbox *sb) {
        struct placement pl = { 0 };
        struct err reason = { 0 }, eerr = { 0 };
        int64_t t0 = mono_ms();
        bool ok = false;
        _cleanup_free_ char *lost = NULL;
        log_ctx_set("EGRESS_MODE", pj_egress_mode_to_string(sb->egress.mode));
        if (resume_memory(c, sb, &lost) == 1) {
                replace_str(&sb->failure_reason, NULL);
                mark_resumed(c, sb, t0);
                log_info("sandbox resumed with its memory in %lldms", (long long) (mono_ms() - t0));
                return;
        }
        if (c->drv->ops->place(c->drv, sb, &pl, &reason) == 0) {
                /* Nothing runs on failure (place unwinds). */
                apply_placement(sb, &pl);
                placement_clear(&pl);
                sandbox_log_ctx(sb);
                /* On the record before the apply, as in create: a node.sync meanwhile keeps it. */
                if (store_sandbox_update_cas(c->store, sb, SB_RESUMING) < 0) {
                        unplace_unenforced(c, sb);
                        replace_str(&sb->container_id, NULL);
                        err_set(&reason, -EIO, "failed to record the placement");
                } else if (fault_point("resume.placed"), ctl_egress_apply(c, sb, NULL, &eerr) == 0) {
                        ok = template_start(c, sb, &reason) == 0;
                        if (!ok) {
                                unplace_unenforced(c, sb);
                                replace_str(&sb->container_id, NULL);
                        }
                } else {
                        unplace_unenforced(c, sb);
                        replace_str(&sb->container_id, NULL);
                        err_set(&reason, -EHOSTUNREACH, "Egress policy could not be enforced: %s", eerr.message);
                }
        }
        if (!ok) {
                /* A platform fault (no capacity, the image, the node's agent): the sandbox stays
                 * paused as it was, its volume kept; the user may retry or destroy it. Nothing
                 * of the attempt runs (place and the steps above unwound it). */
                log_error("sandbox resume failed, still paused: %s", reason.message);
                sb->status = SB_PAUSED;
                replace_str(&sb->container_id, NULL);
                replace_str(&sb->ip, NULL);
                _cleanup_free_ char *why = xasprintf("The resume did not happen: %s", reason.message);
                replace_str(&sb->failure_reason, why);
        } else {
                replace_str(&sb->failure_reason, lost);
                mark_resumed(c, sb, t0);
                log_info("sandbox resumed in %lldms", (long long) (mono_ms() - t0));
        }
}

static void resume_job(struct ctl *c, void *id) {
        settle_job(c, id, SB_RESUMING, "resume", resume_step);
}

static int transition(struct ctl *c, const struct sandbox *sb, enum sb_status from, enum sb_status to, const char *verb,
                      void (*job)(struct ctl *, void *), struct err *err) {
        if (sb->status != from)
                return err_set(err, -EBUSY, "Sandbox is %s; only %s sandboxes can be %s", sb_status_str(sb->status),
                               sb_status_str(from), verb);
        int r = store_sandbox_cas_status(c->store, sb->id, from, to);
        if (r == -ESTALE)
                return err_set(err, -ESTALE, "Sandbox changed status meanwhile; fetch it and retry");
        if (r < 0)
                return err_set(err, -EIO, "Failed to update the sandbox record");
        ctl_notify_status(c);
        r = ctl_spawn_job(c, job, xstrdup(sb->id));
        if (r < 0) {
                (void) store_sandbox_cas_status(c->store, sb->id, to, from);
                return err_set(err, -EAGAIN, "Server is shutting down; retry shortly");
        }
        return 0;
}

static bool not_pausing(const struct sandbox *sb, const void *ud) {
        (void) ud;
        return sb->status != SB_PAUSING;
}

static bool not_resuming(const struct sandbox *sb, const void *ud) {
        (void) ud;
        return sb->status != SB_RESUMING;
}

/* After a transition's job was started: waits (at most wait_s) for the sandbox to leave `via`
 * and answers 0 only when it reached `want`. Otherwise the job left it as it was and the
 * record's failure_reason says why; or it is still on the way, or something else (a destroy)
 * came first: each is an error that says so, never a success. */
static int settled(struct ctl *c, const char *id, enum sb_status via, enum sb_status want, uint64_t wait_s,
                   const char *verb, struct err *err) {
        _cleanup_sandbox_ struct sandbox now = { 0 };
        int k = ctl_wait_sandbox(c, id, via == SB_PAUSING ? not_pausing : not_resuming, NULL, (int64_t) wait_s * 1000, &now);
        if (k < 0)
                return err_set(err, -EIO, "Failed to read the sandbox record");
        if (k == 0)
                return err_set(err, -EINPROGRESS, "Sandbox is still %s after %llus; GET it to see how it ends",
                               sb_status_str(via), (unsigned long long) wait_s);
        if (now.status == want)
                return 0;
        /* Reached, and another client's call already took it on: a resume starts only from
         * paused (it waits for a pause under way first), a pause only from ready. */
        if ((want == SB_PAUSED && now.status == SB_RESUMING) || (want == SB_READY && now.status == SB_PAUSING))
                return 0;
        if (now.status == SB_READY || now.status == SB_PAUSED)
                return err_set(err, -EHOSTUNREACH, "%s. The sandbox is %s, as it was; retry the request.",
                               now.failure_reason ? now.failure_reason : "The transition did not happen", sb_status_str(now.status));
        return err_set(err, -EBUSY, "Sandbox was not %s: it is %s now", verb, sb_status_str(now.status));
}

/* The plan's memory_kept_max_mb: what the account's sandboxes paused with their memory keep
 * (their memory limits, the most a checkpoint holds) and sb's own must fit. 0, -EDQUOT with
 * the numbers, -EIO. */
static int memory_quota_check(struct ctl *c, const struct sandbox *sb, struct err *err) {
        _cleanup_(account_clear) struct account acc = { 0 };
        struct plan pbuf;
        if (store_account_get(c->store, sb->account_id, &acc) < 0)
                return err_set(err, -EIO, "Failed to read the sandbox's account");
        const struct plan *plan = config_account_plan(c->cfg, &acc, &pbuf);
        struct sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list_live(c->store, acc.id, 100000, &a, &n) < 0)
                return err_set(err, -EIO, "Failed to read the account's sandboxes");
        int64_t kept = 0;
        for (size_t i = 0; i < n; i++)
                if (strcmp(a[i].id, sb->id) && (a[i].status == SB_PAUSED || a[i].status == SB_RESUMING) &&
                    sandbox_memory_kept(c, a[i].id, NULL, NULL) == 0)
                        kept += a[i].memory;
        sandbox_array_free(a, n);
        if (kept + sb->memory <= plan->memory_kept_max_mb)
                return 0;
        return err_set(err, -EDQUOT,
                       "keepMemory: your plan keeps the memory of paused sandboxes up to %lld MB (memory_kept_max_mb); "
                       "%lld MB are kept now and this sandbox has %lld MB: resume or destroy one, or pause without "
                       "keepMemory",
                       (long long) plan->memory_kept_max_mb, (long long) kept, (long long) sb->memory);
}

int sandbox_memory_retention(struct ctl *c, struct sandbox *sb, int64_t now) {
        if (sb->status != SB_PAUSED || !sb->paused_at || sandbox_memory_kept(c, sb->id, NULL, NULL) < 0)
                return 0;
        _cleanup_(account_clear) struct account acc = { 0 };
        struct plan pbuf;
        if (store_account_get(c->store, sb->account_id, &acc) < 0)
                return -EIO;
        const struct plan *plan = config_account_plan(c->cfg, &acc, &pbuf);
        if (!plan || now - sb->paused_at <= plan->memory_kept_max_age_s * 1000)
                return 0;
        struct err derr = { 0 };
        sandbox_log_ctx(sb);
        /* the kept workload holds the checkpoint: both go, the volume stays */
        if (c->drv->ops->remove(c->drv, sb, &derr) < 0) {
                log_warning("could not drop the memory kept past the plan's memory_kept_max_age: %s", derr.message);
                return -EIO;
        }
        sandbox_memory_forget(c, sb->id);
        replace_str(&sb->container_id, NULL);
        replace_str(&sb->ip, NULL);
        _cleanup_free_ char *why = xasprintf("Memory was dropped: the sandbox was paused with it longer than the plan keeps "
                                             "memory (memory_kept_max_age, %llds); it resumes from its filesystem",
                                             (long long) plan->memory_kept_max_age_s);
        replace_str(&sb->failure_reason, why);
        if (store_sandbox_update_cas(c->store, sb, SB_PAUSED) < 0)
                return -EIO;
        log_notice("memory of the paused sandbox dropped after %llds (memory_kept_max_age)", (long long) ((now - sb->paused_at) / 1000));
        return 1;
}

/* Pause returns 0 once the sandbox is paused, or -EHOSTUNREACH with the reason it is not
 * (still ready and usable), so a client that pauses and then resumes at once finds it paused.
 * The wait is bounded by [scheduler] pause_wait; past it -EINPROGRESS, never a success. */
int sandbox_pause(struct ctl *c, const struct sandbox *sb, bool keep_memory, struct err *err) {
        if (keep_memory) {
                struct err why = { 0 };
                switch (sandbox_memory_refusal(c, sb->egress.mode, &why)) {
                case MEMORY_OK:
                        break;
                case MEMORY_NO_DRIVER:
                        return err_set(err, -EOPNOTSUPP, "keepMemory: pausing with the memory kept needs the local (docker) "
                                                         "driver; this server's %s driver keeps the filesystem only",
                                       c->drv->name);
                case MEMORY_NETWORKED:
                        return err_set(err, -EINVAL, "keepMemory: this server runs networked sandboxes on gVisor's host "
                                                     "networking, which gVisor cannot checkpoint: only sandboxes with egress "
                                                     "deny_all keep their memory here; this one's egress is %s: pause it "
                                                     "without keepMemory",
                                       pj_egress_mode_to_string(sb->egress.mode));
                case MEMORY_NOT_READY:
                        return err_set(err, -EOPNOTSUPP, "keepMemory: this server cannot keep memory now: %s", why.message);
                }
                int q = memory_quota_check(c, sb, err);
                if (q < 0)
                        return q;
        }
        /* A snapshot being taken reads the container: the pause waits for it (a pause right
         * after POST /snapshots is what SDK flows do), within the same bound. */
        int64_t until = mono_ms() + (int64_t) c->cfg->pause_wait_s * 1000;
        int quiet;
        while ((quiet = no_snapshot_in_flight(c, sb->id)) == 0 && mono_ms() < until && !c->stopping)
                usleep(100 * 1000);
        if (quiet < 0)
                return err_set(err, -EIO, "Failed to read the sandbox's snapshots");
        if (quiet == 0)
                return err_set(err, -EHOSTUNREACH, "A snapshot of the sandbox is still being taken after %llus; the sandbox "
                                                   "is ready, as it was: pause it once the snapshot is ready",
                               (unsigned long long) c->cfg->pause_wait_s);
        int r = transition(c, sb, SB_READY, SB_PAUSING, "paused", keep_memory ? pause_memory_job : pause_job, err);
        if (r < 0)
                return r;
        /* gVisor writes all the sandbox's memory: a checkpoint may take longer than a removal. */
        r = settled(c, sb->id, SB_PAUSING, SB_PAUSED, c->cfg->pause_wait_s + (keep_memory ? 300 : 0), "paused", err);
        if (r < 0 || !keep_memory || sandbox_memory_kept(c, sb->id, NULL, NULL) == 0)
                return r;
        /* Paused, but the filesystem way: the checkpoint failed and stopped the workload. */
        _cleanup_sandbox_ struct sandbox now = { 0 };
        (void) store_sandbox_get(c->store, sb->id, &now);
        return err_set(err, -EHOSTUNREACH, "%s", now.failure_reason ? now.failure_reason : "Memory was not kept");
}

/* A resume that finds the sandbox pausing waits for the pause to settle (at most [scheduler]
 * create_timeout, the bound on provisioning work, whatever pause_wait says), then resumes it;
 * resuming or ready sandboxes are refused as before. It answers once the sandbox is ready, or
 * with the reason it is still paused. */
int sandbox_resume(struct ctl *c, const struct sandbox *sb, char **ret_note, struct err *err) {
        _cleanup_sandbox_ struct sandbox now = { 0 };
        if (sb->status == SB_PAUSING) {
                int k = ctl_wait_sandbox(c, sb->id, not_pausing, NULL, (int64_t) c->cfg->create_timeout_s * 1000, &now);
                if (k < 0)
                        return err_set(err, -EIO, "Failed to read the sandbox record");
                if (k == 0)
                        return err_set(err, -EBUSY, "Sandbox is still pausing after %llus; resume it once it is paused",
                                       (unsigned long long) c->cfg->create_timeout_s);
                sb = &now;
        }
        int r = sb->status == SB_PAUSED ? check_node_accepting(c, err) : 0;  /* else transition says why not */
        if (r < 0)
                return r;
        r = transition(c, sb, SB_PAUSED, SB_RESUMING, "resumed", resume_job, err);
        if (r < 0)
                return r;
        r = settled(c, sb->id, SB_RESUMING, SB_READY, c->cfg->create_timeout_s + 30, "resumed", err);
        if (r >= 0 && ret_note) {
                /* A ready sandbox's failure_reason is what its resume lost (resume_memory). */
                _cleanup_sandbox_ struct sandbox after = { 0 };
                if (store_sandbox_get(c->store, sb->id, &after) == 0 && after.status == SB_READY && after.failure_reason)
                        *ret_note = xstrdup(after.failure_reason);
        }
        return r;
}

int sandbox_set_egress(struct ctl *c, const struct account *acc, const char *id, const struct pj_egress *in,
                       struct sandbox *ret, bool *ret_network_updated, struct err *err) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(sb_egress_done) struct sb_egress want = { 0 };
        struct err eerr = { 0 };
        int r;

        if (sb_egress_from_pj(&want, in) < 0)
                return err_set(err, -EINVAL, "allow: an entry could not be read; check the allowlist");
        if ((r = ctl_egress_check_allow(&want, err)) < 0 || (r = ctl_egress_check_rules(c, acc->id, &want, "rules", err)) < 0)
                return r;
        if (!ctl_egress_enforced(c))
                return err_set(err, -EOPNOTSUPP,
                               "Changing egress needs a node agent, and this server has none ([amqp] url is not set)");

        SANDBOX_LOCK_GUARD(lock, c, id);
        if ((r = sandbox_load(c, acc, id, &sb, err)) < 0)
                return r;
        if (sb.status != SB_READY)
                return err_set(err, -EBUSY, "Sandbox is %s; egress can be changed only while it is ready",
                               sb_status_str(sb.status));
        if ((!sb.ip || !*sb.ip) && want.mode != PJ_EGRESS_DENY_ALL)
                return err_set(err, -EINVAL,
                               "This sandbox was created with egress deny_all and has no network interface; create a new "
                               "sandbox with the policy you want");

        SANDBOX_LOG_CTX_SCOPE;
        sandbox_log_ctx(&sb);
        log_ctx_set("EGRESS_MODE", pj_egress_mode_to_string(want.mode));
        if (sb.ip && *sb.ip) {
                r = ctl_egress_apply(c, &sb, &want, &eerr);
                if (r < 0) {
                        /* The agent swaps a policy atomically, so a refusal leaves the old one; after a
                         * timeout we cannot know, so the old policy is applied again. */
                        struct err e2 = { 0 };
                        bool restored = r == -EREMOTEIO || r == -ENXIO || ctl_egress_apply(c, &sb, NULL, &e2) == 0;
                        if (!restored)
                                log_error("could not re-apply the previous egress policy either: %s", e2.message);
                        return err_set(err, -EHOSTUNREACH, "Egress policy could not be enforced: %s. %s", eerr.message,
                                       restored ? "The previous policy stays in force."
                                                : "The previous policy stays recorded; the node agent re-applies it when it "
                                                           "converges.");
                }
        }
        fault_point("egress.put.applied");
        bool changed = sb.egress.mode != want.mode;
        sb_egress_done(&sb.egress);
        sb.egress = want;
        want = (struct sb_egress) { 0 };
        sb.last_activity_at = now_ms();
        r = store_sandbox_update_cas(c->store, &sb, SB_READY);
        if (r < 0) {
                log_error("egress applied on the node but not recorded (%d)", r);
                return err_set(err, r == -ESTALE ? -ESTALE : -EIO,
                               "The new policy is applied but could not be recorded; retry the request");
        }
        log_info("sandbox egress changed to %s", pj_egress_mode_to_string(sb.egress.mode));
        *ret_network_updated = changed;
        *ret = sb;
        sb = (struct sandbox) { 0 };
        return 0;
}

struct names_secret {
        const char *name;
        bool found;
};

static int names_it(const char *name, size_t n, void *ud) {
        struct names_secret *w = ud;
        if (strlen(w->name) == n && !memcmp(w->name, name, n))
                w->found = true;
        return 0;
}

static bool rules_name_secret(const struct sb_egress *e, const char *secret) {
        struct names_secret w = { secret, false };
        for (size_t i = 0; i < e->rules.n_rules && !w.found; i++)
                for (size_t k = 0; k < e->rules.rules[i].n_headers && !w.found; k++)
                        (void) pj_egress_placeholders(e->rules.rules[i].headers[k].value, names_it, &w);
        return w.found;
}

int sandbox_egress_secret_changed(struct ctl *c, const struct account *acc, const char *secret) {
        struct sandbox *v = NULL;
        size_t n = 0;
        int failed = 0;
        if (!ctl_egress_enforced(c) || store_sandbox_list_status(c->store, acc->id, SB_READY, &v, &n) < 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                if (!rules_name_secret(&v[i].egress, secret))
                        continue;
                SANDBOX_LOCK_GUARD(lock, c, v[i].id);
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                struct err e = { 0 };
                if (sandbox_load(c, acc, v[i].id, &sb, &e) < 0 || sb.status != SB_READY || !rules_name_secret(&sb.egress, secret))
                        continue;
                SANDBOX_LOG_CTX_SCOPE;
                sandbox_log_ctx(&sb);
                if (ctl_egress_apply(c, &sb, NULL, &e) < 0) {
                        failed++;
                        log_error("the sandbox's egress proxy still has the secret's previous value: %s", e.message);
                } else
                        log_info("the sandbox's egress proxy has the secret's new value");
        }
        sandbox_array_free(v, n);
        return failed ? -EHOSTUNREACH : 0;
}

/* E2B's pause. With memory, Paddock's pause with memory (the container and a checkpoint stay
 * on the node). Without, it keeps the filesystem as E2B's does: a snapshot of the running
 * container first (the node's agent commits and pushes it), the sandbox's image becomes that
 * snapshot, then Paddock's pause; connect resumes it from there, and the previous pause's
 * snapshot is dropped. */
int sandbox_pause_e2b(struct ctl *c, const struct account *acc, const struct sandbox *sb0, bool memory,
                      struct err *err) {
        if (memory) {
                /* E2B's words for the refusals sandbox_pause would make in the Brimble API's */
                struct err why = { 0 };
                switch (sandbox_memory_refusal(c, sb0->egress.mode, &why)) {
                case MEMORY_OK:
                        break;
                case MEMORY_NO_DRIVER:
                        return err_set(err, -EOPNOTSUPP,
                                       "memory: pausing with the memory kept needs the local (docker) driver; this server's "
                                       "%s driver keeps the filesystem only: pause with memory: false",
                                       c->drv->name);
                case MEMORY_NETWORKED:
                        return err_set(err, -EINVAL,
                                       "memory: this server runs sandboxes with network access on gVisor's host networking, "
                                       "which gVisor cannot checkpoint: only sandboxes without it (allowInternetAccess: "
                                       "false) keep their memory here; pause with memory: false to keep the filesystem");
                case MEMORY_NOT_READY:
                        return err_set(err, -EOPNOTSUPP, "memory: this server cannot keep memory now: %s; pause with memory: false",
                                       why.message);
                }
                int k = sandbox_pause(c, sb0, true, err);
                if (k == 0)
                        log_info("e2b: sandbox paused with its memory");
                return k;
        }
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        int k = snapshot_take(c, acc, sb0->id, SNAPSHOT_E2B_PAUSE, &sn, err);
        if (k < 0) {
                if (k == -EIO)
                        return err_set(err, -EIO, "The pause's snapshot of the filesystem: %s; the sandbox keeps running",
                                       err->message);
                return k;
        }
        _cleanup_free_ char *old_snap = NULL;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        {
                SANDBOX_LOCK_GUARD(lock, c, sb0->id);
                if (store_sandbox_get(c->store, sb0->id, &sb) < 0 || sb.status != SB_READY)
                        return err_set(err, -ESTALE, "sandbox \"%s\" changed while it was being paused", sb0->id);
                old_snap = sb.from_snapshot ? xstrdup(sb.from_snapshot) : NULL;
                free(sb.image);
                sb.image = snapshot_image_ref(&sn);
                free(sb.from_snapshot);
                sb.from_snapshot = xstrdup(sn.id);
                if (store_sandbox_update(c->store, &sb) < 0)
                        return err_set(err, -EIO, "Failed to record the pause's snapshot");
        }
        k = sandbox_pause(c, &sb, false, err);
        if (k < 0)
                return k;
        if (old_snap) {
                _cleanup_(snapshot_clear) struct snapshot o = { 0 };
                struct err e2 = { 0 };
                if (store_snapshot_get(c->store, old_snap, &o) == 0 && o.name && !strcmp(o.name, SNAPSHOT_E2B_PAUSE) &&
                    !strcmp(o.sandbox_id, sb.id))
                        (void) snapshot_delete(c, acc, old_snap, &e2);
        }
        log_info("e2b: sandbox paused, its filesystem in snapshot %s", sn.id);
        return 0;
}

/* ---- a sandbox's end that pauses it (lifecycle.onTimeout pause, E2B's autoPause) ---- */

/* One pause at the sandbox's end, as its API pauses: 0 once the record says paused (a pause
 * with memory whose checkpoint failed may still have paused it the filesystem way). */
static int end_pause(struct ctl *c, const struct sandbox *sb, bool memory, struct err *err) {
        int r;
        if (sb->e2b.set) {
                _cleanup_(account_clear) struct account acc = { 0 };
                if (store_account_get(c->store, sb->account_id, &acc) < 0)
                        return err_set(err, -EIO, "Failed to read the sandbox's account");
                r = sandbox_pause_e2b(c, &acc, sb, memory, err);
        } else
                r = sandbox_pause(c, sb, memory, err);
        _cleanup_sandbox_ struct sandbox now = { 0 };
        if (r < 0 && store_sandbox_get(c->store, sb->id, &now) == 0 && now.status == SB_PAUSED)
                r = 0;
        return r;
}

/* A paused sandbox's failure_reason says what its pause lost (as a resume's does). */
static void note_lost(struct ctl *c, const char *id, const char *why) {
        SANDBOX_LOCK_GUARD(lock, c, id);
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (store_sandbox_get(c->store, id, &sb) < 0 || sb.status != SB_PAUSED)
                return;
        _cleanup_free_ char *msg = xasprintf("Paused at its end without its memory: %s", why);
        replace_str(&sb.failure_reason, msg);
        (void) store_sandbox_update(c->store, &sb);
}

int sandbox_pause_at_end(struct ctl *c, const char *id, const char *reason) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err e = { 0 }, mem = { 0 };
        if (store_sandbox_get(c->store, id, &sb) < 0)
                return -EIO;
        if (sb.status != SB_READY)
                return -EBUSY;
        int r = -EAGAIN;
        if (sb.pause_keep_memory)   /* a sandbox that cannot keep its memory now is refused with the reason */
                r = end_pause(c, &sb, true, &mem);
        if (r == 0 && sb.pause_keep_memory && sandbox_memory_kept(c, id, NULL, NULL) < 0)
                note_lost(c, id, mem.message[0] ? mem.message : "the checkpoint failed");
        if (r < 0) {
                sandbox_clear(&sb);
                if (store_sandbox_get(c->store, id, &sb) < 0)
                        return -EIO;
                if (sb.status != SB_READY)
                        return -EBUSY;
                if (sb.pause_keep_memory)
                        log_warning("the sandbox's end could not keep its memory (%s); pausing it with its filesystem",
                                    mem.message);
                r = end_pause(c, &sb, false, &e);
                if (r == 0 && sb.pause_keep_memory)
                        note_lost(c, id, mem.message);
        }
        if (r == 0) {
                log_notice("sandbox paused at its end (%s) instead of destroyed, as its lifecycle says", reason);
                return 0;
        }
        log_warning("the sandbox's end could not pause it (%s); destroying it as any sandbox at its end", e.message);
        r = sandbox_destroy(c, id, reason, &e);
        return r < 0 ? r : 1;
}

int sandbox_wake(struct ctl *c, struct sandbox *sb, struct err *err) {
        if (!sb->auto_resume || (sb->status != SB_PAUSED && sb->status != SB_PAUSING))
                return 0;
        log_ctx_set("SANDBOX_ID", sb->id);
        _cleanup_free_ char *lost = NULL;
        int r = sandbox_resume(c, sb, &lost, err);
        if (r < 0 && r != -EBUSY)
                return r;
        /* -EBUSY: another call woke it meanwhile (resuming or ready now): what counts is the record */
        _cleanup_sandbox_ struct sandbox now = { 0 };
        if (store_sandbox_get(c->store, sb->id, &now) < 0)
                return err_set(err, -EIO, "Failed to read the sandbox record");
        if (now.status == SB_RESUMING)
                (void) ctl_wait_sandbox(c, sb->id, not_resuming, NULL, (int64_t) c->cfg->create_timeout_s * 1000, &now);
        if (now.status != SB_READY)
                return r < 0 ? r : err_set(err, -EBUSY, "Sandbox is %s", sb_status_str(now.status));
        log_info("sandbox resumed by a call to it (autoResume)%s%s", lost ? ": " : "", lost ? lost : "");
        sandbox_clear(sb);
        *sb = now;
        now = (struct sandbox) { 0 };
        return 1;
}
