/*
 * _hy_read.c: Python records from a C descriptor. Every field of a
 * HurrayDescriptor is read into the part records (_hy_records.c); this is
 * the one place a field goes from C to Python.
 */
#include "_hurray.h"

/* ------------------------------------------ Python parts from a C descriptor */

/* Each helper returns a new reference, or NULL with an exception. */
static PyObject *py_index(uint32_t index) {
  return index == HURRAY_NO_BUFFER ? Py_NewRef(Py_None) : PyLong_FromUnsignedLong(index);
}

static PyObject *py_dtype(HurrayDType dtype) {
  const char *name = hurray_dtype_name(dtype);
  return name != NULL ? PyUnicode_FromString(name) : Py_NewRef(Py_None);
}

static PyObject *py_u64s(const uint64_t *v, uint32_t n) {
  PyObject *t = PyTuple_New(n);
  for (uint32_t i = 0; t != NULL && i < n; i++) {
    PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
    if (x == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

/* A record from `n` new references (stolen, NULL ones mean failure). */
static PyObject *make(ModuleState *st, int record, int n, PyObject **values) {
  PyObject *out = NULL;
  bool ok = true;
  for (int i = 0; i < n; i++) ok = ok && values[i] != NULL;
  if (ok) out = hy_record_new(st, record, values);
  for (int i = 0; i < n; i++) Py_XDECREF(values[i]);
  return out;
}
#define MAKE(st, record, ...)                                                       \
  make(st, record, (int)(sizeof((PyObject *[]){__VA_ARGS__}) / sizeof(PyObject *)), \
       (PyObject *[]){__VA_ARGS__})

static PyObject *py_members(ModuleState *st, PyTypeObject *cls, const HurrayLayout *l) {
  PyObject *t = PyTuple_New(l->member_count);
  for (uint32_t i = 0; t != NULL && i < l->member_count; i++) {
    PyObject *m = MAKE(st, HY_MEMBER, PyUnicode_FromString(l->members[i].name),
                       hy_descriptor_from_c(st, cls, l->members[i].descriptor, NULL, NULL));
    if (m == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, m);
  }
  return t;
}

static PyObject *py_sparse(ModuleState *st, const HurrayDescriptor *d) {
  const HurrayLayout *l = &d->layout;
  bool coo = l->format == HURRAY_SPARSE_COO, bsr = l->format == HURRAY_SPARSE_BSR;
  PyObject *index_buffers = Py_NewRef(Py_None);
  if (coo) {
    Py_SETREF(index_buffers, PyTuple_New(d->rank));
    for (uint32_t i = 0; index_buffers != NULL && i < d->rank; i++) {
      PyObject *x = py_index(l->coo_index_buffers[i]);
      if (x == NULL) Py_CLEAR(index_buffers);
      else PyTuple_SET_ITEM(index_buffers, i, x);
    }
  }
  uint64_t block[2] = {l->block_rows, l->block_cols};
  return MAKE(st, HY_SPARSE, PyUnicode_FromString(hurray__sparse_format_name(l->format)),
              py_dtype(l->index_dtype), PyLong_FromUnsignedLongLong(l->nnz),
              py_index(l->data_buffer), coo ? Py_NewRef(Py_None) : py_index(l->indptr_buffer),
              coo ? Py_NewRef(Py_None) : py_index(l->indices_buffer), index_buffers,
              bsr ? py_u64s(block, 2) : Py_NewRef(Py_None), PyBool_FromLong(coo && l->canonical));
}

static PyObject *py_layout(ModuleState *st, PyTypeObject *cls, const HurrayDescriptor *d) {
  const HurrayLayout *l = &d->layout;
  switch (l->kind) {
    case HURRAY_LAYOUT_DENSE: return MAKE(st, HY_DENSE, py_index(l->data_buffer));
    case HURRAY_LAYOUT_SPARSE: return py_sparse(st, d);
    case HURRAY_LAYOUT_PAGED:
      return MAKE(st, HY_PAGED, PyLong_FromUnsignedLong(l->axis),
                  PyLong_FromUnsignedLongLong(l->page_size),
                  PyLong_FromUnsignedLongLong(l->num_pages), py_dtype(l->index_dtype),
                  py_index(l->data_buffer), py_index(l->table_buffer));
    case HURRAY_LAYOUT_COMPOSITE: return MAKE(st, HY_COMPOSITE, py_members(st, cls, l));
  }
  return PyErr_Format(PyExc_SystemError, "layout kind %d has no Python form", (int)l->kind);
}

static PyObject *py_small(const uint8_t *v, uint32_t n) {
  PyObject *t = PyTuple_New(n);
  for (uint32_t i = 0; t != NULL && i < n; i++) {
    PyObject *x = PyLong_FromUnsignedLong(v[i]);
    if (x == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

/* A Packing record (order None for the identity), or None when not packed. */
static PyObject *py_packing(ModuleState *st, const HurrayQuantPacking *p, HurrayDType dtype) {
  if (p->word_bits == 0) return Py_NewRef(Py_None);
  uint32_t lanes = hurray__packing_lanes(p, dtype);
  return MAKE(
      st, HY_PACKING, PyLong_FromUnsignedLong(p->word_bits), PyLong_FromUnsignedLong(p->axis),
      hurray__packing_is_identity(p, lanes) ? Py_NewRef(Py_None) : py_small(p->order, lanes));
}

static PyObject *py_super_op(uint8_t op) {
  return op == HURRAY_SUPER_MULTIPLY ? PyUnicode_FromString("multiply")
         : op == HURRAY_SUPER_DIVIDE ? PyUnicode_FromString("divide")
                                     : Py_NewRef(Py_None);
}

/* The packed and two-level fields (ADR-0024) of the three kinds that take
 * them, in their record order: what `v` gets, from index 0. */
static int py_storage_fields(ModuleState *st, const HurrayDescriptor *d, PyObject **v) {
  const HurrayQuant *q = &d->quant;
  const HurrayQuantStorage *qs = hurray__qs(q);
  v[0] = qs->has_storage_axes ? py_small(qs->storage_axes, d->rank) : Py_NewRef(Py_None);
  v[1] = py_packing(st, &qs->code_packing, d->dtype);
  v[2] = py_packing(st, &qs->zero_point_packing, q->zero_point_dtype);
  v[3] = PyLong_FromLongLong(q->zero_point_offset);
  return 4;
}

static int py_two_level_fields(const HurrayQuant *q, PyObject **v) {
  v[0] = py_index(q->codebook_buffer);
  v[1] = py_index(q->scale_codebook_buffer);
  v[2] = py_index(q->super_scale_buffer);
  v[3] = py_dtype(q->super_scale_dtype);
  v[4] = PyLong_FromUnsignedLongLong(q->super_block_size);
  v[5] = py_super_op(q->super_op);
  v[6] = PyFloat_FromDouble(q->scale_offset);
  return 7;
}

/* long: one record per kind; the three packed-capable kinds fill their extra fields in order. */
static PyObject *py_quant(ModuleState *st, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  PyObject *v[HY_RECORD_MAX_FIELDS] = {0};
  int n = 0;
  switch (q->kind) {
    case HURRAY_QUANT_NONE: Py_RETURN_NONE;
    case HURRAY_QUANT_PER_TENSOR_AFFINE:
      return MAKE(st, HY_PER_TENSOR_AFFINE, PyFloat_FromDouble(q->scale),
                  PyLong_FromLongLong(q->zero_point));
    case HURRAY_QUANT_PER_CHANNEL_AFFINE:
    case HURRAY_QUANT_BLOCK_AFFINE: {
      bool block = q->kind == HURRAY_QUANT_BLOCK_AFFINE;
      v[n++] = PyLong_FromUnsignedLong(q->axis);
      if (block) v[n++] = PyLong_FromUnsignedLongLong(q->block_size);
      v[n++] = py_index(q->scale_buffer);
      v[n++] = py_dtype(q->scale_dtype);
      v[n++] = py_index(q->zero_point_buffer);
      v[n++] = py_dtype(q->zero_point_dtype);
      v[n++] = PyLong_FromLongLong(q->zero_point);
      n += py_storage_fields(st, d, v + n);
      if (block) {
        v[n++] = PyLong_FromUnsignedLong(q->axis2);
        v[n++] = PyLong_FromUnsignedLongLong(q->block_size2);
        v[n++] = py_index(q->group_index_buffer);
        v[n++] = py_dtype(q->group_index_dtype);
      }
      n += py_two_level_fields(q, v + n);
      return make(st, block ? HY_BLOCK_AFFINE : HY_PER_CHANNEL_AFFINE, n, v);
    }
    case HURRAY_QUANT_NF4:
      v[n++] = PyLong_FromUnsignedLongLong(q->block_size);
      v[n++] = py_index(q->scale_buffer);
      v[n++] = py_dtype(q->scale_dtype);
      v[n++] = py_packing(st, &hurray__qs(q)->code_packing, d->dtype);
      n += py_two_level_fields(q, v + n);
      return make(st, HY_NF4, n, v);
    case HURRAY_QUANT_MX:
      return MAKE(st, HY_MXFP, PyUnicode_FromString(hurray__mx_element_name(q->mx_element)),
                  PyLong_FromUnsignedLong(q->axis), py_index(q->scale_buffer),
                  PyLong_FromUnsignedLongLong(q->block_size));
    case HURRAY_QUANT_BLOCK_CODED: {
      const char *name = NULL;
      hurray_block_format_info(q->block_format, NULL, NULL, &name);
      return MAKE(st, HY_BLOCK_CODED, PyUnicode_FromString(name != NULL ? name : "?"),
                  PyLong_FromUnsignedLong(q->axis), PyLong_FromUnsignedLongLong(q->block_size));
    }
  }
  return PyErr_Format(PyExc_SystemError, "quantization kind %d has no Python form", (int)q->kind);
}

static PyObject *py_stat_float(const HurrayDescriptor *d, uint32_t flag, double v) {
  return d->stat_flags & flag ? PyFloat_FromDouble(v) : Py_NewRef(Py_None);
}

static PyObject *py_stat_count(const HurrayDescriptor *d, uint32_t flag, uint64_t v) {
  return d->stat_flags & flag ? PyLong_FromUnsignedLongLong(v) : Py_NewRef(Py_None);
}

static PyObject *py_buffers(ModuleState *st, const HurrayDescriptor *d) {
  PyObject *t = PyTuple_New(d->buffer_count);
  for (uint32_t i = 0; t != NULL && i < d->buffer_count; i++) {
    const HurrayBufferEntry *b = &d->buffers[i];
    PyObject *x = MAKE(st, HY_BUFFER, PyUnicode_FromString(hurray__role_name(b->role)),
                       PyLong_FromUnsignedLongLong(b->byte_size),
                       PyLong_FromUnsignedLong(b->alignment),
                       PyUnicode_FromString(hurray__sync_mode_name(b->sync_mode)));
    if (x == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

/* The root-only parts; a member's are at their defaults and read the same. */
static int py_root_parts(ModuleState *st, const HurrayDescriptor *d, PyObject **f) {
  f[HY_D_BUFFERS] = py_buffers(st, d);
  f[HY_D_DEVICE] = MAKE(st, HY_DEVICE, PyLong_FromLong(d->device_type),
                        PyLong_FromLong(d->device_id),
                        PyUnicode_FromString(hurray__memory_class_name(d->memory_class)));
  f[HY_D_STATISTICS] = d->stat_flags == 0
                           ? Py_NewRef(Py_None)
                           : MAKE(st, HY_STATISTICS,
                                  py_stat_float(d, HURRAY_STAT_MIN, d->stat_min),
                                  py_stat_float(d, HURRAY_STAT_MAX, d->stat_max),
                                  py_stat_count(d, HURRAY_STAT_NAN_COUNT, d->stat_nan_count),
                                  py_stat_count(d, HURRAY_STAT_ZERO_COUNT, d->stat_zero_count));
  f[HY_D_SHARD] = d->shard == NULL ? Py_NewRef(Py_None)
                                   : MAKE(st, HY_SHARD, py_u64s(d->shard->global, d->shard_rank),
                                          py_u64s(d->shard->offsets, d->shard_rank));
  f[HY_D_EXTENSION] = d->extension_name == NULL
                          ? Py_NewRef(Py_None)
                          : MAKE(st, HY_EXTENSION, PyUnicode_FromString(d->extension_name),
                                 PyBytes_FromStringAndSize((const char *)d->extension_metadata,
                                                           (Py_ssize_t)d->extension_metadata_len));
  return 0;
}

/* A new `cls` instance whose fields are read from `d`. `encoded` (new
 * reference taken, may be NULL: then encoded here) and `owned` (the C
 * descriptor it keeps, may be NULL) are the object's to keep. */
PyObject *hy_descriptor_from_c(ModuleState *st, PyTypeObject *cls, const HurrayDescriptor *d,
                               PyObject *encoded, HurrayDescriptor *owned) {
  HyDescriptorObject *self = (HyDescriptorObject *)cls->tp_alloc(cls, 0);
  if (self == NULL) {
    Py_XDECREF(encoded);
    hurray_descriptor_destroy(owned);
    return NULL;
  }
  self->c = owned;
  self->encoded = encoded != NULL ? encoded : hy_encode_descriptor(st, d);
  PyObject **f = self->f;
  f[HY_D_DTYPE] = PyUnicode_FromString(hurray_dtype_name(d->dtype) ? hurray_dtype_name(d->dtype)
                                                                   : "None");
  f[HY_D_SHAPE] = py_u64s(d->shape, d->rank);
  if (d->strides != NULL) {
    f[HY_D_STRIDES] = PyTuple_New(d->rank);
    for (uint32_t i = 0; f[HY_D_STRIDES] != NULL && i < d->rank; i++) {
      PyObject *x = PyLong_FromLongLong(d->strides[i]);
      if (x == NULL) Py_CLEAR(f[HY_D_STRIDES]);
      else PyTuple_SET_ITEM(f[HY_D_STRIDES], i, x);
    }
  } else {
    f[HY_D_STRIDES] = Py_NewRef(Py_None);
  }
  f[HY_D_BYTE_OFFSET] = PyLong_FromUnsignedLongLong(d->byte_offset);
  f[HY_D_LAYOUT] = py_layout(st, cls, d);
  f[HY_D_QUANTIZATION] = py_quant(st, d);
  py_root_parts(st, d, f);
  for (int i = 0; i < HY_D_COUNT; i++) {
    if (f[i] == NULL) goto fail;
  }
  if (self->encoded == NULL) goto fail;
  hy_maybe_untrack(st, (PyObject *)self, f, HY_D_COUNT);
  return (PyObject *)self;
fail:
  Py_DECREF(self);
  return NULL;
}
