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
#include <string.h>

#include "ops/ops.h"
#include "ops/window.h"

#define PRECISION_BITS STK_PRECISION_BITS

/* Not under the sanitizers: the clones' load-time resolvers run before the
 * sanitizer runtimes are up and crash there. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define STK__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STK__CLONES
#endif

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
  return STK_OK;
}

static inline uint8_t clip8(int32_t v) { return (uint8_t)stk__clip8(v); }

/* Writes one output row of 8-bit levels into the batch image. The switch
 * is outside the loops so that each case is a plain loop. */
static void store_row(const stk__store *st, const uint8_t *lv, int y, int flip, void *dst) {
  int W = st->w;
  size_t plane = (size_t)W * st->h;
  int step = flip ? -1 : 1, x0 = flip ? W - 1 : 0;
  if (st->layout == STK_LAYOUT_NCHW) {
    for (int c = 0; c < 3; c++) {
      size_t o = c * plane + (size_t)y * W + x0;
      switch (st->dtype) {
        case STK_DTYPE_FLOAT32: {
          float *d = (float *)dst + o;
          const float *lut = st->lut_f32[c];
          for (int x = 0; x < W; x++) d[x * step] = lut[lv[x * 3 + c]];
          break;
        }
        case STK_DTYPE_FLOAT16:
        case STK_DTYPE_BFLOAT16: {
          uint16_t *d = (uint16_t *)dst + o;
          const uint16_t *lut = st->lut_u16[c];
          for (int x = 0; x < W; x++) d[x * step] = lut[lv[x * 3 + c]];
          break;
        }
        case STK_DTYPE_UINT8: {
          uint8_t *d = (uint8_t *)dst + o;
          for (int x = 0; x < W; x++) d[x * step] = lv[x * 3 + c];
          break;
        }
      }
    }
    return;
  }
  size_t o = ((size_t)y * W + x0) * 3;
  switch (st->dtype) {
    case STK_DTYPE_FLOAT32: {
      float *d = (float *)dst + o;
      for (int x = 0; x < W; x++, d += 3 * step) {
        d[0] = st->lut_f32[0][lv[x * 3]];
        d[1] = st->lut_f32[1][lv[x * 3 + 1]];
        d[2] = st->lut_f32[2][lv[x * 3 + 2]];
      }
      break;
    }
    case STK_DTYPE_FLOAT16:
    case STK_DTYPE_BFLOAT16: {
      uint16_t *d = (uint16_t *)dst + o;
      for (int x = 0; x < W; x++, d += 3 * step) {
        d[0] = st->lut_u16[0][lv[x * 3]];
        d[1] = st->lut_u16[1][lv[x * 3 + 1]];
        d[2] = st->lut_u16[2][lv[x * 3 + 2]];
      }
      break;
    }
    case STK_DTYPE_UINT8: {
      uint8_t *d = (uint8_t *)dst + o;
      if (!flip) {
        memcpy(d, lv, (size_t)W * 3);
      } else {
        for (int x = 0; x < W; x++, d -= 3) d[0] = lv[x * 3], d[1] = lv[x * 3 + 1], d[2] = lv[x * 3 + 2];
      }
      break;
    }
  }
}

void stk__store_tile(const stk__store *st, const uint8_t *tile, void *dst) {
  for (int y = 0; y < st->h; y++) store_row(st, tile + (size_t)y * st->w * 3, y, 0, dst);
}

/* One row of the horizontal pass: W output pixels from an RGB row whose
 * pixel 0 is window offset `base`. Windows are 2 to 5 taps for the usual scale
 * factors (bilinear; bicubic's are 4 to 9, the loop); those get unrolled
 * bodies. */
static void hpass_row(const uint8_t *in, int base, uint8_t *out, int W, const int32_t *kx,
                      const int32_t *bx, int ksx) {
  for (int xx = 0; xx < W; xx++) {
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
    out[xx * 3] = clip8(s0);
    out[xx * 3 + 1] = clip8(s1);
    out[xx * 3 + 2] = clip8(s2);
  }
}

/* One row of the vertical pass: a weighted sum of n whole rows `pitch`
 * bytes apart, which the compiler vectorises. Built twice, for AVX2 and for
 * the x86-64 baseline, and picked at load time: its 32-bit multiplies are
 * native in AVX2 and emulated in SSE2; the arithmetic is the same. */
STK__CLONES static void vpass_row(const uint8_t *first, size_t pitch, size_t len, const int32_t *k, int n,
                      int32_t *acc, uint8_t *out) {
  for (size_t j = 0; j < len; j++) acc[j] = 1 << (PRECISION_BITS - 1);
  for (int i = 0; i < n; i++) {
    const uint8_t *row = first + (size_t)i * pitch;
    int32_t w = k[i];
    for (size_t j = 0; j < len; j++) acc[j] += row[j] * w;
  }
  for (size_t j = 0; j < len; j++) out[j] = clip8(acc[j]);
}

int stk__resampler_run(stk__resampler *r, const uint8_t *src, size_t stride, int sx, int sy,
                       const stk__store *st, void *dst) {
  const stk__geom *g = &r->g;
  int W = g->x.out, H = g->y.out;
  if (W != st->w || H != st->h) return STK_EINVAL;
  if (sx > r->src_x0 || sy > r->src_y0) return STK_EINVAL;
  int rows = r->src_y1 - r->src_y0, cols = r->src_x1 - r->src_x0;
  const int32_t *kx = r->kx.p, *bx = r->bx.p, *ky = r->ky.p, *by = r->by.p;
  int ksx = r->ksx, ksy = r->ksy;
  size_t trow = (size_t)W * 3;
  /* Pillow runs the horizontal pass first, over every source row the
   * vertical pass reads. When the geometry does not ask for Pillow's exact
   * order, the vertical pass goes first whenever that leaves the
   * (unvectorised) horizontal pass fewer rows: crops taller than the output
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
  int xbase = r->src_x0 - g->x.lo; /* window offset of column src_x0 */

  if (!vfirst) {
    /* horizontal: source rows [src_y0, src_y1) -> W pixels each */
    for (int y = 0; y < rows; y++)
      hpass_row(corner + (size_t)y * stride, xbase, tmp + (size_t)y * trow, W, kx, bx, ksx);
    /* vertical, row by row into the batch */
    int yoff = g->y.lo - r->src_y0;
    for (int yy = 0; yy < H; yy++) {
      vpass_row(tmp + (size_t)(by[yy * 2] + yoff) * trow, trow, trow, ky + (size_t)yy * ksy,
                by[yy * 2 + 1], acc, levels);
      store_row(st, levels, yy, g->flip, dst);
    }
  } else {
    /* vertical: source columns [src_x0, src_x1) -> H rows */
    int yoff = g->y.lo - r->src_y0;
    for (int yy = 0; yy < H; yy++)
      vpass_row(corner + (size_t)(by[yy * 2] + yoff) * stride, stride, mid_row, ky + (size_t)yy * ksy,
                by[yy * 2 + 1], acc, tmp + (size_t)yy * mid_row);
    /* horizontal, row by row into the batch; windows start at src_x0 */
    for (int yy = 0; yy < H; yy++) {
      hpass_row(tmp + (size_t)yy * mid_row, xbase, levels, W, kx, bx, ksx);
      store_row(st, levels, yy, g->flip, dst);
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
