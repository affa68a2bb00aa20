/* pj_api.h — parse and validate public-API request bodies.
 *
 * Every untrusted JSON body of the public REST API (Brimble Sandbox API
 * wire format, see shared/reference/brimble-sandboxes.openapi.yaml) goes
 * through exactly one function here and comes out as a plain C struct, or
 * as an error that names the field at fault.
 *
 * Common contract of every pj_*_parse(body, len, ret, err):
 *   - body/len are the raw bytes; no NUL terminator needed; any bytes are safe.
 *     The HTTP layer enforces the overall body size limit.
 *   - JSON is parsed strictly by pj_json.c (RFC 8259): no comments, no
 *     trailing commas, no leading BOM, strings must be valid UTF-8 (escapes
 *     included: lone surrogates are rejected), nesting deeper than
 *     PJ_JSON_MAX_DEPTH and more than PJ_JSON_MAX_NODES values are rejected,
 *     duplicate keys in an object are rejected.
 *   - The top level must be an object. Unknown fields are rejected at the top
 *     level and inside nested objects (specs, egress, files[i]) so that typos
 *     do not silently fall back to defaults.
 *   - JSON null is treated exactly like an absent field (so a missing required
 *     field and a null one give the same error).
 *   - Integers must be written as integers: 1.5, 2.0, 1e3 and "2" are all
 *     rejected. Booleans must be JSON true/false. Strings never contain NUL.
 *   - Returns 0 and fills *ret (the caller releases it with the matching
 *     *_done()), or -EINVAL and fills *err; on failure *ret is not touched.
 *   - err->field is the JSON path of the culprit ("specs.memory",
 *     "egress.allow[3]", "files[7].path"; "" when the body as a whole is bad)
 *     and err->message a complete sentence meant for the API user that
 *     includes that path ("specs.memory must be an integer between 1 and 2048").
 *     User-supplied text quoted in messages is sanitised and truncated.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj.h"
#include "pj_egress.h"

/* POST /sandboxes. An empty body (len 0) means {} (everything defaulted).
 * Strings are owned by the struct. */
struct pj_sandbox_create {
        /* "name": display name. NULL = the server generates one. 1..64
         * characters (UTF-8 code points, at most 256 bytes), no control
         * characters (C0, DEL, C1). */
        char *name;
        /* "template": template name. NULL = the server default.
         * 1..64 characters of [a-z0-9._-]. */
        char *template_name;
        /* "teamId", "environmentId", "volumeId", "fromSnapshot": ids, exactly
         * 24 lowercase hex digits, or NULL when absent. */
        char *team_id, *environment_id, *volume_id, *from_snapshot;
        /* "region": NULL when absent or "auto" (server picks). Otherwise
         * 1..64 characters of [a-z0-9-]: a 24-hex region id or a region name. */
        char *region;
        /* "specs": has_* tell whether the client set the value; the server
         * applies its defaults and plan caps to the others.
         * cpu 1..2000 (MHz shares), memory 1..2048 (MB), disk 1..5 (GB). */
        bool has_cpu, has_memory, has_disk;
        int cpu, memory, disk;
        /* "autoDestroy" (default false) and "destroyTimeout" (one of 30m, 1h,
         * 3h, 6h, 12h, 18h; required when autoDestroy is true). When
         * autoDestroy is false or absent a string destroyTimeout is accepted
         * and dropped: destroy_timeout stays NULL and destroy_timeout_s 0. */
        bool auto_destroy;
        char *destroy_timeout;
        int64_t destroy_timeout_s; /* derived: seconds, e.g. 1800 for "30m" */
        /* "oneShot": destroy when the main process exits. Default false. */
        bool one_shot;
        /* "blockOutbound": legacy shorthand for egress deny_all.
         * block_outbound_set tells whether it was present (non-null). */
        bool block_outbound_set;
        bool block_outbound;
        /* "egress": egress_set tells whether the client sent an egress object.
         * egress always holds the EFFECTIVE policy after a successful parse:
         * the egress object if given; else deny_all if blockOutbound is true;
         * else open. Sending both egress and blockOutbound (any value) is an
         * error. At create, allow is optional for restricted (an empty
         * allowlist allows nothing) and must be empty or absent otherwise. */
        bool egress_set;
        struct pj_egress egress;
        /* "persistent" (default false) and "persistentDiskGB" (10..50,
         * required when persistent is true, an error without it). Both are
         * an error together with volumeId (persistent:false is tolerated). */
        bool persistent;
        bool has_persistent_disk_gb;
        int persistent_disk_gb;
        /* "mountPath": where the persistent volume is mounted. Always set after
         * a successful parse; default "/workspace". Absolute, not "/", at most
         * 255 bytes, components of [A-Za-z0-9._@+-] (no spaces, ':' or ','
         * which break mount specifications), no "." / ".." / empty
         * components (so no "//" and no trailing '/'), not at or under /proc,
         * /sys or /dev. */
        char *mount_path;
        /* "snapshotMode": "manual" (default; always set after parse) or "automatic". */
        char *snapshot_mode;
        /* "snapshotFrequency": 5-field cron (minute hour day-of-month month
         * day-of-week; each field "*", "*" "/" n, n, a-b, a-b/n, or a comma list
         * of those; numeric ranges 0-59, 0-23, 1-31, 1-12, 0-7). Required when
         * snapshotMode is automatic, an error otherwise. Stored with single
         * spaces between fields. NULL when manual. */
        char *snapshot_frequency;
        /* "lifecycle": {"onTimeout": "destroy" (default) | "pause", "keepMemory": bool (default
         * false, only with pause)}: what the sandbox's end (autoDestroy's timeout, its lifetime)
         * does. pause: the sandbox is paused there instead of destroyed, with its memory when
         * keepMemory and the sandbox can be (else its filesystem). Also set by E2B's autoPause. */
        bool pause_at_end, pause_keep_memory;
        /* "lifecycle.autoResume" (default false; only with pause and keepMemory): a call to the
         * sandbox while it is paused (a command, a file, E2B's envd or a port) resumes it first. */
        bool auto_resume;
        /* Not on the Brimble wire: other adapters (E2B's) set these. metadata_json and env_json
         * are JSON objects of strings (NULL: none); lifetime_s > 0 replaces the default
         * lifetime (destroyed that long after the create, auto_destroy false). */
        char *metadata_json, *env_json;
        char *e2b_json;   /* the E2B adapter's own options, kept on the record as they are */
        int64_t lifetime_s;
};

/* What exec and code have in common: how and where the command runs. */
struct pj_run {
        /* "timeout_seconds": 1..300, default 30. */
        int timeout_s;
        /* "cwd": absolute sandbox path (see pj_sandbox_path_check, "/" also
         * allowed), default "/"; always set after parse. */
        char *cwd;
        /* "env": object of string values, at most 128 entries. Keys match
         * [A-Za-z_][A-Za-z0-9_]{0,255}; values at most 32768 bytes. Parallel
         * arrays in body order; keys are unique (duplicate keys are rejected). */
        char **env_keys, **env_values;
        size_t n_env;
        /* "stream": answer as text/event-stream. Default false. */
        bool stream;
};

/* POST /sandboxes/{id}/exec. Empty body is an error. */
struct pj_exec {
        /* "cmd": required shell command, 1..65536 bytes. */
        char *cmd;
        /* "stdin": optional text given to the command as its standard input (then closed),
         * at most 1 MiB. NULL = none (stdin is /dev/null). */
        char *stdin_data;
        size_t stdin_len;
        struct pj_run run;
};

/* POST /sandboxes/{id}/processes: a process that outlives the request. */
#define PJ_PROCESS_TAG_MAX 256
struct pj_process_start {
        char *cmd;            /* "cmd": required shell command, 1..65536 bytes */
        char *cwd;            /* "cwd": as exec, default "/" */
        char **env_keys, **env_values;   /* "env": as exec */
        size_t n_env;
        char *tag;            /* "tag": optional, 1..256 bytes of printable text; NULL = none */
        bool stdin_open;      /* "stdin": true keeps a stdin pipe open for POST .../stdin */
        int rows, cols;       /* "pty": {"rows", "cols"} 1..1000 each: a terminal; 0 = none */
};
/* POST /sandboxes/{id}/processes/{pid}/stdin */
struct pj_process_stdin {
        char *data;           /* "data": text, at most 1 MiB; may be "" (with close) */
        size_t len;
        bool close;           /* "close": close stdin after data (EOF; on a terminal ^D) */
};
/* POST /sandboxes/{id}/pause: {"keepMemory": bool}, false when absent; an empty body is {}.
 * Any other field is refused by name. */
int pj_pause_parse(const char *body, size_t len, bool *ret_keep_memory, struct err *err);
/* POST /sandboxes/{id}/fork (ours and E2B's): {"count": 1..max_count (default 1),
 * "timeout": seconds 0..max_timeout_s}; *ret_timeout_s -1 when absent. An empty body is {}.
 * Any other field is refused by name. */
int pj_fork_parse(const char *body, size_t len, int max_count, int max_timeout_s, int *ret_count, int *ret_timeout_s,
                  struct err *err);
/* POST /sandboxes/{id}/processes/{pid}/signal: "signal" a name (SIGINT, INT, ...) or 1..64. */
int pj_process_signal_parse(const char *body, size_t len, int *ret_signo, struct err *err);
/* POST /sandboxes/{id}/processes/{pid}/resize: {"rows", "cols"} 1..1000. */
int pj_process_resize_parse(const char *body, size_t len, int *ret_rows, int *ret_cols, struct err *err);
int pj_process_start_parse(const char *body, size_t len, struct pj_process_start *ret, struct err *err);
void pj_process_start_done(struct pj_process_start *p);
int pj_process_stdin_parse(const char *body, size_t len, struct pj_process_stdin *ret, struct err *err);
void pj_process_stdin_done(struct pj_process_stdin *p);

/* POST /sandboxes/{id}/previews: {"port" 1..65535 (required), "expiresIn" seconds 1..31536000,
 * "public", "keepHost"}. Unknown fields are refused by name. */
struct pj_preview_create {
        int port;
        int expires_in_s;     /* 0 = the server's default */
        bool public_;         /* no token needed */
        bool keep_host;       /* pass the client's Host header instead of localhost:<port> */
};
int pj_preview_create_parse(const char *body, size_t len, struct pj_preview_create *ret, struct err *err);

/* POST /sandboxes/{id}/code. Empty body is an error. */
struct pj_code {
        /* "language": required, "python" or "node". */
        char *language;
        /* "code": required, 1 byte .. 1 MiB. */
        char *code;
        struct pj_run run;
};

/* PUT /sandboxes/{id}/egress. "mode" required; "allow" required with at
 * least one entry when mode is restricted and must be absent (or null)
 * otherwise. At most PJ_EGRESS_MAX_ALLOW entries before merging duplicates. */
struct pj_egress_update {
        struct pj_egress egress;
};

/* POST /sandboxes/{id}/snapshots. */
struct pj_snapshot_create {
        char *name; /* "name": required, ^[a-z0-9-]{1,40}$ */
};

/* POST /volumes. */
struct pj_volume_create {
        char *name;    /* "name": required, ^[a-z0-9-]{1,40}$ */
        int size_gb;   /* "sizeGB": required, 10..50 */
        char *region;  /* "region": required, 24 lowercase hex digits */
        char *type;    /* "type": "web" (default; always set after parse) or "sandbox" */
        char *team_id; /* "teamId": 24 lowercase hex digits or NULL */
};

/* POST /sandboxes/{id}/files/batch: {"files":[{"path":"/abs","content_base64":"..."}]}. */
struct pj_batch_file {
        /* The requested path when it was a JSON string without NUL (even if
         * that path was then rejected, so results can echo it), else NULL. */
        char *path;
        /* Decoded content; NULL with len 0 for empty files and failed entries. */
        uint8_t *data;
        size_t len;
};
struct pj_files_batch {
        struct pj_batch_file *files; /* n_files entries, in request order */
        size_t n_files;              /* 1..100 */
        /* n_files entries: NULL when files[i] is good, else a user-facing
         * sentence naming files[i] ("files[7].path must be an absolute path").
         * A bad entry (not an object, bad/missing path, content not standard
         * base64 (padding optional, see BASE64_PAD_OPTIONAL), over
         * max_file_bytes, a path already used by an earlier entry, unknown
         * field) does not fail the batch. */
        char **file_errors;
};

int pj_sandbox_create_parse(const char *body, size_t len, struct pj_sandbox_create *ret, struct err *err);
/* A volume's mount path (mountPath's rules: absolute, not "/", <= 255 bytes of
 * [A-Za-z0-9/._@+-], no "."/".."/empty components, not at or under /proc, /sys, /dev), the
 * field at fault named f. 0 or -EINVAL. */
int pj_mount_path_check(const char *p, size_t n, const char *f, struct err *err);
int pj_exec_parse(const char *body, size_t len, struct pj_exec *ret, struct err *err);
int pj_code_parse(const char *body, size_t len, struct pj_code *ret, struct err *err);
int pj_egress_update_parse(const char *body, size_t len, struct pj_egress_update *ret, struct err *err);
int pj_snapshot_create_parse(const char *body, size_t len, struct pj_snapshot_create *ret, struct err *err);
int pj_volume_create_parse(const char *body, size_t len, struct pj_volume_create *ret, struct err *err);

/* The whole batch fails (-EINVAL) only when the envelope is malformed: not a
 * JSON object, unknown top-level field, "files" missing or not an array,
 * fewer than 1 or more than 100 entries, or the decoded sizes of the good
 * entries add up to more than max_total_bytes. An entry whose decoded content
 * exceeds max_file_bytes is a per-file error. */
int pj_files_batch_parse(const char *body, size_t len, size_t max_file_bytes, size_t max_total_bytes,
                         struct pj_files_batch *ret, struct err *err);

/* POST /templates: a template users build from a Dockerfile and a context of files. */
#define PJ_TEMPLATE_NAME_MAX 40
#define PJ_TEMPLATE_MAX_FILES 256
#define PJ_TEMPLATE_PATH_MAX 255
struct pj_template_file {
        char *path;             /* relative, components neither empty nor . or .., no control bytes or '\\' */
        uint8_t *data;          /* the decoded bytes (utf-8 as given, NULs included; or base64) */
        size_t len;
        int mode;               /* 0..0777, -1 = as written */
};
struct pj_template_build {
        char *name;             /* 1..40 of a-z, 0-9 and '-', not at either end */
        char *dockerfile;       /* its text, no NUL */
        size_t dockerfile_len;
        struct pj_template_file *files;
        size_t n_files;
};
bool pj_template_name_ok(const char *s);
bool pj_template_path_ok(const char *p, size_t n);
/* The field at fault named; -EEXIST when taken(name, ud) says the name is taken (asked before
 * its syntax: a server's own template names may be of another shape), -EFBIG when the
 * Dockerfile and files decode to more than max_context bytes, -EINVAL otherwise. */
int pj_template_build_parse(const char *body, size_t len, size_t max_context, bool (*taken)(const char *name, void *ud),
                            void *ud, struct pj_template_build *ret, struct err *err);
void pj_template_build_done(struct pj_template_build *b);

/* docker save's manifest.json, as the tenant's build sandbox wrote it (untrusted): exactly one
 * image, its Config and Layers paths relative, without '..', of [A-Za-z0-9/._-], at most 200
 * bytes each; at most PJ_SAVED_MAX_LAYERS layers. */
#define PJ_SAVED_MAX_LAYERS 127
struct pj_saved_manifest {
        char *config;
        char **layers;
        size_t n_layers;
};
bool pj_saved_path_ok(const char *p, size_t n);
int pj_saved_manifest_parse(const char *text, size_t len, struct pj_saved_manifest *ret, struct err *err);
void pj_saved_manifest_done(struct pj_saved_manifest *m);

/* A text frame of the terminal's WebSocket: 1 with rows and cols (1..1000 each) when it is a
 * resize message {"type":"resize","rows":R,"cols":C} (no other field); 0 when it is not a JSON
 * object whose type is "resize" (the frame is typed input); -EINVAL, the field named, when it is
 * a resize message that is wrong. */
int pj_terminal_resize_parse(const char *msg, size_t len, uint32_t *ret_rows, uint32_t *ret_cols, struct err *err);

/* Release everything the struct owns and zero it. NULL-safe, idempotent. */
void pj_sandbox_create_done(struct pj_sandbox_create *c);
void pj_exec_done(struct pj_exec *e);
void pj_code_done(struct pj_code *c);
void pj_egress_update_done(struct pj_egress_update *u);
void pj_snapshot_create_done(struct pj_snapshot_create *s);
void pj_volume_create_done(struct pj_volume_create *v);
void pj_files_batch_done(struct pj_files_batch *b);

/* Path check shared with the files endpoints (PUT/GET /files?path=, batch,
 * cwd). Accepts an absolute sandbox path of at most 4096 bytes, valid UTF-8,
 * no control characters, not "/" itself, no empty ("//", trailing '/'), "."
 * or ".." components, each component at most 255 bytes. Paths are rejected,
 * never normalised. Returns 0, or -EINVAL with err filled using field (e.g.
 * "path", "files[3].path") as the subject; err may be NULL. */
int pj_sandbox_path_check(const char *path, struct err *err, const char *field);
