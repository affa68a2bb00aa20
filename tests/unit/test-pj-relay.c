/* Unit tests for proto-json/pj_relay: the relay handshake binds the deployment secret, the
 * relay's challenge and the sandbox id; a hello made for another challenge, id or secret is
 * refused; secret files are bounded. The client side against a relay is in
 * tests/integration/test-relay.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "pj_relay.h"
#include "strutil.h"
#include "testlib.h"

#define SECRET "0123456789abcdef0123456789abcdef"
#define ID "0123456789abcdef01234567"

/* A new challenge each run (a NUL or any other byte may be in it), from a printed seed so a
 * challenge that fails can be had again. */
static void greeting(uint8_t g[PJ_RELAY_GREETING_LEN]) {
        static unsigned seed;
        static bool seeded;
        if (!seeded) {
                seed = test_seed((unsigned) time(NULL));
                seeded = true;
        }
        memcpy(g, PJ_RELAY_MAGIC, PJ_RELAY_MAGIC_LEN);
        for (size_t i = 0; i < PJ_RELAY_CHALLENGE_LEN; i++)
                g[PJ_RELAY_MAGIC_LEN + i] = (uint8_t) rand_r(&seed);
}

TEST(a_hello_checks_out_for_its_challenge_and_id_only) {
        uint8_t g[PJ_RELAY_GREETING_LEN], hello[PJ_RELAY_HELLO_LEN];
        char id[PJ_RELAY_ID_LEN + 1];
        greeting(g);
        ASSERT_OK(pj_relay_hello(SECRET, strlen(SECRET), g, ID, hello));
        ASSERT_OK(pj_relay_check(SECRET, strlen(SECRET), g + PJ_RELAY_MAGIC_LEN, hello, id));
        ASSERT_STREQ(id, ID);
        /* another secret */
        ASSERT_EQ(pj_relay_check("another secret of enough length", 31, g + PJ_RELAY_MAGIC_LEN, hello, id), -EACCES);
        /* another challenge: a recorded hello does not replay */
        uint8_t g2[PJ_RELAY_GREETING_LEN];
        greeting(g2);
        ASSERT_EQ(pj_relay_check(SECRET, strlen(SECRET), g2 + PJ_RELAY_MAGIC_LEN, hello, id), -EACCES);
        /* the id swapped for another sandbox's, the MAC kept */
        uint8_t other[PJ_RELAY_HELLO_LEN];
        memcpy(other, hello, sizeof(other));
        other[0] = other[0] == 'a' ? 'b' : 'a';
        ASSERT_EQ(pj_relay_check(SECRET, strlen(SECRET), g + PJ_RELAY_MAGIC_LEN, other, id), -EACCES);
        /* one bit of the MAC */
        memcpy(other, hello, sizeof(other));
        other[PJ_RELAY_HELLO_LEN - 1] ^= 1;
        ASSERT_EQ(pj_relay_check(SECRET, strlen(SECRET), g + PJ_RELAY_MAGIC_LEN, other, id), -EACCES);
}

TEST(malformed_ids_and_greetings_are_refused) {
        uint8_t g[PJ_RELAY_GREETING_LEN], hello[PJ_RELAY_HELLO_LEN];
        char id[PJ_RELAY_ID_LEN + 1];
        greeting(g);
        ASSERT_EQ(pj_relay_hello(SECRET, strlen(SECRET), g, "0123456789ABCDEF01234567", hello), -EINVAL);
        ASSERT_EQ(pj_relay_hello(SECRET, strlen(SECRET), g, "0123", hello), -EINVAL);
        ASSERT_EQ(pj_relay_hello(SECRET, strlen(SECRET), g, NULL, hello), -EINVAL);
        g[0] = 'X';
        ASSERT_EQ(pj_relay_hello(SECRET, strlen(SECRET), g, ID, hello), -EPROTO);
        /* an id with a NUL, upper case or a slash in it never reaches a path */
        memset(hello, 0, sizeof(hello));
        ASSERT_EQ(pj_relay_check(SECRET, strlen(SECRET), g + PJ_RELAY_MAGIC_LEN, hello, id), -EPROTO);
        memcpy(hello, "../../../../etc/passwd00", PJ_RELAY_ID_LEN);
        ASSERT_EQ(pj_relay_check(SECRET, strlen(SECRET), g + PJ_RELAY_MAGIC_LEN, hello, id), -EPROTO);
}

static int load(const char *text, size_t len, char **ret, size_t *ret_len) {
        char path[300];
        snprintf(path, sizeof(path), "%s/secret", test_tmpdir());
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ASSERT_TRUE(fd >= 0);
        ASSERT_EQ(write(fd, text, len), (ssize_t) len);
        close(fd);
        return pj_relay_secret_load(path, ret, ret_len);
}

TEST(secret_files_are_bounded) {
        _cleanup_free_ char *s = NULL;
        size_t n = 0;
        ASSERT_OK(load(SECRET "\n", strlen(SECRET) + 1, &s, &n));
        ASSERT_STREQ(s, SECRET);
        ASSERT_EQ(n, strlen(SECRET));
        char *t = NULL;
        ASSERT_EQ(load("short\n", 6, &t, &n), -EINVAL);
        ASSERT_EQ(load("0123456789\0abcdef0123", 21, &t, &n), -EINVAL);
        char big[PJ_RELAY_SECRET_MAX + 10];
        memset(big, 'x', sizeof(big));
        ASSERT_EQ(load(big, sizeof(big), &t, &n), -EINVAL);
        ASSERT_OK(load(big, PJ_RELAY_SECRET_MAX, &t, &n));
        ASSERT_EQ(n, PJ_RELAY_SECRET_MAX);
        free(t);
        ASSERT_EQ(pj_relay_secret_load("/nonexistent/secret", &t, &n), -ENOENT);
}

/* The client handshake against a scripted relay on a socketpair. */
TEST(client_handshake_reads_status_busy_and_garbage) {
        int sv[2];
        uint8_t g[PJ_RELAY_GREETING_LEN], hello[PJ_RELAY_HELLO_LEN];
        char id[PJ_RELAY_ID_LEN + 1];
        /* the good path: greeting, hello checked, status 0 */
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        greeting(g);
        ASSERT_EQ(write(sv[1], g, sizeof(g)), (ssize_t) sizeof(g));
        ASSERT_EQ(write(sv[1], "\0\0\0\0", 4), 4);
        ASSERT_OK(pj_relay_client_handshake(sv[0], SECRET, strlen(SECRET), ID, mono_ms() + 2000));
        ASSERT_EQ(read(sv[1], hello, sizeof(hello)), (ssize_t) sizeof(hello));
        ASSERT_OK(pj_relay_check(SECRET, strlen(SECRET), g + PJ_RELAY_MAGIC_LEN, hello, id));
        close(sv[0]);
        close(sv[1]);
        /* a relay at its limit: only the status EBUSY, then EOF */
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        ASSERT_EQ(write(sv[1], "\0\0\0\x10", 4), 4);
        close(sv[1]);
        ASSERT_EQ(pj_relay_client_handshake(sv[0], SECRET, strlen(SECRET), ID, mono_ms() + 2000), -EBUSY);
        close(sv[0]);
        /* something that is not a relay */
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        ASSERT_EQ(write(sv[1], "HTTP/1.1 400 Bad Request\r\n\r\n", 28), 28);
        close(sv[1]);
        ASSERT_EQ(pj_relay_client_handshake(sv[0], SECRET, strlen(SECRET), ID, mono_ms() + 2000), -EPROTO);
        close(sv[0]);
        /* a relay that never speaks: bounded by the deadline */
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        ASSERT_EQ(pj_relay_client_handshake(sv[0], SECRET, strlen(SECRET), ID, mono_ms() + 200), -ETIMEDOUT);
        close(sv[0]);
        close(sv[1]);
        /* a status that is not an errno value */
        ASSERT_OK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        greeting(g);
        ASSERT_EQ(write(sv[1], g, sizeof(g)), (ssize_t) sizeof(g));
        ASSERT_EQ(write(sv[1], "\xff\xff\xff\xff", 4), 4);
        ASSERT_EQ(pj_relay_client_handshake(sv[0], SECRET, strlen(SECRET), ID, mono_ms() + 2000), -EPROTO);
        close(sv[0]);
        close(sv[1]);
}
