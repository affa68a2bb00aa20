/* proxy-io.c — one connection's sockets for the egress proxy: non-blocking reads and writes of
 * either side (TLS or plain), the raw relay of one direction, and the waits that move the
 * upstream->client direction while the client->upstream one is read (proxy.c says why). */
#include "proxy-private.h"

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
void side_shutdown_write(struct side *s) {
        if (s->ssl) {
                ERR_clear_error();
                (void) SSL_shutdown(s->ssl);
                ERR_clear_error();
        } else if (s->fd >= 0)
                (void) shutdown(s->fd, SHUT_WR);
}

/* One step of a raw direction: reads when its buffer is empty, writes what it holds. 1 when
 * something moved (or src ended), 0 when it waits (wants added), -errno. */
int relay_step(struct relay *r, short *want_src, short *want_dst) {
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

bool relay_done(const struct relay *r) {
        return r->eof && r->start == r->end;
}

/* ---- a connection's waits ---- */

void conn_touch(struct conn *c) {
        c->deadline = mono_ms() + c->p->cfg.idle_timeout_ms;
}

/* Waits for the client's and upstream's wanted events, the kill eventfd, or deadline. 0 (some
 * event), -ETIMEDOUT, -ECANCELED (killed), -errno. */
int conn_wait(struct conn *c, short want_cli, short want_up, int64_t deadline) {
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
int down_step(struct conn *c, short *want_cli, short *want_up) {
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
                conn_touch(c);
                return 0;
        }
        return conn_wait(c, *wc, *wu, c->deadline);
}

/* More client bytes into cbuf (compacting it first). 1, 0 at the client's end of stream,
 * -ENOBUFS when cbuf is full, -errno. Relays upstream -> client meanwhile. */
int cli_fill(struct conn *c) {
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
                        conn_touch(c);
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
int up_write_all(struct conn *c, const void *buf, size_t len) {
        const uint8_t *b = buf;
        while (len > 0) {
                short wc = 0, wu = 0;
                ssize_t k = side_write(&c->up, b, len, &wu);
                if (k > 0) {
                        b += k;
                        len -= (size_t) k;
                        conn_touch(c);
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
void cli_answer(struct conn *c, int status, const char *reason, const char *body) {
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
