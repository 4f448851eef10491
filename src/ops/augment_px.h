/*
 * augment_px.h: the per-pixel arithmetic of the augmentations (augment.h),
 * one definition for the CPU ops (augment.c) and the CUDA kernels
 * (gpu/kernels.cu), so that the two sides cannot drift. The kernels are
 * compiled with --fmad=false and this file has no fused operations, so a
 * float32 expression rounds the same way on both sides.
 *
 * Plain C11 and CUDA C++: no includes beyond <stdint.h> and <math.h>, no
 * allocation.
 */
#ifndef STK_AUGMENT_PX_H
#define STK_AUGMENT_PX_H

#include <math.h>
#include <stdint.h>

#include "ops/window.h" /* STK_HD */

/* The ops, in the order of torchvision's TrivialAugmentWide space first
 * (its op index is the enum value), then the rest. */
typedef enum {
  STK__OP_IDENTITY,
  STK__OP_SHEAR_X,
  STK__OP_SHEAR_Y,
  STK__OP_TRANSLATE_X,
  STK__OP_TRANSLATE_Y,
  STK__OP_ROTATE,
  STK__OP_BRIGHTNESS,
  STK__OP_COLOR,
  STK__OP_CONTRAST,
  STK__OP_SHARPNESS,
  STK__OP_POSTERIZE,
  STK__OP_SOLARIZE,
  STK__OP_AUTOCONTRAST,
  STK__OP_EQUALIZE,
  STK__OP_INVERT,
  /* the rest: magnitudes are factors, as torchvision's functional takes them */
  STK__OP_ADJ_BRIGHTNESS, /* F.adjust_brightness(img, mag) */
  STK__OP_ADJ_CONTRAST,   /* F.adjust_contrast(img, mag) */
  STK__OP_ADJ_SATURATION, /* F.adjust_saturation(img, mag) */
  STK__OP_ADJ_HUE,        /* F.adjust_hue(img, mag), mag in [-0.5, 0.5] */
  STK__OP_ADJ_SHARPNESS,  /* F.adjust_sharpness(img, mag) */
  STK__OP_GRAYSCALE,      /* rgb_to_grayscale, 3 channels */
  STK__OP_BLUR,           /* F.gaussian_blur(img, ksize, mag = sigma) */
  STK__OP_VFLIP,
  STK__OP_HFLIP,
  /* timm's RandAugment ops (PIL's arithmetic, as timm runs them on PIL
   * images); magnitudes as timm's op functions take them */
  STK__OP_SOLARIZE_ADD,     /* solarize_add(img, add = mag, thresh = 128) */
  STK__OP_PIL_AUTOCONTRAST, /* ImageOps.autocontrast(img) */
  STK__OP_PIL_COLOR,        /* ImageEnhance.Color(img).enhance(mag) */
  STK__OP_PIL_CONTRAST,     /* ImageEnhance.Contrast(img).enhance(mag) */
  STK__OP_PIL_SHARPNESS,    /* ImageEnhance.Sharpness(img).enhance(mag) */
  STK__OP_PIL_SHEAR_X,      /* img.transform(AFFINE, (1, mag, 0, 0, 1, 0)) */
  STK__OP_PIL_SHEAR_Y,      /* img.transform(AFFINE, (1, 0, 0, mag, 1, 0)) */
  STK__OP_PIL_TRANSLATE_X,  /* img.transform(AFFINE, (1, 0, mag, 0, 1, 0)): mag pixels */
  STK__OP_PIL_TRANSLATE_Y,  /* img.transform(AFFINE, (1, 0, 0, 0, 1, mag)) */
  STK__OP_PIL_ROTATE,       /* img.rotate(mag) (degrees, counter-clockwise) */
  STK__OP_COUNT
} stk__op_kind;

/* The warps' filter (stk__aug_plan.filter, the kernels' stk__kaug.filter).
 * The values keep the older boolean "nearest" meaning (1 nearest, 0
 * bilinear). Bicubic exists only as PIL's transform (torchvision's tensor
 * warps refuse it), so every bicubic warp, torchvision's ops included, runs
 * PIL's AFFINE transform (stk__pil_affine, stk__pil_warp_px). */
#define STK__WARP_BILINEAR 0
#define STK__WARP_NEAREST 1
#define STK__WARP_BICUBIC 2
#define STK__WARP_RANDOM 3 /* plans only: each warp op carries its drawn filter */

/* .clamp(0, 255).to(uint8): the cast truncates toward zero */
STK_HD uint8_t stk__trunc8(float v) {
  if (!(v > 0.0f)) return 0;
  if (v >= 255.0f) return 255;
  return (uint8_t)v;
}

/* rintf(v) (half to even, the sign of zero kept) without a libm call on a
 * target that has no rounding instruction in its baseline (x86-64 before
 * SSE4.1 calls rintf for every pixel). Adding and subtracting 1.5 * 2**23
 * rounds a float below 2**22 in magnitude to an integer in the current
 * rounding mode, as rintf does; larger magnitudes go to rintf. */
STK_HD float stk__rint(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  if (fabsf(v) < 4194304.0f) {
    float t = v + 12582912.0f;
    return copysignf(t - 12582912.0f, v);
  }
  return rintf(v);
#endif
}

/* torch.round (half to even) then .to(uint8) */
STK_HD uint8_t stk__round8(float v) {
  v = stk__rint(v);
  if (!(v > 0.0f)) return 0;
  return v >= 255.0f ? 255 : (uint8_t)v;
}

/* rgb_to_grayscale: (0.2989 * r + 0.587 * g + 0.114 * b).to(uint8), each
 * product and sum in float32 */
STK_HD uint8_t stk__gray8(int r, int g, int b) {
  float v = 0.2989f * (float)r;
  v = v + 0.587f * (float)g;
  v = v + 0.114f * (float)b;
  return stk__trunc8(v);
}

/* _blend(img1, img2, ratio) = (ratio * img1 + (1 - ratio) * img2), clamped
 * and truncated, with both factors float32 (r = (float)ratio, r1 =
 * (float)(1 - ratio), the Python floats as torch casts them) */
STK_HD uint8_t stk__blend8(float r, float r1, float a, float b) {
  float x = r * a;
  float y = r1 * b;
  return stk__trunc8(x + y);
}

/* _blend's two factors, as torch casts the Python floats: r = (float)ratio,
 * r1 = (float)(1 - ratio) */
typedef struct {
  float r, r1;
} stk__blend;

STK_HD stk__blend stk__blend_of(double ratio) {
  stk__blend k;
  k.r = (float)ratio;
  k.r1 = (float)(1.0 - ratio);
  return k;
}

/* The blend factor of a colour op: the policies' ops take 1 + magnitude
 * (_apply_op), the adjust_* ops their factor as it is. */
STK_HD double stk__op_factor(int kind, double mag) {
  return kind <= STK__OP_SHARPNESS ? 1.0 + mag : mag;
}

/* posterize: the top `bits` bits kept (img & -(2 ** (8 - bits))) */
STK_HD uint8_t stk__posterize_mask(double mag) {
  int bits = (int)mag;
  bits = bits < 0 ? 0 : bits > 8 ? 8 : bits;
  return (uint8_t)(0xffu << (8 - bits));
}

/* solarize: inverted where v >= threshold (a float32 comparison) */
STK_HD uint8_t stk__solarize8(int v, float thr) {
  return (float)v >= thr ? (uint8_t)(255 - v) : (uint8_t)v;
}

/* The 3x3 sum of _blurred_degenerate_image's kernel (centre weighted 5) at
 * the byte p of an inner pixel, rows `row` bytes apart. */
STK_HD int stk__sharp_sum(const uint8_t *p, int row) {
  int s = 4 * p[0];
  for (int dy = -1; dy <= 1; dy++)
    for (int dx = -1; dx <= 1; dx++) s += p[dy * row + dx * 3];
  return s;
}

/* autocontrast: scale = reciprocal(max - min) * 255 (Tensor.__rtruediv__),
 * a flat channel keeps min 0, scale 1 */
STK_HD float stk__autocontrast_scale(int lo, int hi, float *mn) {
  if (hi == lo) {
    *mn = 0.0f;
    return 1.0f;
  }
  *mn = (float)lo;
  volatile float rec = 1.0f / ((float)hi - (float)lo); /* two roundings, as torch */
  return rec * 255.0f;
}

STK_HD uint8_t stk__autocontrast8(int v, float mn, float scale) {
  float d = (float)v - mn;
  return stk__trunc8(d * scale);
}

/* PIL's equalize LUT from a channel's histogram; returns 0 (and leaves lut)
 * when the channel stays as it is (step 0). */
STK_HD int stk__equalize_lut(const int64_t *hist, uint8_t *lut) {
  int last = 255;
  while (last > 0 && hist[last] == 0) last--;
  int64_t total = 0;
  for (int v = 0; v < 256; v++) total += hist[v];
  int64_t step = (total - hist[last]) / 255; /* pixels outside the last non-empty bin */
  if (step == 0) return 0;
  int64_t cum = 0;
  for (int v = 0; v < 256; v++) {
    int64_t l = (cum + step / 2) / step; /* the cumulative count before v */
    lut[v] = (uint8_t)(l > 255 ? 255 : l);
    cum += hist[v];
  }
  return 1;
}

/* _blurred_degenerate_image at an inner pixel, from s = the 3x3 sum with
 * the centre weighted 5: round(s / 13), exact whatever the order of
 * summation (s / 13 is never within 1/26 of a tie) */
STK_HD int stk__sharp_blur(int s) { return (2 * s + 13) / 26; }

/* adjust_hue at one pixel, as torchvision v2 computes it for uint8 images:
 * to float32 by * (1/255), _rgb_to_hsv (h * (1/6) + 1, fmod 1), h + hue
 * remainder 1, _hsv_to_rgb (q = (1 - s f) v, t = (s f + (1 - s)) v,
 * p = (1 - s) v, clamped), back to uint8 by * 255.999 truncated (v2's
 * float-to-integer scale). */
STK_HD void stk__hue_px(uint8_t *p, float hue) {
  const float k = (float)(1.0 / 255.0);
  float r = (float)p[0] * k, g = (float)p[1] * k, b = (float)p[2] * k;
  float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
  int eqc = maxc == minc;
  float cr = maxc - minc;
  float s = cr / (eqc ? 1.0f : maxc);
  float crd = eqc ? 1.0f : cr;
  float rc = (maxc - r) / crd, gc = (maxc - g) / crd, bc = (maxc - b) / crd;
  float hr = maxc == r ? bc - gc : 0.0f;
  float hg = (maxc == g && maxc != r) ? (rc + 2.0f) - bc : 0.0f;
  float hb = (maxc != g && maxc != r) ? (gc + 4.0f) - rc : 0.0f;
  float hh = (hr + hg) + hb;
  hh = fmodf(hh * (float)(1.0 / 6.0) + 1.0f, 1.0f);
  /* remainder(h + hue, 1): fmod, then + 1 where negative */
  hh = fmodf(hh + hue, 1.0f);
  if (hh < 0.0f) hh = hh + 1.0f;
  float v = maxc;
  float h6 = hh * 6.0f;
  float fi = floorf(h6);
  float f = h6 - fi;
  int ii = ((int)fi % 6 + 6) % 6;
  float sxf = s * f, oms = 1.0f - s;
  float q = fminf(fmaxf((1.0f - sxf) * v, 0.0f), 1.0f);
  float tt = fminf(fmaxf((sxf + oms) * v, 0.0f), 1.0f);
  float pp = fminf(fmaxf(oms * v, 0.0f), 1.0f);
  float o0, o1, o2;
  switch (ii) {
    case 0: o0 = v, o1 = tt, o2 = pp; break;
    case 1: o0 = q, o1 = v, o2 = pp; break;
    case 2: o0 = pp, o1 = v, o2 = tt; break;
    case 3: o0 = pp, o1 = q, o2 = v; break;
    case 4: o0 = tt, o1 = pp, o2 = v; break;
    default: o0 = v, o1 = pp, o2 = q; break;
  }
  p[0] = stk__trunc8(o0 * 255.999f);
  p[1] = stk__trunc8(o1 * 255.999f);
  p[2] = stk__trunc8(o2 * 255.999f);
}

/* An affine warp's grid, as torchvision builds it: the float32 inverse
 * matrix divided by half the size (rescaled_theta). */
typedef struct {
  float a0, a1, a2, b0, b1, b2;
} stk__warp;

/* Output pixel (xx, yy) of a w x h warp from `src` (RGB8, rows w * 3 apart)
 * into o[3]: the grid point (pixel centres, -size/2 + 0.5 + i), then
 * grid_sample(align_corners=False, padding zeros) as torch's CPU kernel
 * computes it ((g + 1) * size / 2 - 0.5; nearest rounds half to even;
 * bilinear nw, ne, sw, se weights); with a fill, torchvision's mask blend. */
STK_HD void stk__warp_px(const stk__warp *m, const uint8_t *src, int w, int h, int xx, int yy,
                         int nearest, const float *fill, uint8_t *o) {
  float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
  float y = -(float)h * 0.5f + 0.5f + (float)yy;
  float x = -(float)w * 0.5f + 0.5f + (float)xx;
  float gx = x * m->a0;
  gx = gx + y * m->a1;
  gx = gx + m->a2;
  float gy = x * m->b0;
  gy = gy + y * m->b1;
  gy = gy + m->b2;
  float ix = (gx + 1.0f) * hw - 0.5f, iy = (gy + 1.0f) * hh - 0.5f;
  size_t row = (size_t)w * 3;
  if (nearest) {
    float rx = stk__rint(ix), ry = stk__rint(iy);
    int in = rx >= 0 && rx < (float)w && ry >= 0 && ry < (float)h;
    for (int c = 0; c < 3; c++) {
      if (in) o[c] = src[(size_t)ry * row + (size_t)rx * 3 + c];
      else o[c] = fill ? stk__round8(fill[c]) : 0;
    }
    return;
  }
  float fx = floorf(ix), fy = floorf(iy);
  float we = ix - fx, ee = 1.0f - we, n = iy - fy, s = 1.0f - n;
  float wt[4] = {s * ee, s * we, n * ee, n * we}; /* nw, ne, sw, se */
  int x0 = (int)fx, y0 = (int)fy;
  int cx[4] = {x0, x0 + 1, x0, x0 + 1}, cy[4] = {y0, y0, y0 + 1, y0 + 1};
  int ok[4];
  for (int k = 0; k < 4; k++) ok[k] = cx[k] >= 0 && cx[k] < w && cy[k] >= 0 && cy[k] < h;
  float mask = 0.0f;
  if (fill) {
    float m4[4];
    for (int k = 0; k < 4; k++) m4[k] = ok[k] ? wt[k] : 0.0f;
    mask = ((m4[0] + m4[1]) + m4[2]) + m4[3];
  }
  for (int c = 0; c < 3; c++) {
    float v[4];
    for (int k = 0; k < 4; k++)
      v[k] = ok[k] ? (float)src[(size_t)cy[k] * row + (size_t)cx[k] * 3 + c] * wt[k] : 0.0f;
    float r = ((v[0] + v[1]) + v[2]) + v[3];
    if (fill) {
      float a = r * mask;
      float b = (1.0f - mask) * fill[c];
      r = a + b;
    }
    o[c] = stk__round8(r);
  }
}

/* A Gaussian blur output value at (x, y), channel c: the horizontal pass
 * (reflect padding) for each row the vertical taps read, then the vertical
 * taps, both in float32 in tap order, rounded. */
STK_HD uint8_t stk__blur_px(const uint8_t *src, int w, int h, int x, int y, int c,
                            const float *kern, int ks) {
  int half = ks / 2;
  size_t row = (size_t)w * 3;
  float acc = 0.0f;
  for (int k = 0; k < ks; k++) {
    int yy = y + k - half;
    yy = yy < 0 ? -yy : yy >= h ? 2 * h - 2 - yy : yy;
    yy = yy < 0 ? 0 : yy >= h ? h - 1 : yy;
    float s = 0.0f;
    for (int j = 0; j < ks; j++) {
      int xx = x + j - half;
      xx = xx < 0 ? -xx : xx >= w ? 2 * w - 2 - xx : xx;
      xx = xx < 0 ? 0 : xx >= w ? w - 1 : xx;
      float t = kern[j] * (float)src[(size_t)yy * row + (size_t)xx * 3 + c];
      s = s + t;
    }
    float t = kern[k] * s;
    acc = acc + t;
  }
  return stk__round8(acc);
}

/* ---- PIL's arithmetic, for timm's RandAugment ---------------------------- */

/* timm's solarize_add: v + add (at most 255) where v < 128 */
STK_HD uint8_t stk__solarize_add8(int v, float add) {
  if (v >= 128) return (uint8_t)v;
  int a = (int)add;
  return (uint8_t)(v + a > 255 ? 255 : v + a < 0 ? 0 : v + a);
}

/* Image.blend(degenerate, image, alpha) for 8-bit images (ImagingBlend):
 * deg + alpha * (img - deg) in float32, truncated, clipped outside [0, 1] */
STK_HD uint8_t stk__pil_blend8(int deg, int img, float alpha) {
  float d = (float)(img - deg);
  float v = (float)deg + alpha * d;
  return stk__trunc8(v);
}

/* convert("L"): ITU-R 601-2 luma in 16-bit fixed point, rounded */
STK_HD int stk__pil_luma(int r, int g, int b) {
  return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16;
}

/* ImageOps.autocontrast(cutoff=0) of a channel with extremes lo, hi:
 * int(v * scale + offset), scale = 255 / (hi - lo), offset = -lo * scale,
 * in double; a flat channel stays */
STK_HD uint8_t stk__pil_autocontrast8(int v, int lo, int hi) {
  if (hi <= lo) return (uint8_t)v;
  double scale = 255.0 / (double)(hi - lo), offset = -(double)lo * scale;
  double x = (double)v * scale + offset;
  return x < 0 ? 0 : x >= 255.0 ? 255 : (uint8_t)(int)x;
}

/* Python's round(x, 15) for |x| <= 1 (the rotation matrix entries) */
STK_HD double stk__round15(double x) { return nearbyint(x * 1e15) / 1e15; }

/* torchvision's _get_inverse_affine_matrix, in double as Python computes it
 * (math.radians multiplies by pi / 180). */
STK_HD void stk__inverse_affine(const double center[2], double angle, const double tr[2],
                                double scale, const double shear[2], double m[6]) {
  const double d2r = 3.141592653589793 / 180.0;
  double rot = angle * d2r, sx = shear[0] * d2r, sy = shear[1] * d2r;
  double cx = center[0], cy = center[1], tx = tr[0], ty = tr[1];
  double a = cos(rot - sy) / cos(sy);
  double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
  double c = sin(rot - sy) / cos(sy);
  double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
  m[0] = d / scale, m[1] = -b / scale, m[2] = 0.0;
  m[3] = -c / scale, m[4] = a / scale, m[5] = 0.0;
  m[2] += m[0] * (-cx - tx) + m[1] * (-cy - ty);
  m[5] += m[3] * (-cx - tx) + m[4] * (-cy - ty);
  m[2] += cx;
  m[5] += cy;
}

/* The data of PIL's AFFINE transform for timm's geometric ops on a w x h
 * image: input (x, y) = (m0 X + m1 Y + m2, m3 X + m4 Y + m5) at output
 * pixel centre (X, Y). Rotate as Image.rotate builds it (angle % 360, the
 * entries rounded to 15 places, about the centre). torchvision's ops
 * (STK__OP_SHEAR_X .. STK__OP_ROTATE) give the matrix of F.affine's and
 * F.rotate's PIL branch, as _apply_op calls them: shears about the corner
 * (center=[0, 0]) by math.degrees(math.atan(mag)), translations by
 * int(mag) about the centre, Rotate through Image.rotate. */
STK_HD void stk__pil_affine(int kind, double mag, int w, int h, double *m) {
  m[0] = 1.0, m[1] = 0.0, m[2] = 0.0, m[3] = 0.0, m[4] = 1.0, m[5] = 0.0;
  const double r2d = 180.0 / 3.141592653589793; /* math.degrees */
  double zero[2] = {0.0, 0.0}, mid[2] = {(double)w * 0.5, (double)h * 0.5}, v[2] = {0.0, 0.0};
  switch (kind) {
    case STK__OP_SHEAR_X:
    case STK__OP_SHEAR_Y:
      v[kind == STK__OP_SHEAR_Y] = atan(mag) * r2d;
      stk__inverse_affine(zero, 0.0, zero, 1.0, v, m);
      break;
    case STK__OP_TRANSLATE_X:
    case STK__OP_TRANSLATE_Y:
      v[kind == STK__OP_TRANSLATE_Y] = (double)(int)mag; /* translate=[int(magnitude), 0] */
      stk__inverse_affine(mid, 0.0, v, 1.0, zero, m);
      break;
    case STK__OP_PIL_SHEAR_X: m[1] = mag; break;
    case STK__OP_PIL_SHEAR_Y: m[3] = mag; break;
    case STK__OP_PIL_TRANSLATE_X: m[2] = mag; break;
    case STK__OP_PIL_TRANSLATE_Y: m[5] = mag; break;
    default: {
      double a = fmod(mag, 360.0); /* Python's %: the sign of 360 */
      if (a != 0.0 && a < 0.0) a += 360.0;
      if (a == 0.0) a = 0.0;
      a = -(a * (3.141592653589793 / 180.0)); /* -math.radians(angle) */
      double c = stk__round15(cos(a)), s = stk__round15(sin(a)), ns = stk__round15(-sin(a));
      double cx = (double)w / 2.0, cy = (double)h / 2.0;
      m[0] = c, m[1] = s, m[3] = ns, m[4] = c;
      m[2] = c * -cx + s * -cy + 0.0;
      m[5] = ns * -cx + c * -cy + 0.0;
      m[2] += cx;
      m[5] += cy;
      break;
    }
  }
}

/* Geometry.c's BICUBIC: the cubic through v1..v4 (a = -1) at d in [0, 1) */
STK_HD double stk__pil_cubic(double v1, double v2, double v3, double v4, double d) {
  double p1 = v2;
  double p2 = -v1 + v3;
  double p3 = 2 * (v1 - v2) + v3 - v4;
  double p4 = -v1 + v2 - v3 + v4;
  return p1 + d * (p2 + d * (p3 + d * p4));
}

/* Output pixel (xx, yy) of PIL's AFFINE transform of `src` (RGB8, w x h)
 * with fillcolor `fill` (0..255 per channel): the input point of the pixel
 * centre in double; outside [0, w) x [0, h) the fill; nearest takes the
 * pixel under it (in 16.16 fixed point unless the matrix only scales, as
 * ImagingTransformAffine); bilinear (Geometry.c's) interpolates the 2x2 pixels
 * around it, clamped to the edge, in double, and truncates; bicubic
 * (bicubic_filter32RGB) the 4x4 pixels, columns clamped to the edge, the
 * first row clamped and each later row outside the image repeating the
 * row value before it, clipped to 0..255 and truncated. `filter` is a
 * STK__WARP_ value. */
STK_HD void stk__pil_warp_px(const double *m, const uint8_t *src, int w, int h, int xx, int yy,
                             int filter, const float *fill, uint8_t *o) {
  double X = (double)xx + 0.5, Y = (double)yy + 0.5;
  double xin = m[0] * X + m[1] * Y + m[2];
  double yin = m[3] * X + m[4] * Y + m[5];
  size_t row = (size_t)w * 3;
  if (filter == STK__WARP_NEAREST) {
    int x = xin < 0.0 ? -1 : (int)xin, y = yin < 0.0 ? -1 : (int)yin;
    if (m[1] != 0.0 || m[3] != 0.0) {
      /* affine_fixed: 16.16 fixed point, a2 and a5 at the first pixel's
       * centre, stepped by the integer a0, a1, a3, a4 */
      int64_t f[6];
      f[0] = (int64_t)floor(m[0] * 65536.0 + 0.5), f[1] = (int64_t)floor(m[1] * 65536.0 + 0.5);
      f[3] = (int64_t)floor(m[3] * 65536.0 + 0.5), f[4] = (int64_t)floor(m[4] * 65536.0 + 0.5);
      f[2] = (int64_t)floor((m[2] + m[0] * 0.5 + m[1] * 0.5) * 65536.0 + 0.5);
      f[5] = (int64_t)floor((m[5] + m[3] * 0.5 + m[4] * 0.5) * 65536.0 + 0.5);
      int64_t fx = f[2] + (int64_t)yy * f[1] + (int64_t)xx * f[0];
      int64_t fy = f[5] + (int64_t)yy * f[4] + (int64_t)xx * f[3];
      /* >> 16 of a negative value: the floor */
      x = (int)(fx >= 0 ? fx / 65536 : -((-fx + 65535) / 65536));
      y = (int)(fy >= 0 ? fy / 65536 : -((-fy + 65535) / 65536));
    }
    for (int c = 0; c < 3; c++)
      o[c] = (x < 0 || x >= w || y < 0 || y >= h) ? stk__round8(fill[c])
                                                  : src[(size_t)y * row + (size_t)x * 3 + c];
    return;
  }
  if (!(xin >= 0.0 && xin < (double)w && yin >= 0.0 && yin < (double)h)) {
    for (int c = 0; c < 3; c++) o[c] = stk__round8(fill[c]);
    return;
  }
  xin -= 0.5;
  yin -= 0.5;
  double fx = floor(xin), fy = floor(yin);
  int x = (int)fx, y = (int)fy;
  double dx = xin - fx, dy = yin - fy;
  if (filter == STK__WARP_BICUBIC) {
#define STK__CLIP(i, n) ((i) < 0 ? 0 : (i) < (n) ? (i) : (n) - 1)
    int xs[4];
    for (int k = 0; k < 4; k++) xs[k] = STK__CLIP(x - 1 + k, w) * 3;
    for (int c = 0; c < 3; c++) {
      double v[4];
      for (int k = 0; k < 4; k++) {
        int yk = y - 1 + k;
        if (k == 0 || (yk >= 0 && yk < h)) {
          const uint8_t *r = src + (size_t)STK__CLIP(yk, h) * row + c;
          v[k] = stk__pil_cubic(r[xs[0]], r[xs[1]], r[xs[2]], r[xs[3]], dx);
        } else {
          v[k] = v[k - 1];
        }
      }
      double r = stk__pil_cubic(v[0], v[1], v[2], v[3], dy);
      o[c] = r <= 0.0 ? 0 : r >= 255.0 ? 255 : (uint8_t)(int)r;
    }
    return;
#undef STK__CLIP
  }
  int x0 = x < 0 ? 0 : x < w ? x : w - 1, x1 = x + 1 < 0 ? 0 : x + 1 < w ? x + 1 : w - 1;
  int y0 = y < 0 ? 0 : y < h ? y : h - 1;
  int below = y + 1 >= 0 && y + 1 < h;
  for (int c = 0; c < 3; c++) {
    const uint8_t *r0 = src + (size_t)y0 * row + c;
    double a = r0[x0 * 3], b = r0[x1 * 3];
    double v1 = a + (b - a) * dx, v2 = v1;
    if (below) {
      const uint8_t *r1 = src + (size_t)(y + 1) * row + c;
      double a1 = r1[x0 * 3], b1 = r1[x1 * 3];
      v2 = a1 + (b1 - a1) * dx;
    }
    v1 = v1 + (v2 - v1) * dy;
    o[c] = (uint8_t)(int)v1;
  }
}

/* The standard normal value number e of an erase box's "random" fill: two
 * uniforms of the box's stream (counters 2e + 1 and 2e + 2), Box-Muller. */
STK_HD float stk__erase_normal(uint64_t key, uint64_t e) {
  uint64_t z[2];
  for (int k = 0; k < 2; k++) {
    uint64_t v = key + (2 * e + 1 + (uint64_t)k) * 0x9e3779b97f4a7c15ULL;
    v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
    v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
    z[k] = v ^ (v >> 31);
  }
  double u1 = (double)(z[0] >> 11) * 0x1.0p-53, u2 = (double)(z[1] >> 11) * 0x1.0p-53;
  return (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2));
}

/* The value of element e (channel c) of an erase box with stream `key`:
 * a normal per element ("random", timm's "pixel"), a normal per channel
 * (timm's "rand"), or the given value. */
STK_HD float stk__erase_value(int random, int per_channel, const float *value, uint64_t key,
                              int c, uint64_t e) {
  if (random) return stk__erase_normal(key, e);
  if (per_channel) return stk__erase_normal(key, (uint64_t)c);
  return value[c];
}

#endif
