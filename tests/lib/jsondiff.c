/* jsondiff.c — see jsondiff.h. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsondiff.h"

struct diff {
        const char *const *skip;
        char *out;
        size_t outlen, used;
        int n;
};

static void note(struct diff *d, const char *path, const char *fmt, const char *a, const char *b) {
        d->n++;
        if (!d->out || d->used + 1 >= d->outlen)
                return;
        int k = snprintf(d->out + d->used, d->outlen - d->used, "%s: ", path[0] ? path : "(root)");
        if (k > 0)
                d->used += (size_t) k < d->outlen - d->used ? (size_t) k : d->outlen - d->used - 1;
        k = snprintf(d->out + d->used, d->outlen - d->used, fmt, a, b);
        if (k > 0)
                d->used += (size_t) k < d->outlen - d->used ? (size_t) k : d->outlen - d->used - 1;
        if (d->used + 1 < d->outlen)
                d->out[d->used++] = '\n', d->out[d->used] = 0;
}

static bool skipped(const struct diff *d, const char *path) {
        for (const char *const *s = d->skip; s && *s; s++)
                if (!strcmp(*s, path))
                        return true;
        return false;
}

static const char *type_name(const cJSON *j) {
        if (cJSON_IsObject(j)) return "object";
        if (cJSON_IsArray(j)) return "array";
        if (cJSON_IsString(j)) return "string";
        if (cJSON_IsNumber(j)) return "number";
        if (cJSON_IsBool(j)) return "bool";
        if (cJSON_IsNull(j)) return "null";
        return "?";
}

static void walk(struct diff *d, const cJSON *w, const cJSON *g, const char *path) {
        char buf[512];
        if (strcmp(type_name(w), type_name(g)) != 0) {
                note(d, path, "want a %s, got a %s", type_name(w), type_name(g));
                return;
        }
        if (cJSON_IsObject(w)) {
                const cJSON *c;
                cJSON_ArrayForEach(c, w) {
                        snprintf(buf, sizeof(buf), "%s%s%s", path, path[0] ? "." : "", c->string);
                        const cJSON *o = cJSON_GetObjectItemCaseSensitive(g, c->string);
                        if (!o)
                                note(d, buf, "%s%s", "missing", "");
                        else
                                walk(d, c, o, buf);
                }
                cJSON_ArrayForEach(c, g) {
                        if (!cJSON_GetObjectItemCaseSensitive(w, c->string)) {
                                snprintf(buf, sizeof(buf), "%s%s%s", path, path[0] ? "." : "", c->string);
                                note(d, buf, "%s%s", "unexpected member", "");
                        }
                }
                return;
        }
        if (skipped(d, path))
                return;
        if (cJSON_IsArray(w)) {
                int nw = cJSON_GetArraySize(w), ng = cJSON_GetArraySize(g);
                char a[16], b[16];
                if (nw != ng) {
                        snprintf(a, sizeof(a), "%d", nw);
                        snprintf(b, sizeof(b), "%d", ng);
                        note(d, path, "want %s items, got %s", a, b);
                        return;
                }
                for (int i = 0; i < nw; i++) {
                        snprintf(buf, sizeof(buf), "%s[%d]", path, i);
                        walk(d, cJSON_GetArrayItem(w, i), cJSON_GetArrayItem(g, i), buf);
                }
                return;
        }
        if (!cJSON_Compare(w, g, true)) {
                char *a = cJSON_PrintUnformatted(w), *b = cJSON_PrintUnformatted(g);
                note(d, path, "want %s, got %s", a, b);
                free(a);
                free(b);
        }
}

int json_diff(const cJSON *want, const cJSON *got, const char *const *skip, char *out, size_t outlen) {
        struct diff d = { .skip = skip, .out = out, .outlen = outlen };
        if (out && outlen)
                out[0] = 0;
        walk(&d, want, got, "");
        return d.n;
}

cJSON *json_load_file(const char *path) {
        FILE *f = fopen(path, "re");
        if (!f)
                return NULL;
        char *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
                if (len + 4096 + 1 > cap) {
                        cap = cap ? cap * 2 : 8192;
                        buf = realloc(buf, cap);
                        if (!buf)
                                abort();
                }
                size_t k = fread(buf + len, 1, cap - len - 1, f);
                if (k == 0)
                        break;
                len += k;
        }
        fclose(f);
        buf[len] = 0;
        cJSON *j = cJSON_Parse(buf);
        free(buf);
        return j;
}
