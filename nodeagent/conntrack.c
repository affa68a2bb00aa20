/* conntrack.c — ends the connections a tightened egress policy forbids (ctnetlink), and
 * keeps what egress last applied per sandbox to tell whether a change tightens.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <libmnl/libmnl.h>

#include "cleanup.h"
#include "conntrack.h"
#include "nft.h"
#include "strutil.h"

/* ---------------------------------------------------------------- conntrack
 *
 * The chains accept "ct state established,related" first, so a policy that
 * tightens would leave the connections it now forbids running. After the batch
 * that tightens has committed, the entries those connections hold are deleted
 * (ctnetlink, same netfilter socket family): the next packet of such a flow is
 * new again, goes through the sandbox's chain and is dropped there. Entries are
 * matched on their original direction (what the sandbox opened; with masquerade
 * the original source is still the sandbox's address). Connections opened TO
 * the sandbox (reply direction from it) are ingress and left alone. */

#define CT_DELETE_MAX 65536     /* entries one round collects: memory for one round is bounded */
#define CT_ID_MAX 24            /* a sandbox id (egress.h EGRESS_ID_LEN) */
#define CT_ROUNDS_MAX 64        /* rounds one revoke runs: 4 Mi entries, past any nf_conntrack_max */

struct ct_entry {
        uint32_t dst;                   /* original destination, host order */
        uint32_t id;                    /* CTA_ID, network order as dumped */
        bool have_id, have_zone;
        uint16_t zone;                  /* network order */
        uint16_t tuple_len;
        uint8_t tuple[128];             /* the CTA_TUPLE_ORIG payload, verbatim */
};

struct ct_dump {
        uint32_t src;                   /* host order */
        const struct nft_range *keep;       /* destinations still allowed */
        size_t n_keep;
        struct ct_entry *v;
        size_t n;
};

static bool ranges_have(const struct nft_range *r, size_t n, uint32_t addr) {
        for (size_t i = 0; i < n; i++)
                if (addr >= r[i].lo && addr <= r[i].hi)
                        return true;
        return false;
}

static int ct_attr_cb(const struct nlattr *a, void *data) {
        const struct nlattr **tb = data;
        uint16_t t = mnl_attr_get_type(a);
        if (t <= CTA_MAX)
                tb[t] = a;
        return MNL_CB_OK;
}

static int ct_ip_cb(const struct nlattr *a, void *data) {
        const struct nlattr **tb = data;
        uint16_t t = mnl_attr_get_type(a);
        if ((t == CTA_IP_V4_SRC || t == CTA_IP_V4_DST) && mnl_attr_validate(a, MNL_TYPE_U32) >= 0)
                tb[t] = a;
        return MNL_CB_OK;
}

static int ct_tuple_cb(const struct nlattr *a, void *data) {
        const struct nlattr **tb = data;
        if (mnl_attr_get_type(a) == CTA_TUPLE_IP && mnl_attr_validate(a, MNL_TYPE_NESTED) >= 0)
                tb[CTA_TUPLE_IP] = a;
        return MNL_CB_OK;
}

static int ct_dump_cb(const struct nlmsghdr *nlh, void *data) {
        struct ct_dump *d = data;
        const struct nlattr *tb[CTA_MAX + 1] = { 0 }, *tt[CTA_TUPLE_MAX + 1] = { 0 }, *ti[CTA_IP_MAX + 1] = { 0 };
        if (mnl_attr_parse(nlh, sizeof(struct nfgenmsg), ct_attr_cb, tb) < 0)
                return MNL_CB_OK;
        const struct nlattr *orig = tb[CTA_TUPLE_ORIG];
        if (!orig || mnl_attr_validate(orig, MNL_TYPE_NESTED) < 0 || mnl_attr_get_payload_len(orig) > sizeof(d->v[0].tuple))
                return MNL_CB_OK;
        if (mnl_attr_parse_nested(orig, ct_tuple_cb, tt) < 0 || !tt[CTA_TUPLE_IP] ||
            mnl_attr_parse_nested(tt[CTA_TUPLE_IP], ct_ip_cb, ti) < 0 || !ti[CTA_IP_V4_SRC] || !ti[CTA_IP_V4_DST])
                return MNL_CB_OK;
        uint32_t src = ntohl(mnl_attr_get_u32(ti[CTA_IP_V4_SRC])), dst = ntohl(mnl_attr_get_u32(ti[CTA_IP_V4_DST]));
        if (src != d->src || ranges_have(d->keep, d->n_keep, dst) || d->n >= CT_DELETE_MAX)
                return MNL_CB_OK;
        d->v = xrealloc(d->v, (d->n + 1) * sizeof(*d->v));
        struct ct_entry *e = &d->v[d->n++];
        *e = (struct ct_entry) { .dst = dst, .tuple_len = (uint16_t) mnl_attr_get_payload_len(orig) };
        memcpy(e->tuple, mnl_attr_get_payload(orig), e->tuple_len);
        if (tb[CTA_ID] && mnl_attr_validate(tb[CTA_ID], MNL_TYPE_U32) >= 0) {
                e->id = mnl_attr_get_u32(tb[CTA_ID]);
                e->have_id = true;
        }
        if (tb[CTA_ZONE] && mnl_attr_validate(tb[CTA_ZONE], MNL_TYPE_U16) >= 0) {
                e->zone = mnl_attr_get_u16(tb[CTA_ZONE]);
                e->have_zone = true;
        }
        return MNL_CB_OK;
}

static struct nlmsghdr *ct_msg(char *buf, uint16_t type, uint16_t flags) {
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | type;
        nlh->nlmsg_flags = NLM_F_REQUEST | flags;
        nlh->nlmsg_seq = nft_seq_next();
        struct nfgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
        g->nfgen_family = AF_INET;
        g->version = NFNETLINK_V0;
        g->res_id = 0;
        return nlh;
}

static int ack_cb(const struct nlmsghdr *nlh, void *data) {
        (void) nlh, (void) data;
        return MNL_CB_OK;
}

/* One round: lists up to CT_DELETE_MAX of the entries to delete and deletes them.
 * Returns how many were deleted and sets *ret_full when the list was cut at the bound
 * (more may be left), or -errno with err filled. */
static int revoke_round(struct mnl_socket *nl, uint32_t src, const struct nft_range *keep, size_t n_keep,
                        bool *ret_full, struct err *err) {
        int r;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = ct_msg(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP);
        struct ct_dump d = { .src = src, .keep = keep, .n_keep = n_keep };
        r = nft_query(nl, nlh, true, ct_dump_cb, &d);
        if (r < 0) {
                free(d.v);
                return err_set(err, r, "cannot list the connection tracking table: %s", strerror(-r));
        }
        int deleted = 0;
        for (size_t i = 0; i < d.n; i++) {
                const struct ct_entry *e = &d.v[i];
                nlh = ct_msg(buf, IPCTNL_MSG_CT_DELETE, NLM_F_ACK);
                mnl_attr_put(nlh, CTA_TUPLE_ORIG | NLA_F_NESTED, e->tuple_len, e->tuple);
                if (e->have_zone)
                        mnl_attr_put_u16(nlh, CTA_ZONE, e->zone);
                if (e->have_id)
                        mnl_attr_put_u32(nlh, CTA_ID, e->id);
                r = nft_query(nl, nlh, false, ack_cb, NULL);
                if (r == -ENOENT)
                        continue;       /* gone already (expired, or closed) */
                if (r < 0) {
                        free(d.v);
                        return err_set(err, r, "cannot delete a connection tracking entry: %s", strerror(-r));
                }
                deleted++;
        }
        *ret_full = d.n >= CT_DELETE_MAX;
        free(d.v);
        return deleted;
}

/* Deletes the conntrack entries sandbox address src opened towards a destination
 * outside keep (all of them when n_keep is 0), in rounds of at most CT_DELETE_MAX until
 * a round finds fewer: a sandbox holding more entries than one round loses them all.
 * Returns how many were deleted, or -errno with err filled. Entries that expire meanwhile
 * are not an error. */
int conntrack_revoke(uint32_t src, const struct nft_range *keep, size_t n_keep, struct err *err) {
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
        int r = nft_open(&nl);
        if (r < 0)
                return err_set(err, r, "cannot open a conntrack netlink socket: %s", strerror(-r));
        int total = 0;
        bool full = true;
        /* A round that deleted nothing although its list was full cannot make progress. */
        for (int round = 0; full && round < CT_ROUNDS_MAX; round++) {
                r = revoke_round(nl, src, keep, n_keep, &full, err);
                if (r < 0)
                        return r;
                total += r;
                if (r == 0)
                        break;
        }
        return total;
}

/* ---------------------------------------------------------------- the last policy */

/* What this process last applied per sandbox, so that an apply that does not tighten
 * skips the sweep (a dump walks the kernel's whole conntrack hash: ~10 ms
 * even when it is empty). Unknown (a restarted agent) counts as tightening. */
struct last_policy {
        char id[CT_ID_MAX + 1];
        enum pj_egress_mode mode;
        struct nft_range *allow;
        size_t n_allow;
};
static struct last_policy *lasts;
static size_t n_lasts;

static struct last_policy *last_find(const char *id) {
        for (size_t i = 0; i < n_lasts; i++)
                if (streq(lasts[i].id, id))
                        return &lasts[i];
        return NULL;
}

void conntrack_policy_forget(const char *id) {
        struct last_policy *l = last_find(id);
        if (!l)
                return;
        free(l->allow);
        *l = lasts[--n_lasts];
}

void conntrack_policy_set(const char *id, enum pj_egress_mode mode, const struct nft_range *allow, size_t n_allow) {
        conntrack_policy_forget(id);
        lasts = xrealloc(lasts, (n_lasts + 1) * sizeof(*lasts));
        struct last_policy *l = &lasts[n_lasts++];
        *l = (struct last_policy) { .mode = mode, .n_allow = n_allow };
        strscpy(l->id, id, sizeof(l->id));
        l->allow = xnew0(struct nft_range, n_allow ? n_allow : 1);
        if (n_allow)
                memcpy(l->allow, allow, n_allow * sizeof(*allow));
}

bool conntrack_policy_tightens(const char *id, enum pj_egress_mode mode, const struct nft_range *allow,
                               size_t n_allow) {
        const struct last_policy *l = last_find(id);
        if (mode == PJ_EGRESS_OPEN)
                return false;
        if (!l)
                return true;
        switch (l->mode) {
        case PJ_EGRESS_DENY_ALL:
                return false;           /* it let nothing through */
        case PJ_EGRESS_OPEN:
                return true;
        case PJ_EGRESS_RESTRICTED:
                break;
        }
        if (mode == PJ_EGRESS_DENY_ALL)
                return l->n_allow > 0;
        /* Every old range inside some new one (new ranges are merged: one must hold it whole). */
        for (size_t i = 0; i < l->n_allow; i++) {
                bool inside = false;
                for (size_t k = 0; k < n_allow && !inside; k++)
                        inside = l->allow[i].lo >= allow[k].lo && l->allow[i].hi <= allow[k].hi;
                if (!inside)
                        return true;
        }
        return false;
}
