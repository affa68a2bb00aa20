/* Unit tests for common/ws.c: RFC 6455 framing both ways, the reader's rules, the handshake. */
#include <errno.h>
#include <stdlib.h>

#include "cleanup.h"
#include "strutil.h"
#include "testlib.h"
#include "ws.h"

static void strbuf_donep(struct strbuf *b) { strbuf_done(b); }
#define _cleanup_sb_ _cleanup_(strbuf_donep)
static void reader_donep(struct ws_reader *r) { ws_reader_done(r); }
#define _cleanup_reader_ _cleanup_(reader_donep)

#define ASSERT_BYTES(buf, len, want)                                                              \
        do {                                                                                      \
                static const uint8_t _w[] = want;                                                 \
                ASSERT_EQ((len), sizeof(_w));                                                     \
                ASSERT_TRUE(memcmp((buf), _w, sizeof(_w)) == 0);                                  \
        } while (0)
#define B(...) { __VA_ARGS__ }

/* Feeds bytes one at a time and expects exactly one message, of opcode and payload. */
static void expect_one(enum ws_role role, const void *wire, size_t n, uint8_t opcode, const void *payload, size_t plen,
                       size_t max) {
        _cleanup_reader_ struct ws_reader r;
        ws_reader_init(&r, role, max);
        struct ws_message m = { 0 };
        int got = 0;
        for (size_t i = 0; i < n; i++) {
                ASSERT_OK(ws_reader_feed(&r, (const uint8_t *) wire + i, 1));
                int k = ws_reader_next(&r, &m);
                ASSERT_OK(k);
                if (k == 1) {
                        ASSERT_EQ(got, 0);
                        ASSERT_EQ(i, n - 1);   /* a message appears only with its last byte */
                        got = 1;
                }
        }
        ASSERT_EQ(got, 1);
        ASSERT_EQ(m.opcode, opcode);
        ASSERT_EQ(m.len, plen);
        ASSERT_TRUE(plen == 0 || memcmp(m.data, payload, plen) == 0);
        ASSERT_EQ(m.data[m.len], 0);
        ws_message_done(&m);
        ASSERT_EQ(ws_reader_next(&r, &m), 0);
}

/* Feeds all of wire at once and returns what the first failing next() says (0 if none fails). */
static int first_error(enum ws_role role, const void *wire, size_t n, size_t max, uint16_t *ret_code) {
        _cleanup_reader_ struct ws_reader r;
        ws_reader_init(&r, role, max);
        int k = ws_reader_feed(&r, wire, n);
        if (k < 0)
                return k;
        struct ws_message m = { 0 };
        while ((k = ws_reader_next(&r, &m)) == 1)
                ws_message_done(&m);
        if (k < 0) {
                /* Sticky: the reader keeps failing the same way. */
                ASSERT_EQ(ws_reader_next(&r, &m), k);
                *ret_code = ws_reader_error(&r, NULL);
        }
        return k;
}

TEST(rfc_examples_encode) {
        /* RFC 6455 5.7. */
        _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_TEXT, "Hello", 5));
        ASSERT_BYTES(b.buf, b.len, B(0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f));
        strbuf_reset(&b);
        static const uint8_t key[4] = { 0x37, 0xfa, 0x21, 0x3d };
        ASSERT_OK(ws_frame_encode_key(&b, true, WS_OP_TEXT, "Hello", 5, key));
        ASSERT_BYTES(b.buf, b.len, B(0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58));
        strbuf_reset(&b);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, false, WS_OP_TEXT, "Hel", 3));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_CONT, "lo", 2));
        ASSERT_BYTES(b.buf, b.len, B(0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f));
        strbuf_reset(&b);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_PING, "Hello", 5));
        ASSERT_BYTES(b.buf, b.len, B(0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f));
}

TEST(rfc_examples_decode) {
        static const uint8_t unmasked[] = { 0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f };
        static const uint8_t masked[] = { 0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58 };
        static const uint8_t frag[] = { 0x01, 0x03, 0x48, 0x65, 0x6c, 0x80, 0x02, 0x6c, 0x6f };
        static const uint8_t pong[] = { 0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58 };
        expect_one(WS_ROLE_CLIENT, unmasked, sizeof(unmasked), WS_OP_TEXT, "Hello", 5, 0);
        expect_one(WS_ROLE_SERVER, masked, sizeof(masked), WS_OP_TEXT, "Hello", 5, 0);
        expect_one(WS_ROLE_CLIENT, frag, sizeof(frag), WS_OP_TEXT, "Hello", 5, 0);
        expect_one(WS_ROLE_SERVER, pong, sizeof(pong), WS_OP_PONG, "Hello", 5, 0);
}

TEST(masking_both_ways) {
        /* A client masks with a fresh key each frame; the server reader unmasks. */
        _cleanup_sb_ struct strbuf a = STRBUF_INIT(0), b = STRBUF_INIT(0);
        const char *msg = "the same payload twice";
        size_t n = strlen(msg);
        ASSERT_OK(ws_frame_encode(&a, WS_ROLE_CLIENT, true, WS_OP_BINARY, msg, n));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, true, WS_OP_BINARY, msg, n));
        ASSERT_EQ(a.len, 2 + 4 + n);
        ASSERT_TRUE((uint8_t) a.buf[1] & 0x80);
        ASSERT_TRUE(memcmp(a.buf + 2, b.buf + 2, 4) != 0);          /* keys differ (2^-32 to collide) */
        ASSERT_TRUE(memcmp(a.buf + 6, msg, n) != 0);                 /* payload not in clear */
        expect_one(WS_ROLE_SERVER, a.buf, a.len, WS_OP_BINARY, msg, n, 0);
        expect_one(WS_ROLE_SERVER, b.buf, b.len, WS_OP_BINARY, msg, n, 0);
        /* A server never masks; the client reader reads it as is. */
        strbuf_reset(&a);
        ASSERT_OK(ws_frame_encode(&a, WS_ROLE_SERVER, true, WS_OP_BINARY, msg, n));
        ASSERT_EQ(a.len, 2 + n);
        ASSERT_FALSE((uint8_t) a.buf[1] & 0x80);
        expect_one(WS_ROLE_CLIENT, a.buf, a.len, WS_OP_BINARY, msg, n, 0);

        /* ws_mask in pieces equals ws_mask at once. */
        uint8_t x[11], y[11];
        static const uint8_t key[4] = { 1, 2, 3, 4 };
        for (int i = 0; i < 11; i++)
                x[i] = y[i] = (uint8_t) (i * 7);
        ws_mask(x, 11, key, 0);
        ws_mask(y, 5, key, 0);
        ws_mask(y + 5, 6, key, 5);
        ASSERT_TRUE(memcmp(x, y, 11) == 0);
}

TEST(masking_rule_enforced) {
        uint16_t code = 0;
        static const uint8_t unmasked[] = { 0x81, 0x02, 'h', 'i' };
        static const uint8_t masked[] = { 0x81, 0x82, 0, 0, 0, 0, 'h', 'i' };
        ASSERT_EQ(first_error(WS_ROLE_SERVER, unmasked, sizeof(unmasked), 0, &code), -EPROTO);
        ASSERT_EQ(code, WS_CLOSE_PROTOCOL_ERROR);
        code = 0;
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, masked, sizeof(masked), 0, &code), -EPROTO);
        ASSERT_EQ(code, WS_CLOSE_PROTOCOL_ERROR);
        /* ...and the same bytes are fine for the other role. */
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, unmasked, sizeof(unmasked), 0, &code), 0);
        ASSERT_EQ(first_error(WS_ROLE_SERVER, masked, sizeof(masked), 0, &code), 0);
}

static void length_round_trip(size_t n, size_t want_header, uint8_t want_len7) {
        _cleanup_free_ uint8_t *p = xmalloc(n);
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t) (i * 31 + 7);
        for (int role = 0; role < 2; role++) {
                _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
                ASSERT_OK(ws_frame_encode(&b, role, true, WS_OP_BINARY, p, n));
                size_t hl = want_header + (role == WS_ROLE_CLIENT ? 4 : 0);
                ASSERT_EQ(b.len, hl + n);
                ASSERT_EQ((uint8_t) b.buf[1] & 0x7f, want_len7);
                struct ws_frame_header h;
                ASSERT_EQ(ws_frame_header_parse((uint8_t *) b.buf, b.len, &h), 1);
                ASSERT_EQ(h.payload_len, n);
                ASSERT_EQ(h.header_len, hl);
                /* Not enough bytes for the header yet -> 0. */
                ASSERT_EQ(ws_frame_header_parse((uint8_t *) b.buf, hl - 1, &h), 0);

                _cleanup_reader_ struct ws_reader r;
                ws_reader_init(&r, role == WS_ROLE_CLIENT ? WS_ROLE_SERVER : WS_ROLE_CLIENT, 0);
                struct ws_message m = { 0 };
                /* In two pieces: the header plus a part, then the rest. */
                size_t cut = hl + n / 2;
                ASSERT_OK(ws_reader_feed(&r, b.buf, cut));
                if (n > 0)
                        ASSERT_EQ(ws_reader_next(&r, &m), 0);
                ASSERT_OK(ws_reader_feed(&r, b.buf + cut, b.len - cut));
                ASSERT_EQ(ws_reader_next(&r, &m), 1);
                ASSERT_EQ(m.len, n);
                ASSERT_TRUE(memcmp(m.data, p, n) == 0);
                ws_message_done(&m);
        }
}

TEST(lengths_7_16_64_bit) {
        length_round_trip(0, 2, 0);
        length_round_trip(125, 2, 125);
        length_round_trip(126, 4, 126);
        length_round_trip(65535, 4, 126);
        length_round_trip(65536, 10, 127);
        length_round_trip(300000, 10, 127);
}

TEST(lengths_not_minimal_or_huge_refused) {
        struct ws_frame_header h;
        static const uint8_t len16_small[] = { 0x82, 126, 0x00, 0x7d };                    /* 125 in 16 bits */
        static const uint8_t len64_small[] = { 0x82, 127, 0, 0, 0, 0, 0, 0, 0xff, 0xff };  /* 65535 in 64 bits */
        static const uint8_t len64_top[] = { 0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0 };
        ASSERT_EQ(ws_frame_header_parse(len16_small, sizeof(len16_small), &h), -EPROTO);
        ASSERT_EQ(ws_frame_header_parse(len64_small, sizeof(len64_small), &h), -EPROTO);
        ASSERT_EQ(ws_frame_header_parse(len64_top, sizeof(len64_top), &h), -EPROTO);
        uint16_t code = 0;
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, len64_top, sizeof(len64_top), 0, &code), -EPROTO);
        ASSERT_EQ(code, WS_CLOSE_PROTOCOL_ERROR);
        /* A 64-bit length over the cap is refused from its header alone. */
        static const uint8_t len64_big[] = { 0x82, 127, 0, 0, 0, 1, 0, 0, 0, 0 };   /* 4 GiB */
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, len64_big, sizeof(len64_big), 0, &code), -EMSGSIZE);
        ASSERT_EQ(code, WS_CLOSE_TOO_BIG);
}

TEST(fragmented_with_control_frames_between) {
        /* "Hel" + ping + "lo " + pong + "world" as a client sends it (masked). */
        _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, false, WS_OP_TEXT, "Hel", 3));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, true, WS_OP_PING, "p1", 2));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, false, WS_OP_CONT, "lo ", 3));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, false, WS_OP_CONT, NULL, 0));   /* empty fragment */
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, true, WS_OP_PONG, NULL, 0));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, true, WS_OP_CONT, "world", 5));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_CLIENT, true, WS_OP_BINARY, "\x00\xff", 2));

        _cleanup_reader_ struct ws_reader r;
        ws_reader_init(&r, WS_ROLE_SERVER, 64);
        struct ws_message m[8] = { 0 };
        int n = 0;
        for (size_t i = 0; i < b.len; i++) {
                ASSERT_OK(ws_reader_feed(&r, b.buf + i, 1));
                int k;
                while ((k = ws_reader_next(&r, &m[n])) == 1)
                        n++;
                ASSERT_OK(k);
        }
        ASSERT_EQ(n, 4);
        ASSERT_EQ(m[0].opcode, WS_OP_PING);
        ASSERT_STREQ((char *) m[0].data, "p1");
        ASSERT_EQ(m[1].opcode, WS_OP_PONG);
        ASSERT_EQ(m[1].len, 0);
        ASSERT_EQ(m[2].opcode, WS_OP_TEXT);
        ASSERT_STREQ((char *) m[2].data, "Hello world");
        ASSERT_EQ(m[3].opcode, WS_OP_BINARY);
        ASSERT_EQ(m[3].len, 2);
        ASSERT_EQ(m[3].data[1], 0xff);
        for (int i = 0; i < n; i++)
                ws_message_done(&m[i]);
}

TEST(many_frames_in_one_feed) {
        /* 10000 one-byte fragments of one message, fed at once. */
        _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, false, WS_OP_BINARY, "a", 1));
        for (int i = 1; i < 9999; i++)
                ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, false, WS_OP_CONT, "a", 1));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_CONT, "b", 1));
        _cleanup_reader_ struct ws_reader r;
        ws_reader_init(&r, WS_ROLE_CLIENT, 10000);
        ASSERT_OK(ws_reader_feed(&r, b.buf, b.len));
        struct ws_message m = { 0 };
        ASSERT_EQ(ws_reader_next(&r, &m), 1);
        ASSERT_EQ(m.len, 10000);
        ASSERT_EQ(m.data[9999], 'b');
        ws_message_done(&m);
        ASSERT_EQ(ws_reader_next(&r, &m), 0);
}

TEST(message_size_cap) {
        uint16_t code = 0;
        _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
        char p[100];
        memset(p, 'x', sizeof(p));
        /* Exactly the cap is fine. */
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_TEXT, p, 100));
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, b.buf, b.len, 100, &code), 0);
        /* One frame over the cap. */
        strbuf_reset(&b);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_TEXT, p, 100));
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, b.buf, 2, 99, &code), -EMSGSIZE);   /* header alone */
        ASSERT_EQ(code, WS_CLOSE_TOO_BIG);
        /* Fragments that together pass the cap. */
        strbuf_reset(&b);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, false, WS_OP_TEXT, p, 60));
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_CONT, p, 41));
        code = 0;
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, b.buf, b.len, 100, &code), -EMSGSIZE);
        ASSERT_EQ(code, WS_CLOSE_TOO_BIG);
        /* Control frames are not held to a small cap (they are at most 125 bytes). */
        strbuf_reset(&b);
        ASSERT_OK(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_PING, p, 100));
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, b.buf, b.len, 10, &code), 0);
        /* The reader does not buffer without bound. */
        _cleanup_reader_ struct ws_reader r;
        ws_reader_init(&r, WS_ROLE_CLIENT, 1000);
        _cleanup_free_ char *big = xcalloc(1, 1 << 20);
        ASSERT_EQ(ws_reader_feed(&r, big, 1 << 20), -ENOBUFS);
}

TEST(malformed_frames) {
        static const struct { const char *what; uint8_t wire[8]; size_t n; enum ws_role role; int err; uint16_t code; } c[] = {
                { "RSV1", { 0xc1, 0x00 }, 2, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "RSV3", { 0x91, 0x00 }, 2, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "opcode 3", { 0x83, 0x00 }, 2, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "opcode 0xB", { 0x8b, 0x00 }, 2, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "fragmented ping", { 0x09, 0x00 }, 2, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "ping of 126", { 0x89, 126, 0x00, 126 }, 4, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "continuation first", { 0x80, 0x00 }, 2, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "text inside fragmented", { 0x01, 0x00, 0x81, 0x00 }, 4, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "close of 1 byte", { 0x88, 0x01, 0x03 }, 3, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "close code 1005", { 0x88, 0x02, 0x03, 0xed }, 4, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "close code 999", { 0x88, 0x02, 0x03, 0xe7 }, 4, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "close reason not UTF-8", { 0x88, 0x03, 0x03, 0xe8, 0xff }, 5, WS_ROLE_CLIENT, -EPROTO, 1002 },
                { "text not UTF-8", { 0x81, 0x02, 0xc3, 0x28 }, 4, WS_ROLE_CLIENT, -EILSEQ, 1007 },
                { "text overlong", { 0x81, 0x02, 0xc0, 0xaf }, 4, WS_ROLE_CLIENT, -EILSEQ, 1007 },
                { "unmasked to server", { 0x82, 0x01, 0x00 }, 3, WS_ROLE_SERVER, -EPROTO, 1002 },
        };
        for (size_t i = 0; i < ELEMENTSOF(c); i++) {
                uint16_t code = 0;
                int r = first_error(c[i].role, c[i].wire, c[i].n, 0, &code);
                if (r != c[i].err || code != c[i].code)
                        test_fail(__FILE__, __LINE__, "%s: got %d/%u, want %d/%u", c[i].what, r, code, c[i].err, c[i].code);
        }
        /* Binary frames may hold any bytes; UTF-8 split across text fragments is fine. */
        static const uint8_t bin[] = { 0x82, 0x02, 0xc3, 0x28 };
        static const uint8_t split[] = { 0x01, 0x01, 0xc3, 0x80, 0x01, 0xa9 };   /* "é" in two fragments */
        uint16_t code = 0;
        ASSERT_EQ(first_error(WS_ROLE_CLIENT, bin, sizeof(bin), 0, &code), 0);
        expect_one(WS_ROLE_CLIENT, split, sizeof(split), WS_OP_TEXT, "\xc3\xa9", 2, 0);
}

TEST(encode_refuses_bad_frames) {
        _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
        char p[126] = { 0 };
        ASSERT_EQ(ws_frame_encode(&b, WS_ROLE_SERVER, true, WS_OP_PING, p, 126), -EINVAL);
        ASSERT_EQ(ws_frame_encode(&b, WS_ROLE_SERVER, false, WS_OP_CLOSE, NULL, 0), -EINVAL);
        ASSERT_EQ(ws_frame_encode(&b, WS_ROLE_SERVER, true, 3, NULL, 0), -EINVAL);
        ASSERT_EQ(b.len, 0);
        _cleanup_sb_ struct strbuf small = STRBUF_INIT(4);
        ASSERT_EQ(ws_frame_encode(&small, WS_ROLE_SERVER, true, WS_OP_TEXT, "hello", 5), -ENOBUFS);
        ASSERT_EQ(small.len, 0);
}

TEST(close_codes) {
        static const uint16_t ok[] = { 1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 4999 };
        static const uint16_t bad[] = { 0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000 };
        for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
                _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
                ASSERT_TRUE(ws_close_code_valid(ok[i]));
                ASSERT_OK(ws_close_encode(&b, WS_ROLE_SERVER, ok[i], "bye"));
                _cleanup_reader_ struct ws_reader r;
                ws_reader_init(&r, WS_ROLE_CLIENT, 0);
                ASSERT_OK(ws_reader_feed(&r, b.buf, b.len));
                struct ws_message m = { 0 };
                ASSERT_EQ(ws_reader_next(&r, &m), 1);
                ASSERT_EQ(m.opcode, WS_OP_CLOSE);
                uint16_t code = 0;
                _cleanup_free_ char *reason = NULL;
                ASSERT_OK(ws_close_parse(m.data, m.len, &code, &reason));
                ASSERT_EQ(code, ok[i]);
                ASSERT_STREQ(reason, "bye");
                ws_message_done(&m);
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                ASSERT_FALSE(ws_close_code_valid(bad[i]));
                if (bad[i]) {
                        _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
                        ASSERT_EQ(ws_close_encode(&b, WS_ROLE_SERVER, bad[i], NULL), -EINVAL);
                }
        }
        /* No status: an empty close frame, read back as 1005. */
        _cleanup_sb_ struct strbuf b = STRBUF_INIT(0);
        ASSERT_OK(ws_close_encode(&b, WS_ROLE_CLIENT, 0, "ignored"));
        ASSERT_EQ(b.len, 6);
        uint16_t code = 0;
        _cleanup_free_ char *reason = NULL;
        ASSERT_OK(ws_close_parse(NULL, 0, &code, &reason));
        ASSERT_EQ(code, WS_CLOSE_NO_STATUS);
        ASSERT_STREQ(reason, "");
        /* A long reason is cut to fit 125 bytes, never inside a character. */
        char longr[400] = "";
        for (int i = 0; i < 100; i++)
                strcat(longr, "\xc3\xa9");   /* 2-byte characters */
        strbuf_reset(&b);
        ASSERT_OK(ws_close_encode(&b, WS_ROLE_SERVER, WS_CLOSE_INTERNAL_ERROR, longr));
        ASSERT_EQ((uint8_t) b.buf[1], 2 + 122);   /* 123 bytes would split a character */
        _cleanup_free_ char *r2 = NULL;
        ASSERT_OK(ws_close_parse((uint8_t *) b.buf + 2, b.len - 2, &code, &r2));
        ASSERT_EQ(code, 1011);
        ASSERT_EQ(strlen(r2), 122);
}

TEST(handshake_accept_rfc_example) {
        char acc[WS_ACCEPT_LEN + 1];
        ws_accept_for_key("dGhlIHNhbXBsZSBub25jZQ==", acc);   /* RFC 6455 1.3 */
        ASSERT_STREQ(acc, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        ASSERT_TRUE(ws_key_valid("dGhlIHNhbXBsZSBub25jZQ=="));
        ASSERT_FALSE(ws_key_valid("dGhlIHNhbXBsZSBub25jZQ"));
        ASSERT_FALSE(ws_key_valid("dGhlIHNhbXBsZSBub25jZSE="));   /* 17 bytes */
        ASSERT_FALSE(ws_key_valid(NULL));
        char k1[WS_KEY_LEN + 1], k2[WS_KEY_LEN + 1];
        ws_key_new(k1);
        ws_key_new(k2);
        ASSERT_TRUE(ws_key_valid(k1));
        ASSERT_TRUE(strcmp(k1, k2) != 0);
}

TEST(handshake_client_request) {
        _cleanup_free_ char *req = NULL;
        const char *extra[] = { "X-Nomad-Token: secret", NULL };
        ASSERT_OK(ws_client_request("127.0.0.1:4646", "/v1/client/allocation/a/exec?task=t", "dGhlIHNhbXBsZSBub25jZQ==",
                                    extra, &req));
        ASSERT_TRUE(startswith(req, "GET /v1/client/allocation/a/exec?task=t HTTP/1.1\r\nHost: 127.0.0.1:4646\r\n"));
        ASSERT_CONTAINS(req, "\r\nUpgrade: websocket\r\n");
        ASSERT_CONTAINS(req, "\r\nConnection: Upgrade\r\n");
        ASSERT_CONTAINS(req, "\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n");
        ASSERT_CONTAINS(req, "\r\nSec-WebSocket-Version: 13\r\n");
        ASSERT_TRUE(endswith(req, "\r\nX-Nomad-Token: secret\r\n\r\n"));
        char *none = NULL;
        const char *evil[] = { "X-A: b\r\nX-Injected: 1", NULL };
        ASSERT_EQ(ws_client_request("h", "/p", "k", evil, &none), -EINVAL);
        ASSERT_EQ(ws_client_request("h", "/p\r\nX: y", "k", NULL, &none), -EINVAL);
        ASSERT_EQ(ws_client_request("h", "p", "k", NULL, &none), -EINVAL);
        ASSERT_NULL(none);
}

TEST(handshake_client_response) {
        const char *key = "dGhlIHNhbXBsZSBub25jZQ==";
        const char *ok = "HTTP/1.1 101 Switching Protocols\r\nupgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\n"
                         "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n\x81\x02hi";
        int status = 0;
        size_t head = 0;
        ASSERT_EQ(ws_client_parse_response(ok, strlen(ok), key, &status, &head), 0);
        ASSERT_EQ(status, 101);
        ASSERT_EQ(head, strlen(ok) - 4);   /* the frame after the head is left to the reader */
        /* Incomplete head. */
        ASSERT_EQ(ws_client_parse_response(ok, 40, key, &status, &head), -EAGAIN);
        /* Wrong accept, missing upgrade. */
        const char *bad = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          "Sec-WebSocket-Accept: AAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n\r\n";
        ASSERT_EQ(ws_client_parse_response(bad, strlen(bad), key, &status, &head), -EPROTO);
        const char *noup = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n"
                           "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n";
        ASSERT_EQ(ws_client_parse_response(noup, strlen(noup), key, &status, &head), -EPROTO);
        /* A refusal is a complete head with its status; the body follows. */
        const char *denied = "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 17\r\n\r\n"
                             "Permission denied";
        ASSERT_EQ(ws_client_parse_response(denied, strlen(denied), key, &status, &head), 0);
        ASSERT_EQ(status, 403);
        ASSERT_STREQ(denied + head, "Permission denied");
        ASSERT_EQ(ws_client_parse_response("garbage\r\n\r\n", 11, key, &status, &head), -EPROTO);
        ASSERT_EQ(ws_client_parse_response("HTTP/1.1 1x1 \r\n\r\n", 17, key, &status, &head), -EPROTO);
}
