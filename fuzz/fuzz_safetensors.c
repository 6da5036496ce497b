/* Fuzz target: safetensors files (fuzz_formats_common.h). */
#define FUZZ_FORMAT HURRAY_FORMAT_SAFETENSORS
#define FUZZ_SUFFIX ".safetensors"
#include "fuzz_formats_common.h"
