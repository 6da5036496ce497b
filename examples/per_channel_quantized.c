/*
 * A per-channel-quantized int8 tensor held in three buffers (codes, float32
 * scales, int8 zero points): build its descriptor, encode and decode it,
 * check that the three buffers may travel with it, and print it.
 *
 * Uses only the installed header and library:
 *   cc per_channel_quantized.c $(pkg-config --cflags --libs hurray)
 */
#include <hurray/hurray.h>
#include <stdio.h>
#include <stdlib.h>

#define ROWS 4
#define COLS 3

#define CHECK(expr)                                                                              \
  do {                                                                                           \
    HurrayStatus status_ = (expr);                                                               \
    if (status_ != HURRAY_OK) {                                                                  \
      fprintf(stderr, "%s failed: %s: %s\n", #expr, hurray_status_name(status_), error.message); \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static void release_aligned(void *data, void *ctx) {
  (void)ctx;
  free(data);
}

/* 64-byte aligned storage, as the descriptor's buffer table asks. */
static void *aligned(size_t size) { return aligned_alloc(64, (size + 63) / 64 * 64); }

int main(void) {
  HurrayError error = {0};

  /* The data: one row of codes per output channel. */
  int8_t *codes = aligned(ROWS * COLS);
  float *scales = aligned(ROWS * sizeof(float));
  int8_t *zero_points = aligned(ROWS);
  for (int r = 0; r < ROWS; r++) {
    scales[r] = 0.05f * (float)(r + 1);
    zero_points[r] = (int8_t)(r - 2);
    for (int c = 0; c < COLS; c++) {
      codes[r * COLS + c] = (int8_t)(10 * r + c - 20);
    }
  }

  /* The descriptor: int8 [4, 3], per-channel affine along axis 0. */
  HurrayDescriptor *desc = NULL;
  CHECK(hurray_descriptor_create(HURRAY_DTYPE_INT8, 2, (uint64_t[]){ROWS, COLS}, &desc, &error));
  uint32_t data_index, scale_index, zp_index;
  CHECK(hurray_descriptor_add_buffer(desc, HURRAY_ROLE_DATA, ROWS * COLS, 64, HURRAY_SYNC_READY,
                                     &data_index, &error));
  CHECK(hurray_descriptor_add_buffer(desc, HURRAY_ROLE_SCALES, ROWS * sizeof(float), 64,
                                     HURRAY_SYNC_READY, &scale_index, &error));
  CHECK(hurray_descriptor_add_buffer(desc, HURRAY_ROLE_ZERO_POINTS, ROWS, 64, HURRAY_SYNC_READY,
                                     &zp_index, &error));
  CHECK(hurray_descriptor_set_layout_dense(desc, data_index, &error));
  CHECK(hurray_descriptor_set_quant_per_channel_affine(desc, 0, scale_index, HURRAY_DTYPE_FLOAT32,
                                                       &error));
  CHECK(hurray_descriptor_set_quant_zero_point_buffer(desc, zp_index, HURRAY_DTYPE_INT8, &error));
  CHECK(hurray_descriptor_validate(desc, &error));

  /* Encode, decode, and check the round trip is exact. */
  uint8_t *bytes = NULL;
  size_t len = 0;
  CHECK(hurray_descriptor_encode(desc, &bytes, &len, &error));
  HurrayDescriptor *decoded = NULL;
  CHECK(hurray_descriptor_decode(bytes, len, &decoded, &error));
  CHECK(hurray_descriptor_validate(decoded, &error));
  if (!hurray_descriptor_equal(desc, decoded)) {
    fprintf(stderr, "round trip changed the descriptor\n");
    return 1;
  }

  /* The three buffers, each with its own owner and release. */
  HurrayBufferList *list = NULL;
  CHECK(hurray_buffer_list_create(&list, &error));
  void *allocations[3] = {codes, scales, zero_points};
  uint64_t sizes[3] = {ROWS * COLS, ROWS * sizeof(float), ROWS};
  for (int i = 0; i < 3; i++) {
    HurrayBuffer *buffer = NULL;
    CHECK(hurray_buffer_create(allocations[i], sizes[i], release_aligned, NULL, &buffer, &error));
    CHECK(hurray_buffer_set_alignment(buffer, 64, &error));
    CHECK(hurray_buffer_list_push(list, buffer, &error)); /* the list owns it now */
  }
  CHECK(hurray_validate_buffer_placement(decoded, list, &error));

  char *json = NULL;
  CHECK(hurray_descriptor_to_json(decoded, &json, &error));
  printf("libhurray %s, C ABI %u\n", hurray_version_string(), hurray_abi_version());
  printf("descriptor: %zu bytes encoded, placement of %zu buffers valid\n", len,
         hurray_buffer_list_len(list));
  printf("%s", json);

  /* Dequantize through the decoded descriptor and the borrowed handles. */
  const int8_t *q = hurray_buffer_data(hurray_buffer_list_get(list, data_index));
  const float *s = hurray_buffer_data(
      hurray_buffer_list_get(list, hurray_descriptor_quant_scale_buffer(decoded)));
  const int8_t *z = hurray_buffer_data(
      hurray_buffer_list_get(list, hurray_descriptor_quant_zero_point_buffer(decoded)));
  printf("dequantized:\n");
  for (int r = 0; r < ROWS; r++) {
    for (int c = 0; c < COLS; c++) {
      printf("%8.3f", (double)((float)(q[r * COLS + c] - z[r]) * s[r]));
    }
    printf("\n");
  }

  hurray_free(json);
  hurray_free(bytes);
  hurray_buffer_list_destroy(list); /* releases all three allocations, once each */
  hurray_descriptor_destroy(decoded);
  hurray_descriptor_destroy(desc);
  return 0;
}
