/*
 * hurray/convert.h - native safetensors and GGUF: reading them as hurray
 * tensors, writing hurray tensors as them, and converting whole files
 * between hurray, safetensors and GGUF with no Python and no framework.
 * What is native and what stays in Python is in docs/impl/convert.md; the
 * parsers' limits are in docs/security.md.
 *
 * Three levels:
 *   - hurray_convert_file: one call, path to path. The target is written
 *     through the atomic writer: on any failure it is left untouched.
 *   - HurraySource: the tensors and metadata of a safetensors, GGUF or
 *     hurray file, each tensor as a descriptor plus buffers (zero-copy views
 *     of a read-only mapping where the bytes are usable as they are, fresh
 *     memory where GGUF blocks are re-laid out).
 *   - HurrayTarget: a safetensors, GGUF or hurray file built from such
 *     tensors and typed metadata, published atomically by finish.
 *
 * Metadata naming (the same as the Python converter's, so files made by
 * either are the same): a safetensors `__metadata__` entry K becomes the
 * hurray string key "safetensors.K"; a GGUF key-value pair K becomes
 * "gguf.K" (strings, or bytes when not UTF-8; int64; float64; bool; arrays
 * as JSON text), with "gguf.__types__" holding {K: GGUF type} in file order
 * (arrays as "ARRAY:SUBTYPE", nested ones "ARRAY:ARRAY:SUBTYPE") and
 * "gguf.__tensors__" the tensor names in file order. Writers read the
 * same keys back; keys of another format are not carried.
 *
 * Ownership:
 *   - hurray_source_open gives the caller a source, freed by
 *     hurray_source_close. Names, type names and metadata it returns are
 *     borrowed until then. Descriptors and buffer lists from
 *     hurray_source_get_tensor are the caller's and outlive the source.
 *   - hurray_target_open gives the caller a target; hurray_target_finish
 *     and hurray_target_abort both free it, whatever they return.
 *     hurray_target_add_tensor takes the descriptor and the buffer list it
 *     is given in every case, success or failure.
 * Threads: sources and targets are not thread-safe; use one per thread.
 * Errors: messages are one line, and the names from a file they quote are
 * escaped already (hurray_escape_text without HURRAY_ESCAPE_BACKSLASH).
 */
#ifndef HURRAY_CONVERT_H
#define HURRAY_CONVERT_H

#include <stdbool.h>

#include "hurray/buffer.h"
#include "hurray/common.h"
#include "hurray/descriptor.h"
#include "hurray/io.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum HurrayFormat {
  HURRAY_FORMAT_UNKNOWN = 0,
  HURRAY_FORMAT_HURRAY = 1,
  HURRAY_FORMAT_SAFETENSORS = 2,
  HURRAY_FORMAT_GGUF = 3
} HurrayFormat;

/* Limits of the parsers, checked before anything is allocated. */
#define HURRAY_SAFETENSORS_MAX_HEADER_BYTES 100000000u /* safetensors' own limit */
#define HURRAY_GGUF_MAX_TENSORS (1u << 20)
#define HURRAY_GGUF_MAX_KV (1u << 16)
#define HURRAY_GGUF_MAX_ARRAY_DEPTH 4u
#define HURRAY_GGUF_MAX_DIMS 4u
#define HURRAY_GGUF_DEFAULT_ALIGNMENT 32u

/* The format a file name says: ".hurray", ".safetensors", ".gguf"
 * (case-insensitive), else HURRAY_FORMAT_UNKNOWN. */
HURRAY_API HurrayFormat hurray_format_from_path(const char *path);
/* The format the first bytes of a file say (hurray magic, "GGUF", or a
 * safetensors length followed by '{'); HURRAY_FORMAT_UNKNOWN otherwise or
 * when the file cannot be read. */
HURRAY_API HurrayFormat hurray_format_sniff(const char *path);
/* "hurray", "safetensors", "gguf" or "unknown"; static. */
HURRAY_API const char *hurray_format_name(HurrayFormat format);
/* Whether a file of `format` written by a HurrayTarget or
 * hurray_convert_file keeps the hurray metadata key `key` (see the naming
 * above: a hurray file keeps every key, safetensors the "safetensors.*"
 * keys, GGUF the "gguf.*" keys, and each reads the converter's own
 * bookkeeping keys). false for an unknown format or a NULL key. A caller
 * of hurray_convert_file uses it to name the keys the conversion leaves
 * behind, which hurray_target_dropped_metadata counts. */
HURRAY_API bool hurray_format_keeps_metadata(HurrayFormat format, const char *key);

/* The converters' own metadata keys. A target reads them to rebuild its
 * format's layout; they are not the user's metadata, so no conversion
 * counts them as dropped:
 *   - HURRAY_META_GGUF_TYPES: JSON {GGUF key: GGUF value type}, file order;
 *   - HURRAY_META_GGUF_TENSORS: JSON [tensor names], file order;
 *   - HURRAY_META_SOURCE_DTYPES: JSON {tensor: float dtype before
 *     quantization} (the Python converter's --quantize);
 *   - HURRAY_META_SAFETENSORS_INDEX: JSON, the "metadata" object of a
 *     sharded checkpoint's model.safetensors.index.json. */
#define HURRAY_META_GGUF_TYPES "gguf.__types__"
#define HURRAY_META_GGUF_TENSORS "gguf.__tensors__"
#define HURRAY_META_SOURCE_DTYPES "convert.source_dtypes"
#define HURRAY_META_SAFETENSORS_INDEX "safetensors_index.metadata"
/* Whether `key` is one of the four above; false for NULL. */
HURRAY_API bool hurray_metadata_is_bookkeeping(const char *key);

/* ------------------------------------------------------------ one call */

typedef struct HurrayConvertOptions {
  uint32_t version;           /* HURRAY_CONVERT_OPTIONS_VERSION */
  HurrayFormat source_format; /* UNKNOWN: from the name, else from the bytes */
  HurrayFormat target_format; /* UNKNOWN: from the name */
  bool verify_checksums;      /* hurray sources: check every buffer before writing */
  bool statistics;            /* hurray targets: store min/max/NaN/zero counts */
  /* Version 2: asked between tensors and while the target is written (see
   * hurray_writer_set_cancel); true stops the conversion with
   * HURRAY_ERR_CANCELLED and `dst` untouched. A CLI sets a flag from its
   * SIGINT handler and returns it here. NULL: never cancelled. */
  HurrayCancelFn cancel;
  void *cancel_ctx; /* borrowed; passed to `cancel` */
} HurrayConvertOptions;

#define HURRAY_CONVERT_OPTIONS_VERSION 2
#define HURRAY_CONVERT_OPTIONS_INIT \
  {HURRAY_CONVERT_OPTIONS_VERSION,  \
   HURRAY_FORMAT_UNKNOWN,           \
   HURRAY_FORMAT_UNKNOWN,           \
   true,                            \
   false,                           \
   NULL,                            \
   NULL}

/* Converts `src` into `dst` (`options` may be NULL for the defaults).
 * Tensors stream one at a time: memory does not grow with the file (a raw
 * range of a source file is copied with copy_file_range where it sits at
 * the same offset within a page as in the target and the kernel allows,
 * else written from the source mapping in page-aligned 64 KiB steps whose
 * pages are let go as it goes). Fails
 * with HURRAY_ERR_UNSUPPORTED, before writing anything, when a tensor
 * needs a change of form the target cannot take as it is (a quantized
 * tensor into safetensors, a GGUF tensor of type Q8_1 or Q1_0 (every other
 * type is kept: the dense ones as tensors, Q8_0 and Q4_0 as block_affine,
 * the rest as block-coded tensors of their own blocks, ADR-0022), a tensor
 * quantized in a form GGUF has no type for going to GGUF, a non-dense
 * layout, a piece of a sharded tensor or
 * a tensor of an extension type going to safetensors or GGUF, which would
 * reach it as a plain tensor; a safetensors file holding a
 * quantized tensor in the parts `hurray convert --keep-scales` writes, going
 * to a hurray file, which only the Python converter rebuilds): the message
 * names the tensor and the reason. On any failure `dst` is untouched. */
HURRAY_API HurrayStatus hurray_convert_file(const char *src, const char *dst,
                                            const HurrayConvertOptions *options,
                                            HurrayError *error);

/* ------------------------------------------------------------- sources */

typedef struct HurraySource HurraySource;

/* Tuning of hurray_source_open: start from HURRAY_SOURCE_OPTIONS_INIT, then
 * change what you need; any other `version` is refused.
 *   verify_checksums  hurray files: hurray_source_get_tensor checks each
 *                     tensor's buffers against their checksums (default
 *                     true); ignored for safetensors and GGUF. */
typedef struct HurraySourceOptions {
  uint32_t version; /* HURRAY_SOURCE_OPTIONS_VERSION */
  bool verify_checksums;
} HurraySourceOptions;

#define HURRAY_SOURCE_OPTIONS_VERSION 1u
#define HURRAY_SOURCE_OPTIONS_INIT {HURRAY_SOURCE_OPTIONS_VERSION, true}

/* Opens `path` as `format` (UNKNOWN: from the name, then the bytes) and
 * checks its whole header: every count, length and offset against the file
 * size, with overflow checks, before trusting it. `options` NULL means
 * HURRAY_SOURCE_OPTIONS_INIT; an unknown version is INVALID_ARGUMENT. */
HURRAY_API HurrayStatus hurray_source_open(const char *path, HurrayFormat format,
                                           const HurraySourceOptions *options, HurraySource **out,
                                           HurrayError *error);
/* Opens in-memory bytes (`data`, `size`) of a safetensors or GGUF file;
 * they must outlive the source and every buffer it hands out. */
HURRAY_API HurrayStatus hurray_source_open_memory(const void *data, uint64_t size,
                                                  HurrayFormat format, HurraySource **out,
                                                  HurrayError *error);
/* NULL is a no-op. Buffers already handed out stay valid. */
HURRAY_API void hurray_source_close(HurraySource *source);

HURRAY_API HurrayFormat hurray_source_format(const HurraySource *source);
/* Tensors in the file's order (hurray: bytewise ascending names;
 * safetensors: ascending data offsets; GGUF: tensor info order). A name is
 * borrowed until the source is closed; NULL only for an index past the
 * count. */
HURRAY_API size_t hurray_source_tensor_count(const HurraySource *source);
HURRAY_API const char *hurray_source_tensor_name(const HurraySource *source, size_t index);
/* The format's own name of the tensor's type: "BF16", "F8_E4M3", "Q4_0";
 * a hurray dtype name for hurray files ("?" when a hurray file's descriptor
 * cannot be read, for lack of memory; hurray_source_get_descriptor says
 * why). */
HURRAY_API const char *hurray_source_tensor_type(const HurraySource *source, size_t index);
/* Bytes the tensor takes in the source file (0 where tensor_type gives
 * "?"). */
HURRAY_API uint64_t hurray_source_tensor_bytes(const HurraySource *source, size_t index);
/* HURRAY_OK if hurray can represent the tensor exactly; otherwise
 * HURRAY_ERR_UNSUPPORTED with a message naming the tensor and its type. */
HURRAY_API HurrayStatus hurray_source_check_tensor(const HurraySource *source, size_t index,
                                                   HurrayError *error);
/* Only the descriptor (caller-owned) of what hurray_source_get_tensor
 * returns; touches no tensor data. */
HURRAY_API HurrayStatus hurray_source_get_descriptor(const HurraySource *source, size_t index,
                                                     HurrayDescriptor **descriptor_out,
                                                     HurrayError *error);
/* The tensor as a hurray tensor: a descriptor and its buffers, both the
 * caller's. Dense tensors are views of the source's mapping; GGUF Q8_0 and
 * Q4_0 blocks become block_affine codes and float16 scales (the scale bits
 * copied as they are) in fresh memory. */
HURRAY_API HurrayStatus hurray_source_get_tensor(HurraySource *source, size_t index,
                                                 HurrayDescriptor **descriptor_out,
                                                 HurrayBufferList **buffers_out,
                                                 HurrayError *error);

/* File-level metadata in hurray form (see the naming above), in a stable
 * order. `value` points at an int64_t, a double, a bool, or `len` bytes
 * (strings are NUL-terminated, `len` not counting the NUL). */
HURRAY_API size_t hurray_source_metadata_count(const HurraySource *source);
HURRAY_API HurrayStatus hurray_source_metadata(const HurraySource *source, size_t index,
                                               const char **key_out, HurrayMetadataType *type_out,
                                               const void **value_out, size_t *len_out,
                                               HurrayError *error);
/* The keys of a hurray source's metadata that it does not hand on, in file
 * order: the reserved chunk-checksum key (docs/spec/file-format.md 7.1) and
 * entries of a type a newer minor version added (section 11), which no
 * writer of this version may store again. A converter names them as not
 * carried. Keys are borrowed until the source is closed; 0 and NULL for
 * other formats or an index past the end. */
HURRAY_API size_t hurray_source_left_metadata_count(const HurraySource *source);
HURRAY_API const char *hurray_source_left_metadata_key(const HurraySource *source, size_t index);

/* ------------------------------------------------------------- targets */

typedef struct HurrayTarget HurrayTarget;

/* Starts writing `path` as `format` (UNKNOWN: from the name), through a
 * temporary file in the same folder; `path` is untouched until finish. */
HURRAY_API HurrayStatus hurray_target_open(const char *path, HurrayFormat format,
                                           HurrayTarget **out, HurrayError *error);
/* When on, a hurray target stores statistics (hurray_writer_set_statistics). */
HURRAY_API HurrayStatus hurray_target_set_statistics(HurrayTarget *target, bool enabled,
                                                     HurrayError *error);
/* Adds tensor `name`, taking `descriptor` and `buffers` in every case.
 * A hurray target writes it at once. safetensors and GGUF targets keep
 * both until finish (their headers come first), so the buffers' memory
 * must stay valid until then. safetensors takes dense, row-major,
 * unquantized tensors of a dtype it has; GGUF takes dense float32,
 * float16, bfloat16, float64, int8-int64 tensors of rank 0 to 4,
 * block_affine tensors that are exactly Q8_0 or Q4_0, and block-coded
 * tensors of a GGUF block format (written back unchanged). Anything else is
 * HURRAY_ERR_UNSUPPORTED, the target still usable. A name their readers
 * would refuse (empty, not UTF-8, longer than HURRAY_MAX_TENSOR_NAME_BYTES,
 * or __metadata__ for safetensors) is HURRAY_ERR_INVALID_ARGUMENT. */
HURRAY_API HurrayStatus hurray_target_add_tensor(HurrayTarget *target, const char *name,
                                                 HurrayDescriptor *descriptor,
                                                 HurrayBufferList *buffers, HurrayError *error);
/* File-level metadata in hurray form; `value` as for hurray_source_metadata
 * (NULL with `len` 0 for an empty string or bytes; an unknown type is
 * HURRAY_ERR_INVALID_ARGUMENT). Keys the target's format cannot carry are
 * ignored (counted in hurray_target_dropped_metadata). Setting a key again
 * replaces it. A carried key that names a key the format's readers refuse
 * ("safetensors." or "gguf." alone, not UTF-8, too long) fails finish with
 * HURRAY_ERR_INVALID_ARGUMENT, `path` untouched. */
HURRAY_API HurrayStatus hurray_target_set_metadata(HurrayTarget *target, const char *key,
                                                   HurrayMetadataType type, const void *value,
                                                   size_t len, HurrayError *error);
/* Number of metadata keys finish will not carry. */
HURRAY_API size_t hurray_target_dropped_metadata(const HurrayTarget *target);
/* Writes everything and publishes `path` atomically. Frees the target in
 * every case; on failure `path` is untouched. */
HURRAY_API HurrayStatus hurray_target_finish(HurrayTarget *target, HurrayError *error);
/* Discards the target; `path` is untouched. NULL is a no-op. */
HURRAY_API void hurray_target_abort(HurrayTarget *target);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_CONVERT_H */
