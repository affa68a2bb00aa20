/* store.c — controld's sqlite3 store (WAL, foreign keys, versioned migrations).
 *
 * One connection guarded by one mutex: statements are microseconds, and the
 * mutex is what makes "count then insert" quota checks exact under
 * concurrency. Records are written before side effects so reapers can heal.
 * Returns 0 / -errno; -ENOENT when a row is missing. Never logs above debug.
 *
 * The store's files are the only place that speaks SQL. This one is the engine: the schema
 * and its migrations, open/close, the statement helpers and the row mapping (column tables,
 * binds, reads, the capped inserts), declared in store-private.h, which only store*.c
 * include, so no other file can build a query or bind a column by hand; and the small
 * records of controld itself (meta, nodes). Each family of records is a file of its own:
 * store-account.c (accounts, keys, usage), store-sandbox.c (sandboxes, volumes, pool
 * members, egress applies, stats, previews), store-image.c (snapshots, user templates).
 */
#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sqlite3.h>

#include "cleanup.h"
#include "controld.h"
#include "pj_node.h"
#include "log.h"
#include "store-private.h"
#include "strutil.h"

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
        /* 4: an account's own plan amounts (controld admin account limits); -1 = its plan's */
        "ALTER TABLE accounts ADD COLUMN max_concurrent INTEGER NOT NULL DEFAULT -1;"
        "ALTER TABLE accounts ADD COLUMN max_cpu INTEGER NOT NULL DEFAULT -1;"
        "ALTER TABLE accounts ADD COLUMN max_memory INTEGER NOT NULL DEFAULT -1;"
        "ALTER TABLE accounts ADD COLUMN max_disk INTEGER NOT NULL DEFAULT -1;"
        "ALTER TABLE accounts ADD COLUMN max_volume_gb INTEGER NOT NULL DEFAULT -1;"
        "ALTER TABLE accounts ADD COLUMN max_volumes INTEGER NOT NULL DEFAULT -1;",
        /* 5: the last egress apply per sandbox as rows (was JSON text under meta
         * "egress.applied:<id>", moved here as it was) */
        "CREATE TABLE egress_applied (sandbox_id TEXT PRIMARY KEY, node TEXT NOT NULL, applied_at INTEGER NOT NULL);"
        "CREATE TABLE egress_resolved (sandbox_id TEXT NOT NULL, pos INTEGER NOT NULL, name TEXT NOT NULL,"
        "  addrs TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY(sandbox_id, pos));"
        "INSERT INTO egress_applied SELECT substr(key, 16), COALESCE(json_extract(value, '$.node'), ''),"
        "  COALESCE(json_extract(value, '$.applied_at'), 0) FROM meta"
        "  WHERE key LIKE 'egress.applied:%' AND json_valid(value);"
        "INSERT INTO egress_resolved SELECT substr(m.key, 16), r.key, COALESCE(json_extract(r.value, '$.name'), ''),"
        "  COALESCE((SELECT group_concat(a.value, ' ') FROM json_each(r.value, '$.addrs') a), ''),"
        "  COALESCE(json_extract(r.value, '$.at'), 0)"
        "  FROM meta m, json_each(m.value, '$.resolved') r WHERE m.key LIKE 'egress.applied:%' AND json_valid(m.value);"
        "DELETE FROM meta WHERE key LIKE 'egress.applied:%';",
        /* 6: what E2B's API sets at create: metadata (filterable) and the environment of every
         * process, each a JSON object of strings, and its own options (JSON); NULL for
         * sandboxes made without */
        "ALTER TABLE sandboxes ADD COLUMN metadata TEXT;"
        "ALTER TABLE sandboxes ADD COLUMN env TEXT;"
        "ALTER TABLE sandboxes ADD COLUMN e2b TEXT;",
        /* 7: what the sandbox's end does: destroy it (0) or pause it (1), with its memory (1);
         * how long it runs before its end (seconds, 0 = unknown): a resume after the end
         * gives it that long again; whether a call to it while paused resumes it */
        "ALTER TABLE sandboxes ADD COLUMN pause_at_end INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE sandboxes ADD COLUMN pause_keep_memory INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE sandboxes ADD COLUMN run_s INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE sandboxes ADD COLUMN auto_resume INTEGER NOT NULL DEFAULT 0;",
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

/* Warm pool members (pool.c): a row is written before its workload is made and deleted
 * before it goes, so every pooled workload has exactly one owner: this row, or after a
 * claim (one transaction deletes the row and inserts the sandbox) the sandbox record. */
static const char pool_schema[] =
        "CREATE TABLE IF NOT EXISTS pool_members (id TEXT PRIMARY KEY, pool TEXT NOT NULL, image TEXT NOT NULL,"
        "  state TEXT NOT NULL, created_at INTEGER NOT NULL, container_id TEXT, node_id TEXT, job_id TEXT, alloc_id TEXT,"
        "  ip TEXT);"
        "CREATE INDEX IF NOT EXISTS pool_members_pool ON pool_members(pool, state, created_at);";

/* Preview URLs (preview.c): self-contained, as the tables above. */
static const char preview_schema[] =
        "CREATE TABLE IF NOT EXISTS previews (sandbox_id TEXT NOT NULL, port INTEGER NOT NULL, account_id TEXT NOT NULL,"
        "  token_sha256 TEXT NOT NULL, public INTEGER NOT NULL, keep_host INTEGER NOT NULL, created_at INTEGER NOT NULL,"
        "  expires_at INTEGER NOT NULL, PRIMARY KEY (sandbox_id, port));";

/* Templates users build (usertemplate.c): self-contained, as the tables above. One row per
 * account and name; the image is the registry reference by digest once ready. */
static const char secret_schema[] =
        "CREATE TABLE IF NOT EXISTS secrets (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, name TEXT NOT NULL,"
        "  version INTEGER NOT NULL, sealed TEXT NOT NULL, metadata TEXT, created_at INTEGER NOT NULL,"
        "  updated_at INTEGER NOT NULL, UNIQUE (account_id, name));";

static const char utpl_schema[] =
        "CREATE TABLE IF NOT EXISTS user_templates (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, name TEXT NOT NULL,"
        "  status TEXT NOT NULL, image TEXT, size_bytes INTEGER, log TEXT, error TEXT, builder_id TEXT,"
        "  created_at INTEGER NOT NULL, finished_at INTEGER, UNIQUE (account_id, name));";

int sqlite_to_errno(int rc) {
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

int exec_sql(struct store *s, const char *sql) {
        char *msg = NULL;
        int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
        if (rc != SQLITE_OK) {
                log_debug("sqlite: %s", msg ? msg : sqlite3_errstr(rc));
                sqlite3_free(msg);
                return sqlite_to_errno(rc);
        }
        return 0;
}

/* The statement cache: every store's statements by their SQL text, prepared once and reset
 * between uses (parsing the SQL was a third of a GET /sandboxes/{id}: sqlite's parser and the
 * allocations it makes). A statement in use is busy; a second user of the same text at once
 * (a query inside another's loop) gets one of its own, finalized after. At most STMT_CACHE_MAX
 * statements, for all stores of the process together: past it, the least recently used idle
 * one makes room. */
#define STMT_CACHE_MAX 96
static struct {
        sqlite3 *db;
        char *sql;
        sqlite3_stmt *st;
        bool busy;
        uint64_t used;                  /* stmt_tick at its last use */
} stmt_cache[STMT_CACHE_MAX];
static size_t n_stmt_cache;
static uint64_t stmt_tick;
static pthread_mutex_t stmt_cache_lock = PTHREAD_MUTEX_INITIALIZER;

int prepare(struct store *s, const char *sql, sqlite3_stmt **ret) {
        pthread_mutex_lock(&stmt_cache_lock);
        for (size_t i = 0; i < n_stmt_cache; i++)
                if (stmt_cache[i].db == s->db && !stmt_cache[i].busy && !strcmp(stmt_cache[i].sql, sql)) {
                        stmt_cache[i].busy = true;
                        stmt_cache[i].used = ++stmt_tick;
                        *ret = stmt_cache[i].st;
                        pthread_mutex_unlock(&stmt_cache_lock);
                        return 0;
                }
        pthread_mutex_unlock(&stmt_cache_lock);
        int rc = sqlite3_prepare_v2(s->db, sql, -1, ret, NULL);
        if (rc != SQLITE_OK) {
                log_debug("sqlite prepare failed: %s: %s", sqlite3_errmsg(s->db), sql);
                return sqlite_to_errno(rc);
        }
        pthread_mutex_lock(&stmt_cache_lock);
        size_t slot = n_stmt_cache;
        if (slot == STMT_CACHE_MAX) {
                for (size_t i = 0; i < n_stmt_cache; i++)
                        if (!stmt_cache[i].busy && (slot == STMT_CACHE_MAX || stmt_cache[i].used < stmt_cache[slot].used))
                                slot = i;
                if (slot < STMT_CACHE_MAX) {
                        sqlite3_finalize(stmt_cache[slot].st);
                        free(stmt_cache[slot].sql);
                }
        } else
                n_stmt_cache++;
        if (slot < STMT_CACHE_MAX) {
                stmt_cache[slot].db = s->db;
                stmt_cache[slot].sql = xstrdup(sql);
                stmt_cache[slot].st = *ret;
                stmt_cache[slot].busy = true;
                stmt_cache[slot].used = ++stmt_tick;
        }
        pthread_mutex_unlock(&stmt_cache_lock);
        return 0;
}

void stmt_release(sqlite3_stmt *st) {
        pthread_mutex_lock(&stmt_cache_lock);
        for (size_t i = 0; i < n_stmt_cache; i++)
                if (stmt_cache[i].st == st) {
                        sqlite3_reset(st);
                        sqlite3_clear_bindings(st);
                        stmt_cache[i].busy = false;
                        pthread_mutex_unlock(&stmt_cache_lock);
                        return;
                }
        pthread_mutex_unlock(&stmt_cache_lock);
        sqlite3_finalize(st);
}

void finalizep(sqlite3_stmt **st) {
        if (*st)
                stmt_release(*st);
}

/* Finalizes the cached statements of db (at its close). */
static void stmt_cache_drop(sqlite3 *db) {
        pthread_mutex_lock(&stmt_cache_lock);
        for (size_t i = 0; i < n_stmt_cache;)
                if (stmt_cache[i].db == db) {
                        sqlite3_finalize(stmt_cache[i].st);
                        free(stmt_cache[i].sql);
                        stmt_cache[i] = stmt_cache[--n_stmt_cache];
                } else
                        i++;
        pthread_mutex_unlock(&stmt_cache_lock);
}

void bind_param(sqlite3_stmt *st, int i, struct param p) {
        switch (p.type) {
        case PARAM_NULL:
                sqlite3_bind_null(st, i);
                break;
        case PARAM_TEXT:
                sqlite3_bind_text(st, i, p.text, -1, SQLITE_TRANSIENT);
                break;
        case PARAM_INT:
                sqlite3_bind_int64(st, i, p.i);
                break;
        case PARAM_REAL:
                sqlite3_bind_double(st, i, p.d);
                break;
        }
}

/* Binds p to ?first.. and checks that this fills exactly the statement's parameters, so a
 * query and its arguments cannot drift apart unnoticed. */
static int bind_params(sqlite3_stmt *st, int first, const struct param *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                bind_param(st, first + (int) i, p[i]);
        if (sqlite3_bind_parameter_count(st) != first - 1 + (int) n) {
                log_debug("sqlite: %s takes %d parameters, given %d", sqlite3_sql(st), sqlite3_bind_parameter_count(st),
                          first - 1 + (int) n);
                return -EINVAL;
        }
        return 0;
}

/* sql prepared with p bound to ?1..?n. */
int stmt_new(struct store *s, const char *sql, const struct param *p, size_t n, sqlite3_stmt **ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, sql, &st)) < 0 || (r = bind_params(st, 1, p, n)) < 0)
                return r;
        *ret = TAKE_PTR(st);
        return 0;
}

/* Runs a statement that returns no rows: how many rows it changed, or -errno. */
int run_changes(struct store *s, const char *sql, const struct param *p, size_t n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = stmt_new(s, sql, p, n, &st)) < 0)
                return r;
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db);
}

/* As run_changes(), but 0 on success. */
int run(struct store *s, const char *sql, const struct param *p, size_t n) {
        int r = run_changes(s, sql, p, n);
        return r < 0 ? r : 0;
}

/* Runs a query up to its first row: 1 with *ret on that row, 0 when there is none, or -errno.
 * *ret (the caller finalizes it) is set whenever this returns >= 0. */
int query(struct store *s, const char *sql, const struct param *p, size_t n, sqlite3_stmt **ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = stmt_new(s, sql, p, n, &st)) < 0)
                return r;
        r = sqlite3_step(st);
        if (r != SQLITE_ROW && r != SQLITE_DONE)
                return sqlite_to_errno(r) ?: -EIO;
        *ret = TAKE_PTR(st);
        return r == SQLITE_ROW;
}

/* The single integer sql returns (a COUNT): -EIO when it returns no row. */
int query_int(struct store *s, const char *sql, const struct param *p, size_t n, int64_t *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, sql, p, n, &st);
        if (r <= 0)
                return r ?: -EIO;
        *ret = sqlite3_column_int64(st, 0);
        return 0;
}

/* After a guarded UPDATE of the row `id` changed nothing: -ENOENT when exists_sql (a SELECT
 * by id) finds no row, else `present` (the guard said no). */
int unchanged(struct store *s, const char *exists_sql, const char *id, int present) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, exists_sql, PARAMS(p_text(id)), &st);
        return r < 0 ? r : r > 0 ? present : -ENOENT;
}

char *col_text(sqlite3_stmt *st, int i) {
        const unsigned char *t = sqlite3_column_text(st, i);
        return t ? xstrdup((const char *) t) : NULL;
}

static void row_read(const struct table *t, sqlite3_stmt *st, void *row) {
        memset(row, 0, t->row_size);
        for (int i = 0; i < (int) t->n_cols; i++) {
                const struct column *c = &t->cols[i];
                void *f = (char *) row + c->offset;
                const unsigned char *txt;
                switch (c->type) {
                case COL_ID:
                        txt = sqlite3_column_text(st, i);
                        snprintf(f, SANDBOX_ID_LEN + 1, "%s", txt ? (const char *) txt : "");
                        break;
                case COL_TEXT:
                        *(char **) f = col_text(st, i);
                        break;
                case COL_INT:
                case COL_OPT:
                        *(int64_t *) f = sqlite3_column_int64(st, i);
                        break;
                case COL_SIZE:
                        *(int64_t *) f = sqlite3_column_type(st, i) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, i);
                        break;
                case COL_BOOL:
                        *(bool *) f = sqlite3_column_int(st, i) != 0;
                        break;
                case COL_CUSTOM:
                        c->read(st, i, row);
                        break;
                }
        }
}

/* Binds row's columns to ?1..?n_cols. */
static void row_bind(const struct table *t, sqlite3_stmt *st, const void *row) {
        for (int i = 0; i < (int) t->n_cols; i++) {
                const struct column *c = &t->cols[i];
                const void *f = (const char *) row + c->offset;
                switch (c->type) {
                case COL_ID:
                        bind_param(st, i + 1, p_text(f));
                        break;
                case COL_TEXT:
                        bind_param(st, i + 1, p_text(*(char *const *) f));
                        break;
                case COL_INT:
                        bind_param(st, i + 1, p_int(*(const int64_t *) f));
                        break;
                case COL_OPT:
                        bind_param(st, i + 1, p_opt(*(const int64_t *) f));
                        break;
                case COL_SIZE:
                        bind_param(st, i + 1, *(const int64_t *) f >= 0 ? p_int(*(const int64_t *) f) : p_null());
                        break;
                case COL_BOOL:
                        bind_param(st, i + 1, p_int(*(const bool *) f));
                        break;
                case COL_CUSTOM:
                        c->bind(st, i + 1, row);
                        break;
                }
        }
}

/* "id, account_id, ..." (or "?, ?, ..." with placeholders) for t's columns. */
static char *column_list(const struct table *t, bool placeholders) {
        _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(0);
        for (size_t i = 0; i < t->n_cols; i++)
                strbuf_printf(&b, "%s%s", i ? ", " : "", placeholders ? "?" : t->cols[i].name);
        return strbuf_steal(&b);
}

/* "SELECT <t's columns> FROM <t> <tail>". */
static char *select_sql(const struct table *t, const char *tail) {
        _cleanup_free_ char *cols = column_list(t, false);
        return xasprintf("SELECT %s FROM %s %s", cols, t->name, tail);
}

/* The one row of t that "WHERE <where>" selects, read into ret: -ENOENT when there is none. */
int get_row(struct store *s, const struct table *t, const char *where, const struct param *p, size_t n, void *ret) {
        _cleanup_free_ char *tail = xasprintf("WHERE %s", where);
        _cleanup_free_ char *sql = select_sql(t, tail);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, sql, p, n, &st);
        if (r <= 0)
                return r ?: -ENOENT;
        row_read(t, st, ret);
        return 0;
}

/* Every row st returns, as an array of t's structs: ret_rows is the address of a `T *`,
 * set (with *ret_n) only on success; the caller frees the array. */
static int collect(sqlite3_stmt *st, const struct table *t, void *ret_rows, size_t *ret_n) {
        char *a = NULL;
        size_t n = 0;
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
                a = xrealloc(a, (n + 1) * t->row_size);
                row_read(t, st, a + n++ * t->row_size);
        }
        if (rc != SQLITE_DONE) {
                for (size_t i = 0; i < n; i++)
                        t->clear(a + i * t->row_size);
                free(a);
                return sqlite_to_errno(rc) ?: -EIO;
        }
        void *rows = a;
        memcpy(ret_rows, &rows, sizeof(rows));
        *ret_n = n;
        return 0;
}

/* The rows of t that "SELECT ... FROM <t> <tail>" returns (see collect()). */
int select_rows(struct store *s, const struct table *t, const char *tail, const struct param *p, size_t n,
                void *ret_rows, size_t *ret_n) {
        _cleanup_free_ char *sql = select_sql(t, tail);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = stmt_new(s, sql, p, n, &st)) < 0)
                return r;
        return collect(st, t, ret_rows, ret_n);
}

/* One page of the rows of t that "WHERE <where>" selects, newest first, and how many
 * there are in all. where's parameters are ?1..?n; the page's own come after them. */
int select_page(struct store *s, const struct table *t, const char *where, const struct param *p, size_t n,
                int64_t offset, int64_t limit, void *ret_rows, size_t *ret_n, int64_t *ret_total) {
        _cleanup_free_ char *count_sql = xasprintf("SELECT COUNT(*) FROM %s WHERE %s", t->name, where);
        _cleanup_free_ char *tail = xasprintf("WHERE %s ORDER BY created_at DESC, id DESC LIMIT ?%zu OFFSET ?%zu", where,
                                              n + 1, n + 2);
        struct param all[8];
        int64_t total;
        int r;
        assert(n + 2 <= ELEMENTSOF(all));
        for (size_t i = 0; i < n; i++)
                all[i] = p[i];
        all[n] = p_int(limit);
        all[n + 1] = p_int(offset);
        if ((r = query_int(s, count_sql, p, n, &total)) < 0 || (r = select_rows(s, t, tail, all, n + 2, ret_rows, ret_n)) < 0)
                return r;
        *ret_total = total;
        return 0;
}

int insert_row(struct store *s, const struct table *t, const void *row) {
        _cleanup_free_ char *cols = column_list(t, false), *qs = column_list(t, true);
        _cleanup_free_ char *sql = xasprintf("INSERT INTO %s (%s) VALUES (%s)", t->name, cols, qs);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, sql, &st)) < 0)
                return r;
        row_bind(t, st, row);
        return sqlite_to_errno(sqlite3_step(st));
}

/* Rewrites every column of the rows "WHERE <where>" selects from row (?1 is its id); where's
 * own parameters (p) come after the row's. How many rows changed, or -errno. */
int update_row(struct store *s, const struct table *t, const void *row, const char *where, const struct param *p,
               size_t n) {
        _cleanup_free_ char *cols = column_list(t, false), *qs = column_list(t, true);
        _cleanup_free_ char *sql = xasprintf("UPDATE %s SET (%s) = (%s) WHERE %s", t->name, cols, qs, where);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, sql, &st)) < 0)
                return r;
        row_bind(t, st, row);
        if ((r = bind_params(st, (int) t->n_cols + 1, p, n)) < 0)
                return r;
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db);
}

/* In one IMMEDIATE transaction: count with count_sql(account_id), refuse with -EDQUOT when
 * the count is >= max (max < 0: no cap), else insert row into t. This is what makes plan
 * caps exact under concurrent requests. */
int insert_capped(struct store *s, const struct table *t, const void *row, const char *count_sql,
                  const char *account_id, int64_t max) {
        int64_t count;
        int r;
        if ((r = exec_sql(s, "BEGIN IMMEDIATE")) < 0)
                return r;
        if ((r = query_int(s, count_sql, PARAMS(p_text(account_id)), &count)) < 0)
                goto rollback;
        if (max >= 0 && count >= max) {
                r = -EDQUOT;
                goto rollback;
        }
        if ((r = insert_row(s, t, row)) < 0)
                goto rollback;
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
        if ((r = query_int(s, "SELECT COALESCE(MAX(version), 0) FROM schema_version", NO_PARAMS, &version)) < 0)
                goto fail;
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
        if ((r = exec_sql(s, snapshot_schema)) < 0 || (r = exec_sql(s, pool_schema)) < 0 ||
            (r = exec_sql(s, preview_schema)) < 0 || (r = exec_sql(s, utpl_schema)) < 0 ||
            (r = exec_sql(s, secret_schema)) < 0)
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
        if (s->db) {
                stmt_cache_drop(s->db);
                sqlite3_close_v2(s->db);
        }
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
}

/* ---- meta ---- */

static int meta_value(struct store *s, const char *key, char **ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, "SELECT value FROM meta WHERE key = ?", PARAMS(p_text(key)), &st);
        if (r <= 0)
                return r ?: -ENOENT;
        *ret = col_text(st, 0);
        return 0;
}

int store_meta_get_or_set(struct store *s, const char *key, const char *value_if_absent, char **ret) {
        LOCKED(s);
        int r = run(s, "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", PARAMS(p_text(key), p_text(value_if_absent)));
        if (r < 0)
                return r;
        r = meta_value(s, key, ret);
        return r == -ENOENT ? -EIO : r;
}

int store_meta_put(struct store *s, const char *key, const char *value) {
        LOCKED(s);
        if (!value)
                return run(s, "DELETE FROM meta WHERE key = ?", PARAMS(p_text(key)));
        return run(s, "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", PARAMS(p_text(key), p_text(value)));
}

int store_meta_get(struct store *s, const char *key, char **ret) {
        LOCKED(s);
        return meta_value(s, key, ret);
}

/* ---- nodes ---- */

int store_node_touch(struct store *s, const char *id, int64_t now) {
        LOCKED(s);
        return run(s, "INSERT INTO nodes (id, last_contact_at, created_at) VALUES (?1, ?2, ?2)"
                      " ON CONFLICT(id) DO UPDATE SET last_contact_at = MAX(COALESCE(last_contact_at, 0), ?2)",
                   PARAMS(p_text(id), p_int(now)));
}

int store_node_set_drained(struct store *s, const char *id, bool drained, int64_t now) {
        LOCKED(s);
        return run(s, "INSERT INTO nodes (id, drained, drained_at, created_at) VALUES (?1, ?2, ?3, ?4)"
                      " ON CONFLICT(id) DO UPDATE SET drained = ?2, drained_at = ?3",
                   PARAMS(p_text(id), p_int(drained), drained ? p_int(now) : p_null(), p_int(now)));
}

int store_node_drained(struct store *s, const char *id) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, "SELECT drained FROM nodes WHERE id = ?", PARAMS(p_text(id)), &st);
        return r <= 0 ? r : sqlite3_column_int(st, 0) != 0;
}

/* Known nodes: those in the table and those a live sandbox is placed on. */
int store_node_list(struct store *s, struct node_info **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        /* Pool members hold the node's capacity as much as sandboxes do: they count as live. */
        if ((r = prepare(s, "WITH live AS (SELECT node_id, COUNT(*) AS n FROM (SELECT node_id FROM sandboxes"
                            "   WHERE status IN ('starting', 'ready', 'pausing', 'resuming')"
                            "   UNION ALL SELECT node_id FROM pool_members) WHERE node_id IS NOT NULL AND node_id <> ''"
                            "   GROUP BY node_id),"
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
