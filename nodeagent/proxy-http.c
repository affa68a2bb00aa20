/* proxy-http.c — HTTP/1.1 through the proxy: request heads read and checked, the rule's
 * headers put in, bodies forwarded by their framing (Content-Length, chunked). */
#include "proxy-private.h"

/* ---- HTTP/1.1 request heads ---- */

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
int head_parse(const char *h, size_t len, struct req *rq) {
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
bool host_from_header(const char *v, size_t n, char out[static HOST_MAX_LEN + 1]) {
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
int read_head(struct conn *c, size_t *ret_len) {
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

/* The line of n bytes (CRLF included) at the client buffer's start upstream, once its bytes from
 * `from` on are checked as header-value characters (a chunk extension, a trailer). */
static int line_forward(struct conn *c, size_t n, size_t from) {
        const char *l = (const char *) c->cbuf + c->cstart;
        for (size_t i = from; i < n - 2; i++)
                if (!value_char_ok((unsigned char) l[i]))
                        return -EBADMSG;
        int r = up_write_all(c, l, n);
        if (r < 0)
                return r;
        c->cstart += n;
        return 0;
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
                r = line_forward(c, n, i);
                if (r < 0)
                        return r;
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
                r = line_forward(c, n, 0);
                if (r < 0)
                        return r;
                total += n;
                if (n == 2)
                        return 0;
        }
}

void conn_count(struct conn *c, uint64_t requests, uint64_t injections, uint64_t refused) {
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
                        conn_touch(c);
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
                        conn_touch(c);
                        continue;
                }
                r = conn_wait(c, wc, wu, c->deadline);
                if (r < 0)
                        return r;
        }
}

/* Request after request, each head rewritten, each body forwarded by its framing. */
int serve_requests(struct conn *c) {
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
                conn_count(c, 1, n_inj, 0);
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

