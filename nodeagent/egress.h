/* egress.h — fail-closed per-sandbox egress in one nftables table.
 *
 * Everything lives in ONE table (`inet paddock` by default) and every change is
 * ONE atomic netlink batch (libnftnl + libmnl): the kernel either takes all of
 * it or none of it. Layout (see egress.c for the exact rules; nft.c sends them):
 *
 *   set node_deny   ipv4 intervals: 169.254.0.0/16, 224.0.0.0/4, 255.255.255.255 (always)
 *                   plus cfg->deny_cidrs (operator internal CIDRs)
 *   set dns_clients sandbox IPs whose policy allows DNS to cfg->dns_resolver (open only)
 *   map sandboxes   sandbox IP : jump sbx_<id>
 *   chain forward_sbx  hook forward, policy ACCEPT (other forwarding is not ours):
 *                      iifname <bridge> jump sbx_egress
 *   chain input_sbx    hook input, policy ACCEPT: iifname <bridge> jump sbx_to_host
 *   chain into_sbx     hook forward, policy ACCEPT: oifname <bridge> ct state new
 *                      tcp flags != syn drop (no mid-stream pickup towards a sandbox:
 *                      a flow whose conntrack entry was revoked stays dead)
 *   chain sbx_egress   ct established,related accept; non-IPv4 drop; DNS to the
 *                      resolver from @dns_clients accept; daddr @node_deny drop;
 *                      oifname <bridge> drop (sandbox to sandbox, bridged ones too
 *                      through br_netfilter, which egress_init requires);
 *                      ip saddr vmap @sandboxes; drop        (fail closed)
 *   chain sbx_to_host  ct established,related accept; non-IPv4 drop; DNS as above;
 *                      daddr @node_deny drop; drop (nothing else reaches the host)
 *   chain sbx_<id> + set allow_<id>   one pair per sandbox, written by egress_apply()
 *
 * With the egress proxy (cfg->proxy_port), also:
 *   map steer          sandbox IP : jump pxy_<id>
 *   chain steer_sbx    hook prerouting, type nat, priority -100: iifname <bridge> jump steer_dispatch
 *   chain steer_dispatch  ip saddr vmap @steer
 *   chain pxy_<id> + set pxyd_<id>   ip daddr @pxyd_<id> tcp dport 443|80 redirect to :<proxy_port>
 *   sbx_to_host gets   tcp dport <proxy_port> ct status dnat accept (before its drop): only a
 *                      connection the steering redirected reaches the proxy from a sandbox
 *
 * A sandbox IP with no element in @sandboxes (no confirmed policy) reaches
 * nothing, and neither does anything on the bridges once the table exists.
 *
 * The module keeps the configuration of the last successful egress_init() in
 * process state; egress_apply/remove/list use it. Calls are serialised by an
 * internal mutex. Library code: never logs above debug; errors are -errno plus
 * a human-readable reason (the kernel's, for batches) in err.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "pj_egress.h"

#define EGRESS_TABLE_DEFAULT "paddock"
#define EGRESS_ID_LEN 24          /* sandbox IDs: 24 lowercase hex */
#define EGRESS_MAX_BRIDGES 64
#define EGRESS_MAX_DENY 1024
/* Entries one egress_apply() accepts (PJ_EGRESS_MAX_ALLOW user entries, each
 * hostname possibly resolving to several addresses). */
#define EGRESS_MAX_ALLOW 1024
/* Addresses of rule hosts one apply steers to the egress proxy (16 hosts, 32 addresses each). */
#define EGRESS_MAX_STEER 512

struct egress_config {
        const char *table;              /* NULL = EGRESS_TABLE_DEFAULT; at most 255 bytes */
        const char *const *bridges;     /* NULL-terminated; sandbox bridge interface names (iifname) */
        const char *const *deny_cidrs;  /* NULL-terminated IPv4 / CIDR strings, or NULL */
        const char *dns_resolver;       /* IPv4 of the only resolver sandboxes may use (udp/tcp 53), NULL = none */
        int priority;                   /* priority of both base chains, e.g. -10 */
        uint16_t proxy_port;            /* the egress proxy's port on this host, 0 = none: then the
                                         * steering below is not set up and rules are refused */
};

/* Creates or updates, in one atomic batch, the table, the node deny set (its
 * elements replaced), the dns_clients set and sandboxes map (kept), the two
 * regular dispatch chains and the two base chains (flushed and refilled). Safe
 * to re-run on a live table (agent restart): existing sandbox chains, sets and
 * map elements are kept, so enforcement never lapses. If the base chains exist
 * with another priority they are deleted and recreated in the same batch.
 * On success stores a copy of cfg for the other calls.
 * Returns 0, -EINVAL (bad config; err says which field), or the kernel's -errno. */
int egress_init(const struct egress_config *cfg, struct err *err);

struct egress_policy {
        const char *sandbox_id;                 /* 24 lowercase hex */
        uint32_t ip;                            /* sandbox IPv4, host order */
        enum pj_egress_mode mode;
        const struct pj_allow_entry *allow;     /* PJ_ALLOW_IPV4 / PJ_ALLOW_CIDR only: hostnames must */
        size_t n_allow;                         /* already be resolved into IPv4 entries by the caller */
        uint32_t pid;                           /* a host process in the sandbox's network namespace: its
                                                 * bridge port is bound (the guard below); 0 = the binding
                                                 * stays as it is */
        const uint32_t *steer;                  /* addresses (host order) of the hosts with egress rules: */
        size_t n_steer;                         /* their TCP 80 and 443 go to the proxy (<= EGRESS_MAX_STEER) */
};

/* One atomic batch: chain sbx_<id> (created or flushed) with
 *   open:       counter; counter accept
 *   restricted: counter; ip daddr @allow_<id> counter accept; counter drop
 *   deny_all:   counter; counter drop
 * set allow_<id> (always present; flushed and refilled with the merged, sorted
 * allowlist for restricted, empty otherwise), the map element ip -> jump sbx_<id>
 * (replacing an element for that ip or for an older ip of this sandbox), and
 * membership of ip in dns_clients (open only). All or nothing.
 * Once the batch committed, the conntrack entries the new policy forbids are
 * deleted (ctnetlink): connections the sandbox opened from ip (or from an older
 * ip of it) to a destination restricted mode no longer allows, all of them for
 * deny_all. So tightening ends running connections, not only new ones.
 * Returns 0, -EINVAL (bad id, mode or entry), -ENOTCONN (no egress_init), or the
 * kernel's -errno (for a failed conntrack deletion the rules are in force; err says so). */
int egress_apply(const struct egress_policy *p, struct err *err);
/*
 * The guard (same batch, table bridge <table>): a sandbox's policy is keyed on its source
 * address, and a sandbox runs with every capability inside gVisor, so its bridge port is
 * bound to it. With p->pid, egress_port_of_pid finds the port; chain sbx_<id> of the bridge
 * table drops every frame from that port whose Ethernet source is not the sandbox's MAC,
 * IPv4 whose source is not p->ip, ARP whose sender is not (p->ip, MAC), and anything that is
 * neither IPv4 nor ARP; map ports (ifname : verdict, looked up by the prerouting chain
 * guard) leads the port there (replacing an older port of this sandbox, or this port's
 * element of a sandbox gone). Ports with no element pass: only sandboxes whose container
 * controld named are bound (fake sandboxes in tests are not).
 */

/* The bridge port of the sandbox whose network namespace host process pid is in (the host
 * end of its veth on one of bridges) and the MAC of its other end. 0, or -errno with the
 * reason (no port, several, the process gone). port.c. */
int egress_port_of_pid(uint32_t pid, const char *const *bridges, char port[16], uint8_t mac[6], struct err *err);

/* Removes everything of sandbox_id in one batch: map elements that jump to its
 * chain, ip from dns_clients (only if no other sandbox maps that ip), the chain
 * and the set; then deletes the conntrack entries of connections it opened from the
 * addresses it held. Idempotent: 0 when nothing is there. ip may be 0 (unknown). */
int egress_remove(const char *sandbox_id, uint32_t ip, struct err *err);

/* Sandbox IDs that have a chain in the table (for the reaper), as a
 * NULL-terminated array the caller frees with strv_free() (strutil.h).
 * Returns the count (0 also when the table does not exist) or -errno;
 * *ret_sandbox_ids is untouched on failure. */
int egress_list(char ***ret_sandbox_ids);

struct egress_stats {
        char sandbox_id[EGRESS_ID_LEN + 1];
        uint64_t allowed_packets, allowed_bytes;        /* counters of the chain's accept rules */
        uint64_t dropped_packets, dropped_bytes;        /* counters of its drop rule */
};

/* Counters of every sandbox chain, one dump of the table's rules. Returns the
 * count (0 when the table does not exist) with *ret (free()), or -errno. */
int egress_stats(struct egress_stats **ret);
