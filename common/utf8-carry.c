/* Streamed bytes as valid UTF-8 text (utf8-carry.h). */
#include <errno.h>
#include <string.h>

#include "utf8-carry.h"

static const char repl[] = "\xef\xbf\xbd";   /* U+FFFD */

static bool is_cont(uint8_t c) { return (c & 0xc0) == 0x80; }

size_t utf8_lead_len(uint8_t c) {
        return c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
}

int utf8_carry_append(struct utf8_carry *c, struct strbuf *out, const void *data_, size_t len, bool final) {
        const uint8_t *data = data_;
        size_t i = 0;
        int r = 0;
        /* Complete the carried sequence with continuation bytes only: any other byte ends it
         * (replaced) and is read below as the start of what follows. */
        if (c->len && len) {
                size_t need = utf8_lead_len(c->buf[0]);
                while (c->len < need && i < len && is_cont(data[i]))
                        c->buf[c->len++] = data[i++];
                if (c->len == need) {
                        bool ok = utf8_valid((const char *) c->buf, need);
                        r |= strbuf_append(out, ok ? (const char *) c->buf : repl, ok ? need : 3);
                        c->len = 0;
                } else if (i < len) {
                        r |= strbuf_append(out, repl, 3);
                        c->len = 0;
                }
                /* else: data ended inside the sequence, still carried */
        }
        size_t start = i;
        while (i < len) {
                uint8_t b = data[i];
                if (b < 0x80) {
                        i++;
                        continue;
                }
                size_t n = utf8_lead_len(b);
                if (n && i + n > len) {
                        /* Cut at the end of this chunk: carry it when what is there can still
                         * continue it; otherwise it is invalid already. */
                        size_t k = i + 1;
                        while (k < len && is_cont(data[k]))
                                k++;
                        if (k == len) {
                                r |= strbuf_append(out, data + start, i - start);
                                c->len = len - i;
                                memcpy(c->buf, data + i, c->len);
                                start = i = len;
                                break;
                        }
                }
                if (n == 0 || i + n > len || !utf8_valid((const char *) data + i, n)) {
                        r |= strbuf_append(out, data + start, i - start);
                        r |= strbuf_append(out, repl, 3);
                        start = ++i;
                        continue;
                }
                i += n;
        }
        r |= strbuf_append(out, data + start, i - start);
        if (final && c->len) {
                r |= strbuf_append(out, repl, 3);
                c->len = 0;
        }
        return r < 0 ? -ENOBUFS : 0;
}
