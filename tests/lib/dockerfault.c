/* dockerfault.c — see dockerfault.h. One thread accepts; each connection gets a thread that
 * relays both ways with poll(). A request is recognised by its request line at the start of
 * what the client writes (Docker's client writes a request's head in one go); a body that
 * happened to start like a request line could be mistaken for one, which only costs a test an
 * extra fault. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cleanup.h"
#include "dockerfault.h"
#include "strutil.h"
#include "testlib.h"

#define ENGINE "/var/run/docker.sock"

struct relay {
        struct dfault *f;
        int cfd;
};

static int unix_connect(const char *path) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        return fd;
}

/* Whether buf starts a request that changes a container's life. */
static bool lifecycle_call(const char *buf, size_t n) {
        char line[512];
        const char *eol = memchr(buf, '\n', n < sizeof(line) - 1 ? n : sizeof(line) - 1);
        size_t ln = eol ? (size_t) (eol - buf) : (n < sizeof(line) - 1 ? n : sizeof(line) - 1);
        memcpy(line, buf, ln);
        line[ln] = 0;
        bool post = !strncmp(line, "POST /", 6), del = !strncmp(line, "DELETE /", 8);
        if (!post && !del)
                return false;
        char *sp = strchr(line, ' ');
        char *path = sp ? sp + 1 : line;
        char *end = strchr(path, ' ');
        if (end)
                *end = 0;
        char *q = strchr(path, '?');
        if (q)
                *q = 0;
        if (strstr(path, "/commit"))
                return true;
        if (!strstr(path, "/containers/"))
                return false;
        if (del)
                return true;
        static const char *const verbs[] = { "/create", "/start", "/stop", "/kill", "/pause", "/unpause", "/restart" };
        size_t pl = strlen(path);
        for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
                size_t vl = strlen(verbs[i]);
                if (pl >= vl && !strcmp(path + pl - vl, verbs[i]))
                        return true;
        }
        return false;
}

static bool send_all(int fd, const void *p, size_t n) {
        const char *c = p;
        while (n) {
                ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return false;
                c += w;
                n -= (size_t) w;
        }
        return true;
}

static void *relay_main(void *ud) {
        struct relay *r = ud;
        struct dfault *f = r->f;
        int cfd = r->cfd, efd = unix_connect(ENGINE);
        free(r);
        static char fail[] = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
                             "Content-Length: 48\r\nConnection: close\r\n\r\n"
                             "{\"message\":\"injected fault (dockerfault, test)\"}";
        char *buf = malloc(1 << 16);
        bool client_new_request = true;
        while (efd >= 0 && buf && !atomic_load(&f->stop)) {
                struct pollfd p[2] = { { .fd = cfd, .events = POLLIN }, { .fd = efd, .events = POLLIN } };
                int k = poll(p, 2, 200);
                if (k < 0 && errno != EINTR)
                        break;
                if (k <= 0)
                        continue;
                if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t n = recv(cfd, buf, 1 << 16, 0);
                        if (n <= 0)
                                break;
                        if (client_new_request && lifecycle_call(buf, (size_t) n)) {
                                int left = atomic_load(&f->fail_next);
                                while (left > 0 && !atomic_compare_exchange_weak(&f->fail_next, &left, left - 1))
                                        ;
                                if (left > 0) {
                                        atomic_fetch_add(&f->faulted, 1);
                                        (void) send_all(cfd, fail, sizeof(fail) - 1);
                                        break;
                                }
                                int slow = atomic_load(&f->slow_ms);
                                if (slow > 0) {
                                        atomic_fetch_add(&f->slowed, 1);
                                        usleep((useconds_t) slow * 1000);
                                }
                        }
                        /* a new request can follow only once the engine answered this one */
                        client_new_request = false;
                        if (!send_all(efd, buf, (size_t) n))
                                break;
                }
                if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
                        ssize_t n = recv(efd, buf, 1 << 16, 0);
                        if (n <= 0)
                                break;
                        client_new_request = true;
                        if (!send_all(cfd, buf, (size_t) n))
                                break;
                }
        }
        free(buf);
        if (efd >= 0)
                close(efd);
        close(cfd);
        return NULL;
}

static void *accept_main(void *ud) {
        struct dfault *f = ud;
        while (!atomic_load(&f->stop)) {
                struct pollfd p = { .fd = f->lfd, .events = POLLIN };
                if (poll(&p, 1, 200) <= 0)
                        continue;
                int cfd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (cfd < 0)
                        continue;
                struct relay *r = xnew0(struct relay, 1);
                *r = (struct relay) { f, cfd };
                pthread_t t;
                pthread_attr_t at;
                pthread_attr_init(&at);
                pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&t, &at, relay_main, r) != 0) {
                        close(cfd);
                        free(r);
                }
                pthread_attr_destroy(&at);
        }
        return NULL;
}

static void stop_hook(void *ud) {
        dfault_stop(ud);
}

void dfault_start(struct dfault *f, const char *dir) {
        memset(f, 0, sizeof(*f));
        snprintf(f->path, sizeof(f->path), "%s/docker.sock", dir);
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        ASSERT_TRUE(strlen(f->path) < sizeof(sa.sun_path));
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
        f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ASSERT_TRUE(f->lfd >= 0);
        (void) unlink(f->path);
        ASSERT_EQ(bind(f->lfd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ASSERT_EQ(listen(f->lfd, 128), 0);
        ASSERT_EQ(pthread_create(&f->thread, NULL, accept_main, f), 0);
        f->running = true;
        test_on_exit(stop_hook, f);
}

void dfault_stop(struct dfault *f) {
        if (!f->running)
                return;
        atomic_store(&f->stop, true);
        pthread_join(f->thread, NULL);
        close(f->lfd);
        (void) unlink(f->path);
        f->running = false;
}
