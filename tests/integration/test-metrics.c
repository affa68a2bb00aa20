/* /metrics hygiene against a real controld: the page stays valid Prometheus text whatever
 * method a client sends, junk methods cannot crowd real routes out of the series table,
 * and the unauthenticated page carries no per-tenant data (ids, keys, names). */
#include <ctype.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "ctltest.h"
#include "err.h"
#include "testlib.h"

/* Sends one raw request (any bytes as the method) and reads until the server closes or 3 s
 * pass. Returns the status code of the answer, or -1 when none came. */
static int raw_request(int port, const char *method, const char *path) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(connect(fd, (struct sockaddr *) &a, sizeof(a)), 0);
        char head[1024];
        int n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", method, path);
        ASSERT_EQ(write(fd, head, (size_t) n), n);
        char buf[4096];
        size_t len = 0;
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                if (poll(&p, 1, 3000) <= 0)
                        break;
                ssize_t k = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (k <= 0)
                        break;
                len += (size_t) k;
                if (len == sizeof(buf) - 1)
                        break;
        }
        buf[len] = 0;
        close(fd);
        int status;
        return sscanf(buf, "HTTP/1.%*d %d", &status) == 1 ? status : -1;
}

/* ---- a strict reader of the text exposition format 0.0.4 ---- */

struct sample {
        char name[128];
        char labels[8][2][160];  /* name, unescaped value */
        int n_labels;
        double value;
};

static bool metric_name_ok(const char *s, size_t n) {
        if (!n || !(isalpha((unsigned char) s[0]) || s[0] == '_' || s[0] == ':'))
                return false;
        for (size_t i = 1; i < n; i++)
                if (!(isalnum((unsigned char) s[i]) || s[i] == '_' || s[i] == ':'))
                        return false;
        return true;
}

/* Parses one sample line; on failure says why in err. */
static bool parse_sample(const char *line, struct sample *s, struct err *err) {
        const char *p = line;
        size_t n = strcspn(p, "{ ");
        memset(s, 0, sizeof(*s));
        if (!metric_name_ok(p, n) || n >= sizeof(s->name)) {
                err_set(err, -EINVAL, "bad metric name");
                return false;
        }
        memcpy(s->name, p, n);
        p += n;
        if (*p == '{') {
                p++;
                while (*p != '}') {
                        if (s->n_labels == 8) {
                                err_set(err, -EINVAL, "too many labels");
                                return false;
                        }
                        size_t k = strcspn(p, "=");
                        if (!p[k] || k >= 160 || !isalpha((unsigned char) p[0]) ) {
                                err_set(err, -EINVAL, "bad label name");
                                return false;
                        }
                        for (size_t i = 0; i < k; i++)
                                if (!(isalnum((unsigned char) p[i]) || p[i] == '_')) {
                                        err_set(err, -EINVAL, "bad label name");
                                        return false;
                                }
                        memcpy(s->labels[s->n_labels][0], p, k);
                        p += k + 1;
                        if (*p++ != '"') {
                                err_set(err, -EINVAL, "label value not quoted");
                                return false;
                        }
                        char *v = s->labels[s->n_labels][1];
                        size_t w = 0;
                        for (;;) {
                                if (!*p || *p == '\n') {
                                        err_set(err, -EINVAL, "unterminated label value");
                                        return false;
                                }
                                if (*p == '"')
                                        break;
                                char ch = *p++;
                                if (ch == '\\') {
                                        ch = *p++;
                                        if (ch == 'n')
                                                ch = '\n';
                                        else if (ch != '\\' && ch != '"') {
                                                err_set(err, -EINVAL, "bad escape \\%c", ch);
                                                return false;
                                        }
                                }
                                if (w + 1 < 160)
                                        v[w++] = ch;
                        }
                        p++;
                        s->n_labels++;
                        if (*p == ',')
                                p++;
                        else if (*p != '}') {
                                err_set(err, -EINVAL, "junk after a label value: '%.20s'", p);
                                return false;
                        }
                }
                p++;
        }
        if (*p++ != ' ') {
                err_set(err, -EINVAL, "no space before the value");
                return false;
        }
        char *end;
        s->value = strtod(p, &end);
        if (end == p || *end) {
                err_set(err, -EINVAL, "bad value '%s'", p);
                return false;
        }
        return true;
}

/* Parses a whole page; fails the test on any malformed line, a sample whose family has no
 * TYPE line before it, or two samples with the same name and labels. Calls fn per sample. */
static int parse_page(const char *page, void (*fn)(const struct sample *s, void *ud), void *ud) {
        _cleanup_free_ char *copy = strdup(page);
        char typed[64][128];
        int n_typed = 0, n_samples = 0;
        char **seen = NULL;
        size_t n_seen = 0;
        ASSERT_TRUE(strlen(page) > 0 && page[strlen(page) - 1] == '\n');
        for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (line[0] == '#') {
                        char kw[8], name[128];
                        if (sscanf(line, "# %7s %127s", kw, name) != 2 || (strcmp(kw, "HELP") && strcmp(kw, "TYPE")))
                                test_fail(__FILE__, __LINE__, "bad comment line: %s", line);
                        if (!strcmp(kw, "TYPE") && n_typed < 64)
                                snprintf(typed[n_typed++], sizeof(typed[0]), "%s", name);
                        continue;
                }
                struct sample s;
                struct err err = { 0 };
                if (!parse_sample(line, &s, &err))
                        test_fail(__FILE__, __LINE__, "malformed exposition line (%s): %s", err.message, line);
                bool found = false;
                for (int i = 0; i < n_typed && !found; i++) {
                        size_t tl = strlen(typed[i]);
                        found = !strncmp(s.name, typed[i], tl) &&
                                (!s.name[tl] || !strcmp(s.name + tl, "_bucket") || !strcmp(s.name + tl, "_sum") ||
                                 !strcmp(s.name + tl, "_count"));
                }
                if (!found)
                        test_fail(__FILE__, __LINE__, "sample without a TYPE line: %s", line);
                /* Duplicate series: same text up to the value. */
                size_t key_len = strrchr(line, ' ') - line;
                for (size_t i = 0; i < n_seen; i++)
                        if (strlen(seen[i]) == key_len && !strncmp(seen[i], line, key_len))
                                test_fail(__FILE__, __LINE__, "duplicate series: %s", line);
                seen = realloc(seen, (n_seen + 1) * sizeof(*seen));
                seen[n_seen++] = strndup(line, key_len);
                if (fn)
                        fn(&s, ud);
                n_samples++;
        }
        for (size_t i = 0; i < n_seen; i++)
                free(seen[i]);
        free(seen);
        return n_samples;
}

static const char *label(const struct sample *s, const char *k) {
        for (int i = 0; i < s->n_labels; i++)
                if (!strcmp(s->labels[i][0], k))
                        return s->labels[i][1];
        return NULL;
}

struct req_count {
        const char *route, *method;
        int status;
        double value;
        int methods_other;       /* series whose method label is "other" */
        int methods_unknown;     /* series whose method label is none of the known ones */
};

static void count_requests(const struct sample *s, void *ud) {
        struct req_count *q = ud;
        if (strcmp(s->name, "paddock_http_requests_total") != 0)
                return;
        const char *m = label(s, "method"), *route = label(s, "route"), *st = label(s, "status");
        static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE", "other" };
        bool ok = false;
        for (size_t i = 0; m && i < sizeof(known) / sizeof(known[0]); i++)
                ok |= !strcmp(m, known[i]);
        if (!ok)
                q->methods_unknown++;
        if (m && !strcmp(m, "other"))
                q->methods_other++;
        if (m && route && st && !strcmp(m, q->method) && !strcmp(route, q->route) && atoi(st) == q->status)
                q->value = s->value;
}

static char *get_metrics(struct ctld *c) {
        struct hres r;
        http_req(c, "GET", "/metrics", NULL, NULL, &r);
        ASSERT_EQ(r.status, 200);
        char *m = strdup(r.body);
        hres_done(&r);
        return m;
}

TEST_FULL(junk_methods_keep_the_exposition_valid_and_real_routes_counting, 180) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        _cleanup_free_ char *key = ctld_start_with_account(&c, "metered", NULL);

        /* Methods that would break the page if they became label values verbatim, and 300
         * distinct junk methods to fill a series table. libmicrohttpd answers them (any
         * status); what matters is what /metrics shows afterwards. */
        static const char *const hostile[] = { "A\"}x{", "B\\", "C\\\"}", "G\"ET", "x{y=\"1\"}" };
        int answered = 0;
        for (size_t i = 0; i < sizeof(hostile) / sizeof(hostile[0]); i++)
                answered += raw_request(c.port, hostile[i], "/sandboxes") > 0;
        for (int i = 0; i < 300; i++) {
                char m[32];
                snprintf(m, sizeof(m), "JUNK%03d", i);
                answered += raw_request(c.port, m, "/sandboxes") > 0;
        }
        ASSERT_GE(answered, 300);

        /* A real route still counts after the junk. */
        for (int i = 0; i < 3; i++) {
                HTTP_EXPECT(&c, "GET", "/sandboxes", key, NULL, 200);
        }
        struct req_count q = { .route = "/sandboxes", .method = "GET", .status = 200 };
        for (int i = 0; i < 40 && q.value < 3; i++) {  /* counted when the request completes */
                _cleanup_free_ char *page = get_metrics(&c);
                q = (struct req_count){ .route = "/sandboxes", .method = "GET", .status = 200 };
                ASSERT_GE(parse_page(page, count_requests, &q), 10);
                if (q.value < 3)
                        usleep(50000);
        }
        ASSERT_EQ((long long) q.value, 3);
        /* Junk methods are one label value, "other", never themselves. */
        ASSERT_EQ(q.methods_unknown, 0);
        ASSERT_GE(q.methods_other, 1);
        _cleanup_free_ char *page = get_metrics(&c);
        ASSERT_TRUE(strstr(page, "JUNK") == NULL);
        ASSERT_TRUE(strstr(page, "x{") == NULL);
        ASSERT_CONTAINS(page, "paddock_metrics_series_dropped_total 0\n");
}

TEST_FULL(metrics_page_has_no_per_tenant_data, 180) {
        static struct ctld c; /* static: the exit hook uses it after the test function returns */
        struct hres r;
        char acct[25], id[25], path[128];
        _cleanup_free_ char *key = ctld_start_with_account(&c, "tenant-zebra-name", acct);

        http_req(&c, "POST", "/volumes", key, "{\"name\":\"vol-tenant-zebra\",\"sizeGB\":10,\"region\":\"6a06df21cc6bef51342e199e\"}", &r);
        if (r.status != 201)
                test_fail(__FILE__, __LINE__, "POST /volumes -> %ld %s", r.status, r.body);
        char vol[25];
        snprintf(vol, sizeof(vol), "%s", hres_data_str(&r, "id"));
        hres_done(&r);
        ctld_create(&c, key, "{\"name\":\"box-tenant-zebra\"}", id);
        snprintf(path, sizeof(path), "/sandboxes/%s/exec", id);
        HTTP_EXPECT(&c, "POST", path, key, "{\"cmd\":\"true\"}", 200);
        snprintf(path, sizeof(path), "/sandboxes/%s/files/tmp/tenant-zebra-file", id);
        char kh[300];
        snprintf(kh, sizeof(kh), "x-brimble-key: %s", key);
        const char *h[] = { kh, "Content-Type: application/octet-stream", NULL };
        http_req_full(&c, "PUT", path, h, "x", 1, &r);
        ASSERT_TRUE(r.status >= 200 && r.status < 300);
        hres_done(&r);
        snprintf(path, sizeof(path), "/sandboxes/%s/files/tmp/tenant-zebra-file", id);
        HTTP_EXPECT(&c, "GET", path, key, NULL, 200);

        usleep(200000);
        _cleanup_free_ char *page = get_metrics(&c);
        ASSERT_GE(parse_page(page, NULL, NULL), 10);
        ASSERT_CONTAINS(page, "route=\"/sandboxes/{id}/exec\"");
        ASSERT_TRUE(strstr(page, acct) == NULL);
        ASSERT_TRUE(strstr(page, id) == NULL);
        ASSERT_TRUE(strstr(page, vol) == NULL);
        ASSERT_TRUE(strstr(page, key) == NULL);
        ASSERT_TRUE(strstr(page, "zebra") == NULL);
}
