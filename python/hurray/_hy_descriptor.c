/*
 * _hy_descriptor.c: the _Descriptor type, whose fields live here. Built by
 * reading its part records straight into
 * libhurray's builder functions; decoded by reading every field of the
 * HurrayDescriptor into records. No JSON text passes between C and Python:
 * to_json() is an output format, rendered from the C descriptor.
 */
#include "_hurray.h"

/* ------------------------------------- C descriptors from Python records */

/* Looks a name up among the values [lo, hi] of an enum. */
static int enum_value(PyObject *name, HyEnumName names, int lo, int hi, const char *what) {
  const char *s = PyUnicode_Check(name) ? hy_utf8(name, what) : NULL;
  if (s != NULL) {
    for (int v = lo; v <= hi; v++) {
      if (strcmp(names(v), s) == 0) return v;
    }
  }
  if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "unknown %s %R", what, name);
  return -1;
}

static const char *const descriptor_fields[HY_D_COUNT] = {
    [HY_D_DTYPE] = "dtype",         [HY_D_SHAPE] = "shape",
    [HY_D_STRIDES] = "strides",     [HY_D_BYTE_OFFSET] = "byte_offset",
    [HY_D_LAYOUT] = "layout",       [HY_D_QUANTIZATION] = "quantization",
    [HY_D_BUFFERS] = "buffers",     [HY_D_DEVICE] = "device",
    [HY_D_STATISTICS] = "statistics", [HY_D_SHARD] = "shard",
    [HY_D_EXTENSION] = "extension",
};

static bool is_record(PyObject *obj) { return Py_TYPE(obj)->tp_dealloc == hy_record_dealloc; }

static bool is_descriptor(PyObject *obj) {
  PyObject *module = PyType_GetModuleByDef(Py_TYPE(obj), &hy_module_def);
  if (module == NULL) {
    PyErr_Clear();
    return false;
  }
  ModuleState *st = PyModule_GetState(module);
  return PyObject_TypeCheck(obj, st->descriptor_type);
}

/* What a builder reads: a field of a record or of a Descriptor. Borrowed;
 * NULL when absent or None. */
static PyObject *item(PyObject *spec, const char *key) {
  PyObject *v = NULL;
  if (is_record(spec)) {
    ModuleState *st = hy_state_of_type(Py_TYPE(spec));
    int r = st != NULL ? hy_record_kind(st, Py_TYPE(spec)) : -1;
    int i = r >= 0 ? hy_record_field(r, key) : -1;
    if (st == NULL) PyErr_Clear();
    v = i >= 0 ? ((HyRecordObject *)spec)->v[i] : NULL;
  } else if (is_descriptor(spec)) {
    for (int i = 0; i < HY_D_COUNT; i++) {
      if (strcmp(descriptor_fields[i], key) == 0) v = ((HyDescriptorObject *)spec)->f[i];
    }
  }
  return v == Py_None ? NULL : v;
}

static bool is_spec(PyObject *obj) { return is_record(obj); }

/* The "kind" of a layout or quantization record; "" for another record. */
static const char *kind_of(PyObject *spec) {
  ModuleState *st = hy_state_of_type(Py_TYPE(spec));
  int r = st != NULL ? hy_record_kind(st, Py_TYPE(spec)) : -1;
  if (st == NULL) PyErr_Clear();
  return r >= 0 && hy_record_defs[r].kind != NULL ? hy_record_defs[r].kind : "";
}

static int need(PyObject *v, const char *key) {
  if (v == NULL) PyErr_Format(PyExc_KeyError, "descriptor field '%s' is required", key);
  return v == NULL ? -1 : 0;
}

static int get_u64(PyObject *dict, const char *key, uint64_t fallback, uint64_t *out) {
  PyObject *v = item(dict, key);
  if (v == NULL) {
    *out = fallback;
    return 0;
  }
  *out = PyLong_AsUnsignedLongLong(v);
  return PyErr_Occurred() ? -1 : 0;
}

static int get_i64(PyObject *dict, const char *key, int64_t fallback, int64_t *out) {
  PyObject *v = item(dict, key);
  if (v == NULL) {
    *out = fallback;
    return 0;
  }
  *out = PyLong_AsLongLong(v);
  return PyErr_Occurred() ? -1 : 0;
}

/* Buffer indices: None or absent means "no buffer". */
static int get_index(PyObject *dict, const char *key, uint32_t *out) {
  uint64_t v;
  if (get_u64(dict, key, HURRAY_NO_BUFFER, &v) < 0) return -1;
  if (v > UINT32_MAX) {
    PyErr_Format(PyExc_OverflowError, "%s out of range", key);
    return -1;
  }
  *out = (uint32_t)v;
  return 0;
}

static int get_dtype(PyObject *dict, const char *key, bool optional, HurrayDType *out) {
  PyObject *v = item(dict, key);
  if (v == NULL) {
    if (optional) {
      *out = HURRAY_DTYPE_INVALID;
      return 0;
    }
    return need(v, key);
  }
  const char *s = PyUnicode_Check(v) ? hy_utf8(v, key) : NULL;
  if (s == NULL && PyErr_Occurred()) return -1;
  *out = hurray_dtype_from_name(s);
  if (*out == HURRAY_DTYPE_INVALID) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%s: unknown dtype %R", key, v);
    return -1;
  }
  return 0;
}

static int get_u64_list(PyObject *dict, const char *key, uint64_t *out, Py_ssize_t max,
                        Py_ssize_t *n_out) {
  PyObject *v = item(dict, key);
  if (need(v, key) < 0) return -1;
  PyObject *seq = PySequence_Fast(v, key);
  if (seq == NULL) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > max) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "%s: %zd entries exceed the limit of %zd", key, n, max);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    out[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  *n_out = n;
  return 0;
}

static HurrayDescriptor *build_node(ModuleState *st, PyObject *spec, bool root);

static int build_sparse(HurrayDescriptor *d, PyObject *layout, HurrayStatus *s, HurrayError *e) {
  PyObject *fmt = item(layout, "format");
  const char *f = fmt != NULL && PyUnicode_Check(fmt) ? hy_utf8(fmt, "sparse format") : "";
  HurrayDType index_dtype;
  uint64_t nnz;
  uint32_t data, a, b;
  if (f == NULL || get_dtype(layout, "index_dtype", false, &index_dtype) < 0 ||
      get_u64(layout, "nnz", 0, &nnz) < 0 || get_index(layout, "values_buffer", &data) < 0) {
    return -1;
  }
  if (strcmp(f, "coo") == 0) {
    uint64_t indices[HURRAY_MAX_RANK];
    uint32_t idx32[HURRAY_MAX_RANK];
    Py_ssize_t n = 0;
    if (get_u64_list(layout, "index_buffers", indices, HURRAY_MAX_RANK, &n) < 0) return -1;
    if ((uint32_t)n != hurray_descriptor_rank(d)) {
      PyErr_Format(PyExc_ValueError, "index_buffers needs one entry per dimension (%u)",
                   hurray_descriptor_rank(d));
      return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      if (hy_check_max(indices[i], UINT32_MAX, "index_buffers entry") < 0) return -1;
      idx32[i] = (uint32_t)indices[i];
    }
    PyObject *canonical = item(layout, "canonical");
    *s = hurray_descriptor_set_layout_coo(d, index_dtype, nnz, data, idx32,
                                          canonical != NULL && PyObject_IsTrue(canonical) == 1, e);
    return 0;
  }
  if (strcmp(f, "csr") != 0 && strcmp(f, "csc") != 0 && strcmp(f, "bsr") != 0) {
    PyErr_Format(PyExc_ValueError, "unknown sparse format %R", fmt);
    return -1;
  }
  if (get_index(layout, "indptr_buffer", &a) < 0 || get_index(layout, "indices_buffer", &b) < 0) {
    return -1;
  }
  if (strcmp(f, "bsr") == 0) {
    uint64_t block[2];
    Py_ssize_t n = 0;
    if (get_u64_list(layout, "block_shape", block, 2, &n) < 0) return -1;
    if (n != 2) {
      PyErr_SetString(PyExc_ValueError, "block_shape needs two entries");
      return -1;
    }
    *s = hurray_descriptor_set_layout_bsr(d, index_dtype, nnz, block[0], block[1], data, a, b, e);
  } else {
    *s = hurray_descriptor_set_layout_compressed(
        d, strcmp(f, "csr") == 0 ? HURRAY_SPARSE_CSR : HURRAY_SPARSE_CSC, index_dtype, nnz, data,
        a, b, e);
  }
  return 0;
}

static int build_paged(HurrayDescriptor *d, PyObject *layout, HurrayStatus *s, HurrayError *e) {
  uint64_t axis, page_size, num_pages;
  HurrayDType table_dtype;
  uint32_t a, b;
  if (get_u64(layout, "axis", 0, &axis) < 0 || get_u64(layout, "page_size", 0, &page_size) < 0 ||
      get_u64(layout, "num_pages", 0, &num_pages) < 0 ||
      get_dtype(layout, "table_dtype", false, &table_dtype) < 0 ||
      get_index(layout, "pool_buffer", &a) < 0 || get_index(layout, "table_buffer", &b) < 0 ||
      hy_check_max(axis, UINT32_MAX, "axis") < 0) {
    return -1;
  }
  *s = hurray_descriptor_set_layout_paged(d, (uint32_t)axis, page_size, num_pages, table_dtype, a,
                                          b, e);
  return 0;
}

static int build_composite(ModuleState *st, HurrayDescriptor *d, PyObject *layout,
                           HurrayStatus *s, HurrayError *e) {
  *s = hurray_descriptor_set_layout_composite(d, e);
  PyObject *members = item(layout, "members");
  if (*s != HURRAY_OK || members == NULL) return 0;
  PyObject *seq = PySequence_Fast(members, "members must be a sequence");
  if (seq == NULL) return -1;
  for (Py_ssize_t i = 0; *s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *name = is_spec(m) ? item(m, "name") : NULL;
    PyObject *sub = is_spec(m) ? item(m, "descriptor") : NULL;
    const char *n = name != NULL && PyUnicode_Check(name) ? hy_utf8(name, "member name") : NULL;
    if (n == NULL || sub == NULL) {
      Py_DECREF(seq);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a member needs a name and a descriptor");
      return -1;
    }
    HurrayDescriptor *member = build_node(st, sub, false);
    if (member == NULL) {
      Py_DECREF(seq);
      return -1;
    }
    *s = hurray_descriptor_add_member(d, n, member, e);
  }
  Py_DECREF(seq);
  return 0;
}

static int build_layout(ModuleState *st, HurrayDescriptor *d, PyObject *layout, HurrayError *e) {
  if (!is_spec(layout)) {
    PyErr_Format(PyExc_TypeError, "not a layout: %R", layout);
    return -1;
  }
  const char *k = kind_of(layout);
  HurrayStatus s = HURRAY_OK;
  int rc;
  if (strcmp(k, "dense") == 0) {
    uint32_t data;
    rc = get_index(layout, "data_buffer", &data);
    if (rc == 0) s = hurray_descriptor_set_layout_dense(d, data == HURRAY_NO_BUFFER ? 0 : data, e);
  } else if (strcmp(k, "sparse") == 0) {
    rc = build_sparse(d, layout, &s, e);
  } else if (strcmp(k, "paged") == 0) {
    rc = build_paged(d, layout, &s, e);
  } else if (strcmp(k, "composite") == 0) {
    rc = build_composite(st, d, layout, &s, e);
  } else {
    PyErr_Format(PyExc_TypeError, "not a layout: %R", layout);
    return -1;
  }
  if (rc < 0) return -1;
  if (s != HURRAY_OK) {
    hy_raise_status(st, s, e);
    return -1;
  }
  return 0;
}

/* Per-channel or block affine: scales from a buffer, zero points inline or
 * from a buffer. */
static int build_affine(HurrayDescriptor *d, PyObject *q, bool per_channel, uint32_t axis,
                        uint64_t block, int64_t zero_point, HurrayStatus *status, HurrayError *e) {
  uint32_t scale_buffer, zp_buffer;
  HurrayDType scale_dtype, zp_dtype;
  if (get_index(q, "scale_buffer", &scale_buffer) < 0 ||
      get_dtype(q, "scale_dtype", false, &scale_dtype) < 0 ||
      get_index(q, "zero_point_buffer", &zp_buffer) < 0 ||
      get_dtype(q, "zero_point_dtype", true, &zp_dtype) < 0) {
    return -1;
  }
  HurrayStatus s =
      per_channel
          ? hurray_descriptor_set_quant_per_channel_affine(d, axis, scale_buffer, scale_dtype, e)
          : hurray_descriptor_set_quant_block_affine(d, axis, block, scale_buffer, scale_dtype, e);
  if (zp_buffer != HURRAY_NO_BUFFER && zero_point != 0) {
    PyErr_SetString(PyExc_ValueError,
                    "give either zero_point_buffer or an inline zero_point, not both");
    return -1;
  }
  if (s == HURRAY_OK && zp_buffer != HURRAY_NO_BUFFER) {
    s = hurray_descriptor_set_quant_zero_point_buffer(d, zp_buffer, zp_dtype, e);
  } else if (s == HURRAY_OK && zero_point != 0) {
    s = hurray_descriptor_set_quant_zero_point(d, zero_point, e);
  }
  *status = s;
  return 0;
}

static int build_quant(ModuleState *st, HurrayDescriptor *d, PyObject *q, HurrayError *e) {
  if (!is_spec(q)) {
    PyErr_Format(PyExc_TypeError, "not a quantization: %R", q);
    return -1;
  }
  const char *k = kind_of(q);
  uint64_t axis = 0, block = 0;
  int64_t zero_point = 0;
  uint32_t scale_buffer;
  HurrayDType scale_dtype;
  HurrayStatus s = HURRAY_OK;
  if (get_u64(q, "axis", 0, &axis) < 0 || get_u64(q, "block_size", 0, &block) < 0 ||
      get_i64(q, "zero_point", 0, &zero_point) < 0) {
    return -1;
  }
  if (axis > UINT32_MAX) {
    PyErr_SetString(PyExc_OverflowError, "axis out of range");
    return -1;
  }
  if (strcmp(k, "per_tensor_affine") == 0) {
    PyObject *scale = item(q, "scale");
    if (need(scale, "scale") < 0) return -1;
    double value = PyFloat_AsDouble(scale);
    if (PyErr_Occurred()) return -1;
    s = hurray_descriptor_set_quant_per_tensor_affine(d, value, zero_point, e);
  } else if (strcmp(k, "per_channel_affine") == 0 || strcmp(k, "block_affine") == 0) {
    if (build_affine(d, q, k[0] == 'p', (uint32_t)axis, block, zero_point, &s, e) < 0) return -1;
  } else if (strcmp(k, "nf4") == 0) {
    if (get_index(q, "absmax_buffer", &scale_buffer) < 0 ||
        get_dtype(q, "absmax_dtype", false, &scale_dtype) < 0) {
      return -1;
    }
    s = hurray_descriptor_set_quant_nf4(d, block, scale_buffer, scale_dtype, e);
  } else if (strcmp(k, "mx") == 0) {
    PyObject *element = item(q, "element");
    int el = element == NULL ? -1 : enum_value(element, hy_mx_name, 1, HURRAY_MX_INT8, "MX element");
    if (el < 0 || get_index(q, "scale_buffer", &scale_buffer) < 0) {
      if (!PyErr_Occurred()) need(element, "element");
      return -1;
    }
    if (item(q, "block_size") != NULL && block != HURRAY_MX_BLOCK_SIZE) {
      snprintf(e->message, sizeof e->message,
               "quantization.block_size: MX blocks are %u elements, not %llu",
               HURRAY_MX_BLOCK_SIZE, (unsigned long long)block);
      hy_raise_status(st, HURRAY_ERR_QUANT_BLOCK_SIZE, e);
      return -1;
    }
    s = hurray_descriptor_set_quant_mx(d, (HurrayMxElement)el, (uint32_t)axis, scale_buffer, e);
  } else {
    PyErr_Format(PyExc_TypeError, "not a quantization: %R", q);
    return -1;
  }
  if (s != HURRAY_OK) {
    hy_raise_status(st, s, e);
    return -1;
  }
  return 0;
}

static int build_buffers(HurrayDescriptor *d, PyObject *spec, HurrayStatus *status,
                         HurrayError *e) {
  HurrayStatus s = HURRAY_OK;
  PyObject *buffers = item(spec, "buffers");
  if (buffers != NULL) {
    PyObject *seq = PySequence_Fast(buffers, "buffers must be a sequence");
    if (seq == NULL) return -1;
    for (Py_ssize_t i = 0; s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
      PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
      uint64_t size, alignment;
      PyObject *role = is_spec(b) ? item(b, "role") : NULL;
      PyObject *sync = is_spec(b) ? item(b, "sync_mode") : NULL;
      int r = role == NULL ? -1 : enum_value(role, hy_role_name, 1, HURRAY_ROLE_PAGE_TABLE, "role");
      int m = sync == NULL ? HURRAY_SYNC_READY
                           : enum_value(sync, hy_sync_name, 0, HURRAY_SYNC_EVENT, "sync_mode");
      if (r < 0 || m < 0 || get_u64(b, "byte_size", 0, &size) < 0 ||
          get_u64(b, "alignment", 1, &alignment) < 0) {
        Py_DECREF(seq);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a buffer needs a role");
        return -1;
      }
      s = hurray_descriptor_add_buffer(d, (HurrayBufferRole)r, size,
                                       alignment > UINT32_MAX ? 3 : (uint32_t)alignment,
                                       (HurraySyncMode)m, NULL, e);
    }
    Py_DECREF(seq);
  }
  *status = s;
  return 0;
}

static int build_root_parts(ModuleState *st, HurrayDescriptor *d, PyObject *spec,
                            HurrayError *e) {
  HurrayStatus s = HURRAY_OK;
  if (build_buffers(d, spec, &s, e) < 0) return -1;
  PyObject *device = item(spec, "device");
  if (s == HURRAY_OK && device != NULL) {
    int64_t type, id;
    PyObject *mc = is_spec(device) ? item(device, "memory_class") : NULL;
    int m = mc == NULL ? HURRAY_MEMORY_HOST
                       : enum_value(mc, hy_memory_name, 1, HURRAY_MEMORY_MANAGED, "memory_class");
    if (!is_spec(device) || m < 0 || get_i64(device, "type", 1, &type) < 0 ||
        get_i64(device, "id", 0, &id) < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "device must be a dict");
      return -1;
    }
    if (type < INT32_MIN || type > INT32_MAX || id < INT32_MIN || id > INT32_MAX) {
      PyErr_SetString(PyExc_OverflowError, "device type and id must fit int32");
      return -1;
    }
    s = hurray_descriptor_set_device(d, (int32_t)type, (int32_t)id, (HurrayMemoryClass)m, e);
  }
  PyObject *stats = item(spec, "statistics");
  if (s == HURRAY_OK && stats != NULL) {
    PyObject *v;
    if ((v = item(stats, "min")) != NULL) hurray_descriptor_set_stat_min(d, PyFloat_AsDouble(v));
    if ((v = item(stats, "max")) != NULL) hurray_descriptor_set_stat_max(d, PyFloat_AsDouble(v));
    if ((v = item(stats, "nan_count")) != NULL)
      hurray_descriptor_set_stat_nan_count(d, PyLong_AsUnsignedLongLong(v));
    if ((v = item(stats, "zero_count")) != NULL)
      hurray_descriptor_set_stat_zero_count(d, PyLong_AsUnsignedLongLong(v));
    if (PyErr_Occurred()) return -1;
  }
  PyObject *shard = item(spec, "shard");
  if (s == HURRAY_OK && shard != NULL) {
    uint64_t global[HURRAY_MAX_RANK], offsets[HURRAY_MAX_RANK];
    Py_ssize_t ng = 0, no = 0;
    if (get_u64_list(shard, "global_shape", global, HURRAY_MAX_RANK, &ng) < 0 ||
        get_u64_list(shard, "offsets", offsets, HURRAY_MAX_RANK, &no) < 0) {
      return -1;
    }
    if (ng != no) {
      PyErr_SetString(PyExc_ValueError, "shard global_shape and offsets differ in length");
      return -1;
    }
    s = hurray_descriptor_set_shard(d, (uint32_t)ng, global, offsets, e);
  }
  PyObject *ext = item(spec, "extension");
  if (s == HURRAY_OK && ext != NULL) {
    PyObject *name = item(ext, "name"), *meta = item(ext, "metadata");
    const char *n = name != NULL && PyUnicode_Check(name) ? hy_utf8(name, "extension name") : NULL;
    Py_buffer view = {0};
    if (n == NULL || (meta != NULL && PyObject_GetBuffer(meta, &view, PyBUF_SIMPLE) < 0)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "extension needs a name");
      return -1;
    }
    s = hurray_descriptor_set_extension(d, n, view.buf, meta != NULL ? (size_t)view.len : 0, e);
    if (meta != NULL) PyBuffer_Release(&view);
  }
  if (s != HURRAY_OK) {
    hy_raise_status(st, s, e);
    return -1;
  }
  return 0;
}

static HurrayDescriptor *build_node(ModuleState *st, PyObject *spec, bool root) {
  if (!is_descriptor(spec)) {
    PyErr_Format(PyExc_TypeError, "not a Descriptor: %R", spec);
    return NULL;
  }
  HurrayError e = {0};
  HurrayDType dtype;
  uint64_t shape[HURRAY_MAX_RANK];
  Py_ssize_t rank = 0;
  if (get_dtype(spec, "dtype", false, &dtype) < 0 ||
      get_u64_list(spec, "shape", shape, HURRAY_MAX_RANK, &rank) < 0) {
    return NULL;
  }
  HurrayDescriptor *d = NULL;
  HurrayStatus s = hurray_descriptor_create(dtype, (uint32_t)rank, shape, &d, &e);
  if (s != HURRAY_OK) {
    hy_raise_status(st, s, &e);
    return NULL;
  }
  PyObject *strides = item(spec, "strides");
  uint64_t offset;
  if (strides != NULL) {
    uint64_t raw[HURRAY_MAX_RANK];
    Py_ssize_t n = 0;
    PyObject *seq = PySequence_Fast(strides, "strides must be a sequence");
    if (seq == NULL) goto fail;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n != rank) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "strides need %zd entries", rank);
      goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      raw[i] = (uint64_t)PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) goto fail;
    hurray_descriptor_set_strides(d, (const int64_t *)raw, &e);
  }
  if (get_u64(spec, "byte_offset", 0, &offset) < 0) goto fail;
  hurray_descriptor_set_byte_offset(d, offset);
  PyObject *layout = item(spec, "layout");
  if (layout != NULL && build_layout(st, d, layout, &e) < 0) goto fail;
  PyObject *quant = item(spec, "quantization");
  if (quant != NULL && build_quant(st, d, quant, &e) < 0) goto fail;
  if (root && build_root_parts(st, d, spec, &e) < 0) goto fail;
  return d;
fail:
  hurray_descriptor_destroy(d);
  return NULL;
}

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
  PyObject *fast = PySequence_Fast(seq, "expected a sequence of integers");
  if (fast == NULL) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  PyObject *t = PyTuple_New(n);
  for (Py_ssize_t i = 0; t != NULL && i < n; i++) {
    PyObject *x = PyNumber_Long(PySequence_Fast_GET_ITEM(fast, i));
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
#define MAKE(st, record, ...)                                              \
  make(st, record, (int)(sizeof((PyObject *[]){__VA_ARGS__}) / sizeof(PyObject *)), \
       (PyObject *[]){__VA_ARGS__})

static PyObject *descriptor_from_c(ModuleState *st, PyTypeObject *cls, const HurrayDescriptor *d,
                                   PyObject *encoded, HurrayDescriptor *owned);

static PyObject *py_members(ModuleState *st, PyTypeObject *cls, const HurrayLayout *l) {
  PyObject *t = PyTuple_New(l->member_count);
  for (uint32_t i = 0; t != NULL && i < l->member_count; i++) {
    PyObject *m = MAKE(st, HY_MEMBER, PyUnicode_FromString(l->members[i].name),
                       descriptor_from_c(st, cls, l->members[i].descriptor, NULL, NULL));
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
              bsr ? py_u64s(block, 2) : Py_NewRef(Py_None),
              PyBool_FromLong(coo && l->canonical));
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

static PyObject *py_quant(ModuleState *st, const HurrayQuant *q) {
  switch (q->kind) {
    case HURRAY_QUANT_NONE: Py_RETURN_NONE;
    case HURRAY_QUANT_PER_TENSOR_AFFINE:
      return MAKE(st, HY_PER_TENSOR_AFFINE, PyFloat_FromDouble(q->scale),
                  PyLong_FromLongLong(q->zero_point));
    case HURRAY_QUANT_PER_CHANNEL_AFFINE:
      return MAKE(st, HY_PER_CHANNEL_AFFINE, PyLong_FromUnsignedLong(q->axis),
                  py_index(q->scale_buffer), py_dtype(q->scale_dtype),
                  py_index(q->zero_point_buffer), py_dtype(q->zero_point_dtype),
                  PyLong_FromLongLong(q->zero_point));
    case HURRAY_QUANT_BLOCK_AFFINE:
      return MAKE(st, HY_BLOCK_AFFINE, PyLong_FromUnsignedLong(q->axis),
                  PyLong_FromUnsignedLongLong(q->block_size), py_index(q->scale_buffer),
                  py_dtype(q->scale_dtype), py_index(q->zero_point_buffer),
                  py_dtype(q->zero_point_dtype), PyLong_FromLongLong(q->zero_point));
    case HURRAY_QUANT_NF4:
      return MAKE(st, HY_NF4, PyLong_FromUnsignedLongLong(q->block_size),
                  py_index(q->scale_buffer), py_dtype(q->scale_dtype));
    case HURRAY_QUANT_MX:
      return MAKE(st, HY_MXFP, PyUnicode_FromString(hurray__mx_element_name(q->mx_element)),
                  PyLong_FromUnsignedLong(q->axis), py_index(q->scale_buffer),
                  PyLong_FromUnsignedLongLong(q->block_size));
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
  f[HY_D_STATISTICS] =
      d->stat_flags == 0
          ? Py_NewRef(Py_None)
          : MAKE(st, HY_STATISTICS, py_stat_float(d, HURRAY_STAT_MIN, d->stat_min),
                 py_stat_float(d, HURRAY_STAT_MAX, d->stat_max),
                 py_stat_count(d, HURRAY_STAT_NAN_COUNT, d->stat_nan_count),
                 py_stat_count(d, HURRAY_STAT_ZERO_COUNT, d->stat_zero_count));
  f[HY_D_SHARD] = !d->has_shard ? Py_NewRef(Py_None)
                                : MAKE(st, HY_SHARD, py_u64s(d->shard_global, d->shard_rank),
                                       py_u64s(d->shard_offsets, d->shard_rank));
  f[HY_D_EXTENSION] =
      d->extension_name == NULL
          ? Py_NewRef(Py_None)
          : MAKE(st, HY_EXTENSION, PyUnicode_FromString(d->extension_name),
                 PyBytes_FromStringAndSize((const char *)d->extension_metadata,
                                           (Py_ssize_t)d->extension_metadata_len));
  return 0;
}

/* A new `cls` instance whose fields are read from `d`. `encoded` (new
 * reference taken, may be NULL: then encoded here) and `owned` (the C
 * descriptor it keeps, may be NULL) are the object's to keep. */
static PyObject *descriptor_from_c(ModuleState *st, PyTypeObject *cls, const HurrayDescriptor *d,
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
  if (d->has_strides) {
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
  f[HY_D_QUANTIZATION] = py_quant(st, &d->quant);
  py_root_parts(st, d, f);
  for (int i = 0; i < HY_D_COUNT; i++) {
    if (f[i] == NULL) goto fail;
  }
  if (self->encoded == NULL) goto fail;
  hy_maybe_untrack((PyObject *)self, f, HY_D_COUNT);
  return (PyObject *)self;
fail:
  Py_DECREF(self);
  return NULL;
}

/* ------------------------------------------------------- the _Descriptor type */

static HurrayDescriptor *descriptor_c(ModuleState *st, HyDescriptorObject *self) {
  if (self->encoded == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "Descriptor is not initialised");
    return NULL;
  }
  if (self->c == NULL) self->c = hy_decode_descriptor(st, self->encoded);
  return self->c;
}

static int descriptor_init(PyObject *op, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"dtype", "shape", "strides", "byte_offset", "layout", "quantization",
                           "buffers", "device", "statistics", "shard", "extension", NULL};
  HyDescriptorObject *self = (HyDescriptorObject *)op;
  PyObject *in[HY_D_COUNT] = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|$OOOOOOOOO:Descriptor", kwlist, &in[0],
                                   &in[1], &in[2], &in[3], &in[4], &in[5], &in[6], &in[7],
                                   &in[8], &in[9], &in[10])) {
    return -1;
  }
  if (self->encoded != NULL) {
    PyErr_SetString(PyExc_RuntimeError, "Descriptor is already initialised; use replace()");
    return -1;
  }
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  if (st == NULL) return -1;
  PyObject *f[HY_D_COUNT] = {0};
  f[HY_D_DTYPE] = PyObject_Str(in[HY_D_DTYPE]);
  f[HY_D_SHAPE] = hy_int_tuple(in[HY_D_SHAPE]);
  f[HY_D_STRIDES] = in[HY_D_STRIDES] == NULL || in[HY_D_STRIDES] == Py_None
                        ? Py_NewRef(Py_None)
                        : hy_int_tuple(in[HY_D_STRIDES]);
  f[HY_D_BYTE_OFFSET] = in[HY_D_BYTE_OFFSET] == NULL ? PyLong_FromLong(0)
                                                     : PyNumber_Long(in[HY_D_BYTE_OFFSET]);
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
  for (int i = 0; i < HY_D_COUNT; i++) Py_XSETREF(self->f[i], f[i]);
  if (!ok) return -1;
  HurrayDescriptor *d = build_node(st, op, true);
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
  PyObject *out = descriptor_from_c(st, (PyTypeObject *)cls, d, bytes, d);
  if (out == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
    PyErr_Clear();
    HurrayError e = {0};
    HurrayDescriptor *again = hy_decode_descriptor(st, data);
    HurrayStatus s = again != NULL ? hurray_descriptor_validate(again, &e) : HURRAY_OK;
    hurray_descriptor_destroy(again);
    if (PyErr_Occurred()) return NULL;
    if (s == HURRAY_OK) {
      s = HURRAY_ERR_MALFORMED;
      snprintf(e.message, sizeof e.message, "a string of the descriptor is not valid UTF-8");
    }
    return hy_raise_status(st, s, &e);
  }
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
    PyErr_SetString(PyExc_RuntimeError, "Descriptor is not initialised");
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

static PyMemberDef descriptor_members[] = {
    {"dtype", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_DTYPE]), READONLY, NULL},
    {"shape", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_SHAPE]), READONLY, NULL},
    {"strides", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_STRIDES]), READONLY, NULL},
    {"byte_offset", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_BYTE_OFFSET]), READONLY,
     NULL},
    {"layout", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_LAYOUT]), READONLY, NULL},
    {"quantization", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_QUANTIZATION]), READONLY,
     NULL},
    {"buffers", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_BUFFERS]), READONLY, NULL},
    {"device", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_DEVICE]), READONLY, NULL},
    {"statistics", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_STATISTICS]), READONLY, NULL},
    {"shard", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_SHARD]), READONLY, NULL},
    {"extension", T_OBJECT_EX, offsetof(HyDescriptorObject, f[HY_D_EXTENSION]), READONLY, NULL},
    {"_encoded", T_OBJECT_EX, offsetof(HyDescriptorObject, encoded), READONLY, NULL},
    {NULL},
};

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
    {Py_tp_members, descriptor_members},
    {Py_tp_methods, descriptor_methods},
    {Py_tp_doc, "The C side of hurray.Descriptor: fields read from the C descriptor."},
    {0, NULL},
};

PyType_Spec hy_descriptor_spec = {
    "hurray._hurray._Descriptor", sizeof(HyDescriptorObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, descriptor_slots};
