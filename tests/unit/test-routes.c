/* Unit tests for controld's route table and matcher (api.c): which row a request
 * finds, {id} checks, Allow for 405, metrics labels, body classes. No daemon runs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "http.h"
#include "testlib.h"

#define ID "0123456789abcdef01234567"

static enum route_status m(const char *method, const char *path, struct route_match *r) {
        return route_match(method, path, r);
}

TEST(found_rows_and_labels) {
        static const struct { const char *method, *path, *label; } ok[] = {
                { "GET", "/healthz", "/healthz" },
                { "HEAD", "/healthz", "/healthz" },
                { "GET", "/metrics", "/metrics" },
                { "GET", "/sandbox/templates", "/sandbox/templates" },
                { "GET", "/sandboxes", "/sandboxes" },
                { "POST", "/sandboxes", "/sandboxes" },
                { "POST", "/sandboxes/", "/sandboxes" },
                { "GET", "/sandboxes/regions", "/sandboxes/regions" },
                { "GET", "/sandboxes/snapshots", "/sandboxes/snapshots" },
                { "DELETE", "/sandboxes/snapshots/" ID, "/sandboxes/snapshots/{id}" },
                { "GET", "/sandboxes/" ID, "/sandboxes/{id}" },
                { "DELETE", "//sandboxes//" ID "/", "/sandboxes/{id}" },
                { "GET", "/sandboxes/" ID "/wait", "/sandboxes/{id}/wait" },
                { "POST", "/sandboxes/" ID "/pause", "/sandboxes/{id}/pause" },
                { "POST", "/sandboxes/" ID "/resume", "/sandboxes/{id}/resume" },
                { "GET", "/sandboxes/" ID "/stats", "/sandboxes/{id}/stats" },
                { "GET", "/sandboxes/" ID "/egress", "/sandboxes/{id}/egress" },
                { "PUT", "/sandboxes/" ID "/egress", "/sandboxes/{id}/egress" },
                { "GET", "/sandboxes/" ID "/snapshots", "/sandboxes/{id}/snapshots" },
                { "POST", "/sandboxes/" ID "/snapshots", "/sandboxes/{id}/snapshots" },
                { "POST", "/sandboxes/" ID "/exec", "/sandboxes/{id}/exec" },
                { "POST", "/sandboxes/" ID "/code", "/sandboxes/{id}/code" },
                { "POST", "/sandboxes/" ID "/files/batch", "/sandboxes/{id}/files/batch" },
                { "GET", "/sandboxes/" ID "/files/tmp/x", "/sandboxes/{id}/files/{path}" },
                { "PUT", "/sandboxes/" ID "/files/tmp/x", "/sandboxes/{id}/files/{path}" },
                { "GET", "/volumes", "/volumes" },
                { "POST", "/volumes", "/volumes" },
                { "GET", "/volumes/" ID, "/volumes/{id}" },
                { "DELETE", "/volumes/" ID, "/volumes/{id}" },
        };
        for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
                struct route_match r;
                if (m(ok[i].method, ok[i].path, &r) != ROUTE_FOUND)
                        test_fail(__FILE__, __LINE__, "%s %s: status %d", ok[i].method, ok[i].path, (int) r.status);
                ASSERT_NOT_NULL(r.row);
                ASSERT_NOT_NULL(r.row->handler);
                ASSERT_STREQ(r.row->label, ok[i].label);
                if (strstr(ok[i].path, ID))
                        ASSERT_STREQ(r.id, ID);
        }
}

TEST(path_parameter_keeps_the_rest) {
        struct route_match r;
        ASSERT_EQ(m("GET", "/sandboxes/" ID "/files/tmp/a b/c.txt", &r), ROUTE_FOUND);
        ASSERT_STREQ(r.rest, "/tmp/a b/c.txt");
        /* Leading slashes collapse; inner and trailing ones stay for the path check to refuse. */
        ASSERT_EQ(m("PUT", "/sandboxes/" ID "/files//tmp//x/", &r), ROUTE_FOUND);
        ASSERT_STREQ(r.rest, "/tmp//x/");
        /* "batch" alone is the batch route; below it, a file path. */
        ASSERT_EQ(m("GET", "/sandboxes/" ID "/files/batch/x", &r), ROUTE_FOUND);
        ASSERT_STREQ(r.row->label, "/sandboxes/{id}/files/{path}");
        ASSERT_STREQ(r.rest, "/batch/x");
        ASSERT_EQ(m("POST", "/sandboxes/" ID "/files/batch", &r), ROUTE_FOUND);
        ASSERT_NULL(r.rest);
        /* No path at all is not a file route. */
        ASSERT_EQ(m("GET", "/sandboxes/" ID "/files", &r), ROUTE_NOT_FOUND);
        ASSERT_EQ(m("GET", "/sandboxes/" ID "/files/", &r), ROUTE_NOT_FOUND);
}

TEST(not_found) {
        static const char *const paths[] = {
                "", "/", "/nope", "/sandboxes/" ID "/frobnicate", "/sandboxes/" ID "/pause/x", "/volumes/" ID "/extra",
                "/sandbox/templates/python", "/sandboxesx", "/sandboxes/regions/x", "/healthz/x", "*",
        };
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                struct route_match r;
                if (m("GET", paths[i], &r) != ROUTE_NOT_FOUND)
                        test_fail(__FILE__, __LINE__, "'%s': status %d", paths[i], (int) r.status);
                ASSERT_NULL(r.row);
        }
}

TEST(bad_ids_are_refused_once_with_the_noun) {
        static const char *const bad[] = {
                "xyz", "0123456789ABCDEF01234567", "0123456789abcdef012345678", "0123456789abcdef0123456", "%20",
                "0123456789abcdef0123456g",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                char p[128];
                struct route_match r;
                snprintf(p, sizeof(p), "/sandboxes/%s/pause", bad[i]);
                ASSERT_EQ(m("POST", p, &r), ROUTE_BAD_ID);
                ASSERT_STREQ(r.row->id_noun, "sandbox");
                ASSERT_STREQ(r.row->label, "/sandboxes/{id}/pause");
                ASSERT_STREQ(r.id, "");
                snprintf(p, sizeof(p), "/sandboxes/%s", bad[i]);
                ASSERT_EQ(m("GET", p, &r), ROUTE_BAD_ID);
                ASSERT_STREQ(r.row->id_noun, "sandbox");
                snprintf(p, sizeof(p), "/volumes/%s", bad[i]);
                ASSERT_EQ(m("GET", p, &r), ROUTE_BAD_ID);
                ASSERT_STREQ(r.row->id_noun, "volume");
                snprintf(p, sizeof(p), "/sandboxes/snapshots/%s", bad[i]);
                ASSERT_EQ(m("DELETE", p, &r), ROUTE_BAD_ID);
                ASSERT_STREQ(r.row->id_noun, "snapshot");
                snprintf(p, sizeof(p), "/sandboxes/%s/files/tmp/x", bad[i]);
                ASSERT_EQ(m("PUT", p, &r), ROUTE_BAD_ID);
        }
        /* Literal segments win over {id}. */
        struct route_match r;
        ASSERT_EQ(m("GET", "/sandboxes/regions", &r), ROUTE_FOUND);
        ASSERT_EQ(m("GET", "/sandboxes/snapshots", &r), ROUTE_FOUND);
}

TEST(allow_header_comes_from_the_table) {
        static const struct { const char *method, *path, *allow, *label; } m405[] = {
                { "PUT", "/sandboxes", "GET, POST", "/sandboxes" },
                { "PATCH", "/sandboxes/" ID, "GET, DELETE", "/sandboxes/{id}" },
                { "GET", "/sandboxes/" ID "/pause", "POST", "/sandboxes/{id}/pause" },
                { "DELETE", "/sandbox/templates", "GET", "/sandbox/templates" },
                { "POST", "/sandboxes/regions", "GET", "/sandboxes/regions" },
                { "PUT", "/volumes", "GET, POST", "/volumes" },
                { "POST", "/sandboxes/" ID "/wait", "GET", "/sandboxes/{id}/wait" },
                { "DELETE", "/sandboxes/" ID "/files/tmp/x", "GET, PUT", "/sandboxes/{id}/files/{path}" },
                { "GET", "/sandboxes/" ID "/files/batch", "POST", "/sandboxes/{id}/files/batch" },
                { "DELETE", "/sandboxes/" ID "/snapshots", "GET, POST", "/sandboxes/{id}/snapshots" },
                { "DELETE", "/sandboxes/" ID "/egress", "GET, PUT", "/sandboxes/{id}/egress" },
                { "POST", "/healthz", "GET", "/healthz" },
                { "HEAD", "/sandboxes", "GET, POST", "/sandboxes" },
                { "A\"}x{", "/metrics", "GET", "/metrics" },
        };
        for (size_t i = 0; i < ELEMENTSOF(m405); i++) {
                struct route_match r;
                if (m(m405[i].method, m405[i].path, &r) != ROUTE_BAD_METHOD)
                        test_fail(__FILE__, __LINE__, "%s %s: status %d", m405[i].method, m405[i].path, (int) r.status);
                ASSERT_STREQ(r.allow, m405[i].allow);
                ASSERT_STREQ(r.row->label, m405[i].label);
        }
}

TEST(table_is_consistent) {
        size_t n;
        const struct route *t = route_table(&n);
        ASSERT_GE(n, 20);
        for (size_t i = 0; i < n; i++) {
                ASSERT_NOT_NULL(t[i].handler);
                ASSERT_TRUE(t[i].pattern[0] == '/');
                /* {id} rows name what the id is; others do not. */
                ASSERT_EQ(strstr(t[i].pattern, "{id}") != NULL, t[i].id_noun != NULL);
                /* Rows of one pattern are adjacent (the matcher relies on it), and a
                 * method appears once per pattern. */
                for (size_t k = i + 1; k < n; k++)
                        if (!strcmp(t[i].pattern, t[k].pattern)) {
                                ASSERT_TRUE(k == i + 1 || !strcmp(t[k - 1].pattern, t[i].pattern));
                                ASSERT_TRUE(strcmp(t[i].method, t[k].method) != 0);
                                ASSERT_STREQ(t[i].label, t[k].label);
                                ASSERT_EQ(t[i].auth, t[k].auth);
                        }
                /* Only the two operational endpoints and the terminal page's static files are
                 * open; the terminal's WebSocket and page check the key or their token
                 * themselves (a browser cannot send headers there). Only uploads stream. */
                bool open_or_self = !strcmp(t[i].pattern, "/healthz") || !strcmp(t[i].pattern, "/metrics") ||
                                    !strncmp(t[i].pattern, "/terminal/", 10) ||
                                    !strcmp(t[i].pattern, "/sandboxes/{id}/pty") ||
                                    !strcmp(t[i].pattern, "/sandboxes/{id}/terminal");
                ASSERT_EQ(t[i].auth, !open_or_self);
                ASSERT_EQ(t[i].body == ROUTE_BODY_STREAM, t[i].prepare != NULL);
        }
}

TEST(body_classes) {
        struct route_match r;
        ASSERT_EQ(m("POST", "/sandboxes", &r), ROUTE_FOUND);
        ASSERT_EQ(r.row->body, ROUTE_BODY_JSON);
        ASSERT_EQ(m("POST", "/volumes", &r), ROUTE_FOUND);
        ASSERT_EQ(r.row->body, ROUTE_BODY_JSON);
        ASSERT_EQ(m("PUT", "/sandboxes/" ID "/egress", &r), ROUTE_FOUND);
        ASSERT_EQ(r.row->body, ROUTE_BODY_JSON);
        ASSERT_EQ(m("POST", "/sandboxes/" ID "/files/batch", &r), ROUTE_FOUND);
        ASSERT_EQ(r.row->body, ROUTE_BODY_LARGE);
        ASSERT_EQ(m("PUT", "/sandboxes/" ID "/files/x", &r), ROUTE_FOUND);
        ASSERT_EQ(r.row->body, ROUTE_BODY_STREAM);
}

TEST(one_errno_to_status_table) {
        static const struct { int err, status; } t[] = {
                { -EINVAL, 400 }, { -EBUSY, 400 }, { -EEXIST, 400 }, { -EACCES, 401 }, { -EPERM, 403 },
                { -EDQUOT, 403 }, { -ENOENT, 404 }, { -ESTALE, 409 }, { -EFBIG, 413 }, { -EUSERS, 429 },
                { -EIO, 500 }, { -EOPNOTSUPP, 501 }, { -EHOSTUNREACH, 503 }, { -EAGAIN, 503 }, { -ENOSPC, 507 },
                { -ENOTTY, 500 }, { 0, 500 },
        };
        for (size_t i = 0; i < ELEMENTSOF(t); i++)
                ASSERT_EQ(http_status_from_errno(t[i].err), t[i].status);
        ASSERT_EQ(http_status_from_errno(ENOENT), 404); /* either sign */
}
