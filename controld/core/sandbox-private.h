/* sandbox-private.h — what sandbox.c (create, destroy), pause.c (pause, resume) and fork.c
 * share. */
#pragma once

#include "controld.h"
#include "driver.h"

/* *dst = a copy of v (NULL stays NULL), the old value freed. */
void replace_str(char **dst, const char *v);
/* The driver's placement (container, node, job, alloc, address) into sb's record. */
void apply_placement(struct sandbox *sb, struct placement *p);
/* Undoes a placement whose egress is not (or no longer) known to be enforced: the container
 * goes first, then the node's agent is asked to drop whatever it may have applied. */
void unplace_unenforced(struct ctl *c, struct sandbox *sb);
/* -EHOSTUNREACH with the reason when this controld's one node is drained, else 0. */
int check_node_accepting(struct ctl *c, struct err *err);
/* 1 when no snapshot of the sandbox is being taken (its commit reads the container), 0 when
 * one is, -errno when the store cannot say. */
int no_snapshot_in_flight(struct ctl *c, const char *id);
void sandbox_log_ctx_clearp(int *unused);
/* Clears the sandbox's journal context however the scope is left. */
#define SANDBOX_LOG_CTX_SCOPE __attribute__((cleanup(sandbox_log_ctx_clearp), unused)) int _log_scope_ = 0
/* Restores sb's workload in place from its checkpoint ckpt and applies its egress again: 1
 * when it runs again with its memory (the placement on the record); 0 when not: the workload is
 * removed, container and address cleared, and why says why (the caller starts it afresh from
 * its filesystem, or leaves it). pause.c. */
int sandbox_restore_in_place(struct ctl *c, struct sandbox *sb, const char *ckpt, struct err *why);
