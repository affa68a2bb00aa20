/* guest-secret.c — see guest-secret.h. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "guest-secret.h"
#include "log.h"
#include "strutil.h"

void guest_secret(const char *key, const char *sandbox_id, char out[GUEST_SECRET_LEN + 1]) {
        unsigned char mac[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        _cleanup_free_ char *msg = xasprintf("paddock-agent:%s", sandbox_id);
        HMAC(EVP_sha256(), key, (int) strlen(key), (const unsigned char *) msg, strlen(msg), mac, &len);
        hex_encode(mac, 32, out);
        explicit_bzero(mac, sizeof(mac));
}

char *guest_secret_path(const char *dir, const char *sandbox_id) {
        return xasprintf("%s/%s.secret", dir, sandbox_id);
}

int guest_secret_write(const char *dir, const char *key, const char *sandbox_id) {
        char secret[GUEST_SECRET_LEN + 1];
        _cleanup_free_ char *path = guest_secret_path(dir, sandbox_id);
        _cleanup_free_ char *tmp = xasprintf("%s.new", path);
        guest_secret(key, sandbox_id, secret);
        (void) unlink(tmp);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0400);
        int r = fd < 0 ? -errno : (write(fd, secret, GUEST_SECRET_LEN) == GUEST_SECRET_LEN ? 0 : -EIO);
        explicit_bzero(secret, sizeof(secret));
        if (r >= 0 && rename(tmp, path) < 0)
                r = -errno;
        if (r < 0)
                (void) unlink(tmp);
        return r < 0 ? r : 0;
}

void guest_secret_remove(const char *dir, const char *sandbox_id) {
        if (!dir)
                return;
        _cleanup_free_ char *path = guest_secret_path(dir, sandbox_id);
        if (unlink(path) < 0 && errno != ENOENT)
                log_warning("cannot remove the agent secret %s: %s", path, strerror(errno));
}

const char *const *guest_entrypoint(void) {
        static const char *const argv[] = { GUEST_IN_BINARY, "--socket", GUEST_IN_SOCKET, "--secret-file", GUEST_IN_SECRET,
                                            NULL };
        return argv;
}
