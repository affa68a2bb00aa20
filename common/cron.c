/* cron.c — 5-field cron expressions and their next fire time (contract in cron.h). */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cron.h"

const char *const cron_field_names[5] = { "minute", "hour", "day-of-month", "month", "day-of-week" };
static const struct {
        int min, max;
} limits[5] = { { 0, 59 }, { 0, 23 }, { 1, 31 }, { 1, 12 }, { 0, 7 } };

/* At most two decimal digits at s[*i] (a third one makes it wrong); -1 when there are
 * none or too many. */
static int read_number(const char *s, size_t n, size_t *i) {
        int v = 0, d = 0;
        while (*i < n && s[*i] >= '0' && s[*i] <= '9' && d < 3) {
                v = v * 10 + (s[*i] - '0');
                (*i)++;
                d++;
        }
        return d == 0 || d > 2 ? -1 : v;
}

/* One field into a bit set; NULL on success, else what is wrong (in why when it quotes
 * numbers). */
static const char *field_parse(const char *s, size_t n, int min, int max, uint64_t *ret, bool *ret_star, char *why,
                               size_t why_len) {
        uint64_t bits = 0;
        size_t i = 0;
        *ret_star = n > 0 && s[0] == '*';
        if (n == 0)
                return "empty field";
        for (;;) {
                int a = min, b = max, step = 1;
                bool range = false;
                if (i < n && s[i] == '*') {
                        range = true;
                        i++;
                } else {
                        for (int k = 0; k < 2; k++) {
                                int v = read_number(s, n, &i);
                                if (v < 0)
                                        return "expected a number, '*' or a range";
                                if (v < min || v > max) {
                                        snprintf(why, why_len, "value %d is outside %d-%d", v, min, max);
                                        return why;
                                }
                                if (k == 1) {
                                        b = v;
                                        break;
                                }
                                a = b = v;
                                if (i < n && s[i] == '-') {
                                        range = true;
                                        i++;
                                } else
                                        break;
                        }
                        if (a > b) {
                                snprintf(why, why_len, "range %d-%d is backwards", a, b);
                                return why;
                        }
                }
                if (i < n && s[i] == '/') {
                        if (!range)
                                return "a step needs '*' or a range before '/'";
                        i++;
                        step = read_number(s, n, &i);
                        if (step < 1 || step > max - min + 1)
                                return "the step after '/' must be a number within the field's range";
                }
                for (int v = a; v <= b; v += step)
                        bits |= UINT64_C(1) << v;
                if (i == n)
                        break;
                if (s[i] != ',')
                        return "unexpected character";
                i++;
        }
        *ret = bits;
        return NULL;
}

int cron_parse_detail(const char *expr, struct cron *ret, struct cron_error *ret_err) {
        struct cron_error e = { .field = -1 };
        struct cron c = { 0 };
        uint64_t bits[5];
        bool star[5];
        const char *p = expr;
        int k = 0;
        if (!expr) {
                e.why = "no expression";
                goto fail;
        }
        for (;;) {
                while (*p == ' ' || *p == '\t')
                        p++;
                if (!*p)
                        break;
                if (k == 5) {
                        e.why = "more than 5 fields";
                        goto fail;
                }
                size_t n = strcspn(p, " \t");
                e.why = field_parse(p, n, limits[k].min, limits[k].max, &bits[k], &star[k], e.buf, sizeof(e.buf));
                if (e.why) {
                        e.field = k;
                        goto fail;
                }
                p += n;
                k++;
        }
        if (k != 5) {
                e.why = "fewer than 5 fields";
                goto fail;
        }
        c.minute = bits[0];
        c.hour = (uint32_t) bits[1];
        c.dom = (uint32_t) bits[2];
        c.month = (uint16_t) bits[3];
        c.dow = (uint8_t) ((bits[4] | (bits[4] >> 7)) & 0x7f);
        c.dom_star = star[2];
        c.dow_star = star[4];
        *ret = c;
        return 0;
fail:
        if (ret_err) {
                *ret_err = e;
                if (e.why == e.buf) /* the copy's own buffer */
                        ret_err->why = ret_err->buf;
        }
        return -EINVAL;
}

int cron_parse(const char *expr, struct cron *ret, const char **ret_why) {
        static const char *const bad[5] = { "bad minute field", "bad hour field", "bad day-of-month field",
                                            "bad month field", "bad day-of-week field" };
        struct cron_error e;
        int r = cron_parse_detail(expr, ret, &e);
        if (r < 0 && ret_why)
                *ret_why = e.field >= 0 ? bad[e.field] : e.why;
        return r;
}

static bool day_matches(const struct cron *c, const struct tm *t) {
        bool dom = c->dom & (UINT32_C(1) << t->tm_mday), dow = c->dow & (1u << t->tm_wday);
        if (c->dom_star || c->dow_star)
                return (c->dom_star || dom) && (c->dow_star || dow);
        return dom || dow;
}

int64_t cron_next(const struct cron *c, int64_t after) {
        /* Whole days, hours and minutes are skipped where they cannot match: at most
         * ~5*366 days + 24 hours + 60 minutes of steps per match. */
        time_t t = (time_t) ((after / 60 + 1) * 60);
        time_t limit = t + (time_t) 5 * 366 * 86400;
        struct tm tm;
        while (t <= limit) {
                gmtime_r(&t, &tm);
                if (!(c->month & (1u << (tm.tm_mon + 1))) || !day_matches(c, &tm)) {
                        t += (time_t) (86400 - tm.tm_hour * 3600 - tm.tm_min * 60);   /* next midnight */
                        continue;
                }
                if (!(c->hour & (UINT32_C(1) << tm.tm_hour))) {
                        t += (time_t) (3600 - tm.tm_min * 60);
                        continue;
                }
                if (!(c->minute & (UINT64_C(1) << tm.tm_min))) {
                        t += 60;
                        continue;
                }
                return (int64_t) t;
        }
        return -1;
}
