/* driver.c — what every scheduler driver shares: choosing one, freeing it, a placement's
 * strings. The drivers themselves are driver-docker.c and driver-nomad.c. */
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "controld.h"
#include "driver.h"
#include "guest-conn.h"
#include "guest-secret.h"
#include "log.h"
#include "pj_api.h"
#include "strutil.h"

int driver_new(struct ctl *c, struct driver **ret) {
        return !strcmp(c->cfg->driver, "nomad") ? driver_nomad_new(c, ret) : driver_docker_new(c, ret);
}

struct driver *driver_free(struct driver *d) {
        if (!d)
                return NULL;
        if (d->ops && d->ops->done)
                d->ops->done(d);
        free(d);
        return NULL;
}

int exec_output_discard(int stream, const uint8_t *data, size_t len, void *ud) {
        (void) stream, (void) data, (void) len, (void) ud;
        return 0;
}

void placement_clear(struct placement *p) {
        if (!p)
                return;
        free_many(p->container_id, p->node_id, p->job_id, p->alloc_id, p->ip);
        memset(p, 0, sizeof(*p));
}
