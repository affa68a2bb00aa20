/* pj_api_files.c — the Brimble API's bodies that carry files (pj_api.h): files/batch, the
 * templates users build (name, paths, the build's context) and docker save's manifest read
 * back from a tenant's build sandbox. Same strict reader and field-path helpers as pj_api.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "pj_api.h"
#include "pj_json.h"
#include "strutil.h"

#include "pj_fields.h"

/* ---- POST /sandboxes/{id}/files/batch ---------------------------------- */

void pj_files_batch_done(struct pj_files_batch *b) {
        if (!b)
                return;
        for (size_t i = 0; i < b->n_files; i++) {
                free_many(b->files[i].path, b->files[i].data, b->file_errors[i]);
        }
        free_many(b->files, b->file_errors);
        *b = (struct pj_files_batch) {};
}

/* Fills f from one entry; returns a per-file error message (allocated) or NULL. */
static char *batch_entry(const struct pj_json *ent, const char *ipath, size_t max_file_bytes, struct pj_batch_file *f) {
        static const char *const fields[] = { "path", "content_base64" };
        struct err e = {};
        const struct pj_json *path, *content;

        if (ent->type != PJ_JSON_OBJECT)
                return xasprintf("%s must be an object with path and content_base64", ipath);
        /* Echo the path back in results even when something else is wrong. */
        path = pj_json_member(ent, "path");
        if (path && path->type == PJ_JSON_STRING && !memchr(path->str, '\0', path->str_len))
                f->path = xstrdup(path->str);

        if (pj_check_fields(ent, ipath, fields, ELEMENTSOF(fields), &e) < 0 || pj_get_str(ent, ipath, "path", &path, &e) < 0)
                return xstrdup(e.message);
        char p[PJ_PATH_MAX];
        pj_mkpath(p, ipath, "path");
        if (!path)
                return xasprintf("%s is required", p);
        if (pj_sandbox_path_check(path->str, &e, p) < 0)
                return xstrdup(e.message);

        pj_mkpath(p, ipath, "content_base64");
        if (pj_get_str(ent, ipath, "content_base64", &content, &e) < 0)
                return xstrdup(e.message);
        if (!content)
                return xasprintf("%s is required", p);
        size_t size = base64_decoded_size(content->str, content->str_len, BASE64_PAD_OPTIONAL);
        if (size != SIZE_MAX && size > max_file_bytes)
                return xasprintf("%s is %zu bytes; the limit is %zu bytes per file", ipath, size, max_file_bytes);
        if (base64_decode_flags(content->str, content->str_len, BASE64_PAD_OPTIONAL, &f->data, &f->len) < 0)
                return xasprintf("%s is not valid base64 (standard alphabet A-Z a-z 0-9 + /, '=' padding, no line breaks)",
                                 p);
        if (f->len == 0) { /* the contract: empty files carry no buffer */
                free(f->data);
                f->data = NULL;
        }
        return NULL;
}

int pj_files_batch_parse(const char *body, size_t len, size_t max_file_bytes, size_t max_total_bytes,
                         struct pj_files_batch *ret, struct err *err) {
        static const char *const fields[] = { "files" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_files_batch_done) struct pj_files_batch b = {};
        int r;

        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0)
                return r;
        const struct pj_json *files = pj_json_member(root, "files");
        if (!files)
                return pj_error_set(err, "files", "files is required (an array of {path, content_base64})");
        if (files->type != PJ_JSON_ARRAY)
                return pj_error_set(err, "files", "files must be an array of {path, content_base64}");
        if (files->n < 1 || files->n > 100)
                return pj_error_set(err, "files", "files must contain between 1 and 100 entries");

        b.files = xnew0(struct pj_batch_file, files->n);
        b.file_errors = xnew0(char *, files->n);
        b.n_files = files->n;
        size_t total = 0, i = 0;
        for (const struct pj_json *ent = files->child; ent; ent = ent->next, i++) {
                char ipath[PJ_PATH_MAX];
                struct pj_batch_file *f = &b.files[i];
                pj_mkindex(ipath, "files", i);
                b.file_errors[i] = batch_entry(ent, ipath, max_file_bytes, f);
                if (!b.file_errors[i])
                        for (size_t j = 0; j < i; j++)
                                if (!b.file_errors[j] && strcmp(b.files[j].path, f->path) == 0) {
                                        b.file_errors[i] = xasprintf("files[%zu].path duplicates files[%zu].path", i, j);
                                        break;
                                }
                if (b.file_errors[i]) {
                        free(f->data);
                        f->data = NULL;
                        f->len = 0;
                        continue;
                }
                total += f->len;
                if (total > max_total_bytes)
                        return pj_error_set(err, "files", "files add up to more than %zu bytes; the limit is %zu bytes per batch",
                                    max_total_bytes, max_total_bytes);
        }
        *ret = TAKE_STRUCT(b);
        return 0;
}

/* ---- templates users build ---- */

bool pj_template_name_ok(const char *s) {
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > PJ_TEMPLATE_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char ch = s[i];
                bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
                if (!alnum && (ch != '-' || i == 0 || i == n - 1))
                        return false;
        }
        return true;
}

bool pj_template_path_ok(const char *p, size_t n) {
        if (n == 0 || n > PJ_TEMPLATE_PATH_MAX || p[0] == '/')
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char) p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\')
                        return false;
        for (const char *c = p, *end = p + n; c < end;) {
                const char *e = memchr(c, '/', (size_t) (end - c));
                if (!e)
                        e = end;
                size_t k = (size_t) (e - c);
                if (k == 0 || (k == 1 && c[0] == '.') || (k == 2 && c[0] == '.' && c[1] == '.'))
                        return false;
                c = e < end ? e + 1 : e;
                if (e < end && c == end)
                        return false;   /* a trailing '/': an empty last component */
        }
        return true;
}

void pj_template_build_done(struct pj_template_build *b) {
        if (!b)
                return;
        for (size_t i = 0; i < b->n_files; i++)
                free_many(b->files[i].path, b->files[i].data);
        free_many(b->name, b->dockerfile, b->files);
        *b = (struct pj_template_build) {};
}

static int template_file_parse(const struct pj_json *it, size_t i, struct pj_template_build *b, struct err *err) {
        static const char *const fields[] = { "path", "content", "encoding", "mode" };
        char ipath[PJ_PATH_MAX], p[PJ_PATH_MAX];
        const struct pj_json *path = NULL, *content = NULL, *enc = NULL;
        int r, mode = -1;
        bool has_mode = false;
        pj_mkindex(ipath, "files", i);
        if (it->type != PJ_JSON_OBJECT)
                return pj_error_set(err, ipath, "%s: an object {path, content, encoding?, mode?}", ipath);
        if ((r = pj_check_fields(it, ipath, fields, ELEMENTSOF(fields), err)) < 0 ||
            (r = pj_get_str(it, ipath, "path", &path, err)) < 0 || (r = pj_get_str(it, ipath, "encoding", &enc, err)) < 0 ||
            (r = pj_get_int(it, ipath, "mode", 0, 0777, &has_mode, &mode, err)) < 0)
                return r;
        pj_mkpath(p, ipath, "path");
        if (!path || memchr(path->str, 0, path->str_len) || !pj_template_path_ok(path->str, path->str_len))
                return pj_error_set(err, p, "%s: a relative path of at most %d bytes, without '.', '..' or empty components",
                                    p, PJ_TEMPLATE_PATH_MAX);
        if (!strcmp(path->str, "Dockerfile"))
                return pj_error_set(err, p, "%s: the Dockerfile comes from 'dockerfile'", p);
        for (size_t k = 0; k < i; k++)
                if (!strcmp(b->files[k].path, path->str))
                        return pj_error_set(err, p, "%s: '%s' is given twice", p, path->str);
        /* a file's text may hold any character, NUL included (pj_get_str refuses those) */
        pj_mkpath(p, ipath, "content");
        content = pj_json_member(it, "content");
        if (!content || content->type != PJ_JSON_STRING)
                return pj_error_set(err, p, "%s: required (a string)", p);
        struct pj_template_file *f = &b->files[i];
        f->path = xstrndup(path->str, path->str_len);
        f->mode = has_mode ? mode : -1;
        b->n_files = i + 1;     /* owned by b from here, whatever follows */
        if (enc && enc->str_len == 6 && !memcmp(enc->str, "base64", 6)) {
                if (base64_decode_flags(content->str, content->str_len, BASE64_PAD_OPTIONAL, &f->data, &f->len) < 0)
                        return pj_error_set(err, p, "%s: not valid base64", p);
        } else if (!enc || (enc->str_len == 5 && !memcmp(enc->str, "utf-8", 5))) {
                f->len = content->str_len;
                f->data = xmalloc(f->len + 1);
                memcpy(f->data, content->str, f->len);
                f->data[f->len] = 0;
        } else {
                pj_mkpath(p, ipath, "encoding");
                return pj_error_set(err, p, "%s: utf-8 (default) or base64", p);
        }
        return 0;
}

int pj_template_build_parse(const char *body, size_t len, size_t max_context, bool (*taken)(const char *name, void *ud),
                            void *ud, struct pj_template_build *ret, struct err *err) {
        static const char *const fields[] = { "name", "dockerfile", "files" };
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_template_build_done) struct pj_template_build b = {};
        const struct pj_json *name = NULL, *df = NULL;
        int r;
        if ((r = pj_parse_body(body, len, false, fields, ELEMENTSOF(fields), &root, err)) < 0 ||
            (r = pj_get_str(root, "", "name", &name, err)) < 0 || (r = pj_get_str(root, "", "dockerfile", &df, err)) < 0)
                return r;
        if (name && taken && taken(name->str, ud)) {
                pj_error_set(err, "name", "name: '%.64s' is a template of this server; pick another name", name->str);
                return -EEXIST;
        }
        if (!name || memchr(name->str, 0, name->str_len) || !pj_template_name_ok(name->str))
                return pj_error_set(err, "name",
                                    "name: 1 to %d characters of a-z, 0-9 and '-', starting and ending with a letter or digit",
                                    PJ_TEMPLATE_NAME_MAX);
        if (!df || df->str_len == 0)
                return pj_error_set(err, "dockerfile", "dockerfile: required, the Dockerfile's text");
        if (memchr(df->str, 0, df->str_len))
                return pj_error_set(err, "dockerfile", "dockerfile: text without NUL bytes");
        size_t total = df->str_len;
        if (total > max_context) {
                pj_error_set(err, "dockerfile", "dockerfile: over the build context limit of %zu bytes", max_context);
                return -EFBIG;
        }
        b.name = xstrndup(name->str, name->str_len);
        b.dockerfile = xstrndup(df->str, df->str_len);
        b.dockerfile_len = df->str_len;
        const struct pj_json *files = pj_json_member(root, "files");
        if (files) {
                if (files->type != PJ_JSON_ARRAY)
                        return pj_error_set(err, "files", "files: an array of {path, content, encoding?, mode?}");
                if (files->n > PJ_TEMPLATE_MAX_FILES)
                        return pj_error_set(err, "files", "files: at most %d files", PJ_TEMPLATE_MAX_FILES);
                b.files = xnew0(struct pj_template_file, files->n + 1);
                size_t i = 0;
                for (const struct pj_json *it = files->child; it; it = it->next, i++) {
                        if ((r = template_file_parse(it, i, &b, err)) < 0)
                                return r;
                        total += b.files[i].len;
                        if (total > max_context) {
                                pj_error_set(err, "files", "files: the build context is over its limit of %zu bytes", max_context);
                                return -EFBIG;
                        }
                }
        }
        *ret = b;
        b = (struct pj_template_build) {};
        return 0;
}

/* ---- docker save's manifest, from a tenant's build sandbox ---- */

bool pj_saved_path_ok(const char *p, size_t n) {
        if (n == 0 || n > 200 || p[0] == '/' || memmem(p, n, "..", 2))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9') ||
                      p[i] == '/' || p[i] == '.' || p[i] == '_' || p[i] == '-'))
                        return false;
        return true;
}

void pj_saved_manifest_done(struct pj_saved_manifest *m) {
        if (!m)
                return;
        for (size_t i = 0; i < m->n_layers; i++)
                free(m->layers[i]);
        free_many(m->config, m->layers);
        *m = (struct pj_saved_manifest) {};
}

int pj_saved_manifest_parse(const char *text, size_t len, struct pj_saved_manifest *ret, struct err *err) {
        _cleanup_(pj_json_freep) struct pj_json *root = NULL;
        _cleanup_(pj_saved_manifest_done) struct pj_saved_manifest m = {};
        int r = pj_json_parse(text, len, PJ_JSON_MAX_NODES, &root, err);
        if (r < 0)
                return r;
        if (root->type != PJ_JSON_ARRAY || root->n != 1 || root->child->type != PJ_JSON_OBJECT)
                return pj_error_set(err, "", "manifest.json: one image (an array of one object)");
        const struct pj_json *one = root->child, *config = NULL, *layers = pj_json_member(one, "Layers");
        if ((r = pj_get_str(one, "[0]", "Config", &config, err)) < 0)
                return r;
        if (!config || !pj_saved_path_ok(config->str, config->str_len))
                return pj_error_set(err, "[0].Config", "manifest.json: [0].Config is not a path we read");
        if (!layers || layers->type != PJ_JSON_ARRAY || layers->n > PJ_SAVED_MAX_LAYERS)
                return pj_error_set(err, "[0].Layers", "manifest.json: [0].Layers: an array of at most %d paths",
                                    PJ_SAVED_MAX_LAYERS);
        m.config = xstrndup(config->str, config->str_len);
        m.layers = xnew0(char *, layers->n + 1);
        size_t i = 0;
        for (const struct pj_json *l = layers->child; l; l = l->next, i++) {
                char p[PJ_PATH_MAX];
                pj_mkindex(p, "[0].Layers", i);
                if (l->type != PJ_JSON_STRING || !pj_saved_path_ok(l->str, l->str_len))
                        return pj_error_set(err, p, "manifest.json: %s is not a path we read", p);
                m.layers[m.n_layers++] = xstrndup(l->str, l->str_len);
        }
        *ret = m;
        m = (struct pj_saved_manifest) {};
        return 0;
}
