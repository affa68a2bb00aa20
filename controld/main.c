/* main.c — the controld daemon: its main(), signals, the systemd watchdog. Everything else
 * is linked from the controld library (tests link that library without this file). */
#include <malloc.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "e2b.h"
#include "preview.h"
#include "http.h"
#include "driver.h"
#include "dockerchild.h"
#include "nodebus.h"
#include "log.h"
#include "strutil.h"
#include "background.h"
#include "ctl-egress.h"
#include "ctl-metrics.h"
#include "snapshot.h"


/* ---- systemd watchdog ----
 *
 * With WatchdogSec= in the unit, systemd restarts controld when WATCHDOG=1 stops
 * arriving. We send it every WATCHDOG_USEC/2, and only after the two things every
 * request needs answered: the HTTP server answers a request on its own socket (a
 * keyless one, refused with 401 without touching the store) and the store answers a
 * read. A wedged accept thread or a store lock held forever both stop the pings. */

struct watchdog {
        struct ctl *c;
        int port;
        uint64_t usec;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        bool quit, started;
};

/* 0 when the HTTP server sends a status line for a keyless request within timeout_ms. */
static int watchdog_http_ok(struct watchdog *w, int timeout_ms) {
        const char *addr = w->c->cfg->listen_addr;
        struct sockaddr_in a4 = { .sin_family = AF_INET, .sin_port = htons((uint16_t) w->port) };
        struct sockaddr_in6 a6 = { .sin6_family = AF_INET6, .sin6_port = htons((uint16_t) w->port) };
        struct sockaddr *sa;
        socklen_t salen;
        int fam;
        if (inet_pton(AF_INET, addr, &a4.sin_addr) == 1) {
                if (a4.sin_addr.s_addr == htonl(INADDR_ANY))
                        a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                sa = (struct sockaddr *) &a4, salen = sizeof(a4), fam = AF_INET;
        } else if (inet_pton(AF_INET6, addr, &a6.sin6_addr) == 1) {
                if (IN6_IS_ADDR_UNSPECIFIED(&a6.sin6_addr))
                        a6.sin6_addr = in6addr_loopback;
                sa = (struct sockaddr *) &a6, salen = sizeof(a6), fam = AF_INET6;
        } else
                return -EINVAL;
        _cleanup_close_ int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        int64_t end = mono_ms() + timeout_ms;
        if (connect(fd, sa, salen) < 0 && errno != EINPROGRESS)
                return -errno;
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        if (poll(&p, 1, timeout_ms) != 1)
                return -ETIMEDOUT;
        static const char req[] = "GET /.watchdog HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        if (send(fd, req, sizeof(req) - 1, MSG_NOSIGNAL) != (ssize_t) sizeof(req) - 1)
                return -EIO;
        char buf[16];
        size_t got = 0;
        while (got < 9) {
                int64_t left = end - mono_ms();
                p = (struct pollfd) { .fd = fd, .events = POLLIN };
                if (left <= 0 || poll(&p, 1, (int) left) != 1)
                        return -ETIMEDOUT;
                ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
                if (n <= 0)
                        return -EIO;
                got += (size_t) n;
        }
        return strncmp(buf, "HTTP/1.", 7) == 0 ? 0 : -EPROTO;
}

static int watchdog_store_ok(struct ctl *c) {
        _cleanup_free_ char *v = NULL;
        return store_meta_get_or_set(c->store, "instance_id", c->instance_id ? c->instance_id : "", &v);
}

static void *watchdog_thread(void *p) {
        struct watchdog *w = p;
        int64_t period_ms = (int64_t) (w->usec / 2000);
        if (period_ms < 10)
                period_ms = 10;
        /* Checks get at most half the period, so a healthy daemon never pings late. */
        int check_ms = (int) (period_ms / 2 > 5000 ? 5000 : period_ms / 2 < 5 ? 5 : period_ms / 2);
        bool was_ok = true;
        pthread_mutex_lock(&w->lock);
        while (!w->quit) {
                pthread_mutex_unlock(&w->lock);
                int h = watchdog_http_ok(w, check_ms);
                int s = h >= 0 ? watchdog_store_ok(w->c) : 0;
                bool ok = h >= 0 && s >= 0;
                if (ok)
                        sd_notify(0, "WATCHDOG=1");
                else if (was_ok)
                        log_warning("watchdog: not pinging systemd: %s", h < 0 ? "the HTTP server did not answer" : "the store did not answer");
                was_ok = ok;
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_sec += period_ms / 1000;
                ts.tv_nsec += (period_ms % 1000) * 1000000L;
                if (ts.tv_nsec >= 1000000000L)
                        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
                pthread_mutex_lock(&w->lock);
                while (!w->quit && pthread_cond_timedwait(&w->cond, &w->lock, &ts) == 0)
                        ;
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

/* Starts the pinger when systemd asked for one (WatchdogSec=); a no-op otherwise. */
static void watchdog_start(struct watchdog *w, struct ctl *c, int port) {
        uint64_t usec = 0;
        *w = (struct watchdog) { .c = c, .port = port };
        pthread_mutex_init(&w->lock, NULL);
        cond_init_monotonic(&w->cond);
        if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
                return;
        w->usec = usec;
        if (pthread_create(&w->thread, NULL, watchdog_thread, w) != 0) {
                log_warning("could not start the watchdog thread; systemd will restart controld when WatchdogSec= passes");
                return;
        }
        w->started = true;
        log_info("systemd watchdog: pinging every %llu ms", (unsigned long long) (usec / 2000));
}

static void watchdog_stop(struct watchdog *w) {
        pthread_mutex_lock(&w->lock);
        w->quit = true;
        pthread_cond_broadcast(&w->cond);
        pthread_mutex_unlock(&w->lock);
        if (w->started)
                pthread_join(w->thread, NULL);
        w->started = false;
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
}

static void usage(void) {
        fprintf(stderr, "usage: controld [-d] [-n] [-f FILE]\n"
                        "       controld admin -f FILE COMMAND ...   (controld admin help)\n"
                        "  -f FILE  configuration (default /etc/paddock/controld.conf)\n"
                        "  -d       stay in the foreground and log to stderr\n"
                        "  -n       check the configuration, print \"configuration OK\" and exit\n");
}

static int controld_main(int argc, char **argv) {
        const char *conf = "/etc/paddock/controld.conf";
        bool foreground = false, check = false;
        struct ctl c;
        struct http_server *http = NULL;
        int opt, r;

        if (argc > 1 && !strcmp(argv[1], "admin"))
                return admin_main(argc - 1, argv + 1);
        while ((opt = getopt(argc, argv, "dnf:h")) != -1) {
                switch (opt) {
                case 'd': foreground = true; break;
                case 'n': check = true; break;
                case 'f': conf = optarg; break;
                default: usage(); return opt == 'h' ? 0 : 2;
                }
        }
        log_open("controld", foreground ? LOG_TARGET_STDERR : LOG_TARGET_AUTO);
        if (check) {
                struct err err = { 0 };
                struct config *cfg = NULL;
                if (config_load(conf, &cfg, &err) < 0) {
                        fprintf(stderr, "%s\n", err.message);
                        return 1;
                }
                config_free(cfg);
                printf("configuration OK\n");
                return 0;
        }
        /* Under systemd (Type=notify) we stay in the foreground; otherwise -d is needed to
         * keep the terminal, and without it we detach. */
        if (!foreground && !getenv("NOTIFY_SOCKET") && !getenv("JOURNAL_STREAM")) {
                if (daemon(0, 0) < 0)
                        return log_error_errno(errno, "Failed to detach: %m") ? 1 : 1;
        }

        sigset_t ss;
        sigemptyset(&ss);
        sigaddset(&ss, SIGTERM);
        sigaddset(&ss, SIGINT);
        sigaddset(&ss, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &ss, NULL);
        signal(SIGPIPE, SIG_IGN);

        /* Before any thread: the docker child keeps the privileges, this process drops them. */
        if (dockerchild_setup(conf) < 0)
                return 1;
        r = ctl_open(&c, conf, true);
        if (r < 0) {
                ctl_close(&c);
                return 1;
        }
        {
                int lvl = log_level_from_string(c.cfg->log_level);
                if (lvl >= 0)
                        log_set_max_level(lvl);
        }
        background_start(&c);   /* heals crash leftovers first, so before serving */
        {
                struct err err = { 0 };
                if (ctl_egress_sync_start(&c, &err) < 0)
                        log_error("node.sync responder did not start: %s (agents cannot converge at start-up)", err.message);
                if (ctl_snapshot_start(&c, &err) < 0)
                        log_error("snapshots are not available: %s", err.message);
        }
        r = http_start(&c, route_match, &http);
        if (r < 0) {
                background_stop(&c);
                ctl_close(&c);
                return 1;
        }
        if (preview_start(&c) < 0) {
                http = http_stop(http);
                background_stop(&c);
                ctl_close(&c);
                return 1;
        }
        metrics_add_source(c.metrics, preview_metrics_render);
        if (e2b_start(&c) < 0) {
                preview_stop();
                http = http_stop(http);
                background_stop(&c);
                ctl_close(&c);
                return 1;
        }
        log_info("controld ready on %s:%d (driver %s, store %s)", c.cfg->listen_addr, http_port(http), c.drv->name,
                 c.cfg->db_path);
        sd_notify(0, "READY=1\nSTATUS=serving");
        struct watchdog wd;
        watchdog_start(&wd, &c, http_port(http));

        for (;;) {
                int sig = 0;
                if (sigwait(&ss, &sig) != 0)
                        continue;
                if (sig == SIGHUP) {
                        log_info("SIGHUP: configuration reload is not supported; restart controld to apply changes");
                        continue;
                }
                log_info("received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
                break;
        }
        sd_notify(0, "STOPPING=1");
        watchdog_stop(&wd);
        c.stopping = 1;
        ctl_notify_status(&c);
        /* Let open exec streams send their closing frame (they notice within a second)
         * before the server closes every connection. */
        {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 3;
                pthread_mutex_lock(&c.jobs_lock);
                while (c.streams_running > 0 && pthread_cond_timedwait(&c.jobs_cond, &c.jobs_lock, &ts) == 0)
                        ;
                pthread_mutex_unlock(&c.jobs_lock);
        }
        http = http_stop(http);
        e2b_stop();
        preview_stop();
        background_stop(&c);
        ctl_close(&c);
        return 0;
}

int main(int argc, char **argv) {
        /* glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so
         * after a few big request bodies every later one lands in a per-thread arena that
         * never shrinks: the soak test saw RSS settle at 10x its start with no leak. A fixed
         * threshold keeps large buffers in mmap, returned to the kernel on free. */
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        return controld_main(argc, argv);
}
