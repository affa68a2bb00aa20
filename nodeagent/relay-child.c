/* relay-child.c — the relay child's one step (nodeagent.h, relay_open_agent): connect to a
 * sandbox's agent socket without following a link. relay.c is the parent's listener that
 * asks for it through privsep_call_fd; privsep.c's relay child calls this. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "nodeagent.h"
#include "pj_agent.h"
#include "strutil.h"
#include "unixsock.h"

int relay_open_agent(const struct agent_config *cfg, const char *sandbox_id, int *ret_fd, char *msg, size_t msglen) {
        char path[1024];
        if ((size_t) snprintf(path, sizeof(path), "%s/volumes/" PJ_AGENT_VOLUME_PREFIX "%s/_data/" PJ_AGENT_SOCKET_NAME, cfg->relay_docker_root,
                              sandbox_id) >= sizeof(path)) {
                snprintf(msg, msglen, "the agent socket path is too long");
                return -ENAMETOOLONG;
        }
        int fd = unix_connect_nofollow(path, mono_ms() + RELAY_OPEN_MS);
        if (fd < 0) {
                snprintf(msg, msglen, "sandbox %s: %s", sandbox_id,
                         fd == -ENOENT      ? "no agent socket on this node"
                         : fd == -ENOTSOCK  ? "something other than a socket at the agent's place"
                         : fd == -EPERM     ? "the agent socket has an unexpected owner"
                         : fd == -EAGAIN    ? "the agent accepts no more connections"
                                            : strerror(-fd));
                return fd == -EAGAIN ? -EBUSY : fd;
        }
        *ret_fd = fd;
        return 0;
}
