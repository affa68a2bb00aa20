/* pj.h — what every proto-json codec shares: the error a parser reports.
 *
 * Every pj_*_parse() returns 0, or -EINVAL with a struct pj_error filled:
 * field is the JSON path of the culprit ("specs.memory", "allow[3]"; "" when
 * the document as a whole is bad) and message a complete sentence for the
 * user of the API that names that path.
 */
#pragma once

struct pj_error {
        char field[128];
        char message[512];
};

/* Fills err (when not NULL) with field (NULL = "") and the formatted message,
 * truncating both to fit. Always returns -EINVAL so parsers can
 * `return pj_error_set(err, ...)`. */
int pj_error_set(struct pj_error *err, const char *field, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
