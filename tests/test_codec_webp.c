/*
 * test_codec_webp.c: WebP through the decoder: a lossless file (RGB and
 * RGBA) decodes to exactly the pixels encoded, alpha dropped without
 * compositing; a lossy one to what libwebp's own RGB decode gives; a
 * truncated file, the pixel limit and the memory budget are refused from
 * the header with their reasons.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <webp/decode.h>
#include <webp/encode.h>

#include "check.h"
#include "codecs/codec.h"
#include "stoker.h"

#define W 37
#define H 23

static void fill(uint8_t *p, int ch) {
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < ch; c++)
        p[((size_t)y * W + x) * ch + c] = (uint8_t)(c == 3 ? 1 + (x * 11) % 255 : x * 5 + y * 9 + c * 80 + (x ^ y));
}

static int decode(stk__decoder *d, const uint8_t *buf, size_t n, stk__region *r, char *msg) {
  return stk__decoder_decode(d, buf, n, NULL, 1, r, msg, 256);
}

int main(void) {
  stk__decoder *d = stk__decoder_create();
  char msg[256] = "";
  stk__region r;
  uint8_t rgba[W * H * 4], rgb[W * H * 3];
  fill(rgba, 4);
  fill(rgb, 3);

  /* lossless RGB and RGBA: exact, alpha ignored (never 0: the encoder may
   * change the colour under a transparent pixel) */
  for (int alpha = 0; alpha < 2; alpha++) {
    uint8_t *enc = NULL;
    size_t n = alpha ? WebPEncodeLosslessRGBA(rgba, W, H, W * 4, &enc)
                     : WebPEncodeLosslessRGB(rgb, W, H, W * 3, &enc);
    CHECK(n > 0);
    stk__image_info info;
    CHECK_EQ_INT(stk__decoder_header(d, enc, n, &info, msg, sizeof msg), STK_OK);
    CHECK_EQ_INT(info.format, STK__FMT_WEBP);
    CHECK_EQ_INT(info.width, W);
    CHECK_EQ_INT(info.height, H);
    CHECK_EQ_INT(info.components, alpha ? 4 : 3);
    int rc = decode(d, enc, n, &r, msg);
    CHECK_MSG(rc == STK_OK, "lossless %s: %s", alpha ? "RGBA" : "RGB", msg);
    if (!rc) {
      int bad = 0;
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
          for (int c = 0; c < 3; c++) {
            uint8_t want = alpha ? rgba[((size_t)y * W + x) * 4 + c] : rgb[((size_t)y * W + x) * 3 + c];
            bad += r.pixels[(size_t)y * r.stride + 3 * x + c] != want;
          }
      CHECK_MSG(bad == 0, "lossless %s: %d samples differ", alpha ? "RGBA" : "RGB", bad);
    }
    /* truncated anywhere: an error that names the format */
    for (size_t cut = 12; cut < n; cut += n / 7 + 1) {
      uint8_t *p = malloc(cut);
      memcpy(p, enc, cut);
      rc = decode(d, p, cut, &r, msg);
      CHECK_MSG(rc == STK_EDECODE && strstr(msg, "WebP"), "cut at %zu of %zu: %d %s", cut, n, rc, msg);
      free(p);
    }
    /* the memory budget, from the header: lossless needs 4 bytes a pixel */
    stk__decoder_set_max_bytes(d, 1000);
    CHECK_EQ_INT(decode(d, enc, n, &r, msg), STK_ELIMIT);
    CHECK_MSG(strstr(msg, "max_decode_bytes=1000") != NULL, "%s", msg);
    stk__decoder_set_max_bytes(d, 128 << 20);
    stk__decoder_set_limits(d, W * H - 1);
    CHECK_EQ_INT(decode(d, enc, n, &r, msg), STK_ELIMIT);
    stk__decoder_set_limits(d, 0);
    WebPFree(enc);
  }

  /* lossy: what libwebp's own RGB decode gives */
  uint8_t *enc = NULL;
  size_t n = WebPEncodeRGB(rgb, W, H, W * 3, 80, &enc);
  CHECK(n > 0);
  int w = 0, h = 0;
  uint8_t *ref = WebPDecodeRGB(enc, n, &w, &h);
  CHECK(ref != NULL && w == W && h == H);
  CHECK_EQ_INT(decode(d, enc, n, &r, msg), STK_OK);
  int bad = 0;
  for (int y = 0; y < H && ref; y++) bad += memcmp(r.pixels + (size_t)y * r.stride, ref + (size_t)y * W * 3, W * 3) != 0;
  CHECK_EQ_INT(bad, 0);
  WebPFree(ref);
  /* a corrupt bitstream after a good header */
  for (size_t i = 40; i < n; i++) enc[i] ^= 0x5A;
  CHECK_EQ_INT(decode(d, enc, n, &r, msg), STK_EDECODE);
  WebPFree(enc);

  stk__decoder_destroy(d);
  return CHECK_DONE();
}
