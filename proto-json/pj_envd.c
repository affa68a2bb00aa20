/* pj_envd.c — the Connect protocol (codes, envelopes) and envd's request messages, the
 * sandbox side of E2B's wire (pj_e2b.h; the control plane is pj_e2b.c's). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pj_e2b.h"
#include "pj_fields.h"
#include "pj_json.h"
#include "strutil.h"

/* ---- the Connect protocol ---- */

static const char *const code_names[] = {
        [PJ_CONNECT_CANCELED] = "canceled",
        [PJ_CONNECT_UNKNOWN] = "unknown",
        [PJ_CONNECT_INVALID_ARGUMENT] = "invalid_argument",
        [PJ_CONNECT_DEADLINE_EXCEEDED] = "deadline_exceeded",
        [PJ_CONNECT_NOT_FOUND] = "not_found",
        [PJ_CONNECT_ALREADY_EXISTS] = "already_exists",
        [PJ_CONNECT_PERMISSION_DENIED] = "permission_denied",
        [PJ_CONNECT_RESOURCE_EXHAUSTED] = "resource_exhausted",
        [PJ_CONNECT_FAILED_PRECONDITION] = "failed_precondition",
        [PJ_CONNECT_ABORTED] = "aborted",
        [PJ_CONNECT_OUT_OF_RANGE] = "out_of_range",
        [PJ_CONNECT_UNIMPLEMENTED] = "unimplemented",
        [PJ_CONNECT_INTERNAL] = "internal",
        [PJ_CONNECT_UNAVAILABLE] = "unavailable",
        [PJ_CONNECT_DATA_LOSS] = "data_loss",
        [PJ_CONNECT_UNAUTHENTICATED] = "unauthenticated",
};

const char *pj_connect_code_name(enum pj_connect_code c) {
        return (size_t) c < ELEMENTSOF(code_names) && code_names[c] ? code_names[c] : "unknown";
}

int pj_connect_code_http(enum pj_connect_code c) {
        switch (c) {
        case PJ_CONNECT_CANCELED: return 499;
        case PJ_CONNECT_INVALID_ARGUMENT: return 400;
        case PJ_CONNECT_DEADLINE_EXCEEDED: return 504;
        case PJ_CONNECT_NOT_FOUND: return 404;
        case PJ_CONNECT_ALREADY_EXISTS: return 409;
        case PJ_CONNECT_PERMISSION_DENIED: return 403;
        case PJ_CONNECT_RESOURCE_EXHAUSTED: return 429;
        case PJ_CONNECT_FAILED_PRECONDITION: return 400;
        case PJ_CONNECT_ABORTED: return 409;
        case PJ_CONNECT_OUT_OF_RANGE: return 400;
        case PJ_CONNECT_UNIMPLEMENTED: return 501;
        case PJ_CONNECT_UNAVAILABLE: return 503;
        case PJ_CONNECT_UNAUTHENTICATED: return 401;
        case PJ_CONNECT_UNKNOWN:
        case PJ_CONNECT_INTERNAL:
        case PJ_CONNECT_DATA_LOSS:
                return 500;
        }
        return 500;
}

int pj_connect_envelope_decode(const uint8_t *buf, size_t len, size_t max, uint8_t *ret_flags, const uint8_t **ret_msg,
                               size_t *ret_msg_len, size_t *ret_used) {
        if (len < 5)
                return 0;
        uint32_t n = (uint32_t) buf[1] << 24 | (uint32_t) buf[2] << 16 | (uint32_t) buf[3] << 8 | buf[4];
        if (buf[0] & PJ_CONNECT_FLAG_COMPRESSED)
                return -EPROTO;
        if (n > max)
                return -EMSGSIZE;
        if (len - 5 < n)
                return 0;
        *ret_flags = buf[0];
        *ret_msg = buf + 5;
        *ret_msg_len = n;
        *ret_used = 5 + (size_t) n;
        return 1;
}

void pj_connect_envelope_header(uint8_t out[5], uint8_t flags, uint32_t len) {
        out[0] = flags;
        out[1] = (uint8_t) (len >> 24);
        out[2] = (uint8_t) (len >> 16);
        out[3] = (uint8_t) (len >> 8);
        out[4] = (uint8_t) len;
}

/* ---- envd's messages ---- */

/* A message object (an empty message is {}). */
static int message(const char *msg, size_t len, struct pj_json **ret, struct err *err) {
        int r = pj_json_parse_object(msg, len, true, ret, err);
        if (r < 0)
                return r;
        return 0;
}

/* Member by JSON name or proto name (not both). */
static const struct pj_json *field(const struct pj_json *obj, const char *json_name, const char *proto_name) {
        const struct pj_json *m = pj_json_member(obj, json_name);
        if (!m && proto_name)
                m = pj_json_member(obj, proto_name);
        return m;
}

static int check_message(const struct pj_json *obj, const char *prefix, const char *const *names, size_t n,
                         struct err *err) {
        int r = pj_check_fields(obj, prefix, names, n, err);
        if (r < 0)
                return r;
        /* both spellings of one field: names[] lists them in pairs where they differ */
        for (size_t i = 0; i + 1 < n; i++) {
                if (!strchr(names[i + 1], '_'))
                        continue;
                if (pj_json_member(obj, names[i]) && pj_json_member(obj, names[i + 1]))
                        return pj_error_set(err, names[i], "%s is given twice (as %s and %s)", names[i], names[i],
                                            names[i + 1]);
        }
        return 0;
}

static int string_field(const struct pj_json *m, const char *path, size_t max, bool empty_ok, char **ret,
                        struct err *err) {
        if (!m)
                return 0;
        if (m->type != PJ_JSON_STRING || memchr(m->str, 0, m->str_len))
                return pj_error_set(err, path, "%s must be a string without NUL", path);
        if (m->str_len > max || (!empty_ok && m->str_len == 0))
                return pj_error_set(err, path, "%s must be %s%zu bytes", path, empty_ok ? "at most " : "1..", max);
        *ret = xstrndup(m->str, m->str_len);
        return 1;
}

/* uint32 in proto3 JSON: a number or a decimal string. */
static int u32_field(const struct pj_json *m, const char *path, uint32_t max, uint32_t *ret, struct err *err) {
        if (!m)
                return 0;
        int64_t x = -1;
        if (m->type == PJ_JSON_NUMBER)
                (void) pj_number_to_int(m, &x);
        else if (m->type == PJ_JSON_STRING && m->str_len > 0 && m->str_len <= 10 &&
                 strspn(m->str, "0123456789") == m->str_len)
                x = strtoll(m->str, NULL, 10);
        if (x < 0 || x > (int64_t) max)
                return pj_error_set(err, path, "%s must be an integer from 0 to %u", path, max);
        *ret = (uint32_t) x;
        return 1;
}

static int bool_field(const struct pj_json *m, const char *path, bool *ret, struct err *err) {
        if (!m)
                return 0;
        if (m->type != PJ_JSON_TRUE && m->type != PJ_JSON_FALSE)
                return pj_error_set(err, path, "%s must be true or false", path);
        *ret = m->type == PJ_JSON_TRUE;
        return 1;
}

static int selector(const struct pj_json *obj, const char *path, struct pj_envd_selector *ret, struct err *err) {
        static const char *const names[] = { "pid", "tag" };
        if (!obj)
                return pj_error_set(err, path, "%s is required: {\"pid\": N} or {\"tag\": \"...\"}", path);
        if (obj->type != PJ_JSON_OBJECT)
                return pj_error_set(err, path, "%s must be an object", path);
        int r = pj_check_fields(obj, path, names, ELEMENTSOF(names), err);
        if (r < 0)
                return r;
        char p[PJ_PATH_MAX];
        const struct pj_json *pid = pj_json_member(obj, "pid"), *tag = pj_json_member(obj, "tag");
        if ((pid != NULL) == (tag != NULL))
                return pj_error_set(err, path, "%s must have exactly one of pid and tag", path);
        if ((r = u32_field(pid, pj_mkpath(p, path, "pid"), 0x7fffffff, &ret->pid, err)) < 0)
                return r;
        if (pid && ret->pid == 0)
                return pj_error_set(err, p, "%s must be a process id (1 or more)", p);
        if ((r = string_field(tag, pj_mkpath(p, path, "tag"), PJ_E2B_MAX_TAG, false, &ret->tag, err)) < 0)
                return r;
        return 0;
}

/* A message on one process: only the fields in names[], "process" (the selector) among them. */
static int process_message(const char *msg, size_t len, const char *const *names, size_t n, struct pj_json **root,
                           struct pj_envd_selector *sel, struct err *err) {
        int r = message(msg, len, root, err);
        if (r < 0 || (r = check_message(*root, "", names, n, err)) < 0)
                return r;
        return selector(pj_json_member(*root, "process"), "process", sel, err);
}

void pj_envd_selector_done(struct pj_envd_selector *s) {
        if (!s)
                return;
        free(s->tag);
        *s = (struct pj_envd_selector) { 0 };
}

void pj_envd_start_done(struct pj_envd_start *s) {
        if (!s)
                return;
        strv_free(s->args);
        strv_free(s->env_keys);
        strv_free(s->env_values);
        free_many(s->cmd, s->cwd, s->tag);
        *s = (struct pj_envd_start) { 0 };
}

/* pty: {size: {cols, rows}} */
static int pty_field(const struct pj_json *pty, const char *path, uint32_t *rows, uint32_t *cols, struct err *err) {
        static const char *const names[] = { "size" }, *const size_names[] = { "cols", "rows" };
        char p[PJ_PATH_MAX], q[PJ_PATH_MAX];
        if (pty->type != PJ_JSON_OBJECT)
                return pj_error_set(err, path, "%s must be an object", path);
        int r = pj_check_fields(pty, path, names, ELEMENTSOF(names), err);
        if (r < 0)
                return r;
        const struct pj_json *size = pj_json_member(pty, "size");
        pj_mkpath(p, path, "size");
        if (!size || size->type != PJ_JSON_OBJECT)
                return pj_error_set(err, p, "%s is required: {\"cols\": N, \"rows\": N}", p);
        if ((r = pj_check_fields(size, p, size_names, ELEMENTSOF(size_names), err)) < 0)
                return r;
        *rows = *cols = 0;
        if ((r = u32_field(pj_json_member(size, "cols"), pj_mkpath(q, p, "cols"), 65535, cols, err)) < 0 ||
            (r = u32_field(pj_json_member(size, "rows"), pj_mkpath(q, p, "rows"), 65535, rows, err)) < 0)
                return r;
        if (*rows == 0 || *cols == 0)
                return pj_error_set(err, p, "%s needs cols and rows from 1 to 65535", p);
        return 0;
}

int pj_envd_start_parse(const char *msg, size_t len, struct pj_envd_start *ret, struct err *err) {
        static const char *const names[] = { "process", "pty", "tag", "stdin" };
        static const char *const pnames[] = { "cmd", "args", "envs", "cwd" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_start_done) struct pj_envd_start s = { 0 };
        int r = message(msg, len, &root, err);
        if (r < 0)
                return r;
        if ((r = check_message(root, "", names, ELEMENTSOF(names), err)) < 0)
                return r;
        const struct pj_json *proc = pj_json_member(root, "process");
        if (!proc || proc->type != PJ_JSON_OBJECT)
                return pj_error_set(err, "process", "process is required: {\"cmd\": ..., \"args\": [...]}");
        if ((r = pj_check_fields(proc, "process", pnames, ELEMENTSOF(pnames), err)) < 0)
                return r;
        if ((r = string_field(pj_json_member(proc, "cmd"), "process.cmd", PJ_E2B_MAX_ARG, false, &s.cmd, err)) < 0)
                return r;
        if (!s.cmd)
                return pj_error_set(err, "process.cmd", "process.cmd is required");
        const struct pj_json *args = pj_json_member(proc, "args");
        if (args && args->type != PJ_JSON_ARRAY)
                return pj_error_set(err, "process.args", "process.args must be an array of strings");
        if (args && args->n > PJ_E2B_MAX_ARGS - 1)
                return pj_error_set(err, "process.args", "process.args must have at most %d entries", PJ_E2B_MAX_ARGS - 1);
        s.args = xnew0(char *, (args ? args->n : 0) + 1);
        size_t i = 0;
        char p[PJ_PATH_MAX];
        for (const struct pj_json *a = args ? args->child : NULL; a; a = a->next, i++) {
                pj_mkindex(p, "process.args", i);
                if ((r = string_field(a, p, PJ_E2B_MAX_ARG, true, &s.args[i], err)) < 0)
                        return r;
                s.n_args = i + 1;
        }
        const struct pj_json *envs = pj_json_member(proc, "envs");
        if (envs && (r = pj_string_map(envs, "process.envs", true, PJ_E2B_MAX_ENV, 256, 32768, NULL, &s.env_keys, &s.env_values,
                                    &s.n_env, err)) < 0)
                return r;
        if ((r = string_field(pj_json_member(proc, "cwd"), "process.cwd", PJ_E2B_MAX_PATH, false, &s.cwd, err)) < 0)
                return r;
        const struct pj_json *pty = pj_json_member(root, "pty");
        if (pty) {
                if ((r = pty_field(pty, "pty", &s.rows, &s.cols, err)) < 0)
                        return r;
                s.pty = true;
        }
        if ((r = string_field(pj_json_member(root, "tag"), "tag", PJ_E2B_MAX_TAG, false, &s.tag, err)) < 0)
                return r;
        if ((r = bool_field(pj_json_member(root, "stdin"), "stdin", &s.stdin_open, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_selector_parse(const char *msg, size_t len, struct pj_envd_selector *ret, struct err *err) {
        static const char *const names[] = { "process" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s, err);
        if (r < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

void pj_envd_input_done(struct pj_envd_input *s) {
        if (!s)
                return;
        pj_envd_selector_done(&s->process);
        free(s->data);
        *s = (struct pj_envd_input) { 0 };
}

/* proto3 bytes: base64, standard or URL-safe alphabet, padding optional. */
static int bytes_field(const struct pj_json *m, const char *path, size_t max, uint8_t **ret, size_t *ret_len,
                       struct err *err) {
        if (m->type != PJ_JSON_STRING)
                return pj_error_set(err, path, "%s must be base64 text", path);
        if (m->str_len > (max / 3 + 1) * 4 + 4)
                return pj_error_set(err, path, "%s must be at most %zu bytes", path, max);
        _cleanup_free_ char *std = xstrndup(m->str, m->str_len);
        for (char *c = std; *c; c++)
                *c = *c == '-' ? '+' : *c == '_' ? '/' : *c;
        if (base64_decode_flags(std, m->str_len, BASE64_PAD_OPTIONAL, ret, ret_len) < 0)
                return pj_error_set(err, path, "%s must be base64 text", path);
        if (*ret_len > max) {
                free(*ret);
                *ret = NULL;
                return pj_error_set(err, path, "%s must be at most %zu bytes", path, max);
        }
        return 0;
}

/* input: {stdin: base64} or {pty: base64}, at prefix. */
static int input_field(const struct pj_json *in, const char *prefix, struct pj_envd_input *s, struct err *err) {
        static const char *const inames[] = { "stdin", "pty" };
        char p[PJ_PATH_MAX];
        if (!in || in->type != PJ_JSON_OBJECT)
                return pj_error_set(err, prefix, "%s is required: {\"stdin\": base64} or {\"pty\": base64}", prefix);
        int r = pj_check_fields(in, prefix, inames, ELEMENTSOF(inames), err);
        if (r < 0)
                return r;
        const struct pj_json *sd = pj_json_member(in, "stdin"), *pt = pj_json_member(in, "pty");
        if ((sd != NULL) == (pt != NULL))
                return pj_error_set(err, prefix, "%s must have exactly one of stdin and pty", prefix);
        s->pty = pt != NULL;
        return bytes_field(sd ? sd : pt, pj_mkpath(p, prefix, sd ? "stdin" : "pty"), PJ_E2B_MAX_INPUT, &s->data, &s->len, err);
}

int pj_envd_input_parse(const char *msg, size_t len, struct pj_envd_input *ret, struct err *err) {
        static const char *const names[] = { "process", "input" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_input_done) struct pj_envd_input s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s.process, err);
        if (r < 0 || (r = input_field(pj_json_member(root, "input"), "input", &s, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_stream_input_parse(const char *msg, size_t len, enum pj_envd_stream_kind *ret_kind, struct pj_envd_input *ret,
                               struct err *err) {
        static const char *const names[] = { "start", "data", "keepalive" }, *const start_names[] = { "process" },
                                 *const data_names[] = { "input" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_input_done) struct pj_envd_input s = { 0 };
        int r = message(msg, len, &root, err);
        if (r < 0 || (r = pj_check_fields(root, "", names, ELEMENTSOF(names), err)) < 0)
                return r;
        if (root->n != 1)
                return pj_error_set(err, "", "A StreamInputRequest has exactly one of start, data and keepalive");
        const struct pj_json *m = root->child;
        if (m->type != PJ_JSON_OBJECT)
                return pj_error_set(err, m->key, "%s must be an object", m->key);
        enum pj_envd_stream_kind kind;
        if (pj_json_key_is(m, "start")) {
                kind = PJ_ENVD_STREAM_START;
                if ((r = pj_check_fields(m, "start", start_names, ELEMENTSOF(start_names), err)) < 0 ||
                    (r = selector(pj_json_member(m, "process"), "start.process", &s.process, err)) < 0)
                        return r;
        } else if (pj_json_key_is(m, "data")) {
                kind = PJ_ENVD_STREAM_DATA;
                if ((r = pj_check_fields(m, "data", data_names, ELEMENTSOF(data_names), err)) < 0 ||
                    (r = input_field(pj_json_member(m, "input"), "data.input", &s, err)) < 0)
                        return r;
        } else {
                kind = PJ_ENVD_STREAM_KEEPALIVE;
                if ((r = pj_check_fields(m, "keepalive", NULL, 0, err)) < 0)
                        return r;
        }
        *ret_kind = kind;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_signal_parse(const char *msg, size_t len, struct pj_envd_selector *ret, int *ret_signo, struct err *err) {
        static const char *const names[] = { "process", "signal" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s, err);
        if (r < 0)
                return r;
        const struct pj_json *sig = pj_json_member(root, "signal");
        int64_t n = 0;
        if (sig && sig->type == PJ_JSON_STRING && !strcmp(sig->str, "SIGNAL_SIGKILL"))
                n = 9;
        else if (sig && sig->type == PJ_JSON_STRING && !strcmp(sig->str, "SIGNAL_SIGTERM"))
                n = 15;
        else if (sig && sig->type == PJ_JSON_NUMBER && pj_number_to_int(sig, &n) && (n == 9 || n == 15))
                ;
        else
                return pj_error_set(err, "signal", "signal must be SIGNAL_SIGTERM or SIGNAL_SIGKILL");
        *ret_signo = (int) n;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_update_parse(const char *msg, size_t len, struct pj_envd_selector *ret, uint32_t *ret_rows, uint32_t *ret_cols,
                         struct err *err) {
        static const char *const names[] = { "process", "pty" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_selector_done) struct pj_envd_selector s = { 0 };
        int r = process_message(msg, len, names, ELEMENTSOF(names), &root, &s, err);
        if (r < 0)
                return r;
        const struct pj_json *pty = pj_json_member(root, "pty");
        *ret_rows = *ret_cols = 0;
        if (pty && (r = pty_field(pty, "pty", ret_rows, ret_cols, err)) < 0)
                return r;
        *ret = TAKE_STRUCT(s);
        return 0;
}

int pj_envd_empty_parse(const char *msg, size_t len, struct err *err) {
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        int r = message(msg, len, &root, err);
        if (r < 0)
                return r;
        return pj_check_fields(root, "", NULL, 0, err);
}

void pj_envd_fs_done(struct pj_envd_fs *f) {
        if (!f)
                return;
        free_many(f->path, f->to);
        *f = (struct pj_envd_fs) { 0 };
}

int pj_envd_fs_parse(const char *msg, size_t len, enum pj_envd_fs_kind kind, struct pj_envd_fs *ret, struct err *err) {
        static const char *const path_names[] = { "path" }, *const move_names[] = { "source", "destination" },
                                 *const list_names[] = { "path", "depth" },
                                 *const watch_names[] = { "path", "recursive", "includeEntry", "include_entry",
                                                          "allowNetworkMounts", "allow_network_mounts" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_envd_fs_done) struct pj_envd_fs f = { .depth = 1 };
        int r = message(msg, len, &root, err);
        if (r < 0)
                return r;
        switch (kind) {
        case PJ_ENVD_FS_PATH: r = check_message(root, "", path_names, ELEMENTSOF(path_names), err); break;
        case PJ_ENVD_FS_MOVE: r = check_message(root, "", move_names, ELEMENTSOF(move_names), err); break;
        case PJ_ENVD_FS_LISTDIR: r = check_message(root, "", list_names, ELEMENTSOF(list_names), err); break;
        case PJ_ENVD_FS_WATCH: r = check_message(root, "", watch_names, ELEMENTSOF(watch_names), err); break;
        }
        if (r < 0)
                return r;
        const char *pname = kind == PJ_ENVD_FS_MOVE ? "source" : "path";
        if ((r = string_field(pj_json_member(root, pname), pname, PJ_E2B_MAX_PATH, false, &f.path, err)) < 0)
                return r;
        if (!f.path)
                return pj_error_set(err, pname, "%s is required", pname);
        if (kind == PJ_ENVD_FS_MOVE) {
                if ((r = string_field(pj_json_member(root, "destination"), "destination", PJ_E2B_MAX_PATH, false, &f.to, err)) < 0)
                        return r;
                if (!f.to)
                        return pj_error_set(err, "destination", "destination is required");
        }
        if (kind == PJ_ENVD_FS_LISTDIR && (r = u32_field(pj_json_member(root, "depth"), "depth", 64, &f.depth, err)) < 0)
                return r;
        if (kind == PJ_ENVD_FS_LISTDIR && f.depth == 0)
                f.depth = 1;
        if (kind == PJ_ENVD_FS_WATCH) {
                if ((r = bool_field(pj_json_member(root, "recursive"), "recursive", &f.recursive, err)) < 0)
                        return r;
                bool inc = false, net = false;
                if ((r = bool_field(field(root, "includeEntry", "include_entry"), "includeEntry", &inc, err)) < 0 ||
                    (r = bool_field(field(root, "allowNetworkMounts", "allow_network_mounts"), "allowNetworkMounts", &net,
                                    err)) < 0)
                        return r;
                if (net)
                        return pj_error_set(err, "allowNetworkMounts",
                                            "allowNetworkMounts is not supported on this server (envd %s): a sandbox here "
                                            "has no network mounts",
                                            PJ_E2B_ENVD_VERSION);
                f.include_entry = inc;
        }
        *ret = TAKE_STRUCT(f);
        return 0;
}
