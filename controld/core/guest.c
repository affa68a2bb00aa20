/* guest.c — see guest.h. */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest.h"
#include "pj_relay.h"
#include "tlsbridge.h"
#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "log.h"
#include "strutil.h"

#define INSTALLED_BINARY "/usr/lib/paddock/paddock-init"

static bool executable(const char *p) {
        struct stat st;
        return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

/* "" in [init] binary: beside controld's own executable (a build tree), else installed. */
static char *find_binary(void) {
        /* a sanitized build's own agent needs its runtime: its static twin goes first */
        static const char *const beside[] = { "paddock-init.static", "paddock-init" };
        for (size_t i = 0; i < ELEMENTSOF(beside); i++) {
                _cleanup_free_ char *p = path_beside_self(beside[i]);
                if (p && executable(p))
                        return TAKE_PTR(p);
        }
        if (executable(INSTALLED_BINARY))
                return xstrdup(INSTALLED_BINARY);
        return executable("/usr/local/lib/paddock/paddock-init") ? xstrdup("/usr/local/lib/paddock/paddock-init") : NULL;
}

static int agent_key_load(struct ctl *c, struct err *err) {
        char fresh[65];
        random_token(fresh, 32);
        _cleanup_free_ char *key = NULL;
        int r = store_meta_get_or_set(c->store, "agent_key", fresh, &key);
        if (r < 0)
                return err_set(err, r, "cannot read the agent key from the store: %s", strerror(-r));
        snprintf(c->agent_key, sizeof(c->agent_key), "%s", key);
        return 0;
}

/* Nomad: the binary is on the nodes (not checked here), secrets go in the job's environment,
 * and controld reaches each agent through its node's relay. */
static int agent_host_init_nomad(struct ctl *c, struct err *err) {
        const struct config *cfg = c->cfg;
        if (!cfg->nomad_relay_secret_file[0]) {
                log_info("in-sandbox agent off on Nomad ([nomad] relay_secret_file unset): sandboxes run tail -f, commands "
                         "go through alloc exec");
                return 0;
        }
        int r = pj_relay_secret_load(cfg->nomad_relay_secret_file, &c->relay_secret, &c->relay_secret_len);
        if (r < 0)
                return err_set(err, r, "[nomad] relay_secret_file %s: %s", cfg->nomad_relay_secret_file,
                               r == -EINVAL ? "must hold 16..1024 bytes and no NUL" : strerror(-r));
        if ((r = agent_key_load(c, err)) < 0)
                return r;
        if (cfg->nomad_relay_tls_ca[0]) {
                struct err terr = { 0 };
                c->relay_tls = tls_client_ctx(cfg->nomad_relay_tls_ca, &terr);
                if (!c->relay_tls)
                        return err_set(err, -EINVAL, "[nomad] relay_tls_ca %s: %s", cfg->nomad_relay_tls_ca, terr.message);
        }
        c->agent_binary = xstrdup(cfg->nomad_agent_binary);
        log_info("in-sandbox agent on Nomad: %s on the nodes, reached through their relays on port %" PRId64 "%s",
                 c->agent_binary, cfg->nomad_relay_port, c->relay_tls ? " with TLS" : "");
        return 0;
}

int guest_host_init(struct ctl *c, struct err *err) {
        const struct config *cfg = c->cfg;
        if (!strcmp(cfg->init_binary, "none")) {
                log_info("in-sandbox agent off ([init] binary = none): sandboxes run tini, commands go through the driver");
                return 0;
        }
        if (!strcmp(cfg->driver, "nomad"))
                return agent_host_init_nomad(c, err);
        _cleanup_free_ char *bin = cfg->init_binary[0] ? xstrdup(cfg->init_binary) : find_binary();
        if (!bin || !executable(bin)) {
                log_warning("in-sandbox agent off: %s is not an executable file; sandboxes run tini and commands go through "
                            "the driver's exec path (slower; no /processes)",
                            bin ? bin : "paddock-init (beside controld or " INSTALLED_BINARY ")");
                return 0;
        }
        if (cfg->init_dir[0])
                c->agent_dir = xstrdup(cfg->init_dir);
        else {
                const char *slash = strrchr(cfg->db_path, '/');
                c->agent_dir = slash ? xasprintf("%.*s/agents", (int) (slash - cfg->db_path), cfg->db_path)
                                     : xstrdup("agents");
        }
        if (mkdir(c->agent_dir, 0700) < 0 && errno != EEXIST)
                return err_set(err, -errno, "cannot make the agent directory %s ([init] dir): %s", c->agent_dir, strerror(errno));
        int r = agent_key_load(c, err);
        if (r < 0)
                return r;
        c->agent_binary = TAKE_PTR(bin);
        log_info("in-sandbox agent: %s, secrets in %s", c->agent_binary, c->agent_dir);
        return 0;
}

void guest_host_done(struct ctl *c) {
        free(c->agent_binary);
        c->agent_binary = NULL;
        free(c->agent_dir);
        c->agent_dir = NULL;
        explicit_bzero(c->agent_key, sizeof(c->agent_key));
        if (c->relay_secret)
                explicit_bzero(c->relay_secret, c->relay_secret_len);
        free(c->relay_secret);
        c->relay_secret = NULL;
        if (c->relay_tls)
                tls_bridges_wait(2000);     /* connections are closed by now: let their bridges end */
        SSL_CTX_free(c->relay_tls);
        c->relay_tls = NULL;
}

int guest_connect(struct ctl *c, const struct sandbox *sb, struct guest_client **ret, struct err *err) {
        return driver_guest_connect(c->drv, sb, ret, err);
}

bool guest_fallback_ok(int r) {
        return r == -EOPNOTSUPP || r == -ENOENT || r == -ECONNREFUSED || r == -ENOTSOCK || r == -EPERM || r == -EACCES ||
               r == -ETIMEDOUT || r == -ECONNRESET || r == -EPROTO || r == -EPIPE;
}
