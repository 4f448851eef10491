/*
 * test_codec_png.c: every PNG colour type and depth decodes to the RGB8
 * values that were encoded: palette entries are looked up, grey is copied to
 * all three channels, 16-bit samples keep their high byte, alpha is dropped.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codecs/codec.h"
#include "codecs/encode.h"
#include "stoker.h"

static const uint8_t palette[7 * 3] = {
    0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 255, 0, 0, 0, 255, 12, 34, 56, 200, 100, 50,
};

static int channels_of(stk__png_color c) {
  switch (c) {
  case STK__PNG_GREY: return 1;
  case STK__PNG_GREY_ALPHA: return 2;
  case STK__PNG_RGB: return 3;
  case STK__PNG_RGBA: return 4;
  case STK__PNG_PALETTE: return 1;
  }
  return 0;
}

/* A sample value that varies over the image and uses the full 16 bits. */
static uint16_t sample(int x, int y, int c) {
  return (uint16_t)((x * 2731 + y * 977 + c * 13007 + x * y * 31) & 0xFFFF);
}

/* Encodes a w x h test image of `color` at `depth`, decodes it, and checks
 * every pixel against the value it should have. */
static void round_trip(stk__decoder *dec, stk__png_color color, int depth, int w, int h) {
  int ch = channels_of(color), bps = depth / 8;
  uint8_t *px = malloc((size_t)w * h * ch * bps);
  uint8_t *expect = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++) {
    for (int x = 0; x < w; x++) {
      size_t i = (size_t)y * w + x;
      for (int c = 0; c < ch; c++) {
        uint16_t v = sample(x, y, c);
        if (color == STK__PNG_PALETTE) v = (uint16_t)((x + 3 * y) % 7);
        uint8_t *dst = px + (i * ch + c) * bps;
        if (bps == 2) {
          dst[0] = (uint8_t)(v >> 8); /* big-endian */
          dst[1] = (uint8_t)v;
        } else {
          dst[0] = (uint8_t)(color == STK__PNG_PALETTE ? v : v >> 8);
        }
      }
      uint8_t *e = expect + i * 3;
      if (color == STK__PNG_PALETTE) {
        memcpy(e, palette + 3 * px[i], 3);
      } else {
        for (int c = 0; c < 3; c++) /* grey types repeat channel 0; alpha never shows */
          e[c] = (uint8_t)(sample(x, y, ch >= 3 ? c : 0) >> 8);
      }
    }
  }
  uint8_t *png = NULL;
  size_t n = 0;
  int rc = stk__png_encode(px, w, h, color, depth, color == STK__PNG_PALETTE ? palette : NULL,
                           color == STK__PNG_PALETTE ? 7 : 0, &png, &n);
  CHECK_MSG(rc == STK_OK, "encoding colour type %d depth %d", (int)color, depth);

  if (!rc) {
    char msg[256] = "";
    stk__image_info info;
    CHECK_EQ_INT(stk__decoder_header(dec, png, n, &info, msg, sizeof msg), STK_OK);
    CHECK_EQ_INT(info.format, STK__FMT_PNG);
    CHECK_EQ_INT(info.width, w);
    CHECK_EQ_INT(info.height, h);
    CHECK_EQ_INT(info.components, color == STK__PNG_PALETTE ? 3 : ch);

    /* A region and a scale are ignored: PNG always decodes whole, at 1/1. */
    stk__rect want = {w / 2, h / 2, (w + 1) / 2, (h + 1) / 2};
    stk__region r;
    rc = stk__decoder_decode(dec, png, n, &want, 4, &r, msg, sizeof msg);
    CHECK_MSG(rc == STK_OK, "decoding colour type %d depth %d: %s", (int)color, depth, msg);
    if (!rc) {
      CHECK(r.x == 0 && r.y == 0 && r.w == w && r.h == h && r.scale_denom == 1);
      CHECK(r.image_w == w && r.image_h == h && r.stride >= (size_t)w * 3);
      int bad = 0;
      for (int y = 0; y < h; y++)
        bad += memcmp(r.pixels + y * r.stride, expect + (size_t)y * w * 3, (size_t)w * 3) != 0;
      CHECK_MSG(bad == 0, "colour type %d depth %d %dx%d: %d rows differ", (int)color, depth, w, h,
                bad);
    }
  }
  free(png);
  free(px);
  free(expect);
}

int main(void) {
  stk__decoder *dec = stk__decoder_create();
  CHECK(dec != NULL);
  if (!dec) return CHECK_DONE();
  CHECK(strstr(stk__png_lib_version(), "spng") != NULL);

  static const struct {
    stk__png_color color;
    int depth;
  } kinds[] = {
      {STK__PNG_PALETTE, 8},     {STK__PNG_GREY, 8}, {STK__PNG_GREY, 16}, {STK__PNG_GREY_ALPHA, 8},
      {STK__PNG_GREY_ALPHA, 16}, {STK__PNG_RGB, 8},  {STK__PNG_RGB, 16},  {STK__PNG_RGBA, 8},
      {STK__PNG_RGBA, 16},
  };
  static const int sizes[][2] = {{1, 1}, {23, 11}, {300, 7}, {64, 64}};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
      round_trip(dec, kinds[k].color, kinds[k].depth, sizes[s][0], sizes[s][1]);

  stk__decoder_destroy(dec);
  return CHECK_DONE();
}
