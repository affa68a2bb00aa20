/* listener.c — see listener.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "listener.h"
#include "log.h"
#include "strutil.h"

/* An address with connections open: IPv4 (also v4-mapped IPv6) as ::ffff:a.b.c.d, IPv6 by its
 * /64, what one host is usually given. */
struct listener_addr {
        uint8_t key[16];
        int64_t n;
};

struct conn {
        struct listener *l;
        int fd;
        struct sockaddr_storage sa;
        socklen_t sl;
        char peer[INET6_ADDRSTRLEN];
        uint8_t key[16];
};

/* The listeners started, for /metrics. */
static struct {
        pthread_mutex_t lock;
        struct listener *l[4];
} ALL = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void addr_key(const struct sockaddr_storage *sa, uint8_t key[16]) {
        memset(key, 0, 16);
        if (sa->ss_family == AF_INET) {
                key[10] = key[11] = 0xff;
                memcpy(key + 12, &((const struct sockaddr_in *) sa)->sin_addr, 4);
        } else if (sa->ss_family == AF_INET6) {
                const uint8_t *a = ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr;
                static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
                memcpy(key, a, memcmp(a, v4mapped, 12) ? 8 : 16);
        }
}

/* One more connection from key, under l->lock: false when that address is at its bound. A free
 * slot always exists below the total cap (each slot in use holds at least one connection). */
static bool addr_take(struct listener *l, const uint8_t key[16]) {
        struct listener_addr *free_slot = NULL;
        for (int64_t i = 0; i < l->max_conns; i++) {
                struct listener_addr *a = &l->addrs[i];
                if (a->n == 0) {
                        if (!free_slot)
                                free_slot = a;
                        continue;
                }
                if (!memcmp(a->key, key, 16)) {
                        if (a->n >= l->max_per_addr)
                                return false;
                        a->n++;
                        return true;
                }
        }
        if (!free_slot)
                return false;
        memcpy(free_slot->key, key, 16);
        free_slot->n = 1;
        return true;
}

static void addr_give(struct listener *l, const uint8_t key[16]) {
        for (int64_t i = 0; i < l->max_conns; i++)
                if (l->addrs[i].n > 0 && !memcmp(l->addrs[i].key, key, 16)) {
                        l->addrs[i].n--;
                        return;
                }
}

static void *conn_main(void *arg) {
        struct conn *cn = arg;
        struct listener *l = cn->l;
        l->serve(l, cn->fd, &cn->sa, cn->sl, cn->peer, l->ud);
        log_ctx_reset();
        pthread_mutex_lock(&l->lock);
        addr_give(l, cn->key);
        free(cn);
        l->conns--;
        pthread_cond_broadcast(&l->cond);
        pthread_mutex_unlock(&l->lock);
        return NULL;
}

static void *accept_main(void *arg) {
        struct listener *l = arg;
        while (!l->stopping) {
                struct pollfd pfd = { .fd = l->fd, .events = POLLIN };
                if (poll(&pfd, 1, 500) <= 0)
                        continue;
                struct conn *cn = xnew0(struct conn, 1);
                cn->l = l;
                cn->sl = sizeof(cn->sa);
                cn->fd = accept4(l->fd, (struct sockaddr *) &cn->sa, &cn->sl, SOCK_CLOEXEC);
                if (cn->fd < 0) {
                        free(cn);
                        continue;
                }
                addr_key(&cn->sa, cn->key);
                pthread_mutex_lock(&l->lock);
                bool full = l->conns >= l->max_conns, many = !full && !addr_take(l, cn->key);
                if (full)
                        l->refused_full++;
                else if (many)
                        l->refused_addr++;
                else
                        l->conns++;
                pthread_mutex_unlock(&l->lock);
                if (full || many) {
                        static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
                                                   "Connection: close\r\n\r\n";
                        static const char toomany[] = "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
                                                      "Connection: close\r\n\r\n";
                        if (full)
                                (void) send(cn->fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                        else
                                (void) send(cn->fd, toomany, sizeof(toomany) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                        close(cn->fd);
                        free(cn);
                        continue;
                }
                if (cn->sa.ss_family == AF_INET)
                        inet_ntop(AF_INET, &((struct sockaddr_in *) &cn->sa)->sin_addr, cn->peer, sizeof(cn->peer));
                else if (cn->sa.ss_family == AF_INET6)
                        inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &cn->sa)->sin6_addr, cn->peer, sizeof(cn->peer));
                pthread_attr_t at;
                pthread_t t;
                pthread_attr_init(&at);
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&at, 512 * 1024);
                if (pthread_create(&t, &at, conn_main, cn) != 0) {
                        close(cn->fd);
                        pthread_mutex_lock(&l->lock);
                        addr_give(l, cn->key);
                        l->conns--;
                        pthread_mutex_unlock(&l->lock);
                        free(cn);
                }
                pthread_attr_destroy(&at);
        }
        return NULL;
}

int listener_start(struct listener *l, const char *addr, int port) {
        struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t) port) };
        struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t) port) };
        struct sockaddr *sa;
        socklen_t sl;
        if (inet_pton(AF_INET, addr, &a4.sin_addr) == 1)
                sa = (struct sockaddr *) &a4, sl = sizeof(a4);
        else if (inet_pton(AF_INET6, addr, &a6.sin6_addr) == 1)
                sa = (struct sockaddr *) &a6, sl = sizeof(a6);
        else
                return log_error_errno(-EINVAL, "%s: listen address '%s' is not an IP address", l->name, addr);
        int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return log_error_errno(-errno, "%s: socket: %m", l->name);
        int one = 1;
        (void) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, sa, sl) < 0 || listen(fd, 256) < 0) {
                int e = -errno;
                close(fd);
                return log_error_errno(e, "%s: cannot listen on %s:%d: %s", l->name, addr, port, strerror(-e));
        }
        struct sockaddr_storage got;
        socklen_t gl = sizeof(got);
        if (getsockname(fd, (struct sockaddr *) &got, &gl) == 0)
                l->port = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *) &got)->sin_port
                                                         : ((struct sockaddr_in6 *) &got)->sin6_port);
        l->fd = fd;
        l->stopping = 0;
        if (l->max_per_addr <= 0)
                l->max_per_addr = l->max_conns;
        if (!l->addrs)
                l->addrs = xnew0(struct listener_addr, (size_t) l->max_conns);
        if (pthread_create(&l->thread, NULL, accept_main, l) != 0) {
                close(fd);
                l->fd = -1;
                return log_error_errno(-EAGAIN, "%s: no thread", l->name);
        }
        l->running = true;
        pthread_mutex_lock(&ALL.lock);
        for (size_t i = 0; i < ELEMENTSOF(ALL.l); i++)
                if (!ALL.l[i]) {
                        ALL.l[i] = l;
                        break;
                }
        pthread_mutex_unlock(&ALL.lock);
        return 0;
}

bool listener_stop(struct listener *l, int wait_s) {
        if (!l->running)
                return true;
        pthread_mutex_lock(&ALL.lock);
        for (size_t i = 0; i < ELEMENTSOF(ALL.l); i++)
                if (ALL.l[i] == l)
                        ALL.l[i] = NULL;
        pthread_mutex_unlock(&ALL.lock);
        l->stopping = 1;
        pthread_join(l->thread, NULL);
        close(l->fd);
        l->fd = -1;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += wait_s;
        pthread_mutex_lock(&l->lock);
        while (l->conns > 0 && pthread_cond_timedwait(&l->cond, &l->lock, &ts) == 0)
                ;
        bool left = l->conns > 0;
        pthread_mutex_unlock(&l->lock);
        l->running = false;
        if (!left) {
                free(l->addrs);
                l->addrs = NULL;
        }
        return !left;
}

void listener_metrics_render(struct strbuf *out) {
        strbuf_printf(out, "# HELP paddock_listener_refused_total Connections refused at accept, before a byte was read: "
                           "full (max_connections) or per_address (per_address_connections).\n"
                           "# TYPE paddock_listener_refused_total counter\n");
        pthread_mutex_lock(&ALL.lock);
        for (size_t i = 0; i < ELEMENTSOF(ALL.l); i++) {
                struct listener *l = ALL.l[i];
                if (!l)
                        continue;
                pthread_mutex_lock(&l->lock);
                uint64_t f = l->refused_full, a = l->refused_addr;
                pthread_mutex_unlock(&l->lock);
                strbuf_printf(out, "paddock_listener_refused_total{listener=\"%s\",reason=\"full\"} %llu\n", l->name,
                              (unsigned long long) f);
                strbuf_printf(out, "paddock_listener_refused_total{listener=\"%s\",reason=\"per_address\"} %llu\n", l->name,
                              (unsigned long long) a);
        }
        pthread_mutex_unlock(&ALL.lock);
}
