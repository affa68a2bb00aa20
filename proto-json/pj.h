/* pj.h — what every proto-json codec shares: the error a parser reports.
 *
 * Every pj_*_parse() returns 0, or -EINVAL with the struct err (common/err.h) filled:
 * field is the JSON path of the culprit ("specs.memory", "allow[3]"; "" when
 * the document as a whole is bad) and message a complete sentence for the
 * user of the API that names that path.
 */
#pragma once

#include <errno.h>
#include <stddef.h>

#include "err.h"

/* The parsers' short form of err_set_field(): fills err (when not NULL) with field (NULL = "")
 * and the formatted message, and is -EINVAL, so parsers can `return pj_error_set(err, ...)`. */
#define pj_error_set(err, field, ...) err_set_field((err), -EINVAL, (field), __VA_ARGS__)

/* Reads a secret from fd (to its end, at most max + 1 bytes looked at): one trailing newline
 * dropped, then min..max bytes with no NUL. 0 with *ret (xmalloc'd, NUL-terminated) and
 * *ret_len; -EINVAL for a wrong size or a NUL, -errno for a failed read. The bytes read are
 * wiped from the stack. Both the agent's secret and the relay's deployment secret. */
int pj_secret_read(int fd, size_t min, size_t max, char **ret, size_t *ret_len);
