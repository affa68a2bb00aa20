/* Unit tests for nodeagent/proxy.c: the egress proxy on 127.0.0.1 between an OpenSSL client and
 * a small HTTP(S) server of the test's own, with certificates made here; the orig_dst hook stands
 * in for nftables' redirect. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "cleanup.h"
#include "proxy.h"
#include "testlib.h"

#define HOST "api.test.example"
#define SECRET "s3cr3t-value"
#define SB "0123456789abcdef01234567"
#define LOCALHOST 0x7f000001u

/* ---- certificates ---- */

struct pki {
        EVP_PKEY *key;
        X509 *cert;
};

static void add_ext(X509 *x, X509 *issuer, int nid, const char *value) {
        X509V3_CTX ctx;
        X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
        ASSERT_NOT_NULL(e);
        ASSERT_EQ(X509_add_ext(x, e, -1), 1);
        X509_EXTENSION_free(e);
}

/* A CA (issuer NULL) or a leaf for san signed by issuer. */
static struct pki pki_make(const char *cn, const struct pki *issuer, const char *san) {
        struct pki k = { .key = EVP_EC_gen("P-256"), .cert = X509_new() };
        ASSERT_NOT_NULL(k.key);
        X509 *x = k.cert;
        static long serial = 1;
        ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
        X509_set_version(x, 2);
        X509_gmtime_adj(X509_getm_notBefore(x), -3600);
        X509_gmtime_adj(X509_getm_notAfter(x), 86400);
        X509_set_pubkey(x, k.key);
        X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_UTF8, (const unsigned char *) cn, -1, -1, 0);
        X509_set_issuer_name(x, X509_get_subject_name(issuer ? issuer->cert : x));
        if (issuer) {
                add_ext(x, issuer->cert, NID_basic_constraints, "CA:FALSE");
                add_ext(x, issuer->cert, NID_subject_alt_name, san);
        } else {
                add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE");
                add_ext(x, x, NID_key_usage, "critical,keyCertSign");
        }
        ASSERT_TRUE(X509_sign(x, issuer ? issuer->key : k.key, EVP_sha256()) > 0);
        return k;
}

static void pki_done(struct pki *k) {
        EVP_PKEY_free(k->key);
        X509_free(k->cert);
}

/* ---- the upstream: a one-connection-at-a-time HTTP(S) server that records what it got ---- */

#define MAX_REQ 16
#define MAX_CONNS 32

struct upstream {
        int fd;
        SSL_CTX *ctx;                   /* NULL: plain */
        pthread_t thread;
        struct sockaddr_in addr;
        pthread_mutex_t lock;
        int n_conns, n_req;
        pthread_t conn_threads[MAX_CONNS];
        char *heads[MAX_REQ], *bodies[MAX_REQ];
};

static ssize_t io_read(SSL *ssl, int fd, void *buf, size_t n) {
        if (ssl)
                return SSL_read(ssl, buf, (int) n);
        return recv(fd, buf, n, 0);
}
static ssize_t io_write(SSL *ssl, int fd, const void *buf, size_t n) {
        if (ssl)
                return SSL_write(ssl, buf, (int) n);
        return send(fd, buf, n, MSG_NOSIGNAL);
}

struct rbuf {
        char b[128 * 1024];
        size_t len;
};

/* At least n bytes in r; false at the end of the stream. */
static bool need(SSL *ssl, int fd, struct rbuf *r, size_t n) {
        while (r->len < n) {
                if (r->len == sizeof(r->b) - 1)
                        return false;
                ssize_t k = io_read(ssl, fd, r->b + r->len, sizeof(r->b) - 1 - r->len);
                if (k <= 0)
                        return false;
                r->len += (size_t) k;
                r->b[r->len] = 0;
        }
        return true;
}
/* Offset past the next "sep" in r, reading as needed; 0 at the end of the stream. */
static size_t need_sep(SSL *ssl, int fd, struct rbuf *r, const char *sep) {
        for (;;) {
                char *e = memmem(r->b, r->len, sep, strlen(sep));
                if (e)
                        return (size_t) (e - r->b) + strlen(sep);
                if (!need(ssl, fd, r, r->len + 1))
                        return 0;
        }
}
static void consume(struct rbuf *r, size_t n) {
        memmove(r->b, r->b + n, r->len - n);
        r->len -= n;
        r->b[r->len] = 0;
}

static void serve_one(struct upstream *u, int fd) {
        struct timeval tv = { .tv_sec = 20 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        SSL *ssl = NULL;
        if (u->ctx) {
                ssl = SSL_new(u->ctx);
                SSL_set_fd(ssl, fd);
                if (SSL_accept(ssl) != 1)
                        goto out;
        }
        struct rbuf *r = xnew0(struct rbuf, 1);
        for (;;) {
                size_t hlen = need_sep(ssl, fd, r, "\r\n\r\n");
                if (!hlen)
                        break;
                char *head = xstrndup(r->b, hlen);
                consume(r, hlen);
                _cleanup_free_ char *lower = xstrdup(head);
                for (char *s = lower; *s; s++)
                        *s = (char) (*s >= 'A' && *s <= 'Z' ? *s + 32 : *s);
                struct rbuf *body = xnew0(struct rbuf, 1);
                char *cl = strstr(lower, "\r\ncontent-length:");
                if (strstr(lower, "\r\ntransfer-encoding: chunked")) {
                        for (;;) {
                                size_t l = need_sep(ssl, fd, r, "\r\n");
                                if (!l)
                                        break;
                                size_t size = strtoul(r->b, NULL, 16);
                                consume(r, l);
                                if (size == 0) {
                                        while ((l = need_sep(ssl, fd, r, "\r\n")) > 2)
                                                consume(r, l);
                                        consume(r, l);
                                        break;
                                }
                                if (!need(ssl, fd, r, size + 2))
                                        break;
                                memcpy(body->b + body->len, r->b, size);
                                body->len += size;
                                consume(r, size + 2);
                        }
                } else if (cl) {
                        size_t n = strtoul(cl + 17, NULL, 10);
                        if (need(ssl, fd, r, n)) {
                                memcpy(body->b, r->b, n);
                                body->len = n;
                                consume(r, n);
                        }
                }
                pthread_mutex_lock(&u->lock);
                int i = u->n_req < MAX_REQ ? u->n_req++ : -1;
                if (i >= 0) {
                        u->heads[i] = head;
                        u->bodies[i] = xstrndup(body->b, body->len);
                } else
                        free(head);
                pthread_mutex_unlock(&u->lock);
                free(body);
                char resp[128];
                int n = snprintf(resp, sizeof(resp), "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nok %d", i);
                if (io_write(ssl, fd, resp, (size_t) n) != n)
                        break;
        }
        free(r);
out:
        SSL_free(ssl);
        close(fd);
}

struct served {
        struct upstream *u;
        int fd;
};

static void *served_main(void *arg) {
        struct served *s = arg;
        serve_one(s->u, s->fd);
        free(s);
        return NULL;
}

/* A thread per connection; upstream_stop joins them (the proxy has closed their connections). */
static void *upstream_main(void *arg) {
        struct upstream *u = arg;
        for (;;) {
                int fd = accept(u->fd, NULL, NULL);
                if (fd < 0)
                        return NULL;    /* shut down */
                struct served *s = xnew0(struct served, 1);
                *s = (struct served) { u, fd };
                pthread_mutex_lock(&u->lock);
                ASSERT_TRUE(u->n_conns < MAX_CONNS);
                ASSERT_EQ(pthread_create(&u->conn_threads[u->n_conns++], NULL, served_main, s), 0);
                pthread_mutex_unlock(&u->lock);
        }
}

static void upstream_start(struct upstream *u, const struct pki *leaf) {
        *u = (struct upstream) {};
        pthread_mutex_init(&u->lock, NULL);
        if (leaf) {
                u->ctx = SSL_CTX_new(TLS_server_method());
                ASSERT_EQ(SSL_CTX_use_certificate(u->ctx, leaf->cert), 1);
                ASSERT_EQ(SSL_CTX_use_PrivateKey(u->ctx, leaf->key), 1);
        }
        u->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        u->addr = (struct sockaddr_in) { .sin_family = AF_INET, .sin_addr.s_addr = htonl(LOCALHOST) };
        socklen_t sl = sizeof(u->addr);
        ASSERT_OK(bind(u->fd, (struct sockaddr *) &u->addr, sizeof(u->addr)));
        ASSERT_OK(listen(u->fd, 16));
        ASSERT_OK(getsockname(u->fd, (struct sockaddr *) &u->addr, &sl));
        ASSERT_EQ(pthread_create(&u->thread, NULL, upstream_main, u), 0);
}

static void upstream_stop(struct upstream *u) {
        shutdown(u->fd, SHUT_RDWR);
        pthread_join(u->thread, NULL);
        for (int i = 0; i < u->n_conns; i++)
                pthread_join(u->conn_threads[i], NULL);
        close(u->fd);
        for (int i = 0; i < u->n_req; i++)
                free_many(u->heads[i], u->bodies[i]);
        SSL_CTX_free(u->ctx);
        pthread_mutex_destroy(&u->lock);
}

static int upstream_requests(struct upstream *u) {
        pthread_mutex_lock(&u->lock);
        int n = u->n_req;
        pthread_mutex_unlock(&u->lock);
        return n;
}

/* ---- the fixture ---- */

static struct sockaddr_in target;       /* what the orig_dst hook says */

static int hook(int fd, struct sockaddr_in *ret, void *ud) {
        (void) fd, (void) ud;
        *ret = target;
        return 0;
}

enum mode { UP_TLS, UP_UNTRUSTED, UP_PLAIN };

struct fx {
        struct pki ca, leaf, other_ca;
        struct upstream up;
        struct proxy *p;
        uint16_t port;
        char *ca_pem;                   /* the sandbox's egress CA */
};

static void set_secret(struct fx *f, uint32_t ip, const char *value) {
        struct proxy_header h[] = { { "X-Api-Key", value }, { "x-extra", "two" } };
        struct proxy_rule rule = { HOST, h, ELEMENTSOF(h) };
        struct err err = {};
        char *pem = NULL;
        int r = proxy_sandbox_set(f->p, SB, ip, &rule, 1, &pem, &err);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "proxy_sandbox_set: %s", err.message);
        ASSERT_CONTAINS(pem, "-----BEGIN CERTIFICATE-----");
        if (f->ca_pem)
                ASSERT_STREQ(pem, f->ca_pem);   /* the CA is kept across updates */
        free(f->ca_pem);
        f->ca_pem = pem;
}

static void fx_setup(struct fx *f, enum mode mode, unsigned per_sandbox, uint32_t sandbox_ip) {
        *f = (struct fx) {};
        f->ca = pki_make("paddock test upstream CA", NULL, NULL);
        f->other_ca = pki_make("untrusted CA", NULL, NULL);
        f->leaf = pki_make(HOST, mode == UP_UNTRUSTED ? &f->other_ca : &f->ca, "DNS:" HOST);
        char path[512];
        snprintf(path, sizeof(path), "%s/upstream-ca.pem", test_tmpdir());
        FILE *fp = fopen(path, "w");
        ASSERT_NOT_NULL(fp);
        ASSERT_EQ(PEM_write_X509(fp, f->ca.cert), 1);
        fclose(fp);
        upstream_start(&f->up, mode == UP_PLAIN ? NULL : &f->leaf);
        target = f->up.addr;
        struct proxy_config cfg = {
                .upstream_ca_file = path,
                .max_conns_per_sandbox = per_sandbox,
                .connect_timeout_ms = 5000,
                .idle_timeout_ms = 20000,
                .orig_dst = hook,
        };
        struct err err = {};
        int r = proxy_new(&cfg, &f->p, &err);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "proxy_new: %s", err.message);
        ASSERT_OK(proxy_start(f->p, &err));
        f->port = proxy_port(f->p);
        ASSERT_NE(f->port, 0);
        set_secret(f, sandbox_ip, SECRET);
}

static void fx_done(struct fx *f) {
        proxy_free(f->p);
        upstream_stop(&f->up);
        pki_done(&f->ca);
        pki_done(&f->leaf);
        pki_done(&f->other_ca);
        free(f->ca_pem);
}

/* ---- the client ---- */

struct client {
        int fd;
        SSL_CTX *ctx;
        SSL *ssl;
        struct rbuf r;
};

static int tcp_connect(uint16_t port) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(LOCALHOST) };
        ASSERT_OK(connect(fd, (struct sockaddr *) &a, sizeof(a)));
        struct timeval tv = { .tv_sec = 20 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        return fd;
}

static struct client *client_plain(uint16_t port) {
        struct client *c = xnew0(struct client, 1);
        c->fd = tcp_connect(port);
        return c;
}

/* TLS to the proxy with sni, trusting ca_pem and checking the name sni. NULL when the handshake
 * failed; *ret_reason (optional) then has OpenSSL's reason code. */
static struct client *client_tls(uint16_t port, const char *sni, const char *ca_pem, int *ret_reason) {
        struct client *c = xnew0(struct client, 1);
        c->fd = tcp_connect(port);
        c->ctx = SSL_CTX_new(TLS_client_method());
        BIO *bio = BIO_new_mem_buf(ca_pem, -1);
        X509 *ca = PEM_read_bio_X509(bio, NULL, NULL, NULL);
        BIO_free(bio);
        ASSERT_NOT_NULL(ca);
        ASSERT_EQ(X509_STORE_add_cert(SSL_CTX_get_cert_store(c->ctx), ca), 1);
        X509_free(ca);
        SSL_CTX_set_verify(c->ctx, SSL_VERIFY_PEER, NULL);
        /* Strict checks, as Python 3.13's default context does. */
        X509_VERIFY_PARAM_set_flags(SSL_CTX_get0_param(c->ctx), X509_V_FLAG_X509_STRICT);
        c->ssl = SSL_new(c->ctx);
        SSL_set_fd(c->ssl, c->fd);
        if (sni) {
                SSL_set_tlsext_host_name(c->ssl, sni);
                SSL_set1_host(c->ssl, sni);
        }
        SSL_set_alpn_protos(c->ssl, (const unsigned char *) "\x02h2\x08http/1.1", 12);
        ERR_clear_error();
        if (SSL_connect(c->ssl) != 1) {
                if (ret_reason)
                        *ret_reason = ERR_GET_REASON(ERR_peek_error());
                ERR_clear_error();
                SSL_free(c->ssl);
                SSL_CTX_free(c->ctx);
                close(c->fd);
                free(c);
                return NULL;
        }
        const unsigned char *alpn;
        unsigned alen;
        SSL_get0_alpn_selected(c->ssl, &alpn, &alen);
        ASSERT_EQ(alen, 8);
        ASSERT_TRUE(memcmp(alpn, "http/1.1", 8) == 0);
        return c;
}

static void client_free(struct client *c) {
        if (!c)
                return;
        SSL_free(c->ssl);
        SSL_CTX_free(c->ctx);
        close(c->fd);
        free(c);
}

static void client_send(struct client *c, const char *s) {
        ASSERT_EQ(io_write(c->ssl, c->fd, s, strlen(s)), (ssize_t) strlen(s));
}

/* One response (head and Content-Length body), or NULL at the end of the stream. */
static char *client_response(struct client *c) {
        size_t hlen = need_sep(c->ssl, c->fd, &c->r, "\r\n\r\n");
        if (!hlen)
                return NULL;
        const char *cl = strcasestr(c->r.b, "\r\ncontent-length:");
        size_t n = cl && cl < c->r.b + hlen ? strtoul(cl + 17, NULL, 10) : 0;
        ASSERT_TRUE(need(c->ssl, c->fd, &c->r, hlen + n));
        char *resp = xstrndup(c->r.b, hlen + n);
        consume(&c->r, hlen + n);
        return resp;
}

/* The peer ended the connection (or reset it) without a byte more. */
static bool client_closed(struct client *c) {
        char b;
        ssize_t k = c->ssl ? SSL_read(c->ssl, &b, 1) : recv(c->fd, &b, 1, 0);
        ERR_clear_error();
        return k == 0 || (k < 0 && (c->ssl || errno == ECONNRESET));
}

static const char *head_of(struct upstream *u, int i) {
        ASSERT_TRUE(i < upstream_requests(u));
        return u->heads[i];
}

/* ---- tests ---- */

TEST(tls_inject_keepalive_rotate) {
        struct fx f;
        fx_setup(&f, UP_TLS, 0, LOCALHOST);
        struct client *c = client_tls(f.port, HOST, f.ca_pem, NULL);
        ASSERT_NOT_NULL(c);

        /* A chunked body, with a chunk extension and a trailer. */
        client_send(c, "POST /a HTTP/1.1\r\nHost: " HOST "\r\nX-API-KEY: placeholder\r\nTransfer-Encoding: chunked\r\n"
                       "Accept: */*\r\n\r\n6;ext=1\r\nhello \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n");
        _cleanup_free_ char *r1 = client_response(c);
        ASSERT_NOT_NULL(r1);
        ASSERT_TRUE(strncmp(r1, "HTTP/1.1 200 OK\r\n", 17) == 0);
        ASSERT_CONTAINS(r1, "ok 0");
        const char *h = head_of(&f.up, 0);
        ASSERT_CONTAINS(h, "POST /a HTTP/1.1\r\n");
        ASSERT_CONTAINS(h, "X-Api-Key: " SECRET "\r\n");
        ASSERT_CONTAINS(h, "x-extra: two\r\n");
        ASSERT_CONTAINS(h, "Accept: */*\r\n");
        ASSERT_NULL(strstr(h, "placeholder"));
        ASSERT_NULL(strcasestr(h, "x-api-key: placeholder"));
        ASSERT_STREQ(f.up.bodies[0], "hello world");

        /* Rotated between two requests on the same connection. */
        set_secret(&f, LOCALHOST, "n3w-value");
        client_send(c, "PUT /b HTTP/1.1\r\nHost: " HOST "\r\nx-api-key: placeholder\r\nContent-Length: 5\r\n\r\nabcde");
        _cleanup_free_ char *r2 = client_response(c);
        ASSERT_NOT_NULL(r2);
        ASSERT_CONTAINS(r2, "ok 1");
        h = head_of(&f.up, 1);
        ASSERT_CONTAINS(h, "PUT /b HTTP/1.1\r\n");
        ASSERT_CONTAINS(h, "X-Api-Key: n3w-value\r\n");
        ASSERT_NULL(strstr(h, SECRET));
        ASSERT_NULL(strstr(h, "placeholder"));
        ASSERT_STREQ(f.up.bodies[1], "abcde");

        /* Two pipelined requests in one write, both injected. */
        client_send(c, "GET /c HTTP/1.1\r\nHost: " HOST "\r\n\r\nGET /d HTTP/1.1\r\nHost: " HOST "\r\n\r\n");
        _cleanup_free_ char *r3 = client_response(c), *r4 = client_response(c);
        ASSERT_CONTAINS(r3, "ok 2");
        ASSERT_CONTAINS(r4, "ok 3");
        ASSERT_CONTAINS(head_of(&f.up, 3), "GET /d HTTP/1.1\r\n");
        ASSERT_CONTAINS(head_of(&f.up, 3), "X-Api-Key: n3w-value\r\n");
        ASSERT_EQ(f.up.n_conns, 1);

        struct proxy_host_stats *st = NULL;
        ASSERT_EQ(proxy_sandbox_stats(f.p, SB, &st), 1);
        ASSERT_STREQ(st[0].host, HOST);
        ASSERT_EQ(st[0].requests, 4);
        ASSERT_EQ(st[0].injections, 8);
        ASSERT_EQ(st[0].upstream_refused, 0);
        free(st);
        ASSERT_EQ(proxy_sandbox_stats(f.p, "unknown", &st), -ENOENT);
        client_free(c);
        fx_done(&f);
}

TEST(tls_sni_not_in_rules) {
        struct fx f;
        fx_setup(&f, UP_TLS, 0, LOCALHOST);
        int reason = 0;
        ASSERT_NULL(client_tls(f.port, "other.test.example", f.ca_pem, &reason));
        ASSERT_EQ(reason, SSL_R_TLSV1_UNRECOGNIZED_NAME);
        ASSERT_NULL(client_tls(f.port, NULL, f.ca_pem, NULL));
        /* Case does not matter. */
        struct client *c = client_tls(f.port, "API.Test.Example", f.ca_pem, NULL);
        ASSERT_NOT_NULL(c);
        client_free(c);
        ASSERT_EQ(upstream_requests(&f.up), 0);
        fx_done(&f);
}

TEST(tls_upstream_untrusted_502) {
        struct fx f;
        fx_setup(&f, UP_UNTRUSTED, 0, LOCALHOST);
        struct client *c = client_tls(f.port, HOST, f.ca_pem, NULL);
        ASSERT_NOT_NULL(c);
        client_send(c, "GET / HTTP/1.1\r\nHost: " HOST "\r\n\r\n");
        _cleanup_free_ char *r = client_response(c);
        ASSERT_NOT_NULL(r);
        ASSERT_TRUE(strncmp(r, "HTTP/1.1 502 Bad Gateway\r\n", 26) == 0);
        ASSERT_CONTAINS(r, "Content-Type: text/plain\r\n");
        ASSERT_CONTAINS(r, "Connection: close\r\n");
        ASSERT_CONTAINS(r, "the certificate of " HOST " did not verify (");
        ASSERT_NULL(strstr(r, SECRET));
        ASSERT_TRUE(client_closed(c));
        ASSERT_EQ(upstream_requests(&f.up), 0);
        struct proxy_host_stats *st = NULL;
        ASSERT_EQ(proxy_sandbox_stats(f.p, SB, &st), 1);
        ASSERT_EQ(st[0].upstream_refused, 1);
        ASSERT_EQ(st[0].requests, 0);
        free(st);
        client_free(c);
        fx_done(&f);
}

TEST(plain_http) {
        struct fx f;
        fx_setup(&f, UP_PLAIN, 0, LOCALHOST);
        struct client *c = client_plain(f.port);
        client_send(c, "GET /p HTTP/1.1\r\nHost: API.test.example:80\r\nx-api-key: placeholder\r\n\r\n");
        _cleanup_free_ char *r = client_response(c);
        ASSERT_CONTAINS(r, "ok 0");
        ASSERT_CONTAINS(head_of(&f.up, 0), "X-Api-Key: " SECRET "\r\n");
        ASSERT_NULL(strstr(head_of(&f.up, 0), "placeholder"));
        /* Another host on the same connection is refused. */
        client_send(c, "GET /q HTTP/1.1\r\nHost: evil.example\r\n\r\n");
        _cleanup_free_ char *r2 = client_response(c);
        ASSERT_TRUE(strncmp(r2, "HTTP/1.1 403 ", 13) == 0);
        ASSERT_TRUE(client_closed(c));
        client_free(c);

        /* A host not in the rules: 403, nothing upstream. */
        c = client_plain(f.port);
        client_send(c, "GET / HTTP/1.1\r\nHost: other.example\r\n\r\n");
        _cleanup_free_ char *r3 = client_response(c);
        ASSERT_TRUE(strncmp(r3, "HTTP/1.1 403 Forbidden\r\n", 24) == 0);
        ASSERT_CONTAINS(r3, "other.example is not in this sandbox's rules");
        ASSERT_TRUE(client_closed(c));
        client_free(c);
        ASSERT_EQ(upstream_requests(&f.up), 1);
        fx_done(&f);
}

TEST(bad_framing_and_big_head) {
        struct fx f;
        fx_setup(&f, UP_PLAIN, 0, LOCALHOST);
        /* Content-Length and Transfer-Encoding both: 400. */
        struct client *c = client_plain(f.port);
        client_send(c, "GET /ok HTTP/1.1\r\nHost: " HOST "\r\n\r\n");
        _cleanup_free_ char *r0 = client_response(c);
        ASSERT_CONTAINS(r0, "ok 0");
        client_send(c, "POST / HTTP/1.1\r\nHost: " HOST "\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
        _cleanup_free_ char *r1 = client_response(c);
        ASSERT_TRUE(strncmp(r1, "HTTP/1.1 400 Bad Request\r\n", 26) == 0);
        ASSERT_TRUE(client_closed(c));
        client_free(c);

        /* A bad chunk size: 400. */
        c = client_plain(f.port);
        client_send(c, "POST / HTTP/1.1\r\nHost: " HOST "\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
        _cleanup_free_ char *r2 = client_response(c);
        ASSERT_TRUE(strncmp(r2, "HTTP/1.1 400 Bad Request\r\n", 26) == 0);
        client_free(c);

        /* A head over 64 KiB: 431. */
        c = client_plain(f.port);
        size_t n = 70 * 1024;
        char *big = xmalloc(n + 100);
        int k = snprintf(big, 100, "GET / HTTP/1.1\r\nHost: " HOST "\r\nX-Big: ");
        memset(big + k, 'a', n);
        strcpy(big + k + n, "\r\n\r\n");
        client_send(c, big);
        free(big);
        _cleanup_free_ char *r3 = client_response(c);
        ASSERT_TRUE(strncmp(r3, "HTTP/1.1 431 ", 13) == 0);
        client_free(c);
        /* The first connection's request, and the head of the one whose chunk size was bad (a
         * head goes before its body is read). */
        ASSERT_EQ(upstream_requests(&f.up), 2);
        fx_done(&f);
}

TEST(unknown_source_closed) {
        struct fx f;
        fx_setup(&f, UP_PLAIN, 0, 0x7f000002);  /* the sandbox is 127.0.0.2; we come from 127.0.0.1 */
        struct client *c = client_plain(f.port);
        send(c->fd, "GET / HTTP/1.1\r\nHost: " HOST "\r\n\r\n", 22 + strlen(HOST) + 4, MSG_NOSIGNAL);
        ASSERT_TRUE(client_closed(c));
        client_free(c);
        ASSERT_EQ(upstream_requests(&f.up), 0);
        fx_done(&f);
}

TEST(per_sandbox_cap) {
        struct fx f;
        fx_setup(&f, UP_PLAIN, 2, LOCALHOST);
        struct client *a = client_plain(f.port), *b = client_plain(f.port);
        /* Both are served (their first request proves the proxy took them)... */
        client_send(a, "GET /1 HTTP/1.1\r\nHost: " HOST "\r\n\r\n");
        client_send(b, "GET /2 HTTP/1.1\r\nHost: " HOST "\r\n\r\n");
        _cleanup_free_ char *ra = client_response(a), *rb = client_response(b);
        ASSERT_NOT_NULL(ra);
        ASSERT_NOT_NULL(rb);
        /* ... a third is over the cap. */
        struct client *x = client_plain(f.port);
        ASSERT_TRUE(client_closed(x));
        client_free(x);
        /* Once one ends, a new one is served again. */
        client_free(a);
        bool served = false;
        for (int i = 0; i < 100 && !served; i++) {
                usleep(50 * 1000);
                x = client_plain(f.port);
                client_send(x, "GET /3 HTTP/1.1\r\nHost: " HOST "\r\n\r\n");
                char *r = client_response(x);
                served = r != NULL;
                free(r);
                client_free(x);
        }
        ASSERT_TRUE(served);
        client_free(b);
        fx_done(&f);
}

TEST(drop_closes) {
        struct fx f;
        fx_setup(&f, UP_TLS, 0, LOCALHOST);
        struct client *c = client_tls(f.port, HOST, f.ca_pem, NULL);
        ASSERT_NOT_NULL(c);
        client_send(c, "GET / HTTP/1.1\r\nHost: " HOST "\r\n\r\n");
        _cleanup_free_ char *r = client_response(c);
        ASSERT_CONTAINS(r, "ok 0");
        ASSERT_OK(proxy_sandbox_drop(f.p, SB));
        ASSERT_TRUE(client_closed(c));  /* the open connection goes */
        client_free(c);
        ASSERT_OK(proxy_sandbox_drop(f.p, SB));
        struct proxy_host_stats *st = NULL;
        ASSERT_EQ(proxy_sandbox_stats(f.p, SB, &st), -ENOENT);
        c = client_plain(f.port);
        ASSERT_TRUE(client_closed(c));  /* and so does a new one */
        client_free(c);

        /* Registered again: a new CA. */
        char *old = f.ca_pem;
        f.ca_pem = NULL;
        set_secret(&f, LOCALHOST, SECRET);
        ASSERT_TRUE(strcmp(old, f.ca_pem) != 0);
        free(old);
        fx_done(&f);
}

TEST(sandbox_set_checks) {
        struct fx f;
        fx_setup(&f, UP_PLAIN, 0, LOCALHOST);
        struct err err = {};
        struct proxy_header bad_name[] = { { "x api", "v" } };
        struct proxy_header bad_value[] = { { "ok", "v" }, { "x-key", "line\r\nInjected: yes" } };
        struct proxy_rule r1[] = { { "a.example", bad_name, 1 } };
        ASSERT_EQ(proxy_sandbox_set(f.p, "sb2", 0x0a000002, r1, 1, NULL, &err), -EINVAL);
        ASSERT_STREQ(err.field, "rules[0].headers[0].name");
        struct proxy_rule r2[] = { { "a.example", NULL, 0 }, { "b.example", bad_value, 2 } };
        ASSERT_EQ(proxy_sandbox_set(f.p, "sb2", 0x0a000002, r2, 2, NULL, &err), -EINVAL);
        ASSERT_STREQ(err.field, "rules[1].headers[1].value");
        ASSERT_NULL(strstr(err.message, "Injected"));
        struct proxy_rule r3[] = { { "bad host", NULL, 0 } };
        ASSERT_EQ(proxy_sandbox_set(f.p, "sb2", 0x0a000002, r3, 1, NULL, &err), -EINVAL);
        ASSERT_STREQ(err.field, "rules[0].host");
        struct proxy_rule many[65];
        for (size_t i = 0; i < ELEMENTSOF(many); i++)
                many[i] = (struct proxy_rule) { "a.example", NULL, 0 };
        ASSERT_EQ(proxy_sandbox_set(f.p, "sb2", 0x0a000002, many, 65, NULL, &err), -EINVAL);
        ASSERT_STREQ(err.field, "rules");
        char *longv = xmalloc(8194);
        memset(longv, 'v', 8193);
        longv[8193] = 0;
        struct proxy_header big[] = { { "x", longv } };
        struct proxy_rule r4[] = { { "a.example", big, 1 } };
        ASSERT_EQ(proxy_sandbox_set(f.p, "sb2", 0x0a000002, r4, 1, NULL, &err), -EINVAL);
        ASSERT_STREQ(err.field, "rules[0].headers[0].value");
        longv[8192] = 0;
        ASSERT_OK(proxy_sandbox_set(f.p, "sb2", 0x0a000002, r4, 1, NULL, &err));
        free(longv);
        /* Another sandbox's address. */
        ASSERT_EQ(proxy_sandbox_set(f.p, "sb3", LOCALHOST, r4, 0, NULL, &err), -EADDRINUSE);
        ASSERT_STREQ(err.field, "ip");
        ASSERT_OK(proxy_sandbox_drop(f.p, "sb2"));
        ASSERT_OK(proxy_sandbox_drop(f.p, "never-known"));
        fx_done(&f);
}

TEST(upgrade_goes_raw) {
        struct fx f;
        fx_setup(&f, UP_PLAIN, 0, LOCALHOST);
        struct client *c = client_plain(f.port);
        /* After an Upgrade head, what follows is relayed untouched: the server sees the second
         * request's placeholder. */
        client_send(c, "GET /ws HTTP/1.1\r\nHost: " HOST "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
        _cleanup_free_ char *r1 = client_response(c);
        ASSERT_CONTAINS(r1, "ok 0");
        ASSERT_CONTAINS(head_of(&f.up, 0), "X-Api-Key: " SECRET "\r\n");
        client_send(c, "GET /raw HTTP/1.1\r\nHost: " HOST "\r\nx-api-key: placeholder\r\n\r\n");
        _cleanup_free_ char *r2 = client_response(c);
        ASSERT_CONTAINS(r2, "ok 1");
        ASSERT_CONTAINS(head_of(&f.up, 1), "x-api-key: placeholder\r\n");
        ASSERT_NULL(strstr(head_of(&f.up, 1), SECRET));
        client_free(c);
        fx_done(&f);
}
