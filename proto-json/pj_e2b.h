/* pj_e2b.h — E2B's wire, as its SDKs speak it (e2b-dev/infra spec/openapi.yml for the control
 * plane, envd's process.proto and filesystem.proto over the Connect protocol with the JSON
 * codec for the sandbox side): strict parsers with the field at fault named in every error,
 * and the Connect envelope codec.
 *
 * Every parser takes untrusted bytes. Fields E2B defines that change behaviour and that Paddock
 * does not do are refused by name (-EINVAL, "autoResume: ... not supported"), never ignored.
 * Connect request messages accept a field under its JSON name (lowerCamelCase) or its proto
 * name (snake_case), as protobuf's JSON mapping says; unknown fields are refused.
 *
 * pj_e2b.c parses the control plane's bodies, pj_envd.c the Connect protocol and envd's messages. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj.h"
#include "pj_egress.h"

/* What Paddock answers as envdVersion: every feature the SDKs gate on up to it is implemented
 * (stdin, default user, closeStdin, octet-stream uploads, recursive watches). */
#define PJ_E2B_ENVD_VERSION "0.6.3"
#define PJ_E2B_ENVD_PORT 49983
/* The server's default for NewSandboxV2.timeout and ConnectSandboxV2.timeout (POST
 * /v2/sandboxes, /v2/sandboxes/{id}/connect): SDKs from 2.51 send none unless asked. */
#define PJ_E2B_V2_DEFAULT_TIMEOUT_S 300
/* The SDK's own default for NewSandbox.timeout when absent (seconds). */
#define PJ_E2B_DEFAULT_TIMEOUT_S 15
#define PJ_E2B_MAX_TIMEOUT_S (30 * 24 * 3600)
/* metadata: entries, key and value bytes; envVars as exec's env (128 entries, names
 * [A-Za-z_][A-Za-z0-9_]*, values 32 KiB). */
#define PJ_E2B_MAX_METADATA 64
#define PJ_E2B_MAX_METADATA_KEY 256
#define PJ_E2B_MAX_METADATA_VALUE 1024
#define PJ_E2B_MAX_ENV 128
/* A Connect request message (the JSON inside the envelope, or a unary body). */
#define PJ_CONNECT_MAX_MESSAGE (2 * 1024 * 1024)
#define PJ_E2B_MAX_ARGS 1024
#define PJ_E2B_MAX_ARG 65536
#define PJ_E2B_MAX_TAG 200
#define PJ_E2B_MAX_PATH 4096
#define PJ_E2B_MAX_INPUT (1024 * 1024)

/* ---- control plane ---- */

struct pj_e2b_create {
        char *template_id;               /* required, 1..128 of [A-Za-z0-9._/:-] */
        int64_t timeout_s;               /* default PJ_E2B_DEFAULT_TIMEOUT_S; 0..PJ_E2B_MAX_TIMEOUT_S */
        bool timeout_set;                /* given in the body (v2 defaults it to PJ_E2B_V2_DEFAULT_TIMEOUT_S) */
        char *metadata_json;             /* canonical JSON object of strings, NULL: none */
        char *env_json;                  /* likewise for envVars */
        struct pj_egress egress;         /* from allow_internet_access and network */
        bool allow_internet_set, allow_internet;
        bool public_traffic;             /* network.allowPublicTraffic (default true) */
        bool auto_pause;                 /* autoPause: paused at the timeout, not killed */
        bool auto_pause_memory;          /* autoPauseMemory (default true with autoPause): with its memory */
        bool auto_resume;                /* autoResume.enabled: a call to it while paused resumes it */
        char *volume_name, *volume_path; /* volumeMounts[0] (at most one): the account's volume by name and
                                          * where it is mounted (mountPath's rules); NULL: none */
};
void pj_e2b_create_done(struct pj_e2b_create *c);
int pj_e2b_create_parse(const char *body, size_t len, struct pj_e2b_create *ret, struct err *err);

/* {"timeout": seconds} (POST /sandboxes/{id}/timeout) and {"timeout", "memory"} (connect).
 * Connect: v1 (POST /sandboxes/{id}/connect) wants timeout; v2 (/v2/...) takes an empty body or
 * {} and defaults it to PJ_E2B_V2_DEFAULT_TIMEOUT_S, as E2B's ConnectSandboxV2 does. */
int pj_e2b_timeout_parse(const char *body, size_t len, int64_t *ret_timeout_s, struct err *err);
int pj_e2b_connect_parse(const char *body, size_t len, bool v2, int64_t *ret_timeout_s, struct err *err);
/* PUT /sandboxes/{id}/network (updateNetwork): allowOut, denyOut (only 0.0.0.0/0),
 * allow_internet_access; egressProxy and rules are refused by name. The policy in *ret, as a
 * create's network would give it. */
int pj_e2b_network_update_parse(const char *body, size_t len, struct pj_egress *ret, struct err *err);
/* POST /sandboxes/{id}/snapshots {name?}: the name, "snapshot" when absent. */
/* E2B's volume names: 1..40 of [A-Za-z0-9_-] (E2B's pattern, bounded as ours are). */
bool pj_e2b_volume_name_ok(const char *s, size_t n);
/* POST /volumes {name}: the name, or -EINVAL naming the field. */
int pj_e2b_volume_parse(const char *body, size_t len, char **ret_name, struct err *err);
int pj_e2b_snapshot_parse(const char *body, size_t len, char **ret_name, struct err *err);
/* {"memory": bool} (pause); *ret_memory true when absent. An empty body is {}. */
int pj_e2b_pause_parse(const char *body, size_t len, bool *ret_memory, struct err *err);

/* GET /v2/sandboxes ?metadata=k%3Dv%26k2%3Dv2 (URL-encoded pairs, as the SDK sends them):
 * at most PJ_E2B_MAX_METADATA pairs. */
struct pj_e2b_kv {
        char *key, *value;
};
int pj_e2b_metadata_query_parse(const char *q, struct pj_e2b_kv **ret, size_t *ret_n, struct err *err);
void pj_e2b_kv_free(struct pj_e2b_kv *v, size_t n);

/* ---- the Connect protocol ---- */

/* Connect codes (lowercase wire names) and the HTTP status of a unary error. */
enum pj_connect_code {
        PJ_CONNECT_CANCELED = 1,
        PJ_CONNECT_UNKNOWN = 2,
        PJ_CONNECT_INVALID_ARGUMENT = 3,
        PJ_CONNECT_DEADLINE_EXCEEDED = 4,
        PJ_CONNECT_NOT_FOUND = 5,
        PJ_CONNECT_ALREADY_EXISTS = 6,
        PJ_CONNECT_PERMISSION_DENIED = 7,
        PJ_CONNECT_RESOURCE_EXHAUSTED = 8,
        PJ_CONNECT_FAILED_PRECONDITION = 9,
        PJ_CONNECT_ABORTED = 10,
        PJ_CONNECT_OUT_OF_RANGE = 11,
        PJ_CONNECT_UNIMPLEMENTED = 12,
        PJ_CONNECT_INTERNAL = 13,
        PJ_CONNECT_UNAVAILABLE = 14,
        PJ_CONNECT_DATA_LOSS = 15,
        PJ_CONNECT_UNAUTHENTICATED = 16,
};
const char *pj_connect_code_name(enum pj_connect_code c);
int pj_connect_code_http(enum pj_connect_code c);

/* An envelope: flags (1 byte: 0x01 compressed, 0x02 end of stream), length (u32 BE), message. */
#define PJ_CONNECT_FLAG_COMPRESSED 0x01
#define PJ_CONNECT_FLAG_END 0x02
/* The first envelope in buf[0..len): 1 with *ret_flags, the message and the bytes it took;
 * 0 when more bytes are needed; -EMSGSIZE when its length is over max (told from the header
 * alone), -EPROTO for a compressed one (none was negotiated). */
int pj_connect_envelope_decode(const uint8_t *buf, size_t len, size_t max, uint8_t *ret_flags, const uint8_t **ret_msg,
                               size_t *ret_msg_len, size_t *ret_used);
/* The 5-byte header of an envelope of len bytes. */
void pj_connect_envelope_header(uint8_t out[5], uint8_t flags, uint32_t len);

/* ---- envd's messages ---- */

struct pj_envd_selector {
        uint32_t pid;                    /* 0: by tag */
        char *tag;
};

struct pj_envd_start {
        char *cmd;
        char **args;                     /* NULL-terminated, may be empty */
        size_t n_args;
        char **env_keys, **env_values;
        size_t n_env;
        char *cwd;                       /* NULL: the user's home */
        bool pty;
        uint32_t rows, cols;
        char *tag;
        bool stdin_open;
};
void pj_envd_start_done(struct pj_envd_start *s);
int pj_envd_start_parse(const char *msg, size_t len, struct pj_envd_start *ret, struct err *err);

/* ConnectRequest, CloseStdinRequest: {process}. */
int pj_envd_selector_parse(const char *msg, size_t len, struct pj_envd_selector *ret, struct err *err);
void pj_envd_selector_done(struct pj_envd_selector *s);

struct pj_envd_input {
        struct pj_envd_selector process;
        bool pty;                        /* input.pty rather than input.stdin */
        uint8_t *data;
        size_t len;
};
void pj_envd_input_done(struct pj_envd_input *s);
int pj_envd_input_parse(const char *msg, size_t len, struct pj_envd_input *ret, struct err *err);

/* One StreamInputRequest: {start: {process}}, {data: {input}} or {keepalive: {}}. */
enum pj_envd_stream_kind { PJ_ENVD_STREAM_START = 1, PJ_ENVD_STREAM_DATA, PJ_ENVD_STREAM_KEEPALIVE };
int pj_envd_stream_input_parse(const char *msg, size_t len, enum pj_envd_stream_kind *ret_kind, struct pj_envd_input *ret,
                               struct err *err);

/* SendSignalRequest: signal SIGNAL_SIGTERM (15) or SIGNAL_SIGKILL (9), by name or number. */
int pj_envd_signal_parse(const char *msg, size_t len, struct pj_envd_selector *ret, int *ret_signo, struct err *err);
/* UpdateRequest: {process, pty: {size: {cols, rows}}}; rows/cols 0 when pty is absent. */
int pj_envd_update_parse(const char *msg, size_t len, struct pj_envd_selector *ret, uint32_t *ret_rows, uint32_t *ret_cols,
                         struct err *err);
/* ListRequest: {} (also an empty message). */
int pj_envd_empty_parse(const char *msg, size_t len, struct err *err);

/* Filesystem requests: one or two paths (Stat, MakeDir, Remove: path; Move: source and
 * destination; ListDir: path, depth; WatchDir: path, recursive). */
struct pj_envd_fs {
        char *path, *to;
        uint32_t depth;                  /* ListDir: default 1 */
        bool recursive;
        bool include_entry;              /* WatchDir: each event carries the entry's EntryInfo */
};
void pj_envd_fs_done(struct pj_envd_fs *f);
enum pj_envd_fs_kind { PJ_ENVD_FS_PATH, PJ_ENVD_FS_MOVE, PJ_ENVD_FS_LISTDIR, PJ_ENVD_FS_WATCH };
int pj_envd_fs_parse(const char *msg, size_t len, enum pj_envd_fs_kind kind, struct pj_envd_fs *ret, struct err *err);
