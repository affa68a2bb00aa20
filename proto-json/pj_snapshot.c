/* pj_snapshot.c — the snapshot job and outcome codecs, and the queue names. See pj_snapshot.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cleanup.h"
#include "json.h"
#include "pj_snapshot.h"
#include "strutil.h"

/* The bodies are flat objects; cJSON needs no more. */
#define MAX_DEPTH 4

char *pj_snapshot_jobs_queue(const char *exchange, const char *node) {
        return xasprintf("%s.snapshots.%s", exchange, node);
}

char *pj_snapshot_jobs_key(const char *node) {
        return xasprintf("snapshot.%s", node);
}

char *pj_snapshot_events_queue(const char *exchange) {
        return xasprintf("%s.snapshot-events", exchange);
}

static bool lower_hex(const char *s, size_t n) {
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
                        return false;
        return true;
}

/* Nomad's allocation ids: a UUID in lowercase, 8-4-4-4-12. s holds at least 36 bytes. */
static bool uuid_valid(const char *s) {
        static const size_t groups[] = { 8, 4, 4, 4, 12 };
        for (size_t g = 0; g < ELEMENTSOF(groups); g++) {
                if (!lower_hex(s, groups[g]))
                        return false;
                s += groups[g];
                if (g + 1 < ELEMENTSOF(groups) && *s++ != '-')
                        return false;
        }
        return true;
}

bool pj_snapshot_container_ref_valid(const char *s, size_t n) {
        enum { UUID_LEN = 36 };
        if (!s || n == 0 || n > PJ_SNAPSHOT_MAX_CONTAINER || memchr(s, 0, n))
                return false;
        if (n == 64)
                return lower_hex(s, n);
        if (n == 8 + HEXID_LEN && !memcmp(s, "paddock-", 8))
                return lower_hex(s + 8, HEXID_LEN);
        if (n < UUID_LEN + 2 || s[n - UUID_LEN - 1] != '-' || !uuid_valid(s + n - UUID_LEN))
                return false;
        for (size_t i = 0; i < n - UUID_LEN - 1; i++) {
                char ch = s[i];
                if (!ascii_alnum(ch) && (i == 0 || !strchr("_.-", ch)))
                        return false;
        }
        return true;
}

static bool node_id_valid(const char *s) {
        size_t n = 0;
        for (const char *p = s; *p; p++, n++)
                if (!ascii_alnum(*p) && *p != '-' && *p != '_' && *p != '.')
                        return false;
        return n >= 1 && n <= PJ_SNAPSHOT_MAX_NODE_ID;
}

static bool digest_valid(const char *s) {
        return strlen(s) == PJ_SNAPSHOT_DIGEST_LEN && startswith(s, "sha256:") && lower_hex(s + 7, 64);
}

/* The string member k of o: 1 and *ret when present, 0 when absent (or JSON null),
 * -EINVAL naming k when present and not a string. */
static int get_str(const cJSON *o, const char *k, const char **ret, struct err *err) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        if (!v || cJSON_IsNull(v))
                return 0;
        if (!cJSON_IsString(v))
                return pj_error_set(err, k, "%s must be a string", k);
        *ret = v->valuestring;
        return 1;
}

/* The id member k (24 lowercase hex) into ret; absent is an error only when required. */
static int get_id(const cJSON *o, const char *k, bool required, char ret[static 25], struct err *err) {
        const char *s = NULL;
        int r = get_str(o, k, &s, err);
        if (r < 0 || (r == 0 && !required))
                return r;
        if (r == 0 || !hexid_valid(s))
                return pj_error_set(err, k, "%s must be %d lowercase hex characters", k, HEXID_LEN);
        snprintf(ret, 25, "%s", s);
        return 0;
}

static int get_node_id(const cJSON *o, char ret[static PJ_SNAPSHOT_MAX_NODE_ID + 1], struct err *err) {
        const char *s = NULL;
        int r = get_str(o, "node_id", &s, err);
        if (r <= 0)
                return r;
        if (!node_id_valid(s))
                return pj_error_set(err, "node_id", "node_id must be 1..%d letters, digits, '-', '_' or '.'",
                                    PJ_SNAPSHOT_MAX_NODE_ID);
        snprintf(ret, PJ_SNAPSHOT_MAX_NODE_ID + 1, "%s", s);
        return 0;
}

/* An optional non-negative integer; *ret stays -1 when absent. */
static int get_count(const cJSON *o, const char *k, int64_t *ret, struct err *err) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
        int64_t n;
        if (!v || cJSON_IsNull(v))
                return 0;
        if (!json_get_int(o, k, &n) || n < 0)
                return pj_error_set(err, k, "%s must be a non-negative integer", k);
        *ret = n;
        return 0;
}

/* The body as one JSON object whose "type" is a string; *ret_type borrowed from *ret. */
static int parse_object(const char *body, size_t len, size_t max, cJSON **ret, const char **ret_type,
                        struct err *err) {
        struct err jerr = { 0 };
        cJSON *o = NULL;
        if (json_parse(body, len, max, MAX_DEPTH, &o, &jerr) < 0)
                return pj_error_set(err, "", "%s", jerr.message);
        if (!cJSON_IsObject(o)) {
                cJSON_Delete(o);
                return pj_error_set(err, "", "message must be a JSON object");
        }
        const char *type = json_get_str(o, "type");
        if (!type) {
                cJSON_Delete(o);
                return pj_error_set(err, "type", "type is required and must be a string");
        }
        *ret = o;
        *ret_type = type;
        return 0;
}

/* ---------------------------------------------------------------- the job */

char *pj_snapshot_job_format(const struct pj_snapshot_job *j) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", "snapshot.create");
        json_add_str(o, "snapshot_id", j->snapshot_id);
        if (j->sandbox_id[0])
                json_add_str(o, "sandbox_id", j->sandbox_id);
        if (j->container_id[0])
                json_add_str(o, "container_id", j->container_id);
        if (j->node_id[0])
                json_add_str(o, "node_id", j->node_id);
        return json_print(o);
}

int pj_snapshot_job_parse(const char *body, size_t len, struct pj_snapshot_job *ret, struct err *err) {
        _cleanup_json_ cJSON *o = NULL;
        struct pj_snapshot_job j = { 0 };
        const char *type = NULL, *container = NULL;
        int r;

        if (err)
                memset(err, 0, sizeof(*err));
        if ((r = parse_object(body, len, PJ_SNAPSHOT_MAX_JOB, &o, &type, err)) < 0)
                return r;
        if (strcmp(type, "snapshot.create") != 0)
                return pj_error_set(err, "type", "type '%.64s' is not snapshot.create", type);
        if ((r = get_id(o, "snapshot_id", true, j.snapshot_id, err)) < 0 ||
            (r = get_id(o, "sandbox_id", false, j.sandbox_id, err)) < 0 || (r = get_node_id(o, j.node_id, err)) < 0 ||
            (r = get_str(o, "container_id", &container, err)) < 0)
                return r;
        if (container && pj_snapshot_container_ref_valid(container, strlen(container)))
                snprintf(j.container_id, sizeof(j.container_id), "%s", container);
        *ret = j;
        return 0;
}

/* ---------------------------------------------------------------- the outcomes */

static const char *const event_types[] = {
        [PJ_SNAPSHOT_COMPLETED] = "snapshot.completed",
        [PJ_SNAPSHOT_FAILED] = "snapshot.failed",
};

static const char *const phase_keys[] = {
        [PJ_SNAPSHOT_PHASE_COMMIT] = "commit_ms",
        [PJ_SNAPSHOT_PHASE_PUSH] = "push_ms",
        [PJ_SNAPSHOT_PHASE_VERIFY] = "verify_ms",
        [PJ_SNAPSHOT_PHASE_PRUNE] = "prune_ms",
        [PJ_SNAPSHOT_PHASE_TOTAL] = "total_ms",
};

const char *pj_snapshot_event_type_to_string(enum pj_snapshot_event_type t) {
        return (size_t) t < ELEMENTSOF(event_types) ? event_types[t] : "unknown";
}

const char *pj_snapshot_phase_key(enum pj_snapshot_phase p) {
        return (size_t) p < ELEMENTSOF(phase_keys) ? phase_keys[p] : "unknown";
}

void pj_snapshot_event_init(struct pj_snapshot_event *e, enum pj_snapshot_event_type t) {
        *e = (struct pj_snapshot_event) { .type = t, .size_bytes = -1 };
        for (size_t i = 0; i < ELEMENTSOF(e->ms); i++)
                e->ms[i] = -1;
}

char *pj_snapshot_event_format(const struct pj_snapshot_event *e) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", pj_snapshot_event_type_to_string(e->type));
        json_add_str(o, "snapshot_id", e->snapshot_id);
        if (e->node_id[0])
                json_add_str(o, "node_id", e->node_id);
        if (e->sandbox_id[0])
                json_add_str(o, "sandbox_id", e->sandbox_id);
        if (e->type == PJ_SNAPSHOT_COMPLETED) {
                json_add_str(o, "digest", e->digest);
                if (e->size_bytes >= 0)
                        json_add_int(o, "size_bytes", e->size_bytes);
        } else
                json_add_str(o, "reason", e->reason);
        for (size_t i = 0; i < ELEMENTSOF(e->ms); i++)
                if (e->ms[i] >= 0)
                        json_add_int(o, phase_keys[i], e->ms[i]);
        return json_print(o);
}

int pj_snapshot_event_parse(const char *body, size_t len, struct pj_snapshot_event *ret, struct err *err) {
        _cleanup_json_ cJSON *o = NULL;
        struct pj_snapshot_event e;
        const char *type = NULL;
        int r;

        if (err)
                memset(err, 0, sizeof(*err));
        if ((r = parse_object(body, len, PJ_SNAPSHOT_MAX_EVENT, &o, &type, err)) < 0)
                return r;
        if (!strcmp(type, event_types[PJ_SNAPSHOT_COMPLETED]))
                pj_snapshot_event_init(&e, PJ_SNAPSHOT_COMPLETED);
        else if (!strcmp(type, event_types[PJ_SNAPSHOT_FAILED]))
                pj_snapshot_event_init(&e, PJ_SNAPSHOT_FAILED);
        else
                return pj_error_set(err, "type", "type '%.64s' is not snapshot.completed or snapshot.failed", type);
        if ((r = get_id(o, "snapshot_id", true, e.snapshot_id, err)) < 0 ||
            (r = get_id(o, "sandbox_id", false, e.sandbox_id, err)) < 0 || (r = get_node_id(o, e.node_id, err)) < 0)
                return r;
        for (size_t i = 0; i < ELEMENTSOF(e.ms); i++)
                if ((r = get_count(o, phase_keys[i], &e.ms[i], err)) < 0)
                        return r;
        const char *s = NULL;
        if (e.type == PJ_SNAPSHOT_COMPLETED) {
                if ((r = get_str(o, "digest", &s, err)) < 0)
                        return r;
                if (r == 0 || !digest_valid(s))
                        return pj_error_set(err, "digest", "digest must be sha256: and 64 lowercase hex characters");
                snprintf(e.digest, sizeof(e.digest), "%s", s);
                if ((r = get_count(o, "size_bytes", &e.size_bytes, err)) < 0)
                        return r;
        } else {
                if ((r = get_str(o, "reason", &s, err)) < 0)
                        return r;
                if (r > 0)
                        utf8_copy_trunc(e.reason, sizeof(e.reason), s);
        }
        *ret = e;
        return 0;
}
