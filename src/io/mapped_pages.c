/* Letting go of mapped file pages (mapped_pages.h). */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED */
#include "mapped_pages.h"

#include <sys/mman.h>
#include <unistd.h>

void hurray__drop_mapped_pages(const void *p, uint64_t len) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0 || len == 0) return;
  uintptr_t a = ((uintptr_t)p + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
  uintptr_t b = ((uintptr_t)p + (uintptr_t)len) / (uintptr_t)page * (uintptr_t)page;
  if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}
