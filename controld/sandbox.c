/* sandbox.c — the sandbox state machine.
 *
 *  starting --ok--> ready --pause--> pausing --> paused --resume--> resuming --> ready
 *     |               |                                                |
 *     +--fail--> failed        destroy / reapers --> destroyed  <------+
 *
 * The record is written as 'starting' BEFORE any side effect, so a crash
 * between steps leaves something a reaper can heal. Operations on one sandbox
 * are serialised by a striped lock; status moves by compare-and-set.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
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

void billing_period(int64_t ms, char out[8]) {
        time_t t = (time_t) (ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        snprintf(out, 8, "%04d-%02d", tm.tm_year + 1900, tm.tm_mon + 1);
}

bool plan_allows_region(const struct plan *p, const struct region *g) {
        if (!p->regions)
                return true;
        for (char **k = p->regions; *k; k++)
                if (!strcmp(*k, g->key) || !strcmp(*k, g->name) || !strcmp(*k, g->id))
                        return true;
        return false;
}

static char *allow_to_json(const struct pj_egress *e) {
        _cleanup_json_ cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < e->n_allow; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(e->allow[i]));
        return json_print(a);
}

static void set_timing(struct sandbox *sb, const char *phase, int64_t ms) {
        _cleanup_json_ cJSON *t = sb->timings ? cJSON_Parse(sb->timings) : NULL;
        if (!t)
                t = cJSON_CreateObject();
        cJSON_DeleteItemFromObject(t, phase);
        cJSON_AddNumberToObject(t, phase, (double) ms);
        free(sb->timings);
        sb->timings = json_print(t);
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
        replace_str(&sb->ip, p->ip);
}

int sandbox_load(struct ctl *c, const struct account *acc, const char *id, struct sandbox *ret, struct api_error *err) {
        if (!hexid_valid(id))
                return API_ERR(err, 400, "Invalid sandbox id");
        int r = store_sandbox_get(c->store, id, ret);
        if (r == -ENOENT || (r >= 0 && strcmp(ret->account_id, acc->id) != 0)) {
                if (r >= 0)
                        sandbox_clear(ret);
                return API_ERR(err, 404, "Sandbox not found");
        }
        if (r < 0)
                return API_ERR(err, 500, "Failed to read the sandbox record");
        return 0;
}

/* Creates a fresh per-sandbox volume (persistent: true). */
static int create_implicit_volume(struct ctl *c, const struct account *acc, const struct plan *plan, const struct region *g,
                                  const char *sandbox_id, int size_gb, const char *mount_path, char ret_id[25],
                                  struct api_error *err) {
        struct volume v = { 0 };
        char derr[256] = "";
        int64_t now = now_ms();
        int r;

        if (size_gb > plan->max_volume_gb)
                return API_ERR(err, 403, "Your plan allows volumes up to %lldGB. Reduce size or upgrade.",
                               (long long) plan->max_volume_gb);
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
        r = store_volume_insert_capped(c->store, &v, plan->max_volumes);
        if (r == -EDQUOT) {
                volume_clear(&v);
                return API_ERR(err, 403, "Your plan allows up to %lld volumes. Delete an existing one or upgrade.",
                               (long long) plan->max_volumes);
        }
        if (r < 0) {
                volume_clear(&v);
                return API_ERR(err, 500, "Failed to record the volume");
        }
        r = c->drv->volume_create(c->drv, v.handle, v.size_gb, derr, sizeof(derr));
        if (r < 0) {
                store_volume_delete(c->store, v.id);
                volume_clear(&v);
                return API_ERR(err, 503, "Sandbox provisioning failed: %s", derr);
        }
        memcpy(ret_id, v.id, 25);
        volume_clear(&v);
        return 0;
}

static void drop_implicit_volume(struct ctl *c, const char *vol_id) {
        struct volume v = { 0 };
        char derr[256];
        if (store_volume_get(c->store, vol_id, &v) < 0)
                return;
        (void) c->drv->volume_remove(c->drv, v.handle, derr, sizeof(derr));
        v.attached_sandbox_id = (free(v.attached_sandbox_id), NULL);
        store_volume_update(c->store, &v);
        store_volume_delete(c->store, vol_id);
        volume_clear(&v);
}

int sandbox_create(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in, struct sandbox *ret,
                   struct api_error *err) {
        const struct config *cfg = c->cfg;
        const struct plan *plan = config_plan(cfg, acc->plan);
        const struct template *tpl;
        const struct region *g;
        struct sandbox sb = { 0 };
        char period[8];
        int64_t t0 = mono_ms(), now = now_ms();
        bool implicit_volume = false;
        int r;

        if (!plan)
                return API_ERR(err, 403, "Your account's plan '%s' is not available on this server. Contact the operator.",
                               acc->plan);
        tpl = config_template(cfg, in->template_name ? in->template_name : cfg->default_template);
        if (!tpl)
                return API_ERR(err, 400, "Unknown template '%s'. List the available ones with GET /sandbox/templates.",
                               in->template_name);
        g = config_region(cfg, in->region ? in->region : cfg->default_region);
        if (!g)
                return API_ERR(err, 400, "Unknown region '%s'. List the available ones with GET /sandboxes/regions.", in->region);
        if (!g->enabled)
                return API_ERR(err, 403, "Region %s is not accepting new sandboxes.", g->name);
        if (!plan_allows_region(plan, g))
                return API_ERR(err, 403, "Your plan does not allow sandboxes in region %s. Pick another region or upgrade.",
                               g->name);

        int64_t cpu = in->has_cpu ? in->cpu : tpl->cpu, mem = in->has_memory ? in->memory : tpl->memory,
                disk = in->has_disk ? in->disk : tpl->disk;
        if (cpu > plan->max_cpu)
                return API_ERR(err, 403, "Your plan allows up to %lld MHz of CPU per sandbox (specs.cpu). Lower it or upgrade.",
                               (long long) plan->max_cpu);
        if (mem > plan->max_memory)
                return API_ERR(err, 403, "Your plan allows up to %lld MB of memory per sandbox (specs.memory). Lower it or upgrade.",
                               (long long) plan->max_memory);
        if (disk > plan->max_disk)
                return API_ERR(err, 403, "Your plan allows up to %lld GB of disk per sandbox (specs.disk). Lower it or upgrade.",
                               (long long) plan->max_disk);
        if (in->persistent && in->persistent_disk_gb > plan->max_volume_gb)
                return API_ERR(err, 403, "Your plan allows volumes up to %lldGB. Reduce size or upgrade.",
                               (long long) plan->max_volume_gb);

        if (plan->spending_limit > 0) {
                double spent = 0;
                billing_period(now, period);
                store_usage_get(c->store, acc->id, period, &spent);
                if (spent >= plan->spending_limit)
                        return API_ERR(err, 403, "Sandbox creation paused, spending limit reached. Raise the limit or wait for "
                                                 "the next billing cycle.");
        }
        if (in->from_snapshot)
                return API_ERR(err, 404, "Snapshot not found");

        /* Volume ownership before anything is written. */
        if (in->volume_id) {
                struct volume v = { 0 };
                r = store_volume_get(c->store, in->volume_id, &v);
                if (r < 0 || strcmp(v.account_id, acc->id) != 0) {
                        volume_clear(&v);
                        return API_ERR(err, 404, "Volume not found");
                }
                bool attached = v.attached_sandbox_id != NULL;
                bool same_region = !v.region_key || !strcmp(v.region_key, g->key);
                volume_clear(&v);
                if (attached)
                        return API_ERR(err, 400, "Volume is attached to another sandbox; destroy that sandbox first");
                if (!same_region)
                        return API_ERR(err, 400, "Volume is in another region; volumes attach only to sandboxes in their region");
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
        sb.image = xstrdup(tpl->image);
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
        sb.egress_mode = (int) in->egress.mode;
        sb.egress_allow = allow_to_json(&in->egress);
        sb.persistent = in->persistent || in->volume_id;
        sb.persistent_disk_gb = in->has_persistent_disk_gb ? in->persistent_disk_gb : 0;
        sb.volume_id = in->volume_id ? xstrdup(in->volume_id) : NULL;
        sb.mount_path = xstrdup(in->mount_path ? in->mount_path : "/workspace");
        sb.snapshot_mode = xstrdup(in->snapshot_mode ? in->snapshot_mode : "manual");
        sb.snapshot_frequency = in->snapshot_frequency ? xstrdup(in->snapshot_frequency) : NULL;
        sb.created_at = sb.last_activity_at = now;
        int64_t life = in->auto_destroy && in->destroy_timeout_s > 0 ? in->destroy_timeout_s : cfg->default_lifetime_s;
        if (life > plan->max_lifetime_s)
                life = plan->max_lifetime_s;
        sb.expires_at = now + life * 1000;
        sb.driver = xstrdup(c->drv->name);
        set_timing(&sb, "validate_ms", mono_ms() - t0);

        int64_t t1 = mono_ms();
        r = store_sandbox_insert_capped(c->store, &sb, plan->max_concurrent);
        if (r == -EDQUOT) {
                sandbox_clear(&sb);
                return API_ERR(err, 403, "Your plan allows up to %lld sandboxes. Destroy an existing one or upgrade.",
                               (long long) plan->max_concurrent);
        }
        if (r < 0) {
                sandbox_clear(&sb);
                return API_ERR(err, 500, "Failed to record the sandbox");
        }
        set_timing(&sb, "record_ms", mono_ms() - t1);
        log_ctx_set("SANDBOX_ID", sb.id);
        log_info("sandbox starting template=%s cpu=%lld memory=%lld egress=%s", sb.template_name, (long long) sb.cpu,
                 (long long) sb.memory, pj_egress_mode_to_string(in->egress.mode));

        ctl_sandbox_lock(c, sb.id);
        char reason[512] = "";
        if (in->persistent) {
                char vid[25];
                r = create_implicit_volume(c, acc, plan, g, sb.id, in->persistent_disk_gb, sb.mount_path, vid, err);
                if (r < 0) {
                        snprintf(reason, sizeof(reason), "%s", err->message);
                        goto fail_noplace;
                }
                implicit_volume = true;
                sb.volume_id = xstrdup(vid);
        } else if (in->volume_id) {
                r = store_volume_attach(c->store, in->volume_id, sb.id, sb.mount_path, now);
                if (r < 0) {
                        API_ERR(err, 400, "Volume is attached to another sandbox; destroy that sandbox first");
                        snprintf(reason, sizeof(reason), "%s", err->message);
                        goto fail_noplace;
                }
        }

        int64_t t2 = mono_ms();
        struct placement pl = { 0 };
        r = c->drv->place(c->drv, &sb, &pl, reason, sizeof(reason));
        metrics_observe_phase(c->metrics, "place", (double) (mono_ms() - t2) / 1000.0);
        if (r < 0) {
                API_ERR(err, 503, "Sandbox provisioning failed: %s", reason);
                goto fail_noplace;
        }
        apply_placement(&sb, &pl);
        placement_clear(&pl);
        set_timing(&sb, "place_ms", mono_ms() - t2);
        set_timing(&sb, "total_ms", mono_ms() - t0);
        sb.status = SB_READY;
        r = store_sandbox_update(c->store, &sb);
        if (r < 0) {
                /* The container runs but the record can't say so: unwind rather than leak it. */
                char e2[256];
                c->drv->remove(c->drv, &sb, e2, sizeof(e2));
                snprintf(reason, sizeof(reason), "failed to record the placement");
                API_ERR(err, 503, "Sandbox provisioning failed: %s", reason);
                goto fail_noplace;
        }
        ctl_sandbox_unlock(c, sb.id);
        metrics_observe_phase(c->metrics, "create_total", (double) (mono_ms() - t0) / 1000.0);
        log_ctx_set("NODE_ID", sb.node_id);
        log_info("sandbox ready in %lldms", (long long) (mono_ms() - t0));
        log_ctx_set("NODE_ID", NULL);
        ctl_notify_status(c);
        *ret = sb;
        return 0;

fail_noplace:
        if (implicit_volume)
                drop_implicit_volume(c, sb.volume_id);
        else if (in->volume_id)
                store_volume_detach_sandbox(c->store, sb.id, now_ms());
        if (err->status >= 400 && err->status < 500) {
                /* Refused (e.g. the volume was taken by a concurrent create) before any side
                 * effect: nothing was created, so no record stays either. */
                store_sandbox_delete(c->store, sb.id);
                ctl_sandbox_unlock(c, sb.id);
                log_info("sandbox create refused: %s", err->message);
                sandbox_clear(&sb);
                return -1;
        }
        sb.status = SB_FAILED;
        replace_str(&sb.failure_reason, reason);
        replace_str(&sb.destroy_reason, "failed");
        sb.destroyed_at = now_ms();
        store_sandbox_update(c->store, &sb);
        ctl_sandbox_unlock(c, sb.id);
        log_error("sandbox provisioning failed: %s", reason);
        ctl_notify_status(c);
        sandbox_clear(&sb);
        return -1;
}

int sandbox_destroy(struct ctl *c, const char *id, const char *reason, struct api_error *err) {
        struct sandbox sb = { 0 };
        char derr[256] = "";
        int r;

        ctl_sandbox_lock(c, id);
        r = store_sandbox_get(c->store, id, &sb);
        if (r < 0) {
                ctl_sandbox_unlock(c, id);
                return r == -ENOENT ? API_ERR(err, 404, "Sandbox not found") : API_ERR(err, 500, "Failed to read the sandbox record");
        }
        if (sb.status == SB_DESTROYED) {
                ctl_sandbox_unlock(c, id);
                sandbox_clear(&sb);
                return 0;
        }
        r = c->drv->remove(c->drv, &sb, derr, sizeof(derr));
        if (r < 0) {
                ctl_sandbox_unlock(c, id);
                log_ctx_set("SANDBOX_ID", id);
                log_error("sandbox destroy failed: %s", derr);
                sandbox_clear(&sb);
                return API_ERR(err, 503, "Could not destroy the sandbox right now: %s. Retry the request.", derr);
        }
        store_volume_detach_sandbox(c->store, id, now_ms());
        sb.status = SB_DESTROYED;
        sb.destroyed_at = now_ms();
        if (!sb.destroy_reason || strcmp(sb.destroy_reason, "failed") != 0)
                replace_str(&sb.destroy_reason, reason);
        r = store_sandbox_update(c->store, &sb);
        ctl_sandbox_unlock(c, id);
        log_ctx_set("SANDBOX_ID", id);
        log_info("sandbox destroyed reason=%s", reason);
        sandbox_clear(&sb);
        ctl_notify_status(c);
        return r < 0 ? API_ERR(err, 500, "Failed to record the destroy") : 0;
}

static void pause_job(struct ctl *c, char *id) {
        struct sandbox sb = { 0 };
        char derr[256] = "";
        log_ctx_set("SANDBOX_ID", id);
        ctl_sandbox_lock(c, id);
        if (store_sandbox_get(c->store, id, &sb) < 0 || sb.status != SB_PAUSING)
                goto out;  /* destroyed meanwhile */
        if (c->drv->remove(c->drv, &sb, derr, sizeof(derr)) < 0) {
                log_error("sandbox pause failed: %s", derr);
                sb.status = SB_READY;  /* still running: back to ready, the user may retry */
        } else {
                sb.status = SB_PAUSED;
                sb.paused_at = now_ms();
                replace_str(&sb.container_id, NULL);
                replace_str(&sb.ip, NULL);
                log_info("sandbox paused");
        }
        store_sandbox_update(c->store, &sb);
out:
        ctl_sandbox_unlock(c, id);
        sandbox_clear(&sb);
        ctl_notify_status(c);
}

static void resume_job(struct ctl *c, char *id) {
        struct sandbox sb = { 0 };
        struct placement pl = { 0 };
        char reason[512] = "";
        int64_t t0 = mono_ms();
        log_ctx_set("SANDBOX_ID", id);
        ctl_sandbox_lock(c, id);
        if (store_sandbox_get(c->store, id, &sb) < 0 || sb.status != SB_RESUMING)
                goto out;
        if (c->drv->place(c->drv, &sb, &pl, reason, sizeof(reason)) < 0) {
                /* Nothing runs (place unwinds); the volume is released for another sandbox. */
                log_error("sandbox resume failed: %s", reason);
                sb.status = SB_FAILED;
                replace_str(&sb.failure_reason, reason);
                replace_str(&sb.destroy_reason, "failed");
                sb.destroyed_at = now_ms();
                store_volume_detach_sandbox(c->store, sb.id, now_ms());
        } else {
                apply_placement(&sb, &pl);
                placement_clear(&pl);
                sb.status = SB_READY;
                sb.paused_at = 0;
                sb.last_activity_at = now_ms();
                set_timing(&sb, "resume_ms", mono_ms() - t0);
                log_info("sandbox resumed in %lldms", (long long) (mono_ms() - t0));
        }
        store_sandbox_update(c->store, &sb);
out:
        ctl_sandbox_unlock(c, id);
        sandbox_clear(&sb);
        ctl_notify_status(c);
}

static int transition(struct ctl *c, const struct sandbox *sb, enum sb_status from, enum sb_status to, const char *verb,
                      void (*job)(struct ctl *, char *), struct api_error *err) {
        if (sb->status != from)
                return API_ERR(err, 400, "Sandbox is %s; only %s sandboxes can be %s", sb_status_str(sb->status),
                               sb_status_str(from), verb);
        int r = store_sandbox_cas_status(c->store, sb->id, from, to);
        if (r == -ESTALE)
                return API_ERR(err, 409, "Sandbox changed status meanwhile; fetch it and retry");
        if (r < 0)
                return API_ERR(err, 500, "Failed to update the sandbox record");
        ctl_notify_status(c);
        r = ctl_spawn_job(c, job, xstrdup(sb->id));
        if (r < 0) {
                store_sandbox_cas_status(c->store, sb->id, to, from);
                return API_ERR(err, 503, "Server is shutting down; retry shortly");
        }
        return 0;
}

int sandbox_pause(struct ctl *c, const struct sandbox *sb, struct api_error *err) {
        return transition(c, sb, SB_READY, SB_PAUSING, "paused", pause_job, err);
}

int sandbox_resume(struct ctl *c, const struct sandbox *sb, struct api_error *err) {
        return transition(c, sb, SB_PAUSED, SB_RESUMING, "resumed", resume_job, err);
}

void json_add_region(cJSON *o, const struct region *g) {
        if (g)
                cJSON_AddItemToObject(o, "region", region_to_json(g));
        else
                cJSON_AddNullToObject(o, "region");
}

cJSON *region_to_json(const struct region *g) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "id", g->id);
        json_add_str(o, "name", g->name);
        json_add_str(o, "country", g->country);
        json_add_str(o, "continent", g->continent);
        json_add_bool(o, "enabled", g->enabled);
        json_add_str(o, "type", "sandbox");
        return o;
}

void json_add_time(cJSON *o, const char *k, int64_t ms) {
        if (ms) {
                char buf[32];
                format_rfc3339_ms(ms, buf);
                json_add_str(o, k, buf);
        } else
                cJSON_AddNullToObject(o, k);
}

cJSON *sandbox_to_json(struct ctl *c, const struct sandbox *sb) {
        cJSON *o = cJSON_CreateObject();
        const struct region *g = config_region(c->cfg, sb->region_key);

        json_add_str(o, "id", sb->id);
        json_add_str(o, "name", sb->name);
        json_add_str(o, "template", sb->template_name);
        json_add_str(o, "status", sb_status_str(sb->status));
        json_add_region(o, g);
        cJSON *specs = cJSON_AddObjectToObject(o, "specs");
        json_add_int(specs, "cpu", sb->cpu);
        json_add_int(specs, "memory", sb->memory);
        json_add_int(specs, "disk", sb->disk);
        json_add_str(o, "team", sb->team);
        json_add_str(o, "project_environment", sb->project_environment);
        json_add_bool(o, "auto_destroy", sb->auto_destroy);
        json_add_str(o, "destroy_timeout", sb->destroy_timeout);
        json_add_bool(o, "one_shot", sb->one_shot);
        json_add_bool(o, "block_outbound", sb->egress_mode == PJ_EGRESS_DENY_ALL);
        cJSON *eg = cJSON_AddObjectToObject(o, "egress");
        json_add_str(eg, "mode", pj_egress_mode_to_string((enum pj_egress_mode) sb->egress_mode));
        cJSON *allow = sb->egress_allow ? cJSON_Parse(sb->egress_allow) : NULL;
        cJSON_AddItemToObject(eg, "allow", allow ? allow : cJSON_CreateArray());
        json_add_bool(o, "persistent", sb->persistent);
        if (sb->persistent_disk_gb)
                json_add_int(o, "persistent_disk_gb", sb->persistent_disk_gb);
        else
                cJSON_AddNullToObject(o, "persistent_disk_gb");
        json_add_str(o, "volume_id", sb->volume_id);
        json_add_str(o, "mount_path", sb->volume_id ? sb->mount_path : NULL);
        json_add_time(o, "paused_at", sb->paused_at);
        json_add_str(o, "from_snapshot", sb->from_snapshot);
        json_add_str(o, "snapshot_mode", sb->snapshot_mode ? sb->snapshot_mode : "manual");
        json_add_str(o, "snapshot_frequency", sb->snapshot_frequency);
        json_add_time(o, "created_at", sb->created_at);
        json_add_time(o, "last_activity_at", sb->last_activity_at);
        json_add_time(o, "expires_at", sb->expires_at);
        json_add_time(o, "destroyed_at", sb->status == SB_DESTROYED || sb->status == SB_FAILED ? sb->destroyed_at : 0);
        json_add_str(o, "destroy_reason", sb->destroy_reason);
        json_add_str(o, "failure_reason", sb->failure_reason);
        cJSON *t = sb->timings ? cJSON_Parse(sb->timings) : NULL;
        cJSON_AddItemToObject(o, "timings", t ? t : cJSON_CreateObject());
        return o;
}
