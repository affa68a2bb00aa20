/* Streamed bytes as valid UTF-8 text: the one carry every output stream uses.
 *
 * Command output arrives in chunks that may cut a character in two. A
 * struct utf8_carry holds the start of a sequence cut at the end of one chunk
 * until the next chunk completes it. Whatever is not UTF-8 becomes U+FFFD (one
 * per stray byte; one for a carried sequence that completes invalid) and never
 * swallows the bytes after it: a lead byte followed by a byte that cannot
 * continue it (ASCII, another lead) is replaced and that byte is read afresh. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strutil.h"

struct utf8_carry {
        uint8_t buf[4];
        size_t len;
};

/* Length (1..4) a sequence starting with lead byte c claims, 0 when c cannot start one
 * (a continuation byte or 0xf8..0xff). */
size_t utf8_lead_len(uint8_t c);

/* Appends len bytes of data to out as valid UTF-8, completing the sequence carried from the
 * previous call first. An incomplete sequence at the end of data is kept in *c for the next
 * call; with final it is written as U+FFFD instead (data may then be NULL, len 0). Returns 0,
 * or -ENOBUFS when out reached its cap (out is truncated then, as strbuf_append does). */
int utf8_carry_append(struct utf8_carry *c, struct strbuf *out, const void *data, size_t len, bool final);
