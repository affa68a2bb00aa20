/* conf.c — INI-style configuration parser. See conf.h for syntax and limits. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cleanup.h"
#include "conf.h"
#include "strutil.h"

/* Open-addressing tables, at least twice the entry limit so probes stay short
 * even for hostile files that hit the limit. Slot value: index + 1, 0 = free. */
#define CONF_HT_SIZE 32768u

struct conf_section {
        char *section;
        char *name;     /* NULL for a plain [section] */
        unsigned line;  /* first header */
        bool used;
};

struct conf_entry {
        size_t sec;
        char *key;
        char *value;
        unsigned line;
        bool used;
};

struct conf {
        char *name;
        struct conf_section *secs;
        size_t n_secs, cap_secs;
        struct conf_entry *ents;
        size_t n_ents, cap_ents;
        uint32_t *sec_ht;
        uint32_t *ent_ht;
};

/* -EINVAL, with err (when given) saying "name:line: <fmt>". */
_printf_(4, 5) static int conf_error(const char *name, unsigned line, struct err *err, const char *fmt, ...) {
        char msg[sizeof(err->message)];
        va_list ap;

        if (!err)
                return -EINVAL;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return err_set(err, -EINVAL, "%s:%u: %s", name, line, msg);
}

static uint32_t hash_str(uint32_t h, const char *s) {
        if (!s)
                return (h ^ 0xffu) * 16777619u;
        for (; *s; s++)
                h = (h ^ (uint8_t) *s) * 16777619u;
        return (h ^ 0u) * 16777619u; /* terminator, so ("ab","c") != ("a","bc") */
}

static bool streq_null(const char *a, const char *b) {
        return a == b || (a && b && strcmp(a, b) == 0);
}

/* Slot for (section, name); *found set when occupied by that section. */
static uint32_t *sec_slot(const struct conf *c, const char *section, const char *name) {
        uint32_t h = hash_str(hash_str(2166136261u, section), name);
        for (uint32_t i = 0;; i++) {
                uint32_t *s = &c->sec_ht[(h + i) & (CONF_HT_SIZE - 1)];
                if (*s == 0)
                        return s;
                const struct conf_section *cs = &c->secs[*s - 1];
                if (strcmp(cs->section, section) == 0 && streq_null(cs->name, name))
                        return s;
        }
}

static uint32_t *ent_slot(const struct conf *c, size_t sec, const char *key) {
        uint32_t h = hash_str(2166136261u ^ (uint32_t) sec * 2654435761u, key);
        for (uint32_t i = 0;; i++) {
                uint32_t *s = &c->ent_ht[(h + i) & (CONF_HT_SIZE - 1)];
                if (*s == 0)
                        return s;
                const struct conf_entry *e = &c->ents[*s - 1];
                if (e->sec == sec && strcmp(e->key, key) == 0)
                        return s;
        }
}

static struct conf_section *find_section(struct conf *c, const char *section, const char *name) {
        uint32_t *s;
        if (!c || !section)
                return NULL;
        s = sec_slot(c, section, name);
        return *s ? &c->secs[*s - 1] : NULL;
}

struct conf *conf_free(struct conf *c) {
        if (!c)
                return NULL;
        for (size_t i = 0; i < c->n_secs; i++) {
                free(c->secs[i].section);
                free(c->secs[i].name);
        }
        for (size_t i = 0; i < c->n_ents; i++) {
                free(c->ents[i].key);
                /* Values may be secrets (passwords): none is left behind in freed memory. */
                if (c->ents[i].value)
                        explicit_bzero(c->ents[i].value, strlen(c->ents[i].value));
                free(c->ents[i].value);
        }
        free(c->secs);
        free(c->ents);
        free(c->sec_ht);
        free(c->ent_ht);
        free(c->name);
        free(c);
        return NULL;
}

static bool is_ws(char ch) { return ch == ' ' || ch == '\t'; }
static bool is_key_char(char ch) {
        return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
}
static bool is_subname_char(char ch) {
        return ascii_alnum(ch) || ch == '.' || ch == '_' || ch == '-';
}
static bool all_chars(const char *s, size_t n, bool (*ok)(char)) {
        if (n == 0 || n > CONF_MAX_NAME)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!ok(s[i]))
                        return false;
        return true;
}

/* Quoted value at p (after the opening quote) up to end. */
static int parse_quoted(const char *p, const char *end, char **ret, const char **ret_after) {
        _cleanup_free_ char *v = xmalloc((size_t) (end - p) + 1);
        size_t n = 0;

        for (; p < end; p++) {
                if (*p == '"') {
                        v[n] = 0;
                        *ret = TAKE_PTR(v);
                        *ret_after = p + 1;
                        return 0;
                }
                if (*p == '\\') {
                        if (p + 1 >= end)
                                break;
                        if (p[1] != '"' && p[1] != '\\')
                                return -EBADMSG;
                        p++;
                }
                v[n++] = *p;
        }
        return -ENODATA;
}

/* One logical line, already checked for length, control bytes and UTF-8.
 * *cur_sec is the index of the current section or SIZE_MAX. */
static int parse_line(struct conf *c, const char *p, const char *end, unsigned line, size_t *cur_sec,
                      struct err *err) {
        const char *nm = c->name;

        while (p < end && is_ws(*p))
                p++;
        while (end > p && is_ws(end[-1]))
                end--;
        if (p == end || *p == '#' || *p == ';')
                return 0;

        if (*p == '[') {
                const char *s = p + 1, *e = s, *n = NULL, *ne = NULL;
                uint32_t *slot;

                while (e < end && is_key_char(*e))
                        e++;
                if (e < end && is_ws(*e)) {
                        const char *q = e;
                        while (q < end && is_ws(*q))
                                q++;
                        if (q < end && *q == '"') {
                                n = ne = q + 1;
                                while (ne < end && *ne != '"')
                                        ne++;
                                if (ne >= end || ne + 1 >= end || ne[1] != ']' || ne + 2 != end)
                                        return conf_error(nm, line, err,
                                                          "invalid section header (expected [section] or [section \"name\"])");
                        } else
                                return conf_error(nm, line, err,
                                                  "invalid section header (expected [section] or [section \"name\"])");
                } else if (e >= end || *e != ']' || e + 1 != end)
                        return conf_error(nm, line, err,
                                          "invalid section header (expected [section] or [section \"name\"])");
                if (!all_chars(s, (size_t) (e - s), is_key_char))
                        return conf_error(nm, line, err,
                                          "invalid section name '%.*s' (expected 1-%d characters of a-z, 0-9, _)",
                                          (int) (e - s > 64 ? 64 : e - s), s, CONF_MAX_NAME);
                if (n && !all_chars(n, (size_t) (ne - n), is_subname_char))
                        return conf_error(nm, line, err,
                                          "invalid subsection name '%.*s' (expected 1-%d characters of A-Z, a-z, 0-9, '.', '_', '-')",
                                          (int) (ne - n > 64 ? 64 : ne - n), n, CONF_MAX_NAME);

                _cleanup_free_ char *sec = xstrndup(s, (size_t) (e - s));
                _cleanup_free_ char *name = n ? xstrndup(n, (size_t) (ne - n)) : NULL;
                slot = sec_slot(c, sec, name);
                if (*slot) {
                        /* Repeated header: merge. */
                        *cur_sec = *slot - 1;
                        return 0;
                }
                if (c->n_secs >= CONF_MAX_ENTRIES)
                        return conf_error(nm, line, err, "too many sections (max %d)",
                                          CONF_MAX_ENTRIES);
                if (c->n_secs == c->cap_secs) {
                        c->cap_secs = c->cap_secs ? c->cap_secs * 2 : 16;
                        c->secs = xrealloc(c->secs, c->cap_secs * sizeof(*c->secs));
                }
                c->secs[c->n_secs] = (struct conf_section) {
                        .section = TAKE_PTR(sec), .name = TAKE_PTR(name), .line = line,
                };
                *slot = (uint32_t) ++c->n_secs;
                *cur_sec = c->n_secs - 1;
                return 0;
        }

        const char *eq = memchr(p, '=', (size_t) (end - p));
        const char *ke, *v;
        _cleanup_free_ char *value = NULL;
        uint32_t *slot;

        if (!eq)
                return conf_error(nm, line, err, "expected 'key = value'");
        ke = eq;
        while (ke > p && is_ws(ke[-1]))
                ke--;
        if (!all_chars(p, (size_t) (ke - p), is_key_char))
                return conf_error(nm, line, err,
                                  "invalid key '%.*s' (expected 1-%d characters of a-z, 0-9, _)",
                                  (int) (ke - p > 64 ? 64 : ke - p), p, CONF_MAX_NAME);
        _cleanup_free_ char *key = xstrndup(p, (size_t) (ke - p));
        if (*cur_sec == SIZE_MAX)
                return conf_error(nm, line, err,
                                  "key '%s' outside of a section (add a [section] header above it)", key);

        v = eq + 1;
        while (v < end && is_ws(*v))
                v++;
        if (v < end && *v == '"') {
                const char *after;
                int r = parse_quoted(v + 1, end, &value, &after);
                if (r == -ENODATA)
                        return conf_error(nm, line, err, "unterminated quoted value for '%s'", key);
                if (r < 0)
                        return conf_error(nm, line, err,
                                          "invalid escape in quoted value for '%s' (only \\\" and \\\\ are allowed)",
                                          key);
                while (after < end && is_ws(*after))
                        after++;
                if (after < end && *after != '#')
                        return conf_error(nm, line, err,
                                          "unexpected text after closing quote of '%s'", key);
        } else {
                const char *ve = v;
                /* " #" starts an inline comment; quote the value to keep it. */
                while (ve < end && !(*ve == '#' && ve > eq + 1 && is_ws(ve[-1])))
                        ve++;
                while (ve > v && is_ws(ve[-1]))
                        ve--;
                value = xstrndup(v, (size_t) (ve - v));
        }

        slot = ent_slot(c, *cur_sec, key);
        if (*slot)
                return conf_error(nm, line, err, "duplicate key '%s' (first set on line %u)", key,
                                  c->ents[*slot - 1].line);
        if (c->n_ents >= CONF_MAX_ENTRIES)
                return conf_error(nm, line, err, "too many entries (max %d)", CONF_MAX_ENTRIES);
        if (c->n_ents == c->cap_ents) {
                c->cap_ents = c->cap_ents ? c->cap_ents * 2 : 32;
                c->ents = xrealloc(c->ents, c->cap_ents * sizeof(*c->ents));
        }
        c->ents[c->n_ents] = (struct conf_entry) {
                .sec = *cur_sec, .key = TAKE_PTR(key), .value = TAKE_PTR(value), .line = line,
        };
        *slot = (uint32_t) ++c->n_ents;
        return 0;
}

int conf_parse_string(const char *text, size_t len, const char *name, struct conf **ret, struct err *err) {
        struct conf *c _cleanup_(conf_freep) = NULL;
        size_t cur_sec = SIZE_MAX, off = 0;
        unsigned line = 0;
        int r;

        if (!name)
                name = "config";
        err_clear(err);
        if (len > CONF_MAX_FILE_SIZE) {
                unsigned l = 1;
                for (size_t i = 0; i < CONF_MAX_FILE_SIZE; i++)
                        l += text[i] == '\n';
                return conf_error(name, l, err, "file too large (max %d bytes)", CONF_MAX_FILE_SIZE);
        }

        c = xnew0(struct conf, 1);
        c->name = xstrdup(name);
        c->sec_ht = xnew0(uint32_t, CONF_HT_SIZE);
        c->ent_ht = xnew0(uint32_t, CONF_HT_SIZE);

        while (off < len) {
                const char *p = text + off, *nl = memchr(p, '\n', len - off);
                size_t l = nl ? (size_t) (nl - p) : len - off;

                line++;
                off += l + (nl ? 1 : 0);
                if (l > 0 && p[l - 1] == '\r')
                        l--;
                if (l > CONF_MAX_LINE)
                        return conf_error(name, line, err, "line too long (max %d bytes)", CONF_MAX_LINE);
                for (size_t i = 0; i < l; i++) {
                        unsigned char ch = (unsigned char) p[i];
                        if (ch == 0)
                                return conf_error(name, line, err, "NUL byte in line");
                        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
                                return conf_error(name, line, err,
                                                  "control character 0x%02x in line", ch);
                }
                if (!utf8_valid(p, l))
                        return conf_error(name, line, err, "invalid UTF-8");
                r = parse_line(c, p, p + l, line, &cur_sec, err);
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(c);
        return 0;
}

int conf_parse_file(const char *path, struct conf **ret, struct err *err) {
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *buf = NULL;
        struct stat st;
        size_t len = 0;

        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                int r = -errno;
                return err_set(err, r, "%s: %s", path, strerror(-r));
        }
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                int r = errno && !S_ISREG(st.st_mode) ? -EINVAL : -errno;
                return err_set(err, r < 0 ? r : -EINVAL, "%s: not a regular file", path);
        }
        /* One byte more than allowed, so the parser can see it is too large. */
        buf = xmalloc(CONF_MAX_FILE_SIZE + 1);
        while (len < CONF_MAX_FILE_SIZE + 1) {
                ssize_t n = read(fd, buf + len, CONF_MAX_FILE_SIZE + 1 - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int r = -errno;
                        return err_set(err, r, "%s: %s", path, strerror(-r));
                }
                if (n == 0)
                        break;
                len += (size_t) n;
        }
        int r = conf_parse_string(buf, len, path, ret, err);
        explicit_bzero(buf, len);       /* the file's text may hold secrets */
        return r;
}

/* Finds the entry and marks it and its section used. */
static struct conf_entry *lookup(struct conf *c, const char *section, const char *name, const char *key) {
        struct conf_section *s = find_section(c, section, name);
        uint32_t *slot;

        if (!s || !key)
                return NULL;
        s->used = true;
        slot = ent_slot(c, (size_t) (s - c->secs), key);
        if (!*slot)
                return NULL;
        c->ents[*slot - 1].used = true;
        return &c->ents[*slot - 1];
}

int conf_get_string(struct conf *c, const char *section, const char *name, const char *key,
                    const char *def, size_t maxlen, const char **ret, struct err *err) {
        struct conf_entry *e = lookup(c, section, name, key);

        if (!e) {
                *ret = def;
                return 0;
        }
        if (strlen(e->value) > maxlen)
                return conf_error(c->name, e->line, err, "%s: value too long (max %zu bytes)", key,
                                  maxlen);
        *ret = e->value;
        return 0;
}

int conf_get_int(struct conf *c, const char *section, const char *name, const char *key, int64_t def,
                 int64_t min, int64_t max, int64_t *ret, struct err *err) {
        struct conf_entry *e = lookup(c, section, name, key);
        int64_t v;
        int r;

        if (!e) {
                *ret = def;
                return 0;
        }
        r = safe_atoi64(e->value, &v);
        if (r == -EINVAL)
                return conf_error(c->name, e->line, err,
                                  "%s: '%.64s' is not an integer (expected an integer from %" PRId64 " to %" PRId64 ")",
                                  key, e->value, min, max);
        if (r < 0 || v < min || v > max)
                return conf_error(c->name, e->line, err,
                                  "%s: %.64s is out of range (expected an integer from %" PRId64 " to %" PRId64 ")",
                                  key, e->value, min, max);
        *ret = v;
        return 0;
}

int conf_get_bool(struct conf *c, const char *section, const char *name, const char *key, bool def,
                  bool *ret, struct err *err) {
        static const char *const yes[] = { "true", "yes", "on", "1" }, *const no[] = { "false", "no", "off", "0" };
        struct conf_entry *e = lookup(c, section, name, key);

        if (!e) {
                *ret = def;
                return 0;
        }
        for (size_t i = 0; i < ELEMENTSOF(yes); i++) {
                if (strcasecmp(e->value, yes[i]) == 0) {
                        *ret = true;
                        return 0;
                }
                if (strcasecmp(e->value, no[i]) == 0) {
                        *ret = false;
                        return 0;
                }
        }
        return conf_error(c->name, e->line, err,
                          "%s: '%.64s' is not a boolean (expected true/false, yes/no, on/off or 1/0)", key,
                          e->value);
}

/* Shortest exact rendering with the largest unit that divides v. */
static void fmt_units(uint64_t v, const char *const *names, const uint64_t *factors, size_t n, char *out,
                      size_t outlen) {
        for (size_t i = n; i-- > 0;)
                if (v != 0 && factors[i] > 1 && v % factors[i] == 0) {
                        snprintf(out, outlen, "%" PRIu64 "%s", v / factors[i], names[i]);
                        return;
                }
        snprintf(out, outlen, "%" PRIu64 "%s", v, names[0]);
}

static const char *const size_names[] = { "", "K", "M", "G", "T" };
static const uint64_t size_factors[] = { 1, 1ULL << 10, 1ULL << 20, 1ULL << 30, 1ULL << 40 };
static const char *const dur_names[] = { "ms", "s", "m", "h", "d" };
static const uint64_t dur_factors[] = { 1, 1000, 60000, 3600000, 86400000 };

static int get_units(struct conf *c, const char *section, const char *name, const char *key, uint64_t def,
                     uint64_t min, uint64_t max, uint64_t *ret, struct err *err, bool duration) {
        struct conf_entry *e = lookup(c, section, name, key);
        const char *const *names = duration ? dur_names : size_names;
        const uint64_t *factors = duration ? dur_factors : size_factors;
        size_t n = duration ? ELEMENTSOF(dur_names) : ELEMENTSOF(size_names);
        const char *what = duration ? "a duration" : "a size";
        const char *example = duration ? "like 250ms, 30s, 5m, 2h or 1d" : "like 512, 64K, 50M or 2G";
        char smin[32], smax[32];
        uint64_t v;
        int r;

        if (!e) {
                *ret = def;
                return 0;
        }
        r = duration ? parse_duration_ms(e->value, &v) : parse_size(e->value, &v);
        fmt_units(min, names, factors, n, smin, sizeof(smin));
        fmt_units(max, names, factors, n, smax, sizeof(smax));
        if (r == -EINVAL)
                return conf_error(c->name, e->line, err, "%s: '%.64s' is not %s (expected %s %s, from %s to %s)",
                                  key, e->value, what, what, example, smin, smax);
        if (r < 0 || v < min || v > max)
                return conf_error(c->name, e->line, err, "%s: %.64s is out of range (expected %s from %s to %s)",
                                  key, e->value, what, smin, smax);
        *ret = v;
        return 0;
}

int conf_get_size(struct conf *c, const char *section, const char *name, const char *key, uint64_t def,
                  uint64_t min, uint64_t max, uint64_t *ret, struct err *err) {
        return get_units(c, section, name, key, def, min, max, ret, err, false);
}

int conf_get_duration_ms(struct conf *c, const char *section, const char *name, const char *key,
                         uint64_t def, uint64_t min, uint64_t max, uint64_t *ret, struct err *err) {
        return get_units(c, section, name, key, def, min, max, ret, err, true);
}

int conf_get_list(struct conf *c, const char *section, const char *name, const char *key, size_t max_items,
                  size_t max_item_len, char ***ret, struct err *err) {
        struct conf_entry *e = lookup(c, section, name, key);
        _cleanup_strv_free_ char **v = NULL;
        size_t n = 0;
        const char *p;

        if (!e) {
                *ret = NULL;
                return 0;
        }
        v = xnew0(char *, 1);
        p = e->value;
        while (*p && is_ws(*p))
                p++;
        if (*p == 0) {
                *ret = TAKE_PTR(v);
                return 0;
        }
        for (;;) {
                const char *s = p, *end = strchrnul(p, ',');
                const char *te = end;

                while (s < te && is_ws(*s))
                        s++;
                while (te > s && is_ws(te[-1]))
                        te--;
                if (te == s)
                        return conf_error(c->name, e->line, err,
                                          "%s: empty item %zu in list (expected comma-separated values)", key, n + 1);
                if (n >= max_items)
                        return conf_error(c->name, e->line, err, "%s: too many items (max %zu)", key,
                                          max_items);
                if ((size_t) (te - s) > max_item_len)
                        return conf_error(c->name, e->line, err,
                                          "%s: item %zu too long (max %zu bytes)", key, n + 1, max_item_len);
                v = xrealloc(v, (n + 2) * sizeof(char *));
                v[n++] = xstrndup(s, (size_t) (te - s));
                v[n] = NULL;
                if (*end == 0)
                        break;
                p = end + 1;
        }
        *ret = TAKE_PTR(v);
        return (int) n;
}

int conf_subsections(struct conf *c, const char *section, char ***ret) {
        char **v = xnew0(char *, 1);
        size_t n = 0;

        for (size_t i = 0; c && section && i < c->n_secs; i++) {
                struct conf_section *s = &c->secs[i];
                if (!s->name || strcmp(s->section, section) != 0)
                        continue;
                s->used = true;
                v = xrealloc(v, (n + 2) * sizeof(char *));
                v[n++] = xstrdup(s->name);
                v[n] = NULL;
        }
        *ret = v;
        return (int) n;
}

bool conf_has_section(struct conf *c, const char *section, const char *name) {
        struct conf_section *s = find_section(c, section, name);
        if (s)
                s->used = true;
        return s != NULL;
}

static void fmt_section(const struct conf_section *s, char *out, size_t outlen) {
        if (s->name)
                snprintf(out, outlen, "[%s \"%s\"]", s->section, s->name);
        else
                snprintf(out, outlen, "[%s]", s->section);
}

int conf_check_unused(struct conf *c, struct err *err) {
        const struct conf_section *bad_sec = NULL;
        const struct conf_entry *bad_ent = NULL;
        char sec[CONF_MAX_NAME * 2 + 8];

        if (!c)
                return 0;
        for (size_t i = 0; i < c->n_secs; i++)
                if (!c->secs[i].used && (!bad_sec || c->secs[i].line < bad_sec->line))
                        bad_sec = &c->secs[i];
        /* Entries of an unknown section come after its header, so the section wins. */
        for (size_t i = 0; i < c->n_ents; i++)
                if (!c->ents[i].used && (!bad_ent || c->ents[i].line < bad_ent->line))
                        bad_ent = &c->ents[i];
        if (bad_sec && (!bad_ent || bad_sec->line <= bad_ent->line)) {
                fmt_section(bad_sec, sec, sizeof(sec));
                return conf_error(c->name, bad_sec->line, err, "unknown section %s", sec);
        }
        if (bad_ent) {
                fmt_section(&c->secs[bad_ent->sec], sec, sizeof(sec));
                return conf_error(c->name, bad_ent->line, err, "unknown key '%s' in %s", bad_ent->key, sec);
        }
        return 0;
}
