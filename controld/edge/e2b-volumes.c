/* e2b-volumes.c — E2B's volumes API (spec/openapi.yml /volumes) over Paddock's volumes
 * (core/volume.c, the same records as the Brimble API's /volumes):
 *
 *   GET    /volumes               the caller's volumes: [{volumeID, name}]
 *   POST   /volumes               {name}: 201 {volumeID, name, token}
 *   GET    /volumes/{volumeID}    {volumeID, name, token}
 *   DELETE /volumes/{volumeID}    204 (409 while a sandbox has it mounted)
 *
 * A volume made here is one of the account's volumes of the default region, of 10 GB (or the
 * plan's largest when that is less); a sandbox mounts it with E2B's volumeMounts (one per
 * sandbox here). The token answers E2B's field; the volume-content API it is for is not served
 * (501 saying so): a volume's files are reached through a sandbox that mounts it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "e2b-private.h"
#include "e2b.h"
#include "json.h"
#include "pj_api.h"
#include "pj_e2b.h"
#include "sandbox.h"
#include "strutil.h"

#define VOLUME_GB_DEFAULT 10

static cJSON *volume_json(const struct ctl *c, const struct volume *v, bool with_token) {
        cJSON *o = cJSON_CreateObject();
        json_add_str(o, "volumeID", v->id);
        json_add_str(o, "name", v->name);
        if (with_token) {
                char tok[65];
                e2b_token(c, "volume", v->id, tok);
                json_add_str(o, "token", tok);
                explicit_bzero(tok, sizeof(tok));
        }
        return o;
}

/* The {volumeID} of /volumes/{volumeID}: one segment of 24 lowercase hex, else NULL. */
static const char *id_of(struct req *r) {
        const char *rest = r->m.rest;
        if (!rest || rest[0] != '/' || !e2b_hex24(rest + 1, strlen(rest + 1)))
                return NULL;
        return rest + 1;
}

enum MHD_Result e2b_volumes_list(struct req *r) {
        struct volume *v = NULL;
        size_t n = 0;
        int64_t total = 0;
        if (store_volume_list(r->c->store, r->acc.id, 0, 10000, &v, &n, &total) < 0)
                return respond_error(r, 500, "Failed to list the volumes");
        cJSON *a = cJSON_CreateArray();
        for (size_t i = 0; i < n; i++)
                cJSON_AddItemToArray(a, volume_json(r->c, &v[i], false));
        volume_array_free(v, n);
        return respond_json(r, 200, a);
}

enum MHD_Result e2b_volumes_post(struct req *r) {
        struct err pe = { 0 }, e = { 0 };
        _cleanup_free_ char *name = NULL;
        if (pj_e2b_volume_parse(r->body.buf, r->body.len, &name, &pe) < 0)
                return respond_error(r, 400, "%s", pe.message);
        struct plan pbuf;
        const struct plan *plan = config_account_plan(r->c->cfg, &r->acc, &pbuf);
        struct pj_volume_create in = { .name = name, .region = r->c->cfg->default_region, .type = "sandbox",
                                       .size_gb = plan && plan->max_volume_gb < VOLUME_GB_DEFAULT ? (int) plan->max_volume_gb
                                                                                                : VOLUME_GB_DEFAULT };
        _cleanup_volume_ struct volume v = { 0 };
        int k = volume_create(r->c, &r->acc, &in, &v, &e);
        if (k == -EEXIST)
                return respond_error(r, 409, "%s", e.message);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_json(r, 201, volume_json(r->c, &v, true));
}

enum MHD_Result e2b_volume_get(struct req *r) {
        const char *id = id_of(r);
        _cleanup_volume_ struct volume v = { 0 };
        struct err e = { 0 };
        if (!id || volume_load(r->c, &r->acc, id, &v, &e) < 0)
                return respond_error(r, 404, "volume \"%s\" not found", id ? id : "");
        return respond_json(r, 200, volume_json(r->c, &v, true));
}

enum MHD_Result e2b_volume_delete(struct req *r) {
        const char *id = id_of(r);
        struct err e = { 0 };
        if (!id)
                return respond_error(r, 404, "volume not found");
        int k = volume_delete(r->c, &r->acc, id, &e);
        if (k == -ENOENT)
                return respond_error(r, 404, "volume \"%s\" not found", id);
        if (k == -EBUSY)
                return respond_error(r, 409, "volume \"%s\" is mounted by a sandbox; kill the sandbox first", id);
        if (k < 0)
                return respond_errno(r, k, &e);
        return respond_empty(r, 204);
}

/* /volumecontent/{volumeID}/...: authorised by the volume's token (Authorization: Bearer, as
 * the SDK sends it; no API key), and then not served: a volume's files are reached through a
 * sandbox that mounts it. */
enum MHD_Result e2b_volume_content(struct req *r) {
        const char *p = r->path + strlen("/volumecontent/");
        char id[SANDBOX_ID_LEN + 1] = "";
        if (strlen(p) >= SANDBOX_ID_LEN && e2b_hex24(p, SANDBOX_ID_LEN) && (p[SANDBOX_ID_LEN] == '/' || !p[SANDBOX_ID_LEN]))
                memcpy(id, p, SANDBOX_ID_LEN);
        const char *auth = req_header(r, "Authorization");
        if (!id[0] || !auth || strncmp(auth, "Bearer ", 7) != 0 || !e2b_token_ok(r->c, "volume", id, auth + 7))
                return respond_error(r, 401, "the volume's token (from Volume.create or getInfo) is required");
        return respond_error(r, 501, "Not implemented: a volume's files are read and written through a sandbox that mounts "
                                     "it (Sandbox.create with volumeMounts) on this server");
}
