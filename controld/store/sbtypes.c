/* sbtypes.c — a sandbox's typed data (status and snapshot-status names, egress policy,
 * phase timings) and the text the store keeps for them. Inside controld these are structs
 * and enums; text exists only in the store's columns and, through render.c, on the wire. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "json.h"

void sb_egress_done(struct sb_egress *e) {
        if (!e)
                return;
        free(e->allow);
        pj_egress_rules_done(&e->rules);
        *e = (struct sb_egress) { 0 };
}

int sb_egress_from_pj(struct sb_egress *dst, const struct pj_egress *src) {
        _cleanup_free_ struct pj_allow_entry *a = src->n_allow ? xnew0(struct pj_allow_entry, src->n_allow) : NULL;
        for (size_t i = 0; i < src->n_allow; i++)
                if (pj_allow_entry_parse(src->allow[i], &a[i], NULL, 0, NULL) < 0)
                        return -EINVAL;
        *dst = (struct sb_egress) { .mode = src->mode, .allow = TAKE_PTR(a), .n_allow = src->n_allow };
        pj_egress_rules_copy(&dst->rules, src);
        return 0;
}

void sb_allow_entry_format(const struct pj_allow_entry *e, char buf[PJ_ALLOW_NORM_MAX]) {
        uint32_t a = e->addr;
        switch (e->kind) {
        case PJ_ALLOW_IPV4:
                snprintf(buf, PJ_ALLOW_NORM_MAX, "%u.%u.%u.%u", (a >> 24) & 0xff, (a >> 16) & 0xff, (a >> 8) & 0xff, a & 0xff);
                return;
        case PJ_ALLOW_CIDR:
                snprintf(buf, PJ_ALLOW_NORM_MAX, "%u.%u.%u.%u/%d", (a >> 24) & 0xff, (a >> 16) & 0xff, (a >> 8) & 0xff,
                         a & 0xff, e->prefix);
                return;
        case PJ_ALLOW_HOSTNAME:
                snprintf(buf, PJ_ALLOW_NORM_MAX, "%s", e->host);
                return;
        }
        buf[0] = 0;
}

/* The column egress_allow: the allowlist as a JSON array, or, when the policy has rules,
 * {"allow": [...], "rules": {...}, "rules_open": bool} (older rows hold only the array). */
cJSON *sb_allow_json(const struct sb_egress *e) {
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < e->n_allow; i++) {
                char buf[PJ_ALLOW_NORM_MAX];
                sb_allow_entry_format(&e->allow[i], buf);
                cJSON_AddItemToArray(a, cJSON_CreateString(buf));
        }
        return a;
}

char *sb_egress_allow_to_text(const struct sb_egress *e) {
        _cleanup_json_ cJSON *a = sb_allow_json(e);
        if (e->rules.n_rules == 0)
                return json_print(a);
        _cleanup_json_ cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "allow", TAKE_PTR(a));
        cJSON_AddItemToObject(o, "rules", pj_egress_rules_json(&e->rules, false));
        json_add_bool(o, "rules_open", e->rules.rules_open);
        return json_print(o);
}

void sb_egress_allow_from_text(struct sb_egress *e, const char *text) {
        _cleanup_json_ cJSON *whole = text ? cJSON_Parse(text) : NULL;
        cJSON *a = whole;
        pj_egress_rules_done(&e->rules);
        if (cJSON_IsObject(whole)) {
                a = cJSON_GetObjectItemCaseSensitive(whole, "allow");
                const cJSON *rules = cJSON_GetObjectItemCaseSensitive(whole, "rules");
                if (rules && pj_egress_rules_from_json(rules, false, &e->rules, NULL) < 0)
                        pj_egress_rules_done(&e->rules);
                e->rules.rules_open = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(whole, "rules_open"));
        }
        int n = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
        free(e->allow);
        e->allow = n > 0 ? xnew0(struct pj_allow_entry, (size_t) n) : NULL;
        e->n_allow = 0;
        cJSON *it;
        cJSON_ArrayForEach(it, a)
                if (cJSON_IsString(it) && pj_allow_entry_parse(it->valuestring, &e->allow[e->n_allow], NULL, 0, NULL) >= 0)
                        e->n_allow++;
}

static const char *const phase_names[_SB_PHASE_MAX] = {
        [SB_PHASE_VALIDATE] = "validate_ms", [SB_PHASE_RECORD] = "record_ms", [SB_PHASE_PLACE] = "place_ms",
        [SB_PHASE_TOTAL] = "total_ms",       [SB_PHASE_RESUME] = "resume_ms",   [SB_PHASE_CLAIM] = "claim_ms",
};

const char *sb_phase_name(enum sb_phase p) {
        return (unsigned) p < _SB_PHASE_MAX ? phase_names[p] : "unknown_ms";
}

void sb_timings_set(struct sb_timings *t, enum sb_phase p, int64_t ms) {
        if ((unsigned) p >= _SB_PHASE_MAX)
                return;
        t->ms[p] = ms;
        t->set |= 1u << p;
}

char *sb_timings_to_text(const struct sb_timings *t) {
        if (!t->set)
                return NULL;
        _cleanup_json_ cJSON *o = sb_timings_to_json(t);
        return json_print(o);
}

void sb_timings_from_text(struct sb_timings *t, const char *text) {
        _cleanup_json_ cJSON *o = text ? cJSON_Parse(text) : NULL;
        *t = (struct sb_timings) { 0 };
        for (int p = 0; p < _SB_PHASE_MAX; p++) {
                cJSON *v = cJSON_GetObjectItemCaseSensitive(o, phase_names[p]);
                if (cJSON_IsNumber(v))
                        sb_timings_set(t, (enum sb_phase) p, (int64_t) v->valuedouble);
        }
}

/* ---- status names ---- */

static const char *const status_names[_SB_STATUS_MAX] = {
        [SB_STARTING] = "starting", [SB_READY] = "ready",     [SB_PAUSING] = "pausing",   [SB_PAUSED] = "paused",
        [SB_RESUMING] = "resuming", [SB_FAILED] = "failed",   [SB_DESTROYED] = "destroyed",
};

const char *sb_status_str(enum sb_status s) {
        return s < _SB_STATUS_MAX ? status_names[s] : "unknown";
}

int sb_status_from_str(const char *s) {
        for (int i = 0; s && i < _SB_STATUS_MAX; i++)
                if (!strcmp(status_names[i], s))
                        return i;
        return -EINVAL;
}

bool sb_status_active(enum sb_status s) {
        switch (s) {
        case SB_STARTING:
        case SB_READY:
        case SB_PAUSING:
        case SB_PAUSED:
        case SB_RESUMING:
                return true;
        case SB_FAILED:
        case SB_DESTROYED:
        case _SB_STATUS_MAX:
                return false;
        }
        return false;
}

static const char *const snap_status_names[_SNAP_STATUS_MAX] = {
        [SNAP_CREATING] = "creating", [SNAP_READY] = "ready", [SNAP_FAILED] = "failed",
};

const char *snap_status_str(enum snap_status st) {
        return st < _SNAP_STATUS_MAX ? snap_status_names[st] : "failed";
}

enum snap_status snap_status_from_str(const char *t) {
        for (int i = 0; i < _SNAP_STATUS_MAX; i++)
                if (t && !strcmp(t, snap_status_names[i]))
                        return (enum snap_status) i;
        return SNAP_FAILED;
}

/* ---- phase timings as JSON ---- */

/* {"<phase>_ms": n, ...} for the recorded phases, in phase order. */
cJSON *sb_timings_to_json(const struct sb_timings *t) {
        cJSON *o = cJSON_CreateObject();
        for (int p = 0; p < _SB_PHASE_MAX; p++)
                if (t->set & (1u << p))
                        cJSON_AddNumberToObject(o, sb_phase_name((enum sb_phase) p), (double) t->ms[p]);
        return o;
}

/* With egress rules, the node's proxy answers for the rules' hosts with certificates of the
 * sandbox's own CA, which its system bundle holds (ctl-egress.c installs it): these point the
 * usual TLS stacks at it. The sandbox's and the request's variables win over them. */
static const char *const egress_ca_env[] = {
        "SSL_CERT_FILE=" SB_EGRESS_BUNDLE,
        "REQUESTS_CA_BUNDLE=" SB_EGRESS_BUNDLE,
        "CURL_CA_BUNDLE=" SB_EGRESS_BUNDLE,
        "NODE_EXTRA_CA_CERTS=" SB_EGRESS_CA_FILE,
};

static bool env_has(char *const *env, size_t n, const char *kv) {
        size_t kl = strcspn(kv, "=");
        for (size_t i = 0; i < n; i++)
                if (!strncmp(env[i], kv, kl) && env[i][kl] == '=')
                        return true;
        return false;
}

char **sb_env_layer(const struct sandbox *sb, char *const *req_env) {
        size_t n_req = strv_length(req_env), n = 0;
        char **v = xnew0(char *, sb->env.n + n_req + ELEMENTSOF(egress_ca_env) + 1);
        for (size_t j = 0; sb->egress.rules.n_rules && j < ELEMENTSOF(egress_ca_env); j++) {
                bool mine = false;
                for (size_t i = 0; i < sb->env.n && !mine; i++)
                        mine = !strncmp(egress_ca_env[j], sb->env.v[i].key, strlen(sb->env.v[i].key)) &&
                               egress_ca_env[j][strlen(sb->env.v[i].key)] == '=';
                if (!mine && !env_has(req_env, n_req, egress_ca_env[j]))
                        v[n++] = xstrdup(egress_ca_env[j]);
        }
        for (size_t j = 0; j < sb->env.n; j++) {
                const struct sb_kv *kv = &sb->env.v[j];
                size_t kl = strlen(kv->key);
                bool overridden = false;
                for (size_t i = 0; i < n_req && !overridden; i++)
                        overridden = !strncmp(req_env[i], kv->key, kl) && req_env[i][kl] == '=';
                if (!overridden)
                        v[n++] = xasprintf("%s=%s", kv->key, kv->value);
        }
        for (size_t i = 0; i < n_req; i++)
                v[n++] = xstrdup(req_env[i]);
        v[n] = NULL;
        return v;
}

void sb_map_done(struct sb_map *m) {
        for (size_t i = 0; i < m->n; i++)
                free_many(m->v[i].key, m->v[i].value);
        free(m->v);
        *m = (struct sb_map) { 0 };
}

int sb_map_from_text(struct sb_map *m, const char *text) {
        sb_map_done(m);
        if (!text)
                return 0;
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(text);
        if (!cJSON_IsObject(o))
                return -EINVAL;
        m->v = xnew0(struct sb_kv, (size_t) cJSON_GetArraySize(o) + 1);
        const cJSON *it;
        cJSON_ArrayForEach(it, o) {
                if (!cJSON_IsString(it) || !it->string || sb_map_get(m, it->string))
                        continue;
                m->v[m->n++] = (struct sb_kv) { .key = xstrdup(it->string), .value = xstrdup(it->valuestring) };
        }
        return 0;
}

cJSON *sb_map_to_json(const struct sb_map *m) {
        cJSON *o = cJSON_CreateObject();
        for (size_t i = 0; i < m->n; i++)
                json_add_str(o, m->v[i].key, m->v[i].value);
        return o;
}

char *sb_map_to_text(const struct sb_map *m) {
        if (!m->n)
                return NULL;
        _cleanup_(cJSON_Deletep) cJSON *o = sb_map_to_json(m);
        return json_print(o);
}

const char *sb_map_get(const struct sb_map *m, const char *key) {
        for (size_t i = 0; i < m->n; i++)
                if (!strcmp(m->v[i].key, key))
                        return m->v[i].value;
        return NULL;
}

void sb_e2b_done(struct sb_e2b *e) {
        free(e->template_id);
        *e = (struct sb_e2b) { 0 };
}

int sb_e2b_from_text(struct sb_e2b *e, const char *text) {
        sb_e2b_done(e);
        if (!text)
                return 0;
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_Parse(text);
        if (!cJSON_IsObject(o))
                return -EINVAL;
        const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "templateID"));
        e->set = true;
        e->template_id = t ? xstrdup(t) : NULL;
        e->public = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "public"));
        return 0;
}

char *sb_e2b_to_text(const struct sb_e2b *e) {
        if (!e->set)
                return NULL;
        _cleanup_(cJSON_Deletep) cJSON *o = cJSON_CreateObject();
        json_add_str(o, "templateID", e->template_id);
        json_add_bool(o, "public", e->public);
        return json_print(o);
}
