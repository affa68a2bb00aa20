/* Unit tests for controld's per-sandbox operation locks (controld/ctl.c): locks of different
 * sandboxes never wait on each other, however many are held (64 hash stripes made a slow
 * create of one tenant hold other tenants' destroys), and one sandbox's lock still excludes. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "controld.h"
#include "testlib.h"

#define N 200

static struct ctl ctl;
static atomic_int acquired, release;

static void *hold(void *ud) {
        char *id = ud;
        ctl_sandbox_lock(&ctl, id);
        atomic_fetch_add(&acquired, 1);
        while (!atomic_load(&release))
                usleep(1000);
        ctl_sandbox_unlock(&ctl, id);
        return NULL;
}

/* Waits up to 10 s (a bound on a deadlock, not a speed check) for acquired to reach want. */
static bool wait_acquired(int want) {
        for (int i = 0; i < 10000 && atomic_load(&acquired) < want; i++)
                usleep(1000);
        return atomic_load(&acquired) >= want;
}

TEST(locks_of_different_sandboxes_never_wait_on_each_other) {
        ctl_init(&ctl);
        static char ids[N][SANDBOX_ID_LEN + 1];
        pthread_t t[N];
        atomic_store(&acquired, 0);
        atomic_store(&release, 0);
        /* 200 distinct ids held at once: with 64 stripes, at least two would share one. */
        for (int i = 0; i < N; i++) {
                snprintf(ids[i], sizeof(ids[i]), "%024x", 0x5eed0000 + i * 7919);
                ASSERT_EQ(pthread_create(&t[i], NULL, hold, ids[i]), 0);
        }
        ASSERT_TRUE(wait_acquired(N));
        atomic_store(&release, 1);
        for (int i = 0; i < N; i++)
                pthread_join(t[i], NULL);
        /* Every entry went with its last holder. */
        ASSERT_NULL(ctl.sb_locks);
}

TEST(one_sandboxs_lock_excludes_and_is_handed_on) {
        ctl_init(&ctl);
        static char id[] = "0123456789abcdef01234567";
        atomic_store(&acquired, 0);
        atomic_store(&release, 0);
        ctl_sandbox_lock(&ctl, id);
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
                ASSERT_EQ(pthread_create(&t[i], NULL, hold, id), 0);
        usleep(200000);
        ASSERT_EQ(atomic_load(&acquired), 0);   /* all three wait while we hold it */
        atomic_store(&release, 1);
        ctl_sandbox_unlock(&ctl, id);
        ASSERT_TRUE(wait_acquired(3));          /* handed on, one at a time, to each */
        for (int i = 0; i < 3; i++)
                pthread_join(t[i], NULL);
        ASSERT_NULL(ctl.sb_locks);
}
