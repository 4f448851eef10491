/*
 * ops.h: the geometric and pixel operations of the pipelines.
 *
 * A pipeline is expressed as one resampling geometry per image: for each
 * axis, where output pixel i samples the source (centre in0 + (i + 0.5) *
 * scale) and the source range the filter may read ([lo, hi)). Crop-then-
 * resize (RandomResizedCrop) and resize-then-crop (Resize + CenterCrop) are
 * both such geometries, so one resampler serves both, and it can tell the
 * decoder which source rows and columns it will read before decoding.
 *
 * The resampler reproduces Pillow's antialiased bilinear and bicubic resize
 * (the filter support widened by the downscale factor, 22-bit fixed-point
 * weights, horizontal pass then vertical pass through an 8-bit
 * intermediate), which is what torchvision's transforms run on PIL images.
 * The arithmetic of the windows is in window.h.
 */
#ifndef STK_OPS_H
#define STK_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "ops/window.h"
#include "stoker.h"

typedef struct {
  double in0, scale; /* sample centre of output pixel i: in0 + (i + 0.5) * scale */
  int lo, hi;        /* the filter reads source pixels in [lo, hi) only */
  int out;           /* output pixels */
  int filter;        /* STK_FILTER_BILINEAR (0) or STK_FILTER_BICUBIC: with
                        lo/hi it decides which pixels are read */
} stk__axis;

typedef struct {
  stk__axis x, y;
  int flip;  /* mirror the output horizontally */
  int exact; /* keep Pillow's pass order (horizontal first) even when the
                other order is cheaper; the two differ by rounding only */
} stk__geom;

/* Whether the resampler runs the vertical pass first on a geometry whose
 * source window has `rows` rows: only when the geometry allows it (not
 * exact), it leaves the horizontal pass fewer rows, and the filter is
 * bilinear. Bicubic always keeps Pillow's order, so that its crops are
 * Pillow's pixels: its overshoot is clipped at the 8-bit intermediate, and
 * the other order clips elsewhere. stk__resampler_run and the GPU planner
 * both decide with this. */
static inline int stk__geom_vfirst(const stk__geom *g, int rows) {
  return !g->exact && g->x.filter == STK_FILTER_BILINEAR && g->y.filter == STK_FILTER_BILINEAR &&
         rows > g->y.out;
}

/* torchvision RandomResizedCrop.get_params: up to 10 tries of a random area
 * fraction in scale[] and log-uniform aspect ratio in ratio[], then the same
 * centre-crop fallback. */
void stk__rrc_params(int width, int height, const float scale[2], const float ratio[2],
                     stk__rng *rng, stk__rect *out);

/* The size stk_pack bounds a w x h image to: the longer side becomes
 * max_side when it is longer (0 = no bound), the shorter is rounded. */
void stk__bound_size(int w, int h, int max_side, int *nw, int *nh);

/* Crop `r` of the image, then resize it to out_w x out_h. */
void stk__geom_crop(const stk__rect *r, int out_w, int out_h, stk__geom *g);

/* torchvision Resize(resize) (shorter side to `resize`, the longer truncated
 * as torchvision computes it) then CenterCrop(crop). */
void stk__geom_eval(int width, int height, int resize, int crop, stk__geom *g);

/* Sets the resampling filter of both axes (a stk_interpolation value;
 * stk__geom_crop and stk__geom_eval make bilinear geometries). */
void stk__geom_set_filter(stk__geom *g, int filter);

/* Maps a geometry on a width x height image onto the same image decoded at
 * 1/denom (decoded size ceil(width/denom) x ceil(height/denom)). */
void stk__geom_downscale(stk__geom *g, int width, int height, int denom);

/* The largest DCT scale denominator in {1,2,4,8} (up to max_denom) such that
 * the crop still has at least as many pixels as the output on both axes.
 * The rule is the same for every filter: bicubic's wider window reads more
 * of the same decoded pixels, it needs no more of them. */
int stk__choose_denom(const stk__rect *crop, int out_w, int out_h, int max_denom);

/* The byte-plane tables of the NEON store (resample.c): on little-endian
 * aarch64 only, where NEON is part of the base instruction set. */
#if defined(__aarch64__) && defined(__AARCH64EL__) && defined(__GNUC__)
#define STK__STORE_PLANES 1
#else
#define STK__STORE_PLANES 0
#endif

/* How a resampled image is written into the batch. */
typedef struct {
  stk_dtype dtype;
  stk_layout layout;
  int w, h;
  /* value of 8-bit level v in channel c, already normalised:
   * ((v / 255) - mean[c]) / std[c], computed in float32 as torchvision does */
  float lut_f32[3][256];
  uint16_t lut_u16[3][256]; /* the same, as float16 or bfloat16 bits */
#if STK__STORE_PLANES
  /* aarch64: the same tables split into byte planes (plane b holds byte b of
   * every entry, little-endian), which the NEON store looks up 16 levels at
   * a time with 64-byte table lookups (NEON has no gather) */
  uint8_t plane_f32[3][4][256];
  uint8_t plane_u16[3][2][256];
#endif
} stk__store;

void stk__store_init(stk__store *s, stk_dtype dtype, stk_layout layout, int w, int h,
                     const float mean[3], const float std[3]);
size_t stk__dtype_size(stk_dtype t);

/* One value written as an element of `dtype` (uint8: rounded and clamped). */
void stk__store_value(stk_dtype dtype, float v, void *dst);

/* Writes an RGB8 tile (st->w x st->h, rows st->w * 3 bytes apart) into the
 * batch image as `st` says: the store of a tile the augmentations ran on. */
void stk__store_tile(const stk__store *st, const uint8_t *tile, void *dst);

/* Pillow's filter window (the axis's filter) of output pixel i on one axis: the first source
 * pixel it reads (relative to a->lo) and how many, clipped to [lo, hi). Also
 * the largest window of the axis (Pillow's ksize) in *ksize when not NULL.
 * The CPU resampler, the GPU planner and the CUDA kernel all use this rule. */
void stk__axis_window(const stk__axis *a, int i, int *first, int *count, int *ksize);

/* Per-thread resampler: coefficient tables and the intermediate image. */
typedef struct {
  stk__buf kx, ky;       /* int32 weights, ksize per output pixel */
  stk__buf bx, by;       /* int32 pairs (first source pixel, count) */
  int ksx, ksy;          /* weights per output pixel */
  stk__buf tmp;          /* horizontal-pass output, uint8 RGB */
  stk__geom g;
  int src_x0, src_x1;    /* source columns read */
  int src_y0, src_y1;    /* source rows read */
  /* The SIMD horizontal pass (resample.c): every window widened to hks taps
   * and kept inside the source row, so that a fixed-size kernel handles
   * output pixels [0, hvec) four at a time; their weights, repeated per
   * channel, follow the table in kx and their byte offsets follow the pairs
   * in bx. hvec is 0 where the scalar pass does the whole row. */
  int hks, hvec;
} stk__resampler;

/* The instruction set the resampler's row functions use: 0 portable C; on
 * x86-64 1 AVX2, 2 AVX-512 (F, BW, VL, VBMI); on aarch64 1 NEON (part of the
 * base instruction set there, so always available).
 * want < 0 only asks; a level the CPU lacks is lowered to what it has. The
 * tests use it to compare every path with the scalar reference. Returns the
 * level in force. Plan after changing it. */
int stk__resample_isa(int want);

/* Computes the weights for `g` and the source rectangle the resampler will
 * read (`need`, in the coordinates g refers to). */
int stk__resampler_plan(stk__resampler *r, const stk__geom *g, stk__rect *need);

/* Resamples from `src` (RGB8 rows, `stride` bytes apart, whose top-left pixel
 * is source pixel (sx, sy); it must cover `need`) and writes the image into
 * `dst` as `st` says. */
int stk__resampler_run(stk__resampler *r, const uint8_t *src, size_t stride, int sx, int sy,
                       const stk__store *st, void *dst);

void stk__resampler_free(stk__resampler *r);

#endif
