/*
 * Populating a kernel's fresh output a chunk ahead of its writes.
 *
 * Outputs come fresh from the allocator: for large ones a new mapping,
 * whose first write to each 4 KiB page traps into the kernel. In a VM a
 * trap costs microseconds, so for an 8-bit per-tensor quantize the faults
 * took about as long as the encoding itself. A thread instead populates the
 * pages of its own part of the output a chunk at a time with
 * MADV_POPULATE_WRITE (Linux 5.14) just before it writes them: one system
 * call per chunk instead of a trap per page, the threads' faults run in
 * parallel, and the freshly zeroed chunk is still in cache when the data
 * lands in it. Only pages wholly inside [first, last) are populated (a
 * neighbour's edge page faults as before); populating never changes a
 * byte, so a result is the same with or without it, and where the call is
 * missing or refused the writer carries on with ordinary faults.
 *
 * Include this header first in a translation unit (it needs _GNU_SOURCE
 * for MADV_POPULATE_WRITE in older libc headers, defined here otherwise).
 */
#ifndef HURRAY_SRC_QUANT_PREFAULT_H
#define HURRAY_SRC_QUANT_PREFAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__linux__)
#  include <sys/mman.h>
#  include <unistd.h>
#  ifndef MADV_POPULATE_WRITE
#    define MADV_POPULATE_WRITE 23
#  endif
#endif

#define HURRAY_PREFAULT_CHUNK ((uintptr_t)64 << 10)
/* Below this a part's output is likely reused heap memory, already there. */
#define HURRAY_PREFAULT_MIN ((uintptr_t)256 << 10)

typedef struct HurrayPrefault {
  uintptr_t next, end; /* pages not yet populated */
} HurrayPrefault;

/* The whole pages inside [first, last) (either may be unaligned), as
 * [*a, *b): false when there are none, or off Linux. Only these are ever
 * populated: a neighbour's edge page (heap memory, a shared or read-only
 * mapping) must not be faulted or dirtied on its behalf. */
static inline bool hurray__whole_pages(const void *first, const void *last, uintptr_t *a,
                                       uintptr_t *b) {
#if defined(__linux__)
  long page = sysconf(_SC_PAGESIZE);
  uintptr_t pg = page > 0 ? (uintptr_t)page : 4096u;
  uintptr_t lo = (uintptr_t)first, hi = (uintptr_t)last;
  if (hi <= lo || lo > UINTPTR_MAX - (pg - 1)) return false;
  *a = (lo + pg - 1) & ~(pg - 1);
  *b = hi & ~(pg - 1);
  return *b > *a;
#else
  (void)first;
  (void)last;
  (void)a;
  (void)b;
  return false;
#endif
}

/* Populates the whole pages inside [first, last) with one call: for a part
 * of an output that one thread is about to write all of. */
static inline void hurray__prefault_range(const void *first, const void *last) {
#if defined(__linux__)
  uintptr_t a, b;
  if (hurray__whole_pages(first, last, &a, &b)) {
    (void)madvise((void *)a, (size_t)(b - a), MADV_POPULATE_WRITE);
  }
#else
  (void)first;
  (void)last;
#endif
}

/* Arms `pf` for the output bytes [first, last) (either may be unaligned). */
static inline void hurray__prefault_init(HurrayPrefault *pf, const void *first, const void *last) {
  pf->next = pf->end = 0;
  uintptr_t a, b;
  if (hurray__whole_pages(first, last, &a, &b) && b - a >= HURRAY_PREFAULT_MIN) {
    pf->next = a;
    pf->end = b;
  }
}

/* Populates the armed pages below `upto` (a chunk at a time). */
static inline void hurray__prefault_to(HurrayPrefault *pf, const void *upto) {
#if defined(__linux__)
  uintptr_t want = (uintptr_t)upto;
  while (pf->next < pf->end && pf->next < want) {
    uintptr_t left = pf->end - pf->next;
    uintptr_t len = left < HURRAY_PREFAULT_CHUNK ? left : HURRAY_PREFAULT_CHUNK;
    if (madvise((void *)pf->next, (size_t)len, MADV_POPULATE_WRITE) != 0) {
      pf->end = pf->next; /* not supported here: ordinary faults */
      return;
    }
    pf->next += len;
  }
#else
  (void)pf;
  (void)upto;
#endif
}

#endif /* HURRAY_SRC_QUANT_PREFAULT_H */
