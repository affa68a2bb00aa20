/* registry.h — the few Docker Registry HTTP API v2 calls snapshots need, and the
 * X-Registry-Auth value Docker wants for a push or pull.
 *
 * A registry is named "host[:port]" and spoken to over plain HTTP (loopback and
 * private registries; TLS registries are reached as https:// when the name starts
 * with it). Credentials (optional) go as HTTP Basic auth; bearer-token registries
 * are not supported. Library-like: debug logging only, -errno returns:
 *   -ENOENT  no such manifest, -EACCES refused credentials, -EOPNOTSUPP deletes are
 *   disabled on the registry (405), -EIO any other status, transport errors as httpc.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct registry {
        const char *host;       /* "127.0.0.1:5000" or "https://reg.example.com" */
        const char *username;   /* NULL = anonymous */
        const char *password;
};

/* base64url of {"username","password","serveraddress"} (xmalloc'd); "e30=" ({})
 * when there are no credentials. */
char *registry_auth_header_value(const struct registry *r);

/* The manifest digest ("sha256:<hex>", xmalloc'd) of repo:tag as the registry serves it
 * (schema 2), or -ENOENT when the registry has no such manifest. ret_size (optional):
 * the bytes the registry stores for it (config + layers, compressed). */
int registry_manifest_digest(const struct registry *r, const char *repo, const char *tag, char **ret_digest,
                             int64_t *ret_size);

/* Whether the registry holds blob digest in repo: 1 yes, 0 no, < 0 errors. */
int registry_blob_exists(const struct registry *r, const char *repo, const char *digest);
/* Uploads len bytes at data as blob digest ("sha256:<hex>", which the registry checks) of
 * repo: one POST for an upload session, one PUT with the whole body. */
int registry_blob_upload(const struct registry *r, const char *repo, const char *digest, const void *data, size_t len,
                         long timeout_ms);
/* Puts a manifest (body as it is, media_type its Content-Type) as repo:tag. */
int registry_manifest_put(const struct registry *r, const char *repo, const char *tag, const char *media_type,
                          const void *body, size_t len);

/* The image config (the JSON blob a schema-2 manifest names) of repo:ref, ref a tag or a
 * digest; checked against the digest the manifest gives. *ret is a new tree.
 * -EBADMSG: no schema-2 manifest or a config that does not match or parse. */
struct cJSON;
int registry_image_config(const struct registry *r, const char *repo, const char *ref, struct cJSON **ret);

/* Deletes the manifest repo@digest. Already gone (404) counts as success. */
int registry_manifest_delete(const struct registry *r, const char *repo, const char *digest);

/* A process that holds no registry credentials (controld's network-facing parent): with
 * registry_set_remote() the calls above go through rem instead, which speaks to its own
 * registry with its own credentials (r is then not looked at). NULL (the default) = here. */
struct registry_remote {
        int (*manifest_digest)(const char *repo, const char *tag, char **ret_digest, int64_t *ret_size);
        int (*blob_exists)(const char *repo, const char *digest);
        int (*blob_upload)(const char *repo, const char *digest, const void *data, size_t len, long timeout_ms);
        int (*manifest_put)(const char *repo, const char *tag, const char *media_type, const void *body, size_t len);
        int (*image_config)(const char *repo, const char *ref, struct cJSON **ret);
        int (*manifest_delete)(const char *repo, const char *digest);
};
void registry_set_remote(const struct registry_remote *rem);
