/*
 * hurray/quant.h - quantization kernels: floats in, a quantized tensor out,
 * and back again.
 *
 * hurray_quantize turns a row-major float array into a descriptor plus its
 * buffers (codes, then scales, then zero points), in any quantization kind a
 * descriptor can express. hurray_dequantize turns any valid quantized tensor
 * back into floats. The exact rules, bit for bit, are in
 * docs/spec/quantization.md; docs/impl/c-ffi.md has worked examples.
 *
 * Ownership:
 *   - hurray_quantize hands the caller a new descriptor and a new buffer
 *     list on success (hurray_descriptor_destroy, hurray_buffer_list_destroy);
 *     on failure it hands out nothing and sets both outputs to NULL.
 *   - Neither function keeps a pointer to its inputs after it returns.
 * Threads: both run on the calling thread unless `threads` > 1 allows more;
 * the result is the same bytes whatever the thread count.
 */
#ifndef HURRAY_QUANT_H
#define HURRAY_QUANT_H

#include "hurray/buffer.h"
#include "hurray/common.h"
#include "hurray/descriptor.h"
#include "hurray/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What hurray_quantize produces. Names (hurray_quant_scheme_name) are the
 * Python scheme strings. */
typedef enum HurrayQuantScheme {
  HURRAY_SCHEME_AFFINE = 1,       /* "affine": per-tensor affine, inline scale */
  HURRAY_SCHEME_PER_CHANNEL = 2,  /* "per_channel": one scale per index along axis */
  HURRAY_SCHEME_BLOCK_AFFINE = 3, /* "block_affine": one scale per block along axis */
  HURRAY_SCHEME_Q8_0 = 4,         /* "q8_0": GGUF Q8_0, bytes as ggml makes them */
  HURRAY_SCHEME_Q4_0 = 5,         /* "q4_0": GGUF Q4_0, bytes as ggml makes them */
  HURRAY_SCHEME_NF4 = 6,          /* "nf4": bitsandbytes NormalFloat4 */
  HURRAY_SCHEME_MXFP8_E4M3 = 7,   /* "mxfp8_e4m3": OCP MX v1.0 ... */
  HURRAY_SCHEME_MXFP8_E5M2 = 8,   /* "mxfp8_e5m2" */
  HURRAY_SCHEME_MXFP6_E3M2 = 9,   /* "mxfp6_e3m2" */
  HURRAY_SCHEME_MXFP6_E2M3 = 10,  /* "mxfp6_e2m3" */
  HURRAY_SCHEME_MXFP4 = 11,       /* "mxfp4" (E2M1 elements) */
  HURRAY_SCHEME_MXINT8 = 12       /* "mxint8" */
} HurrayQuantScheme;

/* Start from HURRAY_QUANTIZE_OPTIONS_INIT (the affine defaults) or from
 * hurray_quantize_options_init (any scheme's defaults), then change what you
 * need; hurray_quantize refuses any other `version`.
 *   axis        per_channel default 0; block_affine and MX default -1 (last);
 *               negative values count from the end. Ignored by affine and nf4.
 *   block_size  block_affine default 32, nf4 64; q8_0, q4_0 and MX only 32;
 *               affine and per_channel have none (0; another value is refused).
 *   code_dtype  affine kinds: INT8 (default), UINT8, INT4 or UINT4; fixed
 *               for the others.
 *   scale_dtype per_channel and block_affine: FLOAT32 (default), FLOAT16 or
 *               BFLOAT16; fixed for the others (inline double for affine).
 *   symmetric   affine kinds: 1 = zero point fixed at the code range's
 *               middle, 0 = min/max range with zero points, -1 = the default
 *               (symmetric for signed codes, asymmetric for unsigned).
 *   threads     0 or 1: the calling thread only; n: up to n threads. */
typedef struct HurrayQuantizeOptions {
  uint32_t version; /* HURRAY_QUANTIZE_OPTIONS_VERSION */
  HurrayQuantScheme scheme;
  int32_t axis;
  uint64_t block_size;
  HurrayDType code_dtype;
  HurrayDType scale_dtype;
  int32_t symmetric;
  uint32_t threads;
} HurrayQuantizeOptions;

#define HURRAY_QUANTIZE_OPTIONS_VERSION 1u
/* What hurray_quantize_options_init gives for HURRAY_SCHEME_AFFINE. For
 * another scheme, set the fields that scheme fixes too, or use the
 * function: the defaults of block_size, code_dtype and scale_dtype differ. */
#define HURRAY_QUANTIZE_OPTIONS_INIT \
  {HURRAY_QUANTIZE_OPTIONS_VERSION,  \
   HURRAY_SCHEME_AFFINE,             \
   -1,                               \
   0u,                               \
   HURRAY_DTYPE_INT8,                \
   HURRAY_DTYPE_FLOAT64,             \
   -1,                               \
   1u}

/* Sets every field, `version` included, to `scheme`'s defaults.
 * INVALID_ARGUMENT for an unknown scheme. */
HURRAY_API HurrayStatus hurray_quantize_options_init(HurrayQuantizeOptions *options,
                                                     HurrayQuantScheme scheme, HurrayError *error);

/* "nf4" -> HURRAY_SCHEME_NF4 and so on; INVALID_ARGUMENT naming the string
 * if unknown. */
HURRAY_API HurrayStatus hurray_quant_scheme_from_name(const char *name, HurrayQuantScheme *out,
                                                      HurrayError *error);
/* Static string, or NULL for an unknown value. */
HURRAY_API const char *hurray_quant_scheme_name(HurrayQuantScheme scheme);

/* Quantizes `src`, `src_size` bytes holding a row-major array of FLOAT32,
 * FLOAT16 or BFLOAT16 with the given shape (rank may be 0), into a dense
 * tensor: buffer 0 holds the codes, buffer 1 the scales (absent for affine),
 * buffer 2 the zero points (asymmetric per_channel and block_affine only).
 * Every buffer is 64-byte aligned. Reads exactly numel x itemsize bytes of
 * `src`; a `src_size` smaller than that is INVALID_ARGUMENT before anything
 * is read (larger is allowed: the tail is not read). Errors:
 * INVALID_ARGUMENT for bad options (the message names the field) or an
 * unknown options version, for a rank-0 input to a scheme that needs an
 * axis; NOT_FINITE when a scheme that needs finite input meets NaN or Inf
 * (MX encodes those blocks with the NaN scale instead); LIMIT/OVERFLOW for
 * impossible sizes; NO_MEMORY. */
HURRAY_API HurrayStatus hurray_quantize(const void *src, uint64_t src_size, HurrayDType src_dtype,
                                        uint32_t rank, const uint64_t *shape,
                                        const HurrayQuantizeOptions *options,
                                        HurrayDescriptor **descriptor_out,
                                        HurrayBufferList **buffers_out, HurrayError *error);

/* Writes the real values of the quantized tensor (d, list) to `out` as
 * numel row-major elements of `out_dtype` (FLOAT32, FLOAT16 or BFLOAT16;
 * the float16/bfloat16 results are the float32 results rounded to nearest
 * even), on up to `threads` threads (0 or 1: the calling thread only).
 * `out_size` is the byte size of `out`. Validates placement first, so
 * any descriptor and buffers are safe. Handles dense layouts (strided too)
 * of every kind, and paged layouts with per-tensor affine. Sparse layouts,
 * composites, tensors that are not quantized, tensors in device memory and
 * buffers that are not READY (the kernels read on the host, now) give
 * UNSUPPORTED. An `out`
 * that overlaps any buffer of `list` is INVALID_ARGUMENT: the kernels read
 * codes, scales and group indices while they write. */
HURRAY_API HurrayStatus hurray_dequantize(const HurrayDescriptor *d, const HurrayBufferList *list,
                                          HurrayDType out_dtype, uint32_t threads, void *out,
                                          uint64_t out_size, HurrayError *error);
/* The same with explicit output limits (hurray/buffer.h; NULL: the
 * defaults, which hurray_dequantize applies): an output beyond them is
 * HURRAY_ERR_LIMIT before anything is written or allocated. */
HURRAY_API HurrayStatus hurray_dequantize_with(const HurrayDescriptor *d,
                                               const HurrayBufferList *list, HurrayDType out_dtype,
                                               uint32_t threads, const HurrayOutputLimits *limits,
                                               void *out, uint64_t out_size, HurrayError *error);

/* The instruction-set level the kernels run at in this process: "scalar",
 * "sse4.1", "avx2", "avx512" or "neon" (a static string). Chosen once, on
 * the first call to any kernel, from the CPU and the HURRAY_SIMD
 * environment variable (docs/impl/c-ffi.md); every level gives the same
 * bytes. */
HURRAY_API const char *hurray_simd_level(void);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_QUANT_H */
