/* runtime.c — exec, code and files, through the scheduler driver's exec sessions.
 *
 * Nothing here touches the host filesystem or a host shell: every operation is
 * an exec inside the sandbox with a fixed script and the user's strings passed
 * as separate argv entries. Each exec records its process id in the sandbox so
 * a timeout or a vanished client can kill the whole process tree.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "http.h"
#include "json.h"
#include "log.h"
#include "strutil.h"

#define DRAIN_AFTER_KILL_MS 5000
#define STDIN_WRITE_TIMEOUT_MS 60000
#define FILE_FINISH_TIMEOUT_MS 120000
#define ERR_CAP 4096
/* Stream frames not yet sent to the client. exec_read adds at most 64 KiB of output per
 * call, and the client drains between calls; only output produced while controld is still
 * writing the code to stdin can pile up, and past this the command is killed. */
#define STREAM_PENDING_CAP ((size_t) 4 << 20)

/* The wrapper records its pid, enters the working directory, optionally copies stdin to a
 * file (a code snippet), and runs argv with the user's environment. $1 is the token, $2 the
 * directory, $3 the file for stdin ("" = none), $4 the number of "K=V" entries that follow,
 * then argv. The directory is changed here rather than by the runtime so a missing one is
 * a clear message on stderr, exit 126.
 *
 * The exec itself runs with the sandbox's own environment, never the user's: the user's
 * variables are exported only in the subshell that becomes the user's command, so a user
 * PATH (or IFS, LD_PRELOAD ...) cannot replace the cat, rm or cd the platform relies on. */
static const char wrapper_script[] =
        "p=/tmp/.paddock-exec-$1.pid; echo $$ > \"$p\" 2>/dev/null; d=$2; f=$3; n=$4; shift 4; "
        "cd \"$d\" 2>/dev/null || { echo \"paddock: cannot use working directory $d: no such directory\" >&2; "
        "rm -f \"$p\"; exit 126; }; "
        "if [ -n \"$f\" ]; then cat > \"$f\" || { rm -f \"$p\" \"$f\"; exit 126; }; fi; "
        "( while [ \"$n\" -gt 0 ]; do export \"$1\"; shift; n=$((n - 1)); done; exec \"$@\" ); rc=$?; "
        "if [ -n \"$f\" ]; then rm -f \"$f\"; fi; rm -f \"$p\"; exit $rc";

/* Kills the recorded process and every descendant (stopped first so none escapes), and
 * removes a code snippet file of this exec. A process name may hold spaces or ')', so the
 * fields after the name are taken from behind the LAST ") " of /proc/PID/stat. */
static const char killer_script[] =
        "p=/tmp/.paddock-exec-$1.pid; rm -f /tmp/.paddock-code-$1.py /tmp/.paddock-code-$1.js; "
        "read root < \"$p\" 2>/dev/null || exit 0; "
        "kill -STOP $root 2>/dev/null; list=\" $root \"; more=1; "
        "while [ $more = 1 ]; do more=0; "
        "for f in /proc/[0-9]*/stat; do "
        "read -r line < \"$f\" 2>/dev/null || continue; pid=${f#/proc/}; pid=${pid%/stat}; "
        "rest=${line##*) }; ppid=${rest#* }; ppid=${ppid%% *}; "
        "case \"$list\" in *\" $ppid \"*) case \"$list\" in *\" $pid \"*) ;; "
        "*) list=\"$list$pid \"; more=1; kill -STOP $pid 2>/dev/null;; esac;; esac; "
        "done; done; kill -KILL $list 2>/dev/null; rm -f \"$p\"; exit 0";

static const char put_script[] =
        "f=\"$1\"; d=\"${f%/*}\"; [ -n \"$d\" ] || d=/; [ -d \"$d\" ] || exit 3; [ -d \"$f\" ] && exit 5; "
        "[ -e \"$f\" ] && [ ! -f \"$f\" ] && exit 6; cat > \"$f\" || exit 4";

static const char get_script[] =
        "f=\"$1\"; [ -e \"$f\" ] || exit 3; [ -d \"$f\" ] && exit 5; [ -f \"$f\" ] || exit 6; [ -r \"$f\" ] || exit 4; "
        "exec cat \"$f\"";

/* ---- concurrency: per sandbox and per account ---- */

/* Owners (a sandbox or an account) with operations in flight and how many; entries leave
 * when their count drops to 0, so a table holds only busy owners and stays as small as
 * the operations running (themselves bounded by the connection limit). */
struct slot { char id[25]; int64_t n; };
struct slot_table {
        pthread_mutex_t lock;
        struct slot *slots;
        size_t n;
};
static struct slot_table sandbox_slots = { .lock = PTHREAD_MUTEX_INITIALIZER };
static struct slot_table account_slots = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct slot *slot_find(struct slot_table *t, const char *id) {
        for (size_t i = 0; i < t->n; i++)
                if (!strcmp(t->slots[i].id, id))
                        return &t->slots[i];
        return NULL;
}

static bool slot_take(struct slot_table *t, const char *id, int64_t max) {
        pthread_mutex_lock(&t->lock);
        struct slot *s = slot_find(t, id);
        if (!s) {
                t->slots = xrealloc(t->slots, (t->n + 1) * sizeof(*t->slots));
                s = &t->slots[t->n++];
                snprintf(s->id, sizeof(s->id), "%s", id);
                s->n = 0;
        }
        bool ok = s->n < max;
        if (ok)
                s->n++;
        else if (s->n == 0)
                *s = t->slots[--t->n];
        pthread_mutex_unlock(&t->lock);
        return ok;
}

static void slot_release(struct slot_table *t, const char *id) {
        pthread_mutex_lock(&t->lock);
        struct slot *s = slot_find(t, id);
        if (s && --s->n <= 0)
                *s = t->slots[--t->n];
        pthread_mutex_unlock(&t->lock);
}

int64_t runtime_active(const char *sandbox_id) {
        pthread_mutex_lock(&sandbox_slots.lock);
        struct slot *s = slot_find(&sandbox_slots, sandbox_id);
        int64_t n = s ? s->n : 0;
        pthread_mutex_unlock(&sandbox_slots.lock);
        return n;
}

/* Takes one slot of the sandbox and one of its account for a runtime operation (exec,
 * code, file transfer). 0, or -EUSERS with the user-facing message in msg. */
static int runtime_slots_take(struct ctl *c, const struct sandbox *sb, char *msg, size_t msglen) {
        if (!slot_take(&account_slots, sb->account_id, c->cfg->max_runtime_per_account)) {
                snprintf(msg, msglen,
                         "Too many commands and file transfers running for this account (limit %lld); retry when one finishes",
                         (long long) c->cfg->max_runtime_per_account);
                return -EUSERS;
        }
        if (!slot_take(&sandbox_slots, sb->id, c->cfg->max_exec_concurrent)) {
                slot_release(&account_slots, sb->account_id);
                snprintf(msg, msglen, "Too many commands running in this sandbox (limit %lld); retry when one finishes",
                         (long long) c->cfg->max_exec_concurrent);
                return -EUSERS;
        }
        return 0;
}

static void runtime_slots_release(const struct sandbox *sb) {
        slot_release(&sandbox_slots, sb->id);
        slot_release(&account_slots, sb->account_id);
}

/* ---- UTF-8 safe text accumulation ---- */

struct text {
        struct strbuf buf;
        uint8_t carry[4];
        size_t carry_len;
};

static size_t utf8_seq_len(uint8_t c) {
        return c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
}

/* Appends bytes as valid UTF-8: invalid sequences become U+FFFD; an incomplete sequence at the
 * end is carried to the next call (or replaced when final). Returns -ENOBUFS past the cap. */
static int text_append(struct text *t, const uint8_t *data, size_t len, bool final) {
        static const char repl[] = "\xef\xbf\xbd";
        uint8_t tmp[8];
        size_t i = 0;
        int r = 0;
        /* Complete a carried sequence first. */
        while (t->carry_len && i < len) {
                size_t need = utf8_seq_len(t->carry[0]);
                while (t->carry_len < need && i < len && (data[i] & 0xc0) == 0x80)
                        t->carry[t->carry_len++] = data[i++];
                if (t->carry_len == need) {
                        memcpy(tmp, t->carry, need);
                        r |= strbuf_append(&t->buf, utf8_valid((char *) tmp, need) ? (char *) tmp : repl,
                                           utf8_valid((char *) tmp, need) ? need : 3);
                } else if (i < len)
                        r |= strbuf_append(&t->buf, repl, 3);
                else
                        break;
                t->carry_len = 0;
        }
        size_t start = i;
        while (i < len) {
                uint8_t c = data[i];
                if (c < 0x80) {
                        i++;
                        continue;
                }
                size_t n = utf8_seq_len(c);
                if (n == 0) {
                        r |= strbuf_append(&t->buf, data + start, i - start);
                        r |= strbuf_append(&t->buf, repl, 3);
                        start = ++i;
                        continue;
                }
                if (i + n > len) {
                        /* Maybe split across reads. */
                        r |= strbuf_append(&t->buf, data + start, i - start);
                        t->carry_len = len - i;
                        memcpy(t->carry, data + i, t->carry_len);
                        i = start = len;
                        break;
                }
                if (!utf8_valid((const char *) data + i, n)) {
                        r |= strbuf_append(&t->buf, data + start, i - start);
                        r |= strbuf_append(&t->buf, repl, 3);
                        start = ++i;
                        continue;
                }
                i += n;
        }
        r |= strbuf_append(&t->buf, data + start, i - start);
        if (final && t->carry_len) {
                r |= strbuf_append(&t->buf, repl, 3);
                t->carry_len = 0;
        }
        return r < 0 ? -ENOBUFS : 0;
}

/* ---- exec plumbing ---- */

struct run {
        struct ctl *c;
        struct driver *drv;
        struct sandbox sb;
        struct exec_session *s;
        char token[25];
        int64_t t0, deadline;
        bool timed_out, killed, finished, client_gone;
        bool oom_killed;              /* the sandbox's memory limit killed the command */
        int exit_code;
        bool slot;
        /* non-streamed */
        struct text out, err;
        /* streamed */
        bool stream;
        struct strbuf pending;
        size_t pending_off;
        struct text sout, serr;       /* per-stream carries for frames */
        int client_fd;
        int64_t last_sent;            /* for keep-alives */
        bool counted;                 /* in ctl->streams_running */
        bool overflow;                /* stream frames not yet sent passed STREAM_PENDING_CAP */
};


static void kill_tree(struct run *x) {
        const char *argv[] = { "/bin/sh", "-c", killer_script, "paddock", x->token, NULL };
        struct exec_spec spec = { .argv = argv };
        struct exec_session *k = NULL;
        char err[256];
        if (x->killed)
                return;
        x->killed = true;
        if (x->drv->ops->exec_start(x->drv, &x->sb, &spec, &k, err, sizeof(err)) < 0) {
                log_warning("could not start the process killer: %s", err);
                return;
        }
        int64_t end = mono_ms() + 10000;
        while (mono_ms() < end && x->drv->ops->exec_read(k, 1000, -1, NULL, NULL) == 0)
                ;
        x->drv->ops->exec_free(k);
}

static struct run *run_free(struct run *x) {
        if (!x)
                return NULL;
        if (x->s && !x->finished && !x->killed)
                kill_tree(x);
        if (x->s)
                x->drv->ops->exec_free(x->s);
        if (x->slot)
                runtime_slots_release(&x->sb);
        strbuf_done(&x->out.buf);
        strbuf_done(&x->err.buf);
        strbuf_done(&x->sout.buf);
        strbuf_done(&x->serr.buf);
        strbuf_done(&x->pending);
        sandbox_clear(&x->sb);
        free(x);
        return NULL;
}

/* Queues one SSE frame, "data: <o>\n\n" (o consumed). */
static void queue_frame(struct run *x, cJSON *o) {
        _cleanup_free_ char *j = json_print(o);
        cJSON_Delete(o);
        strbuf_append(&x->pending, "data: ", 6);
        strbuf_append(&x->pending, j, strlen(j));
        strbuf_append(&x->pending, "\n\n", 2);
}

/* Queues the stream's last frame, an error saying message. */
static void queue_error_frame(struct run *x, const char *message) {
        queue_frame(x, exec_error_frame_to_json(message));
        x->finished = true;
}

static int on_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct run *x = ud;
        if (!x->stream) {
                (void) text_append(stream == 1 ? &x->out : &x->err, data, len, false);  /* past the cap: truncated flag */
                return 0;
        }
        if (x->overflow || x->pending.len > STREAM_PENDING_CAP) {
                x->overflow = true;
                return -ENOBUFS;  /* ends the exec_write/exec_read under way */
        }
        struct text *t = stream == 1 ? &x->sout : &x->serr;
        strbuf_done(&t->buf);
        strbuf_init(&t->buf, 0);
        text_append(t, data, len, false);
        if (t->buf.len)
                queue_frame(x, exec_output_frame_to_json(stream == 1 ? "stdout" : "stderr", t->buf.buf, t->buf.len));
        return 0;
}

/* A capped buffer may end inside a character: drop the incomplete tail. */
static void trim_partial_utf8(struct strbuf *b) {
        if (!b->truncated || !b->buf)
                return;
        size_t n = b->len, back = 0;
        while (back < 4 && back < n && ((uint8_t) b->buf[n - 1 - back] & 0xc0) == 0x80)
                back++;
        if (back < n) {
                size_t start = n - 1 - back;
                size_t want = utf8_seq_len((uint8_t) b->buf[start]);
                if (want > 1 && want > back + 1)
                        b->len = start;
        }
        b->buf[b->len] = 0;
}

static void flush_carries(struct run *x) {
        if (!x->stream) {
                text_append(&x->out, NULL, 0, true);
                text_append(&x->err, NULL, 0, true);
                trim_partial_utf8(&x->out.buf);
                trim_partial_utf8(&x->err.buf);
                return;
        }
        for (int k = 1; k <= 2; k++) {
                struct text *t = k == 1 ? &x->sout : &x->serr;
                if (!t->carry_len)
                        continue;
                strbuf_done(&t->buf);
                strbuf_init(&t->buf, 0);
                text_append(t, NULL, 0, true);
                queue_frame(x, exec_output_frame_to_json(k == 1 ? "stdout" : "stderr", t->buf.buf, t->buf.len));
        }
}

/* After the deadline: kill the tree and drain what is left (bounded). */
static void time_out(struct run *x) {
        x->timed_out = true;
        log_ctx_set("SANDBOX_ID", x->sb.id);
        log_notice("exec reached its %llds limit; killing its process tree",
                   (long long) ((x->deadline - x->t0) / 1000));
        kill_tree(x);
        int64_t end = mono_ms() + DRAIN_AFTER_KILL_MS;
        while (mono_ms() < end) {
                int r = x->drv->ops->exec_read(x->s, 500, -1, on_output, x);
                if (r != 0)
                        break;
        }
}

static void finish(struct run *x) {
        flush_carries(x);
        if (x->timed_out)
                x->exit_code = 137;
        else if (x->drv->ops->exec_exit_code(x->s, &x->exit_code) < 0)
                x->exit_code = -1;
        if (!x->timed_out && x->exit_code != 0 && x->drv->ops->exec_oom_killed && x->drv->ops->exec_oom_killed(x->s) > 0) {
                x->oom_killed = true;
                x->exit_code = 137;
                log_ctx_set("SANDBOX_ID", x->sb.id);
                log_warning("exec killed: the sandbox ran out of memory (limit %lld MB)", (long long) x->sb.memory);
        }
        x->finished = true;
}

static void fill_exec_spec(struct exec_spec *spec, const char **argv, char **env_kv, const char *cwd, bool want_stdin) {
        spec->argv = argv;
        spec->env = (const char *const *) env_kv;
        spec->cwd = cwd;
        spec->want_stdin = want_stdin;
}

static char **env_list(char **keys, char **values, size_t n) {
        char **v = xnew0(char *, n + 1);
        for (size_t i = 0; i < n; i++)
                v[i] = xasprintf("%s=%s", keys[i], values[i]);
        return v;
}

/* Loads a ready sandbox for a runtime call; answers the error itself. */
static int runtime_sandbox(struct req *r, const char *id, struct sandbox *ret) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        struct api_error e = { 0 };
        int k = sandbox_load(r->c, &r->acc, id, &sb, &e);
        if (k >= 0 && sb.status != SB_READY)
                k = API_ERR(&e, -EBUSY, "Sandbox is %s; only ready sandboxes can run commands or move files",
                            sb_status_str(sb.status));
        if (k < 0) {
                (void) respond_errno(r, k, &e);
                return k;
        }
        log_ctx_set("SANDBOX_ID", id);
        (void) store_sandbox_touch(r->c->store, id, now_ms());  /* activity stamp only: best effort */
        *ret = sb;
        sb = (struct sandbox) { 0 };
        return 0;
}

static struct run *run_new(struct req *r, struct sandbox *sb) {
        struct run *x = xnew0(struct run, 1);
        x->c = r->c;
        x->drv = r->c->drv;
        x->sb = *sb;
        memset(sb, 0, sizeof(*sb));
        hexid_new(x->token);
        strbuf_init(&x->out.buf, r->c->cfg->max_exec_output);
        strbuf_init(&x->err.buf, r->c->cfg->max_exec_output);
        strbuf_init(&x->pending, 0);
        x->client_fd = -1;
        return x;
}

/* ---- exec and code ---- */

/* Copies up to max bytes of b from *off into buf for a content reader; once all of b is
 * out, b is emptied (kept allocated) for the next chunk. Returns the bytes copied. */
static size_t drain_to(struct strbuf *b, size_t *off, char *buf, size_t max) {
        size_t n = b->len - *off;
        if (n > max)
                n = max;
        memcpy(buf, b->buf + *off, n);
        *off += n;
        if (*off == b->len)
                b->len = *off = 0;
        return n;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        struct run *x = cls;
        (void) pos;
        for (;;) {
                if (x->pending_off < x->pending.len)
                        return (ssize_t) drain_to(&x->pending, &x->pending_off, buf, max);
                if (x->finished)
                        return MHD_CONTENT_READER_END_OF_STREAM;
                if (x->c->stopping) {
                        /* Shutdown must not wait for a command that may run for minutes. */
                        kill_tree(x);
                        queue_error_frame(x, "controld is shutting down; the command was stopped");
                        continue;
                }
                /* Short waits so shutdown and deadlines are noticed within a second. */
                int64_t now = mono_ms();
                int64_t wait = x->deadline - now;
                if (wait > 1000)
                        wait = 1000;
                if (wait < 0)
                        wait = 0;
                int k = x->drv->ops->exec_read(x->s, (int) wait, x->client_fd, on_output, x);
                if (k == -ECONNRESET) {
                        x->client_gone = true;
                        log_info("client went away during a streamed exec; killing it");
                        kill_tree(x);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (k < 0) {
                        queue_error_frame(x, x->overflow ? "The command's output outran the client; it was stopped"
                                                         : "Lost the connection to the sandbox process");
                        kill_tree(x);
                        continue;
                }
                if (k == 1) {
                        finish(x);
                } else if (mono_ms() >= x->deadline) {
                        time_out(x);
                        finish(x);
                } else if (x->pending.len == 0) {
                        if (mono_ms() - x->last_sent >= (int64_t) x->c->cfg->stream_keepalive_ms) {
                                strbuf_append(&x->pending, ": keep-alive\n\n", 14);
                                x->last_sent = mono_ms();
                        }
                        continue;
                } else {
                        x->last_sent = mono_ms();
                        continue;
                }
                struct exec_result res = { .exit_code = x->exit_code, .duration_ms = mono_ms() - x->t0,
                                           .timed_out = x->timed_out, .oom_killed = x->oom_killed };
                queue_frame(x, exec_done_frame_to_json(&res));
        }
}

static void stream_free(void *cls) {
        struct run *x = cls;
        if (x->counted) {
                pthread_mutex_lock(&x->c->jobs_lock);
                x->c->streams_running--;
                pthread_cond_broadcast(&x->c->jobs_cond);
                pthread_mutex_unlock(&x->c->jobs_lock);
        }
        if (!x->finished && !x->killed) {
                log_info("streamed exec ended before the process; killing it");
                kill_tree(x);
        }
        run_free(x);
}

/* Runs argv (optionally feeding stdin_data into the file stdin_file first) and answers
 * JSON or SSE. env ("K=V", NULL-terminated, may be NULL) applies to argv only.
 * token: the exec's token (names its pid record and any snippet file), NULL = a fresh one. */
static enum MHD_Result run_and_respond(struct req *r, struct sandbox *sb, const char *token, const char **user_argv, char **env,
                                       const char *cwd, int timeout_s, bool stream, const char *stdin_file,
                                       const char *stdin_data, size_t stdin_len) {
        struct ctl *c = r->c;
        struct run *x;
        char err[512] = "";
        size_t n = 0, n_env = 0, n_user = 0;
        char n_env_s[16];

        if (runtime_slots_take(c, sb, err, sizeof(err)) < 0) {
                sandbox_clear(sb);
                return respond_error(r, 429, "%s", err);
        }
        x = run_new(r, sb);
        if (token)
                snprintf(x->token, sizeof(x->token), "%s", token);
        x->slot = true;
        x->stream = stream;
        while (env && env[n_env])
                n_env++;
        while (user_argv[n_user])
                n_user++;
        snprintf(n_env_s, sizeof(n_env_s), "%zu", n_env);
        _cleanup_free_ const char **argv = xnew0(const char *, 9 + n_env + n_user);
        argv[n++] = "/bin/sh";
        argv[n++] = "-c";
        argv[n++] = wrapper_script;
        argv[n++] = "paddock";
        argv[n++] = x->token;
        argv[n++] = cwd ? cwd : "/";
        argv[n++] = stdin_file ? stdin_file : "";
        argv[n++] = n_env_s;
        for (size_t i = 0; i < n_env; i++)
                argv[n++] = env[i];
        for (size_t i = 0; i < n_user; i++)
                argv[n++] = user_argv[i];
        argv[n] = NULL;

        struct exec_spec spec;
        fill_exec_spec(&spec, argv, NULL, "/", stdin_data != NULL);
        x->t0 = mono_ms();
        x->deadline = x->t0 + (int64_t) timeout_s * 1000;
        if (x->drv->ops->exec_start(x->drv, &x->sb, &spec, &x->s, err, sizeof(err)) < 0) {
                run_free(x);
                return respond_error(r, 503, "Could not run the command: %s", err);
        }
        if (stdin_data) {
                int k = x->drv->ops->exec_write(x->s, stdin_data, stdin_len, STDIN_WRITE_TIMEOUT_MS, on_output, x);
                if (x->overflow) {
                        /* Output while the input was still going in, more than we keep: stop it. */
                        log_notice("exec wrote more than %zu bytes before its input was sent; killing it", STREAM_PENDING_CAP);
                        kill_tree(x);
                        strbuf_done(&x->pending);
                        strbuf_init(&x->pending, 0);
                        char msg[200];
                        snprintf(msg, sizeof(msg),
                                 "The command wrote more than %zu bytes of output before its input was sent; it was stopped",
                                 STREAM_PENDING_CAP);
                        queue_error_frame(x, msg);
                } else if (k < 0 && k != -EPIPE) {
                        run_free(x);
                        return respond_error(r, 503, "Could not send input to the sandbox: %s", strerror(-k));
                }
                x->drv->ops->exec_close_stdin(x->s);
        }

        if (stream) {
                /* The reader waits inside its callback for output (up to a keep-alive), which
                 * the server's idle timeout would take for a dead connection and cut. The exec's
                 * own deadline (plus the time to say goodbye) bounds this connection instead; a
                 * client that goes away is still noticed at once through client_fd. */
                (void) MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                                                 (unsigned) timeout_s + 30u +
                                                         (unsigned) (c->cfg->stream_keepalive_ms / 1000));
                const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
                x->client_fd = ci ? ci->connect_fd : -1;
                /* on_output may have used them while stdin was written: free, not just reset. */
                strbuf_done(&x->sout.buf);
                strbuf_done(&x->serr.buf);
                /* Frames produced while writing stdin come after the opening comment. */
                struct strbuf early = x->pending;
                strbuf_init(&x->pending, 0);
                strbuf_append(&x->pending, ": open\n\n", 8);
                if (early.len)
                        strbuf_append(&x->pending, early.buf, early.len);
                strbuf_done(&early);
                x->last_sent = mono_ms();
                pthread_mutex_lock(&c->jobs_lock);
                c->streams_running++;
                x->counted = true;
                pthread_mutex_unlock(&c->jobs_lock);
                struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, x,
                                                                              stream_free);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
                MHD_add_response_header(resp, "X-Accel-Buffering", "no");
                return respond_response(r, 200, resp);
        }

        for (;;) {
                int64_t wait = x->deadline - mono_ms();
                if (c->stopping) {
                        kill_tree(x);
                        run_free(x);
                        return respond_error(r, 503, "controld is shutting down; the command was stopped. Retry shortly.");
                }
                if (wait <= 0) {
                        time_out(x);
                        break;
                }
                int k = x->drv->ops->exec_read(x->s, (int) (wait > 1000 ? 1000 : wait), -1, on_output, x);
                if (k == 1)
                        break;
                if (k < 0) {
                        run_free(x);
                        return respond_error(r, 503, "Lost the connection to the sandbox process: %s", strerror(-k));
                }
        }
        finish(x);
        struct exec_result res = {
                .out = x->out.buf.buf, .out_len = x->out.buf.len, .err = x->err.buf.buf, .err_len = x->err.buf.len,
                .exit_code = x->exit_code, .duration_ms = mono_ms() - x->t0,
                .out_truncated = x->out.buf.truncated, .err_truncated = x->err.buf.truncated, .timed_out = x->timed_out,
                .oom_killed = x->oom_killed,
        };
        cJSON *d = exec_result_to_json(&res);
        bool timed_out = x->timed_out, oom = x->oom_killed;
        run_free(x);
        return respond_envelope(r, 200,
                                oom         ? OOM_MESSAGE
                                : timed_out ? "Command timed out and was killed"
                                            : "Exec completed",
                                d);
}

/* exec and code once their bodies parsed: the caller's sandbox of the route, then
 * run_and_respond() with the request's cwd, env, timeout and stream. */
static enum MHD_Result run_request(struct req *r, const struct pj_run *run, const char *token, const char **argv,
                                   const char *stdin_file, const char *stdin_data, size_t stdin_len) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };  /* moved into the run when one starts */
        if (runtime_sandbox(r, r->m.id, &sb) < 0)
                return MHD_YES;
        _cleanup_(strv_freep) char **env = env_list(run->env_keys, run->env_values, run->n_env);
        return run_and_respond(r, &sb, token, argv, env, run->cwd, run->timeout_s, run->stream, stdin_file, stdin_data,
                               stdin_len);
}

enum MHD_Result runtime_post_exec(struct req *r) {
        _cleanup_(pj_exec_done) struct pj_exec in = { 0 };
        struct pj_error pe = { 0 };
        if (pj_exec_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return respond_error(r, 400, "%s", pe.message);
        const char *argv[] = { "/bin/sh", "-c", in.cmd, NULL };
        return run_request(r, &in.run, NULL, argv, NULL, NULL, 0);
}

enum MHD_Result runtime_post_code(struct req *r) {
        _cleanup_(pj_code_done) struct pj_code in = { 0 };
        struct pj_error pe = { 0 };
        if (pj_code_parse(r->body.buf, r->body.len, &in, &pe) < 0)
                return respond_error(r, 400, "%s", pe.message);
        bool py = !strcmp(in.language, "python");
        char tok[25], path[64];
        hexid_new(tok);
        snprintf(path, sizeof(path), "/tmp/.paddock-code-%s.%s", tok, py ? "py" : "js");
        const char *argv[] = { py ? "python3" : "node", path, NULL };
        return run_request(r, &in.run, tok, argv, path, in.code, strlen(in.code));
}

/* ---- files ---- */

struct upload {
        struct run *x;
        uint64_t received, limit;
        bool too_large, process_gone, timed_out;
        int error;
        char path[4097];
};

static int upload_sink(struct req *r, const char *data, size_t len) {
        struct upload *u = r->sink_ud;
        if (len == (size_t) -1)
                return 0;  /* client went away: sink_free kills the exec */
        u->received += len;
        if (u->received > u->limit) {
                u->too_large = true;
                return -EFBIG;
        }
        if (u->timed_out)
                return -ETIMEDOUT;
        if (mono_ms() > u->x->deadline) {
                /* A slow drip may not hold an exec and a slot for ever: both go now, the
                 * rest of the body is read and dropped. */
                u->timed_out = true;
                u->x = run_free(u->x);
                return -ETIMEDOUT;
        }
        if (u->process_gone)
                return 0;  /* discard: the answer is already decided */
        int k = u->x->drv->ops->exec_write(u->x->s, data, len, STDIN_WRITE_TIMEOUT_MS, on_output, u->x);
        if (k == -EPIPE) {
                u->process_gone = true;
                return 0;
        }
        if (k < 0) {
                u->error = k;
                return k;
        }
        return 0;
}

static void upload_free(void *ud) {
        struct upload *u = ud;
        if (!u)
                return;
        run_free(u->x);
        free(u);
}

/* Reads to the end of the file exec and returns its exit code (or < 0). */
static int finish_file_exec(struct run *x) {
        int64_t end = mono_ms() + FILE_FINISH_TIMEOUT_MS;
        for (;;) {
                if (mono_ms() > end || x->c->stopping) {
                        kill_tree(x);
                        return -ETIMEDOUT;
                }
                int k = x->drv->ops->exec_read(x->s, 1000, -1, on_output, x);
                if (k == 1)
                        break;
                if (k < 0)
                        return k;
        }
        finish(x);
        return x->exit_code;
}

static int put_error(int code, const char *path, const char *stderr_raw, char *msg, size_t msglen) {
        char dir[4097], stderr_buf[ERR_CAP + 1];
        const char *stderr_text = NULL;
        if (stderr_raw) {
                /* One line for the message: newlines folded, trailing ones dropped. */
                snprintf(stderr_buf, sizeof(stderr_buf), "%s", stderr_raw);
                size_t n = strlen(stderr_buf);
                while (n && (stderr_buf[n - 1] == '\n' || stderr_buf[n - 1] == '\r'))
                        stderr_buf[--n] = 0;
                for (char *q = stderr_buf; *q; q++)
                        if (*q == '\n' || *q == '\r')
                                *q = ' ';
                stderr_text = stderr_buf;
        }
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir)
                *slash = 0;
        else
                snprintf(dir, sizeof(dir), "/");
        switch (code) {
        case 0:
                return 0;
        case 3:
                snprintf(msg, msglen, "Destination directory does not exist: %s", dir);
                return 400;
        case 5:
                snprintf(msg, msglen, "Destination is a directory: %s", path);
                return 400;
        case 6:
                snprintf(msg, msglen, "Destination is not a regular file (device, pipe or socket): %s", path);
                return 400;
        default:
                if (stderr_text && (strstr(stderr_text, "ermission denied") || strstr(stderr_text, "ead-only") ||
                                    strstr(stderr_text, "not permitted") ||
                                    (strstr(stderr_text, "Input/output error") &&
                                     (startswith(path, "/proc/") || startswith(path, "/sys/"))))) {
                        snprintf(msg, msglen, "Permission denied writing to %s", path);
                        return 403;
                }
                if (stderr_text && strstr(stderr_text, "space")) {
                        snprintf(msg, msglen, "No space left in the sandbox writing %s", path);
                        return 507;
                }
                snprintf(msg, msglen, "Failed to write %s: %s", path, stderr_text && *stderr_text ? stderr_text : "unknown error");
                return 500;
        }
}

/* Starts the fixed file script; on failure answers the request unless quiet. */
static int start_file_exec(struct req *r, struct sandbox *sb, const char *script, const char *path, bool want_stdin, bool quiet,
                           struct run **ret) {
        char err[512] = "";
        if (runtime_slots_take(r->c, sb, err, sizeof(err)) < 0) {
                if (!quiet)
                        respond_error(r, 429, "%s", err);
                return -EUSERS;
        }
        struct run *x = run_new(r, sb);
        x->slot = true;
        x->deadline = mono_ms() + (int64_t) r->c->cfg->transfer_timeout_s * 1000;
        strbuf_done(&x->err.buf);
        strbuf_init(&x->err.buf, ERR_CAP);
        const char *argv[] = { "/bin/sh", "-c", wrapper_script, "paddock", x->token, "/", "", "0", "/bin/sh", "-c", script, "paddock", path, NULL };
        struct exec_spec spec;
        fill_exec_spec(&spec, argv, NULL, "/", want_stdin);
        if (x->drv->ops->exec_start(x->drv, &x->sb, &spec, &x->s, err, sizeof(err)) < 0) {
                run_free(x);
                if (!quiet)
                        respond_error(r, 503, "Could not reach the sandbox: %s", err);
                return -EIO;
        }
        *ret = x;
        return 0;
}

/* The route's prepare hook: runs on the headers, before any body byte. */
enum MHD_Result runtime_prepare_put_file(struct req *r) {
        const char *id = r->m.id, *path = r->m.rest;
        struct ctl *c = r->c;
        struct pj_error pe = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };  /* moved into the run when one starts */
        const char *cl = req_header(r, MHD_HTTP_HEADER_CONTENT_LENGTH);
        int64_t len = -1;

        if (pj_sandbox_path_check(path, &pe, "path") < 0)
                return respond_error(r, 400, "%s", pe.message);
        if (cl && (safe_atoi64(cl, &len) < 0 || len < 0))
                return respond_error(r, 400, "Content-Length must be a non-negative integer");
        if (len >= 0 && (uint64_t) len > c->cfg->max_file)
                return respond_error(r, 413, "File too large: %lld bytes, the limit is %llu bytes", (long long) len,
                                     (unsigned long long) c->cfg->max_file);
        if (runtime_sandbox(r, id, &sb) < 0)
                return MHD_YES;
        struct upload *u = xnew0(struct upload, 1);
        u->limit = c->cfg->max_file;
        snprintf(u->path, sizeof(u->path), "%s", path);
        if (start_file_exec(r, &sb, put_script, path, true, false, &u->x) < 0) {
                free(u);
                return MHD_YES;
        }
        r->sink = upload_sink;
        r->sink_ud = u;
        r->sink_free = upload_free;
        return MHD_YES;
}

enum MHD_Result runtime_put_file(struct req *r) {
        struct upload *u = r->sink_ud;
        if (!u)
                return respond_error(r, 500, "Upload was not prepared");
        char msg[4600];
        if (u->too_large)
                return respond_error(r, 413, "File too large: the limit is %llu bytes", (unsigned long long) u->limit);
        if (u->timed_out)
                return respond_error(r, 408, "Upload of %s took longer than %llu s (transfer_timeout); it was abandoned", u->path,
                                     (unsigned long long) r->c->cfg->transfer_timeout_s);
        if (u->error)
                return respond_error(r, 503, "Failed to send the file to the sandbox: %s", strerror(-u->error));
        u->x->drv->ops->exec_close_stdin(u->x->s);
        int code = finish_file_exec(u->x);
        if (code < 0)
                return respond_error(r, 503, "The sandbox did not finish writing %s: %s", u->path, strerror(-code));
        int st = put_error(code, u->path, u->x->err.buf.buf, msg, sizeof(msg));
        if (st)
                return respond_error(r, st, "%s", msg);
        if (u->process_gone)
                return respond_error(r, 500, "The sandbox stopped reading %s before the upload ended", u->path);
        return respond_empty(r, 204);
}

struct download {
        struct run *x;
        struct strbuf first;
        size_t off;
        bool eof;
        int client_fd;
};

static int dl_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct download *d = ud;
        if (stream == 2)
                return text_append(&d->x->err, data, len, false), 0;
        return strbuf_append(&d->first, data, len) < 0 ? -ENOBUFS : 0;
}

static ssize_t dl_reader(void *cls, uint64_t pos, char *buf, size_t max) {
        struct download *d = cls;
        (void) pos;
        for (;;) {
                if (d->off < d->first.len)
                        return (ssize_t) drain_to(&d->first, &d->off, buf, max);
                if (d->eof) {
                        d->x->finished = true;
                        return MHD_CONTENT_READER_END_OF_STREAM;
                }
                if (d->x->c->stopping)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                if (mono_ms() > d->x->deadline) {
                        /* A slow reader may not hold a slot and an exec for ever. */
                        log_notice("download took longer than %llu s (transfer_timeout); closing it",
                                   (unsigned long long) d->x->c->cfg->transfer_timeout_s);
                        kill_tree(d->x);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                int k = d->x->drv->ops->exec_read(d->x->s, 1000, d->client_fd, dl_output, d);
                if (k == 0)
                        continue;
                if (k == 1)
                        d->eof = true;
                else if (k < 0)
                        return MHD_CONTENT_READER_END_WITH_ERROR;
        }
}

static void dl_free(void *cls) {
        struct download *d = cls;
        run_free(d->x);
        strbuf_done(&d->first);
        free(d);
}

enum MHD_Result runtime_get_file(struct req *r) {
        const char *id = r->m.id, *path = r->m.rest;
        struct pj_error pe = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };  /* moved into the run when one starts */
        if (pj_sandbox_path_check(path, &pe, "path") < 0)
                return respond_error(r, 400, "%s", pe.message);
        if (runtime_sandbox(r, id, &sb) < 0)
                return MHD_YES;
        struct download *d = xnew0(struct download, 1);
        strbuf_init(&d->first, 0);
        if (start_file_exec(r, &sb, get_script, path, false, false, &d->x) < 0) {
                strbuf_done(&d->first);
                free(d);
                return MHD_YES;
        }
        /* Wait for the first bytes or the end, so a missing file is a real 404. */
        int64_t end = mono_ms() + 60000;
        while (d->first.len == 0 && !d->eof) {
                int k = d->x->drv->ops->exec_read(d->x->s, 1000, -1, dl_output, d);
                if (k == 1)
                        d->eof = true;
                else if (k < 0 || mono_ms() > end) {
                        dl_free(d);
                        return respond_error(r, 503, "Lost the connection to the sandbox reading %s", path);
                }
        }
        if (d->eof) {
                int code = -1;
                (void) d->x->drv->ops->exec_exit_code(d->x->s, &code);  /* unknown stays -1: "Failed to read" */
                d->x->finished = true;
                const char *e = d->x->err.buf.buf ? d->x->err.buf.buf : "";
                enum MHD_Result res;
                if (code == 3)
                        res = respond_error(r, 404, "File not found: %s", path);
                else if (code == 5)
                        res = respond_error(r, 400, "Path is a directory: %s", path);
                else if (code == 6)
                        res = respond_error(r, 400, "Path is not a regular file (device, pipe or socket): %s", path);
                else if (code == 4 || strstr(e, "ermission denied"))
                        res = respond_error(r, 403, "Permission denied reading %s", path);
                else if (code != 0)
                        res = respond_error(r, 500, "Failed to read %s: %s", path, *e ? e : "unknown error");
                else
                        res = respond_raw(r, 200, "application/octet-stream", d->first.buf, d->first.len);
                dl_free(d);
                return res;
        }
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        d->client_fd = ci ? ci->connect_fd : -1;
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, dl_reader, d, dl_free);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
        return respond_response(r, 200, resp);
}

enum MHD_Result runtime_post_batch(struct req *r) {
        const char *id = r->m.id;
        struct ctl *c = r->c;
        _cleanup_(pj_files_batch_done) struct pj_files_batch in = { 0 };
        struct pj_error pe = { 0 };
        _cleanup_sandbox_ struct sandbox sb = { 0 };  /* moved into the run when one starts */
        int uploaded = 0, failed = 0;

        if (pj_files_batch_parse(r->body.buf, r->body.len, c->cfg->max_file, c->cfg->max_body, &in, &pe) < 0)
                return respond_error(r, 400, "%s", pe.message);
        if (runtime_sandbox(r, id, &sb) < 0)
                return MHD_YES;
        cJSON *results = cJSON_CreateArray();
        for (size_t i = 0; i < in.n_files; i++) {
                struct pj_batch_file *f = &in.files[i];
                char msg[4600] = "";
                int k;
                if (in.file_errors[i])
                        snprintf(msg, sizeof(msg), "%s", in.file_errors[i]);
                else {
                        _cleanup_sandbox_ struct sandbox copy = { 0 };
                        struct run *x = NULL;
                        if (store_sandbox_get(c->store, id, &copy) < 0)
                                snprintf(msg, sizeof(msg), "Sandbox record vanished");
                        else if ((k = start_file_exec(r, &copy, put_script, f->path, true, true, &x)) < 0) {
                                snprintf(msg, sizeof(msg), "%s",
                                         k == -EUSERS ? "Too many commands or transfers running; retry when one finishes"
                                                      : "Could not reach the sandbox");
                        } else {
                                k = f->len ? x->drv->ops->exec_write(x->s, f->data, f->len, STDIN_WRITE_TIMEOUT_MS, on_output, x) : 0;
                                x->drv->ops->exec_close_stdin(x->s);
                                int code = finish_file_exec(x);
                                if (code < 0)
                                        snprintf(msg, sizeof(msg), "The sandbox did not finish writing: %s", strerror(-code));
                                else if (put_error(code, f->path, x->err.buf.buf, msg, sizeof(msg)) == 0 && k < 0)
                                        snprintf(msg, sizeof(msg), "Failed to send the file: %s", strerror(-k));
                                run_free(x);
                        }
                }
                if (msg[0])
                        failed++;
                else
                        uploaded++;
                cJSON_AddItemToArray(results, batch_file_to_json(f->path, f->len, msg[0] ? msg : NULL));
        }
        return respond_envelope(r, 200, failed ? "Some files failed to upload" : "Files uploaded",
                                batch_summary_to_json(uploaded, failed, results));
}
