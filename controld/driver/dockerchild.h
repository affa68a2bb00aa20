/* dockerchild.h — controld's Docker access in a child process, the way OpenBSD's relayd and
 * smtpd (and nodeagent's privsep.c) keep privilege apart from parsing.
 *
 * The network-facing parent holds no docker group, no registry credentials (docker driver)
 * and, started as root, runs as [controld] user with no supplementary groups. The child,
 * forked before anything else starts, keeps the privileges and does only the calls of
 * dockerchild-allow.c's allowlist: Docker Engine endpoints controld uses (method, path,
 * names, request bodies checked), the snapshot registry's calls for controld's own
 * repositories, btrfs volume subvolumes under [docker] volume_root, and the files only root
 * may open (a sandbox agent's socket, a container's CPU burst file), handed back by
 * SCM_RIGHTS. Everything else is refused (-EPERM) and logged.
 *
 * Wire: a SOCK_SEQPACKET control socket carries only DC_OPEN messages, each with one fd: a
 * fresh SEQPACKET channel for one call. On that channel the parent sends one request (struct
 * dc_req and its arguments, exact size), the child answers once (struct dc_ans, maybe with
 * an fd) and then the body in DC_BODY chunks, and closes it. Calls run concurrently (one
 * thread per channel in the child). Neither side trusts a length from the other.
 *
 * The child exits when the parent goes (the control socket's EOF, and PR_SET_PDEATHSIG);
 * the parent logs and exits (status 1, for systemd to restart) when the child goes.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "err.h"

struct config;

/* Forks the child, which keeps cfg (its copy after fork()), and points this process's docker,
 * registry (docker driver only: Nomad job specs carry the credentials) and btrfs calls at it.
 * Call before any thread starts. 0, or -errno with the reason in err. */
int dockerchild_start(const struct config *cfg, struct err *err);
/* In the parent after dockerchild_start: forgets the registry credentials in cfg (docker
 * driver) and, when running as root with cfg's run_user set, becomes that user with no
 * supplementary groups; not root, drops supplementary groups where it can. 0 or -errno.
 * cfg (loaded from path) is kept for dockerchild_config. */
int dockerchild_drop(const char *path, struct config *cfg, struct err *err);
/* The config dockerchild_drop left (ownership moves to *ret) when path is the file it came
 * from, else config_load(path). */
int dockerchild_config(const char *path, struct config **ret, struct err *err);
/* main()'s start-up: loads path, dockerchild_start, dockerchild_drop; logs and returns -errno
 * on failure. */
int dockerchild_setup(const char *path);
bool dockerchild_running(void);
pid_t dockerchild_pid(void);

/* What the docker driver asks of the child besides Docker's API. */
/* A stream socket connected to sandbox_id's agent socket (the child opens it without following
 * links and checks its owner): the fd (O_CLOEXEC, O_NONBLOCK), or -errno. */
int dockerchild_agent_dial(const char *sandbox_id, int64_t deadline);
/* Waits up to timeout_ms for sandbox_id's agent socket: 0, -ENOENT when it did not appear. */
int dockerchild_agent_wait(const char *sandbox_id, int timeout_ms);
/* A container's CPU burst file (cpu.max.burst or cpu.cfs_burst_us under /sys/fs/cgroup)
 * opened O_WRONLY: the fd, or -errno. */
int dockerchild_cgroup_open(const char *path);
/* Bytes on disk under a checkpoint's directory <docker root>/containers/<id>/checkpoints/<name>,
 * or -errno. */
int64_t dockerchild_tree_bytes(const char *dir);

/* runsc's checkpoint of our container (full id) into its checkpoint directory <name>
 * (dd_runsc_checkpoint_here in the child). 0, -ENOENT when runsc has no state for it under
 * [docker] runsc_root (Docker's API must do it), or -errno with the reason. */
int dockerchild_runsc_checkpoint(const char *container_id, const char *name, int64_t timeout_ms, struct err *err);

/* A fork's steps on Docker's data root (docker-fork.c says what each does), done by the child. */
enum dd_fork_step { DD_FORK_STAGE = 1, DD_FORK_COPY, DD_FORK_UNSTAGE, DD_FORK_SWEEP };
int dockerchild_fork(int step, const char *src, const char *name, const char *dst, uint64_t limit_bytes, struct err *err);

/* For tests: the child's answer to a ping ("paddock controld docker child, protocol N") into
 * msg; one Docker API call as the docker client makes it (status and body xmalloc'd); a raw
 * message on a fresh channel (fd -1 = none): the child's r and message. */
int dockerchild_ping(char *msg, size_t msglen);
int dockerchild_docker_call(const char *method, const char *path, const char *body, size_t body_len, long timeout_ms,
                            long *ret_status, char **ret_body, size_t *ret_len);
int dockerchild_send_raw(const void *buf, size_t len, int fd, char *msg, size_t msglen);
