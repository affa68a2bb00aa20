/* regtest.h — a container registry of a test's own (docker-registry on a loopback port), for
 * the cases the shared registry on 127.0.0.1:5000 cannot play: one that goes away, one that
 * wants a login. */
#pragma once

/* Starts docker-registry on 127.0.0.1:port (reg = "127.0.0.1:<port>"), its config and storage
 * under test_tmpdir(), deletes enabled; with htpasswd (a "user:bcrypt" line, see
 * regtest_htpasswd) it wants that login. Stopped when the test exits, or by regtest_stop.
 * Skips the test when the registry cannot start. One such registry per test. */
void regtest_start(int port, const char *htpasswd, char reg[32]);
void regtest_stop(void);

/* A "user:bcrypt(password)" htpasswd line (the caller frees); skips the test when it cannot
 * be made (python3 crypt). */
char *regtest_htpasswd(const char *user, const char *password);
