/*
 * _hurray.h: what the files of the _hurray extension share (private).
 *
 * The extension is split by concern, each file one of: _hy_module.c (module
 * set-up, exception classes, the status -> exception map), _hy_descriptor.c
 * (the _Descriptor type; _hy_build.c builds C descriptors from records,
 * _hy_read.c reads records from C descriptors), _hy_tensor.c (the Tensor
 * and buffer-view types, quantize), _hy_capsule.c (the __hurray__ capsule
 * protocol and DLPack), _hy_file.c (the File type), _hy_save.c (save),
 * _hy_records.c (the descriptor's parts as C records), _hy_kernels.c (C
 * library logic Python calls: packing, member extraction).
 */
#ifndef HURRAY_PY_HURRAY_H
#define HURRAY_PY_HURRAY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"
#include "../../src/core/descriptor_internal.h"
#include "_dlpack.h"
#include "_loading.h"
#include "_shared.h"
#include "_source.h"
#include "_guard.h"

#define CAPSULE_NAME HY_CAPSULE_NAME
#define USED_CAPSULE_NAME HY_USED_CAPSULE_NAME
#define STATUS_SLOTS 128

typedef HyCapsuleContext CapsuleContext;

/* ---- descriptor parts as C records (_hy_records.c) */
enum {
  HY_BUFFER,
  HY_DEVICE,
  HY_DENSE,
  HY_SPARSE,
  HY_PAGED,
  HY_MEMBER,
  HY_COMPOSITE,
  HY_PER_TENSOR_AFFINE,
  HY_PER_CHANNEL_AFFINE,
  HY_BLOCK_AFFINE,
  HY_NF4,
  HY_MXFP,
  HY_BLOCK_CODED,
  HY_STATISTICS,
  HY_SHARD,
  HY_EXTENSION,
  HY_PACKING,
  HY_RECORD_COUNT
};
#define HY_RECORD_MAX_FIELDS 24

typedef struct HyField {
  const char *name;
  int def; /* how the default is made: required, None, int, str, False, (), b"" */
  long ival;
  const char *sval;
} HyField;

/* One descriptor part: its Python name, its "kind" in the JSON form (layouts
 * and quantizations; NULL for others), and its fields in order. */
typedef struct HyRecordDef {
  const char *name;
  const char *kind;
  const char *doc;
  HyField fields[HY_RECORD_MAX_FIELDS];
} HyRecordDef;

typedef struct HyRecordObject {
  PyObject_HEAD PyObject *v[]; /* one per field, never NULL once built */
} HyRecordObject;

extern const HyRecordDef hy_record_defs[HY_RECORD_COUNT];

/* The Descriptor's own fields, in constructor order. */
enum {
  HY_D_DTYPE,
  HY_D_SHAPE,
  HY_D_STRIDES,
  HY_D_BYTE_OFFSET,
  HY_D_LAYOUT,
  HY_D_QUANTIZATION,
  HY_D_BUFFERS,
  HY_D_DEVICE,
  HY_D_STATISTICS,
  HY_D_SHARD,
  HY_D_EXTENSION,
  HY_D_COUNT
};

typedef struct HyDescriptorObject {
  PyObject_HEAD PyObject *f[HY_D_COUNT];
  PyObject *encoded;   /* bytes: the canonical encoding; NULL until initialised */
  HurrayDescriptor *c; /* the C descriptor, owned; made from `encoded` when first needed */
  bool initialising;   /* in __init__, which runs Python code (__index__, __iter__) */
} HyDescriptorObject;

typedef struct ModuleState {
  PyTypeObject *records[HY_RECORD_COUNT];
  PyTypeObject *descriptor_type; /* _Descriptor, the C base */
  PyObject *descriptor_class;    /* hurray.Descriptor, the Python subclass */
  PyTypeObject *tensor_type;
  PyTypeObject *view_type;
  PyTypeObject *file_type;
  PyObject *tensor_class; /* the Python subclass instances are made of */
  PyObject *error_base;
  PyObject *errors[STATUS_SLOTS];
} ModuleState;

extern struct PyModuleDef hy_module_def;

/* The state of the module that defined `type`, or NULL with an exception. */
ModuleState *hy_state_of_type(PyTypeObject *type);

/* The one error mapping: raises the class registered for `status` (an
 * OSError subclass when error->os_errno is set, with `filename`, may be NULL)
 * with `status` and `status_name` set; always returns NULL. */
PyObject *hy_raise_status_file(ModuleState *st, HurrayStatus status, const HurrayError *error,
                               PyObject *filename);
PyObject *hy_raise_status(ModuleState *st, HurrayStatus status, const HurrayError *error);

/* Names of enum values, as libhurray spells them ("?" when unknown). */
typedef const char *(*HyEnumName)(int value);
const char *hy_role_name(int v);
const char *hy_super_op_name(int v);
const char *hy_sync_name(int v);
const char *hy_memory_name(int v);
const char *hy_mx_name(int v);

/* Release callbacks for buffers owned by a Python object / a Py_buffer. */
void hy_release_pyobject(void *data, void *ctx);
void hy_release_pybuffer(void *data, void *ctx);

/* ---- records (_hy_records.c) */
int hy_records_add(PyObject *module, ModuleState *st);
int hy_record_kind(ModuleState *st, PyTypeObject *type); /* row of hy_record_defs, or -1 */
int hy_record_field(int record, const char *name);       /* field index, or -1 */
void hy_record_dealloc(PyObject *op);
/* Untracks `op` from the collector when none of its n values can be in a cycle. */
void hy_maybe_untrack(ModuleState *st, PyObject *op, PyObject *const *values, int n);
/* A new record of row `record`; values[i] NULL takes the field's default. */
PyObject *hy_record_new(ModuleState *st, int record, PyObject *const *values);

/* ---- descriptors: records -> C (_hy_build.c), C -> records (_hy_read.c) */
/* A new C descriptor from a Descriptor object (root: with its buffer table,
 * device, statistics, shard, extension); NULL with an exception. */
HurrayDescriptor *hy_build_descriptor(ModuleState *st, PyObject *spec, bool root);
/* A new `cls` instance whose fields are read from `d`. `encoded` (a new
 * reference, taken; NULL: encoded here) and `owned` (the C descriptor it
 * keeps; NULL: made from the encoding when needed) become the object's. */
PyObject *hy_descriptor_from_c(ModuleState *st, PyTypeObject *cls, const HurrayDescriptor *d,
                               PyObject *encoded, HurrayDescriptor *owned);

/* ---- the _Descriptor type (_hy_descriptor.c) */
extern PyType_Spec hy_descriptor_spec;
/* A hurray.Descriptor decoded from `encoded` (bytes-like). */
PyObject *hy_descriptor_object(ModuleState *st, PyObject *encoded);
PyObject *mod_set_descriptor_class(PyObject *module, PyObject *cls);
/* tuple(operator.index(x) for x in seq), a new reference: a float or a str
 * is a TypeError, never truncated or parsed. */
PyObject *hy_int_tuple(PyObject *seq);
PyObject *hy_encode_descriptor(ModuleState *st, const HurrayDescriptor *d);
HurrayDescriptor *hy_decode_descriptor(ModuleState *st, PyObject *obj); /* caller-owned */
PyObject *hy_descriptor_to_json(ModuleState *st, const HurrayDescriptor *d);
PyObject *mod_descriptor_validate(PyObject *module, PyObject *encoded);
PyObject *mod_descriptor_required_bytes(PyObject *module, PyObject *encoded);

/* ---- tensors (_hy_tensor.c) */
typedef struct TensorObject {
  PyObject_HEAD HurrayDescriptor *descriptor;
  HurrayBufferList *buffers;
  bool *writable; /* per buffer */
  /* a write would crash or change what must not change: a PROT_READ mapping,
   * or an exporter's read-only buffer. Not set for capsules, which cannot
   * say, so that a handoff stays zero-copy. */
  bool protected_memory;
  PyObject *weakreflist;
  PyObject *descriptor_cache; /* the Python Descriptor, built once on demand */
  /* Tensor(d, buffers)'s Py_buffer per buffer (owned by the buffers, freed
   * with them), so that tp_traverse sees the exporters they hold: a cycle
   * through one (an array whose attribute is the tensor) is collected.
   * NULL for tensors made any other way. */
  Py_buffer **views;
} TensorObject;
/* A zero-copy view of buffer i that keeps the tensor alive. */
typedef struct ViewObject {
  PyObject_HEAD PyObject *tensor;
  Py_ssize_t index;
} ViewObject;

extern PyType_Spec hy_tensor_spec;
extern PyType_Spec hy_view_spec;
TensorObject *hy_tensor_alloc(ModuleState *st, PyTypeObject *type);
/* Takes ownership of d and list (destroyed on failure). */
int hy_tensor_adopt(TensorObject *self, HurrayDescriptor *d, HurrayBufferList *list,
                    bool writable);
int hy_tensor_ready(TensorObject *self);
/* A fresh handle for buffer i of `owner` (its pointer, size, alignment,
 * sync mode and device) that keeps `owner` alive until it is released;
 * *out is the caller's on success. */
HurrayStatus hy_buffer_share(TensorObject *owner, size_t i, HurrayBuffer **out, HurrayError *e);
/* The buffer protocol of Tensor (_hy_many.c): a plain dense tensor's elements. */
int hy_tensor_getbuffer(PyObject *op, Py_buffer *view, int flags);
void hy_tensor_releasebuffer(PyObject *op, Py_buffer *view);
PyObject *mod_quantize(PyObject *module, PyObject *args);
/* A shape sequence into shape[HURRAY_MAX_RANK]; -1 with an exception. */
int hy_shape(PyObject *obj, uint64_t *shape, Py_ssize_t *rank_out);
PyObject *mod_set_tensor_class(PyObject *module, PyObject *cls);

/* ---- capsule protocol and DLPack (_hy_capsule.c) */
PyObject *tensor_dunder_hurray(PyObject *op, PyObject *args, PyObject *kwargs);
PyObject *tensor_from_capsule(PyObject *cls, PyObject *capsule);
PyObject *tensor_dlpack(PyObject *op, PyObject *args, PyObject *kwargs);
PyObject *tensor_dlpack_device(PyObject *op, PyObject *unused);

/* ---- files (_hy_file.c) */
extern PyType_Spec hy_file_spec;
/* _after_fork_in_child(): registered with os.register_at_fork by _files.py. */
PyObject *hy_after_fork_in_child(PyObject *module, PyObject *unused);

/* ---- kernels from the C library (_hy_kernels.c) */
PyObject *mod_unpack(PyObject *module, PyObject *args);
PyObject *mod_pack(PyObject *module, PyObject *args);
PyObject *mod_member(PyObject *module, PyObject *args);
/* _check_output_bytes(stored, output): the output-size rule for an output
 * gathered from several tensors (load_sharded); LimitError beyond it. */
PyObject *mod_check_output_bytes(PyObject *module, PyObject *args);
PyObject *mod_check_not_mapped_from(PyObject *module, PyObject *args);

/* ---- save (_hy_save.c) */
PyObject *mod_save(PyObject *module, PyObject *args);

#endif
