/* docker-memory.c — pause with memory on the Docker driver: gVisor checkpoint/restore through
 * Docker's checkpoint API (the init parked first, unparked after). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "ddriver.h"
#include "docker.h"
#include "docker-checkpoint.h"
#include "fdio.h"
#include "dockerchild.h"
#include "dockerchild-private.h"
#include "driver.h"
#include "guest-conn.h"
#include "guest-exec.h"
#include "log.h"
#include "strutil.h"

/* How long a restore waits for containerd to drop the checkpoint's blob (dd_restore). */
#define RESTORE_RETRY_MS 30000
/* The longest runsc may take to write a checkpoint (a sandbox of many GiB on a slow disk). */
#define CHECKPOINT_TIMEOUT_MS 300000

static _Thread_local int64_t ckpt_walk_bytes;
static int ckpt_walk(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
        (void) path, (void) ftw;
        if (flag == FTW_F)
                ckpt_walk_bytes += (int64_t) st->st_blocks * 512;
        return 0;
}


int dd_checkpoint(struct driver *d, const struct sandbox *sb, const char *name, int64_t *ret_bytes, bool *ret_stopped,
                         struct err *err) {
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        struct err aerr = { 0 };
        *ret_stopped = false;
        if (!sb->container_id || !P(d)->root_dir)
                return err_set(err, -EOPNOTSUPP, "the sandbox has no container with an agent to checkpoint");
        int r = driver_guest_connect(d, sb, &cl, &aerr);
        if (r >= 0)
                r = guest_park(cl, 5000);
        cl = guest_client_free(cl);
        if (r < 0) {
                err_set(err, r, "the sandbox's agent could not be parked for the checkpoint: %s",
                        aerr.message[0] ? aerr.message : strerror(-r));
                /* It may have parked and failed to say so. */
                dd_unpark_agent(d, sb, sb->container_id, mono_ms() + 5000);
                return r;
        }
        /* runsc itself first (uncompressed, no copies: ~10x faster than Docker's API with
         * 100 MiB of heap here); Docker's API where runsc has no state for the container */
        struct err rerr = { 0 };
        int64_t t0 = mono_ms();
        r = -ENOENT;
        if (strlen(sb->container_id) == 64) {
                r = dockerchild_running() ? dockerchild_runsc_checkpoint(sb->container_id, name, CHECKPOINT_TIMEOUT_MS, &rerr)
                                          : dd_runsc_checkpoint_here(d->ctl->cfg, P(d)->root_dir, sb->container_id, name,
                                                                     CHECKPOINT_TIMEOUT_MS, &rerr);
                if (r >= 0)
                        log_debug("runsc checkpointed %s in %lld ms", sb->container_id, (long long) (mono_ms() - t0));
        }
        if (r == -ENOENT) {
                log_debug("checkpoint through Docker's API: %s", rerr.message);
                r = docker_checkpoint_create(D(d), sb->container_id, name, true);
        } else if (r < 0)
                docker_set_last_error(rerr.message);
        if (r < 0) {
                err_set(err, r, "the checkpoint failed: %s%s", dmsg(r),
                        r == -ENOENT ? " (does the Docker engine run with \"experimental\": true?)" : "");
                struct docker_container_state st;
                if (docker_container_inspect(D(d), sb->container_id, &st) >= 0 && st.exists && st.running)
                        dd_unpark_agent(d, sb, sb->container_id, mono_ms() + 5000);
                else
                        *ret_stopped = true;
                (void) docker_checkpoint_remove(D(d), sb->container_id, name);
                return r;
        }
        /* Docker may say running a moment after the checkpoint returned: stopped is the state
         * the pause records, so wait for it (bounded). */
        for (int i = 0; i < 250; i++) {
                struct docker_container_state st;
                if (docker_container_inspect(D(d), sb->container_id, &st) < 0 || !st.exists || !st.running)
                        break;
                usleep(20 * 1000);
        }
        _cleanup_free_ char *dir = xasprintf("%s/containers/%s/checkpoints/%s", P(d)->root_dir, sb->container_id, name);
        ckpt_walk_bytes = 0;
        if (dockerchild_running())
                ckpt_walk_bytes = dockerchild_tree_bytes(dir);
        else
                (void) nftw(dir, ckpt_walk, 8, FTW_PHYS);
        *ret_bytes = ckpt_walk_bytes > 0 ? ckpt_walk_bytes : 0;
        return 0;
}

/* Docker's checkpoint API exists only on an experimental daemon: asked each time (a daemon
 * restarted with it needs no controld restart). */
int dd_checkpoint_ready(struct driver *d, struct err *err) {
        int r = docker_experimental(D(d));
        if (r < 0)
                return err_set(err, r, "the Docker engine did not say whether it has experimental features: %s", dmsg(r));
        if (r == 0)
                return err_set(err, -EOPNOTSUPP, "the Docker engine at %s runs without experimental features, which its checkpoint "
                                                 "API needs (\"experimental\": true in daemon.json, see packaging/daemon.json)",
                               d->ctl->cfg->docker_socket);
        if (!P(d)->root_dir)
                return err_set(err, -EOPNOTSUPP, "sandboxes run without the in-sandbox agent (paddock-init), which the checkpoint "
                                                 "needs");
        return 0;
}

/* A networked sandbox restored on gVisor's own stack loses the first connection made to it
 * (measured here: it fails after 200-360 ms; every later one works at once). Before the resume
 * answers, one attempt of ours takes that loss: a connect to its port 9, refused or accepted
 * alike showing that its stack answers. At most a few tries of 1 s, until deadline; never an
 * error (the sandbox is restored either way). */
static void net_prime(const char *ip, int64_t deadline) {
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(9) };
        if (!ip || !*ip || inet_pton(AF_INET, ip, &sa.sin_addr) != 1)
                return;
        int64_t t0 = mono_ms(), until = t0 + 3000 < deadline ? t0 + 3000 : deadline;
        while (mono_ms() < until) {
                _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return;
                int e = connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 ? errno : 0;
                if (e == EINPROGRESS) {
                        int64_t step = mono_ms() + 1000;
                        socklen_t len = sizeof(e);
                        if (fd_wait(fd, POLLOUT, step < until ? step : until) < 0)
                                e = ETIMEDOUT;
                        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
                                e = errno;
                }
                if (e == 0 || e == ECONNREFUSED) {
                        log_debug("restored sandbox at %s answers on its network after %lld ms", ip, (long long) (mono_ms() - t0));
                        return;
                }
                usleep(20 * 1000);
        }
        log_warning("restored sandbox at %s did not answer on its network within %lld ms", ip, (long long) (mono_ms() - t0));
}

int dd_restore(struct driver *d, const struct sandbox *sb, const char *name, struct placement *ret, struct err *err) {
        int64_t deadline = mono_ms() + (int64_t) d->ctl->cfg->create_timeout_s * 1000;
        if (!sb->container_id)
                return err_set(err, -ENOENT, "the sandbox kept no container");
        /* Docker 20.10 restores by writing a tar of the checkpoint into containerd's content
         * store, and fails when a blob of that digest is there already ("content sha256:...:
         * already exists", moby#42900). Right after the checkpoint it is: containerd made the
         * same tar when it took the checkpoint, and it stays until containerd's garbage
         * collector runs after Docker dropped its image, on containerd's schedule (measured
         * 0.1-0.7 s, longer when collections are slow). Nothing else is wrong and the kept
         * container is untouched, so the restore is tried again, backing off, for a while;
         * giving up early made the resume start afresh, losing the container's files. */
        int64_t retry_until = mono_ms() + RESTORE_RETRY_MS;
        if (retry_until > deadline)
                retry_until = deadline;
        int r;
        for (int64_t wait_ms = 50;; wait_ms = wait_ms >= 1000 ? 2000 : wait_ms * 2) {
                r = docker_checkpoint_start(D(d), sb->container_id, name);
                if (r >= 0 || !strstr(docker_last_error(), "already exists") || mono_ms() + wait_ms > retry_until)
                        break;
                log_debug("restore from checkpoint %s: %s; trying again in %lldms", name, docker_last_error(),
                          (long long) wait_ms);
                usleep((useconds_t) wait_ms * 1000);
        }
        if (r < 0)
                return err_set(err, r, "the restore from checkpoint %s failed: %s", name, dmsg(r));
        struct docker_container_state st;
        r = docker_container_inspect(D(d), sb->container_id, &st);
        if (r < 0 || !st.exists || !st.running) {
                err_set(err, r < 0 ? r : -EIO, "the restored container is not running%s%s", r < 0 ? ": " : "",
                        r < 0 ? dmsg(r) : "");
                (void) docker_container_stop(D(d), sb->container_id, 0);
                return r < 0 ? r : -EIO;
        }
        /* A networked sandbox's restored stack has the address it had at the pause. Docker gives
         * a stopped container's address back to its pool, and starts it with whatever is free:
         * when another sandbox took it meanwhile, this one came back elsewhere, its stack on an
         * address that is not its own. It cannot run so: stopped, and the resume starts it
         * afresh (sandbox_restore_in_place), saying why. */
        if (sb->ip && *sb->ip && strcmp(sb->ip, st.ip) != 0) {
                err_set(err, -EADDRINUSE, "its network address %s was given to another sandbox while it was paused (it "
                        "came back as %s)", sb->ip, *st.ip ? st.ip : "none");
                (void) docker_container_stop(D(d), sb->container_id, 0);
                return -EADDRINUSE;
        }
        dd_unpark_agent(d, sb, sb->container_id, deadline);
        net_prime(st.ip, deadline);
        r = docker_checkpoint_remove(D(d), sb->container_id, name);
        if (r < 0 && r != -ENOENT)
                log_warning("cannot remove checkpoint %s after the restore: %s", name, dmsg(r));
        memset(ret, 0, sizeof(*ret));
        ret->container_id = xstrdup(sb->container_id);
        ret->node_id = xstrdup(d->ctl->cfg->docker_node_id);
        ret->ip = xstrdup(st.ip);
        return 0;
}
