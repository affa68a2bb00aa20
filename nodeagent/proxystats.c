/* proxystats.c — the egress proxy's counters, as the agent reports them: per sandbox for
 * proxy.stats (controld's GET /sandboxes/{id}/egress) and for every sandbox with rules on
 * /metrics. Counts only: the proxy never hands out a value. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "nodeagent.h"
#include "pj_node.h"
#include "strutil.h"

/* The sandboxes whose rules the proxy holds (names.c says so at each apply and remove). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char (*ids)[EGRESS_ID_LEN + 1];
static size_t n_ids;

void proxystats_note(const char *sandbox_id, bool has_rules) {
        pthread_mutex_lock(&lock);
        size_t i;
        for (i = 0; i < n_ids && strcmp(ids[i], sandbox_id) != 0; i++)
                ;
        if (has_rules && i == n_ids) {
                ids = xrealloc(ids, (n_ids + 1) * sizeof(*ids));
                strscpy(ids[n_ids++], sandbox_id, sizeof(ids[0]));
        } else if (!has_rules && i < n_ids)
                memcpy(ids[i], ids[--n_ids], sizeof(ids[0]));
        pthread_mutex_unlock(&lock);
}

size_t proxystats_ids(char (**ret)[EGRESS_ID_LEN + 1]) {
        pthread_mutex_lock(&lock);
        size_t n = n_ids;
        *ret = xcalloc(n ? n : 1, sizeof(**ret));
        if (n)
                memcpy(*ret, ids, n * sizeof(*ids));
        pthread_mutex_unlock(&lock);
        return n;
}

int agent_proxy_stats(const char *sandbox_id, struct pj_node_proxy_host **ret, size_t *ret_n, struct err *err) {
        *ret = NULL;
        *ret_n = 0;
        if (privsep_child_pid(PS_CHILD_PROXY) <= 0)
                return err_set(err, -EOPNOTSUPP, "this node runs no egress proxy ([proxy] enable)");
        struct ps_proxy_id q = { .hdr.type = PS_PROXY_STATS };
        struct ps_result res;
        strscpy(q.sandbox_id, sandbox_id, sizeof(q.sandbox_id));
        int r = privsep_call(PS_CHILD_PROXY, &q, sizeof(q), &res);
        if (r == -ENOENT)
                return 0;       /* no rules here: nothing counted */
        if (r < 0)
                return err_set(err, r, "%s", r == -EPIPE || r == -ENOTCONN ? "the egress proxy is not running on this node" : res.msg);
        /* "<host>,<requests>,<injections>,<refused>;" per rule host */
        struct pj_node_proxy_host *v = xnew0(struct pj_node_proxy_host, PJ_EGRESS_MAX_RULES);
        size_t n = 0;
        for (char *save = NULL, *e = strtok_r(res.msg, ";", &save); e && n < PJ_EGRESS_MAX_RULES; e = strtok_r(NULL, ";", &save)) {
                char host[254];
                unsigned long long a, b, c;
                if (sscanf(e, "%253[^,],%llu,%llu,%llu", host, &a, &b, &c) != 4)
                        continue;
                snprintf(v[n].host, sizeof(v[n].host), "%s", host);
                v[n].requests = a;
                v[n].injections = b;
                v[n].upstream_refused = c;
                n++;
        }
        *ret = v;
        *ret_n = n;
        return 0;
}

