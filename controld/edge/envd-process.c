/* envd-process.c — envd's process.Process (Start, Connect, List, SendInput, SendSignal,
 * CloseStdin, Update, StreamInput) and what List remembers of each process: envd.c's routes
 * call these; the Connect helpers and streams they use are envd-common.c's (envd-private.h). */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "controld.h"
#include "envd-private.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "pj_e2b.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "process.h"
#include "session.h"
#include "strutil.h"

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

/* ---- process.Process ---- */

/* The pid a selector names: by pid as given, by tag the running process with it. */
static int select_pid(struct ctl *c, const struct sandbox *sb, const struct pj_envd_selector *s, uint32_t *ret,
                      struct err *e) {
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
                return err_set(e, -ENOENT, "No running process with tag \"%s\"", s->tag);
        *ret = pid;
        return 0;
}

/* A stream's first event, {"start": {"pid": pid}}, and the stream answered. */
static enum MHD_Result respond_started(struct req *r, struct cstream *t, uint32_t pid) {
        cJSON *start = cJSON_CreateObject(), *s = cJSON_AddObjectToObject(start, "start");
        json_add_int(s, "pid", pid);
        envd_s_event(t, start);
        return envd_s_respond(r, t);
}

enum MHD_Result envd_p_start(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_start_done) struct pj_envd_start in = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        if (envd_connect_request(r, true, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_start_parse(q.msg, q.len, &in, &pe) < 0)
                return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        const struct envd_user *user = envd_req_user(r, &sb);
        _cleanup_free_ char *cwd = envd_resolve(in.cwd ? in.cwd : user->home, user->home);
        if (!cwd)
                return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "process.cwd is too long");
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
        struct cstream *t = envd_s_new(r, S_PROCESS, &q);
        t->pty = in.pty;
        t->kill_at_deadline = true;
        snprintf(t->sandbox, sizeof(t->sandbox), "%s", sb.id);
        int k = process_start_session(r->c, &sb, &spec, &t->x, &e);
        if (k < 0) {
                envd_s_free(t);
                return envd_s_fail(r, envd_code_of(k), "%s", e.message);
        }
        uint32_t pid = session_pid(t->x);
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
        return respond_started(r, t, pid);
}

enum MHD_Result envd_p_connect(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector in = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        uint32_t pid = 0;
        if (envd_connect_request(r, true, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_selector_parse(q.msg, q.len, &in, &pe) < 0)
                return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        int k = select_pid(r->c, &sb, &in, &pid, &e);
        if (k < 0)
                return envd_s_fail(r, envd_code_of(k), "%s", e.message);
        struct cstream *t = envd_s_new(r, S_PROCESS, &q);
        (void) kept_get(sb.id, pid, &t->pty, NULL);
        /* Connect's deadline ends this stream, not the process (kill_at_deadline stays false) */
        k = process_attach(r->c, &sb, pid, &t->x, &e);
        if (k < 0) {
                envd_s_free(t);
                return envd_s_fail(r, envd_code_of(k), "%s", e.message);
        }
        return respond_started(r, t, pid);
}

enum MHD_Result envd_p_list(struct req *r) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err pe = { 0 };
        struct err e = { 0 };
        if (envd_connect_request(r, false, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        if (pj_envd_empty_parse(q.msg, q.len, &pe) < 0)
                return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
        struct pj_agent_fields *v = NULL;
        size_t n = 0;
        pthread_mutex_lock(&kept_lock);
        uint64_t before = kept_seq;
        pthread_mutex_unlock(&kept_lock);
        int k = process_list(r->c, &sb, &v, &n, &e);
        if (k < 0)
                return envd_unary_error(r, envd_code_of(k), "%s", e.message);
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
        return envd_unary_ok(r, o);
}

/* The unary calls on one process (SendInput, SendSignal, CloseStdin, Update): the request, the
 * sandbox, the message, the pid its selector names, then the call. */
enum pcall { PC_INPUT, PC_SIGNAL, PC_CLOSE_STDIN, PC_UPDATE };

static enum MHD_Result p_unary(struct req *r, enum pcall what) {
        struct creq q;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(pj_envd_input_done) struct pj_envd_input in = { 0 };   /* .process for all; the data for SendInput */
        struct err pe = { 0 };
        struct err e = { 0 };
        uint32_t pid = 0, rows = 0, cols = 0;
        int sig = 0, k = 0;
        if (envd_connect_request(r, false, &q) < 0 || envd_sandbox(r, true, &sb) < 0)
                return MHD_YES;
        switch (what) {
        case PC_INPUT: k = pj_envd_input_parse(q.msg, q.len, &in, &pe); break;
        case PC_SIGNAL: k = pj_envd_signal_parse(q.msg, q.len, &in.process, &sig, &pe); break;
        case PC_CLOSE_STDIN: k = pj_envd_selector_parse(q.msg, q.len, &in.process, &pe); break;
        case PC_UPDATE: k = pj_envd_update_parse(q.msg, q.len, &in.process, &rows, &cols, &pe); break;
        }
        if (k < 0)
                return envd_unary_error(r, PJ_CONNECT_INVALID_ARGUMENT, "%s", pe.message);
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
                return envd_unary_error(r, envd_code_of(k), "%s", e.message);
        return envd_unary_ok(r, cJSON_CreateObject());
}

enum MHD_Result envd_p_input(struct req *r) { return p_unary(r, PC_INPUT); }
enum MHD_Result envd_p_signal(struct req *r) { return p_unary(r, PC_SIGNAL); }
enum MHD_Result envd_p_close_stdin(struct req *r) { return p_unary(r, PC_CLOSE_STDIN); }
enum MHD_Result envd_p_update(struct req *r) { return p_unary(r, PC_UPDATE); }

/* StreamInput (client streaming): the request body is a stream of envelopes, start first, then
 * data and keepalives; each data goes to the process's stdin in order. The body is read whole
 * before this runs (bounded by [server] max_body), so input arrives when the request ends; the
 * SDKs use SendInput. The answer: one empty message, then the end of the stream. */
enum MHD_Result envd_p_stream_input(struct req *r) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct err e = { 0 };
        const char *ct = req_header(r, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!ct || strncasecmp(ct, "application/connect+json", 24))
                return respond_json(r, 415, envd_connect_error(PJ_CONNECT_UNIMPLEMENTED, "Content-Type must be application/connect+json"));
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
                        return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "message %zu: %s", n,
                                           k == -EMSGSIZE ? "larger than the limit (2 MiB)" : k == -EPROTO ? "compressed" : "truncated");
                p += used;
                left -= used;
                enum pj_envd_stream_kind kind = 0;
                _cleanup_(pj_envd_input_done) struct pj_envd_input in = { 0 };
                struct err pe = { 0 };
                if (pj_envd_stream_input_parse((const char *) m, ml, &kind, &in, &pe) < 0)
                        return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "message %zu: %s", n, pe.message);
                if ((kind == PJ_ENVD_STREAM_START) != (n == 0))
                        return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "message %zu: the first message, and only it, is start", n);
                if (kind == PJ_ENVD_STREAM_START)
                        k = select_pid(r->c, &sb, &in.process, &pid, &e);
                else if (kind == PJ_ENVD_STREAM_DATA)
                        k = process_stdin(r->c, &sb, pid, (const char *) in.data, in.len, false, &e);
                if (k < 0)
                        return envd_s_fail(r, envd_code_of(k), "%s", e.message);
        }
        if (!pid)
                return envd_s_fail(r, PJ_CONNECT_INVALID_ARGUMENT, "the stream has no start message");
        struct strbuf b;
        strbuf_init(&b, 0);
        envd_env_append(&b, 0, cJSON_CreateObject());
        envd_env_end(&b, 0, NULL);
        enum MHD_Result res = respond_raw(r, 200, "application/connect+json", b.buf, b.len);
        strbuf_done(&b);
        return res;
}
