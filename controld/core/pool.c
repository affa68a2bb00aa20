/* pool.c — warm pools: sandboxes started ahead of time, each claimed whole by one create.
 *
 * A [pool "<name>"] keeps `size` members of one template, specs and egress class running
 * with their agent up, owned by no account. A create that asks for exactly that (and for
 * nothing a pooled member cannot give: a volume, a snapshot, one-shot) claims the oldest
 * ready member: one store transaction deletes the member's row and inserts the sandbox
 * record with the member's id and placement. The egress apply follows, as on the cold path;
 * until then a networked member has no chain on its node, and the node agent's default is
 * drop. A claimed member is an ordinary sandbox from then on: destroyed after, never
 * returned. A miss takes the cold path without an error.
 *
 * Ownership: a member's row is written before its workload is made and deleted before its
 * workload goes, and a claim moves ownership in one transaction, so every pooled workload
 * has exactly one owner at every instant (reap_orphans asks pool_owns). A controld killed
 * mid-refill leaves a "starting" row: the next start removes its workload and the row.
 *
 * The background thread ticks pool_tick: it retires members older than max_age, made from
 * an image the template no longer names, or whose pool left the config, and starts new
 * ones on job threads, at most refill_rate a minute and POOL_INFLIGHT at once per pool,
 * never on a drained node.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "fault.h"
#include "log.h"
#include "strutil.h"
#include "pool.h"
#include "template.h"

#define POOL_INFLIGHT 2                 /* members being started at once, per pool */
#define POOL_HEALTH_INTERVAL_MS 10000   /* how often ready members' workloads are checked */
#define POOL_FAIL_LOG_MS 60000          /* a pool that cannot refill says so this often at most */
/* A refill waits this long after the pool's last claim unless the pool is empty: starting a
 * container takes both cores of a small node for most of a second, and the claimed
 * sandbox's first commands (what its user waits for) should not share them with it. */
#define POOL_CLAIM_QUIET_MS 1000

static const char *const miss_names[_POOL_MISS_MAX] = {
        [POOL_MISS_NONE] = "none",         [POOL_MISS_NO_POOL] = "no_pool",   [POOL_MISS_VOLUME] = "volume",
        [POOL_MISS_SNAPSHOT] = "snapshot", [POOL_MISS_ONE_SHOT] = "one_shot",
        [POOL_MISS_NO_AGENT] = "restricted_without_agent", [POOL_MISS_EMPTY] = "empty",
};

struct pool_state {
        uint64_t hits, refilled, refill_failed, retired;
        uint64_t misses[_POOL_MISS_MAX];
        int inflight;                   /* refill jobs running */
        int64_t next_start;             /* mono ms: the rate's next slot */
        int64_t quiet_until;            /* mono ms: no refill before, unless the pool is empty */
        int64_t last_fail_log;          /* mono ms */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pool_state *states;       /* one per cfg->pools[], allocated by pool_start */
static uint64_t misses_unpooled[_POOL_MISS_MAX];   /* misses no pool matched (no_pool) */
static int64_t last_health;

const char *pool_miss_name(enum pool_miss m) {
        return (unsigned) m < _POOL_MISS_MAX ? miss_names[m] : "unknown";
}

static const struct pool_conf *pool_by_name(const struct ctl *c, const char *name, size_t *idx) {
        for (size_t i = 0; name && i < c->cfg->n_pools; i++)
                if (!strcmp(c->cfg->pools[i].name, name)) {
                        if (idx)
                                *idx = i;
                        return &c->cfg->pools[i];
                }
        return NULL;
}

const struct pool_conf *pool_match(const struct ctl *c, const struct template *tpl, int64_t cpu, int64_t memory, int64_t disk,
                                   const struct pj_sandbox_create *in, enum pool_miss *miss) {
        bool networked = in->egress.mode != PJ_EGRESS_DENY_ALL;
        const struct pool_conf *p = NULL;
        for (size_t i = 0; i < c->cfg->n_pools && !p; i++) {
                const struct pool_conf *x = &c->cfg->pools[i];
                if (!strcmp(x->template_name, tpl->name) && x->cpu == cpu && x->memory == memory && x->disk == disk &&
                    x->networked == networked)
                        p = x;
        }
        if (!p)
                *miss = POOL_MISS_NO_POOL;
        else if (in->volume_id || in->persistent)
                *miss = POOL_MISS_VOLUME;
        else if (in->from_snapshot)
                *miss = POOL_MISS_SNAPSHOT;
        else if (in->one_shot)
                *miss = POOL_MISS_ONE_SHOT;
        else if (in->egress.mode == PJ_EGRESS_RESTRICTED && !c->bus)
                *miss = POOL_MISS_NO_AGENT;     /* without an agent, restricted means another network */
        else
                *miss = POOL_MISS_NONE;
        return p;
}

void pool_note(const struct ctl *c, const struct pool_conf *p, enum pool_miss miss) {
        size_t i = 0;
        if (!c->cfg->n_pools)
                return;         /* no pools: nothing to count */
        pthread_mutex_lock(&lock);
        if (p && states && pool_by_name(c, p->name, &i)) {
                if (miss == POOL_MISS_NONE) {
                        states[i].hits++;
                        states[i].quiet_until = mono_ms() + POOL_CLAIM_QUIET_MS;
                }
                else if ((unsigned) miss < _POOL_MISS_MAX)
                        states[i].misses[miss]++;
        } else if ((unsigned) miss < _POOL_MISS_MAX)
                misses_unpooled[miss]++;
        pthread_mutex_unlock(&lock);
}

/* The sandbox a member's workload is made and removed as: its id, image, specs and egress
 * class, no account. sb is cleared by the caller (sandbox_clear). */
static void member_sandbox(const struct ctl *c, const struct pool_conf *p, const struct pool_member *m, struct sandbox *sb) {
        const struct region *g = config_region(c->cfg, c->cfg->default_region);
        *sb = (struct sandbox) { 0 };
        snprintf(sb->id, sizeof(sb->id), "%s", m->id);
        sb->name = xasprintf("pool-%s", m->id);
        sb->template_name = xstrdup(p ? p->template_name : "");
        sb->image = xstrdup(m->image);
        sb->status = SB_STARTING;
        sb->region_key = xstrdup(g ? g->key : "");
        sb->cpu = p ? p->cpu : 0;
        sb->memory = p ? p->memory : 0;
        sb->disk = p ? p->disk : 0;
        sb->egress.mode = p && !p->networked ? PJ_EGRESS_DENY_ALL : PJ_EGRESS_OPEN;
        sb->snapshot_mode = xstrdup("manual");
        sb->mount_path = xstrdup("/workspace");
        sb->created_at = sb->last_activity_at = m->created_at;
        sb->expires_at = m->created_at + (p ? p->max_age_ms : 0);
        sb->driver = xstrdup(c->drv->name);
        sb->container_id = m->container_id ? xstrdup(m->container_id) : NULL;
        sb->node_id = m->node_id ? xstrdup(m->node_id) : NULL;
        sb->job_id = m->job_id ? xstrdup(m->job_id) : NULL;
        sb->alloc_id = m->alloc_id ? xstrdup(m->alloc_id) : NULL;
        sb->ip = m->ip ? xstrdup(m->ip) : NULL;
}

/* Removes a member's workload (its row is already gone or going). */
static void member_remove(struct ctl *c, const struct pool_member *m) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err err = { 0 };
        member_sandbox(c, pool_by_name(c, m->pool, NULL), m, &sb);
        if (c->drv->ops->remove(c->drv, &sb, &err) < 0) {
                log_warning("could not remove the workload of pool member %s: %s", m->id, err.message);
                c->drv->ops->remove_by_id(c->drv, m->id);
        }
}

/* One `sh -c true` in the member before it is offered: a gVisor sandbox's first command pays
 * one-off costs (the shell's pages into the sandbox kernel) that the tenant's first command
 * should not. Through the driver's exec, not the agent, so the agent's process table (what
 * GET /processes lists) holds nothing the tenant did not start. Best effort, bounded. */
static void member_warm(struct ctl *c, const struct sandbox *sb) {
        static const char *const argv[] = { "/bin/sh", "-c", "true", NULL };
        struct exec_spec spec = { .argv = argv };
        struct exec_session *x = NULL;
        struct err err = { 0 };
        if (c->drv->ops->exec_start(c->drv, sb, &spec, &x, &err) < 0) {
                log_debug("pool member warm-up: %s", err.message);
                return;
        }
        int64_t deadline = mono_ms() + 10000;
        while (c->drv->ops->exec_read(x, 1000, -1, exec_output_discard, NULL) == 0 && mono_ms() < deadline)
                ;
        c->drv->ops->exec_free(x);
}

struct refill_arg {
        size_t idx;
};

static void refill_job(struct ctl *c, void *arg) {
        size_t idx = ((struct refill_arg *) arg)->idx;
        const struct pool_conf *p = &c->cfg->pools[idx];
        const struct template *t = config_template(c->cfg, p->template_name);
        _cleanup_(pool_member_clear) struct pool_member m = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct placement pl = { 0 };
        struct err reason = { 0 };
        int r;

        hexid_new(m.id);
        m.pool = xstrdup(p->name);
        m.image = xstrdup(t->image);
        m.state = xstrdup("starting");
        m.created_at = now_ms();
        log_ctx_set("SANDBOX_ID", m.id);
        r = store_pool_insert(c->store, &m);
        if (r < 0)
                err_set(&reason, r, "cannot record the member: %s", strerror(-r));
        else {
                fault_point("pool.refill.recorded");
                member_sandbox(c, p, &m, &sb);
                r = c->drv->ops->place(c->drv, &sb, &pl, &reason);
                if (r < 0)
                        (void) store_pool_delete(c->store, m.id);       /* place unwinds its workload */
                else
                        fault_point("pool.refill.placed");
        }
        if (r >= 0) {
                free(m.state);
                m.state = xstrdup("ready");
                m.container_id = pl.container_id ? xstrdup(pl.container_id) : NULL;
                m.node_id = pl.node_id ? xstrdup(pl.node_id) : NULL;
                m.job_id = pl.job_id ? xstrdup(pl.job_id) : NULL;
                m.alloc_id = pl.alloc_id ? xstrdup(pl.alloc_id) : NULL;
                m.ip = pl.ip && *pl.ip ? xstrdup(pl.ip) : NULL;
                _cleanup_sandbox_ struct sandbox placed = { 0 };
                member_sandbox(c, p, &m, &placed);
                if (t->start)
                        r = template_start(c, &placed, &reason);
                else
                        member_warm(c, &placed);
                if (r < 0) {
                        member_remove(c, &m);
                        (void) store_pool_delete(c->store, m.id);
                } else if ((r = store_pool_update(c->store, &m)) < 0) {
                        /* Retired meanwhile (controld stopping, say): it is nobody's, so it goes. */
                        err_set(&reason, r, "the member's row is gone: %s", strerror(-r));
                        member_remove(c, &m);
                        (void) store_pool_delete(c->store, m.id);
                }
        }
        placement_clear(&pl);
        pthread_mutex_lock(&lock);
        struct pool_state *st = &states[idx];
        st->inflight--;
        bool say = false;
        if (r >= 0)
                st->refilled++;
        else {
                st->refill_failed++;
                say = mono_ms() - st->last_fail_log >= POOL_FAIL_LOG_MS || !st->last_fail_log;
                if (say)
                        st->last_fail_log = mono_ms();
        }
        pthread_mutex_unlock(&lock);
        if (r >= 0)
                log_debug("pool %s: member ready", p->name);
        else if (say)
                log_warning("pool %s cannot refill: %s", p->name, reason.message);
        log_ctx_set("SANDBOX_ID", NULL);
        ctl_notify_status(c);   /* the next tick sees it, and claims waiting for none retry nothing */
}

/* Deletes the member's row and, if that was still ours to delete, its workload (on a job
 * thread: removing a container takes a while). */
static void retire_job(struct ctl *c, void *arg) {
        struct pool_member *m = arg;
        member_remove(c, m);
        pool_member_clear(m);
}

static void retire(struct ctl *c, struct pool_member *m, size_t idx, const char *why) {
        if (store_pool_delete(c->store, m->id) < 0)
                return;         /* claimed meanwhile: a sandbox's now */
        log_ctx_set("SANDBOX_ID", m->id);
        log_info("pool %s: retiring a member (%s)", m->pool, why);
        log_ctx_set("SANDBOX_ID", NULL);
        if (idx != (size_t) -1) {
                pthread_mutex_lock(&lock);
                states[idx].retired++;
                pthread_mutex_unlock(&lock);
        }
        /* The orphan sweep (reap_orphans) removes a workload no row owns, should this not. */
        char id[SANDBOX_ID_LEN + 1];
        snprintf(id, sizeof(id), "%s", m->id);
        struct pool_member *copy = xnew0(struct pool_member, 1);
        *copy = *m;
        *m = (struct pool_member) { 0 };
        if (c->stopping) {
                pool_member_clear(copy);
                free(copy);
        } else if (ctl_spawn_job(c, retire_job, copy) < 0)      /* frees copy, not its strings: rare enough */
                log_warning("pool member %s's workload stays until the orphan sweep removes it", id);
}

/* Whether a ready member's workload still runs. */
static bool member_alive(struct ctl *c, const struct pool_member *m) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        member_sandbox(c, pool_by_name(c, m->pool, NULL), m, &sb);
        return c->drv->ops->running(c->drv, &sb, NULL) != 0;
}

void pool_tick(struct ctl *c) {
        struct pool_member *a = NULL;
        size_t n = 0;
        if (!c->cfg->n_pools || !states)
                return;         /* members of pools no longer configured went at the start */
        if (store_pool_list(c->store, NULL, &a, &n) < 0)
                return;
        int64_t now = now_ms(), mono = mono_ms();
        bool health = mono - last_health >= POOL_HEALTH_INTERVAL_MS;
        if (health)
                last_health = mono;
        _cleanup_free_ int64_t *count = xnew0(int64_t, c->cfg->n_pools + 1);
        for (size_t i = 0; i < n && !c->stopping; i++) {
                struct pool_member *m = &a[i];
                size_t idx = (size_t) -1;
                const struct pool_conf *p = pool_by_name(c, m->pool, &idx);
                const struct template *t = p ? config_template(c->cfg, p->template_name) : NULL;
                /* A starting member is its refill job's (counted as in flight); pool_start
                 * removes those a stop left behind. Only ready ones go past this. */
                if (p && t && strcmp(m->state, "ready") != 0)
                        continue;
                if (!p || !t)
                        retire(c, m, idx, "its pool is no longer configured");
                else if (strcmp(m->image, t->image) != 0)
                        retire(c, m, idx, "the template's image changed");
                else if (now - m->created_at >= p->max_age_ms)
                        retire(c, m, idx, "older than max_age");
                else if (count[idx] >= p->size)
                        retire(c, m, idx, "more members than the pool's size");
                else if (health && !member_alive(c, m))
                        retire(c, m, idx, "its workload stopped");
                else
                        count[idx]++;
        }
        pool_member_array_free(a, n);
        if (c->stopping || store_node_drained(c->store, c->cfg->docker_node_id) > 0)
                return;
        for (size_t i = 0; i < c->cfg->n_pools; i++) {
                const struct pool_conf *p = &c->cfg->pools[i];
                for (;;) {
                        pthread_mutex_lock(&lock);
                        struct pool_state *st = &states[i];
                        bool go = count[i] + st->inflight < p->size && st->inflight < POOL_INFLIGHT && mono >= st->next_start &&
                                  (mono >= st->quiet_until || count[i] == 0);
                        if (go) {
                                st->inflight++;
                                int64_t gap = 60000 / p->refill_per_min;
                                st->next_start = (st->next_start > mono - gap ? st->next_start : mono) + gap;
                        }
                        pthread_mutex_unlock(&lock);
                        if (!go)
                                break;
                        struct refill_arg *arg = xnew0(struct refill_arg, 1);
                        arg->idx = i;
                        if (ctl_spawn_job(c, refill_job, arg) < 0) {
                                pthread_mutex_lock(&lock);
                                states[i].inflight--;
                                pthread_mutex_unlock(&lock);
                                break;
                        }
                }
        }
}

bool pool_owns(struct ctl *c, const char *id) {
        _cleanup_(pool_member_clear) struct pool_member m = { 0 };
        return store_pool_get(c->store, id, &m) == 0;
}

void pool_start(struct ctl *c) {
        struct pool_member *a = NULL;
        size_t n = 0;
        states = xnew0(struct pool_state, c->cfg->n_pools + 1);
        if (store_pool_list(c->store, NULL, &a, &n) < 0)
                return;
        /* What a stopped controld left: members half made go; ready ones whose workload is gone,
         * or whose pool is no longer configured, go too. The rest serve again. */
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
                struct pool_member *m = &a[i];
                const char *why = strcmp(m->state, "ready") != 0       ? "left half made by a stop"
                                  : !pool_by_name(c, m->pool, NULL) ? "its pool is no longer configured"
                                  : !member_alive(c, m)            ? "its workload stopped"
                                                                   : NULL;
                if (!why) {
                        kept++;
                        continue;
                }
                log_ctx_set("SANDBOX_ID", m->id);
                log_notice("pool %s: removing a member at start (%s)", m->pool, why);
                log_ctx_set("SANDBOX_ID", NULL);
                if (store_pool_delete(c->store, m->id) == 0)
                        member_remove(c, m);
        }
        if (n)
                log_info("pools: %zu members kept from before the start, %zu removed", kept, n - kept);
        pool_member_array_free(a, n);
}

void pool_metrics_render(struct ctl *c, struct strbuf *b) {
        struct pool_member *a = NULL;
        size_t n = 0;
        if (!c->cfg->n_pools || !states)
                return;
        if (store_pool_list(c->store, NULL, &a, &n) < 0)
                n = 0;
        strbuf_printf(b, "# HELP paddock_pool_target Members a warm pool keeps ready.\n# TYPE paddock_pool_target gauge\n");
        for (size_t i = 0; i < c->cfg->n_pools; i++)
                strbuf_printf(b, "paddock_pool_target{pool=\"%s\"} %lld\n", c->cfg->pools[i].name, (long long) c->cfg->pools[i].size);
        strbuf_printf(b, "# HELP paddock_pool_members Warm pool members by state.\n# TYPE paddock_pool_members gauge\n");
        for (size_t i = 0; i < c->cfg->n_pools; i++) {
                int64_t ready = 0, starting = 0;
                for (size_t k = 0; k < n; k++)
                        if (!strcmp(a[k].pool, c->cfg->pools[i].name))
                                (*(strcmp(a[k].state, "ready") ? &starting : &ready))++;
                strbuf_printf(b, "paddock_pool_members{pool=\"%s\",state=\"ready\"} %lld\n", c->cfg->pools[i].name, (long long) ready);
                strbuf_printf(b, "paddock_pool_members{pool=\"%s\",state=\"starting\"} %lld\n", c->cfg->pools[i].name,
                              (long long) starting);
        }
        pool_member_array_free(a, n);
        pthread_mutex_lock(&lock);
        strbuf_printf(b, "# HELP paddock_pool_claims_total Creates that matched a pool: hit, or miss and why.\n"
                         "# TYPE paddock_pool_claims_total counter\n");
        for (size_t i = 0; i < c->cfg->n_pools; i++) {
                strbuf_printf(b, "paddock_pool_claims_total{pool=\"%s\",result=\"hit\",reason=\"\"} %llu\n", c->cfg->pools[i].name,
                              (unsigned long long) states[i].hits);
                for (int k = 0; k < _POOL_MISS_MAX; k++)
                        if (k != POOL_MISS_NONE && k != POOL_MISS_NO_POOL)
                                strbuf_printf(b, "paddock_pool_claims_total{pool=\"%s\",result=\"miss\",reason=\"%s\"} %llu\n",
                                              c->cfg->pools[i].name, miss_names[k], (unsigned long long) states[i].misses[k]);
        }
        strbuf_printf(b, "paddock_pool_claims_total{pool=\"\",result=\"miss\",reason=\"no_pool\"} %llu\n",
                      (unsigned long long) misses_unpooled[POOL_MISS_NO_POOL]);
        strbuf_printf(b, "# HELP paddock_pool_refills_total Pool members started, by result.\n# TYPE paddock_pool_refills_total counter\n");
        for (size_t i = 0; i < c->cfg->n_pools; i++) {
                strbuf_printf(b, "paddock_pool_refills_total{pool=\"%s\",result=\"ok\"} %llu\n", c->cfg->pools[i].name,
                              (unsigned long long) states[i].refilled);
                strbuf_printf(b, "paddock_pool_refills_total{pool=\"%s\",result=\"failed\"} %llu\n", c->cfg->pools[i].name,
                              (unsigned long long) states[i].refill_failed);
        }
        strbuf_printf(b, "# HELP paddock_pool_retired_total Pool members removed unclaimed (age, image change, dead).\n"
                         "# TYPE paddock_pool_retired_total counter\n");
        for (size_t i = 0; i < c->cfg->n_pools; i++)
                strbuf_printf(b, "paddock_pool_retired_total{pool=\"%s\"} %llu\n", c->cfg->pools[i].name,
                              (unsigned long long) states[i].retired);
        pthread_mutex_unlock(&lock);
}
