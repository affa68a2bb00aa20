/* proxy-private.h — the proxy's records, shared by proxy.c (connections, I/O, TLS),
 * proxy-sandbox.c (the sandbox table, its CAs and rules) and proxy-http.c (HTTP/1.1
 * request heads, framing and header injection). Not for use outside the proxy. */
#pragma once

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include "cleanup.h"
#include "log.h"
#include "err.h"
#include "proxy-types.h"
#include "strutil.h"
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80      /* linux/netfilter_ipv4.h, which clashes with netinet/in.h */
#endif

#define RULES_MAX 64
#define HEADERS_MAX 16
#define NAME_MAX_LEN 128
#define VALUE_MAX_LEN 8192
#define HOST_MAX_LEN 253
#define SANDBOX_ID_MAX 64
#define HEAD_MAX (64 * 1024)            /* request head, and a chunked body's trailers */
#define CBUF_SIZE (HEAD_MAX + 16 * 1024)
#define DBUF_SIZE (16 * 1024)
#define CHUNK_LINE_MAX 4096
#define LEAF_REISSUE_S (6 * 86400)      /* a day before the leaf's 7 days run out */
#define ERROR_SEND_MS 5000              /* for our own short answers */
#define LINGER_MS 2000

#define MINZ(a, b) ((a) < (b) ? (a) : (b))

static inline bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

struct rule {
        char *host;                     /* lowercase */
        size_t n;
        char **names, **values;
};

struct leaf {
        char *host;
        X509 *cert;
        EVP_PKEY *key;
        int64_t made_s;                 /* CLOCK_REALTIME seconds */
};

struct sandbox {
        struct sandbox *next;
        char *id;
        uint32_t ip;
        unsigned refs;                  /* the table's (until dropped) + one per connection */
        unsigned n_conns;
        bool dropped;
        EVP_PKEY *ca_key;
        X509 *ca;
        struct rule *rules;
        size_t n_rules;
        struct leaf *leaves;
        size_t n_leaves;
        struct proxy_host_stats *stats; /* one per rule host */
        size_t n_stats;
};

struct side {
        int fd;
        SSL *ssl;
};

/* Bytes from src to dst through buf: a direction relayed raw. */
struct relay {
        struct side *src, *dst;
        uint8_t *buf;
        size_t cap, start, end;
        bool eof;                       /* src ended */
};

struct conn {
        struct conn *next, *prev;       /* proxy's list, until joined */
        struct proxy *p;
        struct sandbox *sb;             /* NULL once the thread is done with it */
        pthread_t thread;
        int kill_fd;                    /* eventfd: readable = end now */
        bool finished;                  /* the thread ended; join and free it */

        /* The thread's own. */
        struct side cli, up;
        bool tls, up_ready;
        char host[HOST_MAX_LEN + 1];
        int64_t deadline;               /* idle deadline (mono_ms) */
        uint64_t n_requests, n_injections;      /* this connection's, for its journal line */
        uint8_t *cbuf;                  /* client bytes not yet forwarded: [cstart, cend) */
        size_t cstart, cend;
        struct relay down;              /* upstream -> client */
};

struct proxy {
        struct proxy_config cfg;
        char *ca_file;
        int listen_fd, stop_fd;
        uint16_t port;
        bool started;
        pthread_t accept_thread;
        SSL_CTX *server_ctx, *client_ctx;

        pthread_mutex_t lock;           /* everything below, and sandbox records */
        struct sandbox *sandboxes;
        struct conn *conns;
        unsigned n_conns;
};

/* A request head, as head_parse reads it. */
struct req {
        bool chunked, te, upgrade, connect;
        int64_t content_length;         /* -1: none */
        const char *host;               /* in the head, not terminated */
        size_t host_len;
        unsigned n_host;
};

/* proxy-sandbox.c: the sandbox table behind proxy.h's proxy_sandbox_* calls (same contracts) */
int table_set(struct proxy *p, const char *sandbox_id, uint32_t ip, const struct proxy_rule *rules, size_t n_rules,
              char **ret_ca_pem, struct err *err);
int table_drop(struct proxy *p, const char *sandbox_id);
int table_drop_ip(struct proxy *p, uint32_t ip);
int table_stats(struct proxy *p, const char *sandbox_id, struct proxy_host_stats **ret);
void sandbox_unref(struct sandbox *sb);
struct sandbox *sandbox_by_ip(struct proxy *p, uint32_t ip);
const struct rule *sandbox_rule(const struct sandbox *sb, const char *host);
struct proxy_host_stats *sandbox_stats(struct sandbox *sb, const char *host);
struct leaf *sandbox_leaf(struct sandbox *sb, const char *host);
bool host_valid(const char *s);

/* proxy-io.c */
void side_shutdown_write(struct side *s);
int relay_step(struct relay *r, short *want_src, short *want_dst);
bool relay_done(const struct relay *r);
void conn_touch(struct conn *c);
int conn_wait(struct conn *c, short want_cli, short want_up, int64_t deadline);
int down_step(struct conn *c, short *want_cli, short *want_up);
int cli_fill(struct conn *c);
int up_write_all(struct conn *c, const void *buf, size_t len);
void cli_answer(struct conn *c, int status, const char *reason, const char *body);

/* proxy-http.c */
int head_parse(const char *h, size_t len, struct req *rq);
bool host_from_header(const char *v, size_t n, char out[static HOST_MAX_LEN + 1]);
int read_head(struct conn *c, size_t *ret_len);
void conn_count(struct conn *c, uint64_t requests, uint64_t injections, uint64_t refused);
int serve_requests(struct conn *c);
