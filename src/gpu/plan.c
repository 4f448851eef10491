/* plan.c: the GPU path's planning that needs no GPU (plan.h). */
#include "gpu/plan.h"

/* The source range [*a0, *a1) the resampler reads on one axis: the first
 * window's start and the last window's end (windows start in order). */
static void axis_need(const stk__axis *a, int *a0, int *a1, int *ksize) {
  int first, n0, lastmin, nlast;
  stk__axis_window(a, 0, &first, &n0, ksize);
  stk__axis_window(a, a->out - 1, &lastmin, &nlast, NULL);
  *a0 = a->lo + first;
  *a1 = a->lo + lastmin + nlast;
  if (*a1 <= *a0) *a1 = *a0 + 1;
}

void stk__gpu_plan_rect(const stk__geom *g, stk__gpu_rect *r) {
  int x0, x1, y0, y1;
  axis_need(&g->x, &x0, &x1, &r->kx);
  axis_need(&g->y, &y0, &y1, &r->ky);
  r->sx = x0;
  r->sy = y0;
  r->sw = x1 - x0;
  r->sh = y1 - y0;
  r->vfirst = stk__geom_vfirst(g, y1 - y0);
}

int stk__gpu_align16(stk__gpu_rect *r, int w, int h) {
  int ax0 = r->sx & ~15, ay0 = r->sy & ~15;
  int ax1 = (r->sx + r->sw + 15) & ~15, ay1 = (r->sy + r->sh + 15) & ~15;
  if (ax1 > w) ax1 = w;
  if (ay1 > h) ay1 = h;
  if (ax0 == r->sx && ay0 == r->sy && ax1 == r->sx + r->sw && ay1 == r->sy + r->sh) return 0;
  r->sx = ax0;
  r->sy = ay0;
  r->sw = ax1 - ax0;
  r->sh = ay1 - ay0;
  return 1;
}

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

size_t stk__gpu_item_bytes(const stk__gpu_rect *r, const stk__geom *g, size_t arena,
                           size_t big_bytes, int *big) {
  size_t need = align_up((size_t)r->sw * 3 * (size_t)r->sh, STK__GPU_ARENA_ALIGN);
  *big = need > arena || stk__window_ksize(g->x.filter, g->x.scale) > STK__GPU_MAX_KSIZE ||
         stk__window_ksize(g->y.filter, g->y.scale) > STK__GPU_MAX_KSIZE;
  return *big ? align_up(big_bytes, STK__GPU_ARENA_ALIGN) : need;
}

void stk__gpu_packer_init(stk__gpu_packer *pk, size_t cap) {
  pk->cap = cap;
  pk->used = 0;
  pk->count = 0;
}

int stk__gpu_packer_full(const stk__gpu_packer *pk, size_t need) {
  return pk->count > 0 && pk->used + need > pk->cap;
}

size_t stk__gpu_packer_add(stk__gpu_packer *pk, size_t need) {
  size_t off = pk->used;
  pk->used += align_up(need, STK__GPU_ARENA_ALIGN);
  pk->count++;
  return off;
}

void stk__gpu_packer_close(stk__gpu_packer *pk) {
  pk->used = 0;
  pk->count = 0;
}
