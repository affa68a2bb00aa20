/* agent.h — the in-sandbox agent (paddock-init, nodeagent/paddock-init/) from controld's side:
 * which binary goes into sandboxes, each sandbox's secret, and connections to its socket.
 *
 * The secret of a sandbox is HMAC-SHA256(agent key, sandbox id) in hex: the key is made once
 * per store (meta "agent_key") and never leaves controld, so nothing per sandbox is stored
 * and a restarted controld still reaches every agent. The sandbox gets its secret once, as
 * a read-only file; the host never reads anything back from the sandbox's side. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "guest-conn.h"

struct ctl;
struct sandbox;

#define GUEST_SECRET_LEN 64
/* Where the agent sits inside every sandbox. */
#define GUEST_IN_BINARY "/.paddock/init"
#define GUEST_IN_SECRET "/.paddock/secret"
#define GUEST_IN_RUN "/.paddock/run"
#define GUEST_IN_SOCKET GUEST_IN_RUN "/agent.sock"
/* The socket directory is a tmpfs of this size: the sandbox can write there, so it is capped. */
#define GUEST_RUN_BYTES (64 * 1024)
/* Connect + HELLO; a live agent answers in well under a millisecond. */
#define GUEST_CONNECT_TIMEOUT_MS 3000

/* Resolves [init] binary and dir and loads the agent key (daemon start). The agent is off
 * (c->agent_binary NULL, sandboxes get tini and the driver's exec path) when binary = none
 * or no binary is found; that is logged, not an error. */
int guest_host_init(struct ctl *c, char *err, size_t errlen);
void guest_host_done(struct ctl *c);
/* The secret of sandbox_id, GUEST_SECRET_LEN hex digits. */
void guest_secret(const struct ctl *c, const char *sandbox_id, char out[GUEST_SECRET_LEN + 1]);
/* The host file that is bound read-only at GUEST_IN_SECRET (xmalloc'd). */
char *guest_secret_path(const struct ctl *c, const char *sandbox_id);
/* Writes that file (0400, replaced atomically); 0 or -errno. */
int guest_secret_write(const struct ctl *c, const char *sandbox_id);
void guest_secret_remove(const struct ctl *c, const char *sandbox_id);
/* The agent command line (NULL-terminated, static). */
const char *const *guest_entrypoint(void);
/* Connects to sb's agent through the driver: 0, or -errno with a reason in err:
 * -EOPNOTSUPP the driver or sandbox has no agent path, -ENOENT/-ECONNREFUSED no agent
 * listening, -ENOTSOCK/-EPERM something else at its socket, -EACCES refused secret,
 * -ETIMEDOUT no answer in time. */
int guest_connect(struct ctl *c, const struct sandbox *sb, struct guest_client **ret, char *err, size_t errlen);
/* Whether an guest_connect failure means "use the driver's exec path instead". */
bool guest_fallback_ok(int r);
