/*
 * Crash safety: a writer process killed with SIGKILL at any moment before
 * finish leaves the target path with its old content (or absent), and no
 * other file in the folder. A writer killed after finish leaves the complete
 * new file.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scratch_dir.h"
#include "test_util.h"

static char target[300];

static int setup(void **state) {
  (void)state;
  if (scratch_dir_create("crash") < 0) return -1;
  snprintf(target, sizeof target, "%s/model.hurray", dir);
  return 0;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Writes tensors of 4 MiB forever (or `count` of them, then finishes),
 * telling the parent through `ready` once the first one is out. */
static void child_writer(int ready, int count) {
  static _Alignas(64) uint8_t data[4 << 20];
  memset(data, 0x5A, sizeof data);
  HurrayDescriptor *d = NULL;
  HurrayBufferList *list = NULL;
  HurrayBuffer *b = NULL;
  HurrayWriter *w = NULL;
  if (hurray_descriptor_create(HURRAY_DTYPE_UINT8, 1, (uint64_t[]){sizeof data}, &d, NULL) ||
      hurray_descriptor_add_buffer(d, HURRAY_ROLE_DATA, sizeof data, 64, HURRAY_SYNC_READY, NULL,
                                   NULL) ||
      hurray_buffer_list_create(&list, NULL) ||
      hurray_buffer_create(data, sizeof data, NULL, NULL, &b, NULL) ||
      hurray_buffer_list_push(list, b, NULL) || hurray_writer_open(target, &w, NULL)) {
    _exit(3);
  }
  for (int i = 0; count < 0 || i < count; i++) {
    char name[32];
    snprintf(name, sizeof name, "layer.%d", i);
    if (hurray_writer_write_tensor(w, name, d, list, NULL) != HURRAY_OK) _exit(4);
    if (i == 0 && write(ready, "x", 1) != 1) _exit(5);
  }
  if (hurray_writer_finish(w, NULL) != HURRAY_OK) _exit(6);
  if (write(ready, "f", 1) != 1) _exit(5);
  for (;;) pause(); /* wait for the kill */
}

static pid_t start_writer(int count, int *ready_fd) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    child_writer(fds[1], count);
  }
  close(fds[1]);
  *ready_fd = fds[0];
  return pid;
}

static void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  int status;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void write_old_content(void) {
  FILE *f = fopen(target, "w");
  fputs("the old checkpoint", f);
  fclose(f);
}

static void assert_old_content_only(void) {
  char buf[64] = {0};
  FILE *f = fopen(target, "r");
  assert_non_null(f);
  assert_non_null(fgets(buf, sizeof buf, f));
  fclose(f);
  assert_string_equal(buf, "the old checkpoint");
  DIR *d = opendir(dir);
  struct dirent *e;
  int entries = 0;
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (strcmp(e->d_name, "model.hurray") != 0) fail_msg("stray file left behind: %s", e->d_name);
    entries++;
  }
  closedir(d);
  assert_int_equal(entries, 1);
}

static void test_kill_before_finish(void **state) {
  (void)state;
  /* Kill at several moments: right away, just after the first tensor, and
   * after a few hundred MiB of writes. */
  const long delays_ms[] = {-1, 0, 5, 50, 200};
  for (size_t i = 0; i < sizeof delays_ms / sizeof delays_ms[0]; i++) {
    write_old_content();
    int ready;
    pid_t pid = start_writer(-1, &ready);
    if (delays_ms[i] >= 0) {
      char c;
      assert_int_equal(read(ready, &c, 1), 1);
      sleep_ms(delays_ms[i]);
    }
    kill_and_reap(pid);
    close(ready);
    assert_old_content_only();
  }
  /* And with no old file: nothing appears at all. */
  unlink(target);
  int ready;
  pid_t pid = start_writer(-1, &ready);
  char c;
  assert_int_equal(read(ready, &c, 1), 1);
  kill_and_reap(pid);
  close(ready);
  assert_int_equal(access(target, F_OK), -1);
  DIR *d = opendir(dir);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    assert_true(strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0);
  }
  closedir(d);
}

static void test_kill_after_finish(void **state) {
  (void)state;
  write_old_content();
  int ready;
  pid_t pid = start_writer(3, &ready);
  char c = 0;
  while (c != 'f') assert_int_equal(read(ready, &c, 1), 1);
  kill_and_reap(pid);
  close(ready);
  HurrayReader *r = NULL;
  assert_ok(hurray_reader_open(target, NULL, &r, error));
  assert_int_equal(hurray_reader_tensor_count(r), 3);
  assert_ok(hurray_reader_verify(r, NULL, error));
  hurray_reader_close(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kill_before_finish),
      cmocka_unit_test(test_kill_after_finish),
  };
  return cmocka_run_group_tests(tests, setup, scratch_dir_remove);
}
