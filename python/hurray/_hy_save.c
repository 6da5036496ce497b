/*
 * _hy_save.c: save() to a path (atomic), a file descriptor or a stream.
 */
#include "_hurray.h"

#include "../../src/io/file_mappings.h"

/* -------------------------------------------------------------------- save */

/* Errors name the key and the value's type, never the value: its repr
 * may be megabytes long, or raise. */
static HurrayStatus set_metadata_value(HurrayWriter *w, PyObject *key_object, const char *key,
                                       PyObject *value, HurrayError *e) {
  if (PyBool_Check(value)) {
    return hurray_writer_set_metadata_bool(w, key, value == Py_True, e);
  }
  if (PyLong_Check(value)) {
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return HURRAY_ERR_INVALID_ARGUMENT;
    return hurray_writer_set_metadata_int(w, key, v, e);
  }
  if (PyFloat_Check(value))
    return hurray_writer_set_metadata_float(w, key, PyFloat_AsDouble(value), e);
  if (PyUnicode_Check(value)) {
    const char *s = hy_utf8(value, "metadata value");
    if (s == NULL) return HURRAY_ERR_INVALID_ARGUMENT;
    return hurray_writer_set_metadata_string(w, key, s, e);
  }
  Py_buffer view;
  if (PyObject_CheckBuffer(value)) {
    if (PyObject_GetBuffer(value, &view, PyBUF_SIMPLE) == 0) {
      HurrayStatus s = hurray_writer_set_metadata_bytes(w, key, view.buf, (size_t)view.len, e);
      PyBuffer_Release(&view);
      return s;
    }
    /* Only a refused layout is reworded: another failure (a released
     * memoryview's ValueError) says what it is itself. */
    if (!PyErr_ExceptionMatches(PyExc_BufferError)) return HURRAY_ERR_INVALID_ARGUMENT;
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError,
                 "metadata %R: a bytes-like value must be C-contiguous (this %.100s is not); "
                 "pass bytes(value)",
                 key_object, Py_TYPE(value)->tp_name);
    return HURRAY_ERR_INVALID_ARGUMENT;
  }
  PyErr_Format(PyExc_TypeError,
               "metadata %R: values are str, int, float, bool or bytes, not %.100s", key_object,
               Py_TYPE(value)->tp_name);
  return HURRAY_ERR_INVALID_ARGUMENT;
}

/* Where save() writes: a path (atomic; *path set, the caller's), an int
 * file descriptor, or a stream with write(). -1 with an exception, else 0
 * with *status the opening's outcome. */
static int open_writer(PyObject *target, PyObject **path, bool *release_gil, HurrayWriter **w,
                       HurrayStatus *status, HurrayError *e) {
  bool to_path = PyUnicode_Check(target) || PyBytes_Check(target);
  bool to_fd = !to_path && PyLong_Check(target) && !PyBool_Check(target);
  if (to_path && !PyUnicode_FSConverter(target, path)) return -1;
  int writable = to_path || to_fd ? 1 : hy_has_attr(target, "write");
  if (writable < 0) return -1;
  if (!writable) {
    PyErr_SetString(PyExc_TypeError,
                    "save() needs a path, a file descriptor or a writable stream");
    return -1;
  }
  /* A Python stream's write() needs the GIL, so only the other sinks drop it. */
  *release_gil = to_path || to_fd;
  HurrayStatus s;
  if (to_path) {
    Py_BEGIN_ALLOW_THREADS s = hurray_writer_open(PyBytes_AS_STRING(*path), w, e);
    Py_END_ALLOW_THREADS
  } else if (to_fd) {
    long fd = PyLong_AsLong(target);
    if ((fd == -1 && PyErr_Occurred()) || fd < 0 || fd > INT_MAX) {
      s = HURRAY_ERR_INVALID_ARGUMENT;
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "not a valid file descriptor");
    } else {
      s = hurray_writer_open_fd((int)fd, w, e); /* a failure is raised from `e` by the caller */
    }
  } else {
    s = hurray_writer_open_callback(hy_stream_write, target, w, e);
  }
  *status = s;
  return 0;
}

/* Plain arrays, (dtype name, array) pairs, go to the writer in batches of
 * up to BATCH_MAX (hurray_writer_write_dense_batch): their buffers and
 * shapes are taken with the GIL, then written in one call without it. The
 * bound keeps the batch's own memory (about 400 bytes a tensor) small
 * whatever the count. */
#define BATCH_MAX 8192

typedef struct Batch {
  HurrayDenseTensor tensors[BATCH_MAX];
  Py_buffer views[BATCH_MAX];
  uint64_t shapes[BATCH_MAX][HURRAY_MAX_RANK];
  size_t count;
} Batch;

static void batch_release(Batch *b) {
  for (size_t i = 0; i < b->count; i++) PyBuffer_Release(&b->views[i]);
  b->count = 0;
}

/* Writes what the batch holds and empties it. */
static void batch_flush(HurrayWriter *w, Batch *b, bool release_gil, HurrayStatus *status,
                        HurrayError *e) {
  if (b->count == 0) return;
  HurrayStatus s;
  if (release_gil) {
    Py_BEGIN_ALLOW_THREADS /* the views keep every array's memory alive */
        s = hurray_writer_write_dense_batch(w, b->tensors, b->count, NULL, e);
    Py_END_ALLOW_THREADS
  } else {
    s = hurray_writer_write_dense_batch(w, b->tensors, b->count, NULL, e);
  }
  batch_release(b);
  *status = s;
}

/* Adds (dtype name, array) as tensor `name`: -1 with an exception. The
 * buffer is asked for without a format (numpy exports ml_dtypes arrays only
 * so), C-contiguous: shape and item size come with it. */
static int batch_add(Batch *b, const char *name, PyObject *spec) {
  PyObject *dtype_obj, *array;
  if (PyTuple_GET_SIZE(spec) != 2) {
    PyErr_SetString(PyExc_TypeError, "a plain array is given as (dtype name, array)");
    return -1;
  }
  dtype_obj = PyTuple_GET_ITEM(spec, 0);
  array = PyTuple_GET_ITEM(spec, 1);
  const char *dtype_name = hy_utf8(dtype_obj, "dtype name");
  if (dtype_name == NULL) return -1;
  HurrayDType dtype = hurray_dtype_from_name(dtype_name);
  uint32_t bits = hurray_dtype_bits(dtype);
  Py_buffer *view = &b->views[b->count];
  if (PyObject_GetBuffer(array, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
  if (view->ndim > (int)HURRAY_MAX_RANK) {
    /* The message and class the other ways in (from_numpy, Descriptor)
     * give: it blamed the dtype, as a TypeError. */
    PyErr_Format(PyExc_ValueError, "tensor \"%s\": shape: %d entries exceed the limit of %u", name,
                 view->ndim, HURRAY_MAX_RANK);
    PyBuffer_Release(view);
    return -1;
  }
  if (bits < 8 || view->itemsize * 8 != (Py_ssize_t)bits || view->ndim < 0) {
    PyErr_Format(PyExc_TypeError,
                 "tensor \"%s\": dtype %s does not match a buffer of %zd-byte items", name,
                 dtype_name, view->itemsize);
    PyBuffer_Release(view);
    return -1;
  }
  HurrayDenseTensor *t = &b->tensors[b->count];
  uint64_t *shape = b->shapes[b->count];
  for (int k = 0; k < view->ndim; k++) {
    /* A 0-d export may leave shape NULL; ndim 0 never reads it. */
    shape[k] = (uint64_t)view->shape[k];
  }
  t->name = name; /* the str lives in the items sequence until the save ends */
  t->dtype = dtype;
  t->rank = (uint32_t)view->ndim;
  t->shape = shape;
  t->data = view->buf;
  t->byte_size = (uint64_t)view->len;
  b->count++;
  return 0;
}

/* Writes each (name, Tensor) or (name, (dtype name, array)) pair; stops
 * at the first failure (a Python exception, or *status not OK). */
static void write_items(ModuleState *st, HurrayWriter *w, PyObject *seq, bool release_gil,
                        HurrayStatus *status, HurrayError *e) {
  Batch *batch = PyMem_Malloc(sizeof *batch);
  if (batch == NULL) {
    PyErr_NoMemory();
    return;
  }
  batch->count = 0;
  for (Py_ssize_t i = 0;
       *status == HURRAY_OK && !PyErr_Occurred() && i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *name_obj, *tensor;
    if (!PyTuple_Check(pair) || !PyArg_ParseTuple(pair, "UO", &name_obj, &tensor)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "expected (name, Tensor) pairs");
      break;
    }
    const char *name = hy_utf8(name_obj, "tensor name");
    if (name == NULL) break;
    if (PyTuple_Check(tensor)) { /* (dtype name, array): a plain dense array */
      if (batch_add(batch, name, tensor) < 0) break;
      if (batch->count == BATCH_MAX) batch_flush(w, batch, release_gil, status, e);
      continue;
    }
    /* Tensors go in the order given: the batch so far goes first. */
    batch_flush(w, batch, release_gil, status, e);
    if (*status != HURRAY_OK) break;
    if (!PyObject_TypeCheck(tensor, st->tensor_type)) {
      PyErr_Format(PyExc_TypeError, "%R is not a hurray Tensor", tensor);
      break;
    }
    TensorObject *t = (TensorObject *)tensor;
    if (hy_tensor_ready(t) < 0) break;
    HurrayStatus s;
    if (release_gil) {
      Py_BEGIN_ALLOW_THREADS /* `seq` holds the tensor, so its memory stays */
          s = hurray_writer_write_tensor(w, name, t->descriptor, t->buffers, e);
      Py_END_ALLOW_THREADS
    } else {
      s = hurray_writer_write_tensor(w, name, t->descriptor, t->buffers, e);
    }
    *status = s;
  }
  if (*status == HURRAY_OK && !PyErr_Occurred()) batch_flush(w, batch, release_gil, status, e);
  batch_release(batch);
  PyMem_Free(batch);
}

static void write_metadata(HurrayWriter *w, PyObject *metadata, HurrayStatus *status,
                           HurrayError *e) {
  if (!PyDict_Check(metadata)) {
    PyErr_SetString(PyExc_TypeError, "metadata must be a dict");
    return;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (!PyErr_Occurred() && *status == HURRAY_OK && PyDict_Next(metadata, &pos, &key, &value)) {
    const char *k = PyUnicode_Check(key) ? hy_utf8(key, "metadata key") : NULL;
    if (k == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "metadata keys must be str");
      return;
    }
    *status = set_metadata_value(w, key, k, value, e);
  }
}

/* save(target, [(name, tensor), ...], metadata_dict_or_None): target is a
 * path (atomic), an int file descriptor, or an object with write(). */
PyObject *mod_save(PyObject *module, PyObject *args) {
  ModuleState *st = PyModule_GetState(module);
  PyObject *target, *items, *metadata, *path = NULL;
  int statistics = 0;
  if (!PyArg_ParseTuple(args, "OOO|p:save", &target, &items, &metadata, &statistics)) return NULL;
  HurrayError e = {0};
  HurrayWriter *w = NULL;
  HurrayStatus s;
  bool release_gil;
  PyObject *seq = hy_sequence_copy(items, "tensors must be a sequence of (name, Tensor)");
  if (seq == NULL) return NULL;
  if (open_writer(target, &path, &release_gil, &w, &s, &e) < 0) {
    Py_DECREF(seq);
    return NULL;
  }
  HyCancel cancel; /* Ctrl-C while the GIL is released (a stream checks itself) */
  if (s == HURRAY_OK && release_gil) {
    hy_cancel_init(&cancel,
                   false); /* may leave a KeyboardInterrupt set: nothing is written then */
    if (!PyErr_Occurred()) s = hurray_writer_set_cancel(w, hy_cancel_requested, &cancel, &e);
  }
  if (s == HURRAY_OK) s = hurray_writer_set_statistics(w, statistics != 0, &e);
  if (s == HURRAY_OK) write_items(st, w, seq, release_gil, &s, &e);
  if (s == HURRAY_OK && !PyErr_Occurred() && metadata != Py_None) {
    write_metadata(w, metadata, &s, &e);
  }
  Py_DECREF(seq);
  PyObject *filename = path != NULL ? PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path)) : NULL;
  Py_XDECREF(path);
  if (PyErr_Occurred() || s != HURRAY_OK) {
    hurray_writer_abort(w);
    if (!PyErr_Occurred()) hy_raise_status_file(st, s, &e, filename);
    Py_XDECREF(filename);
    return NULL;
  }
  if (release_gil) {
    Py_BEGIN_ALLOW_THREADS s = hurray_writer_finish(w, &e);
    Py_END_ALLOW_THREADS
  } else {
    s = hurray_writer_finish(w, &e);
  }
  if (!PyErr_Occurred() && s != HURRAY_OK) hy_raise_status_file(st, s, &e, filename);
  Py_XDECREF(filename);
  if (PyErr_Occurred()) return NULL; /* the stream's own exception, or the status */
  Py_RETURN_NONE;
}

/* _check_not_mapped_from(fd, spans): what a descriptor writer checks of
 * each buffer, for the values save() copies in Python first (non-contiguous
 * arrays and tensors), before the copy reads them: into a file that
 * open(path, "wb") truncated, that read faults (SIGBUS). `spans` is a
 * callable returning [(name, address, length), ...], called only when the
 * file is mapped at all: rarely, so a save of many tensors costs nothing. */
PyObject *mod_check_not_mapped_from(PyObject *module, PyObject *args) {
  int fd;
  PyObject *make_spans;
  if (!PyArg_ParseTuple(args, "iO:_check_not_mapped_from", &fd, &make_spans)) return NULL;
  HurrayError e = {0};
  HurrayFileMappings m = {0};
  HurrayStatus s = hurray__file_mappings_of_fd(fd, &m, &e);
  if (s != HURRAY_OK || m.count == 0) {
    hurray__file_mappings_free(&m);
    if (s != HURRAY_OK) return hy_raise_status(PyModule_GetState(module), s, &e);
    Py_RETURN_NONE;
  }
  PyObject *spans = PyObject_CallNoArgs(make_spans);
  PyObject *seq = spans != NULL ? hy_sequence_copy(spans, "spans must be a sequence") : NULL;
  Py_XDECREF(spans);
  if (seq == NULL) {
    hurray__file_mappings_free(&m);
    return NULL;
  }
  for (Py_ssize_t i = 0; s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *name, *item = PySequence_Fast_GET_ITEM(seq, i);
    uint64_t address, length;
    if (!PyTuple_Check(item)) { /* PyArg_ParseTuple's SystemError otherwise */
      PyErr_Format(PyExc_TypeError, "a span is a tuple, not %.100s", Py_TYPE(item)->tp_name);
      break;
    }
    if (!PyArg_ParseTuple(item, "UO&O&:span", &name, hy_conv_u64, &address, hy_conv_u64,
                          &length)) {
      break;
    }
    const char *n = hy_utf8(name, "tensor name");
    if (n == NULL) break;
    s = hurray__refuse_mapped(&m, n, 0, (const void *)(uintptr_t)address, length, &e);
  }
  hurray__file_mappings_free(&m);
  Py_DECREF(seq);
  if (PyErr_Occurred()) return NULL;
  if (s != HURRAY_OK) return hy_raise_status(PyModule_GetState(module), s, &e);
  Py_RETURN_NONE;
}
