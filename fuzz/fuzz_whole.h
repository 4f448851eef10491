/*
 * fuzz_whole.h: the decode path the formats without region decoding share
 * (BMP, PPM/PGM, WebP, TIFF): the header, then the whole image to RGB8,
 * through one reused stk__decoder. Each target is this with its name.
 */
#ifndef STK_FUZZ_WHOLE_H
#define STK_FUZZ_WHOLE_H

#include <stdlib.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "fuzz.h"

static int fuzz_decode_whole(const char *name, const uint8_t *data, size_t size) {
  static stk__decoder *dec;
  if (!dec) {
    dec = stk__decoder_create();
    if (!dec) abort();
    stk__decoder_set_limits(dec, FUZZ_MAX_PIXELS);
  }
  stk__image_info info;
  char msg[256];
  if (stk__decoder_header(dec, data, size, &info, msg, sizeof msg) != STK_OK) return 0;
  FUZZ_CHECK(info.width > 0 && info.height > 0);
  FUZZ_CHECK((uint64_t)info.width * (uint64_t)info.height <= FUZZ_MAX_PIXELS);
  stk__region r;
  int rc = stk__decoder_decode(dec, data, size, NULL, 1, &r, msg, sizeof msg);
  fuzz_note("%s: %dx%d: rc %d %s", name, info.width, info.height, rc, rc ? msg : "");
  if (rc != STK_OK) return 0;
  FUZZ_CHECK(r.x == 0 && r.y == 0 && r.w == info.width && r.h == info.height);
  FUZZ_CHECK(r.image_w == r.w && r.image_h == r.h && r.stride >= (size_t)r.w * 3);
  for (int y = 0; y < r.h; y++) fuzz_touch(r.pixels + (size_t)y * r.stride, (size_t)r.w * 3);
  return 0;
}

#endif
