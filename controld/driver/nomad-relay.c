/* nomad-relay.c — the Nomad driver's way to a sandbox's in-sandbox agent: a TCP connection
 * to the relay of the sandbox's node (nodeagent/relay.c) and its handshake (pj_relay.h),
 * after which the stream is the agent's own (agent.c says HELLO with the sandbox's secret).
 *
 * The relay's address: the node's Meta "paddock.relay" ("host:port") when the operator set
 * one, else the host of the node's HTTPAddr with [nomad] relay_port. Looked up once per node
 * and kept for NODE_TTL_MS (a bounded table; a failed dial forgets the entry). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "fdio.h"
#include "json.h"
#include "log.h"
#include "nomad-private.h"
#include "pj_relay.h"
#include "strutil.h"
#include "tlsbridge.h"

#define NODE_CACHE 256
#define NODE_TTL_MS (5 * 60 * 1000)

static struct {
        char node_id[64];
        char host[256];
        int port;
        int64_t at;
} cache[NODE_CACHE];
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

static void cache_forget(const char *node_id) {
        pthread_mutex_lock(&cache_mu);
        for (size_t i = 0; i < NODE_CACHE; i++)
                if (!strcmp(cache[i].node_id, node_id))
                        cache[i].node_id[0] = 0;
        pthread_mutex_unlock(&cache_mu);
}

/* "host:port" (IPv4 or a name; [v6]:port too) into host and port. */
static int split_hostport(const char *s, char *host, size_t hostlen, int *port) {
        const char *colon = strrchr(s, ':');
        if (!colon || colon == s)
                return -EINVAL;
        const char *h = s;
        size_t hl = (size_t) (colon - s);
        if (h[0] == '[' && hl >= 2 && h[hl - 1] == ']') {
                h++;
                hl -= 2;
        }
        if (hl == 0 || hl >= hostlen)
                return -EINVAL;
        memcpy(host, h, hl);
        host[hl] = 0;
        int64_t p;
        if (safe_atoi64(colon + 1, &p) < 0 || p < 0 || p > 65535)
                return -EINVAL;
        *port = (int) p;
        return 0;
}

static int relay_address(struct driver *d, const char *node_id, char *host, size_t hostlen, int *port, struct err *err) {
        int64_t now = mono_ms();
        pthread_mutex_lock(&cache_mu);
        for (size_t i = 0; i < NODE_CACHE; i++)
                if (cache[i].node_id[0] && !strcmp(cache[i].node_id, node_id) && now - cache[i].at < NODE_TTL_MS) {
                        snprintf(host, hostlen, "%s", cache[i].host);
                        *port = cache[i].port;
                        pthread_mutex_unlock(&cache_mu);
                        return 0;
                }
        pthread_mutex_unlock(&cache_mu);

        _cleanup_free_ char *esc = nomad_esc(node_id), *path = xasprintf("/v1/node/%s", esc);
        _cleanup_json_ cJSON *node = NULL;
        int r = nomad_json(N(d), "GET", path, NULL, NULL, "reading the sandbox's node", &node, NULL, err);
        if (r < 0)
                return r;
        const char *meta = json_get_str(cJSON_GetObjectItemCaseSensitive(node, "Meta"), "paddock.relay");
        const char *http = json_get_str(node, "HTTPAddr");
        if (meta && *meta) {
                if (split_hostport(meta, host, hostlen, port) < 0 || *port == 0)
                        return err_set(err, -EINVAL, "node %s: Meta paddock.relay \"%s\" is not host:port", node_id, meta);
        } else if (http && split_hostport(http, host, hostlen, port) == 0) {
                *port = (int) N(d)->cfg->nomad_relay_port;
        } else {
                return err_set(err, -EHOSTUNREACH, "node %s has no HTTPAddr and no Meta paddock.relay: no way to its relay", node_id);
        }
        pthread_mutex_lock(&cache_mu);
        size_t slot = 0;
        for (size_t i = 0; i < NODE_CACHE; i++)
                if (!cache[i].node_id[0] || cache[i].at < cache[slot].at) {
                        slot = i;
                        if (!cache[i].node_id[0])
                                break;
                }
        snprintf(cache[slot].node_id, sizeof(cache[slot].node_id), "%s", node_id);
        snprintf(cache[slot].host, sizeof(cache[slot].host), "%s", host);
        cache[slot].port = *port;
        cache[slot].at = now;
        pthread_mutex_unlock(&cache_mu);
        return 0;
}

static int tcp_connect(const char *host, int port, int64_t deadline) {
        char ps[8];
        snprintf(ps, sizeof(ps), "%d", port);
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV };
        struct addrinfo *ai = NULL;
        if (getaddrinfo(host, ps, &hints, &ai) != 0 || !ai)
                return -EHOSTUNREACH;
        int r = -EHOSTUNREACH;
        for (struct addrinfo *a = ai; a; a = a->ai_next) {
                int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0)
                        continue;
                if (connect(fd, a->ai_addr, a->ai_addrlen) < 0 && errno != EINPROGRESS) {
                        r = -errno;
                        close(fd);
                        continue;
                }
                r = fd_wait(fd, POLLOUT, deadline);
                int e = 0;
                socklen_t el = sizeof(e);
                if (r == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0) {
                        int one = 1;
                        (void) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                        (void) setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
                        freeaddrinfo(ai);
                        return fd;
                }
                r = r < 0 ? r : -(e ? e : ECONNREFUSED);
                close(fd);
        }
        freeaddrinfo(ai);
        return r;
}

int nomad_agent_dial(struct driver *d, const struct sandbox *sb, int64_t deadline, struct err *err) {
        struct ctl *c = d->ctl;
        if (!c->relay_secret)
                return err_set(err, -EOPNOTSUPP, "no relay secret ([nomad] relay_secret_file)");
        if (!sb->node_id || !*sb->node_id)
                return err_set(err, -ENOENT, "the sandbox has no node yet");
        char host[256];
        int port;
        int r = relay_address(d, sb->node_id, host, sizeof(host), &port, err);
        if (r < 0)
                return r;
        int fd = tcp_connect(host, port, deadline);
        if (fd < 0) {
                cache_forget(sb->node_id);
                err_set(err, fd, "the relay of node %s at %s:%d: %s", sb->node_id, host, port, strerror(-fd));
                /* no relay there: the caller may take the driver's exec path */
                return fd == -ETIMEDOUT ? fd : -ECONNREFUSED;
        }
        if (c->relay_tls) {
                struct err terr = { 0 };
                fd = tls_bridge(c->relay_tls, fd, host, deadline, &terr);
                if (fd < 0) {
                        err_set(err, fd, "the relay of node %s at %s:%d: %s", sb->node_id, host, port, terr.message);
                        /* a relay that is not there for us: the driver's exec path serves the call */
                        return fd == -ETIMEDOUT ? fd : -EPROTO;
                }
        }
        r = pj_relay_client_handshake(fd, c->relay_secret, c->relay_secret_len, sb->id, deadline);
        if (r < 0) {
                err_set(err, r, "the relay of node %s at %s:%d: %s", sb->node_id, host, port,
                        r == -EACCES  ? "refused our relay secret (not the nodes' [relay] secret_file)"
                        : r == -ENOENT ? "no agent socket for this sandbox there"
                        : r == -EBUSY  ? "at its connection limit ([relay] max_connections)"
                                       : strerror(-r));
                close(fd);
                /* a busy relay is no relay for this call: the driver's exec path serves it */
                return r == -ECONNRESET ? -EPROTO : r == -EBUSY ? -ECONNREFUSED : r;
        }
        return fd;
}
