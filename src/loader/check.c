/* check.c: stk_check_file, a whole-image decode used to vet files. */
#include <string.h>

#include "loader/pipeline.h"

int stk_check_file(const char *path, const stk_options *opt, int *w, int *h, char *msg,
                   size_t msglen) {
  stk_options def;
  if (!opt) {
    stk_options_init(&def);
    opt = &def;
  }
  if (msg && msglen) msg[0] = '\0';
  stk__worker wk;
  stk__plan plan;
  memset(&plan, 0, sizeof plan);
  plan.max_pixels = opt->max_pixels;
  if (stk__worker_init(&wk, &plan)) return stk__fail(msg, msglen, STK_ENOMEM, "out of memory");
  int rc = stk__read_file(&wk, &wk.file, path, opt->max_file_bytes, msg, msglen);
  stk__image_info info;
  if (!rc) rc = stk__decoder_header(wk.dec, wk.file.p, wk.bytes, &info, msg, msglen);
  stk__region reg;
  if (!rc) rc = stk__decoder_decode(wk.dec, wk.file.p, wk.bytes, NULL, 1, &reg, msg, msglen);
  if (!rc) {
    if (w) *w = reg.image_w;
    if (h) *h = reg.image_h;
  }
  stk__worker_free(&wk);
  return rc;
}
