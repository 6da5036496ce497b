/*
 * Whether the host may read a tensor's buffers now: the kernels that walk
 * buffer contents on the CPU (to_dense, statistics, dequantize) read host
 * memory only, and only buffers nobody has to wait on first.
 */
#ifndef HURRAY_SRC_HOST_ACCESS_H
#define HURRAY_SRC_HOST_ACCESS_H

#include "hurray/descriptor.h"

/* HURRAY_OK, or UNSUPPORTED naming `what`: the descriptor's memory class is
 * device memory, or a buffer's sync mode is not READY (the consumer would
 * have to wait on a stream or event the CPU kernels cannot wait on). */
HurrayStatus hurray__require_host_ready(const HurrayDescriptor *d, const char *what,
                                        HurrayError *error);

#endif
