/* tunnel.c — see tunnel.h: one FORWARD channel (id 1) on its own agent connection. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "guest.h"
#include "strutil.h"
#include "tunnel.h"

#define CHUNK (64 * 1024)
#define END_TIMEOUT_MS 1000          /* telling the port the client went: best effort */

struct tunnel {
        struct guest_client *ac;
};

int tunnel_open(struct ctl *c, const struct sandbox *sb, int port, int send_timeout_ms, int answer_timeout_ms,
                struct tunnel **ret, int *ret_refusal, struct err *err) {
        _cleanup_(guest_client_freep) struct guest_client *ac = NULL;
        *ret_refusal = 0;
        if (guest_connect(c, sb, &ac, err) < 0)
                return -EHOSTUNREACH;
        struct pj_agent_msg fwd = { .type = PJ_AGENT_FORWARD, .id = 1, .f.port = (uint32_t) port };
        if (guest_client_send(ac, &fwd, send_timeout_ms) < 0)
                return -EPIPE;
        struct guest_frame f;
        struct err pe = { 0 };
        if (guest_client_recv(ac, answer_timeout_ms, &f, &pe) < 0)
                return -ETIMEDOUT;
        bool ok = f.m.type == PJ_AGENT_OK && f.m.id == 1;
        int e = f.m.type == PJ_AGENT_ERROR ? (int) f.m.f.err : 0;
        guest_frame_done(&f);
        if (!ok) {
                if (e == ECONNREFUSED)
                        return -ECONNREFUSED;
                *ret_refusal = e;
                return -EREMOTEIO;
        }
        struct tunnel *t = xnew0(struct tunnel, 1);
        t->ac = TAKE_PTR(ac);
        *ret = t;
        return 0;
}

int tunnel_send(struct tunnel *t, const void *data, size_t len, int timeout_ms) {
        struct pj_agent_msg m = { .type = PJ_AGENT_DATA, .id = 1, .data = (uint8_t *) data, .data_len = len };
        return guest_client_send(t->ac, &m, timeout_ms);
}

static void send_end(struct tunnel *t) {
        struct pj_agent_msg m = { .type = PJ_AGENT_END, .id = 1 };
        (void) guest_client_send(t->ac, &m, END_TIMEOUT_MS);
}

struct tunnel *tunnel_free(struct tunnel *t) {
        if (!t)
                return NULL;
        guest_client_free(t->ac);
        free(t);
        return NULL;
}

void tunnel_pump(struct tunnel *t, const struct tunnel_client *cl, uint64_t *ret_in, uint64_t *ret_out) {
        uint8_t *buf = xmalloc(CHUNK);
        bool agent_eof = false;
        uint64_t in = 0, out = 0;
        int64_t last = mono_ms(), next_check = last + cl->check_ms;
        while (!agent_eof && cl->running(cl->ud)) {
                /* On a clock, whatever the traffic: what the edge says ends the tunnel (an idle
                 * connection, a permission gone) ends it here even while bytes flow both ways. */
                int64_t now = mono_ms();
                if (now >= next_check) {
                        next_check = now + cl->check_ms;
                        if (!cl->check(cl->ud, now - last))
                                break;
                }
                /* the client is read only while its bytes may pass; its going away (FIN: HTTP
                 * clients do not half-close and wait) shows all the same */
                bool hold = cl->hold(cl->ud);
                struct pollfd pfd[2] = { { .fd = cl->fd, .events = hold ? POLLRDHUP : POLLIN },
                                         { .fd = guest_client_fd(t->ac), .events = POLLIN } };
                /* frames already buffered in the client first */
                struct guest_frame f;
                struct err pe = { 0 };
                int k = guest_client_try_recv(t->ac, &f, &pe);
                if (k < 0)
                        break;
                if (k == 1) {
                        last = mono_ms();
                        bool stop = false;
                        if (f.m.type == PJ_AGENT_DATA && f.m.id == 1) {
                                if (!cl->deliver(cl->ud, f.m.data, f.m.data_len))
                                        stop = true;
                                out += f.m.data_len;
                        } else if (f.m.type == PJ_AGENT_END) {
                                agent_eof = true;
                                (void) shutdown(cl->fd, SHUT_WR);
                        } else
                                stop = true;   /* ERROR, or anything else: the channel is over */
                        guest_frame_done(&f);
                        if (stop)
                                break;
                        continue;
                }
                int64_t wait = next_check - mono_ms();
                k = poll(pfd, 2, (int) (wait < 0 ? 0 : wait > cl->check_ms ? cl->check_ms : wait));
                if (k < 0 && errno != EINTR)
                        break;
                if (hold && (pfd[0].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                        /* gone while we were not reading it: tell the port, free the place */
                        send_end(t);
                        break;
                }
                if (!hold && (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                        ssize_t n = recv(cl->fd, buf, CHUNK, 0);
                        if (n < 0 && errno == EINTR)
                                continue;
                        last = mono_ms();
                        if (n <= 0) {
                                /* The client is gone (as nginx does, a half-close counts as going:
                                 * HTTP clients do not half-close and wait): tell the port, free
                                 * the place. */
                                send_end(t);
                                break;
                        }
                        ssize_t take = cl->take(cl->ud, buf, (size_t) n);
                        if (take < 0)
                                break;
                        if (take > 0 && tunnel_send(t, buf, (size_t) take, cl->send_timeout_ms) < 0)
                                break;
                        in += (uint64_t) take;
                }
        }
        free(buf);
        *ret_in = in;
        *ret_out = out;
}
