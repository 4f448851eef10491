/* geom.c: crop choices and resampling geometries. See ops.h. */
#include <math.h>

#include "ops/ops.h"

/* Python's round(): halves go to the even neighbour, which is nearbyint()
 * under the default rounding mode. */
static int py_round(double v) { return (int)nearbyint(v); }

void stk__rrc_params(int width, int height, const float scale[2], const float ratio[2],
                     stk__rng *rng, stk__rect *out) {
  double area = (double)width * (double)height;
  double lr0 = log((double)ratio[0]), lr1 = log((double)ratio[1]);
  for (int attempt = 0; attempt < 10; attempt++) {
    double target = area * (scale[0] + (scale[1] - scale[0]) * stk__rng_uniform(rng));
    double aspect = exp(lr0 + (lr1 - lr0) * stk__rng_uniform(rng));
    int w = py_round(sqrt(target * aspect));
    int h = py_round(sqrt(target / aspect));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      out->y = (int)stk__rng_range(rng, 0, (int64_t)height - h + 1);
      out->x = (int)stk__rng_range(rng, 0, (int64_t)width - w + 1);
      out->w = w;
      out->h = h;
      return;
    }
  }
  /* Fallback: the central crop with the aspect ratio clamped into range. */
  double in_ratio = (double)width / (double)height;
  double rmin = fmin(ratio[0], ratio[1]), rmax = fmax(ratio[0], ratio[1]);
  int w, h;
  if (in_ratio < rmin) {
    w = width;
    h = py_round(w / rmin);
  } else if (in_ratio > rmax) {
    h = height;
    w = py_round(h * rmax);
  } else {
    w = width;
    h = height;
  }
  out->w = w;
  out->h = h;
  out->y = (height - h) / 2;
  out->x = (width - w) / 2;
}

void stk__geom_crop(const stk__rect *r, int out_w, int out_h, stk__geom *g) {
  g->x = (stk__axis){.in0 = r->x, .scale = (double)r->w / out_w, .lo = r->x, .hi = r->x + r->w,
                     .out = out_w};
  g->y = (stk__axis){.in0 = r->y, .scale = (double)r->h / out_h, .lo = r->y, .hi = r->y + r->h,
                     .out = out_h};
  g->flip = 0;
  g->exact = 0;
}

void stk__geom_eval(int width, int height, int resize, int crop, stk__geom *g) {
  /* torchvision: the shorter side becomes `resize`, the longer int(resize *
   * long / short), computed in double as Python does. */
  int new_w, new_h;
  if (width <= height) {
    new_w = resize;
    new_h = (int)((double)resize * height / width);
  } else {
    new_h = resize;
    new_w = (int)((double)resize * width / height);
  }
  /* CenterCrop: top = int(round((h - crop) / 2.0)). */
  int top = py_round((new_h - crop) / 2.0);
  int left = py_round((new_w - crop) / 2.0);
  double sx = (double)width / new_w, sy = (double)height / new_h;
  g->x = (stk__axis){.in0 = left * sx, .scale = sx, .lo = 0, .hi = width, .out = crop};
  g->y = (stk__axis){.in0 = top * sy, .scale = sy, .lo = 0, .hi = height, .out = crop};
  g->flip = 0;
  g->exact = 1; /* evaluation must match torchvision */
}

void stk__geom_set_filter(stk__geom *g, int filter) {
  g->x.filter = filter;
  g->y.filter = filter;
}

static void axis_downscale(stk__axis *a, int full, int denom) {
  int scaled = (full + denom - 1) / denom;
  a->in0 /= denom;
  a->scale /= denom;
  a->lo = a->lo / denom;
  a->hi = (a->hi + denom - 1) / denom;
  if (a->hi > scaled) a->hi = scaled;
}

void stk__geom_downscale(stk__geom *g, int width, int height, int denom) {
  if (denom <= 1) return;
  axis_downscale(&g->x, width, denom);
  axis_downscale(&g->y, height, denom);
}

int stk__choose_denom(const stk__rect *crop, int out_w, int out_h, int max_denom) {
  int d = 1;
  while (d * 2 <= max_denom && crop->w / (d * 2) >= out_w && crop->h / (d * 2) >= out_h) d *= 2;
  return d;
}

void stk__bound_size(int w, int h, int max_side, int *nw, int *nh) {
  *nw = w;
  *nh = h;
  if (max_side <= 0 || (w <= max_side && h <= max_side)) return;
  /* the longer side becomes max_side, the shorter keeps the aspect ratio */
  if (w >= h) {
    *nw = max_side;
    *nh = (int)((double)h * max_side / w + 0.5);
  } else {
    *nh = max_side;
    *nw = (int)((double)w * max_side / h + 0.5);
  }
  if (*nw < 1) *nw = 1;
  if (*nh < 1) *nh = 1;
}
