/*
 * Turning a tensor's buffers into values: hurray_tensor_to_dense (the
 * logical tensor as a dense row-major array) and hurray_compute_statistics.
 * Both run after placement validation, so every index read here is in range.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "../core/packing.h"
#include "hurray/buffer.h"
#include "host_access.h"
#include "index_read.h"
#include "output_limits.h"

static const uint8_t *data_of(const HurrayBufferList *list, uint32_t buffer) {
  return hurray_buffer_data(hurray_buffer_list_get(list, buffer));
}

/* Row-major position of COO entry k, or of (major, minor) in CSR/CSC. */
static uint64_t linear(const uint64_t *shape, uint32_t rank, const int64_t *coords) {
  uint64_t at = 0;
  for (uint32_t i = 0; i < rank; i++) at = at * shape[i] + (uint64_t)coords[i];
  return at;
}

/* Marks `at` written; false when it already was (a duplicate coordinate). */
static bool claim(uint8_t *seen, uint64_t at) {
  uint8_t bit = (uint8_t)(1u << (at % 8));
  if (seen[at / 8] & bit) return false;
  seen[at / 8] |= bit;
  return true;
}

/* Duplicates sum, as in scipy and torch; false for dtypes without a plain
 * C sum (float16, bfloat16, the narrow floats, bool). int4 and uint4 come
 * here unpacked, one code a byte (subbyte_to_dense). */
static bool add_into(HurrayDType t, uint8_t *dst, const uint8_t *src) {
  switch (t) {
#define SUM(type, dtype)       \
  case dtype: {                \
    type a, b;                 \
    memcpy(&a, dst, sizeof a); \
    memcpy(&b, src, sizeof b); \
    a = (type)(a + b);         \
    memcpy(dst, &a, sizeof a); \
    return true;               \
  }
    /* Signed integers add as their unsigned twins: the same bits, wrapping
     * like numpy, without signed overflow. */
    SUM(uint8_t, HURRAY_DTYPE_INT8)
    SUM(uint16_t, HURRAY_DTYPE_INT16)
    SUM(uint32_t, HURRAY_DTYPE_INT32)
    SUM(uint8_t, HURRAY_DTYPE_UINT8)
    SUM(uint16_t, HURRAY_DTYPE_UINT16)
    SUM(uint32_t, HURRAY_DTYPE_UINT32)
    SUM(uint64_t, HURRAY_DTYPE_UINT64)
    SUM(float, HURRAY_DTYPE_FLOAT32)
    SUM(double, HURRAY_DTYPE_FLOAT64)
#undef SUM
    case HURRAY_DTYPE_INT64: { /* wraps like numpy, without signed overflow */
      uint64_t a, b;
      memcpy(&a, dst, 8);
      memcpy(&b, src, 8);
      a += b;
      memcpy(dst, &a, 8);
      return true;
    }
    case HURRAY_DTYPE_INT4:
    case HURRAY_DTYPE_UINT4: /* one unpacked code a byte: the sum wraps modulo 16 */
      *dst = (uint8_t)((*dst + *src) & 0x0Fu);
      return true;
    case HURRAY_DTYPE_COMPLEX64:
      return add_into(HURRAY_DTYPE_FLOAT32, dst, src) &&
             add_into(HURRAY_DTYPE_FLOAT32, dst + 4, src + 4);
    case HURRAY_DTYPE_COMPLEX128:
      return add_into(HURRAY_DTYPE_FLOAT64, dst, src) &&
             add_into(HURRAY_DTYPE_FLOAT64, dst + 8, src + 8);
    default: return false;
  }
}

/* Writes a stored value at `at`, summing with an earlier one there. */
static HurrayStatus place(const HurrayDescriptor *d, uint8_t *seen, uint8_t *out, uint64_t at,
                          const uint8_t *value, size_t item, HurrayError *error) {
  if (claim(seen, at)) {
    memcpy(out + at * item, value, item);
    return HURRAY_OK;
  }
  if (add_into(d->dtype, out + at * item, value)) return HURRAY_OK;
  return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                      "a position is stored twice and %s values have no sum here; coalesce "
                      "duplicates first",
                      hurray_dtype_name(d->dtype));
}

/* Validation read the index buffers once, but they are the caller's memory
 * and may change under a walk (another thread writing them while the GIL is
 * released): every entry is checked again where it is used, since one read
 * unchecked would place or copy anywhere. */
static HurrayStatus changed_under(uint32_t buffer, uint64_t entry, int64_t value,
                                  HurrayError *error) {
  return hurray__fail(error, HURRAY_ERR_SPARSE_INDEX_BOUNDS,
                      "buffers[%u]: entry %llu is %lld now, out of range: the index buffers "
                      "changed after they were checked (another thread wrote them)",
                      buffer, (unsigned long long)entry, (long long)value);
}

/* Calls visit(ctx, k, at) for each stored element in storage order: k its
 * index among the stored values (a block's elements expanded), at its
 * row-major position. */
typedef HurrayStatus (*SparseVisit)(void *ctx, uint64_t k, uint64_t at, HurrayError *error);

static HurrayStatus walk_coo(const HurrayDescriptor *d, const HurrayBufferList *list,
                             SparseVisit visit, void *ctx, HurrayError *error) {
  const HurrayLayout *l = &d->layout;
  bool wide = l->index_dtype == HURRAY_DTYPE_INT64;
  int64_t coords[HURRAY_MAX_RANK];
  for (uint64_t k = 0; k < l->nnz; k++) {
    for (uint32_t dim = 0; dim < d->rank; dim++) {
      uint32_t buffer = l->coo_index_buffers[dim];
      coords[dim] = hurray__index_at(data_of(list, buffer), wide, k);
      if (coords[dim] < 0 || (uint64_t)coords[dim] >= d->shape[dim]) {
        return changed_under(buffer, k, coords[dim], error);
      }
    }
    HURRAY_RETURN_NOT_OK(visit(ctx, k, linear(d->shape, d->rank, coords), error));
  }
  return HURRAY_OK;
}

static HurrayStatus walk_sparse(const HurrayDescriptor *d, const HurrayBufferList *list,
                                SparseVisit visit, void *ctx, HurrayError *error) {
  const HurrayLayout *l = &d->layout;
  if (l->format == HURRAY_SPARSE_COO) return walk_coo(d, list, visit, ctx, error);
  bool wide = l->index_dtype == HURRAY_DTYPE_INT64;
  bool csc = l->format == HURRAY_SPARSE_CSC, bsr = l->format == HURRAY_SPARSE_BSR;
  uint64_t br = bsr ? l->block_rows : 1, bc = bsr ? l->block_cols : 1;
  uint64_t major = (csc ? d->shape[1] : d->shape[0]) / br;
  uint64_t minors = (csc ? d->shape[0] : d->shape[1]) / bc;
  const uint8_t *indptr = data_of(list, l->indptr_buffer);
  const uint8_t *indices = data_of(list, l->indices_buffer);
  /* Each pointer is read once: the walk covers [0, nnz) in order, or fails,
   * so no stored entry is skipped or placed twice. */
  int64_t start = hurray__index_at(indptr, wide, 0);
  if (start != 0) return changed_under(l->indptr_buffer, 0, start, error);
  for (uint64_t m = 0; m < major; m++) {
    int64_t end = hurray__index_at(indptr, wide, m + 1);
    if (end < start || end > (int64_t)l->nnz) {
      return changed_under(l->indptr_buffer, m + 1, end, error);
    }
    for (int64_t k = start; k < end; k++) {
      int64_t minor = hurray__index_at(indices, wide, (uint64_t)k);
      if (minor < 0 || (uint64_t)minor >= minors) {
        return changed_under(l->indices_buffer, (uint64_t)k, minor, error);
      }
      for (uint64_t i = 0; i < br; i++) {
        for (uint64_t j = 0; j < bc; j++) {
          uint64_t row = csc ? (uint64_t)minor : m * br + i;
          uint64_t col = csc ? m : (uint64_t)minor * bc + j;
          HURRAY_RETURN_NOT_OK(
              visit(ctx, (uint64_t)k * br * bc + i * bc + j, row * d->shape[1] + col, error));
        }
      }
    }
    start = end;
  }
  if (start != (int64_t)l->nnz) return changed_under(l->indptr_buffer, major, start, error);
  return HURRAY_OK;
}

typedef struct Placing {
  const HurrayDescriptor *d;
  uint8_t *seen, *out;
  const uint8_t *values;
  size_t item;
} Placing;

static HurrayStatus place_one(void *ctx, uint64_t k, uint64_t at, HurrayError *error) {
  const Placing *p = ctx;
  return place(p->d, p->seen, p->out, at, p->values + k * p->item, p->item, error);
}

/* `values`: the stored values, `item` bytes each (the values buffer past
 * byte_offset, or those values unpacked one a byte). */
static HurrayStatus sparse_to_dense(const HurrayDescriptor *d, const HurrayBufferList *list,
                                    const uint8_t *values, uint8_t *out, size_t item,
                                    uint64_t numel, HurrayError *error) {
  uint8_t *seen = calloc(numel / 8 + 1, 1);
  if (seen == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  if (numel > 0) memset(out, 0, numel * item); /* out may be NULL when empty */
  Placing p = {d, seen, out, values, item};
  HurrayStatus status = walk_sparse(d, list, place_one, &p, error);
  free(seen);
  return status;
}

static HurrayStatus paged_to_dense(const HurrayDescriptor *d, const HurrayBufferList *list,
                                   const uint8_t *pool, uint8_t *out, size_t item,
                                   HurrayError *error) {
  const HurrayLayout *l = &d->layout;
  bool wide = l->index_dtype == HURRAY_DTYPE_INT64;
  uint64_t outer = 1, inner = 1;
  for (uint32_t i = 0; i < d->rank; i++) {
    if (i < l->axis) outer *= d->shape[i];
    if (i > l->axis) inner *= d->shape[i];
  }
  uint64_t length = d->shape[l->axis];
  uint64_t blocks = hurray__ceil_div_u64(length, l->page_size);
  uint64_t page_bytes = l->page_size * inner * item;
  const uint8_t *table = data_of(list, l->table_buffer);
  for (uint64_t o = 0; o < outer; o++) {
    for (uint64_t b = 0; b < blocks; b++) {
      int64_t page = hurray__index_at(table, wide, o * blocks + b);
      if (page < 0 || (uint64_t)page >= l->num_pages) {
        return changed_under(l->table_buffer, o * blocks + b, page, error);
      }
      uint64_t rows = b + 1 < blocks ? l->page_size : length - b * l->page_size;
      memcpy(out + (o * length + b * l->page_size) * inner * item,
             pool + (uint64_t)page * page_bytes, rows * inner * item);
    }
  }
  return HURRAY_OK;
}

/* The element offset (in items) of row-major position `index` of a strided
 * dense view, and `index` advanced to the next position. */
static int64_t strided_next(const HurrayDescriptor *d, uint64_t *index) {
  int64_t offset = 0;
  for (uint32_t i = 0; i < d->rank; i++) offset += (int64_t)index[i] * d->strides[i];
  for (uint32_t i = d->rank; i-- > 0;) {
    if (++index[i] < d->shape[i]) break;
    index[i] = 0;
  }
  return offset;
}

/* A strided dense view copied element by element into row-major order. */
static void strided_to_dense(const HurrayDescriptor *d, const uint8_t *base, uint8_t *out,
                             size_t item, uint64_t numel) {
  uint64_t index[HURRAY_MAX_RANK] = {0};
  for (uint64_t n = 0; n < numel; n++) {
    memcpy(out + n * item, base + strided_next(d, index) * (int64_t)item, item);
  }
}

/* Sparse or paged sub-byte elements: the stored ones unpacked one a byte,
 * placed as byte-sized ones are, and the result packed into `out`. A
 * position stored twice sums for int4 and uint4 (modulo 16) and is refused
 * for the narrow floats. */
static HurrayStatus subbyte_to_dense(const HurrayDescriptor *d, const HurrayBufferList *list,
                                     uint8_t *out, uint64_t numel, HurrayError *error) {
  const HurrayLayout *l = &d->layout;
  uint32_t bits = hurray_dtype_bits(d->dtype);
  uint64_t stored = 1; /* elements in the values buffer or the page pool */
  if (l->kind == HURRAY_LAYOUT_SPARSE) {
    stored = l->nnz * (l->format == HURRAY_SPARSE_BSR ? l->block_rows * l->block_cols : 1);
  } else {
    for (uint32_t i = l->axis + 1; i < d->rank; i++) stored *= d->shape[i];
    stored *= l->num_pages * l->page_size;
  } /* placement validation proved the buffer holds them, so no product overflows */
  const HurrayBuffer *b = hurray_buffer_list_get(list, l->data_buffer);
  uint8_t *codes = malloc(stored ? (size_t)stored : 1);
  uint8_t *dense = malloc(numel ? (size_t)numel : 1);
  HurrayStatus status = HURRAY_OK;
  if (codes == NULL || dense == NULL) {
    status = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  } else {
    hurray__unpack_bits(bits, hurray_buffer_data(b) + d->byte_offset,
                        (size_t)(hurray_buffer_size(b) - d->byte_offset), stored, codes);
    if (l->kind == HURRAY_LAYOUT_SPARSE) {
      status = sparse_to_dense(d, list, codes, dense, 1, numel, error);
    } else if (numel > 0) {
      status = paged_to_dense(d, list, codes, dense, 1, error);
    }
    if (status == HURRAY_OK) hurray__pack_bits(bits, dense, numel, out);
  }
  free(codes);
  free(dense);
  return status;
}

/* Placement reads index contents (sparse indices, page tables) only from
 * host memory that is READY, so only such tensors may be walked here: an
 * index buffer still waiting on a stream or event was never checked. */
static HurrayStatus require_readable(const HurrayDescriptor *d, const char *what,
                                     HurrayError *error) {
  if (d->quant.kind == HURRAY_QUANT_BLOCK_CODED) {
    /* Block bytes are not one code per element (the buffer is smaller than
     * numel elements of its dtype): nothing here can walk them. */
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "%s: a block-coded tensor has no per-element codes; dequantize it", what);
  }
  const HurrayQuantStorage *qs = hurray__qs(&d->quant);
  if (qs->has_storage_axes || qs->code_packing.word_bits != 0) {
    /* Codes stored transposed or several to a word (GPTQ, AWQ): copied as
     * stored they would come out in another order, with OK. */
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "%s: the codes are stored in another order or packed into words "
                        "(storage axes, code packing); dequantize it",
                        what);
  }
  return hurray__require_host_ready(d, what, error);
}

HurrayStatus hurray_tensor_to_dense(const HurrayDescriptor *d, const HurrayBufferList *list,
                                    void *out, uint64_t out_size, HurrayError *error) {
  return hurray_tensor_to_dense_with(d, list, NULL, out, out_size, error);
}

HurrayStatus hurray_tensor_to_dense_with(const HurrayDescriptor *d, const HurrayBufferList *list,
                                         const HurrayOutputLimits *limits, void *out,
                                         uint64_t out_size, HurrayError *error) {
  if (d == NULL || list == NULL || (out == NULL && out_size > 0)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor, list and out required");
  }
  HURRAY_RETURN_NOT_OK(hurray_validate_buffer_placement(d, list, error));
  HURRAY_RETURN_NOT_OK(require_readable(d, "to_dense", error));
  uint64_t numel, bytes;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_numel(d, &numel, error));
  if (hurray_dtype_storage_bytes(d->dtype, numel, &bytes) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "dense size overflows");
  }
  HURRAY_RETURN_NOT_OK(hurray_check_output_size(d, bytes, limits, error));
  if (out_size < bytes) {
    return hurray__fail(error, HURRAY_ERR_BUFFER_SIZE,
                        "out holds %llu bytes, the dense tensor needs %llu",
                        (unsigned long long)out_size, (unsigned long long)bytes);
  }
  HURRAY_RETURN_NOT_OK(hurray__check_output_apart(list, out, bytes, error));
  uint32_t bits = hurray_dtype_bits(d->dtype);
  size_t item = bits / 8;
  switch (d->layout.kind) {
    case HURRAY_LAYOUT_DENSE: {
      const uint8_t *base = data_of(list, d->layout.data_buffer) + d->byte_offset;
      if (d->strides != NULL && numel > 0) {
        strided_to_dense(d, base, out, item, numel);
      } else if (bytes > 0) {
        memcpy(out, base, bytes);
      }
      return HURRAY_OK;
    }
    case HURRAY_LAYOUT_SPARSE:
    case HURRAY_LAYOUT_PAGED:
      if (bits % 8 != 0) return subbyte_to_dense(d, list, out, numel, error);
      if (d->layout.kind == HURRAY_LAYOUT_PAGED) {
        /* An empty tensor has nothing to gather; the loop would still walk
         * the dimensions before the paged axis, which may be huge. */
        if (numel == 0) return HURRAY_OK;
        return paged_to_dense(d, list, data_of(list, d->layout.data_buffer) + d->byte_offset, out,
                              item, error);
      }
      return sparse_to_dense(d, list, data_of(list, d->layout.data_buffer) + d->byte_offset, out,
                             item, numel, error);
    case HURRAY_LAYOUT_COMPOSITE: break;
  }
  return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                      "a composite has no single dense form; read its members");
}

/* ------------------------------------------------------------ statistics */

static double half_to_double(uint16_t h) {
  int exponent = (h >> 10) & 0x1F;
  double mantissa = h & 0x3FF;
  double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * ldexp(mantissa, -24);
  if (exponent == 31) return mantissa != 0 ? NAN : sign * INFINITY;
  return sign * ldexp(mantissa + 1024.0, exponent - 25);
}

static double bfloat_to_double(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* The value of element `i` of a byte-sized numeric dtype as a double; false
 * for dtypes statistics do not cover. */
static bool value_at(HurrayDType t, const uint8_t *p, uint64_t i, double *out) {
  switch (t) {
#define AS(type, dtype)                     \
  case dtype: {                             \
    type v;                                 \
    memcpy(&v, p + i * sizeof v, sizeof v); \
    *out = (double)v;                       \
    return true;                            \
  }
    AS(int8_t, HURRAY_DTYPE_INT8)
    AS(int16_t, HURRAY_DTYPE_INT16)
    AS(int32_t, HURRAY_DTYPE_INT32)
    AS(int64_t, HURRAY_DTYPE_INT64)
    AS(uint8_t, HURRAY_DTYPE_UINT8)
    AS(uint16_t, HURRAY_DTYPE_UINT16)
    AS(uint32_t, HURRAY_DTYPE_UINT32)
    AS(uint64_t, HURRAY_DTYPE_UINT64)
    AS(float, HURRAY_DTYPE_FLOAT32)
    AS(double, HURRAY_DTYPE_FLOAT64)
#undef AS
    case HURRAY_DTYPE_BOOL: *out = p[i] != 0; return true;
    case HURRAY_DTYPE_FLOAT16:
    case HURRAY_DTYPE_BFLOAT16: {
      uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
      *out = t == HURRAY_DTYPE_FLOAT16 ? half_to_double(h) : bfloat_to_double(h);
      return true;
    }
    default: return false;
  }
}

typedef struct Stats {
  double min, max;
  uint64_t nan_count, zero_count, seen;
} Stats;

static void observe(Stats *s, double v) {
  if (isnan(v)) {
    s->nan_count++;
    return;
  }
  if (v == 0) s->zero_count++;
  if (s->seen++ == 0 || v < s->min) s->min = v;
  if (s->seen == 1 || v > s->max) s->max = v;
}

static HurrayStatus note_position(void *ctx, uint64_t k, uint64_t at, HurrayError *error) {
  (void)error;
  ((uint64_t *)ctx)[k] = at;
  return HURRAY_OK;
}

typedef struct Entry {
  uint64_t position;
  uint64_t k; /* storage index: duplicates sum in storage order, as to_dense does */
} Entry;

static int by_position(const void *a, const void *b) {
  const Entry *x = a, *y = b;
  if (x->position != y->position) return (x->position > y->position) - (x->position < y->position);
  return (x->k > y->k) - (x->k < y->k);
}

/* Sparse statistics describe the logical elements, the values to_dense
 * writes: entries naming the same position are summed first, in the
 * element type and in storage order exactly as to_dense sums them
 * (integers wrap, float32 rounds at each step), and unstored positions are
 * zeros. Sorting costs O(stored) memory, never the dense size. Duplicates
 * of a dtype without a sum (to_dense refuses those too) are UNSUPPORTED. */
static HurrayStatus sparse_statistics(const HurrayDescriptor *d, const HurrayBufferList *list,
                                      const uint8_t *values, uint64_t stored, uint64_t numel,
                                      Stats *s, HurrayError *error) {
  bool fits = stored < SIZE_MAX / sizeof(Entry); /* false only on a 32-bit host */
  Entry *entries = fits ? malloc((stored ? (size_t)stored : 1) * sizeof *entries) : NULL;
  /* zeroed: a walk that fails part way leaves nothing indeterminate */
  uint64_t *positions = fits ? calloc(stored ? (size_t)stored : 1, sizeof *positions) : NULL;
  if (entries == NULL || positions == NULL) {
    free(entries);
    free(positions);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  HurrayStatus status = walk_sparse(d, list, note_position, positions, error);
  if (status != HURRAY_OK) {
    free(entries);
    free(positions);
    return status;
  }
  for (uint64_t k = 0; k < stored; k++) {
    entries[k].position = positions[k];
    entries[k].k = k;
  }
  free(positions);
  qsort(entries, (size_t)stored, sizeof *entries, by_position);
  size_t item = hurray_dtype_bits(d->dtype) / 8;
  uint64_t distinct = 0;
  for (uint64_t k = 0; k < stored;) {
    /* The largest element (complex128) is 16 bytes. */
    uint8_t sum[16];
    memcpy(sum, values + entries[k].k * item, item);
    uint64_t next = k + 1;
    while (next < stored && entries[next].position == entries[k].position) {
      if (!add_into(d->dtype, sum, values + entries[next++].k * item)) {
        free(entries);
        return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                            "a position is stored twice and %s values have no sum here; "
                            "coalesce duplicates first",
                            hurray_dtype_name(d->dtype));
      }
    }
    double v;
    value_at(d->dtype, sum, 0, &v);
    observe(s, v);
    distinct++;
    k = next;
  }
  free(entries);
  if (distinct < numel) { /* the unstored positions, all zeros */
    observe(s, 0.0);
    s->zero_count += numel - distinct - 1;
  }
  return HURRAY_OK;
}

HurrayStatus hurray_compute_statistics(HurrayDescriptor *d, const HurrayBufferList *list,
                                       HurrayError *error) {
  if (d == NULL || list == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "descriptor and list required");
  }
  HURRAY_RETURN_NOT_OK(hurray_validate_buffer_placement(d, list, error));
  HURRAY_RETURN_NOT_OK(require_readable(d, "compute_statistics", error));
  double probe;
  bool dense = d->layout.kind == HURRAY_LAYOUT_DENSE;
  bool sparse = d->layout.kind == HURRAY_LAYOUT_SPARSE;
  if ((!dense && !sparse) || d->memory_class == HURRAY_MEMORY_DEVICE ||
      !value_at(d->dtype, (const uint8_t *)"\0\0\0\0\0\0\0\0", 0, &probe)) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "statistics cover dense and sparse tensors of bool, integer "
                        "and float16/bfloat16/float32/float64 elements, not %s %s",
                        hurray_dtype_name(d->dtype),
                        dense || sparse ? "elements" : "in this layout");
  }
  uint64_t numel;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_numel(d, &numel, error));
  const uint8_t *values = data_of(list, d->layout.data_buffer) + d->byte_offset;
  Stats s = {0};
  if (sparse) {
    uint64_t stored = d->layout.nnz;
    if (d->layout.format == HURRAY_SPARSE_BSR) {
      stored *= d->layout.block_rows * d->layout.block_cols;
    }
    HURRAY_RETURN_NOT_OK(sparse_statistics(d, list, values, stored, numel, &s, error));
  } else {
    /* A strided view has as many logical elements as its shape says,
     * however few it stores (a zero stride repeats one): the default
     * output limits bound the walk, as they bound to_dense. */
    size_t item = hurray_dtype_bits(d->dtype) / 8;
    uint64_t bytes;
    if (d->strides != NULL && (!hurray__mul_u64(numel, item, &bytes) ||
                               hurray_check_output_size(d, bytes, NULL, error) != HURRAY_OK)) {
      return hurray__fail(error, HURRAY_ERR_LIMIT,
                          "statistics of a strided view of %" PRIu64
                          " elements: more than the default output limits allow",
                          numel);
    }
    uint64_t index[HURRAY_MAX_RANK] = {0};
    for (uint64_t i = 0; i < numel; i++) {
      double v;
      if (d->strides != NULL) {
        value_at(d->dtype, values + strided_next(d, index) * (int64_t)item, 0, &v);
      } else {
        value_at(d->dtype, values, i, &v);
      }
      observe(&s, v);
    }
  }
  hurray_descriptor_clear_statistics(d);
  hurray_descriptor_set_stat_nan_count(d, s.nan_count);
  hurray_descriptor_set_stat_zero_count(d, s.zero_count);
  if (s.seen > 0) {
    hurray_descriptor_set_stat_min(d, s.min);
    hurray_descriptor_set_stat_max(d, s.max);
  }
  return HURRAY_OK;
}
