/*
 * fuzz_jpeg.c: the JPEG decode path with the pipeline's settings: the
 * header, then a full decode and a region decode, at full size and at a
 * DCT scale, all through one reused stk__decoder as a worker uses it; each
 * region must hold the same pixels as the whole image's decode.
 *
 * Input: 5 control bytes, then the file. Control byte 0 picks the scale
 * (1, 2, 4 or 8 from its low bits) and, with bit 2, a second whole decode
 * by a new decoder, which must agree with the reused one's; bytes 1-4 place
 * the crop: x and y as a fraction of the image, then w and h as a fraction
 * of what is left.
 */
#include <stdlib.h>
#include <string.h>

#include "codecs/codec.h"
#include "codecs/encode.h"
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

/* The last whole-image decode, kept to compare regions with. */
static uint8_t *g_full;
static size_t g_full_cap;
static stk__region g_full_r;

static int decode(const uint8_t *img, size_t n, const stk__rect *want, int denom,
                  const stk__image_info *info, stk__region *r) {
  char msg[256];
  int rc = stk__decoder_decode(g_dec, img, n, want, denom, r, msg, sizeof msg);
  fuzz_note("jpeg: decode 1/%d %s: rc %d %s", denom, want ? "region" : "whole", rc, rc ? msg : "");
  if (rc == STK_OK) check_region(r, want, denom, info);
  return rc;
}

/* The whole image at 1/denom, then the region at 1/denom: the region's
 * pixels are the whole image's (a cropped decode gives every pixel its
 * real neighbours). A file whose whole decode fails is only decoded. */
static int decode_pair(const uint8_t *img, size_t n, const stk__rect *want, int denom,
                       const stk__image_info *info) {
  stk__region r;
  int full_rc = decode(img, n, NULL, denom, info, &r), full_ok = full_rc == STK_OK;
  if (full_ok) {
    size_t bytes = (size_t)r.h * r.stride;
    if (bytes > g_full_cap) {
      free(g_full);
      if (!(g_full = malloc(bytes))) abort();
      g_full_cap = bytes;
    }
    memcpy(g_full, r.pixels, bytes);
    g_full_r = r;
  }
  if (decode(img, n, want, denom, info, &r) != STK_OK || !full_ok) return full_rc;
  FUZZ_CHECK(r.image_w == g_full_r.image_w && r.image_h == g_full_r.image_h);
  for (int y = 0; y < r.h; y++) {
    const uint8_t *a = r.pixels + (size_t)y * r.stride;
    const uint8_t *b = g_full + (size_t)(r.y + y) * g_full_r.stride + (size_t)r.x * 3;
    FUZZ_CHECK(memcmp(a, b, (size_t)r.w * 3) == 0);
  }
  return full_rc;
}

/* A valid image, decoded by the reused decoder before each input, as a
 * worker's decoder has always just decoded another file. */
static uint8_t *g_primer;
static size_t g_primer_len;

static void make_primer(void) {
  uint8_t px[16 * 16 * 3];
  for (size_t i = 0; i < sizeof px; i++) px[i] = (uint8_t)(i * 37);
  stk__jpeg_enc_opts o;
  stk__jpeg_enc_defaults(&o);
  if (stk__jpeg_encode(px, 16, 16, &o, &g_primer, &g_primer_len) != STK_OK) abort();
}

/* The reused decoder gives what a new one gives: the same result and, when
 * it succeeds, the same pixels (g_full, from decode_pair at 1/1). */
static void check_fresh(const uint8_t *img, size_t n, int reused_rc) {
  stk__decoder *f = stk__decoder_create();
  if (!f) abort();
  stk__decoder_set_limits(f, FUZZ_MAX_PIXELS);
  stk__region r;
  char msg[256];
  int rc = stk__decoder_decode(f, img, n, NULL, 1, &r, msg, sizeof msg);
  FUZZ_CHECK(rc == reused_rc);
  if (rc == STK_OK) {
    FUZZ_CHECK(r.w == g_full_r.w && r.h == g_full_r.h);
    for (int y = 0; y < r.h; y++)
      FUZZ_CHECK(memcmp(r.pixels + (size_t)y * r.stride, g_full + (size_t)y * g_full_r.stride,
                        (size_t)r.w * 3) == 0);
  }
  stk__decoder_destroy(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_dec) {
    g_dec = stk__decoder_create();
    if (!g_dec) abort();
    stk__decoder_set_limits(g_dec, FUZZ_MAX_PIXELS);
    make_primer();
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
  stk__region pr;
  char pmsg[256];
  FUZZ_CHECK(stk__decoder_decode(g_dec, g_primer, g_primer_len, NULL, 1, &pr, pmsg, sizeof pmsg) ==
             STK_OK);
  int rc = decode_pair(img, n, &want, 1, &info);
  if (c[0] & 4) check_fresh(img, n, rc);
  if (denom > 1) decode_pair(img, n, &want, denom, &info);
  return 0;
}
