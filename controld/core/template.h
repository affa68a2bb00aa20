/* template.h — what creating a sandbox asks of templates (template.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* usertemplate.c: what sandbox create, the drivers and the start ask of templates users build. */
struct ctl;
/* 1..40 characters of a-z, 0-9 and '-', not starting or ending with '-'. */
bool template_name_ok(const char *s);
/* A server template's image size in MB: the config's size_mb, else what the driver's engine
 * holds (0 when neither knows). */
int64_t template_size_mb(struct ctl *c, const struct template *t);
/* The account's ready template name as a struct template (its strings point into *row, which
 * the caller clears after). -ENOENT: no such template of this account; -EBUSY: not ready. */
int template_user_for(struct ctl *c, const struct account *acc, const char *name, struct template *ret,
                      struct user_template *row);
/* At start: builds a stopped controld left are failed, their sandboxes destroyed. */
void utpl_recover(struct ctl *c);
/* sandbox.c: runs sb's template's `start` (if it has one) in the placed sandbox and waits for
 * it; 0 when it exited 0, else -EIO with why (its output's end) in err. */
int template_start(struct ctl *c, const struct sandbox *sb, struct err *err);
