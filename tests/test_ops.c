/* Crop choices, geometries, the resampler and the store. */
#include <math.h>
#include <stdio.h>
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
  /* Weights sum to one: a flat image stays flat at any scale, both ways,
   * with either filter (bicubic's negative lobes included). */
  int W = 333, H = 250;
  uint8_t *img = malloc((size_t)W * H * 3);
  for (size_t i = 0; i < (size_t)W * H; i++) img[i * 3] = 200, img[i * 3 + 1] = 17, img[i * 3 + 2] = 99;
  stk__resampler rs = {0};
  stk__store st;
  const float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
  int sizes[] = {7, 64, 224, 500};
  for (int k = 0; k < 8; k++) {
    int S = sizes[k % 4];
    stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NCHW, S, S, mean, std);
    stk__rect crop = {10, 3, 300, 211};
    stk__geom g;
    stk__geom_crop(&crop, S, S, &g);
    stk__geom_set_filter(&g, k < 4 ? STK_FILTER_BILINEAR : STK_FILTER_BICUBIC);
    stk__rect need;
    CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
    CHECK(need.x >= 10 && need.y >= 3 && need.x + need.w <= 310 && need.y + need.h <= 214);
    uint8_t *out = malloc((size_t)S * S * 3);
    CHECK_EQ_INT(stk__resampler_run(&rs, img, (size_t)W * 3, 0, 0, &st, out), STK_OK);
    int ok = 1;
    for (int i = 0; i < S * S; i++)
      ok &= out[i] == 200 && out[S * S + i] == 17 && out[2 * S * S + i] == 99;
    CHECK_MSG(ok, "flat image not flat at size %d (filter %d)", S, k / 4);
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

/* Pillow's own output (9.4, Image.resize with BILINEAR / BICUBIC, box=, or
 * crop() then resize() as torchvision's resized_crop does) on an 11x9 image
 * with sharp jumps, so that bicubic's overshoot is clipped at 0 and 255 in
 * the intermediate and the output. Made by:
 *   a[y, x, c] = (x * 37 + y * 91 + c * 53 + x * y * 13) & 255
 *   im.resize(size, f, box=box) or im.crop(crop).resize(size, f)
 *   np.asarray(out).tobytes().hex()                                      */
typedef struct {
  const char *name;
  int filter, ow, oh;
  int box[4];       /* resize with box= (x0, y0, x1, y1): the window is clipped at the image */
  int is_crop;      /* crop() then resize(): clipped at the crop */
  stk__rect crop;
  const char *hex;  /* Pillow's RGB bytes */
} pillow_case;

static const pillow_case PILLOW_CASES[] = {
    {"down", STK_FILTER_BILINEAR, 5, 4, {0, 0, 11, 9}, 0, {0, 0, 0, 0},
     "688794898c978c8f8a7d7a73636d997b937c93807d8b7394807a8b817f7774a1949275a38d81889277989497"
     "7a9d6ca19a72a794777f97838196738b"},
    {"up", STK_FILTER_BILINEAR, 14, 12, {0, 0, 11, 9}, 0, {0, 0, 0, 0},
     "00356a194e83366ba05388bd70a5da8dc2f7aadf79c89832b71a4f0b376c1f54893c71a6598ec372a7dc396e"
     "a3588dc27bb09a9fac69bc578c627aaf689d988d9c979f859d77a843975461654f843e73a85c91c67db287a3"
     "96ada1a28d99a663be598a6c846a7a7584807aaf70a5bd9bd06bc784499c535c5e52874277aca1d62bce6a58"
     "98557b53809d849ac89ece4acb7855a6477c4b669b6599ce96cb58c98642aa4666285d92265b705978a383a7"
     "74adaa37e03d716a77917c9ec6aa74a9a9275c336095669bb8a1c57389a8450d42774a7fb483b8817aaf6267"
     "8471a679ae9c3d726d6297707fb4a16a9f972e635e6ba078adaf9b9d9093285d8ec3988cc16b6da281617eb3"
     "a77bb0a6477c7e746e639892728abfbc578c8e53887c85ba9a9bb1d96e43b2e73c6095835b90c59c99cee541"
     "768779ae9cc5718ab25f4d689d85b9eed663809d6b9179ae91bff429376c816ea3ce558abf3663988e9cd1cd"
     "457a9976988d6b8cab295e5481b6a5c24f759b69588d70a4d90e5b90c5af77ac9978ad707db2cb6398ae77ac"
     "b8669bb46297a36ca1b84f849daa97a3818aa36c828abf949f74a9b86297b86a9fb277acc964996981b6a477"
     "72a77b75748cb0dc78508592afae598ec44b8070a5dad80d428a6da2a6659ad54a7f7bb0e521568b6297306c"
     "a13a3f747baee3215d92878c376ca82f645a8fc4"},
    {"box", STK_FILTER_BILINEAR, 6, 7, {2, 1, 9, 8}, 0, {0, 0, 0, 0},
     "c5cd3eb1366b396ea371a6dba9de63d6474f4a70a587bca1ce933884497e5b90c5a7cd3eb2ba2bbd42776297"
     "ccb85d925d4277689dc3386d929378ad872c615b90c5bf4479575f949fa7dcc94e838cc1866ea36871a6dbdc"
     "4d82255a8f9f84b9b0558aa2477c73588d9dd2449b94c9d55a8fb57aafb57aafd55a8f9b94c9"},
    {"crop_tall", STK_FILTER_BILINEAR, 4, 3, {0, 0, 0, 0}, 1, {1, 0, 9, 9},
     "8b8f8d898b8f8880878175707d908d93728a8371958a8b929975aa997696947c869e7784"},
    {"crop_up", STK_FILTER_BILINEAR, 8, 8, {0, 0, 0, 0}, 1, {3, 2, 6, 5},
     "73a8dd9acf64ca9f34d92e63485d92578cc187bc91aee318ac71a6919c779b9a75bc659a84457a5f6a9f699e"
     "9d93c86ded326788598e618cc191a8ddca2d626e3f744873a86da2d79e83b8a24b8081487d537eb39382b7a1"
     "4a7f80477c477cb1a085baa851868d546b5b907f659ac5a1689da44d8271568bf1366b9a6ba086b18caadf42"
     "42778e709bd0b586bbeb3065b277acb16297a27d888caf828b42697574a9909b9ad59a3f7bb0e5c3588db94e"
     "836f84b9c61b507c518672a77cbaef24"},
    {"down", STK_FILTER_BICUBIC, 5, 4, {0, 0, 11, 9}, 0, {0, 0, 0, 0},
     "6484958a90978d928c7f786c5d6d9c8196779481788a6d94817e8f857c746ca9969071a68e7d8991749b95a0"
     "77a068a29c72a891767d98877f97718c"},
    {"up", STK_FILTER_BICUBIC, 14, 12, {0, 0, 11, 9}, 0, {0, 0, 0, 0},
     "002e6312477b3064a04c84c569ace191c8ffb0f86fda9f15c60048002d700e558d3975a95e92c776abe03165"
     "ad4d90d77bc69eaeb953c74b83536db854a59e8ca69faa87a87bb033a6415e5c40892a79ad6195ca86c08cb1"
     "9abdabad8f9eb252c84f845f805a71667f7873c563bcd6ade663e78135a53d5150468b407aaea9e91ce55e49"
     "9b3a7a387bac7ba5d5a4e838e87241b12e7434629d6298dd94e64ae2862db932671c5f95184e6a4a6db783b8"
     "79bcbb1ced2e6757759770b7e2bd79b0ba0c422460975e9ed1b4da6c8eb52f003b7b3a6fcc8dca817ebf4d55"
     "7b67a081b8a9256459549b5f89cab470a4a0194e4562a86bc7c4a5a8969a0c599acda49bd05769a3764f76c9"
     "a283b8b238737b69584ea594679ed9d14f848b3f7c6c85d19ea1c8f1633ac3f42a53897c498ddaaca9ddf333"
     "69747cc0a4e36a92bf46365b9f82c9fff25475a1579269b699c4ff20285c7973b2e14f8dc41b538884a9dee3"
     "3268917ba0866e92bc0e474583bcb1da396d9d65428377aae000499adbc670a9a176aa5885bad6598eb881b4"
     "c25aa4be57a0ab73aac13a839bbea0a7868dab5f8088c59ea37db2c2588dc0679cba80b5d55a8f558cc7ae74"
     "66b3796f649ac7ee71467797c6b64d90da3d7667a9f0e200337979aea2679ceb396e74bbf00b448a63a0186d"
     "ab2f2f6584aef0194e98908b2267b223585393c8"},
    {"box", STK_FILTER_BICUBIC, 6, 7, {2, 1, 9, 8}, 0, {0, 0, 0, 0},
     "ccd833bb2b66296da272a7ebaee959e13c483f6aac81c5aadc9627813b805296d1add833b8c41fc5357052a5"
     "dac85a8f553a7066a4cf2b6994997eb48a1b504da1d6cd3d724d5d92a0ade6cf3f818bce886ca15b6ca8eae9"
     "437c17558aa388bdb25489a3457a6f548fa2e03e9699ced8578cb37cb1b37cb1d8578c9699ce"},
    {"crop_tall", STK_FILTER_BICUBIC, 4, 3, {0, 0, 0, 0}, 1, {1, 0, 9, 9},
     "888c8d8c8e908680857e746e7d938b98708b826f988d8f949675b0987495937f809b7483"},
    {"crop_up", STK_FILTER_BICUBIC, 8, 8, {0, 0, 0, 0}, 1, {3, 2, 6, 5},
     "66aef198e75ddfa714e817593360974a92dc91c593b5ea00af6ca98aa8719baa6ecb609c8239704f67a864a9"
     "a49dd164fc285d814f894a98d392b7ecdd1e536630653777ae70a6e39294c9ac3c75812c6f397ac19b91c7b8"
     "376b80336b2e82c09395cab14882953f554b8d7756b1dfb6669eb53d75604e8cfd2b609166ad7dc395b9ef30"
     "326f8d64a6e7c08fc7f6215db378adb35b98a5828b8fbc848f2f5a6771b68baaa5e29f316bc1f6d14e82c63e"
     "7a5f88cfdb0a40753f8662b17fbcff19"},
};

static uint8_t pillow_pattern(int x, int y, int c) {
  return (uint8_t)((x * 37 + y * 91 + c * 53 + x * y * 13) & 255);
}

/* Both filters give Pillow's bytes: bilinear as it always did, bicubic on
 * every kind of geometry (downscale, upscale, box, crop taller than the
 * output, where the bilinear train path would swap the passes). */
static void test_pillow_reference(void) {
  enum { W = 11, H = 9 };
  uint8_t img[W * H * 3];
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < 3; c++) img[(y * W + x) * 3 + c] = pillow_pattern(x, y, c);
  const float mean[3] = {0, 0, 0}, std[3] = {1, 1, 1};
  stk__resampler rs = {0};
  for (size_t k = 0; k < sizeof PILLOW_CASES / sizeof PILLOW_CASES[0]; k++) {
    const pillow_case *pc = &PILLOW_CASES[k];
    stk__geom g;
    if (pc->is_crop) {
      stk__geom_crop(&pc->crop, pc->ow, pc->oh, &g);
      /* bilinear train crops may swap the passes (equal up to rounding);
       * bicubic must be Pillow's as the train path makes it */
      g.exact = pc->filter == STK_FILTER_BILINEAR;
    } else {
      const int *b = pc->box;
      g.x = (stk__axis){.in0 = b[0], .scale = (double)(b[2] - b[0]) / pc->ow, .lo = 0, .hi = W,
                        .out = pc->ow};
      g.y = (stk__axis){.in0 = b[1], .scale = (double)(b[3] - b[1]) / pc->oh, .lo = 0, .hi = H,
                        .out = pc->oh};
      g.flip = 0;
      g.exact = 1;
    }
    stk__geom_set_filter(&g, pc->filter);
    stk__store st;
    stk__store_init(&st, STK_DTYPE_UINT8, STK_LAYOUT_NHWC, pc->ow, pc->oh, mean, std);
    stk__rect need;
    CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
    CHECK_MSG(need.x >= 0 && need.y >= 0 && need.x + need.w <= W && need.y + need.h <= H,
              "%s: reads %d,%d %dx%d outside the image", pc->name, need.x, need.y, need.w, need.h);
    size_t n = (size_t)pc->ow * pc->oh * 3;
    CHECK_EQ_INT(strlen(pc->hex), n * 2);
    uint8_t out[14 * 12 * 3];
    CHECK_EQ_INT(stk__resampler_run(&rs, img, (size_t)W * 3, 0, 0, &st, out), STK_OK);
    int bad = -1;
    unsigned want = 0;
    for (size_t i = 0; i < n && bad < 0; i++) {
      sscanf(pc->hex + 2 * i, "%2x", &want);
      if (out[i] != want) bad = (int)i;
    }
    CHECK_MSG(bad < 0, "%s %s: byte %d is %d, Pillow's is %u", pc->name,
              pc->filter == STK_FILTER_BICUBIC ? "bicubic" : "bilinear", bad,
              bad < 0 ? 0 : out[bad], want);
  }
  stk__resampler_free(&rs);
}

/* Bicubic's window: support 2 (ksize 5 at scale 1, ceil(2 s) * 2 + 1 when
 * shrinking by s), negative lobes, weights summing to one in fixed point;
 * it reads more of the source than bilinear, within [lo, hi). */
static void test_bicubic_window(void) {
  CHECK_EQ_INT(stk__window_ksize(STK_FILTER_BILINEAR, 1.0), 3);
  CHECK_EQ_INT(stk__window_ksize(STK_FILTER_BICUBIC, 1.0), 5);
  CHECK_EQ_INT(stk__window_ksize(STK_FILTER_BILINEAR, 2.5), 7);
  CHECK_EQ_INT(stk__window_ksize(STK_FILTER_BICUBIC, 2.5), 11);
  CHECK_EQ_INT(stk__window_ksize(STK_FILTER_BICUBIC, 0.25), 5); /* upscaling: support stays 2 */
  CHECK(stk__bicubic(0.0) == 1.0 && stk__bicubic(1.0) == 0.0 && stk__bicubic(2.0) == 0.0);
  CHECK(stk__bicubic(1.5) == -0.0625 && stk__bicubic(-0.5) == 0.5625);
  /* upscaling by 4: a window of 4 taps, two of them negative */
  int first, count, neg = 0;
  int32_t k[8], sum = 0;
  stk__window(STK_FILTER_BICUBIC, 0.0, 0.25, 100, 41, &first, &count);
  CHECK_EQ_INT(count, 4);
  stk__window_weights(STK_FILTER_BICUBIC, 0.0, 0.25, 41, first, count, 5, k);
  for (int i = 0; i < 5; i++) sum += k[i], neg += k[i] < 0;
  CHECK_EQ_INT(neg, 2);
  CHECK_EQ_INT(k[4], 0);
  CHECK_MSG(abs(sum - (1 << STK_PRECISION_BITS)) <= 2, "weights sum to %d", sum);
  /* a crop clips the windows at its edges, so bicubic reads the same
   * rectangle; a box of a larger source range reads wider with bicubic,
   * still inside the range */
  stk__resampler rs = {0};
  stk__rect crop = {40, 30, 200, 150}, nl, nc;
  stk__geom g;
  stk__geom_crop(&crop, 64, 64, &g);
  CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &nl), STK_OK);
  stk__geom_set_filter(&g, STK_FILTER_BICUBIC);
  CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &nc), STK_OK);
  CHECK(nc.x == 40 && nc.y == 30 && nc.w == 200 && nc.h == 150 && nl.w == 200 && nl.h == 150);
  g.x.lo = g.y.lo = 0;
  g.x.hi = g.y.hi = 400;
  stk__geom_set_filter(&g, STK_FILTER_BILINEAR);
  CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &nl), STK_OK);
  CHECK_EQ_INT(rs.ksx, 9);
  stk__geom_set_filter(&g, STK_FILTER_BICUBIC);
  CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &nc), STK_OK);
  CHECK_EQ_INT(rs.ksx, 15);
  CHECK(nc.x <= nl.x && nc.y <= nl.y && nc.x + nc.w >= nl.x + nl.w && nc.y + nc.h >= nl.y + nl.h);
  CHECK(nc.w > nl.w && nc.h > nl.h);
  CHECK(nc.x >= 0 && nc.y >= 0 && nc.x + nc.w <= 400 && nc.y + nc.h <= 400);
  /* bicubic never swaps the passes; bilinear train crops taller than the output do */
  CHECK(stk__geom_vfirst(&g, nc.h) == 0);
  stk__geom_set_filter(&g, STK_FILTER_BILINEAR);
  CHECK(stk__geom_vfirst(&g, nl.h) == 1);
  /* an unknown filter is refused */
  stk__geom_set_filter(&g, 2);
  CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &nc), STK_EINVAL);
  stk__resampler_free(&rs);
}

/* ---- the SIMD resampler against the scalar one ----
 * The row functions as they were before the SIMD versions (flip in the
 * store, one pixel at a time), kept here as the reference: every ISA level
 * the CPU has must give the same bytes, on every pipeline, dtype and layout. */
static void ref_store_row(const stk__store *st, const uint8_t *lv, int y, int flip, void *dst) {
  int W = st->w;
  size_t plane = (size_t)W * st->h;
  int step = flip ? -1 : 1, x0 = flip ? W - 1 : 0;
  if (st->layout == STK_LAYOUT_NCHW) {
    for (int c = 0; c < 3; c++) {
      size_t o = c * plane + (size_t)y * W + x0;
      switch (st->dtype) {
        case STK_DTYPE_FLOAT32: {
          float *d = (float *)dst + o;
          for (int x = 0; x < W; x++) d[x * step] = st->lut_f32[c][lv[x * 3 + c]];
          break;
        }
        case STK_DTYPE_FLOAT16:
        case STK_DTYPE_BFLOAT16: {
          uint16_t *d = (uint16_t *)dst + o;
          for (int x = 0; x < W; x++) d[x * step] = st->lut_u16[c][lv[x * 3 + c]];
          break;
        }
        case STK_DTYPE_UINT8: {
          uint8_t *d = (uint8_t *)dst + o;
          for (int x = 0; x < W; x++) d[x * step] = lv[x * 3 + c];
          break;
        }
      }
    }
    return;
  }
  size_t o = ((size_t)y * W + x0) * 3;
  for (int x = 0; x < W; x++)
    for (int c = 0; c < 3; c++) {
      size_t i = o + (size_t)(x * step) * 3 + c;
      uint8_t v = lv[x * 3 + c];
      switch (st->dtype) {
        case STK_DTYPE_FLOAT32: ((float *)dst)[i] = st->lut_f32[c][v]; break;
        case STK_DTYPE_FLOAT16:
        case STK_DTYPE_BFLOAT16: ((uint16_t *)dst)[i] = st->lut_u16[c][v]; break;
        case STK_DTYPE_UINT8: ((uint8_t *)dst)[i] = v; break;
      }
    }
}

static void ref_hpass_row(const uint8_t *in, int base, uint8_t *out, int W, const int32_t *kx,
                          const int32_t *bx, int ksx) {
  for (int xx = 0; xx < W; xx++) {
    const int32_t *k = kx + (size_t)xx * ksx;
    const uint8_t *p = in + (size_t)(bx[xx * 2] - base) * 3;
    int32_t s[3] = {1 << 21, 1 << 21, 1 << 21};
    for (int i = 0; i < bx[xx * 2 + 1]; i++)
      for (int c = 0; c < 3; c++) s[c] += p[i * 3 + c] * k[i];
    for (int c = 0; c < 3; c++) out[xx * 3 + c] = (uint8_t)stk__clip8(s[c]);
  }
}

static void ref_vpass_row(const uint8_t *first, size_t pitch, size_t len, const int32_t *k, int n,
                          int32_t *acc, uint8_t *out) {
  for (size_t j = 0; j < len; j++) acc[j] = 1 << 21;
  for (int i = 0; i < n; i++)
    for (size_t j = 0; j < len; j++) acc[j] += first[(size_t)i * pitch + j] * k[i];
  for (size_t j = 0; j < len; j++) out[j] = (uint8_t)stk__clip8(acc[j]);
}

/* stk__resampler_run as it was, on the tables of a planned resampler. */
static void ref_run(const stk__resampler *r, const uint8_t *src, size_t stride, int sx, int sy,
                    const stk__store *st, void *dst) {
  const stk__geom *g = &r->g;
  int W = g->x.out, H = g->y.out;
  int rows = r->src_y1 - r->src_y0, cols = r->src_x1 - r->src_x0;
  const int32_t *kx = r->kx.p, *bx = r->bx.p, *ky = r->ky.p, *by = r->by.p;
  size_t trow = (size_t)W * 3;
  int vfirst = stk__geom_vfirst(g, rows);
  size_t mid_row = vfirst ? (size_t)cols * 3 : trow, mid_rows = vfirst ? (size_t)H : (size_t)rows;
  size_t acc_len = mid_row > trow ? mid_row : trow;
  uint8_t *tmp = malloc(mid_row * mid_rows), *levels = malloc(trow);
  int32_t *acc = malloc(acc_len * sizeof *acc);
  const uint8_t *corner = src + (size_t)(r->src_y0 - sy) * stride + (size_t)(r->src_x0 - sx) * 3;
  int xbase = r->src_x0 - g->x.lo, yoff = g->y.lo - r->src_y0;
  if (!vfirst) {
    for (int y = 0; y < rows; y++)
      ref_hpass_row(corner + (size_t)y * stride, xbase, tmp + (size_t)y * trow, W, kx, bx, r->ksx);
    for (int yy = 0; yy < H; yy++) {
      ref_vpass_row(tmp + (size_t)(by[yy * 2] + yoff) * trow, trow, trow, ky + (size_t)yy * r->ksy,
                    by[yy * 2 + 1], acc, levels);
      ref_store_row(st, levels, yy, g->flip, dst);
    }
  } else {
    for (int yy = 0; yy < H; yy++)
      ref_vpass_row(corner + (size_t)(by[yy * 2] + yoff) * stride, stride, mid_row,
                    ky + (size_t)yy * r->ksy, by[yy * 2 + 1], acc, tmp + (size_t)yy * mid_row);
    for (int yy = 0; yy < H; yy++) {
      ref_hpass_row(tmp + (size_t)yy * mid_row, xbase, levels, W, kx, bx, r->ksx);
      ref_store_row(st, levels, yy, g->flip, dst);
    }
  }
  free(tmp);
  free(levels);
  free(acc);
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 0x100000001b3ull;
  return h;
}

/* A random geometry on a w x h image: a train crop, an eval resize + centre
 * crop or any rectangle, to any output size (up- and downscales, 1-pixel
 * outputs, windows wider than the SIMD kernels take), either filter, flip
 * and pass order. */
static void random_geom(stk__rng *rng, int w, int h, stk__geom *g) {
  uint64_t v = stk__rng_next(rng);
  int ow = 1 + (int)(v % 260), oh = 1 + (int)((v >> 12) % 260);
  if ((v >> 24) % 4 == 0) ow = oh = 224;
  switch ((v >> 28) % 3) {
    case 0: {
      const float scale[2] = {0.08f, 1.0f}, ratio[2] = {3.0f / 4, 4.0f / 3};
      stk__rect c;
      stk__rrc_params(w, h, scale, ratio, rng, &c);
      stk__geom_crop(&c, ow, oh, g);
      break;
    }
    case 1: {
      int crop = 1 + (int)((v >> 32) % 240);
      stk__geom_eval(w, h, crop + (int)((v >> 40) % 40), crop, g);
      break;
    }
    default: {
      stk__rect c;
      c.w = 1 + (int)((v >> 32) % (uint64_t)w);
      c.h = 1 + (int)((v >> 44) % (uint64_t)h);
      c.x = (int)(stk__rng_next(rng) % (uint64_t)(w - c.w + 1));
      c.y = (int)(stk__rng_next(rng) % (uint64_t)(h - c.h + 1));
      stk__geom_crop(&c, ow, oh, g);
    }
  }
  stk__geom_set_filter(g, (v >> 52) & 1 ? STK_FILTER_BICUBIC : STK_FILTER_BILINEAR);
  g->flip = (v >> 53) & 1;
  g->exact = (v >> 54) & 1;
}

/* STK_TEST_RESAMPLE_CASES sets how many random cases (160; make test-neon
 * runs more under qemu, where NEON is level 1). */
static void test_simd_matches_scalar(void) {
  static const stk_dtype DT[4] = {STK_DTYPE_FLOAT32, STK_DTYPE_FLOAT16, STK_DTYPE_BFLOAT16, STK_DTYPE_UINT8};
  int top = stk__resample_isa(-1), mismatches = 0, runs = 0, cases = 160;
  const char *ev = getenv("STK_TEST_RESAMPLE_CASES");
  if (ev && atoi(ev) > 0) cases = atoi(ev);
  stk__rng rng;
  stk__rng_init(&rng, 20, 0, 0);
  stk__resampler rs = {0};
  for (int t = 0; t < cases; t++) {
    uint64_t v = stk__rng_next(&rng);
    int w = 1 + (int)(v % 640), h = 1 + (int)((v >> 16) % 480);
    uint8_t *img = make_image(w, h, 1000 + t);
    stk__geom g;
    random_geom(&rng, w, h, &g);
    float mean[3], std[3];
    for (int c = 0; c < 3; c++) {
      mean[c] = (float)(stk__rng_next(&rng) % 1000) / 1000.0f;
      std[c] = 0.05f + (float)(stk__rng_next(&rng) % 1000) / 1000.0f;
    }
    stk__rect need;
    stk__resample_isa(0);
    CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
    /* half the time the source is exactly the rectangle read, so that a
     * read past it is a read past the allocation */
    int tight = t & 1;
    uint8_t *src = img;
    size_t stride = (size_t)w * 3;
    int sx = 0, sy = 0;
    if (tight) {
      src = malloc((size_t)need.w * need.h * 3);
      for (int y = 0; y < need.h; y++)
        memcpy(src + (size_t)y * need.w * 3, img + ((size_t)(need.y + y) * w + need.x) * 3, (size_t)need.w * 3);
      stride = (size_t)need.w * 3, sx = need.x, sy = need.y;
    }
    int ow = g.x.out, oh = g.y.out;
    size_t bytes = (size_t)ow * oh * 3 * 4;
    uint8_t *want = malloc(bytes), *got = malloc(bytes + 64);
    for (int d = 0; d < 8; d++) {
      stk__store st;
      stk__store_init(&st, DT[d / 2], d & 1 ? STK_LAYOUT_NHWC : STK_LAYOUT_NCHW, ow, oh, mean, std);
      size_t n = (size_t)ow * oh * 3 * stk__dtype_size(DT[d / 2]);
      memset(want, 0xa5, bytes);
      ref_run(&rs, src, stride, sx, sy, &st, want);
      for (int isa = 0; isa <= top; isa++) {
        stk__resample_isa(isa);
        CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
        memset(got, 0x5a, bytes + 64);
        CHECK_EQ_INT(stk__resampler_run(&rs, src, stride, sx, sy, &st, got), STK_OK);
        int same = memcmp(got, want, n) == 0;
        for (size_t i = n; i < bytes + 64; i++) same &= got[i] == 0x5a; /* nothing written past */
        runs++;
        if (!same && mismatches++ < 10)
          fprintf(stderr, "case %d: %dx%d -> %dx%d filter %d flip %d exact %d dtype %d layout %d isa %d differs\n", t,
                  w, h, ow, oh, g.x.filter, g.flip, g.exact, DT[d / 2], d & 1, isa);
      }
    }
    /* the tile store (augmented images) against the reference store */
    for (int d = 0; d < 8; d++) {
      stk__store st;
      stk__store_init(&st, DT[d / 2], d & 1 ? STK_LAYOUT_NHWC : STK_LAYOUT_NCHW, ow, oh, mean, std);
      uint8_t *tile = make_image(ow, oh, 7 + t);
      size_t n = (size_t)ow * oh * 3 * stk__dtype_size(DT[d / 2]);
      for (int y = 0; y < oh; y++) ref_store_row(&st, tile + (size_t)y * ow * 3, y, 0, want);
      for (int isa = 0; isa <= top; isa++) {
        stk__resample_isa(isa);
        stk__store_tile(&st, tile, got);
        if (memcmp(got, want, n) && mismatches++ < 10)
          fprintf(stderr, "case %d: tile store dtype %d layout %d isa %d differs\n", t, DT[d / 2], d & 1, isa);
      }
      free(tile);
    }
    free(want);
    free(got);
    if (tight) free(src);
    free(img);
  }
  stk__resample_isa(top);
  stk__resampler_free(&rs);
  CHECK_MSG(mismatches == 0, "%d of %d SIMD runs differ from the scalar reference", mismatches, runs);
  printf("resampler: %d runs (%d cases) on ISA levels 0..%d byte-identical to the scalar reference\n", runs, cases,
         top);
}

/* Checksums of outputs recorded with the resampler before its SIMD passes
 * (the scalar code of commit 2ca8df1):
 * the reference above is a copy, this catches the copy drifting too. */
static void test_recorded_checksums(void) {
  static const stk_dtype DT[4] = {STK_DTYPE_FLOAT32, STK_DTYPE_FLOAT16, STK_DTYPE_BFLOAT16, STK_DTYPE_UINT8};
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  stk__rng rng;
  stk__rng_init(&rng, 21, 0, 0);
  stk__resampler rs = {0};
  uint64_t h = 0xcbf29ce484222325ull;
  int W = 500, H = 375;
  uint8_t *img = make_image(W, H, 77);
  for (int t = 0; t < 48; t++) {
    stk__geom g;
    random_geom(&rng, W, H, &g);
    stk__rect need;
    CHECK_EQ_INT(stk__resampler_plan(&rs, &g, &need), STK_OK);
    stk__store st;
    stk__store_init(&st, DT[t % 4], (t / 4) & 1 ? STK_LAYOUT_NHWC : STK_LAYOUT_NCHW, g.x.out, g.y.out, mean, std);
    size_t n = (size_t)g.x.out * g.y.out * 3 * stk__dtype_size(DT[t % 4]);
    uint8_t *out = malloc(n);
    CHECK_EQ_INT(stk__resampler_run(&rs, img, (size_t)W * 3, 0, 0, &st, out), STK_OK);
    h = fnv1a(h, out, n);
    free(out);
  }
  free(img);
  stk__resampler_free(&rs);
  printf("resampler checksum %016llx\n", (unsigned long long)h);
  CHECK_MSG(h == 0x2837415d4092d8a6ull, "outputs changed: checksum %016llx", (unsigned long long)h);
}

int main(void) {
  test_simd_matches_scalar();
  test_recorded_checksums();
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
  test_pillow_reference();
  test_bicubic_window();
  return CHECK_DONE();
}
