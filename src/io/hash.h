/*
 * Checksums (xxh3-64, seed 0, ADR-0014) at memory speed: the widest vector
 * unit the CPU has, chosen once at run time, and many buffers hashed on a
 * pool of threads. The result never depends on either: xxh3 is defined
 * bit for bit, and every job is hashed whole by one thread: a buffer, or
 * one chunk of a long buffer when the file has chunk checksums (format
 * 1.1, ADR-0025; xxh3 of a whole buffer cannot be split).
 *
 * Knobs (for tests and benchmarks):
 *   HURRAY_HASH_THREADS=N  threads for hurray__hash_many, 1..64
 *                          (default: online CPUs, at most 8; 1 = no thread);
 *                          read at each call
 *   HURRAY_HASH_SIMD=sse2  force the SSE2/scalar xxh3 even where AVX2 is
 *                          there; =avx2: no AVX-512 (default: the widest
 *                          the CPU has); read at the first checksum of the
 *                          process
 */
#ifndef HURRAY_SRC_IO_HASH_H
#define HURRAY_SRC_IO_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

/* One buffer to hash; `sum` is written by hurray__hash_many. `data` is
 * where the bytes are in memory, or NULL for a job whose bytes a `hash`
 * hook reads itself, from wherever `at` says (a file offset, for verify). */
typedef struct HurrayHashJob {
  const void *data;
  size_t len;
  uint64_t sum;
  uint64_t at;
} HurrayHashJob;

/* A thread claims neighbouring small buffers together, up to this many
 * bytes: one claim per buffer made the threads fight over `next` on files
 * of many small tensors (an 8 KiB buffer hashes in a few hundred
 * nanoseconds, not much more than a contended atomic moves between cores),
 * and verify reached a quarter of the memory-read rate there. Each claim
 * also starts the hardware prefetcher afresh: two threads hashing 64 KiB
 * buffers of the page cache read 19.4 GB/s a buffer a claim, 22.0 four at
 * a time (256 KiB, the first size here) and 23.2 sixteen (1 MiB); larger
 * claims gained nothing more. A buffer this large or larger goes into a
 * claim of large buffers only. */
#define HURRAY_HASH_CLAIM_BYTES (1024u << 10)

/* The name of the xxh3 code path in use: "avx512" (AVX-512 for bytes in
 * the cache, AVX2 for the rest), "avx2" or "sse2" (the portable path on
 * other CPUs). */
const char *hurray__hash_path(void);

/* Forgets the chosen path, so the next checksum reads HURRAY_HASH_SIMD
 * again (tests only; not while other threads hash). */
void hurray__hash_reset_dispatch(void);

/* The number of threads hurray__hash_many uses (HURRAY_HASH_THREADS). */
unsigned hurray__hash_threads(void);

/* The same for a machine of `online_cpus` CPUs (sysconf's answer, read
 * once by the caller: it is a read of /sys each time, about 20 us, which a
 * loop verifying one small tensor per call would pay every call). The
 * knob is still read here, at each call. */
unsigned hurray__hash_threads_of(long online_cpus);

/* Hashes jobs[0..n) with up to hurray__hash_threads() threads (this one
 * included). Jobs are taken in order by whichever thread is free (small
 * neighbours together, up to 256 KiB a claim; large ones several at a
 * time, a shrinking share of what is left, up to 64 MiB unless one buffer
 * is larger); each
 * job's sum is the same whatever thread hashes it. If a thread cannot be
 * started its share runs here. Small totals run on this thread only. */
void hurray__hash_many(HurrayHashJob *jobs, size_t n);

/* The same with `threads` threads (1..64) instead of the knob's. */
void hurray__hash_many_on(HurrayHashJob *jobs, size_t n, unsigned threads);

/* What runs beside the hashing of hurray__hash_many_with. Any function
 * may be NULL; all get `ctx`, and may run at the same time on different
 * threads.
 *   before     each claim, right before it is hashed, on the thread that
 *              hashes it: jobs[0..count) are consecutive jobs.
 *   hash       hashes each claim instead of the pool, on the thread that
 *              claimed it: sets the sums of jobs[0..count) (consecutive
 *              jobs), with `scratch` (scratch_bytes, the thread's own for
 *              the whole call; NULL if it could not be allocated).
 *   done       each claim, right after it is hashed, on the thread that
 *              hashed it: jobs[0..count) are consecutive jobs, their sums
 *              set. Work that follows each buffer runs in parallel too.
 *   meanwhile  once, on the calling thread, after the other threads have
 *              started and before this one joins the hashing.
 *   idle       on the calling thread once it finds no claim left, then
 *              about every millisecond until the other threads are done
 *              (only while any is hashing): what only the calling thread
 *              may do, such as asking a cancel hook, goes on meanwhile. */
typedef void (*HurrayHashDone)(void *ctx, const HurrayHashJob *jobs, size_t count);
typedef void (*HurrayHashClaim)(void *ctx, HurrayHashJob *jobs, size_t count, void *scratch,
                                size_t scratch_bytes);
typedef struct HurrayHashHooks {
  HurrayHashDone done;
  void (*meanwhile)(void *ctx);
  void *ctx;
  HurrayHashDone before;
  HurrayHashClaim hash;
  size_t scratch_bytes;
  void (*idle)(void *ctx);
} HurrayHashHooks;
/* Sets the sums of jobs[0..n) on this thread, as the pool hashes a claim
 * (for a `hash` hook that finds a claim's bytes in memory after all). */
void hurray__hash_claim(HurrayHashJob *jobs, size_t n);

/* hurray__hash_many_on with `hooks` (required; borrowed for the call). */
void hurray__hash_many_with(HurrayHashJob *jobs, size_t n, unsigned threads,
                            const HurrayHashHooks *hooks);
/* One buffer's checksum fed in pieces, so that a writer can hash each
 * piece just before it writes it (the piece is then still in the CPU's
 * cache) instead of reading the whole buffer once more. The digest equals
 * hurray__checksum of the concatenated pieces, whatever the pieces' sizes
 * (xxh3's streaming form is defined to give the one-shot result), on the
 * same vector path as hurray__checksum. */
typedef struct HurrayHashStream {
  XXH3_state_t state;
  uint8_t unit; /* the vector unit chosen at reset (hash.c) */
} HurrayHashStream;

void hurray__hash_stream_reset(HurrayHashStream *s);
/* The same for pieces that are in the CPU's cache when fed: a scratch the
 * caller has just filled (hurray__checksum_cached). */
void hurray__hash_stream_reset_cached(HurrayHashStream *s);
void hurray__hash_stream_update(HurrayHashStream *s, const void *data, size_t len);
uint64_t hurray__hash_stream_digest(const HurrayHashStream *s);

#endif
