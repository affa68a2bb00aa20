/* preview-head.c — a preview connection's request head: read (bounded in size and time),
 * parsed, routed (<port>-<id>.<domain> or /p/<id>/<port>/), our token and cookie taken out,
 * rewritten for the app, the body framed (Content-Length or chunked), and the answer's status
 * line watched for a 101; preview_head_check() runs it all for tests/fuzz/fuzz-preview-head.c.
 * preview-proxy.c serves connections with these (preview-private.h). */

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "cleanup.h"
#include "controld.h"
#include "fdio.h"
#include "log.h"
#include "preview-private.h"
#include "preview.h"
#include "strutil.h"

#define COOKIE_PREFIX "paddock_preview_"
#define HOST_PREFIX "__Host-"

/* ---- the proxy ---- */

/* A whole write to the client, bounded: a client that stops reading holds us SEND_TIMEOUT_MS. */
bool preview_send_all(int fd, const void *p, size_t n) {
        return fd_send_all(fd, p, n, mono_ms() + SEND_TIMEOUT_MS) == 0;
}

void preview_page(struct pconn *pc, int status, const char *reason, const char *extra_headers, const char *fmt, ...) {
        char msg[1024], body[2048], head[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        int bn = snprintf(body, sizeof(body),
                          "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>%d %s</title></head>\n"
                          "<body style=\"font-family:sans-serif;margin:3em\"><h1>%d %s</h1>\n<p>%s</p>\n"
                          "<p style=\"color:#777\">Paddock preview</p></body></html>\n",
                          status, reason, status, reason, msg);
        int hn = snprintf(head, sizeof(head),
                          "HTTP/1.1 %d %s\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: %d\r\n"
                          "Cache-Control: no-store\r\nConnection: close\r\nX-Paddock-Preview-Error: %s\r\n%s\r\n",
                          status, reason, bn, msg, extra_headers ? extra_headers : "");
        (void) preview_send_all(pc->fd, head, (size_t) hn);
        if (!pc->method || strcmp(pc->method, "HEAD"))
                (void) preview_send_all(pc->fd, body, (size_t) bn);
}

const char *preview_header(const struct pconn *pc, const char *name) {
        for (size_t i = 0; i < pc->n_h; i++)
                if (!strcasecmp(pc->h[i].name, name))
                        return pc->h[i].value;
        return NULL;
}

/* Reads the head (to the blank line) within timeout_ms of now and max bytes: 0, or an HTTP
 * status to answer (408, 431, 400), or -1 when the client went away. */
int preview_read_head(struct pconn *pc, size_t max, uint64_t timeout_ms) {
        int64_t deadline = mono_ms() + (int64_t) timeout_ms;
        for (;;) {
                char *end = pc->got >= 4 ? memmem(pc->head, pc->got, "\r\n\r\n", 4) : NULL;
                if (end) {
                        pc->head_len = (size_t) (end - pc->head) + 4;
                        return 0;
                }
                if (pc->got >= max)
                        return 431;
                int64_t left = deadline - mono_ms();
                if (left <= 0)
                        return 408;
                if (preview_pv.L.stopping || (preview_pv.c && preview_pv.c->stopping))
                        return -1;
                struct pollfd pfd = { .fd = pc->fd, .events = POLLIN };
                int k = poll(&pfd, 1, (int) (left < 1000 ? left : 1000));
                if (k < 0 && errno != EINTR)
                        return -1;
                if (k <= 0)
                        continue;
                ssize_t n = recv(pc->fd, pc->head + pc->got, max - pc->got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return -1;
                pc->got += (size_t) n;
        }
}

/* Splits the head in place: request line and headers. 0 or 400. */
int preview_parse_head(struct pconn *pc) {
        char *s = pc->head, *end = pc->head + pc->head_len - 2;   /* at the final CRLF */
        char *eol = memmem(s, (size_t) (end - s), "\r\n", 2);
        if (!eol)
                return 400;
        *eol = 0;
        if (strlen(s) != (size_t) (eol - s))
                return 400;   /* a NUL in the request line */
        char *sp1 = strchr(s, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        if (!sp1 || !sp2 || strchr(sp2 + 1, ' '))
                return 400;
        *sp1 = *sp2 = 0;
        pc->method = s;
        pc->target = sp1 + 1;
        pc->version = sp2 + 1;
        if (!*pc->method || pc->target[0] != '/' || (strcmp(pc->version, "HTTP/1.1") && strcmp(pc->version, "HTTP/1.0")))
                return 400;
        for (const char *m = pc->method; *m; m++)
                if (!http_tchar((unsigned char) *m))
                        return 400;
        for (const char *t = pc->target; *t; t++)
                if ((unsigned char) *t <= 0x20 || *t == 0x7f)
                        return 400;
        s = eol + 2;
        while (s < end) {
                eol = memmem(s, (size_t) (end + 2 - s), "\r\n", 2);
                if (!eol || pc->n_h >= MAX_HEADERS)
                        return 400;
                *eol = 0;
                char *colon = strchr(s, ':');
                if (!colon || colon == s || (size_t) (eol - s) != strlen(s))
                        return 400;   /* no name, obs-fold, or a NUL */
                for (char *q = s; q < colon; q++)
                        if (!http_tchar((unsigned char) *q))
                                return 400;
                *colon = 0;
                char *v = colon + 1;
                while (*v == ' ' || *v == '\t')
                        v++;
                char *ve = eol;
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                        *--ve = 0;
                for (char *q = v; *q; q++)
                        if (*q == '\r' || *q == '\n')
                                return 400;
                pc->h[pc->n_h++] = (struct hdr) { s, v };
                s = eol + 2;
        }
        return 0;
}

static bool parse_port(const char *s, size_t n, int *ret) {
        int v = 0;
        if (n == 0 || n > 5 || s[0] == '0')
                return false;
        for (size_t i = 0; i < n; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return false;
                v = v * 10 + (s[i] - '0');
        }
        if (v < 1 || v > 65535)
                return false;
        *ret = v;
        return true;
}

static bool hex24(const char *s) {
        for (int i = 0; i < SANDBOX_ID_LEN; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* Finds the preview a request is for: Host <port>-<id>.<domain> (domain's own :port, if any,
 * not compared), else, when path_form, /p/<id>/<port>/. */
bool preview_route(struct pconn *pc, const char *domain, bool path_form) {
        const char *host = preview_header(pc, "Host");
        if (*domain && host) {
                const char *dash = strchr(host, '-');
                size_t dl = strcspn(domain, ":");
                if (dash && strlen(dash + 1) >= SANDBOX_ID_LEN + 1 + dl && hex24(dash + 1) &&
                    dash[1 + SANDBOX_ID_LEN] == '.' && !strncasecmp(dash + 2 + SANDBOX_ID_LEN, domain, dl)) {
                        const char *after = dash + 2 + SANDBOX_ID_LEN + dl;
                        if ((*after == 0 || *after == ':') && parse_port(host, (size_t) (dash - host), &pc->port)) {
                                memcpy(pc->id, dash + 1, SANDBOX_ID_LEN);
                                pc->id[SANDBOX_ID_LEN] = 0;
                                pc->rest = pc->target;
                                return true;
                        }
                }
        }
        const char *t = pc->target;
        if (!path_form || strncmp(t, "/p/", 3) || strlen(t) < 3 + SANDBOX_ID_LEN + 2 || !hex24(t + 3) || t[3 + SANDBOX_ID_LEN] != '/')
                return false;
        const char *ps = t + 4 + SANDBOX_ID_LEN, *pe = ps + strcspn(ps, "/?");
        if (!parse_port(ps, (size_t) (pe - ps), &pc->port))
                return false;
        memcpy(pc->id, t + 3, SANDBOX_ID_LEN);
        pc->id[SANDBOX_ID_LEN] = 0;
        pc->path_form = true;
        pc->rest = pe;
        return true;
}

/* The value of our token parameter in the query of target (xmalloc'd, raw), or NULL; and
 * target without it in *ret_stripped. */
char *preview_take_query_token(const char *target, char **ret_stripped) {
        const char *q = strchr(target, '?');
        char *tok = NULL;
        struct strbuf out;
        strbuf_init(&out, 0);
        strbuf_append(&out, target, q ? (size_t) (q - target) : strlen(target));
        if (q) {
                const char *s = q + 1;
                bool first = true;
                while (*s) {
                        const char *e = strchrnul(s, '&');
                        size_t n = (size_t) (e - s);
                        size_t pl = strlen(TOKEN_PARAM);
                        if (n > pl && !strncmp(s, TOKEN_PARAM "=", pl + 1)) {
                                free(tok);
                                tok = xstrndup(s + pl + 1, n - pl - 1);
                        } else if (n) {
                                strbuf_append(&out, first ? "?" : "&", 1);
                                strbuf_append(&out, s, n);
                                first = false;
                        }
                        s = *e ? e + 1 : e;
                }
        }
        *ret_stripped = strbuf_steal(&out);
        return tok;
}

void preview_cookie_name(const struct pconn *pc, char out[64]) {
        snprintf(out, 64, "%s" COOKIE_PREFIX "%d_%s", pc->secure ? HOST_PREFIX : "", pc->port, pc->id);
}

/* Any preview's cookie (ours, of any preview, with or without __Host-): never for the app. */
static bool our_cookie(const char *s, size_t n) {
        size_t hl = strlen(HOST_PREFIX), pl = strlen(COOKIE_PREFIX);
        if (n >= hl && !strncmp(s, HOST_PREFIX, hl))
                s += hl, n -= hl;
        return n >= pl && !strncmp(s, COOKIE_PREFIX, pl);
}

/* Our cookie's value from the Cookie headers (xmalloc'd), or NULL. */
char *preview_cookie_token(const struct pconn *pc) {
        char name[64];
        preview_cookie_name(pc, name);
        size_t nl = strlen(name);
        for (size_t i = 0; i < pc->n_h; i++) {
                if (strcasecmp(pc->h[i].name, "Cookie"))
                        continue;
                const char *s = pc->h[i].value;
                while (*s) {
                        while (*s == ' ' || *s == ';')
                                s++;
                        const char *e = strchrnul(s, ';');
                        if ((size_t) (e - s) > nl && !strncmp(s, name, nl) && s[nl] == '=')
                                return xstrndup(s + nl + 1, (size_t) (e - s) - nl - 1);
                        s = e;
                }
        }
        return NULL;
}

/* Cookie header values without our cookies ("" when nothing else is left). */
static char *cookies_without_ours(const char *value) {
        struct strbuf out;
        strbuf_init(&out, 0);
        const char *s = value;
        while (*s) {
                while (*s == ' ' || *s == ';')
                        s++;
                const char *e = strchrnul(s, ';');
                if (e > s && !our_cookie(s, (size_t) (e - s))) {
                        if (out.len)
                                strbuf_append(&out, "; ", 2);
                        strbuf_append(&out, s, (size_t) (e - s));
                }
                s = e;
        }
        return strbuf_steal(&out) ?: xstrdup("");
}

/* Headers that never reach the app as the client sent them: hop-by-hop ones, ours (the
 * preview token, E2B's traffic token), and what a proxy vouches for (we set our own). */
static bool hop_by_hop(const char *name) {
        static const char *const drop[] = { "Connection", "Keep-Alive", "Proxy-Connection", "TE", "Trailer",
                                             "Upgrade", "Host", TOKEN_HEADER, "e2b-traffic-access-token", "Forwarded",
                                             "X-Real-IP", "X-Client-IP", "True-Client-IP" };
        for (size_t i = 0; i < ELEMENTSOF(drop); i++)
                if (!strcasecmp(name, drop[i]))
                        return true;
        return !strncasecmp(name, "X-Forwarded-", strlen("X-Forwarded-"));
}

/* The head as it goes to the sandbox (scheme: X-Forwarded-Proto). */
char *preview_rewrite_head(struct pconn *pc, bool keep_host, const char *target, const char *scheme) {
        struct strbuf b;
        strbuf_init(&b, 0);
        const char *upgrade = preview_header(pc, "Upgrade");
        const char *host = preview_header(pc, "Host");
        strbuf_printf(&b, "%s %s %s\r\n", pc->method, target, pc->version);
        if (keep_host && host)
                strbuf_printf(&b, "Host: %s\r\n", host);
        else
                strbuf_printf(&b, "Host: localhost:%d\r\n", pc->port);
        for (size_t i = 0; i < pc->n_h; i++) {
                if (!strcasecmp(pc->h[i].name, "Cookie")) {
                        _cleanup_free_ char *rest = cookies_without_ours(pc->h[i].value);
                        if (*rest)
                                strbuf_printf(&b, "Cookie: %s\r\n", rest);
                        continue;
                }
                if (hop_by_hop(pc->h[i].name))
                        continue;
                strbuf_printf(&b, "%s: %s\r\n", pc->h[i].name, pc->h[i].value);
        }
        if (upgrade) {
                strbuf_printf(&b, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade);
        } else
                strbuf_printf(&b, "Connection: close\r\n");
        strbuf_printf(&b, "X-Forwarded-For: %s\r\nX-Forwarded-Proto: %s\r\n", pc->peer, scheme);
        if (host)
                strbuf_printf(&b, "X-Forwarded-Host: %s\r\n", host);
        strbuf_append(&b, "\r\n", 2);
        return strbuf_steal(&b);
}

/* How the request's body ends (RFC 9112 6.3): 0, or 400 for what a proxy must refuse (both
 * Content-Length and Transfer-Encoding, a coding other than chunked last, Content-Lengths that
 * disagree or are no number). */
int preview_framing(struct pconn *pc) {
        const char *te = NULL, *cl = NULL;
        for (size_t i = 0; i < pc->n_h; i++) {
                if (!strcasecmp(pc->h[i].name, "Transfer-Encoding")) {
                        if (te)
                                return 400;
                        te = pc->h[i].value;
                } else if (!strcasecmp(pc->h[i].name, "Content-Length")) {
                        if (cl && strcmp(cl, pc->h[i].value))
                                return 400;
                        cl = pc->h[i].value;
                }
        }
        pc->upgrade = preview_header(pc, "Upgrade") != NULL;
        pc->flow = FLOW_BODY;
        if (te) {
                size_t n = strlen(te);
                if (cl || n < 7 || strcasecmp(te + n - 7, "chunked") || (n > 7 && te[n - 8] != ' ' && te[n - 8] != ','))
                        return 400;
                pc->chunked = true;
                return 0;
        }
        if (cl) {
                uint64_t v = 0;
                if (!*cl || strlen(cl) > 18)
                        return 400;
                for (const char *q = cl; *q; q++) {
                        if (*q < '0' || *q > '9')
                                return 400;
                        v = v * 10 + (uint64_t) (*q - '0');
                }
                pc->body_left = v;
        }
        if (!pc->chunked && pc->body_left == 0)
                pc->flow = FLOW_HOLD;
        return 0;
}

/* Feeds n body bytes to the chunk scanner: how many belong to the body (the rest is what came
 * after it); cs->st is CS_DONE at its end, CS_ERR on a malformed body. */
static size_t chunk_feed(struct chunk_scan *cs, const uint8_t *p, size_t n) {
        size_t i = 0;
        while (i < n && cs->st != CS_DONE && cs->st != CS_ERR) {
                uint8_t ch = p[i];
                switch (cs->st) {
                case CS_SIZE: {
                        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
                                : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
                        if (v >= 0 && cs->digits < 15) {
                                cs->size = cs->size * 16 + (uint64_t) v;
                                cs->digits++;
                        } else if (cs->digits && (ch == ';' || ch == ' ' || ch == '\t'))
                                cs->st = CS_EXT;
                        else if (cs->digits && ch == '\r')
                                cs->st = CS_SIZE_LF;
                        else
                                cs->st = CS_ERR;
                        i++;
                        break;
                }
                case CS_EXT:
                        if (ch == '\r')
                                cs->st = CS_SIZE_LF;
                        else if (ch == '\n')
                                cs->st = CS_ERR;
                        i++;
                        break;
                case CS_SIZE_LF:
                        cs->st = ch != '\n' ? CS_ERR : cs->size ? CS_DATA : CS_TRAILER_START;
                        i++;
                        break;
                case CS_DATA: {
                        size_t take = n - i < cs->size ? n - i : (size_t) cs->size;
                        cs->size -= take;
                        i += take;
                        if (!cs->size)
                                cs->st = CS_DATA_CR;
                        break;
                }
                case CS_DATA_CR:
                        cs->st = ch == '\r' ? CS_DATA_LF : CS_ERR;
                        i++;
                        break;
                case CS_DATA_LF:
                        cs->st = ch == '\n' ? CS_SIZE : CS_ERR;
                        cs->digits = 0;
                        cs->size = 0;
                        i++;
                        break;
                case CS_TRAILER_START:
                        cs->st = ch == '\r' ? CS_END_LF : ch == '\n' ? CS_ERR : CS_TRAILER;
                        i++;
                        break;
                case CS_TRAILER:
                        if (ch == '\r')
                                cs->st = CS_TRAILER_LF;
                        else if (ch == '\n')
                                cs->st = CS_ERR;
                        i++;
                        break;
                case CS_TRAILER_LF:
                        cs->st = ch == '\n' ? CS_TRAILER_START : CS_ERR;
                        i++;
                        break;
                case CS_END_LF:
                        cs->st = ch == '\n' ? CS_DONE : CS_ERR;
                        i++;
                        break;
                default:
                        cs->st = CS_ERR;
                        break;
                }
        }
        return i;
}

/* Of n bytes from the client, how many go into the sandbox; the flow moves on at the body's
 * end. -1: a malformed chunked body (the connection ends). */
ssize_t preview_client_take(struct pconn *pc, const uint8_t *p, size_t n) {
        switch (pc->flow) {
        case FLOW_RAW:
                return (ssize_t) n;
        case FLOW_HOLD:
                return 0;
        case FLOW_BODY:
                break;
        }
        size_t take;
        if (pc->chunked) {
                take = chunk_feed(&pc->cs, p, n);
                if (pc->cs.st == CS_ERR)
                        return -1;
                if (pc->cs.st == CS_DONE)
                        pc->flow = FLOW_HOLD;
        } else {
                take = n < pc->body_left ? n : (size_t) pc->body_left;
                pc->body_left -= take;
                if (!pc->body_left)
                        pc->flow = FLOW_HOLD;
        }
        return (ssize_t) take;
}

/* The answer's first bytes: a 101 to an upgrade request lets the client's bytes pass raw. */
void preview_saw_answer(struct pconn *pc, const uint8_t *p, size_t n) {
        size_t want = sizeof(pc->status) - pc->status_len;
        if (!want)
                return;
        if (n > want)
                n = want;
        memcpy(pc->status + pc->status_len, p, n);
        pc->status_len += n;
        if (pc->status_len == sizeof(pc->status) && pc->upgrade && pc->flow == FLOW_HOLD &&
            (!memcmp(pc->status, "HTTP/1.1 101", 12) || !memcmp(pc->status, "HTTP/1.0 101", 12)))
                pc->flow = FLOW_RAW;
}

/* Still the same preview, unexpired? (after a revocation or a replacement: no) */
/* preview_head_check's part past routing. */
static char *head_check_routed(struct pconn *pc, bool path_form) {
        pc->secure = !pc->path_form;
        _cleanup_free_ char *stripped = NULL;
        _cleanup_free_ char *qtok = preview_take_query_token(pc->rest, &stripped);
        _cleanup_free_ char *ctok = preview_cookie_token(pc);
        _cleanup_free_ char *head = preview_rewrite_head(pc, path_form, stripped, "https");
        /* what the app receives: one head, never a second request of the client's */
        size_t hl = strlen(head);
        if (hl < 4 || memmem(head, hl, "\r\n\r\n", 4) != head + hl - 4)
                abort();
        size_t off = pc->head_len;
        while (off < pc->got) {
                ssize_t k = preview_client_take(pc, (const uint8_t *) pc->head + off, pc->got - off);
                if (k <= 0)
                        break;
                off += (size_t) k;
        }
        preview_saw_answer(pc, (const uint8_t *) "HTTP/1.1 101 Switching", 22);
        return TAKE_PTR(head);
}

int preview_head_check(const uint8_t *buf, size_t n, const char *domain, bool path_form, char **ret_head) {
        struct pconn *pc = xnew0(struct pconn, 1);
        int st = 0;
        pc->fd = -1;
        pc->got = n < sizeof(pc->head) - 1 ? n : sizeof(pc->head) - 1;
        memcpy(pc->head, buf, pc->got);
        char *end = pc->got >= 4 ? memmem(pc->head, pc->got, "\r\n\r\n", 4) : NULL;
        if (!end)
                st = 431;
        else {
                pc->head_len = (size_t) (end - pc->head) + 4;
                if (preview_parse_head(pc) != 0 || preview_framing(pc) != 0)
                        st = 400;
                else if (!preview_route(pc, domain, path_form))
                        st = 404;
                else {
                        char *h = head_check_routed(pc, path_form);
                        if (ret_head)
                                *ret_head = h;
                        else
                                free(h);
                }
        }
        free(pc);
        return st;
}
