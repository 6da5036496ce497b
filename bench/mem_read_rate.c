/*
 * The machine's memory-read rate, the limit that verify (xxh3 over every
 * byte) is measured against (issue 19): THREADS threads each read their
 * share of a buffer of MIB MiB (far larger than any cache) with the widest
 * loads the CPU has, best of 5 passes. Prints one JSON line.
 *
 *   mem_read_rate MIB THREADS
 *   mem_read_rate --file PATH THREADS
 *
 * With --file the buffer is a cached file's pages, mapped afresh for each
 * pass (as a verify maps it) and unmapped after: the rate at which any
 * program can read that file in place, page faults included, which depends
 * on the folios the page cache holds it in (bench_verify.py).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

typedef struct Share {
  const uint64_t *p;
  size_t n; /* words */
  uint64_t sum;
} Share;

/* Four independent sums of plain 64-bit words: GCC vectorizes this to full
 * width loads, and the sum keeps the loads from being optimized away. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2")))
#endif
static uint64_t
read_words_avx2(const uint64_t *p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; i++) a += p[i];
  return a + b + c + d;
}

static void *read_share(void *arg) {
  Share *s = arg;
  s->sum = read_words_avx2(s->p, s->n);
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Reads words[0..count) on `threads` threads (this one included); seconds. */
static double read_all(const uint64_t *words, size_t count, unsigned threads, uint64_t *check) {
  Share shares[64];
  pthread_t ids[64];
  size_t per = count / threads;
  double t0 = now();
  for (unsigned t = 0; t < threads; t++) {
    shares[t].p = words + per * t;
    shares[t].n = t + 1 == threads ? count - per * t : per;
    if (t > 0 && pthread_create(&ids[t], NULL, read_share, &shares[t]) != 0) {
      fprintf(stderr, "cannot start a thread\n");
      exit(1);
    }
  }
  read_share(&shares[0]);
  for (unsigned t = 1; t < threads; t++) pthread_join(ids[t], NULL);
  double dt = now() - t0;
  for (unsigned t = 0; t < threads; t++) *check += shares[t].sum;
  return dt;
}

int main(int argc, char **argv) {
  bool file = argc == 4 && strcmp(argv[1], "--file") == 0;
  if (argc != 3 && !file) {
    fprintf(stderr, "usage: %s MIB THREADS | %s --file PATH THREADS\n", argv[0], argv[0]);
    return 2;
  }
  unsigned threads = (unsigned)strtoul(argv[argc - 1], NULL, 10);
  size_t bytes = 0;
  int fd = -1;
  uint64_t *buf = NULL;
  if (file) {
    struct stat st;
    fd = open(argv[2], O_RDONLY);
    if (fd < 0 || fstat(fd, &st) != 0) {
      perror(argv[2]);
      return 1;
    }
    bytes = (size_t)st.st_size / 8 * 8;
  } else {
    bytes = (size_t)strtoull(argv[1], NULL, 10) << 20;
  }
  if (bytes == 0 || threads == 0 || threads > 64) {
    fprintf(stderr, "the size must be > 0 and THREADS 1..64\n");
    return 2;
  }
  if (!file) {
    if (posix_memalign((void **)&buf, 4096, bytes) != 0) {
      fprintf(stderr, "out of memory\n");
      return 1;
    }
    memset(buf, 1, bytes); /* every page faulted in before timing */
  }
  double best = 1e30;
  uint64_t check = 0;
  for (int pass = 0; pass < 5; pass++) {
    double dt;
    if (file) {
      double t0 = now();
      void *m = mmap(NULL, bytes, PROT_READ, MAP_SHARED, fd, 0);
      if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
      }
      read_all(m, bytes / 8, threads, &check);
      munmap(m, bytes);
      dt = now() - t0;
    } else {
      dt = read_all(buf, bytes / 8, threads, &check);
    }
    if (dt < best) best = dt;
  }
  printf("{\"bytes\": %zu, \"threads\": %u, \"s\": %.6f, \"gbps\": %.3f, \"check\": %llu}\n",
         bytes, threads, best, (double)bytes / best / 1e9, (unsigned long long)(check & 0xffff));
  free(buf);
  if (fd >= 0) close(fd);
  return 0;
}
