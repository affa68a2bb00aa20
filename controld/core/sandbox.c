/* sandbox.c — the sandbox state machine.
 *
 *  starting --ok--> ready --pause--> pausing --> paused --resume--> resuming --> ready
 *     |               |                                                |
 *     +--fail--> failed        destroy / reapers --> destroyed  <------+
 *
 * The record is written as 'starting' BEFORE any side effect, so a crash
 * between steps leaves something a reaper can heal. Operations on one sandbox
 * are serialised by a per-sandbox lock; status moves by compare-and-set.
 * Create and destroy are here; pause and resume in pause.c.
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
#include "ctl-metrics.h"
#include "network.h"
#include "pool.h"
#include "sandbox.h"
#include "snapshot.h"
#include "template.h"

static const char *const animals[] = {
        "otter", "heron", "lynx", "badger", "falcon", "marten", "ibex", "gecko", "puffin", "tapir",
        "okapi", "quokka", "bison", "condor", "dingo", "ferret", "jackal", "koala", "lemur", "narwhal",
        "ocelot", "panda", "raven", "stoat", "toucan", "walrus", "yak", "zebra", "mole", "newt",
};

int64_t destroy_timeout_seconds(const char *s) {
        static const struct { const char *k; int64_t v; } t[] = {
                { "30m", 1800 }, { "1h", 3600 }, { "3h", 10800 }, { "6h", 21600 }, { "12h", 43200 }, { "18h", 64800 },
        };
        for (size_t i = 0; s && i < ELEMENTSOF(t); i++)
                if (!strcmp(t[i].k, s))
                        return t[i].v;
        return 0;
}

void replace_str(char **dst, const char *v) {
        free(*dst);
        *dst = v ? xstrdup(v) : NULL;
}

void apply_placement(struct sandbox *sb, struct placement *p) {
        replace_str(&sb->container_id, p->container_id);
        replace_str(&sb->node_id, p->node_id);
        replace_str(&sb->job_id, p->job_id);
        replace_str(&sb->alloc_id, p->alloc_id);
        replace_str(&sb->ip, p->ip && *p->ip ? p->ip : NULL);   /* deny_all: no address, "" from the engine */
}

/* Creates a fresh per-sandbox volume (persistent: true). */
static int create_implicit_volume(struct ctl *c, const struct account *acc, const struct plan *plan, const struct region *g,
                                  const char *sandbox_id, int size_gb, const char *mount_path, char ret_id[25],
                                  struct err *err) {
        _cleanup_volume_ struct volume v = { 0 };
        struct err derr = { 0 };
        int64_t now = now_ms();
        int r;

        hexid_new(v.id);
        snprintf(v.account_id, sizeof(v.account_id), "%s", acc->id);
        v.name = xasprintf("sandbox-%s", sandbox_id);
        v.type = xstrdup("sandbox");
        v.region_key = xstrdup(g->key);
        v.handle = xasprintf("paddock-vol-%s", v.id);
        v.mount_path = xstrdup(mount_path);
        v.attached_sandbox_id = xstrdup(sandbox_id);
        v.size_gb = size_gb;
        v.last_attached_at = v.created_at = v.updated_at = now;
        if ((r = volume_record(c, plan, &v, err)) < 0)
                return r;
        r = c->drv->ops->volume_create(c->drv, v.handle, v.size_gb, &derr);
        if (r < 0) {
                (void) store_volume_begin_delete(c->store, v.id, sandbox_id);  /* the row is attached to us */
                (void) store_volume_delete(c->store, v.id);
                return err_set(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", derr.message);
        }
        memcpy(ret_id, v.id, 25);
        return 0;
}

static void drop_implicit_volume(struct ctl *c, const char *vol_id) {
        _cleanup_volume_ struct volume v = { 0 };
        struct err derr = { 0 };
        if (store_volume_get(c->store, vol_id, &v) < 0)
                return;
        /* Detach-and-mark before the backend volume goes: nobody may attach it in between. A
         * backend failure keeps the (detached) row, so the user sees the volume and can delete it. */
        if (store_volume_begin_delete(c->store, vol_id, v.attached_sandbox_id) == 0) {
                if (c->drv->ops->volume_remove(c->drv, v.handle, &derr) == 0)
                        (void) store_volume_delete(c->store, vol_id);
                else
                        (void) store_volume_abort_delete(c->store, vol_id);
        }
}

/* Undoes a placement whose egress is not (or no longer) known to be enforced: the
 * container goes first, then the agent is asked to drop whatever it may have
 * applied (briefly: it may be the agent that is gone). */
void unplace_unenforced(struct ctl *c, struct sandbox *sb) {
        struct err e2 = { 0 };
        if (c->drv->ops->remove(c->drv, sb, &e2) < 0)
                log_error("could not remove the container of a sandbox whose egress is not enforced: %s", e2.message);
        (void) ctl_egress_remove_timeout(c, sb, 1000, &e2);
}

/* Writes the record of sb, a create still `starting` in the store, or when that fails removes
 * its workload: the container runs but the record can't say so, so unwind rather than leak it. */
static int record_or_unplace(struct ctl *c, struct sandbox *sb, struct err *reason, struct err *err) {
        if (store_sandbox_update_cas(c->store, sb, SB_STARTING) == 0)
                return 0;
        unplace_unenforced(c, sb);
        err_set(reason, -EIO, "failed to record the placement");
        return err_set(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", reason->message);
}

/* A create that fails with one of these went wrong after it was accepted: the record
 * stays as 'failed'. Any other error is a refusal and leaves nothing behind. */
static bool create_failed(int r) {
        return r == -EIO || r == -EHOSTUNREACH;
}

bool sandbox_running_now(const struct sandbox *sb) {
        return sb->status == SB_READY && !(sb->expires_at > 0 && sb->expires_at <= now_ms());
}

void sandbox_log_ctx(const struct sandbox *sb) {
        log_ctx_set("SANDBOX_ID", sb->id);
        log_ctx_set("NODE_ID", sb->node_id && *sb->node_id ? sb->node_id : NULL);
        log_ctx_set("NOMAD_JOB_ID", sb->job_id && *sb->job_id ? sb->job_id : NULL);
        log_ctx_set("ALLOC_ID", sb->alloc_id && *sb->alloc_id ? sb->alloc_id : NULL);
}

/* Removes what sandbox_log_ctx and the create/destroy paths add, keeping REQUEST_ID and
 * ACCOUNT_ID of the request. */
static void sandbox_log_ctx_clear(void) {
        static const char *const keys[] = { "NODE_ID", "NOMAD_JOB_ID", "ALLOC_ID", "EGRESS_MODE", "DESTROY_REASON" };
        for (size_t i = 0; i < ELEMENTSOF(keys); i++)
                log_ctx_set(keys[i], NULL);
}

void sandbox_log_ctx_clearp(int *unused) {
        (void) unused;
        sandbox_log_ctx_clear();
}

/* A drained node takes no new sandboxes (controld admin node drain). A driver with one node
 * (no node_set_eligible) is refused here; a multi-node scheduler skips ineligible nodes itself. */
int check_node_accepting(struct ctl *c, struct err *err) {
        if (c->drv->ops->node_set_eligible)
                return 0;
        if (store_node_drained(c->store, c->cfg->docker_node_id) > 0)
                return err_set(err, -EHOSTUNREACH,
                               "No node is accepting new sandboxes right now: the node is drained for maintenance. Try again later.");
        return 0;
}

int sandbox_create(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in, struct sandbox *ret,
                   struct err *err) {
        return sandbox_create_from(c, acc, in, NULL, NULL, ret, err);
}

int sandbox_create_from(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in,
                        const struct sandbox *fork_src, const char *fork_name, struct sandbox *ret, struct err *err) {
        const struct config *cfg = c->cfg;
        struct plan plan_buf;
        const struct plan *plan = config_account_plan(cfg, acc, &plan_buf);
        const struct template *tpl;
        const struct region *g;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        char period[8];
        int64_t t0 = mono_ms(), now = now_ms();
        bool implicit_volume = false;
        int r;

        if (!plan)
                return err_set(err, -EPERM, "Your account's plan '%s' is not available on this server. Contact the operator.",
                               acc->plan);
        tpl = config_template(cfg, in->template_name ? in->template_name : cfg->default_template);
        /* A template the account built (usertemplate.c); another account's name is unknown here. */
        struct template own_tpl;
        _cleanup_(user_template_clear) struct user_template own = { 0 };
        if (!tpl && in->template_name) {
                r = template_user_for(c, acc, in->template_name, &own_tpl, &own);
                if (r == -EBUSY)
                        return err_set(err, -EBUSY, "Template '%s' is not built yet (GET /templates/%s says how it goes)",
                                       in->template_name, in->template_name);
                if (r == 0)
                        tpl = &own_tpl;
        }
        if (!tpl)
                return err_set(err, -EINVAL, "Unknown template '%s'. List the available ones with GET /sandbox/templates.",
                               in->template_name);
        g = config_region(cfg, in->region ? in->region : cfg->default_region);
        if (!g)
                return err_set(err, -EINVAL, "Unknown region '%s'. List the available ones with GET /sandboxes/regions.",
                               in->region);
        if (!g->enabled)
                return err_set(err, -EPERM, "Region %s is not accepting new sandboxes.", g->name);
        if (!config_plan_allows_region(plan, g))
                return err_set(err, -EPERM, "Your plan does not allow sandboxes in region %s. Pick another region or upgrade.",
                               g->name);

        int64_t cpu = in->has_cpu ? in->cpu : tpl->cpu, mem = in->has_memory ? in->memory : tpl->memory,
                disk = in->has_disk ? in->disk : tpl->disk;
        if (cpu > plan->max_cpu)
                return err_set(err, -EDQUOT, "Your plan allows up to %lld MHz of CPU per sandbox (specs.cpu). Lower it or upgrade.",
                               (long long) plan->max_cpu);
        if (mem > plan->max_memory)
                return err_set(err, -EDQUOT,
                               "Your plan allows up to %lld MB of memory per sandbox (specs.memory). Lower it or upgrade.",
                               (long long) plan->max_memory);
        if (disk > plan->max_disk)
                return err_set(err, -EDQUOT, "Your plan allows up to %lld GB of disk per sandbox (specs.disk). Lower it or upgrade.",
                               (long long) plan->max_disk);
        if (in->persistent && in->persistent_disk_gb > plan->max_volume_gb)
                return err_set(err, -EDQUOT, "Your plan allows volumes up to %lldGB. Reduce size or upgrade.",
                               (long long) plan->max_volume_gb);

        if (plan->spending_limit > 0) {
                double spent = 0;
                store_usage_period(now, period);
                (void) store_usage_get(c->store, acc->id, period, &spent);  /* no row yet = nothing spent */
                if (spent >= plan->spending_limit)
                        return err_set(err, -EDQUOT, "Sandbox creation paused, spending limit reached. Raise the limit or wait for "
                                                     "the next billing cycle.");
        }
        _cleanup_(snapshot_clear) struct snapshot snap = { 0 };
        if (in->from_snapshot) {
                /* The caller's own ready snapshot; its image replaces the template's. */
                if ((r = snapshot_load(c, acc, in->from_snapshot, &snap, err)) < 0)
                        return r;
                if (snap.status != SNAP_READY)
                        return err_set(err, -EBUSY, "Snapshot is %s; only a ready snapshot can be restored",
                                       snap_status_str(snap.status));
                if (!in->template_name && config_template(cfg, snap.source_template))
                        tpl = config_template(cfg, snap.source_template);
        }
        if ((r = check_node_accepting(c, err)) < 0)
                return r;

        /* Volume ownership before anything is written. */
        if (in->volume_id) {
                _cleanup_volume_ struct volume v = { 0 };
                if (store_volume_get_owned(c->store, acc->id, in->volume_id, &v) < 0)
                        return err_set(err, -ENOENT, "Volume not found");
                if (v.attached_sandbox_id)
                        return err_set(err, -EBUSY, "Volume is attached to another sandbox; destroy that sandbox first");
                if (v.region_key && strcmp(v.region_key, g->key) != 0)
                        return err_set(err, -EINVAL,
                                       "Volume is in another region; volumes attach only to sandboxes in their region");
        }

        /* The record, before any side effect. */
        hexid_new(sb.id);
        snprintf(sb.account_id, sizeof(sb.account_id), "%s", acc->id);
        if (in->name)
                sb.name = xstrdup(in->name);
        else {
                char suffix[HEXID_LEN + 1];
                hexid_new(suffix);
                sb.name = xasprintf("%s-%.4s", animals[(unsigned char) suffix[0] % ELEMENTSOF(animals)], suffix + 1);
        }
        sb.template_name = xstrdup(tpl->name);
        /* a fork's child runs what its source runs, whatever the template says today */
        sb.image = fork_src ? xstrdup(fork_src->image) : in->from_snapshot ? snapshot_image_ref(&snap) : xstrdup(tpl->image);
        sb.from_snapshot = in->from_snapshot ? xstrdup(snap.id) : NULL;
        sb.status = SB_STARTING;
        sb.region_key = xstrdup(g->key);
        sb.cpu = cpu;
        sb.memory = mem;
        sb.disk = disk;
        sb.team = in->team_id ? xstrdup(in->team_id) : NULL;
        sb.project_environment = in->environment_id ? xstrdup(in->environment_id) : NULL;
        sb.auto_destroy = in->auto_destroy;
        sb.destroy_timeout = in->destroy_timeout ? xstrdup(in->destroy_timeout) : NULL;
        sb.one_shot = in->one_shot;
        if (sb_egress_from_pj(&sb.egress, &in->egress) < 0)
                return err_set(err, -EINVAL, "egress.allow: an entry could not be read; check the allowlist");
        if ((r = ctl_egress_check_allow(&sb.egress, err)) < 0 ||
            (r = ctl_egress_check_rules(c, acc->id, &sb.egress, "egress.rules", err)) < 0)
                return r;
        sb.pause_at_end = in->pause_at_end;
        sb.pause_keep_memory = in->pause_at_end && in->pause_keep_memory;
        sb.auto_resume = sb.pause_keep_memory && in->auto_resume;
        if (sb.pause_keep_memory && (r = sandbox_memory_pause_check(c, sb.egress.mode, err)) < 0)
                return r;
        sb.persistent = in->persistent || in->volume_id;
        sb.persistent_disk_gb = in->has_persistent_disk_gb ? in->persistent_disk_gb : 0;
        sb.volume_id = in->volume_id ? xstrdup(in->volume_id) : NULL;
        sb.mount_path = xstrdup(in->mount_path ? in->mount_path : "/workspace");
        sb.snapshot_mode = xstrdup(in->snapshot_mode ? in->snapshot_mode : "manual");
        sb.snapshot_frequency = in->snapshot_frequency ? xstrdup(in->snapshot_frequency) : NULL;
        sb.created_at = sb.last_activity_at = now;
        /* the adapters' canonical JSON (checked by proto-json), decoded once here */
        if (sb_map_from_text(&sb.metadata, in->metadata_json) < 0 || sb_map_from_text(&sb.env, in->env_json) < 0 ||
            sb_e2b_from_text(&sb.e2b, in->e2b_json) < 0)
                return err_set(err, -EINVAL, "metadata, envVars: each must be an object of strings");
        int64_t life = in->auto_destroy && in->destroy_timeout_s > 0 ? in->destroy_timeout_s : cfg->default_lifetime_s;
        if (in->lifetime_s > 0)
                life = in->lifetime_s;
        if (life > plan->max_lifetime_s)
                life = plan->max_lifetime_s;
        sb.expires_at = now + life * 1000;
        sb.run_s = life;
        sb.driver = xstrdup(c->drv->name);
        sb_timings_set(&sb.timings, SB_PHASE_VALIDATE, mono_ms() - t0);

        /* A warm pool member when one matches exactly: the record takes its id and placement
         * in the same transaction that takes it from the pool. Otherwise the cold path. */
        int64_t t1 = mono_ms();
        enum pool_miss miss;
        const struct pool_conf *pool = fork_src ? NULL : pool_match(c, tpl, cpu, mem, disk, in, &miss);
        r = -ENOENT;
        if (fork_src)
                miss = POOL_MISS_EMPTY;   /* a fork's child is never a pool member, and counts as no miss */
        else if (miss == POOL_MISS_NONE && (r = store_pool_claim(c->store, pool->name, sb.image, &sb, plan->max_concurrent)) < 0 &&
            r != -EDQUOT) {
                if (r != -ENOENT)
                        log_warning("pool %s: the claim failed (%s); taking the cold path", pool->name, strerror(-r));
                miss = POOL_MISS_EMPTY;
        }
        bool claimed = r == 0;
        if (r != -EDQUOT) {
                if (!fork_src)
                        pool_note(c, pool, miss);
                if (!claimed)
                        r = store_sandbox_insert_capped(c->store, &sb, plan->max_concurrent);
                if (!claimed && r == 0)
                        fault_point("create.recorded");
        }
        if (r == -EDQUOT)
                return err_set(err, -EDQUOT, "Your plan allows up to %lld sandboxes. Destroy an existing one or upgrade.",
                               (long long) plan->max_concurrent);
        if (r < 0)
                return err_set(err, -EIO, "Failed to record the sandbox");
        sb_timings_set(&sb.timings, SB_PHASE_RECORD, mono_ms() - t1);
        log_ctx_set("SANDBOX_ID", sb.id);
        log_ctx_set("EGRESS_MODE", pj_egress_mode_to_string(in->egress.mode));  /* every entry of this create */
        log_info("sandbox starting template=%s cpu=%lld memory=%lld egress=%s", sb.template_name, (long long) sb.cpu,
                 (long long) sb.memory, pj_egress_mode_to_string(in->egress.mode));

        SANDBOX_LOCK_GUARD(lock, c, sb.id);
        struct err reason = { 0 };
        if (in->persistent) {
                char vid[25];
                r = create_implicit_volume(c, acc, plan, g, sb.id, in->persistent_disk_gb, sb.mount_path, vid, err);
                if (r < 0) {
                        err_set(&reason, r, "%s", err->message);
                        goto fail;
                }
                implicit_volume = true;
                sb.volume_id = xstrdup(vid);
        } else if (in->volume_id) {
                r = store_volume_attach(c->store, in->volume_id, sb.id, sb.mount_path, now);
                if (r < 0) {
                        r = err_set(err, -EBUSY, "Volume is attached to another sandbox; destroy that sandbox first");
                        err_set(&reason, r, "%s", err->message);
                        goto fail;
                }
        }

        int64_t t2 = mono_ms();
        if (!claimed) {
                struct placement pl = { 0 };
                sb.fork_container = fork_src ? fork_src->container_id : NULL;
                sb.fork_name = fork_name;
                r = c->drv->ops->place(c->drv, &sb, &pl, &reason);
                sb.fork_container = sb.fork_name = NULL;
                metrics_observe_phase(c->metrics, "place", (double) (mono_ms() - t2) / 1000.0);
                if (r < 0) {
                        r = err_set(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", reason.message);
                        goto fail;
                }
                apply_placement(&sb, &pl);
                placement_clear(&pl);
                sb_timings_set(&sb.timings, SB_PHASE_PLACE, mono_ms() - t2);
                sandbox_log_ctx(&sb);  /* placed: NODE_ID, NOMAD_JOB_ID, ALLOC_ID on what follows */
                /* The placement is on the record before the node is asked to enforce: a node.sync
                 * its agent sends meanwhile must find this sandbox live there, or the chain just
                 * applied is removed as stale (sync_answer in egress.c reads node and address from
                 * the store). A claim inserted the record with its placement already. */
                if ((r = record_or_unplace(c, &sb, &reason, err)) < 0)
                        goto fail;
                fault_point("create.placed");
        } else {
                sandbox_log_ctx(&sb);
                log_info("sandbox claimed from pool %s", pool->name);
                fault_point("pool.claim.committed");
        }
        /* Ready only once the node's agent enforces the policy: fail closed otherwise. */
        {
                struct err eerr = { 0 };
                r = ctl_egress_apply(c, &sb, NULL, &eerr);
                if (r < 0) {
                        unplace_unenforced(c, &sb);
                        err_set(&reason, r, "Egress policy could not be enforced: %s", eerr.message);
                        r = err_set(err, -EHOSTUNREACH, "%s", reason.message);
                        goto fail;
                }
                fault_point("create.egress_applied");
        }
        /* A pool member ran its template's start when it was made. */
        if (!claimed && !fork_src && template_start(c, &sb, &reason) < 0) {
                unplace_unenforced(c, &sb);
                r = err_set(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", reason.message);
                goto fail;
        }
        if (claimed) {
                /* The claim: from the pool's transaction to the policy in force. */
                sb_timings_set(&sb.timings, SB_PHASE_CLAIM, mono_ms() - t1);
                metrics_observe_phase(c->metrics, "claim", (double) (mono_ms() - t1) / 1000.0);
        }
        sb_timings_set(&sb.timings, SB_PHASE_TOTAL, mono_ms() - t0);
        sb.status = SB_READY;
        if ((r = record_or_unplace(c, &sb, &reason, err)) < 0)
                goto fail;
        fault_point("create.ready");    /* crash tests: recorded ready, not yet answered */
        sandbox_lock_release(&lock);
        metrics_observe_phase(c->metrics, "create_total", (double) (mono_ms() - t0) / 1000.0);
        log_info("sandbox ready in %lldms", (long long) (mono_ms() - t0));
        sandbox_log_ctx_clear();
        ctl_notify_status(c);
        *ret = sb;
        sb = (struct sandbox) { 0 };
        return 0;

fail:
        if (implicit_volume)
                drop_implicit_volume(c, sb.volume_id);
        else if (in->volume_id)
                (void) store_volume_detach_sandbox(c->store, sb.id, now_ms());
        if (!create_failed(r)) {
                /* Refused (e.g. the volume was taken by a concurrent create) before any side
                 * effect: nothing was created, so no record stays either. */
                (void) store_sandbox_delete(c->store, sb.id);
                sandbox_lock_release(&lock);
                log_info("sandbox create refused: %s", err->message);
                sandbox_log_ctx_clear();
                return r;
        }
        sb.status = SB_FAILED;
        replace_str(&sb.failure_reason, reason.message);
        replace_str(&sb.destroy_reason, "failed");
        sb.destroyed_at = now_ms();
        (void) store_sandbox_update_cas(c->store, &sb, SB_STARTING);  /* if this fails too, the stuck-starting reaper heals it */
        sandbox_lock_release(&lock);
        log_ctx_set("DESTROY_REASON", "failed");
        log_error("sandbox provisioning failed: %s", reason.message);
        sandbox_log_ctx_clear();
        ctl_notify_status(c);
        return r;
}

/* 1 when no snapshot of the sandbox is being taken (its commit reads the container), 0 when
 * one is, -errno when the store cannot say. */
int no_snapshot_in_flight(struct ctl *c, const char *id) {
        int64_t n = 0;
        int r = store_snapshot_count_creating(c->store, id, &n);
        return r < 0 ? r : n == 0;
}

#define DESTROY_SNAPSHOT_WAIT_S 10

int sandbox_destroy(struct ctl *c, const char *id, const char *reason, struct err *err) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err derr = { 0 };
        int r;

        {
                SANDBOX_LOCK_GUARD(lock, c, id);
                r = store_sandbox_get(c->store, id, &sb);
                if (r == -ENOENT)
                        return err_set(err, -ENOENT, "Sandbox not found");
                if (r < 0)
                        return err_set(err, -EIO, "Failed to read the sandbox record");
                if (sb.status == SB_DESTROYED)
                        return 0;
                /* A snapshot the user asked for before the destroy is taken first, for a few
                 * seconds at most (a commit takes about one; a node agent that is down must not
                 * make every destroy hang): its commit reads the container, and under runsc a
                 * kill during the commit's pause fails ("PID ... is zombie") until the commit is
                 * done. Past the bound the destroy goes on and the snapshot fails with its
                 * reason. Snapshots cannot start meanwhile: they check the status under this lock. */
                uint64_t wait_s = c->cfg->pause_wait_s < DESTROY_SNAPSHOT_WAIT_S ? c->cfg->pause_wait_s : DESTROY_SNAPSHOT_WAIT_S;
                int64_t until = mono_ms() + (int64_t) wait_s * 1000;
                while (sb.status == SB_READY && no_snapshot_in_flight(c, id) == 0 && mono_ms() < until && !c->stopping)
                        usleep(100 * 1000);
                /* A pause queued before this destroy (pausing) must not make the driver's removal a
                 * pause's: the Nomad driver scales a pausing sandbox's job to 0 and keeps it, which
                 * then stayed registered for ever (its record destroyed, its pause job finding
                 * nothing to do). The destroy removes for good. */
                enum sb_status seen = sb.status;
                if (sb.status == SB_PAUSING)
                        sb.status = SB_READY;
                r = c->drv->ops->remove(c->drv, &sb, &derr);
                sb.status = seen;
                if (r < 0) {
                        sandbox_lock_release(&lock);
                        sandbox_log_ctx(&sb);
                        log_ctx_set("DESTROY_REASON", reason);
                        log_error("sandbox destroy failed: %s", derr.message);
                        sandbox_log_ctx_clear();
                        return err_set(err, -EHOSTUNREACH, "Could not destroy the sandbox right now: %s. Retry the request.",
                                       derr.message);
                }
                fault_point("destroy.removed");
                (void) ctl_egress_remove(c, &sb, &derr);
                (void) store_volume_detach_sandbox(c->store, id, now_ms());
                /* A pause or resume changes the status without this lock (a CAS, then its job
                 * waits for the lock): the destroy wins over it. Re-read and record again; its
                 * job then finds the sandbox destroyed and does nothing. */
                for (int tries = 0;; tries++) {
                        enum sb_status was = sb.status;
                        sb.status = SB_DESTROYED;
                        sb.destroyed_at = now_ms();
                        if (!sb.destroy_reason || strcmp(sb.destroy_reason, "failed") != 0)
                                replace_str(&sb.destroy_reason, reason);
                        r = store_sandbox_update_cas(c->store, &sb, was);
                        if (r != -ESTALE || tries == 8)
                                break;
                        sandbox_clear(&sb);
                        if (store_sandbox_get(c->store, id, &sb) < 0)
                                break;
                        if (sb.status == SB_DESTROYED) {
                                r = 0;
                                break;
                        }
                }
        }
        sandbox_log_ctx(&sb);
        log_ctx_set("DESTROY_REASON", reason);
        log_info("sandbox destroyed reason=%s", reason);
        sandbox_memory_forget(c, sb.id);   /* its checkpoint went with the container */
        snapshot_drop_pause_images(c, sb.account_id, sb.id);
        sandbox_log_ctx_clear();
        ctl_notify_status(c);
        return r < 0 ? err_set(err, -EIO, "Failed to record the destroy") : 0;
}

/* A sandbox paused with its memory: its driver kept the stopped workload and a checkpoint of
 * it, named in the store's meta key "memory:<id>" as "<checkpoint> <bytes>". Absent: the
 * pause kept the filesystem only (or the sandbox is not paused). */
static char *memory_key(const char *id) { return xasprintf("memory:%s", id); }

int sandbox_memory_kept(struct ctl *c, const char *id, char **ret_checkpoint, int64_t *ret_bytes) {
        _cleanup_free_ char *key = memory_key(id), *v = NULL;
        int r = store_meta_get(c->store, key, &v);
        if (r < 0)
                return r;
        char *sp = strchr(v, ' ');
        if (!sp)
                return -EBADMSG;
        *sp = 0;
        if (ret_bytes)
                *ret_bytes = strtoll(sp + 1, NULL, 10);
        if (ret_checkpoint)
                *ret_checkpoint = xstrdup(v);
        return 0;
}

int sandbox_memory_note(struct ctl *c, const char *id, const char *checkpoint, int64_t bytes) {
        _cleanup_free_ char *key = memory_key(id), *val = xasprintf("%s %lld", checkpoint, (long long) bytes);
        return store_meta_put(c->store, key, val);
}

void sandbox_memory_forget(struct ctl *c, const char *id) {
        _cleanup_free_ char *key = memory_key(id);
        (void) store_meta_put(c->store, key, NULL);
}

int sandbox_status_settled(struct ctl *c, const char *id, enum sb_status *ret) {
        SANDBOX_LOCK_GUARD(lock, c, id);
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int r = store_sandbox_get(c->store, id, &sb);
        if (r < 0)
                return r;
        *ret = sb.status;
        return 0;
}

int sandbox_set_end(struct ctl *c, const struct account *acc, const struct sandbox *sb0, int64_t timeout_s, bool extend_only,
                    struct err *err) {
        struct plan pbuf;
        const struct plan *plan = config_account_plan(c->cfg, acc, &pbuf);
        int64_t now = now_ms(), end = now + timeout_s * 1000, cap = sb0->created_at + plan->max_lifetime_s * 1000;
        if (end > cap && extend_only)
                end = cap;   /* connect: as long as the plan lets it live (E2B's connect clamps too) */
        else if (end > cap)
                return err_set(err, -EINVAL,
                               "timeout: a sandbox lives at most %lld seconds on your plan; it can run until %lld s from now",
                               (long long) plan->max_lifetime_s, (long long) ((cap - now) / 1000));
        SANDBOX_LOCK_GUARD(lock, c, sb0->id);
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (store_sandbox_get(c->store, sb0->id, &sb) < 0 || sb.status == SB_DESTROYED || sb.status == SB_FAILED)
                return err_set(err, -ENOENT, "sandbox \"%s\" not found", sb0->id);
        if (extend_only && sb.expires_at >= end)
                return 0;
        sb.expires_at = end;
        sb.run_s = timeout_s;
        sb.auto_destroy = false;
        if (store_sandbox_update(c->store, &sb) < 0)
                return err_set(err, -EIO, "Failed to record the timeout");
        return 0;
}

enum memory_refusal sandbox_memory_refusal(struct ctl *c, enum pj_egress_mode mode, struct err *why) {
        if (!c->drv->ops->checkpoint)
                return MEMORY_NO_DRIVER;
        if (mode != PJ_EGRESS_DENY_ALL && !sandbox_network_local_checkpointable())
                return MEMORY_NETWORKED;
        if (c->drv->ops->checkpoint_ready && c->drv->ops->checkpoint_ready(c->drv, why) < 0)
                return MEMORY_NOT_READY;
        return MEMORY_OK;
}

int sandbox_memory_pause_check(struct ctl *c, enum pj_egress_mode mode, struct err *err) {
        static const char field[] = "lifecycle.keepMemory (autoPauseMemory on E2B's API)";
        struct err why = { 0 };
        switch (sandbox_memory_refusal(c, mode, &why)) {
        case MEMORY_OK:
                return 0;
        case MEMORY_NO_DRIVER:
                return err_set(err, -EOPNOTSUPP, "%s: this server's %s driver pauses with the filesystem only; set it to false",
                               field, c->drv->name);
        case MEMORY_NETWORKED:
                return err_set(err, -EINVAL,
                               "%s: this server runs networked sandboxes on gVisor's host networking, which gVisor cannot "
                               "checkpoint: only sandboxes without network access (egress deny_all; allowInternetAccess: "
                               "false on E2B's API) keep their memory here; set it to false to pause with the filesystem only",
                               field);
        case MEMORY_NOT_READY:
                break;
        }
        return err_set(err, -EOPNOTSUPP, "%s: this server cannot keep memory now: %s", field, why.message);
}
