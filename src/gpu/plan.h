/*
 * plan.h: the GPU path's per-image planning that needs no GPU: which source
 * rectangle an image's resampling reads (exactly what the CPU resampler
 * reads, so that both produce the same pixels), the rectangle widened for
 * the engines' region decode, where it goes in a slot's arena, and whether
 * it is too big for the kernel. tests/test_gpu_plan.c checks it against the
 * CPU resampler on machines without a GPU.
 */
#ifndef STK_GPU_PLAN_H
#define STK_GPU_PLAN_H

#include <stddef.h>

#include "ops/ops.h"

/* The kernel's limit on a window: at most 63 weights per axis (Pillow's
 * ksize), i.e. a bilinear shrink by at most 31, a bicubic one by at most
 * 15.5. An image shrunk more goes to the CPU and is copied in finished. */
#define STK__GPU_MAX_KSIZE 63
#define STK__GPU_MAX_SCALE 31.0 /* the bilinear bound, in scale */
/* Arena places are aligned to this (nvJPEG's output and the kernel's rows). */
#define STK__GPU_ARENA_ALIGN 256

typedef struct {
  int sx, sy, sw, sh; /* the source rectangle, geometry coordinates */
  int kx, ky;         /* Pillow's ksize per axis: the kernel's weights per pixel */
  int vfirst;         /* the vertical pass first, as stk__resampler_run decides */
} stk__gpu_rect;

/* The rectangle the resampling of geometry g reads, as stk__resampler_plan
 * computes it (the first window's start to the last window's end). */
void stk__gpu_plan_rect(const stk__geom *g, stk__gpu_rect *r);

/* r widened outwards to multiples of 16 and clipped to the w x h image (the
 * engines decode such regions more often). Returns 0 when that changes
 * nothing. */
int stk__gpu_align16(stk__gpu_rect *r, int w, int h);

/* The arena bytes of an image whose RGB8 source is r: 3 bytes a pixel,
 * rounded to STK__GPU_ARENA_ALIGN. *big is set when it cannot go through the
 * kernel (larger than the arena, or windows wider than STK__GPU_MAX_KSIZE); it
 * then needs big_bytes (a finished image and its label). */
size_t stk__gpu_item_bytes(const stk__gpu_rect *r, const stk__geom *g, size_t arena,
                           size_t big_bytes, int *big);

/* Places items in an arena of `cap` bytes in order; a full arena closes a
 * chunk (the items decoded and resampled together). */
typedef struct {
  size_t cap, used;
  int count; /* items in the open chunk */
} stk__gpu_packer;

void stk__gpu_packer_init(stk__gpu_packer *pk, size_t cap);
/* Returns 1 when the open chunk must be run before this item (it does not
 * fit beside the chunk's items), 0 otherwise. After the caller has run it,
 * stk__gpu_packer_add places the item. need <= cap. */
int stk__gpu_packer_full(const stk__gpu_packer *pk, size_t need);
size_t stk__gpu_packer_add(stk__gpu_packer *pk, size_t need); /* returns the offset */
void stk__gpu_packer_close(stk__gpu_packer *pk);             /* after running a chunk */

#endif
