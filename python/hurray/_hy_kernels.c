/*
 * _hy_kernels.c: logic the Python layer needs that lives in the C library,
 * exposed as small functions: sub-byte pack and unpack (src/core/packing.c)
 * and member extraction (src/core/member.c).
 */
#include "_hurray.h"
#include "../../src/core/member.h"
#include "../../src/core/packing.h"

/* The bits of a sub-byte dtype given by name, or 0 with an exception. */
static uint32_t packed_bits(const char *name) {
  HurrayDType dtype = hurray_dtype_from_name(name);
  uint32_t bits = hurray_dtype_bits(dtype);
  if (dtype == HURRAY_DTYPE_INVALID || bits == 0 || bits >= 8) {
    PyErr_Format(PyExc_ValueError, "%s is not a sub-byte dtype", name);
    return 0;
  }
  return bits;
}

/* _unpack(dtype, packed, count) -> bytearray of `count` codes, one a byte. */
PyObject *mod_unpack(PyObject *module, PyObject *args) {
  (void)module;
  const char *name;
  Py_buffer in;
  Py_ssize_t count;
  if (!PyArg_ParseTuple(args, "sy*n:_unpack", &name, &in, &count)) return NULL;
  uint32_t bits = packed_bits(name);
  PyObject *out = bits != 0 && count >= 0 ? PyByteArray_FromStringAndSize(NULL, count) : NULL;
  if (out != NULL) {
    uint8_t *codes = (uint8_t *)PyByteArray_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS hurray__unpack_bits(bits, in.buf, (size_t)in.len, (uint64_t)count,
                                               codes);
    Py_END_ALLOW_THREADS
  } else if (bits != 0 && count < 0) {
    PyErr_SetString(PyExc_ValueError, "count must be >= 0");
  }
  PyBuffer_Release(&in);
  return out;
}

/* _pack(dtype, codes) -> bytes: one code a byte in, packed out. */
PyObject *mod_pack(PyObject *module, PyObject *args) {
  (void)module;
  const char *name;
  Py_buffer in;
  if (!PyArg_ParseTuple(args, "sy*:_pack", &name, &in)) return NULL;
  uint32_t bits = packed_bits(name);
  uint64_t count = (uint64_t)in.len;
  PyObject *out = bits != 0 ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((count * bits + 7) / 8))
                            : NULL;
  if (out != NULL) {
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS hurray__pack_bits(bits, in.buf, count, dst);
    Py_END_ALLOW_THREADS
  }
  PyBuffer_Release(&in);
  return out;
}

/* _member(tensor, name) -> (encoded member descriptor, parent buffer indices):
 * member `name` of a composite tensor, renumbered into a table of its own
 * (src/core/member.c); Python hands it the parent's buffers at those indices. */
PyObject *mod_member(PyObject *module, PyObject *args) {
  ModuleState *st = PyModule_GetState(module);
  PyObject *tensor;
  const char *name;
  if (!PyArg_ParseTuple(args, "O!s:_member", st->tensor_type, &tensor, &name)) return NULL;
  TensorObject *t = (TensorObject *)tensor;
  if (hy_tensor_ready(t) < 0) return NULL;
  uint32_t count = hurray_descriptor_buffer_count(t->descriptor);
  uint32_t *map = PyMem_Malloc((count ? count : 1) * sizeof *map);
  if (map == NULL) return PyErr_NoMemory();
  HurrayError e = {0};
  HurrayDescriptor *m = NULL;
  uint32_t len = 0;
  HurrayStatus s = hurray__member_extract(t->descriptor, name, &m, map, &len, &e);
  PyObject *out = NULL;
  if (s != HURRAY_OK) {
    hy_raise_status(st, s, &e);
  } else {
    PyObject *encoded = hy_encode_descriptor(st, m);
    PyObject *used = encoded != NULL ? PyTuple_New(len) : NULL;
    for (uint32_t i = 0; used != NULL && i < len; i++) {
      PyObject *x = PyLong_FromUnsignedLong(map[i]);
      if (x == NULL) Py_CLEAR(used);
      else PyTuple_SET_ITEM(used, i, x);
    }
    out = used != NULL ? Py_BuildValue("(NN)", encoded, used) : NULL;
    if (out == NULL) {
      Py_XDECREF(encoded);
      Py_XDECREF(used);
    }
  }
  hurray_descriptor_destroy(m);
  PyMem_Free(map);
  return out;
}
