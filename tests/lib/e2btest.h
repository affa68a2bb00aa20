/* e2btest.h — a controld with its E2B listener, and raw HTTP calls on that listener as E2B's
 * clients make them (the API with X-API-Key, envd's Connect calls with the sandbox's token).
 * Every answer is the whole raw response (status line, headers, body), freed by the caller;
 * test_raw_status() and test_raw_body() read it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ctltest.h"

struct e2b {
        struct ctld c;
        int port;              /* the E2B listener */
        char *key, *key_bob;   /* E2B keys of accounts alice and bob (e2btest_keys) */
};

/* A new account `name` and an E2B key of it, newline stripped (the caller frees it). */
char *e2btest_key(struct ctld *c, const char *name);
/* Keys for alice and bob into e->key and e->key_bob, freed when the test exits; after
 * ctld_start on e->c. */
void e2btest_keys(struct e2b *e);

/* A request with a body (ctype, when given, its Content-Type) and extra header lines
 * ("K: V\r\n..."). */
char *e2btest_req(struct e2b *e, const char *method, const char *path, const char *headers, const char *ctype,
                  const void *body, size_t len);
/* A call of E2B's API as key (none when NULL), with a JSON body when json is given. */
char *e2btest_api(struct e2b *e, const char *method, const char *path, const char *key, const char *json);
/* A Connect call to envd of sandbox id: unary (application/json) or a stream (msg in one
 * envelope); more: extra header lines or NULL. */
char *e2btest_envd(struct e2b *e, const char *id, const char *token, const char *method, bool stream, const void *msg,
                   size_t len, const char *more);
/* msg in one Connect envelope (flags 0, length big-endian): len + 5 bytes, the caller frees. */
uint8_t *e2btest_envelope(const void *msg, size_t len);
/* GET path of port `port` of sandbox id, routed by Host (<port>-<id>.localhost); headers: extra
 * header lines or NULL. */
char *e2btest_host_get(struct e2b *e, int port, const char *id, const char *path, const char *headers);
/* POST /sandboxes as key with body: fails the test unless 201; the new id and envd token; the
 * envd version reported stays the newest whose features are all served (0.5.7). */
void e2btest_create(struct e2b *e, const char *key, const char *body, char id[25], char token[65]);

/* Runs the Node script `script` (a session of E2B's SDK, stderr folded into stdout) with
 * E2B_API_KEY e->key and E2B_API_URL and E2B_SANDBOX_URL url, and copies its output to stderr:
 * its exit status, its output in *ret_out (the caller frees). */
int e2btest_sdk(struct e2b *e, const char *url, const char *script, char **ret_out);

void e2btest_expect(const char *file, int line, char *resp, long status, const char *needle);
/* Fails unless resp (an answer above, freed here) has status and its body contains needle. */
#define E2B_EXPECT(resp, status, needle) e2btest_expect(__FILE__, __LINE__, (resp), (status), (needle))
