// simt/cuda_fp16.h — stand-in for CUDA's cuda_fp16.h: IEEE half as 16 bits,
// conversions rounding to nearest even (as the device's cvt.rn does).
#pragma once
#include <stdint.h>
#include <string.h>

#include "simt.h"

struct __align__(2) __half { uint16_t x; };
struct __align__(4) __half2 { __half x, y; };

static inline float __half2float(__half h) {
    const uint32_t s = (uint32_t)(h.x & 0x8000) << 16, e = (h.x >> 10) & 31, m = h.x & 1023;
    uint32_t u;
    if (e == 31) u = s | 0x7f800000u | m << 13;                 // inf, NaN
    else if (e) u = s | (e + 112) << 23 | m << 13;              // normal
    else if (!m) u = s;                                         // zero
    else {                                                      // subnormal: m·2^-24
        float f = (float)m * 0x1p-24f;
        memcpy(&u, &f, 4);
        u |= s;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline __half __float2half_rn(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint16_t s = (uint16_t)(u >> 16 & 0x8000);
    const uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) return {(uint16_t)(s | 0x7c00 | (a > 0x7f800000u ? 0x200 | (a >> 13 & 0x3ff) : 0))};
    if (a >= 0x477ff000u) return {(uint16_t)(s | 0x7c00)};       // rounds to >= 65520: inf
    if (a < 0x38800000u) {                                       // below 2^-14: subnormal half
        const float v = __uint_as_float(a) * 0x1p24f;            // exact: in units of 2^-24
        const float r = __builtin_rintf(v);                      // nearest even
        return {(uint16_t)(s | (uint16_t)r)};
    }
    const uint32_t e = (a >> 23) - 112, m = a & 0x7fffff;
    uint32_t h = e << 10 | m >> 13;
    const uint32_t rest = m & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;     // carries into the exponent correctly
    return {(uint16_t)(s | h)};
}

static inline __half __ushort_as_half(unsigned short v) { return {v}; }
static inline unsigned short __half_as_ushort(__half h) { return h.x; }
static inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a), __float2half_rn(b)}; }
static inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
static inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
