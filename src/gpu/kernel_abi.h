/*
 * kernel_abi.h: the arguments of the fused kernel (kernels.cu), one
 * definition for the host side that fills them (gpu.c) and the device side
 * that reads them. Plain C11 and CUDA C++.
 */
#ifndef STK_KERNEL_ABI_H
#define STK_KERNEL_ABI_H

/* One image of a launch. */
typedef struct {
  unsigned long long src; /* device address of source pixel (sx, sy) */
  long long label;
  double in0x, scalex, in0y, scaley;
  int pitch;              /* bytes between source rows */
  int sx, sy, sw, sh;     /* the source buffer's rectangle, geometry coordinates */
  int lox, hix, loy, hiy; /* the geometry's source range per axis */
  int flip, dst;
  int vfirst;             /* vertical pass first (as stk__resampler_run decides) */
  int filter;             /* STK_FILTER_* of window.h (the geometry's) */
} stk__kitem;

/* One launch: blockIdx.y is the item, blockIdx.x a tile of its output. */
typedef struct {
  unsigned long long items;  /* stk__kitem[n] */
  unsigned long long out;    /* the slot's images */
  unsigned long long labels; /* the slot's int64 labels, or 0 */
  unsigned long long lut;    /* float[3][256] then uint16[3][256] */
  int out_w, out_h, dtype, layout;
  int kx, ky;                /* weights per output pixel, x and y (max over items) */
  int tiles_x, n;
} stk__kparams;

#define STK_TILE_W 32
#define STK_TILE_H 8

/* (a layout change must be made on both sides at once: it is one file) */
#if defined(__cplusplus)
static_assert(sizeof(stk__kitem) == 104, "stk__kitem layout");
static_assert(sizeof(stk__kparams) == 64, "stk__kparams layout");
#else
_Static_assert(sizeof(stk__kitem) == 104, "stk__kitem layout");
_Static_assert(sizeof(stk__kparams) == 64, "stk__kparams layout");
#endif

#endif
