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

struct conn {
        struct listener *l;
        int fd;
        struct sockaddr_storage sa;
        socklen_t sl;
        char peer[INET6_ADDRSTRLEN];
};

static void *conn_main(void *arg) {
        struct conn *cn = arg;
        struct listener *l = cn->l;
        l->serve(l, cn->fd, &cn->sa, cn->sl, cn->peer, l->ud);
        free(cn);
        log_ctx_reset();
        pthread_mutex_lock(&l->lock);
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
                pthread_mutex_lock(&l->lock);
                bool full = l->conns >= l->max_conns;
                if (!full)
                        l->conns++;
                pthread_mutex_unlock(&l->lock);
                if (full) {
                        static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
                                                   "Connection: close\r\n\r\n";
                        (void) send(cn->fd, busy, sizeof(busy) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
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
                        free(cn);
                        pthread_mutex_lock(&l->lock);
                        l->conns--;
                        pthread_mutex_unlock(&l->lock);
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
        if (pthread_create(&l->thread, NULL, accept_main, l) != 0) {
                close(fd);
                l->fd = -1;
                return log_error_errno(-EAGAIN, "%s: no thread", l->name);
        }
        l->running = true;
        return 0;
}

bool listener_stop(struct listener *l, int wait_s) {
        if (!l->running)
                return true;
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
        return !left;
}
