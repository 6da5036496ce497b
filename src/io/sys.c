/*
 * The default HurraySys table: thin wrappers over the real calls.
 */
#define _GNU_SOURCE /* sync_file_range */
#include "sys.h"

#include "../core/error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h> /* renameat */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int sys_access(void *ctx, const char *path, int mode) {
  (void)ctx;
  return access(path, mode);
}

static int sys_openat(void *ctx, int dirfd, const char *path, int flags, mode_t mode) {
  (void)ctx;
  return openat(dirfd, path, flags, mode);
}

static int sys_fchmod(void *ctx, int fd, mode_t mode) {
  (void)ctx;
  return fchmod(fd, mode);
}

static ssize_t sys_write(void *ctx, int fd, const void *data, size_t len) {
  (void)ctx;
  return write(fd, data, len);
}

static int sys_fsync(void *ctx, int fd) {
  (void)ctx;
  return fsync(fd);
}

static int sys_linkat(void *ctx, int old_dirfd, const char *old_path, int new_dirfd,
                      const char *new_path, int flags) {
  (void)ctx;
  return linkat(old_dirfd, old_path, new_dirfd, new_path, flags);
}

static int sys_renameat(void *ctx, int old_dirfd, const char *old_path, int new_dirfd,
                        const char *new_path) {
  (void)ctx;
  return renameat(old_dirfd, old_path, new_dirfd, new_path);
}

static int sys_unlinkat(void *ctx, int dirfd, const char *path) {
  (void)ctx;
  return unlinkat(dirfd, path, 0);
}

static int sys_close(void *ctx, int fd) {
  (void)ctx;
  return close(fd);
}

static int sys_start_writeback(void *ctx, int fd, off_t offset, off_t len) {
  (void)ctx;
#ifdef SYNC_FILE_RANGE_WRITE
  return sync_file_range(fd, offset, len, SYNC_FILE_RANGE_WRITE);
#else
  (void)fd;
  (void)offset;
  (void)len;
  return 0;
#endif
}

static int sys_stat(void *ctx, const char *path, struct stat *st, bool follow) {
  (void)ctx;
  return follow ? stat(path, st) : lstat(path, st);
}

const HurraySys hurray__sys_default = {
    .ctx = NULL,
    .access = sys_access,
    .openat = sys_openat,
    .fchmod = sys_fchmod,
    .write = sys_write,
    .fsync = sys_fsync,
    .linkat = sys_linkat,
    .renameat = sys_renameat,
    .unlinkat = sys_unlinkat,
    .close = sys_close,
    .start_writeback = sys_start_writeback,
    .stat = sys_stat,
};

HurrayStatus hurray__open_regular(const char *path, int *fd, struct stat *st, HurrayError *error) {
  *fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (*fd < 0) {
    int saved = errno;
    return hurray__fail_os(error, saved == ENOENT ? HURRAY_ERR_NOT_FOUND : HURRAY_ERR_IO, saved,
                           "cannot open %s: %s", path, strerror(saved));
  }
  HurrayStatus status = HURRAY_OK;
  int flags;
  if (fstat(*fd, st) != 0) {
    int saved = errno;
    status = hurray__fail_os(error, HURRAY_ERR_IO, saved, "cannot stat %s: %s", path,
                             strerror(saved));
  } else if (!S_ISREG(st->st_mode)) {
    status = hurray__fail_os(error, HURRAY_ERR_IO, S_ISDIR(st->st_mode) ? EISDIR : ENXIO,
                             "%s is not a regular file (%s)", path,
                             hurray__file_kind(st->st_mode));
  } else if ((flags = fcntl(*fd, F_GETFL)) == -1 ||
             fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) == -1) {
    int saved = errno;
    status = hurray__fail_os(error, HURRAY_ERR_IO, saved, "cannot use %s: %s", path,
                             strerror(saved));
  }
  if (status != HURRAY_OK) {
    close(*fd);
    *fd = -1;
  }
  return status;
}
