/* check.c: whole-image decodes used to vet files (stoker check). */
#include <stdio.h>
#include <string.h>

#include "loader/bounded_read.h"
#include "loader/pipeline.h"

/* Decodes `data` in full; its size goes to *w, *h. */
static int check_bytes(stk__worker *wk, const uint8_t *data, size_t len, int *w, int *h, char *msg,
                       size_t msglen) {
  stk__image_info info;
  int rc = stk__decoder_header(wk->dec, data, len, &info, msg, msglen);
  stk__region reg;
  if (!rc) rc = stk__decoder_decode(wk->dec, data, len, NULL, 1, &reg, msg, msglen);
  if (!rc) {
    if (w) *w = reg.image_w;
    if (h) *h = reg.image_h;
  }
  return rc;
}

static int check_worker(stk__worker *wk, const stk_options *opt, char *msg, size_t msglen) {
  stk__plan plan;
  memset(&plan, 0, sizeof plan);
  plan.max_pixels = opt->max_pixels;
  plan.max_decode_bytes = opt->max_decode_bytes;
  plan.max_decode_bytes_set = 1;
  if (msg && msglen) msg[0] = '\0';
  if (stk__worker_init(wk, &plan)) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  return STK_OK;
}

int stk_check_file(const char *path, const stk_options *opt, int *w, int *h, char *msg,
                   size_t msglen) {
  stk_options def;
  if (!opt) {
    stk_options_init(&def);
    opt = &def;
  }
  stk__worker wk;
  int rc = check_worker(&wk, opt, msg, msglen);
  if (rc) return rc;
  stk__bytes b;
  rc = stk__read_whole_file(path, &wk.file, opt->max_file_bytes, &b, msg, msglen);
  if (!rc) rc = check_bytes(&wk, b.data, b.len, w, h, msg, msglen);
  stk__worker_free(&wk);
  return rc;
}

int stk__check_sample(const stk__source *src, int64_t i, const stk_options *opt, int *w, int *h,
                      char *msg, size_t msglen) {
  return stk__check_sample_bounded(src, i, opt, NULL, w, h, msg, msglen);
}

int stk__check_sample_bounded(const stk__source *src, int64_t i, const stk_options *opt,
                              stk__bounded_reader *br, int *w, int *h, char *msg, size_t msglen) {
  stk__worker wk;
  int rc = check_worker(&wk, opt, msg, msglen);
  if (rc) return rc;
  if (src->ops->verify) rc = src->ops->verify(src, i, msg, msglen);
  if (!rc && src->ops->pixels) {
    stk__pixels px;
    rc = src->ops->pixels(src, i, &px, msg, msglen);
    if (!rc && w) *w = px.w;
    if (!rc && h) *h = px.h;
  } else if (!rc) {
    stk__bytes b;
    rc = br ? stk__bounded_read_sample(br, src, i, opt->max_file_bytes, &b, msg, msglen)
            : src->ops->read(src, i, &wk.file, opt->max_file_bytes, &b, msg, msglen);
    if (!rc) rc = check_bytes(&wk, b.data, b.len, w, h, msg, msglen);
  }
  stk__worker_free(&wk);
  return rc;
}
