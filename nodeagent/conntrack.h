/* conntrack.h — deleting the conntrack entries of connections an egress policy no
 * longer allows, and whether a change of policy may forbid any (conntrack.c). Private to
 * nodeagent/; called by egress.c under its lock. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "pj_egress.h"

struct nft_range;

/* Deletes the conntrack entries sandbox address src opened towards a destination
 * outside keep (all of them when n_keep is 0). Returns how many were deleted, or
 * -errno with err filled. Entries that expire meanwhile are not an error. */
int conntrack_revoke(uint32_t src, const struct nft_range *keep, size_t n_keep, struct err *err);

/* What egress last applied per sandbox (id: its 24 hex characters): a policy is set once
 * its batch and sweep succeeded, forgotten when either failed or the sandbox went. */
void conntrack_policy_set(const char *id, enum pj_egress_mode mode, const struct nft_range *allow, size_t n_allow);
void conntrack_policy_forget(const char *id);
/* Whether going from what was last set for id (nothing set: unknown, counts as tightening)
 * to the new policy can forbid a connection the old one let through, so that an apply that
 * does not tighten skips the sweep. allow is merged and sorted (nft_ranges_merge). */
bool conntrack_policy_tightens(const char *id, enum pj_egress_mode mode, const struct nft_range *allow,
                               size_t n_allow);
