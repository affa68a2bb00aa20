/* Unit tests for common/cron.c: parsing and next fire times (UTC). */
#include <errno.h>
#include <stdlib.h>

#include "cron.h"
#include "testlib.h"

/* 2026-12-02 23:52:28 UTC, a Wednesday. */
#define T0 INT64_C(1796255548)

static int64_t next_of(const char *expr, int64_t after) {
        struct cron c;
        ASSERT_EQ(cron_parse(expr, &c, NULL), 0);
        return cron_next(&c, after);
}

TEST(every_minute_is_the_next_whole_minute) {
        ASSERT_EQ(next_of("* * * * *", T0), T0 - 28 + 60);
        /* strictly after: a time on a minute boundary goes to the next one */
        ASSERT_EQ(next_of("* * * * *", T0 - 28), T0 - 28 + 60);
}

TEST(steps_ranges_lists) {
        /* 23:52:28 -> */
        ASSERT_EQ(next_of("*/5 * * * *", T0), T0 - 28 - 52 * 60 + 55 * 60);
        ASSERT_EQ(next_of("0 */2 * * *", T0), T0 - 28 - 52 * 60 - 23 * 3600 + 86400);   /* 00:00 Thursday */
        ASSERT_EQ(next_of("10-20/5,53 23 * * *", T0), T0 - 28 + 60);                    /* 23:53 */
        ASSERT_EQ(next_of("10-20/5 23 * * *", T0), T0 - 28 - 42 * 60 + 86400);           /* 23:10 tomorrow */
}

TEST(day_of_month_or_day_of_week) {
        int64_t midnight_thu = T0 - 28 - 52 * 60 - 23 * 3600 + 86400;   /* 2026-12-03 00:00, Thursday */
        /* Sunday (0 and 7 alike): 2026-12-06 */
        ASSERT_EQ(next_of("0 0 * * 0", T0), midnight_thu + 3 * 86400);
        ASSERT_EQ(next_of("0 0 * * 7", T0), midnight_thu + 3 * 86400);
        /* both restricted: the 25th OR a Friday -> Friday the 4th */
        ASSERT_EQ(next_of("0 0 25 * 5", T0), midnight_thu + 86400);
        /* only day-of-month: the 25th */
        ASSERT_EQ(next_of("0 0 25 * *", T0), midnight_thu + 22 * 86400);
        /* January 1st across the year */
        ASSERT_EQ(next_of("0 0 1 1 *", T0), midnight_thu + 29 * 86400);
}

TEST(never_matching_gives_minus_one) {
        ASSERT_EQ(next_of("0 0 31 2 *", T0), -1);
        ASSERT_EQ(next_of("0 0 30 2 *", T0), -1);
}

TEST(refusals_name_the_field) {
        static const struct { const char *expr, *why; } cases[] = {
                { "", "fewer than 5 fields" },
                { "* * * *", "fewer than 5 fields" },
                { "* * * * * *", "more than 5 fields" },
                { "60 * * * *", "bad minute field" },
                { "* 24 * * *", "bad hour field" },
                { "* * 0 * *", "bad day-of-month field" },
                { "* * * 13 *", "bad month field" },
                { "* * * * 8", "bad day-of-week field" },
                { "5/2 * * * *", "bad minute field" },
                { "*/0 * * * *", "bad minute field" },
                { "20-10 * * * *", "bad minute field" },
                { "1,,2 * * * *", "bad minute field" },
                { "MON * * * *", "bad minute field" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct cron c = { .minute = 42 };
                const char *why = NULL;
                ASSERT_EQ(cron_parse(cases[i].expr, &c, &why), -EINVAL);
                ASSERT_STREQ(why, cases[i].why);
                ASSERT_EQ(c.minute, 42u);   /* untouched */
        }
}


TEST(detail_names_the_field_and_the_reason) {
        static const struct { const char *expr; int field; const char *why; } cases[] = {
                { "* * * *", -1, "fewer than 5 fields" },
                { "* * * * * *", -1, "more than 5 fields" },
                { "60 * * * *", 0, "value 60 is outside 0-59" },
                { "* * 0 * *", 2, "value 0 is outside 1-31" },
                { "5-1 * * * *", 0, "range 5-1 is backwards" },
                { "* 5/2 * * *", 1, "a step needs '*' or a range before '/'" },
                { "* * * */13 *", 3, "the step after '/' must be a number within the field's range" },
                { "* * * * 1,", 4, "expected a number, '*' or a range" },
                { "* * * * 1x", 4, "unexpected character" },
        };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                struct cron c;
                struct cron_error e;
                ASSERT_EQ(cron_parse_detail(cases[i].expr, &c, &e), -EINVAL);
                ASSERT_EQ(e.field, cases[i].field);
                ASSERT_STREQ(e.why, cases[i].why);
        }
        ASSERT_STREQ(cron_field_names[2], "day-of-month");
}
