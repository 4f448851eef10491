/*
 * resample.c: Pillow-exact antialiased bilinear resampling, fused with flip,
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

#define PRECISION_BITS 22

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

static double bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's precompute_coeffs + normalize_coeffs_8bpc for one axis, in the
 * coordinates of the source window [lo, hi): window starts are stored
 * relative to lo. */
static int plan_axis(const stk__axis *a, stk__buf *kb, stk__buf *bb, int *ksize_out) {
  double scale = a->scale, filterscale = scale < 1.0 ? 1.0 : scale;
  double support = 1.0 * filterscale;
  int ksize = (int)ceil(support) * 2 + 1;
  int in_size = a->hi - a->lo;
  double in0 = a->in0 - a->lo;
  if (stk__buf_reserve(kb, (size_t)a->out * ksize * sizeof(int32_t)) ||
      stk__buf_reserve(bb, (size_t)a->out * 2 * sizeof(int32_t)))
    return STK_ENOMEM;
  int32_t *kk = kb->p, *bounds = bb->p;
  for (int xx = 0; xx < a->out; xx++) {
    double center = in0 + (xx + 0.5) * scale;
    double ww = 0.0, ss = 1.0 / filterscale;
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    if (xmax < 0) xmax = 0;
    /* Weights are evaluated twice (sum, then normalised) rather than kept in
     * a scratch array, so any downscale factor works without a size cap. */
    for (int x = 0; x < xmax; x++) ww += bilinear((x + xmin - center + 0.5) * ss);
    int32_t *k = kk + (size_t)xx * ksize;
    for (int x = 0; x < ksize; x++) {
      double v = x < xmax ? bilinear((x + xmin - center + 0.5) * ss) : 0.0;
      if (ww != 0.0) v /= ww;
      k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << PRECISION_BITS))
                   : (int32_t)(0.5 + v * (1 << PRECISION_BITS));
    }
    bounds[xx * 2] = xmin;
    bounds[xx * 2 + 1] = xmax;
  }
  *ksize_out = ksize;
  return STK_OK;
}

int stk__resampler_plan(stk__resampler *r, const stk__geom *g, stk__rect *need) {
  if (g->x.out <= 0 || g->y.out <= 0 || g->x.hi <= g->x.lo || g->y.hi <= g->y.lo)
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

static inline uint8_t clip8(int32_t v) {
  v >>= PRECISION_BITS;
  return v < 0 ? 0 : v > 255 ? 255 : (uint8_t)v;
}

/* Writes one output row of 8-bit levels into the batch image. */
static void store_row(const stk__store *st, const uint8_t *lv, int y, int flip, void *dst) {
  int W = st->w, H = st->h;
  size_t plane = (size_t)W * H;
  for (int x = 0; x < W; x++) {
    int ox = flip ? W - 1 - x : x;
    const uint8_t *p = lv + x * 3;
    if (st->layout == STK_LAYOUT_NCHW) {
      size_t o = (size_t)y * W + ox;
      switch (st->dtype) {
        case STK_DTYPE_FLOAT32: {
          float *d = dst;
          d[o] = st->lut_f32[0][p[0]];
          d[plane + o] = st->lut_f32[1][p[1]];
          d[2 * plane + o] = st->lut_f32[2][p[2]];
          break;
        }
        case STK_DTYPE_FLOAT16:
        case STK_DTYPE_BFLOAT16: {
          uint16_t *d = dst;
          d[o] = st->lut_u16[0][p[0]];
          d[plane + o] = st->lut_u16[1][p[1]];
          d[2 * plane + o] = st->lut_u16[2][p[2]];
          break;
        }
        case STK_DTYPE_UINT8: {
          uint8_t *d = dst;
          d[o] = p[0];
          d[plane + o] = p[1];
          d[2 * plane + o] = p[2];
          break;
        }
      }
    } else {
      size_t o = ((size_t)y * W + ox) * 3;
      switch (st->dtype) {
        case STK_DTYPE_FLOAT32: {
          float *d = (float *)dst + o;
          d[0] = st->lut_f32[0][p[0]];
          d[1] = st->lut_f32[1][p[1]];
          d[2] = st->lut_f32[2][p[2]];
          break;
        }
        case STK_DTYPE_FLOAT16:
        case STK_DTYPE_BFLOAT16: {
          uint16_t *d = (uint16_t *)dst + o;
          d[0] = st->lut_u16[0][p[0]];
          d[1] = st->lut_u16[1][p[1]];
          d[2] = st->lut_u16[2][p[2]];
          break;
        }
        case STK_DTYPE_UINT8: {
          uint8_t *d = (uint8_t *)dst + o;
          d[0] = p[0];
          d[1] = p[1];
          d[2] = p[2];
          break;
        }
      }
    }
  }
}

/* Built twice, for AVX2 and for the x86-64 baseline, and picked at load
 * time: the vertical pass's 32-bit multiplies vectorise far better with
 * AVX2, and the result is the same integer arithmetic either way. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx2", "default")))
#endif
int stk__resampler_run(stk__resampler *r, const uint8_t *src, size_t stride, int sx, int sy,
                       const stk__store *st, void *dst) {
  const stk__geom *g = &r->g;
  int W = g->x.out, H = g->y.out;
  if (W != st->w || H != st->h) return STK_EINVAL;
  if (sx > r->src_x0 || sy > r->src_y0) return STK_EINVAL;
  int rows = r->src_y1 - r->src_y0;
  size_t trow = (size_t)W * 3;
  /* tmp: the horizontal pass over the rows the vertical pass reads, then one
   * int32 accumulator row and one row of 8-bit levels. */
  size_t tbytes = (trow * (size_t)rows + 3) & ~(size_t)3; /* keeps acc 4-byte aligned */
  if (stk__buf_reserve(&r->tmp, tbytes + trow * sizeof(int32_t) + trow)) return STK_ENOMEM;
  uint8_t *tmp = r->tmp.p;
  int32_t *acc = (int32_t *)(tmp + tbytes);
  uint8_t *levels = (uint8_t *)(acc + trow);

  /* Horizontal pass: source rows [src_y0, src_y1) -> W pixels each. */
  const int32_t *kx = r->kx.p, *bx = r->bx.p;
  int ksx = r->ksx, xoff = g->x.lo - sx;
  for (int y = 0; y < rows; y++) {
    const uint8_t *in = src + (size_t)(r->src_y0 + y - sy) * stride;
    uint8_t *out = tmp + (size_t)y * trow;
    for (int xx = 0; xx < W; xx++) {
      const int32_t *k = kx + (size_t)xx * ksx;
      int xmin = bx[xx * 2] + xoff, n = bx[xx * 2 + 1];
      const uint8_t *p = in + (size_t)xmin * 3;
      int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
      for (int i = 0; i < n; i++) {
        s0 += p[i * 3] * k[i];
        s1 += p[i * 3 + 1] * k[i];
        s2 += p[i * 3 + 2] * k[i];
      }
      out[xx * 3] = clip8(s0);
      out[xx * 3 + 1] = clip8(s1);
      out[xx * 3 + 2] = clip8(s2);
    }
  }

  /* Vertical pass, one output row at a time: a weighted sum of whole
   * intermediate rows, which the compiler vectorises. */
  const int32_t *ky = r->ky.p, *by = r->by.p;
  int ksy = r->ksy, yoff = g->y.lo - r->src_y0;
  for (int yy = 0; yy < H; yy++) {
    const int32_t *k = ky + (size_t)yy * ksy;
    int ymin = by[yy * 2] + yoff, n = by[yy * 2 + 1];
    for (size_t j = 0; j < trow; j++) acc[j] = 1 << (PRECISION_BITS - 1);
    for (int i = 0; i < n; i++) {
      const uint8_t *row = tmp + (size_t)(ymin + i) * trow;
      int32_t w = k[i];
      for (size_t j = 0; j < trow; j++) acc[j] += row[j] * w;
    }
    for (size_t j = 0; j < trow; j++) levels[j] = clip8(acc[j]);
    store_row(st, levels, yy, g->flip, dst);
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
