/* nft.c — the kernel layer under egress.c: one netfilter netlink socket per change,
 * dumps, and batches between NFNL_MSG_BATCH_BEGIN and _END, so the kernel commits
 * all of a change or nothing (libnftnl builds the messages, libmnl carries them).
 * The object and rule builders take every name from the caller; the table's layout
 * is egress.c's.
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
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/gen.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <libnftnl/table.h>

#include "cleanup.h"
#include "nft.h"
#include "strutil.h"

#define KEY_TYPE_IPV4 7                 /* nft datatype ipv4_addr */
/* Worst-case size of one message we build: the element messages are chunked
 * to ELEMS_PER_MSG elements (~40 bytes each), everything else is far smaller. */
#define ELEMS_PER_MSG 256
#define MSG_MAX (64 * 1024)
#define RECV_BUF (64 * 1024)
#define ACK_TIMEOUT_MS 5000

int nft_errf(char *err, size_t errlen, int r, const char *fmt, ...) {
        if (err && errlen > 0) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return r;
}

/* ---------------------------------------------------------------- netlink socket */

int nft_open(struct mnl_socket **ret) {
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
        if (!nl)
                return -errno;
        if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
                return -errno;
        int one = 1;
        /* Kernel's reason strings, and acks without a copy of our request. */
        (void) mnl_socket_setsockopt(nl, NETLINK_EXT_ACK, &one, sizeof(one));
        (void) mnl_socket_setsockopt(nl, NETLINK_CAP_ACK, &one, sizeof(one));
        *ret = TAKE_PTR(nl);
        return 0;
}

/* Sends one request and runs cb over the replies (all parts of a dump). */
int nft_query(struct mnl_socket *nl, struct nlmsghdr *req, bool dump, mnl_cb_t cb, void *data) {
        uint32_t portid = mnl_socket_get_portid(nl), seq = req->nlmsg_seq;
        if (mnl_socket_sendto(nl, req, req->nlmsg_len) < 0)
                return -errno;
        _cleanup_free_ char *buf = xmalloc(RECV_BUF);
        for (;;) {
                ssize_t n = mnl_socket_recvfrom(nl, buf, RECV_BUF);
                if (n < 0)
                        return errno == EINTR ? -EINTR : -errno;
                int r = mnl_cb_run(buf, (size_t) n, seq, portid, cb, data);
                if (r < 0)
                        return -errno;
                if (r == MNL_CB_STOP || !dump)
                        return 0;
        }
}

void nft_restart_backoff(int attempt) {
        uint8_t j = 0;
        if (getrandom(&j, 1, GRND_NONBLOCK) != 1)
                j = (uint8_t) (clock() & 0xff);
        struct timespec ts = { 0, (long) (attempt + 1) * 500000L + (long) j * 4000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

uint32_t nft_seq_next(void) {
        static uint32_t s;
        if (s == 0)
                s = (uint32_t) time(NULL);
        return ++s;
}

static int gen_cb(const struct nlmsghdr *nlh, void *data) {
        _cleanup_(nftnl_gen_freep) struct nftnl_gen *g = xnonnull(nftnl_gen_alloc());
        if (nftnl_gen_nlmsg_parse(nlh, g) < 0)
                return MNL_CB_ERROR;
        *(uint32_t *) data = nftnl_gen_get_u32(g, NFTNL_GEN_ID);
        return MNL_CB_OK;
}

int nft_dump_objects(struct mnl_socket *nl, uint16_t type, struct nftnl_set *filter, mnl_cb_t cb, void *data) {
        return nft_dump_objects_in(nl, NFT_FAMILY, type, filter, cb, data);
}

int nft_dump_objects_in(struct mnl_socket *nl, uint8_t family, uint16_t type, struct nftnl_set *filter, mnl_cb_t cb,
                        void *data) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, type, family, NLM_F_DUMP, nft_seq_next());
        if (filter && type == NFT_MSG_GETSETELEM)
                nftnl_set_elems_nlmsg_build_payload(nlh, filter);
        else if (filter)
                nftnl_set_nlmsg_build_payload(nlh, filter);
        return nft_query(nl, nlh, true, cb, data);
}

int nft_get_genid(struct mnl_socket *nl, uint32_t *ret) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETGEN, AF_UNSPEC, 0, nft_seq_next());
        return nft_query(nl, nlh, false, gen_cb, ret);
}

struct nftnl_set *nft_set_new(const char *table, const char *name) {
        struct nftnl_set *s = xnonnull(nftnl_set_alloc());
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFT_FAMILY);
        nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
        nftnl_set_set_str(s, NFTNL_SET_NAME, name);
        return s;
}

struct elem_dump {
        struct nftnl_set *set;
};

static int elem_cb(const struct nlmsghdr *nlh, void *data) {
        struct elem_dump *d = data;
        return nftnl_set_elems_nlmsg_parse(nlh, d->set) < 0 ? MNL_CB_ERROR : MNL_CB_OK;
}

/* The elements of table's set in family, parsed into s; 1, 0 when the set (or table) is
 * missing, or -errno. */
static int dump_set_elems(struct mnl_socket *nl, uint8_t family, struct nftnl_set *s) {
        struct elem_dump d = { .set = s };
        int r = nft_dump_objects_in(nl, family, NFT_MSG_GETSETELEM, s, elem_cb, &d);
        return r == -ENOENT ? 0 : r < 0 ? r : 1;
}

/* Elements of a set/map with 4-byte keys; a missing set (or table) is empty. */
int nft_dump_elems(struct mnl_socket *nl, const char *table, const char *set, struct nft_elem **ret, size_t *ret_n) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, set);
        *ret = NULL;
        *ret_n = 0;
        int r = dump_set_elems(nl, NFT_FAMILY, s);
        if (r <= 0)
                return r;

        struct nft_elem *v = NULL;
        size_t n = 0;
        _cleanup_(nftnl_set_elems_iter_destroyp) struct nftnl_set_elems_iter *it =
                xnonnull(nftnl_set_elems_iter_create(s));
        for (struct nftnl_set_elem *e = nftnl_set_elems_iter_next(it); e; e = nftnl_set_elems_iter_next(it)) {
                uint32_t klen = 0;
                const void *k = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &klen);
                if (!k || klen != sizeof(uint32_t))
                        continue;
                uint32_t be;
                memcpy(&be, k, sizeof(be));
                v = xrealloc(v, (n + 1) * sizeof(*v));
                v[n] = (struct nft_elem) { .key = ntohl(be) };
                const char *c = nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_CHAIN)
                                        ? nftnl_set_elem_get_str(e, NFTNL_SET_ELEM_CHAIN) : NULL;
                if (c)
                        strscpy(v[n].chain, c, sizeof(v[n].chain));
                n++;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

/* ---------------------------------------------------------------- batch */

void nft_batch_done(struct nft_batch *b) {
        for (size_t i = 0; i < b->n_what; i++)
                free(b->what[i]);
        free(b->what);
        free(b->buf);
        *b = (struct nft_batch) { 0 };
}

/* Room for the next message (MSG_MAX bytes), zeroed. */
static char *batch_room(struct nft_batch *b) {
        if (b->cap - b->len < MSG_MAX) {
                size_t ncap = b->cap ? b->cap * 2 : 4 * MSG_MAX;
                while (ncap - b->len < MSG_MAX)
                        ncap *= 2;
                b->buf = xrealloc(b->buf, ncap);
                b->cap = ncap;
        }
        memset(b->buf + b->len, 0, MSG_MAX);
        return b->buf + b->len;
}

void nft_batch_commit(struct nft_batch *b, struct nlmsghdr *nlh) {
        /* The payload builders do not bound-check: catch a message that outgrew
         * its room instead of sending a corrupted batch. */
        if (nlh->nlmsg_len > MSG_MAX)
                abort();
        b->len += NLMSG_ALIGN(nlh->nlmsg_len);
}

void nft_batch_begin(struct nft_batch *b, uint32_t genid) {
        *b = (struct nft_batch) { 0 };
        b->seq0 = nft_seq_next();
        b->seq = b->seq0;
        struct nlmsghdr *nlh = nftnl_batch_begin(batch_room(b), b->seq++);
        if (genid)
                mnl_attr_put_u32(nlh, NFNL_BATCH_GENID, htonl(genid));
        nft_batch_commit(b, nlh);
}

/* Header of the next object message; the caller appends the payload and calls nft_batch_commit. */
struct nlmsghdr *nft_batch_msg(struct nft_batch *b, uint16_t type, uint16_t flags, const char *fmt, ...) {
        uint32_t seq = b->seq++;
        size_t idx = seq - b->seq0;
        b->what = xrealloc(b->what, (idx + 1) * sizeof(char *));
        for (size_t i = b->n_what; i < idx; i++)
                b->what[i] = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&b->what[idx], fmt, ap) < 0)
                oom();
        va_end(ap);
        b->n_what = idx + 1;
        b->n_acked++;
        return nftnl_nlmsg_build_hdr(batch_room(b), type, b->family ? b->family : NFT_FAMILY, flags | NLM_F_ACK, seq);
}

static const char *batch_what(const struct nft_batch *b, uint32_t seq) {
        if (seq == b->seq0)
                return "batch begin";
        size_t idx = seq - b->seq0;
        if (seq < b->seq0 || idx >= b->n_what || !b->what[idx])
                return "batch";
        return b->what[idx];
}

struct ack_state {
        size_t acks;
        int error;
        uint32_t error_seq;
        char msg[256];
};

static int ext_ack_cb(const struct nlattr *a, void *data) {
        struct ack_state *s = data;
        if (mnl_attr_get_type(a) == NLMSGERR_ATTR_MSG && mnl_attr_validate(a, MNL_TYPE_NUL_STRING) >= 0)
                strscpy(s->msg, mnl_attr_get_str(a), sizeof(s->msg));
        return MNL_CB_OK;
}

static void parse_acks(const char *buf, size_t n, struct ack_state *s) {
        int len = (int) n;
        for (const struct nlmsghdr *nlh = (const struct nlmsghdr *) buf; mnl_nlmsg_ok(nlh, len);
             nlh = mnl_nlmsg_next(nlh, &len)) {
                if (nlh->nlmsg_type != NLMSG_ERROR)
                        continue;
                if (nlh->nlmsg_len < mnl_nlmsg_size(sizeof(struct nlmsgerr)))
                        continue;
                const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
                s->acks++;
                if (e->error == 0 || s->error != 0)
                        continue;
                s->error = e->error;
                s->error_seq = nlh->nlmsg_seq;
                if (nlh->nlmsg_flags & NLM_F_ACK_TLVS) {
                        size_t off = sizeof(*e);
                        if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
                                off += e->msg.nlmsg_len - sizeof(struct nlmsghdr);
                        (void) mnl_attr_parse(nlh, (unsigned) off, ext_ack_cb, s);
                }
        }
}

/* Sends the batch and checks one ACK per message. The first error wins;
 * its message is named in err. */
int nft_batch_send(struct mnl_socket *nl, struct nft_batch *b, char *err, size_t errlen) {
        struct nlmsghdr *end = nftnl_batch_end(batch_room(b), b->seq++);
        nft_batch_commit(b, end);

        int fd = mnl_socket_get_fd(nl);
        int sz = b->len > (size_t) (4 << 20) ? (int) b->len : 4 << 20;
        if (b->len > 200 * 1024 && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
                (void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        int rsz = 1 << 20;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rsz, sizeof(rsz)) < 0)
                (void) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rsz, sizeof(rsz));

        if (mnl_socket_sendto(nl, b->buf, b->len) < 0)
                return nft_errf(err, errlen, -errno, "sending the nftables batch failed: %m");

        struct ack_state s = { 0 };
        _cleanup_free_ char *buf = xmalloc(RECV_BUF);
        while (s.acks < b->n_acked && s.error == 0) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r = poll(&p, 1, ACK_TIMEOUT_MS);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return nft_errf(err, errlen, -errno, "waiting for nftables acks failed: %m");
                if (r == 0)
                        return nft_errf(err, errlen, -ETIMEDOUT, "nftables acked %zu of %zu messages",
                                    s.acks, b->n_acked);
                ssize_t n = recv(fd, buf, RECV_BUF, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return nft_errf(err, errlen, -errno, "reading nftables acks failed: %m");
                parse_acks(buf, (size_t) n, &s);
        }
        if (s.error != 0)
                return nft_errf(err, errlen, s.error, "nftables rejected %s: %s%s%s",
                            batch_what(b, s.error_seq), strerror(-s.error),
                            s.msg[0] ? ": " : "", s.msg);
        return 0;
}

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
        for (size_t off = 0; off < ne; off += ELEMS_PER_MSG) {
                _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, set);
                size_t end = off + ELEMS_PER_MSG < ne ? off + ELEMS_PER_MSG : ne;
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

int nft_dump_port_elems(struct mnl_socket *nl, const char *table, const char *map, struct nft_port_elem **ret,
                        size_t *ret_n) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, map);
        *ret = NULL;
        *ret_n = 0;
        int r = dump_set_elems(nl, NFPROTO_BRIDGE, s);
        if (r <= 0)
                return r;
        struct nft_port_elem *v = NULL;
        size_t n = 0;
        _cleanup_(nftnl_set_elems_iter_destroyp) struct nftnl_set_elems_iter *it =
                xnonnull(nftnl_set_elems_iter_create(s));
        for (struct nftnl_set_elem *e = nftnl_set_elems_iter_next(it); e; e = nftnl_set_elems_iter_next(it)) {
                uint32_t klen = 0;
                const char *k = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &klen);
                if (!k || klen != IFNAMSIZ || !memchr(k, 0, IFNAMSIZ))
                        continue;
                v = xrealloc(v, (n + 1) * sizeof(*v));
                v[n] = (struct nft_port_elem) { 0 };
                strscpy(v[n].port, k, sizeof(v[n].port));
                const char *c = nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_CHAIN) ? nftnl_set_elem_get_str(e, NFTNL_SET_ELEM_CHAIN)
                                                                                : NULL;
                if (c)
                        strscpy(v[n].chain, c, sizeof(v[n].chain));
                n++;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}
