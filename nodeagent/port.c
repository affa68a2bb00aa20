/* port.c — which bridge port is a sandbox's: the host end of the veth whose other end lives
 * in the network namespace of a given host process (the sandbox container's, as Docker
 * reports it), and the MAC address that other end has. Route netlink only: the namespace
 * is named by pid (RTM_GETNSID with NETNSA_PID, no file to open), the host's links are
 * dumped (IFLA_MASTER, IFLA_LINK_NETNSID, IFLA_LINK), and the peer's MAC is read in its
 * namespace by id (IFLA_TARGET_NETNSID). Nothing here takes the sandbox's word for
 * anything: the namespace comes from Docker, the port and MAC from the kernel, as the
 * kernel set them up before the sandbox ran a thing. (Under gVisor's host network mode the
 * sandbox can add addresses to that namespace, so addresses are never read from it.) */
#include <errno.h>
#include <linux/if_link.h>
#include <linux/net_namespace.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include <libmnl/libmnl.h>

#include "cleanup.h"
#include "egress.h"
#include "nft.h"
#include "strutil.h"

static int nsid_cb(const struct nlmsghdr *nlh, void *data) {
        struct nlattr *a;
        mnl_attr_for_each(a, nlh, sizeof(struct rtgenmsg)) {
                if (mnl_attr_get_type(a) == NETNSA_NSID && mnl_attr_get_payload_len(a) == sizeof(int32_t))
                        *(int32_t *) data = (int32_t) mnl_attr_get_u32(a);
        }
        return MNL_CB_OK;
}

struct link_scan {
        int32_t nsid;
        const unsigned *bridges;        /* ifindexes */
        size_t n_br;
        size_t found;
        char port[IFNAMSIZ];
        int peer;                       /* the other end's ifindex, in nsid */
        uint8_t mac[6];
        bool have_mac;
};

static int link_cb(const struct nlmsghdr *nlh, void *data) {
        struct link_scan *s = data;
        struct nlattr *a;
        const char *name = NULL;
        uint32_t master = 0, link = 0;
        int32_t nsid = -1;
        bool has_nsid = false;
        mnl_attr_for_each(a, nlh, sizeof(struct ifinfomsg)) {
                switch (mnl_attr_get_type(a)) {
                case IFLA_IFNAME:
                        if (mnl_attr_validate(a, MNL_TYPE_NUL_STRING) >= 0)
                                name = mnl_attr_get_str(a);
                        break;
                case IFLA_MASTER:
                        if (mnl_attr_get_payload_len(a) == 4)
                                master = mnl_attr_get_u32(a);
                        break;
                case IFLA_LINK:
                        if (mnl_attr_get_payload_len(a) == 4)
                                link = mnl_attr_get_u32(a);
                        break;
                case IFLA_LINK_NETNSID:
                        if (mnl_attr_get_payload_len(a) == 4) {
                                nsid = (int32_t) mnl_attr_get_u32(a);
                                has_nsid = true;
                        }
                        break;
                default:
                        break;
                }
        }
        if (!name || !has_nsid || nsid != s->nsid || master == 0)
                return MNL_CB_OK;
        bool on_bridge = false;
        for (size_t i = 0; i < s->n_br && !on_bridge; i++)
                on_bridge = s->bridges[i] == master;
        if (!on_bridge || strlen(name) >= IFNAMSIZ)
                return MNL_CB_OK;
        if (s->found++ == 0) {
                strscpy(s->port, name, sizeof(s->port));
                s->peer = (int) link;
        }
        return MNL_CB_OK;
}

static int mac_cb(const struct nlmsghdr *nlh, void *data) {
        struct link_scan *s = data;
        struct nlattr *a;
        mnl_attr_for_each(a, nlh, sizeof(struct ifinfomsg)) {
                if (mnl_attr_get_type(a) == IFLA_ADDRESS && mnl_attr_get_payload_len(a) == 6) {
                        memcpy(s->mac, mnl_attr_get_payload(a), 6);
                        s->have_mac = true;
                }
        }
        return MNL_CB_OK;
}

int egress_port_of_pid(uint32_t pid, const char *const *bridges, char port[IFNAMSIZ], uint8_t mac[6], struct err *err) {
        unsigned br_idx[EGRESS_MAX_BRIDGES];
        size_t n_br = 0;
        for (size_t i = 0; bridges && bridges[i] && n_br < EGRESS_MAX_BRIDGES; i++) {
                unsigned x = if_nametoindex(bridges[i]);
                if (x)
                        br_idx[n_br++] = x;
        }
        if (n_br == 0)
                return err_set(err, -ENODEV, "none of the sandbox bridges exists on this node");
        _cleanup_(mnl_socket_closep) struct mnl_socket *nl = mnl_socket_open(NETLINK_ROUTE);
        if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
                return err_set(err, -errno, "cannot open a route netlink socket: %s", strerror(errno));
        char buf[MNL_SOCKET_BUFFER_SIZE];

        /* The namespace's id as this (the host's) namespace knows it. */
        struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = RTM_GETNSID;
        nlh->nlmsg_flags = NLM_F_REQUEST;
        nlh->nlmsg_seq = nft_seq_next();
        struct rtgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
        g->rtgen_family = AF_UNSPEC;
        mnl_attr_put_u32(nlh, NETNSA_PID, pid);
        int32_t nsid = -1;
        int r = nft_query(nl, nlh, false, nsid_cb, &nsid);
        if (r == -ESRCH)
                return err_set(err, r, "the sandbox's container process %u is gone", pid);
        if (r < 0)
                return err_set(err, r, "cannot name the network namespace of process %u: %s", pid, strerror(-r));
        if (nsid < 0)
                return err_set(err, -ENXIO,
                               "the sandbox's network namespace (process %u) has no interface on this host's bridges", pid);

        /* The host's links: the one on a sandbox bridge whose other end is in nsid. */
        struct link_scan s;
        struct ifinfomsg *ifi;
        /* A dump that interfaces changed under (other sandboxes' veths come and go) ends
         * interrupted (NLM_F_DUMP_INTR, EINTR): take it again. */
        for (int attempt = 0; attempt < 20; attempt++) {
                s = (struct link_scan) { .nsid = nsid, .bridges = br_idx, .n_br = n_br };
                nlh = mnl_nlmsg_put_header(buf);
                nlh->nlmsg_type = RTM_GETLINK;
                nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
                nlh->nlmsg_seq = nft_seq_next();
                ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
                ifi->ifi_family = AF_UNSPEC;
                r = nft_query(nl, nlh, true, link_cb, &s);
                if (r != -EINTR)
                        break;
                /* What is left of the interrupted dump is not ours to read: a fresh socket. */
                mnl_socket_close(nl);
                nl = mnl_socket_open(NETLINK_ROUTE);
                if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0)
                        return err_set(err, -errno, "cannot open a route netlink socket: %s", strerror(errno));
        }
        if (r < 0)
                return err_set(err, r, "cannot list this host's interfaces: %s", strerror(-r));
        if (s.found == 0)
                return err_set(err, -ENXIO, "the sandbox (process %u) has no port on a sandbox bridge", pid);
        if (s.found > 1)
                return err_set(err, -EMLINK, "the sandbox (process %u) has %zu ports on sandbox bridges, one is expected",
                               pid, s.found);

        /* The other end's MAC, read in its namespace. */
        nlh = mnl_nlmsg_put_header(buf);
        nlh->nlmsg_type = RTM_GETLINK;
        nlh->nlmsg_flags = NLM_F_REQUEST;
        nlh->nlmsg_seq = nft_seq_next();
        ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
        ifi->ifi_family = AF_UNSPEC;
        ifi->ifi_index = s.peer;
        mnl_attr_put_u32(nlh, IFLA_TARGET_NETNSID, (uint32_t) nsid);
        r = nft_query(nl, nlh, false, mac_cb, &s);
        if (r < 0 || !s.have_mac)
                return err_set(err, r < 0 ? r : -ENXIO, "cannot read the MAC address of port %s's other end: %s",
                               s.port, r < 0 ? strerror(-r) : "none");
        strscpy(port, s.port, IFNAMSIZ);
        memcpy(mac, s.mac, 6);
        return 0;
}
