/* render.c — JSON of the API's resources: sandboxes, volumes, snapshots, templates,
 * regions, stats, pages, exec and upload results and stream frames, health. The one place
 * the public wire shape of a resource is written; handlers build nothing of it themselves.
 * Every function returns a new cJSON tree owned by the caller. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "json.h"
#include "strutil.h"
#include "network.h"
#include "render.h"
#include "runtime.h"
#include "sandbox.h"

cJSON *render_page(cJSON *items, int64_t total, int64_t page, int64_t limit) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "data", items);
        json_add_int(o, "totalCount", total);
        json_add_int(o, "currentPage", page);
        json_add_int(o, "totalPages", total == 0 ? 0 : (total + limit - 1) / limit);
        json_add_int(o, "limit", limit);
        return o;
}

cJSON *template_to_json(const struct template *t, int64_t size_mb) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "name", t->name);
        json_add_str(o, "display_name", t->display_name);
        json_add_str(o, "description", t->description);
        if (t->language)
                json_add_str(o, "language", t->language);
        else
                cJSON_AddNullToObject(o, "language");
        cJSON *tools = cJSON_AddArrayToObject(o, "tools");
        for (char **p = t->tools; p && *p; p++)
                cJSON_AddItemToArray(tools, cJSON_CreateString(*p));
        if (size_mb > 0)
                cJSON_AddNumberToObject(o, "size_mb", (double) size_mb);
        else
                cJSON_AddNullToObject(o, "size_mb");
        cJSON *specs = cJSON_AddObjectToObject(o, "default_specs");
        cJSON_AddNumberToObject(specs, "cpu", (double) t->cpu);
        cJSON_AddNumberToObject(specs, "memory", (double) t->memory);
        cJSON_AddNumberToObject(specs, "disk", (double) t->disk);
        return o;
}

void render_add_region(cJSON *o, const struct region *g) {
        if (g)
                cJSON_AddItemToObject(o, "region", region_to_json(g));
        else
                cJSON_AddNullToObject(o, "region");
}

static const struct json_member region_members[] = {
        JSON_MEMBER(JSON_STR, "id", struct region, id),           JSON_MEMBER(JSON_STR, "name", struct region, name),
        JSON_MEMBER(JSON_STR, "country", struct region, country), JSON_MEMBER(JSON_STR, "continent", struct region, continent),
        JSON_MEMBER(JSON_BOOL, "enabled", struct region, enabled),
};

cJSON *region_to_json(const struct region *g) {
        cJSON *o = cJSON_CreateObject();
        json_add_members(o, g, region_members, ELEMENTSOF(region_members));
        json_add_str(o, "type", "sandbox");
        return o;
}

/* "block_outbound" and "egress": {mode, allow, rules?} (rules as given: placeholders, never values). */
static void add_egress(cJSON *o, const struct sb_egress *e) {
        json_add_bool(o, "block_outbound", e->mode == PJ_EGRESS_DENY_ALL);
        cJSON *eg = cJSON_AddObjectToObject(o, "egress");
        json_add_str(eg, "mode", pj_egress_mode_to_string(e->mode));
        cJSON *allow = cJSON_AddArrayToObject(eg, "allow");
        for (size_t i = 0; i < e->n_allow; i++) {
                char buf[PJ_ALLOW_NORM_MAX];
                sb_allow_entry_format(&e->allow[i], buf);
                cJSON_AddItemToArray(allow, cJSON_CreateString(buf));
        }
        if (e->rules.n_rules)
                cJSON_AddItemToObject(eg, "rules", pj_egress_rules_json(&e->rules, false));
}

cJSON *egress_update_to_json(struct ctl *c, const struct sandbox *sb, bool network_updated) {
        cJSON *o = sandbox_to_json(c, sb);
        json_add_bool(o, "network_updated", network_updated);
        return o;
}

/* The members both sandbox objects start with: id, name, template, status. */
static cJSON *sandbox_head_to_json(const struct sandbox *sb) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "id", sb->id);
        json_add_str(o, "name", sb->name);
        json_add_str(o, "template", sb->template_name);
        json_add_str(o, "status", sb_status_str(sb->status));
        return o;
}

static const struct json_member sandbox_options[] = {
        JSON_MEMBER(JSON_STR, "team", struct sandbox, team),
        JSON_MEMBER(JSON_STR, "project_environment", struct sandbox, project_environment),
        JSON_MEMBER(JSON_BOOL, "auto_destroy", struct sandbox, auto_destroy),
        JSON_MEMBER(JSON_STR, "destroy_timeout", struct sandbox, destroy_timeout),
        JSON_MEMBER(JSON_BOOL, "one_shot", struct sandbox, one_shot),
};
static const struct json_member sandbox_times[] = {
        JSON_MEMBER(JSON_STR, "snapshot_frequency", struct sandbox, snapshot_frequency),
        JSON_MEMBER(JSON_TIME, "created_at", struct sandbox, created_at),
        JSON_MEMBER(JSON_TIME, "last_activity_at", struct sandbox, last_activity_at),
        JSON_MEMBER(JSON_TIME, "expires_at", struct sandbox, expires_at),
};

cJSON *fork_results_json(struct ctl *c, struct sandbox_fork_result *res, int n,
                         cJSON *(*sb_json)(struct ctl *c, const struct sandbox *sb), int (*status_of)(int err),
                         const char *code_key, int *ret_made) {
        cJSON *a = cJSON_CreateArray();
        int made = 0;
        for (int i = 0; i < n; i++) {
                cJSON *o = cJSON_CreateObject();
                if (res[i].r == 0) {
                        cJSON_AddItemToObject(o, "sandbox", sb_json(c, &res[i].sb));
                        made++;
                } else {
                        cJSON *er = cJSON_AddObjectToObject(o, "error");
                        json_add_int(er, code_key, status_of(res[i].r));
                        json_add_str(er, "message", res[i].err.message);
                }
                cJSON_AddItemToArray(a, o);
                sandbox_clear(&res[i].sb);
        }
        if (ret_made)
                *ret_made = made;
        return a;
}

cJSON *sandbox_to_json(struct ctl *c, const struct sandbox *sb) {
        cJSON *o = sandbox_head_to_json(sb);
        const struct region *g = config_region(c->cfg, sb->region_key);

        render_add_region(o, g);
        cJSON *specs = cJSON_AddObjectToObject(o, "specs");
        json_add_int(specs, "cpu", sb->cpu);
        json_add_int(specs, "memory", sb->memory);
        json_add_int(specs, "disk", sb->disk);
        json_add_members(o, sb, sandbox_options, ELEMENTSOF(sandbox_options));
        cJSON *lc = cJSON_AddObjectToObject(o, "lifecycle");
        json_add_str(lc, "onTimeout", sb->pause_at_end ? "pause" : "destroy");
        json_add_bool(lc, "keepMemory", sb->pause_keep_memory);
        json_add_bool(lc, "autoResume", sb->auto_resume);
        add_egress(o, &sb->egress);
        json_add_bool(o, "persistent", sb->persistent);
        if (sb->persistent_disk_gb)
                json_add_int(o, "persistent_disk_gb", sb->persistent_disk_gb);
        else
                cJSON_AddNullToObject(o, "persistent_disk_gb");
        json_add_str(o, "volume_id", sb->volume_id);
        json_add_str(o, "mount_path", sb->volume_id ? sb->mount_path : NULL);
        json_add_time(o, "paused_at", sb->paused_at);
        /* Paused with its processes and memory (a checkpoint on the node's disk), and its size. */
        int64_t ckpt_bytes = 0;
        bool kept = (sb->status == SB_PAUSED || sb->status == SB_RESUMING) && sandbox_memory_kept(c, sb->id, NULL, &ckpt_bytes) == 0;
        json_add_bool(o, "memory_kept", kept);
        if (kept)
                json_add_int(o, "checkpoint_bytes", ckpt_bytes);
        else
                cJSON_AddNullToObject(o, "checkpoint_bytes");
        json_add_str(o, "from_snapshot", sb->from_snapshot);
        json_add_str(o, "snapshot_mode", sb->snapshot_mode ? sb->snapshot_mode : "manual");
        json_add_members(o, sb, sandbox_times, ELEMENTSOF(sandbox_times));
        json_add_time(o, "destroyed_at", sb->status == SB_DESTROYED || sb->status == SB_FAILED ? sb->destroyed_at : 0);
        json_add_str(o, "destroy_reason", sb->destroy_reason);
        json_add_str(o, "failure_reason", sb->failure_reason);
        cJSON_AddItemToObject(o, "timings", sb_timings_to_json(&sb->timings));
        return o;
}

/* The short answer of POST /sandboxes. */
cJSON *sandbox_created_to_json(const struct sandbox *sb) {
        cJSON *o = sandbox_head_to_json(sb);
        json_add_time(o, "created_at", sb->created_at);
        json_add_time(o, "expires_at", sb->expires_at);
        if (sb->timings.set)
                cJSON_AddItemToObject(o, "timings", sb_timings_to_json(&sb->timings));
        return o;
}

static const struct json_member volume_head[] = {
        JSON_MEMBER(JSON_CHARS, "id", struct volume, id),     JSON_MEMBER(JSON_STR, "name", struct volume, name),
        JSON_MEMBER(JSON_STR, "type", struct volume, type),   JSON_MEMBER(JSON_STR, "team", struct volume, team),
        JSON_MEMBER(JSON_STR, "volume_handle", struct volume, handle), JSON_MEMBER(JSON_INT, "size", struct volume, size_gb),
};
static const struct json_member volume_tail[] = {
        JSON_MEMBER(JSON_TIME, "last_attached_at", struct volume, last_attached_at),
        JSON_MEMBER(JSON_TIME, "created_at", struct volume, created_at),
        JSON_MEMBER(JSON_TIME, "updated_at", struct volume, updated_at),
};

cJSON *volume_to_json(struct ctl *c, const struct volume *v) {
        cJSON *o = cJSON_CreateObject();
        json_add_members(o, v, volume_head, ELEMENTSOF(volume_head));
        render_add_region(o, config_region(c->cfg, v->region_key));
        json_add_str(o, "mount_path", v->attached_sandbox_id ? v->mount_path : NULL);
        json_add_str(o, "attached_sandbox_id", v->attached_sandbox_id);
        cJSON_AddNullToObject(o, "attached_project_id");
        json_add_members(o, v, volume_tail, ELEMENTSOF(volume_tail));
        return o;
}

static const struct json_member snapshot_head[] = {
        JSON_MEMBER(JSON_CHARS, "id", struct snapshot, id),   JSON_MEMBER(JSON_CHARS, "sandbox_id", struct snapshot, sandbox_id),
        JSON_MEMBER(JSON_STR, "name", struct snapshot, name), JSON_MEMBER(JSON_STR, "image_tag", struct snapshot, image_tag),
        JSON_MEMBER(JSON_STR, "digest", struct snapshot, digest),
        JSON_MEMBER(JSON_STR, "source_template", struct snapshot, source_template),
};
static const struct json_member snapshot_tail[] = {
        JSON_MEMBER(JSON_STR, "failure_reason", struct snapshot, failure_reason),
        JSON_MEMBER(JSON_SIZE, "size_bytes", struct snapshot, size_bytes),
        JSON_MEMBER(JSON_TIME, "created_at", struct snapshot, created_at),
};

cJSON *snapshot_to_json(const struct snapshot *sn) {
        cJSON *o = cJSON_CreateObject();
        json_add_members(o, sn, snapshot_head, ELEMENTSOF(snapshot_head));
        json_add_str(o, "status", snap_status_str(sn->status));
        json_add_members(o, sn, snapshot_tail, ELEMENTSOF(snapshot_tail));
        return o;
}

/* GET /sandboxes/{id}/stats: samples s[0..n) (oldest first) since `since` over `hours`. */
cJSON *stats_to_json(const struct sandbox *sb, const struct stats_sample *s, size_t n, int64_t since, int64_t hours) {
        /* ~250 evenly spaced buckets over the window; empty buckets are skipped. */
        int64_t step = hours * 3600 * 1000 / 250;
        double sum_cpu = 0, sum_mem = 0, sum_net = 0;
        cJSON *results = cJSON_CreateArray();
        size_t i = 0;
        while (i < n) {
                int64_t b = (s[i].ts_ms - since) / step;
                double c = 0, m = 0, nb = 0;
                size_t k = 0;
                while (i < n && (s[i].ts_ms - since) / step == b) {
                        c += s[i].cpu_pct;
                        m += s[i].mem_pct;
                        nb += s[i].net_bps;
                        k++;
                        i++;
                }
                cJSON *p = cJSON_CreateObject();
                char ts[32];
                format_rfc3339_ms(since + b * step, ts);
                json_add_str(p, "date", ts);
                cJSON_AddNumberToObject(p, "memory", m / (double) k);
                cJSON_AddNumberToObject(p, "cpu", c / (double) k);
                cJSON *net = cJSON_AddObjectToObject(p, "network");
                cJSON_AddNumberToObject(net, "bytesPerSecond", nb / (double) k);
                cJSON_AddItemToArray(results, p);
        }
        for (i = 0; i < n; i++) {
                sum_cpu += s[i].cpu_pct;
                sum_mem += s[i].mem_pct;
                sum_net += s[i].net_bps;
        }
        cJSON *d = cJSON_CreateObject();
        cJSON *avg = cJSON_AddObjectToObject(d, "average");
        cJSON *mem = cJSON_AddObjectToObject(avg, "memory");
        cJSON_AddNumberToObject(mem, "totalInPercentage", n ? sum_mem / (double) n : 0);
        cJSON_AddNumberToObject(mem, "size", (double) sb->memory);
        cJSON *cpu = cJSON_AddObjectToObject(avg, "cpu");
        cJSON_AddNumberToObject(cpu, "totalInPercentage", n ? sum_cpu / (double) n : 0);
        cJSON_AddNumberToObject(cpu, "size", (double) sb->cpu);
        cJSON *net = cJSON_AddObjectToObject(avg, "network");
        if (n) {
                cJSON_AddNumberToObject(net, "value", sum_net / (double) n);
                cJSON_AddNumberToObject(net, "total", sum_net);
                cJSON_AddNullToObject(net, "totalInPercentage");
                cJSON_AddNumberToObject(net, "bytesPerSecond", sum_net / (double) n);
        } else {
                cJSON_AddNullToObject(net, "value");
                cJSON_AddNullToObject(net, "total");
                cJSON_AddNullToObject(net, "totalInPercentage");
                cJSON_AddNullToObject(net, "bytesPerSecond");
        }
        json_add_int(d, "replicaCount", 1);
        cJSON_AddItemToObject(d, "results", results);
        cJSON_AddNullToObject(d, "responseTime");
        return d;
}

cJSON *exec_result_to_json(const struct exec_result *x) {
        cJSON *d = cJSON_CreateObject();
        json_add_strn(d, "stdout", x->out, x->out_len);  /* every byte, NUL as \u0000 */
        json_add_strn(d, "stderr", x->err, x->err_len);
        json_add_int(d, "exit_code", x->exit_code);
        json_add_int(d, "duration_ms", x->duration_ms);
        if (x->out_truncated || x->err_truncated) {
                json_add_bool(d, "truncated", true);
                json_add_bool(d, "stdout_truncated", x->out_truncated);
                json_add_bool(d, "stderr_truncated", x->err_truncated);
        }
        if (x->timed_out)
                json_add_bool(d, "timed_out", true);
        if (x->oom_killed)
                json_add_bool(d, "oom_killed", true);
        return d;
}

cJSON *exec_done_frame_to_json(const struct exec_result *x) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", "done");
        json_add_int(o, "exit_code", x->exit_code);
        json_add_int(o, "duration_ms", x->duration_ms);
        if (x->timed_out)
                json_add_bool(o, "timed_out", true);
        if (x->oom_killed) {
                json_add_bool(o, "oom_killed", true);
                json_add_str(o, "message", OOM_MESSAGE);
        }
        return o;
}

cJSON *exec_output_frame_to_json(const char *type, const char *data, size_t len) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", type);
        json_add_strn(o, "data", data, len);  /* every byte, NUL as \u0000 */
        return o;
}

cJSON *exec_error_frame_to_json(const char *message) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", "error");
        json_add_str(o, "message", message);
        return o;
}

cJSON *batch_file_to_json(const char *path, size_t bytes, const char *error) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "path", path);
        json_add_int(o, "bytes", (int64_t) bytes);
        json_add_bool(o, "success", !error);
        if (error)
                json_add_str(o, "error", error);
        return o;
}

cJSON *batch_summary_to_json(int uploaded, int failed, cJSON *results) {
        cJSON *d = cJSON_CreateObject();
        json_add_int(d, "uploaded", uploaded);
        json_add_int(d, "failed", failed);
        cJSON_AddItemToObject(d, "results", results);
        return d;
}

cJSON *health_to_json(bool ok, const char *driver) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "status", ok ? "ok" : "degraded");
        json_add_str(o, "driver", driver);
        json_add_bool(o, "driver_reachable", ok);
        cJSON_AddItemToObject(o, "sandbox_network", sandbox_network_json());
        return o;
}

/* A template a user built (GET /templates). */
cJSON *render_user_template(const struct user_template *t) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "name", t->name);
        json_add_str(o, "status", t->status);
        if (t->size_bytes > 0)
                cJSON_AddNumberToObject(o, "size_mb", (double) ((t->size_bytes + 999999) / 1000000));
        else
                cJSON_AddNullToObject(o, "size_mb");
        if (t->error)
                json_add_str(o, "error", t->error);
        else
                cJSON_AddNullToObject(o, "error");
        json_add_str(o, "log", t->log ? t->log : "");
        json_add_time(o, "created_at", t->created_at);
        json_add_time(o, "finished_at", t->finished_at);
        return o;
}

/* A secret, never its value: name, version, metadata, created_at, updated_at. */
static const struct json_member secret_members[] = {
        JSON_MEMBER(JSON_STR, "name", struct secret, name),
        JSON_MEMBER(JSON_INT, "version", struct secret, version),
};
static const struct json_member secret_times[] = {
        JSON_MEMBER(JSON_TIME, "created_at", struct secret, created_at),
        JSON_MEMBER(JSON_TIME, "updated_at", struct secret, updated_at),
};

cJSON *render_secret(const struct secret *s) {
        cJSON *o = cJSON_CreateObject();
        json_add_members(o, s, secret_members, ELEMENTSOF(secret_members));
        cJSON_AddItemToObject(o, "metadata", sb_map_to_json(&s->metadata));
        json_add_members(o, s, secret_times, ELEMENTSOF(secret_times));
        return o;
}
