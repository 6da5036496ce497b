/* Fuzz target: GGUF files (fuzz_formats_common.h). */
#define FUZZ_FORMAT HURRAY_FORMAT_GGUF
#define FUZZ_SUFFIX ".gguf"
#include "fuzz_formats_common.h"
