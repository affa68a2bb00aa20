/* ws.h — RFC 6455 WebSocket framing and handshake helpers, for both roles.
 *
 * Pure functions over buffers plus a small stateful reader (feed bytes, take
 * messages), so that a client on a libcurl CURLOPT_CONNECT_ONLY connection and
 * a server on a libmicrohttpd-upgraded socket share one implementation. Nothing
 * here does I/O or logs. Conventions: >= 0 success, -errno on failure, ret_*
 * untouched on failure, allocation aborts on OOM.
 *
 * Roles: a client masks every frame it sends with a fresh random key; a server
 * never masks. A reader enforces the rule for frames it RECEIVES: a server-role
 * reader refuses unmasked frames, a client-role reader refuses masked ones
 * (RFC 6455 5.1: either is a protocol error, close 1002).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strutil.h"

enum ws_role { WS_ROLE_CLIENT, WS_ROLE_SERVER };

enum ws_opcode {
        WS_OP_CONT = 0x0,
        WS_OP_TEXT = 0x1,
        WS_OP_BINARY = 0x2,
        WS_OP_CLOSE = 0x8,
        WS_OP_PING = 0x9,
        WS_OP_PONG = 0xA,
};

/* Close status codes (RFC 6455 7.4.1). 1005 and 1006 are never sent on the wire:
 * 1005 is what a reader reports for a close frame without a code. */
enum {
        WS_CLOSE_NORMAL = 1000,
        WS_CLOSE_GOING_AWAY = 1001,
        WS_CLOSE_PROTOCOL_ERROR = 1002,
        WS_CLOSE_UNSUPPORTED = 1003,
        WS_CLOSE_NO_STATUS = 1005,
        WS_CLOSE_ABNORMAL = 1006,
        WS_CLOSE_INVALID_PAYLOAD = 1007,
        WS_CLOSE_POLICY = 1008,
        WS_CLOSE_TOO_BIG = 1009,
        WS_CLOSE_MANDATORY_EXT = 1010,
        WS_CLOSE_INTERNAL_ERROR = 1011,
};

#define WS_MAX_HEADER 14                  /* 2 + 8 (64-bit length) + 4 (mask) */
#define WS_MAX_CONTROL_PAYLOAD 125
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_KEY_LEN 24                     /* base64 of 16 bytes */
#define WS_ACCEPT_LEN 28                  /* base64 of a SHA-1 */

/* ---- frames ---- */

struct ws_frame_header {
        bool fin;
        uint8_t rsv;           /* RSV1..3 as bits 0x4,0x2,0x1 (must be 0: no extension negotiated) */
        uint8_t opcode;
        bool masked;
        uint8_t mask[4];
        uint64_t payload_len;
        size_t header_len;     /* bytes of the header on the wire, 2..14 */
};

/* Parses a frame header at buf (n bytes available). Returns 1 and fills *ret when
 * the whole header is there, 0 when more bytes are needed, -EPROTO when the header
 * can never be valid: a 64-bit length with the top bit set, or a length not in its
 * shortest form (RFC 6455 5.2 "the minimal number of bytes MUST be used").
 * Opcode, RSV and mask rules are judged by the reader, not here. */
int ws_frame_header_parse(const uint8_t *buf, size_t n, struct ws_frame_header *ret);

/* XORs len bytes at data with key, as if data started offset bytes into the
 * payload (so a payload can be unmasked in pieces). Masking and unmasking are the same. */
void ws_mask(uint8_t *data, size_t len, const uint8_t key[4], uint64_t offset);

/* Appends one frame to out (strbuf with max 0 or large enough; -ENOBUFS when it
 * does not fit). mask_key NULL = unmasked (server), else masked with it (client).
 * -EINVAL: opcode not one of enum ws_opcode, or a control frame with a payload over
 * 125 bytes or without fin. payload may be NULL when len is 0. */
int ws_frame_encode_key(struct strbuf *out, bool fin, uint8_t opcode, const void *payload, size_t len,
                        const uint8_t *mask_key);
/* The same with the role's rule: a client masks with a fresh random key, a server does not. */
int ws_frame_encode(struct strbuf *out, enum ws_role role, bool fin, uint8_t opcode, const void *payload, size_t len);

/* A close frame for code (1000..4999 except 1004-1006 and 1015; 0 = a close
 * frame without a status) and an optional reason, cut (at a character boundary)
 * so the payload stays within 125 bytes. -EINVAL for a code that may not be sent. */
int ws_close_encode(struct strbuf *out, enum ws_role role, uint16_t code, const char *reason);

/* May this status code appear in a close frame on the wire? (RFC 6455 7.4) */
bool ws_close_code_valid(uint16_t code);

/* Parses a received close payload: empty -> WS_CLOSE_NO_STATUS and "";
 * 1 byte, an invalid code or a reason that is not UTF-8 -> -EPROTO.
 * *ret_reason (optional) is xmalloc'd and NUL-terminated. */
int ws_close_parse(const uint8_t *payload, size_t len, uint16_t *ret_code, char **ret_reason);

/* ---- the reader: feed bytes, take whole messages ---- */

struct ws_message {
        uint8_t opcode;        /* TEXT, BINARY (reassembled), or CLOSE, PING, PONG */
        uint8_t *data;         /* xmalloc'd, len bytes plus a NUL past them; caller frees */
        size_t len;
};
void ws_message_done(struct ws_message *m);   /* frees data, zeroes; NULL-safe */

struct ws_reader {
        enum ws_role role;     /* the role of the side that reads */
        size_t max_message;    /* cap on a reassembled data message (and so on any frame) */
        /* private */
        uint8_t *in;           /* unparsed input */
        size_t in_off, in_len, in_cap;   /* in[in_off..in_len) not yet parsed */
        uint8_t *msg;          /* fragments collected so far */
        size_t msg_len, msg_cap;
        uint8_t msg_opcode;    /* 0 = no fragmented message in progress */
        bool failed;
        uint16_t error_code;   /* close code to send after a failure */
        char error[96];
};

/* max_message 0 = 16 MiB. */
void ws_reader_init(struct ws_reader *r, enum ws_role role, size_t max_message);
void ws_reader_done(struct ws_reader *r);   /* frees buffers; NULL-safe */

/* Appends received bytes. Buffers at most one frame beyond what ws_reader_next
 * consumed: call next() until it returns 0 before feeding more, or feeding
 * returns -ENOBUFS when the unparsed input would exceed max_message + 14. */
int ws_reader_feed(struct ws_reader *r, const void *data, size_t len);

/* Takes the next message: 1 and *ret filled, 0 when more input is needed, or a
 * failure after which the reader stays failed (every later call returns it again):
 *   -EPROTO   protocol error (RSV bits, unknown opcode, masking rule broken, control
 *             frame fragmented or over 125 bytes, continuation without a start,
 *             new data frame inside a fragmented message, bad close payload) -> 1002
 *   -EMSGSIZE a frame or a reassembled message over max_message -> 1009
 *   -EILSEQ   a text message that is not UTF-8 -> 1007
 * ws_reader_error() tells the close code and a short reason to send back.
 * Control frames are returned as they come, also between fragments of a message;
 * answering pings and closes is the caller's job. */
int ws_reader_next(struct ws_reader *r, struct ws_message *ret);

/* The close code (0 when not failed) and reason ("" when not failed) of a failed reader. */
uint16_t ws_reader_error(const struct ws_reader *r, const char **ret_reason);

/* ---- the opening handshake ---- */

/* A fresh Sec-WebSocket-Key: base64 of 16 random bytes, NUL-terminated. */
void ws_key_new(char out[WS_KEY_LEN + 1]);
/* Is key a valid Sec-WebSocket-Key (base64 that decodes to exactly 16 bytes)? */
bool ws_key_valid(const char *key);
/* Sec-WebSocket-Accept for key: base64(SHA-1(key + WS_GUID)). */
void ws_accept_for_key(const char *key, char out[WS_ACCEPT_LEN + 1]);

/* The client's upgrade request head (ends with the blank line), xmalloc'd.
 * path_and_query starts with '/'; extra_headers (optional) are NULL-terminated
 * "Name: value" lines. -EINVAL when any argument holds CR or LF (which would
 * split the request) or path_and_query does not start with '/'. */
int ws_client_request(const char *host, const char *path_and_query, const char *key,
                      const char *const *extra_headers, char **ret);

/* Parses the server's response head at buf (n bytes). Returns 0 when the head is
 * complete: *ret_status is its status code and *ret_head_len the bytes of the head
 * (what follows is frames, or the body of a refusal). -EAGAIN: head not complete yet
 * (n < 16 KiB); -EPROTO: malformed head or over 16 KiB, or a 101 without
 * "Upgrade: websocket", "Connection: upgrade" or the right Sec-WebSocket-Accept
 * for key. */
int ws_client_parse_response(const char *buf, size_t n, const char *key, int *ret_status, size_t *ret_head_len);
