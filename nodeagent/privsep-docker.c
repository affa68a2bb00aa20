/* privsep-docker.c — the docker child's work: snapshot steps (commit after a free-disk
 * check, push, verify against the registry, remove, prune; the prune also takes the agent
 * socket volumes and the volumes labelled with a sandbox that no container uses any more),
 * each one message from the
 * parent already checked for size and version by privsep.c. This process owns the
 * Docker socket and the registry credentials; the credentials never travel.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>

#include "cleanup.h"
#include "docker.h"
#include "log.h"
#include "nodeagent.h"
#include "pj_agent.h"
#include "pj_snapshot.h"
#include "privsep.h"
#include "registry.h"
#include "strutil.h"

/* Set in the docker child only (child_main); NULL elsewhere (unit tests call
 * privsep_child_handle directly: docker steps then answer -ENOTCONN). */
static struct docker *dk;
static const struct agent_config *dk_cfg;

/* A container reference (pj_snapshot_container_ref_valid), NUL-terminated, zeros after it. */
_Static_assert(PS_CONTAINER_MAX == PJ_SNAPSHOT_MAX_CONTAINER, "the job's container reference fits the message");
static bool container_field_valid(const char c[PS_CONTAINER_MAX + 1]) {
        const char *nul = memchr(c, 0, PS_CONTAINER_MAX + 1);
        if (!nul)
                return false;
        size_t n = (size_t) (nul - c);
        return pj_snapshot_container_ref_valid(c, n) && privsep_zero(nul, PS_CONTAINER_MAX + 1 - n);
}

int privsep_docker_check(uint16_t type, const struct ps_docker *m, struct ps_result *ret) {
        bool want_id = type != PS_DOCKER_PRUNE && type != PS_DOCKER_PID,
             want_container = type == PS_DOCKER_COMMIT || type == PS_DOCKER_PID;
        if (want_id ? !privsep_id_field_valid(m->snapshot_id) : !privsep_zero(m->snapshot_id, sizeof(m->snapshot_id)))
                return privsep_refuse(ret, "snapshot_id is not 24 lowercase hex characters (or not empty for a prune)");
        if (want_container ? !container_field_valid(m->container) : !privsep_zero(m->container, sizeof(m->container)))
                return privsep_refuse(ret, "container is not a container id or sandbox container name (or not empty)");
        if (!privsep_zero(m->pad, sizeof(m->pad)))
                return privsep_refuse(ret, "padding is not zero");
        return 0;
}

/* The in-sandbox agent's socket volumes (PJ_AGENT_VOLUME_PREFIX<sandbox id>) that no container
 * uses any more (Nomad's docker driver makes one per sandbox job and leaves it when the job
 * goes), and any volume labelled paddock.sandbox that no container uses.
 * Only those older than a prune interval go, so a volume made for a container about to start
 * (the local driver makes it first) is never taken. A volume in use is refused by Docker and
 * stays. Returns how many were removed. */
static int prune_agent_volumes(void) {
        struct docker_volume_info *v = NULL;
        size_t n = 0;
        if (docker_volume_list_dangling(dk, PJ_AGENT_VOLUME_PREFIX, &v, &n) < 0)
                return 0;
        int64_t now = (int64_t) time(NULL), min_age = (int64_t) (dk_cfg ? dk_cfg->snap_prune_interval_ms / 1000 : 300);
        int removed = 0;
        for (size_t i = 0; i < n; i++) {
                const char *id = v[i].name + strlen(PJ_AGENT_VOLUME_PREFIX);
                if (strlen(id) != EGRESS_ID_LEN || !hexid_valid(id) || v[i].created_s <= 0 || now - v[i].created_s < min_age)
                        continue;
                if (docker_volume_remove(dk, v[i].name, false) >= 0)
                        removed++;
        }
        docker_volume_info_free(v, n);
        /* Any other volume labelled with a sandbox (paddock.sandbox=<id>) that no container uses:
         * its sandbox is gone from this node (a sandbox's container holds its volumes from the
         * moment it exists; the age covers a volume made for a container about to start). */
        v = NULL;
        n = 0;
        if (docker_volume_list_dangling_labelled(dk, "paddock.sandbox", &v, &n) < 0)
                return removed;
        for (size_t i = 0; i < n; i++) {
                if (!v[i].label || strlen(v[i].label) != EGRESS_ID_LEN || !hexid_valid(v[i].label) || v[i].created_s <= 0 ||
                    now - v[i].created_s < min_age)
                        continue;
                if (docker_volume_remove(dk, v[i].name, false) >= 0)
                        removed++;
        }
        docker_volume_info_free(v, n);
        return removed;
}

static void dk_fail(struct ps_result *ret, int r, const char *what) {
        const char *dm = docker_last_error();
        snprintf(ret->msg, sizeof(ret->msg), "%s: %s", what, dm && *dm ? dm : strerror(-r));
        ret->r = r;
}

void privsep_docker_do(uint16_t type, const struct ps_docker *m, struct ps_result *ret) {
        if (!dk) {
                snprintf(ret->msg, sizeof(ret->msg), "this process holds no Docker connection");
                ret->r = -ENOTCONN;
                return;
        }
        if (type == PS_DOCKER_PID) {
                struct docker_container_state st;
                int k = docker_container_inspect(dk, m->container, &st);
                if (k < 0)
                        dk_fail(ret, k, "cannot inspect the sandbox's container");
                else if (!st.exists || !st.running || st.pid <= 0) {
                        snprintf(ret->msg, sizeof(ret->msg), "the sandbox's container %s is not running on this node",
                                 m->container);
                        ret->r = -ESRCH;
                } else
                        snprintf(ret->msg, sizeof(ret->msg), "%d", st.pid);
                return;
        }
        struct registry reg = { .host = dk_cfg->snap_registry, .username = dk_cfg->snap_username,
                                .password = dk_cfg->snap_password };
        _cleanup_free_ char *repo = xasprintf("%s/%s", dk_cfg->snap_registry, dk_cfg->snap_repository);
        _cleanup_free_ char *ref = xasprintf("%s:%s", repo, m->snapshot_id);
        int r;
        switch ((enum ps_type) type) {
        case PS_DOCKER_COMMIT: {
                struct statvfs sv;
                _cleanup_free_ char *root = dk_cfg->snap_docker_root ? xstrdup(dk_cfg->snap_docker_root) : NULL;
                if (!root && (r = docker_root_dir(dk, &root)) < 0) {
                        dk_fail(ret, r, "cannot ask Docker for its data directory");
                        return;
                }
                if (statvfs(root, &sv) < 0) {
                        ret->r = -errno;
                        snprintf(ret->msg, sizeof(ret->msg), "cannot read the free space of %s: %s", root, strerror(errno));
                        return;
                }
                uint64_t free_b = (uint64_t) sv.f_bavail * sv.f_frsize;
                if (free_b < dk_cfg->snap_disk_floor) {
                        snprintf(ret->msg, sizeof(ret->msg),
                                 "the node has %" PRIu64 " MiB free on %s, under the snapshot floor of %" PRIu64 " MiB",
                                 free_b >> 20, root, dk_cfg->snap_disk_floor >> 20);
                        ret->r = -ENOSPC;
                        return;
                }
                _cleanup_free_ char *image = NULL;
                r = docker_commit(dk, m->container, repo, m->snapshot_id, &image);
                if (r == -ENOENT) {
                        snprintf(ret->msg, sizeof(ret->msg), "the sandbox's container is gone (destroyed or paused)");
                        ret->r = r;
                } else if (r < 0)
                        dk_fail(ret, r, "commit failed");
                else
                        snprintf(ret->msg, sizeof(ret->msg), "%s", image);
                return;
        }
        case PS_DOCKER_PUSH: {
                _cleanup_free_ char *auth = registry_auth_header_value(&reg), *digest = NULL;
                r = docker_image_push(dk, repo, m->snapshot_id, auth, &digest, NULL);
                if (r < 0)
                        dk_fail(ret, r, "push failed");
                else
                        snprintf(ret->msg, sizeof(ret->msg), "%s", digest);
                return;
        }
        case PS_DOCKER_VERIFY: {
                _cleanup_free_ char *digest = NULL;
                int64_t size = 0;
                r = registry_manifest_digest(&reg, dk_cfg->snap_repository, m->snapshot_id, &digest, &size);
                if (r == -ENOENT) {
                        snprintf(ret->msg, sizeof(ret->msg), "the registry has no manifest %s", ref);
                        ret->r = r;
                } else if (r < 0) {
                        snprintf(ret->msg, sizeof(ret->msg), "cannot read the manifest %s from the registry: %s", ref,
                                 strerror(-r));
                        ret->r = r;
                } else
                        snprintf(ret->msg, sizeof(ret->msg), "%s %" PRId64, digest, size);
                return;
        }
        case PS_DOCKER_REMOVE:
                r = docker_image_remove(dk, ref, false);
                if (r < 0 && r != -ENOENT)
                        dk_fail(ret, r, "cannot remove the local image");
                return;
        case PS_DOCKER_PRUNE: {
                _cleanup_free_ char *filter = xasprintf("%s:*", repo);
                char **refs = NULL;
                r = docker_image_list(dk, filter, &refs);
                if (r < 0) {
                        dk_fail(ret, r, "cannot list local snapshot images");
                        return;
                }
                int removed = 0, kept = 0;
                /* In use (a sandbox restored from it runs here): Docker refuses, the image stays. */
                for (char **p = refs; *p; p++)
                        if (docker_image_remove(dk, *p, false) >= 0)
                                removed++;
                        else
                                kept++;
                strv_free(refs);
                snprintf(ret->msg, sizeof(ret->msg), "%d %d %d", removed, kept, prune_agent_volumes());
                return;
        }
        case PS_RELAY_OPEN:
        case PS_PROXY_SET:
        case PS_PROXY_DROP:
        case PS_PROXY_STATS:
        case PS_DOCKER_PID:
        case PS_READY:
        case PS_PING:
        case PS_EGRESS_APPLY:
        case PS_EGRESS_REMOVE:
        case PS_RESULT:
        case PS_EGRESS_LIST:
        case PS_EGRESS_STATS:
                break;
        }
        privsep_refuse(ret, "message type %u is not a docker step", type);
}

bool privsep_docker_type(uint16_t t) {
        return t == PS_DOCKER_COMMIT || t == PS_DOCKER_PUSH || t == PS_DOCKER_VERIFY || t == PS_DOCKER_REMOVE ||
               t == PS_DOCKER_PRUNE;
}

int privsep_lookup_init(const struct agent_config *cfg, char *msg, size_t msglen) {
        dk_cfg = cfg;
        int r = docker_new(cfg->snap_docker_socket, &dk);
        if (r < 0)
                snprintf(msg, msglen, "cannot use the Docker socket %s: %s",
                         cfg->snap_docker_socket ? cfg->snap_docker_socket : DOCKER_SOCKET_DEFAULT, strerror(-r));
        return r;
}

int privsep_docker_init(const struct agent_config *cfg, char *msg, size_t msglen) {
        int r = privsep_lookup_init(cfg, msg, msglen);
        if (r < 0)
                return r;
        /* On success msg carries "network=<mode>" back to the parent: the gVisor network mode
         * of the runtime sandboxes here run with (the parent reports it with node.sync). */
        _cleanup_free_ char *mode = NULL;
        int k = cfg->runtime_network && *cfg->runtime_network ? docker_runtime_network(dk, cfg->runtime_network, &mode)
                                                                : -ENOENT;
        if (k == -ENOENT && cfg->runtime_network && *cfg->runtime_network)
                log_warning("[agent] runtime_network = %s: Docker knows no runtime of that name; the node reports its "
                            "sandbox network as unknown", cfg->runtime_network);
        else if (k < 0)
                log_warning("cannot read Docker's runtimes: %s", strerror(-k));
        snprintf(msg, msglen, "network=%s", k >= 0 && mode ? mode : "unknown");
        return 0;
}
