/* driver-nomad.c — production scheduling: every sandbox is a Nomad job on the sandbox node pool.
 *
 * One service job per sandbox, "sandbox-<id>", one group of count 1 that never restarts or
 * reschedules (a lost host fails the sandbox; it is never silently moved), network
 * cni/<profile> by egress mode, a docker task under gVisor. Placement waits with blocking
 * queries (index/wait) on the evaluation and then the allocations, never by polling in a tight
 * loop. A failed placement purges the job. Pause and resume scale the group to 0 and 1 (a
 * sandbox resuming from a snapshot image registers its job again with that image).
 * Exec and file transfer go over Nomad's alloc exec WebSocket, on a libcurl CONNECT_ONLY
 * connection (so TLS and mTLS are libcurl's) with common/ws framing.
 *
 * Wire facts: shared/reference/PROTOCOLS.md section 1. The pure parts (job builder, answer
 * parsers, exec frames) are nomad-wire.c, unit-tested with canned answers; the exec session is
 * nomad-exec.c.
 */
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>

#include "guest-conn.h"
#include "guest-secret.h"
#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "nomad-private.h"
#include "nomad-wire.h"
#include "driver.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "userimage.h"
#include "ws.h"

#define NOMAD_MAX_RESPONSE ((size_t) 16 << 20)

/* ---- talking to Nomad ---- */




static void nresp_done(struct nresp *r) { strbuf_done(&r->body); }

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
        struct nresp *r = ud;
        return strbuf_append(&r->body, p, sz * n) < 0 ? 0 : sz * n;
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud) {
        struct nresp *r = ud;
        size_t len = sz * n;
        static const char h[] = "x-nomad-index:";
        if (len > sizeof(h) - 1 && !strncasecmp(p, h, sizeof(h) - 1)) {
                char buf[32];
                size_t k = len - (sizeof(h) - 1);
                if (k >= sizeof(buf))
                        k = sizeof(buf) - 1;
                memcpy(buf, p + sizeof(h) - 1, k);
                buf[k] = 0;
                r->index = strtoll(buf, NULL, 10);
        }
        return len;
}

void nomad_curl_tls(struct ndriver *n, CURL *h) {
        httpc_tls_files(h, n->cfg->nomad_ca_file, n->cfg->nomad_cert_file, n->cfg->nomad_key_file);
}

/* The query string every request carries: namespace and region from the config. */
char *nomad_common_query(struct ndriver *n) {
        CURL *h = curl_easy_init();
        char *ns = curl_easy_escape(h, n->cfg->nomad_namespace, 0);
        char *rg = curl_easy_escape(h, n->cfg->nomad_region, 0);
        char *q = xasprintf("namespace=%s&region=%s", ns, rg);
        curl_free(ns);
        curl_free(rg);
        curl_easy_cleanup(h);
        return q;
}

char *nomad_esc(const char *s) {
        CURL *h = curl_easy_init();
        char *e = curl_easy_escape(h, s, 0);
        char *r = xstrdup(e);
        curl_free(e);
        curl_easy_cleanup(h);
        return r;
}

/* One request to Nomad. 0 when an HTTP answer came (any status), -EHOSTUNREACH when Nomad did
 * not answer (err says why). timeout_ms 0 = [nomad] request_timeout. */
static int nomad_call(struct ndriver *n, const char *method, const char *path, const char *query, const cJSON *body,
                      long timeout_ms, struct nresp *ret, struct err *err) {
        _cleanup_free_ char *cq = nomad_common_query(n);
        _cleanup_free_ char *url = xasprintf("%s%s?%s%s%s", n->base, path, cq, query ? "&" : "", query ? query : "");
        _cleanup_free_ char *text = body ? json_print(body) : NULL;
        struct curl_slist *hdrs = NULL;
        CURL *h = curl_easy_init();
        if (!h)
                return err_set(err, -ENOMEM, "libcurl failed to start");
        memset(ret, 0, sizeof(*ret));
        strbuf_init(&ret->body, NOMAD_MAX_RESPONSE);
        if (n->token_header)
                hdrs = curl_slist_append(hdrs, n->token_header);
        if (text)
                hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (text) {
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long) strlen(text));
        } else if (!strcmp(method, "GET"))
                curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : (long) n->cfg->nomad_request_timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, ret);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, ret);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, ret->curl_error);
        nomad_curl_tls(n, h);
        CURLcode cc = curl_easy_perform(h);
        if (cc == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &ret->status);
        curl_easy_cleanup(h);
        curl_slist_free_all(hdrs);
        if (cc != CURLE_OK) {
                err_set(err, cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH,
                        "Nomad at %s did not answer %s %s: %s", n->cfg->nomad_addr, method, path,
                        ret->curl_error[0] ? ret->curl_error : curl_easy_strerror(cc));
                nresp_done(ret);
                return cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
        }
        return 0;
}

/* Nomad's text/plain error as one clean line (first line, at most 300 bytes). */
void nomad_error(const struct nresp *r, const char *what, struct err *err) {
        char msg[301];
        size_t k = 0;
        for (size_t i = 0; i < r->body.len && k < sizeof(msg) - 1; i++) {
                char ch = r->body.buf[i];
                if (ch == '\n' || ch == '\r')
                        break;
                msg[k++] = (unsigned char) ch < 0x20 ? ' ' : ch;
        }
        msg[k] = 0;
        if (r->status == 403)
                err_set(err, -EACCES, "%s: Nomad refused the ACL token (%s); check [nomad] token", what,
                        k ? msg : "Permission denied");
        else
                err_set(err, -EREMOTEIO, "%s: Nomad answered %ld%s%s", what, r->status, k ? ": " : "", msg);
}

static int status_errno(long status) {
        switch (status) {
        case 404:
                return -ENOENT;
        case 403:
                return -EACCES;
        case 400:
                return -EINVAL;
        default:
                return -EREMOTEIO;
        }
}

int nomad_json(struct ndriver *n, const char *method, const char *path, const char *query, const cJSON *body,
                      const char *what, cJSON **ret_json, int64_t *ret_index, struct err *err) {
        struct nresp r;
        int k = nomad_call(n, method, path, query, body, 0, &r, err);
        if (k < 0)
                return k;
        if (r.status < 200 || r.status > 299) {
                nomad_error(&r, what, err);
                k = status_errno(r.status);
                nresp_done(&r);
                return k;
        }
        if (ret_index)
                *ret_index = r.index;
        if (ret_json) {
                struct err perr = { 0 };
                *ret_json = NULL;
                if (r.body.len && json_parse(r.body.buf, r.body.len, NOMAD_MAX_RESPONSE, 64, ret_json, &perr) < 0) {
                        err_set(err, -EBADMSG, "%s: Nomad's answer is not JSON (%s)", what, perr.message);
                        nresp_done(&r);
                        return -EBADMSG;
                }
        }
        nresp_done(&r);
        return 0;
}

/* A blocking query: returns when Nomad's index for path passes *index or after wait_ms.
 * Updates *index. A server that answers at once without a newer index (which Nomad never
 * does) is slowed down here, so a misbehaving endpoint cannot turn this into a storm. */
static int nomad_block(struct ndriver *n, const char *path, const char *query, int64_t *index, int64_t wait_ms,
                       const char *what, cJSON **ret_json, struct err *err) {
        _cleanup_free_ char *q = xasprintf("%s%sindex=%lld&wait=%lldms", query ? query : "", query ? "&" : "",
                                           (long long) *index, (long long) wait_ms);
        struct nresp r;
        int64_t t0 = mono_ms();
        int k = nomad_call(n, "GET", path, q, NULL, (long) (wait_ms + wait_ms / 16 + n->cfg->nomad_request_timeout_ms), &r,
                           err);
        if (k < 0)
                return k;
        if (r.status != 200) {
                nomad_error(&r, what, err);
                k = status_errno(r.status);
                nresp_done(&r);
                return k;
        }
        struct err perr = { 0 };
        k = json_parse(r.body.buf, r.body.len, NOMAD_MAX_RESPONSE, 64, ret_json, &perr);
        if (k < 0) {
                err_set(err, -EBADMSG, "%s: Nomad's answer is not JSON (%s)", what, perr.message);
                nresp_done(&r);
                return -EBADMSG;
        }
        if (*index > 0 && r.index <= *index && mono_ms() - t0 < wait_ms / 2)
                usleep(250 * 1000);
        /* An index that went backwards (a new leader, a restored snapshot) restarts the watch. */
        *index = r.index > 0 ? r.index : 1;
        nresp_done(&r);
        return 0;
}

void nomad_ctx_ids(const char *job, const char *alloc) {
        log_ctx_set("NOMAD_JOB_ID", job);
        log_ctx_set("ALLOC_ID", alloc);
}

static int deregister(struct ndriver *n, const char *job, struct err *err) {
        _cleanup_free_ char *path = xasprintf("/v1/job/%s", job);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "DELETE", path, "purge=true", NULL, "deregistering the job", &j, NULL, err);
        return r == -ENOENT ? 0 : r;   /* Nomad answers 200 for an unknown job; a 404 means the same */
}

/* Waits (blocking queries, bounded) until the allocation no longer runs or is gone. */
static void wait_alloc_stopped(struct ndriver *n, const char *alloc, int64_t timeout_ms) {
        _cleanup_free_ char *path = xasprintf("/v1/allocation/%s", alloc);
        int64_t index = 0, deadline = mono_ms() + timeout_ms;
        struct err err = { 0 };
        for (;;) {
                int64_t left = deadline - mono_ms();
                if (left <= 0) {
                        log_warning("allocation %s still running %llds after it was stopped", alloc,
                                    (long long) (timeout_ms / 1000));
                        return;
                }
                _cleanup_json_ cJSON *a = NULL;
                int r = nomad_block(n, path, NULL, &index, left < (int64_t) n->cfg->nomad_blocking_wait_ms
                                                                   ? left
                                                                   : (int64_t) n->cfg->nomad_blocking_wait_ms,
                                    "reading the allocation", &a, &err);
                if (r == -ENOENT)
                        return;
                if (r < 0) {
                        log_warning("could not follow the stopping allocation: %s", err.message);
                        return;
                }
                const char *cs = json_get_str(a, "ClientStatus");
                if (cs && strcmp(cs, "pending") != 0 && strcmp(cs, "running") != 0)
                        return;
        }
}

static int scale(struct ndriver *n, const char *job, int count, const char *why, char **ret_eval, int64_t *ret_index,
                 struct err *err) {
        _cleanup_free_ char *path = xasprintf("/v1/job/%s/scale", job);
        _cleanup_json_ cJSON *body = cJSON_CreateObject();
        _cleanup_json_ cJSON *j = NULL;
        json_add_int(body, "Count", count);
        cJSON *t = cJSON_AddObjectToObject(body, "Target");
        json_add_str(t, "Job", job);
        json_add_str(t, "Group", NOMAD_GROUP);
        json_add_str(body, "Message", why);
        int64_t hidx = 0;
        int r = nomad_json(n, "POST", path, NULL, body, count ? "scaling the job to 1" : "scaling the job to 0", &j, &hidx,
                           err);
        if (r < 0)
                return r;
        int64_t jm = 0, ec = 0;
        (void) json_get_int(j, "JobModifyIndex", &jm);
        (void) json_get_int(j, "EvalCreateIndex", &ec);
        if (ret_index)
                *ret_index = jm > ec ? jm : ec > 0 ? ec : hidx;
        if (ret_eval)
                *ret_eval = nomad_str_or_null(json_get_str(j, "EvalID"));
        return 0;
}

static int64_t block_wait(struct ndriver *n, int64_t deadline) {
        int64_t left = deadline - mono_ms();
        int64_t w = (int64_t) n->cfg->nomad_blocking_wait_ms;
        return left < w ? left : w;
}

/* Follows the evaluation until it finished: a placement failure (no node fits) ends the wait
 * at once with the scheduler's reason. 0 placed (or no eval to follow), < 0 with err set. */
static int wait_eval(struct ndriver *n, const char *eval, int64_t deadline, struct err *err) {
        if (!eval)
                return 0;
        _cleanup_free_ char *path = xasprintf("/v1/evaluation/%s", eval);
        int64_t index = 0;
        for (;;) {
                int64_t w = block_wait(n, deadline);
                if (w <= 0)
                        return 0;   /* the allocation wait reports the timeout */
                _cleanup_json_ cJSON *e = NULL;
                int r = nomad_block(n, path, NULL, &index, w, "reading the evaluation", &e, err);
                if (r == -ENOENT)
                        return 0;   /* garbage-collected or not served: the allocations tell */
                if (r < 0)
                        return r;
                bool done = false;
                _cleanup_free_ char *why = nomad_eval_failure(e, &done);
                if (why)
                        return err_set(err, -EHOSTUNREACH, "%s", why);
                if (done)
                        return 0;
        }
}

/* Waits for the allocation created at/after min_index to run. */
static int wait_alloc(struct ndriver *n, const char *job, int64_t min_index, int64_t deadline, struct nomad_alloc *ret,
                      struct err *err) {
        _cleanup_free_ char *path = xasprintf("/v1/job/%s/allocations", job);
        int64_t index = 0;
        _cleanup_free_ char *last = NULL;
        for (;;) {
                int64_t w = block_wait(n, deadline);
                if (w <= 0)
                        return err_set(err, -ETIMEDOUT, "Nomad did not start the sandbox within %llus%s%s",
                                       (unsigned long long) (n->cfg->nomad_placement_timeout_ms / 1000),
                                       last ? ": " : " (no allocation placed)", last ? last : "");
                _cleanup_json_ cJSON *stubs = NULL;
                int r = nomad_block(n, path, NULL, &index, w, "reading the job's allocations", &stubs, err);
                if (r < 0)
                        return r;
                struct nomad_alloc a = { 0 };
                if (nomad_allocs_pick(stubs, min_index, &a) <= 0)
                        continue;
                log_ctx_set("ALLOC_ID", a.id);
                switch (a.phase) {
                case NOMAD_ALLOC_RUNNING:
                        *ret = a;
                        return 0;
                case NOMAD_ALLOC_FAILED:
                case NOMAD_ALLOC_STOPPED:
                        err_set(err, -EHOSTUNREACH, "Nomad allocation %.8s %s: %s", a.id, a.client_status,
                                a.reason ? a.reason : "no reason given");
                        nomad_alloc_clear(&a);
                        return -EHOSTUNREACH;
                case NOMAD_ALLOC_PENDING:
                        free(last);
                        last = a.reason ? xasprintf("allocation %.8s pending (%s)", a.id, a.reason)
                                        : xasprintf("allocation %.8s pending", a.id);
                        nomad_alloc_clear(&a);
                        break;
                }
        }
}

/* The agent makes its socket a moment after the task starts: the first command should not
 * have to take the slow path. Waits up to 10 s (within deadline); a sandbox whose agent never
 * answers still runs (commands then go through alloc exec), with one warning. */
static void wait_agent(struct driver *d, const struct sandbox *sb, const char *node_id, int64_t deadline) {
        struct sandbox t = *sb;
        t.node_id = (char *) node_id;
        int64_t until = mono_ms() + 10000;
        if (until > deadline)
                until = deadline;
        struct err err = { 0 };
        for (int i = 0;; i++) {
                struct guest_client *ac = NULL;
                int r = driver_guest_connect(d, &t, &ac, &err);
                guest_client_free(ac);
                if (r == 0)
                        return;
                if (mono_ms() >= until) {
                        log_warning("the sandbox's agent did not answer within 10 s (%s); commands go through alloc exec",
                                    err.message);
                        return;
                }
                usleep(i < 20 ? 20000 : 100000);
        }
}

/* The VOLUMEs of an image from the snapshot registry (a user's template or a snapshot; what
 * the operator's templates name is the operator's): a tmpfs of the sandbox's memory size over
 * each, so the node's Docker makes no anonymous volume under its data root (outside the
 * sandbox's disk cap, left behind when the job goes). Templates built here have none (they
 * are normalised when pushed); this covers older ones and their snapshots. */
static int image_volumes_tmpfs(struct ndriver *n, const struct sandbox *sb, cJSON *body, struct err *err) {
        if (!sb->from_snapshot && !userimage_is(n->cfg, sb->image))
                return 0;
        _cleanup_strv_free_ char **vols = NULL;
        int r = userimage_volumes(n->cfg, sb->image, &vols);
        if (r == -E2BIG)
                err_set(err, -EINVAL, "image %s declares more than %d VOLUMEs; it cannot run as a sandbox", sb->image,
                        DOCKER_IMAGE_VOLUMES_MAX);
        else if (r == -EDOM)
                err_set(err, -EINVAL, "image %s declares a VOLUME that is not an absolute path below /; it cannot run "
                                      "as a sandbox", sb->image);
        else if (r < 0)
                err_set(err, r, "cannot read the config of image %s from the registry: %s", sb->image, strerror(-r));
        if (r < 0)
                return r == -E2BIG || r == -EDOM ? -EINVAL : r;
        (void) nomad_job_add_tmpfs(body, (const char *const *) vols, (int64_t) (sb->memory > 0 ? sb->memory : 64) << 20);
        return 0;
}

static int nd_place(struct driver *d, const struct sandbox *sb, struct placement *ret, struct err *err) {
        struct ndriver *n = N(d);
        _cleanup_free_ char *job = nomad_job_id(sb->id);
        _cleanup_free_ char *eval = NULL, *apath = NULL;
        _cleanup_json_ cJSON *full = NULL;
        int64_t min_index = 0, deadline = mono_ms() + (int64_t) n->cfg->nomad_placement_timeout_ms;
        struct nomad_alloc a = { 0 };
        bool scaled = false;
        int r;

        nomad_ctx_ids(job, NULL);
        /* Resume: the job is still registered at count 0; a new allocation comes from scaling.
         * A sandbox whose image became a snapshot meanwhile (E2B's pause keeps the filesystem
         * so) registers the job again instead: its task must start from that image. */
        if (sb->status == SB_RESUMING && !sb->from_snapshot) {
                r = scale(n, job, 1, "resume", &eval, &min_index, err);
                if (r >= 0)
                        scaled = true;
                else if (r != -ENOENT)
                        goto fail;
        }
        if (!scaled) {
                char secret[GUEST_SECRET_LEN + 1];
                if (d->ctl->agent_binary)
                        guest_secret(d->ctl->agent_key, sb->id, secret);
                _cleanup_json_ cJSON *body = nomad_job_build(n->cfg, d->ctl->instance_id, sb,
                                                             d->ctl->agent_binary ? secret : NULL);
                explicit_bzero(secret, sizeof(secret));
                if ((r = image_volumes_tmpfs(n, sb, body, err)) < 0)
                        goto fail;
                _cleanup_json_ cJSON *j = NULL;
                int64_t hidx = 0;
                r = nomad_json(n, "PUT", "/v1/jobs", NULL, body, "registering the job", &j, &hidx, err);
                if (r < 0)
                        goto fail;
                (void) json_get_int(j, "JobModifyIndex", &min_index);
                if (!min_index)
                        min_index = hidx;
                eval = nomad_str_or_null(json_get_str(j, "EvalID"));
        }
        r = wait_eval(n, eval, deadline, err);
        if (r >= 0)
                r = wait_alloc(n, job, min_index, deadline, &a, err);
        if (r < 0)
                goto fail;

        /* The full allocation has the address the egress rules key on. */
        apath = xasprintf("/v1/allocation/%s", a.id);
        r = nomad_json(n, "GET", apath, NULL, NULL, "reading the allocation", &full, NULL, err);
        if (r < 0)
                goto fail;
        /* The task's Docker container on its node, as Nomad's docker driver names it: what the
         * node agent commits for a snapshot (it asks its local dockerd by this name). */
        ret->container_id = xasprintf("%s-%s", NOMAD_TASK, a.id);
        ret->alloc_id = xstrdup(a.id);
        ret->job_id = xstrdup(job);
        ret->node_id = xstrdup(a.node_id ? a.node_id : "");
        ret->ip = nomad_alloc_address(full) ?: xstrdup("");
        log_info("Nomad allocation running on node %s (address %s)", ret->node_id, ret->ip);
        if (d->ctl->agent_binary)
                wait_agent(d, sb, ret->node_id, deadline);
        nomad_alloc_clear(&a);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        return 0;

fail:
        log_error("Nomad placement failed: %s", err->message);
        {
                struct err e2 = { 0 };
                /* Nothing stays behind: the job is purged (a resume that failed fails the sandbox). */
                if (deregister(n, job, &e2) < 0)
                        log_error("could not purge the failed job (the orphan reaper retries): %s", e2.message);
        }
        nomad_alloc_clear(&a);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        return r == -ETIMEDOUT || r == -EHOSTUNREACH ? r : -EHOSTUNREACH;
}

static int nd_remove(struct driver *d, const struct sandbox *sb, struct err *err) {
        struct ndriver *n = N(d);
        _cleanup_free_ char *job = nomad_job_id(sb->id);
        int r;
        nomad_ctx_ids(job, sb->alloc_id);
        if (sb->status == SB_PAUSING) {
                /* Pause: the job stays (its volume claim and spec); the allocation goes. */
                r = scale(n, job, 0, "pause", NULL, NULL, err);
                if (r == -ENOENT)
                        r = 0;
        } else
                r = deregister(n, job, err);
        if (r < 0)
                log_error("Nomad: %s", err->message);
        else if (sb->alloc_id && *sb->alloc_id)
                /* The volume claim and the egress rules follow the allocation: wait until it stopped. */
                wait_alloc_stopped(n, sb->alloc_id, (int64_t) n->cfg->nomad_request_timeout_ms);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        log_ctx_set("ALLOC_ID", NULL);
        return r;
}

static int nd_running(struct driver *d, const struct sandbox *sb, int *ret_exit_code) {
        struct ndriver *n = N(d);
        struct err err = { 0 };
        if (!sb->alloc_id || !*sb->alloc_id)
                return 0;
        _cleanup_free_ char *path = xasprintf("/v1/allocation/%s", sb->alloc_id);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "GET", path, NULL, NULL, "reading the allocation", &j, NULL, &err);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return r;
        struct nomad_alloc a = { 0 };
        if (nomad_alloc_parse(j, &a) < 0)
                return -EBADMSG;
        bool up = a.phase == NOMAD_ALLOC_RUNNING || a.phase == NOMAD_ALLOC_PENDING;
        if (!up) {
                nomad_ctx_ids(json_get_str(j, "JobID"), a.id);
                log_warning("Nomad allocation %s: %s", a.client_status, a.reason ? a.reason : "no reason given");
                log_ctx_set("NOMAD_JOB_ID", NULL);
                log_ctx_set("ALLOC_ID", NULL);
        }
        if (ret_exit_code)
                *ret_exit_code = up ? 0 : -1;
        nomad_alloc_clear(&a);
        return up;
}

static int nd_sample(struct driver *d, const struct sandbox *sb, struct driver_sample *ret) {
        struct ndriver *n = N(d);
        struct err err = { 0 };
        memset(ret, 0, sizeof(*ret));
        if (!sb->alloc_id)
                return -ENOENT;
        _cleanup_free_ char *path = xasprintf("/v1/client/allocation/%s/stats", sb->alloc_id);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "GET", path, NULL, NULL, "reading allocation stats", &j, NULL, &err);
        if (r < 0)
                return r;
        const cJSON *ru = cJSON_GetObjectItemCaseSensitive(j, "ResourceUsage");
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(ru, "MemoryStats");
        const cJSON *cpu = cJSON_GetObjectItemCaseSensitive(ru, "CpuStats");
        int64_t usage = 0;
        if (!json_get_int(mem, "Usage", &usage) || usage == 0)
                (void) json_get_int(mem, "RSS", &usage);
        const cJSON *pct = cJSON_GetObjectItemCaseSensitive(cpu, "Percent");
        ret->mem_usage = usage > 0 ? (uint64_t) usage : 0;
        ret->mem_percent = sb->memory > 0 ? 100.0 * (double) ret->mem_usage / ((double) sb->memory * 1024 * 1024) : 0;
        ret->cpu_percent = cJSON_IsNumber(pct) ? pct->valuedouble : 0;
        ret->valid = ru != NULL;
        return 0;
}

static int nd_volume_create(struct driver *d, const char *handle, int64_t size_gb, struct err *err) {
        struct ndriver *n = N(d);
        if (!n->cfg->nomad_csi_plugin_id[0])
                return err_set(err, -EOPNOTSUPP, "persistent volumes need a CSI plugin: set [nomad] csi_plugin_id");
        _cleanup_free_ char *path = xasprintf("/v1/volume/csi/%s/create", handle);
        _cleanup_json_ cJSON *body = nomad_volume_build(n->cfg, handle, size_gb);
        _cleanup_json_ cJSON *j = NULL;
        int r = nomad_json(n, "PUT", path, NULL, body, "creating the CSI volume", &j, NULL, err);
        if (r < 0)
                log_error("Nomad: %s", err->message);
        return r < 0 ? -EHOSTUNREACH : 0;
}

static int nd_volume_remove(struct driver *d, const char *handle, struct err *err) {
        struct ndriver *n = N(d);
        _cleanup_free_ char *path = xasprintf("/v1/volume/csi/%s/delete", handle);
        int r = nomad_json(n, "DELETE", path, NULL, NULL, "deleting the CSI volume", NULL, NULL, err);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                log_error("Nomad: %s", err->message);
        return r;
}

static int nd_list(struct driver *d, char ***ret) {
        struct ndriver *n = N(d);
        struct err err = { 0 };
        _cleanup_json_ cJSON *jobs = NULL;
        int r = nomad_json(n, "GET", "/v1/jobs", "prefix=sandbox-&meta=true", NULL, "listing jobs", &jobs, NULL, &err);
        if (r < 0) {
                log_warning("Nomad: %s", err.message);
                return r;
        }
        size_t need = 0;
        char **ids = nomad_jobs_filter(jobs, d->ctl->instance_id, &need);
        if (need) {
                /* A Nomad before 1.6 sends no Meta in the list: read those jobs one by one. */
                size_t k = strv_length(ids);
                const cJSON *s;
                cJSON_ArrayForEach(s, jobs) {
                        const char *id = json_get_str(s, "ID");
                        const char *st = json_get_str(s, "Status");
                        if (!id || cJSON_GetObjectItemCaseSensitive(s, "Meta") || !startswith(id, "sandbox-") ||
                            !hexid_valid(id + 8) || (st && !strcmp(st, "dead")))
                                continue;
                        _cleanup_free_ char *path = xasprintf("/v1/job/%s", id);
                        _cleanup_json_ cJSON *full = NULL;
                        if (nomad_json(n, "GET", path, NULL, NULL, "reading a job", &full, NULL, &err) < 0)
                                continue;
                        const char *inst = json_get_str(cJSON_GetObjectItemCaseSensitive(full, "Meta"), NOMAD_META_INSTANCE);
                        if (!inst || strcmp(inst, d->ctl->instance_id) != 0)
                                continue;
                        ids = xrealloc(ids, (k + 2) * sizeof(char *));
                        ids[k++] = xstrdup(id + 8);
                        ids[k] = NULL;
                }
        }
        *ret = ids;
        return 0;
}

static int nd_remove_by_id(struct driver *d, const char *sandbox_id) {
        struct err err = { 0 };
        _cleanup_free_ char *job = nomad_job_id(sandbox_id);
        nomad_ctx_ids(job, NULL);
        int r = deregister(N(d), job, &err);
        if (r < 0)
                log_warning("Nomad: %s", err.message);
        log_ctx_set("NOMAD_JOB_ID", NULL);
        return r;
}

static int nd_node_set_eligible(struct driver *d, const char *node_id, bool eligible, struct err *err) {
        _cleanup_free_ char *path = xasprintf("/v1/node/%s/eligibility", node_id);
        _cleanup_json_ cJSON *body = cJSON_CreateObject();
        json_add_str(body, "NodeID", node_id);
        json_add_str(body, "Eligibility", eligible ? "eligible" : "ineligible");
        int r = nomad_json(N(d), "POST", path, NULL, body, "setting the node's eligibility", NULL, NULL, err);
        if (r == -ENOENT)
                err_set(err, r, "Nomad knows no node %s", node_id);
        return r;
}

/* ---- set-up ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { (void) curl_global_init(CURL_GLOBAL_ALL); }

static int nd_ping(struct driver *d) {
        struct nresp r;
        struct err err = { 0 };
        int k = nomad_call(N(d), "GET", "/v1/status/leader", NULL, NULL, 5000, &r, &err);
        if (k < 0)
                return k;
        k = r.status >= 200 && r.status < 500 ? 0 : -EREMOTEIO;
        nresp_done(&r);
        return k;
}

static int nd_init(struct driver *d, struct err *err) {
        struct ndriver *n = N(d);
        struct nresp r;
        int k = nomad_call(n, "GET", "/v1/status/leader", NULL, NULL, 5000, &r, err);
        if (k < 0)
                return k;
        if (r.status >= 500) {
                nomad_error(&r, "Nomad is not ready", err);
                nresp_done(&r);
                return -EHOSTUNREACH;
        }
        nresp_done(&r);
        log_info("Nomad driver: %s, namespace %s, node pool %s, region %s%s", n->cfg->nomad_addr, n->cfg->nomad_namespace,
                 n->cfg->nomad_node_pool, n->cfg->nomad_region, n->token_header ? ", ACL token set" : "");
        return 0;
}

static void nd_done(struct driver *d) {
        struct ndriver *n = d->priv;
        if (n) {
                free_many(n->base, n->hostport, n->token_header, n);
        }
        d->priv = NULL;
}

static const struct driver_ops nomad_ops = {
        .init = nd_init,
        .ping = nd_ping,
        .done = nd_done,
        .place = nd_place,
        .remove = nd_remove,
        .running = nd_running,
        .sample = nd_sample,
        .volume_create = nd_volume_create,
        .volume_remove = nd_volume_remove,
        .list = nd_list,
        .remove_by_id = nd_remove_by_id,
        .exec_start = nomad_exec_start,
        .exec_write = nomad_exec_write,
        .exec_close_stdin = nomad_exec_close_stdin,
        .exec_read = nomad_exec_read,
        .exec_exit_code = nomad_exec_exit_code,
        .exec_oom_killed = nomad_exec_oom_killed,
        .exec_free = nomad_exec_free,
        .node_set_eligible = nd_node_set_eligible,
        .agent_dial = nomad_agent_dial,
};

int driver_nomad_new(struct ctl *c, struct driver **ret) {
        struct config *cfg = c->cfg;
        struct driver *d = xnew0(struct driver, 1);
        struct ndriver *n = xnew0(struct ndriver, 1);
        (void) pthread_once(&curl_once, curl_init_once);
        n->cfg = cfg;
        n->base = xstrdup(cfg->nomad_addr);
        size_t bl = strlen(n->base);
        while (bl > 0 && n->base[bl - 1] == '/')
                n->base[--bl] = 0;
        const char *hp = strstr(n->base, "://");
        hp = hp ? hp + 3 : n->base;
        n->hostport = xstrndup(hp, strcspn(hp, "/"));
        if (cfg->nomad_token[0])
                n->token_header = xasprintf("X-Nomad-Token: %s", cfg->nomad_token);
        d->name = "nomad";
        d->ctl = c;
        d->priv = n;
        d->ops = &nomad_ops;
        *ret = d;
        return 0;
}
