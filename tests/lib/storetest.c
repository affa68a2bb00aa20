/* storetest.c — see storetest.h. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "storetest.h"
#include "strutil.h"
#include "testlib.h"

const char *storetest_path(const char *name) {
        static char buf[512];
        snprintf(buf, sizeof(buf), "%s/%s.db", test_tmpdir(), name);
        return buf;
}

struct store *storetest_open(const char *name) {
        struct store *s = NULL;
        int r = store_open(storetest_path(name), &s);
        if (r < 0)
                test_fail(__FILE__, __LINE__, "store_open(%s): %s", name, strerror(-r));
        return s;
}

void storetest_closep(struct store **s) {
        store_close(*s);
}

void storetest_new_account(struct store *s, const char *name, char ret_id[SANDBOX_ID_LEN + 1]) {
        struct account a = { 0 };
        ASSERT_OK(store_account_create(s, name, "default", &a));
        memcpy(ret_id, a.id, SANDBOX_ID_LEN + 1);
        account_clear(&a);
}

struct config *storetest_config(const char *text, struct err *err, int *ret_r) {
        char path[] = "/tmp/paddock-test-conf.XXXXXX";
        int fd = mkstemp(path);
        if (fd < 0)
                test_fail(__FILE__, __LINE__, "mkstemp: %m");
        if (write(fd, text, strlen(text)) != (ssize_t) strlen(text))
                test_fail(__FILE__, __LINE__, "write: %m");
        close(fd);
        struct config *c = NULL;
        *ret_r = config_load(path, &c, err);
        unlink(path);
        return c;
}

void storetest_sandbox(struct sandbox *sb, const char *account_id, const char *name, const char *image) {
        memset(sb, 0, sizeof(*sb));
        hexid_new(sb->id);
        snprintf(sb->account_id, sizeof(sb->account_id), "%s", account_id);
        sb->name = xstrdup(name);
        sb->template_name = xstrdup("busybox");
        sb->image = xstrdup(image);
        sb->status = SB_STARTING;
        sb->region_key = xstrdup("local");
}
