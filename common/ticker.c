/* ticker.c — signal-free threads and periodic threads (see ticker.h). */
#include <signal.h>

#include "strutil.h"
#include "ticker.h"

int thread_create_nosig(pthread_t *ret, const pthread_attr_t *attr, void *(*fn)(void *), void *ud) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int r = -pthread_create(ret, attr, fn, ud);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

int ticker_start(struct ticker *t, void *(*fn)(void *), void *ud) {
        if (t->running)
                return 0;
        cond_init_monotonic(&t->cond);
        t->stop = false;
        int r = thread_create_nosig(&t->thread, NULL, fn, ud);
        if (r < 0) {
                pthread_cond_destroy(&t->cond);
                return r;
        }
        t->running = true;
        return 0;
}

bool ticker_sleep(struct ticker *t, int64_t ms) {
        int64_t until = mono_ms() + ms;
        struct timespec ts = { .tv_sec = until / 1000, .tv_nsec = (until % 1000) * 1000000 };
        pthread_mutex_lock(&t->lock);
        while (!t->stop && mono_ms() < until)
                pthread_cond_timedwait(&t->cond, &t->lock, &ts);
        bool go_on = !t->stop;
        pthread_mutex_unlock(&t->lock);
        return go_on;
}

void ticker_stop(struct ticker *t) {
        if (!t->running)
                return;
        pthread_mutex_lock(&t->lock);
        t->stop = true;
        pthread_cond_signal(&t->cond);
        pthread_mutex_unlock(&t->lock);
        pthread_join(t->thread, NULL);
        pthread_cond_destroy(&t->cond);
        t->running = false;
}
