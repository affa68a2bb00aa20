/* pj_secret.h — the bodies of /secrets (ours): a secret's name, its value (write-only: never
 * in an answer) and optional metadata, each checked with its limit and named when refused. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "pj.h"

#define PJ_SECRET_NAME_MAX 128
#define PJ_SECRET_META_MAX 32          /* metadata entries */
#define PJ_SECRET_META_KEY_MAX 128
#define PJ_SECRET_META_VALUE_MAX 1024

struct pj_secret_put {
        char *name;                     /* POST only; NULL on a PUT (the name is the path's) */
        char *value;                    /* 1..max_value bytes, no NUL */
        size_t value_len;
        char *metadata_json;            /* canonical JSON object of strings; NULL: none given */
        bool has_metadata;
};

/* 1..PJ_SECRET_NAME_MAX of A-Z a-z 0-9 _ - (E2B's rule; it goes into a placeholder,
 * ${secrets.<name>}, and into a URL path), not starting with "sec_" (E2B's ids). */
bool pj_secret_name_ok(const char *s);
/* POST /secrets {name, value, metadata?} (with_name) or PUT /secrets/{name} {value, metadata?}:
 * 0, or -EINVAL with err naming the field (a value over max_value bytes says its limit). */
int pj_secret_parse(const char *body, size_t len, bool with_name, size_t max_value, struct pj_secret_put *ret,
                    struct err *err);
/* Frees the members, wiping the value first. */
void pj_secret_put_done(struct pj_secret_put *p);
