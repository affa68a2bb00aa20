/* fork.c — copies of a running sandbox, memory and filesystem (issue 37; E2B's fork).
 *
 * Under the source's lock: its workload is checkpointed (gVisor; it stops), the driver stages
 * copies of its filesystem and checkpoint, and the source is restored in place and runs on: it
 * is away only for that (about what a pause and a resume with memory take). Then each child is
 * created as any sandbox of the caller's account (the plan's limits and concurrency count it,
 * a record of its own, its own id, agent secret and egress), placed from the staged copies
 * instead of started afresh. The staging is removed at the end. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "ctl-egress.h"
#include "driver.h"
#include "fault.h"
#include "log.h"
#include "pj_api.h"
#include "sandbox-private.h"
#include "sandbox.h"
#include "strutil.h"

/* The source came back from its checkpoint, or was started afresh when that failed (its
 * record then says memory was lost and why). 0, or -errno when it could not run again. */
static int source_back(struct ctl *c, struct sandbox *src, const char *name, bool checkpointed) {
        struct placement pl = { 0 };
        struct err reason = { 0 }, eerr = { 0 }, derr = { 0 };
        if (checkpointed && sandbox_restore_in_place(c, src, name, &reason) == 1)
                return store_sandbox_update(c->store, src) < 0 ? -EIO : 0;
        if (!checkpointed) {
                err_set(&reason, -EIO, "the checkpoint stopped it");
                (void) c->drv->ops->remove(c->drv, src, &derr);
                replace_str(&src->container_id, NULL);
                replace_str(&src->ip, NULL);
        }
        log_error("fork: the source did not come back from its checkpoint (%s); starting it from its filesystem",
                  reason.message);
        _cleanup_free_ char *lost = xasprintf("Memory was lost in a fork: %s. The sandbox was started afresh from its "
                                              "filesystem", reason.message);
        replace_str(&src->failure_reason, lost);
        int r = c->drv->ops->place(c->drv, src, &pl, &derr);
        if (r == 0) {
                apply_placement(src, &pl);
                placement_clear(&pl);
                r = ctl_egress_apply(c, src, NULL, &eerr);
        }
        if (r < 0) {
                src->status = SB_FAILED;
                replace_str(&src->destroy_reason, "failed");
                src->destroyed_at = now_ms();
        }
        (void) store_sandbox_update(c->store, src);
        ctl_notify_status(c);
        return r < 0 ? r : 0;
}

/* What a child is made with: the source's template, specs, egress (deny_all), variables,
 * metadata and E2B options; its own lifetime. */
static void child_input(const struct sandbox *src, int64_t timeout_s, struct pj_sandbox_create *in) {
        memset(in, 0, sizeof(*in));
        in->template_name = src->template_name;
        in->has_cpu = in->has_memory = in->has_disk = true;
        in->cpu = (int) src->cpu;
        in->memory = (int) src->memory;
        in->disk = (int) src->disk;
        in->egress_set = true;
        in->egress.mode = PJ_EGRESS_DENY_ALL;
        in->metadata_json = sb_map_to_text(&src->metadata);
        in->env_json = sb_map_to_text(&src->env);
        in->e2b_json = src->e2b.set ? sb_e2b_to_text(&src->e2b) : NULL;
        in->lifetime_s = timeout_s > 0 ? timeout_s : src->run_s;
}

/* Copies made at once: each is a container create and a restore, mostly Docker's and runsc's
 * work; more than this only queues there. */
#define FORK_PARALLEL 4

struct child_job {
        struct ctl *c;
        const struct account *acc;
        const struct sandbox *src;      /* read only while the jobs run */
        const char *name;
        struct pj_sandbox_create in;
        struct sandbox_fork_result *res;
};

static void *child_main(void *p) {
        struct child_job *j = p;
        log_ctx_reset();
        j->res->r = sandbox_create_from(j->c, j->acc, &j->in, j->src, j->name, &j->res->sb, &j->res->err);
        log_ctx_reset();
        return NULL;
}

int sandbox_fork(struct ctl *c, const struct account *acc, const struct sandbox *src0, int count, int64_t timeout_s,
                 struct sandbox_fork_result *res, struct err *err) {
        const struct driver_ops *ops = c->drv->ops;
        if (count < 1 || count > SANDBOX_FORK_MAX)
                return err_set_field(err, -EINVAL, "count", "count must be 1 to %d (it is %d)", SANDBOX_FORK_MAX, count);
        if (!ops->fork_stage || !ops->checkpoint || !ops->restore)
                return err_set(err, -EOPNOTSUPP, "this server's %s driver cannot fork a sandbox (the local Docker driver can)",
                               c->drv->name);
        /* A copy restores the source's network stack as it was: its address and its connections. */
        if (src0->egress.mode != PJ_EGRESS_DENY_ALL)
                return err_set(err, -EINVAL, "only a sandbox without network (egress deny_all) can be forked: each copy "
                                             "would come up with the source's network address and connections");
        struct err why = { 0 };
        switch (sandbox_memory_refusal(c, src0->egress.mode, &why)) {
        case MEMORY_OK:
                break;
        case MEMORY_NO_DRIVER:
                return err_set(err, -EOPNOTSUPP, "this server's %s driver cannot fork a sandbox", c->drv->name);
        case MEMORY_NETWORKED:
                return err_set(err, -EINVAL, "only a sandbox without network (egress deny_all) can be forked: gVisor cannot "
                                             "checkpoint the host networking the others use");
        case MEMORY_NOT_READY:
                return err_set(err, -EOPNOTSUPP, "%s", why.message);
        }
        if (src0->volume_id)
                return err_set(err, -EINVAL, "a sandbox with a volume cannot be forked: the copies would share the volume");

        _cleanup_sandbox_ struct sandbox src = { 0 };
        /* fk<this controld's 12><random 8>: its start sweeps what a fork cut short left (docker-fork.c) */
        char rnd[HEXID_LEN + 1];
        hexid_new(rnd);
        _cleanup_free_ char *name = xasprintf("fk%.12s%.8s", c->instance_id ? c->instance_id : "000000000000", rnd);
        int64_t t0 = mono_ms();
        {
                SANDBOX_LOCK_GUARD(lock, c, src0->id);
                if (store_sandbox_get(c->store, src0->id, &src) < 0 || src.status == SB_DESTROYED || src.status == SB_FAILED)
                        return err_set(err, -ENOENT, "Sandbox not found");
                if (src.status != SB_READY || !src.container_id)
                        return err_set(err, -EBUSY, "The sandbox is %s; only a running sandbox can be forked",
                                       sb_status_str(src.status));
                if (no_snapshot_in_flight(c, src.id) != 1)
                        return err_set(err, -EBUSY, "A snapshot of the sandbox is being taken; fork it once that is done");
                sandbox_log_ctx(&src);
                int64_t bytes = 0;
                bool stopped = false;
                struct err derr = { 0 };
                if (ops->checkpoint(c->drv, &src, name, &bytes, &stopped, &derr) < 0) {
                        log_error("fork: the checkpoint failed: %s", derr.message);
                        int r = err_set(err, -EIO, "The fork failed: %s", derr.message);
                        if (stopped)
                                (void) source_back(c, &src, name, false);
                        return r;
                }
                int staged = ops->fork_stage(c->drv, &src, name, &derr);
                /* the copies are of the checkpoint, whatever becomes of the source */
                (void) source_back(c, &src, name, true);
                log_info("fork: the source was away %lld ms (checkpoint of %lld bytes)", (long long) (mono_ms() - t0),
                         (long long) bytes);
                if (staged < 0) {
                        ops->fork_unstage(c->drv, &src, name);
                        return err_set(err, staged == -EOPNOTSUPP ? -EOPNOTSUPP : -EIO, "The fork failed: %s", derr.message);
                }
        }
        fault_point("fork.staged");   /* crash tests: the source back, the staging not yet used */
        /* the copies at once (at most FORK_PARALLEL), each from its own copy of the staging */
        _cleanup_free_ struct child_job *jobs = xnew0(struct child_job, (size_t) count);
        _cleanup_free_ pthread_t *th = xnew0(pthread_t, (size_t) count);
        _cleanup_free_ bool *started = xnew0(bool, (size_t) count);
        for (int i = 0; i < count; i++) {
                jobs[i] = (struct child_job) { .c = c, .acc = acc, .src = &src, .name = name, .res = &res[i] };
                child_input(&src, timeout_s, &jobs[i].in);
        }
        for (int i = 0; i < count; i++) {
                if (i >= FORK_PARALLEL && started[i - FORK_PARALLEL]) {
                        pthread_join(th[i - FORK_PARALLEL], NULL);
                        started[i - FORK_PARALLEL] = false;
                }
                started[i] = pthread_create(&th[i], NULL, child_main, &jobs[i]) == 0;
                if (!started[i])
                        child_main(&jobs[i]);
        }
        for (int i = 0; i < count; i++) {
                if (started[i])
                        pthread_join(th[i], NULL);
                free_many(jobs[i].in.metadata_json, jobs[i].in.env_json, jobs[i].in.e2b_json);
                if (res[i].r == 0)
                        log_info("fork: sandbox %s is a copy of %s", res[i].sb.id, src.id);
        }
        ops->fork_unstage(c->drv, &src, name);
        log_info("fork of %d done in %lld ms", count, (long long) (mono_ms() - t0));
        log_ctx_reset();
        return 0;
}
