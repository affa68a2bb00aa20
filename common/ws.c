/* ws.c — RFC 6455 framing, the reader state machine, and the opening handshake. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <openssl/evp.h>

#include "cleanup.h"
#include "strutil.h"
#include "ws.h"

#define WS_DEFAULT_MAX_MESSAGE ((size_t) 16 << 20)
/* What ws_reader_feed accepts beyond one maximal frame: one receive buffer's worth. */
#define WS_FEED_SLACK ((size_t) 64 << 10)
#define WS_MAX_RESPONSE_HEAD ((size_t) 16 << 10)

static bool opcode_known(uint8_t op) {
        return op == WS_OP_CONT || op == WS_OP_TEXT || op == WS_OP_BINARY || op == WS_OP_CLOSE || op == WS_OP_PING ||
               op == WS_OP_PONG;
}

static bool opcode_control(uint8_t op) { return (op & 0x8) != 0; }

int ws_frame_header_parse(const uint8_t *buf, size_t n, struct ws_frame_header *ret) {
        if (n < 2)
                return 0;
        struct ws_frame_header h = {
                .fin = (buf[0] & 0x80) != 0,
                .rsv = (uint8_t) ((buf[0] >> 4) & 0x7),
                .opcode = (uint8_t) (buf[0] & 0x0f),
                .masked = (buf[1] & 0x80) != 0,
        };
        uint8_t len7 = buf[1] & 0x7f;
        size_t need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0) + (h.masked ? 4 : 0);
        if (n < need)
                return 0;
        size_t p = 2;
        if (len7 == 126) {
                h.payload_len = (uint64_t) buf[2] << 8 | buf[3];
                p += 2;
                if (h.payload_len < 126)
                        return -EPROTO;
        } else if (len7 == 127) {
                h.payload_len = 0;
                for (int i = 0; i < 8; i++)
                        h.payload_len = h.payload_len << 8 | buf[2 + i];
                p += 8;
                if (h.payload_len >> 63)
                        return -EPROTO;
                if (h.payload_len <= 0xffff)
                        return -EPROTO;
        } else
                h.payload_len = len7;
        if (h.masked) {
                memcpy(h.mask, buf + p, 4);
                p += 4;
        }
        h.header_len = p;
        *ret = h;
        return 1;
}

void ws_mask(uint8_t *data, size_t len, const uint8_t key[4], uint64_t offset) {
        for (size_t i = 0; i < len; i++)
                data[i] ^= key[(offset + i) & 3];
}

int ws_frame_encode_key(struct strbuf *out, bool fin, uint8_t opcode, const void *payload, size_t len,
                        const uint8_t *mask_key) {
        if (!opcode_known(opcode))
                return -EINVAL;
        if (opcode_control(opcode) && (len > WS_MAX_CONTROL_PAYLOAD || !fin))
                return -EINVAL;
        uint8_t h[WS_MAX_HEADER];
        size_t hl = 0;
        h[hl++] = (uint8_t) ((fin ? 0x80 : 0) | opcode);
        uint8_t mbit = mask_key ? 0x80 : 0;
        if (len < 126)
                h[hl++] = (uint8_t) (mbit | len);
        else if (len <= 0xffff) {
                h[hl++] = mbit | 126;
                h[hl++] = (uint8_t) (len >> 8);
                h[hl++] = (uint8_t) len;
        } else {
                h[hl++] = mbit | 127;
                for (int i = 7; i >= 0; i--)
                        h[hl++] = (uint8_t) ((uint64_t) len >> (8 * i));
        }
        if (mask_key) {
                memcpy(h + hl, mask_key, 4);
                hl += 4;
        }
        if (out->max && (out->len + hl + len < out->len || out->len + hl + len > out->max))
                return -ENOBUFS;
        size_t start = out->len;
        int r = strbuf_append(out, h, hl);
        if (r >= 0 && len > 0)
                r = strbuf_append(out, payload, len);
        if (r < 0)
                return r;
        if (mask_key)
                ws_mask((uint8_t *) out->buf + start + hl, len, mask_key, 0);
        return 0;
}

int ws_frame_encode(struct strbuf *out, enum ws_role role, bool fin, uint8_t opcode, const void *payload, size_t len) {
        uint8_t key[4];
        if (role == WS_ROLE_CLIENT) {
                random_fill(key, sizeof(key));
                return ws_frame_encode_key(out, fin, opcode, payload, len, key);
        }
        return ws_frame_encode_key(out, fin, opcode, payload, len, NULL);
}

bool ws_close_code_valid(uint16_t code) {
        if (code >= 3000 && code <= 4999)
                return true;   /* registered (3xxx) and private (4xxx) use */
        switch (code) {
        case 1000: case 1001: case 1002: case 1003:
        case 1007: case 1008: case 1009: case 1010: case 1011:
        case 1012: case 1013: case 1014:   /* IANA registry: restart, try again later, bad gateway */
                return true;
        default:
                return false;
        }
}

int ws_close_encode(struct strbuf *out, enum ws_role role, uint16_t code, const char *reason) {
        uint8_t p[WS_MAX_CONTROL_PAYLOAD];
        size_t n = 0;
        if (code != 0) {
                if (!ws_close_code_valid(code))
                        return -EINVAL;
                p[n++] = (uint8_t) (code >> 8);
                p[n++] = (uint8_t) code;
                if (reason && *reason) {
                        char cut[WS_MAX_CONTROL_PAYLOAD - 2 + 1];
                        size_t k = utf8_copy_trunc(cut, sizeof(cut), reason);
                        memcpy(p + n, cut, k);
                        n += k;
                }
        }
        return ws_frame_encode(out, role, true, WS_OP_CLOSE, p, n);
}

int ws_close_parse(const uint8_t *payload, size_t len, uint16_t *ret_code, char **ret_reason) {
        uint16_t code = WS_CLOSE_NO_STATUS;
        if (len == 1 || len > WS_MAX_CONTROL_PAYLOAD)
                return -EPROTO;
        if (len >= 2) {
                code = (uint16_t) (payload[0] << 8 | payload[1]);
                if (!ws_close_code_valid(code))
                        return -EPROTO;
                if (!utf8_valid((const char *) payload + 2, len - 2))
                        return -EPROTO;
        }
        if (ret_reason)
                *ret_reason = len > 2 ? xstrndup((const char *) payload + 2, len - 2) : xstrdup("");
        if (ret_code)
                *ret_code = code;
        return 0;
}

void ws_message_done(struct ws_message *m) {
        if (!m)
                return;
        free(m->data);
        *m = (struct ws_message) { 0 };
}

void ws_reader_init(struct ws_reader *r, enum ws_role role, size_t max_message) {
        *r = (struct ws_reader) {
                .role = role,
                .max_message = max_message ? max_message : WS_DEFAULT_MAX_MESSAGE,
        };
}

void ws_reader_done(struct ws_reader *r) {
        if (!r)
                return;
        free_many(r->in, r->msg);
        r->in = r->msg = NULL;
        r->in_len = r->in_off = r->in_cap = r->msg_len = r->msg_cap = 0;
        r->msg_opcode = 0;
}

static size_t max_frame(const struct ws_reader *r) {
        return r->max_message > WS_MAX_CONTROL_PAYLOAD ? r->max_message : WS_MAX_CONTROL_PAYLOAD;
}

int ws_reader_feed(struct ws_reader *r, const void *data, size_t len) {
        if (len == 0)
                return 0;
        if (r->in_off) {
                memmove(r->in, r->in + r->in_off, r->in_len - r->in_off);
                r->in_len -= r->in_off;
                r->in_off = 0;
        }
        size_t cap = max_frame(r) + WS_MAX_HEADER + WS_FEED_SLACK;
        if (r->in_len + len < r->in_len || r->in_len + len > cap)
                return -ENOBUFS;
        if (r->in_len + len > r->in_cap) {
                size_t n = r->in_cap ? r->in_cap : 4096;
                while (n < r->in_len + len)
                        n *= 2;
                if (n > cap)
                        n = cap;
                r->in = xrealloc(r->in, n);
                r->in_cap = n;
        }
        memcpy(r->in + r->in_len, data, len);
        r->in_len += len;
        return 0;
}

static int reader_fail(struct ws_reader *r, int err, uint16_t code, const char *why) {
        r->failed = true;
        r->error_code = code;
        strscpy(r->error, why, sizeof(r->error));
        return err;
}

static int reader_err(const struct ws_reader *r) {
        switch (r->error_code) {
        case WS_CLOSE_TOO_BIG:
                return -EMSGSIZE;
        case WS_CLOSE_INVALID_PAYLOAD:
                return -EILSEQ;
        default:
                return -EPROTO;
        }
}

uint16_t ws_reader_error(const struct ws_reader *r, const char **ret_reason) {
        if (ret_reason)
                *ret_reason = r->failed ? r->error : "";
        return r->failed ? r->error_code : 0;
}

/* Consumed input is dropped lazily (by the next feed), so many small frames in
 * one buffer cost no repeated moves. */
static void consume(struct ws_reader *r, size_t n) {
        r->in_off += n;
        if (r->in_off == r->in_len)
                r->in_off = r->in_len = 0;
}

static uint8_t *dup_bytes(const uint8_t *p, size_t n) {
        uint8_t *d = xmalloc(n + 1);
        if (n)
                memcpy(d, p, n);
        d[n] = 0;
        return d;
}

/* One frame: 1 message out, 0 need more, 2 consumed a fragment (go on), < 0 failed. */
static int reader_step(struct ws_reader *r, struct ws_message *ret) {
        struct ws_frame_header h;
        const size_t avail = r->in_len - r->in_off;
        int k = ws_frame_header_parse(r->in + r->in_off, avail, &h);
        if (k < 0)
                return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "bad frame length encoding");
        if (k == 0)
                return 0;
        if (h.rsv)
                return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "reserved bits set");
        if (!opcode_known(h.opcode))
                return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "unknown opcode");
        if (r->role == WS_ROLE_SERVER && !h.masked)
                return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "client frame not masked");
        if (r->role == WS_ROLE_CLIENT && h.masked)
                return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "server frame masked");
        bool control = opcode_control(h.opcode);
        if (control) {
                if (!h.fin)
                        return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "fragmented control frame");
                if (h.payload_len > WS_MAX_CONTROL_PAYLOAD)
                        return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "control frame over 125 bytes");
        } else {
                if (h.opcode == WS_OP_CONT && !r->msg_opcode)
                        return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "continuation without a message");
                if (h.opcode != WS_OP_CONT && r->msg_opcode)
                        return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "new message inside a fragmented one");
                if (h.payload_len > r->max_message || r->msg_len + h.payload_len > r->max_message)
                        return reader_fail(r, -EMSGSIZE, WS_CLOSE_TOO_BIG, "message too big");
        }
        size_t plen = (size_t) h.payload_len;
        if (avail - h.header_len < plen)
                return 0;
        uint8_t *payload = r->in + r->in_off + h.header_len;
        if (h.masked)
                ws_mask(payload, plen, h.mask, 0);

        if (control) {
                if (h.opcode == WS_OP_CLOSE && ws_close_parse(payload, plen, NULL, NULL) < 0)
                        return reader_fail(r, -EPROTO, WS_CLOSE_PROTOCOL_ERROR, "bad close frame");
                *ret = (struct ws_message) { .opcode = h.opcode, .data = dup_bytes(payload, plen), .len = plen };
                consume(r, h.header_len + plen);
                return 1;
        }

        uint8_t opcode = h.opcode == WS_OP_CONT ? r->msg_opcode : h.opcode;
        uint8_t *data;
        size_t len;
        if (h.fin && !r->msg_opcode) {
                data = dup_bytes(payload, plen);
                len = plen;
        } else {
                if (r->msg_len + plen + 1 > r->msg_cap) {
                        size_t n = r->msg_cap ? r->msg_cap : 4096;
                        while (n < r->msg_len + plen + 1)
                                n *= 2;
                        r->msg = xrealloc(r->msg, n);
                        r->msg_cap = n;
                }
                if (plen)
                        memcpy(r->msg + r->msg_len, payload, plen);
                r->msg_len += plen;
                r->msg_opcode = opcode;
                consume(r, h.header_len + plen);
                if (!h.fin)
                        return 2;
                data = xrealloc(TAKE_PTR(r->msg), r->msg_len + 1);
                data[r->msg_len] = 0;
                len = r->msg_len;
                r->msg_len = r->msg_cap = 0;
                r->msg_opcode = 0;
                plen = 0;
                h.header_len = 0;
        }
        consume(r, h.header_len + plen);
        if (opcode == WS_OP_TEXT && !utf8_valid((const char *) data, len)) {
                free(data);
                return reader_fail(r, -EILSEQ, WS_CLOSE_INVALID_PAYLOAD, "text message is not UTF-8");
        }
        *ret = (struct ws_message) { .opcode = opcode, .data = data, .len = len };
        return 1;
}

int ws_reader_next(struct ws_reader *r, struct ws_message *ret) {
        if (r->failed)
                return reader_err(r);
        int k;
        while ((k = reader_step(r, ret)) == 2)
                ;
        return k;
}

/* ---- handshake ---- */

void ws_key_new(char out[WS_KEY_LEN + 1]) {
        uint8_t raw[16];
        random_fill(raw, sizeof(raw));
        _cleanup_free_ char *b = base64_encode(raw, sizeof(raw), NULL);
        memcpy(out, b, WS_KEY_LEN + 1);
}

bool ws_key_valid(const char *key) {
        if (!key || strlen(key) != WS_KEY_LEN)
                return false;
        _cleanup_free_ uint8_t *raw = NULL;
        size_t n = 0;
        return base64_decode(key, WS_KEY_LEN, &raw, &n) == 0 && n == 16;
}

void ws_accept_for_key(const char *key, char out[WS_ACCEPT_LEN + 1]) {
        _cleanup_free_ char *s = xasprintf("%s%s", key, WS_GUID);
        uint8_t md[EVP_MAX_MD_SIZE];
        unsigned mdlen = 0;
        if (EVP_Digest(s, strlen(s), md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
                abort();
        _cleanup_free_ char *b = base64_encode(md, mdlen, NULL);
        memcpy(out, b, WS_ACCEPT_LEN + 1);
}

static bool has_crlf(const char *s) { return s && strpbrk(s, "\r\n"); }

int ws_client_request(const char *host, const char *path_and_query, const char *key,
                      const char *const *extra_headers, char **ret) {
        if (!host || !path_and_query || !key || path_and_query[0] != '/' || has_crlf(host) ||
            has_crlf(path_and_query) || has_crlf(key))
                return -EINVAL;
        for (const char *const *h = extra_headers; h && *h; h++)
                if (has_crlf(*h))
                        return -EINVAL;
        struct strbuf b = STRBUF_INIT(0);
        strbuf_printf(&b,
                      "GET %s HTTP/1.1\r\n"
                      "Host: %s\r\n"
                      "Upgrade: websocket\r\n"
                      "Connection: Upgrade\r\n"
                      "Sec-WebSocket-Key: %s\r\n"
                      "Sec-WebSocket-Version: 13\r\n",
                      path_and_query, host, key);
        for (const char *const *h = extra_headers; h && *h; h++)
                strbuf_printf(&b, "%s\r\n", *h);
        strbuf_append(&b, "\r\n", 2);
        *ret = strbuf_steal(&b);
        return 0;
}

/* Does the comma-separated token list v (length n) hold token, case-insensitively? */
static bool list_has_token(const char *v, size_t n, const char *token) {
        size_t tl = strlen(token);
        size_t i = 0;
        while (i < n) {
                while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
                        i++;
                size_t s = i;
                while (i < n && v[i] != ',')
                        i++;
                size_t e = i;
                while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t'))
                        e--;
                if (e - s == tl && strncasecmp(v + s, token, tl) == 0)
                        return true;
        }
        return false;
}

int ws_client_parse_response(const char *buf, size_t n, const char *key, int *ret_status, size_t *ret_head_len) {
        const char *end = memmem(buf, n < WS_MAX_RESPONSE_HEAD ? n : WS_MAX_RESPONSE_HEAD, "\r\n\r\n", 4);
        if (!end)
                return n < WS_MAX_RESPONSE_HEAD ? -EAGAIN : -EPROTO;
        size_t head_len = (size_t) (end - buf) + 4;
        /* Status line: HTTP/1.x SP 3DIGIT [SP reason] CRLF */
        if (head_len < 14 || strncmp(buf, "HTTP/1.", 7) != 0 || (buf[7] != '0' && buf[7] != '1') || buf[8] != ' ')
                return -EPROTO;
        for (int i = 9; i < 12; i++)
                if (buf[i] < '0' || buf[i] > '9')
                        return -EPROTO;
        if (buf[12] != ' ' && buf[12] != '\r')
                return -EPROTO;
        int status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');

        bool upgrade = false, connection = false, accept_ok = false;
        char want[WS_ACCEPT_LEN + 1];
        ws_accept_for_key(key, want);
        const char *p = memchr(buf, '\n', head_len) + 1;
        const char *stop = buf + head_len - 2;   /* the final CRLF */
        while (p < stop) {
                const char *eol = memmem(p, (size_t) (stop - p) + 2, "\r\n", 2);
                if (!eol)
                        return -EPROTO;
                const char *colon = memchr(p, ':', (size_t) (eol - p));
                if (!colon || colon == p)
                        return -EPROTO;
                size_t nl = (size_t) (colon - p);
                const char *v = colon + 1;
                while (v < eol && (*v == ' ' || *v == '\t'))
                        v++;
                const char *ve = eol;
                while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
                        ve--;
                size_t vl = (size_t) (ve - v);
                if (nl == 7 && strncasecmp(p, "Upgrade", 7) == 0)
                        upgrade = list_has_token(v, vl, "websocket");
                else if (nl == 10 && strncasecmp(p, "Connection", 10) == 0)
                        connection = list_has_token(v, vl, "upgrade");
                else if (nl == 20 && strncasecmp(p, "Sec-WebSocket-Accept", 20) == 0)
                        accept_ok = vl == WS_ACCEPT_LEN && memcmp(v, want, WS_ACCEPT_LEN) == 0;
                p = eol + 2;
        }
        if (status == 101 && !(upgrade && connection && accept_ok))
                return -EPROTO;
        *ret_status = status;
        *ret_head_len = head_len;
        return 0;
}
