/* docker-checkpoint.c — the Docker Engine's checkpoint API (docker-checkpoint.h). Its own
 * file so that it stands apart from the container calls while docker.c is split. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "docker-checkpoint.h"
#include "docker-private.h"
#include "httpc.h"
#include "strutil.h"

/* gVisor writes the whole sandbox's memory: allow for a few GiB at disk speed. */
#define TIMEOUT_CHECKPOINT_MS (5L * 60 * 1000)

static bool checkpoint_name_ok(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > DOCKER_CHECKPOINT_NAME_MAX)
                return false;
        return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == n && s[0] != '.' &&
               s[0] != '-' && s[0] != '_';
}

int docker_checkpoint_create(struct docker *d, const char *container, const char *name, bool exit) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(container) || !checkpoint_name_ok(name))
                return -EINVAL;
        _cleanup_json_ cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "CheckpointID", name);
        cJSON_AddBoolToObject(b, "Exit", exit);
        _cleanup_free_ char *path = escaped_path("/containers/%s/checkpoints", container);
        return docker_call(d, "POST", path, b, TIMEOUT_CHECKPOINT_MS, &resp);
}

int docker_checkpoint_start(struct docker *d, const char *container, const char *name) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(container) || !checkpoint_name_ok(name))
                return -EINVAL;
        _cleanup_free_ char *path = escaped_path("/containers/%s/start?checkpoint=%s", container, name);
        return docker_call(d, "POST", path, NULL, TIMEOUT_CHECKPOINT_MS, &resp);
}

int docker_checkpoint_remove(struct docker *d, const char *container, const char *name) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        if (!docker_valid_name(container) || !checkpoint_name_ok(name))
                return -EINVAL;
        _cleanup_free_ char *path = escaped_path("/containers/%s/checkpoints/%s", container, name);
        return docker_call(d, "DELETE", path, NULL, TIMEOUT_DEFAULT_MS, &resp);
}

int docker_experimental(struct docker *d) {
        _cleanup_(docker_resp_done) struct docker_resp resp = {};
        int r = docker_call(d, "GET", "/info", NULL, TIMEOUT_DEFAULT_MS, &resp);
        if (r < 0)
                return r;
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(resp.json, "ExperimentalBuild");
        return cJSON_IsTrue(e) ? 1 : 0;
}
