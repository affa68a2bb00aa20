/* cleanup.h — scope-bound cleanup and allocation that aborts on OOM.
 *
 * Every _cleanup_ variable must be initialised at declaration. Destructors
 * accept NULL. TAKE_PTR() hands ownership out of a cleanup-scoped variable.
 */
#pragma once

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <stdio.h>
#include <cjson/cJSON.h>

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _noreturn_ __attribute__((noreturn))
#define _warn_unused_ __attribute__((warn_unused_result))

#define ELEMENTSOF(x) (sizeof(x) / sizeof((x)[0]))

#define TAKE_PTR(p) ({ __typeof__(p) _tp_ = (p); (p) = NULL; _tp_; })
#define TAKE_FD(fd) ({ int _tf_ = (fd); (fd) = -1; _tf_; })
/* The value of struct s, leaving s zeroed (so its _cleanup_ destructor frees nothing). */
#define TAKE_STRUCT(s) ({ __typeof__(s) _ts_ = (s); (s) = (__typeof__(s)) {}; _ts_; })

#define DEFINE_TRIVIAL_CLEANUP_FUNC(type, func)            \
        static inline void func##p(type *p) {              \
                if (*p)                                    \
                        func(*p);                          \
        }

static inline void freep(void *p) { free(*(void **) p); }
#define _cleanup_free_ _cleanup_(freep)

/* Frees every pointer given, in order: a destructor's field list in one statement. */
static inline void free_array(void *const *p, size_t n) {
        for (size_t i = 0; i < n; i++)
                free(p[i]);
}
#define free_many(...) free_array((void *const[]) { __VA_ARGS__ }, ELEMENTSOF(((void *const[]) { __VA_ARGS__ })))

static inline void closep(int *fd) {
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}
#define _cleanup_close_ _cleanup_(closep)

DEFINE_TRIVIAL_CLEANUP_FUNC(FILE *, fclose)
#define _cleanup_fclose_ _cleanup_(fclosep)
DEFINE_TRIVIAL_CLEANUP_FUNC(cJSON *, cJSON_Delete)
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

/* Allocation failure is not a recoverable condition in our daemons. */
_noreturn_ void oom(void);
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
char *xasprintf(const char *fmt, ...) _printf_(1, 2);
#define xnew0(type, n) ((type *) xcalloc((n), sizeof(type)))
/* p, or oom() when p is NULL: for allocators that are not ours (libnftnl's *_alloc,
 * cJSON's printers), so their failure ends the same way as xmalloc's. */
static inline void *xnonnull(void *p) {
        if (!p)
                oom();
        return p;
}
