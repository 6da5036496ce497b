/*
 * hurray/common.h - export macro, status codes, the error struct, versions
 * and hard limits shared by every layer of libhurray.
 *
 * Error model (ADR-0009): every fallible function returns a HurrayStatus and
 * takes an optional, caller-owned HurrayError*. The library keeps no global
 * mutable state; the message lives in the caller's struct. A message is only
 * meaningful when the function returned something other than HURRAY_OK.
 */
#ifndef HURRAY_COMMON_H
#define HURRAY_COMMON_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* HURRAY_API marks every exported symbol; everything else is hidden. */
#if defined(_WIN32)
#  if defined(HURRAY_BUILDING_LIBRARY)
#    define HURRAY_API __declspec(dllexport)
#  elif defined(HURRAY_STATIC)
#    define HURRAY_API
#  else
#    define HURRAY_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define HURRAY_API __attribute__((visibility("default")))
#else
#  define HURRAY_API
#endif

/* Library version (of this implementation, not of any format):
 * HURRAY_VERSION_MAJOR/MINOR/PATCH/STRING, generated from meson.build. */
#include <hurray/version.h>

/* Version of the in-process C ABI: HurrayBuffer / HurrayBufferList and the
 * capsule that carries them. Raised to 3 by the founding ADR-030, when the
 * capsule pointer became a HurrayBufferList. A consumer compares the
 * producer's value with its own before touching any pointer. */
#define HURRAY_C_ABI_VERSION 3

/* Runtime copies of the compile-time versions, so a program can check the
 * library it actually loaded. */
HURRAY_API uint32_t hurray_abi_version(void);
HURRAY_API const char *hurray_version_string(void);

/* Hard limits applied to every descriptor, built or decoded. Untrusted input
 * beyond these is rejected with HURRAY_ERR_LIMIT before any allocation. */
#define HURRAY_MAX_RANK 32u
#define HURRAY_MAX_BUFFERS 1024u
#define HURRAY_MAX_COMPOSITE_DEPTH 8u
#define HURRAY_MAX_COMPOSITE_MEMBERS 1024u
#define HURRAY_MAX_NAME_BYTES 255u
#define HURRAY_MAX_EXTENSION_METADATA_BYTES (1u << 20)
#define HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES (16u << 20)
#define HURRAY_MAX_ALIGNMENT 4096u
/* Nodes of one descriptor: the root plus every composite member at every
 * depth. Bounds the memory a decoded descriptor takes (each node is a
 * descriptor of its own), whatever its members nest like. */
#define HURRAY_MAX_DESCRIPTOR_NODES 8192u

/* Sentinel for "no buffer" wherever a buffer index is optional. */
#define HURRAY_NO_BUFFER UINT32_MAX

/*
 * Status codes. Values are pinned: they never change meaning, and bindings
 * map each to exactly one exception class. Groups:
 *   1..19    general (arguments, memory, encoding, limits)
 *   20..59   descriptor validation, one code per rule
 *   60..79   buffer placement, one code per rule
 *   80..99   files
 *   100..119 quantization kernels
 */
typedef enum HurrayStatus {
  HURRAY_OK = 0,

  /* general */
  HURRAY_ERR_INVALID_ARGUMENT = 1, /* API misuse: NULL where not allowed, bad enum */
  HURRAY_ERR_NO_MEMORY = 2,
  HURRAY_ERR_UNSUPPORTED = 3, /* newer encoding version, unknown required field */
  HURRAY_ERR_TRUNCATED = 4,   /* encoded bytes end early */
  HURRAY_ERR_MALFORMED = 5,   /* encoded bytes break the encoding rules */
  HURRAY_ERR_LIMIT = 6,       /* a hard limit (HURRAY_MAX_*) is exceeded */
  HURRAY_ERR_OVERFLOW = 7,    /* a size product or sum does not fit in 64 bits */
  HURRAY_ERR_ABI_VERSION = 8, /* producer and consumer ABI versions differ (capsule consumers) */
  HURRAY_ERR_STATE = 9,       /* call not valid in the object's current state */

  /* descriptor validation */
  HURRAY_ERR_DTYPE = 20,               /* dtype unknown or not allowed here */
  HURRAY_ERR_STRIDES = 21,             /* strides/byte_offset a layout or view cannot take */
  HURRAY_ERR_BUFFER_INDEX = 22,        /* a referenced buffer index is not in the table */
  HURRAY_ERR_BUFFER_ROLE = 23,         /* referenced buffer has the wrong role for its use */
  HURRAY_ERR_BUFFER_UNREFERENCED = 24, /* a table entry nothing refers to */
  HURRAY_ERR_BUFFER_TOO_SMALL = 25,    /* table byte_size smaller than the contents need */
  HURRAY_ERR_BUFFER_TABLE = 26,        /* bad alignment value, role or sync_mode in the table */
  HURRAY_ERR_DEVICE = 27,              /* device_tag and memory_class contradict each other */
  HURRAY_ERR_QUANT_LAYOUT = 28,        /* quantization on a layout that cannot carry it */
  HURRAY_ERR_QUANT_DTYPE = 29,         /* storage dtype unfit for the quantization kind */
  HURRAY_ERR_QUANT_AXIS = 30,          /* quantization axis >= rank */
  HURRAY_ERR_QUANT_BLOCK_SIZE = 31,    /* block size zero, or not 32 for MX */
  HURRAY_ERR_QUANT_SCALE = 32,         /* inline scale not finite or zero */
  HURRAY_ERR_QUANT_SCALE_DTYPE = 33,   /* scale buffer dtype not allowed */
  HURRAY_ERR_QUANT_SCALE_COUNT = 34,   /* scale buffer holds the wrong number of scales */
  HURRAY_ERR_QUANT_ZERO_POINT = 35,    /* zero point outside the storage dtype's range */
  HURRAY_ERR_QUANT_ZERO_POINT_DTYPE = 36,
  HURRAY_ERR_QUANT_ZERO_POINT_COUNT = 37,
  HURRAY_ERR_QUANT_MX_ELEMENT = 38,   /* unknown MX element type */
  HURRAY_ERR_SPARSE_INDEX_DTYPE = 39, /* sparse index dtype not int32/int64 */
  HURRAY_ERR_SPARSE_RANK = 40,        /* format needs another rank */
  HURRAY_ERR_SPARSE_NNZ = 41,         /* nnz exceeds what the shape can hold */
  HURRAY_ERR_SPARSE_BLOCK = 42,       /* BSR block zero or not dividing the shape */
  HURRAY_ERR_PAGED_AXIS = 43,         /* paged axis >= rank */
  HURRAY_ERR_PAGED_PAGE_SIZE = 44,    /* page size of zero */
  HURRAY_ERR_PAGED_TABLE_DTYPE = 45,  /* page table dtype not int32/int64 */
  HURRAY_ERR_COMPOSITE_DEPTH = 46,    /* members nested deeper than the limit */
  HURRAY_ERR_COMPOSITE_MEMBER = 47,   /* no members, or a member carrying root-only parts */
  HURRAY_ERR_COMPOSITE_NAME = 48,     /* member name empty, not UTF-8 or duplicated */
  HURRAY_ERR_STATISTICS = 49,         /* counts exceed the element count, min > max */
  HURRAY_ERR_SHARD_RANK = 50,         /* shard rank differs from the tensor rank */
  HURRAY_ERR_SHARD_BOUNDS = 51,       /* offset + local extent beyond the global shape */
  HURRAY_ERR_EXTENSION = 52,          /* extension name empty or not UTF-8 */
  HURRAY_ERR_QUANT_PACKING = 53,      /* storage axes or word packing not a valid layout */
  HURRAY_ERR_QUANT_FIELD = 54,        /* packed/two-level field the kind or others refuse */

  /* buffer placement */
  HURRAY_ERR_BUFFER_COUNT = 60,     /* list length != descriptor buffer count */
  HURRAY_ERR_BUFFER_SIZE = 61,      /* handle byte_size < what the table declares */
  HURRAY_ERR_BUFFER_ALIGNMENT = 62, /* pointer not aligned as the table requires */
  /* 63 is retired: hurray_buffer_create already refuses NULL non-empty data. */
  HURRAY_ERR_DEVICE_MISMATCH = 64,     /* buffer not on the descriptor's device/memory class */
  HURRAY_ERR_SYNC_MODE_MISMATCH = 65,  /* handle sync_mode differs from the table */
  HURRAY_ERR_PAGE_TABLE_ENTRY = 66,    /* page table entry outside the pool */
  HURRAY_ERR_SPARSE_INDEX_BOUNDS = 67, /* a sparse index outside the shape */
  HURRAY_ERR_SPARSE_INDPTR = 68,       /* index pointers not 0..nnz non-decreasing */
  HURRAY_ERR_SPARSE_ORDER = 69,        /* canonical COO not sorted and unique */
  HURRAY_ERR_QUANT_GROUP_INDEX = 70,   /* a group index entry outside [0, groups) */

  /* files (hurray/io.h) */
  HURRAY_ERR_IO = 80,             /* the operating system refused a read, write, sync or rename */
  HURRAY_ERR_NOT_FOUND = 81,      /* no tensor or metadata key of that name */
  HURRAY_ERR_DUPLICATE_NAME = 82, /* a name written twice, or twice in a file's index */
  HURRAY_ERR_CHECKSUM = 83,       /* stored checksum differs from the bytes */
  HURRAY_ERR_BAD_MAGIC = 84,      /* not a hurray file */
  HURRAY_ERR_RANGE = 85,          /* an offset or length reaches outside its region */
  HURRAY_ERR_OVERLAP = 86,        /* two buffers of a file share bytes */
  HURRAY_ERR_CANCELLED = 87,      /* the caller's cancel hook stopped a write or a read */

  /* quantization kernels (hurray/quant.h) */
  HURRAY_ERR_NOT_FINITE = 100 /* NaN or Inf where a scheme needs finite input */
} HurrayStatus;

/* Caller-owned error details. Zero-initialise it, pass its address, read
 * `message` only after a failure. `code` repeats the returned status.
 *
 * `os_errno` is the errno of the system call that failed when the failure
 * came from the operating system (HURRAY_ERR_IO, and HURRAY_ERR_NOT_FOUND
 * for a missing file: ENOENT, EACCES, EISDIR, ...), so that bindings can
 * raise their platform error (Python: the matching OSError subclass); 0 for
 * every other failure. A file that is not a regular file gets EISDIR for a
 * directory and ENXIO for anything else (FIFO, socket, device), the errno
 * open(2) itself gives for a special file it cannot open.
 *
 * os_errno was added in library 0.1 without changing the struct's size
 * (516 bytes) or the offset of `code` and `message`: it takes the last four
 * bytes of what used to be a 512-byte message. A program built against the
 * older header keeps working (it sees those bytes as the unused tail of
 * its message, after the NUL); one built against this header that runs on
 * an older library reads 0 there (or, from a message of 508 bytes or more,
 * bytes that are no errno: such messages never occur for IO failures). */
#define HURRAY_ERROR_MESSAGE_BYTES 508
typedef struct HurrayError {
  HurrayStatus code;
  char message[HURRAY_ERROR_MESSAGE_BYTES];
  int32_t os_errno;
} HurrayError;

/* Stable identifier of a status, e.g. "HURRAY_ERR_QUANT_AXIS". Never NULL;
 * unknown values give "HURRAY_ERR_UNKNOWN". The string is static. */
HURRAY_API const char *hurray_status_name(HurrayStatus status);

/* Untrusted text (a name or value read from a file) made safe to show on
 * one line of a terminal or a log. Bytes that are not UTF-8 become \xNN;
 * newline, carriage return and tab \n \r \t; other C0 controls and DEL
 * \xNN; C1 controls and the bidirectional embeddings, overrides and
 * isolates \u{NNNN}; everything else is copied. With
 * HURRAY_ESCAPE_BACKSLASH a backslash becomes \\ as well, so that every
 * escape is unambiguous (for names shown as data); without it the result
 * holds no character it would escape, so escaping it again changes
 * nothing (for messages that quote names, escaped at each layer they
 * pass). Writes at most `out_size` bytes into `out`, NUL-terminated
 * (nothing when `out_size` is 0), never cutting an escape or a character in
 * half; returns the length the whole escaped text needs, without the NUL:
 * as with snprintf, a result >= out_size means `out` holds a prefix.
 * HURRAY_ESCAPE_JSON writes JSON string escapes instead (\uNNNN, and
 * \ufffd for a byte that is not UTF-8); with HURRAY_ESCAPE_BACKSLASH a
 * quote becomes \" too, so the result is the inside of a JSON string. */
#define HURRAY_ESCAPE_BACKSLASH 1u
#define HURRAY_ESCAPE_JSON 2u
HURRAY_API size_t hurray_escape_text(const char *text, size_t len, unsigned flags, char *out,
                                     size_t out_size);

/* Frees memory the library handed to the caller as a plain allocation
 * (encoded bytes, JSON text). NULL is allowed. Do not use it on handles:
 * they have their own destroy functions. */
HURRAY_API void hurray_free(void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_COMMON_H */
