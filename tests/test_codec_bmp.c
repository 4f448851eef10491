/*
 * test_codec_bmp.c: BMP files built here byte by byte decode to the pixels
 * Pillow gives them: palettes (1, 4, 8 bits, and an index past the palette,
 * which Pillow shows as grey), 16-bit 5-5-5 and 5-6-5, 24-bit, 32-bit with
 * and without masks, bottom-up and top-down rows, the OS/2 header; and the
 * refusals: RLE, bad masks, truncation, the pixel limit before allocation.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codecs/codec.h"
#include "stoker.h"

typedef struct {
  uint8_t d[8192];
  size_t n;
} file;

static void put16(file *f, uint32_t v) {
  f->d[f->n++] = (uint8_t)v;
  f->d[f->n++] = (uint8_t)(v >> 8);
}
static void put32(file *f, uint32_t v) {
  put16(f, v & 0xFFFF);
  put16(f, v >> 16);
}

/* The expected colour of pixel (x, y) of every test image. */
static void colour(int x, int y, uint8_t rgb[3]) {
  rgb[0] = (uint8_t)(x * 37 + y * 11);
  rgb[1] = (uint8_t)(x * 5 + y * 71 + 3);
  rgb[2] = (uint8_t)(x * y * 13 + 100);
}

/* A BMP of w x h (h < 0: top-down) with a 40-byte info header (hsize 40;
 * 108 puts the masks in the header). `pixel` writes one pixel's bytes. */
typedef void (*pixel_fn)(file *f, int x, int y);
static int g_bits;

static void make(file *f, int hsize, int w, int h, int bits, uint32_t compression,
                 const uint32_t *masks, const uint8_t *pal, int ncol, pixel_fn pixel) {
  f->n = 0;
  int ah = h < 0 ? -h : h;
  size_t stride = (((size_t)w * bits + 31) / 32) * 4;
  size_t extra = compression == 3 && hsize == 40 ? 12 : 0;
  size_t off = 14 + (size_t)hsize + extra + (size_t)ncol * 4;
  f->d[f->n++] = 'B', f->d[f->n++] = 'M';
  put32(f, (uint32_t)(off + stride * ah));
  put32(f, 0);
  put32(f, (uint32_t)off);
  put32(f, (uint32_t)hsize);
  put32(f, (uint32_t)w);
  put32(f, (uint32_t)h);
  put16(f, 1);
  put16(f, (uint32_t)bits);
  put32(f, compression);
  put32(f, (uint32_t)(stride * ah));
  put32(f, 2835), put32(f, 2835);
  put32(f, (uint32_t)ncol);
  put32(f, 0);
  if (hsize > 40 || extra) {
    for (int c = 0; c < 3; c++) put32(f, masks ? masks[c] : 0);
  }
  while (f->n < 14 + (size_t)hsize + extra) f->d[f->n++] = 0;
  for (int i = 0; i < ncol; i++) {
    f->d[f->n++] = pal[3 * i + 2], f->d[f->n++] = pal[3 * i + 1], f->d[f->n++] = pal[3 * i];
    f->d[f->n++] = 0;
  }
  g_bits = bits;
  for (int r = 0; r < ah; r++) {
    int y = h < 0 ? r : ah - 1 - r; /* the stored row's image row */
    size_t start = f->n;
    if (bits < 8) {
      memset(f->d + f->n, 0, stride);
    }
    for (int x = 0; x < w; x++) pixel(f, x, y);
    if (bits < 8) f->n = start;
    f->n = start + stride;
  }
}

static uint8_t g_pal[16 * 3];

static int index_of(int x, int y, int bits) { return (x + 2 * y) % (bits == 1 ? 2 : bits == 4 ? 16 : 20); }

static void px_index(file *f, int x, int y) {
  /* f->n is the start of the row while the packed bits are written */
  int i = index_of(x, y, g_bits), per = 8 / g_bits;
  if (g_bits == 8) {
    f->d[f->n++] = (uint8_t)i;
    return;
  }
  f->d[f->n + (size_t)x / per] |= (uint8_t)(i << (8 - g_bits * (x % per + 1)));
}
static void px_24(file *f, int x, int y) {
  uint8_t c[3];
  colour(x, y, c);
  f->d[f->n++] = c[2], f->d[f->n++] = c[1], f->d[f->n++] = c[0];
}
static void px_32(file *f, int x, int y) { /* BGRX, X = junk alpha */
  px_24(f, x, y);
  f->d[f->n++] = (uint8_t)(x * 91);
}
static void px_rgba(file *f, int x, int y) { /* masks R=0xFF, G=0xFF00, B=0xFF0000 */
  uint8_t c[3];
  colour(x, y, c);
  f->d[f->n++] = c[0], f->d[f->n++] = c[1], f->d[f->n++] = c[2], f->d[f->n++] = 7;
}
static void px_555(file *f, int x, int y) {
  uint8_t c[3];
  colour(x, y, c);
  put16(f, (uint32_t)(c[0] >> 3) << 10 | (uint32_t)(c[1] >> 3) << 5 | (c[2] >> 3));
}
static void px_565(file *f, int x, int y) {
  uint8_t c[3];
  colour(x, y, c);
  put16(f, (uint32_t)(c[0] >> 3) << 11 | (uint32_t)(c[1] >> 2) << 5 | (c[2] >> 3));
}

/* Decodes f and compares with expect(x, y). */
typedef void (*expect_fn)(int x, int y, uint8_t rgb[3]);
static void check_image(stk__decoder *d, const file *f, int w, int h, expect_fn expect,
                        const char *what) {
  stk__region r;
  char msg[256] = "";
  int rc = stk__decoder_decode(d, f->d, f->n, NULL, 1, &r, msg, sizeof msg);
  CHECK_MSG(rc == STK_OK, "%s: %s", what, msg);
  if (rc) return;
  CHECK_EQ_INT(r.w, w);
  CHECK_EQ_INT(r.h, h);
  int bad = 0;
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      uint8_t e[3];
      expect(x, y, e);
      if (memcmp(r.pixels + (size_t)y * r.stride + 3 * x, e, 3) && !bad++)
        fprintf(stderr, "%s: first difference at (%d,%d): %d %d %d, expected %d %d %d\n", what,
                x, y, r.pixels[(size_t)y * r.stride + 3 * x],
                r.pixels[(size_t)y * r.stride + 3 * x + 1],
                r.pixels[(size_t)y * r.stride + 3 * x + 2], e[0], e[1], e[2]);
    }
  CHECK_MSG(bad == 0, "%s: %d pixels differ", what, bad);
}

static int g_ebits;
static void e_index(int x, int y, uint8_t rgb[3]) {
  int i = index_of(x, y, g_ebits);
  if (i < 16 && (g_ebits != 8 || i < 12)) {
    memcpy(rgb, g_pal + 3 * i, 3);
  } else {
    memset(rgb, i, 3); /* past the palette: Pillow's grey */
  }
}
static void e_colour(int x, int y, uint8_t rgb[3]) { colour(x, y, rgb); }
static void e_555(int x, int y, uint8_t rgb[3]) {
  colour(x, y, rgb);
  for (int c = 0; c < 3; c++) rgb[c] = (uint8_t)((rgb[c] >> 3) * 255 / 31);
}
static void e_565(int x, int y, uint8_t rgb[3]) {
  colour(x, y, rgb);
  rgb[0] = (uint8_t)((rgb[0] >> 3) * 255 / 31);
  rgb[1] = (uint8_t)((rgb[1] >> 2) * 255 / 63);
  rgb[2] = (uint8_t)((rgb[2] >> 3) * 255 / 31);
}

static int decode_rc(stk__decoder *d, const file *f, char *msg, size_t len) {
  stk__region r;
  return stk__decoder_decode(d, f->d, f->n, NULL, 1, &r, msg, len);
}

int main(void) {
  stk__decoder *d = stk__decoder_create();
  CHECK(d != NULL);
  for (int i = 0; i < 16 * 3; i++) g_pal[i] = (uint8_t)(i * 53 + 7);
  file *f = malloc(sizeof *f);
  const int W = 13, H = 7; /* odd sizes: row padding, partial bytes */

  int bits_list[3] = {1, 4, 8};
  for (int k = 0; k < 3; k++) {
    int bits = bits_list[k];
    int ncol = bits == 8 ? 12 : 1 << bits; /* 8-bit: indices 12..19 are past the palette */
    make(f, 40, W, H, bits, 0, NULL, g_pal, ncol, px_index);
    g_ebits = bits;
    char what[32];
    snprintf(what, sizeof what, "%d-bit palette", bits);
    check_image(d, f, W, H, e_index, what);
    stk__image_info info;
    char msg[256];
    CHECK_EQ_INT(stk__decoder_header(d, f->d, f->n, &info, msg, sizeof msg), STK_OK);
    CHECK_EQ_INT(info.format, STK__FMT_BMP);
    CHECK_EQ_INT(info.width, W);
    CHECK_EQ_INT(info.height, H);
  }
  make(f, 40, W, H, 24, 0, NULL, NULL, 0, px_24);
  check_image(d, f, W, H, e_colour, "24-bit bottom-up");
  make(f, 40, W, -H, 24, 0, NULL, NULL, 0, px_24);
  check_image(d, f, W, H, e_colour, "24-bit top-down");
  make(f, 40, W, H, 32, 0, NULL, NULL, 0, px_32);
  check_image(d, f, W, H, e_colour, "32-bit BGRX");
  make(f, 40, W, H, 16, 0, NULL, NULL, 0, px_555);
  check_image(d, f, W, H, e_555, "16-bit 5-5-5");
  uint32_t m565[3] = {0xF800, 0x7E0, 0x1F};
  make(f, 40, W, H, 16, 3, m565, NULL, 0, px_565);
  check_image(d, f, W, H, e_565, "16-bit 5-6-5 bit fields after a 40-byte header");
  make(f, 108, W, -H, 16, 3, m565, NULL, 0, px_565);
  check_image(d, f, W, H, e_565, "16-bit 5-6-5 bit fields in a v4 header");
  uint32_t mrgba[3] = {0xFF, 0xFF00, 0xFF0000};
  make(f, 124, W, H, 32, 3, mrgba, NULL, 0, px_rgba);
  check_image(d, f, W, H, e_colour, "32-bit RGBA bit fields in a v5 header");

  /* OS/2 1.x: 12-byte header, 16-bit sizes, 3-byte palette entries */
  {
    f->n = 0;
    size_t stride = ((W * 8 + 31) / 32) * 4, off = 14 + 12 + 16 * 3;
    f->d[f->n++] = 'B', f->d[f->n++] = 'M';
    put32(f, (uint32_t)(off + stride * H)), put32(f, 0), put32(f, (uint32_t)off);
    put32(f, 12), put16(f, W), put16(f, H), put16(f, 1), put16(f, 8);
    for (int i = 0; i < 16; i++)
      f->d[f->n++] = g_pal[3 * i + 2], f->d[f->n++] = g_pal[3 * i + 1], f->d[f->n++] = g_pal[3 * i];
    for (int r = 0; r < H; r++) {
      size_t start = f->n;
      for (int x = 0; x < W; x++) f->d[f->n++] = (uint8_t)(index_of(x, H - 1 - r, 4));
      f->n = start + stride;
    }
    g_ebits = 4;
    check_image(d, f, W, H, e_index, "OS/2 8-bit");
  }

  char msg[256];
  /* refusals, each with its reason */
  make(f, 40, W, H, 8, 1, NULL, g_pal, 16, px_index);
  CHECK_EQ_INT(decode_rc(d, f, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "RLE") != NULL, "%s", msg);
  uint32_t bad_masks[3] = {0xF0F0, 0x0F00, 0x000F};
  make(f, 40, W, H, 16, 3, bad_masks, NULL, 0, px_565);
  CHECK_EQ_INT(decode_rc(d, f, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "bit-field") != NULL, "%s", msg);
  make(f, 40, W, H, 24, 0, NULL, NULL, 0, px_24);
  size_t full = f->n;
  f->n = full - 10;
  CHECK_EQ_INT(decode_rc(d, f, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "truncated") != NULL, "%s", msg);
  f->n = 30;
  CHECK_EQ_INT(decode_rc(d, f, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "truncated") != NULL, "%s", msg);
  f->n = full;
  f->d[28] = 2; /* bits = 2 */
  CHECK_EQ_INT(decode_rc(d, f, msg, sizeof msg), STK_EDECODE);
  CHECK_MSG(strstr(msg, "depth") != NULL, "%s", msg);
  /* a header claiming 60000 x 60000 is refused from the header, before the
   * pixels are allocated or the (missing) data is looked at */
  make(f, 40, W, H, 24, 0, NULL, NULL, 0, px_24);
  f->d[18] = 0x60, f->d[19] = 0xEA, f->d[22] = 0x60, f->d[23] = 0xEA;
  CHECK_EQ_INT(decode_rc(d, f, msg, sizeof msg), STK_ELIMIT);
  CHECK_MSG(strstr(msg, "over the limit") != NULL, "%s", msg);
  CHECK(stk__decoder_scratch_bytes(d) < 1 << 20);

  free(f);
  stk__decoder_destroy(d);
  return CHECK_DONE();
}
