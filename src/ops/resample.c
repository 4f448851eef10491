/*
 * resample.c: Pillow-exact antialiased bilinear and bicubic resampling, fused with flip,
 * normalisation, dtype conversion and layout, writing straight into a batch
 * slot. See ops.h for the geometry model.
 *
 * Exactness matters here: torchvision's transforms run Pillow's resampler,
 * and users compare accuracy. So the weights, their 22-bit fixed-point
 * rounding, the window bounds and the 8-bit intermediate between the two
 * passes follow Pillow's ImagingResample, and normalisation uses the same
 * float32 operations as ToTensor + Normalize (through a lookup table: the
 * resampled value is one of 256 levels).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ops/ops.h"
#include "ops/window.h"

#define PRECISION_BITS STK_PRECISION_BITS

/* The horizontal pass, the vertical pass and the store have AVX2 and
 * AVX-512 versions on x86-64, chosen at run time with __builtin_cpu_supports
 * (not ifuncs, so that they also run under the sanitizers), and NEON
 * versions on (little-endian) aarch64, where NEON is baseline: level 1 there,
 * always available, kept behind the same switch so that the tests can lower
 * it to the portable code and compare. Everywhere else, or built with
 * STK_RESAMPLE_PORTABLE, the portable C versions run: plain loops that
 * compilers vectorise where the access pattern allows. The NEON versions are
 * tested byte for byte under qemu (make test-neon); their speed has not been
 * measured (no ARM machine). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(STK_RESAMPLE_PORTABLE)
#define STK__X86 1
#include <immintrin.h>
#define STK__AVX2 __attribute__((target("avx2")))
#define STK__AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vbmi")))
#else
#define STK__X86 0
#endif
#if STK__STORE_PLANES && !defined(STK_RESAMPLE_PORTABLE)
#define STK__NEON 1
#include <arm_neon.h>
#else
#define STK__NEON 0
#endif

static int isa_supported(void) {
#if STK__X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vbmi"))
    return 2;
  if (__builtin_cpu_supports("avx2")) return 1;
#elif STK__NEON
  return 1;
#endif
  return 0;
}

/* Relaxed atomics: worker threads read it, tests set it between runs. */
static _Atomic int isa_level = -1;

int stk__resample_isa(int want) {
  int l = atomic_load_explicit(&isa_level, memory_order_relaxed);
  if (l < 0 || want >= 0) {
    int have = isa_supported();
    l = want < 0 || want > have ? have : want;
    atomic_store_explicit(&isa_level, l, memory_order_relaxed);
  }
  return l;
}

size_t stk__dtype_size(stk_dtype t) {
  switch (t) {
    case STK_DTYPE_FLOAT32: return 4;
    case STK_DTYPE_FLOAT16:
    case STK_DTYPE_BFLOAT16: return 2;
    case STK_DTYPE_UINT8: return 1;
  }
  return 0;
}

static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    int shift = 14 - exp;
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into the exponent: correct */
  return (uint16_t)h;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);                                           /* nearest even */
  return (uint16_t)(x >> 16);
}

void stk__store_init(stk__store *s, stk_dtype dtype, stk_layout layout, int w, int h,
                     const float mean[3], const float std[3]) {
  s->dtype = dtype;
  s->layout = layout;
  s->w = w;
  s->h = h;
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) {
      /* ToTensor: float32 v / 255; Normalize: (x - mean) / std, in float32. */
      volatile float x = (float)v / 255.0f; /* keep float32 rounding at each step */
      volatile float y = (x - mean[c]) / std[c];
      s->lut_f32[c][v] = y;
      s->lut_u16[c][v] = dtype == STK_DTYPE_BFLOAT16 ? f32_to_bf16(y) : f32_to_f16(y);
    }
#if STK__STORE_PLANES
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) {
      uint32_t f;
      memcpy(&f, &s->lut_f32[c][v], 4);
      for (int b = 0; b < 4; b++) s->plane_f32[c][b][v] = (uint8_t)(f >> (8 * b));
      for (int b = 0; b < 2; b++) s->plane_u16[c][b][v] = (uint8_t)(s->lut_u16[c][v] >> (8 * b));
    }
#endif
}

void stk__store_value(stk_dtype dtype, float v, void *dst) {
  switch (dtype) {
    case STK_DTYPE_FLOAT32: memcpy(dst, &v, 4); break;
    case STK_DTYPE_FLOAT16: {
      uint16_t b = f32_to_f16(v);
      memcpy(dst, &b, 2);
      break;
    }
    case STK_DTYPE_BFLOAT16: {
      uint16_t b = f32_to_bf16(v);
      memcpy(dst, &b, 2);
      break;
    }
    case STK_DTYPE_UINT8: {
      float r = nearbyintf(v);
      *(uint8_t *)dst = !(r > 0.0f) ? 0 : r >= 255.0f ? 255 : (uint8_t)r;
      break;
    }
  }
}

void stk__axis_window(const stk__axis *a, int i, int *first, int *count, int *ksize) {
  stk__window(a->filter, a->in0 - a->lo, a->scale, a->hi - a->lo, i, first, count);
  if (ksize) *ksize = stk__window_ksize(a->filter, a->scale);
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis, in the
 * coordinates of the source window [lo, hi): window starts are stored
 * relative to lo. */
static int plan_axis(const stk__axis *a, stk__buf *kb, stk__buf *bb, int *ksize_out) {
  int ksize = stk__window_ksize(a->filter, a->scale), xmin, xmax;
  if (stk__buf_reserve(kb, (size_t)a->out * ksize * sizeof(int32_t)) ||
      stk__buf_reserve(bb, (size_t)a->out * 2 * sizeof(int32_t)))
    return STK_ENOMEM;
  int32_t *kk = kb->p, *bounds = bb->p;
  for (int xx = 0; xx < a->out; xx++) {
    stk__axis_window(a, xx, &xmin, &xmax, NULL);
    stk__window_weights(a->filter, a->in0 - a->lo, a->scale, xx, xmin, xmax, ksize,
                        kk + (size_t)xx * ksize);
    bounds[xx * 2] = xmin;
    bounds[xx * 2 + 1] = xmax;
  }
  *ksize_out = ksize;
  return STK_OK;
}

/* The SIMD horizontal pass reads a window's pixels 16 bytes (5 pixels) at a
 * time and computes 4 output pixels per step, one 32-bit lane per channel
 * (R, G, B, 0) and pixel: Pillow's 22-bit weights times 8-bit levels need
 * 32-bit products, so 16-bit lanes (Pillow-SIMD's) would change the output. */
#define HV_TAPS 5   /* taps per 16-byte load */
#define HV_MAXKS 20 /* wider windows (downscales over ~8x) stay scalar */

static size_t hvec_table_offset(const stk__resampler *r) {
  /* after the ksize-wide table, 64-byte aligned within the buffer */
  return ((size_t)r->g.x.out * r->ksx * sizeof(int32_t) + 63) & ~(size_t)63;
}

/* Widens every window of the x axis to hks taps (the axis's widest count),
 * moved left where it would pass the end of the row (src_x1), its weights
 * shifted to match and zero elsewhere: a zero weight adds nothing, so the
 * sums, and the output, are the scalar pass's. Output pixels whose 16-byte
 * loads would pass the row's end are left to the scalar pass. */
static int plan_hvec(stk__resampler *r) {
  r->hks = r->hvec = 0;
  if (stk__resample_isa(-1) == 0) return STK_OK;
  int W = r->g.x.out, ksx = r->ksx, cols = r->src_x1 - r->src_x0;
  const int32_t *bx = r->bx.p;
  int ks = 1;
  for (int x = 0; x < W; x++)
    if (bx[x * 2 + 1] > ks) ks = bx[x * 2 + 1];
  if (ks > HV_MAXKS || cols < ks) return STK_OK;
  int nch = (ks + HV_TAPS - 1) / HV_TAPS, base = bx[0];
  int nv = 0; /* windows start in order, so the safe pixels are a prefix */
  while (nv < W) {
    int a = bx[nv * 2] - base;
    if (a > cols - ks) a = cols - ks;
    if ((a + HV_TAPS * (nch - 1)) * 3 + 16 > cols * 3) break;
    nv++;
  }
  nv &= ~3;
  if (!nv) return STK_OK;
  size_t koff = hvec_table_offset(r), ksize = (size_t)nv * ks * 4 * sizeof(int32_t);
  if (stk__buf_reserve(&r->kx, koff + ksize) ||
      stk__buf_reserve(&r->bx, ((size_t)W * 2 + nv) * sizeof(int32_t)))
    return STK_ENOMEM;
  bx = r->bx.p;
  const int32_t *kx = r->kx.p;
  int32_t *kv = (int32_t *)((uint8_t *)r->kx.p + koff), *off = (int32_t *)r->bx.p + (size_t)W * 2;
  for (int x = 0; x < nv; x++) {
    int b = bx[x * 2] - base, n = bx[x * 2 + 1], a = b > cols - ks ? cols - ks : b;
    off[x] = a * 3;
    /* group x / 4, tap t: 4 pixels of 4 lanes (R, G, B, unused) */
    int32_t *g = kv + (size_t)(x / 4) * ks * 16 + (x % 4) * 4;
    for (int t = 0; t < ks; t++) {
      int i = t - (b - a);
      int32_t k = i >= 0 && i < n ? kx[(size_t)x * ksx + i] : 0;
      for (int l = 0; l < 4; l++) g[t * 16 + l] = k;
    }
  }
  r->hks = ks;
  r->hvec = nv;
  return STK_OK;
}

int stk__resampler_plan(stk__resampler *r, const stk__geom *g, stk__rect *need) {
  if (g->x.out <= 0 || g->y.out <= 0 || g->x.hi <= g->x.lo || g->y.hi <= g->y.lo)
    return STK_EINVAL;
  if ((unsigned)g->x.filter > STK_FILTER_BICUBIC || (unsigned)g->y.filter > STK_FILTER_BICUBIC)
    return STK_EINVAL;
  int rc = plan_axis(&g->x, &r->kx, &r->bx, &r->ksx);
  if (!rc) rc = plan_axis(&g->y, &r->ky, &r->by, &r->ksy);
  if (rc) return rc;
  r->g = *g;
  const int32_t *bx = r->bx.p, *by = r->by.p;
  /* Window starts grow with the output index, so the first and last
   * windows bound what is read. */
  int nx = g->x.out, ny = g->y.out;
  r->src_x0 = g->x.lo + bx[0];
  r->src_x1 = g->x.lo + bx[(nx - 1) * 2] + bx[(nx - 1) * 2 + 1];
  r->src_y0 = g->y.lo + by[0];
  r->src_y1 = g->y.lo + by[(ny - 1) * 2] + by[(ny - 1) * 2 + 1];
  if (r->src_x1 <= r->src_x0) r->src_x1 = r->src_x0 + 1;
  if (r->src_y1 <= r->src_y0) r->src_y1 = r->src_y0 + 1;
  need->x = r->src_x0;
  need->y = r->src_y0;
  need->w = r->src_x1 - r->src_x0;
  need->h = r->src_y1 - r->src_y0;
  return plan_hvec(r);
}

static inline uint8_t clip8(int32_t v) { return (uint8_t)stk__clip8(v); }

/* ---- store: one output row of 8-bit levels into the batch image ----
 * Rows arrive already mirrored when the image is flipped (the horizontal
 * pass writes them mirrored), so every store runs forwards. */

/* Portable: plain forward loops, which compilers vectorise (the uint8 and
 * float16 deinterleaves; the float32 lookups where the target has gathers). */
static void store_row_c(const stk__store *st, const uint8_t *restrict lv, int y, void *dst) {
  int W = st->w;
  size_t plane = (size_t)W * st->h;
  if (st->layout == STK_LAYOUT_NCHW) {
    for (int c = 0; c < 3; c++) {
      size_t o = c * plane + (size_t)y * W;
      switch (st->dtype) {
        case STK_DTYPE_FLOAT32: {
          float *restrict d = (float *)dst + o;
          const float *lut = st->lut_f32[c];
          for (int x = 0; x < W; x++) d[x] = lut[lv[x * 3 + c]];
          break;
        }
        case STK_DTYPE_FLOAT16:
        case STK_DTYPE_BFLOAT16: {
          uint16_t *restrict d = (uint16_t *)dst + o;
          const uint16_t *lut = st->lut_u16[c];
          for (int x = 0; x < W; x++) d[x] = lut[lv[x * 3 + c]];
          break;
        }
        case STK_DTYPE_UINT8: {
          uint8_t *restrict d = (uint8_t *)dst + o;
          for (int x = 0; x < W; x++) d[x] = lv[x * 3 + c];
          break;
        }
      }
    }
    return;
  }
  size_t o = (size_t)y * W * 3;
  switch (st->dtype) {
    case STK_DTYPE_FLOAT32: {
      float *restrict d = (float *)dst + o;
      for (int x = 0; x < W; x++) {
        d[x * 3] = st->lut_f32[0][lv[x * 3]];
        d[x * 3 + 1] = st->lut_f32[1][lv[x * 3 + 1]];
        d[x * 3 + 2] = st->lut_f32[2][lv[x * 3 + 2]];
      }
      break;
    }
    case STK_DTYPE_FLOAT16:
    case STK_DTYPE_BFLOAT16: {
      uint16_t *restrict d = (uint16_t *)dst + o;
      for (int x = 0; x < W; x++) {
        d[x * 3] = st->lut_u16[0][lv[x * 3]];
        d[x * 3 + 1] = st->lut_u16[1][lv[x * 3 + 1]];
        d[x * 3 + 2] = st->lut_u16[2][lv[x * 3 + 2]];
      }
      break;
    }
    case STK_DTYPE_UINT8: memcpy((uint8_t *)dst + o, lv, (size_t)W * 3); break;
  }
}

#if STK__X86
/* The float16/bfloat16 tables are gathered 32 bits at a time from 2 bytes
 * before the entry, which puts the entry in the high half: every read stays
 * inside the store (lut_f32 lies before lut_u16, the last entry ends it). */
#define U16_GATHER_BASE(st) ((const void *)((const uint8_t *)(st)->lut_u16 - 2))

/* AVX2: 8 pixels (24 levels) a step, the channels split with byte shuffles,
 * the tables read with gathers; the row's last few pixels go to the
 * portable code, whose results are the same. */
STK__AVX2 static void store_row_avx2(const stk__store *st, const uint8_t *lv, int y, void *dst) {
  int W = st->w, x = 0, W8 = W & ~7;
  size_t plane = (size_t)W * st->h;
  const void *u16 = U16_GATHER_BASE(st);
  if (st->layout == STK_LAYOUT_NCHW) {
    size_t o = (size_t)y * W;
    __m128i sl[3], sh[3]; /* channel c of 8 pixels from bytes 0-15 and 16-23 */
    for (int c = 0; c < 3; c++) {
      uint8_t ml[16], mh[16];
      for (int j = 0; j < 16; j++) {
        int b = j * 3 + c;
        ml[j] = j < 8 && b < 16 ? (uint8_t)b : 0x80;
        mh[j] = j < 8 && b >= 16 ? (uint8_t)(b - 16) : 0x80;
      }
      sl[c] = _mm_loadu_si128((const __m128i *)ml);
      sh[c] = _mm_loadu_si128((const __m128i *)mh);
    }
    for (; x < W8; x += 8) {
      __m128i lo = _mm_loadu_si128((const __m128i *)(lv + x * 3));
      __m128i hi = _mm_loadl_epi64((const __m128i *)(lv + x * 3 + 16));
      for (int c = 0; c < 3; c++) {
        __m128i v8 = _mm_or_si128(_mm_shuffle_epi8(lo, sl[c]), _mm_shuffle_epi8(hi, sh[c]));
        __m256i vi = _mm256_cvtepu8_epi32(v8);
        size_t at = c * plane + o + x;
        switch (st->dtype) {
          case STK_DTYPE_FLOAT32:
            _mm256_storeu_ps((float *)dst + at, _mm256_i32gather_ps(st->lut_f32[c], vi, 4));
            break;
          case STK_DTYPE_FLOAT16:
          case STK_DTYPE_BFLOAT16: {
            __m256i g = _mm256_i32gather_epi32((const int *)u16, _mm256_add_epi32(vi, _mm256_set1_epi32(c * 256)), 2);
            g = _mm256_srli_epi32(g, 16);
            g = _mm256_permute4x64_epi64(_mm256_packus_epi32(g, g), 0x08);
            _mm_storeu_si128((__m128i *)((uint16_t *)dst + at), _mm256_castsi256_si128(g));
            break;
          }
          case STK_DTYPE_UINT8: _mm_storel_epi64((__m128i *)((uint8_t *)dst + at), v8); break;
        }
      }
    }
    for (int c = 0; c < 3 && x < W; c++) {
      size_t at = c * plane + o;
      for (int i = x; i < W; i++) {
        uint8_t v = lv[i * 3 + c];
        switch (st->dtype) {
          case STK_DTYPE_FLOAT32: ((float *)dst)[at + i] = st->lut_f32[c][v]; break;
          case STK_DTYPE_FLOAT16:
          case STK_DTYPE_BFLOAT16: ((uint16_t *)dst)[at + i] = st->lut_u16[c][v]; break;
          case STK_DTYPE_UINT8: ((uint8_t *)dst)[at + i] = v; break;
        }
      }
    }
    return;
  }
  /* NHWC: the row is 3W values in order; value i reads table i % 3, so the
   * table offsets repeat every 24 values (3 steps of 8). */
  size_t o = (size_t)y * W * 3;
  int n = W * 3, n24 = n / 24 * 24, i = 0;
  if (st->dtype == STK_DTYPE_UINT8) {
    memcpy((uint8_t *)dst + o, lv, (size_t)n);
    return;
  }
  __m256i toff[3];
  for (int k = 0; k < 3; k++) {
    int32_t t[8];
    for (int j = 0; j < 8; j++) t[j] = ((k * 8 + j) % 3) * 256;
    toff[k] = _mm256_loadu_si256((const __m256i *)t);
  }
  for (; i < n24; i += 24)
    for (int k = 0; k < 3; k++) {
      __m256i vi = _mm256_add_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(lv + i + k * 8))), toff[k]);
      if (st->dtype == STK_DTYPE_FLOAT32) {
        _mm256_storeu_ps((float *)dst + o + i + k * 8, _mm256_i32gather_ps(&st->lut_f32[0][0], vi, 4));
      } else {
        __m256i g = _mm256_srli_epi32(_mm256_i32gather_epi32((const int *)u16, vi, 2), 16);
        g = _mm256_permute4x64_epi64(_mm256_packus_epi32(g, g), 0x08);
        _mm_storeu_si128((__m128i *)((uint16_t *)dst + o + i + k * 8), _mm256_castsi256_si128(g));
      }
    }
  for (; i < n; i++) {
    if (st->dtype == STK_DTYPE_FLOAT32)
      ((float *)dst)[o + i] = st->lut_f32[i % 3][lv[i]];
    else
      ((uint16_t *)dst)[o + i] = st->lut_u16[i % 3][lv[i]];
  }
}

/* AVX-512: 16 pixels (48 levels) a step, split into channels with one byte
 * permute; masked loads, gathers and stores finish the row, so no tail
 * loop. */
STK__AVX512 static void store_row_avx512(const stk__store *st, const uint8_t *lv, int y, void *dst) {
  int W = st->w;
  size_t plane = (size_t)W * st->h;
  const void *u16 = U16_GATHER_BASE(st);
  if (st->layout == STK_LAYOUT_NCHW) {
    /* One channel at a time. float32 gathers from the table (a tree of
     * 32-entry permutes measured no faster: the row's stores to the batch,
     * not the lookups, take the time); the 16-bit table is 8 vectors, looked
     * up with 64-entry two-table permutes and blends on the index's high
     * bits, 32 values a step. */
    size_t o = (size_t)y * W;
    for (int c = 0; c < 3; c++) {
      uint8_t perm[64];
      for (int i = 0; i < 64; i++) perm[i] = (uint8_t)((i * 3 + c) & 127); /* byte c of pixel i, 2 vectors */
      const __m512i split = _mm512_loadu_si512(perm);
      if (st->dtype == STK_DTYPE_FLOAT32) {
        float *d = (float *)dst + c * plane + o;
        for (int x = 0; x < W; x += 16) {
          int m = W - x < 16 ? W - x : 16;
          __mmask16 k = (__mmask16)((1u << m) - 1);
          __m512i b = _mm512_maskz_loadu_epi8((1ull << (m * 3)) - 1, lv + x * 3);
          __m512i vi = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(_mm512_permutexvar_epi8(split, b)));
          _mm512_mask_storeu_ps(d + x, k, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, vi, st->lut_f32[c], 4));
        }
      } else if (st->dtype != STK_DTYPE_UINT8) {
        const uint16_t *lut = st->lut_u16[c];
        __m512i t[8];
        for (int i = 0; i < 8; i++) t[i] = _mm512_loadu_si512(lut + i * 32);
        uint16_t *d = (uint16_t *)dst + c * plane + o;
        for (int x = 0; x < W; x += 32) {
          int m = W - x < 32 ? W - x : 32, nb = m * 3;
          __m512i b0 = _mm512_maskz_loadu_epi8(nb >= 64 ? ~0ull : (1ull << nb) - 1, lv + x * 3);
          __m512i b1 = _mm512_maskz_loadu_epi8(nb <= 64 ? 0 : (1ull << (nb - 64)) - 1, lv + x * 3 + 64);
          __m512i vi = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(_mm512_permutex2var_epi8(b0, split, b1)));
          __m512i r0 = _mm512_permutex2var_epi16(t[0], vi, t[1]), r1 = _mm512_permutex2var_epi16(t[2], vi, t[3]);
          __m512i r2 = _mm512_permutex2var_epi16(t[4], vi, t[5]), r3 = _mm512_permutex2var_epi16(t[6], vi, t[7]);
          __mmask32 b6 = _mm512_test_epi16_mask(vi, _mm512_set1_epi16(64));
          __mmask32 b7 = _mm512_test_epi16_mask(vi, _mm512_set1_epi16(128));
          r0 = _mm512_mask_blend_epi16(b6, r0, r1);
          r2 = _mm512_mask_blend_epi16(b6, r2, r3);
          _mm512_mask_storeu_epi16(d + x, (__mmask32)(m == 32 ? ~0u : (1u << m) - 1), _mm512_mask_blend_epi16(b7, r0, r2));
        }
      } else {
        uint8_t *d = (uint8_t *)dst + c * plane + o;
        for (int x = 0; x < W; x += 16) {
          int m = W - x < 16 ? W - x : 16;
          __m512i b = _mm512_maskz_loadu_epi8((1ull << (m * 3)) - 1, lv + x * 3);
          _mm_mask_storeu_epi8(d + x, (__mmask16)((1u << m) - 1), _mm512_castsi512_si128(_mm512_permutexvar_epi8(split, b)));
        }
      }
    }
    return;
  }
  size_t o = (size_t)y * W * 3;
  int n = W * 3;
  if (st->dtype == STK_DTYPE_UINT8) {
    memcpy((uint8_t *)dst + o, lv, (size_t)n);
    return;
  }
  __m512i toff[3];
  for (int c = 0; c < 3; c++) {
    int32_t t[16];
    for (int j = 0; j < 16; j++) t[j] = ((c * 16 + j) % 3) * 256;
    toff[c] = _mm512_loadu_si512(t);
  }
  for (int i = 0; i < n; i += 48) {
    int m = n - i < 48 ? n - i : 48;
    __m512i v = _mm512_maskz_loadu_epi8(m == 48 ? 0xffffffffffffull : (1ull << m) - 1, lv + i);
    for (int c = 0; c < 3; c++) {
      int mc = m - c * 16;
      if (mc <= 0) break;
      __mmask16 k = (__mmask16)(mc >= 16 ? 0xffff : (1u << mc) - 1);
      __m512i vi = _mm512_add_epi32(_mm512_cvtepu8_epi32(_mm512_castsi512_si128(v)), toff[c]);
      v = _mm512_alignr_epi64(v, v, 2); /* the next 16 levels down to lane 0 */
      if (st->dtype == STK_DTYPE_FLOAT32) {
        _mm512_mask_storeu_ps((float *)dst + o + i + c * 16, k,
                              _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, vi, &st->lut_f32[0][0], 4));
      } else {
        __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, vi, u16, 2);
        _mm256_mask_storeu_epi16((uint16_t *)dst + o + i + c * 16, k, _mm512_cvtepi32_epi16(_mm512_srli_epi32(g, 16)));
      }
    }
  }
}
#endif

#if STK__NEON
/* NEON has no gather, so the store looks its tables up with byte-table
 * lookups: every table is kept split into byte planes (stk__store_init),
 * and one 256-entry plane is looked up 16 levels at a time as four 64-byte
 * steps, TBL then three TBX, each on the index less 64 more. A level outside
 * a step's 64 entries is out of range there (one below them wraps round to
 * 192 or more), which TBX answers by leaving the byte as it was. */
static inline uint8x16_t lut256_neon(const uint8_t *plane, uint8x16_t i) {
  const uint8x16_t k64 = vdupq_n_u8(64);
  uint8x16_t r = vqtbl4q_u8(vld1q_u8_x4(plane), i);
  i = vsubq_u8(i, k64);
  r = vqtbx4q_u8(r, vld1q_u8_x4(plane + 64), i);
  i = vsubq_u8(i, k64);
  r = vqtbx4q_u8(r, vld1q_u8_x4(plane + 128), i);
  i = vsubq_u8(i, k64);
  return vqtbx4q_u8(r, vld1q_u8_x4(plane + 192), i);
}

/* 16 pixels a step: LD3 splits the 48 levels into channels; the looked-up
 * byte planes are put back together by the interleaving stores (ST2 and ST4
 * write the planes of a value side by side: little-endian 16- and 32-bit
 * values) or, for NHWC, by zips into whole values and ST3; the row's last
 * few pixels go to scalar code with the same results. */
static void store_row_neon(const stk__store *st, const uint8_t *lv, int y, void *dst) {
  int W = st->w, W16 = W & ~15, x = 0;
  size_t plane = (size_t)W * st->h;
  if (st->layout == STK_LAYOUT_NCHW) {
    size_t o = (size_t)y * W;
    for (; x < W16; x += 16) {
      uint8x16x3_t v = vld3q_u8(lv + x * 3);
      for (int c = 0; c < 3; c++) {
        size_t at = c * plane + o + x;
        switch (st->dtype) {
          case STK_DTYPE_FLOAT32: {
            uint8x16x4_t b;
            for (int k = 0; k < 4; k++) b.val[k] = lut256_neon(st->plane_f32[c][k], v.val[c]);
            vst4q_u8((uint8_t *)((float *)dst + at), b);
            break;
          }
          case STK_DTYPE_FLOAT16:
          case STK_DTYPE_BFLOAT16: {
            uint8x16x2_t b;
            for (int k = 0; k < 2; k++) b.val[k] = lut256_neon(st->plane_u16[c][k], v.val[c]);
            vst2q_u8((uint8_t *)((uint16_t *)dst + at), b);
            break;
          }
          case STK_DTYPE_UINT8: vst1q_u8((uint8_t *)dst + at, v.val[c]); break;
        }
      }
    }
    for (int c = 0; c < 3 && x < W; c++) {
      size_t at = c * plane + o;
      for (int i = x; i < W; i++) {
        uint8_t lvl = lv[i * 3 + c];
        switch (st->dtype) {
          case STK_DTYPE_FLOAT32: ((float *)dst)[at + i] = st->lut_f32[c][lvl]; break;
          case STK_DTYPE_FLOAT16:
          case STK_DTYPE_BFLOAT16: ((uint16_t *)dst)[at + i] = st->lut_u16[c][lvl]; break;
          case STK_DTYPE_UINT8: ((uint8_t *)dst)[at + i] = lvl; break;
        }
      }
    }
    return;
  }
  /* NHWC: the same per-channel lookups, then the channels interleaved again */
  size_t o = (size_t)y * W * 3;
  if (st->dtype == STK_DTYPE_UINT8) {
    memcpy((uint8_t *)dst + o, lv, (size_t)W * 3);
    return;
  }
  for (; x < W16; x += 16) {
    uint8x16x3_t v = vld3q_u8(lv + x * 3);
    if (st->dtype == STK_DTYPE_FLOAT32) {
      /* bytes 0-1 and 2-3 zipped into 16-bit halves, the halves zipped into
       * float32: q[c][k] holds channel c of pixels 4k..4k+3 */
      uint32x4_t q[3][4];
      for (int c = 0; c < 3; c++) {
        uint8x16_t b0 = lut256_neon(st->plane_f32[c][0], v.val[c]), b1 = lut256_neon(st->plane_f32[c][1], v.val[c]);
        uint8x16_t b2 = lut256_neon(st->plane_f32[c][2], v.val[c]), b3 = lut256_neon(st->plane_f32[c][3], v.val[c]);
        uint16x8_t l01 = vreinterpretq_u16_u8(vzip1q_u8(b0, b1)), h01 = vreinterpretq_u16_u8(vzip2q_u8(b0, b1));
        uint16x8_t l23 = vreinterpretq_u16_u8(vzip1q_u8(b2, b3)), h23 = vreinterpretq_u16_u8(vzip2q_u8(b2, b3));
        q[c][0] = vreinterpretq_u32_u16(vzip1q_u16(l01, l23));
        q[c][1] = vreinterpretq_u32_u16(vzip2q_u16(l01, l23));
        q[c][2] = vreinterpretq_u32_u16(vzip1q_u16(h01, h23));
        q[c][3] = vreinterpretq_u32_u16(vzip2q_u16(h01, h23));
      }
      uint32_t *d = (uint32_t *)((float *)dst + o + (size_t)x * 3);
      for (int k = 0; k < 4; k++) {
        uint32x4x3_t w = {{q[0][k], q[1][k], q[2][k]}};
        vst3q_u32(d + k * 12, w);
      }
    } else {
      uint16x8_t lo[3], hi[3]; /* channel c of pixels 0-7 and 8-15 */
      for (int c = 0; c < 3; c++) {
        uint8x16_t b0 = lut256_neon(st->plane_u16[c][0], v.val[c]), b1 = lut256_neon(st->plane_u16[c][1], v.val[c]);
        lo[c] = vreinterpretq_u16_u8(vzip1q_u8(b0, b1));
        hi[c] = vreinterpretq_u16_u8(vzip2q_u8(b0, b1));
      }
      uint16_t *d = (uint16_t *)dst + o + (size_t)x * 3;
      uint16x8x3_t wl = {{lo[0], lo[1], lo[2]}}, wh = {{hi[0], hi[1], hi[2]}};
      vst3q_u16(d, wl);
      vst3q_u16(d + 24, wh);
    }
  }
  for (int i = x * 3; i < W * 3; i++) {
    if (st->dtype == STK_DTYPE_FLOAT32)
      ((float *)dst)[o + i] = st->lut_f32[i % 3][lv[i]];
    else
      ((uint16_t *)dst)[o + i] = st->lut_u16[i % 3][lv[i]];
  }
}
#endif

static void store_row(const stk__store *st, const uint8_t *lv, int y, void *dst) {
#if STK__X86
  switch (stk__resample_isa(-1)) {
    case 2: store_row_avx512(st, lv, y, dst); return;
    case 1: store_row_avx2(st, lv, y, dst); return;
    default: break;
  }
#elif STK__NEON
  if (stk__resample_isa(-1)) {
    store_row_neon(st, lv, y, dst);
    return;
  }
#endif
  store_row_c(st, lv, y, dst);
}

void stk__store_tile(const stk__store *st, const uint8_t *tile, void *dst) {
  for (int y = 0; y < st->h; y++) store_row(st, tile + (size_t)y * st->w * 3, y, dst);
}

/* ---- horizontal pass: one row of W output pixels from an RGB row ---- */

/* Scalar: output pixels [from, W) of a row whose pixel 0 is window offset
 * `base`, written mirrored when flip is set. Windows are 2 to 5 taps for the
 * usual scale factors (bilinear; bicubic's are 4 to 9, the loop); those get
 * unrolled bodies. */
static void hpass_row_c(const uint8_t *in, int base, uint8_t *out, int W, const int32_t *kx,
                        const int32_t *bx, int ksx, int flip, int from) {
  for (int xx = from; xx < W; xx++) {
    const int32_t *k = kx + (size_t)xx * ksx;
    int n = bx[xx * 2 + 1];
    const uint8_t *p = in + (size_t)(bx[xx * 2] - base) * 3;
    int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
#define TAP(i) s0 += p[(i) * 3] * k[i], s1 += p[(i) * 3 + 1] * k[i], s2 += p[(i) * 3 + 2] * k[i]
    switch (n) {
      case 2: TAP(0); TAP(1); break;
      case 3: TAP(0); TAP(1); TAP(2); break;
      case 4: TAP(0); TAP(1); TAP(2); TAP(3); break;
      case 5: TAP(0); TAP(1); TAP(2); TAP(3); TAP(4); break;
      default:
        for (int i = 0; i < n; i++) TAP(i);
    }
#undef TAP
    uint8_t *o = out + (size_t)(flip ? W - 1 - xx : xx) * 3;
    o[0] = clip8(s0);
    o[1] = clip8(s1);
    o[2] = clip8(s2);
  }
}

#if STK__X86 || STK__NEON
/* Byte shuffles: tap t of a 16-byte load (its bytes 3t..3t+2) into the three
 * 32-bit lanes R, G, B; the fourth lane 0 (PSHUFB zeroes a byte whose index
 * has the high bit set, NEON's TBL one whose index is out of range: 0x80
 * serves both). */
static const uint8_t HV_TAP_SHUF[HV_TAPS][16] = {
#define S(t) {3 * t, 0x80, 0x80, 0x80, 3 * t + 1, 0x80, 0x80, 0x80, 3 * t + 2, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80}
    S(0), S(1), S(2), S(3), S(4)
#undef S
};
/* 4 pixels of 4 bytes (R, G, B, 0) to 12 bytes, in order or mirrored */
static const uint8_t HV_PACK[2][16] = {
    {0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 0x80, 0x80, 0x80, 0x80},
    {12, 13, 14, 8, 9, 10, 4, 5, 6, 0, 1, 2, 0x80, 0x80, 0x80, 0x80}};
#endif

#if STK__X86
/* The sums of 4 output pixels from their widened windows (plan_hvec):
 * 16-byte loads of each window, one byte shuffle and one 32-bit multiply-add
 * per tap. KS is a constant in the common cases, so the loops unroll. */
static inline __attribute__((always_inline, target("avx2"))) void
hv4_avx2(const uint8_t *in, const int32_t *off, const int32_t *kv, int ks, __m256i *a01, __m256i *a23) {
  const __m256i r = _mm256_set1_epi32(1 << (PRECISION_BITS - 1));
  __m256i s01 = r, s23 = r;
  for (int c0 = 0; c0 < ks; c0 += HV_TAPS) {
    const uint8_t *p = in + c0 * 3;
    __m256i w01 = _mm256_loadu2_m128i((const __m128i *)(p + off[1]), (const __m128i *)(p + off[0]));
    __m256i w23 = _mm256_loadu2_m128i((const __m128i *)(p + off[3]), (const __m128i *)(p + off[2]));
    for (int t = c0; t < ks && t < c0 + HV_TAPS; t++) {
      __m256i sh = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)HV_TAP_SHUF[t - c0]));
      const int32_t *k = kv + t * 16;
      s01 = _mm256_add_epi32(s01, _mm256_mullo_epi32(_mm256_shuffle_epi8(w01, sh), _mm256_loadu_si256((const __m256i *)k)));
      s23 = _mm256_add_epi32(s23, _mm256_mullo_epi32(_mm256_shuffle_epi8(w23, sh), _mm256_loadu_si256((const __m256i *)(k + 8))));
    }
  }
  *a01 = s01;
  *a23 = s23;
}

static inline __attribute__((always_inline, target("avx2"))) void
hv_avx2_loop(const uint8_t *in, uint8_t *out, int W, const int32_t *off, const int32_t *kv, int ks, int nv, int flip) {
  const __m128i pack = _mm_loadu_si128((const __m128i *)HV_PACK[flip]);
  for (int x = 0; x < nv; x += 4, off += 4, kv += ks * 16) {
    __m256i a, b;
    hv4_avx2(in, off, kv, ks, &a, &b);
    /* clip8: >> 22, then the two saturating packs clamp to 0..255 */
    a = _mm256_srai_epi32(a, PRECISION_BITS);
    b = _mm256_srai_epi32(b, PRECISION_BITS);
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(a, b), _mm256_setzero_si256());
    /* lanes hold pixels (0, 2) and (1, 3): interleave to 0, 1, 2, 3 */
    __m128i q = _mm_unpacklo_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    q = _mm_shuffle_epi8(q, pack);
    uint8_t *o = out + (size_t)(flip ? W - 4 - x : x) * 3;
    _mm_storel_epi64((__m128i *)o, q);
    uint32_t last = (uint32_t)_mm_extract_epi32(q, 2);
    memcpy(o + 8, &last, 4);
  }
}

STK__AVX2 static void hpass_avx2(const uint8_t *in, uint8_t *out, int W, const int32_t *off,
                                 const int32_t *kv, int ks, int nv, int flip) {
  switch (ks) { /* fixed sizes for the common windows: the tap loops unroll */
    case 2: hv_avx2_loop(in, out, W, off, kv, 2, nv, flip); break;
    case 3: hv_avx2_loop(in, out, W, off, kv, 3, nv, flip); break;
    case 4: hv_avx2_loop(in, out, W, off, kv, 4, nv, flip); break;
    case 5: hv_avx2_loop(in, out, W, off, kv, 5, nv, flip); break;
    default: hv_avx2_loop(in, out, W, off, kv, ks, nv, flip); break;
  }
}

static inline __attribute__((always_inline, target("avx2,avx512f,avx512bw,avx512vl,avx512vbmi"))) void
hv_avx512_loop(const uint8_t *in, uint8_t *out, int W, const int32_t *off, const int32_t *kv, int ks, int nv, int flip) {
  const __m128i pack = _mm_loadu_si128((const __m128i *)HV_PACK[flip]);
  const __m512i r = _mm512_set1_epi32(1 << (PRECISION_BITS - 1)), zero = _mm512_setzero_si512();
  for (int x = 0; x < nv; x += 4, off += 4, kv += ks * 16) {
    __m512i s = r;
    for (int c0 = 0; c0 < ks; c0 += HV_TAPS) {
      const uint8_t *p = in + c0 * 3;
      __m512i w = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + off[0])));
      w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + off[1])), 1);
      w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + off[2])), 2);
      w = _mm512_inserti32x4(w, _mm_loadu_si128((const __m128i *)(p + off[3])), 3);
      for (int t = c0; t < ks && t < c0 + HV_TAPS; t++) {
        __m512i sh = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)HV_TAP_SHUF[t - c0]));
        s = _mm512_add_epi32(s, _mm512_mullo_epi32(_mm512_shuffle_epi8(w, sh), _mm512_loadu_si512(kv + t * 16)));
      }
    }
    /* clip8: >> 22, at least 0, then the unsigned saturating narrow caps 255 */
    s = _mm512_max_epi32(_mm512_srai_epi32(s, PRECISION_BITS), zero);
    __m128i q = _mm_shuffle_epi8(_mm512_cvtusepi32_epi8(s), pack);
    _mm_mask_storeu_epi8(out + (size_t)(flip ? W - 4 - x : x) * 3, 0x0fff, q);
  }
}

STK__AVX512 static void hpass_avx512(const uint8_t *in, uint8_t *out, int W, const int32_t *off,
                                     const int32_t *kv, int ks, int nv, int flip) {
  switch (ks) {
    case 2: hv_avx512_loop(in, out, W, off, kv, 2, nv, flip); break;
    case 3: hv_avx512_loop(in, out, W, off, kv, 3, nv, flip); break;
    case 4: hv_avx512_loop(in, out, W, off, kv, 4, nv, flip); break;
    case 5: hv_avx512_loop(in, out, W, off, kv, 5, nv, flip); break;
    default: hv_avx512_loop(in, out, W, off, kv, ks, nv, flip); break;
  }
}
#endif

#if STK__NEON
/* NEON, the AVX2 layout at 128 bits: one 32-bit vector (R, G, B, 0) per
 * output pixel, 4 pixels a step, from the same widened windows, weight table
 * and shuffles (plan_hvec, HV_TAP_SHUF, HV_PACK); TBL stands for PSHUFB. */
static inline __attribute__((always_inline)) void
hv_neon_loop(const uint8_t *in, uint8_t *out, int W, const int32_t *off, const int32_t *kv, int ks, int nv, int flip) {
  const uint8x16_t pack = vld1q_u8(HV_PACK[flip]);
  for (int x = 0; x < nv; x += 4, off += 4, kv += ks * 16) {
    int32x4_t s[4];
    for (int j = 0; j < 4; j++) s[j] = vdupq_n_s32(1 << (PRECISION_BITS - 1));
    for (int c0 = 0; c0 < ks; c0 += HV_TAPS) {
      const uint8_t *p = in + c0 * 3;
      uint8x16_t w[4];
      for (int j = 0; j < 4; j++) w[j] = vld1q_u8(p + off[j]);
      for (int t = c0; t < ks && t < c0 + HV_TAPS; t++) {
        const uint8x16_t sh = vld1q_u8(HV_TAP_SHUF[t - c0]);
        const int32_t *k = kv + t * 16;
        /* the levels are 0..255 in 32-bit lanes, so the multiply-add is the
         * scalar int32 sum, the weight repeated in the pixel's 4 lanes */
        for (int j = 0; j < 4; j++)
          s[j] = vmlaq_s32(s[j], vreinterpretq_s32_u8(vqtbl1q_u8(w[j], sh)), vld1q_s32(k + j * 4));
      }
    }
    /* clip8: >> 22 (arithmetic), then the saturating narrows clamp: signed
     * to unsigned 16-bit takes negatives to 0, 16 to 8 bits caps 255 */
    uint16x8_t h01 = vcombine_u16(vqmovun_s32(vshrq_n_s32(s[0], PRECISION_BITS)),
                                  vqmovun_s32(vshrq_n_s32(s[1], PRECISION_BITS)));
    uint16x8_t h23 = vcombine_u16(vqmovun_s32(vshrq_n_s32(s[2], PRECISION_BITS)),
                                  vqmovun_s32(vshrq_n_s32(s[3], PRECISION_BITS)));
    /* 4 pixels of (R, G, B, 0) to 12 bytes, in order or mirrored */
    uint8x16_t q = vqtbl1q_u8(vcombine_u8(vqmovn_u16(h01), vqmovn_u16(h23)), pack);
    uint8_t *o = out + (size_t)(flip ? W - 4 - x : x) * 3;
    vst1_u8(o, vget_low_u8(q));
    uint32_t last = vgetq_lane_u32(vreinterpretq_u32_u8(q), 2);
    memcpy(o + 8, &last, 4);
  }
}

static void hpass_neon(const uint8_t *in, uint8_t *out, int W, const int32_t *off, const int32_t *kv, int ks,
                       int nv, int flip) {
  switch (ks) { /* fixed sizes for the common windows: the tap loops unroll */
    case 2: hv_neon_loop(in, out, W, off, kv, 2, nv, flip); break;
    case 3: hv_neon_loop(in, out, W, off, kv, 3, nv, flip); break;
    case 4: hv_neon_loop(in, out, W, off, kv, 4, nv, flip); break;
    case 5: hv_neon_loop(in, out, W, off, kv, 5, nv, flip); break;
    default: hv_neon_loop(in, out, W, off, kv, ks, nv, flip); break;
  }
}
#endif

/* One row of the horizontal pass with the resampler's x tables; `in` is the
 * row's pixel src_x0. The SIMD pass does pixels [0, hvec), the scalar one
 * the rest. */
static void hpass_row(const stk__resampler *r, const uint8_t *in, uint8_t *out, int flip) {
  int W = r->g.x.out, from = 0;
  const int32_t *kx = r->kx.p, *bx = r->bx.p;
#if STK__X86 || STK__NEON
  int isa = stk__resample_isa(-1);
  if (r->hvec && isa) {
    const int32_t *kv = (const int32_t *)((const uint8_t *)r->kx.p + hvec_table_offset(r));
    const int32_t *off = bx + (size_t)W * 2;
#if STK__X86
    if (isa == 2)
      hpass_avx512(in, out, W, off, kv, r->hks, r->hvec, flip);
    else
      hpass_avx2(in, out, W, off, kv, r->hks, r->hvec, flip);
#else
    hpass_neon(in, out, W, off, kv, r->hks, r->hvec, flip);
#endif
    from = r->hvec;
  }
#endif
  hpass_row_c(in, bx[0], out, W, kx, bx, r->ksx, flip, from);
}

/* One row of the vertical pass: a weighted sum of n whole rows `pitch`
 * bytes apart. With n a constant (the common 2 to 5 taps) each output byte
 * is one register sum, which the compiler vectorises across the row with no
 * accumulator in memory; other n go through `acc`. The arithmetic is the
 * same either way. */
static inline __attribute__((always_inline)) void vpass_body(const uint8_t *restrict first, size_t pitch,
                                                             size_t len, const int32_t *k, int n,
                                                             int32_t *restrict acc, uint8_t *restrict out) {
  if (n <= 5) {
    int32_t k0 = k[0], k1 = n > 1 ? k[1] : 0, k2 = n > 2 ? k[2] : 0, k3 = n > 3 ? k[3] : 0, k4 = n > 4 ? k[4] : 0;
    const uint8_t *r0 = first, *r1 = first + pitch, *r2 = first + 2 * pitch, *r3 = first + 3 * pitch,
                  *r4 = first + 4 * pitch;
    switch (n) {
#define ROW(expr)                                                                         \
  for (size_t j = 0; j < len; j++) out[j] = clip8((1 << (PRECISION_BITS - 1)) + (expr)); \
  return
      case 1: ROW(r0[j] * k0);
      case 2: ROW(r0[j] * k0 + r1[j] * k1);
      case 3: ROW(r0[j] * k0 + r1[j] * k1 + r2[j] * k2);
      case 4: ROW(r0[j] * k0 + r1[j] * k1 + r2[j] * k2 + r3[j] * k3);
      case 5: ROW(r0[j] * k0 + r1[j] * k1 + r2[j] * k2 + r3[j] * k3 + r4[j] * k4);
#undef ROW
      default: break;
    }
  }
  for (size_t j = 0; j < len; j++) acc[j] = 1 << (PRECISION_BITS - 1);
  for (int i = 0; i < n; i++) {
    const uint8_t *row = first + (size_t)i * pitch;
    int32_t w = k[i];
    for (size_t j = 0; j < len; j++) acc[j] += row[j] * w;
  }
  for (size_t j = 0; j < len; j++) out[j] = clip8(acc[j]);
}

/* Built for each x86 ISA level and chosen with the others (32-bit multiplies
 * are native from AVX2 on, emulated in SSE2); aarch64's NEON version is
 * written out below. */
static void vpass_c(const uint8_t *first, size_t pitch, size_t len, const int32_t *k, int n, int32_t *acc,
                    uint8_t *out) {
  vpass_body(first, pitch, len, k, n, acc, out);
}
#if STK__X86
STK__AVX2 static void vpass_avx2(const uint8_t *first, size_t pitch, size_t len, const int32_t *k, int n,
                                 int32_t *acc, uint8_t *out) {
  vpass_body(first, pitch, len, k, n, acc, out);
}
/* 512-bit vectors: GCC's default tuning stops at 256 (clang has no such
 * target option) */
#if defined(__clang__)
#define STK__AVX512_WIDE STK__AVX512
#else
#define STK__AVX512_WIDE __attribute__((target("avx2,avx512f,avx512bw,avx512vl,prefer-vector-width=512")))
#endif
STK__AVX512_WIDE static void
vpass_avx512(const uint8_t *first, size_t pitch, size_t len, const int32_t *k, int n, int32_t *acc,
             uint8_t *out) {
  vpass_body(first, pitch, len, k, n, acc, out);
}
#endif

#if STK__NEON
/* NEON: 16 bytes of the row a step, in four 32-bit accumulators held in
 * registers whatever the tap count (no accumulator row in memory): each
 * row's bytes are widened to 32 bits (levels 0..255, so signed and unsigned
 * agree) and multiplied by the 32-bit weight, the scalar int32 sum. */
static inline __attribute__((always_inline)) void vpass_neon_body(const uint8_t *first, size_t pitch, size_t len,
                                                                  const int32_t *k, int n, uint8_t *out) {
  for (size_t j = 0;;) {
    int32x4_t s0 = vdupq_n_s32(1 << (PRECISION_BITS - 1)), s1 = s0, s2 = s0, s3 = s0;
    const uint8_t *p = first + j;
    for (int i = 0; i < n; i++, p += pitch) {
      uint8x16_t v = vld1q_u8(p);
      int16x8_t lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(v)));
      int16x8_t hi = vreinterpretq_s16_u16(vmovl_high_u8(v));
      int32_t w = k[i];
      s0 = vmlaq_n_s32(s0, vmovl_s16(vget_low_s16(lo)), w);
      s1 = vmlaq_n_s32(s1, vmovl_high_s16(lo), w);
      s2 = vmlaq_n_s32(s2, vmovl_s16(vget_low_s16(hi)), w);
      s3 = vmlaq_n_s32(s3, vmovl_high_s16(hi), w);
    }
    /* clip8 as in the horizontal pass: >> 22, then saturating narrows */
    uint16x8_t h0 = vcombine_u16(vqmovun_s32(vshrq_n_s32(s0, PRECISION_BITS)),
                                 vqmovun_s32(vshrq_n_s32(s1, PRECISION_BITS)));
    uint16x8_t h1 = vcombine_u16(vqmovun_s32(vshrq_n_s32(s2, PRECISION_BITS)),
                                 vqmovun_s32(vshrq_n_s32(s3, PRECISION_BITS)));
    vst1q_u8(out + j, vcombine_u8(vqmovn_u16(h0), vqmovn_u16(h1)));
    if (j + 16 == len) return;
    /* the last step ends at the row's end, overlapping the one before: each
     * byte is its own sum, so computing some twice changes nothing, and
     * nothing is read or written past the row */
    j = j + 32 <= len ? j + 16 : len - 16;
  }
}

static void vpass_neon(const uint8_t *first, size_t pitch, size_t len, const int32_t *k, int n, int32_t *acc,
                       uint8_t *out) {
  if (len < 16) { /* rows under 16 bytes: the portable code */
    vpass_body(first, pitch, len, k, n, acc, out);
    return;
  }
  switch (n) { /* fixed tap counts for the common windows: the tap loop unrolls */
    case 1: vpass_neon_body(first, pitch, len, k, 1, out); break;
    case 2: vpass_neon_body(first, pitch, len, k, 2, out); break;
    case 3: vpass_neon_body(first, pitch, len, k, 3, out); break;
    case 4: vpass_neon_body(first, pitch, len, k, 4, out); break;
    case 5: vpass_neon_body(first, pitch, len, k, 5, out); break;
    default: vpass_neon_body(first, pitch, len, k, n, out); break;
  }
}
#endif

static void vpass_row(const uint8_t *first, size_t pitch, size_t len, const int32_t *k, int n, int32_t *acc,
                      uint8_t *out) {
#if STK__X86
  switch (stk__resample_isa(-1)) {
    case 2: vpass_avx512(first, pitch, len, k, n, acc, out); return;
    case 1: vpass_avx2(first, pitch, len, k, n, acc, out); return;
    default: break;
  }
#elif STK__NEON
  if (stk__resample_isa(-1)) {
    vpass_neon(first, pitch, len, k, n, acc, out);
    return;
  }
#endif
  vpass_c(first, pitch, len, k, n, acc, out);
}

int stk__resampler_run(stk__resampler *r, const uint8_t *src, size_t stride, int sx, int sy,
                       const stk__store *st, void *dst) {
  const stk__geom *g = &r->g;
  int W = g->x.out, H = g->y.out;
  if (W != st->w || H != st->h) return STK_EINVAL;
  if (sx > r->src_x0 || sy > r->src_y0) return STK_EINVAL;
  int rows = r->src_y1 - r->src_y0, cols = r->src_x1 - r->src_x0;
  const int32_t *ky = r->ky.p, *by = r->by.p;
  int ksy = r->ksy;
  size_t trow = (size_t)W * 3;
  /* Pillow runs the horizontal pass first, over every source row the
   * vertical pass reads. When the geometry does not ask for Pillow's exact
   * order, the vertical pass goes first whenever that leaves the
   * horizontal pass (costlier per pixel) fewer rows: crops taller than the output
   * (bilinear only: stk__geom_vfirst). */
  int vfirst = stk__geom_vfirst(g, rows);
  size_t mid_row = vfirst ? (size_t)cols * 3 : trow;
  size_t mid_rows = vfirst ? (size_t)H : (size_t)rows;
  size_t tbytes = (mid_row * mid_rows + 3) & ~(size_t)3; /* keeps acc 4-byte aligned */
  size_t acc_len = mid_row > trow ? mid_row : trow;
  if (stk__buf_reserve(&r->tmp, tbytes + acc_len * sizeof(int32_t) + trow)) return STK_ENOMEM;
  uint8_t *tmp = r->tmp.p;
  int32_t *acc = (int32_t *)(tmp + tbytes);
  uint8_t *levels = (uint8_t *)(acc + acc_len);
  /* Source pixel (x, y) lives at src + (y - sy) * stride + (x - sx) * 3.
   * Pointers are only formed at pixels that are read: the window's origin
   * (lo) may lie before the decoded region, and a pointer before the
   * buffer is undefined even when never dereferenced. */
  const uint8_t *corner = src + (size_t)(r->src_y0 - sy) * stride + (size_t)(r->src_x0 - sx) * 3;
  /* A flip is done by the horizontal pass, which writes its rows mirrored:
   * the vertical pass treats columns alike, so the output is the same. */

  if (!vfirst) {
    /* horizontal: source rows [src_y0, src_y1) -> W pixels each */
    for (int y = 0; y < rows; y++)
      hpass_row(r, corner + (size_t)y * stride, tmp + (size_t)y * trow, g->flip);
    /* vertical, row by row into the batch */
    int yoff = g->y.lo - r->src_y0;
    for (int yy = 0; yy < H; yy++) {
      vpass_row(tmp + (size_t)(by[yy * 2] + yoff) * trow, trow, trow, ky + (size_t)yy * ksy,
                by[yy * 2 + 1], acc, levels);
      store_row(st, levels, yy, dst);
    }
  } else {
    /* vertical: source columns [src_x0, src_x1) -> H rows */
    int yoff = g->y.lo - r->src_y0;
    for (int yy = 0; yy < H; yy++)
      vpass_row(corner + (size_t)(by[yy * 2] + yoff) * stride, stride, mid_row, ky + (size_t)yy * ksy,
                by[yy * 2 + 1], acc, tmp + (size_t)yy * mid_row);
    /* horizontal, row by row into the batch */
    for (int yy = 0; yy < H; yy++) {
      hpass_row(r, tmp + (size_t)yy * mid_row, levels, g->flip);
      store_row(st, levels, yy, dst);
    }
  }
  return STK_OK;
}

void stk__resampler_free(stk__resampler *r) {
  stk__buf_free(&r->kx);
  stk__buf_free(&r->ky);
  stk__buf_free(&r->bx);
  stk__buf_free(&r->by);
  stk__buf_free(&r->tmp);
}
