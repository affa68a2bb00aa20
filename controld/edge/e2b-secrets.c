/* e2b-secrets.c — E2B's secrets API (spec/openapi.yml /secrets) over Paddock's secrets
 * (core/secret.c, the same records as the Brimble API's /secrets):
 *
 *   GET    /secrets               the caller's secrets (limit, nextToken; X-Next-Token)
 *   POST   /secrets               {name, value, metadata?}: 201
 *   GET    /secrets/{secretID}    one, by its id (sec_<24 hex>) or its name
 *   POST   /secrets/{secretID}    {value, metadata?}: a new version, 200
 *   DELETE /secrets/{secretID}    204
 *
 * As E2B's: names are lower-cased before they are stored, no answer holds a value, and the
 * body that carried one is wiped once parsed. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "e2b-private.h"
#include "json.h"
#include "pj_secret.h"
#include "sandbox.h"
#include "secret.h"
#include "strutil.h"

static cJSON *secret_json(const struct secret *s) {
        cJSON *o = cJSON_CreateObject();
        _cleanup_free_ char *id = xasprintf("sec_%s", s->id);
        json_add_str(o, "secretID", id);
        json_add_str(o, "name", s->name);
        json_add_int(o, "currentVersion", s->version);
        cJSON_AddItemToObject(o, "metadata", sb_map_to_json(&s->metadata));
        json_add_time(o, "createdAt", s->created_at);
        json_add_time(o, "updatedAt", s->updated_at);
        return o;
}

static void lower(char *s) {
        for (; s && *s; s++)
                *s = (char) tolower((unsigned char) *s);
}

/* The {secretID} of /secrets/{secretID}: one segment, an id (kept) or a name (lower-cased into
 * buf); NULL when it is neither. */
static const char *ref_of(struct req *r, char buf[static PJ_SECRET_NAME_MAX + 1]) {
        const char *rest = r->m.rest;
        if (!rest || rest[0] != '/' || strchr(rest + 1, '/') || strlen(rest + 1) > PJ_SECRET_NAME_MAX)
                return NULL;
        strscpy(buf, rest + 1, PJ_SECRET_NAME_MAX + 1);
        if (startswith(buf, "sec_"))
                return buf;
        lower(buf);
        return pj_secret_name_ok(buf) ? buf : NULL;
}

static enum MHD_Result answer(struct req *r, int k, struct err *e, int status, const struct secret *s) {
        if (k == -EEXIST)
                return respond_error(r, 409, "%s", e->message);
        if (k < 0)
                return respond_errno(r, k, e);
        return respond_json(r, status, secret_json(s));
}

enum MHD_Result e2b_secrets_list(struct req *r) {
        const char *lim = req_query(r, "limit"), *tok = req_query(r, "nextToken");
        int64_t limit = 100, offset = 0;
        if (lim && (safe_atoi64(lim, &limit) < 0 || limit < 1 || limit > 100))
                return respond_error(r, 400, "limit must be an integer from 1 to 100");
        if (tok && (safe_atoi64(tok, &offset) < 0 || offset < 0 || offset > 1000000))
                return respond_error(r, 400, "nextToken is not one this server gave");
        struct secret *v = NULL;
        size_t n = 0;
        if (store_secret_list(r->c->store, r->acc.id, &v, &n) < 0)
                return respond_error(r, 500, "Failed to read the secrets");
        cJSON *items = cJSON_CreateArray();
        int64_t added = 0;
        for (size_t i = (size_t) offset; i < n && added < limit; i++, added++)
                cJSON_AddItemToArray(items, secret_json(&v[i]));
        bool more = (size_t) (offset + added) < n;
        secret_array_free(v, n);
        return e2b_respond_page(r, items, more, offset + added);
}

enum MHD_Result e2b_secrets_post(struct req *r) {
        struct err e = { 0 }, pe = { 0 };
        _cleanup_(secret_clear) struct secret s = { 0 };
        _cleanup_(pj_secret_put_done) struct pj_secret_put q = { 0 };
        int k = pj_secret_parse(r->body.buf, r->body.len, true, r->c->cfg->secrets_max_value, &q, &pe);
        req_body_wipe(r);
        if (k == 0)
                lower(q.name);
        k = k < 0 ? err_set(&e, k, "%s", pe.message) : secret_create(r->c, &r->acc, &q, &s, &e);
        return answer(r, k, &e, 201, &s);
}

enum MHD_Result e2b_secret_get(struct req *r) {
        char buf[PJ_SECRET_NAME_MAX + 1];
        const char *ref = ref_of(r, buf);
        _cleanup_(secret_clear) struct secret s = { 0 };
        if (!ref || secret_load(r->c, &r->acc, ref, &s) < 0)
                return respond_error(r, 404, "secret not found");
        return respond_json(r, 200, secret_json(&s));
}

enum MHD_Result e2b_secret_update(struct req *r) {
        char buf[PJ_SECRET_NAME_MAX + 1];
        const char *ref = ref_of(r, buf);
        struct err e = { 0 }, pe = { 0 };
        _cleanup_(secret_clear) struct secret s = { 0 };
        _cleanup_(pj_secret_put_done) struct pj_secret_put q = { 0 };
        int k = pj_secret_parse(r->body.buf, r->body.len, false, r->c->cfg->secrets_max_value, &q, &pe);
        req_body_wipe(r);
        k = k < 0 ? err_set(&e, k, "%s", pe.message)
                  : ref ? secret_put(r->c, &r->acc, ref, &q, &s, &e) : err_set(&e, -ENOENT, "secret not found");
        if (k >= 0)
                (void) sandbox_egress_secret_changed(r->c, &r->acc, s.name);
        return answer(r, k, &e, 200, &s);
}

enum MHD_Result e2b_secret_delete(struct req *r) {
        char buf[PJ_SECRET_NAME_MAX + 1];
        const char *ref = ref_of(r, buf);
        struct err e = { 0 };
        int k = ref ? secret_delete(r->c, &r->acc, ref, &e) : err_set(&e, -ENOENT, "secret not found");
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}
