/*
 * _dlpack: the DLPack export of hurray tensors (__dlpack__ and
 * __dlpack_device__), compiled into the _hurray extension. The structs are
 * written from the published DLPack 1.x specification (dlpack.h of
 * dmlc/dlpack); nothing is vendored.
 */
#ifndef HURRAY_PY_DLPACK_H
#define HURRAY_PY_DLPACK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>

#include "hurray/hurray.h"

/* __dlpack__(stream=None, max_version=None, dl_device=None, copy=None) of
 * the tensor `owner`, whose descriptor and buffers are `d` and `buffers`;
 * `writable` says whether its data buffer may be written. The capsule keeps
 * `owner` alive until the consumer's deleter runs. A versioned capsule
 * ("dltensor_versioned", DLPack 1.1) when max_version >= (1, 0), flagged
 * read-only when `writable` is false; else a legacy "dltensor" capsule,
 * refused for read-only memory (it cannot say so). */
PyObject *hurray_py_dlpack(PyObject *owner, const HurrayDescriptor *d,
                           const HurrayBufferList *buffers, bool writable, PyObject *args,
                           PyObject *kwargs);

/* __dlpack_device__(): (device type, device id), DLPack's device codes. */
PyObject *hurray_py_dlpack_device(const HurrayDescriptor *d);

#endif
