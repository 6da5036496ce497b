/*
 * hurray/buffer.h - the in-process buffer ABI (version HURRAY_C_ABI_VERSION).
 *
 * A HurrayBuffer is one allocation: a pointer, its byte_size, alignment,
 * sync_mode, device and memory class, and one release callback. A
 * HurrayBufferList is the ordered list of a tensor's buffers; element i is
 * entry i of the descriptor's buffer table. The Python capsule carries a
 * HurrayBufferList* (docs/impl/python-bindings.md).
 *
 * Ownership rules (docs/impl/c-ffi.md):
 *   - hurray_buffer_create takes ownership of `data`: from then on the
 *     release callback runs exactly once, when the handle is destroyed, or
 *     before create returns if create fails.
 *   - hurray_buffer_list_push takes ownership of the handle, whether it
 *     succeeds or fails.
 *   - hurray_buffer_list_get(_mutable) returns a BORROWED handle. Never
 *     destroy it.
 *   - hurray_buffer_list_destroy destroys every handle it owns, once each.
 * Handles are not thread-safe for modification; the release callback may run
 * on whichever thread destroys the handle.
 */
#ifndef HURRAY_BUFFER_H
#define HURRAY_BUFFER_H

#include "hurray/common.h"
#include "hurray/descriptor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HurrayBuffer HurrayBuffer;
typedef struct HurrayBufferList HurrayBufferList;

/* Called exactly once with the data pointer and context given at create.
 * NULL means there is nothing to release (static or borrowed memory). */
typedef void (*HurrayReleaseFn)(void *data, void *release_ctx);

/* Creates a handle for `byte_size` bytes at `data` (NULL only if byte_size is
 * 0). Defaults: alignment 1, sync_mode READY with no sync handle, device
 * CPU:0, memory class HOST. On success *out is owned by the caller; on
 * failure `release` has already been called. */
HURRAY_API HurrayStatus hurray_buffer_create(void *data, uint64_t byte_size,
                                             HurrayReleaseFn release, void *release_ctx,
                                             HurrayBuffer **out, HurrayError *error);

/* Calls the release callback once and frees the handle. NULL is a no-op.
 * Never call it on a handle borrowed from a list. */
HURRAY_API void hurray_buffer_destroy(HurrayBuffer *buffer);

/* Declares the alignment the producer guarantees (a power of two up to
 * HURRAY_MAX_ALIGNMENT); HURRAY_ERR_BUFFER_ALIGNMENT if the pointer does not
 * honour it. */
HURRAY_API HurrayStatus hurray_buffer_set_alignment(HurrayBuffer *buffer, uint32_t alignment,
                                                    HurrayError *error);
/* `sync_handle` is what the consumer synchronises with: for EVENT a pointer
 * to the producer's event (e.g. cudaEvent_t*), for STREAM the stream the
 * data was made ready on; NULL for READY. Borrowed: the producer keeps it
 * alive as long as the buffer. */
HURRAY_API HurrayStatus hurray_buffer_set_sync(HurrayBuffer *buffer, HurraySyncMode sync_mode,
                                               void *sync_handle, HurrayError *error);
HURRAY_API HurrayStatus hurray_buffer_set_device(HurrayBuffer *buffer, int32_t device_type,
                                                 int32_t device_id, HurrayMemoryClass memory_class,
                                                 HurrayError *error);

HURRAY_API void *hurray_buffer_data(const HurrayBuffer *buffer);
HURRAY_API uint64_t hurray_buffer_size(const HurrayBuffer *buffer);
HURRAY_API uint32_t hurray_buffer_alignment(const HurrayBuffer *buffer);
HURRAY_API HurraySyncMode hurray_buffer_sync_mode(const HurrayBuffer *buffer);
HURRAY_API void *hurray_buffer_sync_handle(const HurrayBuffer *buffer);
HURRAY_API int32_t hurray_buffer_device_type(const HurrayBuffer *buffer);
HURRAY_API int32_t hurray_buffer_device_id(const HurrayBuffer *buffer);
HURRAY_API HurrayMemoryClass hurray_buffer_memory_class(const HurrayBuffer *buffer);

/* Creates an empty list owned by the caller. */
HURRAY_API HurrayStatus hurray_buffer_list_create(HurrayBufferList **out, HurrayError *error);

/* Appends `buffer` and takes ownership of it in every case: if the push
 * fails (NULL list, more than HURRAY_MAX_BUFFERS, no memory) the buffer is
 * destroyed before returning. */
HURRAY_API HurrayStatus hurray_buffer_list_push(HurrayBufferList *list, HurrayBuffer *buffer,
                                                HurrayError *error);

HURRAY_API size_t hurray_buffer_list_len(const HurrayBufferList *list);

/* Borrowed handle at `index`, or NULL when out of range. The list keeps
 * ownership: do not destroy it. A const list gives a const handle; the
 * memory it points at (hurray_buffer_data) is the producer's, not part of
 * the handle. The handle does not say whether it may be written: a
 * consumer writes only through handles it made itself (a file's buffers may
 * be a read-only mapping; docs/spec/buffer-protocol.md). */
HURRAY_API const HurrayBuffer *hurray_buffer_list_get(const HurrayBufferList *list, size_t index);
/* The same handle, mutable, for setting its alignment, sync or device. */
HURRAY_API HurrayBuffer *hurray_buffer_list_get_mutable(HurrayBufferList *list, size_t index);

/* Destroys every owned handle exactly once, in order, then the list. NULL
 * is a no-op. */
HURRAY_API void hurray_buffer_list_destroy(HurrayBufferList *list);

/* Checks that `list` can carry the tensor `d` describes: the descriptor is
 * valid; the list length equals the buffer table length; each buffer holds
 * at least the declared byte_size, honours the
 * declared alignment and sync_mode, and lives on the descriptor's device and
 * memory class; and, when the memory is host-addressable and READY, the
 * contents that structure the tensor are sound: every page table entry falls
 * inside the pool, sparse indices fall inside the shape, index pointers run
 * from 0 to nnz without decreasing, and canonical COO coordinates are sorted
 * and unique. Returns the first violation. */
HURRAY_API HurrayStatus hurray_validate_buffer_placement(const HurrayDescriptor *d,
                                                         const HurrayBufferList *list,
                                                         HurrayError *error);

/* ---------------------------------------------------- output-size limits
 *
 * A descriptor can describe a tensor far larger than the bytes it stores:
 * a 265-byte file with a stride-0 8192 x 8192 float32 tensor asks to_dense
 * for 256 MiB, and a sparse or paged tensor can expand as much. The
 * functions that write a tensor's logical form (hurray_tensor_to_dense,
 * hurray_dequantize and their _with forms) therefore refuse, with
 * HURRAY_ERR_LIMIT and before writing anything, an output larger than
 * their limits allow; callers that allocate the output themselves check
 * the same limits first with hurray_check_output_size.
 *
 * Default (HURRAY_OUTPUT_LIMITS_INIT, and what a NULL limits pointer
 * means): output <= max(64 MiB, 64 x stored bytes), stored bytes being the
 * sum of the buffer table's byte sizes. 64x covers every legitimate
 * expansion of the formats (4-bit codes to float32 is 8x, MX fp4 8.25x;
 * dense and paged data are at most 1x plus the page table), and the 64 MiB
 * floor lets small tensors of any shape through, sparse ones included. A
 * very sparse large tensor (fewer than ~1 in 64 elements stored) exceeds
 * it: pass explicit limits for those. HURRAY_OUTPUT_UNLIMITED opts out. */
#define HURRAY_NO_LIMIT UINT64_MAX
#define HURRAY_OUTPUT_LIMITS_VERSION 1u
#define HURRAY_DEFAULT_MAX_EXPANSION 64u
#define HURRAY_DEFAULT_EXPANSION_FLOOR_BYTES ((uint64_t)64 << 20)

typedef struct HurrayOutputLimits {
  uint32_t version; /* HURRAY_OUTPUT_LIMITS_VERSION */
  /* Relative limit: output <= max(expansion_floor_bytes, max_expansion x
   * stored bytes); 0 turns it off. */
  uint32_t max_expansion;
  uint64_t expansion_floor_bytes;
  /* Absolute limit on the output's bytes; HURRAY_NO_LIMIT turns it off. */
  uint64_t max_output_bytes;
} HurrayOutputLimits;

#define HURRAY_OUTPUT_LIMITS_INIT                              \
  {HURRAY_OUTPUT_LIMITS_VERSION, HURRAY_DEFAULT_MAX_EXPANSION, \
   HURRAY_DEFAULT_EXPANSION_FLOOR_BYTES, HURRAY_NO_LIMIT}
#define HURRAY_OUTPUT_UNLIMITED {HURRAY_OUTPUT_LIMITS_VERSION, 0u, 0u, HURRAY_NO_LIMIT}

/* HURRAY_OK when an output of `output_bytes` for tensor `d` is within
 * `limits` (NULL: the defaults); HURRAY_ERR_LIMIT, with a message naming
 * both sizes, when it is not; INVALID_ARGUMENT for an unknown version. */
HURRAY_API HurrayStatus hurray_check_output_size(const HurrayDescriptor *d, uint64_t output_bytes,
                                                 const HurrayOutputLimits *limits,
                                                 HurrayError *error);

/* Materialises the logical tensor as a dense, row-major array of its dtype
 * (the stored codes, for a quantized tensor) into `out`, which must hold
 * hurray_dtype_storage_bytes(dtype, numel) bytes (sub-byte dtypes come out
 * packed). Works for dense (any strides), sparse (stored values scattered
 * into zeros; a position stored twice sums, as in scipy) and paged (pages
 * gathered) layouts. Composites, and duplicates of dtypes without a C sum
 * (float16, bfloat16, the narrow floats, bool; int4 and uint4 sum modulo 16) give
 * HURRAY_ERR_UNSUPPORTED, as do block-coded tensors, codes stored in
 * another order or packed into words (storage axes, code packing:
 * dequantize those), and tensors in device memory or with a buffer that is
 * not READY. hurray_compute_statistics refuses the same.
 * Validates placement first, then refuses (HURRAY_ERR_LIMIT) an output the
 * default limits do not allow (see above), and (INVALID_ARGUMENT) an `out`
 * that overlaps any buffer of `list`. */
HURRAY_API HurrayStatus hurray_tensor_to_dense(const HurrayDescriptor *d,
                                               const HurrayBufferList *list, void *out,
                                               uint64_t out_size, HurrayError *error);
/* The same with explicit output limits (NULL: the defaults). */
HURRAY_API HurrayStatus hurray_tensor_to_dense_with(const HurrayDescriptor *d,
                                                    const HurrayBufferList *list,
                                                    const HurrayOutputLimits *limits, void *out,
                                                    uint64_t out_size, HurrayError *error);

/* Computes min, max, NaN count and zero count of the tensor's values in one
 * pass and stores them in `d` (replacing any statistics there). Dense (any
 * strides) and sparse layouts of bool, integer, float16, bfloat16, float32
 * and float64 in host memory with READY buffers; for sparse tensors they
 * describe the logical elements:
 * entries naming one position are summed and unstored elements are zeros. Other kinds give
 * HURRAY_ERR_UNSUPPORTED and leave `d` unchanged. A strided view counts
 * every logical element, a repeated (zero-stride) one as often as it
 * appears; one with more than the default output limits allow (see above)
 * gives HURRAY_ERR_LIMIT. Statistics are advisory: nothing in the library
 * trusts them. */
HURRAY_API HurrayStatus hurray_compute_statistics(HurrayDescriptor *d,
                                                  const HurrayBufferList *list,
                                                  HurrayError *error);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_BUFFER_H */
