/*
 * hurray_convert_file with a foreign target's (safetensors, GGUF) system
 * calls going through `sys` (src/io/sys.h; NULL: the real ones), so that the
 * fault-injection tests (tests/c/test_convert_faults.c) can fail any write,
 * fsync, link or rename of a conversion and check that the target is left
 * untouched. A hurray target and the early probe of the target folder use
 * the real calls. Internal: hidden, not exported.
 */
#ifndef HURRAY_SRC_FORMATS_CONVERT_SYS_H
#define HURRAY_SRC_FORMATS_CONVERT_SYS_H

#include "hurray/convert.h"

struct HurraySys;
HurrayStatus hurray__convert_file_sys(const char *src, const char *dst,
                                      const HurrayConvertOptions *options,
                                      const struct HurraySys *sys, HurrayError *error);

#endif
