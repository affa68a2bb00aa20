/* fault.c — see fault.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"

void fault_point(const char *name) {
        const char *want = getenv("PADDOCK_FAULT");
        if (!want || strcmp(want, name) != 0)
                return;
        fprintf(stderr, "fault: PADDOCK_FAULT=%s: killing this process here\n", name);
        fflush(stderr);
        kill(getpid(), SIGKILL);
        _exit(137);
}
