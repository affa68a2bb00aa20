/* standin-http.c — HTTP plumbing (bodies, replies, ACLs, blocking queries), the /_standin
 * fault and state endpoints, and the route table with the MHD request handler. */
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

/* ---- HTTP plumbing ---- */

static void add_headers(struct MHD_Response *r, uint64_t index, bool query) {
        if (index) {
                char b[32];
                snprintf(b, sizeof(b), "%" PRIu64, index);
                MHD_add_response_header(r, "X-Nomad-Index", b);
        }
        if (query) {
                MHD_add_response_header(r, "X-Nomad-KnownLeader", "true");
                MHD_add_response_header(r, "X-Nomad-LastContact", "0");
        }
}

static enum MHD_Result reply_raw(struct MHD_Connection *c, unsigned code, const char *ctype, char *body, uint64_t index,
                                 bool query) {
        size_t len = body ? strlen(body) : 0;
        struct MHD_Response *r = MHD_create_response_from_buffer(len, body ? body : (char *) "",
                                                                 body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (ctype)
                MHD_add_response_header(r, "Content-Type", ctype);
        add_headers(r, index, query);
        enum MHD_Result ret = MHD_queue_response(c, code, r);
        MHD_destroy_response(r);
        return ret;
}

enum MHD_Result reply_err(struct MHD_Connection *c, unsigned code, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        char *m = NULL;
        if (vasprintf(&m, fmt, ap) < 0)
                oom();
        va_end(ap);
        return reply_raw(c, code, "text/plain; charset=utf-8", m, 0, false);
}

enum MHD_Result standin_reply_text(struct MHD_Connection *c, unsigned code, const char *text) {
        return reply_err(c, code, "%s", text);
}

/* Takes ownership of j (NULL = no body, as Nomad's handlers that return nil). */
enum MHD_Result reply_json(struct MHD_Connection *c, cJSON *j, uint64_t index, bool query) {
        if (!j)
                return reply_raw(c, 200, NULL, NULL, index, query);
        char *s = json_print(j);
        cJSON_Delete(j);
        return reply_raw(c, 200, "application/json", s, index, query);
}

const char *arg(struct MHD_Connection *c, const char *k) {
        return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, k);
}

static const char *request_token(struct MHD_Connection *c) {
        const char *t = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Nomad-Token");
        if (t && *t)
                return t;
        const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
        if (a && strncasecmp(a, "Bearer ", 7) == 0)
                return a + 7;
        return NULL;
}

int standin_acl(const char *token, const char **ret_msg) {
        if (!cfg.token)
                return 0;
        if (!token || !*token) {
                *ret_msg = "Permission denied";   /* the anonymous token may do nothing */
                return 403;
        }
        if (!streq_const(token, cfg.token)) {
                *ret_msg = "ACL token not found";
                return 403;
        }
        return 0;
}

/* Go's time.ParseDuration for the forms clients send: "300s", "5m", "250ms", "1m30s", "1.5s". */
static int parse_go_duration(const char *s, int64_t *ret_ms) {
        if (!s || !*s)
                return -EINVAL;
        if (strcmp(s, "0") == 0) {
                *ret_ms = 0;
                return 0;
        }
        double total = 0;
        const char *p = s;
        while (*p) {
                char *end;
                double v = strtod(p, &end);
                if (end == p || v < 0)
                        return -EINVAL;
                p = end;
                double unit;
                if (startswith(p, "ns")) unit = 1e-6, p += 2;
                else if (startswith(p, "us") || startswith(p, "µs")) unit = 1e-3, p += startswith(p, "us") ? 2 : 3;
                else if (startswith(p, "ms")) unit = 1, p += 2;
                else if (*p == 's') unit = 1000, p++;
                else if (*p == 'm') unit = 60000, p++;
                else if (*p == 'h') unit = 3600000, p++;
                else return -EINVAL;
                total += v * unit;
        }
        *ret_ms = (int64_t) total;
        return 0;
}

/* Parses ?index=&wait= as Nomad does. 0, or replies 400 itself and returns -1. */
static int parse_blocking(struct MHD_Connection *c, uint64_t *ret_index, int64_t *ret_wait_ms, enum MHD_Result *ret) {
        *ret_index = 0;
        *ret_wait_ms = DEFAULT_WAIT_MS;
        const char *w = arg(c, "wait"), *i = arg(c, "index");
        if (w && *w) {
                int64_t ms;
                if (parse_go_duration(w, &ms) < 0) {
                        *ret = reply_err(c, 400, "Invalid wait time");
                        return -1;
                }
                *ret_wait_ms = ms > MAX_WAIT_MS ? MAX_WAIT_MS : ms;
        }
        if (i && *i) {
                char *end;
                errno = 0;
                unsigned long long v = strtoull(i, &end, 10);
                if (errno || *end || i[0] == '-') {
                        *ret = reply_err(c, 400, "Invalid index");
                        return -1;
                }
                *ret_index = v;
        }
        /* Nomad adds up to wait/16 of jitter. */
        if (*ret_wait_ms > 16) {
                uint32_t r;
                if (getrandom(&r, sizeof(r), 0) == sizeof(r))
                        *ret_wait_ms += r % (uint64_t) (*ret_wait_ms / 16);
        }
        return 0;
}

/* Waits (locked) until relevant() > min_index, the deadline, or shutdown. */
static void block_until(uint64_t min_index, int64_t wait_ms, uint64_t (*relevant)(const void *), const void *ud) {
        if (min_index == 0)
                return;
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += wait_ms / 1000;
        dl.tv_nsec += (wait_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
                dl.tv_sec++;
                dl.tv_nsec -= 1000000000;
        }
        while (relevant(ud) <= min_index && !stopping)
                if (pthread_cond_timedwait(&changed, &mu, &dl) == ETIMEDOUT)
                        break;
}

/* Parses ?index=&wait=, takes the lock and, for a blocking query, waits until relevant(ud)
 * passes the index. 0 with the lock held, or -1 having replied 400 (not locked). */
int query_lock(struct MHD_Connection *c, uint64_t (*relevant)(const void *), const void *ud,
                      enum MHD_Result *ret) {
        uint64_t min;
        int64_t wait;
        if (parse_blocking(c, &min, &wait, ret) < 0)
                return -1;
        pthread_mutex_lock(&mu);
        block_until(min, wait, relevant, ud);
        return 0;
}

/* Answers a read with o at index idx. Called locked, unlocks first (printing happens
 * outside the lock). */
enum MHD_Result reply_query_locked(struct MHD_Connection *c, cJSON *o, uint64_t idx) {
        pthread_mutex_unlock(&mu);
        return reply_json(c, o, idx, true);
}

/* The same for one object; o NULL: it is missing, 404 with that message. */
enum MHD_Result reply_found_locked(struct MHD_Connection *c, cJSON *o, uint64_t idx, const char *missing) {
        if (o)
                return reply_query_locked(c, o, idx);
        pthread_mutex_unlock(&mu);
        return reply_err(c, 404, "%s", missing);
}

/* Answers a write with out and the QueryMeta Nomad embeds in its write responses.
 * Called locked, unlocks first. */
enum MHD_Result reply_write_locked(struct MHD_Connection *c, cJSON *out, uint64_t idx) {
        json_add_int(out, "Index", (int64_t) idx);
        json_add_int(out, "LastContact", 0);
        json_add_bool(out, "KnownLeader", false);
        json_add_str(out, "NextToken", "");
        pthread_mutex_unlock(&mu);
        return reply_json(c, out, idx, false);
}

/* Whether the request's token is refused; then *ret holds the 403 already sent. */
bool acl_denied(struct MHD_Connection *c, enum MHD_Result *ret) {
        const char *msg = "";
        int code = standin_acl(request_token(c), &msg);
        if (code)
                *ret = reply_err(c, (unsigned) code, "%s", msg);
        return code != 0;
}

/* Nomad's JobRegisterResponse (register and scale answer with it), or its
 * JobDeregisterResponse, for job j (NULL: deregistering a job Nomad does not know) and the
 * evaluation the write made (NULL: none). Called locked, unlocks. */
enum MHD_Result reply_job_write_locked(struct MHD_Connection *c, const struct job *j, const struct eval *e,
                                              bool deregister) {
        cJSON *out = cJSON_CreateObject();
        json_add_str(out, "EvalID", e ? e->id : "");
        json_add_int(out, "EvalCreateIndex", e ? (int64_t) e->create_index : 0);
        json_add_int(out, "JobModifyIndex", j ? (int64_t) j->job_modify_index : 0);
        if (deregister) {
                json_add_str(out, "VolumeEvalID", "");
                json_add_int(out, "VolumeEvalIndex", 0);
        } else
                json_add_str(out, "Warnings", "");
        return reply_write_locked(c, out, e ? e->create_index : raft_index);
}

uint64_t rel_job_allocs(const void *ud) {
        const struct job_key *k = ud;
        uint64_t m = 0;
        for (struct alloc *a = allocs; a; a = a->next)
                if (strcmp(a->job_id, k->id) == 0 && strcmp(a->ns, k->ns) == 0 && a->modify_index > m)
                        m = a->modify_index;
        return m;
}
uint64_t rel_job(const void *ud) {
        const struct job_key *k = ud;
        struct job *j = job_find(k->ns, k->id);
        uint64_t m = j ? j->modify_index : 0;
        /* The job's Status follows its allocations. */
        uint64_t am = rel_job_allocs(ud);
        return am > m ? am : m;
}
uint64_t rel_alloc(const void *ud) {
        struct alloc *a = alloc_find(ud);
        return a ? a->modify_index : 0;
}
uint64_t rel_table(const void *ud) { return *(const uint64_t *) ud; }
uint64_t rel_job_evals(const void *ud) {
        const struct job_key *k = ud;
        uint64_t m = 0;
        for (struct eval *e = evals; e; e = e->next)
                if (strcmp(e->job_id, k->id) == 0 && strcmp(e->ns, k->ns) == 0 && e->modify_index > m)
                        m = e->modify_index;
        return m;
}

const char *query_ns(struct MHD_Connection *c) { return str_or(arg(c, "namespace"), "default"); }

bool ns_exists(const char *ns) {
        for (char **n = cfg.namespaces; n && *n; n++)
                if (strcmp(*n, ns) == 0)
                        return true;
        return false;
}

/* ---- /_standin: faults and state for tests ---- */

int set_fault(const char *k, const char *v) {
        long n = v ? strtol(v, NULL, 10) : 1;
        if (strcmp(k, "fail_placement") == 0)
                fault.fail_placement = (int) n;
        else if (strcmp(k, "driver_failure") == 0)
                fault.driver_failure = (int) n;
        else if (strcmp(k, "driver_message") == 0) {
                free(fault.driver_message);
                fault.driver_message = v ? xstrdup(v) : NULL;
        } else if (strcmp(k, "slow_placement_ms") == 0)
                fault.slow_placement_ms = n;
        else if (strcmp(k, "lose_after_ms") == 0) {
                fault.lose_after_ms = n;
                if (!fault.lose_count)
                        fault.lose_count = -1;
        } else if (strcmp(k, "lose_count") == 0)
                fault.lose_count = (int) n;
        else if (strcmp(k, "http_500") == 0)
                fault.http_500 = (int) n;
        else if (strcmp(k, "exec_1011") == 0)
                fault.exec_1011 = (int) n;
        else if (strcmp(k, "reset") == 0) {
                free(fault.driver_message);
                memset(&fault, 0, sizeof(fault));
        } else
                return -EINVAL;
        return 0;
}

static cJSON *fault_json(void) {
        cJSON *o = cJSON_CreateObject();
        json_add_int(o, "fail_placement", fault.fail_placement);
        json_add_int(o, "driver_failure", fault.driver_failure);
        json_add_str(o, "driver_message", fault.driver_message);
        json_add_int(o, "slow_placement_ms", fault.slow_placement_ms);
        json_add_int(o, "lose_after_ms", fault.lose_after_ms);
        json_add_int(o, "lose_count", fault.lose_count);
        json_add_int(o, "http_500", fault.http_500);
        json_add_int(o, "exec_1011", fault.exec_1011);
        return o;
}

static enum MHD_Result h_standin(struct MHD_Connection *c, const char *method, const char *path, struct req *rq) {
        if (strcmp(path, "/_standin/fault") == 0) {
                if (strcmp(method, "GET") != 0) {
                        enum MHD_Result ret;
                        _cleanup_json_ cJSON *body = parse_body(rq, &ret, c);
                        if (!body)
                                return ret;
                        pthread_mutex_lock(&mu);
                        cJSON *it;
                        cJSON_ArrayForEach(it, body) {
                                char num[32];
                                const char *v = cJSON_IsString(it) ? it->valuestring : NULL;
                                if (cJSON_IsNumber(it)) {
                                        snprintf(num, sizeof(num), "%lld", (long long) it->valuedouble);
                                        v = num;
                                } else if (cJSON_IsBool(it))
                                        v = cJSON_IsTrue(it) ? "1" : "0";
                                if (set_fault(it->string, v) < 0) {
                                        pthread_mutex_unlock(&mu);
                                        return reply_err(c, 400, "unknown fault \"%s\"", it->string);
                                }
                        }
                        pthread_mutex_unlock(&mu);
                }
                pthread_mutex_lock(&mu);
                cJSON *o = fault_json();
                pthread_mutex_unlock(&mu);
                return reply_json(c, o, 0, false);
        }
        if (strcmp(path, "/_standin/state") == 0) {
                pthread_mutex_lock(&mu);
                cJSON *o = cJSON_CreateObject();
                json_add_int(o, "Index", (int64_t) raft_index);
                cJSON *js = cJSON_AddArrayToObject(o, "Jobs");
                for (struct job *j = jobs; j; j = j->next)
                        if (!j->purged)
                                cJSON_AddItemToArray(js, job_json(j));
                cJSON *as = cJSON_AddArrayToObject(o, "Allocations");
                for (struct alloc *a = allocs; a; a = a->next) {
                        cJSON *aj = alloc_json(a, false);
                        json_add_str(aj, "ContainerID", a->container);
                        cJSON_AddItemToArray(as, aj);
                }
                json_add_int(o, "Workers", workers);
                pthread_mutex_unlock(&mu);
                return reply_json(c, o, 0, false);
        }
        return reply_err(c, 404, "Not Found");
}

/* ---- routing ---- */

static void record_request(struct MHD_Connection *c, const char *method, const char *url, struct req *rq);

/* Splits "/v1/job/<id>/<rest>": copies id (URL-decoded by MHD already) and returns rest ("" if none). */
static const char *split_id(const char *after, char *id, size_t size) {
        const char *slash = strchr(after, '/');
        size_t n = slash ? (size_t) (slash - after) : strlen(after);
        if (n >= size)
                n = size - 1;
        memcpy(id, after, n);
        id[n] = 0;
        return slash ? slash + 1 : "";
}

static bool is(const char *m, const char *a) { return strcmp(m, a) == 0; }
static bool is_write(const char *m) { return is(m, "PUT") || is(m, "POST"); }

/* GET /v1/jobs: the job stubs of the namespace ("*" = all). */
static enum MHD_Result h_jobs_list(struct MHD_Connection *c, _unused_ const cJSON *body, _unused_ const char *id) {
        pthread_mutex_lock(&mu);
        cJSON *arr = cJSON_CreateArray();
        for (struct job *j = jobs; j; j = j->next)
                if (!j->purged && (is(query_ns(c), "*") || is(j->ns, query_ns(c)))) {
                        cJSON *s = cJSON_CreateObject();
                        json_add_str(s, "ID", j->id);
                        json_add_str(s, "Name", j->id);
                        json_add_str(s, "Namespace", j->ns);
                        json_add_str(s, "Type", str_or(json_get_str(j->job, "Type"), "service"));
                        json_add_str(s, "Status", job_status(j));
                        json_add_bool(s, "Stop", j->stop);
                        cJSON_AddItemToObject(s, "Meta", cJSON_Duplicate(cJSON_GetObjectItem(j->job, "Meta"), true));
                        json_add_int(s, "CreateIndex", (int64_t) j->create_index);
                        json_add_int(s, "ModifyIndex", (int64_t) j->modify_index);
                        json_add_int(s, "JobModifyIndex", (int64_t) j->job_modify_index);
                        cJSON_AddItemToArray(arr, s);
                }
        return reply_query_locked(c, arr, idx_jobs);
}

enum verb { GET, WRITE /* PUT or POST */, DEL };

/* The Nomad API the stand-in serves. A row with an id matches prefix + <id> + ("/" rest);
 * rest NULL takes any rest. A path some row matches answers 405 for another method. WRITE
 * handlers get the request's JSON body, parsed (a bad one is answered 400 before them). */
static const struct route {
        const char *prefix;
        bool has_id;
        const char *rest;
        enum verb verb;
        enum MHD_Result (*fn)(struct MHD_Connection *c, const cJSON *body, const char *id);
} routes[] = {
        { "/v1/jobs", false, NULL, WRITE, h_register },
        { "/v1/jobs", false, NULL, GET, h_jobs_list },
        { "/v1/job/", true, "", GET, h_job_get },
        { "/v1/job/", true, "", WRITE, h_register },
        { "/v1/job/", true, "", DEL, h_job_delete },
        { "/v1/job/", true, "allocations", GET, h_job_allocs },
        { "/v1/job/", true, "evaluations", GET, h_job_evals },
        { "/v1/job/", true, "scale", WRITE, h_job_scale },
        { "/v1/allocation/", true, "", GET, h_alloc_get },
        { "/v1/client/allocation/", true, "stats", GET, h_alloc_stats },
        { "/v1/evaluation/", true, NULL, GET, h_eval_get },
        { "/v1/nodes", false, NULL, GET, h_nodes },
        { "/v1/node/", true, "", GET, h_node_get },
        { "/v1/node/", true, "allocations", GET, h_node_allocs },
        { "/v1/node/", true, "eligibility", WRITE, h_node_eligibility },
        { "/v1/agent/self", false, NULL, GET, h_agent_self },
        { "/v1/volumes", false, NULL, GET, h_volumes_list },
        { "/v1/volume/csi/", true, "create", WRITE, h_volume_create },
        { "/v1/volume/csi/", true, "delete", DEL, h_volume_destroy },
        { "/v1/volume/csi/", true, "", WRITE, h_volume_register },
        { "/v1/volume/csi/", true, "", GET, h_volume_get },
        { "/v1/volume/csi/", true, "", DEL, h_volume_deregister },
};

static bool verb_is(enum verb v, const char *m) {
        switch (v) {
        case GET: return is(m, "GET");
        case WRITE: return is_write(m);
        case DEL: return is(m, "DELETE");
        }
        return false;
}

static enum MHD_Result route(struct MHD_Connection *c, const char *m, const char *url, struct req *rq) {
        if (startswith(url, "/_standin/"))
                return h_standin(c, m, url, rq);

        pthread_mutex_lock(&mu);
        bool inject = fault.http_500 > 0;
        if (inject)
                fault.http_500--;
        pthread_mutex_unlock(&mu);
        if (inject)
                return reply_err(c, 500, "rpc error: No cluster leader (nomad-standin injected fault)");

        /* Reads need a token too once ACLs are on (namespace read-job etc.); writes check it
         * in their handler after the body is validated, as Nomad's RPC layer does, exec
         * sessions as they start. /v1/agent/self wants one whatever the method. */
        bool exec = startswith(url, "/v1/client/allocation/") && endswith(url, "/exec");
        bool handler_checks = exec || is_write(m) || is(m, "DELETE");
        enum MHD_Result ret;
        if ((!handler_checks || is(url, "/v1/agent/self")) && acl_denied(c, &ret))
                return ret;

        char id[512];
        if (exec) {
                split_id(url + strlen("/v1/client/allocation/"), id, sizeof(id));
                return exec_handle(c, id, request_token(c));
        }
        bool known = false;
        for (size_t i = 0; i < ELEMENTSOF(routes); i++) {
                const struct route *r = &routes[i];
                if (!r->has_id ? !is(url, r->prefix) : !startswith(url, r->prefix))
                        continue;
                if (r->has_id) {
                        const char *rest = split_id(url + strlen(r->prefix), id, sizeof(id));
                        if (r->rest && !is(rest, r->rest))
                                continue;
                        if (!*id && is(r->prefix, "/v1/job/"))
                                continue;   /* Nomad's job routes want an ID: 404 */
                }
                known = true;
                if (!verb_is(r->verb, m))
                        continue;
                if (r->verb != WRITE)
                        return r->fn(c, NULL, r->has_id ? id : NULL);
                _cleanup_json_ cJSON *body = parse_body(rq, &ret, c);
                return body ? r->fn(c, body, r->has_id ? id : NULL) : ret;
        }
        return known ? reply_err(c, 405, "Invalid method") : reply_err(c, 404, "Not Found");
}

static enum MHD_Result collect_arg(void *cls, enum MHD_ValueKind kind, const char *k, const char *v) {
        (void) kind;
        cJSON *q = cls;
        cJSON *have = cJSON_GetObjectItemCaseSensitive(q, k);
        if (!have)
                json_add_str(q, k, v ? v : "");
        return MHD_YES;
}

static void record_request(struct MHD_Connection *c, const char *method, const char *url, struct req *rq) {
        if (!rec || startswith(url, "/_standin/"))
                return;
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "Method", method);
        json_add_str(o, "Path", url);
        cJSON *q = cJSON_AddObjectToObject(o, "Query");
        MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, collect_arg, q);
        json_add_bool(o, "Token", request_token(c) != NULL);
        if (rq->body.len) {
                cJSON *b = NULL;
                if (json_parse(rq->body.buf, rq->body.len, MAX_BODY, 200, &b, NULL) == 0)
                        cJSON_AddItemToObject(o, "Body", b);
                else
                        json_add_strn(o, "Body", rq->body.buf, rq->body.len);
        }
        record_line(o);
}

enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
        (void) cls, (void) version;
        struct req *rq = *con_cls;
        if (!rq) {
                rq = xnew0(struct req, 1);
                rq->body = STRBUF_INIT(MAX_BODY);
                *con_cls = rq;
                return MHD_YES;
        }
        if (*upload_size) {
                if (strbuf_append(&rq->body, upload, *upload_size) < 0)
                        rq->too_big = true;
                *upload_size = 0;
                return MHD_YES;
        }
        record_request(c, method, url, rq);
        return route(c, method, url, rq);
}

void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
        (void) cls, (void) c, (void) toe;
        struct req *rq = *con_cls;
        if (rq) {
                strbuf_done(&rq->body);
                free(rq);
                *con_cls = NULL;
        }
}
