/*
 * Internals shared by the safetensors and GGUF parsers and writers and the
 * converter (include/hurray/convert.h).
 */
#ifndef HURRAY_SRC_FORMATS_INTERNAL_H
#define HURRAY_SRC_FORMATS_INTERNAL_H

#include "../core/name_set.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hurray/convert.h"
#include "hurray/hurray.h"

#include "../io/raw_writer.h"

/* ------------------------------------------------------- typed metadata */

typedef struct HurrayMeta {
  char *key;
  HurrayMetadataType type;
  int64_t i;
  double f;
  bool b;
  uint8_t *bytes; /* STRING (NUL-terminated) and BYTES */
  size_t len;
} HurrayMeta;

typedef struct HurrayMetaList {
  HurrayMeta *items;
  size_t count, cap;
  HurrayNameSet keys; /* finds a key in O(1): files may hold 2^16 of them */
} HurrayMetaList;

/* Appends (or replaces) `key`. `value` as in hurray_source_metadata. */
HurrayStatus hurray__meta_set(HurrayMetaList *l, const char *key, HurrayMetadataType type,
                              const void *value, size_t len, HurrayError *error);
const HurrayMeta *hurray__meta_find(const HurrayMetaList *l, const char *key);
void hurray__meta_free(HurrayMetaList *l);

/* Whether a name or key is one this library's readers of safetensors and
 * GGUF take back: not empty, valid UTF-8, at most `limit` bytes. A target
 * must not publish a file its own reader refuses. */
bool hurray__foreign_name_ok(const char *name, size_t limit);

/* ------------------------------------------------------- growing string */

typedef struct HurrayStr {
  char *p;
  size_t len, cap;
  bool oom;
} HurrayStr;

void hurray__str_add(HurrayStr *s, const void *data, size_t len);
void hurray__str_addc(HurrayStr *s, char c);
void hurray__str_addf(HurrayStr *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* `data` as a JSON string the way Python's json.dumps writes a str decoded
 * with errors="surrogateescape": ASCII only, \uXXXX for the rest, each
 * byte of an invalid UTF-8 sequence as \udcXX. */
void hurray__str_json_string(HurrayStr *s, const uint8_t *data, size_t len);
/* `data` (valid UTF-8) as a JSON string the way serde_json (safetensors'
 * writer) writes one: raw UTF-8, escapes for '"', '\\' and controls only. */
void hurray__str_json_raw(HurrayStr *s, const uint8_t *data, size_t len);
void hurray__str_free(HurrayStr *s);

/* A minimal JSON reader for the values hurray keeps GGUF metadata in
 * (Python's json.dumps output: objects and nested arrays of numbers,
 * true/false and strings with \udcXX escapes for raw bytes, NaN/Infinity). */
typedef enum HurrayJKind { HJ_NUM, HJ_BOOL, HJ_STR, HJ_ARR, HJ_OBJ } HurrayJKind;
typedef struct HurrayJ HurrayJ;
struct HurrayJ {
  HurrayJKind kind;
  bool is_int;   /* HJ_NUM: an integer literal */
  bool negative; /* HJ_NUM integer: the sign */
  uint64_t mag;  /* HJ_NUM integer: the magnitude */
  double num;    /* HJ_NUM: the value as a double */
  bool b;
  uint8_t *str;   /* HJ_STR: raw bytes, surrogate escapes undone */
  size_t len;     /* HJ_STR: bytes; HJ_ARR, HJ_OBJ: items */
  HurrayJ *items; /* HJ_ARR, HJ_OBJ (in text order) */
  HurrayJ *keys;  /* HJ_OBJ: HJ_STR keys, one per item */
};
HurrayStatus hurray__j_parse(const uint8_t *text, size_t len, HurrayJ *out, HurrayError *error);
void hurray__j_free(HurrayJ *j);

/* --------------------------------------------------------- safetensors */

typedef struct HurraySTTensor {
  char *name;
  HurrayDType dtype;
  const char *type_name; /* static: "BF16" */
  uint32_t rank;
  uint64_t *shape;
  uint64_t begin, end; /* relative to the data section */
} HurraySTTensor;

typedef struct HurraySTFile {
  HurraySTTensor *tensors; /* ascending offsets */
  size_t count;
  HurrayMetaList metadata; /* __metadata__ as "safetensors.K" strings */
  uint64_t data_start;     /* 8 + header length */
} HurraySTFile;

/* Parses and checks the whole header of the `size` bytes at `data`
 * (only the first 8 + header bytes are read). */
HurrayStatus hurray__st_parse(const uint8_t *data, uint64_t size, HurraySTFile *out,
                              HurrayError *error);
void hurray__st_free(HurraySTFile *f);
/* The safetensors name of a dtype, or NULL. */
const char *hurray__st_dtype_name(HurrayDType dtype);
/* safetensors' own writer order: dtype (its enum order) descending, then name. */
int hurray__st_dtype_rank(HurrayDType dtype);

/* ----------------------------------------------------------------- GGUF */

typedef struct HurrayGGUFTensor {
  char *name;
  uint32_t type;
  uint32_t n_dims;
  uint64_t dims[4]; /* GGUF order: innermost first */
  uint64_t offset;  /* relative to the data section */
  uint64_t nbytes;
} HurrayGGUFTensor;

typedef struct HurrayGGUFFile {
  uint32_t version;
  uint64_t alignment;
  HurrayGGUFTensor *tensors;
  size_t count;
  HurrayMetaList metadata; /* "gguf.K", gguf.__types__, gguf.__tensors__ */
  uint64_t data_start;
} HurrayGGUFFile;

HurrayStatus hurray__gguf_parse(const uint8_t *data, uint64_t size, HurrayGGUFFile *out,
                                HurrayError *error);
void hurray__gguf_free(HurrayGGUFFile *f);
/* "Q4_K", or NULL for a type number GGUF does not define. */
const char *hurray__gguf_type_name(uint32_t type);
/* Types hurray imports exactly. */
bool hurray__gguf_type_supported(uint32_t type);
/* Whether GGUF type `type` imports as block-coded quantization (its block
 * format number is the type number). */
bool hurray__gguf_block_coded(uint32_t type);
extern const char hurray__gguf_supported_list[];

/* Encodes the key-value section from hurray metadata: `count_out` pairs,
 * appended to `out`. */
HurrayStatus hurray__gguf_encode_kv(const HurrayMetaList *meta, HurrayStr *out,
                                    uint64_t *count_out, uint64_t *alignment_out,
                                    HurrayError *error);

/* What a safetensors or GGUF target would store `d` (tensor `name`) as:
 * the type name ("Q8_0", "BF16"; static) and the stored bytes, or
 * HURRAY_ERR_UNSUPPORTED saying why it holds no exact form. The one place
 * that decides it, for the C writer and for the Python converter's plan. */
HurrayStatus hurray__target_form(HurrayFormat format, const char *name, const HurrayDescriptor *d,
                                 const char **type_name, uint64_t *nbytes, HurrayError *error);

/* Q8_0 / Q4_0 blocks <-> hurray block_affine codes and scales. */
void hurray__gguf_blocks_to_codes(uint32_t type, const uint8_t *blocks, uint64_t nblocks,
                                  uint8_t *codes, uint8_t *scales);
void hurray__gguf_codes_to_blocks(uint32_t type, const uint8_t *codes, const uint8_t *scales,
                                  uint64_t nblocks, uint8_t *blocks);

/* The longest tensor name a GGUF target writes: the GGUF spec allows 64
 * bytes, and ggml (llama.cpp) keeps names in char[GGML_MAX_NAME = 64] with
 * their NUL, refusing a file with a longer one. Read, any length passes. */
#define HURRAY_GGUF_MAX_NAME_BYTES 63u
#define HURRAY_GGUF_TYPE_F32 0u
#define HURRAY_GGUF_TYPE_F16 1u
#define HURRAY_GGUF_TYPE_Q4_0 2u
#define HURRAY_GGUF_TYPE_Q8_0 8u
#define HURRAY_GGUF_TYPE_I8 24u
#define HURRAY_GGUF_TYPE_I16 25u
#define HURRAY_GGUF_TYPE_I32 26u
#define HURRAY_GGUF_TYPE_I64 27u
#define HURRAY_GGUF_TYPE_F64 28u
#define HURRAY_GGUF_TYPE_BF16 30u

#endif
