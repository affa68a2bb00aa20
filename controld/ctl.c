/* ctl.c — services every part of controld shares: the per-sandbox locks, status-change
 * notification and waiting on it (/wait, pause, resume), detached job threads, and loading
 * a record an account owns (not found = 404 for anyone else's). */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "log.h"
#include "strutil.h"

/* One sandbox id's lock: there while it is held or waited for (the list is as long as the
 * threads that lock, never longer). It used to be 64 stripes by hash, and one tenant's slow
 * create held every sandbox of its stripe, other tenants' destroys and pauses included. */
struct sb_lock_entry {
        struct sb_lock_entry *next;
        char id[SANDBOX_ID_LEN + 1];
        bool held;
        int waiters;
        pthread_cond_t cv;
};

static struct sb_lock_entry *lock_find(struct ctl *c, const char *id) {
        for (struct sb_lock_entry *e = c->sb_locks; e; e = e->next)
                if (!strcmp(e->id, id))
                        return e;
        return NULL;
}

void ctl_sandbox_lock(struct ctl *c, const char *id) {
        pthread_mutex_lock(&c->sb_lock_mu);
        struct sb_lock_entry *e = lock_find(c, id);
        if (!e) {
                e = xnew0(struct sb_lock_entry, 1);
                strscpy(e->id, id, sizeof(e->id));
                pthread_cond_init(&e->cv, NULL);
                e->next = c->sb_locks;
                c->sb_locks = e;
        }
        e->waiters++;
        while (e->held)
                pthread_cond_wait(&e->cv, &c->sb_lock_mu);
        e->waiters--;
        e->held = true;
        pthread_mutex_unlock(&c->sb_lock_mu);
}

void ctl_sandbox_unlock(struct ctl *c, const char *id) {
        pthread_mutex_lock(&c->sb_lock_mu);
        struct sb_lock_entry **pp = &c->sb_locks;
        while (*pp && strcmp((*pp)->id, id) != 0)
                pp = &(*pp)->next;
        struct sb_lock_entry *e = *pp;
        if (e) {
                e->held = false;
                if (e->waiters > 0)
                        pthread_cond_signal(&e->cv);
                else {
                        *pp = e->next;
                        pthread_cond_destroy(&e->cv);
                        free(e);
                }
        }
        pthread_mutex_unlock(&c->sb_lock_mu);
}

struct sandbox_lock sandbox_lock_take(struct ctl *c, const char *id) {
        struct sandbox_lock l = { .c = c };
        snprintf(l.id, sizeof(l.id), "%s", id);
        ctl_sandbox_lock(c, l.id);
        return l;
}

void sandbox_lock_release(struct sandbox_lock *l) {
        if (!l->c)
                return;
        ctl_sandbox_unlock(l->c, l->id);
        l->c = NULL;
}

void ctl_notify_status(struct ctl *c) {
        pthread_mutex_lock(&c->wait_lock);
        c->status_gen++;
        pthread_cond_broadcast(&c->wait_cond);
        pthread_mutex_unlock(&c->wait_lock);
}

int ctl_wait_sandbox(struct ctl *c, const char *id, bool (*done)(const struct sandbox *sb, const void *ud),
                     const void *ud, int64_t timeout_ms, struct sandbox *sb) {
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += timeout_ms / 1000;
        deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&c->wait_lock);
        for (;;) {
                /* Read under the lock: a change recorded after this read bumps status_gen, so
                 * no notification falls between the read and the wait. */
                uint64_t gen = c->status_gen;
                sandbox_clear(sb);
                if (store_sandbox_get(c->store, id, sb) < 0) {
                        pthread_mutex_unlock(&c->wait_lock);
                        return -EIO;
                }
                if (done(sb, ud)) {
                        pthread_mutex_unlock(&c->wait_lock);
                        return 1;
                }
                int rc = 0;
                while (gen == c->status_gen && rc == 0 && !c->stopping)
                        rc = pthread_cond_timedwait(&c->wait_cond, &c->wait_lock, &deadline);
                if (rc == ETIMEDOUT || c->stopping)
                        break;
        }
        /* The last read may predate the last change: one more look before saying no. */
        sandbox_clear(sb);
        int r = store_sandbox_get(c->store, id, sb);
        pthread_mutex_unlock(&c->wait_lock);
        if (r < 0)
                return -EIO;
        return done(sb, ud) ? 1 : 0;
}

struct job { struct ctl *c; void (*fn)(struct ctl *c, void *arg); void *arg; };

static void *job_thread(void *p) {
        struct job *j = p;
        j->fn(j->c, j->arg);
        log_ctx_reset();
        pthread_mutex_lock(&j->c->jobs_lock);
        j->c->jobs_running--;
        pthread_cond_broadcast(&j->c->jobs_cond);
        pthread_mutex_unlock(&j->c->jobs_lock);
        free(j->arg);
        free(j);
        return NULL;
}

int ctl_spawn_job(struct ctl *c, void (*fn)(struct ctl *c, void *arg), void *arg) {
        struct job *j = xnew0(struct job, 1);
        pthread_t t;
        pthread_attr_t at;
        *j = (struct job) { c, fn, arg };
        pthread_mutex_lock(&c->jobs_lock);
        if (c->stopping) {
                pthread_mutex_unlock(&c->jobs_lock);
                free(arg);
                free(j);
                return -ESHUTDOWN;
        }
        c->jobs_running++;
        pthread_mutex_unlock(&c->jobs_lock);
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int r = pthread_create(&t, &at, job_thread, j);
        pthread_attr_destroy(&at);
        if (r != 0) {
                pthread_mutex_lock(&c->jobs_lock);
                c->jobs_running--;
                pthread_mutex_unlock(&c->jobs_lock);
                free(arg);
                free(j);
                return -r;
        }
        return 0;
}

void ctl_init(struct ctl *c) {
        memset(c, 0, sizeof(*c));
        pthread_mutex_init(&c->wait_lock, NULL);
        cond_init_monotonic(&c->wait_cond);
        pthread_mutex_init(&c->sb_lock_mu, NULL);
        pthread_mutex_init(&c->jobs_lock, NULL);
        pthread_cond_init(&c->jobs_cond, NULL);
}

/* ---- an account's own records, with the errors a user should see ---- */

int record_load_result(int r, const char *what, struct err *err) {
        if (r == -ENOENT)
                return err_set(err, -ENOENT, "%c%s not found", toupper((unsigned char) what[0]), what + 1);
        return r < 0 ? err_set(err, -EIO, "Failed to read the %s record", what) : 0;
}

int sandbox_load(struct ctl *c, const struct account *acc, const char *id, struct sandbox *ret, struct err *err) {
        if (!hexid_valid(id))
                return err_set(err, -EINVAL, "Invalid sandbox id");
        return record_load_result(store_sandbox_get_owned(c->store, acc->id, id, ret), "sandbox", err);
}

int ctl_backend_ping(struct ctl *c, const char **ret_driver) {
        *ret_driver = c->drv ? c->drv->name : NULL;
        return c->drv && c->drv->ops->ping ? c->drv->ops->ping(c->drv) : -ENODEV;
}
