/*
 * augment.h: the uint8 image operations of the modern training recipes
 * (TrivialAugmentWide, RandAugment, AutoAugment, ColorJitter,
 * RandomGrayscale, GaussianBlur, vertical flip) and RandomErasing, with
 * torchvision's semantics.
 *
 * How they run: the RandomResizedCrop output is first rounded to an 8-bit
 * RGB tile (as torchvision's PIL path holds it), the ops run on that tile in
 * a fixed order (vertical flip, the policy, colour jitter, greyscale, blur),
 * the tile is normalised into the batch, and RandomErasing runs last, on the
 * normalised image, as it does in a torchvision recipe.
 *
 * Every random choice is drawn when the sample is planned (stk__aug_draw),
 * from streams keyed by (seed, epoch, sample index, stage), so the output
 * does not depend on the thread count, and enabling one stage does not
 * change another's draws. What was drawn is a plain stk__aug value, which
 * stk__aug_apply replays: tests build one by hand to compare an op at fixed
 * parameters with torchvision's.
 *
 * The arithmetic of each op follows torchvision's tensor kernels for uint8
 * images (float32 blends that truncate, a floored greyscale mean, the
 * sharpness kernel that leaves the border, PIL's equalize LUT, affine warps
 * sampled as grid_sample(align_corners=False) does); augment.c says where.
 */
#ifndef STK_AUGMENT_H
#define STK_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "core/common.h"
#include "ops/augment_px.h"
#include "stoker.h"

/* The ops: stk__op_kind, in augment_px.h (the kernels use it too). */

/* The policy spaces: TrivialAugmentWide's 14 ops, RandAugment's 14 ops (the
 * same names), AutoAugment's 14 (plus Invert); timm's RandAugment draws from
 * its own 15 (augment.c), run with PIL's arithmetic (the STK__OP_PIL_ ops). */
#define STK__TA_OPS 14

/* One op to apply. `mag` is the magnitude as torchvision's _apply_op gets
 * it (already signed: a shear of -0.3, a rotation of 12.5 degrees, a
 * posterize of 5 bits, a solarize threshold), or the factor of the ADJ_ ops. */
typedef struct {
  uint8_t kind;
  uint8_t ksize; /* BLUR: kernel side (odd) */
  float mag;
  /* warps: 0 the plan's filter, else STK__WARP_ value + 1 (drawn; last, so
   * that {kind, ksize, mag} initialisers stay valid) */
  uint8_t warp;
} stk__op;

#define STK__AUG_MAX_OPS 24 /* RandAugment's 16 ops, a flip, 4 jitters, greyscale, blur */
#define STK__AUGMIX_MAX_WIDTH 4 /* AugMix: chains of at most 4 ops (16 ops) */
#define STK__MAX_BINS 256 /* the options table's bound of magnitude_bins */
#define STK__ERASE_MAX 4  /* the options table's bound of erase_count */

/* What was drawn for one sample. */
typedef struct {
  int n;
  stk__op op[STK__AUG_MAX_OPS];
  /* RandomErasing, on the normalised image: `erase` boxes (0 when not
   * drawn, or when their ten tries failed), box i rows [ey, ey+eh), columns
   * [ex, ex+ew), applied in order */
  int erase, ex[STK__ERASE_MAX], ey[STK__ERASE_MAX], ew[STK__ERASE_MAX], eh[STK__ERASE_MAX];
  uint64_t erase_key[STK__ERASE_MAX]; /* the stream of each box's normal values */
  /* AugMix: op[mix_at ..) holds mix_width chains of mix_len[i] ops; the
   * tile becomes trunc(mix_w[0] * tile + sum mix_w[1 + i] * chain_i). 0
   * chains: no AugMix. */
  int mix_at, mix_width;
  uint8_t mix_len[STK__AUGMIX_MAX_WIDTH];
  float mix_w[STK__AUGMIX_MAX_WIDTH + 1];
} stk__aug;

typedef enum {
  STK__AA_NONE,
  STK__AA_TA_WIDE,
  STK__AA_RA,
  STK__AA_IMAGENET,
  STK__AA_TIMM, /* timm's rand_augment_transform ("rand-m9-mstd0.5-inc1") */
  STK__AA_AUGMIX /* torchvision's AugMix (CPU only) */
} stk__aa_policy;

/* Everything fixed at build time: options and magnitude tables. */
typedef struct {
  int on;          /* any stage at all */
  int policy;      /* stk__aa_policy */
  int ra_num_ops, ra_magnitude, bins;
  int filter;      /* warps: STK__WARP_NEAREST (torchvision's default), _BILINEAR, _BICUBIC,
                     _RANDOM (each warp's own, drawn: stk__op.warp) */
  int has_fill;    /* fill given: the mask blend of torchvision; else zeros */
  float fill[3];
  float vflip_prob;
  float jitter[4]; /* ColorJitter brightness, contrast, saturation, hue (0 = off) */
  float jitter_prob;
  float gray_prob;
  int blur_ksize;  /* 0 = off */
  float blur_sigma[2];
  float blur_prob;
  float erase_prob, erase_scale[2], erase_ratio[2], erase_value[3];
  int erase_random, erase_per_channel, erase_count;
  /* timm's RandAugment (ra_num_ops is its n): m, mstd, mmax (0 = 10), inc,
   * p, hparams' translate_pct */
  float timm_magnitude, timm_mstd, timm_prob, timm_translate_pct;
  int timm_mmax, timm_increasing;
  /* AugMix: severity (bins 0..severity-1 of its 10), chains, depth (<= 0:
   * 1..3 at random), alpha, all_ops */
  int augmix_severity, augmix_width, augmix_depth, augmix_all_ops;
  float augmix_alpha;
  int w, h;        /* the tile */
  /* magnitude tables per op of the policy's space: mags[op][bin] */
  int nbins;       /* bins of the tables (policy bins, or 10 for AutoAugment) */
  float mags[(STK__OP_INVERT + 1) * STK__MAX_BINS]; /* [op * nbins + bin] */
} stk__aug_plan;

/* Fills the plan from (validated) options for w x h tiles. */
void stk__aug_plan_init(stk__aug_plan *ap, const stk_options *o, int w, int h);

/* torch.linspace's values as float32 (the exactly rounded ones: torch's own
 * may differ in the last bit between versions). */
float stk__linspace(double a, double b, int n, int i);

/* Every random choice of sample `index` of `epoch`. */
void stk__aug_draw(const stk__aug_plan *ap, uint64_t seed, uint64_t epoch, int64_t index,
                   stk__aug *out);

/* Applies a->op[0..n) to an RGB8 tile (w x h, rows w*3 bytes apart) in
 * place; scratch grows to what the warps and filters need, mix to what
 * AugMix's chains and float sum need (5 bytes per tile byte; kept by the
 * caller across samples, like scratch). STK_OK or STK_ENOMEM. The
 * interpolation and fill come from ap. */
int stk__aug_apply(const stk__aug_plan *ap, const stk__aug *a, uint8_t *tile, int w, int h,
                   stk__buf *scratch, stk__buf *mix);

/* The float32 grid coefficients of a geometric op (ShearX/Y, TranslateX/Y,
 * Rotate) at magnitude mag on a w x h tile, as torchvision computes them. */
void stk__warp_of(int kind, float mag, int w, int h, stk__warp *g);

/* GaussianBlur's 1-D kernel of ks taps for sigma, as torchvision computes it
 * (float32). */
void stk__blur_taps(int ks, float sigma, float *kern);

/* One op on a tile, with an explicit warp filter (STK__WARP_) and fill
 * (fill NULL: zeros). */
int stk__op_apply(const stk__op *op, uint8_t *tile, int w, int h, int filter,
                  const float *fill, stk__buf *scratch);

/* The op's name as torchvision spells it ("ShearX", "Equalize", ...), or
 * NULL; and the reverse (-1 when unknown). */
const char *stk__op_name(int kind);
int stk__op_by_name(const char *name);

/* RandomErasing on a normalised image in the batch (dtype and layout as the
 * store says: w x h, 3 channels). */
void stk__aug_erase(const stk__aug_plan *ap, const stk__aug *a, stk_dtype dtype,
                    stk_layout layout, int w, int h, void *dst);

/* ---- MixUp and CutMix (torchvision v2's semantics) ----
 * One draw per batch, keyed by (seed, epoch, batch index): which of the two
 * (equal odds when both are on), lambda ~ Beta(alpha, alpha), and for
 * CutMix the box and the lambda it leaves. Image i of the batch is mixed
 * with image i - 1 (image 0 with the last: roll(1)). */
typedef struct {
  int mode;          /* 0 none, 1 MixUp, 2 CutMix */
  double lam;        /* the label weight of image i itself (CutMix: adjusted) */
  int x1, y1, x2, y2; /* CutMix: columns [x1, x2), rows [y1, y2) come from the partner */
  int pair_flip;     /* the partner of image i: 0 image i - 1 (roll(1)), 1 image n - 1 - i (flip(0)) */
} stk__mix;

void stk__mix_draw(double mixup_alpha, double cutmix_alpha, uint64_t seed, uint64_t epoch,
                   int64_t batch, int w, int h, stk__mix *out);

/* timm's Mixup in its "batch" mode: with probability `prob` the batch is
 * mixed, by CutMix with probability switch_prob when both alphas are on
 * (else the one that is); lambda ~ Beta(alpha, alpha); CutMix's box is
 * timm's rand_bbox (sides int(H * sqrt(1 - lambda)) and int(W * ...), a
 * centre anywhere, corners centre -/+ side // 2, clipped), lambda corrected
 * to the box's area when correct_lam; image i pairs with image n - 1 - i.
 * mode 0 (lambda 1) when the batch is not mixed. */
typedef struct {
  double mixup_alpha, cutmix_alpha, prob, switch_prob;
  int correct_lam;
} stk__mix_timm;

void stk__mix_draw_timm(const stk__mix_timm *t, uint64_t seed, uint64_t epoch, int64_t batch,
                        int w, int h, stk__mix *out);

/* Mixes n images (3 x h x w each, dtype and layout as given) in place.
 * `spare` is scratch of one image. */
int stk__mix_apply(const stk__mix *m, void *data, int64_t n, stk_dtype dtype, stk_layout layout,
                   int w, int h, stk__buf *spare);

/* A standard normal draw (Box-Muller, one value per call). */
double stk__rng_normal(stk__rng *r);

#endif
