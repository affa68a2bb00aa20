/* daemon.c — opens and closes the parts of a controld (config, store, metrics, the scheduler
 * driver, the node bus): shared by the daemon (main.c) and the admin CLI (admin.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "guest.h"
#include "controld.h"
#include "dockerchild.h"
#include "driver.h"
#include "nodebus.h"
#include "log.h"
#include "strutil.h"
#include "ctl-egress.h"
#include "ctl-metrics.h"
#include "secret.h"
#include "snapshot.h"

/* Opens config, store and driver: shared by the daemon and the admin CLI. */
int ctl_open(struct ctl *c, const char *conf_path, bool with_driver) {
        struct err err = { 0 };
        int r;
        ctl_init(c);
        r = dockerchild_config(conf_path, &c->cfg, &err);
        if (r < 0) {
                fprintf(stderr, "%s\n", err.message);
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
        if ((r = secret_key_load(c, &err)) < 0)
                return log_error_errno(r, "%s", err.message);
        if (with_driver && (r = guest_host_init(c, &err)) < 0)
                return log_error_errno(r, "%s", err.message);
        if (with_driver) {
                r = driver_new(c, &c->drv);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up the %s driver: %m", c->cfg->driver);
                r = c->drv->ops->init(c->drv, &err);
                if (r < 0)
                        return log_error_errno(r, "Scheduler driver failed to start: %s", err.message);
                if (c->cfg->amqp_url) {
                        r = nodebus_new(c->cfg->amqp_url, c->cfg->amqp_exchange, &c->bus, &err);
                        if (r < 0)
                                return log_error_errno(r, "Failed to connect to the node bus ([amqp] url): %s", err.message);
                        log_info("egress enforced by node agents over exchange %s (confirm within %llums)",
                                 c->cfg->amqp_exchange, (unsigned long long) c->cfg->egress_timeout_ms);
                        nodebus_set_node_login(c->bus, c->cfg->amqp_node_login);
                        if (*c->cfg->amqp_node_login)
                                log_info("node messages count only from each node's broker login (%s)",
                                         c->cfg->amqp_node_login);
                        else
                                log_warning("[amqp] node_login is not set: which node a message comes from is taken "
                                            "from its app_id, which any user of the broker can set. Give each node a "
                                            "broker user of its own and set node_login (e.g. paddock-node-{node}); "
                                            "see OPERATIONS.md");
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
        ctl_snapshot_stop(c);
        c->drv = driver_free(c->drv);
        c->bus = nodebus_free(c->bus);
        c->store = store_close(c->store);
        c->metrics = metrics_free(c->metrics);
        c->cfg = config_free(c->cfg);
        guest_host_done(c);
        free(c->instance_id);
        c->instance_id = NULL;
}
