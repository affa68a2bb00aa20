/* pj_node.c — controld <-> nodeagent message codecs. See pj_node.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cleanup.h"
#include "json.h"
#include "pj_node.h"
#include "pj_snapshot.h"
#include "strutil.h"

_Static_assert(sizeof(((struct pj_node_msg *) 0)->container) == PJ_SNAPSHOT_MAX_CONTAINER + 1,
               "a valid container reference fits");

static const char *const type_names[] = {
        [PJ_NODE_PING] = "ping",
        [PJ_NODE_EGRESS_APPLY] = "egress.apply",
        [PJ_NODE_EGRESS_REMOVE] = "egress.remove",
        [PJ_NODE_EGRESS_STATS] = "egress.stats",
        [PJ_NODE_NODE_SYNC] = "node.sync",
        [PJ_NODE_EGRESS_RESOLVED] = "egress.resolved",
        [PJ_NODE_PROXY_STATS] = "proxy.stats",
};

static bool node_id_valid(const char *s) {
        size_t n = 0;
        for (const char *p = s; *p; p++, n++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                      *p == '_' || *p == '.'))
                        return false;
        return n >= 1 && n <= 128;
}

static int ip_parse(const char *s, uint32_t *ret) {
        struct in_addr a;
        if (!s || inet_pton(AF_INET, s, &a) != 1)
                return -EINVAL;
        *ret = ntohl(a.s_addr);
        return 0;
}

static void ip_format(uint32_t ip, char buf[static INET_ADDRSTRLEN]) {
        struct in_addr a = { .s_addr = htonl(ip) };
        inet_ntop(AF_INET, &a, buf, INET_ADDRSTRLEN);
}

const char *pj_node_type_to_string(enum pj_node_type t) {
        return (size_t) t < ELEMENTSOF(type_names) ? type_names[t] : "unknown";
}

static bool only_keys(const cJSON *o, const char *const *allowed, const char **ret_bad) {
        const cJSON *k;
        cJSON_ArrayForEach(k, o) {
                bool ok = false;
                for (const char *const *a = allowed; *a; a++)
                        if (!strcmp(k->string, *a))
                                ok = true;
                if (!ok) {
                        *ret_bad = k->string;
                        return false;
                }
        }
        return true;
}

static int parse_resolved(const cJSON *o, struct pj_node_resolved **ret, size_t *ret_n, struct err *err);

cJSON *pj_node_resolved_to_json(const struct pj_node_resolved *v, size_t n) {
        char ip[INET_ADDRSTRLEN];
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
                const struct pj_node_resolved *x = &v[i];
                cJSON *e = cJSON_CreateObject();
                json_add_str(e, "name", x->name);
                cJSON *ad = cJSON_AddArrayToObject(e, "addrs");
                for (size_t k = 0; k < x->n_addrs; k++) {
                        ip_format(x->addrs[k], ip);
                        cJSON_AddItemToArray(ad, cJSON_CreateString(ip));
                }
                json_add_int(e, "at", x->at_ms);
                cJSON_AddItemToArray(a, e);
        }
        return a;
}

static void add_resolved(cJSON *o, const struct pj_node_resolved *v, size_t n) {
        cJSON_AddItemToObject(o, "resolved", pj_node_resolved_to_json(v, n));
}

int pj_node_msg_parse(const char *body, size_t len, struct pj_node_msg *ret, struct err *err) {
        struct err jerr = { 0 };
        _cleanup_json_ cJSON *o = NULL;
        struct pj_node_msg m = { 0 };
        const char *bad = NULL;

        memset(err, 0, sizeof(*err));
        if (json_parse(body, len, PJ_NODE_MAX_MESSAGE, 8, &o, &jerr) < 0)
                return pj_error_set(err, "", "%s", jerr.message);
        if (!cJSON_IsObject(o))
                return pj_error_set(err, "", "message must be a JSON object");
        const char *type = json_get_str(o, "type");
        if (!type)
                return pj_error_set(err, "type", "type is required");
        if (!strcmp(type, "ping"))
                m.type = PJ_NODE_PING;
        else if (!strcmp(type, "egress.apply"))
                m.type = PJ_NODE_EGRESS_APPLY;
        else if (!strcmp(type, "egress.remove"))
                m.type = PJ_NODE_EGRESS_REMOVE;
        else if (!strcmp(type, "egress.stats"))
                m.type = PJ_NODE_EGRESS_STATS;
        else if (!strcmp(type, "node.sync"))
                m.type = PJ_NODE_NODE_SYNC;
        else if (!strcmp(type, "egress.resolved"))
                m.type = PJ_NODE_EGRESS_RESOLVED;
        else if (!strcmp(type, "proxy.stats"))
                m.type = PJ_NODE_PROXY_STATS;
        else
                return pj_error_set(err, "type", "type '%.64s' is not a known message type", type);

        static const char *const ping_keys[] = { "type", NULL };
        static const char *const apply_keys[] = { "type", "sandbox_id", "ip", "mode", "allow", "account", "container", "rules", NULL };
        static const char *const remove_keys[] = { "type", "sandbox_id", "ip", NULL };
        static const char *const sync_keys[] = { "type", "node_id", "sandbox_network", NULL };
        static const char *const resolved_keys[] = { "type", "node_id", "sandbox_id", "resolved", NULL };
        static const char *const proxy_keys[] = { "type", "sandbox_id", NULL };
        const char *const *keys = m.type == PJ_NODE_EGRESS_APPLY      ? apply_keys
                                  : m.type == PJ_NODE_EGRESS_REMOVE   ? remove_keys
                                  : m.type == PJ_NODE_NODE_SYNC       ? sync_keys
                                  : m.type == PJ_NODE_EGRESS_RESOLVED ? resolved_keys
                                  : m.type == PJ_NODE_PROXY_STATS     ? proxy_keys
                                                                      : ping_keys;
        if (!only_keys(o, keys, &bad))
                return pj_error_set(err, bad, "unknown field '%.64s' in %s", bad, type);
        if (m.type == PJ_NODE_PING || m.type == PJ_NODE_EGRESS_STATS) {
                *ret = m;
                return 0;
        }
        if (m.type == PJ_NODE_NODE_SYNC || m.type == PJ_NODE_EGRESS_RESOLVED) {
                const char *nid = json_get_str(o, "node_id");
                if (!nid || !node_id_valid(nid))
                        return pj_error_set(err, "node_id", "node_id must be 1..128 letters, digits, '-', '_' or '.'");
                snprintf(m.node_id, sizeof(m.node_id), "%s", nid);
                if (m.type == PJ_NODE_NODE_SYNC) {
                        const cJSON *net = cJSON_GetObjectItemCaseSensitive(o, "sandbox_network");
                        if (net && !cJSON_IsNull(net)) {
                                const char *v = cJSON_GetStringValue(net);
                                size_t n = v ? strlen(v) : 0;
                                bool ok = n >= 1 && n < sizeof(m.sandbox_network);
                                for (size_t i = 0; ok && i < n; i++)
                                        ok = v[i] >= 'a' && v[i] <= 'z';
                                if (!ok)
                                        return pj_error_set(err, "sandbox_network",
                                                            "sandbox_network must be 1..15 lowercase letters");
                                snprintf(m.sandbox_network, sizeof(m.sandbox_network), "%s", v);
                        }
                        *ret = m;
                        return 0;
                }
        }

        const char *sid = json_get_str(o, "sandbox_id");
        if (!sid || !hexid_valid(sid))
                return pj_error_set(err, "sandbox_id", "sandbox_id must be 24 lowercase hex characters");
        snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", sid);
        if (m.type == PJ_NODE_PROXY_STATS) {
                *ret = m;
                return 0;
        }
        if (m.type == PJ_NODE_EGRESS_RESOLVED) {
                int k = parse_resolved(o, &m.resolved, &m.n_resolved, err);
                if (k < 0)
                        return k;
                if (k == 0)
                        return pj_error_set(err, "resolved", "resolved is required");
                *ret = m;
                return 0;
        }
        if (ip_parse(json_get_str(o, "ip"), &m.ip) < 0)
                return pj_error_set(err, "ip", "ip must be a dotted-quad IPv4 address");
        if (m.type == PJ_NODE_EGRESS_REMOVE) {
                *ret = m;
                return 0;
        }

        const cJSON *acc = cJSON_GetObjectItemCaseSensitive(o, "account");
        if (acc && !cJSON_IsNull(acc)) {
                if (!cJSON_IsString(acc) || !hexid_valid(acc->valuestring))
                        return pj_error_set(err, "account", "account must be 24 lowercase hex characters");
                snprintf(m.account_id, sizeof(m.account_id), "%s", acc->valuestring);
        }
        const cJSON *ctr = cJSON_GetObjectItemCaseSensitive(o, "container");
        if (ctr && !cJSON_IsNull(ctr)) {
                if (!cJSON_IsString(ctr) || !pj_snapshot_container_ref_valid(ctr->valuestring, strlen(ctr->valuestring)))
                        return pj_error_set(err, "container", "container must be a 64-hex container id, paddock-<sandbox id> or <task>-<allocation id>");
                snprintf(m.container, sizeof(m.container), "%s", ctr->valuestring);
        }
        const char *mode = json_get_str(o, "mode");
        if (!mode || pj_egress_mode_from_string(mode, &m.egress.mode) < 0)
                return pj_error_set(err, "mode", "mode must be one of open, restricted, deny_all");
        const cJSON *allow = cJSON_GetObjectItemCaseSensitive(o, "allow");
        if (allow && !cJSON_IsNull(allow)) {
                if (!cJSON_IsArray(allow))
                        return pj_error_set(err, "allow", "allow must be an array of strings");
                if (cJSON_GetArraySize(allow) > PJ_EGRESS_MAX_ALLOW)
                        return pj_error_set(err, "allow", "allow must have at most %d entries", PJ_EGRESS_MAX_ALLOW);
                if (cJSON_GetArraySize(allow) > 0 && m.egress.mode != PJ_EGRESS_RESTRICTED)
                        return pj_error_set(err, "allow", "allow is only meaningful with mode restricted");
                int i = 0;
                const cJSON *e;
                cJSON_ArrayForEach(e, allow) {
                        char field[32];
                        struct err why = { 0 };
                        snprintf(field, sizeof(field), "allow[%d]", i++);
                        if (!cJSON_IsString(e)) {
                                pj_egress_done(&m.egress);
                                return pj_error_set(err, field, "%s must be a string", field);
                        }
                        if (pj_egress_add_allow(&m.egress, e->valuestring, &why) < 0) {
                                pj_egress_done(&m.egress);
                                return pj_error_set(err, field, "%s %s", field, why.message);
                        }
                }
        }
        const cJSON *rules = cJSON_GetObjectItemCaseSensitive(o, "rules");
        if (rules && !cJSON_IsNull(rules)) {
                struct err why = { 0 };
                if (m.egress.mode == PJ_EGRESS_DENY_ALL || pj_egress_rules_from_json(rules, true, &m.egress, &why) < 0) {
                        pj_egress_done(&m.egress);
                        return pj_error_set(err, "rules", "rules: %s",
                                            why.message[0] ? why.message : "not with mode deny_all");
                }
        }
        *ret = m;
        return 0;
}

char *pj_node_queue_controld(const char *exchange) {
        return xasprintf("%s.controld", exchange);
}

char *pj_node_queue_agent(const char *exchange, const char *node_id) {
        return xasprintf("%s.nodeagent.%s", exchange, node_id);
}

char *pj_node_msg_format(const struct pj_node_msg *m) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", pj_node_type_to_string(m->type));
        if (m->type == PJ_NODE_NODE_SYNC || m->type == PJ_NODE_EGRESS_RESOLVED)
                json_add_str(o, "node_id", m->node_id);
        if (m->type == PJ_NODE_NODE_SYNC && m->sandbox_network[0])
                json_add_str(o, "sandbox_network", m->sandbox_network);
        if (m->type == PJ_NODE_PROXY_STATS)
                json_add_str(o, "sandbox_id", m->sandbox_id);
        if (m->type == PJ_NODE_EGRESS_RESOLVED) {
                json_add_str(o, "sandbox_id", m->sandbox_id);
                add_resolved(o, m->resolved, m->n_resolved);
        }
        if (m->type == PJ_NODE_EGRESS_APPLY || m->type == PJ_NODE_EGRESS_REMOVE) {
                char ip[INET_ADDRSTRLEN];
                ip_format(m->ip, ip);
                json_add_str(o, "sandbox_id", m->sandbox_id);
                json_add_str(o, "ip", ip);
        }
        if (m->type == PJ_NODE_EGRESS_APPLY) {
                if (m->account_id[0])
                        json_add_str(o, "account", m->account_id);
                if (m->container[0])
                        json_add_str(o, "container", m->container);
                json_add_str(o, "mode", pj_egress_mode_to_string(m->egress.mode));
                cJSON *a = cJSON_AddArrayToObject(o, "allow");
                for (size_t i = 0; i < m->egress.n_allow; i++)
                        cJSON_AddItemToArray(a, cJSON_CreateString(m->egress.allow[i]));
                if (m->egress.n_rules)
                        cJSON_AddItemToObject(o, "rules", pj_egress_rules_json(&m->egress, false));
        }
        return json_print(o);
}

void pj_node_msg_done(struct pj_node_msg *m) {
        if (!m)
                return;
        pj_egress_done(&m->egress);
        free(m->resolved);
        memset(m, 0, sizeof(*m));
}

char *pj_node_reply_format(const struct pj_node_reply *r) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        char ip[INET_ADDRSTRLEN];
        json_add_bool(o, "ok", r->ok);
        json_add_str(o, "type", r->type[0] ? r->type : NULL);
        json_add_str(o, "node_id", r->node_id[0] ? r->node_id : NULL);
        if (!r->ok)
                json_add_str(o, "error", r->error[0] ? r->error : "unspecified error");
        if (r->applied_at_ms > 0)
                json_add_int(o, "applied_at", r->applied_at_ms);
        if (r->n_resolved > 0)
                add_resolved(o, r->resolved, r->n_resolved);
        if (r->ca_pem)
                json_add_str(o, "ca_pem", r->ca_pem);
        if (r->has_proxy) {
                cJSON *a = cJSON_AddArrayToObject(o, "proxy");
                for (size_t i = 0; i < r->n_proxy; i++) {
                        cJSON *e = cJSON_CreateObject();
                        json_add_str(e, "host", r->proxy[i].host);
                        json_add_int(e, "requests", (int64_t) r->proxy[i].requests);
                        json_add_int(e, "injections", (int64_t) r->proxy[i].injections);
                        json_add_int(e, "upstream_refused", (int64_t) r->proxy[i].upstream_refused);
                        cJSON_AddItemToArray(a, e);
                }
        }
        if (r->has_stats) {
                cJSON *a = cJSON_AddArrayToObject(o, "sandboxes");
                for (size_t i = 0; i < r->n_stats; i++) {
                        const struct pj_node_sbx_stats *x = &r->stats[i];
                        cJSON *e = cJSON_CreateObject();
                        json_add_str(e, "sandbox_id", x->sandbox_id);
                        json_add_int(e, "allowed_packets", (int64_t) x->allowed_packets);
                        json_add_int(e, "allowed_bytes", (int64_t) x->allowed_bytes);
                        json_add_int(e, "dropped_packets", (int64_t) x->dropped_packets);
                        json_add_int(e, "dropped_bytes", (int64_t) x->dropped_bytes);
                        cJSON_AddItemToArray(a, e);
                }
        }
        if (r->has_live) {
                cJSON *a = cJSON_AddArrayToObject(o, "live");
                for (size_t i = 0; i < r->n_live; i++) {
                        cJSON *e = cJSON_CreateObject();
                        json_add_str(e, "sandbox_id", r->live[i].sandbox_id);
                        ip_format(r->live[i].ip, ip);
                        json_add_str(e, "ip", ip);
                        cJSON_AddItemToArray(a, e);
                }
        }
        return json_print(o);
}

void pj_node_reply_done(struct pj_node_reply *r) {
        if (!r)
                return;
        free_many(r->resolved, r->stats, r->live, r->ca_pem, r->proxy);
        memset(r, 0, sizeof(*r));
}

static bool get_count(const cJSON *o, const char *k, uint64_t *ret) {
        int64_t v;
        if (!json_get_int(o, k, &v) || v < 0)
                return false;
        *ret = (uint64_t) v;
        return true;
}

/* Parses one entry (field: its path, "live[3]") into the zeroed slot. 0 or -EINVAL. */
typedef int entry_parser(const cJSON *e, const char *field, void *slot, struct err *err);

/* The array member `key` of o, of at most max entries, each of size bytes parsed by parse.
 * 1 when present: *ret is a new array (NULL when empty) of *ret_n entries and *ret_has (optional)
 * true; 0 when absent; -EINVAL. Nothing is touched unless it returns 1. */
static int parse_array(const cJSON *o, const char *key, int max, size_t size, entry_parser *parse, void **ret,
                       size_t *ret_n, bool *ret_has, struct err *err) {
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
        if (!a)
                return 0;
        if (!cJSON_IsArray(a))
                return pj_error_set(err, key, "%s must be an array", key);
        int n = cJSON_GetArraySize(a);
        if (n > max)
                return pj_error_set(err, key, "%s must have at most %d entries", key, max);
        _cleanup_free_ char *v = n ? xcalloc((size_t) n, size) : NULL;
        size_t i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, a) {
                char field[48];
                snprintf(field, sizeof(field), "%s[%zu]", key, i);
                int k = parse(e, field, v + i * size, err);
                if (k < 0)
                        return k;
                i++;
        }
        *ret = TAKE_PTR(v);
        *ret_n = i;
        if (ret_has)
                *ret_has = true;
        return 1;
}

static int entry_sandbox_id(const cJSON *e, const char *field, char ret[static 25], struct err *err) {
        const char *sid = cJSON_IsObject(e) ? json_get_str(e, "sandbox_id") : NULL;
        if (!sid || !hexid_valid(sid))
                return pj_error_set(err, field, "%s.sandbox_id must be 24 lowercase hex characters", field);
        snprintf(ret, 25, "%s", sid);
        return 0;
}

static int resolved_entry(const cJSON *e, const char *field, void *slot, struct err *err) {
        struct pj_node_resolved *x = slot;
        struct pj_allow_entry ae;
        const char *name = cJSON_IsObject(e) ? json_get_str(e, "name") : NULL;
        if (!name || pj_allow_entry_parse(name, &ae, NULL, 0, NULL) < 0 || ae.kind != PJ_ALLOW_HOSTNAME)
                return pj_error_set(err, field, "%s.name must be a hostname", field);
        snprintf(x->name, sizeof(x->name), "%s", ae.host);
        if (!json_get_int(e, "at", &x->at_ms) || x->at_ms < 0)
                return pj_error_set(err, field, "%s.at must be unix milliseconds", field);
        const cJSON *ad = cJSON_GetObjectItemCaseSensitive(e, "addrs");
        if (!cJSON_IsArray(ad) || cJSON_GetArraySize(ad) > PJ_NODE_MAX_ADDRS_PER_NAME)
                return pj_error_set(err, field, "%s.addrs must be an array of at most %d IPv4 addresses", field,
                                    PJ_NODE_MAX_ADDRS_PER_NAME);
        const cJSON *s;
        cJSON_ArrayForEach(s, ad) {
                if (!cJSON_IsString(s) || ip_parse(s->valuestring, &x->addrs[x->n_addrs]) < 0)
                        return pj_error_set(err, field, "%s.addrs must hold dotted-quad IPv4 addresses", field);
                x->n_addrs++;
        }
        return 0;
}

/* "resolved": in egress.resolved messages and in replies. As parse_array(). */
static int parse_resolved(const cJSON *o, struct pj_node_resolved **ret, size_t *ret_n, struct err *err) {
        void *v = NULL;
        int k = parse_array(o, "resolved", PJ_EGRESS_MAX_ALLOW, sizeof(**ret), resolved_entry, &v, ret_n, NULL, err);
        if (k > 0)
                *ret = v;
        return k;
}

static int stats_entry(const cJSON *e, const char *field, void *slot, struct err *err) {
        struct pj_node_sbx_stats *x = slot;
        int k = entry_sandbox_id(e, field, x->sandbox_id, err);
        if (k < 0)
                return k;
        if (!get_count(e, "allowed_packets", &x->allowed_packets) || !get_count(e, "allowed_bytes", &x->allowed_bytes) ||
            !get_count(e, "dropped_packets", &x->dropped_packets) || !get_count(e, "dropped_bytes", &x->dropped_bytes))
                return pj_error_set(err, field, "%s counters must be non-negative integers", field);
        return 0;
}

static int proxy_entry(const cJSON *e, const char *field, void *slot, struct err *err) {
        struct pj_node_proxy_host *x = slot;
        struct pj_allow_entry ae;
        const char *host = cJSON_IsObject(e) ? json_get_str(e, "host") : NULL;
        if (!host || pj_allow_entry_parse(host, &ae, NULL, 0, NULL) < 0 || ae.kind != PJ_ALLOW_HOSTNAME)
                return pj_error_set(err, field, "%s.host must be a hostname", field);
        snprintf(x->host, sizeof(x->host), "%s", ae.host);
        if (!get_count(e, "requests", &x->requests) || !get_count(e, "injections", &x->injections) ||
            !get_count(e, "upstream_refused", &x->upstream_refused))
                return pj_error_set(err, field, "%s counters must be non-negative integers", field);
        return 0;
}

static int live_entry(const cJSON *e, const char *field, void *slot, struct err *err) {
        struct pj_node_live *x = slot;
        int k = entry_sandbox_id(e, field, x->sandbox_id, err);
        if (k < 0)
                return k;
        if (ip_parse(json_get_str(e, "ip"), &x->ip) < 0)
                return pj_error_set(err, field, "%s.ip must be a dotted-quad IPv4 address", field);
        return 0;
}

int pj_node_reply_parse(const char *body, size_t len, struct pj_node_reply *ret, struct err *err) {
        struct err jerr = { 0 };
        _cleanup_json_ cJSON *o = NULL;
        struct pj_node_reply r = { 0 };
        int k;
        memset(err, 0, sizeof(*err));
        /* sandboxes: 4096 entries of 6 values each, plus the envelope */
        if (json_parse_n(body, len, PJ_NODE_MAX_REPLY, 8, 8 * PJ_NODE_MAX_STATS + 64, &o, &jerr) < 0)
                return pj_error_set(err, "", "%s", jerr.message);
        if (!cJSON_IsObject(o))
                return pj_error_set(err, "", "reply must be a JSON object");
        const cJSON *ok = cJSON_GetObjectItemCaseSensitive(o, "ok");
        if (!cJSON_IsBool(ok))
                return pj_error_set(err, "ok", "ok must be true or false");
        r.ok = cJSON_IsTrue(ok);
        const char *s;
        if ((s = json_get_str(o, "type")))
                utf8_copy_trunc(r.type, sizeof(r.type), s);
        if ((s = json_get_str(o, "node_id")))
                utf8_copy_trunc(r.node_id, sizeof(r.node_id), s);
        if ((s = json_get_str(o, "error")))
                utf8_copy_trunc(r.error, sizeof(r.error), s);
        if (!r.ok && !r.error[0])
                snprintf(r.error, sizeof(r.error), "the agent refused without saying why");
        if (cJSON_GetObjectItemCaseSensitive(o, "applied_at") &&
            (!json_get_int(o, "applied_at", &r.applied_at_ms) || r.applied_at_ms < 0))
                return pj_error_set(err, "applied_at", "applied_at must be unix milliseconds");
        const cJSON *ca = cJSON_GetObjectItemCaseSensitive(o, "ca_pem");
        if (ca && !cJSON_IsNull(ca)) {
                if (!cJSON_IsString(ca) || strlen(ca->valuestring) > PJ_NODE_MAX_CA_PEM ||
                    strncmp(ca->valuestring, "-----BEGIN CERTIFICATE-----\n", 28) != 0)
                        return pj_error_set(err, "ca_pem", "ca_pem must be one PEM certificate of at most %d bytes",
                                            PJ_NODE_MAX_CA_PEM);
                r.ca_pem = xstrdup(ca->valuestring);
        }
        void *stats = NULL, *live = NULL;
        k = parse_resolved(o, &r.resolved, &r.n_resolved, err);
        if (k >= 0)
                k = parse_array(o, "sandboxes", PJ_NODE_MAX_STATS, sizeof(*r.stats), stats_entry, &stats, &r.n_stats,
                                &r.has_stats, err);
        if (k >= 0)
                k = parse_array(o, "live", PJ_NODE_MAX_LIVE, sizeof(*r.live), live_entry, &live, &r.n_live, &r.has_live, err);
        void *proxy = NULL;
        if (k >= 0)
                k = parse_array(o, "proxy", PJ_EGRESS_MAX_RULES, sizeof(*r.proxy), proxy_entry, &proxy, &r.n_proxy, &r.has_proxy,
                                err);
        r.proxy = proxy;
        r.stats = stats;
        r.live = live;
        if (k < 0)
                goto fail;
        *ret = r;
        return 0;
fail:
        pj_node_reply_done(&r);
        return k;
}
