/*
 * Runs a fuzz target over the files named on the command line, the way
 * libFuzzer replays a corpus, so corpora work as regression tests in builds
 * without libFuzzer.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    FILE *f = fopen(argv[i], "rb");
    if (f == NULL) {
      fprintf(stderr, "cannot open %s\n", argv[i]);
      return 1;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
    if (data == NULL || fread(data, 1, (size_t)size, f) != (size_t)size) {
      fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    fclose(f);
    LLVMFuzzerTestOneInput(data, (size_t)size);
    free(data);
  }
  printf("replayed %d inputs\n", argc - 1);
  return 0;
}
