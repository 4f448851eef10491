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
 * nt threads (this one is t). */
__device__ static void load_luts(unsigned long long lut, float *lutf, unsigned short *lut16, int t,
                                 int nt) {
  const float *gl = (const float *)lut;
  const unsigned short *g16 = (const unsigned short *)(gl + 768);
  for (int q = t; q < 768; q += nt) {
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
  const int W = it->ow, H = it->oh;
  const int ox0 = (blockIdx.x % p.tiles_x) * STK_TILE_W;
  const int oy0 = (blockIdx.x / p.tiles_x) * STK_TILE_H;
  const int t = threadIdx.y * STK_TILE_W + threadIdx.x;
  /* The grid covers the largest output; a tile wholly outside an item of
   * its own smaller size has nothing to do (the label is written by tile 0,
   * which every item has). Block-uniform, so before any barrier. */
  if (ox0 >= W || oy0 >= H) return;

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
  if (p.dtype != DT_U8) load_luts(p.lut, lutf, lut16, t, STK_TILE_W * STK_TILE_H);
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
  /* images sit out_w * out_h * 3 elements apart whatever their own size */
  const size_t plane = (size_t)W * H, img = (size_t)it->dst * 3 * ((size_t)p.out_w * p.out_h);
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
 * device, and a tile is far below 2**31 bytes (size <= 8192).
 *
 * A block of STK_AUG_THREADS (512) threads, on a copy of the tile in
 * shared memory where it fits (kernel_abi.h): measured on an H200 with the
 * store inside, a batch of TrivialAugment alone took 345 us with 256
 * threads on global memory, 299 us with 256 threads on shared memory, 217
 * us with 512 (docs/BENCHMARKS.md). The threads move whole words:
 * a tile whose w * h is a multiple of 4 is read and written 4 bytes at a
 * time (w * h * 3 bytes, at dst * w * h * 3 in a 256-byte-aligned buffer,
 * so every word is aligned), UNROLL words in flight per thread. */
#define UNROLL 4

/* Each byte v of channel c through f(v, c), in place. */
template <class F> __device__ static void map_bytes(uint8_t *t, int n, F f) {
  const int tid = threadIdx.x, nt = blockDim.x;
  if (n & 3) {
    for (int i = tid; i < n; i += nt) t[i] = f(t[i], i % 3);
    return;
  }
  uint32_t *t4 = (uint32_t *)t;
  const int nw = n >> 2;
  for (int w0 = tid; w0 < nw; w0 += UNROLL * nt) {
    uint32_t v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++) v[u] = w0 + u * nt < nw ? t4[w0 + u * nt] : 0;
#pragma unroll
    for (int u = 0; u < UNROLL; u++) {
      const int w = w0 + u * nt;
      if (w >= nw) break;
      uint32_t o = 0;
      int c = (4 * w) % 3;
#pragma unroll
      for (int b = 0; b < 4; b++) {
        o |= (uint32_t)f((int)((v[u] >> (8 * b)) & 255), c) << (8 * b);
        c = c == 2 ? 0 : c + 1;
      }
      t4[w] = o;
    }
  }
}

/* f(q) on each pixel q (3 bytes) of the tile; written back when STORE. */
template <bool STORE, class F> __device__ static void map_pixels(uint8_t *t, int npx, F f) {
  const int tid = threadIdx.x, nt = blockDim.x;
  if (npx & 3) {
    for (int i = tid; i < npx; i += nt) f(t + 3 * i);
    return;
  }
  uint32_t *t4 = (uint32_t *)t;
  for (int g = tid; g < npx >> 2; g += nt) { /* 4 pixels, 3 words */
    uint32_t w[3] = {t4[3 * g], t4[3 * g + 1], t4[3 * g + 2]};
    uint8_t q[12];
#pragma unroll
    for (int j = 0; j < 12; j++) q[j] = (uint8_t)(w[j >> 2] >> (8 * (j & 3)));
#pragma unroll
    for (int k = 0; k < 4; k++) f(q + 3 * k);
    if (STORE) {
#pragma unroll
      for (int k = 0; k < 3; k++)
        t4[3 * g + k] = (uint32_t)q[4 * k] | (uint32_t)q[4 * k + 1] << 8 |
                        (uint32_t)q[4 * k + 2] << 16 | (uint32_t)q[4 * k + 3] << 24;
    }
  }
}

__device__ static void tile_copy(const uint8_t *src, uint8_t *dst, int n) {
  if ((n & 15) == 0 && ((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 15) == 0) {
    const uint4 *s16 = (const uint4 *)src;
    uint4 *d16 = (uint4 *)dst;
    for (int i = threadIdx.x; i < n / 16; i += blockDim.x) d16[i] = s16[i];
  } else if ((n & 3) == 0) {
    const uint32_t *s4 = (const uint32_t *)src;
    uint32_t *d4 = (uint32_t *)dst;
    for (int i = threadIdx.x; i < n / 4; i += blockDim.x) d4[i] = s4[i];
  } else {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
  }
  __syncthreads();
}

/* The tile from global into shared memory (16-byte aligned at both ends,
 * n a multiple of 16) with UNROLL loads in flight before their stores: a
 * copy from global memory otherwise waits a load's latency per 16 bytes.
 * Only here: unrolled at every copy site the kernel's registers would
 * reach its cap. */
__device__ static void tile_stage(const uint8_t *src, uint8_t *dst, int n) {
  const uint4 *s16 = (const uint4 *)src;
  uint4 *d16 = (uint4 *)dst;
  const int n16 = n / 16, nt = blockDim.x;
  for (int i0 = threadIdx.x; i0 < n16; i0 += UNROLL * nt) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; u++)
      if (i0 + u * nt < n16) v[u] = s16[i0 + u * nt];
#pragma unroll
    for (int u = 0; u < UNROLL; u++)
      if (i0 + u * nt < n16) d16[i0 + u * nt] = v[u];
  }
  __syncthreads();
}

/* The block's per-channel table lut[c][v] = f(v, c), then the tile through
 * it: every op whose output byte depends only on its input byte and channel
 * (the table holds the same values f would give byte by byte). */
template <class F> __device__ static void lut_op(uint8_t *t, int n, uint8_t (*lut)[256], F f) {
  for (int q = threadIdx.x; q < 768; q += blockDim.x) lut[q >> 8][q & 255] = f(q & 255, q >> 8);
  __syncthreads();
  map_bytes(t, n, [&](int v, int c) { return lut[c][v]; });
}

/* The block's sum of key(q) over the tile's pixels, in *sum (shared). */
template <class F> __device__ static unsigned long long pixel_sum(uint8_t *t, int npx,
                                                                  unsigned long long *sum, F key) {
  if (threadIdx.x == 0) *sum = 0;
  __syncthreads();
  unsigned long long part = 0;
  map_pixels<false>(t, npx, [&](uint8_t *q) { part += (unsigned long long)key(q); });
  atomicAdd(sum, part);
  __syncthreads();
  return *sum;
}

/* Per-channel histograms of the tile into hist (int64, as
 * stk__equalize_lut reads them). The lanes of a warp that hold the same
 * channel and value add once, with their count (__match_any_sync): a flat
 * region would otherwise serialise the whole warp on one counter; 4
 * replicas of the 32-bit counts spread the warps. */
__device__ static void histogram(const uint8_t *t, int n, unsigned int (*h32)[768],
                                 unsigned long long (*hist)[256]) {
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31;
  for (int q = tid; q < 4 * 768; q += nt) h32[q / 768][q % 768] = 0;
  __syncthreads();
  unsigned int *h = h32[(tid >> 5) & 3];
  /* a bound the whole warp shares, so that every lane reaches each match */
  const int rounds = (n + nt - 1) / nt;
  for (int r = 0; r < rounds; r++) {
    const int i = r * nt + tid;
    const int key = i < n ? (i % 3) * 256 + t[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, key);
    if (key >= 0 && lane == __ffs(same) - 1) atomicAdd(&h[key], (unsigned)__popc(same));
  }
  __syncthreads();
  for (int q = tid; q < 768; q += nt)
    hist[q >> 8][q & 255] = (unsigned long long)h32[0][q] + h32[1][q] + h32[2][q] + h32[3][q];
  __syncthreads();
}

/* Each channel's smallest and largest byte over this thread's part of the
 * tile (the block's are their atomicMin/atomicMax). */
__device__ static void channel_minmax(const uint8_t *t, int n, int *l, int *h) {
  int l0 = 255, l1 = 255, l2 = 255, h0 = 0, h1 = 0, h2 = 0;
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int i = tid; i < n; i += nt) { /* byte loads: a whole warp reads 32 bytes */
    const int v = t[i], c = i % 3;
    if (c == 0) l0 = min(l0, v), h0 = max(h0, v);
    else if (c == 1) l1 = min(l1, v), h1 = max(h1, v);
    else l2 = min(l2, v), h2 = max(h2, v);
  }
  l[0] = l0, l[1] = l1, l[2] = l2, h[0] = h0, h[1] = h1, h[2] = h2;
}

/* The finished tile into the batch in its dtype and layout through the
 * normalisation tables, with the item's erase box (the erase value
 * numbered channel by channel, as on the CPU). */
__device__ static void store_tile(const stk__kaugparams &p, const stk__kaug *a, const uint8_t *t,
                                  const float *lutf, const unsigned short *lut16) {
  const int W = p.w, npx = W * p.h, n = npx * 3;
  const size_t img = (size_t)a->dst * (size_t)n;
  const int nchw = p.layout == LAYOUT_NCHW, erase = a->erase;
  if (!nchw && !erase && (npx & 3) == 0) {
    /* channels last, nothing erased, whole words: 4 bytes of the tile in
     * one load and their 4 values out in one store (the image starts at a
     * multiple of 4 elements, so the store is aligned to its size) */
    const uint32_t *t4 = (const uint32_t *)t;
    for (int w = threadIdx.x; w < n / 4; w += blockDim.x) {
      const uint32_t q = t4[w];
      int c = (4 * w) % 3;
      int v[4], k[4];
#pragma unroll
      for (int b = 0; b < 4; b++) {
        v[b] = (int)((q >> (8 * b)) & 255);
        k[b] = c * 256 + v[b];
        c = c == 2 ? 0 : c + 1;
      }
      const size_t o = img + 4 * (size_t)w;
      switch (p.dtype) {
        case DT_F32:
          *(float4 *)((float *)p.out + o) = make_float4(lutf[k[0]], lutf[k[1]], lutf[k[2]], lutf[k[3]]);
          break;
        case DT_F16:
        case DT_BF16:
          *(uint2 *)((unsigned short *)p.out + o) =
              make_uint2((uint32_t)lut16[k[0]] | (uint32_t)lut16[k[1]] << 16,
                         (uint32_t)lut16[k[2]] | (uint32_t)lut16[k[3]] << 16);
          break;
        default: *(uint32_t *)((unsigned char *)p.out + o) = q; break;
      }
    }
    return;
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int px = i / 3, c = i - 3 * px;
    const size_t o = nchw ? img + (size_t)c * npx + px : img + i;
    const int v = t[i];
    int x = 0, y = 0, box = -1;
    if (erase) x = px % W, y = px / W; /* (divisions only where a box may be) */
    for (int b = 0; b < erase; b++) /* the last box over the pixel wins, as on the CPU */
      if (x >= a->ex[b] && x < a->ex[b] + a->ew[b] && y >= a->ey[b] && y < a->ey[b] + a->eh[b])
        box = b;
    if (box < 0) {
      switch (p.dtype) {
        case DT_F32: ((float *)p.out)[o] = lutf[c * 256 + v]; break;
        case DT_F16:
        case DT_BF16: ((unsigned short *)p.out)[o] = lut16[c * 256 + v]; break;
        default: ((unsigned char *)p.out)[o] = (unsigned char)v; break;
      }
      continue;
    }
    const int b = box;
    unsigned long long e =
        ((unsigned long long)c * a->eh[b] + (y - a->ey[b])) * a->ew[b] + (x - a->ex[b]);
    float ev = stk__erase_value(a->erase_random, a->erase_per_channel, a->erase_value,
                                a->erase_key[b], c, e);
    switch (p.dtype) {
      case DT_F32: ((float *)p.out)[o] = ev; break;
      case DT_F16: ((unsigned short *)p.out)[o] = __half_as_ushort(__float2half_rn(ev)); break;
      case DT_BF16: ((unsigned short *)p.out)[o] = __bfloat16_as_ushort(__float2bfloat16_rn(ev)); break;
      default: ((unsigned char *)p.out)[o] = stk__round8(ev); break;
    }
  }
}

extern "C" __global__ void __launch_bounds__(STK_AUG_THREADS) stk_augment_kernel(stk__kaugparams p) {
  extern __shared__ __align__(16) uint8_t dyn[];
  __shared__ unsigned int h32[4][768];
  __shared__ unsigned long long hist[3][256];
  __shared__ uint8_t lut[3][256];
  __shared__ float lutf[768];
  __shared__ unsigned short lut16[768];
  __shared__ int lutok[3], lo[3], hi[3];
  __shared__ unsigned long long sum;
  const stk__kaug *a = (const stk__kaug *)p.items + blockIdx.x;
  const int W = p.w, H = p.h;
  const int npx = W * H, n = npx * 3;
  uint8_t *t = (uint8_t *)p.tiles + (size_t)a->dst * (size_t)n;
  uint8_t *sc = (uint8_t *)p.scratch + (size_t)a->dst * (size_t)n;
  const int tid = threadIdx.x, nt = blockDim.x;
  if (p.smem != STK_AUG_SMEM_NONE && a->n > 0) {
    /* the ops on a shared copy (generic pointers: the same code either
     * way); store_tile reads the result from there */
    if ((n & 15) == 0 && ((uintptr_t)t & 15) == 0)
      tile_stage(t, dyn, n);
    else
      tile_copy(t, dyn, n);
    t = dyn;
    if (p.smem == STK_AUG_SMEM_BOTH) sc = dyn + ((n + 15) & ~15);
  }
  const float *fill = a->has_fill ? a->fill : NULL;
  if (p.dtype != DT_U8) load_luts(p.lut, lutf, lut16, tid, nt); /* read after the ops' syncs */
  for (int k = 0; k < a->n; k++) {
    const stk__kop *op = &a->op[k];
    const double mag = op->mag;
    /* the warp's filter: drawn for it, else the item's (random: bilinear) */
    int filter = op->warp ? op->warp - 1 : a->filter;
    if (filter == STK__WARP_RANDOM) filter = STK__WARP_BILINEAR;
    switch (op->kind) {
      case STK__OP_SHEAR_X:
      case STK__OP_SHEAR_Y:
      case STK__OP_TRANSLATE_X:
      case STK__OP_TRANSLATE_Y:
      case STK__OP_ROTATE: {
        tile_copy(t, sc, n);
        if (filter == STK__WARP_BICUBIC) { /* PIL's transform, as augment.c */
          double pm[6];
          const float zero[3] = {0, 0, 0};
          stk__pil_affine(op->kind, mag, W, H, pm);
          for (int i = tid; i < npx; i += nt)
            stk__pil_warp_px(pm, sc, W, H, i % W, i / W, filter, fill ? fill : zero, t + i * 3);
          break;
        }
        const stk__warp *m = (const stk__warp *)op->m;
        for (int i = tid; i < npx; i += nt)
          stk__warp_px(m, sc, W, H, i % W, i / W, filter == STK__WARP_NEAREST, fill, t + i * 3);
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
          stk__pil_warp_px(pm, sc, W, H, i % W, i / W, filter, fill ? fill : zero, t + i * 3);
        break;
      }
      case STK__OP_SOLARIZE_ADD:
        lut_op(t, n, lut, [&](int v, int) { return stk__solarize_add8(v, op->mag); });
        break;
      case STK__OP_PIL_COLOR:
        map_pixels<true>(t, npx, [&](uint8_t *q) {
          int l = stk__pil_luma(q[0], q[1], q[2]);
          for (int c = 0; c < 3; c++) q[c] = stk__pil_blend8(l, q[c], op->mag);
        });
        break;
      case STK__OP_PIL_CONTRAST: {
        unsigned long long s = pixel_sum(t, npx, &sum, [](const uint8_t *q) {
          return stk__pil_luma(q[0], q[1], q[2]);
        });
        const int mean = (int)((double)s / (double)npx + 0.5);
        lut_op(t, n, lut, [&](int v, int) { return stk__pil_blend8(mean, v, op->mag); });
        break;
      }
      case STK__OP_BRIGHTNESS:
      case STK__OP_ADJ_BRIGHTNESS: {
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        lut_op(t, n, lut, [&](int v, int) { return stk__blend8(k.r, k.r1, v, 0.0f); });
        break;
      }
      case STK__OP_COLOR:
      case STK__OP_ADJ_SATURATION: {
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        map_pixels<true>(t, npx, [&](uint8_t *q) {
          float g = stk__gray8(q[0], q[1], q[2]);
          for (int c = 0; c < 3; c++) q[c] = stk__blend8(k.r, k.r1, q[c], g);
        });
        break;
      }
      case STK__OP_CONTRAST:
      case STK__OP_ADJ_CONTRAST: {
        /* an integer sum: exact in any order, as on the CPU */
        unsigned long long s = pixel_sum(t, npx, &sum, [](const uint8_t *q) {
          return stk__gray8(q[0], q[1], q[2]);
        });
        float mean = (float)((float)(double)s / (float)npx);
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        lut_op(t, n, lut, [&](int v, int) { return stk__blend8(k.r, k.r1, v, mean); });
        break;
      }
      case STK__OP_SHARPNESS:
      case STK__OP_ADJ_SHARPNESS:
      case STK__OP_PIL_SHARPNESS: {
        if (W <= 2 || H <= 2) break;
        tile_copy(t, sc, n);
        const stk__blend k = stk__blend_of(stk__op_factor(op->kind, mag));
        const int row = W * 3;
        for (int i = tid; i < npx; i += nt) {
          const int x = i % W, y = i / W;
          if (x == 0 || y == 0 || x == W - 1 || y == H - 1) continue; /* the border stays */
          for (int c = 0; c < 3; c++) {
            const uint8_t *q = sc + 3 * i + c;
            const int blur = stk__sharp_blur(stk__sharp_sum(q, row));
            t[3 * i + c] = op->kind == STK__OP_PIL_SHARPNESS ? stk__pil_blend8(blur, q[0], op->mag)
                                                             : stk__blend8(k.r, k.r1, q[0], (float)blur);
          }
        }
        break;
      }
      case STK__OP_POSTERIZE: {
        const uint8_t mask = stk__posterize_mask(mag);
        map_bytes(t, n, [&](int v, int) { return (uint8_t)(v & mask); });
        break;
      }
      case STK__OP_SOLARIZE:
        lut_op(t, n, lut, [&](int v, int) { return stk__solarize8(v, op->mag); });
        break;
      case STK__OP_INVERT:
        map_bytes(t, n, [](int v, int) { return (uint8_t)(255 - v); });
        break;
      case STK__OP_AUTOCONTRAST:
      case STK__OP_PIL_AUTOCONTRAST: {
        if (tid < 3) lo[tid] = 255, hi[tid] = 0;
        __syncthreads();
        int l[3], h[3];
        channel_minmax(t, n, l, h);
        for (int c = 0; c < 3; c++) {
          atomicMin(&lo[c], l[c]);
          atomicMax(&hi[c], h[c]);
        }
        __syncthreads();
        const bool pil = op->kind == STK__OP_PIL_AUTOCONTRAST;
        lut_op(t, n, lut, [&](int v, int c) {
          float mn;
          float scale = stk__autocontrast_scale(lo[c], hi[c], &mn);
          return pil ? stk__pil_autocontrast8(v, lo[c], hi[c]) : stk__autocontrast8(v, mn, scale);
        });
        break;
      }
      case STK__OP_EQUALIZE: {
        histogram(t, n, h32, hist);
        if (tid < 3) lutok[tid] = stk__equalize_lut((const int64_t *)hist[tid], lut[tid]);
        __syncthreads();
        if (lutok[0] || lutok[1] || lutok[2])
          map_bytes(t, n, [&](int v, int c) { return lutok[c] ? lut[c][v] : (uint8_t)v; });
        break;
      }
      case STK__OP_ADJ_HUE:
        map_pixels<true>(t, npx, [&](uint8_t *q) { stk__hue_px(q, op->mag); });
        break;
      case STK__OP_GRAYSCALE:
        map_pixels<true>(t, npx, [](uint8_t *q) { q[0] = q[1] = q[2] = stk__gray8(q[0], q[1], q[2]); });
        break;
      case STK__OP_BLUR:
        tile_copy(t, sc, n);
        for (int i = tid; i < npx; i += nt) {
          const int x = i % W, y = i / W;
          for (int c = 0; c < 3; c++) t[3 * i + c] = stk__blur_px(sc, W, H, x, y, c, a->blur, op->ksize);
        }
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
  __syncthreads(); /* the tables, when there were no ops */
  store_tile(p, a, t, lutf, lut16);
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

/* CutMix: whether element e of an image comes from its partner (inside
 * the box). */
__device__ static bool from_partner(const stk__kmixparams &p, unsigned int e) {
  if (p.mode != 2) return false;
  const unsigned int plane = (unsigned int)p.w * (unsigned int)p.h;
  const unsigned int q = p.layout == LAYOUT_NCHW ? e % plane : e / 3;
  const int x = (int)(q % (unsigned int)p.w), y = (int)(q / (unsigned int)p.w);
  return x >= p.x1 && x < p.x2 && y >= p.y1 && y < p.y2;
}

/* MixUp of one element, image i's value vi and its partner's vp, in the
 * CPU's order: the partner's product first. */
__device__ static float mixup_one(const stk__kmixparams &p, float vi, float vp) {
  float v = vp * p.b;
  return v + vi * p.a;
}

/* The vector path: 16 bytes of image i and of its partner per thread (4
 * floats, 8 halves or 16 bytes), so that a thread's loads and store are
 * single instructions; the host sets p.vec only when every image starts
 * 16-byte aligned in both buffers and holds a whole number of vectors. Each
 * element goes through mixup_one or from_partner, so the values are the
 * scalar path's. */
__device__ static void mix_vec(const stk__kmixparams &p, int i, int partner, unsigned int v) {
  const int es = p.dtype == DT_F32 ? 4 : p.dtype == DT_U8 ? 1 : 2;
  const unsigned int per = 16 / es, elems = (unsigned int)p.w * (unsigned int)p.h * 3;
  const unsigned int e0 = v * per;
  if (e0 >= elems) return;
  const uint4 *src = (const uint4 *)p.src;
  const size_t at = ((size_t)i * elems + e0) / per, from = ((size_t)partner * elems + e0) / per;
  union { uint4 q; float f[4]; unsigned short h[8]; unsigned char b[16]; } A, B, O;
  A.q = src[at];
  B.q = src[from];
  if (p.mode != 1) { /* CutMix or none: a copy, element by element */
#pragma unroll
    for (int k = 0; k < 16; k++) O.b[k] = from_partner(p, e0 + k / es) ? B.b[k] : A.b[k];
  } else {
    switch (p.dtype) {
      case DT_F32:
#pragma unroll
        for (int k = 0; k < 4; k++) O.f[k] = mixup_one(p, A.f[k], B.f[k]);
        break;
      case DT_F16:
#pragma unroll
        for (int k = 0; k < 8; k++)
          O.h[k] = __half_as_ushort(__float2half_rn(mixup_one(
              p, __half2float(__ushort_as_half(A.h[k])), __half2float(__ushort_as_half(B.h[k])))));
        break;
      case DT_BF16:
#pragma unroll
        for (int k = 0; k < 8; k++)
          O.h[k] = __bfloat16_as_ushort(__float2bfloat16_rn(
              mixup_one(p, __bfloat162float(__ushort_as_bfloat16(A.h[k])),
                        __bfloat162float(__ushort_as_bfloat16(B.h[k])))));
        break;
      default:
#pragma unroll
        for (int k = 0; k < 16; k++) O.b[k] = stk__round8(mixup_one(p, (float)A.b[k], (float)B.b[k]));
        break;
    }
  }
  ((uint4 *)p.dst)[at] = O.q;
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
  /* image i's element e and image i - 1's, as element indices in the batch */
  const int partner = p.pair ? p.n - 1 - i : i == 0 ? p.n - 1 : i - 1;
  if (p.vec) {
    mix_vec(p, i, partner, e);
    return;
  }
  const unsigned int elems = (unsigned int)p.w * (unsigned int)p.h * 3;
  if (e >= elems) return;
  const int es = p.dtype == DT_F32 ? 4 : p.dtype == DT_U8 ? 1 : 2;
  const size_t at = (size_t)i * elems + e, from = (size_t)partner * elems + e;
  const char *src = (const char *)p.src;
  char *dst = (char *)p.dst;
  if (p.mode == 1) {
    const float v = mixup_one(p, mix_load(p.dtype, src + at * es, 0), mix_load(p.dtype, src + from * es, 0));
    switch (p.dtype) {
      case DT_F32: *(float *)(dst + at * 4) = v; break;
      case DT_F16: *(unsigned short *)(dst + at * 2) = __half_as_ushort(__float2half_rn(v)); break;
      case DT_BF16: *(unsigned short *)(dst + at * 2) = __bfloat16_as_ushort(__float2bfloat16_rn(v)); break;
      default: *(unsigned char *)(dst + at) = stk__round8(v); break;
    }
    return;
  }
  /* CutMix (or none): a copy, from the partner inside the box */
  const size_t s = from_partner(p, e) ? from : at;
  switch (es) {
    case 4: *(float *)(dst + at * 4) = *(const float *)(src + s * 4); break;
    case 2: *(unsigned short *)(dst + at * 2) = *(const unsigned short *)(src + s * 2); break;
    default: dst[at] = src[s]; break;
  }
}
