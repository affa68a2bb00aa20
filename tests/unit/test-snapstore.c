/* Unit tests for the snapshots table of controld/store.c: insert/get, the creating -> ready|failed
 * compare-and-set, per-account and per-sandbox pages, the deadline and retention queries, and
 * the schema surviving a reopen. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "storetest.h"
#include "strutil.h"
#include "testlib.h"

static struct store *open_store(void) {
        return storetest_open("snap");
}

static void put(struct store *s, const char *acc, const char *sb, bool automatic, int64_t created, char ret_id[25]) {
        struct snapshot sn = { .status = SNAP_CREATING, .automatic = automatic, .size_bytes = -1, .created_at = created };
        hexid_new(sn.id);
        strscpy(sn.account_id, acc, sizeof(sn.account_id));
        strscpy(sn.sandbox_id, sb, sizeof(sn.sandbox_id));
        sn.name = xstrdup("n");
        sn.image_tag = xasprintf("127.0.0.1:5000/p/s:%s", sn.id);
        sn.source_template = xstrdup("busybox");
        sn.node_id = xstrdup("local");
        ASSERT_OK(store_snapshot_insert(s, &sn));
        memcpy(ret_id, sn.id, 25);
        snapshot_clear(&sn);
}

#define SB1 "aaaaaaaaaaaaaaaaaaaaaaaa"
#define SB2 "bbbbbbbbbbbbbbbbbbbbbbbb"

TEST(insert_get_finish_is_compare_and_set) {
        _cleanup_(storetest_closep) struct store *s = open_store();
        char acc[25], id[25];
        storetest_new_account(s, "a", acc);
        put(s, acc, SB1, false, 1000, id);
        struct snapshot g = { 0 };
        ASSERT_OK(store_snapshot_get(s, id, &g));
        ASSERT_EQ(g.status, SNAP_CREATING);
        ASSERT_EQ(g.size_bytes, -1);
        ASSERT_STREQ(g.source_template, "busybox");
        ASSERT_TRUE(g.digest == NULL && g.failure_reason == NULL);
        snapshot_clear(&g);

        ASSERT_OK(store_snapshot_finish(s, id, SNAP_READY, "sha256:x", 1234, NULL, 2000));
        /* A second outcome (a late one, or the deadline's) changes nothing. */
        ASSERT_EQ(store_snapshot_finish(s, id, SNAP_FAILED, NULL, -1, "late", 3000), -ESTALE);
        ASSERT_OK(store_snapshot_get(s, id, &g));
        ASSERT_EQ(g.status, SNAP_READY);
        ASSERT_STREQ(g.digest, "sha256:x");
        ASSERT_EQ(g.size_bytes, 1234);
        ASSERT_EQ(g.finished_at, 2000);
        snapshot_clear(&g);

        ASSERT_EQ(store_snapshot_finish(s, "cccccccccccccccccccccccc", SNAP_READY, NULL, 1, NULL, 1), -ENOENT);
        ASSERT_OK(store_snapshot_delete(s, id));
        ASSERT_EQ(store_snapshot_delete(s, id), -ENOENT);
        ASSERT_EQ(store_snapshot_get(s, id, &g), -ENOENT);
}

TEST(pages_are_per_account_and_per_sandbox_newest_first) {
        _cleanup_(storetest_closep) struct store *s = open_store();
        char a[25], b[25], ids[5][25], other[25];
        storetest_new_account(s, "a", a);
        storetest_new_account(s, "b", b);
        for (int i = 0; i < 5; i++)
                put(s, a, i < 3 ? SB1 : SB2, false, 1000 + i, ids[i]);
        put(s, b, SB1, false, 5000, other);

        struct snapshot *p = NULL;
        size_t n = 0;
        int64_t total = 0;
        ASSERT_OK(store_snapshot_list(s, a, NULL, 0, 2, &p, &n, &total));
        ASSERT_EQ(total, 5);
        ASSERT_EQ(n, 2u);
        ASSERT_STREQ(p[0].id, ids[4]);
        ASSERT_STREQ(p[1].id, ids[3]);
        snapshot_array_free(p, n);
        ASSERT_OK(store_snapshot_list(s, a, NULL, 4, 2, &p, &n, &total));
        ASSERT_EQ(n, 1u);
        ASSERT_STREQ(p[0].id, ids[0]);
        snapshot_array_free(p, n);
        ASSERT_OK(store_snapshot_list(s, a, SB1, 0, 10, &p, &n, &total));
        ASSERT_EQ(total, 3);
        snapshot_array_free(p, n);
        /* Another account's snapshot of a sandbox with the same id is not in a's pages. */
        ASSERT_OK(store_snapshot_list(s, b, SB1, 0, 10, &p, &n, &total));
        ASSERT_EQ(total, 1);
        ASSERT_STREQ(p[0].id, other);
        snapshot_array_free(p, n);
}

TEST(stuck_and_retention_queries) {
        _cleanup_(storetest_closep) struct store *s = open_store();
        char a[25], old[25], young[25], au1[25], au2[25], au3[25];
        storetest_new_account(s, "a", a);
        put(s, a, SB1, false, 1000, old);
        put(s, a, SB1, false, 9000, young);
        struct snapshot *p = NULL;
        size_t n = 0;
        ASSERT_OK(store_snapshot_list_stuck(s, 5000, &p, &n));
        ASSERT_EQ(n, 1u);
        ASSERT_STREQ(p[0].id, old);
        snapshot_array_free(p, n);

        put(s, a, SB2, true, 100, au1);
        put(s, a, SB2, true, 200, au2);
        put(s, a, SB2, true, 300, au3);
        ASSERT_OK(store_snapshot_finish(s, au1, SNAP_READY, "sha256:1", 1, NULL, 1));
        ASSERT_OK(store_snapshot_finish(s, au2, SNAP_FAILED, NULL, -1, "x", 1));
        /* Only settled automatic ones, newest first; the one still creating is left alone. */
        ASSERT_OK(store_snapshot_list_auto(s, SB2, &p, &n));
        ASSERT_EQ(n, 2u);
        ASSERT_STREQ(p[0].id, au2);
        ASSERT_STREQ(p[1].id, au1);
        ASSERT_TRUE(p[1].automatic);
        snapshot_array_free(p, n);
        ASSERT_OK(store_snapshot_list_auto(s, SB1, &p, &n));
        ASSERT_EQ(n, 0u);
        snapshot_array_free(p, n);
}

TEST(schema_survives_a_reopen) {
        char a[25], id[25];
        {
                _cleanup_(storetest_closep) struct store *s = open_store();
                storetest_new_account(s, "a", a);
                put(s, a, SB1, false, 1, id);
        }
        _cleanup_(storetest_closep) struct store *s = open_store();
        struct snapshot g = { 0 };
        ASSERT_OK(store_snapshot_get(s, id, &g));
        ASSERT_STREQ(g.sandbox_id, SB1);
        snapshot_clear(&g);
}
