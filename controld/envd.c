/* envd.c — envd's surface (E2B's in-sandbox daemon, port 49983), served by controld over the
 * sandbox's agent: the Connect protocol with the JSON codec for process.Process and
 * filesystem.Filesystem (unary calls and server streams), and HTTP /files, /health, /envs.
 *
 * A request reaches here through e2b.c (E2b-Sandbox-Id or Host 49983-<id>.<domain>). It must
 * carry the sandbox's access token (X-Access-Token, compared in constant time); the sandbox
 * must be running. Commands, files and terminals are E2B's `user` (uid 1000, HOME /home/user) or
 * root (HOME /root), as the request names them; unnamed, `user` in E2B sandboxes of a template
 * with that account ([e2b] user_templates), root elsewhere. The home is where relative paths
 * start. Everything the agent says is bounded by its codec; every wait here has a deadline. */
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "agent-exec.h"
#include "agent.h"
#include "cleanup.h"
#include "controld.h"
#include "e2b.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_e2b.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "process.h"
#include "strutil.h"

#define FS_TIMEOUT_MS 15000
#define PENDING_CAP ((size_t) 1 << 20)
#define LISTDIR_MAX 65536
#define KEEPALIVE_DEFAULT_S 90

/* ---- tokens: derived, never stored ---- */

void e2b_token(const struct ctl *c, const char *kind, const char *sandbox_id, char out[65]) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        _cleanup_free_ char *msg = xasprintf("paddock-e2b-%s:%s", kind, sandbox_id);
        HMAC(EVP_sha256(), c->agent_key, (int) strlen(c->agent_key), (const unsigned char *) msg, strlen(msg), mac, &len);
        for (unsigned i = 0; i < 32; i++)
                snprintf(out + 2 * i, 3, "%02x", mac[i]);
        out[64] = 0;
        explicit_bzero(mac, sizeof(mac));
}

bool e2b_token_ok(const struct ctl *c, const char *kind, const char *sandbox_id, const char *got) {
        char want[65];
        e2b_token(c, kind, sandbox_id, want);
        bool ok = got && strlen(got) == 64 && CRYPTO_memcmp(want, got, 64) == 0;
        explicit_bzero(want, sizeof(want));
        return ok;
}

/* ---- what List reports of a process: remembered at Start (the agent keeps no argv) ----
 *
 * Per sandbox, never global: one sandbox's starts can evict only its own records. A sandbox
 * keeps at most KEPT_PER_SANDBOX records and KEPT_BYTES_PER_SANDBOX of config text (its
 * oldest go first); records of processes the agent no longer lists are dropped at List, and
 * those of sandboxes that ended by the sweep (kept_sweep). */

#define KEPT_PER_SANDBOX PJ_AGENT_MAX_PROCS
#define KEPT_BYTES_PER_SANDBOX (1024 * 1024)
/* What one record may hold. */
#define KEPT_CONFIG_MAX (16 * 1024)
#define KEPT_SWEEP_EVERY 64              /* puts between sweeps for sandboxes that ended */

struct kept {
        char sandbox[SANDBOX_ID_LEN + 1];
        uint32_t pid;
        bool pty;
        uint64_t seq;                    /* order of the puts: the oldest is evicted first */
        char *config;                    /* ProcessConfig as JSON text */
};
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kept *kept;
static size_t n_kept, cap_kept;
static uint64_t kept_seq;

static void kept_drop_at(size_t i) {
        free(kept[i].config);
        kept[i] = kept[--n_kept];
}

/* Drops the records of sandbox put up to max_seq; with keep_listed, only those whose pid is
 * not among pids (n). Called with kept_lock held. */
static void kept_drop_locked(const char *sandbox, const uint32_t *pids, size_t n, bool keep_listed, uint64_t max_seq) {
        for (size_t i = 0; i < n_kept;) {
                bool listed = false;
                for (size_t j = 0; keep_listed && j < n && !listed; j++)
                        listed = kept[i].pid == pids[j];
                if (!strcmp(kept[i].sandbox, sandbox) && !listed && kept[i].seq <= max_seq)
                        kept_drop_at(i);
                else
                        i++;
        }
}

/* The sandboxes with records, each checked against the store outside the lock: the records
 * of those that ended go. Bounded by the records there are. */
static void kept_sweep(struct ctl *c) {
        size_t n = 0;
        char (*ids)[SANDBOX_ID_LEN + 1] = NULL;
        pthread_mutex_lock(&kept_lock);
        ids = xmalloc((n_kept + 1) * sizeof(*ids));
        for (size_t i = 0; i < n_kept; i++) {
                bool seen = false;
                for (size_t j = 0; j < n && !seen; j++)
                        seen = !strcmp(ids[j], kept[i].sandbox);
                if (!seen)
                        memcpy(ids[n++], kept[i].sandbox, SANDBOX_ID_LEN + 1);
        }
        pthread_mutex_unlock(&kept_lock);
        for (size_t j = 0; j < n; j++) {
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                if (store_sandbox_get(c->store, ids[j], &sb) == 0 && sb.status != SB_DESTROYED && sb.status != SB_FAILED)
                        continue;
                pthread_mutex_lock(&kept_lock);
                kept_drop_locked(ids[j], NULL, 0, false, UINT64_MAX);
                pthread_mutex_unlock(&kept_lock);
        }
        free(ids);
}

static void kept_put(struct ctl *c, const char *sandbox, uint32_t pid, bool pty, cJSON *config) {
        char *text = json_print(config);
        if (strlen(text) > KEPT_CONFIG_MAX) {
                /* too large to keep whole: the command alone, cut, and no args or envs */
                free(text);
                const char *cmd = cJSON_GetStringValue(cJSON_GetObjectItem(config, "cmd"));
                cJSON *small = cJSON_CreateObject();
                _cleanup_free_ char *cut = xstrndup(cmd ? cmd : "", 1024);
                json_add_str(small, "cmd", utf8_valid(cut, strlen(cut)) ? cut : "");
                text = json_print(small);
                cJSON_Delete(small);
        }
        bool sweep;
        pthread_mutex_lock(&kept_lock);
        /* a pid the agent used again replaces its old record */
        for (size_t i = 0; i < n_kept; i++)
                if (kept[i].pid == pid && !strcmp(kept[i].sandbox, sandbox)) {
                        kept_drop_at(i);
                        break;
                }
        /* this sandbox's own oldest make room; nobody else's */
        for (;;) {
                size_t mine = 0, bytes = strlen(text), oldest = SIZE_MAX;
                for (size_t i = 0; i < n_kept; i++)
                        if (!strcmp(kept[i].sandbox, sandbox)) {
                                mine++;
                                bytes += strlen(kept[i].config);
                                if (oldest == SIZE_MAX || kept[i].seq < kept[oldest].seq)
                                        oldest = i;
                        }
                if (oldest == SIZE_MAX || (mine < KEPT_PER_SANDBOX && bytes <= KEPT_BYTES_PER_SANDBOX))
                        break;
                kept_drop_at(oldest);
        }
        if (n_kept == cap_kept) {
                cap_kept = cap_kept ? 2 * cap_kept : 64;
                kept = xrealloc(kept, cap_kept * sizeof(*kept));
        }
        struct kept *k = &kept[n_kept++];
        *k = (struct kept) { .pid = pid, .pty = pty, .seq = ++kept_seq, .config = text };
        snprintf(k->sandbox, sizeof(k->sandbox), "%s", sandbox);
        sweep = kept_seq % KEPT_SWEEP_EVERY == 0;
        pthread_mutex_unlock(&kept_lock);
        if (sweep)
                kept_sweep(c);
}

/* The record of (sandbox, pid): whether there is one, its pty flag and, when asked, its
 * config (parsed, the caller's). */
static bool kept_get(const char *sandbox, uint32_t pid, bool *ret_pty, cJSON **ret_config) {
        bool found = false;
        *ret_pty = false;
        pthread_mutex_lock(&kept_lock);
        for (size_t i = 0; i < n_kept && !found; i++) {
                struct kept *k = &kept[i];
                if (k->pid == pid && !strcmp(k->sandbox, sandbox)) {
                        found = true;
                        *ret_pty = k->pty;
                        if (ret_config)
                                *ret_config = cJSON_Parse(k->config);
                }
        }
        pthread_mutex_unlock(&kept_lock);
        return found;
}

/* ---- answers ---- */

static enum pj_connect_code code_of(int err) {
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

static cJSON *connect_error(enum pj_connect_code code, const char *msg) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "code", pj_connect_code_name(code));
        json_add_str(o, "message", msg);
        return o;
}

static enum MHD_Result unary_error(struct req *r, enum pj_connect_code code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static enum MHD_Result unary_error(struct req *r, enum pj_connect_code code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return respond_json(r, pj_connect_code_http(code), connect_error(code, msg));
}

static enum MHD_Result unary_ok(struct req *r, cJSON *o) {
        char *s = json_print(o);
        cJSON_Delete(o);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(strlen(s), s, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return respond_response(r, 200, resp);
}

/* One stream's frames; a finished stream ends with the end-of-stream envelope. */
static void env_append(struct strbuf *b, uint8_t flags, cJSON *o) {
        _cleanup_free_ char *s = json_print(o);
        cJSON_Delete(o);
        uint8_t h[5];
        pj_connect_envelope_header(h, flags, (uint32_t) strlen(s));
        strbuf_append(b, h, 5);
        strbuf_append(b, s, strlen(s));
}

static void env_end(struct strbuf *b, enum pj_connect_code code, const char *msg) {
        cJSON *o = cJSON_CreateObject();
        if (code)
                cJSON_AddItemToObject(o, "error", connect_error(code, msg));
        env_append(b, PJ_CONNECT_FLAG_END, o);
}

/* ---- the request's sandbox ---- */

/* E2B's users, with fixed ids: what a sandbox's /etc/passwd says is never asked (E2B's `base`
 * has `user` as 1000:1000). Any other name is refused. */
struct envd_user {
        const char *name;
        uint32_t uid, gid;
        const char *home;
};
static const struct envd_user users[] = {
        { "root", 0, 0, "/root" },
        { "user", 1000, 1000, "/home/user" },
};
static const struct envd_user *const user_root = &users[0], *const user_e2b = &users[1];

static const struct envd_user *user_by_name(const char *name, size_t len) {
        for (size_t i = 0; i < ELEMENTSOF(users); i++)
                if (strlen(users[i].name) == len && !memcmp(users[i].name, name, len))
                        return &users[i];
        return NULL;
}

/* The user the request names: Authorization: Basic base64("<user>:") (the SDKs' `user`), else
 * ?username= (signed file URLs). *ret NULL: none named. < 0: a name not served, msg says so. */
static int named_user(struct req *r, const struct envd_user **ret, char *msg, size_t msglen) {
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
                if (strlen(b) > 512 || base64_decode_flags(b, strlen(b), BASE64_PAD_OPTIONAL, &d, &dl) < 0) {
                        snprintf(msg, msglen, "user: the Authorization header is not Basic base64(\"<user>:\")");
                        return -EINVAL;
                }
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
                snprintf(msg, msglen, "%s: no user \"%s%s\" in Paddock's sandboxes: E2B's \"user\" (uid 1000, /home/user) "
                         "and \"root\" are served (or leave it unset)", field, shown, len > n ? "..." : "");
                return -EINVAL;
        }
        if (ret)
                *ret = u;
        return 0;
}

/* Who runs the request's commands and owns its files: the user named, else `user` in an E2B
 * sandbox of a template with that account, else root (the Brimble API's sandboxes included).
 * Call after envd_sandbox() accepted the request. */
static const struct envd_user *req_user(struct req *r, const struct sandbox *sb) {
        const struct envd_user *u = NULL;
        char msg[256];
        if (named_user(r, &u, msg, sizeof(msg)) == 0 && u)
                return u;
        if (sb->e2b && sb->template_name)
                for (char **t = r->c->cfg->e2b_user_templates; t && *t; t++)
                        if (!strcmp(*t, sb->template_name))
                                return user_e2b;
        return user_root;
}

/* The sandbox of r, checked: token, existence, running, user. Answers the error itself
 * (connect: as a Connect error; else as envd's {code, message}) and returns < 0. */
static int envd_sandbox(struct req *r, bool connect, struct sandbox *sb) {
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
        } else if (sb->status != SB_READY) {
                status = 502;
                snprintf(msg, sizeof(msg), "The sandbox %s is %s, not running", r->m.id, sb_status_str(sb->status));
        } else if (!tok) {
                status = 401;
                snprintf(msg, sizeof(msg), "Missing the sandbox's access token (X-Access-Token)");
        } else if (!e2b_token_ok(c, "envd", r->m.id, tok)) {
                status = 401;
                snprintf(msg, sizeof(msg), "The access token is not this sandbox's");
        }
        if (!status && named_user(r, NULL, msg, sizeof(msg)) < 0)
                status = 400;
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
                        env_end(&b, code, msg);
                        respond_raw(r, 200, "application/connect+json", b.buf, b.len);
                        strbuf_done(&b);
                } else
                        respond_json(r, pj_connect_code_http(code), connect_error(code, msg));
        } else
                respond_error(r, status, "%s", msg);
        return -EACCES;
}

/* An absolute path: "~" and relative paths are under home. NULL when too long. */
static char *resolve(const char *p, const char *home) {
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

struct creq {
        const char *msg;
        size_t len;
        int64_t timeout_ms;              /* Connect-Timeout-Ms; 0 none */
        int keepalive_s;
};

/* Checks the protocol and finds the message: unary (application/json body) or a stream's
 * single request envelope (application/connect+json). Answers errors itself (< 0). */
static int connect_request(struct req *r, bool stream, struct creq *ret) {
        const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE), *enc = req_header(r, stream ? "Connect-Content-Encoding" : "Content-Encoding");
        const char *want = stream ? "application/connect+json" : "application/json";
        *ret = (struct creq) { .keepalive_s = KEEPALIVE_DEFAULT_S };
        if (!ct || strncasecmp(ct, want, strlen(want)) || (ct[strlen(want)] && ct[strlen(want)] != ';')) {
                char msg[160];
                snprintf(msg, sizeof(msg), "Content-Type must be %s: this envd speaks the Connect protocol with the JSON codec",
                         want);
                respond_json(r, 415, connect_error(PJ_CONNECT_UNIMPLEMENTED, msg));
                return -EINVAL;
        }
        if (enc && strcasecmp(enc, "identity")) {
                unary_error(r, PJ_CONNECT_UNIMPLEMENTED, "%s %s is not supported (send it uncompressed)",
                            stream ? "Connect-Content-Encoding" : "Content-Encoding", enc);
                return -EINVAL;
        }
        const char *to = req_header(r, "Connect-Timeout-Ms"), *ka = req_header(r, "Keepalive-Ping-Interval");
        int64_t v;
        if (to) {
                if (safe_atoi64(to, &v) < 0 || v < 0 || v > 9999999999LL) {
                        unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "Connect-Timeout-Ms must be a whole number of milliseconds");
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
                unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s",
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

enum skind { S_PROCESS, S_WATCH };

struct cstream {
        struct ctl *c;
        enum skind kind;
        struct agent_exec *x;
        struct agent_watch *w;
        bool pty, kill_at_deadline;
        char sandbox[SANDBOX_ID_LEN + 1];
        struct strbuf pending;
        size_t pending_off;
        bool done, counted;
        bool drop;                       /* once pending is sent: drop the connection (sandbox gone) */
        int client_fd;
        int64_t last_sent, deadline, keepalive_ms;
};

/* One event: a process stream's message is {"event": {...}}; WatchDirResponse has its oneof at
 * the top. */
static void s_event(struct cstream *t, cJSON *event) {
        if (t->kind == S_PROCESS) {
                cJSON *o = cJSON_CreateObject();
                cJSON_AddItemToObject(o, "event", event);
                event = o;
        }
        env_append(&t->pending, 0, event);
}

static void s_end(struct cstream *t, enum pj_connect_code code, const char *msg) {
        env_end(&t->pending, code, msg);
        t->done = true;
}

static int s_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct cstream *t = ud;
        _cleanup_free_ char *b64 = base64_encode(data, len, NULL);
        cJSON *ev = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(ev, "data");
        json_add_str(d, t->pty ? "pty" : stream == 2 ? "stderr" : "stdout", b64);
        s_event(t, ev);
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
        int code = -1, sig = agent_exec_term_signal(t->x);
        (void) agent_exec_exit_code(t->x, &code);
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
        s_event(t, ev);
        s_end(t, 0, NULL);
}

/* The agent's EVENT codes as envd's EventType. */
static const char *const event_names[] = { [PJ_AGENT_EV_CREATE] = "EVENT_TYPE_CREATE", [PJ_AGENT_EV_WRITE] = "EVENT_TYPE_WRITE",
                                           [PJ_AGENT_EV_REMOVE] = "EVENT_TYPE_REMOVE", [PJ_AGENT_EV_RENAME] = "EVENT_TYPE_RENAME",
                                           [PJ_AGENT_EV_CHMOD] = "EVENT_TYPE_CHMOD" };

static int watch_event(int event, const char *path, bool dir, void *ud) {
        struct cstream *t = ud;
        (void) dir;
        if (event < 1 || event > PJ_AGENT_EV_CHMOD || !utf8_valid(path, strlen(path)))
                return 0;
        cJSON *ev = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(ev, "filesystem");
        json_add_str(f, "name", path);
        json_add_str(f, "type", event_names[event]);
        s_event(t, ev);
        return t->pending.len - t->pending_off > PENDING_CAP ? -ENOBUFS : 0;
}

static void s_keepalive(struct cstream *t) {
        if (t->pending.len != t->pending_off)
                t->last_sent = mono_ms();
        else if (mono_ms() - t->last_sent >= t->keepalive_ms) {
                cJSON *ev = cJSON_CreateObject();
                cJSON_AddObjectToObject(ev, "keepalive");
                s_event(t, ev);
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
        struct api_error e = { 0 };
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
                struct api_error e = { 0 };
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
 * kill's record may lag its agent's end by a moment: asked for up to 2 s. */
static bool s_sandbox_gone(struct cstream *t) {
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
                                (void) agent_exec_signal(t->x, SIGKILL);   /* envd: Start's timeout ends the process */
                        s_end(t, PJ_CONNECT_DEADLINE_EXCEEDED, "The request's deadline (Connect-Timeout-Ms) passed");
                        continue;
                }
                int wait = 1000;
                if (t->deadline && t->deadline - now < wait)
                        wait = (int) (t->deadline - now);
                int k = t->kind == S_PROCESS ? agent_exec_read(t->x, wait, t->client_fd, s_output, t)
                                             : agent_watch_read(t->w, wait, t->client_fd, watch_event, t);
                if (k == -ECONNRESET) {
                        /* the client went; Start's timeout still ends the process at its time */
                        if (t->kill_at_deadline && t->deadline && !agent_exec_term_signal(t->x))
                                kill_later(t->c, t->sandbox, (uint32_t) agent_exec_pid(t->x), t->deadline);
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
                                s_end(t, agent_watch_truncated(t->w) ? PJ_CONNECT_DATA_LOSS : 0,
                                      "Events were lost (the watcher fell behind): list the directory again");
                        else if (agent_exec_lost(t->x) && s_sandbox_gone(t))
                                t->drop = true;
                        else if (agent_exec_lost(t->x))
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

static void s_free(void *cls) {
        struct cstream *t = cls;
        if (t->counted)
                sse_stream_count(t->c, -1);
        agent_exec_free(t->x);   /* detaches: the process keeps running */
        agent_watch_free(t->w);
        strbuf_done(&t->pending);
        free(t);
}

static struct cstream *s_new(struct req *r, enum skind kind, const struct creq *q) {
        struct cstream *t = xnew0(struct cstream, 1);
        t->c = r->c;
        t->kind = kind;
        strbuf_init(&t->pending, 0);
        t->keepalive_ms = (int64_t) q->keepalive_s * 1000;
        if (q->timeout_ms)
                t->deadline = mono_ms() + q->timeout_ms;
        return t;
}

static enum MHD_Result s_respond(struct req *r, struct cstream *t) {
        (void) MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        t->client_fd = ci ? ci->connect_fd : -1;
        t->last_sent = mono_ms();
        sse_stream_count(r->c, +1);
        t->counted = true;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, s_reader, t, s_free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/connect+json");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        return respond_response(r, 200, resp);
}

/* A stream that ends at once with an error (Connect streams answer 200 and say it at the end). */
static enum MHD_Result s_fail(struct req *r, enum pj_connect_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static enum MHD_Result s_fail(struct req *r, enum pj_connect_code code, const char *fmt, ...) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        struct strbuf b;
        strbuf_init(&b, 0);
        env_end(&b, code, msg);
        enum MHD_Result res = respond_raw(r, 200, "application/connect+json", b.buf, b.len);
        strbuf_done(&b);
        return res;
}

/* ---- process.Process ---- */

/* The pid a selector names: by pid as given, by tag the running process with it. */
static int select_pid(struct ctl *c, const struct sandbox *sb, const struct pj_envd_selector *s, uint32_t *ret,
                      struct api_error *e) {
        if (s->pid) {
                *ret = s->pid;
                return 0;
        }
        struct pj_agent_fields *v = NULL;
        size_t n = 0;
        int k = process_list(c, sb, &v, &n, e);
        if (k < 0)
                return k;
        uint32_t pid = 0;
        for (size_t i = 0; i < n; i++) {
                if (!pid && v[i].running && v[i].tag && !strcmp(v[i].tag, s->tag))
                        pid = v[i].pid;
                pj_agent_fields_done(&v[i]);
        }
        free(v);
        if (!pid)
                return API_ERR(e, -ENOENT, "No running process with tag \"%s\"", s->tag);
        *ret = pid;
        return 0;
}

static enum MHD_Result p_start(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_start_done) struct pj_envd_start in = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        if (connect_request(r, true, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_start_parse(q.msg, q.len, &in, &pe) < 0)
                return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        const struct envd_user *user = req_user(r, &sb);
        _cleanup_free_ char *cwd = resolve(in.cwd ? in.cwd : user->home, user->home);
        if (!cwd)
                return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "process.cwd is too long");
        /* argv: cmd then args; env: HOME, USER, LOGNAME and the request's (the sandbox's own
         * under them) */
        _cleanup_free_ const char **argv = xnew0(const char *, in.n_args + 2);
        argv[0] = in.cmd;
        for (size_t i = 0; i < in.n_args; i++)
                argv[i + 1] = in.args[i];
        _cleanup_strv_free_ char **env = xnew0(char *, in.n_env + 4);
        size_t ne = 0;
        bool has_home = false, has_user = false, has_logname = false;
        for (size_t i = 0; i < in.n_env; i++) {
                has_home |= !strcmp(in.env_keys[i], "HOME");
                has_user |= !strcmp(in.env_keys[i], "USER");
                has_logname |= !strcmp(in.env_keys[i], "LOGNAME");
                env[ne++] = xasprintf("%s=%s", in.env_keys[i], in.env_values[i]);
        }
        if (!has_home)
                env[ne++] = xasprintf("HOME=%s", user->home);
        if (!has_user)
                env[ne++] = xasprintf("USER=%s", user->name);
        if (!has_logname)
                env[ne++] = xasprintf("LOGNAME=%s", user->name);
        struct process_spec spec = { .argv = argv, .env = env, .cwd = cwd, .tag = in.tag, .stdin_open = in.stdin_open,
                                     .rows = (int) in.rows, .cols = (int) in.cols,
                                     .as_ids = user->uid != 0, .uid = user->uid, .gid = user->gid };
        struct cstream *t = s_new(r, S_PROCESS, &q);
        t->pty = in.pty;
        t->kill_at_deadline = true;
        snprintf(t->sandbox, sizeof(t->sandbox), "%s", sb.id);
        int k = process_start_session(r->c, &sb, &spec, &t->x, &e);
        if (k < 0) {
                s_free(t);
                return s_fail(r, code_of(k), "%s", e.message);
        }
        uint32_t pid = (uint32_t) agent_exec_pid(t->x);
        /* what List reports of it */
        cJSON *cfg = cJSON_CreateObject();
        json_add_str(cfg, "cmd", in.cmd);
        cJSON *a = cJSON_AddArrayToObject(cfg, "args");
        for (size_t i = 0; i < in.n_args; i++)
                cJSON_AddItemToArray(a, cJSON_CreateString(in.args[i]));
        cJSON *ev = cJSON_AddObjectToObject(cfg, "envs");
        for (size_t i = 0; i < in.n_env; i++)
                json_add_str(ev, in.env_keys[i], in.env_values[i]);
        json_add_str(cfg, "cwd", cwd);
        kept_put(r->c, sb.id, pid, in.pty, cfg);
        cJSON_Delete(cfg);
        cJSON *start = cJSON_CreateObject(), *s = cJSON_AddObjectToObject(start, "start");
        json_add_int(s, "pid", pid);
        s_event(t, start);
        return s_respond(r, t);
}

static enum MHD_Result p_connect(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector in = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        uint32_t pid = 0;
        if (connect_request(r, true, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_selector_parse(q.msg, q.len, &in, &pe) < 0)
                return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        int k = select_pid(r->c, &sb, &in, &pid, &e);
        if (k < 0)
                return s_fail(r, code_of(k), "%s", e.message);
        struct cstream *t = s_new(r, S_PROCESS, &q);
        (void) kept_get(sb.id, pid, &t->pty, NULL);
        /* Connect's deadline ends this stream, not the process (kill_at_deadline stays false) */
        k = process_attach(r->c, &sb, pid, &t->x, &e);
        if (k < 0) {
                s_free(t);
                return s_fail(r, code_of(k), "%s", e.message);
        }
        cJSON *start = cJSON_CreateObject(), *s = cJSON_AddObjectToObject(start, "start");
        json_add_int(s, "pid", pid);
        s_event(t, start);
        return s_respond(r, t);
}

static enum MHD_Result p_list(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        if (connect_request(r, false, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_empty_parse(q.msg, q.len, &pe) < 0)
                return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        struct pj_agent_fields *v = NULL;
        size_t n = 0;
        pthread_mutex_lock(&kept_lock);
        uint64_t before = kept_seq;
        pthread_mutex_unlock(&kept_lock);
        int k = process_list(r->c, &sb, &v, &n, &e);
        if (k < 0)
                return unary_error(r, code_of(k), "%s", e.message);
        /* records of processes the agent no longer lists go (not those put meanwhile) */
        _cleanup_free_ uint32_t *pids = xnew0(uint32_t, n + 1);
        for (size_t i = 0; i < n; i++)
                pids[i] = v[i].pid;
        pthread_mutex_lock(&kept_lock);
        kept_drop_locked(sb.id, pids, n, true, before);
        pthread_mutex_unlock(&kept_lock);
        /* bounded: at most PJ_AGENT_MAX_PROCS entries, their configs at most
         * KEPT_BYTES_PER_SANDBOX together, tags at most PJ_AGENT_MAX_TAG each */
        cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "processes");
        for (size_t i = 0; i < n; i++) {
                if (v[i].running) {
                        bool pty;
                        cJSON *p = cJSON_CreateObject(), *cfg = NULL;
                        if (!kept_get(sb.id, v[i].pid, &pty, &cfg) || !cfg) {
                                cfg = cJSON_CreateObject();
                                json_add_str(cfg, "cmd", "");
                        }
                        cJSON_AddItemToObject(p, "config", cfg);
                        json_add_int(p, "pid", v[i].pid);
                        if (v[i].tag && *v[i].tag)
                                json_add_str(p, "tag", v[i].tag);
                        cJSON_AddItemToArray(a, p);
                }
                pj_agent_fields_done(&v[i]);
        }
        free(v);
        return unary_ok(r, o);
}

/* The unary calls on one process (SendInput, SendSignal, CloseStdin, Update): the request, the
 * sandbox, the message, the pid its selector names, then the call. */
enum pcall { PC_INPUT, PC_SIGNAL, PC_CLOSE_STDIN, PC_UPDATE };

static enum MHD_Result p_unary(struct req *r, enum pcall what) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_input_done) struct pj_envd_input in = { 0 };   /* .process for all; the data for SendInput */
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        uint32_t pid = 0, rows = 0, cols = 0;
        int sig = 0, k = 0;
        if (connect_request(r, false, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        switch (what) {
        case PC_INPUT: k = pj_envd_input_parse(q.msg, q.len, &in, &pe); break;
        case PC_SIGNAL: k = pj_envd_signal_parse(q.msg, q.len, &in.process, &sig, &pe); break;
        case PC_CLOSE_STDIN: k = pj_envd_selector_parse(q.msg, q.len, &in.process, &pe); break;
        case PC_UPDATE: k = pj_envd_update_parse(q.msg, q.len, &in.process, &rows, &cols, &pe); break;
        }
        if (k < 0)
                return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        k = select_pid(r->c, &sb, &in.process, &pid, &e);
        if (k >= 0) {
                switch (what) {
                case PC_INPUT: k = process_stdin(r->c, &sb, pid, (const char *) in.data, in.len, false, &e); break;
                case PC_SIGNAL: k = process_signal(r->c, &sb, pid, sig, &e); break;
                case PC_CLOSE_STDIN: k = process_stdin(r->c, &sb, pid, NULL, 0, true, &e); break;
                case PC_UPDATE: k = rows ? process_resize(r->c, &sb, pid, (int) rows, (int) cols, &e) : 0; break;
                }
        }
        if (k < 0)
                return unary_error(r, code_of(k), "%s", e.message);
        return unary_ok(r, cJSON_CreateObject());
}

static enum MHD_Result p_input(struct req *r) { return p_unary(r, PC_INPUT); }
static enum MHD_Result p_signal(struct req *r) { return p_unary(r, PC_SIGNAL); }
static enum MHD_Result p_close_stdin(struct req *r) { return p_unary(r, PC_CLOSE_STDIN); }
static enum MHD_Result p_update(struct req *r) { return p_unary(r, PC_UPDATE); }

/* StreamInput (client streaming): the request body is a stream of envelopes, start first, then
 * data and keepalives; each data goes to the process's stdin in order. The body is read whole
 * before this runs (bounded by [server] max_body), so input arrives when the request ends; the
 * SDKs use SendInput. The answer: one empty message, then the end of the stream. */
static enum MHD_Result p_stream_input(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!ct || strncasecmp(ct, "application/connect+json", 24))
                return respond_json(r, 415, connect_error(PJ_CONNECT_UNIMPLEMENTED, "Content-Type must be application/connect+json"));
        if (envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        const uint8_t *p = (const uint8_t *) (r->body.buf ? r->body.buf : "");
        size_t left = r->body.len;
        uint32_t pid = 0;
        for (size_t n = 0; left; n++) {
                uint8_t flags = 0;
                const uint8_t *m = NULL;
                size_t ml = 0, used = 0;
                int k = pj_connect_envelope_decode(p, left, PJ_CONNECT_MAX_MESSAGE, &flags, &m, &ml, &used);
                if (k <= 0)
                        return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "message %zu: %s", n,
                                      k == -EMSGSIZE ? "larger than the limit (2 MiB)" : k == -EPROTO ? "compressed" : "truncated");
                p += used;
                left -= used;
                enum pj_envd_stream_kind kind = 0;
                _cleanup_(pj_envd_input_done) struct pj_envd_input in = { 0 };
                struct pj_error pe = { 0 };
                if (pj_envd_stream_input_parse((const char *) m, ml, &kind, &in, &pe) < 0)
                        return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "message %zu: %s", n, pe.message);
                if ((kind == PJ_ENVD_STREAM_START) != (n == 0))
                        return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "message %zu: the first message, and only it, is start", n);
                if (kind == PJ_ENVD_STREAM_START)
                        k = select_pid(r->c, &sb, &in.process, &pid, &e);
                else if (kind == PJ_ENVD_STREAM_DATA)
                        k = process_stdin(r->c, &sb, pid, (const char *) in.data, in.len, false, &e);
                if (k < 0)
                        return s_fail(r, code_of(k), "%s", e.message);
        }
        if (!pid)
                return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "the stream has no start message");
        struct strbuf b;
        strbuf_init(&b, 0);
        env_append(&b, 0, cJSON_CreateObject());
        env_end(&b, 0, NULL);
        enum MHD_Result res = respond_raw(r, 200, "application/connect+json", b.buf, b.len);
        strbuf_done(&b);
        return res;
}

/* ---- filesystem.Filesystem ---- */

static int fs_agent(struct req *r, const struct sandbox *sb, struct agent_client **ret) {
        char msg[256];
        int k = agent_connect(r->c, sb, ret, msg, sizeof(msg));
        if (k < 0) {
                unary_error(r, PJ_CONNECT_UNAVAILABLE, "The sandbox's agent is not answering: %s", msg);
                return k;
        }
        return 0;
}

static enum MHD_Result fs_error(struct req *r, int k, const char *path) {
        switch (-k) {
        case ENOENT: return unary_error(r, PJ_CONNECT_NOT_FOUND, "path not found: %s", path);
        case ENOTDIR: return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is not a directory: %s", path);
        case EISDIR: return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is a directory: %s", path);
        case EEXIST: return unary_error(r, PJ_CONNECT_ALREADY_EXISTS, "path already exists: %s", path);
        case EACCES:
        case EPERM: return unary_error(r, PJ_CONNECT_PERMISSION_DENIED, "permission denied: %s", path);
        case EXDEV: return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "cannot move across file systems: %s", path);
        case ENOTEMPTY: return unary_error(r, PJ_CONNECT_FAILED_PRECONDITION, "directory not empty: %s", path);
        case EBUSY: return unary_error(r, PJ_CONNECT_FAILED_PRECONDITION, "path is in use or refused: %s", path);
        case ENAMETOOLONG: return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long: %s", path);
        case ETIMEDOUT: return unary_error(r, PJ_CONNECT_DEADLINE_EXCEEDED, "the sandbox did not answer in time");
        default: return unary_error(r, PJ_CONNECT_INTERNAL, "%s: %s", path, strerror(-k));
        }
}

static void perm_string(uint8_t type, uint32_t mode, char out[11]) {
        static const char rwx[] = "rwxrwxrwx";
        out[0] = type == PJ_AGENT_FT_DIR ? 'd' : type == PJ_AGENT_FT_SYMLINK ? 'L' : type == PJ_AGENT_FT_FILE ? '-' : '?';
        for (int i = 0; i < 9; i++)
                out[1 + i] = mode & (1u << (8 - i)) ? rwx[i] : '-';
        out[10] = 0;
}

/* What envd says of a symlink: its target's type and permission bits (unknown when the target
 * is missing), and the target resolved. */
struct linkinfo {
        bool known;                      /* the target exists */
        uint8_t type;
        uint32_t mode;
        const char *target;              /* NULL: not resolved */
};

/* EntryInfo of path, as envd's (lstat): name, type, size, mode (permission bits only, as
 * envd's FileMode.Perm()), permissions (Go's FileMode string, "Lrwxrwxrwx" for a symlink),
 * times. A symlink (type SYMLINK) takes its type and mode from link (envd follows it for
 * those) and carries symlinkTarget. */
static cJSON *entry_json(const char *path, uint8_t type, uint64_t size, uint32_t mode, int64_t mtime_ns,
                         const struct linkinfo *link) {
        cJSON *o = cJSON_CreateObject();
        const char *slash = strrchr(path, '/');
        uint8_t shown = type;
        uint32_t perm = mode & 0777;
        if (type == PJ_AGENT_FT_SYMLINK) {
                shown = link && link->known ? link->type : PJ_AGENT_FT_OTHER;
                perm = link && link->known ? link->mode & 0777 : 0;
        }
        json_add_str(o, "name", slash && slash[1] ? slash + 1 : path);
        json_add_str(o, "type", shown == PJ_AGENT_FT_DIR ? "FILE_TYPE_DIRECTORY" : shown == PJ_AGENT_FT_SYMLINK ? "FILE_TYPE_SYMLINK"
                                : shown == PJ_AGENT_FT_FILE                              ? "FILE_TYPE_FILE"
                                                                                         : "FILE_TYPE_UNSPECIFIED");
        json_add_str(o, "path", path);
        char n[32];
        snprintf(n, sizeof(n), "%llu", (unsigned long long) size);
        json_add_str(o, "size", n);
        cJSON_AddItemToObject(o, "mode", cJSON_CreateNumber((double) perm));
        char perms[11];
        perm_string(type, mode, perms);
        json_add_str(o, "permissions", perms);
        json_add_str(o, "owner", "root");
        json_add_str(o, "group", "root");
        char t[64];
        time_t secs = (time_t) (mtime_ns / 1000000000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        size_t l = strftime(t, sizeof(t), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(t + l, sizeof(t) - l, ".%09lldZ", (long long) (mtime_ns % 1000000000));
        json_add_str(o, "modifiedTime", t);
        if (type == PJ_AGENT_FT_SYMLINK)
                json_add_str(o, "symlinkTarget", link && link->target ? link->target : path);
        return o;
}

/* {"entry": e} (e consumed). */
static enum MHD_Result entry_ok(struct req *r, cJSON *e) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "entry", e);
        return unary_ok(r, o);
}

/* The targets of symlinks, resolved inside the sandbox (the agent has no readlink): one
 * process, realpath per path (the path itself when it cannot be resolved, as envd does),
 * NUL-separated. Bounded: LINKS_MAX paths, LINKS_OUT_MAX bytes of answer, LINKS_TIMEOUT_MS.
 * *ret[i] is NULL where nothing usable came back. */
#define LINKS_MAX 256
#define LINKS_OUT_MAX (LINKS_MAX * 4100)
#define LINKS_TIMEOUT_MS 10000

static int links_out(int stream, const uint8_t *data, size_t len, void *ud) {
        if (stream == 1)
                (void) strbuf_append(ud, data, len);
        return 0;
}

static void resolve_links(struct ctl *c, const struct sandbox *sb, char *const *paths, size_t n, char **ret) {
        for (size_t i = 0; i < n; i++)
                ret[i] = NULL;
        if (!n || n > LINKS_MAX)
                return;
        _cleanup_free_ const char **argv = xnew0(const char *, n + 5);
        argv[0] = "/bin/sh";
        argv[1] = "-c";
        /* the paths are absolute: no "--" needed (busybox's realpath takes none) */
        argv[2] = "for p; do r=$(realpath \"$p\" 2>/dev/null) || r=$p; printf '%s\\0' \"$r\"; done";
        argv[3] = "sh";
        for (size_t i = 0; i < n; i++)
                argv[4 + i] = paths[i];
        struct process_spec spec = { .argv = argv, .cwd = "/" };
        struct agent_exec *x = NULL;
        struct api_error e = { 0 };
        if (process_start_session(c, sb, &spec, &x, &e) < 0)
                return;
        _cleanup_strbuf_ struct strbuf out = STRBUF_INIT(LINKS_OUT_MAX);
        int64_t deadline = mono_ms() + LINKS_TIMEOUT_MS;
        int k = 0;
        while (k == 0 && mono_ms() < deadline)
                k = agent_exec_read(x, (int) (deadline - mono_ms()), -1, links_out, &out);
        if (k != 1)
                (void) agent_exec_signal(x, SIGKILL);
        agent_exec_free(x);
        if (k != 1 || out.truncated || !out.buf)
                return;
        const char *p = out.buf, *end = out.buf + out.len;
        for (size_t i = 0; i < n && p < end; i++) {
                const char *z = memchr(p, 0, (size_t) (end - p));
                if (!z)
                        break;
                if (z > p && *p == '/' && utf8_valid(p, (size_t) (z - p)))
                        ret[i] = xstrndup(p, (size_t) (z - p));
                p = z + 1;
        }
}

/* The link information of the symlink at path: its target's type and mode (the agent's STAT
 * follows links) and its resolved target. target is the caller's to free. */
static void link_info(struct ctl *c, const struct sandbox *sb, struct agent_client *cl, const char *path, struct linkinfo *ret,
                      char **ret_target) {
        struct agent_stat st;
        *ret = (struct linkinfo) { 0 };
        if (agent_fs_stat(cl, path, &st, FS_TIMEOUT_MS) == 0)
                *ret = (struct linkinfo) { .known = true, .type = st.type, .mode = st.mode };
        char *p = (char *) path;
        resolve_links(c, sb, &p, 1, ret_target);
        ret->target = *ret_target;
}

/* lstat of path through the agent, which has none: its parent's listing (lstat'ed) names it.
 * 1 and *ret when path is a symlink, 0 when it is not or cannot be told. */
struct lfind {
        const char *name;
        struct agent_stat st;
        bool found;
};

static int lfind_entry(const struct pj_agent_fields *e, void *ud) {
        struct lfind *f = ud;
        if (!f->found && e->name && !strcmp(e->name, f->name)) {
                f->found = true;
                f->st = (struct agent_stat) { .type = e->ftype, .size = e->size, .mode = e->mode, .mtime_ns = e->mtime_ns };
                return -ECANCELED;   /* found: the rest of the listing is read and dropped */
        }
        return 0;
}

static int lstat_symlink(struct agent_client *cl, const char *path, struct agent_stat *ret) {
        const char *slash = strrchr(path, '/');
        if (!slash || !slash[1])
                return 0;
        _cleanup_free_ char *dir = slash == path ? xstrdup("/") : xstrndup(path, (size_t) (slash - path));
        struct lfind f = { .name = slash + 1 };
        (void) agent_fs_listdir(cl, dir, lfind_entry, &f, FS_TIMEOUT_MS, NULL);
        if (!f.found || f.st.type != PJ_AGENT_FT_SYMLINK)
                return 0;
        *ret = f.st;
        return 1;
}

static int stat_entry(struct ctl *c, const struct sandbox *sb, struct agent_client *cl, const char *path, cJSON **ret) {
        struct agent_stat st, lst;
        int k = agent_fs_stat(cl, path, &st, FS_TIMEOUT_MS);
        if (k == -ENOENT || k == -ELOOP || k >= 0) {
                /* a symlink (a dangling one too): described as itself, as envd's lstat does */
                if (lstat_symlink(cl, path, &lst) == 1) {
                        struct linkinfo li;
                        _cleanup_free_ char *target = NULL;
                        link_info(c, sb, cl, path, &li, &target);
                        *ret = entry_json(path, lst.type, lst.size, lst.mode, lst.mtime_ns, &li);
                        return 0;
                }
        }
        if (k < 0)
                return k;
        *ret = entry_json(path, st.type, st.size, st.mode, st.mtime_ns, NULL);
        return 0;
}

/* ---- files of E2B's `user` ----
 *
 * The agent writes and makes directories as root; what it makes for `user` is then given to
 * user (chown, run as root in the sandbox with fixed ids, no shell). The directories a call
 * creates are found before it, by stat from the path up: at most one per path component. */

#define OWN_TIMEOUT_MS 10000
#define OWN_MAX_PATHS 64

/* The number of leading characters of path that exist already (path itself: its length);
 * the components after them are what a mkdir -p / write makes. < 0: the agent failed, or did
 * not answer them all within FS_TIMEOUT_MS. */
static int existing_prefix(struct agent_client *cl, const char *path, size_t *ret) {
        _cleanup_free_ char *p = xstrdup(path);
        size_t len = strlen(p);
        int64_t deadline = mono_ms() + FS_TIMEOUT_MS;
        for (int steps = 0; len > 1 && steps < OWN_MAX_PATHS; steps++) {
                struct agent_stat st;
                p[len] = 0;
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                int k = agent_fs_stat(cl, p, &st, (int) left);
                if (k == 0)
                        break;
                if (k != -ENOENT)
                        return k;
                char *slash = strrchr(p, '/');
                len = slash && slash != p ? (size_t) (slash - p) : 1;
        }
        *ret = len;
        return 0;
}

/* Gives path, and every directory above it past its first `existing` characters, to user.
 * 0 for root (nothing to do). */
static int give_to_user(struct ctl *c, const struct sandbox *sb, const struct envd_user *user, const char *path,
                        size_t existing, struct api_error *e) {
        if (!user->uid)
                return 0;
        char ids[32];
        snprintf(ids, sizeof(ids), "%u:%u", user->uid, user->gid);
        const char *argv[OWN_MAX_PATHS + 5] = { "chown", "-h", ids };
        size_t n = 3;
        _cleanup_free_ char *p = xstrdup(path);
        size_t len = strlen(p);
        /* path, then each directory above it that the call made, deepest first */
        argv[n++] = xstrdup(p);
        for (size_t i = len; i > existing + 1 && n < ELEMENTSOF(argv) - 1; i--)
                if (p[i - 1] == '/' && i - 1 > existing) {
                        p[i - 1] = 0;
                        argv[n++] = xstrdup(p);
                }
        argv[n] = NULL;
        struct process_spec spec = { .argv = argv, .cwd = "/" };
        struct agent_exec *x = NULL;
        int k = process_start_session(c, sb, &spec, &x, e), code = -1;
        if (k == 0) {
                _cleanup_strbuf_ struct strbuf out = STRBUF_INIT(4096);
                int64_t deadline = mono_ms() + OWN_TIMEOUT_MS;
                while (k == 0 && mono_ms() < deadline)
                        k = agent_exec_read(x, (int) (deadline - mono_ms()), -1, links_out, &out);
                if (k != 1)
                        (void) agent_exec_signal(x, SIGKILL);
                else if (agent_exec_exit_code(x, &code) < 0)
                        code = -1;
                agent_exec_free(x);
                k = k == 1 && code == 0 ? 0 : API_ERR(e, -EIO, "%s was made, but giving it to %s (chown %s) failed%s", path,
                                                       user->name, ids, k == 1 ? "" : ": chown did not finish in time");
        }
        for (size_t i = 3; i < n; i++)
                free((char *) argv[i]);
        return k;
}

/* The prologue of the unary filesystem calls: the request, the sandbox, the message, a path
 * resolved, the agent. < 0: answered. */
static int fs_begin(struct req *r, enum pj_envd_fs_kind kind, struct sandbox *sb, struct pj_envd_fs *in, char **path, char **to,
                    struct agent_client **cl) {
        struct creq q;
        struct pj_error pe = { 0 };
        if (connect_request(r, false, &q) < 0 || envd_sandbox(r, true, sb) < 0)
                return -EINVAL;
        if (pj_envd_fs_parse(q.msg, q.len, kind, in, &pe) < 0) {
                unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
                return -EINVAL;
        }
        const char *home = req_user(r, sb)->home;
        *path = resolve(in->path, home);
        if (in->to)
                *to = resolve(in->to, home);
        if (!*path || (in->to && !*to)) {
                unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long (at most 4096 bytes)");
                return -EINVAL;
        }
        return fs_agent(r, sb, cl);
}

#define FS_LOCALS                                                    \
        _cleanup_sandbox_ struct sandbox sb = { 0 };                 \
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs in = { 0 };     \
        _cleanup_free_ char *path = NULL, *to = NULL;                \
        _cleanup_(agent_client_freep) struct agent_client *cl = NULL

static enum MHD_Result fs_stat(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_PATH, &sb, &in, &path, &to, &cl) < 0)
                return MHD_YES;
        cJSON *e = NULL;
        int k = stat_entry(r->c, &sb, cl, path, &e);
        if (k < 0)
                return fs_error(r, k, path);
        return entry_ok(r, e);
}

static enum MHD_Result fs_mkdir(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_PATH, &sb, &in, &path, &to, &cl) < 0)
                return MHD_YES;
        struct agent_stat st;
        int k = agent_fs_stat(cl, path, &st, FS_TIMEOUT_MS);
        if (k == 0)
                return unary_error(r, PJ_CONNECT_ALREADY_EXISTS, "directory already exists: %s", path);
        if (k != -ENOENT)
                return fs_error(r, k, path);
        size_t existing = 0;
        struct api_error ae = { 0 };
        if ((k = existing_prefix(cl, path, &existing)) < 0)
                return fs_error(r, k, path);
        k = agent_fs_mkdir(cl, path, true, FS_TIMEOUT_MS);
        if (k == 0 && give_to_user(r->c, &sb, req_user(r, &sb), path, existing, &ae) < 0)
                return unary_error(r, PJ_CONNECT_INTERNAL, "%s", ae.message);
        cJSON *e = NULL;
        if (k == 0)
                k = stat_entry(r->c, &sb, cl, path, &e);
        if (k < 0)
                return fs_error(r, k, path);
        return entry_ok(r, e);
}

static enum MHD_Result fs_move(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_MOVE, &sb, &in, &path, &to, &cl) < 0)
                return MHD_YES;
        int k = agent_fs_move(cl, path, to, FS_TIMEOUT_MS);
        if (k < 0)
                return fs_error(r, k, path);
        cJSON *e = NULL;
        if ((k = stat_entry(r->c, &sb, cl, to, &e)) < 0)
                return fs_error(r, k, to);
        return entry_ok(r, e);
}

static enum MHD_Result fs_remove(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_PATH, &sb, &in, &path, &to, &cl) < 0)
                return MHD_YES;
        int k = agent_fs_remove(cl, path, true, FS_TIMEOUT_MS);
        if (k == -ENOENT)
                k = 0;   /* envd's os.RemoveAll: nothing there is success */
        if (k < 0)
                return fs_error(r, k, path);
        return unary_ok(r, cJSON_CreateObject());
}

/* ListDir's answer is built from what the sandbox says: bounded in entries (LISTDIR_MAX) and
 * in bytes (LISTDIR_BYTES_MAX of JSON, counted while the entries arrive so that long names under
 * a long path never grow it further), then sorted as envd's walk gives it: by name, each
 * directory followed by what is under it. */
#define LISTDIR_BYTES_MAX ((size_t) 16 << 20)
#define LISTDIR_ENTRY_JSON 240           /* an entry's JSON besides its name and path */

struct lsent {
        char *path;
        uint8_t type;
        uint64_t size;
        uint32_t mode;
        int64_t mtime_ns;
        struct linkinfo link;            /* symlinks: what they point at */
        char *target;
};

struct lsctx {
        struct lsent *v;
        size_t n, cap, bytes;
        const char *dir;
        char **subdirs;                  /* directories found, for the next depth */
        size_t n_sub;
};

static int ls_entry(const struct pj_agent_fields *e, void *ud) {
        struct lsctx *x = ud;
        if (!e->name || !utf8_valid(e->name, strlen(e->name)) || strchr(e->name, '/') || !strcmp(e->name, ".") ||
            !strcmp(e->name, ".."))
                return 0;
        if (x->n >= LISTDIR_MAX)
                return -E2BIG;
        size_t dl = strlen(x->dir), nl = strlen(e->name);
        x->bytes += LISTDIR_ENTRY_JSON + 2 * (dl + nl + 1);
        if (x->bytes > LISTDIR_BYTES_MAX)
                return -EMSGSIZE;
        if (x->n == x->cap) {
                x->cap = x->cap ? 2 * x->cap : 256;
                x->v = xrealloc(x->v, x->cap * sizeof(*x->v));
        }
        char *p = xasprintf("%s%s%s", x->dir, strcmp(x->dir, "/") ? "/" : "", e->name);
        x->v[x->n++] = (struct lsent) { .path = p, .type = e->ftype, .size = e->size, .mode = e->mode, .mtime_ns = e->mtime_ns };
        if (e->ftype == PJ_AGENT_FT_DIR) {
                x->subdirs = xrealloc(x->subdirs, (x->n_sub + 1) * sizeof(char *));
                x->subdirs[x->n_sub++] = xstrdup(p);
        }
        return 0;
}

/* Paths in walk order: compared byte by byte with '/' before every other byte, so that a
 * directory's entries come right after it and before its next sibling ("a", "a/b", "a-c"). */
static int walk_order(const void *pa, const void *pb) {
        const unsigned char *a = (const unsigned char *) ((const struct lsent *) pa)->path;
        const unsigned char *b = (const unsigned char *) ((const struct lsent *) pb)->path;
        while (*a && *a == *b)
                a++, b++;
        int ca = *a == '/' ? 1 : *a ? *a + 1 : 0, cb = *b == '/' ? 1 : *b ? *b + 1 : 0;
        return ca - cb;
}

static void free_strv_n(char **v, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

static enum MHD_Result fs_listdir(struct req *r) {
        FS_LOCALS;
        if (fs_begin(r, PJ_ENVD_FS_LISTDIR, &sb, &in, &path, &to, &cl) < 0)
                return MHD_YES;
        struct lsctx x = { 0 };
        char **level = xnew0(char *, 1);
        size_t n_level = 1;
        level[0] = xstrdup(path);
        int k = 0;
        for (uint32_t d = 0; d < in.depth && n_level && k >= 0; d++) {
                x.subdirs = NULL;
                x.n_sub = 0;
                for (size_t i = 0; i < n_level && k >= 0; i++) {
                        x.dir = level[i];
                        k = agent_fs_listdir(cl, level[i], ls_entry, &x, FS_TIMEOUT_MS, NULL);
                        if (k < 0 && d > 0 && k != -E2BIG && k != -EMSGSIZE)
                                k = 0;   /* a subdirectory that went away or cannot be read meanwhile */
                }
                free_strv_n(level, n_level);
                level = x.subdirs;
                n_level = x.n_sub;
        }
        free_strv_n(level, n_level);
        _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(0);
        if (k >= 0) {
                qsort(x.v, x.n, sizeof(*x.v), walk_order);
                /* symlinks as envd shows them: the first LINKS_MAX with their targets */
                char *lp[LINKS_MAX] = { 0 }, *lt[LINKS_MAX] = { 0 };
                size_t li[LINKS_MAX], nl = 0;
                for (size_t i = 0; i < x.n && nl < LINKS_MAX; i++)
                        if (x.v[i].type == PJ_AGENT_FT_SYMLINK) {
                                struct agent_stat st;
                                if (agent_fs_stat(cl, x.v[i].path, &st, FS_TIMEOUT_MS) == 0)
                                        x.v[i].link = (struct linkinfo) { .known = true, .type = st.type, .mode = st.mode };
                                li[nl] = i;
                                lp[nl++] = x.v[i].path;
                        }
                resolve_links(r->c, &sb, lp, nl, lt);
                for (size_t j = 0; j < nl; j++) {
                        x.v[li[j]].target = lt[j];
                        x.v[li[j]].link.target = lt[j];
                        x.bytes += lt[j] ? strlen(lt[j]) : 0;
                }
                strbuf_append(&b, "{\"entries\":[", 12);
                for (size_t i = 0; i < x.n; i++) {
                        cJSON *e = entry_json(x.v[i].path, x.v[i].type, x.v[i].size, x.v[i].mode, x.v[i].mtime_ns, &x.v[i].link);
                        _cleanup_free_ char *s = json_print(e);
                        cJSON_Delete(e);
                        if (i)
                                strbuf_append(&b, ",", 1);
                        strbuf_append(&b, s, strlen(s));
                        /* names JSON escapes at length (control bytes) go past the estimate */
                        if (b.len > LISTDIR_BYTES_MAX + LINKS_OUT_MAX) {
                                k = -EMSGSIZE;
                                break;
                        }
                }
                strbuf_append(&b, "]}", 2);
        }
        for (size_t i = 0; i < x.n; i++)
                free_many(x.v[i].path, x.v[i].target);
        free(x.v);
        if (k == -E2BIG)
                return unary_error(r, PJ_CONNECT_RESOURCE_EXHAUSTED, "more than %d entries: list with a smaller depth (path %s)",
                                   LISTDIR_MAX, path);
        if (k == -EMSGSIZE)
                return unary_error(r, PJ_CONNECT_RESOURCE_EXHAUSTED,
                                   "the listing is larger than the limit (%zu MiB of answer): list with a smaller depth "
                                   "or a directory further down (path %s)",
                                   LISTDIR_BYTES_MAX >> 20, path);
        if (k < 0)
                return fs_error(r, k, path);
        size_t len = b.len;
        char *s = strbuf_steal(&b);
        struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(len, s, free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
        return respond_response(r, 200, resp);
}

static enum MHD_Result fs_watch(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs in = { 0 };
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        if (connect_request(r, true, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_fs_parse(q.msg, q.len, PJ_ENVD_FS_WATCH, &in, &pe) < 0)
                return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        _cleanup_free_ char *path = resolve(in.path, req_user(r, &sb)->home);
        if (!path)
                return s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long");
        struct cstream *t = s_new(r, S_WATCH, &q);
        int k = process_watch(r->c, &sb, path, in.recursive, &t->w, &e);
        if (k < 0) {
                s_free(t);
                return s_fail(r, k == -EINVAL ? PJ_CONNECT_INVALID_ARGUMENT : code_of(k), "%s", e.message);
        }
        cJSON *start = cJSON_CreateObject();
        cJSON_AddObjectToObject(start, "start");
        env_append(&t->pending, 0, start);
        return s_respond(r, t);
}

/* ---- watchers polled by id (CreateWatcher, GetWatcherEvents, RemoveWatcher: the sync Python
 * SDK's watch_dir). Each holds one agent connection with its WATCH; events wait in the agent's
 * bounded buffer until polled. Bounded: WATCHERS_MAX in all, WATCHERS_PER_SANDBOX each; one not
 * polled for WATCHER_IDLE_MS is dropped. ---- */

#define WATCHERS_MAX 256
#define WATCHERS_PER_SANDBOX 8
#define WATCHER_IDLE_MS (10 * 60 * 1000)
#define WATCHER_EVENTS_MAX 4096
#define WATCHER_EVENTS_BYTES ((size_t) 1 << 20)   /* of one poll's answer (paths are up to 4 KiB each) */

struct watcher {
        char id[SANDBOX_ID_LEN + 1];     /* the watcher's own id (random) */
        char sandbox[SANDBOX_ID_LEN + 1];
        struct agent_watch *w;
        int64_t last_poll;
        bool busy;                       /* a poll is reading it */
};
static pthread_mutex_t watchers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher watchers[WATCHERS_MAX];

/* Drops idle watchers (their connections closed outside the lock). */
static void watchers_expire(void) {
        struct agent_watch *gone[WATCHERS_MAX];
        size_t n = 0;
        int64_t now = mono_ms();
        pthread_mutex_lock(&watchers_lock);
        for (size_t i = 0; i < WATCHERS_MAX; i++)
                if (watchers[i].w && !watchers[i].busy && now - watchers[i].last_poll > WATCHER_IDLE_MS) {
                        gone[n++] = watchers[i].w;
                        watchers[i] = (struct watcher) { 0 };
                }
        pthread_mutex_unlock(&watchers_lock);
        for (size_t i = 0; i < n; i++)
                agent_watch_free(gone[i]);
}

static enum MHD_Result fs_create_watcher(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs in = { 0 };
        _cleanup_free_ char *path = NULL;
        struct creq q;
        struct pj_error pe = { 0 };
        struct api_error e = { 0 };
        if (connect_request(r, false, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_fs_parse(q.msg, q.len, PJ_ENVD_FS_WATCH, &in, &pe) < 0)
                return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        path = resolve(in.path, req_user(r, &sb)->home);
        if (!path)
                return unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "path is too long");
        watchers_expire();
        pthread_mutex_lock(&watchers_lock);
        size_t mine = 0, slot = WATCHERS_MAX;
        for (size_t i = 0; i < WATCHERS_MAX; i++) {
                if (watchers[i].id[0] && !strcmp(watchers[i].sandbox, sb.id))
                        mine++;
                if (!watchers[i].id[0] && slot == WATCHERS_MAX)
                        slot = i;
        }
        if (mine >= WATCHERS_PER_SANDBOX || slot == WATCHERS_MAX) {
                pthread_mutex_unlock(&watchers_lock);
                return unary_error(r, PJ_CONNECT_RESOURCE_EXHAUSTED, "at most %d watchers per sandbox (%d on this server): "
                                   "remove one first", WATCHERS_PER_SANDBOX, WATCHERS_MAX);
        }
        struct watcher *wt = &watchers[slot];
        hexid_new(wt->id);
        snprintf(wt->sandbox, sizeof(wt->sandbox), "%s", sb.id);
        wt->busy = true;   /* reserved while the WATCH is set up */
        wt->last_poll = mono_ms();
        char id[SANDBOX_ID_LEN + 1];
        memcpy(id, wt->id, sizeof(id));
        pthread_mutex_unlock(&watchers_lock);
        struct agent_watch *w = NULL;
        int k = process_watch(r->c, &sb, path, in.recursive, &w, &e);
        pthread_mutex_lock(&watchers_lock);
        if (k < 0)
                *wt = (struct watcher) { 0 };
        else {
                wt->w = w;
                wt->busy = false;
        }
        pthread_mutex_unlock(&watchers_lock);
        if (k < 0)
                return unary_error(r, k == -EINVAL ? PJ_CONNECT_INVALID_ARGUMENT : code_of(k), "%s", e.message);
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "watcherId", id);
        return unary_ok(r, o);
}

struct evlist {
        cJSON *events;
        size_t n, bytes;
};

static int collect_event(int event, const char *path, bool dir, void *ud) {
        struct evlist *l = ud;
        (void) dir;
        if (event < 1 || event > PJ_AGENT_EV_CHMOD || !utf8_valid(path, strlen(path)))
                return 0;
        cJSON *f = cJSON_CreateObject();
        json_add_str(f, "name", path);
        json_add_str(f, "type", event_names[event]);
        cJSON_AddItemToArray(l->events, f);
        l->bytes += strlen(path) + 64;
        /* the rest waits for the next poll */
        return ++l->n >= WATCHER_EVENTS_MAX || l->bytes >= WATCHER_EVENTS_BYTES ? -ENOBUFS : 0;
}

/* The watcher id of a GetWatcherEvents / RemoveWatcher message, checked to be this sandbox's. */
static int watcher_message(struct req *r, struct sandbox *sb, char id[SANDBOX_ID_LEN + 1]) {
        struct creq q;
        if (connect_request(r, false, &q) < 0 || envd_sandbox(r, true, sb) < 0)
                return -EINVAL;
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_error pe = { 0 };
        static const char *const names[] = { "watcherId", "watcher_id" };
        const struct pj_json *v = NULL;
        if (pj_json_parse_object(q.msg, q.len, true, &root, &pe) < 0 ||
            pj_check_fields(root, "", names, ELEMENTSOF(names), &pe) < 0) {
                unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
                return -EINVAL;
        }
        v = pj_json_member(root, "watcherId");
        if (!v)
                v = pj_json_member(root, "watcher_id");
        if (!v || v->type != PJ_JSON_STRING || !hexid_valid_n(v->str, v->str_len)) {
                unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "watcherId is required: the id CreateWatcher answered");
                return -EINVAL;
        }
        memcpy(id, v->str, SANDBOX_ID_LEN);
        id[SANDBOX_ID_LEN] = 0;
        return 0;
}

/* The watcher, taken (busy) for the caller: its slot, or NULL (answered not_found). */
static struct watcher *watcher_take(struct req *r, const struct sandbox *sb, const char *id) {
        struct watcher *found = NULL;
        pthread_mutex_lock(&watchers_lock);
        for (size_t i = 0; i < WATCHERS_MAX && !found; i++)
                if (watchers[i].w && !watchers[i].busy && !strcmp(watchers[i].id, id) && !strcmp(watchers[i].sandbox, sb->id))
                        found = &watchers[i];
        if (found)
                found->busy = true;
        pthread_mutex_unlock(&watchers_lock);
        if (!found)
                unary_error(r, PJ_CONNECT_NOT_FOUND, "watcher %s not found (removed, expired after 10 minutes without a poll, "
                            "or in use by another poll)", id);
        return found;
}

static enum MHD_Result fs_get_watcher_events(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        char id[SANDBOX_ID_LEN + 1];
        if (watcher_message(r, &sb, id) < 0)
                return MHD_YES;
        struct watcher *wt = watcher_take(r, &sb, id);
        if (!wt)
                return MHD_YES;
        cJSON *o = cJSON_CreateObject();
        struct evlist l = { .events = cJSON_AddArrayToObject(o, "events") };
        int k = agent_watch_read(wt->w, 0, -1, collect_event, &l);
        bool ended = k == 1, truncated = ended && agent_watch_truncated(wt->w);
        struct agent_watch *drop = NULL;
        pthread_mutex_lock(&watchers_lock);
        wt->busy = false;
        wt->last_poll = mono_ms();
        if (ended || (k < 0 && k != -ENOBUFS)) {
                drop = wt->w;
                *wt = (struct watcher) { 0 };
        }
        pthread_mutex_unlock(&watchers_lock);
        agent_watch_free(drop);
        if (truncated) {
                cJSON_Delete(o);
                return unary_error(r, PJ_CONNECT_DATA_LOSS, "events were lost (polled too slowly): list the directory again");
        }
        if (k < 0 && k != -ENOBUFS && !l.n) {
                cJSON_Delete(o);
                return unary_error(r, PJ_CONNECT_UNAVAILABLE, "lost the connection to the sandbox's agent");
        }
        return unary_ok(r, o);
}

static enum MHD_Result fs_remove_watcher(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        char id[SANDBOX_ID_LEN + 1];
        if (watcher_message(r, &sb, id) < 0)
                return MHD_YES;
        struct watcher *wt = watcher_take(r, &sb, id);
        if (!wt)
                return MHD_YES;
        pthread_mutex_lock(&watchers_lock);
        struct agent_watch *drop = wt->w;
        *wt = (struct watcher) { 0 };
        pthread_mutex_unlock(&watchers_lock);
        agent_watch_free(drop);
        return unary_ok(r, cJSON_CreateObject());
}

/* ---- HTTP: /files, /health, /envs ---- */

/* Liveness, as the SDKs' isRunning() reads it: 204 while the sandbox runs, 502 (E2B's proxy
 * body: sandboxId, message, code) once it is paused, killed or was never there. It says no
 * more than that, so it wants no token (E2B's proxy answers the same way). */
static enum MHD_Result get_health(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (r->m.id[0] && store_sandbox_get(r->c->store, r->m.id, &sb) == 0 && sb.status == SB_READY)
                return respond_empty(r, 204);
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "sandboxId", r->m.id);
        json_add_str(o, "message", sb.id[0] && sb.status != SB_DESTROYED && sb.status != SB_FAILED
                                           ? "The sandbox is not running (paused, pausing or starting)"
                                           : "The sandbox was not found");
        json_add_int(o, "code", 502);
        return respond_json(r, 502, o);
}

static enum MHD_Result get_envs(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (envd_sandbox(r, false, &sb) < 0)
                return MHD_YES;
        cJSON *o = sb.env ? cJSON_Parse(sb.env) : NULL;
        return respond_json(r, 200, o ? o : cJSON_CreateObject());
}

static enum MHD_Result get_files(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        const char *p = req_query(r, "path");
        if (envd_sandbox(r, false, &sb) < 0)
                return MHD_YES;
        if (!p || !*p)
                return respond_error(r, 400, "path is required");
        _cleanup_free_ char *path = resolve(p, req_user(r, &sb)->home);
        if (!path)
                return respond_error(r, 400, "path is too long (at most 4096 bytes)");
        return runtime_respond_download(r, &sb, path);
}

/* POST /files: the body streams into the sandbox, as octet-stream (one file at ?path=) or as
 * multipart/form-data (each "file" part to ?path=, or, without it, to the part's filename). */
#define MAX_UPLOAD_FILES 256
struct upload {
        struct req *r;
        struct sandbox sb;
        bool multipart;
        struct MHD_PostProcessor *pp;
        char *query_path;
        struct runtime_run *x;           /* the file being written */
        char *cur;                       /* its path */
        const struct envd_user *user;    /* who owns what the upload makes */
        size_t existing;                 /* how much of cur existed before (strlen: the file did) */
        uint64_t received, limit;
        int error;                       /* first failure: -errno */
        char msg[512];
        cJSON *written;                  /* [{name, type, path}] */
        int files;
        bool gzip;                       /* Content-Encoding: gzip, inflated here */
        z_stream z;
        uint64_t inflated, inflate_limit;
        bool z_ended;                    /* the gzip stream ended (what follows is refused) */
};

static void up_fail(struct upload *u, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void up_fail(struct upload *u, int err, const char *fmt, ...) {
        if (u->error)
                return;
        u->error = err;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(u->msg, sizeof(u->msg), fmt, ap);
        va_end(ap);
        u->x = runtime_free(u->x);
}

static void up_finish(struct upload *u) {
        if (!u->x)
                return;
        struct api_error e = { 0 };
        int k = runtime_file_write_finish(u->x, u->cur, &e);
        u->x = runtime_free(u->x);
        /* a new file (and the directories made for it) is the user's; one that was there keeps its owner */
        if (k == 0 && u->existing < strlen(u->cur))
                k = give_to_user(u->r->c, &u->sb, u->user, u->cur, u->existing, &e);
        if (k < 0)
                return up_fail(u, k, "%s", e.message);
        cJSON *o = cJSON_CreateObject();
        const char *slash = strrchr(u->cur, '/');
        json_add_str(o, "name", slash ? slash + 1 : u->cur);
        json_add_str(o, "type", "file");
        json_add_str(o, "path", u->cur);
        cJSON_AddItemToArray(u->written, o);
}

static void up_open(struct upload *u, const char *raw_path) {
        struct api_error e = { 0 };
        char msg[256];
        up_finish(u);
        if (u->error)
                return;
        if (++u->files > MAX_UPLOAD_FILES)
                return up_fail(u, -EINVAL, "at most %d files in one upload", MAX_UPLOAD_FILES);
        free(u->cur);
        u->cur = raw_path && *raw_path ? resolve(raw_path, u->user->home) : NULL;
        if (!u->cur)
                return up_fail(u, -EINVAL, "%s", raw_path && *raw_path ? "path is too long" : "path is required (?path=, or a file name)");
        /* envd makes the parent directories */
        char dir[4097];
        snprintf(dir, sizeof(dir), "%s", u->cur);
        char *slash = strrchr(dir, '/');
        u->existing = strlen(u->cur);
        struct agent_client *cl = NULL;
        if (agent_connect(u->r->c, &u->sb, &cl, msg, sizeof(msg)) == 0) {
                if (u->user->uid && existing_prefix(cl, u->cur, &u->existing) < 0)
                        u->existing = strlen(u->cur);
                if (slash && slash != dir) {
                        *slash = 0;
                        (void) agent_fs_mkdir(cl, dir, true, FS_TIMEOUT_MS);
                }
                agent_client_free(cl);
        }
        struct sandbox copy = { 0 };
        if (store_sandbox_get(u->r->c->store, u->sb.id, &copy) < 0)
                return up_fail(u, -ENOENT, "the sandbox is gone");
        int k = runtime_file_write_start(u->r->c, &copy, u->cur, &u->x, &e);
        sandbox_clear(&copy);
        if (k < 0)
                up_fail(u, k, "%s", e.message);
}

static void up_data(struct upload *u, const char *data, size_t len) {
        if (u->error || !u->x)
                return;
        u->received += len;
        if (u->received > u->limit)
                return up_fail(u, -EFBIG, "the upload is larger than the limit (%llu bytes)", (unsigned long long) u->limit);
        int k = runtime_file_write(u->x, data, len);
        if (k < 0)
                up_fail(u, k == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH, "writing %s in the sandbox failed: %s", u->cur,
                        strerror(-k));
}

static enum MHD_Result up_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size) {
        struct upload *u = cls;
        (void) kind;
        (void) content_type;
        (void) transfer_encoding;
        if (strcmp(key, "file"))
                return MHD_YES;   /* other fields are not files */
        if (off == 0)
                up_open(u, u->query_path && u->files == 0 ? u->query_path : filename);
        if (size)
                up_data(u, data, size);
        return MHD_YES;
}

static void up_body(struct upload *u, const char *data, size_t len) {
        if (u->multipart) {
                if (len && MHD_post_process(u->pp, data, len) != MHD_YES)
                        up_fail(u, -EINVAL, "the multipart body is malformed");
        } else
                up_data(u, data, len);
}

/* A gzip body (Content-Encoding: gzip) inflated as it arrives, in bounded pieces; what it
 * inflates to is bounded by inflate_limit (a small gzip body may not grow into a large one). */
static void up_inflate(struct upload *u, const char *data, size_t len) {
        char out[64 * 1024];
        if (u->z_ended) {
                if (len)
                        up_fail(u, -EINVAL, "the body holds bytes after the end of its gzip stream");
                return;
        }
        u->z.next_in = (Bytef *) data;
        u->z.avail_in = (uInt) len;
        /* until the input is used and inflate had room to spare (it may hold output back) */
        do {
                u->z.next_out = (Bytef *) out;
                u->z.avail_out = sizeof(out);
                int k = inflate(&u->z, Z_NO_FLUSH);
                size_t got = sizeof(out) - u->z.avail_out;
                if (k != Z_OK && k != Z_STREAM_END && !(k == Z_BUF_ERROR && !got))
                        return up_fail(u, -EINVAL, "the body is not valid gzip (Content-Encoding: gzip): %s",
                                       u->z.msg ? u->z.msg : "corrupt data");
                u->inflated += got;
                if (u->inflated > u->inflate_limit)
                        return up_fail(u, -EFBIG, "the upload, decompressed, is larger than the limit (%llu bytes)",
                                       (unsigned long long) u->inflate_limit);
                if (got)
                        up_body(u, out, got);
                if (k == Z_STREAM_END) {
                        u->z_ended = true;
                        if (u->z.avail_in)
                                up_fail(u, -EINVAL, "the body holds bytes after the end of its gzip stream");
                        return;
                }
        } while (!u->error && (u->z.avail_in || u->z.avail_out == 0));
}

static int up_sink(struct req *r, const char *data, size_t len) {
        struct upload *u = r->ud;
        if (len == (size_t) -1)
                return 0;
        if (u->error)
                return 0;
        if (u->gzip)
                up_inflate(u, data, len);
        else
                up_body(u, data, len);
        return 0;
}

static void up_free(void *ud) {
        struct upload *u = ud;
        if (!u)
                return;
        if (u->pp)
                MHD_destroy_post_processor(u->pp);
        if (u->gzip)
                inflateEnd(&u->z);
        runtime_free(u->x);
        sandbox_clear(&u->sb);
        cJSON_Delete(u->written);
        free_many(u->query_path, u->cur);
        free(u);
}

static enum MHD_Result prepare_post_files(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        if (envd_sandbox(r, false, &sb) < 0)
                return MHD_YES;
        const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE), *ce = req_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING);
        const char *p = req_query(r, "path");
        bool gzip = ce && !strcasecmp(ce, "gzip");
        if (ce && !gzip && strcasecmp(ce, "identity"))
                return respond_error(r, 415, "Content-Encoding %s is not supported: send gzip or identity", ce);
        bool multipart = ct && !strncasecmp(ct, "multipart/form-data", 19);
        bool octet = ct && !strncasecmp(ct, "application/octet-stream", 24);
        if (!multipart && !octet)
                return respond_error(r, 415, "Content-Type must be multipart/form-data or application/octet-stream");
        if (octet && (!p || !*p))
                return respond_error(r, 400, "path is required for an application/octet-stream upload");
        struct upload *u = xnew0(struct upload, 1);
        u->r = r;
        u->user = req_user(r, &sb);
        u->sb = sb;
        sb = (struct sandbox) { 0 };
        u->multipart = multipart;
        u->limit = r->c->cfg->max_file;
        u->query_path = p && *p ? xstrdup(p) : NULL;
        u->written = cJSON_CreateArray();
        if (gzip) {
                if (inflateInit2(&u->z, 16 + MAX_WBITS) != Z_OK) {
                        up_free(u);
                        return respond_error(r, 500, "could not start decompressing the upload");
                }
                u->gzip = true;
                /* the files' bytes are bounded by limit in up_data; multipart framing gets 1 MiB more */
                u->inflate_limit = u->limit + (multipart ? 1024 * 1024 : 0);
        }
        r->sink = up_sink;
        r->ud = u;
        r->on_end = up_free;
        if (multipart) {
                u->pp = MHD_create_post_processor(r->conn, 64 * 1024, up_part, u);
                if (!u->pp)
                        return respond_error(r, 400, "the multipart body has no boundary");
        } else
                up_open(u, u->query_path);
        return MHD_YES;
}

static enum MHD_Result post_files(struct req *r) {
        struct upload *u = r->ud;
        if (!u)
                return respond_error(r, 500, "the upload was not prepared");
        if (!u->error && u->gzip && !u->z_ended)
                up_fail(u, -EINVAL, "the gzip body is truncated (Content-Encoding: gzip)");
        if (!u->error)
                up_finish(u);
        if (!u->error && u->files == 0)
                up_fail(u, -EINVAL, "the body holds no file (a multipart part named \"file\")");
        if (u->error) {
                int st = u->error == -EFBIG ? 413 : u->error == -ENOSPC ? 507 : http_status_from_errno(u->error);
                return respond_error(r, st, "%s", u->msg);
        }
        cJSON *w = u->written;
        u->written = NULL;
        return respond_json(r, 200, w);
}

/* ---- routes ---- */

static enum MHD_Result not_found(struct req *r) {
        return respond_error(r, 404, "No such envd endpoint: %s %s", r->method, r->path);
}

#define J ROUTE_BODY_JSON
#define L ROUTE_BODY_LARGE
#define S ROUTE_BODY_STREAM
static const struct route envd_routes[] = {
        /* method pattern                                   label                                  noun  auth   head   body prepare handler */
        { "GET",  "/health",                                "envd /health",                        NULL, false, true,  J, NULL, get_health },
        { "GET",  "/envs",                                  "envd /envs",                          NULL, false, false, J, NULL, get_envs },
        { "GET",  "/files",                                 "envd /files",                         NULL, false, false, J, NULL, get_files },
        { "POST", "/files",                                 "envd /files",                         NULL, false, false, S, prepare_post_files, post_files },
        { "POST", "/process.Process/Start",                 "envd process.Start",                  NULL, false, false, L, NULL, p_start },
        { "POST", "/process.Process/Connect",               "envd process.Connect",                NULL, false, false, L, NULL, p_connect },
        { "POST", "/process.Process/List",                  "envd process.List",                   NULL, false, false, L, NULL, p_list },
        { "POST", "/process.Process/SendInput",             "envd process.SendInput",              NULL, false, false, L, NULL, p_input },
        { "POST", "/process.Process/SendSignal",            "envd process.SendSignal",             NULL, false, false, L, NULL, p_signal },
        { "POST", "/process.Process/CloseStdin",            "envd process.CloseStdin",             NULL, false, false, L, NULL, p_close_stdin },
        { "POST", "/process.Process/Update",                "envd process.Update",                 NULL, false, false, L, NULL, p_update },
        { "POST", "/process.Process/StreamInput",           "envd process.StreamInput",            NULL, false, false, L, NULL, p_stream_input },
        { "POST", "/filesystem.Filesystem/Stat",            "envd filesystem.Stat",                NULL, false, false, L, NULL, fs_stat },
        { "POST", "/filesystem.Filesystem/MakeDir",         "envd filesystem.MakeDir",             NULL, false, false, L, NULL, fs_mkdir },
        { "POST", "/filesystem.Filesystem/Move",            "envd filesystem.Move",                NULL, false, false, L, NULL, fs_move },
        { "POST", "/filesystem.Filesystem/ListDir",         "envd filesystem.ListDir",             NULL, false, false, L, NULL, fs_listdir },
        { "POST", "/filesystem.Filesystem/Remove",          "envd filesystem.Remove",              NULL, false, false, L, NULL, fs_remove },
        { "POST", "/filesystem.Filesystem/WatchDir",        "envd filesystem.WatchDir",            NULL, false, false, L, NULL, fs_watch },
        { "POST", "/filesystem.Filesystem/CreateWatcher",   "envd filesystem.CreateWatcher",       NULL, false, false, L, NULL, fs_create_watcher },
        { "POST", "/filesystem.Filesystem/GetWatcherEvents", "envd filesystem.GetWatcherEvents",   NULL, false, false, L, NULL, fs_get_watcher_events },
        { "POST", "/filesystem.Filesystem/RemoveWatcher",   "envd filesystem.RemoveWatcher",       NULL, false, false, L, NULL, fs_remove_watcher },
};
static const struct route unknown_row = { "GET", "/", "envd unknown", NULL, false, false, J, NULL, not_found };
#undef J
#undef L
#undef S

enum route_status envd_route(struct req *r, const char *sandbox_id) {
        enum route_status st = route_match_in(envd_routes, ELEMENTSOF(envd_routes), r->method, r->path, &r->m);
        if (st == ROUTE_NOT_FOUND) {
                r->m = (struct route_match) { .status = ROUTE_FOUND, .row = &unknown_row };
                st = ROUTE_FOUND;
        }
        snprintf(r->m.id, sizeof(r->m.id), "%s", sandbox_id ? sandbox_id : "");
        return st;
}
