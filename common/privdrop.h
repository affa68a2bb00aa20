/* privdrop.h — what a privilege-separated daemon's processes share (nodeagent's privsep
 * children, controld's docker child and its network-facing parent): giving up capabilities
 * and groups, and forking a child with a message channel to it.
 */
#pragma once

#include <stdint.h>
#include <sys/types.h>

/* Keeps only the capabilities in keep (bit n = capability n) in every set, the bounding set
 * included, locks root's special treatment away where it may (securebits) and sets
 * no-new-privileges. keep = 0 from a process that is not root clears what a unit gave it
 * (ambient ones included). 0 or -errno. */
int caps_drop_except(uint64_t keep);
/* No supplementary groups (needs CAP_SETGID when there are some). 0 or -errno. */
int groups_drop(void);
/* socketpair(AF_UNIX, SOCK_SEQPACKET) and fork(), stdio flushed first. In the parent: the
 * child's pid (> 0) with *ret_fd the parent's end. In the child: 0 with *ret_fd the child's
 * end. -errno when either call failed (nothing is left open). bufsize > 0 sizes the parent's
 * send and the child's receive buffer, so that a request of that size always fits. */
pid_t fork_channel(int *ret_fd, int bufsize);
