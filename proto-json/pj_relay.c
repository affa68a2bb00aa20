/* pj_relay.c — see pj_relay.h. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "cleanup.h"
#include "fdio.h"
#include "pj.h"
#include "pj_relay.h"
#include "strutil.h"

void pj_relay_mac(const void *secret, size_t secret_len, const uint8_t challenge[PJ_RELAY_CHALLENGE_LEN],
                  const char sandbox_id[PJ_RELAY_ID_LEN], uint8_t out[PJ_RELAY_MAC_LEN]) {
        static const char label[] = "paddock-relay";   /* and its NUL */
        uint8_t msg[sizeof(label) + PJ_RELAY_CHALLENGE_LEN + PJ_RELAY_ID_LEN];
        memcpy(msg, label, sizeof(label));
        memcpy(msg + sizeof(label), challenge, PJ_RELAY_CHALLENGE_LEN);
        memcpy(msg + sizeof(label) + PJ_RELAY_CHALLENGE_LEN, sandbox_id, PJ_RELAY_ID_LEN);
        unsigned len = 0;
        uint8_t mac[EVP_MAX_MD_SIZE];
        HMAC(EVP_sha256(), secret, (int) secret_len, msg, sizeof(msg), mac, &len);
        memcpy(out, mac, PJ_RELAY_MAC_LEN);
        explicit_bzero(mac, sizeof(mac));
}

int pj_relay_hello(const void *secret, size_t secret_len, const uint8_t greeting[PJ_RELAY_GREETING_LEN],
                   const char *sandbox_id, uint8_t out[PJ_RELAY_HELLO_LEN]) {
        if (memcmp(greeting, PJ_RELAY_MAGIC, PJ_RELAY_MAGIC_LEN) != 0)
                return -EPROTO;
        if (!sandbox_id || strlen(sandbox_id) != PJ_RELAY_ID_LEN || !hexid_valid(sandbox_id))
                return -EINVAL;
        memcpy(out, sandbox_id, PJ_RELAY_ID_LEN);
        pj_relay_mac(secret, secret_len, greeting + PJ_RELAY_MAGIC_LEN, sandbox_id, out + PJ_RELAY_ID_LEN);
        return 0;
}

int pj_relay_check(const void *secret, size_t secret_len, const uint8_t challenge[PJ_RELAY_CHALLENGE_LEN],
                   const uint8_t hello[PJ_RELAY_HELLO_LEN], char id_out[PJ_RELAY_ID_LEN + 1]) {
        char id[PJ_RELAY_ID_LEN + 1];
        memcpy(id, hello, PJ_RELAY_ID_LEN);
        id[PJ_RELAY_ID_LEN] = 0;
        if (strlen(id) != PJ_RELAY_ID_LEN || !hexid_valid(id))
                return -EPROTO;
        uint8_t want[PJ_RELAY_MAC_LEN];
        pj_relay_mac(secret, secret_len, challenge, id, want);
        int bad = CRYPTO_memcmp(want, hello + PJ_RELAY_ID_LEN, PJ_RELAY_MAC_LEN);
        explicit_bzero(want, sizeof(want));
        if (bad)
                return -EACCES;
        memcpy(id_out, id, sizeof(id));
        return 0;
}

/* Reads up to n bytes; the count read (short only at end of stream) or -errno. */
static ssize_t read_upto(int fd, uint8_t *buf, size_t n, int64_t deadline) {
        size_t got = 0;
        while (got < n) {
                ssize_t k = fd_recv_some(fd, buf + got, n - got, deadline);
                if (k < 0)
                        return k;
                if (k == 0)
                        break;
                got += (size_t) k;
        }
        return (ssize_t) got;
}

static int status_errno(const uint8_t st[PJ_RELAY_STATUS_LEN]) {
        uint32_t v = (uint32_t) st[0] << 24 | (uint32_t) st[1] << 16 | (uint32_t) st[2] << 8 | st[3];
        return v == 0 ? 0 : v < 4096 ? -(int) v : -EPROTO;
}

int pj_relay_client_handshake(int fd, const void *secret, size_t secret_len, const char *sandbox_id, int64_t deadline) {
        uint8_t greeting[PJ_RELAY_GREETING_LEN], hello[PJ_RELAY_HELLO_LEN], st[PJ_RELAY_STATUS_LEN];
        ssize_t n = read_upto(fd, greeting, sizeof(greeting), deadline);
        if (n < 0)
                return (int) n;
        if (n == PJ_RELAY_STATUS_LEN) {
                /* a relay at its limit says only its status */
                int r = status_errno(greeting);
                return r < 0 ? r : -EPROTO;
        }
        if (n == 0)
                return -ECONNRESET;
        if ((size_t) n != sizeof(greeting))
                return -EPROTO;
        int r = pj_relay_hello(secret, secret_len, greeting, sandbox_id, hello);
        if (r < 0)
                return r == -EINVAL ? -EINVAL : -EPROTO;
        r = fd_send_all(fd, hello, sizeof(hello), deadline);
        explicit_bzero(hello, sizeof(hello));
        if (r < 0)
                return r;
        n = read_upto(fd, st, sizeof(st), deadline);
        if (n < 0)
                return (int) n;
        if (n != PJ_RELAY_STATUS_LEN)
                return -ECONNRESET;
        return status_errno(st);
}

int pj_relay_secret_load(const char *path, char **ret, size_t *ret_len) {
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return -errno;
        return pj_secret_read(fd, PJ_RELAY_SECRET_MIN, PJ_RELAY_SECRET_MAX, ret, ret_len);
}
