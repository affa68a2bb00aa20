/* api.c — the public API routes (Brimble Sandbox API wire shape) and our additions. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "strutil.h"

static cJSON *paginated(cJSON *items, int64_t total, int64_t page, int64_t limit) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "data", items);
        json_add_int(o, "totalCount", total);
        json_add_int(o, "currentPage", page);
        json_add_int(o, "totalPages", total == 0 ? 0 : (total + limit - 1) / limit);
        json_add_int(o, "limit", limit);
        return o;
}

static enum MHD_Result pj_fail(struct req *r, const struct pj_error *e) {
        return respond_error(r, 400, "%s", e->message[0] ? e->message : "Invalid request body");
}

/* ---- templates and regions ---- */

static enum MHD_Result get_templates(struct req *r) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < r->c->cfg->n_templates; i++) {
                const struct template *t = &r->c->cfg->templates[i];
                cJSON *o = cJSON_CreateObject();
                json_add_str(o, "name", t->name);
                json_add_str(o, "display_name", t->display_name);
                json_add_str(o, "description", t->description);
                cJSON_AddItemToArray(a, o);
        }
        return respond_envelope(r, 200, "Templates fetched", a);
}

static enum MHD_Result get_regions(struct req *r) {
        cJSON *d = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(d, "regions");
        for (size_t i = 0; i < r->c->cfg->n_regions; i++)
                cJSON_AddItemToArray(a, region_to_json(&r->c->cfg->regions[i]));
        return respond_envelope(r, 200, "Regions fetched", d);
}

/* ---- sandboxes ---- */

static enum MHD_Result post_sandboxes(struct req *r) {
        struct pj_sandbox_create in = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        struct sandbox sb = { 0 };

        if (pj_sandbox_create_parse(r->body.buf, r->body.len, &in, &pe) < 0) {
                pj_sandbox_create_done(&in);
                return pj_fail(r, &pe);
        }
        int k = sandbox_create(r->c, &r->acc, &in, &sb, &e);
        pj_sandbox_create_done(&in);
        if (k < 0)
                return respond_api_error(r, &e);
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "id", sb.id);
        json_add_str(o, "name", sb.name);
        json_add_str(o, "template", sb.template_name);
        json_add_str(o, "status", sb_status_str(sb.status));
        json_add_time(o, "created_at", sb.created_at);
        json_add_time(o, "expires_at", sb.expires_at);
        cJSON *t = sb.timings ? cJSON_Parse(sb.timings) : NULL;
        if (t)
                cJSON_AddItemToObject(o, "timings", t);
        sandbox_clear(&sb);
        return respond_envelope(r, 201, "Sandbox created", o);
}

static enum MHD_Result list_sandboxes(struct req *r) {
        int64_t page, limit, total = 0;
        struct sandbox *a = NULL;
        size_t n = 0;
        int status = -1;
        const char *sf = req_query(r, "status");

        if (req_pagination(r, &page, &limit) < 0)
                return MHD_YES;
        if (sf && (status = sb_status_from_str(sf)) < 0)
                return respond_error(r, 400, "status must be one of starting, ready, pausing, paused, resuming, failed, destroyed");
        if (store_sandbox_list(r->c->store, r->acc.id, status, (page - 1) * limit, limit, &a, &n, &total) < 0)
                return respond_error(r, 500, "Failed to list sandboxes");
        cJSON *items = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(items, sandbox_to_json(r->c, &a[i]));
        sandbox_array_free(a, n);
        return respond_envelope(r, 200, "Sandboxes fetched", paginated(items, total, page, limit));
}

static enum MHD_Result get_sandbox(struct req *r, const char *id) {
        struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        if (sandbox_load(r->c, &r->acc, id, &sb, &e) < 0)
                return respond_api_error(r, &e);
        cJSON *o = sandbox_to_json(r->c, &sb);
        sandbox_clear(&sb);
        return respond_envelope(r, 200, "Sandbox fetched", o);
}

static enum MHD_Result delete_sandbox(struct req *r, const char *id) {
        struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        if (sandbox_load(r->c, &r->acc, id, &sb, &e) < 0)
                return respond_api_error(r, &e);
        log_ctx_set("SANDBOX_ID", id);
        sandbox_clear(&sb);
        if (sandbox_destroy(r->c, id, "user", &e) < 0)
                return respond_api_error(r, &e);
        return respond_empty(r, 204);
}

static bool settled(enum sb_status s) {
        return s == SB_READY || s == SB_PAUSED || s == SB_FAILED || s == SB_DESTROYED;
}

static enum MHD_Result wait_sandbox(struct req *r, const char *id) {
        struct ctl *c = r->c;
        struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        const char *ts = req_query(r, "timeout"), *ss = req_query(r, "status");
        int64_t timeout = 30;
        int want = -1;

        if (ts && (safe_atoi64(ts, &timeout) < 0 || timeout < 0 || (uint64_t) timeout > c->cfg->max_wait_s))
                return respond_error(r, 400, "timeout must be an integer number of seconds between 0 and %llu",
                                     (unsigned long long) c->cfg->max_wait_s);
        if (ss && (want = sb_status_from_str(ss)) < 0)
                return respond_error(r, 400, "status must be one of starting, ready, pausing, paused, resuming, failed, destroyed");
        if (sandbox_load(c, &r->acc, id, &sb, &e) < 0)
                return respond_api_error(r, &e);

        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout;
        for (;;) {
                bool done = want >= 0 ? ((int) sb.status == want || sb.status == SB_FAILED || sb.status == SB_DESTROYED)
                                      : settled(sb.status);
                if (done || c->stopping)
                        break;
                pthread_mutex_lock(&c->wait_lock);
                uint64_t gen = c->status_gen;
                int rc = 0;
                /* Re-read after taking the lock so no notification is missed. */
                sandbox_clear(&sb);
                if (store_sandbox_get(c->store, id, &sb) < 0) {
                        pthread_mutex_unlock(&c->wait_lock);
                        return respond_error(r, 500, "Failed to read the sandbox record");
                }
                done = want >= 0 ? ((int) sb.status == want || sb.status == SB_FAILED || sb.status == SB_DESTROYED)
                                 : settled(sb.status);
                while (!done && gen == c->status_gen && rc == 0 && !c->stopping)
                        rc = pthread_cond_timedwait(&c->wait_cond, &c->wait_lock, &deadline);
                pthread_mutex_unlock(&c->wait_lock);
                if (done)
                        break;
                sandbox_clear(&sb);
                if (store_sandbox_get(c->store, id, &sb) < 0)
                        return respond_error(r, 500, "Failed to read the sandbox record");
                if (rc == ETIMEDOUT)
                        break;
        }
        cJSON *o = sandbox_to_json(c, &sb);
        sandbox_clear(&sb);
        return respond_envelope(r, 200, "Sandbox fetched", o);
}

static enum MHD_Result pause_resume(struct req *r, const char *id, bool pause) {
        struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        if (sandbox_load(r->c, &r->acc, id, &sb, &e) < 0)
                return respond_api_error(r, &e);
        log_ctx_set("SANDBOX_ID", id);
        int k = pause ? sandbox_pause(r->c, &sb, &e) : sandbox_resume(r->c, &sb, &e);
        sandbox_clear(&sb);
        if (k < 0)
                return respond_api_error(r, &e);
        return respond_envelope(r, 200, pause ? "Sandbox pause requested" : "Sandbox resume requested", NULL);
}

static enum MHD_Result get_stats(struct req *r, const char *id) {
        struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        const char *hs = req_query(r, "hoursAgo");
        int64_t hours = 1;
        struct stats_sample *s = NULL;
        size_t n = 0;

        if (hs && (safe_atoi64(hs, &hours) < 0 || hours < 1 || hours > 720))
                return respond_error(r, 400, "hoursAgo must be an integer between 1 and 720");
        if (sandbox_load(r->c, &r->acc, id, &sb, &e) < 0)
                return respond_api_error(r, &e);
        int64_t now = now_ms(), since = now - hours * 3600 * 1000;
        store_stats_range(r->c->store, id, since, &s, &n);

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
        cJSON_AddNumberToObject(mem, "size", (double) sb.memory);
        cJSON *cpu = cJSON_AddObjectToObject(avg, "cpu");
        cJSON_AddNumberToObject(cpu, "totalInPercentage", n ? sum_cpu / (double) n : 0);
        cJSON_AddNumberToObject(cpu, "size", (double) sb.cpu);
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
        free(s);
        sandbox_clear(&sb);
        return respond_envelope(r, 200, "Sandbox stats fetched", d);
}

/* ---- volumes ---- */

cJSON *volume_to_json(struct ctl *c, const struct volume *v) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "id", v->id);
        json_add_str(o, "name", v->name);
        json_add_str(o, "type", v->type);
        json_add_str(o, "team", v->team);
        json_add_str(o, "volume_handle", v->handle);
        json_add_int(o, "size", v->size_gb);
        json_add_region(o, config_region(c->cfg, v->region_key));
        json_add_str(o, "mount_path", v->attached_sandbox_id ? v->mount_path : NULL);
        json_add_str(o, "attached_sandbox_id", v->attached_sandbox_id);
        cJSON_AddNullToObject(o, "attached_project_id");
        json_add_time(o, "last_attached_at", v->last_attached_at);
        json_add_time(o, "created_at", v->created_at);
        json_add_time(o, "updated_at", v->updated_at);
        return o;
}

static enum MHD_Result post_volume(struct req *r) {
        struct ctl *c = r->c;
        struct pj_volume_create in = { 0 };
        struct pj_error pe = { 0 };
        struct volume v = { 0 };
        char derr[256] = "";
        const struct plan *plan = config_plan(c->cfg, r->acc.plan);
        enum MHD_Result res;

        if (pj_volume_create_parse(r->body.buf, r->body.len, &in, &pe) < 0) {
                pj_volume_create_done(&in);
                return pj_fail(r, &pe);
        }
        const struct region *g = config_region(c->cfg, in.region);
        if (!g) {
                res = respond_error(r, 400, "region: unknown region id '%s'. List regions with GET /sandboxes/regions.", in.region);
                goto out;
        }
        if (!plan) {
                res = respond_error(r, 403, "Your account's plan '%s' is not available on this server.", r->acc.plan);
                goto out;
        }
        if (!g->enabled) {
                res = respond_error(r, 403, "Region %s is not accepting new volumes.", g->name);
                goto out;
        }
        if (!plan_allows_region(plan, g)) {
                res = respond_error(r, 403, "Your plan does not allow volumes in region %s. Pick another region or upgrade.",
                                    g->name);
                goto out;
        }
        if (in.size_gb > plan->max_volume_gb) {
                res = respond_error(r, 403, "Your plan allows volumes up to %lldGB. Reduce size or upgrade.",
                                    (long long) plan->max_volume_gb);
                goto out;
        }
        hexid_new(v.id);
        snprintf(v.account_id, sizeof(v.account_id), "%s", r->acc.id);
        v.name = xstrdup(in.name);
        v.type = xstrdup(in.type ? in.type : "web");
        v.region_key = xstrdup(g->key);
        v.team = in.team_id ? xstrdup(in.team_id) : NULL;
        v.handle = xasprintf("paddock-vol-%s", v.id);
        v.size_gb = in.size_gb;
        v.created_at = v.updated_at = now_ms();
        int k = store_volume_insert_capped(c->store, &v, plan->max_volumes);
        if (k == -EDQUOT) {
                res = respond_error(r, 403, "Your plan allows up to %lld volumes. Delete an existing one or upgrade.",
                                    (long long) plan->max_volumes);
                goto out;
        }
        if (k == -EEXIST) {
                res = respond_error(r, 400, "A volume named \"%s\" already exists", in.name);
                goto out;
        }
        if (k < 0) {
                res = respond_error(r, 500, "Failed to record the volume");
                goto out;
        }
        if (c->drv->volume_create(c->drv, v.handle, v.size_gb, derr, sizeof(derr)) < 0) {
                store_volume_delete(c->store, v.id);
                res = respond_error(r, 503, "Volume provisioning failed: %s", derr);
                goto out;
        }
        res = respond_envelope(r, 201, "Volume created", volume_to_json(c, &v));
out:
        volume_clear(&v);
        pj_volume_create_done(&in);
        return res;
}

static enum MHD_Result list_volumes(struct req *r) {
        int64_t page, limit, total = 0;
        struct volume *a = NULL;
        size_t n = 0;
        if (req_pagination(r, &page, &limit) < 0)
                return MHD_YES;
        if (store_volume_list(r->c->store, r->acc.id, (page - 1) * limit, limit, &a, &n, &total) < 0)
                return respond_error(r, 500, "Failed to list volumes");
        cJSON *items = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(items, volume_to_json(r->c, &a[i]));
        volume_array_free(a, n);
        return respond_envelope(r, 200, "Volumes fetched", paginated(items, total, page, limit));
}

static int load_volume(struct req *r, const char *id, struct volume *v) {
        if (!hexid_valid(id)) {
                respond_error(r, 400, "Invalid volume id");
                return -EINVAL;
        }
        if (store_volume_get(r->c->store, id, v) < 0 || strcmp(v->account_id, r->acc.id) != 0) {
                volume_clear(v);
                respond_error(r, 404, "Volume not found");
                return -ENOENT;
        }
        return 0;
}

static enum MHD_Result get_volume(struct req *r, const char *id) {
        struct volume v = { 0 };
        if (load_volume(r, id, &v) < 0)
                return MHD_YES;
        cJSON *o = volume_to_json(r->c, &v);
        volume_clear(&v);
        return respond_envelope(r, 200, "Volume fetched", o);
}

static enum MHD_Result delete_volume(struct req *r, const char *id) {
        struct volume v = { 0 };
        char derr[256] = "";
        if (load_volume(r, id, &v) < 0)
                return MHD_YES;
        if (v.attached_sandbox_id) {
                volume_clear(&v);
                return respond_error(r, 400, "Volume is attached; detach it before deleting");
        }
        if (r->c->drv->volume_remove(r->c->drv, v.handle, derr, sizeof(derr)) < 0) {
                volume_clear(&v);
                return respond_error(r, 503, "Volume deletion failed: %s", derr);
        }
        int k = store_volume_delete(r->c->store, id);
        volume_clear(&v);
        if (k == -EBUSY)
                return respond_error(r, 400, "Volume is attached; detach it before deleting");
        if (k < 0)
                return respond_error(r, 500, "Failed to delete the volume record");
        return respond_empty(r, 204);
}

/* ---- routing ---- */

static bool is(struct req *r, const char *m) { return !strcmp(r->method, m); }

#define ROUTE(label) (r->route = (label))

enum MHD_Result api_prepare(struct req *r, bool *ret_answered) {
        *ret_answered = false;
        return runtime_prepare(r, ret_answered);
}

enum MHD_Result api_dispatch(struct req *r) {
        char **p = r->parts;
        size_t n = r->n_parts;

        if (n == 2 && !strcmp(p[0], "sandbox") && !strcmp(p[1], "templates")) {
                ROUTE("/sandbox/templates");
                return is(r, "GET") ? get_templates(r) : respond_method_not_allowed(r, "GET");
        }
        if (n >= 1 && !strcmp(p[0], "volumes")) {
                if (n == 1) {
                        ROUTE("/volumes");
                        if (is(r, "POST"))
                                return post_volume(r);
                        if (is(r, "GET"))
                                return list_volumes(r);
                        return respond_method_not_allowed(r, "GET, POST");
                }
                if (n == 2) {
                        ROUTE("/volumes/{id}");
                        if (is(r, "GET"))
                                return get_volume(r, p[1]);
                        if (is(r, "DELETE"))
                                return delete_volume(r, p[1]);
                        return respond_method_not_allowed(r, "GET, DELETE");
                }
        }
        if (n >= 1 && !strcmp(p[0], "sandboxes")) {
                if (n == 1) {
                        ROUTE("/sandboxes");
                        if (is(r, "POST"))
                                return post_sandboxes(r);
                        if (is(r, "GET"))
                                return list_sandboxes(r);
                        return respond_method_not_allowed(r, "GET, POST");
                }
                if (n == 2 && !strcmp(p[1], "regions")) {
                        ROUTE("/sandboxes/regions");
                        return is(r, "GET") ? get_regions(r) : respond_method_not_allowed(r, "GET");
                }
                if (n == 2 && !strcmp(p[1], "snapshots")) {
                        ROUTE("/sandboxes/snapshots");
                        if (!is(r, "GET"))
                                return respond_method_not_allowed(r, "GET");
                        int64_t page, limit;
                        if (req_pagination(r, &page, &limit) < 0)
                                return MHD_YES;
                        return respond_envelope(r, 200, "Snapshots fetched", paginated(cJSON_CreateArray(), 0, page, limit));
                }
                if (n == 3 && !strcmp(p[1], "snapshots")) {
                        ROUTE("/sandboxes/snapshots/{id}");
                        if (!is(r, "DELETE"))
                                return respond_method_not_allowed(r, "DELETE");
                        if (!hexid_valid(p[2]))
                                return respond_error(r, 400, "Invalid snapshot id");
                        return respond_error(r, 404, "Snapshot not found");
                }
                if (!hexid_valid(p[1]) && strcmp(p[1], "regions") != 0 && strcmp(p[1], "snapshots") != 0) {
                        ROUTE(n == 2 ? "/sandboxes/{id}" : "/sandboxes/{id}/...");
                        return respond_error(r, 400, "Invalid sandbox id");
                }
                if (n == 2) {
                        ROUTE("/sandboxes/{id}");
                        if (is(r, "GET"))
                                return get_sandbox(r, p[1]);
                        if (is(r, "DELETE"))
                                return delete_sandbox(r, p[1]);
                        return respond_method_not_allowed(r, "GET, DELETE");
                }
                if (n == 3) {
                        const char *op = p[2];
                        if (!strcmp(op, "wait")) {
                                ROUTE("/sandboxes/{id}/wait");
                                return is(r, "GET") ? wait_sandbox(r, p[1]) : respond_method_not_allowed(r, "GET");
                        }
                        if (!strcmp(op, "pause") || !strcmp(op, "resume")) {
                                ROUTE(!strcmp(op, "pause") ? "/sandboxes/{id}/pause" : "/sandboxes/{id}/resume");
                                return is(r, "POST") ? pause_resume(r, p[1], !strcmp(op, "pause"))
                                                     : respond_method_not_allowed(r, "POST");
                        }
                        if (!strcmp(op, "stats")) {
                                ROUTE("/sandboxes/{id}/stats");
                                return is(r, "GET") ? get_stats(r, p[1]) : respond_method_not_allowed(r, "GET");
                        }
                        if (!strcmp(op, "egress")) {
                                ROUTE("/sandboxes/{id}/egress");
                                if (!is(r, "PUT"))
                                        return respond_method_not_allowed(r, "PUT");
                                struct sandbox sb = { 0 };
                                struct api_error e = { 0 };
                                if (sandbox_load(r->c, &r->acc, p[1], &sb, &e) < 0)
                                        return respond_api_error(r, &e);
                                sandbox_clear(&sb);
                                struct pj_egress_update u = { 0 };
                                struct pj_error pe = { 0 };
                                int k = pj_egress_update_parse(r->body.buf, r->body.len, &u, &pe);
                                pj_egress_update_done(&u);
                                if (k < 0)
                                        return pj_fail(r, &pe);
                                return respond_error(r, 501, "Changing egress after create is not available on this server yet");
                        }
                        if (!strcmp(op, "snapshots")) {
                                ROUTE("/sandboxes/{id}/snapshots");
                                struct sandbox sb = { 0 };
                                struct api_error e = { 0 };
                                if (!is(r, "GET") && !is(r, "POST"))
                                        return respond_method_not_allowed(r, "GET, POST");
                                if (sandbox_load(r->c, &r->acc, p[1], &sb, &e) < 0)
                                        return respond_api_error(r, &e);
                                sandbox_clear(&sb);
                                if (is(r, "GET")) {
                                        int64_t page, limit;
                                        if (req_pagination(r, &page, &limit) < 0)
                                                return MHD_YES;
                                        return respond_envelope(r, 200, "Snapshots fetched",
                                                                paginated(cJSON_CreateArray(), 0, page, limit));
                                }
                                /* A bad body is still the client's to fix: say so before the 501. */
                                struct pj_snapshot_create sc = { 0 };
                                struct pj_error spe = { 0 };
                                int sk = pj_snapshot_create_parse(r->body.buf, r->body.len, &sc, &spe);
                                pj_snapshot_create_done(&sc);
                                if (sk < 0)
                                        return pj_fail(r, &spe);
                                return respond_error(r, 501, "Snapshots are not available on this server yet");
                        }
                }
                if (n >= 3) {
                        enum MHD_Result res;
                        if (runtime_dispatch(r, &res))
                                return res;
                }
        }
        ROUTE("unmatched");
        return respond_error(r, 404, "No route for %s %s", r->method, r->path);
}
