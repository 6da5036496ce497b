/*
 * _hy_capsule.c: the __hurray__ capsule protocol of docs/impl/python-bindings.md
 * (export and consume) and the DLPack entry points.
 */
#include "_hurray.h"

/* ------------------------------------------------------ capsule protocol */

/* __hurray__(stream=None): a capsule whose list holds a fresh handle per
 * buffer, each keeping this tensor alive until the consumer releases it. */
PyObject *tensor_dunder_hurray(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"stream", NULL};
  PyObject *stream = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:__hurray__", kwlist, &stream)) return NULL;
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  if (stream != Py_None) {
    PyErr_SetString(PyExc_ValueError,
                    "stream must be None: a hurray tensor hands its buffers over with the sync "
                    "mode they hold (READY, or the stream or event its producer gave)");
    return NULL;
  }
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  HurrayError e = {0};
  HurrayStatus s = HURRAY_OK;
  CapsuleContext *ctx = hy_capsule_context(
      self->descriptor, self->protected_memory ? HY_CAPSULE_READ_ONLY : 0, &s, &e);
  if (ctx == NULL) return hy_raise_status(st, s, &e);

  HurrayBufferList *list = NULL;
  s = hurray_buffer_list_create(&list, &e);
  for (size_t i = 0; s == HURRAY_OK && i < hurray_buffer_list_len(self->buffers); i++) {
    HurrayBuffer *b = NULL;
    s = hy_buffer_share(self, i, &b, &e);
    if (s == HURRAY_OK) s = hurray_buffer_list_push(list, b, &e);
  }
  if (s != HURRAY_OK) {
    hurray_buffer_list_destroy(list);
    PyMem_RawFree(ctx);
    return hy_raise_status(st, s, &e);
  }
  return hy_capsule_wrap(list, ctx);
}

/* Consumes a capsule: name, then version (before the pointer is touched),
 * then descriptor, list length and placement; only then renames it, after
 * which nothing may hand the list back. */
static PyObject *hy_consume_capsule(ModuleState *st, PyTypeObject *type, PyObject *capsule) {
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_SetString(PyExc_TypeError, "__hurray__() must return a PyCapsule");
    return NULL;
  }
  const char *name = PyCapsule_GetName(capsule);
  if (name != NULL && strcmp(name, USED_CAPSULE_NAME) == 0) {
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message, "this capsule was already consumed");
    return hy_raise_status(st, HURRAY_ERR_STATE, &e);
  }
  if (name == NULL || strcmp(name, CAPSULE_NAME) != 0) {
    PyErr_Format(PyExc_TypeError, "expected a capsule named \"%s\", got \"%s\"", CAPSULE_NAME,
                 name != NULL ? name : "(null)");
    return NULL;
  }
  const CapsuleContext *ctx = PyCapsule_GetContext(capsule);
  if (ctx == NULL) {
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message,
             "capsule has no context (no ABI version, no descriptor)");
    PyErr_Clear();
    return hy_raise_status(st, HURRAY_ERR_MALFORMED, &e);
  }
  if (ctx->abi_version != HURRAY_C_ABI_VERSION) {
    HurrayError e = {0};
    snprintf(e.message, sizeof e.message,
             "capsule from a producer with C ABI %u; this consumer speaks %u", ctx->abi_version,
             HURRAY_C_ABI_VERSION);
    return hy_raise_status(st, HURRAY_ERR_ABI_VERSION, &e);
  }
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_descriptor_decode(ctx->descriptor, (size_t)ctx->descriptor_len, &d, &e);
  if (s != HURRAY_OK) return hy_raise_status(st, s, &e);
  HurrayBufferList *list = PyCapsule_GetPointer(capsule, CAPSULE_NAME);
  if (list == NULL) {
    hurray_descriptor_destroy(d);
    return NULL;
  }
  s = hurray_validate_buffer_placement(d, list, &e); /* list length first, then indices */
  if (s != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return hy_raise_status(st, s, &e);
  }
  /* Marked used before anything that can run Python code (the allocation
   * below may run the garbage collector, its callbacks and finalizers),
   * so no such code can consume this capsule a second time. */
  if (PyCapsule_SetName(capsule, USED_CAPSULE_NAME) < 0) {
    hurray_descriptor_destroy(d);
    return NULL;
  }
  TensorObject *self = hy_tensor_alloc(st, type);
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
  /* The list is ours now; hy_tensor_adopt destroys it on failure. */
  if (hy_tensor_adopt(self, d, list, false) < 0) {
    Py_DECREF(self);
    return NULL;
  }
  self->protected_memory = (ctx->flags & HY_CAPSULE_READ_ONLY) != 0;
  return (PyObject *)self;
}

PyObject *tensor_from_capsule(PyObject *cls, PyObject *capsule) {
  ModuleState *st = hy_state_of_type((PyTypeObject *)cls);
  if (st == NULL) return NULL;
  return hy_consume_capsule(st, (PyTypeObject *)cls, capsule);
}

/* DLPack (_dlpack.c): the data buffer's memory, flagged read-only unless
 * this tensor may write it. */
PyObject *tensor_dlpack(PyObject *op, PyObject *args, PyObject *kwargs) {
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  size_t data = hurray_descriptor_data_buffer(self->descriptor);
  bool writable = data < hurray_buffer_list_len(self->buffers) && self->writable[data];
  return hurray_py_dlpack(op, self->descriptor, self->buffers, writable, args, kwargs);
}

PyObject *tensor_dlpack_device(PyObject *op, PyObject *unused) {
  (void)unused;
  TensorObject *self = (TensorObject *)op;
  if (hy_tensor_ready(self) < 0) return NULL;
  return hurray_py_dlpack_device(self->descriptor);
}
