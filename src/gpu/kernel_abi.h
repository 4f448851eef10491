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
  int ow, oh;             /* the item's output size (<= the launch's out_w,
                             out_h; rows packed at ow * 3 per channel set) */
} stk__kitem;

/* One launch: blockIdx.y is the item, blockIdx.x a tile of its output. */
typedef struct {
  unsigned long long items;  /* stk__kitem[n] */
  unsigned long long out;    /* the slot's images */
  unsigned long long labels; /* the slot's int64 labels, or 0 */
  unsigned long long lut;    /* float[3][256] then uint16[3][256] */
  int out_w, out_h, dtype, layout; /* out_w x out_h: an image's room in out */
  int kx, ky;                /* weights per output pixel, x and y (max over items) */
  int tiles_x, n;
} stk__kparams;

/* ---- the augmentations (augment.h) on the GPU ----
 * With augmentations on, the fused kernel writes 8-bit RGB tiles (NHWC);
 * stk_augment_kernel then runs each item's ops on its tile (one block per
 * item) and stores it into the batch, normalised and erased. The host draws everything and computes what must round as on the
 * CPU (warp coefficients, blur taps) before the upload. */
#define STK_KAUG_OPS 24  /* STK__AUG_MAX_OPS */
#define STK_KAUG_TAPS 64 /* the longest blur kernel on the GPU */
#define STK_KAUG_ERASE 4 /* STK__ERASE_MAX */

typedef struct {
  int kind, ksize; /* stk__op_kind; blur: taps */
  int warp;        /* warps: stk__op.warp (0: the item's filter) */
  float mag;
  float m[6];      /* warps: stk__warp (a0 a1 a2 b0 b1 b2) */
} stk__kop;

typedef struct {
  int dst, n, filter, has_fill; /* filter: STK__WARP_ */
  float fill[3];
  int erase, erase_random, erase_per_channel; /* erase: boxes, at most STK_KAUG_ERASE */
  int ex[STK_KAUG_ERASE], ey[STK_KAUG_ERASE], ew[STK_KAUG_ERASE], eh[STK_KAUG_ERASE];
  unsigned long long erase_key[STK_KAUG_ERASE];
  float erase_value[3];
  float blur[STK_KAUG_TAPS];
  stk__kop op[STK_KAUG_OPS];
} stk__kaug;

typedef struct {
  unsigned long long items;   /* stk__kaug[n] */
  unsigned long long tiles;   /* the slot's tiles, w * h * 3 bytes each, by dst */
  unsigned long long scratch; /* as many bytes again */
  unsigned long long out;     /* the slot's images */
  unsigned long long lut;     /* as stk__kparams.lut */
  int w, h, dtype, layout;
  int smem; /* STK_AUG_SMEM_*: where the block keeps the tile while its ops run */
  int n;
} stk__kaugparams;

/* The augmentation kernel works on a copy of the tile in shared memory
 * (dynamic, sized by the host) when it fits: its ops read each byte several
 * times, and shared memory answers in tens of cycles where global memory
 * takes hundreds, with only a block of STK_AUG_THREADS to hide them. */
#define STK_AUG_SMEM_NONE 0    /* tile and scratch in global memory */
#define STK_AUG_SMEM_TILE 1    /* the tile in shared memory, the scratch in global */
#define STK_AUG_SMEM_BOTH 2    /* both in shared memory (the scratch after the tile) */

/* ---- MixUp and CutMix of a finished batch (stk_mix_kernel) ----
 * Out of place: image i of dst is image i of src mixed with its partner,
 * image i - 1 (image 0 with the last: torchvision's roll(1) pairing) or
 * image n - 1 - i (timm's flip(0)), with the CPU's
 * arithmetic (stk__mix_apply); blockIdx.y == n writes the soft labels. */
typedef struct {
  unsigned long long src, dst;     /* n images of w * h * 3 elements, dtype and layout */
  unsigned long long labels, soft; /* int64[n] in, float32[n][classes] out; 0: none */
  int n, classes, dtype, layout, mode, w, h;
  int x1, y1, x2, y2;              /* CutMix: the box that comes from image i - 1 */
  float a, b;                      /* MixUp: image i's weight (lambda) and the partner's */
  int pair;                        /* the partner of image i: 0 image i - 1, 1 image n - 1 - i */
  float on, off;                   /* the soft labels' one-hot values (label smoothing) */
  int vec;                         /* 1: each thread moves 16 bytes of an image (see gpu.c) */
} stk__kmixparams;

#define STK_MIX_THREADS 256

#define STK_AUG_THREADS 512 /* one block per item (see kernels.cu) */

#define STK_TILE_W 32
#define STK_TILE_H 8

/* (a layout change must be made on both sides at once: it is one file) */
#if defined(__cplusplus)
static_assert(sizeof(stk__kitem) == 112, "stk__kitem layout");
static_assert(sizeof(stk__kparams) == 64, "stk__kparams layout");
static_assert(sizeof(stk__kop) == 40, "stk__kop layout");
static_assert(sizeof(stk__kaug) == 1368, "stk__kaug layout");
static_assert(sizeof(stk__kaugparams) == 64, "stk__kaugparams layout");
static_assert(sizeof(stk__kmixparams) == 104, "stk__kmixparams layout");
#else
_Static_assert(sizeof(stk__kitem) == 112, "stk__kitem layout");
_Static_assert(sizeof(stk__kparams) == 64, "stk__kparams layout");
_Static_assert(sizeof(stk__kop) == 40, "stk__kop layout");
_Static_assert(sizeof(stk__kaug) == 1368, "stk__kaug layout");
_Static_assert(sizeof(stk__kaugparams) == 64, "stk__kaugparams layout");
_Static_assert(sizeof(stk__kmixparams) == 104, "stk__kmixparams layout");
#endif

#endif
