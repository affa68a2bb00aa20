/* nomad-self.c — node_id = nomad: the agent routes by the Nomad client's node id.
 *
 * controld routes egress and snapshot messages by the allocation's NodeID, so an agent on a
 * Nomad client must consume under exactly that id. It asks the local Nomad agent once at
 * start (GET /v1/agent/self, stats.client.node_id), with the ACL token and TLS files of
 * [nomad]; the token is never logged.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <curl/curl.h>
#include <cjson/cJSON.h>

#include "cleanup.h"
#include "httpc.h"
#include "json.h"
#include "log.h"
#include "nodeagent.h"
#include "strutil.h"

int nomad_self_parse(const char *body, size_t len, char **ret) {
        _cleanup_json_ cJSON *j = NULL;
        struct err perr = { 0 };
        if (json_parse(body, len, 4 << 20, 64, &j, &perr) < 0)
                return -EBADMSG;
        const cJSON *client = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "stats"), "client");
        const char *id = json_get_str(client, "node_id");
        if (!id || !*id)
                return -ENOENT;
        *ret = xstrdup(id);
        return 0;
}

static size_t on_body(char *p, size_t sz, size_t n, void *ud) {
        return strbuf_append(ud, p, sz * n) < 0 ? 0 : sz * n;
}

int nomad_self_node_id(const struct agent_config *cfg, char **ret, struct err *err) {
        _cleanup_free_ char *url = xasprintf("%s/v1/agent/self", cfg->nomad_addr);
        _cleanup_free_ char *hdr = cfg->nomad_token[0] ? xasprintf("X-Nomad-Token: %s", cfg->nomad_token) : NULL;
        struct curl_slist *h = hdr ? curl_slist_append(NULL, hdr) : NULL;
        struct strbuf b;
        long status = 0;
        strbuf_init(&b, 4 << 20);
        CURL *c = curl_easy_init();
        if (!c)
                return err_set(err, -ENOMEM, "libcurl failed to start");
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        httpc_tls_files(c, cfg->nomad_ca_file, cfg->nomad_cert_file, cfg->nomad_key_file);
        CURLcode cc = curl_easy_perform(c);
        if (cc == CURLE_OK)
                curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_cleanup(c);
        curl_slist_free_all(h);
        int r;
        if (cc != CURLE_OK) {
                r = err_set(err, -EHOSTUNREACH, "node_id = nomad: the Nomad agent at %s did not answer: %s", cfg->nomad_addr,
                            curl_easy_strerror(cc));
        } else if (status != 200) {
                size_t k = strcspn(b.buf ? b.buf : "", "\r\n");
                r = err_set(err, status == 403 ? -EACCES : -EREMOTEIO, "node_id = nomad: GET %s/v1/agent/self answered %ld: %.*s%s",
                            cfg->nomad_addr, status, (int) (k > 200 ? 200 : k), b.buf ? b.buf : "",
                            status == 403 ? " (check [nomad] token: it needs agent:read)" : "");
        } else if ((r = nomad_self_parse(b.buf, b.len, ret)) < 0)
                err_set(err, r, "node_id = nomad: the Nomad agent at %s %s", cfg->nomad_addr,
                        r == -ENOENT ? "runs no client (stats.client.node_id is missing): run nodeagent on a Nomad client"
                                     : "sent an answer that is not JSON");
        strbuf_done(&b);
        return r;
}

int nomad_self_resolve_node_id(struct agent_config *cfg, long timeout_ms, struct err *err) {
        if (strcmp(cfg->node_id, "nomad") != 0)
                return 0;
        int64_t deadline = mono_ms() + timeout_ms;
        for (unsigned attempt = 0;; attempt++) {
                char *id = NULL;
                int r = nomad_self_node_id(cfg, &id, err);
                if (r == 0) {
                        bool ok = *id != 0;
                        for (const char *p = id; *p; p++)
                                ok = ok && ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                                            *p == '-' || *p == '_' || *p == '.');
                        if (!ok || strlen(id) > 128) {
                                free(id);
                                return err_set(err, -EINVAL, "node_id = nomad: the Nomad agent reported a node id we cannot route by");
                        }
                        free(cfg->node_id);
                        cfg->node_id = id;
                        log_info("node_id = nomad: this is Nomad node %s", id);
                        return 0;
                }
                /* Refusals do not heal by waiting; an agent that is still starting does. */
                if (r == -EACCES || r == -ENOENT || mono_ms() >= deadline)
                        return r;
                if (attempt == 0)
                        log_notice("%s; retrying for up to %lds", err->message, timeout_ms / 1000);
                usleep(1000 * 1000);
        }
}
