// simt/cuda_bf16.h — stand-in for CUDA's cuda_bf16.h: bfloat16 as 16 bits.
#pragma once
#include <stdint.h>

#include "simt.h"

struct __align__(2) __nv_bfloat16 { uint16_t x; };

static inline float __bfloat162float(__nv_bfloat16 b) { return __uint_as_float((uint32_t)b.x << 16); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {(uint16_t)(u >> 16 | 0x40)};  // NaN stays NaN
    return {(uint16_t)((u + 0x7fff + (u >> 16 & 1)) >> 16)};                  // nearest even
}
