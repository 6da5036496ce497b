/*
 * Fuzz target: the C-level capsule consumer path. A consumer of a
 * `__hurray__` capsule gets an encoded descriptor and a HurrayBufferList it
 * cannot trust; it decodes the descriptor, then runs
 * hurray_validate_buffer_placement before touching any buffer
 * (python/hurray/_hurray.c, consume_capsule). Here both come from the input:
 *
 *   u8 flags | u16 L | L descriptor bytes | 4 spec bytes per list entry | contents
 *
 * flags & 3 picks the list length: 0 or 1 the table length, 2 one more,
 * 3 one fewer. Each entry's spec bytes s0..s3 (zero when the input ends):
 *   s0 & 7: 0-4 the declared byte_size, 5 smaller by 1 + (s0 >> 3),
 *           6 larger by s0 >> 3, 7 exactly s0 >> 3 bytes;
 *   s1 >= 224: the pointer is misaligned by s1 - 223 bytes;
 *   s2 >= 224: sync mode (s2 % 3) instead of the table's;
 *   s3 >= 224: device (s3 & 7):((s3 >> 3) & 3) memory class 1 + (s3 & 3)
 *              instead of the descriptor's.
 * Buffer contents are the remaining bytes in order, then zeros.
 *
 * When placement passes, the list must really hold what the descriptor
 * places in it, and the statistics pass (the next thing a consumer may run
 * over the buffers) must not read out of bounds.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hurray/hurray.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int dummy_event;

/* long: a fuzz target, read top to bottom: the buffers the input asks for, then placement. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t flags = 0;
  Stream rest;
  HurrayDescriptor *d = fuzz_take_descriptor(data, size, &flags, &rest);
  if (d == NULL) return 0;
  uint32_t table = hurray_descriptor_buffer_count(d);
  size_t n = table;
  if ((flags & 3) == 2) n++;
  if ((flags & 3) == 3 && n > 0) n--;
  Stream specs = rest;
  if (specs.left > 4 * n) specs.left = 4 * n;
  rest.p += specs.left;
  rest.left -= specs.left;

  HurrayBufferList *list = NULL;
  if (hurray_buffer_list_create(&list, NULL) != HURRAY_OK) abort();
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t s0 = stream_u8(&specs), s1 = stream_u8(&specs), s2 = stream_u8(&specs),
            s3 = stream_u8(&specs);
    bool in_table = i < table;
    uint64_t declared = in_table ? hurray_descriptor_buffer_size(d, (uint32_t)i) : s0;
    uint32_t alignment = in_table ? hurray_descriptor_buffer_alignment(d, (uint32_t)i) : 1;
    HurraySyncMode sync = in_table ? hurray_descriptor_buffer_sync_mode(d, (uint32_t)i)
                                   : HURRAY_SYNC_READY;
    uint64_t want = declared, k = s0 >> 3;
    switch (s0 & 7) {
      case 5: want = declared > 1 + k ? declared - 1 - k : 0; break;
      case 6: want = declared + k; break;
      case 7: want = k; break;
      default: break;
    }
    if (want < declared && want > FUZZ_MAX_BUFFER) want = k;
    if (want > FUZZ_MAX_BUFFER || total + want > FUZZ_MAX_TOTAL) want = k; /* too small */
    total += want;
    uint32_t misalign = s1 >= 224 ? (uint32_t)(s1 - 223) : 0;
    HurrayBuffer *b = fuzz_make_buffer(&rest, want, alignment, misalign);
    if (b == NULL) break;
    if (misalign == 0) (void)hurray_buffer_set_alignment(b, alignment, NULL);
    if (s2 >= 224) sync = (HurraySyncMode)(s2 % 3);
    (void)hurray_buffer_set_sync(b, sync, sync == HURRAY_SYNC_READY ? NULL : &dummy_event, NULL);
    int32_t device_type = hurray_descriptor_device_type(d);
    int32_t device_id = hurray_descriptor_device_id(d);
    HurrayMemoryClass memory_class = hurray_descriptor_memory_class(d);
    if (s3 >= 224) {
      device_type = s3 & 7;
      device_id = (s3 >> 3) & 3;
      memory_class = (HurrayMemoryClass)(1 + (s3 & 3));
    }
    (void)hurray_buffer_set_device(b, device_type, device_id, memory_class, NULL);
    if (hurray_buffer_list_push(list, b, NULL) != HURRAY_OK) break;
  }

  if (hurray_validate_buffer_placement(d, list, NULL) == HURRAY_OK) {
    /* Placement vouched for the list: every buffer holds what the table
     * declares, and the table covers what the descriptor places there. */
    if (hurray_buffer_list_len(list) != table) abort();
    for (uint32_t i = 0; i < table; i++) {
      uint64_t need = 0;
      uint64_t have = hurray_buffer_size(hurray_buffer_list_get(list, i));
      if (have < hurray_descriptor_buffer_size(d, i)) abort();
      if (hurray_descriptor_buffer_required_bytes(d, i, &need, NULL) == HURRAY_OK && need > have) {
        abort();
      }
    }
    uint64_t numel = 0;
    bool small = hurray_descriptor_numel(d, &numel, NULL) == HURRAY_OK && numel <= FUZZ_MAX_NUMEL;
    if (small || hurray_descriptor_layout_kind(d) == HURRAY_LAYOUT_SPARSE) {
      HurrayDescriptor *copy = NULL;
      if (hurray_descriptor_clone(d, &copy, NULL) == HURRAY_OK &&
          hurray_compute_statistics(copy, list, NULL) == HURRAY_OK &&
          hurray_descriptor_validate(copy, NULL) != HURRAY_OK) {
        abort(); /* statistics computed from the data must be consistent */
      }
      hurray_descriptor_destroy(copy);
    }
  }
  hurray_buffer_list_destroy(list);
  hurray_descriptor_destroy(d);
  return 0;
}
