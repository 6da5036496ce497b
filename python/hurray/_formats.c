/*
 * _formats: the native safetensors and GGUF readers and writers
 * (include/hurray/convert.h) for the Python converter (hurray/convert/), so
 * that converting those formats needs neither torch nor the safetensors or
 * gguf packages. A module of its own, next to _hurray: tensors cross
 * between the two through the `__hurray__` capsule protocol
 * (docs/impl/python-bindings.md), the same way any other producer's do.
 *
 *   Source(path)            a safetensors, GGUF or hurray file
 *     .format               "safetensors", "gguf", "hurray"
 *     .names()              tensor names, in file order
 *     .info(i)              (type name, shape, stored bytes)
 *     .check(i)             raises if hurray cannot hold tensor i exactly
 *     .get(i)               a "hurray_buffer" capsule (hurray.from_hurray)
 *     .metadata()           {key: str | int | float | bool | bytes}, hurray form
 *     .close()
 *   target_form(format, name, encoded descriptor)
 *                           (type name, stored bytes) a safetensors or GGUF
 *                           target stores it as; raises why not
 *   write(path, format, [(name, capsule)], {key: value}, statistics)
 *                           writes atomically (GIL released); returns the
 *                           number of metadata keys the format dropped
 *
 * Errors are raised as the hurray.HurrayError subclass of their status
 * (_shared.h: the same mapping and message form as _hurray's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "hurray/hurray.h"

#include "_guard.h"
#include "_shared.h"
#include "../../src/formats/formats_internal.h"

/* ---------------------------------------------------------------- errors */

/* The class _hurray made for `status` (and its HurrayIOError for failures
 * the operating system reported): one mapping, hy_error_classes. */
static PyObject *raise_status(HurrayStatus status, const HurrayError *error) {
  PyObject *mod = PyImport_ImportModule("hurray._hurray");
  if (mod == NULL) return NULL;
  PyObject *cls = PyObject_GetAttrString(mod, hy_error_class_name(status));
  PyObject *io_class = cls != NULL ? PyObject_GetAttrString(mod, "HurrayIOError") : NULL;
  Py_DECREF(mod);
  if (io_class != NULL) hy_raise_class(cls, io_class, status, error, NULL);
  Py_XDECREF(cls);
  Py_XDECREF(io_class);
  return NULL;
}

static HurrayFormat format_arg(const char *name) {
  if (strcmp(name, "safetensors") == 0) return HURRAY_FORMAT_SAFETENSORS;
  if (strcmp(name, "gguf") == 0) return HURRAY_FORMAT_GGUF;
  if (strcmp(name, "hurray") == 0) return HURRAY_FORMAT_HURRAY;
  return HURRAY_FORMAT_UNKNOWN;
}

/* ---------------------------------------------------------------- capsule */

/* Takes `d` and `list` in every case. */
static PyObject *make_capsule(HurrayDescriptor *d, HurrayBufferList *list) {
  HurrayError e = {0};
  HurrayStatus s;
  /* A source's tensors are views of its read-only mapping of the file (or
   * of memory it keeps): nothing may write through them (ADR-0029). */
  HyCapsuleContext *ctx = hy_capsule_context(d, HY_CAPSULE_READ_ONLY, &s, &e);
  hurray_descriptor_destroy(d);
  if (ctx == NULL) {
    hurray_buffer_list_destroy(list);
    return raise_status(s, &e);
  }
  return hy_capsule_wrap(list, ctx);
}

/* Takes the list out of a producer's capsule (renaming it used). */
static int take_capsule(PyObject *capsule, HurrayDescriptor **d, HurrayBufferList **list) {
  if (!PyCapsule_IsValid(capsule, HY_CAPSULE_NAME)) {
    PyErr_SetString(PyExc_TypeError, "expected an unused \"hurray_buffer\" capsule");
    return -1;
  }
  const HyCapsuleContext *ctx = PyCapsule_GetContext(capsule);
  if (ctx == NULL || ctx->abi_version != HURRAY_C_ABI_VERSION) {
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "capsule without a context of this C ABI version");
    return -1;
  }
  HurrayError e = {0};
  HurrayStatus s = hurray_descriptor_decode(ctx->descriptor, (size_t)ctx->descriptor_len, d, &e);
  if (s != HURRAY_OK) {
    raise_status(s, &e);
    return -1;
  }
  *list = PyCapsule_GetPointer(capsule, HY_CAPSULE_NAME);
  if (*list == NULL || PyCapsule_SetName(capsule, HY_USED_CAPSULE_NAME) < 0) {
    hurray_descriptor_destroy(*d);
    return -1;
  }
  return 0;
}

/* ----------------------------------------------------------------- Source */

/* A HurraySource is not thread-safe (convert.h), and get() releases the
 * GIL: `busy` (read and set under the GIL) marks a get in flight, and any
 * other call meanwhile, from another thread, is refused rather than run
 * against a source being read, or closed under the reader (a SIGSEGV). */
typedef struct SourceObject {
  PyObject_HEAD HurraySource *source;
  bool busy;
} SourceObject;

static int source_idle(SourceObject *self) {
  if (self->busy) {
    PyErr_SetString(PyExc_RuntimeError,
                    "the source is in use by another thread; a Source is for one thread at a "
                    "time");
    return -1;
  }
  return 0;
}

static int source_init(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"path", "verify", NULL};
  PyObject *path_obj;
  int verify = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|p:Source", kwlist, PyUnicode_FSConverter,
                                   &path_obj, &verify)) {
    return -1;
  }
  SourceObject *self = (SourceObject *)op;
  if (source_idle(self) < 0) {
    Py_DECREF(path_obj);
    return -1;
  }
  hurray_source_close(self->source);
  self->source = NULL;
  HurrayError e = {0};
  HurrayStatus s;
  HurraySourceOptions options = HURRAY_SOURCE_OPTIONS_INIT;
  options.verify_checksums = verify != 0;
  HurraySource *source = NULL;
  self->busy = true;
  Py_BEGIN_ALLOW_THREADS s = hurray_source_open(PyBytes_AS_STRING(path_obj), HURRAY_FORMAT_UNKNOWN,
                                                &options, &source, &e);
  Py_END_ALLOW_THREADS self->busy = false;
  self->source = source;
  Py_DECREF(path_obj);
  if (s != HURRAY_OK) {
    raise_status(s, &e);
    return -1;
  }
  return 0;
}

static void source_dealloc(PyObject *op) {
  SourceObject *self = (SourceObject *)op;
  PyTypeObject *tp = Py_TYPE(op);
  hurray_source_close(self->source);
  tp->tp_free(op);
  Py_DECREF(tp);
}

static int source_ready(SourceObject *self) {
  if (source_idle(self) < 0) return -1;
  if (self->source == NULL) {
    PyErr_SetString(PyExc_ValueError, "the source is closed");
    return -1;
  }
  return 0;
}

static int index_arg(SourceObject *self, PyObject *arg, size_t *out) {
  if (source_ready(self) < 0) return -1;
  Py_ssize_t i = PyLong_AsSsize_t(arg);
  if (i == -1 && PyErr_Occurred()) return -1;
  if (i < 0 || (size_t)i >= hurray_source_tensor_count(self->source)) {
    PyErr_SetString(PyExc_IndexError, "tensor index out of range");
    return -1;
  }
  *out = (size_t)i;
  return 0;
}

static PyObject *source_format(PyObject *op, void *closure) {
  (void)closure;
  SourceObject *self = (SourceObject *)op;
  if (source_ready(self) < 0) return NULL;
  return PyUnicode_FromString(hurray_format_name(hurray_source_format(self->source)));
}

static PyObject *source_names(PyObject *op, PyObject *unused) {
  (void)unused;
  SourceObject *self = (SourceObject *)op;
  if (source_ready(self) < 0) return NULL;
  size_t n = hurray_source_tensor_count(self->source);
  PyObject *out = PyList_New((Py_ssize_t)n);
  for (size_t i = 0; out != NULL && i < n; i++) {
    const char *text = hurray_source_tensor_name(self->source, i); /* never NULL here */
    PyObject *name = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "surrogateescape");
    if (name == NULL) Py_CLEAR(out);
    else PyList_SET_ITEM(out, (Py_ssize_t)i, name);
  }
  return out;
}

static PyObject *source_check(PyObject *op, PyObject *arg) {
  SourceObject *self = (SourceObject *)op;
  size_t i;
  if (index_arg(self, arg, &i) < 0) return NULL;
  HurrayError e = {0};
  HurrayStatus s = hurray_source_check_tensor(self->source, i, &e);
  if (s != HURRAY_OK) return raise_status(s, &e);
  Py_RETURN_NONE;
}

static PyObject *source_info(PyObject *op, PyObject *arg) {
  SourceObject *self = (SourceObject *)op;
  size_t i;
  if (index_arg(self, arg, &i) < 0) return NULL;
  HurrayError e = {0};
  /* The shape as hurray sees it, from the descriptor alone. */
  HurrayStatus s = hurray_source_check_tensor(self->source, i, &e);
  PyObject *shape = NULL;
  if (s == HURRAY_OK) {
    HurrayDescriptor *d = NULL;
    s = hurray_source_get_descriptor(self->source, i, &d, &e);
    if (s != HURRAY_OK) return raise_status(s, &e);
    uint32_t rank = hurray_descriptor_rank(d);
    shape = PyTuple_New(rank);
    for (uint32_t k = 0; shape != NULL && k < rank; k++) {
      PyObject *v = PyLong_FromUnsignedLongLong(hurray_descriptor_shape(d)[k]);
      if (v == NULL) Py_CLEAR(shape);
      else PyTuple_SET_ITEM(shape, k, v);
    }
    hurray_descriptor_destroy(d);
    if (shape == NULL) return NULL;
  } else {
    shape = Py_None;
    Py_INCREF(shape);
  }
  return Py_BuildValue("(sNK)", hurray_source_tensor_type(self->source, i), shape,
                       (unsigned long long)hurray_source_tensor_bytes(self->source, i));
}

static PyObject *source_get(PyObject *op, PyObject *arg) {
  SourceObject *self = (SourceObject *)op;
  size_t i;
  if (index_arg(self, arg, &i) < 0) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayBufferList *l = NULL;
  HurrayStatus s;
  self->busy = true;
  Py_BEGIN_ALLOW_THREADS s = hurray_source_get_tensor(self->source, i, &d, &l, &e);
  Py_END_ALLOW_THREADS self->busy = false;
  if (s != HURRAY_OK) return raise_status(s, &e);
  return make_capsule(d, l);
}

static PyObject *source_metadata(PyObject *op, PyObject *unused) {
  (void)unused;
  SourceObject *self = (SourceObject *)op;
  if (source_ready(self) < 0) return NULL;
  PyObject *out = PyDict_New();
  for (size_t i = 0; out != NULL && i < hurray_source_metadata_count(self->source); i++) {
    const char *key;
    HurrayMetadataType type;
    const void *value;
    size_t len;
    HurrayError e = {0};
    HurrayStatus s = hurray_source_metadata(self->source, i, &key, &type, &value, &len, &e);
    if (s != HURRAY_OK) {
      Py_DECREF(out);
      return raise_status(s, &e);
    }
    PyObject *v;
    switch (type) {
      case HURRAY_METADATA_STRING:
        v = PyUnicode_DecodeUTF8(value, (Py_ssize_t)len, "surrogateescape");
        break;
      case HURRAY_METADATA_INT: v = PyLong_FromLongLong(*(const int64_t *)value); break;
      case HURRAY_METADATA_FLOAT: v = PyFloat_FromDouble(*(const double *)value); break;
      case HURRAY_METADATA_BOOL: v = PyBool_FromLong(*(const bool *)value); break;
      default: v = PyBytes_FromStringAndSize(value, (Py_ssize_t)len); break;
    }
    if (v == NULL || PyDict_SetItemString(out, key, v) < 0) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  return out;
}

static PyObject *source_close(PyObject *op, PyObject *unused) {
  (void)unused;
  SourceObject *self = (SourceObject *)op;
  if (source_idle(self) < 0) return NULL;
  hurray_source_close(self->source);
  self->source = NULL;
  Py_RETURN_NONE;
}

static PyGetSetDef source_getset[] = {
    {"format", source_format, NULL, "the file's format", NULL},
    {NULL},
};

static PyMethodDef source_methods[] = {
    {"names", source_names, METH_NOARGS, "tensor names, in file order"},
    {"info", source_info, METH_O, "(type name, shape, stored bytes) of tensor i"},
    {"check", source_check, METH_O, "raise if hurray cannot hold tensor i exactly"},
    {"get", source_get, METH_O, "tensor i as a hurray_buffer capsule"},
    {"metadata", source_metadata, METH_NOARGS, "file metadata in hurray form"},
    {"close", source_close, METH_NOARGS, "close; tensors already read stay valid"},
    {NULL},
};

static PyType_Slot source_slots[] = {
    {Py_tp_init, source_init},       {Py_tp_dealloc, source_dealloc},
    {Py_tp_methods, source_methods}, {Py_tp_getset, source_getset},
    {Py_tp_new, PyType_GenericNew},  {0, NULL},
};

static PyType_Spec source_spec = {"hurray._formats.Source", sizeof(SourceObject), 0,
                                  Py_TPFLAGS_DEFAULT, source_slots};

/* ------------------------------------------------------------------ write */

static HurrayStatus set_py_metadata(HurrayTarget *t, PyObject *key, PyObject *value,
                                    HurrayError *e, bool *python_error) {
  const char *k = PyUnicode_AsUTF8(key);
  if (k == NULL) {
    *python_error = true;
    return HURRAY_ERR_INVALID_ARGUMENT;
  }
  if (PyBool_Check(value)) {
    bool b = value == Py_True;
    return hurray_target_set_metadata(t, k, HURRAY_METADATA_BOOL, &b, 0, e);
  }
  if (PyLong_Check(value)) {
    int64_t i = PyLong_AsLongLong(value);
    if (i == -1 && PyErr_Occurred()) {
      *python_error = true;
      return HURRAY_ERR_INVALID_ARGUMENT;
    }
    return hurray_target_set_metadata(t, k, HURRAY_METADATA_INT, &i, 0, e);
  }
  if (PyFloat_Check(value)) {
    double f = PyFloat_AsDouble(value);
    return hurray_target_set_metadata(t, k, HURRAY_METADATA_FLOAT, &f, 0, e);
  }
  if (PyUnicode_Check(value)) {
    PyObject *b = PyUnicode_AsEncodedString(value, "utf-8", "surrogateescape");
    if (b == NULL) {
      *python_error = true;
      return HURRAY_ERR_INVALID_ARGUMENT;
    }
    HurrayStatus s = hurray_target_set_metadata(t, k, HURRAY_METADATA_STRING, PyBytes_AS_STRING(b),
                                                (size_t)PyBytes_GET_SIZE(b), e);
    Py_DECREF(b);
    return s;
  }
  if (PyBytes_Check(value)) {
    return hurray_target_set_metadata(t, k, HURRAY_METADATA_BYTES, PyBytes_AS_STRING(value),
                                      (size_t)PyBytes_GET_SIZE(value), e);
  }
  PyErr_Format(PyExc_TypeError, "metadata %s: a str, int, float, bool or bytes value, not %s", k,
               Py_TYPE(value)->tp_name);
  *python_error = true;
  return HURRAY_ERR_INVALID_ARGUMENT;
}

static PyObject *mod_write(PyObject *module, PyObject *args) {
  (void)module;
  PyObject *path_obj, *tensors, *metadata;
  const char *format_name;
  int statistics = 0;
  if (!PyArg_ParseTuple(args, "O&sOO|p:write", PyUnicode_FSConverter, &path_obj, &format_name,
                        &tensors, &metadata, &statistics)) {
    return NULL;
  }
  HurrayFormat format = format_arg(format_name);
  if (format == HURRAY_FORMAT_UNKNOWN || !PyDict_Check(metadata)) {
    Py_DECREF(path_obj);
    PyErr_SetString(PyExc_ValueError, "format 'safetensors', 'gguf' or 'hurray', metadata a dict");
    return NULL;
  }
  PyObject *seq = hy_sequence_copy(tensors, "tensors must be a sequence of (name, capsule)");
  if (seq == NULL) {
    Py_DECREF(path_obj);
    return NULL;
  }
  HurrayError e = {0};
  HurrayTarget *t = NULL;
  HurrayStatus s = hurray_target_open(PyBytes_AS_STRING(path_obj), format, &t, &e);
  bool python_error = false;
  if (s == HURRAY_OK && statistics) s = hurray_target_set_statistics(t, true, &e);
  Py_ssize_t pos = 0;
  PyObject *key, *value;
  while (s == HURRAY_OK && PyDict_Next(metadata, &pos, &key, &value)) {
    s = set_py_metadata(t, key, value, &e, &python_error);
  }
  for (Py_ssize_t i = 0; s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    const char *name;
    PyObject *capsule;
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    if (!PyTuple_Check(item)) { /* PyArg_ParseTuple's SystemError otherwise */
      PyErr_Format(PyExc_TypeError, "a tensor is a (name, capsule) tuple, not %.100s",
                   Py_TYPE(item)->tp_name);
      python_error = true;
      s = HURRAY_ERR_INVALID_ARGUMENT;
      break;
    }
    if (!PyArg_ParseTuple(item, "sO", &name, &capsule) || take_capsule(capsule, &d, &list) < 0) {
      python_error = true;
      s = HURRAY_ERR_INVALID_ARGUMENT;
      break;
    }
    /* A hurray target writes here: let other threads run. */
    Py_BEGIN_ALLOW_THREADS s = hurray_target_add_tensor(t, name, d, list, &e);
    Py_END_ALLOW_THREADS
  }
  size_t dropped = hurray_target_dropped_metadata(t);
  if (s == HURRAY_OK) {
    Py_BEGIN_ALLOW_THREADS s = hurray_target_finish(t, &e);
    Py_END_ALLOW_THREADS
  } else {
    hurray_target_abort(t);
  }
  Py_DECREF(seq);
  Py_DECREF(path_obj);
  if (python_error) return NULL;
  if (s != HURRAY_OK) return raise_status(s, &e);
  return PyLong_FromSize_t(dropped);
}

/* target_form(format, name, encoded descriptor) -> (type name, stored bytes):
 * what a safetensors or GGUF target stores the tensor as, decided by the
 * C writer's own rule (hurray__target_form); UnsupportedError says why
 * there is no exact form. The converter plans with it before writing. */
static PyObject *mod_target_form(PyObject *module, PyObject *args) {
  (void)module;
  const char *format_name, *name;
  Py_buffer encoded;
  if (!PyArg_ParseTuple(args, "ssy*:target_form", &format_name, &name, &encoded)) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_descriptor_decode(encoded.buf, (size_t)encoded.len, &d, &e);
  PyBuffer_Release(&encoded);
  const char *type_name = NULL;
  uint64_t nbytes = 0;
  if (s == HURRAY_OK) {
    s = hurray__target_form(format_arg(format_name), name, d, &type_name, &nbytes, &e);
    hurray_descriptor_destroy(d);
  }
  if (s != HURRAY_OK) return raise_status(s, &e);
  return Py_BuildValue("(sK)", type_name, (unsigned long long)nbytes);
}

/* check_bools(name, data) -> None: the writers' refusal of a bool element
 * stored as neither 0 nor 1 (hurray__check_bool_run), over the bytes of a
 * contiguous bool array, for the converter's targets that numpy and torch
 * write. */
static PyObject *mod_check_bools(PyObject *module, PyObject *args) {
  (void)module;
  const char *name;
  Py_buffer data;
  if (!PyArg_ParseTuple(args, "sy*:check_bools", &name, &data)) return NULL;
  HurrayError e = {0};
  HurrayStatus s;
  Py_BEGIN_ALLOW_THREADS s = hurray__check_bool_run(name, data.buf, (uint64_t)data.len, &e);
  Py_END_ALLOW_THREADS PyBuffer_Release(&data);
  if (s != HURRAY_OK) return raise_status(s, &e);
  Py_RETURN_NONE;
}

/* is_bookkeeping(key) -> bool: whether key is one of the converters' own
 * metadata keys (hurray_metadata_is_bookkeeping), never reported dropped. */
static PyObject *mod_is_bookkeeping(PyObject *module, PyObject *arg) {
  (void)module;
  const char *key = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
  if (key == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "is_bookkeeping() takes a str");
    if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return NULL;
    PyErr_Clear(); /* a lone surrogate is no key of ours */
    Py_RETURN_FALSE;
  }
  return PyBool_FromLong(hurray_metadata_is_bookkeeping(key));
}

static PyMethodDef module_methods[] = {
    {"check_bools", mod_check_bools, METH_VARARGS,
     "check_bools(name, data) -> None; InvalidArgumentError for a bool byte other than 0 or 1"},
    {"is_bookkeeping", mod_is_bookkeeping, METH_O,
     "is_bookkeeping(key) -> whether key is one of the converters' own metadata keys"},
    {"target_form", mod_target_form, METH_VARARGS,
     "target_form(format, name, encoded descriptor) -> (type name, stored bytes)"},
    {"write", mod_write, METH_VARARGS,
     "write(path, format, [(name, capsule)], metadata, statistics=False) -> dropped keys"},
    {NULL},
};

static int module_exec(PyObject *module) {
  if (hy_refuse_subinterpreter("hurray._formats") < 0) return -1;
  PyObject *type = PyType_FromModuleAndSpec(module, &source_spec, NULL);
  if (type == NULL) return -1;
  int rc = PyModule_AddObjectRef(module, "Source", type);
  Py_DECREF(type);
  if (rc < 0 ||
      PyModule_AddStringConstant(module, "META_GGUF_TYPES", HURRAY_META_GGUF_TYPES) < 0 ||
      PyModule_AddStringConstant(module, "META_GGUF_TENSORS", HURRAY_META_GGUF_TENSORS) < 0 ||
      PyModule_AddStringConstant(module, "META_SOURCE_DTYPES", HURRAY_META_SOURCE_DTYPES) < 0 ||
      PyModule_AddStringConstant(module, "META_SAFETENSORS_INDEX", HURRAY_META_SAFETENSORS_INDEX) <
          0) {
    return -1;
  }
  return 0;
}

static PyModuleDef_Slot module_slots[] = {
    HY_SLOT_MAIN_INTERPRETER_ONLY{Py_mod_exec, module_exec},
    {0, NULL},
};

static struct PyModuleDef formats_module = {
    PyModuleDef_HEAD_INIT,
    "hurray._formats",
    "Native safetensors and GGUF readers and writers (include/hurray/convert.h).",
    0,
    module_methods,
    module_slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__formats(void);
PyMODINIT_FUNC PyInit__formats(void) { return PyModuleDef_Init(&formats_module); }
