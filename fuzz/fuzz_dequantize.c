/*
 * Fuzz target: hurray_dequantize and hurray_tensor_to_dense driven by a
 * fuzzed descriptor over fuzzed buffers.
 *
 *   u8 flags | u16 L | L descriptor bytes | buffer contents
 *
 * Every buffer gets exactly its table byte_size (capped at FUZZ_MAX_BUFFER:
 * beyond that placement must refuse it), the table's alignment, sync mode
 * and the descriptor's device, so the fuzzer spends its time past the
 * placement checks; contents are the remaining bytes in order, then zeros.
 * flags & 3 picks the output dtype (float32, float16, bfloat16, float32);
 * flags & 4 makes the output one element short (both calls must refuse it).
 * (Outputs this small always decode on one thread; tests/c/test_quant.c
 * compares thread counts on large tensors.)
 *
 * The outputs are sized from the descriptor with overflow checks; tensors
 * of more than FUZZ_MAX_NUMEL elements are only placement-checked.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hurray/hurray.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const HurrayDType out_dtypes[4] = {HURRAY_DTYPE_FLOAT32, HURRAY_DTYPE_FLOAT16,
                                          HURRAY_DTYPE_BFLOAT16, HURRAY_DTYPE_FLOAT32};

static void run(const HurrayDescriptor *d, const HurrayBufferList *list, uint8_t flags) {
  uint64_t numel = 0, dense_bytes = 0;
  if (hurray_descriptor_numel(d, &numel, NULL) != HURRAY_OK || numel > FUZZ_MAX_NUMEL) return;
  bool short_out = (flags & 4) != 0 && numel > 0;

  /* to_dense: numel elements of the descriptor's dtype (packed if sub-byte). */
  if (hurray_dtype_storage_bytes(hurray_descriptor_dtype(d), numel, &dense_bytes) == HURRAY_OK) {
    uint64_t give = short_out ? dense_bytes - 1 : dense_bytes;
    uint8_t *dense = malloc(give ? (size_t)give : 1);
    if (dense == NULL) abort();
    HurrayStatus s = hurray_tensor_to_dense(d, list, dense, give, NULL);
    if (short_out && s == HURRAY_OK) abort(); /* wrote past a short output */
    free(dense);
  }

  /* dequantize: numel elements of float32 / float16 / bfloat16. */
  HurrayDType out_dtype = out_dtypes[flags & 3];
  uint64_t item = out_dtype == HURRAY_DTYPE_FLOAT32 ? 4 : 2;
  uint64_t need = numel * item; /* numel <= 2^20: no overflow */
  uint64_t give = short_out ? need - item : need;
  uint8_t *out = malloc(give ? (size_t)give : 1);
  if (out == NULL) abort();
  HurrayStatus s = hurray_dequantize(d, list, out_dtype, 1, out, give, NULL);
  if (short_out && s == HURRAY_OK) abort();
  free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t flags = 0;
  Stream rest;
  HurrayDescriptor *d = fuzz_take_descriptor(data, size, &flags, &rest);
  if (d == NULL) return 0;
  HurrayBufferList *list = NULL;
  if (hurray_buffer_list_create(&list, NULL) != HURRAY_OK) abort();
  uint64_t total = 0;
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    uint64_t want = hurray_descriptor_buffer_size(d, i);
    if (want > FUZZ_MAX_BUFFER || total + want > FUZZ_MAX_TOTAL) want = 0;
    total += want;
    uint32_t alignment = hurray_descriptor_buffer_alignment(d, i);
    HurrayBuffer *b = fuzz_make_buffer(&rest, want, alignment, 0);
    if (b == NULL) break;
    (void)hurray_buffer_set_alignment(b, alignment, NULL);
    HurraySyncMode sync = hurray_descriptor_buffer_sync_mode(d, i);
    static int event;
    (void)hurray_buffer_set_sync(b, sync, sync == HURRAY_SYNC_READY ? NULL : &event, NULL);
    (void)hurray_buffer_set_device(b, hurray_descriptor_device_type(d),
                                   hurray_descriptor_device_id(d),
                                   hurray_descriptor_memory_class(d), NULL);
    if (hurray_buffer_list_push(list, b, NULL) != HURRAY_OK) break;
  }
  if (hurray_validate_buffer_placement(d, list, NULL) == HURRAY_OK) run(d, list, flags);
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  return 0;
}
