/* conf.h — small INI-style configuration files with file:line errors.
 *
 *   # comment            ; comment
 *   [server]
 *   listen = 127.0.0.1:8080
 *   [driver "nomad"]
 *   address = "http://nomad:4646"   # quoted values keep spaces and '#'
 *
 * Sections: [section] ([a-z0-9_]{1,64}) or [section "name"] (name: 1-64 chars
 * of [A-Za-z0-9._-]); repeated headers merge. Keys: [a-z0-9_]{1,64}. Values are
 * trimmed; an unquoted value ends at " #" (inline comment). A quoted value
 * knows the escapes \" and \\ only. CRLF line endings are accepted.
 *
 * Limits (hostile input is rejected, never truncated): file <= 1 MiB,
 * line <= 4096 bytes, <= 10000 entries; no NUL or other control bytes
 * (tab excepted), valid UTF-8 only; a key set twice in one section is an error.
 *
 * Every error message is "name:line: message" (name as given to the parser).
 * Getters return pointers into the conf; they live until conf_free().
 *
 * Use: parse, call one getter per known key (a missing key yields the
 * default), then conf_check_unused() to reject typos.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define CONF_MAX_FILE_SIZE (1024 * 1024)
#define CONF_MAX_LINE 4096
#define CONF_MAX_ENTRIES 10000
#define CONF_MAX_NAME 64

struct conf;

/* Reads at most CONF_MAX_FILE_SIZE + 1 bytes of path. On failure returns
 * -errno; err gets "path:line: ..." for content errors and "path: ..." for
 * errors opening or reading the file (there is no line to blame). */
int conf_parse_file(const char *path, struct conf **ret, struct err *err);
/* text need not be NUL-terminated. */
int conf_parse_string(const char *text, size_t len, const char *name, struct conf **ret,
                      struct err *err);
struct conf *conf_free(struct conf *c);
static inline void conf_freep(struct conf **c) { conf_free(*c); }
#define _cleanup_conf_free_ __attribute__((cleanup(conf_freep)))

/* Typed getters. section: e.g. "server"; name: subsection name or NULL.
 * Absent key: *ret = def, return 0. Present but invalid (including out of
 * [min, max]): -EINVAL with "name:line: key: why (expected ...)" in err, *ret
 * untouched. Every call marks the entry (and its section) as used. */
int conf_get_string(struct conf *c, const char *section, const char *name, const char *key,
                    const char *def, size_t maxlen, const char **ret, struct err *err);
int conf_get_int(struct conf *c, const char *section, const char *name, const char *key,
                 int64_t def, int64_t min, int64_t max, int64_t *ret, struct err *err);
/* true/false/yes/no/on/off/1/0 */
int conf_get_bool(struct conf *c, const char *section, const char *name, const char *key,
                  bool def, bool *ret, struct err *err);
/* "512", "64K", "50M", "2G", "1T" (binary units) -> bytes */
int conf_get_size(struct conf *c, const char *section, const char *name, const char *key,
                  uint64_t def, uint64_t min, uint64_t max, uint64_t *ret, struct err *err);
/* "250ms", "30s", "5m", "2h", "1d"; bare number = seconds -> milliseconds */
int conf_get_duration_ms(struct conf *c, const char *section, const char *name, const char *key,
                         uint64_t def, uint64_t min, uint64_t max, uint64_t *ret, struct err *err);
/* Comma-separated list, items trimmed, empty items rejected (an empty value is
 * an empty list). Returns the number of items; *ret is a NULL-terminated strv
 * owned by the caller (strv_free), or NULL when the key is absent. */
int conf_get_list(struct conf *c, const char *section, const char *name, const char *key,
                  size_t max_items, size_t max_item_len, char ***ret, struct err *err);

/* Names of all [section "name"] subsections of section, in file order. *ret is
 * a NULL-terminated strv (possibly empty) owned by the caller; returns the
 * count. Listing marks those sections used. */
int conf_subsections(struct conf *c, const char *section, char ***ret);
/* Marks the section used when present. */
bool conf_has_section(struct conf *c, const char *section, const char *name);

/* After all getters ran: the first (by line) section or entry nobody asked
 * for -> -EINVAL with "name:line: unknown key 'x' in [section]" or
 * "name:line: unknown section [section]". */
int conf_check_unused(struct conf *c, struct err *err);
