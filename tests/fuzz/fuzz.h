/* fuzz.h — shared bits of the libFuzzer targets in tests/fuzz/.
 *
 * Each fuzz-<name>.c defines LLVMFuzzerTestOneInput and is linked with
 * -fsanitize=fuzzer,address,undefined against libpj/libcommon built the same way
 * (make fuzz-targets). A target checks more than "does not crash": each states
 * properties of its code under test (round trips, contracts) and FUZZ_ASSERT aborts
 * with a message when one breaks, which libFuzzer reports as a crash with the input. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond, ...)                                                         \
        do {                                                                           \
                if (!(cond)) {                                                         \
                        fprintf(stderr, "%s:%d: property failed: %s: ", __FILE__, __LINE__, #cond); \
                        fprintf(stderr, __VA_ARGS__);                                  \
                        fputc('\n', stderr);                                           \
                        abort();                                                       \
                }                                                                      \
        } while (0)
