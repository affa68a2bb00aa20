/* nft.c — the kernel layer under egress.c: one netfilter netlink socket per change,
 * dumps, and batches between NFNL_MSG_BATCH_BEGIN and _END, so the kernel commits
 * all of a change or nothing (libnftnl builds the messages, libmnl carries them).
 * The object and rule builders are nft-build.c's; both take every name from the caller,
 * the table's layout is egress.c's.
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

/* Worst-case size of one message we build: nft-build.c chunks the element messages to
 * NFT_ELEMS_PER_MSG elements (~40 bytes each), everything else is far smaller. */
#define MSG_MAX (64 * 1024)
#define RECV_BUF (64 * 1024)
#define ACK_TIMEOUT_MS 5000

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

/* Runs each over every element of table's set in family: its key (klen bytes) and, for a
 * map element that jumps, its chain (else NULL). A missing set (or table) has none. 0 or -errno. */
static int each_set_elem(struct mnl_socket *nl, uint8_t family, const char *table, const char *set,
                         void (*each)(void *ud, const void *key, uint32_t klen, const char *chain), void *ud) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = nft_set_new(table, set);
        int r = dump_set_elems(nl, family, s);
        if (r <= 0)
                return r;
        _cleanup_(nftnl_set_elems_iter_destroyp) struct nftnl_set_elems_iter *it =
                xnonnull(nftnl_set_elems_iter_create(s));
        for (struct nftnl_set_elem *e = nftnl_set_elems_iter_next(it); e; e = nftnl_set_elems_iter_next(it)) {
                uint32_t klen = 0;
                const void *k = nftnl_set_elem_get(e, NFTNL_SET_ELEM_KEY, &klen);
                if (!k)
                        continue;
                each(ud, k, klen, nftnl_set_elem_is_set(e, NFTNL_SET_ELEM_CHAIN)
                                          ? nftnl_set_elem_get_str(e, NFTNL_SET_ELEM_CHAIN) : NULL);
        }
        return 0;
}

/* The elements a dump collected: an array of struct nft_elem or struct nft_port_elem. */
struct elems {
        void *v;
        size_t n;
};

static void elem_take(void *ud, const void *k, uint32_t klen, const char *chain) {
        struct elems *x = ud;
        if (klen != sizeof(uint32_t))
                return;
        uint32_t be;
        memcpy(&be, k, sizeof(be));
        struct nft_elem *v = x->v = xrealloc(x->v, (x->n + 1) * sizeof(*v));
        v[x->n] = (struct nft_elem) { .key = ntohl(be) };
        if (chain)
                strscpy(v[x->n].chain, chain, sizeof(v[x->n].chain));
        x->n++;
}

static void port_elem_take(void *ud, const void *k, uint32_t klen, const char *chain) {
        struct elems *x = ud;
        if (klen != IFNAMSIZ || !memchr(k, 0, IFNAMSIZ))
                return;
        struct nft_port_elem *v = x->v = xrealloc(x->v, (x->n + 1) * sizeof(*v));
        v[x->n] = (struct nft_port_elem) { 0 };
        strscpy(v[x->n].port, k, sizeof(v[x->n].port));
        if (chain)
                strscpy(v[x->n].chain, chain, sizeof(v[x->n].chain));
        x->n++;
}

/* each_set_elem with take collecting into *ret: 0, or -errno with *ret empty. */
static int collect_elems(struct mnl_socket *nl, uint8_t family, const char *table, const char *set,
                         void (*take)(void *ud, const void *key, uint32_t klen, const char *chain), struct elems *ret) {
        *ret = (struct elems) { 0 };
        int r = each_set_elem(nl, family, table, set, take, ret);
        if (r < 0) {
                free(ret->v);
                *ret = (struct elems) { 0 };
        }
        return r;
}

/* Elements of a set/map with 4-byte keys; a missing set (or table) is empty. */
int nft_dump_elems(struct mnl_socket *nl, const char *table, const char *set, struct nft_elem **ret, size_t *ret_n) {
        struct elems x;
        int r = collect_elems(nl, NFT_FAMILY, table, set, elem_take, &x);
        *ret = x.v;
        *ret_n = x.n;
        return r;
}

int nft_dump_port_elems(struct mnl_socket *nl, const char *table, const char *map, struct nft_port_elem **ret,
                        size_t *ret_n) {
        struct elems x;
        int r = collect_elems(nl, NFPROTO_BRIDGE, table, map, port_elem_take, &x);
        *ret = x.v;
        *ret_n = x.n;
        return r;
}

/* ---- names of a table's chains or sets */

void nft_names_done(struct nft_names *n) {
        for (size_t i = 0; i < n->n; i++)
                free(n->v[i]);
        free(n->v);
        free(n->prio);
        *n = (struct nft_names) { 0 };
}

void nft_names_add(struct nft_names *n, const char *s, int64_t prio) {
        n->v = xrealloc(n->v, (n->n + 2) * sizeof(char *));
        n->prio = xrealloc(n->prio, (n->n + 1) * sizeof(int64_t));
        n->prio[n->n] = prio;
        n->v[n->n++] = xstrdup(s);
        n->v[n->n] = NULL;
}

static const int64_t *names_find(const struct nft_names *n, const char *s) {
        for (size_t i = 0; i < n->n; i++)
                if (streq(n->v[i], s))
                        return &n->prio[i];
        return NULL;
}

bool nft_names_has(const struct nft_names *n, const char *s) {
        return names_find(n, s) != NULL;
}

int64_t nft_names_prio(const struct nft_names *n, const char *s) {
        const int64_t *p = names_find(n, s);
        return p ? *p : -1;
}

struct names_dump {
        const char *table;
        bool sets;
        struct nft_names names;
};

static int names_cb(const struct nlmsghdr *nlh, void *data) {
        struct names_dump *d = data;
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = NULL;
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = NULL;
        const char *t, *name;
        int64_t prio = -1;
        if (d->sets) {
                s = xnonnull(nftnl_set_alloc());
                if (nftnl_set_nlmsg_parse(nlh, s) < 0)
                        return MNL_CB_ERROR;
                t = nftnl_set_get_str(s, NFTNL_SET_TABLE);
                name = nftnl_set_get_str(s, NFTNL_SET_NAME);
        } else {
                c = xnonnull(nftnl_chain_alloc());
                if (nftnl_chain_nlmsg_parse(nlh, c) < 0)
                        return MNL_CB_ERROR;
                t = nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE);
                name = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
                if (nftnl_chain_is_set(c, NFTNL_CHAIN_PRIO))
                        prio = (int32_t) nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO);
        }
        if (t && name && streq(t, d->table))
                nft_names_add(&d->names, name, prio);
        return MNL_CB_OK;
}

int nft_dump_chains(struct mnl_socket *nl, uint8_t family, const char *table, struct nft_names *ret) {
        struct names_dump d = { .table = table };
        /* the kernel's chain dump does not filter by table: names_cb does */
        int r = nft_dump_objects_in(nl, family, NFT_MSG_GETCHAIN, NULL, names_cb, &d);
        if (r < 0) {
                nft_names_done(&d.names);
                return r;
        }
        *ret = d.names;
        return 0;
}

int nft_dump_sets(struct mnl_socket *nl, const char *table, struct nft_names *ret) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = xnonnull(nftnl_set_alloc());
        nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
        struct names_dump d = { .table = table, .sets = true };
        int r = nft_dump_objects(nl, NFT_MSG_GETSET, s, names_cb, &d);
        if (r == -ENOENT)       /* no table */
                r = 0;
        if (r < 0) {
                nft_names_done(&d.names);
                return r;
        }
        *ret = d.names;
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
int nft_batch_send(struct mnl_socket *nl, struct nft_batch *b, struct err *err) {
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
                return err_set(err, -errno, "sending the nftables batch failed: %m");

        struct ack_state s = { 0 };
        _cleanup_free_ char *buf = xmalloc(RECV_BUF);
        while (s.acks < b->n_acked && s.error == 0) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r = poll(&p, 1, ACK_TIMEOUT_MS);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return err_set(err, -errno, "waiting for nftables acks failed: %m");
                if (r == 0)
                        return err_set(err, -ETIMEDOUT, "nftables acked %zu of %zu messages",
                                       s.acks, b->n_acked);
                ssize_t n = recv(fd, buf, RECV_BUF, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return err_set(err, -errno, "reading nftables acks failed: %m");
                parse_acks(buf, (size_t) n, &s);
        }
        if (s.error != 0)
                return err_set(err, s.error, "nftables rejected %s: %s%s%s",
                               batch_what(b, s.error_seq), strerror(-s.error),
                               s.msg[0] ? ": " : "", s.msg);
        return 0;
}
