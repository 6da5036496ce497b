/*
 * Every hard limit of docs/spec/descriptor-encoding.md §9.7 and
 * docs/spec/file-format.md §9, one test each, at the limit (accepted) and
 * one past it (refused with the documented code), through every door that
 * takes it: setters, validator, encoder, decoder, writer, reader.
 *
 * And the rule behind them: no allocation is sized by an untrusted number
 * before that number has been checked against the input. Counts and
 * lengths at their limit but larger than the bytes that follow are refused
 * as MALFORMED / TRUNCATED / RANGE (the input is too short), never
 * attempted as allocations.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "scratch_dir.h"
#include "test_util.h"

/* ------------------------------------------------------------ byte builder */

typedef struct Buf {
  uint8_t *p;
  size_t len, cap;
} Buf;

static void b_put(Buf *b, const void *src, size_t n) {
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    b->p = realloc(b->p, cap);
    assert_non_null(b->p);
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, src, n);
  b->len += n;
}

static void b_le(Buf *b, uint64_t v, int n) {
  uint8_t tmp[8];
  for (int i = 0; i < n; i++) tmp[i] = (uint8_t)(v >> (8 * i));
  b_put(b, tmp, (size_t)n);
}

static void b_zeros(Buf *b, size_t n) {
  for (size_t i = 0; i < n; i++) b_le(b, 0, 1);
}

/* A record: u16 tag, u32 length, payload. */
static void b_rec(Buf *b, uint16_t tag, const void *payload, size_t n) {
  b_le(b, tag, 2);
  b_le(b, n, 4);
  b_put(b, payload, n);
}

enum {
  TAG_DTYPE = 0x11,
  TAG_SHAPE = 0x13,
  TAG_STRIDES = 0x15,
  TAG_LAYOUT_DENSE = 0x21,
  TAG_LAYOUT_COMPOSITE = 0x2D,
  TAG_BUFFER_TABLE = 0x41,
  TAG_EXTENSION = 0x52,
  DTYPE_FLOAT32 = 12
};

static const uint8_t dtype_f32[2] = {DTYPE_FLOAT32, 0};
static const uint8_t dense_over_0[4] = {0, 0, 0, 0};

/* Records of a node: float32, rank 0, dense over buffer 0. */
static void b_leaf(Buf *b) {
  b_rec(b, TAG_DTYPE, dtype_f32, 2);
  b_rec(b, TAG_SHAPE, NULL, 0);
  b_rec(b, TAG_LAYOUT_DENSE, dense_over_0, 4);
}

/* Records of a composite node with `count` unnamed members, each `child`. */
static void b_composite(Buf *b, uint32_t count, const Buf *child) {
  Buf payload = {0};
  b_le(&payload, count, 4);
  for (uint32_t i = 0; i < count; i++) {
    b_le(&payload, 0, 2);
    b_le(&payload, child->len, 4);
    b_put(&payload, child->p, child->len);
  }
  b_rec(b, TAG_DTYPE, dtype_f32, 2);
  b_rec(b, TAG_SHAPE, NULL, 0);
  b_rec(b, TAG_LAYOUT_COMPOSITE, payload.p, payload.len);
  free(payload.p);
}

/* Header, `node` (records up to the layout), then an empty buffer table. */
static Buf b_descriptor(const Buf *node) {
  Buf b = {0};
  b_put(&b, "HRYD", 4);
  b_le(&b, 1, 2);
  b_put(&b, node->p, node->len);
  const uint8_t empty_table[4] = {0};
  b_rec(&b, TAG_BUFFER_TABLE, empty_table, 4);
  return b;
}

static HurrayStatus decode_status(const Buf *b, const char *must_mention) {
  HurrayDescriptor *d = NULL;
  HurrayError err = {0};
  HurrayStatus status = hurray_descriptor_decode(b->p, b->len, &d, &err);
  if (status == HURRAY_OK) {
    assert_non_null(d);
    hurray_descriptor_destroy(d);
  } else {
    assert_null(d);
    assert_int_equal(err.code, status);
    if (must_mention != NULL && strstr(err.message, must_mention) == NULL) {
      fail_msg("message \"%s\" does not mention \"%s\"", err.message, must_mention);
    }
  }
  return status;
}

/* ------------------------------------------------------ descriptor limits */

static void test_rank(void **state) {
  (void)state;
  uint64_t shape[HURRAY_MAX_RANK + 1];
  for (uint32_t i = 0; i <= HURRAY_MAX_RANK; i++) shape[i] = 1;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, HURRAY_MAX_RANK, shape, &d, error));
  assert_status(HURRAY_ERR_LIMIT,
                hurray_descriptor_set_shard(d, HURRAY_MAX_RANK + 1, shape, shape, error));
  hurray_descriptor_destroy(d);
  d = NULL;
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_create(HURRAY_DTYPE_UINT8, HURRAY_MAX_RANK + 1,
                                                           shape, &d, error));
  assert_null(d);

  /* Decoder: SHAPE and STRIDES of 33 entries. The rank is the dimension
   * count: there is no separate limit on the number of dimensions. */
  for (int which = 0; which < 2; which++) {
    Buf node = {0};
    Buf dims = {0};
    for (uint32_t i = 0; i < HURRAY_MAX_RANK + (which == 0); i++) b_le(&dims, 1, 8);
    Buf strides = {0};
    for (uint32_t i = 0; i < HURRAY_MAX_RANK + 1; i++) b_le(&strides, 1, 8);
    b_rec(&node, TAG_DTYPE, dtype_f32, 2);
    b_rec(&node, TAG_SHAPE, dims.p, dims.len);
    if (which == 1) b_rec(&node, TAG_STRIDES, strides.p, strides.len);
    b_rec(&node, TAG_LAYOUT_DENSE, dense_over_0, 4);
    Buf b = b_descriptor(&node);
    assert_int_equal(decode_status(&b, "rank"), HURRAY_ERR_LIMIT);
    free(b.p);
    free(node.p);
    free(dims.p);
    free(strides.p);
  }
}

static void test_buffer_count(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &d, error));
  for (uint32_t i = 0; i < HURRAY_MAX_BUFFERS; i++) {
    assert_ok(
        hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1, 64, HURRAY_SYNC_READY, NULL, error));
  }
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1, 64,
                                                               HURRAY_SYNC_READY, NULL, error));
  hurray_descriptor_destroy(d);

  /* Decoder: a table claiming 1025 entries; and one claiming 1024 whose
   * payload is too short, refused before the table is allocated. */
  Buf node = {0};
  b_leaf(&node);
  for (int which = 0; which < 2; which++) {
    Buf b = {0};
    b_put(&b, "HRYD", 4);
    b_le(&b, 1, 2);
    b_put(&b, node.p, node.len);
    uint8_t count[4];
    uint32_t n = which == 0 ? HURRAY_MAX_BUFFERS + 1 : HURRAY_MAX_BUFFERS;
    for (int i = 0; i < 4; i++) count[i] = (uint8_t)(n >> (8 * i));
    b_rec(&b, TAG_BUFFER_TABLE, count, 4);
    assert_int_equal(decode_status(&b, NULL),
                     which == 0 ? HURRAY_ERR_LIMIT : HURRAY_ERR_MALFORMED);
    free(b.p);
  }
  free(node.p);
}

static void test_alignment(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &d, error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1, HURRAY_MAX_ALIGNMENT,
                                         HURRAY_SYNC_READY, NULL, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1, HURRAY_MAX_ALIGNMENT * 2,
                                             HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);

  /* Decoded (the decoder does not validate): the validator refuses it. */
  Buf node = {0};
  b_leaf(&node);
  Buf b = {0};
  b_put(&b, "HRYD", 4);
  b_le(&b, 1, 2);
  b_put(&b, node.p, node.len);
  Buf table = {0};
  b_le(&table, 1, 4);
  b_le(&table, HURRAY_ROLE_DATA, 1);
  b_le(&table, 0, 1);
  b_le(&table, 0, 2);
  b_le(&table, HURRAY_MAX_ALIGNMENT * 2, 4);
  b_le(&table, 4, 8);
  b_rec(&b, TAG_BUFFER_TABLE, table.p, table.len);
  d = NULL;
  assert_ok(hurray_descriptor_decode(b.p, b.len, &d, error));
  assert_status(HURRAY_ERR_BUFFER_TABLE, hurray_descriptor_validate(d, error));
  hurray_descriptor_destroy(d);
  free(b.p);
  free(table.p);
  free(node.p);
}

static void test_names_and_extension(void **state) {
  (void)state;
  char name[HURRAY_MAX_NAME_BYTES + 2];
  memset(name, 'n', sizeof name - 1);
  name[sizeof name - 1] = '\0'; /* 256 bytes */
  HurrayDescriptor *d = NULL, *m = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &d, error));
  assert_ok(hurray_descriptor_set_layout_composite(d, error));
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &m, error));
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_add_member(d, name, m, error)); /* m freed */
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_set_extension(d, name, NULL, 0, error));
  name[HURRAY_MAX_NAME_BYTES] = '\0'; /* 255 bytes */
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &m, error));
  assert_ok(hurray_descriptor_add_member(d, name, m, error));
  assert_ok(hurray_descriptor_set_extension(d, name, NULL, 0, error));
  uint8_t *meta = calloc(1, HURRAY_MAX_EXTENSION_METADATA_BYTES + 1);
  assert_ok(
      hurray_descriptor_set_extension(d, "x", meta, HURRAY_MAX_EXTENSION_METADATA_BYTES, error));
  assert_status(HURRAY_ERR_LIMIT,
                hurray_descriptor_set_extension(d, "x", meta,
                                                HURRAY_MAX_EXTENSION_METADATA_BYTES + 1, error));
  hurray_descriptor_destroy(d);

  /* Decoder: a 256-byte member name, extension name and 1 MiB + 1 of
   * extension metadata (claimed, with the bytes absent: LIMIT comes first). */
  Buf leaf = {0};
  b_leaf(&leaf);
  Buf payload = {0};
  b_le(&payload, 1, 4);
  b_le(&payload, HURRAY_MAX_NAME_BYTES + 1, 2);
  b_put(&payload, name, HURRAY_MAX_NAME_BYTES);
  b_put(&payload, "n", 1);
  b_le(&payload, leaf.len, 4);
  b_put(&payload, leaf.p, leaf.len);
  Buf node = {0};
  b_rec(&node, TAG_DTYPE, dtype_f32, 2);
  b_rec(&node, TAG_SHAPE, NULL, 0);
  b_rec(&node, TAG_LAYOUT_COMPOSITE, payload.p, payload.len);
  Buf b = b_descriptor(&node);
  assert_int_equal(decode_status(&b, "name"), HURRAY_ERR_LIMIT);
  free(b.p);
  for (int which = 0; which < 2; which++) {
    Buf ext = {0};
    size_t name_len = which == 0 ? HURRAY_MAX_NAME_BYTES + 1 : 1;
    b_le(&ext, name_len, 2);
    for (size_t i = 0; i < name_len; i++) b_put(&ext, "e", 1);
    b_le(&ext, which == 0 ? 0 : HURRAY_MAX_EXTENSION_METADATA_BYTES + 1, 4);
    b = (Buf){0};
    b_put(&b, "HRYD", 4);
    b_le(&b, 1, 2);
    b_put(&b, leaf.p, leaf.len);
    const uint8_t empty_table[4] = {0};
    b_rec(&b, TAG_BUFFER_TABLE, empty_table, 4);
    b_rec(&b, TAG_EXTENSION, ext.p, ext.len);
    assert_int_equal(decode_status(&b, "extension"), HURRAY_ERR_LIMIT);
    free(b.p);
    free(ext.p);
  }
  free(node.p);
  free(payload.p);
  free(leaf.p);
  free(meta);
}

static void test_encoded_size(void **state) {
  (void)state;
  size_t len = HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES + 1;
  uint8_t *bytes = calloc(1, len);
  memcpy(bytes, "HRYD\x01\x00", 6);
  HurrayDescriptor *d = NULL;
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_decode(bytes, len, &d, error));
  free(bytes);
}

/* A chain of composites `levels` deep, ending in a dense leaf. */
static HurrayDescriptor *chain(uint32_t levels) {
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &d, error));
  for (uint32_t i = 0; i < levels; i++) {
    HurrayDescriptor *outer = NULL;
    assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &outer, error));
    assert_ok(hurray_descriptor_set_layout_composite(outer, error));
    assert_ok(hurray_descriptor_add_member(outer, "m", d, error));
    d = outer;
  }
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1, 64, HURRAY_SYNC_READY, NULL, error));
  return d;
}

static void test_composite_depth(void **state) {
  (void)state;
  HurrayDescriptor *d = chain(HURRAY_MAX_COMPOSITE_DEPTH);
  assert_ok(hurray_descriptor_validate(d, error));
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
  d = chain(HURRAY_MAX_COMPOSITE_DEPTH + 1);
  assert_status(HURRAY_ERR_COMPOSITE_DEPTH, hurray_descriptor_validate(d, error));
  assert_status(HURRAY_ERR_COMPOSITE_DEPTH, hurray_descriptor_encode(d, &bytes, &len, error));
  hurray_descriptor_destroy(d);

  /* Decoder: nine levels of members. */
  Buf node = {0};
  b_leaf(&node);
  for (uint32_t i = 0; i < HURRAY_MAX_COMPOSITE_DEPTH + 1; i++) {
    Buf outer = {0};
    b_composite(&outer, 1, &node);
    free(node.p);
    node = outer;
  }
  Buf b = b_descriptor(&node);
  assert_int_equal(decode_status(&b, "deeper"), HURRAY_ERR_LIMIT);
  free(b.p);
  free(node.p);
}

static void test_composite_members(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &d, error));
  assert_ok(hurray_descriptor_set_layout_composite(d, error));
  for (uint32_t i = 0; i <= HURRAY_MAX_COMPOSITE_MEMBERS; i++) {
    HurrayDescriptor *m = NULL;
    char name[16];
    snprintf(name, sizeof name, "m%u", i);
    assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &m, error));
    assert_status(i < HURRAY_MAX_COMPOSITE_MEMBERS ? HURRAY_OK : HURRAY_ERR_LIMIT,
                  hurray_descriptor_add_member(d, name, m, error));
  }
  hurray_descriptor_destroy(d);

  Buf leaf = {0}, node = {0};
  b_leaf(&leaf);
  b_composite(&node, HURRAY_MAX_COMPOSITE_MEMBERS + 1, &leaf);
  Buf b = b_descriptor(&node);
  assert_int_equal(decode_status(&b, "members"), HURRAY_ERR_LIMIT);
  free(b.p);
  free(node.p);
  free(leaf.p);
}

/* A valid descriptor of exactly `nodes` nodes: a root over one 1-byte
 * buffer whose members are composites of up to 1023 dense members. */
static HurrayDescriptor *many_nodes(uint32_t nodes) {
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &d, error));
  assert_ok(hurray_descriptor_set_layout_composite(d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1, 64, HURRAY_SYNC_READY, NULL, error));
  uint32_t left = nodes - 1;
  for (uint32_t g = 0; left > 0; g++) {
    uint32_t leaves = left - 1 > 1023 ? 1023 : left - 1;
    HurrayDescriptor *group = NULL;
    assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &group, error));
    assert_ok(hurray_descriptor_set_layout_composite(group, error));
    for (uint32_t i = 0; i < leaves; i++) {
      HurrayDescriptor *m = NULL;
      char name[16];
      snprintf(name, sizeof name, "m%u", i);
      assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &m, error));
      assert_ok(hurray_descriptor_add_member(group, name, m, error));
    }
    char name[16];
    snprintf(name, sizeof name, "g%u", g);
    assert_ok(hurray_descriptor_add_member(d, name, group, error));
    left -= 1 + leaves;
  }
  return d;
}

static void test_descriptor_nodes(void **state) {
  (void)state;
  /* Setters do not count nodes (as with depth); validator and encoder do. */
  HurrayDescriptor *d = many_nodes(HURRAY_MAX_DESCRIPTOR_NODES);
  assert_ok(hurray_descriptor_validate(d, error));
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  HurrayDescriptor *back = NULL;
  assert_ok(hurray_descriptor_decode(bytes, len, &back, error));
  assert_true(hurray_descriptor_equal(d, back));
  hurray_descriptor_destroy(back);
  hurray_free(bytes);
  hurray_descriptor_destroy(d);
  d = many_nodes(HURRAY_MAX_DESCRIPTOR_NODES + 1);
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_validate(d, error));
  assert_status(HURRAY_ERR_LIMIT, hurray_descriptor_encode(d, &bytes, &len, error));
  hurray_descriptor_destroy(d);

  /* Decoder: 8 groups, the last one leaf short of (or at) the limit. */
  Buf leaf = {0}, full = {0}, short_group = {0}, over_group = {0};
  b_leaf(&leaf);
  b_composite(&full, 1023, &leaf);
  b_composite(&short_group, 1022, &leaf);
  b_composite(&over_group, 1023, &leaf);
  for (int over = 0; over < 2; over++) {
    Buf payload = {0};
    b_le(&payload, 8, 4);
    for (int g = 0; g < 8; g++) {
      const Buf *child = g < 7 ? &full : over ? &over_group : &short_group;
      b_le(&payload, 0, 2);
      b_le(&payload, child->len, 4);
      b_put(&payload, child->p, child->len);
    }
    Buf node = {0};
    b_rec(&node, TAG_DTYPE, dtype_f32, 2);
    b_rec(&node, TAG_SHAPE, NULL, 0);
    b_rec(&node, TAG_LAYOUT_COMPOSITE, payload.p, payload.len);
    Buf b = b_descriptor(&node);
    assert_int_equal(decode_status(&b, "nodes"), over ? HURRAY_ERR_LIMIT : HURRAY_OK);
    free(b.p);
    free(node.p);
    free(payload.p);
  }

  /* The attack the limit stops: 16 MiB of 30-byte members, 1024 x 540,
   * used to decode into about 2.5 GB of descriptors. */
  Buf wide = {0}, node = {0};
  b_composite(&wide, 540, &leaf);
  b_composite(&node, 1024, &wide);
  Buf b = b_descriptor(&node);
  assert_true(b.len <= HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES);
  clock_t start = clock();
  assert_int_equal(decode_status(&b, "nodes"), HURRAY_ERR_LIMIT);
  printf("a %zu-byte descriptor of 553,985 nodes: refused in %.3f s\n", b.len,
         (double)(clock() - start) / CLOCKS_PER_SEC);
  free(b.p);
  free(node.p);
  free(wide.p);
  free(leaf.p);
  free(full.p);
  free(short_group.p);
  free(over_group.p);
}

/* ------------------------------------------------------------ file limits */

static HurrayStatus discard(void *ctx, const void *data, size_t len) {
  (void)ctx;
  (void)data;
  (void)len;
  return HURRAY_OK;
}

static void test_writer_names_and_metadata(void **state) {
  (void)state;
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open_callback(discard, NULL, &w, error));
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  static _Alignas(64) uint8_t byte[64];
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){1}, &d, error));
  assert_ok(
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, 1, 64, HURRAY_SYNC_READY, NULL, error));
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_create(byte, 1, NULL, NULL, &b, error));
  assert_ok(hurray_buffer_list_push(list, b, error));

  char *name = malloc(HURRAY_MAX_TENSOR_NAME_BYTES + 2);
  memset(name, 't', HURRAY_MAX_TENSOR_NAME_BYTES + 1);
  name[HURRAY_MAX_TENSOR_NAME_BYTES + 1] = '\0';
  assert_status(HURRAY_ERR_LIMIT, hurray_writer_write_tensor(w, name, d, list, error));
  assert_status(HURRAY_ERR_LIMIT, hurray_writer_set_metadata_int(w, name, 1, error));
  name[HURRAY_MAX_TENSOR_NAME_BYTES] = '\0';
  assert_ok(hurray_writer_write_tensor(w, name, d, list, error));
  assert_ok(hurray_writer_set_metadata_int(w, name, 1, error));
  free(name);

  /* A value larger than the index can hold: refused before it is copied. */
  assert_status(HURRAY_ERR_LIMIT, hurray_writer_set_metadata_bytes(
                                      w, "big", byte, (size_t)HURRAY_MAX_INDEX_BYTES + 1, error));

  /* 2^16 keys, then one more; replacing a key at the limit still works.
   * Keys are hashed: this takes milliseconds, not the seconds a linear
   * search per key took. */
  clock_t start = clock();
  char key[32];
  for (uint32_t i = 1; i < HURRAY_MAX_METADATA_ENTRIES; i++) {
    snprintf(key, sizeof key, "key.%u", i);
    assert_ok(hurray_writer_set_metadata_int(w, key, i, error));
  }
  printf("%u metadata keys set in %.3f s\n", HURRAY_MAX_METADATA_ENTRIES,
         (double)(clock() - start) / CLOCKS_PER_SEC);
  assert_status(HURRAY_ERR_LIMIT, hurray_writer_set_metadata_int(w, "one.more", 0, error));
  assert_ok(hurray_writer_set_metadata_string(w, "key.7", "replaced", error));
  /* A buffer longer than a chunk needs an entry for its chunk checksums:
   * none is left, so the tensor is refused and the writer stays usable. */
  uint64_t big_size = HURRAY_CHUNK_BYTES + 1;
  uint8_t *big = calloc(1, (size_t)big_size);
  HurrayDenseTensor t = {"big", HURRAY_DTYPE_UINT8, 1, &big_size, big, big_size};
  assert_status(HURRAY_ERR_LIMIT, hurray_writer_write_dense_batch(w, &t, 1, NULL, error));
  free(big);
  assert_ok(hurray_writer_finish(w, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("limits");
}

/* Writes a file of header, `index` at offset 64 and a sealed trailer; the
 * trailer's index_length is `claimed_index_length` (or the real length when
 * 0). */
static void craft(const char *path, const Buf *index, uint64_t tensors, uint64_t metadata,
                  uint64_t claimed_index_length) {
  Buf f = {0};
  b_put(&f, "\x89HRY\r\n\x1a\n", 8);
  b_le(&f, 1, 2);
  b_le(&f, 0, 2);
  b_zeros(&f, 52);
  b_put(&f, index->p, index->len);
  size_t trailer = f.len;
  b_le(&f, 64, 8);
  b_le(&f, claimed_index_length ? claimed_index_length : index->len, 8);
  b_le(&f, XXH3_64bits(index->p, index->len), 8);
  b_le(&f, tensors, 8);
  b_le(&f, metadata, 8);
  b_le(&f, 1, 2);
  b_le(&f, 0, 2);
  b_le(&f, 0, 4);
  b_le(&f, XXH3_64bits(f.p + trailer, 48), 8);
  b_put(&f, "HRYEND\x1a\n", 8);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(f.p, 1, f.len, fp), f.len);
  fclose(fp);
  free(f.p);
}

static void expect_open(const char *path, HurrayStatus expected, const char *what) {
  for (int mode = 0; mode < 2; mode++) {
    HurrayReaderOptions options = HURRAY_READER_OPTIONS_INIT;
    options.mode = mode ? HURRAY_READ_PREAD : HURRAY_READ_MMAP;
    HurrayReader *r = NULL;
    HurrayError err = {0};
    HurrayStatus status = hurray_reader_open(path, &options, &r, &err);
    hurray_reader_close(r);
    if (status != expected) {
      fail_msg("%s (%s): expected %s, got %s: %s", what, mode ? "pread" : "mmap",
               hurray_status_name(expected), hurray_status_name(status), err.message);
    }
  }
}

static void test_reader_limits(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/crafted.hurray", dir);
  struct {
    const char *what;
    uint64_t tensors, metadata, claimed_index_length;
    uint64_t name_len, descriptor_len, buffer_count, value_len;
    HurrayStatus expected;
  } cases[] = {
      /* Past a limit: LIMIT. */
      {"tensor name of 4097 bytes", 1, 0, 0, HURRAY_MAX_TENSOR_NAME_BYTES + 1, 0, 0, 0,
       HURRAY_ERR_LIMIT},
      {"descriptor of 16 MiB + 1", 1, 0, 0, 1, HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES + 1, 0, 0,
       HURRAY_ERR_LIMIT},
      {"1025 buffers", 1, 0, 0, 1, 0, HURRAY_MAX_BUFFERS + 1, 0, HURRAY_ERR_LIMIT},
      {"metadata key of 4097 bytes", 0, 1, 0, HURRAY_MAX_METADATA_KEY_BYTES + 1, 0, 0, 0,
       HURRAY_ERR_LIMIT},
      {"2^20 + 1 tensors", HURRAY_MAX_TENSORS + 1, 0, 0, 1, 0, 0, 0, HURRAY_ERR_LIMIT},
      {"2^16 + 1 metadata entries", 0, HURRAY_MAX_METADATA_ENTRIES + 1, 0, 1, 0, 0, 0,
       HURRAY_ERR_LIMIT},
      {"index of 256 MiB + 1", 0, 0, (uint64_t)HURRAY_MAX_INDEX_BYTES + 1, 1, 0, 0, 0,
       HURRAY_ERR_LIMIT},
      /* At a limit, but more than the file holds: refused by size, before
       * anything is allocated for it. */
      {"2^20 tensors in a 64-byte index", HURRAY_MAX_TENSORS, 0, 0, 1, 0, 0, 0,
       HURRAY_ERR_MALFORMED},
      {"2^16 metadata entries in a 64-byte index", 0, HURRAY_MAX_METADATA_ENTRIES, 0, 1, 0, 0, 0,
       HURRAY_ERR_MALFORMED},
      {"an index of 256 MiB in a small file", 0, 0, HURRAY_MAX_INDEX_BYTES, 1, 0, 0, 0,
       HURRAY_ERR_RANGE},
      {"a 16 MiB descriptor in a 64-byte index", 1, 0, 0, 1, HURRAY_MAX_ENCODED_DESCRIPTOR_BYTES,
       0, 0, HURRAY_ERR_MALFORMED},
      {"1024 buffers in a 64-byte index", 1, 0, 0, 1, 0, HURRAY_MAX_BUFFERS, 0,
       HURRAY_ERR_MALFORMED},
      {"a 4 GiB metadata value in a 64-byte index", 0, 1, 0, 1, 0, 0, UINT32_MAX,
       HURRAY_ERR_MALFORMED},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* One entry: a tensor (name, descriptor_len, buffer_count) or a
     * metadata entry (key, type 5, value_len), zero-padded to 64 bytes. */
    Buf index = {0};
    b_le(&index, cases[i].name_len, 2);
    if (cases[i].name_len <= 8) {
      for (uint64_t k = 0; k < cases[i].name_len; k++) b_put(&index, "n", 1);
      if (cases[i].tensors > 0) {
        b_le(&index, cases[i].descriptor_len, 4);
        b_le(&index, cases[i].buffer_count, 4);
      } else {
        b_le(&index, HURRAY_METADATA_BYTES, 1);
        b_le(&index, cases[i].value_len, 4);
      }
    }
    b_zeros(&index, 64 - index.len);
    craft(path, &index, cases[i].tensors, cases[i].metadata, cases[i].claimed_index_length);
    expect_open(path, cases[i].expected, cases[i].what);
    free(index.p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rank),
      cmocka_unit_test(test_buffer_count),
      cmocka_unit_test(test_alignment),
      cmocka_unit_test(test_names_and_extension),
      cmocka_unit_test(test_encoded_size),
      cmocka_unit_test(test_composite_depth),
      cmocka_unit_test(test_composite_members),
      cmocka_unit_test(test_descriptor_nodes),
      cmocka_unit_test(test_writer_names_and_metadata),
      cmocka_unit_test(test_reader_limits),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
