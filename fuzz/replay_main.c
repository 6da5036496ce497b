/*
 * Runs a fuzz target over the files named on the command line, and over
 * every regular file in the folders named there (not recursively, in name
 * order), the way libFuzzer replays a corpus, so corpora work as regression
 * tests in builds without libFuzzer (fuzz/meson.build registers one test
 * per target). A crash, sanitizer report or abort in the target fails the
 * test; the input being run is printed first when HURRAY_REPLAY_VERBOSE is
 * set.
 */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path, int verbose) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
  if (size < 0 || data == NULL || fread(data, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "cannot read %s\n", path);
    fclose(f);
    free(data);
    return 1;
  }
  fclose(f);
  if (verbose) fprintf(stderr, "replaying %s\n", path);
  LLVMFuzzerTestOneInput(data, (size_t)size);
  free(data);
  return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b) {
  return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv) {
  int verbose = getenv("HURRAY_REPLAY_VERBOSE") != NULL;
  long count = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "cannot open %s\n", argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      if (run_file(argv[i], verbose) != 0) return 1;
      count++;
      continue;
    }
    struct dirent **names = NULL;
    int n = scandir(argv[i], &names, NULL, by_name);
    if (n < 0) {
      fprintf(stderr, "cannot list %s\n", argv[i]);
      return 1;
    }
    int failed = 0;
    for (int k = 0; k < n; k++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], names[k]->d_name);
      if (!failed && names[k]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        failed = run_file(path, verbose);
        count++;
      }
      free(names[k]);
    }
    free(names);
    if (failed) return 1;
  }
  printf("replayed %ld inputs\n", count);
  return 0;
}
