/* Unit tests for common/utf8-carry.c: the carry that turns chunked command output into
 * UTF-8 text for every output stream (runtime runs, the process output stream). What a
 * user sees: no character of their output is lost because of where a chunk ended. */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "strutil.h"
#include "testlib.h"
#include "utf8-carry.h"

#define FFFD "\xef\xbf\xbd"

/* Feeds the chunks (NULL-terminated list) through one carry, then ends the stream, and
 * checks the text that came out. */
static void check_chunks(const char *file, int line, const char *const *chunks, const char *want) {
        _cleanup_strbuf_ struct strbuf out = STRBUF_INIT(0);
        struct utf8_carry c = { 0 };
        for (size_t k = 0; chunks[k]; k++)
                if (utf8_carry_append(&c, &out, chunks[k], strlen(chunks[k]), false) < 0)
                        test_fail(file, line, "append of chunk %zu failed", k);
        if (utf8_carry_append(&c, &out, NULL, 0, true) < 0)
                test_fail(file, line, "final append failed");
        const char *got = out.buf ? out.buf : "";
        if (out.len != strlen(want) || memcmp(got, want, out.len) != 0)
                test_fail(file, line, "got \"%.*s\" (%zu bytes), want \"%s\" (%zu bytes)", (int) out.len, got, out.len, want,
                          strlen(want));
        if (!utf8_valid(got, out.len))
                test_fail(file, line, "output is not valid UTF-8");
}
#define CHECK(want, ...) check_chunks(__FILE__, __LINE__, (const char *const[]) { __VA_ARGS__, NULL }, want)

TEST(whole_text_passes_unchanged) {
        CHECK("hello \xe2\x82\xac \xf0\x9f\x98\x80!", "hello \xe2\x82\xac \xf0\x9f\x98\x80!");
        CHECK("", "");
}

TEST(a_character_split_across_chunks_is_joined) {
        CHECK("a\xe2\x82\xac" "bc", "a\xe2", "\x82\xac" "bc");
        CHECK("a\xe2\x82\xac" "bc", "a\xe2\x82", "\xac" "bc");
        CHECK("\xf0\x9f\x98\x80ok", "\xf0", "\x9f", "\x98", "\x80ok");
}

/* The bug the process output stream had: the start of a character at the end of one chunk
 * took the next chunk's bytes as its continuation, whatever they were, and the ASCII that
 * followed was lost. */
TEST(a_cut_character_followed_by_ascii_keeps_the_ascii) {
        CHECK("a" FFFD "bcd", "a\xe2", "bcd");
        CHECK("a" FFFD "bcd", "a\xe2\x82", "bcd");
        CHECK("x" FFFD "yz", "x\xf0\x9f", "yz");
        /* the next chunk starts another character */
        CHECK(FFFD "\xc3\xa9", "\xe2", "\xc3\xa9");
}

/* A lead byte followed by ASCII in the same chunk, at its end: not the start of a character
 * cut by the chunk, but invalid now; the ASCII after it is output. */
TEST(an_invalid_lead_byte_followed_by_ascii_keeps_the_ascii) {
        CHECK("x" FFFD "AB", "x\xe2" "A", "B");
        CHECK("x" FFFD FFFD "A", "x\xf0\x9f" "A");   /* each byte not part of a character */
        CHECK(FFFD "A" FFFD "B", "\xff" "A\xfe" "B");
        CHECK("x" FFFD "AB", "x\xe2" "AB");          /* inside one chunk */
}

TEST(stray_and_trailing_bytes_become_replacement_characters) {
        CHECK(FFFD "a", "\x80" "a");
        CHECK("a" FFFD, "a\xe2\x82");               /* the stream ends inside a character */
        CHECK(FFFD FFFD FFFD "z", "\xed\xa0\x80" "z");   /* a surrogate, then text */
}

TEST(a_capped_buffer_reports_nobufs) {
        _cleanup_strbuf_ struct strbuf out = STRBUF_INIT(4);
        struct utf8_carry c = { 0 };
        ASSERT_EQ(utf8_carry_append(&c, &out, "abcdef", 6, false), -ENOBUFS);
        ASSERT_TRUE(out.truncated);
}
