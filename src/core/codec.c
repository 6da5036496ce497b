/*
 * Binary descriptor codec; docs/spec/descriptor-encoding.md is normative.
 *
 * Layout: "HRYD" magic, u16 version, then a node: records of
 * (u16 tag, u32 length, payload) in strictly increasing tag order. Tags
 * with bit 0 set are required: a decoder that does not know one must fail
 * with HURRAY_ERR_UNSUPPORTED; unknown tags with bit 0 clear are skipped.
 */
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "descriptor_internal.h"
#include "error.h"

#define MAGIC "HRYD"
#define ENCODING_VERSION 1u

enum {
  TAG_DTYPE = 0x0011,
  TAG_SHAPE = 0x0013,
  TAG_STRIDES = 0x0015,
  TAG_BYTE_OFFSET = 0x0017,
  TAG_LAYOUT_DENSE = 0x0021,
  TAG_LAYOUT_COO = 0x0023,
  TAG_LAYOUT_CSR = 0x0025,
  TAG_LAYOUT_CSC = 0x0027,
  TAG_LAYOUT_BSR = 0x0029,
  TAG_LAYOUT_PAGED = 0x002B,
  TAG_LAYOUT_COMPOSITE = 0x002D,
  TAG_QUANT_PER_TENSOR = 0x0031,
  TAG_QUANT_PER_CHANNEL = 0x0033,
  TAG_QUANT_BLOCK = 0x0035,
  TAG_QUANT_NF4 = 0x0037,
  TAG_QUANT_MX = 0x0039,
  TAG_QUANT_BLOCK_CODED = 0x003B,
  TAG_QUANT_STORAGE = 0x003D,
  TAG_QUANT_SCALES = 0x003F,
  TAG_BUFFER_TABLE = 0x0041,
  TAG_DEVICE = 0x0043,
  TAG_SHARD = 0x0045,
  TAG_STATISTICS = 0x0050,
  TAG_EXTENSION = 0x0052
};

#define NO_INDEX_DTYPE 0u

/* ================================================================ writer */

typedef struct Writer {
  uint8_t *data;
  size_t len;
  size_t capacity;
  bool failed;
} Writer;

static uint8_t *writer_grow(Writer *w, size_t n) {
  if (w->failed) {
    return NULL;
  }
  if (w->capacity - w->len < n) {
    size_t capacity = w->capacity ? w->capacity : 256;
    while (capacity - w->len < n) {
      if (capacity > SIZE_MAX / 2) {
        w->failed = true;
        return NULL;
      }
      capacity *= 2;
    }
    uint8_t *grown = realloc(w->data, capacity);
    if (grown == NULL) {
      w->failed = true;
      return NULL;
    }
    w->data = grown;
    w->capacity = capacity;
  }
  uint8_t *at = w->data + w->len;
  w->len += n;
  return at;
}

static void put_le(Writer *w, uint64_t v, size_t n) {
  uint8_t *at = writer_grow(w, n);
  if (at != NULL) {
    for (size_t i = 0; i < n; i++) {
      at[i] = (uint8_t)(v >> (8 * i));
    }
  }
}

static void put_u8(Writer *w, uint8_t v) { put_le(w, v, 1); }
static void put_u16(Writer *w, uint16_t v) { put_le(w, v, 2); }
static void put_u32(Writer *w, uint32_t v) { put_le(w, v, 4); }
static void put_u64(Writer *w, uint64_t v) { put_le(w, v, 8); }
static void put_i64(Writer *w, int64_t v) { put_le(w, (uint64_t)v, 8); }
static void put_f64(Writer *w, double v) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  put_le(w, bits, 8);
}
static void put_bytes(Writer *w, const void *src, size_t n) {
  uint8_t *at = writer_grow(w, n);
  if (at != NULL && n > 0) {
    memcpy(at, src, n);
  }
}

/* Opens a record; returns the offset of its length field, patched by
 * record_end once the payload is written. */
static size_t record_begin(Writer *w, uint16_t tag) {
  put_u16(w, tag);
  size_t at = w->len;
  put_u32(w, 0);
  return at;
}

static void record_end(Writer *w, size_t length_at) {
  if (w->failed) {
    return;
  }
  size_t payload = w->len - length_at - 4;
  if (payload > UINT32_MAX) {
    w->failed = true;
    return;
  }
  for (size_t i = 0; i < 4; i++) {
    w->data[length_at + i] = (uint8_t)(payload >> (8 * i));
  }
}

static void encode_node(Writer *w, const HurrayDescriptor *d, bool root);

static void encode_affine(Writer *w, const HurrayQuant *q) {
  put_u32(w, q->axis);
  put_u32(w, q->scale_buffer);
  put_u16(w, (uint16_t)q->scale_dtype);
  put_u16(w, (uint16_t)q->zero_point_dtype);
  put_u32(w, q->zero_point_buffer);
  put_i64(w, q->zero_point);
}

static void encode_compressed(Writer *w, const HurrayLayout *l) {
  put_u16(w, (uint16_t)l->index_dtype);
  put_u16(w, 0);
  put_u32(w, l->data_buffer);
  put_u64(w, l->nnz);
  put_u32(w, l->indptr_buffer);
  put_u32(w, l->indices_buffer);
}

static void encode_layout(Writer *w, const HurrayDescriptor *d) {
  const HurrayLayout *l = &d->layout;
  size_t at;
  switch (l->kind) {
    case HURRAY_LAYOUT_DENSE:
      at = record_begin(w, TAG_LAYOUT_DENSE);
      put_u32(w, l->data_buffer);
      record_end(w, at);
      return;
    case HURRAY_LAYOUT_SPARSE:
      switch (l->format) {
        case HURRAY_SPARSE_COO:
          at = record_begin(w, TAG_LAYOUT_COO);
          put_u16(w, (uint16_t)l->index_dtype);
          put_u8(w, l->canonical ? 1 : 0);
          put_u8(w, 0);
          put_u32(w, l->data_buffer);
          put_u64(w, l->nnz);
          for (uint32_t i = 0; i < d->rank; i++) {
            put_u32(w, l->coo_index_buffers[i]);
          }
          record_end(w, at);
          return;
        case HURRAY_SPARSE_CSR:
        case HURRAY_SPARSE_CSC:
          at = record_begin(w, l->format == HURRAY_SPARSE_CSR ? TAG_LAYOUT_CSR : TAG_LAYOUT_CSC);
          encode_compressed(w, l);
          record_end(w, at);
          return;
        case HURRAY_SPARSE_BSR:
          at = record_begin(w, TAG_LAYOUT_BSR);
          encode_compressed(w, l);
          put_u64(w, l->block_rows);
          put_u64(w, l->block_cols);
          record_end(w, at);
          return;
      }
      w->failed = true;
      return;
    case HURRAY_LAYOUT_PAGED:
      at = record_begin(w, TAG_LAYOUT_PAGED);
      put_u16(w, (uint16_t)l->index_dtype);
      put_u16(w, 0);
      put_u32(w, l->axis);
      put_u64(w, l->page_size);
      put_u64(w, l->num_pages);
      put_u32(w, l->data_buffer);
      put_u32(w, l->table_buffer);
      record_end(w, at);
      return;
    case HURRAY_LAYOUT_COMPOSITE:
      at = record_begin(w, TAG_LAYOUT_COMPOSITE);
      put_u32(w, l->member_count);
      for (uint32_t i = 0; i < l->member_count; i++) {
        size_t name_len = strlen(l->members[i].name);
        put_u16(w, (uint16_t)name_len);
        put_bytes(w, l->members[i].name, name_len);
        size_t node_at = w->len;
        put_u32(w, 0);
        encode_node(w, l->members[i].descriptor, false);
        record_end(w, node_at);
      }
      record_end(w, at);
      return;
  }
  w->failed = true;
}

static void encode_quant(Writer *w, const HurrayQuant *q) {
  size_t at;
  switch (q->kind) {
    case HURRAY_QUANT_NONE: return;
    case HURRAY_QUANT_PER_TENSOR_AFFINE:
      at = record_begin(w, TAG_QUANT_PER_TENSOR);
      put_f64(w, q->scale);
      put_i64(w, q->zero_point);
      record_end(w, at);
      return;
    case HURRAY_QUANT_PER_CHANNEL_AFFINE:
      at = record_begin(w, TAG_QUANT_PER_CHANNEL);
      encode_affine(w, q);
      record_end(w, at);
      return;
    case HURRAY_QUANT_BLOCK_AFFINE:
      at = record_begin(w, TAG_QUANT_BLOCK);
      encode_affine(w, q);
      put_u64(w, q->block_size);
      record_end(w, at);
      return;
    case HURRAY_QUANT_NF4:
      at = record_begin(w, TAG_QUANT_NF4);
      put_u64(w, q->block_size);
      put_u32(w, q->scale_buffer);
      put_u16(w, (uint16_t)q->scale_dtype);
      put_u16(w, 0);
      record_end(w, at);
      return;
    case HURRAY_QUANT_MX:
      at = record_begin(w, TAG_QUANT_MX);
      put_u8(w, (uint8_t)q->mx_element);
      put_u8(w, 0);
      put_u16(w, 0);
      put_u32(w, q->axis);
      put_u32(w, (uint32_t)q->block_size);
      put_u32(w, q->scale_buffer);
      record_end(w, at);
      return;
    case HURRAY_QUANT_BLOCK_CODED:
      at = record_begin(w, TAG_QUANT_BLOCK_CODED);
      put_u16(w, (uint16_t)q->block_format);
      put_u16(w, 0);
      put_u32(w, q->axis);
      record_end(w, at);
      return;
  }
  w->failed = true;
}

/* QUANT_STORAGE and QUANT_SCALES (ADR-0024): fixed layouts, written only
 * when a field differs from its default. */
static void encode_packing(Writer *w, const HurrayQuantPacking *p) {
  put_u8(w, p->word_bits);
  put_u8(w, p->axis);
}

static void encode_quant_extra(Writer *w, const HurrayDescriptor *d) {
  const HurrayQuant *q = &d->quant;
  if (q->kind != HURRAY_QUANT_PER_CHANNEL_AFFINE && q->kind != HURRAY_QUANT_BLOCK_AFFINE &&
      q->kind != HURRAY_QUANT_NF4) {
    return;
  }
  size_t at;
  if (hurray__quant_has_storage_fields(q)) {
    const HurrayQuantStorage *qs = hurray__qs(q);
    at = record_begin(w, TAG_QUANT_STORAGE);
    put_u8(w, qs->has_storage_axes ? 1 : 0);
    encode_packing(w, &qs->code_packing);
    encode_packing(w, &qs->zero_point_packing);
    put_u8(w, 0);
    put_u16(w, 0);
    put_i64(w, q->zero_point_offset);
    put_bytes(w, qs->code_packing.order, 32);
    put_bytes(w, qs->zero_point_packing.order, 32);
    if (qs->has_storage_axes) put_bytes(w, qs->storage_axes, d->rank);
    record_end(w, at);
  }
  if (hurray__quant_has_scale_fields(q)) {
    at = record_begin(w, TAG_QUANT_SCALES);
    put_u32(w, q->axis2);
    put_u32(w, q->group_index_buffer);
    put_u64(w, q->block_size2);
    put_u16(w, (uint16_t)q->group_index_dtype);
    put_u16(w, (uint16_t)q->super_scale_dtype);
    put_u8(w, q->super_op);
    put_u8(w, 0);
    put_u16(w, 0);
    put_u32(w, q->codebook_buffer);
    put_u32(w, q->scale_codebook_buffer);
    put_u32(w, q->super_scale_buffer);
    put_u32(w, 0);
    put_u64(w, q->super_block_size);
    put_f64(w, q->scale_offset);
    record_end(w, at);
  }
}

/* long: the records in tag order, one short block each; decode_node reads the same order. */
static void encode_node(Writer *w, const HurrayDescriptor *d, bool root) {
  size_t at = record_begin(w, TAG_DTYPE);
  put_u16(w, (uint16_t)d->dtype);
  record_end(w, at);

  at = record_begin(w, TAG_SHAPE);
  for (uint32_t i = 0; i < d->rank; i++) {
    put_u64(w, d->shape[i]);
  }
  record_end(w, at);

  if (d->strides != NULL) {
    at = record_begin(w, TAG_STRIDES);
    for (uint32_t i = 0; i < d->rank; i++) {
      put_i64(w, d->strides[i]);
    }
    record_end(w, at);
  }
  if (d->byte_offset != 0) {
    at = record_begin(w, TAG_BYTE_OFFSET);
    put_u64(w, d->byte_offset);
    record_end(w, at);
  }
  encode_layout(w, d);
  encode_quant(w, &d->quant);
  encode_quant_extra(w, d);
  if (!root) {
    return;
  }

  at = record_begin(w, TAG_BUFFER_TABLE);
  put_u32(w, d->buffer_count);
  for (uint32_t i = 0; i < d->buffer_count; i++) {
    const HurrayBufferEntry *b = &d->buffers[i];
    put_u8(w, (uint8_t)b->role);
    put_u8(w, (uint8_t)b->sync_mode);
    put_u16(w, 0);
    put_u32(w, b->alignment);
    put_u64(w, b->byte_size);
  }
  record_end(w, at);

  if (d->device_type != HURRAY_DEVICE_CPU || d->device_id != 0 ||
      d->memory_class != HURRAY_MEMORY_HOST) {
    at = record_begin(w, TAG_DEVICE);
    put_u32(w, (uint32_t)d->device_type);
    put_u32(w, (uint32_t)d->device_id);
    put_u8(w, (uint8_t)d->memory_class);
    put_u8(w, 0);
    put_u16(w, 0);
    record_end(w, at);
  }
  if (d->shard != NULL) {
    at = record_begin(w, TAG_SHARD);
    put_u32(w, d->shard_rank);
    for (uint32_t i = 0; i < d->shard_rank; i++) {
      put_u64(w, d->shard->global[i]);
    }
    for (uint32_t i = 0; i < d->shard_rank; i++) {
      put_u64(w, d->shard->offsets[i]);
    }
    record_end(w, at);
  }
  if (d->stat_flags != 0) {
    at = record_begin(w, TAG_STATISTICS);
    put_u8(w, (uint8_t)d->stat_flags);
    put_u8(w, 0);
    put_u16(w, 0);
    put_u32(w, 0);
    if (d->stat_flags & HURRAY_STAT_MIN) put_f64(w, d->stat_min);
    if (d->stat_flags & HURRAY_STAT_MAX) put_f64(w, d->stat_max);
    if (d->stat_flags & HURRAY_STAT_NAN_COUNT) put_u64(w, d->stat_nan_count);
    if (d->stat_flags & HURRAY_STAT_ZERO_COUNT) put_u64(w, d->stat_zero_count);
    record_end(w, at);
  }
  if (d->extension_name != NULL) {
    at = record_begin(w, TAG_EXTENSION);
    size_t name_len = strlen(d->extension_name);
    put_u16(w, (uint16_t)name_len);
    put_bytes(w, d->extension_name, name_len);
    put_u32(w, (uint32_t)d->extension_metadata_len);
    put_bytes(w, d->extension_metadata, d->extension_metadata_len);
    record_end(w, at);
  }
}

static HurrayStatus check_encodable(const HurrayDescriptor *d, uint32_t depth, uint32_t *nodes,
                                    HurrayError *error) {
  if (depth > HURRAY_MAX_COMPOSITE_DEPTH) {
    return hurray__fail(error, HURRAY_ERR_COMPOSITE_DEPTH,
                        "layout.members: nested deeper than the limit of %u",
                        HURRAY_MAX_COMPOSITE_DEPTH);
  }
  if (d->layout.member_count > HURRAY_MAX_DESCRIPTOR_NODES - *nodes) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "layout.members: more than %u nodes (root and members) in one descriptor",
                        HURRAY_MAX_DESCRIPTOR_NODES);
  }
  *nodes += d->layout.member_count;
  for (uint32_t i = 0; i < d->layout.member_count; i++) {
    HURRAY_RETURN_NOT_OK(
        check_encodable(d->layout.members[i].descriptor, depth + 1, nodes, error));
  }
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_encode(const HurrayDescriptor *d, uint8_t **out, size_t *out_len,
                                      HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (out_len != NULL) *out_len = 0;
  if (d == NULL || out == NULL || out_len == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "descriptor, out and out_len must not be NULL");
  }
  /* Bounded depth keeps the recursive encoder (and every decoder) safe. */
  uint32_t nodes = 1;
  HURRAY_RETURN_NOT_OK(check_encodable(d, 0, &nodes, error));
  Writer w = {0};
  put_bytes(&w, MAGIC, 4);
  put_u16(&w, ENCODING_VERSION);
  encode_node(&w, d, true);
  if (w.failed) {
    free(w.data);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory while encoding");
  }
  if (w.len > HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES) {
    free(w.data);
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "encoded descriptor of %zu bytes exceeds the limit of %u", w.len,
                        HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES);
  }
  *out = w.data;
  *out_len = w.len;
  return HURRAY_OK;
}

/* ================================================================ reader */

typedef struct Reader {
  const uint8_t *p;
  size_t left;
  uint32_t *nodes; /* nodes decoded so far in the whole descriptor, shared */
} Reader;

static bool take(Reader *r, size_t n, const uint8_t **at) {
  if (r->left < n) {
    return false;
  }
  *at = r->p;
  r->p += n;
  r->left -= n;
  return true;
}

static uint64_t get_le(const uint8_t *p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    v |= (uint64_t)p[i] << (8 * i);
  }
  return v;
}

/* Fixed-size payload reads: the caller has checked the payload length, so
 * these cannot run past it. */
static uint64_t rd(Reader *r, size_t n) {
  const uint8_t *at;
  if (!take(r, n, &at)) {
    return 0;
  }
  return get_le(at, n);
}

#define FAIL(code, ...) hurray__fail(error, code, __VA_ARGS__)

static HurrayStatus decode_node(Reader *r, HurrayDescriptor *d, bool root, uint32_t depth,
                                HurrayError *error);

static HurrayStatus expect_length(uint16_t tag, size_t have, size_t want, HurrayError *error) {
  if (have != want) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: payload of %zu bytes, expected %zu", tag,
                have, want);
  }
  return HURRAY_OK;
}

static HurrayStatus expect_zero(uint16_t tag, uint64_t v, const char *field, HurrayError *error) {
  if (v != 0) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: reserved field %s is not zero", tag, field);
  }
  return HURRAY_OK;
}

/* Unknown enum values mean a newer writer: unsupported, not malformed. */
static HurrayStatus dtype_from_wire(uint64_t v, bool optional, const char *field, HurrayDType *out,
                                    HurrayError *error) {
  if (optional && v == 0) {
    *out = HURRAY_DTYPE_INVALID;
    return HURRAY_OK;
  }
  if (v == 0 || v >= HURRAY_DTYPE_COUNT) {
    return FAIL(HURRAY_ERR_UNSUPPORTED, "%s: unknown dtype code %llu", field,
                (unsigned long long)v);
  }
  *out = (HurrayDType)v;
  return HURRAY_OK;
}

static HurrayStatus decode_shape_like(Reader *r, size_t len, uint32_t *rank_out, void *dst,
                                      const char *field, HurrayError *error) {
  if (len % 8 != 0) {
    return FAIL(HURRAY_ERR_MALFORMED, "%s: payload of %zu bytes is not a multiple of 8", field,
                len);
  }
  if (len / 8 > HURRAY_MAX_RANK) {
    return FAIL(HURRAY_ERR_LIMIT, "%s: rank %zu exceeds the limit of %u", field, len / 8,
                HURRAY_MAX_RANK);
  }
  *rank_out = (uint32_t)(len / 8);
  uint64_t *values = dst;
  for (uint32_t i = 0; i < *rank_out; i++) {
    values[i] = rd(r, 8);
  }
  return HURRAY_OK;
}

static HurrayStatus decode_affine(Reader *r, uint16_t tag, HurrayQuant *q, HurrayError *error) {
  q->axis = (uint32_t)rd(r, 4);
  q->scale_buffer = (uint32_t)rd(r, 4);
  HURRAY_RETURN_NOT_OK(
      dtype_from_wire(rd(r, 2), false, "quantization.scale_dtype", &q->scale_dtype, error));
  HURRAY_RETURN_NOT_OK(dtype_from_wire(rd(r, 2), true, "quantization.zero_point_dtype",
                                       &q->zero_point_dtype, error));
  q->zero_point_buffer = (uint32_t)rd(r, 4);
  q->zero_point = (int64_t)rd(r, 8);
  if ((q->zero_point_buffer == HURRAY_NO_BUFFER) !=
      (q->zero_point_dtype == HURRAY_DTYPE_INVALID)) {
    return FAIL(HURRAY_ERR_MALFORMED,
                "record 0x%04x: zero_point_buffer and zero_point_dtype must be both set or both "
                "absent",
                tag);
  }
  if (q->zero_point_buffer != HURRAY_NO_BUFFER && q->zero_point != 0) {
    return FAIL(HURRAY_ERR_MALFORMED,
                "record 0x%04x: inline zero_point must be 0 when a zero-point buffer is set", tag);
  }
  return HURRAY_OK;
}

static HurrayStatus decode_compressed(Reader *r, uint16_t tag, HurrayLayout *l,
                                      HurrayError *error) {
  HURRAY_RETURN_NOT_OK(
      dtype_from_wire(rd(r, 2), false, "layout.index_dtype", &l->index_dtype, error));
  HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 2), "reserved", error));
  l->data_buffer = (uint32_t)rd(r, 4);
  l->nnz = rd(r, 8);
  l->indptr_buffer = (uint32_t)rd(r, 4);
  l->indices_buffer = (uint32_t)rd(r, 4);
  return HURRAY_OK;
}

/* long: one member record field by field, each bound checked before any allocation. */
static HurrayStatus decode_members(Reader *r, HurrayDescriptor *d, uint32_t depth,
                                   HurrayError *error) {
  const uint8_t *at;
  if (!take(r, 4, &at)) {
    return FAIL(HURRAY_ERR_TRUNCATED, "layout.members: count is cut short");
  }
  uint64_t count = get_le(at, 4);
  /* Members of a node at the depth limit would be one level too deep; an
   * empty member list there is still readable (validation rejects it). */
  if (count > 0 && depth + 1 > HURRAY_MAX_COMPOSITE_DEPTH) {
    return FAIL(HURRAY_ERR_LIMIT, "layout.members: nested deeper than the limit of %u",
                HURRAY_MAX_COMPOSITE_DEPTH);
  }
  if (count > HURRAY_MAX_COMPOSITE_MEMBERS) {
    return FAIL(HURRAY_ERR_LIMIT, "layout.members: %llu members exceed the limit of %u",
                (unsigned long long)count, HURRAY_MAX_COMPOSITE_MEMBERS);
  }
  /* Every member becomes a descriptor of its own: without a bound on their
   * total, 16 MiB of 30-byte members nested two deep would decode into
   * gigabytes. Counted when the count is read, before any is allocated. */
  if (count > HURRAY_MAX_DESCRIPTOR_NODES - *r->nodes) {
    return FAIL(HURRAY_ERR_LIMIT,
                "layout.members: more than %u nodes (root and members) in one descriptor",
                HURRAY_MAX_DESCRIPTOR_NODES);
  }
  *r->nodes += (uint32_t)count;
  for (uint64_t i = 0; i < count; i++) {
    if (!take(r, 2, &at)) {
      return FAIL(HURRAY_ERR_TRUNCATED, "layout.members[%llu]: name length is cut short",
                  (unsigned long long)i);
    }
    size_t name_len = (size_t)get_le(at, 2);
    if (name_len > HURRAY_MAX_NAME_BYTES) {
      return FAIL(HURRAY_ERR_LIMIT, "layout.members[%llu]: name of %zu bytes exceeds %u",
                  (unsigned long long)i, name_len, HURRAY_MAX_NAME_BYTES);
    }
    const uint8_t *name_at;
    if (!take(r, name_len, &name_at)) {
      return FAIL(HURRAY_ERR_TRUNCATED, "layout.members[%llu]: name is cut short",
                  (unsigned long long)i);
    }
    if (memchr(name_at, 0, name_len) != NULL) {
      return FAIL(HURRAY_ERR_MALFORMED, "layout.members[%llu]: name contains a NUL byte",
                  (unsigned long long)i);
    }
    if (!take(r, 4, &at)) {
      return FAIL(HURRAY_ERR_TRUNCATED, "layout.members[%llu]: node length is cut short",
                  (unsigned long long)i);
    }
    uint64_t node_len = get_le(at, 4);
    const uint8_t *node_at;
    if (!take(r, node_len, &node_at)) {
      return FAIL(HURRAY_ERR_TRUNCATED, "layout.members[%llu]: node is cut short",
                  (unsigned long long)i);
    }
    HurrayDescriptor *member = hurray__descriptor_new();
    char *name = malloc(name_len + 1);
    if (member == NULL || name == NULL) {
      hurray_descriptor_destroy(member);
      free(name);
      return FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(name, name_at, name_len);
    name[name_len] = '\0';
    Reader sub = {node_at, (size_t)node_len, r->nodes};
    HurrayStatus status = decode_node(&sub, member, false, depth + 1, error);
    if (status == HURRAY_OK) {
      status = hurray__descriptor_push_member(d, name, member);
      if (status != HURRAY_OK) {
        FAIL(status, "out of memory");
      }
    }
    if (status != HURRAY_OK) {
      hurray_descriptor_destroy(member);
      free(name);
      return status;
    }
  }
  if (r->left != 0) {
    return FAIL(HURRAY_ERR_MALFORMED, "layout.members: %zu trailing bytes", r->left);
  }
  return HURRAY_OK;
}

static HurrayStatus decode_layout(Reader *r, uint16_t tag, size_t len, HurrayDescriptor *d,
                                  uint32_t depth, HurrayError *error) {
  HurrayLayout *l = &d->layout;
  switch (tag) {
    case TAG_LAYOUT_DENSE:
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 4, error));
      l->kind = HURRAY_LAYOUT_DENSE;
      l->data_buffer = (uint32_t)rd(r, 4);
      return HURRAY_OK;
    case TAG_LAYOUT_COO: {
      if (len < 16 || (len - 16) % 4 != 0 || (len - 16) / 4 != d->rank) {
        return FAIL(HURRAY_ERR_MALFORMED,
                    "layout.coo: payload of %zu bytes does not hold one index buffer per "
                    "dimension (rank %u)",
                    len, d->rank);
      }
      if (!hurray__layout_add_coo(l)) return FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
      l->kind = HURRAY_LAYOUT_SPARSE;
      l->format = HURRAY_SPARSE_COO;
      HURRAY_RETURN_NOT_OK(
          dtype_from_wire(rd(r, 2), false, "layout.index_dtype", &l->index_dtype, error));
      uint64_t flags = rd(r, 1);
      if (flags > 1) {
        return FAIL(HURRAY_ERR_MALFORMED, "layout.coo: unknown flag bits 0x%02llx",
                    (unsigned long long)flags);
      }
      l->canonical = flags == 1;
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 1), "reserved", error));
      l->data_buffer = (uint32_t)rd(r, 4);
      l->nnz = rd(r, 8);
      for (uint32_t i = 0; i < d->rank; i++) {
        l->coo_index_buffers[i] = (uint32_t)rd(r, 4);
      }
      return HURRAY_OK;
    }
    case TAG_LAYOUT_CSR:
    case TAG_LAYOUT_CSC:
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 24, error));
      l->kind = HURRAY_LAYOUT_SPARSE;
      l->format = tag == TAG_LAYOUT_CSR ? HURRAY_SPARSE_CSR : HURRAY_SPARSE_CSC;
      return decode_compressed(r, tag, l, error);
    case TAG_LAYOUT_BSR:
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 40, error));
      l->kind = HURRAY_LAYOUT_SPARSE;
      l->format = HURRAY_SPARSE_BSR;
      HURRAY_RETURN_NOT_OK(decode_compressed(r, tag, l, error));
      l->block_rows = rd(r, 8);
      l->block_cols = rd(r, 8);
      return HURRAY_OK;
    case TAG_LAYOUT_PAGED:
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 32, error));
      l->kind = HURRAY_LAYOUT_PAGED;
      HURRAY_RETURN_NOT_OK(
          dtype_from_wire(rd(r, 2), false, "layout.table_dtype", &l->index_dtype, error));
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 2), "reserved", error));
      l->axis = (uint32_t)rd(r, 4);
      l->page_size = rd(r, 8);
      l->num_pages = rd(r, 8);
      l->data_buffer = (uint32_t)rd(r, 4);
      l->table_buffer = (uint32_t)rd(r, 4);
      return HURRAY_OK;
    case TAG_LAYOUT_COMPOSITE:
      l->kind = HURRAY_LAYOUT_COMPOSITE;
      l->data_buffer = HURRAY_NO_BUFFER;
      return decode_members(r, d, depth, error);
  }
  return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: not a layout", tag);
}

static HurrayStatus decode_quant(Reader *r, uint16_t tag, size_t len, HurrayQuant *q,
                                 HurrayError *error) {
  switch (tag) {
    case TAG_QUANT_PER_TENSOR: {
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 16, error));
      q->kind = HURRAY_QUANT_PER_TENSOR_AFFINE;
      uint64_t bits = rd(r, 8);
      memcpy(&q->scale, &bits, sizeof bits);
      q->zero_point = (int64_t)rd(r, 8);
      return HURRAY_OK;
    }
    case TAG_QUANT_PER_CHANNEL:
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 24, error));
      q->kind = HURRAY_QUANT_PER_CHANNEL_AFFINE;
      return decode_affine(r, tag, q, error);
    case TAG_QUANT_BLOCK:
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 32, error));
      q->kind = HURRAY_QUANT_BLOCK_AFFINE;
      HURRAY_RETURN_NOT_OK(decode_affine(r, tag, q, error));
      q->block_size = rd(r, 8);
      return HURRAY_OK;
    case TAG_QUANT_NF4:
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 16, error));
      q->kind = HURRAY_QUANT_NF4;
      q->block_size = rd(r, 8);
      q->scale_buffer = (uint32_t)rd(r, 4);
      HURRAY_RETURN_NOT_OK(
          dtype_from_wire(rd(r, 2), false, "quantization.absmax_dtype", &q->scale_dtype, error));
      return expect_zero(tag, rd(r, 2), "reserved", error);
    case TAG_QUANT_MX: {
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 16, error));
      q->kind = HURRAY_QUANT_MX;
      uint64_t element = rd(r, 1);
      if (!hurray__mx_element_known((uint32_t)element)) {
        return FAIL(HURRAY_ERR_UNSUPPORTED, "quantization.element: unknown MX element type %llu",
                    (unsigned long long)element);
      }
      q->mx_element = (HurrayMxElement)element;
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 1), "reserved", error));
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 2), "reserved", error));
      q->axis = (uint32_t)rd(r, 4);
      q->block_size = rd(r, 4);
      q->scale_buffer = (uint32_t)rd(r, 4);
      q->scale_dtype = HURRAY_DTYPE_FLOAT8_E8M0FNU;
      return HURRAY_OK;
    }
    case TAG_QUANT_BLOCK_CODED: {
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 8, error));
      q->kind = HURRAY_QUANT_BLOCK_CODED;
      uint32_t format = (uint32_t)rd(r, 2), elements = 0;
      if (!hurray_block_format_info(format, &elements, NULL, NULL)) {
        return FAIL(HURRAY_ERR_UNSUPPORTED, "quantization.format: unknown block format %u",
                    format);
      }
      q->block_format = (HurrayBlockFormat)format;
      q->block_size = elements;
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 2), "reserved", error));
      q->axis = (uint32_t)rd(r, 4);
      return HURRAY_OK;
    }
  }
  return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: not a quantization", tag);
}

#define QUANT_STORAGE_FIXED 80u
#define QUANT_SCALES_LENGTH 56u

/* A packing's word size, axis and order (32 bytes at `order`): the lanes
 * follow from the element dtype and must divide the word; the order is a
 * permutation of the lanes, zero past them. */
static HurrayStatus decode_packing(uint16_t tag, uint8_t word_bits, uint8_t axis,
                                   const uint8_t *order, HurrayDType dtype, const char *field,
                                   HurrayQuantPacking *p, HurrayError *error) {
  uint32_t bits = hurray_dtype_bits(dtype), lanes = 0;
  if (word_bits != 0) {
    if ((word_bits != 8 && word_bits != 16 && word_bits != 32) || bits == 0 || bits >= word_bits ||
        word_bits % bits != 0) {
      return FAIL(HURRAY_ERR_MALFORMED,
                  "record 0x%04x: %s.word_bits %u does not hold whole lanes of %u-bit elements",
                  tag, field, word_bits, bits);
    }
    lanes = word_bits / bits;
  } else if (axis != 0) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: %s.axis is set without word_bits", tag,
                field);
  }
  if (axis >= HURRAY_MAX_RANK) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: %s.axis %u is too large", tag, field, axis);
  }
  uint32_t seen = 0;
  for (uint32_t j = 0; j < 32; j++) {
    bool ok = j < lanes ? order[j] < lanes && !(seen & (1u << order[j])) : order[j] == 0;
    if (!ok) {
      return FAIL(HURRAY_ERR_MALFORMED,
                  "record 0x%04x: %s.order is not a permutation of the %u lanes, zero-padded", tag,
                  field, lanes);
    }
    if (j < lanes) seen |= 1u << order[j];
  }
  p->word_bits = word_bits;
  p->axis = axis;
  memcpy(p->order, order, 32);
  return HURRAY_OK;
}

static bool quant_takes_extra(const HurrayQuant *q) {
  return q->kind == HURRAY_QUANT_PER_CHANNEL_AFFINE || q->kind == HURRAY_QUANT_BLOCK_AFFINE ||
         q->kind == HURRAY_QUANT_NF4;
}

static HurrayStatus decode_quant_storage(Reader *r, uint16_t tag, size_t len, HurrayDescriptor *d,
                                         HurrayError *error) {
  HurrayQuant *q = &d->quant;
  const uint8_t *p;
  if (len < QUANT_STORAGE_FIXED || !take(r, QUANT_STORAGE_FIXED, &p)) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: payload of %zu bytes, expected at least %u",
                tag, len, QUANT_STORAGE_FIXED);
  }
  uint8_t flags = p[0];
  if (flags > 1 || p[5] != 0 || p[6] != 0 || p[7] != 0) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: reserved flag bits or bytes are not zero",
                tag);
  }
  size_t want = QUANT_STORAGE_FIXED + (flags ? d->rank : 0);
  HURRAY_RETURN_NOT_OK(expect_length(tag, len, want, error));
  HurrayQuantStorage *qs = hurray__quant_storage_own(q);
  if (qs == NULL) return FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
  HURRAY_RETURN_NOT_OK(
      decode_packing(tag, p[1], p[2], p + 16, d->dtype, "code_packing", &qs->code_packing, error));
  if (p[3] != 0 && q->zero_point_buffer == HURRAY_NO_BUFFER) {
    return FAIL(HURRAY_ERR_MALFORMED,
                "record 0x%04x: zero_point_packing without a zero-point buffer", tag);
  }
  HURRAY_RETURN_NOT_OK(decode_packing(tag, p[3], p[4], p + 48, q->zero_point_dtype,
                                      "zero_point_packing", &qs->zero_point_packing, error));
  q->zero_point_offset = (int64_t)get_le(p + 8, 8);
  qs->has_storage_axes = flags != 0;
  if (flags) {
    const uint8_t *axes = NULL;
    if (!take(r, d->rank, &axes)) {
      return FAIL(HURRAY_ERR_TRUNCATED, "record 0x%04x: storage_axes cut short", tag);
    }
    uint32_t seen = 0;
    for (uint32_t k = 0; k < d->rank; k++) {
      if (axes[k] >= d->rank || (seen & (1u << axes[k]))) {
        return FAIL(HURRAY_ERR_MALFORMED,
                    "record 0x%04x: storage_axes is not a permutation of the %u axes", tag,
                    d->rank);
      }
      seen |= 1u << axes[k];
      qs->storage_axes[k] = axes[k];
    }
  }
  if (!hurray__quant_has_storage_fields(q)) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: every field at its default (omit it)", tag);
  }
  return HURRAY_OK;
}

static HurrayStatus decode_quant_scales(Reader *r, uint16_t tag, size_t len, HurrayQuant *q,
                                        HurrayError *error) {
  HURRAY_RETURN_NOT_OK(expect_length(tag, len, QUANT_SCALES_LENGTH, error));
  q->axis2 = (uint32_t)rd(r, 4);
  q->group_index_buffer = (uint32_t)rd(r, 4);
  q->block_size2 = rd(r, 8);
  HURRAY_RETURN_NOT_OK(dtype_from_wire(rd(r, 2), true, "quantization.group_index_dtype",
                                       &q->group_index_dtype, error));
  HURRAY_RETURN_NOT_OK(dtype_from_wire(rd(r, 2), true, "quantization.super_scale_dtype",
                                       &q->super_scale_dtype, error));
  uint64_t op = rd(r, 1);
  if (op > HURRAY_SUPER_DIVIDE) {
    return FAIL(HURRAY_ERR_UNSUPPORTED, "quantization.super_op: unknown operation %llu",
                (unsigned long long)op);
  }
  q->super_op = (uint8_t)op;
  HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 1), "reserved", error));
  HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 2), "reserved", error));
  q->codebook_buffer = (uint32_t)rd(r, 4);
  q->scale_codebook_buffer = (uint32_t)rd(r, 4);
  q->super_scale_buffer = (uint32_t)rd(r, 4);
  HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 4), "reserved", error));
  q->super_block_size = rd(r, 8);
  uint64_t bits = rd(r, 8);
  memcpy(&q->scale_offset, &bits, sizeof bits);
  bool super = q->super_scale_buffer != HURRAY_NO_BUFFER;
  if ((q->block_size2 == 0 && q->axis2 != 0) ||
      (q->group_index_buffer == HURRAY_NO_BUFFER) !=
          (q->group_index_dtype == HURRAY_DTYPE_INVALID) ||
      super != (q->super_scale_dtype != HURRAY_DTYPE_INVALID) || super != (q->super_op != 0) ||
      (!super && q->super_block_size != 0) || bits == 0x8000000000000000ull) {
    return FAIL(HURRAY_ERR_MALFORMED,
                "record 0x%04x: fields set without the field they belong to (axis2 without "
                "block_size2, a dtype or op without its buffer) or a scale_offset of -0",
                tag);
  }
  if (!hurray__quant_has_scale_fields(q)) {
    return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: every field at its default (omit it)", tag);
  }
  return HURRAY_OK;
}

static HurrayStatus decode_buffer_table(Reader *r, size_t len, HurrayDescriptor *d,
                                        HurrayError *error) {
  if (len < 4) {
    return FAIL(HURRAY_ERR_MALFORMED, "buffers: payload of %zu bytes has no count", len);
  }
  uint64_t count = rd(r, 4);
  if (count > HURRAY_MAX_BUFFERS) {
    return FAIL(HURRAY_ERR_LIMIT, "buffers: %llu entries exceed the limit of %u",
                (unsigned long long)count, HURRAY_MAX_BUFFERS);
  }
  HURRAY_RETURN_NOT_OK(expect_length(TAG_BUFFER_TABLE, len, 4 + 16 * (size_t)count, error));
  if (count > 0 && !hurray__descriptor_reserve_buffers(d, (uint32_t)count)) {
    return FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  for (uint32_t i = 0; i < count; i++) {
    HurrayBufferEntry *b = &d->buffers[i];
    uint64_t role = rd(r, 1);
    uint64_t sync = rd(r, 1);
    if (!hurray__role_known((uint32_t)role)) {
      return FAIL(HURRAY_ERR_UNSUPPORTED, "buffers[%u].role: unknown role %llu", i,
                  (unsigned long long)role);
    }
    if (!hurray__sync_mode_known((uint32_t)sync)) {
      return FAIL(HURRAY_ERR_UNSUPPORTED, "buffers[%u].sync_mode: unknown mode %llu", i,
                  (unsigned long long)sync);
    }
    HURRAY_RETURN_NOT_OK(expect_zero(TAG_BUFFER_TABLE, rd(r, 2), "buffers.reserved", error));
    b->role = (HurrayBufferRole)role;
    b->sync_mode = (HurraySyncMode)sync;
    b->alignment = (uint32_t)rd(r, 4);
    b->byte_size = rd(r, 8);
    d->buffer_count = i + 1;
  }
  return HURRAY_OK;
}

/* long: one case per root record tag, each a few fixed reads, in the spec's order. */
static HurrayStatus decode_root_record(Reader *r, uint16_t tag, size_t len, HurrayDescriptor *d,
                                       HurrayError *error) {
  switch (tag) {
    case TAG_BUFFER_TABLE: return decode_buffer_table(r, len, d, error);
    case TAG_DEVICE: {
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 12, error));
      d->device_type = (int32_t)(uint32_t)rd(r, 4);
      d->device_id = (int32_t)(uint32_t)rd(r, 4);
      uint64_t memory_class = rd(r, 1);
      if (!hurray__memory_class_known((uint32_t)memory_class)) {
        return FAIL(HURRAY_ERR_UNSUPPORTED, "device.memory_class: unknown class %llu",
                    (unsigned long long)memory_class);
      }
      d->memory_class = (HurrayMemoryClass)memory_class;
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 1), "reserved", error));
      return expect_zero(tag, rd(r, 2), "reserved", error);
    }
    case TAG_SHARD: {
      if (len < 4) {
        return FAIL(HURRAY_ERR_MALFORMED, "shard: payload of %zu bytes has no rank", len);
      }
      uint64_t rank = rd(r, 4);
      if (rank > HURRAY_MAX_RANK) {
        return FAIL(HURRAY_ERR_LIMIT, "shard: rank %llu exceeds the limit of %u",
                    (unsigned long long)rank, HURRAY_MAX_RANK);
      }
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 4 + 16 * (size_t)rank, error));
      if (!hurray__descriptor_add_shard(d)) return FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
      d->shard_rank = (uint32_t)rank;
      for (uint32_t i = 0; i < rank; i++) d->shard->global[i] = rd(r, 8);
      for (uint32_t i = 0; i < rank; i++) d->shard->offsets[i] = rd(r, 8);
      return HURRAY_OK;
    }
    case TAG_STATISTICS: {
      if (len < 8) {
        return FAIL(HURRAY_ERR_MALFORMED, "statistics: payload of %zu bytes has no header", len);
      }
      uint64_t flags = rd(r, 1);
      if (flags > HURRAY_STAT_ALL) {
        return FAIL(HURRAY_ERR_MALFORMED, "statistics: unknown flag bits 0x%02llx",
                    (unsigned long long)flags);
      }
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 1), "reserved", error));
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 2), "reserved", error));
      HURRAY_RETURN_NOT_OK(expect_zero(tag, rd(r, 4), "reserved", error));
      size_t present = (size_t)__builtin_popcountll(flags);
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 8 + 8 * present, error));
      d->stat_flags = (uint32_t)flags;
      uint64_t bits;
      if (flags & HURRAY_STAT_MIN) {
        bits = rd(r, 8);
        memcpy(&d->stat_min, &bits, sizeof bits);
      }
      if (flags & HURRAY_STAT_MAX) {
        bits = rd(r, 8);
        memcpy(&d->stat_max, &bits, sizeof bits);
      }
      if (flags & HURRAY_STAT_NAN_COUNT) d->stat_nan_count = rd(r, 8);
      if (flags & HURRAY_STAT_ZERO_COUNT) d->stat_zero_count = rd(r, 8);
      return HURRAY_OK;
    }
    case TAG_EXTENSION: {
      const uint8_t *at;
      if (!take(r, 2, &at)) {
        return FAIL(HURRAY_ERR_MALFORMED, "extension: name length is cut short");
      }
      size_t name_len = (size_t)get_le(at, 2);
      if (name_len > HURRAY_MAX_NAME_BYTES) {
        return FAIL(HURRAY_ERR_LIMIT, "extension.name: %zu bytes exceeds the limit of %u",
                    name_len, HURRAY_MAX_NAME_BYTES);
      }
      const uint8_t *name_at;
      if (!take(r, name_len, &name_at) || !take(r, 4, &at)) {
        return FAIL(HURRAY_ERR_MALFORMED, "extension: name is cut short");
      }
      uint64_t meta_len = get_le(at, 4);
      if (meta_len > HURRAY_MAX_EXTENSION_METADATA_BYTES) {
        return FAIL(HURRAY_ERR_LIMIT, "extension.metadata: %llu bytes exceeds the limit of %u",
                    (unsigned long long)meta_len, HURRAY_MAX_EXTENSION_METADATA_BYTES);
      }
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 2 + name_len + 4 + (size_t)meta_len, error));
      if (memchr(name_at, 0, name_len) != NULL) {
        return FAIL(HURRAY_ERR_MALFORMED, "extension.name: contains a NUL byte");
      }
      const uint8_t *meta_at = NULL;
      take(r, (size_t)meta_len, &meta_at);
      d->extension_name = malloc(name_len + 1);
      d->extension_metadata = malloc((size_t)meta_len + 1);
      if (d->extension_name == NULL || d->extension_metadata == NULL) {
        return FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
      }
      memcpy(d->extension_name, name_at, name_len);
      d->extension_name[name_len] = '\0';
      if (meta_len > 0) {
        memcpy(d->extension_metadata, meta_at, (size_t)meta_len);
      }
      d->extension_metadata_len = (size_t)meta_len;
      return HURRAY_OK;
    }
  }
  return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x: not a root field", tag);
}

static bool tag_is_layout(uint16_t tag) {
  return tag >= TAG_LAYOUT_DENSE && tag <= TAG_LAYOUT_COMPOSITE;
}
static bool tag_is_quant(uint16_t tag) {
  return tag >= TAG_QUANT_PER_TENSOR && tag <= TAG_QUANT_BLOCK_CODED;
}
static bool tag_is_root_only(uint16_t tag) {
  return tag == TAG_BUFFER_TABLE || tag == TAG_DEVICE || tag == TAG_SHARD ||
         tag == TAG_STATISTICS || tag == TAG_EXTENSION;
}
static bool tag_known(uint16_t tag) {
  switch (tag) {
    case TAG_DTYPE:
    case TAG_SHAPE:
    case TAG_STRIDES:
    case TAG_BYTE_OFFSET:
    case TAG_QUANT_STORAGE:
    case TAG_QUANT_SCALES: return true;
  }
  return ((tag_is_layout(tag) || tag_is_quant(tag)) && (tag & 1)) || tag_is_root_only(tag);
}

/* long: the record loop: framing and tag order, one branch per tag group, required records. */
static HurrayStatus decode_node(Reader *r, HurrayDescriptor *d, bool root, uint32_t depth,
                                HurrayError *error) {
  int last_tag = -1;
  bool seen_layout = false, seen_quant = false, seen_table = false;
  bool seen_dtype = false, seen_shape = false;
  while (r->left > 0) {
    const uint8_t *at;
    if (!take(r, 6, &at)) {
      return FAIL(HURRAY_ERR_TRUNCATED, "record header is cut short (%zu bytes left)", r->left);
    }
    uint16_t tag = (uint16_t)get_le(at, 2);
    uint64_t len64 = get_le(at + 2, 4);
    const uint8_t *payload;
    if (!take(r, len64, &payload)) {
      return FAIL(HURRAY_ERR_TRUNCATED, "record 0x%04x: payload of %llu bytes is cut short", tag,
                  (unsigned long long)len64);
    }
    size_t len = (size_t)len64;
    if ((int)tag <= last_tag) {
      return FAIL(HURRAY_ERR_MALFORMED,
                  "record 0x%04x follows 0x%04x: tags must be strictly increasing", tag,
                  (unsigned)last_tag);
    }
    last_tag = tag;
    if (!tag_known(tag)) {
      if (tag & 1) {
        return FAIL(HURRAY_ERR_UNSUPPORTED,
                    "record 0x%04x: unknown required field (written by a newer version)", tag);
      }
      continue; /* unknown optional field: skipped */
    }
    if (tag_is_root_only(tag) && !root) {
      return FAIL(HURRAY_ERR_MALFORMED, "record 0x%04x is only allowed in the top-level node",
                  tag);
    }
    Reader p = {payload, len, r->nodes};
    HurrayStatus status;
    if (tag == TAG_DTYPE) {
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 2, error));
      status = dtype_from_wire(rd(&p, 2), false, "dtype", &d->dtype, error);
      seen_dtype = true;
    } else if (tag == TAG_SHAPE) {
      status = hurray__descriptor_reserve_rank(
                   d, len / 8 < HURRAY_MAX_RANK ? (uint32_t)(len / 8) : HURRAY_MAX_RANK)
                   ? decode_shape_like(&p, len, &d->rank, d->shape, "shape", error)
                   : FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
      seen_shape = true;
    } else if (tag == TAG_STRIDES) {
      uint32_t rank = 0;
      status = hurray__descriptor_add_strides(d)
                   ? decode_shape_like(&p, len, &rank, d->strides, "strides", error)
                   : FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
      if (status == HURRAY_OK && rank != d->rank) {
        status = FAIL(HURRAY_ERR_MALFORMED, "strides: %u entries for rank %u", rank, d->rank);
      }
    } else if (tag == TAG_BYTE_OFFSET) {
      HURRAY_RETURN_NOT_OK(expect_length(tag, len, 8, error));
      d->byte_offset = rd(&p, 8);
      status = HURRAY_OK;
    } else if (tag_is_layout(tag)) {
      if (seen_layout) {
        return FAIL(HURRAY_ERR_MALFORMED, "layout: more than one layout record");
      }
      seen_layout = true;
      status = decode_layout(&p, tag, len, d, depth, error);
    } else if (tag == TAG_QUANT_STORAGE || tag == TAG_QUANT_SCALES) {
      if (!quant_takes_extra(&d->quant)) {
        return FAIL(HURRAY_ERR_MALFORMED,
                    "record 0x%04x: only after a per-channel, block affine or nf4 record", tag);
      }
      status = tag == TAG_QUANT_STORAGE ? decode_quant_storage(&p, tag, len, d, error)
                                        : decode_quant_scales(&p, tag, len, &d->quant, error);
    } else if (tag_is_quant(tag)) {
      if (seen_quant) {
        return FAIL(HURRAY_ERR_MALFORMED, "quantization: more than one quantization record");
      }
      seen_quant = true;
      status = decode_quant(&p, tag, len, &d->quant, error);
    } else {
      seen_table = seen_table || tag == TAG_BUFFER_TABLE;
      status = decode_root_record(&p, tag, len, d, error);
    }
    HURRAY_RETURN_NOT_OK(status);
  }
  if (!seen_dtype || !seen_shape || !seen_layout || (root && !seen_table)) {
    return FAIL(HURRAY_ERR_MALFORMED, "node lacks a required record (%s)",
                !seen_dtype    ? "dtype"
                : !seen_shape  ? "shape"
                : !seen_layout ? "layout"
                               : "buffers");
  }
  return HURRAY_OK;
}

HurrayStatus hurray_descriptor_decode(const uint8_t *bytes, size_t len, HurrayDescriptor **out,
                                      HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (out == NULL || (bytes == NULL && len > 0)) {
    return FAIL(HURRAY_ERR_INVALID_ARGUMENT, "bytes and out must not be NULL");
  }
  if (len > HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES) {
    return FAIL(HURRAY_ERR_LIMIT, "encoded descriptor of %zu bytes exceeds the limit of %u", len,
                HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES);
  }
  if (len < 6) {
    return FAIL(HURRAY_ERR_TRUNCATED, "%zu bytes is shorter than the 6-byte header", len);
  }
  if (memcmp(bytes, MAGIC, 4) != 0) {
    return FAIL(HURRAY_ERR_MALFORMED, "bad magic: not a hurray descriptor");
  }
  uint64_t version = get_le(bytes + 4, 2);
  if (version != ENCODING_VERSION) {
    return FAIL(HURRAY_ERR_UNSUPPORTED,
                "descriptor encoding version %llu; this library reads version %u",
                (unsigned long long)version, ENCODING_VERSION);
  }
  HurrayDescriptor *d = hurray__descriptor_new();
  if (d == NULL) {
    return FAIL(HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  uint32_t nodes = 1; /* the root */
  Reader r = {bytes + 6, len - 6, &nodes};
  HurrayStatus status = decode_node(&r, d, true, 0, error);
  if (status != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return status;
  }
  *out = d;
  return HURRAY_OK;
}

/* ========================================================= shape peek */

bool hurray__descriptor_peek_shape(const uint8_t *bytes, size_t len, HurrayDType *dtype,
                                   uint32_t *rank, uint64_t shape[HURRAY_MAX_RANK]) {
  if (bytes == NULL || len < 6 || len > HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES ||
      memcmp(bytes, MAGIC, 4) != 0 || get_le(bytes + 4, 2) != ENCODING_VERSION) {
    return false;
  }
  const uint8_t *p = bytes + 6;
  size_t left = len - 6;
  int last_tag = -1;
  bool have_dtype = false;
  /* Tags are strictly increasing and the two wanted come first among the
   * known ones: only unknown optional records may precede them. */
  while (left >= 6) {
    uint16_t tag = (uint16_t)get_le(p, 2);
    uint64_t n = get_le(p + 2, 4);
    if (n > left - 6 || (int)tag <= last_tag) return false;
    last_tag = tag;
    const uint8_t *payload = p + 6;
    if (tag == TAG_DTYPE) {
      uint64_t code = n == 2 ? get_le(payload, 2) : 0;
      if (code == 0 || code >= HURRAY_DTYPE_COUNT) return false;
      *dtype = (HurrayDType)code;
      have_dtype = true;
    } else if (tag == TAG_SHAPE) {
      if (!have_dtype || n % 8 != 0 || n / 8 > HURRAY_MAX_RANK) return false;
      *rank = (uint32_t)(n / 8);
      for (uint32_t i = 0; i < *rank; i++) shape[i] = get_le(payload + 8 * i, 8);
      return true;
    } else if (tag_known(tag) || (tag & 1)) {
      return false;
    }
    p += 6 + n;
    left -= 6 + (size_t)n;
  }
  return false;
}
