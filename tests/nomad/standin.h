/* standin.h — the Nomad stand-in's private header (tests/nomad/README.md).
 *
 * standin.c holds main(), the HTTP API, the state (jobs, allocations, evaluations,
 * nodes, CSI volumes), placement on the local dockerd and fault injection;
 * standin-exec.c serves the alloc exec WebSocket over an MHD-upgraded socket.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <microhttpd.h>
#include <cjson/cJSON.h>

struct docker;

/* standin.c */
struct docker *standin_docker(void);
/* Checks a request's token as Nomad's ACL resolver does. 0 when allowed; else a
 * Nomad HTTP code (403) and message ("Permission denied", "ACL token not found"). */
int standin_acl(const char *token, const char **ret_msg);
/* Where an exec for alloc_id/task would run (task NULL: only check that the allocation exists).
 * the task runs; otherwise Nomad's code (400/404) and message in *ret_msg (xmalloc'd). */
int standin_exec_target(const char *alloc_id, const char *task, char *container, size_t size, char **ret_msg);
/* Takes one pending "exec closed with 1011" fault: true when this session must fail. */
bool standin_take_exec_fault(void);
/* A plain-text answer (text/plain; charset=utf-8), as Nomad's HTTP layer writes its errors. */
enum MHD_Result standin_reply_text(struct MHD_Connection *c, unsigned code, const char *text);
/* Appends one line to the request log (no-op without --record). kind "ws-in" / "ws-out". */
void standin_record_ws(const char *path, const char *kind, const char *text, size_t len);

/* standin-exec.c */
/* Queues the 101 response for GET /v1/client/allocation/:id/exec and runs the session
 * once the socket is upgraded. Returns what the access handler returns. */
enum MHD_Result exec_handle(struct MHD_Connection *conn, const char *alloc_id, const char *token);
