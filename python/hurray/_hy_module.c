/*
 * _hy_module.c: module set-up, the exception classes and the status -> exception map,
 * and the helpers every other file shares.
 */
#include "_hurray.h"


ModuleState *hy_state_of_type(PyTypeObject *type) {
  PyObject *module = PyType_GetModuleByDef(type, &hy_module_def);
  return module == NULL ? NULL : PyModule_GetState(module);
}

/* ------------------------------------------------------------- errors */

/* A failure the operating system reported (error->os_errno set) is raised
 * as an OSError subclass carrying errno and `filename` (may be NULL), also
 * a HurrayIOError: see hy_raise_os. */
PyObject *hy_raise_status_file(ModuleState *st, HurrayStatus status, const HurrayError *error,
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

PyObject *hy_raise_status(ModuleState *st, HurrayStatus status, const HurrayError *error) {
  return hy_raise_status_file(st, status, error, NULL);
}

/* Release callbacks may run on any thread, or after the interpreter has
 * gone: they take the GIL themselves and do nothing once it is finalizing. */
#if PY_VERSION_HEX >= 0x030D0000
#define interpreter_finalizing() Py_IsFinalizing()
#else
#define interpreter_finalizing() _Py_IsFinalizing()
#endif

void hy_release_pyobject(void *data, void *ctx) {
  (void)data;
  if (!Py_IsInitialized() || interpreter_finalizing()) return;
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF((PyObject *)ctx);
  PyGILState_Release(gil);
}

void hy_release_pybuffer(void *data, void *ctx) {
  (void)data;
  Py_buffer *view = ctx;
  if (Py_IsInitialized() && !interpreter_finalizing()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyBuffer_Release(view);
    PyGILState_Release(gil);
  }
  PyMem_RawFree(view);
}
static PyMethodDef module_methods[] = {
    {"descriptor_build", mod_descriptor_build, METH_O, "encode a descriptor from its dict form"},
    {"descriptor_json", mod_descriptor_json, METH_O, "decode an encoding to its JSON form"},
    {"descriptor_validate", mod_descriptor_validate, METH_O, "validate an encoded descriptor"},
    {"descriptor_required_bytes", mod_descriptor_required_bytes, METH_O,
     "bytes each buffer must hold"},
    {"save", mod_save, METH_VARARGS, "save(path | fd | stream, [(name, Tensor)], metadata)"},
    {"_quantize", mod_quantize, METH_VARARGS, "quantize a float buffer (C kernels)"},
    {"_set_tensor_class", mod_set_tensor_class, METH_O, "class File and capsules produce"},
    {"_set_descriptor_class", mod_set_descriptor_class, METH_O, "the Python Descriptor class"},
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
  if (hy_records_add(module, st) < 0 ||
      add_type(module, &hy_descriptor_spec, NULL, &st->descriptor_type) < 0 ||
      add_type(module, &hy_tensor_spec, NULL, &st->tensor_type) < 0 ||
      add_type(module, &hy_view_spec, NULL, &st->view_type) < 0 ||
      add_type(module, &hy_file_spec, NULL, &st->file_type) < 0) {
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
  for (int i = 0; i < HY_RECORD_COUNT; i++) Py_VISIT(st->records[i]);
  Py_VISIT(st->descriptor_type);
  Py_VISIT(st->descriptor_class);
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
  for (int i = 0; i < HY_RECORD_COUNT; i++) Py_CLEAR(st->records[i]);
  Py_CLEAR(st->descriptor_type);
  Py_CLEAR(st->descriptor_class);
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

struct PyModuleDef hy_module_def = {
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

PyMODINIT_FUNC PyInit__hurray(void) { return PyModuleDef_Init(&hy_module_def); }
