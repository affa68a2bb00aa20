/* cron.h — 5-field cron expressions (minute hour day-of-month month day-of-week) and
 * their next fire time, in UTC.
 *
 * Fields take numbers, '*', ranges "a-b", steps "*" "/n" and "a-b/n", and comma lists;
 * day-of-week 0 and 7 are Sunday. As in Vixie cron, when both day-of-month and
 * day-of-week are restricted (neither starts with '*'), a day matches if EITHER does.
 * No names (JAN, MON) and no macros (@daily). Library-like: no logging, no allocation.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct cron {
        uint64_t minute;        /* bit m: 0..59 */
        uint32_t hour;          /* bit h: 0..23 */
        uint32_t dom;           /* bit d: 1..31 */
        uint16_t month;         /* bit m: 1..12 */
        uint8_t dow;            /* bit d: 0..6 (7 folded into 0) */
        bool dom_star, dow_star;
};

/* Parses expr. 0 and *ret filled, or -EINVAL with *ret_why (static text, optional) saying
 * which field is wrong ("bad hour field", "fewer than 5 fields"); *ret untouched on failure. */
int cron_parse(const char *expr, struct cron *ret, const char **ret_why);

/* The field names in order, for messages: "minute" ... "day-of-week". */
extern const char *const cron_field_names[5];

/* Why an expression was refused, in words a user can act on. */
struct cron_error {
        int field;              /* 0..4: the field at fault (cron_field_names); -1: the field count */
        const char *why;        /* "value 60 is outside 0-59", "more than 5 fields"; may point into buf */
        char buf[64];
};

/* cron_parse() with the detail: on -EINVAL *ret_err (optional) says which field is wrong and
 * why. The API edge (proto-json) validates with this, so both accept the same grammar. */
int cron_parse_detail(const char *expr, struct cron *ret, struct cron_error *ret_err);

/* The first fire time strictly after `after` (Unix seconds, UTC), at second 0 of a minute.
 * -1 when nothing matches within 5 years (e.g. "0 0 31 2 *"). */
int64_t cron_next(const struct cron *c, int64_t after);
