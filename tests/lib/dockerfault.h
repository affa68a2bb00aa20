/* dockerfault.h — a Docker Engine socket with faults, for the lifecycle tests.
 *
 * dfault_start() listens on <dir>/docker.sock and relays every connection to the real engine
 * (/var/run/docker.sock) byte for byte; controld is pointed at it with [docker] socket. On
 * request, the calls that change a container's life (create, start, stop, kill, remove,
 * commit, pause) are answered as a failing engine answers them, or held back first:
 *   fail_next  the next N such requests get "500 Internal Server Error" with Docker's JSON
 *              error body, and their connection is closed (the engine never sees them);
 *   slow_ms    each such request waits this long before it goes on.
 * Everything else (inspect, list, exec, logs, the hijacked streams) passes untouched. The
 * relay stops with the test (an exit hook). */
#pragma once

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct dfault {
        char path[PATH_MAX];
        int lfd;
        pthread_t thread;
        atomic_int fail_next;
        atomic_int slow_ms;
        atomic_long faulted, slowed;
        atomic_bool stop;
        bool running;
};

void dfault_start(struct dfault *f, const char *dir);
void dfault_stop(struct dfault *f);
