/* Unit tests for proto-json/pj_agent: every message round-trips; hostile frames are refused
 * with an error naming the field. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pj_agent.h"
#include "testlib.h"

/* The payload the last round_trip() decoded: back->data points into it. */
static uint8_t *kept;

/* Encodes m, checks the header, decodes back into *back (valid until the next call). */
static void round_trip(const struct pj_agent_msg *m, struct pj_agent_msg *back) {
        struct pj_agent_buf b = { 0 };
        struct pj_agent_header h;
        struct err e;
        ASSERT_OK(pj_agent_msg_encode(m, &b, &e));
        ASSERT_GE(b.len, PJ_AGENT_HEADER_SIZE);
        ASSERT_OK(pj_agent_header_decode(b.p, &h, &e));
        ASSERT_EQ(h.type, m->type);
        ASSERT_EQ(h.id, m->id);
        ASSERT_EQ(h.len, b.len - PJ_AGENT_HEADER_SIZE);
        /* data points into the payload: keep a copy alive for the caller */
        free(kept);
        uint8_t *payload = kept = xmalloc(h.len + 1);
        memcpy(payload, b.p + PJ_AGENT_HEADER_SIZE, h.len);
        if (pj_agent_msg_decode(&h, payload, h.len, back, &e) < 0)
                test_fail(__FILE__, __LINE__, "decode %s: %s: %s", pj_agent_type_name(m->type), e.field, e.message);
        /* re-encoding gives the same bytes */
        struct pj_agent_buf b2 = { 0 };
        ASSERT_OK(pj_agent_msg_encode(back, &b2, &e));
        ASSERT_EQ(b2.len, b.len);
        ASSERT_TRUE(memcmp(b.p, b2.p, b.len) == 0);
        pj_agent_buf_done(&b);
        pj_agent_buf_done(&b2);
}

#define HAS(tag) PJ_AGENT_BIT(PJ_AGENT_T_##tag)

TEST(round_trip_every_message) {
        struct pj_agent_msg m, back;
        char *argv[] = { "sh", "-c", "echo hi", NULL };
        char *env[] = { "PATH=/bin", "A=b=c", NULL };

        m = (struct pj_agent_msg) { .type = PJ_AGENT_HELLO, .f.secret = "s3cret" };
        round_trip(&m, &back);
        ASSERT_STREQ(back.f.secret, "s3cret");
        pj_agent_msg_done(&back);

        m = (struct pj_agent_msg) { .type = PJ_AGENT_HELLO_OK, .f.version = 1 };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.version, 1);
        pj_agent_msg_done(&back);

        m = (struct pj_agent_msg) { .type = PJ_AGENT_ERROR, .id = 9, .f.err = ENOENT, .f.message = "no such file" };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.err, ENOENT);
        ASSERT_STREQ(back.f.message, "no such file");
        pj_agent_msg_done(&back);

        m = (struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .id = 7, .argv = argv, .n_argv = 3, .env = env, .n_env = 2,
                                    .f = { .present = HAS(UID) | HAS(GID) | HAS(STDIN) | HAS(ROWS) | HAS(COLS) |
                                                      HAS(KILL_ON_DETACH),
                                           .cwd = "/tmp", .uid = 1000, .gid = 0, .stdin_pipe = true, .rows = 24,
                                           .cols = 80, .tag = "build", .kill_on_detach = true } };
        round_trip(&m, &back);
        ASSERT_EQ(back.n_argv, 3);
        ASSERT_STREQ(back.argv[2], "echo hi");
        ASSERT_NULL(back.argv[3]);
        ASSERT_EQ(back.n_env, 2);
        ASSERT_STREQ(back.env[1], "A=b=c");
        ASSERT_STREQ(back.f.cwd, "/tmp");
        ASSERT_EQ(back.f.uid, 1000);
        ASSERT_TRUE(PJ_AGENT_HAS(&back.f, PJ_AGENT_T_GID));
        ASSERT_TRUE(back.f.stdin_pipe && back.f.kill_on_detach);
        ASSERT_EQ(back.f.rows, 24);
        ASSERT_EQ(back.f.cols, 80);
        ASSERT_STREQ(back.f.tag, "build");
        pj_agent_msg_done(&back);

        /* the bare minimum SPAWN: no optional field comes back */
        m = (struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .argv = argv, .n_argv = 1 };
        round_trip(&m, &back);
        ASSERT_FALSE(PJ_AGENT_HAS(&back.f, PJ_AGENT_T_UID) || PJ_AGENT_HAS(&back.f, PJ_AGENT_T_ROWS));
        ASSERT_NULL(back.f.cwd);
        pj_agent_msg_done(&back);

        m = (struct pj_agent_msg) { .type = PJ_AGENT_SPAWNED, .f.pid = 4242 };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.pid, 4242);
        pj_agent_msg_done(&back);

        static const uint8_t bytes[] = { 0, 1, 2, 255, '\n' };
        uint8_t types[] = { PJ_AGENT_STDIN, PJ_AGENT_DATA };
        for (size_t i = 0; i < ELEMENTSOF(types); i++) {
                m = (struct pj_agent_msg) { .type = types[i], .data = bytes, .data_len = sizeof(bytes) };
                round_trip(&m, &back);
                ASSERT_EQ(back.data_len, sizeof(bytes));
                ASSERT_TRUE(memcmp(back.data, bytes, sizeof(bytes)) == 0);
                pj_agent_msg_done(&back);
        }
        m = (struct pj_agent_msg) { .type = PJ_AGENT_OUTPUT, .f.stream = 2, .data = bytes, .data_len = 0 };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.stream, 2);
        ASSERT_EQ(back.data_len, 0);
        pj_agent_msg_done(&back);

        uint8_t empty[] = { PJ_AGENT_OK, PJ_AGENT_END, PJ_AGENT_STDIN_CLOSE, PJ_AGENT_LIST, PJ_AGENT_PROCS, PJ_AGENT_DIRENTS };
        for (size_t i = 0; i < ELEMENTSOF(empty); i++) {
                m = (struct pj_agent_msg) { .type = empty[i], .id = (uint32_t) i };
                round_trip(&m, &back);
                ASSERT_EQ(back.n_entries, 0);
                pj_agent_msg_done(&back);
        }
        m = (struct pj_agent_msg) { .type = PJ_AGENT_END, .f = { .present = HAS(TRUNCATED), .truncated = true } };
        round_trip(&m, &back);
        ASSERT_TRUE(back.f.truncated);
        pj_agent_msg_done(&back);

        m = (struct pj_agent_msg) { .type = PJ_AGENT_SIGNAL, .f.signo = 2 };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.signo, 2);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_RESIZE, .f = { .rows = 50, .cols = 132 } };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.rows, 50);
        ASSERT_EQ(back.f.cols, 132);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_EXIT, .f = { .code = -1, .signo = 9 } };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.code, -1);
        ASSERT_EQ(back.f.signo, 9);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_ATTACH, .f.pid = 77 };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.pid, 77);
        pj_agent_msg_done(&back);

        struct pj_agent_fields procs[2] = {
                { .present = HAS(TAG), .pid = 10, .tag = "a", .running = true },
                { .present = HAS(CODE) | HAS(SIGNAL), .pid = 11, .running = false, .code = 3 },
        };
        m = (struct pj_agent_msg) { .type = PJ_AGENT_PROCS, .entries = procs, .n_entries = 2 };
        round_trip(&m, &back);
        ASSERT_EQ(back.n_entries, 2);
        ASSERT_STREQ(back.entries[0].tag, "a");
        ASSERT_TRUE(back.entries[0].running);
        ASSERT_EQ(back.entries[1].code, 3);
        pj_agent_msg_done(&back);

        uint8_t path_types[] = { PJ_AGENT_READ, PJ_AGENT_STAT, PJ_AGENT_LISTDIR };
        for (size_t i = 0; i < ELEMENTSOF(path_types); i++) {
                m = (struct pj_agent_msg) { .type = path_types[i], .f.path = "/etc/hosts" };
                round_trip(&m, &back);
                ASSERT_STREQ(back.f.path, "/etc/hosts");
                pj_agent_msg_done(&back);
        }
        m = (struct pj_agent_msg) { .type = PJ_AGENT_WRITE,
                                    .f = { .present = HAS(MODE) | HAS(PARENTS), .path = "/a/b", .mode = 0640, .parents = true } };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.mode, 0640);
        ASSERT_TRUE(back.f.parents);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_STAT_OK,
                                    .f = { .ftype = PJ_AGENT_FT_FILE, .size = 1ull << 40, .mode = 0644, .mtime_ns = -5 } };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.size, 1ull << 40);
        ASSERT_EQ(back.f.mtime_ns, -5);
        pj_agent_msg_done(&back);
        struct pj_agent_fields ents[1] = { { .present = HAS(SIZE), .name = "x.txt", .ftype = PJ_AGENT_FT_FILE, .size = 3 } };
        m = (struct pj_agent_msg) { .type = PJ_AGENT_DIRENTS, .entries = ents, .n_entries = 1 };
        round_trip(&m, &back);
        ASSERT_STREQ(back.entries[0].name, "x.txt");
        ASSERT_EQ(back.entries[0].size, 3);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_MKDIR, .f = { .present = HAS(PARENTS), .path = "/d", .parents = true } };
        round_trip(&m, &back);
        ASSERT_TRUE(back.f.parents);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_MOVE, .f = { .path = "/a", .to = "/b" } };
        round_trip(&m, &back);
        ASSERT_STREQ(back.f.to, "/b");
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_REMOVE, .f = { .present = HAS(RECURSIVE), .path = "/a", .recursive = true } };
        round_trip(&m, &back);
        ASSERT_TRUE(back.f.recursive);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_FORWARD, .f.port = 8080 };
        round_trip(&m, &back);
        ASSERT_EQ(back.f.port, 8080);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_WATCH, .f = { .present = HAS(RECURSIVE), .path = "/w", .recursive = true } };
        round_trip(&m, &back);
        ASSERT_STREQ(back.f.path, "/w");
        ASSERT_TRUE(back.f.recursive);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_EVENT,
                                    .f = { .present = HAS(FTYPE), .path = "sub/x", .event = PJ_AGENT_EV_RENAME,
                                           .ftype = PJ_AGENT_FT_DIR } };
        round_trip(&m, &back);
        ASSERT_STREQ(back.f.path, "sub/x");
        ASSERT_EQ(back.f.event, PJ_AGENT_EV_RENAME);
        ASSERT_EQ(back.f.ftype, PJ_AGENT_FT_DIR);
        pj_agent_msg_done(&back);
        m = (struct pj_agent_msg) { .type = PJ_AGENT_PARK, .id = 3 };
        round_trip(&m, &back);
        ASSERT_EQ(back.type, PJ_AGENT_PARK);
        ASSERT_EQ(back.id, 3);
        pj_agent_msg_done(&back);
        free(kept);
        kept = NULL;
}

/* A frame built by hand: header + given payload. Decodes; returns the result, err filled. */
static int decode_raw(uint8_t type, const struct pj_agent_buf *payload, struct pj_agent_msg *m, struct err *e) {
        struct pj_agent_header h = { .len = (uint32_t) payload->len, .type = type };
        *m = (struct pj_agent_msg) { 0 };
        return pj_agent_msg_decode(&h, payload->p, payload->len, m, e);
}

TEST(header_refuses_before_allocation) {
        struct pj_agent_header h;
        struct err e;
        uint8_t b[PJ_AGENT_HEADER_SIZE];

        /* 4 GiB - 1 */
        pj_agent_header_encode(b, &(struct pj_agent_header) { .len = 0xffffffffu, .type = PJ_AGENT_HELLO });
        ASSERT_EQ(pj_agent_header_decode(b, &h, &e), -EINVAL);
        ASSERT_STREQ(e.field, "length");
        /* exactly at the limit is fine, one past it is not */
        pj_agent_header_encode(b, &(struct pj_agent_header) { .len = PJ_AGENT_MAX_PAYLOAD, .type = PJ_AGENT_DATA });
        ASSERT_OK(pj_agent_header_decode(b, &h, &e));
        pj_agent_header_encode(b, &(struct pj_agent_header) { .len = PJ_AGENT_MAX_PAYLOAD + 1, .type = PJ_AGENT_DATA });
        ASSERT_EQ(pj_agent_header_decode(b, &h, &e), -EINVAL);
        pj_agent_header_encode(b, &(struct pj_agent_header) { .len = 0, .type = 99 });
        ASSERT_EQ(pj_agent_header_decode(b, &h, &e), -EINVAL);
        ASSERT_STREQ(e.field, "type");
        pj_agent_header_encode(b, &(struct pj_agent_header) { .len = 0, .type = PJ_AGENT_OK, .flags = 1 });
        ASSERT_EQ(pj_agent_header_decode(b, &h, &e), -EINVAL);
        ASSERT_STREQ(e.field, "flags");
        pj_agent_header_encode(b, &(struct pj_agent_header) { .len = 0, .type = PJ_AGENT_OK });
        b[7] = 1;
        ASSERT_EQ(pj_agent_header_decode(b, &h, &e), -EINVAL);
        ASSERT_STREQ(e.field, "reserved");
}

TEST(truncated_payloads) {
        struct pj_agent_buf b = { 0 };
        struct pj_agent_msg m;
        struct err e;
        char *argv[] = { "true", NULL };
        ASSERT_OK(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .argv = argv, .n_argv = 1,
                                                               .f.cwd = "/" },
                                      &b, &e));
        size_t plen = b.len - PJ_AGENT_HEADER_SIZE;
        /* every cut that is not a field boundary fails; no cut reads past its length */
        for (size_t cut = 0; cut < plen; cut++) {
                uint8_t *p = xmalloc(cut ? cut : 1);
                memcpy(p, b.p + PJ_AGENT_HEADER_SIZE, cut);
                struct pj_agent_header h = { .len = (uint32_t) cut, .type = PJ_AGENT_SPAWN };
                m = (struct pj_agent_msg) { 0 };
                int r = pj_agent_msg_decode(&h, p, cut, &m, &e);
                ASSERT_EQ(r, -EINVAL);
                pj_agent_msg_done(&m);
                free(p);
        }
        /* header length and buffer length disagree */
        struct pj_agent_header h = { .len = (uint32_t) plen + 1, .type = PJ_AGENT_SPAWN };
        ASSERT_EQ(pj_agent_msg_decode(&h, b.p + PJ_AGENT_HEADER_SIZE, plen, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "length");
        pj_agent_buf_done(&b);
}

TEST(bad_tags_duplicates_and_ranges) {
        struct pj_agent_buf p = { 0 };
        struct pj_agent_msg m;
        struct err e;

        pj_agent_put_bytes(&p, 200, "x", 1);
        ASSERT_EQ(decode_raw(PJ_AGENT_LIST, &p, &m, &e), -EINVAL);
        ASSERT_CONTAINS(e.message, "tag 200");
        pj_agent_buf_done(&p);

        /* a known tag the type does not allow */
        pj_agent_put_bytes(&p, PJ_AGENT_T_PATH, "/x", 2);
        ASSERT_EQ(decode_raw(PJ_AGENT_HELLO, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "path");
        pj_agent_buf_done(&p);

        pj_agent_put_bytes(&p, PJ_AGENT_T_PATH, "/x", 2);
        pj_agent_put_bytes(&p, PJ_AGENT_T_PATH, "/y", 2);
        ASSERT_EQ(decode_raw(PJ_AGENT_STAT, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "path");
        ASSERT_CONTAINS(e.message, "twice");
        pj_agent_buf_done(&p);

        pj_agent_put_u32(&p, PJ_AGENT_T_PORT, 80);
        pj_agent_put_u32(&p, PJ_AGENT_T_PORT, 81);
        ASSERT_EQ(decode_raw(PJ_AGENT_FORWARD, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "port");
        pj_agent_buf_done(&p);

        pj_agent_put_u32(&p, PJ_AGENT_T_PORT, 70000);
        ASSERT_EQ(decode_raw(PJ_AGENT_FORWARD, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "port");
        pj_agent_buf_done(&p);

        pj_agent_put_bytes(&p, PJ_AGENT_T_PORT, "\0\0", 2); /* wrong width */
        ASSERT_EQ(decode_raw(PJ_AGENT_FORWARD, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "port");
        pj_agent_buf_done(&p);

        ASSERT_EQ(decode_raw(PJ_AGENT_FORWARD, &p, &m, &e), -EINVAL); /* missing */
        ASSERT_STREQ(e.field, "port");
        ASSERT_CONTAINS(e.message, "required");

        /* EVENT: an event kind out of range, or none */
        pj_agent_put_bytes(&p, PJ_AGENT_T_PATH, "x", 1);
        pj_agent_put_bytes(&p, PJ_AGENT_T_EVENT, "\x09", 1);
        ASSERT_EQ(decode_raw(PJ_AGENT_EVENT, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "event");
        pj_agent_buf_done(&p);
        pj_agent_put_bytes(&p, PJ_AGENT_T_PATH, "x", 1);
        ASSERT_EQ(decode_raw(PJ_AGENT_EVENT, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "event");
        pj_agent_buf_done(&p);

        pj_agent_put_bytes(&p, PJ_AGENT_T_PATH, "/a\0b", 4);
        ASSERT_EQ(decode_raw(PJ_AGENT_READ, &p, &m, &e), -EINVAL);
        ASSERT_CONTAINS(e.message, "NUL");
        pj_agent_buf_done(&p);

        char longpath[PJ_AGENT_MAX_PATH + 2];
        memset(longpath, 'a', sizeof(longpath));
        pj_agent_put_bytes(&p, PJ_AGENT_T_PATH, longpath, PJ_AGENT_MAX_PATH + 1);
        ASSERT_EQ(decode_raw(PJ_AGENT_READ, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "path");
        pj_agent_buf_done(&p);

        pj_agent_put_bytes(&p, PJ_AGENT_T_ARGV, "sh", 2);
        pj_agent_put_bytes(&p, PJ_AGENT_T_ENV, "NOEQUALS", 8);
        ASSERT_EQ(decode_raw(PJ_AGENT_SPAWN, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "env[0]");
        pj_agent_buf_done(&p);

        pj_agent_put_bytes(&p, PJ_AGENT_T_ARGV, "sh", 2);
        pj_agent_put_u32(&p, PJ_AGENT_T_ROWS, 24);
        ASSERT_EQ(decode_raw(PJ_AGENT_SPAWN, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "cols");
        pj_agent_buf_done(&p);

        pj_agent_put_u32(&p, PJ_AGENT_T_SIGNAL, 0);
        ASSERT_EQ(decode_raw(PJ_AGENT_SIGNAL, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "signal");
        pj_agent_buf_done(&p);

        /* a nested entry with a bad field is named by index */
        struct pj_agent_buf ent = { 0 };
        pj_agent_put_u32(&ent, PJ_AGENT_T_PID, 5);
        pj_agent_put_bytes(&ent, PJ_AGENT_T_RUNNING, "\1", 1);
        pj_agent_put_bytes(&p, PJ_AGENT_T_PROC, ent.p, ent.len);
        pj_agent_put_bytes(&ent, PJ_AGENT_T_RUNNING, "\2", 1); /* duplicate */
        pj_agent_put_bytes(&p, PJ_AGENT_T_PROC, ent.p, ent.len);
        ASSERT_EQ(decode_raw(PJ_AGENT_PROCS, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "procs[1].running");
        pj_agent_buf_done(&p);
        pj_agent_buf_done(&ent);
}

TEST(too_many_argv_entries) {
        struct pj_agent_buf p = { 0 };
        struct pj_agent_msg m;
        struct err e;
        for (int i = 0; i < PJ_AGENT_MAX_ARGV; i++)
                pj_agent_put_bytes(&p, PJ_AGENT_T_ARGV, "x", 1);
        ASSERT_OK(decode_raw(PJ_AGENT_SPAWN, &p, &m, &e));
        ASSERT_EQ(m.n_argv, PJ_AGENT_MAX_ARGV);
        pj_agent_msg_done(&m);
        pj_agent_put_bytes(&p, PJ_AGENT_T_ARGV, "x", 1);
        ASSERT_EQ(decode_raw(PJ_AGENT_SPAWN, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "argv[1024]");
        pj_agent_buf_done(&p);

        for (int i = 0; i <= PJ_AGENT_MAX_ENV; i++)
                pj_agent_put_bytes(&p, i ? PJ_AGENT_T_ENV : PJ_AGENT_T_ARGV, "A=1", 3);
        pj_agent_put_bytes(&p, PJ_AGENT_T_ENV, "A=1", 3);
        ASSERT_EQ(decode_raw(PJ_AGENT_SPAWN, &p, &m, &e), -EINVAL);
        ASSERT_STREQ(e.field, "env[1024]");
        pj_agent_buf_done(&p);

        /* the encoder refuses the same */
        char **many = xnew0(char *, PJ_AGENT_MAX_ARGV + 2);
        for (int i = 0; i <= PJ_AGENT_MAX_ARGV; i++)
                many[i] = "x";
        struct pj_agent_buf out = { 0 };
        ASSERT_EQ(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .argv = many,
                                                               .n_argv = PJ_AGENT_MAX_ARGV + 1 },
                                      &out, &e),
                  -EINVAL);
        ASSERT_STREQ(e.field, "argv");
        ASSERT_EQ(out.len, 0);
        pj_agent_buf_done(&out); /* encoding in place may have grown it */
        free(many);
}

TEST(oversized_payload_is_not_encoded) {
        struct pj_agent_buf out = { 0 };
        struct err e;
        uint8_t *big = xcalloc(1, PJ_AGENT_MAX_PAYLOAD);
        ASSERT_EQ(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .data = big,
                                                               .data_len = PJ_AGENT_MAX_DATA + 1 },
                                      &out, &e),
                  -EMSGSIZE);
        ASSERT_OK(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .data = big,
                                                               .data_len = PJ_AGENT_MAX_DATA },
                                      &out, &e));
        ASSERT_EQ(out.len, PJ_AGENT_HEADER_SIZE + PJ_AGENT_MAX_PAYLOAD);
        pj_agent_buf_done(&out);
        free(big);
}

/* Encoding appends to what out holds and, on an error, leaves it as it was (the agent
 * encodes straight into a connection's unsent output). */
TEST(encode_appends_and_a_refused_frame_leaves_no_trace) {
        struct pj_agent_buf out = { 0 };
        struct err e;
        ASSERT_OK(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_END, .id = 1 }, &out, &e));
        size_t one = out.len;
        ASSERT_EQ(one, PJ_AGENT_HEADER_SIZE);
        ASSERT_TRUE(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_SPAWN, .id = 2, .argv = (char *[]) { "", NULL },
                                                                 .n_argv = 1 },
                                        &out, &e) < 0);
        ASSERT_STREQ(e.field, "argv[0]");
        ASSERT_EQ(out.len, one);
        ASSERT_OK(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = 3, .data = (const uint8_t *) "abc", .data_len = 3 },
                                      &out, &e));
        struct pj_agent_header h;
        ASSERT_OK(pj_agent_header_decode(out.p + one, &h, &e));
        ASSERT_EQ(h.type, PJ_AGENT_DATA);
        ASSERT_EQ(h.id, 3);
        ASSERT_EQ(h.len, PJ_AGENT_TLV_HEADER + 3);
        pj_agent_buf_done(&out);
}

/* The 17 bytes a writev sender puts before the data are what the encoder writes there. */
TEST(data_prefix_is_the_encoded_frame_head) {
        struct pj_agent_buf out = { 0 };
        uint8_t pre[PJ_AGENT_HEADER_SIZE + PJ_AGENT_TLV_HEADER];
        size_t sizes[] = { 0, 1, 4096, PJ_AGENT_MAX_DATA };
        uint8_t *d = xcalloc(1, PJ_AGENT_MAX_DATA);
        for (size_t i = 0; i < ELEMENTSOF(sizes); i++) {
                out.len = 0;
                ASSERT_OK(pj_agent_msg_encode(&(struct pj_agent_msg) { .type = PJ_AGENT_DATA, .id = 77, .data = d,
                                                                       .data_len = sizes[i] },
                                              &out, NULL));
                ASSERT_OK(pj_agent_data_prefix(PJ_AGENT_DATA, 77, sizes[i], pre));
                ASSERT_EQ(out.len, sizeof(pre) + sizes[i]);
                ASSERT_TRUE(memcmp(out.p, pre, sizeof(pre)) == 0);
        }
        ASSERT_EQ(pj_agent_data_prefix(PJ_AGENT_DATA, 1, PJ_AGENT_MAX_DATA + 1, pre), -EMSGSIZE);
        ASSERT_EQ(pj_agent_data_prefix(PJ_AGENT_OUTPUT, 1, 1, pre), -EINVAL); /* OUTPUT also carries a stream */
        ASSERT_EQ(pj_agent_data_prefix(PJ_AGENT_SPAWN, 1, 1, pre), -EINVAL);
        ASSERT_EQ(pj_agent_data_prefix(200, 1, 1, pre), -EINVAL);
        pj_agent_buf_done(&out);
        free(d);
}

TEST(secret_compare) {
        ASSERT_TRUE(pj_agent_secret_equal("abc", 3, "abc", 3));
        ASSERT_FALSE(pj_agent_secret_equal("abc", 3, "abd", 3));
        ASSERT_FALSE(pj_agent_secret_equal("abc", 3, "ab", 2));
        ASSERT_FALSE(pj_agent_secret_equal("abc", 3, "abcd", 4));
}

/* Random bytes as payloads of every type: refused or accepted, never a crash (ASan build). */
TEST(random_payloads) {
        unsigned seed = test_seed(19);
        for (int i = 0; i < 20000; i++) {
                size_t n;
                _cleanup_free_ char *in = test_random_input(&seed, 96, true, "", &n);
                if (n > 0)
                        in[0] = (char) (rand_r(&seed) % (PJ_AGENT_T_MAX + 1));
                struct pj_agent_header h = { .len = (uint32_t) n, .type = (uint8_t) (1 + rand_r(&seed) % 40) };
                if (!pj_agent_type_name(h.type))
                        continue;
                struct pj_agent_msg m = { 0 };
                struct err e = { 0 }; /* pj_agent does not clear it: an unfilled refusal reads "" */
                if (pj_agent_msg_decode(&h, (const uint8_t *) in, n, &m, &e) == 0) {
                        struct pj_agent_buf b = { 0 };
                        ASSERT_OK(pj_agent_msg_encode(&m, &b, &e));
                        pj_agent_buf_done(&b);
                } else
                        ASSERT_TRUE(e.message[0]);
                pj_agent_msg_done(&m);
        }
}
