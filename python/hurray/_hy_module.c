/*
 * _hy_module.c: module set-up, the exception classes and the status -> exception map,
 * and the helpers every other file shares.
 */
#include "_hurray.h"

#include "../../src/quant/elements.h"
#include "../../src/quant/fresh_pages.h"

ModuleState *hy_state_of_type(PyTypeObject *type) {
  PyObject *module = PyType_GetModuleByDef(type, &hy_module_def);
  return module == NULL ? NULL : PyModule_GetState(module);
}

/* ------------------------------------------------------------- errors */

/* The class the map names for `status`; the base for a status it does not know. */
static PyObject *status_class(ModuleState *st, HurrayStatus status) {
  return (status > 0 && status < STATUS_SLOTS && st->errors[status] != NULL) ? st->errors[status]
                                                                             : st->error_base;
}

/* The one error mapping (the table is hy_error_classes, _shared.c). A
 * failure the operating system reported (error->os_errno set) is raised as
 * an OSError subclass carrying errno and `filename` (may be NULL), also a
 * HurrayIOError: see hy_raise_os. */
PyObject *hy_raise_status_file(ModuleState *st, HurrayStatus status, const HurrayError *error,
                               PyObject *filename) {
  /* A cancel hook (hy_cancel_requested) ran a signal handler that raised,
   * KeyboardInterrupt most often: that exception is what the caller sees. */
  if (status == HURRAY_ERR_CANCELLED && PyErr_Occurred()) return NULL;
  return hy_raise_class(status_class(st, status), st->errors[HURRAY_ERR_IO], status, error,
                        filename);
}

/* _os_error_class(errno) -> the HurrayIOError subclass raised for it (also
 * the builtin OSError subclass errno maps to), so that pickle finds a class
 * made at run time by name (hurray.__getattr__). */
static PyObject *mod_os_error_class(PyObject *module, PyObject *arg) {
  long err = PyLong_AsLong(arg);
  if (err == -1 && PyErr_Occurred()) return NULL;
  if (err <= 0 || err > INT_MAX) return PyErr_Format(PyExc_ValueError, "no errno %ld", err);
  PyObject *io_class = PyObject_GetAttrString(module, "HurrayIOError");
  if (io_class == NULL) return NULL;
  PyObject *cls = hy_os_class(io_class, (int)err);
  Py_DECREF(io_class);
  return cls;
}

/* mod_error's exception, from a message in UTF-8. */
static PyObject *error_of(ModuleState *st, PyObject *status, const char *message, int os_errno,
                          PyObject *filename) {
  long code = -1;
  if (PyUnicode_Check(status)) {
    const char *name = PyUnicode_AsUTF8(status);
    if (name == NULL) return NULL;
    for (int c = 1; c < STATUS_SLOTS && code < 0; c++) {
      if (strcmp(hurray_status_name((HurrayStatus)c), name) == 0) code = c;
    }
  } else {
    code = PyLong_AsLong(status);
    if (code == -1 && PyErr_Occurred()) return NULL;
  }
  if (code <= 0 || code >= STATUS_SLOTS || st->errors[code] == NULL) {
    return PyErr_Format(PyExc_ValueError, "unknown status %R", status);
  }
  if (os_errno <= 0) {
    return hy_status_exception(status_class(st, (HurrayStatus)code), (HurrayStatus)code, message);
  }
  HurrayError e = {.code = (HurrayStatus)code, .os_errno = os_errno};
  snprintf(e.message, sizeof e.message, "%s", message);
  hy_raise_status_file(st, (HurrayStatus)code, &e, filename == Py_None ? NULL : filename);
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  return value;
}

/* _error(status, message[, errno, filename]) -> the exception C would
 * raise for `status` (its code or its name), for the few errors Python code
 * detects itself; with an errno (a system call Python made failed), the
 * HurrayIOError subclass of that errno, carrying it and `filename`. */
static PyObject *mod_error(PyObject *module, PyObject *args) {
  ModuleState *st = PyModule_GetState(module);
  PyObject *status, *text, *filename = Py_None;
  int os_errno = 0;
  if (!PyArg_ParseTuple(args, "OU|iO:_error", &status, &text, &os_errno, &filename)) {
    return NULL;
  }
  /* A message may name a path that is not UTF-8 (a surrogate escape, as
   * os.listdir gives it): strict UTF-8 would raise UnicodeEncodeError in
   * place of the error being reported. */
  PyObject *encoded = PyUnicode_AsEncodedString(text, "utf-8", "backslashreplace");
  if (encoded == NULL) return NULL;
  PyObject *exc = error_of(st, status, PyBytes_AS_STRING(encoded), os_errno, filename);
  Py_DECREF(encoded);
  return exc;
}

PyObject *hy_raise_status(ModuleState *st, HurrayStatus status, const HurrayError *error) {
  return hy_raise_status_file(st, status, error, NULL);
}

/* Release callbacks may run on any thread, or after the interpreter has
 * gone: they take the GIL themselves and do nothing once it is finalizing. */
#if PY_VERSION_HEX >= 0x030D0000
#  define interpreter_finalizing() Py_IsFinalizing()
#else
#  define interpreter_finalizing() _Py_IsFinalizing()
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
/* _simd_level(): the kernel level this process chose (hurray_simd_level),
 * for the tests that force each one through HURRAY_SIMD: the module
 * exports no C symbol they could call instead. */
static PyObject *mod_simd_level(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyUnicode_FromString(hurray_simd_level());
}

/* _threads(n): n as the kernels take a `threads` argument, or the error
 * they would raise, for the Python paths that never reach a kernel (an
 * unquantized tensor's dequantize) but must refuse what a kernel would. */
static PyObject *mod_threads(PyObject *self, PyObject *arg) {
  (void)self;
  unsigned int threads;
  if (!hy_conv_threads(arg, &threads)) return NULL;
  return PyLong_FromUnsignedLong(threads);
}

/* _escape_text(utf8_bytes, flags): hurray_escape_text for the Python side of the
 * CLI (`hurray ls URL`), so names from an untrusted remote file are shown
 * exactly as the C command shows them, with no second copy of the rules. */
static PyObject *mod_escape_text(PyObject *self, PyObject *args) {
  (void)self;
  const char *text;
  Py_ssize_t len;
  unsigned int flags;
  if (!PyArg_ParseTuple(args, "y#I", &text, &len, &flags)) return NULL;
  size_t need = hurray_escape_text(text, (size_t)len, flags, NULL, 0);
  if (need >= PY_SSIZE_T_MAX) return PyErr_NoMemory();
  char *out = PyMem_Malloc(need + 1);
  if (out == NULL) return PyErr_NoMemory();
  hurray_escape_text(text, (size_t)len, flags, out, need + 1);
  PyObject *result = PyUnicode_DecodeUTF8(out, (Py_ssize_t)need, "surrogateescape");
  PyMem_Free(out);
  return result;
}

static PyMethodDef module_methods[] = {
    {"_after_fork_in_child", hy_after_fork_in_child, METH_NOARGS,
     "for os.register_at_fork: Files re-make locks a vanished thread held"},
    {"_escape_text", mod_escape_text, METH_VARARGS, "_escape_text(text, flags): shown safely"},
    {"_simd_level", mod_simd_level, METH_NOARGS, "_simd_level(): the chosen kernel level"},
    {"_threads", mod_threads, METH_O, "_threads(n): n checked as a kernel's threads"},
    {"descriptor_validate", mod_descriptor_validate, METH_O, "validate an encoded descriptor"},
    {"descriptor_required_bytes", mod_descriptor_required_bytes, METH_O,
     "bytes each buffer must hold"},
    {"save", mod_save, METH_VARARGS, "save(path | fd | stream, [(name, Tensor)], metadata)"},
    {"_quantize", mod_quantize, METH_VARARGS, "quantize a float buffer (C kernels)"},
    {"_set_tensor_class", mod_set_tensor_class, METH_O, "class File and capsules produce"},
    {"_unpack", mod_unpack, METH_VARARGS, "_unpack(dtype, packed, count): sub-byte codes"},
    {"_pack", mod_pack, METH_VARARGS, "_pack(dtype, codes): sub-byte codes packed"},
    {"_member", mod_member, METH_VARARGS, "_member(tensor, name): member descriptor, buffers"},
    {"_check_output_bytes", mod_check_output_bytes, METH_VARARGS,
     "_check_output_bytes(stored, output): LimitError past the default output limits"},
    {"_check_not_mapped_from", mod_check_not_mapped_from, METH_VARARGS,
     "_check_not_mapped_from(fd, spans): InvalidArgumentError for a span of spans() "
     "[(name, address, length)] in a mapping of fd's file"},
    {"_error", mod_error, METH_VARARGS,
     "_error(status, message[, errno, filename]): the exception C raises"},
    {"_os_error_class", mod_os_error_class, METH_O,
     "_os_error_class(errno): the HurrayIOError subclass raised for it"},
    {"_set_descriptor_class", mod_set_descriptor_class, METH_O, "the Python Descriptor class"},
    {"_prefault", hurray_py_prefault, METH_VARARGS, "make a writable buffer's pages present"},
    {NULL},
};

static int add_type(PyObject *module, PyType_Spec *spec, PyObject *base, PyTypeObject **out) {
  PyObject *type = PyType_FromModuleAndSpec(module, spec, base);
  if (type == NULL) return -1;
  *out = (PyTypeObject *)type;
  return PyModule_AddObjectRef(module, strrchr(spec->name, '.') + 1, type);
}

/* ------------------------------------------- tables Python reads, not keeps */

const char *hy_role_name(int v) { return hurray__role_name((HurrayBufferRole)v); }
const char *hy_super_op_name(int v) {
  return v == HURRAY_SUPER_MULTIPLY ? "multiply" : v == HURRAY_SUPER_DIVIDE ? "divide" : "?";
}
const char *hy_sync_name(int v) { return hurray__sync_mode_name((HurraySyncMode)v); }
const char *hy_memory_name(int v) { return hurray__memory_class_name((HurrayMemoryClass)v); }
const char *hy_mx_name(int v) { return hurray__mx_element_name((HurrayMxElement)v); }
static const char *format_name(int v) { return hurray__sparse_format_name((HurraySparseFormat)v); }
static const char *quant_name(int v) { return hurray__quant_kind_name((HurrayQuantKind)v); }
static const char *scheme_name(int v) { return hurray_quant_scheme_name((HurrayQuantScheme)v); }
static const char *dtype_name(int v) { return hurray_dtype_name((HurrayDType)v); }
static const char *layout_name(int v) {
  static const char *const names[] = {[HURRAY_LAYOUT_DENSE] = "dense",
                                      [HURRAY_LAYOUT_SPARSE] = "sparse",
                                      [HURRAY_LAYOUT_PAGED] = "paged",
                                      [HURRAY_LAYOUT_COMPOSITE] = "composite"};
  return v > 0 && v <= HURRAY_LAYOUT_COMPOSITE ? names[v] : NULL;
}

static const struct {
  const char *key;
  HyEnumName names;
} enum_tables[] = {
    {"dtype", dtype_name},         {"role", hy_role_name},
    {"sync_mode", hy_sync_name},   {"memory_class", hy_memory_name},
    {"mx_element", hy_mx_name},    {"sparse_format", format_name},
    {"layout", layout_name},       {"quantization", quant_name},
    {"quant_scheme", scheme_name},
};

/* {name: value} of one enum: every value whose name is known. */
static PyObject *enum_dict(HyEnumName names) {
  PyObject *d = PyDict_New();
  for (int v = 0; d != NULL && v < 256; v++) {
    const char *n = names(v);
    if (n == NULL || strcmp(n, "?") == 0 || strcmp(n, "none") == 0) continue;
    PyObject *value = PyLong_FromLong(v);
    if (value == NULL || PyDict_SetItemString(d, n, value) < 0) Py_CLEAR(d);
    Py_XDECREF(value);
  }
  return d;
}

/* NF4_CODE: the NF4 code book the kernels decode with, index 0..15. */
static int add_nf4_code(PyObject *module) {
  PyObject *code = PyTuple_New(16);
  for (Py_ssize_t i = 0; code != NULL && i < 16; i++) {
    PyObject *v = PyFloat_FromDouble(HURRAY__NF4_VALUES[i]);
    if (v == NULL) Py_CLEAR(code);
    else PyTuple_SET_ITEM(code, i, v);
  }
  int rc = code != NULL ? PyModule_AddObjectRef(module, "NF4_CODE", code) : -1;
  Py_XDECREF(code);
  return rc;
}

/* BLOCK_FORMATS {name: (elements, bytes)} of every block-coded format. */
static int add_block_formats(PyObject *module) {
  PyObject *formats = PyDict_New();
  int rc = formats != NULL ? 0 : -1;
  for (uint32_t f = 1; rc == 0 && f < 256; f++) {
    uint32_t elements, bytes;
    const char *name;
    if (!hurray_block_format_info(f, &elements, &bytes, &name)) continue;
    PyObject *v = Py_BuildValue("(kk)", (unsigned long)elements, (unsigned long)bytes);
    rc = v != NULL ? PyDict_SetItemString(formats, name, v) : -1;
    Py_XDECREF(v);
  }
  if (rc == 0) rc = PyModule_AddObjectRef(module, "BLOCK_FORMATS", formats);
  Py_XDECREF(formats);
  return rc;
}

/* ENUMS {enum: {name: value}}, DTYPE_BITS {dtype: bits per element, sub-byte
 * ones packed LSB-first}, STATUS {name: code}, STATUS_EXCEPTIONS {code: class}. */
static int add_tables(PyObject *module, ModuleState *st) {
  PyObject *enums = PyDict_New(), *bits = PyDict_New(), *status = PyDict_New(),
           *classes = PyDict_New();
  int rc = enums != NULL && bits != NULL && status != NULL && classes != NULL ? 0 : -1;
  for (size_t i = 0; rc == 0 && i < sizeof enum_tables / sizeof enum_tables[0]; i++) {
    PyObject *d = enum_dict(enum_tables[i].names);
    rc = d != NULL ? PyDict_SetItemString(enums, enum_tables[i].key, d) : -1;
    Py_XDECREF(d);
  }
  for (int v = 1; rc == 0 && v < HURRAY_DTYPE_COUNT; v++) {
    PyObject *b = PyLong_FromUnsignedLong(hurray_dtype_bits((HurrayDType)v));
    rc = b != NULL ? PyDict_SetItemString(bits, hurray_dtype_name((HurrayDType)v), b) : -1;
    Py_XDECREF(b);
  }
  for (int code = 1; rc == 0 && code < STATUS_SLOTS; code++) {
    if (st->errors[code] == NULL) continue;
    PyObject *c = PyLong_FromLong(code);
    rc = c != NULL &&
                 PyDict_SetItemString(status, hurray_status_name((HurrayStatus)code), c) == 0 &&
                 PyDict_SetItem(classes, c, st->errors[code]) == 0
             ? 0
             : -1;
    Py_XDECREF(c);
  }
  if (rc == 0) rc = add_block_formats(module);
  if (rc == 0) rc = add_nf4_code(module);
  if (rc == 0) rc = PyModule_AddObjectRef(module, "ENUMS", enums);
  if (rc == 0) rc = PyModule_AddObjectRef(module, "DTYPE_BITS", bits);
  if (rc == 0) rc = PyModule_AddObjectRef(module, "STATUS", status);
  if (rc == 0) rc = PyModule_AddObjectRef(module, "STATUS_EXCEPTIONS", classes);
  Py_XDECREF(enums);
  Py_XDECREF(bits);
  Py_XDECREF(status);
  Py_XDECREF(classes);
  return rc;
}

static int module_exec(PyObject *module) {
  if (hy_refuse_subinterpreter("hurray._hurray") < 0) return -1;
  ModuleState *st = PyModule_GetState(module);
  if (hy_records_add(module, st) < 0 ||
      add_type(module, &hy_descriptor_spec, NULL, &st->descriptor_type) < 0 ||
      add_type(module, &hy_tensor_spec, NULL, &st->tensor_type) < 0 ||
      add_type(module, &hy_view_spec, NULL, &st->view_type) < 0 ||
      add_type(module, &hy_file_spec, NULL, &st->file_type) < 0 ||
      PyModule_AddIntConstant(module, "FRESH_MAPPING_MIN", (long)HURRAY_FRESH_MAPPING_MIN) < 0 ||
      PyModule_AddStringConstant(module, "CHUNK_CHECKSUMS_KEY", HURRAY_CHUNK_CHECKSUMS_KEY) < 0 ||
      PyModule_AddIntConstant(module, "DEFAULT_MAX_EXPANSION", HURRAY_DEFAULT_MAX_EXPANSION) < 0 ||
      PyModule_AddIntConstant(module, "DEFAULT_EXPANSION_FLOOR_BYTES",
                              (long)HURRAY_DEFAULT_EXPANSION_FLOOR_BYTES) < 0) {
    return -1;
  }
  st->error_base = PyErr_NewExceptionWithDoc(
      "hurray.HurrayError", "Base of every hurray error; `status` holds the C status code.",
      PyExc_Exception, NULL);
  if (st->error_base == NULL || PyModule_AddObjectRef(module, "HurrayError", st->error_base) < 0) {
    return -1;
  }
  for (size_t i = 0; i < hy_error_class_count; i++) {
    const HyErrorClass *c = &hy_error_classes[i];
    PyObject *extra = NULL;
    if (c->extra_base != NULL) {
      PyObject *key = PyUnicode_FromString(c->extra_base);
      extra = key != NULL ? PyDict_GetItemWithError(PyEval_GetBuiltins(), key)
                          : NULL; /* borrowed */
      Py_XDECREF(key);
      if (extra == NULL) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_SystemError, "no builtin %s", c->extra_base);
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
    for (size_t k = 0; k < sizeof c->codes / sizeof c->codes[0] && c->codes[k] != HURRAY_OK; k++) {
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
  if (add_tables(module, st) < 0 ||
      PyModule_AddIntConstant(module, "C_ABI_VERSION", HURRAY_C_ABI_VERSION) < 0 ||
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
    HY_SLOT_MAIN_INTERPRETER_ONLY{Py_mod_exec, module_exec},
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
