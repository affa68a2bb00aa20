/* pj.h — what every proto-json codec shares: the error a parser reports.
 *
 * Every pj_*_parse() returns 0, or -EINVAL with a struct pj_error filled:
 * field is the JSON path of the culprit ("specs.memory", "allow[3]"; "" when
 * the document as a whole is bad) and message a complete sentence for the
 * user of the API that names that path.
 */
#pragma once

#include <stddef.h>

struct pj_error {
        char field[128];
        char message[512];
};

/* Fills err (when not NULL) with field (NULL = "") and the formatted message,
 * truncating both to fit. Always returns -EINVAL so parsers can
 * `return pj_error_set(err, ...)`. */
int pj_error_set(struct pj_error *err, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Reads a secret from fd (to its end, at most max + 1 bytes looked at): one trailing newline
 * dropped, then min..max bytes with no NUL. 0 with *ret (xmalloc'd, NUL-terminated) and
 * *ret_len; -EINVAL for a wrong size or a NUL, -errno for a failed read. The bytes read are
 * wiped from the stack. Both the agent's secret and the relay's deployment secret. */
int pj_secret_read(int fd, size_t min, size_t max, char **ret, size_t *ret_len);
