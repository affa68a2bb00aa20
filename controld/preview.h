/* preview.h — preview URLs (preview.c): the REST side and the preview listener. */
#pragma once

#include <microhttpd.h>

#include "http.h"

struct ctl;
struct strbuf;

/* Starts [preview] listen (nothing when unset): 0 or -errno, logged. */
int preview_start(struct ctl *c);
/* Stops accepting and waits (bounded) for open connections. */
void preview_stop(void);
/* The bound port (for listen = ...:0); 0 when off. */
int preview_port(void);
/* A preview's URL (xmalloc'd). */
char *preview_url(const struct ctl *c, const char *sandbox_id, int port);
/* paddock_preview_* series for /metrics. */
void preview_metrics_render(struct strbuf *out);

enum MHD_Result preview_post(struct req *r);
enum MHD_Result preview_list(struct req *r);
enum MHD_Result preview_delete(struct req *r);
