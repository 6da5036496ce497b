/*
 * _hy_save.c: save() to a path (atomic), a file descriptor or a stream.
 */
#include "_hurray.h"

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
  if (PyFloat_Check(value))
    return hurray_writer_set_metadata_float(w, key, PyFloat_AsDouble(value), e);
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
  uint64_t shape[HURRAY_MAX_RANK];
  Py_ssize_t rank = 0;
  if (hy_shape(shape_obj, shape, &rank) < 0) return -1;
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
      Py_BEGIN_ALLOW_THREADS s = hurray_writer_write_tensor(w, name, d, list, e);
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

/* Where save() writes: a path (atomic; *path set, the caller's), an int
 * file descriptor, or a stream with write(). -1 with an exception, else 0
 * with *status the opening's outcome. */
static int open_writer(PyObject *target, PyObject **path, bool *release_gil, HurrayWriter **w,
                       HurrayStatus *status, HurrayError *e) {
  bool to_path = PyUnicode_Check(target) || PyBytes_Check(target);
  bool to_fd = !to_path && PyLong_Check(target);
  if (to_path && !PyUnicode_FSConverter(target, path)) return -1;
  if (!to_path && !to_fd && !PyObject_HasAttrString(target, "write")) {
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
    s = (fd == -1 && PyErr_Occurred()) || fd < 0 || fd > INT_MAX
            ? HURRAY_ERR_INVALID_ARGUMENT
            : hurray_writer_open_fd((int)fd, w, e);
    if (s != HURRAY_OK && !PyErr_Occurred()) {
      PyErr_SetString(PyExc_ValueError, "not a valid file descriptor");
    }
  } else {
    s = hurray_writer_open_callback(hy_stream_write, target, w, e);
  }
  *status = s;
  return 0;
}

/* Writes each (name, Tensor) or (name, (dtype, shape, buffer)) pair; stops
 * at the first failure (a Python exception, or *status not OK). */
static void write_items(ModuleState *st, HurrayWriter *w, PyObject *seq, bool release_gil,
                        HurrayStatus *status, HurrayError *e) {
  for (Py_ssize_t i = 0;
       *status == HURRAY_OK && !PyErr_Occurred() && i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *name_obj, *tensor;
    if (!PyTuple_Check(pair) || !PyArg_ParseTuple(pair, "UO", &name_obj, &tensor)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "expected (name, Tensor) pairs");
      return;
    }
    const char *name = hy_utf8(name_obj, "tensor name");
    if (name == NULL) return;
    if (PyTuple_Check(tensor)) { /* (dtype, shape, buffer): a plain dense array */
      if (write_plain(w, name, tensor, release_gil, status, e) < 0) return;
      continue;
    }
    if (!PyObject_TypeCheck(tensor, st->tensor_type)) {
      PyErr_Format(PyExc_TypeError, "%R is not a hurray Tensor", tensor);
      return;
    }
    TensorObject *t = (TensorObject *)tensor;
    if (hy_tensor_ready(t) < 0) return;
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
    *status = set_metadata_value(w, k, value, e);
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
  PyObject *seq = PySequence_Fast(items, "tensors must be a sequence of (name, Tensor)");
  if (seq == NULL) return NULL;
  if (open_writer(target, &path, &release_gil, &w, &s, &e) < 0) {
    Py_DECREF(seq);
    return NULL;
  }
  HyCancel cancel; /* Ctrl-C while the GIL is released (a stream checks itself) */
  if (s == HURRAY_OK && release_gil) {
    hy_cancel_init(&cancel); /* may leave a KeyboardInterrupt set: nothing is written then */
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
