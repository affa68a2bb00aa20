/* nodeagent.c — main() of the per-host agent. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "nodeagent.h"

int nodeagent_main(int argc, char **argv) {
        const char *conf = "/etc/paddock/nodeagent.conf";
        bool foreground = false, check = false;
        struct agent_config cfg;
        char err[1024] = "";
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
        if (agent_config_load(conf, &cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "%s\n", err);
                return 1;
        }
        if (check) {
                printf("configuration OK\n");
                agent_config_done(&cfg);
                return 0;
        }
        log_set_max_level(log_level_from_string(cfg.log_level));
        int r = agent_run(&cfg);
        agent_config_done(&cfg);
        return r < 0 ? 1 : 0;
}
