/* chan.c — what processes, watches and the dispatch all use on a connection: queueing frames
 * to send (with the PI_OUT_MAX cap), the channel table, pending input buffers. Closing a
 * connection, and what a channel's kind needs done first, are conn.c's: a channel's own
 * module (watch.c) tidies its rows before chan_close. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "pi.h"

/* ---------------------------------------------------------------- sending */

size_t conn_out_pending(const struct conn *c) { return c->out.len - c->out_off; }


void conn_send(struct conn *c, const struct pj_agent_msg *m) {
        struct err e;
        if (!c->used || c->closing)
                return;
        int r = pj_agent_msg_encode(m, &c->out, &e);
        if (r < 0)
                pi_log("warning", "cannot encode %s: %s", pj_agent_type_name(m->type), r == -EINVAL ? e.message : strerror(-r));
        if (conn_out_pending(c) > PI_OUT_MAX) {
                /* Closed by the loop before it polls again (its deadline has passed): nothing
                 * more is read from it or queued for it meanwhile. */
                pi_log("info", "a client does not read its output (%zu bytes unsent); closing it", conn_out_pending(c));
                c->closing = true;
                c->deadline_ms = 0;
        }
}

static void send_error_v(struct conn *c, uint32_t id, int err, const char *path, const char *fmt, va_list ap) {
        char msg[PJ_AGENT_MAX_MESSAGE];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        conn_send(c, &(struct pj_agent_msg) { .type = PJ_AGENT_ERROR, .id = id,
                                             .f = { .err = err > 0 && err < 4096 ? (uint32_t) err : EIO, .message = msg,
                                                    .path = (char *) path } });
}

void conn_send_error(struct conn *c, uint32_t id, int err, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        send_error_v(c, id, err, NULL, fmt, ap);
        va_end(ap);
}

void conn_send_error_path(struct conn *c, uint32_t id, int err, const char *path, const char *fmt, ...) {
        va_list ap;
        va_start(ap, fmt);
        send_error_v(c, id, err, path, fmt, ap);
        va_end(ap);
}

void conn_send_simple(struct conn *c, uint8_t type, uint32_t id) {
        conn_send(c, &(struct pj_agent_msg) { .type = type, .id = id });
}

/* ---------------------------------------------------------------- channels */

struct chan *chan_find(struct conn *c, uint32_t id) {
        for (size_t i = 0; i < PI_MAX_CHANS; i++)
                if (c->chans[i].used && c->chans[i].id == id)
                        return &c->chans[i];
        return NULL;
}

/* A fresh channel id on c, or NULL with an ERROR sent. */
struct chan *chan_new(struct conn *c, uint32_t id, enum chan_kind kind) {
        if (chan_find(c, id)) {
                conn_send_error(c, id, EBUSY, "Channel %u is in use on this connection.", id);
                return NULL;
        }
        for (size_t i = 0; i < PI_MAX_CHANS; i++)
                if (!c->chans[i].used) {
                        c->chans[i] = (struct chan) { .used = true, .id = id, .kind = kind, .fd = -1 };
                        return &c->chans[i];
                }
        conn_send_error(c, id, EMFILE, "This connection has %d channels open, the limit.", PI_MAX_CHANS);
        return NULL;
}

void chan_close(struct conn *c, struct chan *ch) {
        if (ch->kind == CH_PROC && ch->proc && ch->proc->conn == c && ch->proc->chan == ch->id)
                ch->proc->conn = NULL;
        if (ch->kind == CH_FORWARD)
                c->n_forwards--;
        if (ch->fd >= 0)
                close(ch->fd);
        pj_agent_buf_done(&ch->out.b);
        *ch = (struct chan) { .fd = -1 };
}

bool pending_put(struct pending *p, const uint8_t *d, size_t n) {
        if (p->off && p->off == p->b.len)
                p->b.len = p->off = 0;
        pj_agent_buf_put(&p->b, d, n);
        return true;
}

size_t pending_len(const struct pending *p) { return p->b.len - p->off; }
