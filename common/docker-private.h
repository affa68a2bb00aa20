/* docker-private.h — what docker.c (the client, the request helper) shares with the calls by
 * API area (docker-container.c, docker-image.c) and the exec transport (docker-exec.c): the
 * client struct, one API call, the thread's last error, the shared checks. Not for users of
 * docker.h. */
#pragma once

#include <stdbool.h>
#include <cjson/cJSON.h>

#include "docker.h"
#include "strutil.h"

#define TIMEOUT_DEFAULT_MS   30000L
#define TIMEOUT_CREATE_MS    60000L
#define TIMEOUT_REMOVE_MS    60000L
#define TIMEOUT_COMMIT_MS    (10L * 60 * 1000)
#define TIMEOUT_PUSH_MS      (30L * 60 * 1000)
#define EXEC_HEAD_MAX        (16 * 1024)
#define EXEC_ERRBODY_MAX     (64 * 1024)
#define EXEC_HEAD_TIMEOUT_MS 30000
#define EXEC_RUN_TIMEOUT_MS  60000L
#define PUSH_LINE_MAX        (64 * 1024)
#define ERRMSG_MAX           1024

struct docker {
        char *socket;
};

struct docker_resp {
        long status;
        cJSON *json;
};

/* xasprintf(fmt, escaped name, ...): fmt's first conversion is the %s that takes the
 * URL-escaped object name ("/containers/%s/json"), the rest take the extra arguments. */
#define escaped_path(fmt, name, ...)                                            \
        ({                                                                      \
                _cleanup_free_ char *_ep_ = httpc_escape(name);                 \
                xasprintf(fmt, _ep_, ##__VA_ARGS__);                            \
        })

/* docker_call (defined below) without a body, on escaped_path(fmt, name, ...). */
#define dcall_path(d, method, timeout_ms, ret, fmt, name, ...)                          \
        ({                                                                              \
                _cleanup_free_ char *_dp_ = escaped_path(fmt, name, ##__VA_ARGS__);     \
                docker_call((d), (method), _dp_, NULL, (timeout_ms), (ret));                  \
        })

void docker_resp_done(struct docker_resp *r);
/* The remote every call goes through (docker_set_remote), or NULL. */
const struct docker_remote *docker_remote_get(void);
/* One API call. body (may be NULL) is sent as JSON. On a transport failure returns
 * -errno. Otherwise ret->status is set, ret->json holds the parsed body (if any), and
 * the return value is docker_map_status(status) with docker_last_error() set for >= 400. */
int docker_call(struct docker *d, const char *method, const char *path, const cJSON *body, long timeout_ms,
                struct docker_resp *ret);
int docker_map_status(long status);
int docker_transport_error(struct docker *d, int r);
void docker_clear_error(void);
void docker_set_error_n(const char *s, size_t len);
void docker_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void docker_set_error_from_body(long status, const char *body, size_t len);
bool docker_valid_name(const char *s);
double docker_json_num(const cJSON *o, const char *key);
cJSON *docker_strv_to_json(const char *const *v);
/* The "Id" of a create call's answer, xstrdup'd into *ret when ret is not NULL;
 * -EBADMSG (what names the call) when it has none. */
int docker_answer_id(const struct docker_resp *resp, const char *what, char **ret);
/* The string member key of o, or NULL. */
const char *docker_json_str(const cJSON *o, const char *key);
/* snprintf of s ("" for NULL) into dst of n bytes. */
void docker_copy_str(char *dst, size_t n, const char *s);
cJSON *docker_labels_to_json(const struct docker_kv *l, size_t n);
bool docker_labels_valid(const struct docker_kv *l, size_t n);
bool docker_valid_ref(const char *s);
int docker_filtered_list(struct docker *d, const char *path_head, const char *key, const char *value, const char *what,
                         struct docker_resp *ret);
