/* network.c — which gVisor network mode sandboxes run with, for the journal and /healthz.
 *
 * runsc runs a sandbox's network either on its own user-space stack (netstack, "sandbox")
 * or by handing the sandbox's socket calls to the host kernel ("host"). Host mode is the
 * fallback where netstack cannot start (some kernels refuse it, gvisor#10704), and it widens
 * what a tenant's code can reach of the host kernel: an operator must know. The local driver
 * reads its runtime's arguments from Docker; on Nomad every node's agent reports its own
 * runtime with node.sync. Contract in controld.h. */
#include <pthread.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "controld.h"
#include "json.h"
#include "log.h"
#include "strutil.h"
#include "network.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char local_mode[16];            /* the local driver's runtime; "" = not known */
static struct {
        char node[129];
        char mode[16];
} nodes[NETWORK_NODES_MAX];
static size_t n_nodes;

/* Only the words runsc knows ("sandbox", "host", "none"), anything else as "unknown". */
static const char *mode_word(const char *m) {
        if (m && (!strcmp(m, "sandbox") || !strcmp(m, "host") || !strcmp(m, "none")))
                return m;
        return "unknown";
}

static void warn_host(const char *node) {
        log_warning("sandboxes%s%s run with gVisor's HOST network mode: their socket calls are handled by the host "
                    "kernel's network stack, not gVisor's own. Use a runtime with --network=sandbox where runsc's "
                    "netstack starts (see packaging/daemon.json); /healthz says so while it lasts",
                    node ? " on node " : "", node ? node : "");
}

void sandbox_network_note(const char *node, const char *mode) {
        const char *m = mode_word(mode);
        bool warn = false;
        pthread_mutex_lock(&lock);
        if (!node) {
                warn = strcmp(local_mode, m) != 0 && !strcmp(m, "host");
                strscpy(local_mode, m, sizeof(local_mode));
        } else {
                size_t i = 0;
                while (i < n_nodes && strcmp(nodes[i].node, node) != 0)
                        i++;
                if (i == n_nodes && n_nodes < NETWORK_NODES_MAX) {
                        strscpy(nodes[i].node, node, sizeof(nodes[i].node));
                        nodes[i].mode[0] = 0;
                        n_nodes++;
                }
                if (i < n_nodes) {
                        warn = strcmp(nodes[i].mode, m) != 0 && !strcmp(m, "host");
                        strscpy(nodes[i].mode, m, sizeof(nodes[i].mode));
                }
        }
        pthread_mutex_unlock(&lock);
        if (warn)
                warn_host(node);
        else if (!node)
                log_info("sandboxes run with gVisor's %s network mode", m);
}

cJSON *sandbox_network_json(void) {
        cJSON *o = cJSON_CreateObject(), *hosts = cJSON_CreateArray();
        size_t n_host = 0, n_sandbox = 0;
        pthread_mutex_lock(&lock);
        const char *mode = local_mode[0] ? local_mode : NULL;
        for (size_t i = 0; i < n_nodes; i++) {
                if (!strcmp(nodes[i].mode, "host")) {
                        if (n_host++ < 64)
                                cJSON_AddItemToArray(hosts, cJSON_CreateString(nodes[i].node));
                } else if (!strcmp(nodes[i].mode, "sandbox"))
                        n_sandbox++;
        }
        /* Nomad: every node on netstack is "sandbox"; any on host mode, "host" or "mixed". */
        if (!mode)
                mode = n_host ? (n_host == n_nodes ? "host" : "mixed") : n_sandbox && n_sandbox == n_nodes ? "sandbox" : "unknown";
        json_add_str(o, "mode", mode);
        pthread_mutex_unlock(&lock);
        cJSON_AddItemToObject(o, "host_nodes", hosts);
        return o;
}

bool sandbox_network_local_checkpointable(void) {
        pthread_mutex_lock(&lock);
        bool yes = !strcmp(local_mode, "sandbox");
        pthread_mutex_unlock(&lock);
        return yes;
}
