/* ticker.h — the threads the daemons run beside their main loop: created with
 * every signal blocked (signals are the main thread's business), and the periodic
 * kind that sleeps on the monotonic clock and stops at once when asked. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

/* pthread_create with all signals blocked in the new thread (the caller's mask is
 * restored before returning). 0 or -errno; *ret untouched on failure. */
int thread_create_nosig(pthread_t *ret, const pthread_attr_t *attr, void *(*fn)(void *), void *ud);

/* A periodic thread: fn(ud) runs on its own thread and loops on ticker_sleep. */
struct ticker {
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool running, stop;
};
#define TICKER_INIT { .lock = PTHREAD_MUTEX_INITIALIZER }

/* Starts fn(ud). 0 (also when already running) or -errno. */
int ticker_start(struct ticker *t, void *(*fn)(void *), void *ud);
/* Called by fn: sleeps ms on the monotonic clock. true when the time is up; false
 * as soon as ticker_stop has been called (fn then returns). */
bool ticker_sleep(struct ticker *t, int64_t ms);
/* Tells fn to stop, waits for it to return. Does nothing when not running. */
void ticker_stop(struct ticker *t);
