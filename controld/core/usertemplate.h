/* usertemplate.h — templates users build (usertemplate.c): starting and deleting a build,
 * for the edge (edge/templates.c); what sandbox create asks of them is in controld.h. */
#pragma once

#include <stddef.h>

#include "controld.h"

/* Starts building the template a POST /templates body describes, for acc: 0 with the new
 * row (status "building") in *ret, the build running on a job thread; or -errno with the
 * reason in e: -EOPNOTSUPP no registry or builder here, -EINVAL the body (the field named),
 * -EUSERS too many builds at once, -EEXIST the name is the account's already, -EDQUOT the
 * account has its most, -EIO the store, -EAGAIN controld is stopping. */
int utpl_build_start(struct ctl *c, const struct account *acc, const char *body, size_t len, struct user_template *ret,
                     struct err *e);
/* Deletes the account's template name: its row (a build in flight stops at its next step),
 * its image in the registry and the engine's copy. -ENOENT when there is none. */
int utpl_delete_named(struct ctl *c, const char *account_id, const char *name, struct err *e);
