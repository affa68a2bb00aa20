/* store.c — controld's sqlite3 store (WAL, foreign keys, versioned migrations).
 *
 * One connection guarded by one mutex: statements are microseconds, and the
 * mutex is what makes "count then insert" quota checks exact under
 * concurrency. Records are written before side effects so reapers can heal.
 * Returns 0 / -errno; -ENOENT when a row is missing. Never logs above debug.
 *
 * Why one file of ~1.2k lines: it is the only place that speaks SQL. The row mapping (column
 * tables, binds, reads, the capped inserts) is static here, so no other file can build a
 * query or bind a column by hand; each record type (accounts and keys, sandboxes, volumes,
 * usage, stats, nodes, snapshots) is one banner section of it.
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
static const char utpl_schema[] =
        "CREATE TABLE IF NOT EXISTS user_templates (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, name TEXT NOT NULL,"
        "  status TEXT NOT NULL, image TEXT, size_bytes INTEGER, log TEXT, error TEXT, builder_id TEXT,"
        "  created_at INTEGER NOT NULL, finished_at INTEGER, UNIQUE (account_id, name));";

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

/* ---- statements ----
 *
 * Every public function takes the store lock once (LOCKED) and then works through the
 * helpers below, which expect it held. Parameters travel as struct param, built with
 * p_text() and friends, so each value keeps its C type up to the sqlite3_bind_* call. */

struct param {
        enum { PARAM_NULL, PARAM_TEXT, PARAM_INT, PARAM_REAL } type;
        union {
                const char *text;
                int64_t i;
                double d;
        };
};

static struct param p_text(const char *v) {
        return (struct param) { .type = v ? PARAM_TEXT : PARAM_NULL, .text = v };
}
static struct param p_int(int64_t v) {
        return (struct param) { .type = PARAM_INT, .i = v };
}
static struct param p_real(double v) {
        return (struct param) { .type = PARAM_REAL, .d = v };
}
static struct param p_null(void) {
        return (struct param) { .type = PARAM_NULL };
}
/* 0 as NULL: times and sizes where 0 means "not set". */
static struct param p_opt(int64_t v) {
        return v ? p_int(v) : p_null();
}
#define PARAMS(...) (const struct param[]) { __VA_ARGS__ }, ELEMENTSOF(((const struct param[]) { __VA_ARGS__ }))
#define NO_PARAMS NULL, 0

static void bind_param(sqlite3_stmt *st, int i, struct param p) {
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
static int stmt_new(struct store *s, const char *sql, const struct param *p, size_t n, sqlite3_stmt **ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = prepare(s, sql, &st)) < 0 || (r = bind_params(st, 1, p, n)) < 0)
                return r;
        *ret = TAKE_PTR(st);
        return 0;
}

/* Runs a statement that returns no rows: how many rows it changed, or -errno. */
static int run_changes(struct store *s, const char *sql, const struct param *p, size_t n) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = stmt_new(s, sql, p, n, &st)) < 0)
                return r;
        if ((r = sqlite_to_errno(sqlite3_step(st))) < 0)
                return r;
        return sqlite3_changes(s->db);
}

/* As run_changes(), but 0 on success. */
static int run(struct store *s, const char *sql, const struct param *p, size_t n) {
        int r = run_changes(s, sql, p, n);
        return r < 0 ? r : 0;
}

/* Runs a query up to its first row: 1 with *ret on that row, 0 when there is none, or -errno.
 * *ret (the caller finalizes it) is set whenever this returns >= 0. */
static int query(struct store *s, const char *sql, const struct param *p, size_t n, sqlite3_stmt **ret) {
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
static int query_int(struct store *s, const char *sql, const struct param *p, size_t n, int64_t *ret) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, sql, p, n, &st);
        if (r <= 0)
                return r ?: -EIO;
        *ret = sqlite3_column_int64(st, 0);
        return 0;
}

/* After a guarded UPDATE of the row `id` changed nothing: -ENOENT when exists_sql (a SELECT
 * by id) finds no row, else `present` (the guard said no). */
static int unchanged(struct store *s, const char *exists_sql, const char *id, int present) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, exists_sql, PARAMS(p_text(id)), &st);
        return r < 0 ? r : r > 0 ? present : -ENOENT;
}

static char *col_text(sqlite3_stmt *st, int i) {
        const unsigned char *t = sqlite3_column_text(st, i);
        return t ? xstrdup((const char *) t) : NULL;
}

/* ---- rows ----
 *
 * A table is described once, column by column, in the order of its SELECT, INSERT and
 * UPDATE statements: reading a row into its struct and binding a struct as a row both walk
 * that description, so a column is added in one place. */

enum col_type {
        COL_ID,     /* char[SANDBOX_ID_LEN + 1]; NULL reads as "" */
        COL_TEXT,   /* char *, owned by the struct; NULL <-> NULL */
        COL_INT,    /* int64_t */
        COL_OPT,    /* int64_t; 0 is stored as NULL, NULL reads as 0 */
        COL_SIZE,   /* int64_t; -1 (unknown) is stored as NULL, NULL reads as -1 */
        COL_BOOL,   /* bool, stored as 0 or 1 */
        COL_CUSTOM, /* the column's own read() and bind(), given the whole struct */
};

struct column {
        const char *name;
        enum col_type type;
        size_t offset;
        void (*read)(sqlite3_stmt *st, int i, void *row);
        void (*bind)(sqlite3_stmt *st, int i, const void *row);
};

struct table {
        const char *name;
        const struct column *cols;
        size_t n_cols;
        size_t row_size;
        void (*clear)(void *row);
};

/* A column entry for field f of ROW (defined around each table) whose C type must be T. */
#define FIELD_OF(f, T)                                                                                   \
        (offsetof(ROW, f) +                                                                               \
         0 * sizeof(struct { _Static_assert(__builtin_types_compatible_p(__typeof__(((ROW *) 0)->f), T), #f); char c; }))
#define C_ID(col, f) { col, COL_ID, FIELD_OF(f, char[SANDBOX_ID_LEN + 1]), NULL, NULL }
#define C_TEXT(col, f) { col, COL_TEXT, FIELD_OF(f, char *), NULL, NULL }
#define C_INT(col, f) { col, COL_INT, FIELD_OF(f, int64_t), NULL, NULL }
#define C_OPT(col, f) { col, COL_OPT, FIELD_OF(f, int64_t), NULL, NULL }
#define C_SIZE(col, f) { col, COL_SIZE, FIELD_OF(f, int64_t), NULL, NULL }
#define C_BOOL(col, f) { col, COL_BOOL, FIELD_OF(f, bool), NULL, NULL }
#define C_CUSTOM(col, fn) { col, COL_CUSTOM, 0, fn##_read, fn##_bind }

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
static int get_row(struct store *s, const struct table *t, const char *where, const struct param *p, size_t n, void *ret) {
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
static int select_rows(struct store *s, const struct table *t, const char *tail, const struct param *p, size_t n,
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
static int select_page(struct store *s, const struct table *t, const char *where, const struct param *p, size_t n,
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

static int insert_row(struct store *s, const struct table *t, const void *row) {
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
static int update_row(struct store *s, const struct table *t, const void *row, const char *where, const struct param *p,
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
static int insert_capped(struct store *s, const struct table *t, const void *row, const char *count_sql,
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
            (r = exec_sql(s, preview_schema)) < 0 || (r = exec_sql(s, utpl_schema)) < 0)
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

/* ---- the last egress apply per sandbox ---- */

int store_egress_applied_put(struct store *s, const char *sandbox_id, const char *node, int64_t applied_at,
                             const struct pj_node_resolved *res, size_t n) {
        LOCKED(s);
        int r;
        if ((r = exec_sql(s, "BEGIN IMMEDIATE")) < 0)
                return r;
        r = run(s, "DELETE FROM egress_resolved WHERE sandbox_id = ?", PARAMS(p_text(sandbox_id)));
        if (r >= 0)
                r = run(s, "INSERT OR REPLACE INTO egress_applied (sandbox_id, node, applied_at) VALUES (?, ?, ?)",
                        PARAMS(p_text(sandbox_id), p_text(node), p_int(applied_at)));
        for (size_t i = 0; r >= 0 && i < n; i++) {
                /* The addresses as one column: dotted quads, space-separated. */
                char text[PJ_NODE_MAX_ADDRS_PER_NAME * 16 + 1] = "", ip[16];
                size_t len = 0;
                for (size_t k = 0; k < res[i].n_addrs && k < PJ_NODE_MAX_ADDRS_PER_NAME; k++) {
                        uint32_t a = res[i].addrs[k];
                        snprintf(ip, sizeof(ip), "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
                        len += (size_t) snprintf(text + len, sizeof(text) - len, "%s%s", k ? " " : "", ip);
                }
                r = run(s, "INSERT INTO egress_resolved (sandbox_id, pos, name, addrs, at) VALUES (?, ?, ?, ?, ?)",
                        PARAMS(p_text(sandbox_id), p_int((int64_t) i), p_text(res[i].name), p_text(text),
                               p_int(res[i].at_ms)));
        }
        if (r < 0) {
                exec_sql(s, "ROLLBACK");
                return r;
        }
        return exec_sql(s, "COMMIT");
}

int store_egress_applied_get(struct store *s, const char *sandbox_id, int64_t *ret_applied_at,
                             struct pj_node_resolved **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, "SELECT applied_at FROM egress_applied WHERE sandbox_id = ?", PARAMS(p_text(sandbox_id)), &st);
        if (r < 0)
                return r;
        if (r == 0)
                return -ENOENT;
        int64_t at = sqlite3_column_int64(st, 0);
        sqlite3_finalize(TAKE_PTR(st));
        if ((r = stmt_new(s, "SELECT name, addrs, at FROM egress_resolved WHERE sandbox_id = ? ORDER BY pos LIMIT ?",
                          PARAMS(p_text(sandbox_id), p_int(PJ_EGRESS_MAX_ALLOW)), &st)) < 0)
                return r;
        struct pj_node_resolved *v = xnew0(struct pj_node_resolved, PJ_EGRESS_MAX_ALLOW);
        size_t n = 0;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                struct pj_node_resolved *x = &v[n++];
                const char *name = (const char *) sqlite3_column_text(st, 0);
                const char *addrs = (const char *) sqlite3_column_text(st, 1);
                snprintf(x->name, sizeof(x->name), "%s", name ? name : "");
                x->at_ms = sqlite3_column_int64(st, 2);
                for (const char *p = addrs; p && *p && x->n_addrs < PJ_NODE_MAX_ADDRS_PER_NAME;) {
                        unsigned b[4];
                        int used = 0;
                        if (sscanf(p, "%u.%u.%u.%u%n", &b[0], &b[1], &b[2], &b[3], &used) != 4 || b[0] > 255 ||
                            b[1] > 255 || b[2] > 255 || b[3] > 255)
                                break;
                        x->addrs[x->n_addrs++] = (uint32_t) b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3];
                        p += used;
                        while (*p == ' ')
                                p++;
                }
        }
        if (r != SQLITE_DONE) {
                free(v);
                return sqlite_to_errno(r) ?: -EIO;
        }
        *ret_applied_at = at;
        *ret = v;
        *ret_n = n;
        return 0;
}

int store_egress_applied_forget(struct store *s, const char *sandbox_id) {
        LOCKED(s);
        int r = run(s, "DELETE FROM egress_resolved WHERE sandbox_id = ?", PARAMS(p_text(sandbox_id)));
        return r < 0 ? r : run(s, "DELETE FROM egress_applied WHERE sandbox_id = ?", PARAMS(p_text(sandbox_id)));
}

/* ---- accounts and keys ---- */

/* A record type's array destructor (name_array_free, NULL-safe) and the untyped
 * row-clearing callback its table hands to the generic row readers. */
#define DEFINE_RECORD_FREE(name)                                        \
        void name##_array_free(struct name *a, size_t n) {              \
                for (size_t i = 0; a && i < n; i++)                     \
                        name##_clear(&a[i]);                            \
                free(a);                                                \
        }                                                               \
        static void name##_clear_row(void *row) {                       \
                name##_clear(row);                                      \
        }

void account_clear(struct account *a) {
        if (!a)
                return;
        free_many(a->name, a->plan);
        memset(a, 0, sizeof(*a));
}

static void account_clear_row(void *row) {
        account_clear(row);
}

#define ROW struct account
static const struct column account_columns[] = {
        C_ID("id", id), C_TEXT("name", name), C_TEXT("plan", plan), C_INT("created_at", created_at),
        /* Named as config_plan_limits[] names them: store_account_set_limit writes by that name. */
        C_INT("max_concurrent", limits[PLAN_MAX_CONCURRENT]), C_INT("max_cpu", limits[PLAN_MAX_CPU]),
        C_INT("max_memory", limits[PLAN_MAX_MEMORY]), C_INT("max_disk", limits[PLAN_MAX_DISK]),
        C_INT("max_volume_gb", limits[PLAN_MAX_VOLUME_GB]), C_INT("max_volumes", limits[PLAN_MAX_VOLUMES]),
};
#undef ROW
static const struct table accounts = {
        "accounts", account_columns, ELEMENTSOF(account_columns), sizeof(struct account), account_clear_row,
};

int store_account_create(struct store *s, const char *name, const char *plan, struct account *ret) {
        LOCKED(s);
        char id[SANDBOX_ID_LEN + 1];
        int64_t now = now_ms();
        int r;

        hexid_new(id);
        r = run(s, "INSERT INTO accounts (id, name, plan, created_at) VALUES (?, ?, ?, ?)",
                PARAMS(p_text(id), p_text(name), p_text(plan), p_int(now)));
        if (r < 0)
                return r;
        if (ret) {
                *ret = (struct account) { .name = xstrdup(name), .plan = xstrdup(plan), .created_at = now };
                memcpy(ret->id, id, sizeof(ret->id));
                for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++)
                        ret->limits[k] = -1;
        }
        return 0;
}

int store_account_get(struct store *s, const char *id, struct account *ret) {
        LOCKED(s);
        return get_row(s, &accounts, "id = ?", PARAMS(p_text(id)), ret);
}

int store_account_by_name(struct store *s, const char *name, struct account *ret) {
        LOCKED(s);
        return get_row(s, &accounts, "name = ?", PARAMS(p_text(name)), ret);
}

int store_account_set_limit(struct store *s, const char *id, enum plan_limit k, int64_t value) {
        LOCKED(s);
        /* The column name is ours (config_plan_limits), never the caller's text. */
        _cleanup_free_ char *sql = xasprintf("UPDATE accounts SET %s = ? WHERE id = ?", config_plan_limits[k].key);
        int r = run_changes(s, sql, PARAMS(p_int(value < 0 ? -1 : value), p_text(id)));
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_account_set_plan(struct store *s, const char *id, const char *plan) {
        LOCKED(s);
        int r = run_changes(s, "UPDATE accounts SET plan = ? WHERE id = ?", PARAMS(p_text(plan), p_text(id)));
        return r < 0 ? r : r == 0 ? -ENOENT : 0;
}

int store_key_lookup(struct store *s, const char *key_hash, struct account *ret) {
        LOCKED(s);
        /* hash is unique: one key, one account. */
        return get_row(s, &accounts, "id = (SELECT account_id FROM api_keys WHERE hash = ? AND revoked_at IS NULL)",
                       PARAMS(p_text(key_hash)), ret);
}

int store_account_foreach(struct store *s, int (*cb)(const struct account *a, void *ud), void *ud) {
        struct account *list = NULL;
        size_t n = 0;
        int r;
        {
                LOCKED(s);
                if ((r = select_rows(s, &accounts, "ORDER BY created_at", NO_PARAMS, &list, &n)) < 0)
                        return r;
        }
        r = 0;
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
        hexid_new(ret_id);
        int r = run(s, "INSERT INTO api_keys (id, account_id, hash, prefix, created_at) VALUES (?, ?, ?, ?, ?)",
                    PARAMS(p_text(ret_id), p_text(account_id), p_text(key_hash), p_text(prefix), p_int(now_ms())));
        return r == -EEXIST ? -ENOENT : r; /* a constraint: the account is unknown (foreign key) */
}

int store_key_revoke(struct store *s, const char *id_or_prefix) {
        LOCKED(s);
        int r = run_changes(s, "UPDATE api_keys SET revoked_at = ?1 WHERE (id = ?2 OR prefix = ?2) AND revoked_at IS NULL",
                            PARAMS(p_int(now_ms()), p_text(id_or_prefix)));
        return r == 0 ? -ENOENT : r < 0 ? r : 0;
}

int store_key_foreach(struct store *s, const char *account_id,
                      int (*cb)(const char *id, const char *prefix, int64_t created, int64_t revoked, void *ud), void *ud) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = stmt_new(s, "SELECT id, prefix, created_at, COALESCE(revoked_at, 0) FROM api_keys WHERE account_id = ?"
                             " ORDER BY created_at", PARAMS(p_text(account_id)), &st)) < 0)
                return r;
        while (sqlite3_step(st) == SQLITE_ROW) {
                r = cb((const char *) sqlite3_column_text(st, 0), (const char *) sqlite3_column_text(st, 1),
                       sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3), ud);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* ---- sandboxes ---- */

void sandbox_clear(struct sandbox *s) {
        if (!s)
                return;
        free_many(s->name, s->template_name, s->image, s->region_key, s->team, s->project_environment,
                  s->destroy_timeout, s->volume_id, s->mount_path, s->from_snapshot, s->snapshot_mode,
                  s->snapshot_frequency, s->destroy_reason, s->failure_reason, s->driver, s->job_id, s->alloc_id,
                  s->node_id, s->container_id, s->ip, s->metadata, s->env, s->e2b);
        sb_egress_done(&s->egress);
        memset(s, 0, sizeof(*s));
}

DEFINE_RECORD_FREE(sandbox)

/* The sandbox columns stored in another form than their field's. */
static void sb_status_read(sqlite3_stmt *st, int i, void *row) {
        int k = sb_status_from_str((const char *) sqlite3_column_text(st, i));
        ((struct sandbox *) row)->status = k < 0 ? SB_FAILED : (enum sb_status) k;
}
static void sb_status_bind(sqlite3_stmt *st, int i, const void *row) {
        bind_param(st, i, p_text(sb_status_str(((const struct sandbox *) row)->status)));
}
static void sb_egress_mode_read(sqlite3_stmt *st, int i, void *row) {
        ((struct sandbox *) row)->egress.mode = (enum pj_egress_mode) sqlite3_column_int(st, i);
}
static void sb_egress_mode_bind(sqlite3_stmt *st, int i, const void *row) {
        bind_param(st, i, p_int(((const struct sandbox *) row)->egress.mode));
}
static void sb_egress_allow_read(sqlite3_stmt *st, int i, void *row) {
        sb_egress_allow_from_text(&((struct sandbox *) row)->egress, (const char *) sqlite3_column_text(st, i));
}
static void sb_egress_allow_bind(sqlite3_stmt *st, int i, const void *row) {
        _cleanup_free_ char *allow = sb_egress_allow_to_text(&((const struct sandbox *) row)->egress);
        bind_param(st, i, p_text(allow));
}
/* NULL reads as NULL; a sandbox without a mode is stored as "manual" (the column is NOT NULL). */
static void sb_snapshot_mode_read(sqlite3_stmt *st, int i, void *row) {
        ((struct sandbox *) row)->snapshot_mode = col_text(st, i);
}
static void sb_snapshot_mode_bind(sqlite3_stmt *st, int i, const void *row) {
        const char *mode = ((const struct sandbox *) row)->snapshot_mode;
        bind_param(st, i, p_text(mode ? mode : "manual"));
}
static void sb_timings_read(sqlite3_stmt *st, int i, void *row) {
        sb_timings_from_text(&((struct sandbox *) row)->timings, (const char *) sqlite3_column_text(st, i));
}
static void sb_timings_bind(sqlite3_stmt *st, int i, const void *row) {
        _cleanup_free_ char *timings = sb_timings_to_text(&((const struct sandbox *) row)->timings);
        bind_param(st, i, p_text(timings));
}

#define ROW struct sandbox
static const struct column sandbox_columns[] = {
        C_ID("id", id), C_ID("account_id", account_id), C_TEXT("name", name), C_TEXT("template", template_name),
        C_TEXT("image", image), C_CUSTOM("status", sb_status), C_TEXT("region", region_key),
        C_INT("cpu", cpu), C_INT("memory", memory), C_INT("disk", disk),
        C_TEXT("team", team), C_TEXT("project_environment", project_environment),
        C_BOOL("auto_destroy", auto_destroy), C_TEXT("destroy_timeout", destroy_timeout), C_BOOL("one_shot", one_shot),
        C_CUSTOM("egress_mode", sb_egress_mode), C_CUSTOM("egress_allow", sb_egress_allow),
        C_BOOL("persistent", persistent), C_OPT("persistent_disk_gb", persistent_disk_gb),
        C_TEXT("volume_id", volume_id), C_TEXT("mount_path", mount_path), C_TEXT("from_snapshot", from_snapshot),
        C_CUSTOM("snapshot_mode", sb_snapshot_mode), C_TEXT("snapshot_frequency", snapshot_frequency),
        C_INT("created_at", created_at), C_INT("last_activity_at", last_activity_at), C_INT("expires_at", expires_at),
        C_OPT("paused_at", paused_at), C_OPT("destroyed_at", destroyed_at),
        C_TEXT("destroy_reason", destroy_reason), C_TEXT("failure_reason", failure_reason),
        C_TEXT("driver", driver), C_TEXT("job_id", job_id), C_TEXT("alloc_id", alloc_id), C_TEXT("node_id", node_id),
        C_TEXT("container_id", container_id), C_TEXT("ip", ip), C_CUSTOM("timings", sb_timings),
        C_TEXT("metadata", metadata), C_TEXT("env", env), C_TEXT("e2b", e2b),
};
#undef ROW
static const struct table sandboxes = {
        "sandboxes", sandbox_columns, ELEMENTSOF(sandbox_columns), sizeof(struct sandbox), sandbox_clear_row,
};

/* What counts toward an account's max_concurrent: its sandboxes in every live state. */
static const char held_sandboxes_sql[] = "SELECT COUNT(*) FROM sandboxes WHERE account_id = ? AND status IN "
                                         "('starting','ready','pausing','paused','resuming')";

int store_sandbox_insert_capped(struct store *s, const struct sandbox *sb, int64_t max_concurrent) {
        LOCKED(s);
        return insert_capped(s, &sandboxes, sb, held_sandboxes_sql, sb->account_id, max_concurrent);
}

int store_sandbox_get(struct store *s, const char *id, struct sandbox *ret) {
        LOCKED(s);
        return get_row(s, &sandboxes, "id = ?", PARAMS(p_text(id)), ret);
}

int store_sandbox_get_owned(struct store *s, const char *account_id, const char *id, struct sandbox *ret) {
        LOCKED(s);
        return get_row(s, &sandboxes, "id = ? AND account_id = ?", PARAMS(p_text(id), p_text(account_id)), ret);
}

/* After an UPDATE ... WHERE id = ? AND status = ? changed nothing: -ENOENT when the sandbox
 * is missing, else -ESTALE (its status was not the expected one). */
static int sandbox_unchanged(struct store *s, const char *id) {
        return unchanged(s, "SELECT 1 FROM sandboxes WHERE id = ?", id, -ESTALE);
}

/* Rewrites every column (SET id = ?1 is harmless) while the stored status is `expected`
 * (< 0: whatever it is). */
static int sandbox_update_if(struct store *s, const struct sandbox *sb, int expected) {
        LOCKED(s);
        int r = update_row(s, &sandboxes, sb, "id = ?1 AND (:expected IS NULL OR status = :expected)",
                           PARAMS(p_text(expected >= 0 ? sb_status_str((enum sb_status) expected) : NULL)));
        if (r < 0)
                return r;
        return r > 0 ? 0 : sandbox_unchanged(s, sb->id);
}

int store_sandbox_update(struct store *s, const struct sandbox *sb) {
        return sandbox_update_if(s, sb, -1);
}

int store_sandbox_update_cas(struct store *s, const struct sandbox *sb, enum sb_status expected) {
        return sandbox_update_if(s, sb, (int) expected);
}

int store_sandbox_cas_status(struct store *s, const char *id, enum sb_status from, enum sb_status to) {
        LOCKED(s);
        int r = run_changes(s, "UPDATE sandboxes SET status = ? WHERE id = ? AND status = ?",
                            PARAMS(p_text(sb_status_str(to)), p_text(id), p_text(sb_status_str(from))));
        if (r < 0)
                return r;
        return r > 0 ? 0 : sandbox_unchanged(s, id);
}

int store_sandbox_delete(struct store *s, const char *id) {
        LOCKED(s);
        return run(s, "DELETE FROM sandboxes WHERE id = ?", PARAMS(p_text(id)));
}

int store_sandbox_touch(struct store *s, const char *id, int64_t now) {
        LOCKED(s);
        return run(s, "UPDATE sandboxes SET last_activity_at = ? WHERE id = ?", PARAMS(p_int(now), p_text(id)));
}

static struct param p_status(int status) {
        return p_text(status >= 0 ? sb_status_str((enum sb_status) status) : NULL);
}

int store_sandbox_list(struct store *s, const char *account_id, int status_filter, int64_t offset, int64_t limit,
                       struct sandbox **ret, size_t *ret_n, int64_t *ret_total) {
        LOCKED(s);
        return select_page(s, &sandboxes, "account_id = ?1 AND (?2 IS NULL OR status = ?2)",
                           PARAMS(p_text(account_id), p_status(status_filter)), offset, limit, ret, ret_n, ret_total);
}

int store_sandbox_list_status(struct store *s, const char *account_id, int status, struct sandbox **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &sandboxes,
                           "WHERE (?1 IS NULL OR account_id = ?1) AND (?2 IS NULL OR status = ?2) ORDER BY created_at",
                           PARAMS(p_text(account_id), p_status(status)), ret, ret_n);
}

int store_sandbox_list_expired(struct store *s, int64_t now_ms, int64_t max, struct sandbox **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &sandboxes,
                           "WHERE status IN ('starting','ready','pausing','paused','resuming') AND expires_at <= ?1"
                           " ORDER BY expires_at LIMIT ?2",
                           PARAMS(p_int(now_ms), p_int(max)), ret, ret_n);
}

int store_sandbox_list_live(struct store *s, const char *account_id, int64_t max, struct sandbox **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &sandboxes,
                           "WHERE account_id = ?1 AND status IN ('starting','ready','pausing','paused','resuming')"
                           " ORDER BY created_at LIMIT ?2",
                           PARAMS(p_text(account_id), p_int(max)), ret, ret_n);
}

int store_sandbox_list_automatic(struct store *s, struct sandbox **ret, size_t *ret_n) {
        LOCKED(s);
        /* Live sandboxes with a schedule, and any sandbox (destroyed too) that still has an
         * automatic snapshot: the only ones schedules or retention can act on. */
        return select_rows(s, &sandboxes,
                           "WHERE (snapshot_mode = 'automatic'"
                           "   AND status IN ('starting', 'ready', 'pausing', 'paused', 'resuming'))"
                           " OR id IN (SELECT sandbox_id FROM snapshots WHERE automatic = 1) ORDER BY created_at",
                           NO_PARAMS, ret, ret_n);
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

DEFINE_RECORD_FREE(volume)

#define ROW struct volume
static const struct column volume_columns[] = {
        C_ID("id", id), C_ID("account_id", account_id), C_TEXT("name", name), C_TEXT("type", type), C_INT("size_gb", size_gb),
        C_TEXT("region", region_key), C_TEXT("team", team), C_TEXT("handle", handle), C_TEXT("mount_path", mount_path),
        C_TEXT("attached_sandbox_id", attached_sandbox_id), C_OPT("last_attached_at", last_attached_at),
        C_INT("created_at", created_at), C_INT("updated_at", updated_at),
};
#undef ROW
static const struct table volumes = {
        "volumes", volume_columns, ELEMENTSOF(volume_columns), sizeof(struct volume), volume_clear_row,
};

int store_volume_insert_capped(struct store *s, const struct volume *v, int64_t max_volumes) {
        LOCKED(s);
        return insert_capped(s, &volumes, v, "SELECT COUNT(*) FROM volumes WHERE account_id = ?", v->account_id, max_volumes);
}

int store_volume_get(struct store *s, const char *id, struct volume *ret) {
        LOCKED(s);
        return get_row(s, &volumes, "id = ?", PARAMS(p_text(id)), ret);
}

int store_volume_get_owned(struct store *s, const char *account_id, const char *id, struct volume *ret) {
        LOCKED(s);
        return get_row(s, &volumes, "id = ? AND account_id = ?", PARAMS(p_text(id), p_text(account_id)), ret);
}

int store_volume_update(struct store *s, const struct volume *v) {
        LOCKED(s);
        int r = update_row(s, &volumes, v, "id = ?1", NO_PARAMS);
        return r < 0 ? r : 0;
}

int store_volume_delete(struct store *s, const char *id) {
        LOCKED(s);
        int r = run_changes(s, "DELETE FROM volumes WHERE id = ? AND attached_sandbox_id IS NULL", PARAMS(p_text(id)));
        return r == 0 ? -EBUSY : r < 0 ? r : 0;
}

/* The error for a volume row that an UPDATE guarded by "not deleting, not attached
 * elsewhere" left alone. */
static int volume_unchanged(struct store *s, const char *id) {
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, "SELECT deleting FROM volumes WHERE id = ?", PARAMS(p_text(id)), &st);
        if (r <= 0)
                return r ?: -ENOENT;
        return sqlite3_column_int(st, 0) ? -EALREADY : -EBUSY;
}

int store_volume_begin_delete(struct store *s, const char *id, const char *owner_sandbox_id) {
        LOCKED(s);
        /* One statement: the check and the mark cannot be split by a concurrent attach. */
        int r = run_changes(s, "UPDATE volumes SET deleting = 1, attached_sandbox_id = NULL, updated_at = ?"
                               " WHERE id = ? AND deleting = 0 AND (attached_sandbox_id IS NULL OR attached_sandbox_id = ?)",
                            PARAMS(p_int(now_ms()), p_text(id), p_text(owner_sandbox_id)));
        if (r < 0)
                return r;
        return r > 0 ? 0 : volume_unchanged(s, id);
}

int store_volume_abort_delete(struct store *s, const char *id) {
        LOCKED(s);
        return run(s, "UPDATE volumes SET deleting = 0 WHERE (?1 IS NULL OR id = ?1) AND deleting = 1", PARAMS(p_text(id)));
}

int store_volume_list(struct store *s, const char *account_id, int64_t offset, int64_t limit, struct volume **ret,
                      size_t *ret_n, int64_t *ret_total) {
        LOCKED(s);
        return select_page(s, &volumes, "account_id = ?1", PARAMS(p_text(account_id)), offset, limit, ret, ret_n, ret_total);
}

int store_volume_attach(struct store *s, const char *vol_id, const char *sandbox_id, const char *mount_path, int64_t now) {
        LOCKED(s);
        int r = run_changes(s, "UPDATE volumes SET attached_sandbox_id = ?1, mount_path = ?2, last_attached_at = ?3, updated_at = ?3"
                               " WHERE id = ?4 AND deleting = 0 AND (attached_sandbox_id IS NULL OR attached_sandbox_id = ?1)",
                            PARAMS(p_text(sandbox_id), p_text(mount_path), p_int(now), p_text(vol_id)));
        if (r != 0)
                return r < 0 ? r : 0;
        r = volume_unchanged(s, vol_id);
        return r == -EALREADY ? -ENOENT : r;   /* a volume being deleted is as good as gone */
}

int store_volume_detach_sandbox(struct store *s, const char *sandbox_id, int64_t now) {
        LOCKED(s);
        return run(s, "UPDATE volumes SET attached_sandbox_id = NULL, updated_at = ? WHERE attached_sandbox_id = ?",
                   PARAMS(p_int(now), p_text(sandbox_id)));
}

/* ---- usage and stats ---- */

void store_usage_period(int64_t ms, char out[8]) {
        time_t t = (time_t) (ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        snprintf(out, 8, "%04d-%02d", tm.tm_year + 1900, tm.tm_mon + 1);
}

int store_usage_add(struct store *s, const char *account_id, const char *period, double cpu_mhz_s, double mb_s, double cost) {
        LOCKED(s);
        return run(s, "INSERT INTO usage (account_id, period, cpu_mhz_seconds, mb_seconds, cost) VALUES (?,?,?,?,?)"
                      " ON CONFLICT(account_id, period) DO UPDATE SET cpu_mhz_seconds = cpu_mhz_seconds + excluded.cpu_mhz_seconds,"
                      " mb_seconds = mb_seconds + excluded.mb_seconds, cost = cost + excluded.cost",
                   PARAMS(p_text(account_id), p_text(period), p_real(cpu_mhz_s), p_real(mb_s), p_real(cost)));
}

int store_usage_get(struct store *s, const char *account_id, const char *period, double *ret_cost) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        *ret_cost = 0;
        int r = query(s, "SELECT cost FROM usage WHERE account_id = ? AND period = ?",
                      PARAMS(p_text(account_id), p_text(period)), &st);
        if (r > 0)
                *ret_cost = sqlite3_column_double(st, 0);
        return r < 0 ? r : 0;
}

int store_stats_add(struct store *s, const char *sandbox_id, int64_t ts_ms, double cpu_pct, double mem_pct, double net_bps) {
        LOCKED(s);
        return run(s, "INSERT INTO stats_samples (sandbox_id, ts_ms, cpu_pct, mem_pct, net_bps) VALUES (?,?,?,?,?)",
                   PARAMS(p_text(sandbox_id), p_int(ts_ms), p_real(cpu_pct), p_real(mem_pct), p_real(net_bps)));
}

int store_stats_prune(struct store *s, int64_t older_than_ms) {
        LOCKED(s);
        return run(s, "DELETE FROM stats_samples WHERE ts_ms < ?", PARAMS(p_int(older_than_ms)));
}

int store_stats_range(struct store *s, const char *sandbox_id, int64_t since_ms, struct stats_sample **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r;
        if ((r = stmt_new(s, "SELECT ts_ms, cpu_pct, mem_pct, net_bps FROM stats_samples WHERE sandbox_id = ? AND ts_ms >= ?"
                             " ORDER BY ts_ms", PARAMS(p_text(sandbox_id), p_int(since_ms)), &st)) < 0)
                return r;
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

/* ---- snapshots ---- */

void snapshot_clear(struct snapshot *sn) {
        if (!sn)
                return;
        free_many(sn->name, sn->image_tag, sn->source_template, sn->node_id, sn->digest, sn->failure_reason);
        memset(sn, 0, sizeof(*sn));
}

DEFINE_RECORD_FREE(snapshot)

static void snap_status_read(sqlite3_stmt *st, int i, void *row) {
        ((struct snapshot *) row)->status = snap_status_from_str((const char *) sqlite3_column_text(st, i));
}
static void snap_status_bind(sqlite3_stmt *st, int i, const void *row) {
        bind_param(st, i, p_text(snap_status_str(((const struct snapshot *) row)->status)));
}

#define ROW struct snapshot
static const struct column snapshot_columns[] = {
        C_ID("id", id), C_ID("account_id", account_id), C_ID("sandbox_id", sandbox_id), C_TEXT("name", name),
        C_TEXT("image_tag", image_tag), C_TEXT("source_template", source_template), C_TEXT("node_id", node_id),
        C_CUSTOM("status", snap_status), C_BOOL("automatic", automatic), C_TEXT("digest", digest),
        C_TEXT("failure_reason", failure_reason), C_SIZE("size_bytes", size_bytes),
        C_INT("created_at", created_at), C_OPT("finished_at", finished_at),
};
#undef ROW
static const struct table snapshots = {
        "snapshots", snapshot_columns, ELEMENTSOF(snapshot_columns), sizeof(struct snapshot), snapshot_clear_row,
};

int store_snapshot_insert(struct store *s, const struct snapshot *sn) {
        LOCKED(s);
        return insert_row(s, &snapshots, sn);
}

int store_snapshot_insert_capped(struct store *s, const struct snapshot *sn, const struct snapshot_caps *caps,
                                 int *ret_which) {
        LOCKED(s);
        int64_t manual = 0, inflight = 0, bytes = 0;
        int r;
        *ret_which = 0;
        if ((r = exec_sql(s, "BEGIN IMMEDIATE")) < 0)
                return r;
        if ((r = query_int(s, "SELECT COUNT(*) FROM snapshots WHERE account_id = ? AND automatic = 0 AND status != 'failed'",
                           PARAMS(p_text(sn->account_id)), &manual)) < 0 ||
            (r = query_int(s, "SELECT COUNT(*) FROM snapshots WHERE account_id = ? AND status = 'creating'",
                           PARAMS(p_text(sn->account_id)), &inflight)) < 0 ||
            (r = query_int(s, "SELECT COALESCE(SUM(size_bytes), 0) FROM snapshots WHERE account_id = ? AND status = 'ready'",
                           PARAMS(p_text(sn->account_id)), &bytes)) < 0)
                goto rollback;
        if (!sn->automatic && manual >= caps->max_manual)
                *ret_which = SNAPSHOT_CAP_MANUAL;
        else if (inflight >= caps->max_inflight)
                *ret_which = SNAPSHOT_CAP_INFLIGHT;
        else if (bytes >= caps->max_total_bytes)
                *ret_which = SNAPSHOT_CAP_BYTES;
        if (*ret_which) {
                r = -EDQUOT;
                goto rollback;
        }
        if ((r = insert_row(s, &snapshots, sn)) < 0)
                goto rollback;
        return exec_sql(s, "COMMIT");
rollback:
        exec_sql(s, "ROLLBACK");
        return r;
}

int store_snapshot_get(struct store *s, const char *id, struct snapshot *ret) {
        LOCKED(s);
        return get_row(s, &snapshots, "id = ?", PARAMS(p_text(id)), ret);
}

int store_snapshot_finish(struct store *s, const char *id, enum snap_status to, const char *digest, int64_t size_bytes,
                          const char *failure_reason, int64_t now) {
        LOCKED(s);
        int r = run_changes(s, "UPDATE snapshots SET status = ?, digest = ?, size_bytes = ?, failure_reason = ?, finished_at = ?"
                               " WHERE id = ? AND status = 'creating'",
                            PARAMS(p_text(snap_status_str(to)), p_text(digest), size_bytes >= 0 ? p_int(size_bytes) : p_null(),
                                   p_text(failure_reason), p_int(now), p_text(id)));
        if (r < 0)
                return r;
        return r > 0 ? 0 : unchanged(s, "SELECT 1 FROM snapshots WHERE id = ?", id, -ESTALE);
}

int store_snapshot_delete(struct store *s, const char *id) {
        LOCKED(s);
        int r = run_changes(s, "DELETE FROM snapshots WHERE id = ?", PARAMS(p_text(id)));
        return r == 0 ? -ENOENT : r < 0 ? r : 0;
}

int store_snapshot_list(struct store *s, const char *account_id, const char *sandbox_id, int64_t offset, int64_t limit,
                        struct snapshot **ret, size_t *ret_n, int64_t *ret_total) {
        LOCKED(s);
        return select_page(s, &snapshots, "account_id = ?1 AND (?2 IS NULL OR sandbox_id = ?2)",
                           PARAMS(p_text(account_id), p_text(sandbox_id)), offset, limit, ret, ret_n, ret_total);
}

int store_snapshot_list_stuck(struct store *s, int64_t before, struct snapshot **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &snapshots, "WHERE status = 'creating' AND created_at < ?", PARAMS(p_int(before)), ret, ret_n);
}

int store_snapshot_count_creating(struct store *s, const char *sandbox_id, int64_t *ret) {
        LOCKED(s);
        return query_int(s, "SELECT COUNT(*) FROM snapshots WHERE sandbox_id = ? AND status = 'creating'",
                         PARAMS(p_text(sandbox_id)), ret);
}

int store_snapshot_list_auto(struct store *s, const char *sandbox_id, struct snapshot **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &snapshots, "WHERE sandbox_id = ? AND automatic = 1 AND status != 'creating'"
                                          " ORDER BY created_at DESC, id DESC",
                           PARAMS(p_text(sandbox_id)), ret, ret_n);
}

/* ---- warm pool members ---- */

void pool_member_clear(struct pool_member *m) {
        if (!m)
                return;
        free_many(m->pool, m->image, m->state, m->container_id, m->node_id, m->job_id, m->alloc_id, m->ip);
        memset(m, 0, sizeof(*m));
}

DEFINE_RECORD_FREE(pool_member)

#define ROW struct pool_member
static const struct column pool_member_columns[] = {
        C_ID("id", id), C_TEXT("pool", pool), C_TEXT("image", image), C_TEXT("state", state),
        C_INT("created_at", created_at), C_TEXT("container_id", container_id), C_TEXT("node_id", node_id),
        C_TEXT("job_id", job_id), C_TEXT("alloc_id", alloc_id), C_TEXT("ip", ip),
};
#undef ROW
static const struct table pool_members = {
        "pool_members", pool_member_columns, ELEMENTSOF(pool_member_columns), sizeof(struct pool_member), pool_member_clear_row,
};

int store_pool_insert(struct store *s, const struct pool_member *m) {
        LOCKED(s);
        return insert_row(s, &pool_members, m);
}

int store_pool_update(struct store *s, const struct pool_member *m) {
        LOCKED(s);
        int r = update_row(s, &pool_members, m, "id = ?1", NULL, 0);
        return r < 0 ? r : r > 0 ? 0 : -ENOENT;
}

int store_pool_delete(struct store *s, const char *id) {
        LOCKED(s);
        int r = run_changes(s, "DELETE FROM pool_members WHERE id = ?", PARAMS(p_text(id)));
        return r == 0 ? -ENOENT : r < 0 ? r : 0;
}

int store_pool_get(struct store *s, const char *id, struct pool_member *ret) {
        LOCKED(s);
        return get_row(s, &pool_members, "id = ?", PARAMS(p_text(id)), ret);
}

int store_pool_list(struct store *s, const char *pool, struct pool_member **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &pool_members, "WHERE (?1 IS NULL OR pool = ?1) ORDER BY pool, created_at, id LIMIT 100000",
                           PARAMS(p_text(pool)), ret, ret_n);
}

int store_pool_claim(struct store *s, const char *pool, const char *image, struct sandbox *sb, int64_t max_concurrent) {
        LOCKED(s);
        _cleanup_(pool_member_clear) struct pool_member m = { 0 };
        int64_t count;
        int r;
        if ((r = exec_sql(s, "BEGIN IMMEDIATE")) < 0)
                return r;
        if ((r = query_int(s, held_sandboxes_sql, PARAMS(p_text(sb->account_id)), &count)) < 0)
                goto rollback;
        if (max_concurrent >= 0 && count >= max_concurrent) {
                r = -EDQUOT;
                goto rollback;
        }
        /* The oldest ready member made from this very image. */
        if ((r = get_row(s, &pool_members, "pool = ? AND image = ? AND state = 'ready' ORDER BY created_at, id LIMIT 1",
                         PARAMS(p_text(pool), p_text(image)), &m)) < 0)
                goto rollback;
        if ((r = run_changes(s, "DELETE FROM pool_members WHERE id = ?", PARAMS(p_text(m.id)))) != 1) {
                r = r < 0 ? r : -ESTALE;
                goto rollback;
        }
        snprintf(sb->id, sizeof(sb->id), "%s", m.id);
        free_many(sb->container_id, sb->node_id, sb->job_id, sb->alloc_id, sb->ip);
        sb->container_id = m.container_id;
        sb->node_id = m.node_id;
        sb->job_id = m.job_id;
        sb->alloc_id = m.alloc_id;
        sb->ip = m.ip;
        m.container_id = m.node_id = m.job_id = m.alloc_id = m.ip = NULL;
        if ((r = insert_row(s, &sandboxes, sb)) < 0)
                goto rollback;
        return exec_sql(s, "COMMIT");
rollback:
        exec_sql(s, "ROLLBACK");
        return r;
}

/* ---- preview URLs ---- */

static void preview_from_row(sqlite3_stmt *st, struct preview *p) {
        *p = (struct preview) { 0 };
        snprintf(p->sandbox_id, sizeof(p->sandbox_id), "%s", (const char *) sqlite3_column_text(st, 0) ?: "");
        p->port = sqlite3_column_int(st, 1);
        snprintf(p->account_id, sizeof(p->account_id), "%s", (const char *) sqlite3_column_text(st, 2) ?: "");
        snprintf(p->token_sha256, sizeof(p->token_sha256), "%s", (const char *) sqlite3_column_text(st, 3) ?: "");
        p->public_ = sqlite3_column_int(st, 4) != 0;
        p->keep_host = sqlite3_column_int(st, 5) != 0;
        p->created_at = sqlite3_column_int64(st, 6);
        p->expires_at = sqlite3_column_int64(st, 7);
}

#define PREVIEW_COLS "sandbox_id, port, account_id, token_sha256, public, keep_host, created_at, expires_at"

int store_preview_put(struct store *s, const struct preview *p, int64_t now_ms, int64_t max_per_sandbox) {
        LOCKED(s);
        int64_t n = 0;
        int r;
        if ((r = exec_sql(s, "BEGIN IMMEDIATE")) < 0)
                return r;
        if ((r = run(s, "DELETE FROM previews WHERE sandbox_id = ? AND expires_at <= ?", PARAMS(p_text(p->sandbox_id),
                                                                                            p_int(now_ms)))) < 0 ||
            (r = query_int(s, "SELECT COUNT(*) FROM previews WHERE sandbox_id = ? AND port != ?",
                           PARAMS(p_text(p->sandbox_id), p_int(p->port)), &n)) < 0)
                goto rollback;
        if (n >= max_per_sandbox) {
                r = -EDQUOT;
                goto rollback;
        }
        if ((r = run(s, "INSERT OR REPLACE INTO previews (" PREVIEW_COLS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     PARAMS(p_text(p->sandbox_id), p_int(p->port), p_text(p->account_id), p_text(p->token_sha256),
                            p_int(p->public_), p_int(p->keep_host), p_int(p->created_at), p_int(p->expires_at)))) < 0)
                goto rollback;
        return exec_sql(s, "COMMIT");
rollback:
        (void) exec_sql(s, "ROLLBACK");
        return r;
}

int store_preview_get(struct store *s, const char *sandbox_id, int port, struct preview *ret) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, "SELECT " PREVIEW_COLS " FROM previews WHERE sandbox_id = ? AND port = ?",
                      PARAMS(p_text(sandbox_id), p_int(port)), &st);
        if (r <= 0)
                return r ?: -ENOENT;
        preview_from_row(st, ret);
        return 0;
}

int store_preview_list(struct store *s, const char *sandbox_id, int64_t now_ms, struct preview **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = stmt_new(s, "SELECT " PREVIEW_COLS " FROM previews WHERE sandbox_id = ? AND expires_at > ? ORDER BY port LIMIT 256",
                         PARAMS(p_text(sandbox_id), p_int(now_ms)), &st);
        if (r < 0)
                return r;
        struct preview *v = xnew0(struct preview, 256);
        size_t n = 0;
        while ((r = sqlite3_step(st)) == SQLITE_ROW && n < 256)
                preview_from_row(st, &v[n++]);
        if (r != SQLITE_ROW && r != SQLITE_DONE) {
                free(v);
                return sqlite_to_errno(r) ?: -EIO;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int store_preview_delete(struct store *s, const char *sandbox_id, int port) {
        LOCKED(s);
        int r = run_changes(s, "DELETE FROM previews WHERE sandbox_id = ? AND port = ?", PARAMS(p_text(sandbox_id), p_int(port)));
        return r == 0 ? -ENOENT : r < 0 ? r : 0;
}

int store_preview_delete_sandbox(struct store *s, const char *sandbox_id) {
        LOCKED(s);
        return run(s, "DELETE FROM previews WHERE sandbox_id = ?", PARAMS(p_text(sandbox_id)));
}

#define PREVIEW_KEEP_ENDED_MS (24LL * 3600 * 1000)

int store_preview_prune(struct store *s, int64_t now_ms) {
        LOCKED(s);
        /* Kept a day past their end, so that a link opened then still says "expired" (or "the
         * sandbox was destroyed"), 410, and not "never made" (404), however often this runs. */
        return run(s, "DELETE FROM previews WHERE expires_at <= ?1 OR sandbox_id NOT IN (SELECT id FROM sandboxes)"
                      " OR sandbox_id IN (SELECT id FROM sandboxes WHERE status IN ('destroyed', 'failed')"
                      " AND COALESCE(destroyed_at, 0) <= ?1)",
                   PARAMS(p_int(now_ms - PREVIEW_KEEP_ENDED_MS)));
}

/* ---- templates users build ---- */

void user_template_clear(struct user_template *t) {
        if (!t)
                return;
        free_many(t->name, t->status, t->image, t->log, t->error, t->builder_id);
        *t = (struct user_template) { 0 };
}

#define UTPL_COLS "id, account_id, name, status, image, size_bytes, log, error, builder_id, created_at, finished_at"

static char *col_dup(sqlite3_stmt *st, int i) {
        const char *v = (const char *) sqlite3_column_text(st, i);
        return v ? xstrdup(v) : NULL;
}

static void utpl_from_row(sqlite3_stmt *st, struct user_template *t) {
        *t = (struct user_template) { 0 };
        snprintf(t->id, sizeof(t->id), "%s", (const char *) sqlite3_column_text(st, 0) ?: "");
        snprintf(t->account_id, sizeof(t->account_id), "%s", (const char *) sqlite3_column_text(st, 1) ?: "");
        t->name = col_dup(st, 2);
        t->status = col_dup(st, 3);
        t->image = col_dup(st, 4);
        t->size_bytes = sqlite3_column_int64(st, 5);
        t->log = col_dup(st, 6);
        t->error = col_dup(st, 7);
        t->builder_id = col_dup(st, 8);
        t->created_at = sqlite3_column_int64(st, 9);
        t->finished_at = sqlite3_column_int64(st, 10);
}

int store_utpl_insert_capped(struct store *s, const struct user_template *t, int64_t max_per_account) {
        LOCKED(s);
        int64_t n = 0;
        int r;
        if ((r = exec_sql(s, "BEGIN IMMEDIATE")) < 0)
                return r;
        if ((r = query_int(s, "SELECT COUNT(*) FROM user_templates WHERE account_id = ?", PARAMS(p_text(t->account_id)), &n)) < 0)
                goto rollback;
        if (n >= max_per_account) {
                r = -EDQUOT;
                goto rollback;
        }
        if ((r = run(s, "INSERT INTO user_templates (" UTPL_COLS ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     PARAMS(p_text(t->id), p_text(t->account_id), p_text(t->name), p_text(t->status), p_text(t->image),
                            p_opt(t->size_bytes), p_text(t->log), p_text(t->error), p_text(t->builder_id), p_int(t->created_at),
                            p_opt(t->finished_at)))) < 0)
                goto rollback;      /* -EEXIST: the account has one of that name */
        return exec_sql(s, "COMMIT");
rollback:
        (void) exec_sql(s, "ROLLBACK");
        return r;
}

int store_utpl_get(struct store *s, const char *account_id, const char *name, struct user_template *ret) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, "SELECT " UTPL_COLS " FROM user_templates WHERE account_id = ? AND name = ?",
                      PARAMS(p_text(account_id), p_text(name)), &st);
        if (r <= 0)
                return r ?: -ENOENT;
        utpl_from_row(st, ret);
        return 0;
}

int store_utpl_get_id(struct store *s, const char *id, struct user_template *ret) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = query(s, "SELECT " UTPL_COLS " FROM user_templates WHERE id = ?", PARAMS(p_text(id)), &st);
        if (r <= 0)
                return r ?: -ENOENT;
        utpl_from_row(st, ret);
        return 0;
}

int store_utpl_list(struct store *s, const char *account_id, struct user_template **ret, size_t *ret_n) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = stmt_new(s, "SELECT " UTPL_COLS " FROM user_templates WHERE account_id = ? ORDER BY name LIMIT 1000",
                         PARAMS(p_text(account_id)), &st);
        if (r < 0)
                return r;
        size_t n = 0, cap = 8;
        struct user_template *v = xnew0(struct user_template, cap);
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                if (n == cap)
                        v = xrealloc(v, (cap *= 2) * sizeof(*v));
                utpl_from_row(st, &v[n++]);
        }
        if (r != SQLITE_DONE) {
                for (size_t i = 0; i < n; i++)
                        user_template_clear(&v[i]);
                free(v);
                return sqlite_to_errno(r) ?: -EIO;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

int store_utpl_update(struct store *s, const struct user_template *t) {
        LOCKED(s);
        int r = run_changes(s, "UPDATE user_templates SET status = ?, image = ?, size_bytes = ?, log = ?, error = ?,"
                               " builder_id = ?, finished_at = ? WHERE id = ?",
                            PARAMS(p_text(t->status), p_text(t->image), p_opt(t->size_bytes), p_text(t->log), p_text(t->error),
                                   p_text(t->builder_id), p_opt(t->finished_at), p_text(t->id)));
        return r == 0 ? -ENOENT : r < 0 ? r : 0;
}

int store_utpl_delete(struct store *s, const char *id) {
        LOCKED(s);
        int r = run_changes(s, "DELETE FROM user_templates WHERE id = ?", PARAMS(p_text(id)));
        return r == 0 ? -ENOENT : r < 0 ? r : 0;
}

int store_utpl_interrupted(struct store *s, int64_t now_ms, char ***ret_builder_ids) {
        LOCKED(s);
        _cleanup_stmt_ sqlite3_stmt *st = NULL;
        int r = stmt_new(s, "SELECT builder_id FROM user_templates WHERE status = 'building' AND builder_id IS NOT NULL",
                         NO_PARAMS, &st);
        if (r < 0)
                return r;
        _cleanup_strv_free_ char **ids = xnew0(char *, 1);
        size_t n = 0;
        while ((r = sqlite3_step(st)) == SQLITE_ROW) {
                ids = xrealloc(ids, (n + 2) * sizeof(*ids));
                ids[n++] = col_dup(st, 0);
                ids[n] = NULL;
        }
        if (r != SQLITE_DONE)
                return sqlite_to_errno(r) ?: -EIO;
        if ((r = run(s, "UPDATE user_templates SET status = 'failed', finished_at = ?,"
                        " error = 'controld stopped during the build; build it again' WHERE status = 'building'",
                     PARAMS(p_int(now_ms)))) < 0)
                return r;
        *ret_builder_ids = TAKE_PTR(ids);
        return 0;
}
