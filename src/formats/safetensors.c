/*
 * safetensors: an 8-byte little-endian header length N, N bytes of JSON
 * ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {str: str}}), then the data section. The header is parsed with yajl's
 * event parser (ADR-0020), so no tree is built and every key is seen and checked as strictly as
 * safetensors itself checks it: N at most 100 MB and inside the file, valid UTF-8 JSON, unique
 * names, known dtypes, byte sizes equal to shape x dtype size (overflow-checked), and offsets that
 * tile the data section exactly: sorted, contiguous, no hole, no overlap, ending at the end of the
 * file.
 */
#define _GNU_SOURCE
#include <yajl/yajl_parse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "formats_internal.h"
#include "yajl_guard.h"

typedef struct STDType {
  const char *name;
  HurrayDType dtype;
  int rank; /* position in safetensors' Dtype enum: its writer sorts by it */
} STDType;

static const STDType st_dtypes[] = {
    {"BOOL", HURRAY_DTYPE_BOOL, 0},
    {"F4", HURRAY_DTYPE_FLOAT4_E2M1FN, 1},
    {"F6_E2M3", HURRAY_DTYPE_FLOAT6_E2M3FN, 2},
    {"F6_E3M2", HURRAY_DTYPE_FLOAT6_E3M2FN, 3},
    {"U8", HURRAY_DTYPE_UINT8, 4},
    {"I8", HURRAY_DTYPE_INT8, 5},
    {"F8_E5M2", HURRAY_DTYPE_FLOAT8_E5M2, 6},
    {"F8_E4M3", HURRAY_DTYPE_FLOAT8_E4M3FN, 7},
    {"F8_E8M0", HURRAY_DTYPE_FLOAT8_E8M0FNU, 8},
    {"I16", HURRAY_DTYPE_INT16, 9},
    {"U16", HURRAY_DTYPE_UINT16, 10},
    {"F16", HURRAY_DTYPE_FLOAT16, 11},
    {"BF16", HURRAY_DTYPE_BFLOAT16, 12},
    {"I32", HURRAY_DTYPE_INT32, 13},
    {"U32", HURRAY_DTYPE_UINT32, 14},
    {"F32", HURRAY_DTYPE_FLOAT32, 15},
    {"C64", HURRAY_DTYPE_COMPLEX64, 16},
    {"F64", HURRAY_DTYPE_FLOAT64, 17},
    {"I64", HURRAY_DTYPE_INT64, 18},
    {"U64", HURRAY_DTYPE_UINT64, 19},
};
#define ST_DTYPE_COUNT (sizeof st_dtypes / sizeof st_dtypes[0])

const char *hurray__st_dtype_name(HurrayDType dtype) {
  for (size_t i = 0; i < ST_DTYPE_COUNT; i++) {
    if (st_dtypes[i].dtype == dtype) return st_dtypes[i].name;
  }
  return NULL;
}

int hurray__st_dtype_rank(HurrayDType dtype) {
  for (size_t i = 0; i < ST_DTYPE_COUNT; i++) {
    if (st_dtypes[i].dtype == dtype) return st_dtypes[i].rank;
  }
  return -1;
}

void hurray__st_free(HurraySTFile *f) {
  for (size_t i = 0; i < f->count; i++) {
    free(f->tensors[i].name);
    free(f->tensors[i].shape);
  }
  free(f->tensors);
  hurray__meta_free(&f->metadata);
  memset(f, 0, sizeof *f);
}

/* Where the event parser is in the header. */
typedef enum {
  P_START,      /* before the root object */
  P_ROOT,       /* in the root: a key next */
  P_ROOT_VALUE, /* after a root key: an object next */
  P_META,       /* in __metadata__: a key next */
  P_META_VALUE, /* a string next */
  P_TENSOR,     /* in a tensor object: a field name next */
  P_DTYPE,      /* a string next */
  P_SHAPE0,     /* "[" next */
  P_SHAPE,      /* numbers or "]" */
  P_OFFS0,
  P_OFFS,
  P_END /* after the root */
} PState;

typedef struct StParse {
  HurraySTFile *f;
  HurrayError *error;
  HurrayStatus status;
  PState state;
  bool seen_meta;
  char *key; /* the pending root key or metadata key */
  size_t key_len;
  HurraySTTensor *t; /* the tensor being read */
  unsigned fields;   /* bit 0 dtype, 1 shape, 2 offsets */
  size_t shape_cap;
  unsigned offs; /* offsets read */
  size_t cap;
} StParse;

static int st_fail(StParse *p, HurrayStatus code, const char *fmt, const char *arg) {
  p->status = hurray__fail(p->error, code, fmt, arg);
  return 0;
}

static int bad_value(StParse *p) {
  return st_fail(p, HURRAY_ERR_MALFORMED,
                 "safetensors header: an unexpected value%s (tensors are {\"dtype\", \"shape\", "
                 "\"data_offsets\"} objects, __metadata__ an object of strings)",
                 "");
}

static int on_null(void *ctx) { return bad_value(ctx); }
static int on_bool(void *ctx, int v) {
  (void)v;
  return bad_value(ctx);
}

static int on_number(void *ctx, const char *text, size_t len) {
  StParse *p = ctx;
  if (p->state != P_SHAPE && p->state != P_OFFS) return bad_value(p);
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9' || v > (UINT64_MAX - (uint64_t)(text[i] - '0')) / 10) {
      return st_fail(p, HURRAY_ERR_MALFORMED,
                     "safetensors header: tensor %.200s has a shape or offset that is not an "
                     "integer in 0..2^64-1",
                     p->t->name);
    }
    v = v * 10 + (uint64_t)(text[i] - '0');
  }
  if (len == 0) return bad_value(p);
  HurraySTTensor *t = p->t;
  if (p->state == P_OFFS) {
    if (p->offs >= 2) {
      return st_fail(p, HURRAY_ERR_MALFORMED,
                     "safetensors header: tensor %.200s has data_offsets of more than two "
                     "entries",
                     t->name);
    }
    if (p->offs++ == 0) t->begin = v;
    else t->end = v;
    return 1;
  }
  if (t->rank >= HURRAY_MAX_RANK) {
    return st_fail(p, HURRAY_ERR_LIMIT,
                   "safetensors header: tensor %.200s has more dimensions than hurray's 32",
                   t->name);
  }
  if (t->rank == p->shape_cap) {
    size_t cap = p->shape_cap ? p->shape_cap * 2 : 4;
    uint64_t *shape = realloc(t->shape, cap * sizeof *shape);
    if (shape == NULL) return st_fail(p, HURRAY_ERR_NO_MEMORY, "out of memory%s", "");
    t->shape = shape;
    p->shape_cap = cap;
  }
  t->shape[t->rank++] = v;
  return 1;
}

static int on_string(void *ctx, const unsigned char *s, size_t len) {
  StParse *p = ctx;
  if (p->state == P_META_VALUE) {
    char full[HURRAY_MAX_METADATA_KEY_BYTES + 16];
    snprintf(full, sizeof full, "safetensors.%s", p->key);
    if (hurray__meta_find(&p->f->metadata, full) != NULL) {
      return st_fail(p, HURRAY_ERR_DUPLICATE_NAME,
                     "safetensors header: __metadata__ key %.200s appears twice", p->key);
    }
    /* yajl checks the UTF-8 structure only; overlong forms and surrogates
     * get past it, and safetensors (serde) refuses them. */
    if (memchr(s, 0, len) != NULL || !hurray__utf8_valid((const char *)s, len)) {
      return st_fail(p, HURRAY_ERR_MALFORMED,
                     "safetensors header: __metadata__ value of %.200s holds a NUL or is not "
                     "valid UTF-8",
                     p->key);
    }
    p->status = hurray__meta_set(&p->f->metadata, full, HURRAY_METADATA_STRING, s, len, p->error);
    p->state = P_META;
    return p->status == HURRAY_OK;
  }
  if (p->state != P_DTYPE) return bad_value(p);
  const STDType *dt = NULL;
  for (size_t i = 0; i < ST_DTYPE_COUNT; i++) {
    if (strlen(st_dtypes[i].name) == len && memcmp(st_dtypes[i].name, s, len) == 0) {
      dt = &st_dtypes[i];
    }
  }
  if (dt == NULL) {
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)(len > 40 ? 40 : len), (const char *)s);
    p->status = hurray__fail(p->error, HURRAY_ERR_UNSUPPORTED,
                             "safetensors header: tensor %.200s has dtype %s, which no hurray "
                             "dtype holds",
                             p->t->name, name);
    return 0;
  }
  p->t->dtype = dt->dtype;
  p->t->type_name = dt->name;
  p->state = P_TENSOR;
  return 1;
}

static int on_start_map(void *ctx) {
  StParse *p = ctx;
  if (p->state == P_START) {
    p->state = P_ROOT;
    return 1;
  }
  if (p->state != P_ROOT_VALUE) return bad_value(p);
  if (p->key_len == 12 && memcmp(p->key, "__metadata__", 12) == 0) {
    if (p->seen_meta) {
      return st_fail(p, HURRAY_ERR_DUPLICATE_NAME, "safetensors header: %s appears twice",
                     "__metadata__");
    }
    p->seen_meta = true;
    p->state = P_META;
    return 1;
  }
  HurraySTFile *f = p->f;
  if (f->count >= HURRAY_MAX_TENSORS) {
    return st_fail(p, HURRAY_ERR_LIMIT, "safetensors header: more tensors than hurray's limit%s",
                   "");
  }
  if (f->count == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    HurraySTTensor *ts = realloc(f->tensors, cap * sizeof *ts);
    if (ts == NULL) return st_fail(p, HURRAY_ERR_NO_MEMORY, "out of memory%s", "");
    f->tensors = ts;
    p->cap = cap;
  }
  p->t = &f->tensors[f->count++];
  memset(p->t, 0, sizeof *p->t);
  p->t->name = p->key; /* the tensor owns the key now */
  p->key = NULL;
  p->fields = 0;
  p->shape_cap = 0;
  p->offs = 0;
  p->state = P_TENSOR;
  return 1;
}

static int on_key(void *ctx, const unsigned char *key, size_t len) {
  StParse *p = ctx;
  if (p->state != P_ROOT && p->state != P_META && p->state != P_TENSOR) return bad_value(p);
  if (p->state == P_TENSOR) {
    static const char *const names[3] = {"dtype", "shape", "data_offsets"};
    static const PState next[3] = {P_DTYPE, P_SHAPE0, P_OFFS0};
    for (unsigned i = 0; i < 3; i++) {
      if (strlen(names[i]) == len && memcmp(names[i], key, len) == 0) {
        if (p->fields & (1u << i)) {
          return st_fail(p, HURRAY_ERR_MALFORMED,
                         "safetensors header: tensor %.200s repeats a field", p->t->name);
        }
        p->fields |= 1u << i;
        p->state = next[i];
        return 1;
      }
    }
    return st_fail(p, HURRAY_ERR_MALFORMED,
                   "safetensors header: tensor %.200s has a field other than dtype, shape and "
                   "data_offsets",
                   p->t->name);
  }
  size_t limit = p->state == P_ROOT ? HURRAY_MAX_TENSOR_NAME_BYTES
                                    : HURRAY_MAX_METADATA_KEY_BYTES - 16;
  /* NUL first: the UTF-8 check refuses it too, with the wrong reason. */
  if (len == 0 || len > limit || memchr(key, 0, len) != NULL) {
    return st_fail(p, HURRAY_ERR_LIMIT,
                   "safetensors header: a name or key that is empty, holds a NUL, or is longer "
                   "than hurray allows%s",
                   "");
  }
  if (!hurray__utf8_valid((const char *)key, len)) {
    return st_fail(p, HURRAY_ERR_MALFORMED,
                   "safetensors header: a name or key that is not valid "
                   "UTF-8%s",
                   "");
  }
  free(p->key);
  p->key = strndup((const char *)key, len);
  p->key_len = len;
  if (p->key == NULL) return st_fail(p, HURRAY_ERR_NO_MEMORY, "out of memory%s", "");
  p->state = p->state == P_ROOT ? P_ROOT_VALUE : P_META_VALUE;
  return 1;
}

static int on_end_map(void *ctx) {
  StParse *p = ctx;
  if (p->state == P_META) {
    p->state = P_ROOT;
    return 1;
  }
  if (p->state == P_ROOT) {
    p->state = P_END;
    return 1;
  }
  if (p->state != P_TENSOR) return bad_value(p);
  if (p->fields != 7 || p->offs != 2) {
    return st_fail(p, HURRAY_ERR_MALFORMED,
                   "safetensors header: tensor %.200s needs \"dtype\", \"shape\" and "
                   "\"data_offsets\" ([begin, end])",
                   p->t->name);
  }
  p->state = P_ROOT;
  return 1;
}

static int on_start_array(void *ctx) {
  StParse *p = ctx;
  if (p->state == P_SHAPE0) p->state = P_SHAPE;
  else if (p->state == P_OFFS0) p->state = P_OFFS;
  else return bad_value(p);
  return 1;
}

static int on_end_array(void *ctx) {
  StParse *p = ctx;
  if (p->state != P_SHAPE && p->state != P_OFFS) return bad_value(p);
  p->state = P_TENSOR;
  return 1;
}

/* The value of the 4 hex digits at p, or -1. */
static long hex4(const unsigned char *p) {
  long v = 0;
  for (int i = 0; i < 4; i++) {
    int c = p[i], d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

/* Whether a string of the JSON text holds a \u escape of a surrogate not
 * in a high-low pair. yajl decodes one into '?', so a name would come out
 * renamed; serde (safetensors) refuses the header. */
static bool has_lone_surrogate_escape(const unsigned char *s, size_t n) {
  bool in_string = false;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '"') {
      in_string = !in_string;
    } else if (in_string && s[i] == '\\' && i + 1 < n) {
      i++; /* the escaped character */
      if (s[i] != 'u' || n - i < 5) continue;
      long v = hex4(s + i + 1);
      i += 4;
      if (v >= 0xDC00 && v <= 0xDFFF) return true;
      if (v < 0xD800 || v > 0xDBFF) continue;
      long low = n - i > 6 && s[i + 1] == '\\' && s[i + 2] == 'u' ? hex4(s + i + 3) : -1;
      if (low < 0xDC00 || low > 0xDFFF) return true;
      i += 6;
    }
  }
  return false;
}

static HurrayStatus check_escapes(const uint8_t *json, size_t n, HurrayError *error) {
  if (!has_lone_surrogate_escape(json, n)) return HURRAY_OK;
  return hurray__fail(error, HURRAY_ERR_MALFORMED,
                      "safetensors header: a \\u escape holds a surrogate outside a high-low "
                      "pair, which is not text");
}

static const yajl_callbacks st_callbacks = {on_null,    on_bool,        NULL,         NULL,
                                            on_number,  on_string,      on_start_map, on_key,
                                            on_end_map, on_start_array, on_end_array};

static int by_name(const void *a, const void *b) {
  return strcmp(((const HurraySTTensor *)a)->name, ((const HurraySTTensor *)b)->name);
}

static int by_begin(const void *a, const void *b) {
  const HurraySTTensor *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return strcmp(x->name, y->name);
}

/* Shape x dtype against the offsets, overflow-checked. */
static HurrayStatus check_size(const HurraySTTensor *t, HurrayError *error) {
  if (t->end < t->begin) {
    return hurray__fail(error, HURRAY_ERR_MALFORMED,
                        "safetensors header: tensor %.200s ends before it begins", t->name);
  }
  uint64_t numel = 1;
  for (uint32_t i = 0; i < t->rank; i++) {
    if (!hurray__mul_u64(numel, t->shape[i], &numel)) {
      return hurray__fail(error, HURRAY_ERR_OVERFLOW,
                          "safetensors header: the shape of tensor %.200s overflows 64 bits",
                          t->name);
    }
  }
  uint64_t bits;
  if (!hurray__mul_u64(numel, hurray_dtype_bits(t->dtype), &bits)) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW,
                        "safetensors header: the byte size of tensor %.200s overflows 64 bits",
                        t->name);
  }
  if (bits % 8 != 0) {
    return hurray__fail(error, HURRAY_ERR_MALFORMED,
                        "safetensors header: tensor %.200s (%s) does not fill whole bytes",
                        t->name, t->type_name);
  }
  if (t->end - t->begin != bits / 8) {
    return hurray__fail(error, HURRAY_ERR_MALFORMED,
                        "safetensors header: tensor %.200s spans %llu bytes, its shape and dtype "
                        "need %llu",
                        t->name, (unsigned long long)(t->end - t->begin),
                        (unsigned long long)(bits / 8));
  }
  return HURRAY_OK;
}

/* The tensors of `out` (sorted by where they begin) tile the data section
 * from its first byte, none past the `held` bytes the file has; *end is
 * where the last one ends. */
static HurrayStatus check_places(const HurraySTFile *out, uint64_t held, uint64_t *end,
                                 HurrayError *error) {
  uint64_t at = 0;
  for (size_t i = 0; i < out->count; i++) {
    const HurraySTTensor *t = &out->tensors[i];
    if (t->begin > at && t->end > held) { /* a hole would be the lesser complaint */
      return hurray__fail(error, HURRAY_ERR_TRUNCATED,
                          "safetensors header: tensor %.200s lies at bytes [%llu, %llu) of the "
                          "data, past the %llu bytes the file holds",
                          t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)held);
    }
    if (t->begin != at) {
      return hurray__fail(error, t->begin < at ? HURRAY_ERR_OVERLAP : HURRAY_ERR_RANGE,
                          "safetensors header: tensor %.200s starts at byte %llu of the data, "
                          "where %s",
                          t->name, (unsigned long long)t->begin,
                          t->begin < at ? "it overlaps the tensor before it"
                          : i == 0      ? "no tensor holds the bytes before it"
                                        : "the tensor before it left a hole");
    }
    at = t->end;
  }
  *end = at;
  return HURRAY_OK;
}

HurrayStatus hurray__st_parse(const uint8_t *data, uint64_t size, HurraySTFile *out,
                              HurrayError *error) {
  memset(out, 0, sizeof *out);
  if (size < 8) {
    return hurray__fail(error, HURRAY_ERR_TRUNCATED,
                        "safetensors file of %llu bytes: shorter than its 8-byte header length",
                        (unsigned long long)size);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | data[i];
  if (n > HURRAY_SAFETENSORS_MAX_HEADER_BYTES) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "safetensors header of %llu bytes: more than the %u safetensors allows",
                        (unsigned long long)n, HURRAY_SAFETENSORS_MAX_HEADER_BYTES);
  }
  if (n > size - 8) {
    return hurray__fail(error, HURRAY_ERR_TRUNCATED,
                        "safetensors header of %llu bytes in a file of %llu: truncated",
                        (unsigned long long)n, (unsigned long long)size);
  }
  if (n < 2 || data[8] != '{') {
    return hurray__fail(error, HURRAY_ERR_MALFORMED,
                        "safetensors header does not start with '{': not a safetensors file");
  }
  HURRAY_RETURN_NOT_OK(check_escapes(data + 8, (size_t)n, error));
  StParse p = {.f = out, .error = error, .status = HURRAY_OK, .state = P_START};
  /* safetensors pads the header with spaces, which JSON allows after a value. */
  yajl_status ys = yajl_status_ok;
  char why[200] = "parse error";
  HurrayStatus s = hurray__yajl_parse(&st_callbacks, &p, data + 8, (size_t)n, &ys, why,
                                      sizeof why);
  if (s != HURRAY_OK) {
    s = hurray__fail(error, s, "out of memory for the safetensors header");
  } else {
    s = p.status;
    if (ys != yajl_status_ok && s == HURRAY_OK) {
      s = hurray__fail(error, HURRAY_ERR_MALFORMED,
                       "safetensors header is not valid UTF-8 JSON: %s", why);
    }
  }
  free(p.key);
  if (s == HURRAY_OK && p.state != P_END) {
    s = hurray__fail(error, HURRAY_ERR_MALFORMED, "safetensors header is not one JSON object");
  }
  for (size_t i = 0; s == HURRAY_OK && i < out->count; i++)
    s = check_size(&out->tensors[i], error);
  if (s == HURRAY_OK && out->count > 1) {
    qsort(out->tensors, out->count, sizeof *out->tensors, by_name);
    for (size_t i = 1; s == HURRAY_OK && i < out->count; i++) {
      if (strcmp(out->tensors[i - 1].name, out->tensors[i].name) == 0) {
        s = hurray__fail(error, HURRAY_ERR_DUPLICATE_NAME,
                         "safetensors header: tensor %.200s appears twice", out->tensors[i].name);
      }
    }
    qsort(out->tensors, out->count, sizeof *out->tensors, by_begin);
  }
  uint64_t at = 0;
  if (s == HURRAY_OK) s = check_places(out, size - 8 - n, &at, error);
  out->data_start = 8 + n;
  if (s == HURRAY_OK && at != size - out->data_start) {
    s = hurray__fail(error, at > size - out->data_start ? HURRAY_ERR_TRUNCATED : HURRAY_ERR_RANGE,
                     "safetensors data section: the header places %llu bytes, the file holds "
                     "%llu",
                     (unsigned long long)at, (unsigned long long)(size - out->data_start));
  }
  if (s != HURRAY_OK) hurray__st_free(out);
  return s;
}
