/* pj_api_run.c — the Brimble API's bodies that run something (pj_api.h): exec and code,
 * processes (start, stdin, signal, resize), previews, pause, and the terminal's control
 * frames. Same strict reader and field-path helpers as pj_api.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "pj_api.h"
#include "pj_json.h"
#include "strutil.h"

#include "pj_fields.h"

/* ---- exec and code ----------------------------------------------------- */

static void env_free(char **keys, char **values, size_t n) {
        for (size_t i = 0; i < n; i++) {
                free_many(keys[i], values[i]);
        }
        free_many(keys, values);
}

static bool env_key_ok(const struct pj_json *m) {
        if (m->key_len < 1 || m->key_len > 256)
                return false;
        for (size_t i = 0; i < m->key_len; i++) {
                char c = m->key[i];
                bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
                if (!ok)
                        return false;
        }
        return true;
}

static void run_done(struct pj_run *run) {
        free(run->cwd);
        env_free(run->env_keys, run->env_values, run->n_env);
        *run = (struct pj_run) {};
}

/* timeout_seconds, cwd, env, stream: shared by exec and code. */
static int parse_run(const struct pj_json *root, struct pj_run *ret, struct err *err) {
        _cleanup_(run_done) struct pj_run run = { .timeout_s = 30 };
        const struct pj_json *v;
        int r;

        if ((r = pj_get_int(root, "", "timeout_seconds", 1, 300, NULL, &run.timeout_s, err)) < 0)
                return r;

        r = pj_get_str(root, "", "cwd", &v, err);
        if (r < 0)
                return r;
        if (v && strcmp(v->str, "/") != 0) {
                r = pj_sandbox_path_check(v->str, err, "cwd");
                if (r < 0)
                        return r;
        }
        run.cwd = xstrdup(v ? v->str : "/");

        const struct pj_json *env = pj_json_member(root, "env");
        if (env) {
                if (env->type != PJ_JSON_OBJECT)
                        return pj_error_set(err, "env", "env must be an object mapping variable names to string values");
                if (env->n > 128)
                        return pj_error_set(err, "env", "env must have at most 128 entries");
                run.env_keys = xnew0(char *, env->n);
                run.env_values = xnew0(char *, env->n);
                for (const struct pj_json *m = env->child; m; m = m->next) {
                        char path[PJ_PATH_MAX], q[300];
                        if (!env_key_ok(m))
                                return pj_error_set(err, "env",
                                            "env key '%s' is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, at most 256 characters)",
                                            pj_sanitize(q, sizeof(q), m->key, m->key_len, 64));
                        pj_mkpath(path, "env", m->key);
                        for (size_t i = 0; i < run.n_env; i++)
                                if (strcmp(run.env_keys[i], m->key) == 0)
                                        return pj_error_set(err, path, "Duplicate field '%s'", path);
                        if (m->type != PJ_JSON_STRING)
                                return pj_error_set(err, path, "%s must be a string", path);
                        if (m->str_len > 32768)
                                return pj_error_set(err, path, "%s must be at most 32768 bytes", path);
                        if (memchr(m->str, '\0', m->str_len))
                                return pj_error_set(err, path, "%s must not contain NUL characters", path);
                        run.env_keys[run.n_env] = xstrdup(m->key);
                        run.env_values[run.n_env] = xstrdup(m->str);
                        run.n_env++;
                }
        }

        if ((r = pj_get_bool(root, "", "stream", NULL, &run.stream, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(run);
        return 0;
}

void pj_exec_done(struct pj_exec *e) {
        if (!e)
                return;
        free(e->cmd);
        free(e->stdin_data);
        run_done(&e->run);
        *e = (struct pj_exec) {};
}

/* The required, non-empty text member key (cmd, code) of at most max bytes. */
static int get_text(const struct pj_json *root, const char *key, size_t max, const char *max_note,
                    const struct pj_json **ret, struct err *err) {
        int r = pj_get_str(root, "", key, ret, err);
        if (r < 0)
                return r;
        if (!*ret)
                return pj_error_set(err, key, "%s is required", key);
        if ((*ret)->str_len == 0)
                return pj_error_set(err, key, "%s must not be empty", key);
        if ((*ret)->str_len > max)
                return pj_error_set(err, key, "%s must be at most %zu bytes%s", key, max, max_note);
        return 0;
}

int pj_exec_parse(const char *body, size_t len, struct pj_exec *ret, struct err *err) {
        static const char *const fields[] = { "cmd", "timeout_seconds", "cwd", "env", "stream", "stdin" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_run run;
        const struct pj_json *cmd, *in;
        int r;

        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = get_text(root, "cmd", 65536, "", &cmd, err)) < 0 || (r = pj_get_str(root, "", "stdin", &in, err)) < 0)
                return r;
        if (in && in->str_len > 1024 * 1024)
                return pj_error_set(err, "stdin", "stdin must be at most 1048576 bytes (1 MiB)");
        if ((r = parse_run(root, &run, err)) < 0)
                return r;

        *ret = (struct pj_exec) { .cmd = xstrdup(cmd->str), .run = run };
        if (in) {
                ret->stdin_data = xstrndup(in->str, in->str_len);
                ret->stdin_len = in->str_len;
        }
        return 0;
}

/* ---- processes ----------------------------------------------------------- */

void pj_process_start_done(struct pj_process_start *p) {
        if (!p)
                return;
        free_many(p->cmd, p->cwd, p->tag);
        env_free(p->env_keys, p->env_values, p->n_env);
        *p = (struct pj_process_start) {};
}

int pj_process_start_parse(const char *body, size_t len, struct pj_process_start *ret, struct err *err) {
        static const char *const fields[] = { "cmd", "cwd", "env", "tag", "stdin", "pty" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(run_done) struct pj_run run = { 0 };
        const struct pj_json *cmd, *tag, *pty;
        bool in = false;
        int r, rows = 0, cols = 0;

        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = get_text(root, "cmd", 65536, "", &cmd, err)) < 0 || (r = pj_get_str(root, "", "tag", &tag, err)) < 0 ||
            (r = pj_get_bool(root, "", "stdin", NULL, &in, err)) < 0)
                return r;
        if (tag) {
                if (tag->str_len == 0 || tag->str_len > PJ_PROCESS_TAG_MAX)
                        return pj_error_set(err, "tag", "tag must be 1..%d bytes", PJ_PROCESS_TAG_MAX);
                for (size_t i = 0; i < tag->str_len; i++)
                        if ((unsigned char) tag->str[i] < 0x20 || tag->str[i] == 0x7f)
                                return pj_error_set(err, "tag", "tag must not contain control characters");
                if (!utf8_valid(tag->str, tag->str_len))
                        return pj_error_set(err, "tag", "tag must be valid UTF-8");
        }
        pty = pj_json_member(root, "pty");
        if (pty) {
                static const char *const pf[] = { "rows", "cols" };
                if (pty->type != PJ_JSON_OBJECT)
                        return pj_error_set(err, "pty", "pty must be an object {\"rows\": N, \"cols\": N}");
                if ((r = pj_check_fields(pty, "pty", pf, ELEMENTSOF(pf), err)) < 0 ||
                    (r = pj_get_int(pty, "pty", "rows", 1, 1000, NULL, &rows, err)) < 0 ||
                    (r = pj_get_int(pty, "pty", "cols", 1, 1000, NULL, &cols, err)) < 0)
                        return r;
                if (!rows)
                        rows = 24;
                if (!cols)
                        cols = 80;
        }
        if ((r = parse_run(root, &run, err)) < 0)
                return r;
        *ret = (struct pj_process_start) { .cmd = xstrdup(cmd->str), .cwd = TAKE_PTR(run.cwd),
                                           .env_keys = TAKE_PTR(run.env_keys), .env_values = TAKE_PTR(run.env_values),
                                           .n_env = run.n_env, .tag = tag ? xstrdup(tag->str) : NULL,
                                           .stdin_open = in, .rows = rows, .cols = cols };
        run.n_env = 0;
        return 0;
}

void pj_process_stdin_done(struct pj_process_stdin *p) {
        if (!p)
                return;
        free(p->data);
        *p = (struct pj_process_stdin) {};
}

int pj_process_stdin_parse(const char *body, size_t len, struct pj_process_stdin *ret, struct err *err) {
        static const char *const fields[] = { "data", "close" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        const struct pj_json *d;
        bool close = false, has_close = false;
        int r;
        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = pj_get_str(root, "", "data", &d, err)) < 0 ||
            (r = pj_get_bool(root, "", "close", &has_close, &close, err)) < 0)
                return r;
        if (!d && !close)
                return pj_error_set(err, "data", "data is required (or close: true)");
        if (d && d->str_len > 1024 * 1024)
                return pj_error_set(err, "data", "data must be at most 1048576 bytes (1 MiB)");
        *ret = (struct pj_process_stdin) { .data = xstrndup(d ? d->str : "", d ? d->str_len : 0),
                                           .len = d ? d->str_len : 0, .close = close };
        return 0;
}

int pj_pause_parse(const char *body, size_t len, bool *ret_keep_memory, struct err *err) {
        static const char *const fields[] = { "keepMemory" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        bool has = false, keep = false;
        int r;
        if ((r = pj_parse_body(body, len, true, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = pj_get_bool(root, "", "keepMemory", &has, &keep, err)) < 0)
                return r;
        *ret_keep_memory = has && keep;
        return 0;
}

int pj_fork_parse(const char *body, size_t len, int max_count, int max_timeout_s, int *ret_count, int *ret_timeout_s,
                  struct err *err) {
        static const char *const fields[] = { "count", "timeout" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        bool has_count = false, has_timeout = false;
        int count = 1, timeout = -1, r;
        if ((r = pj_parse_body(body, len, true, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = pj_get_int(root, "", "count", 1, max_count, &has_count, &count, err)) < 0 ||
            (r = pj_get_int(root, "", "timeout", 0, max_timeout_s, &has_timeout, &timeout, err)) < 0)
                return r;
        *ret_count = has_count ? count : 1;
        *ret_timeout_s = has_timeout ? timeout : -1;
        return 0;
}

int pj_process_signal_parse(const char *body, size_t len, int *ret_signo, struct err *err) {
        static const char *const fields[] = { "signal" };
        static const struct { const char *name; int no; } names[] = {
                { "HUP", 1 }, { "INT", 2 }, { "QUIT", 3 }, { "KILL", 9 }, { "USR1", 10 }, { "USR2", 12 },
                { "PIPE", 13 }, { "ALRM", 14 }, { "TERM", 15 }, { "CONT", 18 }, { "STOP", 19 }, { "TSTP", 20 },
                { "WINCH", 28 },
        };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r;
        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0)
                return r;
        const struct pj_json *m = pj_json_member(root, "signal");
        if (!m)
                return pj_error_set(err, "signal", "signal is required: a name such as SIGINT or SIGTERM, or a number 1..64");
        if (m->type == PJ_JSON_NUMBER) {
                int no = 0;
                if ((r = pj_get_int(root, "", "signal", 1, 64, NULL, &no, err)) < 0)
                        return r;
                *ret_signo = no;
                return 0;
        }
        if (m->type == PJ_JSON_STRING) {
                const char *s = m->str;
                if (!strncmp(s, "SIG", 3))
                        s += 3;
                for (size_t i = 0; i < ELEMENTSOF(names); i++)
                        if (!strcmp(s, names[i].name)) {
                                *ret_signo = names[i].no;
                                return 0;
                        }
        }
        char q[80];
        return pj_error_set(err, "signal",
                            "signal '%s' is not one we send: use HUP, INT, QUIT, KILL, USR1, USR2, PIPE, ALRM, TERM, CONT, STOP, "
                            "TSTP or WINCH (with or without SIG), or a number 1..64",
                            m->type == PJ_JSON_STRING ? pj_sanitize(q, sizeof(q), m->str, m->str_len, 32) : "(not a string)");
}

int pj_preview_create_parse(const char *body, size_t len, struct pj_preview_create *ret, struct err *err) {
        static const char *const fields[] = { "port", "expiresIn", "public", "keepHost" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_preview_create p = { 0 };
        int r;
        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0)
                return r;
        if (!pj_json_member(root, "port"))
                return pj_error_set(err, "port", "port is required: the TCP port (1..65535) a server listens on inside the sandbox");
        if ((r = pj_get_int(root, "", "port", 1, 65535, NULL, &p.port, err)) < 0 ||
            (r = pj_get_int(root, "", "expiresIn", 1, 31536000, NULL, &p.expires_in_s, err)) < 0 ||
            (r = pj_get_bool(root, "", "public", NULL, &p.public_, err)) < 0 ||
            (r = pj_get_bool(root, "", "keepHost", NULL, &p.keep_host, err)) < 0)
                return r;
        *ret = p;
        return 0;
}

int pj_process_resize_parse(const char *body, size_t len, int *ret_rows, int *ret_cols, struct err *err) {
        static const char *const fields[] = { "rows", "cols" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        bool hr = false, hc = false;
        int r;
        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = pj_get_int(root, "", "rows", 1, 1000, &hr, ret_rows, err)) < 0 ||
            (r = pj_get_int(root, "", "cols", 1, 1000, &hc, ret_cols, err)) < 0)
                return r;
        if (!hr || !hc)
                return pj_error_set(err, hr ? "cols" : "rows", "%s is required (1..1000)", hr ? "cols" : "rows");
        return 0;
}

void pj_code_done(struct pj_code *c) {
        if (!c)
                return;
        free_many(c->language, c->code);
        run_done(&c->run);
        *c = (struct pj_code) {};
}

int pj_code_parse(const char *body, size_t len, struct pj_code *ret, struct err *err) {
        static const char *const fields[] = { "language", "code", "timeout_seconds", "cwd", "env", "stream" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct pj_run run;
        const struct pj_json *lang, *code;
        int r;

        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0)
                return r;
        r = pj_get_str(root, "", "language", &lang, err);
        if (r < 0)
                return r;
        if (!lang)
                return pj_error_set(err, "language", "language is required (python or node)");
        if (strcmp(lang->str, "python") != 0 && strcmp(lang->str, "node") != 0)
                return pj_error_set(err, "language", "language must be one of python, node");
        if ((r = get_text(root, "code", 1024 * 1024, " (1 MiB)", &code, err)) < 0 ||
            (r = parse_run(root, &run, err)) < 0)
                return r;

        *ret = (struct pj_code) { .language = xstrdup(lang->str), .code = xstrdup(code->str), .run = run };
        return 0;
}

/* ---- the terminal's control frames ---- */

int pj_terminal_resize_parse(const char *msg, size_t len, uint32_t *ret_rows, uint32_t *ret_cols, struct err *err) {
        static const char *const fields[] = { "type", "rows", "cols" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        struct err ignored = { 0 };
        if (len == 0 || msg[0] != '{' || pj_json_parse_object(msg, len, false, &root, &ignored) < 0)
                return 0;
        const struct pj_json *t = pj_json_member(root, "type");
        if (!t || t->type != PJ_JSON_STRING || t->str_len != 6 || memcmp(t->str, "resize", 6))
                return 0;
        int rows = 0, cols = 0, r;
        if ((r = pj_check_fields(root, "", fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_int(root, "", "rows", 1, 1000, NULL, &rows, err)) < 0 ||
            (r = pj_get_int(root, "", "cols", 1, 1000, NULL, &cols, err)) < 0)
                return r;
        if (!rows || !cols)
                return pj_error_set(err, rows ? "cols" : "rows", "%s is required: 1 to 1000", rows ? "cols" : "rows");
        *ret_rows = (uint32_t) rows;
        *ret_cols = (uint32_t) cols;
        return 1;
}
