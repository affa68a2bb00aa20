/* pj.c — see pj.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pj.h"
#include "cleanup.h"

int pj_secret_read(int fd, size_t min, size_t max, char **ret, size_t *ret_len) {
        char buf[2048];
        if (max + 2 > sizeof(buf))
                return -EINVAL;
        size_t n = 0;
        int r = 0;
        while (n < max + 2) {
                ssize_t k = read(fd, buf + n, max + 2 - n);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0) {
                        r = -errno;
                        break;
                }
                if (k == 0)
                        break;
                n += (size_t) k;
        }
        if (r == 0 && n && buf[n - 1] == '\n')
                n--;
        if (r == 0 && (n < min || n > max || memchr(buf, 0, n)))
                r = -EINVAL;
        if (r == 0) {
                *ret = xstrndup(buf, n);
                *ret_len = n;
        }
        explicit_bzero(buf, sizeof(buf));
        return r;
}
