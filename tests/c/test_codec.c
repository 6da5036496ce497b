/*
 * The descriptor codec: golden vectors in both directions, round trips,
 * forward-compatibility rules, and hostile input (every truncation and every
 * single-byte corruption of every vector).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "vectors.h"

static const char *vectors_dir;

/* tests/vectors/NAME.EXT, NUL-terminated. */
static uint8_t *read_vector(const char *name, const char *ext, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.%s", vectors_dir, name, ext);
  uint8_t *data = read_file(path, len);
  if (data == NULL) fail_msg("cannot open %s", path);
  return data;
}

static void encode(const HurrayDescriptor *d, uint8_t **bytes, size_t *len) {
  assert_ok(hurray_descriptor_encode(d, bytes, len, error));
}

/* Builder -> bytes equals the committed .bin. */
static void test_golden_encode(void **state) {
  (void)state;
  for (size_t i = 0; i < golden_vector_count; i++) {
    HurrayDescriptor *d = golden_vectors[i].build();
    assert_ok(hurray_descriptor_validate(d, error));
    uint8_t *bytes;
    size_t len, want_len;
    encode(d, &bytes, &len);
    uint8_t *want = read_vector(golden_vectors[i].name, "bin", &want_len);
    if (len != want_len || memcmp(bytes, want, len) != 0) {
      print_error("%s: encoding differs from the golden vector\n", golden_vectors[i].name);
      fail();
    }
    free(want);
    hurray_free(bytes);
    hurray_descriptor_destroy(d);
  }
}

/* .bin -> decoded descriptor renders to the committed .json and equals the
 * builder's descriptor. */
static void test_golden_decode(void **state) {
  (void)state;
  for (size_t i = 0; i < golden_vector_count; i++) {
    size_t len, json_len;
    uint8_t *bin = read_vector(golden_vectors[i].name, "bin", &len);
    char *want_json = (char *)read_vector(golden_vectors[i].name, "json", &json_len);
    HurrayDescriptor *decoded = NULL;
    assert_ok(hurray_descriptor_decode(bin, len, &decoded, error));
    assert_ok(hurray_descriptor_validate(decoded, error));
    char *json = NULL;
    assert_ok(hurray_descriptor_to_json(decoded, &json, error));
    if (strcmp(json, want_json) != 0) {
      print_error("%s: decoded JSON differs:\n%s\nexpected:\n%s\n", golden_vectors[i].name, json,
                  want_json);
      fail();
    }
    HurrayDescriptor *built = golden_vectors[i].build();
    assert_true(hurray_descriptor_equal(built, decoded));
    hurray_descriptor_destroy(built);
    hurray_free(json);
    hurray_descriptor_destroy(decoded);
    free(bin);
    free(want_json);
  }
}

static void assert_round_trip(const HurrayDescriptor *d) {
  uint8_t *first, *second;
  size_t first_len, second_len;
  encode(d, &first, &first_len);
  HurrayDescriptor *decoded = NULL;
  assert_ok(hurray_descriptor_decode(first, first_len, &decoded, error));
  encode(decoded, &second, &second_len);
  assert_int_equal(first_len, second_len);
  assert_memory_equal(first, second, first_len);
  /* A clone encodes identically too. */
  HurrayDescriptor *copy = NULL;
  assert_ok(hurray_descriptor_clone(decoded, &copy, error));
  assert_true(hurray_descriptor_equal(copy, d));
  hurray_descriptor_destroy(copy);
  hurray_descriptor_destroy(decoded);
  hurray_free(first);
  hurray_free(second);
}

static void test_round_trip_vectors(void **state) {
  (void)state;
  for (size_t i = 0; i < golden_vector_count; i++) {
    HurrayDescriptor *d = golden_vectors[i].build();
    assert_round_trip(d);
    hurray_descriptor_destroy(d);
  }
}

/* Every dtype, each with every optional part switched on one at a time. */
/* Buffer tables of 0 to 5 entries: the first ones live in the descriptor
 * itself, later ones move it to memory of its own; every size round-trips
 * through encode, decode and clone with its entries intact. */
static void test_buffer_tables_of_every_size(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){8}, &d, error));
  for (uint32_t n = 0; n <= 5; n++) {
    assert_int_equal(hurray_descriptor_buffer_count(d), n);
    assert_round_trip(d);
    uint32_t index = 99;
    assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 8 + n, 64u << (n % 3),
                                           HURRAY_SYNC_READY, &index, error));
    assert_int_equal(index, n);
    for (uint32_t i = 0; i <= n; i++) {
      assert_int_equal(hurray_descriptor_buffer_size(d, i), 8 + i);
      assert_int_equal(hurray_descriptor_buffer_alignment(d, i), 64u << (i % 3));
    }
  }
  hurray_descriptor_destroy(d);
}

static void test_round_trip_every_dtype_and_option(void **state) {
  (void)state;
  for (int t = 1; t < HURRAY_DTYPE_COUNT; t++) {
    for (int option = 0; option < 8; option++) {
      HurrayDescriptor *d = NULL;
      uint64_t shape[3] = {2, 3, 4};
      assert_ok(hurray_descriptor_create((HurrayDType)t, 3, shape, &d, error));
      uint64_t bytes;
      assert_ok(hurray_dtype_storage_bytes((HurrayDType)t, 24, &bytes));
      assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, bytes + 16, 16,
                                             HURRAY_SYNC_READY, NULL, error));
      switch (option) {
        case 1: hurray_descriptor_set_byte_offset(d, 16); break;
        case 2:
          if (hurray_dtype_bits((HurrayDType)t) % 8 == 0) {
            assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){12, 4, 1}, error));
          }
          break;
        case 3:
          hurray_descriptor_set_stat_min(d, -0.0);
          hurray_descriptor_set_stat_nan_count(d, 1);
          break;
        case 4:
          hurray_descriptor_set_stat_max(d, 1e300);
          hurray_descriptor_set_stat_zero_count(d, 24);
          break;
        case 5:
          assert_ok(hurray_descriptor_set_shard(d, 3, (uint64_t[]){4, 3, 4}, (uint64_t[]){2, 0, 0},
                                                error));
          break;
        case 6:
          assert_ok(
              hurray_descriptor_set_extension(d, "x.unit", (const uint8_t *)"\0\1\2", 3, error));
          break;
        case 7:
          assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_ROCM, 3, HURRAY_MEMORY_MANAGED,
                                                 error));
          break;
      }
      assert_ok(hurray_descriptor_validate(d, error));
      assert_round_trip(d);
      hurray_descriptor_destroy(d);
    }
  }
}

static void test_encoding_is_deterministic(void **state) {
  (void)state;
  /* Two descriptors reaching the same state by different setter orders. */
  HurrayDescriptor *a = golden_vectors[12].build();
  HurrayDescriptor *b = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, (uint64_t[]){4, 3}, &b, error));
  assert_ok(hurray_descriptor_set_quant_mx(b, HURRAY_MX_INT8, 0, 0, error));
  assert_ok(
      hurray_descriptor_add_buffer(b, HURRAY_ROLE_DATA, 12, 64, HURRAY_SYNC_READY, NULL, error));
  assert_ok(
      hurray_descriptor_add_buffer(b, HURRAY_ROLE_SCALES, 16, 64, HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_add_buffer(b, HURRAY_ROLE_ZERO_POINTS, 4, 64, HURRAY_SYNC_READY,
                                         NULL, error));
  hurray_descriptor_set_stat_min(b, 1.0);
  hurray_descriptor_clear_statistics(b);
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(b, 0, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_ok(hurray_descriptor_set_quant_zero_point_buffer(b, 2, HURRAY_DTYPE_INT8, error));
  assert_string_equal(golden_vectors[12].name, "quant_per_channel_affine");
  assert_true(hurray_descriptor_equal(a, b));
  hurray_descriptor_destroy(a);
  hurray_descriptor_destroy(b);
}

/* Appends a raw record to an encoding (which must then stay in tag order). */
static uint8_t *with_record(const uint8_t *bytes, size_t len, uint16_t tag, const uint8_t *payload,
                            uint32_t payload_len, size_t *out_len) {
  uint8_t *out = malloc(len + 6 + payload_len);
  assert_non_null(out);
  memcpy(out, bytes, len);
  out[len] = (uint8_t)tag;
  out[len + 1] = (uint8_t)(tag >> 8);
  for (int i = 0; i < 4; i++) out[len + 2 + i] = (uint8_t)(payload_len >> (8 * i));
  if (payload_len) memcpy(out + len + 6, payload, payload_len);
  *out_len = len + 6 + payload_len;
  return out;
}

static void test_unknown_fields(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vectors[0].build();
  uint8_t *bytes;
  size_t len, ext_len;
  encode(d, &bytes, &len);
  const uint8_t junk[3] = {1, 2, 3};

  /* Unknown optional (even) tag: skipped, and the rest decodes as before. */
  uint8_t *ext = with_record(bytes, len, 0x7FF0, junk, 3, &ext_len);
  HurrayDescriptor *decoded = NULL;
  assert_ok(hurray_descriptor_decode(ext, ext_len, &decoded, error));
  assert_true(hurray_descriptor_equal(decoded, d));
  hurray_descriptor_destroy(decoded);
  free(ext);

  /* Unknown required (odd) tag: unsupported, never misread. */
  ext = with_record(bytes, len, 0x7FF1, junk, 3, &ext_len);
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_descriptor_decode(ext, ext_len, &decoded, error));
  assert_null(decoded);
  free(ext);

  /* An odd tag between known ones that this version does not define. */
  ext = with_record(bytes, len, 0x0061, junk, 3, &ext_len);
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_descriptor_decode(ext, ext_len, &decoded, error));
  free(ext);

  /* Out of order: a tag lower than the last one. */
  ext = with_record(bytes, len, 0x0012, junk, 0, &ext_len);
  assert_status(HURRAY_ERR_MALFORMED, hurray_descriptor_decode(ext, ext_len, &decoded, error));
  free(ext);

  /* A newer encoding version. */
  bytes[4] = 2;
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_descriptor_decode(bytes, len, &decoded, error));
  bytes[4] = 1;

  /* Bad magic. */
  bytes[0] = 'X';
  assert_status(HURRAY_ERR_MALFORMED, hurray_descriptor_decode(bytes, len, &decoded, error));
  bytes[0] = 'H';

  /* An unknown dtype code is a newer writer's: unsupported. */
  assert_int_equal(bytes[6], 0x11);
  bytes[12] = 200;
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_descriptor_decode(bytes, len, &decoded, error));

  hurray_free(bytes);
  hurray_descriptor_destroy(d);
}

static void test_decode_limits(void **state) {
  (void)state;
  HurrayDescriptor *decoded = NULL;
  /* A shape record claiming rank 33. */
  uint8_t head[6] = {'H', 'R', 'Y', 'D', 1, 0};
  uint8_t dtype[2] = {HURRAY_DTYPE_FLOAT32, 0};
  uint8_t shape[33 * 8] = {0};
  size_t a_len, b_len;
  uint8_t *a = with_record(head, 6, 0x0011, dtype, 2, &a_len);
  uint8_t *b = with_record(a, a_len, 0x0013, shape, sizeof shape, &b_len);
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_decode(b, b_len, &decoded, error));
  free(a);
  free(b);
  /* Too short for the header. */
  assert_status(HURRAY_ERR_TRUNCATED, hurray_descriptor_decode(head, 5, &decoded, error));
  /* Header only: no dtype. */
  assert_status(HURRAY_ERR_MALFORMED, hurray_descriptor_decode(head, 6, &decoded, error));
  /* *out is NULL on every failure, an argument check's included (it was
   * left as the caller had it). */
  decoded = (HurrayDescriptor *)&decoded;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_descriptor_decode(NULL, 6, &decoded, error));
  assert_null(decoded);
}

/* ------------------------------------------------ hand-built encodings */

/* Encodings the builder cannot produce, made record by record. */
typedef struct Bytes {
  uint8_t data[256];
  size_t len;
} Bytes;

static void add_le(Bytes *b, uint64_t v, int n) {
  assert_true(b->len + (size_t)n <= sizeof b->data);
  for (int i = 0; i < n; i++) b->data[b->len++] = (uint8_t)(v >> (8 * i));
}

static void add_raw(Bytes *b, const void *p, size_t n) {
  assert_true(b->len + n <= sizeof b->data);
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

/* A record: u16 tag, u32 payload length, payload. */
static void add_record(Bytes *b, uint16_t tag, const Bytes *payload) {
  add_le(b, tag, 2);
  add_le(b, payload->len, 4);
  add_raw(b, payload->data, payload->len);
}

static void add_u(Bytes *b, uint16_t tag, uint64_t v, int n) {
  Bytes p = {0};
  add_le(&p, v, n);
  add_record(b, tag, &p);
}

/* The dtype (float32) and shape ([4]) records every node here starts with. */
static void add_float32_vector(Bytes *b) {
  add_u(b, 0x0011, HURRAY_DTYPE_FLOAT32, 2);
  add_u(b, 0x0013, 4, 8);
}

/* A buffer table of one entry: `role`, alignment 4, `size` bytes. */
static void add_table(Bytes *b, HurrayBufferRole role, uint64_t size) {
  Bytes p = {0};
  add_le(&p, 1, 4);
  add_le(&p, role, 1);
  add_le(&p, HURRAY_SYNC_READY, 1);
  add_le(&p, 0, 2);
  add_le(&p, 4, 4);
  add_le(&p, size, 8);
  add_record(b, 0x0041, &p);
}

static Bytes header(void) {
  Bytes b = {0};
  add_raw(&b, "HRYD\1\0", 6);
  return b;
}

static void assert_decodes(HurrayStatus expect, const Bytes *b) {
  HurrayDescriptor *d = NULL;
  assert_status(expect, hurray_descriptor_decode(b->data, b->len, &d, error));
  if (expect == HURRAY_OK) {
    assert_non_null(d);
  } else {
    assert_null(d);
  }
  hurray_descriptor_destroy(d);
}

/* A dense float32 [4] with a statistics record of `flags` and `count` values. */
static Bytes with_statistics(uint8_t flags, int count) {
  Bytes b = header(), p = {0};
  add_float32_vector(&b);
  add_u(&b, 0x0021, 0, 4);
  add_table(&b, HURRAY_ROLE_DATA, 16);
  add_le(&p, flags, 1);
  add_le(&p, 0, 7);
  for (int i = 0; i < count; i++) add_le(&p, 0x3FF0000000000000ull, 8); /* 1.0 */
  add_record(&b, 0x0050, &p);
  return b;
}

/* Statistics flag bits past the four defined ones are a decode error, even
 * with a value present for each set bit. */
static void test_statistics_unknown_flag_refused(void **state) {
  (void)state;
  Bytes ok = with_statistics(0x01, 1), bad = with_statistics(0x11, 2);
  assert_decodes(HURRAY_OK, &ok);
  assert_decodes(HURRAY_ERR_MALFORMED, &bad);
}

/* A dense float32 [4] whose dtype record is followed by a second one (int32)
 * when `repeat`. */
static Bytes with_dtype_records(bool repeat) {
  Bytes b = header();
  add_u(&b, 0x0011, HURRAY_DTYPE_FLOAT32, 2);
  if (repeat) add_u(&b, 0x0011, HURRAY_DTYPE_INT32, 2);
  add_u(&b, 0x0013, 4, 8);
  add_u(&b, 0x0021, 0, 4);
  add_table(&b, HURRAY_ROLE_DATA, 16);
  return b;
}

/* Two records with the same tag: tags must strictly increase, so a
 * repeated record is refused, not read twice (the second overriding). */
static void test_duplicate_record_refused(void **state) {
  (void)state;
  Bytes ok = with_dtype_records(false), bad = with_dtype_records(true);
  assert_decodes(HURRAY_OK, &ok);
  assert_decodes(HURRAY_ERR_MALFORMED, &bad);
}

/* A 1-D COO record of two entries with the flag byte `flags`. */
static Bytes with_coo_flags(uint8_t flags) {
  Bytes b = header(), p = {0};
  add_float32_vector(&b);
  add_le(&p, HURRAY_DTYPE_INT32, 2); /* index dtype */
  add_le(&p, flags, 1);
  add_le(&p, 0, 1);
  add_le(&p, 0, 4); /* values buffer */
  add_le(&p, 2, 8); /* nnz */
  add_le(&p, 1, 4); /* index buffer */
  add_record(&b, 0x0023, &p);
  Bytes t = {0};
  add_le(&t, 2, 4);
  for (int i = 0; i < 2; i++) {
    add_le(&t, i == 0 ? HURRAY_ROLE_VALUES : HURRAY_ROLE_INDICES, 1);
    add_le(&t, 0, 3);
    add_le(&t, 4, 4);
    add_le(&t, 8, 8);
  }
  add_record(&b, 0x0041, &t);
  return b;
}

/* Only bit 0 (canonical) of the COO flags is defined; bit 1 is reserved. */
static void test_coo_reserved_flag_refused(void **state) {
  (void)state;
  Bytes ok = with_coo_flags(1), bad = with_coo_flags(2);
  assert_decodes(HURRAY_OK, &ok);
  assert_decodes(HURRAY_ERR_MALFORMED, &bad);
}

/* A composite float32 [4] of one dense member named `name` (`name_len`
 * bytes), with `trailing` extra bytes after the member. */
static Bytes with_member(const char *name, size_t name_len, size_t trailing) {
  Bytes node = {0}, members = {0}, b = header();
  add_float32_vector(&node);
  add_u(&node, 0x0021, 0, 4);
  add_le(&members, 1, 4);
  add_le(&members, name_len, 2);
  add_raw(&members, name, name_len);
  add_le(&members, node.len, 4);
  add_raw(&members, node.data, node.len);
  for (size_t i = 0; i < trailing; i++) add_le(&members, 0xFF, 1);
  add_float32_vector(&b);
  add_record(&b, 0x002D, &members);
  add_table(&b, HURRAY_ROLE_DATA, 16);
  return b;
}

/* Bytes after the last member of a composite record are refused. */
static void test_composite_trailing_bytes_refused(void **state) {
  (void)state;
  Bytes ok = with_member("a", 1, 0), bad = with_member("a", 1, 1);
  assert_decodes(HURRAY_OK, &ok);
  assert_decodes(HURRAY_ERR_MALFORMED, &bad);
}

/* A member name holding a NUL would read back cut short: refused. */
static void test_member_name_with_nul_refused(void **state) {
  (void)state;
  Bytes ok = with_member("lora", 4, 0), bad = with_member("lo\0ra", 5, 0);
  assert_decodes(HURRAY_OK, &ok);
  assert_decodes(HURRAY_ERR_MALFORMED, &bad);
}

/* Composite nesting deeper than the limit is refused by decode (LIMIT)
 * as well as by validate (COMPOSITE_DEPTH) and encode. */
static void test_composite_depth_limit(void **state) {
  (void)state;
  HurrayDescriptor *leaf = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){1}, &leaf, error));
  HurrayDescriptor *node = leaf;
  for (uint32_t depth = 0; depth < HURRAY_MAX_COMPOSITE_DEPTH + 1; depth++) {
    HurrayDescriptor *parent = NULL;
    assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 1, (uint64_t[]){1}, &parent, error));
    assert_ok(hurray_descriptor_set_layout_composite(parent, error));
    assert_ok(hurray_descriptor_add_member(parent, "m", node, error));
    node = parent;
  }
  assert_ok(
      hurray_descriptor_add_buffer(node, HURRAY_ROLE_DATA, 4, 1, HURRAY_SYNC_READY, NULL, error));
  assert_status(HURRAY_ERR_COMPOSITE_DEPTH, hurray_descriptor_validate(node, error));
  uint8_t *bytes = NULL;
  size_t len;
  assert_status(HURRAY_ERR_COMPOSITE_DEPTH, hurray_descriptor_encode(node, &bytes, &len, error));
  hurray_descriptor_destroy(node);
}

static void decode_must_not_crash(const uint8_t *bytes, size_t len) {
  HurrayDescriptor *d = NULL;
  HurrayError error = {0};
  HurrayStatus status = hurray_descriptor_decode(bytes, len, &d, &error);
  if (status == HURRAY_OK) {
    assert_non_null(d);
    /* Whatever decodes must validate, encode and render without harm. */
    uint64_t *needs = NULL;
    (void)needs;
    (void)hurray_descriptor_validate(d, &error);
    uint8_t *again = NULL;
    size_t again_len;
    char *json = NULL;
    assert_int_equal(hurray_descriptor_encode(d, &again, &again_len, &error), HURRAY_OK);
    assert_int_equal(hurray_descriptor_to_json(d, &json, &error), HURRAY_OK);
    hurray_free(again);
    hurray_free(json);
    hurray_descriptor_destroy(d);
  } else {
    assert_null(d);
    assert_int_equal(error.code, status);
  }
}

static void test_truncations(void **state) {
  (void)state;
  for (size_t i = 0; i < golden_vector_count; i++) {
    size_t len;
    uint8_t *bin = read_vector(golden_vectors[i].name, "bin", &len);
    for (size_t cut = 0; cut < len; cut++) {
      /* A fresh allocation of exactly `cut` bytes lets ASan see overreads. */
      uint8_t *prefix = malloc(cut ? cut : 1);
      memcpy(prefix, bin, cut);
      HurrayDescriptor *d = NULL;
      HurrayStatus status = hurray_descriptor_decode(prefix, cut, &d, NULL);
      /* Cutting at a record boundary past the required records may still
       * decode; anything else must fail. */
      if (status == HURRAY_OK) {
        hurray_descriptor_destroy(d);
      } else {
        assert_null(d);
      }
      decode_must_not_crash(prefix, cut);
      free(prefix);
    }
    free(bin);
  }
}

static void test_single_byte_corruptions(void **state) {
  (void)state;
  for (size_t i = 0; i < golden_vector_count; i++) {
    size_t len;
    uint8_t *bin = read_vector(golden_vectors[i].name, "bin", &len);
    uint8_t *copy = malloc(len);
    for (size_t pos = 0; pos < len; pos++) {
      for (int value = 0; value < 256; value++) {
        if (value == bin[pos]) {
          continue;
        }
        memcpy(copy, bin, len);
        copy[pos] = (uint8_t)value;
        decode_must_not_crash(copy, len);
      }
    }
    free(copy);
    free(bin);
  }
}

/* Strides, a shard and a COO layout's index buffers live outside the
 * descriptor's own block (allocated only when set): a clone must own copies
 * of them, and clearing or replacing them must leave no stale values. */
static void test_optional_parts_are_owned(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL, *copy = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){4, 3}, &d, error));
  assert_null(hurray_descriptor_strides(d));
  assert_null(hurray_descriptor_shard_offsets(d));
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){1, 4}, error));
  assert_ok(hurray_descriptor_set_shard(d, 2, (uint64_t[]){8, 3}, (uint64_t[]){4, 0}, error));
  assert_ok(hurray_descriptor_set_shard(d, 1, (uint64_t[]){9}, (uint64_t[]){5}, error));
  assert_ok(hurray_descriptor_clone(d, &copy, error));
  assert_ok(hurray_descriptor_set_strides(d, NULL, error));
  hurray_descriptor_clear_shard(d);
  assert_null(hurray_descriptor_strides(d));
  assert_false(hurray_descriptor_has_shard(d));
  assert_null(hurray_descriptor_shard_global_shape(d));
  const int64_t *strides = hurray_descriptor_strides(copy);
  assert_non_null(strides);
  assert_int_equal(strides[0], 1);
  assert_int_equal(strides[1], 4);
  assert_int_equal(hurray_descriptor_shard_rank(copy), 1);
  assert_int_equal(hurray_descriptor_shard_global_shape(copy)[0], 9);
  assert_int_equal(hurray_descriptor_shard_offsets(copy)[0], 5);
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){3, 1}, error));
  assert_int_equal(hurray_descriptor_strides(d)[0], 3);
  assert_false(hurray_descriptor_equal(d, copy));
  hurray_descriptor_destroy(copy);

  assert_ok(hurray_descriptor_set_layout_coo(d, HURRAY_DTYPE_INT64, 5, 0, (uint32_t[]){1, 2}, true,
                                             error));
  assert_ok(hurray_descriptor_clone(d, &copy, error));
  assert_ok(hurray_descriptor_set_layout_dense(d, 0, error));
  assert_int_equal(hurray_descriptor_sparse_coo_index_buffer(d, 1), HURRAY_NO_BUFFER);
  assert_int_equal(hurray_descriptor_sparse_coo_index_buffer(copy, 0), 1);
  assert_int_equal(hurray_descriptor_sparse_coo_index_buffer(copy, 1), 2);
  assert_ok(hurray_descriptor_set_layout_coo(copy, HURRAY_DTYPE_INT64, 5, 0, (uint32_t[]){3, 4},
                                             false, error));
  assert_int_equal(hurray_descriptor_sparse_coo_index_buffer(copy, 0), 3);
  hurray_descriptor_destroy(copy);
  hurray_descriptor_destroy(d);
}

/* A member name that is not UTF-8 decodes (validation refuses it); its
 * JSON wrote the raw byte, so the document was not UTF-8. */
static void test_json_of_a_name_that_is_not_utf8(void **state) {
  (void)state;
  size_t len;
  uint8_t *bytes = read_vector("composite_lora", "bin", &len);
  size_t at = 0;
  while (at + 4 <= len && memcmp(bytes + at, "base", 4) != 0) at++;
  assert_true(at + 4 <= len);
  bytes[at] = 0xFF;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_decode(bytes, len, &d, error));
  HurrayError e = {0};
  assert_int_equal(hurray_descriptor_validate(d, &e), HURRAY_ERR_COMPOSITE_NAME);
  char *json = NULL;
  assert_ok(hurray_descriptor_to_json(d, &json, error));
  assert_non_null(strstr(json, "\"\\ufffdase\""));
  assert_null(strchr(json, 0xFF));
  assert_non_null(strstr(json, "\"lora_a\"")); /* valid names as they are */
  hurray_free(json);
  hurray_descriptor_destroy(d);
  free(bytes);
}

/* *out was written on OVERFLOW (0, or a wrapped product), and sub-byte
 * counts overflowed on their bit count: 2^63 int4 need 2^62 bytes. */
static void test_storage_bytes_at_the_limits(void **state) {
  (void)state;
  uint64_t out = 77;
  assert_int_equal(hurray_dtype_storage_bytes(HURRAY_DTYPE_FLOAT64, 1ull << 61, &out),
                   HURRAY_ERR_OVERFLOW);
  assert_int_equal(hurray_dtype_storage_bytes(HURRAY_DTYPE_FLOAT32, UINT64_MAX, &out),
                   HURRAY_ERR_OVERFLOW);
  assert_int_equal(hurray_dtype_storage_bytes((HurrayDType)9999, 1, &out), HURRAY_ERR_DTYPE);
  assert_int_equal(out, 77);
  assert_ok(hurray_dtype_storage_bytes(HURRAY_DTYPE_INT4, 1ull << 63, &out));
  assert_int_equal(out, 1ull << 62);
  assert_ok(hurray_dtype_storage_bytes(HURRAY_DTYPE_UINT4, UINT64_MAX, &out));
  assert_int_equal(out, 1ull << 63);
  assert_ok(hurray_dtype_storage_bytes(HURRAY_DTYPE_FLOAT6_E3M2FN, 5, &out));
  assert_int_equal(out, 4); /* 30 bits */
  assert_ok(hurray_dtype_storage_bytes(HURRAY_DTYPE_FLOAT6_E2M3FN, UINT64_MAX, &out));
  assert_int_equal(out, 0xC000000000000000ull); /* ceil(6 (2^64 - 1) / 8) */
  assert_ok(hurray_dtype_storage_bytes(HURRAY_DTYPE_FLOAT64, (1ull << 61) - 1, &out));
  assert_int_equal(out, UINT64_MAX - 7);
}

int main(int argc, char **argv) {
  vectors_dir = argc > 1 ? argv[1] : "tests/vectors";
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_storage_bytes_at_the_limits),
      cmocka_unit_test(test_json_of_a_name_that_is_not_utf8),
      cmocka_unit_test(test_golden_encode),
      cmocka_unit_test(test_golden_decode),
      cmocka_unit_test(test_round_trip_vectors),
      cmocka_unit_test(test_buffer_tables_of_every_size),
      cmocka_unit_test(test_round_trip_every_dtype_and_option),
      cmocka_unit_test(test_optional_parts_are_owned),
      cmocka_unit_test(test_encoding_is_deterministic),
      cmocka_unit_test(test_unknown_fields),
      cmocka_unit_test(test_decode_limits),
      cmocka_unit_test(test_statistics_unknown_flag_refused),
      cmocka_unit_test(test_duplicate_record_refused),
      cmocka_unit_test(test_coo_reserved_flag_refused),
      cmocka_unit_test(test_composite_trailing_bytes_refused),
      cmocka_unit_test(test_member_name_with_nul_refused),
      cmocka_unit_test(test_composite_depth_limit),
      cmocka_unit_test(test_truncations),
      cmocka_unit_test(test_single_byte_corruptions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
