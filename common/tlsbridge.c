/* tlsbridge.c — see tlsbridge.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "cleanup.h"
#include "fdio.h"
#include "strutil.h"
#include "tlsbridge.h"

#define BRIDGE_BUF (64 * 1024)

static atomic_int live;         /* bridge threads not yet done with their memory */

/* Fills err with what and OpenSSL's first queued error (-EPROTO), and empties the queue. */
static void ssl_err(struct err *err, const char *what) {
        unsigned long e = ERR_get_error();
        char buf[256] = "";
        if (e)
                ERR_error_string_n(e, buf, sizeof(buf));
        err_set(err, -EPROTO, "%s%s%s", what, buf[0] ? ": " : "", buf);
        ERR_clear_error();
}

static SSL_CTX *ctx_new(const SSL_METHOD *m, struct err *err) {
        SSL_CTX *ctx = SSL_CTX_new(m);
        if (!ctx) {
                ssl_err(err, "cannot make a TLS context");
                return NULL;
        }
        SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
        SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        return ctx;
}

SSL_CTX *tls_server_ctx(const char *cert_file, const char *key_file, struct err *err) {
        SSL_CTX *ctx = ctx_new(TLS_server_method(), err);
        if (!ctx)
                return NULL;
        if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
                ssl_err(err, "cannot load the certificate chain");
                SSL_CTX_free(ctx);
                return NULL;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
                ssl_err(err, "cannot load the key (or it does not match the certificate)");
                SSL_CTX_free(ctx);
                return NULL;
        }
        return ctx;
}

SSL_CTX *tls_client_ctx(const char *ca_file, struct err *err) {
        SSL_CTX *ctx = ctx_new(TLS_client_method(), err);
        if (!ctx)
                return NULL;
        if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
                ssl_err(err, "cannot load the CA certificates");
                SSL_CTX_free(ctx);
                return NULL;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        return ctx;
}

/* Waits for what SSL asked for (e = SSL_get_error) by deadline: 0, or -errno. */
static int ssl_wait(int fd, int e, int64_t deadline) {
        return fd_wait(fd, e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN, deadline);
}

struct bridge {
        SSL *ssl;
        int tcp, local;
};

/* Moves bytes until either side ends. Non-blocking both sides; the TLS side's reads and writes
 * each say which readiness they wait for. */
static void pump(struct bridge *b) {
        _cleanup_free_ uint8_t *up = xmalloc(BRIDGE_BUF), *down = xmalloc(BRIDGE_BUF);
        size_t up_len = 0, up_off = 0, down_len = 0, down_off = 0;
        for (;;) {
                bool progress = false, tcp_in = false, tcp_out = false;
                /* local -> TLS */
                if (!up_len) {
                        ssize_t k = recv(b->local, up, BRIDGE_BUF, MSG_DONTWAIT);
                        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
                                return;
                        if (k > 0) {
                                up_len = (size_t) k;
                                up_off = 0;
                                progress = true;
                        }
                }
                if (up_len) {
                        int k = SSL_write(b->ssl, up + up_off, (int) (up_len - up_off));
                        if (k > 0) {
                                up_off += (size_t) k;
                                if (up_off == up_len)
                                        up_len = up_off = 0;
                                progress = true;
                        } else {
                                int e = SSL_get_error(b->ssl, k);
                                if (e == SSL_ERROR_WANT_WRITE)
                                        tcp_out = true;
                                else if (e == SSL_ERROR_WANT_READ)
                                        tcp_in = true;
                                else
                                        return;
                        }
                }
                /* TLS -> local */
                if (!down_len) {
                        int k = SSL_read(b->ssl, down, BRIDGE_BUF);
                        if (k > 0) {
                                down_len = (size_t) k;
                                down_off = 0;
                                progress = true;
                        } else {
                                int e = SSL_get_error(b->ssl, k);
                                if (e == SSL_ERROR_WANT_READ)
                                        tcp_in = true;
                                else if (e == SSL_ERROR_WANT_WRITE)
                                        tcp_out = true;
                                else
                                        return;   /* close_notify, EOF or a bad record */
                        }
                }
                if (down_len) {
                        ssize_t k = send(b->local, down + down_off, down_len - down_off, MSG_DONTWAIT | MSG_NOSIGNAL);
                        if (k < 0 && errno != EAGAIN && errno != EINTR)
                                return;
                        if (k > 0) {
                                down_off += (size_t) k;
                                if (down_off == down_len)
                                        down_len = down_off = 0;
                                progress = true;
                        }
                }
                if (progress)
                        continue;
                struct pollfd p[2] = { { .fd = b->local }, { .fd = b->tcp } };
                if (!up_len)
                        p[0].events |= POLLIN;
                if (down_len)
                        p[0].events |= POLLOUT;
                if (tcp_in)
                        p[1].events |= POLLIN;
                if (tcp_out)
                        p[1].events |= POLLOUT;
                if (poll(p, 2, -1) < 0 && errno != EINTR)
                        return;
                if ((p[0].revents | p[1].revents) & (POLLNVAL | POLLERR))
                        return;
                if ((p[0].revents & POLLHUP) && !(p[0].revents & POLLIN))
                        return;
                if ((p[1].revents & POLLHUP) && !(p[1].revents & POLLIN))
                        return;
        }
}

static void *bridge_main(void *arg) {
        struct bridge *b = arg;
        pump(b);
        (void) SSL_shutdown(b->ssl);   /* one try, non-blocking: a courtesy */
        SSL_free(b->ssl);
        close(b->tcp);
        close(b->local);
        free(b);
        OPENSSL_thread_stop();
        atomic_fetch_sub(&live, 1);
        return NULL;
}

int tls_bridges_live(void) { return atomic_load(&live); }

void tls_bridges_wait(int timeout_ms) {
        int64_t until = mono_ms() + timeout_ms;
        while (atomic_load(&live) > 0 && mono_ms() < until)
                usleep(10000);
}

int tls_bridge(SSL_CTX *ctx, int tcp_fd, const char *host, int64_t deadline, struct err *err) {
        SSL *ssl = SSL_new(ctx);
        if (!ssl) {
                ssl_err(err, "cannot make a TLS connection");
                close(tcp_fd);
                return -ENOMEM;
        }
        int fl = fcntl(tcp_fd, F_GETFL);
        if (fl < 0 || fcntl(tcp_fd, F_SETFL, fl | O_NONBLOCK) < 0 || SSL_set_fd(ssl, tcp_fd) != 1) {
                SSL_free(ssl);
                close(tcp_fd);
                return err_set(err, -EIO, "cannot set up the TLS connection");
        }
        if (host) {
                struct in6_addr a6;
                struct in_addr a4;
                bool ip = inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
                if (ip)
                        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
                else {
                        SSL_set_tlsext_host_name(ssl, host);
                        SSL_set1_host(ssl, host);
                }
                SSL_set_connect_state(ssl);
        } else
                SSL_set_accept_state(ssl);
        int r = 0;
        for (;;) {
                ERR_clear_error();
                int k = SSL_do_handshake(ssl);
                if (k == 1)
                        break;
                int e = SSL_get_error(ssl, k);
                if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                        r = ssl_wait(tcp_fd, e, deadline);
                        if (r < 0) {
                                err_set(err, r, "TLS handshake: %s", strerror(-r));
                                break;
                        }
                        continue;
                }
                long v = SSL_get_verify_result(ssl);
                if (v != X509_V_OK) {
                        err_set(err, -EPROTO, "TLS handshake: the peer's certificate does not verify: %s",
                                X509_verify_cert_error_string(v));
                        ERR_clear_error();
                } else if (e == SSL_ERROR_SYSCALL && !ERR_peek_error())
                        err_set(err, -ECONNRESET, "TLS handshake: the peer closed the connection");
                else
                        ssl_err(err, "TLS handshake");
                r = e == SSL_ERROR_SYSCALL && !ERR_peek_error() ? -ECONNRESET : -EPROTO;
                break;
        }
        int sv[2] = { -1, -1 };
        if (r == 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                r = -errno;
                err_set(err, r, "socketpair: %s", strerror(-r));
        }
        if (r < 0) {
                SSL_free(ssl);
                close(tcp_fd);
                return r;
        }
        struct bridge *b = xnew0(struct bridge, 1);
        *b = (struct bridge) { .ssl = ssl, .tcp = tcp_fd, .local = sv[1] };
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 * 1024);
        pthread_t t;
        atomic_fetch_add(&live, 1);
        r = pthread_create(&t, &at, bridge_main, b);
        pthread_attr_destroy(&at);
        if (r != 0) {
                atomic_fetch_sub(&live, 1);
                err_set(err, -EAGAIN, "cannot start the TLS bridge thread");
                SSL_free(ssl);
                close(tcp_fd);
                close(sv[0]);
                close(sv[1]);
                free(b);
                return -EAGAIN;
        }
        return sv[0];
}
