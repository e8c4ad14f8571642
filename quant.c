// quant.c — see quant.h. Block layouts are ggml's, byte for byte.
#include "quant.h"

#include <stdio.h>

// Every type id ggml has assigned and still defines. Sizes: block_bytes per
// `block` elements. compute/dot_type are filled for the types quill runs.
static const qtype_info QTYPES[Q_TYPE_COUNT] = {
    [0] = {"F32", 1, 4, 1, Q_F32},
    [1] = {"F16", 1, 2, 1, Q_F16},
    [2] = {"Q4_0", 32, 18, 1, Q_Q8_0},
    [3] = {"Q4_1", 32, 20, 1, Q_Q8_1},
    [6] = {"Q5_0", 32, 22, 1, Q_Q8_0},
    [7] = {"Q5_1", 32, 24, 1, Q_Q8_1},
    [8] = {"Q8_0", 32, 34, 1, Q_Q8_0},
    [9] = {"Q8_1", 32, 36, 0, 0},
    [10] = {"Q2_K", 256, 84, 0, 0},
    [11] = {"Q3_K", 256, 110, 0, 0},
    [12] = {"Q4_K", 256, 144, 1, Q_Q8_K},
    [13] = {"Q5_K", 256, 176, 1, Q_Q8_K},
    [14] = {"Q6_K", 256, 210, 1, Q_Q8_K},
    [15] = {"Q8_K", 256, 292, 0, 0},
    [16] = {"IQ2_XXS", 256, 66, 0, 0},
    [17] = {"IQ2_XS", 256, 74, 0, 0},
    [18] = {"IQ3_XXS", 256, 98, 0, 0},
    [19] = {"IQ1_S", 256, 50, 0, 0},
    [20] = {"IQ4_NL", 32, 18, 0, 0},
    [21] = {"IQ3_S", 256, 110, 0, 0},
    [22] = {"IQ2_S", 256, 82, 0, 0},
    [23] = {"IQ4_XS", 256, 136, 0, 0},
    [24] = {"I8", 1, 1, 0, 0},
    [25] = {"I16", 1, 2, 0, 0},
    [26] = {"I32", 1, 4, 0, 0},
    [27] = {"I64", 1, 8, 0, 0},
    [28] = {"F64", 1, 8, 0, 0},
    [29] = {"IQ1_M", 256, 56, 0, 0},
    [30] = {"BF16", 1, 2, 1, Q_BF16},
    [34] = {"TQ1_0", 256, 54, 0, 0},
    [35] = {"TQ2_0", 256, 66, 0, 0},
    [39] = {"MXFP4", 32, 17, 0, 0},
};

const qtype_info *qtype_get(uint32_t type) {
    if (type >= Q_TYPE_COUNT || !QTYPES[type].name) return NULL;
    return &QTYPES[type];
}

const char *qtype_name(uint32_t type, char buf[16]) {
    const qtype_info *q = qtype_get(type);
    if (q) return q->name;
    snprintf(buf, 16, "type %u", type);
    return buf;
}

size_t qtype_row_bytes(uint32_t type, int64_t n) {
    const qtype_info *q = qtype_get(type);
    return q ? (size_t)(n / q->block) * q->block_bytes : 0;
}
