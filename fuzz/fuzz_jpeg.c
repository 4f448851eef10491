/*
 * fuzz_jpeg.c: the JPEG decode path with the pipeline's settings: the
 * header, then a full decode, a region decode and a DCT-scaled region
 * decode, all through one reused stk__decoder as a worker uses it.
 *
 * Input: 5 control bytes, then the file. Control byte 0 picks the scale
 * (1, 2, 4 or 8 from its low bits); bytes 1-4 place the crop: x and y as a
 * fraction of the image, then w and h as a fraction of what is left.
 */
#include <stdlib.h>

#include "codecs/codec.h"
#include "core/common.h"
#include "fuzz.h"

static stk__decoder *g_dec;

/* The returned region lies inside the scaled image and covers the
 * requested one scaled down; every pixel of it is read. */
static void check_region(const stk__region *r, const stk__rect *want, int denom,
                         const stk__image_info *info) {
  FUZZ_CHECK(r->scale_denom == denom);
  FUZZ_CHECK(r->w > 0 && r->h > 0 && r->x >= 0 && r->y >= 0);
  FUZZ_CHECK(r->x + r->w <= r->image_w && r->y + r->h <= r->image_h);
  FUZZ_CHECK(r->image_w <= info->width && r->image_h <= info->height);
  FUZZ_CHECK(r->stride >= (size_t)r->w * 3);
  if (want) {
    FUZZ_CHECK(r->x <= want->x / denom && r->y <= want->y / denom);
    int x1 = (want->x + want->w + denom - 1) / denom, y1 = (want->y + want->h + denom - 1) / denom;
    FUZZ_CHECK(r->x + r->w >= (x1 < r->image_w ? x1 : r->image_w));
    FUZZ_CHECK(r->y + r->h >= (y1 < r->image_h ? y1 : r->image_h));
  }
  for (int y = 0; y < r->h; y++) fuzz_touch(r->pixels + (size_t)y * r->stride, (size_t)r->w * 3);
}

static void decode(const uint8_t *img, size_t n, const stk__rect *want, int denom,
                   const stk__image_info *info) {
  stk__region r;
  char msg[256];
  int rc = stk__decoder_decode(g_dec, img, n, want, denom, &r, msg, sizeof msg);
  fuzz_note("jpeg: decode 1/%d %s: rc %d %s", denom, want ? "region" : "whole", rc, rc ? msg : "");
  if (rc == STK_OK) check_region(&r, want, denom, info);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dec) {
    g_dec = stk__decoder_create();
    if (!g_dec) abort();
    stk__decoder_set_limits(g_dec, FUZZ_MAX_PIXELS);
  }
  if (size < 5) return 0;
  const uint8_t *c = data, *img = data + 5;
  size_t n = size - 5;
  stk__image_info info;
  char msg[256];
  if (stk__decoder_header(g_dec, img, n, &info, msg, sizeof msg) != STK_OK) {
    fuzz_note("jpeg: header: %s", msg);
    return 0;
  }
  FUZZ_CHECK(info.width > 0 && info.height > 0);
  FUZZ_CHECK((uint64_t)info.width * (uint64_t)info.height <= FUZZ_MAX_PIXELS);
  int denom = 1 << (c[0] & 3);
  stk__rect want;
  want.x = (int)((int64_t)info.width * c[1] / 256);
  want.y = (int)((int64_t)info.height * c[2] / 256);
  want.w = 1 + (int)((int64_t)(info.width - want.x - 1) * c[3] / 255);
  want.h = 1 + (int)((int64_t)(info.height - want.y - 1) * c[4] / 255);
  decode(img, n, NULL, 1, &info);
  decode(img, n, &want, 1, &info);
  decode(img, n, &want, denom, &info);
  return 0;
}
