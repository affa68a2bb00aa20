/* api.c — the public API routes (Brimble Sandbox API wire shape) and our additions. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "controld.h"
#include "http.h"
#include "json.h"
#include "preview.h"
#include "terminal.h"
#include "secrets.h"
#include "templates.h"
#include "log.h"
#include "strutil.h"
#include "ctl-egress.h"
#include "render.h"
#include "sandbox.h"
#include "volume-content.h"
#include "snapshot.h"
#include "template.h"

static enum MHD_Result pj_fail(struct req *r, const struct err *e) {
        return respond_error(r, 400, "%s", e->message[0] ? e->message : "Invalid request body");
}

/* ---- templates and regions ---- */

static enum MHD_Result get_templates(struct req *r) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < r->c->cfg->n_templates; i++) {
                const struct template *t = &r->c->cfg->templates[i];
                cJSON_AddItemToArray(a, template_to_json(t, template_size_mb(r->c, t)));
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
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create in = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };

        if (pj_sandbox_create_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return pj_fail(r, &pe);
        int k = volume_content_sandbox_create(r->c, &r->acc, &in, &sb, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_envelope(r, 201, "Sandbox created", sandbox_created_to_json(&sb));
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
        return respond_envelope(r, 200, "Sandboxes fetched", render_page(items, total, page, limit));
}

/* Loads the caller's sandbox of the route into sb. When it cannot (not found, not the
 * caller's, store failure) it answers with the error, puts the answer's result in *ret and
 * returns false. */
static bool load_sandbox(struct req *r, struct sandbox *sb, enum MHD_Result *ret) {
        struct err e = { 0 };
        int k = sandbox_load(r->c, &r->acc, r->m.id, sb, &e);
        if (k < 0)
                *ret = respond_errno(r, k, &e);
        return k >= 0;
}

/* Answers and returns < 0 unless the caller owns the sandbox of the route. */
static int own_sandbox(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        enum MHD_Result res;
        return load_sandbox(r, &sb, &res) ? 0 : -1;
}

/* GET of a view of the caller's sandbox of the route: sandbox_to_json, ctl_egress_to_json. */
static enum MHD_Result respond_sandbox_view(struct req *r, const char *message,
                                           cJSON *(*view)(struct ctl *c, const struct sandbox *sb)) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        enum MHD_Result res;
        if (!load_sandbox(r, &sb, &res))
                return res;
        return respond_envelope(r, 200, message, view(r->c, &sb));
}

static enum MHD_Result get_sandbox(struct req *r) {
        return respond_sandbox_view(r, "Sandbox fetched", sandbox_to_json);
}

static enum MHD_Result delete_sandbox(struct req *r) {
        struct err e = { 0 };
        if (own_sandbox(r) < 0)
                return MHD_YES;
        log_ctx_set("SANDBOX_ID", r->m.id);
        int k = sandbox_destroy(r->c, r->m.id, "user", &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

static bool settled(enum sb_status s) {
        return s == SB_READY || s == SB_PAUSED || s == SB_FAILED || s == SB_DESTROYED;
}

static bool wait_done(const struct sandbox *sb, const void *ud) {
        int want = *(const int *) ud;
        return want >= 0 ? ((int) sb->status == want || sb->status == SB_FAILED || sb->status == SB_DESTROYED)
                         : settled(sb->status);
}

static enum MHD_Result wait_sandbox(struct req *r) {
        struct ctl *c = r->c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        const char *ts = req_query(r, "timeout"), *ss = req_query(r, "status");
        int64_t timeout = 30;
        int want = -1;

        if (ts && (safe_atoi64(ts, &timeout) < 0 || timeout < 0 || (uint64_t) timeout > c->cfg->max_wait_s))
                return respond_error(r, 400, "timeout must be an integer number of seconds between 0 and %llu",
                                     (unsigned long long) c->cfg->max_wait_s);
        if (ss && (want = sb_status_from_str(ss)) < 0)
                return respond_error(r, 400, "status must be one of starting, ready, pausing, paused, resuming, failed, destroyed");
        enum MHD_Result res;
        if (!load_sandbox(r, &sb, &res))
                return res;
        if (ctl_wait_sandbox(c, r->m.id, wait_done, &want, timeout * 1000, &sb) < 0)
                return respond_error(r, 500, "Failed to read the sandbox record");
        return respond_envelope(r, 200, "Sandbox fetched", sandbox_to_json(c, &sb));
}

static enum MHD_Result pause_resume(struct req *r, bool pause) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_free_ char *note = NULL;
        struct err e = { 0 };
        struct err pe = { 0 };
        bool keep_memory = false;
        enum MHD_Result res;
        if (pause && pj_pause_parse(r->body.buf, r->body.len, &keep_memory, &pe) < 0)
                return pj_fail(r, &pe);
        if (!load_sandbox(r, &sb, &res))
                return res;
        log_ctx_set("SANDBOX_ID", r->m.id);
        int k = pause ? sandbox_pause(r->c, &sb, keep_memory, &e) : sandbox_resume(r->c, &sb, &note, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        /* A resume that could not restore the memory kept says so (the sandbox started afresh). */
        cJSON *data = NULL;
        if (note) {
                data = cJSON_CreateObject();
                cJSON_AddBoolToObject(data, "memory_lost", true);
                cJSON_AddStringToObject(data, "reason", note);
        }
        return respond_envelope(r, 200, note ? note : pause ? "Sandbox pause requested" : "Sandbox resume requested", data);
}

/* POST /sandboxes/{id}/fork {"count", "timeout"}: copies of the running sandbox, memory and
 * filesystem (fork.c). 201 with one entry per fork in data: {"sandbox": ...} or {"error":
 * {"status", "message"}}; a failure before any fork is the status itself. */
static enum MHD_Result post_fork(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 }, e = { 0 };
        int count = 1, timeout = -1;
        enum MHD_Result res;
        if (pj_fork_parse(r->body.buf, r->body.len, SANDBOX_FORK_MAX, 30 * 24 * 3600, &count, &timeout, &pe) < 0)
                return pj_fail(r, &pe);
        if (!load_sandbox(r, &sb, &res))
                return res;
        log_ctx_set("SANDBOX_ID", r->m.id);
        struct sandbox_fork_result *out = xnew0(struct sandbox_fork_result, (size_t) count);
        int k = sandbox_fork(r->c, &r->acc, &sb, count, timeout < 0 ? 0 : timeout, out, &e);
        if (k < 0) {
                free(out);
                return respond_errno(r, k, &e);
        }
        int made = 0;
        cJSON *a = fork_results_json(r->c, out, count, sandbox_to_json, http_status_from_errno, "status", &made);
        free(out);
        _cleanup_free_ char *msg = xasprintf("Sandbox forked: %d of %d copies running", made, count);
        return respond_envelope(r, 201, msg, a);
}

static enum MHD_Result post_pause(struct req *r) { return pause_resume(r, true); }
static enum MHD_Result post_resume(struct req *r) { return pause_resume(r, false); }

static enum MHD_Result get_stats(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_free_ struct stats_sample *s = NULL;
        const char *hs = req_query(r, "hoursAgo");
        int64_t hours = 1;
        size_t n = 0;

        if (hs && (safe_atoi64(hs, &hours) < 0 || hours < 1 || hours > 720))
                return respond_error(r, 400, "hoursAgo must be an integer between 1 and 720");
        enum MHD_Result res;
        if (!load_sandbox(r, &sb, &res))
                return res;
        int64_t since = now_ms() - hours * 3600 * 1000;
        (void) store_stats_range(r->c->store, r->m.id, since, &s, &n);  /* no samples: an empty window */
        return respond_envelope(r, 200, "Sandbox stats fetched", stats_to_json(&sb, s, n, since, hours));
}

/* ---- volumes ---- */

static enum MHD_Result post_volume(struct req *r) {
        _cleanup_(pj_volume_create_done) struct pj_volume_create in = { 0 };
        _cleanup_volume_ struct volume v = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };

        if (pj_volume_create_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return pj_fail(r, &pe);
        int k = volume_create(r->c, &r->acc, &in, &v, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_envelope(r, 201, "Volume created", volume_to_json(r->c, &v));
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
        return respond_envelope(r, 200, "Volumes fetched", render_page(items, total, page, limit));
}

static enum MHD_Result get_volume(struct req *r) {
        _cleanup_volume_ struct volume v = { 0 };
        struct err e = { 0 };
        int k = volume_load(r->c, &r->acc, r->m.id, &v, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_envelope(r, 200, "Volume fetched", volume_to_json(r->c, &v));
}

/* DELETE of the caller's volume or snapshot of the route: 204 or the domain's error. */
static enum MHD_Result respond_delete(struct req *r,
                                     int (*del)(struct ctl *c, const struct account *acc, const char *id, struct err *err)) {
        struct err e = { 0 };
        int k = del(r->c, &r->acc, r->m.id, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

static enum MHD_Result delete_volume(struct req *r) {
        return respond_delete(r, volume_content_volume_delete);
}

/* ---- egress (enforced by the node agents, egress.c) and snapshots (snapshot.c) ---- */

static enum MHD_Result put_egress(struct req *r) {
        _cleanup_(pj_egress_update_done) struct pj_egress_update u = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        bool updated = false;
        if (own_sandbox(r) < 0)
                return MHD_YES;
        if (pj_egress_update_parse(r->body.buf, r->body.len, &u, &pe) < 0)
                return pj_fail(r, &pe);
        log_ctx_set("SANDBOX_ID", r->m.id);
        int k = sandbox_set_egress(r->c, &r->acc, r->m.id, &u.egress, &sb, &updated, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_envelope(r, 200, "Sandbox egress updated", egress_update_to_json(r->c, &sb, updated));
}

static enum MHD_Result get_egress(struct req *r) {
        return respond_sandbox_view(r, "Sandbox egress fetched", ctl_egress_to_json);
}

static enum MHD_Result snapshot_page(struct req *r, const char *sandbox_id) {
        int64_t page, limit, total = 0;
        struct snapshot *a = NULL;
        size_t n = 0;
        if (req_pagination(r, &page, &limit) < 0)
                return MHD_YES;
        if (store_snapshot_list(r->c->store, r->acc.id, sandbox_id, (page - 1) * limit, limit, &a, &n, &total) < 0)
                return respond_error(r, 500, "Failed to list snapshots");
        cJSON *items = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(items, snapshot_to_json(&a[i]));
        snapshot_array_free(a, n);
        return respond_envelope(r, 200, "Snapshots fetched", render_page(items, total, page, limit));
}

static enum MHD_Result list_snapshots(struct req *r) {
        return snapshot_page(r, NULL);
}

static enum MHD_Result delete_snapshot(struct req *r) {
        return respond_delete(r, snapshot_delete);
}

static enum MHD_Result list_sandbox_snapshots(struct req *r) {
        if (own_sandbox(r) < 0)
                return MHD_YES;
        return snapshot_page(r, r->m.id);
}

static enum MHD_Result post_sandbox_snapshot(struct req *r) {
        _cleanup_(pj_snapshot_create_done) struct pj_snapshot_create sc = { 0 };
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        if (own_sandbox(r) < 0)
                return MHD_YES;
        if (pj_snapshot_create_parse(r->body.buf, r->body.len, &sc, &pe) < 0)
                return pj_fail(r, &pe);
        log_ctx_set("SANDBOX_ID", r->m.id);
        int k = snapshot_create(r->c, &r->acc, r->m.id, sc.name, false, &sn, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_envelope(r, 202, "Snapshot creation started", snapshot_to_json(&sn));
}

/* ---- the route table ---- */

#define J ROUTE_BODY_JSON
#define L ROUTE_BODY_LARGE
#define S ROUTE_BODY_STREAM
#define SB "sandbox"

/* The one place a request finds its handler. Same-pattern rows together, in the
 * order their methods appear in Allow; literal segments before {id}. */
static const struct route routes[] = {
        /* method   pattern                             label                             noun        auth   head   body prepare handler */
        { "GET",    "/healthz",                         "/healthz",                       NULL,       false, true,  J, NULL, http_get_healthz },
        { "GET",    "/metrics",                         "/metrics",                       NULL,       false, true,  J, NULL, http_get_metrics },
        { "GET",    "/terminal/xterm.js",               "/terminal/xterm.js",             NULL,       false, true,  J, NULL, terminal_get_asset },
        { "GET",    "/terminal/xterm.css",              "/terminal/xterm.css",            NULL,       false, true,  J, NULL, terminal_get_asset },
        { "GET",    "/terminal/addon-fit.js",           "/terminal/addon-fit.js",         NULL,       false, true,  J, NULL, terminal_get_asset },
        { "GET",    "/terminal/terminal.js",            "/terminal/terminal.js",          NULL,       false, true,  J, NULL, terminal_get_asset },
        { "GET",    "/sandbox/templates",               "/sandbox/templates",             NULL,       true,  false, J, NULL, get_templates },
        { "GET",    "/sandboxes",                       "/sandboxes",                     NULL,       true,  false, J, NULL, list_sandboxes },
        { "POST",   "/sandboxes",                       "/sandboxes",                     NULL,       true,  false, J, NULL, post_sandboxes },
        { "GET",    "/sandboxes/regions",               "/sandboxes/regions",             NULL,       true,  false, J, NULL, get_regions },
        { "GET",    "/sandboxes/snapshots",             "/sandboxes/snapshots",           NULL,       true,  false, J, NULL, list_snapshots },
        { "DELETE", "/sandboxes/snapshots/{id}",        "/sandboxes/snapshots/{id}",      "snapshot", true,  false, J, NULL, delete_snapshot },
        { "GET",    "/sandboxes/{id}",                  "/sandboxes/{id}",                SB,         true,  false, J, NULL, get_sandbox },
        { "DELETE", "/sandboxes/{id}",                  "/sandboxes/{id}",                SB,         true,  false, J, NULL, delete_sandbox },
        { "GET",    "/sandboxes/{id}/wait",             "/sandboxes/{id}/wait",           SB,         true,  false, J, NULL, wait_sandbox },
        { "POST",   "/sandboxes/{id}/pause",            "/sandboxes/{id}/pause",          SB,         true,  false, J, NULL, post_pause },
        { "POST",   "/sandboxes/{id}/fork",             "/sandboxes/{id}/fork",           SB,         true,  false, J, NULL, post_fork },
        { "POST",   "/sandboxes/{id}/resume",           "/sandboxes/{id}/resume",         SB,         true,  false, J, NULL, post_resume },
        { "GET",    "/sandboxes/{id}/stats",            "/sandboxes/{id}/stats",          SB,         true,  false, J, NULL, get_stats },
        { "GET",    "/sandboxes/{id}/egress",           "/sandboxes/{id}/egress",         SB,         true,  false, J, NULL, get_egress },
        { "PUT",    "/sandboxes/{id}/egress",           "/sandboxes/{id}/egress",         SB,         true,  false, J, NULL, put_egress },
        { "GET",    "/sandboxes/{id}/snapshots",        "/sandboxes/{id}/snapshots",      SB,         true,  false, J, NULL, list_sandbox_snapshots },
        { "POST",   "/sandboxes/{id}/snapshots",        "/sandboxes/{id}/snapshots",      SB,         true,  false, J, NULL, post_sandbox_snapshot },
        { "POST",   "/sandboxes/{id}/exec",             "/sandboxes/{id}/exec",           SB,         true,  false, L, NULL, runtime_post_exec },
        { "POST",   "/sandboxes/{id}/code",             "/sandboxes/{id}/code",           SB,         true,  false, L, NULL, runtime_post_code },
        { "POST",   "/sandboxes/{id}/files/batch",      "/sandboxes/{id}/files/batch",    SB,         true,  false, L, NULL, runtime_post_batch },
        { "GET",    "/sandboxes/{id}/files/{path*}",    "/sandboxes/{id}/files/{path}",   SB,         true,  false, J, NULL, runtime_get_file },
        { "PUT",    "/sandboxes/{id}/files/{path*}",    "/sandboxes/{id}/files/{path}",   SB,         true,  false, S, runtime_prepare_put_file, runtime_put_file },
        { "GET",    "/sandboxes/{id}/pty",              "/sandboxes/{id}/pty",            SB,         false, false, J, NULL, terminal_get_pty },
        { "POST",   "/sandboxes/{id}/pty/token",        "/sandboxes/{id}/pty/token",      SB,         true,  false, J, NULL, terminal_post_token },
        { "GET",    "/sandboxes/{id}/terminal",         "/sandboxes/{id}/terminal",       SB,         false, false, J, NULL, terminal_get_page },
        { "GET",    "/sandboxes/{id}/previews",         "/sandboxes/{id}/previews",       SB,         true,  false, J, NULL, preview_list },
        { "POST",   "/sandboxes/{id}/previews",         "/sandboxes/{id}/previews",       SB,         true,  false, J, NULL, preview_post },
        { "DELETE", "/sandboxes/{id}/previews/{pid}",   "/sandboxes/{id}/previews/{port}", SB,        true,  false, J, NULL, preview_delete },
        { "GET",    "/sandboxes/{id}/processes",        "/sandboxes/{id}/processes",      SB,         true,  false, J, NULL, process_get_list },
        { "POST",   "/sandboxes/{id}/processes",        "/sandboxes/{id}/processes",      SB,         true,  false, J, NULL, process_post_start },
        { "GET",    "/sandboxes/{id}/processes/{pid}/stream", "/sandboxes/{id}/processes/{pid}/stream", SB, true, false, J, NULL, process_get_stream },
        { "POST",   "/sandboxes/{id}/processes/{pid}/stdin", "/sandboxes/{id}/processes/{pid}/stdin", SB, true, false, L, NULL, process_post_stdin },
        { "POST",   "/sandboxes/{id}/processes/{pid}/signal", "/sandboxes/{id}/processes/{pid}/signal", SB, true, false, J, NULL, process_post_signal },
        { "POST",   "/sandboxes/{id}/processes/{pid}/resize", "/sandboxes/{id}/processes/{pid}/resize", SB, true, false, J, NULL, process_post_resize },
        { "GET",    "/sandboxes/{id}/watch",            "/sandboxes/{id}/watch",          SB,         true,  false, J, NULL, watch_get_stream },
        { "GET",    "/templates",                       "/templates",                     NULL,       true,  false, J, NULL, templates_list },
        { "POST",   "/templates",                       "/templates",                     NULL,       true,  false, L, NULL, templates_post },
        { "GET",    "/templates/{path*}",               "/templates/{name}",              NULL,       true,  false, J, NULL, templates_get },
        { "DELETE", "/templates/{path*}",               "/templates/{name}",              NULL,       true,  false, J, NULL, templates_delete },
        { "GET",    "/secrets",                         "/secrets",                       NULL,       true,  false, J, NULL, secrets_list },
        { "POST",   "/secrets",                         "/secrets",                       NULL,       true,  false, J, NULL, secrets_post },
        { "GET",    "/secrets/{path*}",                 "/secrets/{name}",                NULL,       true,  false, J, NULL, secrets_get },
        { "PUT",    "/secrets/{path*}",                 "/secrets/{name}",                NULL,       true,  false, J, NULL, secrets_put },
        { "DELETE", "/secrets/{path*}",                 "/secrets/{name}",                NULL,       true,  false, J, NULL, secrets_delete },
        { "GET",    "/volumes",                         "/volumes",                       NULL,       true,  false, J, NULL, list_volumes },
        { "POST",   "/volumes",                         "/volumes",                       NULL,       true,  false, J, NULL, post_volume },
        { "GET",    "/volumes/{id}",                    "/volumes/{id}",                  "volume",   true,  false, J, NULL, get_volume },
        { "DELETE", "/volumes/{id}",                    "/volumes/{id}",                  "volume",   true,  false, J, NULL, delete_volume },
};

#undef J
#undef L
#undef S
#undef SB

const struct route *route_table(size_t *ret_n) {
        *ret_n = ELEMENTSOF(routes);
        return routes;
}

/* Walks pattern and path together. Repeated and trailing slashes in the path do not make
 * segments. Sets *ret_id, *ret_id_len to the {id} segment and *ret_rest to the {path*}
 * rest (from the '/' before it). No allocation, one pass over each string. */
static bool pattern_match(const char *pat, const char *path, const char **ret_id, size_t *ret_id_len, const char **ret_rest,
                          int64_t *ret_pid) {
        const char *p = pat, *s = path;
        for (;;) {
                while (*p == '/')
                        p++;
                while (*s == '/')
                        s++;
                if (!*p)
                        return !*s;
                if (!*s)
                        return false;
                const char *pe = strchrnul(p, '/'), *se = strchrnul(s, '/');
                size_t pn = (size_t) (pe - p), sn = (size_t) (se - s);
                if (pn == 7 && !memcmp(p, "{path*}", 7)) {
                        *ret_rest = s - 1;
                        return true;
                }
                if (pn == 4 && !memcmp(p, "{id}", 4)) {
                        *ret_id = s;
                        *ret_id_len = sn;
                } else if (pn == 5 && !memcmp(p, "{pid}", 5)) {
                        /* a process id: 1..2^31-1 in plain decimal, else no match (404) */
                        int64_t v = 0;
                        if (sn == 0 || sn > 10 || s[0] == '0')
                                return false;
                        for (size_t k = 0; k < sn; k++) {
                                if (s[k] < '0' || s[k] > '9')
                                        return false;
                                v = v * 10 + (s[k] - '0');
                        }
                        if (v > INT32_MAX)
                                return false;
                        *ret_pid = v;
                } else if (pn != sn || memcmp(p, s, pn) != 0)
                        return false;
                p = pe;
                s = se;
        }
}

static bool method_is(const struct route *rt, const char *method) {
        return !strcmp(rt->method, method) || (rt->head && !strcmp(method, "HEAD"));
}

enum route_status route_match(const char *method, const char *path, struct route_match *ret) {
        return route_match_in(routes, ELEMENTSOF(routes), method, path, ret);
}

enum route_status route_match_in(const struct route *tab, size_t n_routes, const char *method, const char *path,
                                 struct route_match *ret) {
        const struct route *first = NULL;
        const char *id = NULL, *rest = NULL;
        size_t id_len = 0, i;
        int64_t pid = 0;

        *ret = (struct route_match) { .status = ROUTE_NOT_FOUND };
        for (i = 0; i < n_routes; i++, id = rest = NULL, pid = 0)
                if (pattern_match(tab[i].pattern, path, &id, &id_len, &rest, &pid)) {
                        first = &tab[i];
                        break;
                }
        if (!first)
                return ret->status;
        ret->row = first;
        ret->rest = rest;
        ret->pid = (uint32_t) pid;
        if (id) {
                if (id_len != SANDBOX_ID_LEN)
                        return (ret->status = ROUTE_BAD_ID);
                memcpy(ret->id, id, id_len);
                ret->id[id_len] = 0;
                if (!hexid_valid(ret->id)) {
                        ret->id[0] = 0;
                        return (ret->status = ROUTE_BAD_ID);
                }
        }
        /* Rows of one pattern are adjacent. */
        size_t off = 0;
        for (; i < n_routes && !strcmp(tab[i].pattern, first->pattern); i++) {
                if (method_is(&tab[i], method)) {
                        ret->row = &tab[i];
                        ret->allow[0] = 0;
                        return (ret->status = ROUTE_FOUND);
                }
                int n = snprintf(ret->allow + off, sizeof(ret->allow) - off, "%s%s", off ? ", " : "", tab[i].method);
                if (n > 0 && (size_t) n < sizeof(ret->allow) - off)
                        off += (size_t) n;
        }
        return (ret->status = ROUTE_BAD_METHOD);
}
