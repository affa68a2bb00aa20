/* proxy.h — the node's egress proxy that puts secrets into sandboxes' HTTP requests.
 *
 * nftables redirects a sandbox's TCP connections to chosen hosts (ports 80 and 443) to this
 * proxy. Per connection it finds the sandbox by the source IPv4 address, the original destination
 * through SO_ORIGINAL_DST, and then:
 *   - TLS (first byte 0x16): terminates TLS with a certificate for the SNI name, which must be one
 *     of the sandbox's rule hosts, signed by the sandbox's own CA (made on its first registration,
 *     kept until it is dropped; only its certificate ever leaves the proxy). ALPN offers only
 *     http/1.1. Upstream is TLS to the original destination with full verification (chain and
 *     host name); a failure is answered 502, never bypassed.
 *   - anything else: plain HTTP, the host taken from the first request's Host header.
 * Every request head on the connection (keep-alive) has the headers its host's rule sets
 * removed and then added with their real values, looked up at that head (a rotated value applies
 * to the next request). Bodies are forwarded by their framing (Content-Length or chunked); an
 * Upgrade or CONNECT request switches the connection to a raw relay after its head. Responses are
 * relayed untouched.
 *
 * Limits: per-sandbox and global connection caps (over them a connection is closed at once), a
 * 64 KiB request head (431), an idle timeout and an upstream connect timeout. Secret values are
 * never logged nor put in any answer; counters hold counts only.
 *
 * All functions are thread-safe. One thread accepts; each connection has a thread of its own.
 */
#pragma once

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "proxy-types.h"

struct proxy;

/* Binds 0.0.0.0:cfg->port and listens; loads the upstream CA file. cfg is copied (the CA file
 * name too). -errno with err. */
int proxy_new(const struct proxy_config *cfg, struct proxy **ret, struct err *err);
/* The bound port. */
uint16_t proxy_port(const struct proxy *p);
/* Starts the accept thread. -errno with err. */
int proxy_start(struct proxy *p, struct err *err);
/* Stops the accept thread, ends every connection and waits for their threads, frees all.
 * NULL is fine. */
void proxy_free(struct proxy *p);

/* Registers or replaces a sandbox's rules (the CA is created on first set and kept). Returns 0
 * and the CA certificate PEM in *ret_ca_pem (malloc'd; ret_ca_pem may be NULL) or -errno with err
 * (field names like "rules[2].headers[0].name"): -EINVAL for bad input, -EADDRINUSE when another
 * sandbox holds ip. At most 64 rules, 16 headers per rule, names <= 128 bytes, values <= 8192
 * bytes. Counters of hosts that stay in the rules are kept, those of the others dropped. */
int proxy_sandbox_set(struct proxy *p, const char *sandbox_id, uint32_t ip /* host order */,
                      const struct proxy_rule *rules, size_t n_rules, char **ret_ca_pem, struct err *err);
/* Forgets it: its CA, leaf cache and values; its open connections are closed. 0 even when unknown. */
int proxy_sandbox_drop(struct proxy *p, const char *sandbox_id);
/* The same for whichever sandbox holds ip (the egress table gave ip to another sandbox). */
int proxy_sandbox_drop_ip(struct proxy *p, uint32_t ip);

/* Counters of one sandbox, one per rule host: *ret malloc'd array, count returned; -ENOENT when
 * unknown. */
int proxy_sandbox_stats(struct proxy *p, const char *sandbox_id, struct proxy_host_stats **ret);
