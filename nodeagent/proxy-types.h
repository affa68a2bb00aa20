/* proxy-types.h — the records the egress proxy's callers and its own files share (proxy.h has
 * the calls). */
#pragma once

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

struct proxy_header {
        const char *name;       /* an HTTP token, 1..128 bytes */
        const char *value;      /* the real value, up to 8192 bytes, no CR, LF */
};
struct proxy_rule {
        const char *host;       /* a DNS name, matched case-insensitively and exactly */
        const struct proxy_header *headers;
        size_t n_headers;       /* at most 16 */
};
struct proxy_config {
        uint16_t port;                  /* listen port on 0.0.0.0 (0 = ephemeral, for tests) */
        const char *upstream_ca_file;   /* NULL = system store */
        unsigned max_conns_per_sandbox; /* 0 = 64 */
        unsigned max_conns;             /* 0 = 1024 */
        int connect_timeout_ms;         /* 0 = 10000 */
        int idle_timeout_ms;            /* 0 = 300000 */
        int (*orig_dst)(int fd, struct sockaddr_in *ret, void *ud); /* NULL = SO_ORIGINAL_DST */
        void *orig_dst_ud;
};
struct proxy_host_stats {
        char host[254];
        uint64_t requests;              /* request heads forwarded */
        uint64_t injections;            /* headers injected (a count, never a value) */
        uint64_t upstream_refused;      /* upstream certificates that did not verify */
};
