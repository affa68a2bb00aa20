/* xalloc.c — allocation helpers that abort on out-of-memory. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

void oom(void) {
        static const char msg[] = "fatal: out of memory\n";
        ssize_t _unused_ w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        abort();
}

void *xmalloc(size_t n) {
        void *p = malloc(n ? n : 1);
        if (!p)
                oom();
        return p;
}

void *xcalloc(size_t n, size_t size) {
        void *p = calloc(n ? n : 1, size ? size : 1);
        if (!p)
                oom();
        return p;
}

void *xrealloc(void *p, size_t n) {
        void *q = realloc(p, n ? n : 1);
        if (!q)
                oom();
        return q;
}

char *xstrdup(const char *s) {
        char *p = strdup(s ? s : "");
        if (!p)
                oom();
        return p;
}

char *xstrndup(const char *s, size_t n) {
        char *p = strndup(s ? s : "", n);
        if (!p)
                oom();
        return p;
}

char *xasprintf(const char *fmt, ...) {
        va_list ap;
        char *p = NULL;
        va_start(ap, fmt);
        int r = vasprintf(&p, fmt, ap);
        va_end(ap);
        if (r < 0)
                oom();
        return p;
}
