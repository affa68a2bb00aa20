/* store-image.c — images: snapshots of sandboxes and templates users build.
 *
 * Part of controld's store (store.c: the engine, and why; store-private.h: the row mapper
 * and the statement helpers every family goes through). Returns 0 / -errno; -ENOENT when a
 * row is missing. Never logs above debug.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "controld.h"
#include "log.h"
#include "pj_node.h"
#include "store-private.h"
#include "strutil.h"

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

int store_snapshot_list_orphaned_pause(struct store *s, const char *name, int64_t max, struct snapshot **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &snapshots, "WHERE name = ?1 AND status != 'creating' AND sandbox_id IN"
                                          " (SELECT id FROM sandboxes WHERE status IN ('destroyed', 'failed'))"
                                          " ORDER BY created_at LIMIT ?2",
                           PARAMS(p_text(name), p_int(max)), ret, ret_n);
}

int store_snapshot_list_auto(struct store *s, const char *sandbox_id, struct snapshot **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &snapshots, "WHERE sandbox_id = ? AND automatic = 1 AND status != 'creating'"
                                          " ORDER BY created_at DESC, id DESC",
                           PARAMS(p_text(sandbox_id)), ret, ret_n);
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
