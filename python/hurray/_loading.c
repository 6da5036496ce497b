/*
 * Memory helpers for loaders; see _loading.h. Dequantizing on load writes
 * into fresh memory, and on a virtual machine a first-touch fault per 4 KiB
 * page cost more than the dequantization itself (ADR-0021).
 */
#define _GNU_SOURCE
#include "_loading.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#  define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

PyObject *hurray_py_prefault(PyObject *module, PyObject *args) {
  (void)module;
  Py_buffer view;
  int hugepage = 0;
  if (!PyArg_ParseTuple(args, "w*p:_prefault", &view, &hugepage)) return NULL;
  long page_size = sysconf(_SC_PAGESIZE);
  uintptr_t page = page_size > 0 ? (uintptr_t)page_size : 4096;
  uintptr_t start = (uintptr_t)view.buf, end = start + (uintptr_t)view.len;
  /* Whole pages inside the buffer only: advice must not reach memory the
   * buffer does not own (its neighbours in the allocator). */
  uintptr_t first = (start + page - 1) / page * page, last = end / page * page;
  Py_BEGIN_ALLOW_THREADS if (hugepage) {
    uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t hfirst = (start + huge - 1) / huge * huge, hlast = end / huge * huge;
#ifdef MADV_HUGEPAGE
    if (hlast > hfirst) (void)madvise((void *)hfirst, hlast - hfirst, MADV_HUGEPAGE);
#endif
  }
  if (last > first) (void)madvise((void *)first, last - first, MADV_POPULATE_WRITE);
  Py_END_ALLOW_THREADS PyBuffer_Release(&view);
  Py_RETURN_NONE;
}
