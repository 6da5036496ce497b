#include "vectors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Builders abort on any failure: a vector that cannot be built is a bug
 * in the test itself. */
#define OK(expr)                                                           \
  do {                                                                     \
    HurrayError e_ = {0};                                                  \
    HurrayStatus s_ = (expr);                                              \
    (void)e_;                                                              \
    if (s_ != HURRAY_OK) {                                                 \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, \
              hurray_status_name(s_));                                     \
      abort();                                                             \
    }                                                                      \
  } while (0)

static HurrayDescriptor *make(HurrayDType dtype, uint32_t rank, const uint64_t *shape) {
  HurrayDescriptor *d = NULL;
  OK(hurray_descriptor_create(dtype, rank, shape, &d, NULL));
  return d;
}

void golden_vector_add_buffer(HurrayDescriptor *d, HurrayBufferRole role, uint64_t size) {
  OK(hurray_descriptor_add_buffer(d, role, size, 64, HURRAY_SYNC_READY, NULL, NULL));
}

/* Shorthand for the builders below. */
#define add golden_vector_add_buffer

static HurrayDescriptor *dense_float32(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){2, 3});
  add(d, HURRAY_ROLE_DATA, 24);
  return d;
}

static HurrayDescriptor *dense_scalar_bool(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_BOOL, 0, NULL);
  add(d, HURRAY_ROLE_DATA, 1);
  return d;
}

static HurrayDescriptor *dense_strided(void) {
  /* A transposed, reversed view: element 0 sits 40 bytes in. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT64, 2, (uint64_t[]){3, 2});
  OK(hurray_descriptor_set_strides(d, (int64_t[]){1, -3}, NULL));
  hurray_descriptor_set_byte_offset(d, 24);
  add(d, HURRAY_ROLE_DATA, 48);
  return d;
}

static HurrayDescriptor *dense_int4(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_INT4, 1, (uint64_t[]){7});
  add(d, HURRAY_ROLE_DATA, 4);
  return d;
}

static HurrayDescriptor *dense_float6(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT6_E2M3FN, 1, (uint64_t[]){8});
  add(d, HURRAY_ROLE_DATA, 6);
  return d;
}

static HurrayDescriptor *sparse_coo(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT32, 3, (uint64_t[]){4, 5, 6});
  add(d, HURRAY_ROLE_VALUES, 3 * 4);
  add(d, HURRAY_ROLE_INDICES, 3 * 8);
  add(d, HURRAY_ROLE_INDICES, 3 * 8);
  add(d, HURRAY_ROLE_INDICES, 3 * 8);
  OK(hurray_descriptor_set_layout_coo(d, HURRAY_DTYPE_INT64, 3, 0, (uint32_t[]){1, 2, 3}, true,
                                      NULL));
  return d;
}

static HurrayDescriptor *sparse_compressed(HurraySparseFormat format) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT64, 2, (uint64_t[]){3, 4});
  add(d, HURRAY_ROLE_VALUES, 5 * 8);
  add(d, HURRAY_ROLE_INDPTR, (format == HURRAY_SPARSE_CSR ? 4 : 5) * 4);
  add(d, HURRAY_ROLE_INDICES, 5 * 4);
  OK(hurray_descriptor_set_layout_compressed(d, format, HURRAY_DTYPE_INT32, 5, 0, 1, 2, NULL));
  return d;
}

static HurrayDescriptor *sparse_csr(void) { return sparse_compressed(HURRAY_SPARSE_CSR); }
static HurrayDescriptor *sparse_csc(void) { return sparse_compressed(HURRAY_SPARSE_CSC); }

static HurrayDescriptor *sparse_bsr(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT16, 2, (uint64_t[]){4, 6});
  add(d, HURRAY_ROLE_VALUES, 3 * 2 * 3 * 2);
  add(d, HURRAY_ROLE_INDPTR, 3 * 8);
  add(d, HURRAY_ROLE_INDICES, 3 * 8);
  OK(hurray_descriptor_set_layout_bsr(d, HURRAY_DTYPE_INT64, 3, 2, 3, 0, 1, 2, NULL));
  return d;
}

static HurrayDescriptor *paged_kv_cache(void) {
  /* 2 sequences x 40 tokens x 4 heads x 8 dims, 16 tokens a page. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_BFLOAT16, 4, (uint64_t[]){2, 40, 4, 8});
  add(d, HURRAY_ROLE_PAGE_POOL, 8 * 16 * 4 * 8 * 2);
  add(d, HURRAY_ROLE_PAGE_TABLE, 2 * 3 * 4);
  OK(hurray_descriptor_set_layout_paged(d, 1, 16, 8, HURRAY_DTYPE_INT32, 0, 1, NULL));
  return d;
}

static HurrayDescriptor *composite_lora(void) {
  /* A quantized base weight plus a low-rank adapter pair. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){8, 4});
  add(d, HURRAY_ROLE_DATA, 32);
  add(d, HURRAY_ROLE_SCALES, 8 * 4);
  add(d, HURRAY_ROLE_DATA, 8 * 2 * 4);
  add(d, HURRAY_ROLE_DATA, 2 * 4 * 4);
  OK(hurray_descriptor_set_layout_composite(d, NULL));
  HurrayDescriptor *base = make(HURRAY_DTYPE_INT8, 2, (uint64_t[]){8, 4});
  OK(hurray_descriptor_set_layout_dense(base, 0, NULL));
  OK(hurray_descriptor_set_quant_per_channel_affine(base, 0, 1, HURRAY_DTYPE_FLOAT32, NULL));
  OK(hurray_descriptor_add_member(d, "base", base, NULL));
  HurrayDescriptor *a = make(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){8, 2});
  OK(hurray_descriptor_set_layout_dense(a, 2, NULL));
  OK(hurray_descriptor_add_member(d, "lora_a", a, NULL));
  HurrayDescriptor *b = make(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){2, 4});
  OK(hurray_descriptor_set_layout_dense(b, 3, NULL));
  OK(hurray_descriptor_add_member(d, "lora_b", b, NULL));
  return d;
}

static HurrayDescriptor *quant_per_tensor_affine(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){16});
  add(d, HURRAY_ROLE_DATA, 16);
  OK(hurray_descriptor_set_quant_per_tensor_affine(d, 0.0125, 128, NULL));
  return d;
}

static HurrayDescriptor *quant_per_channel_affine(void) {
  /* The example's tensor: int8 codes, float32 scales, int8 zero points. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_INT8, 2, (uint64_t[]){4, 3});
  add(d, HURRAY_ROLE_DATA, 12);
  add(d, HURRAY_ROLE_SCALES, 16);
  add(d, HURRAY_ROLE_ZERO_POINTS, 4);
  OK(hurray_descriptor_set_quant_per_channel_affine(d, 0, 1, HURRAY_DTYPE_FLOAT32, NULL));
  OK(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_INT8, NULL));
  return d;
}

static HurrayDescriptor *quant_block_affine_q8_0(void) {
  /* GGUF Q8_0: 32-element blocks along rows, one float16 d per block. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_INT8, 2, (uint64_t[]){2, 64});
  add(d, HURRAY_ROLE_DATA, 128);
  add(d, HURRAY_ROLE_SCALES, 2 * 2 * 2);
  OK(hurray_descriptor_set_quant_block_affine(d, 1, 32, 1, HURRAY_DTYPE_FLOAT16, NULL));
  return d;
}

static HurrayDescriptor *quant_block_affine_q4_0(void) {
  /* GGUF Q4_0: uint4 codes q with value (q - 8) * d. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){2, 64});
  add(d, HURRAY_ROLE_DATA, 64);
  add(d, HURRAY_ROLE_SCALES, 2 * 2 * 2);
  OK(hurray_descriptor_set_quant_block_affine(d, 1, 32, 1, HURRAY_DTYPE_FLOAT16, NULL));
  OK(hurray_descriptor_set_quant_zero_point(d, 8, NULL));
  return d;
}

static HurrayDescriptor *quant_block_affine_zero_points(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){4, 128});
  add(d, HURRAY_ROLE_DATA, 256);
  add(d, HURRAY_ROLE_SCALES, 4 * 2 * 2);
  add(d, HURRAY_ROLE_ZERO_POINTS, 4 * 2);
  OK(hurray_descriptor_set_quant_block_affine(d, 1, 64, 1, HURRAY_DTYPE_BFLOAT16, NULL));
  OK(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_UINT8, NULL));
  return d;
}

static HurrayDescriptor *quant_nf4(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){8, 16});
  add(d, HURRAY_ROLE_DATA, 64);
  add(d, HURRAY_ROLE_SCALES, 2 * 4);
  OK(hurray_descriptor_set_quant_nf4(d, 64, 1, HURRAY_DTYPE_FLOAT32, NULL));
  return d;
}

static HurrayDescriptor *quant_mx(HurrayMxElement element, HurrayDType dtype,
                                  uint64_t data_bytes) {
  HurrayDescriptor *d = make(dtype, 2, (uint64_t[]){2, 64});
  add(d, HURRAY_ROLE_DATA, data_bytes);
  add(d, HURRAY_ROLE_SCALES, 4);
  OK(hurray_descriptor_set_quant_mx(d, element, 1, 1, NULL));
  return d;
}

static HurrayDescriptor *quant_mxfp8_e4m3(void) {
  return quant_mx(HURRAY_MX_FP8_E4M3, HURRAY_DTYPE_FLOAT8_E4M3FN, 128);
}
static HurrayDescriptor *quant_mxfp8_e5m2(void) {
  return quant_mx(HURRAY_MX_FP8_E5M2, HURRAY_DTYPE_FLOAT8_E5M2, 128);
}
static HurrayDescriptor *quant_mxfp6_e3m2(void) {
  return quant_mx(HURRAY_MX_FP6_E3M2, HURRAY_DTYPE_FLOAT6_E3M2FN, 96);
}
static HurrayDescriptor *quant_mxfp6_e2m3(void) {
  return quant_mx(HURRAY_MX_FP6_E2M3, HURRAY_DTYPE_FLOAT6_E2M3FN, 96);
}
static HurrayDescriptor *quant_mxfp4_e2m1(void) {
  return quant_mx(HURRAY_MX_FP4_E2M1, HURRAY_DTYPE_FLOAT4_E2M1FN, 64);
}
static HurrayDescriptor *quant_mxint8(void) {
  return quant_mx(HURRAY_MX_INT8, HURRAY_DTYPE_INT8, 128);
}

static HurrayDescriptor *quant_block_coded_q4_k(void) {
  /* GGUF Q4_K: 256-element blocks of 144 bytes along rows, scales inside. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT8, 2, (uint64_t[]){3, 512});
  add(d, HURRAY_ROLE_DATA, 3 * 2 * 144);
  OK(hurray_descriptor_set_quant_block_coded(d, HURRAY_BLOCK_GGML_Q4_K, 1, NULL));
  return d;
}

static HurrayDescriptor *quant_block_coded_iq2_xxs(void) {
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){256});
  add(d, HURRAY_ROLE_DATA, 66);
  OK(hurray_descriptor_set_quant_block_coded(d, HURRAY_BLOCK_GGML_IQ2_XXS, 0, NULL));
  return d;
}

/* Packed and two-level quantization (ADR-0024), one per family it serves. */
static HurrayDescriptor *quant_gptq(void) {
  /* GPTQ v1: logical [N=16, K=64], codes stored [K, N] packed 8 per int32
   * along K, zero points uint4 [K/16, N] packed along N, stored zero - 1,
   * g_idx. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){16, 64});
  add(d, HURRAY_ROLE_DATA, 64 / 8 * 16 * 4);
  add(d, HURRAY_ROLE_SCALES, 4 * 16 * 2);
  add(d, HURRAY_ROLE_ZERO_POINTS, 4 * 16 / 8 * 4);
  add(d, HURRAY_ROLE_GROUP_INDEX, 64 * 4);
  OK(hurray_descriptor_set_quant_block_affine(d, 1, 16, 1, HURRAY_DTYPE_FLOAT16, NULL));
  OK(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_UINT4, NULL));
  OK(hurray_descriptor_set_quant_storage_axes(d, (uint32_t[]){1, 0}, NULL));
  OK(hurray_descriptor_set_quant_code_packing(d, 32, 0, NULL, NULL));
  OK(hurray_descriptor_set_quant_zero_point_packing(d, 32, 1, NULL, NULL));
  OK(hurray_descriptor_set_quant_zero_point_offset(d, 1, NULL));
  OK(hurray_descriptor_set_quant_group_index(d, 3, HURRAY_DTYPE_INT32, NULL));
  return d;
}

static HurrayDescriptor *quant_awq(void) {
  /* AWQ GEMM: logical [N=16, K=32], codes stored [K, N] packed along N in
   * the lane order 0,2,4,6,1,3,5,7, zero points likewise. */
  static const uint8_t order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){16, 32});
  add(d, HURRAY_ROLE_DATA, 32 * 16 / 8 * 4);
  add(d, HURRAY_ROLE_SCALES, 2 * 16 * 2);
  add(d, HURRAY_ROLE_ZERO_POINTS, 2 * 16 / 8 * 4);
  OK(hurray_descriptor_set_quant_block_affine(d, 1, 16, 1, HURRAY_DTYPE_FLOAT16, NULL));
  OK(hurray_descriptor_set_quant_zero_point_buffer(d, 2, HURRAY_DTYPE_UINT4, NULL));
  OK(hurray_descriptor_set_quant_storage_axes(d, (uint32_t[]){1, 0}, NULL));
  OK(hurray_descriptor_set_quant_code_packing(d, 32, 1, order, NULL));
  OK(hurray_descriptor_set_quant_zero_point_packing(d, 32, 1, order, NULL));
  return d;
}

static HurrayDescriptor *quant_fp8_block(void) {
  /* DeepSeek FP8: 128x128 blocks over [200, 300], partial edge blocks. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT8_E4M3FN, 2, (uint64_t[]){200, 300});
  add(d, HURRAY_ROLE_DATA, 200 * 300);
  add(d, HURRAY_ROLE_SCALES, 2 * 3 * 4);
  OK(hurray_descriptor_set_quant_block_affine(d, 0, 128, 1, HURRAY_DTYPE_FLOAT32, NULL));
  OK(hurray_descriptor_set_quant_block2(d, 1, 128, NULL));
  return d;
}

static HurrayDescriptor *quant_bnb_double(void) {
  /* bitsandbytes NF4 with double quantization: bytes high nibble first,
   * quant_map, uint8 absmax codes through nested_quant_map, times
   * nested_absmax per 256 blocks, plus nested offset. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_UINT4, 2, (uint64_t[]){64, 64});
  add(d, HURRAY_ROLE_DATA, 64 * 64 / 2);
  add(d, HURRAY_ROLE_SCALES, 64);
  add(d, HURRAY_ROLE_CODEBOOK, 16 * 4);
  add(d, HURRAY_ROLE_CODEBOOK, 256 * 4);
  add(d, HURRAY_ROLE_SUPER_SCALES, 4);
  OK(hurray_descriptor_set_quant_nf4(d, 64, 1, HURRAY_DTYPE_UINT8, NULL));
  OK(hurray_descriptor_set_quant_code_packing(d, 8, 0, (const uint8_t[]){1, 0}, NULL));
  OK(hurray_descriptor_set_quant_codebook(d, 2, NULL));
  OK(hurray_descriptor_set_quant_scale_codebook(d, 3, NULL));
  OK(hurray_descriptor_set_quant_super_scales(d, 4, HURRAY_DTYPE_FLOAT32, 256,
                                              HURRAY_SUPER_MULTIPLY, 0.03125, NULL));
  return d;
}

static HurrayDescriptor *quant_nvfp4(void) {
  /* NVFP4 as compressed-tensors stores it: FP4 codes, E4M3 scales per 16,
   * one float32 global scale that divides. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT4_E2M1FN, 2, (uint64_t[]){32, 64});
  add(d, HURRAY_ROLE_DATA, 32 * 64 / 2);
  add(d, HURRAY_ROLE_SCALES, 32 * 4);
  add(d, HURRAY_ROLE_SUPER_SCALES, 4);
  OK(hurray_descriptor_set_quant_block_affine(d, 1, 16, 1, HURRAY_DTYPE_FLOAT8_E4M3FN, NULL));
  OK(hurray_descriptor_set_quant_super_scales(d, 2, HURRAY_DTYPE_FLOAT32, 0, HURRAY_SUPER_DIVIDE,
                                              0.0, NULL));
  return d;
}

static HurrayDescriptor *optional_fields(void) {
  /* Statistics, shard, extension type and a non-default device together. */
  HurrayDescriptor *d = make(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){2, 4});
  OK(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 32, 256, HURRAY_SYNC_EVENT, NULL, NULL));
  OK(hurray_descriptor_set_device(d, HURRAY_DEVICE_CUDA, 1, HURRAY_MEMORY_DEVICE, NULL));
  hurray_descriptor_set_stat_min(d, -1.5);
  hurray_descriptor_set_stat_max(d, 3.25);
  hurray_descriptor_set_stat_nan_count(d, 0);
  hurray_descriptor_set_stat_zero_count(d, 2);
  OK(hurray_descriptor_set_shard(d, 2, (uint64_t[]){8, 4}, (uint64_t[]){6, 0}, NULL));
  static const uint8_t meta[] = {'{', '"', 'u', 'n', 'i', 't', '"', ':', '"', 'K', '"', '}'};
  OK(hurray_descriptor_set_extension(d, "example.temperature", meta, sizeof meta, NULL));
  return d;
}

const GoldenVector golden_vectors[] = {
    {"dense_float32", dense_float32},
    {"dense_scalar_bool", dense_scalar_bool},
    {"dense_strided", dense_strided},
    {"dense_int4", dense_int4},
    {"dense_float6", dense_float6},
    {"sparse_coo", sparse_coo},
    {"sparse_csr", sparse_csr},
    {"sparse_csc", sparse_csc},
    {"sparse_bsr", sparse_bsr},
    {"paged_kv_cache", paged_kv_cache},
    {"composite_lora", composite_lora},
    {"quant_per_tensor_affine", quant_per_tensor_affine},
    {"quant_per_channel_affine", quant_per_channel_affine},
    {"quant_block_affine_q8_0", quant_block_affine_q8_0},
    {"quant_block_affine_q4_0", quant_block_affine_q4_0},
    {"quant_block_affine_zero_points", quant_block_affine_zero_points},
    {"quant_nf4", quant_nf4},
    {"quant_mxfp8_e4m3", quant_mxfp8_e4m3},
    {"quant_mxfp8_e5m2", quant_mxfp8_e5m2},
    {"quant_mxfp6_e3m2", quant_mxfp6_e3m2},
    {"quant_mxfp6_e2m3", quant_mxfp6_e2m3},
    {"quant_mxfp4_e2m1", quant_mxfp4_e2m1},
    {"quant_mxint8", quant_mxint8},
    {"quant_block_coded_q4_k", quant_block_coded_q4_k},
    {"quant_block_coded_iq2_xxs", quant_block_coded_iq2_xxs},
    {"optional_fields", optional_fields},
    {"quant_gptq", quant_gptq},
    {"quant_awq", quant_awq},
    {"quant_fp8_block", quant_fp8_block},
    {"quant_bnb_double", quant_bnb_double},
    {"quant_nvfp4", quant_nvfp4},
};

const size_t golden_vector_count = sizeof golden_vectors / sizeof golden_vectors[0];

void golden_vector_put_index(uint8_t *base, HurrayDType dtype, uint64_t i, uint64_t v) {
  size_t width = dtype == HURRAY_DTYPE_INT64 ? 8 : 4;
  for (size_t k = 0; k < width; k++) base[i * width + k] = (uint8_t)(v >> (8 * k));
}

void golden_vector_fill_indices(const HurrayDescriptor *d, uint8_t *const *buffers) {
  HurrayDType index_dtype = hurray_descriptor_index_dtype(d);
  const uint64_t *shape = hurray_descriptor_shape(d);
  if (hurray_descriptor_dtype(d) == HURRAY_DTYPE_BOOL &&
      hurray_descriptor_quant_kind(d) == HURRAY_QUANT_NONE &&
      hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_COMPOSITE) {
    uint32_t data = hurray_descriptor_data_buffer(d);
    for (uint64_t k = 0; k < hurray_descriptor_buffer_size(d, data); k++) buffers[data][k] &= 1;
  }
  if (hurray_descriptor_layout_kind(d) == HURRAY_LAYOUT_PAGED) {
    uint32_t table = hurray_descriptor_paged_table_buffer(d);
    memset(buffers[table], 0, hurray_descriptor_buffer_size(d, table));
    return;
  }
  uint32_t gidx = hurray_descriptor_quant_group_index_buffer(d);
  if (gidx != HURRAY_NO_BUFFER) {
    /* group of position p: p / block_size, so that dequantize succeeds */
    uint64_t block = hurray_descriptor_quant_block_size(d);
    uint64_t n = shape[hurray_descriptor_quant_axis(d)];
    for (uint64_t p = 0; p < n; p++)
      golden_vector_put_index(buffers[gidx], HURRAY_DTYPE_INT32, p, p / block);
  }
  if (hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_SPARSE) return;
  uint64_t nnz = hurray_descriptor_sparse_nnz(d);
  HurraySparseFormat format = hurray_descriptor_sparse_format(d);
  if (format == HURRAY_SPARSE_COO) {
    uint32_t rank = hurray_descriptor_rank(d);
    for (uint64_t k = 0; k < nnz; k++) {
      uint64_t rest = k;
      for (uint32_t dim = rank; dim-- > 0;) {
        golden_vector_put_index(buffers[hurray_descriptor_sparse_coo_index_buffer(d, dim)],
                                index_dtype, k, rest % shape[dim]);
        rest /= shape[dim];
      }
    }
    return;
  }
  bool csc = format == HURRAY_SPARSE_CSC;
  uint64_t major = csc ? shape[1] : shape[0], minor = csc ? shape[0] : shape[1];
  if (format == HURRAY_SPARSE_BSR) {
    major /= hurray_descriptor_sparse_block_rows(d);
    minor /= hurray_descriptor_sparse_block_cols(d);
  }
  uint8_t *indptr = buffers[hurray_descriptor_sparse_indptr_buffer(d)];
  uint8_t *indices = buffers[hurray_descriptor_sparse_indices_buffer(d)];
  for (uint64_t r = 0; r <= major; r++) {
    uint64_t start = r * nnz / major, end = (r + 1) * nnz / major;
    golden_vector_put_index(indptr, index_dtype, r, start);
    for (uint64_t k = start; r < major && k < end; k++) {
      golden_vector_put_index(indices, index_dtype, k, (k - start) % minor);
    }
  }
}

HurrayDescriptor *golden_vector_build(const char *name) {
  for (size_t i = 0; i < golden_vector_count; i++) {
    if (strcmp(golden_vectors[i].name, name) == 0) {
      return golden_vectors[i].build();
    }
  }
  fprintf(stderr, "no golden vector %s\n", name);
  abort();
}
