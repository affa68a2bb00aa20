/* pj_relay.h — the handshake of a node's agent relay (nodeagent/relay.c), which lets controld
 * reach the in-sandbox agent of a sandbox on another host (the Nomad driver). Specified in
 * proto-json/AGENT-PROTOCOL.md, "The relay".
 *
 *   relay -> client   PJ_RELAY_GREETING_LEN bytes: PJ_RELAY_MAGIC (8) + a random challenge (32)
 *   client -> relay   PJ_RELAY_HELLO_LEN bytes: the sandbox id (24 lowercase hex) +
 *                     HMAC-SHA256(deployment secret, "paddock-relay\0" challenge sandbox_id) (32)
 *   relay -> client   4 bytes, big-endian: 0 = connected, else an errno value (EACCES: wrong
 *                     MAC, ENOENT: no agent socket for that sandbox on this node, ECONNREFUSED:
 *                     nothing listening there, ENOTSOCK/EPERM: something else at its place,
 *                     EBUSY: too many connections, EPROTO: a malformed hello)
 *   A relay at its connection limit sends, in place of the greeting, only the status EBUSY
 *   (4 bytes) and closes.
 *   then, after 0: the agent's own byte stream (AGENT-PROTOCOL.md frames, HELLO first), both
 *   ways, until either side closes. The relay never parses it.
 *
 * The MAC binds the challenge and the sandbox id, so a recorded hello neither replays nor
 * opens another sandbox. The deployment secret is a file both daemons read; the agent's own
 * per-sandbox secret still guards the agent behind the relay. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define PJ_RELAY_MAGIC "PDKRLY1\n"
#define PJ_RELAY_MAGIC_LEN 8
#define PJ_RELAY_CHALLENGE_LEN 32
#define PJ_RELAY_ID_LEN 24
#define PJ_RELAY_MAC_LEN 32
#define PJ_RELAY_GREETING_LEN (PJ_RELAY_MAGIC_LEN + PJ_RELAY_CHALLENGE_LEN)
#define PJ_RELAY_HELLO_LEN (PJ_RELAY_ID_LEN + PJ_RELAY_MAC_LEN)
#define PJ_RELAY_STATUS_LEN 4
/* A deployment secret is 16..1024 bytes (a trailing newline in its file is not part of it). */
#define PJ_RELAY_SECRET_MIN 16
#define PJ_RELAY_SECRET_MAX 1024
/* Bound on the whole handshake, both sides. */
#define PJ_RELAY_HANDSHAKE_MS 5000
/* The relay's default port. */
#define PJ_RELAY_PORT 7433

/* The MAC of a hello. */
void pj_relay_mac(const void *secret, size_t secret_len, const uint8_t challenge[PJ_RELAY_CHALLENGE_LEN],
                  const char sandbox_id[PJ_RELAY_ID_LEN], uint8_t out[PJ_RELAY_MAC_LEN]);
/* The hello a client sends for sandbox_id (24 hex) after greeting; -EPROTO when greeting does
 * not start with the magic, -EINVAL for a bad id. */
int pj_relay_hello(const void *secret, size_t secret_len, const uint8_t greeting[PJ_RELAY_GREETING_LEN],
                   const char *sandbox_id, uint8_t out[PJ_RELAY_HELLO_LEN]);
/* The relay's check of a hello against its challenge: 0 with the id copied to id_out (NUL
 * terminated), -EPROTO when the id is not 24 lowercase hex, -EACCES when the MAC is wrong
 * (compared in constant time). */
int pj_relay_check(const void *secret, size_t secret_len, const uint8_t challenge[PJ_RELAY_CHALLENGE_LEN],
                   const uint8_t hello[PJ_RELAY_HELLO_LEN], char id_out[PJ_RELAY_ID_LEN + 1]);
/* The client's whole handshake on fd (connected to a relay) for sandbox_id, by deadline
 * (mono_ms()): 0 once the relay said 0 (fd then carries the agent's stream), -EPROTO when the
 * relay does not speak this protocol, the relay's status as -errno (see above; -EBUSY also
 * for a relay at its limit), -ETIMEDOUT, -ECONNRESET. */
int pj_relay_client_handshake(int fd, const void *secret, size_t secret_len, const char *sandbox_id, int64_t deadline);
/* Reads a deployment secret file (at most PJ_RELAY_SECRET_MAX bytes, one trailing newline
 * dropped, no NUL): 0 with *ret (xmalloc'd) and *ret_len, or -errno (-EINVAL: too short,
 * too long or containing NUL). */
int pj_relay_secret_load(const char *path, char **ret, size_t *ret_len);
