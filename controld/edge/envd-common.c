/* envd-common.c — what envd's services share (envd-private.h): the sandbox tokens, the
 * request's sandbox and user, the Connect request, unary answers and server streams (their
 * reader, keepalives, deadlines and the kills a deadline leaves for later). envd.c routes a
 * request to envd-process.c, envd-fs.c or envd-files.c, which answer through these. */

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <inttypes.h>
#include <time.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "controld.h"
#include "e2b.h"
#include "envd-private.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_e2b.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "process.h"
#include "session.h"
#include "sandbox.h"
#include "strutil.h"


#define PENDING_CAP ((size_t) 1 << 20)
#define KEEPALIVE_DEFAULT_S 90

/* ---- tokens: derived, never stored ---- */

void e2b_token(const struct ctl *c, const char *kind, const char *sandbox_id, char out[65]) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        _cleanup_free_ char *msg = xasprintf("paddock-e2b-%s:%s", kind, sandbox_id);
        HMAC(EVP_sha256(), c->agent_key, (int) strlen(c->agent_key), (const unsigned char *) msg, strlen(msg), mac, &len);
        hex_encode(mac, 32, out);
        explicit_bzero(mac, sizeof(mac));
}

bool e2b_token_ok(const struct ctl *c, const char *kind, const char *sandbox_id, const char *got) {
        char want[65];
        e2b_token(c, kind, sandbox_id, want);
        bool ok = got && strlen(got) == 64 && CRYPTO_memcmp(want, got, 64) == 0;
        explicit_bzero(want, sizeof(want));
        return ok;
}

/* ---- answers ---- */

enum pj_connect_code envd_code_of(int err) {
        switch (-err) {
        case ENOENT: return PJ_CONNECT_NOT_FOUND;
        case EINVAL: return PJ_CONNECT_INVALID_ARGUMENT;
        case EBUSY: return PJ_CONNECT_FAILED_PRECONDITION;
        case EEXIST: return PJ_CONNECT_ALREADY_EXISTS;
        case EPERM:
        case EACCES: return PJ_CONNECT_PERMISSION_DENIED;
        case EUSERS: return PJ_CONNECT_RESOURCE_EXHAUSTED;
        case EOPNOTSUPP: return PJ_CONNECT_UNIMPLEMENTED;
        case EHOSTUNREACH:
        case EAGAIN: return PJ_CONNECT_UNAVAILABLE;
        case ETIMEDOUT: return PJ_CONNECT_DEADLINE_EXCEEDED;
        default: return PJ_CONNECT_INTERNAL;
        }
}

cJSON *envd_connect_error(enum pj_connect_code code, const char *msg) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "code", pj_connect_code_name(code));
        json_add_str(o, "message", msg);
        return o;
}

enum MHD_Result envd_unary_error(struct req *r, enum pj_connect_code code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return respond_json(r, pj_connect_code_http(code), envd_connect_error(code, msg));
}

enum MHD_Result envd_unary_ok(struct req *r, cJSON *o) {
        char *s = json_print(o);
        cJSON_Delete(o);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(strlen(s), s, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return respond_response(r, 200, resp);
}

/* One stream's frames; a finished stream ends with the end-of-stream envelope. */
void envd_env_append(struct strbuf *b, uint8_t flags, cJSON *o) {
        _cleanup_free_ char *s = json_print(o);
        cJSON_Delete(o);
        uint8_t h[5];
        pj_connect_envelope_header(h, flags, (uint32_t) strlen(s));
        strbuf_append(b, h, 5);
        strbuf_append(b, s, strlen(s));
}

void envd_env_end(struct strbuf *b, enum pj_connect_code code, const char *msg) {
        cJSON *o = cJSON_CreateObject();
        if (code)
                cJSON_AddItemToObject(o, "error", envd_connect_error(code, msg));
        envd_env_append(b, PJ_CONNECT_FLAG_END, o);
}

/* ---- the request's sandbox ---- */

/* E2B's users, with fixed ids: what a sandbox's /etc/passwd says is never asked (E2B's `base`
 * has `user` as 1000:1000). Any other name is refused. */
static const struct envd_user users[] = {
        { "root", 0, 0, "/root" },
        { "user", 1000, 1000, "/home/user" },
};
static const struct envd_user *const user_root = &users[0], *const user_e2b = &users[1];

const char *envd_id_name(uint32_t id, bool group) {
        for (size_t i = 0; i < ELEMENTSOF(users); i++)
                if ((group ? users[i].gid : users[i].uid) == id)
                        return users[i].name;
        return NULL;
}

static const struct envd_user *user_by_name(const char *name, size_t len) {
        for (size_t i = 0; i < ELEMENTSOF(users); i++)
                if (strlen(users[i].name) == len && !memcmp(users[i].name, name, len))
                        return &users[i];
        return NULL;
}

/* The user the request names: Authorization: Basic base64("<user>:") (the SDKs' `user`), else
 * ?username= (signed file URLs). *ret NULL: none named. < 0: a name not served, err says so. */
static int named_user(struct req *r, const struct envd_user **ret, struct err *err) {
        const char *auth = req_header(r, MHD_HTTP_HEADER_AUTHORIZATION), *q = req_query(r, "username");
        const char *field = NULL;
        _cleanup_free_ uint8_t *d = NULL;
        const char *name = NULL;
        size_t len = 0;
        if (ret)
                *ret = NULL;
        if (auth && !strncasecmp(auth, "Basic ", 6)) {
                const char *b = auth + 6;
                size_t dl = 0;
                field = "user";
                if (strlen(b) > 512 || base64_decode_flags(b, strlen(b), BASE64_PAD_OPTIONAL, &d, &dl) < 0)
                        return err_set(err, -EINVAL, "user: the Authorization header is not Basic base64(\"<user>:\")");
                const uint8_t *colon = memchr(d, ':', dl);
                name = (const char *) d;
                len = colon ? (size_t) (colon - d) : dl;
        } else if (q && *q) {
                field = "username";
                name = q;
                len = strlen(q);
        }
        if (!field || (!len && !strcmp(field, "user")))
                return 0;
        const struct envd_user *u = user_by_name(name, len);
        if (!u) {
                char shown[65];
                size_t n = 0;
                for (size_t i = 0; i < len && n < sizeof(shown) - 1; i++)
                        shown[n++] = name[i] >= 0x20 && name[i] < 0x7f && name[i] != '"' ? name[i] : '?';
                shown[n] = 0;
                return err_set(err, -EINVAL, "%s: no user \"%s%s\" in Paddock's sandboxes: E2B's \"user\" (uid 1000, "
                                             "/home/user) and \"root\" are served (or leave it unset)",
                               field, shown, len > n ? "..." : "");
        }
        if (ret)
                *ret = u;
        return 0;
}

/* Who runs the request's commands and owns its files: the user named, else `user` in an E2B
 * sandbox of a template with that account, else root (the Brimble API's sandboxes included).
 * Call after envd_sandbox() accepted the request. */
const struct envd_user *envd_req_user(struct req *r, const struct sandbox *sb) {
        const struct envd_user *u = NULL;
        if (named_user(r, &u, NULL) == 0 && u)
                return u;
        if (sb->e2b.set && sb->template_name)
                for (char **t = r->c->cfg->e2b_user_templates; t && *t; t++)
                        if (!strcmp(*t, sb->template_name))
                                return user_e2b;
        return user_root;
}

/* The operation a signed URL may name for this request: GET /files reads, POST /files writes
 * (envd's two routes that take a signature instead of the token); NULL elsewhere. */
static const char *envd_signed_file_op(const struct req *r) {
        if (strcmp(r->path, "/files"))
                return NULL;
        return !strcmp(r->method, "GET") ? "read" : !strcmp(r->method, "POST") ? "write" : NULL;
}

/* A signed file URL as E2B's SDKs make them (uploadUrl, downloadUrl) and envd checks them:
 * signature = "v1_" + unpadded base64(sha256("<path>:<operation>:<username>:<token>[:<exp>]")),
 * path and username as the query gives them ("" when absent), exp the optional
 * signature_expiration (Unix seconds), past which the URL is refused. 0, or -1 with msg, in
 * envd's own words (its SDK tests compare them). */
static int signed_url_check(const struct ctl *c, struct req *r, char *msg, size_t msglen) {
        const char *sig = req_query(r, "signature"), *exp = req_query(r, "signature_expiration");
        const char *p = req_query(r, "path"), *u = req_query(r, "username");
        int64_t exp_s = 0;
        if (!sig) {
                snprintf(msg, msglen, "missing signature query parameter (or the sandbox's access token in X-Access-Token)");
                return -1;
        }
        if (exp && (safe_atoi64(exp, &exp_s) < 0 || exp_s < 0)) {
                snprintf(msg, msglen, "invalid signature: signature_expiration is not a Unix time in seconds");
                return -1;
        }
        char tok[65];
        e2b_token(c, "envd", r->m.id, tok);
        _cleanup_free_ char *raw = exp ? xasprintf("%s:%s:%s:%s:%" PRId64, p ? p : "", envd_signed_file_op(r), u ? u : "", tok, exp_s)
                                       : xasprintf("%s:%s:%s:%s", p ? p : "", envd_signed_file_op(r), u ? u : "", tok);
        explicit_bzero(tok, sizeof(tok));
        unsigned char md[32];
        SHA256((const unsigned char *) raw, strlen(raw), md);
        explicit_bzero(raw, strlen(raw));
        size_t n = 0;
        _cleanup_free_ char *b64 = base64_encode(md, sizeof(md), &n);
        while (n && b64[n - 1] == '=')
                b64[--n] = 0;
        _cleanup_free_ char *want = xasprintf("v1_%s", b64);
        bool ok = strlen(sig) == strlen(want) && CRYPTO_memcmp(sig, want, strlen(want)) == 0;
        if (!ok) {
                snprintf(msg, msglen, "invalid signature");
                return -1;
        }
        if (exp && exp_s < (int64_t) time(NULL)) {
                snprintf(msg, msglen, "signature is already expired");
                return -1;
        }
        return 0;
}

/* The sandbox of r, checked: token, existence, running, user. Answers the error itself
 * (connect: as a Connect error; else as envd's {code, message}) and returns < 0. */
int envd_sandbox(struct req *r, bool connect, struct sandbox *sb) {
        struct ctl *c = r->c;
        const char *tok = req_header(r, "X-Access-Token");
        int status = 0;
        char msg[256] = "";
        /* as E2B's proxy: a sandbox that is not running answers 502 before any token is read */
        if (!r->m.id[0]) {
                status = 502;
                snprintf(msg, sizeof(msg), "The sandbox was not found");
        } else if (store_sandbox_get(c->store, r->m.id, sb) < 0 || sb->status == SB_DESTROYED || sb->status == SB_FAILED) {
                status = 502;
                snprintf(msg, sizeof(msg), "The sandbox %s was not found (destroyed, or it never existed)", r->m.id);
        } else if (sb->status != SB_READY && !(sb->auto_resume && tok && e2b_token_ok(c, "envd", r->m.id, tok))) {
                status = 502;
                snprintf(msg, sizeof(msg), "The sandbox %s is %s, not running", r->m.id, sb_status_str(sb->status));
        } else if (sb->status == SB_READY && !sandbox_running_now(sb)) {
                status = 502;
                snprintf(msg, sizeof(msg), "The sandbox %s reached its timeout and is ending", r->m.id);
        } else if (!tok && envd_signed_file_op(r)) {
                if (signed_url_check(c, r, msg, sizeof(msg)) < 0)
                        status = 401;
        } else if (!tok) {
                status = 401;
                snprintf(msg, sizeof(msg), "Missing the sandbox's access token (X-Access-Token)");
        } else if (!e2b_token_ok(c, "envd", r->m.id, tok)) {
                status = 401;
                snprintf(msg, sizeof(msg), "The access token is not this sandbox's");
        }
        struct err uerr = { 0 };
        /* paused with autoResume, and the caller holds its token: resumed first (E2B's auto-resume) */
        if (!status && sb->status != SB_READY && sandbox_wake(c, sb, &uerr) <= 0) {
                status = 502;
                snprintf(msg, sizeof(msg), "The sandbox %s could not be resumed: %s", r->m.id,
                         uerr.message[0] ? uerr.message : "it is not paused");
        }
        if (!status && named_user(r, NULL, &uerr) < 0) {
                status = 400;
                snprintf(msg, sizeof(msg), "%s", uerr.message);
        }
        if (!status)
                return 0;
        sandbox_clear(sb);
        if (status == 502) {
                /* E2B's proxy body on every path; the SDKs read a 502 as "the sandbox is gone" */
                cJSON *o = cJSON_CreateObject();
                json_add_str(o, "sandboxId", r->m.id);
                json_add_str(o, "message", msg);
                json_add_int(o, "code", 502);
                respond_json(r, 502, o);
        } else if (connect) {
                enum pj_connect_code code = status == 401 ? PJ_CONNECT_UNAUTHENTICATED : PJ_CONNECT_INVALID_ARGUMENT;
                const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
                if (ct && !strncasecmp(ct, "application/connect+json", 24)) {
                        /* a stream's error is its end-of-stream message (HTTP 200), or the SDKs
                         * see only "HTTP 400" */
                        struct strbuf b;
                        strbuf_init(&b, 0);
                        envd_env_end(&b, code, msg);
                        respond_raw(r, 200, "application/connect+json", b.buf, b.len);
                        strbuf_done(&b);
                } else
                        respond_json(r, pj_connect_code_http(code), envd_connect_error(code, msg));
        } else
                respond_error(r, status, "%s", msg);
        return -EACCES;
}

/* An absolute path: "~" and relative paths are under home. NULL when too long. */
char *envd_resolve(const char *p, const char *home) {
        char *out;
        if (p[0] == '/')
                out = xstrdup(p);
        else if (!strcmp(p, "~"))
                out = xstrdup(home);
        else if (!strncmp(p, "~/", 2))
                out = xasprintf("%s%s", home, p + 1);
        else
                out = xasprintf("%s/%s", home, p);
        if (strlen(out) > 4096) {
                free(out);
                return NULL;
        }
        return out;
}

/* ---- the Connect request ---- */

/* Checks the protocol and finds the message: unary (application/json body) or a stream's
 * single request envelope (application/connect+json). Answers errors itself (< 0). */
int envd_connect_request(struct req *r, bool stream, struct creq *ret) {
        const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE), *enc = req_header(r, stream ? "Connect-Content-Encoding" : "Content-Encoding");
        const char *want = stream ? "application/connect+json" : "application/json";
        *ret = (struct creq) { .keepalive_s = KEEPALIVE_DEFAULT_S };
        if (!ct || strncasecmp(ct, want, strlen(want)) || (ct[strlen(want)] && ct[strlen(want)] != ';')) {
                char msg[160];
                snprintf(msg, sizeof(msg), "Content-Type must be %s: this envd speaks the Connect protocol with the JSON codec",
                         want);
                respond_json(r, 415, envd_connect_error(PJ_CONNECT_UNIMPLEMENTED, msg));
                return -EINVAL;
        }
        if (enc && strcasecmp(enc, "identity")) {
                envd_unary_error(r, PJ_CONNECT_UNIMPLEMENTED, "%s %s is not supported (send it uncompressed)",
                                 stream ? "Connect-Content-Encoding" : "Content-Encoding", enc);
                return -EINVAL;
        }
        const char *to = req_header(r, "Connect-Timeout-Ms"), *ka = req_header(r, "Keepalive-Ping-Interval");
        int64_t v;
        if (to) {
                if (safe_atoi64(to, &v) < 0 || v < 0 || v > 9999999999LL) {
                        envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "Connect-Timeout-Ms must be a whole number of milliseconds");
                        return -EINVAL;
                }
                ret->timeout_ms = v;
        }
        if (ka && safe_atoi64(ka, &v) == 0 && v >= 1 && v <= 3600)
                ret->keepalive_s = (int) v;
        if (!stream) {
                ret->msg = r->body.buf ? r->body.buf : "";
                ret->len = r->body.len;
                return 0;
        }
        uint8_t flags = 0;
        const uint8_t *m = NULL;
        size_t ml = 0, used = 0;
        int k = pj_connect_envelope_decode((const uint8_t *) (r->body.buf ? r->body.buf : ""), r->body.len,
                                           PJ_CONNECT_MAX_MESSAGE, &flags, &m, &ml, &used);
        if (k <= 0 || used != r->body.len || flags) {
                envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s",
                                 k == -EMSGSIZE ? "The request message is larger than the limit (2 MiB)"
                                 : k == -EPROTO ? "Compressed messages are not supported"
                                 : k == 0       ? "The request envelope is truncated"
                                           : "The request must be exactly one message envelope");
                return -EINVAL;
        }
        ret->msg = (const char *) m;
        ret->len = ml;
        return 0;
}

/* ---- streams ---- */

/* One event: a process stream's message is {"event": {...}}; WatchDirResponse has its oneof at
 * the top. */
void envd_s_event(struct cstream *t, cJSON *event) {
        if (t->kind == S_PROCESS) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddItemToObject(o, "event", event);
                event = o;
        }
        envd_env_append(&t->pending, 0, event);
}

static void s_end(struct cstream *t, enum pj_connect_code code, const char *msg) {
        envd_env_end(&t->pending, code, msg);
        t->done = true;
}

static int s_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct cstream *t = ud;
        _cleanup_free_ char *b64 = base64_encode(data, len, NULL);
        cJSON *ev = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(ev, "data");
        json_add_str(d, t->pty ? "pty" : stream == 2 ? "stderr" : "stdout", b64);
        envd_s_event(t, ev);
        return t->pending.len - t->pending_off > PENDING_CAP ? -ENOBUFS : 0;
}

static const char *signal_word(int sig) {
        switch (sig) {
        case SIGKILL: return "killed";
        case SIGTERM: return "terminated";
        case SIGINT: return "interrupt";
        case SIGHUP: return "hangup";
        case SIGPIPE: return "broken pipe";
        case SIGSEGV: return "segmentation fault";
        case SIGABRT: return "aborted";
        default: return NULL;
        }
}

static void s_exit(struct cstream *t) {
        int code = -1, sig = session_term_signal(t->x);
        (void) session_exit_code(t->x, &code);
        cJSON *ev = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(ev, "end");
        char status[64];
        if (!sig) {
                snprintf(status, sizeof(status), "exit status %d", code);
                if (code)
                        json_add_int(e, "exitCode", code);
                json_add_bool(e, "exited", true);
        } else {
                /* as Go's ProcessState says it: exit code -1, "signal: killed" */
                const char *w = signal_word(sig);
                if (w)
                        snprintf(status, sizeof(status), "signal: %s", w);
                else
                        snprintf(status, sizeof(status), "signal: %d", sig);
                json_add_int(e, "exitCode", -1);
        }
        json_add_str(e, "status", status);
        if (sig || code)
                json_add_str(e, "error", status);
        envd_s_event(t, ev);
        s_end(t, 0, NULL);
}

/* The agent's EVENT codes as envd's EventType. */
const char *const envd_event_names[] = { [PJ_AGENT_EV_CREATE] = "EVENT_TYPE_CREATE", [PJ_AGENT_EV_WRITE] = "EVENT_TYPE_WRITE",
                                         [PJ_AGENT_EV_REMOVE] = "EVENT_TYPE_REMOVE", [PJ_AGENT_EV_RENAME] = "EVENT_TYPE_RENAME",
                                         [PJ_AGENT_EV_CHMOD] = "EVENT_TYPE_CHMOD" };

static int watch_event(int event, const char *path, bool dir, void *ud) {
        struct cstream *t = ud;
        (void) dir;
        if (event < 1 || event > PJ_AGENT_EV_CHMOD || !utf8_valid(path, strlen(path)))
                return 0;
        cJSON *ev = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(ev, "filesystem");
        json_add_str(f, "name", path);
        json_add_str(f, "type", envd_event_names[event]);
        /* includeEntry: the entry as it is now, except where it went away (as envd) */
        if (t->entries && event != PJ_AGENT_EV_REMOVE && event != PJ_AGENT_EV_RENAME) {
                cJSON *e = t->entry_of(t->entries, path);
                if (e)
                        cJSON_AddItemToObject(f, "entry", e);
        }
        envd_s_event(t, ev);
        return t->pending.len - t->pending_off > PENDING_CAP ? -ENOBUFS : 0;
}

static void s_keepalive(struct cstream *t) {
        if (t->pending.len != t->pending_off)
                t->last_sent = mono_ms();
        else if (mono_ms() - t->last_sent >= t->keepalive_ms) {
                cJSON *ev = cJSON_CreateObject();
                cJSON_AddObjectToObject(ev, "keepalive");
                envd_s_event(t, ev);
                t->last_sent = mono_ms();
        }
}

/* Processes whose Start deadline outlives the client: killed at it by one thread (a job, so a
 * shutdown waits for it). Bounded per sandbox, never globally, so that no sandbox's deadlines
 * change another's: a sandbox with LATER_PER_SANDBOX waiting has its own new one killed at
 * once. Every LATER_SWEEP_MS the entries of processes that ended, or of sandboxes that ended,
 * are dropped. */
#define LATER_PER_SANDBOX 64
#define LATER_SWEEP_MS 5000
struct later {
        char sandbox[SANDBOX_ID_LEN + 1];
        uint32_t pid;
        int64_t at;
};
static struct later *later;
static size_t n_later, cap_later;
static pthread_mutex_t later_lock = PTHREAD_MUTEX_INITIALIZER;
static bool later_running;

static void kill_one(struct ctl *c, const char *sandbox, uint32_t pid) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err e = { 0 };
        if (store_sandbox_get(c->store, sandbox, &sb) == 0 && sb.status == SB_READY)
                (void) process_signal(c, &sb, pid, SIGKILL, &e);
}

/* Drops the entries whose process no longer runs or whose sandbox ended; the agent asked
 * outside the lock, once per sandbox. */
static void later_sweep(struct ctl *c) {
        size_t n = 0;
        pthread_mutex_lock(&later_lock);
        char (*ids)[SANDBOX_ID_LEN + 1] = xmalloc((n_later + 1) * sizeof(*ids));
        for (size_t i = 0; i < n_later; i++) {
                bool seen = false;
                for (size_t j = 0; j < n && !seen; j++)
                        seen = !strcmp(ids[j], later[i].sandbox);
                if (!seen)
                        memcpy(ids[n++], later[i].sandbox, SANDBOX_ID_LEN + 1);
        }
        pthread_mutex_unlock(&later_lock);
        for (size_t j = 0; j < n && !c->stopping; j++) {
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                struct err e = { 0 };
                struct pj_agent_fields *v = NULL;
                size_t nv = 0;
                bool gone = store_sandbox_get(c->store, ids[j], &sb) < 0 || sb.status == SB_DESTROYED || sb.status == SB_FAILED;
                bool listed = !gone && sb.status == SB_READY && process_list(c, &sb, &v, &nv, &e) == 0;
                if (!gone && !listed)
                        continue;   /* paused, or the agent did not answer: ask again later */
                pthread_mutex_lock(&later_lock);
                for (size_t i = 0; i < n_later;) {
                        bool running = false;
                        for (size_t p = 0; p < nv && !running; p++)
                                running = v[p].pid == later[i].pid && v[p].running;
                        if (!strcmp(later[i].sandbox, ids[j]) && !running)
                                later[i] = later[--n_later];
                        else
                                i++;
                }
                pthread_mutex_unlock(&later_lock);
                for (size_t p = 0; p < nv; p++)
                        pj_agent_fields_done(&v[p]);
                free(v);
        }
        free(ids);
}

static void later_job(struct ctl *c, void *arg) {
        (void) arg;
        int64_t swept = mono_ms();
        for (;;) {
                struct later due = { 0 };
                pthread_mutex_lock(&later_lock);
                if (c->stopping || !n_later) {
                        later_running = false;
                        n_later = 0;
                        pthread_mutex_unlock(&later_lock);
                        return;
                }
                int64_t now = mono_ms();
                for (size_t i = 0; i < n_later; i++)
                        if (later[i].at <= now) {
                                due = later[i];
                                later[i] = later[--n_later];
                                break;
                        }
                pthread_mutex_unlock(&later_lock);
                if (due.pid)
                        kill_one(c, due.sandbox, due.pid);
                else if (now - swept >= LATER_SWEEP_MS) {
                        later_sweep(c);
                        swept = mono_ms();
                } else
                        usleep(100 * 1000);
        }
}

static void kill_later(struct ctl *c, const char *sandbox, uint32_t pid, int64_t at) {
        bool now = false, start = false;
        size_t mine = 0;
        pthread_mutex_lock(&later_lock);
        for (size_t i = 0; i < n_later; i++)
                mine += !strcmp(later[i].sandbox, sandbox);
        if (mine >= LATER_PER_SANDBOX)
                now = true;   /* this sandbox's own limit: nobody else's deadline moves */
        else {
                if (n_later == cap_later) {
                        cap_later = cap_later ? 2 * cap_later : 64;
                        later = xrealloc(later, cap_later * sizeof(*later));
                }
                later[n_later++] = (struct later) { .pid = pid, .at = at };
                snprintf(later[n_later - 1].sandbox, sizeof(later[0].sandbox), "%s", sandbox);
                start = !later_running;
                later_running = true;
        }
        pthread_mutex_unlock(&later_lock);
        if (now) {
                log_info("a process's deadline is not kept: the sandbox has %d waiting; killed now SANDBOX_ID=%s",
                         LATER_PER_SANDBOX, sandbox);
                kill_one(c, sandbox, pid);
        }
        if (start && ctl_spawn_job(c, later_job, NULL) < 0) {
                pthread_mutex_lock(&later_lock);
                later_running = false;
                pthread_mutex_unlock(&later_lock);
        }
}

/* The agent went away under a stream: if the sandbox no longer runs (killed, timed out, paused),
 * the connection is dropped once what is pending is sent, as E2B's proxy drops it when a
 * sandbox dies; the SDKs then ask /health (502) and raise their "sandbox was killed" error. A
 * kill's record is written after its agent ends (on Nomad after the node agent dropped its
 * rules too): asked once the operation under way on the sandbox is done, then for up to 2 s
 * (a workload that died by itself is recorded by the reaper). */
static bool s_sandbox_gone(struct cstream *t) {
        enum sb_status st = SB_READY;
        if (sandbox_status_settled(t->c, t->sandbox, &st) < 0 || st != SB_READY)
                return true;
        for (int i = 0; i < 20; i++) {
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                if (store_sandbox_get(t->c->store, t->sandbox, &sb) < 0 || sb.status != SB_READY)
                        return true;
                if (i < 19)
                        usleep(100 * 1000);
        }
        return false;
}

static ssize_t s_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        struct cstream *t = cls;
        (void) pos;
        for (;;) {
                ssize_t got = sse_pending(&t->pending, &t->pending_off, t->done, buf, max);
                if (got)
                        return got;
                if (t->drop)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (t->c->stopping) {
                        s_end(t, PJ_CONNECT_UNAVAILABLE, "controld is shutting down; the process keeps running: reconnect");
                        continue;
                }
                int64_t now = mono_ms();
                if (t->deadline && now >= t->deadline) {
                        if (t->kill_at_deadline)
                                (void) session_signal(t->x, SIGKILL);   /* envd: Start's timeout ends the process */
                        s_end(t, PJ_CONNECT_DEADLINE_EXCEEDED, "The request's deadline (Connect-Timeout-Ms) passed");
                        continue;
                }
                int wait = 1000;
                if (t->deadline && t->deadline - now < wait)
                        wait = (int) (t->deadline - now);
                int k = t->kind == S_PROCESS ? session_read(t->x, wait, t->client_fd, s_output, t)
                                             : dirwatch_read(t->w, wait, t->client_fd, watch_event, t);
                if (k == -ECONNRESET) {
                        /* the client went; Start's timeout still ends the process at its time */
                        if (t->kill_at_deadline && t->deadline && !session_term_signal(t->x))
                                kill_later(t->c, t->sandbox, session_pid(t->x), t->deadline);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (k < 0 && k != -ENOBUFS) {
                        if (s_sandbox_gone(t))
                                t->drop = true;
                        else
                                s_end(t, PJ_CONNECT_UNAVAILABLE, "Lost the connection to the sandbox's agent");
                        continue;
                }
                if (k == 1) {
                        if (t->kind == S_WATCH)
                                s_end(t, dirwatch_truncated(t->w) ? PJ_CONNECT_DATA_LOSS : 0,
                                      "Events were lost (the watcher fell behind): list the directory again");
                        else if (session_lost(t->x) && s_sandbox_gone(t))
                                t->drop = true;
                        else if (session_lost(t->x))
                                s_end(t, PJ_CONNECT_UNAVAILABLE,
                                      "The sandbox's agent went away (the sandbox stopped, or another client connected to "
                                      "this process)");
                        else
                                s_exit(t);
                        continue;
                }
                s_keepalive(t);
        }
}

void envd_s_free(void *cls) {
        struct cstream *t = cls;
        if (t->counted)
                sse_stream_count(t->c, -1);
        session_free(t->x);   /* detaches: the process keeps running */
        dirwatch_free(t->w);
        if (t->entries)
                t->entries_free(t->entries);
        strbuf_done(&t->pending);
        free(t);
}

struct cstream *envd_s_new(struct req *r, enum skind kind, const struct creq *q) {
        struct cstream *t = xnew0(struct cstream, 1);
        t->c = r->c;
        t->kind = kind;
        strbuf_init(&t->pending, 0);
        t->keepalive_ms = (int64_t) q->keepalive_s * 1000;
        if (q->timeout_ms)
                t->deadline = mono_ms() + q->timeout_ms;
        return t;
}

enum MHD_Result envd_s_respond(struct req *r, struct cstream *t) {
        (void) MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        t->client_fd = ci ? ci->connect_fd : -1;
        t->last_sent = mono_ms();
        sse_stream_count(r->c, +1);
        t->counted = true;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, s_reader, t, envd_s_free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        return respond_response(r, 200, resp);
}

/* A stream that ends at once with an error (Connect streams answer 200 and say it at the end). */
enum MHD_Result envd_s_fail(struct req *r, enum pj_connect_code code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        struct strbuf b;
        strbuf_init(&b, 0);
        envd_env_end(&b, code, msg);
        enum MHD_Result res = respond_raw(r, 200, "application/connect+json", b.buf, b.len);
        strbuf_done(&b);
        return res;
}
