/* driver.c — what every scheduler driver shares: choosing one, freeing it, a placement's
 * strings. The drivers themselves are driver-docker.c and driver-nomad.c. */
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "guest-conn.h"
#include "guest-secret.h"
#include "log.h"
#include "pj_api.h"
#include "strutil.h"

int driver_new(struct ctl *c, struct driver **ret) {
        return !strcmp(c->cfg->driver, "nomad") ? driver_nomad_new(c, ret) : driver_docker_new(c, ret);
}

struct driver *driver_free(struct driver *d) {
        if (!d)
                return NULL;
        if (d->ops && d->ops->done)
                d->ops->done(d);
        free(d);
        return NULL;
}

int exec_output_discard(int stream, const uint8_t *data, size_t len, void *ud) {
        (void) stream, (void) data, (void) len, (void) ud;
        return 0;
}

void placement_clear(struct placement *p) {
        if (!p)
                return;
        free_many(p->container_id, p->node_id, p->job_id, p->alloc_id, p->ip);
        memset(p, 0, sizeof(*p));
}

int driver_guest_connect(struct driver *d, const struct sandbox *sb, struct guest_client **ret, char *err, size_t errlen) {
        const struct ctl *c = d->ctl;
        if (!c->agent_binary || (!d->ops->agent_socket && !d->ops->agent_dial)) {
                snprintf(err, errlen, "this controld runs no in-sandbox agent");
                return -EOPNOTSUPP;
        }
        if (d->ops->agent_dial) {
                int64_t deadline = mono_ms() + GUEST_CONNECT_TIMEOUT_MS;
                int fd = d->ops->agent_dial(d, sb, deadline, err, errlen);
                if (fd < 0)
                        return fd;
                char secret[GUEST_SECRET_LEN + 1];
                guest_secret(c->agent_key, sb->id, secret);
                struct pj_error perr = { 0 };
                int r = guest_client_connect_fd(fd, secret, deadline, ret, &perr);
                explicit_bzero(secret, sizeof(secret));
                if (r < 0)
                        snprintf(err, errlen, "the sandbox's agent (through its node's relay): %s%s%s", strerror(-r),
                                 perr.message[0] ? ": " : "", perr.message);
                return r;
        }
        _cleanup_free_ char *path = NULL;
        int r = d->ops->agent_socket(d, sb, &path, err, errlen);
        if (r < 0)
                return r;
        char secret[GUEST_SECRET_LEN + 1];
        guest_secret(c->agent_key, sb->id, secret);
        struct pj_error perr = { 0 };
        r = guest_client_connect(path, secret, GUEST_CONNECT_TIMEOUT_MS, ret, &perr);
        explicit_bzero(secret, sizeof(secret));
        if (r < 0)
                snprintf(err, errlen, "the sandbox's agent at %s: %s%s%s", path,
                         r == -ENOTSOCK ? "not a socket" : r == -EPERM ? "socket of an unexpected owner" : strerror(-r),
                         perr.message[0] ? ": " : "", perr.message);
        return r;
}
