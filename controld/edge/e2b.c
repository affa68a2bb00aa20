/* e2b.c — E2B's API on a listener of its own ([e2b] listen): E2B's SDKs (npm `e2b`, the
 * Python `e2b`) work against Paddock when E2B_API_URL and E2B_SANDBOX_URL (or E2B_DOMAIN)
 * point here.
 *
 * One listener serves three things, told apart by each connection's first request head
 * (peeked, not read, so the server that takes the connection reads it whole):
 *   - the control plane (E2B's openapi.yml: POST /sandboxes, GET /v2/sandboxes, ...), keys
 *     in X-API-Key;
 *   - envd's surface for port 49983 (envd.c): requests naming the sandbox in the
 *     E2b-Sandbox-Id header (E2B_SANDBOX_URL) or by Host 49983-<id>.<domain>;
 *   - any other port: Host <port>-<id>.<domain> (sandbox.getHost(port)) or E2b-Sandbox-Port,
 *     passed to that port inside the sandbox through its agent, as a preview is.
 * The first two run on a libmicrohttpd server without a listener of its own (http.c), the
 * third on preview.c's forwarder. A sandbox made here is an ordinary Paddock sandbox: the
 * same record, quotas, reapers, egress, metrics and journal, visible through the Brimble API.
 *
 * Everything a sandbox says stays hostile: envd.c reaches it only through its agent. */
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
#include "driver.h"
#include "e2b.h"
#include "fdio.h"
#include "http.h"
#include "json.h"
#include "listener.h"
#include "log.h"
#include "pj_e2b.h"
#include "preview.h"
#include "session.h"
#include "strutil.h"
#include "tlsbridge.h"

#define AGENT_READY_TIMEOUT_MS 30000
#define LIST_MAX 10000

static struct {
        struct ctl *c;
        struct listener L;               /* [e2b] listen */
        struct http_server *srv;
        SSL_CTX *tls;                    /* [e2b] tls_cert: TLS here; NULL: plain */
        char domain[256];
} E = { .L = LISTENER_INIT };

const char *e2b_domain(void) {
        return E.domain;
}

/* Whether the sandbox's ports answer anyone who reaches the E2B listener: only when its owner
 * said so, E2B's allowPublicTraffic at create (E2B's default there). A sandbox made through
 * the Brimble API or claimed from a pool has no E2B options and is never public here; its ports
 * need the traffic token (or a preview, on the preview listener). Unreadable options: private. */
static bool opt_public(const struct sandbox *sb) {
        if (!sb->e2b)
                return false;
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(sb->e2b);
        return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "public"));
}

static const char *template_of(const struct sandbox *sb, char *buf, size_t n) {
        _cleanup_(cJSON_Deletep) cJSON *o = sb->e2b ? cJSON_Parse(sb->e2b) : NULL;
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "templateID"));
        snprintf(buf, n, "%s", t ? t : sb->template_name ? sb->template_name : "");
        return buf;
}

static bool hex24(const char *s, size_t n);

/* ---- answers ---- */

static cJSON *error_body(int status, const char *message) {
        cJSON *o = cJSON_CreateObject();
        json_add_int(o, "code", status);
        json_add_str(o, "message", message);
        return o;
}

static const char *state_of(enum sb_status s) {
        return s == SB_PAUSED || s == SB_PAUSING ? "paused" : "running";
}

static bool live(enum sb_status s) {
        return s != SB_DESTROYED && s != SB_FAILED;
}

static void add_time(cJSON *o, const char *k, int64_t ms) {
        char t[32];
        format_rfc3339_ms(ms, t);
        json_add_str(o, k, t);
}

static cJSON *metadata_json(const struct sandbox *sb) {
        cJSON *m = sb->metadata ? cJSON_Parse(sb->metadata) : NULL;
        return m ? m : cJSON_CreateObject();
}

/* Sandbox (create, connect): what the SDK needs to reach envd. */
static cJSON *sandbox_json(struct ctl *c, const struct sandbox *sb) {
        char tok[65], tpl[160];
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "templateID", template_of(sb, tpl, sizeof(tpl)));
        json_add_str(o, "sandboxID", sb->id);
        json_add_str(o, "alias", sb->template_name);
        json_add_str(o, "clientID", "paddock");
        json_add_str(o, "envdVersion", PJ_E2B_ENVD_VERSION);
        e2b_token(c, "envd", sb->id, tok);
        json_add_str(o, "envdAccessToken", tok);
        if (!opt_public(sb)) {
                e2b_token(c, "traffic", sb->id, tok);
                json_add_str(o, "trafficAccessToken", tok);
        } else
                cJSON_AddNullToObject(o, "trafficAccessToken");
        json_add_str(o, "domain", E.domain);
        explicit_bzero(tok, sizeof(tok));
        return o;
}

/* SandboxDetail (detailed) and ListedSandbox. */
static cJSON *listed_json(struct ctl *c, const struct sandbox *sb, bool detailed) {
        char tpl[160];
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "templateID", template_of(sb, tpl, sizeof(tpl)));
        json_add_str(o, "alias", sb->template_name);
        json_add_str(o, "sandboxID", sb->id);
        json_add_str(o, "clientID", "paddock");
        add_time(o, "startedAt", sb->created_at);
        add_time(o, "endAt", sb->expires_at);
        json_add_int(o, "cpuCount", sb->cpu >= 1000 ? (sb->cpu + 999) / 1000 : 1);
        json_add_int(o, "memoryMB", sb->memory);
        json_add_int(o, "diskSizeMB", sb->disk * 1024);
        cJSON_AddItemToObject(o, "metadata", metadata_json(sb));
        json_add_str(o, "state", state_of(sb->status));
        json_add_str(o, "envdVersion", PJ_E2B_ENVD_VERSION);
        cJSON_AddItemToObject(o, "volumeMounts", cJSON_CreateArray());
        if (detailed) {
                char tok[65];
                e2b_token(c, "envd", sb->id, tok);
                json_add_str(o, "envdAccessToken", tok);
                explicit_bzero(tok, sizeof(tok));
                json_add_str(o, "domain", E.domain);
                json_add_bool(o, "allowInternetAccess", sb->egress.mode == PJ_EGRESS_OPEN);
                cJSON *net = cJSON_AddObjectToObject(o, "network");
                json_add_bool(net, "allowPublicTraffic", opt_public(sb));
                if (sb->egress.mode != PJ_EGRESS_OPEN) {
                        cJSON *deny = cJSON_AddArrayToObject(net, "denyOut");
                        cJSON_AddItemToArray(deny, cJSON_CreateString("0.0.0.0/0"));
                        cJSON *allow = cJSON_AddArrayToObject(net, "allowOut");
                        for (size_t i = 0; i < sb->egress.n_allow; i++) {
                                char b[PJ_ALLOW_NORM_MAX];
                                sb_allow_entry_format(&sb->egress.allow[i], b);
                                cJSON_AddItemToArray(allow, cJSON_CreateString(b));
                        }
                }
                cJSON *lc = cJSON_AddObjectToObject(o, "lifecycle");
                json_add_str(lc, "onTimeout", "kill");
                json_add_bool(lc, "autoResume", false);
        }
        return o;
}

static enum MHD_Result bad(struct req *r, const struct pj_error *pe) {
        return respond_error(r, 400, "%s", pe->message);
}

/* The caller's sandbox at r->m.id, live: 0, or the 404 answered (destroyed ones are gone). */
static int load_live(struct req *r, struct sandbox *sb) {
        struct api_error e = { 0 };
        int k = sandbox_load(r->c, &r->acc, r->m.id, sb, &e);
        if (k == -ENOENT || (k == 0 && !live(sb->status))) {
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
static int wait_agent(struct ctl *c, const struct sandbox *sb, char *err, size_t errlen) {
        int64_t deadline = mono_ms() + AGENT_READY_TIMEOUT_MS;
        int k;
        for (;;) {
                k = session_agent_ping(c, sb, err, errlen);
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
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        struct plan pbuf;

        if (pj_e2b_create_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return bad(r, &pe);
        if (v2 && !in.timeout_set)
                in.timeout_s = PJ_E2B_V2_DEFAULT_TIMEOUT_S;
        const char *tname = !strcmp(in.template_id, "base") ? c->cfg->e2b_base_template : in.template_id;
        /* E2B starts a sandbox from a snapshot by naming it as the template: ours are ids */
        bool from_snapshot = false;
        if (hex24(in.template_id, strlen(in.template_id))) {
                _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
                from_snapshot = snapshot_load(c, &r->acc, in.template_id, &sn, &e) == 0;
                e = (struct api_error) { 0 };
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
        {
                cJSON *o = cJSON_CreateObject();
                json_add_str(o, "templateID", in.template_id);
                json_add_bool(o, "public", in.public_traffic);
                sc.e2b_json = json_print(o);
                cJSON_Delete(o);
        }
        int k = sandbox_create(c, &r->acc, &sc, &sb, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        char err[256] = "";
        k = wait_agent(c, &sb, err, sizeof(err));
        if (k < 0) {
                log_ctx_set("SANDBOX_ID", sb.id);
                log_warning("e2b: the new sandbox's agent did not answer (%s); destroying it", err);
                (void) sandbox_destroy(c, sb.id, "failed", &e);
                return respond_error(r, 500, "The sandbox started but its agent (envd) did not answer: %s", err);
        }
        log_ctx_set("SANDBOX_ID", sb.id);
        log_info("e2b: sandbox created template=%s timeout=%llds", in.template_id, (long long) in.timeout_s);
        return respond_json(r, 201, sandbox_json(c, &sb));
}

static enum MHD_Result post_sandboxes(struct req *r) { return create_common(r, false); }
static enum MHD_Result post_sandboxes_v2(struct req *r) { return create_common(r, true); }

static enum MHD_Result get_sandbox(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        return respond_json(r, 200, listed_json(r->c, &sb, true));
}

static enum MHD_Result delete_sandbox(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        log_ctx_set("SANDBOX_ID", sb.id);
        int k = sandbox_destroy(r->c, sb.id, "user", &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

/* Sets the sandbox's end to now + timeout_s (extend_only: never earlier than it was). */
static int set_end(struct req *r, const struct sandbox *sb0, int64_t timeout_s, bool extend_only) {
        struct ctl *c = r->c;
        struct plan pbuf;
        const struct plan *plan = config_account_plan(c->cfg, &r->acc, &pbuf);
        int64_t now = now_ms(), end = now + timeout_s * 1000, cap = sb0->created_at + plan->max_lifetime_s * 1000;
        if (end > cap && extend_only)
                end = cap;   /* connect: as long as the plan lets it live (E2B's connect clamps too) */
        else if (end > cap) {
                respond_error(r, 400, "timeout: a sandbox lives at most %lld seconds on your plan; it can run until %lld s from now",
                              (long long) plan->max_lifetime_s, (long long) ((cap - now) / 1000));
                return -EINVAL;
        }
        SANDBOX_LOCK_GUARD(lock, c, sb0->id);
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (store_sandbox_get(c->store, sb0->id, &sb) < 0 || !live(sb.status)) {
                respond_error(r, 404, "sandbox \"%s\" not found", sb0->id);
                return -ENOENT;
        }
        if (extend_only && sb.expires_at >= end)
                return 0;
        sb.expires_at = end;
        sb.auto_destroy = false;
        if (store_sandbox_update(c->store, &sb) < 0) {
                respond_error(r, 500, "Failed to record the timeout");
                return -EIO;
        }
        return 0;
}

static enum MHD_Result post_timeout(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct pj_error pe = { 0 };
        int64_t t = 0;
        if (pj_e2b_timeout_parse(r->body.buf, r->body.len, &t, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        if (set_end(r, &sb, t, false) < 0)
                return MHD_YES;
        return respond_empty(r, 204);
}


/* A page of a list: the JSON array items (taken), 200, and X-Next-Token (next) when more is set. */
static enum MHD_Result respond_page(struct req *r, cJSON *items, bool more, int64_t next) {
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

/* The node's agent commits and pushes a snapshot; its event settles the record. Waits (bounded
 * by the snapshot timeout) until *sn is no longer creating, reloading it. */
static int wait_snapshot(struct ctl *c, struct snapshot *sn) {
        char id[SANDBOX_ID_LEN + 1];
        snprintf(id, sizeof(id), "%s", sn->id);
        int64_t deadline = mono_ms() + ((int64_t) c->cfg->snap_timeout_s + 10) * 1000;
        while (sn->status == SNAP_CREATING && mono_ms() < deadline && !c->stopping) {
                usleep(200 * 1000);
                snapshot_clear(sn);
                if (store_snapshot_get(c->store, id, sn) < 0)
                        return -ENOENT;
        }
        return 0;
}

/* A pause keeps the filesystem as E2B's does: a snapshot of the running container first (the
 * snapshot machinery: the node's agent commits and pushes it), the sandbox's image becomes that
 * snapshot, then Paddock's pause; connect resumes it from there. Memory is not kept. */
static enum MHD_Result post_pause(struct req *r) {
        struct ctl *c = r->c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        bool memory = true;
        if (pj_e2b_pause_parse(r->body.buf, r->body.len, &memory, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        if (sb.status == SB_PAUSED || sb.status == SB_PAUSING)
                return respond_error(r, 409, "sandbox \"%s\" is already paused", sb.id);
        log_ctx_set("SANDBOX_ID", sb.id);
        if (memory) {
                /* Paddock's pause with memory: the container and a checkpoint stay on the node. */
                if (!c->drv->ops->checkpoint)
                        return respond_error(r, 501, "memory: pausing with the memory kept needs the local (docker) driver; "
                                                     "this server's %s driver keeps the filesystem only: pause with "
                                                     "memory: false", c->drv->name);
                if (sb.egress.mode != PJ_EGRESS_DENY_ALL)
                        return respond_error(r, 400, "memory: only sandboxes without network access (allowInternetAccess: "
                                                     "false) can be paused with their memory (gVisor cannot checkpoint "
                                                     "host networking): pause with memory: false to keep the filesystem");
                char why[384] = "";
                if (c->drv->ops->checkpoint_ready && c->drv->ops->checkpoint_ready(c->drv, why, sizeof(why)) < 0)
                        return respond_error(r, 501, "memory: this server cannot keep memory now: %s; pause with "
                                                     "memory: false", why);
                int k = sandbox_pause(c, &sb, true, &e);
                if (k < 0)
                        return respond_errno(r, k, &e);
                log_info("e2b: sandbox paused with its memory");
                return respond_empty(r, 204);
        }
        int k = snapshot_create(c, &r->acc, sb.id, SNAPSHOT_E2B_PAUSE, false, &sn, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        if (wait_snapshot(c, &sn) < 0)
                return respond_error(r, 500, "The pause's snapshot record went away");
        if (sn.status != SNAP_READY)
                return respond_error(r, 500, "The pause's snapshot of the filesystem %s; the sandbox keeps running",
                                     sn.status == SNAP_FAILED ? (sn.failure_reason ? sn.failure_reason : "failed") : "did not finish in time");
        /* the sandbox resumes from the snapshot; the previous pause's snapshot is no longer needed */
        _cleanup_free_ char *old_snap = NULL;
        {
                SANDBOX_LOCK_GUARD(lock, c, sb.id);
                _cleanup_sandbox_ struct sandbox now = { 0 };
                if (store_sandbox_get(c->store, sb.id, &now) < 0 || now.status != SB_READY)
                        return respond_error(r, 409, "sandbox \"%s\" changed while it was being paused", sb.id);
                old_snap = now.from_snapshot ? xstrdup(now.from_snapshot) : NULL;
                free(now.image);
                now.image = snapshot_image_ref(&sn);
                free(now.from_snapshot);
                now.from_snapshot = xstrdup(sn.id);
                if (store_sandbox_update(c->store, &now) < 0)
                        return respond_error(r, 500, "Failed to record the pause's snapshot");
                sandbox_clear(&sb);
                sb = now;
                now = (struct sandbox) { 0 };
        }
        k = sandbox_pause(c, &sb, false, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        if (old_snap) {
                _cleanup_(snapshot_clear) struct snapshot o = { 0 };
                if (store_snapshot_get(c->store, old_snap, &o) == 0 && o.name && !strcmp(o.name, SNAPSHOT_E2B_PAUSE) &&
                    !strcmp(o.sandbox_id, sb.id))
                        (void) snapshot_delete(c, &r->acc, old_snap, &e);
        }
        log_info("e2b: sandbox paused, its filesystem in snapshot %s", sn.id);
        return respond_empty(r, 204);
}

/* POST /sandboxes/{id}/snapshots (createSnapshot): one of Paddock's snapshots, answered once it
 * is made (E2B's is synchronous); its id starts sandboxes as a templateID and deletes it as
 * DELETE /templates/{id}. */
static enum MHD_Result post_snapshot(struct req *r) {
        struct ctl *c = r->c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(snapshot_clear) struct snapshot sn = { 0 };
        _cleanup_free_ char *name = NULL;
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        if (pj_e2b_snapshot_parse(r->body.buf, r->body.len, &name, &pe) < 0)
                return bad(r, &pe);
        if (load_live(r, &sb) < 0)
                return MHD_YES;
        if (sb.status != SB_READY)
                return respond_error(r, 409, "sandbox \"%s\" is %s; a snapshot is taken of a running sandbox", sb.id,
                                     sb_status_str(sb.status));
        log_ctx_set("SANDBOX_ID", sb.id);
        int k = snapshot_create(c, &r->acc, sb.id, name, false, &sn, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        if (wait_snapshot(c, &sn) < 0)
                return respond_error(r, 500, "The snapshot's record went away");
        if (sn.status != SNAP_READY)
                return respond_error(r, 500, "The snapshot %s", sn.status == SNAP_FAILED
                                                                  ? (sn.failure_reason ? sn.failure_reason : "failed")
                                                                  : "did not finish in time");
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "snapshotID", sn.id);
        cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "names"), cJSON_CreateString(sn.name));
        return respond_json(r, 201, o);
}

/* GET /snapshots?sandboxID=&name=&limit=&nextToken= (listSnapshots): the caller's ready snapshots,
 * newest first (those E2B's pause takes are the sandbox's own, not listed). */
static enum MHD_Result list_snapshots(struct req *r) {
        struct ctl *c = r->c;
        const char *sid = req_query(r, "sandboxID"), *name = req_query(r, "name"), *lim = req_query(r, "limit"),
                   *tok = req_query(r, "nextToken");
        int64_t limit = 100, offset = 0, total = 0;
        if (sid && !hex24(sid, strlen(sid)))
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
        return respond_page(r, items, more, offset + added);
}

/* DELETE /templates/{id} (deleteSnapshot): a snapshot of the caller's; 404 (the SDK's false)
 * for any other id. */
static enum MHD_Result delete_template(struct req *r) {
        struct api_error e = { 0 };
        int k = snapshot_delete(r->c, &r->acc, r->m.id, &e);
        if (k == -ENOENT)
                return respond_error(r, 404, "snapshot or template \"%s\" not found", r->m.id);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

/* PUT /sandboxes/{id}/network (updateNetwork): Paddock's egress change, enforced by the node's
 * agent before the answer (the same record, the same GET /sandboxes/{id}/egress). */
static enum MHD_Result put_network(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 }, now = { 0 };
        _cleanup_(pj_egress_done) struct pj_egress want = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
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
static enum MHD_Result get_metrics(struct req *r) {
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
static enum MHD_Result not_served(struct req *r) {
        const char *p = r->path;
        const char *why =
                strstr(p, "/fork") ? "forking a running sandbox needs its memory kept, which this server does not do yet"
                : !strncmp(p, "/secrets", 8) ? "secrets are not served through E2B's API on this server"
                : !strncmp(p, "/volumecontent", 14) ? "volume contents are reached through a sandbox that mounts the volume"
                : !strncmp(p, "/volumes", 8) ? "volumes are Paddock's own here: use the Brimble API's /volumes"
                : "building templates through E2B's API is not served here: Paddock builds templates from a "
                  "Dockerfile (POST /templates on the Brimble API)";
        return respond_error(r, 501, "Not implemented: %s", why);
}

static bool ready_or_gone(const struct sandbox *sb, const void *ud) {
        (void) ud;
        return sb->status == SB_READY || !live(sb->status) || sb->status == SB_PAUSED;
}

/* POST /sandboxes/{id}/connect (timeout required) and /v2/sandboxes/{id}/connect (any body,
 * timeout 300 s when absent): 200 when it was running, 201 when it was paused and resumed. */
static enum MHD_Result connect_common(struct req *r, bool v2) {
        struct ctl *c = r->c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
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
        char err[256] = "";
        if (wait_agent(c, &sb, err, sizeof(err)) < 0)
                return respond_error(r, 502, "The sandbox runs but its agent (envd) does not answer: %s", err);
        if (set_end(r, &sb, t, true) < 0)
                return MHD_YES;
        return respond_json(r, status, sandbox_json(c, &sb));
}

static enum MHD_Result post_connect(struct req *r) { return connect_common(r, false); }
static enum MHD_Result post_connect_v2(struct req *r) { return connect_common(r, true); }

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
        _cleanup_(cJSON_Deletep) cJSON *m = sb->metadata ? cJSON_Parse(sb->metadata) : NULL;
        for (size_t i = 0; i < n; i++) {
                const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(m, kv[i].key));
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
        struct pj_error pe = { 0 };
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
                        char tb[160];
                        if (strcmp(tpl, template_of(sb, tb, sizeof(tb))) && strcmp(tpl, sb->template_name))
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
        return respond_page(r, items, more, offset + added);
}

static enum MHD_Result list_v2(struct req *r) { return list_common(r, true); }
static enum MHD_Result list_v1(struct req *r) { return list_common(r, false); }

static enum MHD_Result get_health(struct req *r) {
        return respond_empty(r, 204);
}

static enum MHD_Result bad_target(struct req *r) {
        return respond_error(r, 400, "The sandbox is named wrongly: E2b-Sandbox-Id must be a sandbox id and E2b-Sandbox-Port "
                                     "(or the port of a <port>-<id>.%s host) a port from 1 to 65535", E.domain);
}

static enum MHD_Result misdirected(struct req *r) {
        return respond_error(r, 421, "This connection carries E2B's API and envd; ports other than %d are reached on a "
                                     "connection of their own (<port>-<sandbox id>.%s)",
                             PJ_E2B_ENVD_PORT, E.domain);
}

/* ---- routes ---- */

#define J ROUTE_BODY_JSON
#define SB "sandbox"
/* Every method of a path E2B's SDK may call that is not served here (not_served: 501). */
#define NOT_SERVED(pat)                                                                          \
        { "GET", pat, "e2b not served", NULL, true, false, J, NULL, not_served },                \
        { "POST", pat, "e2b not served", NULL, true, false, J, NULL, not_served },               \
        { "PUT", pat, "e2b not served", NULL, true, false, J, NULL, not_served },                \
        { "PATCH", pat, "e2b not served", NULL, true, false, J, NULL, not_served },              \
        { "DELETE", pat, "e2b not served", NULL, true, false, J, NULL, not_served }
static const struct route control_routes[] = {
        /* method   pattern                          label                                 noun auth   head   body prepare handler */
        { "GET",    "/health",                       "e2b /health",                        NULL, false, true,  J, NULL, get_health },
        { "GET",    "/sandboxes",                    "e2b /sandboxes",                     NULL, true,  false, J, NULL, list_v1 },
        { "POST",   "/sandboxes",                    "e2b /sandboxes",                     NULL, true,  false, J, NULL, post_sandboxes },
        { "GET",    "/sandboxes/{id}",               "e2b /sandboxes/{id}",                SB,   true,  false, J, NULL, get_sandbox },
        { "DELETE", "/sandboxes/{id}",               "e2b /sandboxes/{id}",                SB,   true,  false, J, NULL, delete_sandbox },
        { "POST",   "/sandboxes/{id}/timeout",       "e2b /sandboxes/{id}/timeout",        SB,   true,  false, J, NULL, post_timeout },
        { "POST",   "/sandboxes/{id}/pause",         "e2b /sandboxes/{id}/pause",          SB,   true,  false, J, NULL, post_pause },
        { "POST",   "/sandboxes/{id}/connect",       "e2b /sandboxes/{id}/connect",        SB,   true,  false, J, NULL, post_connect },
        { "GET",    "/v2/sandboxes",                 "e2b /v2/sandboxes",                  NULL, true,  false, J, NULL, list_v2 },
        { "POST",   "/v2/sandboxes",                 "e2b /v2/sandboxes",                  NULL, true,  false, J, NULL, post_sandboxes_v2 },
        { "POST",   "/v2/sandboxes/{id}/connect",    "e2b /v2/sandboxes/{id}/connect",     SB,   true,  false, J, NULL, post_connect_v2 },
        { "PUT",    "/sandboxes/{id}/network",       "e2b /sandboxes/{id}/network",        SB,   true,  false, J, NULL, put_network },
        { "GET",    "/sandboxes/{id}/metrics",       "e2b /sandboxes/{id}/metrics",        SB,   true,  false, J, NULL, get_metrics },
        { "POST",   "/sandboxes/{id}/snapshots",     "e2b /sandboxes/{id}/snapshots",      SB,   true,  false, J, NULL, post_snapshot },
        { "GET",    "/snapshots",                    "e2b /snapshots",                     NULL, true,  false, J, NULL, list_snapshots },
        { "DELETE", "/templates/{id}",               "e2b /templates/{id}",                "snapshot", true, false, J, NULL, delete_template },
        { "POST",   "/sandboxes/{id}/fork",          "e2b not served",                     SB,   true,  false, J, NULL, not_served },
        NOT_SERVED("/secrets"), NOT_SERVED("/secrets/{path*}"), NOT_SERVED("/volumes"), NOT_SERVED("/volumes/{path*}"),
        NOT_SERVED("/volumecontent/{path*}"), NOT_SERVED("/v3/templates"), NOT_SERVED("/v2/templates/{path*}"),
        NOT_SERVED("/templates"), NOT_SERVED("/templates/{path*}"),
};
static const struct route misdirected_row = { "GET", "/", "e2b misdirected", NULL, false, false, J, NULL, misdirected };
static const struct route bad_target_row = { "GET", "/", "e2b bad target", NULL, false, false, J, NULL, bad_target };
#undef NOT_SERVED
#undef J
#undef SB

static bool hex24(const char *s, size_t n) {
        if (n != SANDBOX_ID_LEN)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* Host <port>-<id>.<domain> (the domain compared without either side's :port): 1 with port
 * and id; -1 for that shape with a port outside 1-65535; else 0. */
static int host_target(const char *host, size_t hl, const char *domain, int *ret_port, char id[SANDBOX_ID_LEN + 1]) {
        const char *dash = memchr(host, '-', hl);
        if (!dash || dash == host || dash - host > 10)
                return 0;
        int64_t port = 0;
        for (const char *p = host; p < dash; p++) {
                if (*p < '0' || *p > '9')
                        return 0;
                port = port * 10 + (*p - '0');
        }
        const char *idp = dash + 1, *end = host + hl;
        if (end - idp < SANDBOX_ID_LEN + 2 || !hex24(idp, SANDBOX_ID_LEN) || idp[SANDBOX_ID_LEN] != '.')
                return 0;
        const char *dom = idp + SANDBOX_ID_LEN + 1;
        size_t dl = (size_t) (end - dom), wl = strcspn(domain, ":");
        const char *colon = memchr(dom, ':', dl);
        if (colon)
                dl = (size_t) (colon - dom);
        if (dl != wl || strncasecmp(dom, domain, wl))
                return 0;
        if (port < 1 || port > 65535 || host[0] == '0')
                return -1;
        *ret_port = (int) port;
        memcpy(id, idp, SANDBOX_ID_LEN);
        id[SANDBOX_ID_LEN] = 0;
        return 1;
}

/* Which sandbox and port a request names: 1 (sandbox side), 0 (the control plane), -1 a
 * malformed sandbox id or port (answered as not found by the caller). */
static int target_of(const char *host, const char *sid, const char *sport, const char *domain, char id[SANDBOX_ID_LEN + 1],
                     int *ret_port) {
        if (sid) {
                if (!hex24(sid, strlen(sid)))
                        return -1;
                memcpy(id, sid, SANDBOX_ID_LEN + 1);
                int64_t p = PJ_E2B_ENVD_PORT;
                if (sport && (safe_atoi64(sport, &p) < 0 || p < 1 || p > 65535))
                        return -1;
                *ret_port = (int) p;
                return 1;
        }
        return host ? host_target(host, strlen(host), domain, ret_port, id) : 0;
}

static enum route_status route_req(struct req *r) {
        char id[SANDBOX_ID_LEN + 1] = "";
        int port = 0;
        int t = target_of(req_header(r, "Host"), req_header(r, "E2b-Sandbox-Id"), req_header(r, "E2b-Sandbox-Port"), E.domain, id,
                          &port);
        if (t == 0)
                return route_match_in(control_routes, ELEMENTSOF(control_routes), r->method, r->path, &r->m);
        if (t == 1 && port != PJ_E2B_ENVD_PORT) {
                r->m = (struct route_match) { .status = ROUTE_FOUND, .row = &misdirected_row };
                return ROUTE_FOUND;
        }
        if (t < 0) {
                r->m = (struct route_match) { .status = ROUTE_FOUND, .row = &bad_target_row };
                return ROUTE_FOUND;
        }
        return envd_route(r, id);
}

/* ---- the listener: peek at the head, then hand the connection over ---- */

struct econn {
        int fd;
        struct sockaddr_storage sa;
        socklen_t sl;
        char peer[INET6_ADDRSTRLEN];
};

/* The value of header name in the head (NUL-terminated copy into out), or NULL. */
static const char *head_header(const char *head, size_t n, const char *name, char *out, size_t outlen) {
        size_t nl = strlen(name);
        const char *p = memmem(head, n, "\r\n", 2), *end = head + n;
        while (p && p + 2 < end) {
                p += 2;
                const char *eol = memmem(p, (size_t) (end - p), "\r\n", 2);
                if (!eol || eol == p)
                        return NULL;
                if ((size_t) (eol - p) > nl && p[nl] == ':' && !strncasecmp(p, name, nl)) {
                        const char *v = p + nl + 1;
                        while (v < eol && (*v == ' ' || *v == '\t'))
                                v++;
                        size_t vl = (size_t) (eol - v);
                        while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                                vl--;
                        if (vl >= outlen || memchr(v, 0, vl))
                                return NULL;
                        memcpy(out, v, vl);
                        out[vl] = 0;
                        return out;
                }
                p = eol;
        }
        return NULL;
}

int e2b_head_target(const char *head, size_t n, const char *domain, char *id, int *ret_port) {
        char host[512], sid[64], sport[16];
        return target_of(head_header(head, n, "Host", host, sizeof(host)), head_header(head, n, "E2b-Sandbox-Id", sid, sizeof(sid)),
                         head_header(head, n, "E2b-Sandbox-Port", sport, sizeof(sport)), domain, id, ret_port);
}

static void plain_answer(int fd, int status, const char *reason, const char *msg) {
        char body[1024], head[512];
        int bn = snprintf(body, sizeof(body), "{\"code\":%d,\"message\":\"%s\"}", status, msg);
        int hn = snprintf(head, sizeof(head),
                          "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
                          status, reason, bn);
        (void) fd_send_all(fd, head, (size_t) hn, mono_ms() + 5000);
        (void) fd_send_all(fd, body, (size_t) bn, mono_ms() + 5000);
}

/* A request to another port: the sandbox must exist, run, and (unless its traffic is public)
 * the request must carry its traffic token. */
static void forward_port(struct econn *ec, const char *head, size_t n, const char *id, int port) {
        struct ctl *c = E.c;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (store_sandbox_get(c->store, id, &sb) < 0 || !live(sb.status))
                return plain_answer(ec->fd, 502, "Bad Gateway", "The sandbox does not exist or is no longer running");
        if (!opt_public(&sb)) {
                char tok[128];
                const char *got = head_header(head, n, "e2b-traffic-access-token", tok, sizeof(tok));
                if (!e2b_token_ok(c, "traffic", sb.id, got))
                        return plain_answer(ec->fd, 403, "Forbidden",
                                            "This sandbox's ports need its traffic access token (e2b-traffic-access-token)");
        }
        if (sb.status != SB_READY)
                return plain_answer(ec->fd, 502, "Bad Gateway", "The sandbox is not running (paused or starting)");
        preview_forward_conn(c, ec->fd, ec->peer, &sb, port, c->cfg->max_header);
        ec->fd = -1;   /* preview_forward_conn closed it */
}

static void serve(struct econn *ec) {
        char head[65536];
        if (E.tls) {
                /* TLS ends here: from now on the connection is the bridge's plain end */
                char err[256];
                int fd = tls_bridge(E.tls, ec->fd, NULL, mono_ms() + (int64_t) E.c->cfg->e2b_head_timeout_ms, err, sizeof(err));
                ec->fd = -1;
                if (fd < 0) {
                        log_debug("e2b: TLS from %s failed: %s", ec->peer, err);
                        return;
                }
                ec->fd = fd;
        }
        size_t max = E.c->cfg->max_header < sizeof(head) ? E.c->cfg->max_header : sizeof(head);
        int64_t deadline = mono_ms() + (int64_t) E.c->cfg->e2b_head_timeout_ms;
        ssize_t n = 0;
        for (;;) {
                struct pollfd pfd = { .fd = ec->fd, .events = POLLIN };
                int64_t left = deadline - mono_ms();
                if (left <= 0 || E.L.stopping || E.c->stopping)
                        return;
                int k = poll(&pfd, 1, (int) (left < 500 ? left : 500));
                if (k <= 0)
                        continue;
                ssize_t got = recv(ec->fd, head, max, MSG_PEEK);
                if (got <= 0)
                        return;   /* gone before a request */
                if (memmem(head, (size_t) got, "\r\n\r\n", 4) || (size_t) got >= max) {
                        n = got;
                        break;
                }
                if (got == n)
                        usleep(5000);   /* the rest of the head is on its way (peeking does not wait) */
                n = got;
        }
        char id[SANDBOX_ID_LEN + 1];
        int port = 0;
        int t = e2b_head_target(head, (size_t) n, E.domain, id, &port);
        if (t == 1 && port != PJ_E2B_ENVD_PORT)
                return forward_port(ec, head, (size_t) n, id, port);
        if (http_add_connection(E.srv, ec->fd, (struct sockaddr *) &ec->sa, ec->sl) < 0)
                log_debug("e2b: the HTTP server refused a connection (at its limit)");
        ec->fd = -1;
}

static void serve_conn(struct listener *l, int fd, const struct sockaddr_storage *sa, socklen_t sl, const char *peer, void *ud) {
        (void) l;
        (void) ud;
        struct econn ec = { .fd = fd, .sa = *sa, .sl = sl };
        snprintf(ec.peer, sizeof(ec.peer), "%s", peer);
        serve(&ec);
        if (ec.fd >= 0)
                close(ec.fd);
}

int e2b_start(struct ctl *c) {
        const struct config *cfg = c->cfg;
        E.c = c;
        if (!cfg->e2b_listen_addr) {
                log_info("E2B's API off ([e2b] listen unset)");
                return 0;
        }
        if (*cfg->e2b_tls_cert) {
                char err[512];
                E.tls = tls_server_ctx(cfg->e2b_tls_cert, cfg->e2b_tls_key, err, sizeof(err));
                if (!E.tls)
                        return log_error_errno(-EINVAL, "[e2b] tls_cert/tls_key: %s", err);
        }
        struct http_flavor fl = { .route_req = route_req, .key_header = "x-api-key", .error_body = error_body,
                                  .bad_id_status = 404, .unescape_slash = true };
        if (*cfg->e2b_domain)
                snprintf(E.domain, sizeof(E.domain), "%s", cfg->e2b_domain);
        else
                snprintf(E.domain, sizeof(E.domain), "localhost:%d", cfg->e2b_listen_port);
        int r = http_start_flavor(c, &fl, &E.srv);
        if (r >= 0) {
                E.L.name = "e2b listener";
                E.L.max_conns = cfg->e2b_max_connections;
                E.L.max_per_addr = cfg->e2b_per_address;
                E.L.serve = serve_conn;
                r = listener_start(&E.L, cfg->e2b_listen_addr, cfg->e2b_listen_port);
        }
        if (r < 0) {
                E.srv = http_stop(E.srv);
                SSL_CTX_free(E.tls);
                E.tls = NULL;
                return r;
        }
        if (!*cfg->e2b_domain && !cfg->e2b_listen_port)
                snprintf(E.domain, sizeof(E.domain), "localhost:%d", E.L.port);   /* port 0: the one bound */
        log_info("E2B's API on %s:%d (%s, sandbox domain %s)", cfg->e2b_listen_addr, E.L.port, E.tls ? "TLS" : "plain HTTP",
                 E.domain);
        return 0;
}

int e2b_port(void) {
        return E.L.port;
}

void e2b_stop(void) {
        if (!E.L.running)
                return;
        (void) listener_stop(&E.L, 15);
        E.srv = http_stop(E.srv);
        if (E.tls) {
                tls_bridges_wait(2000);
                SSL_CTX_free(E.tls);
                E.tls = NULL;
        }
}
