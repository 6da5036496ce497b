/*
 * _hurray: the CPython extension behind the `hurray` package.
 *
 * What lives here is what must be C: descriptors built and read through
 * libhurray (never re-implemented in Python), tensors that own N buffers
 * each with its own release, the `__hurray__` capsule protocol of
 * docs/impl/python-bindings.md, and file I/O with the GIL released.
 *
 * Multi-phase init, heap types, and every type and exception held in the
 * module state.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"
#include "../../src/core/descriptor_internal.h"
#include "_dlpack.h"
#include "_loading.h"
#include "_guard.h"
#include "_source.h"

#define CAPSULE_NAME "hurray_buffer"
#define USED_CAPSULE_NAME "used_hurray_buffer"
#define STATUS_SLOTS 128

/* The capsule context: the producer's ABI version first, so a consumer of
 * any version can read it, then the encoded descriptor. */
typedef struct CapsuleContext {
  uint32_t abi_version;
  uint32_t reserved;
  uint64_t descriptor_len;
  uint8_t descriptor[];
} CapsuleContext;

typedef struct ModuleState {
  PyTypeObject *tensor_type;
  PyTypeObject *view_type;
  PyTypeObject *file_type;
  PyObject *tensor_class; /* the Python subclass instances are made of */
  PyObject *error_base;
  PyObject *errors[STATUS_SLOTS];
} ModuleState;

static struct PyModuleDef hurray_module;

static ModuleState *state_of_type(PyTypeObject *type) {
  PyObject *module = PyType_GetModuleByDef(type, &hurray_module);
  return module == NULL ? NULL : PyModule_GetState(module);
}

/* ------------------------------------------------------------- errors */

/* A failure the operating system reported (error->os_errno set) is raised
 * as an OSError subclass carrying errno and `filename` (may be NULL), also
 * a HurrayIOError: see hy_raise_os. */
static PyObject *raise_status_file(ModuleState *st, HurrayStatus status, const HurrayError *error,
                                   PyObject *filename) {
  if (error != NULL && error->os_errno != 0 && st->errors[HURRAY_ERR_IO] != NULL) {
    return hy_raise_os(st->errors[HURRAY_ERR_IO], status, error, filename);
  }
  PyObject *cls = (status > 0 && status < STATUS_SLOTS && st->errors[status] != NULL)
                      ? st->errors[status]
                      : st->error_base;
  PyObject *message = PyUnicode_FromFormat("%s: %s", hurray_status_name(status),
                                           error != NULL ? error->message : "");
  if (message == NULL) return NULL;
  PyObject *exc = PyObject_CallOneArg(cls, message);
  Py_DECREF(message);
  if (exc == NULL) return NULL;
  PyObject *code = PyLong_FromLong((long)status);
  PyObject *name = PyUnicode_FromString(hurray_status_name(status));
  if (code != NULL && name != NULL) {
    PyObject_SetAttrString(exc, "status", code);
    PyObject_SetAttrString(exc, "status_name", name);
  }
  Py_XDECREF(code);
  Py_XDECREF(name);
  PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

static PyObject *raise_status(ModuleState *st, HurrayStatus status, const HurrayError *error) {
  return raise_status_file(st, status, error, NULL);
}

/* Release callbacks may run on any thread, or after the interpreter has
 * gone: they take the GIL themselves and do nothing once it is finalizing. */
#if PY_VERSION_HEX >= 0x030D0000
#define interpreter_finalizing() Py_IsFinalizing()
#else
#define interpreter_finalizing() _Py_IsFinalizing()
#endif

static void release_pyobject(void *data, void *ctx) {
  (void)data;
  if (!Py_IsInitialized() || interpreter_finalizing()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF((PyObject *)ctx);
  PyGILState_Release(gil);
}

static void release_pybuffer(void *data, void *ctx) {
  (void)data;
  Py_buffer *view = ctx;
  if (Py_IsInitialized() && !interpreter_finalizing()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyBuffer_Release(view);
    PyGILState_Release(gil);
  }
  PyMem_RawFree(view);
}

/* ------------------------------------------------- descriptors from dicts */

typedef const char *(*EnumName)(int value);

static const char *role_name(int v) { return hurray__role_name((HurrayBufferRole)v); }
static const char *sync_name(int v) { return hurray__sync_mode_name((HurraySyncMode)v); }
static const char *memory_name(int v) { return hurray__memory_class_name((HurrayMemoryClass)v); }
static const char *mx_name(int v) { return hurray__mx_element_name((HurrayMxElement)v); }

/* Looks a name up among the values [lo, hi] of an enum. */
static int enum_value(PyObject *name, EnumName names, int lo, int hi, const char *what) {
  const char *s = PyUnicode_Check(name) ? hy_utf8(name, what) : NULL;
  if (s != NULL) {
    for (int v = lo; v <= hi; v++) {
      if (strcmp(names(v), s) == 0) return v;
    }
  }
  if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "unknown %s %R", what, name);
  return -1;
}

static PyObject *item(PyObject *dict, const char *key) {
  PyObject *v = PyDict_GetItemString(dict, key); /* borrowed */
  return v == Py_None ? NULL : v;
}

static int need(PyObject *v, const char *key) {
  if (v == NULL) PyErr_Format(PyExc_KeyError, "descriptor field '%s' is required", key);
  return v == NULL ? -1 : 0;
}

static int get_u64(PyObject *dict, const char *key, uint64_t fallback, uint64_t *out) {
  PyObject *v = item(dict, key);
  if (v == NULL) {
    *out = fallback;
    return 0;
  }
  *out = PyLong_AsUnsignedLongLong(v);
  return PyErr_Occurred() ? -1 : 0;
}

static int get_i64(PyObject *dict, const char *key, int64_t fallback, int64_t *out) {
  PyObject *v = item(dict, key);
  if (v == NULL) {
    *out = fallback;
    return 0;
  }
  *out = PyLong_AsLongLong(v);
  return PyErr_Occurred() ? -1 : 0;
}

/* Buffer indices: None or absent means "no buffer". */
static int get_index(PyObject *dict, const char *key, uint32_t *out) {
  uint64_t v;
  if (get_u64(dict, key, HURRAY_NO_BUFFER, &v) < 0) return -1;
  if (v > UINT32_MAX) {
    PyErr_Format(PyExc_OverflowError, "%s out of range", key);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

static int get_dtype(PyObject *dict, const char *key, bool optional, HurrayDType *out) {
  PyObject *v = item(dict, key);
  if (v == NULL) {
    if (optional) {
      *out = HURRAY_DTYPE_INVALID;
      return 0;
    }
    return need(v, key);
  }
  const char *s = PyUnicode_Check(v) ? hy_utf8(v, key) : NULL;
  if (s == NULL && PyErr_Occurred()) return -1;
  *out = hurray_dtype_from_name(s);
  if (*out == HURRAY_DTYPE_INVALID) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: unknown dtype %R", key, v);
    return -1;
  }
  return 0;
}

static int get_u64_list(PyObject *dict, const char *key, uint64_t *out, Py_ssize_t max,
                        Py_ssize_t *n_out) {
  PyObject *v = item(dict, key);
  if (need(v, key) < 0) return -1;
  PyObject *seq = PySequence_Fast(v, key);
  if (seq == NULL) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > max) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "%s: %zd entries exceed the limit of %zd", key, n, max);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    out[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  *n_out = n;
  return 0;
}

static HurrayDescriptor *build_node(ModuleState *st, PyObject *spec, bool root);

static int build_layout(ModuleState *st, HurrayDescriptor *d, PyObject *layout, HurrayError *e) {
  if (!PyDict_Check(layout)) {
    PyErr_SetString(PyExc_TypeError, "layout must be a dict");
    return -1;
  }
  PyObject *kind = item(layout, "kind");
  const char *k = kind != NULL && PyUnicode_Check(kind) ? hy_utf8(kind, "layout kind") : "";
  if (k == NULL) return -1;
  HurrayStatus s = HURRAY_OK;
  uint32_t data, a, b;
  HurrayDType index_dtype;
  uint64_t nnz;
  if (strcmp(k, "dense") == 0) {
    if (get_index(layout, "data_buffer", &data) < 0) return -1;
    s = hurray_descriptor_set_layout_dense(d, data == HURRAY_NO_BUFFER ? 0 : data, e);
  } else if (strcmp(k, "sparse") == 0) {
    PyObject *fmt = item(layout, "format");
    const char *f = fmt != NULL && PyUnicode_Check(fmt) ? hy_utf8(fmt, "sparse format") : "";
    if (f == NULL) return -1;
    if (get_dtype(layout, "index_dtype", false, &index_dtype) < 0 ||
        get_u64(layout, "nnz", 0, &nnz) < 0 || get_index(layout, "values_buffer", &data) < 0) {
      return -1;
    }
    if (strcmp(f, "coo") == 0) {
      uint64_t indices[HURRAY_MAX_RANK];
      uint32_t idx32[HURRAY_MAX_RANK];
      Py_ssize_t n = 0;
      if (get_u64_list(layout, "index_buffers", indices, HURRAY_MAX_RANK, &n) < 0) return -1;
      if ((uint32_t)n != hurray_descriptor_rank(d)) {
        PyErr_Format(PyExc_ValueError, "index_buffers needs one entry per dimension (%u)",
                     hurray_descriptor_rank(d));
        return -1;
      }
      for (Py_ssize_t i = 0; i < n; i++) {
        if (hy_check_max(indices[i], UINT32_MAX, "index_buffers entry") < 0) return -1;
        idx32[i] = (uint32_t)indices[i];
      }
      PyObject *canonical = item(layout, "canonical");
      s = hurray_descriptor_set_layout_coo(d, index_dtype, nnz, data, idx32,
                                           canonical != NULL && PyObject_IsTrue(canonical) == 1,
                                           e);
    } else if (strcmp(f, "csr") == 0 || strcmp(f, "csc") == 0 || strcmp(f, "bsr") == 0) {
      if (get_index(layout, "indptr_buffer", &a) < 0 ||
          get_index(layout, "indices_buffer", &b) < 0) {
        return -1;
      }
      if (strcmp(f, "bsr") == 0) {
        uint64_t block[2];
        Py_ssize_t n = 0;
        if (get_u64_list(layout, "block_shape", block, 2, &n) < 0) return -1;
        if (n != 2) {
          PyErr_SetString(PyExc_ValueError, "block_shape needs two entries");
          return -1;
        }
        s = hurray_descriptor_set_layout_bsr(d, index_dtype, nnz, block[0], block[1], data, a, b,
                                             e);
      } else {
        s = hurray_descriptor_set_layout_compressed(
            d, strcmp(f, "csr") == 0 ? HURRAY_SPARSE_CSR : HURRAY_SPARSE_CSC, index_dtype, nnz,
            data, a, b,
            e);
      }
    } else {
      PyErr_Format(PyExc_ValueError, "unknown sparse format %R", fmt);
      return -1;
    }
  } else if (strcmp(k, "paged") == 0) {
    uint64_t axis, page_size, num_pages;
    if (get_u64(layout, "axis", 0, &axis) < 0 || get_u64(layout, "page_size", 0, &page_size) < 0 ||
        get_u64(layout, "num_pages", 0, &num_pages) < 0 ||
        get_dtype(layout, "table_dtype", false, &index_dtype) < 0 ||
        get_index(layout, "pool_buffer", &a) < 0 || get_index(layout, "table_buffer", &b) < 0) {
      return -1;
    }
    if (hy_check_max(axis, UINT32_MAX, "axis") < 0) return -1;
    s = hurray_descriptor_set_layout_paged(d, (uint32_t)axis, page_size, num_pages, index_dtype,
                                           a, b, e);
  } else if (strcmp(k, "composite") == 0) {
    s = hurray_descriptor_set_layout_composite(d, e);
    PyObject *members = item(layout, "members");
    if (s == HURRAY_OK && members != NULL) {
      PyObject *seq = PySequence_Fast(members, "members must be a sequence");
      if (seq == NULL) return -1;
      for (Py_ssize_t i = 0; s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *name = PyDict_Check(m) ? item(m, "name") : NULL;
        PyObject *sub = PyDict_Check(m) ? item(m, "descriptor") : NULL;
        const char *n = name != NULL && PyUnicode_Check(name) ? hy_utf8(name, "member name") : NULL;
        if (n == NULL || sub == NULL) {
          Py_DECREF(seq);
          if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "a member needs a name and a descriptor");
          return -1;
        }
        HurrayDescriptor *member = build_node(st, sub, false);
        if (member == NULL) {
          Py_DECREF(seq);
          return -1;
        }
        s = hurray_descriptor_add_member(d, n, member, e);
      }
      Py_DECREF(seq);
    }
  } else {
    PyErr_Format(PyExc_ValueError, "unknown layout kind %R", kind);
    return -1;
  }
  if (s != HURRAY_OK) {
    raise_status(st, s, e);
    return -1;
  }
  return 0;
}

static int build_quant(ModuleState *st, HurrayDescriptor *d, PyObject *q, HurrayError *e) {
  if (!PyDict_Check(q)) {
    PyErr_SetString(PyExc_TypeError, "quantization must be a dict");
    return -1;
  }
  PyObject *kind = item(q, "kind");
  const char *k = kind != NULL && PyUnicode_Check(kind) ? hy_utf8(kind, "quantization kind") : "";
  if (k == NULL) return -1;
  uint64_t axis = 0, block = 0;
  int64_t zero_point = 0;
  uint32_t scale_buffer, zp_buffer;
  HurrayDType scale_dtype, zp_dtype;
  HurrayStatus s = HURRAY_OK;
  if (get_u64(q, "axis", 0, &axis) < 0 || get_u64(q, "block_size", 0, &block) < 0 ||
      get_i64(q, "zero_point", 0, &zero_point) < 0) {
    return -1;
  }
  if (axis > UINT32_MAX) {
    PyErr_SetString(PyExc_OverflowError, "axis out of range");
    return -1;
  }
  if (strcmp(k, "none") == 0) {
    hurray_descriptor_set_quant_none(d);
  } else if (strcmp(k, "per_tensor_affine") == 0) {
    PyObject *scale = item(q, "scale");
    if (need(scale, "scale") < 0) return -1;
    double value = PyFloat_AsDouble(scale);
    if (PyErr_Occurred()) return -1;
    s = hurray_descriptor_set_quant_per_tensor_affine(d, value, zero_point, e);
  } else if (strcmp(k, "per_channel_affine") == 0 || strcmp(k, "block_affine") == 0) {
    if (get_index(q, "scale_buffer", &scale_buffer) < 0 ||
        get_dtype(q, "scale_dtype", false, &scale_dtype) < 0 ||
        get_index(q, "zero_point_buffer", &zp_buffer) < 0 ||
        get_dtype(q, "zero_point_dtype", true, &zp_dtype) < 0) {
      return -1;
    }
    s = k[0] == 'p' ? hurray_descriptor_set_quant_per_channel_affine(d, (uint32_t)axis,
                                                                      scale_buffer, scale_dtype, e)
                    : hurray_descriptor_set_quant_block_affine(d, (uint32_t)axis, block,
                                                               scale_buffer, scale_dtype, e);
    if (zp_buffer != HURRAY_NO_BUFFER && zero_point != 0) {
      PyErr_SetString(PyExc_ValueError,
                      "give either zero_point_buffer or an inline zero_point, not both");
      return -1;
    }
    if (s == HURRAY_OK && zp_buffer != HURRAY_NO_BUFFER) {
      s = hurray_descriptor_set_quant_zero_point_buffer(d, zp_buffer, zp_dtype, e);
    } else if (s == HURRAY_OK && zero_point != 0) {
      s = hurray_descriptor_set_quant_zero_point(d, zero_point, e);
    }
  } else if (strcmp(k, "nf4") == 0) {
    if (get_index(q, "absmax_buffer", &scale_buffer) < 0 ||
        get_dtype(q, "absmax_dtype", false, &scale_dtype) < 0) {
      return -1;
    }
    s = hurray_descriptor_set_quant_nf4(d, block, scale_buffer, scale_dtype, e);
  } else if (strcmp(k, "mx") == 0) {
    PyObject *element = item(q, "element");
    int el = element == NULL ? -1 : enum_value(element, mx_name, 1, HURRAY_MX_INT8, "MX element");
    if (el < 0 || get_index(q, "scale_buffer", &scale_buffer) < 0) {
      if (!PyErr_Occurred()) need(element, "element");
      return -1;
    }
    if (item(q, "block_size") != NULL && block != HURRAY_MX_BLOCK_SIZE) {
      snprintf(e->message, sizeof e->message,
               "quantization.block_size: MX blocks are %u elements, not %llu",
               HURRAY_MX_BLOCK_SIZE, (unsigned long long)block);
      raise_status(st, HURRAY_ERR_QUANT_BLOCK_SIZE, e);
      return -1;
    }
    s = hurray_descriptor_set_quant_mx(d, (HurrayMxElement)el, (uint32_t)axis, scale_buffer, e);
  } else {
    PyErr_Format(PyExc_ValueError, "unknown quantization kind %R", kind);
    return -1;
  }
  if (s != HURRAY_OK) {
    raise_status(st, s, e);
    return -1;
  }
  return 0;
}

static int build_root_parts(ModuleState *st, HurrayDescriptor *d, PyObject *spec,
                            HurrayError *e) {
  HurrayStatus s = HURRAY_OK;
  PyObject *buffers = item(spec, "buffers");
  if (buffers != NULL) {
    PyObject *seq = PySequence_Fast(buffers, "buffers must be a sequence");
    if (seq == NULL) return -1;
    for (Py_ssize_t i = 0; s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
      PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
      uint64_t size, alignment;
      PyObject *role = PyDict_Check(b) ? item(b, "role") : NULL;
      PyObject *sync = PyDict_Check(b) ? item(b, "sync_mode") : NULL;
      int r = role == NULL ? -1 : enum_value(role, role_name, 1, HURRAY_ROLE_PAGE_TABLE, "role");
      int m = sync == NULL ? HURRAY_SYNC_READY
                           : enum_value(sync, sync_name, 0, HURRAY_SYNC_EVENT, "sync_mode");
      if (r < 0 || m < 0 || get_u64(b, "byte_size", 0, &size) < 0 ||
          get_u64(b, "alignment", 1, &alignment) < 0) {
        Py_DECREF(seq);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a buffer needs a role");
        return -1;
      }
      s = hurray_descriptor_add_buffer(d, (HurrayBufferRole)r, size,
                                       alignment > UINT32_MAX ? 3 : (uint32_t)alignment,
                                       (HurraySyncMode)m, NULL, e);
    }
    Py_DECREF(seq);
  }
  PyObject *device = item(spec, "device");
  if (s == HURRAY_OK && device != NULL) {
    int64_t type, id;
    PyObject *mc = PyDict_Check(device) ? item(device, "memory_class") : NULL;
    int m = mc == NULL ? HURRAY_MEMORY_HOST
                       : enum_value(mc, memory_name, 1, HURRAY_MEMORY_MANAGED, "memory_class");
    if (!PyDict_Check(device) || m < 0 || get_i64(device, "type", 1, &type) < 0 ||
        get_i64(device, "id", 0, &id) < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "device must be a dict");
      return -1;
    }
    if (type < INT32_MIN || type > INT32_MAX || id < INT32_MIN || id > INT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "device type and id must fit int32");
      return -1;
    }
    s = hurray_descriptor_set_device(d, (int32_t)type, (int32_t)id, (HurrayMemoryClass)m, e);
  }
  PyObject *stats = item(spec, "statistics");
  if (s == HURRAY_OK && stats != NULL) {
    PyObject *v;
    if ((v = item(stats, "min")) != NULL) hurray_descriptor_set_stat_min(d, PyFloat_AsDouble(v));
    if ((v = item(stats, "max")) != NULL) hurray_descriptor_set_stat_max(d, PyFloat_AsDouble(v));
    if ((v = item(stats, "nan_count")) != NULL)
      hurray_descriptor_set_stat_nan_count(d, PyLong_AsUnsignedLongLong(v));
    if ((v = item(stats, "zero_count")) != NULL)
      hurray_descriptor_set_stat_zero_count(d, PyLong_AsUnsignedLongLong(v));
    if (PyErr_Occurred()) return -1;
  }
  PyObject *shard = item(spec, "shard");
  if (s == HURRAY_OK && shard != NULL) {
    uint64_t global[HURRAY_MAX_RANK], offsets[HURRAY_MAX_RANK];
    Py_ssize_t ng = 0, no = 0;
    if (get_u64_list(shard, "global_shape", global, HURRAY_MAX_RANK, &ng) < 0 ||
        get_u64_list(shard, "offsets", offsets, HURRAY_MAX_RANK, &no) < 0) {
      return -1;
    }
    if (ng != no) {
      PyErr_SetString(PyExc_ValueError, "shard global_shape and offsets differ in length");
      return -1;
    }
    s = hurray_descriptor_set_shard(d, (uint32_t)ng, global, offsets, e);
  }
  PyObject *ext = item(spec, "extension");
  if (s == HURRAY_OK && ext != NULL) {
    PyObject *name = item(ext, "name"), *meta = item(ext, "metadata");
    const char *n = name != NULL && PyUnicode_Check(name) ? hy_utf8(name, "extension name") : NULL;
    Py_buffer view = {0};
    if (n == NULL || (meta != NULL && PyObject_GetBuffer(meta, &view, PyBUF_SIMPLE) < 0)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "extension needs a name");
      return -1;
    }
    s = hurray_descriptor_set_extension(d, n, view.buf, meta != NULL ? (size_t)view.len : 0, e);
    if (meta != NULL) PyBuffer_Release(&view);
  }
  if (s != HURRAY_OK) {
    raise_status(st, s, e);
    return -1;
  }
  return 0;
}

static HurrayDescriptor *build_node(ModuleState *st, PyObject *spec, bool root) {
  if (!PyDict_Check(spec)) {
    PyErr_SetString(PyExc_TypeError, "a descriptor spec must be a dict");
    return NULL;
  }
  HurrayError e = {0};
  HurrayDType dtype;
  uint64_t shape[HURRAY_MAX_RANK];
  Py_ssize_t rank = 0;
  if (get_dtype(spec, "dtype", false, &dtype) < 0 ||
      get_u64_list(spec, "shape", shape, HURRAY_MAX_RANK, &rank) < 0) {
    return NULL;
  }
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_descriptor_create(dtype, (uint32_t)rank, shape, &d, &e);
  if (s != HURRAY_OK) {
    raise_status(st, s, &e);
    return NULL;
  }
  PyObject *strides = item(spec, "strides");
  uint64_t offset;
  if (strides != NULL) {
    uint64_t raw[HURRAY_MAX_RANK];
    Py_ssize_t n = 0;
    PyObject *seq = PySequence_Fast(strides, "strides must be a sequence");
    if (seq == NULL) goto fail;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n != rank) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "strides need %zd entries", rank);
      goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      raw[i] = (uint64_t)PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) goto fail;
    hurray_descriptor_set_strides(d, (const int64_t *)raw, &e);
  }
  if (get_u64(spec, "byte_offset", 0, &offset) < 0) goto fail;
  hurray_descriptor_set_byte_offset(d, offset);
  PyObject *layout = item(spec, "layout");
  if (layout != NULL && build_layout(st, d, layout, &e) < 0) goto fail;
  PyObject *quant = item(spec, "quantization");
  if (quant != NULL && build_quant(st, d, quant, &e) < 0) goto fail;
  if (root && build_root_parts(st, d, spec, &e) < 0) goto fail;
  return d;
fail:
  hurray_descriptor_destroy(d);
  return NULL;
}

static PyObject *encode_descriptor(ModuleState *st, const HurrayDescriptor *d) {
  HurrayError e = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  HurrayStatus s = hurray_descriptor_encode(d, &bytes, &len, &e);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  PyObject *out = PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)len);
  hurray_free(bytes);
  return out;
}

/* Decodes bytes-like `obj` into a new descriptor (NULL with an exception). */
static HurrayDescriptor *decode_descriptor(ModuleState *st, PyObject *obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_descriptor_decode(view.buf, (size_t)view.len, &d, &e);
  PyBuffer_Release(&view);
  if (s != HURRAY_OK) {
    raise_status(st, s, &e);
    return NULL;
  }
  return d;
}

static PyObject *descriptor_to_json(ModuleState *st, const HurrayDescriptor *d) {
  HurrayError e = {0};
  char *json = NULL;
  HurrayStatus s = hurray_descriptor_to_json(d, &json, &e);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  PyObject *out = PyUnicode_FromString(json);
  hurray_free(json);
  return out;
}

static PyObject *mod_descriptor_build(PyObject *module, PyObject *spec) {
  ModuleState *st = PyModule_GetState(module);
  HurrayDescriptor *d = build_node(st, spec, true);
  if (d == NULL) return NULL;
  PyObject *out = encode_descriptor(st, d);
  hurray_descriptor_destroy(d);
  return out;
}

static PyObject *mod_descriptor_json(PyObject *module, PyObject *encoded) {
  ModuleState *st = PyModule_GetState(module);
  HurrayDescriptor *d = decode_descriptor(st, encoded);
  if (d == NULL) return NULL;
  PyObject *out = descriptor_to_json(st, d);
  hurray_descriptor_destroy(d);
  return out;
}

static PyObject *mod_descriptor_validate(PyObject *module, PyObject *encoded) {
  ModuleState *st = PyModule_GetState(module);
  HurrayDescriptor *d = decode_descriptor(st, encoded);
  if (d == NULL) return NULL;
  HurrayError e = {0};
  HurrayStatus s = hurray_descriptor_validate(d, &e);
  hurray_descriptor_destroy(d);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  Py_RETURN_NONE;
}

static PyObject *mod_descriptor_required_bytes(PyObject *module, PyObject *encoded) {
  ModuleState *st = PyModule_GetState(module);
  HurrayDescriptor *d = decode_descriptor(st, encoded);
  if (d == NULL) return NULL;
  HurrayError e = {0};
  PyObject *out = PyList_New(0);
  for (uint32_t i = 0; out != NULL && i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t need_bytes = 0;
    HurrayStatus s = hurray_descriptor_buffer_required_bytes(d, i, &need_bytes, &e);
    if (s != HURRAY_OK) {
      Py_CLEAR(out);
      raise_status(st, s, &e);
      break;
    }
    PyObject *v = PyLong_FromUnsignedLongLong(need_bytes);
    if (v == NULL || PyList_Append(out, v) < 0) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  hurray_descriptor_destroy(d);
  return out;
}

/* ------------------------------------------------------------------ Tensor */

typedef struct TensorObject {
  PyObject_HEAD
  HurrayDescriptor *descriptor;
  HurrayBufferList *buffers;
  bool *writable; /* per buffer */
  bool protected_memory; /* buffers are a PROT_READ mapping: a write would crash */
  PyObject *weakreflist;
  PyObject *descriptor_cache; /* the Python Descriptor, built once on demand */
} TensorObject;

static TensorObject *tensor_alloc(ModuleState *st, PyTypeObject *type) {
  PyTypeObject *t = type != NULL ? type : (PyTypeObject *)st->tensor_class;
  if (t == NULL) t = st->tensor_type;
  TensorObject *self = (TensorObject *)t->tp_alloc(t, 0);
  return self;
}

static int tensor_adopt(TensorObject *self, HurrayDescriptor *d, HurrayBufferList *list,
                        bool writable) {
  size_t n = hurray_buffer_list_len(list);
  self->writable = PyMem_Calloc(n ? n : 1, sizeof(bool));
  if (self->writable == NULL) {
    hurray_descriptor_destroy(d);
    hurray_buffer_list_destroy(list);
    PyErr_NoMemory();
    return -1;
  }
  for (size_t i = 0; i < n; i++) self->writable[i] = writable;
  self->descriptor = d;
  self->buffers = list;
  return 0;
}

/* Tensor(descriptor_bytes, buffers): each buffer-protocol object becomes one
 * HurrayBuffer that holds its own Py_buffer, released on its own. */
static int tensor_init(PyObject *op, PyObject *args, PyObject *kwargs) {
  TensorObject *self = (TensorObject *)op;
  static char *kwlist[] = {"descriptor", "buffers", NULL};
  PyObject *encoded, *objects;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:Tensor", kwlist, &encoded, &objects)) {
    return -1;
  }
  if (self->descriptor != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "Tensor is already initialised");
    return -1;
  }
  ModuleState *st = state_of_type(Py_TYPE(op));
  if (st == NULL) return -1;
  HurrayDescriptor *d = decode_descriptor(st, encoded);
  if (d == NULL) return -1;
  PyObject *seq = PySequence_Fast(objects, "buffers must be a sequence");
  if (seq == NULL) {
    hurray_descriptor_destroy(d);
    return -1;
  }
  HurrayError e = {0};
  HurrayBufferList *list = NULL;
  HurrayStatus s = hurray_buffer_list_create(&list, &e);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  bool *writable = PyMem_Calloc(n ? (size_t)n : 1, sizeof(bool));
  for (Py_ssize_t i = 0; s == HURRAY_OK && writable != NULL && i < n; i++) {
    Py_buffer *view = PyMem_RawMalloc(sizeof *view);
    if (view == NULL) {
      PyErr_NoMemory();
      break;
    }
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), view, PyBUF_ANY_CONTIGUOUS) < 0) {
      PyMem_RawFree(view);
      break;
    }
    writable[i] = !view->readonly;
    HurrayBuffer *b = NULL;
    s = hurray_buffer_create(view->buf, (uint64_t)view->len, release_pybuffer, view, &b, &e);
    if (s == HURRAY_OK) s = hurray_buffer_list_push(list, b, &e);
  }
  Py_DECREF(seq);
  if (writable == NULL && !PyErr_Occurred()) PyErr_NoMemory();
  if (!PyErr_Occurred() && s == HURRAY_OK) {
    s = hurray_validate_buffer_placement(d, list, &e);
  }
  /* The sequence and the exporters may have run Python code that
   * initialised this tensor meanwhile: the first one to finish keeps it. */
  if (!PyErr_Occurred() && s == HURRAY_OK && self->descriptor != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "Tensor is already initialised");
  }
  if (PyErr_Occurred() || s != HURRAY_OK) {
    if (!PyErr_Occurred()) raise_status(st, s, &e);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    PyMem_Free(writable);
    return -1;
  }
  self->descriptor = d;
  self->buffers = list;
  self->writable = writable;
  return 0;
}

static void tensor_dealloc(PyObject *op) {
  TensorObject *self = (TensorObject *)op;
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  if (self->weakreflist != NULL) PyObject_ClearWeakRefs(op);
  Py_CLEAR(self->descriptor_cache);
  hurray_buffer_list_destroy(self->buffers); /* each release runs once */
  hurray_descriptor_destroy(self->descriptor);
  PyMem_Free(self->writable);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static int tensor_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(((TensorObject *)op)->descriptor_cache);
  return 0;
}

static int tensor_clear(PyObject *op) {
  Py_CLEAR(((TensorObject *)op)->descriptor_cache);
  return 0;
}

static PyObject *tensor_cache_get(PyObject *op, void *closure) {
  (void)closure;
  PyObject *cache = ((TensorObject *)op)->descriptor_cache;
  return Py_NewRef(cache != NULL ? cache : Py_None);
}

static int tensor_cache_set(PyObject *op, PyObject *value, void *closure) {
  (void)closure;
  Py_XSETREF(((TensorObject *)op)->descriptor_cache,
             value == NULL || value == Py_None ? NULL : Py_NewRef(value));
  return 0;
}

static int tensor_ready(TensorObject *self) {
  if (self->descriptor == NULL) {
    PyErr_SetString(PyExc_ValueError, "Tensor is not initialised");
    return -1;
  }
  return 0;
}

static PyObject *tensor_encoded(PyObject *op, void *closure) {
  (void)closure;
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  return encode_descriptor(state_of_type(Py_TYPE(op)), self->descriptor);
}

static PyObject *tensor_protected(PyObject *op, void *closure) {
  (void)closure;
  return PyBool_FromLong(((TensorObject *)op)->protected_memory);
}

static PyObject *tensor_buffer_count(PyObject *op, void *closure) {
  (void)closure;
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  return PyLong_FromSize_t(hurray_buffer_list_len(self->buffers));
}

/* A zero-copy view of buffer i that keeps the tensor alive. */
typedef struct ViewObject {
  PyObject_HEAD
  PyObject *tensor;
  Py_ssize_t index;
} ViewObject;

static PyObject *tensor_buffer(PyObject *op, PyObject *arg) {
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  Py_ssize_t i = PyLong_AsSsize_t(arg);
  if (i == -1 && PyErr_Occurred()) return NULL;
  if (i < 0 || (size_t)i >= hurray_buffer_list_len(self->buffers)) {
    PyErr_SetString(PyExc_IndexError, "buffer index out of range");
    return NULL;
  }
  ModuleState *st = state_of_type(Py_TYPE(op));
  ViewObject *view = PyObject_New(ViewObject, st->view_type);
  if (view == NULL) return NULL;
  view->tensor = Py_NewRef(op);
  view->index = i;
  PyObject *mv = PyMemoryView_FromObject((PyObject *)view);
  Py_DECREF(view);
  return mv;
}

static PyObject *tensor_buffer_address(PyObject *op, PyObject *arg) {
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  Py_ssize_t i = PyLong_AsSsize_t(arg);
  if (i == -1 && PyErr_Occurred()) return NULL;
  HurrayBuffer *b = hurray_buffer_list_get(self->buffers, (size_t)i);
  if (i < 0 || b == NULL) {
    PyErr_SetString(PyExc_IndexError, "buffer index out of range");
    return NULL;
  }
  return PyLong_FromVoidPtr(hurray_buffer_data(b));
}

static int view_getbuffer(PyObject *op, Py_buffer *out, int flags) {
  ViewObject *v = (ViewObject *)op;
  TensorObject *t = (TensorObject *)v->tensor;
  HurrayBuffer *b = hurray_buffer_list_get(t->buffers, (size_t)v->index);
  void *data = hurray_buffer_data(b);
  static char empty;
  return PyBuffer_FillInfo(out, op, data != NULL ? data : &empty,
                           (Py_ssize_t)hurray_buffer_size(b), !t->writable[v->index], flags);
}

static void view_dealloc(PyObject *op) {
  PyTypeObject *tp = Py_TYPE(op);
  Py_XDECREF(((ViewObject *)op)->tensor);
  PyObject_Free(op);
  Py_DECREF(tp);
}

/* _view_info(): what a dense numpy view needs, read straight from the C
 * descriptor (no decoding): (dtype, shape, strides or None, byte_offset,
 * data_buffer, layout kind, quantization kind). */
static PyObject *tensor_view_info(PyObject *op, PyObject *unused) {
  (void)unused;
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  const HurrayDescriptor *d = self->descriptor;
  uint32_t rank = hurray_descriptor_rank(d);
  const uint64_t *shape = hurray_descriptor_shape(d);
  const int64_t *strides = hurray_descriptor_strides(d);
  PyObject *shape_t = PyTuple_New(rank);
  PyObject *strides_t = strides != NULL ? PyTuple_New(rank) : Py_NewRef(Py_None);
  if (shape_t == NULL || strides_t == NULL) {
    Py_XDECREF(shape_t);
    Py_XDECREF(strides_t);
    return NULL;
  }
  for (uint32_t i = 0; i < rank; i++) {
    PyTuple_SET_ITEM(shape_t, i, PyLong_FromUnsignedLongLong(shape[i]));
    if (strides != NULL) PyTuple_SET_ITEM(strides_t, i, PyLong_FromLongLong(strides[i]));
  }
  return Py_BuildValue("sNNKIii", hurray_dtype_name(hurray_descriptor_dtype(d)), shape_t,
                       strides_t, (unsigned long long)hurray_descriptor_byte_offset(d),
                       hurray_descriptor_data_buffer(d), (int)hurray_descriptor_layout_kind(d),
                       (int)hurray_descriptor_quant_kind(d));
}

/* _to_dense(out): the logical tensor, row-major, into a writable buffer. */
static PyObject *tensor_to_dense(PyObject *op, PyObject *arg) {
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  Py_buffer out;
  if (PyObject_GetBuffer(arg, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
  /* The Python wrapper checked the output-size limit (_check_output_size)
   * before allocating `out`; the size of `out` is the caller's. */
  static const HurrayOutputLimits unlimited = HURRAY_OUTPUT_UNLIMITED;
  s = hurray_tensor_to_dense_with(self->descriptor, self->buffers, out.buf, (uint64_t)out.len,
                                  &unlimited, &e);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&out);
  if (s != HURRAY_OK) return raise_status(state_of_type(Py_TYPE(op)), s, &e);
  Py_RETURN_NONE;
}

/* _dequantize(out, out_dtype, threads): real values into a writable buffer. */
static PyObject *tensor_dequantize(PyObject *op, PyObject *args) {
  TensorObject *self = (TensorObject *)op;
  PyObject *target;
  const char *dtype_name;
  unsigned int threads = 1;
  if (!PyArg_ParseTuple(args, "OsO&:_dequantize", &target, &dtype_name, hy_conv_threads,
                        &threads)) {
    return NULL;
  }
  if (tensor_ready(self) < 0) return NULL;
  HurrayDType out_dtype = hurray_dtype_from_name(dtype_name);
  Py_buffer out;
  if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
  static const HurrayOutputLimits unlimited = HURRAY_OUTPUT_UNLIMITED; /* checked before */
  s = hurray_dequantize_with(self->descriptor, self->buffers, out_dtype, out.buf,
                             (uint64_t)out.len, threads, &unlimited, &e);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&out);
  if (s != HURRAY_OK) return raise_status(state_of_type(Py_TYPE(op)), s, &e);
  Py_RETURN_NONE;
}

/* _check_output_size(nbytes[, limit]): raises LimitError when an output of
 * nbytes for this tensor is beyond the limit: without `limit` the library
 * default (max(64 MiB, 64 x stored bytes)), None for no limit, an int for
 * an absolute limit in bytes. nbytes beyond 64 bits counts as UINT64_MAX. */
static PyObject *tensor_check_output_size(PyObject *op, PyObject *args) {
  TensorObject *self = (TensorObject *)op;
  PyObject *nbytes_obj, *limit_obj = NULL;
  if (!PyArg_ParseTuple(args, "O!|O:_check_output_size", &PyLong_Type, &nbytes_obj, &limit_obj)) {
    return NULL;
  }
  if (tensor_ready(self) < 0) return NULL;
  if (PyObject_RichCompareBool(nbytes_obj, Py_False, Py_LT) == 1) {
    PyErr_SetString(PyExc_ValueError, "nbytes must not be negative");
    return NULL;
  }
  unsigned long long nbytes = PyLong_AsUnsignedLongLong(nbytes_obj);
  if (nbytes == (unsigned long long)-1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return NULL;
    PyErr_Clear();
    nbytes = UINT64_MAX;
  }
  HurrayOutputLimits limits = HURRAY_OUTPUT_LIMITS_INIT;
  if (limit_obj == Py_None) {
    HurrayOutputLimits none = HURRAY_OUTPUT_UNLIMITED;
    limits = none;
  } else if (limit_obj != NULL) {
    if (!PyLong_Check(limit_obj) || PyBool_Check(limit_obj)) {
      PyErr_SetString(PyExc_TypeError, "max_output_bytes must be an int or None");
      return NULL;
    }
    unsigned long long limit = PyLong_AsUnsignedLongLong(limit_obj);
    if (limit == (unsigned long long)-1 && PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_OverflowError) ||
          PyObject_RichCompareBool(limit_obj, Py_False, Py_LT) == 1) {
        PyErr_Clear();
        PyErr_SetString(PyExc_ValueError, "max_output_bytes must be >= 0 or None");
        return NULL;
      }
      PyErr_Clear();
      limit = UINT64_MAX; /* beyond 64 bits: no output reaches it */
    }
    limits.max_expansion = 0;
    limits.max_output_bytes = limit;
  }
  HurrayError e = {0};
  HurrayStatus s = hurray_check_output_size(self->descriptor, nbytes, &limits, &e);
  if (s != HURRAY_OK) return raise_status(state_of_type(Py_TYPE(op)), s, &e);
  Py_RETURN_NONE;
}

/* _statistics(): the encoded descriptor with freshly computed statistics. */
static PyObject *tensor_statistics(PyObject *op, PyObject *unused) {
  (void)unused;
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  ModuleState *st = state_of_type(Py_TYPE(op));
  HurrayError e = {0};
  HurrayDescriptor *copy = NULL;
  HurrayStatus s = hurray_descriptor_clone(self->descriptor, &copy, &e);
  if (s == HURRAY_OK) {
    Py_BEGIN_ALLOW_THREADS
    s = hurray_compute_statistics(copy, self->buffers, &e);
    Py_END_ALLOW_THREADS
  }
  PyObject *out = s == HURRAY_OK ? encode_descriptor(st, copy) : raise_status(st, s, &e);
  hurray_descriptor_destroy(copy);
  return out;
}

/* ------------------------------------------------------ capsule protocol */

static void capsule_destructor(PyObject *capsule) {
  /* May run while an exception propagates: keep it intact. */
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  /* Only a capsule nobody consumed still owns its list. */
  CapsuleContext *ctx = PyCapsule_GetContext(capsule);
  if (PyCapsule_IsValid(capsule, CAPSULE_NAME)) {
    hurray_buffer_list_destroy(PyCapsule_GetPointer(capsule, CAPSULE_NAME));
  }
  PyErr_Clear();
  PyMem_RawFree(ctx);
  PyErr_Restore(type, value, traceback);
}

/* __hurray__(stream=None): a capsule whose list holds a fresh handle per
 * buffer, each keeping this tensor alive until the consumer releases it. */
static PyObject *tensor_dunder_hurray(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"stream", NULL};
  PyObject *stream = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:__hurray__", kwlist, &stream)) return NULL;
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  if (stream != Py_None) {
    PyErr_SetString(PyExc_ValueError,
                    "stream must be None for CPU tensors (buffers are READY)");
    return NULL;
  }
  ModuleState *st = state_of_type(Py_TYPE(op));
  HurrayError e = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  HurrayStatus s = hurray_descriptor_encode(self->descriptor, &bytes, &len, &e);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  CapsuleContext *ctx = PyMem_RawMalloc(sizeof *ctx + len);
  if (ctx == NULL) {
    hurray_free(bytes);
    return PyErr_NoMemory();
  }
  ctx->abi_version = HURRAY_C_ABI_VERSION;
  ctx->reserved = 0;
  ctx->descriptor_len = len;
  memcpy(ctx->descriptor, bytes, len);
  hurray_free(bytes);

  HurrayBufferList *list = NULL;
  s = hurray_buffer_list_create(&list, &e);
  for (size_t i = 0; s == HURRAY_OK && i < hurray_buffer_list_len(self->buffers); i++) {
    const HurrayBuffer *src = hurray_buffer_list_get(self->buffers, i);
    HurrayBuffer *b = NULL;
    s = hurray_buffer_create(hurray_buffer_data(src), hurray_buffer_size(src), release_pyobject,
                             Py_NewRef(op), &b, &e);
    /* The export carries each buffer's properties, not just its bytes. */
    if (s == HURRAY_OK) s = hurray_buffer_set_alignment(b, hurray_buffer_alignment(src), &e);
    if (s == HURRAY_OK) {
      s = hurray_buffer_set_sync(b, hurray_buffer_sync_mode(src), hurray_buffer_sync_handle(src),
                                 &e);
    }
    if (s == HURRAY_OK) {
      s = hurray_buffer_set_device(b, hurray_buffer_device_type(src), hurray_buffer_device_id(src),
                                   hurray_buffer_memory_class(src), &e);
    }
    if (s == HURRAY_OK) s = hurray_buffer_list_push(list, b, &e);
    else hurray_buffer_destroy(b);
  }
  if (s != HURRAY_OK) {
    hurray_buffer_list_destroy(list);
    PyMem_RawFree(ctx);
    return raise_status(st, s, &e);
  }
  PyObject *capsule = PyCapsule_New(list, CAPSULE_NAME, capsule_destructor);
  if (capsule == NULL) {
    hurray_buffer_list_destroy(list);
    PyMem_RawFree(ctx);
    return NULL;
  }
  if (PyCapsule_SetContext(capsule, ctx) < 0) {
    Py_DECREF(capsule); /* destroys the list; ctx not yet attached */
    PyMem_RawFree(ctx);
    return NULL;
  }
  return capsule;
}

/* Consumes a capsule: name, then version (before the pointer is touched),
 * then descriptor, list length and placement; only then renames it, after
 * which nothing may hand the list back. */
static PyObject *consume_capsule(ModuleState *st, PyTypeObject *type, PyObject *capsule) {
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_SetString(PyExc_TypeError, "__hurray__() must return a PyCapsule");
    return NULL;
  }
  const char *name = PyCapsule_GetName(capsule);
  if (name != NULL && strcmp(name, USED_CAPSULE_NAME) == 0) {
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message, "this capsule was already consumed");
    return raise_status(st, HURRAY_ERR_STATE, &e);
  }
  if (name == NULL || strcmp(name, CAPSULE_NAME) != 0) {
    PyErr_Format(PyExc_TypeError, "expected a capsule named \"%s\", got \"%s\"", CAPSULE_NAME,
                 name != NULL ? name : "(null)");
    return NULL;
  }
  const CapsuleContext *ctx = PyCapsule_GetContext(capsule);
  if (ctx == NULL) {
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message, "capsule has no context (no ABI version, no descriptor)");
    PyErr_Clear();
    return raise_status(st, HURRAY_ERR_MALFORMED, &e);
  }
  if (ctx->abi_version != HURRAY_C_ABI_VERSION) {
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message,
             "capsule from a producer with C ABI %u; this consumer speaks %u", ctx->abi_version,
             HURRAY_C_ABI_VERSION);
    return raise_status(st, HURRAY_ERR_ABI_VERSION, &e);
  }
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_descriptor_decode(ctx->descriptor, (size_t)ctx->descriptor_len, &d, &e);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  HurrayBufferList *list = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
  if (list == NULL) {
    hurray_descriptor_destroy(d);
    return NULL;
  }
  s = hurray_validate_buffer_placement(d, list, &e); /* list length first, then indices */
  if (s != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return raise_status(st, s, &e);
  }
  /* Marked used before anything that can run Python code (the allocation
   * below may run the garbage collector, its callbacks and finalizers),
   * so no such code can consume this capsule a second time. */
  if (PyCapsule_SetName(capsule, USED_CAPSULE_NAME) < 0) {
    hurray_descriptor_destroy(d);
    return NULL;
  }
  TensorObject *self = tensor_alloc(st, type);
  if (self == NULL) {
    /* Nobody else can have taken the list: hand it back to the capsule. */
    PyObject *type_, *value, *traceback;
    PyErr_Fetch(&type_, &value, &traceback);
    if (PyCapsule_SetName(capsule, CAPSULE_NAME) < 0) {
      PyErr_Clear();
      hurray_buffer_list_destroy(list);
    }
    PyErr_Restore(type_, value, traceback);
    hurray_descriptor_destroy(d);
    return NULL;
  }
  /* The list is ours now; tensor_adopt destroys it on failure. */
  if (tensor_adopt(self, d, list, false) < 0) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject *)self;
}

static PyObject *tensor_from_capsule(PyObject *cls, PyObject *capsule) {
  ModuleState *st = state_of_type((PyTypeObject *)cls);
  if (st == NULL) return NULL;
  return consume_capsule(st, (PyTypeObject *)cls, capsule);
}

/* DLPack (_dlpack.c): the data buffer's memory, flagged read-only unless
 * this tensor may write it. */
static PyObject *tensor_dlpack(PyObject *op, PyObject *args, PyObject *kwargs) {
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  size_t data = hurray_descriptor_data_buffer(self->descriptor);
  bool writable = data < hurray_buffer_list_len(self->buffers) && self->writable[data];
  return hurray_py_dlpack(op, self->descriptor, self->buffers, writable, args, kwargs);
}

static PyObject *tensor_dlpack_device(PyObject *op, PyObject *unused) {
  (void)unused;
  TensorObject *self = (TensorObject *)op;
  if (tensor_ready(self) < 0) return NULL;
  return hurray_py_dlpack_device(self->descriptor);
}

/* -------------------------------------------------------------------- File */

typedef struct FileObject {
  PyObject_HEAD
  HurrayReader *reader;
  PyThread_type_lock lock; /* serialises use of the reader against close */
  PyObject *path;
  bool pread;
  bool readonly; /* buffers handed out are flagged read-only */
} FileObject;

static int file_init(PyObject *op, PyObject *args, PyObject *kwargs) {
  FileObject *self = (FileObject *)op;
  static char *kwlist[] = {"path", "mmap", "verify", "readonly", "source", NULL};
  PyObject *path, *source = Py_None; /* source: _source.h; path then only names it */
  int use_mmap = 1, verify = 0, readonly = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|pppO:File", kwlist, PyUnicode_FSConverter,
                                   &path, &use_mmap, &verify, &readonly, &source)) {
    return -1;
  }
  ModuleState *st = state_of_type(Py_TYPE(op));
  /* Re-initialising would close the reader under a thread using it. */
  if (self->lock != NULL) {
    Py_DECREF(path);
    PyErr_SetString(PyExc_RuntimeError, "_File is already initialised");
    return -1;
  }
  self->lock = PyThread_allocate_lock();
  if (self->lock == NULL) {
    Py_DECREF(path);
    PyErr_NoMemory();
    return -1;
  }
  HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
  /* Writable by default: a private (copy-on-write) mapping, so that a write
   * into a loaded tensor copies a page instead of killing the process. */
  options.mode = !use_mmap ? HURRAY_READ_PREAD
                 : readonly ? HURRAY_READ_MMAP : HURRAY_READ_MMAP_PRIVATE;
  options.verify_on_open = verify != 0;
  HurrayError e = {0};
  HurrayReader *reader = NULL;
  HurrayStatus s;
  if (source != Py_None) {
    use_mmap = readonly = 0; /* a source reader copies */
    s = hy_open_source_reader(source, verify != 0, &reader, &e);
  } else {
    Py_BEGIN_ALLOW_THREADS
    s = hurray_reader_open(PyBytes_AS_STRING(path), &options, &reader, &e);
    Py_END_ALLOW_THREADS
  }
  if (s != HURRAY_OK) {
    PyObject *name = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path));
    Py_DECREF(path);
    raise_status_file(st, s, &e, name);
    Py_XDECREF(name);
    return -1;
  }
  self->reader = reader;
  self->pread = !use_mmap;
  self->readonly = readonly != 0;
  Py_XSETREF(self->path, path);
  return 0;
}

static void file_dealloc(PyObject *op) {
  FileObject *self = (FileObject *)op;
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  hurray_reader_close(self->reader);
  if (self->lock != NULL) PyThread_free_lock(self->lock);
  Py_XDECREF(self->path);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static int file_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  return 0;
}

/* Takes the lock with the GIL released; fails if the file is closed. */
static int file_acquire(FileObject *self) {
  if (self->lock == NULL) {
    PyErr_SetString(PyExc_ValueError, "File is not open");
    return -1;
  }
  if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(self->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
  }
  if (self->reader == NULL) {
    PyThread_release_lock(self->lock);
    PyErr_SetString(PyExc_ValueError, "I/O operation on a closed hurray file");
    return -1;
  }
  return 0;
}

static PyObject *file_close(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (self->lock == NULL) Py_RETURN_NONE;
  Py_BEGIN_ALLOW_THREADS
  PyThread_acquire_lock(self->lock, WAIT_LOCK);
  Py_END_ALLOW_THREADS
  hurray_reader_close(self->reader); /* tensors already taken stay valid */
  self->reader = NULL;
  PyThread_release_lock(self->lock);
  Py_RETURN_NONE;
}

static PyObject *file_closed(PyObject *op, void *closure) {
  (void)closure;
  return PyBool_FromLong(((FileObject *)op)->reader == NULL);
}

static PyObject *file_keys(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (file_acquire(self) < 0) return NULL;
  size_t n = hurray_reader_tensor_count(self->reader);
  PyObject *out = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; out != NULL && i < n; i++) {
    PyObject *name = PyUnicode_FromString(hurray_reader_tensor_name(self->reader, i));
    if (name == NULL) Py_CLEAR(out);
    else PyList_SET_ITEM(out, (Py_ssize_t)i, name);
  }
  PyThread_release_lock(self->lock);
  return out;
}

static PyObject *file_metadata(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  if (file_acquire(self) < 0) return NULL;
  HurrayReader *r = self->reader;
  PyObject *out = PyDict_New();
  for (size_t i = 0; out != NULL && i < hurray_reader_metadata_count(r); i++) {
    const char *key = hurray_reader_metadata_key(r, i);
    PyObject *value = NULL;
    const char *s;
    int64_t iv;
    double fv;
    bool bv;
    const uint8_t *bytes;
    size_t len;
    switch (hurray_reader_metadata_type(r, i)) {
      case HURRAY_METADATA_STRING:
        hurray_reader_metadata_string(r, key, &s, NULL);
        value = PyUnicode_FromString(s);
        break;
      case HURRAY_METADATA_INT:
        hurray_reader_metadata_int(r, key, &iv, NULL);
        value = PyLong_FromLongLong(iv);
        break;
      case HURRAY_METADATA_FLOAT:
        hurray_reader_metadata_float(r, key, &fv, NULL);
        value = PyFloat_FromDouble(fv);
        break;
      case HURRAY_METADATA_BOOL:
        hurray_reader_metadata_bool(r, key, &bv, NULL);
        value = PyBool_FromLong(bv);
        break;
      default: /* bytes, and types of newer minor versions */
        hurray_reader_metadata_bytes(r, key, &bytes, &len, NULL);
        value = PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)len);
        break;
    }
    if (value == NULL || PyDict_SetItemString(out, key, value) < 0) Py_CLEAR(out);
    Py_XDECREF(value);
  }
  PyThread_release_lock(self->lock);
  return out;
}

/* get(name) / get_rows(name, start, count): tensors that outlive the file. */
static PyObject *file_read(PyObject *op, PyObject *args, bool rows) {
  FileObject *self = (FileObject *)op;
  const char *name;
  uint64_t start = 0, count = 0;
  if (rows ? !PyArg_ParseTuple(args, "sO&O&:get_rows", &name, hy_conv_u64, &start, hy_conv_u64,
                               &count)
           : !PyArg_ParseTuple(args, "s:get", &name)) {
    return NULL;
  }
  ModuleState *st = state_of_type(Py_TYPE(op));
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
  s = rows ? hurray_reader_get_rows(self->reader, name, start, count, &d, &list, &e)
           : hurray_reader_get_tensor(self->reader, name, &d, &list, &e);
  Py_END_ALLOW_THREADS
  PyThread_release_lock(self->lock);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  TensorObject *t = tensor_alloc(st, NULL);
  if (t == NULL) {
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    return NULL;
  }
  /* pread copies and private mappings are writable; shared mappings not. */
  if (tensor_adopt(t, d, list, !self->readonly) < 0) {
    Py_DECREF(t);
    return NULL;
  }
  t->protected_memory = self->readonly && !self->pread;
  return (PyObject *)t;
}

static PyObject *file_get(PyObject *op, PyObject *args) { return file_read(op, args, false); }
static PyObject *file_get_rows(PyObject *op, PyObject *args) { return file_read(op, args, true); }

/* The validated descriptor of tensor `name` (caller-owned), or NULL with an
 * exception. `format` is the PyArg format naming the calling method. */
static HurrayDescriptor *file_lookup(PyObject *op, PyObject *args, const char *format) {
  FileObject *self = (FileObject *)op;
  const char *name;
  if (!PyArg_ParseTuple(args, format, &name)) return NULL;
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_reader_get_descriptor(self->reader, name, &d, &e);
  PyThread_release_lock(self->lock);
  if (s != HURRAY_OK) {
    raise_status(state_of_type(Py_TYPE(op)), s, &e);
    return NULL;
  }
  return d;
}

static PyObject *file_descriptor(PyObject *op, PyObject *args) {
  HurrayDescriptor *d = file_lookup(op, args, "s:descriptor");
  if (d == NULL) return NULL;
  PyObject *out = encode_descriptor(state_of_type(Py_TYPE(op)), d);
  hurray_descriptor_destroy(d);
  return out;
}

/* _shape(name) -> (dtype name, shape tuple): what listing a file needs,
 * without building a Python Descriptor. */
static PyObject *file_shape(PyObject *op, PyObject *args) {
  HurrayDescriptor *d = file_lookup(op, args, "s:shape");
  if (d == NULL) return NULL;
  uint32_t rank = hurray_descriptor_rank(d);
  const uint64_t *shape = hurray_descriptor_shape(d);
  PyObject *dims = PyTuple_New(rank);
  for (uint32_t i = 0; dims != NULL && i < rank; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(shape[i]);
    if (v == NULL) {
      Py_CLEAR(dims);
      break;
    }
    PyTuple_SET_ITEM(dims, i, v);
  }
  PyObject *out = dims ? Py_BuildValue("(sN)", hurray_dtype_name(hurray_descriptor_dtype(d)), dims)
                       : NULL;
  hurray_descriptor_destroy(d);
  return out;
}

/* read_buffer(name, index, out): pread into a caller's writable buffer. */
static PyObject *file_read_buffer(PyObject *op, PyObject *args) {
  FileObject *self = (FileObject *)op;
  const char *name;
  uint32_t index;
  Py_buffer out;
  if (!PyArg_ParseTuple(args, "sO&w*:read_buffer", &name, hy_conv_u32, &index, &out)) return NULL;
  ModuleState *st = state_of_type(Py_TYPE(op));
  if (file_acquire(self) < 0) {
    PyBuffer_Release(&out);
    return NULL;
  }
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
  s = hurray_reader_read_buffer(self->reader, name, index, out.buf, (uint64_t)out.len, &e);
  Py_END_ALLOW_THREADS
  PyThread_release_lock(self->lock);
  PyBuffer_Release(&out);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  Py_RETURN_NONE;
}

static PyObject *file_verify(PyObject *op, PyObject *args) {
  FileObject *self = (FileObject *)op;
  const char *name = NULL;
  if (!PyArg_ParseTuple(args, "|z:verify", &name)) return NULL;
  ModuleState *st = state_of_type(Py_TYPE(op));
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
  s = hurray_reader_verify(self->reader, name, &e);
  Py_END_ALLOW_THREADS
  PyThread_release_lock(self->lock);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  Py_RETURN_NONE;
}

/* _populate(threads): pre-fault the whole mapping (hurray_reader_populate). */
static PyObject *file_populate(PyObject *op, PyObject *arg) {
  FileObject *self = (FileObject *)op;
  unsigned long threads = PyLong_AsUnsignedLong(arg);
  if (threads == (unsigned long)-1 && PyErr_Occurred()) return NULL;
  ModuleState *st = state_of_type(Py_TYPE(op));
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
  s = hurray_reader_populate(self->reader, threads > 64 ? 65u : (unsigned)threads, &e);
  Py_END_ALLOW_THREADS
  PyThread_release_lock(self->lock);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  Py_RETURN_NONE;
}

/* _cached_fraction(): share of the tensor data in the page cache. */
static PyObject *file_cached_fraction(PyObject *op, PyObject *unused) {
  (void)unused;
  FileObject *self = (FileObject *)op;
  ModuleState *st = state_of_type(Py_TYPE(op));
  if (file_acquire(self) < 0) return NULL;
  HurrayError e = {0};
  double fraction = 0;
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
  s = hurray_reader_cached_fraction(self->reader, &fraction, &e);
  Py_END_ALLOW_THREADS
  PyThread_release_lock(self->lock);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  return PyFloat_FromDouble(fraction);
}

/* -------------------------------------------------------------------- save */

static HurrayStatus set_metadata_value(HurrayWriter *w, const char *key, PyObject *value,
                                       HurrayError *e) {
  if (PyBool_Check(value)) {
    return hurray_writer_set_metadata_bool(w, key, value == Py_True, e);
  }
  if (PyLong_Check(value)) {
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return HURRAY_ERR_INVALID_ARGUMENT;
    return hurray_writer_set_metadata_int(w, key, v, e);
  }
  if (PyFloat_Check(value)) return hurray_writer_set_metadata_float(w, key, PyFloat_AsDouble(value), e);
  if (PyUnicode_Check(value)) {
    const char *s = hy_utf8(value, "metadata value");
    if (s == NULL) return HURRAY_ERR_INVALID_ARGUMENT;
    return hurray_writer_set_metadata_string(w, key, s, e);
  }
  Py_buffer view;
  if (PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) == 0) {
    HurrayStatus s = hurray_writer_set_metadata_bytes(w, key, view.buf, (size_t)view.len, e);
    PyBuffer_Release(&view);
    return s;
  }
  PyErr_Clear();
  PyErr_Format(PyExc_TypeError,
               "metadata %R: values are str, int, float, bool or bytes, not %.100s", value,
               Py_TYPE(value)->tp_name);
  return HURRAY_ERR_INVALID_ARGUMENT;
}

/* Writes a plain dense array given as (dtype name, shape, buffer) without a
 * Tensor object: the per-tensor cost that dominates files of many small
 * tensors. Returns -1 with a Python exception, else the writer's status. */
static int write_plain(HurrayWriter *w, const char *name, PyObject *spec, bool release_gil,
                       HurrayStatus *status, HurrayError *e) {
  const char *dtype_name;
  PyObject *shape_obj, *data;
  if (!PyArg_ParseTuple(spec, "sOO", &dtype_name, &shape_obj, &data)) return -1;
  HurrayDType dtype = hurray_dtype_from_name(dtype_name);
  PyObject *dims = PySequence_Fast(shape_obj, "shape must be a sequence");
  if (dims == NULL) return -1;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(dims);
  uint64_t shape[HURRAY_MAX_RANK];
  if (rank > (Py_ssize_t)HURRAY_MAX_RANK) {
    Py_DECREF(dims);
    PyErr_Format(PyExc_ValueError, "rank %zd exceeds the limit of %u", rank,
                 (unsigned)HURRAY_MAX_RANK);
    return -1;
  }
  for (Py_ssize_t i = 0; i < rank; i++) {
    shape[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(dims, i));
    if (shape[i] == (uint64_t)-1 && PyErr_Occurred()) {
      Py_DECREF(dims);
      return -1;
    }
  }
  Py_DECREF(dims);
  Py_buffer view;
  if (PyObject_GetBuffer(data, &view, PyBUF_C_CONTIGUOUS) < 0) return -1;
  /* The element's natural alignment, never the address's: files must not
   * depend on where the data sat (the Python layer copies misaligned data). */
  uint32_t bits = hurray_dtype_bits(dtype);
  uint32_t alignment = bits >= 8 ? (bits / 8) & -(bits / 8) : 1;
  if (alignment > 64) alignment = 64;
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  HurrayStatus s = hurray_descriptor_create(dtype, (uint32_t)rank, shape, &d, e);
  if (s == HURRAY_OK) {
    s = hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, (uint64_t)view.len, alignment,
                                     HURRAY_SYNC_READY, NULL, e);
  }
  if (s == HURRAY_OK) s = hurray_buffer_list_create(&list, e);
  if (s == HURRAY_OK) s = hurray_buffer_create(view.buf, (uint64_t)view.len, NULL, NULL, &b, e);
  if (s == HURRAY_OK) s = hurray_buffer_set_alignment(b, alignment, e);
  if (s == HURRAY_OK) {
    s = hurray_buffer_list_push(list, b, e);
    b = NULL;
  }
  if (s == HURRAY_OK) {
    if (release_gil) {
      Py_BEGIN_ALLOW_THREADS
      s = hurray_writer_write_tensor(w, name, d, list, e);
      Py_END_ALLOW_THREADS
    } else {
      s = hurray_writer_write_tensor(w, name, d, list, e);
    }
  }
  hurray_buffer_destroy(b);
  hurray_buffer_list_destroy(list); /* borrowed memory: no release callback */
  hurray_descriptor_destroy(d);
  PyBuffer_Release(&view);
  *status = s;
  return 0;
}

/* save(target, [(name, tensor), ...], metadata_dict_or_None): target is a
 * path (atomic), an int file descriptor, or an object with write(). */
static PyObject *mod_save(PyObject *module, PyObject *args) {
  ModuleState *st = PyModule_GetState(module);
  PyObject *target, *items, *metadata, *path = NULL;
  int statistics = 0;
  if (!PyArg_ParseTuple(args, "OOO|p:save", &target, &items, &metadata, &statistics)) return NULL;
  bool to_path = PyUnicode_Check(target) || PyBytes_Check(target);
  bool to_fd = !to_path && PyLong_Check(target);
  if (to_path && !PyUnicode_FSConverter(target, &path)) return NULL;
  if (!to_path && !to_fd && !PyObject_HasAttrString(target, "write")) {
    PyErr_SetString(PyExc_TypeError, "save() needs a path, a file descriptor or a writable stream");
    return NULL;
  }
  PyObject *seq = PySequence_Fast(items, "tensors must be a sequence of (name, Tensor)");
  if (seq == NULL) {
    Py_XDECREF(path);
    return NULL;
  }
  HurrayError e = {0};
  HurrayWriter *w = NULL;
  HurrayStatus s;
  /* A Python stream's write() needs the GIL, so only the other sinks drop it. */
  bool release_gil = to_path || to_fd;
  if (to_path) {
    Py_BEGIN_ALLOW_THREADS
    s = hurray_writer_open(PyBytes_AS_STRING(path), &w, &e);
    Py_END_ALLOW_THREADS
  } else if (to_fd) {
    long fd = PyLong_AsLong(target);
    s = (fd == -1 && PyErr_Occurred()) || fd < 0 || fd > INT_MAX
            ? HURRAY_ERR_INVALID_ARGUMENT
            : hurray_writer_open_fd((int)fd, &w, &e);
    if (s != HURRAY_OK && !PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "not a valid file descriptor");
    }
  } else {
    s = hurray_writer_open_callback(hy_stream_write, target, &w, &e);
  }
  HyCancel cancel; /* Ctrl-C while the GIL is released (a stream checks itself) */
  if (s == HURRAY_OK && release_gil) {
    hy_cancel_init(&cancel); /* may leave a KeyboardInterrupt set: the loop below stops */
    if (!PyErr_Occurred()) s = hurray_writer_set_cancel(w, hy_cancel_requested, &cancel, &e);
  }
  if (s == HURRAY_OK) s = hurray_writer_set_statistics(w, statistics != 0, &e);
  for (Py_ssize_t i = 0; s == HURRAY_OK && !PyErr_Occurred() && i < PySequence_Fast_GET_SIZE(seq);
       i++) {
    PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *name_obj, *tensor;
    if (!PyTuple_Check(pair) || !PyArg_ParseTuple(pair, "UO", &name_obj, &tensor)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "expected (name, Tensor) pairs");
      break;
    }
    const char *name = hy_utf8(name_obj, "tensor name");
    if (name == NULL) break;
    if (PyTuple_Check(tensor)) { /* (dtype, shape, buffer): a plain dense array */
      if (write_plain(w, name, tensor, release_gil, &s, &e) < 0) break;
      continue;
    }
    if (!PyObject_TypeCheck(tensor, st->tensor_type)) {
      PyErr_Format(PyExc_TypeError, "%R is not a hurray Tensor", tensor);
      break;
    }
    TensorObject *t = (TensorObject *)tensor;
    if (tensor_ready(t) < 0) break;
    if (release_gil) {
      Py_BEGIN_ALLOW_THREADS /* `seq` holds the tensor, so its memory stays */
      s = hurray_writer_write_tensor(w, name, t->descriptor, t->buffers, &e);
      Py_END_ALLOW_THREADS
    } else {
      s = hurray_writer_write_tensor(w, name, t->descriptor, t->buffers, &e);
    }
  }
  if (s == HURRAY_OK && !PyErr_Occurred() && metadata != Py_None) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    if (!PyDict_Check(metadata)) {
      PyErr_SetString(PyExc_TypeError, "metadata must be a dict");
    }
    while (!PyErr_Occurred() && s == HURRAY_OK && PyDict_Check(metadata) &&
           PyDict_Next(metadata, &pos, &key, &value)) {
      const char *k = PyUnicode_Check(key) ? hy_utf8(key, "metadata key") : NULL;
      if (k == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "metadata keys must be str");
        break;
      }
      s = set_metadata_value(w, k, value, &e);
    }
  }
  Py_DECREF(seq);
  PyObject *filename = to_path ? PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path)) : NULL;
  Py_XDECREF(path);
  if (PyErr_Occurred() || s != HURRAY_OK) {
    hurray_writer_abort(w);
    if (!PyErr_Occurred()) raise_status_file(st, s, &e, filename);
    Py_XDECREF(filename);
    return NULL;
  }
  if (release_gil) {
    Py_BEGIN_ALLOW_THREADS
    s = hurray_writer_finish(w, &e);
    Py_END_ALLOW_THREADS
  } else {
    s = hurray_writer_finish(w, &e);
  }
  if (!PyErr_Occurred() && s != HURRAY_OK) raise_status_file(st, s, &e, filename);
  Py_XDECREF(filename);
  if (PyErr_Occurred()) return NULL; /* the stream's own exception, or the status */
  Py_RETURN_NONE;
}

/* _quantize(src, src_dtype, shape, scheme, axis, block_size, code_dtype,
 * scale_dtype, symmetric, threads) -> Tensor. None (or -1 for symmetric)
 * keeps the scheme's default. */
static PyObject *mod_quantize(PyObject *module, PyObject *args) {
  ModuleState *st = PyModule_GetState(module);
  PyObject *src, *shape_obj, *axis_obj, *block_obj;
  const char *src_dtype_name, *scheme_name, *code_name, *scale_name;
  int symmetric;
  unsigned int threads;
  if (!PyArg_ParseTuple(args, "OsOsOOzziO&:_quantize", &src, &src_dtype_name, &shape_obj,
                        &scheme_name, &axis_obj, &block_obj, &code_name, &scale_name,
                        &symmetric, hy_conv_threads, &threads)) {
    return NULL;
  }
  HurrayError e = {0};
  HurrayQuantScheme scheme;
  HurrayStatus s = hurray_quant_scheme_from_name(scheme_name, &scheme, &e);
  HurrayQuantizeOptions o;
  if (s == HURRAY_OK) s = hurray_quantize_options_init(&o, scheme, &e);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  if (axis_obj != Py_None) {
    long axis = PyLong_AsLong(axis_obj);
    if (axis == -1 && PyErr_Occurred()) return NULL;
    if (axis < INT32_MIN || axis > INT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "axis out of range");
      return NULL;
    }
    o.axis = (int32_t)axis;
  }
  if (block_obj != Py_None) {
    unsigned long long block = PyLong_AsUnsignedLongLong(block_obj);
    if (block == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    o.block_size = block;
  }
  if (code_name != NULL) {
    o.code_dtype = hurray_dtype_from_name(code_name);
    if (o.code_dtype == HURRAY_DTYPE_INVALID) {
      return PyErr_Format(PyExc_ValueError, "unknown dtype %R", PyTuple_GET_ITEM(args, 6));
    }
  }
  if (scale_name != NULL) {
    o.scale_dtype = hurray_dtype_from_name(scale_name);
    if (o.scale_dtype == HURRAY_DTYPE_INVALID) {
      return PyErr_Format(PyExc_ValueError, "unknown dtype %R", PyTuple_GET_ITEM(args, 7));
    }
  }
  o.symmetric = symmetric;
  o.threads = threads;
  HurrayDType src_dtype = hurray_dtype_from_name(src_dtype_name);
  PyObject *seq = PySequence_Fast(shape_obj, "shape must be a sequence");
  if (seq == NULL) return NULL;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq);
  if (rank > (Py_ssize_t)HURRAY_MAX_RANK) {
    Py_DECREF(seq);
    return PyErr_Format(PyExc_ValueError, "rank %zd exceeds the limit of %u", rank,
                        (unsigned)HURRAY_MAX_RANK);
  }
  uint64_t shape[HURRAY_MAX_RANK];
  for (Py_ssize_t i = 0; i < rank; i++) {
    shape[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (shape[i] == (uint64_t)-1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return NULL;
    }
  }
  Py_DECREF(seq);
  Py_buffer view;
  if (PyObject_GetBuffer(src, &view, PyBUF_C_CONTIGUOUS) < 0) return NULL;
  uint64_t numel = 1;
  for (Py_ssize_t i = 0; i < rank; i++) {
    if (__builtin_mul_overflow(numel, shape[i], &numel)) {
      PyBuffer_Release(&view);
      return PyErr_Format(PyExc_OverflowError, "the shape's element count exceeds 64 bits");
    }
  }
  uint64_t item = src_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
  if ((uint64_t)view.len / item < numel) {
    PyBuffer_Release(&view);
    return PyErr_Format(PyExc_ValueError, "the source holds %zd bytes, fewer than the shape needs",
                        view.len);
  }
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  Py_BEGIN_ALLOW_THREADS
  s = hurray_quantize(view.buf, src_dtype, (uint32_t)rank, shape, &o, &d, &list, &e);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&view);
  if (s != HURRAY_OK) return raise_status(st, s, &e);
  TensorObject *t = tensor_alloc(st, NULL);
  if (t == NULL) {
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    return NULL;
  }
  if (tensor_adopt(t, d, list, true) < 0) {
    Py_DECREF(t);
    return NULL;
  }
  return (PyObject *)t;
}

static PyObject *mod_set_tensor_class(PyObject *module, PyObject *cls) {
  ModuleState *st = PyModule_GetState(module);
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, st->tensor_type)) {
    PyErr_SetString(PyExc_TypeError, "expected a subclass of _Tensor");
    return NULL;
  }
  Py_XSETREF(st->tensor_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}

/* ------------------------------------------------------------- module def */

static PyGetSetDef tensor_getset[] = {
    {"_encoded", tensor_encoded, NULL, "the encoded descriptor", NULL},
    {"buffer_count", tensor_buffer_count, NULL, "number of buffers", NULL},
    {"_protected", tensor_protected, NULL, "memory is a read-only mapping", NULL},
    {"_descriptor_cache", tensor_cache_get, tensor_cache_set, "decoded descriptor, once", NULL},
    {NULL},
};

static PyMethodDef tensor_methods[] = {
    {"_buffer", tensor_buffer, METH_O, "zero-copy memoryview of buffer i"},
    {"_buffer_address", tensor_buffer_address, METH_O, "address of buffer i"},
    {"_to_dense", tensor_to_dense, METH_O, "materialise the logical tensor into out"},
    {"_view_info", tensor_view_info, METH_NOARGS, "dtype, shape, strides, offset, buffer, kinds"},
    {"_statistics", tensor_statistics, METH_NOARGS, "encoded descriptor with statistics"},
    {"_dequantize", tensor_dequantize, METH_VARARGS, "real values into out (C kernels)"},
    {"_check_output_size", tensor_check_output_size, METH_VARARGS,
     "raise LimitError if an output of nbytes is beyond the limit"},
    {"__hurray__", (PyCFunction)(void (*)(void))tensor_dunder_hurray,
     METH_VARARGS | METH_KEYWORDS, "export every buffer in one capsule"},
    {"_from_capsule", tensor_from_capsule, METH_O | METH_CLASS, "consume a hurray_buffer capsule"},
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None, max_version=None, dl_device=None, copy=None): a DLPack capsule"},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS, "(device type, device id)"},
    {NULL},
};

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(TensorObject, weakreflist), READONLY},
    {NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_init, tensor_init},
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_clear, tensor_clear},
    {Py_tp_getset, tensor_getset},
    {Py_tp_methods, tensor_methods},
    {Py_tp_members, tensor_members},
    {Py_tp_doc, "A descriptor plus N buffers, each with its own owner."},
    {0, NULL},
};

static PyType_Spec tensor_spec = {
    "hurray._hurray._Tensor", sizeof(TensorObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, tensor_slots};

static PyType_Slot view_slots[] = {
    {Py_bf_getbuffer, view_getbuffer},
    {Py_tp_dealloc, view_dealloc},
    {0, NULL},
};

static PyType_Spec view_spec = {"hurray._hurray._BufferView", sizeof(ViewObject), 0,
                                Py_TPFLAGS_DEFAULT, view_slots};

static PyGetSetDef file_getset[] = {
    {"closed", file_closed, NULL, "True once close() ran", NULL},
    {NULL},
};

static PyMethodDef file_methods[] = {
    {"keys", file_keys, METH_NOARGS, "tensor names, sorted"},
    {"_metadata", file_metadata, METH_NOARGS, "file metadata as a dict"},
    {"_get", file_get, METH_VARARGS, "read one tensor"},
    {"_get_rows", file_get_rows, METH_VARARGS, "read rows along dimension 0"},
    {"_descriptor", file_descriptor, METH_VARARGS, "encoded descriptor of one tensor"},
    {"_shape", file_shape, METH_VARARGS, "(dtype name, shape) of one tensor"},
    {"verify", file_verify, METH_VARARGS, "check checksums of one tensor or all"},
    {"_read_buffer", file_read_buffer, METH_VARARGS, "pread one buffer into caller memory"},
    {"_populate", file_populate, METH_O, "pre-fault the mapping with n threads"},
    {"_cached_fraction", file_cached_fraction, METH_NOARGS, "share of data in the page cache"},
    {"close", file_close, METH_NOARGS, "close; tensors already read stay valid"},
    {NULL},
};

static PyType_Slot file_slots[] = {
    {Py_tp_init, file_init},
    {Py_tp_dealloc, file_dealloc},
    {Py_tp_traverse, file_traverse},
    {Py_tp_getset, file_getset},
    {Py_tp_methods, file_methods},
    {0, NULL},
};

static PyType_Spec file_spec = {"hurray._hurray._File", sizeof(FileObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                                file_slots};

static PyMethodDef module_methods[] = {
    {"descriptor_build", mod_descriptor_build, METH_O, "encode a descriptor from its dict form"},
    {"descriptor_json", mod_descriptor_json, METH_O, "decode an encoding to its JSON form"},
    {"descriptor_validate", mod_descriptor_validate, METH_O, "validate an encoded descriptor"},
    {"descriptor_required_bytes", mod_descriptor_required_bytes, METH_O,
     "bytes each buffer must hold"},
    {"save", mod_save, METH_VARARGS, "save(path | fd | stream, [(name, Tensor)], metadata)"},
    {"_quantize", mod_quantize, METH_VARARGS, "quantize a float buffer (C kernels)"},
    {"_set_tensor_class", mod_set_tensor_class, METH_O, "class File and capsules produce"},
    {"_prefault", hurray_py_prefault, METH_VARARGS, "make a writable buffer's pages present"},
    {NULL},
};

/* Exception classes and the status codes each one covers. */
typedef struct ErrorClass {
  const char *name;
  const char *extra_base; /* a builtin exception also inherited, or NULL */
  const char *doc;
  HurrayStatus codes[40];
} ErrorClass;

static const ErrorClass error_classes[] = {
    {"InvalidArgumentError", "ValueError", "An argument or call the API does not accept.",
     {HURRAY_ERR_INVALID_ARGUMENT, HURRAY_ERR_STATE, HURRAY_ERR_NOT_FINITE}},
    {"HurrayMemoryError", "MemoryError", "libhurray ran out of memory.", {HURRAY_ERR_NO_MEMORY}},
    {"UnsupportedError", NULL,
     "Something from a newer version (encoding, field, ABI) or a combination not supported.",
     {HURRAY_ERR_UNSUPPORTED, HURRAY_ERR_ABI_VERSION}},
    {"FormatError", NULL, "Corrupt or invalid encoded bytes or file.",
     {HURRAY_ERR_TRUNCATED, HURRAY_ERR_MALFORMED, HURRAY_ERR_BAD_MAGIC, HURRAY_ERR_RANGE,
      HURRAY_ERR_OVERLAP}},
    {"ChecksumError", NULL, "Stored checksum differs from the bytes.", {HURRAY_ERR_CHECKSUM}},
    {"LimitError", NULL, "A hard limit or 64-bit size was exceeded.",
     {HURRAY_ERR_LIMIT, HURRAY_ERR_OVERFLOW}},
    {"ValidationError", NULL, "A descriptor is inconsistent.",
     {HURRAY_ERR_DTYPE, HURRAY_ERR_STRIDES, HURRAY_ERR_BUFFER_INDEX, HURRAY_ERR_BUFFER_ROLE,
      HURRAY_ERR_BUFFER_UNREFERENCED, HURRAY_ERR_BUFFER_TOO_SMALL, HURRAY_ERR_BUFFER_TABLE,
      HURRAY_ERR_DEVICE, HURRAY_ERR_QUANT_LAYOUT, HURRAY_ERR_QUANT_DTYPE, HURRAY_ERR_QUANT_AXIS,
      HURRAY_ERR_QUANT_BLOCK_SIZE, HURRAY_ERR_QUANT_SCALE, HURRAY_ERR_QUANT_SCALE_DTYPE,
      HURRAY_ERR_QUANT_SCALE_COUNT, HURRAY_ERR_QUANT_ZERO_POINT,
      HURRAY_ERR_QUANT_ZERO_POINT_DTYPE, HURRAY_ERR_QUANT_ZERO_POINT_COUNT,
      HURRAY_ERR_QUANT_MX_ELEMENT, HURRAY_ERR_SPARSE_INDEX_DTYPE, HURRAY_ERR_SPARSE_RANK,
      HURRAY_ERR_SPARSE_NNZ, HURRAY_ERR_SPARSE_BLOCK, HURRAY_ERR_PAGED_AXIS,
      HURRAY_ERR_PAGED_PAGE_SIZE, HURRAY_ERR_PAGED_TABLE_DTYPE, HURRAY_ERR_COMPOSITE_DEPTH,
      HURRAY_ERR_COMPOSITE_MEMBER, HURRAY_ERR_COMPOSITE_NAME, HURRAY_ERR_STATISTICS,
      HURRAY_ERR_SHARD_RANK, HURRAY_ERR_SHARD_BOUNDS, HURRAY_ERR_EXTENSION}},
    {"PlacementError", NULL, "Buffers do not fit the descriptor they travel with.",
     {HURRAY_ERR_BUFFER_COUNT, HURRAY_ERR_BUFFER_SIZE, HURRAY_ERR_BUFFER_ALIGNMENT,
      HURRAY_ERR_DEVICE_MISMATCH, HURRAY_ERR_SYNC_MODE_MISMATCH, HURRAY_ERR_PAGE_TABLE_ENTRY,
      HURRAY_ERR_SPARSE_INDEX_BOUNDS, HURRAY_ERR_SPARSE_INDPTR, HURRAY_ERR_SPARSE_ORDER}},
    {"NotFoundError", "KeyError", "No tensor, key or file of that name.", {HURRAY_ERR_NOT_FOUND}},
    {"DuplicateNameError", NULL, "A name used twice.", {HURRAY_ERR_DUPLICATE_NAME}},
    {"HurrayIOError", "OSError", "The operating system refused an operation.",
     {HURRAY_ERR_IO, HURRAY_ERR_CANCELLED}},
};

static int add_type(PyObject *module, PyType_Spec *spec, PyObject *base, PyTypeObject **out) {
  PyObject *type = PyType_FromModuleAndSpec(module, spec, base);
  if (type == NULL) return -1;
  *out = (PyTypeObject *)type;
  return PyModule_AddObjectRef(module, strrchr(spec->name, '.') + 1, type);
}

static int module_exec(PyObject *module) {
  ModuleState *st = PyModule_GetState(module);
  if (add_type(module, &tensor_spec, NULL, &st->tensor_type) < 0 ||
      add_type(module, &view_spec, NULL, &st->view_type) < 0 ||
      add_type(module, &file_spec, NULL, &st->file_type) < 0) {
    return -1;
  }
  st->error_base = PyErr_NewExceptionWithDoc(
      "hurray.HurrayError", "Base of every hurray error; `status` holds the C status code.",
      PyExc_Exception, NULL);
  if (st->error_base == NULL || PyModule_AddObjectRef(module, "HurrayError", st->error_base) < 0) {
    return -1;
  }
  for (size_t i = 0; i < sizeof error_classes / sizeof error_classes[0]; i++) {
    const ErrorClass *c = &error_classes[i];
    PyObject *extra = NULL;
    if (c->extra_base != NULL) {
      extra = PyDict_GetItemString(PyEval_GetBuiltins(), c->extra_base); /* borrowed */
      if (extra == NULL) {
        PyErr_Format(PyExc_SystemError, "no builtin %s", c->extra_base);
        return -1;
      }
      Py_INCREF(extra);
    }
    PyObject *bases = extra != NULL ? PyTuple_Pack(2, st->error_base, extra)
                                    : PyTuple_Pack(1, st->error_base);
    Py_XDECREF(extra);
    if (bases == NULL) return -1;
    char qualified[96];
    snprintf(qualified, sizeof qualified, "hurray.%s", c->name);
    PyObject *cls = PyErr_NewExceptionWithDoc(qualified, c->doc, bases, NULL);
    Py_DECREF(bases);
    if (cls == NULL || PyModule_AddObjectRef(module, c->name, cls) < 0) {
      Py_XDECREF(cls);
      return -1;
    }
    for (size_t k = 0; k < sizeof c->codes / sizeof c->codes[0] && c->codes[k] != HURRAY_OK;
         k++) {
      st->errors[c->codes[k]] = Py_NewRef(cls);
    }
    Py_DECREF(cls);
  }
  /* Every status maps to exactly one class. */
  for (int code = 1; code < STATUS_SLOTS; code++) {
    if (strcmp(hurray_status_name((HurrayStatus)code), "HURRAY_ERR_UNKNOWN") != 0 &&
        st->errors[code] == NULL) {
      PyErr_Format(PyExc_SystemError, "status %s has no exception class",
                   hurray_status_name((HurrayStatus)code));
      return -1;
    }
  }
  if (PyModule_AddIntConstant(module, "C_ABI_VERSION", HURRAY_C_ABI_VERSION) < 0 ||
      PyModule_AddStringConstant(module, "LIBRARY_VERSION", hurray_version_string()) < 0 ||
      PyModule_AddStringConstant(module, "CAPSULE_NAME", CAPSULE_NAME) < 0 ||
      PyModule_AddStringConstant(module, "USED_CAPSULE_NAME", USED_CAPSULE_NAME) < 0) {
    return -1;
  }
  /* The runtime library must be the one this module was built against. */
  if (hurray_abi_version() != HURRAY_C_ABI_VERSION) {
    PyErr_SetString(PyExc_ImportError, "libhurray ABI version mismatch");
    return -1;
  }
  return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
  ModuleState *st = PyModule_GetState(module);
  Py_VISIT(st->tensor_type);
  Py_VISIT(st->view_type);
  Py_VISIT(st->file_type);
  Py_VISIT(st->tensor_class);
  Py_VISIT(st->error_base);
  for (int i = 0; i < STATUS_SLOTS; i++) Py_VISIT(st->errors[i]);
  return 0;
}

static int module_clear(PyObject *module) {
  ModuleState *st = PyModule_GetState(module);
  Py_CLEAR(st->tensor_type);
  Py_CLEAR(st->view_type);
  Py_CLEAR(st->file_type);
  Py_CLEAR(st->tensor_class);
  Py_CLEAR(st->error_base);
  for (int i = 0; i < STATUS_SLOTS; i++) Py_CLEAR(st->errors[i]);
  return 0;
}

static void module_free(void *module) { module_clear((PyObject *)module); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef hurray_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "hurray._hurray",
    .m_doc = "C core of the hurray package.",
    .m_size = sizeof(ModuleState),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__hurray(void);

PyMODINIT_FUNC PyInit__hurray(void) { return PyModuleDef_Init(&hurray_module); }
