/*
 * _loading: memory helpers for loaders (hurray.torch.load_file), compiled
 * into the _hurray extension.
 */
#ifndef HURRAY_PY_LOADING_H
#define HURRAY_PY_LOADING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* _prefault(buffer, own_mapping[, threads]): makes the pages of a writable
 * buffer present now, with one MADV_POPULATE_WRITE per thread
 * (hurray__prefault_write: `threads` as the kernel that will write it gets).
 * When `own_mapping` is true the buffer is a whole private anonymous
 * mapping of the caller's, and the size of its pages is chosen as
 * HURRAY_FRESH_PAGES says (measured by default: src/quant/fresh_pages.h);
 * otherwise the memory keeps whatever pages it gets. Advice only: kernels
 * without these madvise calls leave the buffer as it was. */
PyObject *hurray_py_prefault(PyObject *module, PyObject *args);

#endif
