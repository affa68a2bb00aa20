/* privdrop.c — see privdrop.h. */
#include <errno.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "privdrop.h"

int caps_drop_except(uint64_t keep) {
        struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
        struct __user_cap_data_struct d[2] = { 0 };

        /* Locks root's special treatment away (needs CAP_SETPCAP; under a systemd unit
         * whose bounding set lacks it, no-new-privs below does the job for execve). */
        (void) prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                                SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                                SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
                     0, 0, 0);
        for (int cap = 0; cap < 64; cap++) {
                if (keep & (UINT64_C(1) << cap))
                        continue;
                if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) < 0)
                        break;  /* past the kernel's last capability */
                if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EPERM)
                        return -errno;
        }
        (void) prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
        if (syscall(SYS_capget, &h, d) < 0)
                return -errno;
        uint64_t prm = ((uint64_t) d[1].permitted << 32 | d[0].permitted) & keep;
        d[0].effective = d[0].permitted = (uint32_t) prm;
        d[1].effective = d[1].permitted = (uint32_t) (prm >> 32);
        d[0].inheritable = d[1].inheritable = 0;
        if (syscall(SYS_capset, &h, d) < 0)
                return -errno;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        return 0;
}

int groups_drop(void) {
        int n = getgroups(0, NULL);
        if (n < 0)
                return -errno;
        if (n == 0)
                return 0;
        /* Needs CAP_SETGID (the unit grants it; every process drops it with the rest). */
        return setgroups(0, NULL) < 0 ? -errno : 0;
}

pid_t fork_channel(int *ret_fd, int bufsize) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return -errno;
        if (bufsize > 0) {
                (void) setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof(bufsize));
                (void) setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof(bufsize));
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
                int r = -errno;
                close(sv[0]);
                close(sv[1]);
                return r;
        }
        close(pid == 0 ? sv[0] : sv[1]);
        *ret_fd = pid == 0 ? sv[1] : sv[0];
        return pid;
}
