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
PyObject *mod_save(PyObject *module, PyObject *args) {
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
    if (hy_tensor_ready(t) < 0) break;
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
    if (!PyErr_Occurred()) hy_raise_status_file(st, s, &e, filename);
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
  if (!PyErr_Occurred() && s != HURRAY_OK) hy_raise_status_file(st, s, &e, filename);
  Py_XDECREF(filename);
  if (PyErr_Occurred()) return NULL; /* the stream's own exception, or the status */
  Py_RETURN_NONE;
}

