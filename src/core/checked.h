/*
 * Overflow-checked size arithmetic. Every product or sum that sizes memory,
 * or that comes from untrusted bytes, goes through these.
 */
#ifndef HURRAY_SRC_CHECKED_H
#define HURRAY_SRC_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Each returns false, leaving *out unspecified, when the result overflows. */
static inline bool hurray__mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

/* The product of shape[0..rank) into *out: false, with the dimension where
 * it first overflowed in *at, only when it does not fit 64 bits. A shape
 * holding a 0 has 0 elements wherever the 0 is (descriptor-encoding.md
 * 9.2: the product decides), so (2^40, 2^40, 0) fits as (0, 2^40, 2^40). */
static inline bool hurray__numel_u64(const uint64_t *shape, uint32_t rank, uint64_t *out,
                                     uint32_t *at) {
  for (uint32_t i = 0; i < rank; i++) {
    if (shape[i] == 0) {
      *out = 0;
      return true;
    }
  }
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; i++) {
    if (__builtin_mul_overflow(n, shape[i], &n)) {
      *at = i;
      return false;
    }
  }
  *out = n;
  return true;
}

static inline bool hurray__add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* ceil(a / b) for b > 0, without the a + b - 1 overflow. */
static inline uint64_t hurray__ceil_div_u64(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0);
}

/* Whether n bytes can be one object of this process: pointer differences
 * inside an object must fit ptrdiff_t. Sizes from files are 64-bit; on a
 * 32-bit host a file or buffer past 2 GiB fails here instead of wrapping
 * when it becomes a size_t. Always true for real sizes on 64-bit hosts. */
static inline bool hurray__fits_object(uint64_t n) { return n <= (uint64_t)PTRDIFF_MAX; }

static inline bool hurray__is_pow2_u64(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

#endif
