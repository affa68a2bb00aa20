/* docker.c — the embedded default: sandboxes as gVisor containers on the local Docker engine.
 *
 * One container per sandbox, named paddock-<sandbox id> and labelled with the
 * sandbox and account ids. deny_all sandboxes get no network at all (runsc
 * --network=none); open and restricted sandboxes use the Paddock bridge network
 * under the passthrough runtime, where the node agent's firewall holds them
 * (controld marks them ready only when the agent confirmed). Without a node bus
 * restricted sandboxes sit on an internal network with no way out instead.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "btrfs.h"
#include "guest-secret.h"
#include "guest-conn.h"
#include "guest-exec.h"
#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "docker-checkpoint.h"
#include "dockerchild.h"
#include "driver.h"
#include "ddriver.h"
#include "log.h"
#include "strutil.h"
#include "unixsock.h"
#include "userimage.h"
#include "ctl-metrics.h"
#include "network.h"



/* A sandbox must run under gVisor: the runtime has to be one Docker knows and whose executable
 * is runsc (any directory, e.g. /usr/bin/runsc or /usr/local/bin/runsc-20240729). Anything else
 * (runc, crun, kata) is refused unless the config says allow_unsandboxed (tests only). */
static int check_runtime(struct driver *d, const char *key, const char *name, struct err *err) {
        struct config *cfg = d->ctl->cfg;
        _cleanup_free_ char *path = NULL;
        int r = docker_runtime_path(D(d), name, &path);
        if (r == -ENOENT)
                return err_set(err, -EINVAL,
                               "[docker] %s = %s: Docker knows no runtime of that name (register it in the daemon's "
                               "daemon.json \"runtimes\"; see packaging/daemon.json)",
                               key, name);
        if (r < 0)
                return err_set(err, r, "Failed to read Docker's runtimes: %s", dmsg(r));
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        /* runsc, or our wrapper that runs it in a mount namespace of its own (nodeagent/runsc-netns/) */
        if (startswith(base, "runsc") || !strcmp(base, "paddock-runsc-netns"))
                return 0;
        if (cfg->docker_allow_unsandboxed) {
                log_warning("[docker] %s = %s runs %s, which is not gVisor: sandboxes are NOT isolated from the host "
                            "(allowed by allow_unsandboxed = true; tests only)",
                            key, name, path);
                return 0;
        }
        return err_set(err, -EPERM,
                       "[docker] %s = %s runs '%s', which is not gVisor (runsc): sandboxes would share the host kernel. "
                       "Use a runsc runtime (see packaging/daemon.json), or set [docker] allow_unsandboxed = true in tests",
                       key, name, path);
}

/* Which disk limits hold here; logged once at start, and sandboxes are created either way.
 * specs.disk: Docker's StorageOpt size, which only some storage drivers accept (btrfs and zfs;
 * overlay2 only on XFS with pquota, which needs kernel quota support, so it is not assumed).
 * sizeGB: a btrfs subvolume with a qgroup limit per volume under [docker] volume_root. */
static void check_disk_caps(struct driver *d) {
        struct config *cfg = d->ctl->cfg;
        _cleanup_free_ char *drv = NULL;
        int r = docker_storage_driver(D(d), &drv);
        P(d)->disk_caps = r >= 0 && (!strcmp(drv, "btrfs") || !strcmp(drv, "zfs"));
        if (P(d)->disk_caps)
                log_info("disk limits: specs.disk is enforced (Docker storage driver %s, StorageOpt size)", drv);
        else
                log_warning("disk limits: specs.disk is NOT enforced: Docker's storage driver is %s, which takes no size "
                            "limit (put Docker's data-root on btrfs, storage-driver btrfs; see packaging/daemon.json)",
                            r < 0 ? "unknown" : drv);

        const char *root = cfg->docker_volume_root;
        P(d)->volume_caps = false;
        if (!root[0]) {
                log_warning("disk limits: volume sizeGB is NOT enforced: [docker] volume_root is not set");
                return;
        }
        r = btrfs_is_btrfs(root);
        if (r == 1 && (r = btrfs_quota_enable(root)) >= 0) {
                P(d)->volume_caps = true;
                log_info("disk limits: volume sizeGB is enforced (btrfs subvolumes with quota under %s)", root);
        } else if (r == 0)
                log_warning("disk limits: volume sizeGB is NOT enforced: [docker] volume_root %s is not on btrfs", root);
        else
                log_full_errno(LOG_WARNING, r, "disk limits: volume sizeGB is NOT enforced: [docker] volume_root %s: %m",
                               root);
}

static int dd_init(struct driver *d, struct err *err) {
        struct config *cfg = d->ctl->cfg;
        struct docker_kv lbl[] = { { "paddock.managed", "1" } };
        int r = docker_ping(D(d));
        if (r < 0)
                return err_set(err, r, "Docker engine at %s is not answering: %s", cfg->docker_socket, strerror(-r));
        if ((r = check_runtime(d, "runtime", cfg->docker_runtime, err)) < 0 ||
            (r = check_runtime(d, "runtime_network", cfg->docker_runtime_net, err)) < 0)
                return r;
        /* gVisor's own network stack, or the host kernel's: said at start and in /healthz. */
        _cleanup_free_ char *mode = NULL;
        if (docker_runtime_network(D(d), cfg->docker_runtime_net, &mode) >= 0)
                sandbox_network_note(NULL, mode);
        r = docker_network_ensure_bridge(D(d), cfg->docker_network, cfg->docker_subnet, cfg->docker_gateway, false,
                                         cfg->docker_bridge, lbl, 1);
        if (r < 0)
                return err_set(err, r, "Failed to create Docker network %s (%s): %s", cfg->docker_network, cfg->docker_subnet,
                               *docker_last_error() ? docker_last_error() : strerror(-r));
        r = docker_network_ensure(D(d), cfg->docker_network_internal, cfg->docker_subnet_internal, NULL, true, lbl, 1);
        if (r < 0)
                return err_set(err, r, "Failed to create Docker network %s (%s): %s", cfg->docker_network_internal,
                               cfg->docker_subnet_internal, *docker_last_error() ? docker_last_error() : strerror(-r));
        check_disk_caps(d);
        if (d->ctl->agent_binary && (r = docker_root_dir(D(d), &P(d)->root_dir)) < 0)
                return err_set(err, r, "Docker engine did not say its data root (for agent sockets): %s", dmsg(r));
        /* no fork of this controld is under way yet: what one cut short left goes */
        if (P(d)->root_dir && d->ctl->instance_id && strlen(d->ctl->instance_id) >= 12) {
                _cleanup_free_ char *prefix = xasprintf("fk%.12s", d->ctl->instance_id);
                (void) dd_fork_sweep(d, prefix);
        }
        return 0;
}

static int dd_ping(struct driver *d) { return docker_ping(D(d)); }

static void dd_done(struct driver *d) {
        struct ddriver *p = d->priv;
        if (p) {
                docker_free(p->docker);
                free(p->root_dir);
                free(p);
        }
        d->priv = NULL;
}


/* Pulls "<registry>/<repo>:<tag>" (a snapshot, or a template a user built) with the
 * [snapshots] credentials. */
static int pull_snapshot_image(struct driver *d, const char *image, struct err *err) {
        bool user_template = userimage_is(d->ctl->cfg, image);
        /* repo@sha256:... (by digest, what restores use) or repo:tag. */
        const char *slash = strrchr(image, '/'), *at = strchr(slash ? slash : image, '@');
        const char *colon = at ? at : strrchr(image, ':');
        if (!colon || (slash && colon < slash))
                return err_set(err, -EINVAL, "snapshot image %s has no tag", image);
        _cleanup_free_ char *repo = xstrndup(image, (size_t) (colon - image));
        struct registry reg = config_snapshot_registry(d->ctl->cfg);
        _cleanup_free_ char *auth = registry_auth_header_value(&reg);
        int64_t t0 = mono_ms();
        int r = docker_image_pull(D(d), repo, colon + 1, auth);
        if (r < 0)
                return err_set(err, r, "cannot pull the %s image %s: %s", user_template ? "template" : "snapshot", image, dmsg(r));
        metrics_observe_phase(d->ctl->metrics, user_template ? "template_pull" : "snapshot_pull",
                              (double) (mono_ms() - t0) / 1000.0);
        return 0;
}

/* The cgroup directory of pid's CPU controller: cgroup v1's cpu hierarchy when there is one
 * (*v2 = false), else the unified one. The path is read from the host's /proc for a host
 * process (the container's runtime), never from anything the sandbox writes. */
static int cpu_cgroup_dir(int pid, char *dir, size_t n, bool *v2) {
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/cgroup", pid);
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        if (!f)
                return -errno;
        char line[1024], unified[1024] = "";
        while (fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = 0;
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2 || c2[1] != '/' || strstr(c2 + 1, "/..") || strlen(c2 + 1) > 512)
                        continue;
                *c2 = 0;
                if (!strcmp(line, "0") && c1[1] == 0) {
                        snprintf(unified, sizeof(unified), "%s", c2 + 1);
                        continue;
                }
                for (char *save = NULL, *t = strtok_r(c1 + 1, ",", &save); t; t = strtok_r(NULL, ",", &save))
                        if (!strcmp(t, "cpu")) {
                                const char *mnt = access("/sys/fs/cgroup/cpu", F_OK) == 0 ? "/sys/fs/cgroup/cpu"
                                                                                          : "/sys/fs/cgroup/cpu,cpuacct";
                                snprintf(dir, n, "%s%s", mnt, c2 + 1);
                                *v2 = false;
                                return 0;
                        }
        }
        if (!unified[0])
                return -ENOENT;
        snprintf(dir, n, "/sys/fs/cgroup%s", unified);
        *v2 = true;
        return 0;
}

/* CFS burst (Linux 5.14+): a sandbox may bank up to `cpu_burst`% of its quota while idle
 * and spend it above the quota later, so the first command after a pause runs at full speed
 * instead of being throttled mid-spawn (gVisor's spawn is CPU-heavy: ~25 ms of CPU here,
 * half a 500-millicore period). The long-run average stays at the quota. Docker has no
 * setting for it, so it is written to the container's cgroup. Best effort: a kernel or
 * cgroup layout without it keeps the plain quota (said once). */
static void cpu_burst_apply(struct driver *d, int64_t nano_cpus, int pid) {
        static atomic_bool said;
        int64_t pct = d->ctl->cfg->docker_cpu_burst;
        if (pct <= 0 || pid <= 0)
                return;
        int64_t quota_us = nano_cpus / 10000;   /* the quota Docker sets for NanoCpus: its period is 100 ms */
        int64_t burst_us = quota_us * pct / 100;
        char dir[600], file[700], val[32];
        bool v2 = false;
        int r = cpu_cgroup_dir(pid, dir, sizeof(dir), &v2);
        if (r >= 0) {
                snprintf(file, sizeof(file), "%s/%s", dir, v2 ? "cpu.max.burst" : "cpu.cfs_burst_us");
                int fd = dockerchild_running() ? dockerchild_cgroup_open(file) : open(file, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
                errno = fd < 0 && dockerchild_running() ? -fd : errno;
                int len = snprintf(val, sizeof(val), "%lld\n", (long long) burst_us);
                r = fd < 0 ? -errno : write(fd, val, (size_t) len) == len ? 0 : -errno;
                if (fd >= 0)
                        close(fd);
        } else
                snprintf(file, sizeof(file), "/proc/%d/cgroup", pid);
        if (r < 0 && !atomic_exchange(&said, true))
                log_notice("sandboxes get no CPU burst (%s: %s); they are held to their quota in every 100 ms period", file,
                           strerror(-r));
}


static void agent_parts_remove(struct driver *d, const char *sandbox_id);

static int dd_place(struct driver *d, const struct sandbox *sb, struct placement *ret, struct err *err) {
        struct config *cfg = d->ctl->cfg;
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        _cleanup_free_ char *id = NULL;
        const char *cmd[] = { "tail", "-f", "/dev/null", NULL };
        const char *extra_hosts[] = { "metadata.google.internal:127.0.0.1", "metadata:127.0.0.1",
                                      "instance-data:127.0.0.1", "metadata.azure.internal:127.0.0.1", NULL };
        /* A warm-pool member is made for no account, and Docker cannot relabel a container when
         * one claims it: it says paddock.pooled=1 instead of an account that would go stale. The
         * owner of every sandbox is in its record (controld admin sandbox list --account). */
        bool pooled = !sb->account_id[0];
        struct docker_kv labels[] = { { "paddock.sandbox", sb->id },
                                      { "paddock.controld", d->ctl->instance_id },
                                      { pooled ? "paddock.pooled" : "paddock.account", pooled ? "1" : sb->account_id } };
        struct docker_mount mnts[4 + DOCKER_IMAGE_VOLUMES_MAX] = { { 0 } };
        size_t n_mnts = 0;
        _cleanup_free_ char *vol_handle = NULL, *run_vol = NULL, *secret_path = NULL;
        bool agent = d->ctl->agent_binary != NULL;
        bool deny = sb->egress.mode == PJ_EGRESS_DENY_ALL;
        bool restricted = sb->egress.mode == PJ_EGRESS_RESTRICTED;
        const char *runtime = deny ? cfg->docker_runtime : cfg->docker_runtime_net;
        struct docker_create_opts o = {
                .name = name,
                .image = sb->image,
                .cmd = agent ? NULL : cmd,
                .entrypoint = agent ? guest_entrypoint() : NULL,
                .labels = labels,
                .n_labels = ELEMENTSOF(labels),
                .runtime = runtime,
                /* With node agents, restricted sandboxes share the bridge and their allowlist is the
                 * agent's firewall; without, the internal network is all we have. */
                .network_mode = deny ? "none" : restricted && !d->ctl->bus ? cfg->docker_network_internal : cfg->docker_network,
                .memory_reservation = sb->memory * 1024 * 1024,
                .memory_bytes = sb->memory * 1024 * 1024 * 5 / 4,
                /* specs.cpu is millicores and a hard cap (CFS quota): 500 = half a core, even on an
                 * idle host. The shares keep the relative weight when the host is contended. */
                .nano_cpus = (sb->cpu < 10 ? 10 : sb->cpu) * 1000000,   /* Docker's floor: 0.01 CPU */
                .cpu_shares = sb->cpu,
                .pids_limit = cfg->docker_pids_limit,
                .cap_drop_all = true,
                /* Under gVisor capabilities are confined to the sandbox kernel; runc gets none. */
                .cap_add_all = runtime && startswith(runtime, "runsc"),
                .no_new_privileges = true,
                /* PID 1 reaps what killed exec trees leave behind: our agent, else tini. */
                .init = !agent,
                .extra_hosts = extra_hosts,
                .storage_size_gb = P(d)->disk_caps ? sb->disk : 0,
                /* An image's HEALTHCHECK would be run by the host's Docker, as often as the image
                 * says, outside the sandbox's CPU quota: none runs. */
                .no_healthcheck = true,
        };
        _cleanup_strv_free_ char **image_vols = NULL;
        int r;

        if (sb->volume_id) {
                vol_handle = xasprintf("paddock-vol-%s", sb->volume_id);
                mnts[n_mnts++] = (struct docker_mount) { .volume = vol_handle,
                                                         .target = sb->mount_path ? sb->mount_path : "/workspace" };
        }
        if (agent) {
                /* The agent: its binary and secret read-only, its socket directory a small tmpfs
                 * (the sandbox can write there) that runsc --host-uds=create makes the socket in. */
                run_vol = xasprintf(PJ_AGENT_VOLUME_PREFIX "%s", sb->id);
                struct docker_kv vl[] = { { "paddock.sandbox", sb->id }, { "paddock.controld", d->ctl->instance_id } };
                r = docker_volume_create_tmpfs(D(d), run_vol, GUEST_RUN_BYTES, vl, ELEMENTSOF(vl));
                if (r >= 0)
                        r = guest_secret_write(d->ctl->agent_dir, d->ctl->agent_key, sb->id);
                if (r < 0) {
                        err_set(err, r, "cannot prepare the sandbox agent: %s", dmsg(r));
                        goto unwind;
                }
                secret_path = guest_secret_path(d->ctl->agent_dir, sb->id);
                mnts[n_mnts++] = (struct docker_mount) { .bind = d->ctl->agent_binary, .target = GUEST_IN_BINARY, .read_only = true };
                mnts[n_mnts++] = (struct docker_mount) { .bind = secret_path, .target = GUEST_IN_SECRET, .read_only = true };
                mnts[n_mnts++] = (struct docker_mount) { .volume = run_vol, .target = GUEST_IN_RUN };
        }
        /* The image's VOLUMEs: Docker would make an anonymous volume under its data root for
         * each (outside the sandbox's disk cap, and kept after the container). A tmpfs of the
         * sandbox's memory size goes over each instead: its pages count in the sandbox's memory
         * and it ends with the container. A snapshot or a user's template is fetched first. */
        r = docker_image_volumes(D(d), sb->image, &image_vols);
        if (r == -ENOENT && (sb->from_snapshot || userimage_is(d->ctl->cfg, sb->image))) {
                if ((r = pull_snapshot_image(d, sb->image, err)) < 0)
                        goto unwind;
                r = docker_image_volumes(D(d), sb->image, &image_vols);
        }
        if (r == -E2BIG || r == -EDOM) {
                if (r == -E2BIG)
                        err_set(err, -EINVAL, "image %s declares more than %d VOLUMEs; it cannot run as a sandbox", sb->image,
                                DOCKER_IMAGE_VOLUMES_MAX);
                else
                        err_set(err, -EINVAL, "image %s declares a VOLUME that is not an absolute path below /; it cannot "
                                              "run as a sandbox", sb->image);
                r = -EINVAL;
                goto unwind;
        }
        if (r < 0 && r != -ENOENT) {
                err_set(err, r, "cannot inspect the image %s: %s", sb->image, dmsg(r));
                goto unwind;
        }
        for (char **v = image_vols; v && *v; v++) {
                bool taken = false;
                for (size_t i = 0; i < n_mnts; i++)
                        taken = taken || !strcmp(mnts[i].target, *v);
                if (!taken)
                        mnts[n_mnts++] = (struct docker_mount) { .target = *v,
                                                                 .tmpfs_bytes = (int64_t) (sb->memory > 0 ? sb->memory : 64) << 20 };
        }
        o.mounts = n_mnts ? mnts : NULL;
        o.n_mounts = n_mnts;

        /* A leftover container of the same sandbox (crash between steps) is replaced. */
        (void) docker_container_remove(D(d), name, true, true);

        r = docker_container_create(D(d), &o, &id);
        /* A snapshot lives in the registry; this node fetches it on first use. Twice at most:
         * the agent's prune may take an unused image between our pull and our create. */
        for (int attempt = 0; r == -ENOENT && (sb->from_snapshot || userimage_is(d->ctl->cfg, sb->image)) && attempt < 2;
             attempt++) {
                r = pull_snapshot_image(d, sb->image, err);
                if (r < 0)
                        goto unwind;
                r = docker_container_create(D(d), &o, &id);
        }
        if (r < 0) {
                if (r == -ENOENT)
                        err_set(err, r, "template image %s is not present on the node: %s", sb->image, dmsg(r));
                else
                        err_set(err, r, "container create failed: %s", dmsg(r));
                goto unwind;
        }
        if (sb->fork_container) {
                /* a fork's child: the source's filesystem and memory, restored (docker-fork.c) */
                if ((r = dd_fork_restore(d, sb, id, err)) < 0)
                        goto unwind;
        } else if ((r = docker_container_start(D(d), id)) < 0) {
                err_set(err, r, "container start failed: %s", dmsg(r));
                goto unwind;
        }
        /* Wait (bounded) until the container reports running. */
        struct docker_container_state st;
        int64_t deadline = mono_ms() + (int64_t) cfg->create_timeout_s * 1000;
        for (;;) {
                r = docker_container_inspect(D(d), id, &st);
                if (r < 0) {
                        err_set(err, -EIO, "container inspect failed: %s", dmsg(r));
                        goto unwind;
                }
                if (st.running)
                        break;
                if (!st.exists || !strcmp(st.status, "exited") || !strcmp(st.status, "dead")) {
                        r = err_set(err, -EIO, "container exited during start (exit code %d)%s%s", st.exit_code,
                                    st.error[0] ? ": " : "", st.error);
                        goto unwind;
                }
                if (mono_ms() > deadline) {
                        r = err_set(err, -ETIMEDOUT, "container did not start within %llus", (unsigned long long) cfg->create_timeout_s);
                        goto unwind;
                }
                usleep(20 * 1000);
        }
        cpu_burst_apply(d, o.nano_cpus, st.pid);
        if (agent && sb->fork_container) {
                /* parked at the checkpoint: it listens again, with this sandbox's secret */
                dd_unpark_agent(d, sb, id, deadline);
                r = docker_checkpoint_remove(D(d), id, sb->fork_name);
                if (r < 0 && r != -ENOENT)
                        log_warning("cannot remove the fork's checkpoint %s: %s", sb->fork_name, dmsg(r));
        } else if (agent)
                wait_agent_socket(d, sb, deadline);
        memset(ret, 0, sizeof(*ret));
        ret->container_id = TAKE_PTR(id);
        ret->node_id = xstrdup(d->ctl->cfg->docker_node_id);
        ret->ip = xstrdup(st.ip);
        return 0;
unwind:
        if (id)
                (void) docker_container_remove(D(d), id, true, true);
        if (agent)
                agent_parts_remove(d, sb->id);
        return r;
}

/* The agent's socket volume and secret of a sandbox whose container is gone. */
static void agent_parts_remove(struct driver *d, const char *sandbox_id) {
        _cleanup_free_ char *run_vol = xasprintf(PJ_AGENT_VOLUME_PREFIX "%s", sandbox_id);
        int r = docker_volume_remove(D(d), run_vol, true);
        if (r < 0 && r != -ENOENT)
                log_warning("cannot remove the agent volume %s: %s", run_vol, dmsg(r));
        guest_secret_remove(d->ctl->agent_dir, sandbox_id);
}

static int dd_remove(struct driver *d, const struct sandbox *sb, struct err *err) {
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        int r = docker_container_remove(D(d), sb->container_id ? sb->container_id : name, true, true);
        if (r == -ENOENT && sb->container_id)
                r = docker_container_remove(D(d), name, true, true);
        if (r < 0 && r != -ENOENT)
                return err_set(err, r, "container removal failed: %s", dmsg(r));
        agent_parts_remove(d, sb->id);
        return 0;
}

static int dd_running(struct driver *d, const struct sandbox *sb, int *ret_exit_code) {
        struct docker_container_state st;
        _cleanup_free_ char *name = xasprintf("paddock-%s", sb->id);
        int r = docker_container_inspect(D(d), sb->container_id ? sb->container_id : name, &st);
        if (r < 0)
                return r;
        if (ret_exit_code)
                *ret_exit_code = st.exists ? st.exit_code : -1;   /* -1: no container left to say */
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
        ret->cpu_total_ns = s.cpu_total_ns;
        ret->system_ns = s.system_ns;
        ret->online_cpus = s.online_cpus;
        return 0;
}

/* With volume caps the volume is a capped btrfs subvolume <volume_root>/<handle>, bound into
 * Docker as a local volume; otherwise a plain Docker volume. */
static int dd_volume_create(struct driver *d, const char *handle, int64_t size_gb, struct err *err) {
        const char *root = d->ctl->cfg->docker_volume_root;
        struct docker_kv lbl[] = { { "paddock.volume", handle } };
        _cleanup_free_ char *dev = NULL;
        bool made = false;
        int r;

        if (P(d)->volume_caps) {
                r = btrfs_subvol_create_capped(root, handle, size_gb > 0 ? (uint64_t) size_gb << 30 : 0);
                if (r < 0 && r != -EEXIST) {   /* EEXIST: a retry after a crash; keep what is there */
                        return err_set(err, r, "volume create failed: subvolume %s/%s: %s", root, handle, strerror(-r));
                }
                made = r >= 0;
                dev = xasprintf("%s/%s", root, handle);
        }
        r = docker_volume_create_bind(D(d), handle, dev, lbl, 1);
        if (r < 0) {
                err_set(err, r, "volume create failed: %s", dmsg(r));
                if (made)
                        (void) btrfs_subvol_destroy(root, handle);
        }
        return r;
}

static int dd_volume_remove(struct driver *d, const char *handle, struct err *err) {
        const char *root = d->ctl->cfg->docker_volume_root;
        int r = docker_volume_remove(D(d), handle, false);
        if (r < 0 && r != -ENOENT)
                return err_set(err, r, "volume removal failed: %s", dmsg(r));
        /* The data of a capped volume is its subvolume; Docker's removal leaves it. */
        if (root[0] && btrfs_is_btrfs(root) == 1) {
                int k = btrfs_subvol_destroy(root, handle);
                if (k < 0 && k != -ENOENT)
                        return err_set(err, k, "volume removal failed: subvolume %s/%s: %s", root, handle, strerror(-k));
        }
        return 0;
}

static int dd_list(struct driver *d, char ***ret) {
        _cleanup_free_ char *filter = xasprintf("paddock.controld=%s", d->ctl->instance_id);
        char **ids = NULL;
        int r = docker_container_list(D(d), filter, &ids);
        if (r < 0)
                return r;
        size_t n = 0;
        for (char **p = ids; p && *p; p++)
                n++;
        char **out = xnew0(char *, n + 1);
        size_t k = 0;
        /* Our containers are named paddock-<sandbox id>. */
        for (size_t i = 0; i < n; i++) {
                struct docker_container_state st;
                if (docker_container_inspect(D(d), ids[i], &st) < 0 || !st.exists || !startswith(st.name, "paddock-") ||
                    !hexid_valid(st.name + 8))
                        continue;
                out[k++] = xstrdup(st.name + 8);
        }
        strv_free(ids);
        *ret = out;
        return 0;
}

static int dd_remove_by_id(struct driver *d, const char *sandbox_id) {
        _cleanup_free_ char *name = xasprintf("paddock-%s", sandbox_id);
        int r = docker_container_remove(D(d), name, true, true);
        if (r < 0 && r != -ENOENT)
                return r;
        agent_parts_remove(d, sandbox_id);
        return 0;
}

static int dd_agent_socket(struct driver *d, const struct sandbox *sb, char **ret_path, struct err *err) {
        if (!P(d)->root_dir)
                return err_set(err, -EOPNOTSUPP, "the driver has no agent sockets");
        *ret_path = xasprintf("%s/volumes/" PJ_AGENT_VOLUME_PREFIX "%s/_data/" PJ_AGENT_SOCKET_NAME, P(d)->root_dir, sb->id);
        return 0;
}

/* Under the docker child only it may open the socket (Docker's data root is root's). */
static int dd_agent_dial(struct driver *d, const struct sandbox *sb, int64_t deadline, struct err *err) {
        _cleanup_free_ char *path = NULL;
        if (!dockerchild_running()) {
                int r = dd_agent_socket(d, sb, &path, err);
                return r < 0 ? r : unix_connect_nofollow(path, deadline);
        }
        int fd = dockerchild_agent_dial(sb->id, deadline);
        if (fd < 0)
                return err_set(err, fd, "the sandbox's agent socket: %s", strerror(-fd));
        return fd;
}

static int dd_image_size(struct driver *d, const char *image, int64_t *ret_bytes) {
        return docker_image_size(D(d), image, ret_bytes);
}

static int dd_image_remove(struct driver *d, const char *image) {
        return docker_image_remove(D(d), image, false);
}


static const struct driver_ops docker_ops = {
        .init = dd_init,
        .ping = dd_ping,
        .done = dd_done,
        .place = dd_place,
        .remove = dd_remove,
        .checkpoint = dd_checkpoint,
        .checkpoint_ready = dd_checkpoint_ready,
        .restore = dd_restore,
        .fork_stage = dd_fork_stage,
        .fork_unstage = dd_fork_unstage,
        .running = dd_running,
        .sample = dd_sample,
        .volume_create = dd_volume_create,
        .volume_remove = dd_volume_remove,
        .list = dd_list,
        .remove_by_id = dd_remove_by_id,
        .agent_socket = dd_agent_socket,
        .agent_dial = dd_agent_dial,
        .oom_killed = dd_oom_killed,
        .image_size = dd_image_size,
        .image_remove = dd_image_remove,
        .exec_start = dd_exec_start,
        .exec_write = dd_exec_write,
        .exec_close_stdin = dd_exec_close_stdin,
        .exec_read = dd_exec_read,
        .exec_exit_code = dd_exec_exit_code,
        .exec_oom_killed = dd_exec_oom_killed,
        .exec_free = dd_exec_free,
};

int driver_docker_new(struct ctl *c, struct driver **ret) {
        struct driver *d = xnew0(struct driver, 1);
        struct ddriver *p = xnew0(struct ddriver, 1);
        int r = docker_new(c->cfg->docker_socket, &p->docker);
        if (r < 0) {
                free_many(p, d);
                return r;
        }
        d->name = "docker";
        d->ctl = c;
        d->priv = p;
        d->ops = &docker_ops;
        *ret = d;
        return 0;
}
