/* Unit tests for the controld reaper's decision (background_reap_one) against a real sqlite
 * store and a scripted driver: it decides from the record as it is, never from a stale list,
 * and its destroy lands only by compare-and-set on the status it decided on. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "strutil.h"
#include "storetest.h"
#include "testlib.h"
#include "background.h"

#define HOUR_MS (3600 * 1000LL)

static struct {
        int running;          /* what driver->running answers */
        int remove_rc;        /* what driver->remove answers */
        int removes;          /* calls to driver->remove */
        /* Runs inside driver->remove: a user request landing while the reaper works. */
        void (*during_remove)(struct ctl *c, const char *id);
} fake;

static struct ctl *the_ctl;

static int fake_running(struct driver *d, const struct sandbox *sb, int *ret_exit_code) {
        (void) d;
        (void) sb;
        *ret_exit_code = 0;
        return fake.running;
}

static int fake_remove(struct driver *d, const struct sandbox *sb, struct err *err) {
        (void) d;
        fake.removes++;
        if (fake.during_remove)
                fake.during_remove(the_ctl, sb->id);
        if (fake.remove_rc < 0)
                err_set(err, fake.remove_rc, "backend said no");
        return fake.remove_rc;
}

static const struct driver_ops fake_ops = { .running = fake_running, .remove = fake_remove };
static struct driver fake_driver = { .name = "fake", .ops = &fake_ops };

static void setup(struct ctl *c, struct config *cfg) {
        memset(c, 0, sizeof(*c));
        memset(cfg, 0, sizeof(*cfg));
        memset(&fake, 0, sizeof(fake));
        fake.running = 1;
        cfg->paused_max_s = 3600;
        cfg->stuck_starting_s = 60;
        char path[512];
        snprintf(path, sizeof(path), "%s/reaper.db", test_tmpdir());
        ASSERT_OK(store_open(path, &c->store));
        c->cfg = cfg;
        c->drv = &fake_driver;
        pthread_mutex_init(&c->wait_lock, NULL);
        pthread_cond_init(&c->wait_cond, NULL);
        pthread_mutex_init(&c->sb_lock_mu, NULL);
        c->sb_locks = NULL;
        the_ctl = c;
}

/* A sandbox in status st, created now - age_ms, expiring in an hour. */
static void add_sandbox(struct ctl *c, enum sb_status st, int64_t age_ms, char ret_id[25]) {
        static char acc[25];
        if (!acc[0]) {
                struct account a = { 0 };
                ASSERT_OK(store_account_create(c->store, "alice", "default", &a));
                memcpy(acc, a.id, 25);
                account_clear(&a);
        }
        struct sandbox sb;
        int64_t now = now_ms();
        storetest_sandbox(&sb, acc, "box", "busybox");
        sb.created_at = sb.last_activity_at = now - age_ms;
        sb.expires_at = now + HOUR_MS;
        ASSERT_OK(store_sandbox_insert_capped(c->store, &sb, -1));
        if (st != SB_STARTING) {
                sb.status = st;
                if (st == SB_PAUSED)
                        sb.paused_at = now - 1000;
                ASSERT_OK(store_sandbox_update(c->store, &sb));
        }
        memcpy(ret_id, sb.id, 25);
        sandbox_clear(&sb);
}

static void load(struct ctl *c, const char *id, struct sandbox *ret) { ASSERT_OK(store_sandbox_get(c->store, id, ret)); }

static enum sb_status status_of(struct ctl *c, const char *id) {
        struct sandbox sb = { 0 };
        load(c, id, &sb);
        enum sb_status st = sb.status;
        sandbox_clear(&sb);
        return st;
}

/* setup() and one sandbox in state st, a second old. */
static void setup_one(struct ctl *c, struct config *cfg, enum sb_status st, char ret_id[25]) {
        setup(c, cfg);
        add_sandbox(c, st, 1000, ret_id);
}

/* ---- the race the issue describes ---- */

/* The reaper's list said 'ready'; before it looked at the workload the user paused, so the
 * container is gone because of the pause. It must not destroy the sandbox as "failed". */
TEST(stale_ready_but_paused_meanwhile_is_not_destroyed) {
        struct ctl c;
        struct config cfg;
        char id[25];
        setup_one(&c, &cfg, SB_READY, id);
        struct sandbox *list = NULL;
        size_t n = 0;
        ASSERT_OK(store_sandbox_list_status(c.store, NULL, SB_READY, &list, &n));   /* the reaper's list */
        ASSERT_EQ(n, 1);
        /* The user's pause: ready -> pausing -> paused, its container removed. */
        ASSERT_OK(store_sandbox_cas_status(c.store, id, SB_READY, SB_PAUSING));
        ASSERT_OK(store_sandbox_cas_status(c.store, id, SB_PAUSING, SB_PAUSED));
        fake.running = 0;
        ASSERT_EQ(background_reap_one(&c, list[0].id, now_ms()), 0);
        sandbox_array_free(list, n);
        ASSERT_EQ(status_of(&c, id), SB_PAUSED);
        ASSERT_EQ(fake.removes, 0);
        store_close(c.store);
}

/* A user request landing while the reaper removes the workload: what sandbox_pause and
 * sandbox_resume do, a CAS without the sandbox lock. */
static enum sb_status user_from, user_to;
static void user_moves(struct ctl *c, const char *id) {
        ASSERT_OK(store_sandbox_cas_status(c->store, id, user_from, user_to));
}

/* The reaper goes for a sandbox in status `from` while the user moves it to `to`: the
 * reaper's destroy must lose its compare-and-set and leave the record to the user. */
static void user_move_mid_reap_wins(enum sb_status from, enum sb_status to) {
        struct ctl c;
        struct config cfg;
        char id[25];
        setup(&c, &cfg);
        cfg.paused_max_s = 0;                  /* every paused sandbox is paused too long */
        add_sandbox(&c, from, 1000, id);
        fake.running = 0;                      /* a ready one looks dead to the reaper */
        user_from = from;
        user_to = to;
        fake.during_remove = user_moves;
        ASSERT_EQ(background_reap_one(&c, id, now_ms()), 0);
        ASSERT_EQ(fake.removes, 1);
        struct sandbox sb = { 0 };
        load(&c, id, &sb);
        ASSERT_EQ(sb.status, to);
        ASSERT_EQ(sb.destroyed_at, 0);
        ASSERT_NULL(sb.destroy_reason);
        sandbox_clear(&sb);
        store_close(c.store);
}

TEST(pause_landing_mid_reap_wins) { user_move_mid_reap_wins(SB_READY, SB_PAUSING); }
TEST(resume_landing_mid_reap_of_paused_too_long_wins) { user_move_mid_reap_wins(SB_PAUSED, SB_RESUMING); }

/* The list said 'paused' long ago; the user resumed it since: it is ready and running now. */
TEST(stale_paused_too_long_but_resumed_is_not_destroyed) {
        struct ctl c;
        struct config cfg;
        char id[25];
        setup(&c, &cfg);
        cfg.paused_max_s = 0;
        add_sandbox(&c, SB_PAUSED, 1000, id);
        struct sandbox sb = { 0 };
        load(&c, id, &sb);
        sb.status = SB_READY;
        sb.paused_at = 0;
        ASSERT_OK(store_sandbox_update_cas(c.store, &sb, SB_PAUSED));
        sandbox_clear(&sb);
        fake.running = 1;
        ASSERT_EQ(background_reap_one(&c, id, now_ms()), 0);
        ASSERT_EQ(status_of(&c, id), SB_READY);
        ASSERT_EQ(fake.removes, 0);
        store_close(c.store);
}

/* ---- what it still reaps ---- */

TEST(dead_workload_is_destroyed_as_failed_and_its_volume_freed) {
        struct ctl c;
        struct config cfg;
        char id[25];
        setup_one(&c, &cfg, SB_READY, id);
        struct volume v = { 0 };
        hexid_new(v.id);
        struct sandbox sb = { 0 };
        load(&c, id, &sb);
        snprintf(v.account_id, sizeof(v.account_id), "%s", sb.account_id);
        sandbox_clear(&sb);
        v.name = xstrdup("vol");
        v.type = xstrdup("sandbox");
        v.created_at = v.updated_at = 1;
        ASSERT_OK(store_volume_insert_capped(c.store, &v, -1));
        ASSERT_OK(store_volume_attach(c.store, v.id, id, "/w", 1));

        fake.running = 0;
        ASSERT_EQ(background_reap_one(&c, id, now_ms()), 1);
        ASSERT_EQ(fake.removes, 1);
        load(&c, id, &sb);
        ASSERT_EQ(sb.status, SB_DESTROYED);
        ASSERT_STREQ(sb.destroy_reason, "failed");
        ASSERT_TRUE(sb.destroyed_at > 0);
        sandbox_clear(&sb);
        struct volume g = { 0 };
        ASSERT_OK(store_volume_get(c.store, v.id, &g));
        ASSERT_NULL(g.attached_sandbox_id);
        volume_clear(&g);
        volume_clear(&v);
        /* Once destroyed there is nothing more to do. */
        ASSERT_EQ(background_reap_one(&c, id, now_ms()), 0);
        ASSERT_EQ(fake.removes, 1);
        store_close(c.store);
}

TEST(reasons_one_shot_expiry_stuck_paused) {
        struct ctl c;
        struct config cfg;
        char a[25], b[25], d[25], e[25], f[25];
        setup(&c, &cfg);
        struct sandbox sb = { 0 };

        add_sandbox(&c, SB_READY, 1000, a);          /* one-shot whose command ended */
        load(&c, a, &sb);
        sb.one_shot = true;
        ASSERT_OK(store_sandbox_update(c.store, &sb));
        sandbox_clear(&sb);
        fake.running = 0;
        ASSERT_EQ(background_reap_one(&c, a, now_ms()), 1);
        load(&c, a, &sb);
        ASSERT_STREQ(sb.destroy_reason, "one_shot_stopped");
        sandbox_clear(&sb);

        fake.running = 1;
        add_sandbox(&c, SB_READY, 1000, b);          /* expired, auto-destroy */
        load(&c, b, &sb);
        sb.auto_destroy = true;
        ASSERT_OK(store_sandbox_update(c.store, &sb));
        sandbox_clear(&sb);
        ASSERT_EQ(background_reap_one(&c, b, now_ms() + 2 * HOUR_MS), 1);
        load(&c, b, &sb);
        ASSERT_STREQ(sb.destroy_reason, "idle_ttl");
        sandbox_clear(&sb);

        add_sandbox(&c, SB_PAUSED, 1000, d);         /* expired while paused: max lifetime */
        ASSERT_EQ(background_reap_one(&c, d, now_ms() + 2 * HOUR_MS), 1);
        load(&c, d, &sb);
        ASSERT_STREQ(sb.destroy_reason, "max_lifetime");
        sandbox_clear(&sb);

        add_sandbox(&c, SB_STARTING, 120 * 1000, e); /* stuck starting beyond 60 s */
        ASSERT_EQ(background_reap_one(&c, e, now_ms()), 1);
        load(&c, e, &sb);
        ASSERT_STREQ(sb.destroy_reason, "failed");
        sandbox_clear(&sb);

        add_sandbox(&c, SB_STARTING, 1000, f);       /* starting, but young: left alone */
        ASSERT_EQ(background_reap_one(&c, f, now_ms()), 0);
        ASSERT_EQ(status_of(&c, f), SB_STARTING);
        store_close(c.store);
}

TEST(healthy_and_terminal_sandboxes_are_left_alone) {
        struct ctl c;
        struct config cfg;
        char a[25], b[25], d[25];
        setup(&c, &cfg);
        add_sandbox(&c, SB_READY, 1000, a);
        add_sandbox(&c, SB_PAUSED, 1000, b);
        add_sandbox(&c, SB_FAILED, 1000, d);
        fake.running = 1;
        ASSERT_EQ(background_reap_one(&c, a, now_ms()), 0);
        ASSERT_EQ(background_reap_one(&c, b, now_ms()), 0);
        fake.running = 0;
        ASSERT_EQ(background_reap_one(&c, d, now_ms() + 2 * HOUR_MS), 0);
        ASSERT_EQ(status_of(&c, a), SB_READY);
        ASSERT_EQ(status_of(&c, b), SB_PAUSED);
        ASSERT_EQ(status_of(&c, d), SB_FAILED);
        ASSERT_EQ(fake.removes, 0);
        ASSERT_EQ(background_reap_one(&c, "0123456789abcdef01234567", now_ms()), -ENOENT);
        store_close(c.store);
}

/* The backend refuses: nothing is recorded, the next round tries again. */
TEST(failed_workload_removal_records_nothing) {
        struct ctl c;
        struct config cfg;
        char id[25];
        setup_one(&c, &cfg, SB_READY, id);
        fake.running = 0;
        fake.remove_rc = -EIO;
        ASSERT_EQ(background_reap_one(&c, id, now_ms()), -EIO);
        ASSERT_EQ(status_of(&c, id), SB_READY);
        fake.remove_rc = 0;
        ASSERT_EQ(background_reap_one(&c, id, now_ms()), 1);
        ASSERT_EQ(status_of(&c, id), SB_DESTROYED);
        store_close(c.store);
}
