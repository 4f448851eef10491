/*
 * test_codec_pnm.c: netpbm files built here decode as Pillow decodes them:
 * P5/P6 at maxval 255 copied, other maxvals scaled with Python's round
 * (ties to even), a PGM above maxval 255 clipped at 255 as Pillow's "I" to
 * "RGB" conversion does, PBM 1 = black, the plain (ASCII) forms with
 * comments; and the refusals: truncation, a bad maxval, a sample over it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codecs/codec.h"
#include "stoker.h"

#define W 11
#define H 5

static uint8_t buf[65536];

static int decode(stk__decoder *d, size_t n, stk__region *r, char *msg, size_t len) {
  return stk__decoder_decode(d, buf, n, NULL, 1, r, msg, len);
}

/* Sample c of pixel (x, y) at maxval m. */
static uint32_t sample(int x, int y, int c, uint32_t m) {
  return (uint32_t)((x * 7919u + y * 104729u + c * 31337u + (unsigned)(x * y) * 13u) % (m + 1));
}

/* The 8-bit result Pillow gives a sample v at maxval m. */
static uint8_t expect(uint32_t v, uint32_t m, int grey) {
  if (m == 255) return (uint8_t)v;
  double out_max = grey && m > 255 ? 65535.0 : 255.0;
  double r = grey && m == 65535 ? v : nearbyint((double)v / m * out_max);
  return (uint8_t)(r > 255 ? 255 : r);
}

/* Writes a P5/P6 (binary) or P2/P3 (plain) file; returns its size. */
static size_t make(int kind, uint32_t m) {
  int comps = kind == 3 || kind == 6 ? 3 : 1;
  int n = snprintf((char *)buf, sizeof buf, "P%d\n# a comment\n%d %d\n%u\n", kind, W, H, m);
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < comps; c++) {
        uint32_t v = sample(x, y, c, m);
        if (kind <= 3) {
          n += snprintf((char *)buf + n, sizeof buf - (size_t)n, "%u%s", v,
                        x == 0 && c == 0 ? "\n#x 1 2\n" : " ");
        } else if (m > 255) {
          buf[n++] = (uint8_t)(v >> 8), buf[n++] = (uint8_t)v;
        } else {
          buf[n++] = (uint8_t)v;
        }
      }
  return (size_t)n;
}

static void round_trip(stk__decoder *d, int kind, uint32_t m) {
  size_t n = make(kind, m);
  int comps = kind == 3 || kind == 6 ? 3 : 1;
  stk__region r;
  char msg[256] = "";
  int rc = decode(d, n, &r, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "P%d maxval %u: %s", kind, m, msg);
  if (rc) return;
  CHECK_EQ_INT(r.w, W);
  CHECK_EQ_INT(r.h, H);
  int bad = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < 3; c++) {
        uint8_t e = expect(sample(x, y, comps == 3 ? c : 0, m), m, comps == 1);
        bad += r.pixels[(size_t)y * r.stride + 3 * x + c] != e;
      }
  CHECK_MSG(bad == 0, "P%d maxval %u: %d samples differ", kind, m, bad);
}

int main(void) {
  stk__decoder *d = stk__decoder_create();
  CHECK(d != NULL);
  const uint32_t maxvals[] = {255, 1, 15, 100, 254, 256, 1023, 4095, 65534, 65535};
  const int kinds[] = {2, 3, 5, 6};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    for (size_t i = 0; i < sizeof maxvals / sizeof maxvals[0]; i++) round_trip(d, kinds[k], maxvals[i]);

  /* The scaled value of a tie rounds to even, as Python's round(): maxval 2
   * makes 1 -> 127.5 -> 128 (even), maxval 10 makes 1 -> 25.5 -> 26 */
  CHECK_EQ_INT(expect(1, 2, 1), 128);
  CHECK_EQ_INT(expect(1, 10, 1), 26);
  CHECK_EQ_INT(expect(3, 10, 1), 76); /* 76.5 */

  stk__region r;
  char msg[256];
  /* P4: rows padded to a byte, 1 is black */
  int n = snprintf((char *)buf, sizeof buf, "P4 10 2\n");
  buf[n++] = 0xA5, buf[n++] = 0xC0, buf[n++] = 0x00, buf[n++] = 0x40;
  CHECK_EQ_INT(decode(d, (size_t)n, &r, msg, sizeof msg), STK_OK);
  const uint8_t bits[2][10] = {{1, 0, 1, 0, 0, 1, 0, 1, 1, 1}, {0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
  int bad = 0;
  for (int y = 0; y < 2; y++)
    for (int x = 0; x < 10; x++) bad += r.pixels[(size_t)y * r.stride + 3 * x] != (bits[y][x] ? 0 : 255);
  CHECK_EQ_INT(bad, 0);
  /* P1: tokens need no whitespace between them */
  n = snprintf((char *)buf, sizeof buf, "P1\n3 2\n101 # c\n0 1\n1");
  CHECK_EQ_INT(decode(d, (size_t)n, &r, msg, sizeof msg), STK_OK);
  CHECK(r.pixels[0] == 0 && r.pixels[3] == 255 && r.pixels[6] == 0);
  CHECK(r.pixels[r.stride] == 255 && r.pixels[r.stride + 3] == 0 && r.pixels[r.stride + 6] == 0);

  /* refusals */
  size_t full = make(6, 255);
  CHECK_EQ_INT(decode(d, full - 1, &r, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "truncated") != NULL, "%s", msg);
  full = make(3, 1023);
  CHECK_EQ_INT(decode(d, full - 6, &r, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "truncated") != NULL, "%s", msg);
  n = snprintf((char *)buf, sizeof buf, "P2 2 1 10 3 11 ");
  CHECK_EQ_INT(decode(d, (size_t)n, &r, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "over maxval") != NULL, "%s", msg);
  n = snprintf((char *)buf, sizeof buf, "P5 2 1 70000 ab");
  CHECK_EQ_INT(decode(d, (size_t)n, &r, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "maxval") != NULL, "%s", msg);
  n = snprintf((char *)buf, sizeof buf, "P6 4");
  CHECK_EQ_INT(decode(d, (size_t)n, &r, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "header") != NULL, "%s", msg);
  /* the pixel limit, from the header, before any allocation */
  n = snprintf((char *)buf, sizeof buf, "P6 100000 100000 255\n");
  CHECK_EQ_INT(decode(d, (size_t)n, &r, msg, sizeof msg), STK_ELIMIT);
  CHECK(stk__decoder_scratch_bytes(d) < 1 << 20);

  stk__decoder_destroy(d);
  return CHECK_DONE();
}
