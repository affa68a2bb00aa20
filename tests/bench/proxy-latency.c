/* proxy-latency — what the node's egress proxy (nodeagent/proxy.c) adds to a sandbox's HTTPS
 * request, against the same request sent straight to the upstream, interleaved in one run.
 *
 * Everything on 127.0.0.1: an HTTPS upstream (a thread per connection; each request answered
 * 200 with a small body), the proxy with one sandbox (127.0.0.1) whose rule for the upstream's
 * name puts in one header, and a client that verifies the certificate it is shown (the proxy's
 * CA for the proxy, the upstream's for the direct side), as a sandbox's TLS stack does.
 *
 *   proxy-latency <ca.pem> <cert.pem> <key.pem> <k>
 *
 * Two modes, k samples each, the proxy and the direct side alternating request by request:
 *   keepalive  one request on a connection already open (both sides keep one open)
 *   connect    a new connection: TCP, TLS handshake and one request
 * Prints one line per mode: "<mode> <proxy p50 ms> <proxy p99 ms> <direct p50 ms> <direct p99 ms>".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "log.h"
#include "proxy.h"

#define HOST "bench.proxy.test"

static struct sockaddr_in upstream;
static SSL_CTX *server_ctx;

static double now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec * 1000.0 + (double) ts.tv_nsec / 1e6;
}

static void die(const char *what) {
        fprintf(stderr, "proxy-latency: %s\n", what);
        ERR_print_errors_fp(stderr);
        exit(1);
}

/* Reads one response (head and its Content-Length body) from ssl. 0, or -1. */
static int read_response(SSL *ssl) {
        char buf[4096];
        size_t have = 0;
        for (;;) {
                char *end = have ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
                if (end) {
                        const char *cl = strcasestr(buf, "content-length:");
                        size_t want = (size_t) (end - buf) + 4 + (cl ? strtoul(cl + 15, NULL, 10) : 0);
                        if (have >= want)
                                return 0;
                }
                if (have == sizeof(buf))
                        return -1;
                int k = SSL_read(ssl, buf + have, (int) (sizeof(buf) - have));
                if (k <= 0)
                        return -1;
                have += (size_t) k;
        }
}

static void *serve(void *arg) {
        int fd = (int) (intptr_t) arg;
        SSL *ssl = SSL_new(server_ctx);
        SSL_set_fd(ssl, fd);
        if (SSL_accept(ssl) == 1) {
                char buf[8192];
                size_t have = 0;
                for (;;) {
                        char *end = have ? memmem(buf, have, "\r\n\r\n", 4) : NULL;
                        if (!end) {
                                int k = have < sizeof(buf) ? SSL_read(ssl, buf + have, (int) (sizeof(buf) - have)) : -1;
                                if (k <= 0)
                                        break;
                                have += (size_t) k;
                                continue;
                        }
                        size_t head = (size_t) (end - buf) + 4;
                        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
                                                 "{\"ok\":true}";
                        if (SSL_write(ssl, ok, sizeof(ok) - 1) <= 0)
                                break;
                        memmove(buf, buf + head, have - head);
                        have -= head;
                }
        }
        SSL_free(ssl);
        close(fd);
        return NULL;
}

static void *accept_loop(void *arg) {
        int lfd = (int) (intptr_t) arg;
        for (;;) {
                int fd = accept(lfd, NULL, NULL);
                if (fd < 0)
                        continue;
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                pthread_t t;
                pthread_attr_t at;
                pthread_attr_init(&at);
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&t, &at, serve, (void *) (intptr_t) fd) != 0)
                        close(fd);
                pthread_attr_destroy(&at);
        }
        return NULL;
}

static int orig_dst(int fd, struct sockaddr_in *ret, void *ud) {
        (void) fd;
        (void) ud;
        *ret = upstream;
        return 0;
}

struct client {
        SSL_CTX *ctx;
        uint16_t port;
        int fd;
        SSL *ssl;
};

static void client_close(struct client *c) {
        if (c->ssl) {
                SSL_shutdown(c->ssl);
                SSL_free(c->ssl);
        }
        if (c->fd >= 0)
                close(c->fd);
        c->ssl = NULL;
        c->fd = -1;
}

static void client_open(struct client *c) {
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(c->port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        if (connect(c->fd, (struct sockaddr *) &a, sizeof(a)) < 0)
                die("connect");
        c->ssl = SSL_new(c->ctx);
        SSL_set_tlsext_host_name(c->ssl, HOST);
        SSL_set1_host(c->ssl, HOST);
        SSL_set_verify(c->ssl, SSL_VERIFY_PEER, NULL);
        SSL_set_fd(c->ssl, c->fd);
        if (SSL_connect(c->ssl) != 1)
                die("TLS handshake");
}

static void request(struct client *c) {
        static const char req[] = "POST /v1/messages HTTP/1.1\r\nHost: " HOST "\r\nx-api-key: placeholder\r\n"
                                  "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if (SSL_write(c->ssl, req, sizeof(req) - 1) <= 0 || read_response(c->ssl) < 0)
                die("request");
}

static int cmp(const void *a, const void *b) {
        double x = *(const double *) a, y = *(const double *) b;
        return x < y ? -1 : x > y;
}

static double pct(double *v, int n, int p) {
        qsort(v, (size_t) n, sizeof(*v), cmp);
        int i = (n - 1) * p / 100;
        return v[i];
}

static SSL_CTX *client_ctx(const char *ca_file, const char *ca_pem) {
        SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
        if (ca_file && SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1)
                die("load the upstream CA");
        if (ca_pem) {
                BIO *b = BIO_new_mem_buf(ca_pem, -1);
                X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);
                if (!x || X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), x) != 1)
                        die("load the proxy's CA");
                X509_free(x);
                BIO_free(b);
        }
        SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);       /* every connect a full handshake */
        return ctx;
}

int main(int argc, char **argv) {
        if (argc != 5)
                die("usage: proxy-latency <ca.pem> <cert.pem> <key.pem> <k>");
        int k = atoi(argv[4]);
        if (k < 10)
                k = 10;
        signal(SIGPIPE, SIG_IGN);
        log_set_max_level(LOG_WARNING);         /* the proxy's line per connection is not the bench's */
        server_ctx = SSL_CTX_new(TLS_server_method());
        if (SSL_CTX_use_certificate_chain_file(server_ctx, argv[2]) != 1 ||
            SSL_CTX_use_PrivateKey_file(server_ctx, argv[3], SSL_FILETYPE_PEM) != 1)
                die("load the upstream's certificate");
        int lfd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t al = sizeof(a);
        if (bind(lfd, (struct sockaddr *) &a, sizeof(a)) < 0 || listen(lfd, 128) < 0 ||
            getsockname(lfd, (struct sockaddr *) &upstream, &al) < 0)
                die("listen");
        pthread_t at;
        pthread_create(&at, NULL, accept_loop, (void *) (intptr_t) lfd);

        struct proxy_config pc = { .upstream_ca_file = argv[1], .orig_dst = orig_dst, .max_conns_per_sandbox = 4096 };
        struct proxy *p = NULL;
        struct err err = { 0 };
        if (proxy_new(&pc, &p, &err) < 0 || proxy_start(p, &err) < 0)
                die(err.message);
        struct proxy_header h = { "x-api-key", "sk-bench-0123456789abcdef0123456789abcdef" };
        struct proxy_rule rule = { HOST, &h, 1 };
        char *pem = NULL;
        if (proxy_sandbox_set(p, "0123456789abcdef01234567", 0x7f000001, &rule, 1, &pem, &err) < 0)
                die(err.message);

        struct client via = { .ctx = client_ctx(NULL, pem), .port = proxy_port(p), .fd = -1 };
        struct client direct = { .ctx = client_ctx(argv[1], NULL), .port = ntohs(upstream.sin_port), .fd = -1 };
        double *pv = calloc((size_t) k, sizeof(double)), *dv = calloc((size_t) k, sizeof(double));

        /* keep-alive: one request on an open connection */
        client_open(&via);
        client_open(&direct);
        for (int i = 0; i < 20; i++) {          /* warm-up */
                request(&via);
                request(&direct);
        }
        for (int i = 0; i < k; i++) {
                double t0 = now_ms();
                request(&via);
                double t1 = now_ms();
                request(&direct);
                double t2 = now_ms();
                pv[i] = t1 - t0;
                dv[i] = t2 - t1;
        }
        printf("keepalive %.3f %.3f %.3f %.3f\n", pct(pv, k, 50), pct(pv, k, 99), pct(dv, k, 50), pct(dv, k, 99));
        client_close(&via);
        client_close(&direct);

        /* a new connection each time: TCP, TLS (the proxy's upstream side too) and one request */
        for (int i = 0; i < k; i++) {
                double t0 = now_ms();
                client_open(&via);
                request(&via);
                double t1 = now_ms();
                client_open(&direct);
                request(&direct);
                double t2 = now_ms();
                client_close(&via);
                client_close(&direct);
                pv[i] = t1 - t0;
                dv[i] = t2 - t1;
        }
        printf("connect %.3f %.3f %.3f %.3f\n", pct(pv, k, 50), pct(pv, k, 99), pct(dv, k, 50), pct(dv, k, 99));
        fflush(stdout);
        free(pem);
        free(pv);
        free(dv);
        _exit(0);       /* the upstream's threads are the process's: no orderly stop needed */
}
