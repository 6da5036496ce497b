/*
 * _hy_records.c: the parts of a descriptor (Buffer, Device, Dense, Sparse,
 * ..., Extension) as immutable C records, one heap type per row of
 * hy_record_defs, and the _Descriptor base type that holds them.
 *
 * A record behaves like the frozen dataclass it replaces: positional or
 * keyword construction with defaults, read-only attributes, equality and
 * hash over the field values, a dataclass-style repr, pickling. Adding a
 * field to a part is one line in hy_record_defs (and one in the code that
 * reads or writes the C descriptor, _hy_descriptor.c).
 */
#include "_hurray.h"

/* Field defaults. */
enum { REQ, NONE, INT, STR, FALSE_, EMPTY, BYTES };

#define F(n, kind, ival, sval) {n, kind, ival, sval}
#define REQUIRED(n) F(n, REQ, 0, NULL)
#define OR_NONE(n) F(n, NONE, 0, NULL)
#define OR_INT(n, v) F(n, INT, v, NULL)
#define OR_STR(n, v) F(n, STR, 0, v)

const HyRecordDef hy_record_defs[HY_RECORD_COUNT] = {
    [HY_BUFFER] = {"Buffer",
                   NULL,
                   "One entry of the buffer table. `alignment` is what the pointer must honour in "
                   "memory; the default, 1, asks nothing.",
                   {REQUIRED("role"), REQUIRED("byte_size"), OR_INT("alignment", 1),
                    OR_STR("sync_mode", "ready")}},
    [HY_DEVICE] = {"Device",
                   NULL,
                   "DLPack device type (1 = CPU, 2 = CUDA, ...), id, memory class.",
                   {OR_INT("type", 1), OR_INT("id", 0), OR_STR("memory_class", "host")}},
    [HY_DENSE] = {"Dense", "dense", NULL, {OR_INT("data_buffer", 0)}},
    [HY_SPARSE] = {"Sparse",
                   "sparse",
                   "format: coo, csr, csc or bsr.",
                   {REQUIRED("format"), REQUIRED("index_dtype"), REQUIRED("nnz"),
                    OR_INT("values_buffer", 0), OR_NONE("indptr_buffer"),
                    OR_NONE("indices_buffer"), OR_NONE("index_buffers"), OR_NONE("block_shape"),
                    F("canonical", FALSE_, 0, NULL)}},
    [HY_PAGED] = {"Paged",
                  "paged",
                  NULL,
                  {REQUIRED("axis"), REQUIRED("page_size"), REQUIRED("num_pages"),
                   OR_STR("table_dtype", "int32"), OR_INT("pool_buffer", 0),
                   OR_INT("table_buffer", 1)}},
    [HY_MEMBER] = {"Member", NULL, NULL, {REQUIRED("name"), REQUIRED("descriptor")}},
    [HY_COMPOSITE] = {"Composite", "composite", NULL, {F("members", EMPTY, 0, NULL)}},
    [HY_PER_TENSOR_AFFINE] = {"PerTensorAffine",
                              "per_tensor_affine",
                              NULL,
                              {REQUIRED("scale"), OR_INT("zero_point", 0)}},
    [HY_PER_CHANNEL_AFFINE] = {"PerChannelAffine",
                               "per_channel_affine",
                               NULL,
                               {REQUIRED("axis"), REQUIRED("scale_buffer"),
                                OR_STR("scale_dtype", "float32"), OR_NONE("zero_point_buffer"),
                                OR_NONE("zero_point_dtype"), OR_INT("zero_point", 0),
                                OR_NONE("storage_axes"), OR_NONE("code_packing"),
                                OR_NONE("zero_point_packing"), OR_INT("zero_point_offset", 0),
                                OR_NONE("codebook_buffer"), OR_NONE("scale_codebook_buffer"),
                                OR_NONE("super_scale_buffer"), OR_NONE("super_scale_dtype"),
                                OR_INT("super_block_size", 0), OR_NONE("super_op"),
                                OR_INT("scale_offset", 0)}},
    [HY_BLOCK_AFFINE] = {"BlockAffine",
                         "block_affine",
                         NULL,
                         {REQUIRED("axis"),
                          REQUIRED("block_size"),
                          REQUIRED("scale_buffer"),
                          OR_STR("scale_dtype", "float16"),
                          OR_NONE("zero_point_buffer"),
                          OR_NONE("zero_point_dtype"),
                          OR_INT("zero_point", 0),
                          OR_NONE("storage_axes"),
                          OR_NONE("code_packing"),
                          OR_NONE("zero_point_packing"),
                          OR_INT("zero_point_offset", 0),
                          OR_INT("axis2", 0),
                          OR_INT("block_size2", 0),
                          OR_NONE("group_index_buffer"),
                          OR_NONE("group_index_dtype"),
                          OR_NONE("codebook_buffer"),
                          OR_NONE("scale_codebook_buffer"),
                          OR_NONE("super_scale_buffer"),
                          OR_NONE("super_scale_dtype"),
                          OR_INT("super_block_size", 0),
                          OR_NONE("super_op"),
                          OR_INT("scale_offset", 0)}},
    [HY_NF4] = {"Nf4",
                "nf4",
                NULL,
                {REQUIRED("block_size"), REQUIRED("absmax_buffer"),
                 OR_STR("absmax_dtype", "float32"), OR_NONE("code_packing"),
                 OR_NONE("codebook_buffer"), OR_NONE("scale_codebook_buffer"),
                 OR_NONE("super_scale_buffer"), OR_NONE("super_scale_dtype"),
                 OR_INT("super_block_size", 0), OR_NONE("super_op"), OR_INT("scale_offset", 0)}},
    [HY_MXFP] = {"Mxfp",
                 "mx",
                 "OCP MX: element is fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4_e2m1 or int8.",
                 {REQUIRED("element"), REQUIRED("axis"), REQUIRED("scale_buffer"),
                  OR_INT("block_size", 32)}},
    [HY_BLOCK_CODED] =
        {"BlockCoded",
         "block_coded",
         "Blocks of a named format (e.g. \"ggml_q4_k\") that carry their own scales, "
         "in the data buffer (dtype uint8), along the last axis; block_size is the "
         "format's, filled in when not given.",
         {REQUIRED("format"), REQUIRED("axis"), OR_NONE("block_size")}},
    [HY_STATISTICS] = {"Statistics",
                       NULL,
                       NULL,
                       {OR_NONE("min"), OR_NONE("max"), OR_NONE("nan_count"),
                        OR_NONE("zero_count")}},
    [HY_SHARD] = {"Shard", NULL, NULL, {REQUIRED("global_shape"), REQUIRED("offsets")}},
    [HY_EXTENSION] = {"Extension", NULL, NULL, {REQUIRED("name"), F("metadata", BYTES, 0, NULL)}},
    [HY_PACKING] = {"Packing",
                    NULL,
                    "Codes or zero points packed in little-endian words of word_bits (8, 16 or "
                    "32), word_bits / bits lanes per word running along storage axis `axis`; "
                    "lane j holds element order[j] of its group (None: the identity).",
                    {REQUIRED("word_bits"), OR_INT("axis", 0), OR_NONE("order")}},
};

int hy_record_field(int record, const char *name) {
  const HyRecordDef *def = &hy_record_defs[record];
  for (int i = 0; i < HY_RECORD_MAX_FIELDS && def->fields[i].name != NULL; i++) {
    if (strcmp(def->fields[i].name, name) == 0) return i;
  }
  return -1;
}

static int field_count(const HyRecordDef *def) {
  int n = 0;
  while (n < HY_RECORD_MAX_FIELDS && def->fields[n].name != NULL) n++;
  return n;
}

/* Which row of hy_record_defs `type` was made from, or -1. */
int hy_record_kind(ModuleState *st, PyTypeObject *type) {
  for (int i = 0; i < HY_RECORD_COUNT; i++) {
    if (st->records[i] == type) return i;
  }
  return -1;
}

static PyObject *default_value(const HyField *f) {
  switch (f->def) {
    case INT: return PyLong_FromLong(f->ival);
    case STR: return PyUnicode_FromString(f->sval);
    case FALSE_: Py_RETURN_FALSE;
    case EMPTY: return PyTuple_New(0);
    case BYTES: return PyBytes_FromStringAndSize("", 0);
    default: Py_RETURN_NONE;
  }
}

PyObject *hy_record_new(ModuleState *st, int record, PyObject *const *values) {
  PyTypeObject *type = st->records[record];
  HyRecordObject *self = (HyRecordObject *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  int n = field_count(&hy_record_defs[record]);
  for (int i = 0; i < n; i++) {
    self->v[i] = values[i] != NULL ? Py_NewRef(values[i])
                                   : default_value(&hy_record_defs[record].fields[i]);
    if (self->v[i] == NULL) {
      Py_DECREF(self);
      return NULL;
    }
  }
  hy_maybe_untrack(st, (PyObject *)self, self->v, n);
  return (PyObject *)self;
}

/* Records and descriptors cannot be part of a cycle unless a value can:
 * like tuples, they leave the collector's lists when every value is atomic
 * or an immutable container that left them too (a tuple, a record, a
 * descriptor). Any other container may join a cycle later (a dict, a list),
 * so its holder stays tracked. A descriptor holds tens of such objects;
 * tracked, they make the collector's passes over 20,000 descriptors most of
 * the cost of reading them. */
void hy_maybe_untrack(ModuleState *st, PyObject *op, PyObject *const *values, int n) {
  /* An instance of a user's subclass may hold more than its values (a
   * __dict__ or __slots__ that can point back at it), and it refers to
   * its class, which a class made at run time may close into a cycle (a
   * class attribute holding an instance): only the package's own
   * descriptor classes qualify, as for tensors (_hy_tensor.c). */
  PyTypeObject *type = Py_TYPE(op);
  if (type->tp_dictoffset != 0 ||
      (PyObject_TypeCheck(op, st->descriptor_type) && type != st->descriptor_type &&
       (PyObject *)type != st->descriptor_class)) {
    return;
  }
  for (int i = 0; i < n; i++) {
    PyObject *v = values[i];
    if (v == NULL || !PyObject_IS_GC(v)) continue;
    bool immutable = PyTuple_CheckExact(v) || Py_TYPE(v)->tp_dealloc == hy_record_dealloc ||
                     PyObject_TypeCheck(v, st->descriptor_type);
    if (!immutable) return;
    if (PyTuple_CheckExact(v) && PyObject_GC_IsTracked(v)) {
      hy_maybe_untrack(st, v, &PyTuple_GET_ITEM(v, 0), (int)PyTuple_GET_SIZE(v));
    }
    if (PyObject_GC_IsTracked(v)) return;
  }
  PyObject_GC_UnTrack(op);
}

static int record_of(PyObject *op, ModuleState **st_out) {
  ModuleState *st = hy_state_of_type(Py_TYPE(op));
  if (st == NULL) return -1;
  if (st_out != NULL) *st_out = st;
  return hy_record_kind(st, Py_TYPE(op));
}

/* A field value as the record keeps it: a list becomes a tuple, bytes-like
 * metadata bytes, and a dict given for a packing a Packing record. The caller's
 * mutable object would otherwise stay inside an immutable record, and
 * emptying it later would change what the record, and the descriptor that
 * holds it, show. New reference. */
static PyObject *settled(ModuleState *st, const HyField *f, PyObject *v) {
  if (PyList_Check(v)) return PyList_AsTuple(v);
  /* A generator or map object, read once here: every build of a descriptor
   * read it again, and the second found it used up (a composite encoded
   * with 2 members listed none, and replace() dropped them). */
  if (PyIter_Check(v)) return PySequence_Tuple(v);
  /* Bytes before integers: a numpy array has __index__ too. None is no
   * bytes, as a file gives the field back (b""). */
  if (f->def == BYTES && v == Py_None) return PyBytes_FromStringAndSize(NULL, 0);
  if (f->def == BYTES && !PyBytes_Check(v) && PyObject_CheckBuffer(v)) {
    /* A numpy number exports a buffer too, of no dimensions: 5 as
     * np.int64 is no more bytes than 5 is. A 0-d array of bytes
     * (np.array(b"abc"), np.void) is bytes. */
    Py_buffer view;
    if (PyObject_GetBuffer(v, &view, PyBUF_FULL_RO) < 0) return NULL;
    const char *format = view.format != NULL ? view.format : "B";
    format += strspn(format, "@=<>!");
    bool number = view.ndim == 0 && *format != '\0' && strchr("?bBhHiIlLqQnNefdgZ", *format);
    PyBuffer_Release(&view);
    if (number) {
      return PyErr_Format(PyExc_TypeError, "%s must be bytes-like, not %.100s", f->name,
                          Py_TYPE(v)->tp_name);
    }
    return PyBytes_FromObject(v);
  }
  /* An integer given through __index__ (numpy's, or any object's) is read
   * once, not at every build, where a stateful one could differ from what
   * the record shows. */
  if (!PyLong_Check(v) && PyIndex_Check(v)) return PyNumber_Index(v);
  size_t len = strlen(f->name);
  if (PyDict_Check(v) && len > 8 && strcmp(f->name + len - 8, "_packing") == 0) {
    PyObject *kwargs = PyDict_Copy(v), *args = PyTuple_New(0);
    PyObject *out = kwargs != NULL && args != NULL
                        ? PyObject_Call((PyObject *)st->records[HY_PACKING], args, kwargs)
                        : NULL;
    Py_XDECREF(kwargs);
    Py_XDECREF(args);
    return out;
  }
  return Py_NewRef(v);
}

static PyObject *record_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  ModuleState *st = hy_state_of_type(type);
  if (st == NULL) return NULL;
  int record = hy_record_kind(st, type);
  if (record < 0) return PyErr_Format(PyExc_TypeError, "%s cannot be subclassed", type->tp_name);
  const HyRecordDef *def = &hy_record_defs[record];
  int n = field_count(def);
  PyObject *values[HY_RECORD_MAX_FIELDS] = {0};
  Py_ssize_t nargs = PyTuple_GET_SIZE(args);
  if (nargs > n) {
    return PyErr_Format(PyExc_TypeError, "%s() takes %d positional arguments but %zd were given",
                        def->name, n, nargs);
  }
  for (Py_ssize_t i = 0; i < nargs; i++) values[i] = PyTuple_GET_ITEM(args, i);
  if (kwargs != NULL) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(kwargs, &pos, &key, &value)) {
      const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
      int i = k != NULL ? hy_record_field(record, k) : -1;
      if (i < 0) {
        return PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R",
                            def->name, key);
      }
      if (values[i] != NULL) {
        return PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'",
                            def->name, def->fields[i].name);
      }
      values[i] = value;
    }
  }
  for (int i = 0; i < n; i++) {
    if (values[i] == NULL && def->fields[i].def == REQ) {
      return PyErr_Format(PyExc_TypeError, "%s() missing required argument: '%s'", def->name,
                          def->fields[i].name);
    }
  }
  /* Strong references: settled() runs Python code (__index__, __iter__),
   * which may empty the keyword dict that holds the later values. */
  PyObject *held[HY_RECORD_MAX_FIELDS] = {0};
  for (int i = 0; i < n; i++) held[i] = Py_XNewRef(values[i]);
  PyObject *given[HY_RECORD_MAX_FIELDS] = {0};
  for (int i = 0; i < n; i++) {
    if (held[i] == NULL) continue;
    given[i] = settled(st, &def->fields[i], held[i]);
    if (given[i] == NULL) {
      for (int j = 0; j < n; j++) {
        Py_XDECREF(given[j]);
        Py_XDECREF(held[j]);
      }
      return NULL;
    }
    values[i] = given[i];
  }
  PyObject *filled = NULL;
  if (record == HY_BLOCK_CODED && (values[2] == NULL || values[2] == Py_None)) {
    /* The block size follows from the format: fill it in, as C would. */
    const char *name = values[0] != NULL && PyUnicode_Check(values[0])
                           ? PyUnicode_AsUTF8(values[0])
                           : NULL;
    uint32_t elements = 0;
    if (name != NULL &&
        hurray_block_format_info(hurray_block_format_from_name(name), &elements, NULL, NULL)) {
      filled = PyLong_FromUnsignedLong(elements);
      values[2] = filled;
    }
    if (filled != NULL || !PyErr_ExceptionMatches(PyExc_MemoryError)) PyErr_Clear();
  }
  PyObject *out = PyErr_Occurred() ? NULL : hy_record_new(st, record, values);
  Py_XDECREF(filled);
  for (int i = 0; i < n; i++) {
    Py_XDECREF(given[i]);
    Py_XDECREF(held[i]);
  }
  return out;
}

static int record_traverse(PyObject *op, visitproc visit, void *arg) {
  HyRecordObject *self = (HyRecordObject *)op;
  Py_VISIT(Py_TYPE(op));
  Py_ssize_t n = (Py_TYPE(op)->tp_basicsize - (Py_ssize_t)sizeof(HyRecordObject)) /
                 (Py_ssize_t)sizeof(PyObject *);
  for (Py_ssize_t i = 0; i < n; i++) Py_VISIT(self->v[i]);
  return 0;
}

static int record_clear(PyObject *op) {
  HyRecordObject *self = (HyRecordObject *)op;
  Py_ssize_t n = (Py_TYPE(op)->tp_basicsize - (Py_ssize_t)sizeof(HyRecordObject)) /
                 (Py_ssize_t)sizeof(PyObject *);
  for (Py_ssize_t i = 0; i < n; i++) Py_CLEAR(self->v[i]);
  return 0;
}

void hy_record_dealloc(PyObject *op) {
  PyTypeObject *type = Py_TYPE(op);
  PyObject_GC_UnTrack(op);
  record_clear(op);
  type->tp_free(op);
  Py_DECREF(type);
}

/* The field values as a tuple: what eq, hash and pickling work on. */
static PyObject *record_values(PyObject *op) {
  HyRecordObject *self = (HyRecordObject *)op;
  Py_ssize_t n = (Py_TYPE(op)->tp_basicsize - (Py_ssize_t)sizeof(HyRecordObject)) /
                 (Py_ssize_t)sizeof(PyObject *);
  PyObject *t = PyTuple_New(n);
  for (Py_ssize_t i = 0; t != NULL && i < n; i++) PyTuple_SET_ITEM(t, i, Py_NewRef(self->v[i]));
  return t;
}

static PyObject *record_richcompare(PyObject *a, PyObject *b, int op) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != Py_TYPE(b)) Py_RETURN_NOTIMPLEMENTED;
  PyObject *ta = record_values(a), *tb = ta != NULL ? record_values(b) : NULL;
  PyObject *out = tb != NULL ? PyObject_RichCompare(ta, tb, op) : NULL;
  Py_XDECREF(ta);
  Py_XDECREF(tb);
  return out;
}

static Py_hash_t record_hash(PyObject *op) {
  PyObject *t = record_values(op);
  if (t == NULL) return -1;
  Py_hash_t h = PyObject_Hash(t);
  Py_DECREF(t);
  return h;
}

static PyObject *record_repr(PyObject *op) {
  int record = record_of(op, NULL);
  if (record < 0) return NULL;
  const HyRecordDef *def = &hy_record_defs[record];
  HyRecordObject *self = (HyRecordObject *)op;
  PyObject *parts = PyList_New(0);
  for (int i = 0; parts != NULL && i < field_count(def); i++) {
    PyObject *p = PyUnicode_FromFormat("%s=%R", def->fields[i].name, self->v[i]);
    if (p == NULL || PyList_Append(parts, p) < 0) Py_CLEAR(parts);
    Py_XDECREF(p);
  }
  if (parts == NULL) return NULL;
  PyObject *sep = PyUnicode_FromString(", ");
  PyObject *body = sep != NULL ? PyUnicode_Join(sep, parts) : NULL;
  Py_XDECREF(sep);
  Py_DECREF(parts);
  if (body == NULL) return NULL;
  PyObject *out = PyUnicode_FromFormat("%s(%U)", def->name, body);
  Py_DECREF(body);
  return out;
}

static PyObject *record_reduce(PyObject *op, PyObject *unused) {
  (void)unused;
  PyObject *t = record_values(op);
  return t != NULL ? Py_BuildValue("(ON)", (PyObject *)Py_TYPE(op), t) : NULL;
}

static PyMethodDef record_methods[] = {
    {"__reduce__", record_reduce, METH_NOARGS, "pickled as the type and its field values"},
    {NULL},
};

/* Static storage for what each type's spec points at. */
static PyMemberDef record_members[HY_RECORD_COUNT][HY_RECORD_MAX_FIELDS + 1];
static char record_names[HY_RECORD_COUNT][48];

int hy_records_add(PyObject *module, ModuleState *st) {
  for (int r = 0; r < HY_RECORD_COUNT; r++) {
    const HyRecordDef *def = &hy_record_defs[r];
    int n = field_count(def);
    for (int i = 0; i < n; i++) {
      record_members[r][i] = (PyMemberDef){
          (char *)def->fields[i].name, T_OBJECT_EX,
          (Py_ssize_t)(offsetof(HyRecordObject, v) + (size_t)i * sizeof(PyObject *)), READONLY,
          NULL};
    }
    record_members[r][n] = (PyMemberDef){NULL};
    snprintf(record_names[r], sizeof record_names[r], "hurray.%s", def->name);
    PyType_Slot slots[] = {
        {Py_tp_new, record_tp_new},
        {Py_tp_dealloc, hy_record_dealloc},
        {Py_tp_traverse, record_traverse},
        {Py_tp_clear, record_clear},
        {Py_tp_richcompare, record_richcompare},
        {Py_tp_hash, record_hash},
        {Py_tp_repr, record_repr},
        {Py_tp_methods, record_methods},
        {Py_tp_members, record_members[r]},
        {Py_tp_doc, (void *)(def->doc != NULL ? def->doc : def->name)},
        {0, NULL},
    };
    PyType_Spec spec = {record_names[r],
                        (int)(sizeof(HyRecordObject) + (size_t)n * sizeof(PyObject *)), 0,
                        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, slots};
    PyObject *type = PyType_FromModuleAndSpec(module, &spec, NULL);
    if (type == NULL) return -1;
    st->records[r] = (PyTypeObject *)type;
    PyObject *match = PyTuple_New(n);
    for (int i = 0; match != NULL && i < n; i++) {
      PyObject *field = PyUnicode_FromString(def->fields[i].name);
      if (field == NULL) Py_CLEAR(match); /* never a tuple holding NULL */
      else PyTuple_SET_ITEM(match, i, field);
    }
    PyObject *kind = def->kind != NULL ? PyUnicode_FromString(def->kind) : Py_NewRef(Py_None);
    PyObject *defaults = PyDict_New(); /* {field: default} of the optional fields */
    for (int i = 0; defaults != NULL && i < n; i++) {
      if (def->fields[i].def == REQ) continue;
      PyObject *v = default_value(&def->fields[i]);
      if (v == NULL || PyDict_SetItemString(defaults, def->fields[i].name, v) < 0) {
        Py_CLEAR(defaults);
      }
      Py_XDECREF(v);
    }
    int rc = match == NULL || kind == NULL || defaults == NULL ||
                     PyObject_SetAttrString(type, "__match_args__", match) < 0 ||
                     PyObject_SetAttrString(type, "_kind", kind) < 0 ||
                     PyObject_SetAttrString(type, "_field_defaults", defaults) < 0 ||
                     PyModule_AddObjectRef(module, def->name, type) < 0
                 ? -1
                 : 0;
    Py_XDECREF(match);
    Py_XDECREF(kind);
    Py_XDECREF(defaults);
    if (rc < 0) return -1;
  }
  return 0;
}
