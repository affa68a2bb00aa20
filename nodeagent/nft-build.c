/* nft-build.c — the object and rule builders of the kernel layer (nft.h): each appends
 * one message to a batch (nft.c sends it). Every table, chain and set name comes from the
 * caller; the table's layout is egress.c's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>

#include "cleanup.h"
#include "nft.h"
#include "strutil.h"

#define KEY_TYPE_IPV4 7                 /* nft datatype ipv4_addr */

/* ---------------------------------------------------------------- object builders */

static uint32_t set_id_next(void) {
        static uint32_t id;
        return ++id;
}

/* An ipv4_addr set (interval or not) or, with vmap, an ipv4_addr : verdict map. */
void nft_add_set(struct nft_batch *b, const char *table, const char *name, bool interval, bool vmap) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, name);
        uint32_t flags = 0;
        if (interval)
                flags |= NFT_SET_INTERVAL;
        if (vmap) {
                flags |= NFT_SET_MAP;
                nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, NFT_DATA_VERDICT);
        }
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, flags);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, KEY_TYPE_IPV4);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, sizeof(uint32_t));
        nftnl_set_set_u32(s, NFTNL_SET_ID, set_id_next());
        NFT_BATCH_PUT(b, nftnl_set_nlmsg_build_payload, s, NFT_MSG_NEWSET, NLM_F_CREATE, "add set %s", name);
}

/* DELSETELEM with no elements = flush the set. */
void nft_flush_set(struct nft_batch *b, const char *table, const char *name) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, name);
        NFT_BATCH_PUT(b, nftnl_set_elems_nlmsg_build_payload, s, NFT_MSG_DELSETELEM, 0, "flush set %s", name);
}

static struct nftnl_set_elem *elem_new(uint32_t key_host, uint32_t flags) {
        struct nftnl_set_elem *e = xnonnull(nftnl_set_elem_alloc());
        uint32_t be = htonl(key_host);
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, &be, sizeof(be));
        if (flags)
                nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_FLAGS, flags);
        return e;
}

/* Adds (type NEWSETELEM) or deletes (DELSETELEM) one plain element. */
void nft_elem_op(struct nft_batch *b, uint16_t type, const char *table, const char *set, uint32_t key,
                    const char *jump_chain) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, set);
        struct nftnl_set_elem *e = elem_new(key, 0);
        if (jump_chain) {
                nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, (uint32_t) NFT_JUMP);
                nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, jump_chain);
        }
        nftnl_set_elem_add(s, e);
        struct in_addr a = { htonl(key) };
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a, ip, sizeof(ip));
        NFT_BATCH_PUT(b, nftnl_set_elems_nlmsg_build_payload, s, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0,
                  "%s element %s %s %s", type == NFT_MSG_NEWSETELEM ? "add" : "delete", ip,
                  type == NFT_MSG_NEWSETELEM ? "to" : "from", set);
}

static int range_cmp(const void *a, const void *b) {
        const struct nft_range *x = a, *y = b;
        return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

/* Sorts and merges overlapping and adjacent ranges in place; returns the new count. */
size_t nft_ranges_merge(struct nft_range *r, size_t n) {
        if (n == 0)
                return 0;
        qsort(r, n, sizeof(*r), range_cmp);
        size_t o = 0;
        for (size_t i = 1; i < n; i++) {
                if (r[i].lo <= r[o].hi + 1) {
                        if (r[i].hi > r[o].hi)
                                r[o].hi = r[i].hi;
                } else
                        r[++o] = r[i];
        }
        return o + 1;
}

struct nft_range nft_range_of(uint32_t addr, int prefix) {
        uint32_t mask = prefix <= 0 ? 0 : prefix >= 32 ? 0xffffffffu : ~((1u << (32 - prefix)) - 1);
        uint32_t lo = addr & mask;
        return (struct nft_range) { lo, (uint64_t) (lo | ~mask) };
}

struct ielem {
        uint32_t key, flags;    /* key host order */
};

/* Interval elements for merged ranges (PROTOCOLS.md 4): a leading 0.0.0.0
 * interval-end unless the first range starts at 0, then per range its start and
 * (unless it ends at 255.255.255.255) an interval-end at hi + 1. Chunked. */
void nft_add_interval_elems(struct nft_batch *b, const char *table, const char *set, const struct nft_range *r, size_t n) {
        if (n == 0)
                return;
        size_t cap = 2 * n + 1, ne = 0;
        _cleanup_free_ struct ielem *ev = xnew0(struct ielem, cap);
        if (r[0].lo != 0)
                ev[ne++] = (struct ielem) { 0, NFT_SET_ELEM_INTERVAL_END };
        for (size_t i = 0; i < n; i++) {
                ev[ne++] = (struct ielem) { (uint32_t) r[i].lo, 0 };
                if (r[i].hi < 0xffffffffu)
                        ev[ne++] = (struct ielem) { (uint32_t) (r[i].hi + 1), NFT_SET_ELEM_INTERVAL_END };
        }
        for (size_t off = 0; off < ne; off += NFT_ELEMS_PER_MSG) {
                _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, set);
                size_t end = off + NFT_ELEMS_PER_MSG < ne ? off + NFT_ELEMS_PER_MSG : ne;
                for (size_t i = off; i < end; i++)
                        nftnl_set_elem_add(s, elem_new(ev[i].key, ev[i].flags));
                NFT_BATCH_PUT(b, nftnl_set_elems_nlmsg_build_payload, s, NFT_MSG_NEWSETELEM, NLM_F_CREATE,
                          "add %zu elements to set %s", end - off, set);
        }
}

static struct nftnl_chain *chain_new(const char *table, const char *name) {
        struct nftnl_chain *c = xnonnull(nftnl_chain_alloc());
        nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, NFT_FAMILY);
        nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
        nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
        return c;
}

static struct nftnl_rule *rule_new(const char *table, const char *chain) {
        struct nftnl_rule *r = xnonnull(nftnl_rule_alloc());
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFT_FAMILY);
        nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
        nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
        return r;
}

void nft_add_chain(struct nft_batch *b, const char *table, const char *name, int hooknum, int prio) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = chain_new(table, name);
        if (hooknum >= 0) {
                nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t) hooknum);
                nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
                nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "filter");
                /* Accept: the host's other forwarding and input is not ours to break;
                 * the bridges' traffic ends in our explicit drops. */
                nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
        }
        NFT_BATCH_PUT(b, nftnl_chain_nlmsg_build_payload, c, NFT_MSG_NEWCHAIN, NLM_F_CREATE, "add chain %s", name);
}

/* type DELRULE (table+chain, no handle) flushes; DELCHAIN deletes. */
void nft_chain_op(struct nft_batch *b, uint16_t type, const char *table, const char *name) {
        if (type == NFT_MSG_DELRULE) {
                _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = rule_new(table, name);
                NFT_BATCH_PUT(b, nftnl_rule_nlmsg_build_payload, r, type, 0, "flush chain %s", name);
                return;
        }
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = chain_new(table, name);
        NFT_BATCH_PUT(b, nftnl_chain_nlmsg_build_payload, c, type, 0, "delete chain %s", name);
}

void nft_del_set(struct nft_batch *b, const char *table, const char *name) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, name);
        NFT_BATCH_PUT(b, nftnl_set_nlmsg_build_payload, s, NFT_MSG_DELSET, 0, "delete set %s", name);
}

/* ---- rule expressions */

static struct nftnl_expr *expr(struct nftnl_rule *r, const char *name) {
        struct nftnl_expr *e = xnonnull(nftnl_expr_alloc(name));
        nftnl_rule_add_expr(r, e);
        return e;
}

static void x_meta(struct nftnl_rule *r, uint32_t key) {
        struct nftnl_expr *e = expr(r, "meta");
        nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
        nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
}

static void x_cmp(struct nftnl_rule *r, uint32_t op, const void *data, uint32_t len) {
        struct nftnl_expr *e = expr(r, "cmp");
        nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
        nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
        nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
}

static void x_payload(struct nftnl_rule *r, uint32_t base, uint32_t off, uint32_t len) {
        struct nftnl_expr *e = expr(r, "payload");
        nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, base);
        nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, off);
        nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
        nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
}

/* lookup of reg 1 in set; vmap: the result is the verdict. */
static void x_lookup(struct nftnl_rule *r, const char *set, bool vmap) {
        struct nftnl_expr *e = expr(r, "lookup");
        nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
        nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
        if (vmap)
                nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_DREG, NFT_REG_VERDICT);
}

static void x_verdict(struct nftnl_rule *r, int verdict, const char *chain) {
        struct nftnl_expr *e = expr(r, "immediate");
        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
        nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t) verdict);
        if (chain)
                nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, chain);
}

static void x_counter(struct nftnl_rule *r) {
        (void) expr(r, "counter");
}

static void x_ipv4_only(struct nftnl_rule *r) {
        uint8_t v4 = NFPROTO_IPV4;
        x_meta(r, NFT_META_NFPROTO);
        x_cmp(r, NFT_CMP_EQ, &v4, sizeof(v4));
}

static void x_ip_addr(struct nftnl_rule *r, bool daddr) {
        x_payload(r, NFT_PAYLOAD_NETWORK_HEADER, daddr ? 16 : 12, 4);
}

/* meta iifname/oifname (key) == ifname, compared over the whole IFNAMSIZ buffer */
static void x_ifname(struct nftnl_rule *r, uint32_t key, const char *ifname) {
        char name[IFNAMSIZ] = { 0 };
        strscpy(name, ifname, sizeof(name));
        x_meta(r, key);
        x_cmp(r, NFT_CMP_EQ, name, sizeof(name));
}

/* reg 1 = (reg 1 & mask) ^ xor, over len bytes */
static void x_bitwise(struct nftnl_rule *r, const void *mask, const void *xor, uint32_t len) {
        struct nftnl_expr *e = expr(r, "bitwise");
        nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
        nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
        nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, len);
        nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, mask, len);
        nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, xor, len);
}

/* ct state in states: (ct state & states) != 0 */
static void x_ct_state_any(struct nftnl_rule *r, uint32_t states) {
        struct nftnl_expr *e = expr(r, "ct");
        nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATE);
        nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
        uint32_t zero = 0;
        x_bitwise(r, &states, &zero, sizeof(states));
        x_cmp(r, NFT_CMP_NEQ, &zero, sizeof(zero));
}

static void rule_add(struct nft_batch *b, struct nftnl_rule *r, const char *what) {
        const char *chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
        NFT_BATCH_PUT(b, nftnl_rule_nlmsg_build_payload, r, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND,
                  "add rule \"%s\" to chain %s", what, chain);
        nftnl_rule_free(r);
}

/* ct state established,related accept */
void nft_rule_ct_established(struct nft_batch *b, const char *table, const char *chain) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ct_state_any(r, NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED));
        x_verdict(r, NF_ACCEPT, NULL);
        rule_add(b, r, "ct state established,related accept");
}

/* meta nfproto != ipv4 counter drop (sandboxes are IPv4 only) */
void nft_rule_non_ipv4_drop(struct nft_batch *b, const char *table, const char *chain) {
        struct nftnl_rule *r = rule_new(table, chain);
        uint8_t v4 = NFPROTO_IPV4;
        x_meta(r, NFT_META_NFPROTO);
        x_cmp(r, NFT_CMP_NEQ, &v4, sizeof(v4));
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, "meta nfproto != ipv4 drop");
}

/* ip daddr R meta l4proto P th dport 53 ip saddr @dns_clients accept */
void nft_rule_dns(struct nft_batch *b, const char *table, const char *chain, uint32_t resolver, uint8_t l4,
                  const char *clients) {
        struct nftnl_rule *r = rule_new(table, chain);
        uint32_t rbe = htonl(resolver);
        uint16_t port = htons(53);
        x_ipv4_only(r);
        x_ip_addr(r, true);
        x_cmp(r, NFT_CMP_EQ, &rbe, sizeof(rbe));
        x_meta(r, NFT_META_L4PROTO);
        x_cmp(r, NFT_CMP_EQ, &l4, sizeof(l4));
        x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
        x_cmp(r, NFT_CMP_EQ, &port, sizeof(port));
        x_ip_addr(r, false);
        x_lookup(r, clients, false);
        x_counter(r);
        x_verdict(r, NF_ACCEPT, NULL);
        rule_add(b, r, l4 == IPPROTO_UDP ? "udp dns to resolver accept" : "tcp dns to resolver accept");
}

/* ip daddr @set [counter] verdict */
void nft_rule_daddr_set(struct nft_batch *b, const char *table, const char *chain, const char *set, int verdict) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ipv4_only(r);
        x_ip_addr(r, true);
        x_lookup(r, set, false);
        x_counter(r);
        x_verdict(r, verdict, NULL);
        rule_add(b, r, verdict == NF_DROP ? "ip daddr @set drop" : "ip daddr @set accept");
}

/* counter [verdict]; verdict < -100 = no verdict */
void nft_rule_counter(struct nft_batch *b, const char *table, const char *chain, int verdict) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_counter(r);
        if (verdict != NFT_NO_VERDICT)
                x_verdict(r, verdict, NULL);
        rule_add(b, r, verdict == NFT_NO_VERDICT ? "counter" : verdict == NF_DROP ? "counter drop" : "counter accept");
}

void nft_rule_vmap_saddr(struct nft_batch *b, const char *table, const char *chain, const char *map) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ipv4_only(r);
        x_ip_addr(r, false);
        x_lookup(r, map, true);
        rule_add(b, r, "ip saddr vmap @sandboxes");
}

/* oifname NAME counter drop: routed into a sandbox bridge = sandbox to sandbox. */
void nft_rule_oif_drop(struct nft_batch *b, const char *table, const char *chain, const char *ifname) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ifname(r, NFT_META_OIFNAME, ifname);
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, "oifname drop");
}

/* iifname NAME jump CHAIN */
void nft_rule_iif_jump(struct nft_batch *b, const char *table, const char *chain, const char *ifname, const char *to) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ifname(r, NFT_META_IIFNAME, ifname);
        x_verdict(r, NFT_JUMP, to);
        rule_add(b, r, "iifname jump");
}

/* oifname NAME iifname != NAME ct state new,invalid counter drop
 *
 * Nothing from the node's network (another host, another bridge) opens a flow into a
 * sandbox: only replies to what the sandbox opened come in. The node's own connections
 * (output, not forward) and sandbox-to-sandbox traffic on the bridge (the sandbox chains
 * decide) are not seen here. */
void nft_rule_into_new_drop(struct nft_batch *b, const char *table, const char *chain, const char *ifname) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ifname(r, NFT_META_OIFNAME, ifname);
        char name[IFNAMSIZ] = { 0 };
        strscpy(name, ifname, sizeof(name));
        x_meta(r, NFT_META_IIFNAME);
        x_cmp(r, NFT_CMP_NEQ, name, sizeof(name));
        x_ct_state_any(r, NF_CT_STATE_BIT(IP_CT_NEW) | NF_CT_STATE_INVALID_BIT);
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, "oifname iifname != ct state new,invalid drop");
}

/* oifname NAME ct state new tcp flags & (fin|syn|rst|ack) != syn counter drop
 *
 * A TCP packet towards a sandbox that conntrack has no entry for and that opens
 * nothing: conntrack would pick it up mid-stream as a new flow with the remote end
 * as its origin, and the sandbox's answers would then be "established" in the
 * reply direction. That is how a connection whose entry a tightening deleted
 * (conntrack_revoke) would come back the moment the peer retransmits; so it is dropped. */
void nft_rule_into_not_syn_drop(struct nft_batch *b, const char *table, const char *chain, const char *ifname) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ifname(r, NFT_META_OIFNAME, ifname);
        x_ct_state_any(r, NF_CT_STATE_BIT(IP_CT_NEW));
        uint8_t tcp = IPPROTO_TCP;
        x_meta(r, NFT_META_L4PROTO);
        x_cmp(r, NFT_CMP_EQ, &tcp, sizeof(tcp));
        x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 13, 1);
        uint8_t fmask = 0x01 | 0x02 | 0x04 | 0x10, fzero = 0, syn = 0x02;       /* fin syn rst ack */
        x_bitwise(r, &fmask, &fzero, sizeof(fmask));
        x_cmp(r, NFT_CMP_NEQ, &syn, sizeof(syn));
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, "oifname ct state new tcp flags != syn drop");
}


/* ---------------------------------------------------------------- the bridge guard */

#define KEY_TYPE_IFNAME 41              /* nft datatype ifname */
#define ETHERTYPE_IPV4 0x0800
#define ETHERTYPE_ARP 0x0806

void nft_add_port_vmap(struct nft_batch *b, const char *table, const char *name) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, name);
        nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_MAP);
        nftnl_set_set_u32(s, NFTNL_SET_DATA_TYPE, NFT_DATA_VERDICT);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, KEY_TYPE_IFNAME);
        nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, IFNAMSIZ);
        nftnl_set_set_u32(s, NFTNL_SET_ID, set_id_next());
        NFT_BATCH_PUT(b, nftnl_set_nlmsg_build_payload, s, NFT_MSG_NEWSET, NLM_F_CREATE, "add map %s", name);
}

void nft_port_elem_op(struct nft_batch *b, uint16_t type, const char *table, const char *map, const char *port,
                      const char *jump_chain) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, map);
        struct nftnl_set_elem *e = xnonnull(nftnl_set_elem_alloc());
        char key[IFNAMSIZ] = { 0 };
        strscpy(key, port, sizeof(key));
        nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, key, sizeof(key));
        if (jump_chain) {
                nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, (uint32_t) NFT_JUMP);
                nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, jump_chain);
        }
        nftnl_set_elem_add(s, e);
        NFT_BATCH_PUT(b, nftnl_set_elems_nlmsg_build_payload, s, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0,
                      "%s port %s %s map %s", type == NFT_MSG_NEWSETELEM ? "add" : "delete", key,
                      type == NFT_MSG_NEWSETELEM ? "to" : "from", map);
}

void nft_rule_iif_vmap(struct nft_batch *b, const char *table, const char *chain, const char *map) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_meta(r, NFT_META_IIFNAME);
        x_lookup(r, map, true);
        rule_add(b, r, "iifname vmap @ports");
}

/* [ether type == ether_type (host order; 0: any)] payload (base, off, len) != data counter drop */
static void guard_drop(struct nft_batch *b, const char *table, const char *chain, uint16_t ether_type, uint32_t base,
                       uint32_t off, const void *data, uint32_t len, const char *what) {
        struct nftnl_rule *r = rule_new(table, chain);
        if (ether_type) {
                uint16_t et = htons(ether_type);
                x_payload(r, NFT_PAYLOAD_LL_HEADER, 12, 2);
                x_cmp(r, NFT_CMP_EQ, &et, sizeof(et));
        }
        x_payload(r, base, off, len);
        x_cmp(r, NFT_CMP_NEQ, data, len);
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, what);
}

void nft_rules_port_guard(struct nft_batch *b, const char *table, const char *chain, uint32_t ip, const uint8_t mac[6]) {
        uint32_t ipbe = htonl(ip);
        guard_drop(b, table, chain, 0, NFT_PAYLOAD_LL_HEADER, 6, mac, 6, "ether saddr != mac drop");
        guard_drop(b, table, chain, ETHERTYPE_IPV4, NFT_PAYLOAD_NETWORK_HEADER, 12, &ipbe, 4, "ip saddr != ip drop");
        /* ARP for Ethernet/IPv4: sender hardware address at 8, sender protocol address at 14 */
        guard_drop(b, table, chain, ETHERTYPE_ARP, NFT_PAYLOAD_NETWORK_HEADER, 14, &ipbe, 4, "arp saddr ip != ip drop");
        guard_drop(b, table, chain, ETHERTYPE_ARP, NFT_PAYLOAD_NETWORK_HEADER, 8, mac, 6, "arp saddr ether != mac drop");
        struct nftnl_rule *r = rule_new(table, chain);
        uint16_t v4 = htons(ETHERTYPE_IPV4), arp = htons(ETHERTYPE_ARP);
        x_payload(r, NFT_PAYLOAD_LL_HEADER, 12, 2);
        x_cmp(r, NFT_CMP_NEQ, &v4, sizeof(v4));
        x_cmp(r, NFT_CMP_NEQ, &arp, sizeof(arp));
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, "ether type != ip, arp drop");
}

/* ---- the egress proxy's steering (nat, prerouting) */

void nft_add_nat_chain(struct nft_batch *b, const char *table, const char *name, int hooknum, int prio) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = chain_new(table, name);
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t) hooknum);
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
        nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "nat");
        nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
        NFT_BATCH_PUT(b, nftnl_chain_nlmsg_build_payload, c, NFT_MSG_NEWCHAIN, NLM_F_CREATE, "add nat chain %s", name);
}

/* ip daddr @set meta l4proto tcp tcp dport <dport> counter redirect to :<to_port> */
void nft_rule_redirect(struct nft_batch *b, const char *table, const char *chain, const char *set, uint16_t dport,
                       uint16_t to_port) {
        struct nftnl_rule *r = rule_new(table, chain);
        uint8_t tcp = IPPROTO_TCP;
        uint16_t dp = htons(dport), tp = htons(to_port);
        x_ipv4_only(r);
        x_ip_addr(r, true);
        x_lookup(r, set, false);
        x_meta(r, NFT_META_L4PROTO);
        x_cmp(r, NFT_CMP_EQ, &tcp, sizeof(tcp));
        x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
        x_cmp(r, NFT_CMP_EQ, &dp, sizeof(dp));
        x_counter(r);
        struct nftnl_expr *imm = expr(r, "immediate");
        nftnl_expr_set_u32(imm, NFTNL_EXPR_IMM_DREG, NFT_REG_1);
        nftnl_expr_set(imm, NFTNL_EXPR_IMM_DATA, &tp, sizeof(tp));
        struct nftnl_expr *rd = expr(r, "redir");
        nftnl_expr_set_u32(rd, NFTNL_EXPR_REDIR_REG_PROTO_MIN, NFT_REG_1);
        rule_add(b, r, dport == 443 ? "tcp dport 443 redirect to the egress proxy" : "tcp dport 80 redirect to the egress proxy");
}

/* meta l4proto tcp tcp dport <port> ct status dnat counter accept: only connections our own
 * redirect sent there reach the proxy's port (a sandbox dialling it directly is not). */
void nft_rule_proxy_accept(struct nft_batch *b, const char *table, const char *chain, uint16_t port) {
        struct nftnl_rule *r = rule_new(table, chain);
        uint8_t tcp = IPPROTO_TCP;
        uint16_t p = htons(port);
        uint32_t dnat = IPS_DST_NAT, zero = 0;
        x_meta(r, NFT_META_L4PROTO);
        x_cmp(r, NFT_CMP_EQ, &tcp, sizeof(tcp));
        x_payload(r, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
        x_cmp(r, NFT_CMP_EQ, &p, sizeof(p));
        struct nftnl_expr *e = expr(r, "ct");
        nftnl_expr_set_u32(e, NFTNL_EXPR_CT_KEY, NFT_CT_STATUS);
        nftnl_expr_set_u32(e, NFTNL_EXPR_CT_DREG, NFT_REG_1);
        x_bitwise(r, &dnat, &zero, sizeof(dnat));
        x_cmp(r, NFT_CMP_NEQ, &zero, sizeof(zero));
        x_counter(r);
        x_verdict(r, NF_ACCEPT, NULL);
        rule_add(b, r, "redirected tcp to the egress proxy accept");
}
