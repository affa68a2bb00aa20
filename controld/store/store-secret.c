/* store-secret.c — secrets: one row per (account, name), the value sealed (secret.c seals and
 * opens it; the store never sees a plaintext), versioned by every PUT.
 *
 * Part of controld's store (store.c: the engine; store-private.h: the row mapper). Returns 0 /
 * -errno; -ENOENT when a row is missing. Never logs above debug. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "store-private.h"
#include "strutil.h"

void secret_clear(struct secret *s) {
        if (!s)
                return;
        free_many(s->name, s->sealed);
        sb_map_done(&s->metadata);
        *s = (struct secret) { 0 };
}

DEFINE_RECORD_FREE(secret)

static void sec_metadata_read(sqlite3_stmt *st, int i, void *row) {
        (void) sb_map_from_text(&((struct secret *) row)->metadata, (const char *) sqlite3_column_text(st, i));
}
static void sec_metadata_bind(sqlite3_stmt *st, int i, const void *row) {
        _cleanup_free_ char *t = sb_map_to_text(&((const struct secret *) row)->metadata);
        bind_param(st, i, p_text(t));
}

#define ROW struct secret
static const struct column secret_columns[] = {
        C_ID("id", id),           C_ID("account_id", account_id), C_TEXT("name", name),
        C_INT("version", version), C_TEXT("sealed", sealed),     C_CUSTOM("metadata", sec_metadata),
        C_INT("created_at", created_at), C_INT("updated_at", updated_at),
};
#undef ROW
static const struct table secrets = {
        "secrets", secret_columns, ELEMENTSOF(secret_columns), sizeof(struct secret), secret_clear_row,
};

int store_secret_insert_capped(struct store *s, const struct secret *sec, int64_t max_per_account) {
        LOCKED(s);
        return insert_capped(s, &secrets, sec, "SELECT COUNT(*) FROM secrets WHERE account_id = ?", sec->account_id,
                             max_per_account);
}

int store_secret_get(struct store *s, const char *account_id, const char *name, struct secret *ret) {
        LOCKED(s);
        return get_row(s, &secrets, "account_id = ? AND name = ?", PARAMS(p_text(account_id), p_text(name)), ret);
}

int store_secret_get_id(struct store *s, const char *account_id, const char *id, struct secret *ret) {
        LOCKED(s);
        return get_row(s, &secrets, "account_id = ? AND id = ?", PARAMS(p_text(account_id), p_text(id)), ret);
}

int store_secret_list(struct store *s, const char *account_id, struct secret **ret, size_t *ret_n) {
        LOCKED(s);
        return select_rows(s, &secrets, "WHERE account_id = ? ORDER BY name LIMIT 10000", PARAMS(p_text(account_id)), ret,
                           ret_n);
}

int store_secret_update(struct store *s, const struct secret *sec, int64_t expected_version) {
        LOCKED(s);
        int r = update_row(s, &secrets, sec, "id = ? AND version = ?", PARAMS(p_text(sec->id), p_int(expected_version)));
        return r == 0 ? -ESTALE : r < 0 ? r : 0;
}

int store_secret_delete(struct store *s, const char *account_id, const char *name) {
        LOCKED(s);
        int r = run_changes(s, "DELETE FROM secrets WHERE account_id = ? AND name = ?", PARAMS(p_text(account_id), p_text(name)));
        return r == 0 ? -ENOENT : r < 0 ? r : 0;
}
