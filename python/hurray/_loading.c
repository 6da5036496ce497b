/*
 * Memory helpers for loaders; see _loading.h. Dequantizing on load writes
 * into fresh memory, and on a virtual machine a first-touch fault per 4 KiB
 * page cost more than the dequantization itself (ADR-0021).
 */
#define _GNU_SOURCE
#include "_loading.h"

#include <stdint.h>

#include "../../src/quant/fresh_pages.h"
#include "_guard.h"

PyObject *hurray_py_prefault(PyObject *module, PyObject *args) {
  (void)module;
  Py_buffer view;
  int own_mapping = 0;
  unsigned int threads = 1;
  if (!PyArg_ParseTuple(args, "w*p|O&:_prefault", &view, &own_mapping, hy_conv_threads,
                        &threads)) {
    return NULL;
  }
  HurrayPageChoice choice = own_mapping ? hurray__fresh_pages_choice() : HURRAY_PAGES_AS_IS;
  Py_BEGIN_ALLOW_THREADS hurray__prefault_write(view.buf, (uint64_t)view.len, threads, choice);
  Py_END_ALLOW_THREADS PyBuffer_Release(&view);
  Py_RETURN_NONE;
}
