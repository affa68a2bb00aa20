/* e2b-api.c — the handlers of E2B's control plane (e2b.c has the listener and the route table):
 * create (v1 and v2), get, list, delete, timeout, pause, connect, network, metrics and snapshots,
 * each parsing with proto-json (pj_e2b), calling the core and answering E2B's shapes. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "cleanup.h"
#include "controld.h"
#include "e2b.h"
#include "e2b-private.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_e2b.h"
#include "render.h"
#include "session.h"
#include "strutil.h"
#include "sandbox.h"
#include "volume-content.h"
#include "snapshot.h"

#define AGENT_READY_TIMEOUT_MS 30000
#define LIST_MAX 10000

static const char *template_of(const struct sandbox *sb) {
        const char *t = sb->e2b.template_id;
        return t ? t : sb->template_name ? sb->template_name : "";
}

/* ---- answers ---- */

cJSON *e2b_error_body(int status, const char *message) {
        cJSON *o = cJSON_CreateObject();
        json_add_int(o, "code", status);
        json_add_str(o, "message", message);
        return o;
}

static const char *state_of(enum sb_status s) {
        return s == SB_PAUSED || s == SB_PAUSING ? "paused" : "running";
}

static void add_time(cJSON *o, const char *k, int64_t ms) {
        char t[32];
        format_rfc3339_ms(ms, t);
        json_add_str(o, k, t);
}

/* Sandbox (create, connect): what the SDK needs to reach envd. */
static cJSON *sandbox_json(struct ctl *c, const struct sandbox *sb) {
        char tok[65];
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "templateID", template_of(sb));
        json_add_str(o, "sandboxID", sb->id);
        json_add_str(o, "alias", sb->template_name);
        json_add_str(o, "clientID", "paddock");
        json_add_str(o, "envdVersion", PJ_E2B_ENVD_VERSION);
        e2b_token(c, "envd", sb->id, tok);
        json_add_str(o, "envdAccessToken", tok);
        if (!e2b_opt_public(sb)) {
                e2b_token(c, "traffic", sb->id, tok);
                json_add_str(o, "trafficAccessToken", tok);
        } else
                cJSON_AddNullToObject(o, "trafficAccessToken");
        json_add_str(o, "domain", e2b_domain());
        explicit_bzero(tok, sizeof(tok));
        return o;
}

/* SandboxDetail (detailed) and ListedSandbox. */
static cJSON *listed_json(struct ctl *c, const struct sandbox *sb, bool detailed) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "templateID", template_of(sb));
        json_add_str(o, "alias", sb->template_name);
        json_add_str(o, "sandboxID", sb->id);
        json_add_str(o, "clientID", "paddock");
        add_time(o, "startedAt", sb->created_at);
        add_time(o, "endAt", sb->expires_at);
        json_add_int(o, "cpuCount", sb->cpu >= 1000 ? (sb->cpu + 999) / 1000 : 1);
        json_add_int(o, "memoryMB", sb->memory);
        json_add_int(o, "diskSizeMB", sb->disk * 1024);
        cJSON_AddItemToObject(o, "metadata", sb_map_to_json(&sb->metadata));
        json_add_str(o, "state", state_of(sb->status));
        json_add_str(o, "envdVersion", PJ_E2B_ENVD_VERSION);
        cJSON *vm = cJSON_AddArrayToObject(o, "volumeMounts");
        _cleanup_volume_ struct volume vol = { 0 };
        if (sb->volume_id && store_volume_get(c->store, sb->volume_id, &vol) == 0) {
                cJSON *m = cJSON_CreateObject();
                json_add_str(m, "name", vol.name);
                json_add_str(m, "path", sb->mount_path ? sb->mount_path : vol.mount_path);
                cJSON_AddItemToArray(vm, m);
        }
        if (detailed) {
                char tok[65];
                e2b_token(c, "envd", sb->id, tok);
                json_add_str(o, "envdAccessToken", tok);
                explicit_bzero(tok, sizeof(tok));
                json_add_str(o, "domain", e2b_domain());
                json_add_bool(o, "allowInternetAccess", sb->egress.mode == PJ_EGRESS_OPEN);
                cJSON *net = cJSON_AddObjectToObject(o, "network");
                json_add_bool(net, "allowPublicTraffic", e2b_opt_public(sb));
                if (sb->egress.mode != PJ_EGRESS_OPEN) {
                        cJSON *deny = cJSON_AddArrayToObject(net, "denyOut");
                        cJSON_AddItemToArray(deny, cJSON_CreateString("0.0.0.0/0"));
                        cJSON_AddItemToObject(net, "allowOut", sb_allow_json(&sb->egress));
                }
                if (sb->egress.rules.n_rules)
                        cJSON_AddItemToObject(net, "rules", pj_egress_rules_json(&sb->egress.rules, true));
                cJSON *lc = cJSON_AddObjectToObject(o, "lifecycle");
                json_add_str(lc, "onTimeout", sb->pause_at_end ? "pause" : "kill");
                json_add_bool(lc, "autoResume", sb->auto_resume);
        }
        return o;
}

static enum MHD_Result bad(struct req *r, const struct err *pe) {
        return respond_error(r, 400, "%s", pe->message);
}

/* The caller's sandbox at r->m.id, live: 0, or the 404 answered (destroyed ones are gone). */
static int load_live(struct req *r, struct sandbox *sb) {
        struct err e = { 0 };
        int k = sandbox_load(r->c, &r->acc, r->m.id, sb, &e);
        if (k == -ENOENT || (k == 0 && !e2b_live(sb->status))) {
                respond_error(r, 404, "sandbox \"%s\" not found", r->m.id);
                return -ENOENT;
        }
        if (k < 0) {
                respond_errno(r, k, &e);
                return k;
        }
        return 0;
}

/* Waits (bounded) until the sandbox's agent answers: E2B's 201 means envd is up. */
static int wait_agent(struct ctl *c, const struct sandbox *sb, struct err *err) {
        int64_t deadline = mono_ms() + AGENT_READY_TIMEOUT_MS;
        int k;
        for (;;) {
                k = session_agent_ping(c, sb, err);
                if (k == 0 || k == -EOPNOTSUPP || mono_ms() >= deadline || c->stopping)
                        return k;
                usleep(50 * 1000);
        }
}

/* ---- the control plane ---- */

/* POST /sandboxes (NewSandbox, SDKs up to 2.45) and POST /v2/sandboxes (NewSandboxV2, from
 * 2.51): one body, but v2 leaves the timeout to the server (300 s when absent). */
static enum MHD_Result create_common(struct req *r, bool v2) {
        struct ctl *c = r->c;
        _cleanup_(pj_e2b_create_done) struct pj_e2b_create in = { 0 };
        _cleanup_(pj_sandbox_create_done) struct pj_sandbox_create sc = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        struct plan pbuf;

        if (pj_e2b_create_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return bad(r, &pe);
        if (v2 && !in.timeout_set)
                in.timeout_s = PJ_E2B_V2_DEFAULT_TIMEOUT_S;
        const char *tname = !strcmp(in.template_id, "base") ? c->cfg->e2b_base_template : in.template_id;
        /* E2B starts a sandbox from a snapshot by naming it as the template: ours are ids */
        bool from_snapshot = false;
        if (e2b_hex24(in.template_id, strlen(in.template_id))) {
                _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
                from_snapshot = snapshot_load(c, &r->acc, in.template_id, &sn, &e) == 0;
                e = (struct err) { 0 };
        }
        if (!from_snapshot && !config_template(c->cfg, tname))
                return respond_error(r, 400, "templateID: no template \"%s\" on this server (\"base\" is %s; GET "
                                             "/sandbox/templates on the Brimble API lists them)",
                                     in.template_id, c->cfg->e2b_base_template);
        const struct plan *plan = config_account_plan(c->cfg, &r->acc, &pbuf);
        if (in.timeout_s < 1 || in.timeout_s > plan->max_lifetime_s)
                return respond_error(r, 400, "timeout must be from 1 to %lld seconds on your plan",
                                     (long long) plan->max_lifetime_s);
        if (from_snapshot)
                sc.from_snapshot = xstrdup(in.template_id);   /* its template is the snapshot's source's */
        else
                sc.template_name = xstrdup(tname);
        pj_egress_copy(&sc.egress, &in.egress);
        sc.egress_set = true;
        sc.metadata_json = in.metadata_json ? xstrdup(in.metadata_json) : NULL;
        sc.env_json = in.env_json ? xstrdup(in.env_json) : NULL;
        sc.lifetime_s = in.timeout_s;
        if (in.volume_name) {
                /* E2B's volumeMounts: the account's volume of that name, at that path */
                _cleanup_volume_ struct volume v = { 0 };
                if (store_volume_get_named(c->store, r->acc.id, in.volume_name, &v) < 0)
                        return respond_error(r, 400, "volumeMounts[0].name: you have no volume named \"%s\" (Volume.create "
                                                     "makes one)", in.volume_name);
                sc.volume_id = xstrdup(v.id);
                sc.mount_path = xstrdup(in.volume_path);
        }
        sc.pause_at_end = in.auto_pause;
        sc.pause_keep_memory = in.auto_pause_memory;
        sc.auto_resume = in.auto_resume;
        {
                cJSON *o = cJSON_CreateObject();
                json_add_str(o, "templateID", in.template_id);
                json_add_bool(o, "public", in.public_traffic);
                sc.e2b_json = json_print(o);
                cJSON_Delete(o);
        }
        int k = volume_content_sandbox_create(c, &r->acc, &sc, &sb, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        struct err err = { 0 };
        k = wait_agent(c, &sb, &err);
        if (k < 0) {
                log_ctx_set("SANDBOX_ID", sb.id);
                log_warning("e2b: the new sandbox's agent did not answer (%s); destroying it", err.message);
                (void) sandbox_destroy(c, sb.id, "failed", &e);
                return respond_error(r, 500, "The sandbox started but its agent (envd) did not answer: %s", err.message);
        }
        log_ctx_set("SANDBOX_ID", sb.id);
        log_info("e2b: sandbox created template=%s timeout=%llds", in.template_id, (long long) in.timeout_s);
        return respond_json(r, 201, sandbox_json(c, &sb));
}

enum MHD_Result e2b_post_sandboxes(struct req *r) { return create_common(r, false); }
enum MHD_Result e2b_post_sandboxes_v2(struct req *r) { return create_common(r, true); }

enum MHD_Result e2b_get_sandbox(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        return respond_json(r, 200, listed_json(r->c, &sb, true));
}

enum MHD_Result e2b_delete_sandbox(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err e = { 0 };
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        log_ctx_set("SANDBOX_ID", sb.id);
        int k = sandbox_destroy(r->c, sb.id, "user", &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

enum MHD_Result e2b_post_timeout(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 };
        int64_t t = 0;
        if (pj_e2b_timeout_parse(r->body.buf, r->body.len, &t, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        struct err e = { 0 };
        int k = sandbox_set_end(r->c, &r->acc, &sb, t, false, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}


enum MHD_Result e2b_respond_page(struct req *r, cJSON *items, bool more, int64_t next) {
        char *body = json_print(items);
        cJSON_Delete(items);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(strlen(body), body, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        if (more) {
                char nt[32];
                snprintf(nt, sizeof(nt), "%lld", (long long) next);
                MHD_add_response_header(resp, "X-Next-Token", nt);
        }
        return respond_response(r, 200, resp);
}

/* E2B's pause keeps the memory by default (Paddock's pause with memory), or with memory: false
 * the filesystem in a snapshot the sandbox resumes from (sandbox_pause_e2b). */
enum MHD_Result e2b_post_pause(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        bool memory = true;
        if (pj_e2b_pause_parse(r->body.buf, r->body.len, &memory, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        if (sb.status == SB_PAUSED || sb.status == SB_PAUSING)
                return respond_error(r, 409, "sandbox \"%s\" is already paused", sb.id);
        log_ctx_set("SANDBOX_ID", sb.id);
        int k = sandbox_pause_e2b(r->c, &r->acc, &sb, memory, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

/* POST /sandboxes/{id}/snapshots (createSnapshot): one of Paddock's snapshots, answered once it
 * is made (E2B's is synchronous); its id starts sandboxes as a templateID and deletes it as
 * DELETE /templates/{id}. */
enum MHD_Result e2b_post_snapshot(struct req *r) {
        struct ctl *c = r->c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        _cleanup_free_ char *name = NULL;
        struct err pe = { 0 };
        struct err e = { 0 };
        if (pj_e2b_snapshot_parse(r->body.buf, r->body.len, &name, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        if (sb.status != SB_READY)
                return respond_error(r, 409, "sandbox \"%s\" is %s; a snapshot is taken of a running sandbox", sb.id,
                                     sb_status_str(sb.status));
        log_ctx_set("SANDBOX_ID", sb.id);
        int k = snapshot_take(c, &r->acc, sb.id, name, &sn, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "snapshotID", sn.id);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "names"), cJSON_CreateString(sn.name));
        return respond_json(r, 201, o);
}

/* GET /snapshots?sandboxID=&name=&limit=&nextToken= (listSnapshots): the caller's ready snapshots,
 * newest first (those E2B's pause takes are the sandbox's own, not listed). */
enum MHD_Result e2b_list_snapshots(struct req *r) {
        struct ctl *c = r->c;
        const char *sid = req_query(r, "sandboxID"), *name = req_query(r, "name"), *lim = req_query(r, "limit"),
                   *tok = req_query(r, "nextToken");
        int64_t limit = 100, offset = 0, total = 0;
        if (sid && !e2b_hex24(sid, strlen(sid)))
                return respond_json(r, 200, cJSON_CreateArray());   /* no sandbox of ours has that id */
        if (lim && (safe_atoi64(lim, &limit) < 0 || limit < 1 || limit > 100))
                return respond_error(r, 400, "limit must be an integer from 1 to 100");
        if (tok && (safe_atoi64(tok, &offset) < 0 || offset < 0 || offset > LIST_MAX))
                return respond_error(r, 400, "nextToken is not one this server gave");
        struct snapshot *a = NULL;
        size_t n = 0;
        if (store_snapshot_list(c->store, r->acc.id, sid, 0, LIST_MAX, &a, &n, &total) < 0)
                return respond_error(r, 500, "Failed to list snapshots");
        cJSON *items = cJSON_CreateArray();
        int64_t seen = 0, added = 0;
        bool more = false;
        for (size_t i = 0; i < n; i++) {
                const struct snapshot *sn = &a[i];
                if (sn->status != SNAP_READY || (sn->name && !strcmp(sn->name, SNAPSHOT_E2B_PAUSE)))
                        continue;
                if (name && strcmp(name, sn->id) && (!sn->name || strcmp(name, sn->name)))
                        continue;
                if (seen++ < offset)
                        continue;
                if (added == limit) {
                        more = true;
                        break;
                }
                cJSON *o = cJSON_CreateObject();
                json_add_str(o, "snapshotID", sn->id);
                cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "names"), cJSON_CreateString(sn->name ? sn->name : sn->id));
                cJSON_AddItemToArray(items, o);
                added++;
        }
        snapshot_array_free(a, n);
        return e2b_respond_page(r, items, more, offset + added);
}

/* DELETE /templates/{id} (deleteSnapshot): a snapshot of the caller's; 404 (the SDK's false)
 * for any other id. */
enum MHD_Result e2b_delete_template(struct req *r) {
        struct err e = { 0 };
        int k = snapshot_delete(r->c, &r->acc, r->m.id, &e);
        if (k == -ENOENT)
                return respond_error(r, 404, "snapshot or template \"%s\" not found", r->m.id);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

/* PUT /sandboxes/{id}/network (updateNetwork): Paddock's egress change, enforced by the node's
 * agent before the answer (the same record, the same GET /sandboxes/{id}/egress). */
enum MHD_Result e2b_put_network(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 }, now = { 0 };
        _cleanup_(pj_egress_done) struct pj_egress want = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        bool changed = false;
        if (pj_e2b_network_update_parse(r->body.buf, r->body.len, &want, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        if (sb.status != SB_READY)
                return respond_error(r, 409, "sandbox \"%s\" is %s; its network changes while it runs", sb.id,
                                     sb_status_str(sb.status));
        log_ctx_set("SANDBOX_ID", sb.id);
        int k = sandbox_set_egress(r->c, &r->acc, sb.id, &want, &now, &changed, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

/* GET /sandboxes/{id}/metrics?start=&end= (getMetrics): Paddock's stats samples as E2B's
 * SandboxMetric (seconds since the epoch; disk use is not sampled: 0). */
#define METRICS_MAX 10000
enum MHD_Result e2b_get_metrics(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_free_ struct stats_sample *smp = NULL;
        const char *qs = req_query(r, "start"), *qe = req_query(r, "end");
        int64_t start = 0, end = 0;
        size_t n = 0;
        if (qs && (safe_atoi64(qs, &start) < 0 || start < 0 || start > INT64_MAX / 1000))
                return respond_error(r, 400, "start must be a Unix time in seconds");
        if (qe && (safe_atoi64(qe, &end) < 0 || end < 0 || end > INT64_MAX / 1000))
                return respond_error(r, 400, "end must be a Unix time in seconds");
        if (qs && qe && end < start)
                return respond_error(r, 400, "end must not be before start");
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        int64_t from = qs ? start * 1000 : sb.created_at, to = qe ? end * 1000 + 999 : INT64_MAX;
        if (store_stats_range(r->c->store, sb.id, from, &smp, &n) < 0)
                return respond_error(r, 500, "Failed to read the sandbox's metrics");
        cJSON *a = cJSON_CreateArray();
        int64_t cpus = sb.cpu >= 1000 ? (sb.cpu + 999) / 1000 : 1, mem_total = sb.memory * 1024 * 1024;
        size_t added = 0;
        for (size_t i = 0; i < n && added < METRICS_MAX; i++) {
                if (smp[i].ts_ms > to)
                        continue;
                cJSON *o = cJSON_CreateObject();
                add_time(o, "timestamp", smp[i].ts_ms);
                json_add_int(o, "timestampUnix", smp[i].ts_ms / 1000);
                json_add_int(o, "cpuCount", cpus);
                cJSON_AddNumberToObject(o, "cpuUsedPct", smp[i].cpu_pct);
                json_add_int(o, "memUsed", (int64_t) (smp[i].mem_pct / 100.0 * (double) mem_total));
                json_add_int(o, "memTotal", mem_total);
                json_add_int(o, "memCache", 0);
                json_add_int(o, "diskUsed", 0);
                json_add_int(o, "diskTotal", sb.disk * 1024 * 1024 * 1024);
                cJSON_AddItemToArray(a, o);
                added++;
        }
        return respond_json(r, 200, a);
}

/* What E2B's SDK can call that this server does not serve: 501 with the reason (never a 404,
 * which the SDK reads as "sandbox not found" or returns false for). */
enum MHD_Result e2b_not_served(struct req *r) {
        return respond_error(r, 501, "Not implemented: building templates through E2B's API is not served here: Paddock "
                                     "builds templates from a Dockerfile (POST /templates on the Brimble API)");
}

/* POST /sandboxes/{id}/fork {"count", "timeout"}: count copies of the running sandbox (its
 * memory and filesystem; fork.c), each living timeout seconds (E2B's default 15). 201 with one
 * entry per fork, {"sandbox": ...} or {"error": {"code", "message"}}, as E2B answers; a
 * failure before any fork (not found 404, not running 409, cannot fork here 400/501) is the
 * status itself. */
enum MHD_Result e2b_post_fork(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 }, e = { 0 };
        int count = 1, timeout = -1;
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        if (pj_fork_parse(r->body.buf, r->body.len, SANDBOX_FORK_MAX, 30 * 24 * 3600, &count, &timeout, &pe) < 0)
                return bad(r, &pe);
        if (sb.status != SB_READY)
                return respond_error(r, 409, "The sandbox %s is %s; only a running sandbox can be forked", sb.id,
                                     sb_status_str(sb.status));
        struct sandbox_fork_result *res = xnew0(struct sandbox_fork_result, (size_t) count);
        int k = sandbox_fork(r->c, &r->acc, &sb, count, timeout < 0 ? 15 : timeout, res, &e);
        if (k < 0) {
                free(res);
                return respond_errno(r, k, &e);
        }
        cJSON *a = fork_results_json(r->c, res, count, sandbox_json, http_status_from_errno, "code", NULL);
        free(res);
        return respond_json(r, 201, a);
}

static bool ready_or_gone(const struct sandbox *sb, const void *ud) {
        (void) ud;
        return sb->status == SB_READY || !e2b_live(sb->status) || sb->status == SB_PAUSED;
}

/* POST /sandboxes/{id}/connect (timeout required) and /v2/sandboxes/{id}/connect (any body,
 * timeout 300 s when absent): 200 when it was running, 201 when it was paused and resumed. */
static enum MHD_Result connect_common(struct req *r, bool v2) {
        struct ctl *c = r->c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        int64_t t = 0;
        if (pj_e2b_connect_parse(r->body.buf, r->body.len, v2, &t, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        int status = 200;
        if (sb.status == SB_PAUSED || sb.status == SB_PAUSING) {
                _cleanup_free_ char *lost = NULL;
                int k = sandbox_resume(c, &sb, &lost, &e);
                if (lost)
                        log_warning("e2b connect: %s", lost);
                if (k < 0)
                        return respond_errno(r, k, &e);
                status = 201;
        }
        if (sb.status != SB_READY) {
                _cleanup_sandbox_ struct sandbox now = { 0 };
                int k = ctl_wait_sandbox(c, sb.id, ready_or_gone, NULL, (int64_t) c->cfg->create_timeout_s * 1000, &now);
                if (k <= 0 || now.status != SB_READY)
                        return respond_error(r, 409, "sandbox \"%s\" is %s, not running", sb.id,
                                             sb_status_str(k > 0 ? now.status : sb.status));
                sandbox_clear(&sb);
                sb = now;
                now = (struct sandbox) { 0 };
        }
        struct err err = { 0 };
        if (wait_agent(c, &sb, &err) < 0)
                return respond_error(r, 502, "The sandbox runs but its agent (envd) does not answer: %s", err.message);
        int k = sandbox_set_end(c, &r->acc, &sb, t, true, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_json(r, status, sandbox_json(c, &sb));
}

enum MHD_Result e2b_post_connect(struct req *r) { return connect_common(r, false); }
enum MHD_Result e2b_post_connect_v2(struct req *r) { return connect_common(r, true); }

static int cmp_created_asc(const void *a, const void *b) {
        const struct sandbox *x = a, *y = b;
        return x->created_at < y->created_at ? -1 : x->created_at > y->created_at ? 1 : strcmp(x->id, y->id);
}

/* RFC 3339 ("2026-12-05T10:00:00Z", fractions and offsets allowed) to ms since the epoch. */
static int parse_time(const char *s, int64_t *ret) {
        struct tm tm = { 0 };
        const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!p)
                return -EINVAL;
        int64_t ms = 0;
        if (*p == '.') {
                int digits = 0;
                for (p++; *p >= '0' && *p <= '9'; p++, digits++)
                        if (digits < 3)
                                ms = ms * 10 + (*p - '0');
                if (!digits)
                        return -EINVAL;
                for (; digits < 3; digits++)
                        ms *= 10;
        }
        int64_t off = 0;
        if (*p == 'Z' || *p == 'z')
                p++;
        else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
                int h = (p[1] - '0') * 10 + (p[2] - '0'), m = (p[4] - '0') * 10 + (p[5] - '0');
                off = (int64_t) (h * 60 + m) * 60 * (*p == '+' ? 1 : -1);
                p += 6;
        } else
                return -EINVAL;
        if (*p)
                return -EINVAL;
        *ret = ((int64_t) timegm(&tm) - off) * 1000 + ms;
        return 0;
}

static bool metadata_matches(const struct sandbox *sb, const struct pj_e2b_kv *kv, size_t n) {
        if (!n)
                return true;
        for (size_t i = 0; i < n; i++) {
                const char *v = sb_map_get(&sb->metadata, kv[i].key);
                if (!v || strcmp(v, kv[i].value))
                        return false;
        }
        return true;
}

/* GET /v2/sandboxes (and /sandboxes, E2B's first version: running ones, no paging). */
static enum MHD_Result list_common(struct req *r, bool v2) {
        struct ctl *c = r->c;
        const char *mq = req_query(r, "metadata"), *st = req_query(r, "state"), *lim = req_query(r, "limit"),
                   *tok = req_query(r, "nextToken"), *order = req_query(r, "order"), *tpl = req_query(r, "template"),
                   *after = req_query(r, "startedAfter");
        struct pj_e2b_kv *kv = NULL;
        size_t nkv = 0;
        struct err pe = { 0 };
        int64_t limit = 100, offset = 0;
        bool want_running = true, want_paused = v2;
        if (mq && pj_e2b_metadata_query_parse(mq, &kv, &nkv, &pe) < 0)
                return bad(r, &pe);
        if (st && v2) {
                want_running = want_paused = false;
                _cleanup_free_ char *s = xstrdup(st);
                char *save = NULL;
                for (char *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                        if (!strcmp(t, "running"))
                                want_running = true;
                        else if (!strcmp(t, "paused"))
                                want_paused = true;
                        else {
                                pj_e2b_kv_free(kv, nkv);
                                return respond_error(r, 400, "state must be running, paused or both (comma-separated)");
                        }
                }
        }
        if (lim && (safe_atoi64(lim, &limit) < 0 || limit < 1 || limit > 100)) {
                pj_e2b_kv_free(kv, nkv);
                return respond_error(r, 400, "limit must be an integer from 1 to 100");
        }
        if (tok && (safe_atoi64(tok, &offset) < 0 || offset < 0 || offset > LIST_MAX)) {
                pj_e2b_kv_free(kv, nkv);
                return respond_error(r, 400, "nextToken is not one this server gave");
        }
        if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
                pj_e2b_kv_free(kv, nkv);
                return respond_error(r, 400, "order must be asc or desc");
        }
        int64_t after_ms = 0;
        if (after && parse_time(after, &after_ms) < 0) {
                pj_e2b_kv_free(kv, nkv);
                return respond_error(r, 400, "startedAfter must be an RFC 3339 time");
        }
        struct sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list_live(c->store, r->acc.id, LIST_MAX, &a, &n) < 0) {
                pj_e2b_kv_free(kv, nkv);
                return respond_error(r, 500, "Failed to list sandboxes");
        }
        if (n)
                qsort(a, n, sizeof(*a), cmp_created_asc);
        bool asc = order && !strcmp(order, "asc");
        cJSON *items = cJSON_CreateArray();
        int64_t seen = 0, added = 0;
        bool more = false;
        for (size_t j = 0; j < n; j++) {
                const struct sandbox *sb = &a[asc ? j : n - 1 - j];
                bool paused = sb->status == SB_PAUSED || sb->status == SB_PAUSING;
                if ((paused && !want_paused) || (!paused && !want_running) || !metadata_matches(sb, kv, nkv) ||
                    sb->created_at < after_ms)
                        continue;
                if (tpl) {
                        if (strcmp(tpl, template_of(sb)) && strcmp(tpl, sb->template_name))
                                continue;
                }
                if (seen++ < offset)
                        continue;
                if (v2 && added == limit) {
                        more = true;
                        break;
                }
                cJSON_AddItemToArray(items, listed_json(c, sb, false));
                added++;
        }
        sandbox_array_free(a, n);
        pj_e2b_kv_free(kv, nkv);
        return e2b_respond_page(r, items, more, offset + added);
}

enum MHD_Result e2b_list_v2(struct req *r) { return list_common(r, true); }
enum MHD_Result e2b_list_v1(struct req *r) { return list_common(r, false); }

enum MHD_Result e2b_get_health(struct req *r) {
        return respond_empty(r, 204);
}

enum MHD_Result e2b_bad_target(struct req *r) {
        return respond_error(r, 400, "The sandbox is named wrongly: E2b-Sandbox-Id must be a sandbox id and E2b-Sandbox-Port "
                                     "(or the port of a <port>-<id>.%s host) a port from 1 to 65535", e2b_domain());
}

enum MHD_Result e2b_misdirected(struct req *r) {
        return respond_error(r, 421, "This connection carries E2B's API and envd; ports other than %d are reached on a "
                                     "connection of their own (<port>-<sandbox id>.%s)",
                             PJ_E2B_ENVD_PORT, e2b_domain());
}
