/*
 * hurray_descriptor_validate: the consistency rules of
 * docs/spec/descriptor-encoding.md ("Validation"), one error code each.
 *
 * The walk visits every node (the root and, recursively, composite
 * members). Each buffer reference is registered through use_buffer(), which
 * checks the index and role and records how many bytes that use needs; the
 * table is checked against those needs once the walk is done. Placement
 * validation (src/buffer/placement.c) reuses the same needs.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "descriptor_internal.h"
#include "error.h"
#include "validate_internal.h"

#define PATH_BYTES 160

typedef struct Walk {
  const HurrayDescriptor *root;
  uint64_t *need; /* per table entry */
  bool *used;
  HurrayError *error;
  uint32_t members; /* composite members seen so far, at every depth */
} Walk;

#define FAIL(code, ...) hurray__fail(w->error, code, __VA_ARGS__)

static bool dtype_is_integer(HurrayDType t) {
  switch (t) {
    case HURRAY_DTYPE_INT8:
    case HURRAY_DTYPE_INT16:
    case HURRAY_DTYPE_INT32:
    case HURRAY_DTYPE_INT64:
    case HURRAY_DTYPE_UINT8:
    case HURRAY_DTYPE_UINT16:
    case HURRAY_DTYPE_UINT32:
    case HURRAY_DTYPE_UINT64:
    case HURRAY_DTYPE_INT4:
    case HURRAY_DTYPE_UINT4: return true;
    default: return false;
  }
}

static bool dtype_is_narrow_float(HurrayDType t) {
  switch (t) {
    case HURRAY_DTYPE_FLOAT8_E4M3FN:
    case HURRAY_DTYPE_FLOAT8_E5M2:
    case HURRAY_DTYPE_FLOAT6_E3M2FN:
    case HURRAY_DTYPE_FLOAT6_E2M3FN:
    case HURRAY_DTYPE_FLOAT4_E2M1FN: return true;
    default: return false;
  }
}

static bool dtype_is_scale(HurrayDType t) {
  return t == HURRAY_DTYPE_FLOAT16 || t == HURRAY_DTYPE_BFLOAT16 || t == HURRAY_DTYPE_FLOAT32 ||
         t == HURRAY_DTYPE_FLOAT64;
}

/* Scale dtypes of per-channel, block affine and NF4: the wide floats, the
 * fp8 scales of NVFP4-like formats (ADR-0024), and uint8 scale codes that
 * a scale codebook maps (bitsandbytes double quantization). */
static HurrayStatus check_scale_dtype(Walk *w, const char *path, const char *field,
                                      const HurrayQuant *q) {
  HurrayDType t = q->scale_dtype;
  const char *name = hurray_dtype_name(t) ? hurray_dtype_name(t) : "?";
  if (q->scale_codebook_buffer != HURRAY_NO_BUFFER) {
    if (t != HURRAY_DTYPE_UINT8) {
      return FAIL(HURRAY_ERR_QUANT_SCALE_DTYPE,
                  "%squantization.%s: %s; scales mapped by a scale codebook are uint8 codes", path,
                  field, name);
    }
    return HURRAY_OK;
  }
  if (!dtype_is_scale(t) && t != HURRAY_DTYPE_FLOAT8_E4M3FN && t != HURRAY_DTYPE_FLOAT8_E5M2 &&
      t != HURRAY_DTYPE_FLOAT8_E8M0FNU) {
    return FAIL(HURRAY_ERR_QUANT_SCALE_DTYPE,
                "%squantization.%s: %s is not float16, bfloat16, float32, float64, "
                "float8_e4m3fn, float8_e5m2 or float8_e8m0fnu",
                path, field, name);
  }
  return HURRAY_OK;
}

static bool dtype_is_index(HurrayDType t) {
  return t == HURRAY_DTYPE_INT32 || t == HURRAY_DTYPE_INT64;
}

/* Inclusive range of an integer dtype, as int64 bounds clipped for uint64. */
static void integer_range(HurrayDType t, int64_t *lo, uint64_t *hi) {
  uint32_t bits = hurray_dtype_bits(t);
  bool is_signed = t == HURRAY_DTYPE_INT8 || t == HURRAY_DTYPE_INT16 || t == HURRAY_DTYPE_INT32 ||
                   t == HURRAY_DTYPE_INT64 || t == HURRAY_DTYPE_INT4;
  if (is_signed) {
    *lo = bits == 64 ? INT64_MIN : -((int64_t)1 << (bits - 1));
    *hi = ((uint64_t)1 << (bits - 1)) - 1;
  } else {
    *lo = 0;
    *hi = bits == 64 ? UINT64_MAX : ((uint64_t)1 << bits) - 1;
  }
}

static HurrayStatus storage_bytes(Walk *w, const char *path, const char *field, HurrayDType dtype,
                                  uint64_t count, uint64_t *out) {
  if (hurray_dtype_storage_bytes(dtype, count, out) != HURRAY_OK) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%s%s: %llu elements of %s overflow 64 bits", path, field,
                (unsigned long long)count, hurray_dtype_name(dtype));
  }
  return HURRAY_OK;
}

/* Registers that `field` of the node at `path` places `bytes` bytes in
 * buffer `index`, which must have role `role`. When `exact_code` is not OK,
 * the table entry's byte_size must equal `bytes` exactly (scale-like
 * buffers), failing with that code. */
static HurrayStatus use_buffer(Walk *w, const char *path, const char *field, uint32_t index,
                               HurrayBufferRole role, uint64_t bytes, HurrayStatus exact_code,
                               const char *what) {
  const HurrayDescriptor *root = w->root;
  if (index >= root->buffer_count) {
    return FAIL(HURRAY_ERR_BUFFER_INDEX,
                "%s%s: buffer %u does not exist (the buffer table has %u entries)", path, field,
                index, root->buffer_count);
  }
  const HurrayBufferEntry *entry = &root->buffers[index];
  if (entry->role != role) {
    return FAIL(HURRAY_ERR_BUFFER_ROLE, "%s%s: buffer %u has role %s, expected %s", path, field,
                index, hurray__role_name(entry->role), hurray__role_name(role));
  }
  if (exact_code != HURRAY_OK && entry->byte_size != bytes) {
    return FAIL(exact_code, "%s%s: buffer %u declares %llu bytes, but %s needs exactly %llu", path,
                field, index, (unsigned long long)entry->byte_size, what,
                (unsigned long long)bytes);
  }
  w->used[index] = true;
  if (bytes > w->need[index]) {
    w->need[index] = bytes;
  }
  return HURRAY_OK;
}

/* Bytes a dense view needs from the start of its data buffer. */
static HurrayStatus dense_extent(Walk *w, const char *path, const HurrayDescriptor *d,
                                 uint64_t numel, uint64_t *out) {
  uint64_t bytes;
  if (d->strides == NULL) {
    HURRAY_RETURN_NOT_OK(storage_bytes(w, path, "shape", d->dtype, numel, &bytes));
  } else if (numel == 0) {
    bytes = 0;
  } else {
    /* Strides are in elements and may be negative; the furthest element
     * forward and backward from element 0 bound the span. */
    uint64_t forward = 0, backward = 0;
    for (uint32_t i = 0; i < d->rank; i++) {
      int64_t s = d->strides[i];
      uint64_t mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
      uint64_t reach;
      uint64_t *side = s < 0 ? &backward : &forward;
      if (!hurray__mul_u64(mag, d->shape[i] - 1, &reach) || !hurray__add_u64(*side, reach, side)) {
        return FAIL(HURRAY_ERR_OVERFLOW, "%sstrides[%u]: the view's extent overflows 64 bits",
                    path, i);
      }
    }
    uint64_t item = hurray_dtype_bits(d->dtype) / 8;
    uint64_t back_bytes, span;
    if (!hurray__mul_u64(backward, item, &back_bytes) || !hurray__add_u64(forward, 1, &span) ||
        !hurray__mul_u64(span, item, &bytes)) {
      return FAIL(HURRAY_ERR_OVERFLOW, "%sstrides: the view's extent overflows 64 bits", path);
    }
    if (back_bytes > d->byte_offset) {
      return FAIL(HURRAY_ERR_STRIDES,
                  "%sstrides: negative strides reach %llu bytes before the start of the buffer "
                  "(byte_offset is %llu)",
                  path, (unsigned long long)back_bytes, (unsigned long long)d->byte_offset);
    }
  }
  if (!hurray__add_u64(bytes, d->byte_offset, out)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%sbyte_offset: offset plus extent overflows 64 bits", path);
  }
  return HURRAY_OK;
}

static HurrayStatus check_sparse(Walk *w, const char *path, const HurrayDescriptor *d,
                                 uint64_t numel) {
  const HurrayLayout *l = &d->layout;
  if (!dtype_is_index(l->index_dtype)) {
    return FAIL(HURRAY_ERR_SPARSE_INDEX_DTYPE, "%slayout.index_dtype: %s is not int32 or int64",
                path, hurray_dtype_name(l->index_dtype) ? hurray_dtype_name(l->index_dtype) : "?");
  }
  if (l->format == HURRAY_SPARSE_COO ? d->rank < 1 : d->rank != 2) {
    return FAIL(HURRAY_ERR_SPARSE_RANK, "%sshape: %s needs %s, got rank %u", path,
                hurray__sparse_format_name(l->format),
                l->format == HURRAY_SPARSE_COO ? "rank >= 1" : "rank 2", d->rank);
  }
  /* Every coordinate and every pointer value must fit the index dtype. */
  uint64_t index_max = l->index_dtype == HURRAY_DTYPE_INT32 ? INT32_MAX : INT64_MAX;
  for (uint32_t i = 0; i < d->rank; i++) {
    if (d->shape[i] > index_max) {
      return FAIL(HURRAY_ERR_SPARSE_INDEX_DTYPE,
                  "%slayout.index_dtype: %s cannot index dim %u of %llu", path,
                  hurray_dtype_name(l->index_dtype), i, (unsigned long long)d->shape[i]);
    }
  }
  uint64_t isz = hurray_dtype_bits(l->index_dtype) / 8;
  uint64_t block_elems = 1, capacity = numel;
  if (l->format == HURRAY_SPARSE_BSR) {
    if (l->block_rows == 0 || l->block_cols == 0 || d->shape[0] % l->block_rows != 0 ||
        d->shape[1] % l->block_cols != 0) {
      return FAIL(HURRAY_ERR_SPARSE_BLOCK,
                  "%slayout.block_shape: %llux%llu blocks do not tile the %llux%llu shape", path,
                  (unsigned long long)l->block_rows, (unsigned long long)l->block_cols,
                  (unsigned long long)d->shape[0], (unsigned long long)d->shape[1]);
    }
    block_elems = l->block_rows * l->block_cols; /* <= numel: no overflow */
    capacity = (d->shape[0] / l->block_rows) * (d->shape[1] / l->block_cols);
  }
  if (l->nnz > capacity || l->nnz > index_max) {
    return FAIL(HURRAY_ERR_SPARSE_NNZ, "%slayout.nnz: %llu stored %s exceed %s (%llu)", path,
                (unsigned long long)l->nnz, l->format == HURRAY_SPARSE_BSR ? "blocks" : "elements",
                l->nnz > capacity ? "what the shape holds" : "the index dtype's range",
                (unsigned long long)(l->nnz > capacity ? capacity : index_max));
  }
  uint64_t bytes = 0, value_count = 0;
  if (!hurray__mul_u64(l->nnz, block_elems, &value_count)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%slayout.nnz: value count overflows", path);
  }
  HURRAY_RETURN_NOT_OK(
      storage_bytes(w, path, "layout.values_buffer", d->dtype, value_count, &bytes));
  if (!hurray__add_u64(bytes, d->byte_offset, &bytes)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%sbyte_offset: overflows", path);
  }
  HURRAY_RETURN_NOT_OK(use_buffer(w, path, "layout.values_buffer", l->data_buffer,
                                  HURRAY_ROLE_VALUES, bytes, HURRAY_OK, NULL));
  uint64_t index_bytes = l->nnz * isz; /* nnz <= INT64_MAX / 8 would not hold; check */
  if (!hurray__mul_u64(l->nnz, isz, &index_bytes)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%slayout.nnz: index bytes overflow", path);
  }
  if (l->format == HURRAY_SPARSE_COO) {
    for (uint32_t i = 0; i < d->rank; i++) {
      char field[48];
      snprintf(field, sizeof field, "layout.index_buffers[%u]", i);
      HURRAY_RETURN_NOT_OK(use_buffer(w, path, field, l->coo_index_buffers[i], HURRAY_ROLE_INDICES,
                                      index_bytes, HURRAY_OK, NULL));
    }
    return HURRAY_OK;
  }
  uint64_t compressed_dim = l->format == HURRAY_SPARSE_CSC ? d->shape[1] : d->shape[0];
  if (l->format == HURRAY_SPARSE_BSR) {
    compressed_dim /= l->block_rows;
  }
  uint64_t indptr_bytes = (compressed_dim + 1) * isz; /* dim <= INT64_MAX: fits after check */
  if (!hurray__mul_u64(compressed_dim + 1, isz, &indptr_bytes)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%sshape: indptr bytes overflow", path);
  }
  HURRAY_RETURN_NOT_OK(use_buffer(w, path, "layout.indptr_buffer", l->indptr_buffer,
                                  HURRAY_ROLE_INDPTR, indptr_bytes, HURRAY_OK, NULL));
  return use_buffer(w, path, "layout.indices_buffer", l->indices_buffer, HURRAY_ROLE_INDICES,
                    index_bytes, HURRAY_OK, NULL);
}

static HurrayStatus check_paged(Walk *w, const char *path, const HurrayDescriptor *d) {
  const HurrayLayout *l = &d->layout;
  if (l->axis >= d->rank) {
    return FAIL(HURRAY_ERR_PAGED_AXIS, "%slayout.axis: %u is not below the rank %u", path, l->axis,
                d->rank);
  }
  uint64_t inner = 1, outer = 1;
  for (uint32_t i = 0; i < d->rank; i++) {
    uint64_t *side = i < l->axis ? &outer : &inner;
    if (i != l->axis && !hurray__mul_u64(*side, d->shape[i], side)) {
      return FAIL(HURRAY_ERR_OVERFLOW, "%sshape: element count overflows 64 bits", path);
    }
  }
  uint64_t page_elems, page_bits;
  if (l->page_size == 0) {
    return FAIL(HURRAY_ERR_PAGED_PAGE_SIZE, "%slayout.page_size: must be at least 1", path);
  }
  if (!hurray__mul_u64(l->page_size, inner, &page_elems) ||
      !hurray__mul_u64(page_elems, hurray_dtype_bits(d->dtype), &page_bits)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%slayout.page_size: page bytes overflow", path);
  }
  if (page_bits % 8 != 0) {
    return FAIL(HURRAY_ERR_PAGED_PAGE_SIZE,
                "%slayout.page_size: a page of %llu %s elements does not end on a byte boundary",
                path, (unsigned long long)page_elems, hurray_dtype_name(d->dtype));
  }
  if (!dtype_is_index(l->index_dtype)) {
    return FAIL(HURRAY_ERR_PAGED_TABLE_DTYPE, "%slayout.table_dtype: %s is not int32 or int64",
                path, hurray_dtype_name(l->index_dtype) ? hurray_dtype_name(l->index_dtype) : "?");
  }
  uint64_t pool_bytes, table_entries, table_bytes;
  if (!hurray__mul_u64(page_bits / 8, l->num_pages, &pool_bytes) ||
      !hurray__add_u64(pool_bytes, d->byte_offset, &pool_bytes) ||
      !hurray__mul_u64(outer, hurray__ceil_div_u64(d->shape[l->axis], l->page_size),
                       &table_entries) ||
      !hurray__mul_u64(table_entries, hurray_dtype_bits(l->index_dtype) / 8, &table_bytes)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%slayout: pool or page table bytes overflow", path);
  }
  HURRAY_RETURN_NOT_OK(use_buffer(w, path, "layout.pool_buffer", l->data_buffer,
                                  HURRAY_ROLE_PAGE_POOL, pool_bytes, HURRAY_OK, NULL));
  return use_buffer(w, path, "layout.table_buffer", l->table_buffer, HURRAY_ROLE_PAGE_TABLE,
                    table_bytes, HURRAY_OK, NULL);
}

/* Scales for block-wise kinds: the data shape with shape[axis] replaced by
 * ceil(shape[axis] / block). */
static HurrayStatus blocked_count(Walk *w, const char *path, const HurrayDescriptor *d,
                                  uint32_t axis, uint64_t block, uint64_t *out) {
  uint64_t n = 1;
  for (uint32_t i = 0; i < d->rank; i++) {
    uint64_t dim = i == axis ? hurray__ceil_div_u64(d->shape[i], block) : d->shape[i];
    if (!hurray__mul_u64(n, dim, &n)) {
      return FAIL(HURRAY_ERR_OVERFLOW, "%squantization: scale count overflows", path);
    }
  }
  *out = n;
  return HURRAY_OK;
}

/* ------------------------- packed and two-level fields (ADR-0024) */

static bool kind_takes_packed(HurrayQuantKind k) {
  return k == HURRAY_QUANT_PER_CHANNEL_AFFINE || k == HURRAY_QUANT_BLOCK_AFFINE ||
         k == HURRAY_QUANT_NF4;
}

/* A packing over an array of `shape` (storage order) of `dtype` elements:
 * word size, lanes, axis, lanes dividing the axis, the lane order a
 * permutation; *bytes gets the words' byte size. */
static HurrayStatus check_packing(Walk *w, const char *path, const char *field,
                                  const HurrayQuantPacking *p, HurrayDType dtype,
                                  const uint64_t *shape, uint32_t rank, uint64_t *bytes) {
  uint32_t lanes = hurray__packing_lanes(p, dtype);
  if (p->word_bits == 0) {
    bool clean = p->axis == 0;
    for (uint32_t j = 0; j < 32; j++) clean = clean && p->order[j] == 0;
    return clean ? HURRAY_OK
                 : FAIL(HURRAY_ERR_QUANT_PACKING,
                        "%squantization.%s: axis and order must be 0 when word_bits is 0", path,
                        field);
  }
  if ((p->word_bits != 8 && p->word_bits != 16 && p->word_bits != 32) || lanes < 2) {
    return FAIL(HURRAY_ERR_QUANT_PACKING,
                "%squantization.%s.word_bits: %u-bit words cannot hold several %s lanes (8, 16 "
                "or 32 bits, a multiple of the element bits)",
                path, field, p->word_bits,
                hurray_dtype_name(dtype) ? hurray_dtype_name(dtype) : "?");
  }
  if (p->axis >= rank) {
    return FAIL(HURRAY_ERR_QUANT_PACKING, "%squantization.%s.axis: %u is not below the rank %u",
                path, field, p->axis, rank);
  }
  if (shape[p->axis] % lanes != 0) {
    return FAIL(HURRAY_ERR_QUANT_PACKING,
                "%squantization.%s: %u lanes per word do not divide the packed axis %u of "
                "length %llu",
                path, field, lanes, p->axis, (unsigned long long)shape[p->axis]);
  }
  uint32_t seen = 0;
  for (uint32_t j = 0; j < 32; j++) {
    bool ok = j < lanes ? p->order[j] < lanes && !(seen & (1u << p->order[j])) : p->order[j] == 0;
    if (!ok) {
      return FAIL(HURRAY_ERR_QUANT_PACKING,
                  "%squantization.%s.order: not a permutation of 0..%u (entry %u is %u)", path,
                  field, lanes - 1, j, p->order[j]);
    }
    if (j < lanes) seen |= 1u << p->order[j];
  }
  uint64_t count = 1;
  for (uint32_t i = 0; i < rank; i++) {
    if (!hurray__mul_u64(count, shape[i], &count)) {
      return FAIL(HURRAY_ERR_OVERFLOW, "%squantization.%s: element count overflows", path, field);
    }
  }
  if (!hurray__mul_u64(count / lanes, p->word_bits / 8u, bytes)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%squantization.%s: word bytes overflow", path, field);
  }
  return HURRAY_OK;
}

/* Storage axes and code packing, and the bytes the codes then need from
 * the start of the data buffer. */
static HurrayStatus packed_extent(Walk *w, const char *path, const HurrayDescriptor *d,
                                  uint64_t numel, uint64_t *out) {
  const HurrayQuant *q = &d->quant;
  if (d->strides != NULL) {
    return FAIL(HURRAY_ERR_STRIDES,
                "%sstrides: codes with storage axes or packed words are row-major, without "
                "strides",
                path);
  }
  const HurrayQuantStorage *qs = hurray__qs(q);
  uint32_t seen = 0;
  for (uint32_t k = 0; k < HURRAY_MAX_RANK && qs->has_storage_axes; k++) {
    uint32_t a = qs->storage_axes[k];
    bool ok = k < d->rank ? a < d->rank && !(seen & (1u << a)) : a == 0;
    if (!ok) {
      return FAIL(HURRAY_ERR_QUANT_PACKING,
                  "%squantization.storage_axes: not a permutation of the %u axes (entry %u is %u)",
                  path, d->rank, k, a);
    }
    if (k < d->rank) seen |= 1u << a;
  }
  uint64_t bytes;
  if (qs->code_packing.word_bits == 0) {
    HURRAY_RETURN_NOT_OK(storage_bytes(w, path, "shape", d->dtype, numel, &bytes));
  } else {
    uint64_t storage[HURRAY_MAX_RANK];
    uint32_t rank = d->rank;
    for (uint32_t k = 0; k < rank; k++) {
      storage[k] = d->shape[qs->has_storage_axes ? qs->storage_axes[k] : k];
    }
    if (q->kind == HURRAY_QUANT_NF4) {
      storage[0] = numel; /* NF4 codes are the flat sequence */
      rank = 1;
    }
    HURRAY_RETURN_NOT_OK(check_packing(w, path, "code_packing", &qs->code_packing, d->dtype,
                                       storage, rank, &bytes));
  }
  if (!hurray__add_u64(bytes, d->byte_offset, out)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%sbyte_offset: offset plus extent overflows 64 bits", path);
  }
  return HURRAY_OK;
}

/* Block affine's second blocked axis. */
static HurrayStatus check_block2(Walk *w, const char *path, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  if (q->block_size2 == 0) {
    return q->axis2 == 0 ? HURRAY_OK
                         : FAIL(HURRAY_ERR_QUANT_FIELD,
                                "%squantization.axis2: %u without a block_size2", path, q->axis2);
  }
  if (q->axis2 >= d->rank || q->axis2 == q->axis) {
    return FAIL(HURRAY_ERR_QUANT_AXIS,
                "%squantization.axis2: %u must be below the rank %u and differ from axis %u", path,
                q->axis2, d->rank, q->axis);
  }
  return HURRAY_OK;
}

/* Number of scales of a block-affine tensor (blocked axes ceil-divided). */
static HurrayStatus scale_count(Walk *w, const char *path, const HurrayDescriptor *d,
                                uint64_t *out) {
  uint64_t shape[HURRAY_MAX_RANK];
  uint32_t rank;
  hurray__quant_scale_shape(d, shape, &rank);
  uint64_t n = 1;
  for (uint32_t i = 0; i < rank; i++) {
    if (!hurray__mul_u64(n, shape[i], &n)) {
      return FAIL(HURRAY_ERR_OVERFLOW, "%squantization: scale count overflows", path);
    }
  }
  *out = n;
  return HURRAY_OK;
}

static HurrayStatus zero_point_packed_bytes(Walk *w, const char *path, const HurrayDescriptor *d,
                                            uint64_t *bytes) {
  uint64_t shape[HURRAY_MAX_RANK];
  uint32_t rank;
  hurray__quant_scale_shape(d, shape, &rank);
  return check_packing(w, path, "zero_point_packing", &hurray__qs(&d->quant)->zero_point_packing,
                       d->quant.zero_point_dtype, shape, rank, bytes);
}

/* Fields a kind does not take, and the defaults every absent one keeps. */
static HurrayStatus check_packed_kinds(Walk *w, const char *path, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  const char *kind = hurray__quant_kind_name(q->kind);
  const char *bad = NULL;
  if (!kind_takes_packed(q->kind)) {
    bad = hurray__quant_has_packed(q) ? "packed or two-level fields" : NULL;
  } else if (q->kind == HURRAY_QUANT_NF4) {
    bad = hurray__qs(q)->has_storage_axes             ? "storage_axes"
          : q->zero_point_offset != 0                 ? "zero_point_offset"
          : q->group_index_buffer != HURRAY_NO_BUFFER ? "group_index_buffer"
          : q->block_size2 != 0                       ? "block_size2"
                                                      : NULL;
  } else if (q->kind == HURRAY_QUANT_PER_CHANNEL_AFFINE) {
    bad = q->group_index_buffer != HURRAY_NO_BUFFER ? "group_index_buffer"
          : q->block_size2 != 0                     ? "block_size2"
                                                    : NULL;
  }
  if (bad != NULL) {
    return FAIL(HURRAY_ERR_QUANT_FIELD, "%squantization: %s quantization takes no %s", path, kind,
                bad);
  }
  if (hurray__qs(q)->zero_point_packing.word_bits != 0 &&
      q->zero_point_buffer == HURRAY_NO_BUFFER) {
    return FAIL(HURRAY_ERR_QUANT_FIELD,
                "%squantization.zero_point_packing: there is no zero-point buffer to pack", path);
  }
  if ((q->group_index_buffer == HURRAY_NO_BUFFER) !=
      (q->group_index_dtype == HURRAY_DTYPE_INVALID)) {
    return FAIL(HURRAY_ERR_QUANT_FIELD,
                "%squantization.group_index_dtype: set exactly when there is a group index "
                "buffer",
                path);
  }
  if (q->super_scale_buffer == HURRAY_NO_BUFFER &&
      (q->super_scale_dtype != HURRAY_DTYPE_INVALID || q->super_op != 0 ||
       q->super_block_size != 0)) {
    return FAIL(HURRAY_ERR_QUANT_FIELD,
                "%squantization.super_scale_buffer: super-scale dtype, op or block size without "
                "a super-scale buffer",
                path);
  }
  return HURRAY_OK;
}

/* Code dtype, zero points and offsets once any field is in use: the kernel
 * forms code - (zero + offset) exactly in 64 bits. */
static HurrayStatus check_packed_codes(Walk *w, const char *path, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  bool float_codes = dtype_is_narrow_float(d->dtype);
  if (hurray_dtype_bits(d->dtype) > 32) {
    return FAIL(HURRAY_ERR_QUANT_FIELD,
                "%sdtype: %s codes take no packed or two-level fields (32 bits at most)", path,
                hurray_dtype_name(d->dtype));
  }
  if (q->zero_point_buffer != HURRAY_NO_BUFFER && hurray_dtype_bits(q->zero_point_dtype) > 32) {
    return FAIL(HURRAY_ERR_QUANT_ZERO_POINT_DTYPE,
                "%squantization.zero_point_dtype: %s; with packed or two-level fields zero "
                "points have 32 bits at most",
                path, hurray_dtype_name(q->zero_point_dtype));
  }
  int64_t limit = (int64_t)1 << 32;
  if (q->zero_point_offset > limit || q->zero_point_offset < -limit ||
      (float_codes && q->zero_point_offset != 0)) {
    return FAIL(HURRAY_ERR_QUANT_ZERO_POINT,
                "%squantization.zero_point_offset: %lld is outside [-2^32, 2^32] or set for "
                "%s codes",
                path, (long long)q->zero_point_offset, hurray_dtype_name(d->dtype));
  }
  if (q->codebook_buffer != HURRAY_NO_BUFFER) {
    if (d->dtype != HURRAY_DTYPE_UINT4 && d->dtype != HURRAY_DTYPE_UINT8) {
      return FAIL(HURRAY_ERR_QUANT_FIELD,
                  "%squantization.codebook_buffer: codebook codes are uint4 or uint8, not %s",
                  path, hurray_dtype_name(d->dtype));
    }
    if (q->zero_point_buffer != HURRAY_NO_BUFFER || q->zero_point != 0 ||
        q->zero_point_offset != 0) {
      return FAIL(HURRAY_ERR_QUANT_FIELD,
                  "%squantization.codebook_buffer: codebook codes take no zero point", path);
    }
  }
  float used = (float)q->scale_offset;
  if (!isfinite(q->scale_offset) || !isfinite(used)) {
    return FAIL(HURRAY_ERR_QUANT_SCALE, "%squantization.scale_offset: %g is not finite as float32",
                path, q->scale_offset);
  }
  return HURRAY_OK;
}

/* The buffers of the two-level fields, each of an exact size. */
static HurrayStatus check_packed_buffers(Walk *w, const char *path, const HurrayDescriptor *d,
                                         uint64_t scales) {
  const HurrayQuant *q = &d->quant;
  if (q->group_index_buffer != HURRAY_NO_BUFFER) {
    if (q->group_index_dtype != HURRAY_DTYPE_INT32) {
      return FAIL(
          HURRAY_ERR_QUANT_FIELD, "%squantization.group_index_dtype: %s is not int32", path,
          hurray_dtype_name(q->group_index_dtype) ? hurray_dtype_name(q->group_index_dtype) : "?");
    }
    uint64_t bytes;
    HURRAY_RETURN_NOT_OK(storage_bytes(w, path, "quantization.group_index_buffer",
                                       HURRAY_DTYPE_INT32, d->shape[q->axis], &bytes));
    HURRAY_RETURN_NOT_OK(use_buffer(
        w, path, "quantization.group_index_buffer", q->group_index_buffer, HURRAY_ROLE_GROUP_INDEX,
        bytes, HURRAY_ERR_QUANT_FIELD, "one int32 group per position along the axis"));
  }
  if (q->codebook_buffer != HURRAY_NO_BUFFER) {
    HURRAY_RETURN_NOT_OK(use_buffer(w, path, "quantization.codebook_buffer", q->codebook_buffer,
                                    HURRAY_ROLE_CODEBOOK, 4ull << hurray_dtype_bits(d->dtype),
                                    HURRAY_ERR_QUANT_FIELD, "one float32 per code"));
  }
  if (q->scale_codebook_buffer != HURRAY_NO_BUFFER) {
    HURRAY_RETURN_NOT_OK(use_buffer(w, path, "quantization.scale_codebook_buffer",
                                    q->scale_codebook_buffer, HURRAY_ROLE_CODEBOOK, 4 * 256,
                                    HURRAY_ERR_QUANT_FIELD, "256 float32 scale values"));
  }
  if (q->super_scale_buffer == HURRAY_NO_BUFFER) {
    return HURRAY_OK;
  }
  HurrayDType t = q->super_scale_dtype;
  if (t != HURRAY_DTYPE_FLOAT32 && t != HURRAY_DTYPE_FLOAT16 && t != HURRAY_DTYPE_BFLOAT16) {
    return FAIL(HURRAY_ERR_QUANT_SCALE_DTYPE,
                "%squantization.super_scale_dtype: %s is not float32, float16 or bfloat16", path,
                hurray_dtype_name(t) ? hurray_dtype_name(t) : "?");
  }
  if (q->super_op != HURRAY_SUPER_MULTIPLY && q->super_op != HURRAY_SUPER_DIVIDE) {
    return FAIL(HURRAY_ERR_QUANT_FIELD, "%squantization.super_op: unknown operation %u", path,
                q->super_op);
  }
  uint64_t count = q->super_block_size ? hurray__ceil_div_u64(scales, q->super_block_size) : 1;
  uint64_t bytes;
  HURRAY_RETURN_NOT_OK(
      storage_bytes(w, path, "quantization.super_scale_buffer", t, count, &bytes));
  return use_buffer(w, path, "quantization.super_scale_buffer", q->super_scale_buffer,
                    HURRAY_ROLE_SUPER_SCALES, bytes, HURRAY_ERR_QUANT_SCALE_COUNT,
                    "one super scale per super block of scales");
}

static HurrayStatus check_packed(Walk *w, const HurrayDescriptor *d, const char *path) {
  const HurrayQuant *q = &d->quant;
  HURRAY_RETURN_NOT_OK(check_packed_kinds(w, path, d));
  if (!kind_takes_packed(q->kind) || !hurray__quant_has_packed(q)) {
    return HURRAY_OK;
  }
  if (d->strides != NULL) {
    return FAIL(HURRAY_ERR_STRIDES,
                "%sstrides: tensors with packed or two-level quantization fields are row-major",
                path);
  }
  HURRAY_RETURN_NOT_OK(check_packed_codes(w, path, d));
  uint64_t shape[HURRAY_MAX_RANK], scales = 1;
  uint32_t rank;
  hurray__quant_scale_shape(d, shape, &rank);
  for (uint32_t i = 0; i < rank; i++) scales *= shape[i]; /* checked by check_scales */
  return check_packed_buffers(w, path, d, scales);
}

static HurrayStatus check_zero_point(Walk *w, const char *path, const HurrayDescriptor *d,
                                     uint64_t count) {
  const HurrayQuant *q = &d->quant;
  bool float_codes = dtype_is_narrow_float(d->dtype);
  if (q->zero_point_buffer != HURRAY_NO_BUFFER) {
    if (float_codes) {
      return FAIL(HURRAY_ERR_QUANT_ZERO_POINT,
                  "%squantization.zero_point_buffer: %s codes take no zero point", path,
                  hurray_dtype_name(d->dtype));
    }
    if (!dtype_is_integer(q->zero_point_dtype)) {
      return FAIL(
          HURRAY_ERR_QUANT_ZERO_POINT_DTYPE,
          "%squantization.zero_point_dtype: %s is not an integer dtype", path,
          hurray_dtype_name(q->zero_point_dtype) ? hurray_dtype_name(q->zero_point_dtype) : "?");
    }
    uint64_t bytes;
    if (hurray__qs(q)->zero_point_packing.word_bits != 0) {
      HURRAY_RETURN_NOT_OK(zero_point_packed_bytes(w, path, d, &bytes));
    } else {
      HURRAY_RETURN_NOT_OK(storage_bytes(w, path, "quantization.zero_point_buffer",
                                         q->zero_point_dtype, count, &bytes));
    }
    return use_buffer(w, path, "quantization.zero_point_buffer", q->zero_point_buffer,
                      HURRAY_ROLE_ZERO_POINTS, bytes, HURRAY_ERR_QUANT_ZERO_POINT_COUNT,
                      "one zero point per scale");
  }
  if (float_codes) {
    if (q->zero_point != 0) {
      return FAIL(HURRAY_ERR_QUANT_ZERO_POINT,
                  "%squantization.zero_point: %s codes need a zero point of 0, got %lld", path,
                  hurray_dtype_name(d->dtype), (long long)q->zero_point);
    }
    return HURRAY_OK;
  }
  int64_t lo;
  uint64_t hi;
  integer_range(d->dtype, &lo, &hi);
  if (q->zero_point < lo || (q->zero_point >= 0 && (uint64_t)q->zero_point > hi)) {
    return FAIL(HURRAY_ERR_QUANT_ZERO_POINT,
                "%squantization.zero_point: %lld is outside the range of %s", path,
                (long long)q->zero_point, hurray_dtype_name(d->dtype));
  }
  return HURRAY_OK;
}

static HurrayStatus check_scales(Walk *w, const char *path, const HurrayDescriptor *d,
                                 uint64_t count, const char *what) {
  const HurrayQuant *q = &d->quant;
  uint64_t bytes;
  HURRAY_RETURN_NOT_OK(
      storage_bytes(w, path, "quantization.scale_buffer", q->scale_dtype, count, &bytes));
  char description[96];
  snprintf(description, sizeof description, "%llu %s scales (%s)", (unsigned long long)count,
           hurray_dtype_name(q->scale_dtype), what);
  return use_buffer(w, path, "quantization.scale_buffer", q->scale_buffer, HURRAY_ROLE_SCALES,
                    bytes, HURRAY_ERR_QUANT_SCALE_COUNT, description);
}

/* Per-tensor, per-channel and block affine: integer or narrow-float codes,
 * then the scales (and zero points) their kind implies. */
static HurrayStatus check_affine(Walk *w, const char *path, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  const char *dtype_name = hurray_dtype_name(d->dtype);
  uint64_t count = 0;
  if (!dtype_is_integer(d->dtype) && !dtype_is_narrow_float(d->dtype)) {
    return FAIL(HURRAY_ERR_QUANT_DTYPE,
                "%sdtype: %s codes cannot carry affine quantization (integer or fp8/6/4 "
                "needed)",
                path, dtype_name);
  }
  if (q->kind == HURRAY_QUANT_PER_TENSOR_AFFINE) {
    /* Decoders use the scale as binary32 (spec quantization §5): a
     * float64 that is finite but rounds to Inf (1e39) or to 0 (1e-50)
     * would decode every element as Inf, NaN or 0. */
    float used = (float)q->scale;
    if (!isfinite(q->scale) || q->scale == 0.0 || !isfinite(used) || used == 0.0f) {
      return FAIL(HURRAY_ERR_QUANT_SCALE,
                  "%squantization.scale: %g is not a finite non-zero number as float32 "
                  "(the scale decoders use)",
                  path, q->scale);
    }
    return check_zero_point(w, path, d, 1);
  }
  if (q->axis >= d->rank) {
    return FAIL(HURRAY_ERR_QUANT_AXIS, "%squantization.axis: %u is not below the rank %u", path,
                q->axis, d->rank);
  }
  if (q->kind == HURRAY_QUANT_BLOCK_AFFINE && q->block_size == 0) {
    return FAIL(HURRAY_ERR_QUANT_BLOCK_SIZE, "%squantization.block_size: must be at least 1",
                path);
  }
  HURRAY_RETURN_NOT_OK(check_scale_dtype(w, path, "scale_dtype", q));
  if (q->kind == HURRAY_QUANT_PER_CHANNEL_AFFINE) {
    count = d->shape[q->axis];
    HURRAY_RETURN_NOT_OK(check_scales(w, path, d, count, "one per index along the axis"));
  } else {
    HURRAY_RETURN_NOT_OK(check_block2(w, path, d));
    HURRAY_RETURN_NOT_OK(scale_count(w, path, d, &count));
    HURRAY_RETURN_NOT_OK(check_scales(w, path, d, count, "one per block along the axis"));
  }
  return check_zero_point(w, path, d, count);
}

static HurrayStatus check_nf4(Walk *w, const char *path, const HurrayDescriptor *d,
                              uint64_t numel) {
  const HurrayQuant *q = &d->quant;
  const char *dtype_name = hurray_dtype_name(d->dtype);
  if (d->dtype != HURRAY_DTYPE_UINT4) {
    return FAIL(HURRAY_ERR_QUANT_DTYPE, "%sdtype: NF4 codes are uint4, not %s", path, dtype_name);
  }
  if (q->block_size == 0) {
    return FAIL(HURRAY_ERR_QUANT_BLOCK_SIZE, "%squantization.block_size: must be at least 1",
                path);
  }
  HURRAY_RETURN_NOT_OK(check_scale_dtype(w, path, "absmax_dtype", q));
  return check_scales(w, path, d, hurray__ceil_div_u64(numel, q->block_size),
                      "one absmax per block of the flattened tensor");
}

/* ggml-style blocks: uint8 block bytes along the last axis, scales inside. */
static HurrayStatus check_block_coded(Walk *w, const char *path, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  const char *dtype_name = hurray_dtype_name(d->dtype);
  uint32_t elements = 0;
  const char *format = NULL;
  if (!hurray_block_format_info((uint32_t)q->block_format, &elements, NULL, &format)) {
    return FAIL(HURRAY_ERR_UNSUPPORTED, "%squantization.format: unknown block format %d", path,
                (int)q->block_format);
  }
  if (d->dtype != HURRAY_DTYPE_UINT8) {
    return FAIL(HURRAY_ERR_QUANT_DTYPE,
                "%sdtype: block-coded tensors are stored as uint8 block bytes, not %s", path,
                dtype_name);
  }
  if (d->rank == 0 || q->axis != d->rank - 1) {
    return FAIL(HURRAY_ERR_QUANT_AXIS,
                "%squantization.axis: %u; %s blocks run along the last axis of a tensor of "
                "rank 1 or more (rank %u)",
                path, q->axis, format, d->rank);
  }
  if (q->block_size != elements || d->shape[q->axis] % elements != 0) {
    return FAIL(HURRAY_ERR_QUANT_BLOCK_SIZE,
                "%sshape[%u]: %llu is not a whole number of %s blocks of %u elements", path,
                q->axis, (unsigned long long)d->shape[q->axis], format, elements);
  }
  if (q->scale_buffer != HURRAY_NO_BUFFER || q->zero_point_buffer != HURRAY_NO_BUFFER) {
    return FAIL(HURRAY_ERR_QUANT_LAYOUT,
                "%squantization: block-coded blocks carry their own scales; no scale or "
                "zero-point buffer",
                path);
  }
  return HURRAY_OK;
}

static HurrayStatus check_mx(Walk *w, const char *path, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  const char *dtype_name = hurray_dtype_name(d->dtype);
  uint64_t count = 0;
  if (!hurray__mx_element_known(q->mx_element)) {
    return FAIL(HURRAY_ERR_QUANT_MX_ELEMENT, "%squantization.element: unknown MX element %d", path,
                (int)q->mx_element);
  }
  if (d->dtype != hurray__mx_element_dtype(q->mx_element)) {
    return FAIL(HURRAY_ERR_QUANT_DTYPE, "%sdtype: MX %s elements are stored as %s, not %s", path,
                hurray__mx_element_name(q->mx_element),
                hurray_dtype_name(hurray__mx_element_dtype(q->mx_element)), dtype_name);
  }
  if (q->block_size != HURRAY_MX_BLOCK_SIZE) {
    return FAIL(HURRAY_ERR_QUANT_BLOCK_SIZE,
                "%squantization.block_size: MX blocks are %u, not %llu", path,
                HURRAY_MX_BLOCK_SIZE, (unsigned long long)q->block_size);
  }
  if (q->axis >= d->rank) {
    return FAIL(HURRAY_ERR_QUANT_AXIS, "%squantization.axis: %u is not below the rank %u", path,
                q->axis, d->rank);
  }
  if (q->scale_dtype != HURRAY_DTYPE_FLOAT8_E8M0FNU) {
    return FAIL(HURRAY_ERR_QUANT_SCALE_DTYPE,
                "%squantization.scale_dtype: MX scales are float8_e8m0fnu", path);
  }
  HURRAY_RETURN_NOT_OK(blocked_count(w, path, d, q->axis, HURRAY_MX_BLOCK_SIZE, &count));
  return check_scales(w, path, d, count, "one per 32 elements along the axis");
}

static HurrayStatus check_quant(Walk *w, const char *path, const HurrayDescriptor *d,
                                uint64_t numel) {
  const HurrayQuant *q = &d->quant;
  if (q->kind == HURRAY_QUANT_NONE) {
    return HURRAY_OK;
  }
  bool buffered = q->kind != HURRAY_QUANT_PER_TENSOR_AFFINE;
  if (d->layout.kind == HURRAY_LAYOUT_COMPOSITE ||
      (buffered && d->layout.kind != HURRAY_LAYOUT_DENSE)) {
    return FAIL(HURRAY_ERR_QUANT_LAYOUT,
                "%squantization: %s quantization cannot apply to a %s layout", path,
                hurray__quant_kind_name(q->kind),
                d->layout.kind == HURRAY_LAYOUT_COMPOSITE ? "composite"
                : d->layout.kind == HURRAY_LAYOUT_SPARSE  ? "sparse"
                                                          : "paged");
  }
  HurrayStatus st;
  switch (q->kind) {
    case HURRAY_QUANT_NONE: return HURRAY_OK;
    case HURRAY_QUANT_PER_TENSOR_AFFINE:
    case HURRAY_QUANT_PER_CHANNEL_AFFINE:
    case HURRAY_QUANT_BLOCK_AFFINE: st = check_affine(w, path, d); break;
    case HURRAY_QUANT_NF4: st = check_nf4(w, path, d, numel); break;
    case HURRAY_QUANT_BLOCK_CODED: st = check_block_coded(w, path, d); break;
    case HURRAY_QUANT_MX: st = check_mx(w, path, d); break;
    default:
      return FAIL(HURRAY_ERR_UNSUPPORTED, "%squantization: unknown kind %d", path, (int)q->kind);
  }
  return st != HURRAY_OK ? st : check_packed(w, d, path);
}

static HurrayStatus check_node(Walk *w, const HurrayDescriptor *d, const char *path,
                               uint32_t depth);

static HurrayStatus check_members(Walk *w, const HurrayDescriptor *d, const char *path,
                                  uint32_t depth) {
  const HurrayLayout *l = &d->layout;
  if (l->member_count == 0) {
    return FAIL(HURRAY_ERR_COMPOSITE_MEMBER,
                "%slayout.members: a composite needs at least one member", path);
  }
  if (depth + 1 > HURRAY_MAX_COMPOSITE_DEPTH) {
    return FAIL(HURRAY_ERR_COMPOSITE_DEPTH, "%slayout.members: nested deeper than the limit of %u",
                path, HURRAY_MAX_COMPOSITE_DEPTH);
  }
  /* The root counts as one node. */
  if (l->member_count > HURRAY_MAX_DESCRIPTOR_NODES - 1 - w->members) {
    return FAIL(HURRAY_ERR_LIMIT,
                "%slayout.members: more than %u nodes (root and members) in one descriptor", path,
                HURRAY_MAX_DESCRIPTOR_NODES);
  }
  w->members += l->member_count;
  for (uint32_t i = 0; i < l->member_count; i++) {
    const HurrayMember *m = &l->members[i];
    size_t len = strlen(m->name);
    if (len == 0 || !hurray__utf8_valid(m->name, len)) {
      return FAIL(HURRAY_ERR_COMPOSITE_NAME, "%slayout.members[%u]: name is %s", path, i,
                  len == 0 ? "empty" : "not valid UTF-8");
    }
    for (uint32_t j = 0; j < i; j++) {
      if (strcmp(l->members[j].name, m->name) == 0) {
        return FAIL(HURRAY_ERR_COMPOSITE_NAME, "%slayout.members[%u]: name \"%s\" is used twice",
                    path, i, m->name);
      }
    }
    if (!hurray__descriptor_is_member_shaped(m->descriptor)) {
      return FAIL(HURRAY_ERR_COMPOSITE_MEMBER,
                  "%smembers[\"%s\"]: a member has no buffer table, device, statistics, shard "
                  "or extension of its own",
                  path, m->name);
    }
    char sub[PATH_BYTES];
    snprintf(sub, sizeof sub, "%smembers[\"%s\"].", path, m->name);
    HURRAY_RETURN_NOT_OK(check_node(w, m->descriptor, sub, depth + 1));
  }
  return HURRAY_OK;
}

/* Bytes a block-coded tensor needs from the start of its data buffer: its
 * blocks, after byte_offset. The quantization checks (axis, dtype, a whole
 * number of blocks per row) come later; here only what the size needs. */
static HurrayStatus block_coded_extent(Walk *w, const char *path, const HurrayDescriptor *d,
                                       uint64_t numel, uint64_t *out) {
  const HurrayQuant *q = &d->quant;
  uint32_t elements = 0, block_bytes = 0;
  if (!hurray_block_format_info((uint32_t)q->block_format, &elements, &block_bytes, NULL)) {
    return FAIL(HURRAY_ERR_UNSUPPORTED, "%squantization.format: unknown block format %d", path,
                (int)q->block_format);
  }
  if (d->strides != NULL) {
    return FAIL(HURRAY_ERR_STRIDES,
                "%sstrides: block-coded tensors are row-major, without strides", path);
  }
  uint64_t bytes;
  if (!hurray__mul_u64(numel / elements, block_bytes, &bytes) ||
      !hurray__add_u64(bytes, d->byte_offset, out)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%sshape: the block bytes overflow 64 bits", path);
  }
  return HURRAY_OK;
}

static HurrayStatus check_node(Walk *w, const HurrayDescriptor *d, const char *path,
                               uint32_t depth) {
  if (hurray_dtype_name(d->dtype) == NULL) {
    return FAIL(HURRAY_ERR_DTYPE, "%sdtype: unknown code %d", path, (int)d->dtype);
  }
  if (d->rank > HURRAY_MAX_RANK) {
    return FAIL(HURRAY_ERR_LIMIT, "%sshape: rank %u exceeds %u", path, d->rank, HURRAY_MAX_RANK);
  }
  uint64_t numel;
  uint32_t at = 0;
  if (!hurray__numel_u64(d->shape, d->rank, &numel, &at)) {
    return FAIL(HURRAY_ERR_OVERFLOW, "%sshape: element count overflows 64 bits at dim %u", path,
                at);
  }
  if (d->strides != NULL &&
      (d->layout.kind != HURRAY_LAYOUT_DENSE || hurray_dtype_bits(d->dtype) % 8 != 0)) {
    return FAIL(HURRAY_ERR_STRIDES,
                "%sstrides: only dense layouts of byte-sized dtypes take strides", path);
  }
  if (d->layout.kind == HURRAY_LAYOUT_COMPOSITE && d->byte_offset != 0) {
    return FAIL(HURRAY_ERR_STRIDES, "%sbyte_offset: a composite has no data buffer to offset into",
                path);
  }
  switch (d->layout.kind) {
    case HURRAY_LAYOUT_DENSE: {
      uint64_t bytes = 0;
      if (d->quant.kind == HURRAY_QUANT_BLOCK_CODED) {
        HURRAY_RETURN_NOT_OK(block_coded_extent(w, path, d, numel, &bytes));
      } else if (kind_takes_packed(d->quant.kind) && hurray__quant_has_storage_fields(&d->quant)) {
        HURRAY_RETURN_NOT_OK(packed_extent(w, path, d, numel, &bytes));
      } else {
        HURRAY_RETURN_NOT_OK(dense_extent(w, path, d, numel, &bytes));
      }
      HURRAY_RETURN_NOT_OK(use_buffer(w, path, "layout.data_buffer", d->layout.data_buffer,
                                      HURRAY_ROLE_DATA, bytes, HURRAY_OK, NULL));
      break;
    }
    case HURRAY_LAYOUT_SPARSE: HURRAY_RETURN_NOT_OK(check_sparse(w, path, d, numel)); break;
    case HURRAY_LAYOUT_PAGED: HURRAY_RETURN_NOT_OK(check_paged(w, path, d)); break;
    case HURRAY_LAYOUT_COMPOSITE: HURRAY_RETURN_NOT_OK(check_members(w, d, path, depth)); break;
    default:
      return FAIL(HURRAY_ERR_UNSUPPORTED, "%slayout: unknown kind %d", path, (int)d->layout.kind);
  }
  return check_quant(w, path, d, numel);
}

static HurrayStatus check_table_and_device(Walk *w, const HurrayDescriptor *d) {
  if (d->buffer_count > HURRAY_MAX_BUFFERS) {
    return FAIL(HURRAY_ERR_LIMIT, "buffers: %u entries exceed %u", d->buffer_count,
                HURRAY_MAX_BUFFERS);
  }
  for (uint32_t i = 0; i < d->buffer_count; i++) {
    const HurrayBufferEntry *b = &d->buffers[i];
    if (!hurray__role_known(b->role)) {
      return FAIL(HURRAY_ERR_BUFFER_TABLE, "buffers[%u].role: unknown role %d", i, (int)b->role);
    }
    if (!hurray__sync_mode_known(b->sync_mode)) {
      return FAIL(HURRAY_ERR_BUFFER_TABLE, "buffers[%u].sync_mode: unknown mode %d", i,
                  (int)b->sync_mode);
    }
    if (!hurray__is_pow2_u64(b->alignment) || b->alignment > HURRAY_MAX_ALIGNMENT) {
      return FAIL(HURRAY_ERR_BUFFER_TABLE,
                  "buffers[%u].alignment: %u is not a power of two up to %u", i, b->alignment,
                  HURRAY_MAX_ALIGNMENT);
    }
  }
  if (!hurray__memory_class_known(d->memory_class)) {
    return FAIL(HURRAY_ERR_DEVICE, "device.memory_class: unknown class %d", (int)d->memory_class);
  }
  if (d->device_type <= 0 || d->device_id < 0) {
    return FAIL(HURRAY_ERR_DEVICE, "device: type %d and id %d must be positive and non-negative",
                (int)d->device_type, (int)d->device_id);
  }
  bool ok;
  switch (d->device_type) {
    case HURRAY_DEVICE_CPU:
      ok = d->memory_class == HURRAY_MEMORY_HOST || d->memory_class == HURRAY_MEMORY_HOST_PINNED;
      break;
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_ROCM_HOST: ok = d->memory_class == HURRAY_MEMORY_HOST_PINNED; break;
    case HURRAY_DEVICE_CUDA_MANAGED: ok = d->memory_class == HURRAY_MEMORY_MANAGED; break;
    default:
      ok = d->memory_class == HURRAY_MEMORY_DEVICE || d->memory_class == HURRAY_MEMORY_MANAGED;
      break;
  }
  if (!ok) {
    return FAIL(HURRAY_ERR_DEVICE, "device.memory_class: %s memory contradicts device type %d",
                hurray__memory_class_name(d->memory_class), (int)d->device_type);
  }
  return HURRAY_OK;
}

static HurrayStatus check_root_extras(Walk *w, const HurrayDescriptor *d) {
  uint64_t numel = 1;
  for (uint32_t i = 0; i < d->rank; i++) {
    numel *= d->shape[i]; /* already overflow-checked by check_node */
  }
  if (d->stat_flags & HURRAY_STAT_NAN_COUNT && d->stat_nan_count > numel) {
    return FAIL(HURRAY_ERR_STATISTICS, "statistics.nan_count: %llu exceeds the %llu elements",
                (unsigned long long)d->stat_nan_count, (unsigned long long)numel);
  }
  if (d->stat_flags & HURRAY_STAT_ZERO_COUNT && d->stat_zero_count > numel) {
    return FAIL(HURRAY_ERR_STATISTICS, "statistics.zero_count: %llu exceeds the %llu elements",
                (unsigned long long)d->stat_zero_count, (unsigned long long)numel);
  }
  if ((d->stat_flags & (HURRAY_STAT_NAN_COUNT | HURRAY_STAT_ZERO_COUNT)) ==
          (HURRAY_STAT_NAN_COUNT | HURRAY_STAT_ZERO_COUNT) &&
      d->stat_nan_count > numel - d->stat_zero_count) {
    return FAIL(HURRAY_ERR_STATISTICS,
                "statistics.nan_count: %llu NaNs plus %llu zeros exceed the %llu elements",
                (unsigned long long)d->stat_nan_count, (unsigned long long)d->stat_zero_count,
                (unsigned long long)numel);
  }
  if ((d->stat_flags & (HURRAY_STAT_MIN | HURRAY_STAT_MAX)) ==
          (HURRAY_STAT_MIN | HURRAY_STAT_MAX) &&
      d->stat_min > d->stat_max) {
    return FAIL(HURRAY_ERR_STATISTICS, "statistics.min: %g is greater than max %g", d->stat_min,
                d->stat_max);
  }
  if (d->shard != NULL) {
    if (d->shard_rank != d->rank) {
      return FAIL(HURRAY_ERR_SHARD_RANK,
                  "shard.global_shape: rank %u differs from the tensor rank %u", d->shard_rank,
                  d->rank);
    }
    for (uint32_t i = 0; i < d->rank; i++) {
      uint64_t end;
      if (!hurray__add_u64(d->shard->offsets[i], d->shape[i], &end) || end > d->shard->global[i]) {
        return FAIL(HURRAY_ERR_SHARD_BOUNDS,
                    "shard.offsets[%u]: %llu + local %llu exceeds global %llu", i,
                    (unsigned long long)d->shard->offsets[i], (unsigned long long)d->shape[i],
                    (unsigned long long)d->shard->global[i]);
      }
    }
  }
  if (d->extension_name != NULL) {
    size_t len = strlen(d->extension_name);
    if (len == 0 || !hurray__utf8_valid(d->extension_name, len)) {
      return FAIL(HURRAY_ERR_EXTENSION, "extension.name: %s",
                  len == 0 ? "is empty" : "is not valid UTF-8");
    }
  }
  return HURRAY_OK;
}

/* The checks that bound the table's length, before anything is sized by it. */
static HurrayStatus check_table(const HurrayDescriptor *d, HurrayError *error) {
  Walk walk = {d, NULL, NULL, error};
  return check_table_and_device(&walk, d);
}

/* The rest of validating `d` once check_table passed, filling need[i] (the
 * bytes the descriptor places in table entry i) and used[i], each of
 * max(buffer_count, 1) zeroed entries. */
static HurrayStatus walk_needs(const HurrayDescriptor *d, uint64_t *need, bool *used,
                               HurrayError *error) {
  Walk walk = {d, need, used, error};
  Walk *w = &walk;
  HURRAY_RETURN_NOT_OK(check_node(w, d, "", 0));
  for (uint32_t i = 0; i < d->buffer_count; i++) {
    if (!w->used[i]) {
      return FAIL(HURRAY_ERR_BUFFER_UNREFERENCED,
                  "buffers[%u]: nothing in the descriptor refers to this %s buffer", i,
                  hurray__role_name(d->buffers[i].role));
    }
    if (d->buffers[i].byte_size < w->need[i]) {
      return FAIL(HURRAY_ERR_BUFFER_TOO_SMALL,
                  "buffers[%u].byte_size: %llu bytes declared, the descriptor places %llu there",
                  i, (unsigned long long)d->buffers[i].byte_size, (unsigned long long)w->need[i]);
    }
  }
  return check_root_extras(w, d);
}

HurrayStatus hurray__descriptor_buffer_needs(const HurrayDescriptor *d, uint64_t **needs_out,
                                             HurrayError *error) {
  *needs_out = NULL;
  HURRAY_RETURN_NOT_OK(check_table(d, error));
  size_t n = d->buffer_count ? d->buffer_count : 1;
  uint64_t *need = calloc(n, sizeof *need);
  bool *used = calloc(n, sizeof *used);
  HurrayStatus status = need == NULL || used == NULL
                            ? hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory")
                            : walk_needs(d, need, used, error);
  free(used);
  if (status == HURRAY_OK) {
    *needs_out = need;
  } else {
    free(need);
  }
  return status;
}

/* Table lengths up to this are walked in arrays on the stack: a reader
 * validates every tensor it opens, and two allocations per tensor were a
 * tenth of verifying a file of small tensors. */
#define VALIDATE_STACK_ENTRIES 16

HurrayStatus hurray_descriptor_validate(const HurrayDescriptor *d, HurrayError *error) {
  if (d == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor must not be NULL");
  }
  if (d->buffer_count <= VALIDATE_STACK_ENTRIES) {
    HURRAY_RETURN_NOT_OK(check_table(d, error));
    uint64_t need[VALIDATE_STACK_ENTRIES] = {0};
    bool used[VALIDATE_STACK_ENTRIES] = {false};
    return walk_needs(d, need, used, error);
  }
  uint64_t *needs;
  HURRAY_RETURN_NOT_OK(hurray__descriptor_buffer_needs(d, &needs, error));
  free(needs);
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_buffer_required_bytes(const HurrayDescriptor *d, uint32_t index,
                                                     uint64_t *out, HurrayError *error) {
  if (d == NULL || out == NULL || index >= d->buffer_count) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "descriptor, out and a buffer index below the table length are required");
  }
  uint64_t *needs;
  HURRAY_RETURN_NOT_OK(hurray__descriptor_buffer_needs(d, &needs, error));
  *out = needs[index];
  free(needs);
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_quant_scale_count(const HurrayDescriptor *d, uint64_t *out,
                                                 HurrayError *error) {
  if (d == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor and out are required");
  }
  Walk walk = {d, NULL, NULL, error};
  Walk *w = &walk;
  const HurrayQuant *q = &d->quant;
  uint64_t numel;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_numel(d, &numel, error));
  switch (q->kind) {
    case HURRAY_QUANT_NONE:
    case HURRAY_QUANT_PER_TENSOR_AFFINE: *out = 0; return HURRAY_OK;
    case HURRAY_QUANT_PER_CHANNEL_AFFINE:
      if (q->axis >= d->rank) break;
      *out = d->shape[q->axis];
      return HURRAY_OK;
    case HURRAY_QUANT_NF4:
      if (q->block_size == 0) break;
      *out = hurray__ceil_div_u64(numel, q->block_size);
      return HURRAY_OK;
    case HURRAY_QUANT_BLOCK_CODED:
      *out = 0; /* the scales live inside the blocks */
      return HURRAY_OK;
    case HURRAY_QUANT_BLOCK_AFFINE:
      if (q->axis >= d->rank || q->block_size == 0) break;
      if (q->block_size2 != 0 && (q->axis2 >= d->rank || q->axis2 == q->axis)) break;
      return scale_count(w, "", d, out);
    case HURRAY_QUANT_MX:
      if (q->axis >= d->rank || q->block_size == 0) break;
      return blocked_count(w, "", d, q->axis, q->block_size, out);
  }
  return FAIL(HURRAY_ERR_INVALID_ARGUMENT,
              "quantization: axis or block size invalid; validate the descriptor first");
}
