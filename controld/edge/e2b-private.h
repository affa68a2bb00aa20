/* e2b-private.h — what e2b.c (listener, routes) and e2b-api.c (the control plane's handlers) share. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "controld.h"
#include "http.h"

/* E2B shows destroyed and failed sandboxes as gone. */
static inline bool e2b_live(enum sb_status s) {
        return s != SB_DESTROYED && s != SB_FAILED;
}

/* E2B's error body: {"code": status, "message": message}. */
cJSON *e2b_error_body(int status, const char *message);
/* Whether the sandbox's ports answer anyone who reaches the E2B listener (allowPublicTraffic). */
bool e2b_opt_public(const struct sandbox *sb);
/* s[0..n) is 24 lowercase hex digits (a sandbox or snapshot id). */
bool e2b_hex24(const char *s, size_t n);

/* A page of a list: the JSON array items (taken), 200, and X-Next-Token (next) when more is set. */
enum MHD_Result e2b_respond_page(struct req *r, cJSON *items, bool more, int64_t next);

enum MHD_Result e2b_bad_target(struct req *r);
enum MHD_Result e2b_delete_sandbox(struct req *r);
enum MHD_Result e2b_delete_template(struct req *r);
enum MHD_Result e2b_get_health(struct req *r);
enum MHD_Result e2b_get_metrics(struct req *r);
enum MHD_Result e2b_get_sandbox(struct req *r);
enum MHD_Result e2b_list_snapshots(struct req *r);
enum MHD_Result e2b_list_v1(struct req *r);
enum MHD_Result e2b_list_v2(struct req *r);
enum MHD_Result e2b_misdirected(struct req *r);
enum MHD_Result e2b_not_served(struct req *r);
enum MHD_Result e2b_post_connect(struct req *r);
enum MHD_Result e2b_post_fork(struct req *r);
enum MHD_Result e2b_post_connect_v2(struct req *r);
enum MHD_Result e2b_post_pause(struct req *r);
enum MHD_Result e2b_post_sandboxes(struct req *r);
enum MHD_Result e2b_post_sandboxes_v2(struct req *r);
enum MHD_Result e2b_post_snapshot(struct req *r);
enum MHD_Result e2b_post_timeout(struct req *r);
enum MHD_Result e2b_put_network(struct req *r);
/* e2b-secrets.c */
enum MHD_Result e2b_secrets_list(struct req *r);
enum MHD_Result e2b_secrets_post(struct req *r);
enum MHD_Result e2b_secret_get(struct req *r);
enum MHD_Result e2b_secret_update(struct req *r);
enum MHD_Result e2b_secret_delete(struct req *r);
/* e2b-volumes.c */
enum MHD_Result e2b_volumes_list(struct req *r);
enum MHD_Result e2b_volumes_post(struct req *r);
enum MHD_Result e2b_volume_get(struct req *r);
enum MHD_Result e2b_volume_delete(struct req *r);
enum MHD_Result e2b_volume_content(struct req *r);
enum MHD_Result e2b_volume_content_prepare(struct req *r);
