/*
 * _hy_descriptor.c: the _Descriptor type, whose fields live here: built
 * through _hy_build.c, decoded through _hy_read.c, with the encoding and the
 * HurrayDescriptor kept. No JSON text passes between C and Python: to_json()
 * is an output format, rendered from the C descriptor.
 */
#include "_hurray.h"

PyObject *hy_encode_descriptor(ModuleState *st, const HurrayDescriptor *d) {
  HurrayError e = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  HurrayStatus s = hurray_descriptor_encode(d, &bytes, &len, &e);
  if (s != HURRAY_OK) return hy_raise_status(st, s, &e);
  PyObject *out = PyBytes_FromStringAndSize((const char *)bytes, (Py_ssize_t)len);
  hurray_free(bytes);
  return out;
}

/* Decodes bytes-like `obj` into a new descriptor (NULL with an exception). */
HurrayDescriptor *hy_decode_descriptor(ModuleState *st, PyObject *obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_descriptor_decode(view.buf, (size_t)view.len, &d, &e);
  PyBuffer_Release(&view);
  if (s != HURRAY_OK) {
    hy_raise_status(st, s, &e);
    return NULL;
  }
  return d;
}

PyObject *hy_descriptor_to_json(ModuleState *st, const HurrayDescriptor *d) {
  HurrayError e = {0};
  char *json = NULL;
  HurrayStatus s = hurray_descriptor_to_json(d, &json, &e);
  if (s != HURRAY_OK) return hy_raise_status(st, s, &e);
  PyObject *out = PyUnicode_FromString(json);
  hurray_free(json);
  return out;
}

PyObject *mod_descriptor_validate(PyObject *module, PyObject *encoded) {
  ModuleState *st = PyModule_GetState(module);
  HurrayDescriptor *d = hy_decode_descriptor(st, encoded);
  if (d == NULL) return NULL;
  HurrayError e = {0};
  HurrayStatus s = hurray_descriptor_validate(d, &e);
  hurray_descriptor_destroy(d);
  if (s != HURRAY_OK) return hy_raise_status(st, s, &e);
  Py_RETURN_NONE;
}

static PyObject *required_bytes(ModuleState *st, const HurrayDescriptor *d) {
  HurrayError e = {0};
  PyObject *out = PyList_New(0);
  for (uint32_t i = 0; out != NULL && i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t need_bytes = 0;
    HurrayStatus s = hurray_descriptor_buffer_required_bytes(d, i, &need_bytes, &e);
    if (s != HURRAY_OK) {
      Py_CLEAR(out);
      hy_raise_status(st, s, &e);
      break;
    }
    PyObject *v = PyLong_FromUnsignedLongLong(need_bytes);
    if (v == NULL || PyList_Append(out, v) < 0) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  return out;
}

PyObject *mod_descriptor_required_bytes(PyObject *module, PyObject *encoded) {
  ModuleState *st = PyModule_GetState(module);
  HurrayDescriptor *d = hy_decode_descriptor(st, encoded);
  if (d == NULL) return NULL;
  PyObject *out = required_bytes(st, d);
  hurray_descriptor_destroy(d);
  return out;
}

PyObject *hy_int_tuple(PyObject *seq) {
  PyObject *fast = hy_sequence_copy(seq, "expected a sequence of integers");
  if (fast == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject *t = PyTuple_New(n);
  for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
    /* As hy_field_u64: True as a dimension is a mistake, not a 1. */
    PyObject *x = hy_refuse_bool(item, "a shape or stride entry") < 0 ? NULL
                                                                      : PyNumber_Index(item);
    if (x == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, x);
  }
  Py_DECREF(fast);
  return t;
}

PyObject *mod_set_descriptor_class(PyObject *module, PyObject *cls) {
  ModuleState *st = PyModule_GetState(module);
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, st->descriptor_type)) {
    PyErr_SetString(PyExc_TypeError, "expected a subclass of _Descriptor");
    return NULL;
  }
  Py_XSETREF(st->descriptor_class, Py_NewRef(cls));
  Py_RETURN_NONE;
}

/* ------------------------------------------------------- the _Descriptor type */

static HurrayDescriptor *descriptor_c(ModuleState *st, HyDescriptorObject *self) {
  if (self->encoded == NULL) {
    PyErr_SetString(PyExc_ValueError, "Descriptor is not initialised");
    return NULL;
  }
  if (self->c == NULL) self->c = hy_decode_descriptor(st, self->encoded);
  return self->c;
}

static int descriptor_init_once(HyDescriptorObject *self, PyObject **in);

static int descriptor_init(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"dtype",      "shape",        "strides",   "byte_offset",
                           "layout",     "quantization", "buffers",   "device",
                           "statistics", "shard",        "extension", NULL};
  HyDescriptorObject *self = (HyDescriptorObject *)op;
  PyObject *in[HY_D_COUNT] = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$OOOOOOOOO:Descriptor", kwlist, &in[0],
                                   &in[1], &in[2], &in[3], &in[4], &in[5], &in[6], &in[7], &in[8],
                                   &in[9], &in[10])) {
    return -1;
  }
  if (self->encoded != NULL || self->initialising) {
    PyErr_SetString(PyExc_RuntimeError, self->initialising
                                            ? "Descriptor is being initialised"
                                            : "Descriptor is already initialised; use replace()");
    return -1;
  }
  /* The builder reads the parts from self->f as borrowed references while
   * it runs Python code (a field's __index__): a nested __init__ would
   * replace, and free, what it is reading. */
  self->initialising = true;
  /* Strong references: PyArg_ParseTupleAndKeywords lends them from the
   * keyword dict, which the Python code the builder runs may empty. */
  for (int i = 0; i < HY_D_COUNT; i++) Py_XINCREF(in[i]);
  int rc = descriptor_init_once(self, in);
  for (int i = 0; i < HY_D_COUNT; i++) Py_XDECREF(in[i]);
  self->initialising = false;
  return rc;
}

static int descriptor_init_once(HyDescriptorObject *self, PyObject **in) {
  PyObject *op = (PyObject *)self;
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  if (st == NULL) return -1;
  PyObject *f[HY_D_COUNT] = {0};
  f[HY_D_DTYPE] = PyObject_Str(in[HY_D_DTYPE]);
  f[HY_D_SHAPE] = hy_int_tuple(in[HY_D_SHAPE]);
  f[HY_D_STRIDES] = in[HY_D_STRIDES] == NULL || in[HY_D_STRIDES] == Py_None
                        ? Py_NewRef(Py_None)
                        : hy_int_tuple(in[HY_D_STRIDES]);
  f[HY_D_BYTE_OFFSET] = in[HY_D_BYTE_OFFSET] == NULL ? PyLong_FromLong(0)
                                                     : PyNumber_Index(in[HY_D_BYTE_OFFSET]);
  PyObject *none[HY_RECORD_MAX_FIELDS] = {0};
  f[HY_D_LAYOUT] = in[HY_D_LAYOUT] != NULL ? Py_NewRef(in[HY_D_LAYOUT])
                                           : hy_record_new(st, HY_DENSE, none);
  f[HY_D_BUFFERS] = in[HY_D_BUFFERS] != NULL ? PySequence_Tuple(in[HY_D_BUFFERS]) : PyTuple_New(0);
  f[HY_D_DEVICE] = in[HY_D_DEVICE] != NULL ? Py_NewRef(in[HY_D_DEVICE])
                                           : hy_record_new(st, HY_DEVICE, none);
  for (int i = HY_D_QUANTIZATION; i < HY_D_COUNT; i++) {
    if (i != HY_D_BUFFERS && i != HY_D_DEVICE) f[i] = Py_NewRef(in[i] ? in[i] : Py_None);
  }
  bool ok = true;
  for (int i = 0; i < HY_D_COUNT; i++) ok = ok && f[i] != NULL;
  if (!ok) {
    for (int i = 0; i < HY_D_COUNT; i++) Py_XDECREF(f[i]);
    return -1;
  }
  for (int i = 0; i < HY_D_COUNT; i++) Py_XSETREF(self->f[i], f[i]);
  HurrayDescriptor *d = hy_build_descriptor(st, op, true);
  if (d == NULL) return -1;
  PyObject *encoded = hy_encode_descriptor(st, d);
  if (encoded == NULL) {
    hurray_descriptor_destroy(d);
    return -1;
  }
  self->encoded = encoded;
  self->c = d;
  return 0;
}

static int descriptor_traverse(PyObject *op, visitproc visit, void *arg) {
  HyDescriptorObject *self = (HyDescriptorObject *)op;
  Py_VISIT(Py_TYPE(op));
  for (int i = 0; i < HY_D_COUNT; i++) Py_VISIT(self->f[i]);
  return 0;
}

static int descriptor_clear(PyObject *op) {
  HyDescriptorObject *self = (HyDescriptorObject *)op;
  for (int i = 0; i < HY_D_COUNT; i++) Py_CLEAR(self->f[i]);
  return 0;
}

static void descriptor_dealloc(PyObject *op) {
  HyDescriptorObject *self = (HyDescriptorObject *)op;
  PyTypeObject *type = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  descriptor_clear(op);
  Py_CLEAR(self->encoded);
  hurray_descriptor_destroy(self->c);
  self->c = NULL;
  type->tp_free(op);
  Py_DECREF(type);
}

/* decode(data): what the C decoder accepts decodes here too; a string that
 * is not UTF-8 is reported by validation, or as MALFORMED. */
static PyObject *descriptor_decode(PyObject *cls, PyObject *data) {
  ModuleState *st = hy_state_of_type((PyTypeObject *)cls);
  if (st == NULL) return NULL;
  PyObject *bytes = PyBytes_FromObject(data);
  if (bytes == NULL) return NULL;
  HurrayDescriptor *d = hy_decode_descriptor(st, bytes);
  if (d == NULL) {
    Py_DECREF(bytes);
    return NULL;
  }
  /* Encoded again rather than kept: the decoder takes non-canonical forms
   * (unknown even records, records holding defaults), and ==, hash and
   * encode() compare and give the canonical bytes, as C does. */
  PyObject *out = hy_descriptor_from_c(st, (PyTypeObject *)cls, d, NULL, d);
  if (out == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
    PyErr_Clear();
    HurrayError e = {0};
    /* `bytes`, not `data`: a list or an iterator of ints was used up, or is
     * not bytes-like (TypeError in place of this ValidationError). */
    HurrayDescriptor *again = hy_decode_descriptor(st, bytes);
    HurrayStatus s = again != NULL ? hurray_descriptor_validate(again, &e) : HURRAY_OK;
    hurray_descriptor_destroy(again);
    Py_DECREF(bytes);
    if (PyErr_Occurred()) return NULL;
    if (s == HURRAY_OK) {
      s = HURRAY_ERR_MALFORMED;
      snprintf(e.message, sizeof e.message, "a string of the descriptor is not valid UTF-8");
    }
    return hy_raise_status(st, s, &e);
  }
  Py_DECREF(bytes);
  return out;
}

PyObject *hy_descriptor_object(ModuleState *st, PyObject *encoded) {
  if (st->descriptor_class == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "hurray.Descriptor is not registered");
    return NULL;
  }
  return descriptor_decode(st->descriptor_class, encoded);
}

static PyObject *descriptor_encode(PyObject *op, PyObject *unused) {
  (void)unused;
  HyDescriptorObject *self = (HyDescriptorObject *)op;
  if (self->encoded == NULL) {
    PyErr_SetString(PyExc_ValueError, "Descriptor is not initialised");
    return NULL;
  }
  return Py_NewRef(self->encoded);
}

static PyObject *descriptor_to_json_method(PyObject *op, PyObject *unused) {
  (void)unused;
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  HurrayDescriptor *d = st != NULL ? descriptor_c(st, (HyDescriptorObject *)op) : NULL;
  return d != NULL ? hy_descriptor_to_json(st, d) : NULL;
}

static PyObject *descriptor_validate_method(PyObject *op, PyObject *unused) {
  (void)unused;
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  HurrayDescriptor *d = st != NULL ? descriptor_c(st, (HyDescriptorObject *)op) : NULL;
  if (d == NULL) return NULL;
  HurrayError e = {0};
  HurrayStatus s = hurray_descriptor_validate(d, &e);
  if (s != HURRAY_OK) return hy_raise_status(st, s, &e);
  Py_RETURN_NONE;
}

static PyObject *descriptor_required_bytes(PyObject *op, PyObject *unused) {
  (void)unused;
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  HurrayDescriptor *d = st != NULL ? descriptor_c(st, (HyDescriptorObject *)op) : NULL;
  return d != NULL ? required_bytes(st, d) : NULL;
}

/* A field, or the encoding for closure -1. A Descriptor whose __init__
 * never ran (a subclass that skips it, or __new__ alone) has none: a
 * ValueError, as for a Tensor, where a member lookup said AttributeError
 * and the C methods RuntimeError. */
static PyObject *descriptor_field(PyObject *op, void *closure) {
  HyDescriptorObject *self = (HyDescriptorObject *)op;
  intptr_t which = (intptr_t)closure;
  PyObject *value = which < 0 ? self->encoded : self->f[which];
  if (value == NULL) {
    PyErr_SetString(PyExc_ValueError, "Descriptor is not initialised");
    return NULL;
  }
  return Py_NewRef(value);
}

#define HY_FIELD(name, index) {name, descriptor_field, NULL, NULL, (void *)(intptr_t)(index)}
static PyGetSetDef descriptor_fields[] = {
    HY_FIELD("dtype", HY_D_DTYPE),
    HY_FIELD("shape", HY_D_SHAPE),
    HY_FIELD("strides", HY_D_STRIDES),
    HY_FIELD("byte_offset", HY_D_BYTE_OFFSET),
    HY_FIELD("layout", HY_D_LAYOUT),
    HY_FIELD("quantization", HY_D_QUANTIZATION),
    HY_FIELD("buffers", HY_D_BUFFERS),
    HY_FIELD("device", HY_D_DEVICE),
    HY_FIELD("statistics", HY_D_STATISTICS),
    HY_FIELD("shard", HY_D_SHARD),
    HY_FIELD("extension", HY_D_EXTENSION),
    HY_FIELD("_encoded", -1),
    {NULL},
};
#undef HY_FIELD

static PyMethodDef descriptor_methods[] = {
    {"decode", descriptor_decode, METH_O | METH_CLASS,
     "Decodes like the C decoder: what it accepts decodes here too (a bad alignment, say, is "
     "left for validate() to report as BUFFER_TABLE), and what it refuses raises the same "
     "status."},
    {"encode", descriptor_encode, METH_NOARGS,
     "The canonical encoding (docs/spec/descriptor-encoding.md)."},
    {"to_json", descriptor_to_json_method, METH_NOARGS, "The JSON rendering, from C."},
    {"validate", descriptor_validate_method, METH_NOARGS,
     "Raises ValidationError (or a subclass of HurrayError) naming the field."},
    {"required_bytes", descriptor_required_bytes, METH_NOARGS,
     "Bytes each buffer must hold for what the descriptor places there."},
    {NULL},
};

static PyType_Slot descriptor_slots[] = {
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, descriptor_init},
    {Py_tp_dealloc, descriptor_dealloc},
    {Py_tp_traverse, descriptor_traverse},
    {Py_tp_clear, descriptor_clear},
    {Py_tp_getset, descriptor_fields},
    {Py_tp_methods, descriptor_methods},
    {Py_tp_doc, "The C side of hurray.Descriptor: fields read from the C descriptor."},
    {0, NULL},
};

PyType_Spec hy_descriptor_spec = {"hurray._hurray._Descriptor", sizeof(HyDescriptorObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                                  descriptor_slots};
