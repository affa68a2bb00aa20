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
struct pj_egress_header {
        char *name;     /* an HTTP field name (token characters), lowercase */
        char *value;    /* the value as given: text and ${secrets.<name>} placeholders */
};

/* Rules of one host: headers the node's egress proxy sets (replacing the sandbox's own of that
 * name) on every request the sandbox sends to that host over HTTP (80) or HTTPS (443). */
struct pj_egress_rule {
        char host[254];                 /* a hostname as pj_allow_entry_parse normalises it */
        struct pj_egress_header *headers;
        size_t n_headers;
};

#define PJ_EGRESS_MAX_RULES 16          /* hosts with rules in one policy */
#define PJ_EGRESS_MAX_HEADERS 16        /* headers per host */
#define PJ_EGRESS_HEADER_NAME_MAX 128
#define PJ_EGRESS_HEADER_VALUE_MAX 4096 /* the template; a resolved value may be longer (secrets' limit) */
#define PJ_EGRESS_MAX_PLACEHOLDERS 8    /* placeholders in one value */
#define PJ_EGRESS_RESOLVED_VALUE_MAX 8192      /* a value with its secrets put in (the proxy's limit) */

struct pj_egress {
        enum pj_egress_mode mode;
        char **allow;
        size_t n_allow;
        struct pj_egress_rule *rules;   /* hosts in first-seen order, unique */
        size_t n_rules;
        /* Whether a restricted policy lets the rules' hosts out without listing them in allow
         * (ours: yes; E2B's network.rules: no, as E2B documents). */
        bool rules_open;
};

struct pj_json;
/* Parses a rules object at path ("egress.rules", "network.rules"): {"<host>": [{"headers":
 * {"<name>": "<value>"}}]}, or with e2b_shape [{"transform": {"headers": {...}}}], whose
 * ${e2b.secrets.<name>} placeholders become ours. Several entries of one host merge (a later
 * header of the same name wins). Replaces e's rules. 0, or -EINVAL with err naming the field. */
int pj_egress_rules_parse(const struct pj_json *obj, const char *path, bool e2b_shape, struct pj_egress *e,
                          struct err *err);
/* Calls fn for each ${secrets.<name>} placeholder of value (name not NUL-terminated: n bytes),
 * stopping at fn's first negative return, which it returns; 0 when all were seen. */
int pj_egress_placeholders(const char *value, int (*fn)(const char *name, size_t n, void *ud), void *ud);
/* The rules as JSON: {"<host>": [{"headers": {...}}]} (e2b_shape: with "transform"), values as
 * given (placeholders, never resolved values). A cJSON tree. */
struct cJSON;
struct cJSON *pj_egress_rules_json(const struct pj_egress *e, bool e2b_shape);
void pj_egress_rules_done(struct pj_egress *e);
/* Wipes the rules' values in place (they may be secrets: before they are freed). */
void pj_egress_rules_wipe(struct pj_egress *e);
/* The same for a tree of ours pj_egress_rules_json made (the node message's: each rule's "headers"). */
void pj_egress_rules_json_wipe(struct cJSON *j);
void pj_egress_rules_copy(struct pj_egress *dst, const struct pj_egress *src);
/* Reads what pj_egress_rules_json wrote: a stored policy, or (resolved) the rules of a node
 * message, whose values are the secrets' and only checked for size and control characters.
 * 0, or -EINVAL with err (may be NULL). */
int pj_egress_rules_from_json(const struct cJSON *j, bool resolved, struct pj_egress *e, struct err *err);

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
