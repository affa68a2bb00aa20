/* secret.h — secrets (ours, Brimble API): named values an account stores for its sandboxes'
 * egress rules, write-only (no answer, log line or metric ever holds a value), sealed at rest
 * with AES-256-GCM under the operator's key ([secrets] key_file), bound to their account, name
 * and version, so a sealed value copied to another row does not open. */
#pragma once

#include <stddef.h>

#include "controld.h"
#include "pj_egress.h"
#include "pj_secret.h"

/* At start: reads [secrets] key_file (32..1024 bytes, its SHA-256 is the key). No file
 * configured: secrets are off (0, /secrets answers 501). A file that cannot be read or is too
 * short: -errno with err (controld does not start: a key given must be the one used). */
int secret_key_load(struct ctl *c, struct err *err);
/* A secret from a body proto-json checked (pj_secret_parse with its name): 0 with the new row
 * (version 1) in *ret, or -EOPNOTSUPP (no key here), -EEXIST (the account has the name),
 * -EDQUOT (it has [secrets] max_per_account), -EIO. */
int secret_create(struct ctl *c, const struct account *acc, const struct pj_secret_put *q, struct secret *ret,
                  struct err *err);
/* The account's secret ref (its name, or "sec_<id>" as E2B names them): 0, or -ENOENT. */
int secret_load(struct ctl *c, const struct account *acc, const char *ref, struct secret *ret);
/* A new value (version + 1; metadata kept when q has none) for the account's secret ref.
 * -ENOENT when there is none, -ESTALE when it changed meanwhile. */
int secret_put(struct ctl *c, const struct account *acc, const char *ref, const struct pj_secret_put *q,
               struct secret *ret, struct err *err);
/* -EBUSY while a live sandbox's egress rules name it (its node's proxy holds the value). */
int secret_delete(struct ctl *c, const struct account *acc, const char *ref, struct err *err);
/* Egress rules' placeholders (pj_egress.h): every ${secrets.<name>} must name a secret of
 * account_id. 0, or -EINVAL with err naming the field ("<prefix>.<host>.headers.<name>"),
 * -EOPNOTSUPP when a placeholder is used and secrets are off here. */
int secret_rules_check(struct ctl *c, const char *account_id, const struct pj_egress *e, const char *prefix,
                       struct err *err);
/* The value of one rule header with its placeholders replaced by the secrets' current values
 * (opened now: a rotated secret is used from the next apply on). NULL with err when a secret
 * is gone or does not open. The caller wipes and frees it. */
char *secret_rules_resolve(struct ctl *c, const char *account_id, const char *value, struct err *err);

/* Sealing, for tests: "v1:<nonce hex>:<ciphertext and tag hex>" of value under key, bound to aad. */
char *secret_seal(const unsigned char key[32], const char *aad, const char *value, size_t len);
int secret_open(const unsigned char key[32], const char *aad, const char *sealed, char **ret, size_t *ret_len);
