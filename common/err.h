/* err.h — the one error carrier.
 *
 * Functions return a negative errno and, when given one, fill a struct err with a sentence for
 * whoever reads it (and, for bad input, the JSON path of the field at fault). A NULL struct err
 * means the caller wants the code only. The code says what kind of failure it was (one table per
 * edge maps it to a status); the message is for a person: code decides by the errno, not the text.
 */
#pragma once

struct err {
        char field[128];        /* JSON path of the culprit ("specs.memory", "allow[3]"), or "" */
        char message[512];      /* a complete sentence, cut to fit */
};

/* Fills e (when not NULL) with the formatted message and an empty field, and returns code (a
 * negative errno), so a failure reads `return err_set(err, -EINVAL, "...", ...);`. errno is
 * kept for %m; the arguments may point into e (wrapping its message). */
int err_set(struct err *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same with the field at fault (NULL = ""). */
int err_set_field(struct err *e, int code, const char *field, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

/* Empties e (when not NULL): no field, no message. */
static inline void err_clear(struct err *e) {
        if (e)
                e->field[0] = e->message[0] = 0;
}
