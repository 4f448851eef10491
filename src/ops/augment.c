/*
 * augment.c: torchvision's uint8 augmentations on an RGB8 tile. See
 * augment.h for the order of the stages and how draws are keyed.
 *
 * Exactness: each op repeats the float32 arithmetic of torchvision's tensor
 * kernel for uint8 images, step by step, and rounds where it rounds
 * (`.to(uint8)` truncates; `_cast_squeeze_out` rounds half to even first).
 * Where torch's own order of float operations is not fixed (the grid's
 * matrix product, a convolution's sums) the result may differ by one level
 * on a few pixels; tests/test_augment.py measures how many.
 */
#include "ops/augment.h"

#include "core/options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/augment_px.h"
#include "ops/ops.h"

static const char *const op_names[STK__OP_COUNT] = {
    "Identity",     "ShearX",     "ShearY",         "TranslateX",      "TranslateY",
    "Rotate",       "Brightness", "Color",          "Contrast",        "Sharpness",
    "Posterize",    "Solarize",   "AutoContrast",   "Equalize",        "Invert",
    "adjust_brightness", "adjust_contrast", "adjust_saturation", "adjust_hue",
    "adjust_sharpness",  "rgb_to_grayscale", "gaussian_blur",    "vflip",
    "hflip",        "SolarizeAdd", "pil_autocontrast", "pil_color",     "pil_contrast",
    "pil_sharpness", "pil_shear_x", "pil_shear_y",     "pil_translate_x", "pil_translate_y",
    "pil_rotate"};

const char *stk__op_name(int kind) {
  return kind >= 0 && kind < STK__OP_COUNT ? op_names[kind] : NULL;
}

int stk__op_by_name(const char *name) {
  for (int k = 0; k < STK__OP_COUNT; k++)
    if (!strcmp(op_names[k], name)) return k;
  return -1;
}

float stk__linspace(double a, double b, int n, int i) {
  if (n <= 1) return (float)a;
  return (float)(a + (b - a) * i / (n - 1));
}

/* ---- magnitude tables (torchvision's _augmentation_space) -------------------- */

/* mags[op * nbins + bin]; ops without magnitudes keep 0. `wide` is
 * TrivialAugmentWide's space; otherwise RandAugment's and AutoAugment's,
 * whose translations scale with the image. */
static void fill_space(float *mags, int nbins, int wide, int w, int h) {
  double shear = wide ? 0.99 : 0.3, tx = wide ? 32.0 : 150.0 / 331.0 * w,
         ty = wide ? 32.0 : 150.0 / 331.0 * h, rot = wide ? 135.0 : 30.0,
         enh = wide ? 0.99 : 0.9;
  double post_div = (nbins - 1) / (wide ? 6.0 : 4.0);
  for (int i = 0; i < nbins; i++) {
    float *m = mags;
    m[STK__OP_SHEAR_X * nbins + i] = stk__linspace(0, shear, nbins, i);
    m[STK__OP_SHEAR_Y * nbins + i] = stk__linspace(0, shear, nbins, i);
    m[STK__OP_TRANSLATE_X * nbins + i] = stk__linspace(0, tx, nbins, i);
    m[STK__OP_TRANSLATE_Y * nbins + i] = stk__linspace(0, ty, nbins, i);
    m[STK__OP_ROTATE * nbins + i] = stk__linspace(0, rot, nbins, i);
    m[STK__OP_BRIGHTNESS * nbins + i] = stk__linspace(0, enh, nbins, i);
    m[STK__OP_COLOR * nbins + i] = stk__linspace(0, enh, nbins, i);
    m[STK__OP_CONTRAST * nbins + i] = stk__linspace(0, enh, nbins, i);
    m[STK__OP_SHARPNESS * nbins + i] = stk__linspace(0, enh, nbins, i);
    /* 8 - (arange(bins) / ((bins - 1) / k)).round().int(): float32
     * division, rounded half to even */
    float q = (float)i / (float)post_div;
    m[STK__OP_POSTERIZE * nbins + i] = (float)(8 - (int)nearbyintf(q));
    m[STK__OP_SOLARIZE * nbins + i] = stk__linspace(255.0, 0.0, nbins, i);
  }
}

/* Which ops of the space carry a magnitude, and which a sign. */
static int has_mag(int op) {
  return op >= STK__OP_SHEAR_X && op <= STK__OP_SOLARIZE;
}
static int is_signed(int op) { return op >= STK__OP_SHEAR_X && op <= STK__OP_SHARPNESS; }

void stk__aug_plan_init(stk__aug_plan *ap, const stk_options *o, int w, int h) {
  memset(ap, 0, sizeof *ap);
  ap->policy = o->auto_augment;
  ap->ra_num_ops = o->ra_num_ops;
  ap->ra_magnitude = o->ra_magnitude;
  ap->bins = o->magnitude_bins;
  /* aug_interpolation 0 nearest, 1 bilinear, 2 bicubic */
  ap->filter = o->aug_interpolation == 0   ? STK__WARP_NEAREST
               : o->aug_interpolation == 2 ? STK__WARP_BICUBIC
               : o->aug_interpolation == 3 ? STK__WARP_RANDOM
                                           : STK__WARP_BILINEAR;
  ap->has_fill = o->aug_fill[0] >= 0;
  for (int c = 0; c < 3; c++) ap->fill[c] = o->aug_fill[c] < 0 ? 0.0f : o->aug_fill[c];
  ap->vflip_prob = o->vflip_prob;
  memcpy(ap->jitter, o->color_jitter, sizeof ap->jitter);
  ap->jitter_prob = o->jitter_prob;
  ap->gray_prob = o->grayscale_prob;
  ap->blur_ksize = o->blur_kernel;
  memcpy(ap->blur_sigma, o->blur_sigma, sizeof ap->blur_sigma);
  ap->blur_prob = o->blur_prob;
  ap->erase_prob = o->erase_prob;
  memcpy(ap->erase_scale, o->erase_scale, sizeof ap->erase_scale);
  memcpy(ap->erase_ratio, o->erase_ratio, sizeof ap->erase_ratio);
  memcpy(ap->erase_value, o->erase_value, sizeof ap->erase_value);
  ap->erase_random = o->erase_random;
  ap->erase_per_channel = o->erase_per_channel;
  ap->erase_count = o->erase_count < 1 ? 1 : o->erase_count;
  ap->w = w;
  ap->h = h;
  int jit = ap->jitter[0] > 0 || ap->jitter[1] > 0 || ap->jitter[2] > 0 || ap->jitter[3] > 0;
  ap->on = ap->policy != STK__AA_NONE || ap->vflip_prob > 0 || (jit && ap->jitter_prob > 0) ||
           ap->gray_prob > 0 || (ap->blur_ksize > 0 && ap->blur_prob > 0) || ap->erase_prob > 0;
  if (ap->policy == STK__AA_TIMM) {
    ap->timm_magnitude = o->timm_magnitude;
    ap->timm_mstd = o->timm_mstd;
    ap->timm_mmax = o->timm_mmax;
    ap->timm_increasing = o->timm_increasing;
    ap->timm_prob = o->timm_prob;
    ap->timm_translate_pct = o->timm_translate_pct;
    if (!ap->has_fill) { /* timm always fills: its _FILL, (128, 128, 128) */
      ap->has_fill = 1;
      ap->fill[0] = ap->fill[1] = ap->fill[2] = 128.0f;
    }
  } else if (ap->policy == STK__AA_AUGMIX) {
    ap->augmix_severity = o->augmix_severity;
    ap->augmix_width = o->augmix_width;
    ap->augmix_depth = o->augmix_depth;
    ap->augmix_alpha = o->augmix_alpha;
    ap->augmix_all_ops = o->augmix_all_ops;
    /* AugMix._augmentation_space(10, (h, w)): RandAugment's shears,
     * rotation, enhancements and solarize; translations up to a third of
     * the side; posterize 4 - round(i / (9 / 4)) bits */
    ap->nbins = 10;
    fill_space(ap->mags, ap->nbins, 0, w, h);
    for (int i = 0; i < ap->nbins; i++) {
      ap->mags[STK__OP_TRANSLATE_X * ap->nbins + i] = stk__linspace(0, w / 3.0, ap->nbins, i);
      ap->mags[STK__OP_TRANSLATE_Y * ap->nbins + i] = stk__linspace(0, h / 3.0, ap->nbins, i);
      float q = (float)i / (float)((ap->nbins - 1) / 4.0);
      ap->mags[STK__OP_POSTERIZE * ap->nbins + i] = (float)(4 - (int)nearbyintf(q));
    }
  } else if (ap->policy != STK__AA_NONE) {
    ap->nbins = ap->policy == STK__AA_IMAGENET ? 10 : ap->bins;
    fill_space(ap->mags, ap->nbins, ap->policy == STK__AA_TA_WIDE, w, h);
  }
}

/* ---- draws ------------------------------------------------------------------- */

enum {
  STAGE_VFLIP = 1, STAGE_POLICY, STAGE_JITTER, STAGE_GRAY, STAGE_BLUR, STAGE_ERASE,
  STAGE_WARP_FILTER /* aug_interpolation "random": each warp's filter */
};

/* The stream of one stage of one sample: the sample's key mixed with the
 * stage, so each stage's draws are independent of which others are on. */
static void stage_rng(stk__rng *r, uint64_t seed, uint64_t epoch, int64_t index, int stage) {
  stk__rng_init(r, seed, epoch, (uint64_t)index);
  r->key = stk__mix64(r->key ^ (0xd1b54a32d192ed03ULL * (uint64_t)stage));
}

double stk__rng_normal(stk__rng *r) {
  double u1 = stk__rng_uniform(r), u2 = stk__rng_uniform(r);
  return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

static double uniform(stk__rng *r, double a, double b) { return a + (b - a) * stk__rng_uniform(r); }

static void push(stk__aug *a, int kind, float mag, int ksize) {
  if (a->n >= STK__AUG_MAX_OPS) return; /* the plan never asks for more (options bound it) */
  a->op[a->n].kind = (uint8_t)kind;
  a->op[a->n].ksize = (uint8_t)ksize;
  a->op[a->n].warp = 0;
  a->op[a->n].mag = mag;
  a->n++;
}

/* An op of the policy's space with bin `bin` (negative: none) and the sign
 * coin `neg`, as _apply_op receives it. */
static void push_policy_op(const stk__aug_plan *ap, stk__aug *a, int op, int bin, int neg) {
  float mag = 0.0f;
  if (has_mag(op) && bin >= 0) mag = ap->mags[op * ap->nbins + bin];
  if (is_signed(op) && neg) mag = -mag;
  push(a, op, mag, 0);
}

/* torchvision's AutoAugment ImageNet policy (the paper's): pairs of
 * (op, probability, magnitude bin or -1). */
static const struct {
  signed char op;
  float p;
  signed char bin;
} aa_imagenet[25][2] = {
    {{STK__OP_POSTERIZE, 0.4f, 8}, {STK__OP_ROTATE, 0.6f, 9}},
    {{STK__OP_SOLARIZE, 0.6f, 5}, {STK__OP_AUTOCONTRAST, 0.6f, -1}},
    {{STK__OP_EQUALIZE, 0.8f, -1}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_POSTERIZE, 0.6f, 7}, {STK__OP_POSTERIZE, 0.6f, 6}},
    {{STK__OP_EQUALIZE, 0.4f, -1}, {STK__OP_SOLARIZE, 0.2f, 4}},
    {{STK__OP_EQUALIZE, 0.4f, -1}, {STK__OP_ROTATE, 0.8f, 8}},
    {{STK__OP_SOLARIZE, 0.6f, 3}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_POSTERIZE, 0.8f, 5}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_ROTATE, 0.2f, 3}, {STK__OP_SOLARIZE, 0.6f, 8}},
    {{STK__OP_EQUALIZE, 0.6f, -1}, {STK__OP_POSTERIZE, 0.4f, 6}},
    {{STK__OP_ROTATE, 0.8f, 8}, {STK__OP_COLOR, 0.4f, 0}},
    {{STK__OP_ROTATE, 0.4f, 9}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_EQUALIZE, 0.0f, -1}, {STK__OP_EQUALIZE, 0.8f, -1}},
    {{STK__OP_INVERT, 0.6f, -1}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_COLOR, 0.6f, 4}, {STK__OP_CONTRAST, 1.0f, 8}},
    {{STK__OP_ROTATE, 0.8f, 8}, {STK__OP_COLOR, 1.0f, 2}},
    {{STK__OP_COLOR, 0.8f, 8}, {STK__OP_SOLARIZE, 0.8f, 7}},
    {{STK__OP_SHARPNESS, 0.4f, 7}, {STK__OP_INVERT, 0.6f, -1}},
    {{STK__OP_SHEAR_X, 0.6f, 5}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_COLOR, 0.4f, 0}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_EQUALIZE, 0.4f, -1}, {STK__OP_SOLARIZE, 0.2f, 4}},
    {{STK__OP_SOLARIZE, 0.6f, 5}, {STK__OP_AUTOCONTRAST, 0.6f, -1}},
    {{STK__OP_INVERT, 0.6f, -1}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_COLOR, 0.6f, 4}, {STK__OP_CONTRAST, 1.0f, 8}},
    {{STK__OP_EQUALIZE, 0.8f, -1}, {STK__OP_EQUALIZE, 0.6f, -1}},
};

/* timm's RandAugment: _RAND_TRANSFORMS (inc: _RAND_INCREASING_TRANSFORMS),
 * in timm's order. */
enum {
  TIMM_AUTOCONTRAST, TIMM_EQUALIZE, TIMM_INVERT, TIMM_ROTATE, TIMM_POSTERIZE, TIMM_SOLARIZE,
  TIMM_SOLARIZE_ADD, TIMM_COLOR, TIMM_CONTRAST, TIMM_BRIGHTNESS, TIMM_SHARPNESS, TIMM_SHEAR_X,
  TIMM_SHEAR_Y, TIMM_TRANSLATE_X, TIMM_TRANSLATE_Y, TIMM_OPS
};

/* One AugmentOp.__call__ of timm: the probability, the magnitude (with
 * magnitude_std's noise, clipped to [0, mmax or 10]), then the op's
 * level-to-argument function (_LEVEL_DENOM = 10) with its random sign. */
static void draw_timm_op(const stk__aug_plan *ap, stk__rng *r, stk__aug *a, int op) {
  if (ap->timm_prob < 1.0f && stk__rng_uniform(r) > (double)ap->timm_prob) return;
  double m = ap->timm_magnitude, sd = ap->timm_mstd;
  if (sd > 100.0 || isinf(sd)) m = uniform(r, 0.0, m); /* timm: mstd > 100 is uniform */
  else if (sd > 0) m = m + sd * stk__rng_normal(r);
  double hi = ap->timm_mmax > 0 ? ap->timm_mmax : STK__TIMM_MMAX_DEFAULT;
  m = m < 0.0 ? 0.0 : m > hi ? hi : m;
  double lv = m / 10.0;
  int inc = ap->timm_increasing;
  /* _randomly_negate: -v if random() > 0.5 */
#define NEG(v) (stk__rng_uniform(r) > 0.5 ? -(v) : (v))
  switch (op) {
    case TIMM_AUTOCONTRAST: push(a, STK__OP_PIL_AUTOCONTRAST, 0.0f, 0); break;
    case TIMM_EQUALIZE: push(a, STK__OP_EQUALIZE, 0.0f, 0); break;
    case TIMM_INVERT: push(a, STK__OP_INVERT, 0.0f, 0); break;
    case TIMM_ROTATE: push(a, STK__OP_PIL_ROTATE, (float)NEG(lv * 30.0), 0); break;
    case TIMM_POSTERIZE: {
      int bits = (int)(lv * 4.0);
      push(a, STK__OP_POSTERIZE, (float)(inc ? 4 - bits : bits), 0);
      break;
    }
    case TIMM_SOLARIZE: {
      int t = (int)(lv * 256.0);
      t = t > 256 ? 256 : t;
      push(a, STK__OP_SOLARIZE, (float)(inc ? 256 - t : t), 0);
      break;
    }
    case TIMM_SOLARIZE_ADD: {
      int add = (int)(lv * 110.0);
      push(a, STK__OP_SOLARIZE_ADD, (float)(add > 128 ? 128 : add), 0);
      break;
    }
    case TIMM_COLOR:
    case TIMM_CONTRAST:
    case TIMM_BRIGHTNESS:
    case TIMM_SHARPNESS: {
      static const int kinds[4] = {STK__OP_PIL_COLOR, STK__OP_PIL_CONTRAST,
                                   STK__OP_ADJ_BRIGHTNESS, STK__OP_PIL_SHARPNESS};
      double f;
      if (inc) {
        f = 1.0 + NEG(lv * 0.9);
        f = f < 0.1 ? 0.1 : f;
      } else {
        f = lv * 1.8 + 0.1;
      }
      push(a, kinds[op - TIMM_COLOR], (float)f, 0);
      break;
    }
    case TIMM_SHEAR_X: push(a, STK__OP_PIL_SHEAR_X, (float)NEG(lv * 0.3), 0); break;
    case TIMM_SHEAR_Y: push(a, STK__OP_PIL_SHEAR_Y, (float)NEG(lv * 0.3), 0); break;
    case TIMM_TRANSLATE_X:
      push(a, STK__OP_PIL_TRANSLATE_X, (float)(NEG(lv * ap->timm_translate_pct) * ap->w), 0);
      break;
    default:
      push(a, STK__OP_PIL_TRANSLATE_Y, (float)(NEG(lv * ap->timm_translate_pct) * ap->h), 0);
      break;
  }
#undef NEG
}

static double gamma_draw(stk__rng *r, double a);

/* AugMix's space in its dict's order (all_ops adds the last four). */
static const uint8_t augmix_ops[13] = {
    STK__OP_SHEAR_X,   STK__OP_SHEAR_Y,  STK__OP_TRANSLATE_X,  STK__OP_TRANSLATE_Y, STK__OP_ROTATE,
    STK__OP_POSTERIZE, STK__OP_SOLARIZE, STK__OP_AUTOCONTRAST, STK__OP_EQUALIZE,    STK__OP_BRIGHTNESS,
    STK__OP_COLOR,     STK__OP_CONTRAST, STK__OP_SHARPNESS};

/* AugMix.forward's draws: m ~ Dirichlet(alpha, alpha) (the original's
 * weight and the chains'), the chains' weights ~ Dirichlet(alpha, ...)
 * times m[1], in float32 as torch multiplies them; then per chain its depth
 * and per op the op, the bin below severity and the sign. */
static void draw_augmix(const stk__aug_plan *ap, stk__rng *r, stk__aug *a) {
  int width = ap->augmix_width;
  double g0 = gamma_draw(r, ap->augmix_alpha), g1 = gamma_draw(r, ap->augmix_alpha);
  float m0 = (float)(g0 / (g0 + g1)), m1 = (float)(g1 / (g0 + g1));
  double g[STK__AUGMIX_MAX_WIDTH], sum = 0;
  for (int i = 0; i < width; i++) sum += g[i] = gamma_draw(r, ap->augmix_alpha);
  a->mix_w[0] = m0;
  for (int i = 0; i < width; i++) a->mix_w[1 + i] = (float)(g[i] / sum) * m1;
  a->mix_at = a->n;
  a->mix_width = width;
  int nops = ap->augmix_all_ops ? 13 : 9;
  for (int i = 0; i < width; i++) {
    int depth = ap->augmix_depth > 0 ? ap->augmix_depth : (int)stk__rng_range(r, 1, 4);
    int before = a->n;
    for (int d = 0; d < depth; d++) {
      int op = augmix_ops[stk__rng_range(r, 0, nops)];
      int bin = has_mag(op) ? (int)stk__rng_range(r, 0, ap->augmix_severity) : -1;
      int neg = is_signed(op) ? (int)stk__rng_range(r, 0, 2) : 0;
      push_policy_op(ap, a, op, bin, neg);
    }
    a->mix_len[i] = (uint8_t)(a->n - before);
  }
}

static void draw_policy(const stk__aug_plan *ap, stk__rng *r, stk__aug *a) {
  switch (ap->policy) {
    case STK__AA_AUGMIX: draw_augmix(ap, r, a); break;
    case STK__AA_TIMM:
      /* RandAugment.__call__: num_layers ops drawn with replacement */
      for (int k = 0; k < ap->ra_num_ops; k++)
        draw_timm_op(ap, r, a, (int)stk__rng_range(r, 0, TIMM_OPS));
      break;
    case STK__AA_TA_WIDE: {
      int op = (int)stk__rng_range(r, 0, STK__TA_OPS);
      int bin = has_mag(op) ? (int)stk__rng_range(r, 0, ap->nbins) : -1;
      int neg = is_signed(op) ? (int)stk__rng_range(r, 0, 2) : 0;
      push_policy_op(ap, a, op, bin, neg);
      break;
    }
    case STK__AA_RA:
      for (int k = 0; k < ap->ra_num_ops; k++) {
        int op = (int)stk__rng_range(r, 0, STK__TA_OPS);
        int neg = is_signed(op) ? (int)stk__rng_range(r, 0, 2) : 0;
        push_policy_op(ap, a, op, ap->ra_magnitude, neg);
      }
      break;
    case STK__AA_IMAGENET: {
      /* get_params: the sub-policy, two probabilities, two sign coins */
      int id = (int)stk__rng_range(r, 0, 25);
      double prob[2] = {stk__rng_uniform(r), stk__rng_uniform(r)};
      int sign[2] = {(int)stk__rng_range(r, 0, 2), (int)stk__rng_range(r, 0, 2)};
      for (int k = 0; k < 2; k++)
        if (prob[k] <= aa_imagenet[id][k].p) /* torchvision: probs[i] <= p */
          push_policy_op(ap, a, aa_imagenet[id][k].op, aa_imagenet[id][k].bin, sign[k] == 0);
      break;
    }
    default: break;
  }
}

static void draw_jitter(const stk__aug_plan *ap, stk__rng *r, stk__aug *a) {
  if (!(ap->jitter[0] > 0 || ap->jitter[1] > 0 || ap->jitter[2] > 0 || ap->jitter[3] > 0)) return;
  if (ap->jitter_prob < 1.0f && !(stk__rng_uniform(r) < ap->jitter_prob)) return;
  /* ColorJitter.get_params: a random order of the four, then each factor */
  int order[4] = {0, 1, 2, 3};
  for (int i = 3; i > 0; i--) {
    int j = (int)stk__rng_range(r, 0, i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  float f[4];
  for (int k = 0; k < 3; k++) {
    double lo = 1.0 - ap->jitter[k];
    f[k] = (float)uniform(r, lo < 0 ? 0 : lo, 1.0 + ap->jitter[k]);
  }
  f[3] = (float)uniform(r, -ap->jitter[3], ap->jitter[3]);
  static const int kinds[4] = {STK__OP_ADJ_BRIGHTNESS, STK__OP_ADJ_CONTRAST,
                               STK__OP_ADJ_SATURATION, STK__OP_ADJ_HUE};
  for (int i = 0; i < 4; i++)
    if (ap->jitter[order[i]] > 0) push(a, kinds[order[i]], f[order[i]], 0);
}

static void draw_erase(const stk__aug_plan *ap, stk__rng *r, stk__aug *a) {
  if (!(stk__rng_uniform(r) < ap->erase_prob)) return;
  /* RandomErasing.get_params: ten tries of an area and a log-uniform
   * aspect ratio; a box that does not fit is tried again. timm's
   * (erase_count > 1): count = randint(1, max_count) boxes, each tried ten
   * times with area / count (a count of 1 draws nothing, as timm's
   * min_count == max_count skips randint) */
  int W = ap->w, H = ap->h, count = 1;
  if (ap->erase_count > 1) count = 1 + (int)stk__rng_range(r, 0, (uint64_t)ap->erase_count);
  double area = (double)W * H / count;
  double lr0 = log(ap->erase_ratio[0]), lr1 = log(ap->erase_ratio[1]);
  for (int b = 0; b < count; b++)
    for (int t = 0; t < 10; t++) {
      double ea = area * uniform(r, ap->erase_scale[0], ap->erase_scale[1]);
      double ar = exp(uniform(r, lr0, lr1));
      int eh = (int)nearbyint(sqrt(ea * ar)), ew = (int)nearbyint(sqrt(ea / ar));
      if (!(eh < H && ew < W)) continue;
      int ey = (int)stk__rng_range(r, 0, H - eh + 1);
      int ex = (int)stk__rng_range(r, 0, W - ew + 1);
      uint64_t key = stk__rng_next(r);
      if (eh > 0 && ew > 0) {
        int k = a->erase++;
        a->ey[k] = ey, a->ex[k] = ex, a->eh[k] = eh, a->ew[k] = ew, a->erase_key[k] = key;
      }
      break;
    }
}

/* aug_interpolation "random" (timm's default): each warp bilinear or
 * bicubic with equal odds, as _interpolation's random.choice, from a
 * stream of its own so that the other draws stay as they are. */
static void draw_warp_filters(stk__rng *r, stk__aug *a) {
  for (int i = 0; i < a->n; i++) {
    int k = a->op[i].kind;
    if ((k >= STK__OP_SHEAR_X && k <= STK__OP_ROTATE) ||
        (k >= STK__OP_PIL_SHEAR_X && k <= STK__OP_PIL_ROTATE))
      a->op[i].warp =
          (uint8_t)(1 + (stk__rng_uniform(r) < 0.5 ? STK__WARP_BILINEAR : STK__WARP_BICUBIC));
  }
}

void stk__aug_draw(const stk__aug_plan *ap, uint64_t seed, uint64_t epoch, int64_t index,
                   stk__aug *a) {
  memset(a, 0, sizeof *a);
  stk__rng r;
  if (ap->vflip_prob > 0) {
    stage_rng(&r, seed, epoch, index, STAGE_VFLIP);
    if (stk__rng_uniform(&r) < ap->vflip_prob) push(a, STK__OP_VFLIP, 0, 0);
  }
  if (ap->policy != STK__AA_NONE) {
    stage_rng(&r, seed, epoch, index, STAGE_POLICY);
    draw_policy(ap, &r, a);
  }
  stage_rng(&r, seed, epoch, index, STAGE_JITTER);
  draw_jitter(ap, &r, a);
  if (ap->gray_prob > 0) {
    stage_rng(&r, seed, epoch, index, STAGE_GRAY);
    if (stk__rng_uniform(&r) < ap->gray_prob) push(a, STK__OP_GRAYSCALE, 0, 0);
  }
  if (ap->blur_ksize > 0 && ap->blur_prob > 0) {
    stage_rng(&r, seed, epoch, index, STAGE_BLUR);
    if (ap->blur_prob >= 1.0f || stk__rng_uniform(&r) < ap->blur_prob)
      push(a, STK__OP_BLUR, (float)uniform(&r, ap->blur_sigma[0], ap->blur_sigma[1]),
           ap->blur_ksize);
  }
  if (ap->erase_prob > 0) {
    stage_rng(&r, seed, epoch, index, STAGE_ERASE);
    draw_erase(ap, &r, a);
  }
  if (ap->filter == STK__WARP_RANDOM) {
    stage_rng(&r, seed, epoch, index, STAGE_WARP_FILTER);
    draw_warp_filters(&r, a);
  }
}

/* ---- the ops ---------------------------------------------------------------- */

static inline uint8_t blend8(stk__blend k, float a, float b) { return stk__blend8(k.r, k.r1, a, b); }
static inline uint8_t gray8(const uint8_t *p) { return stk__gray8(p[0], p[1], p[2]); }

/* Ops whose output byte depends only on the input byte (and its channel)
 * run through a table: the table holds what the per-byte arithmetic gives
 * for each of the 256 values, so the result is the same, at a load a byte
 * instead of the float blend. */
static void map_lut(uint8_t *t, size_t n, const uint8_t lut[256]) {
  for (size_t i = 0; i < n; i++) t[i] = lut[t[i]];
}

static void map_lut3(uint8_t *t, size_t npx, const uint8_t lut[3][256]) {
  for (size_t i = 0; i < npx; i++, t += 3) {
    t[0] = lut[0][t[0]];
    t[1] = lut[1][t[1]];
    t[2] = lut[2][t[2]];
  }
}

static void op_brightness(uint8_t *t, size_t n, double f) {
  stk__blend k = stk__blend_of(f);
  uint8_t lut[256];
  for (int v = 0; v < 256; v++) lut[v] = blend8(k, (float)v, 0.0f);
  map_lut(t, n, lut);
}

static void op_saturation(uint8_t *t, size_t npx, double f) {
  stk__blend k = stk__blend_of(f);
  for (size_t i = 0; i < npx; i++) {
    uint8_t *p = t + i * 3;
    float g = gray8(p);
    for (int c = 0; c < 3; c++) p[c] = blend8(k, p[c], g);
  }
}

static void op_contrast(uint8_t *t, size_t npx, double f) {
  /* the mean of the truncated greyscale image, in float32: every partial
   * sum is an integer below 2**24 for tiles up to 256x256, so any order
   * of summation gives torch's value; a double sum keeps it so above */
  double sum = 0;
  for (size_t i = 0; i < npx; i++) sum += gray8(t + i * 3);
  float mean = (float)((float)sum / (float)npx);
  stk__blend k = stk__blend_of(f);
  uint8_t lut[256];
  for (int v = 0; v < 256; v++) lut[v] = blend8(k, (float)v, mean);
  map_lut(t, npx * 3, lut);
}

static void op_gray(uint8_t *t, size_t npx) {
  for (size_t i = 0; i < npx; i++) {
    uint8_t g = gray8(t + i * 3);
    t[i * 3] = t[i * 3 + 1] = t[i * 3 + 2] = g;
  }
}

static void op_posterize(uint8_t *t, size_t n, double mag) {
  uint8_t mask = stk__posterize_mask(mag);
  for (size_t i = 0; i < n; i++) t[i] &= mask;
}

static void op_solarize(uint8_t *t, size_t n, float thr) {
  /* (a compare and a select the vectoriser takes: faster than a table) */
  for (size_t i = 0; i < n; i++) t[i] = stk__solarize8(t[i], thr);
}

static void op_invert(uint8_t *t, size_t n) {
  for (size_t i = 0; i < n; i++) t[i] = (uint8_t)(255 - t[i]);
}

/* Each channel's smallest and largest value, in one pass. */
static void channel_ranges(const uint8_t *t, size_t npx, int lo[3], int hi[3]) {
  int l0 = 255, l1 = 255, l2 = 255, h0 = 0, h1 = 0, h2 = 0;
  for (size_t i = 0; i < npx; i++, t += 3) {
    l0 = t[0] < l0 ? t[0] : l0, h0 = t[0] > h0 ? t[0] : h0;
    l1 = t[1] < l1 ? t[1] : l1, h1 = t[1] > h1 ? t[1] : h1;
    l2 = t[2] < l2 ? t[2] : l2, h2 = t[2] > h2 ? t[2] : h2;
  }
  lo[0] = l0, lo[1] = l1, lo[2] = l2, hi[0] = h0, hi[1] = h1, hi[2] = h2;
}

static void op_autocontrast(uint8_t *t, size_t npx) {
  int lo[3], hi[3];
  uint8_t lut[3][256];
  channel_ranges(t, npx, lo, hi);
  for (int c = 0; c < 3; c++) {
    float mn, scale = stk__autocontrast_scale(lo[c], hi[c], &mn);
    for (int v = 0; v < 256; v++) lut[c][v] = stk__autocontrast8(v, mn, scale);
  }
  map_lut3(t, npx, lut);
}

static void op_equalize(uint8_t *t, size_t npx) {
  int64_t hist[3][256] = {{0}};
  for (size_t i = 0; i < npx; i++) {
    hist[0][t[i * 3]]++;
    hist[1][t[i * 3 + 1]]++;
    hist[2][t[i * 3 + 2]]++;
  }
  uint8_t lut[3][256];
  int any = 0;
  for (int c = 0; c < 3; c++)
    if (!stk__equalize_lut(hist[c], lut[c])) /* the channel stays */
      for (int v = 0; v < 256; v++) lut[c][v] = (uint8_t)v;
    else
      any = 1;
  if (any) map_lut3(t, npx, lut);
}

/* _blurred_degenerate_image: the 3x3 kernel [1 1 1; 1 5 1; 1 1 1] / 13,
 * rounded; the border keeps the image's own pixels. The sum S of an
 * integer image is exact and S / 13 is never within 1/26 of a tie, so
 * round(S / 13) = (2S + 13) / 26 whatever torch's order of summation. */
static void op_sharpness(uint8_t *t, int w, int h, double f, uint8_t *src) {
  if (w <= 2 || h <= 2) return;
  size_t row = (size_t)w * 3;
  memcpy(src, t, row * h);
  stk__blend k = stk__blend_of(f);
  for (int y = 1; y < h - 1; y++)
    for (int x = 1; x < w - 1; x++)
      for (int c = 0; c < 3; c++) {
        const uint8_t *p = src + (size_t)y * row + (size_t)x * 3 + c;
        int blur = stk__sharp_blur(stk__sharp_sum(p, (int)row));
        t[(size_t)y * row + (size_t)x * 3 + c] = blend8(k, p[0], (float)blur);
      }
}

static void flip_v(uint8_t *t, int w, int h, uint8_t *tmp) {
  size_t row = (size_t)w * 3;
  for (int y = 0; y < h / 2; y++) {
    uint8_t *a = t + (size_t)y * row, *b = t + (size_t)(h - 1 - y) * row;
    memcpy(tmp, a, row);
    memcpy(a, b, row);
    memcpy(b, tmp, row);
  }
}

static void flip_h(uint8_t *t, int w, int h) {
  for (int y = 0; y < h; y++) {
    uint8_t *r = t + (size_t)y * w * 3;
    for (int x = 0; x < w / 2; x++)
      for (int c = 0; c < 3; c++) {
        uint8_t v = r[x * 3 + c];
        r[x * 3 + c] = r[(w - 1 - x) * 3 + c];
        r[(w - 1 - x) * 3 + c] = v;
      }
  }
}

static void op_hue(uint8_t *t, size_t npx, float hue) {
  for (size_t i = 0; i < npx; i++) stk__hue_px(t + i * 3, hue);
}

/* ---- timm's ops with PIL's arithmetic ---- */

static void op_solarize_add(uint8_t *t, size_t n, float add) {
  for (size_t i = 0; i < n; i++) t[i] = stk__solarize_add8(t[i], add);
}

static void op_pil_autocontrast(uint8_t *t, size_t npx) {
  int lo[3], hi[3];
  uint8_t lut[3][256];
  channel_ranges(t, npx, lo, hi);
  for (int c = 0; c < 3; c++)
    for (int v = 0; v < 256; v++) lut[c][v] = stk__pil_autocontrast8(v, lo[c], hi[c]);
  map_lut3(t, npx, lut);
}

/* ImageEnhance.Color: the blend with convert("L").convert("RGB") */
static void op_pil_color(uint8_t *t, size_t npx, float f) {
  for (size_t i = 0; i < npx; i++) {
    uint8_t *p = t + i * 3;
    int l = stk__pil_luma(p[0], p[1], p[2]);
    for (int c = 0; c < 3; c++) p[c] = stk__pil_blend8(l, p[c], f);
  }
}

/* ImageEnhance.Contrast: the blend with the grey image of the luma's mean,
 * int(mean + 0.5) (ImageStat's mean in double) */
static void op_pil_contrast(uint8_t *t, size_t npx, float f) {
  uint64_t sum = 0;
  for (size_t i = 0; i < npx; i++) sum += (uint64_t)stk__pil_luma(t[i * 3], t[i * 3 + 1], t[i * 3 + 2]);
  int mean = (int)((double)sum / (double)npx + 0.5);
  uint8_t lut[256];
  for (int v = 0; v < 256; v++) lut[v] = stk__pil_blend8(mean, v, f);
  map_lut(t, npx * 3, lut);
}

/* ImageEnhance.Sharpness: the blend with ImageFilter.SMOOTH (the kernel
 * [1 1 1; 1 5 1; 1 1 1] / 13, rounded; the border copied), the
 * degenerate image _blurred_degenerate_image also is */
static void op_pil_sharpness(uint8_t *t, int w, int h, float f, uint8_t *src) {
  if (w <= 2 || h <= 2) return;
  size_t row = (size_t)w * 3;
  memcpy(src, t, row * h);
  for (int y = 1; y < h - 1; y++)
    for (int x = 1; x < w - 1; x++)
      for (int c = 0; c < 3; c++) {
        const uint8_t *p = src + (size_t)y * row + (size_t)x * 3 + c;
        int blur = stk__sharp_blur(stk__sharp_sum(p, (int)row));
        t[(size_t)y * row + (size_t)x * 3 + c] = stk__pil_blend8(blur, p[0], f);
      }
}

static void pil_warp(uint8_t *t, int w, int h, int kind, double mag, int filter,
                     const float *fill, uint8_t *src) {
  static const float zeros[3] = {0, 0, 0};
  double m[6];
  stk__pil_affine(kind, mag, w, h, m);
  size_t row = (size_t)w * 3;
  memcpy(src, t, row * h);
  for (int yy = 0; yy < h; yy++)
    for (int xx = 0; xx < w; xx++)
      stk__pil_warp_px(m, src, w, h, xx, yy, filter, fill ? fill : zeros,
                       t + (size_t)yy * row + (size_t)xx * 3);
}

/* ---- Gaussian blur (F_t.gaussian_blur: reflect padding, float32) ---- */

void stk__blur_taps(int ks, float sigma, float *kern) {
  double sum = 0;
  for (int i = 0; i < ks; i++) {
    float x = stk__linspace(-(ks - 1) * 0.5, (ks - 1) * 0.5, ks, i);
    float z = x / sigma;
    kern[i] = expf(-0.5f * (z * z));
    sum += kern[i];
  }
  for (int i = 0; i < ks; i++) kern[i] = kern[i] / (float)sum;
}

/* The two passes of stk__blur_px (augment_px.h) over the whole tile: the
 * same float32 sums in the same order, so the same values, in ks rather
 * than ks * ks operations per pixel. */
static void op_blur(uint8_t *t, int w, int h, int ks, float sigma, float *buf) {
  if (ks < 1 || sigma <= 0) return;
  float kern[256];
  int half = ks / 2;
  stk__blur_taps(ks, sigma, kern);
  /* reflect padding, as torch's "reflect" (the edge pixel is not repeated) */
#define REFL(i, n) ((i) < 0 ? -(i) : (i) >= (n) ? 2 * (n) - 2 - (i) : (i))
  size_t row = (size_t)w * 3;
  float *tmp = buf; /* horizontal pass, float32 */
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        float s = 0.0f;
        for (int k = 0; k < ks; k++) {
          int xx = x + k - half;
          xx = REFL(xx, w);
          if (xx < 0) xx = 0;
          if (xx >= w) xx = w - 1;
          s += kern[k] * (float)t[(size_t)y * row + (size_t)xx * 3 + c];
        }
        tmp[(size_t)y * row + (size_t)x * 3 + c] = s;
      }
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < 3; c++) {
        float s = 0.0f;
        for (int k = 0; k < ks; k++) {
          int yy = y + k - half;
          yy = REFL(yy, h);
          if (yy < 0) yy = 0;
          if (yy >= h) yy = h - 1;
          s += kern[k] * tmp[(size_t)yy * row + (size_t)x * 3 + c];
        }
        t[(size_t)y * row + (size_t)x * 3 + c] = stk__round8(s);
      }
#undef REFL
}

/* ---- affine warps ---------------------------------------------------------------- */

/* The nearest-neighbour warp (the policies' default) row by row. The
 * products of a column's grid coordinate are the same in every row, so they
 * are computed once per column; each sum then adds the same float32 values
 * in the same order as stk__warp_px (which the bilinear warp and the GPU
 * run), so the pixels are the same. A row first becomes source pixel
 * numbers (-1: outside), in a loop without branches, then bytes.
 * The rounding adds and subtracts 1.5 * 2**23, which is rintf's value
 * below 2**22 in magnitude; a coordinate that large is outside the image
 * either way (and an infinite or NaN one fails the comparisons), so the
 * result is stk__warp_px's for every input. `cols` holds 3 * w floats (the
 * last w as int32 pixel numbers: the caller keeps w * h below 2**31; 32-bit
 * numbers keep the loop vectorised, 64-bit ones halved its speed). */
static void warp_nearest(uint8_t *t, int w, int h, const stk__warp *m, const float *fill,
                         const uint8_t *src, float *cols) {
  const size_t row = (size_t)w * 3;
  const float hw = 0.5f * (float)w, hh = 0.5f * (float)h, wf = (float)w, hf = (float)h;
  const float M = 12582912.0f;
  float *ca = cols, *cb = cols + w;
  int32_t *idx = (int32_t *)(cols + 2 * w);
  uint8_t out[3];
  for (int c = 0; c < 3; c++) out[c] = fill ? stk__round8(fill[c]) : 0;
  for (int xx = 0; xx < w; xx++) {
    float x = -(float)w * 0.5f + 0.5f + (float)xx;
    ca[xx] = x * m->a0;
    cb[xx] = x * m->b0;
  }
  for (int yy = 0; yy < h; yy++) {
    const float y = -(float)h * 0.5f + 0.5f + (float)yy;
    const float ya = y * m->a1, yb = y * m->b1, a2 = m->a2, b2 = m->b2;
    for (int xx = 0; xx < w; xx++) {
      float gx = ca[xx] + ya;
      gx = gx + a2;
      float gy = cb[xx] + yb;
      gy = gy + b2;
      float rx = (gx + 1.0f) * hw - 0.5f, ry = (gy + 1.0f) * hh - 0.5f;
      /* (each sum stored to a float first: rounded to float even where
       * the target evaluates in wider precision) */
      const float tx = rx + M, ty = ry + M;
      rx = tx - M;
      ry = ty - M;
      const int in = (rx >= 0.0f) & (rx < wf) & (ry >= 0.0f) & (ry < hf);
      idx[xx] = in ? (int32_t)ry * w + (int32_t)rx : -1;
    }
    uint8_t *o = t + (size_t)yy * row;
    for (int xx = 0; xx < w; xx++, o += 3) {
      const uint8_t *p = idx[xx] >= 0 ? src + (size_t)idx[xx] * 3 : out;
      o[0] = p[0], o[1] = p[1], o[2] = p[2];
    }
  }
}

/* F_t.affine / rotate with expand=False: every output pixel through
 * stk__warp_px (augment_px.h) from a copy of the tile. */
static void warp(uint8_t *t, int w, int h, const stk__warp *m, int nearest, const float *fill,
                 uint8_t *src) {
  size_t row = (size_t)w * 3;
  memcpy(src, t, row * h);
  if (nearest && (size_t)w * h < ((size_t)1 << 31)) {
    /* the scratch holds the source, then the columns' values (see the caller) */
    float *cols = (float *)(src + ((row * h + 15) & ~(size_t)15));
    warp_nearest(t, w, h, m, fill, src, cols);
    return;
  }
  for (int yy = 0; yy < h; yy++)
    for (int xx = 0; xx < w; xx++)
      stk__warp_px(m, src, w, h, xx, yy, nearest, fill, t + (size_t)yy * row + (size_t)xx * 3);
}

/* _apply_op's calls of F.affine and F.rotate for the geometric ops. */
static void geom_matrix(int kind, double mag, int w, int h, double m[6]);

void stk__warp_of(int kind, float mag, int w, int h, stk__warp *g) {
  double md[6];
  geom_matrix(kind, mag, w, h, md);
  /* _gen_affine_grid: theta in float32, divided by [0.5 w, 0.5 h] */
  float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
  g->a0 = (float)md[0] / hw, g->a1 = (float)md[1] / hw, g->a2 = (float)md[2] / hw;
  g->b0 = (float)md[3] / hh, g->b1 = (float)md[4] / hh, g->b2 = (float)md[5] / hh;
}

static void geom_matrix(int kind, double mag, int w, int h, double m[6]) {
  const double r2d = 180.0 / 3.141592653589793;
  double zero[2] = {0, 0}, tr[2] = {0, 0}, sh[2] = {0, 0};
  /* F.affine with center=[0, 0]: relative to the image centre */
  double corner[2] = {0.0 - w * 0.5, 0.0 - h * 0.5};
  switch (kind) {
    case STK__OP_SHEAR_X:
      sh[0] = atan(mag) * r2d; /* math.degrees(math.atan(magnitude)) */
      stk__inverse_affine(corner, 0.0, tr, 1.0, sh, m);
      break;
    case STK__OP_SHEAR_Y:
      sh[1] = atan(mag) * r2d;
      stk__inverse_affine(corner, 0.0, tr, 1.0, sh, m);
      break;
    case STK__OP_TRANSLATE_X:
      tr[0] = (double)(int)mag; /* translate=[int(magnitude), 0] */
      stk__inverse_affine(zero, 0.0, tr, 1.0, sh, m);
      break;
    case STK__OP_TRANSLATE_Y:
      tr[1] = (double)(int)mag;
      stk__inverse_affine(zero, 0.0, tr, 1.0, sh, m);
      break;
    default: /* F.rotate(img, angle): the inverse matrix of -angle */
      stk__inverse_affine(zero, -mag, tr, 1.0, sh, m);
      break;
  }
}

int stk__op_apply(const stk__op *op, uint8_t *t, int w, int h, int filter, const float *fill,
                  stk__buf *scratch) {
  size_t npx = (size_t)w * h, n = npx * 3;
  double mag = op->mag;
  if (op->warp) filter = op->warp - 1;               /* drawn for this warp */
  if (filter == STK__WARP_RANDOM) filter = STK__WARP_BILINEAR; /* (an op given without one) */
  switch (op->kind) {
    case STK__OP_IDENTITY: return STK_OK;
    case STK__OP_SHEAR_X:
    case STK__OP_SHEAR_Y:
    case STK__OP_TRANSLATE_X:
    case STK__OP_TRANSLATE_Y:
    case STK__OP_ROTATE: {
      if (stk__buf_reserve(scratch, ((n + 15) & ~(size_t)15) + 3 * (size_t)w * sizeof(float)))
        return STK_ENOMEM;
      if (filter == STK__WARP_BICUBIC) { /* torchvision's PIL branch: see augment_px.h */
        pil_warp(t, w, h, op->kind, mag, filter, fill, scratch->p);
        return STK_OK;
      }
      stk__warp m;
      stk__warp_of(op->kind, op->mag, w, h, &m);
      warp(t, w, h, &m, filter == STK__WARP_NEAREST, fill, scratch->p);
      return STK_OK;
    }
    case STK__OP_BRIGHTNESS:
    case STK__OP_ADJ_BRIGHTNESS: op_brightness(t, n, stk__op_factor(op->kind, mag)); return STK_OK;
    case STK__OP_COLOR:
    case STK__OP_ADJ_SATURATION: op_saturation(t, npx, stk__op_factor(op->kind, mag)); return STK_OK;
    case STK__OP_CONTRAST:
    case STK__OP_ADJ_CONTRAST: op_contrast(t, npx, stk__op_factor(op->kind, mag)); return STK_OK;
    case STK__OP_SHARPNESS:
    case STK__OP_ADJ_SHARPNESS:
      if (stk__buf_reserve(scratch, n)) return STK_ENOMEM;
      op_sharpness(t, w, h, stk__op_factor(op->kind, mag), scratch->p);
      return STK_OK;
    case STK__OP_POSTERIZE: op_posterize(t, n, mag); return STK_OK;
    case STK__OP_SOLARIZE: op_solarize(t, n, op->mag); return STK_OK;
    case STK__OP_AUTOCONTRAST: op_autocontrast(t, npx); return STK_OK;
    case STK__OP_EQUALIZE: op_equalize(t, npx); return STK_OK;
    case STK__OP_INVERT: op_invert(t, n); return STK_OK;
    case STK__OP_ADJ_HUE: op_hue(t, npx, op->mag); return STK_OK;
    case STK__OP_GRAYSCALE: op_gray(t, npx); return STK_OK;
    case STK__OP_BLUR:
      if (stk__buf_reserve(scratch, n * sizeof(float))) return STK_ENOMEM;
      op_blur(t, w, h, op->ksize, op->mag, scratch->p);
      return STK_OK;
    case STK__OP_VFLIP:
      if (stk__buf_reserve(scratch, (size_t)w * 3)) return STK_ENOMEM;
      flip_v(t, w, h, scratch->p);
      return STK_OK;
    case STK__OP_HFLIP: flip_h(t, w, h); return STK_OK;
    case STK__OP_SOLARIZE_ADD: op_solarize_add(t, n, op->mag); return STK_OK;
    case STK__OP_PIL_AUTOCONTRAST: op_pil_autocontrast(t, npx); return STK_OK;
    case STK__OP_PIL_COLOR: op_pil_color(t, npx, op->mag); return STK_OK;
    case STK__OP_PIL_CONTRAST: op_pil_contrast(t, npx, op->mag); return STK_OK;
    case STK__OP_PIL_SHARPNESS:
      if (stk__buf_reserve(scratch, n)) return STK_ENOMEM;
      op_pil_sharpness(t, w, h, op->mag, scratch->p);
      return STK_OK;
    case STK__OP_PIL_SHEAR_X:
    case STK__OP_PIL_SHEAR_Y:
    case STK__OP_PIL_TRANSLATE_X:
    case STK__OP_PIL_TRANSLATE_Y:
    case STK__OP_PIL_ROTATE:
      if (stk__buf_reserve(scratch, n)) return STK_ENOMEM;
      pil_warp(t, w, h, op->kind, mag, filter, fill, scratch->p);
      return STK_OK;
    default: return STK_EINVAL;
  }
}

/* AugMix's mix of the chains that start at op[a->mix_at]: each chain runs
 * on a copy of the tile, and the tile becomes the float32 sum w0 * tile +
 * w_i * chain_i, truncated to uint8 as .to(torch.uint8) does. The chain
 * and the sum live in `mix` (scratch of the ops is separate). */
static int apply_augmix(const stk__aug_plan *ap, const stk__aug *a, uint8_t *tile, int w, int h,
                        stk__buf *scratch, stk__buf *mix) {
  size_t n = (size_t)w * h * 3;
  if (stk__buf_reserve(mix, n * (sizeof(float) + 1))) return STK_ENOMEM;
  float *acc = (float *)mix->p;
  uint8_t *chain = (uint8_t *)(acc + n);
  for (size_t e = 0; e < n; e++) acc[e] = a->mix_w[0] * (float)tile[e];
  int k = a->mix_at;
  for (int i = 0; i < a->mix_width; i++) {
    memcpy(chain, tile, n);
    for (int d = 0; d < a->mix_len[i]; d++, k++) {
      int rc = stk__op_apply(&a->op[k], chain, w, h, ap->filter, ap->has_fill ? ap->fill : NULL,
                             scratch);
      if (rc) return rc;
    }
    const float wi = a->mix_w[1 + i];
    for (size_t e = 0; e < n; e++) acc[e] = acc[e] + wi * (float)chain[e];
  }
  for (size_t e = 0; e < n; e++) tile[e] = acc[e] >= 255.0f ? 255 : (uint8_t)acc[e];
  return STK_OK;
}

int stk__aug_apply(const stk__aug_plan *ap, const stk__aug *a, uint8_t *tile, int w, int h,
                   stk__buf *scratch, stk__buf *mix) {
  int mix_end = a->mix_at;
  for (int i = 0; i < a->mix_width; i++) mix_end += a->mix_len[i];
  for (int i = 0; i < a->n; i++) {
    if (a->mix_width && i == a->mix_at) {
      int rc = apply_augmix(ap, a, tile, w, h, scratch, mix);
      if (rc) return rc;
      i = mix_end - 1;
      continue;
    }
    int rc = stk__op_apply(&a->op[i], tile, w, h, ap->filter, ap->has_fill ? ap->fill : NULL,
                           scratch);
    if (rc) return rc;
  }
  return STK_OK;
}

/* ---- RandomErasing ---------------------------------------------------------------- */

void stk__aug_erase(const stk__aug_plan *ap, const stk__aug *a, stk_dtype dtype,
                    stk_layout layout, int w, int h, void *dst) {
  size_t es = stk__dtype_size(dtype), plane = (size_t)w * h;
  /* value "random": one normal draw per element, numbered channel by
   * channel as torch.empty([c, h, w]).normal_() fills it; per channel
   * (timm's "rand"): normal number c of the box */
  for (int b = 0; b < a->erase; b++)
    for (int c = 0; c < 3; c++)
      for (int y = a->ey[b]; y < a->ey[b] + a->eh[b]; y++)
        for (int x = a->ex[b]; x < a->ex[b] + a->ew[b]; x++) {
          uint64_t e = ((uint64_t)c * a->eh[b] + (uint64_t)(y - a->ey[b])) * a->ew[b] +
                       (uint64_t)(x - a->ex[b]);
          float v = stk__erase_value(ap->erase_random, ap->erase_per_channel, ap->erase_value,
                                     a->erase_key[b], c, e);
          size_t at = layout == STK_LAYOUT_NCHW ? c * plane + (size_t)y * w + x
                                                : ((size_t)y * w + x) * 3 + c;
          stk__store_value(dtype, v, (uint8_t *)dst + at * es);
        }
}

/* ---- MixUp and CutMix ------------------------------------------------------------- */

/* Gamma(a, 1) by Marsaglia and Tsang; a < 1 through Gamma(a + 1) * U^(1/a). */
static double gamma_draw(stk__rng *r, double a) {
  if (a < 1.0) {
    double u = stk__rng_uniform(r);
    return gamma_draw(r, a + 1.0) * pow(1.0 - u, 1.0 / a);
  }
  double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
  for (;;) {
    double x = stk__rng_normal(r), v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = 1.0 - stk__rng_uniform(r); /* (0, 1] */
    if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
  }
}

static double beta_draw(stk__rng *r, double a) {
  double x = gamma_draw(r, a), y = gamma_draw(r, a);
  return x + y > 0 ? x / (x + y) : 0.5;
}

void stk__mix_draw(double mixup_alpha, double cutmix_alpha, uint64_t seed, uint64_t epoch,
                   int64_t batch, int w, int h, stk__mix *m) {
  memset(m, 0, sizeof *m);
  if (!(mixup_alpha > 0) && !(cutmix_alpha > 0)) return;
  stk__rng r;
  /* a stream of its own: the batch's, not a sample's */
  stk__rng_init(&r, seed, epoch, (uint64_t)batch);
  r.key = stk__mix64(r.key ^ 0x6d697875702d6375ULL);
  int cut = mixup_alpha > 0 && cutmix_alpha > 0 ? (int)stk__rng_range(&r, 0, 2) : cutmix_alpha > 0;
  double lam = beta_draw(&r, cut ? cutmix_alpha : mixup_alpha);
  if (!cut) {
    m->mode = 1;
    m->lam = lam;
    return;
  }
  /* CutMix._get_params: a centre anywhere, half sides int(r * W), int(r * H)
   * with r = sqrt(1 - lambda) / 2, clipped to the image; lambda adjusted
   * to the area actually pasted */
  int rx = (int)stk__rng_range(&r, 0, w), ry = (int)stk__rng_range(&r, 0, h);
  double rr = 0.5 * sqrt(1.0 - lam);
  int hw = (int)(rr * w), hh = (int)(rr * h);
  m->mode = 2;
  m->x1 = rx - hw < 0 ? 0 : rx - hw;
  m->y1 = ry - hh < 0 ? 0 : ry - hh;
  m->x2 = rx + hw > w ? w : rx + hw;
  m->y2 = ry + hh > h ? h : ry + hh;
  m->lam = 1.0 - (double)(m->x2 - m->x1) * (m->y2 - m->y1) / ((double)w * h);
}

void stk__mix_draw_timm(const stk__mix_timm *t, uint64_t seed, uint64_t epoch, int64_t batch,
                        int w, int h, stk__mix *m) {
  memset(m, 0, sizeof *m);
  m->pair_flip = 1;
  m->lam = 1.0;
  int mix = t->mixup_alpha > 0, cut = t->cutmix_alpha > 0;
  if (!mix && !cut) return;
  stk__rng r;
  stk__rng_init(&r, seed, epoch, (uint64_t)batch);
  r.key = stk__mix64(r.key ^ 0x74696d6d2d6d6978ULL); /* not torchvision's draws */
  if (!(stk__rng_uniform(&r) < t->prob)) return;
  if (mix && cut) cut = stk__rng_uniform(&r) < t->switch_prob;
  double lam = beta_draw(&r, cut ? t->cutmix_alpha : t->mixup_alpha);
  if (!cut) {
    m->mode = 1;
    m->lam = lam;
    return;
  }
  /* rand_bbox: the sides from sqrt(1 - lambda) whole, the corners half a
   * side (floored) either way of the centre, then clipped */
  double ratio = sqrt(1.0 - lam);
  int ch = (int)(h * ratio), cw = (int)(w * ratio);
  int cy = (int)stk__rng_range(&r, 0, h), cx = (int)stk__rng_range(&r, 0, w);
  m->mode = 2;
  m->y1 = cy - ch / 2 < 0 ? 0 : cy - ch / 2;
  m->y2 = cy + ch / 2 > h ? h : cy + ch / 2;
  m->x1 = cx - cw / 2 < 0 ? 0 : cx - cw / 2;
  m->x2 = cx + cw / 2 > w ? w : cx + cw / 2;
  m->lam = t->correct_lam ? 1.0 - (double)(m->x2 - m->x1) * (m->y2 - m->y1) / ((double)w * h) : lam;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
  if (exp == 0) {
    if (!mant) {
      x = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while (!(mant & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static float load_value(stk_dtype dtype, const uint8_t *p) {
  switch (dtype) {
    case STK_DTYPE_FLOAT32: {
      float f;
      memcpy(&f, p, 4);
      return f;
    }
    case STK_DTYPE_FLOAT16: {
      uint16_t b;
      memcpy(&b, p, 2);
      return half_to_float(b);
    }
    case STK_DTYPE_BFLOAT16: {
      uint16_t b;
      memcpy(&b, p, 2);
      uint32_t x = (uint32_t)b << 16;
      float f;
      memcpy(&f, &x, 4);
      return f;
    }
    default: return (float)*p;
  }
}

/* The CutMix box's bytes of image `from` into image `to` (rows of the box,
 * per channel plane in NCHW). */
static void copy_box(const stk__mix *m, const uint8_t *from, uint8_t *to, size_t es,
                     stk_layout layout, int w, int h) {
  size_t plane = (size_t)w * h;
  for (int y = m->y1; y < m->y2; y++) {
    if (layout == STK_LAYOUT_NHWC) {
      size_t at = ((size_t)y * w + m->x1) * 3 * es;
      memcpy(to + at, from + at, (size_t)(m->x2 - m->x1) * 3 * es);
    } else {
      for (int c = 0; c < 3; c++) {
        size_t at = (c * plane + (size_t)y * w + m->x1) * es;
        memcpy(to + at, from + at, (size_t)(m->x2 - m->x1) * es);
      }
    }
  }
}

/* timm's flip(0) pairing: images i and n - 1 - i mix with each other, so
 * each pair is done together, the first image's old values kept in spare. */
static void mix_pairs(const stk__mix *m, uint8_t *base, int64_t n, stk_dtype dtype,
                      stk_layout layout, int w, int h, uint8_t *spare) {
  size_t es = stk__dtype_size(dtype), elems = (size_t)w * h * 3, bytes = elems * es;
  float a = (float)m->lam, b = (float)(1.0 - m->lam);
  for (int64_t i = 0; i <= (n - 1) / 2; i++) {
    uint8_t *x = base + (size_t)i * bytes, *y = base + (size_t)(n - 1 - i) * bytes;
    memcpy(spare, x, bytes);
    if (m->mode == 2) {
      if (x == y) continue; /* an odd batch's middle image pairs with itself */
      copy_box(m, y, x, es, layout, w, h);
      copy_box(m, spare, y, es, layout, w, h);
      continue;
    }
    /* x.flip(0).mul_(1 - lam) added to x.mul(lam), in float32 */
    for (size_t e = 0; e < elems; e++) {
      float xv = load_value(dtype, spare + e * es), yv = load_value(dtype, y + e * es);
      float v = yv * b;
      stk__store_value(dtype, v + xv * a, x + e * es);
      v = xv * b;
      stk__store_value(dtype, v + yv * a, y + e * es);
    }
  }
}

int stk__mix_apply(const stk__mix *m, void *data, int64_t n, stk_dtype dtype, stk_layout layout,
                   int w, int h, stk__buf *spare) {
  if (!m->mode || n <= 0) return STK_OK;
  size_t es = stk__dtype_size(dtype), elems = (size_t)w * h * 3, bytes = elems * es;
  if (m->pair_flip) {
    if (stk__buf_reserve(spare, bytes)) return STK_ENOMEM;
    mix_pairs(m, data, n, dtype, layout, w, h, spare->p);
    return STK_OK;
  }
  if (stk__buf_reserve(spare, bytes)) return STK_ENOMEM;
  uint8_t *base = data;
  /* image 0 mixes with the last one as it was: keep a copy, then go from the
   * last image down, so that image i - 1 is still unmixed when i reads it */
  memcpy(spare->p, base + (size_t)(n - 1) * bytes, bytes);
  if (m->mode == 1) {
    /* roll(1).mul_(1 - lam).add_(x.mul(lam)), in float32 */
    float a = (float)m->lam, b = (float)(1.0 - m->lam);
    for (int64_t i = n - 1; i >= 0; i--) {
      uint8_t *cur = base + (size_t)i * bytes;
      const uint8_t *prev = i ? cur - bytes : spare->p;
      if (dtype == STK_DTYPE_FLOAT32) {
        /* the common case as a plain loop the compiler vectorises */
        float *c = (float *)cur;
        const float *q = (const float *)prev;
        for (size_t e = 0; e < elems; e++) {
          float v = q[e] * b;
          c[e] = v + c[e] * a;
        }
        continue;
      }
      for (size_t e = 0; e < elems; e++) {
        float v = load_value(dtype, prev + e * es) * b;
        v = v + load_value(dtype, cur + e * es) * a;
        stk__store_value(dtype, v, cur + e * es);
      }
    }
    return STK_OK;
  }
  for (int64_t i = n - 1; i >= 0; i--) {
    uint8_t *cur = base + (size_t)i * bytes;
    copy_box(m, i ? cur - bytes : spare->p, cur, es, layout, w, h);
  }
  return STK_OK;
}
