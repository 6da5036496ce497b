/*
 * xxh3-64 compiled for AVX-512, for bytes already in the CPU's cache only
 * (hash.h, hurray__checksum_cached): verify copies a file into a 512 KiB
 * scratch per thread with pread and hashes it there (ADR-0031). One Zen 5
 * core hashed 512 KiB in L2 at 80 GB/s this way, against 57-59 with the
 * AVX2 unit, but read a 1 GiB buffer from memory at 24 GB/s against 35:
 * the AVX2 unit stays the choice for bytes that come from memory
 * (2026-12-08, xxhash 0.8.1, GCC 12; the same prefetch distances from 384
 * to 6144 bytes, and none, gave the same figures). The target is set by
 * pragma, as in hash_avx2.c.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  if defined(__clang__)
#    pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#  else
#    pragma GCC target("avx512f")
#  endif
#  ifndef XXH_INLINE_ALL
#    define XXH_INLINE_ALL
#  endif
#  define XXH_VECTOR 3 /* XXH_AVX512 */
/* The bytes are in L2 already: a prefetch has nothing to fetch. */
#  define XXH_NO_PREFETCH 1
#  include <immintrin.h>
#  include <xxhash.h>
#  if defined(__clang__)
#    pragma clang attribute pop
#  endif

#  if defined(__clang__)
#    define HURRAY_HASH_UNIT_FN __attribute__((target("avx512f")))
#  else
#    define HURRAY_HASH_UNIT_FN
#  endif
#  define HURRAY_HASH_UNIT avx512
#  include "hash_vector.h"
#else
typedef int hurray_hash_avx512_unused; /* ISO C: no empty translation unit */
#endif
