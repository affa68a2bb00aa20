/* conntrack.h — deleting the conntrack entries of connections an egress policy no
 * longer allows (conntrack.c). Private to nodeagent/; called by egress.c under its lock. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct nft_range;

/* Deletes the conntrack entries sandbox address src opened towards a destination
 * outside keep (all of them when n_keep is 0). Returns how many were deleted, or
 * -errno with err filled. Entries that expire meanwhile are not an error. */
int conntrack_revoke(uint32_t src, const struct nft_range *keep, size_t n_keep, char *err, size_t errlen);
