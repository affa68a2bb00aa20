/* listener.h — a TCP listener of controld's own (preview URLs, E2B's API): bind, accept, and a
 * detached thread per connection with a cap on how many are open in all and from one client
 * address (checked before a byte is read, so one address cannot hold every place with idle
 * connections); over either cap a connection gets a bare 503 or 429 and is closed at once,
 * counted in paddock_listener_refused_total. Stopping waits (bounded) for the open ones. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct listener;

/* One accepted connection, on its own thread: fd is serve's to close. */
typedef void (*listener_serve_fn)(struct listener *l, int fd, const struct sockaddr_storage *sa, socklen_t sl,
                                  const char *peer, void *ud);

struct listener {
        const char *name;                /* in logs: "preview listener" */
        int64_t max_conns;
        int64_t max_per_addr;            /* open connections from one address (IPv6: its /64) */
        listener_serve_fn serve;
        void *ud;
        /* the listener's own */
        int fd, port;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int64_t conns;
        struct listener_addr *addrs;     /* max_conns slots: addresses with connections open */
        uint64_t refused_full, refused_addr;
        volatile int stopping;
        bool running;
};
#define LISTENER_INIT { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .fd = -1 }

/* Binds addr:port (an IP address; port 0 picks one, l->port says which) and starts accepting:
 * 0 or -errno, logged. */
int listener_start(struct listener *l, const char *addr, int port);
/* Stops accepting, then waits up to wait_s for the open connections: true when they ended. */
bool listener_stop(struct listener *l, int wait_s);
/* paddock_listener_refused_total{listener,reason} of every listener started, for /metrics. */
struct strbuf;
void listener_metrics_render(struct strbuf *out);
