/* pool.h — warm pools (pool.c): matching a create to a pool, claiming, refilling. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* ---- warm pools (pool.c) ---- */
enum pool_miss {
        POOL_MISS_NONE,         /* a hit: the create can claim a member of the pool matched */
        POOL_MISS_NO_POOL,      /* no pool holds this template, these specs and egress class */
        POOL_MISS_VOLUME,       /* volumeId or persistent */
        POOL_MISS_SNAPSHOT,     /* fromSnapshot */
        POOL_MISS_ONE_SHOT,
        POOL_MISS_NO_AGENT,     /* restricted egress without node agents (another network) */
        POOL_MISS_EMPTY,        /* the pool had no ready member */
        _POOL_MISS_MAX
};
struct pj_sandbox_create;
struct ctl;
struct strbuf;
/* The pool that holds a create's kind (NULL: none, *miss = NO_POOL). *miss = NONE when the
 * create may claim from it, else why it may not (it asks for what no member can give). */
const struct pool_conf *pool_match(const struct ctl *c, const struct template *tpl, int64_t cpu, int64_t memory, int64_t disk,
                                   const struct pj_sandbox_create *in, enum pool_miss *miss);
/* Counts a create's outcome: a hit (miss = NONE) or a miss and why, on pool p (NULL: none matched).
 * A hit also holds the pool's refill back for a moment (pool.c, POOL_CLAIM_QUIET_MS). */
void pool_note(const struct ctl *c, const struct pool_conf *p, enum pool_miss miss);
const char *pool_miss_name(enum pool_miss m);
void pool_start(struct ctl *c);         /* before serving: heals what a stop left, then serves */
void pool_tick(struct ctl *c);          /* background thread: retire and refill */
bool pool_owns(struct ctl *c, const char *id);
void pool_metrics_render(struct ctl *c, struct strbuf *b);
