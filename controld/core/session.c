/* session.c — see session.h. A session is carried by the sandbox's agent (guest-exec.h) or,
 * for runtime.c's commands where no agent answers, by the driver's exec path (driver.h); the
 * edges see only these calls, so another carrier changes this file alone. */
#include <errno.h>
#include <stdlib.h>

#include "controld.h"
#include "driver.h"
#include "guest-exec.h"
#include "guest.h"
#include "session.h"
#include "strutil.h"

struct session {
        struct guest_exec *x;            /* through the agent, or */
        struct driver *drv;              /* through the driver's exec path */
        struct exec_session *ds;
};

struct dirwatch {
        struct guest_watch *w;
};

struct session *session_of_guest(struct guest_exec *x) {
        struct session *s = xnew0(struct session, 1);
        s->x = x;
        return s;
}

struct session *session_of_driver(struct driver *d, struct exec_session *x) {
        struct session *s = xnew0(struct session, 1);
        s->drv = d;
        s->ds = x;
        return s;
}

int session_read(struct session *s, int timeout_ms, int watch_fd, session_output_cb cb, void *ud) {
        if (s->x)
                return guest_exec_read(s->x, timeout_ms, watch_fd, cb, ud);
        return s->drv->ops->exec_read(s->ds, timeout_ms, watch_fd, cb, ud);
}

int session_write(struct session *s, const void *data, size_t len, int timeout_ms, session_output_cb cb, void *ud) {
        if (s->x)
                return guest_exec_write(s->x, data, len, timeout_ms, cb, ud);
        return s->drv->ops->exec_write(s->ds, data, len, timeout_ms, cb, ud);
}

int session_close_stdin(struct session *s) {
        if (s->x)
                return guest_exec_close_stdin(s->x);
        return s->drv->ops->exec_close_stdin(s->ds);
}

int session_resize(struct session *s, uint32_t rows, uint32_t cols, session_output_cb cb, void *ud) {
        if (s->x)
                return guest_exec_resize(s->x, rows, cols, cb, ud);
        return -EOPNOTSUPP;
}

int session_signal(struct session *s, int sig) {
        if (s->x)
                return guest_exec_signal(s->x, sig);
        return -EOPNOTSUPP;
}

bool session_signals(const struct session *s) {
        return s->x != NULL;
}

int session_exit_code(struct session *s, int *ret) {
        if (s->x)
                return guest_exec_exit_code(s->x, ret);
        return s->drv->ops->exec_exit_code(s->ds, ret);
}

int session_term_signal(const struct session *s) {
        return s->x ? guest_exec_term_signal(s->x) : 0;
}

uint32_t session_pid(const struct session *s) {
        return s->x ? (uint32_t) guest_exec_pid(s->x) : 0;
}

bool session_lost(const struct session *s) {
        return s->x && guest_exec_lost(s->x);
}

int session_fd(const struct session *s) {
        return s->x ? guest_exec_fd(s->x) : -1;
}

bool session_oom_killed(struct session *s, struct ctl *c, const struct sandbox *sb) {
        if (s->x)
                return guest_exec_lost(s->x) && c->drv->ops->oom_killed && c->drv->ops->oom_killed(c->drv, sb) > 0;
        return s->drv->ops->exec_oom_killed && s->drv->ops->exec_oom_killed(s->ds) > 0;
}

struct session *session_free(struct session *s) {
        if (!s)
                return NULL;
        guest_exec_free(s->x);
        if (s->ds)
                s->drv->ops->exec_free(s->ds);
        free(s);
        return NULL;
}

struct dirwatch *dirwatch_of_guest(struct guest_watch *w) {
        struct dirwatch *d = xnew0(struct dirwatch, 1);
        d->w = w;
        return d;
}

int dirwatch_read(struct dirwatch *w, int timeout_ms, int watch_fd, dirwatch_cb cb, void *ud) {
        return guest_watch_read(w->w, timeout_ms, watch_fd, cb, ud);
}

bool dirwatch_truncated(const struct dirwatch *w) {
        return guest_watch_truncated(w->w);
}

struct dirwatch *dirwatch_free(struct dirwatch *w) {
        if (!w)
                return NULL;
        guest_watch_free(w->w);   /* the agent drops the watch with the connection */
        free(w);
        return NULL;
}

int session_agent_ping(struct ctl *c, const struct sandbox *sb, struct err *err) {
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        return guest_connect(c, sb, &cl, err);
}
