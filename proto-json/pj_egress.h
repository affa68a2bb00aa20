/* pj_egress.h — egress policy types and allowlist entry validation.
 *
 * Shared by controld (public API validation) and nodeagent (firewall
 * programming), so that both sides agree on exactly what an allowlist entry
 * is. Entries are untrusted user input: every byte is checked, nothing is
 * resolved or looked up here, and text is normalised so that equal entries
 * compare equal with strcmp().
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

/* Maximum number of allowlist entries in one policy (public API: maxItems 50). */
#define PJ_EGRESS_MAX_ALLOW 50
/* Longest normalised entry (a 253-byte hostname) plus NUL, rounded up. */
#define PJ_ALLOW_NORM_MAX 256

enum pj_egress_mode {
        PJ_EGRESS_OPEN,       /* "open": unrestricted outbound (the default) */
        PJ_EGRESS_RESTRICTED, /* "restricted": default deny plus allowlist */
        PJ_EGRESS_DENY_ALL,   /* "deny_all": no outbound at all */
};

/* An egress policy. Zero-initialised = open with an empty allowlist.
 *   mode     the policy mode.
 *   allow    normalised allowlist entries (see pj_allow_entry_parse), unique,
 *            in first-seen order; each owned by the struct. Only ever
 *            non-empty when mode == PJ_EGRESS_RESTRICTED.
 *   n_allow  number of entries, 0..PJ_EGRESS_MAX_ALLOW. */
struct pj_egress {
        enum pj_egress_mode mode;
        char **allow;
        size_t n_allow;
};

/* Frees the allowlist and resets *e to open/empty. NULL-safe. */
void pj_egress_done(struct pj_egress *e);

/* Deep copy. *dst must not own anything yet. */
void pj_egress_copy(struct pj_egress *dst, const struct pj_egress *src);

/* "open" / "restricted" / "deny_all"; "unknown" for values outside the enum. */
const char *pj_egress_mode_to_string(enum pj_egress_mode m);

/* Exact, case-sensitive match of the wire names above. 0 or -EINVAL. */
int pj_egress_mode_from_string(const char *s, enum pj_egress_mode *ret);

enum pj_allow_kind {
        PJ_ALLOW_IPV4,     /* a single address, prefix 32 */
        PJ_ALLOW_CIDR,     /* a network a.b.c.d/n */
        PJ_ALLOW_HOSTNAME, /* a DNS name, resolved later by nodeagent */
};

/* One parsed allowlist entry.
 *   kind    which of the three forms it is.
 *   addr    IPv4/CIDR only: address in host byte order (for CIDR the network
 *           address; host bits are guaranteed zero). 0 for hostnames.
 *   prefix  IPv4: 32; CIDR: 0..32; hostname: 0.
 *   host    hostname only: lowercase, no trailing dot, NUL-terminated; "" otherwise. */
struct pj_allow_entry {
        enum pj_allow_kind kind;
        uint32_t addr;
        int prefix;
        char host[254];
};

/* Parses one allowlist entry s (NUL-terminated, untrusted).
 *
 * Accepts:
 *   - dotted-quad IPv4 "1.1.1.1": exactly four decimal octets 0..255, no
 *     leading zeros ("010.1.1.1" is rejected: it means octal to some parsers);
 *   - CIDR "10.0.0.0/8": an IPv4 address as above, '/', a prefix 0..32 without
 *     leading zeros; host bits must be zero ("10.0.0.1/8" is rejected with a
 *     hint naming the network, "did you mean 10.0.0.0/8?");
 *   - a hostname per RFC 1123: labels of 1..63 characters [a-z0-9-] (input is
 *     case-folded), not starting or ending with '-', at least two labels,
 *     total at most 253 characters, one optional trailing dot (stripped), and
 *     a top-level label that is not all digits (so "127.1" or "0x7f.1" can
 *     never be taken as a name).
 * Rejects with a specific reason: empty, surrounding whitespace, IPv6, ports,
 * wildcards ("*.example.com"), URLs, anything else.
 *
 * On success returns 0, fills *ret (if not NULL) and writes the normalised
 * text ("1.1.1.1", "10.0.0.0/8", "api.example.com") to norm_out (if not NULL;
 * norm_len >= PJ_ALLOW_NORM_MAX always suffices, a smaller buffer that cannot
 * hold the result gives -ENOBUFS).
 * On failure returns -EINVAL, leaves *ret and norm_out untouched, and writes
 * to why (if not NULL) a predicate meant to follow the entry as the subject,
 * e.g. "has host bits set; did you mean 10.0.0.0/8?", so callers can say
 * "egress.allow[3] (\"10.0.0.1/8\") has host bits set; ...". */
int pj_allow_entry_parse(const char *s, struct pj_allow_entry *ret, char *norm_out, size_t norm_len,
                         struct err *why);

/* Validates s with pj_allow_entry_parse() and appends its normalised form to
 * e->allow unless an equal entry is already present (duplicates merge
 * silently). Returns 1 if appended, 0 if merged, -EINVAL (why filled as
 * above) if the entry is invalid, -E2BIG if the list already holds
 * PJ_EGRESS_MAX_ALLOW entries and s is new. Does not look at e->mode. */
int pj_egress_add_allow(struct pj_egress *e, const char *s, struct err *why);
