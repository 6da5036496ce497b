/*
 * Checksums at memory speed (hash.h): xxh3 dispatched to AVX2 or AVX-512 at run time,
 * and a pool of threads over many buffers. One xxh3 pass on one core reads
 * 12-15 GB/s with SSE2 and 25-30 with AVX2; the page cache of this
 * project's machines is read at 20-30 GB/s with two threads, so both the
 * vector path and the threads are needed for verify to keep up with it
 * (bench/results/latest.md, "verify").
 */
#define _GNU_SOURCE
#include "hash.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "format.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#  define HURRAY_HAVE_VECTOR_UNITS 1
uint64_t hurray__xxh3_avx2_one(const void *data, size_t len);
void hurray__xxh3_avx2_update(XXH3_state_t *state, const void *data, size_t len);
uint64_t hurray__xxh3_avx2_digest(const XXH3_state_t *state);
uint64_t hurray__xxh3_avx512_one(const void *data, size_t len);
void hurray__xxh3_avx512_update(XXH3_state_t *state, const void *data, size_t len);
uint64_t hurray__xxh3_avx512_digest(const XXH3_state_t *state);
#endif

/* Below this many bytes a thread costs more than it saves (starting one is
 * 20-50 us; 1 MiB hashes in 40-80 us). */
#define HURRAY_HASH_THREAD_MIN_BYTES (1u << 20)

/* The code paths, widest last. Bytes from memory never take the AVX-512
 * unit (hash_avx512.c): PATH_AVX512 means AVX-512 for bytes in the cache
 * and AVX2 for the rest. */
enum { PATH_UNCHOSEN, PATH_SSE2, PATH_AVX2, PATH_AVX512 };

/* Chosen once: a getenv per checksum would cost more than hashing a small
 * buffer (20,000-tensor files). Any thread may choose; they all choose the
 * same. */
static atomic_int dispatch;

static int choose_path(void) {
#ifdef HURRAY_HAVE_VECTOR_UNITS
  __builtin_cpu_init();
  int widest = PATH_SSE2;
  if (__builtin_cpu_supports("avx2")) {
    widest = __builtin_cpu_supports("avx512f") ? PATH_AVX512 : PATH_AVX2;
  }
  const char *forced = getenv("HURRAY_HASH_SIMD");
  if (forced != NULL && strcmp(forced, "sse2") == 0) return PATH_SSE2;
  if (forced != NULL && strcmp(forced, "avx2") == 0 && widest > PATH_AVX2) return PATH_AVX2;
  return widest;
#else
  return PATH_SSE2;
#endif
}

static int path(void) {
  int chosen = atomic_load_explicit(&dispatch, memory_order_relaxed);
  if (chosen == PATH_UNCHOSEN) {
    chosen = choose_path();
    atomic_store_explicit(&dispatch, chosen, memory_order_relaxed);
  }
  return chosen;
}

void hurray__hash_reset_dispatch(void) { atomic_store(&dispatch, PATH_UNCHOSEN); }

const char *hurray__hash_path(void) {
  static const char *const names[] = {"sse2", "sse2", "avx2", "avx512"};
  return names[path()];
}

/* The unit for bytes that come from memory: never AVX-512 (hash_avx512.c). */
static int memory_unit(void) {
  int unit = path();
  return unit == PATH_AVX512 ? PATH_AVX2 : unit;
}

/* Up to XXH3_MIDSIZE_MAX bytes xxh3 runs no vector code, so every path is
 * the same code. Above it the AVX2 path is faster from the first stripe
 * on: 512 B to 2 KiB hash at 18-39 GB/s against 12-19 with SSE2 (this
 * library's build, one core), and for files of many small tensors (a
 * quarter of them under 4 KiB) that took verify from 10.2 to 11.1 GB/s. */
static uint64_t checksum_on(int unit, const void *data, size_t len) {
#ifdef HURRAY_HAVE_VECTOR_UNITS
  if (len > XXH3_MIDSIZE_MAX) {
    if (unit == PATH_AVX512) return hurray__xxh3_avx512_one(data, len);
    if (unit == PATH_AVX2) return hurray__xxh3_avx2_one(data, len);
  }
#else
  (void)unit;
#endif
  return XXH3_64bits(data, len);
}

uint64_t hurray__checksum(const void *data, size_t len) {
  return checksum_on(memory_unit(), data, len);
}

uint64_t hurray__checksum_cached(const void *data, size_t len) {
  return checksum_on(path(), data, len);
}

static void stream_reset_on(HurrayHashStream *s, int unit) {
  (void)XXH3_64bits_reset(&s->state); /* fails only for a NULL state */
  s->unit = (uint8_t)unit;
}

void hurray__hash_stream_reset(HurrayHashStream *s) { stream_reset_on(s, memory_unit()); }

void hurray__hash_stream_reset_cached(HurrayHashStream *s) { stream_reset_on(s, path()); }

void hurray__hash_stream_update(HurrayHashStream *s, const void *data, size_t len) {
#ifdef HURRAY_HAVE_VECTOR_UNITS
  if (s->unit == PATH_AVX512) {
    hurray__xxh3_avx512_update(&s->state, data, len);
    return;
  }
  if (s->unit == PATH_AVX2) {
    hurray__xxh3_avx2_update(&s->state, data, len);
    return;
  }
#endif
  (void)XXH3_64bits_update(&s->state, data, len); /* fails only for NULL input */
}

uint64_t hurray__hash_stream_digest(const HurrayHashStream *s) {
#ifdef HURRAY_HAVE_VECTOR_UNITS
  if (s->unit == PATH_AVX512) return hurray__xxh3_avx512_digest(&s->state);
  if (s->unit == PATH_AVX2) return hurray__xxh3_avx2_digest(&s->state);
#endif
  return XXH3_64bits_digest(&s->state);
}

unsigned hurray__hash_threads(void) {
  return hurray__hash_threads_of(sysconf(_SC_NPROCESSORS_ONLN));
}

unsigned hurray__hash_threads_of(long cpus) {
  const char *knob = getenv("HURRAY_HASH_THREADS");
  if (knob != NULL && knob[0] != '\0') {
    char *end = NULL;
    unsigned long n = strtoul(knob, &end, 10);
    if (end != NULL && *end == '\0' && n >= 1) return n > 64 ? 64u : (unsigned)n;
  }
  if (cpus < 1) return 1;
  return cpus > 8 ? 8u : (unsigned)cpus;
}

typedef struct Pool {
  HurrayHashJob *jobs;
  size_t n;
  atomic_size_t next;
  const HurrayHashHooks *hooks;
  unsigned threads;
  uint8_t *scratch;     /* threads x hooks->scratch_bytes, or NULL */
  atomic_uint joined;   /* hands each thread its share of scratch */
  pthread_mutex_t lock; /* with `ended`: the calling thread waits (idle) */
  pthread_cond_t ended;
  clockid_t clock;  /* the clock `ended` is waited on with */
  bool has_cond;    /* `ended` was made */
  unsigned running; /* started threads still hashing, under lock */
} Pool;

/* Large buffers are claimed several at a time: half an even share of the
 * jobs left (1 / (2 x threads) of them, so that claims shrink as the work
 * runs out and the threads end together; all of them on one thread), and at
 * most this many bytes unless one buffer is larger. Verify lets go of each
 * claim's pieces of 4 MiB and more with one madvise, which interrupts the
 * CPU of every other hashing thread to flush its TLB: one claim per 4 MiB
 * buffer or chunk made 1 GiB verify at 0.88-0.94x of a plain read of the
 * same mapping on the 2-CPU VM, claims of up to 64 MiB at 0.97-1.00x
 * (interleaved pairs against build/bench/mem_read_rate --file). */
#define HURRAY_HASH_LARGE_CLAIM_BYTES ((size_t)64 << 20)

/* The end of the claim that starts at job i (i < n). */
static size_t claim_end(const Pool *p, size_t i) {
  size_t bytes = 0, end = i;
  if (p->jobs[i].len >= HURRAY_HASH_CLAIM_BYTES) {
    size_t left = p->n - i;
    size_t share = p->threads == 1 ? left : left / (2 * (size_t)p->threads);
    do {
      bytes += p->jobs[end].len;
      end++;
    } while (end < p->n && end - i < share && p->jobs[end].len >= HURRAY_HASH_CLAIM_BYTES &&
             bytes + p->jobs[end].len <= HURRAY_HASH_LARGE_CLAIM_BYTES);
    return end;
  }
  while (end < p->n && bytes < HURRAY_HASH_CLAIM_BYTES &&
         p->jobs[end].len < HURRAY_HASH_CLAIM_BYTES) {
    bytes += p->jobs[end].len;
    end++;
  }
  return end;
}

/* A thread hashes a copy of its claim's jobs, this many at a time, and
 * writes the sums back after them. Reading each job from the shared array
 * between hashes, as this did before, made two threads hash 64 KiB buffers
 * of the page cache at 28-30 GB/s where the same loop over a copy reached
 * 34-35, the rate of a plain read of the mapping (16,384 buffers in 1 GiB,
 * 2-CPU VM, Intel Xeon; File.verify() of bench_verify.py's small buffers
 * went from 26.0 to 30.3 GB/s, its large ones were unchanged). Leaving out
 * the stores of the sums recovered only part of it; without performance
 * counters in the VM the cause was not pinned down further. */
#define HASH_CLAIM_COPY 64

void hurray__hash_claim(HurrayHashJob *jobs, size_t n) {
  HurrayHashJob copy[HASH_CLAIM_COPY];
  for (size_t at = 0; at < n; at += HASH_CLAIM_COPY) {
    size_t m = n - at < HASH_CLAIM_COPY ? n - at : HASH_CLAIM_COPY;
    memcpy(copy, jobs + at, m * sizeof *copy);
    for (size_t k = 0; k < m; k++) copy[k].sum = hurray__checksum(copy[k].data, copy[k].len);
    for (size_t k = 0; k < m; k++) jobs[at + k].sum = copy[k].sum;
  }
}

static void *pool_worker(void *arg) {
  Pool *p = arg;
  unsigned me = atomic_fetch_add_explicit(&p->joined, 1, memory_order_relaxed);
  size_t scratch_bytes = p->scratch != NULL ? p->hooks->scratch_bytes : 0;
  void *scratch = p->scratch != NULL ? p->scratch + (size_t)me * scratch_bytes : NULL;
  size_t i = atomic_load_explicit(&p->next, memory_order_relaxed);
  for (;;) {
    if (i >= p->n) return NULL;
    size_t end = claim_end(p, i);
    /* On failure i is reloaded with the claim another thread made. */
    if (!atomic_compare_exchange_weak(&p->next, &i, end)) continue;
    if (p->hooks->before != NULL) p->hooks->before(p->hooks->ctx, p->jobs + i, end - i);
    if (p->hooks->hash != NULL) {
      p->hooks->hash(p->hooks->ctx, p->jobs + i, end - i, scratch, scratch_bytes);
    } else {
      hurray__hash_claim(p->jobs + i, end - i);
    }
    if (p->hooks->done != NULL) p->hooks->done(p->hooks->ctx, p->jobs + i, end - i);
    i = atomic_load_explicit(&p->next, memory_order_relaxed);
  }
}

/* A started thread: the pool's work, then word to a calling thread that
 * waits in wait_idle. */
static void *pool_thread(void *arg) {
  Pool *p = arg;
  pool_worker(p);
  pthread_mutex_lock(&p->lock);
  p->running--;
  if (p->has_cond) pthread_cond_signal(&p->ended);
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* The calling thread, out of claims: runs hooks->idle now and about every
 * millisecond while another thread still hashes. */
static void wait_idle(Pool *p) {
  pthread_mutex_lock(&p->lock);
  while (p->running > 0) {
    pthread_mutex_unlock(&p->lock);
    p->hooks->idle(p->hooks->ctx);
    pthread_mutex_lock(&p->lock);
    if (p->running == 0) break;
    struct timespec until;
    clock_gettime(p->clock, &until);
    until.tv_nsec += 1000000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    (void)pthread_cond_timedwait(&p->ended, &p->lock, &until);
  }
  pthread_mutex_unlock(&p->lock);
}

void hurray__hash_many(HurrayHashJob *jobs, size_t n) {
  hurray__hash_many_on(jobs, n, hurray__hash_threads());
}

void hurray__hash_many_on(HurrayHashJob *jobs, size_t n, unsigned threads) {
  static const HurrayHashHooks none = {NULL, NULL, NULL, NULL, NULL, 0, NULL};
  hurray__hash_many_with(jobs, n, threads, &none);
}

void hurray__hash_many_with(HurrayHashJob *jobs, size_t n, unsigned threads,
                            const HurrayHashHooks *hooks) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += jobs[i].len;
  if (threads == 0) threads = 1;
  if (threads > 64) threads = 64;
  if (threads > n) threads = (unsigned)(n > 0 ? n : 1);
  if (total < HURRAY_HASH_THREAD_MIN_BYTES) threads = 1;
  /* One allocation for every thread's scratch, made here: from the
   * calling thread's heap, which keeps and reuses it from call to call,
   * where a thread's own would be a fresh arena's pages each time. */
  uint8_t *scratch = NULL;
  if (hooks->hash != NULL && hooks->scratch_bytes > 0 &&
      hooks->scratch_bytes <= SIZE_MAX / threads) {
    scratch = malloc(hooks->scratch_bytes * threads);
  }
  Pool pool = {.jobs = jobs,
               .n = n,
               .hooks = hooks,
               .threads = threads,
               .scratch = scratch,
               .lock = PTHREAD_MUTEX_INITIALIZER};
  /* Waited on with a deadline of the monotonic clock: one of the wall
   * clock, stepped back meanwhile, would stop the idle calls for as long. */
  pthread_condattr_t attr;
  bool has_attr = pthread_condattr_init(&attr) == 0;
  pool.clock = has_attr && pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 ? CLOCK_MONOTONIC
                                                                                  : CLOCK_REALTIME;
  pool.has_cond = pthread_cond_init(&pool.ended, has_attr ? &attr : NULL) == 0;
  if (has_attr) pthread_condattr_destroy(&attr);
  atomic_init(&pool.next, 0);
  atomic_init(&pool.joined, 0);
  pthread_t ids[64];
  bool started[64] = {false};
  for (unsigned t = 1; t < threads; t++) {
    /* Counted before it starts, since it may be done before this goes on. */
    pthread_mutex_lock(&pool.lock);
    pool.running++;
    pthread_mutex_unlock(&pool.lock);
    started[t] = pthread_create(&ids[t], NULL, pool_thread, &pool) == 0;
    if (!started[t]) {
      pthread_mutex_lock(&pool.lock);
      pool.running--;
      pthread_mutex_unlock(&pool.lock);
    }
  }
  if (hooks->meanwhile != NULL) hooks->meanwhile(hooks->ctx);
  pool_worker(&pool);
  if (hooks->idle != NULL && pool.has_cond) wait_idle(&pool);
  for (unsigned t = 1; t < threads; t++) {
    if (started[t]) pthread_join(ids[t], NULL);
  }
  if (pool.has_cond) pthread_cond_destroy(&pool.ended);
  pthread_mutex_destroy(&pool.lock);
  free(scratch);
}
