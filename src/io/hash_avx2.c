/*
 * xxh3-64 compiled for AVX2, called by hash.c only when the CPU has AVX2
 * (about twice the SSE2 speed: 25-30 GB/s against 12-15 on this project's
 * machines, i.e. memory speed). The target is set by pragma so the file
 * builds with the library's ordinary flags; everything xxhash.h defines
 * stays static to this file (XXH_INLINE_ALL).
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  if defined(__clang__)
#    pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#  else
#    pragma GCC target("avx2")
#  endif
#  ifndef XXH_INLINE_ALL
#    define XXH_INLINE_ALL
#  endif
#  define XXH_VECTOR 2 /* XXH_AVX2 */
/* How far ahead of the stripe it folds xxh3 prefetches (xxhash.h's
 * default: 384 bytes). From memory one thread hashed a 1 GiB file at
 * 12-14 GB/s with 384 and 14-16.5 with 1024 (page cache, AMD EPYC,
 * 2026-12-03), above the 12.5 GB/s that plain loads read there. On an
 * Intel Xeon with AVX-512 (2026-12-06), two threads hashed the page cache
 * of bench_verify.py's three files at 26.3, 34.1 and 26.0 GB/s with 3072,
 * against 24.5, 32.3 and 24.6 with 1024 (2048 and 4096 were slower than
 * 3072; no prefetch at all 27.3, 28.6, 26.4), and File.verify() of them
 * ran 5-7% faster. Data already in cache (the writer's pieces) hashes as
 * fast either way. */
#  define XXH_PREFETCH_DIST 3072
/* GCC's pragma defines __AVX2__, which is what makes xxhash.h include the
 * intrinsics; clang's attribute does not, so include them here. */
#  include <immintrin.h>
#  include <xxhash.h>
#  if defined(__clang__)
#    pragma clang attribute pop
#  endif

#  if defined(__clang__)
#    define HURRAY_HASH_UNIT_FN __attribute__((target("avx2")))
#  else
#    define HURRAY_HASH_UNIT_FN
#  endif
#  define HURRAY_HASH_UNIT avx2
#  include "hash_vector.h"
#else
typedef int hurray_hash_avx2_unused; /* ISO C: no empty translation unit */
#endif
