/* proxy.c — see proxy.h.
 *
 * One thread per connection, all its sockets non-blocking: the client->upstream direction is
 * read as HTTP/1.1 requests by sequential code, and every wait of that code (for client bytes,
 * for the upstream to take bytes) also moves the upstream->client direction, which is relayed
 * raw. One thread per connection because an SSL object must not be used from two at once.
 * Every wait polls the connection's kill eventfd too, so dropping a sandbox or freeing the proxy
 * ends its connections at once; every wait has a deadline (idle or connect timeout).
 *
 * The sandbox table is under one mutex. A connection holds a reference on its sandbox record
 * and looks up the rule of its host at each request head, under the mutex, copying the header
 * block out; the copy is wiped once sent.
 */
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
#include "proxy.h"
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

/* ---- sandbox records ---- */

static void rules_free(struct rule *r, size_t n) {
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < r[i].n; j++) {
                        free(r[i].names[j]);
                        OPENSSL_cleanse(r[i].values[j], strlen(r[i].values[j]));
                        free(r[i].values[j]);
                }
                free_many(r[i].host, r[i].names, r[i].values);
        }
        free(r);
}

static void leaf_done(struct leaf *l) {
        free(l->host);
        X509_free(l->cert);
        EVP_PKEY_free(l->key);
}

/* What drop forgets at once; the record itself lives on while connections hold it. */
static void sandbox_forget(struct sandbox *sb) {
        rules_free(sb->rules, sb->n_rules);
        sb->rules = NULL;
        sb->n_rules = 0;
        for (size_t i = 0; i < sb->n_leaves; i++)
                leaf_done(&sb->leaves[i]);
        free(sb->leaves);
        sb->leaves = NULL;
        sb->n_leaves = 0;
        EVP_PKEY_free(sb->ca_key);
        X509_free(sb->ca);
        sb->ca_key = NULL;
        sb->ca = NULL;
}

/* Under the lock. */
static void sandbox_unref(struct sandbox *sb) {
        if (!sb || --sb->refs > 0)
                return;
        sandbox_forget(sb);
        free_many(sb->id, sb->stats, sb);
}

static struct sandbox *sandbox_by_id(struct proxy *p, const char *id) {
        for (struct sandbox *sb = p->sandboxes; sb; sb = sb->next)
                if (streq(sb->id, id))
                        return sb;
        return NULL;
}

static struct sandbox *sandbox_by_ip(struct proxy *p, uint32_t ip) {
        for (struct sandbox *sb = p->sandboxes; sb; sb = sb->next)
                if (sb->ip == ip)
                        return sb;
        return NULL;
}

static const struct rule *sandbox_rule(const struct sandbox *sb, const char *host) {
        for (size_t i = 0; i < sb->n_rules; i++)
                if (strcasecmp(sb->rules[i].host, host) == 0)
                        return &sb->rules[i];
        return NULL;
}

static struct proxy_host_stats *sandbox_stats(struct sandbox *sb, const char *host) {
        for (size_t i = 0; i < sb->n_stats; i++)
                if (strcasecmp(sb->stats[i].host, host) == 0)
                        return &sb->stats[i];
        return NULL;
}

/* ---- certificates ---- */

static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value) {
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
        if (!e)
                return -EPROTO;
        int r = X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
        return r == 1 ? 0 : -EPROTO;
}

struct ext_spec {
        int nid;
        const char *value;
};

/* A certificate for key named cn, valid from an hour ago for days, with a random serial, signed
 * by issuer (NULL: self-signed) and its key, with exts (nid, value pairs ending with 0). */
static X509 *cert_make(EVP_PKEY *key, const char *cn, long days, X509 *issuer, EVP_PKEY *issuer_key,
                       const struct ext_spec *exts) {
        X509 *x = X509_new();
        if (!x)
                return NULL;
        uint8_t serial[16];
        random_fill(serial, sizeof(serial));
        serial[0] = (serial[0] & 0x7f) | 0x01;  /* positive, full length */
        BIGNUM *bn = BN_bin2bn(serial, sizeof(serial), NULL);
        X509_NAME *name = X509_get_subject_name(x);
        bool ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) &&
                  X509_set_version(x, 2) &&
                  X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
                  X509_gmtime_adj(X509_getm_notAfter(x), days * 86400) &&
                  X509_set_pubkey(x, key) &&
                  (strlen(cn) > 64 ||   /* too long for a CN: the SAN names it */
                   X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *) cn, -1, -1, 0)) &&
                  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
        BN_free(bn);
        X509V3_CTX ctx;
        X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
        for (size_t i = 0; ok && exts[i].nid; i++)
                ok = add_ext(x, &ctx, exts[i].nid, exts[i].value) == 0;
        if (!ok || X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()) <= 0) {
                X509_free(x);
                return NULL;
        }
        return x;
}

static int ca_make(const char *sandbox_id, EVP_PKEY **ret_key, X509 **ret_cert) {
        EVP_PKEY *key = EVP_EC_gen("P-256");
        if (!key)
                return -EPROTO;
        char cn[128];
        snprintf(cn, sizeof(cn), "Paddock egress CA %s", sandbox_id);
        X509 *x = cert_make(key, cn, 3650, NULL, NULL, (const struct ext_spec[]) {
                { NID_basic_constraints, "critical,CA:TRUE" },
                { NID_key_usage, "critical,keyCertSign,cRLSign" },
                { NID_subject_key_identifier, "hash" },
                { 0, NULL } });
        if (!x) {
                EVP_PKEY_free(key);
                return -EPROTO;
        }
        *ret_key = key;
        *ret_cert = x;
        return 0;
}

static int leaf_make(struct sandbox *sb, const char *host, struct leaf *ret) {
        EVP_PKEY *key = EVP_EC_gen("P-256");
        if (!key)
                return -EPROTO;
        _cleanup_free_ char *san = xasprintf("DNS:%s", host);
        X509 *x = cert_make(key, host, 7, sb->ca, sb->ca_key, (const struct ext_spec[]) {
                { NID_basic_constraints, "critical,CA:FALSE" },
                { NID_key_usage, "critical,digitalSignature" },
                { NID_ext_key_usage, "serverAuth" },
                { NID_subject_key_identifier, "hash" },
                { NID_authority_key_identifier, "keyid:always" },
                { NID_subject_alt_name, san },
                { 0, NULL } });
        if (!x) {
                EVP_PKEY_free(key);
                return -EPROTO;
        }
        *ret = (struct leaf) { .host = xstrdup(host), .cert = x, .key = key, .made_s = now_ms() / 1000 };
        return 0;
}

/* The leaf of host (a rule host), made or remade when needed. Under the lock. */
static struct leaf *sandbox_leaf(struct sandbox *sb, const char *host) {
        int64_t now = now_ms() / 1000;
        struct leaf *l = NULL;
        for (size_t i = 0; i < sb->n_leaves; i++)
                if (streq(sb->leaves[i].host, host))
                        l = &sb->leaves[i];
        if (l && now - l->made_s < LEAF_REISSUE_S && now >= l->made_s)
                return l;
        struct leaf fresh;
        if (leaf_make(sb, host, &fresh) < 0) {
                ERR_clear_error();
                return NULL;
        }
        if (l) {
                leaf_done(l);
        } else {
                sb->leaves = xrealloc(sb->leaves, (sb->n_leaves + 1) * sizeof(*sb->leaves));
                l = &sb->leaves[sb->n_leaves++];
        }
        *l = fresh;
        return l;
}

/* ---- validation ---- */


static bool host_valid(const char *s) {
        size_t n = strlen(s), label = 0;
        if (n == 0 || n > HOST_MAX_LEN)
                return false;
        for (const char *c = s; *c; c++) {
                if (*c == '.') {
                        if (label == 0)
                                return false;
                        label = 0;
                } else if (ascii_alnum(*c) || *c == '-' || *c == '_') {
                        if (++label > 63)
                                return false;
                } else
                        return false;
        }
        return label > 0;
}

static bool sandbox_id_valid(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > SANDBOX_ID_MAX)
                return false;
        for (; *s; s++)
                if (!ascii_alnum(*s) && !strchr("._-", *s))
                        return false;
        return true;
}

static int rules_check(const struct proxy_rule *rules, size_t n, struct err *err) {
        char f[128];
        if (n > RULES_MAX)
                return err_set_field(err, -EINVAL, "rules", "At most %d rules per sandbox, not %zu.", RULES_MAX, n);
        if (n && !rules)
                return err_set_field(err, -EINVAL, "rules", "The rules are missing.");
        for (size_t i = 0; i < n; i++) {
                const struct proxy_rule *r = &rules[i];
                snprintf(f, sizeof(f), "rules[%zu].host", i);
                if (!r->host || !host_valid(r->host))
                        return err_set_field(err, -EINVAL, f, "The host must be a DNS name (labels of letters, digits, '-' and '_', at most %d bytes).",
                                             HOST_MAX_LEN);
                for (size_t k = 0; k < i; k++)
                        if (strcasecmp(rules[k].host, r->host) == 0)
                                return err_set_field(err, -EINVAL, f, "The host %s has a rule already (rules[%zu]): give each host one rule.",
                                                     r->host, k);
                snprintf(f, sizeof(f), "rules[%zu].headers", i);
                if (r->n_headers > HEADERS_MAX)
                        return err_set_field(err, -EINVAL, f, "At most %d headers per rule, not %zu.", HEADERS_MAX, r->n_headers);
                if (r->n_headers && !r->headers)
                        return err_set_field(err, -EINVAL, f, "The headers are missing.");
                for (size_t j = 0; j < r->n_headers; j++) {
                        const char *name = r->headers[j].name, *value = r->headers[j].value;
                        snprintf(f, sizeof(f), "rules[%zu].headers[%zu].name", i, j);
                        size_t nl = name ? strlen(name) : 0;
                        if (nl == 0 || nl > NAME_MAX_LEN)
                                return err_set_field(err, -EINVAL, f, "A header name has 1 to %d characters.", NAME_MAX_LEN);
                        for (size_t k = 0; k < nl; k++)
                                if (!http_tchar((unsigned char) name[k]))
                                        return err_set_field(err, -EINVAL, f, "A header name has only token characters (letters, digits, !#$%%&'*+-.^_`|~).");
                        /* The value is a secret: the message never quotes it. */
                        snprintf(f, sizeof(f), "rules[%zu].headers[%zu].value", i, j);
                        if (!value)
                                return err_set_field(err, -EINVAL, f, "The header value is missing.");
                        if (strlen(value) > VALUE_MAX_LEN)
                                return err_set_field(err, -EINVAL, f, "A header value has at most %d bytes.", VALUE_MAX_LEN);
                        if (strpbrk(value, "\r\n"))
                                return err_set_field(err, -EINVAL, f, "A header value cannot hold CR or LF.");
                }
        }
        return 0;
}

static struct rule *rules_copy(const struct proxy_rule *rules, size_t n) {
        struct rule *c = xnew0(struct rule, n);
        for (size_t i = 0; i < n; i++) {
                c[i].host = xstrdup(rules[i].host);
                for (char *s = c[i].host; *s; s++)
                        if (*s >= 'A' && *s <= 'Z')
                                *s = (char) (*s - 'A' + 'a');
                c[i].n = rules[i].n_headers;
                c[i].names = xnew0(char *, c[i].n);
                c[i].values = xnew0(char *, c[i].n);
                for (size_t j = 0; j < c[i].n; j++) {
                        c[i].names[j] = xstrdup(rules[i].headers[j].name);
                        c[i].values[j] = xstrdup(rules[i].headers[j].value);
                }
        }
        return c;
}

/* ---- the sandbox API ---- */

int proxy_sandbox_set(struct proxy *p, const char *sandbox_id, uint32_t ip, const struct proxy_rule *rules, size_t n_rules,
                      char **ret_ca_pem, struct err *err) {
        if (!sandbox_id_valid(sandbox_id))
                return err_set_field(err, -EINVAL, "sandbox_id", "A sandbox id has 1 to %d letters, digits, '.', '_' or '-'.",
                                     SANDBOX_ID_MAX);
        if (ip == 0 || ip == UINT32_MAX)
                return err_set_field(err, -EINVAL, "ip", "The sandbox's IPv4 address is missing.");
        int r = rules_check(rules, n_rules, err);
        if (r < 0)
                return r;
        struct rule *copy = rules_copy(rules, n_rules);

        pthread_mutex_lock(&p->lock);
        struct sandbox *other = sandbox_by_ip(p, ip), *sb = sandbox_by_id(p, sandbox_id);
        if (other && other != sb) {
                pthread_mutex_unlock(&p->lock);
                rules_free(copy, n_rules);
                struct in_addr a = { htonl(ip) };
                char buf[INET_ADDRSTRLEN];
                return err_set_field(err, -EADDRINUSE, "ip", "Sandbox %s holds %s already: drop it first.", other->id,
                                     inet_ntop(AF_INET, &a, buf, sizeof(buf)));
        }
        if (!sb) {
                sb = xnew0(struct sandbox, 1);
                r = ca_make(sandbox_id, &sb->ca_key, &sb->ca);
                if (r < 0) {
                        pthread_mutex_unlock(&p->lock);
                        ERR_clear_error();
                        free(sb);
                        rules_free(copy, n_rules);
                        return err_set(err, r, "Cannot make the egress CA of sandbox %s (OpenSSL failed).", sandbox_id);
                }
                sb->id = xstrdup(sandbox_id);
                sb->refs = 1;
                sb->next = p->sandboxes;
                p->sandboxes = sb;
        }
        sb->ip = ip;
        rules_free(sb->rules, sb->n_rules);
        sb->rules = copy;
        sb->n_rules = n_rules;
        /* Leaves of hosts that left the rules go; so do their counters. */
        size_t k = 0;
        for (size_t i = 0; i < sb->n_leaves; i++) {
                if (sandbox_rule(sb, sb->leaves[i].host))
                        sb->leaves[k++] = sb->leaves[i];
                else
                        leaf_done(&sb->leaves[i]);
        }
        sb->n_leaves = k;
        struct proxy_host_stats *stats = xnew0(struct proxy_host_stats, n_rules);
        for (size_t i = 0; i < n_rules; i++) {
                struct proxy_host_stats *old = sandbox_stats(sb, copy[i].host);
                if (old)
                        stats[i] = *old;
                strscpy(stats[i].host, copy[i].host, sizeof(stats[i].host));
        }
        free(sb->stats);
        sb->stats = stats;
        sb->n_stats = n_rules;

        char *pem = NULL;
        if (ret_ca_pem) {
                BIO *bio = BIO_new(BIO_s_mem());
                char *data = NULL;
                long len = 0;
                if (bio && PEM_write_bio_X509(bio, sb->ca) == 1)
                        len = BIO_get_mem_data(bio, &data);
                if (len > 0)
                        pem = xstrndup(data, (size_t) len);
                BIO_free(bio);
        }
        pthread_mutex_unlock(&p->lock);
        if (ret_ca_pem) {
                if (!pem) {
                        ERR_clear_error();
                        return err_set(err, -EPROTO, "Cannot write the egress CA certificate of sandbox %s.", sandbox_id);
                }
                *ret_ca_pem = pem;
        }
        log_debug("egress proxy: rules of sandbox %s set (%zu hosts)", sandbox_id, n_rules);
        return 0;
}

int proxy_sandbox_drop(struct proxy *p, const char *sandbox_id) {
        if (!sandbox_id)
                return 0;
        pthread_mutex_lock(&p->lock);
        struct sandbox **pp = &p->sandboxes;
        while (*pp && !streq((*pp)->id, sandbox_id))
                pp = &(*pp)->next;
        struct sandbox *sb = *pp;
        if (sb) {
                *pp = sb->next;
                sb->next = NULL;
                sb->dropped = true;
                sb->ip = 0;
                for (struct conn *c = p->conns; c; c = c->next)
                        if (c->sb == sb)
                                (void) eventfd_write(c->kill_fd, 1);
                sandbox_forget(sb);
                sandbox_unref(sb);
        }
        pthread_mutex_unlock(&p->lock);
        if (sb)
                log_debug("egress proxy: sandbox %s dropped", sandbox_id);
        return 0;
}

int proxy_sandbox_drop_ip(struct proxy *p, uint32_t ip) {
        char id[SANDBOX_ID_MAX + 1] = "";
        pthread_mutex_lock(&p->lock);
        struct sandbox *sb = sandbox_by_ip(p, ip);
        if (sb)
                snprintf(id, sizeof(id), "%s", sb->id);
        pthread_mutex_unlock(&p->lock);
        return id[0] ? proxy_sandbox_drop(p, id) : 0;
}

int proxy_sandbox_stats(struct proxy *p, const char *sandbox_id, struct proxy_host_stats **ret) {
        pthread_mutex_lock(&p->lock);
        struct sandbox *sb = sandbox_id ? sandbox_by_id(p, sandbox_id) : NULL;
        if (!sb) {
                pthread_mutex_unlock(&p->lock);
                return -ENOENT;
        }
        size_t n = sb->n_stats;
        struct proxy_host_stats *s = xnew0(struct proxy_host_stats, n);
        memcpy(s, sb->stats, n * sizeof(*s));
        pthread_mutex_unlock(&p->lock);
        *ret = s;
        return (int) n;
}

/* ---- non-blocking I/O, one side ---- */

/* A TLS call on s that returned k <= 0: -EAGAIN with what it waits for added to *want; for a
 * read (reading), 0 at the peer's close_notify; else broken (the caller's errno). */
static ssize_t ssl_failed(struct side *s, int k, short *want, bool reading, int broken) {
        int e = SSL_get_error(s->ssl, k);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                *want |= e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
                return -EAGAIN;
        }
        ERR_clear_error();
        return reading && e == SSL_ERROR_ZERO_RETURN ? 0 : broken;
}

/* > 0 bytes read, 0 end of stream, -EAGAIN with *want (POLLIN/POLLOUT) added, -errno. */
static ssize_t side_read(struct side *s, void *buf, size_t len, short *want) {
        if (s->ssl) {
                ERR_clear_error();
                int k = SSL_read(s->ssl, buf, (int) MINZ(len, (size_t) INT_MAX));
                return k > 0 ? k : ssl_failed(s, k, want, true, -ECONNRESET);
        }
        ssize_t k = recv(s->fd, buf, len, MSG_DONTWAIT);
        if (k >= 0)
                return k;
        if (errno == EAGAIN || errno == EINTR) {
                *want |= POLLIN;
                return -EAGAIN;
        }
        return errno == ECONNRESET ? 0 : -errno;
}

/* > 0 bytes written, -EAGAIN with *want added, -errno. len > 0. */
static ssize_t side_write(struct side *s, const void *buf, size_t len, short *want) {
        if (s->ssl) {
                ERR_clear_error();
                int k = SSL_write(s->ssl, buf, (int) MINZ(len, (size_t) INT_MAX));
                return k > 0 ? k : ssl_failed(s, k, want, false, -EPIPE);
        }
        ssize_t k = send(s->fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (k >= 0)
                return k;
        if (errno == EAGAIN || errno == EINTR) {
                *want |= POLLOUT;
                return -EAGAIN;
        }
        return -errno;
}

/* Ends our writing to s (close_notify or FIN); reading goes on. */
static void side_shutdown_write(struct side *s) {
        if (s->ssl) {
                ERR_clear_error();
                (void) SSL_shutdown(s->ssl);
                ERR_clear_error();
        } else if (s->fd >= 0)
                (void) shutdown(s->fd, SHUT_WR);
}

/* One step of a raw direction: reads when its buffer is empty, writes what it holds. 1 when
 * something moved (or src ended), 0 when it waits (wants added), -errno. */
static int relay_step(struct relay *r, short *want_src, short *want_dst) {
        int progress = 0;
        if (r->start == r->end && !r->eof) {
                r->start = r->end = 0;
                ssize_t k = side_read(r->src, r->buf, r->cap, want_src);
                if (k > 0) {
                        r->end = (size_t) k;
                        progress = 1;
                } else if (k == 0) {
                        r->eof = true;
                        progress = 1;
                } else if (k != -EAGAIN)
                        return (int) k;
        }
        if (r->start < r->end) {
                ssize_t k = side_write(r->dst, r->buf + r->start, r->end - r->start, want_dst);
                if (k > 0) {
                        r->start += (size_t) k;
                        progress = 1;
                } else if (k != -EAGAIN)
                        return (int) k;
        }
        return progress;
}

static bool relay_done(const struct relay *r) {
        return r->eof && r->start == r->end;
}

/* ---- a connection's waits ---- */

static void touch(struct conn *c) {
        c->deadline = mono_ms() + c->p->cfg.idle_timeout_ms;
}

/* Waits for the client's and upstream's wanted events, the kill eventfd, or deadline. 0 (some
 * event), -ETIMEDOUT, -ECANCELED (killed), -errno. */
static int conn_wait(struct conn *c, short want_cli, short want_up, int64_t deadline) {
        struct pollfd pfd[3] = {
                { .fd = c->kill_fd, .events = POLLIN },
                { .fd = want_cli ? c->cli.fd : -1, .events = want_cli },
                { .fd = want_up ? c->up.fd : -1, .events = want_up },
        };
        int64_t left = deadline - mono_ms();
        if (left <= 0)
                return -ETIMEDOUT;
        int r = poll(pfd, ELEMENTSOF(pfd), (int) MINZ(left, (int64_t) INT_MAX));
        if (r < 0)
                return errno == EINTR ? 0 : -errno;
        if (r == 0)
                return -ETIMEDOUT;
        if (pfd[0].revents)
                return -ECANCELED;
        return 0;
}

/* One step of upstream -> client. 1 moved, 0 waits, -ECONNRESET when the upstream ended and all
 * it sent reached the client (the connection is over), -errno. */
static int down_step(struct conn *c, short *want_cli, short *want_up) {
        if (!c->up_ready)
                return 0;
        if (relay_done(&c->down))
                return -ECONNRESET;
        return relay_step(&c->down, want_up, want_cli);
}


/* While one side waits: relay what the upstream has for the client, or else sleep until
 * either side is ready (wc, wu: what each waits for) or the idle deadline. 0 or -errno. */
static int relay_or_wait(struct conn *c, short *wc, short *wu) {
        int r = down_step(c, wc, wu);
        if (r < 0)
                return r;
        if (r > 0) {
                touch(c);
                return 0;
        }
        return conn_wait(c, *wc, *wu, c->deadline);
}

/* More client bytes into cbuf (compacting it first). 1, 0 at the client's end of stream,
 * -ENOBUFS when cbuf is full, -errno. Relays upstream -> client meanwhile. */
static int cli_fill(struct conn *c) {
        if (c->cstart > 0) {
                memmove(c->cbuf, c->cbuf + c->cstart, c->cend - c->cstart);
                c->cend -= c->cstart;
                c->cstart = 0;
        }
        if (c->cend == CBUF_SIZE)
                return -ENOBUFS;
        for (;;) {
                short wc = 0, wu = 0;
                ssize_t k = side_read(&c->cli, c->cbuf + c->cend, CBUF_SIZE - c->cend, &wc);
                if (k > 0) {
                        c->cend += (size_t) k;
                        touch(c);
                        return 1;
                }
                if (k == 0)
                        return 0;
                if (k != -EAGAIN)
                        return (int) k;
                int r = relay_or_wait(c, &wc, &wu);
                if (r < 0)
                        return r;
        }
}

/* All of buf to the upstream, relaying upstream -> client meanwhile. 0 or -errno. */
static int up_write_all(struct conn *c, const void *buf, size_t len) {
        const uint8_t *b = buf;
        while (len > 0) {
                short wc = 0, wu = 0;
                ssize_t k = side_write(&c->up, b, len, &wu);
                if (k > 0) {
                        b += k;
                        len -= (size_t) k;
                        touch(c);
                        continue;
                }
                if (k != -EAGAIN)
                        return (int) k;
                int r = relay_or_wait(c, &wc, &wu);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Our own answer to the client, then the connection ends: best effort, bounded. */
static void cli_answer(struct conn *c, int status, const char *reason, const char *body) {
        _cleanup_free_ char *msg = xasprintf("HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                                             "Connection: close\r\n\r\n%s",
                                             status, reason, strlen(body), body);
        const char *b = msg;
        size_t len = strlen(msg);
        int64_t deadline = mono_ms() + MINZ(ERROR_SEND_MS, c->p->cfg.idle_timeout_ms);
        while (len > 0) {
                short w = 0;
                ssize_t k = side_write(&c->cli, b, len, &w);
                if (k > 0) {
                        b += k;
                        len -= (size_t) k;
                } else if (k != -EAGAIN || conn_wait(c, w, 0, deadline) < 0)
                        return;
        }
        side_shutdown_write(&c->cli);
        /* A lingering close: what the client still sends is read and dropped for a moment, so
         * our close does not reset the connection before it has read the answer. */
        deadline = mono_ms() + MINZ(LINGER_MS, c->p->cfg.idle_timeout_ms);
        uint8_t sink[4096];
        for (;;) {
                short w = 0;
                ssize_t k = side_read(&c->cli, sink, sizeof(sink), &w);
                if (k == 0 || (k < 0 && k != -EAGAIN))
                        return;
                if (k < 0 && conn_wait(c, w, 0, deadline) < 0)
                        return;
        }
}

/* ---- HTTP/1.1 request heads ---- */

struct req {
        bool chunked, te, upgrade, connect;
        int64_t content_length;         /* -1: none */
        const char *host;               /* in the head, not terminated */
        size_t host_len;
        unsigned n_host;
};

static bool ieq(const char *a, size_t alen, const char *b) {
        return alen == strlen(b) && strncasecmp(a, b, alen) == 0;
}

static bool value_char_ok(unsigned char ch) {
        return ch == '\t' || (ch >= 0x20 && ch != 0x7f);
}

/* The last comma-separated element of v is "chunked". */
static bool te_chunked(const char *v, size_t n) {
        const char *comma = memrchr(v, ',', n);
        const char *s = comma ? comma + 1 : v;
        size_t len = (size_t) (v + n - s);
        while (len && (*s == ' ' || *s == '\t'))
                s++, len--;
        return ieq(s, len, "chunked");
}

/* Walks the CRLF-separated lines of a head (through its blank line): *line and *len of the next,
 * 0 at the blank line. */
static bool next_line(const char **pos, const char *end, const char **line, size_t *len) {
        const char *eol = memmem(*pos, (size_t) (end - *pos), "\r\n", 2);
        if (!eol || eol == *pos)
                return false;
        *line = *pos;
        *len = (size_t) (eol - *pos);
        *pos = eol + 2;
        return true;
}

/* Checks head (len bytes, ending in CRLF CRLF) and what its framing is. 0 or -EBADMSG. */
static int head_parse(const char *h, size_t len, struct req *rq) {
        *rq = (struct req) { .content_length = -1 };
        if (memchr(h, 0, len))
                return -EBADMSG;
        const char *pos = h, *end = h + len, *l;
        size_t n;
        if (!next_line(&pos, end, &l, &n))
                return -EBADMSG;
        /* method SP target SP HTTP/1.x */
        size_t i = 0;
        while (i < n && http_tchar((unsigned char) l[i]))
                i++;
        if (i == 0 || i >= n || l[i] != ' ')
                return -EBADMSG;
        rq->connect = ieq(l, i, "CONNECT");
        size_t t = ++i;
        while (i < n && (unsigned char) l[i] > 0x20 && l[i] != 0x7f)
                i++;
        if (i == t || i >= n || l[i] != ' ')
                return -EBADMSG;
        i++;
        if (n - i != 8 || (memcmp(l + i, "HTTP/1.1", 8) != 0 && memcmp(l + i, "HTTP/1.0", 8) != 0))
                return -EBADMSG;
        while (next_line(&pos, end, &l, &n)) {
                size_t k = 0;
                while (k < n && http_tchar((unsigned char) l[k]))
                        k++;
                if (k == 0 || k >= n || l[k] != ':')
                        return -EBADMSG;        /* also obs-fold and space before ':' */
                const char *v = l + k + 1;
                size_t vn = n - k - 1;
                while (vn && (*v == ' ' || *v == '\t'))
                        v++, vn--;
                while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
                        vn--;
                for (size_t j = 0; j < vn; j++)
                        if (!value_char_ok((unsigned char) v[j]))
                                return -EBADMSG;
                if (ieq(l, k, "content-length")) {
                        if (vn == 0 || vn > 18)
                                return -EBADMSG;
                        int64_t cl = 0;
                        for (size_t j = 0; j < vn; j++) {
                                if (v[j] < '0' || v[j] > '9')
                                        return -EBADMSG;
                                cl = cl * 10 + (v[j] - '0');
                        }
                        if (rq->content_length >= 0 && rq->content_length != cl)
                                return -EBADMSG;
                        rq->content_length = cl;
                } else if (ieq(l, k, "transfer-encoding")) {
                        rq->te = true;
                        rq->chunked = te_chunked(v, vn);
                } else if (ieq(l, k, "host")) {
                        rq->host = v;
                        rq->host_len = vn;
                        rq->n_host++;
                } else if (ieq(l, k, "upgrade"))
                        rq->upgrade = true;
        }
        if (pos != end - 2)
                return -EBADMSG;
        if (rq->te && (!rq->chunked || rq->content_length >= 0))
                return -EBADMSG;        /* both framings, or one we cannot find the end of */
        if (rq->n_host > 1)
                return -EBADMSG;
        return 0;
}

/* The host of a Host header: port stripped, lowercase. false when it is no DNS name. */
static bool host_from_header(const char *v, size_t n, char out[static HOST_MAX_LEN + 1]) {
        const char *colon = memchr(v, ':', n);
        if (colon)
                n = (size_t) (colon - v);
        if (n == 0 || n > HOST_MAX_LEN)
                return false;
        for (size_t i = 0; i < n; i++)
                out[i] = (char) (v[i] >= 'A' && v[i] <= 'Z' ? v[i] - 'A' + 'a' : v[i]);
        out[n] = 0;
        return host_valid(out);
}

/* The headers of a rule, copied out of the table: the names and the block "name: value\r\n"... */
struct inject {
        size_t n;
        char names[HEADERS_MAX][NAME_MAX_LEN + 1];
        char *block;
        size_t block_len;
};

static void inject_done(struct inject *in) {
        if (in->block) {
                OPENSSL_cleanse(in->block, in->block_len);
                free(in->block);
        }
        in->block = NULL;
}

/* The rule of c's host as it is now. 0, -ENOENT (no rule for the host), -ECANCELED (sandbox
 * dropped). */
static int inject_get(struct conn *c, struct inject *ret) {
        struct proxy *p = c->p;
        int r = 0;
        pthread_mutex_lock(&p->lock);
        const struct rule *rule = c->sb->dropped ? NULL : sandbox_rule(c->sb, c->host);
        if (c->sb->dropped)
                r = -ECANCELED;
        else if (!rule)
                r = -ENOENT;
        else {
                size_t total = 1;
                for (size_t i = 0; i < rule->n; i++)
                        total += strlen(rule->names[i]) + strlen(rule->values[i]) + 4;
                ret->block = xmalloc(total);
                ret->block_len = 0;
                ret->n = rule->n;
                for (size_t i = 0; i < rule->n; i++) {
                        strscpy(ret->names[i], rule->names[i], sizeof(ret->names[i]));
                        ret->block_len += (size_t) snprintf(ret->block + ret->block_len, total - ret->block_len, "%s: %s\r\n",
                                                            rule->names[i], rule->values[i]);
                }
        }
        pthread_mutex_unlock(&p->lock);
        return r;
}

/* The head with the rule's headers removed and then added with their values (xmalloc'd, wiped
 * and freed by the caller: it holds secrets). */
static char *head_rewrite(const char *h, size_t len, const struct inject *in, size_t *ret_len) {
        char *out = xmalloc(len + in->block_len + 1);
        size_t o = 0;
        const char *pos = h, *end = h + len, *l;
        size_t n;
        bool first = true;
        while (next_line(&pos, end, &l, &n)) {
                bool drop = false;
                if (!first) {
                        size_t k = (size_t) ((const char *) memchr(l, ':', n) - l);
                        for (size_t i = 0; i < in->n && !drop; i++)
                                drop = ieq(l, k, in->names[i]);
                }
                first = false;
                if (drop)
                        continue;
                memcpy(out + o, l, n + 2);
                o += n + 2;
        }
        memcpy(out + o, in->block, in->block_len);
        o += in->block_len;
        memcpy(out + o, "\r\n", 2);
        o += 2;
        *ret_len = o;
        return out;
}

/* The next head in cbuf: its length through the blank line. 1, 0 when the client ended before
 * a byte of it, -E2BIG past HEAD_MAX, -errno. */
static int read_head(struct conn *c, size_t *ret_len) {
        size_t scanned = 0;
        for (;;) {
                size_t avail = c->cend - c->cstart, from = scanned > 3 ? scanned - 3 : 0;
                const uint8_t *e = memmem(c->cbuf + c->cstart + from, avail - from, "\r\n\r\n", 4);
                if (e) {
                        size_t len = (size_t) (e - (c->cbuf + c->cstart)) + 4;
                        if (len > HEAD_MAX)
                                return -E2BIG;
                        *ret_len = len;
                        return 1;
                }
                if (avail >= HEAD_MAX)
                        return -E2BIG;
                scanned = avail;
                int r = cli_fill(c);
                if (r == 0)
                        return avail ? -EPIPE : 0;
                if (r < 0)
                        return r == -ENOBUFS ? -E2BIG : r;
        }
}

/* n body bytes from the client to the upstream. */
static int forward_bytes(struct conn *c, uint64_t n) {
        while (n > 0) {
                if (c->cstart == c->cend) {
                        int r = cli_fill(c);
                        if (r == 0)
                                return -EPIPE;
                        if (r < 0)
                                return r;
                }
                size_t k = (size_t) MINZ((uint64_t) (c->cend - c->cstart), n);
                int r = up_write_all(c, c->cbuf + c->cstart, k);
                if (r < 0)
                        return r;
                c->cstart += k;
                n -= k;
        }
        return 0;
}

/* The line at cstart, through its CRLF, at most max bytes: its length. -EBADMSG when longer. */
static int read_line(struct conn *c, size_t max, size_t *ret_len) {
        for (;;) {
                size_t avail = c->cend - c->cstart;
                const uint8_t *e = memmem(c->cbuf + c->cstart, MINZ(avail, max), "\r\n", 2);
                if (e) {
                        *ret_len = (size_t) (e - (c->cbuf + c->cstart)) + 2;
                        return 0;
                }
                if (avail >= max)
                        return -EBADMSG;
                int r = cli_fill(c);
                if (r == 0)
                        return -EPIPE;
                if (r < 0)
                        return r;
        }
}

/* A chunked body, chunk by chunk, through its trailers. */
static int forward_chunked(struct conn *c) {
        for (;;) {
                size_t n;
                int r = read_line(c, CHUNK_LINE_MAX, &n);
                if (r < 0)
                        return r;
                const char *l = (const char *) c->cbuf + c->cstart;
                uint64_t size = 0;
                size_t i = 0;
                for (; i < n - 2 && unhexchar(l[i]) >= 0; i++) {
                        if (i >= 15)
                                return -EBADMSG;
                        size = size * 16 + (uint64_t) unhexchar(l[i]);
                }
                if (i == 0)
                        return -EBADMSG;
                while (i < n - 2 && (l[i] == ' ' || l[i] == '\t'))
                        i++;
                if (i < n - 2 && l[i] != ';')
                        return -EBADMSG;
                for (; i < n - 2; i++)
                        if (!value_char_ok((unsigned char) l[i]))
                                return -EBADMSG;
                r = up_write_all(c, l, n);
                if (r < 0)
                        return r;
                c->cstart += n;
                if (size == 0)
                        break;
                r = forward_bytes(c, size);
                if (r < 0)
                        return r;
                r = read_line(c, 2, &n);
                if (r < 0)
                        return r;
                if (n != 2)
                        return -EBADMSG;
                r = up_write_all(c, "\r\n", 2);
                if (r < 0)
                        return r;
                c->cstart += 2;
        }
        size_t total = 0;
        for (;;) {
                size_t n;
                int r = read_line(c, HEAD_MAX - total, &n);
                if (r < 0)
                        return r;
                const char *l = (const char *) c->cbuf + c->cstart;
                for (size_t i = 0; i < n - 2; i++)
                        if (!value_char_ok((unsigned char) l[i]))
                                return -EBADMSG;
                r = up_write_all(c, l, n);
                if (r < 0)
                        return r;
                c->cstart += n;
                total += n;
                if (n == 2)
                        return 0;
        }
}

static void count(struct conn *c, uint64_t requests, uint64_t injections, uint64_t refused) {
        c->n_requests += requests;
        c->n_injections += injections;
        pthread_mutex_lock(&c->p->lock);
        struct proxy_host_stats *s = c->sb->dropped ? NULL : sandbox_stats(c->sb, c->host);
        if (s) {
                s->requests += requests;
                s->injections += injections;
                s->upstream_refused += refused;
        }
        pthread_mutex_unlock(&c->p->lock);
}

/* Both directions raw until the upstream ends (the client's end is passed on). */
static int relay_raw(struct conn *c) {
        struct relay up = { .src = &c->cli, .dst = &c->up, .buf = c->cbuf, .cap = CBUF_SIZE,
                            .start = c->cstart, .end = c->cend };
        bool shut = false;
        for (;;) {
                short wc = 0, wu = 0;
                int progress = 0, r;
                if (!relay_done(&up)) {
                        r = relay_step(&up, &wc, &wu);
                        if (r < 0)
                                return r;
                        progress |= r;
                } else if (!shut) {
                        side_shutdown_write(&c->up);
                        shut = true;
                }
                r = down_step(c, &wc, &wu);
                if (r < 0)
                        return r == -ECONNRESET ? 0 : r;
                progress |= r;
                if (progress) {
                        touch(c);
                        continue;
                }
                r = conn_wait(c, wc, wu, c->deadline);
                if (r < 0)
                        return r;
        }
}

/* The client ended at a request boundary: pass that on and relay what the upstream still says. */
static int drain_upstream(struct conn *c) {
        side_shutdown_write(&c->up);
        for (;;) {
                short wc = 0, wu = 0;
                int r = down_step(c, &wc, &wu);
                if (r < 0)
                        return r == -ECONNRESET ? 0 : r;
                if (r > 0) {
                        touch(c);
                        continue;
                }
                r = conn_wait(c, wc, wu, c->deadline);
                if (r < 0)
                        return r;
        }
}

/* Request after request, each head rewritten, each body forwarded by its framing. */
static int serve_requests(struct conn *c) {
        for (;;) {
                size_t hlen;
                int r = read_head(c, &hlen);
                if (r == 0)
                        return drain_upstream(c);
                if (r == -E2BIG) {
                        cli_answer(c, 431, "Request Header Fields Too Large",
                                   "paddock egress proxy: the request head is larger than 64 KiB\n");
                        return r;
                }
                if (r < 0)
                        return r;
                const char *h = (const char *) c->cbuf + c->cstart;
                struct req rq;
                if (head_parse(h, hlen, &rq) < 0) {
                        cli_answer(c, 400, "Bad Request", "paddock egress proxy: the request head or its framing is not valid HTTP/1.1\n");
                        return -EBADMSG;
                }
                if (!c->tls) {
                        char host[HOST_MAX_LEN + 1];
                        if (!rq.host || !host_from_header(rq.host, rq.host_len, host) || !streq(host, c->host)) {
                                _cleanup_free_ char *body = xasprintf(
                                        "paddock egress proxy: every request on this connection must name host %s\n", c->host);
                                cli_answer(c, 403, "Forbidden", body);
                                return -EPERM;
                        }
                }
                struct inject in = {};
                r = inject_get(c, &in);
                if (r == -ENOENT) {
                        _cleanup_free_ char *body = xasprintf("paddock egress proxy: host %s is not in this sandbox's rules\n", c->host);
                        cli_answer(c, 403, "Forbidden", body);
                }
                if (r < 0)
                        return r;
                size_t olen;
                char *out = head_rewrite(h, hlen, &in, &olen);
                size_t n_inj = in.n;
                inject_done(&in);
                c->cstart += hlen;      /* h is stale once cbuf moves */
                r = up_write_all(c, out, olen);
                OPENSSL_cleanse(out, olen);
                free(out);
                if (r < 0)
                        return r;
                count(c, 1, n_inj, 0);
                if (rq.upgrade || rq.connect)
                        return relay_raw(c);
                if (rq.chunked)
                        r = forward_chunked(c);
                else if (rq.content_length > 0)
                        r = forward_bytes(c, (uint64_t) rq.content_length);
                if (r == -EBADMSG)
                        cli_answer(c, 400, "Bad Request", "paddock egress proxy: the chunked request body is malformed\n");
                if (r < 0)
                        return r;
        }
}

/* ---- TLS ---- */

static int servername_cb(SSL *ssl, int *al, void *arg) {
        (void) arg;
        struct conn *c = SSL_get_app_data(ssl);
        const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        *al = SSL_AD_UNRECOGNIZED_NAME;
        if (!c || !name || strlen(name) > HOST_MAX_LEN)
                return SSL_TLSEXT_ERR_ALERT_FATAL;
        int ret = SSL_TLSEXT_ERR_ALERT_FATAL;
        pthread_mutex_lock(&c->p->lock);
        const struct rule *rule = c->sb->dropped ? NULL : sandbox_rule(c->sb, name);
        if (rule) {
                struct leaf *l = sandbox_leaf(c->sb, rule->host);
                if (l && SSL_use_certificate(ssl, l->cert) == 1 && SSL_use_PrivateKey(ssl, l->key) == 1) {
                        strscpy(c->host, rule->host, sizeof(c->host));
                        ret = SSL_TLSEXT_ERR_OK;
                } else
                        *al = SSL_AD_INTERNAL_ERROR;
        }
        pthread_mutex_unlock(&c->p->lock);
        if (ret != SSL_TLSEXT_ERR_OK)
                log_debug("egress proxy: TLS name %s refused: %s", name, rule ? "no certificate" : "not in the rules");
        return ret;
}

static int alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in, unsigned inlen,
                   void *arg) {
        (void) ssl, (void) arg;
        static const unsigned char ours[] = "\x08http/1.1";
        unsigned char *sel;
        if (SSL_select_next_proto(&sel, outlen, ours, sizeof(ours) - 1, in, inlen) != OPENSSL_NPN_NEGOTIATED)
                return SSL_TLSEXT_ERR_NOACK;
        *out = sel;
        return SSL_TLSEXT_ERR_OK;
}

/* Runs a handshake step function to its end by deadline. 0, -EPROTO, -ETIMEDOUT, -ECANCELED. */
static int handshake(struct conn *c, struct side *s, bool upstream, int64_t deadline) {
        for (;;) {
                ERR_clear_error();
                int k = upstream ? SSL_connect(s->ssl) : SSL_accept(s->ssl);
                if (k == 1)
                        return 0;
                int e = SSL_get_error(s->ssl, k);
                if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE)
                        return -EPROTO;
                short w = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
                int r = conn_wait(c, upstream ? 0 : w, upstream ? w : 0, deadline);
                if (r < 0)
                        return r;
        }
}

static SSL_CTX *ctx_new(const SSL_METHOD *m) {
        SSL_CTX *ctx = SSL_CTX_new(m);
        if (!ctx)
                return NULL;
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
        SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        return ctx;
}

/* ---- a connection ---- */

/* The upstream: TCP to dst, then TLS verified for c->host when c->tls. 0, or -errno with a
 * sentence for the client in err (no secret in it). */
static int up_connect(struct conn *c, const struct sockaddr_in *dst, struct err *err) {
        char addr[INET_ADDRSTRLEN + 8], ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &dst->sin_addr, ip, sizeof(ip));
        snprintf(addr, sizeof(addr), "%s:%u", ip, ntohs(dst->sin_port));
        int64_t deadline = mono_ms() + c->p->cfg.connect_timeout_ms;
        c->up.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c->up.fd >= 0)
                (void) setsockopt(c->up.fd, IPPROTO_TCP, TCP_NODELAY, &(int) { 1 }, sizeof(int));   /* heads go out whole */
        if (c->up.fd < 0)
                return err_set(err, -errno, "paddock egress proxy: cannot connect to %s (%s): %m", c->host, addr);
        if (connect(c->up.fd, (const struct sockaddr *) dst, sizeof(*dst)) < 0) {
                if (errno != EINPROGRESS)
                        return err_set(err, -errno, "paddock egress proxy: cannot connect to %s (%s): %m", c->host, addr);
                int r = conn_wait(c, 0, POLLOUT, deadline);
                if (r == -ETIMEDOUT)
                        return err_set(err, r, "paddock egress proxy: connecting to %s (%s) timed out", c->host, addr);
                if (r < 0)
                        return r;
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                if (getsockopt(c->up.fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
                        soerr = errno;
                if (soerr) {
                        errno = soerr;
                        return err_set(err, -soerr, "paddock egress proxy: cannot connect to %s (%s): %m", c->host, addr);
                }
        }
        if (!c->tls)
                return 0;
        c->up.ssl = SSL_new(c->p->client_ctx);
        if (!c->up.ssl || SSL_set_fd(c->up.ssl, c->up.fd) != 1 || SSL_set_tlsext_host_name(c->up.ssl, c->host) != 1 ||
            SSL_set1_host(c->up.ssl, c->host) != 1 || SSL_set_alpn_protos(c->up.ssl, (const unsigned char *) "\x08http/1.1", 9) != 0) {
                ERR_clear_error();
                return err_set(err, -ENOMEM, "paddock egress proxy: cannot start TLS to %s", c->host);
        }
        int r = handshake(c, &c->up, true, deadline);
        if (r == -EPROTO) {
                long v = SSL_get_verify_result(c->up.ssl);
                unsigned long e = ERR_peek_error();
                char why[256] = "";
                if (e)
                        ERR_error_string_n(e, why, sizeof(why));
                ERR_clear_error();
                if (v != X509_V_OK) {
                        count(c, 0, 0, 1);
                        return err_set(err, -EPERM, "paddock egress proxy: the certificate of %s did not verify (%s)",
                                       c->host, X509_verify_cert_error_string(v));
                }
                return err_set(err, r, "paddock egress proxy: the TLS handshake with %s (%s) failed (%s)", c->host, addr,
                               why[0] ? why : "no reason given");
        }
        if (r == -ETIMEDOUT)
                return err_set(err, r, "paddock egress proxy: the TLS handshake with %s (%s) timed out", c->host, addr);
        return r;
}

static int default_orig_dst(int fd, struct sockaddr_in *ret, void *ud) {
        (void) ud;
        socklen_t len = sizeof(*ret);
        if (getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, ret, &len) < 0)
                return -errno;
        return 0;
}

static int conn_run(struct conn *c) {
        struct proxy *p = c->p;
        struct sockaddr_in dst = {}, self = {};
        socklen_t sl = sizeof(self);
        int r = p->cfg.orig_dst(c->cli.fd, &dst, p->cfg.orig_dst_ud);
        if (r < 0)
                return log_debug_errno(r, "egress proxy: no original destination: %m");
        if (getsockname(c->cli.fd, (struct sockaddr *) &self, &sl) == 0 && self.sin_addr.s_addr == dst.sin_addr.s_addr &&
            self.sin_port == dst.sin_port)
                return log_debug_errno(ELOOP, "egress proxy: a connection to the proxy itself, not redirected");
        touch(c);
        uint8_t first;
        for (;;) {
                ssize_t k = recv(c->cli.fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
                if (k == 1)
                        break;
                if (k == 0)
                        return 0;
                if (errno != EAGAIN && errno != EINTR)
                        return -errno;
                r = conn_wait(c, POLLIN, 0, c->deadline);
                if (r < 0)
                        return r;
        }
        c->tls = first == 0x16;
        if (c->tls) {
                c->cli.ssl = SSL_new(p->server_ctx);
                if (!c->cli.ssl || SSL_set_fd(c->cli.ssl, c->cli.fd) != 1) {
                        ERR_clear_error();
                        return -ENOMEM;
                }
                SSL_set_app_data(c->cli.ssl, c);
                r = handshake(c, &c->cli, false, c->deadline);
                ERR_clear_error();
                if (r < 0)
                        return log_debug_errno(r, "egress proxy: the TLS handshake with the sandbox failed: %m");
        } else {
                size_t hlen;
                r = read_head(c, &hlen);
                if (r == -E2BIG)
                        cli_answer(c, 431, "Request Header Fields Too Large",
                                   "paddock egress proxy: the request head is larger than 64 KiB\n");
                if (r <= 0)
                        return r;
                struct req rq;
                if (head_parse((const char *) c->cbuf + c->cstart, hlen, &rq) < 0 || !rq.host ||
                    !host_from_header(rq.host, rq.host_len, c->host)) {
                        cli_answer(c, 400, "Bad Request",
                                   "paddock egress proxy: the request is not valid HTTP/1.1 or names no host (Host header)\n");
                        return -EBADMSG;
                }
                pthread_mutex_lock(&p->lock);
                bool known = !c->sb->dropped && sandbox_rule(c->sb, c->host);
                pthread_mutex_unlock(&p->lock);
                if (!known) {
                        _cleanup_free_ char *body = xasprintf("paddock egress proxy: host %s is not in this sandbox's rules\n", c->host);
                        cli_answer(c, 403, "Forbidden", body);
                        return -EPERM;
                }
        }
        log_ctx_set("EGRESS_HOST", c->host);
        log_debug("egress proxy: %s connection", c->tls ? "TLS" : "plain");
        struct err err = {};
        r = up_connect(c, &dst, &err);
        if (r == -ECANCELED)
                return r;
        if (r < 0) {
                /* A refused certificate is worth the journal: someone may be in the way. */
                if (r == -EPERM || strstr(err.message, "did not verify"))
                        log_warning("egress proxy: upstream %s refused, nothing was sent: %s", c->host,
                                    err.message + (startswith(err.message, "paddock egress proxy: ") ? 22 : 0));
                else
                        log_info("egress proxy: upstream %s unreachable: %s", c->host, err.message);
                _cleanup_free_ char *body = xasprintf("%s\n", err.message);
                cli_answer(c, 502, "Bad Gateway", body);
                return r;
        }
        c->up_ready = true;
        c->down = (struct relay) { .src = &c->up, .dst = &c->cli, .buf = xmalloc(DBUF_SIZE), .cap = DBUF_SIZE };
        return serve_requests(c);
}

static void *conn_main(void *arg) {
        struct conn *c = arg;
        struct proxy *p = c->p;
        log_ctx_set("SANDBOX_ID", c->sb->id);
        c->cbuf = xmalloc(CBUF_SIZE);
        int r = conn_run(c);
        /* One journal line per connection (with SANDBOX_ID and EGRESS_HOST), counts only. */
        if (c->n_requests)
                log_info("egress proxy: %s connection to %s ended: %" PRIu64 " requests, %" PRIu64 " headers put in",
                         c->tls ? "TLS" : "HTTP", c->host, c->n_requests, c->n_injections);
        else
                log_debug_errno(r, "egress proxy: connection ended: %m");
        log_ctx_reset();
        SSL_free(c->cli.ssl);
        SSL_free(c->up.ssl);
        closep(&c->cli.fd);
        closep(&c->up.fd);
        free(c->cbuf);
        free(c->down.buf);
        ERR_clear_error();
        OPENSSL_thread_stop();
        pthread_mutex_lock(&p->lock);
        c->sb->n_conns--;
        p->n_conns--;
        sandbox_unref(c->sb);
        c->sb = NULL;
        c->finished = true;
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

/* Joins and frees the connections whose thread ended (all of them when all). */
static void reap(struct proxy *p, bool all) {
        struct conn *done = NULL;
        pthread_mutex_lock(&p->lock);
        for (struct conn *c = p->conns, *next; c; c = next) {
                next = c->next;
                if (!c->finished && !all)
                        continue;
                if (c->prev)
                        c->prev->next = c->next;
                else
                        p->conns = c->next;
                if (c->next)
                        c->next->prev = c->prev;
                c->next = done;
                done = c;
        }
        pthread_mutex_unlock(&p->lock);
        while (done) {
                struct conn *c = done;
                done = c->next;
                pthread_join(c->thread, NULL);
                close(c->kill_fd);
                free(c);
        }
}

static void accept_one(struct proxy *p) {
        struct sockaddr_in sa = {};
        socklen_t sl = sizeof(sa);
        _cleanup_close_ int fd = accept4(p->listen_fd, (struct sockaddr *) &sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
                (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &(int) { 1 }, sizeof(int));
        if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                        log_warning_errno(errno, "egress proxy: cannot accept: %m");
                        usleep(100 * 1000);
                }
                return;
        }
        if (sa.sin_family != AF_INET)
                return;
        uint32_t ip = ntohl(sa.sin_addr.s_addr);
        _cleanup_close_ int kill_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (kill_fd < 0)
                return;
        pthread_mutex_lock(&p->lock);
        struct sandbox *sb = sandbox_by_ip(p, ip);
        if (!sb || sb->n_conns >= p->cfg.max_conns_per_sandbox || p->n_conns >= p->cfg.max_conns) {
                bool known = sb;
                pthread_mutex_unlock(&p->lock);
                char buf[INET_ADDRSTRLEN];
                log_debug("egress proxy: connection from %s closed: %s", inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof(buf)),
                          known ? "too many connections" : "no sandbox has this address");
                return;
        }
        struct conn *c = xnew0(struct conn, 1);
        *c = (struct conn) { .p = p, .sb = sb, .kill_fd = kill_fd, .cli = { .fd = fd }, .up = { .fd = -1 } };
        sb->refs++;
        sb->n_conns++;
        p->n_conns++;
        int r = pthread_create(&c->thread, NULL, conn_main, c);
        if (r != 0) {
                sb->n_conns--;
                p->n_conns--;
                sandbox_unref(sb);
                pthread_mutex_unlock(&p->lock);
                free(c);
                log_warning_errno(r, "egress proxy: cannot start a connection thread: %m");
                return;
        }
        TAKE_FD(fd);
        TAKE_FD(kill_fd);
        c->next = p->conns;
        if (p->conns)
                p->conns->prev = c;
        p->conns = c;
        pthread_mutex_unlock(&p->lock);
}

static void *accept_main(void *arg) {
        struct proxy *p = arg;
        for (;;) {
                reap(p, false);
                struct pollfd pfd[2] = { { .fd = p->stop_fd, .events = POLLIN }, { .fd = p->listen_fd, .events = POLLIN } };
                int r = poll(pfd, 2, 1000);
                if (r < 0 && errno != EINTR) {
                        log_error_errno(errno, "egress proxy: poll failed: %m");
                        usleep(100 * 1000);
                        continue;
                }
                if (pfd[0].revents)
                        break;
                if (pfd[1].revents)
                        accept_one(p);
        }
        return NULL;
}

/* ---- the proxy ---- */

int proxy_new(const struct proxy_config *cfg, struct proxy **ret, struct err *err) {
        if (cfg->connect_timeout_ms < 0 || cfg->idle_timeout_ms < 0)
                return err_set(err, -EINVAL, "The egress proxy's timeouts cannot be negative.");
        struct proxy *p = xnew0(struct proxy, 1);
        p->cfg = *cfg;
        p->listen_fd = p->stop_fd = -1;
        pthread_mutex_init(&p->lock, NULL);
        if (!p->cfg.max_conns_per_sandbox)
                p->cfg.max_conns_per_sandbox = 64;
        if (!p->cfg.max_conns)
                p->cfg.max_conns = 1024;
        if (!p->cfg.connect_timeout_ms)
                p->cfg.connect_timeout_ms = 10000;
        if (!p->cfg.idle_timeout_ms)
                p->cfg.idle_timeout_ms = 300000;
        if (!p->cfg.orig_dst)
                p->cfg.orig_dst = default_orig_dst;
        if (cfg->upstream_ca_file)
                p->ca_file = xstrdup(cfg->upstream_ca_file);
        p->cfg.upstream_ca_file = p->ca_file;
        int r;

        p->server_ctx = ctx_new(TLS_server_method());
        p->client_ctx = ctx_new(TLS_client_method());
        if (!p->server_ctx || !p->client_ctx) {
                r = err_set(err, -ENOMEM, "Cannot make the egress proxy's TLS contexts.");
                goto fail;
        }
        SSL_CTX_set_num_tickets(p->server_ctx, 0);
        SSL_CTX_set_tlsext_servername_callback(p->server_ctx, servername_cb);
        SSL_CTX_set_alpn_select_cb(p->server_ctx, alpn_cb, NULL);
        SSL_CTX_set_verify(p->client_ctx, SSL_VERIFY_PEER, NULL);
        if ((p->ca_file ? SSL_CTX_load_verify_locations(p->client_ctx, p->ca_file, NULL)
                        : SSL_CTX_set_default_verify_paths(p->client_ctx)) != 1) {
                unsigned long e = ERR_get_error();
                char why[256] = "";
                if (e)
                        ERR_error_string_n(e, why, sizeof(why));
                ERR_clear_error();
                r = err_set(err, -EINVAL, "Cannot load the egress proxy's upstream CA certificates from %s: %s",
                            p->ca_file ? p->ca_file : "the system store", why);
                goto fail;
        }

        p->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (p->stop_fd < 0 || p->listen_fd < 0) {
                r = err_set(err, -errno, "Cannot make the egress proxy's sockets: %m");
                goto fail;
        }
        int one = 1;
        (void) setsockopt(p->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(cfg->port), .sin_addr.s_addr = htonl(INADDR_ANY) };
        socklen_t sl = sizeof(sa);
        if (bind(p->listen_fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(p->listen_fd, 512) < 0 ||
            getsockname(p->listen_fd, (struct sockaddr *) &sa, &sl) < 0) {
                r = err_set(err, -errno, "Cannot listen on port %u for the egress proxy: %m", cfg->port);
                goto fail;
        }
        p->port = ntohs(sa.sin_port);
        *ret = p;
        return 0;
fail:
        proxy_free(p);
        return r;
}

uint16_t proxy_port(const struct proxy *p) {
        return p->port;
}

int proxy_start(struct proxy *p, struct err *err) {
        if (p->started)
                return 0;
        int r = pthread_create(&p->accept_thread, NULL, accept_main, p);
        if (r != 0) {
                errno = r;
                return err_set(err, -r, "Cannot start the egress proxy's thread: %m");
        }
        p->started = true;
        return 0;
}

void proxy_free(struct proxy *p) {
        if (!p)
                return;
        if (p->started) {
                (void) eventfd_write(p->stop_fd, 1);
                pthread_join(p->accept_thread, NULL);
        }
        pthread_mutex_lock(&p->lock);
        for (struct conn *c = p->conns; c; c = c->next)
                (void) eventfd_write(c->kill_fd, 1);
        pthread_mutex_unlock(&p->lock);
        reap(p, true);
        while (p->sandboxes) {
                struct sandbox *sb = p->sandboxes;
                p->sandboxes = sb->next;
                sandbox_unref(sb);
        }
        SSL_CTX_free(p->server_ctx);
        SSL_CTX_free(p->client_ctx);
        closep(&p->listen_fd);
        closep(&p->stop_fd);
        pthread_mutex_destroy(&p->lock);
        free(p->ca_file);
        free(p);
}
