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
#include "strutil.h"

static const char *const type_names[] = {
        [PJ_NODE_PING] = "ping",
        [PJ_NODE_EGRESS_APPLY] = "egress.apply",
        [PJ_NODE_EGRESS_REMOVE] = "egress.remove",
};

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

int pj_node_msg_parse(const char *body, size_t len, struct pj_node_msg *ret, struct pj_error *err) {
        char jerr[256] = "";
        _cleanup_json_ cJSON *o = NULL;
        struct pj_node_msg m = { 0 };
        const char *bad = NULL;

        memset(err, 0, sizeof(*err));
        if (json_parse(body, len, PJ_NODE_MAX_MESSAGE, 8, &o, jerr, sizeof(jerr)) < 0)
                return pj_error_set(err, "", "%s", jerr);
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
        else
                return pj_error_set(err, "type", "type '%.64s' is not a known message type", type);

        static const char *const ping_keys[] = { "type", NULL };
        static const char *const apply_keys[] = { "type", "sandbox_id", "ip", "mode", "allow", NULL };
        static const char *const remove_keys[] = { "type", "sandbox_id", "ip", NULL };
        const char *const *keys = m.type == PJ_NODE_PING ? ping_keys : m.type == PJ_NODE_EGRESS_APPLY ? apply_keys : remove_keys;
        if (!only_keys(o, keys, &bad))
                return pj_error_set(err, bad, "unknown field '%.64s' in %s", bad, type);
        if (m.type == PJ_NODE_PING) {
                *ret = m;
                return 0;
        }

        const char *sid = json_get_str(o, "sandbox_id");
        if (!sid || !hexid_valid(sid))
                return pj_error_set(err, "sandbox_id", "sandbox_id must be 24 lowercase hex characters");
        snprintf(m.sandbox_id, sizeof(m.sandbox_id), "%s", sid);
        const char *ip = json_get_str(o, "ip");
        struct in_addr a;
        if (!ip || inet_pton(AF_INET, ip, &a) != 1)
                return pj_error_set(err, "ip", "ip must be a dotted-quad IPv4 address");
        m.ip = ntohl(a.s_addr);
        if (m.type == PJ_NODE_EGRESS_REMOVE) {
                *ret = m;
                return 0;
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
                        char why[256] = "", field[32];
                        snprintf(field, sizeof(field), "allow[%d]", i++);
                        if (!cJSON_IsString(e)) {
                                pj_egress_done(&m.egress);
                                return pj_error_set(err, field, "%s must be a string", field);
                        }
                        if (pj_egress_add_allow(&m.egress, e->valuestring, why, sizeof(why)) < 0) {
                                pj_egress_done(&m.egress);
                                return pj_error_set(err, field, "%s %s", field, why);
                        }
                }
        }
        *ret = m;
        return 0;
}

char *pj_node_msg_format(const struct pj_node_msg *m) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_str(o, "type", pj_node_type_to_string(m->type));
        if (m->type != PJ_NODE_PING) {
                char ip[INET_ADDRSTRLEN];
                struct in_addr a = { .s_addr = htonl(m->ip) };
                inet_ntop(AF_INET, &a, ip, sizeof(ip));
                json_add_str(o, "sandbox_id", m->sandbox_id);
                json_add_str(o, "ip", ip);
        }
        if (m->type == PJ_NODE_EGRESS_APPLY) {
                json_add_str(o, "mode", pj_egress_mode_to_string(m->egress.mode));
                cJSON *a = cJSON_AddArrayToObject(o, "allow");
                for (size_t i = 0; i < m->egress.n_allow; i++)
                        cJSON_AddItemToArray(a, cJSON_CreateString(m->egress.allow[i]));
        }
        return json_print(o);
}

void pj_node_msg_done(struct pj_node_msg *m) {
        if (!m)
                return;
        pj_egress_done(&m->egress);
        memset(m, 0, sizeof(*m));
}

char *pj_node_reply_format(const struct pj_node_reply *r) {
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        json_add_bool(o, "ok", r->ok);
        json_add_str(o, "type", r->type[0] ? r->type : NULL);
        json_add_str(o, "node_id", r->node_id[0] ? r->node_id : NULL);
        if (!r->ok)
                json_add_str(o, "error", r->error[0] ? r->error : "unspecified error");
        return json_print(o);
}

int pj_node_reply_parse(const char *body, size_t len, struct pj_node_reply *ret, struct pj_error *err) {
        char jerr[256] = "";
        _cleanup_json_ cJSON *o = NULL;
        struct pj_node_reply r = { 0 };
        memset(err, 0, sizeof(*err));
        if (json_parse(body, len, PJ_NODE_MAX_MESSAGE, 8, &o, jerr, sizeof(jerr)) < 0)
                return pj_error_set(err, "", "%s", jerr);
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
        *ret = r;
        return 0;
}
