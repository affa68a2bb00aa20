/* sandbox.c — the sandbox state machine.
 *
 *  starting --ok--> ready --pause--> pausing --> paused --resume--> resuming --> ready
 *     |               |                                                |
 *     +--fail--> failed        destroy / reapers --> destroyed  <------+
 *
 * The record is written as 'starting' BEFORE any side effect, so a crash
 * between steps leaves something a reaper can heal. Operations on one sandbox
 * are serialised by a per-sandbox lock; status moves by compare-and-set.
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
#include "strutil.h"

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

static void replace_str(char **dst, const char *v) {
        free(*dst);
        *dst = v ? xstrdup(v) : NULL;
}

static void apply_placement(struct sandbox *sb, struct placement *p) {
        replace_str(&sb->container_id, p->container_id);
        replace_str(&sb->node_id, p->node_id);
        replace_str(&sb->job_id, p->job_id);
        replace_str(&sb->alloc_id, p->alloc_id);
        replace_str(&sb->ip, p->ip && *p->ip ? p->ip : NULL);   /* deny_all: no address, "" from the engine */
}

/* Creates a fresh per-sandbox volume (persistent: true). */
static int create_implicit_volume(struct ctl *c, const struct account *acc, const struct plan *plan, const struct region *g,
                                  const char *sandbox_id, int size_gb, const char *mount_path, char ret_id[25],
                                  struct api_error *err) {
        _cleanup_volume_ struct volume v = { 0 };
        char derr[256] = "";
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
        r = c->drv->ops->volume_create(c->drv, v.handle, v.size_gb, derr, sizeof(derr));
        if (r < 0) {
                (void) store_volume_begin_delete(c->store, v.id, sandbox_id);  /* the row is attached to us */
                (void) store_volume_delete(c->store, v.id);
                return API_ERR(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", derr);
        }
        memcpy(ret_id, v.id, 25);
        return 0;
}

static void drop_implicit_volume(struct ctl *c, const char *vol_id) {
        _cleanup_volume_ struct volume v = { 0 };
        char derr[256];
        if (store_volume_get(c->store, vol_id, &v) < 0)
                return;
        /* Detach-and-mark before the backend volume goes: nobody may attach it in between. A
         * backend failure keeps the (detached) row, so the user sees the volume and can delete it. */
        if (store_volume_begin_delete(c->store, vol_id, v.attached_sandbox_id) == 0) {
                if (c->drv->ops->volume_remove(c->drv, v.handle, derr, sizeof(derr)) == 0)
                        (void) store_volume_delete(c->store, vol_id);
                else
                        (void) store_volume_abort_delete(c->store, vol_id);
        }
}

/* Undoes a placement whose egress is not (or no longer) known to be enforced: the
 * container goes first, then the agent is asked to drop whatever it may have
 * applied (briefly: it may be the agent that is gone). */
static void unplace_unenforced(struct ctl *c, struct sandbox *sb) {
        char e2[256];
        if (c->drv->ops->remove(c->drv, sb, e2, sizeof(e2)) < 0)
                log_error("could not remove the container of a sandbox whose egress is not enforced: %s", e2);
        (void) ctl_egress_remove_timeout(c, sb, 1000, e2, sizeof(e2));
}

/* Writes the record of sb, a create still `starting` in the store, or when that fails removes
 * its workload: the container runs but the record can't say so, so unwind rather than leak it. */
static int record_or_unplace(struct ctl *c, struct sandbox *sb, char *reason, size_t reasonlen, struct api_error *err) {
        if (store_sandbox_update_cas(c->store, sb, SB_STARTING) == 0)
                return 0;
        unplace_unenforced(c, sb);
        snprintf(reason, reasonlen, "failed to record the placement");
        return API_ERR(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", reason);
}

/* A create that fails with one of these went wrong after it was accepted: the record
 * stays as 'failed'. Any other error is a refusal and leaves nothing behind. */
static bool create_failed(int r) {
        return r == -EIO || r == -EHOSTUNREACH;
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

static void sandbox_log_ctx_clearp(int *unused) {
        (void) unused;
        sandbox_log_ctx_clear();
}
/* Clears the sandbox's journal context however the scope is left. */
#define SANDBOX_LOG_CTX_SCOPE __attribute__((cleanup(sandbox_log_ctx_clearp), unused)) int _log_scope_ = 0

/* A drained node takes no new sandboxes (controld admin node drain). A driver with one node
 * (no node_set_eligible) is refused here; a multi-node scheduler skips ineligible nodes itself. */
static int check_node_accepting(struct ctl *c, struct api_error *err) {
        if (c->drv->ops->node_set_eligible)
                return 0;
        if (store_node_drained(c->store, c->cfg->docker_node_id) > 0)
                return API_ERR(err, -EHOSTUNREACH,
                               "No node is accepting new sandboxes right now: the node is drained for maintenance. Try again later.");
        return 0;
}

int sandbox_create(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in, struct sandbox *ret,
                   struct api_error *err) {
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
                return API_ERR(err, -EPERM, "Your account's plan '%s' is not available on this server. Contact the operator.",
                               acc->plan);
        tpl = config_template(cfg, in->template_name ? in->template_name : cfg->default_template);
        /* A template the account built (usertemplate.c); another account's name is unknown here. */
        struct template own_tpl;
        _cleanup_(user_template_clear) struct user_template own = { 0 };
        if (!tpl && in->template_name) {
                r = template_user_for(c, acc, in->template_name, &own_tpl, &own);
                if (r == -EBUSY)
                        return API_ERR(err, -EBUSY, "Template '%s' is not built yet (GET /templates/%s says how it goes)",
                                       in->template_name, in->template_name);
                if (r == 0)
                        tpl = &own_tpl;
        }
        if (!tpl)
                return API_ERR(err, -EINVAL, "Unknown template '%s'. List the available ones with GET /sandbox/templates.",
                               in->template_name);
        g = config_region(cfg, in->region ? in->region : cfg->default_region);
        if (!g)
                return API_ERR(err, -EINVAL, "Unknown region '%s'. List the available ones with GET /sandboxes/regions.",
                               in->region);
        if (!g->enabled)
                return API_ERR(err, -EPERM, "Region %s is not accepting new sandboxes.", g->name);
        if (!config_plan_allows_region(plan, g))
                return API_ERR(err, -EPERM, "Your plan does not allow sandboxes in region %s. Pick another region or upgrade.",
                               g->name);

        int64_t cpu = in->has_cpu ? in->cpu : tpl->cpu, mem = in->has_memory ? in->memory : tpl->memory,
                disk = in->has_disk ? in->disk : tpl->disk;
        if (cpu > plan->max_cpu)
                return API_ERR(err, -EDQUOT, "Your plan allows up to %lld MHz of CPU per sandbox (specs.cpu). Lower it or upgrade.",
                               (long long) plan->max_cpu);
        if (mem > plan->max_memory)
                return API_ERR(err, -EDQUOT,
                               "Your plan allows up to %lld MB of memory per sandbox (specs.memory). Lower it or upgrade.",
                               (long long) plan->max_memory);
        if (disk > plan->max_disk)
                return API_ERR(err, -EDQUOT, "Your plan allows up to %lld GB of disk per sandbox (specs.disk). Lower it or upgrade.",
                               (long long) plan->max_disk);
        if (in->persistent && in->persistent_disk_gb > plan->max_volume_gb)
                return API_ERR(err, -EDQUOT, "Your plan allows volumes up to %lldGB. Reduce size or upgrade.",
                               (long long) plan->max_volume_gb);

        if (plan->spending_limit > 0) {
                double spent = 0;
                store_usage_period(now, period);
                (void) store_usage_get(c->store, acc->id, period, &spent);  /* no row yet = nothing spent */
                if (spent >= plan->spending_limit)
                        return API_ERR(err, -EDQUOT, "Sandbox creation paused, spending limit reached. Raise the limit or wait for "
                                                     "the next billing cycle.");
        }
        _cleanup_(snapshot_clear) struct snapshot snap = { 0 };
        if (in->from_snapshot) {
                /* The caller's own ready snapshot; its image replaces the template's. */
                if ((r = snapshot_load(c, acc, in->from_snapshot, &snap, err)) < 0)
                        return r;
                if (snap.status != SNAP_READY)
                        return API_ERR(err, -EBUSY, "Snapshot is %s; only a ready snapshot can be restored",
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
                        return API_ERR(err, -ENOENT, "Volume not found");
                if (v.attached_sandbox_id)
                        return API_ERR(err, -EBUSY, "Volume is attached to another sandbox; destroy that sandbox first");
                if (v.region_key && strcmp(v.region_key, g->key) != 0)
                        return API_ERR(err, -EINVAL,
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
        sb.image = in->from_snapshot ? snapshot_image_ref(&snap) : xstrdup(tpl->image);
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
                return API_ERR(err, -EINVAL, "egress.allow: an entry could not be read; check the allowlist");
        if ((r = ctl_egress_check_allow(&sb.egress, err)) < 0)
                return r;
        sb.persistent = in->persistent || in->volume_id;
        sb.persistent_disk_gb = in->has_persistent_disk_gb ? in->persistent_disk_gb : 0;
        sb.volume_id = in->volume_id ? xstrdup(in->volume_id) : NULL;
        sb.mount_path = xstrdup(in->mount_path ? in->mount_path : "/workspace");
        sb.snapshot_mode = xstrdup(in->snapshot_mode ? in->snapshot_mode : "manual");
        sb.snapshot_frequency = in->snapshot_frequency ? xstrdup(in->snapshot_frequency) : NULL;
        sb.created_at = sb.last_activity_at = now;
        sb.metadata = in->metadata_json ? xstrdup(in->metadata_json) : NULL;
        sb.env = in->env_json ? xstrdup(in->env_json) : NULL;
        sb.e2b = in->e2b_json ? xstrdup(in->e2b_json) : NULL;
        int64_t life = in->auto_destroy && in->destroy_timeout_s > 0 ? in->destroy_timeout_s : cfg->default_lifetime_s;
        if (in->lifetime_s > 0)
                life = in->lifetime_s;
        if (life > plan->max_lifetime_s)
                life = plan->max_lifetime_s;
        sb.expires_at = now + life * 1000;
        sb.driver = xstrdup(c->drv->name);
        sb_timings_set(&sb.timings, SB_PHASE_VALIDATE, mono_ms() - t0);

        /* A warm pool member when one matches exactly: the record takes its id and placement
         * in the same transaction that takes it from the pool. Otherwise the cold path. */
        int64_t t1 = mono_ms();
        enum pool_miss miss;
        const struct pool_conf *pool = pool_match(c, tpl, cpu, mem, disk, in, &miss);
        r = -ENOENT;
        if (miss == POOL_MISS_NONE && (r = store_pool_claim(c->store, pool->name, sb.image, &sb, plan->max_concurrent)) < 0 &&
            r != -EDQUOT) {
                if (r != -ENOENT)
                        log_warning("pool %s: the claim failed (%s); taking the cold path", pool->name, strerror(-r));
                miss = POOL_MISS_EMPTY;
        }
        bool claimed = r == 0;
        if (r != -EDQUOT) {
                pool_note(c, pool, miss);
                if (!claimed)
                        r = store_sandbox_insert_capped(c->store, &sb, plan->max_concurrent);
                if (!claimed && r == 0)
                        fault_point("create.recorded");
        }
        if (r == -EDQUOT)
                return API_ERR(err, -EDQUOT, "Your plan allows up to %lld sandboxes. Destroy an existing one or upgrade.",
                               (long long) plan->max_concurrent);
        if (r < 0)
                return API_ERR(err, -EIO, "Failed to record the sandbox");
        sb_timings_set(&sb.timings, SB_PHASE_RECORD, mono_ms() - t1);
        log_ctx_set("SANDBOX_ID", sb.id);
        log_ctx_set("EGRESS_MODE", pj_egress_mode_to_string(in->egress.mode));  /* every entry of this create */
        log_info("sandbox starting template=%s cpu=%lld memory=%lld egress=%s", sb.template_name, (long long) sb.cpu,
                 (long long) sb.memory, pj_egress_mode_to_string(in->egress.mode));

        SANDBOX_LOCK_GUARD(lock, c, sb.id);
        char reason[512] = "";
        if (in->persistent) {
                char vid[25];
                r = create_implicit_volume(c, acc, plan, g, sb.id, in->persistent_disk_gb, sb.mount_path, vid, err);
                if (r < 0) {
                        snprintf(reason, sizeof(reason), "%s", err->message);
                        goto fail;
                }
                implicit_volume = true;
                sb.volume_id = xstrdup(vid);
        } else if (in->volume_id) {
                r = store_volume_attach(c->store, in->volume_id, sb.id, sb.mount_path, now);
                if (r < 0) {
                        r = API_ERR(err, -EBUSY, "Volume is attached to another sandbox; destroy that sandbox first");
                        snprintf(reason, sizeof(reason), "%s", err->message);
                        goto fail;
                }
        }

        int64_t t2 = mono_ms();
        if (!claimed) {
                struct placement pl = { 0 };
                r = c->drv->ops->place(c->drv, &sb, &pl, reason, sizeof(reason));
                metrics_observe_phase(c->metrics, "place", (double) (mono_ms() - t2) / 1000.0);
                if (r < 0) {
                        r = API_ERR(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", reason);
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
                if ((r = record_or_unplace(c, &sb, reason, sizeof(reason), err)) < 0)
                        goto fail;
                fault_point("create.placed");
        } else {
                sandbox_log_ctx(&sb);
                log_info("sandbox claimed from pool %s", pool->name);
                fault_point("pool.claim.committed");
        }
        /* Ready only once the node's agent enforces the policy: fail closed otherwise. */
        {
                char eerr[384] = "";
                r = ctl_egress_apply(c, &sb, NULL, eerr, sizeof(eerr));
                if (r < 0) {
                        unplace_unenforced(c, &sb);
                        snprintf(reason, sizeof(reason), "Egress policy could not be enforced: %s", eerr);
                        r = API_ERR(err, -EHOSTUNREACH, "%s", reason);
                        goto fail;
                }
                fault_point("create.egress_applied");
        }
        /* A pool member ran its template's start when it was made. */
        if (!claimed && template_start(c, &sb, reason, sizeof(reason)) < 0) {
                unplace_unenforced(c, &sb);
                r = API_ERR(err, -EHOSTUNREACH, "Sandbox provisioning failed: %s", reason);
                goto fail;
        }
        if (claimed) {
                /* The claim: from the pool's transaction to the policy in force. */
                sb_timings_set(&sb.timings, SB_PHASE_CLAIM, mono_ms() - t1);
                metrics_observe_phase(c->metrics, "claim", (double) (mono_ms() - t1) / 1000.0);
        }
        sb_timings_set(&sb.timings, SB_PHASE_TOTAL, mono_ms() - t0);
        sb.status = SB_READY;
        if ((r = record_or_unplace(c, &sb, reason, sizeof(reason), err)) < 0)
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
        replace_str(&sb.failure_reason, reason);
        replace_str(&sb.destroy_reason, "failed");
        sb.destroyed_at = now_ms();
        (void) store_sandbox_update_cas(c->store, &sb, SB_STARTING);  /* if this fails too, the stuck-starting reaper heals it */
        sandbox_lock_release(&lock);
        log_ctx_set("DESTROY_REASON", "failed");
        log_error("sandbox provisioning failed: %s", reason);
        sandbox_log_ctx_clear();
        ctl_notify_status(c);
        return r;
}

/* 1 when no snapshot of the sandbox is being taken (its commit reads the container), 0 when
 * one is, -errno when the store cannot say. */
static int no_snapshot_in_flight(struct ctl *c, const char *id) {
        int64_t n = 0;
        int r = store_snapshot_count_creating(c->store, id, &n);
        return r < 0 ? r : n == 0;
}

#define DESTROY_SNAPSHOT_WAIT_S 10

int sandbox_destroy(struct ctl *c, const char *id, const char *reason, struct api_error *err) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        char derr[256] = "";
        int r;

        {
                SANDBOX_LOCK_GUARD(lock, c, id);
                r = store_sandbox_get(c->store, id, &sb);
                if (r == -ENOENT)
                        return API_ERR(err, -ENOENT, "Sandbox not found");
                if (r < 0)
                        return API_ERR(err, -EIO, "Failed to read the sandbox record");
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
                r = c->drv->ops->remove(c->drv, &sb, derr, sizeof(derr));
                if (r < 0) {
                        sandbox_lock_release(&lock);
                        sandbox_log_ctx(&sb);
                        log_ctx_set("DESTROY_REASON", reason);
                        log_error("sandbox destroy failed: %s", derr);
                        sandbox_log_ctx_clear();
                        return API_ERR(err, -EHOSTUNREACH, "Could not destroy the sandbox right now: %s. Retry the request.", derr);
                }
                fault_point("destroy.removed");
                (void) ctl_egress_remove(c, &sb, derr, sizeof(derr));
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
        return r < 0 ? API_ERR(err, -EIO, "Failed to record the destroy") : 0;
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

void sandbox_memory_forget(struct ctl *c, const char *id) {
        _cleanup_free_ char *key = memory_key(id);
        (void) store_meta_put(c->store, key, NULL);
}

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
        char derr[256] = "";
        sandbox_log_ctx(sb);
        /* sandbox_pause waited for snapshots to settle; one started since then (before the
         * pause took the lock: snapshot_create checks the status under it) is waited for too,
         * within the same bound: its commit reads the container being removed. */
        int64_t until = mono_ms() + (int64_t) c->cfg->pause_wait_s * 1000;
        int quiet;
        while ((quiet = no_snapshot_in_flight(c, sb->id)) == 0 && mono_ms() < until && !c->stopping)
                usleep(100 * 1000);
        if (quiet <= 0) {
                snprintf(derr, sizeof(derr), "%s", quiet < 0 ? "the snapshot records could not be read"
                                                             : "a snapshot of the sandbox is being taken; pause once it is ready");
                log_warning("sandbox not paused: %s", derr);
                sb->status = SB_READY;
                _cleanup_free_ char *why = xasprintf("The pause did not happen: %s", derr);
                replace_str(&sb->failure_reason, why);
                return;
        }
        if (c->drv->ops->remove(c->drv, sb, derr, sizeof(derr)) < 0) {
                /* Still running: back to ready, as it was; the user may retry. The reason is on
                 * the record for the answer (sandbox_pause) and for GET. */
                log_error("sandbox pause failed: %s", derr);
                sb->status = SB_READY;
                _cleanup_free_ char *why = xasprintf("The pause did not happen: %s", derr);
                replace_str(&sb->failure_reason, why);
        } else {
                replace_str(&sb->failure_reason, NULL);
                (void) ctl_egress_remove(c, sb, derr, sizeof(derr));
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
        char derr[384] = "";
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
        if (c->drv->ops->checkpoint(c->drv, sb, name, &bytes, &stopped, derr, sizeof(derr)) < 0) {
                log_error("sandbox pause with memory failed: %s", derr);
                _cleanup_free_ char *why = NULL, *cause = xstrdup(derr);
                if (stopped && c->drv->ops->remove(c->drv, sb, derr, sizeof(derr)) >= 0) {
                        why = xasprintf("Memory was not kept: %s; the sandbox was paused with its filesystem only", cause);
                        (void) ctl_egress_remove(c, sb, derr, sizeof(derr));
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
        _cleanup_free_ char *key = memory_key(sb->id), *val = xasprintf("%s %lld", name, (long long) bytes);
        if (store_meta_put(c->store, key, val) < 0)
                log_error("failed to record the checkpoint %s of the paused sandbox", name);
        replace_str(&sb->failure_reason, NULL);
        (void) ctl_egress_remove(c, sb, derr, sizeof(derr));
        sb->status = SB_PAUSED;
        sb->paused_at = now_ms();
        log_info("sandbox paused with its memory in %lldms (checkpoint %s, %lld bytes)", (long long) (mono_ms() - t0), name,
                 (long long) bytes);
}

static void pause_memory_job(struct ctl *c, void *id) {
        settle_job(c, id, SB_PAUSING, "pause", pause_memory_step);
}

/* A sandbox paused with its memory is restored in place; when that fails, its workload goes
 * and the resume starts it afresh from the filesystem, the record saying memory was lost and
 * why (failure_reason on a ready sandbox, which sandbox_resume answers with). Returns 1 when
 * restored, 0 when the caller is to start it afresh. */
static int resume_memory(struct ctl *c, struct sandbox *sb, char **ret_lost) {
        _cleanup_free_ char *ckpt = NULL;
        char reason[512] = "", eerr[384] = "";
        struct placement pl = { 0 };
        if (sandbox_memory_kept(c, sb->id, &ckpt, NULL) < 0)
                return 0;
        if (!c->drv->ops->restore)
                snprintf(reason, sizeof(reason), "this server's driver cannot restore a checkpoint");
        else if (c->drv->ops->restore(c->drv, sb, ckpt, &pl, reason, sizeof(reason)) == 0) {
                if (ctl_egress_apply(c, sb, NULL, eerr, sizeof(eerr)) == 0) {
                        apply_placement(sb, &pl);
                        placement_clear(&pl);
                        sandbox_memory_forget(c, sb->id);
                        return 1;
                }
                placement_clear(&pl);
                snprintf(reason, sizeof(reason), "Egress policy could not be enforced: %s", eerr);
        }
        log_error("sandbox restore with memory failed, starting it from its filesystem: %s", reason);
        char derr[256] = "";
        if (c->drv->ops->remove(c->drv, sb, derr, sizeof(derr)) < 0)
                log_warning("could not remove the kept workload: %s", derr);
        sandbox_memory_forget(c, sb->id);
        replace_str(&sb->container_id, NULL);
        replace_str(&sb->ip, NULL);
        *ret_lost = xasprintf("Memory was lost: %s. The sandbox was started afresh from its filesystem", reason);
        return 0;
}

static void resume_step(struct ctl *c, struct sandbox *sb) {
        struct placement pl = { 0 };
        char reason[512] = "", eerr[384] = "";
        int64_t t0 = mono_ms();
        bool ok = false;
        _cleanup_free_ char *lost = NULL;
        log_ctx_set("EGRESS_MODE", pj_egress_mode_to_string(sb->egress.mode));
        if (resume_memory(c, sb, &lost) == 1) {
                replace_str(&sb->failure_reason, NULL);
                sb->status = SB_READY;
                sb->paused_at = 0;
                sb->last_activity_at = now_ms();
                sb_timings_set(&sb->timings, SB_PHASE_RESUME, mono_ms() - t0);
                log_info("sandbox resumed with its memory in %lldms", (long long) (mono_ms() - t0));
                return;
        }
        if (c->drv->ops->place(c->drv, sb, &pl, reason, sizeof(reason)) == 0) {
                /* Nothing runs on failure (place unwinds). */
                apply_placement(sb, &pl);
                placement_clear(&pl);
                sandbox_log_ctx(sb);
                /* On the record before the apply, as in create: a node.sync meanwhile keeps it. */
                if (store_sandbox_update_cas(c->store, sb, SB_RESUMING) < 0) {
                        unplace_unenforced(c, sb);
                        replace_str(&sb->container_id, NULL);
                        snprintf(reason, sizeof(reason), "failed to record the placement");
                } else if (fault_point("resume.placed"), ctl_egress_apply(c, sb, NULL, eerr, sizeof(eerr)) == 0) {
                        ok = template_start(c, sb, reason, sizeof(reason)) == 0;
                        if (!ok) {
                                unplace_unenforced(c, sb);
                                replace_str(&sb->container_id, NULL);
                        }
                } else {
                        unplace_unenforced(c, sb);
                        replace_str(&sb->container_id, NULL);
                        snprintf(reason, sizeof(reason), "Egress policy could not be enforced: %s", eerr);
                }
        }
        if (!ok) {
                /* A platform fault (no capacity, the image, the node's agent): the sandbox stays
                 * paused as it was, its volume kept; the user may retry or destroy it. Nothing
                 * of the attempt runs (place and the steps above unwound it). */
                log_error("sandbox resume failed, still paused: %s", reason);
                sb->status = SB_PAUSED;
                replace_str(&sb->container_id, NULL);
                replace_str(&sb->ip, NULL);
                _cleanup_free_ char *why = xasprintf("The resume did not happen: %s", reason);
                replace_str(&sb->failure_reason, why);
        } else {
                replace_str(&sb->failure_reason, lost);
                sb->status = SB_READY;
                sb->paused_at = 0;
                sb->last_activity_at = now_ms();
                sb_timings_set(&sb->timings, SB_PHASE_RESUME, mono_ms() - t0);
                log_info("sandbox resumed in %lldms", (long long) (mono_ms() - t0));
        }
}

static void resume_job(struct ctl *c, void *id) {
        settle_job(c, id, SB_RESUMING, "resume", resume_step);
}

static int transition(struct ctl *c, const struct sandbox *sb, enum sb_status from, enum sb_status to, const char *verb,
                      void (*job)(struct ctl *, void *), struct api_error *err) {
        if (sb->status != from)
                return API_ERR(err, -EBUSY, "Sandbox is %s; only %s sandboxes can be %s", sb_status_str(sb->status),
                               sb_status_str(from), verb);
        int r = store_sandbox_cas_status(c->store, sb->id, from, to);
        if (r == -ESTALE)
                return API_ERR(err, -ESTALE, "Sandbox changed status meanwhile; fetch it and retry");
        if (r < 0)
                return API_ERR(err, -EIO, "Failed to update the sandbox record");
        ctl_notify_status(c);
        r = ctl_spawn_job(c, job, xstrdup(sb->id));
        if (r < 0) {
                (void) store_sandbox_cas_status(c->store, sb->id, to, from);
                return API_ERR(err, -EAGAIN, "Server is shutting down; retry shortly");
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
                   const char *verb, struct api_error *err) {
        _cleanup_sandbox_ struct sandbox now = { 0 };
        int k = ctl_wait_sandbox(c, id, via == SB_PAUSING ? not_pausing : not_resuming, NULL, (int64_t) wait_s * 1000, &now);
        if (k < 0)
                return API_ERR(err, -EIO, "Failed to read the sandbox record");
        if (k == 0)
                return API_ERR(err, -EINPROGRESS, "Sandbox is still %s after %llus; GET it to see how it ends",
                               sb_status_str(via), (unsigned long long) wait_s);
        if (now.status == want)
                return 0;
        if (now.status == SB_READY || now.status == SB_PAUSED)
                return API_ERR(err, -EHOSTUNREACH, "%s. The sandbox is %s, as it was; retry the request.",
                               now.failure_reason ? now.failure_reason : "The transition did not happen", sb_status_str(now.status));
        return API_ERR(err, -EBUSY, "Sandbox was not %s: it is %s now", verb, sb_status_str(now.status));
}

/* Pause answers once the sandbox is paused (200), or with the reason it is not (503, still
 * ready and usable), so a client that pauses and then resumes at once finds it paused. The
 * wait is bounded by [scheduler] pause_wait; past it the answer is 504, never a success. */
int sandbox_pause(struct ctl *c, const struct sandbox *sb, bool keep_memory, struct api_error *err) {
        if (keep_memory) {
                if (!c->drv->ops->checkpoint)
                        return API_ERR(err, -EOPNOTSUPP, "keepMemory: pausing with the memory kept needs the local (docker) "
                                                         "driver; this server's %s driver keeps the filesystem only",
                                       c->drv->name);
                if (sb->egress.mode != PJ_EGRESS_DENY_ALL)
                        return API_ERR(err, -EINVAL, "keepMemory: only sandboxes with egress deny_all can be paused with "
                                                     "their memory (gVisor cannot checkpoint host networking); this one's "
                                                     "egress is %s: pause it without keepMemory",
                                       pj_egress_mode_to_string(sb->egress.mode));
                char why[384] = "";
                if (c->drv->ops->checkpoint_ready && c->drv->ops->checkpoint_ready(c->drv, why, sizeof(why)) < 0)
                        return API_ERR(err, -EOPNOTSUPP, "keepMemory: this server cannot keep memory now: %s", why);
        }
        /* A snapshot being taken reads the container: the pause waits for it (a pause right
         * after POST /snapshots is what SDK flows do), within the same bound. */
        int64_t until = mono_ms() + (int64_t) c->cfg->pause_wait_s * 1000;
        int quiet;
        while ((quiet = no_snapshot_in_flight(c, sb->id)) == 0 && mono_ms() < until && !c->stopping)
                usleep(100 * 1000);
        if (quiet < 0)
                return API_ERR(err, -EIO, "Failed to read the sandbox's snapshots");
        if (quiet == 0)
                return API_ERR(err, -EHOSTUNREACH, "A snapshot of the sandbox is still being taken after %llus; the sandbox "
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
        return API_ERR(err, -EHOSTUNREACH, "%s", now.failure_reason ? now.failure_reason : "Memory was not kept");
}

/* A resume that finds the sandbox pausing waits for the pause to settle (at most [scheduler]
 * create_timeout, the bound on provisioning work, whatever pause_wait says), then resumes it;
 * resuming or ready sandboxes are refused as before. It answers once the sandbox is ready, or
 * with the reason it is still paused. */
int sandbox_resume(struct ctl *c, const struct sandbox *sb, char **ret_note, struct api_error *err) {
        _cleanup_sandbox_ struct sandbox now = { 0 };
        if (sb->status == SB_PAUSING) {
                int k = ctl_wait_sandbox(c, sb->id, not_pausing, NULL, (int64_t) c->cfg->create_timeout_s * 1000, &now);
                if (k < 0)
                        return API_ERR(err, -EIO, "Failed to read the sandbox record");
                if (k == 0)
                        return API_ERR(err, -EBUSY, "Sandbox is still pausing after %llus; resume it once it is paused",
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
                       struct sandbox *ret, bool *ret_network_updated, struct api_error *err) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(sb_egress_done) struct sb_egress want = { 0 };
        char eerr[384] = "";
        int r;

        if (sb_egress_from_pj(&want, in) < 0)
                return API_ERR(err, -EINVAL, "allow: an entry could not be read; check the allowlist");
        if ((r = ctl_egress_check_allow(&want, err)) < 0)
                return r;
        if (!ctl_egress_enforced(c))
                return API_ERR(err, -EOPNOTSUPP,
                               "Changing egress needs a node agent, and this server has none ([amqp] url is not set)");

        SANDBOX_LOCK_GUARD(lock, c, id);
        if ((r = sandbox_load(c, acc, id, &sb, err)) < 0)
                return r;
        if (sb.status != SB_READY)
                return API_ERR(err, -EBUSY, "Sandbox is %s; egress can be changed only while it is ready",
                               sb_status_str(sb.status));
        if ((!sb.ip || !*sb.ip) && want.mode != PJ_EGRESS_DENY_ALL)
                return API_ERR(err, -EINVAL,
                               "This sandbox was created with egress deny_all and has no network interface; create a new "
                               "sandbox with the policy you want");

        SANDBOX_LOG_CTX_SCOPE;
        sandbox_log_ctx(&sb);
        log_ctx_set("EGRESS_MODE", pj_egress_mode_to_string(want.mode));
        if (sb.ip && *sb.ip) {
                r = ctl_egress_apply(c, &sb, &want, eerr, sizeof(eerr));
                if (r < 0) {
                        /* The agent swaps a policy atomically, so a refusal leaves the old one; after a
                         * timeout we cannot know, so the old policy is applied again. */
                        char e2[384] = "";
                        bool restored = r == -EREMOTEIO || r == -ENXIO || ctl_egress_apply(c, &sb, NULL, e2, sizeof(e2)) == 0;
                        if (!restored)
                                log_error("could not re-apply the previous egress policy either: %s", e2);
                        return API_ERR(err, -EHOSTUNREACH, "Egress policy could not be enforced: %s. %s", eerr,
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
                return API_ERR(err, r == -ESTALE ? -ESTALE : -EIO,
                               "The new policy is applied but could not be recorded; retry the request");
        }
        log_info("sandbox egress changed to %s", pj_egress_mode_to_string(sb.egress.mode));
        *ret_network_updated = changed;
        *ret = sb;
        sb = (struct sandbox) { 0 };
        return 0;
}
