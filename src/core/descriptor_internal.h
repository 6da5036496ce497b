/*
 * The layout of HurrayDescriptor. Private to libhurray: the public API only
 * sees an opaque pointer, so this can change freely.
 */
#ifndef HURRAY_SRC_DESCRIPTOR_INTERNAL_H
#define HURRAY_SRC_DESCRIPTOR_INTERNAL_H

#include "hurray/descriptor.h"

typedef struct HurrayBufferEntry {
  HurrayBufferRole role;
  HurraySyncMode sync_mode;
  uint32_t alignment;
  uint64_t byte_size;
} HurrayBufferEntry;

typedef struct HurrayMember {
  char *name;
  HurrayDescriptor *descriptor;
} HurrayMember;

enum {
  HURRAY_STAT_MIN = 1u << 0,
  HURRAY_STAT_MAX = 1u << 1,
  HURRAY_STAT_NAN_COUNT = 1u << 2,
  HURRAY_STAT_ZERO_COUNT = 1u << 3,
  HURRAY_STAT_ALL = 0xFu
};

/* A layout's fields; which are meaningful depends on kind (and format). */
typedef struct HurrayLayout {
  HurrayLayoutKind kind;
  uint32_t data_buffer; /* dense data, sparse values, paged pool */
  /* sparse */
  HurraySparseFormat format;
  HurrayDType index_dtype; /* sparse indices and page table */
  uint64_t nnz;
  uint32_t indptr_buffer;
  uint32_t indices_buffer;
  uint32_t *coo_index_buffers; /* HURRAY_MAX_RANK entries, owned, when format is COO; else NULL
                                  (like strides: 128 bytes few descriptors use) */
  bool canonical;
  uint64_t block_rows;
  uint64_t block_cols;
  /* paged */
  uint32_t axis;
  uint64_t page_size;
  uint64_t num_pages;
  uint32_t table_buffer;
  /* composite */
  HurrayMember *members;
  uint32_t member_count;
  uint32_t member_capacity;
} HurrayLayout;

/* Codes or zero points packed in little-endian words (ADR-0024). */
typedef struct HurrayQuantPacking {
  uint8_t word_bits; /* 0: not packed (ADR-0012 sub-byte packing); else 8, 16 or 32 */
  uint8_t axis;      /* storage axis along which the lanes of one word run */
  uint8_t order[32]; /* lane j holds element order[j] of its group of word_bits / bits
                        elements; entries past the lane count are 0 */
} HurrayQuantPacking;

/* How codes and zero points are laid out in storage. Like strides it is
 * allocated only when a descriptor has it (few do): in line it was 104
 * bytes of every descriptor (issue 19). */
typedef struct HurrayQuantStorage {
  bool has_storage_axes;
  uint8_t storage_axes[HURRAY_MAX_RANK]; /* storage dim k is logical dim storage_axes[k] */
  HurrayQuantPacking code_packing;
  HurrayQuantPacking zero_point_packing;
} HurrayQuantStorage;

typedef struct HurrayQuant {
  HurrayQuantKind kind;
  uint32_t axis;
  uint64_t block_size;
  double scale;       /* per-tensor */
  int64_t zero_point; /* inline zero point, all affine kinds */
  uint32_t scale_buffer;
  HurrayDType scale_dtype;
  uint32_t zero_point_buffer;
  HurrayDType zero_point_dtype;
  HurrayMxElement mx_element;
  HurrayBlockFormat block_format; /* block-coded only */

  /* Packed and two-level fields (ADR-0024); per-channel, block affine and
   * NF4 only. Every set_quant_* call resets them to these defaults. */
  HurrayQuantStorage *storage; /* owned; NULL: the defaults (read through hurray__qs) */
  int64_t zero_point_offset;
  uint32_t axis2;              /* block affine: second blocked axis ... */
  uint64_t block_size2;        /* ... and its block; 0: none */
  uint32_t group_index_buffer; /* block affine: NO_BUFFER or role GROUP_INDEX */
  HurrayDType group_index_dtype;
  uint32_t codebook_buffer;       /* NO_BUFFER or role CODEBOOK, float32[2^bits] */
  uint32_t scale_codebook_buffer; /* NO_BUFFER or role CODEBOOK, float32[256] */
  uint32_t super_scale_buffer;    /* NO_BUFFER or role SUPER_SCALES */
  HurrayDType super_scale_dtype;
  uint64_t super_block_size; /* scales per super scale; 0: one for the tensor */
  uint8_t super_op;          /* HurraySuperScaleOp; 0 without super scales */
  double scale_offset;       /* added to every formed scale */
} HurrayQuant;

/* A shard's placement. Like strides it is allocated only when present:
 * few tensors have either, and in line the two cost 768 bytes in every
 * descriptor, half of what a million loaded tensors held each (issue 19). */
typedef struct HurrayShardFields {
  uint64_t global[HURRAY_MAX_RANK];
  uint64_t offsets[HURRAY_MAX_RANK];
} HurrayShardFields;

/* Dimensions a descriptor holds in itself; a larger rank moves the shape to
 * memory of its own. Nearly every tensor has rank 4 or less, and the other
 * 26 entries in line were a fifth of every loaded tensor's memory (issue 19). */
#define HURRAY__SHAPE_INLINE 6u

/* Buffer table entries a descriptor holds in itself: most tensors have one
 * or two buffers, and decoding each entry's descriptor with one allocation
 * instead of two made verify of 20,000 small tensors and a load of them
 * cheaper (issue 19). */
#define HURRAY__BUFFERS_INLINE 2u

struct HurrayDescriptor {
  HurrayDType dtype;
  uint32_t rank;
  /* shape_inline, or HURRAY_MAX_RANK entries owned when the rank was ever
   * above HURRAY__SHAPE_INLINE; always has room for `rank` entries. */
  uint64_t *shape;
  uint64_t shape_inline[HURRAY__SHAPE_INLINE];
  int64_t *strides; /* HURRAY_MAX_RANK entries, owned; NULL: row-major */
  uint64_t byte_offset;

  HurrayLayout layout;
  HurrayQuant quant;

  /* Root-only parts; a composite member keeps them at their defaults. */
  /* buffers_inline, or `buffer_capacity` entries owned once the table
   * outgrew it (or was decoded larger); NULL while the table is empty. */
  HurrayBufferEntry *buffers;
  uint32_t buffer_count;
  uint32_t buffer_capacity;
  HurrayBufferEntry buffers_inline[HURRAY__BUFFERS_INLINE];
  int32_t device_type;
  int32_t device_id;
  HurrayMemoryClass memory_class;

  uint32_t stat_flags;
  double stat_min;
  double stat_max;
  uint64_t stat_nan_count;
  uint64_t stat_zero_count;

  uint32_t shard_rank;
  HurrayShardFields *shard; /* owned; NULL: no shard */

  char *extension_name;
  uint8_t *extension_metadata;
  size_t extension_metadata_len;
};

/* Allocates a descriptor with every field at its default. */
HurrayDescriptor *hurray__descriptor_new(void);

/* A quantization's storage fields, the defaults (no storage axes, nothing
 * packed) when it has none; borrowed from q. */
extern const HurrayQuantStorage hurray__quant_storage_none;
static inline const HurrayQuantStorage *hurray__qs(const HurrayQuant *q) {
  return q->storage != NULL ? q->storage : &hurray__quant_storage_none;
}
/* q's storage fields to write, allocated at their defaults when absent;
 * NULL when out of memory, with q unchanged. */
HurrayQuantStorage *hurray__quant_storage_own(HurrayQuant *q);

/* Room for a shape of `rank` (at most HURRAY_MAX_RANK) entries, keeping
 * those present; false when out of memory, with `d` unchanged. */
bool hurray__descriptor_reserve_rank(HurrayDescriptor *d, uint32_t rank);
/* Room for `count` buffer table entries (buffers_inline while they fit, or
 * memory of its own, the entries so far kept and the rest zero); false when
 * memory runs out, with `d` unchanged. */
bool hurray__descriptor_reserve_buffers(HurrayDescriptor *d, uint32_t count);
/* Make d->strides / d->shard present (zeroed when new); false when out of
 * memory, with `d` unchanged. */
bool hurray__descriptor_add_strides(HurrayDescriptor *d);
/* The same for a COO layout's index buffers (every entry HURRAY_NO_BUFFER). */
bool hurray__layout_add_coo(HurrayLayout *l);
bool hurray__descriptor_add_shard(HurrayDescriptor *d);

/* True when the root-only parts (buffer table, device, statistics, shard,
 * extension) are at their defaults, as a composite member's must be. */
bool hurray__descriptor_is_member_shaped(const HurrayDescriptor *d);

/* Enum range checks shared by setters, decoder and validator. */
bool hurray__role_known(uint32_t role);
bool hurray__sync_mode_known(uint32_t mode);
bool hurray__memory_class_known(uint32_t memory_class);
bool hurray__mx_element_known(uint32_t element);
const char *hurray__role_name(HurrayBufferRole role);
const char *hurray__sync_mode_name(HurraySyncMode mode);
const char *hurray__memory_class_name(HurrayMemoryClass memory_class);
const char *hurray__mx_element_name(HurrayMxElement element);
const char *hurray__sparse_format_name(HurraySparseFormat format);
const char *hurray__quant_kind_name(HurrayQuantKind kind);
/* Storage dtype an MX element type requires. */
HurrayDType hurray__mx_element_dtype(HurrayMxElement element);

/* Codes per word of a packing over elements of `dtype`; 0 when not packed
 * or when the element bits do not divide the word. */
uint32_t hurray__packing_lanes(const HurrayQuantPacking *p, HurrayDType dtype);
/* True when lane j holds element j for every one of `lanes` lanes. */
bool hurray__packing_is_identity(const HurrayQuantPacking *p, uint32_t lanes);

/* True when any packed or two-level field (ADR-0024) differs from its
 * default; such a tensor takes the generic kernel (src/quant/packed.c). */
bool hurray__quant_has_packed(const HurrayQuant *q);
/* True when a QUANT_STORAGE / QUANT_SCALES record is needed. */
bool hurray__quant_has_storage_fields(const HurrayQuant *q);
bool hurray__quant_has_scale_fields(const HurrayQuant *q);

/* The scale tensor's shape in storage order (docs/spec/quantization.md
 * §5.6): per-channel [shape[axis]], NF4 [ceil(numel / block)], block
 * affine the data shape with the blocked axes ceil-divided, permuted by
 * storage_axes. Needs the axes and block sizes in range (validated) and
 * numel to fit; *rank_out gets the rank. */
void hurray__quant_scale_shape(const HurrayDescriptor *d, uint64_t *shape, uint32_t *rank_out);

/* Appends a member without the member-shape check (decoder use). Takes
 * ownership of `name` and `member` on success only. */
HurrayStatus hurray__descriptor_push_member(HurrayDescriptor *d, char *name,
                                            HurrayDescriptor *member);

/* The dtype and shape records of an encoded descriptor, read in place with
 * every bound checked; false when they are not the first known records, are
 * malformed, or the header is wrong (the full decoder then says why). Checks
 * only the form of these two records: hurray_descriptor_decode and
 * hurray_descriptor_validate judge the rest. */
bool hurray__descriptor_peek_shape(const uint8_t *bytes, size_t len, HurrayDType *dtype,
                                   uint32_t *rank, uint64_t shape[HURRAY_MAX_RANK]);

/* Checks `len` bytes are valid UTF-8 without NUL. */
bool hurray__utf8_valid(const char *s, size_t len);

/* The length of the well-formed UTF-8 sequence at s[0, len) and its code
 * point in *cp, or 0 (overlong, surrogate, past U+10FFFF, cut short). */
size_t hurray__utf8_next(const uint8_t *s, size_t len, uint32_t *cp);
/* Code points a terminal acts on or that reorder what it shows: C0, DEL,
 * C1, the bidirectional embeddings, overrides and isolates. */
bool hurray__text_needs_escape(uint32_t cp);

#endif
