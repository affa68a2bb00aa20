/* volume-content.c — see volume-content.h.
 *
 * The helper of a volume is found again by the volume's record: while it runs, it is the
 * sandbox the volume is attached to, and this file remembers which sandboxes it started
 * (helpers[]), so that only those have their end moved on at each use; a sandbox of the user's
 * that mounts the volume is used as it is and its end never touched. One helper start at a
 * time (helper_lock), so that two first calls for one volume do not both start one. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "log.h"
#include "pj_api.h"
#include "runtime.h"
#include "sandbox.h"
#include "strutil.h"
#include "volume-content.h"

#define HELPER_MOUNT "/volume"
#define HELPERS_MAX 256
#define META_TIMEOUT_S 30

static pthread_mutex_t helper_lock = PTHREAD_MUTEX_INITIALIZER;
static char helpers[HELPERS_MAX][SANDBOX_ID_LEN + 1];   /* ids of the helpers started; "" = free */

static bool is_helper(const char *id) {
        for (size_t i = 0; i < HELPERS_MAX; i++)
                if (!strcmp(helpers[i], id))
                        return true;
        return false;
}

static void remember_helper(const char *id) {
        /* A slot whose helper has ended is reused (the store says which have). */
        for (size_t i = 0; i < HELPERS_MAX; i++)
                if (!helpers[i][0]) {
                        strscpy(helpers[i], id, sizeof(helpers[i]));
                        return;
                }
        /* Full: the oldest slot goes (its helper, if still running, then ends at its own end). */
        memmove(helpers[0], helpers[1], sizeof(helpers[0]) * (HELPERS_MAX - 1));
        strscpy(helpers[HELPERS_MAX - 1], id, sizeof(helpers[0]));
}

static void forget_ended_helpers(struct ctl *c) {
        for (size_t i = 0; i < HELPERS_MAX; i++) {
                if (!helpers[i][0])
                        continue;
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                if (store_sandbox_get(c->store, helpers[i], &sb) < 0 || sb.status == SB_DESTROYED || sb.status == SB_FAILED)
                        helpers[i][0] = 0;
        }
}

void volume_content_done(struct volume_content *vc) {
        sandbox_clear(&vc->sb);
        free(vc->root);
        *vc = (struct volume_content) { 0 };
}

/* The helper of v, started for the volume's account. Called with helper_lock held. */
static int start_helper(struct ctl *c, const struct volume *v, struct sandbox *ret, struct err *err) {
        _cleanup_(account_clear) struct account acc = { 0 };
        if (store_account_get(c->store, v->account_id, &acc) < 0)
                return err_set(err, -ENOENT, "the volume's account is gone");
        const char *tname = c->cfg->e2b_base_template;
        const struct template *t = tname ? config_template(c->cfg, tname) : NULL;
        if (!t)
                return err_set(err, -EOPNOTSUPP, "this server has no template to reach a volume's files with ([e2b] "
                                                 "base_template)");
        struct plan pb;
        const struct plan *plan = config_account_plan(c->cfg, &acc, &pb);
        _cleanup_free_ char *name = xasprintf("volume-%s", v->name);
        struct pj_sandbox_create in = { 0 };
        in.name = name;
        in.template_name = (char *) tname;
        in.volume_id = (char *) v->id;
        in.mount_path = (char *) HELPER_MOUNT;
        in.egress_set = true;
        in.egress.mode = PJ_EGRESS_DENY_ALL;
        in.lifetime_s = VOLUME_HELPER_S;
        if (plan) {
                /* small: it only moves files */
                in.has_cpu = in.has_memory = true;
                int64_t mem = t->memory < 256 ? t->memory : 256;
                in.cpu = (int) (250 < plan->max_cpu ? 250 : plan->max_cpu);
                in.memory = (int) (mem < plan->max_memory ? mem : plan->max_memory);
        }
        struct err e = { 0 };
        int r = sandbox_create(c, &acc, &in, ret, &e);
        if (r < 0)
                return err_set(err, r, "a sandbox to reach the volume's files with could not start: %s", e.message);
        log_info("volume %s: started sandbox %s to reach its files", v->id, ret->id);
        remember_helper(ret->id);
        return 0;
}

int volume_content_open(struct ctl *c, const char *volume_id, struct volume_content *ret, struct err *err) {
        _cleanup_volume_ struct volume v = { 0 };
        *ret = (struct volume_content) { 0 };
        if (store_volume_get(c->store, volume_id, &v) < 0)
                return err_set(err, -ENOENT, "volume \"%s\" not found", volume_id);
        pthread_mutex_lock(&helper_lock);
        int r = 0;
        if (v.attached_sandbox_id && *v.attached_sandbox_id) {
                _cleanup_sandbox_ struct sandbox sb = { 0 };
                if (store_sandbox_get(c->store, v.attached_sandbox_id, &sb) == 0 && sb.status != SB_DESTROYED &&
                    sb.status != SB_FAILED) {
                        if (sb.status != SB_READY) {
                                r = err_set(err, -EBUSY,
                                            "the volume is mounted in sandbox %s, which is %s: its files are reached "
                                            "through it once it runs again (connect) or after it is killed",
                                            sb.id, sb_status_str(sb.status));
                                goto out;
                        }
                        if (is_helper(sb.id)) {
                                _cleanup_(account_clear) struct account acc = { 0 };
                                struct err e = { 0 };
                                if (store_account_get(c->store, sb.account_id, &acc) == 0)
                                        (void) sandbox_set_end(c, &acc, &sb, VOLUME_HELPER_S, true, &e);
                        }
                        ret->root = xstrdup(sb.mount_path && *sb.mount_path ? sb.mount_path : v.mount_path);
                        ret->sb = sb;
                        sb = (struct sandbox) { 0 };
                        goto out;
                }
        }
        forget_ended_helpers(c);
        if ((r = start_helper(c, &v, &ret->sb, err)) < 0)
                goto out;
        ret->root = xstrdup(HELPER_MOUNT);
out:
        pthread_mutex_unlock(&helper_lock);
        if (r < 0)
                volume_content_done(ret);
        return r;
}

char *volume_content_path(const struct volume_content *vc, const char *p, struct err *err) {
        if (!p)
                p = "";
        size_t n = strlen(p);
        if (n > 4096)
                return err_set_field(err, -EINVAL, "path", "path is longer than 4096 bytes"), NULL;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) p[i] < 0x20 || p[i] == 0x7f)
                        return err_set_field(err, -EINVAL, "path", "path has a control character"), NULL;
        /* each component: not "." or ".." (the path stays in the volume) */
        for (const char *s = p; *s;) {
                while (*s == '/')
                        s++;
                size_t k = strcspn(s, "/");
                if ((k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.'))
                        return err_set_field(err, -EINVAL, "path", "path must not have a \".\" or \"..\" component"), NULL;
                s += k;
        }
        while (*p == '/')
                p++;
        n = strlen(p);
        while (n && p[n - 1] == '/')
                n--;
        return n ? xasprintf("%s/%.*s", vc->root, (int) n, p) : xstrdup(vc->root);
}

/* argv run in vc's sandbox, no shell: 0 when it exited 0, else -EIO with its stderr. */
static int run_argv(struct ctl *c, const struct volume_content *vc, const char *const *argv, struct err *err) {
        _cleanup_sandbox_ struct sandbox sb = { 0 };
        _cleanup_(account_clear) struct account acc = { 0 };
        struct err e = { 0 };
        int r;
        if (store_account_get(c->store, vc->sb.account_id, &acc) < 0)
                return err_set(err, -ENOENT, "the volume's account is gone");
        if ((r = runtime_load_ready(c, &acc, vc->sb.id, &sb, &e)) < 0)
                return err_set(err, r, "%s", e.message);
        struct runtime_cmd cmd = { .argv = argv, .timeout_s = META_TIMEOUT_S };
        struct runtime_run *x = NULL;
        if ((r = runtime_start(c, &sb, &cmd, NULL, NULL, &x, &e)) < 0)
                return err_set(err, r, "%s", e.message);
        struct exec_result res = { 0 };
        r = runtime_wait(x, &res, &e);
        if (r < 0)
                err_set(err, r, "%s", e.message);
        else if (res.exit_code != 0) {
                size_t k = res.err_len;
                while (k && (res.err[k - 1] == '\n' || res.err[k - 1] == '\r'))
                        k--;
                r = err_set(err, res.exit_code == 1 && k && strstr(res.err, "No such file") ? -ENOENT : -EINVAL, "%s: %.*s",
                            argv[0], (int) (k > 300 ? 300 : k), res.err ? res.err : "failed");
        }
        runtime_free(x);
        return r;
}

int volume_content_set_owner_mode(struct ctl *c, const struct volume_content *vc, const char *path, int64_t uid,
                                  int64_t gid, int64_t mode, struct err *err) {
        int r;
        if (uid >= 0 || gid >= 0) {
                char owner[48];
                if (uid >= 0 && gid >= 0)
                        snprintf(owner, sizeof(owner), "%lld:%lld", (long long) uid, (long long) gid);
                else if (uid >= 0)
                        snprintf(owner, sizeof(owner), "%lld", (long long) uid);
                else
                        snprintf(owner, sizeof(owner), ":%lld", (long long) gid);
                const char *argv[] = { "chown", "-h", owner, path, NULL };
                if ((r = run_argv(c, vc, argv, err)) < 0)
                        return r;
        }
        if (mode >= 0) {
                char m[16];
                snprintf(m, sizeof(m), "%llo", (unsigned long long) (mode & 07777));
                const char *argv[] = { "chmod", m, path, NULL };
                if ((r = run_argv(c, vc, argv, err)) < 0)
                        return r;
        }
        return 0;
}

/* The helper that has the account's volume id mounted, if any, destroyed: 0, or -errno with
 * the reason in err. */
static int release(struct ctl *c, const struct account *acc, const char *volume_id, struct err *err) {
        _cleanup_volume_ struct volume v = { 0 };
        if (!volume_id || store_volume_get_owned(c->store, acc->id, volume_id, &v) < 0 || !v.attached_sandbox_id ||
            !*v.attached_sandbox_id)
                return 0;
        pthread_mutex_lock(&helper_lock);
        int r = 0;
        if (is_helper(v.attached_sandbox_id)) {
                struct err e = { 0 };
                r = sandbox_destroy(c, v.attached_sandbox_id, "its volume is wanted by another sandbox", &e);
                if (r < 0 && r != -ENOENT)
                        err_set(err, r, "the sandbox that reached the volume's files could not be stopped: %s", e.message);
                else {
                        r = 0;
                        log_info("volume %s: stopped sandbox %s, which reached its files, for the volume's next use", v.id,
                                 v.attached_sandbox_id);
                }
        }
        pthread_mutex_unlock(&helper_lock);
        return r;
}

int volume_content_sandbox_create(struct ctl *c, const struct account *acc, const struct pj_sandbox_create *in,
                                  struct sandbox *ret, struct err *err) {
        int r = release(c, acc, in->volume_id, err);
        return r < 0 ? r : sandbox_create(c, acc, in, ret, err);
}

int volume_content_volume_delete(struct ctl *c, const struct account *acc, const char *id, struct err *err) {
        int r = release(c, acc, id, err);
        return r < 0 ? r : volume_delete(c, acc, id, err);
}
