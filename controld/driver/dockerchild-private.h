/* dockerchild-private.h — the wire between controld and its docker child (dockerchild.c, the
 * plumbing) and what the child does with a checked request (dockerchild-allow.c). Both ends
 * run from the same binary on this host: structs travel in host order; the version guards
 * against a parent and a child of different builds all the same. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cleanup.h"

struct config;
struct err;

/* DC_OP_RUNSC_CHECKPOINT's work (docker-memory.c), run by the child, or in-process when there
 * is no child: runsc's checkpoint of container id (full id, checked by the caller) into
 * <docker_root>/containers/<id>/checkpoints/<name> (made 0700; removed again on failure).
 * -ENOENT when runsc has no state for it under cfg's runsc_root or runsc is not configured. */
/* DC_OP_FORK's work (docker-fork.c): step (enum dd_fork_step) of a fork of container src
 * staged under name, for child container dst (full ids, checked by the caller). */
int dd_fork_here(const char *docker_root, int step, const char *src, const char *name, const char *dst, uint64_t limit_bytes,
                 struct err *err);
int dd_runsc_checkpoint_here(const struct config *cfg, const char *docker_root, const char *id, const char *name,
                             int64_t timeout_ms, struct err *err);

#define DC_VERSION 1
#define DC_ARGS 4
#define DC_REQ_MAX (64 * 1024)          /* a whole request; bigger data goes as an fd (a memfd) */
#define DC_CHUNK (32 * 1024)            /* body bytes in one DC_BODY message */
#define DC_BODY_MAX ((size_t) 32 << 20) /* a whole answer body */
#define DC_ERR_MAX 1024

enum dc_type {
        DC_OPEN = 1,    /* parent -> child, control socket: struct dc_hdr alone, with one fd (the channel) */
        DC_REQ,         /* parent -> child, channel: struct dc_req, then its arguments */
        DC_ANS,         /* child -> parent, channel: struct dc_ans, maybe with one fd */
        DC_BODY,        /* child -> parent, channel: struct dc_hdr, then 1..DC_CHUNK bytes of the body */
};

enum dc_op {
        DC_OP_PING = 1,
        DC_OP_DOCKER,           /* method, path, body: one Docker Engine API call */
        DC_OP_PULL,             /* name, tag: an image of the snapshot registry, with the child's credentials */
        DC_OP_EXEC_START,       /* exec id: the hijacked stream comes back as the fd, bytes read past the head as the body */
        DC_OP_AGENT_DIAL,       /* sandbox id; num = ms: the connected fd */
        DC_OP_AGENT_WAIT,       /* sandbox id; num = ms */
        DC_OP_CGROUP_OPEN,      /* path: the fd, O_WRONLY */
        DC_OP_TREE_BYTES,       /* path: num */
        DC_OP_RUNSC_CHECKPOINT, /* container id (64 hex), checkpoint name; num = ms */
        DC_OP_FORK,             /* source id, name, child id ("" for stage/unstage); num = limit, num2 = step */
        DC_OP_BTRFS_QUOTA,      /* path */
        DC_OP_BTRFS_CREATE,     /* parent, name; num = limit bytes */
        DC_OP_BTRFS_DESTROY,    /* parent, name */
        DC_OP_REG_DIGEST,       /* repo, tag: body = digest, num = size */
        DC_OP_REG_CONFIG,       /* repo, ref: body = the config's JSON */
        DC_OP_REG_DELETE,       /* repo, digest */
        DC_OP_REG_BLOB_EXISTS,  /* repo, digest: r = 1 or 0 */
        DC_OP_REG_BLOB_UPLOAD,  /* repo, digest; the data as an fd (num bytes); num2 = timeout ms */
        DC_OP_REG_MANIFEST_PUT, /* repo, tag, media type, body */
        DC_OP_MAX,
};

struct dc_hdr {
        uint16_t version;       /* DC_VERSION */
        uint16_t type;          /* enum dc_type */
        uint32_t len;           /* the whole message, this header included */
};

struct dc_req {
        struct dc_hdr hdr;
        uint16_t op;            /* enum dc_op */
        uint16_t nargs;         /* exactly what the op takes */
        uint32_t arglen[DC_ARGS];       /* the arguments follow in order; unused ones 0 */
        uint32_t reserved;      /* 0 */
        int64_t num, num2;
};

struct dc_ans {
        struct dc_hdr hdr;
        int32_t r;              /* <= 0 except where an op says (blob exists: 1) */
        int32_t status;         /* DC_OP_DOCKER: Docker's HTTP status */
        int64_t num;
        uint32_t body_len;      /* <= DC_BODY_MAX, in DC_BODY messages after this one */
        uint32_t reserved;
        char err[DC_ERR_MAX];   /* NUL-terminated: why r < 0 (Docker's message, a refusal) */
};

/* A checked request as the child hands it on: NUL-terminated copies of the arguments. */
struct dc_request {
        enum dc_op op;
        char *arg[DC_ARGS];
        size_t arglen[DC_ARGS];
        int64_t num, num2;
        int fd;                 /* came with it (DC_OP_REG_BLOB_UPLOAD), else -1 */
};

/* What the child answers; the handler fills it. */
struct dc_answer {
        int r;
        long status;
        int64_t num;
        char *body;             /* xmalloc'd or NULL */
        size_t body_len;
        int fd;                 /* passed back, then closed; -1 = none */
        char err[DC_ERR_MAX];
};

/* dockerchild-allow.c, in the child */
/* Sets up what the handlers need (the Docker client on cfg's socket). */
void dc_child_init(const struct config *cfg);
/* The op's argument count, whether argument i may hold any byte (else text without NUL),
 * and whether it takes an fd; false for an op that is not one. */
bool dc_op_shape(uint16_t op, unsigned *ret_nargs, unsigned *ret_binary_mask, bool *ret_fd);
/* Checks req against the allowlist and does it: fills ans. A refusal is -EPERM with the reason. */
void dc_child_do(const struct dc_request *req, struct dc_answer *ans);
/* For unit tests of the allowlist alone: 0 when method path (and body) would be passed to
 * Docker, -EPERM with the reason in why. Container references by id are not looked up
 * here (they would be, by inspect, before a mutating call). */
int dc_docker_allowed(const struct config *cfg, const char *method, const char *path, const char *body, size_t body_len,
                      char *why, size_t whylen);
