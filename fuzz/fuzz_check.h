/*
 * CHECK: the fuzz targets' own invariants. A failed one aborts, so libFuzzer
 * (and the corpus replay) reports the input as a crash.
 */
#ifndef HURRAY_FUZZ_CHECK_H
#define HURRAY_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#endif
