/* pj_agent.c — see pj_agent.h and AGENT-PROTOCOL.md.
 *
 * Table-driven: one row per field tag (kind, bounds, where it lives in struct
 * pj_agent_fields) and one row per message type (which tags it allows and which it
 * requires), so decoding and encoding are one loop each and cannot drift apart. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "pj_agent.h"

enum kind {
        K_NONE,
        K_BOOL,
        K_U8,
        K_U32,
        K_I32,
        K_U64,
        K_I64,
        K_STR,
        K_STRLIST, /* argv, env: the tag repeats */
        K_DATA,    /* bytes, not copied */
        K_ENTRY,   /* nested TLV, repeats */
};

struct field {
        const char *name;
        enum kind kind;
        size_t off;   /* in struct pj_agent_fields (scalars, strings) */
        int64_t min, max; /* scalar range, or string length range */
};

#define F(f) offsetof(struct pj_agent_fields, f)
static const struct field fields[PJ_AGENT_T_MAX + 1] = {
        [PJ_AGENT_T_SECRET] = { "secret", K_STR, F(secret), 1, PJ_AGENT_MAX_SECRET },
        [PJ_AGENT_T_VERSION] = { "version", K_U32, F(version), 0, UINT32_MAX },
        [PJ_AGENT_T_ERRNO] = { "errno", K_U32, F(err), 1, 4095 },
        [PJ_AGENT_T_MESSAGE] = { "message", K_STR, F(message), 0, PJ_AGENT_MAX_MESSAGE },
        [PJ_AGENT_T_ARGV] = { "argv", K_STRLIST, 0, 0, PJ_AGENT_MAX_STRING },
        [PJ_AGENT_T_ENV] = { "env", K_STRLIST, 0, 2, PJ_AGENT_MAX_STRING },
        [PJ_AGENT_T_CWD] = { "cwd", K_STR, F(cwd), 1, PJ_AGENT_MAX_PATH },
        [PJ_AGENT_T_UID] = { "uid", K_U32, F(uid), 0, UINT32_MAX - 1 },
        [PJ_AGENT_T_GID] = { "gid", K_U32, F(gid), 0, UINT32_MAX - 1 },
        [PJ_AGENT_T_STDIN] = { "stdin", K_BOOL, F(stdin_pipe), 0, 1 },
        [PJ_AGENT_T_ROWS] = { "rows", K_U32, F(rows), 1, 65535 },
        [PJ_AGENT_T_COLS] = { "cols", K_U32, F(cols), 1, 65535 },
        [PJ_AGENT_T_TAG] = { "tag", K_STR, F(tag), 0, PJ_AGENT_MAX_TAG },
        [PJ_AGENT_T_KILL_ON_DETACH] = { "kill_on_detach", K_BOOL, F(kill_on_detach), 0, 1 },
        [PJ_AGENT_T_PID] = { "pid", K_U32, F(pid), 1, INT32_MAX },
        [PJ_AGENT_T_STREAM] = { "stream", K_U8, F(stream), 1, 2 },
        [PJ_AGENT_T_DATA] = { "data", K_DATA, 0, 0, PJ_AGENT_MAX_DATA },
        [PJ_AGENT_T_CODE] = { "code", K_I32, F(code), -1, 255 },
        [PJ_AGENT_T_SIGNAL] = { "signal", K_U32, F(signo), 0, 64 },
        [PJ_AGENT_T_PATH] = { "path", K_STR, F(path), 1, PJ_AGENT_MAX_PATH },
        [PJ_AGENT_T_TO] = { "to", K_STR, F(to), 1, PJ_AGENT_MAX_PATH },
        [PJ_AGENT_T_MODE] = { "mode", K_U32, F(mode), 0, 07777 },
        [PJ_AGENT_T_PARENTS] = { "parents", K_BOOL, F(parents), 0, 1 },
        [PJ_AGENT_T_RECURSIVE] = { "recursive", K_BOOL, F(recursive), 0, 1 },
        [PJ_AGENT_T_FTYPE] = { "type", K_U8, F(ftype), 1, 4 },
        [PJ_AGENT_T_SIZE] = { "size", K_U64, F(size), 0, 0 },
        [PJ_AGENT_T_MTIME] = { "mtime", K_I64, F(mtime_ns), 0, 0 },
        [PJ_AGENT_T_PORT] = { "port", K_U32, F(port), 1, 65535 },
        [PJ_AGENT_T_PROC] = { "procs", K_ENTRY, 0, 0, 0 },
        [PJ_AGENT_T_DIRENT] = { "entries", K_ENTRY, 0, 0, 0 },
        [PJ_AGENT_T_NAME] = { "name", K_STR, F(name), 1, PJ_AGENT_MAX_NAME },
        [PJ_AGENT_T_RUNNING] = { "running", K_BOOL, F(running), 0, 1 },
        [PJ_AGENT_T_TRUNCATED] = { "truncated", K_BOOL, F(truncated), 0, 1 },
        [PJ_AGENT_T_BASE_ENV] = { "base_env", K_BOOL, F(base_env), 0, 1 },
        [PJ_AGENT_T_EVENT] = { "event", K_U8, F(event), 1, 5 },
};
#undef F

#define B(t) PJ_AGENT_BIT(PJ_AGENT_T_##t)
struct spec {
        const char *name;
        uint64_t allow, require;
};
static const struct spec specs[256] = {
        [PJ_AGENT_HELLO] = { "HELLO", B(SECRET), B(SECRET) },
        [PJ_AGENT_HELLO_OK] = { "HELLO_OK", B(VERSION), B(VERSION) },
        [PJ_AGENT_ERROR] = { "ERROR", B(ERRNO) | B(MESSAGE) | B(PATH), B(ERRNO) },
        [PJ_AGENT_OK] = { "OK", 0, 0 },
        [PJ_AGENT_DATA] = { "DATA", B(DATA), B(DATA) },
        [PJ_AGENT_END] = { "END", B(TRUNCATED), 0 },
        [PJ_AGENT_SPAWN] = { "SPAWN",
                             B(ARGV) | B(ENV) | B(CWD) | B(UID) | B(GID) | B(STDIN) | B(ROWS) | B(COLS) | B(TAG) |
                                     B(KILL_ON_DETACH) | B(BASE_ENV),
                             B(ARGV) },
        [PJ_AGENT_SPAWNED] = { "SPAWNED", B(PID), B(PID) },
        [PJ_AGENT_STDIN] = { "STDIN", B(DATA) | B(PID), B(DATA) },
        [PJ_AGENT_STDIN_CLOSE] = { "STDIN_CLOSE", B(PID), 0 },
        [PJ_AGENT_SIGNAL] = { "SIGNAL", B(SIGNAL) | B(PID), B(SIGNAL) },
        [PJ_AGENT_RESIZE] = { "RESIZE", B(ROWS) | B(COLS) | B(PID), B(ROWS) | B(COLS) },
        [PJ_AGENT_OUTPUT] = { "OUTPUT", B(STREAM) | B(DATA), B(STREAM) | B(DATA) },
        [PJ_AGENT_EXIT] = { "EXIT", B(CODE) | B(SIGNAL), B(CODE) | B(SIGNAL) },
        [PJ_AGENT_LIST] = { "LIST", 0, 0 },
        [PJ_AGENT_PROCS] = { "PROCS", B(PROC), 0 },
        [PJ_AGENT_ATTACH] = { "ATTACH", B(PID), B(PID) },
        [PJ_AGENT_READ] = { "READ", B(PATH), B(PATH) },
        [PJ_AGENT_WRITE] = { "WRITE", B(PATH) | B(MODE) | B(PARENTS), B(PATH) },
        [PJ_AGENT_STAT] = { "STAT", B(PATH), B(PATH) },
        [PJ_AGENT_STAT_OK] = { "STAT_OK", B(FTYPE) | B(SIZE) | B(MODE) | B(MTIME) | B(UID) | B(GID), B(FTYPE) | B(SIZE) | B(MODE) | B(MTIME) },
        [PJ_AGENT_LISTDIR] = { "LISTDIR", B(PATH), B(PATH) },
        [PJ_AGENT_DIRENTS] = { "DIRENTS", B(DIRENT), 0 },
        [PJ_AGENT_MKDIR] = { "MKDIR", B(PATH) | B(PARENTS) | B(MODE), B(PATH) },
        [PJ_AGENT_MOVE] = { "MOVE", B(PATH) | B(TO), B(PATH) | B(TO) },
        [PJ_AGENT_REMOVE] = { "REMOVE", B(PATH) | B(RECURSIVE), B(PATH) },
        [PJ_AGENT_FORWARD] = { "FORWARD", B(PORT), B(PORT) },
        [PJ_AGENT_WATCH] = { "WATCH", B(PATH) | B(RECURSIVE), B(PATH) },
        [PJ_AGENT_EVENT] = { "EVENT", B(PATH) | B(EVENT) | B(FTYPE), B(PATH) | B(EVENT) },
        [PJ_AGENT_PARK] = { "PARK", 0, 0 },
};
/* The nested entries: a PROCS process and a DIRENTS directory entry. */
static const struct spec spec_proc = { "procs", B(PID) | B(TAG) | B(RUNNING) | B(CODE) | B(SIGNAL), B(PID) | B(RUNNING) };
static const struct spec spec_dirent = { "entries", B(NAME) | B(FTYPE) | B(SIZE) | B(MODE) | B(MTIME) | B(UID) | B(GID), B(NAME) | B(FTYPE) };
#undef B

const char *pj_agent_type_name(uint8_t type) { return specs[type].name; }

static void put_be32(uint8_t *p, uint32_t v) {
        p[0] = v >> 24;
        p[1] = v >> 16;
        p[2] = v >> 8;
        p[3] = v;
}
static uint32_t get_be32(const uint8_t *p) {
        return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8 | p[3];
}
static uint64_t get_be64(const uint8_t *p) { return (uint64_t) get_be32(p) << 32 | get_be32(p + 4); }

void pj_agent_header_encode(uint8_t out[PJ_AGENT_HEADER_SIZE], const struct pj_agent_header *h) {
        put_be32(out, h->len);
        out[4] = h->type;
        out[5] = h->flags;
        out[6] = out[7] = 0;
        put_be32(out + 8, h->id);
}

int pj_agent_header_decode(const uint8_t buf[PJ_AGENT_HEADER_SIZE], struct pj_agent_header *ret, struct err *err) {
        uint32_t len = get_be32(buf);
        if (len > PJ_AGENT_MAX_PAYLOAD)
                return pj_error_set(err, "length", "The frame claims a %u-byte payload; the limit is %u bytes.", len,
                                    PJ_AGENT_MAX_PAYLOAD);
        if (!specs[buf[4]].name)
                return pj_error_set(err, "type", "Unknown frame type %u.", buf[4]);
        if (buf[5] != 0)
                return pj_error_set(err, "flags", "Frame flags must be 0 in protocol version %d (got 0x%02x).",
                                    PJ_AGENT_VERSION, buf[5]);
        if (buf[6] || buf[7])
                return pj_error_set(err, "reserved", "The reserved header bytes must be 0.");
        *ret = (struct pj_agent_header) { .len = len, .type = buf[4], .flags = buf[5], .id = get_be32(buf + 8) };
        return 0;
}

void pj_agent_buf_done(struct pj_agent_buf *b) {
        free(b->p);
        *b = (struct pj_agent_buf) { 0 };
}

void pj_agent_buf_put(struct pj_agent_buf *b, const void *p, size_t n) {
        if (n == 0)
                return;
        pj_agent_buf_reserve(b, n);
        memcpy(b->p + b->len, p, n);
        b->len += n;
}

void pj_agent_buf_reserve(struct pj_agent_buf *b, size_t n) {
        if (b->cap - b->len >= n)
                return;
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
                cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
}

void pj_agent_put_bytes(struct pj_agent_buf *b, uint8_t tag, const void *p, size_t n) {
        uint8_t h[PJ_AGENT_TLV_HEADER] = { tag };
        put_be32(h + 1, (uint32_t) n);
        pj_agent_buf_put(b, h, sizeof(h));
        pj_agent_buf_put(b, p, n);
}

void pj_agent_put_u32(struct pj_agent_buf *b, uint8_t tag, uint32_t v) {
        uint8_t p[4];
        put_be32(p, v);
        pj_agent_put_bytes(b, tag, p, 4);
}

static void put_u64(struct pj_agent_buf *b, uint8_t tag, uint64_t v) {
        uint8_t p[8];
        put_be32(p, (uint32_t) (v >> 32));
        put_be32(p + 4, (uint32_t) v);
        pj_agent_put_bytes(b, tag, p, 8);
}

int pj_agent_tlv_next(struct pj_agent_tlv_iter *it, uint8_t *ret_tag, const uint8_t **ret_val, uint32_t *ret_len) {
        if (it->off >= it->n)
                return 0;
        size_t left = it->n - it->off;
        if (left < PJ_AGENT_TLV_HEADER) {
                it->off = it->n;
                return -EINVAL;
        }
        const uint8_t *h = it->p + it->off;
        uint32_t len = get_be32(h + 1);
        if (len > left - PJ_AGENT_TLV_HEADER) {
                it->off = it->n;
                return -EINVAL;
        }
        *ret_tag = h[0];
        *ret_val = h + PJ_AGENT_TLV_HEADER;
        *ret_len = len;
        it->off += PJ_AGENT_TLV_HEADER + (size_t) len;
        return 1;
}

void pj_agent_fields_done(struct pj_agent_fields *f) {
        free_many(f->secret, f->message, f->cwd, f->tag, f->path, f->to, f->name);
        *f = (struct pj_agent_fields) { 0 };
}

static void strv_free(char **v, size_t n) {
        if (!v)
                return;
        for (size_t i = 0; i < n; i++)
                free(v[i]);
        free(v);
}

void pj_agent_msg_done(struct pj_agent_msg *m) {
        pj_agent_fields_done(&m->f);
        strv_free(m->argv, m->n_argv);
        strv_free(m->env, m->n_env);
        for (size_t i = 0; i < m->n_entries; i++)
                pj_agent_fields_done(&m->entries[i]);
        free(m->entries);
        *m = (struct pj_agent_msg) { 0 };
}

/* "name" or "prefix[i].name" into buf. */
static const char *fname(char buf[128], const char *prefix, size_t idx, const char *name) {
        if (prefix)
                snprintf(buf, 128, "%s[%zu].%s", prefix, idx, name);
        else
                snprintf(buf, 128, "%s", name);
        return buf;
}

/* A string field's bytes: length in range, no NUL. Returns a fresh copy in *ret. */
static int take_str(const struct field *fd, const char *fld, const uint8_t *v, uint32_t len, char **ret,
                    struct err *err) {
        if (len < fd->min || len > fd->max)
                return pj_error_set(err, fld, "Field %s must be %lld to %lld bytes long (got %u).", fld,
                                    (long long) fd->min, (long long) fd->max, len);
        if (memchr(v, 0, len))
                return pj_error_set(err, fld, "Field %s contains a NUL byte.", fld);
        *ret = xstrndup((const char *) v, len);
        return 0;
}

/* Decodes one scalar or string field into f. */
static int take_field(struct pj_agent_fields *f, uint8_t tag, const char *fld, const uint8_t *v, uint32_t len,
                      struct err *err) {
        const struct field *fd = &fields[tag];
        void *dst = (char *) f + fd->off;
        int64_t x = 0;
        uint32_t want = 0;

        switch (fd->kind) {
        case K_BOOL:
        case K_U8:
                want = 1;
                break;
        case K_U32:
        case K_I32:
                want = 4;
                break;
        case K_U64:
        case K_I64:
                want = 8;
                break;
        case K_STR:
                return take_str(fd, fld, v, len, (char **) dst, err);
        case K_NONE:
        case K_STRLIST:
        case K_DATA:
        case K_ENTRY:
                return pj_error_set(err, fld, "Field %s is not a scalar.", fld); /* not reached */
        }
        if (len != want)
                return pj_error_set(err, fld, "Field %s must be %u bytes long (got %u).", fld, want, len);
        switch (fd->kind) {
        case K_BOOL:
        case K_U8:
                x = v[0];
                break;
        case K_U32:
                x = get_be32(v);
                break;
        case K_I32:
                x = (int32_t) get_be32(v);
                break;
        case K_U64:
                *(uint64_t *) dst = get_be64(v);
                return 0;
        case K_I64:
                *(int64_t *) dst = (int64_t) get_be64(v);
                return 0;
        case K_NONE:
        case K_STR:
        case K_STRLIST:
        case K_DATA:
        case K_ENTRY:
                break;
        }
        if (x < fd->min || x > fd->max)
                return pj_error_set(err, fld, "Field %s must be between %lld and %lld (got %lld).", fld, (long long) fd->min,
                                    (long long) fd->max, (long long) x);
        switch (fd->kind) {
        case K_BOOL:
                *(bool *) dst = x;
                break;
        case K_U8:
                *(uint8_t *) dst = (uint8_t) x;
                break;
        case K_U32:
                *(uint32_t *) dst = (uint32_t) x;
                break;
        case K_I32:
                *(int32_t *) dst = (int32_t) x;
                break;
        case K_NONE:
        case K_U64:
        case K_I64:
        case K_STR:
        case K_STRLIST:
        case K_DATA:
        case K_ENTRY:
                break;
        }
        return 0;
}

/* The fields of a nested entry (no lists inside). */
static int decode_entry(const struct spec *sp, size_t idx, const uint8_t *p, uint32_t n, struct pj_agent_fields *f,
                        struct err *err) {
        struct pj_agent_tlv_iter it = { p, n, 0 };
        const uint8_t *v;
        uint32_t len;
        uint8_t tag;
        char fld[128];
        int r;

        while ((r = pj_agent_tlv_next(&it, &tag, &v, &len)) > 0) {
                if (tag == 0 || tag > PJ_AGENT_T_MAX || !(sp->allow & PJ_AGENT_BIT(tag)))
                        return pj_error_set(err, fname(fld, sp->name, idx, "?"), "Field tag %u is not allowed in %s[%zu].",
                                            tag, sp->name, idx);
                fname(fld, sp->name, idx, fields[tag].name);
                if (PJ_AGENT_HAS(f, tag))
                        return pj_error_set(err, fld, "Field %s appears twice.", fld);
                r = take_field(f, tag, fld, v, len, err);
                if (r < 0)
                        return r;
                f->present |= PJ_AGENT_BIT(tag);
        }
        if (r < 0)
                return pj_error_set(err, fname(fld, sp->name, idx, "?"), "%s[%zu] ends inside a field.", sp->name, idx);
        uint64_t missing = sp->require & ~f->present;
        if (missing) {
                int t = __builtin_ctzll(missing);
                fname(fld, sp->name, idx, fields[t].name);
                return pj_error_set(err, fld, "Field %s is required.", fld);
        }
        if (PJ_AGENT_HAS(f, PJ_AGENT_T_NAME) && strchr(f->name, '/'))
                return pj_error_set(err, fld, "Field %s contains a '/'.", fname(fld, sp->name, idx, "name"));
        return 0;
}

static int decode(const struct pj_agent_header *h, const uint8_t *payload, size_t n, struct pj_agent_msg *m,
                  struct err *err) {
        const struct spec *sp = &specs[h->type];
        struct pj_agent_tlv_iter it = { payload, n, 0 };
        const uint8_t *v;
        uint32_t len;
        uint8_t tag;
        char fld[128];
        size_t cap_argv = 0, cap_env = 0, cap_ent = 0;
        int r;

        m->type = h->type;
        m->id = h->id;
        while ((r = pj_agent_tlv_next(&it, &tag, &v, &len)) > 0) {
                if (tag == 0 || tag > PJ_AGENT_T_MAX || !(sp->allow & PJ_AGENT_BIT(tag)))
                        return pj_error_set(err, tag && tag <= PJ_AGENT_T_MAX ? fields[tag].name : "?",
                                            "Field tag %u (%s) is not allowed in %s.", tag,
                                            tag && tag <= PJ_AGENT_T_MAX ? fields[tag].name : "unknown", sp->name);
                const struct field *fd = &fields[tag];
                switch (fd->kind) {
                case K_STRLIST: {
                        bool is_argv = tag == PJ_AGENT_T_ARGV;
                        char ***vec = is_argv ? &m->argv : &m->env;
                        size_t *cnt = is_argv ? &m->n_argv : &m->n_env, *cap = is_argv ? &cap_argv : &cap_env;
                        size_t max = is_argv ? PJ_AGENT_MAX_ARGV : PJ_AGENT_MAX_ENV;
                        snprintf(fld, sizeof(fld), "%s[%zu]", fd->name, *cnt);
                        if (*cnt >= max)
                                return pj_error_set(err, fld, "Too many %s entries: the limit is %zu.", fd->name, max);
                        if (*cnt + 2 > *cap) {
                                *cap = *cap ? *cap * 2 : 8;
                                *vec = xrealloc(*vec, *cap * sizeof(char *));
                        }
                        char *s = NULL;
                        r = take_str(fd, fld, v, len, &s, err);
                        if (r < 0)
                                return r;
                        (*vec)[(*cnt)++] = s;
                        (*vec)[*cnt] = NULL;
                        if (!is_argv && (s[0] == '=' || !strchr(s, '=')))
                                return pj_error_set(err, fld, "Field %s must look like NAME=value.", fld);
                        break;
                }
                case K_DATA:
                        if (PJ_AGENT_HAS(&m->f, tag))
                                return pj_error_set(err, fd->name, "Field %s appears twice.", fd->name);
                        m->data = v;
                        m->data_len = len;
                        break;
                case K_ENTRY: {
                        const struct spec *es = tag == PJ_AGENT_T_PROC ? &spec_proc : &spec_dirent;
                        size_t max = tag == PJ_AGENT_T_PROC ? PJ_AGENT_MAX_PROCS : PJ_AGENT_MAX_DIRENTS;
                        if (m->n_entries >= max)
                                return pj_error_set(err, fd->name, "Too many %s: the limit is %zu per frame.", fd->name,
                                                    max);
                        if (m->n_entries + 1 > cap_ent) {
                                cap_ent = cap_ent ? cap_ent * 2 : 8;
                                m->entries = xrealloc(m->entries, cap_ent * sizeof(*m->entries));
                        }
                        struct pj_agent_fields *e = &m->entries[m->n_entries++];
                        *e = (struct pj_agent_fields) { 0 };
                        r = decode_entry(es, m->n_entries - 1, v, len, e, err);
                        if (r < 0)
                                return r;
                        break;
                }
                case K_NONE:
                case K_BOOL:
                case K_U8:
                case K_U32:
                case K_I32:
                case K_U64:
                case K_I64:
                case K_STR:
                        if (PJ_AGENT_HAS(&m->f, tag))
                                return pj_error_set(err, fd->name, "Field %s appears twice.", fd->name);
                        r = take_field(&m->f, tag, fd->name, v, len, err);
                        if (r < 0)
                                return r;
                        break;
                }
                m->f.present |= PJ_AGENT_BIT(tag);
        }
        if (r < 0)
                return pj_error_set(err, "", "The %s payload ends inside a field (truncated frame).", sp->name);
        uint64_t missing = sp->require & ~m->f.present;
        if (missing) {
                int t = __builtin_ctzll(missing);
                return pj_error_set(err, fields[t].name, "Field %s is required in %s.", fields[t].name, sp->name);
        }
        /* Rules across fields. */
        if (h->type == PJ_AGENT_SPAWN && PJ_AGENT_HAS(&m->f, PJ_AGENT_T_ROWS) != PJ_AGENT_HAS(&m->f, PJ_AGENT_T_COLS))
                return pj_error_set(err, PJ_AGENT_HAS(&m->f, PJ_AGENT_T_ROWS) ? "cols" : "rows",
                                    "A PTY needs both rows and cols.");
        if (h->type == PJ_AGENT_SPAWN && m->n_argv && !m->argv[0][0])
                return pj_error_set(err, "argv[0]", "Field argv[0] (the program) is empty.");
        if (h->type == PJ_AGENT_SIGNAL && m->f.signo == 0)
                return pj_error_set(err, "signal", "Field signal must be between 1 and 64 (got 0).");
        if (h->type == PJ_AGENT_EXIT && (m->f.code < 0) != (m->f.signo != 0))
                return pj_error_set(err, "code", "EXIT has code -1 exactly when a signal ended the process.");
        return 0;
}

int pj_agent_msg_decode(const struct pj_agent_header *h, const uint8_t *payload, size_t len, struct pj_agent_msg *ret,
                        struct err *err) {
        struct pj_agent_msg m = { 0 };

        if (!specs[h->type].name)
                return pj_error_set(err, "type", "Unknown frame type %u.", h->type);
        if (len != h->len || len > PJ_AGENT_MAX_PAYLOAD)
                return pj_error_set(err, "length", "The payload is %zu bytes, the header says %u.", len, h->len);
        int r = decode(h, payload, len, &m, err);
        if (r < 0) {
                pj_agent_msg_done(&m);
                return r;
        }
        *ret = m;
        return 0;
}

/* Emits the scalar/string fields of f that spec allows, in tag order: required ones always,
 * optional ones when present (strings also when set). */
static int encode_fields(const struct spec *sp, const struct pj_agent_fields *f, struct pj_agent_buf *b,
                         struct err *err) {
        for (uint8_t tag = 1; tag <= PJ_AGENT_T_MAX; tag++) {
                const struct field *fd = &fields[tag];
                if (!(sp->allow & PJ_AGENT_BIT(tag)))
                        continue;
                const void *src = (const char *) f + fd->off;
                bool req = sp->require & PJ_AGENT_BIT(tag);
                int64_t x = 0;
                switch (fd->kind) {
                case K_STR: {
                        const char *s = *(char *const *) src;
                        if (!s && (req || PJ_AGENT_HAS(f, tag)))
                                return pj_error_set(err, fd->name, "Field %s is required in %s.", fd->name, sp->name);
                        if (!s)
                                continue;
                        size_t n = strlen(s);
                        if ((int64_t) n < fd->min || (int64_t) n > fd->max)
                                return pj_error_set(err, fd->name, "Field %s must be %lld to %lld bytes long (got %zu).",
                                                    fd->name, (long long) fd->min, (long long) fd->max, n);
                        pj_agent_put_bytes(b, tag, s, n);
                        continue;
                }
                case K_NONE:
                case K_STRLIST:
                case K_DATA:
                case K_ENTRY:
                        continue;
                case K_BOOL:
                        x = *(const bool *) src;
                        break;
                case K_U8:
                        x = *(const uint8_t *) src;
                        break;
                case K_U32:
                        x = *(const uint32_t *) src;
                        break;
                case K_I32:
                        x = *(const int32_t *) src;
                        break;
                case K_U64:
                case K_I64:
                        break;
                }
                if (!req && !PJ_AGENT_HAS(f, tag))
                        continue;
                if (fd->kind == K_U64 || fd->kind == K_I64) {
                        put_u64(b, tag, *(const uint64_t *) src);
                        continue;
                }
                if (x < fd->min || x > fd->max)
                        return pj_error_set(err, fd->name, "Field %s must be between %lld and %lld (got %lld).", fd->name,
                                            (long long) fd->min, (long long) fd->max, (long long) x);
                if (fd->kind == K_BOOL || fd->kind == K_U8) {
                        uint8_t c = (uint8_t) x;
                        pj_agent_put_bytes(b, tag, &c, 1);
                } else
                        pj_agent_put_u32(b, tag, (uint32_t) x);
        }
        return 0;
}

static int encode_strv(uint8_t tag, char *const *v, size_t n, size_t max, struct pj_agent_buf *b, struct err *err) {
        if (n > max)
                return pj_error_set(err, fields[tag].name, "Too many %s entries: the limit is %zu.", fields[tag].name, max);
        for (size_t i = 0; i < n; i++) {
                size_t len = strlen(v[i]);
                if (len > PJ_AGENT_MAX_STRING)
                        return pj_error_set(err, fields[tag].name, "Field %s[%zu] is longer than %u bytes.",
                                            fields[tag].name, i, PJ_AGENT_MAX_STRING);
                pj_agent_put_bytes(b, tag, v[i], len);
        }
        return 0;
}

static int pj_agent_msg_encode_body(const struct spec *sp, const struct pj_agent_msg *m, struct pj_agent_buf *b,
                                    struct err *err);

int pj_agent_msg_encode(const struct pj_agent_msg *m, struct pj_agent_buf *out, struct err *err) {
        const struct spec *sp = &specs[m->type];
        uint8_t hdr[PJ_AGENT_HEADER_SIZE] = { 0 };
        int r;

        if (!sp->name)
                return pj_error_set(err, "type", "Unknown frame type %u.", m->type);
        /* Written in place at the end of out (a frame carrying data is one copy of it, the
         * buffer grown once); on an error out is cut back to what it held. */
        size_t start = out->len;
        if ((sp->allow & PJ_AGENT_BIT(PJ_AGENT_T_DATA)) && m->data_len <= PJ_AGENT_MAX_DATA)
                pj_agent_buf_reserve(out, PJ_AGENT_HEADER_SIZE + 256 + PJ_AGENT_TLV_HEADER + m->data_len);
        pj_agent_buf_put(out, hdr, sizeof(hdr)); /* filled below */
        r = pj_agent_msg_encode_body(sp, m, out, err);
        if (r < 0) {
                out->len = start;
                return r;
        }
        size_t plen = out->len - start - PJ_AGENT_HEADER_SIZE;
        if (plen > PJ_AGENT_MAX_PAYLOAD) {
                out->len = start;
                return -EMSGSIZE;
        }
        pj_agent_header_encode(out->p + start, &(struct pj_agent_header) { .len = (uint32_t) plen, .type = m->type, .id = m->id });
        return 0;
}

static int pj_agent_msg_encode_body(const struct spec *sp, const struct pj_agent_msg *m, struct pj_agent_buf *b,
                                    struct err *err) {
        int r = encode_fields(sp, &m->f, b, err);
        if (r < 0)
                return r;
        if (sp->allow & PJ_AGENT_BIT(PJ_AGENT_T_ARGV)) {
                if (m->n_argv == 0 || !m->argv[0][0])
                        return pj_error_set(err, "argv[0]", "Field argv[0] (the program) is required.");
                if ((r = encode_strv(PJ_AGENT_T_ARGV, m->argv, m->n_argv, PJ_AGENT_MAX_ARGV, b, err)) < 0 ||
                    (r = encode_strv(PJ_AGENT_T_ENV, m->env, m->n_env, PJ_AGENT_MAX_ENV, b, err)) < 0)
                        return r;
        }
        if (sp->allow & PJ_AGENT_BIT(PJ_AGENT_T_DATA)) {
                if (m->data_len > PJ_AGENT_MAX_DATA)
                        return -EMSGSIZE;
                pj_agent_put_bytes(b, PJ_AGENT_T_DATA, m->data, m->data_len);
        }
        uint8_t etag = sp->allow & PJ_AGENT_BIT(PJ_AGENT_T_PROC)     ? PJ_AGENT_T_PROC
                       : sp->allow & PJ_AGENT_BIT(PJ_AGENT_T_DIRENT) ? PJ_AGENT_T_DIRENT
                                                                     : 0;
        if (etag) {
                const struct spec *es = etag == PJ_AGENT_T_PROC ? &spec_proc : &spec_dirent;
                size_t max = etag == PJ_AGENT_T_PROC ? PJ_AGENT_MAX_PROCS : PJ_AGENT_MAX_DIRENTS;
                if (m->n_entries > max)
                        return pj_error_set(err, fields[etag].name, "Too many %s: the limit is %zu per frame.",
                                            fields[etag].name, max);
                for (size_t i = 0; i < m->n_entries; i++) {
                        _cleanup_(pj_agent_buf_done) struct pj_agent_buf e = { 0 };
                        r = encode_fields(es, &m->entries[i], &e, err);
                        if (r < 0)
                                return r;
                        pj_agent_put_bytes(b, etag, e.p, e.len);
                }
        }
        return 0;
}

int pj_agent_data_prefix(uint8_t type, uint32_t id, size_t data_len,
                         uint8_t out[PJ_AGENT_HEADER_SIZE + PJ_AGENT_TLV_HEADER]) {
        if (!specs[type].name || specs[type].allow != PJ_AGENT_BIT(PJ_AGENT_T_DATA))
                return -EINVAL;
        if (data_len > PJ_AGENT_MAX_DATA)
                return -EMSGSIZE;
        pj_agent_header_encode(out, &(struct pj_agent_header) { .len = (uint32_t) (PJ_AGENT_TLV_HEADER + data_len),
                                                                .type = type, .id = id });
        out[PJ_AGENT_HEADER_SIZE] = PJ_AGENT_T_DATA;
        put_be32(out + PJ_AGENT_HEADER_SIZE + 1, (uint32_t) data_len);
        return 0;
}

bool pj_agent_secret_equal(const char *a, size_t alen, const char *b, size_t blen) {
        /* Walk the expected secret's full length whatever the other's is. */
        volatile unsigned char d = alen != blen;
        for (size_t i = 0; i < alen; i++)
                d |= (unsigned char) a[i] ^ (unsigned char) (i < blen ? b[i] : 0);
        return d == 0;
}
