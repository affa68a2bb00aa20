/* standin-place.c — placement: evaluations, allocations as real containers on the local
 * dockerd (placement and stop threads), image pulls, and the monitor that notices exits. */
#include <arpa/inet.h>
#include <errno.h>
#include <fnmatch.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "docker.h"
#include "json.h"
#include "standin.h"
#include "strutil.h"

/* ---- placement ---- */

const cJSON *group_of(const cJSON *job, const char *name) {
        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(job, "TaskGroups")) {
                const char *n = json_get_str(g, "Name");
                if (n && strcmp(n, name) == 0)
                        return g;
        }
        return NULL;
}

static const char *docker_network_for(const char *mode) {
        if (!mode || !*mode)
                return NULL;   /* Docker's default bridge, as Nomad's docker driver without a group network */
        for (size_t i = 0; i < cfg.n_nets; i++)
                if (strcmp(cfg.nets[i].cni, mode) == 0)
                        return cfg.nets[i].docker;
        if (strcmp(mode, "none") == 0 || strcmp(mode, "host") == 0 || strcmp(mode, "bridge") == 0)
                return mode;
        return "";   /* unknown: no node offers it */
}

const char *group_net_mode(const cJSON *g) {
        const cJSON *n = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Networks"), 0);
        return n ? json_get_str(n, "Mode") : NULL;
}

/* Why no node fits group g of job (a ConstraintFiltered key, Nomad's wording), or NULL. */
static const char *unplaceable(const cJSON *job, const cJSON *g) {
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        if (!t || strcmp(str_or(json_get_str(t, "Driver"), ""), "docker") != 0)
                return "missing drivers";
        const char *mode = group_net_mode(g);
        const char *net = docker_network_for(mode);
        if (net && !*net)
                return "missing network";
        const cJSON *v;
        cJSON_ArrayForEach(v, cJSON_GetObjectItem(g, "Volumes")) {
                if (strcmp(str_or(json_get_str(v, "Type"), ""), "csi") != 0)
                        continue;
                const char *src = json_get_str(v, "Source");
                if (!src || !volume_find(str_or(json_get_str(job, "Namespace"), "default"), src))
                        return "missing CSI Volume";
        }
        const char *pool = str_or(json_get_str(job, "NodePool"), "default");
        if (strcmp(pool, "all") != 0 && strcmp(pool, cfg.node_pool) != 0)
                return "node pool";   /* no node of the pool: Nomad counts nothing as evaluated */
        bool dc_ok = false;
        const cJSON *dc;
        cJSON_ArrayForEach(dc, cJSON_GetObjectItem(job, "Datacenters"))
                if (cJSON_IsString(dc) && fnmatch(dc->valuestring, cfg.datacenter, 0) == 0)
                        dc_ok = true;
        if (!dc_ok)
                return "datacenter";
        return NULL;
}

static struct node *pick_node(void) {
        if (startswith(cfg.placement, "node:")) {
                int i = atoi(cfg.placement + 5);
                return i >= 0 && i < cfg.n_nodes && nodes[i].eligible ? &nodes[i] : NULL;
        }
        for (int k = 0; k < cfg.n_nodes; k++) {
                struct node *n = &nodes[spread_next++ % (unsigned) cfg.n_nodes];
                if (n->eligible)
                        return n;
        }
        return NULL;
}

static cJSON *alloc_metric(const char *why, int evaluated) {
        cJSON *m = cJSON_CreateObject();
        json_add_int(m, "NodesEvaluated", evaluated);
        json_add_int(m, "NodesFiltered", evaluated);
        json_add_int(m, "NodesInPool", strcmp(why, "node pool") == 0 ? 0 : cfg.n_nodes);
        cJSON *av = cJSON_AddObjectToObject(m, "NodesAvailable");
        json_add_int(av, cfg.datacenter, strcmp(why, "datacenter") == 0 ? 0 : cfg.n_nodes);
        cJSON_AddNullToObject(m, "ClassFiltered");
        cJSON *cf = cJSON_AddObjectToObject(m, "ConstraintFiltered");
        if (evaluated > 0)
                json_add_int(cf, why, evaluated);
        json_add_int(m, "NodesExhausted", 0);
        cJSON_AddNullToObject(m, "ClassExhausted");
        cJSON_AddNullToObject(m, "DimensionExhausted");
        cJSON_AddNullToObject(m, "QuotaExhausted");
        json_add_int(m, "CoalescedFailures", 0);
        return m;
}

static void *place_thread(void *arg);
static void *stop_thread(void *arg);

static void spawn(void *(*fn)(void *), char *arg) {
        pthread_t t;
        workers++;
        if (pthread_create(&t, NULL, fn, arg) != 0)
                abort();
        pthread_detach(t);
}

static struct alloc *alloc_new(struct job *j, const cJSON *g, int index, const char *eval_id, struct node *n) {
        struct alloc *a = xnew0(struct alloc, 1);
        uuid_new(a->id);
        strscpy(a->eval_id, eval_id, sizeof(a->eval_id));
        strscpy(a->node_id, n->id, sizeof(a->node_id));
        strscpy(a->node_name, n->name, sizeof(a->node_name));
        a->ns = xstrdup(j->ns);
        a->job_id = xstrdup(j->id);
        a->group = xstrdup(json_get_str(g, "Name"));
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        a->task = xstrdup(str_or(json_get_str(t, "Name"), "task"));
        a->name = xasprintf("%s.%s[%d]", j->id, a->group, index);
        a->job = cJSON_Duplicate(j->job, true);
        a->job_create_index = j->create_index;
        strscpy(a->desired, "run", sizeof(a->desired));
        strscpy(a->client, "pending", sizeof(a->client));
        a->task_state = cJSON_CreateObject();
        json_add_str(a->task_state, "State", "pending");
        json_add_bool(a->task_state, "Failed", false);
        json_add_int(a->task_state, "Restarts", 0);
        json_add_str(a->task_state, "LastRestart", "0001-01-01T00:00:00Z");
        json_add_str(a->task_state, "StartedAt", "0001-01-01T00:00:00Z");
        json_add_str(a->task_state, "FinishedAt", "0001-01-01T00:00:00Z");
        cJSON_AddArrayToObject(a->task_state, "Events");
        task_event(a, "Received", "Task received by client", false, NULL, -1);
        a->create_time = now_ns();
        a->create_index = bump(&idx_allocs);
        a->modify_index = a->create_index;
        a->modify_time = a->create_time;
        a->next = allocs;
        allocs = a;
        return a;
}

void alloc_request_stop(struct alloc *a, const char *why) {
        if (strcmp(a->desired, "run") != 0)
                return;
        strscpy(a->desired, "stop", sizeof(a->desired));
        strscpy(a->desired_desc, why, sizeof(a->desired_desc));
        a->stop_requested = true;
        alloc_touch(a);
        spawn(stop_thread, xstrdup(a->id));
}

/* An evaluation for job j: stops allocations beyond each group's Count (or all when
 * the job is stopped) and places the missing ones. Returns the eval. Locked. */
struct eval *evaluate(struct job *j, const char *trigger) {
        struct eval *e = xnew0(struct eval, 1);
        uuid_new(e->id);
        e->ns = xstrdup(j->ns);
        e->job_id = xstrdup(j->id);
        e->triggered_by = xstrdup(trigger);
        e->job_modify_index = j->job_modify_index;
        e->create_time = now_ns();
        strscpy(e->status, "complete", sizeof(e->status));
        e->create_index = bump(&idx_evals);
        e->modify_index = e->create_index;
        e->next = evals;
        evals = e;

        const cJSON *g;
        cJSON_ArrayForEach(g, cJSON_GetObjectItem(j->job, "TaskGroups")) {
                const char *gname = json_get_str(g, "Name");
                int64_t want = 1;
                json_get_int(g, "Count", &want);
                if (j->stop || j->purged)
                        want = 0;
                int have = 0;
                for (struct alloc *a = allocs; a; a = a->next)
                        if (strcmp(a->job_id, j->id) == 0 && strcmp(a->ns, j->ns) == 0 && strcmp(a->group, gname) == 0 &&
                            a->job_create_index == j->create_index && strcmp(a->desired, "run") == 0) {
                                /* Reschedule attempts 0: a failed or lost allocation is not replaced, and it
                                 * still counts, so an evaluation does not place a second one. */
                                if (have >= want) {
                                        alloc_request_stop(a, "alloc not needed due to job update");
                                        continue;
                                }
                                have++;
                        }
                if (have >= want)
                        continue;
                const char *why = unplaceable(j->job, g);
                if (!why && fault.fail_placement > 0) {
                        fault.fail_placement--;
                        why = "stand-in injected fault: no node fits";
                }
                struct node *n = why ? NULL : pick_node();
                if (!why && !n)
                        why = "node is ineligible";
                if (why) {
                        if (!e->failed_tg)
                                e->failed_tg = cJSON_CreateObject();
                        int evaluated = strcmp(why, "node pool") == 0 || strcmp(why, "datacenter") == 0 ? 0 : cfg.n_nodes;
                        cJSON *m = alloc_metric(why, evaluated);
                        json_add_int(m, "CoalescedFailures", want - have - 1);
                        cJSON_AddItemToObject(e->failed_tg, gname, m);
                        if (!e->blocked_eval[0])
                                uuid_new(e->blocked_eval);
                        continue;
                }
                for (int k = have; k < want; k++) {
                        struct node *nn = k == have ? n : pick_node();
                        if (!nn)
                                break;
                        int index = 0;   /* the lowest name index not in use */
                        for (bool used = true; used; index++) {
                                used = false;
                                _cleanup_free_ char *nm = xasprintf("%s.%s[%d]", j->id, gname, index);
                                for (struct alloc *a = allocs; a; a = a->next)
                                        if (strcmp(a->desired, "run") == 0 && strcmp(a->name, nm) == 0 &&
                                            strcmp(a->ns, j->ns) == 0)
                                                used = true;
                                if (!used)
                                        break;
                        }
                        struct alloc *a = alloc_new(j, g, index, e->id, nn);
                        spawn(place_thread, xstrdup(a->id));
                }
        }
        return e;
}

/* The docker config's auth block (an object, or as Nomad's JSON jobs write blocks, an array
 * of one) as Docker's X-Registry-Auth: base64url of {"username","password","email",
 * "serveraddress"}, as go-dockerclient sends it for Nomad's docker driver. "e30=" ({}) when
 * the task has no credentials. */
static char *pull_auth(const cJSON *conf) {
        const cJSON *a = cJSON_GetObjectItem(conf, "auth");
        if (cJSON_IsArray(a))
                a = cJSON_GetArrayItem(a, 0);
        if (!cJSON_IsObject(a) || !json_get_str(a, "username"))
                return xstrdup("e30=");
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "username", json_get_str(a, "username"));
        json_add_str(o, "password", str_or(json_get_str(a, "password"), ""));
        json_add_str(o, "email", str_or(json_get_str(a, "email"), ""));
        json_add_str(o, "serveraddress", str_or(json_get_str(a, "server_address"), ""));
        _cleanup_free_ char *text = json_print(o);
        char *b = base64_encode(text, strlen(text), NULL);
        for (char *p = b; *p; p++)
                *p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
        return b;
}

/* Nomad's docker driver (coordinator.go): an image the node already holds is used as it is
 * (force_pull false); otherwise a "Driver" event "Downloading image" and a pull with the
 * task's auth. A failed pull fails the task: "Failed to pull `<image>`: ... <Docker's error>". */
static int ensure_image(struct alloc *a, const cJSON *conf, const char *image, char **ret_err) {
        int r = docker_image_exists(standin_docker(), image);
        if (r > 0)
                return 0;
        /* repo:tag, repo (latest) or repo@sha256:... (by digest, as Nomad's docker driver takes it). */
        const char *slash = strrchr(image, '/'), *at = strchr(slash ? slash : image, '@');
        const char *colon = at ? at : strrchr(image, ':');
        if (colon && slash && colon < slash)
                colon = NULL;
        if (r < 0) {
                *ret_err = xasprintf("Failed to pull `%s`: %s", image, str_or(docker_last_error(), strerror(-r)));
                return r;
        }
        pthread_mutex_lock(&mu);
        task_event(a, "Driver", "Downloading image", false, NULL, -1);
        alloc_touch(a);
        pthread_mutex_unlock(&mu);
        _cleanup_free_ char *name = colon ? xstrndup(image, (size_t) (colon - image)) : xstrdup(image);
        _cleanup_free_ char *auth = pull_auth(conf);
        r = docker_image_pull(standin_docker(), name, colon ? colon + 1 : "latest", auth);
        if (r < 0) {
                /* Nomad's words, then Docker's error; the middle part says why a pull was tried. */
                *ret_err = xasprintf("Failed to pull `%s`: image not present on the stand-in's dockerd and the pull failed: %s",
                                     image, str_or(docker_last_error(), strerror(-r)));
                return r;
        }
        return 0;
}

/* The docker config's `mounts` as Nomad's docker driver takes them: bind (an absolute host
 * path needs the plugin's volumes.enabled), volume (a named Docker volume; with a
 * driver_config only the local driver's tmpfs is supported here, and it needs volumes.enabled
 * as on Nomad). Appended to mounts[*n..max). */
static int task_mounts(const cJSON *c, struct docker_mount *mounts, size_t max, size_t *n, char **ret_err) {
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "mounts")) {
                const char *type = str_or(json_get_str(x, "type"), "volume");
                const char *target = json_get_str(x, "target"), *source = json_get_str(x, "source");
                bool ro = cJSON_IsTrue(cJSON_GetObjectItem(x, "readonly"));
                if (!strcmp(type, "tmpfs")) {
                        /* Nomad: no source, tmpfs_options {size (bytes), mode} */
                        int64_t bytes = 0;
                        if (source && *source) {
                                *ret_err = xstrdup("failed to create container configuration: invalid source, must be \"\" for tmpfs");
                                return -EINVAL;
                        }
                        if (!target || target[0] != '/' || *n == max) {
                                *ret_err = xstrdup(*n == max ? "nomad-standin: too many mounts" : "nomad-standin: a tmpfs needs an absolute target");
                                return -EINVAL;
                        }
                        if (!json_get_int(cJSON_GetObjectItem(x, "tmpfs_options"), "size", &bytes) || bytes <= 0) {
                                *ret_err = xstrdup("nomad-standin: only tmpfs mounts with tmpfs_options.size are supported");
                                return -EINVAL;
                        }
                        mounts[(*n)++] = (struct docker_mount) { .target = target, .read_only = ro, .tmpfs_bytes = bytes };
                        continue;
                }
                if (!target || !*target || !source || !*source) {
                        *ret_err = xstrdup("failed to create container configuration: mount target and source are required");
                        return -EINVAL;
                }
                if (*n == max) {
                        *ret_err = xstrdup("nomad-standin: too many mounts");
                        return -EINVAL;
                }
                if (!strcmp(type, "bind")) {
                        if (source[0] != '/') {
                                *ret_err = xstrdup("nomad-standin: only absolute bind sources are supported");
                                return -EINVAL;
                        }
                        if (!cfg.volumes_enabled) {
                                *ret_err = xasprintf("volumes are not enabled; cannot mount host paths: \"%s\"", source);
                                return -EPERM;
                        }
                        mounts[(*n)++] = (struct docker_mount) { .bind = source, .target = target, .read_only = ro };
                        continue;
                }
                if (strcmp(type, "volume") != 0) {
                        *ret_err = xasprintf("nomad-standin: mount type \"%s\" is not supported", type);
                        return -EINVAL;
                }
                const cJSON *dc = cJSON_GetObjectItem(cJSON_GetObjectItem(x, "volume_options"), "driver_config");
                const char *drv = json_get_str(dc, "name");
                struct docker_kv lbl[] = { { LABEL_KEY, cfg.instance } };
                int r;
                if (drv && *drv) {
                        if (!cfg.volumes_enabled) {
                                *ret_err = xasprintf("volumes are not enabled; cannot use volume driver \"%s\"", drv);
                                return -EPERM;
                        }
                        const cJSON *o0 = cJSON_GetArrayItem(cJSON_GetObjectItem(dc, "options"), 0);
                        const char *vt = json_get_str(o0, "type"), *vo = json_get_str(o0, "o");
                        const char *sz = vo ? strstr(vo, "size=") : NULL;
                        int64_t bytes = sz ? strtoll(sz + 5, NULL, 10) : 0;
                        if (strcmp(drv, "local") != 0 || !vt || strcmp(vt, "tmpfs") != 0 || bytes <= 0) {
                                *ret_err = xstrdup("nomad-standin: of volume drivers only local tmpfs volumes with a size are supported");
                                return -EINVAL;
                        }
                        r = docker_volume_create_tmpfs(standin_docker(), source, bytes, lbl, ELEMENTSOF(lbl));
                } else
                        r = docker_volume_create(standin_docker(), source, lbl, ELEMENTSOF(lbl));
                if (r < 0) {
                        *ret_err = xasprintf("failed to create volume \"%s\": %s", source,
                                             str_or(docker_last_error(), strerror(-r)));
                        return r;
                }
                standin_volume_made(source);
                mounts[(*n)++] = (struct docker_mount) { .volume = source, .target = target, .read_only = ro };
        }
        return 0;
}

/* Builds the container from the task's docker config as Nomad's docker driver does. */
static int start_container(struct alloc *a, char **ret_id, char **ret_err) {
        const cJSON *g = group_of(a->job, a->group);
        const cJSON *t = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "Tasks"), 0);
        const cJSON *c = cJSON_GetObjectItem(t, "Config");
        const cJSON *res = cJSON_GetObjectItem(t, "Resources");
        const char *image = json_get_str(c, "image");
        if (!image) {
                *ret_err = xstrdup("failed to create container: image is required");
                return -EINVAL;
        }
        /* command is one string, arguments in args. */
        _cleanup_free_ const char **argv = xnew0(const char *, (size_t) cJSON_GetArraySize(cJSON_GetObjectItem(c, "args")) + 2);
        size_t n = 0;
        if (json_get_str(c, "command"))
                argv[n++] = json_get_str(c, "command");
        const cJSON *x;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "args"))
                if (cJSON_IsString(x))
                        argv[n++] = x->valuestring;
        /* entrypoint is a list; it replaces the image's, as docker's --entrypoint */
        const cJSON *ep = cJSON_GetObjectItem(c, "entrypoint");
        _cleanup_free_ const char **epv = xnew0(const char *, (size_t) cJSON_GetArraySize(ep) + 1);
        size_t ne = 0;
        cJSON_ArrayForEach(x, ep)
                if (cJSON_IsString(x))
                        epv[ne++] = x->valuestring;
        /* The task's Env, as K=V (Nomad adds its NOMAD_* variables too; the stand-in does not). */
        const cJSON *tenv = cJSON_GetObjectItem(t, "Env");
        _cleanup_free_ char **envv = xnew0(char *, (size_t) cJSON_GetArraySize(tenv) + 1);
        size_t nenv = 0;
        cJSON_ArrayForEach(x, tenv)
                if (cJSON_IsString(x) && x->string)
                        envv[nenv++] = xasprintf("%s=%s", x->string, x->valuestring);
        struct docker_create_opts o = {
                .image = image,
                .entrypoint = ne ? epv : NULL,
                .env = nenv ? (const char *const *) envv : NULL,
                .cmd = n ? argv : NULL,
                .runtime = json_get_str(c, "runtime"),
                .network_mode = docker_network_for(group_net_mode(g)),
        };
        _cleanup_free_ char *name = xasprintf("%s-%s", a->task, a->id);
        o.name = name;
        int64_t v;
        if (json_get_int(res, "CPU", &v))
                o.cpu_shares = v;
        int64_t mem = 0, memmax = 0;
        json_get_int(res, "MemoryMB", &mem);
        json_get_int(res, "MemoryMaxMB", &memmax);
        if (memmax > 0) {
                o.memory_bytes = memmax << 20;
                o.memory_reservation = mem << 20;
        } else
                o.memory_bytes = mem << 20;
        if (json_get_int(c, "pids_limit", &v))
                o.pids_limit = v;
        /* healthchecks { disable = true }: the image's HEALTHCHECK is replaced by {"Test":["NONE"]}
         * (a block: an object, or an array of one as Nomad's JSON jobs write blocks). */
        const cJSON *hcb = cJSON_GetObjectItem(c, "healthchecks");
        if (cJSON_IsArray(hcb))
                hcb = cJSON_GetArrayItem(hcb, 0);
        o.no_healthcheck = cJSON_IsTrue(cJSON_GetObjectItem(hcb, "disable"));
        const cJSON *b = cJSON_GetObjectItem(c, "cpu_hard_limit");
        if (cJSON_IsTrue(b) && json_get_int(res, "CPU", &v))
                o.nano_cpus = v * 1000000;   /* stand-in nodes: 1000 MHz per core */
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "cap_drop")) {
                if (!cJSON_IsString(x) || strcasecmp(x->valuestring, "ALL") != 0) {
                        *ret_err = xstrdup("nomad-standin: only cap_drop [\"ALL\"] is supported");
                        return -EINVAL;
                }
                o.cap_drop_all = true;
        }
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "cap_add")) {
                if (!cJSON_IsString(x) || strcasecmp(x->valuestring, "ALL") != 0) {
                        *ret_err = xstrdup("nomad-standin: only cap_add [\"ALL\"] is supported");
                        return -EINVAL;
                }
                o.cap_add_all = true;
        }
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(c, "security_opt")) {
                if (!cJSON_IsString(x) || strcmp(x->valuestring, "no-new-privileges") != 0) {
                        *ret_err = xstrdup("nomad-standin: only security_opt [\"no-new-privileges\"] is supported");
                        return -EINVAL;
                }
                o.no_new_privileges = true;
        }
        /* CSI volumes: the Docker volume behind each, mounted where the task asks. */
        struct docker_mount mounts[8 + DOCKER_IMAGE_VOLUMES_MAX];
        size_t nm = 0;
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(t, "VolumeMounts")) {
                const char *vname = json_get_str(x, "Volume");
                const cJSON *gv = vname ? cJSON_GetObjectItem(cJSON_GetObjectItem(g, "Volumes"), vname) : NULL;
                pthread_mutex_lock(&mu);
                struct volume *vol = gv ? volume_find(a->ns, str_or(json_get_str(gv, "Source"), "")) : NULL;
                const char *dname = vol ? vol->docker_name : NULL;
                pthread_mutex_unlock(&mu);
                if (!dname || nm == ELEMENTSOF(mounts)) {
                        *ret_err = xasprintf("failed to setup alloc: volume \"%s\" is not available", str_or(vname, ""));
                        return -EINVAL;
                }
                mounts[nm++] = (struct docker_mount) { .volume = dname, .target = json_get_str(x, "Destination"),
                                                       .read_only = cJSON_IsTrue(cJSON_GetObjectItem(x, "ReadOnly")) };
        }
        int mr = task_mounts(c, mounts, ELEMENTSOF(mounts), &nm, ret_err);
        if (mr < 0) {
                for (size_t i = 0; i < nenv; i++)
                        free(envv[i]);
                return mr;
        }
        o.mounts = mounts;
        o.n_mounts = nm;
        struct docker_kv labels[] = {
                { ALLOC_LABEL, a->id },
                { "com.hashicorp.nomad.job_id", a->job_id },
                { "com.hashicorp.nomad.namespace", a->ns },
                { "com.hashicorp.nomad.node_id", a->node_id },
                { "com.hashicorp.nomad.task_group_name", a->group },
                { "com.hashicorp.nomad.task_name", a->task },
                { LABEL_KEY, cfg.instance },
        };
        o.labels = labels;
        o.n_labels = ELEMENTSOF(labels);
        _cleanup_free_ char *id = NULL;
        int r = ensure_image(a, c, image, ret_err);
        if (r < 0)
                return r;
        r = docker_container_create(standin_docker(), &o, &id);
        for (size_t i = 0; i < nenv; i++)
                free(envv[i]);
        if (r == -ENOENT) {
                *ret_err = xasprintf("Failed to pull `%s`: image not present on the stand-in's dockerd", image);
                return r;
        }
        if (r < 0) {
                *ret_err = xasprintf("failed to create container: %s", str_or(docker_last_error(), strerror(-r)));
                return r;
        }
        r = docker_container_start(standin_docker(), id);
        if (r < 0) {
                *ret_err = xasprintf("failed to start task: %s", str_or(docker_last_error(), strerror(-r)));
                docker_container_remove(standin_docker(), id, true, true);
                return r;
        }
        *ret_id = TAKE_PTR(id);
        return 0;
}

static void alloc_fail(struct alloc *a, const char *msg) {
        task_event(a, "Driver Failure", msg, false, msg, -1);
        task_event(a, "Not Restarting", "Policy allows no restarts", true, NULL, -1);
        task_state_set(a, "dead", true);
        strscpy(a->client, "failed", sizeof(a->client));
        strscpy(a->client_desc, "Failed tasks", sizeof(a->client_desc));
        alloc_touch(a);
}

static void worker_done(void) {
        pthread_mutex_lock(&mu);
        workers--;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&mu);
}

static void sleep_ms(long ms) {
        struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static void *place_thread(void *arg) {
        _cleanup_free_ char *id = arg;
        pthread_mutex_lock(&mu);
        long slow = fault.slow_placement_ms;
        pthread_mutex_unlock(&mu);
        if (slow > 0)
                sleep_ms(slow);

        pthread_mutex_lock(&mu);
        struct alloc *a = alloc_find(id);
        bool go = a && strcmp(a->desired, "run") == 0 && !stopping;
        bool driver_fail = go && fault.driver_failure > 0;
        if (driver_fail)
                fault.driver_failure--;
        _cleanup_free_ char *dmsg = driver_fail ? xstrdup(str_or(fault.driver_message,
                                                             "failed to create container: stand-in injected driver failure"))
                                                : NULL;
        if (go) {
                task_event(a, "Task Setup", "Building Task Directory", false, NULL, -1);
                alloc_touch(a);
        } else if (a && strcmp(a->client, "pending") == 0) {
                /* Stopped before it started: nothing to run, the allocation completes. */
                task_state_set(a, "dead", false);
                strscpy(a->client, "complete", sizeof(a->client));
                strscpy(a->client_desc, "All tasks have completed", sizeof(a->client_desc));
                alloc_touch(a);
        }
        pthread_mutex_unlock(&mu);
        if (!go) {
                worker_done();
                return NULL;
        }

        _cleanup_free_ char *cid = NULL, *err = NULL;
        int r = driver_fail ? -EIO : start_container(a, &cid, &err);
        struct docker_container_state st = { 0 };
        if (r >= 0)
                docker_container_inspect(standin_docker(), cid, &st);

        pthread_mutex_lock(&mu);
        if (r < 0)
                alloc_fail(a, driver_fail ? dmsg : err);
        else {
                a->container = xstrdup(cid);
                const char *mode = group_net_mode(group_of(a->job, a->group));
                if (mode && (startswith(mode, "cni/") || strcmp(mode, "bridge") == 0))
                        strscpy(a->address, st.ip, sizeof(a->address));
                task_event(a, "Started", "Task started by client", false, NULL, -1);
                task_state_set(a, "running", false);
                strscpy(a->client, "running", sizeof(a->client));
                strscpy(a->client_desc, "Tasks are running", sizeof(a->client_desc));
                alloc_touch(a);
        }
        bool stop_now = r >= 0 && a->stop_requested;   /* stopped while we were starting it */
        long lose = r >= 0 && fault.lose_after_ms > 0 && fault.lose_count != 0 ? fault.lose_after_ms : 0;
        if (lose && fault.lose_count > 0)
                fault.lose_count--;
        pthread_mutex_unlock(&mu);

        if (stop_now) {
                pthread_mutex_lock(&mu);
                spawn(stop_thread, xstrdup(id));
                pthread_mutex_unlock(&mu);
        } else if (lose) {
                sleep_ms(lose);
                pthread_mutex_lock(&mu);
                bool still = strcmp(a->client, "running") == 0 && strcmp(a->desired, "run") == 0;
                if (still) {
                        strscpy(a->desired, "stop", sizeof(a->desired));
                        strscpy(a->desired_desc, "alloc is lost since its node is down", sizeof(a->desired_desc));
                        strscpy(a->client, "lost", sizeof(a->client));
                        strscpy(a->client_desc, "alloc is lost since its node is down", sizeof(a->client_desc));
                        task_state_set(a, "dead", false);
                        alloc_touch(a);
                }
                pthread_mutex_unlock(&mu);
                if (still)
                        docker_container_remove(standin_docker(), cid, true, true);
        }
        worker_done();
        return NULL;
}

static void *stop_thread(void *arg) {
        _cleanup_free_ char *id = arg;
        pthread_mutex_lock(&mu);
        struct alloc *a = alloc_find(id);
        _cleanup_free_ char *cid = a && a->container ? xstrdup(a->container) : NULL;
        bool running = a && strcmp(a->client, "running") == 0;
        if (running) {
                task_event(a, "Killing", "Sent interrupt. Waiting 5s before force killing", false, NULL, -1);
                alloc_touch(a);
        }
        pthread_mutex_unlock(&mu);
        if (cid)
                docker_container_remove(standin_docker(), cid, true, true);
        pthread_mutex_lock(&mu);
        if (running) {
                task_event(a, "Killed", "Task successfully killed", false, NULL, -1);
                task_state_set(a, "dead", false);
                strscpy(a->client, "complete", sizeof(a->client));
                strscpy(a->client_desc, "All tasks have completed", sizeof(a->client_desc));
                alloc_touch(a);
        }
        pthread_mutex_unlock(&mu);
        worker_done();
        return NULL;
}

/* Allocation whose container died on its own: the task is dead, restart attempts 0. */
void *monitor_thread(void *arg) {
        (void) arg;
        while (!stopping) {
                sleep_ms(1000);
                char ids[64][37], cids[64][80];
                int n = 0;
                pthread_mutex_lock(&mu);
                for (struct alloc *a = allocs; a && n < 64; a = a->next)
                        if (strcmp(a->client, "running") == 0 && strcmp(a->desired, "run") == 0 && a->container) {
                                strscpy(ids[n], a->id, 37);
                                strscpy(cids[n], a->container, 80);
                                n++;
                        }
                pthread_mutex_unlock(&mu);
                for (int i = 0; i < n; i++) {
                        struct docker_container_state st = { 0 };
                        if (docker_container_inspect(standin_docker(), cids[i], &st) < 0 || st.running)
                                continue;
                        pthread_mutex_lock(&mu);
                        struct alloc *a = alloc_find(ids[i]);
                        if (a && strcmp(a->client, "running") == 0 && strcmp(a->desired, "run") == 0) {
                                _cleanup_free_ char *m = xasprintf("Exit Code: %d%s", st.exists ? st.exit_code : 137,
                                                                   st.oom_killed ? ", OOM Killed" : "");
                                task_event(a, "Terminated", m, false, NULL, st.exists ? st.exit_code : 137);
                                bool ok = st.exists && st.exit_code == 0;
                                if (!ok)
                                        task_event(a, "Not Restarting", "Policy allows no restarts", true, NULL, -1);
                                task_state_set(a, "dead", !ok);
                                strscpy(a->client, ok ? "complete" : "failed", sizeof(a->client));
                                strscpy(a->client_desc, ok ? "All tasks have completed" : "Failed tasks",
                                        sizeof(a->client_desc));
                                alloc_touch(a);
                        }
                        pthread_mutex_unlock(&mu);
                }
        }
        return NULL;
}
