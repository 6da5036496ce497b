/*
 * hurray/descriptor.h - the tensor descriptor: model, builder, accessors,
 * binary codec and validation.
 *
 * A tensor is one descriptor plus an ordered list of N buffers. The
 * descriptor says what the bytes mean (dtype, shape, layout, quantization)
 * and carries a buffer table: entry i describes buffer i of the list that
 * travels with it (role, byte_size, alignment, sync_mode). Every buffer index
 * anywhere in the descriptor indexes that table.
 *
 * HurrayDescriptor is opaque. It is built with the setters below and read
 * with the accessors, so its layout can change without breaking the ABI.
 *
 * Ownership: hurray_descriptor_create / _decode / _clone give the caller a
 * descriptor that it frees with hurray_descriptor_destroy. Accessors that
 * return pointers (names, metadata, members) return views borrowed from the
 * descriptor, valid until it is destroyed or modified. Setters copy what they
 * are given, except hurray_descriptor_add_member, which takes ownership.
 *
 * Setters check their arguments in isolation (enum ranges, NULL pointers,
 * hard limits). Whether the whole is consistent is decided by
 * hurray_descriptor_validate, which applies the same rules to a built and to a
 * decoded descriptor. A descriptor is not thread-safe for modification;
 * concurrent reads are fine.
 */
#ifndef HURRAY_DESCRIPTOR_H
#define HURRAY_DESCRIPTOR_H

#include <stdbool.h>

#include "hurray/common.h"
#include "hurray/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HurrayDescriptor HurrayDescriptor;

/* ------------------------------------------------------------------ enums */

typedef enum HurrayLayoutKind {
  HURRAY_LAYOUT_DENSE = 1,
  HURRAY_LAYOUT_SPARSE = 2,
  HURRAY_LAYOUT_PAGED = 3,
  HURRAY_LAYOUT_COMPOSITE = 4
} HurrayLayoutKind;

typedef enum HurraySparseFormat {
  HURRAY_SPARSE_COO = 1,
  HURRAY_SPARSE_CSR = 2,
  HURRAY_SPARSE_CSC = 3,
  HURRAY_SPARSE_BSR = 4
} HurraySparseFormat;

typedef enum HurrayQuantKind {
  HURRAY_QUANT_NONE = 0,
  HURRAY_QUANT_PER_TENSOR_AFFINE = 1,
  HURRAY_QUANT_PER_CHANNEL_AFFINE = 2,
  HURRAY_QUANT_BLOCK_AFFINE = 3,
  HURRAY_QUANT_NF4 = 4,
  HURRAY_QUANT_MX = 5,
  HURRAY_QUANT_BLOCK_CODED = 6
} HurrayQuantKind;

/* Block formats of HURRAY_QUANT_BLOCK_CODED: a block of `elements` values
 * is coded in `bytes` bytes whose layout and decode rule
 * docs/spec/quantization.md ("Block-coded formats") defines exactly. The
 * numbers are ggml's type numbers, so a GGUF type maps 1:1. */
typedef enum HurrayBlockFormat {
  HURRAY_BLOCK_GGML_Q4_1 = 3,
  HURRAY_BLOCK_GGML_Q5_0 = 6,
  HURRAY_BLOCK_GGML_Q5_1 = 7,
  HURRAY_BLOCK_GGML_Q2_K = 10,
  HURRAY_BLOCK_GGML_Q3_K = 11,
  HURRAY_BLOCK_GGML_Q4_K = 12,
  HURRAY_BLOCK_GGML_Q5_K = 13,
  HURRAY_BLOCK_GGML_Q6_K = 14,
  HURRAY_BLOCK_GGML_Q8_K = 15,
  HURRAY_BLOCK_GGML_IQ2_XXS = 16,
  HURRAY_BLOCK_GGML_IQ2_XS = 17,
  HURRAY_BLOCK_GGML_IQ3_XXS = 18,
  HURRAY_BLOCK_GGML_IQ1_S = 19,
  HURRAY_BLOCK_GGML_IQ4_NL = 20,
  HURRAY_BLOCK_GGML_IQ3_S = 21,
  HURRAY_BLOCK_GGML_IQ2_S = 22,
  HURRAY_BLOCK_GGML_IQ4_XS = 23,
  HURRAY_BLOCK_GGML_IQ1_M = 29,
  HURRAY_BLOCK_GGML_TQ1_0 = 34,
  HURRAY_BLOCK_GGML_TQ2_0 = 35,
  HURRAY_BLOCK_GGML_MXFP4 = 39,
  HURRAY_BLOCK_GGML_NVFP4 = 40
} HurrayBlockFormat;

/* Elements and bytes per block of `format`, and its name ("ggml_q4_k").
 * Returns false (leaving the outputs alone) for an unknown format. Any
 * pointer may be NULL. */
HURRAY_API bool hurray_block_format_info(uint32_t format, uint32_t *elements, uint32_t *bytes,
                                         const char **name);
/* The format called `name`; 0 when there is none. */
HURRAY_API uint32_t hurray_block_format_from_name(const char *name);

/* OCP MX v1.0 element types. The descriptor dtype must be the matching
 * storage type: float8_e4m3fn, float8_e5m2, float6_e3m2fn, float6_e2m3fn,
 * float4_e2m1fn, int8. */
typedef enum HurrayMxElement {
  HURRAY_MX_FP8_E4M3 = 1,
  HURRAY_MX_FP8_E5M2 = 2,
  HURRAY_MX_FP6_E3M2 = 3,
  HURRAY_MX_FP6_E2M3 = 4,
  HURRAY_MX_FP4_E2M1 = 5,
  HURRAY_MX_INT8 = 6
} HurrayMxElement;

#define HURRAY_MX_BLOCK_SIZE 32u

/* What a buffer holds; each use in a descriptor requires one role. */
typedef enum HurrayBufferRole {
  HURRAY_ROLE_DATA = 1,   /* dense elements */
  HURRAY_ROLE_SCALES = 2, /* quantization scales (also NF4 absmax, MX E8M0) */
  HURRAY_ROLE_ZERO_POINTS = 3,
  HURRAY_ROLE_VALUES = 4,  /* sparse stored values */
  HURRAY_ROLE_INDICES = 5, /* sparse coordinates / column or row indices */
  HURRAY_ROLE_INDPTR = 6,  /* sparse compressed pointers */
  HURRAY_ROLE_PAGE_POOL = 7,
  HURRAY_ROLE_PAGE_TABLE = 8,
  HURRAY_ROLE_GROUP_INDEX = 9,  /* quantization group of each position (GPTQ g_idx) */
  HURRAY_ROLE_CODEBOOK = 10,    /* float32 value table of codes or of scale codes */
  HURRAY_ROLE_SUPER_SCALES = 11 /* scales of the scales (two-level scales) */
} HurrayBufferRole;

/* How super scales combine with the scales they cover. */
typedef enum HurraySuperScaleOp {
  HURRAY_SUPER_MULTIPLY = 1, /* scale * super */
  HURRAY_SUPER_DIVIDE = 2    /* scale / super */
} HurraySuperScaleOp;

/* Who waits on what before touching a buffer (docs/spec/buffer-protocol.md). */
typedef enum HurraySyncMode {
  HURRAY_SYNC_READY = 0,  /* contents complete; nobody waits */
  HURRAY_SYNC_STREAM = 1, /* consumer hands its stream to the producer (DLPack rule) */
  HURRAY_SYNC_EVENT = 2   /* consumer waits on the producer's event (Arrow device rule) */
} HurraySyncMode;

typedef enum HurrayMemoryClass {
  HURRAY_MEMORY_HOST = 1,        /* pageable host memory */
  HURRAY_MEMORY_HOST_PINNED = 2, /* page-locked host memory, device-visible */
  HURRAY_MEMORY_DEVICE = 3,      /* device memory, not host-addressable */
  HURRAY_MEMORY_MANAGED = 4      /* unified memory, addressable from both */
} HurrayMemoryClass;

/* Device types use DLPack's DLDeviceType numbers so they convert 1:1. */
typedef enum HurrayDeviceType {
  HURRAY_DEVICE_CPU = 1,
  HURRAY_DEVICE_CUDA = 2,
  HURRAY_DEVICE_CUDA_HOST = 3,
  HURRAY_DEVICE_OPENCL = 4,
  HURRAY_DEVICE_VULKAN = 7,
  HURRAY_DEVICE_METAL = 8,
  HURRAY_DEVICE_VPI = 9,
  HURRAY_DEVICE_ROCM = 10,
  HURRAY_DEVICE_ROCM_HOST = 11,
  HURRAY_DEVICE_CUDA_MANAGED = 13,
  HURRAY_DEVICE_ONEAPI = 14
} HurrayDeviceType;

/* --------------------------------------------------------- create/destroy */

/* Creates a dense descriptor of `dtype` and `shape` (`rank` entries; shape
 * may be NULL when rank is 0) with no buffers yet, no quantization, device
 * CPU:0 and memory class HOST. The layout starts as dense over buffer 0,
 * which the caller still has to add with hurray_descriptor_add_buffer.
 * On success *out is owned by the caller. */
HURRAY_API HurrayStatus hurray_descriptor_create(HurrayDType dtype, uint32_t rank,
                                                 const uint64_t *shape, HurrayDescriptor **out,
                                                 HurrayError *error);

/* Deep copy; *out is owned by the caller. */
HURRAY_API HurrayStatus hurray_descriptor_clone(const HurrayDescriptor *src,
                                                HurrayDescriptor **out, HurrayError *error);

/* Frees the descriptor and everything it owns, members included. NULL is a
 * no-op. */
HURRAY_API void hurray_descriptor_destroy(HurrayDescriptor *descriptor);

/* True when both have the same canonical encoding. Explicit row-major
 * strides and absent strides encode differently, so they compare unequal. */
HURRAY_API bool hurray_descriptor_equal(const HurrayDescriptor *a, const HurrayDescriptor *b);

/* ---------------------------------------------------- element view fields */

/* Element strides, `rank` signed entries counted in elements (not bytes),
 * for dense layouts of byte-sized dtypes. NULL clears them (row-major). */
HURRAY_API HurrayStatus hurray_descriptor_set_strides(HurrayDescriptor *d, const int64_t *strides,
                                                      HurrayError *error);
/* Byte offset of element 0 within the data buffer (dense), the values
 * buffer (sparse) or the pool (paged). A composite has none. */
HURRAY_API void hurray_descriptor_set_byte_offset(HurrayDescriptor *d, uint64_t byte_offset);

HURRAY_API HurrayDType hurray_descriptor_dtype(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_rank(const HurrayDescriptor *d);
/* Borrowed array of `rank` dims; NULL when rank is 0. */
HURRAY_API const uint64_t *hurray_descriptor_shape(const HurrayDescriptor *d);
/* Borrowed array of `rank` strides, or NULL when the tensor is row-major. */
HURRAY_API const int64_t *hurray_descriptor_strides(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_byte_offset(const HurrayDescriptor *d);
/* Product of the shape; HURRAY_ERR_OVERFLOW if it does not fit. */
HURRAY_API HurrayStatus hurray_descriptor_numel(const HurrayDescriptor *d, uint64_t *out,
                                                HurrayError *error);

/* ------------------------------------------------------------ buffer table */

/* Appends an entry to the buffer table; its index is written to *index_out
 * (may be NULL). `alignment` is the required pointer alignment in bytes
 * (a power of two up to HURRAY_MAX_ALIGNMENT). */
HURRAY_API HurrayStatus hurray_descriptor_add_buffer(HurrayDescriptor *d, HurrayBufferRole role,
                                                     uint64_t byte_size, uint32_t alignment,
                                                     HurraySyncMode sync_mode, uint32_t *index_out,
                                                     HurrayError *error);
/* Changes the declared byte_size of an existing entry (e.g. once a writer
 * knows it). */
HURRAY_API HurrayStatus hurray_descriptor_set_buffer_size(HurrayDescriptor *d, uint32_t index,
                                                          uint64_t byte_size, HurrayError *error);
HURRAY_API uint32_t hurray_descriptor_buffer_count(const HurrayDescriptor *d);
/* Accessors for entry `index`; out-of-range indices return 0. */
HURRAY_API HurrayBufferRole hurray_descriptor_buffer_role(const HurrayDescriptor *d,
                                                          uint32_t index);
HURRAY_API uint64_t hurray_descriptor_buffer_size(const HurrayDescriptor *d, uint32_t index);
HURRAY_API uint32_t hurray_descriptor_buffer_alignment(const HurrayDescriptor *d, uint32_t index);
HURRAY_API HurraySyncMode hurray_descriptor_buffer_sync_mode(const HurrayDescriptor *d,
                                                             uint32_t index);

/* Every buffer of one descriptor lives on this device and memory class
 * (device colocation, docs/spec/buffer-protocol.md). */
HURRAY_API HurrayStatus hurray_descriptor_set_device(HurrayDescriptor *d, int32_t device_type,
                                                     int32_t device_id,
                                                     HurrayMemoryClass memory_class,
                                                     HurrayError *error);
HURRAY_API int32_t hurray_descriptor_device_type(const HurrayDescriptor *d);
HURRAY_API int32_t hurray_descriptor_device_id(const HurrayDescriptor *d);
HURRAY_API HurrayMemoryClass hurray_descriptor_memory_class(const HurrayDescriptor *d);

/* ------------------------------------------------------------------ layout */

/* Dense: elements in buffer `data_buffer` (role DATA), at byte_offset, with
 * optional strides. */
HURRAY_API HurrayStatus hurray_descriptor_set_layout_dense(HurrayDescriptor *d,
                                                           uint32_t data_buffer,
                                                           HurrayError *error);

/* COO: `nnz` values (role VALUES) plus one index buffer per dimension
 * (`index_buffers` has `rank` entries, role INDICES, nnz entries each).
 * `canonical` promises sorted, duplicate-free coordinates. */
HURRAY_API HurrayStatus hurray_descriptor_set_layout_coo(HurrayDescriptor *d,
                                                         HurrayDType index_dtype, uint64_t nnz,
                                                         uint32_t values_buffer,
                                                         const uint32_t *index_buffers,
                                                         bool canonical, HurrayError *error);

/* CSR or CSC over a rank-2 tensor: indptr (role INDPTR, rows+1 or cols+1
 * entries), indices (role INDICES, nnz entries), values (role VALUES). */
HURRAY_API HurrayStatus hurray_descriptor_set_layout_compressed(
    HurrayDescriptor *d, HurraySparseFormat format, HurrayDType index_dtype, uint64_t nnz,
    uint32_t values_buffer, uint32_t indptr_buffer, uint32_t indices_buffer, HurrayError *error);

/* BSR over a rank-2 tensor in blocks of block_rows x block_cols. `nnz` counts
 * stored blocks; values hold nnz * block_rows * block_cols elements,
 * indptr shape[0]/block_rows + 1 entries, indices nnz entries. */
HURRAY_API HurrayStatus hurray_descriptor_set_layout_bsr(
    HurrayDescriptor *d, HurrayDType index_dtype, uint64_t nnz, uint64_t block_rows,
    uint64_t block_cols, uint32_t values_buffer, uint32_t indptr_buffer, uint32_t indices_buffer,
    HurrayError *error);

/* Block-paged: the logical tensor is cut along `axis` into pages of
 * `page_size` positions. Each page holds page_size * prod(shape[axis+1:])
 * elements, contiguous, in a pool of `num_pages` pages (role PAGE_POOL).
 * The page table (role PAGE_TABLE, int32 or int64) has one row per index
 * of the dims before `axis` and ceil(shape[axis] / page_size) columns; each
 * entry names the pool page holding that logical block. This is the layout
 * of a paged KV cache: axis 1 of [sequences, tokens, heads, head_dim]. */
HURRAY_API HurrayStatus hurray_descriptor_set_layout_paged(
    HurrayDescriptor *d, uint32_t axis, uint64_t page_size, uint64_t num_pages,
    HurrayDType table_dtype, uint32_t pool_buffer, uint32_t table_buffer, HurrayError *error);

/* Composite: the tensor is made of named members. Switching to composite
 * clears any previous layout; members are then added one by one. */
HURRAY_API HurrayStatus hurray_descriptor_set_layout_composite(HurrayDescriptor *d,
                                                               HurrayError *error);
/* Adds a member. `member` is a descriptor whose buffer indices point into
 * the parent's table; it must have no buffer table, device, statistics,
 * shard or extension of its own. Ownership of `member` passes to `d` in
 * every case (on failure it is destroyed), with one exception: a member
 * that is `d` itself or contains `d` is refused with
 * HURRAY_ERR_INVALID_ARGUMENT and left untouched, since destroying it would
 * destroy `d`. */
HURRAY_API HurrayStatus hurray_descriptor_add_member(HurrayDescriptor *d, const char *name,
                                                     HurrayDescriptor *member, HurrayError *error);

HURRAY_API HurrayLayoutKind hurray_descriptor_layout_kind(const HurrayDescriptor *d);
/* Dense data buffer, sparse values buffer or paged pool buffer. */
HURRAY_API uint32_t hurray_descriptor_data_buffer(const HurrayDescriptor *d);
HURRAY_API HurraySparseFormat hurray_descriptor_sparse_format(const HurrayDescriptor *d);
/* Index dtype of sparse indices or of the page table. */
HURRAY_API HurrayDType hurray_descriptor_index_dtype(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_sparse_nnz(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_sparse_indptr_buffer(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_sparse_indices_buffer(const HurrayDescriptor *d);
/* COO index buffer of dimension `dim`; HURRAY_NO_BUFFER when not COO. */
HURRAY_API uint32_t hurray_descriptor_sparse_coo_index_buffer(const HurrayDescriptor *d,
                                                              uint32_t dim);
HURRAY_API bool hurray_descriptor_sparse_canonical(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_sparse_block_rows(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_sparse_block_cols(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_paged_axis(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_paged_page_size(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_paged_num_pages(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_paged_table_buffer(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_member_count(const HurrayDescriptor *d);
/* Borrowed name / member; NULL when out of range. */
HURRAY_API const char *hurray_descriptor_member_name(const HurrayDescriptor *d, uint32_t index);
HURRAY_API const HurrayDescriptor *hurray_descriptor_member(const HurrayDescriptor *d,
                                                            uint32_t index);
/* Index of the member called `name`; HURRAY_ERR_NOT_FOUND when there is
 * none (or `d` is not composite). */
HURRAY_API HurrayStatus hurray_descriptor_find_member(const HurrayDescriptor *d, const char *name,
                                                      uint32_t *index_out, HurrayError *error);

/* ------------------------------------------------------------ quantization */

/* Each set_quant_* replaces the previous quantization. The descriptor dtype
 * is the storage dtype of the codes. */
HURRAY_API void hurray_descriptor_set_quant_none(HurrayDescriptor *d);
/* value = (code - zero_point) * scale, with both stored inline. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_per_tensor_affine(HurrayDescriptor *d,
                                                                      double scale,
                                                                      int64_t zero_point,
                                                                      HurrayError *error);
/* One scale per index along `axis` (shape[axis] scales, role SCALES). The
 * zero point is 0 until hurray_descriptor_set_quant_zero_point(_buffer). */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_per_channel_affine(HurrayDescriptor *d,
                                                                       uint32_t axis,
                                                                       uint32_t scale_buffer,
                                                                       HurrayDType scale_dtype,
                                                                       HurrayError *error);
/* One scale per block of `block_size` consecutive elements along `axis`:
 * the scale tensor has the data's shape with shape[axis] replaced by
 * ceil(shape[axis] / block_size), row-major (ONNX blocked quantization).
 * GGUF Q8_0 is int8 codes, axis = last, block 32, float16 scales; Q4_0 is
 * uint4 codes with an inline zero point of 8. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_block_affine(
    HurrayDescriptor *d, uint32_t axis, uint64_t block_size, uint32_t scale_buffer,
    HurrayDType scale_dtype, HurrayError *error);
/* For per-channel and block affine: zero points from a buffer shaped like
 * the scales (role ZERO_POINTS, integer dtype) ... */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_zero_point_buffer(HurrayDescriptor *d,
                                                                      uint32_t zero_point_buffer,
                                                                      HurrayDType zero_point_dtype,
                                                                      HurrayError *error);
/* ... or one inline zero point shared by every channel or block (this also
 * sets the per-tensor zero point). Setting it clears a zero-point buffer. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_zero_point(HurrayDescriptor *d,
                                                               int64_t zero_point,
                                                               HurrayError *error);
/* NF4 codes (dtype uint4) in flat row-major blocks of `block_size`, one
 * absmax per block: ceil(numel / block_size) scales, role SCALES. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_nf4(HurrayDescriptor *d, uint64_t block_size,
                                                        uint32_t absmax_buffer,
                                                        HurrayDType absmax_dtype,
                                                        HurrayError *error);
/* MX: blocks of 32 along `axis`, one float8_e8m0fnu scale per block, laid
 * out like block-affine scales. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_mx(HurrayDescriptor *d,
                                                       HurrayMxElement element, uint32_t axis,
                                                       uint32_t scale_buffer, HurrayError *error);

/* Block-coded: the data buffer (role DATA, descriptor dtype uint8) holds
 * the tensor's blocks of `format`, row-major, each block covering
 * consecutive elements along `axis`, which must be the last one, and whose
 * length must be a whole number of blocks. The blocks carry their own
 * scales; there is no scale buffer. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_block_coded(HurrayDescriptor *d,
                                                                HurrayBlockFormat format,
                                                                uint32_t axis, HurrayError *error);

/* ---- packed and two-level quantization (ADR-0024, quantization.md §5.6)
 *
 * Fields of per-channel affine, block affine and NF4 quantization (some of
 * one kind only, see docs/spec/descriptor-encoding.md). Every set_quant_*
 * call above resets them to their defaults, so these setters come after it;
 * on any other kind they fail with HURRAY_ERR_STATE. The setters check
 * their arguments in isolation; hurray_descriptor_validate the whole. The
 * storage-axes and packing setters allocate the first time one of them
 * sets a value, and can fail with HURRAY_ERR_NO_MEMORY, leaving d as it
 * was. */

/* The codes, scales and zero points are stored with their dims permuted:
 * storage dim k is logical dim axes[k] (`rank` entries, each < rank, a
 * permutation). NULL clears it (storage order = logical order). */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_storage_axes(HurrayDescriptor *d,
                                                                 const uint32_t *axes,
                                                                 HurrayError *error);
/* The data buffer holds the codes in little-endian words of `word_bits`
 * (8, 16 or 32; 0 clears the packing), lanes = word_bits / bits(dtype)
 * codes per word, consecutive along storage axis `axis`: lane j (bits
 * [j*bits, (j+1)*bits)) holds element order[j] of its group. `order` has
 * `lanes` entries, a permutation of 0..lanes-1; NULL is the identity. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_code_packing(HurrayDescriptor *d,
                                                                 uint32_t word_bits, uint32_t axis,
                                                                 const uint8_t *order,
                                                                 HurrayError *error);
/* The same for the zero-point buffer, with lanes = word_bits /
 * bits(zero_point_dtype): set the zero-point buffer first. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_zero_point_packing(HurrayDescriptor *d,
                                                                       uint32_t word_bits,
                                                                       uint32_t axis,
                                                                       const uint8_t *order,
                                                                       HurrayError *error);
/* Added to every zero point, inline or stored (GPTQ v1 stores zero - 1). */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_zero_point_offset(HurrayDescriptor *d,
                                                                      int64_t offset,
                                                                      HurrayError *error);
/* Block affine: a second blocked axis, for 2-D block scales (FP8 128x128).
 * block_size2 0 clears it. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_block2(HurrayDescriptor *d, uint32_t axis2,
                                                           uint64_t block_size2,
                                                           HurrayError *error);
/* Block affine: buffer (role GROUP_INDEX, dtype int32, shape[axis] entries)
 * naming the scale group of each position along `axis` (GPTQ g_idx),
 * instead of position / block_size. HURRAY_NO_BUFFER clears it. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_group_index(HurrayDescriptor *d,
                                                                uint32_t buffer, HurrayDType dtype,
                                                                HurrayError *error);
/* Buffer (role CODEBOOK, float32, 2^bits(dtype) entries) giving the value
 * of each code: value = codebook[code] * scale, no zero point. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_codebook(HurrayDescriptor *d, uint32_t buffer,
                                                             HurrayError *error);
/* Buffer (role CODEBOOK, float32, 256 entries) giving the value of each
 * uint8 scale code (bitsandbytes double quantization). */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_scale_codebook(HurrayDescriptor *d,
                                                                   uint32_t buffer,
                                                                   HurrayError *error);
/* Two-level scales: buffer (role SUPER_SCALES, float32/float16/bfloat16)
 * with one super scale per `super_block_size` scales in flat storage
 * order (0: one for the whole tensor), combined by `op`; then
 * `scale_offset` is added to every scale (0: none). buffer
 * HURRAY_NO_BUFFER clears the super scales (dtype, size and op ignored)
 * but still sets scale_offset. */
HURRAY_API HurrayStatus hurray_descriptor_set_quant_super_scales(
    HurrayDescriptor *d, uint32_t buffer, HurrayDType dtype, uint64_t super_block_size,
    HurraySuperScaleOp op, double scale_offset, HurrayError *error);

/* Borrowed array of `rank` storage axes; NULL when storage order is logical. */
HURRAY_API const uint8_t *hurray_descriptor_quant_storage_axes(const HurrayDescriptor *d);
/* Returns the lane count (0 when not packed); each out pointer may be NULL.
 * *order is borrowed, `lanes` entries. */
HURRAY_API uint32_t hurray_descriptor_quant_code_packing(const HurrayDescriptor *d,
                                                         uint32_t *word_bits, uint32_t *axis,
                                                         const uint8_t **order);
HURRAY_API uint32_t hurray_descriptor_quant_zero_point_packing(const HurrayDescriptor *d,
                                                               uint32_t *word_bits, uint32_t *axis,
                                                               const uint8_t **order);
HURRAY_API int64_t hurray_descriptor_quant_zero_point_offset(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_axis2(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_quant_block_size2(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_group_index_buffer(const HurrayDescriptor *d);
HURRAY_API HurrayDType hurray_descriptor_quant_group_index_dtype(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_codebook_buffer(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_scale_codebook_buffer(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_super_scale_buffer(const HurrayDescriptor *d);
HURRAY_API HurrayDType hurray_descriptor_quant_super_scale_dtype(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_quant_super_block_size(const HurrayDescriptor *d);
/* 0 when there are no super scales. */
HURRAY_API HurraySuperScaleOp hurray_descriptor_quant_super_op(const HurrayDescriptor *d);
HURRAY_API double hurray_descriptor_quant_scale_offset(const HurrayDescriptor *d);

HURRAY_API HurrayQuantKind hurray_descriptor_quant_kind(const HurrayDescriptor *d);
/* The block format of a block-coded tensor; 0 otherwise. */
HURRAY_API HurrayBlockFormat hurray_descriptor_quant_block_format(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_axis(const HurrayDescriptor *d);
HURRAY_API uint64_t hurray_descriptor_quant_block_size(const HurrayDescriptor *d);
HURRAY_API double hurray_descriptor_quant_scale(const HurrayDescriptor *d);
HURRAY_API int64_t hurray_descriptor_quant_zero_point(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_scale_buffer(const HurrayDescriptor *d);
HURRAY_API HurrayDType hurray_descriptor_quant_scale_dtype(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_quant_zero_point_buffer(const HurrayDescriptor *d);
HURRAY_API HurrayDType hurray_descriptor_quant_zero_point_dtype(const HurrayDescriptor *d);
HURRAY_API HurrayMxElement hurray_descriptor_quant_mx_element(const HurrayDescriptor *d);
/* Number of scales the quantization needs (0 for none and per-tensor). */
HURRAY_API HurrayStatus hurray_descriptor_quant_scale_count(const HurrayDescriptor *d,
                                                            uint64_t *out, HurrayError *error);

/* -------------------------------------------------------------- statistics */

/* Each statistic is optional and independent. zero_count counts elements
 * equal to zero; for sparse tensors unstored elements count, so
 * zero_count >= numel - nnz. Statistics describe the stored codes of a
 * quantized tensor, and are advisory: nothing trusts them. */
HURRAY_API void hurray_descriptor_set_stat_min(HurrayDescriptor *d, double min);
HURRAY_API void hurray_descriptor_set_stat_max(HurrayDescriptor *d, double max);
HURRAY_API void hurray_descriptor_set_stat_nan_count(HurrayDescriptor *d, uint64_t nan_count);
HURRAY_API void hurray_descriptor_set_stat_zero_count(HurrayDescriptor *d, uint64_t zero_count);
HURRAY_API void hurray_descriptor_clear_statistics(HurrayDescriptor *d);
/* Each returns false (leaving *out alone) when the statistic is absent. */
HURRAY_API bool hurray_descriptor_stat_min(const HurrayDescriptor *d, double *out);
HURRAY_API bool hurray_descriptor_stat_max(const HurrayDescriptor *d, double *out);
HURRAY_API bool hurray_descriptor_stat_nan_count(const HurrayDescriptor *d, uint64_t *out);
HURRAY_API bool hurray_descriptor_stat_zero_count(const HurrayDescriptor *d, uint64_t *out);

/* ------------------------------------------------------------------- shard */

/* This tensor is the block [offsets, offsets + shape) of a global tensor of
 * `global_shape`; both arrays have `rank` entries, equal to the tensor rank. */
HURRAY_API HurrayStatus hurray_descriptor_set_shard(HurrayDescriptor *d, uint32_t rank,
                                                    const uint64_t *global_shape,
                                                    const uint64_t *offsets, HurrayError *error);
HURRAY_API void hurray_descriptor_clear_shard(HurrayDescriptor *d);
HURRAY_API bool hurray_descriptor_has_shard(const HurrayDescriptor *d);
HURRAY_API uint32_t hurray_descriptor_shard_rank(const HurrayDescriptor *d);
/* Borrowed arrays of shard_rank entries; NULL when there is no shard. */
HURRAY_API const uint64_t *hurray_descriptor_shard_global_shape(const HurrayDescriptor *d);
HURRAY_API const uint64_t *hurray_descriptor_shard_offsets(const HurrayDescriptor *d);

/* ---------------------------------------------------------- extension type */

/* A named extension type (UTF-8 name) plus opaque metadata, copied and kept
 * byte-for-byte. `metadata` may be NULL when metadata_len is 0. */
HURRAY_API HurrayStatus hurray_descriptor_set_extension(HurrayDescriptor *d, const char *name,
                                                        const uint8_t *metadata,
                                                        size_t metadata_len, HurrayError *error);
HURRAY_API void hurray_descriptor_clear_extension(HurrayDescriptor *d);
/* Borrowed; NULL when there is no extension type. */
HURRAY_API const char *hurray_descriptor_extension_name(const HurrayDescriptor *d);
HURRAY_API const uint8_t *hurray_descriptor_extension_metadata(const HurrayDescriptor *d,
                                                               size_t *len_out);

/* --------------------------------------------------------------- validation */

/* Checks that the descriptor is consistent on its own (every rule in
 * docs/spec/descriptor-encoding.md, "Validation"). Returns the first
 * violation's code; the message names the offending field. */
HURRAY_API HurrayStatus hurray_descriptor_validate(const HurrayDescriptor *d, HurrayError *error);

/* Minimum bytes that buffer `index` must hold for the contents the
 * descriptor places there (0 if nothing refers to it). Requires a valid
 * descriptor. */
HURRAY_API HurrayStatus hurray_descriptor_buffer_required_bytes(const HurrayDescriptor *d,
                                                                uint32_t index, uint64_t *out,
                                                                HurrayError *error);

/* -------------------------------------------------------------------- codec */

/* Encodes the descriptor into a new allocation (*out, *out_len) that the
 * caller frees with hurray_free. The encoding is deterministic: equal
 * descriptors give identical bytes. Encoding does not validate; call
 * hurray_descriptor_validate first if the descriptor is untrusted. */
HURRAY_API HurrayStatus hurray_descriptor_encode(const HurrayDescriptor *d, uint8_t **out,
                                                 size_t *out_len, HurrayError *error);

/* Decodes `len` bytes into a new descriptor owned by the caller. The bytes
 * are untrusted: any input gives either a descriptor or an error, never
 * undefined behaviour. Decoding checks the encoding and the hard limits but
 * not consistency; call hurray_descriptor_validate on the result.
 * HURRAY_ERR_UNSUPPORTED means a newer version or an unknown required field. */
HURRAY_API HurrayStatus hurray_descriptor_decode(const uint8_t *bytes, size_t len,
                                                 HurrayDescriptor **out, HurrayError *error);

/* Writes a human-readable JSON rendering (the form of tests/vectors/NAME.json)
 * into a new NUL-terminated allocation freed with hurray_free. */
HURRAY_API HurrayStatus hurray_descriptor_to_json(const HurrayDescriptor *d, char **out,
                                                  HurrayError *error);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_DESCRIPTOR_H */
