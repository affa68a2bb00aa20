/* Unit tests for proto-json/pj_json.c: the value cap (issue 12, JSON
 * amplification) and the reader's tree. The strictness rules themselves are
 * covered through the body parsers in test-pj-api.c. */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "cleanup.h"
#include "pj_api.h"
#include "pj_json.h"
#include "strutil.h"
#include "testlib.h"

static long maxrss_kib(void) {
        struct rusage ru;
        ASSERT_EQ(getrusage(RUSAGE_SELF, &ru), 0);
        return ru.ru_maxrss;
}

/* prefix, then n copies of item separated by ',', then suffix. */
static char *repeat(const char *prefix, const char *item, size_t n, const char *suffix, size_t *ret_len) {
        size_t pl = strlen(prefix), il = strlen(item), sl = strlen(suffix);
        size_t len = pl + n * (il + 1) + sl;
        char *b = xmalloc(len + 1), *p = b;
        memcpy(p, prefix, pl);
        p += pl;
        for (size_t i = 0; i < n; i++) {
                if (i)
                        *p++ = ',';
                memcpy(p, item, il);
                p += il;
        }
        memcpy(p, suffix, sl);
        p += sl;
        *p = 0;
        *ret_len = (size_t) (p - b);
        return b;
}

TEST(million_values_refused_fast_and_small) {
        size_t len;
        /* Built and touched before the first measurement: only what the
         * parser allocates counts. */
        _cleanup_free_ char *b = repeat("{\"name\":[", "0", 1000000, "]}", &len);
        struct err e = {};
        struct pj_sandbox_create c = {};
        long before = maxrss_kib();
        int64_t t0 = mono_ms();

        ASSERT_EQ(pj_sandbox_create_parse(b, len, &c, &e), -EINVAL);
        int64_t took = mono_ms() - t0;
        long grew = maxrss_kib() - before;
        /* Before the cap this built a million nodes: ~130 MiB. */
        if (grew > 64 * 1024)
                test_fail(__FILE__, __LINE__, "peak RSS grew by %ld KiB", grew);
        if (took > 2000)
                test_fail(__FILE__, __LINE__, "took %" PRId64 " ms", took);
        ASSERT_STREQ(e.field, "");
        ASSERT_CONTAINS(e.message, "more than 10000 values");
        ASSERT_CONTAINS(e.message, "the limit is 10000 values per request body");
}

TEST(eight_mib_body_of_zeros) {
        /* The shape from the issue: an 8 MiB body that used to cost ~450 MiB. */
        size_t len;
        _cleanup_free_ char *b = repeat("{\"name\":[", "0", 4 * 1024 * 1024 - 8, "]}", &len);
        struct err e = {};
        _cleanup_(pj_json_freep) struct pj_json *j = NULL;
        long before = maxrss_kib();

        ASSERT_TRUE(len <= 8 * 1024 * 1024);
        ASSERT_EQ(pj_json_parse(b, len, PJ_JSON_MAX_NODES, &j, &e), -EINVAL);
        ASSERT_NULL(j);
        ASSERT_CONTAINS(e.message, "the limit is 10000 values");
        if (maxrss_kib() - before > 64 * 1024)
                test_fail(__FILE__, __LINE__, "peak RSS grew by %ld KiB", maxrss_kib() - before);
}

TEST(cap_counts_every_value_exactly) {
        struct err e = {};
        size_t len;
        /* An array of n scalars is n + 1 values. */
        _cleanup_free_ char *at = repeat("[", "\"s\"", 9999, "]", &len);
        _cleanup_(pj_json_freep) struct pj_json *j = NULL;
        ASSERT_EQ(pj_json_parse(at, len, 10000, &j, &e), 0);
        ASSERT_EQ(j->type, PJ_JSON_ARRAY);
        ASSERT_EQ(j->n, 9999);
        j = pj_json_free(j);
        ASSERT_EQ(pj_json_parse(at, len, 9999, &j, &e), -EINVAL);
        ASSERT_NULL(j);
        ASSERT_CONTAINS(e.message, "more than 9999 values");

        /* Objects, nested containers and null/true/false count too. */
        const char *doc = "{\"a\":{\"b\":[null,true,false]},\"c\":1.5}"; /* 7 values */
        ASSERT_EQ(pj_json_parse(doc, strlen(doc), 7, &j, &e), 0);
        j = pj_json_free(j);
        ASSERT_EQ(pj_json_parse(doc, strlen(doc), 6, &j, &e), -EINVAL);
        /* Empty containers are one value each. */
        ASSERT_EQ(pj_json_parse("[[],{}]", 7, 3, &j, &e), 0);
        j = pj_json_free(j);
        ASSERT_EQ(pj_json_parse("[[],{}]", 7, 2, &j, &e), -EINVAL);
}

TEST(largest_valid_batch_fits_under_the_cap) {
        /* 100 files, the most a batch may hold, parse well under the cap. */
        size_t len;
        _cleanup_free_ char *b = repeat("{\"files\":[", "{\"path\":\"/tmp/f\",\"content_base64\":\"eA==\"}", 100, "]}",
                                        &len);
        /* Same path 100 times: per-file errors for 99, the batch still parses. */
        struct pj_files_batch fb = {};
        struct err e = {};
        ASSERT_EQ(pj_files_batch_parse(b, len, 1024, 1 << 20, &fb, &e), 0);
        ASSERT_EQ(fb.n_files, 100);
        ASSERT_NULL(fb.file_errors[0]);
        ASSERT_NOT_NULL(fb.file_errors[99]);
        pj_files_batch_done(&fb);
}

TEST(tree_shape_and_member) {
        const char *doc = " {\"k\":\"v\\u0000w\",\"n\":null,\"x\":[1,2]} ";
        struct err e = {};
        _cleanup_(pj_json_freep) struct pj_json *j = NULL;
        ASSERT_EQ(pj_json_parse(doc, strlen(doc), PJ_JSON_MAX_NODES, &j, &e), 0);
        ASSERT_EQ(j->n, 3);
        const struct pj_json *k = pj_json_member(j, "k");
        ASSERT_NOT_NULL(k);
        ASSERT_EQ(k->str_len, 3); /* \u0000 kept, length says so */
        ASSERT_NULL(pj_json_member(j, "n")); /* null reads as absent */
        ASSERT_NULL(pj_json_member(j, "missing"));
        ASSERT_EQ(pj_json_member(j, "x")->n, 2);
        ASSERT_TRUE(pj_json_key_is(j->child, "k"));
        ASSERT_EQ(pj_json_parse("", 0, 10, &j, &e), -EINVAL);
        ASSERT_CONTAINS(e.message, "Malformed JSON at byte 0");
        ASSERT_EQ(pj_json_parse("1 2", 3, 10, &j, &e), -EINVAL);
        ASSERT_CONTAINS(e.message, "unexpected data after the JSON value");
        ASSERT_NULL(pj_json_free(NULL));
}
