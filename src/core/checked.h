/*
 * Overflow-checked size arithmetic. Every product or sum that sizes memory,
 * or that comes from untrusted bytes, goes through these.
 */
#ifndef HURRAY_SRC_CHECKED_H
#define HURRAY_SRC_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

/* Each returns false, leaving *out unspecified, when the result overflows. */
static inline bool hurray__mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static inline bool hurray__add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* ceil(a / b) for b > 0, without the a + b - 1 overflow. */
static inline uint64_t hurray__ceil_div_u64(uint64_t a, uint64_t b) {
  return a / b + (a % b != 0);
}

static inline bool hurray__is_pow2_u64(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

#endif
