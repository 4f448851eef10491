/*
 * mix.h: MixUp/CutMix of the loader's batches (the options' mix_ fields):
 * the soft labels' set-up from the options and the source's classes, and
 * each batch's draw with its soft labels. The pixels are mixed by
 * stk__mix_apply (ops/augment.h) on the host, or by a sink's mix operation
 * (the GPU's, sink.h).
 */
#ifndef STK_LOADER_MIX_H
#define STK_LOADER_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "ops/augment.h"
#include "stoker.h"

typedef struct {
  int classes;   /* the soft labels' columns; 0 = batches are not mixed */
  float on, off; /* the soft labels' one-hot values */
} stk__mix_labels;

/* Sets up *ml from the options (validated) and the source's number of
 * classes (0 = unknown): all zero when neither alpha is on. STK_OK, or
 * STK_EINVAL with the reason when the columns cannot hold every label. */
int stk__mix_labels_init(stk__mix_labels *ml, const stk_options *o, int nclasses, char *err,
                         size_t errlen);

/* The draw of batch `batch` of `epoch` (keyed by the options' seed), and
 * the soft labels of its n labels into soft (n x ml->classes). */
void stk__mix_labels_draw(const stk__mix_labels *ml, const stk_options *o, uint64_t epoch,
                          int64_t batch, const int64_t *labels, int64_t n, stk__mix *m,
                          float *soft);

#endif
