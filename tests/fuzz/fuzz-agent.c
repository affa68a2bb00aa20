/* The agent protocol codec (proto-json/pj_agent.c) both paddock-init and the host client use.
 * Input = a byte stream of frames (12-byte header + payload), as read off the socket.
 * Properties: any bytes are refused or accepted, never a crash or a read outside the input;
 * a header claiming more than PJ_AGENT_MAX_PAYLOAD is refused before anything is allocated;
 * an accepted message encodes, that encoding decodes again, and a second encoding is the same
 * bytes (one canonical form); every refusal carries a message. */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "pj_agent.h"

static void one(const struct pj_agent_header *h, const uint8_t *payload) {
        struct pj_agent_msg m = { 0 };
        /* Cleared: pj_agent leaves it as it is, so a refusal that fills nothing must read "" here,
         * not whatever the stack held (which passed or failed by chance). */
        struct err e = { 0 };
        if (pj_agent_msg_decode(h, payload, h->len, &m, &e) < 0) {
                FUZZ_ASSERT(e.message[0] && memchr(e.message, 0, sizeof(e.message)), "error without a message");
                return;
        }
        _cleanup_(pj_agent_buf_done) struct pj_agent_buf b = { 0 };
        _cleanup_(pj_agent_buf_done) struct pj_agent_buf b2 = { 0 };
        FUZZ_ASSERT(pj_agent_msg_encode(&m, &b, &e) == 0, "accepted %s does not encode: %s", pj_agent_type_name(h->type),
                    e.message);
        struct pj_agent_header h2;
        FUZZ_ASSERT(pj_agent_header_decode(b.p, &h2, &e) == 0, "own header refused: %s", e.message);
        FUZZ_ASSERT(h2.type == h->type && h2.id == h->id && h2.len == b.len - PJ_AGENT_HEADER_SIZE, "header changed");
        struct pj_agent_msg m2 = { 0 };
        FUZZ_ASSERT(pj_agent_msg_decode(&h2, b.p + PJ_AGENT_HEADER_SIZE, h2.len, &m2, &e) == 0, "own encoding refused: %s: %s",
                    e.field, e.message);
        FUZZ_ASSERT(pj_agent_msg_encode(&m2, &b2, &e) == 0, "second encode failed");
        FUZZ_ASSERT(b.len == b2.len && !memcmp(b.p, b2.p, b.len), "encoding not stable for %s", pj_agent_type_name(h->type));
        FUZZ_ASSERT(m2.n_argv == m.n_argv && m2.n_env == m.n_env && m2.n_entries == m.n_entries &&
                            m2.data_len == m.data_len && m2.f.present == m.f.present,
                    "fields changed in a round trip");
        pj_agent_msg_done(&m2);
        pj_agent_msg_done(&m);
        pj_agent_msg_done(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        size_t off = 0;
        while (size - off >= PJ_AGENT_HEADER_SIZE) {
                struct pj_agent_header h;
                struct err e = { 0 };
                if (pj_agent_header_decode(data + off, &h, &e) < 0) {
                        FUZZ_ASSERT(e.message[0], "header refusal without a message");
                        uint32_t claimed = (uint32_t) data[off] << 24 | (uint32_t) data[off + 1] << 16 |
                                           (uint32_t) data[off + 2] << 8 | data[off + 3];
                        FUZZ_ASSERT(claimed > PJ_AGENT_MAX_PAYLOAD || strcmp(e.field, "length"), "wrong culprit");
                        return 0;
                }
                off += PJ_AGENT_HEADER_SIZE;
                if (h.len > size - off)
                        return 0; /* truncated frame: a reader waits for more */
                /* the payload in its own buffer so ASan sees any read past it */
                uint8_t *p = xmalloc(h.len);
                memcpy(p, data + off, h.len);
                one(&h, p);
                free(p);
                off += h.len;
        }
        return 0;
}
