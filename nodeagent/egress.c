/* egress.c — fail-closed per-sandbox egress: one nft table, one atomic batch per change.
 *
 * This is the policy: the table's layout, validation, and what each change puts
 * in its batch. nft.c below it talks to the kernel's nf_tables (socket, dumps,
 * batches, object and rule builders); conntrack.c ends the connections a
 * tightening forbids. Every change is a single batch between
 * NFNL_MSG_BATCH_BEGIN and _END, so the kernel commits all of it or nothing.
 *
 * Changes that depend on what is already in the table (which map element to
 * replace, which dns_clients element to delete) read the ruleset generation
 * first, then dump, then send the batch tagged with that generation
 * (NFNL_BATCH_GENID): if anyone changed the ruleset in between, the kernel
 * refuses the whole batch with ERESTART and we start over. Only that makes
 * read-then-write safe without DESTROY messages (kernel >= 6.3 only).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/gen.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>

#include "cleanup.h"
#include "conntrack.h"
#include "egress.h"
#include "log.h"
#include "nft.h"
#include "strutil.h"

#define CHAIN_FORWARD "forward_sbx"
#define CHAIN_INPUT "input_sbx"
#define CHAIN_INTO "into_sbx"
#define CHAIN_EGRESS "sbx_egress"
#define CHAIN_TO_HOST "sbx_to_host"
#define SET_DENY "node_deny"
#define SET_DNS "dns_clients"
#define MAP_SANDBOXES "sandboxes"
#define MAP_STEER "steer"               /* sandbox IP : jump pxy_<id> (sandboxes with egress rules) */
#define CHAIN_STEER "steer_sbx"         /* nat prerouting: iifname <bridge> jump steer_dispatch */
#define CHAIN_STEER_DISPATCH "steer_dispatch"   /* ip saddr vmap @steer */
#define STEER_PRIORITY (-100)           /* dstnat */
#define PXY_CHAIN_PREFIX "pxy_"         /* per sandbox: its rule hosts' 80 and 443 redirected */
#define PXY_SET_PREFIX "pxyd_"          /* per sandbox: its rule hosts' addresses */
#define MAP_PORTS "ports"               /* table bridge: port -> jump sbx_<id> */
#define CHAIN_GUARD "guard"             /* table bridge: prerouting, iifname vmap @ports */
#define GUARD_PRIORITY (-300)
#define GUARD_HOOK 0                    /* NF_BR_PRE_ROUTING (<linux/netfilter_bridge.h> clashes with <net/if.h>) */
#define SBX_CHAIN_PREFIX "sbx_"
#define ALLOW_SET_PREFIX "allow_"
#define TABLE_NAME_MAX 255              /* NFT_NAME_MAXLEN - 1 */
#define NAME_BUF NFT_NAME_BUF

/* Another writer committed between our read and our batch: start over after a
 * short, growing, jittered pause so two writers stop colliding. */
#define GENID_RETRIES 16

/* Always denied, whatever the configuration: link-local (cloud metadata
 * 169.254.169.254 and 169.254.170.2 included), multicast, limited broadcast.
 * Sandbox bridges may themselves sit in 169.254.0.0/16: their replies are
 * ct established (accepted first) and routing via the gateway never needs the
 * gateway as a destination, so only sandbox -> link-local traffic is lost. */
static const char *const builtin_deny[] = { "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32" };

static pthread_mutex_t egress_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
        bool ready;
        char table[TABLE_NAME_MAX + 1];
        bool have_resolver;
        uint32_t resolver;              /* host order */
        char *bridges[EGRESS_MAX_BRIDGES + 1];  /* NULL-terminated: where sandbox ports are */
        uint16_t proxy_port;            /* the egress proxy's port, 0 = no proxy on this node */
} st;

static void lockp(pthread_mutex_t **m) {
        if (*m)
                pthread_mutex_unlock(*m);
}
#define LOCK_SCOPE() \
        _cleanup_(lockp) _unused_ pthread_mutex_t *_lk_ = (pthread_mutex_lock(&egress_lock), &egress_lock)

/* ---------------------------------------------------------------- validation */

static bool table_name_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n > TABLE_NAME_MAX)
                return false;
        for (const char *p = s; *p; p++)
                if (!ascii_alnum(*p) && *p != '_' && *p != '-')
                        return false;
        return true;
}

static bool ifname_valid(const char *s) {
        size_t n = strlen(s);
        if (n == 0 || n >= IFNAMSIZ)
                return false;
        for (const char *p = s; *p; p++)
                if (*p <= ' ' || *p == '/' || *p == ':' || (unsigned char) *p >= 0x7f)
                        return false;
        return true;
}

static int parse_cidr(const char *s, struct nft_range *ret, struct err *why) {
        struct pj_allow_entry e;
        int r = pj_allow_entry_parse(s, &e, NULL, 0, why);
        if (r < 0)
                return r;
        switch (e.kind) {
        case PJ_ALLOW_IPV4:
        case PJ_ALLOW_CIDR:
                *ret = nft_range_of(e.addr, e.prefix);
                return 0;
        case PJ_ALLOW_HOSTNAME:
                return err_set(why, -EINVAL, "is a hostname; an IPv4 address or CIDR is required here");
        }
        return -EINVAL;
}

static bool ipv4_parse(const char *s, uint32_t *ret) {
        struct in_addr a;
        if (inet_pton(AF_INET, s, &a) != 1)
                return false;
        *ret = ntohl(a.s_addr);
        return true;
}

static void sbx_names(const char *id, char chain[NAME_BUF], char set[NAME_BUF]) {
        snprintf(chain, NAME_BUF, SBX_CHAIN_PREFIX "%s", id);
        snprintf(set, NAME_BUF, ALLOW_SET_PREFIX "%s", id);
}

static void pxy_names(const char *id, char chain[NAME_BUF], char set[NAME_BUF]) {
        snprintf(chain, NAME_BUF, PXY_CHAIN_PREFIX "%s", id);
        snprintf(set, NAME_BUF, PXY_SET_PREFIX "%s", id);
}

/* ---------------------------------------------------------------- read, then write */

/* What a change read from the table before building its batch. */
enum { VIEW_ELEMS = 1 << 0, VIEW_CHAINS = 1 << 1, VIEW_SETS = 1 << 2, VIEW_PORTS = 1 << 3 };
struct view {
        uint32_t genid;
        struct nft_elem *map, *dns, *steer; /* VIEW_ELEMS: @sandboxes, @dns_clients, @steer */
        size_t n_map, n_dns, n_steer;
        struct nft_names chains;        /* VIEW_CHAINS */
        struct nft_names sets;          /* VIEW_SETS */
        struct nft_port_elem *ports;    /* VIEW_PORTS: the bridge table's @ports and chains */
        size_t n_ports;
        struct nft_names br;            /* the bridge table's chains */
};

static void view_done(struct view *v) {
        free(v->map);
        free(v->dns);
        free(v->steer);
        free(v->ports);
        nft_names_done(&v->chains);
        nft_names_done(&v->br);
        nft_names_done(&v->sets);
        *v = (struct view) { 0 };
}

/* Fills b (begun with the view's generation) from v. Returns 1 to send the batch,
 * 0 when there is nothing to change, or -errno with err filled. */
typedef int (*fill_fn)(struct nft_batch *b, const struct view *v, void *ud, struct err *err);

/* The generation-checked read-and-retry step every change that depends on the
 * table's contents shares: read the generation, dump what `what` asks for, let
 * fill build the batch, send it tagged with that generation. ERESTART (someone
 * committed in between) starts over after a jittered pause, GENID_RETRIES times. */
static int read_then_write(const char *table, unsigned what, fill_fn fill, void *ud, struct err *err) {
        int r = 0;
        for (int attempt = 0; attempt < GENID_RETRIES; attempt++) {
                _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
                r = nft_open(&nl);
                if (r < 0)
                        return err_set(err, r, "cannot open a netfilter netlink socket: %s", strerror(-r));
                _cleanup_(view_done) struct view v = { 0 };
                r = nft_get_genid(nl, &v.genid);
                if (r < 0)
                        return err_set(err, r, "cannot read the nftables generation: %s", strerror(-r));
                if (what & VIEW_ELEMS) {
                        r = nft_dump_elems(nl, table, MAP_SANDBOXES, &v.map, &v.n_map);
                        if (r >= 0)
                                r = nft_dump_elems(nl, table, SET_DNS, &v.dns, &v.n_dns);
                        if (r >= 0)
                                r = nft_dump_elems(nl, table, MAP_STEER, &v.steer, &v.n_steer);
                }
                if (r >= 0 && (what & VIEW_CHAINS))
                        r = nft_dump_chains(nl, NFT_FAMILY, table, &v.chains);
                if (r >= 0 && (what & VIEW_SETS))
                        r = nft_dump_sets(nl, table, &v.sets);
                if (r >= 0 && (what & VIEW_PORTS)) {
                        r = nft_dump_port_elems(nl, table, MAP_PORTS, &v.ports, &v.n_ports);
                        if (r >= 0)
                                r = nft_dump_chains(nl, NFPROTO_BRIDGE, table, &v.br);
                }
                if (r == -EINTR) {
                        /* The ruleset changed during a dump (NLM_F_DUMP_INTR): read it again. */
                        log_debug("nftables dump interrupted by a concurrent change; retrying");
                        nft_restart_backoff(attempt);
                        continue;
                }
                if (r < 0)
                        return err_set(err, r, "cannot list the egress table: %s", strerror(-r));

                _cleanup_(nft_batch_done) struct nft_batch b = { 0 };
                nft_batch_begin(&b, v.genid);
                r = fill(&b, &v, ud, err);
                if (r <= 0)
                        return r;
                r = nft_batch_send(nl, &b, err);
                if (r != -ERESTART)
                        return r;
                log_debug("nftables ruleset changed since it was read; retrying");
                nft_restart_backoff(attempt);
        }
        return err_set(err, r, "the nftables ruleset kept changing under us (%d attempts)", GENID_RETRIES);
}

/* ---------------------------------------------------------------- init */

struct init_args {
        const struct egress_config *cfg;
        const char *table;
        const struct nft_range *deny;
        size_t n_deny, n_br;
        uint32_t resolver;
};

/* What both sandbox chains start with, in a chain created or flushed here:
 * established/related accept, non-IPv4 drop, DNS to the resolver accept. */
static void sandbox_chain_head(struct nft_batch *b, const struct init_args *a, const char *chain) {
        nft_add_chain(b, a->table, chain, -1, 0);
        nft_chain_op(b, NFT_MSG_DELRULE, a->table, chain);
        nft_rule_ct_established(b, a->table, chain);
        nft_rule_non_ipv4_drop(b, a->table, chain);
        if (a->cfg->dns_resolver) {
                nft_rule_dns(b, a->table, chain, a->resolver, IPPROTO_UDP, SET_DNS);
                nft_rule_dns(b, a->table, chain, a->resolver, IPPROTO_TCP, SET_DNS);
        }
}

static int fill_init(struct nft_batch *b, const struct view *v, void *ud, struct err *err) {
        const struct init_args *a = ud;
        (void) err;
        _cleanup_(nftnl_table_freep) struct nftnl_table *t = xnonnull(nftnl_table_alloc());
        nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, NFT_FAMILY);
        nftnl_table_set_str(t, NFTNL_TABLE_NAME, a->table);
        NFT_BATCH_PUT(b, nftnl_table_nlmsg_build_payload, t, NFT_MSG_NEWTABLE, NLM_F_CREATE, "add table inet %s", a->table);

        nft_add_set(b, a->table, SET_DENY, true, false);
        nft_flush_set(b, a->table, SET_DENY);
        nft_add_interval_elems(b, a->table, SET_DENY, a->deny, a->n_deny);
        nft_add_set(b, a->table, SET_DNS, false, false);
        nft_add_set(b, a->table, MAP_SANDBOXES, false, true);

        /* sbx_egress: everything forwarded from a sandbox bridge. */
        sandbox_chain_head(b, a, CHAIN_EGRESS);
        nft_rule_daddr_set(b, a->table, CHAIN_EGRESS, SET_DENY, NF_DROP);
        for (size_t j = 0; j < a->n_br; j++)
                nft_rule_oif_drop(b, a->table, CHAIN_EGRESS, a->cfg->bridges[j]);
        nft_rule_vmap_saddr(b, a->table, CHAIN_EGRESS, MAP_SANDBOXES);
        nft_rule_counter(b, a->table, CHAIN_EGRESS, NF_DROP);

        /* sbx_to_host: sandbox -> this host goes through input, not forward. */
        sandbox_chain_head(b, a, CHAIN_TO_HOST);
        /* The egress proxy's port, for the connections the steering below redirected there. */
        if (a->cfg->proxy_port)
                nft_rule_proxy_accept(b, a->table, CHAIN_TO_HOST, a->cfg->proxy_port);
        /* Everything else a sandbox sends to this host (unicast to any of its
         * addresses, broadcast, multicast) is dropped: the input hook only
         * sees traffic for the host itself. */
        nft_rule_counter(b, a->table, CHAIN_TO_HOST, NF_DROP);

        /* Steering to the egress proxy: a sandbox with rules jumps (by its address) to its
         * pxy_<id> chain, which redirects its rule hosts' 80 and 443 there. */
        if (a->cfg->proxy_port) {
                nft_add_set(b, a->table, MAP_STEER, false, true);
                nft_add_chain(b, a->table, CHAIN_STEER_DISPATCH, -1, 0);
                nft_chain_op(b, NFT_MSG_DELRULE, a->table, CHAIN_STEER_DISPATCH);
                nft_rule_vmap_saddr(b, a->table, CHAIN_STEER_DISPATCH, MAP_STEER);
                nft_add_nat_chain(b, a->table, CHAIN_STEER, NF_INET_PRE_ROUTING, STEER_PRIORITY);
                nft_chain_op(b, NFT_MSG_DELRULE, a->table, CHAIN_STEER);
                for (size_t j = 0; j < a->n_br; j++)
                        nft_rule_iif_jump(b, a->table, CHAIN_STEER, a->cfg->bridges[j], CHAIN_STEER_DISPATCH);
        }


        /* Base chains last: they jump to the chains above. A changed
         * priority cannot be updated in place: delete and recreate. */
        static const struct { const char *name, *to; int hook; } bases[] = {
                { CHAIN_FORWARD, CHAIN_EGRESS, NF_INET_FORWARD },
                { CHAIN_INPUT, CHAIN_TO_HOST, NF_INET_LOCAL_IN },
                { CHAIN_INTO, NULL, NF_INET_FORWARD },
        };
        for (size_t i = 0; i < ELEMENTSOF(bases); i++) {
                int64_t have = nft_names_prio(&v->chains, bases[i].name);
                if (have != -1 && have != a->cfg->priority) {
                        nft_chain_op(b, NFT_MSG_DELRULE, a->table, bases[i].name);
                        nft_chain_op(b, NFT_MSG_DELCHAIN, a->table, bases[i].name);
                }
                nft_add_chain(b, a->table, bases[i].name, bases[i].hook, a->cfg->priority);
                nft_chain_op(b, NFT_MSG_DELRULE, a->table, bases[i].name);
                for (size_t j = 0; j < a->n_br; j++) {
                        if (bases[i].to)
                                nft_rule_iif_jump(b, a->table, bases[i].name, a->cfg->bridges[j], bases[i].to);
                        else {
                                nft_rule_into_new_drop(b, a->table, bases[i].name, a->cfg->bridges[j]);
                                nft_rule_into_not_syn_drop(b, a->table, bases[i].name, a->cfg->bridges[j]);
                        }
                }
        }

        /* The guard: table bridge <table>, its port map kept (bindings survive a restart). */
        b->family = NFPROTO_BRIDGE;
        _cleanup_(nftnl_table_freep) struct nftnl_table *bt = xnonnull(nftnl_table_alloc());
        nftnl_table_set_u32(bt, NFTNL_TABLE_FAMILY, NFPROTO_BRIDGE);
        nftnl_table_set_str(bt, NFTNL_TABLE_NAME, a->table);
        NFT_BATCH_PUT(b, nftnl_table_nlmsg_build_payload, bt, NFT_MSG_NEWTABLE, NLM_F_CREATE, "add table bridge %s", a->table);
        nft_add_port_vmap(b, a->table, MAP_PORTS);
        nft_add_chain(b, a->table, CHAIN_GUARD, GUARD_HOOK, GUARD_PRIORITY);
        nft_chain_op(b, NFT_MSG_DELRULE, a->table, CHAIN_GUARD);
        nft_rule_iif_vmap(b, a->table, CHAIN_GUARD, MAP_PORTS);
        b->family = 0;

        return 1;
}

#define BR_NF_SYSCTL "/proc/sys/net/bridge/bridge-nf-call-iptables"

/* Sandbox isolation on one bridge: frames bridged between two sandboxes never
 * reach IP forwarding unless br_netfilter hands them to it (with the bridge
 * as iif/oif, so the rules below see them). This kernel has no bridge-family
 * `meta ibrname`, so br_netfilter it is: require it, switch it on if off. */
static int require_br_netfilter(struct err *err) {
        char v[8] = "";
        _cleanup_close_ int fd = open(BR_NF_SYSCTL, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                fd = open(BR_NF_SYSCTL, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return err_set(err, -EOPNOTSUPP,
                               "br_netfilter is not loaded (modprobe br_netfilter): without it sandboxes on one bridge "
                               "could reach each other");
        ssize_t n = read(fd, v, sizeof(v) - 1);
        if (n > 0 && v[0] == '1')
                return 0;
        if (lseek(fd, 0, SEEK_SET) < 0 || write(fd, "1", 1) != 1)
                return err_set(err, -EPERM, "%s is 0 and cannot be set to 1: sandboxes on one bridge could reach each other",
                               BR_NF_SYSCTL);
        return 0;
}

int egress_init(const struct egress_config *cfg, struct err *err) {
        LOCK_SCOPE();
        const char *table = cfg->table ? cfg->table : EGRESS_TABLE_DEFAULT;
        struct err why = { 0 };

        if (!table_name_valid(table))
                return err_set(err, -EINVAL, "egress table name \"%.64s\" must be 1..%d of [A-Za-z0-9_-]",
                               table, TABLE_NAME_MAX);
        size_t n_br = 0;
        for (; cfg->bridges && cfg->bridges[n_br]; n_br++) {
                if (!ifname_valid(cfg->bridges[n_br]))
                        return err_set(err, -EINVAL, "egress bridges[%zu] (\"%.32s\") is not an interface name",
                                       n_br, cfg->bridges[n_br]);
                if (n_br >= EGRESS_MAX_BRIDGES)
                        return err_set(err, -EINVAL, "egress bridges: at most %d", EGRESS_MAX_BRIDGES);
        }
        if (n_br == 0)
                return err_set(err, -EINVAL, "egress bridges: at least one sandbox bridge is required");
        uint32_t resolver = 0;
        if (cfg->dns_resolver && !ipv4_parse(cfg->dns_resolver, &resolver))
                return err_set(err, -EINVAL, "egress dns_resolver (\"%.64s\") is not an IPv4 address",
                               cfg->dns_resolver);

        size_t n_deny = ELEMENTSOF(builtin_deny);
        for (size_t i = 0; cfg->deny_cidrs && cfg->deny_cidrs[i]; i++)
                n_deny++;
        if (n_deny > EGRESS_MAX_DENY)
                return err_set(err, -EINVAL, "egress deny_cidrs: at most %d", EGRESS_MAX_DENY);
        _cleanup_free_ struct nft_range *deny = xnew0(struct nft_range, n_deny);
        size_t k = 0;
        for (size_t i = 0; i < ELEMENTSOF(builtin_deny); i++)
                if (parse_cidr(builtin_deny[i], &deny[k++], &why) < 0)
                        abort();
        for (size_t i = 0; cfg->deny_cidrs && cfg->deny_cidrs[i]; i++)
                if (parse_cidr(cfg->deny_cidrs[i], &deny[k++], &why) < 0)
                        return err_set(err, -EINVAL, "egress deny_cidrs[%zu] (\"%.64s\") %s", i,
                                       cfg->deny_cidrs[i], why.message);
        n_deny = nft_ranges_merge(deny, k);

        int rb = require_br_netfilter(err);
        if (rb < 0)
                return rb;
        struct init_args a = { .cfg = cfg, .table = table, .deny = deny, .n_deny = n_deny, .n_br = n_br,
                               .resolver = resolver };
        int r = read_then_write(table, VIEW_CHAINS, fill_init, &a, err);
        if (r < 0)
                return r;
        strscpy(st.table, table, sizeof(st.table));
        for (size_t i = 0; i < ELEMENTSOF(st.bridges); i++) {
                free(st.bridges[i]);
                st.bridges[i] = i < n_br ? xstrdup(cfg->bridges[i]) : NULL;
        }
        st.have_resolver = cfg->dns_resolver != NULL;
        st.resolver = resolver;
        st.proxy_port = cfg->proxy_port;
        st.ready = true;
        return 0;
}

/* ---------------------------------------------------------------- apply / remove */

static bool elems_have_key(const struct nft_elem *v, size_t n, uint32_t key) {
        for (size_t i = 0; i < n; i++)
                if (v[i].key == key)
                        return true;
        return false;
}

static int validate_policy(const struct egress_policy *p, struct nft_range **ret, size_t *ret_n, struct err *err) {
        if (!p->sandbox_id || !hexid_valid(p->sandbox_id))
                return err_set(err, -EINVAL, "sandbox id must be %d lowercase hex characters", EGRESS_ID_LEN);
        if (p->ip == 0 || p->ip == 0xffffffffu)
                return err_set(err, -EINVAL, "sandbox %s: no usable IPv4 address", p->sandbox_id);
        switch (p->mode) {
        case PJ_EGRESS_OPEN:
        case PJ_EGRESS_DENY_ALL:
                *ret = NULL;
                *ret_n = 0;
                return 0;
        case PJ_EGRESS_RESTRICTED:
                break;
        }
        if (p->mode != PJ_EGRESS_RESTRICTED)
                return err_set(err, -EINVAL, "sandbox %s: unknown egress mode %d", p->sandbox_id, (int) p->mode);
        if (p->n_allow > EGRESS_MAX_ALLOW || (p->n_allow > 0 && !p->allow))
                return err_set(err, -EINVAL, "sandbox %s: at most %d allowlist addresses", p->sandbox_id,
                               EGRESS_MAX_ALLOW);
        struct nft_range *v = xnew0(struct nft_range, p->n_allow ? p->n_allow : 1);
        for (size_t i = 0; i < p->n_allow; i++) {
                const struct pj_allow_entry *e = &p->allow[i];
                switch (e->kind) {
                case PJ_ALLOW_IPV4:
                        v[i] = nft_range_of(e->addr, 32);
                        continue;
                case PJ_ALLOW_CIDR:
                        if (e->prefix < 0 || e->prefix > 32)
                                break;
                        v[i] = nft_range_of(e->addr, e->prefix);
                        continue;
                case PJ_ALLOW_HOSTNAME:
                        free(v);
                        return err_set(err, -EINVAL,
                                       "sandbox %s: allow[%zu] is a hostname; resolve it into IPv4 entries first",
                                       p->sandbox_id, i);
                }
                free(v);
                return err_set(err, -EINVAL, "sandbox %s: allow[%zu] is not an IPv4 address or CIDR",
                               p->sandbox_id, i);
        }
        *ret_n = nft_ranges_merge(v, p->n_allow);
        *ret = v;
        return 0;
}

struct apply_args {
        const struct egress_policy *p;
        const struct nft_range *allow;
        size_t n_allow;
        char chain[NAME_BUF], set[NAME_BUF];
        uint32_t *gone;         /* older addresses of this sandbox the batch unmaps */
        size_t n_gone;
        bool was_mapped;        /* ip already led to this sandbox's chain: it may have connections */
        bool taken_over;        /* ip led to another sandbox's chain: none of its connections are ours */
        char port[IFNAMSIZ];    /* "" = the guard binding stays as it is */
        uint8_t mac[6];
        char pchain[NAME_BUF], pset[NAME_BUF];  /* the steering's, when the proxy is on */
        const struct nft_range *steer;
        size_t n_steer;
};

/* The steering's part of an apply (the proxy on): with addresses, chain pxy_<id> redirects
 * them (80, 443) to the proxy and @steer leads ip there; without, nothing of it is left. */
static void fill_steer(struct nft_batch *b, const struct view *v, struct apply_args *a) {
        const char *table = st.table;
        bool have = false;
        for (size_t i = 0; i < v->n_steer; i++) {
                bool ours = streq(v->steer[i].chain, a->pchain);
                if (ours && v->steer[i].key == a->p->ip && a->n_steer) {
                        have = true;
                        continue;
                }
                if (ours || v->steer[i].key == a->p->ip)
                        nft_elem_op(b, NFT_MSG_DELSETELEM, table, MAP_STEER, v->steer[i].key, NULL);
        }
        if (a->n_steer) {
                nft_add_set(b, table, a->pset, true, false);
                nft_flush_set(b, table, a->pset);
                nft_add_interval_elems(b, table, a->pset, a->steer, a->n_steer);
                nft_add_chain(b, table, a->pchain, -1, 0);
                nft_chain_op(b, NFT_MSG_DELRULE, table, a->pchain);
                nft_rule_redirect(b, table, a->pchain, a->pset, 443, st.proxy_port);
                nft_rule_redirect(b, table, a->pchain, a->pset, 80, st.proxy_port);
                if (!have)
                        nft_elem_op(b, NFT_MSG_NEWSETELEM, table, MAP_STEER, a->p->ip, a->pchain);
                return;
        }
        if (nft_names_has(&v->chains, a->pchain)) {
                nft_chain_op(b, NFT_MSG_DELRULE, table, a->pchain);
                nft_chain_op(b, NFT_MSG_DELCHAIN, table, a->pchain);
        }
        if (nft_names_has(&v->sets, a->pset))
                nft_del_set(b, table, a->pset);
}

static void gone_add(uint32_t **v, size_t *n, uint32_t ip) {
        for (size_t i = 0; i < *n; i++)
                if ((*v)[i] == ip)
                        return;
        *v = xrealloc(*v, (*n + 1) * sizeof(**v));
        (*v)[(*n)++] = ip;
}

/* The guard's part of an apply: chain (the sandbox's, in the bridge table) refilled for
 * (ip, mac); port leads there and nowhere else does. */
static void fill_guard(struct nft_batch *b, const struct view *v, const char *chain, const char *port, uint32_t ip,
                       const uint8_t mac[6]) {
        const char *table = st.table;
        b->family = NFPROTO_BRIDGE;
        nft_add_chain(b, table, chain, -1, 0);
        nft_chain_op(b, NFT_MSG_DELRULE, table, chain);
        nft_rules_port_guard(b, table, chain, ip, mac);
        bool have = false;
        for (size_t i = 0; i < v->n_ports; i++) {
                bool ours = streq(v->ports[i].chain, chain), here = streq(v->ports[i].port, port);
                if (ours && here)
                        have = true;
                else if (ours || here)  /* an older port of ours, or this port's binding of a sandbox gone */
                        nft_port_elem_op(b, NFT_MSG_DELSETELEM, table, MAP_PORTS, v->ports[i].port, NULL);
        }
        if (!have)
                nft_port_elem_op(b, NFT_MSG_NEWSETELEM, table, MAP_PORTS, port, chain);
        b->family = 0;
}

static int fill_apply(struct nft_batch *b, const struct view *v, void *ud, struct err *err) {
        struct apply_args *a = ud;
        const struct egress_policy *p = a->p;
        a->was_mapped = a->taken_over = false;          /* this attempt's view decides */
        const char *table = st.table, *chain = a->chain, *set = a->set;
        (void) err;
        nft_add_chain(b, table, chain, -1, 0);
        nft_chain_op(b, NFT_MSG_DELRULE, table, chain);
        nft_add_set(b, table, set, true, false);
        nft_flush_set(b, table, set);
        if (p->mode == PJ_EGRESS_RESTRICTED)
                nft_add_interval_elems(b, table, set, a->allow, a->n_allow);

        nft_rule_counter(b, table, chain, NFT_NO_VERDICT);
        switch (p->mode) {
        case PJ_EGRESS_OPEN:
                nft_rule_counter(b, table, chain, NF_ACCEPT);
                break;
        case PJ_EGRESS_RESTRICTED:
                nft_rule_daddr_set(b, table, chain, set, NF_ACCEPT);
                nft_rule_counter(b, table, chain, NF_DROP);
                break;
        case PJ_EGRESS_DENY_ALL:
                nft_rule_counter(b, table, chain, NF_DROP);
                break;
        }

        /* The map: drop what maps this ip elsewhere or an older ip here. */
        bool have_exact = false;
        for (size_t i = 0; i < v->n_map; i++) {
                bool ours = streq(v->map[i].chain, chain);
                if (v->map[i].key == p->ip && ours) {
                        have_exact = true;
                        a->was_mapped = true;
                        continue;
                }
                if (v->map[i].key == p->ip || ours)
                        nft_elem_op(b, NFT_MSG_DELSETELEM, table, MAP_SANDBOXES, v->map[i].key, NULL);
                if (ours)
                        gone_add(&a->gone, &a->n_gone, v->map[i].key);
                else if (v->map[i].key == p->ip)
                        a->taken_over = true;
                if (ours && v->map[i].key != p->ip && elems_have_key(v->dns, v->n_dns, v->map[i].key))
                        nft_elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, v->map[i].key, NULL);
        }
        if (!have_exact)
                nft_elem_op(b, NFT_MSG_NEWSETELEM, table, MAP_SANDBOXES, p->ip, chain);
        /* DNS only for open: a restricted sandbox gets its names from the
         * platform (/etc/hosts), so the resolver cannot carry data out. */
        if (p->mode == PJ_EGRESS_OPEN)
                nft_elem_op(b, NFT_MSG_NEWSETELEM, table, SET_DNS, p->ip, NULL);
        else if (elems_have_key(v->dns, v->n_dns, p->ip))
                nft_elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, p->ip, NULL);
        if (a->port[0])
                fill_guard(b, v, chain, a->port, p->ip, a->mac);
        if (st.proxy_port)
                fill_steer(b, v, a);
        return 1;
}

int egress_apply(const struct egress_policy *p, struct err *err) {
        LOCK_SCOPE();
        _cleanup_free_ struct nft_range *allow = NULL;
        size_t n_allow = 0;
        int r = validate_policy(p, &allow, &n_allow, err);
        if (r < 0)
                return r;
        if (!st.ready)
                return err_set(err, -ENOTCONN, "egress is not initialised");
        if (p->n_steer && !st.proxy_port)
                return err_set(err, -EOPNOTSUPP, "sandbox %s has egress rules, and this node runs no egress proxy "
                                                 "([proxy] enable)", p->sandbox_id);
        if (p->n_steer > EGRESS_MAX_STEER || (p->n_steer && !p->steer))
                return err_set(err, -EINVAL, "sandbox %s: at most %d addresses steered to the egress proxy", p->sandbox_id,
                               EGRESS_MAX_STEER);
        _cleanup_free_ struct nft_range *steer = xnew0(struct nft_range, p->n_steer ? p->n_steer : 1);
        for (size_t i = 0; i < p->n_steer; i++)
                steer[i] = nft_range_of(p->steer[i], 32);
        struct apply_args a = { .p = p, .allow = allow, .n_allow = n_allow, .steer = steer,
                                .n_steer = nft_ranges_merge(steer, p->n_steer) };
        sbx_names(p->sandbox_id, a.chain, a.set);
        pxy_names(p->sandbox_id, a.pchain, a.pset);
        /* The port first: a sandbox whose port cannot be found is not applied (fail closed). */
        if (p->pid && (r = egress_port_of_pid(p->pid, (const char *const *) st.bridges, a.port, a.mac, err)) < 0)
                return r;
        r = read_then_write(st.table, VIEW_ELEMS | (a.port[0] ? VIEW_PORTS : 0) | (st.proxy_port ? VIEW_CHAINS | VIEW_SETS : 0),
                            fill_apply, &a, err);
        /* The new policy is in force: end what it forbids (retries of read_then_write
         * may have collected an address twice; gone_add keeps one). */
        for (size_t i = 0; r >= 0 && i < a.n_gone; i++)
                r = conntrack_revoke(a.gone[i], NULL, 0, err);
        /* An address another sandbox held: whatever it opened is not this one's to use.
         * One that led nowhere had no egress (fail closed): nothing to end. */
        if (r >= 0 && a.taken_over)
                r = conntrack_revoke(p->ip, NULL, 0, err);
        else if (r >= 0 && a.was_mapped && conntrack_policy_tightens(p->sandbox_id, p->mode, allow, n_allow))
                r = conntrack_revoke(p->ip, allow, p->mode == PJ_EGRESS_RESTRICTED ? n_allow : 0, err);
        free(a.gone);
        if (r >= 0)
                conntrack_policy_set(p->sandbox_id, p->mode, allow, p->mode == PJ_EGRESS_RESTRICTED ? n_allow : 0);
        else
                conntrack_policy_forget(p->sandbox_id);     /* unknown now: the next apply sweeps */
        if (r < 0)
                return err_set(err, r, "the new rules are in force, but the connections they forbid could not be "
                                       "ended: %.399s", err ? err->message : "");
        return 0;
}

struct remove_args {
        uint32_t ip;
        char chain[NAME_BUF], set[NAME_BUF];
        char pchain[NAME_BUF], pset[NAME_BUF];
        uint32_t *gone;         /* addresses the batch unmaps */
        size_t n_gone;
};

static int fill_remove(struct nft_batch *b, const struct view *v, void *ud, struct err *err) {
        struct remove_args *a = ud;
        const char *table = st.table;
        bool any = false;
        (void) err;
        /* Order matters (PROTOCOLS.md 4): map elements, flush, chain, set. */
        for (size_t i = 0; i < v->n_map; i++) {
                if (!streq(v->map[i].chain, a->chain))
                        continue;
                nft_elem_op(b, NFT_MSG_DELSETELEM, table, MAP_SANDBOXES, v->map[i].key, NULL);
                if (elems_have_key(v->dns, v->n_dns, v->map[i].key))
                        nft_elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, v->map[i].key, NULL);
                gone_add(&a->gone, &a->n_gone, v->map[i].key);
                any = true;
        }
        /* ip given but not mapped (e.g. a half-applied older layout): drop a
         * stray dns_clients entry unless another sandbox owns that ip now. */
        if (a->ip != 0 && !elems_have_key(v->map, v->n_map, a->ip) && elems_have_key(v->dns, v->n_dns, a->ip)) {
                nft_elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, a->ip, NULL);
                any = true;
        }
        if (nft_names_has(&v->chains, a->chain)) {
                nft_chain_op(b, NFT_MSG_DELRULE, table, a->chain);
                nft_chain_op(b, NFT_MSG_DELCHAIN, table, a->chain);
                any = true;
        }
        /* The steering: its map element, then its chain and set. */
        for (size_t i = 0; i < v->n_steer; i++)
                if (streq(v->steer[i].chain, a->pchain)) {
                        nft_elem_op(b, NFT_MSG_DELSETELEM, table, MAP_STEER, v->steer[i].key, NULL);
                        any = true;
                }
        if (nft_names_has(&v->chains, a->pchain)) {
                nft_chain_op(b, NFT_MSG_DELRULE, table, a->pchain);
                nft_chain_op(b, NFT_MSG_DELCHAIN, table, a->pchain);
                any = true;
        }
        if (nft_names_has(&v->sets, a->pset)) {
                nft_del_set(b, table, a->pset);
                any = true;
        }
        if (nft_names_has(&v->sets, a->set)) {
                nft_del_set(b, table, a->set);
                any = true;
        }
        /* The guard: its port's element, then its chain. */
        b->family = NFPROTO_BRIDGE;
        for (size_t i = 0; i < v->n_ports; i++)
                if (streq(v->ports[i].chain, a->chain)) {
                        nft_port_elem_op(b, NFT_MSG_DELSETELEM, table, MAP_PORTS, v->ports[i].port, NULL);
                        any = true;
                }
        if (nft_names_has(&v->br, a->chain)) {
                nft_chain_op(b, NFT_MSG_DELRULE, table, a->chain);
                nft_chain_op(b, NFT_MSG_DELCHAIN, table, a->chain);
                any = true;
        }
        b->family = 0;
        return any ? 1 : 0;
}

int egress_remove(const char *sandbox_id, uint32_t ip, struct err *err) {
        LOCK_SCOPE();
        if (!sandbox_id || !hexid_valid(sandbox_id))
                return err_set(err, -EINVAL, "sandbox id must be %d lowercase hex characters", EGRESS_ID_LEN);
        if (!st.ready)
                return err_set(err, -ENOTCONN, "egress is not initialised");
        struct remove_args a = { .ip = ip };
        sbx_names(sandbox_id, a.chain, a.set);
        pxy_names(sandbox_id, a.pchain, a.pset);
        int r = read_then_write(st.table, VIEW_ELEMS | VIEW_CHAINS | VIEW_SETS | VIEW_PORTS, fill_remove, &a, err);
        conntrack_policy_forget(sandbox_id);
        /* Paused or gone: nothing it opened from the addresses it held may go on. */
        for (size_t i = 0; r >= 0 && i < a.n_gone; i++)
                r = conntrack_revoke(a.gone[i], NULL, 0, err);
        free(a.gone);
        return r < 0 ? r : 0;
}

/* The table the reading calls (list, stats) look at: egress_init's, or the default while
 * none has succeeded. Under egress_lock. */
static const char *table_read(void) {
        return st.ready ? st.table : EGRESS_TABLE_DEFAULT;
}

int egress_list(char ***ret_sandbox_ids) {
        LOCK_SCOPE();
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
        int r = nft_open(&nl);
        if (r < 0)
                return r;
        _cleanup_(nft_names_done) struct nft_names chains = { 0 };
        r = nft_dump_chains(nl, NFT_FAMILY, table_read(), &chains);
        if (r < 0)
                return r;
        _cleanup_(nft_names_done) struct nft_names ids = { 0 };
        for (size_t i = 0; i < chains.n; i++) {
                const char *n = chains.v[i];
                if (startswith(n, SBX_CHAIN_PREFIX) && hexid_valid(n + strlen(SBX_CHAIN_PREFIX)))
                        nft_names_add(&ids, n + strlen(SBX_CHAIN_PREFIX), -1);
        }
        if (!ids.v)
                ids.v = xnew0(char *, 1);
        int count = (int) ids.n;
        *ret_sandbox_ids = TAKE_PTR(ids.v);
        ids.n = 0;
        return count;
}

/* ---------------------------------------------------------------- stats */

struct stats_dump {
        const char *table;
        struct egress_stats *v;
        size_t n;
};

static struct egress_stats *stats_slot(struct stats_dump *d, const char *id) {
        for (size_t i = 0; i < d->n; i++)
                if (streq(d->v[i].sandbox_id, id))
                        return &d->v[i];
        d->v = xrealloc(d->v, (d->n + 1) * sizeof(*d->v));
        struct egress_stats *x = &d->v[d->n++];
        *x = (struct egress_stats) { 0 };
        strscpy(x->sandbox_id, id, sizeof(x->sandbox_id));
        return x;
}

static int rule_stats_cb(const struct nlmsghdr *nlh, void *data) {
        struct stats_dump *d = data;
        _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = xnonnull(nftnl_rule_alloc());
        if (nftnl_rule_nlmsg_parse(nlh, r) < 0)
                return MNL_CB_ERROR;
        const char *t = nftnl_rule_get_str(r, NFTNL_RULE_TABLE);
        const char *chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
        if (!t || !chain || !streq(t, d->table) || !startswith(chain, SBX_CHAIN_PREFIX) ||
            !hexid_valid(chain + strlen(SBX_CHAIN_PREFIX)))
                return MNL_CB_OK;
        uint64_t pk = 0, by = 0;
        bool have_ctr = false;
        int verdict = NFT_NO_VERDICT;
        struct nftnl_expr_iter *it = xnonnull(nftnl_expr_iter_create(r));
        for (struct nftnl_expr *e = nftnl_expr_iter_next(it); e; e = nftnl_expr_iter_next(it)) {
                const char *name = nftnl_expr_get_str(e, NFTNL_EXPR_NAME);
                if (streq(name, "counter")) {
                        pk = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_PACKETS);
                        by = nftnl_expr_get_u64(e, NFTNL_EXPR_CTR_BYTES);
                        have_ctr = true;
                } else if (streq(name, "immediate") && nftnl_expr_is_set(e, NFTNL_EXPR_IMM_VERDICT))
                        verdict = (int) nftnl_expr_get_u32(e, NFTNL_EXPR_IMM_VERDICT);
        }
        nftnl_expr_iter_destroy(it);
        struct egress_stats *x = stats_slot(d, chain + strlen(SBX_CHAIN_PREFIX));
        if (have_ctr && verdict == NF_ACCEPT) {
                x->allowed_packets += pk;
                x->allowed_bytes += by;
        } else if (have_ctr && verdict == NF_DROP) {
                x->dropped_packets += pk;
                x->dropped_bytes += by;
        }
        return MNL_CB_OK;
}

int egress_stats(struct egress_stats **ret) {
        LOCK_SCOPE();
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
        int r = nft_open(&nl);
        if (r < 0)
                return r;
        struct stats_dump d = { .table = table_read() };
        r = nft_dump_objects(nl, NFT_MSG_GETRULE, NULL, rule_stats_cb, &d);
        if (r < 0 && r != -ENOENT) {
                free(d.v);
                return r;
        }
        *ret = d.v ? d.v : xnew0(struct egress_stats, 1);
        return (int) d.n;
}

