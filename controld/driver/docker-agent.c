/* docker-agent.c — the in-sandbox agent's socket on the Docker driver: waiting for it after a
 * start or a restore, and unparking an agent a checkpoint parked (docker.c's place,
 * docker-memory.c's restore, docker-fork.c's copies). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "ddriver.h"
#include "docker.h"
#include "dockerchild.h"
#include "log.h"
#include "pj_agent.h"
#include "strutil.h"

/* A sandbox is ready once its agent listens: its socket appears (bounded by the create
 * deadline). When it does not, commands take the driver's exec path; the usual cause is a
 * runtime without --host-uds=create, which is said once. */
void wait_agent_socket(struct driver *d, const struct sandbox *sb, int64_t deadline) {
        static bool warned;
        _cleanup_free_ char *path = xasprintf("%s/volumes/" PJ_AGENT_VOLUME_PREFIX "%s/_data/" PJ_AGENT_SOCKET_NAME, P(d)->root_dir, sb->id);
        int64_t end = mono_ms() + 10000;
        if (end > deadline)
                end = deadline;
        if (dockerchild_running() && dockerchild_agent_wait(sb->id, (int) (end > mono_ms() ? end - mono_ms() : 1)) == 0)
                return;
        for (; !dockerchild_running();) {
                struct stat st;
                if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
                        return;
                if (mono_ms() > end)
                        break;
                usleep(2000);
        }
        log_ctx_set("SANDBOX_ID", sb->id);
        if (!warned) {
                warned = true;
                log_warning("the sandbox's agent socket did not appear at %s: commands use the driver's exec path and "
                            "/processes answers 503. Does the runtime run with --host-uds=create (packaging/daemon.json)?",
                            path);
        } else
                log_notice("the sandbox's agent socket did not appear; commands use the driver's exec path");
}

/* The agent listens again (the unpark signal to PID 1); waits for its socket, bounded. */
void dd_unpark_agent(struct driver *d, const struct sandbox *sb, const char *container, int64_t deadline) {
        _cleanup_free_ char *sig = xasprintf("%d", PJ_AGENT_UNPARK_SIGNAL);
        int r = docker_container_kill(D(d), container, sig);
        if (r < 0)
                log_warning("cannot unpark the sandbox's agent: %s", dmsg(r));
        else
                wait_agent_socket(d, sb, deadline);
}
