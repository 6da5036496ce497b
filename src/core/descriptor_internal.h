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
  uint32_t coo_index_buffers[HURRAY_MAX_RANK];
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
} HurrayQuant;

struct HurrayDescriptor {
  HurrayDType dtype;
  uint32_t rank;
  uint64_t shape[HURRAY_MAX_RANK];
  bool has_strides;
  int64_t strides[HURRAY_MAX_RANK];
  uint64_t byte_offset;

  HurrayLayout layout;
  HurrayQuant quant;

  /* Root-only parts; a composite member keeps them at their defaults. */
  HurrayBufferEntry *buffers;
  uint32_t buffer_count;
  uint32_t buffer_capacity;
  int32_t device_type;
  int32_t device_id;
  HurrayMemoryClass memory_class;

  uint32_t stat_flags;
  double stat_min;
  double stat_max;
  uint64_t stat_nan_count;
  uint64_t stat_zero_count;

  bool has_shard;
  uint32_t shard_rank;
  uint64_t shard_global[HURRAY_MAX_RANK];
  uint64_t shard_offsets[HURRAY_MAX_RANK];

  char *extension_name;
  uint8_t *extension_metadata;
  size_t extension_metadata_len;
};

/* Allocates a descriptor with every field at its default. */
HurrayDescriptor *hurray__descriptor_new(void);

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
