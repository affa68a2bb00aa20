/* store-sandbox.c — sandboxes and what hangs off one: volumes, warm pool members,
 * the last egress apply, stats samples, preview URLs.
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

/* ---- sandboxes ---- */

void sandbox_clear(struct sandbox *s) {
        if (!s)
                return;
        free_many(s->name, s->template_name, s->image, s->region_key, s->team, s->project_environment,
                  s->destroy_timeout, s->volume_id, s->mount_path, s->from_snapshot, s->snapshot_mode,
                  s->snapshot_frequency, s->destroy_reason, s->failure_reason, s->driver, s->job_id, s->alloc_id,
                  s->node_id, s->container_id, s->ip);
        sb_egress_done(&s->egress);
        sb_map_done(&s->metadata);
        sb_map_done(&s->env);
        sb_e2b_done(&s->e2b);
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
static void sb_metadata_read(sqlite3_stmt *st, int i, void *row) {
        (void) sb_map_from_text(&((struct sandbox *) row)->metadata, (const char *) sqlite3_column_text(st, i));
}
static void sb_metadata_bind(sqlite3_stmt *st, int i, const void *row) {
        _cleanup_free_ char *t = sb_map_to_text(&((const struct sandbox *) row)->metadata);
        bind_param(st, i, p_text(t));
}
static void sb_env_read(sqlite3_stmt *st, int i, void *row) {
        (void) sb_map_from_text(&((struct sandbox *) row)->env, (const char *) sqlite3_column_text(st, i));
}
static void sb_env_bind(sqlite3_stmt *st, int i, const void *row) {
        _cleanup_free_ char *t = sb_map_to_text(&((const struct sandbox *) row)->env);
        bind_param(st, i, p_text(t));
}
static void sb_e2b_read(sqlite3_stmt *st, int i, void *row) {
        (void) sb_e2b_from_text(&((struct sandbox *) row)->e2b, (const char *) sqlite3_column_text(st, i));
}
static void sb_e2b_bind(sqlite3_stmt *st, int i, const void *row) {
        _cleanup_free_ char *t = sb_e2b_to_text(&((const struct sandbox *) row)->e2b);
        bind_param(st, i, p_text(t));
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
        C_CUSTOM("metadata", sb_metadata), C_CUSTOM("env", sb_env), C_CUSTOM("e2b", sb_e2b),
        C_BOOL("pause_at_end", pause_at_end), C_BOOL("pause_keep_memory", pause_keep_memory), C_INT("run_s", run_s),
        C_BOOL("auto_resume", auto_resume),
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
                           /* paused at their end, they stay so past it: not listed again every pass */
                           " AND NOT (pause_at_end = 1 AND status IN ('pausing','paused','resuming'))"
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

int store_volume_get_named(struct store *s, const char *account_id, const char *name, struct volume *ret) {
        LOCKED(s);
        return get_row(s, &volumes, "name = ? AND account_id = ?", PARAMS(p_text(name), p_text(account_id)), ret);
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
        stmt_release(TAKE_PTR(st));
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

/* ---- stats samples ---- */

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
