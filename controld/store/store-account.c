/* store-account.c — accounts, their API keys and their usage.
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

/* ---- accounts and keys ---- */

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


/* ---- usage ---- */

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
