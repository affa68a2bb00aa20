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
#include "proxy-private.h"
#include "proxy.h"

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
                        conn_count(c, 0, 0, 1);
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
        conn_touch(c);
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

/* ---- the sandbox API: proxy-sandbox.c's table ---- */

int proxy_sandbox_set(struct proxy *p, const char *sandbox_id, uint32_t ip, const struct proxy_rule *rules, size_t n_rules,
                      char **ret_ca_pem, struct err *err) {
        return table_set(p, sandbox_id, ip, rules, n_rules, ret_ca_pem, err);
}

int proxy_sandbox_drop(struct proxy *p, const char *sandbox_id) {
        return table_drop(p, sandbox_id);
}

int proxy_sandbox_drop_ip(struct proxy *p, uint32_t ip) {
        return table_drop_ip(p, ip);
}

int proxy_sandbox_stats(struct proxy *p, const char *sandbox_id, struct proxy_host_stats **ret) {
        return table_stats(p, sandbox_id, ret);
}
