/* The Docker exec stream demultiplexer (common/docker.c docker_demux_feed): 8-byte
 * headers {type,0,0,0,size_be32} then payload, fed in pieces as recv() returns them.
 * Properties: never reads outside what it is given; the payload bytes and their types
 * do not depend on where the stream is cut (one call, byte by byte, and the cut points
 * the input chooses all agree, error included); every byte of a well-formed stream is
 * either header or delivered payload (NUL bytes included). The first input byte seeds the
 * cut points; the rest is the stream. */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "docker.h"
#include "fuzz.h"

struct out {
        uint8_t *buf;
        int *types;
        size_t len;
        int calls;
};

static int collect(int type, const uint8_t *data, size_t len, void *ud) {
        struct out *o = ud;
        FUZZ_ASSERT(type >= 0 && type <= 3, "type %d", type);
        FUZZ_ASSERT(len > 0, "empty payload call");
        o->buf = realloc(o->buf, o->len + len);
        o->types = realloc(o->types, (o->len + len) * sizeof(int));
        memcpy(o->buf + o->len, data, len);
        for (size_t i = 0; i < len; i++)
                o->types[o->len + i] = type;
        o->len += len;
        o->calls++;
        return 0;
}

/* Feeds the stream in pieces; piece sizes come from a small generator seeded by seed
 * (0 = one piece). Each piece is copied to its own heap block so ASan sees overreads. */
static int feed(const uint8_t *s, size_t n, unsigned seed, struct out *o) {
        struct docker_demux m = { 0 };
        size_t off = 0;
        unsigned x = seed * 2654435761u + 1;
        while (off < n) {
                size_t piece = n - off;
                if (seed) {
                        x = x * 1103515245u + 12345u;
                        piece = 1 + (x >> 16) % (seed == 1 ? 1 : 13);
                        if (piece > n - off)
                                piece = n - off;
                }
                uint8_t *copy = malloc(piece);
                memcpy(copy, s + off, piece);
                int r = docker_demux_feed(&m, copy, piece, collect, o);
                free(copy);
                if (r < 0)
                        return r;
                off += piece;
        }
        /* Where the stream stands at its end: 0 = between frames. */
        return m.hdr_have || m.remaining ? 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        if (size < 1)
                return 0;
        unsigned seed = data[0];
        const uint8_t *s = data + 1;
        size_t n = size - 1;
        struct out whole = { 0 }, bytes = { 0 }, cut = { 0 };

        int r1 = feed(s, n, 0, &whole);
        int r2 = feed(s, n, 1, &bytes);
        int r3 = feed(s, n, seed | 2, &cut);
        FUZZ_ASSERT(r1 == -EBADMSG || r1 == 0 || r1 == 1, "unexpected result %d", r1);
        FUZZ_ASSERT(r1 == r2 && r1 == r3, "results differ by cut: %d %d %d", r1, r2, r3);
        /* On a bad header the pieces before it are delivered the same way up to the error. */
        FUZZ_ASSERT(whole.len == bytes.len && whole.len == cut.len, "payload lengths differ: %zu %zu %zu", whole.len,
                    bytes.len, cut.len);
        FUZZ_ASSERT(!whole.len || (!memcmp(whole.buf, bytes.buf, whole.len) && !memcmp(whole.buf, cut.buf, whole.len)),
                    "payload bytes differ by cut");
        FUZZ_ASSERT(!whole.len || (!memcmp(whole.types, bytes.types, whole.len * sizeof(int)) &&
                                   !memcmp(whole.types, cut.types, whole.len * sizeof(int))),
                    "payload types differ by cut");
        if (r1 == 0) {
                /* Header + payload account for every byte: count the headers. */
                size_t off = 0, headers = 0;
                while (off + 8 <= n) {
                        uint32_t len = (uint32_t) s[off + 4] << 24 | (uint32_t) s[off + 5] << 16 |
                                       (uint32_t) s[off + 6] << 8 | s[off + 7];
                        off += 8 + len;
                        headers++;
                }
                FUZZ_ASSERT(off == n && whole.len + 8 * headers == n, "bytes lost: %zu payload, %zu headers, %zu in",
                            whole.len, headers, n);
        }
        free(whole.buf), free(whole.types), free(bytes.buf), free(bytes.types), free(cut.buf), free(cut.types);
        return 0;
}
