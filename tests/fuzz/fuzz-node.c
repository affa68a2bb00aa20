/* The node message codecs (proto-json/pj_node.c) both ends of the bus parse with.
 * Properties: any bytes parse or fail with a message, never crash; an accepted message
 * or reply formats to text that parses back to the same thing (egress allowlists come out
 * normalised, so a second round is exact). */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "pj_node.h"

static void same_msg(const struct pj_node_msg *a, const struct pj_node_msg *b) {
        FUZZ_ASSERT(a->type == b->type, "type %d vs %d", a->type, b->type);
        FUZZ_ASSERT(!strcmp(a->sandbox_id, b->sandbox_id) && a->ip == b->ip, "ids differ");
        FUZZ_ASSERT(a->egress.mode == b->egress.mode && a->egress.n_allow == b->egress.n_allow, "egress differs");
        for (size_t i = 0; i < a->egress.n_allow; i++)
                FUZZ_ASSERT(!strcmp(a->egress.allow[i], b->egress.allow[i]), "allow[%zu] %s vs %s", i, a->egress.allow[i],
                            b->egress.allow[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        const char *b = (const char *) data;
        struct err e;

        struct pj_node_msg m = { 0 };
        if (pj_node_msg_parse(b, size, &m, &e) == 0) {
                _cleanup_free_ char *t = pj_node_msg_format(&m);
                struct pj_node_msg m2 = { 0 };
                FUZZ_ASSERT(pj_node_msg_parse(t, strlen(t), &m2, &e) == 0, "own format refused (%s): %s", e.message, t);
                same_msg(&m, &m2);
                _cleanup_free_ char *t2 = pj_node_msg_format(&m2);
                FUZZ_ASSERT(!strcmp(t, t2), "format not stable: %s vs %s", t, t2);
                pj_node_msg_done(&m2);
                pj_node_msg_done(&m);
                pj_node_msg_done(&m);
        } else
                FUZZ_ASSERT(e.message[0] && memchr(e.message, 0, sizeof(e.message)), "error without a message");

        struct pj_node_reply r = { 0 };
        if (pj_node_reply_parse(b, size, &r, &e) == 0) {
                FUZZ_ASSERT(r.ok || r.error[0], "refusal without a reason");
                _cleanup_free_ char *t = pj_node_reply_format(&r);
                struct pj_node_reply r2 = { 0 };
                FUZZ_ASSERT(pj_node_reply_parse(t, strlen(t), &r2, &e) == 0, "own reply refused (%s): %s", e.message, t);
                FUZZ_ASSERT(r.ok == r2.ok && !strcmp(r.type, r2.type) && !strcmp(r.node_id, r2.node_id) &&
                                    (!r.ok ? !strcmp(r.error, r2.error) : true),
                            "reply changed in a round trip: %s", t);
                pj_node_reply_done(&r2);
                pj_node_reply_done(&r);
        } else
                FUZZ_ASSERT(e.message[0], "error without a message");
        return 0;
}
