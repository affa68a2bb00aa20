/* pi.c — what every part of paddock-init uses (pi.h): the shared state, the log line and the
 * clock. Apart from paddock-init.c (main and the loop, which call conn.c, proc.c, watch.c) so
 * that those parts need nothing from the file that calls them. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

/* ---------------------------------------------------------------- logging */

void pi_log(const char *level, const char *fmt, ...) {
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = snprintf(line, sizeof(line), "paddock-init: %s: ", level);
        vsnprintf(line + n, sizeof(line) - n, fmt, ap);
        va_end(ap);
        size_t len = strlen(line);
        if (len < sizeof(line) - 1)
                line[len++] = '\n';
        ssize_t _unused_ w = write(STDERR_FILENO, line, len);
}

uint64_t pi_now_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* ---------------------------------------------------------------- state */

struct pi_state pi = { .listen_fd = -1, .sig_fd = -1, .ino_fd = -1 };
