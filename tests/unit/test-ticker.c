/* Unit tests for common/ticker.c: signal-free threads and periodic threads. */
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#include "strutil.h"
#include "testlib.h"
#include "ticker.h"

static struct ticker tk = TICKER_INIT;
static atomic_int ticks;
static int64_t period_ms;

static void *tick_main(void *ud) {
        (void) ud;
        while (ticker_sleep(&tk, period_ms))
                atomic_fetch_add(&ticks, 1);
        return NULL;
}

TEST(ticks_on_the_period_and_stops_at_once) {
        period_ms = 20;
        atomic_store(&ticks, 0);
        ASSERT_OK(ticker_start(&tk, tick_main, NULL));
        ASSERT_OK(ticker_start(&tk, tick_main, NULL));  /* already running: nothing more */
        usleep(300 * 1000);
        ticker_stop(&tk);
        int n = atomic_load(&ticks);
        ASSERT_GE(n, 5);
        ASSERT_LE(n, 16);
        usleep(100 * 1000);
        ASSERT_EQ(atomic_load(&ticks), n);              /* stopped means stopped */
        ticker_stop(&tk);                               /* twice is harmless */

        /* A long period does not delay stopping, and the ticker starts again. */
        period_ms = 60 * 1000;
        ASSERT_OK(ticker_start(&tk, tick_main, NULL));
        usleep(50 * 1000);
        int64_t t0 = mono_ms();
        ticker_stop(&tk);
        ASSERT_LE(mono_ms() - t0, 1000);
        ASSERT_EQ(atomic_load(&ticks), n);
}

static void *report_mask(void *ud) {
        sigset_t cur;
        pthread_sigmask(SIG_SETMASK, NULL, &cur);
        *(int *) ud = sigismember(&cur, SIGTERM) + sigismember(&cur, SIGINT);
        return NULL;
}

TEST(threads_start_with_signals_blocked_and_the_caller_keeps_its_mask) {
        sigset_t before, after;
        pthread_sigmask(SIG_SETMASK, NULL, &before);
        int blocked = -1;
        pthread_t t;
        ASSERT_OK(thread_create_nosig(&t, NULL, report_mask, &blocked));
        pthread_join(t, NULL);
        ASSERT_EQ(blocked, 2);
        pthread_sigmask(SIG_SETMASK, NULL, &after);
        ASSERT_EQ(sigismember(&after, SIGTERM), sigismember(&before, SIGTERM));
        ASSERT_EQ(sigismember(&after, SIGTERM), 0);
}
