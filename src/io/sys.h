/*
 * The writer's system-call seam. Every call the writer makes to the
 * operating system goes through a HurraySys table, so that tests can make
 * any one of them fail (ENOSPC, EIO, a short write, a failed fsync, link or
 * rename) and check that the target path is left alone.
 *
 * Why a per-writer table and not a global hook:
 *   - The library keeps no global mutable state (ADR-0009). The default
 *     table, hurray__sys_default, is const; a writer holds a pointer to the
 *     table it was opened with, and nothing can change it afterwards.
 *   - The only way to open a writer on another table is
 *     hurray__writer_open_sys below. It is declared in this internal header
 *     only and, like every symbol without HURRAY_API, has hidden visibility:
 *     libhurray.so does not export it (scripts/check_exports.sh), so users of
 *     the shared library cannot reach it. The fault-injection tests link the
 *     library's object files directly (tests/c/meson.build,
 *     extract_all_objects), where hidden symbols are ordinary symbols.
 *   - The same binary is tested and shipped: no HURRAY_TESTING build, no
 *     #ifdef around the calls.
 *
 * Each function has the signature and errno behaviour of the POSIX call it
 * stands for, with the table's `ctx` as an extra first argument.
 */
#ifndef HURRAY_SRC_IO_SYS_H
#define HURRAY_SRC_IO_SYS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "hurray/io.h"

typedef struct HurraySys {
  void *ctx;
  int (*access)(void *ctx, const char *path, int mode);
  /* openat(2). The writer opens the target's folder once (AT_FDCWD) and
   * makes its temporary file there by descriptor, O_TMPFILE or a new name
   * with O_CREAT | O_EXCL: every later step names the file relative to the
   * folder's descriptor, so a folder renamed or moved mid-write still gets
   * the finished file, and a failure still finds the temporary one. */
  int (*openat)(void *ctx, int dirfd, const char *path, int flags, mode_t mode);
  int (*fchmod)(void *ctx, int fd, mode_t mode);
  ssize_t (*write)(void *ctx, int fd, const void *data, size_t len);
  int (*fsync)(void *ctx, int fd);
  int (*linkat)(void *ctx, int old_dirfd, const char *old_path, int new_dirfd,
                const char *new_path, int flags);
  int (*renameat)(void *ctx, int old_dirfd, const char *old_path, int new_dirfd,
                  const char *new_path);
  /* unlinkat(2) with flags 0: removes a file, never a folder. */
  int (*unlinkat)(void *ctx, int dirfd, const char *path);
  int (*close)(void *ctx, int fd);
  /* sync_file_range(fd, offset, len, SYNC_FILE_RANGE_WRITE): starts the
   * writeback of bytes already written, without waiting for it. Advice
   * only: its result is ignored, and fsync still decides whether the file
   * reached the disk (without the WAIT flags it consumes no writeback
   * error, so fsync still sees any). NULL: never called (tables written
   * before it existed). */
  int (*start_writeback)(void *ctx, int fd, off_t offset, off_t len);
  /* lstat(2), or stat(2) when `follow`, of the target before the
   * temporary file is made: what it is decides whether it can be replaced,
   * and a regular file's mode is kept. A failure reads as "no such file"
   * (creating the temporary file reports a real problem). NULL: never
   * called (tables written before it). */
  int (*stat)(void *ctx, const char *path, struct stat *st, bool follow);
} HurraySys;

/* What a file of mode `mode` is, in words ("a FIFO", "a directory"), for
 * the messages that refuse one that is not a regular file. */
static inline const char *hurray__file_kind(mode_t mode) {
  return S_ISDIR(mode)    ? "a directory"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISLNK(mode)  ? "a symbolic link"
                          : "not a file";
}

/* The monotonic clock in nanoseconds (0 if it cannot be read), for the
 * timings the writer and reader make to choose their way of doing I/O. */
static inline uint64_t hurray__clock_ns(void) {
  struct timespec t;
  if (clock_gettime(CLOCK_MONOTONIC, &t) != 0) return 0;
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The real system calls. */
extern const HurraySys hurray__sys_default;

/* Opens `path` for reading when it is a regular file, filling `st`, and
 * returns the descriptor (the caller closes it). Anything else is refused
 * without blocking: a FIFO is opened with O_NONBLOCK, which would otherwise
 * wait for a writer forever, and the descriptor is switched back to
 * blocking only once it is known to be a file. Stores the descriptor in
 * `*fd` (the caller closes it), or -1 on failure: NOT_FOUND (ENOENT) for a
 * missing path, IO with os_errno EISDIR for a directory and ENXIO for a
 * FIFO, socket or device. */
HurrayStatus hurray__open_regular(const char *path, int *fd, struct stat *st, HurrayError *error);

/* hurray_writer_open with every system call going through `sys`, which
 * must outlive the writer. hurray_writer_open is this with
 * &hurray__sys_default. Internal: not exported from the shared library. */
HurrayStatus hurray__writer_open_sys(const char *path, const HurraySys *sys, HurrayWriter **out,
                                     HurrayError *error);

#endif
