/* json.h — helpers over cJSON for untrusted input and compact output.
 *
 * cJSON's own allocator stays in place; every NULL it returns on allocation
 * failure ends in oom(), so callers never see a half-built object.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "err.h"

/* Parses len bytes of untrusted input (need not be NUL-terminated) as one
 * JSON value with optional surrounding whitespace (space, tab, CR, LF).
 *  -EMSGSIZE  len > max_len ("JSON document too large ...")
 *  -EINVAL    "Malformed JSON at byte N[: why]" for invalid JSON, trailing
 *             garbage, NUL or raw control bytes, invalid UTF-8, \u0000 (it
 *             would silently cut C strings short);
 *             "JSON nested too deeply (max D)" beyond max_depth nested
 *             arrays/objects (checked before cJSON recurses);
 *             "JSON document has more than N values ..." when it may hold
 *             more than JSON_MAX_VALUES values (checked before cJSON
 *             allocates a node, so memory stays near len).
 * max_depth is capped at cJSON's own limit (CJSON_NESTING_LIMIT, 1000).
 * On success *ret is owned by the caller (cJSON_Delete / _cleanup_json_). */
#define JSON_MAX_VALUES 10000
int json_parse(const char *buf, size_t len, size_t max_len, int max_depth, cJSON **ret, struct err *err);
/* json_parse with another value cap than JSON_MAX_VALUES (for bounded bulk replies). */
int json_parse_n(const char *buf, size_t len, size_t max_len, int max_depth, size_t max_values, cJSON **ret,
                 struct err *err);

/* Compact text, caller frees with free(). j NULL prints "null". */
char *json_print(const cJSON *j);

/* Add to object o and return the new item (owned by o). */
cJSON *json_add_str(cJSON *o, const char *k, const char *v);   /* v NULL -> JSON null */
/* ms since the epoch as RFC 3339 UTC with milliseconds; 0 -> JSON null. */
void json_add_time(cJSON *o, const char *k, int64_t ms);

/* A record's members by table, in the table's order: each entry names the key, how the
 * field is rendered and where it is in the record (offsetof). JSON_STR: a char * (NULL ->
 * null); JSON_CHARS: a char array; JSON_INT: an int64_t; JSON_BOOL: a bool; JSON_TIME: an
 * int64_t of ms (0 -> null); JSON_SIZE: an int64_t, negative -> null. */
enum json_kind { JSON_STR, JSON_CHARS, JSON_INT, JSON_BOOL, JSON_TIME, JSON_SIZE };
struct json_member {
        const char *key;
        enum json_kind kind;
        size_t off;
};
#define JSON_MEMBER(kind, key, type, field) { key, kind, offsetof(type, field) }
void json_add_members(cJSON *o, const void *rec, const struct json_member *m, size_t n);
/* Exact for the whole int64 range: cJSON would print integers of 16 or more
 * digits rounded, so those become a raw item (cJSON_IsRaw, not IsNumber) that
 * prints as plain digits; json_get_int reads either kind back. */
cJSON *json_add_int(cJSON *o, const char *k, int64_t v);
/* A string of len bytes (UTF-8, may contain NUL bytes, v may be NULL when len is 0).
 * Without a NUL it is a plain string item; with one it becomes a raw item (cJSON_IsRaw)
 * holding the quoted, escaped text, NUL as \u0000, because cJSON strings end at the
 * first NUL. Either way json_print writes every byte. */
cJSON *json_add_strn(cJSON *o, const char *k, const char *v, size_t len);
cJSON *json_add_bool(cJSON *o, const char *k, bool v);

/* Borrowed pointer; NULL when missing or not a string. Keys are case-sensitive. */
const char *json_get_str(const cJSON *o, const char *k);
/* True only for an integral number that is certainly exact: cJSON keeps
 * numbers as doubles, so magnitudes of 2^53 and above (where input digits may
 * already have been rounded) are refused rather than returned wrong. Raw items
 * from json_add_int are read back exactly. */
bool json_get_int(const cJSON *o, const char *k, int64_t *ret);
