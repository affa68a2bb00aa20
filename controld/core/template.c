/* template.c — what creating a sandbox asks of templates, shared by sandbox.c, pool.c and
 * usertemplate.c so none of them calls another for it: the names users may give their own
 * templates, a user's ready template as a struct template, and a template's `start` command
 * ([template "x"] start), run as root through the driver's exec before a sandbox is ready (on
 * create, on resume and when a pool member is made), which must exit 0 within start_timeout. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "controld.h"
#include "driver.h"
#include "log.h"
#include "pj_api.h"
#include "strutil.h"
#include "ctl-metrics.h"
#include "template.h"

/* The last bytes of a start command's output, for the reason a start failed. */
struct start_tail {
        char buf[600];
        size_t len;
};

static int start_output(int stream _unused_, const uint8_t *data, size_t len, void *ud) {
        struct start_tail *t = ud;
        size_t cap = sizeof(t->buf) - 1;
        if (len >= cap) {
                data += len - cap;
                len = cap;
        }
        if (t->len + len > cap) {
                size_t drop = t->len + len - cap;
                memmove(t->buf, t->buf + drop, t->len - drop);
                t->len -= drop;
        }
        memcpy(t->buf + t->len, data, len);
        t->len += len;
        return 0;
}

int template_start(struct ctl *c, const struct sandbox *sb, struct err *err) {
        const struct template *t = config_template(c->cfg, sb->template_name);
        if (!t || !t->start)
                return 0;
        char disk[48], mem[48];
        snprintf(disk, sizeof(disk), "PADDOCK_DISK_GB=%lld", (long long) sb->disk);
        snprintf(mem, sizeof(mem), "PADDOCK_MEMORY_MB=%lld", (long long) sb->memory);
        const char *const argv[] = { t->start, NULL };
        const char *const env[] = { disk, mem, NULL };
        struct exec_spec spec = { .argv = argv, .env = env };
        struct exec_session *x = NULL;
        struct start_tail out = { .len = 0 };
        struct err xerr = { 0 };
        int64_t t0 = mono_ms(), deadline = t0 + t->start_timeout_s * 1000;
        if (c->drv->ops->exec_start(c->drv, sb, &spec, &x, &xerr) < 0)
                return err_set(err, -EIO, "the template's start command %s could not run: %s", t->start, xerr.message);
        int r, code = -1;
        while ((r = c->drv->ops->exec_read(x, 500, -1, start_output, &out)) == 0 && mono_ms() < deadline)
                ;
        if (r == 1 && c->drv->ops->exec_exit_code(x, &code) < 0)
                code = -1;
        c->drv->ops->exec_free(x);
        if (r == 1 && code == 0) {
                metrics_observe_phase(c->metrics, "template_start", (double) (mono_ms() - t0) / 1000.0);
                log_info("template start %s done in %lldms", t->start, (long long) (mono_ms() - t0));
                return 0;
        }
        /* Printable, one line: it goes into the sandbox's failure reason and the journal. */
        out.buf[out.len] = 0;
        for (size_t i = 0; i < out.len; i++)
                if ((unsigned char) out.buf[i] < 0x20 || out.buf[i] == 0x7f)
                        out.buf[i] = ' ';
        char what[64];
        if (r == 0)
                snprintf(what, sizeof(what), "did not finish within %llds", (long long) t->start_timeout_s);
        else if (r < 0)
                snprintf(what, sizeof(what), "failed (%s)", strerror(-r));
        else
                snprintf(what, sizeof(what), "exited with code %d", code);
        err_set(err, -EIO, "the template's start command %s %s: %s", t->start, what, out.len ? out.buf : "(no output)");
        log_error("the template's start command %s %s: %s", t->start, what, out.len ? out.buf : "(no output)");
        return -EIO;
}

bool template_name_ok(const char *s) {
        return pj_template_name_ok(s);
}

int template_user_for(struct ctl *c, const struct account *acc, const char *name, struct template *ret,
                      struct user_template *row) {
        if (!name || !template_name_ok(name) || store_utpl_get(c->store, acc->id, name, row) < 0)
                return -ENOENT;
        if (strcmp(row->status, "ready") || !row->image) {
                user_template_clear(row);
                return -EBUSY;
        }
        *ret = (struct template) { .name = row->name, .image = row->image, .display_name = row->name, .description = (char *) "",
                                   .cpu = 500, .memory = 512, .disk = 1 };
        return 0;
}

int64_t template_size_mb(struct ctl *c, const struct template *t) {
        int64_t bytes = 0;
        if (t->size_mb > 0)
                return t->size_mb;
        if (c->drv->ops->image_size && c->drv->ops->image_size(c->drv, t->image, &bytes) == 0)
                return (bytes + 999999) / 1000000;
        return t->size_mb;
}
