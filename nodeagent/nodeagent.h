/* nodeagent.h — private header of the per-host agent. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct agent_config {
        char *node_id;        /* routing key of this node's queue (the Nomad node ID in production) */
        char *log_level;
        char *amqp_url;
        char *exchange;       /* direct exchange shared with controld */
        int64_t prefetch;
        /* [egress] */
        bool egress_enabled;
        char *egress_table;
        char **egress_bridges;        /* NULL-terminated */
        char **egress_deny;           /* NULL-terminated CIDRs */
        char *egress_dns;             /* resolver IPv4 or NULL */
        int64_t egress_priority;
};

/* agent.c: programs the firewall from [egress] (when enabled). */
int agent_egress_init(const struct agent_config *cfg, char *err, size_t errlen);

/* agent.c */
int agent_config_load(const char *path, struct agent_config *ret, char *err, size_t errlen);
void agent_config_done(struct agent_config *c);
/* The reply (JSON text, xmalloc'd) for one message body. */
char *agent_handle(const struct agent_config *cfg, const char *body, size_t len);
/* Connects, consumes until SIGTERM/SIGINT, reconnecting with backoff. */
int agent_run(const struct agent_config *cfg);

/* nodeagent.c */
int nodeagent_main(int argc, char **argv);
