/* driver-guest.c — a driver's connection to a sandbox's init (paddock-init) through its own
 * dial (a node relay) or socket (Docker's data root), with the HELLO and the sandbox's secret.
 * Apart from driver.c (which only chooses a driver) so the drivers that call it and the
 * constructors driver.c calls never call each other both ways. */
#include <errno.h>
#include <stdio.h>
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

int driver_guest_connect(struct driver *d, const struct sandbox *sb, struct guest_client **ret, struct err *err) {
        const struct ctl *c = d->ctl;
        if (!c->agent_binary || (!d->ops->agent_socket && !d->ops->agent_dial))
                return err_set(err, -EOPNOTSUPP, "this controld runs no in-sandbox agent");
        if (d->ops->agent_dial) {
                int64_t deadline = mono_ms() + GUEST_CONNECT_TIMEOUT_MS;
                int fd = d->ops->agent_dial(d, sb, deadline, err);
                if (fd < 0)
                        return fd;
                char secret[GUEST_SECRET_LEN + 1];
                guest_secret(c->agent_key, sb->id, secret);
                struct err perr = { 0 };
                int r = guest_client_connect_fd(fd, secret, deadline, ret, &perr);
                explicit_bzero(secret, sizeof(secret));
                if (r < 0)
                        err_set(err, r, "the sandbox's agent (through its node's relay): %s%s%s", strerror(-r),
                                perr.message[0] ? ": " : "", perr.message);
                return r;
        }
        _cleanup_free_ char *path = NULL;
        int r = d->ops->agent_socket(d, sb, &path, err);
        if (r < 0)
                return r;
        char secret[GUEST_SECRET_LEN + 1];
        guest_secret(c->agent_key, sb->id, secret);
        struct err perr = { 0 };
        r = guest_client_connect(path, secret, GUEST_CONNECT_TIMEOUT_MS, ret, &perr);
        explicit_bzero(secret, sizeof(secret));
        if (r < 0)
                err_set(err, r, "the sandbox's agent at %s: %s%s%s", path,
                        r == -ENOTSOCK ? "not a socket" : r == -EPERM ? "socket of an unexpected owner" : strerror(-r),
                        perr.message[0] ? ": " : "", perr.message);
        return r;
}
