/* nomadtest.c — see nomadtest.h. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "httpc.h"
#include "nomadtest.h"
#include "testlib.h"

void need_nstandin(void) {
        if (access(test_build_path("tests/nomad/nomad-standin"), X_OK) != 0)
                TEST_SKIP("the Nomad stand-in is not built (build/tests/nomad/nomad-standin)");
}

/* One request to the stand-in: its status (0 when it did not answer), the body in *ret (NULL = dropped). */
static long call(struct nstandin *s, const char *method, const char *path, const char *body, char **ret) {
        _cleanup_free_ char *url = xasprintf("%s%s", s->url, path);
        struct httpc_req rq = { .method = method, .url = url, .body = body, .body_len = body ? strlen(body) : 0,
                                .content_type = "application/json" };
        struct httpc_resp r = { 0 };
        if (httpc_do(&rq, &r) < 0)
                return 0;
        if (ret)
                *ret = TAKE_PTR(r.body);
        long st = r.status;
        httpc_resp_done(&r);
        return st;
}

static void nstandin_stop_hook(void *ud) { nstandin_stop(ud); }

void nstandin_start(struct nstandin *s, const char *dir, const char *const *args) {
        memset(s, 0, sizeof(*s));
        s->port = test_free_port();
        snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", s->port);
        snprintf(s->record, sizeof(s->record), "%s/nomad-requests.log", dir);
        snprintf(s->log, sizeof(s->log), "%s/nomad-standin.log", dir);
        char listen[64];
        snprintf(listen, sizeof(listen), "127.0.0.1:%d", s->port);
        const char *argv[48];
        int n = 0;
        argv[n++] = test_build_path("tests/nomad/nomad-standin");
        argv[n++] = "--listen";
        argv[n++] = listen;
        argv[n++] = "--record";
        argv[n++] = s->record;
        /* as packaging/nomad/client-sandbox.hcl: the docker plugin's volumes.enabled */
        argv[n++] = "--volumes-enabled";
        for (const char *const *a = args; a && *a && n < 46; a++)
                argv[n++] = *a;
        argv[n] = NULL;
        pid_t p = test_spawn_logged(argv[0], argv, s->log);
        s->pid = p;
        struct nstandin *shadow = xnew0(struct nstandin, 1);
        *shadow = *s;
        test_on_exit(nstandin_stop_hook, shadow);
        for (int i = 0; i < 500; i++) {
                /* Any answer will do: with --token even /v1/nodes is 403 without one. */
                if (test_port_open(s->port) && call(s, "GET", "/v1/nodes", NULL, NULL) > 0)
                        return;
                int st;
                if (waitpid(p, &st, WNOHANG) == p) {
                        s->pid = 0;
                        shadow->pid = 0;
                        test_fail(__FILE__, __LINE__, "nomad-standin exited during start; see %s", s->log);
                }
                usleep(10000);
        }
        test_fail(__FILE__, __LINE__, "nomad-standin did not answer; see %s", s->log);
}

void nstandin_stop(struct nstandin *s) {
        if (s->pid <= 0)
                return;
        /* Only the process that started it stops it (forked test children share the struct). */
        if (kill(s->pid, 0) < 0) {
                s->pid = 0;
                return;
        }
        kill(s->pid, SIGTERM);
        for (int i = 0; i < 1500; i++) {
                if (waitpid(s->pid, NULL, WNOHANG) == s->pid) {
                        s->pid = 0;
                        return;
                }
                usleep(10000);
        }
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
}

void nstandin_fault(struct nstandin *s, const char *json) {
        long st = call(s, "POST", "/_standin/fault", json, NULL);
        if (st != 200)
                test_fail(__FILE__, __LINE__, "stand-in refused fault %s (%ld)", json, st);
}

cJSON *nstandin_get(struct nstandin *s, const char *path) {
        _cleanup_free_ char *b = NULL;
        if (call(s, "GET", path, NULL, &b) != 200 || !b)
                return NULL;
        return cJSON_Parse(b);
}

cJSON *nstandin_state(struct nstandin *s) {
        cJSON *j = nstandin_get(s, "/_standin/state");
        if (!j)
                test_fail(__FILE__, __LINE__, "stand-in state unreadable");
        return j;
}

cJSON *nstandin_requests(struct nstandin *s) {
        cJSON *arr = cJSON_CreateArray();
        FILE *f = fopen(s->record, "re");
        if (!f)
                return arr;
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0) {
                cJSON *o = cJSON_Parse(line);
                if (o)
                        cJSON_AddItemToArray(arr, o);
        }
        free(line);
        fclose(f);
        return arr;
}

int nstandin_count(struct nstandin *s, const char *method, const char *prefix) {
        _cleanup_json_ cJSON *a = nstandin_requests(s);
        int n = 0;
        const cJSON *o;
        cJSON_ArrayForEach(o, a) {
                const cJSON *m = cJSON_GetObjectItem(o, "Method"), *p = cJSON_GetObjectItem(o, "Path");
                if (!cJSON_IsString(m) || !cJSON_IsString(p))
                        continue;
                if (method && strcmp(m->valuestring, method) != 0)
                        continue;
                if (strncmp(p->valuestring, prefix, strlen(prefix)) == 0)
                        n++;
        }
        return n;
}

int nstandin_job_count(struct nstandin *s) {
        _cleanup_json_ cJSON *st = nstandin_state(s);
        return cJSON_GetArraySize(cJSON_GetObjectItem(st, "Jobs"));
}

const char *nstandin_container(struct nstandin *s, const char *sandbox_id) {
        static char buf[128];
        _cleanup_json_ cJSON *st = nstandin_state(s);
        char job[64];
        snprintf(job, sizeof(job), "sandbox-%s", sandbox_id);
        const cJSON *a;
        cJSON_ArrayForEach(a, cJSON_GetObjectItem(st, "Allocations")) {
                const cJSON *j = cJSON_GetObjectItem(a, "JobID"), *d = cJSON_GetObjectItem(a, "DesiredStatus");
                const cJSON *id = cJSON_GetObjectItem(a, "ID"), *t = cJSON_GetObjectItem(a, "TaskGroup");
                if (cJSON_IsString(j) && !strcmp(j->valuestring, job) && cJSON_IsString(d) && !strcmp(d->valuestring, "run") &&
                    cJSON_IsString(id) && cJSON_IsString(t)) {
                        /* Nomad's docker driver names the container <task>-<alloc id>; task = group here. */
                        snprintf(buf, sizeof(buf), "sandbox-%s", id->valuestring);
                        return buf;
                }
        }
        return NULL;
}

void nstandin_start_one_node(struct nstandin *s, const char *dir, char *node_id, size_t size) {
        const char *args[] = { "--nodes", "1", "--net-map", "cni/sandbox-no-egress=none", NULL };
        nstandin_start(s, dir, args);
        _cleanup_json_ cJSON *self = nstandin_get(s, "/v1/agent/self");
        const cJSON *nid = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(self, "stats"), "client"), "node_id");
        ASSERT_TRUE(cJSON_IsString(nid));
        snprintf(node_id, size, "%s", nid->valuestring);
}
