/* templates.c — the HTTP side of templates users build (our API, not Brimble's):
 *
 *   POST   /templates         {name, dockerfile, files?}: 202, the build starts
 *   GET    /templates         the caller's templates
 *   GET    /templates/{name}  status (building, ready, failed), the build's log, size
 *   DELETE /templates/{name}  stops a build, or removes the image from the registry
 *
 * The build itself is core/usertemplate.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "http.h"
#include "json.h"
#include "templates.h"
#include "usertemplate.h"
#include "render.h"
#include "template.h"

enum MHD_Result templates_post(struct req *r) {
        struct err e = { 0 };
        _cleanup_(user_template_clear) struct user_template t = { 0 };
        int k = utpl_build_start(r->c, &r->acc, r->body.buf, r->body.len, &t, &e);
        if (k == -EEXIST)
                return respond_error(r, 409, "%s", e.message);   /* a name clash is a conflict here */
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_envelope(r, 202, "Template build started", render_user_template(&t));
}

enum MHD_Result templates_list(struct req *r) {
        struct user_template *v = NULL;
        size_t n = 0;
        if (store_utpl_list(r->c->store, r->acc.id, &v, &n) < 0)
                return respond_errno_msg(r, -EIO, "Failed to read the templates");
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++) {
                cJSON_AddItemToArray(a, render_user_template(&v[i]));
                user_template_clear(&v[i]);
        }
        free(v);
        return respond_envelope(r, 200, "Templates fetched", a);
}

/* The {name} of /templates/{name}: one segment, a valid name. */
static const char *name_of(struct req *r) {
        const char *rest = r->m.rest;
        if (!rest || rest[0] != '/' || strchr(rest + 1, '/') || !template_name_ok(rest + 1))
                return NULL;
        return rest + 1;
}

enum MHD_Result templates_get(struct req *r) {
        const char *name = name_of(r);
        _cleanup_(user_template_clear) struct user_template t = { 0 };
        if (!name || store_utpl_get(r->c->store, r->acc.id, name, &t) < 0)
                return respond_errno_msg(r, -ENOENT, "Template not found");
        return respond_envelope(r, 200, "Template fetched", render_user_template(&t));
}

enum MHD_Result templates_delete(struct req *r) {
        const char *name = name_of(r);
        struct err e = { 0 };
        if (!name)
                return respond_errno_msg(r, -ENOENT, "Template not found");
        int k = utpl_delete_named(r->c, r->acc.id, name, &e);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}
