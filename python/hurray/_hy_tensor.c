/*
 * _hy_tensor.c: the Tensor type (a descriptor plus N buffers, each with its own
 * owner), zero-copy buffer views, materialising, dequantize and quantize.
 */
#include "_hurray.h"

#include "../../src/buffer/output_limits.h"

/* A Tensor's only references the collector can see are its type and its
 * descriptor cache (its buffers' owners are held through C callbacks the
 * collector never visits). Without a cache, and of a type that adds no
 * storage (no __dict__, no slots), it cannot close a cycle, so it is left
 * untracked, as CPython leaves tuples and dicts of atoms: a million loaded
 * tensors are then not walked by every later collection (issue 19; a third
 * of the time spent touching them after a load). Setting the cache tracks
 * it again. Only the package's own classes qualify: an instance refers to
 * its class, and a class made at run time may hold the instance (a class
 * attribute), a cycle the collector must see. */
static bool package_type(ModuleState *st, PyTypeObject *type) {
  if (type == st->tensor_type || (PyObject *)type == st->tensor_class) return true;
  PyObject *module = PyDict_GetItemString(type->tp_dict, "__module__"); /* borrowed */
  const char *name = module != NULL && PyUnicode_Check(module) ? PyUnicode_AsUTF8(module) : NULL;
  if (name == NULL) {
    PyErr_Clear();
    return false;
  }
  return strcmp(name, "hurray") == 0 || strncmp(name, "hurray.", 7) == 0;
}

static void tensor_untrack_if_plain(ModuleState *st, TensorObject *self) {
  PyTypeObject *type = Py_TYPE(self);
  if (self->descriptor_cache == NULL && type->tp_dictoffset == 0 && type->tp_itemsize == 0 &&
      type->tp_basicsize == st->tensor_type->tp_basicsize && package_type(st, type) &&
      PyObject_GC_IsTracked((PyObject *)self)) {
    PyObject_GC_UnTrack(self);
  }
}

TensorObject *hy_tensor_alloc(ModuleState *st, PyTypeObject *type) {
  PyTypeObject *t = type != NULL ? type : (PyTypeObject *)st->tensor_class;
  if (t == NULL) t = st->tensor_type;
  TensorObject *self = (TensorObject *)t->tp_alloc(t, 0);
  if (self != NULL) tensor_untrack_if_plain(st, self);
  return self;
}

int hy_tensor_adopt(TensorObject *self, HurrayDescriptor *d, HurrayBufferList *list,
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

HurrayStatus hy_buffer_share(TensorObject *owner, size_t i, HurrayBuffer **out, HurrayError *e) {
  *out = NULL;
  const HurrayBuffer *src = hurray_buffer_list_get(owner->buffers, i);
  HurrayBuffer *b = NULL;
  HurrayStatus s = hurray_buffer_create(hurray_buffer_data(src), hurray_buffer_size(src),
                                        hy_release_pyobject, Py_NewRef(owner), &b, e);
  if (s == HURRAY_OK) s = hurray_buffer_set_alignment(b, hurray_buffer_alignment(src), e);
  if (s == HURRAY_OK) {
    s = hurray_buffer_set_sync(b, hurray_buffer_sync_mode(src), hurray_buffer_sync_handle(src), e);
  }
  if (s == HURRAY_OK) {
    s = hurray_buffer_set_device(b, hurray_buffer_device_type(src), hurray_buffer_device_id(src),
                                 hurray_buffer_memory_class(src), e);
  }
  if (s != HURRAY_OK) {
    hurray_buffer_destroy(b);
    return s;
  }
  *out = b;
  return HURRAY_OK;
}

/* Whether a buffer's struct format puts any element in the other byte
 * order than this machine's, which is the files' and the kernels'
 * (little-endian): numpy's '>f4' exports ">f", a record of them
 * "T{>f:a:f:b:}". Field names (between colons) are skipped. */
static bool foreign_byte_order(const char *format) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  const char *foreign = "<";
#else
  const char *foreign = ">!";
#endif
  bool in_name = false;
  for (const char *c = format; c != NULL && *c != '\0'; c++) {
    if (*c == ':') in_name = !in_name;
    else if (!in_name && strchr(foreign, *c) != NULL) return true;
  }
  return false;
}

/* 0 when `obj` (or a memoryview's base) is a numpy array whose dtype is
 * not in this machine's byte order, 1 otherwise, -1 with an exception. */
static int numpy_native(PyObject *obj) {
  PyObject *base = PyMemoryView_Check(obj) ? PyMemoryView_GET_BASE(obj) : obj;
  if (base == NULL) return 1;
  PyObject *dtype = PyObject_GetAttrString(base, "dtype");
  PyObject *native = dtype != NULL ? PyObject_GetAttrString(dtype, "isnative") : NULL;
  Py_XDECREF(dtype);
  if (native == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 1; /* not numpy's: nothing says otherwise */
  }
  int truth = PyObject_IsTrue(native);
  Py_DECREF(native);
  return truth;
}

/* A buffer's bytes are its exporter's elements in C (row-major) order, the
 * order memoryview.tobytes() gives. A Fortran-ordered or strided array is
 * refused rather than taken in its memory order, which would store its
 * values transposed; the caller decides whether a copy is wanted. So is a
 * big-endian array, whose values every reader would take byte-swapped, as
 * from_numpy and save refuse one. */
static int get_c_contiguous(ModuleState *st, PyObject *obj, Py_ssize_t index, Py_buffer *view) {
  int got = PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT);
  bool foreign = false;
  if (got == 0) {
    foreign = foreign_byte_order(view->format);
  } else if (PyErr_ExceptionMatches(PyExc_ValueError)) {
    /* numpy cannot spell ml_dtypes' bfloat16, float8 or int4 (or a
     * datetime, or a record holding one) as a format: those are asked
     * again without one, and their byte order is numpy's dtype's. */
    PyErr_Clear();
    got = PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS);
    if (got == 0) {
      int native = numpy_native(obj);
      if (native < 0) {
        PyBuffer_Release(view);
        return -1;
      }
      foreign = native == 0;
    }
  }
  if (got == 0) {
    if (!foreign) return 0;
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message,
             "buffer %zd is big-endian (%s%.32s%s): a buffer's bytes are taken as they are, "
             "and hurray's are little-endian; pass x.astype(x.dtype.newbyteorder('<'))",
             index, view->format != NULL ? "format '" : "a numpy dtype not in native order",
             view->format != NULL ? view->format : "", view->format != NULL ? "'" : "");
    PyBuffer_Release(view);
    hy_raise_status(st, HURRAY_ERR_INVALID_ARGUMENT, &e);
    return -1;
  }
  if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_ValueError)) {
    return -1;
  }
  PyErr_Clear();
  Py_buffer probe;
  if (PyObject_GetBuffer(obj, &probe, PyBUF_STRIDED_RO) < 0) return -1;
  PyBuffer_Release(&probe);
  PyErr_Format(PyExc_ValueError,
               "buffer %zd is not C-contiguous (a Fortran-ordered or strided array?): a "
               "buffer's bytes are taken in row-major order without a copy; pass "
               "numpy.ascontiguousarray(x) to copy it",
               index);
  return -1;
}

/* Whether a write through buffer `obj` must be refused: its exporter says
 * read-only (a read-only np.memmap, bytes: a PROT_READ mapping, or memory
 * that must not change), except for a view of another hurray tensor's
 * buffer, which is as protected as that tensor (a tensor taken from a
 * capsule exports read-only views whatever the capsule's flags say). */
static bool protects(ModuleState *st, PyObject *obj, const Py_buffer *view) {
  PyObject *base = PyMemoryView_Check(obj) ? PyMemoryView_GET_BASE(obj) : obj;
  if (base != NULL && Py_TYPE(base) == st->view_type) {
    PyObject *parent = ((ViewObject *)base)->tensor;
    return parent != NULL && ((TensorObject *)parent)->protected_memory;
  }
  return view->readonly;
}

/* Whether the collector may be shown an exporter this tensor holds a
 * Py_buffer of. Not a memoryview: its tp_clear drops its own buffer while
 * exports are outstanding, and the release of ours would then crash
 * (memory_dealloc reads the cleared buffer); a cycle through one is left
 * to leak, as before. */
static bool collectable_exporter(PyObject *exporter) {
  return exporter != NULL && !PyMemoryView_Check(exporter) && PyObject_GC_IsTracked(exporter);
}

/* Tensor(descriptor_bytes, buffers): each buffer-protocol object becomes one
 * HurrayBuffer that holds its own Py_buffer, released on its own. */
static int tensor_init_with(TensorObject *self, PyObject *encoded, PyObject *objects);

static int tensor_init(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"descriptor", "buffers", NULL};
  PyObject *encoded, *objects;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:Tensor", kwlist, &encoded, &objects)) {
    return -1;
  }
  /* Held: an exporter's __buffer__ (Python 3.12) may empty the keyword
   * dict that lends them. */
  Py_INCREF(encoded);
  Py_INCREF(objects);
  int rc = tensor_init_with((TensorObject *)op, encoded, objects);
  Py_DECREF(encoded);
  Py_DECREF(objects);
  return rc;
}

static int tensor_init_with(TensorObject *self, PyObject *encoded, PyObject *objects) {
  PyObject *op = (PyObject *)self;
  if (self->descriptor != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "Tensor is already initialised");
    return -1;
  }
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  if (st == NULL) return -1;
  HurrayDescriptor *d = hy_decode_descriptor(st, encoded);
  if (d == NULL) return -1;
  PyObject *seq = hy_sequence_copy(objects, "buffers must be a sequence");
  if (seq == NULL) {
    hurray_descriptor_destroy(d);
    return -1;
  }
  HurrayError e = {0};
  HurrayBufferList *list = NULL;
  HurrayStatus s = hurray_buffer_list_create(&list, &e);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  bool *writable = PyMem_Calloc(n ? (size_t)n : 1, sizeof(bool));
  Py_buffer **views = PyMem_Calloc(n ? (size_t)n : 1, sizeof *views);
  if (views == NULL) { /* the loop and the error path below test writable only */
    PyMem_Free(writable);
    writable = NULL;
  }
  bool protected_memory = false;
  for (Py_ssize_t i = 0; s == HURRAY_OK && writable != NULL && i < n; i++) {
    Py_buffer *view = PyMem_RawMalloc(sizeof *view);
    if (view == NULL) {
      PyErr_NoMemory();
      break;
    }
    if (get_c_contiguous(st, PySequence_Fast_GET_ITEM(seq, i), i, view) < 0) {
      PyMem_RawFree(view);
      break;
    }
    writable[i] = !view->readonly;
    if (protects(st, PySequence_Fast_GET_ITEM(seq, i), view)) protected_memory = true;
    HurrayBuffer *b = NULL;
    s = hurray_buffer_create(view->buf, (uint64_t)view->len, hy_release_pybuffer, view, &b, &e);
    if (s == HURRAY_OK) s = hurray_buffer_list_push(list, b, &e);
    if (s == HURRAY_OK) views[i] = view;
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
    if (!PyErr_Occurred()) hy_raise_status(st, s, &e);
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    PyMem_Free(writable);
    PyMem_Free(views);
    return -1;
  }
  self->descriptor = d;
  self->buffers = list;
  self->writable = writable;
  self->views = views;
  self->protected_memory = protected_memory;
  bool tracked_exporter = false;
  for (Py_ssize_t i = 0; i < n; i++) tracked_exporter |= collectable_exporter(views[i]->obj);
  if (!tracked_exporter) tensor_untrack_if_plain(st, self);
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
  PyMem_Free(self->views);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static int tensor_traverse(PyObject *op, visitproc visit, void *arg) {
  TensorObject *self = (TensorObject *)op;
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(self->descriptor_cache);
  if (self->views != NULL) {
    for (size_t i = 0; i < hurray_buffer_list_len(self->buffers); i++) {
      PyObject *exporter = self->views[i]->obj;
      if (collectable_exporter(exporter)) Py_VISIT(exporter);
    }
  }
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
  if (((TensorObject *)op)->descriptor_cache != NULL && !PyObject_GC_IsTracked(op)) {
    PyObject_GC_Track(op);
  }
  return 0;
}

int hy_tensor_ready(TensorObject *self) {
  if (self->descriptor == NULL) {
    PyErr_SetString(PyExc_ValueError, "Tensor is not initialised");
    return -1;
  }
  return 0;
}

static PyObject *tensor_encoded(PyObject *op, void *closure) {
  (void)closure;
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  return hy_encode_descriptor(hy_state_of_type(Py_TYPE(op)), self->descriptor);
}

static PyObject *tensor_protected(PyObject *op, void *closure) {
  (void)closure;
  return PyBool_FromLong(((TensorObject *)op)->protected_memory);
}

static PyObject *tensor_buffer_count(PyObject *op, void *closure) {
  (void)closure;
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  return PyLong_FromSize_t(hurray_buffer_list_len(self->buffers));
}

static PyObject *tensor_buffer(PyObject *op, PyObject *arg) {
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  Py_ssize_t i = PyLong_AsSsize_t(arg);
  if (i == -1 && PyErr_Occurred()) return NULL;
  if (i < 0 || (size_t)i >= hurray_buffer_list_len(self->buffers)) {
    PyErr_SetString(PyExc_IndexError, "buffer index out of range");
    return NULL;
  }
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  ViewObject *view = PyObject_GC_New(ViewObject, st->view_type);
  if (view == NULL) return NULL;
  view->tensor = Py_NewRef(op);
  view->index = i;
  PyObject_GC_Track(view);
  PyObject *mv = PyMemoryView_FromObject((PyObject *)view);
  Py_DECREF(view);
  return mv;
}

static PyObject *tensor_buffer_address(PyObject *op, PyObject *arg) {
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  Py_ssize_t i = PyLong_AsSsize_t(arg);
  if (i == -1 && PyErr_Occurred()) return NULL;
  const HurrayBuffer *b = hurray_buffer_list_get(self->buffers, (size_t)i);
  if (i < 0 || b == NULL) {
    PyErr_SetString(PyExc_IndexError, "buffer index out of range");
    return NULL;
  }
  return PyLong_FromVoidPtr(hurray_buffer_data(b));
}

static int view_getbuffer(PyObject *op, Py_buffer *out, int flags) {
  ViewObject *v = (ViewObject *)op;
  TensorObject *t = (TensorObject *)v->tensor;
  const HurrayBuffer *b = hurray_buffer_list_get(t->buffers, (size_t)v->index);
  HurraySyncMode mode = hurray_buffer_sync_mode(b);
  if (hurray_buffer_memory_class(b) == HURRAY_MEMORY_DEVICE || mode != HURRAY_SYNC_READY) {
    /* numpy, memoryview and bytes would read it now, on the host */
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message,
             "buffers[%zd] is %s: the host cannot read it through the buffer protocol", v->index,
             mode != HURRAY_SYNC_READY ? "not READY (its producer gave a stream or event to "
                                         "wait on; synchronise first)"
                                       : "device memory");
    hy_raise_status(hy_state_of_type(Py_TYPE(op)), HURRAY_ERR_UNSUPPORTED, &e);
    out->obj = NULL;
    return -1;
  }
  void *data = hurray_buffer_data(b);
  static char empty;
  return PyBuffer_FillInfo(out, op, data != NULL ? data : &empty,
                           (Py_ssize_t)hurray_buffer_size(b), !t->writable[v->index], flags);
}

/* Visited, so that a cycle through a view (a subclass instance that keeps
 * its own tensor.buffers) is found; never cleared: the memory a live
 * memoryview reads belongs to the tensor. */
static int view_traverse(PyObject *op, visitproc visit, void *arg) {
  Py_VISIT(Py_TYPE(op));
  Py_VISIT(((ViewObject *)op)->tensor);
  return 0;
}

static void view_dealloc(PyObject *op) {
  PyTypeObject *tp = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  Py_XDECREF(((ViewObject *)op)->tensor);
  PyObject_GC_Del(op);
  Py_DECREF(tp);
}

/* _view_info(): what a dense numpy view needs, read straight from the C
 * descriptor (no decoding): (dtype, shape, strides or None, byte_offset,
 * data_buffer, layout kind, quantization kind). */
static PyObject *tensor_view_info(PyObject *op, PyObject *unused) {
  (void)unused;
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
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
    PyObject *extent = PyLong_FromUnsignedLongLong(shape[i]);
    PyObject *step = strides != NULL ? PyLong_FromLongLong(strides[i]) : NULL;
    if (extent == NULL || (strides != NULL && step == NULL)) { /* no memory: ints past 256 */
      Py_XDECREF(extent);
      Py_XDECREF(step);
      Py_DECREF(shape_t);
      Py_DECREF(strides_t);
      return NULL;
    }
    PyTuple_SET_ITEM(shape_t, i, extent);
    if (strides != NULL) PyTuple_SET_ITEM(strides_t, i, step);
  }
  return Py_BuildValue("sNNKIii", hurray_dtype_name(hurray_descriptor_dtype(d)), shape_t,
                       strides_t, (unsigned long long)hurray_descriptor_byte_offset(d),
                       hurray_descriptor_data_buffer(d), (int)hurray_descriptor_layout_kind(d),
                       (int)hurray_descriptor_quant_kind(d));
}

/* _to_dense(out): the logical tensor, row-major, into a writable buffer. */
static PyObject *tensor_to_dense(PyObject *op, PyObject *arg) {
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  Py_buffer out;
  if (PyObject_GetBuffer(arg, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS
      /* The Python wrapper checked the output-size limit (_check_output_size)
       * before allocating `out`; the size of `out` is the caller's. */
      static const HurrayOutputLimits unlimited = HURRAY_OUTPUT_UNLIMITED;
  s = hurray_tensor_to_dense_with(self->descriptor, self->buffers, &unlimited, out.buf,
                                  (uint64_t)out.len, &e);
  Py_END_ALLOW_THREADS PyBuffer_Release(&out);
  if (s != HURRAY_OK) return hy_raise_status(hy_state_of_type(Py_TYPE(op)), s, &e);
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
  if (hy_tensor_ready(self) < 0) return NULL;
  HurrayDType out_dtype = hurray_dtype_from_name(dtype_name);
  Py_buffer out;
  if (PyObject_GetBuffer(target, &out, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS static const HurrayOutputLimits unlimited =
      HURRAY_OUTPUT_UNLIMITED; /* checked before */
  s = hurray_dequantize_with(self->descriptor, self->buffers, out_dtype, threads, &unlimited,
                             out.buf, (uint64_t)out.len, &e);
  Py_END_ALLOW_THREADS PyBuffer_Release(&out);
  if (s != HURRAY_OK) return hy_raise_status(hy_state_of_type(Py_TYPE(op)), s, &e);
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
  if (hy_tensor_ready(self) < 0) return NULL;
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
  if (s != HURRAY_OK) return hy_raise_status(hy_state_of_type(Py_TYPE(op)), s, &e);
  Py_RETURN_NONE;
}

PyObject *mod_check_output_bytes(PyObject *module, PyObject *args) {
  uint64_t stored, output;
  if (!PyArg_ParseTuple(args, "O&O&:_check_output_bytes", hy_conv_u64, &stored, hy_conv_u64,
                        &output)) {
    return NULL;
  }
  HurrayError e = {0};
  HurrayStatus s = hurray__check_output_bytes(stored, output, NULL, &e);
  if (s != HURRAY_OK) return hy_raise_status(PyModule_GetState(module), s, &e);
  Py_RETURN_NONE;
}

/* _derived(encoded, indices[, cls]): a Tensor (of class `cls`, a Tensor
 * type, if given) of descriptor `encoded` whose buffer
 * k is this tensor's buffer indices[k], shared with every property its
 * handle has (a NULL pointer of an empty buffer, alignment, sync mode,
 * device): member() and with_statistics() give tensors of the parent's
 * buffers wherever those live, which views through the buffer protocol
 * (host memory, READY) cannot. */
static PyObject *tensor_derived(PyObject *op, PyObject *args) {
  TensorObject *self = (TensorObject *)op;
  PyObject *encoded, *indices;
  PyTypeObject *cls = NULL;
  if (hy_tensor_ready(self) < 0 ||
      !PyArg_ParseTuple(args, "OO|O!:_derived", &encoded, &indices, &PyType_Type, &cls)) {
    return NULL;
  }
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  if (cls != NULL && !PyType_IsSubtype(cls, st->tensor_type)) {
    PyErr_SetString(PyExc_TypeError, "_derived: cls must be a Tensor type");
    return NULL;
  }
  PyObject *seq = hy_sequence_copy(indices, "indices must be a sequence");
  if (seq == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  bool *writable = PyMem_Calloc(n ? (size_t)n : 1, sizeof(bool));
  HurrayError e = {0};
  HurrayBufferList *list = NULL;
  HurrayStatus s = writable != NULL ? hurray_buffer_list_create(&list, &e) : HURRAY_ERR_NO_MEMORY;
  for (Py_ssize_t k = 0; s == HURRAY_OK && k < n; k++) {
    Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, k));
    if (i < 0 || (size_t)i >= hurray_buffer_list_len(self->buffers)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "buffer index out of range");
      break;
    }
    writable[k] = self->writable[i];
    HurrayBuffer *b = NULL;
    s = hy_buffer_share(self, (size_t)i, &b, &e);
    if (s == HURRAY_OK) s = hurray_buffer_list_push(list, b, &e);
  }
  Py_DECREF(seq);
  HurrayDescriptor *d = NULL;
  if (!PyErr_Occurred() && s == HURRAY_OK) d = hy_decode_descriptor(st, encoded);
  if (d != NULL) s = hurray_validate_buffer_placement(d, list, &e);
  TensorObject *t = d != NULL && s == HURRAY_OK ? hy_tensor_alloc(st, cls) : NULL;
  if (t == NULL) {
    if (!PyErr_Occurred()) {
      if (writable == NULL) PyErr_NoMemory();
      else hy_raise_status(st, s, &e);
    }
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    PyMem_Free(writable);
    return NULL;
  }
  t->descriptor = d;
  t->buffers = list;
  t->writable = writable;
  t->protected_memory = self->protected_memory;
  return (PyObject *)t;
}

/* _statistics(): the encoded descriptor with freshly computed statistics. */
static PyObject *tensor_statistics(PyObject *op, PyObject *unused) {
  (void)unused;
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  HurrayError e = {0};
  HurrayDescriptor *copy = NULL;
  HurrayStatus s = hurray_descriptor_clone(self->descriptor, &copy, &e);
  if (s == HURRAY_OK) {
    Py_BEGIN_ALLOW_THREADS s = hurray_compute_statistics(copy, self->buffers, &e);
    Py_END_ALLOW_THREADS
  }
  PyObject *out = s == HURRAY_OK ? hy_encode_descriptor(st, copy) : hy_raise_status(st, s, &e);
  hurray_descriptor_destroy(copy);
  return out;
}

/* The scheme's options with what the caller set: None (or -1 for
 * symmetric) keeps the scheme's default. -1 with an exception. */
static int quantize_options(ModuleState *st, PyObject *args, HurrayQuantizeOptions *o) {
  PyObject *src, *shape_obj, *axis_obj, *block_obj;
  const char *src_dtype_name, *scheme_name, *code_name, *scale_name;
  int symmetric;
  unsigned int threads;
  if (!PyArg_ParseTuple(args, "OsOsOOzziO&:_quantize", &src, &src_dtype_name, &shape_obj,
                        &scheme_name, &axis_obj, &block_obj, &code_name, &scale_name, &symmetric,
                        hy_conv_threads, &threads)) {
    return -1;
  }
  HurrayError e = {0};
  HurrayQuantScheme scheme;
  HurrayStatus s = hurray_quant_scheme_from_name(scheme_name, &scheme, &e);
  if (s == HURRAY_OK) s = hurray_quantize_options_init(o, scheme, &e);
  if (s != HURRAY_OK) {
    hy_raise_status(st, s, &e);
    return -1;
  }
  if (hy_refuse_bool(axis_obj, "axis") || hy_refuse_bool(block_obj, "block_size")) return -1;
  if (axis_obj != Py_None) {
    PyObject *index = PyNumber_Index(axis_obj);
    if (index == NULL) return -1;
    int overflow = 0;
    long long axis = PyLong_AsLongLongAndOverflow(index, &overflow);
    Py_DECREF(index);
    if (axis == -1 && PyErr_Occurred()) return -1;
    if (overflow != 0 || axis < INT32_MIN || axis > INT32_MAX) {
      PyErr_Format(PyExc_OverflowError, "axis %R is out of range (%d..%d)", axis_obj, INT32_MIN,
                   INT32_MAX);
      return -1;
    }
    o->axis = (int32_t)axis;
  }
  if (block_obj != Py_None && hy_field_u64(block_obj, UINT64_MAX, "block_size", &o->block_size)) {
    return -1;
  }
  if (code_name != NULL &&
      (o->code_dtype = hurray_dtype_from_name(code_name)) == HURRAY_DTYPE_INVALID) {
    PyErr_Format(PyExc_ValueError, "unknown dtype %R", PyTuple_GET_ITEM(args, 6));
    return -1;
  }
  if (scale_name != NULL &&
      (o->scale_dtype = hurray_dtype_from_name(scale_name)) == HURRAY_DTYPE_INVALID) {
    PyErr_Format(PyExc_ValueError, "unknown dtype %R", PyTuple_GET_ITEM(args, 7));
    return -1;
  }
  o->symmetric = symmetric;
  o->threads = threads;
  return 0;
}

int hy_shape(PyObject *obj, uint64_t *shape, Py_ssize_t *rank_out) {
  PyObject *seq = hy_sequence_copy(obj, "shape must be a sequence");
  if (seq == NULL) return -1;
  Py_ssize_t rank = PySequence_Fast_GET_SIZE(seq);
  if (rank > (Py_ssize_t)HURRAY_MAX_RANK) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "rank %zd exceeds the limit of %u", rank,
                 (unsigned)HURRAY_MAX_RANK);
    return -1;
  }
  for (Py_ssize_t i = 0; i < rank; i++) {
    shape[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (shape[i] == (uint64_t)-1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  *rank_out = rank;
  return 0;
}

/* _quantize(src, src_dtype, shape, scheme, axis, block_size, code_dtype,
 * scale_dtype, symmetric, threads) -> Tensor. The one call of
 * hurray_quantize in the bindings. */
PyObject *mod_quantize(PyObject *module, PyObject *args) {
  ModuleState *st = PyModule_GetState(module);
  HurrayQuantizeOptions o;
  if (quantize_options(st, args, &o) < 0) return NULL;
  PyObject *src = PyTuple_GET_ITEM(args, 0);
  HurrayDType src_dtype = hurray_dtype_from_name(PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 1)));
  uint64_t shape[HURRAY_MAX_RANK];
  Py_ssize_t rank = 0;
  if (hy_shape(PyTuple_GET_ITEM(args, 2), shape, &rank) < 0) return NULL;
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
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray_quantize(view.buf, (uint64_t)view.len, src_dtype,
                                             (uint32_t)rank, shape, &o, &d, &list, &e);
  Py_END_ALLOW_THREADS PyBuffer_Release(&view);
  if (s != HURRAY_OK) return hy_raise_status(st, s, &e);
  TensorObject *t = hy_tensor_alloc(st, NULL);
  if (t == NULL) {
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
    return NULL;
  }
  if (hy_tensor_adopt(t, d, list, true) < 0) {
    Py_DECREF(t);
    return NULL;
  }
  return (PyObject *)t;
}

PyObject *mod_set_tensor_class(PyObject *module, PyObject *cls) {
  ModuleState *st = PyModule_GetState(module);
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, st->tensor_type)) {
    PyErr_SetString(PyExc_TypeError, "expected a subclass of _Tensor");
    return NULL;
  }
  Py_XSETREF(st->tensor_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}
static PyGetSetDef tensor_getset[] = {
    {"_encoded", tensor_encoded, NULL, "the encoded descriptor", NULL},
    {"buffer_count", tensor_buffer_count, NULL, "number of buffers", NULL},
    {"_protected", tensor_protected, NULL, "memory that must not be written through a view", NULL},
    {"_descriptor_cache", tensor_cache_get, tensor_cache_set, "decoded descriptor, once", NULL},
    {NULL},
};

/* object.__reduce_ex__ calls an overridden __reduce__ at every protocol
 * (so a subclass may override this one); copyreg's protocols 0 and 1
 * would otherwise
 * make an empty tensor of the class. */
static PyObject *tensor_reduce(PyObject *op, PyObject *unused) {
  (void)unused;
  return PyErr_Format(PyExc_TypeError,
                      "a hurray %s owns buffers that have no meaning in another process and "
                      "cannot be copied or pickled; save it with hurray.save",
                      Py_TYPE(op)->tp_name);
}

static PyMethodDef tensor_methods[] = {
    {"__reduce__", tensor_reduce, METH_NOARGS, "refused: see python-bindings.md"},
    {"_buffer", tensor_buffer, METH_O, "zero-copy memoryview of buffer i"},
    {"_buffer_address", tensor_buffer_address, METH_O, "address of buffer i"},
    {"_to_dense", tensor_to_dense, METH_O, "materialise the logical tensor into out"},
    {"_view_info", tensor_view_info, METH_NOARGS, "dtype, shape, strides, offset, buffer, kinds"},
    {"_statistics", tensor_statistics, METH_NOARGS, "encoded descriptor with statistics"},
    {"_derived", tensor_derived, METH_VARARGS,
     "_derived(encoded, indices[, cls]): a tensor of this one's buffers at indices"},
    {"_dequantize", tensor_dequantize, METH_VARARGS, "real values into out (C kernels)"},
    {"_check_output_size", tensor_check_output_size, METH_VARARGS,
     "raise LimitError if an output of nbytes is beyond the limit"},
    {"__hurray__", (PyCFunction)(void (*)(void))tensor_dunder_hurray, METH_VARARGS | METH_KEYWORDS,
     "export every buffer in one capsule"},
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
    {Py_bf_getbuffer, hy_tensor_getbuffer},
    {Py_bf_releasebuffer, hy_tensor_releasebuffer},
    {Py_tp_doc, "A descriptor plus N buffers, each with its own owner."},
    {0, NULL},
};

PyType_Spec hy_tensor_spec = {"hurray._hurray._Tensor", sizeof(TensorObject), 0,
                              Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                              tensor_slots};

static PyType_Slot view_slots[] = {
    {Py_bf_getbuffer, view_getbuffer},
    {Py_tp_dealloc, view_dealloc},
    {Py_tp_traverse, view_traverse},
    {0, NULL},
};

/* Made only by the tensor it views: an empty one, from `type(view)()`,
 * had no tensor to read its buffer from. */
PyType_Spec hy_view_spec = {
    "hurray._hurray._BufferView", sizeof(ViewObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION, view_slots};
