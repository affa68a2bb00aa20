/* store-private.h — what the store's files share, and nothing outside them includes.
 *
 * store.c is the engine (open, migrations, the statement helpers and the row mapper below);
 * each record family is a file of its own (store-account.c, store-sandbox.c, store-image.c)
 * that speaks SQL only through these. The public store_* prototypes stay in controld.h.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sqlite3.h>

#include "cleanup.h"
#include "controld.h"

struct store {
        sqlite3 *db;
        pthread_mutex_t lock;
};

/* Gives a statement of prepare()/stmt_new() back: one from the statement cache is reset for
 * its next use, any other finalized. Called with the store lock held. finalizep: the same
 * for a cleanup variable (NULL is fine). */
void stmt_release(sqlite3_stmt *st);
void finalizep(sqlite3_stmt **st);
#define _cleanup_stmt_ _cleanup_(finalizep)

static inline void unlockp(struct store **s) {
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

static inline struct param p_text(const char *v) {
        return (struct param) { .type = v ? PARAM_TEXT : PARAM_NULL, .text = v };
}
static inline struct param p_int(int64_t v) {
        return (struct param) { .type = PARAM_INT, .i = v };
}
static inline struct param p_real(double v) {
        return (struct param) { .type = PARAM_REAL, .d = v };
}
static inline struct param p_null(void) {
        return (struct param) { .type = PARAM_NULL };
}
/* 0 as NULL: times and sizes where 0 means "not set". */
static inline struct param p_opt(int64_t v) {
        return v ? p_int(v) : p_null();
}
#define PARAMS(...) (const struct param[]) { __VA_ARGS__ }, ELEMENTSOF(((const struct param[]) { __VA_ARGS__ }))
#define NO_PARAMS NULL, 0

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

/* store.c: the statement helpers (each expects the store lock held) and the row mapper;
 * their contracts are at their definitions. */
int sqlite_to_errno(int rc);
int exec_sql(struct store *s, const char *sql);
int prepare(struct store *s, const char *sql, sqlite3_stmt **ret);
void bind_param(sqlite3_stmt *st, int i, struct param p);
int stmt_new(struct store *s, const char *sql, const struct param *p, size_t n, sqlite3_stmt **ret);
int run_changes(struct store *s, const char *sql, const struct param *p, size_t n);
int run(struct store *s, const char *sql, const struct param *p, size_t n);
int query(struct store *s, const char *sql, const struct param *p, size_t n, sqlite3_stmt **ret);
int query_int(struct store *s, const char *sql, const struct param *p, size_t n, int64_t *ret);
int unchanged(struct store *s, const char *exists_sql, const char *id, int present);
char *col_text(sqlite3_stmt *st, int i);
int get_row(struct store *s, const struct table *t, const char *where, const struct param *p, size_t n, void *ret);
int select_rows(struct store *s, const struct table *t, const char *tail, const struct param *p, size_t n,
                void *ret_rows, size_t *ret_n);
int select_page(struct store *s, const struct table *t, const char *where, const struct param *p, size_t n,
                int64_t offset, int64_t limit, void *ret_rows, size_t *ret_n, int64_t *ret_total);
int insert_row(struct store *s, const struct table *t, const void *row);
int update_row(struct store *s, const struct table *t, const void *row, const char *where, const struct param *p,
               size_t n);
int insert_capped(struct store *s, const struct table *t, const void *row, const char *count_sql,
                  const char *account_id, int64_t max);
