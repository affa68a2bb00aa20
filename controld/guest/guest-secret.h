/* guest-secret.h — where paddock-init sits inside every sandbox, and each sandbox's secret.
 *
 * The secret of a sandbox is HMAC-SHA256(key, sandbox id) in hex: the key is made once per
 * store (meta "agent_key") and never leaves controld, so nothing per sandbox is stored and a
 * restarted controld still reaches every sandbox's init. The sandbox gets its secret once, as
 * a read-only file (or, on Nomad, in its job's environment); the host never reads anything
 * back from the sandbox's side. */
#pragma once

#define GUEST_SECRET_LEN 64
/* Where the init sits inside every sandbox. */
#define GUEST_IN_BINARY "/.paddock/init"
#define GUEST_IN_SECRET "/.paddock/secret"
#define GUEST_IN_RUN "/.paddock/run"
#define GUEST_IN_SOCKET GUEST_IN_RUN "/agent.sock"
/* The socket directory is a tmpfs of this size: the sandbox can write there, so it is capped. */
#define GUEST_RUN_BYTES (64 * 1024)
/* Connect + HELLO; a live init answers in well under a millisecond. */
#define GUEST_CONNECT_TIMEOUT_MS 3000

/* The secret of sandbox_id under key, GUEST_SECRET_LEN hex digits. */
void guest_secret(const char *key, const char *sandbox_id, char out[GUEST_SECRET_LEN + 1]);
/* The host file in dir that is bound read-only at GUEST_IN_SECRET (xmalloc'd). */
char *guest_secret_path(const char *dir, const char *sandbox_id);
/* Writes that file (0400, replaced atomically); 0 or -errno. */
int guest_secret_write(const char *dir, const char *key, const char *sandbox_id);
/* Removes it (dir NULL: nothing to do); a failure other than "not there" is logged. */
void guest_secret_remove(const char *dir, const char *sandbox_id);
/* The init's command line (NULL-terminated, static). */
const char *const *guest_entrypoint(void);
