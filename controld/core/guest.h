/* guest.h — the in-sandbox init (paddock-init, nodeagent/paddock-init/) from the core's side:
 * which binary goes into sandboxes, the key its secrets derive from (guest/guest-secret.h),
 * and connections to it through the driver. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "guest-conn.h"
#include "guest-secret.h"

struct ctl;
struct sandbox;

/* Resolves [init] binary and dir and loads the agent key (daemon start). The agent is off
 * (c->agent_binary NULL, sandboxes get tini and the driver's exec path) when binary = none
 * or no binary is found; that is logged, not an error. */
int guest_host_init(struct ctl *c, struct err *err);
void guest_host_done(struct ctl *c);
/* Connects to sb's agent through the driver: 0, or -errno with a reason in err:
 * -EOPNOTSUPP the driver or sandbox has no agent path, -ENOENT/-ECONNREFUSED no agent
 * listening, -ENOTSOCK/-EPERM something else at its socket, -EACCES refused secret,
 * -ETIMEDOUT no answer in time. */
int guest_connect(struct ctl *c, const struct sandbox *sb, struct guest_client **ret, struct err *err);
/* Whether a guest_connect failure means "use the driver's exec path instead". */
bool guest_fallback_ok(int r);
