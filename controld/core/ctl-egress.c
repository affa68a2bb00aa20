/* egress.c — controld's side of egress enforcement: asks the sandbox's node agent
 * (over the node bus) to apply or remove a sandbox's policy and waits for its word.
 *
 * Fail closed: a policy other than deny_all counts as in force only when the agent
 * confirmed it (ok:true from that node, within [amqp] egress_timeout). Without a node
 * bus ([amqp] url unset) nothing is enforced: policies are stored and the container
 * sits on the bridge with no firewall of ours; controld says so loudly at start.
 *
 * What the agent answered last (resolved names, applied_at, the node) is kept in the
 * store per sandbox for GET /sandboxes/{id}/egress, across restarts.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "fault.h"
#include "json.h"
#include "log.h"
#include "amqp.h"
#include "nodebus.h"
#include "pj_node.h"
#include "pj_snapshot.h"
#include "strutil.h"
#include "ctl-egress.h"
#include "ctl-metrics.h"
#include "network.h"
#include "secret.h"

static atomic_ullong n_apply_ok, n_apply_fail, n_remove_ok, n_remove_fail, n_hosts_written, n_hosts_failed;

/* ---- last apply per sandbox (for GET /egress) ----
 *
 * The store keeps when the node's agent confirmed the last apply and what each allowlisted
 * hostname resolved to, so GET /egress shows it after a controld restart; removed with the
 * sandbox's rules. */

static void applied_record(struct ctl *c, const char *id, const char *node, const struct pj_node_resolved *res,
                           size_t n) {
        int r = store_egress_applied_put(c->store, id, node, now_ms(), res, n);
        if (r < 0)
                log_warning("cannot record the egress apply in the store: %s (GET /egress will not show it)", strerror(-r));
}

/* ---- the always-deny set ---- */

static const struct { uint32_t net; int prefix; const char *what; } always_deny[] = {
        { 0x00000000, 8, "0.0.0.0/8 (this network)" },
        { 0x0a000000, 8, "10.0.0.0/8 (private, RFC 1918)" },
        { 0x64400000, 10, "100.64.0.0/10 (carrier-grade NAT)" },
        { 0x7f000000, 8, "127.0.0.0/8 (loopback)" },
        { 0xa9fe0000, 16, "169.254.0.0/16 (link-local, cloud metadata)" },
        { 0xac100000, 12, "172.16.0.0/12 (private, RFC 1918)" },
        { 0xc0a80000, 16, "192.168.0.0/16 (private, RFC 1918)" },
        { 0xe0000000, 4, "224.0.0.0/4 (multicast)" },
        { 0xf0000000, 4, "240.0.0.0/4 (reserved, broadcast)" },
};

int ctl_egress_check_rules(struct ctl *c, const char *account_id, const struct sb_egress *e, const char *prefix,
                           struct err *err) {
        if (e->rules.n_rules == 0)
                return 0;
        if (!ctl_egress_enforced(c))
                return err_set_field(err, -EOPNOTSUPP, prefix,
                                     "%s need the node agent's egress proxy, and this server has no node agent "
                                     "([amqp] url is not set): the headers would not be put in", prefix);
        return secret_rules_check(c, account_id, &e->rules, prefix, err);
}

static uint32_t mask_of(int prefix) {
        return prefix <= 0 ? 0 : 0xffffffffu << (32 - prefix);
}

int ctl_egress_check_allow(const struct sb_egress *e, struct err *err) {
        for (size_t i = 0; i < e->n_allow; i++) {
                const struct pj_allow_entry *a = &e->allow[i];
                if (a->kind == PJ_ALLOW_HOSTNAME)
                        continue;
                for (size_t k = 0; k < ELEMENTSOF(always_deny); k++) {
                        /* Overlap: the two networks share their common prefix. */
                        int p = a->prefix < always_deny[k].prefix ? a->prefix : always_deny[k].prefix;
                        if (((a->addr ^ always_deny[k].net) & mask_of(p)) == 0) {
                                char buf[PJ_ALLOW_NORM_MAX];
                                sb_allow_entry_format(a, buf);
                                return err_set(err, -EINVAL,
                                               "egress.allow[%zu] (\"%s\") overlaps %s, which sandboxes can never reach; "
                                               "remove it from the allowlist",
                                               i, buf, always_deny[k].what);
                        }
                }
        }
        return 0;
}

/* ---- requests ---- */

bool ctl_egress_enforced(const struct ctl *c) {
        return c->bus != NULL;
}

static int parse_ip(const char *s, uint32_t *ret) {
        struct in_addr a;
        if (!s || inet_pton(AF_INET, s, &a) != 1)
                return -EINVAL;
        *ret = ntohl(a.s_addr);
        return 0;
}

/* Whether an allowlist entry of the policy names host itself. Only the name: the agent allows a
 * hostname entry's own addresses, so a parent domain does not let a subdomain out. */
static bool allow_names(const struct sb_egress *pol, const char *host) {
        for (size_t i = 0; i < pol->n_allow; i++)
                if (pol->allow[i].kind == PJ_ALLOW_HOSTNAME && !strcmp(pol->allow[i].host, host))
                        return true;
        return false;
}

/* Whether the policy lets host out: open does, deny_all does not, restricted when an allowlist
 * entry names it or (ours) the policy's rules open their hosts. */
static bool host_allowed(const struct sb_egress *pol, const char *host) {
        switch (pol->mode) {
        case PJ_EGRESS_OPEN:
                return true;
        case PJ_EGRESS_RESTRICTED:
                return pol->rules.rules_open || allow_names(pol, host);
        case PJ_EGRESS_DENY_ALL:
                break;
        }
        return false;
}

/* The egress.apply message; with rules, their values have the secrets put in (and the body is
 * wiped by the caller). *ret_rules: how many hosts' rules it carries. NULL with err when a
 * secret cannot be put in. */
static char *apply_body(struct ctl *c, const struct sandbox *sb, const struct sb_egress *pol, uint32_t ip,
                        size_t *ret_rules, struct err *err) {
        struct pj_node_msg m = { .type = PJ_NODE_EGRESS_APPLY, .ip = ip };
        snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", sb->id);
        /* The agent budgets hostname lookups per account: one tenant's names fail only it. */
        if (hexid_valid(sb->account_id))
                snprintf(m.account_id, sizeof(m.account_id), "%s", sb->account_id);
        /* The agent binds the sandbox's bridge port to its address: no other sandbox sends as it. */
        if (sb->container_id && pj_snapshot_container_ref_valid(sb->container_id, strlen(sb->container_id)))
                snprintf(m.container, sizeof(m.container), "%s", sb->container_id);
        m.egress.mode = pol->mode;
        size_t n_open = pol->mode == PJ_EGRESS_RESTRICTED && pol->rules.rules_open ? pol->rules.n_rules : 0;
        if (pol->mode == PJ_EGRESS_RESTRICTED && pol->n_allow + n_open > 0) {
                m.egress.allow = xnew0(char *, pol->n_allow + n_open + 1);
                for (size_t i = 0; i < pol->n_allow; i++) {
                        char buf[PJ_ALLOW_NORM_MAX];
                        sb_allow_entry_format(&pol->allow[i], buf);
                        m.egress.allow[m.egress.n_allow++] = xstrdup(buf);
                }
                /* Ours: a host with rules is allowed by them (unless listed already). */
                for (size_t i = 0; i < n_open; i++)
                        if (!allow_names(pol, pol->rules.rules[i].host) && m.egress.n_allow < PJ_EGRESS_MAX_ALLOW)
                                m.egress.allow[m.egress.n_allow++] = xstrdup(pol->rules.rules[i].host);
        }
        /* Rules go to the node only for hosts the policy lets out: a rule opens nothing itself. */
        *ret_rules = 0;
        if (pol->mode != PJ_EGRESS_DENY_ALL && pol->rules.n_rules) {
                m.egress.rules = xnew0(struct pj_egress_rule, pol->rules.n_rules);
                for (size_t i = 0; i < pol->rules.n_rules; i++) {
                        const struct pj_egress_rule *src = &pol->rules.rules[i];
                        if (!host_allowed(pol, src->host))
                                continue;
                        struct pj_egress_rule *d = &m.egress.rules[m.egress.n_rules++];
                        memcpy(d->host, src->host, sizeof(d->host));
                        d->headers = xnew0(struct pj_egress_header, src->n_headers ? src->n_headers : 1);
                        for (size_t k = 0; k < src->n_headers; k++) {
                                d->headers[k].name = xstrdup(src->headers[k].name);
                                d->headers[k].value = secret_rules_resolve(c, sb->account_id, src->headers[k].value, err);
                                d->n_headers++;
                                if (!d->headers[k].value) {
                                        pj_egress_rules_wipe(&m.egress);
                                        pj_node_msg_done(&m);
                                        return NULL;
                                }
                        }
                }
                *ret_rules = m.egress.n_rules;
        }
        char *body = pj_node_msg_format(&m);
        pj_egress_rules_wipe(&m.egress);
        pj_node_msg_done(&m);
        return body;
}

/* Runs the fixed script in the sandbox (as root, through the driver) with data on its stdin,
 * bounded (10 s); what: the step, for the error. No user string reaches the shell. */
static int run_fed(struct ctl *c, const struct sandbox *sb, const char *script, const void *data, size_t len,
                   const char *what, struct err *err) {
        const char *argv[] = { "/bin/sh", "-c", script, NULL };
        struct exec_spec spec = { .argv = argv, .want_stdin = true };
        struct exec_session *s = NULL;
        int code = -1;
        int r = c->drv->ops->exec_start(c->drv, sb, &spec, &s, err);
        if (r < 0)
                return r;
        int64_t deadline = mono_ms() + 10000;
        r = c->drv->ops->exec_write(s, data, len, 5000, exec_output_discard, NULL);
        if (r >= 0)
                r = c->drv->ops->exec_close_stdin(s);
        while (r >= 0 && (r = c->drv->ops->exec_read(s, 1000, -1, exec_output_discard, NULL)) == 0)
                if (mono_ms() > deadline) {
                        r = -ETIMEDOUT;
                        break;
                }
        if (r >= 0 && c->drv->ops->exec_exit_code(s, &code) >= 0 && code != 0)
                r = err_set(err, -EIO, "%s exited with %d", what, code);
        else if (r < 0)
                err_set(err, r, "%s failed: %s", what, strerror(-r));
        c->drv->ops->exec_free(s);
        return r < 0 ? r : 0;
}

/* Puts the sandbox's egress CA where its TLS stacks look: alone in SB_EGRESS_CA_FILE and
 * appended (once) to its system bundle, which is made when the image has none. The PEM goes
 * on stdin to a fixed script; no user string reaches a shell. */
static int install_ca(struct ctl *c, const struct sandbox *sb, const char *pem, struct err *err) {
        static const char script[] =
                "umask 022; mkdir -p /etc/paddock /etc/ssl/certs && cat > " SB_EGRESS_CA_FILE ".new && "
                "mv -f " SB_EGRESS_CA_FILE ".new " SB_EGRESS_CA_FILE " && "
                "line=$(sed -n 2p " SB_EGRESS_CA_FILE ") && "
                "{ grep -qxF \"$line\" " SB_EGRESS_BUNDLE " 2>/dev/null || cat " SB_EGRESS_CA_FILE " >> " SB_EGRESS_BUNDLE "; }";
        return run_fed(c, sb, script, pem, strlen(pem), "installing the egress proxy's CA in the sandbox", err);
}

/* Writes the agent's resolved names into the sandbox's /etc/hosts, so a restricted
 * sandbox (which gets no DNS) can use the names it may reach. The content goes on
 * stdin to a fixed command; no user string reaches a shell. */
/* The longest line: a dotted quad, a tab, a hostname, a newline. */
#define HOSTS_LINE_MAX (sizeof("255.255.255.255\t") - 1 + sizeof(((struct pj_allow_entry *) 0)->host) - 1 + 1)
#define HOSTS_HEADER "# written by Paddock: the names this sandbox's egress allowlist permits\n" \
                     "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"

int ctl_egress_hosts_render(const struct pj_node_resolved *res, size_t n, struct strbuf *out, struct err *err) {
        /* Room for the largest list a policy can produce, so a valid one is never cut. */
        strbuf_init(out, ctl_egress_hosts_max());
        if (n > PJ_EGRESS_MAX_ALLOW)
                return err_set(err, -E2BIG, "%zu resolved names, more than the %d an allowlist may hold", n, PJ_EGRESS_MAX_ALLOW);
        strbuf_append(out, HOSTS_HEADER, sizeof(HOSTS_HEADER) - 1);
        for (size_t i = 0; i < n; i++) {
                struct pj_allow_entry e;
                /* Names come from the agent (the codec checked them); still, only valid ones get in. */
                if (pj_allow_entry_parse(res[i].name, &e, NULL, 0, NULL) < 0 || e.kind != PJ_ALLOW_HOSTNAME)
                        continue;
                for (size_t k = 0; k < res[i].n_addrs && k < PJ_NODE_MAX_ADDRS_PER_NAME; k++) {
                        uint32_t a = res[i].addrs[k];
                        strbuf_printf(out, "%u.%u.%u.%u\t%s\n", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255, e.host);
                }
        }
        /* Cannot happen with the bounds above; a cut file would silently drop names. */
        if (out->truncated) {
                strbuf_done(out);
                return err_set(err, -E2BIG, "/etc/hosts would exceed its %zu bytes", ctl_egress_hosts_max());
        }
        return 0;
}

size_t ctl_egress_hosts_max(void) {
        return sizeof(HOSTS_HEADER) - 1 + (size_t) PJ_EGRESS_MAX_ALLOW * PJ_NODE_MAX_ADDRS_PER_NAME * HOSTS_LINE_MAX;
}

static int write_hosts(struct ctl *c, const struct sandbox *sb, const struct pj_node_resolved *res, size_t n,
                       struct err *err) {
        _cleanup_strbuf_ struct strbuf b = STRBUF_INIT(0);
        int r = ctl_egress_hosts_render(res, n, &b, err);
        if (r < 0)
                return r;
        /* /etc/hosts is a bind mount of the engine's: rewritten in place, never renamed over. The
         * new text lands beside it first and is copied over only when it differs, so a re-apply
         * with the same names (node.sync, a rotated secret) leaves the file alone, and a change
         * truncates it for the time of one local copy, not of the transfer. */
        static const char script[] = "umask 022; cat > /etc/.hosts.paddock && "
                                     "{ [ \"$(cat /etc/.hosts.paddock)\" = \"$(cat /etc/hosts 2>/dev/null)\" ] || "
                                     "cat /etc/.hosts.paddock > /etc/hosts; } && rm -f /etc/.hosts.paddock";
        return run_fed(c, sb, script, b.buf, b.len, "writing /etc/hosts", err);
}

int ctl_egress_apply(struct ctl *c, const struct sandbox *sb, const struct sb_egress *pol, struct err *err) {
        _cleanup_free_ char *body = NULL;
        _cleanup_(pj_node_reply_done) struct pj_node_reply reply = { 0 };
        uint32_t ip;
        int64_t t0 = mono_ms();
        int r;

        if (!pol)
                pol = &sb->egress;
        if (!c->bus)
                return 0;
        if (pol->mode == PJ_EGRESS_DENY_ALL && parse_ip(sb->ip, &ip) < 0)
                return 0;      /* network none: nothing to ask of the agent */
        if (!sb->node_id || !*sb->node_id) {
                r = err_set(err, -ENXIO, "the sandbox has no node");
                goto fail;
        }
        if (parse_ip(sb->ip, &ip) < 0) {
                r = err_set(err, -EINVAL, "the sandbox has no IPv4 address on the sandbox bridge");
                goto fail;
        }
        size_t n_rules = 0;
        body = apply_body(c, sb, pol, ip, &n_rules, err);
        if (!body) {
                r = -EINVAL;
                goto fail;
        }
        r = nodebus_request_ok(c->bus, sb->node_id, body, (long) c->cfg->egress_timeout_ms, &reply, err);
        explicit_bzero(body, strlen(body));
        if (r < 0) {
                if (r == -ENXIO)
                        err_set(err, r, "no egress agent is serving node %s", sb->node_id);
                else if (r == -ETIMEDOUT)
                        err_set(err, r, "the egress agent on node %s did not confirm within %llums", sb->node_id,
                                (unsigned long long) c->cfg->egress_timeout_ms);
                goto fail;
        }
        atomic_fetch_add(&n_apply_ok, 1);
        metrics_observe_phase(c->metrics, "egress_apply", (double) (mono_ms() - t0) / 1000.0);

        applied_record(c, sb->id, sb->node_id, reply.resolved, reply.n_resolved);

        if (n_rules) {
                /* Fail closed: rules with no CA back mean no proxy put them in force. */
                if (!reply.ca_pem) {
                        r = err_set(err, -EPROTO, "the agent on node %s confirmed the policy but not its egress proxy "
                                                  "(an agent without one?)", sb->node_id);
                        goto fail;
                }
                if ((r = install_ca(c, sb, reply.ca_pem, err)) < 0)
                        goto fail;
        }
        if (pol->mode == PJ_EGRESS_RESTRICTED || n_rules) {
                bool has_names = n_rules > 0;
                for (size_t i = 0; i < pol->n_allow; i++)
                        has_names |= pol->allow[i].kind == PJ_ALLOW_HOSTNAME;
                /* The agent lists what it resolved only when there is something (never []). */
                if (has_names && reply.n_resolved == 0) {
                        log_warning("egress applied, but the agent on node %s sent no resolved names: /etc/hosts not written",
                                    sb->node_id);
                } else if (has_names) {
                        struct err herr = { 0 };
                        r = write_hosts(c, sb, reply.resolved, reply.n_resolved, &herr);
                        if (r == -E2BIG) {
                                /* The names would not all be in /etc/hosts: the apply fails, with why. */
                                atomic_fetch_add(&n_hosts_failed, 1);
                                err_set(err, r, "the allowlist's names could not all be written to /etc/hosts: %s", herr.message);
                                goto fail;
                        } else if (r < 0) {
                                atomic_fetch_add(&n_hosts_failed, 1);
                                log_warning("egress applied, but /etc/hosts could not be written: %s", herr.message);
                        } else {
                                atomic_fetch_add(&n_hosts_written, 1);
                                fault_point("egress.hosts_written");   /* crash tests */
                        }
                }
        }
        log_info("egress %s applied on node %s in %lldms", pj_egress_mode_to_string(pol->mode), sb->node_id,
                 (long long) (mono_ms() - t0));
        return 0;
fail:
        atomic_fetch_add(&n_apply_fail, 1);
        log_error("egress apply failed: %s", err->message);
        return r;
}

int ctl_egress_remove(struct ctl *c, const struct sandbox *sb, struct err *err) {
        return ctl_egress_remove_timeout(c, sb, (long) c->cfg->egress_timeout_ms, err);
}

int ctl_egress_remove_timeout(struct ctl *c, const struct sandbox *sb, long timeout_ms, struct err *err) {
        _cleanup_free_ char *body = NULL;
        uint32_t ip;
        int r;

        (void) store_egress_applied_forget(c->store, sb->id);
        /* Anything with an address on the bridge may have rules (deny_all set by PUT included). */
        if (!c->bus || !sb->node_id || parse_ip(sb->ip, &ip) < 0)
                return 0;
        struct pj_node_msg m = { .type = PJ_NODE_EGRESS_REMOVE, .ip = ip };
        snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", sb->id);
        body = pj_node_msg_format(&m);
        r = nodebus_request_ok(c->bus, sb->node_id, body, timeout_ms, NULL, err);
        if (r < 0) {
                atomic_fetch_add(&n_remove_fail, 1);
                log_warning("egress remove on node %s failed: %s (the agent drops a departed sandbox's rules when it converges)",
                            sb->node_id, err->message);
                return r;
        }
        atomic_fetch_add(&n_remove_ok, 1);
        return 0;
}

/* ---- GET /sandboxes/{id}/egress ---- */

cJSON *ctl_egress_to_json(struct ctl *c, const struct sandbox *sb) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "mode", pj_egress_mode_to_string(sb->egress.mode));
        cJSON_AddItemToObject(o, "allow", sb_allow_json(&sb->egress));
        if (sb->egress.rules.n_rules)
                cJSON_AddItemToObject(o, "rules", pj_egress_rules_json(&sb->egress.rules, false));
        json_add_bool(o, "enforced", c->bus != NULL && sb->egress.mode != PJ_EGRESS_DENY_ALL);
        if (sb->node_id)
                json_add_str(o, "node", sb->node_id);
        else
                cJSON_AddNullToObject(o, "node");

        int64_t applied_at = 0;
        _cleanup_free_ struct pj_node_resolved *res = NULL;
        size_t n_res = 0;
        if (store_egress_applied_get(c->store, sb->id, &applied_at, &res, &n_res) < 0)
                applied_at = 0;
        json_add_time(o, "applied_at", applied_at);
        cJSON_AddItemToObject(o, "resolved", pj_node_resolved_to_json(res, n_res));

        /* Counters, from the agent (bounded wait; absent when it cannot say). */
        cJSON *counters = NULL;
        if (c->bus && sb->node_id && sb->egress.mode != PJ_EGRESS_DENY_ALL && sb->status == SB_READY) {
                _cleanup_(pj_node_reply_done) struct pj_node_reply reply = { 0 };
                struct err err = { 0 };
                long t = (long) c->cfg->egress_timeout_ms;
                if (t > 2000)
                        t = 2000;
                if (nodebus_request_ok(c->bus, sb->node_id, "{\"type\":\"egress.stats\"}", t, &reply, &err) == 0) {
                        for (size_t i = 0; i < reply.n_stats && !counters; i++) {
                                const struct pj_node_sbx_stats *x = &reply.stats[i];
                                if (strcmp(x->sandbox_id, sb->id) != 0)
                                        continue;
                                counters = cJSON_CreateObject();
                                json_add_int(counters, "allowed_packets", (int64_t) x->allowed_packets);
                                json_add_int(counters, "allowed_bytes", (int64_t) x->allowed_bytes);
                                json_add_int(counters, "dropped_packets", (int64_t) x->dropped_packets);
                                json_add_int(counters, "dropped_bytes", (int64_t) x->dropped_bytes);
                        }
                } else
                        log_debug("egress.stats from node %s: %s", sb->node_id, err.message);
        }
        if (counters)
                cJSON_AddItemToObject(o, "counters", counters);
        else
                cJSON_AddNullToObject(o, "counters");

        /* The egress proxy's counters per rule host (counts, never a value; bounded wait). */
        cJSON *proxy = NULL;
        if (c->bus && sb->node_id && sb->egress.rules.n_rules && sb->status == SB_READY) {
                _cleanup_(pj_node_reply_done) struct pj_node_reply reply = { 0 };
                struct err err = { 0 };
                struct pj_node_msg m = { .type = PJ_NODE_PROXY_STATS };
                snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", sb->id);
                _cleanup_free_ char *body = pj_node_msg_format(&m);
                long t = (long) c->cfg->egress_timeout_ms;
                if (t > 2000)
                        t = 2000;
                if (nodebus_request_ok(c->bus, sb->node_id, body, t, &reply, &err) == 0 && reply.has_proxy) {
                        proxy = cJSON_CreateObject();
                        cJSON *hosts = cJSON_AddArrayToObject(proxy, "hosts");
                        for (size_t i = 0; i < reply.n_proxy; i++) {
                                cJSON *h = cJSON_CreateObject();
                                json_add_str(h, "host", reply.proxy[i].host);
                                json_add_int(h, "requests", (int64_t) reply.proxy[i].requests);
                                json_add_int(h, "injections", (int64_t) reply.proxy[i].injections);
                                json_add_int(h, "upstream_refused", (int64_t) reply.proxy[i].upstream_refused);
                                cJSON_AddItemToArray(hosts, h);
                        }
                } else
                        log_debug("proxy.stats from node %s: %s", sb->node_id, err.message);
        }
        if (proxy)
                cJSON_AddItemToObject(o, "proxy", proxy);
        else
                cJSON_AddNullToObject(o, "proxy");
        return o;
}

void ctl_egress_metrics_render(struct strbuf *b) {
        strbuf_printf(b, "# HELP paddock_egress_applies_total Egress policy applies confirmed (ok) or not (failed) by node agents.\n"
                         "# TYPE paddock_egress_applies_total counter\n"
                         "paddock_egress_applies_total{result=\"ok\"} %llu\n"
                         "paddock_egress_applies_total{result=\"failed\"} %llu\n",
                      (unsigned long long) atomic_load(&n_apply_ok), (unsigned long long) atomic_load(&n_apply_fail));
        strbuf_printf(b, "# HELP paddock_egress_removes_total Egress policy removals by result.\n"
                         "# TYPE paddock_egress_removes_total counter\n"
                         "paddock_egress_removes_total{result=\"ok\"} %llu\n"
                         "paddock_egress_removes_total{result=\"failed\"} %llu\n",
                      (unsigned long long) atomic_load(&n_remove_ok), (unsigned long long) atomic_load(&n_remove_fail));
        strbuf_printf(b, "# HELP paddock_egress_hosts_writes_total /etc/hosts writes of allowlisted names by result.\n"
                         "# TYPE paddock_egress_hosts_writes_total counter\n"
                         "paddock_egress_hosts_writes_total{result=\"ok\"} %llu\n"
                         "paddock_egress_hosts_writes_total{result=\"failed\"} %llu\n",
                      (unsigned long long) atomic_load(&n_hosts_written), (unsigned long long) atomic_load(&n_hosts_failed));
}

/* ---- node.sync ----
 *
 * An agent that starts asks for its node's desired state: it publishes
 * {"type":"node.sync","node_id":...} with routing key "controld" (app_id = its node id)
 * and reply_to/correlation_id. We consume the queue <exchange>.controld (the controlds of
 * one deployment share it; another deployment on the same broker has its own exchange,
 * hence its own queue), answer the ready sandboxes of that node whose policy needs the
 * agent, then re-apply each of them through the normal path on a job thread.
 */

#define SYNC_CH 1

struct egress_bus {
        pthread_t thread;
        char *exchange;
        char *queue;    /* <exchange>.controld */
};

/* The recorded policy of every ready, networked sandbox on node (NULL: on any node) applied
 * again; counts the outcomes in *done and *failed. */
static void reapply_ready(struct ctl *c, const char *node, size_t *done, size_t *failed) {
        struct sandbox *a = NULL;
        size_t n = 0;
        if (store_sandbox_list_status(c->store, NULL, SB_READY, &a, &n) < 0)
                return;
        for (size_t i = 0; i < n && !c->stopping; i++) {
                if (!a[i].node_id || (node && strcmp(a[i].node_id, node) != 0) || !a[i].ip)
                        continue;
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                struct err err = { 0 };
                SANDBOX_LOCK_GUARD(lock, c, a[i].id);
                /* Afresh under the lock: a pause or PUT may have moved it meanwhile. */
                if (store_sandbox_get(c->store, a[i].id, &sb) < 0 || sb.status != SB_READY || !sb.ip)
                        continue;
                log_ctx_set("SANDBOX_ID", sb.id);
                if (ctl_egress_apply(c, &sb, NULL, &err) < 0)
                        (*failed)++;
                else
                        (*done)++;
                log_ctx_set("SANDBOX_ID", NULL);
        }
        sandbox_array_free(a, n);
}

static void resync_job(struct ctl *c, void *arg) {
        const char *node = arg;
        size_t done = 0, failed = 0;
        reapply_ready(c, node, &done, &failed);
        log_info("node.sync from %s: %zu policies re-applied, %zu failed", node, done, failed);
}

/* At start: every ready sandbox's recorded policy applied again, whatever its node. A crash
 * between an agent's apply and its record (a PUT) leaves the node enforcing what the record
 * does not say, and the node's agent, still connected, sends no node.sync to repair it. */
static void start_resync_job(struct ctl *c, void *arg) {
        (void) arg;
        size_t done = 0, failed = 0;
        reapply_ready(c, NULL, &done, &failed);
        if (done || failed)
                log_info("after the start: %zu recorded policies re-applied, %zu failed (the node agents retry on node.sync)",
                         done, failed);
}

void ctl_egress_resync_all(struct ctl *c) {
        if (c->bus && ctl_spawn_job(c, start_resync_job, NULL) < 0)
                log_error("could not start re-applying the recorded egress policies");
}

/* egress.resolved: the agent of node re-resolved a restricted sandbox's names and now
 * enforces other addresses. arg is "<node> <id> <resolved JSON>". If the sandbox is
 * still ready on that node, the record for GET /egress and the sandbox's /etc/hosts
 * follow; anything else (moved, paused, gone) is ignored: its next apply says more. */
/* An egress.resolved from a node, as the job that applies it gets it: one allocation. */
struct resolved_update {
        char node[129];
        char sandbox_id[25];
        size_t n;
        struct pj_node_resolved res[];
};

static void resolved_job(struct ctl *c, void *arg) {
        const struct resolved_update *u = arg;
        const char *node = u->node, *id = u->sandbox_id;
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        SANDBOX_LOCK_GUARD(lock, c, id);
        if (store_sandbox_get(c->store, id, &sb) < 0 || sb.status != SB_READY || !sb.node_id ||
            strcmp(sb.node_id, node) != 0 || sb.egress.mode != PJ_EGRESS_RESTRICTED)
                return;
        log_ctx_set("SANDBOX_ID", sb.id);
        applied_record(c, sb.id, node, u->res, u->n);
        struct err herr = { 0 };
        if (write_hosts(c, &sb, u->res, u->n, &herr) < 0) {
                atomic_fetch_add(&n_hosts_failed, 1);
                log_warning("allowlisted names resolve differently on node %s, but /etc/hosts could not be rewritten: %s",
                            node, herr.message);
        } else {
                atomic_fetch_add(&n_hosts_written, 1);
                log_info("allowlisted names resolve differently on node %s: /etc/hosts rewritten", node);
        }
}

/* Appends the sandboxes in status st to *a (n entries). 0 or -errno. */
static int list_append_status(struct ctl *c, enum sb_status st, struct sandbox **a, size_t *n) {
        struct sandbox *b = NULL;
        size_t m = 0;
        int r = store_sandbox_list_status(c->store, NULL, st, &b, &m);
        if (r < 0 || m == 0)
                return r;
        *a = xrealloc(*a, (*n + m) * sizeof(**a));
        memcpy(*a + *n, b, m * sizeof(*b));
        *n += m;
        free(b);     /* the entries moved into *a */
        return 0;
}

static char *sync_answer(struct ctl *c, const char *node) {
        struct sandbox *a = NULL;
        size_t n = 0;
        struct pj_node_reply rep = { .ok = true, .has_live = true };
        snprintf(rep.type, sizeof(rep.type), "node.sync");
        snprintf(rep.node_id, sizeof(rep.node_id), "%s", node);
        /* Live: ready, and also starting or resuming once placed here (their policy may be on the
         * node already, before the record says ready): the agent would otherwise remove it. */
        if (store_sandbox_list_status(c->store, NULL, SB_READY, &a, &n) < 0 || list_append_status(c, SB_STARTING, &a, &n) < 0 ||
            list_append_status(c, SB_RESUMING, &a, &n) < 0) {
                rep.ok = false;
                rep.has_live = false;
                snprintf(rep.error, sizeof(rep.error), "controld could not read its store");
        } else {
                rep.live = xnew0(struct pj_node_live, n ? n : 1);
                for (size_t i = 0; i < n && rep.n_live < PJ_NODE_MAX_LIVE; i++) {
                        uint32_t ip;
                        if (!a[i].node_id || strcmp(a[i].node_id, node) != 0 || parse_ip(a[i].ip, &ip) < 0)
                                continue;
                        /* deny_all sandboxes have no address; one switched to deny_all by PUT
                         * keeps its address and its (deny_all) policy. */
                        snprintf(rep.live[rep.n_live].sandbox_id, sizeof(rep.live[0].sandbox_id), "%s", a[i].id);
                        rep.live[rep.n_live++].ip = ip;
                }
        }
        sandbox_array_free(a, n);
        char *body = pj_node_reply_format(&rep);
        pj_node_reply_done(&rep);
        return body;
}

static int sync_session(struct ctl *c, struct egress_bus *b) {
        amqp_connection_state_t conn = NULL;
        struct err err = { 0 };
        int r = nodebus_connect(c->bus, "sync", SYNC_CH, &conn, &err);
        if (r < 0) {
                log_warning("node.sync responder: %s", err.message);
                return r;
        }
        amqp_queue_declare(conn, SYNC_CH, amqp_cstring_bytes(b->queue), 0, 0, 0, 1, amqp_empty_table);
        if ((r = amqpx_rpc_check(amqp_get_rpc_reply(conn), "queue.declare", &err)) < 0)
                goto out;
        amqp_queue_bind(conn, SYNC_CH, amqp_cstring_bytes(b->queue), amqp_cstring_bytes(b->exchange),
                        amqp_cstring_bytes(PJ_NODE_KEY_CONTROLD), amqp_empty_table);
        if ((r = amqpx_rpc_check(amqp_get_rpc_reply(conn), "queue.bind", &err)) < 0)
                goto out;
        amqp_basic_qos(conn, SYNC_CH, 0, 4, 0);
        amqp_basic_consume(conn, SYNC_CH, amqp_cstring_bytes(b->queue), amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
        if ((r = amqpx_rpc_check(amqp_get_rpc_reply(conn), "basic.consume", &err)) < 0)
                goto out;
        log_info("node.sync responder consuming %s (exchange %s, routing key %s)", b->queue, b->exchange, PJ_NODE_KEY_CONTROLD);
        while (!c->stopping) {
                struct amqpx_delivery d;
                _cleanup_free_ char *body = NULL;
                r = amqpx_next_delivery(conn, SYNC_CH, 1000, PJ_NODE_MAX_MESSAGE, &d, &body);
                if (r == 0)
                        continue;
                if (r < 0) {
                        err_set(&err, r, "the connection to the broker broke or stalled");
                        goto out;
                }
                struct pj_node_msg m = { 0 };
                struct err pe = { 0 };
                bool from_node = d.c.has_app_id && body &&
                                 pj_node_msg_parse(body, (size_t) d.c.size, &m, &pe) == 0 &&
                                 strcmp(d.c.app_id, m.node_id) == 0 &&
                                 amqpx_login_is(c->cfg->amqp_node_login, m.node_id, d.c.has_user_id ? d.c.user_id : NULL);
                bool from_agent = from_node && m.type == PJ_NODE_NODE_SYNC && d.c.reply_to[0];
                if (from_node && m.type == PJ_NODE_EGRESS_RESOLVED && m.node_id[0]) {
                        struct resolved_update *u = xmalloc(sizeof(*u) + m.n_resolved * sizeof(u->res[0]));
                        snprintf(u->node, sizeof(u->node), "%s", m.node_id);
                        snprintf(u->sandbox_id, sizeof(u->sandbox_id), "%s", m.sandbox_id);
                        u->n = m.n_resolved;
                        if (m.n_resolved)
                                memcpy(u->res, m.resolved, m.n_resolved * sizeof(u->res[0]));
                        if (ctl_spawn_job(c, resolved_job, u) < 0)
                                log_warning("egress.resolved from node %s: could not start updating the sandbox", m.node_id);
                } else if (!from_agent)
                        log_warning("node.sync responder: dropped a message that is not a node.sync from the node it names");
                else {
                        (void) store_node_touch(c->store, m.node_id, now_ms());  /* agent liveness: admin node list */
                        sandbox_network_note(m.node_id, m.sandbox_network[0] ? m.sandbox_network : NULL);
                        _cleanup_free_ char *answer = sync_answer(c, m.node_id);
                        amqp_basic_properties_t rp = amqpx_json_props(1, "controld", c->cfg->amqp_login);
                        if (d.c.has_corr) {
                                rp._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
                                rp.correlation_id = amqp_cstring_bytes(d.c.correlation_id);
                        }
                        amqp_basic_publish(conn, SYNC_CH, amqp_empty_bytes, amqp_cstring_bytes(d.c.reply_to), 0, 0, &rp,
                                           amqp_cstring_bytes(answer));
                        log_info("node.sync from node %s answered", m.node_id);
                        if (ctl_spawn_job(c, resync_job, xstrdup(m.node_id)) < 0)
                                log_error("node.sync: could not start re-applying the node's policies");
                }
                pj_node_msg_done(&m);
                amqp_basic_ack(conn, SYNC_CH, d.tag, 0);
        }
        r = 0;
out:
        if (r < 0 && err.message[0])
                log_warning("node.sync responder: %s", err.message);
        amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
        amqp_destroy_connection(conn);
        return r;
}

static void *sync_thread(void *ud) {
        struct ctl *c = ud;
        while (!c->stopping) {
                if (sync_session(c, c->egbus) < 0)
                        for (int i = 0; i < 20 && !c->stopping; i++)
                                usleep(100 * 1000);
        }
        return NULL;
}

int ctl_egress_sync_start(struct ctl *c, struct err *err) {
        if (!c->bus || !c->cfg->amqp_url)
                return 0;
        struct egress_bus *b = xnew0(struct egress_bus, 1);
        int r;
        b->exchange = xstrdup(c->cfg->amqp_exchange);
        b->queue = pj_node_queue_controld(b->exchange);
        c->egbus = b;
        r = -pthread_create(&b->thread, NULL, sync_thread, c);
        if (r < 0) {
                err_set(err, r, "pthread_create: %s", strerror(-r));
                free_many(b->exchange, b->queue, b);
                c->egbus = NULL;
        }
        return r;
}

void ctl_egress_sync_stop(struct ctl *c) {
        struct egress_bus *b = c->egbus;
        if (!b)
                return;
        c->stopping = 1;
        pthread_join(b->thread, NULL);
        free_many(b->exchange, b->queue, b);
        c->egbus = NULL;
}
