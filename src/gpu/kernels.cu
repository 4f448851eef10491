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

/* The normalisation tables (stk__store) into shared memory, by the block's
 * threads (t of STK_TILE_W * STK_TILE_H). */
__device__ static void load_luts(unsigned long long lut, float *lutf, unsigned short *lut16, int t) {
  const float *gl = (const float *)lut;
  const unsigned short *g16 = (const unsigned short *)(gl + 768);
  for (int q = t; q < 768; q += STK_TILE_W * STK_TILE_H) {
    lutf[q] = gl[q];
    lut16[q] = g16[q];
  }
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
  if (p.dtype != DT_U8) load_luts(p.lut, lutf, lut16, t);
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

/* ---- the augmentations ------------------------------------------------------
 * stk_augment_kernel: one block per item, its ops in order on the item's
 * 8-bit tile (in the slot's tile buffer, at the item's dst), with the
 * item's scratch tile for the ops that read neighbours (warps, sharpness,
 * blur, vertical flip). Each op's arithmetic is augment_px.h's, the CPU's,
 * so the tiles equal the CPU's for the same draws. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/augment_px.h"

/* 32-bit indices throughout: 64-bit division and modulo are slow on the
 * device, and a tile is far below 2**31 bytes (size <= 8192). The copy
 * moves 4 bytes a thread where the tile allows (w * h * 3 is a multiple of
 * 4 when w * h is). */
__device__ static void tile_copy(const uint8_t *src, uint8_t *dst, int n) {
  if ((n & 3) == 0) {
    const uint32_t *s4 = (const uint32_t *)src;
    uint32_t *d4 = (uint32_t *)dst;
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) d4[i] = s4[i];
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
  __syncthreads();
}

extern "C" __global__ void __launch_bounds__(STK_AUG_THREADS) stk_augment_kernel(stk__kaugparams p) {
  __shared__ unsigned long long hist[3][256];
  __shared__ uint8_t lut[3][256];
  __shared__ int lutok[3], lo[3], hi[3];
  __shared__ unsigned long long sum;
  const stk__kaug *a = (const stk__kaug *)p.items + blockIdx.x;
  const int W = p.w, H = p.h;
  const int npx = W * H, n = npx * 3;
  uint8_t *t = (uint8_t *)p.tiles + (size_t)a->dst * (size_t)n;
  uint8_t *sc = (uint8_t *)p.scratch + (size_t)a->dst * (size_t)n;
  const int tid = threadIdx.x, nt = blockDim.x;
  const float *fill = a->has_fill ? a->fill : NULL;
  for (int k = 0; k < a->n; k++) {
    const stk__kop *op = &a->op[k];
    const double mag = op->mag;
    switch (op->kind) {
      case STK__OP_SHEAR_X:
      case STK__OP_SHEAR_Y:
      case STK__OP_TRANSLATE_X:
      case STK__OP_TRANSLATE_Y:
      case STK__OP_ROTATE: {
        tile_copy(t, sc, n);
        const stk__warp *m = (const stk__warp *)op->m;
        for (int i = tid; i < npx; i += nt)
          stk__warp_px(m, sc, W, H, i % W, i / W, a->nearest, fill, t + i * 3);
        break;
      }
      case STK__OP_PIL_SHEAR_X: /* timm's warps: PIL's transform (augment_px.h) */
      case STK__OP_PIL_SHEAR_Y:
      case STK__OP_PIL_TRANSLATE_X:
      case STK__OP_PIL_TRANSLATE_Y:
      case STK__OP_PIL_ROTATE: {
        tile_copy(t, sc, n);
        double pm[6];
        const float zero[3] = {0, 0, 0};
        stk__pil_affine(op->kind, mag, W, H, pm);
        for (int i = tid; i < npx; i += nt)
          stk__pil_warp_px(pm, sc, W, H, i % W, i / W, a->nearest, fill ? fill : zero, t + i * 3);
        break;
      }
      case STK__OP_SOLARIZE_ADD:
        for (int i = tid; i < n; i += nt) t[i] = stk__solarize_add8(t[i], op->mag);
        break;
      case STK__OP_PIL_COLOR:
        for (int i = tid; i < npx; i += nt) {
          uint8_t *q = t + i * 3;
          int l = stk__pil_luma(q[0], q[1], q[2]);
          for (int c = 0; c < 3; c++) q[c] = stk__pil_blend8(l, q[c], op->mag);
        }
        break;
      case STK__OP_PIL_CONTRAST: {
        if (tid == 0) sum = 0;
        __syncthreads();
        unsigned long long part = 0;
        for (int i = tid; i < npx; i += nt) part += stk__pil_luma(t[i * 3], t[i * 3 + 1], t[i * 3 + 2]);
        atomicAdd(&sum, part);
        __syncthreads();
        const int mean = (int)((double)sum / (double)npx + 0.5);
        for (int i = tid; i < n; i += nt) t[i] = stk__pil_blend8(mean, t[i], op->mag);
        break;
      }
      case STK__OP_BRIGHTNESS:
      case STK__OP_ADJ_BRIGHTNESS: {
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        for (int i = tid; i < n; i += nt) t[i] = stk__blend8(k.r, k.r1, t[i], 0.0f);
        break;
      }
      case STK__OP_COLOR:
      case STK__OP_ADJ_SATURATION: {
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        for (int i = tid; i < npx; i += nt) {
          uint8_t *q = t + i * 3;
          float g = stk__gray8(q[0], q[1], q[2]);
          for (int c = 0; c < 3; c++) q[c] = stk__blend8(k.r, k.r1, q[c], g);
        }
        break;
      }
      case STK__OP_CONTRAST:
      case STK__OP_ADJ_CONTRAST: {
        if (tid == 0) sum = 0;
        __syncthreads();
        unsigned long long part = 0;
        for (int i = tid; i < npx; i += nt) part += stk__gray8(t[i * 3], t[i * 3 + 1], t[i * 3 + 2]);
        atomicAdd(&sum, part);
        __syncthreads();
        /* an integer sum: exact in any order, as on the CPU */
        float mean = (float)((float)(double)sum / (float)npx);
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        for (int i = tid; i < n; i += nt) t[i] = stk__blend8(k.r, k.r1, t[i], mean);
        break;
      }
      case STK__OP_SHARPNESS:
      case STK__OP_ADJ_SHARPNESS:
      case STK__OP_PIL_SHARPNESS: {
        if (W <= 2 || H <= 2) break;
        tile_copy(t, sc, n);
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        const int row = W * 3;
        for (int i = tid; i < n; i += nt) {
          int x = (i / 3) % W, y = i / row;
          if (x == 0 || y == 0 || x == W - 1 || y == H - 1) continue; /* the border stays */
          const uint8_t *q = sc + i;
          const int blur = stk__sharp_blur(stk__sharp_sum(q, row));
          t[i] = op->kind == STK__OP_PIL_SHARPNESS ? stk__pil_blend8(blur, q[0], op->mag)
                                                   : stk__blend8(k.r, k.r1, q[0], (float)blur);
        }
        break;
      }
      case STK__OP_POSTERIZE: {
        const uint8_t mask = stk__posterize_mask(mag);
        for (int i = tid; i < n; i += nt) t[i] &= mask;
        break;
      }
      case STK__OP_SOLARIZE:
        for (int i = tid; i < n; i += nt) t[i] = stk__solarize8(t[i], op->mag);
        break;
      case STK__OP_INVERT:
        for (int i = tid; i < n; i += nt) t[i] = (uint8_t)(255 - t[i]);
        break;
      case STK__OP_AUTOCONTRAST:
      case STK__OP_PIL_AUTOCONTRAST: {
        if (tid < 3) lo[tid] = 255, hi[tid] = 0;
        __syncthreads();
        int l[3] = {255, 255, 255}, h[3] = {0, 0, 0};
        for (int i = tid; i < npx; i += nt)
          for (int c = 0; c < 3; c++) {
            int v = t[i * 3 + c];
            l[c] = v < l[c] ? v : l[c];
            h[c] = v > h[c] ? v : h[c];
          }
        for (int c = 0; c < 3; c++) {
          atomicMin(&lo[c], l[c]);
          atomicMax(&hi[c], h[c]);
        }
        __syncthreads();
        float mn[3], scale[3];
        for (int c = 0; c < 3; c++) scale[c] = stk__autocontrast_scale(lo[c], hi[c], &mn[c]);
        for (int i = tid; i < n; i += nt) {
          int c = i % 3;
          t[i] = op->kind == STK__OP_PIL_AUTOCONTRAST ? stk__pil_autocontrast8(t[i], lo[c], hi[c])
                                                      : stk__autocontrast8(t[i], mn[c], scale[c]);
        }
        break;
      }
      case STK__OP_EQUALIZE: {
        for (int q = tid; q < 3 * 256; q += nt) hist[q / 256][q % 256] = 0;
        __syncthreads();
        for (int i = tid; i < n; i += nt) atomicAdd(&hist[i % 3][t[i]], 1ULL);
        __syncthreads();
        if (tid < 3) lutok[tid] = stk__equalize_lut((const int64_t *)hist[tid], lut[tid]);
        __syncthreads();
        for (int i = tid; i < n; i += nt) {
          int c = i % 3;
          if (lutok[c]) t[i] = lut[c][t[i]];
        }
        break;
      }
      case STK__OP_ADJ_HUE:
        for (int i = tid; i < npx; i += nt) stk__hue_px(t + i * 3, op->mag);
        break;
      case STK__OP_GRAYSCALE:
        for (int i = tid; i < npx; i += nt) {
          uint8_t *q = t + i * 3;
          q[0] = q[1] = q[2] = stk__gray8(q[0], q[1], q[2]);
        }
        break;
      case STK__OP_BLUR:
        tile_copy(t, sc, n);
        for (int i = tid; i < n; i += nt)
          t[i] = stk__blur_px(sc, W, H, (i / 3) % W, i / (W * 3), i % 3, a->blur, op->ksize);
        break;
      case STK__OP_VFLIP: {
        tile_copy(t, sc, n);
        const int row = W * 3;
        for (int i = tid; i < n; i += nt) t[i] = sc[(H - 1 - i / row) * row + i % row];
        break;
      }
      case STK__OP_HFLIP: {
        tile_copy(t, sc, n);
        const int row = W * 3;
        for (int i = tid; i < n; i += nt) {
          int y = i / row, x = (i % row) / 3, c = i % 3;
          t[i] = sc[y * row + (W - 1 - x) * 3 + c];
        }
        break;
      }
      default: break;
    }
    __syncthreads();
  }
}

/* stk_store_kernel: the tiles into the batch in its dtype and layout through
 * the normalisation tables (as the fused kernel stores), then each item's
 * erase box. One thread per output pixel of STK_STORE_ROWS rows (a block
 * covers STK_TILE_W x STK_TILE_H * STK_STORE_ROWS pixels: the tables a block
 * loads first, 4.6 KB, are then read for 8 times as many pixels), blockIdx.y
 * the item. */
extern "C" __global__ void __launch_bounds__(STK_TILE_W * STK_TILE_H)
    stk_store_kernel(stk__kaugparams p) {
  __shared__ float lutf[768];
  __shared__ unsigned short lut16[768];
  const int t = threadIdx.y * STK_TILE_W + threadIdx.x;
  if (p.dtype != DT_U8) load_luts(p.lut, lutf, lut16, t);
  __syncthreads();
  const stk__kaug *a = (const stk__kaug *)p.items + blockIdx.y;
  const int W = p.w, H = p.h;
  const int i = (blockIdx.x % p.tiles_x) * STK_TILE_W + threadIdx.x;
  const int j0 = (blockIdx.x / p.tiles_x) * (STK_TILE_H * STK_STORE_ROWS) + threadIdx.y;
  if (i >= W) return;
  const size_t plane = (size_t)W * H, img = (size_t)a->dst * 3 * plane;
  for (int r = 0; r < STK_STORE_ROWS; r++) {
    const int j = j0 + r * STK_TILE_H;
    if (j >= H) return;
    const uint8_t *px = (const uint8_t *)p.tiles + (size_t)a->dst * plane * 3 + ((size_t)j * W + i) * 3;
    const int in_box = a->erase && i >= a->ex && i < a->ex + a->ew && j >= a->ey && j < a->ey + a->eh;
    for (int c = 0; c < 3; c++) {
      size_t o = p.layout == LAYOUT_NCHW ? img + c * plane + (size_t)j * W + i
                                         : img + ((size_t)j * W + i) * 3 + c;
      if (!in_box) {
        int v = px[c];
        switch (p.dtype) {
          case DT_F32: ((float *)p.out)[o] = lutf[c * 256 + v]; break;
          case DT_F16:
          case DT_BF16: ((unsigned short *)p.out)[o] = lut16[c * 256 + v]; break;
          default: ((unsigned char *)p.out)[o] = (unsigned char)v; break;
        }
        continue;
      }
      /* the erase value, numbered channel by channel as on the CPU */
      unsigned long long e = ((unsigned long long)c * a->eh + (j - a->ey)) * a->ew + (i - a->ex);
      float v = a->erase_random ? stk__erase_normal(a->erase_key, e) : a->erase_value[c];
      switch (p.dtype) {
        case DT_F32: ((float *)p.out)[o] = v; break;
        case DT_F16: ((unsigned short *)p.out)[o] = __half_as_ushort(__float2half_rn(v)); break;
        case DT_BF16:
          ((unsigned short *)p.out)[o] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
          break;
        default: ((unsigned char *)p.out)[o] = stk__round8(v); break;
      }
    }
  }
}

/* stk_mix_kernel: MixUp or CutMix of a finished batch, out of place (the
 * source is the slot, which other images of the batch still read). One
 * thread per element of image blockIdx.y; its partner is image i - 1 or,
 * with p.pair, image n - 1 - i; the MixUp sum is the CPU's
 * (stk__mix_apply): in float, image i - 1's product first, rounded once to
 * the dtype, so the GPU's batch equals the CPU's. Row blockIdx.y == n is the
 * soft labels, in the same order of operations as one_hot(y).roll(1) *
 * (1 - lam) + one_hot(y) * lam (one-hot values on/off: timm's label
 * smoothing). */
__device__ static float mix_load(int dtype, const void *p, unsigned int k) {
  switch (dtype) {
    case DT_F32: return ((const float *)p)[k];
    case DT_F16: return __half2float(__ushort_as_half(((const unsigned short *)p)[k]));
    case DT_BF16: return __bfloat162float(__ushort_as_bfloat16(((const unsigned short *)p)[k]));
    default: return (float)((const unsigned char *)p)[k];
  }
}

extern "C" __global__ void __launch_bounds__(STK_MIX_THREADS) stk_mix_kernel(stk__kmixparams p) {
  const unsigned int e = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y;
  if (i == p.n) {
    if (!p.soft || e >= (unsigned int)p.n * (unsigned int)p.classes) return;
    const int r = (int)(e / (unsigned int)p.classes), c = (int)(e % (unsigned int)p.classes);
    const long long *y = (const long long *)p.labels;
    const int q = p.pair ? p.n - 1 - r : r == 0 ? p.n - 1 : r - 1;
    float prev = y[q] == c ? p.on : p.off, cur = y[r] == c ? p.on : p.off;
    float v = prev * p.b;
    ((float *)p.soft)[e] = v + cur * p.a;
    return;
  }
  const unsigned int plane = (unsigned int)p.w * (unsigned int)p.h, elems = plane * 3;
  if (e >= elems) return;
  const int es = p.dtype == DT_F32 ? 4 : p.dtype == DT_U8 ? 1 : 2;
  /* image i's element e and image i - 1's, as element indices in the batch */
  const int partner = p.pair ? p.n - 1 - i : i == 0 ? p.n - 1 : i - 1;
  const size_t at = (size_t)i * elems + e, from = (size_t)partner * elems + e;
  const char *src = (const char *)p.src;
  char *dst = (char *)p.dst;
  if (p.mode == 1) {
    float v = mix_load(p.dtype, src + from * es, 0) * p.b;
    v = v + mix_load(p.dtype, src + at * es, 0) * p.a;
    switch (p.dtype) {
      case DT_F32: *(float *)(dst + at * 4) = v; break;
      case DT_F16: *(unsigned short *)(dst + at * 2) = __half_as_ushort(__float2half_rn(v)); break;
      case DT_BF16: *(unsigned short *)(dst + at * 2) = __bfloat16_as_ushort(__float2bfloat16_rn(v)); break;
      default: *(unsigned char *)(dst + at) = stk__round8(v); break;
    }
    return;
  }
  /* CutMix (or none): a copy, from image i - 1 inside the box */
  unsigned int x, y;
  if (p.layout == LAYOUT_NCHW) {
    const unsigned int q = e % plane;
    x = q % (unsigned int)p.w, y = q / (unsigned int)p.w;
  } else {
    const unsigned int q = e / 3;
    x = q % (unsigned int)p.w, y = q / (unsigned int)p.w;
  }
  const int in_box = p.mode == 2 && (int)x >= p.x1 && (int)x < p.x2 && (int)y >= p.y1 && (int)y < p.y2;
  const size_t s = in_box ? from : at;
  switch (es) {
    case 4: *(float *)(dst + at * 4) = *(const float *)(src + s * 4); break;
    case 2: *(unsigned short *)(dst + at * 2) = *(const unsigned short *)(src + s * 2); break;
    default: dst[at] = src[s]; break;
  }
}
