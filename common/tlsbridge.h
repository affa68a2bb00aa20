/* tlsbridge.h — TLS for a byte stream whose code speaks plain fds (the node relay and controld's
 * way to it): after the TLS handshake, a thread of the bridge's own moves bytes between the TLS
 * connection and one end of a socketpair, and the caller gets the other end. Every protocol above
 * (the relay handshake, the agent's frames) stays the same code with or without TLS.
 *
 * The bridge ends both sides when either ends (the protocols above have no half-close), when a
 * TLS record is bad, or when the peer goes away (TCP keepalive, set by the caller). One bridge
 * holds two 64 KiB buffers; a side that does not read stalls only its own bridge. */
#pragma once

#include <stdint.h>

#include <openssl/ssl.h>

#include "err.h"

/* A server context from PEM files (certificate chain, key), TLS 1.2 at least. NULL with err. */
SSL_CTX *tls_server_ctx(const char *cert_file, const char *key_file, struct err *err);
/* A client context that verifies the peer against the CA certificates in ca_file. NULL with err. */
SSL_CTX *tls_client_ctx(const char *ca_file, struct err *err);

/* Takes tcp_fd (connected; closed in every case), does the TLS handshake by deadline (mono_ms())
 * as server (host NULL) or as client checking that the certificate names host (a DNS name or an
 * IP address), then starts the bridge thread. Returns the caller's plain end (O_CLOEXEC,
 * blocking) or -errno with err: -ETIMEDOUT, -EPROTO (TLS failed: err says why, e.g. a
 * certificate that does not verify), -ECONNRESET, -EAGAIN (no thread). */
int tls_bridge(SSL_CTX *ctx, int tcp_fd, const char *host, int64_t deadline, struct err *err);

/* Bridges whose thread still runs; and a wait, at most timeout_ms, until none does (at shut
 * down, once their connections are closed, so their memory is freed before exit). */
int tls_bridges_live(void);
void tls_bridges_wait(int timeout_ms);
