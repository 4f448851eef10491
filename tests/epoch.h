/*
 * epoch.h: the loop the C tests run a loader through: one epoch, every
 * image byte, index and label appended to what the caller passes (each may
 * be NULL). Include after check.h.
 */
#ifndef STK_TEST_EPOCH_H
#define STK_TEST_EPOCH_H

#include <string.h>

#include "core/common.h"
#include "stoker.h"

static inline int64_t tu_run_epoch(stk_loader *l, stk__buf *pix, size_t *npix, int64_t *idx,
                                   int64_t *lab) {
  int64_t count = 0;
  for (;;) {
    stk_batch b;
    int rc = stk_loader_next(l, &b);
    if (rc == STK_EEND) break;
    CHECK_MSG(rc == STK_OK, "next: %s", stk_loader_error(l));
    if (rc) break;
    if (pix) {
      stk__buf_reserve(pix, *npix + b.nbytes);
      memcpy((char *)pix->p + *npix, b.data, b.nbytes);
      *npix += b.nbytes;
    }
    for (int64_t i = 0; i < b.n; i++) {
      if (idx) idx[count] = b.indices[i];
      if (lab) lab[count] = b.labels[i];
      /* every source's labels reach the batch as its table has them */
      CHECK_EQ_INT(b.labels[i], stk_loader_sample_label(l, b.indices[i]));
      count++;
    }
    CHECK_EQ_INT(stk_batch_release(l, &b), STK_OK);
  }
  return count;
}

#endif
