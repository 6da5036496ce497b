/*
 * How much memory this process may fill: what a read-ahead must stay
 * within, since pages read past it would evict one another before their
 * reader reaches them. A container's page cache counts against its cgroup's
 * limit, which can be far below the host's memory.
 */
#ifndef HURRAY_SRC_IO_MEMORY_LIMIT_H
#define HURRAY_SRC_IO_MEMORY_LIMIT_H

#include <stdint.h>

/* The smaller of physical memory and every cgroup memory limit on this
 * process's path (/proc/self/cgroup under /sys/fs/cgroup), in bytes;
 * UINT64_MAX where neither is known. Reads a few small files. */
uint64_t hurray__memory_limit(void);

/* The smallest memory limit of the cgroups listed in `cgroup_list` (a file
 * in the format of /proc/self/cgroup) and of every group above each, with
 * the cgroup file systems mounted under `root`: cgroup v2's memory.max
 * (the line "0::PATH", ROOT/PATH/memory.max), v1's memory.limit_in_bytes
 * (a line whose controllers include "memory",
 * ROOT/memory/PATH/memory.limit_in_bytes). UINT64_MAX for no limit ("max",
 * a file missing or unreadable). Takes its paths for the tests. */
uint64_t hurray__cgroup_memory_limit(const char *cgroup_list, const char *root);

#endif
