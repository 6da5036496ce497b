/*
 * Sources, targets and hurray_convert_file (include/hurray/convert.h).
 *
 * A foreign source maps its whole file read-only and parses the header
 * from the mapping; dense tensors are views of it (no copy, no resident
 * memory until read), kept alive by a reference count so buffers outlive
 * the source. Foreign targets keep each tensor's descriptor and buffers
 * until finish, because safetensors and GGUF put every tensor's place in
 * the header, before the data.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../buffer/output_limits.h"
#include "../core/checked.h"
#include "../core/c_locale.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "../io/format.h"
#include "../io/hash.h"
#include "../io/file_mappings.h"
#include "../io/reader_origin.h"
#include "../io/sys.h"
#include "convert_sys.h"
#include "formats_internal.h"

/* ------------------------------------------------------------- formats */

HurrayFormat hurray_format_from_path(const char *path) {
  if (path == NULL) return HURRAY_FORMAT_UNKNOWN;
  size_t n = strlen(path);
  static const struct {
    const char *suffix;
    HurrayFormat format;
  } table[] = {{".hurray", HURRAY_FORMAT_HURRAY},
               {".safetensors", HURRAY_FORMAT_SAFETENSORS},
               {".gguf", HURRAY_FORMAT_GGUF}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
    size_t k = strlen(table[i].suffix);
    if (n >= k && strcasecmp(path + n - k, table[i].suffix) == 0) return table[i].format;
  }
  return HURRAY_FORMAT_UNKNOWN;
}

HurrayFormat hurray_format_sniff(const char *path) {
  if (path == NULL) return HURRAY_FORMAT_UNKNOWN;
  int fd;
  struct stat sb;
  if (hurray__open_regular(path, &fd, &sb, NULL) != HURRAY_OK) return HURRAY_FORMAT_UNKNOWN;
  uint8_t b[9] = {0};
  ssize_t n = pread(fd, b, sizeof b, 0);
  close(fd);
  static const uint8_t hurray_magic[8] = {0x89, 'H', 'R', 'Y', '\r', '\n', 0x1A, '\n'};
  if (n >= 8 && memcmp(b, hurray_magic, 8) == 0) return HURRAY_FORMAT_HURRAY;
  if (n >= 4 && memcmp(b, "GGUF", 4) == 0) return HURRAY_FORMAT_GGUF;
  if (n == 9 && b[8] == '{') return HURRAY_FORMAT_SAFETENSORS;
  return HURRAY_FORMAT_UNKNOWN;
}

/* Whether `format` is one of the HurrayFormat values (a caller's enum may
 * hold any int). */
static bool known_format(HurrayFormat format) {
  return format >= HURRAY_FORMAT_UNKNOWN && format <= HURRAY_FORMAT_GGUF;
}

static HurrayStatus bad_format(HurrayError *error, const char *role, HurrayFormat format) {
  return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "%s format: unknown value %d", role,
                      (int)format);
}

const char *hurray_format_name(HurrayFormat format) {
  switch (format) {
    case HURRAY_FORMAT_HURRAY: return "hurray";
    case HURRAY_FORMAT_SAFETENSORS: return "safetensors";
    case HURRAY_FORMAT_GGUF: return "gguf";
    default: return "unknown";
  }
}

/* Names from a file may hold any byte: the message stays one line, and
 * shows nothing a terminal would act on (hurray_escape_text). */
static HurrayStatus one_line(HurrayStatus s, HurrayError *error) {
  if (s != HURRAY_OK && error != NULL) {
    /* Idempotent (no HURRAY_ESCAPE_BACKSLASH): a message escaped by an
     * inner call passes unchanged through an outer one. */
    char escaped[sizeof error->message];
    hurray_escape_text(error->message, strlen(error->message), 0, escaped, sizeof escaped);
    memcpy(error->message, escaped, sizeof escaped);
  }
  return s;
}

/* ------------------------------------------------------------ mapping */

typedef struct Mapping {
  const uint8_t *base;
  uint64_t len;
  bool owned; /* munmap at the end (a file), or borrowed (memory) */
  int fd;
  atomic_size_t refs;
} Mapping;

static void mapping_unref(Mapping *m) {
  if (m == NULL) return;
  if (atomic_fetch_sub(&m->refs, 1) == 1) {
    if (m->owned && m->len > 0) munmap((void *)m->base, (size_t)m->len);
    if (m->fd >= 0) close(m->fd);
    free(m);
  }
}

static void release_mapping(void *data, void *ctx) {
  (void)data;
  mapping_unref(ctx);
}

static void release_free(void *data, void *ctx) {
  (void)ctx;
  free(data);
}

static void drop_list_pages(const HurrayBufferList *l) {
  for (size_t i = 0; i < hurray_buffer_list_len(l); i++) {
    const HurrayBuffer *b = hurray_buffer_list_get(l, i);
    hurray__drop_mapped_pages(hurray_buffer_data(b), hurray_buffer_size(b));
  }
}

static uint32_t alignment_of(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t align = 64;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

/* A buffer viewing [p, p + len) of the mapping, holding a reference. */
static HurrayStatus view_buffer(Mapping *m, const uint8_t *p, uint64_t len, HurrayBuffer **out,
                                HurrayError *error) {
  atomic_fetch_add(&m->refs, 1);
  HURRAY_RETURN_NOT_OK(hurray_buffer_create((void *)p, len, release_mapping, m, out,
                                            error)); /* released on failure */
  HurrayStatus s = hurray_buffer_set_alignment(*out, alignment_of(p), error);
  if (s != HURRAY_OK) {
    hurray_buffer_destroy(*out);
    *out = NULL;
  }
  return s;
}

/* -------------------------------------------------------------- source */

struct HurraySource {
  HurrayFormat format;
  Mapping *map;
  HurraySTFile st;
  HurrayGGUFFile gg;
  HurrayReader *reader;
  bool verify;
  bool verified;     /* every checksum already checked (hurray_convert_file) */
  char **type_names; /* hurray: dtype names */
  HurrayMetaList metadata;
  const char **left; /* hurray: metadata keys not handed on (the reader's) */
  size_t left_count;
};

static void source_free(HurraySource *s) {
  if (s == NULL) return;
  hurray__st_free(&s->st);
  hurray__gguf_free(&s->gg);
  hurray_reader_close(s->reader);
  mapping_unref(s->map);
  free(s->type_names);
  free(s->left);
  hurray__meta_free(&s->metadata);
  free(s);
}

void hurray_source_close(HurraySource *source) { source_free(source); }

static HurrayStatus copy_metadata(HurrayMetaList *dst, const HurrayMetaList *src,
                                  HurrayError *error) {
  for (size_t i = 0; i < src->count; i++) {
    const HurrayMeta *m = &src->items[i];
    const void *v = m->type == HURRAY_METADATA_INT     ? (const void *)&m->i
                    : m->type == HURRAY_METADATA_FLOAT ? (const void *)&m->f
                    : m->type == HURRAY_METADATA_BOOL  ? (const void *)&m->b
                                                       : (const void *)m->bytes;
    HURRAY_RETURN_NOT_OK(hurray__meta_set(dst, m->key, m->type, v, m->len, error));
  }
  return HURRAY_OK;
}

static HurrayStatus parse_foreign(HurraySource *s, HurrayError *error) {
  if (s->format == HURRAY_FORMAT_SAFETENSORS) {
    HURRAY_RETURN_NOT_OK(
        one_line(hurray__st_parse(s->map->base, s->map->len, &s->st, error), error));
    return copy_metadata(&s->metadata, &s->st.metadata, error);
  }
  HURRAY_RETURN_NOT_OK(
      one_line(hurray__gguf_parse(s->map->base, s->map->len, &s->gg, error), error));
  return copy_metadata(&s->metadata, &s->gg.metadata, error);
}

HurrayStatus hurray_source_open_memory(const void *data, uint64_t size, HurrayFormat format,
                                       HurraySource **out, HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (out == NULL || (data == NULL && size != 0) ||
      (format != HURRAY_FORMAT_SAFETENSORS && format != HURRAY_FORMAT_GGUF)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "data, out and a safetensors or GGUF format are required");
  }
  HurraySource *s = calloc(1, sizeof *s);
  Mapping *m = calloc(1, sizeof *m);
  if (s == NULL || m == NULL) {
    free(s);
    free(m);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  m->base = data;
  m->len = size;
  m->fd = -1;
  atomic_init(&m->refs, 1);
  s->map = m;
  s->format = format;
  HurrayStatus st = parse_foreign(s, error);
  if (st != HURRAY_OK) {
    source_free(s);
    return st;
  }
  *out = s;
  return HURRAY_OK;
}

/* `key` (the reader's, borrowed) is not handed on; `n` bounds how many. */
static HurrayStatus leave_behind(HurraySource *s, const char *key, size_t n, HurrayError *error) {
  if (s->left == NULL) s->left = calloc(n, sizeof *s->left);
  if (s->left == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  s->left[s->left_count++] = key;
  return HURRAY_OK;
}

size_t hurray_source_left_metadata_count(const HurraySource *source) {
  return source != NULL ? source->left_count : 0;
}

const char *hurray_source_left_metadata_key(const HurraySource *source, size_t index) {
  return source != NULL && index < source->left_count ? source->left[index] : NULL;
}

static HurrayStatus open_hurray(HurraySource *s, const char *path, HurrayError *error) {
  HurrayReaderOptions opts = HURRAY_READER_OPTIONS_INIT;
  HURRAY_RETURN_NOT_OK(hurray_reader_open(path, &opts, &s->reader, error));
  /* The names are copied now, on their first call: hurray_source_tensor_name
   * then never returns NULL for a tensor that exists. */
  if (hurray_reader_tensor_count(s->reader) > 0 &&
      hurray_reader_tensor_name(s->reader, 0) == NULL) {
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory for the tensor names");
  }
  size_t n = hurray_reader_metadata_count(s->reader);
  for (size_t i = 0; i < n; i++) {
    const char *key = hurray_reader_metadata_key(s->reader, i);
    HurrayMetadataType t = hurray_reader_metadata_type(s->reader, i);
    HurrayStatus st;
    /* A 1.0 writer could store this key as ordinary metadata; 1.1 reserves
     * it for the chunk table, and no writer may store it again
     * (file-format.md 7.1): the copy goes without it. */
    if (strcmp(key, HURRAY_CHUNK_CHECKSUMS_KEY) == 0) {
      HURRAY_RETURN_NOT_OK(leave_behind(s, key, n, error));
      continue;
    }
    switch (t) {
      case HURRAY_METADATA_STRING: {
        const char *v;
        st = hurray_reader_metadata_string(s->reader, key, &v, error);
        if (st == HURRAY_OK) st = hurray__meta_set(&s->metadata, key, t, v, strlen(v), error);
        break;
      }
      case HURRAY_METADATA_INT: {
        int64_t v;
        st = hurray_reader_metadata_int(s->reader, key, &v, error);
        if (st == HURRAY_OK) st = hurray__meta_set(&s->metadata, key, t, &v, 0, error);
        break;
      }
      case HURRAY_METADATA_FLOAT: {
        double v;
        st = hurray_reader_metadata_float(s->reader, key, &v, error);
        if (st == HURRAY_OK) st = hurray__meta_set(&s->metadata, key, t, &v, 0, error);
        break;
      }
      case HURRAY_METADATA_BOOL: {
        bool v;
        st = hurray_reader_metadata_bool(s->reader, key, &v, error);
        if (st == HURRAY_OK) st = hurray__meta_set(&s->metadata, key, t, &v, 0, error);
        break;
      }
      case HURRAY_METADATA_BYTES: {
        const uint8_t *v;
        size_t len;
        st = hurray_reader_metadata_bytes(s->reader, key, &v, &len, error);
        if (st == HURRAY_OK) {
          st = hurray__meta_set(&s->metadata, key, HURRAY_METADATA_BYTES, v, len, error);
        }
        break;
      }
      default:
        /* A newer minor version's type: written as bytes it would change
         * meaning, and as itself into a file that claims an older minor
         * version; the copy goes without it (file-format.md 11). */
        st = leave_behind(s, key, n, error);
        break;
    }
    HURRAY_RETURN_NOT_OK(st);
  }
  return HURRAY_OK;
}

HurrayStatus hurray_source_open(const char *path, HurrayFormat format,
                                const HurraySourceOptions *options, HurraySource **out,
                                HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (path == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "path and out are required");
  }
  static const HurraySourceOptions defaults = HURRAY_SOURCE_OPTIONS_INIT;
  if (options == NULL) options = &defaults;
  if (options->version != HURRAY_SOURCE_OPTIONS_VERSION) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "source options: unknown version %u",
                        options->version);
  }
  if (!known_format(format)) return bad_format(error, "source", format);
  if (format == HURRAY_FORMAT_UNKNOWN) format = hurray_format_from_path(path);
  if (format == HURRAY_FORMAT_UNKNOWN) format = hurray_format_sniff(path);
  if (format == HURRAY_FORMAT_UNKNOWN) {
    int fd;
    struct stat sb;
    HURRAY_RETURN_NOT_OK(hurray__open_regular(path, &fd, &sb, error));
    close(fd);
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "cannot tell the format of %s (not .hurray, .safetensors or .gguf)", path);
  }
  HurraySource *s = calloc(1, sizeof *s);
  if (s == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  s->format = format;
  s->verify = options->verify_checksums;
  HurrayStatus st;
  if (format == HURRAY_FORMAT_HURRAY) {
    st = open_hurray(s, path, error);
  } else {
    int fd;
    struct stat sb;
    st = hurray__open_regular(path, &fd, &sb, error);
    if (st == HURRAY_OK && !hurray__fits_object((uint64_t)sb.st_size)) {
      st = hurray__fail(error, HURRAY_ERR_LIMIT,
                        "%s: file of %llu bytes does not fit this process's address space", path,
                        (unsigned long long)sb.st_size);
      close(fd);
    }
    if (st == HURRAY_OK) {
      Mapping *m = calloc(1, sizeof *m);
      void *base = sb.st_size > 0 ? mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0)
                                  : NULL;
      if (m == NULL || base == MAP_FAILED) {
        int saved = errno;
        st = m == NULL ? hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory")
                       : hurray__fail_os(error, HURRAY_ERR_IO, saved, "cannot map %s: %s", path,
                                         strerror(saved));
        if (base != MAP_FAILED && base != NULL) munmap(base, (size_t)sb.st_size);
        free(m);
        close(fd);
      } else {
        if (base != NULL) (void)madvise(base, (size_t)sb.st_size, MADV_SEQUENTIAL);
        m->base = base;
        m->len = (uint64_t)sb.st_size;
        m->owned = true;
        m->fd = fd; /* kept for copy_file_range */
        atomic_init(&m->refs, 1);
        s->map = m;
        st = parse_foreign(s, error);
        if (st != HURRAY_OK) {
          /* Name the file: the parsers speak of the format only. */
          char msg[HURRAY_ERROR_MESSAGE_BYTES];
          snprintf(msg, sizeof msg, "%s", error != NULL ? error->message : "");
          hurray__fail(error, st, "%.200s: %s", path, msg);
        }
      }
    }
  }
  if (st != HURRAY_OK) {
    source_free(s);
    return one_line(st, error);
  }
  *out = s;
  return HURRAY_OK;
}

HurrayFormat hurray_source_format(const HurraySource *s) {
  return s != NULL ? s->format : HURRAY_FORMAT_UNKNOWN;
}

size_t hurray_source_tensor_count(const HurraySource *s) {
  if (s == NULL) return 0;
  switch (s->format) {
    case HURRAY_FORMAT_HURRAY: return hurray_reader_tensor_count(s->reader);
    case HURRAY_FORMAT_SAFETENSORS: return s->st.count;
    default: return s->gg.count;
  }
}

const char *hurray_source_tensor_name(const HurraySource *s, size_t i) {
  if (i >= hurray_source_tensor_count(s)) return NULL;
  switch (s->format) {
    case HURRAY_FORMAT_HURRAY: return hurray_reader_tensor_name(s->reader, i);
    case HURRAY_FORMAT_SAFETENSORS: return s->st.tensors[i].name;
    default: return s->gg.tensors[i].name;
  }
}

/* Names of a hurray source: never NULL, open_hurray copied them. */
static HurrayStatus hurray_descriptor_of(const HurraySource *s, size_t i, HurrayDescriptor **d,
                                         HurrayError *error) {
  return hurray_reader_get_descriptor(s->reader, hurray_reader_tensor_name(s->reader, i), d,
                                      error);
}

const char *hurray_source_tensor_type(const HurraySource *s, size_t i) {
  if (i >= hurray_source_tensor_count(s)) return NULL;
  switch (s->format) {
    case HURRAY_FORMAT_HURRAY: {
      HurrayDescriptor *d = NULL;
      if (hurray_descriptor_of(s, i, &d, NULL) != HURRAY_OK) return "?";
      const char *name = hurray_dtype_name(hurray_descriptor_dtype(d));
      hurray_descriptor_destroy(d);
      return name != NULL ? name : "?";
    }
    case HURRAY_FORMAT_SAFETENSORS: return s->st.tensors[i].type_name;
    default: return hurray__gguf_type_name(s->gg.tensors[i].type);
  }
}

uint64_t hurray_source_tensor_bytes(const HurraySource *s, size_t i) {
  if (i >= hurray_source_tensor_count(s)) return 0;
  switch (s->format) {
    case HURRAY_FORMAT_HURRAY: {
      HurrayDescriptor *d = NULL;
      if (hurray_descriptor_of(s, i, &d, NULL) != HURRAY_OK) return 0;
      uint64_t total = 0;
      for (uint32_t b = 0; b < hurray_descriptor_buffer_count(d); b++) {
        total += hurray_descriptor_buffer_size(d, b);
      }
      hurray_descriptor_destroy(d);
      return total;
    }
    case HURRAY_FORMAT_SAFETENSORS: return s->st.tensors[i].end - s->st.tensors[i].begin;
    default: return s->gg.tensors[i].nbytes;
  }
}

HurrayStatus hurray_source_check_tensor(const HurraySource *s, size_t i, HurrayError *error) {
  if (i >= hurray_source_tensor_count(s)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "tensor index %zu out of range", i);
  }
  if (s->format == HURRAY_FORMAT_GGUF && !hurray__gguf_type_supported(s->gg.tensors[i].type)) {
    return one_line(
        hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                     "GGUF tensor '%.200s' has type %s, which hurray cannot import "
                     "losslessly; supported: %s",
                     s->gg.tensors[i].name, hurray__gguf_type_name(s->gg.tensors[i].type),
                     hurray__gguf_supported_list),
        error);
  }
  return HURRAY_OK;
}

static HurrayDType gguf_dense_dtype(uint32_t type) {
  switch (type) {
    case HURRAY_GGUF_TYPE_F32: return HURRAY_DTYPE_FLOAT32;
    case HURRAY_GGUF_TYPE_F16: return HURRAY_DTYPE_FLOAT16;
    case HURRAY_GGUF_TYPE_BF16: return HURRAY_DTYPE_BFLOAT16;
    case HURRAY_GGUF_TYPE_F64: return HURRAY_DTYPE_FLOAT64;
    case HURRAY_GGUF_TYPE_I8: return HURRAY_DTYPE_INT8;
    case HURRAY_GGUF_TYPE_I16: return HURRAY_DTYPE_INT16;
    case HURRAY_GGUF_TYPE_I32: return HURRAY_DTYPE_INT32;
    case HURRAY_GGUF_TYPE_I64: return HURRAY_DTYPE_INT64;
    default: return HURRAY_DTYPE_INVALID;
  }
}

/* The descriptor of a foreign tensor; `data_align` the data buffer's. */
static HurrayStatus foreign_descriptor(const HurraySource *s, size_t i, uint32_t data_align,
                                       HurrayDescriptor **out, HurrayError *error) {
  HurrayDType dtype;
  uint32_t rank;
  uint64_t shape[HURRAY_MAX_RANK];
  uint64_t nbytes;
  bool quant = false, coded = false;
  uint32_t gtype = 0;
  if (s->format == HURRAY_FORMAT_SAFETENSORS) {
    const HurraySTTensor *t = &s->st.tensors[i];
    dtype = t->dtype;
    rank = t->rank;
    if (rank) memcpy(shape, t->shape, rank * sizeof shape[0]);
    nbytes = t->end - t->begin;
  } else {
    HURRAY_RETURN_NOT_OK(hurray_source_check_tensor(s, i, error));
    const HurrayGGUFTensor *t = &s->gg.tensors[i];
    gtype = t->type;
    rank = t->n_dims;
    for (uint32_t d = 0; d < rank; d++) shape[d] = t->dims[rank - 1 - d];
    nbytes = t->nbytes;
    quant = gtype == HURRAY_GGUF_TYPE_Q8_0 || gtype == HURRAY_GGUF_TYPE_Q4_0;
    coded = hurray__gguf_block_coded(gtype);
    dtype = quant   ? (gtype == HURRAY_GGUF_TYPE_Q8_0 ? HURRAY_DTYPE_INT8 : HURRAY_DTYPE_UINT4)
            : coded ? HURRAY_DTYPE_UINT8
                    : gguf_dense_dtype(gtype);
    if ((quant || coded) && rank == 0) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "GGUF tensor '%.200s' is quantized with no dimensions", t->name);
    }
  }
  HurrayDescriptor *d = NULL;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_create(dtype, rank, shape, &d, error));
  HurrayStatus st;
  if (!quant) {
    st = hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, nbytes, data_align, HURRAY_SYNC_READY,
                                      NULL, error);
    if (st == HURRAY_OK) st = hurray_descriptor_set_layout_dense(d, 0, error);
    /* The blocks stay as they are in the file: one buffer, no re-layout. */
    if (st == HURRAY_OK && coded) {
      st = hurray_descriptor_set_quant_block_coded(d, (HurrayBlockFormat)gtype, rank - 1, error);
    }
  } else {
    uint64_t nb = nbytes / (gtype == HURRAY_GGUF_TYPE_Q8_0 ? 34 : 18);
    st = hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA,
                                      nb * (gtype == HURRAY_GGUF_TYPE_Q8_0 ? 32 : 16), 64,
                                      HURRAY_SYNC_READY, NULL, error);
    if (st == HURRAY_OK) st = hurray_descriptor_set_layout_dense(d, 0, error);
    if (st == HURRAY_OK) {
      st = hurray_descriptor_add_buffer(d, HURRAY_ROLE_SCALES, nb * 2, 64, HURRAY_SYNC_READY, NULL,
                                        error);
    }
    if (st == HURRAY_OK) {
      st = hurray_descriptor_set_quant_block_affine(d, rank - 1, 32, 1, HURRAY_DTYPE_FLOAT16,
                                                    error);
    }
    if (st == HURRAY_OK) {
      st = hurray_descriptor_set_quant_zero_point(d, gtype == HURRAY_GGUF_TYPE_Q8_0 ? 0 : 8,
                                                  error);
    }
  }
  if (st == HURRAY_OK) st = hurray_descriptor_validate(d, error);
  if (st != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    return st;
  }
  *out = d;
  return HURRAY_OK;
}

/* Where tensor i of a safetensors or GGUF source lies in the mapping;
 * true for GGUF Q8_0/Q4_0 blocks, which get_tensor re-lays out into fresh
 * 64-byte aligned memory. The pointer alone: no page is touched. */
static bool foreign_bytes(const HurraySource *s, size_t i, const uint8_t **p, uint64_t *nbytes) {
  if (s->format == HURRAY_FORMAT_SAFETENSORS) {
    *p = s->map->base + s->st.data_start + s->st.tensors[i].begin;
    *nbytes = s->st.tensors[i].end - s->st.tensors[i].begin;
    return false;
  }
  *p = s->map->base + s->gg.data_start + s->gg.tensors[i].offset;
  *nbytes = s->gg.tensors[i].nbytes;
  uint32_t gtype = s->gg.tensors[i].type;
  return gtype == HURRAY_GGUF_TYPE_Q8_0 || gtype == HURRAY_GGUF_TYPE_Q4_0;
}

HurrayStatus hurray_source_get_descriptor(const HurraySource *s, size_t i, HurrayDescriptor **out,
                                          HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (s == NULL || out == NULL || i >= hurray_source_tensor_count(s)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "source, out and an index in range "
                        "are required");
  }
  if (s->format == HURRAY_FORMAT_HURRAY) return hurray_descriptor_of(s, i, out, error);
  const uint8_t *p;
  uint64_t nbytes;
  bool blocks = foreign_bytes(s, i, &p, &nbytes);
  return foreign_descriptor(s, i, blocks ? 64 : alignment_of(p), out, error);
}

static HurrayStatus push_or_destroy(HurrayBufferList *list, HurrayBuffer *b, HurrayError *error) {
  HurrayStatus s = hurray_buffer_list_push(list, b, error);
  if (s != HURRAY_OK) hurray_buffer_destroy(b);
  return s;
}

HurrayStatus hurray_source_get_tensor(HurraySource *s, size_t i, HurrayDescriptor **d_out,
                                      HurrayBufferList **b_out, HurrayError *error) {
  if (d_out != NULL) *d_out = NULL;
  if (b_out != NULL) *b_out = NULL;
  if (s == NULL || d_out == NULL || b_out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "source and outputs are required");
  }
  if (i >= hurray_source_tensor_count(s)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "tensor index %zu out of range", i);
  }
  if (s->format == HURRAY_FORMAT_HURRAY) {
    /* The reader quotes names as they are; this API's messages escape them. */
    const char *name = hurray_reader_tensor_name(s->reader, i);
    if (s->verify && !s->verified) {
      HURRAY_RETURN_NOT_OK(one_line(hurray_reader_verify(s->reader, name, error), error));
    }
    return one_line(hurray_reader_get_tensor(s->reader, name, d_out, b_out, error), error);
  }
  const uint8_t *p;
  uint64_t nbytes;
  bool quant = foreign_bytes(s, i, &p, &nbytes);
  HurrayDescriptor *d = NULL;
  HURRAY_RETURN_NOT_OK(foreign_descriptor(s, i, quant ? 64 : alignment_of(p), &d, error));
  HurrayBufferList *list = NULL;
  HurrayStatus st = hurray_buffer_list_create(&list, error);
  if (st == HURRAY_OK && !quant) {
    HurrayBuffer *b = NULL;
    st = view_buffer(s->map, p, nbytes, &b, error);
    if (st == HURRAY_OK) st = push_or_destroy(list, b, error);
  } else if (st == HURRAY_OK) {
    uint32_t gtype = s->gg.tensors[i].type;
    uint64_t nb = nbytes / (gtype == HURRAY_GGUF_TYPE_Q8_0 ? 34 : 18);
    uint64_t code_bytes = hurray_descriptor_buffer_size(d, 0), scale_bytes = nb * 2;
    void *codes = NULL, *scales = NULL;
    bool fits = hurray__fits_object(code_bytes); /* false on a 32-bit host past 2 GiB */
    if (fits && posix_memalign(&codes, 64, code_bytes ? (size_t)code_bytes : 64) != 0)
      codes = NULL;
    if (fits && posix_memalign(&scales, 64, scale_bytes ? (size_t)scale_bytes : 64) != 0) {
      scales = NULL;
    }
    if (codes == NULL || scales == NULL) {
      free(codes);
      free(scales);
      st = fits ? hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory for tensor %.200s",
                               s->gg.tensors[i].name)
                : hurray__fail(error, HURRAY_ERR_LIMIT,
                               "tensor %.200s: %llu bytes of codes do not fit this process's "
                               "address space",
                               s->gg.tensors[i].name, (unsigned long long)code_bytes);
    } else {
      hurray__gguf_blocks_to_codes(gtype, p, nb, codes, scales);
      HurrayBuffer *b = NULL;
      st = hurray_buffer_create(codes, code_bytes, release_free, NULL, &b, error);
      if (st == HURRAY_OK) st = hurray_buffer_set_alignment(b, 64, error);
      if (st == HURRAY_OK) st = push_or_destroy(list, b, error);
      else hurray_buffer_destroy(b);
      b = NULL;
      if (st == HURRAY_OK) {
        st = hurray_buffer_create(scales, scale_bytes, release_free, NULL, &b, error);
        if (st == HURRAY_OK) st = hurray_buffer_set_alignment(b, 64, error);
        if (st == HURRAY_OK) st = push_or_destroy(list, b, error);
        else hurray_buffer_destroy(b);
      } else {
        free(scales);
      }
    }
  }
  if (st == HURRAY_OK) st = hurray_validate_buffer_placement(d, list, error);
  if (st != HURRAY_OK) {
    hurray_descriptor_destroy(d);
    hurray_buffer_list_destroy(list);
    return st;
  }
  *d_out = d;
  *b_out = list;
  return HURRAY_OK;
}

size_t hurray_source_metadata_count(const HurraySource *s) {
  return s != NULL ? s->metadata.count : 0;
}

HurrayStatus hurray_source_metadata(const HurraySource *s, size_t i, const char **key,
                                    HurrayMetadataType *type, const void **value, size_t *len,
                                    HurrayError *error) {
  if (s == NULL || i >= s->metadata.count || key == NULL || type == NULL || value == NULL ||
      len == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "bad metadata index or outputs");
  }
  const HurrayMeta *m = &s->metadata.items[i];
  *key = m->key;
  *type = m->type;
  *len = m->len;
  *value = m->type == HURRAY_METADATA_INT     ? (const void *)&m->i
           : m->type == HURRAY_METADATA_FLOAT ? (const void *)&m->f
           : m->type == HURRAY_METADATA_BOOL  ? (const void *)&m->b
                                              : (const void *)m->bytes;
  return HURRAY_OK;
}

/* -------------------------------------------------------------- target */

typedef struct Entry {
  char *name;
  HurrayDescriptor *d;
  HurrayBufferList *buffers;
  uint32_t gtype; /* GGUF type */
  uint64_t nbytes;
  long order;
  int src_fd; /* >= 0: the data buffer is these bytes of a file */
  uint64_t src_off;
  /* The data buffer is checked against its stored checksum as it is
   * copied (a hurray source, verified): check_len bytes from its start,
   * against check_sum, or against its chunk checksums where it has them
   * (check_chunks: one for each check_chunk_size bytes, the last one
   * shorter, in the source's index), as the reader checks it. */
  bool check;
  uint32_t check_buffer;
  uint64_t check_len, check_sum, check_chunk_size;
  const uint8_t *check_chunks;
} Entry;

struct HurrayTarget {
  HurrayFormat format;
  char *path;
  HurrayWriter *writer; /* hurray: open from the start */
  Entry *entries;
  size_t count, cap;
  HurrayNameSet names; /* of entries: each name found in O(1) */
  HurrayMetaList metadata;
  bool statistics;
  bool drop_pages;       /* the buffers are views of read-only file mappings */
  const HurraySys *sys;  /* a foreign target's system calls; NULL: the real ones */
  HurrayCancelFn cancel; /* hurray_convert_file's, given to the writer; NULL: none */
  void *cancel_ctx;
};

static void entry_name_of(const void *ctx, size_t i, const char **name, size_t *len) {
  const HurrayTarget *t = ctx;
  *name = t->entries[i].name;
  *len = strlen(*name);
}

/* The slot of `name` among the target's entries (hurray__name_set_slot);
 * NULL when the set cannot grow. */
static size_t *entry_slot(HurrayTarget *t, const char *name) {
  if (hurray__name_set_reserve(&t->names, t->count) != HURRAY_OK) return NULL;
  return hurray__name_set_slot(&t->names, entry_name_of, t, name, strlen(name));
}

static void entry_free(Entry *e) {
  free(e->name);
  hurray_descriptor_destroy(e->d);
  hurray_buffer_list_destroy(e->buffers);
}

void hurray_target_abort(HurrayTarget *t) {
  if (t == NULL) return;
  hurray_writer_abort(t->writer);
  for (size_t i = 0; i < t->count; i++) entry_free(&t->entries[i]);
  free(t->entries);
  hurray__name_set_free(&t->names);
  hurray__meta_free(&t->metadata);
  free(t->path);
  free(t);
}

HurrayStatus hurray_target_open(const char *path, HurrayFormat format, HurrayTarget **out,
                                HurrayError *error) {
  if (out != NULL) *out = NULL;
  if (path == NULL || out == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "path and out are required");
  }
  if (!known_format(format)) return bad_format(error, "target", format);
  if (format == HURRAY_FORMAT_UNKNOWN) format = hurray_format_from_path(path);
  if (format == HURRAY_FORMAT_UNKNOWN) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "cannot tell the format to write from %s (not .hurray, .safetensors or "
                        ".gguf)",
                        path);
  }
  HurrayTarget *t = calloc(1, sizeof *t);
  if (t == NULL || (t->path = strdup(path)) == NULL) {
    free(t);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  t->format = format;
  if (format == HURRAY_FORMAT_HURRAY) {
    HurrayStatus s = hurray_writer_open(path, &t->writer, error);
    if (s != HURRAY_OK) {
      hurray_target_abort(t);
      return s;
    }
  } else {
    /* Fail now, not after the work, when the folder cannot take the file. */
    HurrayWriter *probe = NULL;
    HurrayStatus s = hurray__raw_writer_open(path, &probe, error);
    hurray_writer_abort(probe);
    if (s != HURRAY_OK) {
      hurray_target_abort(t);
      return s;
    }
  }
  *out = t;
  return HURRAY_OK;
}

HurrayStatus hurray_target_set_statistics(HurrayTarget *t, bool enabled, HurrayError *error) {
  if (t == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "target is required");
  t->statistics = enabled;
  if (t->writer != NULL) return hurray_writer_set_statistics(t->writer, enabled, error);
  return HURRAY_OK;
}

/* Dense, unquantized, row-major from byte 0 of its data buffer. */
static bool plain_dense(const HurrayDescriptor *d) {
  if (hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_DENSE ||
      hurray_descriptor_byte_offset(d) != 0 ||
      hurray_descriptor_device_type(d) != HURRAY_DEVICE_CPU) {
    return false;
  }
  const int64_t *strides = hurray_descriptor_strides(d);
  if (strides == NULL) return true;
  uint32_t rank = hurray_descriptor_rank(d);
  const uint64_t *shape = hurray_descriptor_shape(d);
  int64_t expect = 1;
  for (uint32_t k = rank; k-- > 0;) {
    if (shape[k] == 0) return true; /* no element: any strides describe it */
  }
  for (uint32_t k = rank; k-- > 0;) {
    if (shape[k] > 1 && strides[k] != expect) return false;
    /* the data of a valid tensor with elements fits its buffer: no overflow */
    if (__builtin_mul_overflow(expect, (int64_t)shape[k], &expect)) return false;
  }
  return true;
}

static const char *describe_kind(const HurrayDescriptor *d) {
  if (hurray_descriptor_layout_kind(d) != HURRAY_LAYOUT_DENSE) return "not dense";
  if (hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE) return "quantized";
  return "a strided view";
}

/* A rank-0 GGUF tensor (n_dims 0) is one element, as GGUF readers,
 * llama.cpp's and this library's, take it; a block type needs an axis.
 * ggml's dimensions are int64: its readers refuse 2^63 and more. */
static HurrayStatus gguf_shape_accepted(const char *name, const HurrayDescriptor *d,
                                        HurrayError *error) {
  uint32_t rank = hurray_descriptor_rank(d);
  if (rank > HURRAY_GGUF_MAX_DIMS ||
      (rank == 0 && hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE)) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "tensor '%.200s' has rank %u; GGUF tensors have at most 4 dimensions, "
                        "and a quantized one at least 1",
                        name, rank);
  }
  /* As GGUF readers check them (this library's too): each dimension, and
   * the running product in ggml's order (innermost first), below 2^63,
   * which an empty tensor's other dimensions can exceed. */
  const uint64_t *dims = hurray_descriptor_shape(d);
  uint64_t product = 1;
  for (uint32_t i = rank; i-- > 0;) {
    if (dims[i] > (uint64_t)INT64_MAX || !hurray__mul_u64(product, dims[i], &product) ||
        product > (uint64_t)INT64_MAX) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "tensor '%.200s' has dimensions whose product, in GGUF's order, "
                          "passes 2^63 - 1, which GGUF readers refuse",
                          name);
    }
  }
  return HURRAY_OK;
}

/* Whether a target of `format` takes `d` as it is; the GGUF type into *gtype. */
static HurrayStatus target_accepts(HurrayFormat format, const char *name,
                                   const HurrayDescriptor *d, uint32_t *gtype,
                                   HurrayError *error) {
  if (format == HURRAY_FORMAT_HURRAY) return HURRAY_OK;
  HurrayDType dtype = hurray_descriptor_dtype(d);
  uint32_t rank = hurray_descriptor_rank(d);
  HurrayQuantKind q = hurray_descriptor_quant_kind(d);
  if (format == HURRAY_FORMAT_SAFETENSORS) {
    if (q != HURRAY_QUANT_NONE || !plain_dense(d)) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "tensor '%.200s' is %s; safetensors holds dense tensors as they are "
                          "(the Python converter dequantizes or densifies it)",
                          name, describe_kind(d));
    }
    if (hurray__st_dtype_name(dtype) == NULL) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "tensor '%.200s' has dtype %s, which safetensors cannot hold", name,
                          hurray_dtype_name(dtype));
    }
    return HURRAY_OK;
  }
  HURRAY_RETURN_NOT_OK(gguf_shape_accepted(name, d, error));
  if (!plain_dense(d)) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "tensor '%.200s' is %s; GGUF holds it only densified (hurray.convert "
                        "densifies it when it is not quantized)",
                        name, describe_kind(d));
  }
  if (q == HURRAY_QUANT_NONE) {
    static const struct {
      HurrayDType dtype;
      uint32_t type;
    } map[] = {{HURRAY_DTYPE_FLOAT32, 0},  {HURRAY_DTYPE_FLOAT16, 1}, {HURRAY_DTYPE_BFLOAT16, 30},
               {HURRAY_DTYPE_FLOAT64, 28}, {HURRAY_DTYPE_INT8, 24},   {HURRAY_DTYPE_INT16, 25},
               {HURRAY_DTYPE_INT32, 26},   {HURRAY_DTYPE_INT64, 27}};
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++) {
      if (map[k].dtype == dtype) {
        *gtype = map[k].type;
        return HURRAY_OK;
      }
    }
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "tensor '%.200s' has dtype %s, which GGUF cannot hold (it holds float32, "
                        "float16, bfloat16, float64, int8, int16, int32, int64)",
                        name, hurray_dtype_name(dtype));
  }
  const uint64_t *shape = hurray_descriptor_shape(d);
  if (q == HURRAY_QUANT_BLOCK_AFFINE && hurray_descriptor_quant_axis(d) == rank - 1 &&
      hurray_descriptor_quant_block_size(d) == 32 &&
      hurray_descriptor_quant_scale_dtype(d) == HURRAY_DTYPE_FLOAT16 &&
      hurray_descriptor_quant_zero_point_buffer(d) == HURRAY_NO_BUFFER &&
      !hurray__quant_has_packed(&d->quant) && shape[rank - 1] % 32 == 0) {
    int64_t zp = hurray_descriptor_quant_zero_point(d);
    if (dtype == HURRAY_DTYPE_INT8 && zp == 0) {
      *gtype = HURRAY_GGUF_TYPE_Q8_0;
      return HURRAY_OK;
    }
    if (dtype == HURRAY_DTYPE_UINT4 && zp == 8) {
      *gtype = HURRAY_GGUF_TYPE_Q4_0;
      return HURRAY_OK;
    }
  }
  if (q == HURRAY_QUANT_BLOCK_CODED &&
      hurray__gguf_block_coded(hurray_descriptor_quant_block_format(d))) {
    *gtype = (uint32_t)hurray_descriptor_quant_block_format(d);
    return HURRAY_OK;
  }
  return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                      "tensor '%.200s' is quantized in a form with no exact GGUF type (GGUF's "
                      "Q8_0 and Q4_0 are block-affine int8 / uint4 codes, block 32 along the "
                      "last axis, float16 scales)",
                      name);
}

/* The bytes a foreign target stores `d` in, once target_accepts took it. */
static HurrayStatus stored_bytes(HurrayFormat format, const char *name, const HurrayDescriptor *d,
                                 uint32_t gtype, uint64_t *nbytes, HurrayError *error) {
  uint64_t numel = 0;
  HURRAY_RETURN_NOT_OK(hurray_descriptor_numel(d, &numel, error));
  if (gtype == HURRAY_GGUF_TYPE_Q8_0) *nbytes = numel / 32 * 34;
  else if (gtype == HURRAY_GGUF_TYPE_Q4_0) *nbytes = numel / 32 * 18;
  else if (hurray_descriptor_quant_kind(d) == HURRAY_QUANT_BLOCK_CODED) {
    uint32_t elements = 1, bytes = 0;
    hurray_block_format_info((uint32_t)hurray_descriptor_quant_block_format(d), &elements, &bytes,
                             NULL);
    *nbytes = numel / elements * bytes; /* no overflow: validation sized the buffer */
  } else if (hurray_dtype_storage_bytes(hurray_descriptor_dtype(d), numel, nbytes) != HURRAY_OK) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "tensor '%.200s': byte size overflows", name);
  }
  if (format == HURRAY_FORMAT_SAFETENSORS) {
    uint64_t bits = 0;
    if (!hurray__mul_u64(numel, hurray_dtype_bits(hurray_descriptor_dtype(d)), &bits) ||
        bits % 8 != 0) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "tensor '%.200s' (%s) does not fill whole bytes, as safetensors needs",
                          name, hurray_dtype_name(hurray_descriptor_dtype(d)));
    }
  }
  return HURRAY_OK;
}

HurrayStatus hurray__target_form(HurrayFormat format, const char *name, const HurrayDescriptor *d,
                                 const char **type_name, uint64_t *nbytes, HurrayError *error) {
  if (format != HURRAY_FORMAT_SAFETENSORS && format != HURRAY_FORMAT_GGUF) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "a foreign target format (safetensors or GGUF) is required");
  }
  uint32_t gtype = UINT32_MAX;
  HURRAY_RETURN_NOT_OK(one_line(target_accepts(format, name, d, &gtype, error), error));
  HURRAY_RETURN_NOT_OK(one_line(stored_bytes(format, name, d, gtype, nbytes, error), error));
  *type_name = format == HURRAY_FORMAT_GGUF ? hurray__gguf_type_name(gtype)
                                            : hurray__st_dtype_name(hurray_descriptor_dtype(d));
  return HURRAY_OK;
}

static HurrayStatus set_meta_on_writer(HurrayWriter *w, const HurrayMeta *m, HurrayError *error) {
  switch (m->type) {
    case HURRAY_METADATA_STRING:
      return hurray_writer_set_metadata_string(w, m->key, (const char *)m->bytes, error);
    case HURRAY_METADATA_INT: return hurray_writer_set_metadata_int(w, m->key, m->i, error);
    case HURRAY_METADATA_FLOAT: return hurray_writer_set_metadata_float(w, m->key, m->f, error);
    case HURRAY_METADATA_BOOL: return hurray_writer_set_metadata_bool(w, m->key, m->b, error);
    default: return hurray_writer_set_metadata_bytes(w, m->key, m->bytes, m->len, error);
  }
}

/* A tensor name the format's readers, this library's too, take back; the
 * hurray writer checks its own. */
static HurrayStatus check_foreign_name(HurrayFormat format, const char *name, HurrayError *error) {
  if (!hurray__foreign_name_ok(name, HURRAY_MAX_TENSOR_NAME_BYTES)) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "tensor name '%.200s': %s files take names of 1 to %u bytes of UTF-8",
                        name, hurray_format_name(format), HURRAY_MAX_TENSOR_NAME_BYTES);
  }
  if (format == HURRAY_FORMAT_SAFETENSORS && strcmp(name, "__metadata__") == 0) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "a safetensors tensor cannot be named __metadata__: the header keeps the "
                        "file's metadata under that key");
  }
  if (format == HURRAY_FORMAT_GGUF && strlen(name) > HURRAY_GGUF_MAX_NAME_BYTES) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "tensor name '%.200s' is %zu bytes; GGUF readers (llama.cpp's ggml) take "
                        "at most %u",
                        name, strlen(name), HURRAY_GGUF_MAX_NAME_BYTES);
  }
  return HURRAY_OK;
}

static HurrayStatus add_tensor(HurrayTarget *t, const char *name, HurrayDescriptor *d,
                               HurrayBufferList *buffers, int src_fd, uint64_t src_off,
                               HurrayError *error) {
  Entry e = {0};
  e.src_fd = src_fd;
  e.src_off = src_off;
  e.d = d;
  e.buffers = buffers;
  HurrayStatus s = HURRAY_OK;
  if (t == NULL || name == NULL || d == NULL || buffers == NULL) {
    s = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                     "target, name, descriptor and buffers "
                     "are required");
    goto fail;
  }
  if (t->format == HURRAY_FORMAT_HURRAY) {
    s = hurray_writer_write_tensor(t->writer, name, d, buffers, error);
    if (t->drop_pages) drop_list_pages(buffers);
    entry_free(&e);
    return s;
  }
  s = check_foreign_name(t->format, name, error);
  if (s == HURRAY_OK) s = target_accepts(t->format, name, d, &e.gtype, error);
  if (s == HURRAY_OK) s = hurray_validate_buffer_placement(d, buffers, error);
  if (s == HURRAY_OK) s = hurray__check_bool_bytes(name, d, buffers, error);
  if (s != HURRAY_OK) goto fail;
  size_t *slot = entry_slot(t, name);
  if (slot == NULL) {
    s = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  if (*slot != 0) {
    s = hurray__fail(error, HURRAY_ERR_DUPLICATE_NAME, "tensor '%.200s' was already added", name);
    goto fail;
  }
  s = stored_bytes(t->format, name, d, e.gtype, &e.nbytes, error);
  if (s != HURRAY_OK) goto fail;
  if (t->count == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 64;
    Entry *entries = realloc(t->entries, cap * sizeof *entries);
    if (entries == NULL) {
      s = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
      goto fail;
    }
    t->entries = entries;
    t->cap = cap;
  }
  e.name = strdup(name);
  if (e.name == NULL) {
    s = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  e.order = (long)t->count;
  t->entries[t->count++] = e;
  *slot = t->count; /* still the name's slot: the set did not change since */
  return HURRAY_OK;
fail:
  entry_free(&e);
  return one_line(s, error);
}

HurrayStatus hurray_target_add_tensor(HurrayTarget *t, const char *name, HurrayDescriptor *d,
                                      HurrayBufferList *buffers, HurrayError *error) {
  return add_tensor(t, name, d, buffers, -1, 0, error);
}

static bool carried(HurrayFormat format, const char *key) {
  switch (format) {
    case HURRAY_FORMAT_HURRAY: return true;
    case HURRAY_FORMAT_SAFETENSORS: return strncmp(key, "safetensors.", 12) == 0;
    default: return strncmp(key, "gguf.", 5) == 0;
  }
}

bool hurray_metadata_is_bookkeeping(const char *key) {
  return key != NULL &&
         (strcmp(key, HURRAY_META_SOURCE_DTYPES) == 0 ||
          strcmp(key, HURRAY_META_SAFETENSORS_INDEX) == 0 ||
          strcmp(key, HURRAY_META_GGUF_TYPES) == 0 || strcmp(key, HURRAY_META_GGUF_TENSORS) == 0);
}

/* gguf.__tensors__ is read (by a GGUF target, and by the Python converter
 * for every target): a JSON array of names, as the Python converter checks. */
static HurrayStatus check_tensor_order(HurrayMetadataType type, const void *value, size_t len,
                                       HurrayError *error) {
  HurrayJ list = {0};
  bool text = type == HURRAY_METADATA_STRING || type == HURRAY_METADATA_BYTES; /* as json.loads */
  HurrayStatus parsed = text ? hurray__j_parse(value, len, &list, NULL) : HURRAY_ERR_MALFORMED;
  if (parsed == HURRAY_ERR_NO_MEMORY) return hurray__fail(error, parsed, "out of memory");
  bool ok = parsed == HURRAY_OK && list.kind == HJ_ARR;
  for (size_t i = 0; ok && i < list.len; i++) ok = list.items[i].kind == HJ_STR;
  hurray__j_free(&list);
  return ok ? HURRAY_OK
            : hurray__fail(error, HURRAY_ERR_MALFORMED,
                           "metadata 'gguf.__tensors__' is not a JSON array of tensor names");
}

HurrayStatus hurray_target_set_metadata(HurrayTarget *t, const char *key, HurrayMetadataType type,
                                        const void *value, size_t len, HurrayError *error) {
  if (t == NULL || key == NULL) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "target and key are required");
  }
  if (strcmp(key, HURRAY_META_GGUF_TENSORS) == 0) {
    HURRAY_RETURN_NOT_OK(check_tensor_order(type, value, len, error));
  }
  if (t->format == HURRAY_FORMAT_HURRAY) {
    /* Through a list as the other targets keep it: the same checks of the
     * type and the value (an unknown type was stored as bytes), and a
     * string with its NUL, which the writer wants. */
    HurrayMetaList tmp = {0};
    HurrayStatus s = hurray__meta_set(&tmp, key, type, value, len, error);
    if (s == HURRAY_OK && type == HURRAY_METADATA_STRING && len > 0 &&
        memchr(tmp.items[0].bytes, 0, len) != NULL) {
      s = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "metadata %.200s holds a NUL", key);
    }
    if (s == HURRAY_OK) s = set_meta_on_writer(t->writer, &tmp.items[0], error);
    hurray__meta_free(&tmp);
    return s;
  }
  return hurray__meta_set(&t->metadata, key, type, value, len, error);
}

bool hurray_format_keeps_metadata(HurrayFormat format, const char *key) {
  return key != NULL && known_format(format) && format != HURRAY_FORMAT_UNKNOWN &&
         (carried(format, key) || hurray_metadata_is_bookkeeping(key));
}

size_t hurray_target_dropped_metadata(const HurrayTarget *t) {
  if (t == NULL || t->format == HURRAY_FORMAT_HURRAY) return 0;
  size_t n = 0;
  for (size_t i = 0; i < t->metadata.count; i++) {
    if (!hurray_format_keeps_metadata(t->format, t->metadata.items[i].key)) n++;
  }
  return n;
}

/* The bytes of buffer `index` of an entry. */
static const uint8_t *entry_data(const Entry *e, uint32_t index) {
  return hurray_buffer_data(hurray_buffer_list_get(e->buffers, index));
}

/* The checked data buffer's bytes as they pass, hashed whole against its
 * stored checksum, or chunk by chunk against its chunk checksums where it
 * has them: one verdict for a file, whichever reads it (spec 7.1). */
typedef struct Checker {
  const Entry *e;
  HurrayHashStream hs;
  uint64_t at; /* bytes hashed so far */
} Checker;

static void checker_start(Checker *c, const Entry *e) {
  c->e = e;
  c->at = 0;
  hurray__hash_stream_reset(&c->hs);
}

/* A digest of bytes [start, end) against what the index stores for them,
 * with the reader's message (hurray_reader_verify's). */
static HurrayStatus check_digest(const Entry *e, uint64_t stored, uint64_t sum, uint64_t start,
                                 uint64_t end, HurrayError *error) {
  if (sum == stored) return HURRAY_OK;
  if (e->check_chunks == NULL) {
    return hurray__fail(error, HURRAY_ERR_CHECKSUM,
                        "tensor \"%.200s\" buffer %u: checksum mismatch (stored %016llx, data "
                        "%016llx)",
                        e->name, e->check_buffer, (unsigned long long)stored,
                        (unsigned long long)sum);
  }
  return hurray__fail(error, HURRAY_ERR_CHECKSUM,
                      "tensor \"%.200s\" buffer %u: checksum mismatch in bytes [%llu, %llu) "
                      "(stored %016llx, data %016llx)",
                      e->name, e->check_buffer, (unsigned long long)start, (unsigned long long)end,
                      (unsigned long long)stored, (unsigned long long)sum);
}

static HurrayStatus checker_feed(Checker *c, const uint8_t *p, uint64_t n, HurrayError *error) {
  const Entry *e = c->e;
  if (e->check_chunks == NULL) {
    hurray__hash_stream_update(&c->hs, p, (size_t)n);
    c->at += n;
    return HURRAY_OK;
  }
  while (n > 0) {
    uint64_t size = e->check_chunk_size, start = c->at / size * size;
    uint64_t end = e->check_len - start < size ? e->check_len : start + size;
    uint64_t take = end - c->at < n ? end - c->at : n;
    hurray__hash_stream_update(&c->hs, p, (size_t)take);
    c->at += take;
    p += take;
    n -= take;
    if (c->at == end) {
      uint64_t stored = hurray__get_le(e->check_chunks + 8 * (start / size), 8);
      HURRAY_RETURN_NOT_OK(
          check_digest(e, stored, hurray__hash_stream_digest(&c->hs), start, end, error));
      hurray__hash_stream_reset(&c->hs);
    }
  }
  return HURRAY_OK;
}

/* After all check_len bytes were fed: the whole buffer's digest (each chunk
 * was checked as it ended). */
static HurrayStatus checker_end(Checker *c, HurrayError *error) {
  if (c->e->check_chunks != NULL) return HURRAY_OK;
  return check_digest(c->e, c->e->check_sum, hurray__hash_stream_digest(&c->hs), 0, c->at, error);
}

/* An entry's data bytes. File to file in the kernel (copy_file_range) when
 * they are a range of a source file that sits at the same place within a
 * page as its place in the target: the kernel then moves whole pages (and
 * may share extents). When the two are not congruent (a hurray buffer at 64
 * modulo 4096 going to a safetensors data section at 8 + header length),
 * the kernel's page-by-page copy straddles two source pages for every target
 * page and ran at half the speed of cp; writing from the source mapping in
 * page-aligned target steps instead runs at cp's. `drop`: the bytes are a
 * view of a read-only file mapping whose pages may be dropped.
 *
 * A checked entry (e->check) is hashed piece by piece just before each
 * piece is written, while it is in the CPU's cache: one pass over the
 * source instead of a verification pass and then a copy pass. A mismatch
 * fails the write; the temporary file is then discarded and the target
 * keeps its old bytes, as when the whole source was checked first. */
static HurrayStatus write_data(HurrayWriter *w, const Entry *e, bool drop, HurrayError *error) {
  const uint8_t *p = entry_data(e, hurray_descriptor_data_buffer(e->d));
  uint64_t pos = hurray__raw_writer_position(w);
  long page = sysconf(_SC_PAGESIZE);
  Checker check;
  if (e->check) checker_start(&check, e);
  if (e->src_fd >= 0 && (p == NULL || (page > 0 && (pos - e->src_off) % (uint64_t)page == 0))) {
    if (e->check) {
      /* The kernel's copy never passes through this process: hash first. */
      HURRAY_RETURN_NOT_OK(checker_feed(&check, p, e->check_len, error));
      HURRAY_RETURN_NOT_OK(checker_end(&check, error));
      if (drop) hurray__drop_mapped_pages(p, e->check_len);
    }
    return hurray__raw_writer_copy(w, e->src_fd, e->src_off, e->nbytes, error);
  }
  uint64_t left = e->nbytes, kept = 0;
  HurrayStatus s = HURRAY_OK;
  while (s == HURRAY_OK && left > 0) {
    uint64_t n = hurray__raw_writer_piece(w, left);
    if (e->check) s = checker_feed(&check, p, n, error);
    if (s == HURRAY_OK) s = hurray__raw_writer_write(w, p, (size_t)n, error);
    p += n;
    pos += n;
    left -= n;
    kept += n;
    if (drop && kept >= HURRAY_DROP_STEP) {
      hurray__drop_mapped_pages(p - kept, kept);
      kept = 0;
    }
  }
  if (s == HURRAY_OK && e->check) {
    /* A stored buffer may be longer than the bytes the target holds. */
    s = checker_feed(&check, p, e->check_len - e->nbytes, error);
    if (s == HURRAY_OK) s = checker_end(&check, error);
  }
  return s;
}

static int by_safetensors_order(const void *a, const void *b) {
  const Entry *x = a, *y = b;
  int rx = hurray__st_dtype_rank(hurray_descriptor_dtype(x->d));
  int ry = hurray__st_dtype_rank(hurray_descriptor_dtype(y->d));
  if (rx != ry) return rx > ry ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int by_order(const void *a, const void *b) {
  const Entry *x = a, *y = b;
  return x->order < y->order ? -1 : x->order > y->order;
}

static HurrayStatus finish_safetensors(HurrayTarget *t, HurrayWriter *w, HurrayError *error) {
  if (t->count > 1) qsort(t->entries, t->count, sizeof *t->entries, by_safetensors_order);
  HurrayStr h = {0};
  hurray__str_addc(&h, '{');
  bool any_meta = false;
  for (size_t i = 0; i < t->metadata.count; i++) {
    const HurrayMeta *m = &t->metadata.items[i];
    if (strncmp(m->key, "safetensors.", 12) != 0) continue;
    if (!hurray__foreign_name_ok(m->key + 12, HURRAY_MAX_METADATA_KEY_BYTES - 16)) {
      hurray__str_free(&h);
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "metadata key %.200s names a safetensors key that is empty, not UTF-8 "
                          "or longer than %u bytes, which safetensors readers (this library's "
                          "too) refuse",
                          m->key, HURRAY_MAX_METADATA_KEY_BYTES - 16);
    }
    char text[64];
    const char *v = text;
    size_t len;
    switch (m->type) {
      case HURRAY_METADATA_INT:
        len = (size_t)snprintf(text, sizeof text, "%lld", (long long)m->i);
        break;
      case HURRAY_METADATA_FLOAT:
        len = (size_t)hurray__format_double_shortest(text, sizeof text, m->f);
        break;
      case HURRAY_METADATA_BOOL:
        len = (size_t)snprintf(text, sizeof text, "%s", m->b ? "true" : "false");
        break;
      default: v = (const char *)m->bytes, len = m->len; break;
    }
    if (!hurray__utf8_valid(v, len)) {
      hurray__str_free(&h);
      return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                          "metadata %.200s %s, which safetensors __metadata__ cannot hold", m->key,
                          memchr(v, '\0', len) != NULL ? "holds a NUL byte" : "is not UTF-8");
    }
    hurray__str_add(&h, any_meta ? "," : "\"__metadata__\":{", any_meta ? 1 : 16);
    any_meta = true;
    hurray__str_json_raw(&h, (const uint8_t *)m->key + 12, strlen(m->key + 12));
    hurray__str_addc(&h, ':');
    hurray__str_json_raw(&h, (const uint8_t *)v, len);
  }
  if (any_meta) hurray__str_addc(&h, '}');
  uint64_t at = 0;
  for (size_t i = 0; i < t->count; i++) {
    const Entry *e = &t->entries[i];
    if (i > 0 || any_meta) hurray__str_addc(&h, ',');
    hurray__str_json_raw(&h, (const uint8_t *)e->name, strlen(e->name));
    hurray__str_addf(&h, ":{\"dtype\":\"%s\",\"shape\":[",
                     hurray__st_dtype_name(hurray_descriptor_dtype(e->d)));
    uint32_t rank = hurray_descriptor_rank(e->d);
    const uint64_t *dims = hurray_descriptor_shape(e->d);
    for (uint32_t k = 0; k < rank; k++) {
      hurray__str_addf(&h, k ? ",%llu" : "%llu", (unsigned long long)dims[k]);
    }
    hurray__str_addf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                     (unsigned long long)(at + e->nbytes));
    at += e->nbytes;
  }
  hurray__str_addc(&h, '}');
  while (!h.oom && h.len % 8 != 0) hurray__str_addc(&h, ' '); /* no-op once out of memory */
  if (h.oom) {
    hurray__str_free(&h);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  uint8_t len8[8];
  for (int k = 0; k < 8; k++) len8[k] = (uint8_t)((uint64_t)h.len >> (8 * k));
  HurrayStatus s = hurray__raw_writer_write(w, len8, 8, error);
  if (s == HURRAY_OK) s = hurray__raw_writer_write(w, h.p, h.len, error);
  hurray__str_free(&h);
  for (size_t i = 0; s == HURRAY_OK && i < t->count; i++) {
    s = write_data(w, &t->entries[i], t->drop_pages, error);
    if (t->drop_pages) drop_list_pages(t->entries[i].buffers);
  }
  return s;
}

static void put_le(HurrayStr *o, uint64_t v, unsigned n) {
  uint8_t b[8];
  for (unsigned i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
  hurray__str_add(o, b, n);
}

/* long: the GGUF file front to back: tensor order, header, pairs, infos, then data. */
static HurrayStatus finish_gguf(HurrayTarget *t, HurrayWriter *w, HurrayError *error) {
  /* Tensor order: gguf.__tensors__ where it names them, then as added. */
  const HurrayMeta *names = hurray__meta_find(&t->metadata, HURRAY_META_GGUF_TENSORS);
  HurrayJ list = {0};
  HurrayStatus parsed = HURRAY_ERR_MALFORMED; /* set_metadata checked the text */
  if (names != NULL &&
      (names->type == HURRAY_METADATA_STRING || names->type == HURRAY_METADATA_BYTES)) {
    parsed = hurray__j_parse(names->bytes, names->len, &list, NULL);
    /* not "no order": that would lose the order silently */
    if (parsed == HURRAY_ERR_NO_MEMORY) return hurray__fail(error, parsed, "out of memory");
  }
  if (parsed == HURRAY_OK && list.kind == HJ_ARR) {
    /* Each listed name found through the entries' name set: linear in the
     * list and the tensors, however long a file makes the list. */
    for (size_t i = 0; i < t->count; i++) t->entries[i].order += (long)list.len;
    for (size_t idx = 0; idx < list.len; idx++) {
      const HurrayJ *v = &list.items[idx];
      if (v->kind != HJ_STR) continue;
      size_t at = hurray__name_set_find(&t->names, entry_name_of, t, (const char *)v->str,
                                        strlen((const char *)v->str));
      if (at != 0 && t->entries[at - 1].order >= (long)list.len) {
        t->entries[at - 1].order = (long)idx;
      }
    }
  }
  hurray__j_free(&list);
  if (t->count > 1) qsort(t->entries, t->count, sizeof *t->entries, by_order);
  HurrayStr head = {0};
  uint64_t n_kv = 0, align = HURRAY_GGUF_DEFAULT_ALIGNMENT;
  HurrayStr kv = {0};
  HurrayStatus s = hurray__gguf_encode_kv(&t->metadata, &kv, &n_kv, &align, error);
  if (s != HURRAY_OK) {
    hurray__str_free(&kv);
    return s;
  }
  hurray__str_add(&head, "GGUF", 4);
  put_le(&head, 3, 4);
  put_le(&head, t->count, 8);
  put_le(&head, n_kv, 8);
  hurray__str_add(&head, kv.p, kv.len);
  hurray__str_free(&kv);
  uint64_t at = 0, stored = 0;
  for (size_t i = 0; i < t->count; i++) {
    const Entry *e = &t->entries[i];
    uint32_t rank = hurray_descriptor_rank(e->d);
    const uint64_t *dims = hurray_descriptor_shape(e->d);
    put_le(&head, strlen(e->name), 8);
    hurray__str_add(&head, e->name, strlen(e->name));
    put_le(&head, rank, 4);
    for (uint32_t k = 0; k < rank; k++) put_le(&head, dims[rank - 1 - k], 8);
    put_le(&head, e->gtype, 4);
    put_le(&head, at, 8);
    at += hurray__ceil_div_u64(e->nbytes, align) * align;
    stored += e->nbytes;
  }
  if (head.oom) {
    hurray__str_free(&head);
    return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  /* general.alignment comes from the source's metadata: 2^30 made a 677-byte
   * file into 4 GiB of padding. The padding is held to the output limit
   * that materialising a tensor has. */
  s = hurray__check_output_bytes(stored, at + align, NULL, error); /* + the header's padding */
  if (s != HURRAY_OK) {
    hurray__str_free(&head);
    return hurray__fail(error, s,
                        "GGUF target: general.alignment %llu pads %llu bytes of tensor data to "
                        "%llu, more than the output limit (64 times the data, or 64 MiB)",
                        (unsigned long long)align, (unsigned long long)stored,
                        (unsigned long long)at);
  }
  s = hurray__raw_writer_write(w, head.p, head.len, error);
  hurray__str_free(&head);
  if (s == HURRAY_OK) s = hurray__raw_writer_pad(w, align, error);
  uint8_t *blocks = NULL;
  const uint64_t step = 8192; /* blocks re-laid out at a time */
  for (size_t i = 0; s == HURRAY_OK && i < t->count; i++) {
    const Entry *e = &t->entries[i];
    if (e->gtype == HURRAY_GGUF_TYPE_Q8_0 || e->gtype == HURRAY_GGUF_TYPE_Q4_0) {
      uint64_t bsz = e->gtype == HURRAY_GGUF_TYPE_Q8_0 ? 34 : 18;
      uint64_t csz = e->gtype == HURRAY_GGUF_TYPE_Q8_0 ? 32 : 16;
      if (blocks == NULL && (blocks = malloc(step * 34)) == NULL) {
        s = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
        break;
      }
      const uint8_t *codes = entry_data(e, hurray_descriptor_data_buffer(e->d));
      const uint8_t *scales = entry_data(e, hurray_descriptor_quant_scale_buffer(e->d));
      uint64_t nb = e->nbytes / bsz;
      for (uint64_t b = 0; s == HURRAY_OK && b < nb; b += step) {
        uint64_t k = nb - b < step ? nb - b : step;
        hurray__gguf_codes_to_blocks(e->gtype, codes + b * csz, scales + b * 2, k, blocks);
        s = hurray__raw_writer_write(w, blocks, (size_t)(k * bsz), error);
      }
    } else {
      s = write_data(w, e, t->drop_pages, error);
    }
    if (s == HURRAY_OK) s = hurray__raw_writer_pad(w, align, error);
    if (t->drop_pages) drop_list_pages(e->buffers);
  }
  free(blocks);
  return s;
}

HurrayStatus hurray_target_finish(HurrayTarget *t, HurrayError *error) {
  if (t == NULL) return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT, "target is required");
  HurrayStatus s;
  if (t->format == HURRAY_FORMAT_HURRAY) {
    HurrayWriter *w = t->writer;
    t->writer = NULL;
    s = hurray_writer_finish(w, error);
  } else {
    HurrayWriter *w = NULL;
    s = hurray__raw_writer_open_sys(t->path, t->sys != NULL ? t->sys : &hurray__sys_default, &w,
                                    error);
    if (s == HURRAY_OK && t->cancel != NULL) {
      s = hurray_writer_set_cancel(w, t->cancel, t->cancel_ctx, error);
      if (s != HURRAY_OK) hurray_writer_abort(w);
    }
    if (s == HURRAY_OK) {
      s = t->format == HURRAY_FORMAT_SAFETENSORS ? finish_safetensors(t, w, error)
                                                 : finish_gguf(t, w, error);
      if (s == HURRAY_OK) s = hurray__raw_writer_finish(w, error);
      else hurray_writer_abort(w);
    }
  }
  hurray_target_abort(t);
  return one_line(s, error);
}

/* ------------------------------------------------------------ one call */

/* The file and offset of a dense tensor's data buffer, when it is a view
 * of the source's file: the foreign writers then copy it in the kernel. */
static void source_origin(const HurraySource *s, const HurrayDescriptor *d,
                          const HurrayBufferList *list, int *fd, uint64_t *off) {
  *fd = -1;
  if (hurray_descriptor_quant_kind(d) != HURRAY_QUANT_NONE) return;
  const HurrayBuffer *b = hurray_buffer_list_get(list, hurray_descriptor_data_buffer(d));
  if (b == NULL) return;
  const uint8_t *p = hurray_buffer_data(b);
  uint64_t len = hurray_buffer_size(b);
  if (s->format == HURRAY_FORMAT_HURRAY) {
    if (hurray__reader_offset_of(s->reader, p, len, off)) *fd = hurray__reader_fd(s->reader);
  } else if (s->map->fd >= 0 && s->map->owned && p >= s->map->base &&
             (uint64_t)(p - s->map->base) <= s->map->len &&
             len <= s->map->len - (uint64_t)(p - s->map->base)) {
    *off = (uint64_t)(p - s->map->base);
    *fd = s->map->fd;
  }
}

/* Arranges the check of tensor i of a verified hurray source, just added
 * to a foreign target as `e`: its one data buffer, read from the source's
 * mapping, is checked as write_data copies it; any other tensor (several
 * buffers, codes re-laid out into GGUF blocks, a reader without a mapping)
 * is checked now, whole, before anything of it is written. */
static HurrayStatus check_source_tensor(const HurraySource *s, size_t i, Entry *e,
                                        HurrayError *error) {
  const uint8_t *data = NULL, *chunks = NULL;
  uint64_t len = 0, sum = 0, chunk_size = 0;
  uint32_t b = hurray_descriptor_data_buffer(e->d);
  if (hurray_descriptor_buffer_count(e->d) == 1 && e->gtype != HURRAY_GGUF_TYPE_Q8_0 &&
      e->gtype != HURRAY_GGUF_TYPE_Q4_0 &&
      hurray__reader_buffer_record(s->reader, i, b, &data, &len, &sum, &chunks, &chunk_size) &&
      data != NULL && data == entry_data(e, b) && len >= e->nbytes) {
    e->check = true;
    e->check_buffer = b;
    e->check_len = len;
    e->check_sum = sum;
    e->check_chunks = chunks;
    e->check_chunk_size = chunk_size;
    return HURRAY_OK;
  }
  return hurray_reader_verify(s->reader, hurray_reader_tensor_name(s->reader, i), error);
}

/* A safetensors file that --keep-scales wrote holds a quantized tensor as
 * parts, named by a hurray.<name>.quantization key of its metadata. Only
 * the Python converter puts them back together; copied into a hurray file
 * as they are, they would pass for plain tensors. */
static HurrayStatus refuse_kept_scales(HurraySource *s, HurrayFormat tf, HurrayError *error) {
  if (s->format != HURRAY_FORMAT_SAFETENSORS || tf != HURRAY_FORMAT_HURRAY) return HURRAY_OK;
  static const char prefix[] = "safetensors.hurray.", suffix[] = ".quantization";
  for (size_t i = 0; i < hurray_source_metadata_count(s); i++) {
    const char *key;
    HurrayMetadataType type;
    const void *value;
    size_t len;
    HURRAY_RETURN_NOT_OK(hurray_source_metadata(s, i, &key, &type, &value, &len, error));
    size_t n = strlen(key), p = sizeof prefix - 1, x = sizeof suffix - 1;
    if (n > p + x && strncmp(key, prefix, p) == 0 && strcmp(key + n - x, suffix) == 0) {
      return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                          "safetensors tensor %.*s is stored in parts (hurray convert "
                          "--keep-scales); the Python converter (hurray convert, "
                          "hurray.convert) puts it back together",
                          (int)(n - p - x > 200 ? 200 : n - p - x), key + p);
    }
  }
  return HURRAY_OK;
}

HurrayStatus hurray_convert_file(const char *src, const char *dst,
                                 const HurrayConvertOptions *options, HurrayError *error) {
  return hurray__convert_file_sys(src, dst, options, NULL, error);
}

/* A piece of a sharded tensor, or a tensor of an extension type, would
 * reach safetensors or GGUF as a plain tensor, saying nothing of what it
 * was: hurray_convert_file leaves it to the Python converter, whose report
 * says so (a HurrayTarget of a caller's own takes it as it is). */
static HurrayStatus nothing_left_behind(HurrayFormat tf, const char *name,
                                        const HurrayDescriptor *d, HurrayError *error) {
  if (tf == HURRAY_FORMAT_HURRAY) return HURRAY_OK;
  if (hurray_descriptor_has_shard(d)) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "tensor '%.200s' is a piece of a sharded tensor, which %s would hold as "
                        "a whole tensor",
                        name, hurray_format_name(tf));
  }
  if (hurray_descriptor_extension_name(d) != NULL) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "tensor '%.200s' has an extension type, which %s cannot keep", name,
                        hurray_format_name(tf));
  }
  return HURRAY_OK;
}

/* long: the conversion in order: check the source, refuse early, open, copy, then publish. */
HurrayStatus hurray__convert_file_sys(const char *src, const char *dst,
                                      const HurrayConvertOptions *options, const HurraySys *sys,
                                      HurrayError *error) {
  HurrayConvertOptions defaults = HURRAY_CONVERT_OPTIONS_INIT;
  if (options == NULL) options = &defaults;
  if (src == NULL || dst == NULL || options->version < 1 ||
      options->version > HURRAY_CONVERT_OPTIONS_VERSION) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "src, dst and options of version 1 to %u are required",
                        HURRAY_CONVERT_OPTIONS_VERSION);
  }
  /* Version 1 ends before the cancel hook: those fields are not read. */
  HurrayCancelFn cancel = options->version >= 2 ? options->cancel : NULL;
  void *cancel_ctx = options->version >= 2 ? options->cancel_ctx : NULL;
  if (!known_format(options->target_format)) {
    return bad_format(error, "target", options->target_format);
  }
  if (!known_format(options->source_format)) {
    return bad_format(error, "source", options->source_format);
  }
  HurrayFormat tf = options->target_format != HURRAY_FORMAT_UNKNOWN ? options->target_format
                                                                    : hurray_format_from_path(dst);
  if (tf == HURRAY_FORMAT_UNKNOWN) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "cannot tell the format to write from %s (not .hurray, .safetensors or "
                        ".gguf)",
                        dst);
  }
  struct stat a, b;
  if (stat(src, &a) == 0 && stat(dst, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
    return hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                        "%s is the source itself; write to another file", dst);
  }
  HurraySource *s = NULL;
  HurraySourceOptions source_options = HURRAY_SOURCE_OPTIONS_INIT;
  source_options.verify_checksums = options->verify_checksums;
  HURRAY_RETURN_NOT_OK(
      hurray_source_open(src, options->source_format, &source_options, &s, error));
  size_t n = hurray_source_tensor_count(s);
  HurrayStatus st = refuse_kept_scales(s, tf, error);
  /* A hurray source going to a hurray file is checked whole, before the
   * target exists: pages let go as it goes, and each buffer is hashed
   * once, not again per tensor. Going to safetensors or GGUF, each data
   * buffer is checked while it is copied (write_data), and the others
   * when their tensor is added (check_source_tensor). */
  bool check_on_copy = false;
  if (st == HURRAY_OK && s->format == HURRAY_FORMAT_HURRAY && s->verify) {
    if (tf == HURRAY_FORMAT_HURRAY) {
      st = hurray__reader_verify_flat(s->reader, cancel, cancel_ctx, error);
    } else {
      check_on_copy = true;
    }
    s->verified = st == HURRAY_OK;
  }
  /* Everything the target would refuse is refused before it is opened. */
  for (size_t i = 0; st == HURRAY_OK && i < n; i++) {
    st = hurray_source_check_tensor(s, i, error);
    HurrayDescriptor *d = NULL;
    if (st == HURRAY_OK) st = hurray_source_get_descriptor(s, i, &d, error);
    uint32_t gtype = 0;
    if (st == HURRAY_OK)
      st = target_accepts(tf, hurray_source_tensor_name(s, i), d, &gtype, error);
    if (st == HURRAY_OK) st = nothing_left_behind(tf, hurray_source_tensor_name(s, i), d, error);
    hurray_descriptor_destroy(d);
  }
  HurrayTarget *t = NULL;
  if (st == HURRAY_OK) st = hurray_target_open(dst, tf, &t, error);
  /* GGUF sources hand out fresh memory for Q8_0/Q4_0 codes: not for them. */
  if (st == HURRAY_OK) t->drop_pages = hurray_source_format(s) != HURRAY_FORMAT_GGUF;
  if (st == HURRAY_OK && t->writer != NULL)
    hurray__writer_drop_source_pages(t->writer, t->drop_pages);
  if (st == HURRAY_OK) {
    t->sys = sys;
    t->cancel = cancel;
    t->cancel_ctx = cancel_ctx;
  }
  if (st == HURRAY_OK && t->writer != NULL && cancel != NULL) {
    st = hurray_writer_set_cancel(t->writer, cancel, cancel_ctx, error);
  }
  if (st == HURRAY_OK && options->statistics) st = hurray_target_set_statistics(t, true, error);
  for (size_t i = 0; st == HURRAY_OK && i < hurray_source_metadata_count(s); i++) {
    const char *key;
    HurrayMetadataType type;
    const void *value;
    size_t len;
    st = hurray_source_metadata(s, i, &key, &type, &value, &len, error);
    if (st == HURRAY_OK) st = hurray_target_set_metadata(t, key, type, value, len, error);
  }
  for (size_t i = 0; st == HURRAY_OK && i < n; i++) {
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    if (cancel != NULL && cancel(cancel_ctx)) {
      st = hurray__fail(error, HURRAY_ERR_CANCELLED,
                        "the conversion was cancelled; %s is untouched", dst);
      break;
    }
    st = hurray_source_get_tensor(s, i, &d, &list, error);
    /* Verifying touched every page; a foreign target writes much later. */
    if (st == HURRAY_OK && t->drop_pages) drop_list_pages(list);
    int fd = -1;
    uint64_t off = 0;
    if (st == HURRAY_OK && tf != HURRAY_FORMAT_HURRAY) source_origin(s, d, list, &fd, &off);
    if (st == HURRAY_OK) {
      st = add_tensor(t, hurray_source_tensor_name(s, i), d, list, fd, off, error);
    }
    if (st == HURRAY_OK && check_on_copy) {
      st = check_source_tensor(s, i, &t->entries[t->count - 1], error);
    }
  }
  if (st == HURRAY_OK) {
    st = hurray_target_finish(t, error);
  } else {
    hurray_target_abort(t);
  }
  hurray_source_close(s);
  return one_line(st, error);
}
