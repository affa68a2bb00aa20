/* Exec output keeps every byte through the API: NUL bytes come back as \u0000 in JSON, in
 * the buffered answer and in streamed frames, next to the other escapes. Real controld,
 * dockerd and runsc. */
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "ctltest.h"
#include "strutil.h"
#include "testlib.h"

/* Concatenation of the raw (still escaped) JSON string values of every streamed frame of
 * one type, e.g. `a\u0000b`. Frames are `data: {"type":"stdout","data":"..."}`. */
static char *raw_frames(const char *body, const char *type) {
        char prefix[64];
        struct strbuf b;
        strbuf_init(&b, 0);
        snprintf(prefix, sizeof(prefix), "data: {\"type\":\"%s\",\"data\":\"", type);
        for (const char *p = strstr(body, prefix); p; p = strstr(p, prefix)) {
                p += strlen(prefix);
                const char *e = strstr(p, "\"}\n");
                ASSERT_NOT_NULL(e);
                strbuf_append(&b, p, (size_t) (e - p));
        }
        return strbuf_steal(&b);
}

/* POST /sandboxes/{id}/exec with a raw JSON body. */
static void exec_body(struct ctld *c, const char *key, const char *id, const char *body, struct hres *r) {
        char path[128];
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        http_req(c, "POST", path, key, body, r);
}

TEST_FULL(exec_output_keeps_nul_bytes, 180) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char id[25];
        _cleanup_free_ char *key = ctld_start_with_sandbox(&c, "bytes", NULL, id);

        /* Buffered. The shell's printf writes the NULs; the quote, backslash and newline
         * next to them must be escaped as usual. */
        exec_body(&c, key, id,
                  "{\"cmd\":\"printf 'a\\\\0b\\\\0'; printf 'x\\\\0\\\\0\\\"\\\\\\\\\\\\ny' >&2\"}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.body, "\"stdout\":\"a\\u0000b\\u0000\"");
        ASSERT_CONTAINS(r.body, "\"stderr\":\"x\\u0000\\u0000\\\"\\\\\\ny\"");
        /* The whole answer is still one JSON document (cJSON reads \u0000 as a string end,
         * but parses it). */
        ASSERT_NOT_NULL(r.json);
        ASSERT_STREQ(hres_message(&r), "Exec completed");
        hres_done(&r);

        /* Streamed: the same bytes in the frames. */
        exec_body(&c, key, id, "{\"cmd\":\"printf 'a\\\\0b'; printf '\\\\0z' >&2\",\"stream\":true}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.content_type, "text/event-stream");
        _cleanup_free_ char *out = raw_frames(r.body, "stdout");
        _cleanup_free_ char *err = raw_frames(r.body, "stderr");
        ASSERT_STREQ(out, "a\\u0000b");
        ASSERT_STREQ(err, "\\u0000z");
        ASSERT_CONTAINS(r.body, "\"type\":\"done\",\"exit_code\":0");
        hres_done(&r);

        /* A NUL-free output is unchanged. */
        exec_body(&c, key, id, "{\"cmd\":\"printf plain\"}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_STREQ(hres_data_str(&r, "stdout"), "plain");
        ASSERT_STREQ(hres_data_str(&r, "stderr"), "");
        hres_done(&r);
}
