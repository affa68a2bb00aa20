/* sbcount.c — see sbcount.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbcount.h"
#include "strutil.h"

void sb_counts_init(struct sb_counts *t, size_t cap) {
        pthread_mutex_lock(&t->lock);
        if (!t->v) {
                t->v = xnew0(struct sb_count_slot, cap);
                t->cap = cap;
        }
        pthread_mutex_unlock(&t->lock);
}

void sb_counts_done(struct sb_counts *t) {
        pthread_mutex_lock(&t->lock);
        free(t->v);
        t->v = NULL;
        t->cap = 0;
        pthread_mutex_unlock(&t->lock);
}

/* id's slot, or (make_it) a free one given to id; NULL when none. Called locked. */
static struct sb_count_slot *slot_of(struct sb_counts *t, const char *id, bool make_it) {
        struct sb_count_slot *free_slot = NULL;
        for (size_t i = 0; i < t->cap; i++) {
                if (t->v[i].n > 0 && !strcmp(t->v[i].id, id))
                        return &t->v[i];
                if (t->v[i].n == 0 && !free_slot)
                        free_slot = &t->v[i];
        }
        if (make_it && free_slot)
                snprintf(free_slot->id, sizeof(free_slot->id), "%s", id);
        return make_it ? free_slot : NULL;
}

bool sb_counts_take(struct sb_counts *t, const char *id, int64_t max) {
        pthread_mutex_lock(&t->lock);
        struct sb_count_slot *s = slot_of(t, id, true);
        bool ok = s && s->n < max;
        if (ok)
                s->n++;
        pthread_mutex_unlock(&t->lock);
        return ok;
}

void sb_counts_give(struct sb_counts *t, const char *id) {
        pthread_mutex_lock(&t->lock);
        struct sb_count_slot *s = slot_of(t, id, false);
        if (s)
                s->n--;
        pthread_mutex_unlock(&t->lock);
}
