/* pj_agent.h — the binary protocol between the host and paddock-init, the agent that runs
 * as PID 1 in every sandbox (nodeagent/paddock-init/). Wire format, messages and every bound:
 * proto-json/AGENT-PROTOCOL.md. This file is the one codec both ends use.
 *
 * Frame = 12-byte header {u32 BE payload length, u8 type, u8 flags, u16 reserved = 0,
 * u32 BE channel id} + payload; the payload is a sequence of TLV fields
 * {u8 tag, u32 BE length, bytes}. Integers inside a TLV are big-endian of the exact size
 * the tag's kind says; strings carry no NUL and are not NUL-terminated on the wire.
 *
 * Untrusted on both ends: the header is checked (length, type, flags, reserved) before
 * anything is allocated for the payload; TLV readers never read past the buffer; every
 * field is checked against the set its message type allows; scalars may appear once;
 * errors are -EINVAL with struct err naming the field ("argv[1024]", "procs[3].tag").
 *
 * Dependencies: libc, pj.c, common/err.c (struct err) and common/xalloc.c (allocation aborts
 * on OOM), nothing else, so the static agent links it directly.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj.h"

#define PJ_AGENT_VERSION 1
#define PJ_AGENT_HEADER_SIZE 12
#define PJ_AGENT_TLV_HEADER 5

/* Bounds (AGENT-PROTOCOL.md "Bounds"). */
#define PJ_AGENT_MAX_PAYLOAD (1024u * 1024u)
#define PJ_AGENT_MAX_ARGV 1024
#define PJ_AGENT_MAX_ENV 1024
#define PJ_AGENT_MAX_STRING (64u * 1024u)
#define PJ_AGENT_MAX_PATH 4096
#define PJ_AGENT_MAX_TAG 256
#define PJ_AGENT_MAX_SECRET 1024
#define PJ_AGENT_MAX_MESSAGE 4096
#define PJ_AGENT_MAX_NAME 255
#define PJ_AGENT_MAX_PROCS 256
#define PJ_AGENT_MAX_DIRENTS 1024     /* per DIRENTS frame */
/* The most DATA/STDIN/OUTPUT bytes one frame carries: the payload minus one TLV header. */
#define PJ_AGENT_MAX_DATA (PJ_AGENT_MAX_PAYLOAD - PJ_AGENT_TLV_HEADER)

/* Where the host finds a sandbox's agent socket, on both drivers: the Docker volume
 * PJ_AGENT_VOLUME_PREFIX<sandbox id> (a small tmpfs, mounted in the sandbox at /.paddock/run),
 * at <docker root>/volumes/<that volume>/_data/PJ_AGENT_SOCKET_NAME. */
#define PJ_AGENT_VOLUME_PREFIX "paddock-init-"
#define PJ_AGENT_SOCKET_NAME "agent.sock"

enum pj_agent_type {
        PJ_AGENT_HELLO = 1,
        PJ_AGENT_HELLO_OK = 2,
        PJ_AGENT_ERROR = 3,
        PJ_AGENT_OK = 4,
        PJ_AGENT_DATA = 5,
        PJ_AGENT_END = 6,
        PJ_AGENT_SPAWN = 10,
        PJ_AGENT_SPAWNED = 11,
        PJ_AGENT_STDIN = 12,
        PJ_AGENT_STDIN_CLOSE = 13,
        PJ_AGENT_SIGNAL = 14,
        PJ_AGENT_RESIZE = 15,
        PJ_AGENT_OUTPUT = 16,
        PJ_AGENT_EXIT = 17,
        PJ_AGENT_LIST = 18,
        PJ_AGENT_PROCS = 19,
        PJ_AGENT_ATTACH = 20,
        PJ_AGENT_READ = 30,
        PJ_AGENT_WRITE = 31,
        PJ_AGENT_STAT = 32,
        PJ_AGENT_STAT_OK = 33,
        PJ_AGENT_LISTDIR = 34,
        PJ_AGENT_DIRENTS = 35,
        PJ_AGENT_MKDIR = 36,
        PJ_AGENT_MOVE = 37,
        PJ_AGENT_REMOVE = 38,
        PJ_AGENT_FORWARD = 40,
        PJ_AGENT_WATCH = 41,
        PJ_AGENT_EVENT = 42,
        PJ_AGENT_PARK = 43,
};

/* PARK (no fields, answered OK) makes the agent close its listener and every connection and
 * unlink its socket, so that the sandbox can be checkpointed (gVisor cannot save a bound host
 * socket). This signal, sent to PID 1 from outside (docker kill), makes it listen again on
 * the same path, re-reading its secret file; it is never forwarded to the processes. SIGPWR:
 * runsc's kill knows no realtime signal ("unknown signal 37"), and nothing in a sandbox has a
 * use for SIGPWR sent to its init. */
#define PJ_AGENT_UNPARK_SIGNAL 30

enum pj_agent_tag {
        PJ_AGENT_T_SECRET = 1,
        PJ_AGENT_T_VERSION = 2,
        PJ_AGENT_T_ERRNO = 3,
        PJ_AGENT_T_MESSAGE = 4,
        PJ_AGENT_T_ARGV = 5,
        PJ_AGENT_T_ENV = 6,
        PJ_AGENT_T_CWD = 7,
        PJ_AGENT_T_UID = 8,
        PJ_AGENT_T_GID = 9,
        PJ_AGENT_T_STDIN = 10,
        PJ_AGENT_T_ROWS = 11,
        PJ_AGENT_T_COLS = 12,
        PJ_AGENT_T_TAG = 13,
        PJ_AGENT_T_KILL_ON_DETACH = 14,
        PJ_AGENT_T_PID = 15,
        PJ_AGENT_T_STREAM = 16,
        PJ_AGENT_T_DATA = 17,
        PJ_AGENT_T_CODE = 18,
        PJ_AGENT_T_SIGNAL = 19,
        PJ_AGENT_T_PATH = 20,
        PJ_AGENT_T_TO = 21,
        PJ_AGENT_T_MODE = 22,
        PJ_AGENT_T_PARENTS = 23,
        PJ_AGENT_T_RECURSIVE = 24,
        PJ_AGENT_T_FTYPE = 25,
        PJ_AGENT_T_SIZE = 26,
        PJ_AGENT_T_MTIME = 27,
        PJ_AGENT_T_PORT = 28,
        PJ_AGENT_T_PROC = 29,
        PJ_AGENT_T_DIRENT = 30,
        PJ_AGENT_T_NAME = 31,
        PJ_AGENT_T_RUNNING = 32,
        PJ_AGENT_T_TRUNCATED = 33,
        PJ_AGENT_T_BASE_ENV = 34,
        PJ_AGENT_T_EVENT = 35,
        PJ_AGENT_T_MAX = 35,
};

#define PJ_AGENT_BIT(tag) (UINT64_C(1) << (tag))
#define PJ_AGENT_HAS(f, tag) (((f)->present & PJ_AGENT_BIT(tag)) != 0)

enum pj_agent_ftype {
        PJ_AGENT_FT_FILE = 1,
        PJ_AGENT_FT_DIR = 2,
        PJ_AGENT_FT_SYMLINK = 3,
        PJ_AGENT_FT_OTHER = 4,
};

/* EVENT: what happened to `path` (relative to the watched directory) */
enum pj_agent_event {
        PJ_AGENT_EV_CREATE = 1,
        PJ_AGENT_EV_WRITE = 2,     /* modified (and closed after writing) */
        PJ_AGENT_EV_REMOVE = 3,
        PJ_AGENT_EV_RENAME = 4,    /* moved away from path (or out of the watched tree) */
        PJ_AGENT_EV_CHMOD = 5,     /* attributes */
};

struct pj_agent_header {
        uint32_t len;  /* payload bytes, <= PJ_AGENT_MAX_PAYLOAD */
        uint8_t type;  /* enum pj_agent_type */
        uint8_t flags; /* 0 in version 1 */
        uint32_t id;   /* channel */
};

/* The scalar and string fields, shared by messages and by the nested PROC/DIRENT entries.
 * present has bit PJ_AGENT_BIT(tag) for every field set: the decoder sets it; an encoder
 * caller sets it for the optional fields it wants sent (required fields of the type are
 * always sent). Strings are NUL-terminated copies owned by the struct. */
struct pj_agent_fields {
        uint64_t present;
        char *secret;   /* HELLO, 1..PJ_AGENT_MAX_SECRET bytes */
        uint32_t version;
        uint32_t err;   /* ERROR: a positive errno */
        char *message;  /* ERROR, <= PJ_AGENT_MAX_MESSAGE */
        char *cwd;      /* SPAWN, path */
        uint32_t uid, gid;
        bool stdin_pipe;     /* SPAWN: a stdin pipe (STDIN frames) instead of /dev/null */
        uint32_t rows, cols; /* SPAWN (both or neither: a PTY), RESIZE; 1..65535 */
        char *tag;           /* SPAWN, PROCS entry; <= PJ_AGENT_MAX_TAG */
        bool kill_on_detach; /* SPAWN: SIGKILL the process group when this connection goes */
        bool base_env;       /* SPAWN: env is layered over the agent's own environment */
        uint32_t pid;
        uint8_t stream;      /* OUTPUT: 1 stdout (and a PTY), 2 stderr */
        int32_t code;        /* EXIT, PROCS entry: exit status, or -1 when killed by signal */
        uint32_t signo;      /* SIGNAL; EXIT, PROCS entry: the signal that ended it (0 none) */
        char *path;          /* file messages, <= PJ_AGENT_MAX_PATH */
        char *to;            /* MOVE */
        uint32_t mode;       /* WRITE, MKDIR, STAT_OK, DIRENTS entry: permission bits (<= 07777) */
        bool parents, recursive, running, truncated;
        uint8_t ftype;       /* enum pj_agent_ftype */
        uint64_t size;
        int64_t mtime_ns;    /* nanoseconds since the epoch */
        uint32_t port;       /* FORWARD, 1..65535 */
        char *name;          /* DIRENTS entry, <= PJ_AGENT_MAX_NAME, no '/' */
        uint8_t event;       /* EVENT: enum pj_agent_event */
};

/* A decoded (or to-be-encoded) message. data points into the payload buffer given to
 * pj_agent_msg_decode() (not copied: OUTPUT, STDIN and DATA frames are the bulk); the rest
 * is owned by the struct and released by pj_agent_msg_done(). */
struct pj_agent_msg {
        uint8_t type;
        uint32_t id;
        struct pj_agent_fields f;
        char **argv; /* SPAWN: 1..PJ_AGENT_MAX_ARGV, NULL-terminated */
        size_t n_argv;
        char **env;  /* SPAWN: 0..PJ_AGENT_MAX_ENV "NAME=value", NULL-terminated */
        size_t n_env;
        const uint8_t *data; /* DATA, STDIN, OUTPUT */
        size_t data_len;
        struct pj_agent_fields *entries; /* PROCS (<= PJ_AGENT_MAX_PROCS), DIRENTS (<= PJ_AGENT_MAX_DIRENTS) */
        size_t n_entries;
};

/* The name of a type ("SPAWN"), or NULL when the type is not one of ours. */
const char *pj_agent_type_name(uint8_t type);

void pj_agent_header_encode(uint8_t out[PJ_AGENT_HEADER_SIZE], const struct pj_agent_header *h);
/* Checks the 12 bytes at buf: payload length <= PJ_AGENT_MAX_PAYLOAD, known type, flags and
 * reserved 0. Fills *ret on success only. Call it before allocating the payload. */
int pj_agent_header_decode(const uint8_t buf[PJ_AGENT_HEADER_SIZE], struct pj_agent_header *ret, struct err *err);

/* A growable output buffer (xrealloc: no failure path). */
struct pj_agent_buf {
        uint8_t *p;
        size_t len, cap;
};
void pj_agent_buf_done(struct pj_agent_buf *b);
void pj_agent_buf_put(struct pj_agent_buf *b, const void *p, size_t n);
/* Room for n more bytes (grown by doubling). */
void pj_agent_buf_reserve(struct pj_agent_buf *b, size_t n);
/* TLV writers, appending to b. */
void pj_agent_put_bytes(struct pj_agent_buf *b, uint8_t tag, const void *p, size_t n);
void pj_agent_put_u32(struct pj_agent_buf *b, uint8_t tag, uint32_t v);

/* TLV reader over [p, p+n): returns 1 with ret_tag, ret_val, ret_len set to the next field,
 * 0 at the end, -EINVAL when a field is cut short (the iterator then stays at the end). */
struct pj_agent_tlv_iter {
        const uint8_t *p;
        size_t n, off;
};
int pj_agent_tlv_next(struct pj_agent_tlv_iter *it, uint8_t *ret_tag, const uint8_t **ret_val, uint32_t *ret_len);

/* Appends the whole frame (header + payload) of m to out, encoded in place. Returns 0,
 * -EMSGSIZE when the payload would exceed PJ_AGENT_MAX_PAYLOAD, -EINVAL when m breaks a rule
 * the decoder checks (bad type, a required string missing, too many argv/env/entries); on
 * an error out->len is what it was (its buffer may have grown: pj_agent_buf_done it). */
int pj_agent_msg_encode(const struct pj_agent_msg *m, struct pj_agent_buf *out, struct err *err);
/* The 17 bytes that precede data_len bytes of data in a frame whose only field is data
 * (DATA): the header and the field's tag and length. What pj_agent_msg_encode would write,
 * for a sender that passes the data itself from where it is (writev). -EINVAL for another
 * type, -EMSGSIZE above PJ_AGENT_MAX_DATA. */
int pj_agent_data_prefix(uint8_t type, uint32_t id, size_t data_len, uint8_t out[PJ_AGENT_HEADER_SIZE + PJ_AGENT_TLV_HEADER]);
/* Decodes the payload of a frame whose header h was accepted by pj_agent_header_decode()
 * (len == h->len). On success fills *ret (which must be zeroed or done) and returns 0; on
 * failure returns -EINVAL with err naming the field, *ret left empty. */
int pj_agent_msg_decode(const struct pj_agent_header *h, const uint8_t *payload, size_t len, struct pj_agent_msg *ret,
                        struct err *err);
/* Frees what m owns and zeroes it; m may be already done or zeroed. */
void pj_agent_msg_done(struct pj_agent_msg *m);
void pj_agent_fields_done(struct pj_agent_fields *f);

/* Constant-time comparison of two secrets (lengths compared too, without early exit on the
 * content). True when equal. */
bool pj_agent_secret_equal(const char *a, size_t alen, const char *b, size_t blen);
