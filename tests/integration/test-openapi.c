/* test-openapi.c — keep proto-json/openapi.yaml honest against a real controld.
 *
 * The spec is read with python3's yaml module (Debian python3-yaml) and handed over as JSON;
 * without it the tests skip and say so. Checks, in order of cost:
 *   - the file is OpenAPI 3.0.x with paths, every $ref resolves, every {param} of a path is
 *     declared, and POST /sandboxes lists the status codes clients must handle;
 *   - every documented path+method is routed by controld (a probe with a well-formed but
 *     unknown id or a malformed body is neither the router's 404 "No route for" nor 405), the
 *     status it answers is one the spec lists for that operation, it carries x-request-id,
 *     auth is enforced exactly where the spec says; methods the spec does not list answer 405,
 *     and unknown paths answer the router's 404 (so the probe can fail);
 *   - the JSON controld returns for a real sandbox (create, get, list, wait), its exec result,
 *     a batch upload, stats, a volume, templates, regions and /healthz matches the documented
 *     schemas key for key in both directions: no undocumented key, no missing required key,
 *     types, enums and nullability as documented.
 *
 * Each test's struct ctld is static: the harness's exit hook runs after the test function
 * has returned (see test-controld-api-create.c). */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "json.h"
#include "testlib.h"

#define UNKNOWN_ID "000000000000000000000000"
#define LOCAL_REGION "6a06df21cc6bef51342e199e"

/* ---- loading the spec ---- */

/* proto-json/openapi.yaml: from the working directory (the repository root under
 * run-all.sh), else from the directories above the test binary. */
static const char *spec_path(void) {
        static char buf[PATH_MAX + 64];
        if (access("proto-json/openapi.yaml", R_OK) == 0)
                return "proto-json/openapi.yaml";
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        if (n <= 0)
                return NULL;
        exe[n] = 0;
        for (char *s = strrchr(exe, '/'); s && s != exe; s = strrchr(exe, '/')) {
                *s = 0;
                snprintf(buf, sizeof(buf), "%s/proto-json/openapi.yaml", exe);
                if (access(buf, R_OK) == 0)
                        return buf;
        }
        return NULL;
}

static const char yaml_to_json[] =
        "import json, sys\n"
        "try:\n"
        "    import yaml\n"
        "except ImportError:\n"
        "    sys.exit(3)\n"
        "with open(sys.argv[1], encoding='utf-8') as f:\n"
        "    doc = yaml.safe_load(f)\n"
        "json.dump(doc, sys.stdout, default=str)\n";

static cJSON *load_spec(void) {
        const char *path = spec_path();
        if (!path)
                test_fail(__FILE__, __LINE__, "proto-json/openapi.yaml not found (run from the repository root)");
        char *argv[] = { "python3", "-c", (char *) yaml_to_json, (char *) path, NULL };
        _cleanup_free_ char *out = NULL;
        int rc = test_run_capture(argv, &out, 8 << 20);
        if (rc == 127)
                TEST_SKIP("python3 is not installed; it reads the YAML spec (Debian packages python3, python3-yaml)");
        if (rc == 3)
                TEST_SKIP("python3 cannot import yaml; install the Debian package python3-yaml");
        if (rc != 0)
                test_fail(__FILE__, __LINE__, "python3 could not parse %s as YAML (exit %d; TEST_VERBOSE=1 shows why)", path, rc);
        cJSON *spec = cJSON_Parse(out);
        ASSERT_NOT_NULL(spec);
        ASSERT_TRUE(cJSON_IsObject(spec));
        return spec;
}

/* ---- walking the spec ---- */

static const char *const methods[] = { "get", "put", "post", "delete", "patch", "head", "options", "trace" };

static bool is_method(const char *k) {
        for (size_t i = 0; i < sizeof(methods) / sizeof(*methods); i++)
                if (!strcmp(methods[i], k))
                        return true;
        return false;
}

/* A JSON pointer "#/a/b" inside spec, or NULL. */
static cJSON *pointer(cJSON *spec, const char *ref) {
        if (!ref || strncmp(ref, "#/", 2) != 0)
                return NULL;
        _cleanup_free_ char *copy = xstrdup(ref + 2);
        cJSON *cur = spec;
        char *save = NULL;
        for (char *tok = strtok_r(copy, "/", &save); tok && cur; tok = strtok_r(NULL, "/", &save))
                cur = cJSON_GetObjectItemCaseSensitive(cur, tok);
        return cur;
}

/* Follows $ref chains. */
static cJSON *resolve(cJSON *spec, cJSON *o) {
        for (int i = 0; i < 16 && o; i++) {
                cJSON *ref = cJSON_GetObjectItemCaseSensitive(o, "$ref");
                if (!cJSON_IsString(ref))
                        return o;
                o = pointer(spec, ref->valuestring);
        }
        return o;
}

static int walk_refs(cJSON *spec, cJSON *o, const char *where) {
        int bad = 0;
        cJSON *c;
        if (cJSON_IsObject(o)) {
                cJSON *ref = cJSON_GetObjectItemCaseSensitive(o, "$ref");
                if (ref && (!cJSON_IsString(ref) || !pointer(spec, ref->valuestring))) {
                        fprintf(stderr, "  unresolved $ref %s in %s\n", cJSON_IsString(ref) ? ref->valuestring : "?", where);
                        bad++;
                }
        }
        cJSON_ArrayForEach(c, o) {
                char w[512];
                snprintf(w, sizeof(w), "%s/%s", where, c->string ? c->string : "[]");
                bad += walk_refs(spec, c, w);
        }
        return bad;
}

static cJSON *operation(cJSON *spec, const char *path, const char *method) {
        cJSON *p = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(spec, "paths"), path);
        return p ? cJSON_GetObjectItemCaseSensitive(p, method) : NULL;
}

static bool op_lists_status(cJSON *op, long status) {
        char code[8];
        snprintf(code, sizeof(code), "%ld", status);
        return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(op, "responses"), code) != NULL;
}

/* Does the operation need a key? (its own security, else the top-level one) */
static bool op_needs_auth(cJSON *spec, cJSON *op) {
        cJSON *sec = cJSON_GetObjectItemCaseSensitive(op, "security");
        if (!sec)
                sec = cJSON_GetObjectItemCaseSensitive(spec, "security");
        return cJSON_IsArray(sec) && cJSON_GetArraySize(sec) > 0;
}

/* The documented JSON schema of one response of an operation, resolved, or NULL. */
static cJSON *response_schema(cJSON *spec, const char *path, const char *method, const char *code) {
        cJSON *op = operation(spec, path, method);
        cJSON *r = resolve(spec, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(op, "responses"), code));
        cJSON *content = cJSON_GetObjectItemCaseSensitive(r, "content");
        cJSON *json = cJSON_GetObjectItemCaseSensitive(content, "application/json");
        return resolve(spec, cJSON_GetObjectItemCaseSensitive(json, "schema"));
}

static const char *request_content_type(cJSON *spec, cJSON *op) {
        cJSON *rb = resolve(spec, cJSON_GetObjectItemCaseSensitive(op, "requestBody"));
        cJSON *content = cJSON_GetObjectItemCaseSensitive(rb, "content");
        if (!content)
                return NULL;
        if (cJSON_GetObjectItemCaseSensitive(content, "application/json"))
                return "application/json";
        return content->child ? content->child->string : NULL;
}

/* "/sandboxes/{id}/files/{path}" -> a concrete URL: ids become UNKNOWN_ID, {path} a file path,
 * {pid} a process id. */
static void concrete_path(const char *tmpl, char *out, size_t len) {
        size_t o = 0;
        for (const char *s = tmpl; *s && o + 1 < len;) {
                if (*s == '{') {
                        const char *e = strchr(s, '}');
                        ASSERT_NOT_NULL(e);
                        const char *v = (e - s == 5 && !strncmp(s, "{path}", 6)) ? "tmp/openapi-probe"
                                        : (e - s == 4 && !strncmp(s, "{pid}", 5))  ? "4242"
                                        : (e - s == 5 && !strncmp(s, "{port}", 6)) ? "8000"
                                                                                  : UNKNOWN_ID;
                        o += (size_t) snprintf(out + o, len - o, "%s", v);
                        s = e + 1;
                } else
                        out[o++] = *s++;
        }
        out[o < len ? o : len - 1] = 0;
}

/* ---- schema conformance ---- */

struct conf {
        cJSON *spec;
        int problems;
};

_printf_(3, 4) static void problem(struct conf *c, const char *where, const char *fmt, ...) {
        va_list ap;
        fprintf(stderr, "  %s: ", where);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
        c->problems++;
}

/* Flattens $ref and allOf into one view: properties, required, additionalProperties, type,
 * enum, items; nullable from any level. */
struct view {
        cJSON *props[8];
        size_t n_props;
        cJSON *required[8];
        size_t n_required;
        cJSON *additional; /* additionalProperties when an object schema or true */
        cJSON *type, *enumv, *items;
        bool nullable, composite; /* composite: oneOf/anyOf, not checked */
};

static void flatten(struct conf *c, cJSON *s, struct view *v, int depth) {
        s = resolve(c->spec, s);
        if (!s || depth > 8)
                return;
        cJSON *x;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable")))
                v->nullable = true;
        if ((x = cJSON_GetObjectItemCaseSensitive(s, "properties")) && v->n_props < 8)
                v->props[v->n_props++] = x;
        if ((x = cJSON_GetObjectItemCaseSensitive(s, "required")) && v->n_required < 8)
                v->required[v->n_required++] = x;
        x = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
        if (x && (cJSON_IsTrue(x) || cJSON_IsObject(x)))
                v->additional = x;
        if ((x = cJSON_GetObjectItemCaseSensitive(s, "type")))
                v->type = x;
        if ((x = cJSON_GetObjectItemCaseSensitive(s, "enum")))
                v->enumv = x;
        if ((x = cJSON_GetObjectItemCaseSensitive(s, "items")))
                v->items = x;
        if (cJSON_GetObjectItemCaseSensitive(s, "oneOf") || cJSON_GetObjectItemCaseSensitive(s, "anyOf"))
                v->composite = true;
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(s, "allOf"))
                flatten(c, x, v, depth + 1);
}

static cJSON *view_prop(const struct view *v, const char *k) {
        for (size_t i = 0; i < v->n_props; i++) {
                cJSON *p = cJSON_GetObjectItemCaseSensitive(v->props[i], k);
                if (p)
                        return p;
        }
        return NULL;
}

static void conform(struct conf *c, cJSON *schema, const cJSON *val, const char *where) {
        struct view v = { 0 };
        char w[512];
        const cJSON *x;
        flatten(c, schema, &v, 0);
        if (v.composite)
                return;
        if (cJSON_IsNull(val)) {
                if (!v.nullable)
                        problem(c, where, "is null but the spec does not say nullable");
                return;
        }
        const char *t = cJSON_IsString(v.type) ? v.type->valuestring : NULL;
        if (t) {
                bool ok = !strcmp(t, "string")    ? cJSON_IsString(val)
                          : !strcmp(t, "integer") ? cJSON_IsNumber(val) && val->valuedouble == (double) (long long) val->valuedouble
                          : !strcmp(t, "number")  ? cJSON_IsNumber(val)
                          : !strcmp(t, "boolean") ? cJSON_IsBool(val)
                          : !strcmp(t, "object")  ? cJSON_IsObject(val)
                          : !strcmp(t, "array")   ? cJSON_IsArray(val)
                                                  : true;
                if (!ok) {
                        _cleanup_free_ char *s = cJSON_PrintUnformatted(val);
                        problem(c, where, "is %.80s, not of type %s", s, t);
                        return;
                }
        }
        if (v.enumv && (cJSON_IsString(val) || cJSON_IsNumber(val))) {
                bool found = false;
                cJSON_ArrayForEach(x, v.enumv)
                        if ((cJSON_IsString(val) && cJSON_IsString(x) && !strcmp(x->valuestring, val->valuestring)) ||
                            (cJSON_IsNumber(val) && cJSON_IsNumber(x) && x->valuedouble == val->valuedouble))
                                found = true;
                if (!found) {
                        _cleanup_free_ char *s = cJSON_PrintUnformatted(val);
                        problem(c, where, "value %.80s is not in the documented enum", s);
                }
        }
        if (cJSON_IsObject(val) && v.n_props) {
                cJSON_ArrayForEach(x, val) {
                        snprintf(w, sizeof(w), "%s.%s", where, x->string);
                        cJSON *ps = view_prop(&v, x->string);
                        if (ps)
                                conform(c, ps, x, w);
                        else if (!v.additional)
                                problem(c, w, "is returned but not documented");
                        else if (cJSON_IsObject(v.additional))
                                conform(c, v.additional, x, w);
                }
                for (size_t i = 0; i < v.n_required; i++)
                        cJSON_ArrayForEach(x, v.required[i])
                                if (cJSON_IsString(x) && !cJSON_GetObjectItemCaseSensitive(val, x->valuestring)) {
                                        snprintf(w, sizeof(w), "%s.%s", where, x->valuestring);
                                        problem(c, w, "is documented as required but was not returned");
                                }
        }
        if (cJSON_IsArray(val) && v.items) {
                int i = 0;
                cJSON_ArrayForEach(x, val) {
                        snprintf(w, sizeof(w), "%s[%d]", where, i++);
                        conform(c, v.items, x, w);
                }
        }
}

/* Asserts that a whole answer matches what the spec documents for that status. */
static void check_answer(cJSON *spec, const char *path, const char *method, const struct hres *r) {
        char code[8], where[256];
        snprintf(code, sizeof(code), "%ld", r->status);
        snprintf(where, sizeof(where), "%s %s -> %s", method, path, code);
        cJSON *op = operation(spec, path, method);
        ASSERT_NOT_NULL(op);
        if (!op_lists_status(op, r->status))
                test_fail(__FILE__, __LINE__, "%s: status not documented (body %.300s)", where, r->body);
        cJSON *schema = response_schema(spec, path, method, code);
        ASSERT_NOT_NULL(schema);
        ASSERT_NOT_NULL(r->json);
        struct conf c = { .spec = spec };
        conform(&c, schema, r->json, where);
        if (c.problems)
                test_fail(__FILE__, __LINE__, "%s: %d difference(s) between the answer and the spec (listed above); body %.600s",
                          where, c.problems, r->body);
}

/* POST body to path (with key), which must create (201); checks the answer against the spec's
 * operation "post" of path and returns the new id in ret_id. */
static void post_and_check(struct ctld *c, cJSON *spec, const char *path, const char *key, const char *body,
                           const char *what, char ret_id[25]) {
        struct hres r;
        http_req(c, "POST", path, key, body, &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "%s -> %ld %s", what, r.status, r.body);
        check_answer(spec, path, "post", &r);
        snprintf(ret_id, 25, "%s", hres_data_str(&r, "id"));
        hres_done(&r);
}

/* GET path (with key) and check the answer against the spec's operation "get" of template. */
static void get_and_check(struct ctld *c, cJSON *spec, const char *path, const char *key, const char *template) {
        struct hres r;
        http_req(c, "GET", path, key, NULL, &r);
        check_answer(spec, template, "get", &r);
        hres_done(&r);
}

/* ---- the spec on its own ---- */

TEST(spec_is_openapi_3_0_with_paths_and_resolvable_refs) {
        _cleanup_json_ cJSON *spec = load_spec();
        cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, "openapi");
        ASSERT_TRUE(cJSON_IsString(v));
        ASSERT_TRUE(!strncmp(v->valuestring, "3.0.", 4));
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(spec, "info"), "title")),
                     "Paddock Sandbox API");
        cJSON *paths = cJSON_GetObjectItemCaseSensitive(spec, "paths");
        ASSERT_TRUE(cJSON_IsObject(paths));
        ASSERT_GE(cJSON_GetArraySize(paths), 15);
        ASSERT_EQ(walk_refs(spec, spec, "#"), 0);

        /* Every operation has responses, and every {param} of its path is declared in: path. */
        cJSON *p;
        int n_ops = 0;
        cJSON_ArrayForEach(p, paths) {
                cJSON *op;
                ASSERT_TRUE(p->string[0] == '/');
                cJSON_ArrayForEach(op, p) {
                        if (!is_method(op->string))
                                continue;
                        n_ops++;
                        cJSON *resp = cJSON_GetObjectItemCaseSensitive(op, "responses");
                        if (!cJSON_IsObject(resp) || cJSON_GetArraySize(resp) == 0)
                                test_fail(__FILE__, __LINE__, "%s %s has no responses", op->string, p->string);
                        for (const char *s = strchr(p->string, '{'); s; s = strchr(s + 1, '{')) {
                                char name[64];
                                snprintf(name, sizeof(name), "%.*s", (int) strcspn(s + 1, "}"), s + 1);
                                bool found = false;
                                for (int lvl = 0; lvl < 2 && !found; lvl++) {
                                        cJSON *prm;
                                        cJSON_ArrayForEach(prm, cJSON_GetObjectItemCaseSensitive(lvl ? op : p, "parameters")) {
                                                cJSON *rp = resolve(spec, prm);
                                                if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rp, "in")) ?: "", "path") &&
                                                    !strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rp, "name")) ?: "", name))
                                                        found = true;
                                        }
                                }
                                if (!found)
                                        test_fail(__FILE__, __LINE__, "%s %s: path parameter {%s} is not declared", op->string,
                                                  p->string, name);
                        }
                }
        }
        ASSERT_GE(n_ops, 25);
}

TEST(spec_create_lists_the_status_codes_clients_must_handle) {
        _cleanup_json_ cJSON *spec = load_spec();
        cJSON *op = operation(spec, "/sandboxes", "post");
        ASSERT_NOT_NULL(op);
        static const long need[] = { 201, 400, 401, 403, 503 };
        for (size_t i = 0; i < sizeof(need) / sizeof(*need); i++)
                if (!op_lists_status(op, need[i]))
                        test_fail(__FILE__, __LINE__, "POST /sandboxes does not document %ld", need[i]);
        /* The 501s are documented where the server answers them. */
        ASSERT_TRUE(op_lists_status(operation(spec, "/sandboxes/{id}/egress", "put"), 501));
        ASSERT_TRUE(op_lists_status(operation(spec, "/sandboxes/{id}/snapshots", "post"), 501));
        /* The streamed form of exec is documented. */
        cJSON *r = resolve(spec, cJSON_GetObjectItemCaseSensitive(
                                         cJSON_GetObjectItemCaseSensitive(operation(spec, "/sandboxes/{id}/exec", "post"), "responses"), "200"));
        ASSERT_NOT_NULL(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "content"), "text/event-stream"));
}

/* ---- the spec against the router ---- */

static bool router_miss(const struct hres *r) {
        const char *m = hres_message(r);
        return r->status == 405 || (r->status == 404 && m && !strncmp(m, "No route for", 12));
}

static struct ctld routes_ctld;

TEST_FULL(every_documented_route_is_served_and_nothing_else, 90) {
        struct ctld *c = &routes_ctld;
        struct hres r;
        need_docker();
        _cleanup_json_ cJSON *spec = load_spec();
        ctld_start(c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(c, "openapi", NULL, NULL);

        cJSON *p;
        int probes = 0;
        cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(spec, "paths")) {
                char url[512];
                concrete_path(p->string, url, sizeof(url));
                bool seen[5] = { false };
                static const char *const upper[5] = { "GET", "POST", "PUT", "DELETE", "PATCH" };
                cJSON *op;
                cJSON_ArrayForEach(op, p) {
                        if (!is_method(op->string))
                                continue;
                        char m[16];
                        size_t i;
                        for (i = 0; op->string[i] && i < sizeof(m) - 1; i++)
                                m[i] = (char) (op->string[i] - 'a' + 'A');
                        m[i] = 0;
                        for (size_t k = 0; k < 5; k++)
                                if (!strcmp(upper[k], m))
                                        seen[k] = true;

                        /* A body that is certainly refused, of the documented kind. */
                        const char *ct = request_content_type(spec, op);
                        const char *body = !ct ? NULL : !strcmp(ct, "application/json") ? "{" : "probe";
                        char cth[128];
                        snprintf(cth, sizeof(cth), "Content-Type: %s", ct ? ct : "application/json");
                        char kh[256];
                        snprintf(kh, sizeof(kh), "x-brimble-key: %s", key);
                        const char *hdrs[] = { kh, cth, NULL };
                        http_req_full(c, m, url, hdrs, body, body ? strlen(body) : 0, &r);
                        if (router_miss(&r))
                                test_fail(__FILE__, __LINE__, "%s %s (documented as %s) is not routed: %ld %s", m, url, p->string,
                                          r.status, r.body);
                        if (!op_lists_status(op, r.status))
                                test_fail(__FILE__, __LINE__, "%s %s answered %ld, which the spec does not list: %s", m, p->string,
                                          r.status, r.body);
                        if (!r.request_id[0])
                                test_fail(__FILE__, __LINE__, "%s %s: no x-request-id header", m, url);
                        hres_done(&r);
                        probes++;

                        /* Authentication exactly where documented. */
                        const char *noauth[] = { cth, NULL };
                        http_req_full(c, m, url, noauth, body, body ? strlen(body) : 0, &r);
                        if (op_needs_auth(spec, op)) {
                                if (r.status != 401 || !op_lists_status(op, 401))
                                        test_fail(__FILE__, __LINE__, "%s %s without a key: %ld (want a documented 401)", m,
                                                  p->string, r.status);
                        } else if (r.status == 401)
                                test_fail(__FILE__, __LINE__, "%s %s is documented without auth but answered 401", m, p->string);
                        hres_done(&r);
                }
                /* Methods the spec does not list for this path are not served.
                 * (/healthz and /metrics answer any method.) */
                if (!strcmp(p->string, "/healthz") || !strcmp(p->string, "/metrics"))
                        continue;
                for (size_t k = 0; k < 5; k++) {
                        if (seen[k])
                                continue;
                        http_req(c, upper[k], url, key, NULL, &r);
                        if (r.status != 405)
                                test_fail(__FILE__, __LINE__, "%s %s is not in the spec but answered %ld: %s", upper[k], p->string,
                                          r.status, r.body);
                        hres_done(&r);
                }
        }
        ASSERT_GE(probes, 25);

        /* The probe can fail: paths nobody documents get the router's 404. */
        static const char *const unknown[][2] = {
                { "GET", "/nope" },
                { "GET", "/sandboxes/" UNKNOWN_ID "/nope" },
                { "POST", "/sandboxes/" UNKNOWN_ID "/files" },
                { "GET", "/volumes/" UNKNOWN_ID "/extra" },
                { "GET", "/sandbox/templates/python" },
                { "PUT", "/volumes/" UNKNOWN_ID "/attach" },
        };
        for (size_t i = 0; i < sizeof(unknown) / sizeof(*unknown); i++) {
                http_req(c, unknown[i][0], unknown[i][1], key, NULL, &r);
                ASSERT_EQ(r.status, 404);
                ASSERT_CONTAINS(hres_message(&r), "No route for");
                ASSERT_TRUE(router_miss(&r));
                hres_done(&r);
        }

        /* Documented path rules: %2F and %00 are refused with 400, before authentication. */
        HTTP_EXPECT(c, "GET", "/sandboxes/" UNKNOWN_ID "/files/tmp%2Fx", key, NULL, 400);
        HTTP_EXPECT(c, "GET", "/sandboxes/" UNKNOWN_ID "%00/stats", NULL, NULL, 400);
        /* Authorization: Bearer works as documented. */
        {
                char bh[256];
                snprintf(bh, sizeof(bh), "Authorization: Bearer %s", key);
                const char *hdrs[] = { bh, NULL };
                http_req_full(c, "GET", "/sandboxes", hdrs, NULL, 0, &r);
                ASSERT_EQ(r.status, 200);
                check_answer(spec, "/sandboxes", "get", &r);
                hres_done(&r);
        }
        /* Documented query limits. */
        HTTP_EXPECT(c, "GET", "/sandboxes?limit=101", key, NULL, 400);
        HTTP_EXPECT(c, "GET", "/sandboxes/snapshots?page=0", key, NULL, 400);
        http_req(c, "GET", "/sandboxes/snapshots?limit=100", key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        check_answer(spec, "/sandboxes/snapshots", "get", &r);
        hres_done(&r);
        ctld_stop(c);
}

/* ---- the spec against real answers ---- */

static struct ctld shapes_ctld;

TEST_FULL(answers_match_the_documented_schemas, 90) {
        struct ctld *c = &shapes_ctld;
        struct hres r;
        char id[25], path[256], vid[25];
        need_docker();
        _cleanup_json_ cJSON *spec = load_spec();
        ctld_start(c, NULL, NULL);
        _cleanup_free_ char *key = ctld_account_key(c, "openapi", NULL, NULL);

        /* create: the short result */
        post_and_check(c, spec, "/sandboxes", key, "{\"name\":\"openapi-probe\"}", "create", id);

        /* get: the full record, compared key by key with components.schemas.Sandbox both ways */
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        http_req(c, "GET", path, key, NULL, &r);
        ASSERT_EQ(r.status, 200);
        {
                cJSON *sb = cJSON_GetObjectItemCaseSensitive(r.json, "data");
                cJSON *schema = pointer(spec, "#/components/schemas/Sandbox");
                cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
                cJSON *req = cJSON_GetObjectItemCaseSensitive(schema, "required");
                cJSON *k;
                int bad = 0;
                ASSERT_TRUE(cJSON_IsObject(sb));
                ASSERT_NOT_NULL(props);
                cJSON_ArrayForEach(k, sb)
                        if (!cJSON_GetObjectItemCaseSensitive(props, k->string)) {
                                fprintf(stderr, "  Sandbox.%s is returned but not documented\n", k->string);
                                bad++;
                        }
                cJSON_ArrayForEach(k, req)
                        if (!cJSON_GetObjectItemCaseSensitive(sb, k->valuestring)) {
                                fprintf(stderr, "  Sandbox.%s is documented as required but not returned\n", k->valuestring);
                                bad++;
                        }
                /* Every key is always present, so every documented key is required. */
                cJSON_ArrayForEach(k, props) {
                        bool listed = false;
                        cJSON *q;
                        cJSON_ArrayForEach(q, req) listed |= !strcmp(q->valuestring, k->string);
                        if (!listed) {
                                fprintf(stderr, "  Sandbox.%s is documented but not required\n", k->string);
                                bad++;
                        }
                }
                ASSERT_EQ(bad, 0);
        }
        check_answer(spec, "/sandboxes/{id}", "get", &r);
        hres_done(&r);

        get_and_check(c, spec, "/sandboxes?limit=5", key, "/sandboxes");
        snprintf(path, sizeof(path), "/sandboxes/%s/wait?timeout=0", id);
        get_and_check(c, spec, path, key, "/sandboxes/{id}/wait");

        /* exec, plain and with every truncation/timeout flag */
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        http_req(c, "POST", path, key, "{\"cmd\":\"echo out; echo err >&2; exit 3\"}", &r);
        ASSERT_EQ(r.status, 200);
        check_answer(spec, "/sandboxes/{id}/exec", "post", &r);
        hres_done(&r);
        http_req(c, "POST", path, key, "{\"cmd\":\"head -c 1100000 /dev/zero | tr '\\\\0' a; sleep 5\",\"timeout_seconds\":1}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "timed_out")));
        ASSERT_TRUE(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "truncated")));
        check_answer(spec, "/sandboxes/{id}/exec", "post", &r);
        hres_done(&r);

        /* the streamed form: ": open", data frames, a final done frame, as documented */
        http_req(c, "POST", path, key, "{\"cmd\":\"echo hi\",\"stream\":true}", &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_CONTAINS(r.content_type, "text/event-stream");
        ASSERT_TRUE(!strncmp(r.body, ": open\n\n", 8));
        ASSERT_CONTAINS(r.body, "data: {\"type\":\"stdout\",\"data\":\"hi\\n\"}\n\n");
        {
                const char *last = NULL;
                for (const char *s = strstr(r.body, "data: "); s; s = strstr(s + 1, "\ndata: "))
                        last = s[0] == '\n' ? s + 1 : s;
                ASSERT_NOT_NULL(last);
                _cleanup_json_ cJSON *done = cJSON_Parse(last + 6);
                ASSERT_NOT_NULL(done);
                struct conf cf = { .spec = spec };
                conform(&cf, pointer(spec, "#/components/schemas/ExecDoneFrame"), done, "done frame");
                ASSERT_EQ(cf.problems, 0);
        }
        hres_done(&r);

        /* batch: one good file, one bad one; the result sits inside the envelope's data */
        snprintf(path, sizeof(path), "/sandboxes/%s/files/batch", id);
        http_req(c, "POST", path, key,
                 "{\"files\":[{\"path\":\"/tmp/a.txt\",\"content_base64\":\"aGk=\"},{\"path\":\"relative\",\"content_base64\":\"\"}]}",
                 &r);
        ASSERT_EQ(r.status, 200);
        ASSERT_EQ(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "uploaded")->valueint, 1);
        check_answer(spec, "/sandboxes/{id}/files/batch", "post", &r);
        hres_done(&r);

        snprintf(path, sizeof(path), "/sandboxes/%s/stats?hoursAgo=1", id);
        get_and_check(c, spec, path, key, "/sandboxes/{id}/stats");

        get_and_check(c, spec, "/sandbox/templates", key, "/sandbox/templates");
        get_and_check(c, spec, "/sandboxes/regions", key, "/sandboxes/regions");
        get_and_check(c, spec, "/healthz", NULL, "/healthz");

        /* volumes: create, fetch, list, delete */
        post_and_check(c, spec, "/volumes", key, "{\"name\":\"openapi-vol\",\"sizeGB\":10,\"region\":\"" LOCAL_REGION "\"}",
                       "volume create", vid);
        snprintf(path, sizeof(path), "/volumes/%s", vid);
        get_and_check(c, spec, path, key, "/volumes/{volumeId}");
        get_and_check(c, spec, "/volumes", key, "/volumes");
        HTTP_EXPECT(c, "DELETE", path, key, NULL, 204);

        /* pause acknowledges without data; destroyed records still match */
        snprintf(path, sizeof(path), "/sandboxes/%s/pause", id);
        http_req(c, "POST", path, key, NULL, &r);
        check_answer(spec, "/sandboxes/{id}/pause", "post", &r);
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        HTTP_EXPECT(c, "DELETE", path, key, NULL, 204);
        http_req(c, "GET", path, key, NULL, &r);
        ASSERT_STREQ(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r.json, "data"), "status")),
                     "destroyed");
        check_answer(spec, "/sandboxes/{id}", "get", &r);
        hres_done(&r);
        ctld_stop(c);
}
