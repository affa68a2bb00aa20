/* background.h — reapers and periodic work (background.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* ---- reapers and background work (background.c) ---- */
/* Heals what a crash left (transient statuses, interrupted volume deletes) synchronously, then
 * starts the periodic thread: call before serving requests. */
int background_start(struct ctl *c);
void background_stop(struct ctl *c);
/* One reaper decision for sandbox id at time now (ms), made afresh under the sandbox lock from
 * the record as it is (never from a list read earlier): removes the workload, then moves the
 * record to destroyed by compare-and-set from the status it decided on. Returns 1 destroyed,
 * 0 nothing to reap or a concurrent pause/resume won, -errno on failure (nothing recorded). */
int background_reap_one(struct ctl *c, const char *id, int64_t now);
