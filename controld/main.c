/* main.c — thin entry point so tests can link the rest of controld as a library. */
#include <malloc.h>

int controld_main(int argc, char **argv);
int main(int argc, char **argv) {
        /* glibc raises its mmap threshold each time a large block is freed (up to 32 MiB), so
         * after a few big request bodies every later one lands in a per-thread arena that
         * never shrinks: the soak test saw RSS settle at 10x its start with no leak. A fixed
         * threshold keeps large buffers in mmap, returned to the kernel on free. */
        mallopt(M_MMAP_THRESHOLD, 128 * 1024);
        return controld_main(argc, argv);
}
