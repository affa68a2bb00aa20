/* config.c — the agent's configuration file: every key of [agent], [amqp], [egress],
 * [metrics], [snapshot] and [nomad], with its default and its limit, read in one place.
 * Errors say file, section and key; the file is read once at start-up (and by -n).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "amqp.h"
#include "cleanup.h"
#include "conf.h"
#include "docker.h"
#include "log.h"
#include "metrics.h"
#include "nodeagent.h"
#include "pj_relay.h"
#include "strutil.h"

/* A string key of the file: its section, name, default (NULL: none) and longest value, and
 * the field of struct agent_config it fills. */
struct str_key {
        const char *section, *key, *def;
        size_t max;
        size_t off;
};
#define STR_KEY(section, key, def, max, field) { section, key, def, max, offsetof(struct agent_config, field) }

/* Each of keys[0..n) into its field of ret: a copy of the value, NULL when it has none (and,
 * with empty_is_null, when it is ""). 0 or -EINVAL with err filled. */
static int get_strings(struct conf *cf, const struct str_key *keys, size_t n, bool empty_is_null,
                       struct agent_config *ret, struct err *err) {
        for (size_t i = 0; i < n; i++) {
                const char *v;
                int r = conf_get_string(cf, keys[i].section, NULL, keys[i].key, keys[i].def, keys[i].max, &v, err);
                if (r < 0)
                        return r;
                *(char **) ((char *) ret + keys[i].off) = v && (*v || !empty_is_null) ? xstrdup(v) : NULL;
        }
        return 0;
}

/* ---------------------------------------------------------------- [snapshot] */

static bool repository_valid(const char *s) {
        if (!*s || *s == '/' || s[strlen(s) - 1] == '/' || strstr(s, "//"))
                return false;
        for (; *s; s++)
                if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || strchr("._-/", *s)))
                        return false;
        return true;
}

static int snapshot_config_load(struct conf *cf, struct agent_config *ret, struct err *err) {
        int r;
        static const struct str_key keys[] = {
                STR_KEY("snapshot", "registry", "127.0.0.1:5000", 255, snap_registry),
                STR_KEY("snapshot", "repository", "paddock/snapshots", 200, snap_repository),
                STR_KEY("snapshot", "username", NULL, 255, snap_username),
                STR_KEY("snapshot", "password", NULL, 255, snap_password),
                STR_KEY("snapshot", "docker_socket", DOCKER_SOCKET_DEFAULT, 255, snap_docker_socket),
                STR_KEY("snapshot", "docker_root", NULL, 1024, snap_docker_root), /* NULL: Docker's own DockerRootDir */
        };
        if ((r = get_strings(cf, keys, ELEMENTSOF(keys), true, ret, err)) < 0)
                return r;
        if ((r = conf_get_size(cf, "snapshot", NULL, "disk_floor", UINT64_C(1) << 30, 0, UINT64_C(1) << 50,
                               &ret->snap_disk_floor, err)) < 0 ||
            (r = conf_get_duration_ms(cf, "snapshot", NULL, "prune_interval", 300000, 1000, 86400000,
                                      &ret->snap_prune_interval_ms, err)) < 0 ||
            (r = conf_get_duration_ms(cf, "snapshot", NULL, "timeout", 1800000, 1000, 86400000, &ret->snap_timeout_ms,
                                      err)) < 0)
                return r;
        if (!ret->snap_registry || !ret->snap_repository || !ret->snap_docker_socket)
                return err_set(err, -EINVAL, "[snapshot] registry, repository and docker_socket may not be empty");
        if (!repository_valid(ret->snap_repository))
                return err_set(err, -EINVAL, "[snapshot] repository must be lowercase path components like paddock/snapshots");
        return 0;
}

/* [relay]: listen (unset = no relay), secret_file (required with listen), docker_root,
 * max_connections, tls_cert + tls_key (both or neither). */
static int relay_config_load(struct conf *cf, const char *path, struct agent_config *ret, struct err *err) {
        const char *listen = NULL, *secret = NULL, *root = NULL, *cert = NULL, *key = NULL;
        int r;
        if ((r = conf_get_string(cf, "relay", NULL, "listen", NULL, 64, &listen, err)) < 0 ||
            (r = conf_get_string(cf, "relay", NULL, "tls_cert", NULL, 1024, &cert, err)) < 0 ||
            (r = conf_get_string(cf, "relay", NULL, "tls_key", NULL, 1024, &key, err)) < 0 ||
            (r = conf_get_string(cf, "relay", NULL, "secret_file", NULL, 1024, &secret, err)) < 0 ||
            (r = conf_get_string(cf, "relay", NULL, "docker_root", "/var/lib/docker", 512, &root, err)) < 0 ||
            (r = conf_get_int(cf, "relay", NULL, "max_connections", 256, 1, 4096, &ret->relay_max_conns, err)) < 0)
                return r;
        if (!listen || !*listen)
                return 0;
        if (!secret || !*secret)
                return err_set(err, -EINVAL, "%s: [relay] secret_file is required with listen", path);
        if (root[0] != '/')
                return err_set(err, -EINVAL, "%s: [relay] docker_root must be an absolute path", path);
        if (!(cert && *cert) != !(key && *key))
                return err_set(err, -EINVAL, "%s: [relay] tls_cert and tls_key go together (TLS needs both, plain TCP neither)", path);
        r = pj_relay_secret_load(secret, &ret->relay_secret, &ret->relay_secret_len);
        if (r < 0)
                return err_set(err, r, "%s: [relay] secret_file %s: %s", path, secret,
                               r == -EINVAL ? "must hold 16..1024 bytes and no NUL" : strerror(-r));
        ret->relay_listen = xstrdup(listen);
        ret->relay_docker_root = xstrdup(root);
        if (cert && *cert) {
                ret->relay_tls_cert = xstrdup(cert);
                ret->relay_tls_key = xstrdup(key);
        }
        return 0;
}

static void snapshot_config_done(struct agent_config *c) {
        free(c->runtime_network);
        free(c->controld_login);
        free_many(c->snap_registry, c->snap_repository, c->snap_username, c->snap_password, c->snap_docker_socket,
                  c->snap_docker_root);
}

/* ---------------------------------------------------------------- the whole file */

int agent_config_load(const char *path, struct agent_config *ret, struct err *err) {
        struct conf *cf = NULL;
        int r;
        memset(ret, 0, sizeof(*ret));
        if ((r = conf_parse_file(path, &cf, err)) < 0)
                return r;
        static const struct str_key keys[] = {
                STR_KEY("agent", "node_id", NULL, 128, node_id),
                STR_KEY("agent", "log_level", "info", 16, log_level),
                STR_KEY("agent", "runtime_network", "runsc-net", 64, runtime_network),
                STR_KEY("amqp", "url", "amqp://guest:guest@127.0.0.1:5672", 1024, amqp_url),
                STR_KEY("amqp", "exchange", "paddock.nodes", 128, exchange),
                STR_KEY("amqp", "controld_login", "", 255, controld_login),
                STR_KEY("egress", "table", "paddock", 64, egress_table),
                STR_KEY("egress", "dns_resolver", NULL, 16, egress_dns),
                STR_KEY("proxy", "upstream_ca_file", "", 1024, proxy_ca_file),
                STR_KEY("metrics", "listen", NULL, 64, metrics_listen),
                STR_KEY("nomad", "address", "http://127.0.0.1:4646", 512, nomad_addr),
                STR_KEY("nomad", "token", "", 256, nomad_token),
                STR_KEY("nomad", "ca_file", "", 1024, nomad_ca_file),
                STR_KEY("nomad", "cert_file", "", 1024, nomad_cert_file),
                STR_KEY("nomad", "key_file", "", 1024, nomad_key_file),
        };
        if ((r = get_strings(cf, keys, ELEMENTSOF(keys), false, ret, err)) < 0)
                goto out;
        if ((r = conf_get_int(cf, "amqp", NULL, "prefetch", 8, 1, 1000, &ret->prefetch, err)) < 0)
                goto out;
        if ((r = conf_get_bool(cf, "egress", NULL, "enable", false, &ret->egress_enabled, err)) < 0)
                goto out;
        if ((r = conf_get_bool(cf, "proxy", NULL, "enable", false, &ret->proxy_enabled, err)) < 0 ||
            (r = conf_get_int(cf, "proxy", NULL, "port", 15001, 1024, 65535, &ret->proxy_port, err)) < 0 ||
            (r = conf_get_int(cf, "proxy", NULL, "max_connections_per_sandbox", 64, 1, 4096, &ret->proxy_max_per_sandbox,
                              err)) < 0 ||
            (r = conf_get_int(cf, "proxy", NULL, "max_connections", 1024, 1, 65536, &ret->proxy_max_conns, err)) < 0)
                goto out;
        if ((r = conf_get_list(cf, "egress", NULL, "bridges", 64, 15, &ret->egress_bridges, err)) < 0 ||
            (r = conf_get_list(cf, "egress", NULL, "deny", 1024, 18, &ret->egress_deny, err)) < 0 ||
            (r = conf_get_int(cf, "egress", NULL, "priority", -10, -400, 400, &ret->egress_priority, err)) < 0 ||
            (r = conf_get_duration_ms(cf, "egress", NULL, "resolve_timeout", NAMES_TIMEOUT_DEFAULT_MS, 100, 60000,
                                      &ret->egress_resolve_timeout_ms, err)) < 0 ||
            (r = conf_get_duration_ms(cf, "egress", NULL, "resolve_interval", NAMES_INTERVAL_DEFAULT_MS, 1000,
                                      86400000, &ret->egress_resolve_interval_ms, err)) < 0)
                goto out;
        if (!ret->egress_deny) {
                /* Absent key: the internal ranges no sandbox may reach. An explicit
                 * "deny =" (empty) means none beyond the built-in set. */
                static const char *const def[] = { "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", NULL };
                ret->egress_deny = xnew0(char *, ELEMENTSOF(def));
                for (size_t i = 0; def[i]; i++)
                        ret->egress_deny[i] = xstrdup(def[i]);
        }
        if (ret->metrics_listen && !*ret->metrics_listen) {
                free(ret->metrics_listen);
                ret->metrics_listen = NULL;
        }
        if (ret->metrics_listen) {
                struct sockaddr_storage ss;
                socklen_t sl;
                struct err why = { 0 };
                if ((r = agent_metrics_parse_listen(ret->metrics_listen, &ss, &sl, &why)) < 0) {
                        err_set(err, -EINVAL, "%s: [metrics] listen: %s", path, why.message);
                        goto out;
                }
        }
        if (ret->egress_dns && !*ret->egress_dns) {
                free(ret->egress_dns);
                ret->egress_dns = NULL;
        }
        if (ret->proxy_enabled && !ret->egress_enabled) {
                r = err_set(err, -EINVAL, "%s: [proxy] enable needs [egress] enable (the egress table steers to it)", path);
                goto out;
        }
        if (ret->egress_enabled && !ret->egress_bridges) {
                r = err_set(err, -EINVAL, "%s: [egress] bridges is required when enable = true", path);
                goto out;
        }
        if ((r = snapshot_config_load(cf, ret, err)) < 0)
                goto out;
        if ((r = relay_config_load(cf, path, ret, err)) < 0)
                goto out;
        if ((r = conf_check_unused(cf, err)) < 0)
                goto out;
        if (!ret->node_id || !*ret->node_id) {
                r = err_set(err, -EINVAL, "%s: [agent] node_id is required", path);
                goto out;
        }
        for (const char *p = ret->node_id; *p; p++)
                if (!ascii_alnum(*p) && !strchr("-_.", *p)) {
                        r = err_set(err, -EINVAL, "%s: [agent] node_id may only hold letters, digits, '-', '_' and '.'", path);
                        goto out;
                }
        if (log_level_from_string(ret->log_level) < 0) {
                r = err_set(err, -EINVAL, "%s: [agent] log_level must be debug, info, notice, warning or error", path);
                goto out;
        }
        {
                struct amqpx_url u;
                struct err why = { 0 };
                if ((r = amqpx_url_parse(ret->amqp_url, &u, &why)) < 0) {
                        err_set(err, r, "%s: [amqp] url: %s", path, why.message);
                        goto out;
                }
                amqpx_url_done(&u);
        }
        r = 0;
out:
        conf_free(cf);
        if (r < 0)
                agent_config_done(ret);
        return r;
}

void agent_config_scrub_docker_secrets(struct agent_config *c) {
        if (c->snap_password) {
                explicit_bzero(c->snap_password, strlen(c->snap_password));
                free(c->snap_password);
                c->snap_password = NULL;
        }
        if (c->snap_username) {
                explicit_bzero(c->snap_username, strlen(c->snap_username));
                free(c->snap_username);
                c->snap_username = NULL;
        }
}

void agent_config_done(struct agent_config *c) {
        snapshot_config_done(c);
        if (c->relay_secret)
                explicit_bzero(c->relay_secret, c->relay_secret_len);
        free_many(c->relay_listen, c->relay_secret, c->relay_docker_root, c->relay_tls_cert, c->relay_tls_key);
        strv_free(c->egress_bridges);
        strv_free(c->egress_deny);
        free_many(c->proxy_ca_file, c->egress_table, c->egress_dns, c->metrics_listen, c->node_id, c->log_level, c->amqp_url,
                  c->exchange, c->nomad_addr, c->nomad_token, c->nomad_ca_file, c->nomad_cert_file, c->nomad_key_file);
        memset(c, 0, sizeof(*c));
}
