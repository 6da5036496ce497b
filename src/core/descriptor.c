/*
 * HurrayDescriptor: construction, setters and accessors. Consistency rules
 * live in validate.c, the wire format in codec.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "descriptor_internal.h"
#include "error.h"

/* ----------------------------------------------------------- enum helpers */

bool hurray__role_known(uint32_t role) {
  return role >= HURRAY_ROLE_DATA && role <= HURRAY_ROLE_SUPER_SCALES;
}

bool hurray__sync_mode_known(uint32_t mode) { return mode <= HURRAY_SYNC_EVENT; }

bool hurray__memory_class_known(uint32_t memory_class) {
  return memory_class >= HURRAY_MEMORY_HOST && memory_class <= HURRAY_MEMORY_MANAGED;
}

bool hurray__mx_element_known(uint32_t element) {
  return element >= HURRAY_MX_FP8_E4M3 && element <= HURRAY_MX_INT8;
}

const char *hurray__role_name(HurrayBufferRole role) {
  static const char *const names[] = {"?",          "data",        "scales",   "zero_points",
                                      "values",     "indices",     "indptr",   "page_pool",
                                      "page_table", "group_index", "codebook", "super_scales"};
  return hurray__role_known(role) ? names[role] : "?";
}

const char *hurray__sync_mode_name(HurraySyncMode mode) {
  static const char *const names[] = {"ready", "stream", "event"};
  return hurray__sync_mode_known(mode) ? names[mode] : "?";
}

const char *hurray__memory_class_name(HurrayMemoryClass memory_class) {
  static const char *const names[] = {"?", "host", "host_pinned", "device", "managed"};
  return hurray__memory_class_known(memory_class) ? names[memory_class] : "?";
}

const char *hurray__mx_element_name(HurrayMxElement element) {
  static const char *const names[] = {"?",        "fp8_e4m3", "fp8_e5m2", "fp6_e3m2",
                                      "fp6_e2m3", "fp4_e2m1", "int8"};
  return hurray__mx_element_known(element) ? names[element] : "?";
}

const char *hurray__sparse_format_name(HurraySparseFormat format) {
  static const char *const names[] = {"?", "coo", "csr", "csc", "bsr"};
  return (format >= HURRAY_SPARSE_COO && format <= HURRAY_SPARSE_BSR) ? names[format] : "?";
}

const char *hurray__quant_kind_name(HurrayQuantKind kind) {
  static const char *const names[] = {
      "none", "per_tensor_affine", "per_channel_affine", "block_affine", "nf4",
      "mx",   "block_coded"};
  return ((unsigned)kind <= HURRAY_QUANT_BLOCK_CODED) ? names[kind] : "?";
}

HurrayDType hurray__mx_element_dtype(HurrayMxElement element) {
  switch (element) {
    case HURRAY_MX_FP8_E4M3: return HURRAY_DTYPE_FLOAT8_E4M3FN;
    case HURRAY_MX_FP8_E5M2: return HURRAY_DTYPE_FLOAT8_E5M2;
    case HURRAY_MX_FP6_E3M2: return HURRAY_DTYPE_FLOAT6_E3M2FN;
    case HURRAY_MX_FP6_E2M3: return HURRAY_DTYPE_FLOAT6_E2M3FN;
    case HURRAY_MX_FP4_E2M1: return HURRAY_DTYPE_FLOAT4_E2M1FN;
    case HURRAY_MX_INT8: return HURRAY_DTYPE_INT8;
  }
  return HURRAY_DTYPE_INVALID;
}

bool hurray__utf8_valid(const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < len) {
    unsigned char c = p[i];
    size_t extra;
    uint32_t cp;
    if (c == 0) {
      return false;
    } else if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (len - i <= extra) {
      return false;
    }
    for (size_t k = 1; k <= extra; k++) {
      if ((p[i + k] & 0xC0) != 0x80) {
        return false;
      }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    /* Reject overlong forms, surrogates and values past U+10FFFF. */
    static const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

/* -------------------------------------------------------- create/destroy */

static void layout_reset(HurrayLayout *layout) {
  for (uint32_t i = 0; i < layout->member_count; i++) {
    free(layout->members[i].name);
    hurray_descriptor_destroy(layout->members[i].descriptor);
  }
  free(layout->members);
  free(layout->coo_index_buffers);
  memset(layout, 0, sizeof *layout);
  layout->indptr_buffer = HURRAY_NO_BUFFER;
  layout->indices_buffer = HURRAY_NO_BUFFER;
  layout->table_buffer = HURRAY_NO_BUFFER;
}

bool hurray__layout_add_coo(HurrayLayout *l) {
  if (l->coo_index_buffers == NULL &&
      (l->coo_index_buffers = malloc(HURRAY_MAX_RANK * sizeof *l->coo_index_buffers)) == NULL) {
    return false;
  }
  for (uint32_t i = 0; i < HURRAY_MAX_RANK; i++) l->coo_index_buffers[i] = HURRAY_NO_BUFFER;
  return true;
}

const HurrayQuantStorage hurray__quant_storage_none = {0};

HurrayQuantStorage *hurray__quant_storage_own(HurrayQuant *q) {
  if (q->storage == NULL) q->storage = calloc(1, sizeof *q->storage);
  return q->storage;
}

static void quant_reset(HurrayQuant *quant) {
  free(quant->storage);
  memset(quant, 0, sizeof *quant);
  quant->kind = HURRAY_QUANT_NONE;
  quant->scale_buffer = HURRAY_NO_BUFFER;
  quant->zero_point_buffer = HURRAY_NO_BUFFER;
  quant->group_index_buffer = HURRAY_NO_BUFFER;
  quant->codebook_buffer = HURRAY_NO_BUFFER;
  quant->scale_codebook_buffer = HURRAY_NO_BUFFER;
  quant->super_scale_buffer = HURRAY_NO_BUFFER;
}

HurrayDescriptor *hurray__descriptor_new(void) {
  HurrayDescriptor *d = calloc(1, sizeof *d);
  if (d == NULL) {
    return NULL;
  }
  d->shape = d->shape_inline;
  layout_reset(&d->layout);
  d->layout.kind = HURRAY_LAYOUT_DENSE;
  d->layout.data_buffer = 0;
  quant_reset(&d->quant);
  d->device_type = HURRAY_DEVICE_CPU;
  d->device_id = 0;
  d->memory_class = HURRAY_MEMORY_HOST;
  return d;
}

bool hurray__descriptor_reserve_buffers(HurrayDescriptor *d, uint32_t count) {
  if (count <= d->buffer_capacity) return true;
  if (d->buffers == NULL && count <= HURRAY__BUFFERS_INLINE) {
    d->buffers = d->buffers_inline;
    d->buffer_capacity = HURRAY__BUFFERS_INLINE;
    return true;
  }
  HurrayBufferEntry *grown = malloc((size_t)count * sizeof *grown);
  if (grown == NULL) return false;
  if (d->buffer_count > 0) memcpy(grown, d->buffers, d->buffer_count * sizeof *grown);
  memset(grown + d->buffer_count, 0, (count - d->buffer_count) * sizeof *grown);
  if (d->buffers != d->buffers_inline) free(d->buffers);
  d->buffers = grown;
  d->buffer_capacity = count;
  return true;
}

HurrayStatus hurray_descriptor_create(HurrayDType dtype, uint32_t rank, const uint64_t *shape,
                                      HurrayDescriptor **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "out must not be NULL");
  }
  if (hurray_dtype_name(dtype) == NULL) {
    return hurray__fail(error, HURRAY_ERR_DTYPE, "dtype: unknown code %d", (int)dtype);
  }
  if (rank > HURRAY_MAX_RANK) {
    return hurray__fail(error, HURRAY_ERR_LIMIT, "shape: rank %u exceeds the limit of %u", rank,
                        HURRAY_MAX_RANK);
  }
  if (rank > 0 && shape == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "shape must not be NULL for rank %u",
                        rank);
  }
  HurrayDescriptor *d = hurray__descriptor_new();
  if (d == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  if (!hurray__descriptor_reserve_rank(d, rank)) {
    hurray_descriptor_destroy(d);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  d->dtype = dtype;
  d->rank = rank;
  if (rank > 0) {
    memcpy(d->shape, shape, rank * sizeof *shape);
  }
  *out = d;
  return HURRAY_OK;
}

void hurray_descriptor_destroy(HurrayDescriptor *d) {
  if (d == NULL) {
    return;
  }
  layout_reset(&d->layout);
  free(d->quant.storage);
  if (d->shape != d->shape_inline) free(d->shape);
  free(d->strides);
  free(d->shard);
  if (d->buffers != d->buffers_inline) free(d->buffers);
  free(d->extension_name);
  free(d->extension_metadata);
  free(d);
}

static char *dup_bytes(const void *src, size_t len, bool nul_terminate) {
  char *copy = malloc(len + (nul_terminate ? 1 : 0) + (len == 0));
  if (copy == NULL) {
    return NULL;
  }
  if (len > 0) {
    memcpy(copy, src, len);
  }
  if (nul_terminate) {
    copy[len] = '\0';
  }
  return copy;
}

/* Copies into d, a detached copy of src, the parts allocated only when
 * present (descriptor_internal.h); false when out of memory, with d still
 * safe to destroy. */
static bool clone_optional_parts(HurrayDescriptor *d, const HurrayDescriptor *src) {
  const HurrayLayout *l = &src->layout;
  if (src->shape != src->shape_inline) {
    uint64_t *shape = (uint64_t *)dup_bytes(src->shape, HURRAY_MAX_RANK * sizeof *src->shape,
                                            false);
    if (shape == NULL) return false;
    d->shape = shape;
  }
  if (l->coo_index_buffers != NULL &&
      (d->layout.coo_index_buffers = (uint32_t *)dup_bytes(
           l->coo_index_buffers, HURRAY_MAX_RANK * sizeof *l->coo_index_buffers, false)) == NULL) {
    return false;
  }
  if (src->strides != NULL &&
      (d->strides = (int64_t *)dup_bytes(src->strides, HURRAY_MAX_RANK * sizeof *src->strides,
                                         false)) == NULL) {
    return false;
  }
  if (src->quant.storage != NULL &&
      (d->quant.storage = (HurrayQuantStorage *)dup_bytes(
           src->quant.storage, sizeof *src->quant.storage, false)) == NULL) {
    return false;
  }
  return src->shard == NULL || (d->shard = (HurrayShardFields *)dup_bytes(
                                    src->shard, sizeof *src->shard, false)) != NULL;
}

HurrayStatus hurray_descriptor_clone(const HurrayDescriptor *src, HurrayDescriptor **out,
                                     HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (src == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "src and out must not be NULL");
  }
  HurrayDescriptor *d = malloc(sizeof *d);
  if (d == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  *d = *src;
  /* Detach every owned pointer before copying, so a failure midway can be
   * unwound with hurray_descriptor_destroy. */
  d->shape = d->shape_inline;
  d->quant.storage = NULL;
  d->strides = NULL;
  d->shard = NULL;
  d->buffers = NULL;
  d->buffer_count = 0;
  d->buffer_capacity = 0;
  d->extension_name = NULL;
  d->extension_metadata = NULL;
  d->layout.members = NULL;
  d->layout.member_count = 0;
  d->layout.member_capacity = 0;
  d->layout.coo_index_buffers = NULL;

  if (!clone_optional_parts(d, src)) {
    goto no_memory;
  }
  if (src->buffer_count > 0) {
    if (!hurray__descriptor_reserve_buffers(d, src->buffer_count)) {
      goto no_memory;
    }
    memcpy(d->buffers, src->buffers, src->buffer_count * sizeof *d->buffers);
    d->buffer_count = src->buffer_count;
  }
  if (src->extension_name != NULL) {
    d->extension_name = dup_bytes(src->extension_name, strlen(src->extension_name), true);
    d->extension_metadata = (uint8_t *)dup_bytes(src->extension_metadata,
                                                 src->extension_metadata_len, false);
    if (d->extension_name == NULL || d->extension_metadata == NULL) {
      goto no_memory;
    }
  }
  for (uint32_t i = 0; i < src->layout.member_count; i++) {
    const HurrayMember *m = &src->layout.members[i];
    HurrayDescriptor *member = NULL;
    HurrayStatus status = hurray_descriptor_clone(m->descriptor, &member, error);
    if (status != HURRAY_OK) {
      hurray_descriptor_destroy(d);
      return status;
    }
    char *name = dup_bytes(m->name, strlen(m->name), true);
    if (name == NULL || hurray__descriptor_push_member(d, name, member) != HURRAY_OK) {
      free(name);
      hurray_descriptor_destroy(member);
      goto no_memory;
    }
  }
  *out = d;
  return HURRAY_OK;

no_memory:
  hurray_descriptor_destroy(d);
  return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
}

bool hurray_descriptor_equal(const HurrayDescriptor *a, const HurrayDescriptor *b) {
  if (a == NULL || b == NULL) {
    return a == b;
  }
  uint8_t *ea = NULL, *eb = NULL;
  size_t la = 0, lb = 0;
  bool equal = hurray_descriptor_encode(a, &ea, &la, NULL) == HURRAY_OK &&
               hurray_descriptor_encode(b, &eb, &lb, NULL) == HURRAY_OK && la == lb &&
               memcmp(ea, eb, la) == 0;
  free(ea);
  free(eb);
  return equal;
}

bool hurray__descriptor_is_member_shaped(const HurrayDescriptor *d) {
  return d->buffer_count == 0 && d->device_type == HURRAY_DEVICE_CPU && d->device_id == 0 &&
         d->memory_class == HURRAY_MEMORY_HOST && d->stat_flags == 0 && d->shard == NULL &&
         d->extension_name == NULL;
}

/* ------------------------------------------------------------ view fields */

HurrayStatus hurray_descriptor_set_strides(HurrayDescriptor *d, const int64_t *strides,
                                           HurrayError *error) {
  if (d == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor must not be NULL");
  }
  if (strides == NULL) {
    free(d->strides);
    d->strides = NULL;
    return HURRAY_OK;
  }
  if (!hurray__descriptor_add_strides(d)) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  memcpy(d->strides, strides, d->rank * sizeof *strides);
  return HURRAY_OK;
}

bool hurray__descriptor_reserve_rank(HurrayDescriptor *d, uint32_t rank) {
  if (rank <= HURRAY__SHAPE_INLINE || d->shape != d->shape_inline) return true;
  uint64_t *shape = calloc(HURRAY_MAX_RANK, sizeof *shape);
  if (shape == NULL) return false;
  memcpy(shape, d->shape_inline, sizeof d->shape_inline);
  d->shape = shape;
  return true;
}

bool hurray__descriptor_add_strides(HurrayDescriptor *d) {
  if (d->strides == NULL && (d->strides = calloc(HURRAY_MAX_RANK, sizeof *d->strides)) == NULL) {
    return false;
  }
  return true;
}

bool hurray__descriptor_add_shard(HurrayDescriptor *d) {
  if (d->shard == NULL && (d->shard = calloc(1, sizeof *d->shard)) == NULL) return false;
  return true;
}

void hurray_descriptor_set_byte_offset(HurrayDescriptor *d, uint64_t byte_offset) {
  if (d != NULL) {
    d->byte_offset = byte_offset;
  }
}

HurrayDType hurray_descriptor_dtype(const HurrayDescriptor *d) { return d->dtype; }
uint32_t hurray_descriptor_rank(const HurrayDescriptor *d) { return d->rank; }
const uint64_t *hurray_descriptor_shape(const HurrayDescriptor *d) {
  return d->rank > 0 ? d->shape : NULL;
}
const int64_t *hurray_descriptor_strides(const HurrayDescriptor *d) {
  return d->strides != NULL && d->rank > 0 ? d->strides : NULL;
}
uint64_t hurray_descriptor_byte_offset(const HurrayDescriptor *d) { return d->byte_offset; }

HurrayStatus hurray_descriptor_numel(const HurrayDescriptor *d, uint64_t *out,
                                     HurrayError *error) {
  if (d == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor and out are required");
  }
  uint32_t at = 0;
  if (!hurray__numel_u64(d->shape, d->rank, out, &at)) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW,
                        "shape: element count overflows 64 bits at dim %u", at);
  }
  return HURRAY_OK;
}

/* ----------------------------------------------------------- buffer table */

HurrayStatus hurray_descriptor_add_buffer(HurrayDescriptor *d, HurrayBufferRole role,
                                          uint64_t byte_size, uint32_t alignment,
                                          HurraySyncMode sync_mode, uint32_t *index_out,
                                          HurrayError *error) {
  if (d == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor must not be NULL");
  }
  if (!hurray__role_known(role)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "buffers: unknown role %d", (int)role);
  }
  if (!hurray__sync_mode_known(sync_mode)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "buffers: unknown sync_mode %d",
                        (int)sync_mode);
  }
  if (!hurray__is_pow2_u64(alignment) || alignment > HURRAY_MAX_ALIGNMENT) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "buffers: alignment %u is not a power of two up to %u", alignment,
                        HURRAY_MAX_ALIGNMENT);
  }
  if (d->buffer_count >= HURRAY_MAX_BUFFERS) {
    return hurray__fail(error, HURRAY_ERR_LIMIT, "buffers: more than %u buffers",
                        HURRAY_MAX_BUFFERS);
  }
  if (d->buffer_count == d->buffer_capacity &&
      !hurray__descriptor_reserve_buffers(d, d->buffer_capacity ? d->buffer_capacity * 2 : 1)) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  HurrayBufferEntry *entry = &d->buffers[d->buffer_count];
  entry->role = role;
  entry->byte_size = byte_size;
  entry->alignment = alignment;
  entry->sync_mode = sync_mode;
  if (index_out != NULL) {
    *index_out = d->buffer_count;
  }
  d->buffer_count++;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_buffer_size(HurrayDescriptor *d, uint32_t index,
                                               uint64_t byte_size, HurrayError *error) {
  if (d == NULL || index >= d->buffer_count) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "buffers[%u]: no such entry", index);
  }
  d->buffers[index].byte_size = byte_size;
  return HURRAY_OK;
}

uint32_t hurray_descriptor_buffer_count(const HurrayDescriptor *d) { return d->buffer_count; }

HurrayBufferRole hurray_descriptor_buffer_role(const HurrayDescriptor *d, uint32_t index) {
  return index < d->buffer_count ? d->buffers[index].role : (HurrayBufferRole)0;
}
uint64_t hurray_descriptor_buffer_size(const HurrayDescriptor *d, uint32_t index) {
  return index < d->buffer_count ? d->buffers[index].byte_size : 0;
}
uint32_t hurray_descriptor_buffer_alignment(const HurrayDescriptor *d, uint32_t index) {
  return index < d->buffer_count ? d->buffers[index].alignment : 0;
}
HurraySyncMode hurray_descriptor_buffer_sync_mode(const HurrayDescriptor *d, uint32_t index) {
  return index < d->buffer_count ? d->buffers[index].sync_mode : HURRAY_SYNC_READY;
}

HurrayStatus hurray_descriptor_set_device(HurrayDescriptor *d, int32_t device_type,
                                          int32_t device_id, HurrayMemoryClass memory_class,
                                          HurrayError *error) {
  if (d == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor must not be NULL");
  }
  if (!hurray__memory_class_known(memory_class)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "device: unknown memory_class %d",
                        (int)memory_class);
  }
  d->device_type = device_type;
  d->device_id = device_id;
  d->memory_class = memory_class;
  return HURRAY_OK;
}

int32_t hurray_descriptor_device_type(const HurrayDescriptor *d) { return d->device_type; }
int32_t hurray_descriptor_device_id(const HurrayDescriptor *d) { return d->device_id; }
HurrayMemoryClass hurray_descriptor_memory_class(const HurrayDescriptor *d) {
  return d->memory_class;
}

/* ----------------------------------------------------------------- layout */

static HurrayStatus require_descriptor(const HurrayDescriptor *d, HurrayError *error) {
  return d == NULL
             ? hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor must not be NULL")
             : HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_layout_dense(HurrayDescriptor *d, uint32_t data_buffer,
                                                HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  layout_reset(&d->layout);
  d->layout.kind = HURRAY_LAYOUT_DENSE;
  d->layout.data_buffer = data_buffer;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_layout_coo(HurrayDescriptor *d, HurrayDType index_dtype,
                                              uint64_t nnz, uint32_t values_buffer,
                                              const uint32_t *index_buffers, bool canonical,
                                              HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  if (d->rank > 0 && index_buffers == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "layout.index_buffers must hold one index per dimension");
  }
  layout_reset(&d->layout);
  if (!hurray__layout_add_coo(&d->layout)) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  d->layout.kind = HURRAY_LAYOUT_SPARSE;
  d->layout.format = HURRAY_SPARSE_COO;
  d->layout.index_dtype = index_dtype;
  d->layout.nnz = nnz;
  d->layout.data_buffer = values_buffer;
  d->layout.canonical = canonical;
  for (uint32_t i = 0; i < d->rank; i++) {
    d->layout.coo_index_buffers[i] = index_buffers[i];
  }
  return HURRAY_OK;
}

static void set_compressed(HurrayDescriptor *d, HurraySparseFormat format, HurrayDType index_dtype,
                           uint64_t nnz, uint32_t values_buffer, uint32_t indptr_buffer,
                           uint32_t indices_buffer) {
  layout_reset(&d->layout);
  d->layout.kind = HURRAY_LAYOUT_SPARSE;
  d->layout.format = format;
  d->layout.index_dtype = index_dtype;
  d->layout.nnz = nnz;
  d->layout.data_buffer = values_buffer;
  d->layout.indptr_buffer = indptr_buffer;
  d->layout.indices_buffer = indices_buffer;
}

HurrayStatus hurray_descriptor_set_layout_compressed(
    HurrayDescriptor *d, HurraySparseFormat format, HurrayDType index_dtype, uint64_t nnz,
    uint32_t values_buffer, uint32_t indptr_buffer, uint32_t indices_buffer, HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  if (format != HURRAY_SPARSE_CSR && format != HURRAY_SPARSE_CSC) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "layout.format must be CSR or CSC here, got %d", (int)format);
  }
  set_compressed(d, format, index_dtype, nnz, values_buffer, indptr_buffer, indices_buffer);
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_layout_bsr(HurrayDescriptor *d, HurrayDType index_dtype,
                                              uint64_t nnz, uint64_t block_rows,
                                              uint64_t block_cols, uint32_t values_buffer,
                                              uint32_t indptr_buffer, uint32_t indices_buffer,
                                              HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  set_compressed(d, HURRAY_SPARSE_BSR, index_dtype, nnz, values_buffer, indptr_buffer,
                 indices_buffer);
  d->layout.block_rows = block_rows;
  d->layout.block_cols = block_cols;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_layout_paged(HurrayDescriptor *d, uint32_t axis,
                                                uint64_t page_size, uint64_t num_pages,
                                                HurrayDType table_dtype, uint32_t pool_buffer,
                                                uint32_t table_buffer, HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  layout_reset(&d->layout);
  d->layout.kind = HURRAY_LAYOUT_PAGED;
  d->layout.axis = axis;
  d->layout.page_size = page_size;
  d->layout.num_pages = num_pages;
  d->layout.index_dtype = table_dtype;
  d->layout.data_buffer = pool_buffer;
  d->layout.table_buffer = table_buffer;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_layout_composite(HurrayDescriptor *d, HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  layout_reset(&d->layout);
  d->layout.kind = HURRAY_LAYOUT_COMPOSITE;
  d->layout.data_buffer = HURRAY_NO_BUFFER;
  return HURRAY_OK;
}

HurrayStatus hurray__descriptor_push_member(HurrayDescriptor *d, char *name,
                                            HurrayDescriptor *member) {
  HurrayLayout *layout = &d->layout;
  if (layout->member_count >= HURRAY_MAX_COMPOSITE_MEMBERS) {
    return HURRAY_ERR_LIMIT;
  }
  if (layout->member_count == layout->member_capacity) {
    uint32_t capacity = layout->member_capacity ? layout->member_capacity * 2 : 4;
    HurrayMember *grown = realloc(layout->members, capacity * sizeof *grown);
    if (grown == NULL) {
      return HURRAY_ERR_NO_MEMORY;
    }
    layout->members = grown;
    layout->member_capacity = capacity;
  }
  layout->members[layout->member_count].name = name;
  layout->members[layout->member_count].descriptor = member;
  layout->member_count++;
  return HURRAY_OK;
}

static bool subtree_contains(const HurrayDescriptor *root, const HurrayDescriptor *target) {
  if (root == target) {
    return true;
  }
  for (uint32_t i = 0; i < root->layout.member_count; i++) {
    if (subtree_contains(root->layout.members[i].descriptor, target)) {
      return true;
    }
  }
  return false;
}

HurrayStatus hurray_descriptor_add_member(HurrayDescriptor *d, const char *name,
                                          HurrayDescriptor *member, HurrayError *error) {
  HurrayStatus status = HURRAY_OK;
  char *name_copy = NULL;
  /* A member that (transitively) owns `d` would form a cycle; destroying it
   * would destroy `d` too, so it is refused and left alone. */
  if (d != NULL && member != NULL && subtree_contains(member, d)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "layout.members: a descriptor cannot become a member of itself or of "
                        "its own member");
  }
  if (d == NULL || name == NULL || member == NULL) {
    status = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "descriptor, name and a distinct member are required");
    goto fail;
  }
  if (d->layout.kind != HURRAY_LAYOUT_COMPOSITE) {
    status = hurray__fail(error, HURRAY_ERR_STATE,
                          "layout: members can only be added to a composite layout");
    goto fail;
  }
  size_t name_len = strlen(name);
  if (name_len > HURRAY_MAX_NAME_BYTES) {
    status = hurray__fail(error, HURRAY_ERR_LIMIT,
                          "layout.members: name of %zu bytes exceeds the limit of %u", name_len,
                          HURRAY_MAX_NAME_BYTES);
    goto fail;
  }
  if (!hurray__descriptor_is_member_shaped(member)) {
    status = hurray__fail(error, HURRAY_ERR_COMPOSITE_MEMBER,
                          "layout.members[\"%s\"]: a member has no buffer table, device, "
                          "statistics, shard or extension of its own",
                          name);
    goto fail;
  }
  name_copy = dup_bytes(name, name_len, true);
  if (name_copy == NULL || hurray__descriptor_push_member(d, name_copy, member) != HURRAY_OK) {
    status = d->layout.member_count >= HURRAY_MAX_COMPOSITE_MEMBERS
                 ? hurray__fail(error, HURRAY_ERR_LIMIT, "layout.members: more than %u members",
                                HURRAY_MAX_COMPOSITE_MEMBERS)
                 : hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  return HURRAY_OK;

fail:
  free(name_copy);
  hurray_descriptor_destroy(member);
  return status;
}

HurrayLayoutKind hurray_descriptor_layout_kind(const HurrayDescriptor *d) {
  return d->layout.kind;
}
uint32_t hurray_descriptor_data_buffer(const HurrayDescriptor *d) { return d->layout.data_buffer; }
HurraySparseFormat hurray_descriptor_sparse_format(const HurrayDescriptor *d) {
  return d->layout.kind == HURRAY_LAYOUT_SPARSE ? d->layout.format : (HurraySparseFormat)0;
}
HurrayDType hurray_descriptor_index_dtype(const HurrayDescriptor *d) {
  return d->layout.index_dtype;
}
uint64_t hurray_descriptor_sparse_nnz(const HurrayDescriptor *d) { return d->layout.nnz; }
uint32_t hurray_descriptor_sparse_indptr_buffer(const HurrayDescriptor *d) {
  return d->layout.indptr_buffer;
}
uint32_t hurray_descriptor_sparse_indices_buffer(const HurrayDescriptor *d) {
  return d->layout.indices_buffer;
}
uint32_t hurray_descriptor_sparse_coo_index_buffer(const HurrayDescriptor *d, uint32_t dim) {
  if (d->layout.kind != HURRAY_LAYOUT_SPARSE || d->layout.format != HURRAY_SPARSE_COO ||
      dim >= d->rank) {
    return HURRAY_NO_BUFFER;
  }
  return d->layout.coo_index_buffers[dim];
}
bool hurray_descriptor_sparse_canonical(const HurrayDescriptor *d) { return d->layout.canonical; }
uint64_t hurray_descriptor_sparse_block_rows(const HurrayDescriptor *d) {
  return d->layout.block_rows;
}
uint64_t hurray_descriptor_sparse_block_cols(const HurrayDescriptor *d) {
  return d->layout.block_cols;
}
uint32_t hurray_descriptor_paged_axis(const HurrayDescriptor *d) { return d->layout.axis; }
uint64_t hurray_descriptor_paged_page_size(const HurrayDescriptor *d) {
  return d->layout.page_size;
}
uint64_t hurray_descriptor_paged_num_pages(const HurrayDescriptor *d) {
  return d->layout.num_pages;
}
uint32_t hurray_descriptor_paged_table_buffer(const HurrayDescriptor *d) {
  return d->layout.table_buffer;
}
uint32_t hurray_descriptor_member_count(const HurrayDescriptor *d) {
  return d->layout.member_count;
}
const char *hurray_descriptor_member_name(const HurrayDescriptor *d, uint32_t index) {
  return index < d->layout.member_count ? d->layout.members[index].name : NULL;
}
const HurrayDescriptor *hurray_descriptor_member(const HurrayDescriptor *d, uint32_t index) {
  return index < d->layout.member_count ? d->layout.members[index].descriptor : NULL;
}

HurrayStatus hurray_descriptor_find_member(const HurrayDescriptor *d, const char *name,
                                           uint32_t *index_out, HurrayError *error) {
  if (d == NULL || name == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor and name are required");
  }
  for (uint32_t i = 0; i < d->layout.member_count; i++) {
    if (strcmp(d->layout.members[i].name, name) == 0) {
      if (index_out != NULL) *index_out = i;
      return HURRAY_OK;
    }
  }
  return hurray__fail(error, HURRAY_ERR_NOT_FOUND, "layout.members: no member \"%s\"", name);
}

/* ----------------------------------------------------------- quantization */

void hurray_descriptor_set_quant_none(HurrayDescriptor *d) {
  if (d != NULL) {
    quant_reset(&d->quant);
  }
}

HurrayStatus hurray_descriptor_set_quant_per_tensor_affine(HurrayDescriptor *d, double scale,
                                                           int64_t zero_point,
                                                           HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  quant_reset(&d->quant);
  d->quant.kind = HURRAY_QUANT_PER_TENSOR_AFFINE;
  d->quant.scale = scale;
  d->quant.zero_point = zero_point;
  return HURRAY_OK;
}

static void set_scaled(HurrayDescriptor *d, HurrayQuantKind kind, uint32_t axis,
                       uint64_t block_size, uint32_t scale_buffer, HurrayDType scale_dtype) {
  quant_reset(&d->quant);
  d->quant.kind = kind;
  d->quant.axis = axis;
  d->quant.block_size = block_size;
  d->quant.scale_buffer = scale_buffer;
  d->quant.scale_dtype = scale_dtype;
}

HurrayStatus hurray_descriptor_set_quant_per_channel_affine(HurrayDescriptor *d, uint32_t axis,
                                                            uint32_t scale_buffer,
                                                            HurrayDType scale_dtype,
                                                            HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  set_scaled(d, HURRAY_QUANT_PER_CHANNEL_AFFINE, axis, 0, scale_buffer, scale_dtype);
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_block_affine(HurrayDescriptor *d, uint32_t axis,
                                                      uint64_t block_size, uint32_t scale_buffer,
                                                      HurrayDType scale_dtype,
                                                      HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  set_scaled(d, HURRAY_QUANT_BLOCK_AFFINE, axis, block_size, scale_buffer, scale_dtype);
  return HURRAY_OK;
}

static bool quant_is_affine(const HurrayQuant *q) {
  return q->kind == HURRAY_QUANT_PER_TENSOR_AFFINE || q->kind == HURRAY_QUANT_PER_CHANNEL_AFFINE ||
         q->kind == HURRAY_QUANT_BLOCK_AFFINE;
}

/* A buffer of `field` set with no dtype: the encoding requires both or
 * neither, so the decoder would refuse what this setter took. */
static HurrayStatus require_buffer_dtype(const char *field, uint32_t buffer, HurrayDType dtype,
                                         HurrayError *error) {
  if (buffer != HURRAY_NO_BUFFER && hurray_dtype_name(dtype) == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "quantization.%s: a buffer needs its dtype (got %d)", field, (int)dtype);
  }
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_zero_point_buffer(HurrayDescriptor *d,
                                                           uint32_t zero_point_buffer,
                                                           HurrayDType zero_point_dtype,
                                                           HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  if (d->quant.kind != HURRAY_QUANT_PER_CHANNEL_AFFINE &&
      d->quant.kind != HURRAY_QUANT_BLOCK_AFFINE) {
    return hurray__fail(error, HURRAY_ERR_STATE,
                        "quantization: a zero-point buffer needs per-channel or block affine "
                        "quantization, not %s",
                        hurray__quant_kind_name(d->quant.kind));
  }
  HURRAY_RETURN_NOT_OK(
      require_buffer_dtype("zero_point_buffer", zero_point_buffer, zero_point_dtype, error));
  d->quant.zero_point_buffer = zero_point_buffer;
  /* NO_BUFFER clears the field: no dtype, no packing of it either */
  d->quant.zero_point_dtype = zero_point_buffer != HURRAY_NO_BUFFER ? zero_point_dtype
                                                                    : HURRAY_DTYPE_INVALID;
  if (zero_point_buffer == HURRAY_NO_BUFFER && d->quant.storage != NULL) {
    memset(&d->quant.storage->zero_point_packing, 0, sizeof d->quant.storage->zero_point_packing);
  }
  d->quant.zero_point = 0;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_zero_point(HurrayDescriptor *d, int64_t zero_point,
                                                    HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  if (!quant_is_affine(&d->quant)) {
    return hurray__fail(error, HURRAY_ERR_STATE,
                        "quantization: a zero point needs affine quantization, not %s",
                        hurray__quant_kind_name(d->quant.kind));
  }
  d->quant.zero_point = zero_point;
  d->quant.zero_point_buffer = HURRAY_NO_BUFFER;
  d->quant.zero_point_dtype = HURRAY_DTYPE_INVALID;
  if (d->quant.storage != NULL) {
    memset(&d->quant.storage->zero_point_packing, 0, sizeof d->quant.storage->zero_point_packing);
  }
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_nf4(HurrayDescriptor *d, uint64_t block_size,
                                             uint32_t absmax_buffer, HurrayDType absmax_dtype,
                                             HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  set_scaled(d, HURRAY_QUANT_NF4, 0, block_size, absmax_buffer, absmax_dtype);
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_mx(HurrayDescriptor *d, HurrayMxElement element,
                                            uint32_t axis, uint32_t scale_buffer,
                                            HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  if (!hurray__mx_element_known(element)) {
    return hurray__fail(error, HURRAY_ERR_QUANT_MX_ELEMENT,
                        "quantization.element: unknown MX element type %d", (int)element);
  }
  set_scaled(d, HURRAY_QUANT_MX, axis, HURRAY_MX_BLOCK_SIZE, scale_buffer,
             HURRAY_DTYPE_FLOAT8_E8M0FNU);
  d->quant.mx_element = element;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_block_coded(HurrayDescriptor *d, HurrayBlockFormat format,
                                                     uint32_t axis, HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  uint32_t elements = 0;
  if (!hurray_block_format_info((uint32_t)format, &elements, NULL, NULL)) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "quantization.format: unknown block format %d", (int)format);
  }
  set_scaled(d, HURRAY_QUANT_BLOCK_CODED, axis, elements, HURRAY_NO_BUFFER, HURRAY_DTYPE_INVALID);
  d->quant.block_format = format;
  return HURRAY_OK;
}

/* ------------------------------------ packed and two-level (ADR-0024) */

static HurrayStatus require_packed_kind(const HurrayDescriptor *d, const char *field,
                                        HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  HurrayQuantKind k = d->quant.kind;
  if (k != HURRAY_QUANT_PER_CHANNEL_AFFINE && k != HURRAY_QUANT_BLOCK_AFFINE &&
      k != HURRAY_QUANT_NF4) {
    return hurray__fail(error, HURRAY_ERR_STATE,
                        "quantization.%s: needs per-channel affine, block affine or nf4 "
                        "quantization, not %s",
                        field, hurray__quant_kind_name(k));
  }
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_storage_axes(HurrayDescriptor *d, const uint32_t *axes,
                                                      HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "storage_axes", error));
  if (axes == NULL) {
    if (d->quant.storage != NULL) {
      d->quant.storage->has_storage_axes = false;
      memset(d->quant.storage->storage_axes, 0, sizeof d->quant.storage->storage_axes);
    }
    return HURRAY_OK;
  }
  uint32_t seen = 0; /* the rank is at most 32 */
  for (uint32_t k = 0; k < d->rank; k++) {
    if (axes[k] >= d->rank) {
      return hurray__fail(error, HURRAY_ERR_QUANT_PACKING,
                          "quantization.storage_axes[%u]: %u is not below the rank %u", k, axes[k],
                          d->rank);
    }
    if (seen & (1u << axes[k])) { /* as the decoder requires */
      return hurray__fail(error, HURRAY_ERR_QUANT_PACKING,
                          "quantization.storage_axes: axis %u appears twice (not a permutation)",
                          axes[k]);
    }
    seen |= 1u << axes[k];
  }
  HurrayQuantStorage *qs = hurray__quant_storage_own(&d->quant);
  if (qs == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  memset(qs->storage_axes, 0, sizeof qs->storage_axes);
  for (uint32_t k = 0; k < d->rank; k++) {
    qs->storage_axes[k] = (uint8_t)axes[k];
  }
  qs->has_storage_axes = true;
  return HURRAY_OK;
}

static HurrayStatus set_packing(HurrayQuantPacking *p, HurrayDType dtype, uint32_t word_bits,
                                uint32_t axis, const uint8_t *order, const char *field,
                                HurrayError *error) {
  if (word_bits == 0) {
    memset(p, 0, sizeof *p);
    return HURRAY_OK;
  }
  uint32_t bits = hurray_dtype_bits(dtype);
  if ((word_bits != 8 && word_bits != 16 && word_bits != 32) || bits == 0 || bits >= word_bits ||
      word_bits % bits != 0) {
    const char *name = hurray_dtype_name(dtype);
    return hurray__fail(error, HURRAY_ERR_QUANT_PACKING,
                        "quantization.%s.word_bits: %u-bit words cannot hold %s elements as "
                        "lanes (8, 16 or 32 bits, a multiple of the element bits)",
                        field, word_bits, name != NULL ? name : "dtype-less");
  }
  if (axis >= HURRAY_MAX_RANK) {
    return hurray__fail(error, HURRAY_ERR_QUANT_PACKING, "quantization.%s.axis: %u is too large",
                        field, axis);
  }
  uint32_t lanes = word_bits / bits;
  uint32_t seen = 0; /* at most 32 lanes (1-bit elements in 32-bit words) */
  for (uint32_t j = 0; order != NULL && j < lanes; j++) {
    if (order[j] >= lanes || (seen & (1u << order[j]))) { /* as the decoder requires */
      return hurray__fail(error, HURRAY_ERR_QUANT_PACKING,
                          "quantization.%s.order: not a permutation of the %u lanes", field,
                          lanes);
    }
    seen |= 1u << order[j];
  }
  memset(p, 0, sizeof *p);
  p->word_bits = (uint8_t)word_bits;
  p->axis = (uint8_t)axis;
  for (uint32_t j = 0; j < lanes; j++) {
    p->order[j] = order != NULL ? order[j] : (uint8_t)j;
  }
  return HURRAY_OK;
}

/* set_packing on q's code or zero-point packing; clearing a packing that
 * was never set allocates nothing. */
static HurrayStatus set_stored_packing(HurrayQuant *q, bool zero_points, HurrayDType dtype,
                                       uint32_t word_bits, uint32_t axis, const uint8_t *order,
                                       HurrayError *error) {
  if (word_bits == 0 && q->storage == NULL) return HURRAY_OK;
  HurrayQuantStorage *qs = hurray__quant_storage_own(q);
  if (qs == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  return zero_points ? set_packing(&qs->zero_point_packing, dtype, word_bits, axis, order,
                                   "zero_point_packing", error)
                     : set_packing(&qs->code_packing, dtype, word_bits, axis, order,
                                   "code_packing", error);
}

HurrayStatus hurray_descriptor_set_quant_code_packing(HurrayDescriptor *d, uint32_t word_bits,
                                                      uint32_t axis, const uint8_t *order,
                                                      HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "code_packing", error));
  return set_stored_packing(&d->quant, false, d->dtype, word_bits, axis, order, error);
}

HurrayStatus hurray_descriptor_set_quant_zero_point_packing(HurrayDescriptor *d,
                                                            uint32_t word_bits, uint32_t axis,
                                                            const uint8_t *order,
                                                            HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "zero_point_packing", error));
  if (word_bits != 0 && d->quant.zero_point_buffer == HURRAY_NO_BUFFER) {
    return hurray__fail(error, HURRAY_ERR_STATE,
                        "quantization.zero_point_packing: set the zero-point buffer first");
  }
  return set_stored_packing(&d->quant, true, d->quant.zero_point_dtype, word_bits, axis, order,
                            error);
}

HurrayStatus hurray_descriptor_set_quant_zero_point_offset(HurrayDescriptor *d, int64_t offset,
                                                           HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "zero_point_offset", error));
  d->quant.zero_point_offset = offset;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_block2(HurrayDescriptor *d, uint32_t axis2,
                                                uint64_t block_size2, HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "block_size2", error));
  d->quant.axis2 = block_size2 != 0 ? axis2 : 0;
  d->quant.block_size2 = block_size2;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_group_index(HurrayDescriptor *d, uint32_t buffer,
                                                     HurrayDType dtype, HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "group_index_buffer", error));
  HURRAY_RETURN_NOT_OK(require_buffer_dtype("group_index_buffer", buffer, dtype, error));
  d->quant.group_index_buffer = buffer;
  d->quant.group_index_dtype = buffer != HURRAY_NO_BUFFER ? dtype : HURRAY_DTYPE_INVALID;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_codebook(HurrayDescriptor *d, uint32_t buffer,
                                                  HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "codebook_buffer", error));
  d->quant.codebook_buffer = buffer;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_scale_codebook(HurrayDescriptor *d, uint32_t buffer,
                                                        HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "scale_codebook_buffer", error));
  d->quant.scale_codebook_buffer = buffer;
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_set_quant_super_scales(HurrayDescriptor *d, uint32_t buffer,
                                                      HurrayDType dtype, uint64_t super_block_size,
                                                      HurraySuperScaleOp op, double scale_offset,
                                                      HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_packed_kind(d, "super_scale_buffer", error));
  HURRAY_RETURN_NOT_OK(require_buffer_dtype("super_scale_buffer", buffer, dtype, error));
  if (buffer != HURRAY_NO_BUFFER && op != HURRAY_SUPER_MULTIPLY && op != HURRAY_SUPER_DIVIDE) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "quantization.super_op: unknown operation %d", (int)op);
  }
  bool on = buffer != HURRAY_NO_BUFFER;
  d->quant.super_scale_buffer = buffer;
  d->quant.super_scale_dtype = on ? dtype : HURRAY_DTYPE_INVALID;
  d->quant.super_block_size = on ? super_block_size : 0;
  d->quant.super_op = on ? (uint8_t)op : 0;
  /* -0.0 is stored as +0.0 so that "no offset" has one encoding. */
  d->quant.scale_offset = scale_offset == 0.0 ? 0.0 : scale_offset;
  return HURRAY_OK;
}

bool hurray__quant_has_storage_fields(const HurrayQuant *q) {
  const HurrayQuantStorage *qs = hurray__qs(q);
  return qs->has_storage_axes || qs->code_packing.word_bits != 0 ||
         qs->zero_point_packing.word_bits != 0 || q->zero_point_offset != 0;
}

bool hurray__quant_has_scale_fields(const HurrayQuant *q) {
  return q->block_size2 != 0 || q->axis2 != 0 || q->group_index_buffer != HURRAY_NO_BUFFER ||
         q->codebook_buffer != HURRAY_NO_BUFFER || q->scale_codebook_buffer != HURRAY_NO_BUFFER ||
         q->super_scale_buffer != HURRAY_NO_BUFFER || q->scale_offset != 0.0;
}

bool hurray__quant_has_packed(const HurrayQuant *q) {
  return hurray__quant_has_storage_fields(q) || hurray__quant_has_scale_fields(q);
}

void hurray__quant_scale_shape(const HurrayDescriptor *d, uint64_t *shape, uint32_t *rank_out) {
  const HurrayQuant *q = &d->quant;
  if (q->kind == HURRAY_QUANT_PER_CHANNEL_AFFINE) {
    shape[0] = d->shape[q->axis];
    *rank_out = 1;
    return;
  }
  if (q->kind == HURRAY_QUANT_NF4) {
    uint64_t numel = 1;
    for (uint32_t i = 0; i < d->rank; i++) numel *= d->shape[i];
    shape[0] = hurray__ceil_div_u64(numel, q->block_size);
    *rank_out = 1;
    return;
  }
  uint64_t logical[HURRAY_MAX_RANK];
  for (uint32_t i = 0; i < d->rank; i++) {
    logical[i] = d->shape[i];
    if (i == q->axis) logical[i] = hurray__ceil_div_u64(d->shape[i], q->block_size);
    if (q->block_size2 != 0 && i == q->axis2) {
      logical[i] = hurray__ceil_div_u64(d->shape[i], q->block_size2);
    }
  }
  const uint8_t *axes = hurray_descriptor_quant_storage_axes(d);
  for (uint32_t k = 0; k < d->rank; k++) {
    shape[k] = logical[axes != NULL ? axes[k] : k];
  }
  *rank_out = d->rank;
}

const uint8_t *hurray_descriptor_quant_storage_axes(const HurrayDescriptor *d) {
  const HurrayQuantStorage *qs = hurray__qs(&d->quant);
  return qs->has_storage_axes ? qs->storage_axes : NULL;
}

uint32_t hurray__packing_lanes(const HurrayQuantPacking *p, HurrayDType dtype) {
  uint32_t bits = hurray_dtype_bits(dtype);
  if (p->word_bits == 0 || bits == 0 || p->word_bits % bits != 0) {
    return 0;
  }
  return p->word_bits / bits;
}

bool hurray__packing_is_identity(const HurrayQuantPacking *p, uint32_t lanes) {
  for (uint32_t j = 0; j < lanes; j++) {
    if (p->order[j] != j) return false;
  }
  return true;
}

static uint32_t get_packing(const HurrayQuantPacking *p, HurrayDType dtype, uint32_t *word_bits,
                            uint32_t *axis, const uint8_t **order) {
  if (word_bits != NULL) *word_bits = p->word_bits;
  if (axis != NULL) *axis = p->axis;
  if (order != NULL) *order = p->order;
  return hurray__packing_lanes(p, dtype);
}

uint32_t hurray_descriptor_quant_code_packing(const HurrayDescriptor *d, uint32_t *word_bits,
                                              uint32_t *axis, const uint8_t **order) {
  return get_packing(&hurray__qs(&d->quant)->code_packing, d->dtype, word_bits, axis, order);
}
uint32_t hurray_descriptor_quant_zero_point_packing(const HurrayDescriptor *d, uint32_t *word_bits,
                                                    uint32_t *axis, const uint8_t **order) {
  return get_packing(&hurray__qs(&d->quant)->zero_point_packing, d->quant.zero_point_dtype,
                     word_bits, axis, order);
}
int64_t hurray_descriptor_quant_zero_point_offset(const HurrayDescriptor *d) {
  return d->quant.zero_point_offset;
}
uint32_t hurray_descriptor_quant_axis2(const HurrayDescriptor *d) { return d->quant.axis2; }
uint64_t hurray_descriptor_quant_block_size2(const HurrayDescriptor *d) {
  return d->quant.block_size2;
}
uint32_t hurray_descriptor_quant_group_index_buffer(const HurrayDescriptor *d) {
  return d->quant.group_index_buffer;
}
HurrayDType hurray_descriptor_quant_group_index_dtype(const HurrayDescriptor *d) {
  return d->quant.group_index_dtype;
}
uint32_t hurray_descriptor_quant_codebook_buffer(const HurrayDescriptor *d) {
  return d->quant.codebook_buffer;
}
uint32_t hurray_descriptor_quant_scale_codebook_buffer(const HurrayDescriptor *d) {
  return d->quant.scale_codebook_buffer;
}
uint32_t hurray_descriptor_quant_super_scale_buffer(const HurrayDescriptor *d) {
  return d->quant.super_scale_buffer;
}
HurrayDType hurray_descriptor_quant_super_scale_dtype(const HurrayDescriptor *d) {
  return d->quant.super_scale_dtype;
}
uint64_t hurray_descriptor_quant_super_block_size(const HurrayDescriptor *d) {
  return d->quant.super_block_size;
}
HurraySuperScaleOp hurray_descriptor_quant_super_op(const HurrayDescriptor *d) {
  return (HurraySuperScaleOp)d->quant.super_op;
}
double hurray_descriptor_quant_scale_offset(const HurrayDescriptor *d) {
  return d->quant.scale_offset;
}

HurrayBlockFormat hurray_descriptor_quant_block_format(const HurrayDescriptor *d) {
  return d->quant.kind == HURRAY_QUANT_BLOCK_CODED ? d->quant.block_format : (HurrayBlockFormat)0;
}

HurrayQuantKind hurray_descriptor_quant_kind(const HurrayDescriptor *d) { return d->quant.kind; }
uint32_t hurray_descriptor_quant_axis(const HurrayDescriptor *d) { return d->quant.axis; }
uint64_t hurray_descriptor_quant_block_size(const HurrayDescriptor *d) {
  return d->quant.block_size;
}
double hurray_descriptor_quant_scale(const HurrayDescriptor *d) { return d->quant.scale; }
int64_t hurray_descriptor_quant_zero_point(const HurrayDescriptor *d) {
  return d->quant.zero_point;
}
uint32_t hurray_descriptor_quant_scale_buffer(const HurrayDescriptor *d) {
  return d->quant.scale_buffer;
}
HurrayDType hurray_descriptor_quant_scale_dtype(const HurrayDescriptor *d) {
  return d->quant.scale_dtype;
}
uint32_t hurray_descriptor_quant_zero_point_buffer(const HurrayDescriptor *d) {
  return d->quant.zero_point_buffer;
}
HurrayDType hurray_descriptor_quant_zero_point_dtype(const HurrayDescriptor *d) {
  return d->quant.zero_point_dtype;
}
HurrayMxElement hurray_descriptor_quant_mx_element(const HurrayDescriptor *d) {
  return d->quant.mx_element;
}

/* ------------------------------------------------------------- statistics */

void hurray_descriptor_set_stat_min(HurrayDescriptor *d, double min) {
  if (d == NULL) return;
  d->stat_flags |= HURRAY_STAT_MIN;
  d->stat_min = min;
}
void hurray_descriptor_set_stat_max(HurrayDescriptor *d, double max) {
  if (d == NULL) return;
  d->stat_flags |= HURRAY_STAT_MAX;
  d->stat_max = max;
}
void hurray_descriptor_set_stat_nan_count(HurrayDescriptor *d, uint64_t nan_count) {
  if (d == NULL) return;
  d->stat_flags |= HURRAY_STAT_NAN_COUNT;
  d->stat_nan_count = nan_count;
}
void hurray_descriptor_set_stat_zero_count(HurrayDescriptor *d, uint64_t zero_count) {
  if (d == NULL) return;
  d->stat_flags |= HURRAY_STAT_ZERO_COUNT;
  d->stat_zero_count = zero_count;
}
void hurray_descriptor_clear_statistics(HurrayDescriptor *d) {
  if (d == NULL) return;
  d->stat_flags = 0;
  d->stat_min = d->stat_max = 0;
  d->stat_nan_count = d->stat_zero_count = 0;
}
bool hurray_descriptor_stat_min(const HurrayDescriptor *d, double *out) {
  if (!(d->stat_flags & HURRAY_STAT_MIN)) return false;
  *out = d->stat_min;
  return true;
}
bool hurray_descriptor_stat_max(const HurrayDescriptor *d, double *out) {
  if (!(d->stat_flags & HURRAY_STAT_MAX)) return false;
  *out = d->stat_max;
  return true;
}
bool hurray_descriptor_stat_nan_count(const HurrayDescriptor *d, uint64_t *out) {
  if (!(d->stat_flags & HURRAY_STAT_NAN_COUNT)) return false;
  *out = d->stat_nan_count;
  return true;
}
bool hurray_descriptor_stat_zero_count(const HurrayDescriptor *d, uint64_t *out) {
  if (!(d->stat_flags & HURRAY_STAT_ZERO_COUNT)) return false;
  *out = d->stat_zero_count;
  return true;
}

/* ------------------------------------------------------------------ shard */

HurrayStatus hurray_descriptor_set_shard(HurrayDescriptor *d, uint32_t rank,
                                         const uint64_t *global_shape, const uint64_t *offsets,
                                         HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  if (rank > HURRAY_MAX_RANK) {
    return hurray__fail(error, HURRAY_ERR_LIMIT, "shard: rank %u exceeds the limit of %u", rank,
                        HURRAY_MAX_RANK);
  }
  if (rank > 0 && (global_shape == NULL || offsets == NULL)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "shard: global_shape and offsets must not be NULL");
  }
  if (!hurray__descriptor_add_shard(d)) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  d->shard_rank = rank;
  *d->shard = (HurrayShardFields){{0}, {0}};
  if (rank > 0) {
    memcpy(d->shard->global, global_shape, rank * sizeof *global_shape);
    memcpy(d->shard->offsets, offsets, rank * sizeof *offsets);
  }
  return HURRAY_OK;
}

void hurray_descriptor_clear_shard(HurrayDescriptor *d) {
  if (d == NULL) return;
  d->shard_rank = 0;
  free(d->shard);
  d->shard = NULL;
}
bool hurray_descriptor_has_shard(const HurrayDescriptor *d) { return d->shard != NULL; }
uint32_t hurray_descriptor_shard_rank(const HurrayDescriptor *d) { return d->shard_rank; }
const uint64_t *hurray_descriptor_shard_global_shape(const HurrayDescriptor *d) {
  return d->shard != NULL ? d->shard->global : NULL;
}
const uint64_t *hurray_descriptor_shard_offsets(const HurrayDescriptor *d) {
  return d->shard != NULL ? d->shard->offsets : NULL;
}

/* --------------------------------------------------------- extension type */

HurrayStatus hurray_descriptor_set_extension(HurrayDescriptor *d, const char *name,
                                             const uint8_t *metadata, size_t metadata_len,
                                             HurrayError *error) {
  HURRAY_RETURN_NOT_OK(require_descriptor(d, error));
  if (name == NULL || (metadata == NULL && metadata_len > 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "extension: name (and metadata when metadata_len > 0) must not be NULL");
  }
  size_t name_len = strlen(name);
  if (name_len > HURRAY_MAX_NAME_BYTES) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "extension.name: %zu bytes exceeds the limit of %u", name_len,
                        HURRAY_MAX_NAME_BYTES);
  }
  if (metadata_len > HURRAY_MAX_EXTENSION_METADATA_BYTES) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "extension.metadata: %zu bytes exceeds the limit of %u", metadata_len,
                        HURRAY_MAX_EXTENSION_METADATA_BYTES);
  }
  char *name_copy = dup_bytes(name, name_len, true);
  uint8_t *meta_copy = (uint8_t *)dup_bytes(metadata, metadata_len, false);
  if (name_copy == NULL || meta_copy == NULL) {
    free(name_copy);
    free(meta_copy);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  hurray_descriptor_clear_extension(d);
  d->extension_name = name_copy;
  d->extension_metadata = meta_copy;
  d->extension_metadata_len = metadata_len;
  return HURRAY_OK;
}

void hurray_descriptor_clear_extension(HurrayDescriptor *d) {
  if (d == NULL) return;
  free(d->extension_name);
  free(d->extension_metadata);
  d->extension_name = NULL;
  d->extension_metadata = NULL;
  d->extension_metadata_len = 0;
}

const char *hurray_descriptor_extension_name(const HurrayDescriptor *d) {
  return d->extension_name;
}

const uint8_t *hurray_descriptor_extension_metadata(const HurrayDescriptor *d, size_t *len_out) {
  if (len_out != NULL) {
    *len_out = d->extension_metadata_len;
  }
  return d->extension_name != NULL ? d->extension_metadata : NULL;
}
