/* secrets.c — the HTTP side of secrets (ours, Brimble API; core/secret.c keeps them):
 *
 *   POST   /secrets          {name, value, metadata?}: 201, the secret without its value
 *   GET    /secrets          the caller's secrets (names, versions, metadata; never values)
 *   GET    /secrets/{name}   one of them
 *   PUT    /secrets/{name}   {value, metadata?}: the value replaced, version + 1
 *   DELETE /secrets/{name}   204
 *
 * A value is write-only: no answer holds it, and the request body that carried it is wiped
 * once parsed. Another account's secret is 404, as a missing one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "http.h"
#include "pj_secret.h"
#include "render.h"
#include "sandbox.h"
#include "secret.h"
#include "secrets.h"

/* The {name} of /secrets/{name}: one segment, a valid name. */
static const char *name_of(struct req *r) {
        const char *rest = r->m.rest;
        if (!rest || rest[0] != '/' || strchr(rest + 1, '/') || !pj_secret_name_ok(rest + 1))
                return NULL;
        return rest + 1;
}

enum MHD_Result secrets_post(struct req *r) {
        struct err e = { 0 };
        _cleanup_(secret_clear) struct secret s = { 0 };
        _cleanup_(pj_secret_put_done) struct pj_secret_put q = { 0 };
        struct err pe = { 0 };
        int k = pj_secret_parse(r->body.buf, r->body.len, true, r->c->cfg->secrets_max_value, &q, &pe);
        req_body_wipe(r);
        k = k < 0 ? err_set(&e, k, "%s", pe.message) : secret_create(r->c, &r->acc, &q, &s, &e);
        if (k == -EEXIST)
                return respond_error(r, 409, "%s", e.message);   /* a name clash is a conflict here */
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_envelope(r, 201, "Secret created", render_secret(&s));
}

enum MHD_Result secrets_list(struct req *r) {
        struct secret *v = NULL;
        size_t n = 0;
        if (store_secret_list(r->c->store, r->acc.id, &v, &n) < 0)
                return respond_errno_msg(r, -EIO, "Failed to read the secrets");
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, render_secret(&v[i]));
        secret_array_free(v, n);
        return respond_envelope(r, 200, "Secrets fetched", a);
}

enum MHD_Result secrets_get(struct req *r) {
        const char *name = name_of(r);
        _cleanup_(secret_clear) struct secret s = { 0 };
        if (!name || store_secret_get(r->c->store, r->acc.id, name, &s) < 0)
                return respond_errno_msg(r, -ENOENT, "Secret not found");
        return respond_envelope(r, 200, "Secret fetched", render_secret(&s));
}

enum MHD_Result secrets_put(struct req *r) {
        const char *name = name_of(r);
        struct err e = { 0 };
        _cleanup_(secret_clear) struct secret s = { 0 };
        _cleanup_(pj_secret_put_done) struct pj_secret_put q = { 0 };
        struct err pe = { 0 };
        int k = pj_secret_parse(r->body.buf, r->body.len, false, r->c->cfg->secrets_max_value, &q, &pe);
        req_body_wipe(r);
        k = k < 0 ? err_set(&e, k, "%s", pe.message)
                  : name ? secret_put(r->c, &r->acc, name, &q, &s, &e) : err_set(&e, -ENOENT, "Secret not found");
        if (k < 0)
                return respond_errno(r, k, &e);
        if (sandbox_egress_secret_changed(r->c, &r->acc, s.name) < 0)
                return respond_envelope(r, 200, "Secret replaced; some sandboxes' nodes did not take the new value yet "
                                                "(they use it once their egress is applied again)", render_secret(&s));
        return respond_envelope(r, 200, "Secret replaced", render_secret(&s));
}

enum MHD_Result secrets_delete(struct req *r) {
        const char *name = name_of(r);
        struct err e = { 0 };
        int k = name ? secret_delete(r->c, &r->acc, name, &e) : err_set(&e, -ENOENT, "Secret not found");
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}
