/* names.c — allowlisted hostnames: resolved in the (unprivileged) agent, bounded,
 * and kept fresh (contract in nodeagent.h, under "names.c").
 *
 * A lookup runs on a thread of its own under a deadline, so a resolver that never
 * answers costs at most resolve_timeout, never the agent: getaddrinfo() cannot be
 * cancelled, so a lookup that overruns is abandoned (it frees its own state when it
 * finally returns). Outstanding lookups are budgeted per sandbox, per account and per node
 * (budget_take), so a tenant's names that never answer fail only that tenant. All names of one
 * policy are looked up at once under one deadline. The consumer does not wait for
 * them: it starts them (names_apply_start), goes on consuming, and polls
 * names_apply_ready; the refresher, which has nothing else to do, waits.
 *
 * Every restricted policy with hostnames that the egress child confirmed is
 * remembered here; a refresher thread resolves its names again every
 * resolve_interval and, when the answers changed, sends the egress child the
 * policy with the new addresses: one nft batch that flushes and refills the
 * sandbox's set, so the allowance moves atomically (and egress_apply ends the
 * connections to addresses that left). A name that stops resolving keeps its
 * last confirmed addresses: a resolver outage must not cut sandboxes off, and
 * nothing that was not allowed before becomes allowed. An apply from controld
 * for the same sandbox meanwhile wins: the refresher re-checks a generation
 * number under the apply lock before it sends anything.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "fault.h"
#include "json.h"
#include "log.h"
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"
#include "ticker.h"

/* Lookups that may still be running, abandoned ones (past their deadline) included, are
 * budgeted three ways, so that one tenant's names that never answer fail only that tenant:
 * per sandbox one full allowlist's worth, per account two, per node LOOKUPS_MAX. */
#define LOOKUPS_MAX 192           /* threads: under the unit's TasksMax=256 with room for the rest */
#define LOOKUPS_PER_SANDBOX PJ_EGRESS_MAX_ALLOW
#define LOOKUPS_PER_ACCOUNT (2 * PJ_EGRESS_MAX_ALLOW)

static atomic_int lookups_running;

/* Running lookups per owner (a sandbox or an account id): at most LOOKUPS_MAX owners of each
 * kind can hold one, so the tables are bounded by the node's budget. */
struct owner_count {
        char id[EGRESS_ID_LEN + 1];
        int n;
};
static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static struct owner_count by_sandbox[LOOKUPS_MAX], by_account[LOOKUPS_MAX];
static size_t n_by_sandbox, n_by_account;

static struct owner_count *owner_find(struct owner_count *t, size_t n, const char *id) {
        for (size_t i = 0; i < n; i++)
                if (!strcmp(t[i].id, id))
                        return &t[i];
        return NULL;
}

/* Under budget_lock: one more lookup for id (the caller checked its budget). */
static void owner_add(struct owner_count *t, size_t *n, const char *id) {
        struct owner_count *o = owner_find(t, *n, id);
        if (!o) {
                o = &t[(*n)++];         /* room: fewer owners than running lookups < LOOKUPS_MAX */
                strscpy(o->id, id, sizeof(o->id));
                o->n = 0;
        }
        o->n++;
}

static void owner_sub(struct owner_count *t, size_t *n, const char *id) {
        struct owner_count *o = owner_find(t, *n, id);
        if (o && --o->n <= 0)
                *o = t[--(*n)];
}

static int owner_n(struct owner_count *t, size_t n, const char *id) {
        struct owner_count *o = owner_find(t, n, id);
        return o ? o->n : 0;
}

/* Takes a place for one lookup of sandbox (account may be ""): 0, or -EBUSY / -EDQUOT with
 * the reason in err. */
static int budget_take(const char *sandbox, const char *account, struct err *err) {
        int r = 0;
        pthread_mutex_lock(&budget_lock);
        if (atomic_load(&lookups_running) >= LOOKUPS_MAX) {
                r = err_set(err, -EBUSY, "the node has %d hostname lookups outstanding, its limit", LOOKUPS_MAX);
        } else if (owner_n(by_sandbox, n_by_sandbox, sandbox) >= LOOKUPS_PER_SANDBOX) {
                r = err_set(err, -EDQUOT,
                            "this sandbox already has %d hostname lookups outstanding (names whose nameserver did not "
                            "answer in time); try again when they end",
                            LOOKUPS_PER_SANDBOX);
        } else if (*account && owner_n(by_account, n_by_account, account) >= LOOKUPS_PER_ACCOUNT) {
                r = err_set(err, -EDQUOT,
                            "this account's sandboxes already have %d hostname lookups outstanding on this node (names "
                            "whose nameserver did not answer in time); try again when they end",
                            LOOKUPS_PER_ACCOUNT);
        } else {
                atomic_fetch_add(&lookups_running, 1);
                owner_add(by_sandbox, &n_by_sandbox, sandbox);
                if (*account)
                        owner_add(by_account, &n_by_account, account);
        }
        pthread_mutex_unlock(&budget_lock);
        return r;
}

static void budget_give(const char *sandbox, const char *account) {
        pthread_mutex_lock(&budget_lock);
        atomic_fetch_sub(&lookups_running, 1);
        owner_sub(by_sandbox, &n_by_sandbox, sandbox);
        if (*account)
                owner_sub(by_account, &n_by_account, account);
        pthread_mutex_unlock(&budget_lock);
}

struct lookup {
        pthread_mutex_t mu;
        pthread_cond_t cv;
        int refs;               /* the thread and the waiter */
        bool done;
        char host[PJ_ALLOW_NORM_MAX];
        char sandbox[EGRESS_ID_LEN + 1], account[EGRESS_ID_LEN + 1];   /* whose budget it counts against */
        int gai;                /* getaddrinfo() result */
        uint32_t addrs[NAMES_MAX_ADDRS_PER_NAME + 1];
        size_t n;               /* distinct addresses, at most one past the cap */
};

static void lookup_unref(struct lookup *l) {
        pthread_mutex_lock(&l->mu);
        bool last = --l->refs == 0;
        pthread_mutex_unlock(&l->mu);
        if (!last)
                return;
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        free(l);
}

static void *lookup_main(void *ud) {
        struct lookup *l = ud;
        struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res = NULL;
        int g = getaddrinfo(l->host, NULL, &hints, &res);
        pthread_mutex_lock(&l->mu);
        l->gai = g;
        for (struct addrinfo *a = g == 0 ? res : NULL; a && l->n <= NAMES_MAX_ADDRS_PER_NAME; a = a->ai_next) {
                uint32_t ad = ntohl(((struct sockaddr_in *) a->ai_addr)->sin_addr.s_addr);
                bool dup = false;
                for (size_t k = 0; k < l->n; k++)
                        dup = dup || l->addrs[k] == ad;
                if (!dup)
                        l->addrs[l->n++] = ad;
        }
        l->done = true;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        if (res)
                freeaddrinfo(res);
        budget_give(l->sandbox, l->account);
        lookup_unref(l);
        return NULL;
}

static int lookup_start(const char *host, const char *sandbox, const char *account, struct lookup **ret, struct err *err) {
        int r = budget_take(sandbox, account, err);
        if (r < 0)
                return r;
        struct lookup *l = xnew0(struct lookup, 1);
        pthread_mutex_init(&l->mu, NULL);
        cond_init_monotonic(&l->cv);
        l->refs = 2;
        strscpy(l->host, host, sizeof(l->host));
        strscpy(l->sandbox, sandbox, sizeof(l->sandbox));
        strscpy(l->account, account, sizeof(l->account));
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&at, 256 * 1024);
        pthread_t t;
        r = thread_create_nosig(&t, &at, lookup_main, l);
        pthread_attr_destroy(&at);
        if (r < 0) {
                err_set(err, r, "%s", strerror(-r));
                budget_give(sandbox, account);
                pthread_mutex_destroy(&l->mu);
                pthread_cond_destroy(&l->cv);
                free(l);
                return r;
        }
        *ret = l;
        return 0;
}

/* Waits for l until deadline (CLOCK_MONOTONIC ms); 0 when it finished, -ETIMEDOUT. */
static int lookup_wait(struct lookup *l, int64_t deadline) {
        struct timespec ts = { .tv_sec = deadline / 1000, .tv_nsec = (deadline % 1000) * 1000000 };
        pthread_mutex_lock(&l->mu);
        while (!l->done)
                if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT)
                        break;
        bool done = l->done;
        pthread_mutex_unlock(&l->mu);
        return done ? 0 : -ETIMEDOUT;
}

static int64_t wall_ms(void) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int timeout_ms = NAMES_TIMEOUT_DEFAULT_MS, interval_ms = NAMES_INTERVAL_DEFAULT_MS;

/* Appends one entry to the request, bounded: over EGRESS_MAX_ALLOW -> -E2BIG. */
static int allow_append(struct ps_egress_apply *req, uint32_t addr, int prefix, const char *entry, struct err *err) {
        if (req->n_allow >= EGRESS_MAX_ALLOW)
                return err_set(err, -E2BIG, "the allowlist expands to more than %d addresses (at %s); nothing was changed",
                               EGRESS_MAX_ALLOW, entry);
        req->allow[req->n_allow++] = (struct ps_allow) { .addr = addr, .prefix = (uint8_t) prefix };
        return 0;
}

/* One policy's names being looked up (names_apply_start). Owned by whoever holds the
 * pointer; the lookups it started are shared with their threads (refcounted). */
struct names_apply {
        char sandbox_id[EGRESS_ID_LEN + 1];
        char account[EGRESS_ID_LEN + 1];
        uint32_t ip;
        uint32_t pid;                   /* a process in the sandbox's netns (its port is bound), or 0 */
        struct pj_egress pol;           /* a copy: the caller's message may be gone by the finish */
        struct pj_allow_entry *e;       /* pol.allow parsed, one per entry */
        struct lookup **lk;             /* one per hostname entry, NULL for literals */
        size_t n;
        struct lookup **rk;             /* one per rule host (pol.rules): its addresses go to the proxy */
        int64_t deadline;               /* CLOCK_MONOTONIC ms: every lookup's bound */
};

struct names_apply *names_apply_free(struct names_apply *a) {
        if (!a)
                return NULL;
        /* A lookup still running is abandoned: it frees its own state when getaddrinfo returns. */
        for (size_t i = 0; i < a->n; i++)
                if (a->lk[i])
                        lookup_unref(a->lk[i]);
        for (size_t i = 0; i < a->pol.n_rules; i++)
                if (a->rk[i])
                        lookup_unref(a->rk[i]);
        free(a->rk);
        free(a->lk);
        free(a->e);
        pj_egress_rules_wipe(&a->pol);     /* the rules' values are secrets */
        pj_egress_done(&a->pol);
        free(a);
        return NULL;
}

int names_apply_start(const char *sandbox_id, const char *account, uint32_t ip, uint32_t pid, const struct pj_egress *pol,
                      struct names_apply **ret, struct err *err) {
        if (!account)
                account = "";
        /* Rules need the proxy: said at once, before any name is looked up. */
        if (pol->n_rules && pol->mode != PJ_EGRESS_DENY_ALL && privsep_child_pid(PS_CHILD_PROXY) <= 0)
                return err_set(err, -EOPNOTSUPP, "the sandbox has egress rules, and this node runs no egress proxy "
                                                 "([proxy] enable)");
        struct names_apply *a = xnew0(struct names_apply, 1);
        strscpy(a->sandbox_id, sandbox_id, sizeof(a->sandbox_id));
        strscpy(a->account, account, sizeof(a->account));
        a->ip = ip;
        a->pid = pid;
        pj_egress_copy(&a->pol, pol);
        a->n = pol->mode == PJ_EGRESS_RESTRICTED ? pol->n_allow : 0;
        a->e = xnew0(struct pj_allow_entry, a->n ? a->n : 1);
        a->lk = xnew0(struct lookup *, a->n ? a->n : 1);
        int r = 0;
        for (size_t i = 0; i < a->n; i++) {
                struct err why = { 0 };
                if (pj_allow_entry_parse(a->pol.allow[i], &a->e[i], NULL, 0, &why) < 0) {
                        r = err_set(err, -EINVAL, "allow entry %s %s", a->pol.allow[i], why.message);
                        break;
                }
        }
        /* Every name at once, under one deadline. */
        for (size_t i = 0; r == 0 && i < a->n; i++) {
                struct err why = { 0 };
                if (a->e[i].kind == PJ_ALLOW_HOSTNAME &&
                    (r = lookup_start(a->e[i].host, sandbox_id, account, &a->lk[i], &why)) < 0)
                        err_set(err, r, "cannot resolve %s now: %s", a->e[i].host, why.message);
        }
        a->rk = xnew0(struct lookup *, a->pol.n_rules ? a->pol.n_rules : 1);
        for (size_t i = 0; r == 0 && i < a->pol.n_rules; i++) {
                struct err why = { 0 };
                /* A rule host that is an allowlist entry too (ours: the rules' hosts are) shares
                 * that lookup: one query, one share of the budget. */
                for (size_t j = 0; j < a->n && !a->rk[i]; j++)
                        if (a->lk[j] && !strcmp(a->e[j].host, a->pol.rules[i].host)) {
                                pthread_mutex_lock(&a->lk[j]->mu);
                                a->lk[j]->refs++;
                                pthread_mutex_unlock(&a->lk[j]->mu);
                                a->rk[i] = a->lk[j];
                        }
                if (!a->rk[i] && (r = lookup_start(a->pol.rules[i].host, sandbox_id, account, &a->rk[i], &why)) < 0)
                        err_set(err, r, "cannot resolve %s (it has egress rules) now: %s", a->pol.rules[i].host, why.message);
        }
        a->deadline = mono_ms() + timeout_ms;
        if (r < 0) {
                names_apply_free(a);
                return r;
        }
        *ret = a;
        return 0;
}

bool names_apply_ready(const struct names_apply *a) {
        if (mono_ms() >= a->deadline)
                return true;
        for (size_t i = 0; i < a->pol.n_rules; i++) {
                if (!a->rk[i])
                        continue;
                pthread_mutex_lock(&a->rk[i]->mu);
                bool done = a->rk[i]->done;
                pthread_mutex_unlock(&a->rk[i]->mu);
                if (!done)
                        return false;
        }
        for (size_t i = 0; i < a->n; i++) {
                if (!a->lk[i])
                        continue;
                pthread_mutex_lock(&a->lk[i]->mu);
                bool done = a->lk[i]->done;
                pthread_mutex_unlock(&a->lk[i]->mu);
                if (!done)
                        return false;
        }
        return true;
}

bool names_policy_resolves(const struct pj_egress *pol) {
        if (pol->n_rules && pol->mode != PJ_EGRESS_DENY_ALL)
                return true;
        if (pol->mode != PJ_EGRESS_RESTRICTED)
                return false;
        for (size_t i = 0; i < pol->n_allow; i++) {
                struct pj_allow_entry e;
                if (pj_allow_entry_parse(pol->allow[i], &e, NULL, 0, NULL) >= 0 && e.kind == PJ_ALLOW_HOSTNAME)
                        return true;
        }
        return false;
}

/* The egress child's request from a's answers, waiting for them up to a's deadline
 * (at once when names_apply_ready). Each append bounded; on failure -errno, reason in err. */
static int build_from(struct names_apply *a, struct ps_egress_apply *req, struct pj_node_resolved **ret_resolved,
                      size_t *ret_n, struct err *err) {
        memset(req, 0, sizeof(*req));
        req->hdr.type = PS_EGRESS_APPLY;
        strscpy(req->sandbox_id, a->sandbox_id, sizeof(req->sandbox_id));
        req->mode = (uint8_t) a->pol.mode;
        req->ip = a->ip;
        req->pid = a->pid;
        *ret_resolved = NULL;
        *ret_n = 0;
        size_t n = a->n;
        int r = 0;
        struct pj_node_resolved *rv = NULL;
        size_t n_rv = 0;
        for (size_t i = 0; i < n; i++) {
                struct lookup *l = a->lk[i];
                if (!l)
                        continue;
                int w = lookup_wait(l, a->deadline);
                if (r == 0 && w < 0) {
                        r = err_set(err, -ETIMEDOUT, "resolving %s took longer than %d ms; nothing was changed", l->host,
                                    timeout_ms);
                } else if (r == 0 && l->gai != 0) {
                        r = err_set(err, -EHOSTUNREACH, "cannot resolve %s: %s", l->host, gai_strerror(l->gai));
                } else if (r == 0 && l->n > NAMES_MAX_ADDRS_PER_NAME) {
                        r = err_set(err, -E2BIG, "%s resolves to more than %d addresses; nothing was changed", l->host,
                                    NAMES_MAX_ADDRS_PER_NAME);
                }
                /* The lookup finished (w == 0): its fields are final; read them under no lock. */
                if (r == 0) {
                        if (!rv)
                                rv = xnew0(struct pj_node_resolved, n);
                        struct pj_node_resolved *x = &rv[n_rv++];
                        strscpy(x->name, l->host, sizeof(x->name));
                        x->at_ms = wall_ms();
                        for (size_t k = 0; k < l->n; k++)
                                x->addrs[x->n_addrs++] = l->addrs[k];
                }
        }
        /* Literal entries first, in order, then each name's addresses: every append bounded. */
        for (size_t i = 0; r == 0 && i < n; i++)
                if (a->e[i].kind != PJ_ALLOW_HOSTNAME)
                        r = allow_append(req, a->e[i].addr, a->e[i].kind == PJ_ALLOW_IPV4 ? 32 : a->e[i].prefix,
                                         a->pol.allow[i], err);
        for (size_t i = 0; r == 0 && i < n_rv; i++)
                for (size_t k = 0; r == 0 && k < rv[i].n_addrs; k++)
                        r = allow_append(req, rv[i].addrs[k], 32, rv[i].name, err);
        if (r < 0) {
                free(rv);
                return r;
        }
        *ret_resolved = rv;
        *ret_n = n_rv;
        return 0;
}

int names_build(const char *sandbox_id, const char *account, uint32_t ip, const struct pj_egress *pol,
                struct ps_egress_apply *req, struct pj_node_resolved **ret_resolved, size_t *ret_n, struct err *err) {
        struct names_apply *a = NULL;
        int r = names_apply_start(sandbox_id, account, ip, 0, pol, &a, err);   /* the binding stays */
        if (r < 0)
                return r;
        r = build_from(a, req, ret_resolved, ret_n, err);
        names_apply_free(a);
        return r;
}

/* ---------------------------------------------------------------- confirmed policies */

struct tracked {
        char id[EGRESS_ID_LEN + 1];
        char account[EGRESS_ID_LEN + 1];        /* "" when controld did not say */
        uint32_t ip;
        char **allow;           /* strv: the policy's entries as controld sent them */
        size_t n_allow;
        struct pj_node_resolved *resolved;
        size_t n_resolved;
        uint32_t *steer;        /* the rule hosts' addresses the apply steered (kept by refreshes) */
        size_t n_steer;
        uint64_t gen;
};

static struct tracked *table;
static size_t n_table;
static uint64_t gen_next = 1;

static pthread_mutex_t apply_lock = PTHREAD_MUTEX_INITIALIZER;  /* one apply at a time; guards the table */

/* Re-resolutions that changed what is enforced, for controld (names_take_updates). */
#define UPDATES_MAX 1024
static struct names_update *updates;
static size_t n_updates;

static void update_push(const char *id, const struct pj_node_resolved *rv, size_t n_rv) {
        for (size_t i = 0; i < n_updates; i++)
                if (!strcmp(updates[i].sandbox_id, id)) {
                        free(updates[i].resolved);
                        updates[i] = updates[--n_updates];
                        break;
                }
        if (n_updates >= UPDATES_MAX)
                return;         /* controld learns the addresses on the sandbox's next apply */
        updates = xrealloc(updates, (n_updates + 1) * sizeof(*updates));
        struct names_update *u = &updates[n_updates++];
        *u = (struct names_update) { .n_resolved = n_rv };
        strscpy(u->sandbox_id, id, sizeof(u->sandbox_id));
        u->resolved = xnew0(struct pj_node_resolved, n_rv ? n_rv : 1);
        if (n_rv)
                memcpy(u->resolved, rv, n_rv * sizeof(*rv));
}

size_t names_take_updates(struct names_update **ret) {
        pthread_mutex_lock(&apply_lock);
        size_t n = n_updates;
        *ret = updates;
        updates = NULL;
        n_updates = 0;
        pthread_mutex_unlock(&apply_lock);
        return n;
}

static struct tracked *tracked_find(const char *id) {
        for (size_t i = 0; i < n_table; i++)
                if (!strcmp(table[i].id, id))
                        return &table[i];
        return NULL;
}

static void tracked_drop(const char *id) {
        struct tracked *t = tracked_find(id);
        if (!t)
                return;
        strv_free(t->allow);
        free(t->resolved);
        free(t->steer);
        *t = table[--n_table];
}

/* Under apply_lock: what the egress child now enforces for id. */
static void tracked_set(const char *id, const char *account, uint32_t ip, const struct pj_egress *pol,
                        const struct pj_node_resolved *rv, size_t n_rv, const uint32_t *steer, size_t n_steer) {
        tracked_drop(id);
        /* The apply took ip over from whoever held it (egress_apply replaced that map
         * element): a refresh of the old holder must never take it back. */
        for (size_t i = 0; i < n_table;)
                if (table[i].ip == ip)
                        tracked_drop(table[i].id);
                else
                        i++;
        if (pol->mode != PJ_EGRESS_RESTRICTED || n_rv == 0)
                return;
        table = xrealloc(table, (n_table + 1) * sizeof(*table));
        struct tracked *t = &table[n_table++];
        *t = (struct tracked) { .ip = ip, .n_allow = pol->n_allow, .n_resolved = n_rv, .gen = gen_next++ };
        strscpy(t->id, id, sizeof(t->id));
        strscpy(t->account, account, sizeof(t->account));
        t->allow = xnew0(char *, pol->n_allow + 1);
        for (size_t i = 0; i < pol->n_allow; i++)
                t->allow[i] = xstrdup(pol->allow[i]);
        t->resolved = xnew0(struct pj_node_resolved, n_rv);
        memcpy(t->resolved, rv, n_rv * sizeof(*rv));
        t->n_steer = n_steer;
        t->steer = xnew0(uint32_t, n_steer ? n_steer : 1);
        if (n_steer)
                memcpy(t->steer, steer, n_steer * sizeof(*steer));
}

static int call_apply(struct ps_egress_apply *req, struct err *err) {
        struct ps_result res;
        int r = privsep_call(PS_CHILD_EGRESS, req, sizeof(*req), &res);
        if (r == -EPIPE || r == -ENOTCONN)
                err_set(err, r, "the egress process is not running on this node");
        else if (r < 0)
                err_set(err, r, "%s", res.msg);
        return r;
}

/* The rule hosts' addresses, waited for up to a's deadline: into req->steer (what the egress
 * table sends to the proxy) and *ret (what controld writes into the sandbox's /etc/hosts, so
 * the sandbox dials the addresses that are steered). Fails closed: a rule host that does not
 * resolve fails the apply. */
static int build_steer(struct names_apply *a, struct ps_egress_apply *req, struct pj_node_resolved **ret, size_t *ret_n,
                       struct err *err) {
        *ret = NULL;
        *ret_n = 0;
        if (!a->pol.n_rules)
                return 0;
        _cleanup_free_ struct pj_node_resolved *rv = xnew0(struct pj_node_resolved, a->pol.n_rules);
        size_t n = 0;
        for (size_t i = 0; i < a->pol.n_rules; i++) {
                struct lookup *l = a->rk[i];
                if (!l)
                        continue;
                if (lookup_wait(l, a->deadline) < 0)
                        return err_set(err, -ETIMEDOUT, "resolving %s (it has egress rules) took longer than %d ms; nothing "
                                                        "was changed", l->host, timeout_ms);
                if (l->gai != 0)
                        return err_set(err, -EHOSTUNREACH, "cannot resolve %s (it has egress rules): %s", l->host,
                                       gai_strerror(l->gai));
                if (l->n > NAMES_MAX_ADDRS_PER_NAME)
                        return err_set(err, -E2BIG, "%s resolves to more than %d addresses; nothing was changed", l->host,
                                       NAMES_MAX_ADDRS_PER_NAME);
                struct pj_node_resolved *x = &rv[n++];
                strscpy(x->name, l->host, sizeof(x->name));
                x->at_ms = wall_ms();
                for (size_t k = 0; k < l->n; k++) {
                        x->addrs[x->n_addrs++] = l->addrs[k];
                        if (req->n_steer >= EGRESS_MAX_STEER)
                                return err_set(err, -E2BIG, "the rule hosts resolve to more than %d addresses",
                                               EGRESS_MAX_STEER);
                        req->steer[req->n_steer++] = l->addrs[k];
                }
        }
        *ret = TAKE_PTR(rv);
        *ret_n = n;
        return 0;
}

/* The proxy child's part: with rules, it takes them (values included) and answers the
 * sandbox's CA (*ret_pem); without, it forgets the sandbox (when it runs at all). */
static int proxy_update(struct names_apply *a, char **ret_pem, struct err *err) {
        *ret_pem = NULL;
        if (!a->pol.n_rules) {
                if (privsep_child_pid(PS_CHILD_PROXY) > 0) {
                        struct ps_proxy_id q = { .hdr.type = PS_PROXY_DROP };
                        struct ps_result res;
                        strscpy(q.sandbox_id, a->sandbox_id, sizeof(q.sandbox_id));
                        (void) privsep_call(PS_CHILD_PROXY, &q, sizeof(q), &res);
                }
                return 0;
        }
        if (privsep_child_pid(PS_CHILD_PROXY) <= 0)
                return err_set(err, -EOPNOTSUPP, "the sandbox has egress rules, and this node runs no egress proxy "
                                                 "([proxy] enable)");
        _cleanup_json_ cJSON *j = pj_egress_rules_json(&a->pol, false);
        _cleanup_free_ char *text = json_print(j);
        size_t len = strlen(text);
        int r;
        if (len >= PS_PROXY_RULES_MAX)
                r = err_set(err, -E2BIG, "the egress rules with their secrets take %zu bytes, over the proxy's %d", len,
                            PS_PROXY_RULES_MAX - 1);
        else {
                _cleanup_free_ struct ps_proxy_set *q = xnew0(struct ps_proxy_set, 1);
                struct ps_result res;
                q->hdr.type = PS_PROXY_SET;
                strscpy(q->sandbox_id, a->sandbox_id, sizeof(q->sandbox_id));
                q->ip = a->ip;
                q->len = (uint32_t) len;
                memcpy(q->rules, text, len);
                r = privsep_call(PS_CHILD_PROXY, q, sizeof(*q), &res);
                explicit_bzero(q, sizeof(*q));
                if (r == -EPIPE || r == -ENOTCONN)
                        err_set(err, r, "the egress proxy is not running on this node");
                else if (r < 0)
                        err_set(err, r, "the egress proxy refused the rules: %s", res.msg);
                else
                        *ret_pem = xstrdup(res.msg);
        }
        /* the text and the tree hold the values */
        explicit_bzero(text, len);
        pj_egress_rules_json_wipe(j);
        return r;
}

int names_apply_finish(struct names_apply *a, struct pj_node_reply *out, struct err *err) {
        _cleanup_free_ struct ps_egress_apply *req = xnew0(struct ps_egress_apply, 1);
        struct pj_node_resolved *rv = NULL, *srv = NULL;
        size_t n_rv = 0, n_srv = 0;
        char *pem = NULL;
        /* Resolution first, outside the lock: a slow name holds up no other apply. */
        int r = build_from(a, req, &rv, &n_rv, err);
        if (r >= 0)
                r = build_steer(a, req, &srv, &n_srv, err);
        if (r >= 0) {
                pthread_mutex_lock(&apply_lock);
                /* The proxy first: once the table steers to it, it must know the sandbox. */
                if (a->pol.n_rules)
                        r = proxy_update(a, &pem, err);
                if (r >= 0)
                        r = call_apply(req, err);
                if (r >= 0 && !a->pol.n_rules)
                        (void) proxy_update(a, &pem, err);
                if (r >= 0) {
                        tracked_set(a->sandbox_id, a->account, a->ip, &a->pol, rv, n_rv, req->steer, req->n_steer);
                        proxystats_note(a->sandbox_id, a->pol.n_rules > 0);
                }
                pthread_mutex_unlock(&apply_lock);
                if (r >= 0)
                        fault_point("agent.apply.applied");     /* crash tests: enforced, not confirmed */
        }
        names_apply_free(a);
        if (r < 0) {
                free_many(rv, srv, pem);
                return r;
        }
        /* What controld writes into /etc/hosts: the allowlist's names, then the rule hosts'. */
        if (n_srv) {
                rv = xrealloc(rv, (n_rv + n_srv) * sizeof(*rv));
                for (size_t i = 0; i < n_srv; i++) {
                        bool dup = false;
                        for (size_t k = 0; k < n_rv && !dup; k++)
                                dup = !strcmp(rv[k].name, srv[i].name);
                        if (!dup && n_rv < PJ_EGRESS_MAX_ALLOW)
                                rv[n_rv++] = srv[i];
                }
        }
        free(srv);
        out->applied_at_ms = wall_ms();
        out->resolved = rv;
        out->n_resolved = n_rv;
        out->ca_pem = pem;
        return 0;
}

int names_apply(const char *sandbox_id, const char *account, uint32_t ip, uint32_t pid, const struct pj_egress *pol,
                struct pj_node_reply *out, struct err *err) {
        struct names_apply *a = NULL;
        int r = names_apply_start(sandbox_id, account, ip, pid, pol, &a, err);
        if (r < 0)
                return r;
        return names_apply_finish(a, out, err);
}

void names_forget(const char *sandbox_id) {
        pthread_mutex_lock(&apply_lock);
        tracked_drop(sandbox_id);
        pthread_mutex_unlock(&apply_lock);
}

int names_remove(const char *sandbox_id, uint32_t ip, struct err *err) {
        struct ps_egress_remove req = { .hdr.type = PS_EGRESS_REMOVE, .ip = ip };
        struct ps_result res;
        strscpy(req.sandbox_id, sandbox_id, sizeof(req.sandbox_id));
        pthread_mutex_lock(&apply_lock);
        int r = privsep_call(PS_CHILD_EGRESS, &req, sizeof(req), &res);
        if (r >= 0)
                tracked_drop(sandbox_id);
        /* The table no longer steers it: the proxy forgets its CA and its secrets. */
        if (r >= 0)
                proxystats_note(sandbox_id, false);
        if (r >= 0 && privsep_child_pid(PS_CHILD_PROXY) > 0) {
                struct ps_proxy_id q = { .hdr.type = PS_PROXY_DROP };
                struct ps_result pres;
                strscpy(q.sandbox_id, sandbox_id, sizeof(q.sandbox_id));
                (void) privsep_call(PS_CHILD_PROXY, &q, sizeof(q), &pres);
        }
        pthread_mutex_unlock(&apply_lock);
        if (r == -EPIPE || r == -ENOTCONN)
                err_set(err, r, "the egress process is not running on this node");
        else if (r < 0)
                err_set(err, r, "%s", res.msg);
        return r;
}

static bool same_addrs(const struct pj_node_resolved *a, size_t na, const struct pj_node_resolved *b, size_t nb) {
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++) {
                if (strcmp(a[i].name, b[i].name) != 0 || a[i].n_addrs != b[i].n_addrs)
                        return false;
                for (size_t k = 0; k < a[i].n_addrs; k++) {
                        bool found = false;
                        for (size_t j = 0; j < b[i].n_addrs && !found; j++)
                                found = a[i].addrs[k] == b[i].addrs[j];
                        if (!found)
                                return false;
                }
        }
        return true;
}

int names_refresh_once(void) {
        /* A snapshot of what to refresh: resolution runs without the lock. */
        pthread_mutex_lock(&apply_lock);
        size_t n = n_table;
        struct tracked *snap = xnew0(struct tracked, n ? n : 1);
        for (size_t i = 0; i < n; i++) {
                snap[i] = table[i];
                snap[i].allow = strv_copy(table[i].allow);
                snap[i].resolved = NULL;
                snap[i].steer = xnew0(uint32_t, table[i].n_steer ? table[i].n_steer : 1);
                if (table[i].n_steer)
                        memcpy(snap[i].steer, table[i].steer, table[i].n_steer * sizeof(uint32_t));
        }
        pthread_mutex_unlock(&apply_lock);

        int changed = 0;
        for (size_t i = 0; i < n; i++) {
                struct pj_egress pol = { .mode = PJ_EGRESS_RESTRICTED, .allow = snap[i].allow, .n_allow = snap[i].n_allow };
                _cleanup_free_ struct ps_egress_apply *req = xnew0(struct ps_egress_apply, 1);
                struct pj_node_resolved *rv = NULL;
                size_t n_rv = 0;
                struct err err = { 0 };
                log_ctx_set("SANDBOX_ID", snap[i].id);
                int r = names_build(snap[i].id, snap[i].account, snap[i].ip, &pol, req, &rv, &n_rv, &err);
                /* The rule hosts stay steered as their apply resolved them. */
                if (r >= 0 && snap[i].n_steer) {
                        memcpy(req->steer, snap[i].steer, snap[i].n_steer * sizeof(uint32_t));
                        req->n_steer = (uint32_t) snap[i].n_steer;
                }
                if (r < 0) {
                        log_warning("re-resolving the allowlist failed, the addresses confirmed last stay: %s", err.message);
                        log_ctx_set("SANDBOX_ID", NULL);
                        continue;
                }
                pthread_mutex_lock(&apply_lock);
                struct tracked *t = tracked_find(snap[i].id);
                if (t && t->gen == snap[i].gen && !same_addrs(t->resolved, t->n_resolved, rv, n_rv)) {
                        int64_t t0 = mono_ms();
                        r = call_apply(req, &err);
                        if (r >= 0) {
                                update_push(t->id, rv, n_rv);
                                free(t->resolved);
                                t->resolved = TAKE_PTR(rv);
                                t->n_resolved = n_rv;
                                changed++;
                                log_info("allowlisted names resolve differently now: the sandbox's set was swapped in %" PRId64 " ms",
                                         mono_ms() - t0);
                        } else
                                log_warning("re-resolved allowlist could not be applied, the old one stays: %s", err.message);
                } else if (t && t->gen == snap[i].gen) {
                        /* Same answers: only the time of the last resolution moves. */
                        for (size_t k = 0; k < t->n_resolved && k < n_rv; k++)
                                t->resolved[k].at_ms = rv[k].at_ms;
                }
                pthread_mutex_unlock(&apply_lock);
                free(rv);
                log_ctx_set("SANDBOX_ID", NULL);
        }
        for (size_t i = 0; i < n; i++) {
                strv_free(snap[i].allow);
                free(snap[i].steer);
        }
        free(snap);
        return changed;
}

int names_resolved_get(const char *sandbox_id, struct pj_node_resolved **ret, size_t *ret_n) {
        pthread_mutex_lock(&apply_lock);
        struct tracked *t = tracked_find(sandbox_id);
        int r = t ? 0 : -ENOENT;
        if (t) {
                *ret = xnew0(struct pj_node_resolved, t->n_resolved ? t->n_resolved : 1);
                if (t->n_resolved)
                        memcpy(*ret, t->resolved, t->n_resolved * sizeof(**ret));
                *ret_n = t->n_resolved;
        }
        pthread_mutex_unlock(&apply_lock);
        return r;
}

/* ---------------------------------------------------------------- the refresher thread */

static struct ticker rf = TICKER_INIT;

static void *refresh_main(void *ud) {
        (void) ud;
        while (ticker_sleep(&rf, interval_ms))
                (void) names_refresh_once();
        return NULL;
}

void names_configure(int64_t resolve_timeout_ms, int64_t resolve_interval_ms) {
        if (resolve_timeout_ms > 0)
                timeout_ms = (int) resolve_timeout_ms;
        if (resolve_interval_ms > 0)
                interval_ms = (int) resolve_interval_ms;
}

int names_refresh_start(void) {
        return ticker_start(&rf, refresh_main, NULL);
}

void names_refresh_stop(void) {
        ticker_stop(&rf);
}
