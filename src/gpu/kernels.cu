/*
 * kernels.cu: the fused crop + resize + flip + normalise + store kernel.
 *
 * One launch covers a whole batch (or a chunk of it): blockIdx.y is the item,
 * blockIdx.x a 32 x 8 tile of its output image, one thread per output pixel.
 *
 * The arithmetic is the CPU resampler's (src/ops/resample.c), which is
 * Pillow's, from the one definition both include (src/ops/window.h): per
 * output pixel the filter's (the item's: bilinear or bicubic) support is
 * widened by the downscale
 * factor, the window is clipped to the source range [lo, hi), the
 * weights are normalised in double and rounded to 22-bit fixed point, the
 * horizontal pass is rounded to 8 bits, then the vertical pass (or the
 * other way round when the CPU path would: vfirst, decided on the host by
 * the same rule as stk__resampler_run). The weights
 * are computed here on the fly with the same double operations in the same
 * order (this file is compiled with --fmad=false so that nothing is fused
 * differently from the host), and the pixel sums are the same int32 sums,
 * so on the same source pixels the output is bit-identical to the CPU path.
 * Normalisation goes through the same 256-entry tables (stk__store_init), so
 * every dtype matches too.
 *
 * Compiled by nvcc at build time into a fatbin that the library embeds and
 * loads with cuModuleLoadData; the host side is src/gpu/gpu.c.
 */
#include <stdint.h>

#include "gpu/kernel_abi.h"
#include "ops/window.h"

/* dtype and layout values of stoker.h */
#define DT_F32 0
#define DT_F16 1
#define DT_BF16 2
#define DT_U8 3
#define LAYOUT_NCHW 0

/* Output index i's window on one axis: its weights to k[0..count) and its
 * first source pixel (absolute, in geometry coordinates) to *first. */
__device__ void axis_coeffs(int filter, double in0_abs, double scale, int lo, int hi, int i,
                            int kmax, int *k, int *first, int *count) {
  int xmin, n;
  stk__window(filter, in0_abs - lo, scale, hi - lo, i, &xmin, &n);
  if (n > kmax) n = kmax; /* cannot happen: kmax is Pillow's ksize */
  stk__window_weights(filter, in0_abs - lo, scale, i, xmin, n, n, k);
  *first = lo + xmin;
  *count = n;
}

extern "C" __global__ void __launch_bounds__(STK_TILE_W * STK_TILE_H)
    stk_resample_kernel(stk__kparams p) {
  extern __shared__ int smem[];
  int *kx = smem;               /* STK_TILE_W * p.kx */
  int *ky = kx + STK_TILE_W * p.kx;     /* STK_TILE_H * p.ky */
  int *bx = ky + STK_TILE_H * p.ky;     /* STK_TILE_W * 2: first, count */
  int *by = bx + 2 * STK_TILE_W;        /* STK_TILE_H * 2 */
  float *lutf = (float *)(by + 2 * STK_TILE_H);                   /* 768 */
  unsigned short *lut16 = (unsigned short *)(lutf + 768); /* 768 */

  const stk__kitem *it = (const stk__kitem *)p.items + blockIdx.y;
  const int W = p.out_w, H = p.out_h;
  const int ox0 = (blockIdx.x % p.tiles_x) * STK_TILE_W;
  const int oy0 = (blockIdx.x / p.tiles_x) * STK_TILE_H;
  const int t = threadIdx.y * STK_TILE_W + threadIdx.x;

  if (t < STK_TILE_W) {
    int i = ox0 + t;
    if (i < W)
      axis_coeffs(it->filter, it->in0x, it->scalex, it->lox, it->hix, i, p.kx, kx + t * p.kx,
                  &bx[2 * t], &bx[2 * t + 1]);
  } else if (t < STK_TILE_W + STK_TILE_H) {
    int r = t - STK_TILE_W, j = oy0 + r;
    if (j < H)
      axis_coeffs(it->filter, it->in0y, it->scaley, it->loy, it->hiy, j, p.ky, ky + r * p.ky,
                  &by[2 * r], &by[2 * r + 1]);
  }
  if (p.dtype != DT_U8) {
    const float *gl = (const float *)p.lut;
    const unsigned short *g16 = (const unsigned short *)(gl + 768);
    for (int q = t; q < 768; q += STK_TILE_W * STK_TILE_H) {
      lutf[q] = gl[q];
      lut16[q] = g16[q];
    }
  }
  if (blockIdx.x == 0 && t == 0 && p.labels) ((long long *)p.labels)[it->dst] = it->label;
  __syncthreads();

  const int i = ox0 + threadIdx.x, j = oy0 + threadIdx.y;
  if (i >= W || j >= H) return;

  const unsigned char *src = (const unsigned char *)it->src;
  const int pitch = it->pitch;
  const int *kxr = kx + threadIdx.x * p.kx, *kyr = ky + threadIdx.y * p.ky;
  int x0 = bx[2 * threadIdx.x] - it->sx, nx = bx[2 * threadIdx.x + 1];
  int y0 = by[2 * threadIdx.y] - it->sy, ny = by[2 * threadIdx.y + 1];
  /* The host sizes the source to cover every window; clamp anyway so that a
   * bad item can only read its own buffer. */
  int kx0 = 0, ky0 = 0;
  if (x0 < 0) { kx0 = -x0; nx += x0; x0 = 0; }
  if (y0 < 0) { ky0 = -y0; ny += y0; y0 = 0; }
  if (x0 + nx > it->sw) nx = it->sw - x0;
  if (y0 + ny > it->sh) ny = it->sh - y0;

  const int half = 1 << (STK_PRECISION_BITS - 1);
  int a0 = half, a1 = half, a2 = half;
  if (!it->vfirst) {
    /* each source row of the window through the horizontal filter, rounded
     * to 8 bits, then the vertical filter over those */
    for (int r = 0; r < ny; r++) {
      const unsigned char *row = src + (size_t)(y0 + r) * pitch + (size_t)x0 * 3;
      int h0 = half, h1 = half, h2 = half;
      for (int c = 0; c < nx; c++) {
        int w = kxr[kx0 + c];
        h0 += row[3 * c] * w;
        h1 += row[3 * c + 1] * w;
        h2 += row[3 * c + 2] * w;
      }
      int wy = kyr[ky0 + r];
      a0 += stk__clip8(h0) * wy;
      a1 += stk__clip8(h1) * wy;
      a2 += stk__clip8(h2) * wy;
    }
  } else {
    /* each source column through the vertical filter first */
    const unsigned char *col = src + (size_t)y0 * pitch + (size_t)x0 * 3;
    for (int c = 0; c < nx; c++, col += 3) {
      int v0 = half, v1 = half, v2 = half;
      for (int r = 0; r < ny; r++) {
        int w = kyr[ky0 + r];
        const unsigned char *q = col + (size_t)r * pitch;
        v0 += q[0] * w;
        v1 += q[1] * w;
        v2 += q[2] * w;
      }
      int wx = kxr[kx0 + c];
      a0 += stk__clip8(v0) * wx;
      a1 += stk__clip8(v1) * wx;
      a2 += stk__clip8(v2) * wx;
    }
  }
  const int v0 = stk__clip8(a0), v1 = stk__clip8(a1), v2 = stk__clip8(a2);

  const int ox = it->flip ? W - 1 - i : i;
  const size_t plane = (size_t)W * H, img = (size_t)it->dst * 3 * plane;
  size_t o0, o1, o2;
  if (p.layout == LAYOUT_NCHW) {
    o0 = img + (size_t)j * W + ox;
    o1 = o0 + plane;
    o2 = o1 + plane;
  } else {
    o0 = img + ((size_t)j * W + ox) * 3;
    o1 = o0 + 1;
    o2 = o0 + 2;
  }
  switch (p.dtype) {
    case DT_F32: {
      float *d = (float *)p.out;
      d[o0] = lutf[v0];
      d[o1] = lutf[256 + v1];
      d[o2] = lutf[512 + v2];
      break;
    }
    case DT_F16:
    case DT_BF16: {
      unsigned short *d = (unsigned short *)p.out;
      d[o0] = lut16[v0];
      d[o1] = lut16[256 + v1];
      d[o2] = lut16[512 + v2];
      break;
    }
    default: {
      unsigned char *d = (unsigned char *)p.out;
      d[o0] = (unsigned char)v0;
      d[o1] = (unsigned char)v1;
      d[o2] = (unsigned char)v2;
      break;
    }
  }
}
