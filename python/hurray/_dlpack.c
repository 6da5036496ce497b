/*
 * DLPack export, native: the capsule points at the tensor's own buffer
 * (no numpy round trip), so every dtype DLPack 1.x names travels, bfloat16
 * and the float8 types included. See _dlpack.h for the contract and
 * docs/impl/python-bindings.md ("DLPack").
 */
#include "_dlpack.h"
#include "_hurray.h"

#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- DLPack 1.1 ABI, transcribed from the specification ---------------- */

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef struct {
  int32_t device_type; /* kDLCPU = 1, kDLCUDA = 2, ...: hurray uses the same codes */
  int32_t device_id;
} DLDevice;

enum {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
  kDLFloat8_e4m3fn = 10,
  kDLFloat8_e5m2 = 12,
  kDLFloat8_e8m0fnu = 14,
};

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define EXPORT_MAJOR 1
#define EXPORT_MINOR 1 /* the float8 codes are 1.1 */

/* ---- ownership ----------------------------------------------------------- */

/* One allocation per export: the managed tensor, what keeps the memory
 * alive (a reference to the owner, or a private copy), shape and strides. */
typedef struct Holder {
  union {
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned;
  } m;
  PyObject *owner; /* NULL for a copy */
  void *copy;
  int64_t dims[]; /* shape[ndim] then strides[ndim] */
} Holder;

static void holder_free(Holder *h) {
  if (h == NULL) return;
  /* Consumers may run the deleter on any thread, without the GIL, and
   * after the interpreter has ended (a C++ static destroyed at exit): the
   * owner is then left, as every release callback of the package leaves it. */
  if (h->owner != NULL) hy_release_pyobject(NULL, h->owner);
  free(h->copy);
  free(h);
}

static void delete_legacy(DLManagedTensor *self) { holder_free(self->manager_ctx); }

static void delete_versioned(DLManagedTensorVersioned *self) { holder_free(self->manager_ctx); }

/* A capsule nobody consumed still owns its tensor. */
static void capsule_destructor(PyObject *capsule) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (m != NULL && m->deleter != NULL) m->deleter(m);
  } else if (PyCapsule_IsValid(capsule, "dltensor")) {
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
    if (m != NULL && m->deleter != NULL) m->deleter(m);
  }
  PyErr_Restore(type, value, traceback);
}

/* ---- the export ---------------------------------------------------------- */

/* long: a table of cases, one hurray dtype to its DLPack (code, bits) each. */
static bool dl_dtype(HurrayDType dtype, DLDataType *out) {
  uint8_t code, bits;
  switch (dtype) {
    case HURRAY_DTYPE_BOOL:
      code = kDLBool;
      bits = 8;
      break;
    case HURRAY_DTYPE_INT8:
      code = kDLInt;
      bits = 8;
      break;
    case HURRAY_DTYPE_INT16:
      code = kDLInt;
      bits = 16;
      break;
    case HURRAY_DTYPE_INT32:
      code = kDLInt;
      bits = 32;
      break;
    case HURRAY_DTYPE_INT64:
      code = kDLInt;
      bits = 64;
      break;
    case HURRAY_DTYPE_UINT8:
      code = kDLUInt;
      bits = 8;
      break;
    case HURRAY_DTYPE_UINT16:
      code = kDLUInt;
      bits = 16;
      break;
    case HURRAY_DTYPE_UINT32:
      code = kDLUInt;
      bits = 32;
      break;
    case HURRAY_DTYPE_UINT64:
      code = kDLUInt;
      bits = 64;
      break;
    case HURRAY_DTYPE_FLOAT16:
      code = kDLFloat;
      bits = 16;
      break;
    case HURRAY_DTYPE_BFLOAT16:
      code = kDLBfloat;
      bits = 16;
      break;
    case HURRAY_DTYPE_FLOAT32:
      code = kDLFloat;
      bits = 32;
      break;
    case HURRAY_DTYPE_FLOAT64:
      code = kDLFloat;
      bits = 64;
      break;
    case HURRAY_DTYPE_COMPLEX64:
      code = kDLComplex;
      bits = 64;
      break;
    case HURRAY_DTYPE_COMPLEX128:
      code = kDLComplex;
      bits = 128;
      break;
    case HURRAY_DTYPE_FLOAT8_E4M3FN:
      code = kDLFloat8_e4m3fn;
      bits = 8;
      break;
    case HURRAY_DTYPE_FLOAT8_E5M2:
      code = kDLFloat8_e5m2;
      bits = 8;
      break;
    case HURRAY_DTYPE_FLOAT8_E8M0FNU:
      code = kDLFloat8_e8m0fnu;
      bits = 8;
      break;
    default:
      /* Sub-byte types: DLPack packs them in an order it does not pin down
       * for every consumer; refused rather than guessed. */
      return false;
  }
  out->code = code;
  out->bits = bits;
  out->lanes = 1;
  return true;
}

static PyObject *buffer_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *msg = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  if (msg != NULL) {
    PyErr_SetObject(PyExc_BufferError, msg);
    Py_DECREF(msg);
  }
  return NULL;
}

/* (major, minor) from a max_version argument; false with an exception. */
static bool parse_version(PyObject *obj, long *major) {
  *major = 0;
  if (obj == Py_None) return true;
  if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 2) {
    PyErr_SetString(PyExc_TypeError, "max_version must be None or a (major, minor) tuple");
    return false;
  }
  long part[2];
  for (int i = 0; i < 2; i++) {
    PyObject *index = PyNumber_Index(PyTuple_GET_ITEM(obj, i));
    if (index == NULL) return false;
    int overflow = 0;
    part[i] = PyLong_AsLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (part[i] == -1 && PyErr_Occurred()) return false;
    /* The newest version a consumer takes: any larger than a long is
     * as good as the largest. */
    if (overflow > 0) part[i] = LONG_MAX;
    if (overflow < 0 || part[i] < 0) {
      PyErr_Format(PyExc_ValueError, "max_version %R: versions are not negative", obj);
      return false;
    }
  }
  *major = part[0];
  return true;
}

PyObject *hurray_py_dlpack_device(const HurrayDescriptor *d) {
  return Py_BuildValue("(ii)", (int)hurray_descriptor_device_type(d),
                       (int)hurray_descriptor_device_id(d));
}

/* Whether `d` can leave through DLPack as asked (host memory, no stream,
 * the device it is on, dense, not quantized, a byte-sized dtype); its
 * DLPack dtype into *dl. False with BufferError or ValueError set
 * (buffer_error returns NULL, so `buffer_error(...) != NULL` is false). */
static bool exportable(const HurrayDescriptor *d, PyObject *stream, PyObject *dl_device,
                       DLDataType *dl) {
  HurrayMemoryClass memory = hurray_descriptor_memory_class(d);
  if (memory != HURRAY_MEMORY_HOST && memory != HURRAY_MEMORY_HOST_PINNED) {
    return buffer_error("DLPack export reads host memory; this tensor lives on device type %d",
                        (int)hurray_descriptor_device_type(d)) != NULL;
  }
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    if (hurray_descriptor_buffer_sync_mode(d, i) != HURRAY_SYNC_READY) {
      /* DLPack's consumer reads at once on the host: nobody would wait */
      return buffer_error(
                 "DLPack export reads READY buffers; buffers[%u] is not (synchronise "
                 "first)",
                 (unsigned)i) != NULL;
    }
  }
  if (stream != Py_None) {
    PyErr_SetString(PyExc_ValueError, "stream must be None for a CPU tensor");
    return false;
  }
  if (dl_device != Py_None) {
    int type = 0, id = 0;
    if (!PyTuple_Check(dl_device)) {
      PyErr_Format(PyExc_TypeError, "dl_device must be a (device_type, device_id) tuple, not %s",
                   Py_TYPE(dl_device)->tp_name);
      return false;
    }
    if (!PyArg_ParseTuple(dl_device, "ii:dl_device", &type, &id)) return false;
    if (type != hurray_descriptor_device_type(d) || id != hurray_descriptor_device_id(d)) {
      return buffer_error("cannot export to device (%d, %d): the tensor is on (%d, %d)", type, id,
                          (int)hurray_descriptor_device_type(d),
                          (int)hurray_descriptor_device_id(d)) != NULL;
    }
  }
  HurrayDType dtype = hurray_descriptor_dtype(d);
  const char *dtype_name = hurray_dtype_name(dtype);
  if (hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE) {
    return buffer_error(
               "this %s tensor is quantized: DLPack carries values, not codes; use "
               "t.dequantize(dtype) for the real values or t.codes() for the raw codes",
               dtype_name) != NULL;
  }
  if (hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_DENSE) {
    return buffer_error("DLPack carries dense tensors; this one is not (use t.to_dense())") !=
           NULL;
  }
  if (!dl_dtype(dtype, dl)) {
    return buffer_error(
               "%s is a packed sub-byte dtype, which hurray does not export through "
               "DLPack; use t.codes() (one element per byte) or t.dequantize()",
               dtype_name) != NULL;
  }
  return true;
}

/* The capsule holding `t`: a versioned one (with its read-only and copied
 * flags) when the consumer takes DLPack 1.x, else a legacy one, which cannot
 * say read-only and so is refused for read-only memory. Frees `h` on
 * failure. */
static PyObject *wrap(Holder *h, DLTensor t, long major, bool writable, bool copied) {
  PyObject *capsule;
  if (major >= 1) {
    h->m.versioned.version.major = EXPORT_MAJOR;
    h->m.versioned.version.minor = EXPORT_MINOR;
    h->m.versioned.manager_ctx = h;
    h->m.versioned.deleter = delete_versioned;
    h->m.versioned.flags = (writable ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY) |
                           (copied ? DLPACK_FLAG_BITMASK_IS_COPIED : 0);
    h->m.versioned.dl_tensor = t;
    capsule = PyCapsule_New(&h->m.versioned, "dltensor_versioned", capsule_destructor);
  } else {
    if (!writable) {
      holder_free(h);
      return buffer_error(
          "this tensor's memory is read-only, which a DLPack 0.x capsule "
          "cannot say; the consumer must ask for max_version >= (1, 0), or "
          "pass copy=True");
    }
    h->m.legacy.manager_ctx = h;
    h->m.legacy.deleter = delete_legacy;
    h->m.legacy.dl_tensor = t;
    capsule = PyCapsule_New(&h->m.legacy, "dltensor", capsule_destructor);
  }
  if (capsule == NULL) holder_free(h);
  return capsule;
}

/* __dlpack__'s copy argument: 1 for a copy, 0 for none or the producer's
 * choice (None), -1 with an exception. A string is refused, as numpy does:
 * "False" would be true. */
static int copy_wanted(PyObject *copy) {
  if (copy == Py_None) return 0;
  if (PyUnicode_Check(copy) || PyBytes_Check(copy)) {
    PyErr_SetString(PyExc_TypeError, "copy must be True, False or None, not a string");
    return -1;
  }
  return PyObject_IsTrue(copy);
}

/* The row-major copy an export hands out in place of a tensor it cannot
 * export as it is, or NULL with the exception set. Its size is checked
 * against hurray_tensor_to_dense's output limits before the allocation, so
 * that a few stored bytes describing terabytes (a broadcast, stride 0) are
 * a BufferError rather than a MemoryError, or a large allocation refused
 * only afterwards. */
static void *dense_copy(const HurrayDescriptor *d, const HurrayBufferList *buffers, uint64_t numel,
                        unsigned itemsize) {
  uint64_t bytes;
  if (__builtin_mul_overflow(numel, (uint64_t)itemsize, &bytes) || bytes > SIZE_MAX) {
    buffer_error("copy failed: the dense size overflows");
    return NULL;
  }
  HurrayError e = {0};
  if (hurray_check_output_size(d, bytes, NULL, &e) != HURRAY_OK) {
    buffer_error("copy failed: %s", e.message);
    return NULL;
  }
  void *copy = malloc(bytes ? (size_t)bytes : 1);
  if (copy == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray_tensor_to_dense(d, buffers, copy, bytes, &e);
  Py_END_ALLOW_THREADS if (s != HURRAY_OK) {
    free(copy);
    buffer_error("copy failed: %s", e.message);
    return NULL;
  }
  return copy;
}

/* steps[]: the strides, or the row-major ones of dims[]; false when the
 * product of the dimensions (0 counted as 1) does not fit int64. A 0
 * anywhere makes a valid shape empty, so (2^32, 2^32, 0) is valid, but
 * torch refuses it after calling the capsule's deleter, which the capsule
 * then calls again (a double free): such a shape never leaves. */
static bool fill_steps(const int64_t *dims, uint32_t rank, const int64_t *strides,
                       int64_t *steps) {
  int64_t step = 1;
  for (uint32_t i = rank; i-- > 0;) {
    steps[i] = strides != NULL ? strides[i] : step;
    if (__builtin_mul_overflow(step, dims[i] > 0 ? dims[i] : 1, &step)) return false;
  }
  return true;
}

static PyObject *dlpack_with(PyObject *owner, const HurrayDescriptor *d,
                             const HurrayBufferList *buffers, bool writable, PyObject *stream,
                             PyObject *max_version, PyObject *dl_device, PyObject *copy);

PyObject *hurray_py_dlpack(PyObject *owner, const HurrayDescriptor *d,
                           const HurrayBufferList *buffers, bool writable, PyObject *args,
                           PyObject *kwargs) {
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$OOO:__dlpack__", kwlist, &stream,
                                   &max_version, &dl_device, &copy)) {
    return NULL;
  }
  /* Strong references: parse_version runs __index__, which may empty the
   * keyword dict that lends the others (and the version tuple itself). */
  PyObject *held[] = {Py_NewRef(stream), Py_NewRef(max_version), Py_NewRef(dl_device),
                      Py_NewRef(copy)};
  PyObject *out = dlpack_with(owner, d, buffers, writable, stream, max_version, dl_device, copy);
  for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) Py_DECREF(held[i]);
  return out;
}

/* hurray_py_dlpack with its arguments parsed and held. */
static PyObject *dlpack_with(PyObject *owner, const HurrayDescriptor *d,
                             const HurrayBufferList *buffers, bool writable, PyObject *stream,
                             PyObject *max_version, PyObject *dl_device, PyObject *copy) {
  long major = 0;
  if (!parse_version(max_version, &major)) return NULL;
  int want_copy = copy_wanted(copy);
  if (want_copy < 0) return NULL;
  DLDataType dl = {0};
  if (!exportable(d, stream, dl_device, &dl)) return NULL;
  uint32_t rank = hurray_descriptor_rank(d);
  const uint64_t *shape = hurray_descriptor_shape(d);
  const int64_t *strides = hurray_descriptor_strides(d);
  /* DLPack allows negative strides, but torch.from_dlpack aborts the
   * process on them (a C++ exception it does not catch). Unless the caller
   * refused a copy (copy=False), such a tensor leaves as a row-major copy,
   * as the array API lets a producer do when copy is None. */
  for (uint32_t i = 0; copy == Py_None && strides != NULL && i < rank; i++) {
    if (strides[i] < 0) want_copy = 1;
  }
  const HurrayBuffer *b = hurray_buffer_list_get(buffers, hurray_descriptor_data_buffer(d));
  if (b == NULL) return buffer_error("the tensor has no data buffer");
  uint64_t numel = 1;
  bool numel_fits = true; /* a broadcast (stride 0) may describe more than 2^64 elements */
  bool has_zero = false;  /* then 0 elements, wherever the 0 is */
  for (uint32_t i = 0; i < rank; i++) {
    if (shape[i] > (uint64_t)INT64_MAX) return buffer_error("dimension too large for DLPack");
    if (__builtin_mul_overflow(numel, shape[i], &numel)) numel_fits = false;
    if (shape[i] == 0) has_zero = true;
  }
  if (has_zero) {
    numel = 0;
    numel_fits = true;
  }

  Holder *h = calloc(1, sizeof *h + 2 * (size_t)rank * sizeof(int64_t));
  if (h == NULL) return PyErr_NoMemory();
  int64_t *dims = h->dims, *steps = h->dims + rank;
  for (uint32_t i = 0; i < rank; i++) dims[i] = (int64_t)shape[i];
  static uint8_t empty[64];
  void *data;
  if (want_copy) {
    h->copy = dense_copy(d, buffers, numel_fits ? numel : UINT64_MAX, dl.bits / 8);
    if (h->copy == NULL) {
      free(h);
      return NULL;
    }
    data = h->copy;
    strides = NULL; /* the copy is row-major */
    writable = true;
  } else {
    data = hurray_buffer_data(b);
    data = data != NULL ? (uint8_t *)data + hurray_descriptor_byte_offset(d) : empty;
    h->owner = Py_NewRef(owner);
  }
  if (!fill_steps(dims, rank, strides, steps)) {
    holder_free(h);
    return buffer_error("the shape's strides are beyond DLPack's int64 sizes");
  }
  DLTensor t = {data,
                {hurray_descriptor_device_type(d), hurray_descriptor_device_id(d)},
                (int32_t)rank,
                dl,
                dims,
                steps,
                0};
  return wrap(h, t, major, writable, want_copy);
}
