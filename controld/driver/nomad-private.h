/* nomad-private.h — what the Nomad driver's files share: driver-nomad.c (placement, the
 * calls to Nomad) and nomad-exec.c (exec over the alloc exec WebSocket). */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <curl/curl.h>

#include "controld.h"
#include "driver.h"
#include "strutil.h"

struct ndriver {
        struct config *cfg;
        char *base;              /* address without a trailing slash */
        char *hostport;          /* Host header of the exec upgrade */
        char *token_header;      /* "X-Nomad-Token: ..." or NULL */
};

static inline struct ndriver *N(struct driver *d) { return d->priv; }

struct nresp {
        long status;
        struct strbuf body;
        int64_t index;           /* X-Nomad-Index, 0 when absent */
        char curl_error[CURL_ERROR_SIZE];
};

/* driver-nomad.c */
void nomad_curl_tls(struct ndriver *n, CURL *h);
/* The query string every request carries: namespace and region from the config. */
char *nomad_common_query(struct ndriver *n);
char *nomad_esc(const char *s);
/* err = what failed and Nomad's answer (its first line), the ACL token named on 403. */
void nomad_error(const struct nresp *r, const char *what, struct err *err);
void nomad_ctx_ids(const char *job, const char *alloc);
/* A request whose answer must be 2xx; the JSON body (if any) in *ret_json. */
int nomad_json(struct ndriver *n, const char *method, const char *path, const char *query, const cJSON *body,
               const char *what, cJSON **ret_json, int64_t *ret_index, struct err *err);

/* nomad-relay.c: driver_ops.agent_dial (see there). */
int nomad_agent_dial(struct driver *d, const struct sandbox *sb, int64_t deadline, struct err *err);

/* nomad-exec.c: the driver_ops exec calls. */
int nomad_exec_start(struct driver *d, const struct sandbox *sb, const struct exec_spec *spec, struct exec_session **ret,
                     struct err *err);
int nomad_exec_read(struct exec_session *s, int timeout_ms, int watch_fd, exec_output_cb cb, void *ud);
int nomad_exec_write(struct exec_session *s, const void *data, size_t len, int timeout_ms, exec_output_cb cb, void *ud);
int nomad_exec_close_stdin(struct exec_session *s);
int nomad_exec_exit_code(struct exec_session *s, int *ret);
int nomad_exec_oom_killed(struct exec_session *s);
void nomad_exec_free(struct exec_session *s);
