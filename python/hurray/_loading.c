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

#include "../../src/quant/plan.h"
#include "_guard.h"

PyObject *hurray_py_prefault(PyObject *module, PyObject *args) {
  (void)module;
  Py_buffer view;
  int hugepage = 0;
  unsigned int threads = 1;
  if (!PyArg_ParseTuple(args, "w*p|O&:_prefault", &view, &hugepage, hy_conv_threads, &threads)) {
    return NULL;
  }
  uintptr_t start = (uintptr_t)view.buf, end = start + (uintptr_t)view.len;
  Py_BEGIN_ALLOW_THREADS if (hugepage) {
    /* 2 MiB-aligned interior only: advice must not reach memory the buffer
     * does not own (its neighbours in the allocator). */
    uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t hfirst = (start + huge - 1) / huge * huge, hlast = end / huge * huge;
#ifdef MADV_HUGEPAGE
    if (hlast > hfirst) (void)madvise((void *)hfirst, hlast - hfirst, MADV_HUGEPAGE);
#endif
  }
  hurray__prefault_write(view.buf, (uint64_t)view.len, threads);
  Py_END_ALLOW_THREADS PyBuffer_Release(&view);
  Py_RETURN_NONE;
}
