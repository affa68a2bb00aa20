/* pj_json.h — the strict JSON reader behind every public-API body parser.
 *
 * We carry our own small reader instead of cJSON here because the checks we
 * promise users need information cJSON throws away: whether a number was
 * written as an integer (2 vs 2.0 vs 2e0), whether a string was valid UTF-8,
 * duplicate keys (a classic parser-differential trick), and the byte offset
 * of a syntax error. It builds a small tree that the validators in pj_api*.c
 * walk with the field path at hand.
 *
 * Untrusted input: any bytes are safe. RFC 8259 strictly (no comments, no
 * trailing commas, no BOM, no raw control characters in strings), strings
 * valid UTF-8 with escapes decoded (lone surrogates refused), nesting at most
 * PJ_JSON_MAX_DEPTH containers, and at most max_nodes values in the document
 * (every scalar, array and object counts one), counted before each value is
 * allocated so a body of a million tiny values never builds a million nodes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "cleanup.h"
#include "pj.h"

#define PJ_JSON_MAX_DEPTH 32
/* Values per request body. The largest valid body, a batch upload of 100
 * files, has 302; this leaves room for any honest request and bounds the
 * tree of a hostile 8 MiB one to about a megabyte. */
#define PJ_JSON_MAX_NODES 10000

enum pj_json_type {
        PJ_JSON_NULL,
        PJ_JSON_FALSE,
        PJ_JSON_TRUE,
        PJ_JSON_NUMBER,
        PJ_JSON_STRING,
        PJ_JSON_ARRAY,
        PJ_JSON_OBJECT,
};

struct pj_json {
        enum pj_json_type type;
        char *key; /* object members: decoded key (may hold NUL; see key_len) */
        size_t key_len;
        char *str; /* strings: decoded, NUL-terminated (may hold NUL); numbers: the literal text */
        size_t str_len;
        struct pj_json *child, *last, *next; /* arrays and objects: members in order */
        size_t n;                            /* number of members */
};

/* Frees v, its children and its later siblings. NULL-safe; returns NULL. */
struct pj_json *pj_json_free(struct pj_json *v);
DEFINE_TRIVIAL_CLEANUP_FUNC(struct pj_json *, pj_json_free)

/* Parses len bytes as one JSON value with optional surrounding whitespace.
 * 0 and *ret (the caller frees it with pj_json_free), or -EINVAL with err
 * filled (field ""): "Malformed JSON at byte N: why", "Invalid UTF-8 ...",
 * "JSON nesting deeper than 32 levels ...", "JSON document has more than N
 * values ...". */
int pj_json_parse(const char *buf, size_t len, size_t max_nodes, struct pj_json **ret, struct err *err);

/* A request body that must be one JSON object, with PJ_JSON_MAX_NODES.
 * empty_ok: len 0 reads as {}; otherwise an empty body is an error. */
int pj_json_parse_object(const char *body, size_t len, bool empty_ok, struct pj_json **ret, struct err *err);

/* Whether object member m has exactly this key (keys may hold NUL). */
bool pj_json_key_is(const struct pj_json *m, const char *key);
/* The first member of obj named key, or NULL when absent or JSON null. Borrowed. */
const struct pj_json *pj_json_member(const struct pj_json *obj, const char *key);
