/* Unit tests for common/err.c: the one error carrier. */
#include <errno.h>
#include <string.h>

#include "err.h"
#include "pj.h"
#include "testlib.h"

TEST(set_returns_the_code_and_fills_message_and_an_empty_field) {
        struct err e = { 0 };
        snprintf(e.field, sizeof(e.field), "left over");
        ASSERT_EQ(err_set(&e, -EBUSY, "Sandbox is %s", "pausing"), -EBUSY);
        ASSERT_STREQ(e.message, "Sandbox is pausing");
        ASSERT_STREQ(e.field, "");
}

TEST(null_carrier_only_returns_the_code) {
        ASSERT_EQ(err_set(NULL, -ENOENT, "not %s", "found"), -ENOENT);
        ASSERT_EQ(err_set_field(NULL, -EINVAL, "a.b", "bad"), -EINVAL);
        ASSERT_EQ(pj_error_set(NULL, "a.b", "bad"), -EINVAL);
        err_clear(NULL);
}

TEST(field_and_parsers_short_form) {
        struct err e = { 0 };
        ASSERT_EQ(err_set_field(&e, -EINVAL, "specs.memory", "%s must be at most %d", "specs.memory", 8192), -EINVAL);
        ASSERT_STREQ(e.field, "specs.memory");
        ASSERT_STREQ(e.message, "specs.memory must be at most 8192");
        ASSERT_EQ(pj_error_set(&e, NULL, "the body is not JSON"), -EINVAL);
        ASSERT_STREQ(e.field, "");
        ASSERT_STREQ(e.message, "the body is not JSON");
        err_clear(&e);
        ASSERT_STREQ(e.field, "");
        ASSERT_STREQ(e.message, "");
}

TEST(long_text_is_cut_to_fit) {
        struct err e = { 0 };
        char big[2000];
        memset(big, 'x', sizeof(big) - 1);
        big[sizeof(big) - 1] = 0;
        ASSERT_EQ(err_set_field(&e, -E2BIG, big, "%s", big), -E2BIG);
        ASSERT_EQ(strlen(e.message), sizeof(e.message) - 1);
        ASSERT_EQ(strlen(e.field), sizeof(e.field) - 1);
}

TEST(an_inner_message_can_be_wrapped_in_place) {
        struct err e = { 0 };
        err_set_field(&e, -EINVAL, "allow[2]", "is not a hostname");
        ASSERT_EQ(err_set(&e, -EHOSTUNREACH, "Egress policy could not be enforced: %s", e.message), -EHOSTUNREACH);
        ASSERT_STREQ(e.message, "Egress policy could not be enforced: is not a hostname");
        ASSERT_STREQ(e.field, "");
}

TEST(errno_is_kept_for_percent_m) {
        struct err e = { 0 };
        errno = ENOENT;
        err_set(&e, -ENOENT, "open: %m");
        ASSERT_STREQ(e.message, "open: No such file or directory");
        ASSERT_EQ(errno, ENOENT);
}
