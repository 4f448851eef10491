/* MixUp and CutMix in the loader (the options' mix_ fields): every batch
 * that stk_loader_next() hands out is the unmixed batch mixed with itself
 * (torchvision's roll(1) pairing or timm's flip(0)), with soft labels that
 * follow from the draw; seeks repeat it; bad combinations are refused. */
#include "util.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/common.h"
#include "ops/augment.h"

#define CLASSES 4
#define PER_CLASS 5 /* 20 samples: batches of 6, 6, 6, 2 */
#define SIZE 16
#define B 6
#define ELEMS (3 * SIZE * SIZE)

static char *g_root;

static void base_opts(stk_options *o) {
  stk_options_init(o);
  o->root = g_root;
  o->size = SIZE;
  o->batch_size = B;
  o->threads = 2;
  o->seed = 5;
}

/* One epoch's batches: images (float32 NCHW), labels, and soft labels when
 * the loader mixes; kinds and lambdas of the draws. Returns the batches. */
typedef struct {
  float img[4][B * ELEMS];
  int64_t lab[4][B];
  float soft[4][B * 8];
  int n[4], kind[4], classes[4];
  double lam[4];
} epoch_out;

static int read_epoch(stk_loader *l, uint64_t epoch, epoch_out *e) {
  memset(e, 0, sizeof *e);
  CHECK_EQ_INT(stk_loader_set_epoch(l, epoch), STK_OK);
  int nb = 0;
  stk_batch b;
  while (stk_loader_next(l, &b) == STK_OK) {
    CHECK(nb < 4 && b.batch_index == nb);
    if (nb >= 4) break;
    e->n[nb] = (int)b.n;
    memcpy(e->img[nb], b.data, b.nbytes);
    memcpy(e->lab[nb], b.labels, (size_t)b.n * sizeof(int64_t));
    if (b.mix_labels) {
      CHECK(b.mix_classes >= 1 && b.mix_classes <= 8);
      memcpy(e->soft[nb], b.mix_labels, (size_t)b.n * (size_t)b.mix_classes * sizeof(float));
    }
    e->classes[nb] = b.mix_classes;
    e->kind[nb] = b.mix_kind;
    e->lam[nb] = b.mix_lambda;
    CHECK_EQ_INT(stk_batch_release(l, &b), STK_OK);
    nb++;
  }
  return nb;
}

/* The value torch's roll(1).mul_(1 - lam).add_(x.mul(lam)) gives, in float. */
static float mixup_value(float own, float partner, double lam) {
  float a = (float)lam, b = (float)(1.0 - lam);
  float v = partner * b;
  return v + own * a;
}

/* Checks batch k of `mixed` against batch k of `plain` and the loader's
 * draw: MixUp blends every element with the partner's, CutMix takes a box
 * of the partner's pixels whose area matches lambda; the soft labels are
 * lambda * own one-hot + (1 - lambda) * the partner's. */
static void check_batch(const epoch_out *plain, const epoch_out *mixed, int k, int timm,
                        double smoothing, int classes) {
  int n = mixed->n[k];
  CHECK_EQ_INT(n, plain->n[k]);
  CHECK_EQ_INT(mixed->classes[k], classes);
  double lam = mixed->lam[k];
  CHECK(lam >= 0 && lam <= 1);
  int in_box = 0, from_partner_only = 0;
  for (int i = 0; i < n; i++) {
    int p = timm ? n - 1 - i : (i + n - 1) % n; /* the partner */
    CHECK_EQ_INT(mixed->lab[k][i], plain->lab[k][i]);
    const float *own = plain->img[k] + (size_t)i * ELEMS, *par = plain->img[k] + (size_t)p * ELEMS;
    const float *got = mixed->img[k] + (size_t)i * ELEMS;
    int bad = 0;
    for (int e = 0; e < ELEMS; e++) {
      if (mixed->kind[k] == 1) {
        bad += got[e] != mixup_value(own[e], par[e], lam);
      } else if (mixed->kind[k] == 2) {
        if (got[e] != own[e]) {
          bad += got[e] != par[e];
          in_box++;
        }
        from_partner_only += own[e] != par[e] && got[e] == par[e];
      } else {
        bad += got[e] != own[e];
      }
    }
    CHECK_MSG(bad == 0, "batch %d image %d (kind %d): %d elements wrong", k, i, mixed->kind[k], bad);
    /* the soft labels */
    float off = (float)(smoothing / classes), on = (float)(1.0 - smoothing + smoothing / classes);
    double sum = 0;
    for (int c = 0; c < classes; c++) {
      float yo = plain->lab[k][i] == c ? on : off, yp = plain->lab[k][p] == c ? on : off;
      float want = mixup_value(yo, yp, lam);
      CHECK_MSG(mixed->soft[k][i * classes + c] == want, "batch %d row %d column %d: %g != %g", k,
                i, c, (double)mixed->soft[k][i * classes + c], (double)want);
      sum += mixed->soft[k][i * classes + c];
    }
    CHECK(fabs(sum - 1.0) < 1e-5);
  }
  if (mixed->kind[k] == 2) {
    /* CutMix's lambda is what the box leaves: its area is (1 - lam) of an
     * image, the same box in every image (elements equal to the partner's
     * anyway count for the box too, so compare from below and above) */
    double area = (1.0 - lam) * ELEMS * n;
    CHECK(in_box <= area + 0.5 && from_partner_only <= area + 0.5);
    /* a box of no area (lambda drawn near 1) leaves lambda 1 */
    CHECK(lam == 1.0 || in_box > 0);
  }
}

static void test_torchvision_mode(void) {
  stk_options o;
  base_opts(&o);
  char err[512] = "";
  stk_loader *lp = NULL, *lm = NULL;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lp, err, sizeof err), STK_OK);
  o.mix_mixup_alpha = 0.2;
  o.mix_cutmix_alpha = 1.0;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lm, err, sizeof err), STK_OK);
  static epoch_out plain, mixed;
  int kinds[3] = {0, 0, 0};
  for (uint64_t ep = 0; ep < 4; ep++) {
    CHECK_EQ_INT(read_epoch(lp, ep, &plain), 4);
    CHECK_EQ_INT(read_epoch(lm, ep, &mixed), 4);
    for (int k = 0; k < 4; k++) {
      CHECK(plain.classes[k] == 0 && plain.kind[k] == 0); /* mix off: no soft labels */
      CHECK(mixed.kind[k] == 1 || mixed.kind[k] == 2);
      kinds[mixed.kind[k]]++;
      check_batch(&plain, &mixed, k, 0, 0.0, CLASSES);
    }
  }
  CHECK(kinds[1] > 0 && kinds[2] > 0); /* both drawn in 16 batches */
  /* a seek repeats the mixing of the batches it lands on */
  CHECK_EQ_INT(read_epoch(lm, 2, &mixed), 4);
  CHECK_EQ_INT(stk_loader_seek(lm, 2, 2), STK_OK);
  stk_batch b;
  CHECK_EQ_INT(stk_loader_next(lm, &b), STK_OK);
  CHECK(b.batch_index == 2 && b.mix_kind == mixed.kind[2] && b.mix_lambda == mixed.lam[2]);
  CHECK(!memcmp(b.data, mixed.img[2], b.nbytes));
  CHECK(!memcmp(b.mix_labels, mixed.soft[2], (size_t)b.n * CLASSES * sizeof(float)));
  CHECK_EQ_INT(stk_batch_release(lm, &b), STK_OK);
  stk_loader_destroy(lp);
  stk_loader_destroy(lm);
}

static void test_timm_mode(void) {
  stk_options o;
  base_opts(&o);
  o.dtype = STK_DTYPE_FLOAT32;
  char err[512] = "";
  stk_loader *lp = NULL, *lm = NULL, *l0 = NULL;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lp, err, sizeof err), STK_OK);
  o.mix_mode = STK_MIX_TIMM;
  o.mix_mixup_alpha = 0.8;
  o.mix_cutmix_alpha = 1.0;
  o.mix_prob = 0.7;
  o.mix_switch_prob = 0.4;
  o.mix_label_smoothing = 0.1;
  o.mix_classes = 7; /* more columns than the folder's classes: allowed */
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lm, err, sizeof err), STK_OK);
  o.mix_prob = 0; /* never mixed: the images as they were, smoothed one-hot labels */
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l0, err, sizeof err), STK_OK);
  static epoch_out plain, mixed;
  int kinds[3] = {0, 0, 0};
  for (uint64_t ep = 0; ep < 4; ep++) {
    CHECK_EQ_INT(read_epoch(lp, ep, &plain), 4);
    CHECK_EQ_INT(read_epoch(lm, ep, &mixed), 4);
    for (int k = 0; k < 4; k++) {
      kinds[mixed.kind[k]]++;
      if (mixed.kind[k] == 0) CHECK(mixed.lam[k] == 1.0);
      check_batch(&plain, &mixed, k, 1, 0.1, 7);
    }
    CHECK_EQ_INT(read_epoch(l0, ep, &mixed), 4);
    for (int k = 0; k < 4; k++) {
      CHECK_EQ_INT(mixed.kind[k], 0);
      check_batch(&plain, &mixed, k, 1, 0.1, 7);
    }
  }
  CHECK(kinds[1] > 0 && kinds[2] > 0 && kinds[0] > 0);
  stk_loader_destroy(lp);
  stk_loader_destroy(lm);
  stk_loader_destroy(l0);
}

/* uint8 NHWC: CutMix copies whole pixels, MixUp rounds as the CPU path. */
static void test_uint8_nhwc_matches_the_draw(void) {
  stk_options o;
  base_opts(&o);
  o.dtype = STK_DTYPE_UINT8;
  o.layout = STK_LAYOUT_NHWC;
  char err[512] = "";
  stk_loader *lp = NULL, *lm = NULL;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lp, err, sizeof err), STK_OK);
  o.mix_cutmix_alpha = 1.0;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lm, err, sizeof err), STK_OK);
  for (int k = 0; k < 4; k++) {
    stk_batch a, b;
    CHECK_EQ_INT(stk_loader_next(lp, &a), STK_OK);
    CHECK_EQ_INT(stk_loader_next(lm, &b), STK_OK);
    CHECK_EQ_INT(b.mix_kind, 2);
    /* the box of the draw, from image i - 1, the rest image i's own */
    stk__mix m;
    stk__mix_draw(0.0, 1.0, o.seed, b.epoch, b.batch_index, SIZE, SIZE, &m);
    CHECK(m.mode == 2 && m.lam == b.mix_lambda);
    const uint8_t *pa = a.data, *pb = b.data;
    int bad = 0;
    for (int64_t i = 0; i < b.n; i++) {
      int64_t p = (i + b.n - 1) % b.n;
      for (int y = 0; y < SIZE; y++)
        for (int x = 0; x < SIZE; x++) {
          int in = x >= m.x1 && x < m.x2 && y >= m.y1 && y < m.y2;
          size_t at = ((size_t)y * SIZE + x) * 3;
          bad += memcmp(pb + (size_t)i * ELEMS + at, pa + (size_t)(in ? p : i) * ELEMS + at, 3) != 0;
        }
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(stk_batch_release(lp, &a), STK_OK);
    CHECK_EQ_INT(stk_batch_release(lm, &b), STK_OK);
  }
  stk_loader_destroy(lp);
  stk_loader_destroy(lm);
}

static void test_refused(void) {
  stk_options o;
  base_opts(&o);
  char err[512] = "";
  stk_loader *l = NULL;
  o.mix_mixup_alpha = 1.0;
  o.pipeline = STK_PIPELINE_EVAL;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK_MSG(strstr(err, "train pipeline") != NULL, "%s", err);
  o.pipeline = STK_PIPELINE_TRAIN;
  o.mix_classes = CLASSES - 1; /* label 3 would have no column */
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK_MSG(strstr(err, "num_classes=3") && strstr(err, "4 classes"), "%s", err);
  o.mix_classes = 0;
  o.mix_mixup_alpha = INFINITY;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  o.mix_mixup_alpha = -1;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  o.mix_mixup_alpha = 1;
  o.mix_prob = 1.5;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_EINVAL);
  CHECK(l == NULL);
}

/* The flags set the fields as typed: a double keeps 0.2 (a float would
 * not, and the draws would differ from those of the value given). */
static void test_flags(void) {
  stk_options o;
  stk_options_init(&o);
  char err[256] = "";
  CHECK(o.mix_mixup_alpha == 0 && o.mix_cutmix_alpha == 0 && o.mix_prob == 1 &&
        o.mix_switch_prob == 0.5 && o.mix_correct_lam == 1 && o.mix_mode == STK_MIX_TORCHVISION);
  CHECK_EQ_INT(stk_options_parse_flag(&o, "--mixup-alpha", "0.2", err, sizeof err), STK_OK);
  CHECK(o.mix_mixup_alpha == 0.2);
  CHECK_EQ_INT(stk_options_parse_flag(&o, "--mix-mode", "timm", err, sizeof err), STK_OK);
  CHECK_EQ_INT(o.mix_mode, STK_MIX_TIMM);
  CHECK_EQ_INT(stk_options_parse_flag(&o, "--mix-label-smoothing", "0.1", err, sizeof err), STK_OK);
  CHECK(o.mix_label_smoothing == 0.1);
  CHECK_EQ_INT(stk_options_parse_flag(&o, "--mix-switch-prob", "2", err, sizeof err), STK_EINVAL);
  int i = stk_option_find_flag(STK_OPTIONS_LOADER, "--cutmix-alpha");
  stk_option_desc d;
  CHECK(i >= 0 && stk_option_info(STK_OPTIONS_LOADER, i, &d) == STK_OK);
  CHECK(!strcmp(d.type, "float") && d.count == 1 && !strcmp(d.default_text, "0"));
}

/* Under on_error=skip, files that fail leave holes that refills fill or
 * that close up: the batch is mixed once complete, so the mixed batches
 * are the unmixed ones (after the same skips) mixed. */
static void test_skips_then_mix(void) {
  char *root = tu_tempdir();
  CHECK_EQ_INT(tu_make_folder(root, CLASSES, PER_CLASS, 40, 30), STK_OK);
  char p[4096];
  static const char junk[] = "\xff\xd8\xff not a JPEG";
  for (int c = 0; c < 2; c++) { /* 22 files, 2 bad: 20 images in 4 batches */
    snprintf(p, sizeof p, "%s/class%03d/bad.jpg", root, c);
    CHECK_EQ_INT(tu_write_bytes(p, junk, sizeof junk - 1), STK_OK);
  }
  stk_options o;
  base_opts(&o);
  o.root = root;
  o.on_error = STK_ON_ERROR_SKIP;
  o.max_skipped_fraction = 1;
  char err[512] = "";
  stk_loader *lp = NULL, *lm = NULL;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lp, err, sizeof err), STK_OK);
  o.mix_mixup_alpha = 0.5;
  o.mix_cutmix_alpha = 1.0;
  o.threads = 3;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &lm, err, sizeof err), STK_OK);
  static epoch_out plain, mixed;
  for (uint64_t ep = 0; ep < 3; ep++) {
    CHECK_EQ_INT(read_epoch(lp, ep, &plain), 4);
    CHECK_EQ_INT(read_epoch(lm, ep, &mixed), 4);
    CHECK_EQ_INT(plain.n[0] + plain.n[1] + plain.n[2] + plain.n[3], 20);
    CHECK(plain.n[0] < B || plain.n[1] < B || plain.n[2] < B); /* a batch closed up */
    for (int k = 0; k < 4; k++) check_batch(&plain, &mixed, k, 0, 0.0, CLASSES);
  }
  stk_stats st;
  CHECK(stk_loader_stats(lm, &st) == STK_OK && st.skipped == 6);
  stk_loader_destroy(lp);
  stk_loader_destroy(lm);
  tu_rmtree(root);
  free(root);
}

/* A program built against a header without the mix_ fields: its
 * stk_options ends before them and its stk_batch before mix_labels, and
 * the loader writes nothing past that. */
static void test_older_header(void) {
  stk_options o;
  memset(&o, 0, sizeof o);
  stk_options_init_sized(&o, offsetof(stk_options, mix_mixup_alpha));
  CHECK_EQ_INT(o.struct_size, offsetof(stk_options, mix_mixup_alpha));
  o.root = g_root;
  o.size = SIZE;
  o.batch_size = B;
  o.threads = 2;
  char err[512] = "";
  stk_loader *l = NULL;
  CHECK_EQ_INT(STK_LOADER_CREATE(&o, &l, err, sizeof err), STK_OK);
  stk_batch b;
  memset(&b, 0xa5, sizeof b); /* what follows the old struct in the caller's memory */
  CHECK_EQ_INT(stk_loader_next(l, &b), STK_OK);
  const unsigned char *tail = (const unsigned char *)&b + offsetof(stk_batch, mix_labels);
  int touched = 0;
  for (size_t i = 0; i < sizeof b - offsetof(stk_batch, mix_labels); i++) touched += tail[i] != 0xa5;
  CHECK_EQ_INT(touched, 0);
  CHECK(b.n == B && b.labels != NULL);
  CHECK_EQ_INT(stk_batch_release(l, &b), STK_OK);
  stk_loader_destroy(l);
}

int main(void) {
  g_root = tu_tempdir();
  CHECK_EQ_INT(tu_make_folder(g_root, CLASSES, PER_CLASS, 40, 30), STK_OK);
  test_flags();
  test_older_header();
  test_refused();
  test_torchvision_mode();
  test_timm_mode();
  test_uint8_nhwc_matches_the_draw();
  test_skips_then_mix();
  tu_rmtree(g_root);
  free(g_root);
  return CHECK_DONE();
}
