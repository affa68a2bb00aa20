/* metrics.h — controld's Prometheus series (metrics.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* ---- metrics (metrics.c) ---- */
struct metrics *metrics_new(void);
struct metrics *metrics_free(struct metrics *m);
void metrics_observe_request(struct metrics *m, const char *route, const char *method, int status, double seconds);
void metrics_observe_phase(struct metrics *m, const char *phase, double seconds);
struct strbuf;
/* Appends controld's own series (requests, phases, sandboxes by status) to out. */
void metrics_render(struct ctl *c, struct strbuf *out);
/* Another part's series, rendered after ours (main.c wires them: metrics.c calls no one). */
void metrics_add_source(struct metrics *m, void (*render)(struct strbuf *out));
