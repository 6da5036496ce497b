/*
 * SIGKILL at random moments, in a real process: the helper kill_writer
 * (argv[1]) writes generation g of a ~32 MiB, 64-tensor file over the same
 * target; this driver kills it with SIGKILL after a random delay within its
 * measured run time, 100 times with the O_TMPFILE temporary file and 40
 * times with the named-file fallback. After every kill:
 *   - the target is absent (only while no generation has completed yet) or
 *     a complete file that opens and verifies (every checksum), holding 64
 *     tensors and one generation, no older than the last one seen and no
 *     newer than the one being written, with that generation's bytes;
 *   - a helper that finished before the kill left generation g;
 *   - any other file in the folder is a recognisable temporary file
 *     (".model.hurray.hurray-tmp-*"): counted, reported, removed. None can
 *     appear with O_TMPFILE except in the instant between linkat and
 *     rename, so there it must be a complete file; with the fallback, one
 *     is left by every kill during writing.
 * HURRAY_KILL_SEED=N reproduces a run.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kill_writer.h"
#include "scratch_dir.h"
#include "test_util.h"

static const char *helper;
static char target[300];

static int setup(void **state) {
  (void)state;
  if (scratch_dir_create("kill") < 0) return -1;
  snprintf(target, sizeof target, "%s/model.hurray", dir);
  return 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static pid_t start_helper(const char *path, uint32_t generation, bool fallback) {
  char gen[16];
  snprintf(gen, sizeof gen, "%u", generation);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    execl(helper, helper, path, gen, fallback ? "fallback" : "tmpfile", (char *)NULL);
    _exit(127);
  }
  return pid;
}

/* Runs the helper to completion; returns its wall time in ms. */
static double run_to_completion(const char *path, uint32_t generation, bool fallback) {
  double start = now_ms();
  pid_t pid = start_helper(path, generation, fallback);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
  return now_ms() - start;
}

/* Opens and verifies `path`; returns its generation. */
static uint32_t check_complete(const char *path) {
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(path, NULL, &r, error));
  assert_int_equal(hurray_reader_tensor_count(r), KILL_WRITER_TENSORS);
  assert_ok(hurray_reader_verify(r, NULL, error));
  int64_t generation = -1;
  assert_ok(hurray_reader_metadata_int(r, "generation", &generation, error));
  /* The checksums say the bytes are intact; the pattern says they are this
   * generation's. Spot-check the first and the last tensor. */
  const char *names[2] = {"t.00", "t.63"};
  const uint32_t indices[2] = {0, KILL_WRITER_TENSORS - 1};
  for (int n = 0; n < 2; n++) {
    HurrayDescriptor *d = NULL;
    HurrayBufferList *list = NULL;
    assert_ok(hurray_reader_get_tensor(r, names[n], &d, &list, error));
    const uint8_t *data = hurray_buffer_data(hurray_buffer_list_get(list, 0));
    for (size_t k = 0; k < KILL_WRITER_TENSOR_BYTES; k += 4099) {
      assert_int_equal(data[k], kill_writer_byte((uint32_t)generation, indices[n], k));
    }
    hurray_buffer_list_destroy(list);
    hurray_descriptor_destroy(d);
  }
  hurray_reader_close(r);
  return (uint32_t)generation;
}

/* Counts and removes temporary files; anything else fails the test. With
 * O_TMPFILE (linked_only) a file gets its name only once it is complete
 * and fsynced, so a leftover must open and verify. */
static int remove_temp_files(bool linked_only) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *e;
  int count = 0;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 ||
        strcmp(e->d_name, "model.hurray") == 0) {
      continue;
    }
    if (strncmp(e->d_name, ".model.hurray.hurray-tmp-", 25) != 0) {
      fail_msg("unexpected file left in the folder: %s", e->d_name);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    if (linked_only) (void)check_complete(path);
    assert_int_equal(unlink(path), 0);
    count++;
  }
  closedir(d);
  return count;
}

static void kill_loop(bool fallback, int rounds, unsigned seed) {
  const char *mode = fallback ? "named fallback" : "O_TMPFILE";
  /* Calibrate on another name, so the target starts absent: the mean of
   * three complete runs, the later two replacing a file as the rounds do. */
  char calibration[320];
  snprintf(calibration, sizeof calibration, "%s/calibration.hurray", dir);
  double runtime = 0;
  for (uint32_t g = 0; g < 3; g++) runtime += run_to_completion(calibration, g, fallback) / 3;
  assert_int_equal(check_complete(calibration), 2);
  assert_int_equal(unlink(calibration), 0);
  assert_int_equal(remove_temp_files(false), 0);
  unlink(target);

  srand(seed);
  int killed = 0, finished = 0, absent = 0, kept_old = 0, got_new = 0, temp_files = 0;
  int64_t last = -1; /* the newest generation seen at the target */
  double start = now_ms();
  for (int round = 1; round <= rounds; round++) {
    uint32_t generation = (uint32_t)round;
    /* A delay up to 1.25 x the run time: mostly during the write, some
     * during publication, some after the helper is done. The first five
     * rounds stay in the first half, so the absent target is tried too. */
    double span = round <= 5 ? 0.5 : 1.25;
    long delay_us = (long)((double)rand() / RAND_MAX * runtime * span * 1000.0);
    pid_t pid = start_helper(target, generation, fallback);
    struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
    kill(pid, SIGKILL);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    bool was_killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (!was_killed) {
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail_msg("round %d: the helper failed (status 0x%x)", round, status);
      }
      finished++;
    } else {
      killed++;
    }
    if (access(target, F_OK) != 0) {
      if (last >= 0) fail_msg("round %d: generation %lld vanished", round, (long long)last);
      if (!was_killed) fail_msg("round %d: the helper finished but left no file", round);
      absent++;
    } else {
      uint32_t got = check_complete(target);
      if ((int64_t)got < last || got > generation) {
        fail_msg("round %d: the target holds generation %u (last seen %lld)", round, got,
                 (long long)last);
      }
      if (!was_killed && got != generation) {
        fail_msg("round %d: the helper finished but the target holds generation %u", round, got);
      }
      if (got == generation) got_new++;
      else kept_old++;
      last = got;
    }
    temp_files += remove_temp_files(!fallback);
  }
  printf(
      "SIGKILL, %s: %d rounds in %.1f s, writer run time %.0f ms, seed %u: %d killed, %d "
      "finished first; after the kill the target was absent %d times, the old file %d, the "
      "new file %d, and every file there was complete and verified; %d temporary file(s) "
      "left and removed\n",
      mode, rounds, (now_ms() - start) / 1e3, runtime, seed, killed, finished, absent, kept_old,
      got_new, temp_files);
  assert_int_equal(killed + finished, rounds);
  assert_true(killed > 0);
}

static unsigned seed(void) {
  const char *env = getenv("HURRAY_KILL_SEED");
  return env != NULL ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL);
}

static void test_kill_o_tmpfile(void **state) {
  (void)state;
  kill_loop(false, 100, seed());
}

static void test_kill_fallback(void **state) {
  (void)state;
  kill_loop(true, 40, seed() + 1);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_kill_writer PATH_OF_kill_writer\n");
    return 2;
  }
  helper = argv[1];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_o_tmpfile),
      cmocka_unit_test(test_kill_fallback),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
