/*
 * _hy_build.c: C descriptors from Python records. A Descriptor's fields and
 * part records are read straight into libhurray's builder functions; this
 * is the one place a field goes from Python to C.
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
    [HY_D_DTYPE] = "dtype",           [HY_D_SHAPE] = "shape",
    [HY_D_STRIDES] = "strides",       [HY_D_BYTE_OFFSET] = "byte_offset",
    [HY_D_LAYOUT] = "layout",         [HY_D_QUANTIZATION] = "quantization",
    [HY_D_BUFFERS] = "buffers",       [HY_D_DEVICE] = "device",
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

/* "Paged.page_size": what an error about a field of `spec` calls it. */
static void field_name(PyObject *spec, const char *key, char *buf, size_t size) {
  const char *type = Py_TYPE(spec)->tp_name, *dot = strrchr(type, '.');
  snprintf(buf, size, "%.60s.%.60s", dot != NULL ? dot + 1 : type, key);
}

static int get_uint(PyObject *dict, const char *key, uint64_t fallback, uint64_t max,
                    uint64_t *out) {
  PyObject *v = item(dict, key);
  if (v == NULL || v == Py_None) {
    *out = fallback;
    return 0;
  }
  char what[128];
  field_name(dict, key, what, sizeof what);
  return hy_field_u64(v, max, what, out);
}

static int get_u64(PyObject *dict, const char *key, uint64_t fallback, uint64_t *out) {
  return get_uint(dict, key, fallback, UINT64_MAX, out);
}

/* A signed field value: 0, or -1 with OverflowError naming `what`. */
static int field_i64(PyObject *v, const char *what, int64_t *out) {
  if (hy_refuse_bool(v, what) < 0) return -1;
  *out = PyLong_AsLongLong(v);
  if (*out == -1 && PyErr_ExceptionMatches(PyExc_OverflowError)) {
    PyErr_Format(PyExc_OverflowError, "%s %R is out of range (%lld..%lld)", what, v,
                 (long long)INT64_MIN, (long long)INT64_MAX);
  }
  return PyErr_Occurred() ? -1 : 0;
}

static int get_i64(PyObject *dict, const char *key, int64_t fallback, int64_t *out) {
  PyObject *v = item(dict, key);
  if (v == NULL) {
    *out = fallback;
    return 0;
  }
  char what[128];
  field_name(dict, key, what, sizeof what);
  return field_i64(v, what, out);
}

/* Buffer indices: None or absent means "no buffer". */
static int get_index(PyObject *dict, const char *key, uint32_t *out) {
  uint64_t v;
  if (get_uint(dict, key, HURRAY_NO_BUFFER, UINT32_MAX, &v) < 0) return -1;
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
  PyObject *seq = hy_sequence_copy(v, key);
  if (seq == NULL) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > max) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "%s: %zd entries exceed the limit of %zd", key, n, max);
    return -1;
  }
  char what[128], entry[160];
  field_name(dict, key, what, sizeof what);
  for (Py_ssize_t i = 0; i < n; i++) {
    snprintf(entry, sizeof entry, "%s[%zd]", what, i);
    if (hy_field_u64(PySequence_Fast_GET_ITEM(seq, i), UINT64_MAX, entry, &out[i]) < 0) {
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  *n_out = n;
  return 0;
}

/* A field the sparse format has no place for (indptr_buffer on COO,
 * index_buffers on CSR, ...): dropped from the encoding while the record
 * kept it, so refused. */
static int refuse_other_formats_fields(PyObject *layout, const char *f) {
  bool coo = strcmp(f, "coo") == 0, bsr = strcmp(f, "bsr") == 0;
  const char *misplaced = coo && item(layout, "indptr_buffer") != NULL    ? "indptr_buffer"
                          : coo && item(layout, "indices_buffer") != NULL ? "indices_buffer"
                          : !bsr && item(layout, "block_shape") != NULL   ? "block_shape"
                          : !coo && item(layout, "index_buffers") != NULL ? "index_buffers"
                                                                          : NULL;
  PyObject *canonical = item(layout, "canonical");
  if (misplaced == NULL && !coo && canonical != NULL && canonical != Py_False) {
    misplaced = "canonical";
  }
  if (misplaced != NULL) {
    PyErr_Format(PyExc_ValueError, "sparse format %s has no %s", f, misplaced);
    return -1;
  }
  if (canonical != NULL && !PyBool_Check(canonical)) {
    PyErr_Format(PyExc_TypeError, "canonical must be True or False, not %R", canonical);
    return -1;
  }
  return 0;
}

static int build_sparse(HurrayDescriptor *d, PyObject *layout, HurrayStatus *s, HurrayError *e) {
  PyObject *fmt = item(layout, "format");
  const char *f = fmt != NULL && PyUnicode_Check(fmt) ? hy_utf8(fmt, "sparse format") : "";
  if (f != NULL && strcmp(f, "coo") != 0 && strcmp(f, "csr") != 0 && strcmp(f, "csc") != 0 &&
      strcmp(f, "bsr") != 0) {
    PyErr_Format(PyExc_ValueError, "unknown sparse format %R", fmt);
    return -1;
  }
  if (f != NULL && refuse_other_formats_fields(layout, f) < 0) return -1;
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
  if (get_uint(layout, "axis", 0, UINT32_MAX, &axis) < 0 ||
      get_u64(layout, "page_size", 0, &page_size) < 0 ||
      get_u64(layout, "num_pages", 0, &num_pages) < 0 ||
      get_dtype(layout, "table_dtype", false, &table_dtype) < 0 ||
      get_index(layout, "pool_buffer", &a) < 0 || get_index(layout, "table_buffer", &b) < 0) {
    return -1;
  }
  *s = hurray_descriptor_set_layout_paged(d, (uint32_t)axis, page_size, num_pages, table_dtype, a,
                                          b, e);
  return 0;
}

static int build_composite(ModuleState *st, HurrayDescriptor *d, PyObject *layout, HurrayStatus *s,
                           HurrayError *e) {
  *s = hurray_descriptor_set_layout_composite(d, e);
  PyObject *members = item(layout, "members");
  if (*s != HURRAY_OK || members == NULL) return 0;
  PyObject *seq = hy_sequence_copy(members, "members must be a sequence");
  if (seq == NULL) return -1;
  for (Py_ssize_t i = 0; *s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
    PyObject *m = PySequence_Fast_GET_ITEM(seq, i);
    PyObject *name = is_spec(m) ? item(m, "name") : NULL;
    PyObject *sub = is_spec(m) ? item(m, "descriptor") : NULL;
    const char *n = name != NULL && PyUnicode_Check(name) ? hy_utf8(name, "member name") : NULL;
    if (n == NULL || sub == NULL) {
      Py_DECREF(seq);
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a member needs a name and a descriptor");
      return -1;
    }
    /* One whose __init__ failed holds parts that a later __init__, run by
     * Python code while they are read, would free. */
    if (is_descriptor(sub) && ((HyDescriptorObject *)sub)->encoded == NULL) {
      Py_DECREF(seq);
      PyErr_SetString(PyExc_ValueError, "a member's Descriptor is not initialised");
      return -1;
    }
    HurrayDescriptor *member = hy_build_descriptor(st, sub, false);
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
    /* NO_BUFFER (None, or 2**32 - 1 as C decoded it) stays what it is, a
     * dense layout without data, which validation refuses: it was taken as
     * buffer 0, and an invalid descriptor came back valid from replace(). */
    if (rc == 0) s = hurray_descriptor_set_layout_dense(d, data, e);
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
  HurrayStatus s = per_channel ? hurray_descriptor_set_quant_per_channel_affine(
                                     d, axis, scale_buffer, scale_dtype, e)
                               : hurray_descriptor_set_quant_block_affine(
                                     d, axis, block, scale_buffer, scale_dtype, e);
  if (zp_buffer != HURRAY_NO_BUFFER && zero_point != 0) {
    PyErr_SetString(PyExc_ValueError,
                    "give either zero_point_buffer or an inline zero_point, not both");
    return -1;
  }
  if (zp_buffer == HURRAY_NO_BUFFER && item(q, "zero_point_dtype") != NULL) {
    PyErr_SetString(PyExc_ValueError, "zero_point_dtype needs a zero_point_buffer");
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

/* ---------------------------- packed and two-level fields (ADR-0024) */

/* Small unsigned integers (axes, lane orders) from a sequence. */
static int get_small_list(PyObject *v, const char *key, uint32_t *out, Py_ssize_t max,
                          Py_ssize_t *n_out) {
  PyObject *seq = hy_sequence_copy(v, key);
  if (seq == NULL) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  int rc = 0;
  if (n > max) {
    PyErr_Format(PyExc_ValueError, "%s: %zd entries exceed the limit of %zd", key, n, max);
    rc = -1;
  }
  for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
    char what[96];
    uint64_t x = 0;
    snprintf(what, sizeof what, "%.60s[%zd]", key, i);
    rc = hy_field_u64(PySequence_Fast_GET_ITEM(seq, i), 255, what, &x);
    out[i] = (uint32_t)x;
  }
  Py_DECREF(seq);
  *n_out = n;
  return rc;
}

/* Sets the code or zero-point packing from its three values (borrowed). */
static int set_packing(HurrayDescriptor *d, const char *key, bool zero_points, PyObject *word_bits,
                       PyObject *axis, PyObject *order, HurrayStatus *status, HurrayError *e) {
  uint64_t wb = 0, ax = 0;
  if (need(word_bits, "word_bits") < 0 ||
      hy_field_u64(word_bits, UINT64_MAX, "Packing.word_bits", &wb) < 0 ||
      (axis != NULL && axis != Py_None &&
       hy_field_u64(axis, UINT64_MAX, "Packing.axis", &ax) < 0)) {
    return -1;
  }
  uint32_t raw[32];
  uint8_t lanes[32];
  Py_ssize_t n = 0;
  if (order != NULL && order != Py_None &&
      get_small_list(order, "Packing.order", raw, 32, &n) < 0) {
    return -1;
  }
  if (wb == 0 && (ax != 0 || n != 0)) {
    PyErr_Format(PyExc_ValueError, "%s: a Packing of 0-bit words packs nothing: no axis or order",
                 key);
    return -1;
  }
  uint32_t bits = hurray_dtype_bits(zero_points ? hurray_descriptor_quant_zero_point_dtype(d)
                                                : hurray_descriptor_dtype(d));
  if (n != 0 && (bits == 0 || wb % bits != 0 || (uint64_t)n != wb / bits)) {
    PyErr_Format(PyExc_ValueError,
                 "%s.order: %zd entries; %llu-bit words of %u-bit elements "
                 "have %llu lanes",
                 key, n, (unsigned long long)wb, bits, (unsigned long long)(bits ? wb / bits : 0));
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) lanes[i] = (uint8_t)raw[i];
  uint32_t w32 = wb > 255 ? 255 : (uint32_t)wb, a32 = ax > 255 ? 255 : (uint32_t)ax;
  *status = zero_points
                ? hurray_descriptor_set_quant_zero_point_packing(d, w32, a32, n ? lanes : NULL, e)
                : hurray_descriptor_set_quant_code_packing(d, w32, a32, n ? lanes : NULL, e);
  return 0;
}

/* A packing from a Packing record: a dict given for one became a record
 * when its quantization record was made (_hy_records.c). */
static int build_packing(HurrayDescriptor *d, PyObject *q, const char *key, bool zero_points,
                         HurrayStatus *status, HurrayError *e) {
  PyObject *p = item(q, key);
  if (p == NULL) return 0;
  if (!is_record(p) || item(p, "word_bits") == NULL) {
    PyErr_Format(PyExc_TypeError, "%s: a Packing (word_bits, axis, order), not %R", key, p);
    return -1;
  }
  return set_packing(d, key, zero_points, item(p, "word_bits"), item(p, "axis"), item(p, "order"),
                     status, e);
}

static int build_storage_axes(HurrayDescriptor *d, PyObject *q, HurrayStatus *status,
                              HurrayError *e) {
  PyObject *v = item(q, "storage_axes");
  if (v == NULL) return 0;
  uint32_t axes[HURRAY_MAX_RANK];
  Py_ssize_t n = 0;
  if (get_small_list(v, "storage_axes", axes, HURRAY_MAX_RANK, &n) < 0) return -1;
  if ((uint32_t)n != hurray_descriptor_rank(d)) {
    PyErr_Format(PyExc_ValueError, "storage_axes: %zd entries for rank %u", n,
                 hurray_descriptor_rank(d));
    return -1;
  }
  *status = hurray_descriptor_set_quant_storage_axes(d, axes, e);
  return 0;
}

/* long: one setter per field group, in the order the C API wants, each only when given. */
static int build_packed(HurrayDescriptor *d, PyObject *q, HurrayStatus *status, HurrayError *e) {
  HurrayStatus s = HURRAY_OK;
  int64_t zp_offset;
  uint64_t axis2, block2, super_block;
  uint32_t gidx, codebook, scale_codebook, super_buffer;
  HurrayDType gidx_dtype, super_dtype;
  if (build_storage_axes(d, q, &s, e) < 0) return -1;
  if (s == HURRAY_OK && build_packing(d, q, "code_packing", false, &s, e) < 0) return -1;
  if (s == HURRAY_OK && build_packing(d, q, "zero_point_packing", true, &s, e) < 0) return -1;
  if (get_i64(q, "zero_point_offset", 0, &zp_offset) < 0 || get_u64(q, "axis2", 0, &axis2) < 0 ||
      get_u64(q, "block_size2", 0, &block2) < 0 || get_index(q, "group_index_buffer", &gidx) < 0 ||
      get_dtype(q, "group_index_dtype", true, &gidx_dtype) < 0 ||
      get_index(q, "codebook_buffer", &codebook) < 0 ||
      get_index(q, "scale_codebook_buffer", &scale_codebook) < 0 ||
      get_index(q, "super_scale_buffer", &super_buffer) < 0 ||
      get_dtype(q, "super_scale_dtype", true, &super_dtype) < 0 ||
      get_u64(q, "super_block_size", 0, &super_block) < 0) {
    return -1;
  }
  PyObject *op_name = item(q, "super_op"), *offset_value = item(q, "scale_offset");
  int op = 0;
  if (op_name != NULL) {
    op = enum_value(op_name, hy_super_op_name, HURRAY_SUPER_MULTIPLY, HURRAY_SUPER_DIVIDE,
                    "super_op");
    if (op < 0) return -1;
  }
  double offset = offset_value != NULL ? PyFloat_AsDouble(offset_value) : 0.0;
  if (PyErr_Occurred()) return -1;
  if (axis2 > UINT32_MAX) {
    PyErr_SetString(PyExc_OverflowError, "axis2 out of range");
    return -1;
  }
  /* Parts of a field given without the field: dropped from the encoding
   * while the record kept them, so refused. */
  const char *orphan = gidx == HURRAY_NO_BUFFER && item(q, "group_index_dtype") != NULL
                           ? "group_index_dtype needs a group_index_buffer"
                       : super_buffer == HURRAY_NO_BUFFER &&
                               (item(q, "super_scale_dtype") != NULL || op_name != NULL ||
                                super_block != 0)
                           ? "super_scale_dtype, super_op and super_block_size need a "
                             "super_scale_buffer"
                       : block2 == 0 && axis2 != 0 ? "axis2 needs a block_size2"
                                                   : NULL;
  if (orphan != NULL) {
    PyErr_SetString(PyExc_ValueError, orphan);
    return -1;
  }
  if (super_buffer != HURRAY_NO_BUFFER && op == 0) op = HURRAY_SUPER_MULTIPLY;
  if (s == HURRAY_OK && zp_offset != 0) {
    s = hurray_descriptor_set_quant_zero_point_offset(d, zp_offset, e);
  }
  if (s == HURRAY_OK && (axis2 != 0 || block2 != 0)) {
    s = hurray_descriptor_set_quant_block2(d, (uint32_t)axis2, block2, e);
  }
  if (s == HURRAY_OK && gidx != HURRAY_NO_BUFFER) {
    s = hurray_descriptor_set_quant_group_index(d, gidx, gidx_dtype, e);
  }
  if (s == HURRAY_OK && codebook != HURRAY_NO_BUFFER) {
    s = hurray_descriptor_set_quant_codebook(d, codebook, e);
  }
  if (s == HURRAY_OK && scale_codebook != HURRAY_NO_BUFFER) {
    s = hurray_descriptor_set_quant_scale_codebook(d, scale_codebook, e);
  }
  if (s == HURRAY_OK && (super_buffer != HURRAY_NO_BUFFER || offset != 0.0)) {
    s = hurray_descriptor_set_quant_super_scales(d, super_buffer, super_dtype, super_block,
                                                 (HurraySuperScaleOp)op, offset, e);
  }
  *status = s;
  return 0;
}

static int build_block_coded(ModuleState *st, HurrayDescriptor *d, PyObject *q, uint32_t axis,
                             uint64_t block, HurrayStatus *status, HurrayError *e) {
  PyObject *format = item(q, "format");
  const char *name = format != NULL && PyUnicode_Check(format)
                         ? hy_utf8(format, "quantization.format")
                         : NULL;
  if (name == NULL) {
    if (!PyErr_Occurred() && need(format, "format") == 0) {
      PyErr_Format(PyExc_TypeError, "quantization.format must be a str, not %R", format);
    }
    return -1;
  }
  uint32_t f = hurray_block_format_from_name(name), elements = 0;
  if (f == 0) {
    PyErr_Format(PyExc_ValueError, "unknown block format %R", format);
    return -1;
  }
  hurray_block_format_info(f, &elements, NULL, NULL);
  PyObject *given = item(q, "block_size");
  if (given != NULL && given != Py_None && block != elements) {
    snprintf(e->message, sizeof e->message,
             "quantization.block_size: %s blocks are %u elements, not %llu", name, elements,
             (unsigned long long)block);
    hy_raise_status(st, HURRAY_ERR_QUANT_BLOCK_SIZE, e);
    return -1;
  }
  *status = hurray_descriptor_set_quant_block_coded(d, (HurrayBlockFormat)f, axis, e);
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
  if (get_uint(q, "axis", 0, UINT32_MAX, &axis) < 0 || get_u64(q, "block_size", 0, &block) < 0 ||
      get_i64(q, "zero_point", 0, &zero_point) < 0) {
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
    int el = element == NULL ? -1
                             : enum_value(element, hy_mx_name, 1, HURRAY_MX_INT8, "MX element");
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
  } else if (strcmp(k, "block_coded") == 0) {
    if (build_block_coded(st, d, q, (uint32_t)axis, block, &s, e) < 0) return -1;
  } else {
    PyErr_Format(PyExc_TypeError, "not a quantization: %R", q);
    return -1;
  }
  bool packed_kind = k[0] == 'p' || strcmp(k, "block_affine") == 0 || strcmp(k, "nf4") == 0;
  if (s == HURRAY_OK && packed_kind && strcmp(k, "per_tensor_affine") != 0 &&
      build_packed(d, q, &s, e) < 0) {
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
    PyObject *seq = hy_sequence_copy(buffers, "buffers must be a sequence");
    if (seq == NULL) return -1;
    for (Py_ssize_t i = 0; s == HURRAY_OK && i < PySequence_Fast_GET_SIZE(seq); i++) {
      PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
      uint64_t size, alignment;
      PyObject *role = is_spec(b) ? item(b, "role") : NULL;
      PyObject *sync = is_spec(b) ? item(b, "sync_mode") : NULL;
      int r = role == NULL ? -1
                           : enum_value(role, hy_role_name, 1, HURRAY_ROLE_SUPER_SCALES, "role");
      int m = sync == NULL ? HURRAY_SYNC_READY
                           : enum_value(sync, hy_sync_name, 0, HURRAY_SYNC_EVENT, "sync_mode");
      if (r >= 0 && m >= 0 && item(b, "byte_size") == NULL) { /* None was taken as 0 */
        Py_DECREF(seq);
        PyErr_SetString(PyExc_TypeError, "a buffer's byte_size is an int, not None");
        return -1;
      }
      if (r < 0 || m < 0 || get_u64(b, "byte_size", 0, &size) < 0 ||
          get_u64(b, "alignment", 1, &alignment) < 0 ||
          hy_check_max(alignment, UINT32_MAX, "alignment") < 0) {
        Py_DECREF(seq);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a buffer needs a role");
        return -1;
      }
      s = hurray_descriptor_add_buffer(d, (HurrayBufferRole)r, size, (uint32_t)alignment,
                                       (HurraySyncMode)m, NULL, e);
    }
    Py_DECREF(seq);
  }
  *status = s;
  return 0;
}

/* 0 when `part` (not NULL) is a record of kind `kind`, else -1 with a
 * TypeError naming `what`: a part of another type was read field by field
 * as far as its names matched (statistics={"min": 1.0} dropped, a Member
 * taken as an extension) while the descriptor still showed it. */
static int check_part(ModuleState *st, PyObject *part, int kind, const char *what) {
  if (is_record(part) && hy_record_kind(st, Py_TYPE(part)) == kind) return 0;
  PyErr_Format(PyExc_TypeError, "%s must be a hurray.%s, not %.100s", what,
               hy_record_defs[kind].name, Py_TYPE(part)->tp_name);
  return -1;
}

static int build_root_parts(ModuleState *st, HurrayDescriptor *d, PyObject *spec, HurrayError *e) {
  HurrayStatus s = HURRAY_OK;
  static const struct {
    const char *name;
    int kind;
  } parts[] = {{"device", HY_DEVICE},
               {"statistics", HY_STATISTICS},
               {"shard", HY_SHARD},
               {"extension", HY_EXTENSION}};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    PyObject *part = item(spec, parts[i].name);
    if (part != NULL && check_part(st, part, parts[i].kind, parts[i].name) < 0) return -1;
  }
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
    uint64_t count;
    if ((v = item(stats, "min")) != NULL) hurray_descriptor_set_stat_min(d, PyFloat_AsDouble(v));
    if (!PyErr_Occurred() && (v = item(stats, "max")) != NULL)
      hurray_descriptor_set_stat_max(d, PyFloat_AsDouble(v));
    if (PyErr_Occurred()) return -1;
    if (get_uint(stats, "nan_count", UINT64_MAX, UINT64_MAX, &count) < 0) return -1;
    if (item(stats, "nan_count") != NULL) hurray_descriptor_set_stat_nan_count(d, count);
    if (get_uint(stats, "zero_count", UINT64_MAX, UINT64_MAX, &count) < 0) return -1;
    if (item(stats, "zero_count") != NULL) hurray_descriptor_set_stat_zero_count(d, count);
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

/* A composite member has no buffers, statistics, shard, extension or
 * device of its own (the root's apply; the encoding has no place for
 * them): given, they were dropped from the encoding while the Descriptor
 * object still showed them, so refused. */
static int refuse_member_root_parts(PyObject *spec) {
  static const char *const parts[] = {"statistics", "shard", "extension"};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
    if (item(spec, parts[i]) != NULL) {
      PyErr_Format(PyExc_ValueError,
                   "a composite member holds no %s of its own (the root descriptor's apply)",
                   parts[i]);
      return -1;
    }
  }
  PyObject *buffers = item(spec, "buffers");
  Py_ssize_t n = buffers != NULL ? PyObject_Length(buffers) : 0;
  if (n < 0) return -1;
  if (n > 0) {
    PyErr_SetString(PyExc_ValueError,
                    "a composite member holds no buffers of its own (it names the root's)");
    return -1;
  }
  PyObject *device = item(spec, "device");
  if (device != NULL && is_spec(device)) {
    int64_t type, id;
    PyObject *mc = item(device, "memory_class");
    if (get_i64(device, "type", 1, &type) < 0 || get_i64(device, "id", 0, &id) < 0) return -1;
    int host = mc == NULL ||
               (PyUnicode_Check(mc) && PyUnicode_CompareWithASCIIString(mc, "host") == 0);
    if (type != 1 || id != 0 || !host) {
      PyErr_SetString(PyExc_ValueError,
                      "a composite member holds no device of its own (the root descriptor's "
                      "applies)");
      return -1;
    }
  }
  return 0;
}

HurrayDescriptor *hy_build_descriptor(ModuleState *st, PyObject *spec, bool root) {
  if (!is_descriptor(spec)) {
    PyErr_Format(PyExc_TypeError, "not a Descriptor: %R", spec);
    return NULL;
  }
  HurrayError e = {0};
  HurrayDType dtype;
  uint64_t shape[HURRAY_MAX_RANK];
  Py_ssize_t rank = 0;
  if (!root && refuse_member_root_parts(spec) < 0) return NULL;
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
    PyObject *seq = hy_sequence_copy(strides, "strides must be a sequence");
    if (seq == NULL) goto fail;
    n = PySequence_Fast_GET_SIZE(seq);
    if (n != rank) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "strides need %zd entries", rank);
      goto fail;
    }
    for (Py_ssize_t i = 0; i < n && !PyErr_Occurred(); i++) {
      char what[64];
      snprintf(what, sizeof what, "Descriptor.strides[%zd]", i);
      (void)field_i64(PySequence_Fast_GET_ITEM(seq, i), what, (int64_t *)&raw[i]);
    }
    Py_DECREF(seq);
    if (PyErr_Occurred()) goto fail;
    s = hurray_descriptor_set_strides(d, (const int64_t *)raw, &e);
    if (s != HURRAY_OK) {
      hy_raise_status(st, s, &e);
      goto fail;
    }
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
