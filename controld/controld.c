/* controld.c — main() of the control daemon: config, store, driver, HTTP, background work. */
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
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "nodebus.h"
#include "log.h"
#include "strutil.h"

static unsigned lock_index(const char *id) {
        unsigned h = 2166136261u;
        for (; *id; id++)
                h = (h ^ (unsigned char) *id) * 16777619u;
        return h % 64;
}

void ctl_sandbox_lock(struct ctl *c, const char *id) { pthread_mutex_lock(&c->sb_locks[lock_index(id)]); }
void ctl_sandbox_unlock(struct ctl *c, const char *id) { pthread_mutex_unlock(&c->sb_locks[lock_index(id)]); }

struct sandbox_lock sandbox_lock_take(struct ctl *c, const char *id) {
        struct sandbox_lock l = { .c = c };
        snprintf(l.id, sizeof(l.id), "%s", id);
        ctl_sandbox_lock(c, l.id);
        return l;
}

void sandbox_lock_release(struct sandbox_lock *l) {
        if (!l->c)
                return;
        ctl_sandbox_unlock(l->c, l->id);
        l->c = NULL;
}

void ctl_notify_status(struct ctl *c) {
        pthread_mutex_lock(&c->wait_lock);
        c->status_gen++;
        pthread_cond_broadcast(&c->wait_cond);
        pthread_mutex_unlock(&c->wait_lock);
}

struct job { struct ctl *c; void (*fn)(struct ctl *c, char *arg); char *arg; };

static void *job_thread(void *p) {
        struct job *j = p;
        j->fn(j->c, j->arg);
        log_ctx_reset();
        pthread_mutex_lock(&j->c->jobs_lock);
        j->c->jobs_running--;
        pthread_cond_broadcast(&j->c->jobs_cond);
        pthread_mutex_unlock(&j->c->jobs_lock);
        free(j->arg);
        free(j);
        return NULL;
}

int ctl_spawn_job(struct ctl *c, void (*fn)(struct ctl *c, char *arg), char *arg) {
        struct job *j = xnew0(struct job, 1);
        pthread_t t;
        pthread_attr_t at;
        *j = (struct job) { c, fn, arg };
        pthread_mutex_lock(&c->jobs_lock);
        if (c->stopping) {
                pthread_mutex_unlock(&c->jobs_lock);
                free(arg);
                free(j);
                return -ESHUTDOWN;
        }
        c->jobs_running++;
        pthread_mutex_unlock(&c->jobs_lock);
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int r = pthread_create(&t, &at, job_thread, j);
        pthread_attr_destroy(&at);
        if (r != 0) {
                pthread_mutex_lock(&c->jobs_lock);
                c->jobs_running--;
                pthread_mutex_unlock(&c->jobs_lock);
                free(arg);
                free(j);
                return -r;
        }
        return 0;
}

static void ctl_init(struct ctl *c) {
        pthread_condattr_t ca;
        memset(c, 0, sizeof(*c));
        pthread_mutex_init(&c->wait_lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&c->wait_cond, &ca);
        pthread_condattr_destroy(&ca);
        for (size_t i = 0; i < ELEMENTSOF(c->sb_locks); i++)
                pthread_mutex_init(&c->sb_locks[i], NULL);
        pthread_mutex_init(&c->jobs_lock, NULL);
        pthread_cond_init(&c->jobs_cond, NULL);
}

/* Opens config, store and driver: shared by the daemon and the admin CLI. */
int ctl_open(struct ctl *c, const char *conf_path, bool with_driver) {
        char err[1024] = "";
        int r;
        ctl_init(c);
        r = config_load(conf_path, &c->cfg, err, sizeof(err));
        if (r < 0) {
                fprintf(stderr, "%s\n", err);
                return r;
        }
        r = store_open(c->cfg->db_path, &c->store);
        if (r < 0)
                return log_error_errno(r, "Failed to open the store %s: %m", c->cfg->db_path);
        {
                char fresh[HEXID_LEN + 1];
                hexid_new(fresh);
                r = store_meta_get_or_set(c->store, "instance_id", fresh, &c->instance_id);
                if (r < 0)
                        return log_error_errno(r, "Failed to read the instance id from the store: %m");
        }
        c->metrics = metrics_new();
        if (with_driver) {
                r = driver_docker_new(c, &c->drv);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up the docker driver: %m");
                r = c->drv->init(c->drv, err, sizeof(err));
                if (r < 0)
                        return log_error_errno(r, "Scheduler driver failed to start: %s", err);
                if (c->cfg->amqp_url) {
                        r = nodebus_new(c->cfg->amqp_url, c->cfg->amqp_exchange, &c->bus, err, sizeof(err));
                        if (r < 0)
                                return log_error_errno(r, "Failed to connect to the node bus ([amqp] url): %s", err);
                        log_info("egress enforced by node agents over exchange %s (confirm within %llums)",
                                 c->cfg->amqp_exchange, (unsigned long long) c->cfg->egress_timeout_ms);
                } else
                        log_warning("[amqp] url is not set: NO node agent enforces egress. restricted and open sandboxes "
                                    "get the plain bridge with no allowlist and no always-deny set; only deny_all "
                                    "(no network) holds. Set [amqp] url to enforce egress.");
        }
        return 0;
}

void ctl_close(struct ctl *c) {
        pthread_mutex_lock(&c->jobs_lock);
        c->stopping = 1;
        while (c->jobs_running > 0)
                pthread_cond_wait(&c->jobs_cond, &c->jobs_lock);
        pthread_mutex_unlock(&c->jobs_lock);
        ctl_egress_sync_stop(c);
        c->drv = driver_free(c->drv);
        c->bus = nodebus_free(c->bus);
        c->store = store_close(c->store);
        c->metrics = metrics_free(c->metrics);
        c->cfg = config_free(c->cfg);
        free(c->instance_id);
        c->instance_id = NULL;
}

static void usage(void) {
        fprintf(stderr, "usage: controld [-d] [-n] [-f FILE]\n"
                        "       controld admin -f FILE COMMAND ...   (controld admin help)\n"
                        "  -f FILE  configuration (default /etc/paddock/controld.conf)\n"
                        "  -d       stay in the foreground and log to stderr\n"
                        "  -n       check the configuration, print \"configuration OK\" and exit\n");
}

int controld_main(int argc, char **argv) {
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
                char err[1024] = "";
                struct config *cfg = NULL;
                if (config_load(conf, &cfg, err, sizeof(err)) < 0) {
                        fprintf(stderr, "%s\n", err);
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
                char err[512] = "";
                if (ctl_egress_sync_start(&c, err, sizeof(err)) < 0)
                        log_error("node.sync responder did not start: %s (agents cannot converge at start-up)", err);
        }
        r = http_start(&c, &http);
        if (r < 0) {
                background_stop(&c);
                ctl_close(&c);
                return 1;
        }
        log_info("controld ready on %s:%d (driver %s, store %s)", c.cfg->listen_addr, http_port(http), c.drv->name,
                 c.cfg->db_path);
        sd_notify(0, "READY=1\nSTATUS=serving");

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
        background_stop(&c);
        ctl_close(&c);
        return 0;
}
