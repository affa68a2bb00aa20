/* egress.c — fail-closed per-sandbox egress: one nft table, one atomic batch per change.
 *
 * Only this file talks to the kernel's nf_tables (libnftnl builds the
 * messages, libmnl carries them). Every change is a single batch between
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
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
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
#include "egress.h"
#include "log.h"
#include "strutil.h"

#define FAMILY NFPROTO_INET
#define CHAIN_FORWARD "forward_sbx"
#define CHAIN_INPUT "input_sbx"
#define CHAIN_INTO "into_sbx"
#define CHAIN_EGRESS "sbx_egress"
#define CHAIN_TO_HOST "sbx_to_host"
#define SET_DENY "node_deny"
#define SET_DNS "dns_clients"
#define MAP_SANDBOXES "sandboxes"
#define SBX_CHAIN_PREFIX "sbx_"
#define ALLOW_SET_PREFIX "allow_"
#define TABLE_NAME_MAX 255              /* NFT_NAME_MAXLEN - 1 */
#define KEY_TYPE_IPV4 7                 /* nft datatype ipv4_addr */
#define NAME_BUF 64                     /* "allow_" + 24 hex + NUL, with room */

/* Worst-case size of one message we build: the element messages are chunked
 * to ELEMS_PER_MSG elements (~40 bytes each), everything else is far smaller. */
#define ELEMS_PER_MSG 256
#define MSG_MAX (64 * 1024)
#define RECV_BUF (64 * 1024)
#define ACK_TIMEOUT_MS 5000
/* Another writer committed between our read and our batch: start over after a
 * short, growing, jittered pause so two writers stop colliding. */
#define GENID_RETRIES 16

static inline bool streq(const char *a, const char *b) {
        return strcmp(a, b) == 0;
}

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
} st;

static void lockp(pthread_mutex_t **m) {
        if (*m)
                pthread_mutex_unlock(*m);
}
#define LOCK_SCOPE() \
        _cleanup_(lockp) _unused_ pthread_mutex_t *_lk_ = (pthread_mutex_lock(&egress_lock), &egress_lock)

static int errf(char *err, size_t errlen, int r, const char *fmt, ...) _printf_(4, 5);
static int errf(char *err, size_t errlen, int r, const char *fmt, ...) {
        if (err && errlen > 0) {
                va_list ap;
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return r;
}

DEFINE_TRIVIAL_CLEANUP_FUNC(struct mnl_socket *, mnl_socket_close)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_rule *, nftnl_rule_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set *, nftnl_set_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_chain *, nftnl_chain_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_table *, nftnl_table_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_gen *, nftnl_gen_free)
DEFINE_TRIVIAL_CLEANUP_FUNC(struct nftnl_set_elems_iter *, nftnl_set_elems_iter_destroy)

/* ---------------------------------------------------------------- netlink socket */

static int nl_open(struct mnl_socket **ret) {
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
static int nl_query(struct mnl_socket *nl, struct nlmsghdr *req, bool dump, mnl_cb_t cb, void *data) {
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

static void restart_backoff(int attempt) {
        uint8_t j = 0;
        if (getrandom(&j, 1, GRND_NONBLOCK) != 1)
                j = (uint8_t) (clock() & 0xff);
        struct timespec ts = { 0, (long) (attempt + 1) * 500000L + (long) j * 4000L };
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static uint32_t seq_next(void) {
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

static int get_genid(struct mnl_socket *nl, uint32_t *ret) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETGEN, AF_UNSPEC, 0, seq_next());
        return nl_query(nl, nlh, false, gen_cb, ret);
}

/* ---------------------------------------------------------------- dumps */

struct names {
        char **v;
        size_t n;
};

static void names_done(struct names *n) {
        for (size_t i = 0; i < n->n; i++)
                free(n->v[i]);
        free(n->v);
        *n = (struct names) { 0 };
}

static void names_add(struct names *n, const char *s) {
        n->v = xrealloc(n->v, (n->n + 2) * sizeof(char *));
        n->v[n->n++] = xstrdup(s);
        n->v[n->n] = NULL;
}

static bool names_has(const struct names *n, const char *s) {
        for (size_t i = 0; i < n->n; i++)
                if (streq(n->v[i], s))
                        return true;
        return false;
}

struct chain_dump {
        const char *table;
        struct names names;
        /* base chains we own: -1 = absent */
        int64_t fwd_prio, in_prio, into_prio;
};

static void chain_dump_done(struct chain_dump *d) {
        names_done(&d->names);
}

static int chain_cb(const struct nlmsghdr *nlh, void *data) {
        struct chain_dump *d = data;
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = xnonnull(nftnl_chain_alloc());
        if (nftnl_chain_nlmsg_parse(nlh, c) < 0)
                return MNL_CB_ERROR;
        const char *t = nftnl_chain_get_str(c, NFTNL_CHAIN_TABLE);
        const char *name = nftnl_chain_get_str(c, NFTNL_CHAIN_NAME);
        if (!t || !name || !streq(t, d->table))
                return MNL_CB_OK;
        names_add(&d->names, name);
        if (nftnl_chain_is_set(c, NFTNL_CHAIN_PRIO)) {
                int64_t prio = (int32_t) nftnl_chain_get_s32(c, NFTNL_CHAIN_PRIO);
                if (streq(name, CHAIN_FORWARD))
                        d->fwd_prio = prio;
                else if (streq(name, CHAIN_INPUT))
                        d->in_prio = prio;
                else if (streq(name, CHAIN_INTO))
                        d->into_prio = prio;
        }
        return MNL_CB_OK;
}

/* Chains of our table (the kernel's chain dump does not filter by table). */
static int dump_chains(struct mnl_socket *nl, const char *table, struct chain_dump *ret) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETCHAIN, FAMILY, NLM_F_DUMP, seq_next());
        *ret = (struct chain_dump) { .table = table, .fwd_prio = -1, .in_prio = -1, .into_prio = -1 };
        int r = nl_query(nl, nlh, true, chain_cb, ret);
        if (r < 0)
                names_done(&ret->names);
        return r;
}

struct set_dump {
        const char *table;
        struct names names;
};

static int set_cb(const struct nlmsghdr *nlh, void *data) {
        struct set_dump *d = data;
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = xnonnull(nftnl_set_alloc());
        if (nftnl_set_nlmsg_parse(nlh, s) < 0)
                return MNL_CB_ERROR;
        const char *t = nftnl_set_get_str(s, NFTNL_SET_TABLE);
        const char *name = nftnl_set_get_str(s, NFTNL_SET_NAME);
        if (t && name && streq(t, d->table))
                names_add(&d->names, name);
        return MNL_CB_OK;
}

static int dump_sets(struct mnl_socket *nl, const char *table, struct names *ret) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSET, FAMILY, NLM_F_DUMP, seq_next());
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = xnonnull(nftnl_set_alloc());
        nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
        nftnl_set_nlmsg_build_payload(nlh, s);
        struct set_dump d = { .table = table };
        int r = nl_query(nl, nlh, true, set_cb, &d);
        if (r == -ENOENT)       /* no table */
                r = 0;
        if (r < 0) {
                names_done(&d.names);
                return r;
        }
        *ret = d.names;
        return 0;
}

static struct nftnl_set *set_new(const char *table, const char *name) {
        struct nftnl_set *s = xnonnull(nftnl_set_alloc());
        nftnl_set_set_u32(s, NFTNL_SET_FAMILY, FAMILY);
        nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
        nftnl_set_set_str(s, NFTNL_SET_NAME, name);
        return s;
}

/* One element of @sandboxes or @dns_clients. chain is "" for plain sets. */
struct elem {
        uint32_t key;           /* host order */
        char chain[NAME_BUF];
};

struct elem_dump {
        struct nftnl_set *set;
};

static int elem_cb(const struct nlmsghdr *nlh, void *data) {
        struct elem_dump *d = data;
        return nftnl_set_elems_nlmsg_parse(nlh, d->set) < 0 ? MNL_CB_ERROR : MNL_CB_OK;
}

/* Elements of a set/map with 4-byte keys; a missing set (or table) is empty. */
static int dump_elems(struct mnl_socket *nl, const char *table, const char *set, struct elem **ret, size_t *ret_n) {
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETSETELEM, FAMILY, NLM_F_DUMP, seq_next());
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = set_new(table, set);
        nftnl_set_elems_nlmsg_build_payload(nlh, s);

        struct elem_dump d = { .set = s };
        int r = nl_query(nl, nlh, true, elem_cb, &d);
        if (r == -ENOENT) {
                *ret = NULL;
                *ret_n = 0;
                return 0;
        }
        if (r < 0)
                return r;

        struct elem *v = NULL;
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
                v[n] = (struct elem) { .key = ntohl(be) };
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

struct batch {
        char *buf;
        size_t len, cap;
        uint32_t seq0, seq;     /* seq of BEGIN, next seq */
        char **what;            /* what[seq - seq0]: description of each acked message */
        size_t n_what;
        size_t n_acked;         /* messages that carry NLM_F_ACK */
};

static void batch_done(struct batch *b) {
        for (size_t i = 0; i < b->n_what; i++)
                free(b->what[i]);
        free(b->what);
        free(b->buf);
        *b = (struct batch) { 0 };
}

/* Room for the next message (MSG_MAX bytes), zeroed. */
static char *batch_room(struct batch *b) {
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

static void batch_commit(struct batch *b, struct nlmsghdr *nlh) {
        /* The payload builders do not bound-check: catch a message that outgrew
         * its room instead of sending a corrupted batch. */
        if (nlh->nlmsg_len > MSG_MAX)
                abort();
        b->len += NLMSG_ALIGN(nlh->nlmsg_len);
}

static void batch_begin(struct batch *b, uint32_t genid) {
        *b = (struct batch) { 0 };
        b->seq0 = seq_next();
        b->seq = b->seq0;
        struct nlmsghdr *nlh = nftnl_batch_begin(batch_room(b), b->seq++);
        if (genid)
                mnl_attr_put_u32(nlh, NFNL_BATCH_GENID, htonl(genid));
        batch_commit(b, nlh);
}

/* Header of the next object message; the caller appends the payload and calls batch_commit. */
static struct nlmsghdr *batch_msg(struct batch *b, uint16_t type, uint16_t flags, const char *fmt, ...) _printf_(4, 5);
static struct nlmsghdr *batch_msg(struct batch *b, uint16_t type, uint16_t flags, const char *fmt, ...) {
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
        return nftnl_nlmsg_build_hdr(batch_room(b), type, FAMILY, flags | NLM_F_ACK, seq);
}

/* One object message: the header (what the printf-style rest says it does, for
 * error reports), the object's payload from build (libnftnl's
 * nftnl_*_nlmsg_build_payload for obj), committed to the batch. */
#define BATCH_PUT(b, build, obj, type, flags, ...)                                    \
        do {                                                                          \
                struct nlmsghdr *nlh_ = batch_msg((b), (type), (flags), __VA_ARGS__); \
                build(nlh_, (obj));                                                   \
                batch_commit((b), nlh_);                                              \
        } while (0)

static const char *batch_what(const struct batch *b, uint32_t seq) {
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
static int batch_send(struct mnl_socket *nl, struct batch *b, char *err, size_t errlen) {
        struct nlmsghdr *end = nftnl_batch_end(batch_room(b), b->seq++);
        batch_commit(b, end);

        int fd = mnl_socket_get_fd(nl);
        int sz = b->len > (size_t) (4 << 20) ? (int) b->len : 4 << 20;
        if (b->len > 200 * 1024 && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
                (void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        int rsz = 1 << 20;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rsz, sizeof(rsz)) < 0)
                (void) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rsz, sizeof(rsz));

        if (mnl_socket_sendto(nl, b->buf, b->len) < 0)
                return errf(err, errlen, -errno, "sending the nftables batch failed: %m");

        struct ack_state s = { 0 };
        _cleanup_free_ char *buf = xmalloc(RECV_BUF);
        while (s.acks < b->n_acked && s.error == 0) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r = poll(&p, 1, ACK_TIMEOUT_MS);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return errf(err, errlen, -errno, "waiting for nftables acks failed: %m");
                if (r == 0)
                        return errf(err, errlen, -ETIMEDOUT, "nftables acked %zu of %zu messages",
                                    s.acks, b->n_acked);
                ssize_t n = recv(fd, buf, RECV_BUF, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return errf(err, errlen, -errno, "reading nftables acks failed: %m");
                parse_acks(buf, (size_t) n, &s);
        }
        if (s.error != 0)
                return errf(err, errlen, s.error, "nftables rejected %s: %s%s%s",
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
static void add_set(struct batch *b, const char *table, const char *name, bool interval, bool vmap) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = set_new(table, name);
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
        BATCH_PUT(b, nftnl_set_nlmsg_build_payload, s, NFT_MSG_NEWSET, NLM_F_CREATE, "add set %s", name);
}

/* DELSETELEM with no elements = flush the set. */
static void flush_set(struct batch *b, const char *table, const char *name) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = set_new(table, name);
        BATCH_PUT(b, nftnl_set_elems_nlmsg_build_payload, s, NFT_MSG_DELSETELEM, 0, "flush set %s", name);
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
static void elem_op(struct batch *b, uint16_t type, const char *table, const char *set, uint32_t key,
                    const char *jump_chain) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = set_new(table, set);
        struct nftnl_set_elem *e = elem_new(key, 0);
        if (jump_chain) {
                nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, (uint32_t) NFT_JUMP);
                nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, jump_chain);
        }
        nftnl_set_elem_add(s, e);
        struct in_addr a = { htonl(key) };
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a, ip, sizeof(ip));
        BATCH_PUT(b, nftnl_set_elems_nlmsg_build_payload, s, type, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0,
                  "%s element %s %s %s", type == NFT_MSG_NEWSETELEM ? "add" : "delete", ip,
                  type == NFT_MSG_NEWSETELEM ? "to" : "from", set);
}

struct range {
        uint64_t lo, hi;        /* inclusive, host order; uint64 so hi + 1 never wraps */
};

static int range_cmp(const void *a, const void *b) {
        const struct range *x = a, *y = b;
        return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

/* Sorts and merges overlapping and adjacent ranges in place; returns the new count. */
static size_t ranges_merge(struct range *r, size_t n) {
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

static struct range range_of(uint32_t addr, int prefix) {
        uint32_t mask = prefix <= 0 ? 0 : prefix >= 32 ? 0xffffffffu : ~((1u << (32 - prefix)) - 1);
        uint32_t lo = addr & mask;
        return (struct range) { lo, (uint64_t) (lo | ~mask) };
}

struct ielem {
        uint32_t key, flags;    /* key host order */
};

/* Interval elements for merged ranges (PROTOCOLS.md 4): a leading 0.0.0.0
 * interval-end unless the first range starts at 0, then per range its start and
 * (unless it ends at 255.255.255.255) an interval-end at hi + 1. Chunked. */
static void add_interval_elems(struct batch *b, const char *table, const char *set, const struct range *r, size_t n) {
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
                _cleanup_(nftnl_set_freep) struct nftnl_set *s = set_new(table, set);
                size_t end = off + ELEMS_PER_MSG < ne ? off + ELEMS_PER_MSG : ne;
                for (size_t i = off; i < end; i++)
                        nftnl_set_elem_add(s, elem_new(ev[i].key, ev[i].flags));
                BATCH_PUT(b, nftnl_set_elems_nlmsg_build_payload, s, NFT_MSG_NEWSETELEM, NLM_F_CREATE,
                          "add %zu elements to set %s", end - off, set);
        }
}

static struct nftnl_chain *chain_new(const char *table, const char *name) {
        struct nftnl_chain *c = xnonnull(nftnl_chain_alloc());
        nftnl_chain_set_u32(c, NFTNL_CHAIN_FAMILY, FAMILY);
        nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
        nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
        return c;
}

static struct nftnl_rule *rule_new(const char *table, const char *chain) {
        struct nftnl_rule *r = xnonnull(nftnl_rule_alloc());
        nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, FAMILY);
        nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
        nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
        return r;
}

static void add_chain(struct batch *b, const char *table, const char *name, int hooknum, int prio) {
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = chain_new(table, name);
        if (hooknum >= 0) {
                nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, (uint32_t) hooknum);
                nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, prio);
                nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "filter");
                /* Accept: the host's other forwarding and input is not ours to break;
                 * the bridges' traffic ends in our explicit drops. */
                nftnl_chain_set_u32(c, NFTNL_CHAIN_POLICY, NF_ACCEPT);
        }
        BATCH_PUT(b, nftnl_chain_nlmsg_build_payload, c, NFT_MSG_NEWCHAIN, NLM_F_CREATE, "add chain %s", name);
}

/* type DELRULE (table+chain, no handle) flushes; DELCHAIN deletes. */
static void chain_op(struct batch *b, uint16_t type, const char *table, const char *name) {
        if (type == NFT_MSG_DELRULE) {
                _cleanup_(nftnl_rule_freep) struct nftnl_rule *r = rule_new(table, name);
                BATCH_PUT(b, nftnl_rule_nlmsg_build_payload, r, type, 0, "flush chain %s", name);
                return;
        }
        _cleanup_(nftnl_chain_freep) struct nftnl_chain *c = chain_new(table, name);
        BATCH_PUT(b, nftnl_chain_nlmsg_build_payload, c, type, 0, "delete chain %s", name);
}

static void del_set(struct batch *b, const char *table, const char *name) {
        _cleanup_(nftnl_set_freep) struct nftnl_set *s = set_new(table, name);
        BATCH_PUT(b, nftnl_set_nlmsg_build_payload, s, NFT_MSG_DELSET, 0, "delete set %s", name);
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

static void rule_add(struct batch *b, struct nftnl_rule *r, const char *what) {
        const char *chain = nftnl_rule_get_str(r, NFTNL_RULE_CHAIN);
        BATCH_PUT(b, nftnl_rule_nlmsg_build_payload, r, NFT_MSG_NEWRULE, NLM_F_CREATE | NLM_F_APPEND,
                  "add rule \"%s\" to chain %s", what, chain);
        nftnl_rule_free(r);
}

/* ct state established,related accept */
static void rule_ct_established(struct batch *b, const char *table, const char *chain) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ct_state_any(r, NF_CT_STATE_BIT(IP_CT_ESTABLISHED) | NF_CT_STATE_BIT(IP_CT_RELATED));
        x_verdict(r, NF_ACCEPT, NULL);
        rule_add(b, r, "ct state established,related accept");
}

/* meta nfproto != ipv4 counter drop (sandboxes are IPv4 only) */
static void rule_non_ipv4_drop(struct batch *b, const char *table, const char *chain) {
        struct nftnl_rule *r = rule_new(table, chain);
        uint8_t v4 = NFPROTO_IPV4;
        x_meta(r, NFT_META_NFPROTO);
        x_cmp(r, NFT_CMP_NEQ, &v4, sizeof(v4));
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, "meta nfproto != ipv4 drop");
}

/* ip daddr R meta l4proto P th dport 53 ip saddr @dns_clients accept */
static void rule_dns(struct batch *b, const char *table, const char *chain, uint32_t resolver, uint8_t l4) {
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
        x_lookup(r, SET_DNS, false);
        x_counter(r);
        x_verdict(r, NF_ACCEPT, NULL);
        rule_add(b, r, l4 == IPPROTO_UDP ? "udp dns to resolver accept" : "tcp dns to resolver accept");
}

/* ip daddr @set [counter] verdict */
static void rule_daddr_set(struct batch *b, const char *table, const char *chain, const char *set, int verdict) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ipv4_only(r);
        x_ip_addr(r, true);
        x_lookup(r, set, false);
        x_counter(r);
        x_verdict(r, verdict, NULL);
        rule_add(b, r, verdict == NF_DROP ? "ip daddr @set drop" : "ip daddr @set accept");
}

/* counter [verdict]; verdict < -100 = no verdict */
#define NO_VERDICT (-1000)
static void rule_counter(struct batch *b, const char *table, const char *chain, int verdict) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_counter(r);
        if (verdict != NO_VERDICT)
                x_verdict(r, verdict, NULL);
        rule_add(b, r, verdict == NO_VERDICT ? "counter" : verdict == NF_DROP ? "counter drop" : "counter accept");
}

static void rule_vmap_saddr(struct batch *b, const char *table, const char *chain) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ipv4_only(r);
        x_ip_addr(r, false);
        x_lookup(r, MAP_SANDBOXES, true);
        rule_add(b, r, "ip saddr vmap @sandboxes");
}

/* oifname NAME counter drop: routed into a sandbox bridge = sandbox to sandbox. */
static void rule_oif_drop(struct batch *b, const char *table, const char *chain, const char *ifname) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ifname(r, NFT_META_OIFNAME, ifname);
        x_counter(r);
        x_verdict(r, NF_DROP, NULL);
        rule_add(b, r, "oifname drop");
}

/* iifname NAME jump CHAIN */
static void rule_iif_jump(struct batch *b, const char *table, const char *chain, const char *ifname, const char *to) {
        struct nftnl_rule *r = rule_new(table, chain);
        x_ifname(r, NFT_META_IIFNAME, ifname);
        x_verdict(r, NFT_JUMP, to);
        rule_add(b, r, "iifname jump");
}

/* oifname NAME ct state new tcp flags & (fin|syn|rst|ack) != syn counter drop
 *
 * A TCP packet towards a sandbox that conntrack has no entry for and that opens
 * nothing: conntrack would pick it up mid-stream as a new flow with the remote end
 * as its origin, and the sandbox's answers would then be "established" in the
 * reply direction. That is how a connection whose entry a tightening deleted
 * (ct_revoke) would come back the moment the peer retransmits; so it is dropped. */
static void rule_into_not_syn_drop(struct batch *b, const char *table, const char *chain, const char *ifname) {
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

static int parse_cidr(const char *s, struct range *ret, char *why, size_t whylen) {
        struct pj_allow_entry e;
        int r = pj_allow_entry_parse(s, &e, NULL, 0, why, whylen);
        if (r < 0)
                return r;
        switch (e.kind) {
        case PJ_ALLOW_IPV4:
        case PJ_ALLOW_CIDR:
                *ret = range_of(e.addr, e.prefix);
                return 0;
        case PJ_ALLOW_HOSTNAME:
                strscpy(why, "is a hostname; an IPv4 address or CIDR is required here", whylen);
                return -EINVAL;
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

/* ---------------------------------------------------------------- read, then write */

/* What a change read from the table before building its batch. */
enum { VIEW_ELEMS = 1 << 0, VIEW_CHAINS = 1 << 1, VIEW_SETS = 1 << 2 };
struct view {
        uint32_t genid;
        struct elem *map, *dns;         /* VIEW_ELEMS: @sandboxes and @dns_clients */
        size_t n_map, n_dns;
        struct chain_dump cd;           /* VIEW_CHAINS */
        struct names sets;              /* VIEW_SETS */
};

static void view_done(struct view *v) {
        free(v->map);
        free(v->dns);
        chain_dump_done(&v->cd);
        names_done(&v->sets);
        *v = (struct view) { 0 };
}

/* Fills b (begun with the view's generation) from v. Returns 1 to send the batch,
 * 0 when there is nothing to change, or -errno with err filled. */
typedef int (*fill_fn)(struct batch *b, const struct view *v, void *ud, char *err, size_t errlen);

/* The generation-checked read-and-retry step every change that depends on the
 * table's contents shares: read the generation, dump what `what` asks for, let
 * fill build the batch, send it tagged with that generation. ERESTART (someone
 * committed in between) starts over after a jittered pause, GENID_RETRIES times. */
static int read_then_write(const char *table, unsigned what, fill_fn fill, void *ud, char *err, size_t errlen) {
        int r = 0;
        for (int attempt = 0; attempt < GENID_RETRIES; attempt++) {
                _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
                r = nl_open(&nl);
                if (r < 0)
                        return errf(err, errlen, r, "cannot open a netfilter netlink socket: %s", strerror(-r));
                _cleanup_(view_done) struct view v = { .cd = { .fwd_prio = -1, .in_prio = -1, .into_prio = -1 } };
                r = get_genid(nl, &v.genid);
                if (r < 0)
                        return errf(err, errlen, r, "cannot read the nftables generation: %s", strerror(-r));
                if (what & VIEW_ELEMS) {
                        r = dump_elems(nl, table, MAP_SANDBOXES, &v.map, &v.n_map);
                        if (r >= 0)
                                r = dump_elems(nl, table, SET_DNS, &v.dns, &v.n_dns);
                }
                if (r >= 0 && (what & VIEW_CHAINS))
                        r = dump_chains(nl, table, &v.cd);
                if (r >= 0 && (what & VIEW_SETS))
                        r = dump_sets(nl, table, &v.sets);
                if (r < 0)
                        return errf(err, errlen, r, "cannot list the egress table: %s", strerror(-r));

                _cleanup_(batch_done) struct batch b = { 0 };
                batch_begin(&b, v.genid);
                r = fill(&b, &v, ud, err, errlen);
                if (r <= 0)
                        return r;
                r = batch_send(nl, &b, err, errlen);
                if (r != -ERESTART)
                        return r;
                log_debug("nftables ruleset changed since it was read; retrying");
                restart_backoff(attempt);
        }
        return errf(err, errlen, r, "the nftables ruleset kept changing under us (%d attempts)", GENID_RETRIES);
}

/* ---------------------------------------------------------------- init */

struct init_args {
        const struct egress_config *cfg;
        const char *table;
        const struct range *deny;
        size_t n_deny, n_br;
        uint32_t resolver;
};

/* What both sandbox chains start with, in a chain created or flushed here:
 * established/related accept, non-IPv4 drop, DNS to the resolver accept. */
static void sandbox_chain_head(struct batch *b, const struct init_args *a, const char *chain) {
        add_chain(b, a->table, chain, -1, 0);
        chain_op(b, NFT_MSG_DELRULE, a->table, chain);
        rule_ct_established(b, a->table, chain);
        rule_non_ipv4_drop(b, a->table, chain);
        if (a->cfg->dns_resolver) {
                rule_dns(b, a->table, chain, a->resolver, IPPROTO_UDP);
                rule_dns(b, a->table, chain, a->resolver, IPPROTO_TCP);
        }
}

static int fill_init(struct batch *b, const struct view *v, void *ud, char *err, size_t errlen) {
        const struct init_args *a = ud;
        (void) err;
        (void) errlen;
        _cleanup_(nftnl_table_freep) struct nftnl_table *t = xnonnull(nftnl_table_alloc());
        nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, FAMILY);
        nftnl_table_set_str(t, NFTNL_TABLE_NAME, a->table);
        BATCH_PUT(b, nftnl_table_nlmsg_build_payload, t, NFT_MSG_NEWTABLE, NLM_F_CREATE, "add table inet %s", a->table);

        add_set(b, a->table, SET_DENY, true, false);
        flush_set(b, a->table, SET_DENY);
        add_interval_elems(b, a->table, SET_DENY, a->deny, a->n_deny);
        add_set(b, a->table, SET_DNS, false, false);
        add_set(b, a->table, MAP_SANDBOXES, false, true);

        /* sbx_egress: everything forwarded from a sandbox bridge. */
        sandbox_chain_head(b, a, CHAIN_EGRESS);
        rule_daddr_set(b, a->table, CHAIN_EGRESS, SET_DENY, NF_DROP);
        for (size_t j = 0; j < a->n_br; j++)
                rule_oif_drop(b, a->table, CHAIN_EGRESS, a->cfg->bridges[j]);
        rule_vmap_saddr(b, a->table, CHAIN_EGRESS);
        rule_counter(b, a->table, CHAIN_EGRESS, NF_DROP);

        /* sbx_to_host: sandbox -> this host goes through input, not forward. */
        sandbox_chain_head(b, a, CHAIN_TO_HOST);
        /* Everything else a sandbox sends to this host (unicast to any of its
         * addresses, broadcast, multicast) is dropped: the input hook only
         * sees traffic for the host itself. */
        rule_counter(b, a->table, CHAIN_TO_HOST, NF_DROP);


        /* Base chains last: they jump to the chains above. A changed
         * priority cannot be updated in place: delete and recreate. */
        static const struct { const char *name, *to; int hook; } bases[] = {
                { CHAIN_FORWARD, CHAIN_EGRESS, NF_INET_FORWARD },
                { CHAIN_INPUT, CHAIN_TO_HOST, NF_INET_LOCAL_IN },
                { CHAIN_INTO, NULL, NF_INET_FORWARD },
        };
        for (size_t i = 0; i < ELEMENTSOF(bases); i++) {
                int64_t have = i == 0 ? v->cd.fwd_prio : i == 1 ? v->cd.in_prio : v->cd.into_prio;
                if (have != -1 && have != a->cfg->priority) {
                        chain_op(b, NFT_MSG_DELRULE, a->table, bases[i].name);
                        chain_op(b, NFT_MSG_DELCHAIN, a->table, bases[i].name);
                }
                add_chain(b, a->table, bases[i].name, bases[i].hook, a->cfg->priority);
                chain_op(b, NFT_MSG_DELRULE, a->table, bases[i].name);
                for (size_t j = 0; j < a->n_br; j++) {
                        if (bases[i].to)
                                rule_iif_jump(b, a->table, bases[i].name, a->cfg->bridges[j], bases[i].to);
                        else
                                rule_into_not_syn_drop(b, a->table, bases[i].name, a->cfg->bridges[j]);
                }
        }

        return 1;
}

#define BR_NF_SYSCTL "/proc/sys/net/bridge/bridge-nf-call-iptables"

/* Sandbox isolation on one bridge: frames bridged between two sandboxes never
 * reach IP forwarding unless br_netfilter hands them to it (with the bridge
 * as iif/oif, so the rules below see them). This kernel has no bridge-family
 * `meta ibrname`, so br_netfilter it is: require it, switch it on if off. */
static int require_br_netfilter(char *err, size_t errlen) {
        char v[8] = "";
        _cleanup_close_ int fd = open(BR_NF_SYSCTL, O_RDWR | O_CLOEXEC);
        if (fd < 0)
                fd = open(BR_NF_SYSCTL, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return errf(err, errlen, -EOPNOTSUPP,
                            "br_netfilter is not loaded (modprobe br_netfilter): without it sandboxes on one bridge "
                            "could reach each other");
        ssize_t n = read(fd, v, sizeof(v) - 1);
        if (n > 0 && v[0] == '1')
                return 0;
        if (lseek(fd, 0, SEEK_SET) < 0 || write(fd, "1", 1) != 1)
                return errf(err, errlen, -EPERM, "%s is 0 and cannot be set to 1: sandboxes on one bridge could reach each other",
                            BR_NF_SYSCTL);
        return 0;
}

int egress_init(const struct egress_config *cfg, char *err, size_t errlen) {
        LOCK_SCOPE();
        const char *table = cfg->table ? cfg->table : EGRESS_TABLE_DEFAULT;
        char why[256] = "";

        if (!table_name_valid(table))
                return errf(err, errlen, -EINVAL, "egress table name \"%.64s\" must be 1..%d of [A-Za-z0-9_-]",
                            table, TABLE_NAME_MAX);
        size_t n_br = 0;
        for (; cfg->bridges && cfg->bridges[n_br]; n_br++) {
                if (!ifname_valid(cfg->bridges[n_br]))
                        return errf(err, errlen, -EINVAL, "egress bridges[%zu] (\"%.32s\") is not an interface name",
                                    n_br, cfg->bridges[n_br]);
                if (n_br >= EGRESS_MAX_BRIDGES)
                        return errf(err, errlen, -EINVAL, "egress bridges: at most %d", EGRESS_MAX_BRIDGES);
        }
        if (n_br == 0)
                return errf(err, errlen, -EINVAL, "egress bridges: at least one sandbox bridge is required");
        uint32_t resolver = 0;
        if (cfg->dns_resolver && !ipv4_parse(cfg->dns_resolver, &resolver))
                return errf(err, errlen, -EINVAL, "egress dns_resolver (\"%.64s\") is not an IPv4 address",
                            cfg->dns_resolver);

        size_t n_deny = ELEMENTSOF(builtin_deny);
        for (size_t i = 0; cfg->deny_cidrs && cfg->deny_cidrs[i]; i++)
                n_deny++;
        if (n_deny > EGRESS_MAX_DENY)
                return errf(err, errlen, -EINVAL, "egress deny_cidrs: at most %d", EGRESS_MAX_DENY);
        _cleanup_free_ struct range *deny = xnew0(struct range, n_deny);
        size_t k = 0;
        for (size_t i = 0; i < ELEMENTSOF(builtin_deny); i++)
                if (parse_cidr(builtin_deny[i], &deny[k++], why, sizeof(why)) < 0)
                        abort();
        for (size_t i = 0; cfg->deny_cidrs && cfg->deny_cidrs[i]; i++)
                if (parse_cidr(cfg->deny_cidrs[i], &deny[k++], why, sizeof(why)) < 0)
                        return errf(err, errlen, -EINVAL, "egress deny_cidrs[%zu] (\"%.64s\") %s", i,
                                    cfg->deny_cidrs[i], why);
        n_deny = ranges_merge(deny, k);

        int rb = require_br_netfilter(err, errlen);
        if (rb < 0)
                return rb;
        struct init_args a = { .cfg = cfg, .table = table, .deny = deny, .n_deny = n_deny, .n_br = n_br,
                               .resolver = resolver };
        int r = read_then_write(table, VIEW_CHAINS, fill_init, &a, err, errlen);
        if (r < 0)
                return r;
        strscpy(st.table, table, sizeof(st.table));
        st.have_resolver = cfg->dns_resolver != NULL;
        st.resolver = resolver;
        st.ready = true;
        return 0;
}

/* ---------------------------------------------------------------- apply / remove */

static bool elems_have_key(const struct elem *v, size_t n, uint32_t key) {
        for (size_t i = 0; i < n; i++)
                if (v[i].key == key)
                        return true;
        return false;
}

static int validate_policy(const struct egress_policy *p, struct range **ret, size_t *ret_n, char *err, size_t errlen) {
        if (!p->sandbox_id || !hexid_valid(p->sandbox_id))
                return errf(err, errlen, -EINVAL, "sandbox id must be %d lowercase hex characters", EGRESS_ID_LEN);
        if (p->ip == 0 || p->ip == 0xffffffffu)
                return errf(err, errlen, -EINVAL, "sandbox %s: no usable IPv4 address", p->sandbox_id);
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
                return errf(err, errlen, -EINVAL, "sandbox %s: unknown egress mode %d", p->sandbox_id, (int) p->mode);
        if (p->n_allow > EGRESS_MAX_ALLOW || (p->n_allow > 0 && !p->allow))
                return errf(err, errlen, -EINVAL, "sandbox %s: at most %d allowlist addresses", p->sandbox_id,
                            EGRESS_MAX_ALLOW);
        struct range *v = xnew0(struct range, p->n_allow ? p->n_allow : 1);
        for (size_t i = 0; i < p->n_allow; i++) {
                const struct pj_allow_entry *e = &p->allow[i];
                switch (e->kind) {
                case PJ_ALLOW_IPV4:
                        v[i] = range_of(e->addr, 32);
                        continue;
                case PJ_ALLOW_CIDR:
                        if (e->prefix < 0 || e->prefix > 32)
                                break;
                        v[i] = range_of(e->addr, e->prefix);
                        continue;
                case PJ_ALLOW_HOSTNAME:
                        free(v);
                        return errf(err, errlen, -EINVAL,
                                    "sandbox %s: allow[%zu] is a hostname; resolve it into IPv4 entries first",
                                    p->sandbox_id, i);
                }
                free(v);
                return errf(err, errlen, -EINVAL, "sandbox %s: allow[%zu] is not an IPv4 address or CIDR",
                            p->sandbox_id, i);
        }
        *ret_n = ranges_merge(v, p->n_allow);
        *ret = v;
        return 0;
}

struct apply_args {
        const struct egress_policy *p;
        const struct range *allow;
        size_t n_allow;
        char chain[NAME_BUF], set[NAME_BUF];
        uint32_t *gone;         /* older addresses of this sandbox the batch unmaps */
        size_t n_gone;
        bool was_mapped;        /* ip already led to this sandbox's chain: it may have connections */
        bool taken_over;        /* ip led to another sandbox's chain: none of its connections are ours */
};

static void gone_add(uint32_t **v, size_t *n, uint32_t ip) {
        for (size_t i = 0; i < *n; i++)
                if ((*v)[i] == ip)
                        return;
        *v = xrealloc(*v, (*n + 1) * sizeof(**v));
        (*v)[(*n)++] = ip;
}

static int ct_revoke(uint32_t src, const struct range *keep, size_t n_keep, char *err, size_t errlen);

/* What this process last applied per sandbox, so that an apply that does not tighten
 * skips the conntrack sweep (a dump walks the kernel's whole conntrack hash: ~10 ms
 * even when it is empty). Unknown (a restarted agent) counts as tightening. */
struct last_policy {
        char id[EGRESS_ID_LEN + 1];
        enum pj_egress_mode mode;
        struct range *allow;
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

static void last_forget(const char *id) {
        struct last_policy *l = last_find(id);
        if (!l)
                return;
        free(l->allow);
        *l = lasts[--n_lasts];
}

static void last_set(const char *id, enum pj_egress_mode mode, const struct range *allow, size_t n_allow) {
        last_forget(id);
        lasts = xrealloc(lasts, (n_lasts + 1) * sizeof(*lasts));
        struct last_policy *l = &lasts[n_lasts++];
        *l = (struct last_policy) { .mode = mode, .n_allow = n_allow };
        strscpy(l->id, id, sizeof(l->id));
        l->allow = xnew0(struct range, n_allow ? n_allow : 1);
        if (n_allow)
                memcpy(l->allow, allow, n_allow * sizeof(*allow));
}

/* Whether going from l (NULL = unknown) to the new policy can forbid a connection that
 * the old one let through. Both allowlists are merged and sorted. */
static bool tightens(const struct last_policy *l, enum pj_egress_mode mode, const struct range *allow, size_t n_allow) {
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

static int fill_apply(struct batch *b, const struct view *v, void *ud, char *err, size_t errlen) {
        struct apply_args *a = ud;
        const struct egress_policy *p = a->p;
        a->was_mapped = a->taken_over = false;          /* this attempt's view decides */
        const char *table = st.table, *chain = a->chain, *set = a->set;
        (void) err;
        (void) errlen;
        add_chain(b, table, chain, -1, 0);
        chain_op(b, NFT_MSG_DELRULE, table, chain);
        add_set(b, table, set, true, false);
        flush_set(b, table, set);
        if (p->mode == PJ_EGRESS_RESTRICTED)
                add_interval_elems(b, table, set, a->allow, a->n_allow);

        rule_counter(b, table, chain, NO_VERDICT);
        switch (p->mode) {
        case PJ_EGRESS_OPEN:
                rule_counter(b, table, chain, NF_ACCEPT);
                break;
        case PJ_EGRESS_RESTRICTED:
                rule_daddr_set(b, table, chain, set, NF_ACCEPT);
                rule_counter(b, table, chain, NF_DROP);
                break;
        case PJ_EGRESS_DENY_ALL:
                rule_counter(b, table, chain, NF_DROP);
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
                        elem_op(b, NFT_MSG_DELSETELEM, table, MAP_SANDBOXES, v->map[i].key, NULL);
                if (ours)
                        gone_add(&a->gone, &a->n_gone, v->map[i].key);
                else if (v->map[i].key == p->ip)
                        a->taken_over = true;
                if (ours && v->map[i].key != p->ip && elems_have_key(v->dns, v->n_dns, v->map[i].key))
                        elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, v->map[i].key, NULL);
        }
        if (!have_exact)
                elem_op(b, NFT_MSG_NEWSETELEM, table, MAP_SANDBOXES, p->ip, chain);
        /* DNS only for open: a restricted sandbox gets its names from the
         * platform (/etc/hosts), so the resolver cannot carry data out. */
        if (p->mode == PJ_EGRESS_OPEN)
                elem_op(b, NFT_MSG_NEWSETELEM, table, SET_DNS, p->ip, NULL);
        else if (elems_have_key(v->dns, v->n_dns, p->ip))
                elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, p->ip, NULL);
        return 1;
}

int egress_apply(const struct egress_policy *p, char *err, size_t errlen) {
        LOCK_SCOPE();
        _cleanup_free_ struct range *allow = NULL;
        size_t n_allow = 0;
        int r = validate_policy(p, &allow, &n_allow, err, errlen);
        if (r < 0)
                return r;
        if (!st.ready)
                return errf(err, errlen, -ENOTCONN, "egress is not initialised");
        struct apply_args a = { .p = p, .allow = allow, .n_allow = n_allow };
        sbx_names(p->sandbox_id, a.chain, a.set);
        r = read_then_write(st.table, VIEW_ELEMS, fill_apply, &a, err, errlen);
        /* The new policy is in force: end what it forbids (retries of read_then_write
         * may have collected an address twice; gone_add keeps one). */
        for (size_t i = 0; r >= 0 && i < a.n_gone; i++)
                r = ct_revoke(a.gone[i], NULL, 0, err, errlen);
        /* An address another sandbox held: whatever it opened is not this one's to use.
         * One that led nowhere had no egress (fail closed): nothing to end. */
        if (r >= 0 && a.taken_over)
                r = ct_revoke(p->ip, NULL, 0, err, errlen);
        else if (r >= 0 && a.was_mapped && tightens(last_find(p->sandbox_id), p->mode, allow, n_allow))
                r = ct_revoke(p->ip, allow, p->mode == PJ_EGRESS_RESTRICTED ? n_allow : 0, err, errlen);
        free(a.gone);
        if (r >= 0)
                last_set(p->sandbox_id, p->mode, allow, p->mode == PJ_EGRESS_RESTRICTED ? n_allow : 0);
        else
                last_forget(p->sandbox_id);     /* unknown now: the next apply sweeps */
        if (r < 0) {
                char why[400];
                strscpy(why, err ? err : "", sizeof(why));
                return errf(err, errlen, r, "the new rules are in force, but the connections they forbid could not be "
                                            "ended: %s", why);
        }
        return 0;
}

struct remove_args {
        uint32_t ip;
        char chain[NAME_BUF], set[NAME_BUF];
        uint32_t *gone;         /* addresses the batch unmaps */
        size_t n_gone;
};

static int fill_remove(struct batch *b, const struct view *v, void *ud, char *err, size_t errlen) {
        struct remove_args *a = ud;
        const char *table = st.table;
        bool any = false;
        (void) err;
        (void) errlen;
        /* Order matters (PROTOCOLS.md 4): map elements, flush, chain, set. */
        for (size_t i = 0; i < v->n_map; i++) {
                if (!streq(v->map[i].chain, a->chain))
                        continue;
                elem_op(b, NFT_MSG_DELSETELEM, table, MAP_SANDBOXES, v->map[i].key, NULL);
                if (elems_have_key(v->dns, v->n_dns, v->map[i].key))
                        elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, v->map[i].key, NULL);
                gone_add(&a->gone, &a->n_gone, v->map[i].key);
                any = true;
        }
        /* ip given but not mapped (e.g. a half-applied older layout): drop a
         * stray dns_clients entry unless another sandbox owns that ip now. */
        if (a->ip != 0 && !elems_have_key(v->map, v->n_map, a->ip) && elems_have_key(v->dns, v->n_dns, a->ip)) {
                elem_op(b, NFT_MSG_DELSETELEM, table, SET_DNS, a->ip, NULL);
                any = true;
        }
        if (names_has(&v->cd.names, a->chain)) {
                chain_op(b, NFT_MSG_DELRULE, table, a->chain);
                chain_op(b, NFT_MSG_DELCHAIN, table, a->chain);
                any = true;
        }
        if (names_has(&v->sets, a->set)) {
                del_set(b, table, a->set);
                any = true;
        }
        return any ? 1 : 0;
}

int egress_remove(const char *sandbox_id, uint32_t ip, char *err, size_t errlen) {
        LOCK_SCOPE();
        if (!sandbox_id || !hexid_valid(sandbox_id))
                return errf(err, errlen, -EINVAL, "sandbox id must be %d lowercase hex characters", EGRESS_ID_LEN);
        if (!st.ready)
                return errf(err, errlen, -ENOTCONN, "egress is not initialised");
        struct remove_args a = { .ip = ip };
        sbx_names(sandbox_id, a.chain, a.set);
        int r = read_then_write(st.table, VIEW_ELEMS | VIEW_CHAINS | VIEW_SETS, fill_remove, &a, err, errlen);
        last_forget(sandbox_id);
        /* Paused or gone: nothing it opened from the addresses it held may go on. */
        for (size_t i = 0; r >= 0 && i < a.n_gone; i++)
                r = ct_revoke(a.gone[i], NULL, 0, err, errlen);
        free(a.gone);
        return r < 0 ? r : 0;
}

int egress_list(char ***ret_sandbox_ids) {
        LOCK_SCOPE();
        const char *table = st.ready ? st.table : EGRESS_TABLE_DEFAULT;
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
        int r = nl_open(&nl);
        if (r < 0)
                return r;
        struct chain_dump cd;
        r = dump_chains(nl, table, &cd);
        if (r < 0)
                return r;
        _cleanup_(names_done) struct names ids = { 0 };
        for (size_t i = 0; i < cd.names.n; i++) {
                const char *n = cd.names.v[i];
                if (startswith(n, SBX_CHAIN_PREFIX) && hexid_valid(n + strlen(SBX_CHAIN_PREFIX)))
                        names_add(&ids, n + strlen(SBX_CHAIN_PREFIX));
        }
        names_done(&cd.names);
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
        int verdict = NO_VERDICT;
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
        const char *table = st.ready ? st.table : EGRESS_TABLE_DEFAULT;
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
        int r = nl_open(&nl);
        if (r < 0)
                return r;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETRULE, FAMILY, NLM_F_DUMP, seq_next());
        struct stats_dump d = { .table = table };
        r = nl_query(nl, nlh, true, rule_stats_cb, &d);
        if (r < 0 && r != -ENOENT) {
                free(d.v);
                return r;
        }
        *ret = d.v ? d.v : xnew0(struct egress_stats, 1);
        return (int) d.n;
}

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

#define CT_DELETE_MAX 65536     /* entries one revoke deletes; a sandbox holding more is cut at that */

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
        const struct range *keep;       /* destinations still allowed */
        size_t n_keep;
        struct ct_entry *v;
        size_t n;
};

static bool ranges_have(const struct range *r, size_t n, uint32_t addr) {
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
        nlh->nlmsg_seq = seq_next();
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

/* Deletes the conntrack entries sandbox address src opened towards a destination
 * outside keep (all of them when n_keep is 0). Returns how many were deleted, or
 * -errno with err filled. Entries that expire meanwhile are not an error. */
static int ct_revoke(uint32_t src, const struct range *keep, size_t n_keep, char *err, size_t errlen) {
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = NULL;
        int r = nl_open(&nl);
        if (r < 0)
                return errf(err, errlen, r, "cannot open a conntrack netlink socket: %s", strerror(-r));
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nlmsghdr *nlh = ct_msg(buf, IPCTNL_MSG_CT_GET, NLM_F_DUMP);
        struct ct_dump d = { .src = src, .keep = keep, .n_keep = n_keep };
        r = nl_query(nl, nlh, true, ct_dump_cb, &d);
        if (r < 0) {
                free(d.v);
                return errf(err, errlen, r, "cannot list the connection tracking table: %s", strerror(-r));
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
                r = nl_query(nl, nlh, false, ack_cb, NULL);
                if (r == -ENOENT)
                        continue;       /* gone already (expired, or closed) */
                if (r < 0) {
                        free(d.v);
                        return errf(err, errlen, r, "cannot delete a connection tracking entry: %s", strerror(-r));
                }
                deleted++;
        }
        free(d.v);
        return deleted;
}
