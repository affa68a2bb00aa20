/* background.c — periodic work: stats samples, usage metering, and the controld reapers
 * (expired sandboxes, one-shot exits, stuck 'starting', paused too long, vanished workloads). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "log.h"
#include "nodebus.h"
#include "strutil.h"
#include "background.h"
#include "ctl-egress.h"
#include "pool.h"
#include "runtime.h"
#include "sandbox.h"
#include "snapshot.h"
#include "template.h"

static pthread_t bg_thread;
static bool bg_started;

/* The previous sample of each sandbox, so rates come from our own interval
 * (a one-shot Docker sample has no previous one). Only the background thread uses it. */
struct prev_sample { char id[25]; uint64_t net, cpu_ns, sys_ns; int64_t ts; };
static struct prev_sample prev[1024];

static void rates(const char *id, const struct driver_sample *s, int64_t ts, double *ret_cpu, double *ret_net) {
        unsigned h = 0;
        for (const char *p = id; *p; p++)
                h = h * 31 + (unsigned char) *p;
        struct prev_sample *e = &prev[h % ELEMENTSOF(prev)];
        *ret_cpu = s->cpu_percent;
        *ret_net = 0;
        if (!strcmp(e->id, id) && ts > e->ts) {
                if (s->net_bytes >= e->net)
                        *ret_net = (double) (s->net_bytes - e->net) * 1000.0 / (double) (ts - e->ts);
                if (s->system_ns > e->sys_ns && s->cpu_total_ns >= e->cpu_ns)
                        *ret_cpu = (double) (s->cpu_total_ns - e->cpu_ns) / (double) (s->system_ns - e->sys_ns) *
                                   (s->online_cpus ? s->online_cpus : 1) * 100.0;
        }
        /* The published range is 0-100 (percent of one CPU, saturated). */
        if (*ret_cpu > 100)
                *ret_cpu = 100;
        snprintf(e->id, sizeof(e->id), "%s", id);
        e->net = s->net_bytes;
        e->cpu_ns = s->cpu_total_ns;
        e->sys_ns = s->system_ns;
        e->ts = ts;
}

/* Samples every ready sandbox and meters usage for the elapsed interval. */
static void sample_and_meter(struct ctl *c, int64_t dt_ms) {
        struct sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list_status(c->store, NULL, SB_READY, &a, &n) < 0)
                return;
        int64_t now = now_ms();
        char period[8];
        store_usage_period(now, period);
        for (size_t i = 0; i < n && !c->stopping; i++) {
                struct driver_sample s;
                if (c->drv->ops->sample(c->drv, &a[i], &s) == 0 && s.valid) {
                        double cpu, net;
                        rates(a[i].id, &s, now, &cpu, &net);
                        store_stats_add(c->store, a[i].id, now, cpu, s.mem_percent, net);
                }
                const struct plan *p = NULL;
                struct account acc = { 0 };
                if (store_account_get(c->store, a[i].account_id, &acc) == 0)
                        p = config_plan(c->cfg, acc.plan);
                double secs = (double) dt_ms / 1000.0;
                double cost = p ? ((double) a[i].cpu * p->price_cpu_mhz_hour + (double) a[i].memory * p->price_mb_hour) * secs / 3600.0 : 0;
                store_usage_add(c->store, a[i].account_id, period, (double) a[i].cpu * secs, (double) a[i].memory * secs, cost);
                account_clear(&acc);
        }
        sandbox_array_free(a, n);
        store_stats_prune(c->store, now - (int64_t) c->cfg->stats_retention_s * 1000);
}

/* Why the reaper should destroy sb, or NULL. sb must be fresh (read under the sandbox lock):
 * deciding from a stale list is how a sandbox paused a moment ago got destroyed as "failed"
 * (its container was gone because the pause removed it). */
static const char *reap_reason(struct ctl *c, const struct sandbox *sb, int64_t now, int *ret_code, bool *ret_pause) {
        switch (sb->status) {
        case SB_FAILED:     /* its workload, if any, is an orphan: reap_orphans removes it */
        case SB_DESTROYED:
        case _SB_STATUS_MAX:
                return NULL;
        case SB_STARTING:
        case SB_READY:
        case SB_PAUSING:
        case SB_PAUSED:
        case SB_RESUMING:
                break;
        }
        if (now >= sb->expires_at && !sb->pause_at_end)
                return sb->auto_destroy ? "idle_ttl" : "max_lifetime";
        /* Its lifecycle says pause: a ready one is paused (background_reap_one); a paused one
         * stays so, under paused_max like any other, until its owner resumes it. */
        if (now >= sb->expires_at && sb->status == SB_READY) {
                *ret_pause = true;
                return sb->auto_destroy ? "idle_ttl" : "max_lifetime";
        }
        if (sb->status == SB_PAUSED && sb->paused_at && now - sb->paused_at > (int64_t) c->cfg->paused_max_s * 1000)
                return "paused_too_long";
        if (sb->status == SB_STARTING && now - sb->created_at > (int64_t) c->cfg->stuck_starting_s * 1000)
                return "failed";
        if (sb->status == SB_READY) {
                int code = 0;
                /* A runtime operation still in flight reports how the sandbox died (out of
                 * memory, say) from the container's state: it must find it there first. It ends
                 * soon (its own liveness checks and deadline); the next round reaps. */
                if (c->drv->ops->running(c->drv, sb, &code) == 0 && runtime_active(sb->id) == 0) {
                        *ret_code = code;
                        return sb->one_shot ? "one_shot_stopped" : "failed";
                }
        }
        return NULL;
}

/* Pauses at a sandbox's end run as jobs (a pause may take a snapshot first: seconds), at most
 * END_PAUSES at once, one per sandbox: the reaper passes every second and must not start a
 * second one while the first has not moved the sandbox out of ready. */
#define END_PAUSES 16
static pthread_mutex_t end_lock = PTHREAD_MUTEX_INITIALIZER;
static char end_ids[END_PAUSES][SANDBOX_ID_LEN + 1];

struct end_pause {
        int slot;
        char reason[32];
};

static void end_pause_job(struct ctl *c, void *arg) {
        struct end_pause *p = arg;
        log_ctx_set("SANDBOX_ID", end_ids[p->slot]);
        (void) sandbox_pause_at_end(c, end_ids[p->slot], p->reason);
        log_ctx_reset();
        pthread_mutex_lock(&end_lock);
        end_ids[p->slot][0] = 0;
        pthread_mutex_unlock(&end_lock);
        ctl_notify_status(c);
}

static int end_pause_start(struct ctl *c, const char *id, const char *why) {
        int slot = -1;
        pthread_mutex_lock(&end_lock);
        for (int i = 0; i < END_PAUSES; i++) {
                if (!strcmp(end_ids[i], id)) {
                        pthread_mutex_unlock(&end_lock);
                        return 0;   /* under way */
                }
                if (slot < 0 && !end_ids[i][0])
                        slot = i;
        }
        if (slot >= 0)
                strscpy(end_ids[slot], id, sizeof(end_ids[slot]));
        pthread_mutex_unlock(&end_lock);
        if (slot < 0)
                return 0;   /* as many under way as allowed: the next pass */
        struct end_pause *p = xmalloc(sizeof(*p));
        p->slot = slot;
        strscpy(p->reason, why, sizeof(p->reason));
        log_info("sandbox at its end (%s): pausing it, as its lifecycle says", why);
        int r = ctl_spawn_job(c, end_pause_job, p);
        if (r < 0) {
                pthread_mutex_lock(&end_lock);
                end_ids[slot][0] = 0;
                pthread_mutex_unlock(&end_lock);
        }
        return r < 0 ? r : 0;
}

int background_reap_one(struct ctl *c, const char *id, int64_t now) {
        struct sandbox sb = { 0 };
        struct err derr = { 0 };
        int r;

        ctl_sandbox_lock(c, id);
        r = store_sandbox_get(c->store, id, &sb);
        if (r < 0)
                goto out;
        int code = -1;
        bool pause = false;
        const char *why = reap_reason(c, &sb, now, &code, &pause);
        if (!why) {
                r = sandbox_memory_retention(c, &sb, now);
                goto out;
        }
        if (pause) {
                r = end_pause_start(c, id, why);
                goto out;
        }
        enum sb_status seen = sb.status;
        sandbox_log_ctx(&sb);
        log_ctx_set("DESTROY_REASON", why);
        log_notice("reaping sandbox: %s", why);
        /* The workload first: if removing it fails, nothing changed and the next round retries. */
        r = c->drv->ops->remove(c->drv, &sb, &derr);
        if (r < 0) {
                log_warning("reaper could not destroy the sandbox: %s", derr.message);
                goto out;
        }
        (void) ctl_egress_remove(c, &sb, &derr);
        sandbox_memory_forget(c, sb.id);   /* a kept checkpoint went with the workload */
        sb.status = SB_DESTROYED;
        sb.destroyed_at = now_ms();
        free(sb.destroy_reason);
        sb.destroy_reason = xstrdup(why);
        if (!strcmp(why, "failed") && seen == SB_READY && !sb.failure_reason)
                /* Its workload is gone (it exited, was killed, or its host was lost): say so and
                 * how, and that the volume, if any, stays. */
                sb.failure_reason = code >= 0 ? xasprintf("The sandbox stopped on its own (exit code %d)%s", code,
                                                          sb.volume_id ? "; its volume is kept" : "")
                                              : xasprintf("The sandbox's workload is gone (its host or allocation was lost)%s",
                                                          sb.volume_id ? "; its volume is kept" : "");
        r = store_sandbox_update_cas(c->store, &sb, seen);
        if (r == -ESTALE) {
                /* A pause or resume moved it meanwhile (they change status without this lock): the
                 * user's move wins; it finds the workload gone, which is what a pause does anyway. */
                log_info("sandbox changed status while being reaped; left to the newer operation");
                r = 0;
                goto out;
        }
        if (r < 0) {
                log_warning("reaper could not record the destroy: %s", strerror(-r));
                goto out;
        }
        /* Only now: the volume is free once the workload using it is gone and the record says so. */
        store_volume_detach_sandbox(c->store, id, now_ms());
        log_info("sandbox destroyed reason=%s", why);
        snapshot_drop_pause_images(c, sb.account_id, sb.id);
        r = 1;
out:
        log_ctx_set("DESTROY_REASON", NULL);
        ctl_sandbox_unlock(c, id);
        sandbox_clear(&sb);
        if (r > 0)
                ctl_notify_status(c);
        return r;
}

/* Sandboxes at their end (autoDestroy, max lifetime, E2B's timeout) are ended within a second
 * of it, not at the next full reap: this runs every pass of the loop (at least once a second)
 * and reads only the expired ones. */
#define EXPIRED_PER_PASS 64
static void reap_expired(struct ctl *c) {
        struct sandbox *a = NULL;
        size_t n = 0;
        int64_t now = now_ms();
        if (store_sandbox_list_expired(c->store, now, EXPIRED_PER_PASS, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n && !c->stopping; i++) {
                log_ctx_set("SANDBOX_ID", a[i].id);
                (void) background_reap_one(c, a[i].id, now);
        }
        log_ctx_reset();
        sandbox_array_free(a, n);
}

static void reap(struct ctl *c) {
        struct sandbox *a = NULL;
        size_t n = 0;
        int64_t now = now_ms();
        if (store_sandbox_list_status(c->store, NULL, -1, &a, &n) < 0)
                return;
        /* The list only says where to look: background_reap_one decides again from the record. */
        for (size_t i = 0; i < n && !c->stopping; i++) {
                if (a[i].status == SB_DESTROYED || a[i].status == SB_FAILED)
                        continue;
                log_ctx_set("SANDBOX_ID", a[i].id);
                (void) background_reap_one(c, a[i].id, now);
        }
        log_ctx_reset();
        sandbox_array_free(a, n);
        /* Preview URLs of gone sandboxes and expired ones: the proxy refuses them already;
         * this keeps the table from growing. */
        (void) store_preview_prune(c->store, now);
}

/* After a start, no operation of this process is in flight: a record still in a transient
 * status was left by a crash. Heal it towards the state the workload can prove. */
static void reconcile_after_start(struct ctl *c) {
        struct sandbox *a = NULL;
        size_t n = 0;
        /* A volume delete interrupted between its mark and its row removal: lift the mark so the
         * volume can be used or deleted again (its backend volume may or may not still exist;
         * removing a missing one succeeds). */
        if (store_volume_abort_delete(c->store, NULL) < 0)
                log_warning("could not clear interrupted volume deletions");
        if (store_sandbox_list_status(c->store, NULL, -1, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n; i++) {
                struct sandbox *sb = &a[i];
                struct err err = { 0 };
                enum sb_status to = SB_FAILED;
                switch (sb->status) {
                case SB_STARTING:
                        to = SB_FAILED;
                        break;
                case SB_PAUSING:
                case SB_RESUMING:
                        to = SB_PAUSED;
                        break;
                case SB_READY:
                case SB_PAUSED:
                case SB_FAILED:
                case SB_DESTROYED:
                case _SB_STATUS_MAX:
                        continue;
                }
                log_ctx_set("SANDBOX_ID", sb->id);
                ctl_sandbox_lock(c, sb->id);
                /* Cut short with its memory checkpointed (pause) or being restored (resume): the
                 * workload says which state it reached. Stopped with its checkpoint: paused with
                 * its memory. Running again after a resume's restore: ready. */
                if ((sb->status == SB_PAUSING || sb->status == SB_RESUMING) && sb->container_id &&
                    sandbox_memory_kept(c, sb->id, NULL, NULL) == 0) {
                        int running = c->drv->ops->running(c->drv, sb, NULL);
                        enum sb_status seen = sb->status;
                        if (running == 0 || (running == 1 && seen == SB_RESUMING)) {
                                sb->status = running ? SB_READY : SB_PAUSED;
                                if (running) {
                                        sandbox_memory_forget(c, sb->id);
                                        sb->paused_at = 0;
                                        (void) ctl_egress_apply(c, sb, NULL, &err);
                                } else if (!sb->paused_at)
                                        sb->paused_at = now_ms();
                                log_notice("healing sandbox left %s by a crash: now %s, its memory %s", sb_status_str(seen),
                                           sb_status_str(sb->status), running ? "restored" : "kept");
                                if (store_sandbox_update_cas(c->store, sb, seen) < 0)
                                        log_warning("could not record the healed sandbox: it changed meanwhile");
                                ctl_sandbox_unlock(c, sb->id);
                                continue;
                        }
                }
                /* Whatever half-made workload exists goes; the volume stays. */
                if (c->drv->ops->remove(c->drv, sb, &err) < 0) {
                        log_warning("could not heal a sandbox left %s by a crash: %s", sb_status_str(sb->status), err.message);
                        ctl_sandbox_unlock(c, sb->id);
                        continue;
                }
                (void) ctl_egress_remove(c, sb, &err);
                sandbox_memory_forget(c, sb->id);   /* a checkpoint went with the workload */
                log_notice("healing sandbox left %s by a crash: now %s", sb_status_str(sb->status), sb_status_str(to));
                if (to == SB_FAILED) {
                        free(sb->failure_reason);
                        sb->failure_reason = xstrdup("controld stopped while the sandbox was starting");
                        free(sb->destroy_reason);
                        sb->destroy_reason = xstrdup("failed");
                        sb->destroyed_at = now_ms();
                        store_volume_detach_sandbox(c->store, sb->id, now_ms());
                } else if (!sb->paused_at)
                        sb->paused_at = now_ms();
                free(sb->container_id);
                sb->container_id = NULL;
                free(sb->ip);           /* placed before the crash: the address went with the workload */
                sb->ip = NULL;
                enum sb_status seen = sb->status;
                sb->status = to;
                if (store_sandbox_update_cas(c->store, sb, seen) < 0)
                        log_warning("could not record the healed sandbox: it changed meanwhile");
                ctl_sandbox_unlock(c, sb->id);
        }
        log_ctx_reset();
        sandbox_array_free(a, n);
        ctl_notify_status(c);
}

/* Workloads of this instance whose record is gone, destroyed, failed or paused. */
static void reap_orphans(struct ctl *c) {
        char **ids = NULL;
        if (!c->drv->ops->list || c->drv->ops->list(c->drv, &ids) < 0)
                return;
        for (char **p = ids; p && *p && !c->stopping; p++) {
                struct sandbox sb = { 0 };
                ctl_sandbox_lock(c, *p);
                int r = store_sandbox_get(c->store, *p, &sb);
                /* A warm pool member has no sandbox record: its pool row owns it. */
                bool orphan = (r == -ENOENT && !pool_owns(c, *p)) || (r >= 0 && (sb.status == SB_DESTROYED || sb.status == SB_FAILED));
                /* A paused sandbox keeps what the driver keeps for it (on Nomad its job, scaled to
                 * 0): only a workload still running now is stray, and it goes the way a pause
                 * takes it. The list above may predate a pause that finished since. */
                /* Paused with its memory: the stopped workload holds the checkpoint, it is the
                 * sandbox's (and never stray: Docker may say running a moment after the
                 * checkpoint stopped it). */
                bool stray = r >= 0 && sb.status == SB_PAUSED && sandbox_memory_kept(c, sb.id, NULL, NULL) == -ENOENT &&
                             c->drv->ops->running(c->drv, &sb, NULL) == 1;
                if (orphan || stray) {
                        log_ctx_set("SANDBOX_ID", *p);
                        log_notice("removing an orphaned workload (record %s)", r == -ENOENT ? "missing" : sb_status_str(sb.status));
                }
                if (orphan)
                        c->drv->ops->remove_by_id(c->drv, *p);
                else if (stray) {
                        struct err err = { 0 };
                        if (c->drv->ops->remove(c->drv, &sb, &err) < 0)
                                log_warning("could not stop the paused sandbox's workload: %s", err.message);
                }
                ctl_sandbox_unlock(c, *p);
                sandbox_clear(&sb);
        }
        log_ctx_reset();
        strv_free(ids);
}

/* Agent liveness for `controld admin node list`: every known node (and this controld's
 * docker node) is pinged over the node bus once per NODE_PING_INTERVAL_MS; an answer
 * records the contact. Bounded: at most NODE_PING_MAX nodes a round, NODE_PING_TIMEOUT_MS
 * each (an absent agent's queue is gone, so the broker answers that at once). */
#define NODE_PING_INTERVAL_MS 30000
#define NODE_PING_TIMEOUT_MS 2000
#define NODE_PING_MAX 256

static void ping_one(struct ctl *c, const char *node) {
        struct err err = { 0 };
        int r = nodebus_request_ok(c->bus, node, "{\"type\":\"ping\"}", NODE_PING_TIMEOUT_MS, NULL, &err);
        if (r == 0)
                (void) store_node_touch(c->store, node, now_ms());
        else
                log_debug("node %s did not answer a ping: %s", node, err.message);
}

static void ping_nodes(struct ctl *c) {
        struct node_info *n = NULL;
        size_t k = 0;
        bool own_seen = false;
        if (!c->bus || store_node_list(c->store, &n, &k) < 0)
                return;
        for (size_t i = 0; i < k && i < NODE_PING_MAX && !c->stopping; i++) {
                own_seen |= !strcmp(n[i].id, c->cfg->docker_node_id);
                ping_one(c, n[i].id);
        }
        if (!own_seen && !strcmp(c->cfg->driver, "docker") && !c->stopping)
                ping_one(c, c->cfg->docker_node_id);
        free(n);
}

static void *bg_main(void *p) {
        struct ctl *c = p;
        int64_t last_sample = mono_ms(), last_reap = mono_ms(), last_ping = mono_ms() - NODE_PING_INTERVAL_MS;
        log_ctx_reset();
        while (!c->stopping) {
                int64_t now = mono_ms();
                if (now - last_sample >= (int64_t) c->cfg->stats_interval_s * 1000) {
                        sample_and_meter(c, now - last_sample);
                        last_sample = now;
                }
                if (now - last_reap >= (int64_t) c->cfg->reap_interval_s * 1000) {
                        reap(c);
                        reap_orphans(c);
                        last_reap = now;
                }
                reap_expired(c);
                pool_tick(c);
                if (now - last_ping >= NODE_PING_INTERVAL_MS) {
                        ping_nodes(c);
                        last_ping = mono_ms();
                }
                /* Sleep on the status condition so shutdown wakes us at once. */
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_sec += 1;
                pthread_mutex_lock(&c->wait_lock);
                if (!c->stopping)
                        pthread_cond_timedwait(&c->wait_cond, &c->wait_lock, &ts);
                pthread_mutex_unlock(&c->wait_lock);
        }
        return NULL;
}

int background_start(struct ctl *c) {
        /* Before the API serves anything: healing a record must not race a request that
         * touches the same record (a fresh 'starting' one, a volume being deleted). */
        reconcile_after_start(c);
        utpl_recover(c);
        ctl_egress_resync_all(c);
        pool_start(c);
        int r = pthread_create(&bg_thread, NULL, bg_main, c);
        if (r != 0)
                return log_error_errno(-r, "Failed to start the background thread: %m");
        bg_started = true;
        return 0;
}

void background_stop(struct ctl *c) {
        c->stopping = 1;
        ctl_notify_status(c);
        if (bg_started)
                pthread_join(bg_thread, NULL);
        bg_started = false;
}
