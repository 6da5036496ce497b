/*
 * Fuzz target: hurray_descriptor_decode on arbitrary bytes. Whatever decodes
 * must also validate, re-encode to bytes that decode to an equal descriptor,
 * and render to JSON, all without undefined behaviour.
 *
 * Built two ways (fuzz/meson.build): with -Dfuzzing=true as a libFuzzer
 * binary (clang), otherwise linked with replay_main.c, which feeds it the
 * files named on its command line; CI replays the golden vectors that way.
 */
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  HurrayDescriptor *d = NULL;
  if (hurray_descriptor_decode(data, size, &d, NULL) != HURRAY_OK) {
    return 0;
  }
  (void)hurray_descriptor_validate(d, NULL);
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
  char *json = NULL;
  if (hurray_descriptor_to_json(d, &json, NULL) != HURRAY_OK) {
    abort();
  }
  hurray_free(json);
  hurray_free(bytes);
  hurray_descriptor_destroy(again);
  hurray_descriptor_destroy(d);
  return 0;
}
