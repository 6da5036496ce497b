/*
 * What the two extension modules, _hurray and _formats, share: the
 * `__hurray__` capsule's context and destructor, and the mapping of C
 * statuses onto hurray's exception classes (docs/impl/python-bindings.md).
 * Compiled into both; the classes themselves are created once, by _hurray.
 */
#ifndef HURRAY_PY_SHARED_H
#define HURRAY_PY_SHARED_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#include "hurray/hurray.h"

#define HY_CAPSULE_NAME "hurray_buffer"
#define HY_USED_CAPSULE_NAME "used_hurray_buffer"

/* The buffers' memory must not be written through the consumer's tensor (a
 * read-only mapping, a bytes object): what the producer's tensor knew, and
 * the handles cannot say. */
#define HY_CAPSULE_READ_ONLY 1u

/* The capsule context: the producer's ABI version first, so a consumer of
 * any version can read it, then flags, then the encoded descriptor. */
typedef struct HyCapsuleContext {
  uint32_t abi_version;
  uint32_t flags; /* HY_CAPSULE_READ_ONLY or 0; a consumer ignores bits it does not know */
  uint64_t descriptor_len;
  uint8_t descriptor[];
} HyCapsuleContext;

/* PyCapsule destructor: frees the context, and the list when nobody
 * consumed the capsule. Keeps a propagating exception intact. */
void hy_capsule_destructor(PyObject *capsule);

/* A fresh context (PyMem_RawMalloc) holding `d` encoded and `flags`
 * (HY_CAPSULE_READ_ONLY or 0); NULL with *status and *error set when
 * encoding fails, or with *status HURRAY_ERR_NO_MEMORY. */
HyCapsuleContext *hy_capsule_context(const HurrayDescriptor *d, uint32_t flags,
                                     HurrayStatus *status, HurrayError *error);

/* A "hurray_buffer" capsule owning `list` and `ctx`; takes both in every
 * case. NULL with a Python exception set. */
PyObject *hy_capsule_wrap(HurrayBufferList *list, HyCapsuleContext *ctx);

/* An exception class and the status codes it covers. */
typedef struct HyErrorClass {
  const char *name;
  const char *extra_base; /* a builtin exception also inherited, or NULL */
  const char *doc;
  HurrayStatus codes[40];
} HyErrorClass;

extern const HyErrorClass hy_error_classes[];
extern const size_t hy_error_class_count;

/* The name of the class covering `status` ("FormatError"), or "HurrayError". */
const char *hy_error_class_name(HurrayStatus status);

/* 1 if `obj` has attribute `name`, 0 if not, -1 with the exception when
 * looking failed otherwise (PyObject_HasAttrString would call a
 * MemoryError "no such attribute"). */
static inline int hy_has_attr(PyObject *obj, const char *name) {
  PyObject *value = PyObject_GetAttrString(obj, name);
  if (value != NULL) {
    Py_DECREF(value);
    return 1;
  }
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
  PyErr_Clear();
  return 0;
}

/* Module exec's first step: -1 with ImportError in any interpreter but the
 * main one. Buffers are released, byte sources read and cancel callbacks
 * asked on threads that hold no thread state; they enter Python through
 * PyGILState_Ensure, which knows only the main interpreter: in a
 * subinterpreter it waited forever for a GIL it could not take, or ran the
 * subinterpreter's code under the main one's modules. On 3.12 and later
 * the module slots say so too (HY_SLOT_MAIN_INTERPRETER_ONLY). */
static inline int hy_refuse_subinterpreter(const char *module_name) {
  if (PyInterpreterState_Get() == PyInterpreterState_Main()) return 0;
  PyErr_Format(PyExc_ImportError,
               "%s cannot be imported in a subinterpreter: it calls back into Python from "
               "threads of its own (releasing buffers, reading byte sources), which CPython "
               "supports only in the main interpreter",
               module_name);
  return -1;
}

#if PY_VERSION_HEX >= 0x030C0000
#  define HY_SLOT_MAIN_INTERPRETER_ONLY \
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#else
#  define HY_SLOT_MAIN_INTERPRETER_ONLY
#endif

/* A new `cls` instance with "STATUS_NAME: message" and the attributes
 * status and status_name; NULL with an exception if it cannot be made. */
PyObject *hy_status_exception(PyObject *cls, HurrayStatus status, const char *message);

/* Raises `cls` with "STATUS_NAME: message" and the attributes status and
 * status_name; a failure the operating system reported (error->os_errno
 * set) as an OSError subclass that is also `io_class`, carrying errno and
 * `filename` (may be NULL). Returns NULL. */
PyObject *hy_raise_class(PyObject *cls, PyObject *io_class, HurrayStatus status,
                         const HurrayError *error, PyObject *filename);

#endif
