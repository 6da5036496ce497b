/*
 * Checksums on threads and vector units (src/io/hash.h, issue 19): the
 * AVX2 and SSE2 paths of xxh3 agree with xxHash's reference on every length
 * class and unaligned starts; hurray__hash_many gives the same sums with 1
 * and many threads; a file written with 1 and with 4 hashing threads is
 * the same bytes; and a damaged buffer is found, with the same message,
 * whatever thread count hashes it and in every read mode. The streaming
 * form (HurrayHashStream) gives the one-shot sum for any cut into pieces;
 * a published file gets its writeback started as it is written, and a
 * failure of that advice changes nothing; the converter checks each buffer
 * of a hurray source while it copies it, on both of its copy paths.
 *
 * Links the library's objects (hidden symbols reachable), like test_faults.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "../../src/io/format.h"
#include "../../src/io/hash.h"
#include "../../src/io/reader_origin.h"
#include "../../src/io/sys.h"
#include "../../src/io/write_pieces.h"
#include "scratch_dir.h"
#include "test_util.h"

#define TENSORS 12
/* 1.5f in little-endian binary32. */
static const uint8_t value_bytes_1_5[4] = {0x00, 0x00, 0xc0, 0x3f};
#define TENSOR_BYTES ((3u << 20) / 2) /* above the threading threshold */

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("hash");
}

static void set_threads(unsigned n) {
  char v[16];
  snprintf(v, sizeof v, "%u", n);
  setenv("HURRAY_HASH_THREADS", v, 1);
}

/* 64-byte aligned, as the writer requires of a tensor's data (malloc's
 * 16 made the writer tests pass or fail with the heap's layout); tests of
 * unaligned starts offset into it. 64 more bytes than asked. */
static uint8_t *random_bytes(size_t n, uint64_t seed) {
  uint8_t *p = aligned_alloc(64, (n + 64 + 63) / 64 * 64);
  assert_non_null(p);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n + 64; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (uint8_t)x;
  }
  return p;
}

/* HURRAY_HASH_SIMD as each test that compares the paths sets it, and the
 * path each must choose: the widest this CPU has, capped by the knob. */
#define FORCED_PATHS 3
static void force_path(size_t which) {
  static const char *const knobs[FORCED_PATHS] = {"sse2", "avx2", NULL};
  if (knobs[which] != NULL) setenv("HURRAY_HASH_SIMD", knobs[which], 1);
  else unsetenv("HURRAY_HASH_SIMD");
  hurray__hash_reset_dispatch();
  const char *widest = "sse2";
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2")) {
    widest = __builtin_cpu_supports("avx512f") ? "avx512" : "avx2";
  }
#endif
  const char *want = widest;
  if (which == 0) want = "sse2";
  if (which == 1 && strcmp(widest, "avx512") == 0) want = "avx2";
  assert_string_equal(hurray__hash_path(), want);
}

static void test_paths_agree_with_reference(void **state) {
  (void)state;
  static const size_t lengths[] = {0,
                                   1,
                                   3,
                                   4,
                                   8,
                                   9,
                                   16,
                                   17,
                                   128,
                                   129,
                                   240,
                                   241,
                                   1023,
                                   1024,
                                   4095,
                                   4096,
                                   4097,
                                   8191,
                                   65537,
                                   (1u << 20) + 13,
                                   (5u << 20) + 1};
  uint8_t *data = random_bytes((5u << 20) + 64, 1);
  for (size_t p = 0; p < FORCED_PATHS; p++) {
    force_path(p);
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
      for (size_t start = 0; start < 8; start++) {
        uint64_t want = XXH3_64bits(data + start, lengths[i]);
        assert_true(hurray__checksum(data + start, lengths[i]) == want);
        assert_true(hurray__checksum_cached(data + start, lengths[i]) == want);
      }
    }
  }
  unsetenv("HURRAY_HASH_SIMD");
  hurray__hash_reset_dispatch();
  free(data);
}

/* Any cut of a buffer into pieces, fed to the stream, gives the one-shot
 * sum, on both vector paths and from unaligned starts. */
static void test_stream_matches_checksum(void **state) {
  (void)state;
  const size_t total = (3u << 20) + 77;
  uint8_t *data = random_bytes(total + 8, 3);
  static const size_t pieces[] = {1, 7, 64, 239, 4096, 65536, 65537, (1u << 20) + 3};
  static const size_t lengths[] = {0, 1, 240, 4097, 65536, (1u << 20) + 1, (3u << 20) + 77};
  for (size_t p = 0; p < FORCED_PATHS; p++) {
    force_path(p);
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++) {
      for (size_t k = 0; k < sizeof pieces / sizeof *pieces; k++) {
        if (pieces[k] < 64 && lengths[l] > (1u << 20)) continue; /* slow, adds nothing */
        const uint8_t *at = data + k % 5;
        HurrayHashStream hs, cached;
        hurray__hash_stream_reset(&hs);
        hurray__hash_stream_reset_cached(&cached);
        for (size_t done = 0; done < lengths[l];) {
          /* Uneven pieces: every third one is one byte shorter. */
          size_t n = pieces[k] - (pieces[k] > 1 && done % 3 == 1 ? 1 : 0);
          if (n > lengths[l] - done) n = lengths[l] - done;
          hurray__hash_stream_update(&hs, at + done, n);
          hurray__hash_stream_update(&cached, at + done, n);
          done += n;
        }
        assert_true(hurray__hash_stream_digest(&hs) == XXH3_64bits(at, lengths[l]));
        assert_true(hurray__hash_stream_digest(&cached) == XXH3_64bits(at, lengths[l]));
      }
    }
  }
  unsetenv("HURRAY_HASH_SIMD");
  hurray__hash_reset_dispatch();
  free(data);
}

static void test_hash_many_same_with_any_thread_count(void **state) {
  (void)state;
  enum { JOBS = 97 };
  uint8_t *data = random_bytes(16u << 20, 2);
  HurrayHashJob jobs[JOBS];
  uint64_t want[JOBS];
  size_t at = 0;
  for (size_t i = 0; i < JOBS; i++) {
    size_t len = (i * 7919u) % (300u << 10) + (i % 3 == 0 ? 0 : 1);
    jobs[i].data = data + at + i % 5;
    jobs[i].len = len;
    want[i] = XXH3_64bits(jobs[i].data, len);
    at += len / 2;
  }
  static const unsigned counts[] = {1, 2, 3, 8, 64};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    set_threads(counts[c]);
    assert_int_equal(hurray__hash_threads(), counts[c]);
    for (size_t i = 0; i < JOBS; i++) jobs[i].sum = 0;
    hurray__hash_many(jobs, JOBS);
    for (size_t i = 0; i < JOBS; i++) assert_true(jobs[i].sum == want[i]);
  }
  /* Garbage in the knob falls back to the default. */
  setenv("HURRAY_HASH_THREADS", "lots", 1);
  assert_true(hurray__hash_threads() >= 1);
  unsetenv("HURRAY_HASH_THREADS");
  /* The default from a CPU count read once by the caller (a reader, at
   * open): every CPU up to 8, one when the count is unknown (-1), and the
   * knob, read at each call, still wins. */
  assert_int_equal(hurray__hash_threads_of(3), 3);
  assert_int_equal(hurray__hash_threads_of(96), 8);
  assert_int_equal(hurray__hash_threads_of(-1), 1);
  set_threads(5);
  assert_int_equal(hurray__hash_threads_of(2), 5);
  unsetenv("HURRAY_HASH_THREADS");
  free(data);
}

/* hurray__hash_many_with's `done`: counts how often each job is
 * reported, and checks its sum is already there. */
typedef struct DoneCount {
  const HurrayHashJob *base;
  const uint64_t *want;
  atomic_uint *seen;
  atomic_uint bad;
} DoneCount;

static void count_done(void *ctx, const HurrayHashJob *jobs, size_t count) {
  DoneCount *c = ctx;
  for (size_t k = 0; k < count; k++) {
    size_t i = (size_t)(jobs + k - c->base);
    atomic_fetch_add(&c->seen[i], 1);
    if (jobs[k].sum != c->want[i]) atomic_fetch_add(&c->bad, 1);
  }
}

/* Small buffers are claimed in runs of up to 1 MiB, and hashed from a copy
 * of the run 64 jobs at a time: runs that end on a large buffer, on the
 * last job, or mid-way through many tiny ones (and empty jobs), and runs
 * of more than 64 jobs, still give every job its own sum, exactly once,
 * in place before the run is reported done. */
static void test_hash_many_small_jobs_claimed_in_runs(void **state) {
  (void)state;
  enum { JOBS = 3001 };
  uint8_t *data = random_bytes(8u << 20, 3);
  HurrayHashJob *jobs = malloc(JOBS * sizeof *jobs);
  uint64_t *want = malloc(JOBS * sizeof *want);
  assert_non_null(jobs);
  assert_non_null(want);
  size_t at = 0;
  for (size_t i = 0; i < JOBS; i++) {
    size_t len = i % 500 == 7 ? (1u << 20) + i : i % 11 == 0 ? 0 : (i * 2654435761u) % 9000;
    if (i % 700 == 3) len = (1u << 20) - 1; /* just under a claim of its own */
    jobs[i].data = data + at % (4u << 20) + i % 7;
    jobs[i].len = len;
    want[i] = XXH3_64bits(jobs[i].data, len);
    at += len;
  }
  static const unsigned counts[] = {1, 2, 3, 8};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    for (size_t i = 0; i < JOBS; i++) jobs[i].sum = 0;
    hurray__hash_many_on(jobs, JOBS, counts[c]);
    for (size_t i = 0; i < JOBS; i++) assert_true(jobs[i].sum == want[i]);
    /* A prefix: the last claim stops at n, not at the array's end. */
    for (size_t i = 0; i < JOBS; i++) jobs[i].sum = 0;
    hurray__hash_many_on(jobs, 1234, counts[c]);
    for (size_t i = 0; i < JOBS; i++) assert_true(jobs[i].sum == (i < 1234 ? want[i] : 0));
    /* Every claim is reported once, by the thread that hashed it. */
    atomic_uint *seen = calloc(JOBS, sizeof *seen);
    assert_non_null(seen);
    DoneCount done = {jobs, want, seen, 0};
    HurrayHashHooks hooks = {count_done, NULL, &done};
    hurray__hash_many_with(jobs, JOBS, counts[c], &hooks);
    for (size_t i = 0; i < JOBS; i++) assert_int_equal(atomic_load(&seen[i]), 1);
    assert_int_equal(atomic_load(&done.bad), 0);
    free(seen);
  }
  free(want);
  free(jobs);
  free(data);
}

/* hurray__hash_many_with's hooks: every claim's first job and length,
 * and the threads `meanwhile` ran on. */
typedef struct ClaimLog {
  const HurrayHashJob *base;
  size_t start[4096], count[4096];
  atomic_size_t claims;
  atomic_uint meanwhile_calls;
  pthread_t meanwhile_thread;
} ClaimLog;

static void log_claim(void *ctx, const HurrayHashJob *jobs, size_t count) {
  ClaimLog *log = ctx;
  size_t k = atomic_fetch_add(&log->claims, 1);
  log->start[k] = (size_t)(jobs - log->base);
  log->count[k] = count;
}

static void log_meanwhile(void *ctx) {
  ClaimLog *log = ctx;
  atomic_fetch_add(&log->meanwhile_calls, 1);
  log->meanwhile_thread = pthread_self();
}

/* Orders (first job, count) pairs by their first job. */
static int compare_claims(const void *pa, const void *pb) {
  size_t a = *(const size_t *)pa, b = *(const size_t *)pb;
  return (a > b) - (a < b);
}

/* Large buffers are claimed several at a time (fewer claims, so that verify
 * lets go of their pages in fewer calls), in claims that shrink as the
 * work runs out, never above 64 MiB unless one buffer is larger, never
 * across a small buffer; they still cover every job exactly once. And
 * `meanwhile` runs once, on the calling thread, with any thread count. */
static void test_hash_many_large_jobs_claimed_in_shares(void **state) {
  (void)state;
  enum { JOBS = 400 };
  const size_t large = 1u << 20;
  uint8_t *data = random_bytes(4u << 20, 5);
  HurrayHashJob *jobs = malloc(JOBS * sizeof *jobs);
  uint64_t *want = malloc(JOBS * sizeof *want);
  ClaimLog *log = malloc(sizeof *log);
  assert_non_null(jobs);
  assert_non_null(want);
  assert_non_null(log);
  for (size_t i = 0; i < JOBS; i++) {
    /* Mostly 1 MiB; a 96 MiB one (a claim of its own) and a small one in
     * the middle of the run, which a large claim must not take in. */
    jobs[i].len = i == 150 ? 96u << 20 : i == 200 ? 1000 : large + i % 3;
    jobs[i].data = i == 150 ? NULL : data + (i * 4096) % (2u << 20);
    want[i] = 0;
  }
  uint8_t *big = malloc(96u << 20);
  assert_non_null(big);
  memset(big, 7, 96u << 20);
  jobs[150].data = big;
  for (size_t i = 0; i < JOBS; i++) want[i] = XXH3_64bits(jobs[i].data, jobs[i].len);
  static const unsigned counts[] = {1, 2, 3, 8};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    memset(log, 0, sizeof *log);
    log->base = jobs;
    for (size_t i = 0; i < JOBS; i++) jobs[i].sum = 0;
    HurrayHashHooks hooks = {log_claim, log_meanwhile, log};
    hurray__hash_many_with(jobs, JOBS, counts[c], &hooks);
    for (size_t i = 0; i < JOBS; i++) assert_true(jobs[i].sum == want[i]);
    assert_int_equal(atomic_load(&log->meanwhile_calls), 1);
    assert_true(pthread_equal(log->meanwhile_thread, pthread_self()));
    size_t claims = atomic_load(&log->claims);
    /* One claim per buffer before; a few shares per thread now. */
    assert_true(claims < JOBS / 4);
    /* Sorted by their first job, the claims tile [0, JOBS). */
    size_t *order = malloc(claims * 2 * sizeof *order);
    assert_non_null(order);
    for (size_t k = 0; k < claims; k++) {
      order[2 * k] = log->start[k];
      order[2 * k + 1] = log->count[k];
    }
    qsort(order, claims, 2 * sizeof *order, compare_claims);
    size_t next = 0;
    for (size_t k = 0; k < claims; k++) {
      size_t first = order[2 * k], count = order[2 * k + 1];
      assert_int_equal(first, next);
      assert_true(count >= 1);
      size_t bytes = 0;
      for (size_t i = first; i < first + count; i++) bytes += jobs[i].len;
      assert_true(count == 1 || bytes <= (64u << 20));
      /* The small buffer and the 96 MiB one are claims of their own. */
      if (first <= 200 && 200 < first + count) assert_int_equal(count, 1);
      if (first <= 150 && 150 < first + count) assert_int_equal(count, 1);
      next = first + count;
    }
    assert_int_equal(next, JOBS);
    /* With more than one thread the last claim is a single buffer: the
     * threads end together. */
    if (counts[c] > 1) assert_int_equal(order[2 * (claims - 1) + 1], 1);
    free(order);
  }
  free(big);
  free(log);
  free(want);
  free(jobs);
  free(data);
}

static void file_path(char *out, size_t size, const char *name) {
  snprintf(out, size, "%s/%s", dir, name);
}

static void write_sample_file(const char *path, unsigned threads) {
  set_threads(threads);
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  for (uint32_t t = 0; t < TENSORS; t++) {
    uint64_t shape[1] = {TENSOR_BYTES};
    HurrayDescriptor *d = NULL;
    assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, shape, &d, error));
    assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, TENSOR_BYTES, 64,
                                           HURRAY_SYNC_READY, NULL, error));
    uint8_t *data = aligned_alloc(64, TENSOR_BYTES);
    uint8_t *src = random_bytes(TENSOR_BYTES, 100 + t);
    memcpy(data, src, TENSOR_BYTES);
    free(src);
    HurrayBuffer *b = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(hurray_buffer_create(data, TENSOR_BYTES, free_release, NULL, &b, error));
    assert_ok(hurray_buffer_list_create(&list, error));
    assert_ok(hurray_buffer_list_push(list, b, error));
    char name[32];
    snprintf(name, sizeof name, "t%02u", t);
    assert_ok(hurray_writer_write_tensor(w, name, d, list, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  assert_ok(hurray_writer_finish(w, error));
  unsetenv("HURRAY_HASH_THREADS");
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *p = malloc(*len);
  assert_int_equal(fread(p, 1, *len, f), *len);
  fclose(f);
  return p;
}

/* What a `hash` hook saw: each thread's scratch, and its bytes written
 * over whole in every claim, so that two threads given the same scratch
 * would overwrite each other's marks (and the check below would see it). */
typedef struct ScratchLog {
  pthread_mutex_t lock;
  size_t threads;
  pthread_t thread[64];
  void *scratch[64];
  atomic_size_t claims;
  bool shared;
} ScratchLog;

static void hash_with_scratch(void *ctx, HurrayHashJob *jobs, size_t count, void *scratch,
                              size_t bytes) {
  ScratchLog *log = ctx;
  assert_non_null(scratch);
  assert_int_equal(bytes, 4096);
  uint8_t mark = (uint8_t)(uintptr_t)pthread_self();
  memset(scratch, mark, bytes);
  pthread_mutex_lock(&log->lock);
  size_t k = 0;
  while (k < log->threads && !pthread_equal(log->thread[k], pthread_self())) k++;
  if (k == log->threads && k < 64) {
    log->thread[k] = pthread_self();
    log->scratch[k] = scratch;
    log->threads++;
  }
  for (size_t j = 0; j < log->threads; j++) {
    if (j != k && log->scratch[j] == scratch) log->shared = true;
  }
  if (k < 64 && log->scratch[k] != scratch) log->shared = true;
  pthread_mutex_unlock(&log->lock);
  for (size_t i = 0; i < count; i++) jobs[i].sum = XXH3_64bits(jobs[i].data, jobs[i].len) ^ 1;
  for (size_t i = 0; i < bytes; i++) {
    if (((uint8_t *)scratch)[i] != mark) log->shared = true;
  }
  atomic_fetch_add(&log->claims, 1);
}

/* A `hash` hook hashes every claim instead of the pool (its sums are the
 * ones kept), each thread with a scratch of its own for the whole call,
 * on any thread count. */
static void test_hash_hook_replaces_the_pool(void **state) {
  (void)state;
  enum { JOBS = 300 };
  uint8_t *data = random_bytes(8u << 20, 11);
  HurrayHashJob jobs[JOBS];
  for (size_t i = 0; i < JOBS; i++) {
    jobs[i].data = data + (i * 8192) % (6u << 20);
    jobs[i].len = i % 2 ? 20000 : (1u << 20) + i;
    jobs[i].at = i;
  }
  static const unsigned counts[] = {1, 2, 3, 8};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    ScratchLog log = {.lock = PTHREAD_MUTEX_INITIALIZER};
    atomic_init(&log.claims, 0);
    HurrayHashHooks hooks = {.ctx = &log, .hash = hash_with_scratch, .scratch_bytes = 4096};
    for (size_t i = 0; i < JOBS; i++) jobs[i].sum = 0;
    hurray__hash_many_with(jobs, JOBS, counts[c], &hooks);
    for (size_t i = 0; i < JOBS; i++) {
      assert_true(jobs[i].sum == (XXH3_64bits(jobs[i].data, jobs[i].len) ^ 1));
    }
    assert_false(log.shared);
    assert_true(log.threads >= 1 && log.threads <= counts[c]);
    assert_true(atomic_load(&log.claims) >= log.threads);
    pthread_mutex_destroy(&log.lock);
  }
  free(data);
}

static void test_written_checksums_same_with_any_thread_count(void **state) {
  (void)state;
  char one[300], four[300];
  file_path(one, sizeof one, "one.hurray");
  file_path(four, sizeof four, "four.hurray");
  write_sample_file(one, 1);
  write_sample_file(four, 4);
  size_t la, lb;
  uint8_t *a = slurp(one, &la), *b = slurp(four, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  free(a);
  free(b);
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(four, NULL, &r, error));
  assert_ok(hurray_reader_verify(r, NULL, error));
  hurray_reader_close(r);
}

/* The file offset of tensor `name`'s data buffer. */
static uint64_t data_offset(const char *path, const char *name) {
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, NULL, &r, error));
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_reader_get_tensor(r, name, &d, &list, error));
  const HurrayBuffer *b = hurray_buffer_list_get(list, 0);
  uint64_t off = 0;
  assert_true(hurray__reader_offset_of(r, hurray_buffer_data(b), hurray_buffer_size(b), &off));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);
  return off;
}

static void flip_byte(const char *path, uint64_t at) {
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  uint8_t byte;
  assert_int_equal(pread(fd, &byte, 1, (off_t)at), 1);
  byte ^= 0x5a;
  assert_int_equal(pwrite(fd, &byte, 1, (off_t)at), 1);
  close(fd);
}

/* Verifies `path` in `mode` with `threads` hashing threads; returns the
 * message of the checksum error it must report. */
static void verify_fails(const char *path, HurrayReadMode mode, unsigned threads, const char *name,
                         char *message, size_t size) {
  set_threads(threads);
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  options.mode = mode;
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, &options, &r, error));
  HurrayError e = {0};
  assert_int_equal(hurray_reader_verify(r, name, &e), HURRAY_ERR_CHECKSUM);
  snprintf(message, size, "%s", e.message);
  hurray_reader_close(r);
  unsetenv("HURRAY_HASH_THREADS");
}

/* HURRAY_VERIFY_READ's values: every claim through the mapping, every
 * claim by pread, and each claim choosing (reader.c). */
static const char *const verify_reads[] = {"map", "pread", "either"};

static void test_damage_found_by_any_thread(void **state) {
  (void)state;
  char clean[300], bad[300];
  file_path(clean, sizeof clean, "clean.hurray");
  file_path(bad, sizeof bad, "bad.hurray");
  write_sample_file(clean, 2);
  static const unsigned damaged[] = {0, 5, TENSORS - 1};
  static const HurrayReadMode modes[] = {HURRAY_READ_MMAP, HURRAY_READ_MMAP_PRIVATE,
                                         HURRAY_READ_PREAD};
  static const unsigned counts[] = {1, 2, 4};
  for (size_t k = 0; k < sizeof damaged / sizeof *damaged; k++) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", clean, bad);
    assert_int_equal(system(cmd), 0);
    char name[32];
    snprintf(name, sizeof name, "t%02u", damaged[k]);
    /* Near the end of the buffer: a thread that stopped early would miss it. */
    flip_byte(bad, data_offset(bad, name) + TENSOR_BYTES - 3);
    char want[128];
    snprintf(want, sizeof want, "tensor \"%s\" buffer 0: checksum mismatch", name);
    char first[HURRAY_ERROR_MESSAGE_BYTES] = "";
    for (size_t w = 0; w < sizeof verify_reads / sizeof *verify_reads; w++) {
      assert_int_equal(setenv("HURRAY_VERIFY_READ", verify_reads[w], 1), 0);
      for (size_t m = 0; m < 3; m++) {
        for (size_t c = 0; c < 3; c++) {
          char got[HURRAY_ERROR_MESSAGE_BYTES];
          verify_fails(bad, modes[m], counts[c], NULL, got, sizeof got);
          assert_non_null(strstr(got, want));
          if (first[0] == '\0') snprintf(first, sizeof first, "%s", got);
          assert_string_equal(got, first);
          verify_fails(bad, modes[m], counts[c], name, got, sizeof got);
          assert_string_equal(got, first);
        }
      }
    }
    assert_int_equal(unsetenv("HURRAY_VERIFY_READ"), 0);
  }
  /* Two damaged buffers: the first in index order is named, on any thread. */
  flip_byte(bad, data_offset(bad, "t03") + 1);
  for (size_t c = 0; c < 3; c++) {
    char got[HURRAY_ERROR_MESSAGE_BYTES];
    verify_fails(bad, HURRAY_READ_MMAP_PRIVATE, counts[c], NULL, got, sizeof got);
    assert_non_null(strstr(got, "tensor \"t03\""));
  }
}

/* tests/c/meson.build links this suite with --wrap=madvise: the
 * library's MADV_DONTNEED calls, counted. */
int __real_madvise(void *addr, size_t len, int advice);
int __wrap_madvise(void *addr, size_t len, int advice);
static atomic_uint dontneed_calls;
static atomic_size_t dontneed_bytes;

int __wrap_madvise(void *addr, size_t len, int advice) {
  if (advice == MADV_DONTNEED) {
    atomic_fetch_add(&dontneed_calls, 1);
    atomic_fetch_add(&dontneed_bytes, len);
  }
  return __real_madvise(addr, len, advice);
}

/* The resident KiB of this process's mappings of the file `path`
 * (/proc/self/smaps, matched by device and inode). */
static long mapped_kib(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  FILE *f = fopen("/proc/self/smaps", "r");
  assert_non_null(f);
  char line[512];
  bool ours = false;
  long kib = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long long inode = 0;
    unsigned dev_major = 0, dev_minor = 0;
    char perms[8];
    if (sscanf(line, "%*x-%*x %7s %*x %x:%x %llu", perms, &dev_major, &dev_minor, &inode) == 4) {
      ours = inode == (unsigned long long)st.st_ino && dev_major == major(st.st_dev) &&
             dev_minor == minor(st.st_dev);
    } else if (ours && strncmp(line, "Rss:", 4) == 0) {
      kib += strtol(line + 4, NULL, 10);
    }
  }
  fclose(f);
  return kib;
}

/* One uint8 tensor of `bytes` borrowed bytes, written before this returns. */
static void write_u8_tensor(HurrayWriter *w, const char *name, uint8_t *data, uint64_t bytes) {
  HurrayDescriptor *d = NULL;
  HurrayBuffer *b = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, &bytes, &d, error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, bytes, 64, HURRAY_SYNC_READY, NULL,
                                         error));
  assert_ok(hurray_buffer_create(data, bytes, NULL, NULL, &b, error));
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_list_push(list, b, error));
  assert_ok(hurray_writer_write_tensor(w, name, d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* A file of every shape of claim verify reads by pread and through the
 * mapping (reader.c): small buffers out of file order and of odd lengths
 * (neighbours read with one pread), an empty one, one longer than a
 * pread's scratch (512 KiB) but without chunk sums (read and hashed a
 * scratch at a time), and one with 4 MiB chunk sums and a short last
 * chunk. Every way of reading, in every mode, on 1 to 3 threads, passes it
 * whole and names the same damage the same way. */
static void test_every_way_of_reading_agrees(void **state) {
  (void)state;
  char path[300], bad[300];
  file_path(path, sizeof path, "ways.hurray");
  file_path(bad, sizeof bad, "ways-bad.hurray");
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  static const struct {
    const char *name;
    uint64_t bytes;
  } tensors[] = {
      {"n1", 100},  {"n10", 70 << 10},           {"n2", 1},         {"n3", 0}, {"long", 3u << 20},
      {"n4", 4099}, {"chunked", (9u << 20) + 5}, {"n5", 512u << 10}};
  enum { N = sizeof tensors / sizeof *tensors };
  for (size_t t = 0; t < N; t++) {
    uint8_t *data = random_bytes(tensors[t].bytes + 1, 700 + t);
    write_u8_tensor(w, tensors[t].name, data, tensors[t].bytes);
    free(data);
  }
  assert_ok(hurray_writer_finish(w, error));
  static const HurrayReadMode modes[] = {HURRAY_READ_MMAP, HURRAY_READ_MMAP_PRIVATE,
                                         HURRAY_READ_PREAD};
  /* Damage near a piece's start, in the middle of the long buffer, and in
   * the chunked buffer's short last chunk. */
  static const struct {
    const char *name;
    uint64_t at;
    const char *want;
  } damage[] = {{"n10", 1, "tensor \"n10\" buffer 0: checksum mismatch"},
                {"long", (3u << 20) / 2 + 7, "tensor \"long\" buffer 0: checksum mismatch"},
                {"chunked", (9u << 20) + 2, "mismatch in bytes [8388608, 9437189)"}};
  for (size_t k = 0; k <= sizeof damage / sizeof *damage; k++) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, bad);
    assert_int_equal(system(cmd), 0);
    if (k > 0) flip_byte(bad, data_offset(bad, damage[k - 1].name) + damage[k - 1].at);
    char first[HURRAY_ERROR_MESSAGE_BYTES] = "";
    for (size_t v = 0; v < sizeof verify_reads / sizeof *verify_reads; v++) {
      assert_int_equal(setenv("HURRAY_VERIFY_READ", verify_reads[v], 1), 0);
      for (size_t m = 0; m < 3; m++) {
        for (unsigned threads = 1; threads <= 3; threads++) {
          if (k == 0) {
            set_threads(threads);
            HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
            options.mode = modes[m];
            HurrayReader *r = NULL;
            assert_ok(hurray_reader_open(bad, &options, &r, error));
            assert_ok(hurray_reader_verify(r, NULL, error));
            for (size_t t = 0; t < N; t++)
              assert_ok(hurray_reader_verify(r, tensors[t].name, error));
            hurray_reader_close(r);
            continue;
          }
          char got[HURRAY_ERROR_MESSAGE_BYTES];
          verify_fails(bad, modes[m], threads, NULL, got, sizeof got);
          assert_non_null(strstr(got, damage[k - 1].want));
          if (first[0] == '\0') snprintf(first, sizeof first, "%s", got);
          assert_string_equal(got, first);
        }
      }
    }
  }
  assert_int_equal(unsetenv("HURRAY_VERIFY_READ"), 0);
  unsetenv("HURRAY_HASH_THREADS");
}

/* --wrap=pread64 and --wrap=pread (tests/c/meson.build; built with 64-bit
 * file offsets, the library's pread is glibc's pread64, and plain pread,
 * whose offset is a long, is wrapped for a C library that keeps the name):
 * a read of the file with inode eio_inode that covers byte eio_at fails
 * with EIO, as a bad sector does. */
ssize_t __real_pread64(int fd, void *buf, size_t n, off_t at);
ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t at);
ssize_t __real_pread(int fd, void *buf, size_t n, long at);
ssize_t __wrap_pread(int fd, void *buf, size_t n, long at);
static _Atomic long long eio_at = -1;
/* Reads at or past eio_at end there instead, as if the file had been cut
 * short (pread returns a short count, then 0). */
static atomic_bool eio_cuts;
static ino_t eio_inode;

/* -1: the read goes through; else what the wrapped pread returns. */
static ssize_t bad_sector_read(int fd, size_t n, off_t at) {
  long long bad = atomic_load(&eio_at);
  struct stat st;
  if (bad < 0 || bad >= (long long)at + (long long)n || fstat(fd, &st) != 0 ||
      st.st_ino != eio_inode) {
    return -1;
  }
  if (atomic_load(&eio_cuts)) {
    if (bad <= (long long)at) return 0;
    /* Reads before the cut are slow, so that a thread reading past it
     * fails before the others are done. */
    struct timespec pause = {0, 2000000};
    nanosleep(&pause, NULL);
    return -1;
  }
  if ((long long)at > bad) return -1;
  errno = EIO;
  return -2;
}

ssize_t __wrap_pread64(int fd, void *buf, size_t n, off_t at) {
  ssize_t got = bad_sector_read(fd, n, at);
  if (got == -2) return -1;
  if (got == 0) return 0;
  long long bad = atomic_load(&eio_at);
  /* A read across the cut returns the bytes before it. */
  if (atomic_load(&eio_cuts) && bad >= 0 && (long long)at < bad &&
      bad < (long long)at + (long long)n) {
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_ino == eio_inode) n = (size_t)(bad - (long long)at);
  }
  return __real_pread64(fd, buf, n, at);
}

ssize_t __wrap_pread(int fd, void *buf, size_t n, long at) {
  if (bad_sector_read(fd, n, (off_t)at) == -2) return -1;
  return __real_pread(fd, buf, n, at);
}

/* The sample file at `name`, its inode given to the pread wrapper. */
static void write_sample_for_bad_sectors(char *path, size_t size, const char *name) {
  file_path(path, size, name);
  write_sample_file(path, 2);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  eio_inode = st.st_ino;
}

/* A reader of `path` in `mode` whose verify hashes on `threads` threads. */
static HurrayReader *open_for_verify(const char *path, HurrayReadMode mode, unsigned threads) {
  set_threads(threads);
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  options.mode = mode;
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, &options, &r, error));
  return r;
}

/* A read error met by any hashing thread of a verify by pread is the
 * verify's error, an I/O error with its errno, not a checksum verdict and
 * not a signal: through a mapping the same bad sector is a SIGBUS. */
static void test_read_error_fails_verify(void **state) {
  (void)state;
  char path[300];
  write_sample_for_bad_sectors(path, sizeof path, "eio.hurray");
  static const HurrayReadMode modes[] = {HURRAY_READ_MMAP, HURRAY_READ_MMAP_PRIVATE,
                                         HURRAY_READ_PREAD};
  static const char *const bad_ones[] = {"t00", "t07", "t11"};
  assert_int_equal(setenv("HURRAY_VERIFY_READ", "pread", 1), 0);
  for (size_t b = 0; b < sizeof bad_ones / sizeof *bad_ones; b++) {
    long long at = (long long)data_offset(path, bad_ones[b]) + TENSOR_BYTES / 2;
    for (size_t m = 0; m < 3; m++) {
      for (unsigned threads = 1; threads <= 4; threads++) {
        HurrayReader *r = open_for_verify(path, modes[m], threads);
        atomic_store(&eio_at, at);
        HurrayError e = {0};
        assert_int_equal(hurray_reader_verify(r, NULL, &e), HURRAY_ERR_IO);
        assert_int_equal(e.os_errno, EIO);
        memset(&e, 0, sizeof e);
        assert_int_equal(hurray_reader_verify(r, bad_ones[b], &e), HURRAY_ERR_IO);
        assert_ok(hurray_reader_verify(r, b == 0 ? "t01" : "t00", error));
        atomic_store(&eio_at, -1);
        assert_ok(hurray_reader_verify(r, NULL, error));
        hurray_reader_close(r);
      }
    }
  }
  assert_int_equal(unsetenv("HURRAY_VERIFY_READ"), 0);
  unsetenv("HURRAY_HASH_THREADS");
}

/* A file cut short under a verify by pread, at the start of a tensor in
 * the middle: whatever thread meets the end first, and however many there
 * are, the error is the one that reading the round again in index order
 * meets, the same every time (a thread that stopped at the first failure
 * anywhere gave the offset of whichever read failed first). */
static void test_read_error_same_on_any_thread(void **state) {
  (void)state;
  char path[300];
  write_sample_for_bad_sectors(path, sizeof path, "cut.hurray");
  atomic_store(&eio_cuts, true);
  assert_int_equal(setenv("HURRAY_VERIFY_READ", "pread", 1), 0);
  char first[HURRAY_ERROR_MESSAGE_BYTES] = "";
  long long cut = (long long)data_offset(path, "t05");
  for (int rep = 0; rep < 5; rep++) {
    for (unsigned threads = 1; threads <= 4; threads++) {
      HurrayReader *r = open_for_verify(path, HURRAY_READ_PREAD, threads);
      atomic_store(&eio_at, cut);
      HurrayError e = {0};
      assert_int_equal(hurray_reader_verify(r, NULL, &e), HURRAY_ERR_TRUNCATED);
      atomic_store(&eio_at, -1);
      if (first[0] == '\0') snprintf(first, sizeof first, "%s", e.message);
      assert_string_equal(e.message, first);
      hurray_reader_close(r);
    }
  }
  char want[64];
  snprintf(want, sizeof want, "at %lld", cut);
  assert_non_null(strstr(first, want));
  atomic_store(&eio_cuts, false);
  assert_int_equal(unsetenv("HURRAY_VERIFY_READ"), 0);
  unsetenv("HURRAY_HASH_THREADS");
}

/* A damaged buffer and, later in index order, an unreadable one: the
 * damaged one is named, on any thread count and either way of reading.
 * Read again one by one after the failed read, the whole round was read
 * before any sum was compared, and the read error hid the damage wherever
 * both fell in one round, which the thread count decides. */
static void test_damage_before_a_read_error_is_named(void **state) {
  (void)state;
  char path[300];
  write_sample_for_bad_sectors(path, sizeof path, "damage-then-eio.hurray");
  flip_byte(path, data_offset(path, "t01") + 9);
  long long bad = (long long)data_offset(path, "t08") + 100;
  static const HurrayReadMode modes[] = {HURRAY_READ_MMAP, HURRAY_READ_MMAP_PRIVATE,
                                         HURRAY_READ_PREAD};
  for (size_t v = 0; v < sizeof verify_reads / sizeof *verify_reads; v++) {
    assert_int_equal(setenv("HURRAY_VERIFY_READ", verify_reads[v], 1), 0);
    for (size_t m = 0; m < 3; m++) {
      for (unsigned threads = 1; threads <= 4; threads++) {
        HurrayReader *r = open_for_verify(path, modes[m], threads);
        atomic_store(&eio_at, bad);
        HurrayError e = {0};
        assert_int_equal(hurray_reader_verify(r, NULL, &e), HURRAY_ERR_CHECKSUM);
        assert_non_null(strstr(e.message, "tensor \"t01\""));
        atomic_store(&eio_at, -1);
        hurray_reader_close(r);
      }
    }
  }
  assert_int_equal(unsetenv("HURRAY_VERIFY_READ"), 0);
  unsetenv("HURRAY_HASH_THREADS");
}

/* The pool's `idle` hook runs on the calling thread while another thread
 * still hashes: the calling thread's claim ends at once, the other
 * thread's waits until idle has run three times (or two seconds, which
 * only a pool without the hook lets pass). */
typedef struct IdleLog {
  pthread_t caller;
  atomic_uint idle_calls;
  atomic_bool other_claimed;
  atomic_bool other_waited_out;
} IdleLog;

static void idle_count(void *ctx) {
  IdleLog *log = ctx;
  assert_true(pthread_equal(pthread_self(), log->caller));
  atomic_fetch_add(&log->idle_calls, 1);
}

static void hash_slowly_elsewhere(void *ctx, HurrayHashJob *jobs, size_t count, void *scratch,
                                  size_t bytes) {
  (void)scratch;
  (void)bytes;
  IdleLog *log = ctx;
  struct timespec pause = {0, 1000000};
  if (pthread_equal(pthread_self(), log->caller)) {
    /* Leave the other job to the other thread. */
    for (int i = 0; i < 2000 && !atomic_load(&log->other_claimed); i++) nanosleep(&pause, NULL);
  } else {
    atomic_store(&log->other_claimed, true);
    int i = 0;
    while (atomic_load(&log->idle_calls) < 3 && i++ < 2000) nanosleep(&pause, NULL);
    if (i > 2000) atomic_store(&log->other_waited_out, true);
  }
  for (size_t k = 0; k < count; k++) jobs[k].sum = k;
}

static void test_idle_runs_while_others_hash(void **state) {
  (void)state;
  static uint8_t data[2u << 20];
  HurrayHashJob jobs[2] = {{data, 1u << 20, 0, 0}, {data + (1u << 20), 1u << 20, 0, 1u << 20}};
  IdleLog log = {.caller = pthread_self()};
  atomic_init(&log.idle_calls, 0);
  atomic_init(&log.other_claimed, false);
  atomic_init(&log.other_waited_out, false);
  HurrayHashHooks hooks = {.ctx = &log, .hash = hash_slowly_elsewhere, .idle = idle_count};
  hurray__hash_many_with(jobs, 2, 2, &hooks);
  if (!atomic_load(&log.other_claimed)) {
    skip(); /* the second thread could not be started, or started late */
  }
  assert_false(atomic_load(&log.other_waited_out));
  assert_true(atomic_load(&log.idle_calls) >= 3);
}

/* Verify lets go of the pages it mapped in few calls when the index (sorted
 * by name) visits buffers out of file order: "s10" sorts between "s1" and
 * "s2". Each call interrupts the other hashing threads to flush their TLBs;
 * one call per buffer made verify of 20,000 such tensors 0.46x of a plain
 * read of the mapping. On 1, 2 and 3 threads: every buffer's pages are
 * still let go of (and the converter's check leaves none of the file
 * resident, even where a later round's fault mapped a whole 2 MiB folio
 * again); a private reader's own pages, which hold the caller's writes,
 * never are; and damage is still found, across rounds of 4,096 buffers. */
static void test_verify_lets_go_of_pages_in_few_calls(void **state) {
  (void)state;
  char path[300], bad[300];
  file_path(path, sizeof path, "scattered.hurray");
  file_path(bad, sizeof bad, "scattered-bad.hurray");
  enum { SMALL = 5000, LARGE = 16 };
  /* In 2 MiB folios, as a save that found them cheap leaves the file: a
   * fault maps a whole folio, pages of other rounds included. */
  assert_int_equal(setenv("HURRAY_WRITE_FOLIOS", "huge", 1), 0);
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  assert_int_equal(unsetenv("HURRAY_WRITE_FOLIOS"), 0);
  for (unsigned i = 0; i < SMALL; i++) {
    char name[32];
    snprintf(name, sizeof name, "s%u", i);
    uint8_t *small = random_bytes(4096 + (i % 7) * 64, i);
    write_u8_tensor(w, name, small, 4096 + (i % 7) * 64);
    free(small);
    if (i % (SMALL / LARGE) == 0 && i / (SMALL / LARGE) < LARGE) {
      snprintf(name, sizeof name, "L%u", i / (SMALL / LARGE));
      uint8_t *large = random_bytes(4u << 20, 90000 + i);
      write_u8_tensor(w, name, large, 4u << 20);
      free(large);
    }
  }
  assert_ok(hurray_writer_finish(w, error));
  size_t data_bytes = (size_t)LARGE * (4u << 20);
  for (unsigned i = 0; i < SMALL; i++) data_bytes += 4096 + (i % 7) * 64;
  static const unsigned counts[] = {1, 2, 3};
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    set_threads(counts[c]);
    static const HurrayReadMode modes[] = {HURRAY_READ_MMAP_PRIVATE, HURRAY_READ_MMAP};
    for (size_t m = 0; m < 2; m++) {
      HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
      options.mode = modes[m];
      HurrayReader *r = NULL;
      HurrayDescriptor *d = NULL;
      HurrayBufferList *list = NULL;
      assert_ok(hurray_reader_open(path, &options, &r, error));
      uint8_t *mine = NULL;
      if (modes[m] == HURRAY_READ_MMAP_PRIVATE) {
        /* A write into the private mapping: a page of this process's own,
         * which letting go of pages would throw away. */
        assert_ok(hurray_reader_get_tensor(r, "s2500", &d, &list, error));
        mine = hurray_buffer_data(hurray_buffer_list_get(list, 0));
        memset(mine, 0x5A, 4096);
      }
      atomic_store(&dontneed_calls, 0);
      atomic_store(&dontneed_bytes, 0);
      /* A private reader hashes a view of its own and lets go of it; the
       * converter's check lets go of the reader's own mapping. */
      if (modes[m] == HURRAY_READ_MMAP_PRIVATE) {
        assert_ok(hurray_reader_verify(r, NULL, error));
        for (size_t k = 0; k < 4096; k++) assert_int_equal(mine[k], 0x5A);
      } else {
        assert_ok(hurray__reader_verify_flat(r, NULL, NULL, error));
        assert_true(mapped_kib(path) < 1024); /* of 84 MiB: the index, at most */
      }
      unsigned calls = atomic_load(&dontneed_calls);
      assert_true(calls >= 1);
      assert_true(calls <= 64); /* one per buffer before: 5,016 */
      /* Every buffer's pages, less at most two edge pages a call. */
      assert_true(atomic_load(&dontneed_bytes) + (size_t)calls * 2 * 4096 >= data_bytes);
      hurray_buffer_list_destroy(list);
      hurray_descriptor_destroy(d);
      hurray_reader_close(r);
    }
  }
  unsetenv("HURRAY_HASH_THREADS");
  char cmd[700];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, bad);
  assert_int_equal(system(cmd), 0);
  flip_byte(bad, data_offset(bad, "s4999") + 100);
  char got[HURRAY_ERROR_MESSAGE_BYTES];
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    verify_fails(bad, HURRAY_READ_MMAP_PRIVATE, counts[c], NULL, got, sizeof got);
    assert_non_null(strstr(got, "tensor \"s4999\" buffer 0: checksum mismatch"));
  }
}

/* The converter checks a hurray source whole before it writes: a damaged
 * last buffer fails the conversion with CHECKSUM and the target keeps its
 * old bytes, with no temporary file left; without verification it goes
 * through; a clean source converts and verifies on any thread count. */
static void test_convert_checks_source_up_front(void **state) {
  (void)state;
  char clean[300], bad[300], dst[300], cmd[700];
  file_path(clean, sizeof clean, "conv-clean.hurray");
  file_path(bad, sizeof bad, "conv-bad.hurray");
  file_path(dst, sizeof dst, "conv-out.safetensors");
  write_sample_file(clean, 2);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", clean, bad);
  assert_int_equal(system(cmd), 0);
  flip_byte(bad, data_offset(bad, "t11") + 5);
  static const unsigned counts[] = {1, 2, 4};
  for (size_t c = 0; c < 3; c++) {
    set_threads(counts[c]);
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    fputs("old target", f);
    fclose(f);
    HurrayError e = {0};
    assert_int_equal(hurray_convert_file(bad, dst, NULL, &e), HURRAY_ERR_CHECKSUM);
    assert_non_null(strstr(e.message, "t11"));
    size_t len;
    uint8_t *kept = slurp(dst, &len);
    assert_int_equal(len, 10);
    assert_memory_equal(kept, "old target", 10);
    free(kept);
    snprintf(cmd, sizeof cmd, "test $(ls -a '%s' | grep -c tmp) -eq 0", dir);
    assert_int_equal(system(cmd), 0);
    assert_ok(hurray_convert_file(clean, dst, NULL, error));
    HurrayConvertOptions o = HURRAY_CONVERT_OPTIONS_INIT;
    o.verify_checksums = false;
    assert_ok(hurray_convert_file(bad, dst, &o, error));
  }
  unsetenv("HURRAY_HASH_THREADS");
}

/* ------------------------------------------------ writeback and copies */

typedef struct WritebackLog {
  size_t calls;
  uint64_t next; /* where the next range must start */
  int fd;
} WritebackLog;

static WritebackLog writeback_log;

/* Records the ranges and fails, as advice may: the write must not care. */
static int failing_writeback(void *ctx, int fd, off_t offset, off_t len) {
  WritebackLog *log = ctx;
  assert_true(log->calls == 0 || fd == log->fd);
  log->fd = fd;
  assert_true((uint64_t)offset == log->next);
  assert_true(len > 0);
  log->next = (uint64_t)offset + (uint64_t)len;
  log->calls++;
  errno = EIO;
  return -1;
}

/* A path writer starts the writeback of what it wrote every 8 MiB, in
 * contiguous ranges from the start of the file; a failure of that advice
 * neither fails the write nor changes a byte (fsync decides). */
static void test_writeback_started_and_only_advice(void **state) {
  (void)state;
  char with[300], plain[300];
  file_path(with, sizeof with, "writeback.hurray");
  file_path(plain, sizeof plain, "plain.hurray");
  HurraySys sys = hurray__sys_default;
  memset(&writeback_log, 0, sizeof writeback_log);
  sys.ctx = &writeback_log;
  sys.start_writeback = failing_writeback;
  const char *paths[] = {with, plain};
  for (size_t k = 0; k < 2; k++) {
    HurrayWriter *w = NULL;
    assert_ok(k == 0 ? hurray__writer_open_sys(paths[k], &sys, &w, error)
                     : hurray_writer_open(paths[k], &w, error));
    for (uint32_t t = 0; t < 3; t++) {
      uint64_t bytes = (7u << 20) + 4099u * t; /* pieces that straddle the 8 MiB steps */
      HurrayDescriptor *d = NULL;
      assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, &bytes, &d, error));
      assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, bytes, 64, HURRAY_SYNC_READY,
                                             NULL, error));
      uint8_t *data = random_bytes(bytes, 40 + t);
      HurrayBuffer *b = NULL;
      HurrayBufferList *list = NULL;
      assert_ok(hurray_buffer_create(data, bytes, free_release, NULL, &b, error));
      assert_ok(hurray_buffer_list_create(&list, error));
      assert_ok(hurray_buffer_list_push(list, b, error));
      char name[8];
      snprintf(name, sizeof name, "w%u", t);
      assert_ok(hurray_writer_write_tensor(w, name, d, list, error));
      hurray_buffer_list_destroy(list);
      hurray_descriptor_destroy(d);
    }
    assert_ok(hurray_writer_finish(w, error));
  }
  /* 21 MiB of data: at least two 8 MiB ranges were handed to the advice. */
  assert_true(writeback_log.calls >= 2);
  assert_true(writeback_log.next >= (16u << 20));
  size_t la, lb;
  uint8_t *a = slurp(with, &la), *b = slurp(plain, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  free(a);
  free(b);
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(with, NULL, &r, error));
  assert_ok(hurray_reader_verify(r, NULL, error));
  hurray_reader_close(r);
}

/* The writes a path writer makes, their sizes and file offsets. */
typedef struct WriteLog {
  uint64_t offset; /* where the next write lands */
  unsigned huge;   /* writes of 2 MiB */
  unsigned misaligned_huge;
  unsigned unaligned_starts; /* writes that begin off a 64 KiB boundary */
  size_t largest_other;
} WriteLog;

static ssize_t logging_write(void *ctx, int fd, const void *data, size_t len) {
  WriteLog *log = ctx;
  ssize_t n = hurray__sys_default.write(NULL, fd, data, len);
  if (n > 0) {
    if (log->offset % HURRAY_WRITE_STEP != 0) log->unaligned_starts++;
    if ((uint64_t)n == HURRAY_HUGE_WRITE_STEP) {
      log->huge++;
      if (log->offset % HURRAY_HUGE_WRITE_STEP != 0) log->misaligned_huge++;
    } else if ((size_t)n > log->largest_other) {
      log->largest_other = (size_t)n;
    }
    log->offset += (uint64_t)n;
  }
  return n;
}

/* HURRAY_WRITE_FOLIOS sizes a large buffer's writes: small, 64 KiB pieces
 * only (the stage's gathered small writes aside); huge, one write per
 * whole 2 MiB region of the file; the probe, one or the other per file.
 * The bytes are the same. */
static void test_write_sizes_follow_the_folio_choice(void **state) {
  (void)state;
  const char *choices[] = {"small", "huge", "probe"};
  WriteLog logs[3];
  uint8_t *files[3];
  size_t lens[3];
  /* From just past the header: 8 whole 2 MiB regions, the first shared
   * with the header and gathered in the stage. */
  uint64_t bytes = (17u << 20) + 77;
  uint8_t *data = random_bytes(bytes, 77);
  for (size_t k = 0; k < 3; k++) {
    char path[300];
    file_path(path, sizeof path, choices[k]);
    assert_int_equal(setenv("HURRAY_WRITE_FOLIOS", choices[k], 1), 0);
    HurraySys sys = hurray__sys_default;
    memset(&logs[k], 0, sizeof logs[k]);
    sys.ctx = &logs[k];
    sys.write = logging_write;
    HurrayWriter *w = NULL;
    assert_ok(hurray__writer_open_sys(path, &sys, &w, error));
    HurrayDescriptor *d = NULL;
    assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, &bytes, &d, error));
    assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, bytes, 64, HURRAY_SYNC_READY, NULL,
                                           error));
    HurrayBuffer *b = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(hurray_buffer_create(data, bytes, NULL, NULL, &b, error));
    assert_ok(hurray_buffer_list_create(&list, error));
    assert_ok(hurray_buffer_list_push(list, b, error));
    assert_ok(hurray_writer_write_tensor(w, "big", d, list, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    assert_ok(hurray_writer_finish(w, error));
    assert_int_equal(logs[k].misaligned_huge, 0);
    files[k] = slurp(path, &lens[k]);
  }
  assert_int_equal(unsetenv("HURRAY_WRITE_FOLIOS"), 0);
  assert_int_equal(logs[0].huge, 0);
  assert_true(logs[0].largest_other <= (1u << 20));
  assert_int_equal(logs[1].huge, 8);
  assert_true(logs[2].huge <= 7); /* the first whole region is the probe's */
  for (size_t k = 1; k < 3; k++) {
    assert_int_equal(lens[k], lens[0]);
    assert_memory_equal(files[k], files[0], lens[0]);
  }
  for (size_t k = 0; k < 3; k++) free(files[k]);
  free(data);
}

/* A write that costs what the test says: 64 KiB writes `small_us`, 2 MiB
 * writes `huge_us`, on top of the real write. */
typedef struct CostedWrites {
  WriteLog log;
  long small_us, huge_us;
} CostedWrites;

static ssize_t costed_write(void *ctx, int fd, const void *data, size_t len) {
  CostedWrites *c = ctx;
  long us = len == HURRAY_WRITE_STEP        ? c->small_us
            : len == HURRAY_HUGE_WRITE_STEP ? c->huge_us
                                            : 0;
  if (us > 0) {
    struct timespec t = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&t, &t) != 0 && errno == EINTR) {
    }
  }
  return logging_write(&c->log, fd, data, len);
}

/* Writes tensors prefix<i>suffix of sizes[i] bytes from data[i] under
 * HURRAY_WRITE_FOLIOS=choice to the file `name`, through costed_write
 * with c's costs (0: none), logging the writes in c->log; checks that no
 * 2 MiB write is misaligned and that the file verifies, and returns its
 * bytes (*len of them, the caller frees). */
static uint8_t *write_logged(const char *name, const char *choice, const char *prefix,
                             const char *suffix, uint8_t *const *data, const uint64_t *sizes,
                             size_t count, CostedWrites *c, size_t *len) {
  char path[300];
  file_path(path, sizeof path, name);
  assert_int_equal(setenv("HURRAY_WRITE_FOLIOS", choice, 1), 0);
  HurraySys sys = hurray__sys_default;
  memset(&c->log, 0, sizeof c->log);
  sys.ctx = c;
  sys.write = costed_write;
  HurrayWriter *w = NULL;
  assert_ok(hurray__writer_open_sys(path, &sys, &w, error));
  for (size_t i = 0; i < count; i++) {
    char tensor[64];
    snprintf(tensor, sizeof tensor, "%s%zu%s", prefix, i, suffix);
    write_u8_tensor(w, tensor, data[i], sizes[i]);
  }
  assert_ok(hurray_writer_finish(w, error));
  assert_int_equal(unsetenv("HURRAY_WRITE_FOLIOS"), 0);
  assert_int_equal(c->log.misaligned_huge, 0);
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, NULL, &r, error));
  assert_ok(hurray_reader_verify(r, NULL, error));
  hurray_reader_close(r);
  return slurp(path, len);
}

/* Where buffers share a 2 MiB region (the tail of one, padding and small
 * tensors, the head of the next), huge writes gather the region and write
 * it whole: every region from the first large buffer's first boundary to
 * the end of the file goes out in one aligned 2 MiB write. The bytes are
 * those of 64 KiB writes. Before, each shared region went out in 64 KiB
 * pieces, and a file of 3 MiB buffers had half its bytes in small folios. */
static void test_shared_regions_written_whole(void **state) {
  (void)state;
  const char *choices[] = {"small", "huge"};
  uint64_t sizes[] = {77,   (3u << 20) + 77, (3u << 20) + 1, 100u << 10,     1000,
                      1000, (4u << 20) + 5,  65536,          (2u << 20) + 3, (3u << 20) + 4096};
  size_t count = sizeof sizes / sizeof sizes[0];
  uint8_t *data[sizeof sizes / sizeof sizes[0]];
  for (size_t i = 0; i < count; i++) data[i] = random_bytes(sizes[i], 100 + i);
  CostedWrites logs[2] = {0};
  uint8_t *files[2];
  size_t lens[2];
  for (size_t k = 0; k < 2; k++) {
    files[k] = write_logged(choices[k], choices[k], "t", "", data, sizes, count, &logs[k],
                            &lens[k]);
  }
  assert_int_equal(logs[0].log.huge, 0);
  /* From the header on, every whole region goes out in one write. */
  assert_int_equal(logs[1].log.huge, lens[1] / HURRAY_HUGE_WRITE_STEP);
  assert_int_equal(lens[1], lens[0]);
  assert_memory_equal(files[1], files[0], lens[0]);
  for (size_t k = 0; k < 2; k++) free(files[k]);
  for (size_t i = 0; i < count; i++) free(data[i]);
}

/* A file of small tensors, most of them exactly 64 KiB (a 128 x 256
 * float16 weight, say), goes out through the stage region by region: with
 * huge writes every whole region in one write, with small ones in 64 KiB
 * writes, and never in a write that begins off a 64 KiB boundary. Before,
 * each 64 KiB tensor went out on its own from wherever the last one ended,
 * and the file sat in folios of 4 to 32 KiB that a mapping read at 0.43x
 * the speed of 2 MiB ones. */
static void test_small_tensors_written_by_regions(void **state) {
  (void)state;
  enum { COUNT = 200 };
  uint8_t *data = random_bytes(65536, 300);
  uint8_t *each[COUNT];
  uint64_t sizes[COUNT];
  for (size_t i = 0; i < COUNT; i++) {
    each[i] = data;
    sizes[i] = i % 5 == 4 ? 1000 + i : 65536;
  }
  const char *choices[] = {"small", "huge"};
  CostedWrites logs[2] = {0};
  uint8_t *files[2];
  size_t lens[2];
  for (size_t k = 0; k < 2; k++) {
    files[k] = write_logged(choices[k], choices[k], "layers.", ".weight", each, sizes, COUNT,
                            &logs[k], &lens[k]);
  }
  assert_true(lens[0] >= 5 * HURRAY_HUGE_WRITE_STEP);
  for (size_t k = 0; k < 2; k++) assert_int_equal(logs[k].log.unaligned_starts, 0);
  assert_int_equal(logs[0].log.huge, 0);
  assert_true(logs[0].log.largest_other <= HURRAY_WRITE_STEP);
  assert_int_equal(logs[1].log.huge, lens[1] / HURRAY_HUGE_WRITE_STEP);
  assert_int_equal(lens[1], lens[0]);
  assert_memory_equal(files[1], files[0], lens[0]);
  for (size_t k = 0; k < 2; k++) free(files[k]);
  free(data);
}

/* Buffers under 2 MiB never hold a whole region with more of the buffer
 * after it, where a probe inside one buffer is made, so the probe is made
 * on a gathered region: with 2 MiB writes cheaper, every later region goes
 * out in one write; with them far dearer, few do. "Cheaper" is by 96 ms a
 * region (32 small writes of 3 ms): at 16 ms, a busy machine's stall of a
 * 2 MiB write under valgrind made some regions go out small. */
static void test_probe_on_gathered_regions(void **state) {
  (void)state;
  enum { COUNT = 40 };
  uint64_t sizes[COUNT];
  uint8_t *data[COUNT];
  for (size_t i = 0; i < COUNT; i++) {
    sizes[i] = (300u << 10) + (uint64_t)(i * 37 % COUNT) * (40u << 10) + i;
    data[i] = random_bytes(sizes[i], 200 + i);
  }
  const struct {
    const char *name;
    long small_us, huge_us;
  } cases[] = {{"small", 0, 0}, {"cheap-huge", 3000, 0}, {"dear-huge", 0, 50000}};
  CostedWrites costs[3] = {0};
  uint8_t *files[3];
  size_t lens[3];
  for (size_t k = 0; k < 3; k++) {
    costs[k].small_us = cases[k].small_us;
    costs[k].huge_us = cases[k].huge_us;
    files[k] = write_logged(cases[k].name, k == 0 ? "small" : "probe", "t", "", data, sizes, COUNT,
                            &costs[k], &lens[k]);
  }
  size_t regions = lens[0] / HURRAY_HUGE_WRITE_STEP;
  assert_true(regions >= 20);
  assert_int_equal(costs[0].log.huge, 0);
  /* Region 0 (the header, t0 and the head of t1) is the probe. */
  assert_int_equal(costs[1].log.huge, regions - 1);
  /* Each slow write waits 1, 2, 4, ... regions, and a probe follows. */
  assert_true(costs[2].log.huge >= 1 && costs[2].log.huge <= 6);
  for (size_t k = 1; k < 3; k++) {
    assert_int_equal(lens[k], lens[0]);
    assert_memory_equal(files[k], files[0], lens[0]);
  }
  for (size_t k = 0; k < 3; k++) free(files[k]);
  for (size_t i = 0; i < COUNT; i++) free(data[i]);
}

/* Each 2 MiB region is asked about once, however it begins: buffers of
 * exactly 2 MiB each end a few bytes (the header's length) past a region
 * boundary, so every region begins with a tail under 64 KiB, which the
 * large buffer's path asked about and then the stage asked about again.
 * With 2 MiB writes dear, the waits after each slow one are then 1, 2, 4
 * regions as designed: region 0 is the probe, and huge writes go to
 * regions 1, 4, 8 and 14 of the 24 whole ones. Asked twice, each wait was
 * halved and a probe came early. */
static void test_each_region_asked_once(void **state) {
  (void)state;
  enum { COUNT = 24 };
  uint64_t sizes[COUNT];
  uint8_t *each[COUNT];
  uint8_t *data = random_bytes(HURRAY_HUGE_WRITE_STEP, 400);
  for (size_t i = 0; i < COUNT; i++) {
    sizes[i] = HURRAY_HUGE_WRITE_STEP;
    each[i] = data;
  }
  CostedWrites costs = {0};
  costs.huge_us = 50000;
  size_t len;
  free(write_logged("asked-once", "probe", "t", "", each, sizes, COUNT, &costs, &len));
  assert_int_equal(costs.log.huge, 4);
  free(data);
}

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void assert_text(const char *path, const char *text) {
  size_t len;
  uint8_t *kept = slurp(path, &len);
  assert_int_equal(len, strlen(text));
  assert_memory_equal(kept, text, len);
  free(kept);
}

/* hurray -> safetensors checks each data buffer while it copies it: a
 * damaged first byte, last byte or middle of any tensor fails with the
 * tensor named and the old target kept, with no temporary file left. */
static void test_convert_checks_while_copying(void **state) {
  (void)state;
  char clean[300], bad[300], dst[300], cmd[700];
  file_path(clean, sizeof clean, "copy-clean.hurray");
  file_path(bad, sizeof bad, "copy-bad.hurray");
  file_path(dst, sizeof dst, "copy-out.safetensors");
  write_sample_file(clean, 2);
  static const struct {
    const char *name;
    uint64_t at;
  } damage[] = {{"t00", 0}, {"t04", TENSOR_BYTES / 2}, {"t11", TENSOR_BYTES - 1}};
  for (size_t k = 0; k < sizeof damage / sizeof *damage; k++) {
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", clean, bad);
    assert_int_equal(system(cmd), 0);
    flip_byte(bad, data_offset(bad, damage[k].name) + damage[k].at);
    write_text(dst, "old target");
    HurrayError e = {0};
    assert_int_equal(hurray_convert_file(bad, dst, NULL, &e), HURRAY_ERR_CHECKSUM);
    char want[64];
    snprintf(want, sizeof want, "tensor \"%s\" buffer 0: checksum mismatch", damage[k].name);
    assert_non_null(strstr(e.message, want));
    assert_text(dst, "old target");
    snprintf(cmd, sizeof cmd, "test $(ls -a '%s' | grep -c tmp) -eq 0", dir);
    assert_int_equal(system(cmd), 0);
  }
  assert_ok(hurray_convert_file(clean, dst, NULL, error));
}

/* The kernel-copy path: a buffer whose place in the source and in the
 * target agree within a page is copied by copy_file_range, and hashed from
 * the mapping first. One float32 named "a" sits at 64 in the hurray file;
 * its safetensors header is 56 bytes, so its data sits at 8 + 56 = 64. */
static void test_convert_checks_kernel_copies(void **state) {
  (void)state;
  char src[300], bad[300], dst[300], cmd[700];
  file_path(src, sizeof src, "congruent.hurray");
  file_path(bad, sizeof bad, "congruent-bad.hurray");
  file_path(dst, sizeof dst, "congruent.safetensors");
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(src, &w, error));
  uint64_t shape[1] = {1};
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, shape, &d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 4, 64, HURRAY_SYNC_READY, NULL, error));
  float *value = aligned_alloc(64, 64);
  *value = 1.5f;
  HurrayBuffer *b = NULL;
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_create(value, 4, free_release, NULL, &b, error));
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_list_push(list, b, error));
  assert_ok(hurray_writer_write_tensor(w, "a", d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  assert_ok(hurray_writer_finish(w, error));
  assert_int_equal(data_offset(src, "a") % 4096, 64);
  assert_ok(hurray_convert_file(src, dst, NULL, error));
  size_t len;
  uint8_t *out = slurp(dst, &len);
  assert_int_equal(len, 8 + 56 + 4);
  assert_int_equal(out[0], 56);
  assert_memory_equal(out + 64, value_bytes_1_5, 4);
  free(out);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, bad);
  assert_int_equal(system(cmd), 0);
  flip_byte(bad, data_offset(bad, "a") + 3);
  write_text(dst, "old target");
  HurrayError e = {0};
  assert_int_equal(hurray_convert_file(bad, dst, NULL, &e), HURRAY_ERR_CHECKSUM);
  assert_non_null(strstr(e.message, "tensor \"a\" buffer 0: checksum mismatch"));
  assert_text(dst, "old target");
}

/* The resident set of a conversion stays near the 8 MiB step in both
 * directions, not one tensor: a 64 MiB tensor through safetensors ->
 * hurray -> safetensors, in a child whose peak is compared with its size
 * before the conversion. */
static long resident_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f == NULL) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_convert_resident_set_flat(void **state) {
  (void)state;
  char src[300], mid[300], back[300];
  file_path(src, sizeof src, "flat.safetensors");
  file_path(mid, sizeof mid, "flat.hurray");
  file_path(back, sizeof back, "flat-back.safetensors");
  const size_t bytes = 64u << 20;
  char header[128];
  int n = snprintf(header, sizeof header,
                   "{\"w\":{\"dtype\":\"U8\",\"shape\":[%zu],\"data_offsets\":[0,%zu]}}", bytes,
                   bytes);
  while (n % 8 != 0) header[n++] = ' ';
  FILE *f = fopen(src, "wb");
  assert_non_null(f);
  uint8_t len8[8];
  for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)n >> (8 * k));
  assert_int_equal(fwrite(len8, 1, 8, f), 8);
  assert_int_equal(fwrite(header, 1, (size_t)n, f), (size_t)n);
  uint8_t *data = random_bytes(1u << 20, 9);
  for (size_t i = 0; i < bytes; i += 1u << 20)
    assert_int_equal(fwrite(data, 1, 1u << 20, f), 1u << 20);
  free(data);
  fclose(f);
  for (int direction = 0; direction < 2; direction++) {
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
      long before = resident_kib();
      HurrayError e = {0};
      HurrayStatus st = direction == 0 ? hurray_convert_file(src, mid, NULL, &e)
                                       : hurray_convert_file(mid, back, NULL, &e);
      struct rusage ru;
      getrusage(RUSAGE_SELF, &ru);
      if (st != HURRAY_OK) _exit(2);
      /* 64 MiB would mean the whole tensor stayed resident. */
      _exit(before >= 0 && ru.ru_maxrss - before < (32 << 10) ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  size_t la, lb;
  uint8_t *a = slurp(src, &la), *b = slurp(back, &lb);
  assert_int_equal(la, lb);
  assert_memory_equal(a, b, la);
  free(a);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_paths_agree_with_reference),
      cmocka_unit_test(test_hash_many_same_with_any_thread_count),
      cmocka_unit_test(test_hash_many_small_jobs_claimed_in_runs),
      cmocka_unit_test(test_hash_many_large_jobs_claimed_in_shares),
      cmocka_unit_test(test_hash_hook_replaces_the_pool),
      cmocka_unit_test(test_written_checksums_same_with_any_thread_count),
      cmocka_unit_test(test_damage_found_by_any_thread),
      cmocka_unit_test(test_verify_lets_go_of_pages_in_few_calls),
      cmocka_unit_test(test_every_way_of_reading_agrees),
      cmocka_unit_test(test_read_error_fails_verify),
      cmocka_unit_test(test_read_error_same_on_any_thread),
      cmocka_unit_test(test_damage_before_a_read_error_is_named),
      cmocka_unit_test(test_idle_runs_while_others_hash),
      cmocka_unit_test(test_convert_checks_source_up_front),
      cmocka_unit_test(test_stream_matches_checksum),
      cmocka_unit_test(test_writeback_started_and_only_advice),
      cmocka_unit_test(test_write_sizes_follow_the_folio_choice),
      cmocka_unit_test(test_shared_regions_written_whole),
      cmocka_unit_test(test_small_tensors_written_by_regions),
      cmocka_unit_test(test_probe_on_gathered_regions),
      cmocka_unit_test(test_each_region_asked_once),
      cmocka_unit_test(test_convert_checks_while_copying),
      cmocka_unit_test(test_convert_checks_kernel_copies),
      cmocka_unit_test(test_convert_resident_set_flat),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
