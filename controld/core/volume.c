/* volume.c — persistent volumes: create, load, delete for an account.
 *
 * Like sandbox.c these return a negative errno with a user-facing message in
 * struct err; http.c maps the errno to a status. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "strutil.h"
#include "sandbox.h"

int volume_record(struct ctl *c, const struct plan *plan, const struct volume *v, struct err *err) {
        if (v->size_gb > plan->max_volume_gb)
                return err_set(err, -EDQUOT, "Your plan allows volumes up to %lldGB. Reduce size or upgrade.",
                               (long long) plan->max_volume_gb);
        int r = store_volume_insert_capped(c->store, v, plan->max_volumes);
        if (r == -EDQUOT)
                return err_set(err, -EDQUOT, "Your plan allows up to %lld volumes. Delete an existing one or upgrade.",
                               (long long) plan->max_volumes);
        if (r == -EEXIST)
                return err_set(err, -EEXIST, "A volume named \"%s\" already exists", v->name);
        return r < 0 ? err_set(err, -EIO, "Failed to record the volume") : 0;
}

int volume_create(struct ctl *c, const struct account *acc, const struct pj_volume_create *in, struct volume *ret,
                  struct err *err) {
        _cleanup_volume_ struct volume v = { 0 };
        struct plan plan_buf;
        const struct plan *plan = config_account_plan(c->cfg, acc, &plan_buf);
        struct err derr = { 0 };

        const struct region *g = config_region(c->cfg, in->region);
        if (!g)
                return err_set(err, -EINVAL, "region: unknown region id '%s'. List regions with GET /sandboxes/regions.",
                               in->region);
        if (!plan)
                return err_set(err, -EPERM, "Your account's plan '%s' is not available on this server.", acc->plan);
        if (!g->enabled)
                return err_set(err, -EPERM, "Region %s is not accepting new volumes.", g->name);
        if (!config_plan_allows_region(plan, g))
                return err_set(err, -EPERM, "Your plan does not allow volumes in region %s. Pick another region or upgrade.",
                               g->name);
        hexid_new(v.id);
        snprintf(v.account_id, sizeof(v.account_id), "%s", acc->id);
        v.name = xstrdup(in->name);
        v.type = xstrdup(in->type ? in->type : "web");
        v.region_key = xstrdup(g->key);
        v.team = in->team_id ? xstrdup(in->team_id) : NULL;
        v.handle = xasprintf("paddock-vol-%s", v.id);
        v.size_gb = in->size_gb;
        v.created_at = v.updated_at = now_ms();
        int k = volume_record(c, plan, &v, err);
        if (k < 0)
                return k;
        if (c->drv->ops->volume_create(c->drv, v.handle, v.size_gb, &derr) < 0) {
                (void) store_volume_delete(c->store, v.id);
                return err_set(err, -EHOSTUNREACH, "Volume provisioning failed: %s", derr.message);
        }
        *ret = v;
        v = (struct volume) { 0 };
        return 0;
}

int volume_load(struct ctl *c, const struct account *acc, const char *id, struct volume *ret, struct err *err) {
        if (!hexid_valid(id))
                return err_set(err, -EINVAL, "Invalid volume id");
        return record_load_result(store_volume_get_owned(c->store, acc->id, id, ret), "volume", err);
}

int volume_delete(struct ctl *c, const struct account *acc, const char *id, struct err *err) {
        _cleanup_volume_ struct volume v = { 0 };
        struct err derr = { 0 };
        int k = volume_load(c, acc, id, &v, err);
        if (k < 0)
                return k;
        if (v.attached_sandbox_id)
                return err_set(err, -EBUSY, "Volume is attached; detach it before deleting");
        /* Detach-and-mark in the database first, so no create can attach the volume while its
         * backend volume is being removed. */
        k = store_volume_begin_delete(c->store, id, NULL);
        if (k == -EBUSY)
                return err_set(err, -EBUSY, "Volume is attached; detach it before deleting");
        if (k == -EALREADY)
                return err_set(err, -ESTALE, "Volume is already being deleted");
        if (k == -ENOENT)
                return err_set(err, -ENOENT, "Volume not found");
        if (k < 0)
                return err_set(err, -EIO, "Failed to delete the volume record");
        if (c->drv->ops->volume_remove(c->drv, v.handle, &derr) < 0) {
                (void) store_volume_abort_delete(c->store, id);
                return err_set(err, -EHOSTUNREACH, "Volume deletion failed: %s", derr.message);
        }
        k = store_volume_delete(c->store, id);
        if (k == -EBUSY)
                return err_set(err, -EBUSY, "Volume is attached; detach it before deleting");
        if (k < 0)
                return err_set(err, -EIO, "Failed to delete the volume record");
        return 0;
}
