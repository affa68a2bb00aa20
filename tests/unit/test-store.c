/* Unit tests for controld/store.c against a real temporary sqlite file: every store
 * function, the plan caps and compare-and-set under concurrent threads (one connection and
 * several, as the daemon and the admin CLI share a file), and the schema migration path. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "cleanup.h"
#include "controld.h"
#include "pj_node.h"
#include "storetest.h"
#include "strutil.h"
#include "testlib.h"

/* ---- helpers ---- */

/* Raw SQL on the file behind the store (a second connection), for what the API cannot see. */
static void raw_sql(const char *name, const char *sql) {
        sqlite3 *db = NULL;
        char *msg = NULL;
        if (sqlite3_open(storetest_path(name), &db) != SQLITE_OK)
                test_fail(__FILE__, __LINE__, "sqlite3_open failed");
        sqlite3_busy_timeout(db, 5000);
        if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
                test_fail(__FILE__, __LINE__, "%s: %s", sql, msg ? msg : "?");
        sqlite3_close(db);
}

static long long raw_int(const char *name, const char *sql) {
        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        long long v = -1;
        if (sqlite3_open(storetest_path(name), &db) != SQLITE_OK || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
                test_fail(__FILE__, __LINE__, "%s: %s", sql, db ? sqlite3_errmsg(db) : "?");
        if (sqlite3_step(st) == SQLITE_ROW)
                v = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
        sqlite3_close(db);
        return v;
}

/* A starting sandbox of account with every column set to something recognisable. */
static void fill_sandbox(struct sandbox *sb, const char *account_id, const char *name, int64_t created_at) {
        storetest_sandbox(sb, account_id, name, "paddock/busybox:local");
        sb->cpu = 300;
        sb->memory = 256;
        sb->disk = 2;
        sb->team = xstrdup("team-a");
        sb->project_environment = xstrdup("prod");
        sb->auto_destroy = true;
        sb->destroy_timeout = xstrdup("1h");
        sb->one_shot = true;
        sb->egress.mode = PJ_EGRESS_DENY_ALL;
        sb_egress_allow_from_text(&sb->egress, "[\"10.0.0.1\"]");
        sb->persistent = true;
        sb->persistent_disk_gb = 5;
        sb->volume_id = xstrdup("0123456789abcdef01234567");
        sb->mount_path = xstrdup("/workspace");
        sb->from_snapshot = xstrdup("snap");
        sb->snapshot_mode = xstrdup("auto");
        sb->snapshot_frequency = xstrdup("daily");
        sb->created_at = created_at;
        sb->last_activity_at = created_at + 1;
        sb->expires_at = created_at + 3600000;
        sb->driver = xstrdup("docker");
        sb_timings_set(&sb->timings, SB_PHASE_VALIDATE, 1);
}

/* got, read back from the store, has every column of want, the record written. */
static void expect_text(const char *what, const char *got, const char *want) {
        if ((got || want) && (!got || !want || strcmp(got, want) != 0))
                test_fail(__FILE__, __LINE__, "%s: \"%s\" != \"%s\"", what, got ? got : "(null)", want ? want : "(null)");
}
#define SAME_TEXT(f) expect_text(#f, got->f, want->f)
#define SAME_NUM(f) ASSERT_EQ(got->f, want->f)

/* The typed columns, compared as the store writes them back. */
static void expect_same_typed(const struct sandbox *got, const struct sandbox *want) {
        _cleanup_free_ char *gm = sb_map_to_text(&got->metadata), *wm = sb_map_to_text(&want->metadata);
        _cleanup_free_ char *ge = sb_map_to_text(&got->env), *we = sb_map_to_text(&want->env);
        _cleanup_free_ char *g2 = sb_e2b_to_text(&got->e2b), *w2 = sb_e2b_to_text(&want->e2b);
        expect_text("metadata", gm, wm);
        expect_text("env", ge, we);
        expect_text("e2b", g2, w2);
}

static void expect_same_sandbox(const struct sandbox *got, const struct sandbox *want) {
        _cleanup_free_ char *got_allow = sb_egress_allow_to_text(&got->egress);
        _cleanup_free_ char *want_allow = sb_egress_allow_to_text(&want->egress);
        _cleanup_free_ char *got_timings = sb_timings_to_text(&got->timings);
        _cleanup_free_ char *want_timings = sb_timings_to_text(&want->timings);
        SAME_TEXT(id); SAME_TEXT(account_id); SAME_TEXT(name); SAME_TEXT(template_name); SAME_TEXT(image);
        SAME_NUM(status); SAME_TEXT(region_key); SAME_NUM(cpu); SAME_NUM(memory); SAME_NUM(disk);
        SAME_TEXT(team); SAME_TEXT(project_environment); SAME_NUM(auto_destroy); SAME_TEXT(destroy_timeout);
        SAME_NUM(one_shot); SAME_NUM(egress.mode); expect_text("egress allow", got_allow, want_allow);
        SAME_NUM(persistent); SAME_NUM(persistent_disk_gb); SAME_TEXT(volume_id); SAME_TEXT(mount_path);
        SAME_TEXT(from_snapshot); SAME_TEXT(snapshot_mode); SAME_TEXT(snapshot_frequency);
        SAME_NUM(created_at); SAME_NUM(last_activity_at); SAME_NUM(expires_at); SAME_NUM(paused_at);
        SAME_NUM(destroyed_at); SAME_TEXT(destroy_reason); SAME_TEXT(failure_reason);
        SAME_TEXT(driver); SAME_TEXT(job_id); SAME_TEXT(alloc_id); SAME_TEXT(node_id); SAME_TEXT(container_id);
        SAME_TEXT(ip); expect_text("timings", got_timings, want_timings); expect_same_typed(got, want);
        SAME_NUM(pause_at_end); SAME_NUM(pause_keep_memory); SAME_NUM(run_s); SAME_NUM(auto_resume);
}

static void expect_same_volume(const struct volume *got, const struct volume *want) {
        SAME_TEXT(id); SAME_TEXT(account_id); SAME_TEXT(name); SAME_TEXT(type); SAME_NUM(size_gb);
        SAME_TEXT(region_key); SAME_TEXT(team); SAME_TEXT(handle); SAME_TEXT(mount_path);
        SAME_TEXT(attached_sandbox_id); SAME_NUM(last_attached_at); SAME_NUM(created_at); SAME_NUM(updated_at);
}

static void insert_sandbox(struct store *s, const char *account_id, const char *name, int64_t created_at,
                           char ret_id[25]) {
        struct sandbox sb;
        fill_sandbox(&sb, account_id, name, created_at);
        ASSERT_OK(store_sandbox_insert_capped(s, &sb, -1));
        memcpy(ret_id, sb.id, 25);
        sandbox_clear(&sb);
}

static enum sb_status status_of(struct store *s, const char *id) {
        struct sandbox sb = { 0 };
        ASSERT_OK(store_sandbox_get(s, id, &sb));
        enum sb_status st = sb.status;
        sandbox_clear(&sb);
        return st;
}

static void fill_volume(struct volume *v, const char *account_id, const char *name) {
        memset(v, 0, sizeof(*v));
        hexid_new(v->id);
        snprintf(v->account_id, sizeof(v->account_id), "%s", account_id);
        v->name = xstrdup(name);
        v->type = xstrdup("standalone");
        v->region_key = xstrdup("local");
        v->team = xstrdup("team-a");
        v->handle = xasprintf("paddock-vol-%s", v->id);
        v->mount_path = xstrdup("/data");
        v->size_gb = 3;
        v->created_at = v->updated_at = 1700000000000;
}

static void insert_volume(struct store *s, const char *account_id, const char *name, char ret_id[25]) {
        struct volume v;
        fill_volume(&v, account_id, name);
        ASSERT_OK(store_volume_insert_capped(s, &v, -1));
        memcpy(ret_id, v.id, 25);
        volume_clear(&v);
}

static char *attached_to(struct store *s, const char *vol_id) {
        struct volume v = { 0 };
        ASSERT_OK(store_volume_get(s, vol_id, &v));
        char *r = v.attached_sandbox_id ? xstrdup(v.attached_sandbox_id) : NULL;
        volume_clear(&v);
        return r;
}

/* One account with two sandboxes and one detached volume. */
struct vol_fixture { struct store *s; char acc[25], sb1[25], sb2[25], vol[25]; };
static void vol_fixture_open(struct vol_fixture *f, const char *name) {
        f->s = storetest_open(name);
        storetest_new_account(f->s, "alice", f->acc);
        insert_sandbox(f->s, f->acc, "one", 1, f->sb1);
        insert_sandbox(f->s, f->acc, "two", 2, f->sb2);
        insert_volume(f->s, f->acc, "data", f->vol);
}
/* The fixture in store `name`, as the locals s, sb1, sb2 and vol (f holds the rest). */
#define VOL_FIXTURE(name)                                 \
        struct vol_fixture f;                             \
        vol_fixture_open(&f, name);                       \
        struct store *s = f.s;                            \
        const char *sb1 = f.sb1, *sb2 = f.sb2, *vol = f.vol

/* Store `name` with one account and one sandbox in it, moved from starting to ready;
 * the sandbox's id in ret_id. */
static struct store *ready_sandbox_store(const char *name, char ret_id[25]) {
        struct store *s = storetest_open(name);
        char acc[25];
        storetest_new_account(s, "alice", acc);
        insert_sandbox(s, acc, "box", 1, ret_id);
        ASSERT_OK(store_sandbox_cas_status(s, ret_id, SB_STARTING, SB_READY));
        return s;
}

/* ---- open, schema, migrations ---- */

TEST(open_creates_current_schema_and_reopens) {
        struct store *s = storetest_open("fresh");
        s = store_close(s);
        ASSERT_NULL(s);
        ASSERT_EQ(raw_int("fresh", "SELECT MAX(version) FROM schema_version"), 7);
        ASSERT_EQ(raw_int("fresh", "SELECT COUNT(*) FROM schema_version"), 7);
        ASSERT_EQ(raw_int("fresh", "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
        /* Reopening runs no migration twice. */
        s = storetest_open("fresh");
        store_close(s);
        ASSERT_EQ(raw_int("fresh", "SELECT COUNT(*) FROM schema_version"), 7);
        ASSERT_NULL(store_close(NULL));
}

TEST(open_refuses_a_newer_schema_and_a_bad_path) {
        struct store *s = storetest_open("newer");
        store_close(s);
        raw_sql("newer", "INSERT INTO schema_version VALUES (99)");
        s = (struct store *) 0x1;
        ASSERT_EQ(store_open(storetest_path("newer"), &s), -EPROTO);
        ASSERT_TRUE(s == (struct store *) 0x1); /* ret untouched on failure */
        char bad[600];
        snprintf(bad, sizeof(bad), "%s/no/such/dir/x.db", test_tmpdir());
        ASSERT_TRUE(store_open(bad, &s) < 0);
}

/* A database written by the previous release (schema version 2, no volumes.deleting) opens,
 * migrates to the current version and keeps every row. The old file is made by taking the
 * current schema back to version 2 exactly as migration 3 would have found it. */
TEST(migration_from_version_2_keeps_data) {
        char acc[25], sb_id[25], vol[25], key_id[25];
        struct store *s = storetest_open("old");
        storetest_new_account(s, "old-timer", acc);
        insert_sandbox(s, acc, "survivor", 1000, sb_id);
        insert_volume(s, acc, "keep-me", vol);
        ASSERT_OK(store_volume_attach(s, vol, sb_id, "/data", 5));
        ASSERT_OK(store_key_add(s, acc, "hash-old", "pd_old", key_id));
        store_close(s);
        raw_sql("old", "ALTER TABLE volumes DROP COLUMN deleting; ALTER TABLE accounts DROP COLUMN max_concurrent;"
                       "ALTER TABLE accounts DROP COLUMN max_cpu; ALTER TABLE accounts DROP COLUMN max_memory;"
                       "ALTER TABLE accounts DROP COLUMN max_disk; ALTER TABLE accounts DROP COLUMN max_volume_gb;"
                       "ALTER TABLE accounts DROP COLUMN max_volumes; DROP TABLE egress_resolved; DROP TABLE egress_applied;"
                       "ALTER TABLE sandboxes DROP COLUMN metadata; ALTER TABLE sandboxes DROP COLUMN env; ALTER TABLE sandboxes DROP COLUMN e2b;"
                       "ALTER TABLE sandboxes DROP COLUMN pause_at_end; ALTER TABLE sandboxes DROP COLUMN pause_keep_memory; ALTER TABLE sandboxes DROP COLUMN run_s; ALTER TABLE sandboxes DROP COLUMN auto_resume;"
                       "DELETE FROM schema_version WHERE version > 2;");
        ASSERT_EQ(raw_int("old", "SELECT COUNT(*) FROM pragma_table_info('volumes') WHERE name = 'deleting'"), 0);

        s = storetest_open("old");
        ASSERT_EQ(raw_int("old", "SELECT MAX(version) FROM schema_version"), 7);
        ASSERT_EQ(raw_int("old", "SELECT COUNT(*) FROM pragma_table_info('sandboxes') WHERE name IN ('metadata', 'env', 'e2b')"), 3);
        ASSERT_EQ(raw_int("old", "SELECT COUNT(*) FROM pragma_table_info('volumes') WHERE name = 'deleting'"), 1);
        ASSERT_EQ(raw_int("old", "SELECT deleting FROM volumes"), 0);
        struct account a = { 0 };
        ASSERT_OK(store_key_lookup(s, "hash-old", &a));
        ASSERT_STREQ(a.id, acc);
        ASSERT_STREQ(a.name, "old-timer");
        for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++)
                ASSERT_EQ(a.limits[k], -1); /* migration 4: an old account runs under its plan's */
        account_clear(&a);
        struct sandbox sb = { 0 };
        ASSERT_OK(store_sandbox_get(s, sb_id, &sb));
        ASSERT_STREQ(sb.name, "survivor");
        sandbox_clear(&sb);
        _cleanup_free_ char *att = attached_to(s, vol);
        ASSERT_STREQ(att, sb_id);
        /* The migrated column works: the attached volume refuses deletion, a detached one is marked. */
        ASSERT_EQ(store_volume_begin_delete(s, vol, NULL), -EBUSY);
        ASSERT_OK(store_volume_detach_sandbox(s, sb_id, 6));
        ASSERT_OK(store_volume_begin_delete(s, vol, NULL));
        store_close(s);
}

TEST(migration_failure_rolls_back_and_reports) {
        struct store *s = storetest_open("broken");
        store_close(s);
        /* Version 2 with a "deleting" column already there: migration 3 cannot apply. */
        raw_sql("broken", "DELETE FROM schema_version WHERE version > 2;");
        s = (struct store *) 0x1;
        ASSERT_TRUE(store_open(storetest_path("broken"), &s) < 0);
        ASSERT_TRUE(s == (struct store *) 0x1);
        ASSERT_EQ(raw_int("broken", "SELECT MAX(version) FROM schema_version"), 2);
}

/* Every per-account limit is written under the column the account row reads back (the
 * column names and config_plan_limits[] must agree), and -1 returns it to the plan's. */
TEST(account_limits_round_trip_every_key) {
        char acc[25];
        struct store *s = storetest_open("limits");
        storetest_new_account(s, "tuned", acc);
        for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++)
                ASSERT_OK(store_account_set_limit(s, acc, k, 100 + (int64_t) k));
        ASSERT_OK(store_account_set_plan(s, acc, "gold"));
        struct account a = { 0 };
        ASSERT_OK(store_account_get(s, acc, &a));
        ASSERT_STREQ(a.plan, "gold");
        for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++)
                ASSERT_EQ(a.limits[k], 100 + (int64_t) k);
        account_clear(&a);
        ASSERT_OK(store_account_set_limit(s, acc, PLAN_MAX_VOLUMES, -1));
        ASSERT_OK(store_account_by_name(s, "tuned", &a));
        ASSERT_EQ(a.limits[PLAN_MAX_VOLUMES], -1);
        ASSERT_EQ(a.limits[PLAN_MAX_CONCURRENT], 100);
        account_clear(&a);
        ASSERT_EQ(store_account_set_limit(s, "000000000000000000000000", PLAN_MAX_CPU, 5), -ENOENT);
        ASSERT_EQ(store_account_set_plan(s, "000000000000000000000000", "gold"), -ENOENT);
        store_close(s);
}

/* The last egress apply: the typed resolved list goes in and comes back as it was, a second
 * put replaces it, forget removes it. */
TEST(egress_applied_round_trip) {
        struct store *s = storetest_open("applied");
        const char *id = "0123456789abcdef01234567";
        struct pj_node_resolved in[2] = {
                { .name = "api.example.com", .addrs = { 0xcb007105, 0xcb007106 }, .n_addrs = 2, .at_ms = 1700000000123 },
                { .name = "pypi.org", .addrs = { 0xc6336407 }, .n_addrs = 1, .at_ms = 42 },
        };
        struct pj_node_resolved *out = NULL;
        size_t n = 0;
        int64_t at = 0;
        ASSERT_EQ(store_egress_applied_get(s, id, &at, &out, &n), -ENOENT);
        ASSERT_OK(store_egress_applied_put(s, id, "node-a", 555, in, 2));
        ASSERT_OK(store_egress_applied_get(s, id, &at, &out, &n));
        ASSERT_EQ(at, 555);
        ASSERT_EQ(n, 2);
        for (size_t i = 0; i < 2; i++) {
                ASSERT_STREQ(out[i].name, in[i].name);
                ASSERT_EQ(out[i].n_addrs, in[i].n_addrs);
                ASSERT_EQ(out[i].at_ms, in[i].at_ms);
                for (size_t k = 0; k < in[i].n_addrs; k++)
                        ASSERT_EQ(out[i].addrs[k], in[i].addrs[k]);
        }
        free(out);
        ASSERT_OK(store_egress_applied_put(s, id, "node-a", 777, in + 1, 1));
        ASSERT_OK(store_egress_applied_get(s, id, &at, &out, &n));
        ASSERT_EQ(at, 777);
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(out[0].name, "pypi.org");
        free(out);
        ASSERT_OK(store_egress_applied_forget(s, id));
        ASSERT_EQ(store_egress_applied_get(s, id, &at, &out, &n), -ENOENT);
        store_close(s);
}

/* Migration 5: what an older controld kept as JSON text under meta "egress.applied:<id>"
 * becomes rows, nothing lost, and the meta row goes. */
TEST(migration_5_moves_the_applied_records) {
        struct store *s = storetest_open("applied-old");
        store_close(s);
        raw_sql("applied-old", "DROP TABLE egress_resolved; DROP TABLE egress_applied; DELETE FROM schema_version WHERE version > 4;"
                               "ALTER TABLE sandboxes DROP COLUMN metadata; ALTER TABLE sandboxes DROP COLUMN env; ALTER TABLE sandboxes DROP COLUMN e2b;"
                               "ALTER TABLE sandboxes DROP COLUMN pause_at_end; ALTER TABLE sandboxes DROP COLUMN pause_keep_memory; ALTER TABLE sandboxes DROP COLUMN run_s; ALTER TABLE sandboxes DROP COLUMN auto_resume;"
                               "INSERT INTO meta VALUES ('egress.applied:0123456789abcdef01234567', "
                               "'{\"node\":\"n1\",\"applied_at\":123,\"resolved\":[{\"name\":\"api.example.com\","
                               "\"addrs\":[\"203.0.113.5\",\"203.0.113.6\"],\"at\":99}]}');");
        s = storetest_open("applied-old");
        struct pj_node_resolved *out = NULL;
        size_t n = 0;
        int64_t at = 0;
        ASSERT_OK(store_egress_applied_get(s, "0123456789abcdef01234567", &at, &out, &n));
        ASSERT_EQ(at, 123);
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(out[0].name, "api.example.com");
        ASSERT_EQ(out[0].n_addrs, 2);
        ASSERT_EQ(out[0].addrs[0], 0xcb007105u);
        ASSERT_EQ(out[0].addrs[1], 0xcb007106u);
        ASSERT_EQ(out[0].at_ms, 99);
        free(out);
        ASSERT_EQ(raw_int("applied-old", "SELECT COUNT(*) FROM meta WHERE key LIKE 'egress.applied:%'"), 0);
        store_close(s);
}

/* ---- meta ---- */

TEST(meta_get_or_set_keeps_the_first_value) {
        struct store *s = storetest_open("meta");
        _cleanup_free_ char *v1 = NULL, *v2 = NULL, *v3 = NULL;
        ASSERT_OK(store_meta_get_or_set(s, "instance_id", "aaa", &v1));
        ASSERT_STREQ(v1, "aaa");
        ASSERT_OK(store_meta_get_or_set(s, "instance_id", "bbb", &v2));
        ASSERT_STREQ(v2, "aaa");
        ASSERT_OK(store_meta_get_or_set(s, "other", "ccc", &v3));
        ASSERT_STREQ(v3, "ccc");
        store_close(s);
        /* It survives a reopen. */
        s = storetest_open("meta");
        _cleanup_free_ char *v4 = NULL;
        ASSERT_OK(store_meta_get_or_set(s, "instance_id", "zzz", &v4));
        ASSERT_STREQ(v4, "aaa");
        store_close(s);
}

/* ---- accounts and keys ---- */

static int collect_names(const struct account *a, void *ud) {
        char *buf = ud;
        strcat(buf, a->name);
        strcat(buf, ",");
        return 0;
}

static int stop_after_first(const struct account *a, void *ud) {
        (void) a;
        (*(int *) ud)++;
        return -EINTR;
}

TEST(accounts_create_get_by_name_foreach) {
        struct store *s = storetest_open("accounts");
        struct account a = { 0 }, b = { 0 };
        ASSERT_OK(store_account_create(s, "alice", "free", &a));
        ASSERT_EQ(strlen(a.id), 24);
        ASSERT_STREQ(a.name, "alice");
        ASSERT_STREQ(a.plan, "free");
        ASSERT_TRUE(a.created_at > 0);
        ASSERT_OK(store_account_create(s, "bob", "pro", NULL));
        ASSERT_EQ(store_account_create(s, "alice", "pro", NULL), -EEXIST);

        ASSERT_OK(store_account_get(s, a.id, &b));
        ASSERT_STREQ(b.id, a.id);
        ASSERT_STREQ(b.name, "alice");
        ASSERT_STREQ(b.plan, "free");
        account_clear(&b);
        ASSERT_OK(store_account_by_name(s, "bob", &b));
        ASSERT_STREQ(b.plan, "pro");
        account_clear(&b);
        ASSERT_EQ(store_account_get(s, "0123456789abcdef01234567", &b), -ENOENT);
        ASSERT_EQ(store_account_by_name(s, "carol", &b), -ENOENT);

        char names[256] = "";
        ASSERT_OK(store_account_foreach(s, collect_names, names));
        ASSERT_STREQ(names, "alice,bob,");
        int calls = 0;
        ASSERT_EQ(store_account_foreach(s, stop_after_first, &calls), -EINTR);
        ASSERT_EQ(calls, 1);
        account_clear(&a);
        account_clear(NULL);
        store_close(s);
}

struct key_seen { int n; char prefixes[256]; int revoked; };
static int collect_keys(const char *id, const char *prefix, int64_t created, int64_t revoked, void *ud) {
        struct key_seen *k = ud;
        ASSERT_EQ(strlen(id), 24);
        ASSERT_TRUE(created > 0);
        k->n++;
        strcat(k->prefixes, prefix);
        strcat(k->prefixes, revoked ? "(revoked)," : ",");
        k->revoked += revoked != 0;
        return 0;
}

TEST(keys_add_lookup_revoke_foreach) {
        struct store *s = storetest_open("keys");
        char acc[25], other[25], k1[25], k2[25], k3[25];
        storetest_new_account(s, "alice", acc);
        storetest_new_account(s, "mallory", other);
        ASSERT_OK(store_key_add(s, acc, "hash1", "pd_aaa", k1));
        ASSERT_OK(store_key_add(s, acc, "hash2", "pd_bbb", k2));
        ASSERT_OK(store_key_add(s, other, "hash3", "pd_ccc", k3));
        ASSERT_EQ(store_key_add(s, "0123456789abcdef01234567", "hash4", "pd_ddd", k3), -ENOENT);
        ASSERT_EQ(store_key_add(s, acc, "hash1", "pd_eee", k3), -ENOENT); /* same hash: refused */

        struct account a = { 0 };
        ASSERT_OK(store_key_lookup(s, "hash2", &a));
        ASSERT_STREQ(a.id, acc);
        ASSERT_STREQ(a.name, "alice");
        account_clear(&a);
        ASSERT_EQ(store_key_lookup(s, "nope", &a), -ENOENT);

        ASSERT_OK(store_key_revoke(s, "pd_aaa"));   /* by prefix */
        ASSERT_EQ(store_key_lookup(s, "hash1", &a), -ENOENT);
        ASSERT_EQ(store_key_revoke(s, "pd_aaa"), -ENOENT);  /* already revoked */
        ASSERT_OK(store_key_revoke(s, k2));        /* by id */
        ASSERT_EQ(store_key_lookup(s, "hash2", &a), -ENOENT);
        ASSERT_EQ(store_key_revoke(s, "unknown"), -ENOENT);
        ASSERT_OK(store_key_lookup(s, "hash3", &a));  /* others' keys untouched */
        ASSERT_STREQ(a.id, other);
        account_clear(&a);

        struct key_seen seen = { 0 };
        ASSERT_OK(store_key_foreach(s, acc, collect_keys, &seen));
        ASSERT_EQ(seen.n, 2);
        ASSERT_EQ(seen.revoked, 2);
        ASSERT_STREQ(seen.prefixes, "pd_aaa(revoked),pd_bbb(revoked),");
        store_close(s);
}

/* ---- sandboxes ---- */

TEST(status_names_round_trip) {
        for (int i = 0; i < _SB_STATUS_MAX; i++)
                ASSERT_EQ(sb_status_from_str(sb_status_str((enum sb_status) i)), i);
        ASSERT_EQ(sb_status_from_str("bogus"), -EINVAL);
        ASSERT_EQ(sb_status_from_str(NULL), -EINVAL);
        ASSERT_STREQ(sb_status_str(_SB_STATUS_MAX), "unknown");
        ASSERT_TRUE(sb_status_active(SB_STARTING));
        ASSERT_TRUE(sb_status_active(SB_PAUSED));
        ASSERT_TRUE(sb_status_active(SB_RESUMING));
        ASSERT_FALSE(sb_status_active(SB_FAILED));
        ASSERT_FALSE(sb_status_active(SB_DESTROYED));
}

TEST(sandbox_insert_get_update_round_trip_every_column) {
        struct store *s = storetest_open("sb");
        char acc[25];
        storetest_new_account(s, "alice", acc);
        struct sandbox in, out = { 0 };
        fill_sandbox(&in, acc, "box", 1000);
        ASSERT_OK(store_sandbox_insert_capped(s, &in, 5));
        ASSERT_EQ(store_sandbox_insert_capped(s, &in, 5), -EEXIST);  /* same id */
        ASSERT_OK(store_sandbox_get(s, in.id, &out));
        expect_same_sandbox(&out, &in);
        /* The columns stored as text read back as what was written. */
        ASSERT_EQ(out.egress.mode, PJ_EGRESS_DENY_ALL);
        {
                _cleanup_free_ char *allow = sb_egress_allow_to_text(&out.egress);
                ASSERT_STREQ(allow, "[\"10.0.0.1\"]");
        }
        {
                _cleanup_free_ char *timings = sb_timings_to_text(&out.timings);
                ASSERT_STREQ(timings, "{\"validate_ms\":1}");
        }
        sandbox_clear(&out);

        /* Full-row update of the mutable columns. */
        in.status = SB_READY;
        in.container_id = xstrdup("c0ffee");
        in.ip = xstrdup("10.1.2.3");
        in.node_id = xstrdup("local");
        in.job_id = xstrdup("job");
        in.alloc_id = xstrdup("alloc");
        in.paused_at = 77;
        ASSERT_OK(sb_map_from_text(&in.metadata, "{\"owner\":\"alice\"}"));
        ASSERT_OK(sb_map_from_text(&in.env, "{\"A\":\"1\",\"B\":\"two words\"}"));
        ASSERT_OK(sb_e2b_from_text(&in.e2b, "{\"templateID\":\"base\",\"public\":true}"));
        free(in.team);
        in.team = NULL;
        ASSERT_OK(store_sandbox_update(s, &in));
        ASSERT_OK(store_sandbox_get(s, in.id, &out));
        expect_same_sandbox(&out, &in);
        /* read back typed: no caller parses the columns again */
        ASSERT_STREQ(sb_map_get(&out.env, "B"), "two words");
        ASSERT_STREQ(sb_map_get(&out.metadata, "owner"), "alice");
        ASSERT_TRUE(out.e2b.set);
        ASSERT_TRUE(out.e2b.public);
        ASSERT_STREQ(out.e2b.template_id, "base");
        sandbox_clear(&out);

        /* Defaults for NULL text the schema requires. */
        struct sandbox bare;
        fill_sandbox(&bare, acc, "bare", 2000);
        sb_egress_done(&bare.egress);
        bare.snapshot_mode = (free(bare.snapshot_mode), NULL);
        ASSERT_OK(store_sandbox_insert_capped(s, &bare, -1));
        ASSERT_OK(store_sandbox_get(s, bare.id, &out));
        ASSERT_EQ(out.egress.n_allow, 0);
        ASSERT_STREQ(out.snapshot_mode, "manual");
        sandbox_clear(&out);
        sandbox_clear(&bare);

        ASSERT_OK(store_sandbox_touch(s, in.id, 424242));
        ASSERT_OK(store_sandbox_get(s, in.id, &out));
        ASSERT_EQ(out.last_activity_at, 424242);
        sandbox_clear(&out);

        ASSERT_EQ(store_sandbox_get(s, "0123456789abcdef01234567", &out), -ENOENT);
        ASSERT_OK(store_sandbox_get_owned(s, acc, in.id, &out));
        ASSERT_STREQ(out.name, "box");
        sandbox_clear(&out);
        ASSERT_EQ(store_sandbox_get_owned(s, "0123456789abcdef01234567", in.id, &out), -ENOENT);
        hexid_new(in.id);
        ASSERT_EQ(store_sandbox_update(s, &in), -ENOENT);
        sandbox_clear(&in);
        sandbox_clear(NULL);
        store_close(s);
}

TEST(sandbox_insert_needs_a_real_account) {
        struct store *s = storetest_open("sb-fk");
        struct sandbox sb;
        fill_sandbox(&sb, "0123456789abcdef01234567", "orphan", 1);
        ASSERT_EQ(store_sandbox_insert_capped(s, &sb, -1), -EEXIST); /* constraint (foreign key) */
        sandbox_clear(&sb);
        store_close(s);
}

/* The page store_sandbox_list(s, acc, status, offset, limit) is exactly the sandboxes in
 * want (NULL-terminated, in order), out of want_total that match. */
static void expect_page(struct store *s, const char *acc, int status, int64_t offset, int64_t limit, int64_t want_total,
                        const char *const *want) {
        struct sandbox *a = NULL;
        size_t n = 0, n_want = 0;
        int64_t total = 0;
        ASSERT_OK(store_sandbox_list(s, acc, status, offset, limit, &a, &n, &total));
        ASSERT_EQ(total, want_total);
        while (want[n_want])
                n_want++;
        ASSERT_EQ(n, n_want);
        for (size_t i = 0; i < n; i++)
                ASSERT_STREQ(a[i].id, want[i]);
        sandbox_array_free(a, n);
}

TEST(sandbox_delete_list_count) {
        struct store *s = storetest_open("list");
        char a1[25], a2[25], ids[5][25], other[25];
        storetest_new_account(s, "alice", a1);
        storetest_new_account(s, "bob", a2);
        for (int i = 0; i < 5; i++) {
                char name[16];
                snprintf(name, sizeof(name), "b%d", i);
                insert_sandbox(s, a1, name, 1000 + i, ids[i]);
        }
        insert_sandbox(s, a2, "bobs", 500, other);
        ASSERT_OK(store_sandbox_cas_status(s, ids[1], SB_STARTING, SB_READY));
        ASSERT_OK(store_sandbox_cas_status(s, ids[3], SB_STARTING, SB_READY));
        ASSERT_OK(store_sandbox_cas_status(s, other, SB_STARTING, SB_READY));

        struct sandbox *a = NULL;
        size_t n = 0;
        /* Newest first, paged, with the total of the whole filter. */
        expect_page(s, a1, -1, 1, 2, 5, (const char *[]) { ids[3], ids[2], NULL });
        expect_page(s, a1, SB_READY, 0, 10, 2, (const char *[]) { ids[3], ids[1], NULL });
        expect_page(s, a1, SB_PAUSED, 0, 10, 0, (const char *[]) { NULL });

        /* Across accounts, oldest first. */
        ASSERT_OK(store_sandbox_list_status(s, NULL, SB_READY, &a, &n));
        ASSERT_EQ(n, 3);
        ASSERT_STREQ(a[0].id, other);
        ASSERT_STREQ(a[1].id, ids[1]);
        sandbox_array_free(a, n);
        ASSERT_OK(store_sandbox_list_status(s, a2, -1, &a, &n));
        ASSERT_EQ(n, 1);
        ASSERT_STREQ(a[0].id, other);
        sandbox_array_free(a, n);
        ASSERT_OK(store_sandbox_list_status(s, NULL, -1, &a, &n));
        ASSERT_EQ(n, 6);
        sandbox_array_free(a, n);

        int64_t counts[_SB_STATUS_MAX];
        ASSERT_OK(store_sandbox_count_by_status(s, counts));
        ASSERT_EQ(counts[SB_READY], 3);
        ASSERT_EQ(counts[SB_STARTING], 3);
        ASSERT_EQ(counts[SB_DESTROYED], 0);

        ASSERT_OK(store_sandbox_delete(s, ids[0]));
        struct sandbox sb = { 0 };
        ASSERT_EQ(store_sandbox_get(s, ids[0], &sb), -ENOENT);
        ASSERT_OK(store_sandbox_count_by_status(s, counts));
        ASSERT_EQ(counts[SB_STARTING], 2);
        store_close(s);
}

/* ---- plan caps under concurrency ---- */

struct cap_run {
        struct store **stores;
        int n_stores;
        const char *account_id;
        int64_t cap;
        int ok, quota, other;
        pthread_mutex_t lock;
        pthread_barrier_t go;
};
struct cap_arg { struct cap_run *run; int i; };

static void *cap_insert(void *p) {
        struct cap_arg *a = p;
        struct cap_run *run = a->run;
        struct sandbox sb;
        char name[16];
        snprintf(name, sizeof(name), "t%d", a->i);
        fill_sandbox(&sb, run->account_id, name, 1000 + a->i);
        pthread_barrier_wait(&run->go);
        int r = store_sandbox_insert_capped(run->stores[a->i % run->n_stores], &sb, run->cap);
        sandbox_clear(&sb);
        pthread_mutex_lock(&run->lock);
        if (r == 0)
                run->ok++;
        else if (r == -EDQUOT)
                run->quota++;
        else
                run->other++;
        pthread_mutex_unlock(&run->lock);
        return NULL;
}

/* 50 threads create at once against a cap of 3, through n_stores connections to one file. */
static void cap_race(const char *name, int n_stores) {
        enum { N = 50 };
        struct store *stores[8];
        char acc[25];
        for (int i = 0; i < n_stores; i++)
                stores[i] = storetest_open(name);
        storetest_new_account(stores[0], "racer", acc);
        struct cap_run run = { .stores = stores, .n_stores = n_stores, .account_id = acc, .cap = 3 };
        pthread_mutex_init(&run.lock, NULL);
        pthread_barrier_init(&run.go, NULL, N);
        pthread_t t[N];
        struct cap_arg args[N];
        for (int i = 0; i < N; i++) {
                args[i] = (struct cap_arg) { &run, i };
                ASSERT_EQ(pthread_create(&t[i], NULL, cap_insert, &args[i]), 0);
        }
        for (int i = 0; i < N; i++)
                pthread_join(t[i], NULL);
        ASSERT_EQ(run.ok, 3);
        ASSERT_EQ(run.quota, N - 3);
        ASSERT_EQ(run.other, 0);
        ASSERT_EQ(raw_int(name, "SELECT COUNT(*) FROM sandboxes"), 3);

        /* Only active sandboxes count: one destroyed and one failed free two places. */
        struct sandbox *a = NULL;
        size_t n = 0;
        ASSERT_OK(store_sandbox_list_status(stores[0], acc, -1, &a, &n));
        ASSERT_EQ(n, 3);
        ASSERT_OK(store_sandbox_cas_status(stores[0], a[0].id, SB_STARTING, SB_DESTROYED));
        ASSERT_OK(store_sandbox_cas_status(stores[0], a[1].id, SB_STARTING, SB_FAILED));
        ASSERT_OK(store_sandbox_cas_status(stores[0], a[2].id, SB_STARTING, SB_PAUSED));  /* paused still counts */
        sandbox_array_free(a, n);
        struct sandbox sb;
        fill_sandbox(&sb, acc, "again1", 1);
        ASSERT_OK(store_sandbox_insert_capped(stores[n_stores - 1], &sb, 3));
        hexid_new(sb.id);
        ASSERT_OK(store_sandbox_insert_capped(stores[0], &sb, 3));
        hexid_new(sb.id);
        ASSERT_EQ(store_sandbox_insert_capped(stores[0], &sb, 3), -EDQUOT);
        ASSERT_OK(store_sandbox_insert_capped(stores[0], &sb, -1));   /* no cap */
        sandbox_clear(&sb);
        for (int i = 0; i < n_stores; i++)
                store_close(stores[i]);
}

TEST_FULL(sandbox_cap_is_exact_under_50_threads, 60) { cap_race("cap1", 1); }
TEST_FULL(sandbox_cap_is_exact_across_connections, 60) { cap_race("cap5", 5); }

/* ---- compare-and-set ---- */

TEST(cas_status_wins_only_from_the_expected_status) {
        char id[25];
        struct store *s = ready_sandbox_store("cas", id);
        ASSERT_EQ(status_of(s, id), SB_READY);
        /* The reaper's view is stale: it believes the sandbox is still starting. */
        ASSERT_EQ(store_sandbox_cas_status(s, id, SB_STARTING, SB_FAILED), -ESTALE);
        ASSERT_EQ(status_of(s, id), SB_READY);
        ASSERT_EQ(store_sandbox_cas_status(s, "0123456789abcdef01234567", SB_READY, SB_PAUSING), -ENOENT);
        store_close(s);
}

/* The reaper race: it read 'ready', the user paused meanwhile; its destroy must not land. */
TEST(update_cas_loses_when_the_status_changed) {
        char id[25];
        struct store *s = ready_sandbox_store("ucas", id);

        struct sandbox stale = { 0 };
        ASSERT_OK(store_sandbox_get(s, id, &stale));            /* the reaper's list */
        ASSERT_OK(store_sandbox_cas_status(s, id, SB_READY, SB_PAUSING));  /* the user pauses */
        enum sb_status seen = stale.status;
        stale.status = SB_DESTROYED;
        stale.destroyed_at = 99;
        stale.destroy_reason = xstrdup("failed");
        ASSERT_EQ(store_sandbox_update_cas(s, &stale, seen), -ESTALE);
        struct sandbox now = { 0 };
        ASSERT_OK(store_sandbox_get(s, id, &now));
        ASSERT_EQ(now.status, SB_PAUSING);
        ASSERT_EQ(now.destroyed_at, 0);
        ASSERT_NULL(now.destroy_reason);
        sandbox_clear(&now);

        /* From the status it really has, the same write lands with every column. */
        ASSERT_OK(store_sandbox_update_cas(s, &stale, SB_PAUSING));
        ASSERT_OK(store_sandbox_get(s, id, &now));
        ASSERT_EQ(now.status, SB_DESTROYED);
        ASSERT_EQ(now.destroyed_at, 99);
        ASSERT_STREQ(now.destroy_reason, "failed");
        sandbox_clear(&now);

        hexid_new(stale.id);
        ASSERT_EQ(store_sandbox_update_cas(s, &stale, SB_READY), -ENOENT);
        sandbox_clear(&stale);
        store_close(s);
}

struct cas_run { struct store *s; const char *id; int wins, losses; pthread_mutex_t lock; pthread_barrier_t go; };
static void *cas_thread(void *p) {
        struct cas_run *run = p;
        pthread_barrier_wait(&run->go);
        int r = store_sandbox_cas_status(run->s, run->id, SB_READY, SB_DESTROYED);
        pthread_mutex_lock(&run->lock);
        if (r == 0)
                run->wins++;
        else if (r == -ESTALE)
                run->losses++;
        pthread_mutex_unlock(&run->lock);
        return NULL;
}

TEST_FULL(cas_has_exactly_one_winner_among_50_threads, 60) {
        enum { N = 50 };
        char id[25];
        struct store *s = ready_sandbox_store("cas50", id);
        struct cas_run run = { .s = s, .id = id };
        pthread_mutex_init(&run.lock, NULL);
        pthread_barrier_init(&run.go, NULL, N);
        pthread_t t[N];
        for (int i = 0; i < N; i++)
                ASSERT_EQ(pthread_create(&t[i], NULL, cas_thread, &run), 0);
        for (int i = 0; i < N; i++)
                pthread_join(t[i], NULL);
        ASSERT_EQ(run.wins, 1);
        ASSERT_EQ(run.losses, N - 1);
        store_close(s);
}

/* ---- volumes ---- */

TEST(volume_insert_get_update_list_cap) {
        struct store *s = storetest_open("vol");
        char acc[25], other[25], v1[25], v2[25];
        storetest_new_account(s, "alice", acc);
        storetest_new_account(s, "bob", other);
        struct volume v;
        fill_volume(&v, acc, "data");
        ASSERT_OK(store_volume_insert_capped(s, &v, 2));
        memcpy(v1, v.id, 25);
        struct volume g = { 0 };
        ASSERT_OK(store_volume_get(s, v1, &g));
        expect_same_volume(&g, &v);
        volume_clear(&g);
        hexid_new(v.id);
        ASSERT_EQ(store_volume_insert_capped(s, &v, 2), -EEXIST);   /* same name, same account */
        snprintf(v.account_id, sizeof(v.account_id), "%s", other);
        ASSERT_OK(store_volume_insert_capped(s, &v, 2));             /* same name, other account */
        snprintf(v.account_id, sizeof(v.account_id), "%s", acc);
        hexid_new(v.id);
        free(v.name);
        v.name = xstrdup("data2");
        ASSERT_OK(store_volume_insert_capped(s, &v, 2));
        memcpy(v2, v.id, 25);
        hexid_new(v.id);
        free(v.name);
        v.name = xstrdup("data3");
        ASSERT_EQ(store_volume_insert_capped(s, &v, 2), -EDQUOT);
        volume_clear(&v);

        ASSERT_OK(store_volume_get(s, v1, &g));
        g.size_gb = 9;
        free(g.mount_path);
        g.mount_path = xstrdup("/mnt");
        ASSERT_OK(store_volume_update(s, &g));
        volume_clear(&g);
        ASSERT_OK(store_volume_get(s, v1, &g));
        ASSERT_EQ(g.size_gb, 9);
        ASSERT_STREQ(g.mount_path, "/mnt");
        volume_clear(&g);
        ASSERT_EQ(store_volume_get(s, "0123456789abcdef01234567", &g), -ENOENT);
        /* Owned: the same row for its account, none for another. */
        ASSERT_OK(store_volume_get_owned(s, acc, v1, &g));
        ASSERT_STREQ(g.name, "data");
        volume_clear(&g);
        ASSERT_EQ(store_volume_get_owned(s, other, v1, &g), -ENOENT);

        struct volume *a = NULL;
        size_t n = 0;
        int64_t total = 0;
        ASSERT_OK(store_volume_list(s, acc, 0, 1, &a, &n, &total));
        ASSERT_EQ(total, 2);
        ASSERT_EQ(n, 1);
        volume_array_free(a, n);
        ASSERT_OK(store_volume_list(s, acc, 0, 10, &a, &n, &total));
        ASSERT_EQ(n, 2);
        ASSERT_TRUE((!strcmp(a[0].id, v1) && !strcmp(a[1].id, v2)) || (!strcmp(a[0].id, v2) && !strcmp(a[1].id, v1)));
        volume_array_free(a, n);
        ASSERT_OK(store_volume_list(s, other, 0, 10, &a, &n, &total));
        ASSERT_EQ(total, 1);
        volume_array_free(a, n);
        store_close(s);
}

TEST(volume_attach_detach_delete) {
        VOL_FIXTURE("attach");

        ASSERT_OK(store_volume_attach(s, vol, sb1, "/work", 500));
        ASSERT_OK(store_volume_attach(s, vol, sb1, "/work", 501));     /* same sandbox again: fine */
        ASSERT_EQ(store_volume_attach(s, vol, sb2, "/work", 502), -EBUSY);
        ASSERT_EQ(store_volume_attach(s, "0123456789abcdef01234567", sb2, "/w", 1), -ENOENT);
        struct volume g = { 0 };
        ASSERT_OK(store_volume_get(s, vol, &g));
        ASSERT_STREQ(g.attached_sandbox_id, sb1);
        ASSERT_STREQ(g.mount_path, "/work");
        ASSERT_EQ(g.last_attached_at, 501);
        volume_clear(&g);

        ASSERT_EQ(store_volume_delete(s, vol), -EBUSY);
        ASSERT_OK(store_volume_detach_sandbox(s, sb2, 600));          /* not attached to sb2: no-op */
        _cleanup_free_ char *still = attached_to(s, vol);
        ASSERT_STREQ(still, sb1);
        ASSERT_OK(store_volume_detach_sandbox(s, sb1, 601));
        _cleanup_free_ char *none = attached_to(s, vol);
        ASSERT_NULL(none);
        ASSERT_OK(store_volume_attach(s, vol, sb2, "/w2", 700));
        ASSERT_OK(store_volume_detach_sandbox(s, sb2, 701));
        ASSERT_OK(store_volume_delete(s, vol));
        ASSERT_EQ(store_volume_get(s, vol, &g), -ENOENT);
        store_close(s);
}

/* The volume delete race: a delete must be decided and marked in the database before the
 * backend volume goes, so that no create can attach a volume whose data is being removed. */
TEST(volume_begin_delete_refuses_attached_and_blocks_attach) {
        VOL_FIXTURE("vdel");

        /* Attached: refused, nothing marked. */
        ASSERT_OK(store_volume_attach(s, vol, sb1, "/work", 10));
        ASSERT_EQ(store_volume_begin_delete(s, vol, NULL), -EBUSY);
        ASSERT_EQ(store_volume_begin_delete(s, vol, sb2), -EBUSY);    /* not sb2's to delete */
        ASSERT_EQ(raw_int("vdel", "SELECT deleting FROM volumes"), 0);
        ASSERT_OK(store_volume_detach_sandbox(s, sb1, 11));

        /* Detached: marked; from then on no sandbox can attach it. */
        ASSERT_OK(store_volume_begin_delete(s, vol, NULL));
        ASSERT_EQ(raw_int("vdel", "SELECT deleting FROM volumes"), 1);
        ASSERT_EQ(store_volume_attach(s, vol, sb2, "/work", 12), -ENOENT);
        _cleanup_free_ char *att = attached_to(s, vol);
        ASSERT_NULL(att);
        ASSERT_EQ(store_volume_begin_delete(s, vol, NULL), -EALREADY);  /* a second delete */

        /* The backend removal failed: the mark is lifted and the volume is usable again. */
        ASSERT_OK(store_volume_abort_delete(s, vol));
        ASSERT_OK(store_volume_attach(s, vol, sb2, "/work", 13));
        ASSERT_OK(store_volume_detach_sandbox(s, sb2, 14));

        /* Success path: mark, (backend removal), delete the row. */
        ASSERT_OK(store_volume_begin_delete(s, vol, NULL));
        ASSERT_OK(store_volume_delete(s, vol));
        ASSERT_EQ(store_volume_begin_delete(s, vol, NULL), -ENOENT);
        store_close(s);
}

TEST(volume_begin_delete_by_its_own_sandbox_detaches_and_marks) {
        VOL_FIXTURE("vown");
        char v2[25];
        insert_volume(s, f.acc, "other", v2);
        ASSERT_OK(store_volume_attach(s, vol, sb1, "/work", 10));
        ASSERT_OK(store_volume_begin_delete(s, vol, sb1));   /* a failed create drops its own volume */
        _cleanup_free_ char *att = attached_to(s, vol);
        ASSERT_NULL(att);
        ASSERT_EQ(store_volume_attach(s, vol, sb2, "/work", 11), -ENOENT);
        ASSERT_OK(store_volume_delete(s, vol));

        /* A restart after a crash mid-delete lifts every mark (the delete can be retried). */
        ASSERT_OK(store_volume_begin_delete(s, v2, NULL));
        ASSERT_OK(store_volume_abort_delete(s, NULL));
        ASSERT_OK(store_volume_attach(s, v2, sb2, "/work", 12));
        store_close(s);
}

struct vrace {
        struct store *sa, *sd;   /* attach through one connection, delete through another */
        const char *vol, *sb;
        int attached, deleted;
        pthread_barrier_t go;
};
static void *vrace_attach(void *p) {
        struct vrace *v = p;
        pthread_barrier_wait(&v->go);
        v->attached = store_volume_attach(v->sa, v->vol, v->sb, "/w", 1) == 0;
        return NULL;
}
static void *vrace_delete(void *p) {
        struct vrace *v = p;
        pthread_barrier_wait(&v->go);
        v->deleted = store_volume_begin_delete(v->sd, v->vol, NULL) == 0;
        return NULL;
}

/* Attach and delete at once, many times, over one and two connections: exactly one wins. */
TEST_FULL(volume_attach_and_delete_never_both_win, 60) {
        struct store *s = storetest_open("vrace"), *s2 = storetest_open("vrace");
        char acc[25], sb[25];
        storetest_new_account(s, "alice", acc);
        insert_sandbox(s, acc, "one", 1, sb);
        for (int i = 0; i < 100; i++) {
                char vol[25], name[16];
                snprintf(name, sizeof(name), "v%d", i);
                insert_volume(s, acc, name, vol);
                struct vrace v = { .sa = s, .sd = i % 2 ? s2 : s, .vol = vol, .sb = sb };
                pthread_barrier_init(&v.go, NULL, 2);
                pthread_t a, d;
                ASSERT_EQ(pthread_create(&a, NULL, vrace_attach, &v), 0);
                ASSERT_EQ(pthread_create(&d, NULL, vrace_delete, &v), 0);
                pthread_join(a, NULL);
                pthread_join(d, NULL);
                pthread_barrier_destroy(&v.go);
                ASSERT_EQ(v.attached + v.deleted, 1);
                _cleanup_free_ char *att = attached_to(s, vol);
                if (v.deleted)
                        ASSERT_NULL(att);
                else
                        ASSERT_STREQ(att, sb);
                ASSERT_OK(store_volume_detach_sandbox(s, sb, 2));
        }
        store_close(s2);
        store_close(s);
}

/* ---- usage and stats ---- */

TEST(usage_accumulates_per_account_and_period) {
        struct store *s = storetest_open("usage");
        char a1[25], a2[25];
        storetest_new_account(s, "alice", a1);
        storetest_new_account(s, "bob", a2);
        double cost = -1;
        ASSERT_OK(store_usage_get(s, a1, "2026-12", &cost));
        ASSERT_TRUE(cost == 0);
        ASSERT_OK(store_usage_add(s, a1, "2026-12", 10, 20, 0.25));
        ASSERT_OK(store_usage_add(s, a1, "2026-12", 10, 20, 0.5));
        ASSERT_OK(store_usage_add(s, a1, "2026-11", 1, 1, 7));
        ASSERT_OK(store_usage_add(s, a2, "2026-12", 1, 1, 3));
        ASSERT_OK(store_usage_get(s, a1, "2026-12", &cost));
        ASSERT_TRUE(cost == 0.75);
        ASSERT_OK(store_usage_get(s, a1, "2026-11", &cost));
        ASSERT_TRUE(cost == 7);
        ASSERT_OK(store_usage_get(s, a2, "2026-12", &cost));
        ASSERT_TRUE(cost == 3);
        ASSERT_EQ(raw_int("usage", "SELECT CAST(cpu_mhz_seconds AS INTEGER) FROM usage WHERE period = '2026-12' "
                                   "AND cost = 0.75"), 20);
        ASSERT_EQ(store_usage_add(s, "0123456789abcdef01234567", "2026-12", 1, 1, 1), -EEXIST); /* foreign key */
        store_close(s);
}

TEST(stats_add_range_prune) {
        struct store *s = storetest_open("stats");
        ASSERT_OK(store_stats_add(s, "sb-a", 100, 1.5, 10, 1000));
        ASSERT_OK(store_stats_add(s, "sb-a", 300, 2.5, 20, 2000));
        ASSERT_OK(store_stats_add(s, "sb-a", 200, 3.5, 30, 3000));
        ASSERT_OK(store_stats_add(s, "sb-b", 250, 9, 9, 9));
        struct stats_sample *a = NULL;
        size_t n = 0;
        ASSERT_OK(store_stats_range(s, "sb-a", 150, &a, &n));
        ASSERT_EQ(n, 2);
        ASSERT_EQ(a[0].ts_ms, 200);   /* ordered by time */
        ASSERT_TRUE(a[0].cpu_pct == 3.5 && a[0].mem_pct == 30 && a[0].net_bps == 3000);
        ASSERT_EQ(a[1].ts_ms, 300);
        free(a);
        ASSERT_OK(store_stats_prune(s, 250));
        ASSERT_OK(store_stats_range(s, "sb-a", 0, &a, &n));
        ASSERT_EQ(n, 1);
        ASSERT_EQ(a[0].ts_ms, 300);
        free(a);
        ASSERT_OK(store_stats_range(s, "sb-b", 0, &a, &n));
        ASSERT_EQ(n, 1);
        free(a);
        ASSERT_OK(store_stats_range(s, "sb-none", 0, &a, &n));
        ASSERT_EQ(n, 0);
        free(a);
        store_close(s);
}

/* ---- nodes ---- */

TEST(nodes_drain_contact_and_live_counts) {
        struct store *s = storetest_open("nodes");
        char acc[25], a[25], b[25], c[25];
        struct node_info *n = NULL;
        size_t k = 9;
        storetest_new_account(s, "ops", acc);
        ASSERT_OK(store_node_list(s, &n, &k));
        ASSERT_EQ(k, 0);
        free(n);
        ASSERT_EQ(store_node_drained(s, "n1"), 0);  /* unknown = not drained */

        /* Live sandboxes count on their node (paused and terminal ones do not). */
        insert_sandbox(s, acc, "a", 1, a);
        insert_sandbox(s, acc, "b", 2, b);
        insert_sandbox(s, acc, "c", 3, c);
        const char *ids[] = { a, b, c };
        const enum sb_status st[] = { SB_READY, SB_PAUSED, SB_RESUMING };
        for (int i = 0; i < 3; i++) {
                struct sandbox sb = { 0 };
                ASSERT_OK(store_sandbox_get(s, ids[i], &sb));
                sb.status = st[i];
                sb.node_id = xstrdup("n2");
                ASSERT_OK(store_sandbox_update(s, &sb));
                sandbox_clear(&sb);
        }
        ASSERT_OK(store_node_set_drained(s, "n1", true, 100));
        ASSERT_OK(store_node_touch(s, "n1", 500));
        ASSERT_OK(store_node_touch(s, "n1", 400));  /* an older contact never moves it back */
        ASSERT_EQ(store_node_drained(s, "n1"), 1);
        ASSERT_OK(store_node_list(s, &n, &k));
        ASSERT_EQ(k, 2);
        ASSERT_STREQ(n[0].id, "n1");
        ASSERT_TRUE(n[0].drained);
        ASSERT_EQ(n[0].drained_at, 100);
        ASSERT_EQ(n[0].last_contact_at, 500);
        ASSERT_EQ(n[0].live_sandboxes, 0);
        ASSERT_STREQ(n[1].id, "n2");  /* known only from its sandboxes */
        ASSERT_FALSE(n[1].drained);
        ASSERT_EQ(n[1].last_contact_at, 0);
        ASSERT_EQ(n[1].live_sandboxes, 2);
        free(n);

        /* Undrain keeps the contact time. */
        ASSERT_OK(store_node_set_drained(s, "n1", false, 600));
        ASSERT_EQ(store_node_drained(s, "n1"), 0);
        ASSERT_OK(store_node_list(s, &n, &k));
        ASSERT_FALSE(n[0].drained);
        ASSERT_EQ(n[0].drained_at, 0);
        ASSERT_EQ(n[0].last_contact_at, 500);
        free(n);
        store_close(s);
}

/* ---- preview URLs ---- */

TEST(previews_put_replace_list_bound_delete_prune) {
        char id[25];
        _cleanup_(storetest_closep) struct store *s = ready_sandbox_store("previews", id);
        struct preview p = { .port = 8000, .created_at = 1000, .expires_at = 5000 };
        memcpy(p.sandbox_id, id, 25);
        snprintf(p.account_id, sizeof(p.account_id), "%s", "000000000000000000000001");
        memset(p.token_sha256, 'a', 64);
        ASSERT_OK(store_preview_put(s, &p, 1000, 2));
        /* the same port again replaces (new token), not a second row */
        memset(p.token_sha256, 'b', 64);
        p.public_ = true;
        ASSERT_OK(store_preview_put(s, &p, 1000, 2));
        struct preview got = { 0 };
        ASSERT_OK(store_preview_get(s, id, 8000, &got));
        ASSERT_EQ(got.token_sha256[0], 'b');
        ASSERT_TRUE(got.public_);
        ASSERT_EQ(got.expires_at, 5000);
        p.port = 8001;
        ASSERT_OK(store_preview_put(s, &p, 1000, 2));
        p.port = 8002;
        ASSERT_EQ(store_preview_put(s, &p, 1000, 2), -EDQUOT);   /* two ports at most */
        /* expired rows do not count against the bound and are not listed */
        ASSERT_OK(store_preview_put(s, &p, 6000, 2));
        _cleanup_free_ struct preview *v = NULL;
        size_t n = 0;
        ASSERT_OK(store_preview_list(s, id, 1000, &v, &n));
        ASSERT_EQ(n, 1);
        ASSERT_EQ(v[0].port, 8002);
        ASSERT_OK(store_preview_delete(s, id, 8002));
        ASSERT_EQ(store_preview_delete(s, id, 8002), -ENOENT);
        ASSERT_EQ(store_preview_get(s, id, 8002, &got), -ENOENT);
        /* prune: a day after it expired, or after its sandbox was destroyed (until then it
         * answers "expired"/"destroyed", 410, not "never made") */
        p.port = 9000;
        p.expires_at = 100000;
        ASSERT_OK(store_preview_put(s, &p, 1000, 2));
        const int64_t day = 24LL * 3600 * 1000;
        ASSERT_OK(store_preview_prune(s, 200000));
        ASSERT_OK(store_preview_get(s, id, 9000, &got));         /* expired, kept */
        ASSERT_OK(store_preview_prune(s, 100000 + day + 1));
        ASSERT_EQ(store_preview_get(s, id, 9000, &got), -ENOENT);
        p.expires_at = 10 * day;
        ASSERT_OK(store_preview_put(s, &p, 1000, 2));
        ASSERT_OK(store_sandbox_cas_status(s, id, SB_READY, SB_DESTROYED));
        ASSERT_OK(store_preview_prune(s, 2000));
        ASSERT_OK(store_preview_get(s, id, 9000, &got));         /* destroyed just now: kept */
        ASSERT_OK(store_preview_prune(s, 2 * day));
        ASSERT_EQ(store_preview_get(s, id, 9000, &got), -ENOENT);
}

/* Sandboxes at their end are listed for the reaper, except those paused there (their
 * lifecycle says pause): they stay so past their end and must not crowd the list every pass. */
TEST(expired_lists_ends_but_not_sandboxes_paused_at_theirs) {
        _cleanup_(storetest_closep) struct store *s = storetest_open("expired");
        char acc[25];
        storetest_new_account(s, "ender", acc);
        static const struct {
                enum sb_status status;
                bool pause_at_end, listed;
        } rows[] = {
                { SB_READY, false, true }, { SB_READY, true, true },     /* the reaper pauses the second */
                { SB_PAUSED, false, true }, { SB_PAUSED, true, false },  /* the first is destroyed at its end */
                { SB_PAUSING, true, false }, { SB_DESTROYED, false, false },
        };
        char ids[ELEMENTSOF(rows)][25];
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                struct sandbox sb;
                fill_sandbox(&sb, acc, "e", 1000);
                sb.status = rows[i].status;
                sb.pause_at_end = rows[i].pause_at_end;
                sb.pause_keep_memory = rows[i].pause_at_end;
                sb.run_s = 60;
                sb.expires_at = 5000;
                ASSERT_OK(store_sandbox_insert_capped(s, &sb, -1));
                memcpy(ids[i], sb.id, 25);
                /* every lifecycle column reads back as written */
                struct sandbox got = { 0 };
                ASSERT_OK(store_sandbox_get(s, sb.id, &got));
                expect_same_sandbox(&got, &sb);
                sandbox_clear(&got);
                sandbox_clear(&sb);
        }
        struct sandbox *a = NULL;
        size_t n = 0;
        ASSERT_OK(store_sandbox_list_expired(s, 6000, 100, &a, &n));
        for (size_t i = 0; i < ELEMENTSOF(rows); i++) {
                bool found = false;
                for (size_t j = 0; j < n; j++)
                        found = found || !strcmp(a[j].id, ids[i]);
                if (found != rows[i].listed)
                        test_fail(__FILE__, __LINE__, "row %zu: listed %d, want %d", i, found, rows[i].listed);
        }
        sandbox_array_free(a, n);
        /* before their end, none */
        ASSERT_OK(store_sandbox_list_expired(s, 4000, 100, &a, &n));
        ASSERT_EQ(n, 0);
        sandbox_array_free(a, n);
}

/* ---- the statement cache (store.c) ---- */

#include "store-private.h"

/* "SELECT ?1 + n" of store s with ?1 = v: its value, the statement released after. */
static int64_t select_plus(struct store *s, int n, int64_t v) {
        _cleanup_free_ char *sql = xasprintf("SELECT ? + %d", n);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        ASSERT_EQ(query(s, sql, PARAMS(p_int(v)), &st), 1);
        return sqlite3_column_int64(st, 0);
}

/* A statement comes back reset with its new bindings; a second user of the same SQL while the
 * first holds it gets one of its own; another store's statement is never handed out; past the
 * cache's room the least recently used idle ones go and every query still answers right. */
TEST(statements_are_cached_per_store_and_never_shared) {
        struct store *a = storetest_open("cache-a"), *b = storetest_open("cache-b");
        sqlite3_stmt *first = NULL, *again = NULL, *inner = NULL, *other = NULL;
        ASSERT_EQ(query(a, "SELECT ? * 2", PARAMS(p_int(5)), &first), 1);
        ASSERT_EQ(sqlite3_column_int64(first, 0), 10);
        ASSERT_EQ(query(a, "SELECT ? * 2", PARAMS(p_int(7)), &inner), 1);   /* while first is held */
        ASSERT_TRUE(inner != first);
        ASSERT_EQ(sqlite3_column_int64(inner, 0), 14);
        ASSERT_EQ(sqlite3_column_int64(first, 0), 10);
        ASSERT_EQ(query(b, "SELECT ? * 2", PARAMS(p_int(1)), &other), 1);
        ASSERT_TRUE(sqlite3_db_handle(other) != sqlite3_db_handle(first));
        ASSERT_EQ(sqlite3_column_int64(other, 0), 2);
        stmt_release(other);
        stmt_release(inner);
        stmt_release(first);
        ASSERT_EQ(query(a, "SELECT ? * 2", PARAMS(p_int(21)), &again), 1);
        ASSERT_TRUE(again == first);                                        /* the cached one, reset */
        ASSERT_EQ(sqlite3_column_int64(again, 0), 42);
        stmt_release(again);
        /* more distinct statements than the cache holds, twice over, each answering right */
        for (int round = 0; round < 2; round++)
                for (int n = 0; n < 300; n++)
                        ASSERT_EQ(select_plus(n % 2 ? a : b, n, 1000), 1000 + n);
        /* and the store's own calls still work beside them */
        ASSERT_EQ(select_plus(a, 0, -3), -3);
        store_close(a);
        store_close(b);
}
