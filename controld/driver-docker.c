/* driver-docker.c — the embedded default: sandboxes as gVisor containers on the local Docker engine.
 *
 * One container per sandbox, named paddock-<sandbox id> and labelled with the
 * sandbox and account ids. deny_all sandboxes get no network at all (runsc
 * --network=none); restricted sandboxes sit on an internal network with no way
 * out until a node agent confirms an allowlist (fail closed); open sandboxes
 * use the Paddock bridge network under the passthrough runtime.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "driver.h"
#include "log.h"
#include "strutil.h"

struct ddriver {
        struct docker *docker;
};

static struct docker *D(struct driver *d) { return ((struct ddriver *) d->priv)->docker; }

void placement_clear(struct placement *p) {
        if (!p)
                return;
        free(p->container_id);
        free(p->node_id);
        free(p->job_id);
        free(p->alloc_id);
        free(p->ip);
        memset(p, 0, sizeof(*p));
}

static int dd_init(struct driver *d, char *err, size_t errlen) {
        struct config *cfg = d->ctl->cfg;
        struct docker_kv lbl[] = { { "paddock.managed", "1" } };
        int r = docker_ping(D(d));
        if (r < 0) {
                snprintf(err, errlen, "Docker engine at %s is not answering: %s", cfg->docker_socket, strerror(-r));
                return r;
        }
        r = docker_network_ensure(D(d), cfg->docker_network, cfg->docker_subnet, cfg->docker_gateway, false, lbl, 1);
        if (r < 0) {
                snprintf(err, errlen, "Failed to create Docker network %s (%s): %s", cfg->docker_network, cfg->docker_subnet,
                         *docker_last_error() ? docker_last_error() : strerror(-r));
                return r;
        }
        r = docker_network_ensure(D(d), cfg->docker_network_internal, cfg->docker_subnet_internal, NULL, true, lbl, 1);
        if (r < 0) {
                snprintf(err, errlen, "Failed to create Docker network %s (%s): %s", cfg->docker_network_internal,
                         cfg->docker_subnet_internal, *docker_last_error() ? docker_last_error() : strerror(-r));
                return r;
        }
        return 0;
}

static void dd_done(struct driver *d) {
        struct ddriver *p = d->priv;
        if (p) {
                docker_free(p->docker);
                free(p);
        }
        d->priv = NULL;
}

static const char *dmsg(int r) { return *docker_last_error() ? docker_last_error() : strerror(-r); }

static int dd_place(struct driver *d, const struct sandbox *sb, struct placement *ret, char *err, size_t errlen) {
        struct config *cfg = d->ctl->cfg;
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        _cleanup_free_ char *id = NULL;
        const char *cmd[] = { "tail", "-f", "/dev/null", NULL };
        const char *extra_hosts[] = { "metadata.google.internal:127.0.0.1", "metadata:127.0.0.1",
                                      "instance-data:127.0.0.1", "metadata.azure.internal:127.0.0.1", NULL };
        struct docker_kv labels[] = { { "paddock.sandbox", sb->id }, { "paddock.account", sb->account_id } };
        struct docker_mount mnt = { 0 };
        _cleanup_free_ char *vol_handle = NULL;
        bool deny = sb->egress_mode == PJ_EGRESS_DENY_ALL;
        bool restricted = sb->egress_mode == PJ_EGRESS_RESTRICTED;
        const char *runtime = deny ? cfg->docker_runtime : cfg->docker_runtime_net;
        struct docker_create_opts o = {
                .name = name,
                .image = sb->image,
                .cmd = cmd,
                .labels = labels,
                .n_labels = ELEMENTSOF(labels),
                .runtime = runtime,
                .network_mode = deny ? "none" : restricted ? cfg->docker_network_internal : cfg->docker_network,
                .memory_reservation = sb->memory * 1024 * 1024,
                .memory_bytes = sb->memory * 1024 * 1024 * 5 / 4,
                .cpu_shares = sb->cpu,
                .pids_limit = cfg->docker_pids_limit,
                .cap_drop_all = true,
                /* Under gVisor capabilities are confined to the sandbox kernel; runc gets none. */
                .cap_add_all = runtime && startswith(runtime, "runsc"),
                .no_new_privileges = true,
                .extra_hosts = extra_hosts,
        };
        int r;

        if (sb->volume_id) {
                vol_handle = xasprintf("paddock-vol-%s", sb->volume_id);
                mnt = (struct docker_mount) { .volume = vol_handle, .target = sb->mount_path ? sb->mount_path : "/workspace" };
                o.mounts = &mnt;
                o.n_mounts = 1;
        }

        /* A leftover container of the same sandbox (crash between steps) is replaced. */
        (void) docker_container_remove(D(d), name, true, false);

        r = docker_container_create(D(d), &o, &id);
        if (r < 0) {
                if (r == -ENOENT)
                        snprintf(err, errlen, "template image %s is not present on the node: %s", sb->image, dmsg(r));
                else
                        snprintf(err, errlen, "container create failed: %s", dmsg(r));
                return r;
        }
        r = docker_container_start(D(d), id);
        if (r < 0) {
                snprintf(err, errlen, "container start failed: %s", dmsg(r));
                goto unwind;
        }
        /* Wait (bounded) until the container reports running. */
        struct docker_container_state st;
        int64_t deadline = mono_ms() + (int64_t) cfg->create_timeout_s * 1000;
        for (;;) {
                r = docker_container_inspect(D(d), id, &st);
                if (r < 0) {
                        snprintf(err, errlen, "container inspect failed: %s", dmsg(r));
                        goto unwind;
                }
                if (st.running)
                        break;
                if (!st.exists || !strcmp(st.status, "exited") || !strcmp(st.status, "dead")) {
                        snprintf(err, errlen, "container exited during start (exit code %d)%s%s", st.exit_code,
                                 st.error[0] ? ": " : "", st.error);
                        r = -EIO;
                        goto unwind;
                }
                if (mono_ms() > deadline) {
                        snprintf(err, errlen, "container did not start within %llus", (unsigned long long) cfg->create_timeout_s);
                        r = -ETIMEDOUT;
                        goto unwind;
                }
                usleep(20 * 1000);
        }
        memset(ret, 0, sizeof(*ret));
        ret->container_id = TAKE_PTR(id);
        ret->node_id = xstrdup("local");
        ret->ip = xstrdup(st.ip);
        return 0;
unwind:
        (void) docker_container_remove(D(d), id, true, false);
        return r;
}

static int dd_remove(struct driver *d, const struct sandbox *sb, char *err, size_t errlen) {
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        int r = docker_container_remove(D(d), sb->container_id ? sb->container_id : name, true, false);
        if (r == -ENOENT && sb->container_id)
                r = docker_container_remove(D(d), name, true, false);
        if (r < 0 && r != -ENOENT) {
                snprintf(err, errlen, "container removal failed: %s", dmsg(r));
                return r;
        }
        return 0;
}

static int dd_running(struct driver *d, const struct sandbox *sb, int *ret_exit_code) {
        struct docker_container_state st;
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        int r = docker_container_inspect(D(d), sb->container_id ? sb->container_id : name, &st);
        if (r < 0)
                return r;
        if (ret_exit_code)
                *ret_exit_code = st.exit_code;
        return st.exists && st.running;
}

static int dd_sample(struct driver *d, const struct sandbox *sb, struct driver_sample *ret) {
        struct docker_stats s;
        int r = docker_container_stats(D(d), sb->container_id, &s);
        if (r < 0)
                return r;
        memset(ret, 0, sizeof(*ret));
        ret->valid = s.valid;
        ret->cpu_percent = s.cpu_percent;
        ret->mem_usage = s.mem_usage;
        /* Percent of the sandbox's memory spec, not of the host. */
        ret->mem_percent = sb->memory > 0 ? 100.0 * (double) s.mem_usage / ((double) sb->memory * 1024 * 1024) : 0;
        ret->net_bytes = s.net_rx + s.net_tx;
        return 0;
}

static int dd_volume_create(struct driver *d, const char *handle, char *err, size_t errlen) {
        struct docker_kv lbl[] = { { "paddock.volume", handle } };
        int r = docker_volume_create(D(d), handle, lbl, 1);
        if (r < 0)
                snprintf(err, errlen, "volume create failed: %s", dmsg(r));
        return r;
}

static int dd_volume_remove(struct driver *d, const char *handle, char *err, size_t errlen) {
        int r = docker_volume_remove(D(d), handle, false);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                snprintf(err, errlen, "volume removal failed: %s", dmsg(r));
        return r;
}

static int dd_list(struct driver *d, char ***ret) {
        char **ids = NULL;
        int r = docker_container_list(D(d), "paddock.sandbox", &ids);
        if (r < 0)
                return r;
        /* Map container ids to sandbox ids through the container name. */
        size_t n = 0;
        for (char **p = ids; p && *p; p++)
                n++;
        char **out = xnew0(char *, n + 1);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                struct docker_container_state st;
                if (docker_container_inspect(D(d), ids[i], &st) < 0 || !st.exists)
                        continue;
                (void) st;
                out[k++] = xstrdup(ids[i]);
        }
        docker_strv_free(ids);
        *ret = out;
        return 0;
}

static void *dd_exec_backend(struct driver *d) { return D(d); }

int driver_docker_new(struct ctl *c, struct driver **ret) {
        struct driver *d = xnew0(struct driver, 1);
        struct ddriver *p = xnew0(struct ddriver, 1);
        int r = docker_new(c->cfg->docker_socket, &p->docker);
        if (r < 0) {
                free(p);
                free(d);
                return r;
        }
        d->name = "docker";
        d->ctl = c;
        d->priv = p;
        d->init = dd_init;
        d->done = dd_done;
        d->place = dd_place;
        d->remove = dd_remove;
        d->running = dd_running;
        d->sample = dd_sample;
        d->volume_create = dd_volume_create;
        d->volume_remove = dd_volume_remove;
        d->list = dd_list;
        d->exec_backend = dd_exec_backend;
        *ret = d;
        return 0;
}

struct driver *driver_free(struct driver *d) {
        if (!d)
                return NULL;
        if (d->done)
                d->done(d);
        free(d);
        return NULL;
}
