/* nft.h — the kernel layer of egress (nftables' mnl.c): the netfilter netlink socket,
 * dumps, atomic batches with their acks, and builders for the objects and rules the
 * egress table is made of. Knows nothing of sandboxes or of the table's layout: every
 * table, chain and set name comes from the caller (egress.c, the policy above it).
 * Private to nodeagent/; callers serialise (egress.c's lock). Never logs above debug.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/gen.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>

#include "cleanup.h"
#include "err.h"
#include "strutil.h"

#define NFT_FAMILY NFPROTO_INET
#define NFT_NAME_BUF 64                 /* "allow_" + 24 hex + NUL, with room */
#define NFT_ELEMS_PER_MSG 256           /* elements in one message (nft.c sizes messages for them) */
/* nft_rule_counter without a verdict (verdicts are >= -5) */
#define NFT_NO_VERDICT (-1000)

static inline bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct mnl_socket *, mnl_socket_close)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_rule *, nftnl_rule_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set *, nftnl_set_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_chain *, nftnl_chain_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_table *, nftnl_table_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_gen *, nftnl_gen_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set_elems_iter *, nftnl_set_elems_iter_destroy)

/* ---- the socket */
/* A NETLINK_NETFILTER socket with extended acks; 0 or -errno. */
int nft_open(struct mnl_socket **ret);
/* Sends one request and runs cb over the replies (all parts of a dump). 0 or -errno. */
int nft_query(struct mnl_socket *nl, struct nlmsghdr *req, bool dump, mnl_cb_t cb, void *data);
/* The next netlink sequence number (process-wide). */
uint32_t nft_seq_next(void);
/* The ruleset generation, for a batch that depends on what was read. */
int nft_get_genid(struct mnl_socket *nl, uint32_t *ret);
/* The short, growing, jittered pause before a retry after ERESTART. */
void nft_restart_backoff(int attempt);

/* ---- dumps */
/* The one dump request: every object of type (NFT_MSG_GETCHAIN, GETSET, GETSETELEM,
 * GETRULE) in NFT_FAMILY, cb run over each. filter (GETSET, GETSETELEM) names the
 * table, and for elements the set; NULL for none. 0 or -errno (-ENOENT: no such table or set). */
int nft_dump_objects(struct mnl_socket *nl, uint16_t type, struct nftnl_set *filter, mnl_cb_t cb, void *data);
/* The same in another family (NFPROTO_BRIDGE). */
int nft_dump_objects_in(struct mnl_socket *nl, uint8_t family, uint16_t type, struct nftnl_set *filter, mnl_cb_t cb,
                        void *data);
/* One element of @sandboxes or @dns_clients. chain is "" for plain sets. */
struct nft_elem {
        uint32_t key;           /* host order */
        char chain[NFT_NAME_BUF];
};

/* Elements of a set/map with 4-byte keys (*ret: free()); a missing set (or table) is empty. */
int nft_dump_elems(struct mnl_socket *nl, const char *table, const char *set, struct nft_elem **ret, size_t *ret_n);
/* The chains (or sets) of one table: v[0..n) (NULL-terminated once one is added) and, for
 * chains, each one's priority in prio[] (-1: not a base chain). */
struct nft_names {
        char **v;
        int64_t *prio;
        size_t n;
};
void nft_names_done(struct nft_names *n);
void nft_names_add(struct nft_names *n, const char *s, int64_t prio);
bool nft_names_has(const struct nft_names *n, const char *s);
/* The priority of chain s: -1 when it is absent or not a base chain. */
int64_t nft_names_prio(const struct nft_names *n, const char *s);
/* The chains of table in family (NFT_FAMILY, NFPROTO_BRIDGE); 0 or -errno, *ret untouched then. */
int nft_dump_chains(struct mnl_socket *nl, uint8_t family, const char *table, struct nft_names *ret);
/* The sets of table in NFT_FAMILY; a missing table has none. 0 or -errno, *ret untouched then. */
int nft_dump_sets(struct mnl_socket *nl, const char *table, struct nft_names *ret);
/* A set object of table named name (caller frees), for builders and dumps. */
struct nftnl_set *nft_set_new(const char *table, const char *name);

/* ---- batches: all of one batch is committed or none of it */
struct nft_batch {
        char *buf;
        size_t len, cap;
        uint32_t seq0, seq;     /* seq of BEGIN, next seq */
        char **what;            /* what[seq - seq0]: description of each acked message */
        size_t n_what;
        size_t n_acked;         /* messages that carry NLM_F_ACK */
        uint8_t family;         /* of the next object messages: 0 = NFT_FAMILY; NFPROTO_BRIDGE for the guard */
};

void nft_batch_done(struct nft_batch *b);
/* Begins b with NFNL_MSG_BATCH_BEGIN, tagged with genid when not 0 (the kernel refuses
 * the batch with ERESTART if the ruleset changed since). */
void nft_batch_begin(struct nft_batch *b, uint32_t genid);
/* Header of the next object message; the caller appends the payload and calls nft_batch_commit. */
struct nlmsghdr *nft_batch_msg(struct nft_batch *b, uint16_t type, uint16_t flags, const char *fmt, ...) _printf_(4, 5);
void nft_batch_commit(struct nft_batch *b, struct nlmsghdr *nlh);
/* One object message: the header (what the printf-style rest says it does, for
 * error reports), the object's payload from build (libnftnl's
 * nftnl_*_nlmsg_build_payload for obj), committed to the batch. */
#define NFT_BATCH_PUT(b, build, obj, type, flags, ...)                                    \
        do {                                                                          \
                struct nlmsghdr *nlh_ = nft_batch_msg((b), (type), (flags), __VA_ARGS__); \
                build(nlh_, (obj));                                                   \
                nft_batch_commit((b), nlh_);                                              \
        } while (0)
/* Ends and sends the batch and checks one ACK per message. The first error wins;
 * its message is named in err. 0 or -errno. */
int nft_batch_send(struct mnl_socket *nl, struct nft_batch *b, struct err *err);

/* ---- IPv4 ranges */
struct nft_range {
        uint64_t lo, hi;        /* inclusive, host order; uint64 so hi + 1 never wraps */
};

/* Sorts and merges overlapping and adjacent ranges in place; returns the new count. */
size_t nft_ranges_merge(struct nft_range *r, size_t n);
struct nft_range nft_range_of(uint32_t addr, int prefix);

/* ---- objects, each one message of b (nft-build.c, as are the rules below) */
/* An ipv4_addr set (interval or not) or, with vmap, an ipv4_addr : verdict map. */
void nft_add_set(struct nft_batch *b, const char *table, const char *name, bool interval, bool vmap);
/* DELSETELEM with no elements = flush the set. */
void nft_flush_set(struct nft_batch *b, const char *table, const char *name);
void nft_del_set(struct nft_batch *b, const char *table, const char *name);
/* Adds (type NEWSETELEM) or deletes (DELSETELEM) one plain element (a jump to
 * jump_chain when not NULL). */
void nft_elem_op(struct nft_batch *b, uint16_t type, const char *table, const char *set, uint32_t key,
                 const char *jump_chain);
/* Interval elements for merged ranges, chunked. */
void nft_add_interval_elems(struct nft_batch *b, const char *table, const char *set, const struct nft_range *r, size_t n);
/* A regular chain (hooknum < 0) or a filter base chain with policy accept. */
void nft_add_chain(struct nft_batch *b, const char *table, const char *name, int hooknum, int prio);
/* type DELRULE (table+chain, no handle) flushes; DELCHAIN deletes. */
void nft_chain_op(struct nft_batch *b, uint16_t type, const char *table, const char *name);

/* ---- the bridge guard (b->family = NFPROTO_BRIDGE around these) */
/* A map ifname : verdict (the sandbox bridge ports, each to its sandbox's guard chain). */
void nft_add_port_vmap(struct nft_batch *b, const char *table, const char *name);
/* Adds (NEWSETELEM, port -> jump jump_chain) or deletes (DELSETELEM) one element of it. */
void nft_port_elem_op(struct nft_batch *b, uint16_t type, const char *table, const char *map, const char *port,
                      const char *jump_chain);
/* iifname vmap @map */
void nft_rule_iif_vmap(struct nft_batch *b, const char *table, const char *chain, const char *map);
/* What one sandbox's port may send: frames from mac only; IPv4 from ip only; ARP whose sender
 * is ip at mac only; nothing but IPv4 and ARP. Everything else counter drop. */
void nft_rules_port_guard(struct nft_batch *b, const char *table, const char *chain, uint32_t ip, const uint8_t mac[6]);
/* One element of a port map. */
struct nft_port_elem {
        char port[16];          /* IFNAMSIZ */
        char chain[NFT_NAME_BUF];
};
/* Elements of a port map in table (family bridge); a missing map or table is empty. */
int nft_dump_port_elems(struct mnl_socket *nl, const char *table, const char *map, struct nft_port_elem **ret,
                        size_t *ret_n);

/* ---- rules, appended to chain (see nft-build.c for each one's nft syntax) */
void nft_rule_ct_established(struct nft_batch *b, const char *table, const char *chain);
void nft_rule_non_ipv4_drop(struct nft_batch *b, const char *table, const char *chain);
/* DNS to resolver over l4 from the addresses in set clients: accept */
void nft_rule_dns(struct nft_batch *b, const char *table, const char *chain, uint32_t resolver, uint8_t l4,
                  const char *clients);
void nft_rule_daddr_set(struct nft_batch *b, const char *table, const char *chain, const char *set, int verdict);
/* counter [verdict]; NFT_NO_VERDICT = none */
void nft_rule_counter(struct nft_batch *b, const char *table, const char *chain, int verdict);
/* ip saddr vmap @map */
void nft_rule_vmap_saddr(struct nft_batch *b, const char *table, const char *chain, const char *map);
void nft_rule_oif_drop(struct nft_batch *b, const char *table, const char *chain, const char *ifname);
void nft_rule_iif_jump(struct nft_batch *b, const char *table, const char *chain, const char *ifname, const char *to);
void nft_rule_into_not_syn_drop(struct nft_batch *b, const char *table, const char *chain, const char *ifname);
void nft_rule_into_new_drop(struct nft_batch *b, const char *table, const char *chain, const char *ifname);

/* ---- the egress proxy's steering (nft-build.c) */
/* A nat base chain (hooknum: NF_INET_PRE_ROUTING) with policy accept. */
void nft_add_nat_chain(struct nft_batch *b, const char *table, const char *name, int hooknum, int prio);
/* ip daddr @set tcp dport <dport> counter redirect to :<to_port> */
void nft_rule_redirect(struct nft_batch *b, const char *table, const char *chain, const char *set, uint16_t dport,
                       uint16_t to_port);
/* tcp dport <port> ct status dnat counter accept */
void nft_rule_proxy_accept(struct nft_batch *b, const char *table, const char *chain, uint16_t port);
