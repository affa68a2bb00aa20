/* URL path handling in controld: the percent-decoding libmicrohttpd calls on every
 * request path (http_path_unescape, controld/http.c) and the route matcher that
 * runs on the decoded path (route_match, controld/api.c). Input: byte 0 picks the
 * method (one of the table's, HEAD, or junk taken from the input), the rest up to
 * the first NUL is the raw path. Properties:
 *   - unescape: returns strlen of its output, never grows the text, never adds or
 *     removes a '/' (an escaped "%2F" stays escaped) and never makes a NUL; text
 *     without '%' comes back unchanged;
 *   - route_match agrees with an independent segment-by-segment matcher over
 *     route_table() (first pattern that matches wins; repeated and trailing
 *     slashes make no segment; {id} and {path*} need a non-empty segment, {pid}
 *     a decimal 1..2^31-1 without a leading zero);
 *   - FOUND: the row's method is the request's (or HEAD on a head row), {id} is 24
 *     lowercase hex, {path*} points into the path at a '/';
 *     BAD_METHOD: "Allow" is terminated, non-empty and does not list the method;
 *     BAD_ID / NOT_FOUND: row set / not set as the header promises;
 *   - the same path with slashes collapsed matches the same row and id. */
#include <stdbool.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz.h"
#include "http.h"
#include "strutil.h"

#define MAX_PATH 8192
#define MAX_SEGS 64

static size_t count_char(const char *s, char ch) {
        size_t n = 0;
        for (; *s; s++)
                n += *s == ch;
        return n;
}

struct seg {
        const char *p;
        size_t n;
};

/* Non-empty '/'-separated segments of s; false when there are more than MAX_SEGS. */
static bool split(const char *s, struct seg *segs, size_t *ret_n) {
        size_t n = 0;
        while (*s) {
                while (*s == '/')
                        s++;
                if (!*s)
                        break;
                const char *e = strchrnul(s, '/');
                if (n == MAX_SEGS)
                        return false;
                segs[n++] = (struct seg) { s, (size_t) (e - s) };
                s = e;
        }
        *ret_n = n;
        return true;
}

static bool seg_is(const struct seg *g, const char *lit) {
        return g->n == strlen(lit) && !memcmp(g->p, lit, g->n);
}

/* A {pid} segment: 1..2^31-1 in plain decimal (no sign, no leading zero). */
static bool seg_is_pid(const struct seg *g) {
        if (g->n == 0 || g->n > 10 || g->p[0] == '0')
                return false;
        long long v = 0;
        for (size_t k = 0; k < g->n; k++) {
                if (g->p[k] < '0' || g->p[k] > '9')
                        return false;
                v = v * 10 + (g->p[k] - '0');
        }
        return v <= 2147483647LL;
}

/* The reference matcher: does pattern match the path's segments? */
static bool ref_match(const char *pattern, const struct seg *ps, size_t pn) {
        struct seg pat[MAX_SEGS];
        size_t qn = 0;
        FUZZ_ASSERT(split(pattern, pat, &qn), "pattern %s too long", pattern);
        for (size_t i = 0; i < qn; i++) {
                if (seg_is(&pat[i], "{path*}"))
                        return pn > i;  /* at least one more segment */
                if (i >= pn)
                        return false;
                if (seg_is(&pat[i], "{id}"))
                        continue;
                if (seg_is(&pat[i], "{pid}")) {
                        if (!seg_is_pid(&ps[i]))
                                return false;
                        continue;
                }
                if (pat[i].n != ps[i].n || memcmp(pat[i].p, ps[i].p, ps[i].n))
                        return false;
        }
        return pn == qn;
}

static void collapse_slashes(const char *in, char *out) {
        bool prev = false;
        for (; *in; in++) {
                if (*in == '/' && prev)
                        continue;
                prev = *in == '/';
                *out++ = *in;
        }
        *out = 0;
}

static void check_route(const char *method, const char *path) {
        struct route_match m;
        enum route_status st = route_match(method, path, &m);
        size_t nroutes = 0;
        const struct route *tab = route_table(&nroutes);
        struct seg ps[MAX_SEGS];
        size_t pn = 0;

        FUZZ_ASSERT(st == m.status, "returned %d, status %d", st, m.status);
        if (!split(path, ps, &pn))
                return;  /* deeper than any route: only the "no crash" property */

        const struct route *want = NULL;
        for (size_t i = 0; i < nroutes && !want; i++)
                if (ref_match(tab[i].pattern, ps, pn))
                        want = &tab[i];

        switch (st) {
        case ROUTE_NOT_FOUND:
                FUZZ_ASSERT(!want, "reference matches %s %s for %s", want->method, want->pattern, path);
                FUZZ_ASSERT(!m.row, "row set on NOT_FOUND");
                return;
        case ROUTE_FOUND:
        case ROUTE_BAD_METHOD:
        case ROUTE_BAD_ID:
                break;
        }
        FUZZ_ASSERT(want, "matched %s but the reference matches nothing: %s", m.row ? m.row->pattern : "(null)", path);
        FUZZ_ASSERT(m.row && !strcmp(m.row->pattern, want->pattern), "pattern %s, reference %s, path %s",
                    m.row ? m.row->pattern : "(null)", want->pattern, path);
        bool has_id = strstr(want->pattern, "{id}") != NULL, has_rest = strstr(want->pattern, "{path*}") != NULL;

        switch (st) {
        case ROUTE_FOUND:
                FUZZ_ASSERT(!strcmp(m.row->method, method) || (m.row->head && !strcmp(method, "HEAD")),
                            "row %s answers method %s", m.row->method, method);
                if (has_id)
                        FUZZ_ASSERT(strlen(m.id) == SANDBOX_ID_LEN && hexid_valid(m.id), "bad id accepted: %s", m.id);
                if (has_rest) {
                        FUZZ_ASSERT(m.rest && m.rest >= path && m.rest < path + strlen(path) && *m.rest == '/',
                                    "rest does not point at a '/' in the path");
                        FUZZ_ASSERT(m.rest[strspn(m.rest, "/")], "empty rest");
                } else
                        FUZZ_ASSERT(!m.rest, "rest set for %s", m.row->pattern);
                if (strstr(want->pattern, "{pid}"))
                        FUZZ_ASSERT(m.pid >= 1 && m.pid <= 2147483647u, "pid %u out of range", m.pid);
                else
                        FUZZ_ASSERT(m.pid == 0, "pid %u set for %s", m.pid, m.row->pattern);
                break;
        case ROUTE_BAD_METHOD: {
                FUZZ_ASSERT(memchr(m.allow, 0, sizeof(m.allow)) && m.allow[0], "Allow empty or unterminated");
                char allow[sizeof(m.allow)];
                memcpy(allow, m.allow, sizeof(allow));
                char *save = NULL;
                for (char *t = strtok_r(allow, ", ", &save); t; t = strtok_r(NULL, ", ", &save))
                        FUZZ_ASSERT(strcmp(t, method), "Allow \"%s\" lists the refused method %s", m.allow, method);
                break;
        }
        case ROUTE_BAD_ID:
                FUZZ_ASSERT(has_id, "BAD_ID for %s", want->pattern);
                break;
        case ROUTE_NOT_FOUND:
                break;
        }

        /* Slash-collapsing does not change the match. */
        char norm[MAX_PATH + 1];
        struct route_match m2;
        collapse_slashes(path, norm);
        FUZZ_ASSERT(route_match(method, norm, &m2) == st && m2.row == m.row && !strcmp(m2.id, m.id),
                    "%s and %s match differently", path, norm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        static const char *const methods[] = { "GET", "POST", "PUT", "DELETE", "HEAD", "PATCH", "OPTIONS" };
        char method[16] = "";
        if (size < 1)
                return 0;
        uint8_t sel = data[0];
        data++, size--;
        if (sel < 0xf0)
                strcpy(method, methods[sel % (sizeof(methods) / sizeof(methods[0]))]);
        else {  /* a junk method: the next (sel & 15) bytes */
                size_t n = sel & 15;
                if (n > size)
                        n = size;
                memcpy(method, data, n);
                method[n] = 0;  /* may be shorter when it holds a NUL: fine */
                data += n, size -= n;
        }

        size_t len = strnlen((const char *) data, size);
        if (len > MAX_PATH)
                len = MAX_PATH;
        char raw[MAX_PATH + 1], path[MAX_PATH + 1];
        memcpy(raw, data, len);
        raw[len] = 0;
        memcpy(path, raw, len + 1);

        size_t n = http_path_unescape(path);
        FUZZ_ASSERT(n == strlen(path), "returned %zu, length %zu", n, strlen(path));
        FUZZ_ASSERT(n <= len, "grew from %zu to %zu", len, n);
        FUZZ_ASSERT(count_char(path, '/') == count_char(raw, '/'), "'/' count changed: %s -> %s", raw, path);
        if (!strchr(raw, '%'))
                FUZZ_ASSERT(!strcmp(raw, path), "text without '%%' changed");

        check_route(method, raw);
        check_route(method, path);
        return 0;
}
