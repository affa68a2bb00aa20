/* cron.c — 5-field cron expressions and their next fire time (contract in cron.h). */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "cron.h"

/* One field into a bit set; NULL on success, else what is wrong. */
static const char *field_parse(const char *s, size_t n, int min, int max, uint64_t *ret, bool *ret_star) {
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
                                int v = 0, d = 0;
                                while (i < n && s[i] >= '0' && s[i] <= '9' && d < 3) {
                                        v = v * 10 + (s[i] - '0');
                                        i++;
                                        d++;
                                }
                                if (d == 0 || d > 2)
                                        return "expected a number, '*' or a range";
                                if (v < min || v > max)
                                        return "value out of range";
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
                        if (a > b)
                                return "backwards range";
                }
                if (i < n && s[i] == '/') {
                        if (!range)
                                return "a step needs '*' or a range before '/'";
                        i++;
                        int v = 0, d = 0;
                        while (i < n && s[i] >= '0' && s[i] <= '9' && d < 3) {
                                v = v * 10 + (s[i] - '0');
                                i++;
                                d++;
                        }
                        if (d == 0 || d > 2 || v < 1 || v > max - min + 1)
                                return "bad step";
                        step = v;
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

int cron_parse(const char *expr, struct cron *ret, const char **ret_why) {
        static const struct {
                const char *name;
                int min, max;
        } f[5] = { { "minute", 0, 59 }, { "hour", 0, 23 }, { "day-of-month", 1, 31 }, { "month", 1, 12 }, { "day-of-week", 0, 7 } };
        static const char *const bad[5] = { "bad minute field", "bad hour field", "bad day-of-month field",
                                            "bad month field", "bad day-of-week field" };
        struct cron c = { 0 };
        uint64_t bits[5];
        bool star[5];
        const char *p = expr;
        int k = 0;
        if (!expr) {
                if (ret_why)
                        *ret_why = "no expression";
                return -EINVAL;
        }
        for (;;) {
                while (*p == ' ' || *p == '\t')
                        p++;
                if (!*p)
                        break;
                if (k == 5) {
                        if (ret_why)
                                *ret_why = "more than 5 fields";
                        return -EINVAL;
                }
                size_t n = strcspn(p, " \t");
                if (field_parse(p, n, f[k].min, f[k].max, &bits[k], &star[k])) {
                        if (ret_why)
                                *ret_why = bad[k];
                        return -EINVAL;
                }
                p += n;
                k++;
        }
        if (k != 5) {
                if (ret_why)
                        *ret_why = "fewer than 5 fields";
                return -EINVAL;
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
