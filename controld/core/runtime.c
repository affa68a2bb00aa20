/* runtime.c — the runtime core: a command or a file transfer in a sandbox. A command's process
 * is a session (session.h) through the sandbox's agent, or the scheduler driver's exec path
 * where no agent answers. It knows no HTTP: every call returns 0 or -errno with a
 * user-facing message in struct err, and the protocol adapters above it (api-runtime.c
 * for the Brimble REST/SSE API) turn those into answers.
 *
 * Nothing here touches the host filesystem or a host shell: every operation is an exec
 * inside the sandbox with a fixed script and the user's strings passed as separate argv
 * entries. Each exec records its process id in the sandbox so a timeout or a vanished
 * client can kill the whole process tree.
 *
 * About 900 lines: one run type serves commands and file transfers on both paths (the agent
 * and the driver's exec), and its state machine reads best in one place.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest-exec.h"
#include "guest.h"
#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "log.h"
#include "session.h"
#include "strutil.h"
#include "utf8-carry.h"
#include "runtime.h"
#include "sandbox.h"

#define DRAIN_AFTER_KILL_MS 5000
#define STDIN_WRITE_TIMEOUT_MS 60000
#define FILE_FINISH_TIMEOUT_MS 120000
#define ERR_CAP 4096

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
 * code, file transfer). 0, or -EUSERS with the user-facing message in err. */
static int runtime_slots_take(struct ctl *c, const struct sandbox *sb, struct err *err) {
        if (!slot_take(&account_slots, sb->account_id, c->cfg->max_runtime_per_account))
                return err_set(err, -EUSERS,
                               "Too many commands and file transfers running for this account (limit %lld); retry when one finishes",
                               (long long) c->cfg->max_runtime_per_account);
        if (!slot_take(&sandbox_slots, sb->id, c->cfg->max_exec_concurrent)) {
                slot_release(&account_slots, sb->account_id);
                return err_set(err, -EUSERS, "Too many commands running in this sandbox (limit %lld); retry when one finishes",
                               (long long) c->cfg->max_exec_concurrent);
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
        struct utf8_carry carry;
};

/* Appends bytes as valid UTF-8 (utf8-carry.h). Returns -ENOBUFS past the cap. */
static int text_append(struct text *t, const uint8_t *data, size_t len, bool final) {
        return utf8_carry_append(&t->carry, &t->buf, data, len, final);
}

/* ---- a run: one exec of a fixed script ---- */

struct runtime_run {
        struct ctl *c;
        struct driver *drv;
        struct sandbox sb;
        struct session *ses;          /* a process (through the agent or the driver's exec path), or */
        struct guest_file *af;        /* a file transfer through the agent */
        char *snippet;                /* code file written through the agent, removed at the end */
        char token[25];
        int64_t t0, deadline;
        bool timed_out, killed, finished, client_gone;
        bool oom_killed;              /* the sandbox's memory limit killed the command */
        int exit_code;
        bool slot;
        /* buffered: the output kept for the result */
        struct text out, err;
        /* streamed: each chunk goes to the caller's output function as it comes */
        runtime_output_fn output;
        void *output_ud;
        struct text sout, serr;       /* per-stream carries */
        bool overflow;                /* the output function took no more */
        /* file reads: bytes read ahead of the caller */
        struct strbuf data;
        size_t data_off;
        bool data_eof;
};

/* The session of a run, whichever transport carries it. */
static int rx_read(struct runtime_run *x, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud) {
        if (x->af)
                return guest_file_read(x->af, timeout_ms, watch_fd, cb, ud);
        return session_read(x->ses, timeout_ms, watch_fd, cb, ud);
}

static int rx_write(struct runtime_run *x, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud) {
        if (x->af)
                return guest_file_write(x->af, data, len, timeout_ms);
        return session_write(x->ses, data, len, timeout_ms, cb, ud);
}

static void rx_close_stdin(struct runtime_run *x) {
        if (x->ses)
                (void) session_close_stdin(x->ses);
}

static int rx_exit_code(struct runtime_run *x, int *ret) {
        return x->ses ? session_exit_code(x->ses, ret) : -ESRCH;
}

static bool rx_active(const struct runtime_run *x) { return x->ses || x->af; }

/* A snippet written through the agent goes when its run does (best effort, bounded). */
static void snippet_remove(struct runtime_run *x) {
        if (!x->snippet)
                return;
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        struct err msg = { 0 };
        if (guest_connect(x->c, &x->sb, &cl, &msg) == 0)
                (void) guest_remove(cl, x->snippet, 5000);
        free(x->snippet);
        x->snippet = NULL;
}

static void kill_tree(struct runtime_run *x) {
        if (x->killed)
                return;
        if (x->af || (x->ses && session_signals(x->ses))) {
                /* the agent's process group (the whole tree unless a process left it with setsid)
                 * dies; a transfer just ends with its connection */
                x->killed = true;
                if (x->ses)
                        (void) session_signal(x->ses, SIGKILL);
                return;
        }
        const char *argv[] = { "/bin/sh", "-c", killer_script, "paddock", x->token, NULL };
        struct exec_spec spec = { .argv = argv };
        struct exec_session *k = NULL;
        struct err err = { 0 };
        x->killed = true;
        if (x->drv->ops->exec_start(x->drv, &x->sb, &spec, &k, &err) < 0) {
                log_warning("could not start the process killer: %s", err.message);
                return;
        }
        int64_t end = mono_ms() + 10000;
        while (mono_ms() < end && x->drv->ops->exec_read(k, 1000, -1, NULL, NULL) == 0)
                ;
        x->drv->ops->exec_free(k);
}

void runtime_kill(struct runtime_run *x) {
        kill_tree(x);
}

bool runtime_ended(const struct runtime_run *x) {
        return x->finished || x->killed;
}

struct runtime_run *runtime_free(struct runtime_run *x) {
        if (!x)
                return NULL;
        if (rx_active(x) && !x->finished && !x->killed)
                kill_tree(x);
        session_free(x->ses);
        guest_file_free(x->af);
        snippet_remove(x);
        if (x->slot)
                runtime_slots_release(&x->sb);
        strbuf_done(&x->out.buf);
        strbuf_done(&x->err.buf);
        strbuf_done(&x->sout.buf);
        strbuf_done(&x->serr.buf);
        strbuf_done(&x->data);
        sandbox_clear(&x->sb);
        free(x);
        return NULL;
}

static int on_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct runtime_run *x = ud;
        if (!x->output) {
                (void) text_append(stream == 1 ? &x->out : &x->err, data, len, false);  /* past the cap: truncated flag */
                return 0;
        }
        if (x->overflow)
                return -ENOBUFS;  /* ends the exec_write/exec_read under way */
        struct text *t = stream == 1 ? &x->sout : &x->serr;
        strbuf_done(&t->buf);
        strbuf_init(&t->buf, 0);
        text_append(t, data, len, false);
        if (t->buf.len && x->output(x->output_ud, stream, t->buf.buf, t->buf.len) < 0) {
                x->overflow = true;
                return -ENOBUFS;
        }
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
                size_t want = utf8_lead_len((uint8_t) b->buf[start]);
                if (want > 1 && want > back + 1)
                        b->len = start;
        }
        b->buf[b->len] = 0;
}

static void flush_carries(struct runtime_run *x) {
        if (!x->output) {
                text_append(&x->out, NULL, 0, true);
                text_append(&x->err, NULL, 0, true);
                trim_partial_utf8(&x->out.buf);
                trim_partial_utf8(&x->err.buf);
                return;
        }
        for (int k = 1; k <= 2; k++) {
                struct text *t = k == 1 ? &x->sout : &x->serr;
                if (!t->carry.len)
                        continue;
                strbuf_done(&t->buf);
                strbuf_init(&t->buf, 0);
                text_append(t, NULL, 0, true);
                (void) x->output(x->output_ud, k, t->buf.buf, t->buf.len);
        }
}

/* After the deadline: kill the tree and drain what is left (bounded). */
static void time_out(struct runtime_run *x) {
        x->timed_out = true;
        log_ctx_set("SANDBOX_ID", x->sb.id);
        log_notice("exec reached its %llds limit; killing its process tree",
                   (long long) ((x->deadline - x->t0) / 1000));
        kill_tree(x);
        int64_t end = mono_ms() + DRAIN_AFTER_KILL_MS;
        while (mono_ms() < end) {
                int r = rx_read(x, 500, -1, on_output, x);
                if (r != 0)
                        break;
        }
}

static void finish(struct runtime_run *x) {
        flush_carries(x);
        if (x->timed_out)
                x->exit_code = 137;
        else if (rx_exit_code(x, &x->exit_code) < 0)
                x->exit_code = -1;
        bool oom = false;
        if (!x->timed_out && x->exit_code != 0 && x->ses)
                oom = session_oom_killed(x->ses, x->c, &x->sb);
        if (oom) {
                x->oom_killed = true;
                x->exit_code = 137;
                log_ctx_set("SANDBOX_ID", x->sb.id);
                log_warning("exec killed: the sandbox ran out of memory (limit %lld MB)", (long long) x->sb.memory);
        }
        x->finished = true;
}

static void result_of(const struct runtime_run *x, struct exec_result *ret) {
        *ret = (struct exec_result) {
                .exit_code = x->exit_code, .duration_ms = mono_ms() - x->t0, .timed_out = x->timed_out,
                .oom_killed = x->oom_killed,
        };
        if (!x->output) {
                ret->out = x->out.buf.buf;
                ret->out_len = x->out.buf.len;
                ret->err = x->err.buf.buf;
                ret->err_len = x->err.buf.len;
                ret->out_truncated = x->out.buf.truncated;
                ret->err_truncated = x->err.buf.truncated;
        }
}

/* Takes one of the sandbox's runtime slots and makes the run that holds it (sb moves into
 * it); -EUSERS with err when every slot is taken (sb is cleared either way). */
static int run_new(struct ctl *c, struct sandbox *sb, struct runtime_run **ret, struct err *err) {
        int r = runtime_slots_take(c, sb, err);
        if (r < 0) {
                sandbox_clear(sb);
                return r;
        }
        struct runtime_run *x = xnew0(struct runtime_run, 1);
        x->slot = true;
        x->c = c;
        x->drv = c->drv;
        x->sb = *sb;
        memset(sb, 0, sizeof(*sb));
        hexid_new(x->token);
        strbuf_init(&x->out.buf, c->cfg->max_exec_output);
        strbuf_init(&x->err.buf, c->cfg->max_exec_output);
        strbuf_init(&x->data, 0);
        *ret = x;
        return 0;
}

int runtime_load_ready(struct ctl *c, const struct account *acc, const char *id, struct sandbox *ret,
                       struct err *err) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        int k = sandbox_load(c, acc, id, &sb, err);
        if (k >= 0)
                k = sandbox_wake(c, &sb, err);   /* paused with autoResume: resumed first */
        if (k >= 0 && sb.status != SB_READY)
                k = err_set(err, -EBUSY, "Sandbox is %s; only ready sandboxes can run commands or move files",
                            sb_status_str(sb.status));
        if (k < 0)
                return k;
        log_ctx_set("SANDBOX_ID", id);
        (void) store_sandbox_touch(c->store, id, now_ms());  /* activity stamp only: best effort */
        *ret = sb;
        sb = (struct sandbox) { 0 };
        return 0;
}

/* ---- commands ---- */

/* The run's process through the sandbox's agent: 0; -EOPNOTSUPP when there is no agent to
 * use (the caller takes the driver's exec path); other -errno with err filled. */
static int start_on_agent(struct runtime_run *x, const struct runtime_cmd *cmd, struct err *err) {
        struct err msg = { 0 };
        struct guest_client *cl = NULL;
        int k = guest_connect(x->c, &x->sb, &cl, &msg);
        if (k < 0) {
                if (guest_fallback_ok(k)) {
                        if (k != -EOPNOTSUPP)
                                log_info("no agent answer (%s); using the driver's exec path", msg.message);
                        return -EOPNOTSUPP;
                }
                return err_set(err, -EHOSTUNREACH, "Could not reach the sandbox: %s", msg.message);
        }
        if (cmd->stdin_file && cmd->stdin_data) {
                k = guest_put_small(cl, cmd->stdin_file, cmd->stdin_data, cmd->stdin_len, STDIN_WRITE_TIMEOUT_MS, &msg);
                if (k < 0) {
                        guest_client_free(cl);
                        return err_set(err, k == -ENOSPC || k == -EDQUOT ? -ENOSPC : -EHOSTUNREACH, "Could not run the code: %s",
                                       msg.message);
                }
                x->snippet = xstrdup(cmd->stdin_file);
        }
        struct guest_spawn sp = { .argv = cmd->argv, .env = (const char *const *) cmd->env, .cwd = cmd->cwd,
                                  .want_stdin = cmd->stdin_data && !cmd->stdin_file, .kill_on_detach = true };
        struct guest_exec *ax = NULL;
        k = guest_exec_start(cl, &sp, &ax, &msg);
        if (k == -EPROTO || k == -ECONNRESET || k == -ETIMEDOUT || k == -EPIPE) {
                /* the agent answered HELLO but not SPAWN: something in the sandbox broke it */
                log_notice("the sandbox's agent failed the command (%s); using the driver's exec path", msg.message);
                snippet_remove(x);
                return -EOPNOTSUPP;
        }
        if (k < 0)
                return err_set(err, k == -EUSERS ? -EUSERS : k == -EINVAL ? -EINVAL : -EHOSTUNREACH, "Could not run the command: %s",
                               msg.message);
        x->ses = session_of_guest(ax);
        return 0;
}

/* The run's process through the driver's exec path, in the wrapper script. */
static int start_on_driver(struct runtime_run *x, const struct runtime_cmd *cmd, struct err *err) {
        struct err msg = { 0 };
        size_t n = 0, n_env = 0, n_user = 0;
        char n_env_s[16];
        while (cmd->env && cmd->env[n_env])
                n_env++;
        while (cmd->argv[n_user])
                n_user++;
        snprintf(n_env_s, sizeof(n_env_s), "%zu", n_env);
        _cleanup_free_ const char **argv = xnew0(const char *, 9 + n_env + n_user);
        argv[n++] = "/bin/sh";
        argv[n++] = "-c";
        argv[n++] = wrapper_script;
        argv[n++] = "paddock";
        argv[n++] = x->token;
        argv[n++] = cmd->cwd ? cmd->cwd : "/";
        argv[n++] = cmd->stdin_file ? cmd->stdin_file : "";
        argv[n++] = n_env_s;
        for (size_t i = 0; i < n_env; i++)
                argv[n++] = cmd->env[i];
        for (size_t i = 0; i < n_user; i++)
                argv[n++] = cmd->argv[i];
        argv[n] = NULL;

        struct exec_spec spec = { .argv = argv, .cwd = "/", .want_stdin = cmd->stdin_data != NULL };
        struct exec_session *s = NULL;
        if (x->drv->ops->exec_start(x->drv, &x->sb, &spec, &s, &msg) < 0)
                return err_set(err, -EHOSTUNREACH, "Could not run the command: %s", msg.message);
        x->ses = session_of_driver(x->drv, s);
        return 0;
}

int runtime_start(struct ctl *c, struct sandbox *sb, const struct runtime_cmd *cmd, runtime_output_fn output, void *ud,
                  struct runtime_run **ret, struct err *err) {
        struct runtime_run *x = NULL;
        int k = run_new(c, sb, &x, err);
        if (k < 0)
                return k;
        if (cmd->token)
                snprintf(x->token, sizeof(x->token), "%s", cmd->token);
        x->output = output;
        x->output_ud = ud;
        x->t0 = mono_ms();
        x->deadline = x->t0 + (int64_t) cmd->timeout_s * 1000;
        /* the sandbox's own variables (E2B's envVars) under the request's; the record is x's now */
        const struct sandbox *rec = &x->sb;
        _cleanup_strv_free_ char **env = rec->env.n || rec->egress.rules.n_rules ? sb_env_layer(rec, cmd->env) : NULL;
        struct runtime_cmd layered = *cmd;
        if (env)
                layered.env = env;
        k = start_on_agent(x, &layered, err);
        if (k == -EOPNOTSUPP)
                k = start_on_driver(x, &layered, err);
        if (k < 0) {
                runtime_free(x);
                return k;
        }
        if (cmd->stdin_data && !x->snippet) {
                k = rx_write(x, cmd->stdin_data, cmd->stdin_len, STDIN_WRITE_TIMEOUT_MS, on_output, x);
                if (x->overflow) {
                        /* Output while the input was still going in, more than the caller keeps. */
                        log_notice("exec wrote more output than its caller keeps before its input was sent; killing it");
                        kill_tree(x);
                } else if (k < 0 && k != -EPIPE) {
                        runtime_free(x);
                        return err_set(err, -EHOSTUNREACH, "Could not send input to the sandbox: %s", strerror(-k));
                }
                rx_close_stdin(x);
        }
        *ret = x;
        return 0;
}

bool runtime_output_refused(const struct runtime_run *x) {
        return x->overflow;
}

int runtime_wait(struct runtime_run *x, struct exec_result *ret, struct err *err) {
        for (;;) {
                int64_t wait = x->deadline - mono_ms();
                if (x->c->stopping) {
                        kill_tree(x);
                        return err_set(err, -EAGAIN, "controld is shutting down; the command was stopped. Retry shortly.");
                }
                if (wait <= 0) {
                        time_out(x);
                        break;
                }
                int k = rx_read(x, (int) (wait > 1000 ? 1000 : wait), -1, on_output, x);
                if (k == 1)
                        break;
                if (k < 0)
                        return err_set(err, -EHOSTUNREACH, "Lost the connection to the sandbox process: %s", strerror(-k));
        }
        finish(x);
        result_of(x, ret);
        return 0;
}

enum runtime_step runtime_step(struct runtime_run *x, int max_wait_ms, int client_fd, struct exec_result *ret,
                               struct err *err) {
        if (x->c->stopping) {
                /* Shutdown must not wait for a command that may run for minutes. */
                kill_tree(x);
                err_set(err, -EAGAIN, "controld is shutting down; the command was stopped");
                return RUNTIME_FAILED;
        }
        int64_t wait = x->deadline - mono_ms();
        if (wait > max_wait_ms)
                wait = max_wait_ms;
        if (wait < 0)
                wait = 0;
        int k = rx_read(x, (int) wait, client_fd, on_output, x);
        if (k == -ECONNRESET) {
                x->client_gone = true;
                log_info("client went away during a streamed exec; killing it");
                kill_tree(x);
                return RUNTIME_CLIENT_GONE;
        }
        if (k < 0) {
                err_set(err, k, "%s", x->overflow ? "The command's output outran the client; it was stopped"
                                                  : "Lost the connection to the sandbox process");
                kill_tree(x);
                return RUNTIME_FAILED;
        }
        if (k == 1)
                finish(x);
        else if (mono_ms() >= x->deadline) {
                time_out(x);
                finish(x);
        } else
                return RUNTIME_RUNNING;
        result_of(x, ret);
        return RUNTIME_EXITED;
}

/* ---- files ---- */

/* Starts the fixed file script under the transfer deadline. */
static int start_file_exec(struct ctl *c, struct sandbox *sb, const char *script, const char *path, bool want_stdin,
                           struct runtime_run **ret, struct err *err) {
        struct err msg = { 0 };
        struct runtime_run *x = NULL;
        int k = run_new(c, sb, &x, err);
        if (k < 0)
                return k;
        x->deadline = mono_ms() + (int64_t) c->cfg->transfer_timeout_s * 1000;
        strbuf_done(&x->err.buf);
        strbuf_init(&x->err.buf, ERR_CAP);
        struct guest_client *cl = NULL;
        k = guest_connect(c, &x->sb, &cl, &msg);
        if (k == 0) {
                k = want_stdin ? guest_file_write_open(cl, path, &x->af, &msg)
                               : guest_file_read_open(cl, path, &x->af, &msg);
                if (k < 0) {
                        runtime_free(x);
                        return err_set(err, -EHOSTUNREACH, "Could not reach the sandbox: %s", msg.message);
                }
                *ret = x;
                return 0;
        }
        if (!guest_fallback_ok(k)) {
                runtime_free(x);
                return err_set(err, -EHOSTUNREACH, "Could not reach the sandbox: %s", msg.message);
        }
        const char *argv[] = { "/bin/sh", "-c", wrapper_script, "paddock", x->token, "/", "", "0", "/bin/sh", "-c", script, "paddock", path, NULL };
        struct exec_spec spec = { .argv = argv, .cwd = "/", .want_stdin = want_stdin };
        struct exec_session *s = NULL;
        if (x->drv->ops->exec_start(x->drv, &x->sb, &spec, &s, &msg) < 0) {
                runtime_free(x);
                return err_set(err, -EHOSTUNREACH, "Could not reach the sandbox: %s", msg.message);
        }
        x->ses = session_of_driver(x->drv, s);
        *ret = x;
        return 0;
}

/* Reads to the end of the file exec and returns its exit code (or < 0). */
static int finish_file_exec(struct runtime_run *x) {
        int64_t end = mono_ms() + FILE_FINISH_TIMEOUT_MS;
        for (;;) {
                if (mono_ms() > end || x->c->stopping) {
                        kill_tree(x);
                        return -ETIMEDOUT;
                }
                int k = session_read(x->ses, 1000, -1, on_output, x);
                if (k == 1)
                        break;
                if (k < 0)
                        return k;
        }
        finish(x);
        return x->exit_code;
}

/* The directory a file path is in ("/" for a file at the root), for messages. */
static void parent_dir(const char *path, char *dir, size_t n) {
        snprintf(dir, n, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir)
                *slash = 0;
        else
                snprintf(dir, n, "/");
}

/* The put script's exit code as -errno with the user's message in err (0 when it wrote). */
static int put_error(int code, const char *path, const char *stderr_raw, struct err *err) {
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
        parent_dir(path, dir, sizeof(dir));
        switch (code) {
        case 0:
                return 0;
        case 3:
                return err_set(err, -EINVAL, "Destination directory does not exist: %s", dir);
        case 5:
                return err_set(err, -EINVAL, "Destination is a directory: %s", path);
        case 6:
                return err_set(err, -EINVAL, "Destination is not a regular file (device, pipe or socket): %s", path);
        default:
                if (stderr_text && (strstr(stderr_text, "ermission denied") || strstr(stderr_text, "ead-only") ||
                                    strstr(stderr_text, "not permitted") ||
                                    (strstr(stderr_text, "Input/output error") &&
                                     (startswith(path, "/proc/") || startswith(path, "/sys/"))))) {
                        return err_set(err, -EPERM, "Permission denied writing to %s", path);
                }
                if (stderr_text && strstr(stderr_text, "space"))
                        return err_set(err, -ENOSPC, "No space left in the sandbox writing %s", path);
                return err_set(err, -EREMOTEIO, "Failed to write %s: %s", path,
                               stderr_text && *stderr_text ? stderr_text : "unknown error");
        }
}

int runtime_file_write_start(struct ctl *c, struct sandbox *sb, const char *path, struct runtime_run **ret,
                             struct err *err) {
        return start_file_exec(c, sb, put_script, path, true, ret, err);
}

int runtime_file_write(struct runtime_run *x, const void *data, size_t len) {
        if (mono_ms() > x->deadline)
                return -ETIMEDOUT;
        return rx_write(x, data, len, STDIN_WRITE_TIMEOUT_MS, on_output, x);
}

/* The agent's verdict on a write as the user's error (0 when it wrote). */
static int agent_put_error(int k, const char *path, const char *why, struct err *err) {
        char dir[4097];
        parent_dir(path, dir, sizeof(dir));
        switch (k) {
        case 0:
                return 0;
        case -ENOENT:
        case -ENOTDIR:
                return err_set(err, -EINVAL, "Destination directory does not exist: %s", dir);
        case -EISDIR:
                return err_set(err, -EINVAL, "Destination is a directory: %s", path);
        case -EINVAL:
        case -ENXIO:
                return err_set(err, -EINVAL, "Destination is not a regular file (device, pipe or socket): %s", path);
        case -EACCES:
        case -EPERM:
        case -EROFS:
                return err_set(err, -EPERM, "Permission denied writing to %s", path);
        case -EIO:
                if (startswith(path, "/proc/") || startswith(path, "/sys/"))
                        return err_set(err, -EPERM, "Permission denied writing to %s", path);
                break;
        case -ENOSPC:
        case -EDQUOT:
                return err_set(err, -ENOSPC, "No space left in the sandbox writing %s", path);
        case -ETIMEDOUT:
        case -ECONNRESET:
        case -EPIPE:
                return err_set(err, -EHOSTUNREACH, "The sandbox did not finish writing %s: %s", path, why);
        default:
                break;
        }
        return err_set(err, -EREMOTEIO, "Failed to write %s: %s", path, why && *why ? why : "unknown error");
}

int runtime_file_write_finish(struct runtime_run *x, const char *path, struct err *err) {
        if (x->af) {
                struct err why = { 0 };
                int k = guest_file_write_finish(x->af, FILE_FINISH_TIMEOUT_MS, &why);
                x->finished = true;
                return agent_put_error(k, path, why.message, err);
        }
        (void) session_close_stdin(x->ses);
        int code = finish_file_exec(x);
        if (code < 0)
                return err_set(err, -EHOSTUNREACH, "The sandbox did not finish writing %s: %s", path, strerror(-code));
        return put_error(code, path, x->err.buf.buf, err);
}

static int read_output(int stream, const uint8_t *data, size_t len, void *ud) {
        struct runtime_run *x = ud;
        if (stream == 2)
                return text_append(&x->err, data, len, false), 0;
        return strbuf_append(&x->data, data, len) < 0 ? -ENOBUFS : 0;
}

int runtime_file_read_open(struct ctl *c, struct sandbox *sb, const char *path, struct runtime_run **ret,
                           const void **ret_all, size_t *ret_all_len, struct err *err) {
        struct runtime_run *x = NULL;
        int k = start_file_exec(c, sb, get_script, path, false, &x, err);
        if (k < 0)
                return k;
        /* Wait for the first bytes or the end, so a missing file is a real -ENOENT. */
        int64_t end = mono_ms() + 60000;
        while (x->data.len == 0 && !x->data_eof) {
                k = rx_read(x, 1000, -1, read_output, x);
                if (k == 1)
                        x->data_eof = true;
                else if (x->af && k < 0 && k != -ECONNRESET && k != -EPROTO && k != -ENOBUFS) {
                        x->finished = true;
                        if (k == -ENOENT || k == -ENOTDIR)
                                k = err_set(err, -ENOENT, "File not found: %s", path);
                        else if (k == -EISDIR)
                                k = err_set(err, -EINVAL, "Path is a directory: %s", path);
                        else if (k == -EINVAL || k == -ENXIO)
                                k = err_set(err, -EINVAL, "Path is not a regular file (device, pipe or socket): %s", path);
                        else if (k == -EACCES || k == -EPERM)
                                k = err_set(err, -EPERM, "Permission denied reading %s", path);
                        else
                                k = err_set(err, -EREMOTEIO, "Failed to read %s: %s", path, strerror(-k));
                        runtime_free(x);
                        return k;
                } else if (k < 0 || mono_ms() > end) {
                        runtime_free(x);
                        return err_set(err, -EHOSTUNREACH, "Lost the connection to the sandbox reading %s", path);
                }
        }
        *ret_all = NULL;
        *ret_all_len = 0;
        if (x->data_eof) {
                int code = -1;
                if (x->af)
                        code = 0;   /* the agent ended the read with END: the whole file came */
                else
                        (void) session_exit_code(x->ses, &code);  /* unknown stays -1: "Failed to read" */
                x->finished = true;
                const char *e = x->err.buf.buf ? x->err.buf.buf : "";
                if (code == 3)
                        k = err_set(err, -ENOENT, "File not found: %s", path);
                else if (code == 5)
                        k = err_set(err, -EINVAL, "Path is a directory: %s", path);
                else if (code == 6)
                        k = err_set(err, -EINVAL, "Path is not a regular file (device, pipe or socket): %s", path);
                else if (code == 4 || strstr(e, "ermission denied"))
                        k = err_set(err, -EPERM, "Permission denied reading %s", path);
                else if (code != 0)
                        k = err_set(err, -EREMOTEIO, "Failed to read %s: %s", path, *e ? e : "unknown error");
                if (k < 0) {
                        runtime_free(x);
                        return k;
                }
                *ret_all = x->data.buf;
                *ret_all_len = x->data.len;
        }
        *ret = x;
        return 0;
}

ssize_t runtime_file_read(struct runtime_run *x, int client_fd, char *buf, size_t max) {
        for (;;) {
                if (x->data_off < x->data.len)
                        return (ssize_t) strbuf_drain(&x->data, &x->data_off, buf, max);
                if (x->data_eof) {
                        x->finished = true;
                        return 0;
                }
                if (x->c->stopping)
                        return -ESHUTDOWN;
                if (mono_ms() > x->deadline) {
                        /* A slow reader may not hold a slot and an exec for ever. */
                        log_notice("download took longer than %llu s (transfer_timeout); closing it",
                                   (unsigned long long) x->c->cfg->transfer_timeout_s);
                        kill_tree(x);
                        return -ETIMEDOUT;
                }
                int k = rx_read(x, 1000, client_fd, read_output, x);
                if (k == 1)
                        x->data_eof = true;
                else if (k < 0)
                        return k;
        }
}
