/* preview.h — preview URLs (preview.c): the REST side and the preview listener. */
#pragma once

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

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
/* A connection another listener accepted (E2B's <port>-<id> URLs) for port inside sb, which
 * the caller found ready and allowed: reads the request head (at most max_header bytes),
 * forwards it and passes bytes both ways as a preview does. Takes fd (closed at the end). */
struct sandbox;
void preview_forward_conn(struct ctl *c, int fd, const char *peer, const struct sandbox *sb, int port, uint64_t max_header);
/* The request-head side of a connection without one, for tests/fuzz/fuzz-preview-head.c: parses
 * buf as a client's first bytes (head, then body) as serve does, routes it under domain, rewrites
 * it (as for https) and frames the body. 0 with the head as the app would get it in *ret_head
 * (xmalloc'd; ret_head may be NULL), or the HTTP status a client would get (400, 404, 431). */
int preview_head_check(const uint8_t *buf, size_t n, const char *domain, bool path_form, char **ret_head);
/* paddock_preview_* series for /metrics. */
void preview_metrics_render(struct strbuf *out);

enum MHD_Result preview_post(struct req *r);
enum MHD_Result preview_list(struct req *r);
enum MHD_Result preview_delete(struct req *r);
