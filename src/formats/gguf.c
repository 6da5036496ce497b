/*
 * GGUF (v2 and v3, little-endian): magic "GGUF", version, tensor count and
 * key-value count (uint64), the key-value pairs, the tensor infos, then
 * the data section at the next multiple of general.alignment (default 32),
 * every tensor at its own aligned offset.
 *
 * Checked as strictly as the hurray reader checks a hurray file: every
 * count against the bytes that remain before anything is allocated (a
 * header that claims 2^40 pairs fails at once), every length and offset
 * with overflow checks and against the file size, unique keys and names,
 * known types, dims multiple of the block size, and tensor offsets equal
 * to ggml's own layout (each at the padded end of the one before).
 *
 * In hurray metadata a pair K becomes "gguf.K": STRING a string (bytes if
 * not UTF-8), integers an int (UINT64 values of 2^63 and more a decimal
 * string), floats a float, BOOL a bool, arrays JSON text; "gguf.__types__"
 * records each K's type in file order, "gguf.__tensors__" the tensor order.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "../core/checked.h"
#include "../core/c_locale.h"
#include "../core/descriptor_internal.h"
#include "../core/error.h"
#include "formats_internal.h"

/* ------------------------------------------------------------ the types */

typedef struct GGType {
  const char *name;
  uint32_t block; /* elements per block */
  uint32_t size;  /* bytes per block */
} GGType;

static const GGType gg_types[] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},    [40] = {"NVFP4", 64, 36},
    [41] = {"Q1_0", 128, 18},
};
#define GG_TYPE_COUNT (sizeof gg_types / sizeof gg_types[0])

const char hurray__gguf_supported_list[] =
    "F32, F16, BF16, F64, I8, I16, I32, I64, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, "
    "Q5_K, Q6_K, Q8_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, "
    "TQ1_0, TQ2_0, MXFP4, NVFP4";

const char *hurray__gguf_type_name(uint32_t type) {
  return type < GG_TYPE_COUNT ? gg_types[type].name : NULL;
}

bool hurray__gguf_block_coded(uint32_t type) {
  uint32_t elements = 0, bytes = 0;
  return type < GG_TYPE_COUNT && hurray_block_format_info(type, &elements, &bytes, NULL) &&
         elements == gg_types[type].block && bytes == gg_types[type].size;
}

bool hurray__gguf_type_supported(uint32_t type) {
  switch (type) {
    case 0:
    case 1:
    case 2:
    case 8:
    case 24:
    case 25:
    case 26:
    case 27:
    case 28:
    case 30: return true;
    default:
      /* The block-coded formats carry ggml's type numbers and block sizes. */
      return hurray__gguf_block_coded(type);
  }
}

/* Value types. */
enum {
  GV_UINT8 = 0,
  GV_INT8,
  GV_UINT16,
  GV_INT16,
  GV_UINT32,
  GV_INT32,
  GV_FLOAT32,
  GV_BOOL,
  GV_STRING,
  GV_ARRAY,
  GV_UINT64,
  GV_INT64,
  GV_FLOAT64,
  GV_COUNT
};
static const char *const gv_names[GV_COUNT] = {"UINT8",  "INT8",    "UINT16", "INT16",  "UINT32",
                                               "INT32",  "FLOAT32", "BOOL",   "STRING", "ARRAY",
                                               "UINT64", "INT64",   "FLOAT64"};
static const uint8_t gv_size[GV_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

static int gv_from_name(const char *s, size_t n) {
  for (int i = 0; i < GV_COUNT; i++) {
    if (strlen(gv_names[i]) == n && memcmp(gv_names[i], s, n) == 0) return i;
  }
  return -1;
}

/* ------------------------------------------------------------- cursor */

typedef struct Cur {
  const uint8_t *p;
  uint64_t at, size;
  HurrayError *error;
} Cur;

static HurrayStatus cur_short(Cur *c, const char *what) {
  return hurray__fail(c->error, HURRAY_ERR_TRUNCATED,
                      "GGUF file ends at byte %llu inside %s: truncated",
                      (unsigned long long)c->size, what);
}

static HurrayStatus rd(Cur *c, uint64_t *v, unsigned n, const char *what) {
  if (c->size - c->at < n) return cur_short(c, what);
  uint64_t x = 0;
  for (unsigned i = n; i-- > 0;) x = (x << 8) | c->p[c->at + i];
  c->at += n;
  *v = x;
  return HURRAY_OK;
}

/* A string: uint64 length, bytes. Borrowed from the file. */
static HurrayStatus rd_str(Cur *c, const uint8_t **s, uint64_t *len, const char *what) {
  HURRAY_RETURN_NOT_OK(rd(c, len, 8, what));
  if (*len > c->size - c->at) {
    return hurray__fail(c->error, HURRAY_ERR_TRUNCATED,
                        "GGUF %s claims %llu bytes, %llu remain in the file", what,
                        (unsigned long long)*len, (unsigned long long)(c->size - c->at));
  }
  *s = c->p + c->at;
  c->at += *len;
  return HURRAY_OK;
}

void hurray__gguf_free(HurrayGGUFFile *f) {
  for (size_t i = 0; i < f->count; i++) free(f->tensors[i].name);
  free(f->tensors);
  hurray__meta_free(&f->metadata);
  memset(f, 0, sizeof *f);
}

/* ------------------------------------------------------------ values */

static void emit_double(HurrayStr *s, double v) {
  if (isnan(v)) hurray__str_add(s, "NaN", 3);
  else if (isinf(v)) hurray__str_addf(s, "%sInfinity", v < 0 ? "-" : "");
  else {
    char buf[40];
    hurray__format_double(buf, sizeof buf, v);
    /* Python writes a float with a point or an exponent; keep it a float. */
    hurray__str_add(s, buf, strlen(buf));
    if (strpbrk(buf, ".eE") == NULL) hurray__str_add(s, ".0", 2);
  }
}

/* A FLOAT32 as a double. A NaN is widened by its bits (sign, payload, the
 * quiet bit in its place): the conversion instruction would make a
 * signalling NaN quiet, and the value would not come back as it was. */
static double f32_of(uint64_t bits) {
  uint32_t b = (uint32_t)bits;
  if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0) {
    uint64_t wide = (uint64_t)(b >> 31) << 63 | (uint64_t)0x7FF << 52 |
                    (uint64_t)(b & 0x007FFFFFu) << 29;
    double d;
    memcpy(&d, &wide, 8);
    return d;
  }
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* The FLOAT32 bits of `v`: a NaN that f32_of widened (nothing in the 29 low
 * bits its payload cannot hold) narrowed by its bits, the rest rounded. */
static uint32_t f32_bits(double v) {
  uint64_t wide;
  memcpy(&wide, &v, 8);
  if (isnan(v) && (wide & ((1u << 29) - 1)) == 0) {
    return (uint32_t)(wide >> 63) << 31 | 0x7F800000u | (uint32_t)(wide >> 29 & 0x007FFFFFu);
  }
  float f = (float)v;
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

static double f64_of(uint64_t bits) {
  double d;
  memcpy(&d, &bits, 8);
  return d;
}

static int64_t sext(uint64_t v, unsigned bytes) {
  if (bytes == 8) return (int64_t)v;
  uint64_t sign = 1ull << (bytes * 8 - 1);
  return (int64_t)((v ^ sign) - sign);
}

/* One scalar of type t as JSON text. */
static HurrayStatus scalar_json(Cur *c, int t, HurrayStr *out) {
  if (t == GV_STRING) {
    const uint8_t *s = NULL;
    uint64_t n = 0;
    HURRAY_RETURN_NOT_OK(rd_str(c, &s, &n, "a string in an array"));
    hurray__str_json_string(out, s, (size_t)n);
    return HURRAY_OK;
  }
  uint64_t v = 0;
  HURRAY_RETURN_NOT_OK(rd(c, &v, gv_size[t], "an array"));
  switch (t) {
    case GV_INT8:
    case GV_INT16:
    case GV_INT32:
    case GV_INT64: hurray__str_addf(out, "%lld", (long long)sext(v, gv_size[t])); break;
    case GV_FLOAT32: emit_double(out, f32_of(v)); break;
    case GV_FLOAT64: emit_double(out, f64_of(v)); break;
    case GV_BOOL:
      if (v > 1) {
        return hurray__fail(c->error, HURRAY_ERR_MALFORMED, "GGUF bool of value %llu",
                            (unsigned long long)v);
      }
      hurray__str_add(out, v ? "true" : "false", v ? 4 : 5);
      break;
    default: hurray__str_addf(out, "%llu", (unsigned long long)v); break;
  }
  return HURRAY_OK;
}

/* An array body (subtype, count, items) as JSON; its type string (the
 * subtypes, "ARRAY:..." when nested) into `type`. Nested arrays must all
 * have one subtype, so that one type string describes them. */
static HurrayStatus array_json(Cur *c, unsigned depth, HurrayStr *out, HurrayStr *type) {
  if (depth > HURRAY_GGUF_MAX_ARRAY_DEPTH) {
    return hurray__fail(c->error, HURRAY_ERR_LIMIT, "GGUF arrays nested deeper than %u",
                        HURRAY_GGUF_MAX_ARRAY_DEPTH);
  }
  uint64_t sub = 0, n = 0;
  HURRAY_RETURN_NOT_OK(rd(c, &sub, 4, "an array header"));
  HURRAY_RETURN_NOT_OK(rd(c, &n, 8, "an array header"));
  if (sub >= GV_COUNT) {
    return hurray__fail(c->error, HURRAY_ERR_MALFORMED, "GGUF array of unknown value type %llu",
                        (unsigned long long)sub);
  }
  /* Each item takes at least one byte (strings and arrays eight or more). */
  uint64_t min = gv_size[sub] ? gv_size[sub] : (sub == GV_STRING ? 8 : 12);
  if (n > (c->size - c->at) / min) {
    return hurray__fail(c->error, HURRAY_ERR_TRUNCATED,
                        "GGUF array of %llu items: more than the %llu bytes left can hold",
                        (unsigned long long)n, (unsigned long long)(c->size - c->at));
  }
  size_t type_mark = type->len;
  hurray__str_add(type, "ARRAY:", 6);
  size_t sub_mark = type->len;
  hurray__str_add(type, gv_names[sub], strlen(gv_names[sub]));
  hurray__str_addc(out, '[');
  char *first_sub = NULL;
  for (uint64_t i = 0; i < n; i++) {
    if (i) hurray__str_add(out, ", ", 2);
    if (sub == GV_ARRAY) {
      HurrayStr inner = {0};
      HurrayStatus s = array_json(c, depth + 1, out, &inner);
      if (s == HURRAY_OK && inner.oom)
        s = hurray__fail(c->error, HURRAY_ERR_NO_MEMORY, "out of memory");
      if (s == HURRAY_OK && first_sub != NULL && strcmp(first_sub, inner.p) != 0) {
        s = hurray__fail(c->error, HURRAY_ERR_UNSUPPORTED,
                         "GGUF array of arrays of different types (%.60s, %.60s): hurray keeps "
                         "one type per key",
                         first_sub, inner.p);
      }
      if (s != HURRAY_OK) {
        hurray__str_free(&inner);
        free(first_sub);
        return s;
      }
      if (first_sub == NULL) first_sub = inner.p;
      else hurray__str_free(&inner);
    } else {
      HURRAY_RETURN_NOT_OK(scalar_json(c, (int)sub, out));
    }
    if (out->oom) break;
  }
  hurray__str_addc(out, ']');
  if (sub == GV_ARRAY) {
    if (first_sub == NULL) {
      free(first_sub);
      return hurray__fail(c->error, HURRAY_ERR_UNSUPPORTED,
                          "GGUF empty array of arrays: the inner type is unknown");
    }
    type->len = sub_mark;
    hurray__str_add(type, first_sub, strlen(first_sub));
    free(first_sub);
  }
  (void)type_mark;
  return out->oom || type->oom ? hurray__fail(c->error, HURRAY_ERR_NO_MEMORY, "out of memory")
                               : HURRAY_OK;
}

/* long: a key, then its value by GGUF type (array, string, scalar), as the file has them. */
static HurrayStatus read_kv(Cur *c, HurrayGGUFFile *f, HurrayStr *types, uint64_t index) {
  const uint8_t *key = NULL;
  uint64_t key_len = 0, t = 0;
  HURRAY_RETURN_NOT_OK(rd_str(c, &key, &key_len, "a key"));
  if (key_len == 0 || key_len > HURRAY_MAX_METADATA_KEY_BYTES - 8 ||
      !hurray__utf8_valid((const char *)key, (size_t)key_len) ||
      memchr(key, 0, (size_t)key_len) != NULL) {
    return hurray__fail(c->error, HURRAY_ERR_MALFORMED,
                        "GGUF key %llu is empty, too long, or not UTF-8",
                        (unsigned long long)index);
  }
  char full[HURRAY_MAX_METADATA_KEY_BYTES + 8];
  snprintf(full, sizeof full, "gguf.%.*s", (int)key_len, (const char *)key);
  if (strcmp(full, HURRAY_META_GGUF_TYPES) == 0 || strcmp(full, HURRAY_META_GGUF_TENSORS) == 0) {
    return hurray__fail(c->error, HURRAY_ERR_UNSUPPORTED,
                        "GGUF key '%s' has the name of the converter's own key %s; it would be "
                        "overwritten",
                        full + 5, full);
  }
  if (hurray__meta_find(&f->metadata, full) != NULL) {
    return hurray__fail(c->error, HURRAY_ERR_DUPLICATE_NAME, "GGUF key %.200s appears twice",
                        full + 5);
  }
  HURRAY_RETURN_NOT_OK(rd(c, &t, 4, "a value type"));
  if (t >= GV_COUNT) {
    return hurray__fail(c->error, HURRAY_ERR_MALFORMED, "GGUF key %.200s has unknown type %llu",
                        full + 5, (unsigned long long)t);
  }
  HurrayStr type = {0};
  HurrayStatus s = HURRAY_OK;
  if (t == GV_ARRAY) {
    HurrayStr json = {0};
    s = array_json(c, 1, &json, &type);
    if (s == HURRAY_OK) {
      s = hurray__meta_set(&f->metadata, full, HURRAY_METADATA_STRING, json.p ? json.p : "",
                           json.len, c->error);
    }
    hurray__str_free(&json);
  } else if (t == GV_STRING) {
    const uint8_t *v = NULL;
    uint64_t n = 0;
    s = rd_str(c, &v, &n, "a string value");
    if (s == HURRAY_OK) {
      bool text = hurray__utf8_valid((const char *)v, (size_t)n) &&
                  memchr(v, 0, (size_t)n) == NULL;
      s = hurray__meta_set(&f->metadata, full,
                           text ? HURRAY_METADATA_STRING : HURRAY_METADATA_BYTES, v, (size_t)n,
                           c->error);
    }
    hurray__str_add(&type, "STRING", 6);
  } else {
    uint64_t v = 0;
    s = rd(c, &v, gv_size[t], "a value");
    if (s == HURRAY_OK) {
      if (t == GV_FLOAT32 || t == GV_FLOAT64) {
        double d = t == GV_FLOAT32 ? f32_of(v) : f64_of(v);
        s = hurray__meta_set(&f->metadata, full, HURRAY_METADATA_FLOAT, &d, 0, c->error);
      } else if (t == GV_BOOL) {
        if (v > 1) {
          s = hurray__fail(c->error, HURRAY_ERR_MALFORMED, "GGUF key %.200s: bool of value %llu",
                           full + 5, (unsigned long long)v);
        } else {
          bool b = v != 0;
          s = hurray__meta_set(&f->metadata, full, HURRAY_METADATA_BOOL, &b, 0, c->error);
        }
      } else if (t == GV_UINT64 && v > (uint64_t)INT64_MAX) {
        char digits[24];
        snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
        s = hurray__meta_set(&f->metadata, full, HURRAY_METADATA_STRING, digits, strlen(digits),
                             c->error);
      } else {
        bool is_signed = t == GV_INT8 || t == GV_INT16 || t == GV_INT32 || t == GV_INT64;
        int64_t i = is_signed ? sext(v, gv_size[t]) : (int64_t)v;
        s = hurray__meta_set(&f->metadata, full, HURRAY_METADATA_INT, &i, 0, c->error);
      }
    }
    hurray__str_add(&type, gv_names[t], strlen(gv_names[t]));
  }
  if (s == HURRAY_OK) {
    if (types->len > 1) hurray__str_add(types, ", ", 2);
    hurray__str_json_string(types, key, (size_t)key_len);
    hurray__str_add(types, ": ", 2);
    hurray__str_json_string(types, (const uint8_t *)type.p, type.len);
    if (type.oom || types->oom) s = hurray__fail(c->error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  hurray__str_free(&type);
  if (s == HURRAY_OK && strcmp(full, "gguf.general.alignment") == 0) {
    const HurrayMeta *m = hurray__meta_find(&f->metadata, full);
    if (t != GV_UINT32 || m->i == 0 || !hurray__is_pow2_u64((uint64_t)m->i)) {
      return hurray__fail(c->error, HURRAY_ERR_MALFORMED,
                          "GGUF general.alignment must be a UINT32 power of two");
    }
    f->alignment = (uint64_t)m->i;
  }
  return s;
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const HurrayGGUFTensor *const *)a)[0]->name,
                ((const HurrayGGUFTensor *const *)b)[0]->name);
}

/* The fixed header: magic, version and the two counts, each count checked
 * against what the rest of the file could hold. */
static HurrayStatus read_header(Cur *c, HurrayGGUFFile *out, uint64_t *n_tensors, uint64_t *n_kv) {
  HurrayError *error = c->error;
  uint64_t size = c->size;
  uint64_t magic = 0, version = 0;
  HURRAY_RETURN_NOT_OK(rd(c, &magic, 4, "the header"));
  if (magic != 0x46554747u) { /* "GGUF" */
    return hurray__fail(error, HURRAY_ERR_BAD_MAGIC, "not a GGUF file (no GGUF magic)");
  }
  HURRAY_RETURN_NOT_OK(rd(c, &version, 4, "the header"));
  if (version != 2 && version != 3) {
    return hurray__fail(error, HURRAY_ERR_UNSUPPORTED,
                        "GGUF version %llu%s; hurray reads little-endian versions 2 and 3",
                        (unsigned long long)version,
                        (version & 0xFFFF) == 0 ? " (a big-endian file?)" : "");
  }
  out->version = (uint32_t)version;
  HURRAY_RETURN_NOT_OK(rd(c, n_tensors, 8, "the header"));
  HURRAY_RETURN_NOT_OK(rd(c, n_kv, 8, "the header"));
  /* A pair takes at least 13 bytes (key length, type, one byte), a tensor
   * info at least 24: a count the rest of the file cannot hold is a lie. */
  if (*n_kv > HURRAY_GGUF_MAX_KV || *n_kv > (size - c->at) / 13) {
    return hurray__fail(error,
                        *n_kv > HURRAY_GGUF_MAX_KV ? HURRAY_ERR_LIMIT : HURRAY_ERR_TRUNCATED,
                        "GGUF header claims %llu key-value pairs (at most %u, and the file "
                        "holds %llu bytes)",
                        (unsigned long long)*n_kv, HURRAY_GGUF_MAX_KV, (unsigned long long)size);
  }
  if (*n_tensors > HURRAY_GGUF_MAX_TENSORS || *n_tensors > (size - c->at) / 24) {
    return hurray__fail(
        error, *n_tensors > HURRAY_GGUF_MAX_TENSORS ? HURRAY_ERR_LIMIT : HURRAY_ERR_TRUNCATED,
        "GGUF header claims %llu tensors (at most %u, and the file holds %llu "
        "bytes)",
        (unsigned long long)*n_tensors, HURRAY_GGUF_MAX_TENSORS, (unsigned long long)size);
  }
  return HURRAY_OK;
}

/* The key-value pairs, and the JSON object of their types kept as
 * "gguf.__types__". */
static HurrayStatus read_pairs(Cur *c, HurrayGGUFFile *out, uint64_t n_kv) {
  HurrayStr types = {0};
  hurray__str_addc(&types, '{');
  HurrayStatus s = HURRAY_OK;
  for (uint64_t i = 0; s == HURRAY_OK && i < n_kv; i++) s = read_kv(c, out, &types, i);
  hurray__str_addc(&types, '}');
  if (s == HURRAY_OK && types.oom) {
    s = hurray__fail(c->error, HURRAY_ERR_NO_MEMORY, "out of memory");
  }
  if (s == HURRAY_OK) {
    s = hurray__meta_set(&out->metadata, HURRAY_META_GGUF_TYPES, HURRAY_METADATA_STRING, types.p,
                         types.len, c->error);
  }
  hurray__str_free(&types);
  return s;
}

/* Tensor info `i` into the next slot of out->tensors; out->count counts it
 * as soon as it owns a name, so that hurray__gguf_free frees it. */
static HurrayStatus read_tensor_info(Cur *c, HurrayGGUFFile *out, uint64_t i, uint64_t n) {
  HurrayError *error = c->error;
  HurrayGGUFTensor *t = &out->tensors[out->count];
  const uint8_t *name = NULL;
  uint64_t name_len = 0, n_dims = 0, type = 0;
  HURRAY_RETURN_NOT_OK(rd_str(c, &name, &name_len, "a tensor name"));
  if (name_len == 0 || name_len > HURRAY_MAX_TENSOR_NAME_BYTES ||
      !hurray__utf8_valid((const char *)name, (size_t)name_len) ||
      memchr(name, 0, (size_t)name_len) != NULL) {
    /* Past the first, the likeliest cause is a header that counts more
     * tensors than its table holds: the "name" is then other bytes. */
    return hurray__fail(
        error, HURRAY_ERR_MALFORMED,
        "GGUF tensor %llu of the %llu the header counts: name empty, longer than "
        "%u bytes, or not UTF-8%s",
        (unsigned long long)i, (unsigned long long)n, HURRAY_MAX_TENSOR_NAME_BYTES,
        i > 0 ? " (a tensor count larger than the table, or a damaged table)" : "");
  }
  t->name = strndup((const char *)name, (size_t)name_len);
  if (t->name == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  out->count++;
  HURRAY_RETURN_NOT_OK(rd(c, &n_dims, 4, "a tensor info"));
  if (n_dims > HURRAY_GGUF_MAX_DIMS) {
    return hurray__fail(error, HURRAY_ERR_LIMIT,
                        "GGUF tensor %.200s has %llu dimensions (at most %u)", t->name,
                        (unsigned long long)n_dims, HURRAY_GGUF_MAX_DIMS);
  }
  t->n_dims = (uint32_t)n_dims;
  uint64_t numel = 1;
  for (uint32_t d = 0; d < t->n_dims; d++) {
    HURRAY_RETURN_NOT_OK(rd(c, &t->dims[d], 8, "a tensor info"));
    if (t->dims[d] > (uint64_t)INT64_MAX) { /* ggml's ne is int64 */
      return hurray__fail(error, HURRAY_ERR_OVERFLOW,
                          "GGUF tensor %.200s: dimension %u is %llu, past 2^63 - 1", t->name, d,
                          (unsigned long long)t->dims[d]);
    }
    if (!hurray__mul_u64(numel, t->dims[d], &numel) || numel > (uint64_t)INT64_MAX) {
      return hurray__fail(error, HURRAY_ERR_OVERFLOW,
                          "GGUF tensor %.200s: its element count is past 2^63 - 1", t->name);
    }
  }
  HURRAY_RETURN_NOT_OK(rd(c, &type, 4, "a tensor info"));
  HURRAY_RETURN_NOT_OK(rd(c, &t->offset, 8, "a tensor info"));
  if (type >= GG_TYPE_COUNT || gg_types[type].name == NULL) {
    return hurray__fail(error, HURRAY_ERR_MALFORMED, "GGUF tensor %.200s has unknown type %llu",
                        t->name, (unsigned long long)type);
  }
  t->type = (uint32_t)type;
  const GGType *gt = &gg_types[type];
  uint64_t d0 = t->n_dims ? t->dims[0] : 1;
  if (d0 % gt->block != 0) {
    return hurray__fail(error, HURRAY_ERR_MALFORMED,
                        "GGUF tensor %.200s (%s): first dim %llu is not a multiple of its "
                        "block size %u",
                        t->name, gt->name, (unsigned long long)d0, gt->block);
  }
  if (!hurray__mul_u64(numel / gt->block, gt->size, &t->nbytes)) {
    return hurray__fail(error, HURRAY_ERR_OVERFLOW, "GGUF tensor %.200s: byte size overflows",
                        t->name);
  }
  return HURRAY_OK;
}

/* Unique names: sort pointers. */
static HurrayStatus check_unique_names(const HurrayGGUFFile *out, HurrayError *error) {
  if (out->count < 2) return HURRAY_OK;
  const HurrayGGUFTensor **order = malloc(out->count * sizeof *order);
  if (order == NULL) return hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < out->count; i++) order[i] = &out->tensors[i];
  qsort(order, out->count, sizeof *order, by_name);
  HurrayStatus s = HURRAY_OK;
  for (size_t i = 1; i < out->count; i++) {
    if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
      s = hurray__fail(error, HURRAY_ERR_DUPLICATE_NAME, "GGUF tensor %.200s appears twice",
                       order[i]->name);
      break;
    }
  }
  free(order);
  return s;
}

/* The data section starts at the first aligned offset after the infos
 * (`infos_end`); each tensor must sit where the one before it, aligned,
 * ends, and all must end inside the file. */
static HurrayStatus place_data(HurrayGGUFFile *out, uint64_t infos_end, uint64_t size,
                               HurrayError *error) {
  uint64_t a = out->alignment;
  uint64_t start = hurray__ceil_div_u64(infos_end, a) * a;
  if (start > size) {
    return hurray__fail(error, HURRAY_ERR_TRUNCATED, "GGUF file ends before its data section");
  }
  out->data_start = start;
  uint64_t at = 0;
  for (size_t i = 0; i < out->count; i++) {
    HurrayGGUFTensor *t = &out->tensors[i];
    if (t->offset != at) {
      /* Usually the tensor before holds a byte count its type and dims do
       * not give: name it, and the size its type implies. */
      if (i == 0) {
        return hurray__fail(error, HURRAY_ERR_RANGE,
                            "GGUF tensor %.200s at data offset %llu, where the layout puts the "
                            "first tensor at 0",
                            t->name, (unsigned long long)t->offset);
      }
      const HurrayGGUFTensor *prev = &out->tensors[i - 1];
      return hurray__fail(error, HURRAY_ERR_RANGE,
                          "GGUF tensor %.200s at data offset %llu, where the layout puts it at "
                          "%llu: the tensor before it, %.200s, is %s and its dims make it %llu "
                          "bytes; its data does not have that size",
                          t->name, (unsigned long long)t->offset, (unsigned long long)at,
                          prev->name, gg_types[prev->type].name, (unsigned long long)prev->nbytes);
    }
    uint64_t end;
    if (!hurray__add_u64(at, t->nbytes, &end) || end > size - start) {
      return hurray__fail(error, HURRAY_ERR_TRUNCATED,
                          "GGUF tensor %.200s (%s: its dims make it %llu bytes, at data offset "
                          "%llu) reaches past the end of the file",
                          t->name, gg_types[t->type].name, (unsigned long long)t->nbytes,
                          (unsigned long long)at);
    }
    at = end % a ? end + (a - end % a) : end; /* end <= size: no overflow */
  }
  return HURRAY_OK;
}

/* The tensor names in file order, as the JSON array "gguf.__tensors__". */
static HurrayStatus record_names(HurrayGGUFFile *out, HurrayError *error) {
  HurrayStr names = {0};
  hurray__str_addc(&names, '[');
  for (size_t i = 0; i < out->count; i++) {
    if (i) hurray__str_add(&names, ", ", 2);
    hurray__str_json_string(&names, (const uint8_t *)out->tensors[i].name,
                            strlen(out->tensors[i].name));
  }
  hurray__str_addc(&names, ']');
  HurrayStatus s = names.oom ? hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory")
                             : hurray__meta_set(&out->metadata, HURRAY_META_GGUF_TENSORS,
                                                HURRAY_METADATA_STRING, names.p, names.len, error);
  hurray__str_free(&names);
  return s;
}

HurrayStatus hurray__gguf_parse(const uint8_t *data, uint64_t size, HurrayGGUFFile *out,
                                HurrayError *error) {
  memset(out, 0, sizeof *out);
  out->alignment = HURRAY_GGUF_DEFAULT_ALIGNMENT;
  Cur c = {data, 0, size, error};
  uint64_t n_tensors = 0, n_kv = 0;
  HURRAY_RETURN_NOT_OK(read_header(&c, out, &n_tensors, &n_kv));
  HurrayStatus s = read_pairs(&c, out, n_kv);
  if (s != HURRAY_OK) goto fail;
  out->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *out->tensors);
  if (out->tensors == NULL) {
    s = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  for (uint64_t i = 0; s == HURRAY_OK && i < n_tensors; i++)
    s = read_tensor_info(&c, out, i, n_tensors);
  if (s == HURRAY_OK) s = check_unique_names(out, error);
  if (s == HURRAY_OK) s = place_data(out, c.at, size, error);
  if (s == HURRAY_OK) s = record_names(out, error);
  if (s == HURRAY_OK) return HURRAY_OK;
fail:
  hurray__gguf_free(out);
  return s;
}

/* -------------------------------------------------------- block layout */

void hurray__gguf_blocks_to_codes(uint32_t type, const uint8_t *blocks, uint64_t nblocks,
                                  uint8_t *codes, uint8_t *scales) {
  if (type == HURRAY_GGUF_TYPE_Q8_0) {
    for (uint64_t b = 0; b < nblocks; b++) {
      const uint8_t *src = blocks + b * 34;
      memcpy(scales + b * 2, src, 2); /* d, bit for bit */
      memcpy(codes + b * 32, src + 2, 32);
    }
    return;
  }
  /* Q4_0: GGUF byte j holds element j (low nibble) and j+16 (high);
   * hurray byte k holds element 2k (low) and 2k+1 (high). */
  for (uint64_t b = 0; b < nblocks; b++) {
    const uint8_t *src = blocks + b * 18;
    uint8_t *dst = codes + b * 16;
    uint8_t e[32];
    memcpy(scales + b * 2, src, 2);
    for (int j = 0; j < 16; j++) {
      e[j] = src[2 + j] & 0x0F;
      e[j + 16] = src[2 + j] >> 4;
    }
    for (int k = 0; k < 16; k++) dst[k] = (uint8_t)(e[2 * k] | (e[2 * k + 1] << 4));
  }
}

void hurray__gguf_codes_to_blocks(uint32_t type, const uint8_t *codes, const uint8_t *scales,
                                  uint64_t nblocks, uint8_t *blocks) {
  if (type == HURRAY_GGUF_TYPE_Q8_0) {
    for (uint64_t b = 0; b < nblocks; b++) {
      memcpy(blocks + b * 34, scales + b * 2, 2);
      memcpy(blocks + b * 34 + 2, codes + b * 32, 32);
    }
    return;
  }
  for (uint64_t b = 0; b < nblocks; b++) {
    const uint8_t *src = codes + b * 16;
    uint8_t *dst = blocks + b * 18;
    uint8_t e[32];
    for (int k = 0; k < 16; k++) {
      e[2 * k] = src[k] & 0x0F;
      e[2 * k + 1] = src[k] >> 4;
    }
    memcpy(dst, scales + b * 2, 2);
    for (int j = 0; j < 16; j++) dst[2 + j] = (uint8_t)(e[j] | (e[j + 16] << 4));
  }
}

/* ------------------------------------------------------ KV from hurray */

static void put(HurrayStr *o, uint64_t v, unsigned n) {
  uint8_t b[8];
  for (unsigned i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
  hurray__str_add(o, b, n);
}

static void put_str(HurrayStr *o, const void *s, size_t n) {
  put(o, n, 8);
  hurray__str_add(o, s, n);
}

typedef struct Enc {
  HurrayError *error;
  const char *key;
} Enc;

static HurrayStatus enc_fail(Enc *e, const char *why) {
  return hurray__fail(e->error, HURRAY_ERR_INVALID_ARGUMENT,
                      "metadata gguf.%.200s: cannot write it as GGUF: %s", e->key, why);
}

/* Integer `neg`/`mag` into type t, range-checked. */
static HurrayStatus enc_int(Enc *e, HurrayStr *o, int t, bool neg, uint64_t mag) {
  static const int64_t lo[GV_COUNT] = {[GV_INT8] = INT8_MIN,
                                       [GV_INT16] = INT16_MIN,
                                       [GV_INT32] = INT32_MIN,
                                       [GV_INT64] = INT64_MIN};
  static const uint64_t hi[GV_COUNT] = {
      [GV_UINT8] = UINT8_MAX,   [GV_INT8] = INT8_MAX,     [GV_UINT16] = UINT16_MAX,
      [GV_INT16] = INT16_MAX,   [GV_UINT32] = UINT32_MAX, [GV_INT32] = INT32_MAX,
      [GV_UINT64] = UINT64_MAX, [GV_INT64] = INT64_MAX,   [GV_BOOL] = 1};
  bool is_signed = t == GV_INT8 || t == GV_INT16 || t == GV_INT32 || t == GV_INT64;
  if (neg && mag != 0) {
    if (!is_signed || mag > (uint64_t)(-(lo[t] + 1)) + 1) return enc_fail(e, "out of range");
    put(o, (uint64_t)(-(int64_t)(mag - 1) - 1), gv_size[t]);
    return HURRAY_OK;
  }
  if (mag > hi[t]) return enc_fail(e, "out of range");
  put(o, mag, gv_size[t]);
  return HURRAY_OK;
}

/* A finite double that binary32 rounds to an infinity (from 2^128 - 2^103
 * up) or to zero (from 2^-150 down): compared, not converted, as that
 * conversion is undefined in C outside float's range. */
static bool f32_overflows(double v) { return isfinite(v) && fabs(v) >= 0x1.ffffffp+127; }
static bool f32_vanishes(double v) { return v != 0 && fabs(v) <= 0x1p-150; }

static HurrayStatus enc_float(Enc *e, HurrayStr *o, int t, double v) {
  if (t == GV_FLOAT32) {
    if (f32_overflows(v)) return enc_fail(e, "a value past FLOAT32's range");
    if (f32_vanishes(v)) return enc_fail(e, "a value too small for FLOAT32, which would be 0");
    put(o, f32_bits(v), 4);
  } else {
    uint64_t b;
    memcpy(&b, &v, 8);
    put(o, b, 8);
  }
  return HURRAY_OK;
}

/* A JSON value into GGUF type `type` (a string like "ARRAY:ARRAY:INT32"). */
static HurrayStatus enc_json(Enc *e, HurrayStr *o, const char *type, const HurrayJ *j) {
  if (strncmp(type, "ARRAY:", 6) == 0) {
    if (j->kind != HJ_ARR) return enc_fail(e, "an array type with a value that is not a list");
    const char *sub = type + 6;
    const char *colon = strchr(sub, ':');
    int st = gv_from_name(sub, colon ? (size_t)(colon - sub) : strlen(sub));
    if (st < 0 || (st == GV_ARRAY) != (colon != NULL)) return enc_fail(e, "unknown array type");
    if (st == GV_ARRAY && j->len == 0) { /* the inner type travels in the items only */
      return enc_fail(e, "an empty array of arrays, whose inner type GGUF cannot keep");
    }
    put(o, (uint64_t)st, 4);
    put(o, j->len, 8);
    for (size_t i = 0; i < j->len; i++) HURRAY_RETURN_NOT_OK(enc_json(e, o, sub, &j->items[i]));
    return HURRAY_OK;
  }
  int t = gv_from_name(type, strlen(type));
  if (t < 0 || t == GV_ARRAY) return enc_fail(e, "unknown type");
  if (t == GV_STRING) {
    if (j->kind != HJ_STR) return enc_fail(e, "a string item that is not a string");
    put_str(o, j->str, j->len);
    return HURRAY_OK;
  }
  if (t == GV_FLOAT32 || t == GV_FLOAT64) {
    if (j->kind != HJ_NUM) return enc_fail(e, "a float item that is not a number");
    return enc_float(e, o, t, j->num);
  }
  if (t == GV_BOOL && j->kind == HJ_BOOL) {
    put(o, j->b, 1);
    return HURRAY_OK;
  }
  if (j->kind == HJ_STR) { /* a big UINT64 kept as digits */
    /* Decimal digits only: strtoull alone would take a sign or leading
     * blanks, and saturate past 2^64 - 1 instead of failing. */
    if (j->len == 0 || j->len > 20) return enc_fail(e, "not an integer");
    unsigned long long v = 0;
    for (size_t i = 0; i < j->len; i++) {
      unsigned d = (unsigned char)j->str[i] - (unsigned)'0';
      if (d > 9) return enc_fail(e, "not an integer");
      if (v > (ULLONG_MAX - d) / 10) return enc_fail(e, "an integer past 2^64 - 1");
      v = v * 10 + d;
    }
    return enc_int(e, o, t, false, v);
  }
  if (j->kind == HJ_BOOL) return enc_int(e, o, t, false, j->b);
  if (j->kind != HJ_NUM || !j->is_int)
    return enc_fail(e, "an integer item that is not an integer");
  return enc_int(e, o, t, j->negative, j->mag);
}

static HurrayStatus enc_value(Enc *e, HurrayStr *o, const char *type, const HurrayMeta *m) {
  if (strncmp(type, "ARRAY:", 6) == 0) {
    if (m->type != HURRAY_METADATA_STRING && m->type != HURRAY_METADATA_BYTES) {
      return enc_fail(e, "an array is kept as JSON text");
    }
    unsigned depth = 0;
    for (const char *p = type; strncmp(p, "ARRAY:", 6) == 0; p += 6) depth++;
    if (depth > HURRAY_GGUF_MAX_ARRAY_DEPTH) { /* the readers' limit, this one's too */
      return enc_fail(e, "arrays nested deeper than 4, which GGUF readers refuse");
    }
    HurrayJ j;
    HURRAY_RETURN_NOT_OK(hurray__j_parse(m->bytes, m->len, &j, e->error));
    put(o, GV_ARRAY, 4);
    HurrayStatus s = enc_json(e, o, type, &j);
    hurray__j_free(&j);
    return s;
  }
  int t = gv_from_name(type, strlen(type));
  if (t < 0 || t == GV_ARRAY) return enc_fail(e, "unknown type");
  put(o, (uint64_t)t, 4);
  switch (m->type) {
    case HURRAY_METADATA_STRING:
    case HURRAY_METADATA_BYTES:
      if (t == GV_STRING) {
        put_str(o, m->bytes, m->len);
        return HURRAY_OK;
      }
      {
        HurrayJ j = {.kind = HJ_STR, .str = m->bytes, .len = m->len};
        if (t == GV_FLOAT32 || t == GV_FLOAT64) {
          char buf[64], *endp;
          if (m->len == 0 || m->len >= sizeof buf) return enc_fail(e, "not a number");
          memcpy(buf, m->bytes, m->len);
          buf[m->len] = 0;
          double d = hurray__parse_double(buf, &endp);
          if (endp != buf + m->len || isspace((unsigned char)buf[0])) { /* "1.5\0x", " 1" */
            return enc_fail(e, "not a number");
          }
          return enc_float(e, o, t, d);
        }
        return enc_json(e, o, type, &j);
      }
    case HURRAY_METADATA_INT:
      if (t == GV_STRING) return enc_fail(e, "a STRING with an int value");
      if (t == GV_FLOAT32 || t == GV_FLOAT64) return enc_float(e, o, t, (double)m->i);
      return enc_int(e, o, t, m->i < 0, m->i < 0 ? (uint64_t)(-(m->i + 1)) + 1 : (uint64_t)m->i);
    case HURRAY_METADATA_FLOAT:
      if (t != GV_FLOAT32 && t != GV_FLOAT64) {
        if (m->f != floor(m->f) || fabs(m->f) > 9e18) return enc_fail(e, "not an integer");
        int64_t i = (int64_t)m->f;
        return enc_int(e, o, t, i < 0, i < 0 ? (uint64_t)(-(i + 1)) + 1 : (uint64_t)i);
      }
      return enc_float(e, o, t, m->f);
    case HURRAY_METADATA_BOOL:
      if (t == GV_STRING || t == GV_FLOAT32 || t == GV_FLOAT64) {
        return enc_fail(e, "a bool for a non-integer type");
      }
      put(o, m->b ? 1 : 0, gv_size[t]);
      return HURRAY_OK;
    default: return enc_fail(e, "unknown hurray metadata type");
  }
}

/* The type Python's converter guesses for a gguf.K key without a recorded type. */
static const char *guess_type(const HurrayMeta *m) {
  switch (m->type) {
    case HURRAY_METADATA_BOOL: return "BOOL";
    case HURRAY_METADATA_INT:
      if (m->i >= 0 && m->i < (1ll << 32)) return "UINT32";
      if (m->i >= INT32_MIN && m->i <= INT32_MAX) return "INT32";
      return "INT64";
    case HURRAY_METADATA_FLOAT: /* FLOAT64 for what FLOAT32 would make infinite or 0 */
      return f32_overflows(m->f) || f32_vanishes(m->f) ? "FLOAT64" : "FLOAT32";
    default: return "STRING";
  }
}

/* long: orders the pairs, then writes them: three scratch arrays, freed in one place. */
HurrayStatus hurray__gguf_encode_kv(const HurrayMetaList *meta, HurrayStr *out,
                                    uint64_t *count_out, uint64_t *alignment_out,
                                    HurrayError *error) {
  *count_out = 0;
  *alignment_out = HURRAY_GGUF_DEFAULT_ALIGNMENT;
  HurrayJ types = {0};
  bool have_types = false;
  const HurrayMeta *tm = hurray__meta_find(meta, HURRAY_META_GGUF_TYPES);
  if (tm != NULL) {
    HurrayStatus parsed = tm->type == HURRAY_METADATA_STRING
                              ? hurray__j_parse(tm->bytes, tm->len, &types, error)
                              : HURRAY_ERR_MALFORMED;
    if (parsed == HURRAY_ERR_NO_MEMORY) return parsed;
    if (parsed != HURRAY_OK || types.kind != HJ_OBJ) {
      hurray__j_free(&types);
      return hurray__fail(error, HURRAY_ERR_MALFORMED,
                          "metadata gguf.__types__ is not a JSON object of type names");
    }
    have_types = true;
  }
  /* The order: general.architecture first when no recorded order has it
   * (GGUF readers expect it), then the recorded order, then the rest. */
  size_t n = meta->count;
  const HurrayMeta **order = calloc(n ? n : 1, sizeof *order);
  const char **kinds = calloc(n ? n : 1, sizeof *kinds);
  bool *used = calloc(n ? n : 1, sizeof *used);
  HurrayStatus s = HURRAY_OK;
  size_t k = 0;
  if (order == NULL || kinds == NULL || used == NULL) {
    s = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
    goto done;
  }
  bool arch_recorded = false;
  for (size_t i = 0; have_types && i < types.len; i++) {
    const HurrayJ *key = &types.keys[i], *v = &types.items[i];
    if (v->kind != HJ_STR || strlen((const char *)v->str) != v->len ||
        strlen((const char *)key->str) != key->len || key->len > HURRAY_MAX_METADATA_KEY_BYTES) {
      s = hurray__fail(error, HURRAY_ERR_MALFORMED,
                       "metadata gguf.__types__: an entry is not a key and a type name");
      goto done;
    }
    char full[HURRAY_MAX_METADATA_KEY_BYTES + 8];
    snprintf(full, sizeof full, "gguf.%s", (const char *)key->str);
    const HurrayMeta *m = hurray__meta_find(meta, full);
    if (m == NULL) continue;
    if (used[m - meta->items]) continue;
    used[m - meta->items] = true;
    if (strcmp(full, "gguf.general.architecture") == 0) arch_recorded = true;
    order[k] = m;
    kinds[k++] = (const char *)v->str;
  }
  for (size_t i = 0; i < n; i++) {
    const HurrayMeta *m = &meta->items[i];
    if (strncmp(m->key, "gguf.", 5) != 0 || strcmp(m->key, HURRAY_META_GGUF_TYPES) == 0 ||
        strcmp(m->key, HURRAY_META_GGUF_TENSORS) == 0) {
      continue;
    }
    if (used[i]) continue;
    order[k] = m;
    kinds[k++] = guess_type(m);
  }
  bool arch_missing = hurray__meta_find(meta, "gguf.general.architecture") == NULL;
  uint64_t pairs = 0;
  if (arch_missing || !arch_recorded) {
    /* general.architecture first, as GGUF writers put it: "hurray" when
     * there is none, else its value as it is (typed as any unrecorded key:
     * one that is no string is kept, not replaced). */
    const HurrayMeta *arch = hurray__meta_find(meta, "gguf.general.architecture");
    put_str(out, "general.architecture", 20);
    if (arch == NULL) {
      put(out, GV_STRING, 4);
      put_str(out, "hurray", 6);
    } else {
      Enc e = {error, "general.architecture"};
      s = enc_value(&e, out, guess_type(arch), arch);
      if (s != HURRAY_OK) goto done;
    }
    pairs++;
  }
  for (size_t i = 0; i < k; i++) {
    const char *name = order[i]->key + 5;
    if (strcmp(name, "general.architecture") == 0 && !arch_recorded) continue;
    if (!hurray__foreign_name_ok(name, HURRAY_MAX_METADATA_KEY_BYTES - 8)) {
      s = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                       "metadata key %.200s names a GGUF key that is empty, not UTF-8 or longer "
                       "than %u bytes, which GGUF readers (this library's too) refuse",
                       order[i]->key, HURRAY_MAX_METADATA_KEY_BYTES - 8);
      goto done;
    }
    Enc e = {error, name};
    put_str(out, name, strlen(name));
    s = enc_value(&e, out, kinds[i], order[i]);
    if (s != HURRAY_OK) goto done;
    pairs++;
    if (strcmp(name, "general.alignment") == 0) {
      if (strcmp(kinds[i], "UINT32") != 0 || order[i]->type != HURRAY_METADATA_INT ||
          order[i]->i <= 0 || order[i]->i > (1 << 30) ||
          !hurray__is_pow2_u64((uint64_t)order[i]->i)) {
        s = hurray__fail(error, HURRAY_ERR_INVALID_ARGUMENT,
                         "metadata gguf.general.alignment must be a UINT32 power of two");
        goto done;
      }
      *alignment_out = (uint64_t)order[i]->i;
    }
  }
  if (out->oom) s = hurray__fail(error, HURRAY_ERR_NO_MEMORY, "out of memory");
  *count_out = pairs;
done:
  free(order);
  free(kinds);
  free(used);
  hurray__j_free(&types);
  return s;
}
