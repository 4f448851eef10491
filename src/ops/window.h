/*
 * window.h: the resampler's window arithmetic, one definition for the CPU
 * resampler (resample.c), the GPU planner (gpu/plan.c) and the CUDA kernel
 * (gpu/kernels.cu), so that CPU/GPU bit-exactness cannot drift.
 *
 * It is Pillow's antialiased convolution resampler (ImagingResample), with
 * its bilinear (support 1) or bicubic (a = -0.5, support 2) filter: per
 * output pixel the filter's support is widened by the downscale factor, the
 * window is clipped to the source range, the weights are normalised in
 * double and rounded to 22-bit fixed point. The kernel is compiled with
 * --fmad=false, so these double operations round the same way on both
 * sides.
 *
 * Plain C11 and CUDA C++: no includes beyond <stdint.h>, no allocation.
 */
#ifndef STK_WINDOW_H
#define STK_WINDOW_H

#include <stdint.h>

#if defined(__CUDACC__)
#define STK_HD static __host__ __device__ __forceinline__
#else
#define STK_HD static inline
#endif

#define STK_PRECISION_BITS 22

/* The filters, numbered as stk_interpolation in stoker.h. */
#define STK_FILTER_BILINEAR 0
#define STK_FILTER_BICUBIC 1

STK_HD double stk__bilinear(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's bicubic_filter, a = -0.5, written with Pillow's operations in
 * Pillow's order so that every weight rounds as Pillow's does. */
STK_HD double stk__bicubic(double x) {
  const double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

STK_HD double stk__filter(int filter, double x) {
  return filter == STK_FILTER_BICUBIC ? stk__bicubic(x) : stk__bilinear(x);
}

/* Pillow's support: the filter's support times the downscale factor (at
 * least 1). filterp->support * filterscale; for bilinear 1.0 * s == s, so
 * its windows are the ones it always had. */
STK_HD double stk__filter_support(int filter, double scale) {
  return (filter == STK_FILTER_BICUBIC ? 2.0 : 1.0) * (scale < 1.0 ? 1.0 : scale);
}

/* The window of output pixel i on an axis whose first output pixel's
 * source position is in0 (relative to the source range's start), scale
 * source pixels per output pixel, in_size source pixels: the first source
 * pixel it reads (relative to the range) and how many. */
STK_HD void stk__window(int filter, double in0, double scale, int in_size, int i, int *first,
                        int *count) {
  double support = stk__filter_support(filter, scale);
  double center = in0 + (i + 0.5) * scale;
  int xmin = (int)(center - support + 0.5);
  if (xmin < 0) xmin = 0;
  int xmax = (int)(center + support + 0.5);
  if (xmax > in_size) xmax = in_size;
  xmax -= xmin;
  if (xmax < 0) xmax = 0;
  *first = xmin;
  *count = xmax;
}

/* Pillow's ksize: the most weights any window of the axis has. */
STK_HD int stk__window_ksize(int filter, double scale) {
  double support = stk__filter_support(filter, scale);
  int s = (int)support;
  return ((double)s < support ? s + 1 : s) * 2 + 1; /* ceil(support) * 2 + 1 */
}

/* The weights of output pixel i's window (first, count from stk__window):
 * k[0..count) normalised and in fixed point, then zeros up to k[nk) (the
 * CPU's tables are ksize wide; the kernel asks for count). The weights are
 * evaluated twice (sum, then normalised) rather than kept in a scratch array,
 * so any downscale factor works without a size cap; both evaluations are the
 * same double operations, so the values are Pillow's. */
STK_HD void stk__window_weights(int filter, double in0, double scale, int i, int first, int count,
                                int nk, int32_t *k) {
  double ss = 1.0 / (scale < 1.0 ? 1.0 : scale);
  double center = in0 + (i + 0.5) * scale, ww = 0.0;
  for (int x = 0; x < count; x++) ww += stk__filter(filter, (x + first - center + 0.5) * ss);
  for (int x = 0; x < nk; x++) {
    double v = x < count ? stk__filter(filter, (x + first - center + 0.5) * ss) : 0.0;
    if (ww != 0.0) v /= ww;
    k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << STK_PRECISION_BITS))
                 : (int32_t)(0.5 + v * (1 << STK_PRECISION_BITS));
  }
}

/* A fixed-point sum back to an 8-bit level (bicubic's negative lobes make
 * sums below 0 and above 255 possible: both are clamped, as Pillow does). */
STK_HD int stk__clip8(int32_t v) {
  v >>= STK_PRECISION_BITS;
  return v < 0 ? 0 : v > 255 ? 255 : v;
}

#endif
