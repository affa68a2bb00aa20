/* network.h — the gVisor network mode sandboxes run with (network.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "controld.h"

/* The gVisor network mode networked sandboxes run with (network.c): "sandbox" (runsc's own
 * netstack) or "host" (socket calls handled by the host kernel: a wider attack surface).
 * sandbox_network_note records what the local driver read from its runtime (node NULL) or
 * what a node's agent reported with node.sync; a "host" is logged loudly, once per node.
 * sandbox_network_json: {"mode": "sandbox"|"host"|"mixed"|"unknown", "host_nodes": [...]}
 * for /healthz ("mixed": some nodes run host mode). At most NETWORK_NODES_MAX nodes are
 * remembered; host_nodes lists at most 64. */
#define NETWORK_NODES_MAX 4096
void sandbox_network_note(const char *node, const char *mode);
struct cJSON *sandbox_network_json(void);
/* Whether the local driver's networked sandboxes run on runsc's own stack ("sandbox"), the
 * only network gVisor can checkpoint (pause with memory, fork). */
bool sandbox_network_local_checkpointable(void);
