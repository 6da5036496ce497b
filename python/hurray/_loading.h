/*
 * _loading: memory helpers for loaders (hurray.torch.load_file), compiled
 * into the _hurray extension.
 */
#ifndef HURRAY_PY_LOADING_H
#define HURRAY_PY_LOADING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* _prefault(buffer, hugepage[, threads]): makes the pages of a writable
 * buffer present now, with one MADV_POPULATE_WRITE per thread
 * (hurray__prefault_write: `threads` as the kernel that will write it gets),
 * after asking for transparent huge pages over its 2 MiB-aligned interior
 * when `hugepage` is true: a fresh output then costs no fault per 4 KiB
 * page. Advice only: kernels without these madvise calls leave the buffer
 * as it was. */
PyObject *hurray_py_prefault(PyObject *module, PyObject *args);

#endif
