/* pj_fields.h — the field-path helpers every public-API body parser shares (pj_api*.c for the
 * Brimble API, pj_e2b.c for E2B's): member access over a pj_json tree that names the
 * culprit ("network.allowOut[2]") in each error. Each returns 0 when the member is absent,
 * 1 when present and valid, -EINVAL with err filled otherwise. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pj.h"
#include "pj_json.h"

#define PJ_PATH_MAX 128

/* Untrusted bytes for a message: printable ASCII as is (quotes escaped), the rest \xNN, at
 * most max_in input bytes then "...". */
const char *pj_sanitize(char *buf, size_t size, const char *s, size_t n, size_t max_in);
/* "prefix.key" (or "key") / "prefix[i]" into buf. */
const char *pj_mkpath(char buf[static PJ_PATH_MAX], const char *prefix, const char *key);
const char *pj_mkindex(char buf[static PJ_PATH_MAX], const char *prefix, size_t i);
/* Members not in allowed[] (at most 64) or given twice are refused, with a "did you mean". */
int pj_check_fields(const struct pj_json *obj, const char *prefix, const char *const *allowed, size_t n_allowed,
                    struct err *err);
/* A request body that is one JSON object (pj_json_parse_object: empty_ok reads an empty one
 * as {}) whose members are all in allowed[] (pj_check_fields): 0 with *ret the caller's, or
 * -EINVAL with err filled and *ret untouched. */
int pj_parse_body(const char *body, size_t len, bool empty_ok, const char *const *allowed, size_t n_allowed,
                  struct pj_json **ret, struct err *err);
/* A string member without NUL. */
int pj_get_str(const struct pj_json *obj, const char *prefix, const char *key, const struct pj_json **ret,
               struct err *err);
/* A strict integer literal (no fraction or exponent) within +-10^18. */
bool pj_number_to_int(const struct pj_json *v, int64_t *ret);
int pj_get_int(const struct pj_json *obj, const char *prefix, const char *key, int min, int max, bool *ret_has, int *ret,
               struct err *err);
int pj_get_bool(const struct pj_json *obj, const char *prefix, const char *key, bool *ret_has, bool *ret,
                struct err *err);
/* An object of strings (the member obj, at field): at most max entries; keys checked by env
 * rules ([A-Za-z_][A-Za-z0-9_]*, at most 256) when env, else as 1..max_key bytes, never NUL;
 * values up to max_value bytes without NUL. Into canonical JSON text (*ret_json, when given)
 * and, when ret_keys is given, parallel NULL-terminated arrays (*ret_keys, *ret_values,
 * *ret_n). 0 or -EINVAL with err filled. */
int pj_string_map(const struct pj_json *obj, const char *field, bool env, size_t max, size_t max_key, size_t max_value,
                  char **ret_json, char ***ret_keys, char ***ret_values, size_t *ret_n, struct err *err);
