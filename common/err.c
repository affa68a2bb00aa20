/* err.c — see err.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "err.h"

/* Formats into a copy first, so the arguments may point into e itself
 * (err_set(e, r, "cannot start: %s", e->message) wraps an inner message). */
static int err_setv(struct err *e, int code, const char *field, const char *fmt, va_list ap) {
        int saved = errno;
        struct err n;

        if (!e)
                return code;
        snprintf(n.field, sizeof(n.field), "%s", field ? field : "");
        errno = saved;
        vsnprintf(n.message, sizeof(n.message), fmt, ap);
        memcpy(e, &n, sizeof(n));
        errno = saved;
        return code;
}

int err_set(struct err *e, int code, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        code = err_setv(e, code, NULL, fmt, ap);
        va_end(ap);
        return code;
}

int err_set_field(struct err *e, int code, const char *field, const char *fmt, ...) {
        va_list ap;

        va_start(ap, fmt);
        code = err_setv(e, code, field, fmt, ap);
        va_end(ap);
        return code;
}
