/* nodeagent.c — main() of the per-host agent. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "nodeagent.h"
#include "privdrop.h"
#include "strutil.h"

/* The privileged children first, while we still hold the capabilities they keep;
 * then the parent drops every capability, its supplementary groups and the secrets only
 * the docker process needs, before it reads anything from the network. */
static int start_children(struct agent_config *cfg) {
        struct err err = { 0 };
        int r;
        if (cfg->egress_enabled) {
                /* Fail closed from the first moment: the table drops bridge traffic that has no
                 * confirmed policy before we accept any message. */
                if ((r = agent_egress_init(cfg, &err)) < 0)
                        return log_error_errno(r, "Cannot program the egress firewall: %s", err.message);
                log_info("egress firewall ready (table inet %s)", cfg->egress_table);
        }
        if ((r = privsep_spawn(PS_CHILD_DOCKER, cfg, &err)) < 0)
                return log_error_errno(r, "Cannot start the docker process: %s", err.message);
        const char *net = privsep_ready_note(PS_CHILD_DOCKER);
        if (!strcmp(net, "network=host"))
                log_warning("sandboxes on this node run with gVisor's HOST network mode ([agent] runtime_network = %s): "
                            "their socket calls are handled by the host kernel's network stack, not gVisor's own. "
                            "Use --network=sandbox where runsc's netstack starts; controld's /healthz lists this node",
                            cfg->runtime_network);
        else if (startswith(net, "network="))
                log_info("sandboxes on this node run with gVisor's %s network mode ([agent] runtime_network = %s)",
                         net + strlen("network="), cfg->runtime_network);
        if ((r = privsep_spawn(PS_CHILD_LOOKUP, cfg, &err)) < 0)
                return log_error_errno(r, "Cannot start the lookup process: %s", err.message);
        if (cfg->relay_listen && (r = privsep_spawn(PS_CHILD_RELAY, cfg, &err)) < 0)
                return log_error_errno(r, "Cannot start the relay process: %s", err.message);
        if (cfg->proxy_enabled) {
                if ((r = privsep_spawn(PS_CHILD_PROXY, cfg, &err)) < 0)
                        return log_error_errno(r, "Cannot start the egress proxy: %s", err.message);
                log_info("egress proxy listening on port %d (sandboxes' rule hosts are steered to it)", (int) cfg->proxy_port);
        }
        /* The docker group is root on the host through its socket, and the registry
         * credentials are the node's push rights: both stay with the docker process alone. */
        agent_config_scrub_docker_secrets(cfg);
        if ((r = groups_drop()) < 0)
                return log_error_errno(r, "Cannot drop the supplementary groups (the unit must grant CAP_SETGID): %m");
        if ((r = caps_drop_except(0)) < 0)
                return log_error_errno(r, "Cannot drop capabilities: %m");
        log_debug("capabilities dropped; egress process %d, docker process %d", (int) privsep_child_pid(PS_CHILD_EGRESS),
                  (int) privsep_child_pid(PS_CHILD_DOCKER));
        return 0;
}

int nodeagent_main(int argc, char **argv) {
        const char *conf = "/etc/paddock/nodeagent.conf";
        bool foreground = false, check = false;
        struct agent_config cfg;
        struct err err = { 0 };
        int opt;

        while ((opt = getopt(argc, argv, "dnf:h")) != -1) {
                switch (opt) {
                case 'd': foreground = true; break;
                case 'n': check = true; break;
                case 'f': conf = optarg; break;
                default:
                        fprintf(stderr, "usage: nodeagent [-d] [-n] [-f FILE]\n"
                                        "  -f FILE  configuration (default /etc/paddock/nodeagent.conf)\n"
                                        "  -d       foreground, logs on stderr\n"
                                        "  -n       check the configuration and exit\n");
                        return opt == 'h' ? 0 : 2;
                }
        }
        log_open("nodeagent", foreground ? LOG_TARGET_STDERR : LOG_TARGET_AUTO);
        if (agent_config_load(conf, &cfg, &err) < 0) {
                fprintf(stderr, "%s\n", err.message);
                return 1;
        }
        if (check) {
                printf("configuration OK\n");
                agent_config_done(&cfg);
                return 0;
        }
        log_set_max_level(log_level_from_string(cfg.log_level));
        int r = nomad_self_resolve_node_id(&cfg, 30000, &err);
        if (r < 0) {
                log_error("%s", err.message);
                agent_config_done(&cfg);
                return 1;
        }
        r = start_children(&cfg);
        if (r >= 0 && (r = snapshot_start(&cfg)) < 0)
                log_error_errno(r, "Cannot start the snapshot worker: %m");
        /* /metrics in the parent, which holds no capability by now. */
        if (r >= 0 && (r = agent_metrics_start(&cfg, &err)) < 0)
                log_error("Cannot serve /metrics: %s", err.message);
        else if (r >= 0 && cfg.metrics_listen)
                log_info("serving /metrics on %s", cfg.metrics_listen);
        if (r >= 0 && (r = relay_start(&cfg, &err)) < 0)
                log_error("Cannot start the agent relay: %s", err.message);
        else if (r >= 0 && cfg.relay_listen)
                log_info("relaying to in-sandbox agents on %s%s (sockets under %s/volumes)", cfg.relay_listen,
                         cfg.relay_tls_cert ? " with TLS" : "",
                         cfg.relay_docker_root);
        if (r >= 0)
                r = agent_run(&cfg);
        relay_stop();
        agent_metrics_stop();
        snapshot_stop();
        privsep_stop();
        agent_config_done(&cfg);
        return r < 0 ? 1 : 0;
}
