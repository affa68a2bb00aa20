/* runtime.c — exec, code and files (placeholder until runtime operations land). */
#include "http.h"

enum MHD_Result runtime_prepare(struct req *r, bool *ret_answered) {
        (void) r;
        *ret_answered = false;
        return MHD_YES;
}

bool runtime_dispatch(struct req *r, enum MHD_Result *ret) {
        (void) r;
        (void) ret;
        return false;
}
