/*
 * Fuzz target: hurray_descriptor_decode on arbitrary bytes. Whatever decodes
 * must also validate (or be refused with a status), re-encode to bytes that
 * decode to an equal descriptor, clone to an equal descriptor, and render to
 * JSON; a valid one must also answer every size query, all without
 * undefined behaviour.
 *
 * Built two ways (fuzz/meson.build): with -Dfuzzing=true as a libFuzzer
 * binary (clang), otherwise linked with replay_main.c, which feeds it the
 * files and folders named on its command line; the C suite replays
 * fuzz/corpus/fuzz_descriptor_decode and the golden vectors that way.
 */
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void query_valid(const HurrayDescriptor *d) {
  uint64_t n = 0;
  (void)hurray_descriptor_numel(d, &n, NULL);
  (void)hurray_descriptor_quant_scale_count(d, &n, NULL);
  for (uint32_t i = 0; i < hurray_descriptor_buffer_count(d); i++) {
    if (hurray_descriptor_buffer_required_bytes(d, i, &n, NULL) == HURRAY_OK &&
        n > hurray_descriptor_buffer_size(d, i)) {
      abort(); /* a valid descriptor's table covers what it places */
    }
  }
  for (uint32_t i = 0; i < hurray_descriptor_member_count(d); i++) {
    const char *name = hurray_descriptor_member_name(d, i);
    uint32_t found = UINT32_MAX;
    if (name == NULL || hurray_descriptor_member(d, i) == NULL ||
        hurray_descriptor_find_member(d, name, &found, NULL) != HURRAY_OK || found != i) {
      abort(); /* every member is found by its own name */
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  HurrayDescriptor *d = NULL;
  if (hurray_descriptor_decode(data, size, &d, NULL) != HURRAY_OK) {
    return 0;
  }
  if (hurray_descriptor_validate(d, NULL) == HURRAY_OK) query_valid(d);
  uint8_t *bytes = NULL;
  size_t len = 0;
  if (hurray_descriptor_encode(d, &bytes, &len, NULL) != HURRAY_OK) {
    abort(); /* anything decodable is encodable */
  }
  HurrayDescriptor *again = NULL;
  if (hurray_descriptor_decode(bytes, len, &again, NULL) != HURRAY_OK ||
      !hurray_descriptor_equal(d, again)) {
    abort(); /* re-encoding must be lossless */
  }
  HurrayDescriptor *copy = NULL;
  if (hurray_descriptor_clone(d, &copy, NULL) != HURRAY_OK || !hurray_descriptor_equal(d, copy)) {
    abort();
  }
  char *json = NULL;
  if (hurray_descriptor_to_json(d, &json, NULL) != HURRAY_OK) {
    abort();
  }
  hurray_free(json);
  hurray_free(bytes);
  hurray_descriptor_destroy(copy);
  hurray_descriptor_destroy(again);
  hurray_descriptor_destroy(d);
  return 0;
}
