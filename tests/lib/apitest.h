/* apitest.h — what the test-controld-api-* programs share: the envelope and error-body
 * checks of the public API, small cJSON getters, and the sandbox requests most tests make.
 * Any failed check fails the test (test_fail); nothing here returns an error. */
#pragma once

#include <stdbool.h>

#include <cjson/cJSON.h>

#include "ctltest.h"

/* Region ids of the test config (ctltest.c); UNKNOWN_HEX is a well-formed id nothing has. */
#define LOCAL_REGION "6a06df21cc6bef51342e199e"
#define FAR_REGION "6a06df21cc6bef51342e1999"
#define CLOSED_REGION "6a06df21cc6bef51342e1998"
#define UNKNOWN_HEX "0123456789abcdef01234567"

/* o[k], the envelope's data, a string member (NULL when absent or not a string) and a number
 * member (-999999 when absent or not a number). */
const cJSON *jget(const cJSON *o, const char *k);
const cJSON *data_of(const struct hres *r);
const char *jstr(const cJSON *o, const char *k);
long long jint(const cJSON *o, const char *k);

/* NULL when r is exactly {"message": msg} (msg a prefix when prefix) with this status, JSON and
 * a request id; else a description of what is wrong (static buffer). */
const char *error_mismatch(const struct hres *r, long status, const char *msg, bool prefix);
void expect_error_at(const char *file, int line, struct ctld *c, const char *method, const char *path,
                     const char *key, const char *body, long status, const char *msg);
void assert_envelope(const struct hres *r, long status, const char *msg, const char *file, int line);

#define ASSERT_ERROR(r, st, msg)                                                                           \
        do {                                                                                               \
                const char *_w = error_mismatch((r), (st), (msg), false);                                  \
                if (_w)                                                                                    \
                        test_fail(__FILE__, __LINE__, "%s", _w);                                           \
        } while (0)
#define ASSERT_ERROR_PREFIX(r, st, msg)                                                                    \
        do {                                                                                               \
                const char *_w = error_mismatch((r), (st), (msg), true);                                   \
                if (_w)                                                                                    \
                        test_fail(__FILE__, __LINE__, "%s", _w);                                           \
        } while (0)
#define EXPECT_ERROR(c, method, path, key, body, st, msg) \
        expect_error_at(__FILE__, __LINE__, c, method, path, key, body, st, msg)
#define ASSERT_ENVELOPE(r, st, msg) assert_envelope((r), (st), (msg), __FILE__, __LINE__)

/* data.totalCount of a GET list (sandboxes or volumes), checked as an envelope. */
long long total_count(struct ctld *c, const char *key, const char *path);
/* `docker ps -a -q` of the account's containers (caller frees). */
char *account_containers(const char *acc);
/* GET /sandboxes/<id>, which must answer "Sandbox fetched"; r is the caller's (hres_done). */
void get_sandbox(struct ctld *c, const char *key, const char *id, struct hres *r);
/* method /sandboxes/<id><suffix> with no body; r is the caller's (hres_done). */
void op(struct ctld *c, const char *key, const char *method, const char *id, const char *suffix, struct hres *r);
/* GET /sandboxes/<id><suffix>, which must answer 200: a copy of member `member` of its data
 * (NULL when there is none; the caller deletes it). */
cJSON *sandbox_data_member(struct ctld *c, const char *key, const char *id, const char *suffix, const char *member);
