/* storetest.h — fixtures for unit tests of controld's sqlite store (test-store, test-snapstore):
 * a store on a file in the test's temporary folder, and accounts in it. Each fails the
 * running test on error. */
#pragma once

#include "controld.h"

/* <test tmpdir>/<name>.db, in a static buffer. */
const char *storetest_path(const char *name);
/* Opens (creating) the store at storetest_path(name); close it with store_close(). */
struct store *storetest_open(const char *name);
void storetest_closep(struct store **s);
/* A new account called name on the "default" plan; its id in ret_id. */
void storetest_new_account(struct store *s, const char *name, char ret_id[SANDBOX_ID_LEN + 1]);

/* *sb cleared, then a starting sandbox of account_id called name, of the busybox template (its
 * image image) in region local, with a new id; the caller sets the rest and clears it with
 * sandbox_clear(). */
void storetest_sandbox(struct sandbox *sb, const char *account_id, const char *name, const char *image);

/* controld's config parsed from text (written to a temporary file and loaded as controld
 * would): the config, or NULL with *ret_r < 0 and the reason in err. */
struct config *storetest_config(const char *text, struct err *err, int *ret_r);
