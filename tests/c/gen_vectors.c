/*
 * Rewrites tests/vectors/NAME.{bin,json} from the builders in vectors.c.
 * Run it only when the encoding changes on purpose (see tests/vectors/README.md):
 *   build/tests/c/gen_vectors tests/vectors
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vectors.h"

static int write_file(const char *dir, const char *name, const char *ext, const void *data,
                      size_t len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s.%s", dir, name, ext);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  int failures = 0;
  for (size_t i = 0; i < golden_vector_count; i++) {
    HurrayError error = {0};
    HurrayDescriptor *d = golden_vectors[i].build();
    uint8_t *bytes = NULL;
    size_t len = 0;
    char *json = NULL;
    if (hurray_descriptor_validate(d, &error) != HURRAY_OK ||
        hurray_descriptor_encode(d, &bytes, &len, &error) != HURRAY_OK ||
        hurray_descriptor_to_json(d, &json, &error) != HURRAY_OK) {
      fprintf(stderr, "%s: %s\n", golden_vectors[i].name, error.message);
      failures++;
    } else {
      failures += write_file(argv[1], golden_vectors[i].name, "bin", bytes, len);
      failures += write_file(argv[1], golden_vectors[i].name, "json", json, strlen(json));
    }
    hurray_free(bytes);
    hurray_free(json);
    hurray_descriptor_destroy(d);
  }
  return failures == 0 ? 0 : 1;
}
