/*
 * The capsule context and the status -> exception mapping both extensions
 * use (_shared.h).
 */
#include "_shared.h"

#include <string.h>

#include "_guard.h"

void hy_capsule_destructor(PyObject *capsule) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  /* Only a capsule nobody consumed still owns its list. */
  HyCapsuleContext *ctx = PyCapsule_GetContext(capsule);
  if (PyCapsule_IsValid(capsule, HY_CAPSULE_NAME)) {
    hurray_buffer_list_destroy(PyCapsule_GetPointer(capsule, HY_CAPSULE_NAME));
  }
  PyErr_Clear();
  PyMem_RawFree(ctx);
  PyErr_Restore(type, value, traceback);
}

HyCapsuleContext *hy_capsule_context(const HurrayDescriptor *d, uint32_t flags,
                                     HurrayStatus *status, HurrayError *error) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  *status = hurray_descriptor_encode(d, &bytes, &len, error);
  if (*status != HURRAY_OK) return NULL;
  HyCapsuleContext *ctx = PyMem_RawMalloc(sizeof *ctx + len);
  if (ctx == NULL) {
    hurray_free(bytes);
    *status = HURRAY_ERR_NO_MEMORY;
    snprintf(error->message, sizeof error->message, "out of memory");
    return NULL;
  }
  ctx->abi_version = HURRAY_C_ABI_VERSION;
  ctx->flags = flags;
  ctx->descriptor_len = len;
  memcpy(ctx->descriptor, bytes, len);
  hurray_free(bytes);
  return ctx;
}

PyObject *hy_capsule_wrap(HurrayBufferList *list, HyCapsuleContext *ctx) {
  PyObject *capsule = PyCapsule_New(list, HY_CAPSULE_NAME, hy_capsule_destructor);
  if (capsule == NULL) {
    hurray_buffer_list_destroy(list);
    PyMem_RawFree(ctx);
    return NULL;
  }
  if (PyCapsule_SetContext(capsule, ctx) < 0) {
    Py_DECREF(capsule); /* destroys the list; ctx not yet attached */
    PyMem_RawFree(ctx);
    return NULL;
  }
  return capsule;
}

const HyErrorClass hy_error_classes[] = {
    {"InvalidArgumentError",
     "ValueError",
     "An argument or call the API does not accept.",
     {HURRAY_ERR_INVALID_ARGUMENT, HURRAY_ERR_STATE, HURRAY_ERR_NOT_FINITE}},
    {"HurrayMemoryError", "MemoryError", "libhurray ran out of memory.", {HURRAY_ERR_NO_MEMORY}},
    {"UnsupportedError",
     NULL,
     "Something from a newer version (encoding, field, ABI) or a combination not supported.",
     {HURRAY_ERR_UNSUPPORTED, HURRAY_ERR_ABI_VERSION}},
    {"FormatError",
     NULL,
     "Corrupt or invalid encoded bytes or file.",
     {HURRAY_ERR_TRUNCATED, HURRAY_ERR_MALFORMED, HURRAY_ERR_BAD_MAGIC, HURRAY_ERR_RANGE,
      HURRAY_ERR_OVERLAP}},
    {"ChecksumError", NULL, "Stored checksum differs from the bytes.", {HURRAY_ERR_CHECKSUM}},
    {"LimitError",
     NULL,
     "A hard limit or 64-bit size was exceeded.",
     {HURRAY_ERR_LIMIT, HURRAY_ERR_OVERFLOW}},
    {"ValidationError",
     NULL,
     "A descriptor is inconsistent.",
     {HURRAY_ERR_DTYPE,
      HURRAY_ERR_STRIDES,
      HURRAY_ERR_BUFFER_INDEX,
      HURRAY_ERR_BUFFER_ROLE,
      HURRAY_ERR_BUFFER_UNREFERENCED,
      HURRAY_ERR_BUFFER_TOO_SMALL,
      HURRAY_ERR_BUFFER_TABLE,
      HURRAY_ERR_DEVICE,
      HURRAY_ERR_QUANT_LAYOUT,
      HURRAY_ERR_QUANT_DTYPE,
      HURRAY_ERR_QUANT_AXIS,
      HURRAY_ERR_QUANT_BLOCK_SIZE,
      HURRAY_ERR_QUANT_SCALE,
      HURRAY_ERR_QUANT_SCALE_DTYPE,
      HURRAY_ERR_QUANT_SCALE_COUNT,
      HURRAY_ERR_QUANT_ZERO_POINT,
      HURRAY_ERR_QUANT_ZERO_POINT_DTYPE,
      HURRAY_ERR_QUANT_ZERO_POINT_COUNT,
      HURRAY_ERR_QUANT_MX_ELEMENT,
      HURRAY_ERR_SPARSE_INDEX_DTYPE,
      HURRAY_ERR_SPARSE_RANK,
      HURRAY_ERR_SPARSE_NNZ,
      HURRAY_ERR_SPARSE_BLOCK,
      HURRAY_ERR_PAGED_AXIS,
      HURRAY_ERR_PAGED_PAGE_SIZE,
      HURRAY_ERR_PAGED_TABLE_DTYPE,
      HURRAY_ERR_COMPOSITE_DEPTH,
      HURRAY_ERR_COMPOSITE_MEMBER,
      HURRAY_ERR_COMPOSITE_NAME,
      HURRAY_ERR_STATISTICS,
      HURRAY_ERR_SHARD_RANK,
      HURRAY_ERR_SHARD_BOUNDS,
      HURRAY_ERR_EXTENSION,
      HURRAY_ERR_QUANT_PACKING,
      HURRAY_ERR_QUANT_FIELD}},
    {"PlacementError",
     NULL,
     "Buffers do not fit the descriptor they travel with.",
     {HURRAY_ERR_BUFFER_COUNT, HURRAY_ERR_BUFFER_SIZE, HURRAY_ERR_BUFFER_ALIGNMENT,
      HURRAY_ERR_DEVICE_MISMATCH, HURRAY_ERR_SYNC_MODE_MISMATCH, HURRAY_ERR_PAGE_TABLE_ENTRY,
      HURRAY_ERR_SPARSE_INDEX_BOUNDS, HURRAY_ERR_SPARSE_INDPTR, HURRAY_ERR_SPARSE_ORDER,
      HURRAY_ERR_QUANT_GROUP_INDEX}},
    {"NotFoundError", "KeyError", "No tensor, key or file of that name.", {HURRAY_ERR_NOT_FOUND}},
    {"DuplicateNameError", NULL, "A name used twice.", {HURRAY_ERR_DUPLICATE_NAME}},
    {"HurrayIOError",
     "OSError",
     "The operating system refused an operation.",
     {HURRAY_ERR_IO, HURRAY_ERR_CANCELLED}},
};
const size_t hy_error_class_count = sizeof hy_error_classes / sizeof hy_error_classes[0];

const char *hy_error_class_name(HurrayStatus status) {
  for (size_t i = 0; i < hy_error_class_count; i++) {
    const HyErrorClass *c = &hy_error_classes[i];
    for (size_t k = 0; k < sizeof c->codes / sizeof c->codes[0] && c->codes[k] != HURRAY_OK; k++) {
      if (c->codes[k] == status) return c->name;
    }
  }
  return "HurrayError";
}

PyObject *hy_status_exception(PyObject *cls, HurrayStatus status, const char *message) {
  PyObject *text = PyUnicode_FromFormat("%s: %s", hurray_status_name(status), message);
  if (text == NULL) return NULL;
  PyObject *exc = PyObject_CallOneArg(cls, text);
  Py_DECREF(text);
  if (exc == NULL) return NULL;
  PyObject *code = PyLong_FromLong((long)status);
  PyObject *name = PyUnicode_FromString(hurray_status_name(status));
  if (code == NULL || name == NULL || PyObject_SetAttrString(exc, "status", code) < 0 ||
      PyObject_SetAttrString(exc, "status_name", name) < 0) {
    Py_CLEAR(exc);
  }
  Py_XDECREF(code);
  Py_XDECREF(name);
  return exc;
}

PyObject *hy_raise_class(PyObject *cls, PyObject *io_class, HurrayStatus status,
                         const HurrayError *error, PyObject *filename) {
  if (error != NULL && error->os_errno != 0 && io_class != NULL) {
    return hy_raise_os(io_class, status, error, filename);
  }
  PyObject *exc = hy_status_exception(cls, status, error != NULL ? error->message : "");
  if (exc == NULL) return NULL;
  PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
  Py_DECREF(exc);
  return NULL;
}
