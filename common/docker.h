/* docker.h — Docker Engine API 1.41 client over the daemon's unix socket.
 *
 * Normal calls go through httpc (libcurl); exec streams are hijacked on a raw
 * AF_UNIX socket. Thread-safe: a struct docker only holds the socket path and
 * may be shared between threads. No global state except a thread-local copy of
 * the last error message Docker sent ({"message": ...}).
 *
 * Every function returns 0 (or a documented positive value) on success and
 * -errno on failure; ret_* out-params are only written on success. HTTP status
 * mapping: 404 -> -ENOENT, 409 -> -EEXIST (-EBUSY where Docker means "in use";
 * -ESRCH where it means "container is not running"), 400 -> -EINVAL,
 * 401/403 -> -EACCES, 500 and anything else -> -EIO. Transport failures:
 * -ECONNREFUSED, -ENOENT (no socket), -ETIMEDOUT. Names and ids passed in are
 * validated (-EINVAL) and URL-escaped; nothing passes through a shell.
 * Never logs above debug.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strutil.h"   /* strv_free() for docker_container_list() results */

#define DOCKER_API_PREFIX "/v1.41"
#define DOCKER_SOCKET_DEFAULT "/var/run/docker.sock"
#define DOCKER_EXEC_CAP_DEFAULT ((size_t) 1 << 20)

struct docker;

/* socket_path NULL -> /var/run/docker.sock. Does not connect. */
int docker_new(const char *socket_path, struct docker **ret);
struct docker *docker_free(struct docker *d);   /* NULL-safe, returns NULL */

/* Docker's message for the calling thread's last failed call; "" when the last
 * call succeeded or the failure was not Docker's (e.g. transport). Never NULL. */
const char *docker_last_error(void);

int docker_ping(struct docker *d);
/* Both out-params optional; xmalloc'd. */
int docker_version(struct docker *d, char **ret_version, char **ret_api);

/* The executable Docker runs for the named OCI runtime (its "path" in /info Runtimes,
 * xmalloc'd; may be a bare name like "runc"). -ENOENT: Docker knows no such runtime. */
int docker_runtime_path(struct docker *d, const char *name, char **ret_path);
/* A manifest digest as registries name manifests and pulls take it in place of a tag:
 * "sha256:" and 64 lowercase hex digits. */
bool docker_valid_digest(const char *s);
/* The gVisor network mode the named runtime runs sandboxes with: the value of its last
 * --network= argument ("sandbox", runsc's own netstack, when it has none; "host" means the
 * sandbox's socket calls go to the host kernel), xmalloc'd. -ENOENT: no such runtime. */
int docker_runtime_network(struct docker *d, const char *name, char **ret_mode);

/* The daemon's storage driver (/info "Driver", e.g. "overlay2", "btrfs"), xmalloc'd. */
int docker_storage_driver(struct docker *d, char **ret_driver);
/* The daemon's data root (/info "DockerRootDir", e.g. "/var/lib/docker"), xmalloc'd. */
int docker_root_dir(struct docker *d, char **ret_dir);

struct docker_kv { const char *key, *value; };
/* A named volume (volume), a host path bound in (bind: absolute, the caller's own path), or,
 * with neither, a tmpfs of tmpfs_bytes (> 0) that lives and dies with the container. */
struct docker_mount { const char *volume; const char *target; bool read_only; const char *bind; int64_t tmpfs_bytes; };

struct docker_create_opts {
        const char *name;                /* optional */
        const char *image;
        const char *const *entrypoint;   /* NULL-terminated, optional (image default) */
        const char *const *cmd;          /* NULL-terminated, optional (image default) */
        const char *const *env;          /* "K=V", NULL-terminated */
        const struct docker_kv *labels;
        size_t n_labels;
        const char *runtime;             /* e.g. "runsc"; NULL = daemon default */
        const char *network_mode;        /* "none" or a network name; NULL = daemon default */
        int64_t memory_bytes;            /* HostConfig.Memory (the max); 0 = unlimited */
        int64_t memory_reservation;      /* HostConfig.MemoryReservation */
        int64_t nano_cpus;
        int64_t cpu_shares;
        int64_t pids_limit;              /* 0 = unlimited */
        bool cap_drop_all, cap_add_all, no_new_privileges, init;
        const char *const *extra_hosts;  /* "metadata.google.internal:127.0.0.1" */
        const struct docker_mount *mounts;
        size_t n_mounts;
        const char *working_dir;
        const char *user;
        int64_t tmpfs_size_bytes;        /* > 0: tmpfs on /tmp of that size (rw,nosuid,nodev) */
        int64_t storage_size_gb;         /* > 0: HostConfig.StorageOpt size (the writable layer's cap;
                                          * only btrfs, zfs and overlay2 on XFS pquota accept it) */
        bool no_healthcheck;             /* Config.Healthcheck {"Test":["NONE"]}: the image's HEALTHCHECK
                                          * never runs (the host would run it, outside the container's quota) */
};
/* -ENOENT: no such image (not pulled), -EEXIST: name taken, -EINVAL: e.g. unknown runtime.
 * *ret_id is the full id, xmalloc'd. */
int docker_container_create(struct docker *d, const struct docker_create_opts *o, char **ret_id);
int docker_container_start(struct docker *d, const char *id);          /* 304 (already running) counts as success */
/* Sends SIGTERM, SIGKILL after timeout_s. Already stopped counts as success. */
int docker_container_stop(struct docker *d, const char *id, int timeout_s);
/* signal NULL = "SIGKILL". -ESRCH if the container is not running. */
int docker_container_kill(struct docker *d, const char *id, const char *signal);
/* -ENOENT if missing, -EBUSY if running (without force) or removal already in progress. */
int docker_container_remove(struct docker *d, const char *id, bool force, bool remove_volumes);

struct docker_container_state {
        bool exists, running;
        bool oom_killed;          /* State.OOMKilled: the kernel's OOM killer hit the container */
        int exit_code;
        int pid;                  /* State.Pid: the container's first process on the host (0 if none) */
        char status[32];          /* created|running|paused|restarting|removing|exited|dead */
        char ip[64];              /* first network's IPAddress, "" if none */
        char started_at[40], finished_at[40];
        char id[80];
        char name[128];           /* without Docker's leading '/' */
        char error[256];
};
/* A missing container is not an error: returns 0 with ret->exists == false. */
int docker_container_inspect(struct docker *d, const char *id_or_name, struct docker_container_state *ret);

/* Full ids of containers in any state whose label matches label_filter ("key" or
 * "key=value"). *ret_ids is NULL-terminated; free with strv_free(). */
int docker_container_list(struct docker *d, const char *label_filter, char ***ret_ids);

/* Creating an existing volume returns 0 (Docker keeps the existing one and its labels). */
int docker_volume_create(struct docker *d, const char *name, const struct docker_kv *labels, size_t n);
/* The same, as a local volume bound to an existing host directory (absolute device path;
 * driver opts type=none, o=bind). Removing the volume leaves the directory. */
int docker_volume_create_bind(struct docker *d, const char *name, const char *device, const struct docker_kv *labels,
                              size_t n);
/* A local volume that is a tmpfs of size_bytes (mode 0700, nosuid, nodev, noexec), mounted
 * by Docker while a container uses it (at <root>/volumes/<name>/_data). */
int docker_volume_create_tmpfs(struct docker *d, const char *name, int64_t size_bytes, const struct docker_kv *labels,
                               size_t n);
/* -ENOENT if missing, -EBUSY if in use. */
int docker_volume_remove(struct docker *d, const char *name, bool force);
/* Volumes no container uses whose name starts with prefix, with their creation time (seconds
 * since the epoch; 0 when Docker's CreatedAt does not parse). *ret (n entries) is freed with
 * docker_volume_info_free. */
struct docker_volume_info {
        char *name;
        int64_t created_s;
        char *label;            /* the labelled list's label value; NULL otherwise */
};
int docker_volume_list_dangling(struct docker *d, const char *prefix, struct docker_volume_info **ret, size_t *ret_n);
/* The same for volumes no container uses that carry the label key (any value, in ->label). */
int docker_volume_list_dangling_labelled(struct docker *d, const char *label, struct docker_volume_info **ret,
                                         size_t *ret_n);
void docker_volume_info_free(struct docker_volume_info *v, size_t n);
/* Creates a bridge network if no network of that exact name exists; existing -> 0 (its
 * settings are not compared). subnet/gateway optional. */
int docker_network_ensure(struct docker *d, const char *name, const char *subnet, const char *gateway,
                          bool internal, const struct docker_kv *labels, size_t n);
/* The same, naming the Linux bridge (com.docker.network.bridge.name, at most 15 characters)
 * when the network is created; bridge NULL = Docker picks "br-<id>". An existing network is
 * left as it is. */
int docker_network_ensure_bridge(struct docker *d, const char *name, const char *subnet, const char *gateway,
                                 bool internal, const char *bridge, const struct docker_kv *labels, size_t n);
/* -ENOENT if missing, -EBUSY if containers are still attached. */
int docker_network_remove(struct docker *d, const char *name);

struct docker_stats {
        double cpu_percent;       /* of one CPU * online CPUs (docker stats semantics); 0 on a first sample */
        uint64_t mem_usage;       /* usage minus inactive file cache, like `docker stats` */
        uint64_t mem_limit;
        uint64_t net_rx, net_tx;  /* summed over interfaces */
        /* Raw counters so a caller sampling periodically can compute CPU% between its own
         * samples (a one-shot sample has no previous one): ns of CPU used by the container,
         * ns of host CPU time, online CPUs. */
        uint64_t cpu_total_ns, system_ns;
        unsigned online_cpus;
        bool valid;               /* false when Docker had no numbers (e.g. container not running) */
};
/* One sample (stream=false&one-shot=true). */
int docker_container_stats(struct docker *d, const char *id, struct docker_stats *ret);

/* 1 yes, 0 no, < 0 error. */
int docker_image_exists(struct docker *d, const char *ref);

/* The mount points an image's config declares (the keys of its "Volumes", the Dockerfile's
 * VOLUME), for which Docker makes an anonymous volume under its data root at create unless
 * something else is mounted there. config is the image config's "config" object (an inspect's
 * "Config"); NULL or no Volumes: an empty list. Each path cleaned as Docker cleans it (no
 * '.', '..', repeated or trailing '/'), sorted, without repeats. -E2BIG: more than
 * DOCKER_IMAGE_VOLUMES_MAX; -EDOM: a path that is not absolute, is "/" or has a control
 * byte. *ret is NULL-terminated (strv_free). */
#define DOCKER_IMAGE_VOLUMES_MAX 32
#define DOCKER_IMAGE_VOLUME_PATH_MAX 1024
struct cJSON;
int docker_config_volumes(const struct cJSON *config, char ***ret);
/* The same for a local image (GET /images/{ref}/json). -ENOENT: no such image. */
int docker_image_volumes(struct docker *d, const char *ref, char ***ret);

/* exec */
struct docker_exec_opts {
        const char *const *cmd;          /* NULL-terminated, required */
        const char *const *env;
        const char *working_dir;
        const char *user;
        bool attach_stdin;
};
/* -ENOENT: no such container, -ESRCH: container not running. */
int docker_exec_create(struct docker *d, const char *container, const struct docker_exec_opts *o, char **ret_exec_id);
/* Starts the exec with the connection hijacked (raw AF_UNIX socket, Upgrade: tcp).
 * On success *ret_fd is a blocking, close-on-exec stream socket positioned in the
 * multiplexed (non-TTY) stream; the caller owns and closes it. Bytes the daemon sent
 * right behind the response head are returned in *ret_pre (xmalloc'd, *ret_pre_len
 * bytes, NULL/0 when none): feed them to the demuxer before reading the fd. Close
 * stdin with shutdown(fd, SHUT_WR). The response head is read with a 30 s bound. */
int docker_exec_start(struct docker *d, const char *exec_id, int *ret_fd, uint8_t **ret_pre, size_t *ret_pre_len);

struct docker_exec_info { bool running; int exit_code; int pid; };   /* exit_code -1 while running */
int docker_exec_inspect(struct docker *d, const char *exec_id, struct docker_exec_info *ret);

/* Incremental demultiplexer for the non-TTY stream: 8-byte header {type,0,0,0,size_be32},
 * type 0 stdin, 1 stdout, 2 stderr, 3 daemon error. Zero-initialise before use. */
struct docker_demux { uint8_t hdr[8]; size_t hdr_have; int type; uint32_t remaining; };
/* Feeds bytes; calls cb(type, data, len, ud) for each payload piece (a frame may arrive
 * in several pieces; empty frames produce no call). cb returning < 0 stops and that
 * value is returned. Returns 0, or -EBADMSG on a bad header (type > 3 or non-zero
 * padding); the demuxer is then unusable. */
int docker_demux_feed(struct docker_demux *m, const uint8_t *buf, size_t len,
                      int (*cb)(int type, const uint8_t *data, size_t len, void *ud), void *ud);

/* Runs cmd to completion: creates and starts the exec, writes stdin_data (if any;
 * stdin is attached when stdin_data != NULL or o->attach_stdin, and closed after the
 * data), captures stdout and stderr up to cap bytes each (0 = DOCKER_EXEC_CAP_DEFAULT;
 * the rest is read and dropped, *_truncated set) and the exit code. Type-3 frames
 * count as stderr. timeout_ms (0 = 60000) bounds the whole run; on timeout returns
 * -ETIMEDOUT and the process may still run in the container (Docker has no exec kill). */
struct docker_exec_result {
        char *out; size_t out_len; bool out_truncated;   /* NUL-terminated, xmalloc'd */
        char *err; size_t err_len; bool err_truncated;
        int exit_code;
};
int docker_exec_run(struct docker *d, const char *container, const struct docker_exec_opts *o,
                    const void *stdin_data, size_t stdin_len, size_t cap, long timeout_ms,
                    struct docker_exec_result *ret);
void docker_exec_result_done(struct docker_exec_result *r);   /* NULL-safe */

/* Snapshots. Commits with the container paused. *ret_image_id is "sha256:...". tag NULL = "latest". */
int docker_commit(struct docker *d, const char *container, const char *repo, const char *tag, char **ret_image_id);
/* Pushes name:tag. registry_auth_b64 is the X-Registry-Auth value (base64url JSON
 * {"username","password","serveraddress"}; NULL = "e30=" anonymous). Scans every line
 * of the progress stream: an error line -> -EIO with its message in docker_last_error();
 * success needs the final aux line and fills ret_digest ("sha256:...", xmalloc'd) and
 * ret_size (both optional). A stream that ends without aux -> -EIO. */
int docker_image_push(struct docker *d, const char *name, const char *tag, const char *registry_auth_b64,
                      char **ret_digest, int64_t *ret_size);
/* -ENOENT if missing, -EBUSY if used by a container (without force). */
int docker_image_remove(struct docker *d, const char *ref, bool force);
/* Pulls name:tag, or name@tag when tag is a digest (sha256:...), registry_auth_b64 as for
 * push. Reads the whole progress stream: an
 * error line -> -EIO with its message in docker_last_error(); success also needs the
 * image to be there afterwards. */
int docker_image_pull(struct docker *d, const char *name, const char *tag, const char *registry_auth_b64);
/* "repo:tag" names of the local images matching reference (Docker's reference filter,
 * e.g. "127.0.0.1:5000/paddock/snapshots:*"), NULL-terminated; free with strv_free(). */
int docker_image_list(struct docker *d, const char *reference, char ***ret_refs);
/* The image's size in bytes (Docker's "Size": all of its layers). */
int docker_image_size(struct docker *d, const char *ref, int64_t *ret_size);

/* A process whose Docker access is another process's (controld's docker child): with
 * docker_set_remote() every client of this process makes its calls through rem instead of a
 * socket (d->socket is then not used). NULL (the default) = the socket. A remote says why a
 * call failed with docker_set_last_error(). */
struct docker_remote {
        /* One API call (path below DOCKER_API_PREFIX, body as sent): 0 with the HTTP status and
         * the body (xmalloc'd, NUL-terminated, *ret_len bytes), or -errno. */
        int (*call)(const char *method, const char *path, const char *body, size_t body_len, long timeout_ms,
                    long *ret_status, char **ret_body, size_t *ret_len);
        /* docker_image_pull with the remote's own registry credentials. */
        int (*pull)(const char *name, const char *tag);
        /* docker_exec_start. */
        int (*exec_start)(const char *exec_id, int *ret_fd, uint8_t **ret_pre, size_t *ret_pre_len);
};
void docker_set_remote(const struct docker_remote *rem);
/* Sets the calling thread's docker_last_error() (control characters become spaces). */
void docker_set_last_error(const char *msg);
/* Container/volume/network names and exec ids ([A-Za-z0-9][A-Za-z0-9_.-]*, up to 255), and
 * image references (registry/repo:tag@digest characters, no empty or dot-leading segment). */
bool docker_valid_name(const char *s);
bool docker_valid_ref(const char *s);
/* What a remote does for call: the request on the socket, without parsing the answer. */
int docker_call_raw(struct docker *d, const char *method, const char *path, const char *body, size_t body_len,
                    long timeout_ms, long *ret_status, char **ret_body, size_t *ret_len);
