/*
 * Native safetensors and GGUF (include/hurray/convert.h): files written by
 * hand from the formats' specs, converted to hurray and back byte for
 * byte, and every kind of lie a header can tell refused with a one-line
 * error and the target left untouched.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "hurray/hurray.h"
#include "scratch_dir.h"
#include "test_util.h"

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("formats");
}

/* ------------------------------------------------------------ helpers */

typedef struct Bytes {
  uint8_t *p;
  size_t len, cap;
} Bytes;

static void put(Bytes *b, const void *data, size_t n) {
  if (n == 0) return;
  if (b->len + n > b->cap) {
    b->cap = (b->len + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  memcpy(b->p + b->len, data, n);
  b->len += n;
}

static void put_le(Bytes *b, uint64_t v, unsigned n) {
  uint8_t x[8];
  for (unsigned i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
  put(b, x, n);
}

static void put_str(Bytes *b, const char *s) {
  put_le(b, strlen(s), 8);
  put(b, s, strlen(s));
}

static void put_zeros(Bytes *b, size_t n) {
  static const uint8_t z[64];
  while (n > 0) {
    size_t k = n > sizeof z ? sizeof z : n;
    put(b, z, k);
    n -= k;
  }
}

static void write_named(const char *name, const Bytes *b) {
  char path[512];
  in_dir(path, sizeof path, name);
  write_file(path, b->p, b->len);
}

static Bytes read_named(const char *name) {
  char path[512];
  in_dir(path, sizeof path, name);
  Bytes b = {0};
  b.p = read_file(path, &b.len);
  assert_non_null(b.p);
  b.cap = b.len + 1;
  return b;
}

static HurrayStatus convert(const char *src, const char *dst, HurrayError *e) {
  char a[512], b[512];
  in_dir(a, sizeof a, src);
  in_dir(b, sizeof b, dst);
  memset(e, 0, sizeof *e);
  return hurray_convert_file(a, b, NULL, e);
}

static void assert_same_files(const char *x, const char *y) {
  Bytes a = read_named(x), b = read_named(y);
  assert_int_equal(a.len, b.len);
  assert_memory_equal(a.p, b.p, a.len);
  free(a.p);
  free(b.p);
}

/* Converting `bad` must fail with `want`, a one-line message, and leave an
 * existing target exactly as it was. */
static void assert_refused(const char *bad, const char *target, HurrayStatus want) {
  Bytes sentinel = {0};
  put(&sentinel, "untouched", 9);
  write_named(target, &sentinel);
  HurrayError e;
  HurrayStatus s = convert(bad, target, &e);
  if (s != want) fprintf(stderr, "%s: got %s (%s)\n", bad, hurray_status_name(s), e.message);
  assert_int_equal(s, want);
  assert_true(e.message[0] != '\0');
  assert_null(strchr(e.message, '\n'));
  Bytes after = read_named(target);
  assert_int_equal(after.len, 9);
  assert_memory_equal(after.p, "untouched", 9);
  free(after.p);
  free(sentinel.p);
}

/* ----------------------------------------------------------- safetensors */

/* A safetensors file the way its own writer lays it out: tensors sorted by
 * dtype (U64 > ... > F32 > BF16 > F16 > F8_E8M0 > F8_E4M3 > F8_E5M2 > I8 >
 * U8 > BOOL) then name, the header padded with spaces to 8 bytes. */
static Bytes make_safetensors(const char *header_body, const uint8_t *data, size_t data_len) {
  Bytes b = {0};
  size_t n = strlen(header_body);
  size_t padded = (n + 7) / 8 * 8;
  put_le(&b, padded, 8);
  put(&b, header_body, n);
  for (size_t i = n; i < padded; i++) put(&b, " ", 1);
  put(&b, data, data_len);
  return b;
}

static const char st_header[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"h\xc3\xa9llo\"},"
    "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
    "\"w.bf16\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
    "\"w.f16\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[22,26]},"
    "\"w.e4m3\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[26,30]},"
    "\"w.e5m2\":{\"dtype\":\"F8_E5M2\",\"shape\":[2],\"data_offsets\":[30,32]},"
    "\"w.i8\":{\"dtype\":\"I8\",\"shape\":[5],\"data_offsets\":[32,37]},"
    "\"w.bool\":{\"dtype\":\"BOOL\",\"shape\":[],\"data_offsets\":[37,38]}}";

static void test_safetensors_round_trip_is_byte_identical(void **state) {
  (void)state;
  uint8_t data[38];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 37 + 11);
  data[37] = 1;
  Bytes f = make_safetensors(st_header, data, sizeof data);
  write_named("m.safetensors", &f);
  HurrayError e;
  assert_int_equal(convert("m.safetensors", "m.hurray", &e), HURRAY_OK);
  assert_int_equal(convert("m.hurray", "back.safetensors", &e), HURRAY_OK);
  assert_same_files("m.safetensors", "back.safetensors");

  /* The hurray file: the dtypes, the metadata as safetensors.K strings. */
  char path[512];
  in_dir(path, sizeof path, "m.hurray");
  HurrayReader *r = NULL;
  assert_int_equal(hurray_reader_open(path, NULL, &r, &e), HURRAY_OK);
  assert_int_equal(hurray_reader_verify(r, NULL, &e), HURRAY_OK);
  assert_int_equal(hurray_reader_tensor_count(r), 7);
  const char *v = NULL;
  assert_int_equal(hurray_reader_metadata_string(r, "safetensors.note", &v, &e), HURRAY_OK);
  assert_string_equal(v, "h\xc3\xa9llo");
  HurrayDescriptor *d = NULL;
  assert_int_equal(hurray_reader_get_descriptor(r, "w.e4m3", &d, &e), HURRAY_OK);
  assert_int_equal(hurray_descriptor_dtype(d), HURRAY_DTYPE_FLOAT8_E4M3FN);
  hurray_descriptor_destroy(d);
  assert_int_equal(hurray_reader_get_descriptor(r, "w.bf16", &d, &e), HURRAY_OK);
  assert_int_equal(hurray_descriptor_dtype(d), HURRAY_DTYPE_BFLOAT16);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);
  free(f.p);
}

/* convert.h: get_descriptor gives "only the descriptor of what get_tensor
 * returns" (it said alignment 1 where the view's pointer had 8 or more). */
static void assert_descriptors_match(HurraySource *s) {
  HurrayError e = {0};
  for (size_t i = 0; i < hurray_source_tensor_count(s); i++) {
    HurrayDescriptor *alone = NULL, *d = NULL;
    HurrayBufferList *l = NULL;
    assert_int_equal(hurray_source_get_descriptor(s, i, &alone, &e), HURRAY_OK);
    assert_int_equal(hurray_source_get_tensor(s, i, &d, &l, &e), HURRAY_OK);
    assert_true(hurray_descriptor_equal(alone, d));
    hurray_descriptor_destroy(alone);
    hurray_descriptor_destroy(d);
    hurray_buffer_list_destroy(l);
  }
}

static void test_safetensors_every_dtype(void **state) {
  (void)state;
  static const struct {
    const char *name;
    HurrayDType dtype;
    unsigned bytes;
  } all[] = {{"F64", HURRAY_DTYPE_FLOAT64, 8},         {"F32", HURRAY_DTYPE_FLOAT32, 4},
             {"F16", HURRAY_DTYPE_FLOAT16, 2},         {"BF16", HURRAY_DTYPE_BFLOAT16, 2},
             {"I64", HURRAY_DTYPE_INT64, 8},           {"I32", HURRAY_DTYPE_INT32, 4},
             {"I16", HURRAY_DTYPE_INT16, 2},           {"I8", HURRAY_DTYPE_INT8, 1},
             {"U64", HURRAY_DTYPE_UINT64, 8},          {"U32", HURRAY_DTYPE_UINT32, 4},
             {"U16", HURRAY_DTYPE_UINT16, 2},          {"U8", HURRAY_DTYPE_UINT8, 1},
             {"BOOL", HURRAY_DTYPE_BOOL, 1},           {"F8_E4M3", HURRAY_DTYPE_FLOAT8_E4M3FN, 1},
             {"F8_E5M2", HURRAY_DTYPE_FLOAT8_E5M2, 1}, {"F8_E8M0", HURRAY_DTYPE_FLOAT8_E8M0FNU, 1},
             {"C64", HURRAY_DTYPE_COMPLEX64, 8}};
  for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
    char header[256];
    snprintf(header, sizeof header,
             "{\"t\":{\"dtype\":\"%s\",\"shape\":[3],\"data_offsets\":[0,%u]}}", all[k].name,
             3 * all[k].bytes);
    uint8_t data[24];
    for (unsigned i = 0; i < sizeof data; i++) data[i] = (uint8_t)(k * 31 + i);
    if (all[k].dtype == HURRAY_DTYPE_BOOL) memcpy(data, "\1\0\1", 3); /* 0 or 1 only */
    Bytes f = make_safetensors(header, data, 3 * all[k].bytes);
    write_named("one.safetensors", &f);
    HurrayError e;
    assert_int_equal(convert("one.safetensors", "one.hurray", &e), HURRAY_OK);
    assert_int_equal(convert("one.hurray", "one-back.safetensors", &e), HURRAY_OK);
    assert_same_files("one.safetensors", "one-back.safetensors");
    char path[512];
    in_dir(path, sizeof path, "one.safetensors");
    HurraySource *s = NULL;
    assert_int_equal(hurray_source_open(path, HURRAY_FORMAT_UNKNOWN, NULL, &s, &e), HURRAY_OK);
    assert_descriptors_match(s);
    HurrayDescriptor *d = NULL;
    HurrayBufferList *l = NULL;
    assert_int_equal(hurray_source_get_tensor(s, 0, &d, &l, &e), HURRAY_OK);
    assert_int_equal(hurray_descriptor_dtype(d), all[k].dtype);
    assert_memory_equal(hurray_buffer_data(hurray_buffer_list_get(l, 0)), data, 3 * all[k].bytes);
    hurray_source_close(s); /* the buffers outlive the source */
    assert_memory_equal(hurray_buffer_data(hurray_buffer_list_get(l, 0)), data, 3 * all[k].bytes);
    hurray_descriptor_destroy(d);
    hurray_buffer_list_destroy(l);
    free(f.p);
  }
}

static void test_safetensors_lies_are_refused(void **state) {
  (void)state;
  uint8_t data[16] = {0};
  static const struct {
    const char *header;
    size_t data_len;
    HurrayStatus want;
  } cases[] = {
      /* offsets beyond the data */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[32],\"data_offsets\":[0,32]}}", 16,
       HURRAY_ERR_TRUNCATED},
      /* overlap */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}",
       12, HURRAY_ERR_OVERLAP},
      /* a hole */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
       "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
       12, HURRAY_ERR_RANGE},
      /* bytes after the last tensor */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}", 8, HURRAY_ERR_RANGE},
      /* size that disagrees with shape x dtype */
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
       HURRAY_ERR_MALFORMED},
      /* ... and a span longer than shape x dtype needs (12 bytes for 8) */
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,12]}}", 12,
       HURRAY_ERR_MALFORMED},
      /* shape product overflowing 64 bits */
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0,
       HURRAY_ERR_OVERFLOW},
      /* a name twice */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
       2, HURRAY_ERR_DUPLICATE_NAME},
      /* unknown dtype */
      {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       HURRAY_ERR_UNSUPPORTED},
      /* not JSON */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}", 1, HURRAY_ERR_MALFORMED},
      /* end before begin */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, HURRAY_ERR_MALFORMED},
      /* a negative offset */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1,
       HURRAY_ERR_MALFORMED},
      /* unpaired surrogate escapes: yajl decoded them into '?', renaming
       * "a\ud83d" to "a?" (serde refuses the header) */
      {"{\"a\\ud83d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       HURRAY_ERR_MALFORMED},
      {"{\"a\\ud83dx\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       HURRAY_ERR_MALFORMED},
      {"{\"a\\ud83d\\u0041\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
       HURRAY_ERR_MALFORMED},
      {"{\"__metadata__\":{\"k\":\"v\\udc00\"},"
       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
       1, HURRAY_ERR_MALFORMED},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    Bytes f = make_safetensors(cases[k].header, data, cases[k].data_len);
    write_named("bad.safetensors", &f);
    assert_refused("bad.safetensors", "target.hurray", cases[k].want);
    free(f.p);
  }
}

/* A pair, and an escaped backslash followed by "ud83d", are text. */
static void test_safetensors_escapes_that_are_text(void **state) {
  (void)state;
  uint8_t data[2] = {0};
  const char *header =
      "{\"a\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
      "\"b\\\\ud83d\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}";
  Bytes f = make_safetensors(header, data, 2);
  write_named("text.safetensors", &f);
  free(f.p);
  HurrayError e = {0};
  assert_int_equal(convert("text.safetensors", "text.hurray", &e), HURRAY_OK);
  HurrayReader *r = NULL;
  size_t index;
  char path[512];
  in_dir(path, sizeof path, "text.hurray");
  assert_int_equal(hurray_reader_open(path, NULL, &r, &e), HURRAY_OK);
  assert_int_equal(hurray_reader_find(r, "a\xf0\x9f\x98\x80", &index, &e), HURRAY_OK);
  assert_int_equal(hurray_reader_find(r, "b\\ud83d", &index, &e), HURRAY_OK);
  hurray_reader_close(r);
}

static void test_safetensors_header_limits_and_truncation(void **state) {
  (void)state;
  /* A header length of 100 MB + 1: refused before anything is read. */
  Bytes f = {0};
  put_le(&f, 100000001, 8);
  put(&f, "{}", 2);
  write_named("huge.safetensors", &f);
  assert_refused("huge.safetensors", "target.hurray", HURRAY_ERR_LIMIT);
  free(f.p);
  /* A header that claims 100 MB in a small file. */
  f = (Bytes){0};
  put_le(&f, 100000000, 8);
  put(&f, "{}", 2);
  write_named("short.safetensors", &f);
  assert_refused("short.safetensors", "target.hurray", HURRAY_ERR_TRUNCATED);
  free(f.p);
  /* Every truncation of a good file. */
  uint8_t data[38] = {0};
  Bytes good = make_safetensors(st_header, data, sizeof data);
  for (size_t cut = 0; cut < good.len; cut += (cut < 16 ? 1 : 7)) {
    Bytes t = {0};
    put(&t, good.p, cut);
    write_named("cut.safetensors", &t);
    Bytes sentinel = {0};
    put(&sentinel, "untouched", 9);
    write_named("target.hurray", &sentinel);
    HurrayError e;
    assert_int_not_equal(convert("cut.safetensors", "target.hurray", &e), HURRAY_OK);
    assert_null(strchr(e.message, '\n'));
    Bytes after = read_named("target.hurray");
    assert_int_equal(after.len, 9);
    free(after.p);
    free(sentinel.p);
    free(t.p);
  }
  free(good.p);
}

/* ------------------------------------------------------------------- GGUF */

/* A GGUF v3 file as ggml lays it out: KV pairs, tensor infos, the data at
 * the next multiple of the alignment, each tensor padded to it. */
typedef struct GTensor {
  const char *name;
  uint32_t type, n_dims;
  uint64_t dims[4];
  const uint8_t *data;
  uint64_t nbytes;
} GTensor;

static Bytes make_gguf(const Bytes *kv, uint64_t n_kv, const GTensor *t, size_t n,
                       uint64_t align) {
  Bytes b = {0};
  put(&b, "GGUF", 4);
  put_le(&b, 3, 4);
  put_le(&b, n, 8);
  put_le(&b, n_kv, 8);
  put(&b, kv->p, kv->len);
  uint64_t at = 0;
  for (size_t i = 0; i < n; i++) {
    put_str(&b, t[i].name);
    put_le(&b, t[i].n_dims, 4);
    for (uint32_t d = 0; d < t[i].n_dims; d++) put_le(&b, t[i].dims[d], 8);
    put_le(&b, t[i].type, 4);
    put_le(&b, at, 8);
    at += (t[i].nbytes + align - 1) / align * align;
  }
  put_zeros(&b, (align - b.len % align) % align);
  for (size_t i = 0; i < n; i++) {
    put(&b, t[i].data, t[i].nbytes);
    put_zeros(&b, (align - t[i].nbytes % align) % align);
  }
  return b;
}

static void kv_header(Bytes *kv, const char *key, uint32_t type) {
  put_str(kv, key);
  put_le(kv, type, 4);
}

static void test_gguf_round_trip_is_byte_identical(void **state) {
  (void)state;
  Bytes kv = {0};
  kv_header(&kv, "general.architecture", 8);
  put_str(&kv, "llama");
  kv_header(&kv, "general.name", 8);
  put_str(&kv, "tiny");
  kv_header(&kv, "llama.context_length", 4);
  put_le(&kv, 2048, 4);
  kv_header(&kv, "llama.rope.freq_base", 6);
  float fb = 10000.5f;
  uint32_t fbits;
  memcpy(&fbits, &fb, 4);
  put_le(&kv, fbits, 4);
  kv_header(&kv, "flag", 7);
  put_le(&kv, 1, 1);
  kv_header(&kv, "big", 10);
  put_le(&kv, UINT64_MAX - 2, 8);
  kv_header(&kv, "neg", 11);
  put_le(&kv, (uint64_t)-5, 8);
  kv_header(&kv, "raw", 8);
  put_str(&kv,
          "\xff\xfe"
          "ab");                              /* not UTF-8 */
  kv_header(&kv, "tokenizer.ggml.tokens", 9); /* ARRAY of STRING */
  put_le(&kv, 8, 4);
  put_le(&kv, 3, 8);
  put_str(&kv, "<s>");
  put_str(&kv, "h\xc3\xa9llo");
  put_str(&kv, "\xc3");        /* a lone byte */
  kv_header(&kv, "scores", 9); /* ARRAY of FLOAT32 with a NaN (JSON keeps no payload) */
  put_le(&kv, 6, 4);
  put_le(&kv, 2, 8);
  put_le(&kv, 0x7fc00000, 4);
  put_le(&kv, fbits, 4);
  kv_header(&kv, "nested", 9); /* ARRAY of ARRAY of INT16 */
  put_le(&kv, 9, 4);
  put_le(&kv, 2, 8);
  put_le(&kv, 3, 4);
  put_le(&kv, 2, 8);
  put_le(&kv, 1, 2);
  put_le(&kv, (uint16_t)-2, 2);
  put_le(&kv, 3, 4);
  put_le(&kv, 0, 8);
  kv_header(&kv, "empty", 9); /* an empty ARRAY of INT32 */
  put_le(&kv, 5, 4);
  put_le(&kv, 0, 8);

  uint8_t q8[2 * 34], q4[3 * 18], f16[2 * 4 * 2], f32[16];
  for (size_t i = 0; i < sizeof q8; i++) q8[i] = (uint8_t)(i * 7 + 1);
  for (size_t i = 0; i < sizeof q4; i++) q4[i] = (uint8_t)(i * 13 + 5);
  for (size_t i = 0; i < sizeof f16; i++) f16[i] = (uint8_t)i;
  for (size_t i = 0; i < sizeof f32; i++) f32[i] = (uint8_t)(200 - i);
  const GTensor t[] = {
      {"blk.0.q8", 8, 2, {32, 2}, q8, sizeof q8},
      {"blk.0.q4", 2, 2, {96, 1}, q4, sizeof q4},
      {"tok.f16", 1, 2, {4, 2}, f16, sizeof f16},
      {"norm", 0, 1, {4}, f32, sizeof f32},
  };
  Bytes f = make_gguf(&kv, 12, t, 4, 32);
  write_named("m.gguf", &f);
  HurrayError e;
  assert_int_equal(convert("m.gguf", "g.hurray", &e), HURRAY_OK);
  assert_int_equal(convert("g.hurray", "back.gguf", &e), HURRAY_OK);
  assert_same_files("m.gguf", "back.gguf");
  /* Version 2 reads the same (and is written back as version 3). */
  f.p[4] = 2;
  write_named("v2.gguf", &f);
  assert_int_equal(convert("v2.gguf", "v2.hurray", &e), HURRAY_OK);
  assert_int_equal(convert("v2.hurray", "v2-back.gguf", &e), HURRAY_OK);
  assert_same_files("m.gguf", "v2-back.gguf");
  f.p[4] = 3;

  /* Q4_0: GGUF byte j holds elements j and j+16 of a block; hurray byte
   * k elements 2k and 2k+1; the float16 d copied bit for bit. */
  char path[512];
  in_dir(path, sizeof path, "m.gguf");
  HurraySource *s = NULL;
  assert_int_equal(hurray_source_open(path, HURRAY_FORMAT_UNKNOWN, NULL, &s, &e), HURRAY_OK);
  assert_int_equal(hurray_source_tensor_count(s), 4);
  assert_string_equal(hurray_source_tensor_type(s, 1), "Q4_0");
  assert_descriptors_match(s);
  HurrayDescriptor *d = NULL;
  HurrayBufferList *l = NULL;
  assert_int_equal(hurray_source_get_tensor(s, 1, &d, &l, &e), HURRAY_OK);
  assert_int_equal(hurray_descriptor_dtype(d), HURRAY_DTYPE_UINT4);
  assert_int_equal(hurray_descriptor_quant_kind(d), HURRAY_QUANT_BLOCK_AFFINE);
  assert_int_equal(hurray_descriptor_quant_zero_point(d), 8);
  assert_int_equal(hurray_descriptor_rank(d), 2);
  assert_int_equal(hurray_descriptor_shape(d)[1], 96);
  const uint8_t *codes = hurray_buffer_data(hurray_buffer_list_get(l, 0));
  const uint8_t *scales = hurray_buffer_data(hurray_buffer_list_get(l, 1));
  for (int b = 0; b < 3; b++) {
    assert_memory_equal(scales + 2 * b, q4 + 18 * b, 2);
    for (int el = 0; el < 32; el++) {
      uint8_t g = q4[18 * b + 2 + el % 16];
      uint8_t want = el < 16 ? (g & 0x0F) : (g >> 4);
      uint8_t h = codes[16 * b + el / 2];
      uint8_t got = el % 2 == 0 ? (h & 0x0F) : (h >> 4);
      assert_int_equal(got, want);
    }
  }
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(l);
  /* Metadata in hurray form. */
  bool saw_big = false, saw_raw = false;
  for (size_t i = 0; i < hurray_source_metadata_count(s); i++) {
    const char *key;
    HurrayMetadataType type;
    const void *value;
    size_t len;
    assert_int_equal(hurray_source_metadata(s, i, &key, &type, &value, &len, &e), HURRAY_OK);
    if (strcmp(key, "gguf.big") == 0) {
      saw_big = true;
      assert_int_equal(type, HURRAY_METADATA_STRING);
      assert_string_equal(value, "18446744073709551613");
    }
    if (strcmp(key, "gguf.raw") == 0) {
      saw_raw = true;
      assert_int_equal(type, HURRAY_METADATA_BYTES);
    }
    if (strcmp(key, "gguf.nested") == 0) assert_string_equal(value, "[[1, -2], []]");
    if (strcmp(key, "gguf.tokenizer.ggml.tokens") == 0) {
      assert_string_equal(value, "[\"<s>\", \"h\\u00e9llo\", \"\\udcc3\"]");
    }
  }
  assert_true(saw_big && saw_raw);
  hurray_source_close(s);
  free(f.p);
  free(kv.p);
}

static void test_gguf_lies_are_refused(void **state) {
  (void)state;
  /* Absurd counts: 2^40 tensors, 2^40 pairs. Refused at once. */
  for (int which = 0; which < 2; which++) {
    Bytes f = {0};
    put(&f, "GGUF", 4);
    put_le(&f, 3, 4);
    put_le(&f, which == 0 ? 1ull << 40 : 0, 8);
    put_le(&f, which == 1 ? 1ull << 40 : 0, 8);
    put_zeros(&f, 64);
    write_named("absurd.gguf", &f);
    assert_refused("absurd.gguf", "target.hurray", HURRAY_ERR_LIMIT);
    free(f.p);
  }
  /* Counts a small file cannot hold. */
  Bytes f = {0};
  put(&f, "GGUF", 4);
  put_le(&f, 3, 4);
  put_le(&f, 1000, 8);
  put_le(&f, 0, 8);
  put_zeros(&f, 64);
  write_named("many.gguf", &f);
  assert_refused("many.gguf", "target.hurray", HURRAY_ERR_TRUNCATED);
  free(f.p);
  /* A string length of 2^60. */
  f = (Bytes){0};
  put(&f, "GGUF", 4);
  put_le(&f, 3, 4);
  put_le(&f, 0, 8);
  put_le(&f, 1, 8);
  put_le(&f, 1ull << 60, 8);
  put_zeros(&f, 32);
  write_named("longkey.gguf", &f);
  assert_refused("longkey.gguf", "target.hurray", HURRAY_ERR_TRUNCATED);
  free(f.p);
  /* An array of 2^62 items. */
  Bytes kv = {0};
  kv_header(&kv, "arr", 9);
  put_le(&kv, 4, 4);
  put_le(&kv, 1ull << 62, 8);
  f = make_gguf(&kv, 1, NULL, 0, 32);
  write_named("arr.gguf", &f);
  assert_refused("arr.gguf", "target.hurray", HURRAY_ERR_TRUNCATED);
  free(f.p);
  free(kv.p);
  /* A key named like the converter's own gguf.__types__ would be lost. */
  kv = (Bytes){0};
  kv_header(&kv, "__types__", 8);
  put_str(&kv, "{}");
  f = make_gguf(&kv, 1, NULL, 0, 32);
  write_named("reserved.gguf", &f);
  assert_refused("reserved.gguf", "target.hurray", HURRAY_ERR_UNSUPPORTED);
  free(f.p);
  free(kv.p);
  /* A tensor past the end, a tensor at the wrong offset, dims overflowing,
   * a big-endian file, an unsupported type (named). */
  uint8_t data[64] = {0};
  Bytes none = {0};
  GTensor past = {"t", 0, 1, {64}, data, 64};
  f = make_gguf(&none, 0, &past, 1, 32);
  f.len -= 32;
  write_named("past.gguf", &f);
  assert_refused("past.gguf", "target.hurray", HURRAY_ERR_TRUNCATED);
  free(f.p);
  GTensor two[2] = {{"a", 0, 1, {4}, data, 16}, {"b", 0, 1, {4}, data, 16}};
  f = make_gguf(&none, 0, two, 2, 32);
  /* b's offset is the last 8 bytes of its info: make it 16, not 32. */
  size_t info_end = 24 + (8 + 1 + 4 + 8 + 4 + 8) * 2;
  f.p[info_end - 8] = 16;
  write_named("offset.gguf", &f);
  assert_refused("offset.gguf", "target.hurray", HURRAY_ERR_RANGE);
  free(f.p);
  GTensor wide = {"w", 0, 2, {1ull << 62, 1ull << 62}, data, 0};
  f = make_gguf(&none, 0, &wide, 1, 32);
  write_named("wide.gguf", &f);
  assert_refused("wide.gguf", "target.hurray", HURRAY_ERR_OVERFLOW);
  free(f.p);
  /* Q8_1: not importable. Eight blocks of ggml's 36 bytes end the file (288
   * bytes, a multiple of the alignment): with gguf-py's 40 bytes a block,
   * the refusal blamed the layout ("reaches past the end") instead. */
  static const uint8_t q8_1[288] = {0};
  GTensor q5 = {"blk.0.ffn_up.weight", 9, 1, {256}, q8_1, 288};
  f = make_gguf(&none, 0, &q5, 1, 32);
  write_named("q5.gguf", &f);
  assert_refused("q5.gguf", "target.hurray", HURRAY_ERR_UNSUPPORTED);
  HurrayError e;
  convert("q5.gguf", "target.hurray", &e);
  assert_non_null(strstr(e.message, "Q8_1"));
  assert_non_null(strstr(e.message, "blk.0.ffn_up.weight"));
  free(f.p);
  f = (Bytes){0};
  put(&f, "GGUF", 4);
  put_le(&f, 3u << 24, 4);
  put_zeros(&f, 16);
  write_named("be.gguf", &f);
  assert_refused("be.gguf", "target.hurray", HURRAY_ERR_UNSUPPORTED);
  free(f.p);
  /* Every truncation of a good file. */
  GTensor one = {"t", 8, 1, {32}, data, 34};
  kv = (Bytes){0};
  kv_header(&kv, "general.architecture", 8);
  put_str(&kv, "x");
  Bytes good = make_gguf(&kv, 1, &one, 1, 32);
  /* (The padding after the last tensor is optional, as in ggml.) */
  for (size_t cut = 0; cut < good.len - (64 - 34); cut++) {
    Bytes t = {0};
    put(&t, good.p, cut);
    write_named("cut.gguf", &t);
    HurrayStatus s = convert("cut.gguf", "target.hurray", &e);
    assert_int_not_equal(s, HURRAY_OK);
    assert_null(strchr(e.message, '\n'));
    free(t.p);
  }
  free(good.p);
  free(kv.p);
}

/* A hurray file `file` in the test folder holding one tensor; takes d and l. */
static void write_one_tensor(const char *file, const char *name, HurrayDescriptor *d,
                             HurrayBufferList *l) {
  char path[512];
  HurrayError e = {0};
  in_dir(path, sizeof path, file);
  HurrayWriter *w = NULL;
  assert_int_equal(hurray_writer_open(path, &w, &e), HURRAY_OK);
  assert_int_equal(hurray_writer_write_tensor(w, name, d, l, &e), HURRAY_OK);
  assert_int_equal(hurray_writer_finish(w, &e), HURRAY_OK);
  hurray_descriptor_destroy(d);
  hurray_buffer_list_destroy(l);
}

static void test_targets_refuse_what_they_cannot_hold(void **state) {
  (void)state;
  /* A quantized hurray tensor into safetensors: UNSUPPORTED (the CLI and
   * Python dequantize instead), nothing written. */
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)i - 30.0f;
  uint64_t shape[2] = {2, 32};
  HurrayQuantizeOptions o;
  HurrayError e = {0};
  assert_int_equal(hurray_quantize_options_init(&o, HURRAY_SCHEME_Q4_0, &e), HURRAY_OK);
  HurrayDescriptor *d = NULL;
  HurrayBufferList *l = NULL;
  assert_int_equal(hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &o, &d, &l, &e),
                   HURRAY_OK);
  write_one_tensor("q.hurray", "w", d, l);
  assert_refused("q.hurray", "q.safetensors", HURRAY_ERR_UNSUPPORTED);
  /* ... and into GGUF it is Q4_0, exactly. */
  assert_int_equal(convert("q.hurray", "q.gguf", &e), HURRAY_OK);
  assert_int_equal(convert("q.gguf", "q2.hurray", &e), HURRAY_OK);
  assert_int_equal(convert("q2.hurray", "q2.gguf", &e), HURRAY_OK);
  assert_same_files("q.gguf", "q2.gguf");
  /* A file converted onto itself. */
  char path[512];
  in_dir(path, sizeof path, "q.hurray");
  assert_int_equal(hurray_convert_file(path, path, NULL, &e), HURRAY_ERR_INVALID_ARGUMENT);
}

/* (0, 2^62, 3) with strides (1, 3, 1) is valid and holds no element. The
 * converter's row-major check multiplied the shape in int64 (3 x 2^62, a
 * signed overflow that test-asan's UBSan stops at); a tensor without
 * elements is row-major whatever its strides, so it converts as one. */
static void test_an_empty_strided_tensor_with_a_huge_shape_converts(void **state) {
  (void)state;
  uint64_t shape[3] = {0, (uint64_t)1 << 62, 3};
  int64_t strides[3] = {1, 3, 1};
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  assert_int_equal(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 3, shape, &d, &e), HURRAY_OK);
  assert_int_equal(hurray_descriptor_set_strides(d, strides, &e), HURRAY_OK);
  assert_int_equal(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 0, 4, HURRAY_SYNC_READY, NULL, &e),
      HURRAY_OK);
  HurrayBufferList *l = NULL;
  assert_int_equal(hurray_buffer_list_create(&l, &e), HURRAY_OK);
  HurrayBuffer *b = NULL;
  assert_int_equal(hurray_buffer_create(NULL, 0, NULL, NULL, &b, &e), HURRAY_OK);
  assert_int_equal(hurray_buffer_list_push(l, b, &e), HURRAY_OK);
  write_one_tensor("empty_strided.hurray", "x", d, l);
  assert_int_equal(convert("empty_strided.hurray", "empty_strided.safetensors", &e), HURRAY_OK);
  Bytes out = read_named("empty_strided.safetensors");
  assert_non_null(strstr((const char *)out.p + 8, "\"shape\":[0,4611686018427387904,3]"));
  free(out.p);
}

/* One float32 [2] tensor named `name` into a new target of `format`. */
static HurrayStatus add_named(HurrayTarget *t, const char *name, HurrayError *e) {
  static const float v[2] = {1, 2};
  uint64_t shape[1] = {2};
  HurrayDescriptor *d = NULL;
  HurrayBufferList *l = NULL;
  HurrayBuffer *b = NULL;
  assert_int_equal(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, shape, &d, e), HURRAY_OK);
  assert_int_equal(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 8, 4, HURRAY_SYNC_READY, NULL, e),
      HURRAY_OK);
  assert_int_equal(hurray_buffer_list_create(&l, e), HURRAY_OK);
  assert_int_equal(hurray_buffer_create((void *)v, 8, NULL, NULL, &b, e), HURRAY_OK);
  assert_int_equal(hurray_buffer_list_push(l, b, e), HURRAY_OK);
  return hurray_target_add_tensor(t, name, d, l, e); /* takes d and l */
}

/* The safetensors and GGUF targets published files their own readers then
 * refused: names that are empty, not UTF-8 or too long, a safetensors
 * tensor named __metadata__, a metadata key that names an empty key. A
 * hurray target stored an unknown metadata type as bytes, and passed a
 * NULL value of length 0 to memchr. */
static void test_targets_publish_only_what_their_readers_take(void **state) {
  (void)state;
  char path[512], *long_name = malloc(HURRAY_MAX_TENSOR_NAME_BYTES + 2);
  assert_non_null(long_name);
  memset(long_name, 'n', HURRAY_MAX_TENSOR_NAME_BYTES + 1);
  long_name[HURRAY_MAX_TENSOR_NAME_BYTES + 1] = '\0';
  const HurrayFormat formats[] = {HURRAY_FORMAT_SAFETENSORS, HURRAY_FORMAT_GGUF};
  const char *files[] = {"names.safetensors", "names.gguf"};
  for (int f = 0; f < 2; f++) {
    in_dir(path, sizeof path, files[f]);
    HurrayTarget *t = NULL;
    HurrayError e = {0};
    assert_int_equal(hurray_target_open(path, formats[f], &t, &e), HURRAY_OK);
    const char *bad[] = {"", "\xff\xfe", "\xed\xa0\x80", long_name};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      assert_int_equal(add_named(t, bad[i], &e), HURRAY_ERR_INVALID_ARGUMENT);
    }
    assert_int_equal(add_named(t, "__metadata__", &e),
                     f == 0 ? HURRAY_ERR_INVALID_ARGUMENT : HURRAY_OK);
    assert_int_equal(add_named(t, "ok", &e), HURRAY_OK);
    const char *key = f == 0 ? "safetensors." : "gguf.";
    assert_int_equal(hurray_target_set_metadata(t, key, HURRAY_METADATA_STRING, "v", 1, &e),
                     HURRAY_OK);
    assert_int_equal(hurray_target_finish(t, &e), HURRAY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, "empty"));
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0); /* nothing published */
  }
  free(long_name);
  in_dir(path, sizeof path, "meta.hurray");
  HurrayTarget *t = NULL;
  HurrayError e = {0};
  assert_int_equal(hurray_target_open(path, HURRAY_FORMAT_HURRAY, &t, &e), HURRAY_OK);
  const char nine = 9;
  assert_int_equal(hurray_target_set_metadata(t, "k", (HurrayMetadataType)9, &nine, 1, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_int_equal(hurray_target_set_metadata(t, "k", (HurrayMetadataType)0, &nine, 1, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_int_equal(hurray_target_set_metadata(t, "empty", HURRAY_METADATA_STRING, NULL, 0, &e),
                   HURRAY_OK);
  assert_int_equal(hurray_target_finish(t, &e), HURRAY_OK);
  /* A string safetensors cannot hold says why: a NUL is valid UTF-8. */
  const char *values[] = {"a\0b",
                          "a\xff"
                          "b"},
             *why[] = {"NUL byte", "not UTF-8"};
  for (int i = 0; i < 2; i++) {
    in_dir(path, sizeof path, "meta.safetensors");
    assert_int_equal(hurray_target_open(path, HURRAY_FORMAT_SAFETENSORS, &t, &e), HURRAY_OK);
    assert_int_equal(
        hurray_target_set_metadata(t, "safetensors.x", HURRAY_METADATA_STRING, values[i], 3, &e),
        HURRAY_OK);
    assert_int_equal(hurray_target_finish(t, &e), HURRAY_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(e.message, why[i]));
  }
}

/* hurray_source_open's options follow the options-struct convention: NULL
 * is the defaults, a zeroed struct (version 0) and an unknown version are
 * refused before the file is touched, and out is NULL after a failure. */
static void test_source_options_are_versioned(void **state) {
  (void)state;
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = (float)i - 30.0f;
  uint64_t shape[2] = {2, 32};
  HurrayQuantizeOptions q = HURRAY_QUANTIZE_OPTIONS_INIT;
  HurrayError e = {0};
  HurrayDescriptor *d = NULL;
  HurrayBufferList *written = NULL;
  assert_int_equal(
      hurray_quantize(x, sizeof x, HURRAY_DTYPE_FLOAT32, 2, shape, &q, &d, &written, &e),
      HURRAY_OK);
  char path[512];
  in_dir(path, sizeof path, "opts.hurray");
  HurrayWriter *w = NULL;
  assert_int_equal(hurray_writer_open(path, &w, &e), HURRAY_OK);
  assert_int_equal(hurray_writer_write_tensor(w, "x", d, written, &e), HURRAY_OK);
  assert_int_equal(hurray_writer_finish(w, &e), HURRAY_OK);
  hurray_descriptor_destroy(d);
  const HurrayBuffer *codes = hurray_buffer_list_get(written, 0);

  HurraySource *s = (HurraySource *)&e; /* not NULL: failure must clear it */
  HurraySourceOptions zeroed;
  memset(&zeroed, 0, sizeof zeroed);
  assert_int_equal(hurray_source_open(path, HURRAY_FORMAT_UNKNOWN, &zeroed, &s, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(s);
  HurraySourceOptions future = HURRAY_SOURCE_OPTIONS_INIT;
  future.version = HURRAY_SOURCE_OPTIONS_VERSION + 1;
  assert_int_equal(hurray_source_open(path, HURRAY_FORMAT_UNKNOWN, &future, &s, &e),
                   HURRAY_ERR_INVALID_ARGUMENT);
  assert_null(s);

  HurraySourceOptions o = HURRAY_SOURCE_OPTIONS_INIT;
  assert_true(o.verify_checksums);
  o.verify_checksums = false;
  const HurraySourceOptions *choices[2] = {NULL, &o};
  for (int k = 0; k < 2; k++) {
    assert_int_equal(hurray_source_open(path, HURRAY_FORMAT_UNKNOWN, choices[k], &s, &e),
                     HURRAY_OK);
    assert_int_equal(hurray_source_format(s), HURRAY_FORMAT_HURRAY);
    HurrayBufferList *l = NULL;
    assert_int_equal(hurray_source_get_tensor(s, 0, &d, &l, &e), HURRAY_OK);
    assert_int_equal(hurray_buffer_size(hurray_buffer_list_get(l, 0)), hurray_buffer_size(codes));
    assert_memory_equal(hurray_buffer_data(hurray_buffer_list_get(l, 0)),
                        hurray_buffer_data(codes), hurray_buffer_size(codes));
    hurray_descriptor_destroy(d);
    hurray_buffer_list_destroy(l);
    hurray_source_close(s);
    s = NULL;
  }
  hurray_buffer_list_destroy(written);
}

/* The rule the CLI names dropped keys by is the one targets count them by. */
static void test_kept_metadata_matches_the_dropped_count(void **state) {
  (void)state;
  static const char *keys[] = {"author", "safetensors.format", "gguf.general.name",
                               "gguf.__types__", "convert.source_dtypes"};
  static const HurrayFormat formats[] = {HURRAY_FORMAT_HURRAY, HURRAY_FORMAT_SAFETENSORS,
                                         HURRAY_FORMAT_GGUF};
  static const bool kept[3][5] = {{true, true, true, true, true},
                                  {false, true, false, true, true},
                                  {false, false, true, true, true}};
  HurrayError e = {0};
  for (int f = 0; f < 3; f++) {
    char path[512];
    in_dir(path, sizeof path, formats[f] == HURRAY_FORMAT_HURRAY ? "kept.hurray" : "kept.gguf");
    HurrayTarget *t = NULL;
    assert_int_equal(hurray_target_open(path, formats[f], &t, &e), HURRAY_OK);
    size_t dropped = 0;
    for (int k = 0; k < 5; k++) {
      assert_int_equal(hurray_format_keeps_metadata(formats[f], keys[k]), kept[f][k]);
      if (formats[f] != HURRAY_FORMAT_HURRAY) {
        assert_int_equal(
            hurray_target_set_metadata(t, keys[k], HURRAY_METADATA_STRING, "v", 1, &e), HURRAY_OK);
        dropped += !kept[f][k];
      }
    }
    assert_int_equal(hurray_target_dropped_metadata(t), dropped);
    hurray_target_abort(t);
  }
  assert_false(hurray_format_keeps_metadata(HURRAY_FORMAT_UNKNOWN, "author"));
  assert_false(hurray_format_keeps_metadata((HurrayFormat)99, "author"));
  assert_false(hurray_format_keeps_metadata(HURRAY_FORMAT_HURRAY, NULL));
  static const char *const own[] = {HURRAY_META_GGUF_TYPES, HURRAY_META_GGUF_TENSORS,
                                    HURRAY_META_SOURCE_DTYPES, HURRAY_META_SAFETENSORS_INDEX};
  for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) {
    assert_true(hurray_metadata_is_bookkeeping(own[k]));
    assert_true(hurray_format_keeps_metadata(HURRAY_FORMAT_SAFETENSORS, own[k]));
  }
  assert_false(hurray_metadata_is_bookkeeping("gguf.general.name"));
  assert_false(hurray_metadata_is_bookkeeping("convert.source_dtypes "));
  assert_false(hurray_metadata_is_bookkeeping(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_safetensors_round_trip_is_byte_identical),
      cmocka_unit_test(test_safetensors_every_dtype),
      cmocka_unit_test(test_safetensors_lies_are_refused),
      cmocka_unit_test(test_safetensors_escapes_that_are_text),
      cmocka_unit_test(test_safetensors_header_limits_and_truncation),
      cmocka_unit_test(test_gguf_round_trip_is_byte_identical),
      cmocka_unit_test(test_gguf_lies_are_refused),
      cmocka_unit_test(test_targets_refuse_what_they_cannot_hold),
      cmocka_unit_test(test_an_empty_strided_tensor_with_a_huge_shape_converts),
      cmocka_unit_test(test_targets_publish_only_what_their_readers_take),
      cmocka_unit_test(test_source_options_are_versioned),
      cmocka_unit_test(test_kept_metadata_matches_the_dropped_count),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
