/*
 * mix.c: MixUp/CutMix of the loader's batches: the soft labels' set-up and
 * each batch's draw (mix.h).
 */
#include "loader/mix.h"

#include <string.h>

#include "core/common.h"

int stk__mix_labels_init(stk__mix_labels *ml, const stk_options *o, int nclasses, char *err,
                         size_t errlen) {
  memset(ml, 0, sizeof *ml);
  if (!(o->mix_mixup_alpha > 0 || o->mix_cutmix_alpha > 0)) return STK_OK;
  int nc = nclasses, cols = o->mix_classes ? o->mix_classes : nc;
  /* a label without its column would drop out of its row's weights */
  if (cols < 1)
    return stk__fail(err, errlen, STK_EINVAL,
                     "mix_classes: num_classes is unknown for this source: set mix_classes");
  if (cols < nc)
    return stk__fail(err, errlen, STK_EINVAL,
                     "mix_classes: num_classes=%d is less than the source's %d classes (labels 0 "
                     "to %d)",
                     cols, nc, nc - 1);
  ml->classes = cols;
  /* timm's mixup_target: off = eps / classes, on = 1 - eps + off, each
   * rounded once to float from double, as torch.full and scatter_ do */
  double off = o->mix_label_smoothing / cols;
  ml->off = (float)off;
  ml->on = (float)(1.0 - o->mix_label_smoothing + off);
  return STK_OK;
}

/* The soft labels of a batch of n with the draw m: row i is image i's
 * one-hot (values on, off) times lambda plus its partner's times
 * 1 - lambda, in the order of operations of torchvision's
 * one_hot(y).roll(1).mul_(1 - lam).add_(one_hot(y).mul(lam)) and of timm's
 * mixup_target (flip(0)), so that the floats are theirs. */
static void soft_labels(const stk__mix *m, const int64_t *y, int64_t n, int classes, float on,
                        float off, float *out) {
  float a = (float)m->lam, b = (float)(1.0 - m->lam);
  /* an element's value depends only on whether it is the label of the
   * partner (p) and of image i itself (c): four values */
  float v[2][2];
  for (int p = 0; p < 2; p++)
    for (int c = 0; c < 2; c++) {
      float t = (p ? on : off) * b;
      v[p][c] = t + (c ? on : off) * a;
    }
  for (int64_t i = 0; i < n; i++) {
    int64_t q = m->pair_flip ? n - 1 - i : i == 0 ? n - 1 : i - 1;
    float *row = out + i * classes;
    for (int k = 0; k < classes; k++) row[k] = v[0][0];
    if (y[q] >= 0 && y[q] < classes) row[y[q]] = v[1][y[q] == y[i]];
    if (y[i] >= 0 && y[i] < classes) row[y[i]] = v[y[q] == y[i]][1];
  }
}

void stk__mix_labels_draw(const stk__mix_labels *ml, const stk_options *o, uint64_t epoch,
                          int64_t batch, const int64_t *labels, int64_t n, stk__mix *m,
                          float *soft) {
  int sz = o->size;
  if (o->mix_mode == STK_MIX_TIMM) {
    stk__mix_timm t = {o->mix_mixup_alpha, o->mix_cutmix_alpha, o->mix_prob, o->mix_switch_prob,
                       o->mix_correct_lam};
    stk__mix_draw_timm(&t, o->seed, epoch, batch, sz, sz, m);
  } else {
    stk__mix_draw(o->mix_mixup_alpha, o->mix_cutmix_alpha, o->seed, epoch, batch, sz, sz, m);
  }
  soft_labels(m, labels, n, ml->classes, ml->on, ml->off, soft);
}
