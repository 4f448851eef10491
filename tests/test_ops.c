/* Crop choices, geometries, the resampler and the store. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops/ops.h"

static void test_rrc_rules(int W, int H) {
  const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
  int fallback = 0, n = 100000;
  double sum_scale = 0;
  for (int i = 0; i < n; i++) {
    stk__rng rng;
    stk__rng_init(&rng, 1, 2, (uint64_t)i);
    stk__rect r;
    stk__rrc_params(W, H, scale, ratio, &rng, &r);
    CHECK_MSG(r.x >= 0 && r.y >= 0 && r.w > 0 && r.h > 0 && r.x + r.w <= W && r.y + r.h <= H,
              "crop %d,%d %dx%d outside %dx%d", r.x, r.y, r.w, r.h, W, H);
    double area = (double)r.w * r.h / ((double)W * H);
    double ar = (double)r.w / r.h;
    /* A try's w and h are rounded from the exact sqrt, so the area and
     * ratio rules hold up to half a pixel on each side. */
    double tol_a = (r.w + r.h + 1.0) / ((double)W * H), tol_r = ar * (0.5 / r.w + 0.5 / r.h);
    int in_rules = area >= scale[0] - tol_a && area <= scale[1] + tol_a &&
                   ar >= ratio[0] - tol_r && ar <= ratio[1] + tol_r;
    int is_fallback = (r.w == W || r.h == H) && r.x == (W - r.w) / 2 && r.y == (H - r.h) / 2;
    CHECK_MSG(in_rules || is_fallback, "crop %dx%d of %dx%d breaks the rules", r.w, r.h, W, H);
    fallback += !in_rules;
    sum_scale += area;
  }
  if (W == H && W >= 200) {
    /* On a square image a try fails only when s*r > 1 or s/r > 1; ten
     * failures in a row are rare (< 1e-3), and the mean area fraction of
     * the accepted tries is 0.478 (uniform on [0.08, 0.75], then weighted by -ln(s)/ln(4/3) up to 1). */
    CHECK_MSG(fallback < n / 1000, "%d fallbacks", fallback);
    double mean = sum_scale / n;
    CHECK_MSG(mean > 0.465 && mean < 0.490, "mean area fraction %.4f", mean);
  }
}

static void test_rrc_fallback(void) {
  /* Too wide for any try: the fallback is the full height with ratio 4/3. */
  const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
  stk__rng rng;
  stk__rng_init(&rng, 0, 0, 0);
  stk__rect r;
  stk__rrc_params(4000, 30, (const float[2]){0.99f, 1.0f}, ratio, &rng, &r);
  CHECK_EQ_INT(r.h, 30);
  CHECK_EQ_INT(r.w, 40);
  CHECK_EQ_INT(r.x, (4000 - 40) / 2);
  stk__rrc_params(30, 4000, (const float[2]){0.99f, 1.0f}, ratio, &rng, &r);
  CHECK_EQ_INT(r.w, 30);
  CHECK_EQ_INT(r.h, 40); /* round(30 / 0.75) */
  (void)scale;
}

static void test_eval_geometry(void) {
  stk__geom g;
  /* 500x375 -> Resize(256): 341x256; CenterCrop(224): top 16, left round(58.5) = 58 */
  stk__geom_eval(500, 375, 256, 224, &g);
  CHECK(fabs(g.x.scale - 500.0 / 341) < 1e-12);
  CHECK(fabs(g.y.scale - 375.0 / 256) < 1e-12);
  CHECK(fabs(g.x.in0 - 58 * 500.0 / 341) < 1e-9);
  CHECK(fabs(g.y.in0 - 16 * 375.0 / 256) < 1e-9);
  CHECK_EQ_INT(g.x.lo, 0);
  CHECK_EQ_INT(g.x.hi, 500);
  /* portrait */
  stk__geom_eval(375, 500, 256, 224, &g);
  CHECK(fabs(g.y.scale - 500.0 / 341) < 1e-12);
}

static uint8_t *make_image(int w, int h, uint64_t seed) {
  uint8_t *p = malloc((size_t)w * h * 3);
  stk__rng r;
  stk__rng_init(&r, seed, 0, 0);
  for (size_t i = 0; i < (size_t)w * h * 3; i++) p[i] = (uint8_t)(stk__rng_next(&r) >> 56);
  return p;
}

static void test_resample_identity_and_flip(void) {
  int W = 40, H = 30, S = 16;
  uint8_t *img = make_image(W, H, 3);
  stk__resampler rs = {0};
  stk__store st;
  const float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
  stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, S, S, mean, std);
  stk__rect crop = {5, 7, S, S};
  stk__geom g;
  stk__geom_crop(&crop, S, S, &g);
  stk__rect need;
  CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
  CHECK(need.x == 5 && need.y == 7 && need.w == S && need.h == S);
  uint8_t out[16 * 16 * 3], out2[16 * 16 * 3];
  CHECK_EQ_INT(stk__resampler_run(&rs, img, (size_t)W * 3, 0, 0, &st, out), STK_OK);
  int same = 1;
  for (int y = 0; y < S; y++)
    same &= memcmp(out + y * S * 3, img + ((size_t)(y + 7) * W + 5) * 3, (size_t)S * 3) == 0;
  CHECK_MSG(same, "a crop of the output size must copy pixels exactly");
  /* the same, from a buffer that starts at the needed rectangle */
  uint8_t *sub = malloc((size_t)S * S * 3);
  for (int y = 0; y < S; y++) memcpy(sub + y * S * 3, img + ((size_t)(y + 7) * W + 5) * 3, (size_t)S * 3);
  CHECK_EQ_INT(stk__resampler_run(&rs, sub, (size_t)S * 3, 5, 7, &st, out2), STK_OK);
  CHECK(memcmp(out, out2, sizeof out) == 0);
  /* flip mirrors columns */
  g.flip = 1;
  CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
  CHECK_EQ_INT(stk__resampler_run(&rs, img, (size_t)W * 3, 0, 0, &st, out2), STK_OK);
  same = 1;
  for (int y = 0; y < S; y++)
    for (int x = 0; x < S; x++) same &= !memcmp(out2 + (y * S + x) * 3, out + (y * S + S - 1 - x) * 3, 3);
  CHECK_MSG(same, "flip is not a mirror image");
  free(sub);
  free(img);
  stk__resampler_free(&rs);
}

static void test_resample_constant(void) {
  /* Weights sum to one: a flat image stays flat at any scale, both ways. */
  int W = 333, H = 250;
  uint8_t *img = malloc((size_t)W * H * 3);
  for (size_t i = 0; i < (size_t)W * H; i++) img[i * 3] = 200, img[i * 3 + 1] = 17, img[i * 3 + 2] = 99;
  stk__resampler rs = {0};
  stk__store st;
  const float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
  int sizes[] = {7, 64, 224, 500};
  for (int k = 0; k < 4; k++) {
    int S = sizes[k];
    stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NCHW, S, S, mean, std);
    stk__rect crop = {10, 3, 300, 211};
    stk__geom g;
    stk__geom_crop(&crop, S, S, &g);
    stk__rect need;
    CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
    CHECK(need.x >= 10 && need.y >= 3 && need.x + need.w <= 310 && need.y + need.h <= 214);
    uint8_t *out = malloc((size_t)S * S * 3);
    CHECK_EQ_INT(stk__resampler_run(&rs, img, (size_t)W * 3, 0, 0, &st, out), STK_OK);
    int ok = 1;
    for (int i = 0; i < S * S; i++)
      ok &= out[i] == 200 && out[S * S + i] == 17 && out[2 * S * S + i] == 99;
    CHECK_MSG(ok, "flat image not flat at size %d", S);
    free(out);
  }
  free(img);
  stk__resampler_free(&rs);
}

static void test_store(void) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  stk__store st;
  stk__store_init(&st, STK_DTYPE_FLOAT32, STK_LAYOUT_NCHW, 1, 1, mean, std);
  float want = (0.0f - 0.485f) / 0.229f;
  CHECK(st.lut_f32[0][0] == want);
  CHECK(fabsf(st.lut_f32[2][255] - (1.0f - 0.406f) / 0.225f) < 1e-6f);
  const float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
  stk__store_init(&st, STK_DTYPE_FLOAT16, STK_LAYOUT_NCHW, 1, 1, zero, one);
  CHECK_EQ_INT(st.lut_u16[0][255], 0x3c00);  /* 1.0 */
  CHECK_EQ_INT(st.lut_u16[0][0], 0x0000);
  CHECK_EQ_INT(st.lut_u16[0][51], 0x3266);   /* 0.2 = 51/255 -> half 0x3266 */
  stk__store_init(&st, STK_DTYPE_BFLOAT16, STK_LAYOUT_NCHW, 1, 1, zero, one);
  CHECK_EQ_INT(st.lut_u16[0][255], 0x3f80);  /* 1.0 */
  CHECK_EQ_INT(st.lut_u16[0][51], 0x3e4d);   /* 0.2f = 0x3e4ccccd -> rounds up */
  CHECK_EQ_INT(stk__dtype_size(STK_DTYPE_BFLOAT16), 2);
}

static void test_choose_denom(void) {
  stk__rect c = {0, 0, 1000, 900};
  CHECK_EQ_INT(stk__choose_denom(&c, 224, 224, 8), 4);
  CHECK_EQ_INT(stk__choose_denom(&c, 224, 224, 1), 1);
  stk__rect d = {0, 0, 447, 2000};
  CHECK_EQ_INT(stk__choose_denom(&d, 224, 224, 8), 1);
  stk__geom g;
  stk__rect crop = {100, 40, 800, 600};
  stk__geom_crop(&crop, 224, 224, &g);
  stk__geom_downscale(&g, 1001, 701, 2);
  CHECK(g.x.lo == 50 && g.x.hi == 450 && g.y.lo == 20 && g.y.hi == 320);
  CHECK(fabs(g.x.scale - 400.0 / 224) < 1e-12);
}

/* Train crops may take the faster pass order (vertical first): it must
 * agree with Pillow's exact order up to rounding, on every geometry, flip
 * and size. */
static void test_fast_paths_match_exact(void) {
  int W = 517, H = 389;
  uint8_t *img = make_image(W, H, 9);
  /* smooth it a little so that rounding, not noise, is what differs */
  for (int y = 1; y < H; y++)
    for (int x = 3; x < W * 3; x++) img[y * W * 3 + x] = (uint8_t)((img[y * W * 3 + x] + img[(y - 1) * W * 3 + x] + img[y * W * 3 + x - 3]) / 3);
  stk__resampler a = {0}, b = {0};
  stk__store st;
  const float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
  int sizes[] = {224, 64, 301};
  int worst = 0;
  double sum = 0;
  long count = 0;
  for (int t = 0; t < 150; t++) {
    int S = sizes[t % 3];
    stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, S, S, mean, std);
    stk__rng rng;
    stk__rng_init(&rng, 4, 0, (uint64_t)t);
    stk__rect crop;
    const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
    stk__rrc_params(W, H, scale, ratio, &rng, &crop);
    stk__geom g;
    stk__geom_crop(&crop, S, S, &g);
    g.flip = t & 1;
    stk__rect na, nb;
    g.exact = 1;
    CHECK_EQ_INT(stk__resampler_plan(&a, &g, &na), STK_OK);
    g.exact = 0;
    CHECK_EQ_INT(stk__resampler_plan(&b, &g, &nb), STK_OK);
    CHECK(na.x == nb.x && na.y == nb.y && na.w == nb.w && na.h == nb.h);
    uint8_t *oa = malloc((size_t)S * S * 3), *ob = malloc((size_t)S * S * 3);
    CHECK_EQ_INT(stk__resampler_run(&a, img, (size_t)W * 3, 0, 0, &st, oa), STK_OK);
    CHECK_EQ_INT(stk__resampler_run(&b, img, (size_t)W * 3, 0, 0, &st, ob), STK_OK);
    for (int i = 0; i < S * S * 3; i++) {
      int d = abs((int)oa[i] - (int)ob[i]);
      if (d > worst) worst = d;
      sum += d;
      count++;
    }
    free(oa);
    free(ob);
  }
  CHECK_MSG(worst <= 3, "fast path differs from the exact one by %d levels", worst);
  CHECK_MSG(sum / count < 0.5, "mean difference %.3f levels", sum / count);
  free(img);
  stk__resampler_free(&a);
  stk__resampler_free(&b);
}

int main(void) {
  test_fast_paths_match_exact();
  test_rrc_rules(500, 375);
  test_rrc_rules(375, 500);
  test_rrc_rules(1000, 1000);
  test_rrc_rules(64, 64);
  test_rrc_rules(2000, 100);
  test_rrc_fallback();
  test_eval_geometry();
  test_resample_identity_and_flip();
  test_resample_constant();
  test_store();
  test_choose_denom();
  return CHECK_DONE();
}
