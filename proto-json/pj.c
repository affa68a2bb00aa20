/* pj.c — see pj.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "pj.h"

int pj_error_set(struct pj_error *err, const char *field, const char *fmt, ...) {
        va_list ap;

        if (!err)
                return -EINVAL;
        snprintf(err->field, sizeof(err->field), "%s", field ? field : "");
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
        return -EINVAL;
}
