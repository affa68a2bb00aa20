/* nodeagenttest.h — what the test-nodeagent-* programs share: a nodeagent of the test's own
 * on the shared broker (one per test process: agent_pid, node_id, conf_path, log_path), a
 * client that publishes to it and waits for replies, network + mount namespaces with an
 * /etc/hosts of the test's making, and the agent's egress handlers run in-process against
 * real nftables. Contracts are stated at each definition in nodeagenttest.c; any failed step
 * fails the test, and a missing nftables netlink or namespace support skips it. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <amqp.h>

#include "nodeagent.h"

struct client {
        amqp_connection_state_t conn;
        amqp_bytes_t reply_q;
        const char *exchange;
        const char *user_id;    /* set on every publish (the login, which RabbitMQ checks); NULL = none */
};

extern pid_t agent_pid;
extern char node_id[64], conf_path[512], log_path[512];
extern char egress_log[512];
extern struct agent_config sync_cfg;

void stop_agent(void *ud);
void write_conf(const char *extra);
void start_agent(void);
void client_open_on(struct client *c, const char *exchange);
/* Logged in as user, with user_id = user on every publish. */
void client_open_as(struct client *c, const char *exchange, const char *user, const char *password);
void client_open(struct client *c);
void client_close(struct client *c);
int publish(struct client *c, const char *key, const char *body, const char *corr, char **ret_reply);
void wait_agent_ready(struct client *c);
void egress_init_or_skip(struct agent_config *cfg);
int publish_until_returned(struct client *c, const char *node, const char *corr);
int notify_socket_env(const char *name, int flags, char npath[static 300]);
void hosts_rewrite(const char *hosts_text);
void netns_with_hosts(const char *hosts_text);
struct agent_config egress_cfg(char *node);
char *nft_dump(void);
char *apply_restricted(const struct agent_config *cfg, const char *sbx, const char *ip, const char *allow);
char *remove_sandbox(const struct agent_config *cfg, const char *sbx, const char *ip);
void egress_setup(const char *hosts_text);
void egress_setup_visible(const char *hosts_text, int *ret_home, int *ret_ns);
void sync_cfg_set(const char *tag, int64_t prefetch, char exchange[static 64], char nid[static 64]);
void *agent_thread(void *ud);
bool nft_has_chain(int ns_fd, int home_fd, const char *id);

/* Messages: an egress.apply restricting sandbox (%s) at ip (%s) to allow (%s: the items
 * of a JSON array); an egress.remove of sandbox (%s) at ip (%s). */
#define APPLY_RESTRICTED                                                                        \
        "{\"type\":\"egress.apply\",\"sandbox_id\":\"%s\",\"ip\":\"%s\",\"mode\":\"restricted\",\"allow\":[%s]}"
#define REMOVE "{\"type\":\"egress.remove\",\"sandbox_id\":\"%s\",\"ip\":\"%s\"}"
/* The sandbox id the privsep and node.sync tests use. */
#define SBX "0123456789abcdef01234567"
