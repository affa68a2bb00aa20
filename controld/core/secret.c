/* secret.c — see secret.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/rand.h>

#include "cleanup.h"
#include "controld.h"
#include "log.h"
#include "pj_secret.h"
#include "secret.h"
#include "strutil.h"

#define SEAL_NONCE 12
#define SEAL_TAG 16

int secret_key_load(struct ctl *c, struct err *err) {
        const char *path = c->cfg->secrets_key_file;
        c->secrets_on = false;
        if (!path || !*path)
                return 0;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return err_set(err, -errno, "[secrets] key_file %s: %s", path, strerror(errno));
        _cleanup_free_ char *raw = NULL;
        size_t n = 0;
        int r = pj_secret_read(fd, 32, 1024, &raw, &n);
        if (r < 0)
                return err_set(err, r, "[secrets] key_file %s: %s (it must hold 32 to 1024 bytes, e.g. `head -c 32 "
                                       "/dev/urandom | base64`)",
                               path, strerror(-r));
        static const char label[] = "paddock secrets key v1";
        EVP_MD_CTX *h = EVP_MD_CTX_new();
        unsigned len = 0;
        if (!h || EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1 || EVP_DigestUpdate(h, label, sizeof(label)) != 1 ||
            EVP_DigestUpdate(h, raw, n) != 1 || EVP_DigestFinal_ex(h, c->secrets_key, &len) != 1 || len != 32)
                abort();
        EVP_MD_CTX_free(h);
        explicit_bzero(raw, n);
        c->secrets_on = true;
        log_info("secrets: served, sealed under the key in %s", path);
        return 0;
}

/* n bytes from 2n lowercase hex digits (what hex_encode writes), -EBADMSG for anything else. */
static int unhex(const char *s, size_t n, unsigned char *out) {
        for (size_t i = 0; i < 2 * n; i++)
                if (unhexchar(s[i]) < 0 || (s[i] >= 'A' && s[i] <= 'F'))
                        return -EBADMSG;
        for (size_t i = 0; i < n; i++)
                out[i] = (unsigned char) (unhexchar(s[2 * i]) << 4 | unhexchar(s[2 * i + 1]));
        return 0;
}

char *secret_seal(const unsigned char key[32], const char *aad, const char *value, size_t len) {
        unsigned char nonce[SEAL_NONCE], tag[SEAL_TAG];
        if (RAND_bytes(nonce, sizeof(nonce)) != 1)
                abort();   /* no randomness: nothing safe to do */
        _cleanup_free_ unsigned char *ct = xmalloc(len + 1);
        EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
        int l1 = 0, l2 = 0;
        if (!x || EVP_EncryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, nonce) != 1 ||
            EVP_EncryptUpdate(x, NULL, &l1, (const unsigned char *) aad, (int) strlen(aad)) != 1 ||
            EVP_EncryptUpdate(x, ct, &l1, (const unsigned char *) value, (int) len) != 1 ||
            EVP_EncryptFinal_ex(x, ct + l1, &l2) != 1 || EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, SEAL_TAG, tag) != 1)
                abort();
        EVP_CIPHER_CTX_free(x);
        size_t n = (size_t) (l1 + l2);
        char *out = xmalloc(3 + 2 * SEAL_NONCE + 1 + 2 * (n + SEAL_TAG) + 1);
        memcpy(out, "v1:", 3);
        hex_encode(nonce, SEAL_NONCE, out + 3);
        out[3 + 2 * SEAL_NONCE] = ':';
        hex_encode(ct, n, out + 4 + 2 * SEAL_NONCE);
        hex_encode(tag, SEAL_TAG, out + 4 + 2 * SEAL_NONCE + 2 * n);
        return out;
}

int secret_open(const unsigned char key[32], const char *aad, const char *sealed, char **ret, size_t *ret_len) {
        size_t sl = sealed ? strlen(sealed) : 0;
        if (sl < 4 + 2 * SEAL_NONCE + 2 * SEAL_TAG || strncmp(sealed, "v1:", 3) || sealed[3 + 2 * SEAL_NONCE] != ':' ||
            (sl - 4 - 2 * SEAL_NONCE) % 2)
                return -EBADMSG;
        size_t n = (sl - 4 - 2 * SEAL_NONCE) / 2 - SEAL_TAG;
        unsigned char nonce[SEAL_NONCE], tag[SEAL_TAG];
        _cleanup_free_ unsigned char *ct = xmalloc(n + 1);
        if (unhex(sealed + 3, SEAL_NONCE, nonce) < 0 || unhex(sealed + 4 + 2 * SEAL_NONCE, n, ct) < 0 ||
            unhex(sealed + 4 + 2 * SEAL_NONCE + 2 * n, SEAL_TAG, tag) < 0)
                return -EBADMSG;
        char *pt = xmalloc(n + 1);
        EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
        int l1 = 0, l2 = 0;
        bool ok = x && EVP_DecryptInit_ex(x, EVP_aes_256_gcm(), NULL, key, nonce) == 1 &&
                  EVP_DecryptUpdate(x, NULL, &l1, (const unsigned char *) aad, (int) strlen(aad)) == 1 &&
                  EVP_DecryptUpdate(x, (unsigned char *) pt, &l1, ct, (int) n) == 1 &&
                  EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, SEAL_TAG, tag) == 1 &&
                  EVP_DecryptFinal_ex(x, (unsigned char *) pt + l1, &l2) == 1;
        EVP_CIPHER_CTX_free(x);
        if (!ok) {
                explicit_bzero(pt, n + 1);
                free(pt);
                return -EBADMSG;
        }
        pt[n] = 0;
        *ret = pt;
        *ret_len = n;
        return 0;
}

/* What a sealed value is bound to: its account, name and version. */
static char *aad_of(const char *account_id, const char *name, int64_t version) {
        return xasprintf("paddock-secret-v1/%s/%s/%" PRId64, account_id, name, version);
}

static int need_key(struct ctl *c, struct err *err) {
        if (!c->secrets_on)
                return err_set(err, -EOPNOTSUPP, "Secrets need a key on this server ([secrets] key_file); ask its operator");
        return 0;
}

int secret_create(struct ctl *c, const struct account *acc, const struct pj_secret_put *q, struct secret *ret,
                  struct err *err) {
        int r = need_key(c, err);
        if (r < 0)
                return r;
        _cleanup_(secret_clear) struct secret s = { 0 };
        hexid_new(s.id);
        snprintf(s.account_id, sizeof(s.account_id), "%s", acc->id);
        s.name = xstrdup(q->name);
        s.version = 1;
        (void) sb_map_from_text(&s.metadata, q->metadata_json);   /* canonical: checked by proto-json */
        s.created_at = s.updated_at = now_ms();
        _cleanup_free_ char *aad = aad_of(s.account_id, s.name, s.version);
        s.sealed = secret_seal(c->secrets_key, aad, q->value, q->value_len);
        r = store_secret_insert_capped(c->store, &s, c->cfg->secrets_max_per_account);
        if (r == -EEXIST)
                return err_set(err, -EEXIST, "name: you have a secret named '%s'; PUT /secrets/%s to replace its value", s.name,
                               s.name);
        if (r == -EDQUOT)
                return err_set(err, -EDQUOT, "You have %lld secrets, the most this server allows ([secrets] max_per_account); "
                                             "delete one first",
                               (long long) c->cfg->secrets_max_per_account);
        if (r < 0)
                return err_set(err, -EIO, "Failed to record the secret");
        log_info("secret %s created (version 1)", s.name);
        *ret = s;
        s = (struct secret) { 0 };
        return 0;
}

int secret_put(struct ctl *c, const struct account *acc, const char *ref, const struct pj_secret_put *q,
               struct secret *ret, struct err *err) {
        int r = need_key(c, err);
        if (r < 0)
                return r;
        _cleanup_(secret_clear) struct secret s = { 0 };
        if (secret_load(c, acc, ref, &s) < 0)
                return err_set(err, -ENOENT, "Secret not found");
        int64_t was = s.version;
        s.version = was + 1;
        s.updated_at = now_ms();
        if (q->has_metadata)
                (void) sb_map_from_text(&s.metadata, q->metadata_json);
        _cleanup_free_ char *aad = aad_of(s.account_id, s.name, s.version);
        free(s.sealed);
        s.sealed = secret_seal(c->secrets_key, aad, q->value, q->value_len);
        r = store_secret_update(c->store, &s, was);
        if (r == -ESTALE)
                return err_set(err, -ESTALE, "The secret changed meanwhile; PUT again");
        if (r < 0)
                return err_set(err, -EIO, "Failed to record the secret");
        log_info("secret %s replaced (version %" PRId64 ")", s.name, s.version);
        *ret = s;
        s = (struct secret) { 0 };
        return 0;
}

int secret_load(struct ctl *c, const struct account *acc, const char *ref, struct secret *ret) {
        if (ref && !strncmp(ref, "sec_", 4))
                return strlen(ref + 4) == SANDBOX_ID_LEN ? store_secret_get_id(c->store, acc->id, ref + 4, ret) : -ENOENT;
        return pj_secret_name_ok(ref) ? store_secret_get(c->store, acc->id, ref, ret) : -ENOENT;
}

struct names_one {
        const char *name;
        bool hit;
};

static int names_one_cb(const char *name, size_t n, void *ud) {
        struct names_one *w = ud;
        w->hit |= strlen(w->name) == n && !memcmp(w->name, name, n);
        return 0;
}

/* The first live sandbox of the account whose egress rules name the secret, into id; false
 * when none does. */
static bool secret_in_use(struct ctl *c, const char *account_id, const char *name, char id[SANDBOX_ID_LEN + 1]) {
        struct sandbox *v = NULL;
        size_t n = 0;
        bool used = false;
        if (store_sandbox_list_live(c->store, account_id, 100000, &v, &n) < 0)
                return false;
        for (size_t i = 0; i < n && !used; i++) {
                struct names_one w = { name, false };
                const struct pj_egress *e = &v[i].egress.rules;
                for (size_t k = 0; k < e->n_rules && !w.hit; k++)
                        for (size_t h = 0; h < e->rules[k].n_headers && !w.hit; h++)
                                (void) pj_egress_placeholders(e->rules[k].headers[h].value, names_one_cb, &w);
                if (w.hit) {
                        snprintf(id, SANDBOX_ID_LEN + 1, "%s", v[i].id);
                        used = true;
                }
        }
        sandbox_array_free(v, n);
        return used;
}

int secret_delete(struct ctl *c, const struct account *acc, const char *ref, struct err *err) {
        _cleanup_(secret_clear) struct secret s = { 0 };
        if (secret_load(c, acc, ref, &s) < 0)
                return err_set(err, -ENOENT, "Secret not found");
        const char *name = s.name;
        /* A node's proxy would go on putting in the old value: the rules that name it go first. */
        char user[SANDBOX_ID_LEN + 1];
        if (secret_in_use(c, acc->id, name, user))
                return err_set(err, -EBUSY, "The secret '%s' is named by the egress rules of sandbox %s (and maybe others); "
                                            "change their rules or destroy them first", name, user);
        int r = store_secret_delete(c->store, acc->id, name);
        if (r == -ENOENT)
                return err_set(err, -ENOENT, "Secret not found");
        if (r < 0)
                return err_set(err, -EIO, "Failed to delete the secret");
        log_info("secret %s deleted", name);
        return 0;
}

/* ---- egress rules' placeholders ---- */

struct ph_walk {
        struct ctl *c;
        const char *account_id;
        struct strbuf *out;     /* resolve: the value being built; NULL: check only */
        const char *field;
        struct err *err;
};

static int ph_load(struct ph_walk *w, const char *name, size_t n, struct secret *s) {
        char nm[PJ_SECRET_NAME_MAX + 1];
        if (n > PJ_SECRET_NAME_MAX)
                return err_set_field(w->err, -EINVAL, w->field, "%s names no secret of yours", w->field);
        memcpy(nm, name, n);
        nm[n] = 0;
        if (!w->c->secrets_on)
                return err_set_field(w->err, -EOPNOTSUPP, w->field,
                                     "%s uses a secret, and secrets need a key on this server ([secrets] key_file)", w->field);
        int r = store_secret_get(w->c->store, w->account_id, nm, s);
        if (r == -ENOENT)
                return err_set_field(w->err, -EINVAL, w->field, "%s names the secret '%s', which you do not have; "
                                                                "POST /secrets first", w->field, nm);
        if (r < 0)
                return err_set_field(w->err, -EIO, w->field, "%s: the secret '%s' could not be read", w->field, nm);
        return 0;
}

static int ph_check(const char *name, size_t n, void *ud) {
        _cleanup_(secret_clear) struct secret s = { 0 };
        return ph_load(ud, name, n, &s);
}

int secret_rules_check(struct ctl *c, const char *account_id, const struct pj_egress *e, const char *prefix,
                       struct err *err) {
        for (size_t i = 0; i < e->n_rules; i++)
                for (size_t k = 0; k < e->rules[i].n_headers; k++) {
                        char field[512];
                        snprintf(field, sizeof(field), "%s.%s[0].headers.%s", prefix, e->rules[i].host,
                                 e->rules[i].headers[k].name);
                        struct ph_walk w = { c, account_id, NULL, field, err };
                        int r = pj_egress_placeholders(e->rules[i].headers[k].value, ph_check, &w);
                        if (r < 0)
                                return r;
                }
        return 0;
}

char *secret_rules_resolve(struct ctl *c, const char *account_id, const char *value, struct err *err) {
        static const char open_[] = "${secrets.";
        struct strbuf b = STRBUF_INIT(PJ_EGRESS_RESOLVED_VALUE_MAX + 1);
        const char *p = value;
        for (const char *q = strstr(p, open_); q; q = strstr(p, open_)) {
                const char *name = q + sizeof(open_) - 1, *end = strchr(name, '}');
                if (!end)
                        break;
                strbuf_append(&b, p, (size_t) (q - p));
                _cleanup_(secret_clear) struct secret s = { 0 };
                struct ph_walk w = { c, account_id, NULL, "rules", err };
                _cleanup_free_ char *aad = NULL, *plain = NULL;
                size_t plen = 0;
                int r = ph_load(&w, name, (size_t) (end - name), &s);
                if (r >= 0) {
                        aad = aad_of(s.account_id, s.name, s.version);
                        r = secret_open(c->secrets_key, aad, s.sealed, &plain, &plen);
                        if (r < 0)
                                err_set(err, r, "the secret '%s' does not open under this server's key", s.name);
                }
                if (r < 0) {
                        explicit_bzero(b.buf, b.len);
                        strbuf_done(&b);
                        return NULL;
                }
                strbuf_append(&b, plain, plen);
                explicit_bzero(plain, plen);
                p = end + 1;
        }
        strbuf_append(&b, p, strlen(p));
        if (b.truncated || b.len > PJ_EGRESS_RESOLVED_VALUE_MAX) {
                explicit_bzero(b.buf, b.len);
                strbuf_done(&b);
                err_set(err, -E2BIG, "a rule's header value with its secrets put in is longer than %d bytes",
                        PJ_EGRESS_RESOLVED_VALUE_MAX);
                return NULL;
        }
        return b.buf ? b.buf : xstrdup("");
}
