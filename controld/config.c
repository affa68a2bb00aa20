/* config.c — controld.conf: every key has a default and a limit; typos are errors. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp.h"
#include "cleanup.h"
#include "conf.h"
#include "controld.h"
#include "log.h"
#include "strutil.h"

#define KIB 1024ULL
#define MIB (1024ULL * 1024ULL)
#define GIB (1024ULL * MIB)

static int get_str(struct conf *cf, const char *sec, const char *name, const char *key, const char *def,
                   size_t maxlen, char **out, struct err *err) {
        const char *v = NULL;
        int r = conf_get_string(cf, sec, name, key, def, maxlen, &v, err);
        if (r < 0)
                return r;
        *out = v ? xstrdup(v) : NULL;
        return 0;
}

static int get_req_str(struct conf *cf, const char *sec, const char *name, const char *key, size_t maxlen,
                       char **out, const char *path, struct err *err) {
        int r = get_str(cf, sec, name, key, NULL, maxlen, out, err);
        if (r < 0)
                return r;
        if (!*out || !**out)
                return err_set(err, -EINVAL, "%s: [%s \"%s\"] needs '%s'", path, sec, name, key);
        return 0;
}

static int parse_listen(const char *s, char **ret_addr, int *ret_port) {
        const char *colon = strrchr(s, ':');
        int64_t port;
        if (!colon || colon == s)
                return -EINVAL;
        _cleanup_free_ char *portstr = xstrdup(colon + 1);
        if (safe_atoi64(portstr, &port) < 0 || port < 0 || port > 65535)
                return -EINVAL;
        *ret_addr = xstrndup(s, (size_t) (colon - s));
        *ret_port = (int) port;
        return 0;
}

/* [sec] listen = ADDRESS:PORT of a listener that is off when empty (*ret_addr stays NULL). */
static int get_optional_listen(struct conf *cf, const char *path, const char *sec, char **ret_addr, int *ret_port,
                               struct err *err) {
        _cleanup_free_ char *v = NULL;
        int r = get_str(cf, sec, NULL, "listen", "", 255, &v, err);
        if (r < 0)
                return r;
        if (*v && parse_listen(v, ret_addr, ret_port) < 0)
                return err_set(err, -EINVAL, "%s: [%s] listen must be ADDRESS:PORT or empty (got '%s')", path, sec, v);
        return 0;
}

/* One [plan] amount: a decimal number >= 0, default 0. */
static int get_amount(struct conf *cf, const char *nm, const char *key, const char *path, double *out, struct err *err) {
        _cleanup_free_ char *v = NULL;
        char *end;
        int r = get_str(cf, "plan", nm, key, "0", 32, &v, err);
        if (r < 0)
                return r;
        *out = strtod(v, &end);
        if (*end || *out < 0)
                return err_set(err, -EINVAL, "%s: [plan \"%s\"] %s must be a number >= 0", path, nm, key);
        return 0;
}

/* Reads every [sec "name"] section with load_one() into a new array of `size`-byte items,
 * stored at ret_array (the address of a `T *`) with one zeroed item past the end. Each item
 * is counted in *ret_n before it is read, so that config_free() frees what a failure leaves
 * half-read. */
static int load_sections(struct config *c, struct conf *cf, const char *sec, size_t size, void *ret_array, size_t *ret_n,
                         int (*load_one)(struct config *c, struct conf *cf, const char *nm, void *item, struct err *err),
                         struct err *err) {
        _cleanup_(strv_freep) char **names = NULL;
        int n = conf_subsections(cf, sec, &names);
        if (n < 0)
                return n;
        void *a = xnew0(char, size * ((size_t) n + 1));
        memcpy(ret_array, &a, sizeof(a));
        for (int i = 0; i < n; i++) {
                (*ret_n)++;
                int r = load_one(c, cf, names[i], (char *) a + (size_t) i * size, err);
                if (r < 0)
                        return r;
        }
        return 0;
}

const struct plan_limit_info config_plan_limits[_PLAN_LIMIT_MAX] = {
        [PLAN_MAX_CONCURRENT] = { "max_concurrent", 3, 0, 100000, offsetof(struct plan, max_concurrent) },
        [PLAN_MAX_CPU] = { "max_cpu", 2000, 1, 2000, offsetof(struct plan, max_cpu) },
        [PLAN_MAX_MEMORY] = { "max_memory", 2048, 1, 2048, offsetof(struct plan, max_memory) },
        [PLAN_MAX_DISK] = { "max_disk", 5, 1, 5, offsetof(struct plan, max_disk) },
        [PLAN_MAX_VOLUME_GB] = { "max_volume_gb", 50, 10, 50, offsetof(struct plan, max_volume_gb) },
        [PLAN_MAX_VOLUMES] = { "max_volumes", 2, 0, 10000, offsetof(struct plan, max_volumes) },
};

int config_plan_limit_from_key(const char *key) {
        for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++)
                if (!strcmp(config_plan_limits[k].key, key))
                        return (int) k;
        return -EINVAL;
}

int64_t *config_plan_limit(struct plan *p, enum plan_limit k) {
        return (int64_t *) (void *) ((char *) p + config_plan_limits[k].offset);
}

bool config_plan_allows_region(const struct plan *p, const struct region *g) {
        if (!p->regions)
                return true;
        for (char **k = p->regions; *k; k++)
                if (!strcmp(*k, g->key) || !strcmp(*k, g->name) || !strcmp(*k, g->id))
                        return true;
        return false;
}

const struct plan *config_account_plan(const struct config *c, const struct account *acc, struct plan *buf) {
        const struct plan *p = config_plan(c, acc->plan);
        if (!p)
                return NULL;
        *buf = *p;
        for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++)
                if (acc->limits[k] >= 0)
                        *config_plan_limit(buf, k) = acc->limits[k];
        return buf;
}

static int load_plan(struct config *c, struct conf *cf, const char *nm, void *item, struct err *err) {
        struct plan *p = item;
        uint64_t lifetime;
        int r;
        p->name = xstrdup(nm);
        for (size_t k = 0; k < _PLAN_LIMIT_MAX; k++) {
                const struct plan_limit_info *l = &config_plan_limits[k];
                if ((r = conf_get_int(cf, "plan", nm, l->key, l->def, l->min, l->max, config_plan_limit(p, k), err)) < 0)
                        return r;
        }
        if ((r = get_amount(cf, nm, "spending_limit", c->path, &p->spending_limit, err)) < 0 ||
            (r = get_amount(cf, nm, "price_cpu_mhz_hour", c->path, &p->price_cpu_mhz_hour, err)) < 0 ||
            (r = get_amount(cf, nm, "price_mb_hour", c->path, &p->price_mb_hour, err)) < 0)
                return r;
        if ((r = conf_get_duration_ms(cf, "plan", nm, "max_lifetime", 24ULL * 3600 * 1000, 60 * 1000,
                                      30ULL * 24 * 3600 * 1000, &lifetime, err)) < 0)
                return r;
        p->max_lifetime_s = (int64_t) (lifetime / 1000);
        if ((r = conf_get_int(cf, "plan", nm, "snapshot_max_count", 10, 1, 1000, &p->snapshot_max_count, err)) < 0)
                return r;
        if ((r = conf_get_duration_ms(cf, "plan", nm, "snapshot_max_age", 7ULL * 24 * 3600 * 1000, 60 * 1000,
                                      365ULL * 24 * 3600 * 1000, &lifetime, err)) < 0)
                return r;
        p->snapshot_max_age_s = (int64_t) (lifetime / 1000);
        if ((r = conf_get_int(cf, "plan", nm, "snapshot_max_manual", 50, 0, 100000, &p->snapshot_max_manual, err)) <
                    0 ||
            (r = conf_get_int(cf, "plan", nm, "snapshot_max_inflight", 2, 1, 100, &p->snapshot_max_inflight, err)) < 0 ||
            (r = conf_get_int(cf, "plan", nm, "snapshot_max_total_gb", 50, 1, 1000000, &p->snapshot_max_total_gb, err)) < 0 ||
            (r = conf_get_int(cf, "plan", nm, "memory_kept_max_mb", 16384, 0, 100000000, &p->memory_kept_max_mb, err)) < 0)
                return r;
        if ((r = conf_get_duration_ms(cf, "plan", nm, "memory_kept_max_age", 7ULL * 24 * 3600 * 1000, 1000,
                                      90ULL * 24 * 3600 * 1000, &lifetime, err)) < 0)
                return r;
        p->memory_kept_max_age_s = (int64_t) (lifetime / 1000);
        if (conf_has_section(cf, "plan", nm) &&
            (r = conf_get_list(cf, "plan", nm, "regions", 64, 64, &p->regions, err)) < 0)
                return r;
        return 0;
}

static int load_template(struct config *c, struct conf *cf, const char *nm, void *item, struct err *err) {
        struct template *t = item;
        int r;
        t->name = xstrdup(nm);
        if ((r = get_req_str(cf, "template", nm, "image", 255, &t->image, c->path, err)) < 0 ||
            (r = get_str(cf, "template", nm, "display_name", nm, 128, &t->display_name, err)) < 0 ||
            (r = get_str(cf, "template", nm, "description", "", 512, &t->description, err)) < 0 ||
            (r = conf_get_int(cf, "template", nm, "cpu", 500, 1, 2000, &t->cpu, err)) < 0 ||
            (r = conf_get_int(cf, "template", nm, "memory", 512, 1, 2048, &t->memory, err)) < 0 ||
            (r = conf_get_int(cf, "template", nm, "disk", 1, 1, 5, &t->disk, err)) < 0 ||
            (r = get_str(cf, "template", nm, "language", NULL, 64, &t->language, err)) < 0 ||
            (r = conf_get_list(cf, "template", nm, "tools", 32, 64, &t->tools, err)) < 0 ||
            (r = conf_get_int(cf, "template", nm, "size_mb", 0, 0, 1000000, &t->size_mb, err)) < 0 ||
            (r = get_str(cf, "template", nm, "start", NULL, 255, &t->start, err)) < 0 ||
            (r = conf_get_int(cf, "template", nm, "start_timeout", 60, 1, 600, &t->start_timeout_s, err)) < 0)
                return r;
        if (t->start && (t->start[0] != '/' || strpbrk(t->start, " \t\n")))
                return err_set(err, -EINVAL, "%s: [template \"%s\"] start must be the absolute path of an executable in the image "
                                             "(no arguments): %s", c->path, nm, t->start);
        return 0;
}

#define POOL_MAX_SIZE 256
static int load_pool(struct config *c, struct conf *cf, const char *nm, void *item, struct err *err) {
        struct pool_conf *p = item;
        _cleanup_free_ char *egress = NULL;
        uint64_t age = 0;
        int r;
        p->name = xstrdup(nm);
        if ((r = get_req_str(cf, "pool", nm, "template", 64, &p->template_name, c->path, err)) < 0)
                return r;
        const struct template *t = config_template(c, p->template_name);
        if (!t)
                return err_set(err, -EINVAL, "%s: [pool \"%s\"] template '%s' is not a configured template", c->path, nm,
                               p->template_name);
        if ((r = conf_get_int(cf, "pool", nm, "cpu", t->cpu, 1, 2000, &p->cpu, err)) < 0 ||
            (r = conf_get_int(cf, "pool", nm, "memory", t->memory, 1, 2048, &p->memory, err)) < 0 ||
            (r = conf_get_int(cf, "pool", nm, "disk", t->disk, 1, 5, &p->disk, err)) < 0 ||
            (r = get_str(cf, "pool", nm, "egress", "networked", 16, &egress, err)) < 0 ||
            (r = conf_get_int(cf, "pool", nm, "size", 2, 0, POOL_MAX_SIZE, &p->size, err)) < 0 ||
            (r = conf_get_duration_ms(cf, "pool", nm, "max_age", 3600 * 1000, 10 * 1000, 7ULL * 24 * 3600 * 1000, &age, err)) < 0 ||
            (r = conf_get_int(cf, "pool", nm, "refill_rate", 60, 1, 6000, &p->refill_per_min, err)) < 0)
                return r;
        p->max_age_ms = (int64_t) age;
        if (!strcmp(egress, "networked"))
                p->networked = true;
        else if (strcmp(egress, "deny_all") != 0) {
                return err_set(err, -EINVAL, "%s: [pool \"%s\"] egress must be networked or deny_all, not '%s'", c->path, nm, egress);
        }
        /* Two pools for one kind of sandbox would split its claims for nothing. */
        for (struct pool_conf *o = c->pools; o < p; o++)
                if (!strcmp(o->template_name, p->template_name) && o->cpu == p->cpu && o->memory == p->memory &&
                    o->disk == p->disk && o->networked == p->networked)
                        return err_set(err, -EINVAL, "%s: [pool \"%s\"] and [pool \"%s\"] hold the same template, specs and egress class",
                                       c->path, o->name, nm);
        return 0;
}

static int load_region(struct config *c, struct conf *cf, const char *nm, void *item, struct err *err) {
        struct region *g = item;
        int r;
        g->key = xstrdup(nm);
        if ((r = get_req_str(cf, "region", nm, "id", 24, &g->id, c->path, err)) < 0 ||
            (r = get_str(cf, "region", nm, "name", nm, 64, &g->name, err)) < 0 ||
            (r = get_str(cf, "region", nm, "country", "", 64, &g->country, err)) < 0 ||
            (r = get_str(cf, "region", nm, "continent", "", 64, &g->continent, err)) < 0 ||
            (r = conf_get_bool(cf, "region", nm, "enabled", true, &g->enabled, err)) < 0)
                return r;
        if (!hexid_valid(g->id))
                return err_set(err, -EINVAL, "%s: [region \"%s\"] id must be 24 lowercase hex characters", c->path, nm);
        return 0;
}

/* [nomad]: read whatever the driver, so that a typo fails `controld -n` either way. */
static int load_nomad(struct config *c, struct conf *cf, struct err *err) {
        int r;
        if ((r = get_str(cf, "nomad", NULL, "address", "http://127.0.0.1:4646", 512, &c->nomad_addr, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "token", "", 256, &c->nomad_token, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "ca_file", "", 1024, &c->nomad_ca_file, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "cert_file", "", 1024, &c->nomad_cert_file, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "key_file", "", 1024, &c->nomad_key_file, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "namespace", "sandboxes", 128, &c->nomad_namespace, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "node_pool", "sandbox", 128, &c->nomad_node_pool, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "region", "global", 128, &c->nomad_region, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "cni_open", "sandbox-open", 128, &c->nomad_cni_open, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "cni_restricted", "sandbox-restricted", 128, &c->nomad_cni_restricted, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "cni_no_egress", "sandbox-no-egress", 128, &c->nomad_cni_no_egress, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "runtime", "runsc", 64, &c->nomad_runtime, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "runtime_network", "runsc-net", 64, &c->nomad_runtime_net, err)) <
                    0 ||
            (r = conf_get_int(cf, "nomad", NULL, "pids_limit", 4096, 16, 1 << 22, &c->nomad_pids_limit, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "csi_plugin_id", "", 128, &c->nomad_csi_plugin_id, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "agent_binary", "/usr/lib/paddock/paddock-init", 512, &c->nomad_agent_binary,
                         err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "relay_secret_file", "", 1024, &c->nomad_relay_secret_file, err)) < 0 ||
            (r = conf_get_int(cf, "nomad", NULL, "relay_port", 7433, 1, 65535, &c->nomad_relay_port, err)) < 0 ||
            (r = get_str(cf, "nomad", NULL, "relay_tls_ca", "", 1024, &c->nomad_relay_tls_ca, err)) < 0 ||
            (r = conf_get_duration_ms(cf, "nomad", NULL, "request_timeout", 30000, 100, 600000, &c->nomad_request_timeout_ms,
                                      err)) < 0 ||
            (r = conf_get_duration_ms(cf, "nomad", NULL, "placement_timeout", 120000, 1000, 3600000,
                                      &c->nomad_placement_timeout_ms, err)) < 0 ||
            (r = conf_get_duration_ms(cf, "nomad", NULL, "blocking_wait", 30000, 100, 300000, &c->nomad_blocking_wait_ms,
                                      err)) < 0 ||
            (r = conf_get_list(cf, "nomad", NULL, "datacenters", 64, 128, &c->nomad_datacenters, err)) < 0)
                return r;
        if (!c->nomad_datacenters || !c->nomad_datacenters[0]) {
                strv_free(c->nomad_datacenters);
                c->nomad_datacenters = xnew0(char *, 2);
                c->nomad_datacenters[0] = xstrdup("*");   /* Nomad >= 1.6: every datacenter */
        }
        if (!startswith(c->nomad_addr, "http://") && !startswith(c->nomad_addr, "https://"))
                return err_set(err, -EINVAL, "%s: [nomad] address must start with http:// or https:// (got '%s')", c->path,
                               c->nomad_addr);
        return 0;
}

int config_load(const char *path, struct config **ret, struct err *err) {
        struct conf *cf = NULL;
        struct config *c = NULL;
        _cleanup_free_ char *listen = NULL;
        int r;

        r = conf_parse_file(path, &cf, err);
        if (r < 0)
                return r;
        c = xnew0(struct config, 1);
        c->path = xstrdup(path);

#define S(sec, key, def, max, field) \
        if ((r = get_str(cf, sec, NULL, key, def, max, &c->field, err)) < 0) goto fail
#define I(sec, key, def, min, max, field) \
        if ((r = conf_get_int(cf, sec, NULL, key, def, min, max, &c->field, err)) < 0) goto fail
#define Z(sec, key, def, min, max, field) \
        if ((r = conf_get_size(cf, sec, NULL, key, def, min, max, &c->field, err)) < 0) goto fail
#define D(sec, key, def_s, min_s, max_s, field)                                                           \
        do {                                                                                              \
                uint64_t _ms;                                                                             \
                if ((r = conf_get_duration_ms(cf, sec, NULL, key, (def_s) * 1000ULL, (min_s) * 1000ULL,  \
                                              (max_s) * 1000ULL, &_ms, err)) < 0)                 \
                        goto fail;                                                                        \
                c->field = _ms / 1000;                                                                    \
        } while (0)

        if ((r = get_str(cf, "server", NULL, "listen", "127.0.0.1:8080", 255, &listen, err)) < 0)
                goto fail;
        if (parse_listen(listen, &c->listen_addr, &c->listen_port) < 0) {
                r = err_set(err, -EINVAL, "%s: [server] listen must be ADDRESS:PORT (got '%s')", path, listen);
                goto fail;
        }
        I("server", "max_connections", 1024, 1, 65536, max_connections);
        I("server", "per_ip_connections", 64, 0, 65536, per_ip_connections);
        Z("server", "max_body", 8 * MIB, 1 * KIB, 256 * MIB, max_body);
        Z("server", "max_json_body", 256 * KIB, 1 * KIB, 256 * MIB, max_json_body);
        Z("server", "max_header", 32 * KIB, 4 * KIB, 1 * MIB, max_header);
        Z("server", "max_file", 50 * MIB, 1 * KIB, 4 * GIB, max_file);
        D("server", "connection_timeout", 60, 1, 3600, conn_timeout_s);
        D("server", "max_wait", 300, 1, 3600, max_wait_s);
        Z("server", "max_exec_output", 1 * MIB, 1 * KIB, 64 * MIB, max_exec_output);
        I("server", "max_exec_concurrent", 64, 1, 1024, max_exec_concurrent);
        I("server", "max_runtime_per_account", 128, 1, 65536, max_runtime_per_account);
        D("server", "transfer_timeout", 600, 1, 86400, transfer_timeout_s);
        I("server", "auth_failures_per_minute", 30, 0, 60000, auth_failures_per_minute);
        I("server", "auth_failure_addresses", 4096, 16, 1 << 20, auth_failure_addresses);
        if ((r = conf_get_duration_ms(cf, "server", NULL, "stream_keepalive", 15000, 1000, 300000, &c->stream_keepalive_ms, err)) < 0)
                goto fail;
        if ((r = get_optional_listen(cf, path, "preview", &c->preview_listen_addr, &c->preview_listen_port, err)) < 0 ||
            (r = get_optional_listen(cf, path, "e2b", &c->e2b_listen_addr, &c->e2b_listen_port, err)) < 0)
                goto fail;
        S("e2b", "domain", "", 200, e2b_domain);
        for (const char *d = c->e2b_domain; *d; d++)
                if (!((*d >= 'a' && *d <= 'z') || (*d >= '0' && *d <= '9') || *d == '-' || *d == '.' || *d == ':')) {
                        r = err_set(err, -EINVAL, "%s: [e2b] domain must be a lowercase DNS name, optionally with :port (got '%s')",
                                    path, c->e2b_domain);
                        goto fail;
                }
        S("e2b", "base_template", "e2b-base", 64, e2b_base_template);
        /* unset: e2b-base; "" (an empty list): none */
        if ((r = conf_get_list(cf, "e2b", NULL, "user_templates", 64, 64, &c->e2b_user_templates, err)) < 0)
                goto fail;
        if (!c->e2b_user_templates) {
                c->e2b_user_templates = xnew0(char *, 2);
                c->e2b_user_templates[0] = xstrdup("e2b-base");
        }
        I("e2b", "max_connections", 512, 1, 65536, e2b_max_connections);
        S("e2b", "tls_cert", "", 1024, e2b_tls_cert);
        S("e2b", "tls_key", "", 1024, e2b_tls_key);
        I("e2b", "per_address_connections", 64, 1, 65536, e2b_per_address);
        if ((r = conf_get_duration_ms(cf, "e2b", NULL, "head_timeout", 5000, 500, 60000, &c->e2b_head_timeout_ms, err)) < 0)
                goto fail;
        if (!*c->e2b_tls_cert != !*c->e2b_tls_key) {
                r = err_set(err, -EINVAL, "%s: [e2b] tls_cert and tls_key go together (both, or neither)", path);
                goto fail;
        }
        S("preview", "domain", "", 200, preview_domain);
        S("preview", "scheme", "https", 8, preview_scheme);
        S("preview", "public_url", "", 255, preview_public_url);
        if ((r = conf_get_bool(cf, "preview", NULL, "path_form", false, &c->preview_path_form, err)) < 0)
                goto fail;
        I("preview", "per_address_connections", 64, 1, 65536, preview_per_address);
        if ((r = conf_get_duration_ms(cf, "preview", NULL, "head_timeout", 5000, 500, 60000, &c->preview_head_timeout_ms, err)) < 0)
                goto fail;
        if (strcmp(c->preview_scheme, "http") && strcmp(c->preview_scheme, "https")) {
                r = err_set(err, -EINVAL, "%s: [preview] scheme must be http or https", path);
                goto fail;
        }
        for (const char *d = c->preview_domain; *d; d++)
                if (!((*d >= 'a' && *d <= 'z') || (*d >= '0' && *d <= '9') || *d == '-' || *d == '.' || *d == ':')) {
                        r = err_set(err, -EINVAL, "%s: [preview] domain must be a lowercase DNS name, optionally with :port (got '%s')", path,
                                    c->preview_domain);
                        goto fail;
                }
        I("preview", "max_connections", 512, 1, 65536, preview_max_connections);
        I("preview", "per_sandbox_connections", 32, 1, 4096, preview_per_sandbox);
        I("preview", "per_sandbox_previews", 16, 1, 256, preview_max_per_sandbox);
        Z("preview", "max_header", 16 * KIB, 1 * KIB, 256 * KIB, preview_max_header);
        D("preview", "idle_timeout", 300, 1, 24 * 3600, preview_idle_timeout_s);
        D("preview", "default_expiry", 3600, 60, 365 * 24 * 3600, preview_default_expiry_s);
        D("preview", "max_expiry", 7 * 24 * 3600, 60, 365 * 24 * 3600, preview_max_expiry_s);
        S("server", "log_level", "info", 16, log_level);
        S("server", "metrics_token_file", "", 1024, metrics_token_file);
        S("server", "web_dir", "", 1024, web_dir);
        if (log_level_from_string(c->log_level) < 0) {
                r = err_set(err, -EINVAL, "%s: [server] log_level must be debug, info, notice, warning or error", path);
                goto fail;
        }

        S("store", "path", "/var/lib/paddock/controld.db", 1024, db_path);

        S("scheduler", "driver", "docker", 16, driver);
        if (strcmp(c->driver, "docker") != 0 && strcmp(c->driver, "nomad") != 0) {
                r = err_set(err, -EINVAL, "%s: [scheduler] driver '%s' is not available (supported: docker, nomad)", path,
                            c->driver);
                goto fail;
        }
        D("scheduler", "create_timeout", 90, 5, 600, create_timeout_s);
        D("scheduler", "stats_interval", 10, 1, 3600, stats_interval_s);
        D("scheduler", "stats_retention", 24 * 3600, 60, 30 * 24 * 3600, stats_retention_s);
        D("scheduler", "reap_interval", 10, 1, 3600, reap_interval_s);
        D("scheduler", "stuck_starting", 300, 10, 24 * 3600, stuck_starting_s);
        D("scheduler", "paused_max", 7 * 24 * 3600, 60, 90 * 24 * 3600, paused_max_s);
        D("scheduler", "pause_wait", 60, 0, 600, pause_wait_s);

        S("docker", "socket", "/var/run/docker.sock", 255, docker_socket);
        S("docker", "runtime", "runsc", 64, docker_runtime);
        S("docker", "runtime_network", "runsc-net", 64, docker_runtime_net);
        /* Checkpoints (pause with memory) are taken by runsc itself on the container Docker
         * started (state under runsc_root, where Docker's runtime shim keeps it): uncompressed
         * and without the copies Docker's checkpoint API makes. "" = Docker's API only. */
        S("docker", "runsc", "/usr/bin/runsc", 255, docker_runsc);
        S("docker", "runsc_root", "/var/run/docker/runtime-runc/moby", 255, docker_runsc_root);
        if ((r = conf_get_bool(cf, "docker", NULL, "allow_unsandboxed", false, &c->docker_allow_unsandboxed, err)) < 0)
                goto fail;
        S("docker", "network", "paddock-sandbox", 64, docker_network);
        S("docker", "network_internal", "paddock-restricted", 64, docker_network_internal);
        S("docker", "subnet_internal", "169.254.91.0/24", 64, docker_subnet_internal);
        S("docker", "subnet", "169.254.90.0/24", 64, docker_subnet);
        S("docker", "gateway", "169.254.90.1", 64, docker_gateway);
        I("docker", "pids_limit", 4096, 16, 1 << 22, docker_pids_limit);
        I("docker", "cpu_burst", 100, 0, 100, docker_cpu_burst);
        /* Where capped volumes live: a directory on btrfs (a subvolume with a qgroup limit per
         * volume). Empty: volumes are plain Docker volumes and sizeGB is not enforced. */
        S("docker", "volume_root", "", 1024, docker_volume_root);
        if (c->docker_volume_root[0] && c->docker_volume_root[0] != '/') {
                r = err_set(err, -EINVAL, "%s: [docker] volume_root must be an absolute path", path);
                goto fail;
        }
        S("docker", "bridge", "paddock-sandbox", 15, docker_bridge);
        /* The in-sandbox agent (paddock-init): its binary, bound read-only into every sandbox
         * as PID 1 ("" = next to controld's own executable, else /usr/lib/paddock/paddock-init;
         * "none" = no agent: tini and the exec path as before), and where each sandbox's socket
         * directory and secret file live ("" = "agents" beside the store). */
        S("init", "binary", "", 1024, init_binary);
        S("init", "dir", "", 1024, init_dir);
        if ((c->init_binary[0] && c->init_binary[0] != '/' && strcmp(c->init_binary, "none")) ||
            (c->init_dir[0] && c->init_dir[0] != '/')) {
                r = err_set(err, -EINVAL, "%s: [init] binary and dir must be absolute paths", path);
                goto fail;
        }
        S("docker", "node_id", "local", 128, docker_node_id);

        if ((r = load_nomad(c, cf, err)) < 0)
                goto fail;

        S("amqp", "url", NULL, 1024, amqp_url);
        if (c->amqp_url && !*c->amqp_url) {
                free(c->amqp_url);
                c->amqp_url = NULL;
        }
        S("amqp", "exchange", "paddock.nodes", 128, amqp_exchange);
        S("amqp", "node_login", "", 255, amqp_node_login);
        if (c->amqp_url) {
                /* Our own login goes in every message's user_id (RabbitMQ checks it), so agents
                 * can tell a command from controld from one any other broker user published. */
                struct amqpx_url u;
                struct err uerr = { 0 };
                if (amqpx_url_parse(c->amqp_url, &u, &uerr) == 0) {
                        c->amqp_login = xstrdup(u.user);
                        amqpx_url_done(&u);
                }
        }
        if ((r = conf_get_duration_ms(cf, "amqp", NULL, "egress_timeout", 10000, 100, 120000, &c->egress_timeout_ms, err)) < 0)
                goto fail;

        S("snapshots", "registry", "127.0.0.1:5000", 255, snap_registry);
        S("snapshots", "repository", "paddock/snapshots", 200, snap_repository);
        S("snapshots", "username", NULL, 255, snap_username);
        S("snapshots", "password", NULL, 255, snap_password);
        /* Started as root, controld forks its docker child and runs as this user (dockerchild.c). */
        S("controld", "user", "paddock", 64, run_user);
        D("snapshots", "timeout", 1800, 10, 24 * 3600, snap_timeout_s);
        if ((r = conf_get_duration_ms(cf, "snapshots", NULL, "tick", 5000, 100, 60000, &c->snap_tick_ms, err)) < 0)
                goto fail;
        S("templates", "builder", "docker", 64, utpl_builder);
        S("templates", "repository", "paddock/templates", 200, utpl_repository);
        D("templates", "build_timeout", 600, 5, 3 * 3600, utpl_build_timeout_s);
        Z("templates", "max_context", 6 * MIB, 1 * KIB, 256 * MIB, utpl_max_context);
        Z("templates", "max_image", 2 * GIB, 1 * MIB, 64 * GIB, utpl_max_image);
        I("templates", "max_per_account", 10, 0, 1000, utpl_max_per_account);
        I("templates", "max_builds", 4, 1, 256, utpl_max_builds);
        S("secrets", "key_file", "", 1024, secrets_key_file);
        I("secrets", "max_per_account", 100, 0, 10000, secrets_max_per_account);
        Z("secrets", "max_value", 8 * KIB, 1, 64 * KIB, secrets_max_value);

        S("defaults", "template", NULL, 64, default_template);
        S("defaults", "region", NULL, 64, default_region);
        S("defaults", "plan", "default", 64, default_plan);
        D("defaults", "lifetime", 24 * 3600, 60, 30 * 24 * 3600, default_lifetime_s);
#undef S
#undef I
#undef Z
#undef D

        if ((r = load_sections(c, cf, "plan", sizeof(struct plan), &c->plans, &c->n_plans, load_plan, err)) < 0 ||
            (r = load_sections(c, cf, "template", sizeof(struct template), &c->templates, &c->n_templates, load_template, err)) < 0 ||
            (r = load_sections(c, cf, "region", sizeof(struct region), &c->regions, &c->n_regions, load_region, err)) < 0 ||
            (r = load_sections(c, cf, "pool", sizeof(struct pool_conf), &c->pools, &c->n_pools, load_pool, err)) < 0)
                goto fail;
        if ((r = conf_check_unused(cf, err)) < 0)
                goto fail;

        if (c->n_templates == 0 || c->n_regions == 0) {
                r = err_set(err, -EINVAL, "%s: at least one [template \"...\"] and one [region \"...\"] are required", path);
                goto fail;
        }
        if (!c->default_template)
                c->default_template = xstrdup(c->templates[0].name);
        if (!config_template(c, c->default_template)) {
                r = err_set(err, -EINVAL, "%s: [defaults] template '%s' is not a configured template", path, c->default_template);
                goto fail;
        }
        if (!c->default_region)
                c->default_region = xstrdup(c->regions[0].key);
        if (!config_region(c, c->default_region)) {
                r = err_set(err, -EINVAL, "%s: [defaults] region '%s' is not a configured region", path, c->default_region);
                goto fail;
        }
        for (size_t i = 0; i < c->n_plans; i++)
                for (char **g = c->plans[i].regions; g && *g; g++)
                        if (!config_region(c, *g)) {
                                r = err_set(err, -EINVAL, "%s: [plan \"%s\"] regions: '%s' is not a configured region", path,
                                            c->plans[i].name, *g);
                                goto fail;
                        }
        conf_free(cf);
        *ret = c;
        return 0;
fail:
        conf_free(cf);
        config_free(c);
        return r;
}

struct config *config_free(struct config *c) {
        if (!c)
                return NULL;
        free(c->path);
        free(c->listen_addr);
        free(c->log_level);
        free_many(c->preview_listen_addr, c->preview_domain, c->preview_scheme, c->preview_public_url);
        free_many(c->e2b_listen_addr, c->e2b_domain, c->e2b_base_template, c->e2b_tls_cert, c->e2b_tls_key);
        strv_free(c->e2b_user_templates);
        free(c->metrics_token_file);
        free(c->secrets_key_file);
        free(c->web_dir);
        free(c->db_path);
        free(c->driver);
        free(c->docker_socket);
        free(c->docker_runsc);
        free(c->docker_runsc_root);
        free(c->docker_runtime);
        free(c->init_binary);
        free(c->init_dir);
        free(c->docker_network);
        free(c->docker_runtime_net);
        free(c->docker_network_internal);
        free(c->docker_subnet_internal);
        free(c->docker_subnet);
        free(c->docker_gateway);
        free(c->docker_volume_root);
        free(c->docker_bridge);
        free(c->docker_node_id);
        free(c->amqp_url);
        free(c->amqp_exchange);
        free(c->amqp_node_login);
        free(c->amqp_login);
        free(c->snap_registry);
        free(c->snap_repository);
        free_many(c->utpl_builder, c->utpl_repository);
        free(c->snap_username);
        free(c->snap_password);
        free(c->run_user);
        free(c->nomad_addr);
        free(c->nomad_token);
        free(c->nomad_ca_file);
        free(c->nomad_cert_file);
        free(c->nomad_key_file);
        free(c->nomad_namespace);
        free(c->nomad_node_pool);
        free(c->nomad_region);
        strv_free(c->nomad_datacenters);
        free(c->nomad_cni_open);
        free(c->nomad_cni_restricted);
        free(c->nomad_cni_no_egress);
        free(c->nomad_runtime);
        free(c->nomad_runtime_net);
        free(c->nomad_csi_plugin_id);
        free(c->nomad_agent_binary);
        free(c->nomad_relay_secret_file);
        free(c->nomad_relay_tls_ca);
        free(c->default_template);
        free(c->default_region);
        free(c->default_plan);
        for (size_t i = 0; i < c->n_plans; i++) {
                free(c->plans[i].name);
                strv_free(c->plans[i].regions);
        }
        free(c->plans);
        for (size_t i = 0; i < c->n_pools; i++)
                free_many(c->pools[i].name, c->pools[i].template_name);
        free(c->pools);
        for (size_t i = 0; i < c->n_templates; i++) {
                free(c->templates[i].name);
                free(c->templates[i].image);
                free(c->templates[i].display_name);
                free(c->templates[i].description);
                free_many(c->templates[i].language, c->templates[i].start);
                strv_free(c->templates[i].tools);
        }
        free(c->templates);
        for (size_t i = 0; i < c->n_regions; i++) {
                free(c->regions[i].key);
                free(c->regions[i].id);
                free(c->regions[i].name);
                free(c->regions[i].country);
                free(c->regions[i].continent);
        }
        free(c->regions);
        free(c);
        return NULL;
}

struct registry config_snapshot_registry(const struct config *c) {
        return (struct registry) {
                .host = c->snap_registry,
                .username = c->snap_username && *c->snap_username ? c->snap_username : NULL,
                .password = c->snap_password,
        };
}

const struct plan *config_plan(const struct config *c, const char *name) {
        for (size_t i = 0; name && i < c->n_plans; i++)
                if (!strcmp(c->plans[i].name, name))
                        return &c->plans[i];
        return NULL;
}

const struct template *config_template(const struct config *c, const char *name) {
        for (size_t i = 0; name && i < c->n_templates; i++)
                if (!strcmp(c->templates[i].name, name))
                        return &c->templates[i];
        return NULL;
}

const struct region *config_region(const struct config *c, const char *k) {
        for (size_t i = 0; k && i < c->n_regions; i++)
                if (!strcmp(c->regions[i].key, k) || !strcmp(c->regions[i].id, k) || !strcmp(c->regions[i].name, k))
                        return &c->regions[i];
        return NULL;
}
