/* metrics.c — Prometheus text exposition: requests by route and status, latency
 * histograms, sandboxes by status, provisioning phase timings.
 *
 * The page is served without authentication, so it carries only aggregate, bounded data:
 * route labels are the router's templates ("/sandboxes/{id}"), never a path; methods outside
 * the standard set become "other"; no account, key, sandbox or volume id ever becomes a label.
 * Every label value is escaped anyway (Prometheus text format 0.0.4: \\, \" and \n), so a
 * value the code did not foresee can never break the exposition. When the series table is
 * full, further series are counted in paddock_metrics_series_dropped_total instead. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "strutil.h"
#include "ctl-metrics.h"

static const double buckets[] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60 };
#define NB (sizeof(buckets) / sizeof(buckets[0]))
/* Routes (~30) x methods (10) x answered statuses (~15) stays well under this. */
#define MAX_SERIES 1024

struct hist { uint64_t b[NB]; uint64_t count; double sum; };
struct req_series { char route[48]; char method[8]; int status; uint64_t count; };
/* A histogram per label value: a route template or a provisioning phase. */
struct named_hist { char name[48]; struct hist h; };

struct metrics {
        pthread_mutex_t lock;
        struct req_series req[MAX_SERIES]; size_t n_req;
        struct named_hist lat[64]; size_t n_lat;
        struct named_hist ph[16]; size_t n_ph;
        uint64_t dropped;  /* observations whose series did not fit a table */
        void (*sources[8])(struct strbuf *out);   /* other parts' series (metrics_add_source) */
        size_t n_sources;
};

void metrics_add_source(struct metrics *m, void (*render)(struct strbuf *out)) {
        pthread_mutex_lock(&m->lock);
        if (m->n_sources < ELEMENTSOF(m->sources))
                m->sources[m->n_sources++] = render;
        pthread_mutex_unlock(&m->lock);
}

struct metrics *metrics_new(void) {
        struct metrics *m = xnew0(struct metrics, 1);
        pthread_mutex_init(&m->lock, NULL);
        return m;
}

struct metrics *metrics_free(struct metrics *m) {
        if (m) {
                pthread_mutex_destroy(&m->lock);
                free(m);
        }
        return NULL;
}

static void hist_add(struct hist *h, double v) {
        for (size_t i = 0; i < NB; i++)
                if (v <= buckets[i])
                        h->b[i]++;
        h->count++;
        h->sum += v;
}

/* The method as a label: one of the standard methods (RFC 9110 + PATCH), else "other".
 * A client chooses the method freely; it must not choose label values or the number of
 * series. Returns a static string. */
static const char *method_label(const char *method) {
        static const char *const known[] = { "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE" };
        for (size_t i = 0; method && i < ELEMENTSOF(known); i++)
                if (!strcmp(method, known[i]))
                        return known[i];
        return "other";
}

/* Adds v to the histogram named name in table t (*n of max entries), creating it when the
 * table has room; an observation that fits nowhere is counted as dropped. m->lock held. */
static void hist_observe(struct metrics *m, struct named_hist *t, size_t *n, size_t max, const char *name, double v) {
        size_t i;
        for (i = 0; i < *n; i++)
                if (!strcmp(t[i].name, name))
                        break;
        if (i == *n && *n < max) {
                snprintf(t[i].name, sizeof(t[i].name), "%s", name);
                (*n)++;
        }
        if (i < *n)
                hist_add(&t[i].h, v);
        else
                m->dropped++;
}

void metrics_observe_request(struct metrics *m, const char *route, const char *method, int status, double seconds) {
        if (!m)
                return;
        method = method_label(method);
        if (status < 100 || status > 599)
                status = 0;
        pthread_mutex_lock(&m->lock);
        size_t i;
        for (i = 0; i < m->n_req; i++)
                if (m->req[i].status == status && !strcmp(m->req[i].route, route) && !strcmp(m->req[i].method, method))
                        break;
        if (i == m->n_req && m->n_req < MAX_SERIES) {
                snprintf(m->req[i].route, sizeof(m->req[i].route), "%s", route);
                snprintf(m->req[i].method, sizeof(m->req[i].method), "%s", method);
                m->req[i].status = status;
                m->n_req++;
        }
        if (i < m->n_req)
                m->req[i].count++;
        else
                m->dropped++;
        hist_observe(m, m->lat, &m->n_lat, ELEMENTSOF(m->lat), route, seconds);
        pthread_mutex_unlock(&m->lock);
}

void metrics_observe_phase(struct metrics *m, const char *phase, double seconds) {
        if (!m)
                return;
        pthread_mutex_lock(&m->lock);
        hist_observe(m, m->ph, &m->n_ph, ELEMENTSOF(m->ph), phase, seconds);
        pthread_mutex_unlock(&m->lock);
}

/* A label value in the text format's escaping into out (size bytes, always terminated):
 * backslash, double quote and line feed are the characters that must be escaped; all else
 * is literal. A value that does not fit is cut before an escape, never inside one. */
#define LABEL_MAX 160
static const char *label_esc(const char *v, char out[static LABEL_MAX]) {
        size_t w = 0;
        for (const char *p = v ? v : ""; *p && w + 3 <= LABEL_MAX - 1; p++) {
                if (*p == '\\' || *p == '"') {
                        out[w++] = '\\';
                        out[w++] = *p;
                } else if (*p == '\n') {
                        out[w++] = '\\';
                        out[w++] = 'n';
                } else
                        out[w++] = *p;
        }
        out[w] = 0;
        return out;
}

static void render_hist(struct strbuf *b, const char *name, const char *lk, const char *lv, const struct hist *h) {
        char esc[LABEL_MAX];
        lv = label_esc(lv, esc);
        for (size_t i = 0; i < NB; i++)
                strbuf_printf(b, "%s_bucket{%s=\"%s\",le=\"%g\"} %llu\n", name, lk, lv, buckets[i], (unsigned long long) h->b[i]);
        strbuf_printf(b, "%s_bucket{%s=\"%s\",le=\"+Inf\"} %llu\n", name, lk, lv, (unsigned long long) h->count);
        strbuf_printf(b, "%s_sum{%s=\"%s\"} %.6f\n", name, lk, lv, h->sum);
        strbuf_printf(b, "%s_count{%s=\"%s\"} %llu\n", name, lk, lv, (unsigned long long) h->count);
}

void metrics_render(struct ctl *c, struct strbuf *out) {
        struct metrics *m = c->metrics;
        int64_t counts[_SB_STATUS_MAX];
        char e1[LABEL_MAX], e2[LABEL_MAX];

        strbuf_printf(out, "# HELP paddock_http_requests_total HTTP requests by route, method and status.\n"
                          "# TYPE paddock_http_requests_total counter\n");
        pthread_mutex_lock(&m->lock);
        for (size_t i = 0; i < m->n_req; i++)
                strbuf_printf(out, "paddock_http_requests_total{route=\"%s\",method=\"%s\",status=\"%d\"} %llu\n",
                              label_esc(m->req[i].route, e1), label_esc(m->req[i].method, e2), m->req[i].status,
                              (unsigned long long) m->req[i].count);
        strbuf_printf(out, "# HELP paddock_http_request_duration_seconds HTTP request latency by route.\n"
                          "# TYPE paddock_http_request_duration_seconds histogram\n");
        for (size_t i = 0; i < m->n_lat; i++)
                render_hist(out, "paddock_http_request_duration_seconds", "route", m->lat[i].name, &m->lat[i].h);
        strbuf_printf(out, "# HELP paddock_provision_phase_seconds Sandbox provisioning time by phase.\n"
                          "# TYPE paddock_provision_phase_seconds histogram\n");
        for (size_t i = 0; i < m->n_ph; i++)
                render_hist(out, "paddock_provision_phase_seconds", "phase", m->ph[i].name, &m->ph[i].h);
        strbuf_printf(out, "# HELP paddock_metrics_series_dropped_total Observations not counted because their series table was full.\n"
                          "# TYPE paddock_metrics_series_dropped_total counter\n"
                          "paddock_metrics_series_dropped_total %llu\n", (unsigned long long) m->dropped);
        pthread_mutex_unlock(&m->lock);

        strbuf_printf(out, "# HELP paddock_sandboxes Sandbox records by status.\n# TYPE paddock_sandboxes gauge\n");
        if (store_sandbox_count_by_status(c->store, counts) >= 0)
                for (int s = 0; s < _SB_STATUS_MAX; s++)
                        strbuf_printf(out, "paddock_sandboxes{status=\"%s\"} %lld\n", label_esc(sb_status_str((enum sb_status) s), e1),
                                      (long long) counts[s]);
        pthread_mutex_lock(&m->lock);
        size_t n = m->n_sources;
        void (*sources[ELEMENTSOF(m->sources)])(struct strbuf *);
        memcpy(sources, m->sources, sizeof(sources));
        pthread_mutex_unlock(&m->lock);
        for (size_t i = 0; i < n; i++)
                sources[i](out);
}
