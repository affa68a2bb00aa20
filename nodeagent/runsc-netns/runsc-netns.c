/* paddock-runsc-netns — runs runsc with runsc's own network stack on kernels where this runsc
 * refuses it.
 *
 * runsc (Debian's 0.0~20240729) decides that it was started in the host's root network
 * namespace, and refuses --network=sandbox ("cannot run with network enabled in root network
 * namespace", gvisor#10704), by looking for /proc/sys/net/core/rmem_default, which kernels 6.x
 * have in every network namespace. Docker starts the runtime in the container's own namespace,
 * so the check is wrong there. This wrapper gives runsc what the check expects: a private mount
 * namespace (nothing propagates back to the host) whose /proc/sys is a small tmpfs holding the
 * real vm, kernel, fs, user, dev, abi and debug trees bound back, and no net tree; then it execs
 * runsc with its arguments unchanged. runsc's sandbox and gofer inherit that namespace.
 *
 * Docker (or Nomad's docker driver) names it as a runtime's path in daemon.json:
 *   "runsc-net": {"path": "/usr/lib/paddock/paddock-runsc-netns",
 *                 "runtimeArgs": ["--overlay2=none", "--host-uds=create", "--network=sandbox"]}
 * The runsc it runs is /usr/bin/runsc, or $PADDOCK_RUNSC when set to an absolute path.
 * No argument is read or changed; on any failure it says why on stderr and exits 125 (what the
 * OCI runtimes use for "the runtime itself failed"), before runsc ran.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAIL 125

static int fail(const char *what, const char *path) {
        fprintf(stderr, "paddock-runsc-netns: %s %s: %s\n", what, path, strerror(errno));
        return FAIL;
}

int main(int argc, char **argv) {
        static const char *const keep[] = { "vm", "kernel", "fs", "user", "dev", "abi", "debug" };
        enum { N_KEEP = sizeof(keep) / sizeof(keep[0]) };
        const char *runsc = getenv("PADDOCK_RUNSC");
        if (!runsc || runsc[0] != '/')
                runsc = "/usr/bin/runsc";
        (void) argc;

        if (unshare(CLONE_NEWNS) < 0)
                return fail("unshare", "(mount namespace)");
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
                return fail("make private", "/");
        /* The trees to keep, held open before the tmpfs hides them. */
        int fds[N_KEEP];
        for (int i = 0; i < N_KEEP; i++) {
                char path[64];
                snprintf(path, sizeof(path), "/proc/sys/%s", keep[i]);
                fds[i] = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (fds[i] < 0 && errno != ENOENT)
                        return fail("open", path);
        }
        if (mount("paddock-sysctl", "/proc/sys", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,mode=0755") < 0)
                return fail("mount tmpfs on", "/proc/sys");
        for (int i = 0; i < N_KEEP; i++) {
                if (fds[i] < 0)
                        continue;
                char path[64], src[64];
                snprintf(path, sizeof(path), "/proc/sys/%s", keep[i]);
                snprintf(src, sizeof(src), "/proc/self/fd/%d", fds[i]);
                if (mkdir(path, 0555) < 0)
                        return fail("mkdir", path);
                if (mount(src, path, NULL, MS_BIND | MS_REC, NULL) < 0)
                        return fail("bind", path);
                close(fds[i]);
        }
        if (mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                return fail("remount read-only", "/proc/sys");
        execv(runsc, argv);
        return fail("exec", runsc);
}
