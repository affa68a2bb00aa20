/* dockerchild-allow.c — what controld's docker child does with a checked request, and what it
 * refuses (dockerchild.h says why the child exists; dockerchild.c carries the messages).
 *
 * An allowlist, never a denylist: a Docker call passes only when its method and path are one
 * of the rows below, each name in the path is one controld makes (its containers, volumes,
 * networks, the snapshot registry's images), the query keys are the row's, and a body that
 * could ask Docker for more than a sandbox needs (a container, an exec, a volume, a network)
 * holds only keys controld sends, with values it would send: a configured runtime and
 * network, mounts of its own volumes, tmpfs, the agent's binary and secret read-only. The
 * registry calls are for controld's repositories only, with the child's own credentials.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cjson/cJSON.h>

#include "btrfs.h"
#include "cleanup.h"
#include "controld.h"
#include "docker.h"
#include "dockerchild.h"
#include "dockerchild-private.h"
#include "log.h"
#include "pj_agent.h"
#include "registry.h"
#include "strutil.h"
#include "unixsock.h"

#define INSTALLED_AGENT "/usr/lib/paddock/paddock-init"

static const struct config *cfg;
static struct docker *dk;
static char *agent_bin_beside, *agent_bin_static;      /* paddock-init beside our own executable (agent.c) */
static char *agent_dir;                 /* the secrets' directory, as agent.c derives it */

void dc_child_init(const struct config *c) {
        cfg = c;
        if (docker_new(c->docker_socket, &dk) < 0)
                dk = NULL;
        agent_bin_beside = path_beside_self("paddock-init");
        agent_bin_static = path_beside_self("paddock-init.static");
        if (c->init_dir[0])
                agent_dir = xstrdup(c->init_dir);
        else {
                const char *slash = strrchr(c->db_path, '/');
                agent_dir = slash ? xasprintf("%.*s/agents", (int) (slash - c->db_path), c->db_path) : NULL;
        }
}

/* ---------------------------------------------------------------- shapes */

static const struct {
        unsigned nargs, binary;
        bool fd;
} shapes[DC_OP_MAX] = {
        [DC_OP_PING] = { 0, 0, false },
        [DC_OP_DOCKER] = { 3, 1u << 2, false },
        [DC_OP_PULL] = { 2, 0, false },
        [DC_OP_EXEC_START] = { 1, 0, false },
        [DC_OP_AGENT_DIAL] = { 1, 0, false },
        [DC_OP_AGENT_WAIT] = { 1, 0, false },
        [DC_OP_CGROUP_OPEN] = { 1, 0, false },
        [DC_OP_TREE_BYTES] = { 1, 0, false },
        [DC_OP_RUNSC_CHECKPOINT] = { 2, 0, false },
        [DC_OP_FORK] = { 3, 0, false },
        [DC_OP_BTRFS_QUOTA] = { 1, 0, false },
        [DC_OP_BTRFS_CREATE] = { 2, 0, false },
        [DC_OP_BTRFS_DESTROY] = { 2, 0, false },
        [DC_OP_REG_DIGEST] = { 2, 0, false },
        [DC_OP_REG_CONFIG] = { 2, 0, false },
        [DC_OP_REG_DELETE] = { 2, 0, false },
        [DC_OP_REG_BLOB_EXISTS] = { 2, 0, false },
        [DC_OP_REG_BLOB_UPLOAD] = { 2, 0, true },
        [DC_OP_REG_MANIFEST_PUT] = { 4, 1u << 3, false },
};

bool dc_op_shape(uint16_t op, unsigned *ret_nargs, unsigned *ret_binary_mask, bool *ret_fd) {
        if (op == 0 || op >= DC_OP_MAX)
                return false;
        *ret_nargs = shapes[op].nargs;
        *ret_binary_mask = shapes[op].binary;
        *ret_fd = shapes[op].fd;
        return true;
}

static int deny(char *why, size_t n, const char *fmt, ...) _printf_(3, 4);
static int deny(char *why, size_t n, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
        return -EPERM;
}

/* ---------------------------------------------------------------- names */

static bool all_hex(const char *s, size_t min, size_t max) {
        size_t n = strlen(s);
        if (n < min || n > max)
                return false;
        for (; *s; s++)
                if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
                        return false;
        return true;
}

/* A sandbox's container by name: paddock-<24 hex>. */
static bool our_container_name(const char *s) {
        return startswith(s, "paddock-") && hexid_valid(s + 8) && strlen(s) == 8 + HEXID_LEN;
}

/* Volumes controld makes: paddock-init-<id> (agent sockets) and paddock-vol-<...> (volumes). */
static bool our_volume(const char *s) {
        return docker_valid_name(s) && (startswith(s, PJ_AGENT_VOLUME_PREFIX) || startswith(s, "paddock-vol-")) &&
               strlen(s) <= 128;
}

static bool our_network(const char *s) {
        return !strcmp(s, cfg->docker_network) || !strcmp(s, cfg->docker_network_internal);
}

/* Images of the snapshot registry (snapshots, templates users built): pulls and removals. */
static bool registry_image(const char *ref) {
        size_t n = strlen(cfg->snap_registry);
        return docker_valid_ref(ref) && !strncmp(ref, cfg->snap_registry, n) && ref[n] == '/';
}

/* A container reference a mutating call may name: our name, or an id whose container is ours
 * (asked of Docker: its name says paddock-<sandbox id>). A full id no container has passes:
 * Docker answers that call 404 itself, and the reaper of a vanished sandbox must see that, not
 * a refusal (ids are random: no one can make a container take a given one later). */
static bool our_container(const char *ref, bool look_up) {
        if (our_container_name(ref))
                return true;
        if (!all_hex(ref, 12, 64))
                return false;
        if (!look_up)
                return true;
        struct docker_container_state st;
        if (!dk || docker_container_inspect(dk, ref, &st) < 0)
                return false;
        if (!st.exists)
                return strlen(ref) == 64;
        return our_container_name(st.name);
}

/* One path segment, percent-decoded into out (n bytes): only unreserved characters and %XX;
 * false for anything else ("", ".", "..", a raw '/' cannot reach here: segments are split on it). */
static bool seg_decode(const char *s, size_t len, char *out, size_t n) {
        size_t k = 0;
        if (len == 0 || len >= n)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (c == '%') {
                        if (i + 2 >= len)
                                return false;
                        char hx[3] = { s[i + 1], s[i + 2], 0 };
                        char *end;
                        long v = strtol(hx, &end, 16);
                        if (*end || v <= 0x20 || v >= 0x7f)
                                return false;
                        out[k++] = (char) v;
                        i += 2;
                } else if (ascii_alnum(c) || strchr("-._~", c))
                        out[k++] = c;
                else
                        return false;
        }
        out[k] = 0;
        return strcmp(out, ".") && strcmp(out, "..");
}

/* The query's keys must be among keys (NULL-terminated), each value URL-safe. */
static bool query_ok(const char *q, const char *const *keys) {
        if (!q || !*q)
                return true;
        _cleanup_free_ char *copy = xstrdup(q);
        for (char *save = NULL, *kv = strtok_r(copy, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
                char *eq = strchr(kv, '=');
                if (!eq)
                        return false;
                *eq = 0;
                bool known = false;
                for (const char *const *k = keys; *k && !known; k++)
                        known = !strcmp(kv, *k);
                if (!known)
                        return false;
                for (const char *v = eq + 1; *v; v++)
                        if (!ascii_alnum(*v) && !strchr("-._~%", *v))
                                return false;
        }
        return true;
}

/* ---------------------------------------------------------------- bodies */

static bool keys_only(const cJSON *o, const char *const *keys) {
        const cJSON *it;
        if (!cJSON_IsObject(o))
                return false;
        cJSON_ArrayForEach(it, o) {
                bool known = false;
                for (const char *const *k = keys; *k && !known; k++)
                        known = it->string && !strcmp(it->string, *k);
                if (!known)
                        return false;
                /* A key given twice: cJSON reads the first, Docker the last. None passes. */
                for (const cJSON *j = it->next; j; j = j->next)
                        if (j->string && !strcasecmp(j->string, it->string))
                                return false;
        }
        return true;
}

static const char *jstr(const cJSON *o, const char *key) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
        return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool strv_is(const cJSON *a, const char *only) {
        const cJSON *it;
        if (!cJSON_IsArray(a))
                return false;
        cJSON_ArrayForEach(it, a) if (!cJSON_IsString(it) || strcmp(it->valuestring, only)) return false;
        return true;
}

/* A bind source controld mounts: the agent's binary, or a sandbox's secret in its directory;
 * a regular file, not a link, either way. */
static bool bind_source_ok(const char *src) {
        struct stat st;
        bool named = (cfg->init_binary[0] && !strcmp(src, cfg->init_binary)) ||
                     (agent_bin_beside && !strcmp(src, agent_bin_beside)) ||
                     (agent_bin_static && !strcmp(src, agent_bin_static)) || !strcmp(src, INSTALLED_AGENT) ||
                     !strcmp(src, "/usr/local/lib/paddock/paddock-init");
        if (!named && agent_dir) {
                size_t n = strlen(agent_dir);
                const char *f = src + n + 1;
                named = !strncmp(src, agent_dir, n) && src[n] == '/' && strlen(f) == HEXID_LEN + 7 &&
                        hexid_valid_n(f, HEXID_LEN) && !strcmp(f + HEXID_LEN, ".secret");
        }
        return named && lstat(src, &st) == 0 && S_ISREG(st.st_mode);
}

static int check_create(const char *name, const cJSON *b, char *why, size_t n) {
        static const char *const top[] = { "Image", "Entrypoint", "Cmd", "Env", "Labels", "WorkingDir", "User",
                                           "AttachStdin", "AttachStdout", "AttachStderr", "Tty", "Healthcheck",
                                           "HostConfig", NULL };
        static const char *const host[] = { "Runtime", "NetworkMode", "Memory", "MemoryReservation", "NanoCpus",
                                            "CpuShares", "PidsLimit", "CapDrop", "CapAdd", "SecurityOpt", "Init",
                                            "StorageOpt", "ExtraHosts", "Mounts", "Tmpfs", NULL };
        static const char *const mount_keys[] = { "Type", "Source", "Target", "ReadOnly", "TmpfsOptions", NULL };
        if (!name || !our_container_name(name))
                return deny(why, n, "container create: the name must be paddock-<sandbox id>");
        if (!keys_only(b, top))
                return deny(why, n, "container create: the body holds a key controld does not send");
        const cJSON *hc = cJSON_GetObjectItemCaseSensitive(b, "HostConfig");
        if (!keys_only(hc, host))
                return deny(why, n, "container create: HostConfig holds a key controld does not send");
        const char *rt = jstr(hc, "Runtime");
        if (!rt || (strcmp(rt, cfg->docker_runtime) && strcmp(rt, cfg->docker_runtime_net)))
                return deny(why, n, "container create: the runtime must be a configured one ([docker] runtime, runtime_network)");
        const char *nm = jstr(hc, "NetworkMode");
        if (nm && strcmp(nm, "none") && !our_network(nm))
                return deny(why, n, "container create: network %s is not one of controld's", nm);
        const cJSON *so = cJSON_GetObjectItemCaseSensitive(hc, "SecurityOpt");
        if (so && !strv_is(so, "no-new-privileges"))
                return deny(why, n, "container create: SecurityOpt may only say no-new-privileges");
        if (cJSON_GetObjectItemCaseSensitive(hc, "CapAdd") && !strv_is(cJSON_GetObjectItemCaseSensitive(hc, "CapAdd"), "ALL"))
                return deny(why, n, "container create: CapAdd is ALL (under gVisor) or nothing");
        if (cJSON_GetObjectItemCaseSensitive(hc, "CapAdd") && !startswith(rt, "runsc"))
                return deny(why, n, "container create: capabilities only under a runsc runtime");
        const cJSON *sto = cJSON_GetObjectItemCaseSensitive(hc, "StorageOpt");
        if (sto && !keys_only(sto, (const char *const[]) { "size", NULL }))
                return deny(why, n, "container create: StorageOpt holds more than size");
        const cJSON *tm = cJSON_GetObjectItemCaseSensitive(hc, "Tmpfs");
        if (tm && !keys_only(tm, (const char *const[]) { "/tmp", NULL }))
                return deny(why, n, "container create: Tmpfs is for /tmp only");
        const cJSON *m;
        cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(hc, "Mounts")) {
                const char *type = jstr(m, "Type"), *src = jstr(m, "Source");
                if (!keys_only(m, mount_keys) || !type)
                        return deny(why, n, "container create: a mount holds a key controld does not send");
                if (!strcmp(type, "tmpfs")) {
                        if (src)
                                return deny(why, n, "container create: a tmpfs mount has no source");
                } else if (!strcmp(type, "volume")) {
                        if (!src || !our_volume(src))
                                return deny(why, n, "container create: volume %s is not one of controld's", src ? src : "(none)");
                } else if (!strcmp(type, "bind")) {
                        if (!src || !bind_source_ok(src) || !cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "ReadOnly")))
                                return deny(why, n, "container create: a bind mount must be the agent's binary or a "
                                                    "sandbox's secret, read-only (%s)", src ? src : "(none)");
                } else
                        return deny(why, n, "container create: mount type %s", type);
        }
        return 0;
}

static int check_exec(const cJSON *b, char *why, size_t n) {
        static const char *const keys[] = { "AttachStdin", "AttachStdout", "AttachStderr", "Tty", "Cmd", "Env",
                                            "WorkingDir", "User", NULL };
        return keys_only(b, keys) ? 0 : deny(why, n, "exec create: the body holds a key controld does not send");
}

static int check_volume(const cJSON *b, char *why, size_t n) {
        static const char *const keys[] = { "Name", "Driver", "DriverOpts", "Labels", NULL };
        const char *name = jstr(b, "Name"), *drv = jstr(b, "Driver");
        if (!keys_only(b, keys) || !name || !our_volume(name) || (drv && strcmp(drv, "local")))
                return deny(why, n, "volume create: only controld's local volumes (paddock-vol-*, " PJ_AGENT_VOLUME_PREFIX "*)");
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(b, "DriverOpts");
        if (!o || cJSON_GetArraySize(o) == 0)
                return 0;
        const char *type = jstr(o, "type"), *dev = jstr(o, "device"), *opt = jstr(o, "o");
        if (!keys_only(o, (const char *const[]) { "type", "device", "o", NULL }) || !type || !dev || !opt)
                return deny(why, n, "volume create: driver options controld does not send");
        if (!strcmp(type, "none") && !strcmp(opt, "bind")) {
                size_t k = strlen(cfg->docker_volume_root);
                if (!k || strncmp(dev, cfg->docker_volume_root, k) || dev[k] != '/' || strcmp(dev + k + 1, name))
                        return deny(why, n, "volume create: a bound volume must be [docker] volume_root/<its name>");
                return 0;
        }
        if (!strcmp(type, "tmpfs") && !strcmp(dev, "tmpfs")) {
                _cleanup_free_ char *copy = xstrdup(opt);
                for (char *save = NULL, *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
                        if (!(startswith(t, "size=") && t[5] && strspn(t + 5, "0123456789") == strlen(t + 5)) &&
                            strcmp(t, "mode=0700") && strcmp(t, "nosuid") && strcmp(t, "nodev") && strcmp(t, "noexec"))
                                return deny(why, n, "volume create: tmpfs option %s", t);
                return 0;
        }
        return deny(why, n, "volume create: volume type %s", type);
}

static int check_network(const cJSON *b, char *why, size_t n) {
        static const char *const keys[] = { "Name", "CheckDuplicate", "Driver", "Internal", "Labels", "Options", "IPAM", NULL };
        const char *name = jstr(b, "Name"), *drv = jstr(b, "Driver");
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(b, "Options");
        if (!keys_only(b, keys) || !name || !our_network(name) || !drv || strcmp(drv, "bridge") ||
            (o && !keys_only(o, (const char *const[]) { "com.docker.network.bridge.name", NULL })))
                return deny(why, n, "network create: only controld's bridge networks ([docker] network, network_internal)");
        return 0;
}

/* ---------------------------------------------------------------- the Docker allowlist */

enum body_kind { B_NONE, B_CREATE, B_EXEC, B_CHECKPOINT, B_VOLUME, B_NETWORK };
enum name_kind { N_NONE, N_CONTAINER, N_OUR_CONTAINER, N_EXEC, N_VOLUME, N_NETWORK, N_IMAGE, N_REG_IMAGE, N_CHECKPOINT };

/* One row: method, path segments ("*" = the name of kind name, "**" the second name: a
 * checkpoint), the query keys it may carry, its body. */
static const struct route {
        const char *method;
        const char *seg[4];
        enum name_kind name, name2;
        const char *query[4];
        enum body_kind body;
} routes[] = {
        { "GET", { "_ping" }, N_NONE, N_NONE, { NULL }, B_NONE },
        { "GET", { "version" }, N_NONE, N_NONE, { NULL }, B_NONE },
        { "GET", { "info" }, N_NONE, N_NONE, { NULL }, B_NONE },
        { "GET", { "containers", "json" }, N_NONE, N_NONE, { "all", "filters", NULL }, B_NONE },
        { "GET", { "containers", "*", "json" }, N_CONTAINER, N_NONE, { NULL }, B_NONE },
        { "GET", { "containers", "*", "stats" }, N_CONTAINER, N_NONE, { "stream", "one-shot", NULL }, B_NONE },
        { "POST", { "containers", "create" }, N_NONE, N_NONE, { "name", NULL }, B_CREATE },
        { "POST", { "containers", "*", "start" }, N_OUR_CONTAINER, N_NONE, { "checkpoint", NULL }, B_NONE },
        { "POST", { "containers", "*", "stop" }, N_OUR_CONTAINER, N_NONE, { "t", NULL }, B_NONE },
        { "POST", { "containers", "*", "kill" }, N_OUR_CONTAINER, N_NONE, { "signal", NULL }, B_NONE },
        { "POST", { "containers", "*", "exec" }, N_OUR_CONTAINER, N_NONE, { NULL }, B_EXEC },
        { "POST", { "containers", "*", "checkpoints" }, N_OUR_CONTAINER, N_NONE, { NULL }, B_CHECKPOINT },
        { "DELETE", { "containers", "*", "checkpoints", "**" }, N_OUR_CONTAINER, N_CHECKPOINT, { NULL }, B_NONE },
        { "DELETE", { "containers", "*" }, N_OUR_CONTAINER, N_NONE, { "force", "v", NULL }, B_NONE },
        { "GET", { "exec", "*", "json" }, N_EXEC, N_NONE, { NULL }, B_NONE },
        { "GET", { "volumes" }, N_NONE, N_NONE, { "filters", NULL }, B_NONE },
        { "POST", { "volumes", "create" }, N_NONE, N_NONE, { NULL }, B_VOLUME },
        { "DELETE", { "volumes", "*" }, N_VOLUME, N_NONE, { "force", NULL }, B_NONE },
        { "GET", { "networks", "*" }, N_NETWORK, N_NONE, { NULL }, B_NONE },
        { "POST", { "networks", "create" }, N_NONE, N_NONE, { NULL }, B_NETWORK },
        { "GET", { "images", "json" }, N_NONE, N_NONE, { "filters", NULL }, B_NONE },
        { "GET", { "images", "*", "json" }, N_IMAGE, N_NONE, { NULL }, B_NONE },
        { "DELETE", { "images", "*" }, N_REG_IMAGE, N_NONE, { "force", "noprune", NULL }, B_NONE },
};

static bool name_ok(enum name_kind k, const char *s, bool look_up) {
        switch (k) {
        case N_NONE:
                return false;
        case N_CONTAINER:
                return docker_valid_name(s);
        case N_OUR_CONTAINER:
                return our_container(s, look_up);
        case N_EXEC:
                return all_hex(s, 64, 64);
        case N_VOLUME:
                return our_volume(s);
        case N_NETWORK:
                return our_network(s);
        case N_IMAGE:
                return docker_valid_ref(s);
        case N_REG_IMAGE:
                return registry_image(s);
        case N_CHECKPOINT:
                return docker_valid_name(s) && strlen(s) <= 128;
        }
        return false;
}

static int docker_allowed(const char *method, const char *path, const char *body, size_t body_len, bool look_up,
                          char *why, size_t whylen) {
        char segs[4][600];
        size_t nseg = 0;
        if (!path || path[0] != '/' || strlen(path) > 4096)
                return deny(why, whylen, "%s: not an API path", method);
        const char *q = strchr(path, '?');
        size_t plen = q ? (size_t) (q - path) : strlen(path);
        for (size_t i = 1; i <= plen;) {
                size_t e = i;
                while (e < plen && path[e] != '/')
                        e++;
                if (nseg == 4 || !seg_decode(path + i, e - i, segs[nseg], sizeof(segs[nseg])))
                        return deny(why, whylen, "%s %.*s: not a path controld calls", method, (int) plen, path);
                nseg++;
                i = e + 1;
        }
        for (size_t r = 0; r < ELEMENTSOF(routes); r++) {
                const struct route *rt = &routes[r];
                size_t n = 0;
                while (n < 4 && rt->seg[n])
                        n++;
                if (strcmp(rt->method, method) || n != nseg)
                        continue;
                bool match = true;
                for (size_t i = 0; i < n && match; i++)
                        match = !strcmp(rt->seg[i], "*") || !strcmp(rt->seg[i], "**") || !strcmp(rt->seg[i], segs[i]);
                if (!match)
                        continue;
                for (size_t i = 0; i < n; i++) {
                        if (!strcmp(rt->seg[i], "*") && !name_ok(rt->name, segs[i], look_up))
                                return deny(why, whylen, "%s %.*s: %s is not a name controld may use there", method,
                                            (int) plen, path, segs[i]);
                        if (!strcmp(rt->seg[i], "**") && !name_ok(rt->name2, segs[i], look_up))
                                return deny(why, whylen, "%s %.*s: %s is not a checkpoint name", method, (int) plen, path,
                                            segs[i]);
                }
                if (!query_ok(q ? q + 1 : NULL, rt->query))
                        return deny(why, whylen, "%s %.*s: the query holds a key controld does not send", method,
                                    (int) plen, path);
                if (rt->body == B_NONE) {
                        if (body_len > 0)
                                return deny(why, whylen, "%s %.*s takes no body", method, (int) plen, path);
                        return 0;
                }
                _cleanup_(cJSON_Deletep) cJSON *b = body_len ? cJSON_ParseWithLength(body, body_len) : NULL;
                if (!cJSON_IsObject(b))
                        return deny(why, whylen, "%s %.*s: the body is not a JSON object", method, (int) plen, path);
                switch (rt->body) {
                case B_NONE:
                        return 0;
                case B_CREATE: {
                        /* the name is the query's one value */
                        const char *nm = q && startswith(q + 1, "name=") && !strchr(q + 1, '&') ? q + 6 : NULL;
                        return check_create(nm, b, why, whylen);
                }
                case B_EXEC:
                        return check_exec(b, why, whylen);
                case B_CHECKPOINT:
                        return keys_only(b, (const char *const[]) { "CheckpointID", "Exit", NULL })
                                       ? 0
                                       : deny(why, whylen, "checkpoint create: the body holds a key controld does not send");
                case B_VOLUME:
                        return check_volume(b, why, whylen);
                case B_NETWORK:
                        return check_network(b, why, whylen);
                }
                return 0;
        }
        return deny(why, whylen, "%s %.*s: not a call controld makes", method, (int) plen, path);
}

int dc_docker_allowed(const struct config *c, const char *method, const char *path, const char *body, size_t body_len,
                      char *why, size_t whylen) {
        const struct config *saved = cfg;
        cfg = c;
        int r = docker_allowed(method, path, body, body_len, false, why, whylen);
        cfg = saved;
        return r;
}

/* ---------------------------------------------------------------- the other ops */

static char *docker_root(void) {
        static char *root;      /* asked once; Docker's data root does not move under a running daemon */
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_mutex_lock(&lock);
        if (!root && dk)
                (void) docker_root_dir(dk, &root);
        pthread_mutex_unlock(&lock);
        return root;
}

static char *agent_socket_path(const char *id) {
        const char *root = docker_root();
        return root && hexid_valid(id) && strlen(id) == HEXID_LEN
                       ? xasprintf("%s/volumes/" PJ_AGENT_VOLUME_PREFIX "%s/_data/" PJ_AGENT_SOCKET_NAME, root, id)
                       : NULL;
}

static _Thread_local int64_t walk_bytes;
static int walk(const char *p, const struct stat *st, int flag, struct FTW *f) {
        (void) p, (void) f;
        if (flag == FTW_F)
                walk_bytes += (int64_t) st->st_blocks * 512;
        return 0;
}

static bool repo_ok(const char *repo) {
        size_t n = strlen(cfg->utpl_repository);
        return !strcmp(repo, cfg->snap_repository) ||
               (!strncmp(repo, cfg->utpl_repository, n) && repo[n] == '/' && docker_valid_ref(repo) && !strstr(repo, ".."));
}

static void reg_do(const struct dc_request *q, struct dc_answer *a) {
        struct registry reg = config_snapshot_registry(cfg);
        if (!repo_ok(q->arg[0])) {
                a->r = deny(a->err, sizeof(a->err), "registry: %s is not one of controld's repositories", q->arg[0]);
                return;
        }
        switch (q->op) {
        case DC_OP_REG_DIGEST: {
                _cleanup_free_ char *d = NULL;
                a->r = registry_manifest_digest(&reg, q->arg[0], q->arg[1], &d, &a->num);
                if (a->r >= 0) {
                        a->body_len = strlen(d);
                        a->body = TAKE_PTR(d);
                }
                return;
        }
        case DC_OP_REG_CONFIG: {
                _cleanup_(cJSON_Deletep) cJSON *j = NULL;
                a->r = registry_image_config(&reg, q->arg[0], q->arg[1], &j);
                if (a->r >= 0) {
                        a->body = xnonnull(cJSON_PrintUnformatted(j));
                        a->body_len = strlen(a->body);
                }
                return;
        }
        case DC_OP_REG_DELETE:
                a->r = registry_manifest_delete(&reg, q->arg[0], q->arg[1]);
                return;
        case DC_OP_REG_BLOB_EXISTS:
                a->r = registry_blob_exists(&reg, q->arg[0], q->arg[1]);
                return;
        case DC_OP_REG_BLOB_UPLOAD: {
                struct stat st;
                if (fstat(q->fd, &st) < 0 || !S_ISREG(st.st_mode) || q->num < 0 || st.st_size != q->num) {
                        a->r = deny(a->err, sizeof(a->err), "registry: the blob's fd is not a file of the size said");
                        return;
                }
                void *map = q->num ? mmap(NULL, (size_t) q->num, PROT_READ, MAP_PRIVATE, q->fd, 0) : NULL;
                if (map == MAP_FAILED) {
                        a->r = -errno;
                        return;
                }
                a->r = registry_blob_upload(&reg, q->arg[0], q->arg[1], map, (size_t) q->num, (long) q->num2);
                if (map)
                        munmap(map, (size_t) q->num);
                return;
        }
        case DC_OP_REG_MANIFEST_PUT:
                a->r = registry_manifest_put(&reg, q->arg[0], q->arg[1], q->arg[2], q->arg[3], q->arglen[3]);
                return;
        case DC_OP_PING:
        case DC_OP_DOCKER:
        case DC_OP_PULL:
        case DC_OP_EXEC_START:
        case DC_OP_AGENT_DIAL:
        case DC_OP_AGENT_WAIT:
        case DC_OP_CGROUP_OPEN:
        case DC_OP_TREE_BYTES:
        case DC_OP_RUNSC_CHECKPOINT:
        case DC_OP_FORK:
        case DC_OP_BTRFS_QUOTA:
        case DC_OP_BTRFS_CREATE:
        case DC_OP_BTRFS_DESTROY:
        case DC_OP_MAX:
                break;
        }
        a->r = -EINVAL;
}

/* GET /containers/<x>/json: the one answer the allowlist checks after the call. */
static bool inspect_path(const char *path) {
        return startswith(path, "/containers/") && endswith(path, "/json") && strcmp(path, "/containers/json") &&
               !strchr(path, '?');
}

static bool inspect_is_ours(const char *body, size_t len) {
        _cleanup_(cJSON_Deletep) cJSON *j = cJSON_ParseWithLength(body, len);
        const char *name = jstr(j, "Name");
        return name && name[0] == '/' && our_container_name(name + 1);
}

static bool cgroup_path_ok(const char *p) {
        return startswith(p, "/sys/fs/cgroup/") && !strstr(p, "/../") && !strstr(p, "/./") && !strstr(p, "//") &&
               (endswith(p, "/cpu.max.burst") || endswith(p, "/cpu.cfs_burst_us"));
}

void dc_child_do(const struct dc_request *q, struct dc_answer *a) {
        a->fd = -1;
        switch (q->op) {
        case DC_OP_PING:
                a->body = xasprintf("paddock controld docker child, protocol %d", DC_VERSION);
                a->body_len = strlen(a->body);
                a->r = 0;
                return;
        case DC_OP_DOCKER: {
                if ((a->r = docker_allowed(q->arg[0], q->arg[1], q->arg[2], q->arglen[2], true, a->err, sizeof(a->err))) < 0)
                        return;
                if (!dk) {
                        a->r = -ENOTCONN;
                        return;
                }
                long timeout = q->num > 0 && q->num < 24L * 3600 * 1000 ? (long) q->num : 0;
                a->r = docker_call_raw(dk, q->arg[0], q->arg[1], q->arglen[2] ? q->arg[2] : NULL, q->arglen[2], timeout,
                                       &a->status, &a->body, &a->body_len);
                if (a->r < 0)
                        strscpy(a->err, docker_last_error(), sizeof(a->err));
                else if (a->status == 200 && inspect_path(q->arg[1]) && !inspect_is_ours(a->body, a->body_len)) {
                        /* Another container's inspect holds its Env (secrets, often): a sandbox's only. */
                        free(a->body);
                        a->body = xstrdup("{\"message\":\"not a sandbox's container\"}");
                        a->body_len = strlen(a->body);
                        a->status = 404;
                }
                return;
        }
        case DC_OP_PULL: {
                if (!registry_image(q->arg[0])) {
                        a->r = deny(a->err, sizeof(a->err), "pull: %s is not an image of the snapshot registry", q->arg[0]);
                        return;
                }
                struct registry reg = config_snapshot_registry(cfg);
                _cleanup_free_ char *auth = registry_auth_header_value(&reg);
                a->r = dk ? docker_image_pull(dk, q->arg[0], q->arg[1], auth) : -ENOTCONN;
                if (a->r < 0)
                        strscpy(a->err, docker_last_error(), sizeof(a->err));
                return;
        }
        case DC_OP_EXEC_START: {
                uint8_t *pre = NULL;
                size_t pre_len = 0;
                if (!all_hex(q->arg[0], 64, 64)) {
                        a->r = deny(a->err, sizeof(a->err), "exec start: %s is not an exec id", q->arg[0]);
                        return;
                }
                /* The stream is hijacked here: what goes to the parent is past Docker's HTTP, the
                 * exec's stdin and output, and nothing on it is read as a request again. */
                a->r = dk ? docker_exec_start(dk, q->arg[0], &a->fd, &pre, &pre_len) : -ENOTCONN;
                if (a->r < 0)
                        strscpy(a->err, docker_last_error(), sizeof(a->err));
                a->body = (char *) pre;
                a->body_len = pre_len;
                return;
        }
        case DC_OP_AGENT_DIAL:
        case DC_OP_AGENT_WAIT: {
                _cleanup_free_ char *path = agent_socket_path(q->arg[0]);
                if (!path) {
                        a->r = deny(a->err, sizeof(a->err), "agent socket: %s is not a sandbox id", q->arg[0]);
                        return;
                }
                int64_t ms = q->num > 0 && q->num < 120000 ? q->num : 10000;
                if (q->op == DC_OP_AGENT_DIAL) {
                        int fd = unix_connect_nofollow(path, mono_ms() + ms);
                        a->r = fd < 0 ? fd : 0;
                        a->fd = fd < 0 ? -1 : fd;
                        return;
                }
                for (int64_t end = mono_ms() + ms;;) {
                        struct stat st;
                        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
                                a->r = 0;
                                return;
                        }
                        if (mono_ms() > end)
                                break;
                        usleep(2000);
                }
                a->r = -ENOENT;
                return;
        }
        case DC_OP_CGROUP_OPEN: {
                if (!cgroup_path_ok(q->arg[0])) {
                        a->r = deny(a->err, sizeof(a->err), "cgroup: %s is not a CPU burst file", q->arg[0]);
                        return;
                }
                int fd = open(q->arg[0], O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
                a->r = fd < 0 ? -errno : 0;
                a->fd = fd;
                return;
        }
        case DC_OP_TREE_BYTES: {
                const char *root = docker_root();
                size_t n = root ? strlen(root) : 0;
                const char *p = q->arg[0], *c = p + n + strlen("/containers/");
                char id[65] = "";
                bool ok = root && !strncmp(p, root, n) && startswith(p + n, "/containers/") && strlen(c) > 65;
                if (ok) {
                        memcpy(id, c, 64);
                        ok = all_hex(id, 64, 64) && startswith(c + 64, "/checkpoints/") &&
                             docker_valid_name(c + 64 + strlen("/checkpoints/"));
                }
                if (!ok) {
                        a->r = deny(a->err, sizeof(a->err), "disk use: %s is not a container's checkpoint", p);
                        return;
                }
                walk_bytes = 0;
                (void) nftw(p, walk, 8, FTW_PHYS);
                a->num = walk_bytes;
                a->r = 0;
                return;
        }
        case DC_OP_RUNSC_CHECKPOINT: {
                /* one of our containers, by its full id, and a checkpoint name: the image goes to
                 * that container's own checkpoint directory, nowhere else */
                const char *root = docker_root();
                if (!root || !all_hex(q->arg[0], 64, 64) || !our_container(q->arg[0], true) || !docker_valid_name(q->arg[1]) ||
                    strlen(q->arg[1]) > 64) {
                        a->r = deny(a->err, sizeof(a->err), "runsc checkpoint: %s is not one of our containers by full id, or "
                                                            "the name is not a checkpoint's", q->arg[0]);
                        return;
                }
                struct err e = { 0 };
                a->r = dd_runsc_checkpoint_here(cfg, root, q->arg[0], q->arg[1], q->num, &e);
                snprintf(a->err, sizeof(a->err), "%s", e.message);
                return;
        }
        case DC_OP_FORK: {
                /* our containers by full id (the child's only for a copy), a checkpoint's name */
                const char *root = docker_root();
                bool copy = q->num2 == DD_FORK_COPY;
                if (root && q->num2 == DD_FORK_SWEEP && !q->arg[0][0] && !q->arg[2][0] && startswith(q->arg[1], "fk") &&
                    all_hex(q->arg[1] + 2, 12, 12)) {
                        struct err e = { 0 };
                        a->r = dd_fork_here(root, DD_FORK_SWEEP, "", q->arg[1], "", 0, &e);
                        snprintf(a->err, sizeof(a->err), "%s", e.message);
                        return;
                }
                if (!root || q->num2 < DD_FORK_STAGE || q->num2 > DD_FORK_UNSTAGE || !all_hex(q->arg[0], 64, 64) ||
                    !our_container(q->arg[0], true) || !docker_valid_name(q->arg[1]) || strlen(q->arg[1]) > 64 ||
                    (copy ? !all_hex(q->arg[2], 64, 64) || !our_container(q->arg[2], true) : q->arg[2][0] != 0) ||
                    (copy && !strcmp(q->arg[0], q->arg[2])) || q->num < 0) {
                        a->r = deny(a->err, sizeof(a->err), "fork: not our containers by full id, or not a checkpoint's name");
                        return;
                }
                struct err e = { 0 };
                a->r = dd_fork_here(root, (int) q->num2, q->arg[0], q->arg[1], q->arg[2], (uint64_t) q->num, &e);
                snprintf(a->err, sizeof(a->err), "%s", e.message);
                return;
        }
        case DC_OP_BTRFS_QUOTA:
        case DC_OP_BTRFS_CREATE:
        case DC_OP_BTRFS_DESTROY: {
                if (!cfg->docker_volume_root[0] || strcmp(q->arg[0], cfg->docker_volume_root) ||
                    (q->op != DC_OP_BTRFS_QUOTA && !our_volume(q->arg[1]))) {
                        a->r = deny(a->err, sizeof(a->err), "btrfs: only controld's volumes under [docker] volume_root");
                        return;
                }
                a->r = q->op == DC_OP_BTRFS_QUOTA    ? btrfs_quota_enable(q->arg[0])
                       : q->op == DC_OP_BTRFS_CREATE ? btrfs_subvol_create_capped(q->arg[0], q->arg[1], (uint64_t) (q->num < 0 ? 0 : q->num))
                                                     : btrfs_subvol_destroy(q->arg[0], q->arg[1]);
                return;
        }
        case DC_OP_REG_DIGEST:
        case DC_OP_REG_CONFIG:
        case DC_OP_REG_DELETE:
        case DC_OP_REG_BLOB_EXISTS:
        case DC_OP_REG_BLOB_UPLOAD:
        case DC_OP_REG_MANIFEST_PUT:
                reg_do(q, a);
                return;
        case DC_OP_MAX:
                break;
        }
        a->r = deny(a->err, sizeof(a->err), "op %d is not one the child does", (int) q->op);
}
