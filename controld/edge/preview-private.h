/* preview-private.h — what preview's files share (preview.c, preview-head.c, preview-proxy.c),
 * and nothing outside them includes. The public prototypes are preview.h's. */
#pragma once

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "controld.h"
#include "listener.h"
#include "sbcount.h"

#define SEND_TIMEOUT_MS 30000        /* one write to the client or the agent */
#define MAX_HEADERS 100
#define TOKEN_PARAM "paddock_token"
#define TOKEN_HEADER "X-Paddock-Preview-Token"

enum { M_UNKNOWN = _SB_STATUS_MAX, M_SLOTS };

/* preview.c: the previews' state */
struct preview_state {
        struct ctl *c;
        pthread_mutex_t lock;     /* the counters */
        struct listener L;        /* [preview] listen */
        struct sb_counts per;     /* open connections per sandbox */
        unsigned gen;             /* bumped when a preview is replaced or revoked */
        uint64_t requests[M_SLOTS], bytes_in[M_SLOTS], bytes_out[M_SLOTS];
};
extern struct preview_state preview_pv;

/* preview.c: counters and tokens */
void preview_count(int slot, uint64_t req, uint64_t in, uint64_t out);
unsigned preview_gen_now(void);
bool preview_token_ok(const struct preview *p, const char *token);

/* preview-head.c: a connection and its request head */
struct hdr {
        const char *name, *value;   /* NUL-terminated inside the connection's head buffer */
};

/* Where a chunked request body ends (RFC 9112 7.1), fed the body's bytes as they come. */
enum { CS_SIZE, CS_EXT, CS_SIZE_LF, CS_DATA, CS_DATA_CR, CS_DATA_LF, CS_TRAILER_START, CS_TRAILER, CS_TRAILER_LF,
       CS_END_LF, CS_DONE, CS_ERR };
struct chunk_scan {
        int st;
        unsigned digits;
        uint64_t size;
};

/* What the client may still send into the sandbox: the one request's body, then nothing (a
 * request pipelined after it never reaches the app unrewritten: we answer one request per
 * connection), or everything once the server switched protocols (101). */
enum flow { FLOW_BODY, FLOW_HOLD, FLOW_RAW };

struct pconn {
        int fd;
        char peer[INET6_ADDRSTRLEN];
        char head[256 * 1024 + 1];   /* [preview] max_header is at most 256 KiB */
        size_t head_len, got;        /* head bytes (to the blank line); bytes read in all */
        char *method, *target, *version;
        struct hdr h[MAX_HEADERS];
        size_t n_h;
        /* the route */
        char id[SANDBOX_ID_LEN + 1];
        int port;
        bool path_form;
        const char *rest;            /* target after /p/<id>/<port> (path form), else target */
        bool counted_sb;
        const char *scheme;          /* X-Forwarded-Proto; NULL: the preview settings say */
        bool secure;                 /* https: our cookie is __Host- and Secure */
        /* the request's framing */
        bool upgrade;                /* asked to switch protocols */
        bool chunked;
        uint64_t body_left;          /* Content-Length bytes still to pass */
        struct chunk_scan cs;
        enum flow flow;
        char status[12];             /* the answer's first bytes, to see a 101 */
        size_t status_len;
};

bool preview_send_all(int fd, const void *p, size_t n);
void preview_page(struct pconn *pc, int status, const char *reason, const char *extra_headers, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
const char *preview_header(const struct pconn *pc, const char *name);
int preview_read_head(struct pconn *pc, size_t max, uint64_t timeout_ms);
int preview_parse_head(struct pconn *pc);
bool preview_route(struct pconn *pc, const char *domain, bool path_form);
char *preview_take_query_token(const char *target, char **ret_stripped);
void preview_cookie_name(const struct pconn *pc, char out[64]);
char *preview_cookie_token(const struct pconn *pc);
char *preview_rewrite_head(struct pconn *pc, bool keep_host, const char *target, const char *scheme);
int preview_framing(struct pconn *pc);
ssize_t preview_client_take(struct pconn *pc, const uint8_t *p, size_t n);
void preview_saw_answer(struct pconn *pc, const uint8_t *p, size_t n);
