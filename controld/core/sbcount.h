/* sbcount.h — how many of something each sandbox holds at once (preview connections,
 * terminals), with a bound per sandbox; thread-safe. A table of cap sandboxes: when every
 * slot is held by another sandbox, take fails as it does at the bound. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

struct sb_count_slot {
        char id[SANDBOX_ID_LEN + 1];
        int64_t n;
};

struct sb_counts {
        pthread_mutex_t lock;
        struct sb_count_slot *v;
        size_t cap;
};

#define SB_COUNTS_INIT { .lock = PTHREAD_MUTEX_INITIALIZER }

/* Allocates room for cap sandboxes (idempotent). */
void sb_counts_init(struct sb_counts *t, size_t cap);
void sb_counts_done(struct sb_counts *t);
/* One more for id unless it holds max already (or no slot is left): true when taken. */
bool sb_counts_take(struct sb_counts *t, const char *id, int64_t max);
/* One fewer for id. */
void sb_counts_give(struct sb_counts *t, const char *id);
