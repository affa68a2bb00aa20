/* proxy-sandbox.c — the proxy's sandbox table: per-sandbox CA and leaf certificates,
 * rules and counters, and the proxy_sandbox_* calls of proxy.h. */
#include "proxy-private.h"

/* ---- sandbox records ---- */

static void rules_free(struct rule *r, size_t n) {
        for (size_t i = 0; i < n; i++) {
                for (size_t j = 0; j < r[i].n; j++) {
                        free(r[i].names[j]);
                        OPENSSL_cleanse(r[i].values[j], strlen(r[i].values[j]));
                        free(r[i].values[j]);
                }
                free_many(r[i].host, r[i].names, r[i].values);
        }
        free(r);
}

static void leaf_done(struct leaf *l) {
        free(l->host);
        X509_free(l->cert);
        EVP_PKEY_free(l->key);
}

/* What drop forgets at once; the record itself lives on while connections hold it. */
static void sandbox_forget(struct sandbox *sb) {
        rules_free(sb->rules, sb->n_rules);
        sb->rules = NULL;
        sb->n_rules = 0;
        for (size_t i = 0; i < sb->n_leaves; i++)
                leaf_done(&sb->leaves[i]);
        free(sb->leaves);
        sb->leaves = NULL;
        sb->n_leaves = 0;
        EVP_PKEY_free(sb->ca_key);
        X509_free(sb->ca);
        sb->ca_key = NULL;
        sb->ca = NULL;
}

/* Under the lock. */
void sandbox_unref(struct sandbox *sb) {
        if (!sb || --sb->refs > 0)
                return;
        sandbox_forget(sb);
        free_many(sb->id, sb->stats, sb);
}

static struct sandbox *sandbox_by_id(struct proxy *p, const char *id) {
        for (struct sandbox *sb = p->sandboxes; sb; sb = sb->next)
                if (streq(sb->id, id))
                        return sb;
        return NULL;
}

struct sandbox *sandbox_by_ip(struct proxy *p, uint32_t ip) {
        for (struct sandbox *sb = p->sandboxes; sb; sb = sb->next)
                if (sb->ip == ip)
                        return sb;
        return NULL;
}

const struct rule *sandbox_rule(const struct sandbox *sb, const char *host) {
        for (size_t i = 0; i < sb->n_rules; i++)
                if (strcasecmp(sb->rules[i].host, host) == 0)
                        return &sb->rules[i];
        return NULL;
}

struct proxy_host_stats *sandbox_stats(struct sandbox *sb, const char *host) {
        for (size_t i = 0; i < sb->n_stats; i++)
                if (strcasecmp(sb->stats[i].host, host) == 0)
                        return &sb->stats[i];
        return NULL;
}

/* ---- certificates ---- */

static int add_ext(X509 *x, X509V3_CTX *ctx, int nid, const char *value) {
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, ctx, nid, value);
        if (!e)
                return -EPROTO;
        int r = X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
        return r == 1 ? 0 : -EPROTO;
}

struct ext_spec {
        int nid;
        const char *value;
};

/* A certificate for key named cn, valid from an hour ago for days, with a random serial, signed
 * by issuer (NULL: self-signed) and its key, with exts (nid, value pairs ending with 0). */
static X509 *cert_make(EVP_PKEY *key, const char *cn, long days, X509 *issuer, EVP_PKEY *issuer_key,
                       const struct ext_spec *exts) {
        X509 *x = X509_new();
        if (!x)
                return NULL;
        uint8_t serial[16];
        random_fill(serial, sizeof(serial));
        serial[0] = (serial[0] & 0x7f) | 0x01;  /* positive, full length */
        BIGNUM *bn = BN_bin2bn(serial, sizeof(serial), NULL);
        X509_NAME *name = X509_get_subject_name(x);
        bool ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) &&
                  X509_set_version(x, 2) &&
                  X509_gmtime_adj(X509_getm_notBefore(x), -3600) &&
                  X509_gmtime_adj(X509_getm_notAfter(x), days * 86400) &&
                  X509_set_pubkey(x, key) &&
                  (strlen(cn) > 64 ||   /* too long for a CN: the SAN names it */
                   X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, (const unsigned char *) cn, -1, -1, 0)) &&
                  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
        BN_free(bn);
        X509V3_CTX ctx;
        X509V3_set_ctx(&ctx, issuer ? issuer : x, x, NULL, NULL, 0);
        for (size_t i = 0; ok && exts[i].nid; i++)
                ok = add_ext(x, &ctx, exts[i].nid, exts[i].value) == 0;
        if (!ok || X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()) <= 0) {
                X509_free(x);
                return NULL;
        }
        return x;
}

static int ca_make(const char *sandbox_id, EVP_PKEY **ret_key, X509 **ret_cert) {
        EVP_PKEY *key = EVP_EC_gen("P-256");
        if (!key)
                return -EPROTO;
        char cn[128];
        snprintf(cn, sizeof(cn), "Paddock egress CA %s", sandbox_id);
        X509 *x = cert_make(key, cn, 3650, NULL, NULL, (const struct ext_spec[]) {
                { NID_basic_constraints, "critical,CA:TRUE" },
                { NID_key_usage, "critical,keyCertSign,cRLSign" },
                { NID_subject_key_identifier, "hash" },
                { 0, NULL } });
        if (!x) {
                EVP_PKEY_free(key);
                return -EPROTO;
        }
        *ret_key = key;
        *ret_cert = x;
        return 0;
}

static int leaf_make(struct sandbox *sb, const char *host, struct leaf *ret) {
        EVP_PKEY *key = EVP_EC_gen("P-256");
        if (!key)
                return -EPROTO;
        _cleanup_free_ char *san = xasprintf("DNS:%s", host);
        X509 *x = cert_make(key, host, 7, sb->ca, sb->ca_key, (const struct ext_spec[]) {
                { NID_basic_constraints, "critical,CA:FALSE" },
                { NID_key_usage, "critical,digitalSignature" },
                { NID_ext_key_usage, "serverAuth" },
                { NID_subject_key_identifier, "hash" },
                { NID_authority_key_identifier, "keyid:always" },
                { NID_subject_alt_name, san },
                { 0, NULL } });
        if (!x) {
                EVP_PKEY_free(key);
                return -EPROTO;
        }
        *ret = (struct leaf) { .host = xstrdup(host), .cert = x, .key = key, .made_s = now_ms() / 1000 };
        return 0;
}

/* The leaf of host (a rule host), made or remade when needed. Under the lock. */
struct leaf *sandbox_leaf(struct sandbox *sb, const char *host) {
        int64_t now = now_ms() / 1000;
        struct leaf *l = NULL;
        for (size_t i = 0; i < sb->n_leaves; i++)
                if (streq(sb->leaves[i].host, host))
                        l = &sb->leaves[i];
        if (l && now - l->made_s < LEAF_REISSUE_S && now >= l->made_s)
                return l;
        struct leaf fresh;
        if (leaf_make(sb, host, &fresh) < 0) {
                ERR_clear_error();
                return NULL;
        }
        if (l) {
                leaf_done(l);
        } else {
                sb->leaves = xrealloc(sb->leaves, (sb->n_leaves + 1) * sizeof(*sb->leaves));
                l = &sb->leaves[sb->n_leaves++];
        }
        *l = fresh;
        return l;
}

/* ---- validation ---- */


bool host_valid(const char *s) {
        size_t n = strlen(s), label = 0;
        if (n == 0 || n > HOST_MAX_LEN)
                return false;
        for (const char *c = s; *c; c++) {
                if (*c == '.') {
                        if (label == 0)
                                return false;
                        label = 0;
                } else if (ascii_alnum(*c) || *c == '-' || *c == '_') {
                        if (++label > 63)
                                return false;
                } else
                        return false;
        }
        return label > 0;
}

static bool sandbox_id_valid(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > SANDBOX_ID_MAX)
                return false;
        for (; *s; s++)
                if (!ascii_alnum(*s) && !strchr("._-", *s))
                        return false;
        return true;
}

static int rules_check(const struct proxy_rule *rules, size_t n, struct err *err) {
        char f[128];
        if (n > RULES_MAX)
                return err_set_field(err, -EINVAL, "rules", "At most %d rules per sandbox, not %zu.", RULES_MAX, n);
        if (n && !rules)
                return err_set_field(err, -EINVAL, "rules", "The rules are missing.");
        for (size_t i = 0; i < n; i++) {
                const struct proxy_rule *r = &rules[i];
                snprintf(f, sizeof(f), "rules[%zu].host", i);
                if (!r->host || !host_valid(r->host))
                        return err_set_field(err, -EINVAL, f, "The host must be a DNS name (labels of letters, digits, '-' and '_', at most %d bytes).",
                                             HOST_MAX_LEN);
                for (size_t k = 0; k < i; k++)
                        if (strcasecmp(rules[k].host, r->host) == 0)
                                return err_set_field(err, -EINVAL, f, "The host %s has a rule already (rules[%zu]): give each host one rule.",
                                                     r->host, k);
                snprintf(f, sizeof(f), "rules[%zu].headers", i);
                if (r->n_headers > HEADERS_MAX)
                        return err_set_field(err, -EINVAL, f, "At most %d headers per rule, not %zu.", HEADERS_MAX, r->n_headers);
                if (r->n_headers && !r->headers)
                        return err_set_field(err, -EINVAL, f, "The headers are missing.");
                for (size_t j = 0; j < r->n_headers; j++) {
                        const char *name = r->headers[j].name, *value = r->headers[j].value;
                        snprintf(f, sizeof(f), "rules[%zu].headers[%zu].name", i, j);
                        size_t nl = name ? strlen(name) : 0;
                        if (nl == 0 || nl > NAME_MAX_LEN)
                                return err_set_field(err, -EINVAL, f, "A header name has 1 to %d characters.", NAME_MAX_LEN);
                        for (size_t k = 0; k < nl; k++)
                                if (!http_tchar((unsigned char) name[k]))
                                        return err_set_field(err, -EINVAL, f, "A header name has only token characters (letters, digits, !#$%%&'*+-.^_`|~).");
                        /* The value is a secret: the message never quotes it. */
                        snprintf(f, sizeof(f), "rules[%zu].headers[%zu].value", i, j);
                        if (!value)
                                return err_set_field(err, -EINVAL, f, "The header value is missing.");
                        if (strlen(value) > VALUE_MAX_LEN)
                                return err_set_field(err, -EINVAL, f, "A header value has at most %d bytes.", VALUE_MAX_LEN);
                        if (strpbrk(value, "\r\n"))
                                return err_set_field(err, -EINVAL, f, "A header value cannot hold CR or LF.");
                }
        }
        return 0;
}

static struct rule *rules_copy(const struct proxy_rule *rules, size_t n) {
        struct rule *c = xnew0(struct rule, n);
        for (size_t i = 0; i < n; i++) {
                c[i].host = xstrdup(rules[i].host);
                for (char *s = c[i].host; *s; s++)
                        if (*s >= 'A' && *s <= 'Z')
                                *s = (char) (*s - 'A' + 'a');
                c[i].n = rules[i].n_headers;
                c[i].names = xnew0(char *, c[i].n);
                c[i].values = xnew0(char *, c[i].n);
                for (size_t j = 0; j < c[i].n; j++) {
                        c[i].names[j] = xstrdup(rules[i].headers[j].name);
                        c[i].values[j] = xstrdup(rules[i].headers[j].value);
                }
        }
        return c;
}

/* ---- the sandbox API ---- */

int table_set(struct proxy *p, const char *sandbox_id, uint32_t ip, const struct proxy_rule *rules, size_t n_rules,
                      char **ret_ca_pem, struct err *err) {
        if (!sandbox_id_valid(sandbox_id))
                return err_set_field(err, -EINVAL, "sandbox_id", "A sandbox id has 1 to %d letters, digits, '.', '_' or '-'.",
                                     SANDBOX_ID_MAX);
        if (ip == 0 || ip == UINT32_MAX)
                return err_set_field(err, -EINVAL, "ip", "The sandbox's IPv4 address is missing.");
        int r = rules_check(rules, n_rules, err);
        if (r < 0)
                return r;
        struct rule *copy = rules_copy(rules, n_rules);

        pthread_mutex_lock(&p->lock);
        struct sandbox *other = sandbox_by_ip(p, ip), *sb = sandbox_by_id(p, sandbox_id);
        if (other && other != sb) {
                pthread_mutex_unlock(&p->lock);
                rules_free(copy, n_rules);
                struct in_addr a = { htonl(ip) };
                char buf[INET_ADDRSTRLEN];
                return err_set_field(err, -EADDRINUSE, "ip", "Sandbox %s holds %s already: drop it first.", other->id,
                                     inet_ntop(AF_INET, &a, buf, sizeof(buf)));
        }
        if (!sb) {
                sb = xnew0(struct sandbox, 1);
                r = ca_make(sandbox_id, &sb->ca_key, &sb->ca);
                if (r < 0) {
                        pthread_mutex_unlock(&p->lock);
                        ERR_clear_error();
                        free(sb);
                        rules_free(copy, n_rules);
                        return err_set(err, r, "Cannot make the egress CA of sandbox %s (OpenSSL failed).", sandbox_id);
                }
                sb->id = xstrdup(sandbox_id);
                sb->refs = 1;
                sb->next = p->sandboxes;
                p->sandboxes = sb;
        }
        sb->ip = ip;
        rules_free(sb->rules, sb->n_rules);
        sb->rules = copy;
        sb->n_rules = n_rules;
        /* Leaves of hosts that left the rules go; so do their counters. */
        size_t k = 0;
        for (size_t i = 0; i < sb->n_leaves; i++) {
                if (sandbox_rule(sb, sb->leaves[i].host))
                        sb->leaves[k++] = sb->leaves[i];
                else
                        leaf_done(&sb->leaves[i]);
        }
        sb->n_leaves = k;
        struct proxy_host_stats *stats = xnew0(struct proxy_host_stats, n_rules);
        for (size_t i = 0; i < n_rules; i++) {
                struct proxy_host_stats *old = sandbox_stats(sb, copy[i].host);
                if (old)
                        stats[i] = *old;
                strscpy(stats[i].host, copy[i].host, sizeof(stats[i].host));
        }
        free(sb->stats);
        sb->stats = stats;
        sb->n_stats = n_rules;

        char *pem = NULL;
        if (ret_ca_pem) {
                BIO *bio = BIO_new(BIO_s_mem());
                char *data = NULL;
                long len = 0;
                if (bio && PEM_write_bio_X509(bio, sb->ca) == 1)
                        len = BIO_get_mem_data(bio, &data);
                if (len > 0)
                        pem = xstrndup(data, (size_t) len);
                BIO_free(bio);
        }
        pthread_mutex_unlock(&p->lock);
        if (ret_ca_pem) {
                if (!pem) {
                        ERR_clear_error();
                        return err_set(err, -EPROTO, "Cannot write the egress CA certificate of sandbox %s.", sandbox_id);
                }
                *ret_ca_pem = pem;
        }
        log_debug("egress proxy: rules of sandbox %s set (%zu hosts)", sandbox_id, n_rules);
        return 0;
}

int table_drop(struct proxy *p, const char *sandbox_id) {
        if (!sandbox_id)
                return 0;
        pthread_mutex_lock(&p->lock);
        struct sandbox **pp = &p->sandboxes;
        while (*pp && !streq((*pp)->id, sandbox_id))
                pp = &(*pp)->next;
        struct sandbox *sb = *pp;
        if (sb) {
                *pp = sb->next;
                sb->next = NULL;
                sb->dropped = true;
                sb->ip = 0;
                for (struct conn *c = p->conns; c; c = c->next)
                        if (c->sb == sb)
                                (void) eventfd_write(c->kill_fd, 1);
                sandbox_forget(sb);
                sandbox_unref(sb);
        }
        pthread_mutex_unlock(&p->lock);
        if (sb)
                log_debug("egress proxy: sandbox %s dropped", sandbox_id);
        return 0;
}

int table_drop_ip(struct proxy *p, uint32_t ip) {
        char id[SANDBOX_ID_MAX + 1] = "";
        pthread_mutex_lock(&p->lock);
        struct sandbox *sb = sandbox_by_ip(p, ip);
        if (sb)
                snprintf(id, sizeof(id), "%s", sb->id);
        pthread_mutex_unlock(&p->lock);
        return id[0] ? table_drop(p, id) : 0;
}

int table_stats(struct proxy *p, const char *sandbox_id, struct proxy_host_stats **ret) {
        pthread_mutex_lock(&p->lock);
        struct sandbox *sb = sandbox_id ? sandbox_by_id(p, sandbox_id) : NULL;
        if (!sb) {
                pthread_mutex_unlock(&p->lock);
                return -ENOENT;
        }
        size_t n = sb->n_stats;
        struct proxy_host_stats *s = xnew0(struct proxy_host_stats, n);
        memcpy(s, sb->stats, n * sizeof(*s));
        pthread_mutex_unlock(&p->lock);
        *ret = s;
        return (int) n;
}

