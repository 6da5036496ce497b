/*
 * HurrayBuffer / HurrayBufferList ownership (release callbacks counted on
 * every path) and hurray_validate_buffer_placement, one case per rule.
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "vectors.h"

typedef struct Counter {
  int releases;
  void *last_data;
} Counter;

static void count_release(void *data, void *ctx) {
  Counter *c = ctx;
  c->releases++;
  c->last_data = data;
}

static void free_release(void *data, void *ctx) {
  Counter *c = ctx;
  c->releases++;
  free(data);
}

static HurrayBuffer *counted(void *data, uint64_t size, Counter *c) {
  HurrayBuffer *b = NULL;
  assert_ok(hurray_buffer_create(data, size, count_release, c, &b, error));
  return b;
}

static void test_abi_version(void **state) {
  (void)state;
  assert_int_equal(HURRAY_C_ABI_VERSION, 3);
  assert_int_equal(hurray_abi_version(), HURRAY_C_ABI_VERSION);
  assert_string_equal(hurray_version_string(), HURRAY_VERSION_STRING);
}

static void test_destroy_releases_once(void **state) {
  (void)state;
  Counter c = {0};
  static char storage[8];
  HurrayBuffer *b = counted(storage, sizeof storage, &c);
  assert_int_equal(c.releases, 0);
  assert_ptr_equal(hurray_buffer_data(b), storage);
  assert_int_equal(hurray_buffer_size(b), 8);
  hurray_buffer_destroy(b);
  assert_int_equal(c.releases, 1);
  assert_ptr_equal(c.last_data, storage);
  hurray_buffer_destroy(NULL); /* no-op */
  /* A NULL release is allowed for memory nobody has to free. */
  HurrayBuffer *unowned = NULL;
  assert_ok(hurray_buffer_create(storage, 8, NULL, NULL, &unowned, error));
  hurray_buffer_destroy(unowned);
}

/* Lengths around the list's own room (3 handles) and past two of its
 * growths: each handle comes back by index, and each is released once. */
static void test_list_releases_each_once(void **state) {
  (void)state;
  enum { MOST = 13 };
  static const size_t lengths[] = {0, 1, 3, 4, 7, MOST};
  for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
    size_t n = lengths[k];
    Counter c[MOST] = {{0}};
    void *mem[MOST];
    HurrayBufferList *list = NULL;
    assert_ok(hurray_buffer_list_create(&list, error));
    for (size_t i = 0; i < n; i++) {
      mem[i] = malloc(16);
      HurrayBuffer *b = NULL;
      assert_ok(hurray_buffer_create(mem[i], 16, free_release, &c[i], &b, error));
      assert_ok(hurray_buffer_list_push(list, b, error));
    }
    assert_int_equal(hurray_buffer_list_len(list), n);
    /* get borrows: looking at every element releases nothing. */
    for (size_t i = 0; i < n; i++) {
      assert_ptr_equal(hurray_buffer_data(hurray_buffer_list_get(list, i)), mem[i]);
      assert_ptr_equal(hurray_buffer_list_get_mutable(list, i), hurray_buffer_list_get(list, i));
    }
    assert_null(hurray_buffer_list_get(list, n));
    assert_null(hurray_buffer_list_get_mutable(list, n));
    for (size_t i = 0; i < n; i++) {
      assert_int_equal(c[i].releases, 0);
    }
    hurray_buffer_list_destroy(list);
    for (size_t i = 0; i < n; i++) {
      assert_int_equal(c[i].releases, 1);
    }
  }
  assert_null(hurray_buffer_list_get_mutable(NULL, 0));
  hurray_buffer_list_destroy(NULL); /* no-op */
  assert_int_equal(hurray_buffer_list_len(NULL), 0);
}

static void test_create_failure_releases(void **state) {
  (void)state;
  Counter c = {0};
  HurrayBuffer *b = (HurrayBuffer *)0x1;
  /* NULL data for a non-empty buffer: refused, and the release still runs. */
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_buffer_create(NULL, 8, count_release, &c, &b, error));
  assert_null(b);
  assert_int_equal(c.releases, 1);
  /* No out pointer: the data is released rather than leaked. */
  static char storage[4];
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_buffer_create(storage, 4, count_release, &c, NULL, error));
  assert_int_equal(c.releases, 2);
  /* An empty buffer may have NULL data. */
  assert_ok(hurray_buffer_create(NULL, 0, count_release, &c, &b, error));
  hurray_buffer_destroy(b);
  assert_int_equal(c.releases, 3);
}

static void test_push_failure_releases(void **state) {
  (void)state;
  Counter c = {0};
  static char storage[4];
  /* Push onto no list: the handle is destroyed, once. */
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_buffer_list_push(NULL, counted(storage, 4, &c), error));
  assert_int_equal(c.releases, 1);
  /* Past the limit: the extra handle is destroyed, the others stay owned. */
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, error));
  Counter many = {0};
  for (uint32_t i = 0; i < HURRAY_MAX_BUFFERS; i++) {
    assert_ok(hurray_buffer_list_push(list, counted(storage, 4, &many), error));
  }
  Counter extra = {0};
  assert_status(HURRAY_ERR_LIMIT,
                hurray_buffer_list_push(list, counted(storage, 4, &extra), error));
  assert_int_equal(extra.releases, 1);
  assert_int_equal(many.releases, 0);
  assert_int_equal(hurray_buffer_list_len(list), HURRAY_MAX_BUFFERS);
  hurray_buffer_list_destroy(list);
  assert_int_equal(many.releases, (int)HURRAY_MAX_BUFFERS);
}

/* A producer building a 3-buffer list fails at the second buffer and cleans
 * up: every allocation is released exactly once. */
static void test_error_midway(void **state) {
  (void)state;
  Counter c[3] = {{0}};
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_ok(hurray_buffer_list_push(list, counted(malloc(1), 1, &c[0]), error));
  HurrayBuffer *second = NULL;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_buffer_create(NULL, 12, count_release, &c[1], &second, error));
  hurray_buffer_list_destroy(list);
  free(c[0].last_data);
  assert_int_equal(c[0].releases, 1);
  assert_int_equal(c[1].releases, 1);
  assert_int_equal(c[2].releases, 0); /* never created, never released */
}

static void test_handle_setters(void **state) {
  (void)state;
  Counter c = {0};
  _Alignas(64) static char storage[128];
  HurrayBuffer *b = counted(storage, 128, &c);
  assert_int_equal(hurray_buffer_alignment(b), 1);
  assert_ok(hurray_buffer_set_alignment(b, 64, error));
  assert_int_equal(hurray_buffer_alignment(b), 64);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_buffer_set_alignment(b, 48, error));
  HurrayBuffer *off = counted(storage + 1, 4, &c);
  assert_status(HURRAY_ERR_BUFFER_ALIGNMENT, hurray_buffer_set_alignment(off, 2, error));
  hurray_buffer_destroy(off);
  int event = 0;
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_buffer_set_sync(b, HURRAY_SYNC_EVENT, NULL, error));
  assert_ok(hurray_buffer_set_sync(b, HURRAY_SYNC_EVENT, &event, error));
  assert_int_equal(hurray_buffer_sync_mode(b), HURRAY_SYNC_EVENT);
  assert_ptr_equal(hurray_buffer_sync_handle(b), &event);
  assert_ok(hurray_buffer_set_device(b, HURRAY_DEVICE_CUDA, 2, HURRAY_MEMORY_DEVICE, error));
  assert_int_equal(hurray_buffer_device_type(b), HURRAY_DEVICE_CUDA);
  assert_int_equal(hurray_buffer_device_id(b), 2);
  assert_int_equal(hurray_buffer_memory_class(b), HURRAY_MEMORY_DEVICE);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_buffer_set_device(b, HURRAY_DEVICE_CUDA, 2, (HurrayMemoryClass)0, error));
  hurray_buffer_destroy(b);
  assert_int_equal(c.releases, 2);
}

/* ------------------------------------------------------------- placement */

static Counter shared_counter;

/* A list of 64-byte aligned, zeroed host buffers sized as the table says
 * (plus `extra` bytes), each freed by its release. */
static HurrayBufferList *list_for(const HurrayDescriptor *d, uint64_t extra) {
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, error));
  uint8_t *memory[64] = {0};
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t size = hurray_descriptor_buffer_size(d, i) + extra;
    uint8_t *mem = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
    memset(mem, 0, (size + 63) / 64 * 64 + 64);
    memory[i] = mem;
    HurrayBuffer *b = NULL;
    assert_ok(hurray_buffer_create(mem, size, free_release, &shared_counter, &b, error));
    assert_ok(
        hurray_buffer_set_sync(b, hurray_descriptor_buffer_sync_mode(d, i), (void *)d, error));
    assert_ok(hurray_buffer_list_push(list, b, error));
  }
  golden_vector_fill_indices(d, memory);
  return list;
}

static void test_placement_accepts_every_golden_host_vector(void **state) {
  (void)state;
  for (size_t i = 0; i < golden_vector_count; i++) {
    HurrayDescriptor *d = golden_vectors[i].build();
    if (hurray_descriptor_memory_class(d) == HURRAY_MEMORY_HOST) {
      HurrayBufferList *list = list_for(d, 0);
      assert_ok(hurray_validate_buffer_placement(d, list, error));
      hurray_buffer_list_destroy(list);
    }
    hurray_descriptor_destroy(d);
  }
}

static void test_placement_count(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("quant_per_channel_affine");
  HurrayBufferList *list = list_for(d, 0);
  hurray_descriptor_set_quant_none(d);
  /* The descriptor no longer references buffers 1 and 2: invalid first. */
  assert_status(HURRAY_ERR_BUFFER_UNREFERENCED, hurray_validate_buffer_placement(d, list, error));
  hurray_descriptor_destroy(d);
  /* A list one short of the table. */
  d = golden_vector_build("dense_float32");
  HurrayDescriptor *bsr = golden_vector_build("sparse_bsr");
  HurrayBufferList *two = list_for(bsr, 0);
  hurray_descriptor_destroy(bsr);
  assert_status(HURRAY_ERR_BUFFER_COUNT, hurray_validate_buffer_placement(d, two, error));
  HurrayBufferList *empty = NULL;
  assert_ok(hurray_buffer_list_create(&empty, error));
  assert_status(HURRAY_ERR_BUFFER_COUNT, hurray_validate_buffer_placement(d, empty, error));
  hurray_buffer_list_destroy(empty);
  hurray_buffer_list_destroy(two);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_placement_size_alignment_device_sync(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("quant_per_channel_affine");
  HurrayBufferList *list = list_for(d, 0);
  assert_ok(hurray_validate_buffer_placement(d, list, error));

  /* Scales one float short. */
  HurrayBufferList *small = NULL;
  assert_ok(hurray_buffer_list_create(&small, error));
  static _Alignas(64) char mem[3][64];
  uint64_t sizes[3] = {12, 12, 4};
  for (int i = 0; i < 3; i++) {
    HurrayBuffer *b = NULL;
    assert_ok(hurray_buffer_create(mem[i], sizes[i], count_release, &shared_counter, &b, error));
    assert_ok(hurray_buffer_list_push(small, b, error));
  }
  assert_status(HURRAY_ERR_BUFFER_SIZE, hurray_validate_buffer_placement(d, small, error));
  hurray_buffer_list_destroy(small);

  /* Misaligned scales: the table asks for 64. */
  HurrayBufferList *skewed = NULL;
  assert_ok(hurray_buffer_list_create(&skewed, error));
  static _Alignas(64) char big[3][128];
  for (int i = 0; i < 3; i++) {
    HurrayBuffer *b = NULL;
    assert_ok(hurray_buffer_create(big[i] + (i == 1 ? 4 : 0), 64, count_release, &shared_counter,
                                   &b, error));
    assert_ok(hurray_buffer_list_push(skewed, b, error));
  }
  assert_status(HURRAY_ERR_BUFFER_ALIGNMENT, hurray_validate_buffer_placement(d, skewed, error));
  hurray_buffer_list_destroy(skewed);

  /* One buffer on another device: colocation broken. */
  HurrayBuffer *scales = hurray_buffer_list_get_mutable(list, 1);
  assert_ok(hurray_buffer_set_device(scales, HURRAY_DEVICE_CUDA, 0, HURRAY_MEMORY_DEVICE, error));
  assert_status(HURRAY_ERR_DEVICE_MISMATCH, hurray_validate_buffer_placement(d, list, error));
  assert_ok(hurray_buffer_set_device(scales, HURRAY_DEVICE_CPU, 1, HURRAY_MEMORY_HOST, error));
  assert_status(HURRAY_ERR_DEVICE_MISMATCH, hurray_validate_buffer_placement(d, list, error));
  assert_ok(
      hurray_buffer_set_device(scales, HURRAY_DEVICE_CPU, 0, HURRAY_MEMORY_HOST_PINNED, error));
  assert_status(HURRAY_ERR_DEVICE_MISMATCH, hurray_validate_buffer_placement(d, list, error));
  assert_ok(hurray_buffer_set_device(scales, HURRAY_DEVICE_CPU, 0, HURRAY_MEMORY_HOST, error));
  assert_ok(hurray_validate_buffer_placement(d, list, error));

  /* The handle says EVENT, the table says READY. */
  int event = 0;
  assert_ok(hurray_buffer_set_sync(scales, HURRAY_SYNC_EVENT, &event, error));
  assert_status(HURRAY_ERR_SYNC_MODE_MISMATCH, hurray_validate_buffer_placement(d, list, error));
  hurray_buffer_list_destroy(list);

  /* An invalid descriptor fails with its own rule's code. */
  list = list_for(d, 0);
  assert_ok(hurray_descriptor_set_quant_per_channel_affine(d, 9, 1, HURRAY_DTYPE_FLOAT32, error));
  assert_status(HURRAY_ERR_QUANT_AXIS, hurray_validate_buffer_placement(d, list, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_validate_buffer_placement(d, NULL, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void write_le(uint8_t *p, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void test_placement_page_table(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("paged_kv_cache"); /* 8 pages, 2 x 3 int32 entries */
  HurrayBufferList *list = list_for(d, 0);
  uint8_t *table = hurray_buffer_data(hurray_buffer_list_get(list, 1));
  for (int i = 0; i < 6; i++) write_le(table + 4 * i, (uint64_t)(7 - i), 4);
  assert_ok(hurray_validate_buffer_placement(d, list, error));
  write_le(table + 4 * 5, 8, 4); /* one past the pool */
  assert_status(HURRAY_ERR_PAGE_TABLE_ENTRY, hurray_validate_buffer_placement(d, list, error));
  write_le(table + 4 * 5, (uint32_t)-1, 4); /* negative */
  assert_status(HURRAY_ERR_PAGE_TABLE_ENTRY, hurray_validate_buffer_placement(d, list, error));
  hurray_buffer_list_destroy(list);

  /* int64 entries are read as int64. */
  HurrayDescriptor *wide = NULL;
  assert_ok(hurray_descriptor_clone(d, &wide, error));
  assert_ok(hurray_descriptor_set_buffer_size(wide, 1, 48, error));
  assert_ok(hurray_descriptor_set_layout_paged(wide, 1, 16, 8, HURRAY_DTYPE_INT64, 0, 1, error));
  list = list_for(wide, 0);
  table = hurray_buffer_data(hurray_buffer_list_get(list, 1));
  write_le(table + 8 * 2, (uint64_t)1 << 32, 8); /* low 32 bits 0: only int64 sees it */
  assert_status(HURRAY_ERR_PAGE_TABLE_ENTRY, hurray_validate_buffer_placement(wide, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(wide);

  /* Device memory is never read from the host. */
  assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_CUDA, 0, HURRAY_MEMORY_DEVICE, error));
  list = list_for(d, 0);
  table = hurray_buffer_data(hurray_buffer_list_get(list, 1));
  write_le(table, 1000, 4);
  for (size_t i = 0; i < hurray_buffer_list_len(list); i++) {
    assert_ok(hurray_buffer_set_device(hurray_buffer_list_get_mutable(list, i), HURRAY_DEVICE_CUDA,
                                       0, HURRAY_MEMORY_DEVICE, error));
  }
  assert_ok(hurray_validate_buffer_placement(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* Two paged members sharing one page table, each using its own prefix: a
 * short member only checks the entries it uses against its own pool. */
static void test_placement_shared_page_table(void **state) {
  (void)state;
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, (uint64_t[]){1, 64}, &d, error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_PAGE_POOL, 64, 64, HURRAY_SYNC_READY, NULL,
                                         error));
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_PAGE_TABLE, 16, 64, HURRAY_SYNC_READY,
                                         NULL, error));
  assert_ok(hurray_descriptor_set_layout_composite(d, error));
  HurrayDescriptor *small = NULL, *large = NULL;
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, (uint64_t[]){1, 16}, &small, error));
  assert_ok(hurray_descriptor_set_layout_paged(small, 1, 16, 1, HURRAY_DTYPE_INT32, 0, 1, error));
  assert_ok(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, (uint64_t[]){1, 64}, &large, error));
  assert_ok(hurray_descriptor_set_layout_paged(large, 1, 16, 4, HURRAY_DTYPE_INT32, 0, 1, error));
  assert_ok(hurray_descriptor_add_member(d, "small", small, error));
  assert_ok(hurray_descriptor_add_member(d, "large", large, error));
  HurrayBufferList *list = list_for(d, 0);
  uint8_t *table = hurray_buffer_data(hurray_buffer_list_get(list, 1));
  for (int i = 0; i < 4; i++) write_le(table + 4 * i, (uint64_t)(i == 0 ? 0 : 4 - i), 4);
  assert_ok(hurray_validate_buffer_placement(d, list, error));
  write_le(table, 1, 4); /* page 1 is outside the small member's 1-page pool */
  assert_status(HURRAY_ERR_PAGE_TABLE_ENTRY, hurray_validate_buffer_placement(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* Composite members resolve into the parent's table. */
static void test_placement_composite(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("composite_lora");
  HurrayBufferList *list = list_for(d, 8);
  assert_ok(hurray_validate_buffer_placement(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_abi_version),
      cmocka_unit_test(test_destroy_releases_once),
      cmocka_unit_test(test_list_releases_each_once),
      cmocka_unit_test(test_create_failure_releases),
      cmocka_unit_test(test_push_failure_releases),
      cmocka_unit_test(test_error_midway),
      cmocka_unit_test(test_handle_setters),
      cmocka_unit_test(test_placement_accepts_every_golden_host_vector),
      cmocka_unit_test(test_placement_count),
      cmocka_unit_test(test_placement_size_alignment_device_sync),
      cmocka_unit_test(test_placement_page_table),
      cmocka_unit_test(test_placement_shared_page_table),
      cmocka_unit_test(test_placement_composite),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
