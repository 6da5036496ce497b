/*
 * _hy_many.c: what files of many small tensors pay per tensor (issue 19).
 * A plain dense Tensor exports its elements through the buffer protocol, so
 * that numpy.asarray(tensor) builds its array in C, with no Python frame.
 */
#include "_hurray.h"

/* The PEP 3118 format of a dtype numpy builds from a buffer; NULL for the
 * others (bfloat16, float8, sub-byte...), which numpy then takes through
 * Tensor.__array__. Stored elements are little-endian: a big-endian host
 * exports none. */
static const char *plain_format(HurrayDType dtype) {
  const uint16_t probe = 1;
  if (*(const uint8_t *)&probe != 1) return NULL;
  switch (dtype) {
    case HURRAY_DTYPE_BOOL: return "?";
    case HURRAY_DTYPE_INT8: return "b";
    case HURRAY_DTYPE_INT16: return "h";
    case HURRAY_DTYPE_INT32: return "i";
    case HURRAY_DTYPE_INT64: return "q";
    case HURRAY_DTYPE_UINT8: return "B";
    case HURRAY_DTYPE_UINT16: return "H";
    case HURRAY_DTYPE_UINT32: return "I";
    case HURRAY_DTYPE_UINT64: return "Q";
    case HURRAY_DTYPE_FLOAT16: return "e";
    case HURRAY_DTYPE_FLOAT32: return "f";
    case HURRAY_DTYPE_FLOAT64: return "d";
    case HURRAY_DTYPE_COMPLEX64: return "Zf";
    case HURRAY_DTYPE_COMPLEX128: return "Zd";
    default: return NULL;
  }
}

/* bf_getbuffer of Tensor: the elements of a dense, unquantized, row-major
 * tensor of a numpy-native dtype in host memory, zero-copy, read-only where
 * the tensor's memory is (Tensor.numpy() says the same). Anything else is a
 * BufferError: numpy then falls back to __array__, which explains. The
 * export holds the tensor, and the tensor its buffers. */
/* Whether row-major memory of shape `dims` is also column-major: when at
 * most one dimension has more than one element, or there are none. */
static bool also_column_major(const Py_ssize_t *dims, uint32_t rank) {
  uint32_t long_dims = 0;
  for (uint32_t i = 0; i < rank; i++) {
    if (dims[i] == 0) return true;
    long_dims += dims[i] > 1;
  }
  return long_dims <= 1;
}

int hy_tensor_getbuffer(PyObject *op, Py_buffer *view, int flags) {
  TensorObject *t = (TensorObject *)op;
  view->obj = NULL;
  if (hy_tensor_ready(t) < 0) return -1;
  const HurrayDescriptor *d = t->descriptor;
  const char *format = plain_format(hurray_descriptor_dtype(d));
  uint32_t data = hurray_descriptor_data_buffer(d);
  const HurrayBuffer *b = hurray_buffer_list_get(t->buffers, data);
  if (format == NULL || hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_DENSE ||
      hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE ||
      hurray_descriptor_strides(d) != NULL || b == NULL ||
      hurray_buffer_device_type(b) != HURRAY_DEVICE_CPU ||
      hurray_buffer_memory_class(b) == HURRAY_MEMORY_DEVICE ||
      hurray_buffer_sync_mode(b) != HURRAY_SYNC_READY) {
    PyErr_SetString(PyExc_BufferError,
                    "only a dense, unquantized, row-major host tensor of a numpy-native dtype, "
                    "its buffer READY, exports a buffer; use numpy(), codes() or to_dense()");
    return -1;
  }
  bool readonly = !t->writable[data];
  if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE && readonly) {
    PyErr_SetString(PyExc_BufferError, "the tensor's memory is read-only");
    return -1;
  }
  uint32_t rank = hurray_descriptor_rank(d);
  const uint64_t *shape = hurray_descriptor_shape(d);
  Py_ssize_t itemsize = (Py_ssize_t)(hurray_dtype_bits(hurray_descriptor_dtype(d)) / 8);
  Py_ssize_t *dims = PyMem_Malloc((2 * (size_t)rank + 1) * sizeof *dims);
  if (dims == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  /* Validation proved that shape, dtype and byte_offset fit the buffer, so
   * the element count does not overflow; but a tensor with no elements may
   * have a dimension, or a stride past a zero dimension, that Py_ssize_t
   * cannot hold. */
  Py_ssize_t numel = 1;
  bool fits = true, empty_shape = false;
  for (uint32_t i = 0; i < rank; i++) {
    fits = fits && shape[i] <= (uint64_t)PY_SSIZE_T_MAX;
    empty_shape = empty_shape || shape[i] == 0;
    dims[i] = (Py_ssize_t)shape[i];
  }
  for (uint32_t i = 0; fits && !empty_shape && i < rank; i++) numel *= dims[i];
  if (empty_shape) numel = 0;
  Py_ssize_t stride = itemsize;
  for (uint32_t i = rank; fits && i-- > 0;) {
    dims[rank + i] = stride;
    fits = !__builtin_mul_overflow(stride, dims[i], &stride);
  }
  if (!fits) {
    PyMem_Free(dims);
    PyErr_SetString(PyExc_BufferError,
                    "a dimension or stride of the tensor does not fit in Py_ssize_t");
    return -1;
  }
  if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && !also_column_major(dims, rank)) {
    PyMem_Free(dims);
    PyErr_SetString(PyExc_BufferError, "the tensor is row-major, not Fortran contiguous");
    return -1;
  }
  static char empty;
  uint8_t *base = hurray_buffer_data(b);
  view->buf = base != NULL ? base + hurray_descriptor_byte_offset(d) : (void *)&empty;
  view->obj = Py_NewRef(op);
  view->len = numel * itemsize;
  view->readonly = readonly;
  view->itemsize = itemsize;
  view->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? (char *)format : NULL;
  /* Without PyBUF_ND the consumer reads `len` bytes as one dimension and
   * has no shape to read: ndim must say 1, as PyBuffer_FillInfo does. */
  bool nd = (flags & PyBUF_ND) == PyBUF_ND;
  view->ndim = nd ? (int)rank : 1;
  view->shape = nd ? dims : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? dims + rank : NULL;
  view->suboffsets = NULL;
  view->internal = dims;
  return 0;
}

void hy_tensor_releasebuffer(PyObject *op, Py_buffer *view) {
  (void)op;
  PyMem_Free(view->internal);
}
