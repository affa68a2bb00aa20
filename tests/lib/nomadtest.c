/* nomadtest.c — see nomadtest.h. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cleanup.h"
#include "nomadtest.h"
#include "testlib.h"

static int free_port(void) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET };
        socklen_t l = sizeof(a);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (fd < 0 || bind(fd, (struct sockaddr *) &a, sizeof(a)) < 0 || getsockname(fd, (struct sockaddr *) &a, &l) < 0)
                abort();
        close(fd);
        return ntohs(a.sin_port);
}

void need_nstandin(void) {
        if (access(test_build_path("tests/nomad/nomad-standin"), X_OK) != 0)
                TEST_SKIP("the Nomad stand-in is not built (build/tests/nomad/nomad-standin)");
}

struct sink { char *buf; size_t len; };
static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
        struct sink *s = ud;
        size_t k = sz * n;
        s->buf = xrealloc(s->buf, s->len + k + 1);
        memcpy(s->buf + s->len, p, k);
        s->len += k;
        s->buf[s->len] = 0;
        return k;
}

static long call(struct nstandin *s, const char *method, const char *path, const char *body, char **ret) {
        CURL *h = curl_easy_init();
        struct sink k = { 0 };
        char url[1024];
        long st = 0;
        struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
        snprintf(url, sizeof(url), "%s%s", s->url, path);
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &k);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
        if (body)
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
        if (curl_easy_perform(h) == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &st);
        curl_easy_cleanup(h);
        curl_slist_free_all(hl);
        if (ret)
                *ret = k.buf;
        else
                free(k.buf);
        return st;
}

static void nstandin_stop_hook(void *ud) { nstandin_stop(ud); }

void nstandin_start(struct nstandin *s, const char *dir, const char *const *args) {
        memset(s, 0, sizeof(*s));
        s->port = free_port();
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
        for (const char *const *a = args; a && *a && n < 46; a++)
                argv[n++] = *a;
        argv[n] = NULL;
        pid_t p = fork();
        ASSERT_TRUE(p >= 0);
        if (p == 0) {
                int fd = open(s->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
                dup2(fd, STDERR_FILENO);
                dup2(fd, STDOUT_FILENO);
                execv(argv[0], (char *const *) argv);
                _exit(127);
        }
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
