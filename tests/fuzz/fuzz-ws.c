/* RFC 6455 framing in common/ws.c: what the Nomad driver reads from a Nomad server and
 * what the stand-in reads from a client. Properties: the reader never returns more
 * than its cap, a text message is always UTF-8, a failure is sticky and carries a
 * close code the peer may receive; the same input gives the same messages whether fed
 * at once or in pieces; encode -> read gives back the payload for both roles and any
 * fragmentation; a parsed close payload re-encodes to the same bytes. */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "strutil.h"
#include "ws.h"

#define CAP 4096

/* Reads everything; returns a digest-like summary (count, total bytes, final result). */
static void read_all(enum ws_role role, const uint8_t *data, size_t size, size_t piece, size_t *ret_count,
                     size_t *ret_bytes, int *ret_result) {
        struct ws_reader r;
        ws_reader_init(&r, role, CAP);
        size_t count = 0, bytes = 0;
        int k = 0;
        for (size_t off = 0; off < size && k >= 0; off += piece) {
                size_t n = size - off < piece ? size - off : piece;
                k = ws_reader_feed(&r, data + off, n);
                if (k < 0)
                        break;
                struct ws_message m;
                while ((k = ws_reader_next(&r, &m)) == 1) {
                        FUZZ_ASSERT(m.len <= CAP || (m.opcode & 8), "message of %zu over the cap", m.len);
                        FUZZ_ASSERT(m.data[m.len] == 0, "no NUL past the message");
                        if (m.opcode == WS_OP_TEXT)
                                FUZZ_ASSERT(utf8_valid((char *) m.data, m.len), "text message not UTF-8");
                        if (m.opcode & 8)
                                FUZZ_ASSERT(m.len <= 125, "control frame of %zu", m.len);
                        if (m.opcode == WS_OP_CLOSE) {
                                uint16_t code;
                                _cleanup_free_ char *reason = NULL;
                                FUZZ_ASSERT(ws_close_parse(m.data, m.len, &code, &reason) == 0, "close passed the reader");
                                if (m.len >= 2 && strlen(reason) == m.len - 2) {   /* a NUL in the reason ends a C string */
                                        struct strbuf b = STRBUF_INIT(0);
                                        FUZZ_ASSERT(ws_close_encode(&b, WS_ROLE_SERVER, code, reason) == 0, "re-encode");
                                        FUZZ_ASSERT(b.len == 2 + m.len && !memcmp(b.buf + 2, m.data, m.len), "close round trip");
                                        strbuf_done(&b);
                                }
                        }
                        count++;
                        bytes += m.len;
                        ws_message_done(&m);
                }
        }
        if (k < 0 && k != -ENOBUFS) {
                FUZZ_ASSERT(k == -EPROTO || k == -EMSGSIZE || k == -EILSEQ, "reader returned %d", k);
                struct ws_message m;
                FUZZ_ASSERT(ws_reader_next(&r, &m) == k, "failure not sticky");
                const char *why = NULL;
                uint16_t code = ws_reader_error(&r, &why);
                FUZZ_ASSERT(ws_close_code_valid(code) && why && *why, "close code %u", code);
        }
        ws_reader_done(&r);
        *ret_count = count;
        *ret_bytes = bytes;
        *ret_result = k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        /* Raw bytes to both roles, at once and in pieces. */
        for (int role = 0; role < 2; role++) {
                size_t c1, b1, c2, b2;
                int r1, r2;
                read_all(role, data, size, size ? size : 1, &c1, &b1, &r1);
                read_all(role, data, size, 7, &c2, &b2, &r2);
                if (r1 != -ENOBUFS && r2 != -ENOBUFS)
                        FUZZ_ASSERT(c1 == c2 && b1 == b2 && (r1 < 0) == (r2 < 0), "pieces change the result");
        }

        /* Round trip: the input as one binary message cut into fragments at every byte
         * whose value is below 16, through both roles. */
        if (size > 0 && size <= CAP) {
                for (int role = 0; role < 2; role++) {
                        struct strbuf w = STRBUF_INIT(0);
                        size_t start = 0;
                        bool first = true;
                        for (size_t i = 0; i <= size; i++) {
                                if (i < size && data[i] >= 16)
                                        continue;
                                bool fin = i == size;
                                FUZZ_ASSERT(ws_frame_encode(&w, role, fin, first ? WS_OP_BINARY : WS_OP_CONT, data + start,
                                                            (fin ? size : i) - start) == 0, "encode");
                                first = false;
                                start = i;
                        }
                        struct ws_reader r;
                        ws_reader_init(&r, role == WS_ROLE_CLIENT ? WS_ROLE_SERVER : WS_ROLE_CLIENT, CAP);
                        FUZZ_ASSERT(ws_reader_feed(&r, w.buf, w.len) == 0, "feed");
                        struct ws_message m;
                        FUZZ_ASSERT(ws_reader_next(&r, &m) == 1, "no message");
                        FUZZ_ASSERT(m.opcode == WS_OP_BINARY && m.len == size && !memcmp(m.data, data, size), "round trip");
                        ws_message_done(&m);
                        FUZZ_ASSERT(ws_reader_next(&r, &m) == 0, "extra message");
                        ws_reader_done(&r);
                        strbuf_done(&w);
                }
        }
        return 0;
}
