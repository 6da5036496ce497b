/*
 * The block formats of block-coded quantization (docs/spec/quantization.md,
 * "Block-coded formats"): elements and bytes per block, and names. The
 * numbers are ggml's type numbers; the sizes are ggml's (GGML_QUANT_SIZES).
 */
#include <string.h>

#include "hurray/descriptor.h"

typedef struct BlockFormat {
  const char *name;
  uint32_t elements;
  uint32_t bytes;
} BlockFormat;

static const BlockFormat formats[] = {
    [HURRAY_BLOCK_GGML_Q4_1] = {"ggml_q4_1", 32, 20},
    [HURRAY_BLOCK_GGML_Q5_0] = {"ggml_q5_0", 32, 22},
    [HURRAY_BLOCK_GGML_Q5_1] = {"ggml_q5_1", 32, 24},
    [HURRAY_BLOCK_GGML_Q2_K] = {"ggml_q2_k", 256, 84},
    [HURRAY_BLOCK_GGML_Q3_K] = {"ggml_q3_k", 256, 110},
    [HURRAY_BLOCK_GGML_Q4_K] = {"ggml_q4_k", 256, 144},
    [HURRAY_BLOCK_GGML_Q5_K] = {"ggml_q5_k", 256, 176},
    [HURRAY_BLOCK_GGML_Q6_K] = {"ggml_q6_k", 256, 210},
    [HURRAY_BLOCK_GGML_Q8_K] = {"ggml_q8_k", 256, 292},
    [HURRAY_BLOCK_GGML_IQ2_XXS] = {"ggml_iq2_xxs", 256, 66},
    [HURRAY_BLOCK_GGML_IQ2_XS] = {"ggml_iq2_xs", 256, 74},
    [HURRAY_BLOCK_GGML_IQ3_XXS] = {"ggml_iq3_xxs", 256, 98},
    [HURRAY_BLOCK_GGML_IQ1_S] = {"ggml_iq1_s", 256, 50},
    [HURRAY_BLOCK_GGML_IQ4_NL] = {"ggml_iq4_nl", 32, 18},
    [HURRAY_BLOCK_GGML_IQ3_S] = {"ggml_iq3_s", 256, 110},
    [HURRAY_BLOCK_GGML_IQ2_S] = {"ggml_iq2_s", 256, 82},
    [HURRAY_BLOCK_GGML_IQ4_XS] = {"ggml_iq4_xs", 256, 136},
    [HURRAY_BLOCK_GGML_IQ1_M] = {"ggml_iq1_m", 256, 56},
    [HURRAY_BLOCK_GGML_TQ1_0] = {"ggml_tq1_0", 256, 54},
    [HURRAY_BLOCK_GGML_TQ2_0] = {"ggml_tq2_0", 256, 66},
    [HURRAY_BLOCK_GGML_MXFP4] = {"ggml_mxfp4", 32, 17},
    [HURRAY_BLOCK_GGML_NVFP4] = {"ggml_nvfp4", 64, 36},
};

bool hurray_block_format_info(uint32_t format, uint32_t *elements, uint32_t *bytes,
                              const char **name) {
  if (format >= sizeof formats / sizeof formats[0] || formats[format].name == NULL) return false;
  if (elements) *elements = formats[format].elements;
  if (bytes) *bytes = formats[format].bytes;
  if (name) *name = formats[format].name;
  return true;
}

uint32_t hurray_block_format_from_name(const char *name) {
  if (name == NULL) return 0;
  for (uint32_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
    if (formats[f].name != NULL && strcmp(formats[f].name, name) == 0) return f;
  }
  return 0;
}
