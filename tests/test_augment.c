/*
 * test_augment.c: the augmentation ops and draws in C, where the sanitizers
 * see them (python/tests/test_augment.py compares them with torchvision).
 *
 * Every op on tiles of awkward sizes (1x1, 2x3, 3x1, odd and square) and at
 * extreme magnitudes must stay in bounds and be deterministic; a few
 * identities that do not need torchvision hold exactly; the draws are the
 * same for the same key and differ between stages and epochs; MixUp and
 * CutMix follow roll(1) in every dtype and layout.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/options.h"
#include "ops/augment.h"
#include "ops/ops.h"

static void fill_random(uint8_t *t, size_t n, uint64_t seed) {
  stk__rng r;
  stk__rng_init(&r, seed, 1, 2);
  for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(stk__rng_next(&r) >> 56);
}

static int apply(int kind, float mag, int ks, uint8_t *t, int w, int h, int nearest,
                 const float *fill, stk__buf *scratch) {
  stk__op op = {(uint8_t)kind, (uint8_t)ks, mag, 0};
  return stk__op_apply(&op, t, w, h, nearest, fill, scratch);
}

/* Every op, every size, several magnitudes: in bounds (the sanitizers), OK,
 * and the same output twice. */
static void test_all_ops_all_sizes(void) {
  static const int sizes[][2] = {{1, 1}, {2, 3}, {3, 1}, {1, 7}, {17, 9}, {32, 32}, {33, 20}};
  static const float mags[] = {0.0f, 0.3f, -0.99f, 135.0f, -30.0f, 32.0f, 255.0f, 4.0f, 1.7f};
  stk__buf scratch = {0};
  float fill[3] = {0, 128, 255};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    int w = sizes[s][0], h = sizes[s][1];
    size_t n = (size_t)w * h * 3;
    uint8_t *a = malloc(n), *b = malloc(n), *src = malloc(n);
    for (int kind = 0; kind < STK__OP_COUNT; kind++)
      for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++)
        for (int nearest = 0; nearest <= 1; nearest++) {
          float mag = mags[m];
          if (kind == STK__OP_ADJ_HUE) mag = fmaxf(-0.5f, fminf(0.5f, mag / 10));
          if (kind == STK__OP_BLUR) mag = fabsf(mag) + 0.1f;
          if (kind >= STK__OP_ADJ_BRIGHTNESS && kind <= STK__OP_ADJ_SHARPNESS &&
              kind != STK__OP_ADJ_HUE)
            mag = fabsf(mag);
          int ks = kind == STK__OP_BLUR ? 5 : 0;
          fill_random(src, n, (uint64_t)(s * 100 + kind));
          memcpy(a, src, n);
          memcpy(b, src, n);
          int ra = apply(kind, mag, ks, a, w, h, nearest, nearest ? NULL : fill, &scratch);
          int rb = apply(kind, mag, ks, b, w, h, nearest, nearest ? NULL : fill, &scratch);
          CHECK_MSG(ra == STK_OK && rb == STK_OK, "%s on %dx%d", stk__op_name(kind), w, h);
          CHECK_MSG(!memcmp(a, b, n), "%s on %dx%d is not deterministic", stk__op_name(kind), w, h);
        }
    free(a);
    free(b);
    free(src);
  }
  stk__buf_free(&scratch);
}

/* Identities that hold exactly whatever torchvision's float order. */
static void test_identities(void) {
  int w = 23, h = 17;
  size_t n = (size_t)w * h * 3;
  uint8_t *a = malloc(n), *src = malloc(n);
  stk__buf scratch = {0};
  fill_random(src, n, 7);
  static const int twice[] = {STK__OP_INVERT, STK__OP_VFLIP, STK__OP_HFLIP};
  for (size_t k = 0; k < 3; k++) {
    memcpy(a, src, n);
    apply(twice[k], 0, 0, a, w, h, 1, NULL, &scratch);
    CHECK_MSG(memcmp(a, src, n), "%s changed nothing", stk__op_name(twice[k]));
    apply(twice[k], 0, 0, a, w, h, 1, NULL, &scratch);
    CHECK_MSG(!memcmp(a, src, n), "%s twice is not the identity", stk__op_name(twice[k]));
  }
  /* factor 1 blends and zero warps leave the image as it was */
  static const int one[] = {STK__OP_ADJ_BRIGHTNESS, STK__OP_ADJ_SATURATION, STK__OP_ADJ_CONTRAST};
  for (size_t k = 0; k < 3; k++) {
    memcpy(a, src, n);
    apply(one[k], 1.0f, 0, a, w, h, 1, NULL, &scratch);
    CHECK_MSG(!memcmp(a, src, n), "%s(1) changed the image", stk__op_name(one[k]));
  }
  for (int kind = STK__OP_SHEAR_X; kind <= STK__OP_ROTATE; kind++) {
    memcpy(a, src, n);
    apply(kind, 0.0f, 0, a, w, h, 1, NULL, &scratch);
    CHECK_MSG(!memcmp(a, src, n), "%s(0) moved pixels", stk__op_name(kind));
  }
  /* posterize keeps the top bits; solarize at 0 inverts all, at 256 nothing */
  memcpy(a, src, n);
  apply(STK__OP_POSTERIZE, 3, 0, a, w, h, 1, NULL, &scratch);
  int ok = 1;
  for (size_t i = 0; i < n; i++) ok &= a[i] == (src[i] & 0xe0);
  CHECK(ok);
  memcpy(a, src, n);
  apply(STK__OP_SOLARIZE, 0.0f, 0, a, w, h, 1, NULL, &scratch);
  ok = 1;
  for (size_t i = 0; i < n; i++) ok &= a[i] == 255 - src[i];
  CHECK(ok);
  /* equalize and autocontrast leave a flat image flat */
  memset(a, 77, n);
  apply(STK__OP_EQUALIZE, 0, 0, a, w, h, 1, NULL, &scratch);
  apply(STK__OP_AUTOCONTRAST, 0, 0, a, w, h, 1, NULL, &scratch);
  ok = 1;
  for (size_t i = 0; i < n; i++) ok &= a[i] == 77;
  CHECK(ok);
  /* autocontrast stretches each channel to 0..255 */
  memcpy(a, src, n);
  apply(STK__OP_AUTOCONTRAST, 0, 0, a, w, h, 1, NULL, &scratch);
  for (int c = 0; c < 3; c++) {
    int lo = 255, hi = 0;
    for (size_t i = c; i < n; i += 3) lo = a[i] < lo ? a[i] : lo, hi = a[i] > hi ? a[i] : hi;
    CHECK_EQ_INT(lo, 0);
    CHECK_EQ_INT(hi, 255);
  }
  /* a 90-degree turn of a square tile moves pixels whole (nearest) */
  int s = 16;
  uint8_t *q = malloc((size_t)s * s * 3), *q0 = malloc((size_t)s * s * 3);
  fill_random(q0, (size_t)s * s * 3, 9);
  memcpy(q, q0, (size_t)s * s * 3);
  apply(STK__OP_ROTATE, 90.0f, 0, q, s, s, 1, NULL, &scratch);
  ok = 1;
  for (int y = 0; y < s; y++)
    for (int x = 0; x < s; x++)
      for (int c = 0; c < 3; c++) /* counter-clockwise: (x, y) <- (s-1-y, x) */
        ok &= q[((size_t)y * s + x) * 3 + c] == q0[((size_t)x * s + (s - 1 - y)) * 3 + c];
  CHECK_MSG(ok, "Rotate(90) is not a quarter turn");
  free(q);
  free(q0);
  free(a);
  free(src);
  stk__buf_free(&scratch);
}

static void plan(stk__aug_plan *ap, int policy, float erase) {
  stk_options o;
  stk_options_init(&o);
  o.auto_augment = policy;
  o.erase_prob = erase;
  o.vflip_prob = 0.5f;
  o.color_jitter[0] = 0.4f;
  o.color_jitter[3] = 0.1f;
  stk__aug_plan_init(ap, &o, 176, 176);
}

static void test_draws(void) {
  stk__aug_plan ap;
  plan(&ap, STK__AA_TA_WIDE, 0.5f);
  CHECK(ap.on);
  int counts[STK__TA_OPS] = {0}, erased = 0, differ = 0;
  for (int64_t i = 0; i < 20000; i++) {
    stk__aug a, b, c;
    stk__aug_draw(&ap, 3, 0, i, &a);
    stk__aug_draw(&ap, 3, 0, i, &b);
    stk__aug_draw(&ap, 3, 1, i, &c);
    CHECK(!memcmp(&a, &b, sizeof a));
    differ += memcmp(&a, &c, sizeof a) != 0;
    erased += a.erase;
    if (a.erase) {
      CHECK(a.ex[0] >= 0 && a.ey[0] >= 0 && a.ew[0] > 0 && a.eh[0] > 0);
      CHECK(a.ex[0] + a.ew[0] <= 176 && a.ey[0] + a.eh[0] <= 176);
    }
    for (int k = 0; k < a.n; k++)
      if (a.op[k].kind < STK__TA_OPS && a.op[k].kind != STK__OP_VFLIP) counts[a.op[k].kind]++;
  }
  CHECK(differ > 19000); /* another epoch, other draws */
  CHECK_MSG(erased > 9000 && erased < 11000, "erased %d of 20000 at p = 0.5", erased);
  for (int k = 0; k < STK__TA_OPS; k++)
    CHECK_MSG(counts[k] > 1200 && counts[k] < 1660, "op %s drawn %d times of 20000",
              stk__op_name(k), counts[k]);
  /* switching the erase off does not change the policy's draws */
  stk__aug_plan ap2;
  plan(&ap2, STK__AA_TA_WIDE, 0.0f);
  for (int64_t i = 0; i < 100; i++) {
    stk__aug a, b;
    stk__aug_draw(&ap, 3, 0, i, &a);
    stk__aug_draw(&ap2, 3, 0, i, &b);
    CHECK(a.n == b.n && !memcmp(a.op, b.op, sizeof a.op[0] * (size_t)a.n));
  }
  /* AutoAugment: two ops at most, each from the paper's pairs */
  plan(&ap, STK__AA_IMAGENET, 0.0f);
  for (int64_t i = 0; i < 2000; i++) {
    stk__aug a;
    stk__aug_draw(&ap, 1, 0, i, &a);
    int policy = 0;
    for (int k = 0; k < a.n; k++) policy += a.op[k].kind <= STK__OP_INVERT;
    CHECK(policy <= 2);
  }
}

/* MixUp and CutMix in place against a direct roll(1) (torchvision) or
 * flip(0) (timm) on float copies; n odd, so that flip's middle image pairs
 * with itself. */
static void test_mix(void) {
  int w = 9, h = 7, n = 5;
  size_t elems = (size_t)w * h * 3;
  for (int flip = 0; flip < 2; flip++)
  for (int dtype = 0; dtype < 4; dtype++)
    for (int layout = 0; layout < 2; layout++)
      for (int mode = 1; mode <= 2; mode++) {
        size_t es = stk__dtype_size((stk_dtype)dtype), bytes = elems * es;
        uint8_t *data = malloc(bytes * n), *orig = malloc(bytes * n);
        stk__rng r;
        stk__rng_init(&r, 5, (uint64_t)dtype, (uint64_t)mode);
        for (size_t e = 0; e < elems * n; e++)
          stk__store_value((stk_dtype)dtype, (float)(stk__rng_uniform(&r) * 200.0 - 50.0),
                           data + e * es);
        memcpy(orig, data, bytes * n);
        stk__mix m = {mode, 0.3, 2, 1, 6, 5, flip};
        stk__buf spare = {0};
        CHECK(stk__mix_apply(&m, data, n, (stk_dtype)dtype, (stk_layout)layout, w, h, &spare) ==
              STK_OK);
        stk__buf_free(&spare);
        int bad = 0;
        for (int i = 0; i < n; i++) {
          int prev = flip ? n - 1 - i : (i + n - 1) % n;
          for (size_t e = 0; e < elems; e++) {
            uint8_t cur[4], want[4];
            memcpy(cur, data + ((size_t)i * elems + e) * es, es);
            if (mode == 1) {
              /* MixUp in float32, exactly v2's order: roll(1) * (1 - lam) + x * lam
               * (the 16-bit dtypes round the same sum once more: python/tests
               * compare them with a tolerance) */
              if (dtype != STK_DTYPE_FLOAT32) continue;
              float x, pv;
              memcpy(&x, orig + ((size_t)i * elems + e) * es, 4);
              memcpy(&pv, orig + ((size_t)prev * elems + e) * es, 4);
              /* each product rounded on its own, as torch's separate kernels
               * (volatile: a compiler that contracts a * b + c into one
               * fused multiply-add must not do it to the reference too) */
              volatile float pb = pv * (float)(1.0 - 0.3), xa = x * (float)0.3;
              float v = pb + xa;
              memcpy(want, &v, 4);
            } else {
              /* CutMix: which pixel is e, in this layout */
              size_t px = layout == 0 ? e % ((size_t)w * h) : e / 3;
              int x = (int)(px % w), y = (int)(px / w);
              int in = x >= 2 && x < 6 && y >= 1 && y < 5;
              memcpy(want, orig + ((size_t)(in ? prev : i) * elems + e) * es, es);
            }
            bad += memcmp(cur, want, es) != 0;
          }
        }
        CHECK_MSG(!bad, "flip %d dtype %d layout %d mode %d: %d elements differ", flip, dtype,
                  layout, mode, bad);
        free(data);
        free(orig);
      }
}

/* The erase writes only its box, in every dtype and layout. */
static void test_erase(void) {
  stk__aug_plan ap;
  plan(&ap, 0, 1.0f);
  ap.erase_value[0] = 1.5f;
  ap.erase_value[1] = -2.0f;
  ap.erase_value[2] = 0.25f;
  stk__aug a;
  memset(&a, 0, sizeof a);
  a.erase = 1, a.ex[0] = 3, a.ey[0] = 2, a.ew[0] = 4, a.eh[0] = 5;
  int w = 11, h = 9;
  for (int dtype = 0; dtype < 3; dtype++)
    for (int layout = 0; layout < 2; layout++) {
      size_t es = stk__dtype_size((stk_dtype)dtype), elems = (size_t)w * h * 3;
      uint8_t *img = calloc(elems, es), zero[4] = {0};
      stk__aug_erase(&ap, &a, (stk_dtype)dtype, (stk_layout)layout, w, h, img);
      int bad = 0;
      for (int c = 0; c < 3; c++)
        for (int y = 0; y < h; y++)
          for (int x = 0; x < w; x++) {
            size_t at = layout == 0 ? (size_t)c * w * h + (size_t)y * w + x : ((size_t)y * w + x) * 3 + c;
            int in = x >= 3 && x < 7 && y >= 2 && y < 7;
            uint8_t want[4];
            if (in) stk__store_value((stk_dtype)dtype, ap.erase_value[c], want);
            bad += memcmp(img + at * es, in ? want : zero, es) != 0;
          }
      CHECK_MSG(!bad, "erase dtype %d layout %d: %d elements wrong", dtype, layout, bad);
      free(img);
    }
}

static void test_options(void) {
  stk_options o;
  stk_options_init(&o);
  o.root = ".";
  char err[256];
  o.auto_augment = 2;
  o.ra_magnitude = 31;
  CHECK(stk__options_validate(&o, err, sizeof err) == STK_EINVAL && strstr(err, "ra_magnitude"));
  o.ra_magnitude = 9;
  CHECK(stk__options_validate(&o, err, sizeof err) == STK_OK);
  o.blur_kernel = 4;
  CHECK(stk__options_validate(&o, err, sizeof err) == STK_EINVAL && strstr(err, "odd"));
  o.blur_kernel = 0;
  o.pipeline = STK_PIPELINE_EVAL;
  CHECK(stk__options_validate(&o, err, sizeof err) == STK_EINVAL && strstr(err, "train"));
  o.pipeline = STK_PIPELINE_TRAIN;
  o.erase_prob = 0.5f;
  o.erase_ratio[0] = INFINITY;
  o.erase_ratio[1] = INFINITY;
  CHECK(stk__options_validate(&o, err, sizeof err) == STK_EINVAL);
}

/* stk__rint is rintf bit for bit (the sign of zero included): a spread of
 * every kind of float, and the edges of its fast range. */
static void test_rint(void) {
  uint64_t bad = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 251) {
    uint32_t b = (uint32_t)u;
    float v, a, c;
    memcpy(&v, &b, 4);
    a = rintf(v), c = stk__rint(v);
    if (memcmp(&a, &c, 4) && !(isnan(a) && isnan(c))) bad++;
  }
  const float edge[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 0.49999997f,
                        -0.49999997f, 4194303.5f, -4194303.5f, 4194304.0f, 4194304.5f,
                        -4194304.5f, 8388607.5f, -8388607.5f, 8388608.0f, 1e30f, -1e30f,
                        INFINITY, -INFINITY};
  for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
    float a = rintf(edge[i]), c = stk__rint(edge[i]);
    if (memcmp(&a, &c, 4)) bad++;
  }
  CHECK(bad == 0);
}

/* The CPU's nearest-neighbour warp (row by row, column products computed
 * once) gives the pixels of stk__warp_px, the per-pixel definition the GPU
 * runs, for every warp op, sizes, magnitudes and fills. */
static void test_nearest_warp(void) {
  const int kinds[] = {STK__OP_SHEAR_X, STK__OP_SHEAR_Y, STK__OP_TRANSLATE_X, STK__OP_TRANSLATE_Y,
                       STK__OP_ROTATE};
  const int sizes[][2] = {{1, 1}, {3, 2}, {17, 9}, {64, 64}, {31, 47}};
  const float mags[] = {0.0f, 0.3f, -0.29f, 7.0f, -13.5f, 45.0f, 135.0f, 1e4f};
  const float fill[3] = {12.4f, 200.6f, 255.0f};
  stk__buf scratch = {0};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
      for (size_t g = 0; g < sizeof mags / sizeof mags[0]; g++)
        for (int f = 0; f < 2; f++) {
          int w = sizes[z][0], h = sizes[z][1];
          size_t n = (size_t)w * h * 3;
          uint8_t *t = malloc(n), *src = malloc(n), *want = malloc(n);
          fill_random(src, n, 7 * k + z);
          memcpy(t, src, n);
          stk__warp m;
          stk__warp_of(kinds[k], mags[g], w, h, &m);
          for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
              stk__warp_px(&m, src, w, h, x, y, 1, f ? fill : NULL, want + ((size_t)y * w + x) * 3);
          CHECK(apply(kinds[k], mags[g], 0, t, w, h, 1, f ? fill : NULL, &scratch) == STK_OK);
          CHECK(memcmp(t, want, n) == 0);
          free(t), free(src), free(want);
        }
  stk__buf_free(&scratch);
}

int main(void) {
  test_rint();
  test_nearest_warp();
  test_all_ops_all_sizes();
  test_identities();
  test_draws();
  test_mix();
  test_erase();
  test_options();
  return CHECK_DONE();
}
