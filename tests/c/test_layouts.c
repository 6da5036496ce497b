/*
 * Layout contents and what is computed from them: the sparse and paged
 * content rules of hurray_validate_buffer_placement (one negative case per
 * rule, with the exact code, plus a positive case per format),
 * hurray_tensor_to_dense for every layout against dense tensors written out
 * by hand, hurray_compute_statistics, the writer's statistics option, and
 * hurray_descriptor_find_member.
 *
 * Buffers are allocated exactly as large as the table declares, so that a
 * sanitizer build catches any read past what the descriptor places there.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scratch_dir.h"
#include "test_util.h"
#include "vectors.h"

#define MAX_TEST_BUFFERS 16

static int setup(void **state) {
  (void)state;
  return scratch_dir_create("layouts");
}

/* ---------------------------------------------------------------- helpers */

static HurrayDescriptor *new_desc(HurrayDType dtype, uint32_t rank, const uint64_t *shape) {
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_descriptor_create(dtype, rank, shape, &d, error));
  return d;
}

static uint32_t add_buf(HurrayDescriptor *d, HurrayBufferRole role, uint64_t size) {
  uint32_t index = 0;
  assert_ok(hurray_descriptor_add_buffer(d, role, size, 64, HURRAY_SYNC_READY, &index, error));
  return index;
}

/* One zeroed, 64-byte aligned host buffer per table entry, exactly the
 * declared size; mem[i] receives buffer i's memory. With `fill`, the index
 * buffers get valid contents from golden_vector_fill_indices. Handles take
 * the table's sync mode. */
static HurrayBufferList *buffers_for(const HurrayDescriptor *d, uint8_t **mem, bool fill) {
  HurrayBufferList *list = NULL;
  assert_ok(hurray_buffer_list_create(&list, error));
  assert_true(hurray_descriptor_buffer_count(d) <= MAX_TEST_BUFFERS);
  static int sync_handle;
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t size = hurray_descriptor_buffer_size(d, i);
    void *p = NULL;
    assert_int_equal(posix_memalign(&p, 64, size ? (size_t)size : 1), 0);
    memset(p, 0, size ? (size_t)size : 1);
    mem[i] = p;
    HurrayBuffer *b = NULL;
    assert_ok(hurray_buffer_create(p, size, free_release, NULL, &b, error));
    HurraySyncMode mode = hurray_descriptor_buffer_sync_mode(d, i);
    if (mode != HURRAY_SYNC_READY) {
      assert_ok(hurray_buffer_set_sync(b, mode, &sync_handle, error));
    }
    assert_ok(hurray_buffer_list_push(list, b, error));
  }
  if (fill) golden_vector_fill_indices(d, mem);
  return list;
}

/* Little-endian int32 / int64 index entries. */
static void put_index(uint8_t *base, bool wide, uint64_t i, int64_t v) {
  golden_vector_put_index(base, wide ? HURRAY_DTYPE_INT64 : HURRAY_DTYPE_INT32, i, (uint64_t)v);
}

static void put_indices(uint8_t *base, bool wide, const int64_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) put_index(base, wide, i, v[i]);
}

static bool wide_of(const HurrayDescriptor *d) {
  return hurray_descriptor_index_dtype(d) == HURRAY_DTYPE_INT64;
}

static uint64_t dtype_bytes(HurrayDType t, uint64_t n) {
  uint64_t out = 0;
  assert_int_equal(hurray_dtype_storage_bytes(t, n, &out), HURRAY_OK);
  return out;
}

/* A 2-D COO tensor: buffer 0 values, 1 row indices, 2 column indices. */
static HurrayDescriptor *coo2(HurrayDType dtype, HurrayDType index_dtype, uint64_t rows,
                              uint64_t cols, uint64_t nnz, bool canonical) {
  HurrayDescriptor *d = new_desc(dtype, 2, (uint64_t[]){rows, cols});
  uint64_t isz = index_dtype == HURRAY_DTYPE_INT64 ? 8 : 4;
  add_buf(d, HURRAY_ROLE_VALUES, dtype_bytes(dtype, nnz));
  add_buf(d, HURRAY_ROLE_INDICES, nnz * isz);
  add_buf(d, HURRAY_ROLE_INDICES, nnz * isz);
  assert_ok(hurray_descriptor_set_layout_coo(d, index_dtype, nnz, 0, (uint32_t[]){1, 2}, canonical,
                                             error));
  return d;
}

/* CSR or CSC: buffer 0 values, 1 indptr, 2 indices. */
static HurrayDescriptor *compressed(HurraySparseFormat format, HurrayDType dtype,
                                    HurrayDType index_dtype, uint64_t rows, uint64_t cols,
                                    uint64_t nnz) {
  HurrayDescriptor *d = new_desc(dtype, 2, (uint64_t[]){rows, cols});
  uint64_t isz = index_dtype == HURRAY_DTYPE_INT64 ? 8 : 4;
  uint64_t major = format == HURRAY_SPARSE_CSC ? cols : rows;
  add_buf(d, HURRAY_ROLE_VALUES, dtype_bytes(dtype, nnz));
  add_buf(d, HURRAY_ROLE_INDPTR, (major + 1) * isz);
  add_buf(d, HURRAY_ROLE_INDICES, nnz * isz);
  assert_ok(hurray_descriptor_set_layout_compressed(d, format, index_dtype, nnz, 0, 1, 2, error));
  return d;
}

/* BSR: buffer 0 values, 1 indptr, 2 indices; nnz counts blocks. */
static HurrayDescriptor *bsr(HurrayDType dtype, HurrayDType index_dtype, uint64_t rows,
                             uint64_t cols, uint64_t br, uint64_t bc, uint64_t nnz) {
  HurrayDescriptor *d = new_desc(dtype, 2, (uint64_t[]){rows, cols});
  uint64_t isz = index_dtype == HURRAY_DTYPE_INT64 ? 8 : 4;
  add_buf(d, HURRAY_ROLE_VALUES, dtype_bytes(dtype, nnz * br * bc));
  add_buf(d, HURRAY_ROLE_INDPTR, (rows / br + 1) * isz);
  add_buf(d, HURRAY_ROLE_INDICES, nnz * isz);
  assert_ok(hurray_descriptor_set_layout_bsr(d, index_dtype, nnz, br, bc, 0, 1, 2, error));
  return d;
}

/* int8 [2, 5] paged along axis 1 in pages of 2: 4 pool pages, a 2 x 3
 * page table. The pool starts `byte_offset` bytes into its buffer. */
static HurrayDescriptor *small_paged(HurrayDType table_dtype, uint64_t byte_offset) {
  HurrayDescriptor *d = new_desc(HURRAY_DTYPE_INT8, 2, (uint64_t[]){2, 5});
  add_buf(d, HURRAY_ROLE_PAGE_POOL, 4 * 2 + byte_offset);
  add_buf(d, HURRAY_ROLE_PAGE_TABLE, 6 * (table_dtype == HURRAY_DTYPE_INT64 ? 8 : 4));
  assert_ok(hurray_descriptor_set_layout_paged(d, 1, 2, 4, table_dtype, 0, 1, error));
  hurray_descriptor_set_byte_offset(d, byte_offset);
  return d;
}

static HurrayStatus place(const HurrayDescriptor *d, const HurrayBufferList *list,
                          HurrayError *error) {
  return hurray_validate_buffer_placement(d, list, error);
}

/* ============================================ placement: sparse contents */

static void test_coo_positive(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* The golden COO: [4, 5, 6], int64, 3 canonical entries. */
  HurrayDescriptor *d = golden_vector_build("sparse_coo");
  HurrayBufferList *list = buffers_for(d, mem, true);
  assert_ok(place(d, list, error));
  /* Lexicographic, not per-dimension: later dimensions may go down. */
  put_indices(mem[1], true, (int64_t[]){0, 1, 3}, 3);
  put_indices(mem[2], true, (int64_t[]){4, 0, 4}, 3);
  put_indices(mem[3], true, (int64_t[]){5, 0, 5}, 3);
  assert_ok(place(d, list, error));
  /* The largest coordinate of every dimension is inside the shape. */
  put_indices(mem[1], true, (int64_t[]){0, 0, 3}, 3);
  put_indices(mem[2], true, (int64_t[]){0, 0, 4}, 3);
  put_indices(mem[3], true, (int64_t[]){0, 1, 5}, 3);
  assert_ok(place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* int32 coordinates, no entries at all. */
  d = coo2(HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT32, 3, 4, 0, true);
  list = buffers_for(d, mem, false);
  assert_ok(place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_coo_index_bounds(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDescriptor *d = golden_vector_build("sparse_coo"); /* [4, 5, 6] */
  HurrayBufferList *list = buffers_for(d, mem, true);
  /* Each dimension is checked against its own extent. */
  put_index(mem[1], true, 2, 4);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  put_index(mem[1], true, 2, 0);
  put_index(mem[2], true, 2, 5);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  put_index(mem[2], true, 2, 0);
  put_index(mem[3], true, 2, 6);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  put_index(mem[3], true, 2, 5); /* (0, 0, 5): in range and still sorted */
  assert_ok(place(d, list, error));
  /* Negative and huge coordinates. */
  put_index(mem[3], true, 0, -1);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  put_index(mem[3], true, 0, (int64_t)1 << 40);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* A non-canonical COO promises no order, but its bounds still hold;
   * int32 entries are read as int32 (0xFFFFFFFF is -1). */
  d = coo2(HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT32, 3, 4, 2, false);
  list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){2, 0}, 2);
  put_indices(mem[2], false, (int64_t[]){3, 0}, 2);
  assert_ok(place(d, list, error));
  put_index(mem[2], false, 1, 0xFFFFFFFFll);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  put_index(mem[2], false, 1, 4);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_coo_order(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDescriptor *d = golden_vector_build("sparse_coo"); /* canonical, [4, 5, 6] */
  HurrayBufferList *list = buffers_for(d, mem, true);
  /* Out of order in the last dimension. */
  put_indices(mem[3], true, (int64_t[]){1, 0, 2}, 3);
  assert_status(HURRAY_ERR_SPARSE_ORDER, place(d, list, error));
  /* A duplicate. */
  put_indices(mem[3], true, (int64_t[]){1, 1, 2}, 3);
  assert_status(HURRAY_ERR_SPARSE_ORDER, place(d, list, error));
  /* The first dimension goes down while the others go up. */
  put_indices(mem[1], true, (int64_t[]){1, 0, 2}, 3);
  put_indices(mem[2], true, (int64_t[]){0, 1, 2}, 3);
  put_indices(mem[3], true, (int64_t[]){0, 1, 2}, 3);
  assert_status(HURRAY_ERR_SPARSE_ORDER, place(d, list, error));
  /* A duplicate at the end, after sorted entries. */
  put_indices(mem[1], true, (int64_t[]){0, 3, 3}, 3);
  put_indices(mem[2], true, (int64_t[]){0, 4, 4}, 3);
  put_indices(mem[3], true, (int64_t[]){0, 5, 5}, 3);
  assert_status(HURRAY_ERR_SPARSE_ORDER, place(d, list, error));
  hurray_buffer_list_destroy(list);

  /* The same contents under a non-canonical layout are fine. */
  HurrayDescriptor *loose = NULL;
  assert_ok(hurray_descriptor_clone(d, &loose, error));
  assert_ok(hurray_descriptor_set_layout_coo(loose, HURRAY_DTYPE_INT64, 3, 0,
                                             (uint32_t[]){1, 2, 3}, false, error));
  list = buffers_for(loose, mem, false);
  put_indices(mem[1], true, (int64_t[]){1, 0, 1}, 3);
  put_indices(mem[2], true, (int64_t[]){0, 1, 0}, 3);
  put_indices(mem[3], true, (int64_t[]){0, 1, 0}, 3);
  assert_ok(place(loose, list, error));
  assert_false(hurray_descriptor_sparse_canonical(loose));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(loose);
  hurray_descriptor_destroy(d);

  /* int32 canonical COO: order is read from int32 entries. */
  d = coo2(HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT32, 3, 4, 3, true);
  list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){0, 0, 2}, 3);
  put_indices(mem[2], false, (int64_t[]){1, 3, 0}, 3);
  assert_ok(place(d, list, error));
  put_indices(mem[2], false, (int64_t[]){3, 1, 0}, 3);
  assert_status(HURRAY_ERR_SPARSE_ORDER, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* indptr cases for a compressed tensor with `n` pointers and nnz. */
static void check_indptr_rules(const char *vector, const int64_t *good, const int64_t *bad_start,
                               const int64_t *decreasing, const int64_t *short_end,
                               const int64_t *long_end, size_t n) {
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDescriptor *d = golden_vector_build(vector);
  bool wide = wide_of(d);
  HurrayBufferList *list = buffers_for(d, mem, true);
  assert_ok(place(d, list, error)); /* the filled pointers */
  put_indices(mem[1], wide, good, n);
  assert_ok(place(d, list, error));
  put_indices(mem[1], wide, bad_start, n);
  assert_status(HURRAY_ERR_SPARSE_INDPTR, place(d, list, error));
  put_indices(mem[1], wide, decreasing, n);
  assert_status(HURRAY_ERR_SPARSE_INDPTR, place(d, list, error));
  put_indices(mem[1], wide, short_end, n);
  assert_status(HURRAY_ERR_SPARSE_INDPTR, place(d, list, error));
  put_indices(mem[1], wide, long_end, n);
  assert_status(HURRAY_ERR_SPARSE_INDPTR, place(d, list, error));
  /* A negative first pointer. */
  put_indices(mem[1], wide, good, n);
  put_index(mem[1], wide, 0, -1);
  assert_status(HURRAY_ERR_SPARSE_INDPTR, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_csr_indptr(void **state) {
  (void)state;
  /* 3 x 4, nnz 5, int32: 4 pointers. Empty rows are fine. */
  check_indptr_rules("sparse_csr", (int64_t[]){0, 0, 5, 5}, (int64_t[]){1, 1, 3, 5},
                     (int64_t[]){0, 4, 2, 5}, (int64_t[]){0, 1, 3, 4}, (int64_t[]){0, 1, 3, 6}, 4);
}

static void test_csc_indptr(void **state) {
  (void)state;
  /* 3 x 4, nnz 5, int32: one pointer per column, 5. */
  check_indptr_rules("sparse_csc", (int64_t[]){0, 2, 2, 2, 5}, (int64_t[]){2, 2, 3, 4, 5},
                     (int64_t[]){0, 3, 2, 4, 5}, (int64_t[]){0, 1, 2, 3, 4},
                     (int64_t[]){0, 1, 2, 3, 7}, 5);
}

static void test_bsr_indptr(void **state) {
  (void)state;
  /* 4 x 6 in 2 x 3 blocks, 3 blocks, int64: one pointer per block row, 3. */
  check_indptr_rules("sparse_bsr", (int64_t[]){0, 3, 3}, (int64_t[]){1, 1, 3},
                     (int64_t[]){0, 4, 3}, (int64_t[]){0, 1, 2}, (int64_t[]){0, 1, 4}, 3);
}

static void test_compressed_index_bounds(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* CSR 3 x 4: column indices below 4. Unsorted and repeated columns
   * within a row are allowed. */
  HurrayDescriptor *d = golden_vector_build("sparse_csr");
  HurrayBufferList *list = buffers_for(d, mem, true);
  put_indices(mem[1], false, (int64_t[]){0, 2, 2, 5}, 4);
  put_indices(mem[2], false, (int64_t[]){3, 0, 1, 3, 1}, 5);
  assert_ok(place(d, list, error));
  put_index(mem[2], false, 4, 4);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  put_index(mem[2], false, 4, -1);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* CSC 3 x 4: row indices below 3 (not 4). */
  d = golden_vector_build("sparse_csc");
  list = buffers_for(d, mem, true);
  put_index(mem[2], false, 0, 2);
  assert_ok(place(d, list, error));
  put_index(mem[2], false, 0, 3);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* BSR 4 x 6 in 2 x 3 blocks: block column indices below 2 (not 6). */
  d = golden_vector_build("sparse_bsr");
  list = buffers_for(d, mem, true);
  put_indices(mem[1], true, (int64_t[]){0, 1, 3}, 3);
  put_indices(mem[2], true, (int64_t[]){1, 0, 1}, 3);
  assert_ok(place(d, list, error));
  put_index(mem[2], true, 2, 2);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  /* int64 indices are read as int64: the low 32 bits alone are 1. */
  put_index(mem[2], true, 2, ((int64_t)1 << 32) + 1);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_positive_every_format(void **state) {
  (void)state;
  const char *names[] = {"sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "paged_kv_cache"};
  uint8_t *mem[MAX_TEST_BUFFERS];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    HurrayDescriptor *d = golden_vector_build(names[i]);
    HurrayBufferList *list = buffers_for(d, mem, true);
    assert_ok(place(d, list, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  /* Hand-built ones, int32 and int64, with empty major slices. */
  HurrayDescriptor *d = compressed(HURRAY_SPARSE_CSR, HURRAY_DTYPE_INT8, HURRAY_DTYPE_INT64, 4, 3,
                                   2);
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[1], true, (int64_t[]){0, 0, 0, 2, 2}, 5);
  put_indices(mem[2], true, (int64_t[]){2, 0}, 2);
  assert_ok(place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  /* All empty: zero pointers everywhere, nnz 0. */
  d = compressed(HURRAY_SPARSE_CSC, HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT32, 4, 3, 0);
  list = buffers_for(d, mem, false);
  assert_ok(place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* ============================================= placement: paged contents */

static void test_page_table_entry(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDType dtypes[] = {HURRAY_DTYPE_INT32, HURRAY_DTYPE_INT64};
  for (int k = 0; k < 2; k++) {
    bool wide = dtypes[k] == HURRAY_DTYPE_INT64;
    HurrayDescriptor *d = small_paged(dtypes[k], 0);
    HurrayBufferList *list = buffers_for(d, mem, false);
    put_indices(mem[1], wide, (int64_t[]){3, 0, 2, 1, 1, 0}, 6);
    assert_ok(place(d, list, error));
    put_index(mem[1], wide, 5, 4); /* one past the 4-page pool */
    assert_status(HURRAY_ERR_PAGE_TABLE_ENTRY, place(d, list, error));
    put_index(mem[1], wide, 5, -1);
    assert_status(HURRAY_ERR_PAGE_TABLE_ENTRY, place(d, list, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
}

/* ================================ placement: what is (not) read, and where */

static void test_contents_read_only_when_ready_on_host(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* A CSR whose indices buffer is EVENT-synchronised: not yet readable, so
   * not read. Its READY indptr still is. */
  HurrayDescriptor *d = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){2, 3});
  add_buf(d, HURRAY_ROLE_VALUES, 2 * 4);
  add_buf(d, HURRAY_ROLE_INDPTR, 3 * 4);
  assert_ok(hurray_descriptor_add_buffer(d, HURRAY_ROLE_INDICES, 2 * 4, 64, HURRAY_SYNC_EVENT,
                                         NULL, error));
  assert_ok(hurray_descriptor_set_layout_compressed(d, HURRAY_SPARSE_CSR, HURRAY_DTYPE_INT32, 2, 0,
                                                    1, 2, error));
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){0, 1, 2}, 3);
  put_indices(mem[2], false, (int64_t[]){99, -7}, 2);
  assert_ok(place(d, list, error));
  put_indices(mem[1], false, (int64_t[]){0, 2, 1}, 3);
  assert_status(HURRAY_ERR_SPARSE_INDPTR, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Device memory is never read from the host; to_dense and statistics
   * refuse it. */
  d = golden_vector_build("sparse_csr");
  assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_CUDA, 0, HURRAY_MEMORY_DEVICE, error));
  list = buffers_for(d, mem, false);
  for (size_t i = 0; i < hurray_buffer_list_len(list); i++) {
    assert_ok(hurray_buffer_set_device(hurray_buffer_list_get_mutable(list, i), HURRAY_DEVICE_CUDA,
                                       0, HURRAY_MEMORY_DEVICE, error));
  }
  put_indices(mem[1], false, (int64_t[]){7, 1, 0, 9}, 4);
  put_index(mem[2], false, 0, 1000);
  assert_ok(place(d, list, error));
  double out[12];
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_tensor_to_dense(d, list, out, sizeof out, error));
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_compute_statistics(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Managed memory is host-addressable: read, and checked. */
  d = golden_vector_build("sparse_csr");
  assert_ok(hurray_descriptor_set_device(d, HURRAY_DEVICE_CUDA_MANAGED, 0, HURRAY_MEMORY_MANAGED,
                                         error));
  list = buffers_for(d, mem, true);
  for (size_t i = 0; i < hurray_buffer_list_len(list); i++) {
    assert_ok(hurray_buffer_set_device(hurray_buffer_list_get_mutable(list, i),
                                       HURRAY_DEVICE_CUDA_MANAGED, 0, HURRAY_MEMORY_MANAGED,
                                       error));
  }
  assert_ok(place(d, list, error));
  put_index(mem[2], false, 0, 4);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* A composite with a dense member and a CSR member: the member's contents
 * are checked through the parent's table. */
static HurrayDescriptor *composite_with_csr(void) {
  HurrayDescriptor *d = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){3, 4});
  add_buf(d, HURRAY_ROLE_DATA, 12 * 4);   /* 0: dense member */
  add_buf(d, HURRAY_ROLE_VALUES, 2 * 4);  /* 1 */
  add_buf(d, HURRAY_ROLE_INDPTR, 4 * 4);  /* 2 */
  add_buf(d, HURRAY_ROLE_INDICES, 2 * 4); /* 3 */
  assert_ok(hurray_descriptor_set_layout_composite(d, error));
  HurrayDescriptor *dense = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){3, 4});
  assert_ok(hurray_descriptor_set_layout_dense(dense, 0, error));
  assert_ok(hurray_descriptor_add_member(d, "dense", dense, error));
  HurrayDescriptor *sparse = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){3, 4});
  assert_ok(hurray_descriptor_set_layout_compressed(sparse, HURRAY_SPARSE_CSR, HURRAY_DTYPE_INT32,
                                                    2, 1, 2, 3, error));
  assert_ok(hurray_descriptor_add_member(d, "delta", sparse, error));
  return d;
}

static void test_composite_member_contents(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDescriptor *d = composite_with_csr();
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[2], false, (int64_t[]){0, 1, 1, 2}, 4);
  put_indices(mem[3], false, (int64_t[]){3, 0}, 2);
  assert_ok(place(d, list, error));
  put_index(mem[3], false, 1, 4);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS, place(d, list, error));
  put_index(mem[3], false, 1, 0);
  put_index(mem[2], false, 3, 1);
  assert_status(HURRAY_ERR_SPARSE_INDPTR, place(d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* ================================================================ to_dense */

static void test_to_dense_coo(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* float32 3 x 4, int64, not canonical, (0, 1) stored twice: the two sum. */
  HurrayDescriptor *d = coo2(HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT64, 3, 4, 4, false);
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[1], true, (int64_t[]){0, 2, 0, 1}, 4);
  put_indices(mem[2], true, (int64_t[]){1, 3, 1, 0}, 4);
  memcpy(mem[0], (float[]){1.5f, 2.0f, 0.25f, -1.0f}, 16);
  float out[12];
  memset(out, 0xAB, sizeof out); /* unstored positions must be written as zeros */
  assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
  const float want[12] = {0, 1.75f, 0, 0, -1.0f, 0, 0, 0, 0, 0, 0, 2.0f};
  assert_memory_equal(out, want, sizeof want);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* The golden canonical 3-D COO: entries (0,0,0), (0,0,1), (0,0,2). */
  d = golden_vector_build("sparse_coo");
  list = buffers_for(d, mem, true);
  put_indices(mem[1], true, (int64_t[]){0, 1, 3}, 3);
  put_indices(mem[2], true, (int64_t[]){0, 2, 4}, 3);
  put_indices(mem[3], true, (int64_t[]){5, 0, 5}, 3);
  memcpy(mem[0], (float[]){1.0f, 2.0f, 3.0f}, 12);
  float *big = malloc(4 * 5 * 6 * sizeof *big);
  assert_ok(hurray_tensor_to_dense(d, list, big, 4 * 5 * 6 * sizeof *big, error));
  for (int i = 0; i < 120; i++) {
    float expect = i == 5 ? 1.0f : i == 30 + 12 ? 2.0f : i == 90 + 24 + 5 ? 3.0f : 0.0f;
    assert_true(big[i] == expect);
  }
  free(big);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* uint8 duplicates sum modulo 256; complex64 sums both parts. */
  d = coo2(HURRAY_DTYPE_UINT8, HURRAY_DTYPE_INT32, 2, 2, 3, false);
  list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){1, 1, 0}, 3);
  put_indices(mem[2], false, (int64_t[]){1, 1, 0}, 3);
  memcpy(mem[0], (uint8_t[]){200, 100, 7}, 3);
  uint8_t bytes[4];
  assert_ok(hurray_tensor_to_dense(d, list, bytes, sizeof bytes, error));
  assert_memory_equal(bytes, ((uint8_t[]){7, 0, 0, 44}), 4);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  d = coo2(HURRAY_DTYPE_COMPLEX64, HURRAY_DTYPE_INT32, 1, 2, 2, false);
  list = buffers_for(d, mem, false);
  put_indices(mem[2], false, (int64_t[]){1, 1}, 2);
  memcpy(mem[0], (float[]){1.0f, -2.0f, 0.5f, 4.0f}, 16);
  float cplx[4];
  assert_ok(hurray_tensor_to_dense(d, list, cplx, sizeof cplx, error));
  assert_memory_equal(cplx, ((float[]){0, 0, 1.5f, 2.0f}), sizeof cplx);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_to_dense_coo_half_duplicates(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDType types[] = {HURRAY_DTYPE_FLOAT16, HURRAY_DTYPE_BFLOAT16};
  for (int k = 0; k < 2; k++) {
    /* Without duplicates the stored bits are placed as they are. */
    HurrayDescriptor *d = coo2(types[k], HURRAY_DTYPE_INT32, 2, 2, 2, false);
    HurrayBufferList *list = buffers_for(d, mem, false);
    put_indices(mem[1], false, (int64_t[]){1, 0}, 2);
    put_indices(mem[2], false, (int64_t[]){0, 1}, 2);
    memcpy(mem[0], (uint16_t[]){0x3C00, 0xB800}, 4);
    uint16_t out[4];
    assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
    assert_memory_equal(out, ((uint16_t[]){0, 0xB800, 0x3C00, 0}), sizeof out);
    /* With one, there is no C sum for it. */
    put_indices(mem[1], false, (int64_t[]){1, 1}, 2);
    put_indices(mem[2], false, (int64_t[]){0, 0}, 2);
    assert_status(HURRAY_ERR_UNSUPPORTED, hurray_tensor_to_dense(d, list, out, sizeof out, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  /* bool has no sum either. */
  HurrayDescriptor *d = coo2(HURRAY_DTYPE_BOOL, HURRAY_DTYPE_INT32, 1, 2, 2, false);
  HurrayBufferList *list = buffers_for(d, mem, false);
  memcpy(mem[0], (uint8_t[]){1, 1}, 2);
  uint8_t b[2];
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_tensor_to_dense(d, list, b, 2, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_to_dense_csr(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* float64 3 x 4: row 0 (0,3)=1 (0,0)=2; row 1 empty; row 2 (2,1)=3
   * (2,3)=4 (2,1)=5, the repeated column summing to 8. */
  HurrayDescriptor *d = compressed(HURRAY_SPARSE_CSR, HURRAY_DTYPE_FLOAT64, HURRAY_DTYPE_INT32, 3,
                                   4, 5);
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){0, 2, 2, 5}, 4);
  put_indices(mem[2], false, (int64_t[]){3, 0, 1, 3, 1}, 5);
  memcpy(mem[0], (double[]){1, 2, 3, 4, 5}, 40);
  double out[12];
  memset(out, 0xAB, sizeof out);
  assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
  const double want[12] = {2, 0, 0, 1, 0, 0, 0, 0, 0, 8, 0, 4};
  assert_memory_equal(out, want, sizeof want);
  /* One byte short. */
  assert_status(HURRAY_ERR_BUFFER_SIZE,
                hurray_tensor_to_dense(d, list, out, sizeof out - 1, error));
  /* Bad contents are reported by to_dense with their placement code. */
  put_index(mem[2], false, 0, 4);
  assert_status(HURRAY_ERR_SPARSE_INDEX_BOUNDS,
                hurray_tensor_to_dense(d, list, out, sizeof out, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_to_dense_csc(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* float32 3 x 4, int64: column 0 (2,0)=1; column 1 empty; column 2
   * (0,2)=2 (1,2)=3; column 3 (2,3)=4. */
  HurrayDescriptor *d = compressed(HURRAY_SPARSE_CSC, HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT64, 3,
                                   4, 4);
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[1], true, (int64_t[]){0, 1, 1, 3, 4}, 5);
  put_indices(mem[2], true, (int64_t[]){2, 0, 1, 2}, 4);
  memcpy(mem[0], (float[]){1, 2, 3, 4}, 16);
  float out[12];
  memset(out, 0xAB, sizeof out);
  assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
  const float want[12] = {0, 0, 2, 0, 0, 0, 3, 0, 1, 0, 0, 4};
  assert_memory_equal(out, want, sizeof want);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_to_dense_bsr(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* float32 4 x 6 in 2 x 3 blocks: block row 0 holds block column 1;
   * block row 1 holds block columns 0 and 1. */
  HurrayDescriptor *d = bsr(HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT32, 4, 6, 2, 3, 3);
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){0, 1, 3}, 3);
  put_indices(mem[2], false, (int64_t[]){1, 0, 1}, 3);
  memcpy(mem[0], (float[]){1, 2, 3, 4, 5, 6, 11, 12, 13, 14, 15, 16, 21, 22, 23, 24, 25, 26}, 72);
  float out[24];
  memset(out, 0xAB, sizeof out);
  assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
  const float want[24] = {0,  0,  0,  1,  2,  3,   /* row 0 */
                          0,  0,  0,  4,  5,  6,   /* row 1 */
                          11, 12, 13, 21, 22, 23,  /* row 2 */
                          14, 15, 16, 24, 25, 26}; /* row 3 */
  assert_memory_equal(out, want, sizeof want);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* The golden float16 BSR: stored bits placed as they are. */
  d = golden_vector_build("sparse_bsr");
  list = buffers_for(d, mem, false);
  for (int i = 0; i < 18; i++) memcpy(mem[0] + 2 * i, &(uint16_t){(uint16_t)(0x3C00 + i)}, 2);
  uint16_t halves[24];
  /* Block column 0 of block row 1 is stored twice: float16 has no sum. */
  put_indices(mem[1], true, (int64_t[]){0, 1, 3}, 3);
  put_indices(mem[2], true, (int64_t[]){1, 0, 0}, 3);
  assert_status(HURRAY_ERR_UNSUPPORTED,
                hurray_tensor_to_dense(d, list, halves, sizeof halves, error));
  /* Block row 0: block 0 at block column 0; block row 1: blocks 1 and 2. */
  put_indices(mem[2], true, (int64_t[]){0, 0, 1}, 3);
  assert_ok(hurray_tensor_to_dense(d, list, halves, sizeof halves, error));
  for (int r = 0; r < 4; r++) {
    for (int c = 0; c < 6; c++) {
      int block = r < 2 ? (c < 3 ? 0 : -1) : (c < 3 ? 1 : 2);
      uint16_t expect = block < 0 ? 0 : (uint16_t)(0x3C00 + block * 6 + (r % 2) * 3 + c % 3);
      assert_int_equal(halves[r * 6 + c], expect);
    }
  }
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_to_dense_paged(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* int8 [2, 5] in pages of 2 along axis 1; pool pages 10 11 | 20 21 |
   * 30 31 | 40 41, starting 3 bytes into the pool buffer. Table rows
   * [3, 0, 2] and [1, 1, 0]; the last page of each row is half used. */
  HurrayDescriptor *d = small_paged(HURRAY_DTYPE_INT32, 3);
  HurrayBufferList *list = buffers_for(d, mem, false);
  memcpy(mem[0], (int8_t[]){-1, -1, -1, 10, 11, 20, 21, 30, 31, 40, 41}, 11);
  put_indices(mem[1], false, (int64_t[]){3, 0, 2, 1, 1, 0}, 6);
  int8_t out[10];
  assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
  assert_memory_equal(out, ((int8_t[]){40, 41, 10, 11, 30, 20, 21, 20, 21, 10}), 10);
  assert_status(HURRAY_ERR_BUFFER_SIZE, hurray_tensor_to_dense(d, list, out, 9, error));
  put_index(mem[1], false, 4, 4);
  assert_status(HURRAY_ERR_PAGE_TABLE_ENTRY, hurray_tensor_to_dense(d, list, out, 10, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Paged along axis 0: int16 [5, 2], pages of 2 rows, 3 pages, table
   * [2, 0, 1]; pool element e of page p holds 10 p + e. */
  d = new_desc(HURRAY_DTYPE_INT16, 2, (uint64_t[]){5, 2});
  add_buf(d, HURRAY_ROLE_PAGE_POOL, 3 * 4 * 2);
  add_buf(d, HURRAY_ROLE_PAGE_TABLE, 3 * 8);
  assert_ok(hurray_descriptor_set_layout_paged(d, 0, 2, 3, HURRAY_DTYPE_INT64, 0, 1, error));
  list = buffers_for(d, mem, false);
  for (int p = 0; p < 3; p++) {
    for (int e = 0; e < 4; e++) {
      memcpy(mem[0] + 2 * (4 * p + e), &(int16_t){(int16_t)(10 * p + e)}, 2);
    }
  }
  put_indices(mem[1], true, (int64_t[]){2, 0, 1}, 3);
  int16_t rows[10];
  assert_ok(hurray_tensor_to_dense(d, list, rows, sizeof rows, error));
  assert_memory_equal(rows, ((int16_t[]){20, 21, 22, 23, 0, 1, 2, 3, 10, 11}), sizeof rows);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* The golden KV cache, bfloat16 [2 seqs, 40 tokens, 4 heads, 8 dims] in
 * 16-token pages from a pool of 8: element (s, t, h, k) is element
 * (t % 16, h, k) of pool page table[s][t / 16]. */
static void test_to_dense_paged_kv_cache(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDescriptor *d = golden_vector_build("paged_kv_cache");
  HurrayBufferList *list = buffers_for(d, mem, false);
  const uint64_t page_elems = 16 * 4 * 8, pool_elems = 8 * page_elems;
  for (uint64_t e = 0; e < pool_elems; e++) {
    uint16_t v = (uint16_t)(e * 7 + 1);
    memcpy(mem[0] + 2 * e, &v, 2);
  }
  const int64_t table[2][3] = {{5, 2, 7}, {0, 3, 6}};
  put_indices(mem[1], false, &table[0][0], 6);
  uint16_t *out = malloc(2 * 40 * 4 * 8 * sizeof *out);
  assert_ok(hurray_tensor_to_dense(d, list, out, 2 * 40 * 4 * 8 * sizeof *out, error));
  for (uint64_t s = 0; s < 2; s++) {
    for (uint64_t t = 0; t < 40; t++) {
      for (uint64_t h = 0; h < 4; h++) {
        for (uint64_t k = 0; k < 8; k++) {
          uint64_t page = (uint64_t)table[s][t / 16];
          uint64_t e = page * page_elems + (t % 16) * 32 + h * 8 + k;
          assert_int_equal(out[((s * 40 + t) * 4 + h) * 8 + k], (uint16_t)(e * 7 + 1));
        }
      }
    }
  }
  free(out);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_to_dense_strided(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* The golden transposed, reversed view: float64 [3, 2], strides {1, -3},
   * element 0 at byte 24 of a 6-double buffer holding 0..5. Element (i, j)
   * is buffer element 3 + i - 3 j. */
  HurrayDescriptor *d = golden_vector_build("dense_strided");
  HurrayBufferList *list = buffers_for(d, mem, false);
  for (int i = 0; i < 6; i++) memcpy(mem[0] + 8 * i, &(double){i}, 8);
  double out[6];
  assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
  assert_memory_equal(out, ((double[]){3, 0, 4, 1, 5, 2}), sizeof out);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Both dimensions reversed: int16 [2, 3], strides {-3, -1}, starting at
   * the last element. */
  d = new_desc(HURRAY_DTYPE_INT16, 2, (uint64_t[]){2, 3});
  add_buf(d, HURRAY_ROLE_DATA, 12);
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){-3, -1}, error));
  hurray_descriptor_set_byte_offset(d, 10);
  list = buffers_for(d, mem, false);
  for (int i = 0; i < 6; i++) memcpy(mem[0] + 2 * i, &(int16_t){(int16_t)(100 + i)}, 2);
  int16_t rev[6];
  assert_ok(hurray_tensor_to_dense(d, list, rev, sizeof rev, error));
  assert_memory_equal(rev, ((int16_t[]){105, 104, 103, 102, 101, 100}), sizeof rev);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Gaps: int8 [2, 2], strides {4, 2}, 7 bytes needed. */
  d = new_desc(HURRAY_DTYPE_INT8, 2, (uint64_t[]){2, 2});
  add_buf(d, HURRAY_ROLE_DATA, 7);
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){4, 2}, error));
  list = buffers_for(d, mem, false);
  memcpy(mem[0], (int8_t[]){0, 1, 2, 3, 4, 5, 6}, 7);
  int8_t gaps[4];
  assert_ok(hurray_tensor_to_dense(d, list, gaps, sizeof gaps, error));
  assert_memory_equal(gaps, ((int8_t[]){0, 2, 4, 6}), 4);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Zero strides broadcast: int8 [3, 2] over 2 bytes, strides {0, 1}. */
  d = new_desc(HURRAY_DTYPE_INT8, 2, (uint64_t[]){3, 2});
  add_buf(d, HURRAY_ROLE_DATA, 2);
  assert_ok(hurray_descriptor_set_strides(d, (int64_t[]){0, 1}, error));
  list = buffers_for(d, mem, false);
  memcpy(mem[0], (int8_t[]){7, -9}, 2);
  int8_t wide[6];
  assert_ok(hurray_tensor_to_dense(d, list, wide, sizeof wide, error));
  assert_memory_equal(wide, ((int8_t[]){7, -9, 7, -9, 7, -9}), 6);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Row-major dense, a rank-0 scalar and packed int4 are copied as stored. */
  const char *plain[] = {"dense_float32", "dense_scalar_bool", "dense_int4"};
  for (int k = 0; k < 3; k++) {
    d = golden_vector_build(plain[k]);
    list = buffers_for(d, mem, false);
    uint64_t size = hurray_descriptor_buffer_size(d, 0);
    for (uint64_t i = 0; i < size; i++) mem[0][i] = (uint8_t)(i * 13 + 1);
    uint8_t copy[64];
    assert_ok(hurray_tensor_to_dense(d, list, copy, size, error));
    assert_memory_equal(copy, mem[0], size);
    assert_status(HURRAY_ERR_BUFFER_SIZE, hurray_tensor_to_dense(d, list, copy, size - 1, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
}

static void test_to_dense_refusals(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* A composite has no single dense form. */
  HurrayDescriptor *d = golden_vector_build("composite_lora");
  HurrayBufferList *list = buffers_for(d, mem, false);
  float out[64];
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_tensor_to_dense(d, list, out, sizeof out, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Arguments. */
  d = golden_vector_build("dense_float32");
  list = buffers_for(d, mem, false);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_tensor_to_dense(NULL, list, out, 24, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_tensor_to_dense(d, NULL, out, 24, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_tensor_to_dense(d, list, NULL, 24, error));
  assert_status(HURRAY_ERR_BUFFER_SIZE, hurray_tensor_to_dense(d, list, out, 0, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Sub-byte values in a sparse layout: unpacked, placed, packed again. */
  d = coo2(HURRAY_DTYPE_INT4, HURRAY_DTYPE_INT32, 2, 2, 2, false);
  list = buffers_for(d, mem, false);
  mem[0][0] = 0x21; /* values 1, 2 */
  put_indices(mem[1], false, (int64_t[]){0, 1}, 2);
  put_indices(mem[2], false, (int64_t[]){0, 1}, 2);
  assert_ok(place(d, list, error));
  memset(out, 0xff, sizeof out);
  assert_ok(hurray_tensor_to_dense(d, list, out, 2, error));
  const uint8_t *packed = (const uint8_t *)out;
  assert_int_equal(packed[0], 0x01); /* [[1, 0], [0, 2]], LSB-first */
  assert_int_equal(packed[1], 0x20);
  /* ... a position stored twice sums modulo 16 (layouts.md: integer sums
   * wrap), here 1 + 2 at [1][1] ... */
  put_indices(mem[1], false, (int64_t[]){1, 1}, 2);
  put_indices(mem[2], false, (int64_t[]){1, 1}, 2);
  assert_ok(hurray_tensor_to_dense(d, list, out, 2, error));
  assert_int_equal(packed[0], 0x00);
  assert_int_equal(packed[1], 0x30);
  mem[0][0] = 0x9F; /* 15 + 9 wraps to 8 */
  assert_ok(hurray_tensor_to_dense(d, list, out, 2, error));
  assert_int_equal(packed[1], 0x80);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  /* ... and the narrow floats have no sum. */
  d = coo2(HURRAY_DTYPE_FLOAT4_E2M1FN, HURRAY_DTYPE_INT32, 2, 2, 2, false);
  list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){1, 1}, 2);
  put_indices(mem[2], false, (int64_t[]){1, 1}, 2);
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_tensor_to_dense(d, list, out, 2, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* An empty tensor needs no output at all. */
  d = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){0, 3});
  add_buf(d, HURRAY_ROLE_DATA, 0);
  list = buffers_for(d, mem, false);
  assert_ok(hurray_tensor_to_dense(d, list, NULL, 0, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  /* Nor an empty sparse one, byte-sized or sub-byte: nothing is written
   * through the NULL (memset(NULL, 0, 0) is undefined; UBSan says so). */
  static const HurrayDType empty_dtypes[] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_UINT4};
  for (size_t k = 0; k < 2; k++) {
    d = coo2(empty_dtypes[k], HURRAY_DTYPE_INT32, 0, 4, 0, false);
    list = buffers_for(d, mem, false);
    assert_ok(hurray_tensor_to_dense(d, list, NULL, 0, error));
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
}

/* ============================================================== statistics */

typedef struct Expected {
  bool has_min_max;
  double min, max;
  uint64_t nan_count, zero_count;
} Expected;

static void assert_stats(const HurrayDescriptor *d, Expected want) {
  double lo = 12345, hi = 12345;
  uint64_t nans = 12345, zeros = 12345;
  assert_true(hurray_descriptor_stat_nan_count(d, &nans));
  assert_true(hurray_descriptor_stat_zero_count(d, &zeros));
  assert_int_equal(nans, want.nan_count);
  assert_int_equal(zeros, want.zero_count);
  assert_int_equal(hurray_descriptor_stat_min(d, &lo), want.has_min_max);
  assert_int_equal(hurray_descriptor_stat_max(d, &hi), want.has_min_max);
  if (want.has_min_max) {
    assert_true(lo == want.min || (isnan(lo) && isnan(want.min)));
    assert_true(hi == want.max);
  }
  assert_ok(hurray_descriptor_validate(d, error));
}

/* A dense rank-1 tensor of `n` elements of `dtype` holding `bytes`. */
static void stats_of_dense(HurrayDType dtype, const void *bytes, uint64_t n, Expected want) {
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayDescriptor *d = new_desc(dtype, 1, (uint64_t[]){n});
  add_buf(d, HURRAY_ROLE_DATA, dtype_bytes(dtype, n));
  HurrayBufferList *list = buffers_for(d, mem, false);
  memcpy(mem[0], bytes, dtype_bytes(dtype, n));
  assert_ok(hurray_compute_statistics(d, list, error));
  assert_stats(d, want);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_statistics_float(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* float32 [2, 4] with two NaNs and three zeros (one negative), over
   * statistics already there: they are replaced. */
  HurrayDescriptor *d = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){2, 4});
  add_buf(d, HURRAY_ROLE_DATA, 32);
  hurray_descriptor_set_stat_min(d, -100);
  hurray_descriptor_set_stat_max(d, 100);
  hurray_descriptor_set_stat_zero_count(d, 8);
  HurrayBufferList *list = buffers_for(d, mem, false);
  memcpy(mem[0], (float[]){1.5f, NAN, 0.0f, -2.0f, 0.0f, -0.0f, 7.25f, NAN}, 32);
  assert_ok(hurray_compute_statistics(d, list, error));
  assert_stats(d, (Expected){true, -2.0, 7.25, 2, 3});
  /* Statistics are advisory: to_dense does not consult them. */
  float out[8];
  assert_ok(hurray_tensor_to_dense(d, list, out, sizeof out, error));
  assert_memory_equal(out, mem[0], 32);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Only NaNs: no min or max. */
  stats_of_dense(HURRAY_DTYPE_FLOAT32, (float[]){NAN, NAN, NAN}, 3, (Expected){false, 0, 0, 3, 0});
  /* Infinities are values. */
  stats_of_dense(HURRAY_DTYPE_FLOAT64, (double[]){1, -INFINITY, INFINITY, -0.0}, 4,
                 (Expected){true, -INFINITY, INFINITY, 0, 1});
  /* Only positives: min is not pulled to zero. */
  stats_of_dense(HURRAY_DTYPE_FLOAT64, (double[]){4.5, 3.25}, 2,
                 (Expected){true, 3.25, 4.5, 0, 0});
}

static void test_statistics_integers(void **state) {
  (void)state;
  stats_of_dense(HURRAY_DTYPE_INT16, (int16_t[]){-32768, 0, 32767, 5, 0, -1}, 6,
                 (Expected){true, -32768, 32767, 0, 2});
  stats_of_dense(HURRAY_DTYPE_UINT8, (uint8_t[]){255, 3, 9}, 3, (Expected){true, 3, 255, 0, 0});
  stats_of_dense(HURRAY_DTYPE_INT64, (int64_t[]){-5, INT64_MAX, 0}, 3,
                 (Expected){true, -5, (double)INT64_MAX, 0, 1});
  stats_of_dense(HURRAY_DTYPE_UINT64, (uint64_t[]){UINT64_MAX, 1}, 2,
                 (Expected){true, 1, (double)UINT64_MAX, 0, 0});
  stats_of_dense(HURRAY_DTYPE_BOOL, (uint8_t[]){1, 0, 0}, 3, (Expected){true, 0, 1, 0, 2});
}

static void test_statistics_half(void **state) {
  (void)state;
  /* bfloat16: 1.0, -2.5, +0, NaN, -0. */
  stats_of_dense(HURRAY_DTYPE_BFLOAT16, (uint16_t[]){0x3F80, 0xC020, 0x0000, 0x7FC0, 0x8000}, 5,
                 (Expected){true, -2.5, 1.0, 1, 2});
  /* bfloat16 with an exact non-power-of-two: 0x4049 is 3.140625. */
  stats_of_dense(HURRAY_DTYPE_BFLOAT16, (uint16_t[]){0x4049, 0x3F80}, 2,
                 (Expected){true, 1.0, 3.140625, 0, 0});
  /* float16: 1.0, -0.5, 65504 (largest), 2^-24 (smallest subnormal), NaN,
   * +0, -inf. */
  stats_of_dense(HURRAY_DTYPE_FLOAT16,
                 (uint16_t[]){0x3C00, 0xB800, 0x7BFF, 0x0001, 0x7E00, 0x0000, 0xFC00}, 7,
                 (Expected){true, -INFINITY, 65504.0, 1, 1});
  /* Subnormals and normals decode exactly: 0x3555 is 1365 / 4096. */
  stats_of_dense(HURRAY_DTYPE_FLOAT16, (uint16_t[]){0x3555, 0x0001, 0x03FF}, 3,
                 (Expected){true, ldexp(1.0, -24), 1365.0 / 4096.0, 0, 0});
}

static void test_statistics_sparse(void **state) {
  (void)state;
  uint8_t *mem[MAX_TEST_BUFFERS];
  /* CSR float64 3 x 4, 5 stored (one a zero, one NaN): the 7 unstored
   * elements count as zeros too. */
  HurrayDescriptor *d = compressed(HURRAY_SPARSE_CSR, HURRAY_DTYPE_FLOAT64, HURRAY_DTYPE_INT32, 3,
                                   4, 5);
  HurrayBufferList *list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){0, 2, 2, 5}, 4);
  put_indices(mem[2], false, (int64_t[]){0, 1, 0, 2, 3}, 5);
  memcpy(mem[0], (double[]){1, -3, 0, NAN, 2}, 40);
  assert_ok(hurray_compute_statistics(d, list, error));
  assert_stats(d, (Expected){true, -3, 2, 1, 8});
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* BSR float32 4 x 6, 2 blocks of 6 positives: min is an unstored zero. */
  d = bsr(HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_INT64, 4, 6, 2, 3, 2);
  list = buffers_for(d, mem, false);
  put_indices(mem[1], true, (int64_t[]){0, 1, 2}, 3);
  put_indices(mem[2], true, (int64_t[]){0, 1}, 2);
  memcpy(mem[0], (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 48);
  assert_ok(hurray_compute_statistics(d, list, error));
  assert_stats(d, (Expected){true, 0, 12, 0, 12});
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* COO storing every element: no unstored zero joins the minimum. */
  d = coo2(HURRAY_DTYPE_INT32, HURRAY_DTYPE_INT32, 2, 1, 2, true);
  list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){0, 1}, 2);
  memcpy(mem[0], (int32_t[]){3, 4}, 8);
  assert_ok(hurray_compute_statistics(d, list, error));
  assert_stats(d, (Expected){true, 3, 4, 0, 0});
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* No stored element at all: every element is a zero. */
  d = compressed(HURRAY_SPARSE_CSC, HURRAY_DTYPE_FLOAT16, HURRAY_DTYPE_INT32, 2, 3, 0);
  list = buffers_for(d, mem, false);
  assert_ok(hurray_compute_statistics(d, list, error));
  assert_stats(d, (Expected){true, 0, 0, 0, 6});
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

/* Kinds statistics do not cover: UNSUPPORTED, and the descriptor keeps the
 * statistics it had. */
static void assert_statistics_refused(HurrayDescriptor *d) {
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayBufferList *list = buffers_for(d, mem, true);
  hurray_descriptor_clear_statistics(d);
  hurray_descriptor_set_stat_min(d, -1);
  hurray_descriptor_set_stat_max(d, 1);
  HurrayDescriptor *before = NULL;
  assert_ok(hurray_descriptor_clone(d, &before, error));
  assert_status(HURRAY_ERR_UNSUPPORTED, hurray_compute_statistics(d, list, error));
  assert_true(hurray_descriptor_equal(d, before));
  uint64_t n;
  assert_false(hurray_descriptor_stat_nan_count(d, &n));
  hurray_descriptor_destroy(before);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
}

static void test_statistics_unsupported(void **state) {
  (void)state;
  assert_statistics_refused(golden_vector_build("quant_mxfp8_e4m3")); /* fp8 codes */
  HurrayDescriptor *fp8 = new_desc(HURRAY_DTYPE_FLOAT8_E5M2, 1, (uint64_t[]){4});
  add_buf(fp8, HURRAY_ROLE_DATA, 4);
  assert_statistics_refused(fp8);
  assert_statistics_refused(golden_vector_build("paged_kv_cache"));
  assert_statistics_refused(golden_vector_build("composite_lora"));
  assert_statistics_refused(golden_vector_build("dense_int4"));
  HurrayDescriptor *cplx = new_desc(HURRAY_DTYPE_COMPLEX64, 1, (uint64_t[]){2});
  add_buf(cplx, HURRAY_ROLE_DATA, 16);
  assert_statistics_refused(cplx);
  /* Arguments. */
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_compute_statistics(NULL, NULL, error));
}

/* ================================================= writer statistics option */

static HurrayDescriptor *read_descriptor(const char *path, const char *name) {
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, NULL, &r, error));
  HurrayDescriptor *d = NULL;
  assert_ok(hurray_reader_get_descriptor(r, name, &d, error));
  hurray_reader_close(r);
  return d;
}

static void write_stats_file(const char *path, int statistics) {
  uint8_t *mem[MAX_TEST_BUFFERS];
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  if (statistics >= 0) assert_ok(hurray_writer_set_statistics(w, statistics != 0, error));

  /* dense float32 with NaN and zeros, carrying wrong statistics. */
  HurrayDescriptor *d = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){2, 3});
  add_buf(d, HURRAY_ROLE_DATA, 24);
  hurray_descriptor_set_stat_min(d, -100);
  hurray_descriptor_set_stat_max(d, 100);
  HurrayBufferList *list = buffers_for(d, mem, false);
  memcpy(mem[0], (float[]){0.5f, NAN, 0.0f, -4.0f, 0.0f, 9.0f}, 24);
  assert_ok(hurray_writer_write_tensor(w, "dense", d, list, error));
  /* The caller's descriptor is not touched. */
  double lo = 0;
  uint64_t n;
  assert_true(hurray_descriptor_stat_min(d, &lo));
  assert_true(lo == -100);
  assert_false(hurray_descriptor_stat_nan_count(d, &n));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* CSR float64 3 x 4 with 3 stored. */
  d = compressed(HURRAY_SPARSE_CSR, HURRAY_DTYPE_FLOAT64, HURRAY_DTYPE_INT32, 3, 4, 3);
  list = buffers_for(d, mem, false);
  put_indices(mem[1], false, (int64_t[]){0, 1, 1, 3}, 4);
  put_indices(mem[2], false, (int64_t[]){2, 0, 3}, 3);
  memcpy(mem[0], (double[]){-1.5, 2.5, 6}, 24);
  assert_ok(hurray_writer_write_tensor(w, "csr", d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* Paged: not covered, keeps the statistics it came with. */
  d = small_paged(HURRAY_DTYPE_INT32, 0);
  hurray_descriptor_set_stat_min(d, -7);
  hurray_descriptor_set_stat_max(d, 7);
  list = buffers_for(d, mem, false);
  assert_ok(hurray_writer_write_tensor(w, "paged", d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* fp8 without statistics: not covered, stays without. */
  d = new_desc(HURRAY_DTYPE_FLOAT8_E4M3FN, 1, (uint64_t[]){4});
  add_buf(d, HURRAY_ROLE_DATA, 4);
  list = buffers_for(d, mem, false);
  assert_ok(hurray_writer_write_tensor(w, "fp8", d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);

  /* int16 without statistics. */
  d = new_desc(HURRAY_DTYPE_INT16, 1, (uint64_t[]){3});
  add_buf(d, HURRAY_ROLE_DATA, 6);
  list = buffers_for(d, mem, false);
  memcpy(mem[0], (int16_t[]){-3, 0, 12}, 6);
  assert_ok(hurray_writer_write_tensor(w, "int16", d, list, error));
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  assert_ok(hurray_writer_finish(w, error));
}

static void test_writer_statistics(void **state) {
  (void)state;
  char path[300];
  snprintf(path, sizeof path, "%s/stats.hurray", dir);
  write_stats_file(path, 1);
  HurrayDescriptor *d = read_descriptor(path, "dense");
  assert_stats(d, (Expected){true, -4, 9, 1, 2});
  hurray_descriptor_destroy(d);
  d = read_descriptor(path, "csr");
  assert_stats(d, (Expected){true, -1.5, 6, 0, 9});
  hurray_descriptor_destroy(d);
  d = read_descriptor(path, "int16");
  assert_stats(d, (Expected){true, -3, 12, 0, 1});
  hurray_descriptor_destroy(d);
  double lo = 0, hi = 0;
  uint64_t n;
  d = read_descriptor(path, "paged");
  assert_true(hurray_descriptor_stat_min(d, &lo) && lo == -7);
  assert_true(hurray_descriptor_stat_max(d, &hi) && hi == 7);
  assert_false(hurray_descriptor_stat_nan_count(d, &n));
  assert_false(hurray_descriptor_stat_zero_count(d, &n));
  hurray_descriptor_destroy(d);
  d = read_descriptor(path, "fp8");
  assert_false(hurray_descriptor_stat_min(d, &lo));
  assert_false(hurray_descriptor_stat_nan_count(d, &n));
  hurray_descriptor_destroy(d);

  /* The data itself reads back and materialises as written. */
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, NULL, &r, error));
  HurrayBufferList *list = NULL;
  assert_ok(hurray_reader_get_tensor(r, "csr", &d, &list, error));
  double dense[12];
  assert_ok(hurray_tensor_to_dense(d, list, dense, sizeof dense, error));
  assert_memory_equal(dense, ((double[]){0, 0, -1.5, 0, 0, 0, 0, 0, 2.5, 0, 0, 6}), sizeof dense);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  hurray_reader_close(r);

  /* Off (by default, or switched off again): statistics as given. */
  for (int mode = -1; mode <= 0; mode++) {
    write_stats_file(path, mode);
    d = read_descriptor(path, "dense");
    assert_true(hurray_descriptor_stat_min(d, &lo) && lo == -100);
    assert_true(hurray_descriptor_stat_max(d, &hi) && hi == 100);
    assert_false(hurray_descriptor_stat_nan_count(d, &n));
    hurray_descriptor_destroy(d);
    d = read_descriptor(path, "int16");
    assert_false(hurray_descriptor_stat_min(d, &lo));
    assert_false(hurray_descriptor_stat_zero_count(d, &n));
    hurray_descriptor_destroy(d);
  }

  /* On, then off again before writing. */
  HurrayWriter *w = NULL;
  assert_ok(hurray_writer_open(path, &w, error));
  assert_ok(hurray_writer_set_statistics(w, true, error));
  assert_ok(hurray_writer_set_statistics(w, false, error));
  hurray_writer_abort(w);
  assert_status(HURRAY_ERR_INVALID_ARGUMENT, hurray_writer_set_statistics(NULL, true, error));
}

/* ================================================================ members */

static void test_find_member(void **state) {
  (void)state;
  HurrayDescriptor *d = golden_vector_build("composite_lora");
  const char *names[] = {"base", "lora_a", "lora_b"};
  for (uint32_t i = 0; i < 3; i++) {
    uint32_t index = 99;
    assert_ok(hurray_descriptor_find_member(d, names[i], &index, error));
    assert_int_equal(index, i);
    assert_string_equal(hurray_descriptor_member_name(d, index), names[i]);
  }
  uint32_t index = 99;
  assert_ok(hurray_descriptor_find_member(d, "lora_b", &index, error));
  const HurrayDescriptor *b = hurray_descriptor_member(d, index);
  assert_int_equal(hurray_descriptor_rank(b), 2);
  assert_int_equal(hurray_descriptor_shape(b)[0], 2);
  assert_int_equal(hurray_descriptor_data_buffer(b), 3);
  assert_ok(hurray_descriptor_find_member(d, "base", NULL, error)); /* index_out optional */

  /* Not found: exact, case-sensitive, whole names only; index untouched. */
  const char *absent[] = {"nope", "", "lora", "Base", "lora_a "};
  for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
    index = 77;
    assert_status(HURRAY_ERR_NOT_FOUND,
                  hurray_descriptor_find_member(d, absent[i], &index, error));
    assert_int_equal(index, 77);
  }
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_find_member(d, NULL, &index, error));
  assert_status(HURRAY_ERR_INVALID_ARGUMENT,
                hurray_descriptor_find_member(NULL, "base", &index, error));

  /* Through an encode / decode round trip. */
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_ok(hurray_descriptor_encode(d, &bytes, &len, error));
  HurrayDescriptor *back = NULL;
  assert_ok(hurray_descriptor_decode(bytes, len, &back, error));
  hurray_free(bytes);
  assert_ok(hurray_descriptor_find_member(back, "lora_a", &index, error));
  assert_int_equal(index, 1);
  hurray_descriptor_destroy(back);
  hurray_descriptor_destroy(d);

  /* A tensor that is not composite has no members. */
  d = golden_vector_build("dense_float32");
  assert_status(HURRAY_ERR_NOT_FOUND, hurray_descriptor_find_member(d, "base", &index, error));
  hurray_descriptor_destroy(d);

  /* Nested: names are looked up one level at a time. */
  d = composite_with_csr();
  HurrayDescriptor *outer = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){3, 4});
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    add_buf(outer, hurray_descriptor_buffer_role(d, i), hurray_descriptor_buffer_size(d, i));
  }
  assert_ok(hurray_descriptor_set_layout_composite(outer, error));
  /* A member carries no buffer table of its own. */
  HurrayDescriptor *inner = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){3, 4});
  assert_ok(hurray_descriptor_set_layout_composite(inner, error));
  HurrayDescriptor *leaf = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){3, 4});
  assert_ok(hurray_descriptor_set_layout_dense(leaf, 0, error));
  assert_ok(hurray_descriptor_add_member(inner, "leaf", leaf, error));
  HurrayDescriptor *delta = new_desc(HURRAY_DTYPE_FLOAT32, 2, (uint64_t[]){3, 4});
  assert_ok(hurray_descriptor_set_layout_compressed(delta, HURRAY_SPARSE_CSR, HURRAY_DTYPE_INT32,
                                                    2, 1, 2, 3, error));
  assert_ok(hurray_descriptor_add_member(outer, "delta", delta, error));
  assert_ok(hurray_descriptor_add_member(outer, "inner", inner, error));
  assert_ok(hurray_descriptor_validate(outer, error));
  assert_ok(hurray_descriptor_find_member(outer, "inner", &index, error));
  assert_int_equal(index, 1);
  const HurrayDescriptor *found = hurray_descriptor_member(outer, index);
  assert_status(HURRAY_ERR_NOT_FOUND, hurray_descriptor_find_member(outer, "leaf", &index, error));
  assert_ok(hurray_descriptor_find_member(found, "leaf", &index, error));
  assert_int_equal(index, 0);
  hurray_descriptor_destroy(outer);
  hurray_descriptor_destroy(d);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_coo_positive),
      cmocka_unit_test(test_coo_index_bounds),
      cmocka_unit_test(test_coo_order),
      cmocka_unit_test(test_csr_indptr),
      cmocka_unit_test(test_csc_indptr),
      cmocka_unit_test(test_bsr_indptr),
      cmocka_unit_test(test_compressed_index_bounds),
      cmocka_unit_test(test_positive_every_format),
      cmocka_unit_test(test_page_table_entry),
      cmocka_unit_test(test_contents_read_only_when_ready_on_host),
      cmocka_unit_test(test_composite_member_contents),
      cmocka_unit_test(test_to_dense_coo),
      cmocka_unit_test(test_to_dense_coo_half_duplicates),
      cmocka_unit_test(test_to_dense_csr),
      cmocka_unit_test(test_to_dense_csc),
      cmocka_unit_test(test_to_dense_bsr),
      cmocka_unit_test(test_to_dense_paged),
      cmocka_unit_test(test_to_dense_paged_kv_cache),
      cmocka_unit_test(test_to_dense_strided),
      cmocka_unit_test(test_to_dense_refusals),
      cmocka_unit_test(test_statistics_float),
      cmocka_unit_test(test_statistics_integers),
      cmocka_unit_test(test_statistics_half),
      cmocka_unit_test(test_statistics_sparse),
      cmocka_unit_test(test_statistics_unsupported),
      cmocka_unit_test(test_writer_statistics),
      cmocka_unit_test(test_find_member),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
