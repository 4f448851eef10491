/* test_gpu_plan.c: the GPU path's planning (src/gpu/plan.c), with no GPU:
 * the source rectangle and pass order equal the CPU resampler's for train
 * crops, eval geometries and DCT-downscaled ones; the engines' aligned
 * region covers it inside the image; arena placement never overlaps or
 * overflows and closes a chunk only when the next item does not fit. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/common.h"
#include "gpu/gpu.h"
#include "gpu/plan.h"
#include "ops/ops.h"

static int rand_int(stk__rng *rng, int lo, int hi) { /* [lo, hi] */
  return lo + (int)(stk__rng_uniform(rng) * (hi - lo + 1));
}

/* The plan must read exactly what the CPU resampler reads. */
static int same_as_cpu(const stk__geom *g, stk__resampler *rs, const char *what, int i) {
  stk__rect need;
  if (stk__resampler_plan(rs, g, &need) != STK_OK) return 1; /* not a plannable geometry */
  stk__gpu_rect r;
  stk__gpu_plan_rect(g, &r);
  /* stk__resampler_run's rule: bilinear train geometries taller than the output */
  int cpu_vfirst = !g->exact && g->x.filter == STK_FILTER_BILINEAR && need.h > g->y.out;
  if (r.sx != need.x || r.sy != need.y || r.sw != need.w || r.sh != need.h || r.kx != rs->ksx ||
      r.ky != rs->ksy || r.vfirst != cpu_vfirst) {
    fprintf(stderr, "%s %d: plan (%d,%d %dx%d k %d,%d v%d) != CPU (%d,%d %dx%d k %d,%d v%d)\n", what,
            i, r.sx, r.sy, r.sw, r.sh, r.kx, r.ky, r.vfirst, need.x, need.y, need.w, need.h, rs->ksx,
            rs->ksy, cpu_vfirst);
    return 0;
  }
  return 1;
}

/* The one decision where a file is decoded starts from its header: what
 * the GPU's decoders take, for the loader's GPU sink and a device pack
 * alike (route() in gpu/decode.c). */
static void check_header_rule(void) {
  stk__image_info in;
  memset(&in, 0, sizeof in);
  in.format = STK__FMT_JPEG;
  in.components = 3;
  CHECK_EQ_INT(stk__gpu_takes_header(&in), 1);
  in.components = 1;
  CHECK_EQ_INT(stk__gpu_takes_header(&in), 1);
  in.progressive = 1; /* the CPU workers decode progressive files */
  CHECK_EQ_INT(stk__gpu_takes_header(&in), 0);
  in.progressive = 0;
  in.components = 4; /* CMYK / YCCK */
  CHECK_EQ_INT(stk__gpu_takes_header(&in), 0);
  in.components = 3;
  in.format = STK__FMT_PNG;
  CHECK_EQ_INT(stk__gpu_takes_header(&in), 0);
  in.format = STK__FMT_WEBP;
  CHECK_EQ_INT(stk__gpu_takes_header(&in), 0);
}

int main(void) {
  check_header_rule();
  stk__rng rng;
  stk__rng_init(&rng, 7, 0, 0);
  stk__resampler rs = {0};
  static const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4.0f, 4.0f / 3.0f};
  int agree = 1, aligned_ok = 1, changed = 0, nvfirst = 0, nbicubic = 0;
  for (int i = 0; i < 20000; i++) {
    int w = rand_int(&rng, 1, 4000), h = rand_int(&rng, 1, 3000);
    int out = i % 3 == 0 ? 224 : rand_int(&rng, 1, 300);
    stk__geom g;
    if (i % 4 == 3) {
      stk__geom_eval(w, h, out + out / 7, out, &g);
    } else {
      stk__rect c;
      stk__rrc_params(w, h, scale, ratio, &rng, &c);
      stk__geom_crop(&c, out, out, &g);
      int denom = stk__choose_denom(&c, out, out, 8);
      if (i % 2 && denom > 1) stk__geom_downscale(&g, w, h, denom);
      if (i % 2 && denom > 1) {
        w = (w + denom - 1) / denom;
        h = (h + denom - 1) / denom;
      }
    }
    g.exact = i % 5 == 0;
    if (i % 3 == 1) stk__geom_set_filter(&g, STK_FILTER_BICUBIC); /* every kind of geometry */
    nbicubic += i % 3 == 1;
    agree &= same_as_cpu(&g, &rs, "geometry", i);
    stk__gpu_rect r, a;
    stk__gpu_plan_rect(&g, &r);
    nvfirst += r.vfirst;
    /* the aligned region: inside the image, covering the exact one, its
     * corners on multiples of 16 or on the image's edge */
    a = r;
    if (r.sx + r.sw <= w && r.sy + r.sh <= h && stk__gpu_align16(&a, w, h)) {
      changed++;
      int x1 = a.sx + a.sw, y1 = a.sy + a.sh;
      aligned_ok &= a.sx <= r.sx && a.sy <= r.sy && x1 >= r.sx + r.sw && y1 >= r.sy + r.sh;
      aligned_ok &= a.sx >= 0 && a.sy >= 0 && x1 <= w && y1 <= h;
      aligned_ok &= a.sx % 16 == 0 && a.sy % 16 == 0 && (x1 % 16 == 0 || x1 == w) &&
                    (y1 % 16 == 0 || y1 == h);
      stk__gpu_rect b = a;
      aligned_ok &= stk__gpu_align16(&b, w, h) == 0; /* aligning twice changes nothing */
    }
  }
  stk__resampler_free(&rs);
  CHECK(agree);
  CHECK(aligned_ok);
  CHECK_MSG(changed > 1000 && nvfirst > 1000 && nbicubic > 5000,
            "cases seen: %d aligned, %d vertical-first, %d bicubic", changed, nvfirst, nbicubic);

  /* arena bytes and the big path */
  stk__geom g;
  stk__geom_eval(500, 375, 256, 224, &g);
  stk__gpu_rect r;
  stk__gpu_plan_rect(&g, &r);
  int big = -1;
  size_t need = stk__gpu_item_bytes(&r, &g, 1 << 20, 1000, &big);
  CHECK(big == 0 && need % STK__GPU_ARENA_ALIGN == 0 && need >= (size_t)r.sw * 3 * r.sh &&
        need < (size_t)r.sw * 3 * r.sh + STK__GPU_ARENA_ALIGN);
  need = stk__gpu_item_bytes(&r, &g, 1000, 3000, &big); /* larger than the arena */
  CHECK(big == 1 && need == 3072);
  stk__geom_eval(4000, 3000, 8, 8, &g); /* shrunk beyond the kernel's 1/31 */
  CHECK(g.x.scale > STK__GPU_MAX_SCALE);
  stk__gpu_plan_rect(&g, &r);
  stk__gpu_item_bytes(&r, &g, (size_t)1 << 30, 1000, &big);
  CHECK(big == 1);
  /* bicubic's windows are twice as wide: the kernel takes shrinks up to 15.5 */
  stk__geom_eval(3100, 3100, 200, 200, &g); /* 1/15.5: 63 weights */
  stk__geom_set_filter(&g, STK_FILTER_BICUBIC);
  stk__gpu_plan_rect(&g, &r);
  CHECK(r.kx == 63 && r.ky == 63);
  stk__gpu_item_bytes(&r, &g, (size_t)1 << 30, 1000, &big);
  CHECK(big == 0);
  stk__geom_eval(3200, 3200, 200, 200, &g); /* 1/16: 65 weights */
  stk__geom_set_filter(&g, STK_FILTER_BICUBIC);
  stk__gpu_plan_rect(&g, &r);
  stk__gpu_item_bytes(&r, &g, (size_t)1 << 30, 1000, &big);
  CHECK(big == 1);
  stk__geom_set_filter(&g, STK_FILTER_BILINEAR); /* bilinear: 33 weights */
  stk__gpu_plan_rect(&g, &r);
  stk__gpu_item_bytes(&r, &g, (size_t)1 << 30, 1000, &big);
  CHECK(big == 0 && r.kx == 33);

  /* packing: in order, aligned, never past the arena, a chunk closed only
   * when the next item does not fit */
  stk__gpu_packer pk;
  const size_t cap = 10000;
  stk__gpu_packer_init(&pk, cap);
  int chunks = 0, pack_ok = 1, items_in = 0;
  size_t end_prev = 0;
  for (int i = 0; i < 500; i++) {
    size_t n = (size_t)rand_int(&rng, 1, (int)cap / STK__GPU_ARENA_ALIGN) * STK__GPU_ARENA_ALIGN;
    if (stk__gpu_packer_full(&pk, n)) {
      pack_ok &= end_prev + n > cap; /* it really did not fit */
      stk__gpu_packer_close(&pk);
      chunks++;
      end_prev = 0;
    }
    size_t off = stk__gpu_packer_add(&pk, n);
    pack_ok &= off == end_prev && off % STK__GPU_ARENA_ALIGN == 0 && off + n <= cap;
    end_prev = off + n;
    items_in++;
  }
  CHECK(pack_ok);
  CHECK_MSG(chunks > 50 && items_in == 500, "%d chunks", chunks);
  printf("plan: 20000 geometries as the CPU reads them; %d aligned regions; %d chunks\n", changed,
         chunks);
  return CHECK_DONE();
}
