/* pj_secret.c — see pj_secret.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "pj_fields.h"
#include "pj_secret.h"
#include "strutil.h"

bool pj_secret_name_ok(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n < 1 || n > PJ_SECRET_NAME_MAX || !strncmp(s, "sec_", 4))
                return false;
        return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

void pj_secret_put_done(struct pj_secret_put *p) {
        if (p->value)
                explicit_bzero(p->value, p->value_len);
        free_many(p->name, p->value, p->metadata_json);
        *p = (struct pj_secret_put) { 0 };
}

int pj_secret_parse(const char *body, size_t len, bool with_name, size_t max_value, struct pj_secret_put *ret,
                    struct err *err) {
        static const char *const post_fields[] = { "name", "value", "metadata" };
        _cleanup_(pj_json_freep) struct pj_json *o = NULL;
        struct pj_secret_put p = { 0 };
        const struct pj_json *v = NULL;
        int r = pj_parse_body(body, len, false, with_name ? post_fields : post_fields + 1, with_name ? 3 : 2, &o, err);
        if (r < 0)
                return r;
        if (with_name) {
                if ((r = pj_get_str(o, NULL, "name", &v, err)) < 0)
                        return r;
                if (!v)
                        return pj_error_set(err, "name", "name is required");
                if (!pj_secret_name_ok(v->str))
                        return pj_error_set(err, "name", "name must be 1 to %d of A-Z, a-z, 0-9, '_' and '-', not starting "
                                                         "with 'sec_'",
                                            PJ_SECRET_NAME_MAX);
        }
        const struct pj_json *name = v;
        if ((r = pj_get_str(o, NULL, "value", &v, err)) < 0)
                return r;
        if (!v)
                return pj_error_set(err, "value", "value is required");
        if (v->str_len < 1 || v->str_len > max_value)
                return pj_error_set(err, "value", "value must be 1 to %zu bytes (it is %zu)", max_value, v->str_len);
        const struct pj_json *meta = pj_json_member(o, "metadata");
        if (meta && (r = pj_string_map(meta, "metadata", false, PJ_SECRET_META_MAX, PJ_SECRET_META_KEY_MAX,
                                       PJ_SECRET_META_VALUE_MAX, &p.metadata_json, NULL, NULL, NULL, err)) < 0)
                return r;
        p.has_metadata = meta != NULL;
        p.name = name ? xstrdup(name->str) : NULL;
        p.value = xstrndup(v->str, v->str_len);
        p.value_len = v->str_len;
        /* the parse tree held the value too: wipe it before it is freed */
        explicit_bzero(((struct pj_json *) v)->str, v->str_len);
        *ret = p;
        return 0;
}
