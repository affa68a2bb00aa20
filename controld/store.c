/* store.c — controld's sqlite3 store (WAL, foreign keys, versioned migrations).
 *
 * One connection guarded by one mutex: statements are microseconds, and the
 * mutex is what makes "count then insert" quota checks exact under
 * concurrency. Records are written before side effects so reapers can heal.
 * Returns 0 / -errno; -ENOENT when a row is missing. Never logs above debug.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>

#include "cleanup.h"
#include "controld.h"
#include "log.h"
#include "strutil.h"

struct store {
        sqlite3 *db;
        pthread_mutex_t lock;
};

static const char *const migrations[] = {
        /* 1: initial schema */
        "CREATE TABLE accounts ("
        "  id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, plan TEXT NOT NULL, created_at INTEGER NOT NULL);"
        "CREATE TABLE api_keys ("
        "  id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,"
        "  hash TEXT NOT NULL UNIQUE, prefix TEXT NOT NULL, created_at INTEGER NOT NULL, revoked_at INTEGER);"
        "CREATE TABLE sandboxes ("
        "  id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id),"
        "  name TEXT NOT NULL, template TEXT NOT NULL, image TEXT NOT NULL, status TEXT NOT NULL,"
        "  region TEXT NOT NULL, cpu INTEGER NOT NULL, memory INTEGER NOT NULL, disk INTEGER NOT NULL,"
        "  team TEXT, project_environment TEXT, auto_destroy INTEGER NOT NULL, destroy_timeout TEXT,"
        "  one_shot INTEGER NOT NULL, egress_mode INTEGER NOT NULL, egress_allow TEXT NOT NULL,"
        "  persistent INTEGER NOT NULL, persistent_disk_gb INTEGER, volume_id TEXT, mount_path TEXT,"
        "  from_snapshot TEXT, snapshot_mode TEXT NOT NULL, snapshot_frequency TEXT,"
        "  created_at INTEGER NOT NULL, last_activity_at INTEGER NOT NULL, expires_at INTEGER NOT NULL,"
        "  paused_at INTEGER, destroyed_at INTEGER, destroy_reason TEXT, failure_reason TEXT,"
        "  driver TEXT, job_id TEXT, alloc_id TEXT, node_id TEXT, container_id TEXT, ip TEXT, timings TEXT);"
        "CREATE INDEX sandboxes_account ON sandboxes(account_id, created_at DESC);"
        "CREATE INDEX sandboxes_status ON sandboxes(status);"
        "CREATE TABLE volumes ("
        "  id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id), name TEXT NOT NULL,"
        "  type TEXT NOT NULL, size_gb INTEGER NOT NULL, region TEXT, team TEXT, handle TEXT, mount_path TEXT,"
        "  attached_sandbox_id TEXT, last_attached_at INTEGER, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
        "  UNIQUE(account_id, name));"
        "CREATE TABLE usage ("
        "  account_id TEXT NOT NULL REFERENCES accounts(id), period TEXT NOT NULL,"
        "  cpu_mhz_seconds REAL NOT NULL DEFAULT 0, mb_seconds REAL NOT NULL DEFAULT 0, cost REAL NOT NULL DEFAULT 0,"
        "  PRIMARY KEY(account_id, period));"
        "CREATE TABLE stats_samples ("
        "  sandbox_id TEXT NOT NULL, ts_ms INTEGER NOT NULL, cpu_pct REAL NOT NULL, mem_pct REAL NOT NULL,"
        "  net_bps REAL NOT NULL);"
        "CREATE INDEX stats_samples_sb ON stats_samples(sandbox_id, ts_ms);",
        /* 2: per-store facts such as this controld's instance id */
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);",
        /* 3: a volume whose backend removal is under way: no sandbox may attach it meanwhile */
        "ALTER TABLE volumes ADD COLUMN deleting INTEGER NOT NULL DEFAULT 0;",
};

/* Nodes an operator drained, and when each node's agent was last heard from. Created
 * idempotently after the migrations rather than as one of them: the table is new and
 * self-contained (nothing refers to it), so any store version simply gains it, and the
 * numbered migrations stay free for changes to existing tables. A later change to this
 * table's columns must be a numbered migration. */
static const char nodes_table[] =
        "CREATE TABLE IF NOT EXISTS nodes (id TEXT PRIMARY KEY, drained INTEGER NOT NULL DEFAULT 0, drained_at INTEGER,"
        "  last_contact_at INTEGER, created_at INTEGER NOT NULL);";
static const char snapshot_schema[] =
        "CREATE TABLE IF NOT EXISTS snapshots ("
        "  id TEXT PRIMARY KEY, account_id TEXT NOT NULL REFERENCES accounts(id), sandbox_id TEXT NOT NULL,"
        "  name TEXT NOT NULL, image_tag TEXT NOT NULL, source_template TEXT NOT NULL, node_id TEXT,"
        "  status TEXT NOT NULL, automatic INTEGER NOT NULL DEFAULT 0, digest TEXT, failure_reason TEXT,"
        "  size_bytes INTEGER, created_at INTEGER NOT NULL, finished_at INTEGER);"
        "CREATE INDEX IF NOT EXISTS snapshots_account ON snapshots(account_id, created_at DESC);"
        "CREATE INDEX IF NOT EXISTS snapshots_sandbox ON snapshots(sandbox_id, created_at DESC);"
        "CREATE INDEX IF NOT EXISTS snapshots_status ON snapshots(status);";

static int sqlite_to_errno(int rc) {
        switch (rc & 0xff) {
        case SQLITE_OK:
        case SQLITE_ROW:
        case SQLITE_DONE:
                return 0;
        case SQLITE_CONSTRAINT:
                return -EEXIST;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
                return -EBUSY;
        case SQLITE_NOMEM:
                oom();
        case SQLITE_READONLY:
        case SQLITE_PERM:
        case SQLITE_AUTH:
                return -EACCES;
        case SQLITE_FULL:
                return -ENOSPC;
        case SQLITE_CANTOPEN:
                return -ENOENT;
        default:
                return -EIO;
        }
}

static int exec_sql(struct store *s, const char *sql) {
        char *msg = NULL;
        int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
        if (rc != SQLITE_OK) {
                log_debug("sqlite: %s", msg ? msg : sqlite3_errstr(rc));
                sqlite3_free(msg);
                return sqlite_to_errno(rc);
        }
        return 0;
}

static int prepare(struct store *s, const char *sql, sqlite3_stmt **ret) {
        int rc = sqlite3_prepare_v2(s->db, sql, -1, ret, NULL);
        if (rc != SQLITE_OK) {
                log_debug("sqlite prepare failed: %s: %s", sqlite3_errmsg(s->db), sql);
                return sqlite_to_errno(rc);
        }
        return 0;
}

static void finalizep(sqlite3_stmt **st) {
        if (*st)
                sqlite3_finalize(*st);
}
#define _cleanup_stmt_ _cleanup_(finalizep)

static void unlockp(struct store **s) {
        if (*s)
                pthread_mutex_unlock(&(*s)->lock);
}
#define LOCKED(s) _cleanup_(unlockp) struct store *_locked_ = (pthread_mutex_lock(&(s)->lock), (s))

static void bind_text(sqlite3_stmt *st, int i, const char *v) {
        if (v)
                sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
        else
                sqlite3_bind_null(st, i);
}
static void bind_ms(sqlite3_stmt *st, int i, int64_t v) {
        if (v)
                sqlite3_bind_int64(st, i, v);
        else
                sqlite3_bind_null(st, i);
}
static char *col_text(sqlite3_stmt *st, int i) {
        const unsigned char *t = sqlite3_column_text(st, i);
        return t ? xstrdup((const char *) t) : NULL;
}
static void col_id(sqlite3_stmt *st, int i, char out[SANDBOX_ID_LEN + 1]) {
        const unsigned char *t = sqlite3_column_text(st, i);
        snprintf(out, SANDBOX_ID_LEN + 1, "%s", t ? (const char *) t : "");
}

/* One row by id: -ENOENT when absent. */
static int get_one(struct store *s, const char *sql, const char *id, void (*from_row)(sqlite3_stmt *st, void *ret), void *ret) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r, rc;
        if ((r = prepare(s, sql, &st)) < 0)
                return r;
        bind_text(st, 1, id);
        rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sqlite_to_errno(rc);
        from_row(st, ret);
        return 0;
}

/* In one IMMEDIATE transaction: count with count_sql(account_id), refuse with -EDQUOT when
 * the count is >= max (max < 0: no cap), else run insert_sql bound by bind(obj). This is
 * what makes plan caps exact under concurrent requests. */
static int insert_capped(struct store *s, const char *count_sql, const char *account_id, int64_t max, const char *insert_sql,
                         void (*bind)(sqlite3_stmt *st, const void *obj), const void *obj) {
        LOCKED(s);
        int r;
        if ((r = exec_sql(s, "BEGIN IMMEDIATE")) < 0)
                return r;
        {
                _cleanup_stmt_ sqlite3_stmt *cnt = NULL;
                if ((r = prepare(s, count_sql, &cnt)) < 0)
                        goto rollback;
                bind_text(cnt, 1, account_id);
                if (sqlite3_step(cnt) != SQLITE_ROW) {
                        r = -EIO;
                        goto rollback;
                }
                if (max >= 0 && sqlite3_column_int64(cnt, 0) >= max) {
                        r = -EDQUOT;
                        goto rollback;
                }
        }
        {
                _cleanup_stmt_ sqlite3_stmt *st = NULL;
                if ((r = prepare(s, insert_sql, &st)) < 0)
                        goto rollback;
                bind(st, obj);
                if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                        goto rollback;
        }
        return exec_sql(s, "COMMIT");
rollback:
        exec_sql(s, "ROLLBACK");
        return r;
}

int store_open(const char *path, struct store **ret) {
        struct store *s = xnew0(struct store, 1);
        int rc, r;

        pthread_mutex_init(&s->lock, NULL);
        rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, NULL);
        if (rc != SQLITE_OK) {
                r = sqlite_to_errno(rc);
                log_debug("sqlite open %s: %s", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
                store_close(s);
                return r;
        }
        sqlite3_busy_timeout(s->db, 5000);
        if ((r = exec_sql(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")) < 0)
                goto fail;

        /* Versioned migrations, each in its own transaction. */
        if ((r = exec_sql(s, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);")) < 0)
                goto fail;
        int64_t version = 0;
        {
                _cleanup_stmt_ sqlite3_stmt *st = NULL;
                if ((r = prepare(s, "SELECT COALESCE(MAX(version), 0) FROM schema_version", &st)) < 0)
                        goto fail;
                if (sqlite3_step(st) == SQLITE_ROW)
                        version = sqlite3_column_int64(st, 0);
        }
        if (version > (int64_t) ELEMENTSOF(migrations)) {
                log_debug("database schema version %lld is newer than this controld (%zu)", (long long) version,
                          ELEMENTSOF(migrations));
                r = -EPROTO;
                goto fail;
        }
        for (size_t v = (size_t) version; v < ELEMENTSOF(migrations); v++) {
                _cleanup_free_ char *sql = xasprintf("BEGIN IMMEDIATE; %s INSERT INTO schema_version VALUES (%zu); COMMIT;",
                                                     migrations[v], v + 1);
                if ((r = exec_sql(s, sql)) < 0) {
                        exec_sql(s, "ROLLBACK;");
                        goto fail;
                }
        }
        if ((r = exec_sql(s, nodes_table)) < 0)
                goto fail;
        /* Outside the numbered migrations on purpose: idempotent, so it can be merged with
         * other branches' migrations in any order. */
        if ((r = exec_sql(s, snapshot_schema)) < 0)
                goto fail;
        *ret = s;
        return 0;
fail:
        store_close(s);
        return r;
}

struct store *store_close(struct store *s) {
        if (!s)
                return NULL;
        if (s->db)
                sqlite3_close_v2(s->db);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

/* ---- meta ---- */

int store_meta_get_or_set(struct store *s, const char *key, const char *value_if_absent, char **ret) {
        LOCKED(s);
        int r;
        {
                _cleanup_stmt_ sqlite3_stmt *st = NULL;
                if ((r = prepare(s, "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", &st)) < 0)
                        return r;
                bind_text(st, 1, key);
                bind_text(st, 2, value_if_absent);
                if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                        return r;
        }
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        if ((r = prepare(s, "SELECT value FROM meta WHERE key = ?", &st)) < 0)
                return r;
        bind_text(st, 1, key);
        if (sqlite3_step(st) != SQLITE_ROW)
                return -EIO;
        *ret = col_text(st, 0);
        return 0;
}

int store_meta_put(struct store *s, const char *key, const char *value) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prepare(s, value ? "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)" : "DELETE FROM meta WHERE key = ?",
                        &st);
        if (r < 0)
                return r;
        bind_text(st, 1, key);
        if (value)
                bind_text(st, 2, value);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_meta_get(struct store *s, const char *key, char **ret) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = prepare(s, "SELECT value FROM meta WHERE key = ?", &st);
        if (r < 0)
                return r;
        bind_text(st, 1, key);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_DONE)
                return -ENOENT;
        if (rc != SQLITE_ROW)
                return sqlite_to_errno(rc) ?: -EIO;
        *ret = col_text(st, 0);
        return 0;
}

/* ---- accounts and keys ---- */

void account_clear(struct account *a) {
        if (!a)
                return;
        free_many(a->name, a->plan);
        memset(a, 0, sizeof(*a));
}

static void account_from_row(sqlite3_stmt *st, struct account *a) {
        col_id(st, 0, a->id);
        a->name = col_text(st, 1);
        a->plan = col_text(st, 2);
        a->created_at = sqlite3_column_int64(st, 3);
}

int store_account_create(struct store *s, const char *name, const char *plan, struct account *ret) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        char id[SANDBOX_ID_LEN + 1];
        int r;

        hexid_new(id);
        if ((r = prepare(s, "INSERT INTO accounts (id, name, plan, created_at) VALUES (?, ?, ?, ?)", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        bind_text(st, 2, name);
        bind_text(st, 3, plan);
        sqlite3_bind_int64(st, 4, now_ms());
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        if (ret) {
                memset(ret, 0, sizeof(*ret));
                snprintf(ret->id, sizeof(ret->id), "%s", id);
                ret->name = xstrdup(name);
                ret->plan = xstrdup(plan);
                ret->created_at = now_ms();
        }
        return 0;
}

static void account_row(sqlite3_stmt *st, void *ret) { account_from_row(st, ret); }

static int account_query(struct store *s, const char *sql, const char *arg, struct account *ret) {
        return get_one(s, sql, arg, account_row, ret);
}

int store_account_get(struct store *s, const char *id, struct account *ret) {
        return account_query(s, "SELECT id, name, plan, created_at FROM accounts WHERE id = ?", id, ret);
}

int store_account_by_name(struct store *s, const char *name, struct account *ret) {
        return account_query(s, "SELECT id, name, plan, created_at FROM accounts WHERE name = ?", name, ret);
}

int store_key_lookup(struct store *s, const char *key_hash, struct account *ret) {
        return account_query(s,
                             "SELECT a.id, a.name, a.plan, a.created_at FROM api_keys k JOIN accounts a ON a.id = k.account_id"
                             " WHERE k.hash = ? AND k.revoked_at IS NULL",
                             key_hash, ret);
}

int store_account_foreach(struct store *s, int (*cb)(const struct account *a, void *ud), void *ud) {
        struct account *list = NULL;
        size_t n = 0;
        {
                LOCKED(s);
                _cleanup_stmt_ sqlite3_stmt *st = NULL;
                int r = prepare(s, "SELECT id, name, plan, created_at FROM accounts ORDER BY created_at", &st);
                if (r < 0)
                        return r;
                while (sqlite3_step(st) == SQLITE_ROW) {
                        list = xrealloc(list, (n + 1) * sizeof(*list));
                        memset(&list[n], 0, sizeof(list[n]));
                        account_from_row(st, &list[n++]);
                }
        }
        int r = 0;
        for (size_t i = 0; i < n; i++) {
                if (r >= 0)
                        r = cb(&list[i], ud);
                account_clear(&list[i]);
        }
        free(list);
        return r < 0 ? r : 0;
}

int store_key_add(struct store *s, const char *account_id, const char *key_hash, const char *prefix,
                  char ret_id[SANDBOX_ID_LEN + 1]) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        hexid_new(ret_id);
        if ((r = prepare(s, "INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES (?, ?, ?, ?, ?)", &st)) < 0)
                return r;
        bind_text(st, 1, ret_id);
        bind_text(st, 2, account_id);
        bind_text(st, 3, key_hash);
        bind_text(st, 4, prefix);
        sqlite3_bind_int64(st, 5, now_ms());
        r = sqlite3_step(st);
        if ((r & 0xff) == SQLITE_CONSTRAINT)
                return -ENOENT; /* unknown account (foreign key) */
        return sqlite_to_errno(r);
}

int store_key_revoke(struct store *s, const char *id_or_prefix) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE api_keys SET revoked_at = ? WHERE (id = ? OR prefix = ?) AND revoked_at IS NULL", &st)) < 0)
                return r;
        sqlite3_bind_int64(st, 1, now_ms());
        bind_text(st, 2, id_or_prefix);
        bind_text(st, 3, id_or_prefix);
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db) > 0 ? 0 : -ENOENT;
}

int store_key_foreach(struct store *s, const char *account_id,
                      int (*cb)(const char *id, const char *prefix, int64_t created, int64_t revoked, void *ud), void *ud) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT id, prefix, created_at, COALESCE(revoked_at, 0) FROM api_keys WHERE account_id = ?"
                            " ORDER BY created_at", &st)) < 0)
                return r;
        bind_text(st, 1, account_id);
        while (sqlite3_step(st) == SQLITE_ROW) {
                r = cb((const char *) sqlite3_column_text(st, 0), (const char *) sqlite3_column_text(st, 1),
                       sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3), ud);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- sandboxes ---- */

static const char *const status_names[_SB_STATUS_MAX] = {
        [SB_STARTING] = "starting", [SB_READY] = "ready",     [SB_PAUSING] = "pausing",   [SB_PAUSED] = "paused",
        [SB_RESUMING] = "resuming", [SB_FAILED] = "failed",   [SB_DESTROYED] = "destroyed",
};

const char *sb_status_str(enum sb_status s) {
        return s < _SB_STATUS_MAX ? status_names[s] : "unknown";
}

int sb_status_from_str(const char *s) {
        for (int i = 0; s && i < _SB_STATUS_MAX; i++)
                if (!strcmp(status_names[i], s))
                        return i;
        return -EINVAL;
}

bool sb_status_active(enum sb_status s) {
        switch (s) {
        case SB_STARTING:
        case SB_READY:
        case SB_PAUSING:
        case SB_PAUSED:
        case SB_RESUMING:
                return true;
        case SB_FAILED:
        case SB_DESTROYED:
        case _SB_STATUS_MAX:
                return false;
        }
        return false;
}

void sandbox_clear(struct sandbox *s) {
        if (!s)
                return;
        free_many(s->name, s->template_name, s->image, s->region_key, s->team, s->project_environment,
                  s->destroy_timeout, s->volume_id, s->mount_path, s->from_snapshot, s->snapshot_mode,
                  s->snapshot_frequency, s->destroy_reason, s->failure_reason, s->driver, s->job_id, s->alloc_id,
                  s->node_id, s->container_id, s->ip);
        sb_egress_done(&s->egress);
        memset(s, 0, sizeof(*s));
}

void sandbox_array_free(struct sandbox *a, size_t n) {
        for (size_t i = 0; i < n; i++)
                sandbox_clear(&a[i]);
        free(a);
}

#define SB_COLS                                                                                               \
        "id, account_id, name, template, image, status, region, cpu, memory, disk, team, project_environment, " \
        "auto_destroy, destroy_timeout, one_shot, egress_mode, egress_allow, persistent, persistent_disk_gb, "  \
        "volume_id, mount_path, from_snapshot, snapshot_mode, snapshot_frequency, created_at, last_activity_at, " \
        "expires_at, paused_at, destroyed_at, destroy_reason, failure_reason, driver, job_id, alloc_id, node_id, " \
        "container_id, ip, timings"
#define SB_NCOLS 38

static void sandbox_from_row(sqlite3_stmt *st, struct sandbox *s) {
        int i = 0;
        memset(s, 0, sizeof(*s));
        col_id(st, i++, s->id);
        col_id(st, i++, s->account_id);
        s->name = col_text(st, i++);
        s->template_name = col_text(st, i++);
        s->image = col_text(st, i++);
        {
                const char *t = (const char *) sqlite3_column_text(st, i++);
                int k = sb_status_from_str(t);
                s->status = k < 0 ? SB_FAILED : (enum sb_status) k;
        }
        s->region_key = col_text(st, i++);
        s->cpu = sqlite3_column_int64(st, i++);
        s->memory = sqlite3_column_int64(st, i++);
        s->disk = sqlite3_column_int64(st, i++);
        s->team = col_text(st, i++);
        s->project_environment = col_text(st, i++);
        s->auto_destroy = sqlite3_column_int(st, i++);
        s->destroy_timeout = col_text(st, i++);
        s->one_shot = sqlite3_column_int(st, i++);
        s->egress.mode = (enum pj_egress_mode) sqlite3_column_int(st, i++);
        sb_egress_allow_from_text(&s->egress, (const char *) sqlite3_column_text(st, i++));
        s->persistent = sqlite3_column_int(st, i++);
        s->persistent_disk_gb = sqlite3_column_int64(st, i++);
        s->volume_id = col_text(st, i++);
        s->mount_path = col_text(st, i++);
        s->from_snapshot = col_text(st, i++);
        s->snapshot_mode = col_text(st, i++);
        s->snapshot_frequency = col_text(st, i++);
        s->created_at = sqlite3_column_int64(st, i++);
        s->last_activity_at = sqlite3_column_int64(st, i++);
        s->expires_at = sqlite3_column_int64(st, i++);
        s->paused_at = sqlite3_column_int64(st, i++);
        s->destroyed_at = sqlite3_column_int64(st, i++);
        s->destroy_reason = col_text(st, i++);
        s->failure_reason = col_text(st, i++);
        s->driver = col_text(st, i++);
        s->job_id = col_text(st, i++);
        s->alloc_id = col_text(st, i++);
        s->node_id = col_text(st, i++);
        s->container_id = col_text(st, i++);
        s->ip = col_text(st, i++);
        sb_timings_from_text(&s->timings, (const char *) sqlite3_column_text(st, i++));
}

/* Binds every column in SB_COLS order starting at parameter `first`. */
static void sandbox_bind(sqlite3_stmt *st, int first, const struct sandbox *s) {
        int i = first;
        bind_text(st, i++, s->id);
        bind_text(st, i++, s->account_id);
        bind_text(st, i++, s->name);
        bind_text(st, i++, s->template_name);
        bind_text(st, i++, s->image);
        bind_text(st, i++, sb_status_str(s->status));
        bind_text(st, i++, s->region_key);
        sqlite3_bind_int64(st, i++, s->cpu);
        sqlite3_bind_int64(st, i++, s->memory);
        sqlite3_bind_int64(st, i++, s->disk);
        bind_text(st, i++, s->team);
        bind_text(st, i++, s->project_environment);
        sqlite3_bind_int(st, i++, s->auto_destroy);
        bind_text(st, i++, s->destroy_timeout);
        sqlite3_bind_int(st, i++, s->one_shot);
        sqlite3_bind_int(st, i++, (int) s->egress.mode);
        _cleanup_free_ char *allow = sb_egress_allow_to_text(&s->egress);
        bind_text(st, i++, allow);
        sqlite3_bind_int(st, i++, s->persistent);
        bind_ms(st, i++, s->persistent_disk_gb);
        bind_text(st, i++, s->volume_id);
        bind_text(st, i++, s->mount_path);
        bind_text(st, i++, s->from_snapshot);
        bind_text(st, i++, s->snapshot_mode ? s->snapshot_mode : "manual");
        bind_text(st, i++, s->snapshot_frequency);
        sqlite3_bind_int64(st, i++, s->created_at);
        sqlite3_bind_int64(st, i++, s->last_activity_at);
        sqlite3_bind_int64(st, i++, s->expires_at);
        bind_ms(st, i++, s->paused_at);
        bind_ms(st, i++, s->destroyed_at);
        bind_text(st, i++, s->destroy_reason);
        bind_text(st, i++, s->failure_reason);
        bind_text(st, i++, s->driver);
        bind_text(st, i++, s->job_id);
        bind_text(st, i++, s->alloc_id);
        bind_text(st, i++, s->node_id);
        bind_text(st, i++, s->container_id);
        bind_text(st, i++, s->ip);
        _cleanup_free_ char *timings = sb_timings_to_text(&s->timings);
        bind_text(st, i++, timings);
}

static void sandbox_bind_all(sqlite3_stmt *st, const void *obj) { sandbox_bind(st, 1, obj); }

int store_sandbox_insert_capped(struct store *s, const struct sandbox *sb, int64_t max_concurrent) {
        char sql[1024], qs[SB_NCOLS * 2 + 1];
        for (int i = 0; i < SB_NCOLS; i++) {
                qs[2 * i] = '?';
                qs[2 * i + 1] = ',';
        }
        qs[2 * SB_NCOLS - 1] = 0;
        snprintf(sql, sizeof(sql), "INSERT INTO sandboxes (" SB_COLS ") VALUES (%s)", qs);
        return insert_capped(s,
                             "SELECT COUNT(*) FROM sandboxes WHERE account_id = ? AND status IN "
                             "('starting','ready','pausing','paused','resuming')",
                             sb->account_id, max_concurrent, sql, sandbox_bind_all, sb);
}

static void sandbox_row(sqlite3_stmt *st, void *ret) { sandbox_from_row(st, ret); }

int store_sandbox_get(struct store *s, const char *id, struct sandbox *ret) {
        return get_one(s, "SELECT " SB_COLS " FROM sandboxes WHERE id = ?", id, sandbox_row, ret);
}

/* After an UPDATE ... WHERE id = ? AND status = ? changed nothing (store lock held): -ENOENT
 * when the sandbox is missing, else -ESTALE (its status was not the expected one). */
static int sandbox_unchanged(struct store *s, const char *id) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT 1 FROM sandboxes WHERE id = ?", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        r = sqlite3_step(st);
        if (r == SQLITE_DONE)
                return -ENOENT;
        return r == SQLITE_ROW ? -ESTALE : sqlite_to_errno(r);
}

/* Rewrites every column (the id binds twice: SET id = ? is harmless) while the stored status
 * is `expected` (< 0: whatever it is). */
static int sandbox_update_if(struct store *s, const struct sandbox *sb, int expected) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE sandboxes SET (" SB_COLS ") = (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
                            "?,?,?,?,?,?,?,?) WHERE id = ? AND (?40 IS NULL OR status = ?40)", &st)) < 0)
                return r;
        sandbox_bind(st, 1, sb);
        bind_text(st, SB_NCOLS + 1, sb->id);
        bind_text(st, SB_NCOLS + 2, expected >= 0 ? sb_status_str((enum sb_status) expected) : NULL);
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db) > 0 ? 0 : sandbox_unchanged(s, sb->id);
}

int store_sandbox_update(struct store *s, const struct sandbox *sb) {
        return sandbox_update_if(s, sb, -1);
}

int store_sandbox_update_cas(struct store *s, const struct sandbox *sb, enum sb_status expected) {
        return sandbox_update_if(s, sb, (int) expected);
}

int store_sandbox_cas_status(struct store *s, const char *id, enum sb_status from, enum sb_status to) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE sandboxes SET status = ? WHERE id = ? AND status = ?", &st)) < 0)
                return r;
        bind_text(st, 1, sb_status_str(to));
        bind_text(st, 2, id);
        bind_text(st, 3, sb_status_str(from));
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db) > 0 ? 0 : sandbox_unchanged(s, id);
}

int store_sandbox_delete(struct store *s, const char *id) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "DELETE FROM sandboxes WHERE id = ?", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_sandbox_touch(struct store *s, const char *id, int64_t now) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE sandboxes SET last_activity_at = ? WHERE id = ?", &st)) < 0)
                return r;
        sqlite3_bind_int64(st, 1, now);
        bind_text(st, 2, id);
        return sqlite_to_errno(sqlite3_step(st));
}

static int collect_sandboxes(sqlite3_stmt *st, struct sandbox **ret, size_t *ret_n) {
        struct sandbox *a = NULL;
        size_t n = 0;
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                a = xrealloc(a, (n + 1) * sizeof(*a));
                sandbox_from_row(st, &a[n++]);
        }
        if (rc != SQLITE_DONE) {
                sandbox_array_free(a, n);
                return sqlite_to_errno(rc);
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

int store_sandbox_list(struct store *s, const char *account_id, int status_filter, int64_t offset, int64_t limit,
                       struct sandbox **ret, size_t *ret_n, int64_t *ret_total) {
        LOCKED(s);
        int r;
        {
                _cleanup_stmt_ sqlite3_stmt *st = NULL;
                if ((r = prepare(s, "SELECT COUNT(*) FROM sandboxes WHERE account_id = ? AND (?2 IS NULL OR status = ?2)", &st)) < 0)
                        return r;
                bind_text(st, 1, account_id);
                bind_text(st, 2, status_filter >= 0 ? sb_status_str((enum sb_status) status_filter) : NULL);
                if (sqlite3_step(st) != SQLITE_ROW)
                        return -EIO;
                *ret_total = sqlite3_column_int64(st, 0);
        }
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        if ((r = prepare(s, "SELECT " SB_COLS " FROM sandboxes WHERE account_id = ? AND (?2 IS NULL OR status = ?2)"
                            " ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?", &st)) < 0)
                return r;
        bind_text(st, 1, account_id);
        bind_text(st, 2, status_filter >= 0 ? sb_status_str((enum sb_status) status_filter) : NULL);
        sqlite3_bind_int64(st, 3, limit);
        sqlite3_bind_int64(st, 4, offset);
        return collect_sandboxes(st, ret, ret_n);
}

int store_sandbox_list_status(struct store *s, const char *account_id, int status, struct sandbox **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT " SB_COLS " FROM sandboxes WHERE (?1 IS NULL OR account_id = ?1) AND (?2 IS NULL OR status = ?2)"
                            " ORDER BY created_at", &st)) < 0)
                return r;
        bind_text(st, 1, account_id);
        bind_text(st, 2, status >= 0 ? sb_status_str((enum sb_status) status) : NULL);
        return collect_sandboxes(st, ret, ret_n);
}

int store_sandbox_list_automatic(struct store *s, struct sandbox **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        /* Live sandboxes with a schedule, and any sandbox (destroyed too) that still has an
         * automatic snapshot: the only ones schedules or retention can act on. */
        if ((r = prepare(s, "SELECT " SB_COLS " FROM sandboxes WHERE (snapshot_mode = 'automatic'"
                            "   AND status IN ('starting', 'ready', 'pausing', 'paused', 'resuming'))"
                            " OR id IN (SELECT sandbox_id FROM snapshots WHERE automatic = 1)"
                            " ORDER BY created_at", &st)) < 0)
                return r;
        return collect_sandboxes(st, ret, ret_n);
}

int store_sandbox_count_by_status(struct store *s, int64_t counts[_SB_STATUS_MAX]) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        memset(counts, 0, sizeof(int64_t) * _SB_STATUS_MAX);
        if ((r = prepare(s, "SELECT status, COUNT(*) FROM sandboxes GROUP BY status", &st)) < 0)
                return r;
        while (sqlite3_step(st) == SQLITE_ROW) {
                int k = sb_status_from_str((const char *) sqlite3_column_text(st, 0));
                if (k >= 0)
                        counts[k] = sqlite3_column_int64(st, 1);
        }
        return 0;
}

/* ---- volumes ---- */

void volume_clear(struct volume *v) {
        if (!v)
                return;
        free_many(v->name, v->type, v->region_key, v->team, v->handle, v->mount_path, v->attached_sandbox_id);
        memset(v, 0, sizeof(*v));
}

void volume_array_free(struct volume *a, size_t n) {
        for (size_t i = 0; i < n; i++)
                volume_clear(&a[i]);
        free(a);
}

#define VOL_COLS "id, account_id, name, type, size_gb, region, team, handle, mount_path, attached_sandbox_id, " \
                 "last_attached_at, created_at, updated_at"

static void volume_from_row(sqlite3_stmt *st, struct volume *v) {
        int i = 0;
        memset(v, 0, sizeof(*v));
        col_id(st, i++, v->id);
        col_id(st, i++, v->account_id);
        v->name = col_text(st, i++);
        v->type = col_text(st, i++);
        v->size_gb = sqlite3_column_int64(st, i++);
        v->region_key = col_text(st, i++);
        v->team = col_text(st, i++);
        v->handle = col_text(st, i++);
        v->mount_path = col_text(st, i++);
        v->attached_sandbox_id = col_text(st, i++);
        v->last_attached_at = sqlite3_column_int64(st, i++);
        v->created_at = sqlite3_column_int64(st, i++);
        v->updated_at = sqlite3_column_int64(st, i++);
}

static void volume_bind(sqlite3_stmt *st, const struct volume *v) {
        int i = 1;
        bind_text(st, i++, v->id);
        bind_text(st, i++, v->account_id);
        bind_text(st, i++, v->name);
        bind_text(st, i++, v->type);
        sqlite3_bind_int64(st, i++, v->size_gb);
        bind_text(st, i++, v->region_key);
        bind_text(st, i++, v->team);
        bind_text(st, i++, v->handle);
        bind_text(st, i++, v->mount_path);
        bind_text(st, i++, v->attached_sandbox_id);
        bind_ms(st, i++, v->last_attached_at);
        sqlite3_bind_int64(st, i++, v->created_at);
        sqlite3_bind_int64(st, i++, v->updated_at);
}

static void volume_bind_all(sqlite3_stmt *st, const void *obj) { volume_bind(st, obj); }

int store_volume_insert_capped(struct store *s, const struct volume *v, int64_t max_volumes) {
        return insert_capped(s, "SELECT COUNT(*) FROM volumes WHERE account_id = ?", v->account_id, max_volumes,
                             "INSERT INTO volumes (" VOL_COLS ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", volume_bind_all, v);
}

static void volume_row(sqlite3_stmt *st, void *ret) { volume_from_row(st, ret); }

int store_volume_get(struct store *s, const char *id, struct volume *ret) {
        return get_one(s, "SELECT " VOL_COLS " FROM volumes WHERE id = ?", id, volume_row, ret);
}

int store_volume_update(struct store *s, const struct volume *v) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE volumes SET (" VOL_COLS ") = (?,?,?,?,?,?,?,?,?,?,?,?,?) WHERE id = ?1", &st)) < 0)
                return r;
        volume_bind(st, v);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_volume_delete(struct store *s, const char *id) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "DELETE FROM volumes WHERE id = ? AND attached_sandbox_id IS NULL", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db) > 0 ? 0 : -EBUSY;
}

/* The error for a volume row that an UPDATE guarded by "not deleting, not attached
 * elsewhere" left alone (store lock held). */
static int volume_unchanged(struct store *s, const char *id) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT deleting FROM volumes WHERE id = ?", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        r = sqlite3_step(st);
        if (r == SQLITE_DONE)
                return -ENOENT;
        if (r != SQLITE_ROW)
                return sqlite_to_errno(r);
        return sqlite3_column_int(st, 0) ? -EALREADY : -EBUSY;
}

int store_volume_begin_delete(struct store *s, const char *id, const char *owner_sandbox_id) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        /* One statement: the check and the mark cannot be split by a concurrent attach. */
        if ((r = prepare(s, "UPDATE volumes SET deleting = 1, attached_sandbox_id = NULL, updated_at = ?"
                            " WHERE id = ? AND deleting = 0 AND (attached_sandbox_id IS NULL OR attached_sandbox_id = ?)", &st)) < 0)
                return r;
        sqlite3_bind_int64(st, 1, now_ms());
        bind_text(st, 2, id);
        bind_text(st, 3, owner_sandbox_id);
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        if (sqlite3_changes(s->db) > 0)
                return 0;
        return volume_unchanged(s, id);
}

int store_volume_abort_delete(struct store *s, const char *id) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE volumes SET deleting = 0 WHERE (?1 IS NULL OR id = ?1) AND deleting = 1", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_volume_list(struct store *s, const char *account_id, int64_t offset, int64_t limit, struct volume **ret,
                      size_t *ret_n, int64_t *ret_total) {
        LOCKED(s);
        int r, rc;
        {
                _cleanup_stmt_ sqlite3_stmt *st = NULL;
                if ((r = prepare(s, "SELECT COUNT(*) FROM volumes WHERE account_id = ?", &st)) < 0)
                        return r;
                bind_text(st, 1, account_id);
                if (sqlite3_step(st) != SQLITE_ROW)
                        return -EIO;
                *ret_total = sqlite3_column_int64(st, 0);
        }
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        if ((r = prepare(s, "SELECT " VOL_COLS " FROM volumes WHERE account_id = ? ORDER BY created_at DESC, id DESC"
                            " LIMIT ? OFFSET ?", &st)) < 0)
                return r;
        bind_text(st, 1, account_id);
        sqlite3_bind_int64(st, 2, limit);
        sqlite3_bind_int64(st, 3, offset);
        struct volume *a = NULL;
        size_t n = 0;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                a = xrealloc(a, (n + 1) * sizeof(*a));
                volume_from_row(st, &a[n++]);
        }
        *ret = a;
        *ret_n = n;
        return rc == SQLITE_DONE ? 0 : sqlite_to_errno(rc);
}

int store_volume_attach(struct store *s, const char *vol_id, const char *sandbox_id, const char *mount_path, int64_t now) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE volumes SET attached_sandbox_id = ?, mount_path = ?, last_attached_at = ?, updated_at = ?"
                            " WHERE id = ? AND deleting = 0 AND (attached_sandbox_id IS NULL OR attached_sandbox_id = ?1)", &st)) < 0)
                return r;
        bind_text(st, 1, sandbox_id);
        bind_text(st, 2, mount_path);
        sqlite3_bind_int64(st, 3, now);
        sqlite3_bind_int64(st, 4, now);
        bind_text(st, 5, vol_id);
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        if (sqlite3_changes(s->db) > 0)
                return 0;
        r = volume_unchanged(s, vol_id);
        return r == -EALREADY ? -ENOENT : r;   /* a volume being deleted is as good as gone */
}

int store_volume_detach_sandbox(struct store *s, const char *sandbox_id, int64_t now) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE volumes SET attached_sandbox_id = NULL, updated_at = ? WHERE attached_sandbox_id = ?", &st)) < 0)
                return r;
        sqlite3_bind_int64(st, 1, now);
        bind_text(st, 2, sandbox_id);
        return sqlite_to_errno(sqlite3_step(st));
}

/* ---- usage and stats ---- */

int store_usage_add(struct store *s, const char *account_id, const char *period, double cpu_mhz_s, double mb_s, double cost) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "INSERT INTO usage (account_id, period, cpu_mhz_seconds, mb_seconds, cost) VALUES (?,?,?,?,?)"
                            " ON CONFLICT(account_id, period) DO UPDATE SET cpu_mhz_seconds = cpu_mhz_seconds + excluded.cpu_mhz_seconds,"
                            " mb_seconds = mb_seconds + excluded.mb_seconds, cost = cost + excluded.cost", &st)) < 0)
                return r;
        bind_text(st, 1, account_id);
        bind_text(st, 2, period);
        sqlite3_bind_double(st, 3, cpu_mhz_s);
        sqlite3_bind_double(st, 4, mb_s);
        sqlite3_bind_double(st, 5, cost);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_usage_get(struct store *s, const char *account_id, const char *period, double *ret_cost) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        *ret_cost = 0;
        if ((r = prepare(s, "SELECT cost FROM usage WHERE account_id = ? AND period = ?", &st)) < 0)
                return r;
        bind_text(st, 1, account_id);
        bind_text(st, 2, period);
        if (sqlite3_step(st) == SQLITE_ROW)
                *ret_cost = sqlite3_column_double(st, 0);
        return 0;
}

int store_stats_add(struct store *s, const char *sandbox_id, int64_t ts_ms, double cpu_pct, double mem_pct, double net_bps) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "INSERT INTO stats_samples (sandbox_id, ts_ms, cpu_pct, mem_pct, net_bps) VALUES (?,?,?,?,?)", &st)) < 0)
                return r;
        bind_text(st, 1, sandbox_id);
        sqlite3_bind_int64(st, 2, ts_ms);
        sqlite3_bind_double(st, 3, cpu_pct);
        sqlite3_bind_double(st, 4, mem_pct);
        sqlite3_bind_double(st, 5, net_bps);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_stats_prune(struct store *s, int64_t older_than_ms) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "DELETE FROM stats_samples WHERE ts_ms < ?", &st)) < 0)
                return r;
        sqlite3_bind_int64(st, 1, older_than_ms);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_stats_range(struct store *s, const char *sandbox_id, int64_t since_ms, struct stats_sample **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT ts_ms, cpu_pct, mem_pct, net_bps FROM stats_samples WHERE sandbox_id = ? AND ts_ms >= ?"
                            " ORDER BY ts_ms", &st)) < 0)
                return r;
        bind_text(st, 1, sandbox_id);
        sqlite3_bind_int64(st, 2, since_ms);
        struct stats_sample *a = NULL;
        size_t n = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
                a = xrealloc(a, (n + 1) * sizeof(*a));
                a[n++] = (struct stats_sample) { sqlite3_column_int64(st, 0), sqlite3_column_double(st, 1),
                                                 sqlite3_column_double(st, 2), sqlite3_column_double(st, 3) };
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

/* ---- nodes ---- */

int store_node_touch(struct store *s, const char *id, int64_t now) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "INSERT INTO nodes (id, last_contact_at, created_at) VALUES (?1, ?2, ?2)"
                            " ON CONFLICT(id) DO UPDATE SET last_contact_at = MAX(COALESCE(last_contact_at, 0), ?2)", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        sqlite3_bind_int64(st, 2, now);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_node_set_drained(struct store *s, const char *id, bool drained, int64_t now) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "INSERT INTO nodes (id, drained, drained_at, created_at) VALUES (?1, ?2, ?3, ?4)"
                            " ON CONFLICT(id) DO UPDATE SET drained = ?2, drained_at = ?3", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        sqlite3_bind_int(st, 2, drained);
        if (drained)
                sqlite3_bind_int64(st, 3, now);
        else
                sqlite3_bind_null(st, 3);
        sqlite3_bind_int64(st, 4, now);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_node_drained(struct store *s, const char *id) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT drained FROM nodes WHERE id = ?", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        r = sqlite3_step(st);
        if (r == SQLITE_ROW)
                return sqlite3_column_int(st, 0) ? 1 : 0;
        return r == SQLITE_DONE ? 0 : sqlite_to_errno(r);
}

/* Known nodes: those in the table and those a live sandbox is placed on. */
int store_node_list(struct store *s, struct node_info **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "WITH live AS (SELECT node_id, COUNT(*) AS n FROM sandboxes WHERE node_id IS NOT NULL AND node_id <> ''"
                            "   AND status IN ('starting', 'ready', 'pausing', 'resuming') GROUP BY node_id),"
                            " ids AS (SELECT id FROM nodes UNION SELECT node_id FROM live)"
                            " SELECT ids.id, COALESCE(n.drained, 0), COALESCE(n.drained_at, 0), COALESCE(n.last_contact_at, 0),"
                            "   COALESCE(live.n, 0)"
                            " FROM ids LEFT JOIN nodes n ON n.id = ids.id LEFT JOIN live ON live.node_id = ids.id"
                            " ORDER BY ids.id LIMIT 10000", &st)) < 0)
                return r;
        struct node_info *a = NULL;
        size_t n = 0;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                a = xrealloc(a, (n + 1) * sizeof(*a));
                struct node_info *e = &a[n++];
                *e = (struct node_info) { .drained = sqlite3_column_int(st, 1) != 0,
                                          .drained_at = sqlite3_column_int64(st, 2),
                                          .last_contact_at = sqlite3_column_int64(st, 3),
                                          .live_sandboxes = sqlite3_column_int64(st, 4) };
                snprintf(e->id, sizeof(e->id), "%s", (const char *) sqlite3_column_text(st, 0));
        }
        if (r != SQLITE_DONE) {
                free(a);
                return sqlite_to_errno(r);
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

/* ---- snapshots ---- */

static const char *const snap_status_names[_SNAP_STATUS_MAX] = {
        [SNAP_CREATING] = "creating", [SNAP_READY] = "ready", [SNAP_FAILED] = "failed",
};

const char *snap_status_str(enum snap_status st) {
        return st < _SNAP_STATUS_MAX ? snap_status_names[st] : "failed";
}

static enum snap_status snap_status_from_str(const char *t) {
        for (int i = 0; i < _SNAP_STATUS_MAX; i++)
                if (t && !strcmp(t, snap_status_names[i]))
                        return (enum snap_status) i;
        return SNAP_FAILED;
}

void snapshot_clear(struct snapshot *sn) {
        if (!sn)
                return;
        free_many(sn->name, sn->image_tag, sn->source_template, sn->node_id, sn->digest, sn->failure_reason);
        memset(sn, 0, sizeof(*sn));
}

void snapshot_array_free(struct snapshot *a, size_t n) {
        for (size_t i = 0; a && i < n; i++)
                snapshot_clear(&a[i]);
        free(a);
}

#define SNAP_COLS "id, account_id, sandbox_id, name, image_tag, source_template, node_id, status, automatic, digest, " \
                  "failure_reason, size_bytes, created_at, finished_at"

static void snapshot_from_row(sqlite3_stmt *st, struct snapshot *sn) {
        int i = 0;
        memset(sn, 0, sizeof(*sn));
        col_id(st, i++, sn->id);
        col_id(st, i++, sn->account_id);
        col_id(st, i++, sn->sandbox_id);
        sn->name = col_text(st, i++);
        sn->image_tag = col_text(st, i++);
        sn->source_template = col_text(st, i++);
        sn->node_id = col_text(st, i++);
        sn->status = snap_status_from_str((const char *) sqlite3_column_text(st, i++));
        sn->automatic = sqlite3_column_int(st, i++) != 0;
        sn->digest = col_text(st, i++);
        sn->failure_reason = col_text(st, i++);
        sn->size_bytes = sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
        i++;
        sn->created_at = sqlite3_column_int64(st, i++);
        sn->finished_at = sqlite3_column_int64(st, i++);
}

static void snapshot_row(sqlite3_stmt *st, void *ret) { snapshot_from_row(st, ret); }

int store_snapshot_insert(struct store *s, const struct snapshot *sn) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r, i = 1;
        if ((r = prepare(s, "INSERT INTO snapshots (" SNAP_COLS ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", &st)) < 0)
                return r;
        bind_text(st, i++, sn->id);
        bind_text(st, i++, sn->account_id);
        bind_text(st, i++, sn->sandbox_id);
        bind_text(st, i++, sn->name);
        bind_text(st, i++, sn->image_tag);
        bind_text(st, i++, sn->source_template);
        bind_text(st, i++, sn->node_id);
        bind_text(st, i++, snap_status_str(sn->status));
        sqlite3_bind_int(st, i++, sn->automatic);
        bind_text(st, i++, sn->digest);
        bind_text(st, i++, sn->failure_reason);
        if (sn->size_bytes >= 0)
                sqlite3_bind_int64(st, i++, sn->size_bytes);
        else
                sqlite3_bind_null(st, i++);
        sqlite3_bind_int64(st, i++, sn->created_at);
        bind_ms(st, i++, sn->finished_at);
        return sqlite_to_errno(sqlite3_step(st));
}

int store_snapshot_get(struct store *s, const char *id, struct snapshot *ret) {
        return get_one(s, "SELECT " SNAP_COLS " FROM snapshots WHERE id = ?", id, snapshot_row, ret);
}

int store_snapshot_finish(struct store *s, const char *id, enum snap_status to, const char *digest, int64_t size_bytes,
                          const char *failure_reason, int64_t now) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "UPDATE snapshots SET status = ?, digest = ?, size_bytes = ?, failure_reason = ?, finished_at = ?"
                            " WHERE id = ? AND status = 'creating'", &st)) < 0)
                return r;
        bind_text(st, 1, snap_status_str(to));
        bind_text(st, 2, digest);
        if (size_bytes >= 0)
                sqlite3_bind_int64(st, 3, size_bytes);
        else
                sqlite3_bind_null(st, 3);
        bind_text(st, 4, failure_reason);
        sqlite3_bind_int64(st, 5, now);
        bind_text(st, 6, id);
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        if (sqlite3_changes(s->db) > 0)
                return 0;
        _cleanup_stmt_ sqlite3_stmt *q = NULL;
        if ((r = prepare(s, "SELECT 1 FROM snapshots WHERE id = ?", &q)) < 0)
                return r;
        bind_text(q, 1, id);
        return sqlite3_step(q) == SQLITE_ROW ? -ESTALE : -ENOENT;
}

int store_snapshot_delete(struct store *s, const char *id) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "DELETE FROM snapshots WHERE id = ?", &st)) < 0)
                return r;
        bind_text(st, 1, id);
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db) > 0 ? 0 : -ENOENT;
}

static int collect_snapshots(sqlite3_stmt *st, struct snapshot **ret, size_t *ret_n) {
        struct snapshot *a = NULL;
        size_t n = 0;
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                a = xrealloc(a, (n + 1) * sizeof(*a));
                snapshot_from_row(st, &a[n++]);
        }
        if (rc != SQLITE_DONE) {
                snapshot_array_free(a, n);
                return sqlite_to_errno(rc);
        }
        *ret = a;
        *ret_n = n;
        return 0;
}

int store_snapshot_list(struct store *s, const char *account_id, const char *sandbox_id, int64_t offset, int64_t limit,
                        struct snapshot **ret, size_t *ret_n, int64_t *ret_total) {
        LOCKED(s);
        int r;
        {
                _cleanup_stmt_ sqlite3_stmt *st = NULL;
                if ((r = prepare(s, "SELECT COUNT(*) FROM snapshots WHERE account_id = ?1 AND (?2 IS NULL OR sandbox_id = ?2)",
                                 &st)) < 0)
                        return r;
                bind_text(st, 1, account_id);
                bind_text(st, 2, sandbox_id);
                if (sqlite3_step(st) != SQLITE_ROW)
                        return -EIO;
                *ret_total = sqlite3_column_int64(st, 0);
        }
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        if ((r = prepare(s, "SELECT " SNAP_COLS " FROM snapshots WHERE account_id = ?1 AND (?2 IS NULL OR sandbox_id = ?2)"
                            " ORDER BY created_at DESC, id DESC LIMIT ?3 OFFSET ?4", &st)) < 0)
                return r;
        bind_text(st, 1, account_id);
        bind_text(st, 2, sandbox_id);
        sqlite3_bind_int64(st, 3, limit);
        sqlite3_bind_int64(st, 4, offset);
        return collect_snapshots(st, ret, ret_n);
}

int store_snapshot_list_stuck(struct store *s, int64_t before, struct snapshot **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT " SNAP_COLS " FROM snapshots WHERE status = 'creating' AND created_at < ?", &st)) < 0)
                return r;
        sqlite3_bind_int64(st, 1, before);
        return collect_snapshots(st, ret, ret_n);
}

int store_snapshot_list_auto(struct store *s, const char *sandbox_id, struct snapshot **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, "SELECT " SNAP_COLS " FROM snapshots WHERE sandbox_id = ? AND automatic = 1"
                            " AND status != 'creating' ORDER BY created_at DESC, id DESC", &st)) < 0)
                return r;
        bind_text(st, 1, sandbox_id);
        return collect_snapshots(st, ret, ret_n);
}
