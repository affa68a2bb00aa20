/* session.c — see session.h. Today every session and watch is carried by the sandbox's agent
 * (guest-exec.h); the edges see only these calls, so another carrier changes this file alone. */
#include <errno.h>
#include <stdlib.h>

#include "guest-exec.h"
#include "guest.h"
#include "session.h"
#include "strutil.h"

struct session {
        struct guest_exec *x;
};

struct dirwatch {
        struct guest_watch *w;
};

struct session *session_of_guest(struct guest_exec *x) {
        struct session *s = xnew0(struct session, 1);
        s->x = x;
        return s;
}

int session_read(struct session *s, int timeout_ms, int watch_fd, session_output_cb cb, void *ud) {
        return guest_exec_read(s->x, timeout_ms, watch_fd, cb, ud);
}

int session_write(struct session *s, const void *data, size_t len, int timeout_ms, session_output_cb cb, void *ud) {
        return guest_exec_write(s->x, data, len, timeout_ms, cb, ud);
}

int session_close_stdin(struct session *s) {
        return guest_exec_close_stdin(s->x);
}

int session_resize(struct session *s, uint32_t rows, uint32_t cols, session_output_cb cb, void *ud) {
        return guest_exec_resize(s->x, rows, cols, cb, ud);
}

int session_signal(struct session *s, int sig) {
        return guest_exec_signal(s->x, sig);
}

int session_exit_code(struct session *s, int *ret) {
        return guest_exec_exit_code(s->x, ret);
}

int session_term_signal(const struct session *s) {
        return guest_exec_term_signal(s->x);
}

uint32_t session_pid(const struct session *s) {
        return (uint32_t) guest_exec_pid(s->x);
}

bool session_lost(const struct session *s) {
        return guest_exec_lost(s->x);
}

int session_fd(const struct session *s) {
        return guest_exec_fd(s->x);
}

struct session *session_free(struct session *s) {
        if (!s)
                return NULL;
        guest_exec_free(s->x);
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

int session_agent_ping(struct ctl *c, const struct sandbox *sb, char *err, size_t errlen) {
        _cleanup_(guest_client_freep) struct guest_client *cl = NULL;
        return guest_connect(c, sb, &cl, err, errlen);
}
