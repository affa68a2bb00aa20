/* privsep-msg.c — the checks every child's message check uses (privsep.h): a refusal in the
 * result, zero padding, a sandbox id field; and what both ends of the wire use: a child's
 * name, an empty result, sending one message. Apart from privsep.c so that the checks of
 * privsep.c and privsep-docker.c both build on them without the two files calling each
 * other both ways. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "nodeagent.h"
#include "privsep.h"
#include "strutil.h"

/* Fills ret with the refusal; returns -EBADMSG. */
int privsep_refuse(struct ps_result *ret, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ret->msg, sizeof(ret->msg), fmt, ap);
        va_end(ap);
        return ret->r = -EBADMSG;
}

bool privsep_zero(const void *p, size_t n) {
        const uint8_t *b = p;
        for (size_t i = 0; i < n; i++)
                if (b[i])
                        return false;
        return true;
}

/* A sandbox id field: exactly 24 lowercase hex and a NUL, nothing else. */
bool privsep_id_field_valid(const char id[EGRESS_ID_LEN + 1]) {
        return memchr(id, 0, EGRESS_ID_LEN + 1) == id + EGRESS_ID_LEN && hexid_valid(id);
}

/* ---- both ends of the wire */

static const char *const child_names[PS_CHILD_MAX] = {
        [PS_CHILD_EGRESS] = "egress",
        [PS_CHILD_DOCKER] = "docker",
        [PS_CHILD_RELAY] = "relay",
        [PS_CHILD_LOOKUP] = "lookup",
        [PS_CHILD_PROXY] = "proxy",
};

const char *privsep_child_name(enum ps_child kind) {
        return child_names[kind];
}

void privsep_result_init(struct ps_result *ret, uint16_t type, uint32_t seq) {
        memset(ret, 0, sizeof(*ret));
        ret->hdr = (struct ps_hdr) { .version = PS_VERSION, .type = type, .len = sizeof(*ret), .seq = seq };
}

int privsep_send_all(int fd, const void *buf, size_t len) {
        for (;;) {
                ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
                if (n == (ssize_t) len)
                        return 0;
                if (n < 0 && errno == EINTR)
                        continue;
                return n < 0 ? -errno : -EMSGSIZE;
        }
}
