/* render.h — JSON of the API's resources (render.c): new trees owned by the caller. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <cjson/cJSON.h>

#include "controld.h"
#include "runtime.h"

/* ---- JSON of API resources (render.c): new trees owned by the caller ---- */
struct stats_sample;
cJSON *sandbox_to_json(struct ctl *c, const struct sandbox *sb);
/* A fork's outcome, one entry per copy: {"sandbox": sb_json(sandbox)} or {"error": {code_key:
 * status_of(its -errno), "message"}} (each API names the status its way); the results'
 * sandboxes are cleared. *ret_made: the copies that run. */
struct sandbox_fork_result;
cJSON *fork_results_json(struct ctl *c, struct sandbox_fork_result *res, int n,
                         cJSON *(*sb_json)(struct ctl *c, const struct sandbox *sb), int (*status_of)(int err),
                         const char *code_key, int *ret_made);
cJSON *sandbox_created_to_json(const struct sandbox *sb);
/* PUT /sandboxes/{id}/egress: the sandbox (egress, block_outbound, ...) and network_updated
 * (true when the mode changed, i.e. the node now enforces another network profile). */
cJSON *egress_update_to_json(struct ctl *c, const struct sandbox *sb, bool network_updated);
cJSON *volume_to_json(struct ctl *c, const struct volume *v);
cJSON *snapshot_to_json(const struct snapshot *sn);
cJSON *region_to_json(const struct region *r);
/* size_mb: the image's size (t->size_mb or the driver's answer), <= 0 = unknown (null). */
cJSON *template_to_json(const struct template *t, int64_t size_mb);

cJSON *stats_to_json(const struct sandbox *sb, const struct stats_sample *s, size_t n, int64_t since, int64_t hours);
/* Exec and code answers: the JSON result, and the last SSE frame of a stream. */
/* What an exec answer and its done frame say when the memory limit killed the command. */
#define OOM_MESSAGE                                                                                     \
        "Command was killed: the sandbox ran out of memory (its memory limit). Under gVisor this stops the " \
        "whole sandbox; create it with more specs.memory"
cJSON *exec_result_to_json(const struct exec_result *x);
cJSON *exec_done_frame_to_json(const struct exec_result *x);
/* The other SSE frames: {"type":"stdout"|"stderr","data":...} and {"type":"error","message":...}. */
cJSON *exec_output_frame_to_json(const char *type, const char *data, size_t len);
cJSON *exec_error_frame_to_json(const char *message);
/* Batch upload: one file's outcome (error NULL = success), and the summary (results consumed). */
cJSON *batch_file_to_json(const char *path, size_t bytes, const char *error);
cJSON *batch_summary_to_json(int uploaded, int failed, cJSON *results);
/* GET /healthz. */
cJSON *health_to_json(bool ok, const char *driver);
/* {data: items (consumed), totalCount, currentPage, totalPages, limit}. */
cJSON *render_page(cJSON *items, int64_t total, int64_t page, int64_t limit);
/* "region": {...} or null. */
void render_add_region(cJSON *o, const struct region *g);
/* A template a user built: name, status, size_mb, error, log, created_at, finished_at. */
cJSON *render_user_template(const struct user_template *t);
/* A secret without its value: name, version, metadata, created_at, updated_at. */
cJSON *render_secret(const struct secret *s);
